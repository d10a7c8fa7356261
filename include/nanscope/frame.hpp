// nanscope — frame.hpp: what a recorder records: tensors, module frames, detections and the exceptions that carry
// them.
#ifndef NANSCOPE_FRAME_HPP
#define NANSCOPE_FRAME_HPP

#include "block_scaled_record.hpp"
#include "config.hpp"
#include "dtype.hpp"
#include "health.hpp"
#include "margins_result.hpp"
#include "segment_record.hpp"
#include "view.hpp"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

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
  recorded_segments segmented;  ///< checked with a segmentation: its bad segments (segment_record.hpp)
  /// checked against a block-scaled target: per format, what quantizing it would lose (block_scaled_record.hpp)
  recorded_block_scaled block_scaled;
};

/// One module call (or one checkpoint): its parameters, inputs and outputs, in recording order.
struct frame {
  std::uint64_t step = 0;
  std::uint64_t sequence = 0;  ///< completion order across the recorder
  /// Which scope (or checkpoint) this is: a number unique in the process, given when it opens. Listeners match
  /// frames by it, never by address (a new scope may sit where an ended one did).
  std::uint64_t serial = 0;
  std::uint64_t recorder = 0;  ///< the id() of the recorder whose frame it is
  std::string module_path;     ///< "encoder.block.2.layer.1.DenseReluDense.wo"; "" for the root module
  std::string class_name;      ///< "Linear"; "" for a checkpoint outside any class
  bool checkpoint = false;     ///< a DETECT_OVERFLOW-style check rather than a module call
  bool complete = false;
  source_location where;       ///< where the scope (or checkpoint) was opened
  /// report_style::hf: the batch banner lines HuggingFace's debugger puts before this frame (docs/formats.md,
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
  recorded_segments segmented;   ///< that tensor's segments, when it was checked with a segmentation
  std::vector<segment_origin> segment_origins;  ///< per bad segment of it: the frame that first held it bad
};

/// Thrown by the `throw_exception` policy, after the report was printed and the attached writers committed their
/// files. what() is one short line naming the tensor, the module and the step and pointing to the report printed
/// before (report_style::hf: HuggingFace's ValueError text, byte for byte); report() is the whole report, info()
/// everything else.
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

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_FRAME_HPP
