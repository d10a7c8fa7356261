// nanscope tests — margins_test.cpp: nanscope::margins() against an independent reference cast.
//
// The reference here does not use nanscope's encode/decode or dtype table: every source element is decoded
// from its own bit fields with std::ldexp, then *cast* to each target format with a round-to-nearest-even
// encoder written below on doubles (std::frexp / std::ldexp / std::floor) and the result classified as
// overflow (inf/NaN), subnormal, zero or normal. Sources: every f16 and bf16 bit pattern, every fp8 pattern,
// f32 and f64 values at and around every limit of every target, random bit patterns; on every ISA.
// Everything is -ffast-math proof: classification by bits, no std::isnan, and the doubles the reference does
// arithmetic on are never subnormal (double subnormals are classified by their bits before any arithmetic).
#include "support/compare.hpp"
#include "support/reference.hpp"
#include "support/views.hpp"

#include <nanscope/check.hpp>
#include <nanscope/margins.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using nanscope::dtype;
using nanscope::isa;
using namespace nstest;

const isa margin_isas[] = {isa::automatic, isa::scalar, isa::avx2, isa::avx512};

// ---------------------------------------------------------------------------------------------------------
// Formats, written out here (not taken from nanscope::info).
// ---------------------------------------------------------------------------------------------------------
struct ref_format {
  dtype id;
  int eb;   // exponent bits
  int mb;   // fraction bits
  bool fn;  // e4m3fn: no inf, NaN only S.1111.111, so the all-ones exponent holds finite values
  int bias() const { return (1 << (eb - 1)) - 1; }
  int emin() const { return 1 - bias(); }
  int emax() const { return fn ? (1 << eb) - 1 - bias() : (1 << eb) - 2 - bias(); }
  long long max_significand() const { return fn ? (2LL << mb) - 2 : (2LL << mb) - 1; }  // at emax, 1.m as integer
  double max_finite() const { return std::ldexp(static_cast<double>(max_significand()), emax() - mb); }
  double min_normal() const { return std::ldexp(1.0, emin()); }
  double min_subnormal() const { return std::ldexp(1.0, emin() - mb); }
};
const ref_format targets[4] = {{dtype::f16, 5, 10, false}, {dtype::bf16, 8, 7, false}, {dtype::f8_e4m3fn, 4, 3, true},
                        {dtype::f8_e5m2, 5, 2, false}};
const ref_format f32_fmt{dtype::f32, 8, 23, false};
const ref_format f64_fmt{dtype::f64, 11, 52, false};

const ref_format& source_fmt(dtype t) {
  switch (t) {
    case dtype::f16: return targets[0];
    case dtype::bf16: return targets[1];
    case dtype::f8_e4m3fn: return targets[2];
    case dtype::f8_e5m2: return targets[3];
    case dtype::f32: return f32_fmt;
    default: return f64_fmt;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Reference decode (bit fields + ldexp) and classification of the source element.
// ---------------------------------------------------------------------------------------------------------
enum class src_kind { zero, finite, inf, nan };
struct src_elem {
  src_kind kind = src_kind::zero;
  double mag = 0.0;  // |value| for zero/finite/inf
};
src_elem decode_ref(const ref_format& f, std::uint64_t raw) {
  const std::uint64_t mmask = (std::uint64_t{1} << f.mb) - 1;
  const std::uint64_t emask = (std::uint64_t{1} << f.eb) - 1;
  const std::uint64_t e = (raw >> f.mb) & emask;
  const std::uint64_t m = raw & mmask;
  src_elem s;
  if (f.fn ? (e == emask && m == mmask) : (e == emask && m != 0)) {
    s.kind = src_kind::nan;
    return s;
  }
  if (!f.fn && e == emask) {
    s.kind = src_kind::inf;
    s.mag = pos_inf();
    return s;
  }
  if (e == 0 && m == 0) return s;
  s.kind = src_kind::finite;
  if (f.id == dtype::f64) {
    s.mag = f64_from_bits(raw & k_abs64);  // f64 subnormals stay bits-only: see cast_class
    return s;
  }
  // every non-f64 source value is a normal double: ldexp on integers is exact and never meets FTZ/DAZ
  s.mag = e == 0 ? std::ldexp(static_cast<double>(m), f.emin() - f.mb)
                 : std::ldexp(static_cast<double>(m + (std::uint64_t{1} << f.mb)), static_cast<int>(e) - f.bias() - f.mb);
  return s;
}

// ---------------------------------------------------------------------------------------------------------
// The reference cast: round |x| (finite, non-zero) to nearest even in format t, classify the result.
// ---------------------------------------------------------------------------------------------------------
enum class cast_class { zero, subnormal, normal, overflow };
cast_class cast_ref(double mag, const ref_format& t) {
  const std::uint64_t b = bits64(mag) & k_abs64;
  if (b == 0) return cast_class::zero;
  if ((b >> 52) == 0) return cast_class::zero;  // f64 subnormal (< 2^-1022): far below half of every min_subnormal
  int e2 = 0;
  (void)std::frexp(mag, &e2);  // mag = f * 2^e2, f in [0.5, 1)
  int E = e2 - 1;              // mag in [2^E, 2^(E+1))
  if (E < t.emin()) E = t.emin();
  const double scaled = std::ldexp(mag, t.mb - E);  // mag / quantum, in (0, 2^(mb+1)); a normal double
  double q = std::floor(scaled);
  const double frac = scaled - q;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(q, 2.0) != 0.0)) q += 1.0;
  auto sig = static_cast<long long>(q);
  if (sig == 0) return cast_class::zero;
  if (sig == (2LL << t.mb)) {  // rounded up into the next binade
    sig >>= 1;
    ++E;
  }
  if (sig < (1LL << t.mb)) return cast_class::subnormal;  // only possible at E == emin
  if (E > t.emax() || (E == t.emax() && sig > t.max_significand())) return cast_class::overflow;
  return cast_class::normal;
}

// ---------------------------------------------------------------------------------------------------------
// Reference margins of a list of raw source elements.
// ---------------------------------------------------------------------------------------------------------
struct ref_margins {
  std::uint64_t count = 0, zero = 0, inf = 0, nan = 0;
  std::uint64_t amax_bits = 0;  // f64 bits of max |x| over non-NaN
  std::uint64_t overflow[4] = {}, subnormal[4] = {}, underflow[4] = {};
  double abs_max() const { return count - nan == 0 ? qnan() : f64_from_bits(amax_bits); }
};

struct elem_class {
  src_kind kind;
  std::uint64_t mag_bits;
  cast_class c[4];
};
elem_class classify(dtype src, std::uint64_t raw) {
  const src_elem s = decode_ref(source_fmt(src), raw);
  elem_class ec{s.kind, bits64(s.mag) & k_abs64, {cast_class::zero, cast_class::zero, cast_class::zero, cast_class::zero}};
  if (s.kind == src_kind::finite)
    for (int i = 0; i < 4; ++i) ec.c[i] = cast_ref(s.mag, targets[i]);
  return ec;
}
void add(ref_margins& r, const elem_class& ec, std::uint64_t times = 1) {
  r.count += times;
  switch (ec.kind) {
    case src_kind::zero: r.zero += times; return;
    case src_kind::nan: r.nan += times; return;
    case src_kind::inf: r.inf += times; break;
    case src_kind::finite:
      for (int i = 0; i < 4; ++i) {
        if (ec.c[i] == cast_class::overflow) r.overflow[i] += times;
        if (ec.c[i] == cast_class::subnormal) r.subnormal[i] += times;
        if (ec.c[i] == cast_class::zero) r.underflow[i] += times;
      }
      break;
  }
  if (ec.mag_bits > r.amax_bits) r.amax_bits = ec.mag_bits;
}
ref_margins reference_margins(dtype src, const std::vector<std::uint64_t>& raws) {
  ref_margins r;
  for (std::uint64_t raw : raws) add(r, classify(src, raw));
  return r;
}

/// Headroom the slow way: long double log2 of the ratio (x87 long double does not flush).
double ref_headroom(double abs_max, const ref_format& t) {
  const std::uint64_t a = bits64(abs_max) & k_abs64;
  if (a > k_inf64) return qnan();
  if (a == k_inf64) return neg_inf();
  if (a == 0) return pos_inf();
  long double x;
  if ((a >> 52) == 0)
    x = std::ldexp(static_cast<long double>(a), -1074);
  else
    x = static_cast<long double>(f64_from_bits(a));
  return static_cast<double>(std::log2(static_cast<long double>(t.max_finite()) / x));
}

bool headroom_ok(double lib, double ref) {
  if (!is_finite(ref) || !is_finite(lib)) return same_bits(lib, ref) || (is_nan(lib) && is_nan(ref));
  const double d = lib - ref;
  return (d < 0 ? -d : d) <= 1e-12 * (1.0 + (ref < 0 ? -ref : ref));
}

std::string label(dtype src, isa i, const std::string& what) {
  return std::string(nanscope::name(src)) + " source, isa " + nanscope::name(i) + ": " + what;
}

void expect_margins(const nanscope::margins_result& r, const ref_margins& ref, const std::string& what) {
  INFO(what);
  CHECK(r.count == ref.count);
  CHECK(r.zero == ref.zero);
  CHECK(r.inf == ref.inf);
  CHECK(r.nan == ref.nan);
  CHECK_MESSAGE(same_bits(r.abs_max, ref.abs_max()), show(r.abs_max), " vs ", show(ref.abs_max()));
  for (int i = 0; i < 4; ++i) {
    const nanscope::format_margin& f = r.formats[static_cast<std::size_t>(i)];
    const std::string target_name = nanscope::name(targets[i].id);
    INFO("target ", target_name);
    CHECK(f.target == targets[i].id);
    CHECK(&r[targets[i].id] == &f);
    CHECK(same_bits(f.max_finite, targets[i].max_finite()));
    CHECK(f.overflow == ref.overflow[i]);
    CHECK(f.subnormal == ref.subnormal[i]);
    CHECK(f.underflow_to_zero == ref.underflow[i]);
    CHECK(f.would_overflow() == (ref.overflow[i] != 0));
    const double h = ref_headroom(ref.abs_max(), targets[i]);
    CHECK_MESSAGE(headroom_ok(f.headroom_bits, h), show(f.headroom_bits), " vs ", show(h));
  }
}


/// margins() of raw elements of dtype src on one ISA, contiguous.
nanscope::margins_result run_raw(dtype src, const std::vector<std::uint64_t>& raws, isa i) {
  const auto n = static_cast<std::int64_t>(raws.size());
  const nanscope::margins_options o = nanscope::margins_options{}.with_isa(i);
  switch (nanscope::size_of(src)) {
    case 1: {
      const auto b = narrow<std::uint8_t>(raws);
      return nanscope::margins(nanscope::tensor_view::flat(b.data(), src, n), o);
    }
    case 2: {
      const auto b = narrow<std::uint16_t>(raws);
      return nanscope::margins(nanscope::tensor_view::flat(b.data(), src, n), o);
    }
    case 4: {
      const auto b = narrow<std::uint32_t>(raws);
      return nanscope::margins(nanscope::tensor_view::flat(b.data(), src, n), o);
    }
    default: return nanscope::margins(nanscope::tensor_view::flat(raws.data(), src, n), o);
  }
}

void check_raw(dtype src, const std::vector<std::uint64_t>& raws, const std::string& what) {
  const ref_margins ref = reference_margins(src, raws);
  for (isa i : margin_isas) expect_margins(run_raw(src, raws, i), ref, label(src, i, what));
}

/// Every bit pattern of a 8- or 16-bit source: all in order, shuffled copies across the SIMD counters' flush
/// blocks, and each pattern alone repeated 37 times (whole vectors plus a tail), against the per-element
/// reference.
void exhaustive(dtype src) {
  const std::uint64_t np = std::uint64_t{1} << (8 * nanscope::size_of(src));
  std::vector<std::uint64_t> all(np);
  for (std::uint64_t p = 0; p < np; ++p) all[p] = p;
  check_raw(src, all, "every pattern in order");

  std::vector<std::uint64_t> tiled;
  rng g(0x5eed + np);
  const int copies = np == 256 ? 130 : static_cast<int>(scaled(3, 2));  // past 255 x 64 and 4096 x 32 lanes
  for (int c = 0; c < copies; ++c) {
    std::vector<std::uint64_t> s = all;
    shuffle(s, g);
    tiled.insert(tiled.end(), s.begin(), s.end());
  }
  check_raw(src, tiled, "shuffled copies of every pattern");

  // one pattern at a time: a miscount of any single pattern in any ISA shows here
  std::vector<elem_class> cls(np);
  for (std::uint64_t p = 0; p < np; ++p) cls[p] = classify(src, p);
  const std::uint64_t stride = quick ? 7 : 1;
  for (isa i : margin_isas) {
    bool all_ok = true;
    std::uint64_t first_bad = 0;
    std::string bad_what;
    for (std::uint64_t p = 0; p < np; p += stride) {
      const std::vector<std::uint64_t> rep(37, p);
      const nanscope::margins_result r = run_raw(src, rep, i);
      ref_margins ref;
      add(ref, cls[p], 37);
      bool ok = r.count == ref.count && r.zero == ref.zero && r.inf == ref.inf && r.nan == ref.nan &&
                same_bits(r.abs_max, ref.abs_max());
      for (int t = 0; t < 4; ++t) {
        const nanscope::format_margin& f = r.formats[static_cast<std::size_t>(t)];
        ok = ok && f.overflow == ref.overflow[t] && f.subnormal == ref.subnormal[t] &&
             f.underflow_to_zero == ref.underflow[t];
      }
      if (!ok && all_ok) {
        all_ok = false;
        first_bad = p;
        expect_margins(r, ref, label(src, i, "single pattern " + std::to_string(p)));
      }
    }
    CHECK_MESSAGE(all_ok, label(src, i, "first wrong single pattern: "), first_bad);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Interesting magnitudes: every limit of every target, halfway points, their neighbours.
// ---------------------------------------------------------------------------------------------------------
std::vector<double> limit_values() {
  std::vector<double> v;
  for (const ref_format& t : targets) {
    const double s = t.min_subnormal(), n = t.min_normal(), mx = t.max_finite();
    const double ulp_max = std::ldexp(1.0, t.emax() - t.mb);
    const double add[] = {
        s / 2, s, 1.5 * s, 2.5 * s, 3 * s / 4, s * 0.75, 2 * s, n - s, n - s / 2, n - s / 4, n - 3 * s / 4, n,
        n + s, n + s / 2, mx, mx - ulp_max, mx - ulp_max / 2, mx + ulp_max / 4, mx + ulp_max / 2,
        mx + 3 * ulp_max / 4, mx + ulp_max, 2 * mx, std::ldexp(1.0, t.emax()), std::ldexp(1.0, t.emax() + 1),
        s / 4, s / 8, std::ldexp(1.0, t.emin() - t.mb - 2) * 3};
    v.insert(v.end(), std::begin(add), std::end(add));
  }
  const double more[] = {464.0, 448.0, 480.0, 456.0, 472.0, 65504.0, 65520.0, 65536.0, 57344.0, 61440.0, 1e4,
                         1.0,   0.5,   3.0,   1e-3,  1e-5,  1e-7,    1e-8,    1e-30,   1e-38,   1e-40,   1e-45,
                         3.3e38, 3.4e38, 3.39e38};
  v.insert(v.end(), std::begin(more), std::end(more));
  return v;
}

/// The f32 patterns within `radius` ulps of each magnitude (rounded to f32 by bits, both signs).
std::vector<std::uint64_t> f32_neighbourhoods(const std::vector<double>& mags, int radius) {
  std::vector<std::uint64_t> out;
  for (double m : mags) {
    if ((bits64(m) >> 52) == 0 || m > 3.4028234663852886e38) continue;
    // the f32 nearest below or at m, by bits: m = f * 2^e exactly in double
    int e2 = 0;
    const double f = std::frexp(m, &e2);
    std::uint32_t base;
    const int E = e2 - 1;
    if (E >= -126) {
      const auto sig = static_cast<std::uint64_t>(std::ldexp(f, 24));  // 24-bit significand, truncated
      base = (static_cast<std::uint32_t>(E + 127) << 23) | (static_cast<std::uint32_t>(sig) & 0x7FFFFFu);
    } else {
      base = static_cast<std::uint32_t>(std::ldexp(m, 149));  // subnormal f32: m / 2^-149, truncated
    }
    for (int d = -radius; d <= radius; ++d) {
      const std::int64_t p = static_cast<std::int64_t>(base) + d;
      if (p < 0 || p >= 0x7F800000) continue;
      out.push_back(static_cast<std::uint64_t>(p));
      out.push_back(static_cast<std::uint64_t>(p) | 0x80000000u);
    }
  }
  return out;
}
/// The f64 patterns within `radius` ulps of each magnitude (both signs).
std::vector<std::uint64_t> f64_neighbourhoods(const std::vector<double>& mags, int radius) {
  std::vector<std::uint64_t> out;
  for (double m : mags) {
    const std::uint64_t base = bits64(m);
    for (int d = -radius; d <= radius; ++d) {
      const std::int64_t p = static_cast<std::int64_t>(base) + d;
      if (p < 0) continue;
      out.push_back(static_cast<std::uint64_t>(p));
      out.push_back(static_cast<std::uint64_t>(p) | 0x8000000000000000ull);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("margins: the reference cast agrees with the published limits (docs/formats.md)") {
  const ref_format& h = targets[0];
  const ref_format& b = targets[1];
  const ref_format& e4 = targets[2];
  const ref_format& e5 = targets[3];
  CHECK(h.max_finite() == 65504.0);
  CHECK(e4.max_finite() == 448.0);
  CHECK(e5.max_finite() == 57344.0);
  CHECK(b.max_finite() == std::ldexp(255.0, 120));
  CHECK(cast_ref(65519.0, h) == cast_class::normal);
  CHECK(cast_ref(65520.0, h) == cast_class::overflow);
  CHECK(cast_ref(464.0, e4) == cast_class::normal);
  CHECK(cast_ref(std::nextafter(464.0, 1e9), e4) == cast_class::overflow);
  CHECK(cast_ref(61439.0, e5) == cast_class::normal);
  CHECK(cast_ref(61440.0, e5) == cast_class::overflow);
  CHECK(cast_ref(std::ldexp(511.0, 119), b) == cast_class::overflow);  // (2 - 2^-8) * 2^127
  CHECK(cast_ref(std::ldexp(1.0, -25), h) == cast_class::zero);       // exactly half of min_subnormal
  CHECK(cast_ref(std::nextafter(std::ldexp(1.0, -25), 1.0), h) == cast_class::subnormal);
  CHECK(cast_ref(std::ldexp(1.0, -14) - std::ldexp(1.0, -25), h) == cast_class::normal);  // tie -> min_normal
  CHECK(cast_ref(std::nextafter(std::ldexp(1.0, -14) - std::ldexp(1.0, -25), 0.0), h) == cast_class::subnormal);
  CHECK(cast_ref(std::ldexp(1.0, -134), b) == cast_class::zero);
  CHECK(cast_ref(std::ldexp(3.0, -135), b) == cast_class::subnormal);
  CHECK(cast_ref(std::ldexp(1.0, -10), e4) == cast_class::zero);
  CHECK(cast_ref(std::ldexp(1.0, -17), e5) == cast_class::zero);
}

TEST_CASE("margins: every f16 bit pattern, every ISA, every target") { exhaustive(dtype::f16); }
TEST_CASE("margins: every bf16 bit pattern, every ISA, every target") { exhaustive(dtype::bf16); }
TEST_CASE("margins: every fp8 e4m3fn and e5m2 bit pattern as sources") {
  exhaustive(dtype::f8_e4m3fn);
  exhaustive(dtype::f8_e5m2);
}

TEST_CASE("margins: f32 values at and around every limit, each alone and all together") {
  const std::vector<std::uint64_t> raws = f32_neighbourhoods(limit_values(), 3);
  REQUIRE(raws.size() > 1000);
  check_raw(dtype::f32, raws, "all neighbourhoods");
  // each value alone, 21 copies (SIMD body + tail)
  for (isa i : margin_isas) {
    int bad = 0;
    for (std::uint64_t p : raws) {
      const std::vector<std::uint64_t> rep(21, p);
      const nanscope::margins_result r = run_raw(dtype::f32, rep, i);
      ref_margins ref;
      add(ref, classify(dtype::f32, p), 21);
      bool ok = same_bits(r.abs_max, ref.abs_max());
      for (int t = 0; t < 4; ++t) {
        const nanscope::format_margin& f = r.formats[static_cast<std::size_t>(t)];
        ok = ok && f.overflow == ref.overflow[t] && f.subnormal == ref.subnormal[t] &&
             f.underflow_to_zero == ref.underflow[t];
      }
      if (!ok && bad++ < 3) expect_margins(r, ref, label(dtype::f32, i, "single value " + show(f32_from_bits(static_cast<std::uint32_t>(p)))));
    }
    CHECK_MESSAGE(bad == 0, label(dtype::f32, i, "wrong single values: "), bad);
  }
}

TEST_CASE("margins: f32 specials and random bit patterns across the flush blocks") {
  std::vector<std::uint64_t> raws = {0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFFC00001u,
                                     0x7F800001u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu, 0xFF7FFFFFu, 0x00800000u};
  rng g(42);
  const std::size_t n = scaled(200003, 70001);
  for (std::size_t k = 0; k < n; ++k) {
    std::uint64_t b = g.next() & 0xFFFFFFFFu;
    if (k % 3 == 0) {  // concentrate exponents near the targets' ranges
      const std::uint64_t e = g.below(160) + 127u - 140u;  // 2^-140 .. 2^19
      b = (b & 0x807FFFFFu) | (e << 23);
    }
    raws.push_back(b);
  }
  check_raw(dtype::f32, raws, "random");
}

TEST_CASE("margins: f64 sources at and around every limit, f64 subnormals and huge values") {
  std::vector<double> mags = limit_values();
  const double extra[] = {1e300, 1.7976931348623157e308, 4.9406564584124654e-324, 2.2250738585072014e-308,
                          1e-310, 1e-200, std::ldexp(1.0, -150), std::ldexp(1.0, -149), std::ldexp(1.0, -126)};
  mags.insert(mags.end(), std::begin(extra), std::end(extra));
  std::vector<std::uint64_t> raws = f64_neighbourhoods(mags, 2);
  const std::uint64_t specials[] = {0, 0x8000000000000000ull, k_inf64, 0xFFF0000000000000ull, 0x7FF8000000000000ull,
                                    0xFFF0000000000001ull, 1};
  raws.insert(raws.end(), std::begin(specials), std::end(specials));
  check_raw(dtype::f64, raws, "neighbourhoods");
  for (isa i : margin_isas) {
    int bad = 0;
    for (std::uint64_t p : raws) {
      const std::vector<std::uint64_t> rep(11, p);
      const nanscope::margins_result r = run_raw(dtype::f64, rep, i);
      ref_margins ref;
      add(ref, classify(dtype::f64, p), 11);
      bool ok = same_bits(r.abs_max, ref.abs_max()) && r.nan == ref.nan && r.inf == ref.inf && r.zero == ref.zero;
      for (int t = 0; t < 4; ++t) {
        const nanscope::format_margin& f = r.formats[static_cast<std::size_t>(t)];
        ok = ok && f.overflow == ref.overflow[t] && f.subnormal == ref.subnormal[t] &&
             f.underflow_to_zero == ref.underflow[t];
      }
      if (!ok && bad++ < 3) expect_margins(r, ref, label(dtype::f64, i, "single value " + show(f64_from_bits(p))));
    }
    CHECK_MESSAGE(bad == 0, label(dtype::f64, i, "wrong single values: "), bad);
  }
  // random f64 bit patterns, many around the targets' exponents
  rng g(7);
  std::vector<std::uint64_t> rnd;
  for (std::size_t k = 0; k < scaled(50000, 20000); ++k) {
    std::uint64_t b = g.next();
    if (k % 2 == 0) b = (b & 0x800FFFFFFFFFFFFFull) | ((g.below(160) + 1023u - 140u) << 52);
    rnd.push_back(b);
  }
  check_raw(dtype::f64, rnd, "random");
}

namespace {
/// Lays `count` logical elements (raws repeated cyclically) out with layout l, poison in the gaps, and checks
/// margins() of the strided view against the reference of the logical sequence, on every ISA.
template <class U>
void check_layout(dtype src, const std::vector<std::uint64_t>& raws, const layout& l, const std::vector<U>& poison) {
  std::vector<std::uint64_t> logical_raws(static_cast<std::size_t>(l.numel()));
  for (std::size_t k = 0; k < logical_raws.size(); ++k) logical_raws[k] = raws[(k * 7 + 3) % raws.size()];
  const strided_tensor<U> st = scatter(narrow<U>(logical_raws), src, l, poison);
  // the view's logical elements by support's own odometer walk (broadcast views repeat memory elements)
  const ref_margins ref = reference_margins(src, logical_raw(st.view));
  for (isa i : margin_isas)
    expect_margins(nanscope::margins(st.view, nanscope::margins_options{}.with_isa(i)), ref,
                   label(src, i, "layout " + l.label));
}
std::vector<layout> test_layouts() {
  return {make_layout("every other element", {40001}, {2}),
          make_layout("rows with padding", {301, 97}, {100, 1}),
          make_layout("transposed (dense permutation)", {97, 301}, {1, 97}),
          make_layout("inner stride 3, 3-D", {5, 61, 67}, {61 * 67 * 3 + 5, 67 * 3, 3}),
          make_layout("broadcast rows", {4, 9001}, {0, 1}),
          make_layout("rank 0", {}, {}),
          make_layout("inner broadcast", {3, 17, 5}, {17, 1, 0})};
}
}  // namespace

TEST_CASE("margins: strided, permuted and broadcast views equal the reference of their logical elements") {
  rng g(99);
  SUBCASE("f32") {
    std::vector<std::uint64_t> raws = f32_neighbourhoods(limit_values(), 2);
    for (int k = 0; k < 1000; ++k) raws.push_back(g.next() & 0xFFFFFFFFu);
    const std::vector<std::uint32_t> poison = {0x7FC00000u, 0x7F800000u, 0x7F7FFFFFu, 0x00000001u, 0x3F800000u};
    for (const layout& l : test_layouts()) check_layout<std::uint32_t>(dtype::f32, raws, l, poison);
  }
  SUBCASE("f16 and bf16") {
    std::vector<std::uint64_t> raws(65536);
    for (std::uint64_t p = 0; p < raws.size(); ++p) raws[p] = p;
    const std::vector<std::uint16_t> poison = {0x7E00u, 0x7C00u, 0x0001u, 0x7BFFu, 0x7F80u};
    for (const layout& l : test_layouts()) {
      check_layout<std::uint16_t>(dtype::f16, raws, l, poison);
      check_layout<std::uint16_t>(dtype::bf16, raws, l, poison);
    }
  }
  SUBCASE("f64") {
    std::vector<std::uint64_t> raws = f64_neighbourhoods(limit_values(), 1);
    const std::vector<std::uint64_t> poison = {0x7FF8000000000000ull, k_inf64, 1, 0x47EFFFFFE0000000ull};
    for (const layout& l : test_layouts()) check_layout<std::uint64_t>(dtype::f64, raws, l, poison);
  }
  SUBCASE("fp8") {
    std::vector<std::uint64_t> raws(256);
    for (std::uint64_t p = 0; p < raws.size(); ++p) raws[p] = p;
    const std::vector<std::uint8_t> poison = {0x7Fu, 0x7Cu, 0x01u, 0x7Eu};
    for (const layout& l : test_layouts()) {
      check_layout<std::uint8_t>(dtype::f8_e4m3fn, raws, l, poison);
      check_layout<std::uint8_t>(dtype::f8_e5m2, raws, l, poison);
    }
  }
}

TEST_CASE("margins: empty tensors, rank 0, all-NaN, all-zero") {
  const float none[1] = {0.0f};
  for (isa i : margin_isas) {
    const nanscope::margins_options o = nanscope::margins_options{}.with_isa(i);
    for (const nanscope::tensor_view& v : {nanscope::tensor_view::contiguous(none, dtype::f32, {0}),
                                           nanscope::tensor_view::contiguous(none, dtype::f16, {3, 0, 2}),
                                           nanscope::tensor_view::contiguous(nullptr, dtype::f64, {0})}) {
      const nanscope::margins_result r = nanscope::margins(v, o);
      CHECK(r.count == 0);
      CHECK(r.rank == v.rank);
      CHECK(is_nan(r.abs_max));
      for (const nanscope::format_margin& f : r.formats) {
        CHECK(f.overflow + f.subnormal + f.underflow_to_zero == 0);
        CHECK(is_nan(f.headroom_bits));
      }
    }
    const float scalar = 70000.0f;
    const nanscope::margins_result s = nanscope::margins(nanscope::tensor_view::contiguous(&scalar, dtype::f32, {}), o);
    CHECK(s.count == 1);
    CHECK(s.rank == 0);
    CHECK(s.abs_max == 70000.0);
    CHECK(s[dtype::f16].overflow == 1);
    CHECK(s[dtype::bf16].overflow == 0);

    const std::vector<float> nans(40, qnan_f());
    const nanscope::margins_result rn = nanscope::margins(nanscope::view_of(nans.data(), nans.size()), o);
    CHECK(rn.nan == 40);
    CHECK(is_nan(rn.abs_max));
    CHECK(is_nan(rn[dtype::f16].headroom_bits));
    CHECK(rn[dtype::f16].overflow == 0);

    const std::vector<float> zeros(40, -0.0f);
    const nanscope::margins_result rz = nanscope::margins(nanscope::view_of(zeros.data(), zeros.size()), o);
    CHECK(rz.zero == 40);
    CHECK(same_bits(rz.abs_max, 0.0));
    CHECK(same_bits(rz[dtype::f8_e4m3fn].headroom_bits, pos_inf()));
    CHECK(rz[dtype::f16].underflow_to_zero == 0);

    const std::vector<float> with_inf = {1.0f, neg_inf_f(), qnan_f(), 2.0f};
    const nanscope::margins_result ri = nanscope::margins(nanscope::view_of(with_inf.data(), with_inf.size()), o);
    CHECK(ri.inf == 1);
    CHECK(ri.nan == 1);
    CHECK(same_bits(ri.abs_max, pos_inf()));
    CHECK(same_bits(ri[dtype::bf16].headroom_bits, neg_inf()));
    CHECK(ri[dtype::f16].overflow == 0);  // inf is not counted: it is inf already
  }
}

TEST_CASE("margins: headroom_bits") {
  CHECK(nanscope::headroom_bits(1e4, dtype::f16) == doctest::Approx(std::log2(65504.0 / 1e4)).epsilon(1e-14));
  CHECK(nanscope::headroom_bits(1e4, dtype::f16) == doctest::Approx(2.7115).epsilon(1e-4));
  CHECK(nanscope::headroom_bits(448.0, dtype::f8_e4m3fn) == 0.0);
  CHECK(nanscope::headroom_bits(-448.0, dtype::f8_e4m3fn) == 0.0);  // sign ignored
  CHECK(nanscope::headroom_bits(57344.0 / 8, dtype::f8_e5m2) == 3.0);
  CHECK(nanscope::headroom_bits(65504.0 * 4, dtype::f16) == -2.0);
  CHECK(nanscope::headroom_bits(1.0, dtype::bf16) == doctest::Approx(128.0 - std::log2(256.0 / 255.0)).epsilon(1e-14));
  CHECK(nanscope::headroom_bits(1.0, dtype::f32) == doctest::Approx(128.0).epsilon(1e-9));
  CHECK(same_bits(nanscope::headroom_bits(0.0, dtype::f16), pos_inf()));
  CHECK(same_bits(nanscope::headroom_bits(-0.0, dtype::f16), pos_inf()));
  CHECK(same_bits(nanscope::headroom_bits(pos_inf(), dtype::f16), neg_inf()));
  CHECK(is_nan(nanscope::headroom_bits(qnan(), dtype::f16)));
  // subnormal abs_max (exact under denormals-are-zero too): log2(448) + 1074
  CHECK(nanscope::headroom_bits(f64_from_bits(1), dtype::f8_e4m3fn) ==
        doctest::Approx(std::log2(448.0) + 1074.0).epsilon(1e-15));
  CHECK(nanscope::headroom_bits(f64_from_bits(3), dtype::f16) ==
        doctest::Approx(std::log2(65504.0 / 3.0) + 1074.0).epsilon(1e-15));
  CHECK_THROWS_AS(nanscope::headroom_bits(1.0, dtype::i32), nanscope::error);

  // on a STATS health_result: the same number margins() reports
  const std::vector<float> x = {1e4f, -3.0f, 0.5f, -1e4f, 12.0f};
  const nanscope::health_result h = nanscope::check(x);
  const nanscope::margins_result m = nanscope::margins(x);
  CHECK(same_bits(h.abs_max, m.abs_max));
  for (const nanscope::format_margin& f : m.formats)
    CHECK(same_bits(nanscope::headroom_bits(h.abs_max, f.target), f.headroom_bits));
  CHECK(m[dtype::f16].headroom_bits == doctest::Approx(2.7115).epsilon(1e-4));
  CHECK(!m[dtype::f16].would_overflow());
  CHECK(m[dtype::f8_e4m3fn].would_overflow());
  CHECK(m[dtype::f8_e4m3fn].overflow == 2);
  CHECK(m.any_overflow());
}

TEST_CASE("margins: errors name the tensor; template overloads") {
  const std::vector<std::int32_t> ints = {1, 2, 3};
  CHECK_THROWS_WITH_AS(nanscope::margins(ints, "counts"),
                       doctest::Contains("tensor 'counts': margins: dtype i32 is not a floating type"), nanscope::error);
  const bool flags[2] = {true, false};
  CHECK_THROWS_AS(nanscope::margins(flags), nanscope::error);
  nanscope::tensor_view dev = nanscope::tensor_view::flat(flags, dtype::f32, 0, "on_gpu");
  dev.space = nanscope::memory_space::cuda_device;
  CHECK_THROWS_WITH_AS(nanscope::margins(dev), doctest::Contains("on_gpu"), nanscope::error);
  nanscope::tensor_view bad = nanscope::tensor_view::flat(flags, dtype::f32, -1, "negative");
  CHECK_THROWS_WITH_AS(nanscope::margins(bad), doctest::Contains("negative"), nanscope::error);
  const std::vector<double> d = {1.0, 70000.0};
  const nanscope::margins_result r = nanscope::margins(d);
  CHECK(r.type == dtype::f64);
  CHECK(r[dtype::f16].overflow == 1);
  CHECK_THROWS_AS(r[dtype::f32], nanscope::error);
  CHECK_THROWS_AS(r[dtype::i8], nanscope::error);
  const nanscope::margins_result named = nanscope::margins(d, "d", nanscope::margins_options{}.with_isa(isa::scalar));
  CHECK(named[dtype::f8_e5m2].overflow == 1);
}

TEST_CASE("margins: the boundaries hold under this build's floating-point environment") {
#if defined(NANSCOPE_TEST_FAST_MATH)
  MESSAGE("built with -ffast-math (flush-to-zero / denormals-are-zero on): results must be the same");
#endif
  // values whose classification a flushed float compare would get wrong: f32 subnormals around bf16's limits
  std::vector<float> x;
  // (bf16: min_subnormal 2^-133 is f32 bits 0x10000, its half 0x8000; min_normal - min_subnormal/2 is 0x7F8000)
  for (std::uint32_t b : {0x00000001u, 0x00000004u, 0x00000005u, 0x00008000u, 0x00008001u, 0x007F7FFFu, 0x007F8000u,
                          0x007FFFFFu, 0x80008000u, 0x80008001u})
    x.push_back(f32_from_bits(b));
  std::vector<std::uint64_t> raws;
  for (float f : x) raws.push_back(bits32(f));
  const ref_margins ref = reference_margins(dtype::f32, raws);
  for (isa i : margin_isas) {
    const nanscope::margins_result r = nanscope::margins(x, nanscope::margins_options{}.with_isa(i));
    expect_margins(r, ref, label(dtype::f32, i, "f32 subnormals"));
    CHECK(r[dtype::bf16].underflow_to_zero == 5);
    CHECK(r[dtype::bf16].subnormal == 3);
    CHECK(r[dtype::f16].underflow_to_zero == 10);
  }
}

TEST_CASE("margins: consistent with dtype_info::overflow_threshold (|x| >= threshold overflows, the double below does not)") {
  for (int i = 0; i < 4; ++i) {
    const double thr = nanscope::info(targets[i].id).overflow_threshold;
    const std::vector<std::uint64_t> raws = {bits64(thr), bits64(thr) - 1, bits64(thr) | 0x8000000000000000ull};
    for (isa a : margin_isas) {
      const nanscope::margins_result r = run_raw(dtype::f64, raws, a);
      INFO(label(dtype::f64, a, std::string("threshold of ") + nanscope::name(targets[i].id)));
      CHECK(r.formats[static_cast<std::size_t>(i)].overflow == 2);
    }
  }
}
