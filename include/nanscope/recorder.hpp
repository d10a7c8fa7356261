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
// a scope's end), snapshot.hpp (the .npy files of a detection); this file: the recorder class;
// detail/recorder_impl.hpp: its recording, detection and step logic (the heavy part, config.hpp).
// Thread safety: scopes are per thread (a thread-local stack); completed frames go into the shared ring under a
// mutex; options may be replaced at any time (set_options); attaching and detaching are thread-safe.
#ifndef NANSCOPE_RECORDER_HPP
#define NANSCOPE_RECORDER_HPP

#include "attachment.hpp"
#include "check_api.hpp"
#include "config.hpp"
#include "frame.hpp"
#include "health.hpp"
#include "hf_style.hpp"
#include "listener.hpp"
#include "recorder_options.hpp"
#include "view.hpp"
#include "detail/pending_raise.hpp"
#include "detail/step_marks.hpp"
#include "detail/recorder_support.hpp"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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
  /// A checkpoint checked with segmentation `s` (NANSCOPE_DETECT_OVERFLOW_SEGMENTS): a detection names the bad
  /// segments. A segmentation that does not fit the tensor throws check()'s nanscope::error.
  template <class T>
  health_result checkpoint(const T& tensor, std::string_view context, const segments& s, source_location where = {},
                           allow allowed = allow::none);
  /// A checkpoint checked against a block-scaled target (NANSCOPE_DETECT_OVERFLOW_BLOCKS): besides the health, what
  /// quantizing it to MXFP8/MXFP6/MXFP4/NVFP4 would lose, kept with the frame and warned about past
  /// block_target::warn_lossy_fraction (block_scaled_record.hpp). A float tensor in host memory; else health only.
  template <class T>
  health_result checkpoint(const T& tensor, std::string_view context, const block_target& target,
                           source_location where = {}, allow allowed = allow::none);
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
  /// `seg`: a segmentation given with this call (scope::output(x, seg)): it must fit the tensor (else check()'s
  /// nanscope::error). Without one, the innermost NANSCOPE_SEGMENTS guard of this thread for this recorder applies
  /// to inputs, outputs and checkpoints when it fits (segments_guard.hpp).
  /// `target`: a block-scaled target given with this call (a checkpoint's); without one, the first matching
  /// site_rule's block_scaled, else recorder_options::block_scaled.
  health_result record(frame& f, tensor_role role, std::string context, const tensor_view& v, source_location where,
                       allow allowed, const health_result* known = nullptr, const segments* seg = nullptr,
                       const block_target* target = nullptr);
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
                                const health_result* known, const segments* seg = nullptr,
                                const block_target* target = nullptr);
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
  /// The block-scaled target of a tensor at `path`: the first matching rule's block_scaled, else the options'
  /// (null when neither names a format).
  const block_target* block_target_locked(const std::string& path) const {
    const block_target* t = nullptr;
    for (const auto& r : opts_.rules)
      if (r.block_scaled && detail::glob_match(r.pattern, path)) {
        t = &*r.block_scaled;
        break;
      }
    if (t == nullptr && opts_.block_scaled) t = &*opts_.block_scaled;
    return t != nullptr && !t->formats.empty() ? t : nullptr;
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

template <class T>
health_result recorder::checkpoint(const T& tensor, std::string_view context, source_location where, allow allowed) {
  return checkpoint_impl(to_view(tensor), context, where, allowed, nullptr);
}
template <class T>
health_result recorder::checkpoint(const T& tensor, std::string_view context, const segments& s, source_location where,
                                   allow allowed) {
  return checkpoint_impl(to_view(tensor), context, where, allowed, nullptr, &s);
}
template <class T>
health_result recorder::checkpoint(const T& tensor, std::string_view context, const block_target& target,
                                   source_location where, allow allowed) {
  return checkpoint_impl(to_view(tensor), context, where, allowed, nullptr, nullptr, &target);
}

NANSCOPE_NAMESPACE_END

// class scope, recorder::checkpoint_impl (a checkpoint is a frame under the innermost scope) and, at the end of
// scope.hpp once both classes are complete, the recorder's entry points (detail/recorder_impl.hpp)
#include "scope.hpp"

#endif  // NANSCOPE_RECORDER_HPP
