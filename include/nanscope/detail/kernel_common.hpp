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

/// Total-order integer key of an f64 bit pattern (for non-NaN values): key(a) < key(b) iff a < b, with
/// -0 just below +0. The transform is its own inverse.
NANSCOPE_HOST_DEVICE inline std::int64_t key64(std::uint64_t bits) {
  return static_cast<std::int64_t>(bits ^ (static_cast<std::uint64_t>(static_cast<std::int64_t>(bits) >> 63) >> 1));
}
inline std::uint64_t unkey64(std::int64_t key) { return static_cast<std::uint64_t>(key64(static_cast<std::uint64_t>(key))); }
inline constexpr std::int64_t key64_max = 0x7FF0000000000000ll;                       // key of +inf
inline constexpr std::int64_t key64_min = static_cast<std::int64_t>(0x800FFFFFFFFFFFFFull);  // key of -inf
/// Same for f32 bit patterns.
NANSCOPE_HOST_DEVICE inline std::int32_t key32(std::uint32_t bits) {
  return static_cast<std::int32_t>(bits ^ (static_cast<std::uint32_t>(static_cast<std::int32_t>(bits) >> 31) >> 1));
}
inline std::uint32_t unkey32(std::int32_t key) { return static_cast<std::uint32_t>(key32(static_cast<std::uint32_t>(key))); }

/// Raw per-chunk output of a kernel. Extrema are raw (+inf/-inf when nothing was seen); the driver turns
/// them into NaN from the counts. `fast` holds the tame lanes (f32 kernels sum them in f32 over short runs),
/// `slow` the rest in double; `ld_*` holds f64 values too large to square in double.
struct chunk_out {
  std::uint64_t neg = 0, zero = 0, nan = 0, pinf = 0, ninf = 0, sub = 0;
  // Extrema as integer keys of f64 bit patterns (see key64): comparisons never touch the FPU, so they stay
  // exact for subnormals even when -ffast-math has turned on flush-to-zero / denormals-are-zero.
  std::int64_t kmin = key64_max;   // min over non-NaN values
  std::int64_t kmax = key64_min;   // max over non-NaN values
  std::uint64_t amax = 0;          // abs bits, max over non-NaN values (counts level)
  std::uint64_t amin_nz = 0x7FF0000000000000ull;  // abs bits, min over non-NaN non-zero values
  std::int64_t first_nf = -1;  // index within the chunk
  std::uint64_t n_slow = 0;    // finite values summed in `slow`
  double slow_s1 = 0.0, slow_s2 = 0.0;
  double fast_s1 = 0.0, fast_s2 = 0.0;
  std::uint64_t ld_n = 0;
  long double ld_s1 = 0.0L, ld_s2 = 0.0L;

  void take_min(std::int64_t k) { kmin = k < kmin ? k : kmin; }
  void take_max(std::int64_t k) { kmax = k > kmax ? k : kmax; }
  void take_amax(std::uint64_t a) { amax = a > amax ? a : amax; }
  void take_amin(std::uint64_t a) { amin_nz = a < amin_nz ? a : amin_nz; }
};

/// Thresholds for one kernel call, in the bit patterns of the compute type (f32 for every format but f64).
/// A lane is "tame" when tame_lo <= |x| bits <= tame_lo + tame_span: the fast path handles whole groups of
/// tame lanes; everything else goes through the exact per-lane path.
struct kernel_params {
  std::uint32_t tame_lo32 = 0, tame_span32 = 0, normal32 = 0;
  // f16 / bf16 sources: the same tame range as |x| bit patterns of the source (lo16 <= |x| bits <= hi16)
  std::uint16_t tame_lo16 = 0, tame_hi16 = 0;
  std::uint64_t tame_lo64 = 0, tame_span64 = 0, normal64 = 0, huge64 = 0;
  float k32 = 0.0f;    // shift for f32-summed lanes (|k32| <= 2^59)
  double k64 = 0.0;    // shift for double-summed lanes: 0 or 2^-500 <= |k64| <= 2^500 (squares stay normal)
  double k_ld = 0.0;   // shift for the long-double lanes (f64 values beyond 2^+-500): any finite value
};

inline constexpr std::uint32_t f32_inf_bits = 0x7F800000u;
inline constexpr std::uint64_t f64_inf_bits = 0x7FF0000000000000ull;
inline constexpr std::uint32_t f32_abs_mask = 0x7FFFFFFFu;
inline constexpr std::uint64_t f64_abs_mask = 0x7FFFFFFFFFFFFFFFull;
// f32 lanes are summed in f32 only within [2^-40, 2^59]: squares of differences stay normal and finite.
inline constexpr std::uint32_t f32_sum_lo_bits = (127u - 40u) << 23;
inline constexpr std::uint32_t f32_sum_hi_bits = (127u + 59u) << 23;
// f64 lanes above 2^500 or below 2^-500 (but not zero) are summed in long double: their squares could
// overflow or underflow double.
inline constexpr std::uint64_t f64_huge_bits = static_cast<std::uint64_t>(1023 + 500) << 52;
inline constexpr std::uint64_t f64_tiny_bits = static_cast<std::uint64_t>(1023 - 500) << 52;

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

/// Element decoders for the portable kernel: raw storage -> double, exact. `p` is the chunk's first byte and
/// need not be aligned to the element size: every element is read through memcpy (a plain load where the
/// target allows unaligned loads).
template <class T>
inline T load_unaligned(const unsigned char* p, std::size_t i) {
  T x;
  std::memcpy(&x, p + i * sizeof(T), sizeof(T));
  return x;
}
struct dec_f64 {
  static constexpr std::size_t size = 8;
  static double get(const unsigned char* p, std::size_t i) { return bits_to_double(load_unaligned<std::uint64_t>(p, i)); }
};
struct dec_f32 {
  static constexpr std::size_t size = 4;
  static double get(const unsigned char* p, std::size_t i) { return f32_bits_to_double(load_unaligned<std::uint32_t>(p, i)); }
};
struct dec_f16 {
  static constexpr std::size_t size = 2;
  static double get(const unsigned char* p, std::size_t i) {
    // exact: f16 = sign * 2^(e-15) * 1.m, subnormals 2^-14 * 0.m; built through the f32 bit layout
    const std::uint32_t h = load_unaligned<std::uint16_t>(p, i);
    const std::uint32_t sign = (h & 0x8000u) << 16;
    const std::uint32_t e = (h >> 10) & 0x1Fu;
    const std::uint32_t m = h & 0x3FFu;
    if (e == 0x1F) return f32_bits_to_double(sign | 0x7F800000u | (m << 13));
    if (e != 0) return f32_bits_to_double(sign | ((e + 112u) << 23) | (m << 13));
    const double v = static_cast<double>(m) * 5.9604644775390625e-08;  // m * 2^-24, exact
    return sign != 0 ? -v : v;
  }
};
struct dec_bf16 {
  static constexpr std::size_t size = 2;
  static double get(const unsigned char* p, std::size_t i) {
    return f32_bits_to_double(static_cast<std::uint32_t>(load_unaligned<std::uint16_t>(p, i)) << 16);
  }
};
struct dec_fp8 {
  static constexpr std::size_t size = 1;
  const float* table;
  double get(const unsigned char* p, std::size_t i) const { return f32_bits_to_double(float_to_bits(table[p[i]])); }
};

/// Loads element i of a chunk of dtype t as double (exact), through the same decoders as the portable kernel.
/// Used to pick the shift of a chunk.
inline double load_as_double(const void* vp, dtype t, std::size_t i) {
  const auto* p = static_cast<const unsigned char*>(vp);
  switch (t) {
    case dtype::f64: return dec_f64::get(p, i);
    case dtype::f32: return dec_f32::get(p, i);
    case dtype::f16: return dec_f16::get(p, i);
    case dtype::bf16: return dec_bf16::get(p, i);
    case dtype::f8_e4m3fn:
    case dtype::f8_e5m2: return dec_fp8{fp8_table(t)}.get(p, i);
    default: return 0.0;
  }
}

/// Branch-free select: c ? a : b, through the bit patterns (compilers keep data-dependent ?: on doubles as
/// branches, which mispredict on mixed data such as ReLU outputs).
inline double select_bits(bool c, double a, double b) {
  const std::uint64_t m = std::uint64_t{0} - static_cast<std::uint64_t>(c);
  return bits_to_double((double_to_bits(a) & m) | (double_to_bits(b) & ~m));
}

/// Portable kernel: one element at a time, classification by bit pattern in the double domain, counts as
/// additions of booleans (no data-dependent branches but the rare long-double path).
/// Correct for every float dtype; the SIMD kernels must agree with it on every count and extremum.
template <level L, class Dec>
inline void scalar_kernel_impl(const Dec& dec, const unsigned char* p, std::size_t n, const kernel_params& kp,
                               chunk_out& o) {
  std::uint64_t neg = 0, zero = 0, n_nan = 0, n_pinf = 0, n_ninf = 0, sub = 0, nfin = 0;
  std::int64_t kmin = o.kmin, kmax = o.kmax;
  std::uint64_t amax = o.amax, amin = o.amin_nz;
  double s1 = 0.0, s2 = 0.0;
  const double k = kp.k64;
  std::int64_t first_nf = o.first_nf;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = dec.get(p, i);
    const std::uint64_t bits = double_to_bits(x);
    const std::uint64_t a = bits & f64_abs_mask;
    const bool is_nan = a > f64_inf_bits;
    const bool is_inf = a == f64_inf_bits;
    const bool fin = a < f64_inf_bits;
    const bool sgn = (bits >> 63) != 0;
    n_nan += is_nan;
    n_pinf += is_inf & !sgn;
    n_ninf += is_inf & sgn;
    if (!fin && first_nf < 0) first_nf = static_cast<std::int64_t>(i);
    if constexpr (L >= level::counts) {
      const bool z = a == 0;
      zero += z;
      neg += fin & !z & sgn;
      sub += fin & !z & (a < kp.normal64);
      // integer compares only: exact for subnormals under flush-to-zero, and branch-free (cmov)
      if constexpr (L == level::counts) {
        const std::uint64_t a_nn = is_nan ? 0 : a;
        amax = a_nn > amax ? a_nn : amax;
      }
      if constexpr (L == level::stats) {
        const std::int64_t key = key64(bits);
        const std::int64_t kl = is_nan ? key64_max : key;
        const std::int64_t kh = is_nan ? key64_min : key;
        kmin = kl < kmin ? kl : kmin;
        kmax = kh > kmax ? kh : kmax;
        const std::uint64_t am = (is_nan | z) ? f64_inf_bits : a;
        amin = am < amin ? am : amin;
        if (__builtin_expect(a > f64_huge_bits || (a != 0 && a < f64_tiny_bits), 0)) {
          if (fin) {
            const long double d = static_cast<long double>(x) - static_cast<long double>(kp.k_ld);
            o.ld_s1 += d;
            o.ld_s2 += d * d;
            ++o.ld_n;
          }
        } else {
          const double d = select_bits(fin, x - k, 0.0);
          s1 += d;
          s2 += d * d;
          nfin += fin;
        }
      }
    }
  }
  o.first_nf = first_nf;
  o.neg += neg;
  o.zero += zero;
  o.nan += n_nan;
  o.pinf += n_pinf;
  o.ninf += n_ninf;
  o.sub += sub;
  o.kmin = kmin;
  o.kmax = kmax;
  o.amax = amax;
  o.amin_nz = amin;
  o.n_slow += nfin;
  o.slow_s1 += s1;
  o.slow_s2 += s2;
}

/// Portable kernel entry: dispatches once on the dtype.
template <level L>
inline void scalar_kernel(const void* vp, dtype t, std::size_t n, const kernel_params& kp, chunk_out& o) {
  const auto* p = static_cast<const unsigned char*>(vp);  // any alignment
  switch (t) {
    case dtype::f64: scalar_kernel_impl<L>(dec_f64{}, p, n, kp, o); break;
    case dtype::f32: scalar_kernel_impl<L>(dec_f32{}, p, n, kp, o); break;
    case dtype::f16: scalar_kernel_impl<L>(dec_f16{}, p, n, kp, o); break;
    case dtype::bf16: scalar_kernel_impl<L>(dec_bf16{}, p, n, kp, o); break;
    case dtype::f8_e4m3fn:
    case dtype::f8_e5m2: scalar_kernel_impl<L>(dec_fp8{fp8_table(t)}, p, n, kp, o); break;
    default: break;
  }
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_KERNEL_COMMON_HPP
