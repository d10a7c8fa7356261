// nanscope — recorder.hpp: the frame recorder. Scopes name the modules of a forward pass; every tensor
// recorded inside a scope (parameters, inputs, outputs) is checked with the fused pass; a ring buffer keeps
// the last N module frames; the moment a NaN/Inf appears the recorder prints the story of the frames that
// led to it (report.hpp) and applies its policy (throw, abort, print and continue, or a callback).
//
//   nanscope::recorder rec;                                   // or nanscope::default_recorder()
//   {
//     nanscope::scope ff(rec, "encoder.block.2.layer.1.DenseReluDense", "T5DenseGatedGeluDense");
//     ff.input(hidden);
//     ...
//     ff.output(out);                                         // checks; reports on NaN/Inf
//   }                                                         // frame complete -> ring buffer
//
// Most code uses the macros of macros.hpp (NANSCOPE_SCOPE, NANSCOPE_INPUT, DETECT_OVERFLOW, ...).
// Parts: frame.hpp (what is recorded), recorder_options.hpp, listener.hpp and attachment.hpp (the objects attached
// to a recorder and their lifetimes), scope.hpp (module scopes), detail/pending_raise.hpp (what is raised after
// a scope's end), snapshot.hpp (the .npy files of a detection); this file: the recorder itself.
// Thread safety: scopes are per thread (a thread-local stack); completed frames go into the shared ring under a
// mutex; options may be replaced at any time (set_options); attaching and detaching are thread-safe.
#ifndef NANSCOPE_RECORDER_HPP
#define NANSCOPE_RECORDER_HPP

#include "attachment.hpp"
#include "check.hpp"
#include "config.hpp"
#include "frame.hpp"
#include "health.hpp"
#include "hf_style.hpp"
#include "histogram.hpp"
#include "listener.hpp"
#include "margins.hpp"
#include "npy.hpp"
#include "rank.hpp"
#include "recorder_options.hpp"
#include "view.hpp"
#include "detail/atomic_file.hpp"
#include "detail/pending_raise.hpp"
#include "detail/step_marks.hpp"
#include "detail/recorder_support.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

NANSCOPE_NAMESPACE_BEGIN

class scope;


/// The recorder: options, the step counter, the ring of completed frames.
class recorder {
 public:
  recorder() { ring_.resize(opts_.max_frames); }
  explicit recorder(recorder_options o) : opts_(std::move(o)) { ring_.resize(opts_.max_frames); }
  recorder(const recorder&) = delete;
  recorder& operator=(const recorder&) = delete;
  /// Ends every attachment (waiting for calls into the attached objects on other threads, and for
  /// connection::with_recorder calls in progress) and tells each attached object (attachable::detached), which
  /// then never reaches this recorder again. Allocates nothing.
  ~recorder() { hub_->close(*this); }

  /// Replaces the options (clears the saved frames when max_frames changes).
  void set_options(recorder_options o) {
    std::lock_guard<std::mutex> lk(m_);
    if (o.max_frames != opts_.max_frames) {
      ring_.assign(o.max_frames, frame{});
      head_ = count_ = 0;
    }
    opts_ = std::move(o);
  }
  recorder_options options() const {
    std::lock_guard<std::mutex> lk(m_);
    return opts_;
  }

  std::uint64_t step() const { return step_.load(std::memory_order_relaxed); }
  /// Sets the step number explicitly (for engines that own their loop); resets per-step state.
  void set_step(std::uint64_t s) {
    {
      std::lock_guard<std::mutex> lk(m_);
      begin_step_locked(s);
    }
    tell_step_boundary(s);
  }
  /// Marks the current step complete and starts the next one (what auto_step does at the outermost scope).
  void next_step() { complete_step(); }

  /// Attaches `l` as a listener of scope events (in addition to those attached already) and returns the handle of
  /// that attachment: it ends when the handle is destroyed or disconnected, when `l` is destroyed, when
  /// remove_listener(&l) is called, or when this recorder is destroyed, whichever comes first (l is told of the
  /// last two through detached()). A listener attached already, or a recorder being destroyed: an empty
  /// connection (connected() false), nothing attached. Events of scopes opened before it attached are passed on
  /// from then on (a listener that needs whole scopes ignores closes it never saw open, as the tree writer does).
  [[nodiscard]] connection connect(scope_listener& l) { return connection(hub_->attach(l, &l, false)); }
  /// Makes `g` the check gate and returns the handle of that attachment (as connect). The gate it replaces is
  /// detached and told (detached()).
  [[nodiscard]] connection connect_gate(check_gate& g) { return connection(hub_->attach(g, &g, true)); }
  /// Attaches `l` without a handle: it stays attached until remove_listener(l), set_listener, the end of `l` or
  /// the end of this recorder. Returns false when it was attached already (nothing changes) or the recorder is
  /// being destroyed. nullptr: no effect.
  bool add_listener(scope_listener* l) {
    if (l == nullptr) return false;
    return hub_->attach(*l, l, false)->st.load(std::memory_order_acquire) == detail::attachment::state::attached;
  }
  /// Detaches `l` (however it was attached) and tells it (detached()); returns whether it was attached. Waits
  /// until every call into it on other threads has returned (a call on this thread that is still running — a
  /// listener detaching itself from inside its own callback — is not waited for). Afterwards the recorder never
  /// touches it again.
  bool remove_listener(scope_listener* l) { return l != nullptr && hub_->detach_listener(l); }
  /// Replaces all listeners by `l` (nullptr: detaches all; each detached one is told) and returns the most
  /// recently attached one before (nullptr if none). Kept for compatibility: code that restores the returned
  /// pointer later must know that it is still alive; connect / add_listener / remove_listener need no such care.
  scope_listener* set_listener(scope_listener* l) {
    const std::vector<void*> old = hub_->listeners();
    for (void* o : old)
      if (o != l) hub_->detach_listener(o);
    add_listener(l);
    return old.empty() ? nullptr : static_cast<scope_listener*>(old.back());
  }
  /// The most recently attached listener still attached (nullptr if none).
  scope_listener* listener() const { return static_cast<scope_listener*>(hub_->newest_listener()); }
  /// Whether an attached listener asks for tensor_record::reference (adapters skip that cost otherwise).
  bool listeners_want_reference_stats() const {
    return hub_->any_listener([](void* l) { return static_cast<scope_listener*>(l)->wants_reference_stats(); });
  }
  /// How many listeners are attached.
  std::size_t listener_count() const { return hub_->listener_count(); }

  /// A number unique to this recorder within the process (snapshot file names and frame::recorder carry it).
  std::uint64_t id() const { return id_; }

  /// Makes `g` the check gate without a handle (nullptr: no gate) and returns the previous one, which is detached
  /// and told (detached()). connect_gate gives a handle.
  check_gate* set_gate(check_gate* g) {
    if (g == nullptr) return static_cast<check_gate*>(hub_->detach_gate());
    void* old = nullptr;
    hub_->attach(*g, g, true, &old);
    return static_cast<check_gate*>(old);
  }
  /// The check gate attached now (nullptr if none).
  check_gate* gate() const { return static_cast<check_gate*>(hub_->gate()); }
  /// Switches checking off and on at run time (change it between steps). Off: scopes opened while off do
  /// nothing but count steps, record() returns an empty result, no data is read.
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  /// Writes text to the sink (stderr without one), as the recorder's own messages: for layers above it.
  void write_to_sink(std::string_view text) const {
    std::lock_guard<std::mutex> lk(m_);
    emit(text);
  }
  /// Passes an early warning about a tensor recorded into the open frame `f` to every listener
  /// (scope_listener::warning_raised), on the calling thread: for layers above the recorder (history.hpp).
  void notify_warning(const frame& f, const early_warning& w) noexcept {
    notify([&](scope_listener& l) { l.warning_raised(f, w); });
  }

  /// The saved frames, oldest first.
  std::vector<frame> frames() const {
    std::lock_guard<std::mutex> lk(m_);
    return saved_locked();
  }
  std::uint64_t detections() const { return detections_.load(std::memory_order_relaxed); }
  std::uint64_t warnings() const { return warnings_.load(std::memory_order_relaxed); }
  void clear() {
    std::lock_guard<std::mutex> lk(m_);
    for (auto& f : ring_) f = frame{};
    head_ = count_ = 0;
    hf_.clear();
  }

  /// Records a one-tensor checkpoint frame (DETECT_OVERFLOW). Path: the enclosing scope of this thread.
  template <class T>
  health_result checkpoint(const T& tensor, std::string_view context, source_location where = {},
                           allow allowed = allow::none);
  /// A checkpoint whose health was computed elsewhere (a device check resolved later, see deferred.hpp).
  health_result checkpoint_result(const tensor_view& v, const health_result& h, std::string_view context,
                                  source_location where = {}, allow allowed = allow::none);

  /// Throws what a completed scope could not throw from its destructor, once: the detection_error of the hf
  /// style (its report is printed already), else stop_requested if abort_after_step was reached. Called when
  /// the next scope opens, by recording (detection_error only) and by next_step(); call it after a forward pass
  /// to raise at once what HuggingFace raises in the root module's hook.
  void raise_pending() {
    pending_.raise_detection();
    pending_.raise_stop();
  }
  /// raise_pending() (the name scopes call when they open).
  void raise_pending_stop() { raise_pending(); }
  /// Throws the hf style's pending detection_error, if any.
  void raise_pending_detection() { pending_.raise_detection(); }

  // --- used by scope ---
  void complete(frame&& f, bool outermost);
  /// The outermost scope of a step opened while checking was off ended: only the step advances.
  void complete_inert();
  /// Checks one tensor into frame `f`; detects, warns, reports. Returns the health (a copy: the frame's
  /// storage moves as more tensors are recorded).
  /// `known`: the tensor's health computed elsewhere (a device check resolved later, see deferred.hpp); the data
  /// is then not read at all (no margins, no integer ranges) and device pointers are dropped from the record.
  health_result record(frame& f, tensor_role role, std::string context, const tensor_view& v, source_location where,
                       allow allowed, const health_result* known = nullptr);
  void record_non_tensor(frame& f, tensor_role role, std::string context, bool is_none, std::string repr = {});

 private:
  friend class scope;
  std::vector<frame> saved_locked() const {
    std::vector<frame> out;
    out.reserve(count_);
    const std::size_t n = ring_.size();
    for (std::size_t i = 0; i < count_; ++i) out.push_back(ring_[(head_ + n - count_ + i) % n]);
    return out;
  }
  bool tracing_locked(std::uint64_t s) const {
    for (auto t : opts_.trace_steps)
      if (t == s) return true;
    return false;
  }
  void begin_step_locked(std::uint64_t s) noexcept {
    step_.store(s, std::memory_order_relaxed);
    marks_.begin_step();
  }
  /// Tells the gate (if any) that step `next` starts.
  void tell_step_boundary(std::uint64_t next) noexcept {
    detail::attachment_hub::gate_hold hold(*hub_);
    if (void* g = hold.get()) static_cast<check_gate*>(g)->step_boundary(next);
  }
  void emit(std::string_view text) const {
    if (text.empty()) return;
    if (opts_.sink) {
      detail::call_text_callback(opts_.sink, text, "the recorder's sink");
    } else {
      std::FILE* to = opts_.style == report_style::hf ? stdout : stderr;  // HF prints with print()
      std::fwrite(text.data(), 1, text.size(), to);
      std::fflush(to);
    }
  }
  void complete_step();
  void complete_hf(frame&& f, bool outermost);
  /// Defined in snapshot.hpp (included at the end of this file).
  void write_snapshot(const std::string& dir, const detection& d, const frame& current);
  health_result checkpoint_impl(const tensor_view& v, std::string_view context, source_location where, allow allowed,
                                const health_result* known);
  std::string stop_text(std::uint64_t batches_done) const {
    return "DebugUnderflowOverflow: aborting after " + std::to_string(batches_done) +
           " batches due to `abort_after_batch_num=" + std::to_string(opts_.abort_after_step) + "` arg";
  }
  void detect(frame& current, const tensor_record& rec);
  void maybe_warn(const frame& f, tensor_record& rec);
  allow rule_allow(const std::string& path, bool& skip) const {
    allow a = allow::none;
    skip = false;
    for (const auto& r : opts_.rules) {
      if (detail::glob_match(r.pattern, path)) {
        a = a | r.allowed;
        skip = skip || r.skip;
      }
    }
    return a;
  }
  /// The dtype a tensor at `path` of dtype `own` will be cast to: the first matching rule's cast_to, else the
  /// options' cast_to, else its own dtype.
  dtype cast_target_locked(const std::string& path, dtype own) const {
    for (const auto& r : opts_.rules)
      if (r.cast_to && detail::glob_match(r.pattern, path)) return *r.cast_to;
    return opts_.cast_to ? *opts_.cast_to : own;
  }

  mutable std::mutex m_;
  recorder_options opts_;
  std::vector<frame> ring_;
  std::size_t head_ = 0, count_ = 0;
  std::atomic<std::uint64_t> step_{0};
  std::uint64_t sequence_ = 0;
  detail::step_marks marks_;  ///< what was said in this step (under m_)
  std::atomic<std::uint64_t> detections_{0};
  std::atomic<std::uint64_t> warnings_{0};
  detail::hf_machine<frame> hf_;  ///< report_style::hf: HuggingFace's hook state (hf_style.hpp)
  detail::pending_raise pending_;  ///< what a scope's end could not throw
  /// Calls fn(listener) for every attached listener, outside the recorder's locks; allocates nothing, so it
  /// cannot throw: ~scope calls it.
  template <class F>
  void notify(F&& fn) const noexcept {
    hub_->for_each_listener([&](void* l) { fn(*static_cast<scope_listener*>(l)); });
  }
  /// A misuse of lifetimes (scopes ended out of order): printed to the sink.
  void report_misuse(const std::string& text) {
    std::lock_guard<std::mutex> lk(m_);
    emit(text);
  }

  const std::uint64_t id_ = detail::next_recorder_id();
  std::atomic<bool> enabled_{true};
  /// The attached listeners and gate; shared with the attachments, which may outlive the recorder.
  const std::shared_ptr<detail::attachment_hub> hub_ = std::make_shared<detail::attachment_hub>(*this);
};

/// The process-wide default recorder used by the macros.
inline recorder& default_recorder() {
  // never destroyed: objects with static storage attached to it (a history, a tree writer) may end after it
  static recorder* const r = new recorder();
  return *r;
}

// ------------------------------------------------------------------------------------------------------
// recorder implementation
// ------------------------------------------------------------------------------------------------------

inline void recorder::record_non_tensor(frame& f, tensor_role role, std::string context, bool is_none,
                                         std::string repr) {
  if (!enabled()) return;
  tensor_record rec;
  rec.role = role;
  rec.context = std::move(context);
  rec.is_tensor = false;
  rec.is_none = is_none;
  rec.repr = is_none && repr.empty() ? std::string("None") : std::move(repr);
  f.tensors.push_back(std::move(rec));
  notify([&](scope_listener& l) { l.tensor_recorded(f, f.tensors.back()); });
}

inline health_result recorder::record(frame& f, tensor_role role, std::string context, const tensor_view& v,
                                      source_location where, allow allowed, const health_result* known) {
  if (!enabled()) {
    health_result off;
    off.mode = check_mode::no_tensor;
    return off;
  }
  // hf style: what HF raised in a completed call's hook (a detection, abort_after_batch_num) is raised here
  if (pending_.any()) {
    bool hf;
    {
      std::lock_guard<std::mutex> lk(m_);
      hf = opts_.style == report_style::hf;
    }
    if (hf) raise_pending();
  }
  tensor_record rec;
  rec.role = role;
  rec.context = std::move(context);
  rec.where = where;
  rec.view = v;
  rec.reference = detail::take_reference_stats(v.data);
  if (known != nullptr && v.space == memory_space::cuda_device) rec.view.data = nullptr;  // never read on the host
  bool skip = false;
  check_mode mode;
  unsigned threads;
  bool skip_int;
  bool want_margins;
  bool hf;
  bool warn;
  {
    std::lock_guard<std::mutex> lk(m_);
    allowed = allowed | rule_allow(f.module_path, skip);
    hf = opts_.style == report_style::hf;
    warn = !hf || opts_.warn_in_hf_style;
    mode = opts_.mode;
    threads = opts_.check_threads;
    skip_int = opts_.skip_integer_tensors;
    want_margins = opts_.count_margins;
  }
  // The gate (control.hpp) may skip this tensor or change its mode; it is told what each check cost. It stays
  // attached until this check has been told to it.
  const detail::attachment_hub::gate_hold hold(*hub_);
  check_gate* const g = static_cast<check_gate*>(hold.get());
  std::uint32_t ticket = check_gate::skip;
  if (g != nullptr) {
    ticket = g->admit(f, role, rec.context, mode);
    if (ticket == check_gate::skip) {  // not recorded; the data is not read (a device result is returned as is)
      if (known != nullptr) return *known;
      return (check)(v, check_options{}.with_mode(check_mode::shape));
    }
  }
  struct gate_timer {
    check_gate* g;
    std::uint32_t ticket;
    std::uint64_t bytes;
    std::chrono::steady_clock::time_point t0;
    ~gate_timer() {
      if (g == nullptr) return;
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
      g->checked(ticket, bytes, static_cast<std::uint64_t>(ns.count()));
    }
  } timer{g, ticket, g != nullptr && known == nullptr ? v.numel() * size_of(v.type) : 0,
          g != nullptr ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{}};
  // A result computed elsewhere, reduced to what this recorder's mode and rules would have computed.
  auto known_as = [&](check_mode m) {
    health_result h = *known;
    if (m == check_mode::shape || m == check_mode::no_tensor) {
      health_result s;
      s.type = h.type;
      s.mode = m;
      s.rank = h.rank;
      for (int i = 0; i < h.rank; ++i) s.shape[i] = h.shape[i];
      s.count = h.count;
      return s;
    }
    return h;
  };
  if (!is_float(v.type)) {
    if (known != nullptr) {
      rec.health = known_as(check_mode::shape);
      if (skip_int) return rec.health;
      if (rec.view.data != nullptr && v.space != memory_space::cuda_device)
        detail::integer_abs_range(v, rec.health.abs_min, rec.health.abs_max);
    } else {
      if (skip_int) return (check)(v, check_options{}.with_mode(check_mode::shape));
      rec.health = (check)(v, check_options{}.with_mode(check_mode::shape));
      detail::integer_abs_range(v, rec.health.abs_min, rec.health.abs_max);
    }
    f.tensors.push_back(std::move(rec));
    notify([&](scope_listener& l) { l.tensor_recorded(f, f.tensors.back()); });
    return f.tensors.back().health;
  }
  if (known != nullptr) {
    rec.health = known_as(skip ? check_mode::shape : known->mode);
  } else if (skip) {
    rec.health = (check)(v, check_options{}.with_mode(check_mode::shape));
  } else {
    const check_options copt = check_options{}.with_mode(mode).with_threads(threads);
    if (want_margins && (mode == check_mode::full_health || mode == check_mode::stats)) {
      // one pass: the margins' boundary counts ride in the health pass (histogram.hpp)
      auto hm = check_margins(v, copt);
      rec.health = hm.first;
      rec.margins = hm.second;
      rec.has_margins = true;
    } else {
      rec.health = (check)(v, copt);
      if (want_margins) {
        rec.margins = margins(v);
        rec.has_margins = true;
      }
    }
  }
  const health_result& h = rec.health;
  const bool bad = (h.nan != 0 && !allows(allowed, allow::nan)) || (h.pos_inf != 0 && !allows(allowed, allow::pos_inf)) ||
                   (h.neg_inf != 0 && !allows(allowed, allow::neg_inf)) ||
                   (mode == check_mode::curt_health && h.has_nonfinite() && allowed == allow::none);
  rec.allowed = h.has_nonfinite() && !bad;
  f.tensors.push_back(std::move(rec));
  tensor_record& stored = f.tensors.back();
  if (warn) maybe_warn(f, stored);
  notify([&](scope_listener& l) { l.tensor_recorded(f, stored); });
  const health_result result = stored.health;
  if (bad && !hf) detect(f, stored);
  // hf style: module tensors are analysed when the call completes (complete_hf); a checkpoint is HF's
  // detect_overflow(var, ctx): it prints `{ctx} has nans` / `{ctx} has infs` at once and reports nothing.
  if (bad && hf && role == tensor_role::checkpoint) {
    std::string lines;
    if (stored.health.has_nan()) lines += stored.context + " has nans\n";
    if (stored.health.has_inf()) lines += stored.context + " has infs\n";
    std::lock_guard<std::mutex> lk(m_);
    if (opts_.policy != on_detect::callback) emit(lines);
  }
  return result;
}

inline void recorder::maybe_warn(const frame& f, tensor_record& rec) {
  // Non-finite values are the detector's business; warnings are for finite values approaching a limit.
  if (!rec.is_tensor || !is_float(rec.health.type) || !detail::is_finite_bits(rec.health.abs_max)) return;
  if (rec.health.has_nonfinite() && !rec.allowed) return;
  std::string text;
  {
    std::lock_guard<std::mutex> lk(m_);
    const dtype target = cast_target_locked(f.module_path, rec.health.type);
    for (int i = 0; i < lp_format_count; ++i) {
      const double thr = opts_.warn_abs_max[i];
      if (lp_dtype(static_cast<lp_format>(i)) != target) continue;  // measured against the cast target only
      if (!(thr > 0.0) || !(rec.health.abs_max >= thr)) continue;
      rec.warned |= 1u << i;
      std::string site = f.module_path;
      site += ':';
      site += rec.context;
      site += '#';
      site += static_cast<char>('0' + i);
      if (!marks_.first_warning(std::move(site))) continue;
      warnings_.fetch_add(1, std::memory_order_relaxed);
      if (auto fn = detail::warning_formatter().load()) text += fn(f, rec, static_cast<lp_format>(i), thr);
    }
    if (!text.empty()) emit(text);
  }
}

inline void recorder::detect(frame& current, const tensor_record& rec) {
  auto d = std::make_shared<detection>();
  on_detect policy;
  std::function<void(const detection&)> cb;
  std::string snapshot_dir;
  {
    std::lock_guard<std::mutex> lk(m_);
    const std::uint64_t s = step_.load(std::memory_order_relaxed);
    if (tracing_locked(s)) return;  // HuggingFace: detection is off while a step is traced
    if (opts_.report_once_per_step && marks_.reported(s)) return;
    marks_.mark_reported(s);
    detections_.fetch_add(1, std::memory_order_relaxed);
    d->step = s;
    d->module_path = current.module_path;
    d->class_name = current.class_name;
    d->context = rec.context;
    d->role = rec.role;
    d->health = rec.health;
    d->where = rec.where;
    d->produced_here = current.inputs_finite();
    d->frames = saved_locked();  // and the detecting frame (also with max_frames 0: the native reports show it)
    if (!d->frames.empty() && d->frames.size() >= opts_.max_frames) d->frames.erase(d->frames.begin());
    d->frames.push_back(current);
    for (auto& f : d->frames)
      for (auto& t : f.tensors) t.view.data = nullptr;  // frames outlive the data: drop the pointers
    if (auto fn = detail::report_formatter().load()) {
      d->report = fn(opts_.style, *d);
    } else {
      d->report = "nanscope: inf/nan detected in " + d->module_path + " " + d->context + "\n";
    }
    d->report += rank_report_line();  // multi-process runs: which rank reports (rank.hpp)
    policy = opts_.policy;
    cb = opts_.callback;
    snapshot_dir = opts_.snapshot_dir;
    if (policy != on_detect::callback) emit(d->report);
  }
  if (!snapshot_dir.empty()) write_snapshot(snapshot_dir, *d, current);
  switch (policy) {
    case on_detect::throw_exception: NANSCOPE_IMPL_THROW(detection_error(d));
    case on_detect::abort: std::abort();
    case on_detect::print_and_continue: return;
    case on_detect::callback:
      if (cb) cb(*d);
      return;
  }
}

inline void recorder::complete(frame&& f, bool outermost) {
  bool hf;
  {
    std::lock_guard<std::mutex> lk(m_);
    hf = opts_.style == report_style::hf;
  }
  if (hf) {
    const std::uint64_t before = step();
    complete_hf(std::move(f), outermost);
    const std::uint64_t after = step();
    if (after != before) tell_step_boundary(after);
    return;
  }
  std::string trace;
  std::uint64_t boundary = 0;
  bool advanced = false;
  {
    bool stop = false;
    std::uint64_t finished_step = 0;
    std::lock_guard<std::mutex> lk(m_);
    f.sequence = sequence_++;
    const std::uint64_t s = f.step;
    if (tracing_locked(s)) {
      if (auto fn = detail::trace_formatter().load()) {
        trace = fn(f, marks_.first_banner(s));
      }
    }
    if (!ring_.empty()) {  // max_frames 0: no frame is kept
      frame& slot = ring_[head_];
      slot = std::move(f);
      for (auto& t : slot.tensors) t.view.data = nullptr;
      head_ = (head_ + 1) % ring_.size();
      if (count_ < ring_.size()) ++count_;
    }
    if (!trace.empty()) emit(trace);
    if (outermost && opts_.auto_step) {
      finished_step = step_.load(std::memory_order_relaxed);
      stop = opts_.abort_after_step >= 0 && finished_step >= static_cast<std::uint64_t>(opts_.abort_after_step) &&
             !pending_.stop_armed();
      begin_step_locked(finished_step + 1);
      advanced = true;
      boundary = finished_step + 1;
      if (stop) {
        std::string msg = stop_text(finished_step + 1);
        emit(msg + "\n");
        if (opts_.policy == on_detect::abort) std::abort();
        // A scope's destructor must not throw: stop_requested is raised when the next step's first scope opens.
        pending_.arm_stop(std::move(msg));
      }
    }
  }
  if (advanced) tell_step_boundary(boundary);
}

inline void recorder::complete_inert() {
  std::uint64_t next = 0;
  {
    std::lock_guard<std::mutex> lk(m_);
    if (!opts_.auto_step) return;
    next = step_.load(std::memory_order_relaxed) + 1;
    begin_step_locked(next);
  }
  tell_step_boundary(next);
}

inline void recorder::complete_step() {
  raise_pending_detection();
  std::string msg;
  std::uint64_t boundary = 0;
  {
    std::lock_guard<std::mutex> lk(m_);
    const bool hf = opts_.style == report_style::hf;
    const std::uint64_t finished = step_.load(std::memory_order_relaxed);
    std::uint64_t next = finished;
    // hf style: the end of a batch without a root frame (HF's steps 3, 6 and 8: the next frame gets the banner)
    const bool hf_stop = hf && hf_.end_batch(next, opts_.abort_after_step);
    if (pending_.take_stop(msg)) {
      // auto_step armed the stop already
    } else if (hf_stop || (!hf && opts_.abort_after_step >= 0 &&
                           finished >= static_cast<std::uint64_t>(opts_.abort_after_step))) {
      msg = stop_text(finished + 1);
      if (!hf || opts_.policy == on_detect::abort) emit(msg + "\n");  // HF prints nothing, it raises
      if (opts_.policy == on_detect::abort) std::abort();
    }
    begin_step_locked(finished + 1);
    boundary = finished + 1;
  }
  tell_step_boundary(boundary);
  if (!msg.empty()) NANSCOPE_IMPL_THROW(stop_requested(msg));
}

/// report_style::hf: a module call completed — HuggingFace's forward hook (docs/formats.md, hf_style.hpp). The
/// frame also goes into the recorder's own ring (frames()). A scope cannot throw from its destructor: a
/// detection is printed here and its detection_error raised by the next record, scope or raise_pending().
inline void recorder::complete_hf(frame&& f, bool outermost) {
  std::shared_ptr<detection> d;
  on_detect policy = on_detect::throw_exception;
  std::function<void(const detection&)> cb;
  bool abort_now = false;
  {
    std::lock_guard<std::mutex> lk(m_);
    f.sequence = sequence_++;
    for (auto& t : f.tensors) t.view.data = nullptr;  // frames outlive the data
    if (!ring_.empty()) {  // max_frames 0: no frame is kept
      ring_[head_] = f;
      head_ = (head_ + 1) % ring_.size();
      if (count_ < ring_.size()) ++count_;
    }
    if (f.checkpoint) return;  // not a module call: HF's hook never sees it (record() printed its lines)
    const bool is_root = outermost && opts_.auto_step;
    std::uint64_t batch = step_.load(std::memory_order_relaxed);
    // A call left by an exception did not complete, and after HF raised no hook runs in that forward pass: the
    // hook is skipped for both. The batch still ends with the root, so the next forward pass is the next batch.
    bool skip = pending_.any();
#if NANSCOPE_IMPL_EXCEPTIONS
    skip = skip || std::uncaught_exceptions() > 0;
#endif
    if (skip) {
      if (is_root) {
        hf_.end_batch(batch, -1);
        begin_step_locked(batch);
      }
      return;
    }
    // "Once per batch" is keyed by the batch this call belongs to: the root's call ends batch N (HF prints N+1),
    // so a NaN already reported in batch N is not reported again by the root, and batch N+1 starts afresh.
    const std::uint64_t call_batch = batch;
    const bool reported_before = marks_.reported(call_batch);
    auto o = hf_.on_call(std::move(f), is_root, batch, opts_.max_frames, opts_.abort_after_step,
                         [this](std::uint64_t b) { return tracing_locked(b); });
    if (batch != step_.load(std::memory_order_relaxed)) begin_step_locked(batch);
    policy = opts_.policy;
    std::string text = policy == on_detect::callback ? std::string() : std::move(o.has_lines);
    if (o.trace && policy != on_detect::callback) {
      if (auto fn = detail::trace_formatter().load()) text += fn(o.traced, false);
    }
    bool raised = false;
    if (o.report) {
      hf_.clear_detected();
      if (!(opts_.report_once_per_step && reported_before)) {
        marks_.mark_reported(call_batch);
        detections_.fetch_add(1, std::memory_order_relaxed);
        d = std::make_shared<detection>();
        const frame& ff = hf_.first_frame();
        const tensor_record& t = ff.tensors[hf_.first_tensor()];
        d->step = batch;
        d->module_path = ff.module_path;
        d->class_name = ff.class_name;
        d->context = t.context;
        d->role = t.role;
        d->health = t.health;
        d->where = t.where;
        d->produced_here = ff.inputs_finite();
        d->frames = hf_.frames();
        if (auto fn = detail::report_formatter().load()) {
          d->report = fn(report_style::hf, *d);
        } else {
          d->report = "nanscope: inf/nan detected in " + d->module_path + " " + d->context + "\n";
        }
        // no rank line here (the native styles end with one): HuggingFace's bytes, as each of its processes
        // prints them
        if (policy != on_detect::callback) text += d->report;
        cb = opts_.callback;
        if (policy == on_detect::throw_exception) {
          raised = true;
          pending_.arm_detection(d);
        }
        abort_now = policy == on_detect::abort;
      }
    }
    if (o.stop && !raised && !pending_.stop_armed()) {
      std::string msg = detail::hf_abort_text(batch, opts_.abort_after_step);
      if (policy == on_detect::abort) {
        text += msg + "\n";  // the process ends: the reason must show somewhere
        abort_now = true;
      } else {
        pending_.arm_stop(std::move(msg));  // HF prints nothing: it raises
      }
    }
    emit(text);
  }
  if (abort_now) std::abort();
  if (d && policy == on_detect::callback && cb) {
#if NANSCOPE_IMPL_EXCEPTIONS
    // This runs as a scope ends (a destructor): an exception from the callback is raised later, where a
    // detection_error would be (the next record, scope or raise_pending()), never from the destructor.
    try {
      cb(*d);
    } catch (...) {
      pending_.arm_callback_error(std::current_exception());
    }
#else
    cb(*d);
#endif
  }
}

template <class T>
health_result recorder::checkpoint(const T& tensor, std::string_view context, source_location where, allow allowed) {
  return checkpoint_impl(to_view(tensor), context, where, allowed, nullptr);
}

inline health_result recorder::checkpoint_result(const tensor_view& v, const health_result& h,
                                                 std::string_view context, source_location where, allow allowed) {
  return checkpoint_impl(v, context, where, allowed, &h);
}


NANSCOPE_NAMESPACE_END

// class scope, and recorder::checkpoint_impl (a checkpoint is a frame under the innermost scope)
#include "scope.hpp"
// recorder::write_snapshot (what a detection saves into recorder_options::snapshot_dir)
#include "snapshot.hpp"

#endif  // NANSCOPE_RECORDER_HPP
