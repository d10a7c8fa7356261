// nanscope tests — support/reference.hpp: an independent, deliberately naive scalar reference for the
// health of a tensor.
//
// Nothing here calls nanscope's implementation (no nanscope::detail, no nanscope::decode, no half::to_float):
// only the public *types* (dtype, tensor_view, health_result, check_mode) are used to describe inputs.
//   - Every small float format has its own decoder written with std::ldexp on the integer fields.
//   - Classification (NaN / inf / zero / subnormal / sign) is done on the *source* bit pattern of each
//     format, never with std::isnan / std::isinf / std::fpclassify, so it keeps its meaning under
//     -ffast-math (where the compiler may fold isnan() to false).
//   - Extrema are found by integer keys on the double bit patterns (again -ffast-math proof).
//   - mean / std / m2 use a long-double two-pass algorithm over the finite values (m2 about the mean taken as
//     an offset from the first finite value, so that the rounding of a large mean does not enter it).
// The reference is slow on purpose (one element at a time, no cleverness) so that it is easy to trust.
#ifndef NANSCOPE_TESTS_SUPPORT_REFERENCE_HPP
#define NANSCOPE_TESTS_SUPPORT_REFERENCE_HPP

#include <nanscope/dtype.hpp>
#include <nanscope/health.hpp>
#include <nanscope/view.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace nstest {

// ---------------------------------------------------------------------------------------------------------
// Build configuration knobs of the test suite.
// NANSCOPE_TEST_QUICK (defined by CI for sanitizer builds) scales the large data sets down so that the whole
// suite stays within a few minutes under ASan/UBSan/TSan. The properties tested are the same; only the
// number of elements shrinks (every size that matters for SIMD tails, chunk (8192) and segment (131072)
// boundaries is kept, only the "millions of elements" cases get smaller).
// ---------------------------------------------------------------------------------------------------------
#if defined(NANSCOPE_TEST_QUICK)
inline constexpr bool quick = true;
#else
inline constexpr bool quick = false;
#endif
/// `full` normally, `reduced` under NANSCOPE_TEST_QUICK.
inline std::size_t scaled(std::size_t full, std::size_t reduced) { return quick ? reduced : full; }

// ---------------------------------------------------------------------------------------------------------
// Bits <-> values, by memcpy only.
// ---------------------------------------------------------------------------------------------------------
inline std::uint64_t bits64(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
inline std::uint32_t bits32(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
inline double f64_from_bits(std::uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}
inline float f32_from_bits(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

inline constexpr std::uint64_t k_abs64 = 0x7FFFFFFFFFFFFFFFull;
inline constexpr std::uint64_t k_inf64 = 0x7FF0000000000000ull;

/// Classification of a double by its bits (valid under -ffast-math).
inline bool is_nan(double x) { return (bits64(x) & k_abs64) > k_inf64; }
inline bool is_inf(double x) { return (bits64(x) & k_abs64) == k_inf64; }
inline bool is_finite(double x) { return (bits64(x) & k_abs64) < k_inf64; }
inline bool is_zero(double x) { return (bits64(x) & k_abs64) == 0; }
inline bool sign_bit(double x) { return (bits64(x) >> 63) != 0; }
inline double abs_bits(double x) { return f64_from_bits(bits64(x) & k_abs64); }
/// x with its sign bit set to `neg` (no arithmetic, so -0.0 survives -fno-signed-zeros).
inline double with_sign(double x, bool neg) {
  return f64_from_bits((bits64(x) & k_abs64) | (neg ? 0x8000000000000000ull : 0ull));
}

inline double pos_inf() { return f64_from_bits(k_inf64); }
inline double neg_inf() { return f64_from_bits(0xFFF0000000000000ull); }
inline double qnan() { return f64_from_bits(0x7FF8000000000000ull); }
inline float pos_inf_f() { return f32_from_bits(0x7F800000u); }
inline float neg_inf_f() { return f32_from_bits(0xFF800000u); }
inline float qnan_f() { return f32_from_bits(0x7FC00000u); }

/// Total-order key of a non-NaN double: monotonic in the value, -0 and +0 share key 0.
inline std::int64_t order_key(double x) {
  const std::uint64_t b = bits64(x);
  const auto mag = static_cast<std::int64_t>(b & k_abs64);
  return (b >> 63) != 0 ? -mag : mag;
}

// ---------------------------------------------------------------------------------------------------------
// Independent decoders: integer fields -> value with std::ldexp. Exact (every value of these formats is a
// double). NaN is returned as a quiet NaN carrying the source sign; NaN-ness is what matters.
// ---------------------------------------------------------------------------------------------------------
inline double nan_with_sign(bool neg) { return with_sign(qnan(), neg); }
inline double inf_with_sign(bool neg) { return neg ? neg_inf() : pos_inf(); }

/// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits.
inline double ref_decode_f16(std::uint16_t b) {
  const bool neg = (b >> 15) != 0;
  const int e = (b >> 10) & 0x1F;
  const int m = b & 0x3FF;
  if (e == 0x1F) return m == 0 ? inf_with_sign(neg) : nan_with_sign(neg);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -24)              // m * 2^(1-15-10)
                            : std::ldexp(static_cast<double>(1024 + m), e - 25);  // (1.m) * 2^(e-15)
  return with_sign(mag, neg);
}
/// bfloat16: 1 sign, 8 exponent (bias 127), 7 fraction bits.
inline double ref_decode_bf16(std::uint16_t b) {
  const bool neg = (b >> 15) != 0;
  const int e = (b >> 7) & 0xFF;
  const int m = b & 0x7F;
  if (e == 0xFF) return m == 0 ? inf_with_sign(neg) : nan_with_sign(neg);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -133)              // m * 2^(1-127-7)
                            : std::ldexp(static_cast<double>(128 + m), e - 134);  // (1.m) * 2^(e-127)
  return with_sign(mag, neg);
}
/// OCP fp8 E4M3FN: 1 sign, 4 exponent (bias 7), 3 fraction bits, no inf, NaN only S.1111.111.
inline double ref_decode_e4m3fn(std::uint8_t b) {
  const bool neg = (b >> 7) != 0;
  const int e = (b >> 3) & 0xF;
  const int m = b & 0x7;
  if (e == 0xF && m == 0x7) return nan_with_sign(neg);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -9)             // m * 2^(1-7-3)
                            : std::ldexp(static_cast<double>(8 + m), e - 10);  // (1.m) * 2^(e-7)
  return with_sign(mag, neg);
}
/// OCP fp8 E5M2: 1 sign, 5 exponent (bias 15), 2 fraction bits, IEEE-like inf/NaN.
inline double ref_decode_e5m2(std::uint8_t b) {
  const bool neg = (b >> 7) != 0;
  const int e = (b >> 2) & 0x1F;
  const int m = b & 0x3;
  if (e == 0x1F) return m == 0 ? inf_with_sign(neg) : nan_with_sign(neg);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -16)            // m * 2^(1-15-2)
                            : std::ldexp(static_cast<double>(4 + m), e - 17);  // (1.m) * 2^(e-15)
  return with_sign(mag, neg);
}

/// Test-data helper (not a reference for the library's encoder, which dtype_test checks exhaustively):
/// nearest-even bits of a value known to be a *normal* number of a format with `man_bits` fraction bits and
/// exponent bias `bias` (f16: 10, 15; bf16: 7, 127).
inline std::uint16_t encode_normal16(double v, int man_bits, int bias) {
  const bool neg = sign_bit(v);
  int e = 0;
  const double f = std::frexp(abs_bits(v), &e);  // |v| = f * 2^e, f in [0.5, 1)
  double mant = std::nearbyint(std::ldexp(f, man_bits + 1));  // in [2^mb, 2^(mb+1)]
  if (mant >= std::ldexp(1.0, man_bits + 1)) {
    mant /= 2;
    ++e;
  }
  const auto field = static_cast<std::uint32_t>(e - 1 + bias);
  const auto frac = static_cast<std::uint32_t>(mant) - (1u << man_bits);
  return static_cast<std::uint16_t>((neg ? 0x8000u : 0u) | (field << man_bits) | frac);
}
inline std::uint16_t encode_normal_f16(double v) { return encode_normal16(v, 10, 15); }
inline std::uint16_t encode_normal_bf16(double v) { return encode_normal16(v, 7, 127); }

// ---------------------------------------------------------------------------------------------------------
// Source-format classification by bit fields.
// ---------------------------------------------------------------------------------------------------------
enum class cat : std::uint8_t { negative, zero, positive, neg_inf, pos_inf, nan };

struct element {
  double value = 0.0;  ///< exact decoded value (NaN for NaN)
  cat c = cat::zero;
  bool subnormal = false;  ///< non-zero with an all-zero exponent field in its own format
};

struct float_layout {
  int exp_bits;
  int man_bits;
  bool fn;  ///< e4m3fn style: no inf, NaN only when exponent and mantissa are all ones
};
inline bool layout_of(nanscope::dtype t, float_layout& out) {
  switch (t) {
    case nanscope::dtype::f64: out = {11, 52, false}; return true;
    case nanscope::dtype::f32: out = {8, 23, false}; return true;
    case nanscope::dtype::f16: out = {5, 10, false}; return true;
    case nanscope::dtype::bf16: out = {8, 7, false}; return true;
    case nanscope::dtype::f8_e4m3fn: out = {4, 3, true}; return true;
    case nanscope::dtype::f8_e5m2: out = {5, 2, false}; return true;
    default: return false;
  }
}
inline bool ref_is_float(nanscope::dtype t) {
  float_layout l{};
  return layout_of(t, l);
}
inline std::size_t ref_size_of(nanscope::dtype t) {
  switch (t) {
    case nanscope::dtype::f64:
    case nanscope::dtype::i64:
    case nanscope::dtype::u64: return 8;
    case nanscope::dtype::f32:
    case nanscope::dtype::i32:
    case nanscope::dtype::u32: return 4;
    case nanscope::dtype::f16:
    case nanscope::dtype::bf16:
    case nanscope::dtype::i16:
    case nanscope::dtype::u16: return 2;
    default: return 1;
  }
}

/// IEEE binary32 decoded from its fields with std::ldexp. Not `static_cast<double>(float)`: a program linked
/// with -ffast-math runs with the SSE "denormals are zero" flag set, under which the hardware conversion turns
/// f32 subnormals into 0. Every f32 value is a *normal* double, so this arithmetic is exact under any flags.
inline double ref_decode_f32(std::uint32_t b) {
  const bool neg = (b >> 31) != 0;
  const int e = static_cast<int>((b >> 23) & 0xFF);
  const std::uint32_t m = b & 0x7FFFFFu;
  if (e == 0xFF) return m == 0 ? inf_with_sign(neg) : nan_with_sign(neg);
  const double mag = e == 0 ? std::ldexp(static_cast<double>(m), -149)
                            : std::ldexp(static_cast<double>(0x800000u + m), e - 150);
  return with_sign(mag, neg);
}

/// The binary32 bit pattern of a double whose value is exactly representable as a float, by integer
/// manipulation only (no hardware conversion, which flushes subnormals under -ffast-math's FTZ/DAZ flags).
/// NaN gives the canonical quiet NaN with the same sign.
inline std::uint32_t exact_f32_bits(double x) {
  const std::uint64_t b = bits64(x);
  const std::uint32_t sign = static_cast<std::uint32_t>(b >> 63) << 31;
  const std::uint64_t a = b & k_abs64;
  if (a > k_inf64) return sign | 0x7FC00000u;
  if (a == k_inf64) return sign | 0x7F800000u;
  if (a == 0) return sign;
  const int e = static_cast<int>(a >> 52) - 1023;  // every float is a normal double
  const std::uint64_t full = (std::uint64_t{1} << 52) | (a & 0xFFFFFFFFFFFFFull);
  if (e >= -126) return sign | (static_cast<std::uint32_t>(e + 127) << 23) | static_cast<std::uint32_t>((full >> 29) & 0x7FFFFFu);
  return sign | static_cast<std::uint32_t>(full >> (-e - 97));
}

/// Decodes raw bits of a floating dtype (in the low bits of `raw`) with the reference decoders.
inline double ref_decode(nanscope::dtype t, std::uint64_t raw) {
  switch (t) {
    case nanscope::dtype::f64: return f64_from_bits(raw);
    case nanscope::dtype::f32: return ref_decode_f32(static_cast<std::uint32_t>(raw));
    case nanscope::dtype::f16: return ref_decode_f16(static_cast<std::uint16_t>(raw));
    case nanscope::dtype::bf16: return ref_decode_bf16(static_cast<std::uint16_t>(raw));
    case nanscope::dtype::f8_e4m3fn: return ref_decode_e4m3fn(static_cast<std::uint8_t>(raw));
    case nanscope::dtype::f8_e5m2: return ref_decode_e5m2(static_cast<std::uint8_t>(raw));
    default: return qnan();
  }
}

/// Classifies raw bits of a floating dtype by its own bit fields, and decodes them.
inline element ref_element(nanscope::dtype t, std::uint64_t raw) {
  float_layout l{};
  element el;
  if (!layout_of(t, l)) return el;
  const int total = 1 + l.exp_bits + l.man_bits;
  const std::uint64_t man_mask = (std::uint64_t{1} << l.man_bits) - 1;
  const std::uint64_t exp_mask = (std::uint64_t{1} << l.exp_bits) - 1;
  const bool neg = ((raw >> (total - 1)) & 1u) != 0;
  const std::uint64_t e = (raw >> l.man_bits) & exp_mask;
  const std::uint64_t m = raw & man_mask;
  el.value = ref_decode(t, raw);
  if (l.fn) {
    if (e == exp_mask && m == man_mask) {
      el.c = cat::nan;
      return el;
    }
  } else if (e == exp_mask) {
    el.c = m == 0 ? (neg ? cat::neg_inf : cat::pos_inf) : cat::nan;
    return el;
  }
  if (e == 0 && m == 0) {
    el.c = cat::zero;
    return el;
  }
  el.subnormal = e == 0;
  el.c = neg ? cat::negative : cat::positive;
  return el;
}

/// Reads the raw bits of element `i` of a contiguous buffer of dtype t.
inline std::uint64_t load_raw(const void* p, nanscope::dtype t, std::size_t i) {
  const std::size_t es = ref_size_of(t);
  std::uint64_t r = 0;
  std::memcpy(&r, static_cast<const unsigned char*>(p) + i * es, es);  // little-endian host
  return r;
}

/// The raw bits of every element of a view, in row-major logical order, by a plain odometer walk over the
/// view's public shape/strides (an independent re-implementation of strided addressing).
inline std::vector<std::uint64_t> logical_raw(const nanscope::tensor_view& v) {
  std::vector<std::uint64_t> out;
  std::uint64_t n = 1;
  for (int d = 0; d < v.rank; ++d) n *= static_cast<std::uint64_t>(v.shape[d]);
  if (n == 0) return out;
  out.reserve(static_cast<std::size_t>(n));
  std::int64_t idx[nanscope::max_rank] = {};
  for (std::uint64_t k = 0; k < n; ++k) {
    std::int64_t off = 0;
    for (int d = 0; d < v.rank; ++d) off += idx[d] * v.strides[d];
    out.push_back(load_raw(v.data, v.type, static_cast<std::size_t>(off)));
    for (int d = v.rank - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// The reference health.
// ---------------------------------------------------------------------------------------------------------
struct ref_health {
  std::uint64_t count = 0;
  std::uint64_t negative = 0, zero = 0, positive = 0, neg_inf = 0, pos_inf = 0, nan = 0, subnormal = 0;
  double min = qnan(), max = qnan(), abs_max = qnan(), abs_min = qnan(), abs_min_nonzero = qnan();
  std::uint64_t n_finite = 0;
  long double mean = 0.0L;      ///< valid when n_finite > 0
  long double m2 = 0.0L;        ///< sum of squared deviations (two-pass)
  long double std_dev = 0.0L;   ///< valid when n_finite > 1 (unbiased)
  long double mean_abs = 0.0L;  ///< mean of |x| over finite values: the natural scale of a sum's error
  std::int64_t first_nonfinite = -1;
  bool any_nonfinite = false;

  bool has_mean() const { return n_finite > 0; }
  bool has_std() const { return n_finite > 1; }
};

/// Reference health of a sequence of raw elements of floating dtype t (logical order).
inline ref_health reference(nanscope::dtype t, const std::vector<std::uint64_t>& raw) {
  ref_health r;
  r.count = raw.size();
  if (!ref_is_float(t)) return r;
  bool have_ext = false, have_nz = false;
  std::int64_t kmin = 0, kmax = 0;
  std::uint64_t amax = 0, amin = 0, amin_nz = 0;
  long double sum = 0.0L, sum_abs = 0.0L;
  std::vector<double> fin;
  fin.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const element el = ref_element(t, raw[i]);
    switch (el.c) {
      case cat::negative: ++r.negative; break;
      case cat::zero: ++r.zero; break;
      case cat::positive: ++r.positive; break;
      case cat::neg_inf: ++r.neg_inf; break;
      case cat::pos_inf: ++r.pos_inf; break;
      case cat::nan: ++r.nan; break;
    }
    if (el.subnormal) ++r.subnormal;
    const bool finite = el.c == cat::negative || el.c == cat::zero || el.c == cat::positive;
    if (!finite && r.first_nonfinite < 0) r.first_nonfinite = static_cast<std::int64_t>(i);
    if (el.c == cat::nan) continue;
    const std::int64_t k = order_key(el.value);
    const std::uint64_t a = bits64(el.value) & k_abs64;
    if (!have_ext) {
      have_ext = true;
      kmin = kmax = k;
      r.min = r.max = el.value;
      amax = amin = a;
    } else {
      if (k < kmin) {
        kmin = k;
        r.min = el.value;
      }
      if (k > kmax) {
        kmax = k;
        r.max = el.value;
      }
      if (a > amax) amax = a;
      if (a < amin) amin = a;
    }
    if (a != 0 && (!have_nz || a < amin_nz)) {
      have_nz = true;
      amin_nz = a;
    }
    if (finite) {
      fin.push_back(el.value);
      sum += static_cast<long double>(el.value);
      sum_abs += static_cast<long double>(abs_bits(el.value));
    }
  }
  r.any_nonfinite = r.first_nonfinite >= 0;
  if (have_ext) {
    r.abs_max = f64_from_bits(amax);
    r.abs_min = f64_from_bits(amin);
  }
  if (have_nz) r.abs_min_nonzero = f64_from_bits(amin_nz);
  r.n_finite = fin.size();
  if (r.n_finite > 0) {
    const auto n = static_cast<long double>(r.n_finite);
    r.mean = sum / n;
    r.mean_abs = sum_abs / n;
    // m2 about the mean as an offset from the first value: sum / n rounds at ulp(mean), which alone would
    // add n * error^2 to m2 where the mean is far larger than the spread
    const long double c = static_cast<long double>(fin.front());
    long double off = 0.0L;
    for (double x : fin) off += static_cast<long double>(x) - c;
    off /= n;
    long double m2 = 0.0L;
    for (double x : fin) {
      const long double d = (static_cast<long double>(x) - c) - off;
      m2 += d * d;
    }
    r.m2 = m2;
    if (r.n_finite > 1) r.std_dev = std::sqrt(m2 / (n - 1.0L));
  }
  return r;
}

/// Reference health of a view (any strides).
inline ref_health reference(const nanscope::tensor_view& v) { return reference(v.type, logical_raw(v)); }

/// Moments only, without storing anything per element (for tens of millions of values): long-double two-pass
/// mean, m2 and unbiased std over the finite elements of a contiguous buffer of floating dtype t.
struct ref_moments {
  std::uint64_t n_finite = 0;
  long double mean = 0.0L, m2 = 0.0L, std_dev = 0.0L;
  long double mean_abs = 0.0L;  ///< mean of |x| (the scale of an ill-conditioned sum)
};
namespace detail_ref {
/// Two-pass moments over n elements; value_of(i, x) stores element i's value in x and returns true when it is
/// finite.
template <class ValueOf>
ref_moments two_pass(std::size_t n, ValueOf value_of) {
  ref_moments r;
  long double sum = 0.0L, sum_abs = 0.0L, sum_off = 0.0L, c = 0.0L;  // c: the first finite value
  double x = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!value_of(i, x)) continue;
    if (r.n_finite == 0) c = static_cast<long double>(x);
    sum += static_cast<long double>(x);
    sum_off += static_cast<long double>(x) - c;
    sum_abs += static_cast<long double>(abs_bits(x));
    ++r.n_finite;
  }
  if (r.n_finite == 0) return r;
  r.mean = sum / static_cast<long double>(r.n_finite);
  r.mean_abs = sum_abs / static_cast<long double>(r.n_finite);
  // m2 about the mean as an offset from c (sum / n alone rounds at ulp(mean): n * error^2 in m2)
  const long double off = sum_off / static_cast<long double>(r.n_finite);
  for (std::size_t i = 0; i < n; ++i) {
    if (!value_of(i, x)) continue;
    const long double d = (static_cast<long double>(x) - c) - off;
    r.m2 += d * d;
  }
  if (r.n_finite > 1) r.std_dev = std::sqrt(r.m2 / static_cast<long double>(r.n_finite - 1));
  return r;
}
}  // namespace detail_ref

inline ref_moments reference_moments(nanscope::dtype t, const void* data, std::size_t n) {
  using nanscope::dtype;
  if (t == dtype::f32) {
    const auto* p = static_cast<const unsigned char*>(data);
    return detail_ref::two_pass(n, [p](std::size_t i, double& x) {
      std::uint32_t b;
      std::memcpy(&b, p + 4 * i, 4);
      if ((b & 0x7F800000u) == 0x7F800000u) return false;
      x = ref_decode_f32(b);
      return true;
    });
  }
  if (t == dtype::f64) {
    const auto* p = static_cast<const unsigned char*>(data);
    return detail_ref::two_pass(n, [p](std::size_t i, double& x) {
      std::uint64_t b;
      std::memcpy(&b, p + 8 * i, 8);
      if ((b & k_inf64) == k_inf64) return false;
      x = f64_from_bits(b);
      return true;
    });
  }
  // small formats: a table of the reference decode of every pattern
  const std::size_t patterns = ref_size_of(t) == 2 ? 65536 : 256;
  std::vector<double> value(patterns);
  std::vector<unsigned char> finite(patterns);
  for (std::size_t b = 0; b < patterns; ++b) {
    const element el = ref_element(t, b);
    value[b] = el.value;
    finite[b] = el.c == cat::negative || el.c == cat::zero || el.c == cat::positive;
  }
  return detail_ref::two_pass(n, [&](std::size_t i, double& x) {
    const std::uint64_t b = load_raw(data, t, i);
    if (!finite[b]) return false;
    x = value[b];
    return true;
  });
}

/// Raw bits of a typed vector (float/double/uint16/uint8 storage), for reference().
template <class T>
std::vector<std::uint64_t> raw_of(const std::vector<T>& xs) {
  std::vector<std::uint64_t> out(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    std::uint64_t r = 0;
    std::memcpy(&r, &xs[i], sizeof(T));
    out[i] = r;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Deterministic random numbers (own generator: identical on every standard library).
// ---------------------------------------------------------------------------------------------------------
struct rng {
  std::uint64_t s;
  explicit rng(std::uint64_t seed) : s(seed) {}
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
  /// Approximately standard normal: mean 0, variance 1, bounded to +-3.46 (Irwin-Hall sum of four uniforms).
  /// Cheap on purpose (the suite draws tens of millions); the tests only need a bell-shaped spread.
  double normal() {
    const std::uint64_t a = next(), b = next();
    const double sum = static_cast<double>(a & 0xFFFFFFFFu) + static_cast<double>(a >> 32) +
                       static_cast<double>(b & 0xFFFFFFFFu) + static_cast<double>(b >> 32);
    return (sum * 0x1.0p-32 - 2.0) * 1.7320508075688772;  // sqrt(12 / 4)
  }
};

/// Deterministic Fisher-Yates shuffle.
template <class T>
void shuffle(std::vector<T>& v, rng& g) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(g.below(i));
    T tmp = v[i - 1];
    v[i - 1] = v[j];
    v[j] = tmp;
  }
}

/// Raw elements (bit patterns) in a typed buffer.
template <class U>
std::vector<U> narrow(const std::vector<std::uint64_t>& raws) {
  std::vector<U> out(raws.size());
  for (std::size_t i = 0; i < raws.size(); ++i) out[i] = static_cast<U>(raws[i]);
  return out;
}

}  // namespace nstest

#endif  // NANSCOPE_TESTS_SUPPORT_REFERENCE_HPP
