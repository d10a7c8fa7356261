// nanscope — rank_evidence.hpp: one rank's evidence for nanscope-merge: a ring of the recorder's frames and the
// marked collectives / send / recv in program order, written atomically to this rank's own file at the first
// detection, whenever a marked transfer carries a non-finite value, at an all-stop, and on request.
//
//   nanscope::rank_evidence ev(rec, {"evidence_dir"});               // listens to the recorder
//   nanscope::communicator world{"world", n, r};                      // or nanscope::mpi::describe(MPI_COMM_WORLD)
//   NANSCOPE_COLLECTIVE(ev, world, all_reduce, partial, full,         // checks `partial`, runs the call, checks
//       MPI_Allreduce(partial.data(), full.data(), 8, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));  // `full`, records
//   NANSCOPE_SEND(ev, world, /*peer*/ r + 1, /*tag*/ 0, act, MPI_Send(...));
//   NANSCOPE_RECV(ev, world, /*peer*/ r - 1, /*tag*/ 0, act, MPI_Recv(...));
//   ev.write("exit");                                                 // optional: evidence of a clean run too
//
// The file: <dir>/nanscope_evidence_rank<R>of<N>.json (format in docs/multi-rank.md). Program order on this rank
// is the order in which frames complete and transfers are marked; a scope that is still open when the file is
// written (the detecting one) is included as an incomplete frame.
#ifndef NANSCOPE_RANK_EVIDENCE_HPP
#define NANSCOPE_RANK_EVIDENCE_HPP

#include "collective.hpp"
#include "config.hpp"
#include "rank.hpp"
#include "recorder.hpp"
#include "detail/atomic_file.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <sys/stat.h>
#if defined(__unix__) || defined(__unix) || (defined(__APPLE__) && defined(__MACH__))
#include <unistd.h>
#define NANSCOPE_IMPL_EVIDENCE_POSIX 1
#else
#define NANSCOPE_IMPL_EVIDENCE_POSIX 0
#endif

NANSCOPE_NAMESPACE_BEGIN

struct rank_evidence_options {
  std::string dir;                ///< where the rank file goes (created if missing); required
  int rank = -1;                  ///< -1: process_rank() (explicit setting or the launcher's environment)
  int world_size = -1;            ///< -1: process_rank()
  std::size_t max_events = 512;   ///< ring size: frames and transfers kept (the oldest are dropped, and counted)
  std::size_t max_writes = 64;    ///< automatic rewrites at most (detection, non-finite transfers); write() is extra
  bool write_at_exit = false;     ///< the destructor writes the file too (evidence of a rank that saw nothing)
};

class rank_evidence;

namespace detail {
/// One entry of the evidence ring: a frame (module call or checkpoint) or a marked transfer.
struct evidence_event {
  std::uint64_t order = 0;
  bool is_transfer = false;
  frame f;                 ///< frames: tensors without data pointers
  collective_record c;     ///< transfers
};

inline void health_json(std::string& out, const health_result& h) {
  out += "{\"dtype\": \"";
  out += name(h.type);
  out += "\", \"shape\": [";
  for (int i = 0; i < h.rank; ++i) {
    if (i) out += ", ";
    out += std::to_string(h.shape[i]);
  }
  out += "], \"count\": " + std::to_string(h.count);
  out += ", \"nan\": " + std::to_string(h.nan) + ", \"pos_inf\": " + std::to_string(h.pos_inf) +
         ", \"neg_inf\": " + std::to_string(h.neg_inf);
  out += ", \"nonfinite\": ";
  out += h.has_nonfinite() ? "true" : "false";
  out += '}';
}
}  // namespace detail

/// This rank's evidence. Attach one per recorder: the constructor makes it one of the recorder's listeners
/// (alongside the others, a tree_writer say). The evidence and the recorder may end in either order
/// (attachment.hpp): after the recorder's end the evidence keeps its last step, and transfers marked later are
/// still recorded (with that step). Thread-safe; program order across threads is the order in which their events
/// reach it.
class rank_evidence : public scope_listener {
 public:
  rank_evidence(recorder& rec, rank_evidence_options o) : opts_(std::move(o)) {
    if (opts_.rank < 0 || opts_.world_size <= 0) {
      const rank_info ri = process_rank();
      if (opts_.rank < 0) opts_.rank = ri.rank;
      if (opts_.world_size <= 0) opts_.world_size = ri.world_size;
      rank_source_ = ri.known() ? ri.source : "unknown";
    } else {
      rank_source_ = "explicit";
    }
    if (opts_.max_events == 0) opts_.max_events = 1;
    last_step_ = rec.step();
    connection c = rec.connect(*this);  // its events may arrive on other threads from here on: conn_ under m_
    std::lock_guard<std::mutex> lk(m_);
    conn_ = std::move(c);
  }
  rank_evidence(const rank_evidence&) = delete;
  rank_evidence& operator=(const rank_evidence&) = delete;
  ~rank_evidence() override {
    {
      std::lock_guard<std::mutex> lk(m_);
      last_step_ = step_locked();
    }
    end_attachments();
    if (opts_.write_at_exit) try_write("exit");
  }
  /// The recorder ended, or detached this evidence: it keeps the recorder's last step.
  void detached(recorder& r) noexcept override {
    std::lock_guard<std::mutex> lk(m_);
    last_step_ = r.step();
  }

  int rank() const { return opts_.rank; }
  int world_size() const { return opts_.world_size; }
  /// Whether the evidence still listens to its recorder (false once either has ended the attachment).
  bool attached() const {
    std::lock_guard<std::mutex> lk(m_);
    return conn_.connected();
  }
  /// The recorder's step now, or its last step once the attachment has ended.
  std::uint64_t current_step() const {
    std::lock_guard<std::mutex> lk(m_);
    return step_locked();
  }
  /// The module path of this thread's innermost open scope of the recorder ("" when none, or once the
  /// attachment has ended).
  std::string current_site() const {
    std::string site;
    attachment_ref ref;
    {
      std::lock_guard<std::mutex> lk(m_);
      ref = conn_.ref();
    }
    ref.with_recorder([&](recorder& r) {
      if (scope* sc = detail::current_scope(r)) site = sc->module_path();
    });
    return site;
  }
  /// Whether a non-finite value (not allowed by a rule: in a tensor or a marked transfer) was seen since the last
  /// call; `step` is then the step of the first of them. mpi::all_stop uses it at each step boundary.
  bool take_new_detection(std::uint64_t& step) {
    std::lock_guard<std::mutex> lk(m_);
    if (!new_bad_) return false;
    new_bad_ = false;
    step = new_bad_step_;
    return true;
  }
  /// <dir>/nanscope_evidence_rank<R>of<N>.json
  std::string path() const {
    return opts_.dir + "/nanscope_evidence_rank" + std::to_string(opts_.rank) + "of" +
           std::to_string(opts_.world_size) + ".json";
  }
  /// True once a non-finite value (not allowed by a rule) was seen here: in a tensor or in a marked transfer.
  bool detected() const {
    std::lock_guard<std::mutex> lk(m_);
    return detected_;
  }
  /// Files written so far (automatic and explicit).
  std::size_t writes() const {
    std::lock_guard<std::mutex> lk(m_);
    return writes_;
  }
  /// The last write failure's text ("" if none). Automatic writes never throw: they print to stderr.
  std::string last_error() const {
    std::lock_guard<std::mutex> lk(m_);
    return last_error_;
  }
  /// Records that all ranks stopped at `step` (mpi::all_stop); written into the file.
  void set_stop(std::uint64_t step, std::string reason) {
    std::lock_guard<std::mutex> lk(m_);
    stopped_ = true;
    stop_step_ = step;
    stop_reason_ = std::move(reason);
  }

  /// Writes the file now (atomically); `reason` is stored in it. Throws nanscope::error when the write fails.
  /// A text built later on another thread (a transfer, a detection) holds every event this one does and
  /// replaces it on disk, with its own reason, even when it is committed first.
  void write(std::string_view reason) {
    std::string text;
    std::uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lk(m_);
      text = json_locked(reason, nullptr);
      gen = ++built_;
      ++writes_;
    }
    commit(text, gen);
  }

  // --- transfers (collective_call / p2p_call use these) ---
  /// The next sequence number of a collective on communicator `comm` (0, 1, 2, ...).
  std::uint64_t next_collective_seq(const std::string& comm) {
    std::lock_guard<std::mutex> lk(m_);
    return coll_seq_[comm]++;
  }
  /// The next sequence number of a send (or recv) on (comm, peer, tag).
  std::uint64_t next_pair_seq(const std::string& comm, int peer, int tag, bool send) {
    std::lock_guard<std::mutex> lk(m_);
    return pair_seq_[std::make_tuple(comm, peer, tag, send)]++;
  }
  /// Appends a completed transfer record in program order; rewrites the file when it carried a non-finite value.
  void add_transfer(collective_record c) {
    std::string text;
    std::uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lk(m_);
      const bool bad = c.input_nonfinite() || c.output_nonfinite();
      if (bad) note_bad_locked(c.step);
      detail::evidence_event e;
      e.order = order_++;
      e.is_transfer = true;
      e.c = std::move(c);
      push_locked(std::move(e));
      if (bad) {
        if (!detected_) {
          detected_ = true;
          detection_ = "{\"order\": " + std::to_string(order_ - 1) + ", \"step\": " +
                       std::to_string(ring_.back().c.step) + ", \"transfer\": true}";
        }
        if (writes_ < opts_.max_writes) {
          text = json_locked("transfer", nullptr);
          gen = ++built_;
          ++writes_;
        }
      }
    }
    if (!text.empty()) try_commit(text, gen);
  }

  // --- scope_listener ---
  void scope_opened(const frame& f, bool outermost) noexcept override {
    (void)f;
    (void)outermost;
  }
  void tensor_recorded(const frame& f, const tensor_record& r) noexcept override {
    const bool bad = r.is_tensor && r.health.has_nonfinite() && !r.allowed;
    std::string text;
    std::uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lk(m_);
      if (bad) note_bad_locked(f.step);
      if (f.checkpoint) {  // a checkpoint frame is complete with its one tensor; it has no scope_closed
        detail::evidence_event e;
        e.order = order_++;
        e.f = f;
        e.f.complete = true;
        strip(e.f);
        push_locked(std::move(e));
      }
      if (bad && !detected_) {
        detected_ = true;
        const std::uint64_t at = f.checkpoint ? order_ - 1 : order_;
        detection_ = "{\"order\": " + std::to_string(at) + ", \"step\": " + std::to_string(f.step) +
                     ", \"module_path\": " + detail::json_quote(f.module_path) +
                     ", \"tensor\": " + detail::json_quote(r.context) + ", \"role\": \"" + detail::role_word(r.role) +
                     "\", \"transfer\": false}";
        if (writes_ < opts_.max_writes) {
          text = json_locked("detection", f.checkpoint ? nullptr : &f);
          gen = ++built_;
          ++writes_;
        }
      }
    }
    if (!text.empty()) try_commit(text, gen);
  }
  void scope_closed(const frame& f, bool outermost) noexcept override {
    (void)outermost;
    std::lock_guard<std::mutex> lk(m_);
    detail::evidence_event e;
    e.order = order_++;
    e.f = f;
    e.f.complete = true;
    strip(e.f);
    push_locked(std::move(e));
  }

 private:
  void note_bad_locked(std::uint64_t step) noexcept {
    if (new_bad_) return;
    new_bad_ = true;
    new_bad_step_ = step;
  }
  static void strip(frame& f) {
    for (auto& t : f.tensors) t.view.data = nullptr;
  }
  void push_locked(detail::evidence_event e) {
    if (ring_.size() >= opts_.max_events) {
      ring_.pop_front();
      ++dropped_;
    }
    ring_.push_back(std::move(e));
  }

  static void frame_json(std::string& out, std::uint64_t order, const frame& f, bool complete) {
    out += "    {\"order\": " + std::to_string(order) + ", \"type\": \"";
    out += f.checkpoint ? "checkpoint" : "frame";
    out += "\", \"step\": " + std::to_string(f.step) + ", \"module_path\": " + detail::json_quote(f.module_path) +
           ", \"class\": " + detail::json_quote(f.class_name) + ", \"complete\": " + (complete ? "true" : "false") +
           ", \"tensors\": [";
    bool first = true;
    for (const auto& t : f.tensors) {
      out += first ? "\n      " : ",\n      ";
      first = false;
      out += "{\"role\": \"";
      out += detail::role_word(t.role);
      out += "\", \"context\": " + detail::json_quote(t.context);
      if (!t.is_tensor) {
        out += ", \"tensor\": false}";
        continue;
      }
      out += ", \"allowed\": ";
      out += t.allowed ? "true" : "false";
      out += ", \"health\": ";
      detail::health_json(out, t.health);
      out += '}';
    }
    out += first ? "]}" : "]}";
  }
  static void transfer_json(std::string& out, std::uint64_t order, const collective_record& c) {
    out += "    {\"order\": " + std::to_string(order) + ", \"type\": \"";
    out += is_point_to_point(c.kind) ? name(c.kind) : "collective";
    out += "\", \"kind\": \"";
    out += name(c.kind);
    out += "\", \"step\": " + std::to_string(c.step) + ", \"comm\": " + detail::json_quote(c.comm) +
           ", \"comm_size\": " + std::to_string(c.comm_size) + ", \"comm_rank\": " + std::to_string(c.comm_rank) +
           ", \"members\": [";
    for (std::size_t i = 0; i < c.members.size(); ++i) out += (i ? ", " : "") + std::to_string(c.members[i]);
    out += "], \"seq\": " + std::to_string(c.seq);
    if (is_point_to_point(c.kind)) out += ", \"peer\": " + std::to_string(c.peer) + ", \"tag\": " + std::to_string(c.tag);
    out += ", \"site\": " + detail::json_quote(c.site);
    if (c.has_input) {
      out += ", \"input\": ";
      detail::health_json(out, c.input);
    }
    if (c.has_output) {
      out += ", \"output\": ";
      detail::health_json(out, c.output);
    }
    out += '}';
  }

  std::string json_locked(std::string_view reason, const frame* open) const {
    std::string host = "unknown";
    long pid = 0;
#if NANSCOPE_IMPL_EVIDENCE_POSIX
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) == 0) host = buf;
    pid = static_cast<long>(::getpid());
#endif
    std::string out = "{\n  \"format\": \"nanscope-rank-evidence\",\n  \"version\": 1,\n";
    out += "  \"rank\": " + std::to_string(opts_.rank) + ",\n  \"world_size\": " + std::to_string(opts_.world_size) +
           ",\n  \"rank_source\": " + detail::json_quote(rank_source_) + ",\n  \"host\": " + detail::json_quote(host) +
           ",\n  \"pid\": " + std::to_string(pid) + ",\n  \"reason\": " + detail::json_quote(std::string(reason)) +
           ",\n  \"step\": " + std::to_string(step_locked()) +
           ",\n  \"dropped_events\": " + std::to_string(dropped_) +
           ",\n  \"detection\": " + (detected_ ? detection_ : std::string("null")) + ",\n  \"stop\": ";
    if (stopped_) {
      out += "{\"step\": " + std::to_string(stop_step_) + ", \"reason\": " + detail::json_quote(stop_reason_) + "}";
    } else {
      out += "null";
    }
    out += ",\n  \"events\": [";
    bool first = true;
    for (const auto& e : ring_) {
      out += first ? "\n" : ",\n";
      first = false;
      if (e.is_transfer) {
        transfer_json(out, e.order, e.c);
      } else {
        frame_json(out, e.order, e.f, true);
      }
    }
    if (open != nullptr) {  // the detecting scope, still open: it would take the next order number
      out += first ? "\n" : ",\n";
      first = false;
      frame_json(out, order_, *open, false);
    }
    out += first ? "]\n}\n" : "\n  ]\n}\n";
    return out;
  }

  /// Writes text number `gen` (numbered under m_ as it was built: a later one holds every event an earlier one
  /// does). Commits are serialised and one older than the text on disk is skipped: two threads writing at once
  /// (a detection and a transfer) could otherwise rename the older text last and lose the newer events.
  void commit(const std::string& text, std::uint64_t gen) {
    std::lock_guard<std::mutex> lk(commit_m_);
    if (gen < committed_) return;
    if (!detail::make_directories(opts_.dir))
      detail::file_fail(opts_.dir, "rank_evidence_options::dir: not a directory and cannot be created");
    detail::write_file_atomically(path(), text.data(), text.size());
    committed_ = gen;
  }
  void try_commit(const std::string& text, std::uint64_t gen) noexcept {
#if NANSCOPE_IMPL_EXCEPTIONS
    try {
      commit(text, gen);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lk(m_);
      last_error_ = e.what();
      std::fprintf(stderr, "nanscope: rank evidence not written: %s\n", e.what());
    }
#else
    commit(text, gen);
#endif
  }
  void try_write(std::string_view reason) noexcept {
    std::string text;
    std::uint64_t gen = 0;
    {
      std::lock_guard<std::mutex> lk(m_);
      text = json_locked(reason, nullptr);
      gen = ++built_;
      ++writes_;
    }
    try_commit(text, gen);
  }

  /// The recorder's step now (pinned), else its last one (under m_).
  std::uint64_t step_locked() const {
    std::uint64_t s = last_step_;
    conn_.with_recorder([&](recorder& r) { s = r.step(); });
    return s;
  }

  std::uint64_t last_step_ = 0;  ///< the recorder's step when the attachment ended (under m_)
  rank_evidence_options opts_;
  std::string rank_source_;
  mutable std::mutex m_;
  bool new_bad_ = false;            ///< a non-finite value seen since take_new_detection (under m_)
  std::uint64_t new_bad_step_ = 0;  ///< the step of the first of them (under m_)
  std::uint64_t built_ = 0;      ///< texts built (under m_)
  std::mutex commit_m_;          ///< serialises commits
  std::uint64_t committed_ = 0;  ///< the number of the text on disk (under commit_m_)
  std::deque<detail::evidence_event> ring_;
  std::uint64_t order_ = 0;
  std::uint64_t dropped_ = 0;
  std::size_t writes_ = 0;
  bool detected_ = false;
  std::string detection_;
  bool stopped_ = false;
  std::uint64_t stop_step_ = 0;
  std::string stop_reason_;
  std::string last_error_;
  std::map<std::string, std::uint64_t> coll_seq_;
  std::map<std::tuple<std::string, int, int, bool>, std::uint64_t> pair_seq_;
  connection conn_;  ///< the constructor's attachment (under m_: events may arrive while the constructor sets it)
};

/// Marks one collective (or, with kind send/recv, use p2p_call): checks the input before the call and the output
/// after it, and appends the record to the evidence when it ends. The sequence number is taken at construction.
class collective_call {
 public:
  collective_call(rank_evidence& ev, const communicator& c, collective_kind k, std::string_view site = {})
      : ev_(ev) {
    init(c, k, site);
    r_.seq = ev.next_collective_seq(c.name);
  }
  collective_call(const collective_call&) = delete;
  collective_call& operator=(const collective_call&) = delete;
  ~collective_call() { done(); }

  /// Checks the input (before the call). Host memory; device data: input_health with a result computed there.
  template <class T>
  health_result input(const T& x) {
    return input_health((check)(to_view(x)));
  }
  template <class T>
  health_result output(const T& x) {
    return output_health((check)(to_view(x)));
  }
  /// The input's health computed elsewhere (nanscope::cuda::check on a device buffer, say).
  health_result input_health(const health_result& h) {
    r_.has_input = true;
    r_.input = h;
    return h;
  }
  health_result output_health(const health_result& h) {
    r_.has_output = true;
    r_.output = h;
    return h;
  }
  /// Appends the record now (the destructor does it otherwise); later calls do nothing.
  void done() {
    if (done_) return;
    done_ = true;
    ev_.add_transfer(std::move(r_));
  }
  const collective_record& record() const { return r_; }

 protected:
  collective_call(rank_evidence& ev, int) : ev_(ev) {}
  void init(const communicator& c, collective_kind k, std::string_view site) {
    r_.kind = k;
    r_.comm = c.name;
    r_.comm_size = c.size;
    r_.comm_rank = c.rank;
    r_.members = c.members;
    r_.step = ev_.current_step();
    if (!site.empty()) {
      r_.site.assign(site.data(), site.size());
    } else {
      r_.site = ev_.current_site();
    }
  }
  rank_evidence& ev_;
  collective_record r_;
  bool done_ = false;
};

/// Marks one point-to-point transfer: a send (checks its buffer before the call) or a recv (checks its buffer
/// after the call). `peer` is the other side's rank in the communicator; send and recv pair up by (communicator,
/// sender, receiver, tag) and their per-pair sequence numbers, in MPI's non-overtaking order.
class p2p_call : public collective_call {
 public:
  p2p_call(rank_evidence& ev, const communicator& c, collective_kind k, int peer, int tag,
           std::string_view site = {})
      : collective_call(ev, 0) {
    init(c, k == collective_kind::recv ? collective_kind::recv : collective_kind::send, site);
    r_.peer = peer;
    r_.tag = tag;
    r_.seq = ev.next_pair_seq(c.name, peer, tag, r_.kind == collective_kind::send);
  }
};

NANSCOPE_NAMESPACE_END

// Call-site macros. `...` is the call itself (commas allowed). With NANSCOPE_CONFIG_LEVEL 0 only the call runs.
#ifndef NANSCOPE_CONFIG_LEVEL
#define NANSCOPE_CONFIG_LEVEL 1
#endif
#if NANSCOPE_CONFIG_LEVEL > 0
/// Checks `in`, runs the call, checks `out`, records collective `kind` (all_reduce, all_gather, ...) on `comm`.
#define NANSCOPE_COLLECTIVE(ev, comm, kind, in, out, ...)                                              \
  do {                                                                                               \
    ::nanscope::collective_call nanscope_collective_call_((ev), (comm), ::nanscope::collective_kind::kind); \
    nanscope_collective_call_.input(in);                                                             \
    __VA_ARGS__;                                                                                     \
    nanscope_collective_call_.output(out);                                                           \
  } while (false)
/// Checks `buf`, runs the send call, records a send to `peer` with `tag` on `comm`.
#define NANSCOPE_SEND(ev, comm, peer, tag, buf, ...)                                                    \
  do {                                                                                               \
    ::nanscope::p2p_call nanscope_p2p_call_((ev), (comm), ::nanscope::collective_kind::send, (peer), (tag)); \
    nanscope_p2p_call_.input(buf);                                                                   \
    __VA_ARGS__;                                                                                     \
  } while (false)
/// Runs the receive call, checks `buf`, records a recv from `peer` with `tag` on `comm`.
#define NANSCOPE_RECV(ev, comm, peer, tag, buf, ...)                                                    \
  do {                                                                                               \
    ::nanscope::p2p_call nanscope_p2p_call_((ev), (comm), ::nanscope::collective_kind::recv, (peer), (tag)); \
    __VA_ARGS__;                                                                                     \
    nanscope_p2p_call_.output(buf);                                                                  \
  } while (false)
#else
#define NANSCOPE_COLLECTIVE(ev, comm, kind, in, out, ...) \
  do {                                                   \
    __VA_ARGS__;                                         \
  } while (false)
#define NANSCOPE_SEND(ev, comm, peer, tag, buf, ...) \
  do {                                              \
    __VA_ARGS__;                                    \
  } while (false)
#define NANSCOPE_RECV(ev, comm, peer, tag, buf, ...) \
  do {                                              \
    __VA_ARGS__;                                    \
  } while (false)
#endif

#endif  // NANSCOPE_RANK_EVIDENCE_HPP
