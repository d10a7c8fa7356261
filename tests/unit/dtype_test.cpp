// nanscope tests — dtype_test.cpp: exhaustive decode of every f16, bf16, fp8 e4m3fn and fp8 e5m2 bit pattern
// against the independent decoders of tests/support/reference.hpp; encode (from_float) round trips,
// round-to-nearest-even at every midpoint, the overflow/underflow boundaries of docs/formats.md; dtype_info
// facts against docs/formats.md (TensorFlow enums, float formats).
#include "support/reference.hpp"

#include <nanscope/dtype.hpp>
#include <nanscope/health.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

using nanscope::dtype;
using namespace nstest;

/// One small float format: reference decoder, the library's storage-type conversions.
struct small_format {
  const char* label;
  dtype t;
  unsigned bits;
  double (*ref)(std::uint64_t);
  float (*lib_to_float)(std::uint64_t);
  std::uint64_t (*lib_from_float)(double);
  std::uint64_t max_finite_pattern;  // largest positive finite pattern (patterns 0..this are increasing)
};

const small_format formats[] = {
    {"f16", dtype::f16, 16, [](std::uint64_t b) { return ref_decode_f16(static_cast<std::uint16_t>(b)); },
     [](std::uint64_t b) { return nanscope::half::from_bits(static_cast<std::uint16_t>(b)).to_float(); },
     [](double v) { return static_cast<std::uint64_t>(nanscope::half::from_float(v).bits); }, 0x7BFF},
    {"bf16", dtype::bf16, 16, [](std::uint64_t b) { return ref_decode_bf16(static_cast<std::uint16_t>(b)); },
     [](std::uint64_t b) { return nanscope::bfloat16::from_bits(static_cast<std::uint16_t>(b)).to_float(); },
     [](double v) { return static_cast<std::uint64_t>(nanscope::bfloat16::from_float(v).bits); }, 0x7F7F},
    {"e4m3fn", dtype::f8_e4m3fn, 8, [](std::uint64_t b) { return ref_decode_e4m3fn(static_cast<std::uint8_t>(b)); },
     [](std::uint64_t b) { return nanscope::float8_e4m3fn::from_bits(static_cast<std::uint8_t>(b)).to_float(); },
     [](double v) { return static_cast<std::uint64_t>(nanscope::float8_e4m3fn::from_float(v).bits); }, 0x7E},
    {"e5m2", dtype::f8_e5m2, 8, [](std::uint64_t b) { return ref_decode_e5m2(static_cast<std::uint8_t>(b)); },
     [](std::uint64_t b) { return nanscope::float8_e5m2::from_bits(static_cast<std::uint8_t>(b)).to_float(); },
     [](double v) { return static_cast<std::uint64_t>(nanscope::float8_e5m2::from_float(v).bits); }, 0x7B},
};

std::uint64_t sign_mask(const small_format& f) { return std::uint64_t{1} << (f.bits - 1); }
std::uint64_t pattern_count(const small_format& f) { return std::uint64_t{1} << f.bits; }

std::string show_double(double x) {
  std::ostringstream os;
  os.precision(17);
  os << x;
  return os.str();
}

std::string hex(std::uint64_t b) {
  std::ostringstream os;
  os << "0x" << std::hex << b;
  return os.str();
}

/// Same decoded value: NaN-ness by classification, otherwise identical bits (so -0 must stay -0).
bool same_decoded(double lib, double ref) {
  if (is_nan(ref) || is_nan(lib)) return is_nan(ref) && is_nan(lib);
  return bits64(lib) == bits64(ref);
}
/// The same for a float result, compared by bits without any hardware conversion (-ffast-math safe).
bool same_decoded_f(float lib, double ref) {
  const std::uint32_t lb = bits32(lib);
  const bool lib_nan = (lb & 0x7FFFFFFFu) > 0x7F800000u;
  if (is_nan(ref) || lib_nan) return is_nan(ref) && lib_nan;
  return lb == exact_f32_bits(ref);
}

/// Independent reference encoder: nearest representable value by search over the sorted table of the
/// format's non-negative finite values, ties to the even bit pattern. The value one ulp above the max finite
/// stands for the overflow pattern (max_pattern + 1: inf for IEEE-like formats, NaN S.1111.111 for e4m3fn), so
/// the tie at max + ulp/2 rounds by the same parity rule as every other tie.
struct ref_encoder {
  const small_format* f;
  std::vector<double> values;  // values[p] = value of positive pattern p, p in [0, max_pattern + 1]

  explicit ref_encoder(const small_format& fmt) : f(&fmt) {
    for (std::uint64_t p = 0; p <= fmt.max_finite_pattern; ++p) values.push_back(fmt.ref(p));
    const double top = values.back();
    const double ulp = top - values[values.size() - 2];
    values.push_back(top + ulp);
  }
  std::uint64_t overflow_pattern() const { return f->max_finite_pattern + 1; }
  std::uint64_t nan_pattern() const {
    // a positive NaN: IEEE-like formats have it right after +inf; e4m3fn's only NaN is the overflow pattern
    return f->t == dtype::f8_e4m3fn ? overflow_pattern() : overflow_pattern() + 1;
  }
  std::uint64_t encode(double x) const {
    const std::uint64_t sgn = sign_bit(x) ? sign_mask(*f) : 0;
    if (is_nan(x)) return sgn | nan_pattern();
    if (is_inf(x)) return sgn | overflow_pattern();
    const double a = abs_bits(x);
    if (a >= values.back()) return sgn | overflow_pattern();
    // first value > a
    std::size_t lo = 0, hi = values.size() - 1;
    while (hi - lo > 1) {
      const std::size_t mid = (lo + hi) / 2;
      if (values[mid] <= a)
        lo = mid;
      else
        hi = mid;
    }
    if (values[lo] == a) return sgn | lo;
    const double twice = 2.0 * a;  // exact
    const double sum = values[lo] + values[hi];  // exact: adjacent values of a <= 11-bit format
    std::uint64_t p;
    if (twice < sum)
      p = lo;
    else if (twice > sum)
      p = hi;
    else
      p = (lo % 2 == 0) ? lo : hi;
    return sgn | p;
  }
};

bool is_nan_pattern(const small_format& f, std::uint64_t p) { return ref_element(f.t, p).c == cat::nan; }

}  // namespace

// -----------------------------------------------------------------------------------------------------------
// The reference decoders are checked on their own first, so a wrong reference cannot hide a wrong library.
// -----------------------------------------------------------------------------------------------------------
TEST_CASE("reference decoders: known values from the format specifications") {
  CHECK(ref_decode_f16(0x3C00) == 1.0);
  CHECK(ref_decode_f16(0xC000) == -2.0);
  CHECK(ref_decode_f16(0x7BFF) == 65504.0);
  CHECK(ref_decode_f16(0x0400) == std::ldexp(1.0, -14));
  CHECK(ref_decode_f16(0x0001) == std::ldexp(1.0, -24));
  CHECK(ref_decode_f16(0x03FF) == 1023.0 * std::ldexp(1.0, -24));
  CHECK(ref_decode_f16(0x3555) == 0.333251953125);
  CHECK(bits64(ref_decode_f16(0x8000)) == 0x8000000000000000ull);
  CHECK(bits64(ref_decode_f16(0x7C00)) == 0x7FF0000000000000ull);
  CHECK(bits64(ref_decode_f16(0xFC00)) == 0xFFF0000000000000ull);
  CHECK(is_nan(ref_decode_f16(0x7E00)));
  CHECK(is_nan(ref_decode_f16(0x7C01)));

  CHECK(ref_decode_bf16(0x3F80) == 1.0);
  CHECK(ref_decode_bf16(0x4049) == 3.140625);
  CHECK(ref_decode_bf16(0x7F7F) == (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127));
  CHECK(ref_decode_bf16(0x0080) == std::ldexp(1.0, -126));
  CHECK(ref_decode_bf16(0x0001) == std::ldexp(1.0, -133));
  CHECK(bits64(ref_decode_bf16(0xFF80)) == 0xFFF0000000000000ull);
  CHECK(is_nan(ref_decode_bf16(0x7FC0)));

  CHECK(ref_decode_e4m3fn(0x38) == 1.0);
  CHECK(ref_decode_e4m3fn(0x7E) == 448.0);
  CHECK(ref_decode_e4m3fn(0xFE) == -448.0);
  CHECK(ref_decode_e4m3fn(0x77) == 240.0);
  CHECK(ref_decode_e4m3fn(0x78) == 256.0);
  CHECK(ref_decode_e4m3fn(0x08) == std::ldexp(1.0, -6));
  CHECK(ref_decode_e4m3fn(0x01) == std::ldexp(1.0, -9));
  CHECK(ref_decode_e4m3fn(0x07) == 7.0 * std::ldexp(1.0, -9));
  CHECK(is_nan(ref_decode_e4m3fn(0x7F)));
  CHECK(is_nan(ref_decode_e4m3fn(0xFF)));

  CHECK(ref_decode_e5m2(0x3C) == 1.0);
  CHECK(ref_decode_e5m2(0x7B) == 57344.0);
  CHECK(ref_decode_e5m2(0x04) == std::ldexp(1.0, -14));
  CHECK(ref_decode_e5m2(0x01) == std::ldexp(1.0, -16));
  CHECK(bits64(ref_decode_e5m2(0x7C)) == 0x7FF0000000000000ull);
  CHECK(bits64(ref_decode_e5m2(0xFC)) == 0xFFF0000000000000ull);
  CHECK(is_nan(ref_decode_e5m2(0x7D)));
  CHECK(is_nan(ref_decode_e5m2(0x7F)));
}

TEST_CASE("reference decoders: structure (monotone, symmetric, classification agrees with value)") {
  for (const small_format& f : formats) {
    INFO("format ", std::string(f.label));
    int bad = 0;
    std::string first;
    double prev = -1.0;
    for (std::uint64_t p = 0; p < pattern_count(f); ++p) {
      const element el = ref_element(f.t, p);
      const double v = f.ref(p);
      const double nv = f.ref(p | sign_mask(f));
      bool ok = true;
      // sign symmetry
      if ((p & sign_mask(f)) == 0) {
        if (is_nan(v)) ok = ok && is_nan(nv);
        else ok = ok && bits64(nv) == (bits64(v) | 0x8000000000000000ull);
      }
      // positive finite patterns are strictly increasing up to the max finite pattern
      if (p <= f.max_finite_pattern) {
        ok = ok && is_finite(v) && v > prev;
        prev = v;
      }
      if (p == f.max_finite_pattern + 1) ok = ok && !is_finite(v);  // +inf, or NaN for e4m3fn
      // bit-field classification agrees with the value
      switch (el.c) {
        case cat::nan: ok = ok && is_nan(v); break;
        case cat::pos_inf: ok = ok && is_inf(v) && !sign_bit(v); break;
        case cat::neg_inf: ok = ok && is_inf(v) && sign_bit(v); break;
        case cat::zero: ok = ok && is_zero(v); break;
        case cat::positive: ok = ok && is_finite(v) && !sign_bit(v) && !is_zero(v); break;
        case cat::negative: ok = ok && is_finite(v) && sign_bit(v) && !is_zero(v); break;
      }
      if (!ok && bad++ == 0) first = hex(p);
    }
    INFO("first bad pattern ", first);
    CHECK(bad == 0);
  }
  // bfloat16 is the upper half of an f32: a second, structurally different decoder must agree.
  int bad = 0;
  for (std::uint32_t p = 0; p < 65536; ++p) {
    const double a = ref_decode_bf16(static_cast<std::uint16_t>(p));
    const double b = ref_decode_f32(p << 16);
    if (!same_decoded(a, b)) ++bad;
    // and the integer-only f32 encoder of the test support inverts it
    if (!is_nan(a) && exact_f32_bits(a) != (p << 16)) ++bad;
  }
  CHECK(bad == 0);
}

// -----------------------------------------------------------------------------------------------------------
// Library decode, exhaustive.
// -----------------------------------------------------------------------------------------------------------
TEST_CASE("decode: every bit pattern of f16, bf16, e4m3fn, e5m2 matches the independent decoder") {
  for (const small_format& f : formats) {
    INFO("format ", std::string(f.label));
    std::uint64_t bad_storage = 0, bad_decode = 0;
    std::string first_storage, first_decode;
    for (std::uint64_t p = 0; p < pattern_count(f); ++p) {
      const double ref = f.ref(p);
      const float via_storage = f.lib_to_float(p);
      const double via_decode = nanscope::decode(f.t, p);
      if (!same_decoded_f(via_storage, ref) && bad_storage++ == 0)
        first_storage = hex(p) + ": lib bits " + hex(bits32(via_storage)) + " ref " + show_double(ref);
      if (!same_decoded(via_decode, ref) && bad_decode++ == 0)
        first_decode = hex(p) + ": lib " + show_double(via_decode) + " ref " + show_double(ref);
    }
    INFO("first storage mismatch: ", first_storage);
    INFO("first decode() mismatch: ", first_decode);
    CHECK(bad_storage == 0);
    CHECK(bad_decode == 0);
  }
}

TEST_CASE("decode: f32 and f64 raw bits, and non-float dtypes are rejected") {
  const std::uint32_t f32_samples[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x007FFFFFu, 0x00800000u, 0x3F800000u,
                                       0x7F7FFFFFu, 0xFF7FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u,
                                       0xFFFFFFFFu, 0x40490FDBu};
  for (std::uint32_t b : f32_samples) {
    CAPTURE(b);
    const double lib = nanscope::decode(dtype::f32, b);
    const element el = ref_element(dtype::f32, b);
    if (el.c == cat::nan) {
      CHECK(is_nan(lib));
    } else {
      // value via an ldexp decode of the f32 fields, not via the hardware conversion
      const int e = static_cast<int>((b >> 23) & 0xFF);
      const double m = static_cast<double>(b & 0x7FFFFF);
      double mag = e == 0 ? std::ldexp(m, -149) : e == 0xFF ? pos_inf() : std::ldexp(8388608.0 + m, e - 150);
      CHECK(bits64(lib) == bits64(with_sign(mag, (b >> 31) != 0)));
    }
  }
  const std::uint64_t f64_samples[] = {0x0ull, 0x8000000000000000ull, 0x1ull, 0x3FF0000000000000ull,
                                       0x7FEFFFFFFFFFFFFFull, 0x7FF0000000000000ull, 0xFFF0000000000000ull,
                                       0x7FF0000000000001ull, 0xFFF8000000000000ull};
  for (std::uint64_t b : f64_samples) {
    CAPTURE(b);
    const double lib = nanscope::decode(dtype::f64, b);
    if ((b & k_abs64) > k_inf64)
      CHECK(is_nan(lib));
    else
      CHECK(bits64(lib) == b);
  }
  CHECK_THROWS_AS(nanscope::decode(dtype::i32, 1), nanscope::error);
  CHECK_THROWS_AS(nanscope::decode(dtype::boolean, 1), nanscope::error);
  CHECK_THROWS_AS(nanscope::decode(dtype::u8, 1), nanscope::error);
}

// -----------------------------------------------------------------------------------------------------------
// Library encode.
// -----------------------------------------------------------------------------------------------------------
TEST_CASE("encode: every finite value round-trips exactly (-0 included), inf and NaN map per format") {
  for (const small_format& f : formats) {
    INFO("format ", std::string(f.label));
    std::uint64_t bad = 0;
    std::string first;
    for (std::uint64_t p = 0; p < pattern_count(f); ++p) {
      const element el = ref_element(f.t, p);
      if (el.c == cat::nan) continue;
      if (el.c == cat::pos_inf || el.c == cat::neg_inf) continue;
      const std::uint64_t back = f.lib_from_float(el.value);
      if (back != p && bad++ == 0) first = hex(p) + " -> " + hex(back);
    }
    INFO("first mismatch: ", first);
    CHECK(bad == 0);

    // NaN in -> a NaN pattern; +-inf in -> +-inf (or NaN for e4m3fn, which has no inf)
    CHECK(is_nan_pattern(f, f.lib_from_float(qnan())));
    CHECK(is_nan_pattern(f, f.lib_from_float(with_sign(qnan(), true))));
    CHECK(is_nan_pattern(f, f.lib_from_float(f64_from_bits(0x7FF0000000000001ull))));  // signalling NaN
    const std::uint64_t pi = f.lib_from_float(pos_inf());
    const std::uint64_t ni = f.lib_from_float(neg_inf());
    if (f.t == dtype::f8_e4m3fn) {
      CHECK(is_nan_pattern(f, pi));
      CHECK(is_nan_pattern(f, ni));
    } else {
      CHECK(ref_element(f.t, pi).c == cat::pos_inf);
      CHECK(ref_element(f.t, ni).c == cat::neg_inf);
    }
  }
}

TEST_CASE("encode: every midpoint rounds to the even neighbour, one double either side to the nearer one") {
  for (const small_format& f : formats) {
    INFO("format ", std::string(f.label));
    const ref_encoder enc(f);
    std::uint64_t bad = 0;
    std::string first;
    auto expect = [&](double x, std::uint64_t want, const char* what) {
      const std::uint64_t got = f.lib_from_float(x);
      // NaN patterns are compared by classification (any NaN pattern of the right sign will do)
      const bool ok = got == want || (is_nan_pattern(f, want) && is_nan_pattern(f, got) &&
                                      ((got ^ want) & sign_mask(f)) == 0);
      if (!ok && bad++ == 0) {
        std::ostringstream os;
        os.precision(17);
        os << what << " x=" << x << " want " << hex(want) << " got " << hex(got);
        first = os.str();
      }
    };
    // pairs (p, p+1) of consecutive non-negative values, the last pair being (max finite, overflow)
    for (std::uint64_t p = 0; p + 1 < enc.values.size(); ++p) {
      const double lo = enc.values[p], hi = enc.values[p + 1];
      const double mid = (lo + hi) / 2;  // exact
      const std::uint64_t even = (p % 2 == 0) ? p : p + 1;
      const std::uint64_t hi_pat = p + 1;  // for the last pair: the overflow pattern (inf / e4m3fn NaN)
      for (int s = 0; s < 2; ++s) {
        const std::uint64_t sg = s ? sign_mask(f) : 0;
        const double m = with_sign(mid, s != 0);
        expect(m, sg | even, "midpoint");
        expect(std::nextafter(m, s ? -1e300 : 1e300), sg | hi_pat, "above midpoint");
        expect(std::nextafter(m, 0.0), sg | p, "below midpoint");
        // the reference encoder must agree with the spelled-out rule (self-check)
        if (enc.encode(m) != (sg | even) && bad++ == 0) first = "reference encoder disagrees at " + hex(p);
      }
    }
    INFO("first mismatch: ", first);
    CHECK(bad == 0);
  }
}

TEST_CASE("encode: random doubles across the range match the reference encoder") {
  rng g(0x5EED0001);
  for (const small_format& f : formats) {
    INFO("format ", std::string(f.label));
    const ref_encoder enc(f);
    const int lo_exp = f.t == dtype::bf16 ? -140 : -30;
    const int hi_exp = f.t == dtype::bf16 ? 130 : 18;
    std::uint64_t bad = 0;
    std::string first;
    for (int i = 0; i < 200000; ++i) {
      const int e = lo_exp + static_cast<int>(g.below(static_cast<std::uint64_t>(hi_exp - lo_exp)));
      const double x = with_sign(std::ldexp(1.0 + g.uniform(), e), (g.next() & 1) != 0);
      const std::uint64_t want = enc.encode(x);
      const std::uint64_t got = f.lib_from_float(x);
      const bool ok = got == want || (is_nan_pattern(f, want) && is_nan_pattern(f, got));
      if (!ok && bad++ == 0) {
        std::ostringstream os;
        os.precision(17);
        os << "x=" << x << " want " << hex(want) << " got " << hex(got);
        first = os.str();
      }
    }
    // subnormal and tiny doubles (the huge end has its own test case below)
    const double specials[] = {4.9406564584124654e-324, 2.2250738585072014e-308, 1e-300, 1e-40};
    for (double x : specials) {
      for (int s = 0; s < 2; ++s) {
        const double y = with_sign(x, s != 0);
        const std::uint64_t want = enc.encode(y), got = f.lib_from_float(y);
        if (!(got == want || (is_nan_pattern(f, want) && is_nan_pattern(f, got))) && bad++ == 0)
          first = "special " + show_double(y) + " got " + hex(got) + " want " + hex(want);
      }
    }
    INFO("first mismatch: ", first);
    CHECK(bad == 0);
  }
}

TEST_CASE("encode: the largest doubles overflow to inf/NaN of the same sign") {
  // Doubles whose rounding at the format's quantum carries past 2^1024 (DBL_MAX, 1.9 * 2^1023) must overflow
  // like any other value above the format's range: +inf (-inf for negative input), NaN for e4m3fn.
  const double huge[] = {1e300, 1e308, std::ldexp(1.0, 1023), std::ldexp(1.9, 1023),
                         std::numeric_limits<double>::max()};
  for (const small_format& f : formats) {
    INFO("format ", std::string(f.label));
    const ref_encoder enc(f);
    for (double x : huge) {
      for (int s = 0; s < 2; ++s) {
        const double y = with_sign(x, s != 0);
        const std::uint64_t got = f.lib_from_float(y);
        const std::uint64_t want = enc.encode(y);
        INFO("x=", show_double(y), " got ", hex(got), " want ", hex(want));
        CHECK(((got & sign_mask(f)) != 0) == (s != 0));
        if (f.t == dtype::f8_e4m3fn)
          CHECK(is_nan_pattern(f, got));
        else
          CHECK(got == want);
      }
    }
  }
}

TEST_CASE("encode: the rounding boundaries of docs/formats.md") {
  using nanscope::bfloat16;
  using nanscope::float8_e4m3fn;
  using nanscope::float8_e5m2;
  using nanscope::half;
  const double two127 = std::ldexp(1.0, 127);

  SUBCASE("f16") {
    CHECK(half::from_float(65504.0).bits == 0x7BFF);
    CHECK(half::from_float(65519.99).bits == 0x7BFF);
    CHECK(half::from_float(std::nextafter(65520.0, 0.0)).bits == 0x7BFF);
    CHECK(half::from_float(65520.0).bits == 0x7C00);
    CHECK(half::from_float(-65520.0).bits == 0xFC00);
    CHECK(half::from_float(-65519.99).bits == 0xFBFF);
    CHECK(half::from_float(1e6).bits == 0x7C00);
    // underflow: |x| <= 2^-25 becomes (signed) zero, just above becomes the min subnormal
    CHECK(half::from_float(std::ldexp(1.0, -25)).bits == 0x0000);
    CHECK(half::from_float(-std::ldexp(1.0, -25)).bits == 0x8000);
    CHECK(half::from_float(std::nextafter(std::ldexp(1.0, -25), 1.0)).bits == 0x0001);
    CHECK(half::from_float(std::ldexp(1.0, -24)).bits == 0x0001);
    CHECK(half::from_float(3.0 * std::ldexp(1.0, -25)).bits == 0x0002);  // tie 1.5 ulp -> even (2)
    CHECK(half::from_float(std::ldexp(1.0, -14)).bits == 0x0400);
    CHECK(half::from_float(1.0 + std::ldexp(1.0, -11)).bits == 0x3C00);       // tie -> even
    CHECK(half::from_float(1.0 + 3 * std::ldexp(1.0, -11)).bits == 0x3C02);   // tie -> even (up)
  }
  SUBCASE("bf16") {
    const double max_bf16 = (2.0 - std::ldexp(1.0, -7)) * two127;
    const double boundary = (2.0 - std::ldexp(1.0, -8)) * two127;
    CHECK(bfloat16::from_float(max_bf16).bits == 0x7F7F);
    CHECK(bfloat16::from_float(std::nextafter(boundary, 0.0)).bits == 0x7F7F);
    CHECK(bfloat16::from_float(boundary).bits == 0x7F80);
    CHECK(bfloat16::from_float(-boundary).bits == 0xFF80);
    CHECK(bfloat16::from_float(static_cast<double>(std::numeric_limits<float>::max())).bits == 0x7F80);
    CHECK(bfloat16::from_float(std::ldexp(1.0, -134)).bits == 0x0000);
    CHECK(bfloat16::from_float(std::nextafter(std::ldexp(1.0, -134), 1.0)).bits == 0x0001);
    CHECK(bfloat16::from_float(std::ldexp(1.0, -126)).bits == 0x0080);
    CHECK(bfloat16::from_float(1.0 + std::ldexp(1.0, -8)).bits == 0x3F80);      // tie -> even
    CHECK(bfloat16::from_float(1.0 + 3 * std::ldexp(1.0, -8)).bits == 0x3F82);  // tie -> even (up)
  }
  SUBCASE("e4m3fn") {
    CHECK(float8_e4m3fn::from_float(448.0).bits == 0x7E);
    CHECK(float8_e4m3fn::from_float(464.0).bits == 0x7E);  // the tie rounds to 448 (even mantissa)
    CHECK(float8_e4m3fn::from_float(-464.0).bits == 0xFE);
    CHECK((float8_e4m3fn::from_float(464.0001).bits & 0x7F) == 0x7F);  // NaN
    CHECK((float8_e4m3fn::from_float(std::nextafter(464.0, 1000.0)).bits & 0x7F) == 0x7F);
    CHECK(float8_e4m3fn::from_float(-464.0001).bits == 0xFF);
    CHECK((float8_e4m3fn::from_float(1e9).bits & 0x7F) == 0x7F);
    CHECK(float8_e4m3fn::from_float(std::ldexp(1.0, -10)).bits == 0x00);
    CHECK(float8_e4m3fn::from_float(std::nextafter(std::ldexp(1.0, -10), 1.0)).bits == 0x01);
    CHECK(float8_e4m3fn::from_float(std::ldexp(1.0, -6)).bits == 0x08);
  }
  SUBCASE("e5m2") {
    CHECK(float8_e5m2::from_float(57344.0).bits == 0x7B);
    CHECK(float8_e5m2::from_float(61439.99).bits == 0x7B);
    CHECK(float8_e5m2::from_float(61440.0).bits == 0x7C);
    CHECK(float8_e5m2::from_float(-61440.0).bits == 0xFC);
    CHECK(float8_e5m2::from_float(std::ldexp(1.0, -17)).bits == 0x00);
    CHECK(float8_e5m2::from_float(std::nextafter(std::ldexp(1.0, -17), 1.0)).bits == 0x01);
    CHECK(float8_e5m2::from_float(std::ldexp(1.0, -14)).bits == 0x04);
  }
}

// -----------------------------------------------------------------------------------------------------------
// dtype_info facts.
// -----------------------------------------------------------------------------------------------------------
TEST_CASE("dtype_info: numeric facts of the float formats (docs/formats.md)") {
  struct facts {
    dtype t;
    unsigned bits;
    int eb, mb, bias;
    bool has_inf;
    nanscope::nan_encoding nan;
    double max_finite, min_normal, min_subnormal, overflow_threshold;
  };
  const double p2_127 = std::ldexp(1.0, 127);
  const facts table[] = {
      {dtype::f64, 64, 11, 52, 1023, true, nanscope::nan_encoding::ieee, std::numeric_limits<double>::max(),
       std::numeric_limits<double>::min(), std::numeric_limits<double>::denorm_min(), pos_inf()},
      {dtype::f32, 32, 8, 23, 127, true, nanscope::nan_encoding::ieee,
       static_cast<double>(std::numeric_limits<float>::max()), static_cast<double>(std::numeric_limits<float>::min()),
       static_cast<double>(std::numeric_limits<float>::denorm_min()), (2.0 - std::ldexp(1.0, -24)) * p2_127},
      {dtype::f16, 16, 5, 10, 15, true, nanscope::nan_encoding::ieee, 65504.0, std::ldexp(1.0, -14),
       std::ldexp(1.0, -24), 65520.0},
      {dtype::bf16, 16, 8, 7, 127, true, nanscope::nan_encoding::ieee, (2.0 - std::ldexp(1.0, -7)) * p2_127,
       std::ldexp(1.0, -126), std::ldexp(1.0, -133), (2.0 - std::ldexp(1.0, -8)) * p2_127},
      // e4m3fn: 464 itself rounds to 448, so the threshold is the first double above 464
      {dtype::f8_e4m3fn, 8, 4, 3, 7, false, nanscope::nan_encoding::all_ones_only, 448.0, std::ldexp(1.0, -6),
       std::ldexp(1.0, -9), std::nextafter(464.0, 1000.0)},
      {dtype::f8_e5m2, 8, 5, 2, 15, true, nanscope::nan_encoding::ieee, 57344.0, std::ldexp(1.0, -14),
       std::ldexp(1.0, -16), 61440.0},
  };
  for (const facts& x : table) {
    const nanscope::dtype_info& in = nanscope::info(x.t);
    INFO("dtype ", std::string(in.name));
    CHECK(in.id == x.t);
    CHECK(in.bits == x.bits);
    CHECK(in.is_float);
    CHECK(in.is_signed);
    CHECK(in.exponent_bits == x.eb);
    CHECK(in.mantissa_bits == x.mb);
    CHECK(in.exponent_bias == x.bias);
    CHECK(in.has_inf == x.has_inf);
    CHECK(in.nan == x.nan);
    CHECK(in.max_finite == x.max_finite);
    CHECK(in.min_normal == x.min_normal);
    CHECK(in.min_subnormal == x.min_subnormal);
    INFO("overflow_threshold lib=", in.overflow_threshold, " want=", x.overflow_threshold);
    CHECK(bits64(in.overflow_threshold) == bits64(x.overflow_threshold));
    CHECK(nanscope::is_float(x.t));
    CHECK(nanscope::size_of(x.t) == x.bits / 8);
  }
  // the approximate decimal values docs/formats.md quotes
  CHECK(nanscope::info(dtype::bf16).max_finite == doctest::Approx(3.3895e38).epsilon(1e-4));
  CHECK(nanscope::info(dtype::bf16).overflow_threshold == doctest::Approx(3.3961e38).epsilon(1e-4));
  CHECK(nanscope::info(dtype::f16).min_normal == doctest::Approx(6.10e-5).epsilon(1e-3));
  CHECK(nanscope::info(dtype::f16).min_subnormal == doctest::Approx(5.96e-8).epsilon(1e-3));
}

TEST_CASE("dtype_info: overflow_threshold agrees with the encoder (x at or above it overflows)") {
  for (const small_format& f : formats) {
    INFO("format ", std::string(f.label));
    const double th = nanscope::info(f.t).overflow_threshold;
    const std::uint64_t at = f.lib_from_float(th);
    const std::uint64_t below = f.lib_from_float(std::nextafter(th, 0.0));
    CHECK(at == f.max_finite_pattern + 1);     // overflow pattern (inf, or NaN for e4m3fn)
    CHECK(below == f.max_finite_pattern);      // still the max finite
    CHECK(f.ref(f.max_finite_pattern) == nanscope::info(f.t).max_finite);
    CHECK(f.ref(1) == nanscope::info(f.t).min_subnormal);
  }
}

TEST_CASE("dtype_info: TensorFlow enums, names, integer facts (docs/formats.md)") {
  struct row {
    dtype t;
    int tf;
    const char* name;
    const char* torch;
    unsigned bits;
    bool is_float, is_signed;
  };
  const row rows[] = {
      {dtype::f32, 1, "f32", "torch.float32", 32, true, true},
      {dtype::f64, 2, "f64", "torch.float64", 64, true, true},
      {dtype::i32, 3, "i32", "torch.int32", 32, false, true},
      {dtype::u8, 4, "u8", "torch.uint8", 8, false, false},
      {dtype::i16, 5, "i16", "torch.int16", 16, false, true},
      {dtype::i8, 6, "i8", "torch.int8", 8, false, true},
      {dtype::i64, 9, "i64", "torch.int64", 64, false, true},
      {dtype::boolean, 10, "bool", "torch.bool", 8, false, false},
      {dtype::bf16, 14, "bf16", "torch.bfloat16", 16, true, true},
      {dtype::u16, 17, "u16", "torch.uint16", 16, false, false},
      {dtype::f16, 19, "f16", "torch.float16", 16, true, true},
      {dtype::u32, 22, "u32", "torch.uint32", 32, false, false},
      {dtype::u64, 23, "u64", "torch.uint64", 64, false, false},
      {dtype::f8_e5m2, 24, "e5m2", "torch.float8_e5m2", 8, true, true},
      {dtype::f8_e4m3fn, 25, "e4m3fn", "torch.float8_e4m3fn", 8, true, true},
  };
  CHECK(sizeof(rows) / sizeof(rows[0]) == static_cast<std::size_t>(nanscope::dtype_count));
  for (const row& r : rows) {
    INFO("dtype ", std::string(r.name));
    const nanscope::dtype_info& in = nanscope::info(r.t);
    CHECK(in.tf_enum == r.tf);
    CHECK(nanscope::tf_dtype_enum(r.t) == r.tf);
    CHECK(std::string(in.name) == r.name);
    CHECK(std::string(nanscope::name(r.t)) == r.name);
    CHECK(std::string(in.torch_name) == r.torch);
    CHECK(in.bits == r.bits);
    CHECK(in.is_float == r.is_float);
    CHECK(in.is_signed == r.is_signed);
    CHECK(nanscope::is_float(r.t) == r.is_float);
    if (!r.is_float) {
      CHECK(in.nan == nanscope::nan_encoding::none);
      CHECK_FALSE(in.has_inf);
      CHECK(in.min_normal == 0.0);
      CHECK(in.min_subnormal == 0.0);
    }
  }
  CHECK(nanscope::info(dtype::i8).max_finite == 127.0);
  CHECK(nanscope::info(dtype::u8).max_finite == 255.0);
  CHECK(nanscope::info(dtype::i32).max_finite == 2147483647.0);
  CHECK(nanscope::info(dtype::u16).max_finite == 65535.0);
  CHECK(nanscope::info(dtype::boolean).max_finite == 1.0);
  CHECK_THROWS_AS(nanscope::info(static_cast<dtype>(nanscope::dtype_count)), nanscope::error);
  CHECK_THROWS_AS(nanscope::info(static_cast<dtype>(200)), nanscope::error);
}

TEST_CASE("dtype_of: C++ element types map to dtypes") {
  CHECK(nanscope::dtype_of<float>() == dtype::f32);
  CHECK(nanscope::dtype_of<double>() == dtype::f64);
  CHECK(nanscope::dtype_of<const float>() == dtype::f32);
  CHECK(nanscope::dtype_of<nanscope::half>() == dtype::f16);
  CHECK(nanscope::dtype_of<nanscope::bfloat16>() == dtype::bf16);
  CHECK(nanscope::dtype_of<nanscope::float8_e4m3fn>() == dtype::f8_e4m3fn);
  CHECK(nanscope::dtype_of<nanscope::float8_e5m2>() == dtype::f8_e5m2);
  CHECK(nanscope::dtype_of<bool>() == dtype::boolean);
  CHECK(nanscope::dtype_of<std::int8_t>() == dtype::i8);
  CHECK(nanscope::dtype_of<std::uint8_t>() == dtype::u8);
  CHECK(nanscope::dtype_of<std::int16_t>() == dtype::i16);
  CHECK(nanscope::dtype_of<std::uint16_t>() == dtype::u16);
  CHECK(nanscope::dtype_of<std::int32_t>() == dtype::i32);
  CHECK(nanscope::dtype_of<std::uint32_t>() == dtype::u32);
  CHECK(nanscope::dtype_of<std::int64_t>() == dtype::i64);
  CHECK(nanscope::dtype_of<std::uint64_t>() == dtype::u64);
  CHECK(nanscope::dtype_of<long long>() == dtype::i64);
  CHECK(nanscope::dtype_of<unsigned long long>() == dtype::u64);
  CHECK(sizeof(nanscope::half) == 2);
  CHECK(sizeof(nanscope::bfloat16) == 2);
  CHECK(sizeof(nanscope::float8_e4m3fn) == 1);
  CHECK(sizeof(nanscope::float8_e5m2) == 1);
}
