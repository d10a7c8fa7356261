// nanscope-merge: a single-pass reader of evidence text that fills a rank_file without building a JSON tree, and declines whenever the text is anything but well-formed, valid evidence (the caller then reads it with nlohmann-json and parse_rank_file, which name the problem).
#ifndef NANSCOPE_TOOLS_MERGE_FAST_READER_HPP
#define NANSCOPE_TOOLS_MERGE_FAST_READER_HPP

#include "evidence.hpp"
#include "json_scan.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nanscope_merge {
namespace detail {

/// Reads evidence text in one pass. The language it accepts is a subset of what nlohmann-json parses
/// (json_scanner), and among valid evidence it accepts only files without a duplicate key among those it reads;
/// the rank_file it fills is then the one parse_rank_file fills from the parsed document. Anything else declines.
class fast_reader : json_scanner {
 public:
  explicit fast_reader(std::string_view text) : json_scanner(text) {}

  /// True with `f` filled; false (f unspecified) when the text must be read the slow way.
  bool read(rank_file& f) {
    try {
      top(f);
      return true;
    } catch (const decline&) {
      return false;
    }
  }

 private:
  // ---- the evidence ------------------------------------------------------------------------------------
  /// A health record: an object with a boolean "nonfinite". False (the value skipped) when it is not one.
  bool health(bool& bad, int depth) {
    if (peek() != '{') {
      skip(depth);
      return false;
    }
    bool seen = false, ok = false;
    if (open('{', '}')) {
      do {
        const std::string_view k = str(key_);
        expect(':');
        if (is(k, "nonfinite")) {
          if (seen) no();
          seen = true;
          bad = boolean(ok);
        } else {
          skip(depth + 1);
        }
      } while (more('}'));
    }
    return seen && ok;
  }

  /// One record of a frame's "tensors": what parse_rank_file reads of it, added to `sum` when it is valid.
  bool tensor(tensor_summary& sum, int depth) {
    if (peek() != '{') {
      skip(depth);
      return false;
    }
    enum : unsigned { k_role = 1, k_context = 2, k_tensor = 4, k_allowed = 8, k_health = 16 };
    unsigned seen = 0, ok = 0;
    std::string_view role, context;
    bool is_tensor = true, allowed = false, bad = false;
    if (open('{', '}')) {
      do {
        const std::string_view k = str(key_);
        expect(':');
        unsigned bit = 0;
        bool good = false;
        if (is(k, "role")) {
          bit = k_role;
          if (seen & bit) no();
          good = string(role, role_buf_, depth + 1);
        } else if (is(k, "context")) {
          bit = k_context;
          if (seen & bit) no();
          good = string(context, context_buf_, depth + 1);
        } else if (is(k, "tensor")) {
          bit = k_tensor;
          if (seen & bit) no();
          is_tensor = boolean(good);
        } else if (is(k, "allowed")) {
          bit = k_allowed;
          if (seen & bit) no();
          allowed = boolean(good);
        } else if (is(k, "health")) {
          bit = k_health;
          if (seen & bit) no();
          good = health(bad, depth + 1);
        } else {
          skip(depth + 1);
        }
        seen |= bit;
        if (good) ok |= bit;
      } while (more('}'));
    }
    const auto valid = [&](unsigned bit) { return (seen & bit) == 0 || (ok & bit) != 0; };
    if (!(ok & k_role) || !(ok & k_context) || !valid(k_tensor)) return false;
    if (!(seen & k_tensor)) is_tensor = true;
    bool nonfinite = false;
    if (is_tensor) {
      if (!valid(k_allowed) || !(ok & k_health)) return false;
      if (!(seen & k_allowed)) allowed = false;
      nonfinite = bad && !allowed;
    }
    sum.add(role, context, nonfinite);
    return true;
  }

  bool tensors(tensor_summary& sum, int depth) {
    if (peek() != '[') {
      skip(depth);
      return false;
    }
    bool ok = true;
    if (open('[', ']')) {
      do ok = tensor(sum, depth + 1) && ok;
      while (more(']'));
    }
    return ok;
  }

  bool members(std::vector<int>& out, int world, int depth) {
    out.clear();
    if (peek() != '[') {
      skip(depth);
      return false;
    }
    bool ok = true;
    if (open('[', ']')) {
      do {
        int r = 0;
        if (!integer(r, depth + 1) || r < 0 || r >= world) ok = false;
        out.push_back(r);
      } while (more(']'));
    }
    return ok;
  }

  enum key_id : unsigned {
    k_order, k_step, k_type, k_module_path, k_class, k_complete, k_tensors, k_kind, k_comm, k_comm_size,
    k_comm_rank, k_seq, k_site, k_members, k_peer, k_tag, k_input, k_output, k_other
  };
  static key_id event_key(std::string_view k) {
    switch (k.size()) {
      case 3: return is(k, "seq") ? k_seq : is(k, "tag") ? k_tag : k_other;
      case 4:
        return is(k, "type")   ? k_type
               : is(k, "step") ? k_step
               : is(k, "kind") ? k_kind
               : is(k, "comm") ? k_comm
               : is(k, "site") ? k_site
               : is(k, "peer") ? k_peer
                             : k_other;
      case 5: return is(k, "order") ? k_order : is(k, "class") ? k_class : is(k, "input") ? k_input : k_other;
      case 6: return is(k, "output") ? k_output : k_other;
      case 7: return is(k, "tensors") ? k_tensors : is(k, "members") ? k_members : k_other;
      case 8: return is(k, "complete") ? k_complete : k_other;
      case 9: return is(k, "comm_size") ? k_comm_size : is(k, "comm_rank") ? k_comm_rank : k_other;
      case 11: return is(k, "module_path") ? k_module_path : k_other;
      default: return k_other;
    }
  }

  void one_event(rank_file& f, file_tables& tables) {
    constexpr int depth = 3;  // the top object, "events", the event
    if (peek() != '{') no();
    std::uint32_t seen = 0, ok = 0;
    std::uint64_t order = 0, step = 0, seq = 0;
    std::string_view type, module_path, cls, kind, comm, site;
    bool complete = true;
    (void)complete;
    int comm_size = 0, comm_rank = 0, peer = 0, tag = 0;
    bool in_bad = false, out_bad = false;
    tensor_summary sum;
    if (open('{', '}')) {
      do {
        const std::string_view k = str(key_);
        expect(':');
        const key_id id = event_key(k);
        bool good = false;
        if (id != k_other) {
          if (seen & (1u << id)) no();
          seen |= 1u << id;
        }
        const int d = depth + 1;
        switch (id) {
          case k_order: good = integer(order, d); break;
          case k_step: good = integer(step, d); break;
          case k_seq: good = integer(seq, d); break;
          case k_comm_size: good = integer(comm_size, d); break;
          case k_comm_rank: good = integer(comm_rank, d); break;
          case k_peer: good = integer(peer, d); break;
          case k_tag: good = integer(tag, d); break;
          case k_type: good = string(type, buf_[0], d); break;
          case k_module_path: good = string(module_path, buf_[1], d); break;
          case k_class: good = string(cls, buf_[2], d); break;
          case k_kind: good = string(kind, buf_[3], d); break;
          case k_comm: good = string(comm, buf_[4], d); break;
          case k_site: good = string(site, buf_[5], d); break;
          case k_complete: complete = boolean(good); break;
          case k_tensors: good = tensors(sum, d); break;
          case k_members: good = members(members_, f.world_size, d); break;
          case k_input: good = health(in_bad, d); break;
          case k_output: good = health(out_bad, d); break;
          case k_other: skip(d); break;
        }
        if (good) ok |= 1u << id;
      } while (more('}'));
    }
    const auto has = [&](key_id id) { return (ok & (1u << id)) != 0; };
    const auto valid_if_seen = [&](key_id id) { return (seen & (1u << id)) == 0 || has(id); };
    if (!has(k_order) || (have_prev_ && order <= prev_)) no();
    have_prev_ = true;
    prev_ = order;
    if (!has(k_step) || !has(k_type)) no();
    event ev;
    ev.order = order;
    ev.step = step;
    if (is(type, "frame") || is(type, "checkpoint")) {
      if (!has(k_module_path) || !valid_if_seen(k_class) || !valid_if_seen(k_complete) || !has(k_tensors)) no();
      ev.type = is(type, "frame") ? ev_type::frame : ev_type::checkpoint;
      ev.module_path = tables.name(module_path);
      ev.cls = tables.name(cls);
      sum.apply(ev, tables);
    } else if (is(type, "collective") || is(type, "send") || is(type, "recv")) {
      ev.type = is(type, "collective") ? ev_type::collective : is(type, "send") ? ev_type::send : ev_type::recv;
      if (!has(k_kind) || (ev.type == ev_type::collective) == (is(kind, "send") || is(kind, "recv"))) no();
      if (!has(k_comm) || !has(k_comm_size) || !has(k_comm_rank)) no();
      if (comm_size <= 0 || comm_size > f.world_size || comm_rank < 0 || comm_rank >= comm_size) no();
      if (!has(k_seq) || !valid_if_seen(k_site) || !valid_if_seen(k_members)) no();
      const bool with_members = (seen & (1u << k_members)) != 0;
      if (with_members && !members_.empty() && static_cast<int>(members_.size()) != comm_size) no();
      if (ev.type != ev_type::collective) {
        if (!has(k_peer) || !has(k_tag) || peer < 0 || peer >= comm_size) no();
        ev.peer = peer;
        ev.tag = tag;
      }
      if (!valid_if_seen(k_input) || !valid_if_seen(k_output)) no();
      ev.kind = tables.name(kind);
      ev.comm = tables.name(comm);
      ev.site = tables.name(site);
      ev.comm_size = comm_size;
      ev.comm_rank = comm_rank;
      ev.seq = seq;
      if (with_members) ev.members = tables.members(members_);
      ev.in_bad = has(k_input) && in_bad;
      ev.out_bad = has(k_output) && out_bad && ev.type != ev_type::send;
    } else {
      no();
    }
    f.events.push_back(ev);
  }

  void top(rank_file& f) {
    enum : unsigned {
      t_format = 1, t_version = 2, t_rank = 4, t_world = 8, t_host = 16, t_reason = 32, t_pid = 64, t_dropped = 128,
      t_stop = 256, t_events = 512
    };
    unsigned seen = 0;
    const unsigned char* deferred = nullptr;  // where "events" starts when it comes before the world size
    const auto once = [&](unsigned bit) {
      if (seen & bit) no();
      seen |= bit;
    };
    if (!open('{', '}')) no();
    do {
      const std::string_view k = str(key_);
      expect(':');
      std::string_view s;
      if (is(k, "format")) {
        once(t_format);
        if (!string(s, buf_[0], 2) || !is(s, "nanscope-rank-evidence")) no();
      } else if (is(k, "version")) {
        once(t_version);
        long long v = 0;
        if (!integer(v, 2) || v != 1) no();
      } else if (is(k, "rank")) {
        once(t_rank);
        if (!integer(f.rank, 2)) no();
      } else if (is(k, "world_size")) {
        once(t_world);
        if (!integer(f.world_size, 2)) no();
      } else if (is(k, "host")) {
        once(t_host);
        if (!string(s, buf_[0], 2)) no();
        f.host.assign(s.data(), s.size());
      } else if (is(k, "reason")) {
        once(t_reason);
        if (!string(s, buf_[0], 2)) no();
        f.reason.assign(s.data(), s.size());
      } else if (is(k, "pid")) {
        once(t_pid);
        if (!integer(f.pid, 2)) no();
      } else if (is(k, "dropped_events")) {
        once(t_dropped);
        if (!integer(f.dropped, 2)) no();
      } else if (is(k, "stop")) {
        once(t_stop);
        if (peek() != '{') {
          skip(2);
        } else {
          bool have_step = false;
          if (open('{', '}')) {
            do {
              const std::string_view sk = str(key_);
              expect(':');
              if (is(sk, "step")) {
                if (have_step) no();
                have_step = true;
                if (!integer(f.stop_step, 3)) no();
              } else {
                skip(3);
              }
            } while (more('}'));
          }
          if (!have_step) no();
          f.stopped = true;
        }
      } else if (is(k, "events")) {
        once(t_events);
        // the events are checked against the world size, which comes first in every file the library writes;
        // where it comes later (keys sorted by name), the events are read once it is known
        if ((seen & (t_rank | t_world)) == (t_rank | t_world)) {
          events(f);
        } else {
          deferred = p_;
          skip(2);
        }
      } else {
        skip(2);
      }
    } while (more('}'));
    ws();
    if (p_ != end_) no();
    if ((seen & (t_format | t_version | t_rank | t_world | t_events)) != (t_format | t_version | t_rank | t_world | t_events))
      no();
    if (deferred != nullptr) {
      p_ = deferred;
      events(f);
    }
  }

  void events(rank_file& f) {
    if (f.world_size <= 0 || f.rank < 0 || f.rank >= f.world_size || f.world_size > max_world_size) no();
    file_tables tables(f);
    if (open('[', ']')) {
      do one_event(f, tables);
      while (more(']'));
    }
  }

  bool have_prev_ = false;
  std::uint64_t prev_ = 0;
  std::string role_buf_, context_buf_;
  std::string buf_[6];
  std::vector<int> members_;
};

}  // namespace detail

/// Reads evidence text the fast way: true with `f` filled (f.path set to `path`) exactly as
/// parse_rank_file(json::parse(text), path) would fill it; false when the text needs the slow, exact reading.
inline bool read_evidence_fast(std::string_view text, const std::string& path, rank_file& f) {
  f = rank_file();
  if (!detail::fast_reader(text).read(f)) return false;
  f.path = path;
  return true;
}

}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_FAST_READER_HPP
