// nanscope — block_scaled_record.hpp: the block-scaled target a recorder checks tensors against (MXFP8/MXFP6/MXFP4/
// NVFP4), what it keeps of each such tensor, and the text that names a loss: "as mxfp4 (ocp scales): 212 of 512
// blocks (41.4%) lose values: 98 clipped, 1503 flushed to 0; worst block 17 ...". docs/block-scaled.md.
#ifndef NANSCOPE_BLOCK_SCALED_RECORD_HPP
#define NANSCOPE_BLOCK_SCALED_RECORD_HPP

#include "block_scaled_formats.hpp"
#include "block_scaled_result.hpp"
#include "check_api.hpp"
#include "config.hpp"
#include "health.hpp"
#include "view.hpp"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// The block-scaled format(s) tensors will be quantized to (recorder_options::block_scaled, site_rule::block_scaled,
/// NANSCOPE_DETECT_OVERFLOW_BLOCKS). A recorder checks such a tensor with check_block_scaled in the same read as
/// its health, keeps the per-format statistics with the tensor (tensor_record::block_scaled: the layer tree and
/// `nanscope report` show them), and warns once per site and step when more of its blocks would lose values (a
/// clipped or flushed element, or a NaN scale) than `warn_lossy_fraction` allows.
/// Chainable: block_target{block_format::mxfp4}.with_rule(scale_rule::round_up).
struct block_target {
  block_target() = default;
  /// One format (implicit: NANSCOPE_DETECT_OVERFLOW_BLOCKS(x, "ctx", nanscope::block_format::nvfp4)).
  block_target(block_format f) : formats(block_format_set{}.with(f)) {}  // NOLINT(google-explicit-constructor)
  /// Several formats at once.
  block_target(block_format_set s) : formats(s) {}  // NOLINT(google-explicit-constructor)

  block_format_set formats;           ///< empty: no block-scaled statistics
  scale_rule rule = scale_rule::ocp;  ///< how MX block scales are chosen (NVFP4 has its own rule)
  int axis = -1;                      ///< the dimension blocks run along; negative counts from the end
  /// NVFP4's per-tensor scale from this magnitude; negative: from the tensor's own abs max (a second read).
  double nvfp4_tensor_amax = -1.0;
  /// Warn when more than this fraction of a tensor's blocks lose values (0: any lossy block; negative: never).
  /// NaN (the default): automatic, per format and rule, halfway between the fraction that normally distributed
  /// data loses and 1 (block_warn_threshold): some loss is normal (the floor rule clips the top of about 17% of
  /// MXFP8 blocks of such data, FP4 loses a small value in most blocks), a tensor past that loses far more.
  double warn_lossy_fraction = detail::qnan;

  block_target& with(block_format f) {
    formats = formats.with(f);
    return *this;
  }
  block_target& with_rule(scale_rule r) {
    rule = r;
    return *this;
  }
  block_target& with_axis(int a) {
    axis = a;
    return *this;
  }
  block_target& with_nvfp4_tensor_amax(double a) {
    nvfp4_tensor_amax = a;
    return *this;
  }
  block_target& with_warn_lossy_fraction(double f) {
    warn_lossy_fraction = f;
    return *this;
  }
};

/// What a recorder keeps of a tensor checked against a block target: tensor_record::block_scaled.
struct recorded_block_scaled {
  bool applied = false;               ///< the tensor was checked against a block target
  scale_rule rule = scale_rule::ocp;
  int axis = 0;                       ///< the dimension the blocks ran along (non-negative)
  double warn_lossy_fraction = detail::qnan;  ///< the target's threshold as given (NaN: automatic)
  std::vector<block_format_stats> formats;  ///< per format, in block_format order (per_block is always empty)
  unsigned warned = 0;                ///< bit i: the tensor crossed the threshold for block_format i

  const block_format_stats* find(block_format f) const {
    for (const block_format_stats& s : formats)
      if (s.format == f) return &s;
    return nullptr;
  }
};

/// The fraction of lossy blocks of normally distributed data (N(0, 1), 2^20 elements, blocks along rows of 1024),
/// per scale rule and format, measured with check_block_scaled: what block_warn_threshold starts from.
namespace detail {
inline constexpr double bs_normal_lossy[3][block_format_count] = {
    // mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4, nvfp4
    {0.172, 0.172, 0.566, 0.245, 0.974, 0.841},  // ocp
    {0.000, 0.000, 0.525, 0.092, 0.968, 0.841},  // round_up
    {0.122, 0.077, 0.545, 0.160, 0.969, 0.841},  // even
};
}  // namespace detail

/// The warning threshold in effect for format `f` under `rule`: `given` when it is not NaN, else halfway between
/// the fraction of lossy blocks normally distributed data gives and 1 (MXFP8 E4M3 under the floor rule: 0.586;
/// MXFP4: 0.987; NVFP4: 0.92).
inline double block_warn_threshold(double given, block_format f, scale_rule rule) {
  if (!detail::is_nan_bits(given)) return given;
  const unsigned r = static_cast<unsigned>(rule) < 3u ? static_cast<unsigned>(rule) : 0u;
  const unsigned k = static_cast<unsigned>(f) < static_cast<unsigned>(block_format_count) ? static_cast<unsigned>(f) : 0u;
  return 0.5 * (1.0 + detail::bs_normal_lossy[r][k]);
}

namespace detail {

/// printf into a std::string (numbers only: the callers pass no user text through the format).
template <class... A>
std::string bs_printf(const char* fmt, A... a) {
  char buf[160];
  const int n = std::snprintf(buf, sizeof buf, fmt, a...);
  return n <= 0 ? std::string() : std::string(buf, static_cast<std::size_t>(n) < sizeof buf ? static_cast<std::size_t>(n) : sizeof buf - 1);
}

/// "2^7" for an MX scale byte (E8M0: exponent + 127); NVFP4: the E4M3 block scale's value ("0.875"); NaN scales "NaN".
inline std::string block_scale_text(block_format f, std::uint8_t scale) {
  if (info(f).mx) return scale == 0xFF ? std::string("NaN") : "2^" + std::to_string(static_cast<int>(scale) - 127);
  if ((scale & 0x7F) == 0x7F) return "NaN";
  return bs_printf("%g", decode(element_format::e4m3, scale));
}

/// "as mxfp4 (ocp scales): 212 of 512 blocks (41.4%) lose values: 98 clipped, 1503 flushed to 0, 2 NaN-scale blocks;
/// worst block 17 (elements 544-575, abs max 900, scale 2^7: 1 clipped, 31 flushed, error max 132, rms 23.4);
/// scale exponents -3..7 (mean -1.20, std 1.50)". Blocks along another dimension than the last (`along_last`
/// false): "worst block 17 (first element 2, 32 elements along dimension 0, ...)". One line, no newline.
inline std::string block_loss_text(const block_format_stats& s, bool along_last = true, int axis = -1) {
  std::string out = "as ";
  out += name(s.format);
  out += info(s.format).mx ? std::string(" (") + name(s.rule) + " scales)" : std::string(" (e4m3 block scales)");
  out += ": " + std::to_string(s.lossy_blocks) + " of " + std::to_string(s.blocks) + " blocks";
  out += bs_printf(" (%.1f%%)", 100.0 * s.lossy_fraction());
  if (s.lossy_blocks == 0) {
    out += " lose nothing";
  } else {
    out += " lose values: " + std::to_string(s.clipped) + " clipped, " + std::to_string(s.flushed) + " flushed to 0";
    auto blocks = [](std::uint64_t n) { return n == 1 ? std::string(" block") : std::string(" blocks"); };
    if (s.nan_blocks != 0) out += ", " + std::to_string(s.nan_blocks) + " NaN-scale" + blocks(s.nan_blocks);
    if (s.zero_scale_blocks != 0) out += ", " + std::to_string(s.zero_scale_blocks) + " zero-scale" + blocks(s.zero_scale_blocks);
  }
  const block_worst& w = s.worst;
  if (w.index >= 0) {
    out += "; worst block " + std::to_string(w.index) +
           (along_last ? " (elements " + std::to_string(w.first_element) + "-" +
                             std::to_string(w.first_element + w.elements - 1)
                       : " (first element " + std::to_string(w.first_element) + ", " + std::to_string(w.elements) +
                             " elements along dimension " + std::to_string(axis)) +
           bs_printf(", abs max %.4g", w.abs_max) +
           ", scale " + block_scale_text(s.format, w.scale) + ": " + std::to_string(w.clipped) + " clipped, " +
           std::to_string(w.flushed) + " flushed";
    if (detail::is_finite_bits(w.error_max_abs)) out += bs_printf(", error max %.4g, rms %.4g", w.error_max_abs, w.error_rms);
    out += ")";
  }
  if (detail::is_finite_bits(s.scale_exp_mean))
    out += detail::is_finite_bits(s.scale_exp_std)
               ? bs_printf("; scale exponents %d..%d (mean %.2f, std %.2f)", s.scale_exp_min, s.scale_exp_max,
                           s.scale_exp_mean, s.scale_exp_std)
               : bs_printf("; scale exponent %d", s.scale_exp_min);
  return out;
}

}  // namespace detail

namespace detail {

/// How a recorder reaches the block-scaled pass: <nanscope/block_scaled.hpp> installs it when any file of the
/// program includes it (the separately compiled implementation does). The recorder does not include the kernels
/// itself, so that the many files that record without a block target do not compile them (about 5 s of -O2 each).
using block_check_fn = block_scaled_result (*)(const tensor_view&, const block_target&, const check_options&);
inline std::atomic<block_check_fn>& block_check_slot() {
  static std::atomic<block_check_fn> fn{nullptr};
  return fn;
}

/// The block target a recorder applies to a tensor: `given` (a checkpoint's own: it must fit, check_block_scaled
/// says so otherwise), else `site` (the site rule's or the options'), when it fits: a non-empty set, host memory,
/// the axis within the rank, and a mode that reads the data (not shape or no_tensor, a gate's choice). Null: none.
inline const block_target* fitting_block_target(const block_target* given, const block_target* site, const tensor_view& v,
                                                 check_mode mode) {
  const block_target* bt = given != nullptr ? given : site;
  if (bt == nullptr || bt->formats.empty() || v.space == memory_space::cuda_device) return nullptr;
  if (given == nullptr) {
    const int r = v.rank > 0 ? v.rank : 1;
    if (bt->axis < -r || bt->axis >= r || mode == check_mode::shape || mode == check_mode::no_tensor) return nullptr;
  }
  return bt;
}

/// Keeps a block-scaled pass's per-format statistics with the tensor's record.
inline void keep_block_stats(recorded_block_scaled& kb, const block_target& t, block_scaled_result&& r) {
  kb.applied = true;
  kb.rule = t.rule;
  kb.axis = r.axis;
  kb.warn_lossy_fraction = t.warn_lossy_fraction;
  kb.formats = std::move(r.formats);
}

/// Whether a format's statistics call for a warning: more of its blocks lose values than the threshold allows
/// (block_warn_threshold: the given warn_lossy_fraction, or the automatic one; a negative one never warns).
inline bool block_loss_warns(const recorded_block_scaled& kb, const block_format_stats& s) {
  const double thr = block_warn_threshold(kb.warn_lossy_fraction, s.format, s.rule);
  return !is_nan_bits(thr) && thr >= 0.0 && s.lossy_fraction() > thr;
}

/// check_block_scaled(v, the target's options with `c` as the health pass) through the installed pass; without
/// one, nanscope::error naming the tensor and the include that fixes it.
inline block_scaled_result run_block_check(const tensor_view& v, const block_target& t, const check_options& c) {
  const block_check_fn fn = block_check_slot().load(std::memory_order_acquire);
  if (fn == nullptr)
    fail(v.name, "a block-scaled target is set, but no file of this program includes <nanscope/block_scaled.hpp>, "
                 "which compiles the block-scaled pass: include it in one file (e.g. where the recorder's options "
                 "are set), or use the separately compiled implementation (<nanscope/instrument.hpp>)");
  return fn(v, t, c);
}

}  // namespace detail

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_BLOCK_SCALED_RECORD_HPP
