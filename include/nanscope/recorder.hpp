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
// Thread safety: scopes are per thread (a thread-local stack); completed frames go into the shared ring
// under a mutex; options are set before recording starts (set_options is itself thread-safe).
#ifndef NANSCOPE_RECORDER_HPP
#define NANSCOPE_RECORDER_HPP

#include "check.hpp"
#include "config.hpp"
#include "health.hpp"
#include "hf_style.hpp"
#include "histogram.hpp"
#include "margins.hpp"
#include "npy.hpp"
#include "rank.hpp"
#include "view.hpp"
#include "detail/atomic_file.hpp"
#include "detail/listener_set.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
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

/// Where a check was written (filled by the macros).
struct source_location {
  const char* file = "";
  int line = 0;
  const char* function = "";
};

/// What a recorded tensor is to its module.
enum class tensor_role : std::uint8_t { parameter, input, output, checkpoint };

/// Non-finite categories, for per-site rules (allow -inf in attention masks, say).
enum class allow : std::uint8_t { none = 0, nan = 1, pos_inf = 2, neg_inf = 4, inf = 6, all = 7 };
constexpr allow operator|(allow a, allow b) {
  return static_cast<allow>(static_cast<std::uint8_t>(a) | static_cast<std::uint8_t>(b));
}
constexpr bool allows(allow set, allow one) {
  return (static_cast<std::uint8_t>(set) & static_cast<std::uint8_t>(one)) == static_cast<std::uint8_t>(one);
}

/// Low-precision targets whose headroom the recorder watches.
enum class lp_format : std::uint8_t { f16, bf16, e4m3fn, e5m2 };
inline constexpr int lp_format_count = 4;
inline dtype lp_dtype(lp_format f) {
  switch (f) {
    case lp_format::f16: return dtype::f16;
    case lp_format::bf16: return dtype::bf16;
    case lp_format::e4m3fn: return dtype::f8_e4m3fn;
    case lp_format::e5m2: return dtype::f8_e5m2;
  }
  return dtype::f16;
}

/// A tensor's mean and std as its framework computes them (LibTorch's own float32 reduction order), set by an
/// adapter for the layer tree, which prints them instead of nanscope's (see docs/adapters.md).
struct reference_stats {
  bool known = false;
  double mean = 0.0;
  double std = 0.0;
};

/// One tensor inside a frame.
struct tensor_record {
  tensor_role role = tensor_role::output;
  std::string context;  ///< "weight", "input[0]", "output", "output[1]", or a checkpoint's text
  health_result health;
  bool is_tensor = true;   ///< false: a non-tensor argument ("not a tensor" line)
  bool is_none = false;    ///< an absent optional argument ("None" line)
  std::string repr;        ///< a non-tensor argument's text (what Python's repr() would show); "None" for is_none
  bool allowed = false;    ///< non-finite values here were allowed by a rule
  unsigned warned = 0;     ///< bit i: crossed the warning threshold of lp_format i
  bool has_margins = false;  ///< `margins` is filled (recorder_options::count_margins)
  margins_result margins;    ///< would-overflow / subnormal / flush-to-zero counts per low-precision format
  source_location where;
  tensor_view view;  ///< the data, valid only while the frame is in progress (used by snapshots)
  reference_stats reference;  ///< optional: the framework's own mean/std (detail::offer_reference_stats)
};

/// One module call (or one checkpoint): its parameters, inputs and outputs, in recording order.
struct frame {
  std::uint64_t step = 0;
  std::uint64_t sequence = 0;  ///< completion order across the recorder
  std::string module_path;     ///< "encoder.block.2.layer.1.DenseReluDense.wo"; "" for the root module
  std::string class_name;      ///< "Linear"; "" for a checkpoint outside any class
  bool checkpoint = false;     ///< a DETECT_OVERFLOW-style check rather than a module call
  bool complete = false;
  source_location where;       ///< where the scope (or checkpoint) was opened
  /// report_style::hf: the batch banner lines HuggingFace's debugger puts before this frame (FORMATS.md §2,
  /// `*** Starting batch number=N ***` and the header), each ending in '\n'; empty otherwise.
  std::string banner;
  std::vector<tensor_record> tensors;

  bool inputs_finite() const {
    for (const auto& t : tensors)
      if (t.role != tensor_role::output && t.role != tensor_role::checkpoint && t.is_tensor &&
          t.health.has_nonfinite() && !t.allowed)
        return false;
    return true;
  }
  bool outputs_nonfinite() const {
    for (const auto& t : tensors)
      if ((t.role == tensor_role::output || t.role == tensor_role::checkpoint) && t.is_tensor &&
          t.health.has_nonfinite() && !t.allowed)
        return true;
    return false;
  }
  /// True when this frame made the first non-finite value: its inputs were finite, an output is not.
  bool produced_nonfinite() const { return outputs_nonfinite() && inputs_finite(); }
};

/// What happened, handed to callbacks and carried by detection_error.
struct detection {
  std::uint64_t step = 0;
  std::string module_path;
  std::string class_name;
  std::string context;           ///< the tensor that triggered: "output", "input[0]", a checkpoint text
  tensor_role role = tensor_role::output;
  health_result health;          ///< of that tensor
  source_location where;
  bool produced_here = false;    ///< the triggering frame's inputs were finite
  std::vector<frame> frames;     ///< the saved frames, oldest first; the last one triggered
  std::string report;            ///< the report text as printed (in the recorder's style)
};

/// Thrown by the `throw_exception` policy. what() is the report's first line (report_style::hf: HuggingFace's
/// ValueError text, byte for byte); report() the whole text.
class detection_error : public std::runtime_error {
 public:
  explicit detection_error(std::shared_ptr<const detection> d)
      : std::runtime_error(first_line(d->report)), d_(std::move(d)) {}
  detection_error(std::shared_ptr<const detection> d, const std::string& what)
      : std::runtime_error(what), d_(std::move(d)) {}
  const detection& info() const { return *d_; }
  const std::string& report() const { return d_->report; }

 private:
  static std::string first_line(const std::string& s) {
    std::size_t b = s.find_first_not_of('\n');
    if (b == std::string::npos) return "nanscope: inf/nan detected";
    std::size_t e = s.find('\n', b);
    return s.substr(b, e == std::string::npos ? std::string::npos : e - b);
  }
  std::shared_ptr<const detection> d_;
};

/// Thrown when `abort_after_step` is reached (HuggingFace's abort_after_batch_num), under every policy but
/// `abort`.
class stop_requested : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class on_detect : std::uint8_t { throw_exception, abort, print_and_continue, callback };
enum class report_style : std::uint8_t {
  /// HuggingFace DebugUnderflowOverflow, byte for byte (FORMATS.md §2): detection when a module call completes,
  /// `{ctx} has nans` lines, batch banners, HF's exception texts; stdout unless a sink is given.
  hf,
  hf_v1,     ///< the one-line-per-tensor format of the original document (FORMATS.md §1)
  extended,  ///< nanscope's: counts, headroom, source locations, producer marker
};

/// A rule for module paths matching `pattern` (glob: `*` any run of characters, `?` one character).
struct site_rule {
  site_rule() = default;
  // A constructor (not an aggregate) so that `site_rule{pattern, allowed, skip}` stays warning-free under
  // -Wmissing-field-initializers now that cast_to exists.
  site_rule(std::string pattern_, allow allowed_ = allow::none, bool skip_ = false,
            std::optional<dtype> cast_to_ = std::nullopt)
      : pattern(std::move(pattern_)), allowed(allowed_), skip(skip_), cast_to(cast_to_) {}
  std::string pattern;
  allow allowed = allow::none;
  bool skip = false;  ///< do not check tensors here at all
  /// The low-precision dtype these tensors will be cast to: warnings are measured against it (see
  /// recorder_options::cast_to).
  std::optional<dtype> cast_to;
};

struct recorder_options {
  std::size_t max_frames = 21;                 ///< frames kept (HuggingFace's max_frames_to_save; 0: none)
  std::vector<std::uint64_t> trace_steps;       ///< print every frame of these steps as it completes
  std::int64_t abort_after_step = -1;          ///< stop once this step has completed (-1: never)
  bool auto_step = true;                        ///< the step advances when an outermost scope completes
  on_detect policy = on_detect::throw_exception;
  /// extended (nanscope's native behaviour: detection as each tensor is recorded); hf for output that diffs
  /// byte for byte against HuggingFace's DebugUnderflowOverflow.
  report_style style = report_style::extended;
  std::function<void(const detection&)> callback;      ///< for on_detect::callback
  std::function<void(std::string_view)> sink;          ///< output; default: stdout in the hf style (as HF), else stderr
  /// Integer and bool tensors cannot hold NaN/Inf: they are never classified, but by default they are recorded
  /// with their abs min/max (HuggingFace's report shows input_ids too). true: leave them out of the frames.
  bool skip_integer_tensors = false;
  check_mode mode = check_mode::stats;                 ///< mode of each check (stats keeps abs min/max)
  bool report_once_per_step = true;                    ///< later detections in the same step are not re-reported
  /// Warn when abs_max reaches these thresholds (per lp_format; <= 0 disables). Default: fp16 at 1e4, the
  /// HuggingFace rule of thumb (a product of two 1e4 values already exceeds the fp16 range). A threshold applies
  /// to a tensor whose cast target (a site_rule's cast_to, else `cast_to`, else the tensor's own dtype) is that
  /// format: an f32 tensor is not warned about fp16 unless the user says it will be cast to fp16.
  double warn_abs_max[lp_format_count] = {1e4, 0.0, 0.0, 0.0};
  /// The dtype the recorded tensors will be cast to (mixed precision: f32 activations that become fp16).
  std::optional<dtype> cast_to;
  /// The hf style prints nothing HuggingFace would not print: true also prints the warnings of warn_abs_max.
  bool warn_in_hf_style = false;
  std::vector<site_rule> rules;
  std::string snapshot_dir;  ///< non-empty: write the offending tensor and the producer's inputs as .npy
  unsigned check_threads = 1;  ///< threads per check (1: the recording thread only)
  /// Also count, for every float tensor, the values that would overflow, become subnormal or flush to zero if
  /// cast to fp16/bf16/e4m3fn/e5m2 (a second pass, nanscope::margins); shown by the extended report.
  bool count_margins = false;
};

class recorder;
class scope;
struct early_warning;  // early_warning.hpp (raised by history.hpp, written by the layer tree)

/// Receives a recorder's scope events: the layer-tree writer (tree.hpp) is one. The calls come on the recording
/// thread, outside the recorder's lock, in call order for that thread; a listener synchronises itself. They must
/// not throw. A recorder has any number of listeners (recorder::add_listener / remove_listener), each attached
/// and detached on its own: detaching waits until calls into that listener on other threads have returned, so a
/// listener may be destroyed right after remove_listener returns, in any order relative to the others.
class scope_listener {
 public:
  virtual ~scope_listener() = default;
  /// A scope opened; `outermost`: no enclosing scope of the same recorder on this thread.
  virtual void scope_opened(const frame& f, bool outermost) noexcept = 0;
  /// A tensor (or a non-tensor argument) was recorded into the open frame `f`; `rec.view` is valid during the
  /// call. Checkpoints (DETECT_OVERFLOW) arrive with a frame whose `checkpoint` is true.
  virtual void tensor_recorded(const frame& f, const tensor_record& rec) noexcept = 0;
  /// The scope is closing (also during stack unwinding).
  virtual void scope_closed(const frame& f, bool outermost) noexcept = 0;
  /// Whether tensor_record::reference is worth computing for this listener (adapters skip the cost otherwise).
  virtual bool wants_reference_stats() const noexcept { return false; }
  /// A layer above the recorder (history.hpp) raised an early warning about a tensor recorded into the open
  /// frame `f` (recorder::notify_warning). The layer-tree writer writes it into the tree; others ignore it.
  virtual void warning_raised(const frame& f, const early_warning& w) noexcept {
    (void)f;
    (void)w;
  }
  /// Whether recorder_destroyed is to be called (asked once, when the listener is attached). Only a listener
  /// that answers true is touched by the recorder's destructor: one that does not may be gone by then.
  virtual bool hears_recorder_destroyed() const noexcept { return false; }
  /// The recorder `r` is being destroyed while this listener is still attached (a recorder that ends before
  /// the objects attached to it): it has been detached already and must not touch `r` again.
  virtual void recorder_destroyed(recorder& r) noexcept { (void)r; }
};

/// Decides, per tensor, whether the recorder checks it and in which mode, and hears of step boundaries and of the
/// time each check took (control.hpp's controller is one). Calls come on the recording thread, outside the
/// recorder's lock; they must not throw. Attach with recorder::set_gate while no scope of the recorder is open.
class check_gate {
 public:
  static constexpr std::uint32_t skip = 0xFFFFFFFFu;
  virtual ~check_gate() = default;
  /// A ticket for checked(), or `skip`: the tensor is neither checked nor recorded. May change `mode`.
  virtual std::uint32_t admit(const frame& f, tensor_role role, std::string_view context, check_mode& mode) noexcept = 0;
  /// The admitted check `ticket` read `bytes` bytes in `ns` nanoseconds.
  virtual void checked(std::uint32_t ticket, std::uint64_t bytes, std::uint64_t ns) noexcept = 0;
  /// A step ended (outermost scope with auto_step, next_step(), set_step()); `next` is the step that starts.
  virtual void step_boundary(std::uint64_t next) noexcept = 0;
  /// Whether recorder_destroyed is to be called (asked once, by set_gate): a gate that answers false is not
  /// touched by the recorder's destructor.
  virtual bool hears_recorder_destroyed() const noexcept { return false; }
  /// The recorder `r` is being destroyed with this gate installed: it has been removed and must not touch `r`.
  virtual void recorder_destroyed(recorder& r) noexcept { (void)r; }
};

namespace detail {
/// Hands `text` to a user's text callback (a recorder's sink, a tree writer's or controller's on_error). One that
/// throws (a logger whose disk is full) must not lose the text nor end the process from a destructor (~scope
/// completes frames through the sink): the text goes to stderr with a line saying what the callback threw.
inline void call_text_callback(const std::function<void(std::string_view)>& fn, std::string_view text,
                               const char* who) noexcept {
#if NANSCOPE_IMPL_EXCEPTIONS
  // no allocation on this path (a callback failing for want of memory must not make it throw again)
  try {
    fn(text);
    return;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nanscope: %s threw (%s); the text it was given follows\n", who, e.what());
  } catch (...) {
    std::fprintf(stderr, "nanscope: %s threw (an exception that is not a std::exception); the text it was given "
                 "follows\n", who);
  }
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
#else
  (void)who;
  fn(text);
#endif
}

inline bool glob_match(std::string_view pat, std::string_view s) {
  std::size_t p = 0, i = 0, star = std::string_view::npos, mark = 0;
  while (i < s.size()) {
    if (p < pat.size() && (pat[p] == '?' || pat[p] == s[i])) {
      ++p;
      ++i;
    } else if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = i;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      i = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
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

/// Reference statistics for the next tensor this thread records, if its data pointer is `data`: an adapter
/// sets them right before recording (offer_reference_stats) and recorder::record takes them.
struct pending_reference {
  const void* data = nullptr;
  reference_stats stats;
};
inline pending_reference& pending_reference_slot() {
  thread_local pending_reference p;
  return p;
}
inline void offer_reference_stats(const void* data, double mean, double std) {
  pending_reference& p = pending_reference_slot();
  p.data = data;
  p.stats = reference_stats{true, mean, std};
}
inline reference_stats take_reference_stats(const void* data) {
  pending_reference& p = pending_reference_slot();
  reference_stats r;
  if (p.data != nullptr && p.data == data) r = p.stats;
  p.data = nullptr;
  return r;
}

/// The innermost active scope of this thread (any recorder); scopes link to their enclosing one. A scope
/// unlinks itself when it ends, also when it ends out of order (see ~scope).
inline scope*& thread_top_scope() {
  thread_local scope* top = nullptr;
  return top;
}

/// A process-wide serial number for recorders (1, 2, ...).
inline std::uint64_t next_recorder_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// Report formatting lives in report.hpp (it needs fmt); the recorder calls it through this hook so that
// recorder.hpp itself needs no fmt. report.hpp installs the formatter at static-initialisation time.
using report_fn = std::string (*)(report_style, const detection&);
inline std::atomic<report_fn>& report_formatter() {
  static std::atomic<report_fn> fn{nullptr};
  return fn;
}
using trace_fn = std::string (*)(const frame&, bool banner);
inline std::atomic<trace_fn>& trace_formatter() {
  static std::atomic<trace_fn> fn{nullptr};
  return fn;
}
using warn_fn = std::string (*)(const frame&, const tensor_record&, lp_format, double threshold);
inline std::atomic<warn_fn>& warning_formatter() {
  static std::atomic<warn_fn> fn{nullptr};
  return fn;
}
/// A file-name-safe version of s: letters, digits, '.', '-' kept; everything else '_'.
inline std::string file_safe(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-';
    out += ok ? c : '_';
  }
  if (out.size() > 80) out.resize(80);
  return out.empty() ? std::string("root") : out;
}
/// A JSON string literal: quotes, backslashes and control characters escaped; valid UTF-8 kept; every byte of
/// an invalid UTF-8 sequence replaced by U+FFFD, so the result is always valid JSON.
inline std::string json_quote(const std::string& s) {
  std::string out = "\"";
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += static_cast<char>(c);
      } else if (c < 0x20 || c == 0x7F) {
        static const char hex[] = "0123456789abcdef";
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // multi-byte: lead byte decides the length; reject overlongs, surrogates and > U+10FFFF
    std::size_t len = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    bool ok = len != 0 && i + len <= n;
    for (std::size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xC0) == 0x80;
    if (ok && len == 3) ok = !(c == 0xE0 && p[i + 1] < 0xA0) && !(c == 0xED && p[i + 1] >= 0xA0);
    if (ok && len == 4) ok = !(c == 0xF0 && p[i + 1] < 0x90) && !(c == 0xF4 && p[i + 1] >= 0x90);
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += "\\ufffd";
      ++i;
    }
  }
  return out + "\"";
}
inline const char* role_word(tensor_role r) {
  switch (r) {
    case tensor_role::parameter: return "parameter";
    case tensor_role::input: return "input";
    case tensor_role::output: return "output";
    case tensor_role::checkpoint: return "checkpoint";
  }
  return "?";
}
}  // namespace detail

/// The recorder: options, the step counter, the ring of completed frames.
class recorder {
 public:
  recorder() { ring_.resize(opts_.max_frames); }
  explicit recorder(recorder_options o) : opts_(std::move(o)) { ring_.resize(opts_.max_frames); }
  recorder(const recorder&) = delete;
  recorder& operator=(const recorder&) = delete;
  /// Detaches the listeners and the gate still attached, and tells those that asked (hears_recorder_destroyed:
  /// the tree writer, history, controller, rank_evidence) so that, destroyed later, they do not touch it.
  /// Others are not called: a listener destroyed without detaching itself may be gone already.
  ~recorder() {
    listeners_.remove_all([this](scope_listener& l) { l.recorder_destroyed(*this); });
    check_gate* g = gate_.exchange(nullptr, std::memory_order_acq_rel);
    if (g != nullptr && gate_told_.load(std::memory_order_acquire)) g->recorder_destroyed(*this);
  }

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
    if (check_gate* g = gate()) g->step_boundary(s);
  }
  /// Marks the current step complete and starts the next one (what auto_step does at the outermost scope).
  void next_step() { complete_step(); }

  /// Attaches a listener of scope events (in addition to those attached already; attaching one twice has no
  /// effect). Events of scopes opened before it attached are passed on from then on (a listener that needs whole
  /// scopes ignores closes it never saw open, as the tree writer does).
  void add_listener(scope_listener* l) {
    if (l != nullptr) listeners_.add(l, l->hears_recorder_destroyed());
  }
  /// Detaches a listener; returns whether it was attached. Waits until every call into it on other threads has
  /// returned (a call on this thread that is still running — a listener detaching itself from inside its own
  /// callback — is not waited for). Afterwards the recorder never touches it again.
  bool remove_listener(scope_listener* l) { return listeners_.remove(l); }
  /// Replaces all listeners by `l` (nullptr: detaches all) and returns the most recently attached one before
  /// (nullptr if none). Kept for compatibility: code that restores the returned pointer later must know that it
  /// is still alive; add_listener / remove_listener need no such care.
  scope_listener* set_listener(scope_listener* l) {
    const std::vector<scope_listener*> old = listeners_.snapshot();
    for (scope_listener* o : old)
      if (o != l) listeners_.remove(o);
    add_listener(l);
    return old.empty() ? nullptr : old.back();
  }
  /// The most recently attached listener still attached (nullptr if none).
  scope_listener* listener() const { return listeners_.newest(); }
  /// Whether an attached listener asks for tensor_record::reference (adapters skip that cost otherwise).
  bool listeners_want_reference_stats() const {
    return listeners_.any_of([](const scope_listener& l) { return l.wants_reference_stats(); });
  }
  /// How many listeners are attached.
  std::size_t listener_count() const { return listeners_.size(); }

  /// A number unique to this recorder within the process (snapshot file names carry it).
  std::uint64_t id() const { return id_; }

  /// Installs the check gate (control.hpp; nullptr removes it) and returns the previous one.
  check_gate* set_gate(check_gate* g) {
    gate_told_.store(g != nullptr && g->hears_recorder_destroyed(), std::memory_order_release);
    return gate_.exchange(g, std::memory_order_acq_rel);
  }
  check_gate* gate() const { return gate_.load(std::memory_order_acquire); }
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
  void notify_warning(const frame& f, const early_warning& w) {
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
    raise_pending_detection();
    raise_pending_stop();
  }
  /// raise_pending() (the name scopes call when they open).
  void raise_pending_stop() {
    raise_pending_detection();
    if (!stop_pending_.load(std::memory_order_acquire)) return;
    std::string msg;
    {
      std::lock_guard<std::mutex> lk(m_);
      if (!stop_pending_.exchange(false, std::memory_order_relaxed)) return;
      msg = stop_message_;
    }
    NANSCOPE_IMPL_THROW(stop_requested(msg));
  }
  /// Throws the hf style's pending detection_error, if any.
  void raise_pending_detection() {
    if (!detection_pending_.load(std::memory_order_acquire)) return;
    std::shared_ptr<const detection> d;
#if NANSCOPE_IMPL_EXCEPTIONS
    std::exception_ptr error;
#endif
    {
      std::lock_guard<std::mutex> lk(m_);
      if (!detection_pending_.exchange(false, std::memory_order_relaxed)) return;
      d = std::move(pending_detection_);
      pending_detection_.reset();
#if NANSCOPE_IMPL_EXCEPTIONS
      error = std::move(pending_callback_error_);
      pending_callback_error_ = nullptr;
#endif
    }
#if NANSCOPE_IMPL_EXCEPTIONS
    if (error) std::rethrow_exception(error);  // the callback's own exception, deferred out of ~scope
#endif
    NANSCOPE_IMPL_THROW(detection_error(d, detail::hf_detected_text()));
  }

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
  void begin_step_locked(std::uint64_t s) {
    step_.store(s, std::memory_order_relaxed);
    reported_step_ = ~std::uint64_t{0};
    warned_sites_.clear();
    banner_step_ = ~std::uint64_t{0};
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
  std::uint64_t reported_step_ = ~std::uint64_t{0};
  std::uint64_t banner_step_ = ~std::uint64_t{0};
  std::vector<std::string> warned_sites_;
  std::atomic<bool> stop_pending_{false};
  std::string stop_message_;
  std::atomic<std::uint64_t> detections_{0};
  std::atomic<std::uint64_t> warnings_{0};
  detail::hf_machine<frame> hf_;  ///< report_style::hf: HuggingFace's hook state (hf_style.hpp)
  std::atomic<bool> detection_pending_{false};
  std::shared_ptr<const detection> pending_detection_;
#if NANSCOPE_IMPL_EXCEPTIONS
  std::exception_ptr pending_callback_error_;  ///< hf style: what the callback threw, raised like a detection
#endif
  /// Calls fn(listener) for every attached listener, outside the recorder's locks; allocates nothing, so it
  /// cannot throw: ~scope calls it.
  template <class F>
  void notify(F&& fn) noexcept {
    listeners_.for_each(fn);
  }
  /// A misuse of lifetimes (scopes ended out of order): printed to the sink.
  void report_misuse(const std::string& text) {
    std::lock_guard<std::mutex> lk(m_);
    emit(text);
  }

  detail::listener_set<scope_listener> listeners_;
  const std::uint64_t id_ = detail::next_recorder_id();
  std::atomic<check_gate*> gate_{nullptr};
  std::atomic<bool> gate_told_{false};  ///< the gate asked for recorder_destroyed
  std::atomic<bool> enabled_{true};
};

/// The process-wide default recorder used by the macros.
inline recorder& default_recorder() {
  // never destroyed: objects with static storage attached to it (a history, a tree writer) may end after it
  static recorder* const r = new recorder();
  return *r;
}

/// RAII module scope: names a module (path components nest with '.'), collects its tensors, and hands the
/// completed frame to the recorder when it ends. One scope per module call; not movable.
class scope {
 public:
  scope(recorder& r, std::string_view name, std::string_view class_name, source_location where = {})
      : rec_((r.raise_pending_stop(), r)), parent_(detail::thread_top_scope()), where_(where) {
    const scope* p = parent_;
    while (p != nullptr && &p->rec_ != &r) p = p->parent_;
    same_parent_ = p;
    if (!r.enabled()) {  // checking is off: count the step, nothing else
      inert_ = true;
      detail::thread_top_scope() = this;
      return;
    }
    if (p != nullptr && !p->frame_.module_path.empty() && !name.empty()) {
      frame_.module_path.reserve(p->frame_.module_path.size() + 1 + name.size());
      frame_.module_path = p->frame_.module_path;
      frame_.module_path += '.';
      frame_.module_path.append(name.data(), name.size());
    } else if (p != nullptr && name.empty()) {
      frame_.module_path = p->frame_.module_path;  // an unnamed sub-scope stays at its parent's path
    } else {
      frame_.module_path.assign(name.data(), name.size());
    }
    frame_.where = where;
    frame_.class_name.assign(class_name.data(), class_name.size());
    frame_.step = r.step();
    detail::thread_top_scope() = this;
    r.notify([&](scope_listener& l) { l.scope_opened(frame_, same_parent_ == nullptr); });
  }
  scope(std::string_view name, std::string_view class_name, source_location where = {})
      : scope(default_recorder(), name, class_name, where) {}
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
  /// Ends the module call. Scopes must end in the reverse order of their creation, on the thread that created
  /// them (automatic variables always do). A heap-allocated scope ended while scopes opened inside it are still
  /// alive is unlinked from the thread's chain (those scopes now nest in its enclosing scope), and the misuse is
  /// printed to the recorder's sink; a scope ended on another thread than its own is reported and aborts the
  /// process (the owning thread's chain cannot be repaired from here), never a use of freed memory.
  ~scope() {
    scope*& top = detail::thread_top_scope();
    if (top == this) {
      top = parent_;
    } else {
      unlink_out_of_order(top);
    }
    if (inert_) {  // opened while checking was off: only the step advances
      if (same_parent_ == nullptr) rec_.complete_inert();
      return;
    }
    rec_.notify([&](scope_listener& l) { l.scope_closed(frame_, same_parent_ == nullptr); });
    frame_.complete = true;
    rec_.complete(std::move(frame_), same_parent_ == nullptr);
  }

  /// Records the module's next positional input (`input[k]`).
  template <class T>
  health_result input(const T& x, source_location where = {}) {
    return rec_.record(frame_, tensor_role::input, "input[" + std::to_string(inputs_++) + "]", to_view(x), where,
                       allow::none);
  }
  /// Records a named input (a keyword argument): the context is its name.
  template <class T>
  health_result input(const T& x, std::string_view name, source_location where = {}) {
    return rec_.record(frame_, tensor_role::input, std::string(name), to_view(x), where, allow::none);
  }
  /// Records the output (`output`), or output `i` of several (`output[i]`).
  template <class T>
  health_result output(const T& x, source_location where = {}) {
    return rec_.record(frame_, tensor_role::output, "output", to_view(x), where, allow::none);
  }
  template <class T>
  health_result output(const T& x, int i, source_location where = {}) {
    return rec_.record(frame_, tensor_role::output, "output[" + std::to_string(i) + "]", to_view(x), where,
                       allow::none);
  }
  /// Records a parameter (`weight`, `bias`).
  template <class T>
  health_result parameter(const T& x, std::string_view name, source_location where = {}) {
    return rec_.record(frame_, tensor_role::parameter, std::string(name), to_view(x), where, allow::none);
  }
  /// Records a non-tensor argument ("not a tensor") or an absent one ("None"), as the HF report shows them.
  void non_tensor_input(bool is_none = false) {
    rec_.record_non_tensor(frame_, tensor_role::input, "input[" + std::to_string(inputs_++) + "]", is_none,
                           is_none ? "None" : "");
  }
  /// Records a non-tensor positional argument with its text (an int, a config object: what repr() shows). The
  /// layer tree writes the text; the reports show "not a tensor".
  void value_input(std::string_view repr) {
    rec_.record_non_tensor(frame_, tensor_role::input, "input[" + std::to_string(inputs_++) + "]", false,
                           std::string(repr));
  }
  /// Records a named non-tensor argument (a keyword argument) with its text.
  void value_input(std::string_view repr, std::string_view name) {
    rec_.record_non_tensor(frame_, tensor_role::input, std::string(name), false, std::string(repr));
  }

  /// Records a tensor whose health was computed elsewhere (a device check resolved at the step boundary, see
  /// deferred.hpp): as input()/output()/parameter(), without reading the data. An empty `context` for an input
  /// is the next positional one (`input[k]`).
  health_result record_result(tensor_role role, std::string_view context, const tensor_view& v,
                              const health_result& h, source_location where = {}) {
    std::string ctx = role == tensor_role::input && context.empty() ? "input[" + std::to_string(inputs_++) + "]"
                                                                      : std::string(context);
    return rec_.record(frame_, role, std::move(ctx), v, where, allow::none, &h);
  }

  const std::string& module_path() const { return frame_.module_path; }
  const frame& current() const { return frame_; }
  recorder& owner() const { return rec_; }
  scope* parent_for_lookup() const { return parent_; }

 private:
  friend class recorder;
  static std::string describe(const scope* s) {
    std::string out = "'" + s->frame_.module_path + "'";
    if (!s->frame_.class_name.empty()) out += " (" + s->frame_.class_name + ")";
    return out;
  }
  /// ~scope of a scope that is not the innermost of this thread: remove it from the chain, or stop.
  void unlink_out_of_order(scope*& top) {
    scope* inner = top;
    while (inner != nullptr && inner->parent_ != this) inner = inner->parent_;
    if (inner == nullptr) {
      rec_.report_misuse("nanscope: scope " + describe(this) +
                         " ended on a thread that does not have it open (a scope must end on the thread that "
                         "created it); aborting, since its own thread's scope chain would point to freed memory\n");
      std::abort();
    }
    // Scopes opened inside this one (still alive) now nest in this one's enclosing scope.
    for (scope* s = top; s != this; s = s->parent_)
      if (s->same_parent_ == this) s->same_parent_ = same_parent_;
    inner->parent_ = parent_;
    rec_.report_misuse("nanscope: scope " + describe(this) + " ended before the scope " + describe(top) +
                       " opened inside it on this thread (scopes must end in the reverse order of their creation); "
                       "the scopes still open now nest in its enclosing scope\n");
  }
  recorder& rec_;
  scope* parent_;
  const scope* same_parent_ = nullptr;
  source_location where_;
  frame frame_;
  int inputs_ = 0;
  bool inert_ = false;  ///< opened while checking was off (recorder::set_enabled)
};

namespace detail {
/// The innermost scope of this thread that belongs to `r`, or null.
inline scope* current_scope(recorder& r) {
  scope* s = thread_top_scope();
  while (s != nullptr && &s->owner() != &r) s = s->parent_for_lookup();
  return s;
}
}  // namespace detail

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
  if (detection_pending_.load(std::memory_order_acquire) || stop_pending_.load(std::memory_order_acquire)) {
    bool hf;
    {
      std::lock_guard<std::mutex> lk(m_);
      hf = opts_.style == report_style::hf;
    }
    if (hf) raise_pending_stop();
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
  // The gate (control.hpp) may skip this tensor or change its mode; it is told what each check cost.
  check_gate* const g = gate();
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
      bool seen = false;
      for (const auto& w : warned_sites_)
        if (w == site) seen = true;
      if (seen) continue;
      warned_sites_.push_back(std::move(site));
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
    if (opts_.report_once_per_step && reported_step_ == s) return;
    reported_step_ = s;
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
    if (after != before)
      if (check_gate* g = gate()) g->step_boundary(after);
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
        trace = fn(f, banner_step_ != s);
        banner_step_ = s;
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
             !stop_pending_.load(std::memory_order_relaxed);
      begin_step_locked(finished_step + 1);
      advanced = true;
      boundary = finished_step + 1;
      if (stop) {
        stop_message_ = stop_text(finished_step + 1);
        emit(stop_message_ + "\n");
        if (opts_.policy == on_detect::abort) std::abort();
        // A scope's destructor must not throw: stop_requested is raised when the next step's first scope opens.
        stop_pending_.store(true, std::memory_order_release);
      }
    }
  }
  if (advanced)
    if (check_gate* g = gate()) g->step_boundary(boundary);
}

inline void recorder::complete_inert() {
  std::uint64_t next = 0;
  {
    std::lock_guard<std::mutex> lk(m_);
    if (!opts_.auto_step) return;
    next = step_.load(std::memory_order_relaxed) + 1;
    begin_step_locked(next);
  }
  if (check_gate* g = gate()) g->step_boundary(next);
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
    const bool already = stop_pending_.exchange(false, std::memory_order_relaxed);
    if (already) {
      msg = stop_message_;  // auto_step armed the stop already
    } else if (hf_stop || (!hf && opts_.abort_after_step >= 0 &&
                           finished >= static_cast<std::uint64_t>(opts_.abort_after_step))) {
      msg = stop_text(finished + 1);
      if (!hf || opts_.policy == on_detect::abort) emit(msg + "\n");  // HF prints nothing, it raises
      if (opts_.policy == on_detect::abort) std::abort();
    }
    begin_step_locked(finished + 1);
    boundary = finished + 1;
  }
  if (check_gate* g = gate()) g->step_boundary(boundary);
  if (!msg.empty()) NANSCOPE_IMPL_THROW(stop_requested(msg));
}

/// report_style::hf: a module call completed — HuggingFace's forward hook (FORMATS.md §2, hf_style.hpp). The
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
    bool skip = detection_pending_.load(std::memory_order_relaxed) || stop_pending_.load(std::memory_order_relaxed);
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
    const bool reported_before = reported_step_ == call_batch;
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
        reported_step_ = call_batch;
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
          pending_detection_ = d;
          detection_pending_.store(true, std::memory_order_release);
        }
        abort_now = policy == on_detect::abort;
      }
    }
    if (o.stop && !raised && !stop_pending_.load(std::memory_order_relaxed)) {
      stop_message_ = detail::hf_abort_text(batch, opts_.abort_after_step);
      if (policy == on_detect::abort) {
        text += stop_message_ + "\n";  // the process ends: the reason must show somewhere
        abort_now = true;
      } else {
        stop_pending_.store(true, std::memory_order_release);  // HF prints nothing: it raises
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
      std::lock_guard<std::mutex> lk(m_);
      pending_callback_error_ = std::current_exception();
      detection_pending_.store(true, std::memory_order_release);
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

inline health_result recorder::checkpoint_impl(const tensor_view& v, std::string_view context, source_location where,
                                               allow allowed, const health_result* known) {
  if (!enabled()) {
    health_result off;
    off.mode = check_mode::no_tensor;
    return off;
  }
  scope* s = detail::current_scope(*this);
  // The frame is completed into the ring even when the check throws (throw_exception policy).
  struct pending {
    recorder& r;
    frame f;
    ~pending() {
      f.complete = true;
      r.complete(std::move(f), false);
    }
  } p{*this, frame{}};
  p.f.checkpoint = true;
  p.f.step = step();
  p.f.where = where;
  if (s != nullptr) {
    p.f.module_path = s->module_path();
    p.f.class_name = s->current().class_name;
  }
  return record(p.f, tensor_role::checkpoint, std::string(context), v, where, allowed, known);
}

NANSCOPE_NAMESPACE_END

// recorder::write_snapshot (what a detection saves into recorder_options::snapshot_dir)
#include "snapshot.hpp"

#endif  // NANSCOPE_RECORDER_HPP
