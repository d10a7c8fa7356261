// nanscope — block_scaled_formats.hpp: the element and scale formats of block-scaled low precision (OCP MX, NVFP4):
// exact decode, round-to-nearest-even encode with saturation, and the block scale rules. docs/block-scaled.md.
//
//   double v = nanscope::decode(nanscope::element_format::e2m1, 0x7);          // 6.0
//   unsigned c = nanscope::encode(nanscope::element_format::e4m3, 500.0);     // 0x7E (448: saturated)
//   std::uint8_t x = nanscope::mx_scale_code(nanscope::element_format::e2m1, nanscope::scale_rule::ocp, 5.0);
//                                                                              // E8M0 0x7F: 2^0 (floor(log2 5) - 2)
//
// Everything here is exact and uses no floating-point division and no NaN comparisons: the answers do not change
// under -ffast-math. Needs only the standard library.
#ifndef NANSCOPE_BLOCK_SCALED_FORMATS_HPP
#define NANSCOPE_BLOCK_SCALED_FORMATS_HPP

#include "config.hpp"
#include "dtype.hpp"

#include <cstdint>
#include <cstring>

NANSCOPE_NAMESPACE_BEGIN

/// The element formats of OCP Microscaling v1.0 (E2M1 also for NVFP4). e4m3 is the OCP E4M3 (max 448, no
/// infinities, NaN = S.1111.111), the same encoding as dtype::f8_e4m3fn.
enum class element_format : std::uint8_t { e2m1, e2m3, e3m2, e4m3, e5m2 };
inline constexpr int element_format_count = 5;

/// The facts of one element format.
struct element_format_info {
  element_format id;
  const char* name;     ///< "e2m1", ...
  int bits;             ///< storage bits (sign included): 4, 6 or 8
  int exponent_bits;
  int mantissa_bits;
  int bias;
  int emax;             ///< exponent of the largest normal binade (OCP's emax_elem)
  bool has_inf;         ///< e5m2 only
  bool has_nan;         ///< e4m3 (S.1111.111) and e5m2 (IEEE-like); e2m1, e2m3, e3m2 have neither
  unsigned max_code;    ///< positive code of the largest finite value
  double max_finite;
  double min_normal;
  double min_subnormal;
};

namespace detail {
inline constexpr element_format_info element_format_table[element_format_count] = {
    {element_format::e2m1, "e2m1", 4, 2, 1, 1, 2, false, false, 0x7, 6.0, 1.0, 0.5},
    {element_format::e2m3, "e2m3", 6, 2, 3, 1, 2, false, false, 0x1F, 7.5, 1.0, 0.125},
    {element_format::e3m2, "e3m2", 6, 3, 2, 3, 4, false, false, 0x1F, 28.0, 0.25, 0.0625},
    {element_format::e4m3, "e4m3", 8, 4, 3, 7, 8, false, true, 0x7E, 448.0, 0.015625, 0.001953125},
    {element_format::e5m2, "e5m2", 8, 5, 2, 15, 15, true, true, 0x7B, 57344.0, 6.103515625e-05, 1.52587890625e-05},
};

/// 2^e as a double from its bits (-1022 <= e <= 1023): exact, no arithmetic.
inline double bs_pow2(int e) { return bits_to_double(static_cast<std::uint64_t>(e + 1023) << 52); }

/// floor(log2(a)) of a positive finite double, from its bits (subnormal doubles included).
inline int bs_floor_log2(double a) {
  const std::uint64_t b = double_to_bits(a) & 0x7FFFFFFFFFFFFFFFull;
  const int field = static_cast<int>(b >> 52);
  if (field != 0) return field - 1023;
  return -1074 + (63 - __builtin_clzll(b));  // subnormal double: the top set bit of the fraction
}

/// The bits of the f32 nearest to a non-negative finite double (ties to even; f32 subnormals included; beyond the
/// largest f32: +inf), with integer operations only.
inline std::uint32_t bs_f32_bits_rne(double a) {
  const std::uint64_t b = double_to_bits(a) & 0x7FFFFFFFFFFFFFFFull;
  const int field = static_cast<int>(b >> 52);
  if (field == 0) return 0;  // zero or a subnormal double: far below half the smallest f32
  const int e = field - 1023;
  if (e > 127) return 0x7F800000u;
  const std::uint64_t sig = (b & 0x000FFFFFFFFFFFFFull) | (std::uint64_t{1} << 52);
  const int q = (e < -126 ? -126 : e) - 23;  // the f32 quantum of a's binade
  const int sh = 52 + q - e;
  if (sh >= 60) return 0;
  std::uint64_t n = sig >> sh;
  const std::uint64_t rest = sig & ((std::uint64_t{1} << sh) - 1u), half = std::uint64_t{1} << (sh - 1);
  if (rest > half || (rest == half && (n & 1u) != 0)) ++n;
  // subnormal quantum: the bits are n (2^23 is the smallest normal); normal: field e + 127 plus n - 2^23
  if (q == -149) return static_cast<std::uint32_t>(n);
  return (static_cast<std::uint32_t>(e + 127) << 23) + static_cast<std::uint32_t>(n - (std::uint64_t{1} << 23));
}

/// The significand of a positive finite normal double as an integer in [2^52, 2^53).
inline std::uint64_t bs_significand(double a) {
  return (double_to_bits(a) & 0x000FFFFFFFFFFFFFull) | (std::uint64_t{1} << 52);
}
}  // namespace detail

constexpr const element_format_info& info(element_format f) {
  return detail::element_format_table[static_cast<unsigned>(f) < static_cast<unsigned>(element_format_count)
                                          ? static_cast<unsigned>(f)
                                          : 0u];
}
constexpr const char* name(element_format f) { return info(f).name; }

/// Exact value of an element code (the low `bits` bits of `code`; higher bits are ignored). NaN codes give a
/// quiet NaN, e5m2's infinity codes give +-inf.
inline double decode(element_format f, unsigned code) {
  const element_format_info& fi = info(f);
  code &= (1u << fi.bits) - 1u;
  const bool neg = ((code >> (fi.bits - 1)) & 1u) != 0;
  const unsigned mag = code & ((1u << (fi.bits - 1)) - 1u);
  const unsigned field = mag >> fi.mantissa_bits;
  const unsigned mant = mag & ((1u << fi.mantissa_bits) - 1u);
  const unsigned top = (1u << fi.exponent_bits) - 1u;
  std::uint64_t out;
  if (fi.has_inf && field == top) {
    out = mant == 0 ? 0x7FF0000000000000ull : 0x7FF8000000000000ull;
  } else if (f == element_format::e4m3 && mag == 0x7F) {
    out = 0x7FF8000000000000ull;
  } else if (field == 0) {
    // mant * 2^(1 - bias - mantissa_bits): exact in a double
    if (mant == 0) {
      out = 0;
    } else {
      const int msb = 31 - __builtin_clz(mant);
      const int e = 1 - fi.bias - fi.mantissa_bits + msb;
      const std::uint64_t frac = (static_cast<std::uint64_t>(mant) << (52 - msb)) & 0x000FFFFFFFFFFFFFull;
      out = (static_cast<std::uint64_t>(e + 1023) << 52) | frac;
    }
  } else {
    const int e = static_cast<int>(field) - fi.bias;
    out = (static_cast<std::uint64_t>(e + 1023) << 52) | (static_cast<std::uint64_t>(mant) << (52 - fi.mantissa_bits));
  }
  if (neg) out |= 0x8000000000000000ull;
  return detail::bits_to_double(out);
}

/// The code of v rounded to nearest, ties to even, as OCP MX conversion does: a finite value beyond the largest
/// finite magnitude saturates to +-max. Infinities: e5m2 +-inf, e4m3 NaN (it has no infinity), the others +-max;
/// NaN: e4m3 and e5m2 NaN, the others +0 (they have no NaN: an MX block with a NaN gets a NaN scale instead).
inline unsigned encode(element_format f, double v) {
  const element_format_info& fi = info(f);
  const std::uint64_t vb = detail::double_to_bits(v);
  const unsigned sign = static_cast<unsigned>(vb >> 63) << (fi.bits - 1);
  const std::uint64_t ab = vb & 0x7FFFFFFFFFFFFFFFull;
  const unsigned top_field = (1u << fi.exponent_bits) - 1u;
  if (ab > 0x7FF0000000000000ull) {  // NaN
    if (f == element_format::e4m3) return sign | 0x7Fu;
    if (f == element_format::e5m2) return sign | (top_field << fi.mantissa_bits) | 0x2u;
    return 0;
  }
  if (ab == 0x7FF0000000000000ull) {  // infinity
    if (f == element_format::e5m2) return sign | (top_field << fi.mantissa_bits);
    if (f == element_format::e4m3) return sign | 0x7Fu;
    return sign | fi.max_code;
  }
  if (ab == 0) return sign;
  const double a = detail::bits_to_double(ab);
  const int e = detail::bs_floor_log2(a);
  if (e > fi.emax) return sign | fi.max_code;
  if (e < -1022) return sign;  // a subnormal double: far below every element format's smallest half-step
  // a = sig * 2^(e - 52), sig in [2^52, 2^53); the quantum of a's binade in the format (the subnormal quantum
  // below the smallest normal binade) is 2^q; n = a / 2^q rounded to an integer, ties to even
  const int q = (e < 1 - fi.bias ? 1 - fi.bias : e) - fi.mantissa_bits;
  const std::uint64_t sig = detail::bs_significand(a);
  const int sh = 52 + q - e;  // >= 52 - mantissa_bits > 0
  std::uint64_t n;
  if (sh >= 60) {
    n = 0;  // a < 2^(q-7): far below half a quantum
  } else {
    n = sig >> sh;
    const std::uint64_t rest = sig & ((std::uint64_t{1} << sh) - 1u), half = std::uint64_t{1} << (sh - 1);
    if (rest > half || (rest == half && (n & 1u) != 0)) ++n;
  }
  // subnormal quantum: the code is n itself (n = 2^M is field 1, mantissa 0); normal: field (e + bias) plus the
  // mantissa n - 2^M, where a carry (n = 2^(M+1)) moves to the next field
  unsigned code = q == 1 - fi.bias - fi.mantissa_bits && n <= (1u << fi.mantissa_bits)
                      ? static_cast<unsigned>(n)
                      : (static_cast<unsigned>(e + fi.bias) << fi.mantissa_bits) +
                            static_cast<unsigned>(n - (std::uint64_t{1} << fi.mantissa_bits));
  if (code > fi.max_code) code = fi.max_code;  // saturation (and e4m3's NaN code above 448)
  return sign | code;
}

// ---------------------------------------------------------------------------------------------------------
// Scales
// ---------------------------------------------------------------------------------------------------------

/// Exact value of an E8M0 scale byte: 2^(code - 127); 0xFF is NaN.
inline double decode_e8m0(std::uint8_t code) {
  if (code == 0xFF) return detail::bits_to_double(0x7FF8000000000000ull);
  return detail::bs_pow2(static_cast<int>(code) - 127);
}

/// How an MX block's E8M0 scale 2^X is chosen from the block's largest magnitude A (docs/block-scaled.md):
///   ocp       X = floor(log2 A) - emax: OCP MX v1.0's conversion (section 6.3). The top element can exceed the
///             format's max (its binade is 2^emax wide, the format's max is below 2^(emax+1)) and is clipped.
///   round_up  the smallest X with A / 2^X <= max: never clips (the scale of the MXFP8 training recipes).
///   even      A first rounded to the element format's mantissa width (nearest, ties to even), then the ocp
///             rule: X is one more than ocp's when A's significand is at least 2 - 2^-(M+1).
/// Every rule clamps X to E8M0's range: below -127 gives -127; above 127 the NaN scale.
enum class scale_rule : std::uint8_t { ocp, round_up, even };

constexpr const char* name(scale_rule r) {
  return r == scale_rule::ocp ? "ocp" : r == scale_rule::round_up ? "round_up" : "even";
}

/// The E8M0 code (X + 127; 0xFF: NaN) of an MX block whose largest magnitude is `amax` (>= 0). A block of
/// zeros gets 0x00 (2^-127, the smallest scale: what an encoder computing floor(log2) of the smallest positive
/// normal f32 writes), a block with NaN or infinity (amax not finite) the NaN scale.
inline std::uint8_t mx_scale_code(element_format f, scale_rule rule, double amax) {
  const std::uint64_t ab = detail::double_to_bits(amax) & 0x7FFFFFFFFFFFFFFFull;
  if (ab >= 0x7FF0000000000000ull) return 0xFF;
  if (ab == 0) return 0;
  const element_format_info& fi = info(f);
  const double a = detail::bits_to_double(ab);
  const int e = detail::bs_floor_log2(a);
  int x = e - fi.emax;
  if (e >= -1022) {  // normal double: its significand decides the rules' +1
    const std::uint64_t sig = detail::bs_significand(a);  // A / 2^e in units of 2^-52
    if (rule == scale_rule::even) {
      // A rounds up to 2^(e+1) at M mantissa bits when sig >= 2^53 - 2^(52 - M - 1)
      if (sig >= (std::uint64_t{1} << 53) - (std::uint64_t{1} << (51 - fi.mantissa_bits))) ++x;
    } else if (rule == scale_rule::round_up) {
      // A / 2^x <= max  <=>  sig <= max / 2^emax in units of 2^-52
      const std::uint64_t max_sig = detail::bs_significand(fi.max_finite);
      if (sig > max_sig) ++x;
    }
  }
  if (x < -127) x = -127;
  if (x > 127) return 0xFF;
  return static_cast<std::uint8_t>(x + 127);
}

/// NVFP4's per-tensor scale (the decode factor stored beside an NVFP4 tensor, e.g. ModelOpt's `weight_scale_2`):
/// the tensor's largest finite magnitude divided by 6 * 448 (E2M1's max times E4M3's), rounded to the nearest
/// f32 (ties to even). 0 when amax is 0; amax must be finite and >= 0.
inline float nvfp4_tensor_scale(double tensor_amax) {
  const std::uint64_t ab = detail::double_to_bits(tensor_amax) & 0x7FFFFFFFFFFFFFFFull;
  if (ab == 0 || ab >= 0x7FF0000000000000ull) return 0.0f;
  const double a = detail::bits_to_double(ab);
  // a candidate from a division (any rounding), rounded to f32 with integer operations, then corrected with
  // exact products: c * 2688 is exact in a double
  std::uint32_t c = detail::bs_f32_bits_rne(a / 2688.0);
  auto dist = [&](std::uint32_t b) {
    const double d = detail::f32_bits_to_double(b) * 2688.0 - a;
    return d < 0.0 ? -d : d;
  };
  // the f32 nearest to a / 2688: c such that |c * 2688 - a| is smallest (ties: even significand)
  for (int guard = 0; guard < 8; ++guard) {
    const double dc = dist(c), du = dist(c + 1);
    const double dd = c != 0 ? dist(c - 1) : dc;
    if (du < dc || (du == dc && ((c + 1) & 1u) == 0)) ++c;
    else if (c != 0 && (dd < dc || (dd == dc && ((c - 1) & 1u) == 0))) --c;
    else break;
  }
  return detail::bits_to_float(c);
}

/// NVFP4's E4M3 block scale (code 0x00..0x7E): the block's largest magnitude divided by 6 * tensor_scale, rounded
/// to the nearest E4M3 value (ties to even, E4M3 subnormals included) and saturated at 448. A block of zeros, or
/// a tensor scale of 0, gives 0 (a zero scale: the block's non-zero elements all decode to 0).
inline std::uint8_t nvfp4_block_scale(double block_amax, float tensor_scale) {
  const std::uint64_t ab = detail::double_to_bits(block_amax) & 0x7FFFFFFFFFFFFFFFull;
  if (ab >= 0x7FF0000000000000ull) return 0x7F;  // not finite: NaN
  const std::uint32_t tb = detail::float_to_bits(tensor_scale) & 0x7FFFFFFFu;
  if (ab == 0 || tb == 0 || tb >= 0x7F800000u) return 0;
  const double a = detail::bits_to_double(ab);
  const double q = 6.0 * detail::f32_bits_to_double(tb);  // exact (no f32 -> f64 conversion: subnormals survive DAZ)
  // the rounding interval of code c in units of q: [mid(c - 1, c), mid(c, c + 1)]; mid * q is exact (a midpoint
  // has at most 5 significant bits, q at most 26), so the code is found with exact compares
  auto val = [](unsigned c) { return decode(element_format::e4m3, c); };
  auto fits = [&](unsigned c, int& dir) {
    if (c > 0) {
      const double lo = (val(c - 1) + val(c)) * 0.5 * q;
      if (a < lo || (a == lo && (c & 1u) != 0)) {
        dir = -1;
        return false;
      }
    }
    if (c < 0x7E) {
      const double hi = (val(c) + val(c + 1)) * 0.5 * q;
      if (a > hi || (a == hi && (c & 1u) != 0)) {
        dir = 1;
        return false;
      }
    }
    return true;
  };
  unsigned c = encode(element_format::e4m3, a / q) & 0x7Fu;  // a guess (any rounding of the division)
  if (c > 0x7E) c = 0x7E;
  for (int guard = 0; guard < 256; ++guard) {
    int dir = 0;
    if (fits(c, dir)) break;
    c = static_cast<unsigned>(static_cast<int>(c) + dir);
  }
  return static_cast<std::uint8_t>(c);
}

// ---------------------------------------------------------------------------------------------------------
// Block formats
// ---------------------------------------------------------------------------------------------------------

/// The block-scaled formats: OCP MX (32 elements, E8M0 scale) and NVFP4 (16 E2M1 elements, E4M3 scale, f32
/// per-tensor scale).
enum class block_format : std::uint8_t { mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4, nvfp4 };
inline constexpr int block_format_count = 6;

struct block_format_info {
  block_format id;
  const char* name;  ///< "mxfp8_e4m3", ..., "mxfp4", "nvfp4"
  element_format element;
  int block_size;    ///< 32 (MX) or 16 (NVFP4)
  bool mx;           ///< E8M0 scale (else NVFP4's E4M3 block scale and f32 tensor scale)
};

namespace detail {
inline constexpr block_format_info block_format_table[block_format_count] = {
    {block_format::mxfp8_e4m3, "mxfp8_e4m3", element_format::e4m3, 32, true},
    {block_format::mxfp8_e5m2, "mxfp8_e5m2", element_format::e5m2, 32, true},
    {block_format::mxfp6_e2m3, "mxfp6_e2m3", element_format::e2m3, 32, true},
    {block_format::mxfp6_e3m2, "mxfp6_e3m2", element_format::e3m2, 32, true},
    {block_format::mxfp4, "mxfp4", element_format::e2m1, 32, true},
    {block_format::nvfp4, "nvfp4", element_format::e2m1, 16, false},
};
}  // namespace detail

constexpr const block_format_info& info(block_format f) {
  return detail::block_format_table[static_cast<unsigned>(f) < static_cast<unsigned>(block_format_count)
                                        ? static_cast<unsigned>(f)
                                        : 0u];
}
constexpr const char* name(block_format f) { return info(f).name; }

/// A set of block formats (a bit per block_format). Chainable: block_format_set{}.with(block_format::mxfp4).
struct block_format_set {
  std::uint8_t bits = 0;
  static constexpr block_format_set all() { return block_format_set{(1u << block_format_count) - 1u}; }
  constexpr block_format_set with(block_format f) const {
    return block_format_set{static_cast<std::uint8_t>(bits | (1u << static_cast<unsigned>(f)))};
  }
  constexpr bool has(block_format f) const { return ((bits >> static_cast<unsigned>(f)) & 1u) != 0; }
  constexpr bool empty() const { return bits == 0; }
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_BLOCK_SCALED_FORMATS_HPP
