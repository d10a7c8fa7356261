// nanscope — margins_result.hpp: what margins() reports (counts of values that would overflow, become subnormal
// or flush to zero when cast to fp16/bf16/fp8), without the pass itself (margins.hpp).
#ifndef NANSCOPE_MARGINS_RESULT_HPP
#define NANSCOPE_MARGINS_RESULT_HPP

#include "config.hpp"
#include "dtype.hpp"
#include "view.hpp"

#include <array>
#include <cstdint>
#include <limits>
#include <string>

NANSCOPE_NAMESPACE_BEGIN

/// The low-precision formats margins() reports on, in the order of margins_result::formats.
inline constexpr std::array<dtype, 4> margin_targets = {dtype::f16, dtype::bf16, dtype::f8_e4m3fn, dtype::f8_e5m2};

/// How one tensor would fare when cast to one target format with round-to-nearest-even.
/// Non-finite inputs (NaN, ±inf) are in none of the three counts: they are NaN/inf already.
struct format_margin {
  dtype target = dtype::f16;
  double max_finite = 0.0;  ///< the target's largest finite value (e4m3fn: 448)
  /// log2(max_finite / abs_max): how many doublings the largest value can take before it exceeds max_finite.
  /// Negative when abs_max is already beyond max_finite. See headroom_bits() for the special values.
  double headroom_bits = std::numeric_limits<double>::quiet_NaN();
  std::uint64_t overflow = 0;           ///< finite values that become inf (e4m3fn: NaN): fp16 |x| >= 65520, e4m3fn |x| > 464
  std::uint64_t subnormal = 0;          ///< values that become non-zero subnormals of the target
  std::uint64_t underflow_to_zero = 0;  ///< non-zero values that become ±0: 0 < |x| <= min_subnormal / 2

  bool would_overflow() const { return overflow != 0; }
  bool would_underflow() const { return underflow_to_zero != 0; }
};

/// The result of margins(): counts and abs_max of the source tensor, and one format_margin per target.
struct margins_result {
  dtype type = dtype::f32;  ///< source dtype
  int rank = 0;
  std::int64_t shape[max_rank] = {};
  std::uint64_t count = 0;  ///< elements
  std::uint64_t zero = 0;   ///< ±0 elements
  std::uint64_t inf = 0;    ///< ±inf elements
  std::uint64_t nan = 0;    ///< NaN elements
  /// max |x| over non-NaN values (an inf shows as inf), as health_result::abs_max; NaN when there is no
  /// non-NaN value (empty or all-NaN tensor).
  double abs_max = std::numeric_limits<double>::quiet_NaN();
  /// In the order of margin_targets: f16, bf16, e4m3fn, e5m2.
  std::array<format_margin, 4> formats{};

  /// The margin for one target; throws nanscope::error for a dtype that is not in margin_targets.
  const format_margin& operator[](dtype target) const {
    for (const format_margin& f : formats)
      if (f.target == target) return f;
    detail::fail("", std::string("margins: ") + name(target) +
                         " is not a margins target format (f16, bf16, e4m3fn, e5m2)");
  }
  /// True when a cast to any target format would overflow.
  bool any_overflow() const {
    for (const format_margin& f : formats)
      if (f.overflow != 0) return true;
    return false;
  }
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_MARGINS_RESULT_HPP
