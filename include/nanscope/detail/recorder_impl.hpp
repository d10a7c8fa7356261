// nanscope — detail/recorder_impl.hpp: the recorder's recording, detection, report and step logic (the heavy
// part of recorder.hpp: it needs the kernels). Included by recorder.hpp in the header-only mode, and only in the
// file that defines NANSCOPE_IMPLEMENTATION in the separate mode (config.hpp).
#ifndef NANSCOPE_DETAIL_RECORDER_IMPL_HPP
#define NANSCOPE_DETAIL_RECORDER_IMPL_HPP

#include "../block_scaled_record.hpp"
#include "../check.hpp"
#include "../config.hpp"
#include "../histogram.hpp"
#include "../margins.hpp"
#include "../rank.hpp"
#include "../recorder.hpp"
#include "../report.hpp"
#include "../segments.hpp"
#include "../segments_guard.hpp"
#include "segment_origins.hpp"
#include "../snapshot.hpp"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

NANSCOPE_NAMESPACE_BEGIN

namespace detail {
/// What a detection says of the tensor that raised it: where (the frame) and what (the record), at `step`;
/// produced_here from the frame's own inputs (a checkpoint's caller corrects it with its scope's).
inline void describe_detection(detection& d, std::uint64_t step, const frame& f, const tensor_record& t) {
  d.step = step;
  d.module_path = f.module_path;
  d.class_name = f.class_name;
  d.context = t.context;
  d.role = t.role;
  d.health = t.health;
  d.where = t.where;
  d.produced_here = f.inputs_finite();
}

/// |x| as torch.abs computes it for a signed integer: in the type, so the most negative value stays itself
/// (abs(int8 -128) is -128) and the HF report prints it as a negative abs min.
template <class T>
inline double torch_int_abs(T x) {
  return x == (std::numeric_limits<T>::min)() ? double(x) : (x < 0 ? -double(x) : double(x));
}

/// abs min / abs max of an integer or bool tensor (HuggingFace's report shows input_ids too), as torch's
/// abs().min() / abs().max() give them. O(n), scalar.
inline void integer_abs_range(const tensor_view& v, double& amin, double& amax) {
  const std::uint64_t n = v.numel();
  if (n == 0 || v.data == nullptr) return;
  const std::size_t es = size_of(v.type);
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  unsigned char buf[8 * 512];
  for (std::uint64_t b = 0; b < n; b += 512) {
    const std::size_t m = static_cast<std::size_t>((n - b) < 512 ? (n - b) : 512);
    gather(v, b, m, buf);
    for (std::size_t i = 0; i < m; ++i) {
      const unsigned char* p = buf + i * es;
      double a = 0.0;
      switch (v.type) {
        case dtype::i8: { std::int8_t x; std::memcpy(&x, p, 1); a = torch_int_abs(x); break; }
        case dtype::i16: { std::int16_t x; std::memcpy(&x, p, 2); a = torch_int_abs(x); break; }
        case dtype::i32: { std::int32_t x; std::memcpy(&x, p, 4); a = torch_int_abs(x); break; }
        case dtype::i64: { std::int64_t x; std::memcpy(&x, p, 8); a = torch_int_abs(x); break; }
        case dtype::u8: case dtype::boolean: a = double(*p); break;
        case dtype::u16: { std::uint16_t x; std::memcpy(&x, p, 2); a = double(x); break; }
        case dtype::u32: { std::uint32_t x; std::memcpy(&x, p, 4); a = double(x); break; }
        case dtype::u64: { std::uint64_t x; std::memcpy(&x, p, 8); a = double(x); break; }
        default: break;
      }
      lo = a < lo ? a : lo;
      hi = a > hi ? a : hi;
    }
  }
  amin = lo;
  amax = hi;
}

}  // namespace detail


NANSCOPE_IMPL_ENTRY void recorder::record_non_tensor(frame& f, tensor_role role, std::string context, bool is_none,
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

NANSCOPE_IMPL_ENTRY health_result recorder::record(frame& f, tensor_role role, std::string context, const tensor_view& v,
                                      source_location where, allow allowed, const health_result* known,
                                      const segments* seg, const block_target* target) {
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
  std::optional<block_target> bt_copy;
  {
    std::lock_guard<std::mutex> lk(m_);
    allowed = allowed | rule_allow(f.module_path, skip);
    hf = opts_.style == report_style::hf;
    warn = !hf || opts_.warn_in_hf_style;
    mode = opts_.mode;
    threads = opts_.check_threads;
    skip_int = opts_.skip_integer_tensors;
    want_margins = opts_.count_margins;
    // The block-scaled target: this call's, else the site's or the options' (copied: the options may change).
    if (target == nullptr) {
      if (const block_target* t = block_target_locked(f.module_path)) bt_copy = *t;
    }
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
  if (target != nullptr && known == nullptr && !target->formats.empty()) {
    // a checkpoint's own block target must fit (an options' or site's target skips what it does not fit)
    if (v.space == memory_space::cuda_device)
      detail::fail(v.name, "a block-scaled checkpoint needs host memory: check device tensors with "
                           "nanscope::cuda::check_block_scaled (<nanscope/cuda.cuh>)");
    if (!is_float(v.type))
      detail::fail(v.name, std::string("a block-scaled checkpoint needs a floating dtype, got ") + name(v.type));
  }
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
    // The block-scaled target, when there is one and it fits: a float tensor in host memory whose block axis
    // exists (a target given with this call must fit: check_block_scaled throws nanscope::error naming the
    // tensor). The pass is reached through detail::run_block_check, which <nanscope/block_scaled.hpp> installs.
    const block_target* bt = detail::fitting_block_target(target, bt_copy ? &*bt_copy : nullptr, v, mode);
    bool block_done = bt == nullptr;
    // The segmentation: the one given with this call (it must fit: check() throws nanscope::error naming the
    // tensor), else this thread's innermost guard for this recorder, for inputs, outputs and checkpoints, when it
    // fits the tensor (else the tensor is checked unsegmented).
    const segments* segs = seg;
    if (segs == nullptr && role != tensor_role::parameter) {
      if (const segments* guarded = detail::active_segments(id_)) {
        std::uint64_t nseg = 0, unit = 0;
        if (detail::segment_problem(v, *guarded, nseg, unit).empty()) segs = guarded;
      }
    }
    if (segs != nullptr) {
      segmented_result sr = (check)(v, *segs, copt);
      rec.health = sr.total;
      recorded_segments& rs = rec.segmented;
      rs.applied = true;
      if (segs->unit != nullptr) rs.unit = segs->unit;
      rs.axis = sr.axis;
      rs.row_elems = sr.row_elems;
      rs.count = sr.count;
      rs.bad = std::move(sr.bad);
      if (want_margins) {  // a pass of its own: the segmented pass does not carry the margins' counts
        rec.margins = margins(v);
        rec.has_margins = true;
      }
    } else if (want_margins && (mode == check_mode::full_health || mode == check_mode::stats)) {
      // one pass: the margins' boundary counts ride in the health pass (histogram.hpp)
      auto hm = check_margins(v, copt);
      rec.health = hm.first;
      rec.margins = hm.second;
      rec.has_margins = true;
    } else if (bt != nullptr && (mode == check_mode::full_health || mode == check_mode::stats)) {
      // one pass: the block statistics ride in the health pass (block_scaled.hpp)
      block_scaled_result br = detail::run_block_check(v, *bt, copt);
      rec.health = br.health;
      detail::keep_block_stats(rec.block_scaled, *bt, std::move(br));
      block_done = true;
    } else {
      rec.health = (check)(v, copt);
      if (want_margins) {
        rec.margins = margins(v);
        rec.has_margins = true;
      }
    }
    if (!block_done)  // a pass of its own: after a segmented or margins pass, or in another mode
      detail::keep_block_stats(rec.block_scaled, *bt,
                               detail::run_block_check(v, *bt, check_options{}.with_mode(check_mode::stats).with_threads(threads)));
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

NANSCOPE_IMPL_ENTRY void recorder::maybe_warn(const frame& f, tensor_record& rec) {
  // Non-finite values are the detector's business; warnings are for finite values approaching a limit.
  if (!rec.is_tensor || !is_float(rec.health.type)) return;
  if (rec.health.has_nonfinite() && !rec.allowed) return;
  // abs_max is unknown (NaN) in the modes without statistics: only the block-scaled warnings apply there
  const bool known_max = detail::is_finite_bits(rec.health.abs_max);
  if (!known_max && !rec.block_scaled.applied) return;
  std::string text;
  {
    std::lock_guard<std::mutex> lk(m_);
    const dtype target = cast_target_locked(f.module_path, rec.health.type);
    for (int i = 0; known_max && i < lp_format_count; ++i) {
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
    // Block-scaled targets: more than warn_lossy_fraction of the blocks would lose values.
    recorded_block_scaled& kb = rec.block_scaled;
    const bool along_last = rec.health.rank <= 1 || kb.axis == rec.health.rank - 1;
    for (const block_format_stats& s : kb.formats) {
      if (!detail::block_loss_warns(kb, s)) continue;
      kb.warned |= 1u << static_cast<unsigned>(s.format);
      std::string site = f.module_path;
      site += ':';
      site += rec.context;
      site += "#b";
      site += name(s.format);
      if (!marks_.first_warning(std::move(site))) continue;
      warnings_.fetch_add(1, std::memory_order_relaxed);
      text += "nanscope: warning: step " + std::to_string(f.step) + " " +
              (f.module_path.empty() ? std::string("<root>") : f.module_path) + ": " + f.class_name + ": " +
              rec.context + " " + detail::block_loss_text(s, along_last, kb.axis);
      if (rec.where.line != 0) text += " at " + detail::short_file(rec.where.file) + ":" + std::to_string(rec.where.line);
      text += '\n';
    }
    if (!text.empty()) emit(text);
  }
}

namespace detail {
/// detection_error::what() of the native styles: one line that names the place and points to the report (printed
/// already: an uncaught exception must not print it a second time).
inline std::string short_detection_text(const detection& d) {
  std::string kinds;
  auto add = [&](std::uint64_t n, const char* what) {
    if (n == 0) return;
    if (!kinds.empty()) kinds += ", ";
    kinds += std::to_string(n) + " " + what;
  };
  add(d.health.nan, "NaN");
  add(d.health.pos_inf, "+inf");
  add(d.health.neg_inf, "-inf");
  if (kinds.empty()) kinds = "inf/nan";
  std::string where = d.context;
  if (!d.segmented.bad.empty()) where += " (" + segment_ids_text(d.segmented) + ")";
  return "nanscope: " + kinds + " in '" + (d.module_path.empty() ? std::string("<root>") : d.module_path) + "' " +
         where + " at step " + std::to_string(d.step) +
         (d.produced_here ? " (produced there)" : " (it arrived already non-finite)") +
         "; the report with the frames that led to it was printed before this exception";
}
}  // namespace detail

NANSCOPE_IMPL_ENTRY void recorder::detect(frame& current, const tensor_record& rec) {
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
    detail::describe_detection(*d, s, current, rec);
    if (current.checkpoint) {  // a checkpoint has no inputs of its own: those of the scope it was taken in count
      if (const scope* enclosing = detail::current_scope(*this)) d->produced_here = enclosing->current().inputs_finite();
    }
    d->frames = saved_locked();  // and the detecting frame (also with max_frames 0: the native reports show it)
    if (!d->frames.empty() && d->frames.size() >= opts_.max_frames) d->frames.erase(d->frames.begin());
    d->frames.push_back(current);
    for (auto& f : d->frames)
      for (auto& t : f.tensors) t.view.data = nullptr;  // frames outlive the data: drop the pointers
    if (rec.segmented.applied) {
      d->segmented = rec.segmented;
      d->segment_origins = detail::find_segment_origins(d->frames, d->segmented);
    }
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
  // Evidence first: listeners that write files (the layer tree) commit before the exception leaves the scope,
  // which nobody may catch (std::terminate unwinds nothing).
  const bool stopping = policy == on_detect::throw_exception || policy == on_detect::abort;
  notify([&](scope_listener& l) { l.detection_raised(current, *d, stopping); });
  switch (policy) {
    case on_detect::throw_exception: NANSCOPE_IMPL_THROW(detection_error(d, detail::short_detection_text(*d)));
    case on_detect::abort: std::abort();
    case on_detect::print_and_continue: return;
    case on_detect::callback:
      if (cb) cb(*d);
      return;
  }
}

NANSCOPE_IMPL_ENTRY void recorder::complete(frame&& f, bool outermost) {
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

NANSCOPE_IMPL_ENTRY void recorder::complete_inert() {
  std::uint64_t next = 0;
  {
    std::lock_guard<std::mutex> lk(m_);
    if (!opts_.auto_step) return;
    next = step_.load(std::memory_order_relaxed) + 1;
    begin_step_locked(next);
  }
  tell_step_boundary(next);
}

NANSCOPE_IMPL_ENTRY void recorder::complete_step() {
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
NANSCOPE_IMPL_ENTRY void recorder::complete_hf(frame&& f, bool outermost) {
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
        detail::describe_detection(*d, batch, ff, t);
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

NANSCOPE_IMPL_ENTRY health_result recorder::checkpoint_result(const tensor_view& v, const health_result& h,
                                                 std::string_view context, source_location where, allow allowed) {
  return checkpoint_impl(v, context, where, allowed, &h);
}


NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_RECORDER_IMPL_HPP
