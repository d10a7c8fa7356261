// nanscope-merge's core: reads the per-rank evidence files (rank_evidence.hpp) and names the first producing
// site of a non-finite value, ordered by happens-before (program order on each rank plus collective and
// send/recv edges), never by wall clocks. Header-only so that unit tests feed it synthetic rank files.
// The model and the exit codes are in docs/multi-rank.md.
#ifndef NANSCOPE_TOOLS_MERGE_HPP
#define NANSCOPE_TOOLS_MERGE_HPP

#include <nanscope/detail/read_file.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>

namespace nanscope_merge {

using json = nlohmann::json;

/// Exit statuses of nanscope-merge.
enum exit_code : int { no_fault = 0, fault = 1, error = 2, incomplete = 3 };

/// A problem with the input (exit 2): the message names the file and what is wrong.
class input_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The largest world size accepted (the largest MPI jobs run about a million ranks): a damaged file's size
/// must not make the tool allocate per rank without bound.
inline constexpr int max_world_size = 1 << 22;
/// The largest evidence file read (a rank keeps a bounded ring of events: real files are far smaller).
inline constexpr long long max_file_bytes = 1LL << 30;

enum class ev_type { frame, checkpoint, collective, send, recv };

struct tensor_ev {
  std::string role;     // parameter, input, output, checkpoint
  std::string context;  // input[0], weight, output, ...
  bool nonfinite = false;  // non-finite values not allowed by a rule
};

struct event {
  std::uint64_t order = 0;
  ev_type type = ev_type::frame;
  std::uint64_t step = 0;
  // frames
  std::string module_path, cls;
  bool complete = true;
  std::vector<tensor_ev> tensors;
  // transfers
  std::string kind, comm, site;
  int comm_size = 0, comm_rank = -1, peer = -1, tag = 0;
  std::vector<int> members;
  std::uint64_t seq = 0;
  bool has_input = false, input_bad = false, has_output = false, output_bad = false;

  bool is_transfer() const { return type == ev_type::collective || type == ev_type::send || type == ev_type::recv; }
  /// The world rank of communicator rank r.
  int world_of(int r) const {
    if (members.empty()) return r;
    return r >= 0 && static_cast<std::size_t>(r) < members.size() ? members[static_cast<std::size_t>(r)] : -1;
  }
};

struct rank_file {
  std::string path;
  int rank = -1, world_size = 0;
  std::string host, reason;
  long long pid = 0;
  std::uint64_t dropped = 0;
  bool stopped = false;
  std::uint64_t stop_step = 0;
  std::vector<event> events;
};

namespace detail {
/// Evidence files nest a few levels; deeper input is refused while it is parsed (copying or comparing a deeply
/// nested value recurses once per level).
inline constexpr int max_nesting = 64;
inline json::parser_callback_t nesting_guard() {
  return [](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_nesting)
      throw input_error("nested more than " + std::to_string(max_nesting) + " levels deep");
    return true;
  };
}
inline const json& need(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end()) throw input_error(where + ": missing \"" + key + "\"");
  return *it;
}
/// The value v (named `what` in errors: where + ": \"key\"") as T. Integers must be JSON integers within T's
/// range: 1.5, 1e300, -5 for an unsigned field or 2^32 for an int are errors, never silently converted.
template <class T>
T value_as(const json& v, const std::string& what) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!v.is_number_integer()) throw input_error(what + " is not an integer (" + v.type_name() + ")");
    bool fits;
    if (v.is_number_unsigned()) {
      fits = v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    } else {
      const std::int64_t i = v.get<std::int64_t>();
      if constexpr (std::is_signed_v<T>)
        fits = i >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
               i <= static_cast<std::int64_t>(std::numeric_limits<T>::max());
      else
        fits = i >= 0 && static_cast<std::uint64_t>(i) <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    }
    if (!fits) throw input_error(what + " is out of range (" + v.dump() + ")");
    return v.is_number_unsigned() ? static_cast<T>(v.get<std::uint64_t>()) : static_cast<T>(v.get<std::int64_t>());
  } else {
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      throw input_error(what + " has the wrong type (" + v.type_name() + ")");
    }
  }
}
/// The value of key as T (value_as).
template <class T>
T get_as(const json& j, const char* key, const std::string& where) {
  return value_as<T>(need(j, key, where), where + ": \"" + key + "\"");
}
/// get_as for an optional key: `fallback` when it is absent.
template <class T>
T opt_as(const json& j, const char* key, T fallback, const std::string& where) {
  return j.contains(key) ? get_as<T>(j, key, where) : fallback;
}
/// Communicator ranks of one event, as world ranks in [0, world).
inline std::vector<int> get_members(const json& e, int world, const std::string& where) {
  const json& m = need(e, "members", where);
  if (!m.is_array()) throw input_error(where + ": \"members\" is not an array");
  std::vector<int> out;
  for (std::size_t i = 0; i < m.size(); ++i) {
    const int r = value_as<int>(m[i], where + ": members[" + std::to_string(i) + "]");
    if (r < 0 || r >= world)
      throw input_error(where + ": members[" + std::to_string(i) + "] is " + std::to_string(r) + ", not a rank of world size " +
                        std::to_string(world));
    out.push_back(r);
  }
  return out;
}
inline bool health_bad(const json& h, const std::string& where) {
  if (!h.is_object()) throw input_error(where + ": a health record is not an object");
  return get_as<bool>(h, "nonfinite", where);
}
}  // namespace detail

/// Parses one rank file's JSON. `path` names it in errors.
inline rank_file parse_rank_file(const json& j, const std::string& path) {
  using detail::get_as;
  if (!j.is_object()) throw input_error(path + ": not a JSON object");
  const auto fmt = j.find("format");
  if (fmt == j.end() || !fmt->is_string() || fmt->get_ref<const std::string&>() != "nanscope-rank-evidence")
    throw input_error(path + ": not a nanscope rank evidence file (\"format\" is not \"nanscope-rank-evidence\")");
  if (get_as<long long>(j, "version", path) != 1) throw input_error(path + ": unsupported version (this tool reads 1)");
  rank_file f;
  f.path = path;
  f.rank = get_as<int>(j, "rank", path);
  f.world_size = get_as<int>(j, "world_size", path);
  if (f.world_size <= 0 || f.rank < 0 || f.rank >= f.world_size)
    throw input_error(path + ": rank " + std::to_string(f.rank) + " of world size " + std::to_string(f.world_size) +
                      " is impossible");
  if (f.world_size > max_world_size)
    throw input_error(path + ": world size " + std::to_string(f.world_size) + " is beyond this tool's limit of " +
                      std::to_string(max_world_size) + " ranks");
  f.host = detail::opt_as<std::string>(j, "host", std::string(), path);
  f.reason = detail::opt_as<std::string>(j, "reason", std::string(), path);
  f.pid = detail::opt_as<long long>(j, "pid", 0LL, path);
  f.dropped = detail::opt_as<std::uint64_t>(j, "dropped_events", 0, path);
  if (j.contains("stop") && j["stop"].is_object()) {
    f.stopped = true;
    f.stop_step = get_as<std::uint64_t>(j["stop"], "step", path + ": stop");
  }
  const json& evs = detail::need(j, "events", path);
  if (!evs.is_array()) throw input_error(path + ": \"events\" is not an array");
  bool have_prev = false;
  std::uint64_t prev = 0;
  for (std::size_t i = 0; i < evs.size(); ++i) {
    const json& e = evs[i];
    const std::string where = path + ": event " + std::to_string(i);
    if (!e.is_object()) throw input_error(where + ": not an object");
    event ev;
    ev.order = get_as<std::uint64_t>(e, "order", where);
    if (have_prev && ev.order <= prev)
      throw input_error(where + ": order " + std::to_string(ev.order) + " does not follow " + std::to_string(prev) +
                        " (program order must increase)");
    have_prev = true;
    prev = ev.order;
    ev.step = get_as<std::uint64_t>(e, "step", where);
    const std::string type = get_as<std::string>(e, "type", where);
    if (type == "frame" || type == "checkpoint") {
      ev.type = type == "frame" ? ev_type::frame : ev_type::checkpoint;
      ev.module_path = get_as<std::string>(e, "module_path", where);
      ev.cls = detail::opt_as<std::string>(e, "class", std::string(), where);
      ev.complete = detail::opt_as<bool>(e, "complete", true, where);
      const json& ts = detail::need(e, "tensors", where);
      if (!ts.is_array()) throw input_error(where + ": \"tensors\" is not an array");
      for (const json& t : ts) {
        tensor_ev te;
        if (!t.is_object()) throw input_error(where + ": a tensor record is not an object");
        te.role = get_as<std::string>(t, "role", where);
        te.context = get_as<std::string>(t, "context", where);
        if (detail::opt_as<bool>(t, "tensor", true, where)) {
          const bool allowed = detail::opt_as<bool>(t, "allowed", false, where);
          te.nonfinite = detail::health_bad(detail::need(t, "health", where), where) && !allowed;
        }
        ev.tensors.push_back(std::move(te));
      }
    } else if (type == "collective" || type == "send" || type == "recv") {
      ev.type = type == "collective" ? ev_type::collective : type == "send" ? ev_type::send : ev_type::recv;
      ev.kind = get_as<std::string>(e, "kind", where);
      if ((ev.type == ev_type::collective) == (ev.kind == "send" || ev.kind == "recv"))
        throw input_error(where + ": type \"" + type + "\" with kind \"" + ev.kind + "\"");
      ev.comm = get_as<std::string>(e, "comm", where);
      ev.comm_size = get_as<int>(e, "comm_size", where);
      ev.comm_rank = get_as<int>(e, "comm_rank", where);
      if (ev.comm_size <= 0 || ev.comm_size > f.world_size || ev.comm_rank < 0 || ev.comm_rank >= ev.comm_size)
        throw input_error(where + ": rank " + std::to_string(ev.comm_rank) + " of communicator size " +
                          std::to_string(ev.comm_size) + " is impossible in world size " + std::to_string(f.world_size));
      ev.seq = get_as<std::uint64_t>(e, "seq", where);
      ev.site = detail::opt_as<std::string>(e, "site", std::string(), where);
      if (e.contains("members")) ev.members = detail::get_members(e, f.world_size, where);
      if (!ev.members.empty() && static_cast<int>(ev.members.size()) != ev.comm_size)
        throw input_error(where + ": " + std::to_string(ev.members.size()) + " members for communicator size " +
                          std::to_string(ev.comm_size));
      if (ev.type != ev_type::collective) {
        ev.peer = get_as<int>(e, "peer", where);
        ev.tag = get_as<int>(e, "tag", where);
        if (ev.peer < 0 || ev.peer >= ev.comm_size)
          throw input_error(where + ": peer " + std::to_string(ev.peer) + " is not a rank of communicator size " +
                            std::to_string(ev.comm_size));
      }
      if (e.contains("input")) {
        ev.has_input = true;
        ev.input_bad = detail::health_bad(e["input"], where);
      }
      if (e.contains("output")) {
        ev.has_output = true;
        ev.output_bad = detail::health_bad(e["output"], where);
      }
    } else {
      throw input_error(where + ": unknown event type \"" + type + "\"");
    }
    f.events.push_back(std::move(ev));
  }
  return f;
}

/// A site where a non-finite value appeared on a rank.
struct site {
  int rank = -1;
  std::uint64_t step = 0;
  std::uint64_t order = 0;
  std::string kind;         // produced | input | before_transfer | reduction | received
  std::string module_path;  // frames: the module; transfers: the site label
  std::string cls;
  std::string tensor;       // the tensor's context, or "input of all_reduce #3 on 'world'"
  std::string text;         // one line for people
};

/// One transfer that carried a non-finite value from some ranks to others.
struct carrier {
  std::string type;  // collective | send/recv
  std::string kind, comm, site;
  std::uint64_t seq = 0, step = 0;
  int tag = 0;
  std::vector<int> from, to;
  bool all_members = true;  // every member's record of the transfer is present
  std::string text;
};

struct result {
  int exit = no_fault;
  std::string verdict;  // no_fault | fault | incomplete | error
  std::string dir;
  int world_size = 0;
  std::vector<int> present, missing;
  std::vector<site> origins;          // the first producing site(s); several: concurrent
  std::vector<site> later_producers;  // producing sites that happen after an origin
  std::vector<carrier> chain;
  std::vector<int> receivers;         // ranks whose first non-finite value arrived through a transfer
  bool local_only = false;            // a fault that no marked transfer carried to another rank
  std::vector<std::string> notes;     // what is missing and what that means
  std::string error;
};

namespace detail {

inline std::string ranks_text(const std::vector<int>& r) {
  std::string s = r.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s;
}
inline std::string transfer_name(const event& e) {
  if (e.type == ev_type::collective) return e.kind + " #" + std::to_string(e.seq) + " on '" + e.comm + "'";
  return e.kind + " #" + std::to_string(e.seq) + " (" + (e.type == ev_type::send ? "to" : "from") + " " +
         std::to_string(e.peer) + ", tag " + std::to_string(e.tag) + ") on '" + e.comm + "'";
}

/// The analysis over loaded rank files.
class analysis {
 public:
  explicit analysis(const std::vector<rank_file>& files) : files_(files) {}

  result run() {
    result r;
    if (files_.empty()) {
      r.exit = incomplete;
      r.verdict = "incomplete";
      r.notes.push_back("no rank evidence files: ranks write theirs at a detection, at an all-stop, or at exit "
                        "when asked (rank_evidence_options::write_at_exit)");
      return r;
    }
    validate(r);
    build();
    classify(r);
    return r;
  }

 private:
  void validate(result& r) {
    r.world_size = files_[0].world_size;
    std::set<int> seen;
    for (const auto& f : files_) {
      if (f.world_size != r.world_size)
        throw input_error(f.path + ": world size " + std::to_string(f.world_size) + " but " + files_[0].path +
                          " says " + std::to_string(r.world_size));
      if (!seen.insert(f.rank).second) throw input_error(f.path + ": a second file for rank " + std::to_string(f.rank));
    }
    for (int i = 0; i < r.world_size; ++i) (seen.count(i) ? r.present : r.missing).push_back(i);
    if (!r.missing.empty())
      r.notes.push_back("no evidence file from " + ranks_text(r.missing) +
                        " (crashed before writing, or saw nothing and did not write at exit)");
    // Collectives: (comm, seq) must mean the same call on every rank that has it.
    std::map<std::pair<std::string, std::uint64_t>, std::pair<std::size_t, std::size_t>> first;
    std::set<std::tuple<int, std::string, int, int, bool, std::uint64_t>> pairs;
    for (std::size_t fi = 0; fi < files_.size(); ++fi) {
      std::set<std::pair<std::string, std::uint64_t>> mine;
      for (std::size_t ei = 0; ei < files_[fi].events.size(); ++ei) {
        const event& e = files_[fi].events[ei];
        if (e.type == ev_type::collective) {
          const auto key = std::make_pair(e.comm, e.seq);
          if (!mine.insert(key).second)
            throw input_error(files_[fi].path + ": collective #" + std::to_string(e.seq) + " on '" + e.comm +
                              "' appears twice (conflicting sequence numbers)");
          auto it = first.find(key);
          if (it == first.end()) {
            first.emplace(key, std::make_pair(fi, ei));
            continue;
          }
          const event& o = files_[it->second.first].events[it->second.second];
          if (o.kind != e.kind || o.comm_size != e.comm_size || o.members != e.members)
            throw input_error("conflicting sequence numbers: collective #" + std::to_string(e.seq) + " on '" + e.comm +
                              "' is " + o.kind + " of " + std::to_string(o.comm_size) + " ranks in " +
                              files_[it->second.first].path + " but " + e.kind + " of " +
                              std::to_string(e.comm_size) + " ranks in " + files_[fi].path +
                              " (every rank must mark the same collectives in the same order)");
        } else if (e.type != ev_type::frame && e.type != ev_type::checkpoint) {
          if (!pairs.insert(std::make_tuple(files_[fi].rank, e.comm, e.peer, e.tag, e.type == ev_type::send, e.seq))
                   .second)
            throw input_error(files_[fi].path + ": " + transfer_name(e) + " appears twice (conflicting sequence numbers)");
        }
      }
    }
  }

  // Nodes: every event has an "in" node (2i) and an "out" node (2i+1).
  std::size_t node(std::size_t fi, std::size_t ei, int side) const { return 2 * (base_[fi] + ei) + static_cast<std::size_t>(side); }

  void build() {
    std::size_t total = 0;
    for (const auto& f : files_) {
      base_.push_back(total);
      total += f.events.size();
    }
    adj_.assign(2 * total, {});
    std::map<std::pair<std::string, std::uint64_t>, std::vector<std::pair<std::size_t, std::size_t>>> groups;
    std::map<std::tuple<std::string, int, int, int, std::uint64_t>, std::pair<std::size_t, std::size_t>> sends, recvs;
    for (std::size_t fi = 0; fi < files_.size(); ++fi) {
      const auto& evs = files_[fi].events;
      for (std::size_t ei = 0; ei < evs.size(); ++ei) {
        adj_[node(fi, ei, 0)].push_back(node(fi, ei, 1));
        if (ei + 1 < evs.size()) adj_[node(fi, ei, 1)].push_back(node(fi, ei + 1, 0));
        const event& e = evs[ei];
        if (e.type == ev_type::collective) groups[{e.comm, e.seq}].push_back({fi, ei});
        // p2p key: (comm, sender world rank, receiver world rank, tag, seq)
        if (e.type == ev_type::send) sends[{e.comm, files_[fi].rank, e.world_of(e.peer), e.tag, e.seq}] = {fi, ei};
        if (e.type == ev_type::recv) recvs[{e.comm, e.world_of(e.peer), files_[fi].rank, e.tag, e.seq}] = {fi, ei};
      }
    }
    for (auto& g : groups) {
      for (auto& a : g.second)
        for (auto& b : g.second) adj_[node(a.first, a.second, 0)].push_back(node(b.first, b.second, 1));
      groups_[g.first] = g.second;
    }
    for (auto& s : sends) {
      auto it = recvs.find(s.first);
      if (it != recvs.end()) {
        adj_[node(s.second.first, s.second.second, 0)].push_back(node(it->second.first, it->second.second, 1));
        match_[{it->second.first, it->second.second}] = s.second;
      }
    }
  }

  bool reaches(std::size_t from, std::size_t to) const {
    if (from == to) return true;
    std::vector<char> seen(adj_.size(), 0);
    std::vector<std::size_t> stack{from};
    seen[from] = 1;
    while (!stack.empty()) {
      const std::size_t n = stack.back();
      stack.pop_back();
      for (std::size_t m : adj_[n]) {
        if (m == to) return true;
        if (!seen[m]) {
          seen[m] = 1;
          stack.push_back(m);
        }
      }
    }
    return false;
  }

  static bool in_bad(const event& e) {
    if (e.type == ev_type::frame) {
      for (const auto& t : e.tensors)
        if ((t.role == "input" || t.role == "parameter") && t.nonfinite) return true;
      return false;
    }
    if (e.type == ev_type::checkpoint) return false;
    return e.has_input && e.input_bad;
  }
  static bool out_bad(const event& e) {
    if (e.type == ev_type::frame || e.type == ev_type::checkpoint) {
      for (const auto& t : e.tensors)
        if ((t.role == "output" || t.role == "checkpoint") && t.nonfinite) return true;
      return false;
    }
    if (e.type == ev_type::send) return false;
    return e.has_output && e.output_bad;
  }

  site make_site(std::size_t fi, std::size_t ei, const std::string& kind) const {
    const rank_file& f = files_[fi];
    const event& e = f.events[ei];
    site s;
    s.rank = f.rank;
    s.step = e.step;
    s.order = e.order;
    s.kind = kind;
    if (e.is_transfer()) {
      s.module_path = e.site;
      s.tensor = (kind == "received" || kind == "reduction" ? "output of " : "input of ") + transfer_name(e);
    } else {
      s.module_path = e.module_path;
      s.cls = e.cls;
      for (const auto& t : e.tensors) {
        const bool is_in = t.role == "input" || t.role == "parameter";
        if (t.nonfinite && (kind == "input" ? is_in : !is_in)) {
          s.tensor = t.context;
          break;
        }
      }
    }
    std::string where = "rank " + std::to_string(s.rank) + ", step " + std::to_string(s.step) + ", " +
                        (s.module_path.empty() ? std::string("<root>") : s.module_path) +
                        (s.cls.empty() ? "" : " (" + s.cls + ")") + ", tensor " + s.tensor;
    if (kind == "produced") where += ": inputs finite, output non-finite";
    if (kind == "input") where += ": arrived as an input with no earlier non-finite value on this rank (the rank's data)";
    if (kind == "before_transfer")
      where += ": already non-finite when handed to the transfer, with no earlier marked evidence on this rank "
               "(made by unmarked code since the previous record)";
    if (kind == "reduction") where += ": every rank's input was finite, the result is not (the reduction overflowed)";
    s.text = where;
    return s;
  }

  void classify(result& r) {
    struct first_bad {
      std::size_t fi, ei;
      int side;
      std::string kind;
    };
    std::vector<first_bad> firsts;
    bool any_bad = false;
    for (std::size_t fi = 0; fi < files_.size(); ++fi) {
      const auto& evs = files_[fi].events;
      for (std::size_t ei = 0; ei < evs.size(); ++ei) {
        const event& e = evs[ei];
        std::string kind;
        int side = 0;
        if (in_bad(e)) {
          kind = e.type == ev_type::frame ? "input" : "before_transfer";
        } else if (out_bad(e)) {
          side = 1;
          kind = e.is_transfer() ? "received" : "produced";
        }
        if (kind.empty()) continue;
        any_bad = true;
        firsts.push_back({fi, ei, side, kind});
        if (ei == 0 && files_[fi].dropped > 0)
          incomplete_ = note(r, "rank " + std::to_string(files_[fi].rank) + ": the first event kept in its ring is "
                                "already non-finite and " + std::to_string(files_[fi].dropped) +
                                " older events were dropped (raise rank_evidence_options::max_events)");
        break;
      }
    }
    // "received" through a collective whose every input is known and finite: the reduction made it.
    for (auto& fb : firsts) {
      if (fb.kind != "received") continue;
      const event& e = files_[fb.fi].events[fb.ei];
      std::vector<int> unknown;
      bool source = false;
      if (e.type == ev_type::collective) {
        const auto& g = groups_[{e.comm, e.seq}];
        std::set<int> have;
        for (const auto& m : g) {
          have.insert(files_[m.first].rank);
          if (in_bad(files_[m.first].events[m.second])) source = true;
        }
        for (int c = 0; c < e.comm_size; ++c)
          if (!have.count(e.world_of(c))) unknown.push_back(e.world_of(c));
      } else {
        auto it = match_.find({fb.fi, fb.ei});
        if (it == match_.end()) {
          unknown.push_back(e.world_of(e.peer));
        } else if (in_bad(files_[it->second.first].events[it->second.second])) {
          source = true;
        }
      }
      if (!source && unknown.empty() && e.type == ev_type::collective && e.kind != "broadcast" && e.kind != "scatter") {
        fb.kind = "reduction";
      } else if (!source && !unknown.empty()) {
        incomplete_ = note(r, "rank " + std::to_string(files_[fb.fi].rank) + " received a non-finite value through " +
                              transfer_name(e) + " at step " + std::to_string(e.step) + "; no record of it from " +
                              ranks_text(unknown) + " (file missing or written before that call)");
      } else if (!source) {
        incomplete_ = note(r, "rank " + std::to_string(files_[fb.fi].rank) + " received a non-finite value through " +
                              transfer_name(e) + " but no sender's input was non-finite (an unmarked transfer?)");
      }
    }
    // Producers and their happens-before order.
    std::vector<std::size_t> cand;
    for (std::size_t i = 0; i < firsts.size(); ++i)
      if (firsts[i].kind != "received") cand.push_back(i);
    std::vector<bool> dominated(firsts.size(), false);
    for (std::size_t a : cand)
      for (std::size_t b : cand) {
        if (a == b) continue;
        const auto& A = firsts[a];
        const auto& B = firsts[b];
        if (reaches(node(A.fi, A.ei, A.side), node(B.fi, B.ei, B.side))) dominated[b] = true;
      }
    for (std::size_t i : cand) {
      site s = make_site(firsts[i].fi, firsts[i].ei, firsts[i].kind);
      (dominated[i] ? r.later_producers : r.origins).push_back(std::move(s));
    }
    for (const auto& fb : firsts)
      if (fb.kind == "received") r.receivers.push_back(files_[fb.fi].rank);
    std::sort(r.receivers.begin(), r.receivers.end());
    auto by_rank = [](const site& a, const site& b) { return a.rank < b.rank; };
    std::sort(r.origins.begin(), r.origins.end(), by_rank);
    std::sort(r.later_producers.begin(), r.later_producers.end(), by_rank);
    build_chain(r);
    r.local_only = !r.origins.empty() && r.chain.empty();

    if (!any_bad) {
      r.exit = r.missing.empty() && !incomplete_ ? no_fault : incomplete;
      r.verdict = r.exit == no_fault ? "no_fault" : "incomplete";
      if (r.exit == incomplete) r.notes.push_back("no non-finite value in the files present; the missing ranks may hold one");
      return;
    }
    if (r.origins.empty()) {
      incomplete_ = note(r, "non-finite values were received but their producer is not in the evidence present");
    }
    r.exit = r.missing.empty() && !incomplete_ ? fault : incomplete;
    r.verdict = r.exit == fault ? "fault" : "incomplete";
    if (r.exit == incomplete && !r.origins.empty())
      r.notes.push_back("what can still be concluded: the site named is the earliest among the evidence present; "
                        "a rank without evidence may hold a producing site concurrent with it or earlier");
  }

  void build_chain(result& r) {
    struct acc {
      carrier c;
      std::size_t rep = 0;  // a node, to order carriers by happens-before
    };
    std::vector<acc> list;
    for (const auto& g : groups_) {
      acc a;
      bool carried = false;
      for (const auto& m : g.second) {
        const event& e = files_[m.first].events[m.second];
        const int rk = files_[m.first].rank;
        if (in_bad(e)) a.c.from.push_back(rk);
        if (out_bad(e) && !in_bad(e)) {
          a.c.to.push_back(rk);
          if (!carried) a.rep = node(m.first, m.second, 1);
          carried = true;
        }
        a.c.type = "collective";
        a.c.kind = e.kind;
        a.c.comm = e.comm;
        a.c.seq = e.seq;
        a.c.step = e.step;
        if (a.c.site.empty()) a.c.site = e.site;
      }
      if (!carried) continue;
      a.c.all_members = static_cast<int>(g.second.size()) >= files_[g.second[0].first].events[g.second[0].second].comm_size;
      std::sort(a.c.from.begin(), a.c.from.end());
      std::sort(a.c.to.begin(), a.c.to.end());
      list.push_back(std::move(a));
    }
    for (const auto& m : match_) {
      const event& rv = files_[m.first.first].events[m.first.second];
      const event& sd = files_[m.second.first].events[m.second.second];
      if (!out_bad(rv) || !in_bad(sd)) continue;
      acc a;
      a.c.type = "send/recv";
      a.c.kind = "send/recv";
      a.c.comm = rv.comm;
      a.c.seq = rv.seq;
      a.c.tag = rv.tag;
      a.c.step = rv.step;
      a.c.site = sd.site;
      a.c.from.push_back(files_[m.second.first].rank);
      a.c.to.push_back(files_[m.first.first].rank);
      a.rep = node(m.first.first, m.first.second, 1);
      list.push_back(std::move(a));
    }
    // happens-before order: a carrier with fewer predecessors among the carriers comes first
    std::vector<std::size_t> preds(list.size(), 0);
    for (std::size_t i = 0; i < list.size(); ++i)
      for (std::size_t j = 0; j < list.size(); ++j)
        if (i != j && reaches(list[j].rep, list[i].rep)) ++preds[i];
    std::vector<std::size_t> idx(list.size());
    for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      return std::make_tuple(list[a].c.step, preds[a]) < std::make_tuple(list[b].c.step, preds[b]);
    });
    for (std::size_t i : idx) {
      carrier c = list[i].c;
      std::string what = c.type == "collective" ? c.kind + " #" + std::to_string(c.seq) + " on '" + c.comm + "'"
                                                : "send/recv on '" + c.comm + "' (tag " + std::to_string(c.tag) +
                                                      ", pair #" + std::to_string(c.seq) + ")";
      c.text = "step " + std::to_string(c.step) + ": " + what + (c.site.empty() ? "" : " at " + c.site) +
               (!c.from.empty()   ? " carried it from " + ranks_text(c.from) + " to "
                : c.all_members ? std::string(" made it (every input finite) on ")
                                : std::string(" carried it from a rank without a record of it to ")) +
               ranks_text(c.to);
      r.chain.push_back(std::move(c));
    }
  }

  static bool note(result& r, std::string text) {
    r.notes.push_back(std::move(text));
    return true;
  }

  const std::vector<rank_file>& files_;
  std::vector<std::size_t> base_;
  std::vector<std::vector<std::size_t>> adj_;
  std::map<std::pair<std::string, std::uint64_t>, std::vector<std::pair<std::size_t, std::size_t>>> groups_;
  std::map<std::pair<std::size_t, std::size_t>, std::pair<std::size_t, std::size_t>> match_;  // recv -> send
  bool incomplete_ = false;
};
}  // namespace detail

/// Analyses loaded rank files. Throws input_error for inconsistent evidence (exit 2).
inline result analyse(const std::vector<rank_file>& files) { return detail::analysis(files).run(); }

/// Reads every evidence file in `dir` (nanscope_evidence_*.json; other .json files without the format marker
/// are ignored) and analyses them. Never throws: problems become exit 2 with `error` set.
inline result merge_dir(const std::string& dir) {
  result r;
  r.dir = dir;
  try {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) throw input_error(dir + ": cannot open the directory");
    std::vector<std::string> names;
    while (dirent* de = ::readdir(d)) {
      const std::string n = de->d_name;
      if (n.empty() || n[0] == '.' || n.size() < 5 || n.compare(n.size() - 5, 5, ".json") != 0) continue;
      names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    std::vector<rank_file> files;
    for (const auto& n : names) {
      const std::string path = dir + "/" + n;
      const bool named = n.rfind("nanscope_evidence_", 0) == 0;
      // only regular files, checked on the open descriptor: a FIFO would block the open or the read, a device
      // never end
      std::string text;
      const nanscope::detail::read_result rd =
          nanscope::detail::read_regular_file(path, static_cast<std::uint64_t>(max_file_bytes), text);
      if (!rd.ok()) {
        if (named)
          throw input_error(path + ": " +
                            nanscope::detail::read_failure_text(rd, static_cast<std::uint64_t>(max_file_bytes),
                                                                "this tool's limit"));
        continue;
      }
      json j;
      try {
        j = json::parse(text, detail::nesting_guard(), false);
      } catch (const input_error& e) {
        if (named) throw input_error(path + ": " + e.what());
        continue;
      }
      text = std::string();
      if (j.is_discarded()) {
        if (named) throw input_error(path + ": not valid JSON (truncated or damaged)");
        continue;
      }
      if (!named) {
        const auto fmt = j.is_object() ? j.find("format") : j.end();
        if (fmt == j.end() || !fmt->is_string() || fmt->get_ref<const std::string&>() != "nanscope-rank-evidence") continue;
      }
      try {
        files.push_back(parse_rank_file(j, path));
      } catch (const json::exception& e) {  // a shape parse_rank_file did not foresee
        throw input_error(path + ": " + e.what());
      }
    }
    std::sort(files.begin(), files.end(), [](const rank_file& a, const rank_file& b) { return a.rank < b.rank; });
    result a = analyse(files);
    a.dir = dir;
    return a;
  } catch (const input_error& e) {
    r.exit = error;
    r.verdict = "error";
    r.error = e.what();
    return r;
  } catch (const std::bad_alloc&) {
    r.exit = error;
    r.verdict = "error";
    r.error = dir + ": out of memory while reading the evidence";
    return r;
  }
}

inline json site_json(const site& s) {
  return json{{"rank", s.rank},          {"step", s.step},     {"order", s.order}, {"kind", s.kind},
              {"module_path", s.module_path}, {"class", s.cls}, {"tensor", s.tensor}, {"text", s.text}};
}

inline json to_json(const result& r) {
  json j;
  j["verdict"] = r.verdict;
  j["exit_code"] = r.exit;
  j["dir"] = r.dir;
  if (r.exit == error) {
    j["error"] = r.error;
    return j;
  }
  j["world_size"] = r.world_size;
  j["ranks_present"] = r.present;
  j["ranks_missing"] = r.missing;
  j["origins"] = json::array();
  for (const auto& s : r.origins) j["origins"].push_back(site_json(s));
  j["concurrent"] = r.origins.size() > 1;
  j["later_producers"] = json::array();
  for (const auto& s : r.later_producers) j["later_producers"].push_back(site_json(s));
  j["chain"] = json::array();
  for (const auto& c : r.chain)
    j["chain"].push_back(json{{"type", c.type}, {"kind", c.kind}, {"comm", c.comm}, {"seq", c.seq}, {"tag", c.tag},
                              {"step", c.step}, {"site", c.site}, {"from", c.from}, {"to", c.to}, {"text", c.text}});
  j["receivers"] = r.receivers;
  j["local_only"] = r.local_only;
  j["notes"] = r.notes;
  return j;
}

inline std::string to_text(const result& r) {
  std::ostringstream o;
  if (r.exit == error) {
    o << "nanscope-merge: error: " << r.error << "\n";
    return o.str();
  }
  o << "nanscope-merge: " << r.present.size() << " of " << r.world_size << " rank files in " << r.dir << "\n";
  if (!r.missing.empty()) o << "missing: " << detail::ranks_text(r.missing) << "\n";
  if (r.origins.size() == 1) o << "first producing site: " << r.origins[0].text << "\n";
  if (r.origins.size() > 1) {
    o << "first producing sites (concurrent: neither happens before the other):\n";
    for (const auto& s : r.origins) o << "  " << s.text << "\n";
  }
  if (!r.later_producers.empty()) {
    o << "later producing sites (they happen after the first):\n";
    for (const auto& s : r.later_producers) o << "  " << s.text << "\n";
  }
  if (!r.chain.empty()) {
    o << "propagation:\n";
    for (const auto& c : r.chain) o << "  " << c.text << "\n";
  }
  if (r.local_only) o << "it stayed local: no marked collective or send/recv carried it to another rank\n";
  if (!r.receivers.empty()) o << "receivers: " << detail::ranks_text(r.receivers) << "\n";
  for (const auto& n : r.notes) o << "note: " << n << "\n";
  o << "verdict: "
    << (r.exit == no_fault ? "no non-finite value in any rank's evidence"
        : r.exit == fault  ? "fault attributed"
                           : "evidence incomplete")
    << " (exit " << r.exit << ")\n";
  return o.str();
}

}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_HPP
