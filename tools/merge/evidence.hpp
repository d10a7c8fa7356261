// nanscope-merge: one rank's evidence as the merge keeps it (compact events, names in a table per file) and its strict reading from a parsed JSON document.
#ifndef NANSCOPE_TOOLS_MERGE_EVIDENCE_HPP
#define NANSCOPE_TOOLS_MERGE_EVIDENCE_HPP

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

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

enum class ev_type : std::uint8_t { frame, checkpoint, collective, send, recv };

/// One event of a rank's program order, reduced to what the merge uses. Names are indices into the file's
/// `names` (0 is the empty name); `members` indexes the file's `member_lists` (0: none written, so that
/// communicator rank r is world rank r).
struct event {
  std::uint64_t order = 0;
  std::uint64_t step = 0;
  std::uint64_t seq = 0;  // transfers
  ev_type type = ev_type::frame;
  /// Frames: an input or parameter tensor holds a non-finite value not allowed by a rule. Transfers: the input
  /// health says non-finite. Checkpoints: never.
  bool in_bad = false;
  /// Frames and checkpoints: an output or checkpoint tensor is non-finite. Collectives and recvs: the output
  /// health says non-finite. Sends: never.
  bool out_bad = false;
  // frames
  std::uint32_t module_path = 0, cls = 0;
  std::uint32_t bad_in_context = 0;     // the context of the first non-finite input or parameter tensor
  std::uint32_t bad_other_context = 0;  // the context of the first non-finite tensor of any other role
  // transfers
  std::uint32_t kind = 0, comm = 0, site = 0, members = 0;
  int comm_size = 0, comm_rank = -1, peer = -1, tag = 0;

  bool is_transfer() const { return type == ev_type::collective || type == ev_type::send || type == ev_type::recv; }
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
  std::vector<std::string> names{std::string()};          // [0] is ""
  std::vector<std::vector<int>> member_lists{std::vector<int>()};  // [0] is empty

  const std::string& name(std::uint32_t id) const { return names[id]; }
  /// The world rank of communicator rank r in event e (-1 when r is not a rank of its member list).
  int world_of(const event& e, int r) const {
    const std::vector<int>& m = member_lists[e.members];
    if (m.empty()) return r;
    return r >= 0 && static_cast<std::size_t>(r) < m.size() ? m[static_cast<std::size_t>(r)] : -1;
  }
};

namespace detail {

/// An index of the strings of a table (std::vector<std::string>) by content: open addressing over the
/// strings' positions, so that a lookup by std::string_view allocates nothing.
class name_index {
 public:
  explicit name_index(std::vector<std::string>& names) : names_(names) {
    for (std::uint32_t i = 0; i < names_.size(); ++i) place(i);
  }
  /// The position of `s` in the table, added at the end when absent.
  std::uint32_t id(std::string_view s) {
    if (slots_.empty() || 2 * (count_ + 1) > slots_.size()) grow();
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = hash(s) & mask;; i = (i + 1) & mask) {
      const std::uint32_t v = slots_[i];
      if (v == empty) {
        names_.emplace_back(s);
        const auto n = static_cast<std::uint32_t>(names_.size() - 1);
        slots_[i] = n;
        ++count_;
        return n;
      }
      if (names_[v] == s) return v;
    }
  }

 private:
  static constexpr std::uint32_t empty = std::numeric_limits<std::uint32_t>::max();
  static std::uint64_t hash(std::string_view s) {
    std::uint64_t h = 1469598103934665603ULL;
    for (const char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    return h ^ (h >> 29);
  }
  void place(std::uint32_t n) {
    if (slots_.empty() || 2 * (count_ + 1) > slots_.size()) grow();
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = hash(names_[n]) & mask;
    while (slots_[i] != empty) i = (i + 1) & mask;
    slots_[i] = n;
    ++count_;
  }
  void grow() {
    std::vector<std::uint32_t> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 64 : 2 * old.size(), empty);
    count_ = 0;
    for (const std::uint32_t v : old)
      if (v != empty) place(v);
  }
  std::vector<std::string>& names_;
  std::vector<std::uint32_t> slots_;
  std::size_t count_ = 0;
};

/// Fills a rank_file's tables: names and member lists, each stored once.
class file_tables {
 public:
  explicit file_tables(rank_file& f) : f_(f), names_(f.names) {
    for (std::uint32_t i = 0; i < f_.member_lists.size(); ++i) lists_.emplace(f_.member_lists[i], i);
  }
  std::uint32_t name(std::string_view s) {
    if (s.empty()) return 0;
    // most names repeat from one event to the next: a small cache in front of the index
    std::uint32_t& slot = recent_[(s.size() * 131 + static_cast<unsigned char>(s[0]) +
                                   7 * static_cast<unsigned char>(s[s.size() - 1])) % recent_size];
    if (slot == 0 || f_.names[slot] != s) slot = names_.id(s);
    return slot;
  }
  std::uint32_t members(const std::vector<int>& m) {
    if (m.empty()) return 0;
    const auto it = lists_.find(m);
    if (it != lists_.end()) return it->second;
    const auto n = static_cast<std::uint32_t>(f_.member_lists.size());
    f_.member_lists.push_back(m);
    lists_.emplace(m, n);
    return n;
  }

 private:
  static constexpr std::size_t recent_size = 61;
  rank_file& f_;
  name_index names_;
  std::uint32_t recent_[recent_size] = {};
  std::map<std::vector<int>, std::uint32_t> lists_;
};

/// What a frame's tensor records say, one record at a time: the flags and contexts of event.
class tensor_summary {
 public:
  void add(std::string_view role, std::string_view context, bool nonfinite) {
    if (!nonfinite) return;
    if (role == "input" || role == "parameter") {
      in_bad_ = true;
      if (!have_in_) in_context_.assign(context.data(), context.size());
      have_in_ = true;
    } else {
      if (!have_other_) other_context_.assign(context.data(), context.size());
      have_other_ = true;
    }
    if (role == "output" || role == "checkpoint") out_bad_ = true;
  }
  void apply(event& ev, file_tables& t) const {
    ev.in_bad = ev.type == ev_type::frame && in_bad_;
    ev.out_bad = out_bad_;
    ev.bad_in_context = t.name(in_context_);
    ev.bad_other_context = t.name(other_context_);
  }

 private:
  bool in_bad_ = false, out_bad_ = false, have_in_ = false, have_other_ = false;
  std::string in_context_, other_context_;
};

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

/// Parses one rank file's JSON. `path` names it in errors. Checks every key in a fixed order, so that a file
/// with several problems is always reported by the same one.
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
  detail::file_tables tables(f);
  bool have_prev = false;
  std::uint64_t prev = 0;
  f.events.reserve(evs.size());
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
      ev.module_path = tables.name(get_as<std::string>(e, "module_path", where));
      ev.cls = tables.name(detail::opt_as<std::string>(e, "class", std::string(), where));
      (void)detail::opt_as<bool>(e, "complete", true, where);
      const json& ts = detail::need(e, "tensors", where);
      if (!ts.is_array()) throw input_error(where + ": \"tensors\" is not an array");
      detail::tensor_summary sum;
      for (const json& t : ts) {
        if (!t.is_object()) throw input_error(where + ": a tensor record is not an object");
        const std::string role = get_as<std::string>(t, "role", where);
        const std::string context = get_as<std::string>(t, "context", where);
        bool nonfinite = false;
        if (detail::opt_as<bool>(t, "tensor", true, where)) {
          const bool allowed = detail::opt_as<bool>(t, "allowed", false, where);
          nonfinite = detail::health_bad(detail::need(t, "health", where), where) && !allowed;
        }
        sum.add(role, context, nonfinite);
      }
      sum.apply(ev, tables);
    } else if (type == "collective" || type == "send" || type == "recv") {
      ev.type = type == "collective" ? ev_type::collective : type == "send" ? ev_type::send : ev_type::recv;
      const std::string kind = get_as<std::string>(e, "kind", where);
      if ((ev.type == ev_type::collective) == (kind == "send" || kind == "recv"))
        throw input_error(where + ": type \"" + type + "\" with kind \"" + kind + "\"");
      ev.kind = tables.name(kind);
      ev.comm = tables.name(get_as<std::string>(e, "comm", where));
      ev.comm_size = get_as<int>(e, "comm_size", where);
      ev.comm_rank = get_as<int>(e, "comm_rank", where);
      if (ev.comm_size <= 0 || ev.comm_size > f.world_size || ev.comm_rank < 0 || ev.comm_rank >= ev.comm_size)
        throw input_error(where + ": rank " + std::to_string(ev.comm_rank) + " of communicator size " +
                          std::to_string(ev.comm_size) + " is impossible in world size " + std::to_string(f.world_size));
      ev.seq = get_as<std::uint64_t>(e, "seq", where);
      ev.site = tables.name(detail::opt_as<std::string>(e, "site", std::string(), where));
      if (e.contains("members")) {
        const std::vector<int> m = detail::get_members(e, f.world_size, where);
        if (!m.empty() && static_cast<int>(m.size()) != ev.comm_size)
          throw input_error(where + ": " + std::to_string(m.size()) + " members for communicator size " +
                            std::to_string(ev.comm_size));
        ev.members = tables.members(m);
      }
      if (ev.type != ev_type::collective) {
        ev.peer = get_as<int>(e, "peer", where);
        ev.tag = get_as<int>(e, "tag", where);
        if (ev.peer < 0 || ev.peer >= ev.comm_size)
          throw input_error(where + ": peer " + std::to_string(ev.peer) + " is not a rank of communicator size " +
                            std::to_string(ev.comm_size));
      }
      if (e.contains("input")) ev.in_bad = detail::health_bad(e["input"], where);
      if (e.contains("output")) ev.out_bad = detail::health_bad(e["output"], where) && ev.type != ev_type::send;
    } else {
      throw input_error(where + ": unknown event type \"" + type + "\"");
    }
    f.events.push_back(ev);
  }
  return f;
}

}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_EVIDENCE_HPP
