// nanscope — dtype.hpp: the element types nanscope understands, their numeric facts (one place per type),
// and exact host-side software decoding/encoding of f16, bf16 and fp8 (round to nearest even).
// Needs only the standard library.
#ifndef NANSCOPE_DTYPE_HPP
#define NANSCOPE_DTYPE_HPP

#include "config.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

NANSCOPE_NAMESPACE_BEGIN

/// Element types. Floating types get the full health pass; integer and bool types get shape/count only.
enum class dtype : std::uint8_t {
  f64,
  f32,
  f16,
  bf16,
  f8_e4m3fn,
  f8_e5m2,
  i8,
  i16,
  i32,
  i64,
  u8,
  u16,
  u32,
  u64,
  boolean,
};
inline constexpr int dtype_count = 15;

/// How NaN is encoded in a format.
enum class nan_encoding : std::uint8_t {
  none,           ///< integer types
  ieee,           ///< exponent all ones, mantissa non-zero (f64, f32, f16, bf16, e5m2)
  all_ones_only,  ///< only S.1111.111 (fp8 e4m3fn, which has no infinities)
};

/// The numeric facts of one element type. For floating types every value is exact.
struct dtype_info {
  dtype id;
  const char* name;        ///< short name used in summaries: "f32", "bf16", "e4m3fn", "i32", "bool"
  const char* torch_name;  ///< PyTorch spelling: "torch.float32"
  unsigned bits;           ///< storage bits
  bool is_float;
  bool is_signed;
  bool has_inf;
  nan_encoding nan;
  int exponent_bits;  ///< 0 for integers
  int mantissa_bits;  ///< explicit fraction bits; 0 for integers
  int exponent_bias;
  int tf_enum;           ///< TensorFlow DataType enum value
  double max_finite;     ///< largest finite value (integers: max value)
  double min_normal;     ///< smallest positive normal value (0 for integers)
  double min_subnormal;  ///< smallest positive subnormal value (0 for integers)
  double overflow_threshold;  ///< |x| >= this rounds to inf/NaN when cast with round-to-nearest-even
                              ///< (e4m3fn: the first value above 464 — 464 itself rounds to 448)
};

namespace detail {
// 2^e as a double, exact for -1074 <= e <= 1023, constexpr.
constexpr double pow2(int e) {
  double r = 1.0;
  if (e >= 0) {
    for (int i = 0; i < e; ++i) r *= 2.0;
  } else {
    for (int i = 0; i < -e; ++i) r *= 0.5;
  }
  return r;
}
/// The spacing of doubles at x (x > 0, normal), constexpr.
constexpr double double_ulp(double x) {
  int e = 0;
  while (pow2(e + 1) <= x) ++e;
  while (pow2(e) > x) --e;
  return pow2(e - 52);
}

constexpr dtype_info float_info(dtype id, const char* name, const char* torch_name, unsigned bits, int eb,
                                int mb, bool has_inf, nan_encoding nan, int tf_enum) {
  const int bias = (1 << (eb - 1)) - 1;
  // Largest exponent field usable for finite values: all-ones is reserved when the format has infinities.
  const int max_exp_field = has_inf ? (1 << eb) - 2 : (1 << eb) - 1;
  // Largest mantissa at the max exponent: all ones, except e4m3fn where all ones there is NaN.
  const double max_frac = (nan == nan_encoding::all_ones_only) ? (pow2(mb) - 2) : (pow2(mb) - 1);
  const double max_finite = (1.0 + max_frac / pow2(mb)) * pow2(max_exp_field - bias);
  const double ulp_at_max = pow2(max_exp_field - bias - mb);
  // Round to nearest even: halfway above max rounds to max when max's mantissa is even (e4m3fn: 1.110b),
  // and up (overflow) when it is odd (IEEE formats: all ones).
  const bool max_mantissa_even = (static_cast<long long>(max_frac) % 2) == 0;
  // f64 has no wider format to describe its rounding boundary in: every finite double is representable.
  const double halfway = bits == 64 ? std::numeric_limits<double>::infinity() : max_finite + ulp_at_max / 2;
  // For an even max mantissa, values == halfway round down; the threshold is the next value above it.
  // We express "overflows when |x| >= threshold" for IEEE formats and "> halfway" for e4m3fn by using
  // the smallest double above halfway.
  double threshold = halfway;
  if (max_mantissa_even && bits != 64) threshold = halfway + double_ulp(halfway);
  return dtype_info{id,
                    name,
                    torch_name,
                    bits,
                    true,
                    true,
                    has_inf,
                    nan,
                    eb,
                    mb,
                    bias,
                    tf_enum,
                    max_finite,
                    pow2(1 - bias),
                    pow2(1 - bias - mb),
                    threshold};
}
constexpr dtype_info int_info(dtype id, const char* name, const char* torch_name, unsigned bits, bool is_signed,
                              int tf_enum) {
  const double maxv = is_signed ? pow2(static_cast<int>(bits) - 1) - 1 : pow2(static_cast<int>(bits)) - 1;
  return dtype_info{id, name, torch_name, bits, false, is_signed, false, nan_encoding::none, 0, 0, 0, tf_enum,
                    maxv, 0.0, 0.0, 0.0};
}

inline constexpr dtype_info dtype_table[dtype_count] = {
    float_info(dtype::f64, "f64", "torch.float64", 64, 11, 52, true, nan_encoding::ieee, 2),
    float_info(dtype::f32, "f32", "torch.float32", 32, 8, 23, true, nan_encoding::ieee, 1),
    float_info(dtype::f16, "f16", "torch.float16", 16, 5, 10, true, nan_encoding::ieee, 19),
    float_info(dtype::bf16, "bf16", "torch.bfloat16", 16, 8, 7, true, nan_encoding::ieee, 14),
    float_info(dtype::f8_e4m3fn, "e4m3fn", "torch.float8_e4m3fn", 8, 4, 3, false, nan_encoding::all_ones_only,
               25),
    float_info(dtype::f8_e5m2, "e5m2", "torch.float8_e5m2", 8, 5, 2, true, nan_encoding::ieee, 24),
    int_info(dtype::i8, "i8", "torch.int8", 8, true, 6),
    int_info(dtype::i16, "i16", "torch.int16", 16, true, 5),
    int_info(dtype::i32, "i32", "torch.int32", 32, true, 3),
    int_info(dtype::i64, "i64", "torch.int64", 64, true, 9),
    int_info(dtype::u8, "u8", "torch.uint8", 8, false, 4),
    int_info(dtype::u16, "u16", "torch.uint16", 16, false, 17),
    int_info(dtype::u32, "u32", "torch.uint32", 32, false, 22),
    int_info(dtype::u64, "u64", "torch.uint64", 64, false, 23),
    dtype_info{dtype::boolean, "bool", "torch.bool", 8, false, false, false, nan_encoding::none, 0, 0, 0, 10, 1.0,
               0.0, 0.0, 0.0},
};
}  // namespace detail

/// The facts of a dtype. Throws nanscope::error for a value outside the enum.
constexpr const dtype_info& info(dtype t) {
  return static_cast<unsigned>(t) < static_cast<unsigned>(dtype_count)
             ? detail::dtype_table[static_cast<unsigned>(t)]
             : (detail::fail("", "unsupported dtype value " + std::to_string(static_cast<unsigned>(t))),
                detail::dtype_table[0]);
}
constexpr const char* name(dtype t) { return info(t).name; }
constexpr bool is_float(dtype t) { return info(t).is_float; }
constexpr std::size_t size_of(dtype t) { return info(t).bits / 8; }

// ---------------------------------------------------------------------------------------------------------
// Storage types for the formats C++ has no built-in type for. They are bit containers: arithmetic is up to
// the user's engine; nanscope only needs to read them. Conversions are exact (decode) or round to nearest
// even (encode, overflow gives inf, or NaN for e4m3fn which has no inf).
// ---------------------------------------------------------------------------------------------------------

namespace detail {
inline float bits_to_float(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline std::uint32_t float_to_bits(float f) {
  std::uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
inline double bits_to_double(std::uint64_t b) {
  double f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline std::uint64_t double_to_bits(double f) {
  std::uint64_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

/// Exact f32 -> f64 on bit patterns, with no floating-point instruction: subnormal f32 values survive the
/// denormals-are-zero mode that -ffast-math turns on (a cvtss2sd would flush them to zero).
NANSCOPE_HOST_DEVICE inline std::uint64_t f32_to_f64_bits(std::uint32_t b) {
  const std::uint64_t sign = static_cast<std::uint64_t>(b >> 31) << 63;
  const std::uint32_t e = (b >> 23) & 0xFFu;
  std::uint32_t m = b & 0x7FFFFFu;
  if (e == 0xFF) return sign | 0x7FF0000000000000ull | (static_cast<std::uint64_t>(m) << 29);
  if (e != 0) return sign | (static_cast<std::uint64_t>(e - 127 + 1023) << 52) | (static_cast<std::uint64_t>(m) << 29);
  if (m == 0) return sign;
  int shift = 0;
  while ((m & 0x800000u) == 0) {
    m <<= 1;
    ++shift;
  }
  m &= 0x7FFFFFu;
  return sign | (static_cast<std::uint64_t>(1 - 127 - shift + 1023) << 52) | (static_cast<std::uint64_t>(m) << 29);
}
inline double f32_bits_to_double(std::uint32_t b) { return bits_to_double(f32_to_f64_bits(b)); }
inline double exact_double(float f) { return f32_bits_to_double(float_to_bits(f)); }

/// Exact decode of a small float format (sign, EB exponent bits, MB mantissa bits) to f32.
/// Every f16/bf16/e4m3fn/e5m2 value is representable in f32, so this is exact.
template <int EB, int MB, bool HasInf>
inline float decode_small_float(std::uint32_t bits) {
  constexpr int bias = (1 << (EB - 1)) - 1;
  constexpr std::uint32_t exp_all = (1u << EB) - 1;
  const std::uint32_t sign = (bits >> (EB + MB)) & 1u;
  const std::uint32_t e = (bits >> MB) & exp_all;
  std::uint32_t m = bits & ((1u << MB) - 1);
  std::uint32_t out;
  if (HasInf && e == exp_all) {
    out = 0x7F800000u | (m << (23 - MB)) | (m != 0 ? 0x00400000u : 0u);  // quiet NaN keeps payload bits
  } else if (!HasInf && e == exp_all && m == (1u << MB) - 1) {
    out = 0x7FC00000u;  // e4m3fn NaN
  } else if (e == 0) {
    if (m == 0) {
      out = 0;
    } else {
      // subnormal: m * 2^(1-bias-MB); normalise into f32
      int shift = 0;
      while ((m & (1u << MB)) == 0) {
        m <<= 1;
        ++shift;
      }
      m &= (1u << MB) - 1;
      const int exp32 = 1 - bias - shift + 127;
      out = (static_cast<std::uint32_t>(exp32) << 23) | (m << (23 - MB));
    }
  } else {
    const int exp32 = static_cast<int>(e) - bias + 127;
    out = (static_cast<std::uint32_t>(exp32) << 23) | (m << (23 - MB));
  }
  return bits_to_float(out | (sign << 31));
}

/// Round-to-nearest-even encode of a double into a small float format. Overflow gives inf, or NaN for
/// formats without inf (the "fn" fp8 variants). NaN gives the canonical quiet NaN of the format.
template <int EB, int MB, bool HasInf>
inline std::uint32_t encode_small_float(double v) {
  constexpr int bias = (1 << (EB - 1)) - 1;
  constexpr std::uint32_t exp_all = (1u << EB) - 1;
  const std::uint64_t vb = double_to_bits(v);
  const std::uint32_t sign = static_cast<std::uint32_t>(vb >> 63) << (EB + MB);
  const std::uint64_t abs_bits = vb & 0x7FFFFFFFFFFFFFFFull;
  constexpr std::uint32_t nan_bits = HasInf ? ((exp_all << MB) | (1u << (MB - 1))) : ((exp_all << MB) | ((1u << MB) - 1));
  constexpr std::uint32_t inf_bits = HasInf ? (exp_all << MB) : nan_bits;
  if (abs_bits > 0x7FF0000000000000ull) return sign | nan_bits;
  if (abs_bits == 0x7FF0000000000000ull) return sign | inf_bits;
  const double a = bits_to_double(abs_bits);
  // Quantum (spacing) at a's binade, clamped at the subnormal spacing.
  int e2 = 0;
  (void)std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  int unbiased = e2 - 1;
  if (a == 0.0) return sign;
  // Above the format's largest binade: overflow (also keeps q * quantum below from overflowing a double).
  constexpr int max_unbiased = (HasInf ? static_cast<int>(exp_all) - 1 : static_cast<int>(exp_all)) - bias;
  if (unbiased > max_unbiased) return sign | inf_bits;
  if (unbiased < 1 - bias) unbiased = 1 - bias;  // subnormal range shares the min-normal quantum
  const double quantum = pow2(unbiased - MB);
  const double scaled = a / quantum;  // exact: division by a power of two within range
  double q = std::floor(scaled);
  const double frac = scaled - q;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(q, 2.0) != 0.0)) q += 1.0;
  // q * quantum is the rounded magnitude. Re-derive the bit pattern from it.
  const double r = q * quantum;
  // Build bits from r.
  if (r == 0.0) return sign;
  int re = 0;
  (void)std::frexp(r, &re);
  int rexp = re - 1;
  std::uint32_t bits;
  if (rexp < 1 - bias) {
    // subnormal
    bits = static_cast<std::uint32_t>(r / pow2(1 - bias - MB));
  } else {
    const int field = rexp + bias;
    if (field > static_cast<int>(exp_all) || (HasInf && field == static_cast<int>(exp_all))) return sign | inf_bits;
    const std::uint32_t mant = static_cast<std::uint32_t>(r / pow2(rexp - MB)) - (1u << MB);
    bits = (static_cast<std::uint32_t>(field) << MB) | mant;
    if (!HasInf && bits == ((exp_all << MB) | ((1u << MB) - 1))) return sign | nan_bits;  // beyond 448
  }
  return sign | bits;
}
}  // namespace detail

/// IEEE binary16 storage.
struct half {
  std::uint16_t bits;
  static half from_bits(std::uint16_t b) { return half{b}; }
  static half from_float(double v) {
    return half{static_cast<std::uint16_t>(detail::encode_small_float<5, 10, true>(v))};
  }
  float to_float() const { return detail::decode_small_float<5, 10, true>(bits); }
  explicit operator float() const { return to_float(); }
};
/// bfloat16 storage (the upper half of an f32).
struct bfloat16 {
  std::uint16_t bits;
  static bfloat16 from_bits(std::uint16_t b) { return bfloat16{b}; }
  static bfloat16 from_float(double v) {
    return bfloat16{static_cast<std::uint16_t>(detail::encode_small_float<8, 7, true>(v))};
  }
  float to_float() const { return detail::bits_to_float(static_cast<std::uint32_t>(bits) << 16); }
  explicit operator float() const { return to_float(); }
};
/// OCP fp8 E4M3 "fn" storage: no infinities, NaN only as S.1111.111, max 448.
struct float8_e4m3fn {
  std::uint8_t bits;
  static float8_e4m3fn from_bits(std::uint8_t b) { return float8_e4m3fn{b}; }
  static float8_e4m3fn from_float(double v) {
    return float8_e4m3fn{static_cast<std::uint8_t>(detail::encode_small_float<4, 3, false>(v))};
  }
  float to_float() const { return detail::decode_small_float<4, 3, false>(bits); }
  explicit operator float() const { return to_float(); }
};
/// OCP fp8 E5M2 storage: IEEE-like, max 57344.
struct float8_e5m2 {
  std::uint8_t bits;
  static float8_e5m2 from_bits(std::uint8_t b) { return float8_e5m2{b}; }
  static float8_e5m2 from_float(double v) {
    return float8_e5m2{static_cast<std::uint8_t>(detail::encode_small_float<5, 2, true>(v))};
  }
  float to_float() const { return detail::decode_small_float<5, 2, true>(bits); }
  explicit operator float() const { return to_float(); }
};

/// Decode one element of a floating dtype from its raw bits (low bits of `bits`) to double. Exact.
inline double decode(dtype t, std::uint64_t bits) {
  switch (t) {
    case dtype::f64: return detail::bits_to_double(bits);
    case dtype::f32: return detail::f32_bits_to_double(static_cast<std::uint32_t>(bits));
    case dtype::f16: return detail::exact_double(half::from_bits(static_cast<std::uint16_t>(bits)).to_float());
    case dtype::bf16: return detail::f32_bits_to_double(static_cast<std::uint32_t>(bits & 0xFFFFu) << 16);
    case dtype::f8_e4m3fn:
      return detail::exact_double(float8_e4m3fn::from_bits(static_cast<std::uint8_t>(bits)).to_float());
    case dtype::f8_e5m2: return detail::exact_double(float8_e5m2::from_bits(static_cast<std::uint8_t>(bits)).to_float());
    default: detail::fail("", std::string("decode: dtype ") + name(t) + " is not a floating type");
  }
}

/// Maps a C++ element type to its dtype. Specialise for your own storage types
/// (`template <> struct nanscope::scalar_traits<my_half> { static constexpr dtype value = dtype::f16; };`).
template <class T, class = void>
struct scalar_traits {};
template <class T>
struct scalar_traits<const T> : scalar_traits<T> {};
template <class T>
struct scalar_traits<volatile T> : scalar_traits<T> {};
template <class T>
struct scalar_traits<const volatile T> : scalar_traits<T> {};

#define NANSCOPE_IMPL_SCALAR(T, D)              \
  template <>                                   \
  struct scalar_traits<T> {                     \
    static constexpr dtype value = dtype::D;    \
  }
NANSCOPE_IMPL_SCALAR(double, f64);
NANSCOPE_IMPL_SCALAR(float, f32);
NANSCOPE_IMPL_SCALAR(half, f16);
NANSCOPE_IMPL_SCALAR(bfloat16, bf16);
NANSCOPE_IMPL_SCALAR(float8_e4m3fn, f8_e4m3fn);
NANSCOPE_IMPL_SCALAR(float8_e5m2, f8_e5m2);
NANSCOPE_IMPL_SCALAR(bool, boolean);
#undef NANSCOPE_IMPL_SCALAR

// Integer types by size and signedness (covers char/short/int/long/long long on every platform).
template <class T>
struct scalar_traits<T, std::enable_if_t<std::is_integral<T>::value && !std::is_same<T, bool>::value>> {
  static constexpr dtype value =
      std::is_signed<T>::value
          ? (sizeof(T) == 1 ? dtype::i8 : sizeof(T) == 2 ? dtype::i16 : sizeof(T) == 4 ? dtype::i32 : dtype::i64)
          : (sizeof(T) == 1 ? dtype::u8 : sizeof(T) == 2 ? dtype::u16 : sizeof(T) == 4 ? dtype::u32 : dtype::u64);
};

namespace detail {
template <class T, class = void>
struct has_scalar_traits : std::false_type {};
template <class T>
struct has_scalar_traits<T, std::void_t<decltype(scalar_traits<T>::value)>> : std::true_type {};
}  // namespace detail

/// The dtype of a C++ element type; a static_assert names the missing specialisation.
template <class T>
constexpr dtype dtype_of() {
  static_assert(detail::has_scalar_traits<T>::value,
                "nanscope: no nanscope::scalar_traits<T> for this element type. Use float, double, "
                "nanscope::half, nanscope::bfloat16, nanscope::float8_e4m3fn, nanscope::float8_e5m2, an "
                "integer or bool, or specialise nanscope::scalar_traits<T> with `static constexpr dtype value`.");
  return scalar_traits<T>::value;
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DTYPE_HPP
