// nanscope tests — format_test.cpp: nanscope::summary(), fmt::format("{}", r) and "{:v}" against hand-written
// expected strings: the lovely-tensors style line of docs/formats.md, every mode, number formatting at
// the edges of its ranges, integer/bool/empty/rank-0 tensors.
#include "support/compare.hpp"
#include "support/reference.hpp"

#include <nanscope/check.hpp>
#include <nanscope/format.hpp>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using nanscope::check_mode;
using nanscope::dtype;
using namespace nstest;


/// The docs/formats.md example tensor: f32 [2, 6] with 9 finite values (min -3541, max -3.369e-05, mean
/// -393.776, std 1180.2), one +inf (flat index 4) and NaNs at flat indices 7 and 10 (payloads differ).
std::vector<float> lovely_data() {
  const float c = -0.426f;
  return {-3541.0f, c, c, -3.369e-05f, pos_inf_f(), c, c, qnan_f(), c, c, f32_from_bits(0xFFC00001u), c};
}

/// A stats result with the field values of the docs/formats.md line, built by hand (formatting only).
nanscope::health_result lovely_by_hand() {
  nanscope::health_result r;
  r.type = dtype::f32;
  r.mode = check_mode::stats;
  r.rank = 2;
  r.shape[0] = 2;
  r.shape[1] = 6;
  r.count = 12;
  r.negative = 9;
  r.pos_inf = 1;
  r.nan = 2;
  r.min = -3541.0;
  r.max = -3.369e-05;
  r.abs_max = 3541.0;
  r.abs_min = 3.369e-05;
  r.abs_min_nonzero = 3.369e-05;
  r.mean = -393.776;
  r.std = 1180.2;
  r.first_nonfinite = 4;
  r.any_nonfinite = true;
  return r;
}

}  // namespace

TEST_CASE("format: the docs/formats.md one-liner from a hand-built result") {
  const nanscope::health_result r = lovely_by_hand();
  const std::string want = "f32[2,6] n=12 x\u2208[-3.541e+03, -3.369e-05] \u03bc=-393.8 \u03c3=1.180e+03 +inf=1 nan=2";
  CHECK(nanscope::summary(r) == want);
  CHECK(fmt::format("{}", r) == want);
}

TEST_CASE("format: a checked 2x6 tensor with the docs/formats.md statistics") {
  const std::vector<float> d = lovely_data();
  const nanscope::tensor_view v = nanscope::view_of(d.data(), {2, 6});

  // nanscope semantics (docs/formats.md): max is over non-NaN values, so the +inf shows as the max.
  CHECK(nanscope::summary(run_mode(v, check_mode::stats)) ==
        "f32[2,6] n=12 x\u2208[-3.541e+03, inf] \u03bc=-393.8 \u03c3=1.180e+03 +inf=1 nan=2");
  CHECK(nanscope::summary(run_mode(v, check_mode::full_health)) == "f32[2,6] n=12 |x|\u2264inf +inf=1 nan=2");
  CHECK(nanscope::summary(run_mode(v, check_mode::concise_health)) == "f32[2,6] n=12 +inf=1 nan=2");
  CHECK(nanscope::summary(run_mode(v, check_mode::curt_health)) == "f32[2,6] n=12 nonfinite@4");
  CHECK(nanscope::summary(run_mode(v, check_mode::shape)) == "f32[2,6] n=12");
  CHECK(nanscope::summary(run_mode(v, check_mode::no_tensor)) == "f32[2,6] n=12");

  // with the +inf replaced by a third NaN, the range is the lovely-tensors one
  std::vector<float> d2 = d;
  d2[4] = qnan_f();
  const nanscope::tensor_view v2 = nanscope::view_of(d2.data(), {2, 6});
  CHECK(nanscope::summary(run_mode(v2, check_mode::stats)) ==
        "f32[2,6] n=12 x\u2208[-3.541e+03, -3.369e-05] \u03bc=-393.8 \u03c3=1.180e+03 nan=3");
  CHECK(nanscope::summary(run_mode(v2, check_mode::full_health)) == "f32[2,6] n=12 |x|\u22643.541e+03 nan=3");
  CHECK(nanscope::summary(run_mode(v2, check_mode::curt_health)) == "f32[2,6] n=12 nonfinite@4");
}

TEST_CASE("format: {:v} lists every field") {
  const std::vector<float> d = lovely_data();
  const nanscope::health_result r = run_mode(nanscope::view_of(d.data(), {2, 6}), check_mode::stats);
  const std::string want =
      "f32[2,6] n=12 x\u2208[-3.541e+03, inf] \u03bc=-393.8 \u03c3=1.180e+03 +inf=1 nan=2"
      " | mode=STATS neg=9 zero=0 pos=0 -inf=0 +inf=1 nan=2 subnormal=0 first_nonfinite=4"
      " min=-3.541e+03 max=inf abs_max=inf abs_min=3.369e-05 abs_min_nonzero=3.369e-05 mean=-393.8 std=1.180e+03";
  CHECK(fmt::format("{:v}", r) == want);
  CHECK(fmt::format("{}", r) == nanscope::summary(r));
  CHECK(fmt::format("[{}]", r) == "[" + nanscope::summary(r) + "]");

  // a curt_health result: counts are not computed, statistics are nan
  const nanscope::health_result c = run_mode(nanscope::view_of(d.data(), {2, 6}), check_mode::curt_health);
  CHECK(fmt::format("{:v}", c) ==
        "f32[2,6] n=12 nonfinite@4 | mode=CURT_HEALTH neg=0 zero=0 pos=0 -inf=0 +inf=0 nan=0 subnormal=0 "
        "first_nonfinite=4 min=nan max=nan abs_max=nan abs_min=nan abs_min_nonzero=nan mean=nan std=nan");
  CHECK_THROWS_AS((void)fmt::format(fmt::runtime("{:x}"), r), fmt::format_error);
}

TEST_CASE("format: small tensors with hand-derived text") {
  SUBCASE("f32 [4] = 1, 2, 3, 4") {
    const float d[] = {1.0f, 2.0f, 3.0f, 4.0f};
    // mean 2.5, unbiased std sqrt(5/3) = 1.29099...
    CHECK(nanscope::summary(nanscope::check(d)) == "f32[4] n=4 x\u2208[1, 4] \u03bc=2.5 \u03c3=1.291");
    CHECK(nanscope::summary(run_mode(nanscope::to_view(d), check_mode::full_health)) == "f32[4] n=4 |x|\u22644");
    CHECK(nanscope::summary(run_mode(nanscope::to_view(d), check_mode::curt_health)) == "f32[4] n=4");
  }
  SUBCASE("f64 [2,2] with -inf and zeros") {
    const double d[2][2] = {{0.0, -0.0}, {neg_inf(), 1000.0}};
    // finite values 0, 0, 1000: mean 333.33.., std 577.35..
    CHECK(nanscope::summary(nanscope::check(d)) ==
          "f64[2,2] n=4 x\u2208[-inf, 1.000e+03] \u03bc=333.3 \u03c3=577.4 -inf=1");
  }
  SUBCASE("one element: no std") {
    const double d[] = {2.5};
    CHECK(nanscope::summary(nanscope::check(d)) == "f64[1] n=1 x\u2208[2.5, 2.5] \u03bc=2.5");
    nanscope::tensor_view s = nanscope::view_of(d, 1);
    s.rank = 0;
    CHECK(nanscope::summary(nanscope::check(s)) == "f64[] n=1 x\u2208[2.5, 2.5] \u03bc=2.5");
  }
  SUBCASE("all NaN: no range, no moments") {
    const float d[] = {qnan_f(), qnan_f(), qnan_f()};
    CHECK(nanscope::summary(nanscope::check(d)) == "f32[3] n=3 nan=3");
    CHECK(nanscope::summary(run_mode(nanscope::to_view(d), check_mode::full_health)) == "f32[3] n=3 nan=3");
  }
  SUBCASE("all +inf: range [inf, inf], no moments") {
    const float d[] = {pos_inf_f(), pos_inf_f()};
    CHECK(nanscope::summary(nanscope::check(d)) == "f32[2] n=2 x\u2208[inf, inf] +inf=2");
  }
  SUBCASE("empty, integer, bool and small-float tensors") {
    const float* none = nullptr;
    CHECK(nanscope::summary(nanscope::check(nanscope::view_of(none, 0))) == "f32[0] n=0");
    CHECK(nanscope::summary(nanscope::check(nanscope::view_of(none, {3, 0}))) == "f32[3,0] n=0");
    const std::vector<std::int32_t> ints = {1, 2, 3};
    CHECK(nanscope::summary(nanscope::check(ints)) == "i32[3] n=3");
    const bool flags[2][2] = {{true, false}, {true, true}};
    CHECK(nanscope::summary(nanscope::check(flags)) == "bool[2,2] n=4");
    const std::vector<nanscope::half> h = {nanscope::half::from_bits(0x3C00), nanscope::half::from_bits(0x4000)};
    CHECK(nanscope::summary(nanscope::check(h)) == "f16[2] n=2 x\u2208[1, 2] \u03bc=1.5 \u03c3=0.7071");
    const std::vector<nanscope::float8_e4m3fn> e = {nanscope::float8_e4m3fn::from_bits(0x7E),
                                                    nanscope::float8_e4m3fn::from_bits(0x7F)};
    CHECK(nanscope::summary(nanscope::check(e)) == "e4m3fn[2] n=2 x\u2208[448, 448] \u03bc=448 nan=1");
    const std::vector<nanscope::bfloat16> b = {nanscope::bfloat16::from_bits(0xFF80)};
    CHECK(nanscope::summary(run_mode(nanscope::to_view(b), check_mode::concise_health)) == "bf16[1] n=1 -inf=1");
    const std::vector<nanscope::float8_e5m2> f8 = {nanscope::float8_e5m2::from_bits(0x7B)};
    CHECK(nanscope::summary(run_mode(nanscope::to_view(f8), check_mode::full_health)) == "e5m2[1] n=1 |x|\u22645.734e+04");
  }
}

TEST_CASE("format: numbers at the edges of the fixed and scientific ranges") {
  auto line = [](double lo, double hi) {
    nanscope::health_result r;
    r.type = dtype::f64;
    r.rank = 1;
    r.shape[0] = 2;
    r.count = 2;
    r.min = lo;
    r.max = hi;
    return nanscope::summary(r);
  };
  CHECK(line(1e-3, 999.0) == "f64[2] n=2 x\u2208[0.001, 999]");
  CHECK(line(9.99e-4, 1000.0) == "f64[2] n=2 x\u2208[9.990e-04, 1.000e+03]");
  CHECK(line(-0.0, 0.0) == "f64[2] n=2 x\u2208[0, 0]");
  CHECK(line(-123.456, 0.012345) == "f64[2] n=2 x\u2208[-123.5, 0.01235]");
  CHECK(line(-1e-310, 1.7976931348623157e308) == "f64[2] n=2 x\u2208[-1.000e-310, 1.798e+308]");
  CHECK(line(neg_inf(), pos_inf()) == "f64[2] n=2 x\u2208[-inf, inf]");
  CHECK(line(-5e6, 2.5e-7) == "f64[2] n=2 x\u2208[-5.000e+06, 2.500e-07]");
}
