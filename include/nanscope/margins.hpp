// nanscope — margins.hpp: how close a tensor is to the limits of the low-precision formats it may be cast to.
//
//   nanscope::margins_result m = nanscope::margins(tensor);
//   if (m[nanscope::dtype::f16].would_overflow()) ...;          // some value would become inf in fp16
//   double bits = m[nanscope::dtype::f8_e4m3fn].headroom_bits;  // log2(448 / abs_max)
//
// For each target format (fp16, bf16, fp8 e4m3fn, fp8 e5m2) one pass over the data counts, exactly, the
// finite values that a round-to-nearest-even cast would turn into inf/NaN (overflow), into a non-zero
// subnormal, and into zero (underflow of a non-zero value); it also finds abs_max and the headroom in bits.
// This is a separate pass from check(): the plain health pass keeps its full speed.
//
// How it works: every count is a range of |x| bit patterns of the *source* dtype. Bit patterns of |x| are
// ordered like the values, so each boundary of docs/formats.md becomes "the first source pattern at or
// above it", found once per source dtype by a binary search over exact decodes. The kernels then only compare
// integers (AVX-512, AVX2 or portable scalar, picked like check(): nanscope::resolve_isa), which keeps them
// exact for subnormals under -ffast-math (flush-to-zero / denormals-are-zero never touch integer compares).
#ifndef NANSCOPE_MARGINS_HPP
#define NANSCOPE_MARGINS_HPP

#include "check.hpp"
#include "config.hpp"
#include "dtype.hpp"
#include "margins_result.hpp"
#include "traits.hpp"
#include "view.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

NANSCOPE_NAMESPACE_BEGIN

/// Options of one margins() pass.
struct margins_options {
  isa instruction_set = isa::automatic;  ///< as check_options::instruction_set (NANSCOPE_ISA applies too)

  margins_options& with_isa(isa i) {
    instruction_set = i;
    return *this;
  }
};

namespace detail {
inline double margin_pos_inf() { return bits_to_double(0x7FF0000000000000ull); }
inline double margin_neg_inf() { return bits_to_double(0xFFF0000000000000ull); }
inline double margin_qnan() { return bits_to_double(0x7FF8000000000000ull); }

/// Splits a positive finite double (normal or subnormal) into e and m with x = m * 2^e, m in [1, 2), using
/// integer operations only: subnormal inputs keep their value under denormals-are-zero.
inline void split_binary(std::uint64_t abs_bits, int& e, double& m) {
  std::uint64_t frac = abs_bits & 0x000FFFFFFFFFFFFFull;
  int field = static_cast<int>(abs_bits >> 52);
  if (field == 0) {  // subnormal: normalise the fraction
    int shift = 0;
    while ((frac & 0x0010000000000000ull) == 0) {
      frac <<= 1;
      ++shift;
    }
    frac &= 0x000FFFFFFFFFFFFFull;
    field = 1 - shift;
  }
  e = field - 1023;
  m = bits_to_double((std::uint64_t{1023} << 52) | frac);
}
}  // namespace detail

/// Headroom in bits of a tensor whose largest magnitude is `abs_max`, in format `target` (any floating
/// dtype): log2(max_finite(target) / |abs_max|). Works on health_result::abs_max (STATS / FULL_HEALTH) too.
///   abs_max == 0   -> +inf (no value can overflow, however much it is scaled)
///   abs_max is inf -> -inf (the tensor already holds an infinity)
///   abs_max is NaN -> NaN  (no non-NaN value: empty or all-NaN tensor, or a mode that did not compute it)
/// The sign of abs_max is ignored. Computed from the exponents and significands separately, so the result is
/// accurate to about 1 ulp and the same under -ffast-math (subnormal abs_max included).
inline double headroom_bits(double abs_max, dtype target) {
  const dtype_info& ti = info(target);
  if (!ti.is_float)
    detail::fail("", std::string("headroom_bits: target dtype ") + ti.name + " is not a floating type");
  const std::uint64_t a = detail::double_to_bits(abs_max) & 0x7FFFFFFFFFFFFFFFull;
  if (a > 0x7FF0000000000000ull) return detail::margin_qnan();
  if (a == 0x7FF0000000000000ull) return detail::margin_neg_inf();
  if (a == 0) return detail::margin_pos_inf();
  int ea = 0, em = 0;
  double ma = 1.0, mm = 1.0;
  detail::split_binary(a, ea, ma);
  detail::split_binary(detail::double_to_bits(ti.max_finite), em, mm);
  return static_cast<double>(em - ea) + std::log2(mm / ma);  // mm / ma is in (0.5, 2): normal
}

namespace detail {

// ---------------------------------------------------------------------------------------------------------
// Boundaries. A slot k of the table holds a source |x| bit pattern b[k]; kernels count ge[k] = #{|x| bits >=
// b[k]} for every slot, and every reported count is a difference of two slots:
//   zero = n - ge[nonzero]            nan = ge[nan]            inf = ge[inf] - ge[nan]
//   per target: underflow_to_zero = ge[nonzero] - ge[Z]   subnormal = ge[Z] - ge[M]   overflow = ge[O] - ge[inf]
// Round to nearest even, for a target with min_subnormal s (the spacing of its subnormals) and min_normal
// N = 2^mb * s (mb the fraction bits):
//  - Below N every representable magnitude is a multiple k*s, 0 <= k <= 2^mb. |x| rounds to 0 iff
//    |x| < s/2, or |x| == s/2 (a tie between 0 and s; 0 has the even significand). So "underflows to zero"
//    is 0 < |x| <= s/2, and Z is the first pattern with value > s/2.
//  - The largest subnormal is (2^mb - 1)*s: an odd multiple. The midpoint between it and N is N - s/2, and a
//    tie there goes to the even neighbour, N (significand 2^mb). So |x| becomes a non-zero subnormal iff
//    s/2 < |x| < N - s/2, and M is the first pattern with value >= N - s/2.
//  - O is the first pattern at or above the overflow boundary h = max_finite + ulp(max_finite)/2 (fp16 65520,
//    bf16 (2 - 2^-8) * 2^127, e5m2 61440): IEEE formats' max significand is odd, so the tie h overflows.
//    e4m3fn's max 448 = 1.110b * 2^8 is even, so h = 464 rounds to 448 and O is the first pattern above 464
//    (as dtype_info::overflow_threshold means it).
// Every one of these values is a small power-of-two combination, exact in double; and for f32/f16/bf16/fp8
// sources each boundary is also an f32 bit pattern. Boundaries that no finite source value reaches are the
// source's inf pattern (the count is then 0).
// ---------------------------------------------------------------------------------------------------------
inline constexpr int mb_nonzero = 0;
inline constexpr int mb_inf = 1;
inline constexpr int mb_nan = 2;
inline constexpr int mb_target0 = 3;  // target i: Z at 3 + 3i, M at 4 + 3i, O at 5 + 3i
inline constexpr int mb_count = 15;

struct margin_bounds {
  std::uint64_t b[mb_count] = {};
  std::uint64_t abs_mask = 0;
};

/// Per-kernel-call output: the ge[] counts and the largest non-NaN |x| bit pattern (source dtype).
struct margin_counts {
  std::uint64_t ge[mb_count] = {};
  std::uint64_t amax = 0;
};

/// The exact value of a source |x| bit pattern, as f64 bits (integer operations only).
inline std::uint64_t margin_value_bits(dtype s, std::uint64_t p) {
  switch (s) {
    case dtype::f64: return p;
    case dtype::f32: return f32_to_f64_bits(static_cast<std::uint32_t>(p));
    case dtype::bf16: return f32_to_f64_bits(static_cast<std::uint32_t>(p) << 16);
    case dtype::f16: return f32_to_f64_bits(float_to_bits(decode_small_float<5, 10, true>(static_cast<std::uint32_t>(p))));
    case dtype::f8_e4m3fn:
      return f32_to_f64_bits(float_to_bits(decode_small_float<4, 3, false>(static_cast<std::uint32_t>(p))));
    case dtype::f8_e5m2:
      return f32_to_f64_bits(float_to_bits(decode_small_float<5, 2, true>(static_cast<std::uint32_t>(p))));
    default: return 0;
  }
}

/// First non-finite |x| pattern of a floating source dtype (inf, or e4m3fn's NaN).
inline std::uint64_t margin_inf_pattern(dtype s) {
  switch (s) {
    case dtype::f64: return 0x7FF0000000000000ull;
    case dtype::f32: return 0x7F800000u;
    case dtype::f16: return 0x7C00u;
    case dtype::bf16: return 0x7F80u;
    case dtype::f8_e4m3fn: return 0x7Fu;
    default: return 0x7Cu;  // e5m2
  }
}

/// Smallest |x| pattern p of the source with value(p) >= the double whose bits are t_bits (positive); the
/// inf pattern when no finite value is that large.
inline std::uint64_t margin_first_at_least(dtype s, std::uint64_t t_bits) {
  std::uint64_t lo = 0, hi = margin_inf_pattern(s);
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (margin_value_bits(s, mid) >= t_bits)  // positive doubles order like their bit patterns
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

inline margin_bounds make_margin_bounds(dtype s) {
  margin_bounds mb;
  const std::uint64_t inf = margin_inf_pattern(s);
  mb.b[mb_nonzero] = 1;
  mb.b[mb_inf] = inf;
  mb.b[mb_nan] = s == dtype::f8_e4m3fn ? inf : inf + 1;
  mb.abs_mask = s == dtype::f64 ? 0x7FFFFFFFFFFFFFFFull : (std::uint64_t{1} << (size_of(s) * 8 - 1)) - 1;
  for (int i = 0; i < 4; ++i) {
    const dtype_info& ti = info(margin_targets[static_cast<std::size_t>(i)]);
    // s/2 and N - s/2 as doubles: normal, exact (a few significant bits each).
    const std::uint64_t half_sub = double_to_bits(ti.min_subnormal) - (std::uint64_t{1} << 52);
    const double mid_normal = ti.min_normal - bits_to_double(half_sub);
    mb.b[mb_target0 + 3 * i] = margin_first_at_least(s, half_sub + 1);
    mb.b[mb_target0 + 3 * i + 1] = margin_first_at_least(s, double_to_bits(mid_normal));
    // Overflow: halfway between max_finite and the next step up (max + half an ulp at max). The tie rounds to
    // the even significand: IEEE formats' max significand is all ones (odd), so the tie overflows; e4m3fn's
    // max 1.110b * 2^8 is even, so 464 rounds to 448 and only values above it overflow. Derived here from
    // max_finite and the fraction width; margins_test checks that it agrees with dtype_info::overflow_threshold.
    int emax = 0;
    double mmax = 1.0;
    split_binary(double_to_bits(ti.max_finite), emax, mmax);
    const double halfway = ti.max_finite + bits_to_double(static_cast<std::uint64_t>(emax - ti.mantissa_bits - 1 + 1023) << 52);
    const std::uint64_t max_significand =
        (std::uint64_t{1} << ti.mantissa_bits) | ((double_to_bits(mmax) & 0x000FFFFFFFFFFFFFull) >> (52 - ti.mantissa_bits));
    const bool tie_overflows = (max_significand & 1u) != 0;  // odd max: the tie rounds up, out of range
    mb.b[mb_target0 + 3 * i + 2] = margin_first_at_least(s, double_to_bits(halfway) + (tie_overflows ? 0 : 1));
  }
  return mb;
}

/// Boundaries for a floating source dtype, built once per dtype.
inline const margin_bounds& margin_bounds_for(dtype s) {
  static const std::array<margin_bounds, 6> table = [] {
    std::array<margin_bounds, 6> t{};
    for (int i = 0; i < 6; ++i) t[static_cast<std::size_t>(i)] = make_margin_bounds(static_cast<dtype>(i));
    return t;
  }();
  return table[static_cast<std::size_t>(s)];
}

// ---------------------------------------------------------------------------------------------------------
// Kernels. Comparing every |x| with all 15 boundaries would cost 15 compares per element; instead the slots
// are split in three tiers (the split is the same for every source dtype, only the patterns differ):
//   always:   nonzero, and e4m3fn's Z and M (the highest of the small boundaries: 2^-10 and 2^-6 - 2^-10);
//   small:    Z and M of fp16, bf16 and e5m2, all <= small_hi (the largest of those M). Counted as
//             lt[k] = #{1 <= |x| < b[k]} (then ge[k] = nonzero - lt[k]) and only for groups of lanes with some
//             1 <= |x| < small_hi: for other groups every lane is 0 or >= small_hi, so lt[k] is 0 there;
//   large:    inf, NaN and the four O, all >= large_lo (the smallest O): counted only for groups with some
//             |x| >= large_lo; elsewhere their ge is 0. abs_max needs the NaN mask only in such groups too.
// Typical data (no overflow, few values below 2^-14) costs 5 compares per group of lanes.
// ---------------------------------------------------------------------------------------------------------
inline constexpr int mb_always[3] = {mb_nonzero, mb_target0 + 6, mb_target0 + 7};  // e4m3fn Z, M
inline constexpr int mb_small[6] = {mb_target0 + 0, mb_target0 + 1, mb_target0 + 3,
                                    mb_target0 + 4, mb_target0 + 9, mb_target0 + 10};  // fp16, bf16, e5m2 Z, M
inline constexpr int mb_large[6] = {mb_inf, mb_nan, mb_target0 + 2, mb_target0 + 5, mb_target0 + 8, mb_target0 + 11};

inline std::uint64_t margin_small_hi(const margin_bounds& mb) {
  std::uint64_t hi = 1;
  for (int k : mb_small) hi = mb.b[k] > hi ? mb.b[k] : hi;
  return hi;
}
inline std::uint64_t margin_large_lo(const margin_bounds& mb) {
  std::uint64_t lo = mb.b[mb_inf];
  for (int k : mb_large) lo = mb.b[k] < lo ? mb.b[k] : lo;
  return lo;
}
/// Adds one flush block's lane counts (small-tier slots hold lt counts) to out.ge.
inline void margin_add_block(margin_counts& out, const std::uint64_t (&block)[mb_count]) {
  for (int k = 0; k < mb_count; ++k) out.ge[k] += block[k];
  for (int k : mb_small) out.ge[k] += block[mb_nonzero] - 2 * block[k];  // += nonzero - lt (block[k] added above)
}

/// Portable kernel (also the reference for the SIMD ones: same tiers, one lane at a time).
template <class U>
inline void margins_scalar(const unsigned char* p, std::size_t n, const margin_bounds& mb, margin_counts& out) {
  U b[mb_count];
  for (int k = 0; k < mb_count; ++k) b[k] = static_cast<U>(mb.b[k]);
  const U mask = static_cast<U>(mb.abs_mask);
  const U small_hi = static_cast<U>(margin_small_hi(mb));
  const U large_lo = static_cast<U>(margin_large_lo(mb));
  const U nan_lo = b[mb_nan];
  std::uint64_t c[mb_count] = {};
  U amax = 0;
  for (std::size_t i = 0; i < n; ++i) {
    U x;
    std::memcpy(&x, p + i * sizeof(U), sizeof(U));  // any alignment
    const U a = static_cast<U>(x & mask);
    for (int k : mb_always) c[k] += a >= b[k] ? 1u : 0u;
    if (a != 0 && a < small_hi) {
      for (int k : mb_small) c[k] += a < b[k] ? 1u : 0u;
    }
    if (a >= large_lo) {
      for (int k : mb_large) c[k] += a >= b[k] ? 1u : 0u;
      if (a < nan_lo && a > amax) amax = a;
    } else if (a > amax) {
      amax = a;
    }
  }
  margin_add_block(out, c);
  if (amax > out.amax) out.amax = amax;
}

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// ---------------------------------------------------------------------------------------------------------
// SIMD lane traits: 8/16/32/64-bit lanes for AVX-512 (unsigned compares into mask registers, masked
// counting) and AVX2 (signed compares against b - 1 into vector masks: valid because |x| patterns and the
// boundaries never have their top bit set). Lane counters are flushed to 64 bits before they can wrap.
// ---------------------------------------------------------------------------------------------------------
#define NANSCOPE_IMPL_M512 NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) static inline
#define NANSCOPE_IMPL_M256 NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) static inline

template <class Mask>
struct m512_common {
  using vec = __m512i;
  using mask = Mask;
  NANSCOPE_IMPL_M512 vec zero() { return _mm512_setzero_si512(); }
  NANSCOPE_IMPL_M512 vec load(const void* p) { return _mm512_loadu_si512(p); }
  NANSCOPE_IMPL_M512 void store(void* p, vec v) { _mm512_storeu_si512(p, v); }
  NANSCOPE_IMPL_M512 vec band(vec a, vec b) { return _mm512_and_si512(a, b); }
  NANSCOPE_IMPL_M512 mask andnot(mask a, mask b) { return static_cast<mask>(~a & b); }
  NANSCOPE_IMPL_M512 bool any(mask m) { return m != 0; }
};
struct m512_u8 : m512_common<__mmask64> {
  using U = std::uint8_t;
  static constexpr std::size_t lanes = 64, flush_vectors = 255;
  NANSCOPE_IMPL_M512 vec set1(std::uint64_t v) { return _mm512_set1_epi8(static_cast<char>(v)); }
  NANSCOPE_IMPL_M512 vec bound(std::uint64_t b) { return set1(b); }
  NANSCOPE_IMPL_M512 mask ge(vec a, vec b) { return _mm512_cmpge_epu8_mask(a, b); }
  NANSCOPE_IMPL_M512 vec count(vec acc, mask m) { return _mm512_mask_sub_epi8(acc, m, acc, _mm512_set1_epi8(-1)); }
  NANSCOPE_IMPL_M512 vec vmax(vec mx, vec a) { return _mm512_max_epu8(mx, a); }
  NANSCOPE_IMPL_M512 vec vmax_not(vec mx, vec a, mask nan) { return _mm512_mask_max_epu8(mx, static_cast<mask>(~nan), mx, a); }
  NANSCOPE_IMPL_M512 std::uint64_t sum(vec acc) {
    return static_cast<std::uint64_t>(_mm512_reduce_add_epi64(_mm512_sad_epu8(acc, _mm512_setzero_si512())));
  }
};
struct m512_u16 : m512_common<__mmask32> {
  using U = std::uint16_t;
  static constexpr std::size_t lanes = 32, flush_vectors = 4096;
  NANSCOPE_IMPL_M512 vec set1(std::uint64_t v) { return _mm512_set1_epi16(static_cast<short>(v)); }
  NANSCOPE_IMPL_M512 vec bound(std::uint64_t b) { return set1(b); }
  NANSCOPE_IMPL_M512 mask ge(vec a, vec b) { return _mm512_cmpge_epu16_mask(a, b); }
  NANSCOPE_IMPL_M512 vec count(vec acc, mask m) { return _mm512_mask_sub_epi16(acc, m, acc, _mm512_set1_epi16(-1)); }
  NANSCOPE_IMPL_M512 vec vmax(vec mx, vec a) { return _mm512_max_epu16(mx, a); }
  NANSCOPE_IMPL_M512 vec vmax_not(vec mx, vec a, mask nan) { return _mm512_mask_max_epu16(mx, static_cast<mask>(~nan), mx, a); }
  NANSCOPE_IMPL_M512 std::uint64_t sum(vec acc) {  // lanes <= 4096: the signed pair sums cannot wrap
    return static_cast<std::uint64_t>(_mm512_reduce_add_epi32(_mm512_madd_epi16(acc, _mm512_set1_epi16(1))));
  }
};
struct m512_u32 : m512_common<__mmask16> {
  using U = std::uint32_t;
  static constexpr std::size_t lanes = 16, flush_vectors = 4096;
  NANSCOPE_IMPL_M512 vec set1(std::uint64_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }
  NANSCOPE_IMPL_M512 vec bound(std::uint64_t b) { return set1(b); }
  NANSCOPE_IMPL_M512 mask ge(vec a, vec b) { return _mm512_cmpge_epu32_mask(a, b); }
  NANSCOPE_IMPL_M512 vec count(vec acc, mask m) { return _mm512_mask_sub_epi32(acc, m, acc, _mm512_set1_epi32(-1)); }
  NANSCOPE_IMPL_M512 vec vmax(vec mx, vec a) { return _mm512_max_epu32(mx, a); }
  NANSCOPE_IMPL_M512 vec vmax_not(vec mx, vec a, mask nan) { return _mm512_mask_max_epu32(mx, static_cast<mask>(~nan), mx, a); }
  NANSCOPE_IMPL_M512 std::uint64_t sum(vec acc) { return static_cast<std::uint64_t>(_mm512_reduce_add_epi32(acc)); }
};
struct m512_u64 : m512_common<__mmask8> {
  using U = std::uint64_t;
  static constexpr std::size_t lanes = 8, flush_vectors = 4096;
  NANSCOPE_IMPL_M512 vec set1(std::uint64_t v) { return _mm512_set1_epi64(static_cast<long long>(v)); }
  NANSCOPE_IMPL_M512 vec bound(std::uint64_t b) { return set1(b); }
  NANSCOPE_IMPL_M512 mask ge(vec a, vec b) { return _mm512_cmpge_epu64_mask(a, b); }
  NANSCOPE_IMPL_M512 vec count(vec acc, mask m) { return _mm512_mask_sub_epi64(acc, m, acc, _mm512_set1_epi64(-1)); }
  NANSCOPE_IMPL_M512 vec vmax(vec mx, vec a) { return _mm512_max_epu64(mx, a); }
  NANSCOPE_IMPL_M512 vec vmax_not(vec mx, vec a, mask nan) { return _mm512_mask_max_epu64(mx, static_cast<mask>(~nan), mx, a); }
  NANSCOPE_IMPL_M512 std::uint64_t sum(vec acc) { return static_cast<std::uint64_t>(_mm512_reduce_add_epi64(acc)); }
};

struct m256_common {
  using vec = __m256i;
  using mask = __m256i;
  NANSCOPE_IMPL_M256 vec zero() { return _mm256_setzero_si256(); }
  NANSCOPE_IMPL_M256 vec load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  NANSCOPE_IMPL_M256 void store(void* p, vec v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  NANSCOPE_IMPL_M256 vec band(vec a, vec b) { return _mm256_and_si256(a, b); }
  NANSCOPE_IMPL_M256 mask andnot(mask a, mask b) { return _mm256_andnot_si256(a, b); }
  NANSCOPE_IMPL_M256 bool any(mask m) { return _mm256_testz_si256(m, m) == 0; }
  NANSCOPE_IMPL_M256 std::uint64_t sum_i32(vec v) {
    alignas(32) std::int32_t x[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(x), v);
    std::uint64_t s = 0;
    for (std::int32_t e : x) s += static_cast<std::uint64_t>(e);
    return s;
  }
  NANSCOPE_IMPL_M256 std::uint64_t sum_i64(vec v) {
    alignas(32) std::int64_t x[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(x), v);
    return static_cast<std::uint64_t>(x[0] + x[1] + x[2] + x[3]);
  }
};
struct m256_u8 : m256_common {
  using U = std::uint8_t;
  static constexpr std::size_t lanes = 32, flush_vectors = 255;
  NANSCOPE_IMPL_M256 vec set1(std::uint64_t v) { return _mm256_set1_epi8(static_cast<char>(v)); }
  NANSCOPE_IMPL_M256 vec bound(std::uint64_t b) { return set1(b - 1); }
  NANSCOPE_IMPL_M256 mask ge(vec a, vec bm1) { return _mm256_cmpgt_epi8(a, bm1); }
  NANSCOPE_IMPL_M256 vec count(vec acc, mask m) { return _mm256_sub_epi8(acc, m); }
  NANSCOPE_IMPL_M256 vec vmax(vec mx, vec a) { return _mm256_max_epu8(mx, a); }
  NANSCOPE_IMPL_M256 vec vmax_not(vec mx, vec a, mask nan) { return _mm256_max_epu8(mx, _mm256_andnot_si256(nan, a)); }
  NANSCOPE_IMPL_M256 std::uint64_t sum(vec acc) { return sum_i64(_mm256_sad_epu8(acc, _mm256_setzero_si256())); }
};
struct m256_u16 : m256_common {
  using U = std::uint16_t;
  static constexpr std::size_t lanes = 16, flush_vectors = 4096;
  NANSCOPE_IMPL_M256 vec set1(std::uint64_t v) { return _mm256_set1_epi16(static_cast<short>(v)); }
  NANSCOPE_IMPL_M256 vec bound(std::uint64_t b) { return set1(b - 1); }
  NANSCOPE_IMPL_M256 mask ge(vec a, vec bm1) { return _mm256_cmpgt_epi16(a, bm1); }
  NANSCOPE_IMPL_M256 vec count(vec acc, mask m) { return _mm256_sub_epi16(acc, m); }
  NANSCOPE_IMPL_M256 vec vmax(vec mx, vec a) { return _mm256_max_epu16(mx, a); }
  NANSCOPE_IMPL_M256 vec vmax_not(vec mx, vec a, mask nan) { return _mm256_max_epu16(mx, _mm256_andnot_si256(nan, a)); }
  NANSCOPE_IMPL_M256 std::uint64_t sum(vec acc) { return sum_i32(_mm256_madd_epi16(acc, _mm256_set1_epi16(1))); }
};
struct m256_u32 : m256_common {
  using U = std::uint32_t;
  static constexpr std::size_t lanes = 8, flush_vectors = 4096;
  NANSCOPE_IMPL_M256 vec set1(std::uint64_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
  NANSCOPE_IMPL_M256 vec bound(std::uint64_t b) { return set1(b - 1); }
  NANSCOPE_IMPL_M256 mask ge(vec a, vec bm1) { return _mm256_cmpgt_epi32(a, bm1); }
  NANSCOPE_IMPL_M256 vec count(vec acc, mask m) { return _mm256_sub_epi32(acc, m); }
  NANSCOPE_IMPL_M256 vec vmax(vec mx, vec a) { return _mm256_max_epu32(mx, a); }
  NANSCOPE_IMPL_M256 vec vmax_not(vec mx, vec a, mask nan) { return _mm256_max_epu32(mx, _mm256_andnot_si256(nan, a)); }
  NANSCOPE_IMPL_M256 std::uint64_t sum(vec acc) { return sum_i32(acc); }
};
struct m256_u64 : m256_common {
  using U = std::uint64_t;
  static constexpr std::size_t lanes = 4, flush_vectors = 4096;
  NANSCOPE_IMPL_M256 vec set1(std::uint64_t v) { return _mm256_set1_epi64x(static_cast<long long>(v)); }
  NANSCOPE_IMPL_M256 vec bound(std::uint64_t b) { return set1(b - 1); }
  NANSCOPE_IMPL_M256 mask ge(vec a, vec bm1) { return _mm256_cmpgt_epi64(a, bm1); }
  NANSCOPE_IMPL_M256 vec count(vec acc, mask m) { return _mm256_sub_epi64(acc, m); }
  NANSCOPE_IMPL_M256 vec vmax(vec mx, vec a) {  // both < 2^63: the signed compare is exact
    return _mm256_blendv_epi8(mx, a, _mm256_cmpgt_epi64(a, mx));
  }
  NANSCOPE_IMPL_M256 vec vmax_not(vec mx, vec a, mask nan) { return vmax(mx, _mm256_andnot_si256(nan, a)); }
  NANSCOPE_IMPL_M256 std::uint64_t sum(vec acc) { return sum_i64(acc); }
};

// The SIMD kernel, one body for both instruction sets (only the target attribute differs). Lanes past the
// end of the data are zero-padded: zero counts in no slot and leaves the maximum alone. Blocks of at most
// flush_vectors groups keep the lane counters from wrapping.
#define NANSCOPE_IMPL_MARGINS_SIMD_KERNEL(NAME, TARGET)                                                          \
  template <class L>                                                                                             \
  TARGET inline void NAME(const unsigned char* p, std::size_t n, const margin_bounds& mb, margin_counts& out) {   \
    using U = typename L::U;                                                                                     \
    using V = typename L::vec;                                                                                   \
    using M = typename L::mask;                                                                                  \
    constexpr std::size_t W = L::lanes;                                                                          \
    V bnd[mb_count];                                                                                             \
    NANSCOPE_IMPL_UNROLL(15) for (int k = 0; k < mb_count; ++k) bnd[k] = L::bound(mb.b[k]);                      \
    const V small_hi = L::bound(margin_small_hi(mb));                                                            \
    const V large_lo = L::bound(margin_large_lo(mb));                                                            \
    const V absm = L::set1(mb.abs_mask);                                                                         \
    U tail[W];                                                                                                   \
    std::size_t i = 0;                                                                                           \
    while (i < n) {                                                                                              \
      const std::size_t end = (n - i) / W > L::flush_vectors ? i + L::flush_vectors * W : n;                     \
      V acc[mb_count];                                                                                           \
      NANSCOPE_IMPL_UNROLL(15) for (int k = 0; k < mb_count; ++k) acc[k] = L::zero();                            \
      V vmax = L::zero();                                                                                        \
      for (; i < end; i += W) {                                                                                  \
        const void* src = p + i * sizeof(U); /* any alignment: unaligned loads */                                \
        if (end - i < W) {                                                                                       \
          for (std::size_t j = 0; j < W; ++j) tail[j] = U{0};                                                    \
          std::memcpy(tail, src, (end - i) * sizeof(U));                                                         \
          src = tail;                                                                                            \
        }                                                                                                        \
        if ((i * sizeof(U)) % 64 == 0)                                                                           \
          _mm_prefetch(reinterpret_cast<const char*>(p + i * sizeof(U)) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0); \
        const V a = L::band(L::load(src), absm);                                                                 \
        const M nz = L::ge(a, bnd[mb_nonzero]);                                                                  \
        NANSCOPE_IMPL_UNROLL(3) for (int k : mb_always) acc[k] = L::count(acc[k], L::ge(a, bnd[k]));             \
        if (L::any(L::andnot(L::ge(a, small_hi), nz))) {                                                         \
          NANSCOPE_IMPL_UNROLL(6) for (int k : mb_small) acc[k] = L::count(acc[k], L::andnot(L::ge(a, bnd[k]), nz)); \
        }                                                                                                        \
        if (L::any(L::ge(a, large_lo))) {                                                                        \
          NANSCOPE_IMPL_UNROLL(6) for (int k : mb_large) acc[k] = L::count(acc[k], L::ge(a, bnd[k]));            \
          vmax = L::vmax_not(vmax, a, L::ge(a, bnd[mb_nan]));                                                    \
        } else {                                                                                                 \
          vmax = L::vmax(vmax, a);                                                                               \
        }                                                                                                        \
      }                                                                                                          \
      if (end < i) i = end;                                                                                      \
      std::uint64_t block[mb_count];                                                                             \
      NANSCOPE_IMPL_UNROLL(15) for (int k = 0; k < mb_count; ++k) block[k] = L::sum(acc[k]);                     \
      margin_add_block(out, block);                                                                              \
      U lane_max[W];                                                                                             \
      L::store(lane_max, vmax);                                                                                  \
      for (std::size_t j = 0; j < W; ++j)                                                                        \
        if (lane_max[j] > out.amax) out.amax = lane_max[j];                                                      \
    }                                                                                                            \
  }

NANSCOPE_IMPL_MARGINS_SIMD_KERNEL(margins_avx512, NANSCOPE_IMPL_TARGET_AVX512)
NANSCOPE_IMPL_MARGINS_SIMD_KERNEL(margins_avx2, NANSCOPE_IMPL_TARGET_AVX2)

#undef NANSCOPE_IMPL_MARGINS_SIMD_KERNEL
#undef NANSCOPE_IMPL_M512
#undef NANSCOPE_IMPL_M256
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // NANSCOPE_HAS_X86_SIMD()

/// Runs the kernel for `use` on n contiguous elements of floating dtype t.
template <class U>
inline void margins_run_typed(const void* vp, std::size_t n, isa use, const margin_bounds& mb, margin_counts& out) {
  const auto* p = static_cast<const unsigned char*>(vp);  // any alignment
#if NANSCOPE_HAS_X86_SIMD()
  if (use == isa::avx512) {
    using L = std::conditional_t<sizeof(U) == 1, m512_u8,
                                 std::conditional_t<sizeof(U) == 2, m512_u16,
                                                    std::conditional_t<sizeof(U) == 4, m512_u32, m512_u64>>>;
    margins_avx512<L>(p, n, mb, out);
    return;
  }
  if (use == isa::avx2) {
    using L = std::conditional_t<sizeof(U) == 1, m256_u8,
                                 std::conditional_t<sizeof(U) == 2, m256_u16,
                                                    std::conditional_t<sizeof(U) == 4, m256_u32, m256_u64>>>;
    margins_avx2<L>(p, n, mb, out);
    return;
  }
#else
  (void)use;
#endif
  margins_scalar<U>(p, n, mb, out);
}

inline void margins_run(const void* p, dtype t, std::size_t n, isa use, const margin_bounds& mb, margin_counts& out) {
  switch (size_of(t)) {
    case 1: margins_run_typed<std::uint8_t>(p, n, use, mb, out); break;
    case 2: margins_run_typed<std::uint16_t>(p, n, use, mb, out); break;
    case 4: margins_run_typed<std::uint32_t>(p, n, use, mb, out); break;
    default: margins_run_typed<std::uint64_t>(p, n, use, mb, out); break;
  }
}

}  // namespace detail

/// Low-precision margins of one tensor view on the host, in one pass: per target format the exact counts of
/// values that would overflow, become subnormal, or flush to zero when cast with round-to-nearest-even, and
/// abs_max with the headroom in bits. Sources: f64, f32, f16, bf16, e4m3fn, e5m2 (any layout; strided views
/// are gathered, permuted dense ones read in memory order). Throws nanscope::error for an invalid view, an
/// integer or bool dtype, or device memory. Single-threaded.
inline margins_result margins(const tensor_view& v, const margins_options& opt = {}) {
  validate(v);
  if (v.space == memory_space::cuda_device)
    detail::fail(v.name, "margins: data is in CUDA device memory; copy it to the host first");
  if (!is_float(v.type))
    detail::fail(v.name, std::string("margins: dtype ") + name(v.type) +
                             " is not a floating type (margins take f64, f32, f16, bf16, e4m3fn or e5m2)");
  margins_result r;
  r.type = v.type;
  r.rank = v.rank;
  for (int i = 0; i < v.rank; ++i) r.shape[i] = v.shape[i];
  const std::uint64_t n = v.numel();
  r.count = n;
  detail::margin_counts c;
  if (n != 0) {
    const detail::margin_bounds& mb = detail::margin_bounds_for(v.type);
    const isa use = resolve_isa(opt.instruction_set);
    tensor_view w = v;
    bool dense = v.is_contiguous();
    if (!dense) dense = detail::dense_permutation(v, w);  // counts and abs_max do not depend on the order
    if (dense) {
      const std::size_t es = size_of(v.type);
      constexpr std::uint64_t step = std::uint64_t{1} << 30;
      for (std::uint64_t b = 0; b < n; b += step) {
        const std::uint64_t m = (n - b) < step ? (n - b) : step;
        detail::margins_run(static_cast<const unsigned char*>(w.data) + static_cast<std::size_t>(b) * es, v.type,
                            static_cast<std::size_t>(m), use, mb, c);
      }
    } else {
      alignas(64) unsigned char buf[detail::chunk_elems * 8];
      for (std::uint64_t b = 0; b < n; b += detail::chunk_elems) {
        const std::size_t m = static_cast<std::size_t>((n - b) < detail::chunk_elems ? (n - b) : detail::chunk_elems);
        detail::gather(v, b, m, buf);
        detail::margins_run(buf, v.type, m, use, mb, c);
      }
    }
  }
  using detail::mb_inf;
  using detail::mb_nan;
  using detail::mb_nonzero;
  r.zero = n - c.ge[mb_nonzero];
  r.nan = c.ge[mb_nan];
  r.inf = c.ge[mb_inf] - c.ge[mb_nan];
  r.abs_max = n - r.nan != 0 ? detail::bits_to_double(detail::margin_value_bits(v.type, c.amax)) : detail::margin_qnan();
  for (std::size_t i = 0; i < 4; ++i) {
    format_margin& f = r.formats[i];
    f.target = margin_targets[i];
    f.max_finite = info(f.target).max_finite;
    f.headroom_bits = headroom_bits(r.abs_max, f.target);
    const int z = detail::mb_target0 + 3 * static_cast<int>(i);
    f.underflow_to_zero = c.ge[mb_nonzero] - c.ge[z];
    f.subnormal = c.ge[z] - c.ge[z + 1];
    f.overflow = c.ge[z + 2] - c.ge[mb_inf];
  }
  return r;
}

/// Margins of any supported tensor (see traits.hpp).
template <class T, class = std::enable_if_t<!std::is_same<std::decay_t<T>, tensor_view>::value>>
margins_result margins(const T& tensor, const margins_options& opt = {}) {
  return margins(to_view(tensor), opt);
}
/// Margins of any supported tensor, naming it in error messages.
template <class T>
margins_result margins(const T& tensor, const char* name, const margins_options& opt = {}) {
  return margins(to_view(tensor, name), opt);
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_MARGINS_HPP
