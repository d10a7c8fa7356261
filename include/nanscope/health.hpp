// nanscope — health.hpp: check modes, the health result of one pass, merging, TensorFlow exports.
// Needs only the standard library.
#ifndef NANSCOPE_HEALTH_HPP
#define NANSCOPE_HEALTH_HPP

#include "config.hpp"
#include "dtype.hpp"
#include "hash.hpp"
#include "view.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

NANSCOPE_NAMESPACE_BEGIN

/// Check modes. The first five have TensorFlow's DebugNumericSummaryV2 names, meaning and enum values;
/// `stats` is nanscope's: every field of health_result. Cheaper modes read less or compute less:
///  - no_tensor:      nothing is read; only that the check ran (dtype, shape, count are filled).
///  - shape:          nothing is read; dtype, rank, shape, count.
///  - curt_health:    stops at the first NaN/Inf: `first_nonfinite` and has_nonfinite() are exact, the
///                    category counts are not computed.
///  - concise_health: counts of -inf, +inf, NaN and first_nonfinite.
///  - full_health:    all category counts (negative, zero, positive, -inf, +inf, NaN, subnormal),
///                    first_nonfinite and abs_max.
///  - stats:          everything: also min, max, abs_min, abs_min_nonzero, mean, std.
enum class check_mode : std::uint8_t {
  no_tensor = 1,
  curt_health = 2,
  concise_health = 3,
  full_health = 4,
  shape = 5,
  stats = 6,
};

inline const char* name(check_mode m) {
  switch (m) {
    case check_mode::no_tensor: return "NO_TENSOR";
    case check_mode::curt_health: return "CURT_HEALTH";
    case check_mode::concise_health: return "CONCISE_HEALTH";
    case check_mode::full_health: return "FULL_HEALTH";
    case check_mode::shape: return "SHAPE";
    case check_mode::stats: return "STATS";
  }
  return "?";
}

namespace detail {
inline constexpr double qnan = std::numeric_limits<double>::quiet_NaN();
// Bit-pattern tests: they keep their meaning under -ffast-math, where std::isnan may fold to false.
inline bool is_nan_bits(double x) { return (double_to_bits(x) & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; }
inline bool is_finite_bits(double x) { return (double_to_bits(x) & 0x7FF0000000000000ull) != 0x7FF0000000000000ull; }
}  // namespace detail

/// The health of one tensor, from one pass.
///
/// Semantics (docs/formats.md, numeric conventions): −0 counts as zero; min, max and abs_max are over non-NaN
/// values (an inf shows as inf); abs_min is over non-NaN values including zeros, abs_min_nonzero over non-NaN non-zero
/// values; mean and std (unbiased, N−1) are over finite values. A statistic with no values to range over is
/// NaN (e.g. min of an all-NaN tensor, std of one finite value). Fields a mode does not compute are left at
/// their defaults (counts 0, statistics NaN); `mode` records which mode produced the result.
struct health_result {
  dtype type = dtype::f32;
  check_mode mode = check_mode::stats;
  int rank = 0;
  std::int64_t shape[max_rank] = {};

  std::uint64_t count = 0;         ///< element count
  std::uint64_t negative = 0;      ///< finite and < 0
  std::uint64_t zero = 0;          ///< +0 and −0
  std::uint64_t positive = 0;      ///< finite and > 0
  std::uint64_t neg_inf = 0;
  std::uint64_t pos_inf = 0;
  std::uint64_t nan = 0;
  std::uint64_t subnormal = 0;     ///< non-zero values below the dtype's min normal (also in negative/positive)

  double min = detail::qnan;
  double max = detail::qnan;
  double abs_max = detail::qnan;
  double abs_min = detail::qnan;
  double abs_min_nonzero = detail::qnan;
  double mean = detail::qnan;
  double std = detail::qnan;
  /// Sum of squared deviations from the mean over finite values (for merging). long double: for f64 data the
  /// squares can leave the double range (|x| ~ 1e200 or 1e-200) while std itself is an ordinary double.
  long double m2 = 0.0L;

  std::int64_t first_nonfinite = -1;  ///< flat row-major index of the first NaN/Inf, −1 if none
  bool any_nonfinite = false;         ///< set in every mode that reads data (curt_health included)
  /// The content hash of the tensor's bits (hash.hpp), filled only when check_options::hash was on
  /// (`hash.valid`), in any mode and for any dtype. merge() leaves it alone.
  content_hash hash;

  std::uint64_t finite() const { return negative + zero + positive; }
  std::uint64_t nonfinite() const { return neg_inf + pos_inf + nan; }
  /// True when a NaN or Inf was seen. Valid in every mode that reads the data.
  bool has_nonfinite() const { return any_nonfinite; }
  bool has_nan() const { return nan != 0; }
  bool has_inf() const { return neg_inf + pos_inf != 0; }
  bool reads_data() const { return mode != check_mode::no_tensor && mode != check_mode::shape; }
  bool is_float() const { return ::nanscope::is_float(type); }
};

namespace detail {
// Ordering through integer keys of the bit patterns: exact for subnormals even under flush-to-zero.
inline std::int64_t order_key(double x) {
  const std::uint64_t b = double_to_bits(x);
  return static_cast<std::int64_t>(b ^ (static_cast<std::uint64_t>(static_cast<std::int64_t>(b) >> 63) >> 1));
}
inline double min_non_nan(double a, double b) {
  if (is_nan_bits(a)) return b;
  if (is_nan_bits(b)) return a;
  return order_key(b) < order_key(a) ? b : a;
}
inline double max_non_nan(double a, double b) {
  if (is_nan_bits(a)) return b;
  if (is_nan_bits(b)) return a;
  return order_key(b) > order_key(a) ? b : a;
}
/// Unbiased std from the finite count and m2.
inline double std_from(std::uint64_t n, long double m2) {
  if (n < 2) return qnan;
  return static_cast<double>(std::sqrt(m2 / static_cast<long double>(n - 1)));
}
/// Chan et al.'s parallel combination of (n, mean, m2) triples. Deterministic given the order of calls.
inline void merge_moments(std::uint64_t& n, double& mean, long double& m2, std::uint64_t nb, double mean_b,
                          long double m2_b) {
  if (nb == 0) return;
  if (n == 0) {
    n = nb;
    mean = mean_b;
    m2 = m2_b;
    return;
  }
  const long double na = static_cast<long double>(n);
  const long double nbd = static_cast<long double>(nb);
  const long double nt = na + nbd;
  const long double delta = static_cast<long double>(mean_b) - static_cast<long double>(mean);
  mean = static_cast<double>(static_cast<long double>(mean) + delta * (nbd / nt));
  m2 = m2 + m2_b + delta * delta * (na * nbd / nt);
  n += nb;
}
}  // namespace detail

/// Merges the result of the next chunk `b` into `a` (a's elements come first). Counts add, extrema combine,
/// moments combine by Chan's formula, the first non-finite index is the earliest. `b.first_nonfinite` must
/// already be a flat index in the combined tensor. Merging is deterministic for a fixed merge order.
inline void merge(health_result& a, const health_result& b) {
  if (a.mode == check_mode::stats) {  // moments exist only in STATS (and cost x87 work: skip them otherwise)
    std::uint64_t n_fin = a.finite();
    double mean = a.mean;
    long double m2 = a.m2;
    const std::uint64_t nb_fin = b.finite();
    if (n_fin == 0) {
      mean = 0.0;
      m2 = 0.0L;
    }
    if (nb_fin != 0) detail::merge_moments(n_fin, mean, m2, nb_fin, b.mean, b.m2);
    a.mean = n_fin != 0 ? mean : detail::qnan;
    a.m2 = n_fin != 0 ? m2 : 0.0L;
    a.std = detail::std_from(n_fin, a.m2);
  }
  a.count += b.count;
  a.negative += b.negative;
  a.zero += b.zero;
  a.positive += b.positive;
  a.neg_inf += b.neg_inf;
  a.pos_inf += b.pos_inf;
  a.nan += b.nan;
  a.subnormal += b.subnormal;
  a.min = detail::min_non_nan(a.min, b.min);
  a.max = detail::max_non_nan(a.max, b.max);
  a.abs_max = detail::max_non_nan(a.abs_max, b.abs_max);
  a.abs_min = detail::min_non_nan(a.abs_min, b.abs_min);
  a.abs_min_nonzero = detail::min_non_nan(a.abs_min_nonzero, b.abs_min_nonzero);
  if (a.first_nonfinite < 0) a.first_nonfinite = b.first_nonfinite;
  a.any_nonfinite = a.any_nonfinite || b.any_nonfinite;
}

// ---------------------------------------------------------------------------------------------------------
// TensorFlow DebugNumericSummaryV2 layouts (docs/formats.md). Counts become doubles, as in TF.
// ---------------------------------------------------------------------------------------------------------

/// TF's dtype enum value for a dtype.
inline int tf_dtype_enum(dtype t) { return info(t).tf_enum; }

/// FULL_HEALTH: [tensor_id, device_id, dtype, rank, numel, -inf, +inf, nan, negative, zero, positive].
/// Needs a result of mode full_health or stats.
inline std::array<double, 11> to_tf_full_health(const health_result& r, std::int64_t tensor_id = -1,
                                                 int device_id = -1) {
  if (r.mode != check_mode::full_health && r.mode != check_mode::stats)
    detail::fail("", std::string("to_tf_full_health needs a FULL_HEALTH or STATS result, got ") + name(r.mode));
  return {static_cast<double>(tensor_id), static_cast<double>(device_id), static_cast<double>(tf_dtype_enum(r.type)),
          static_cast<double>(r.rank),    static_cast<double>(r.count),    static_cast<double>(r.neg_inf),
          static_cast<double>(r.pos_inf), static_cast<double>(r.nan),      static_cast<double>(r.negative),
          static_cast<double>(r.zero),    static_cast<double>(r.positive)};
}
/// CONCISE_HEALTH: [tensor_id, numel, -inf, +inf, nan].
inline std::array<double, 5> to_tf_concise_health(const health_result& r, std::int64_t tensor_id = -1) {
  if (r.mode == check_mode::curt_health || !r.reads_data())
    detail::fail("", std::string("to_tf_concise_health needs CONCISE_HEALTH or richer, got ") + name(r.mode));
  return {static_cast<double>(tensor_id), static_cast<double>(r.count), static_cast<double>(r.neg_inf),
          static_cast<double>(r.pos_inf), static_cast<double>(r.nan)};
}
/// CURT_HEALTH: [tensor_id, 1.0 if any inf/nan else 0.0].
inline std::array<double, 2> to_tf_curt_health(const health_result& r, std::int64_t tensor_id = -1) {
  if (!r.reads_data()) detail::fail("", std::string("to_tf_curt_health needs a mode that reads data, got ") + name(r.mode));
  return {static_cast<double>(tensor_id), r.has_nonfinite() ? 1.0 : 0.0};
}
/// SHAPE: [tensor_id, dtype, rank, numel, last 6 dims right-padded with 0 (head-truncated when rank > 6)].
inline std::array<double, 10> to_tf_shape(const health_result& r, std::int64_t tensor_id = -1) {
  std::array<double, 10> out{static_cast<double>(tensor_id), static_cast<double>(tf_dtype_enum(r.type)),
                             static_cast<double>(r.rank), static_cast<double>(r.count), 0, 0, 0, 0, 0, 0};
  const int first = r.rank > 6 ? r.rank - 6 : 0;
  for (int i = first; i < r.rank; ++i) out[static_cast<std::size_t>(4 + i - first)] = static_cast<double>(r.shape[i]);
  return out;
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_HEALTH_HPP
