// nanscope — recorder_options.hpp: how a recorder behaves: its policy on a detection, its report style, per-site
// rules and thresholds.
#ifndef NANSCOPE_RECORDER_OPTIONS_HPP
#define NANSCOPE_RECORDER_OPTIONS_HPP

#include "block_scaled_record.hpp"
#include "config.hpp"
#include "dtype.hpp"
#include "frame.hpp"
#include "health.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

enum class on_detect : std::uint8_t { throw_exception, abort, print_and_continue, callback };
enum class report_style : std::uint8_t {
  /// HuggingFace DebugUnderflowOverflow, byte for byte (docs/formats.md): detection when a module call completes,
  /// `{ctx} has nans` lines, batch banners, HF's exception texts; stdout unless a sink is given.
  hf,
  hf_v1,     ///< the one-line-per-tensor format of the original document (docs/formats.md)
  extended,  ///< nanscope's: counts, headroom, source locations, producer marker
};

/// A rule for module paths matching `pattern` (glob: `*` any run of characters, `?` one character).
struct site_rule {
  site_rule() = default;
  // A constructor (not an aggregate) so that `site_rule{pattern, allowed, skip}` stays warning-free under
  // -Wmissing-field-initializers now that cast_to exists.
  site_rule(std::string pattern_, allow allowed_ = allow::none, bool skip_ = false,
            std::optional<dtype> cast_to_ = std::nullopt, std::optional<block_target> block_scaled_ = std::nullopt)
      : pattern(std::move(pattern_)), allowed(allowed_), skip(skip_), cast_to(cast_to_),
        block_scaled(std::move(block_scaled_)) {}
  std::string pattern;
  allow allowed = allow::none;
  bool skip = false;  ///< do not check tensors here at all
  /// The low-precision dtype these tensors will be cast to: warnings are measured against it (see
  /// recorder_options::cast_to).
  std::optional<dtype> cast_to;
  /// The block-scaled format(s) these tensors will be quantized to (see recorder_options::block_scaled); an empty
  /// block_target{} turns the options' target off here.
  std::optional<block_target> block_scaled;
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
  /// The block-scaled format(s) the recorded float tensors will be quantized to (MXFP8, MXFP6, MXFP4, NVFP4): each
  /// is checked with check_block_scaled in the same read as its health, its per-format statistics are kept
  /// (tensor_record::block_scaled, the layer tree, `nanscope report`) and a warning names the blocks that would
  /// lose values (block_target::warn_lossy_fraction). A site_rule's block_scaled overrides it for its modules.
  /// Host tensors only; a tensor checked with a segmentation or with count_margins gets a second pass for it.
  std::optional<block_target> block_scaled;
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_RECORDER_OPTIONS_HPP
