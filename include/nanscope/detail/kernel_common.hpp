// nanscope — detail/kernel_common.hpp: the interface between the pass driver (check.hpp) and the per-ISA
// kernels, plus the portable scalar kernel. Internal: include <nanscope/check.hpp> instead.
#ifndef NANSCOPE_DETAIL_KERNEL_COMMON_HPP
#define NANSCOPE_DETAIL_KERNEL_COMMON_HPP

#if !defined(NANSCOPE_CHECK_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/kernel_common.hpp is internal: include <nanscope/check.hpp> or <nanscope/nanscope.hpp>"
#endif

#include "../config.hpp"
#include "../dtype.hpp"

#include <array>
#include <cstdint>
#include <cstring>
#include <limits>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// What a kernel computes. Levels map from check modes: concise/curt -> nonfinite, full -> counts,
/// stats -> stats.
enum class level : int { nonfinite = 1, counts = 2, stats = 3 };

/// Sums of (x - k) and (x - k)^2 over n finite values. Shifting by a value close to the data keeps the
/// variance accurate when mean >> std (the naive sum/sum-of-squares formula loses it all).
struct moments_part {
  std::uint64_t n = 0;
  double k = 0.0;
  double s1 = 0.0;
  double s2 = 0.0;
};

/// Raw per-chunk output of a kernel. Extrema are raw (+inf/-inf when nothing was seen); the driver turns
/// them into NaN from the counts. `fast` holds the tame lanes (f32 kernels sum them in f32 over short runs),
/// `slow` the rest in double; `ld_*` holds f64 values too large to square in double.
struct chunk_out {
  std::uint64_t neg = 0, zero = 0, nan = 0, pinf = 0, ninf = 0, sub = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double amax = 0.0;
  double amin_nz = std::numeric_limits<double>::infinity();
  std::int64_t first_nf = -1;  // index within the chunk
  std::uint64_t n_slow = 0;    // finite values summed in `slow`
  double slow_s1 = 0.0, slow_s2 = 0.0;
  double fast_s1 = 0.0, fast_s2 = 0.0;
  std::uint64_t ld_n = 0;
  long double ld_s1 = 0.0L, ld_s2 = 0.0L;
};

/// Thresholds for one kernel call, in the bit patterns of the compute type (f32 for every format but f64).
/// A lane is "tame" when tame_lo <= |x| bits <= tame_lo + tame_span: the fast path handles whole groups of
/// tame lanes; everything else goes through the exact per-lane path.
struct kernel_params {
  std::uint32_t tame_lo32 = 0, tame_span32 = 0, normal32 = 0;
  std::uint64_t tame_lo64 = 0, tame_span64 = 0, normal64 = 0, huge64 = 0;
  float k32 = 0.0f;   // shift for f32-summed lanes (|k32| <= 2^59)
  double k64 = 0.0;   // shift for double-summed lanes
};

inline constexpr std::uint32_t f32_inf_bits = 0x7F800000u;
inline constexpr std::uint64_t f64_inf_bits = 0x7FF0000000000000ull;
inline constexpr std::uint32_t f32_abs_mask = 0x7FFFFFFFu;
inline constexpr std::uint64_t f64_abs_mask = 0x7FFFFFFFFFFFFFFFull;
// f32 lanes are summed in f32 only within [2^-40, 2^59]: squares of differences stay normal and finite.
inline constexpr std::uint32_t f32_sum_lo_bits = (127u - 40u) << 23;
inline constexpr std::uint32_t f32_sum_hi_bits = (127u + 59u) << 23;
// f64 lanes above 2^500 are summed in long double: their squares could overflow double.
inline constexpr std::uint64_t f64_huge_bits = static_cast<std::uint64_t>(1023 + 500) << 52;

/// Exact fp8 -> f32 tables (256 entries each), built once.
inline const float* fp8_table(dtype t) {
  static const std::array<float, 256> e4m3 = [] {
    std::array<float, 256> a{};
    for (unsigned i = 0; i < 256; ++i) a[i] = decode_small_float<4, 3, false>(i);
    return a;
  }();
  static const std::array<float, 256> e5m2 = [] {
    std::array<float, 256> a{};
    for (unsigned i = 0; i < 256; ++i) a[i] = decode_small_float<5, 2, true>(i);
    return a;
  }();
  return t == dtype::f8_e4m3fn ? e4m3.data() : e5m2.data();
}

/// Loads element i of a chunk of dtype t as double (exact). Used by the scalar kernel and K selection.
inline double load_as_double(const void* p, dtype t, std::size_t i) {
  const auto* b = static_cast<const unsigned char*>(p);
  switch (t) {
    case dtype::f64: {
      double v;
      std::memcpy(&v, b + 8 * i, 8);
      return v;
    }
    case dtype::f32: {
      float v;
      std::memcpy(&v, b + 4 * i, 4);
      return static_cast<double>(v);
    }
    case dtype::f16: {
      std::uint16_t h;
      std::memcpy(&h, b + 2 * i, 2);
      return static_cast<double>(decode_small_float<5, 10, true>(h));
    }
    case dtype::bf16: {
      std::uint16_t h;
      std::memcpy(&h, b + 2 * i, 2);
      return static_cast<double>(bits_to_float(static_cast<std::uint32_t>(h) << 16));
    }
    case dtype::f8_e4m3fn:
    case dtype::f8_e5m2: return static_cast<double>(fp8_table(t)[b[i]]);
    default: return 0.0;
  }
}

/// Portable kernel: one element at a time, classification by bit pattern in the double domain.
/// Correct for every float dtype; the SIMD kernels must agree with it on every count and extremum.
template <level L>
inline void scalar_kernel(const void* p, dtype t, std::size_t n, const kernel_params& kp, chunk_out& o) {
  std::uint64_t neg = 0, zero = 0, nan = 0, pinf = 0, ninf = 0, sub = 0, nfin = 0;
  double mn = o.min, mx = o.max, amax = o.amax, amin = o.amin_nz;
  double s1 = 0.0, s2 = 0.0;
  long double l1 = 0.0L, l2 = 0.0L;
  std::uint64_t nld = 0;
  const double k = kp.k64;
  const bool k_huge = (double_to_bits(k) & f64_abs_mask) > f64_huge_bits;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = load_as_double(p, t, i);
    const std::uint64_t bits = double_to_bits(x);
    const std::uint64_t a = bits & f64_abs_mask;
    const bool is_nan = a > f64_inf_bits;
    const bool is_inf = a == f64_inf_bits;
    const bool fin = a < f64_inf_bits;
    const bool sgn = (bits >> 63) != 0;
    nan += is_nan;
    pinf += is_inf & !sgn;
    ninf += is_inf & sgn;
    if (!fin && o.first_nf < 0) o.first_nf = static_cast<std::int64_t>(i);
    if constexpr (L >= level::counts) {
      const bool z = a == 0;
      zero += z;
      neg += fin & !z & sgn;
      sub += fin & !z & (a < kp.normal64);
      const double ax = bits_to_double(a);
      if (!is_nan && ax > amax) amax = ax;
      if constexpr (L == level::stats) {
        if (!is_nan) {
          if (x < mn) mn = x;
          if (x > mx) mx = x;
          if (!z && ax < amin) amin = ax;
        }
        if (fin) {
          if (a > f64_huge_bits || k_huge) {
            const long double d = static_cast<long double>(x) - static_cast<long double>(k);
            l1 += d;
            l2 += d * d;
            ++nld;
          } else {
            const double d = x - k;
            s1 += d;
            s2 += d * d;
            ++nfin;
          }
        }
      }
    }
  }
  o.neg += neg;
  o.zero += zero;
  o.nan += nan;
  o.pinf += pinf;
  o.ninf += ninf;
  o.sub += sub;
  o.min = mn;
  o.max = mx;
  o.amax = amax;
  o.amin_nz = amin;
  o.n_slow += nfin;
  o.slow_s1 += s1;
  o.slow_s2 += s2;
  o.ld_n += nld;
  o.ld_s1 += l1;
  o.ld_s2 += l2;
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_KERNEL_COMMON_HPP
