// nanscope tests — accuracy_test.cpp: mean and std against a long-double two-pass reference.
//  - 16M values ~ N(1000, 1e-3) in f32 and f64, and ~ N(100, 0.1) in f16 and bf16: relative error <= 1e-6
//    on every ISA with 1 and 2 threads (the mean >> std case that breaks the naive sum / sum-of-squares
//    formula completely);
//  - data built to break naive accumulation: an outlier first element, huge magnitudes (1e30 in f32,
//    1e200 in f64), tiny magnitudes (1e-30; 1e-200 and subnormals in f64), a large offset.
// NANSCOPE_TEST_QUICK (sanitizer builds) shrinks 16M to 1M and 1M to 200k elements.
#include "support/compare.hpp"
#include "support/reference.hpp"

#include <nanscope/check.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using nanscope::check_mode;
using nanscope::dtype;
using nanscope::isa;
using namespace nstest;

constexpr long double accuracy_tol = 1e-6L;

bool rel_ok(double lib, long double ref, long double tol, long double scale) {
  if (!is_finite(lib)) return false;
  const long double d = static_cast<long double>(lib) - ref;
  const long double ad = d < 0 ? -d : d;
  return ad <= tol * scale;
}
long double abs_ld(long double x) { return x < 0 ? -x : x; }
long double rel_err(double lib, long double ref) {
  if (!is_finite(lib)) return 1e300L;
  const long double d = static_cast<long double>(lib) - ref;
  const long double ar = ref < 0 ? -ref : ref;
  return (d < 0 ? -d : d) / ar;
}

enum class mean_scale { mean, mean_abs };

/// mean and std of `n` elements at `data` within `tol` (relative) of the reference on every ISA with 1 and 2
/// threads; the 2-thread result is bit-identical to the 1-thread one. The mean's error is relative to |mean|,
/// or for an ill-conditioned sum (mean_scale::mean_abs) to mean(|x|), the scale a sum of those values can be
/// accurate to.
void expect_accurate(const std::string& label, dtype t, const void* data, std::size_t n,
                     mean_scale ms = mean_scale::mean, long double tol = accuracy_tol) {
  const ref_moments ref = reference_moments(t, data, n);
  REQUIRE(ref.n_finite > 1);
  const nanscope::tensor_view v = nanscope::tensor_view::flat(data, t, static_cast<std::int64_t>(n));
  for (isa i : all_isas) {
    nanscope::health_result first;
    for (unsigned th : {1u, 2u}) {
      const nanscope::health_result r = nanscope::check(v, opts(check_mode::stats, i, th));
      INFO(label, " dtype=", std::string(nanscope::name(t)), " n=", n,
           " isa=", std::string(nanscope::name(nanscope::resolve_isa(i))), " threads=", th);
      INFO("mean lib=", show(r.mean), " ref=", show(ref.mean), " rel err=", show(rel_err(r.mean, ref.mean)));
      INFO("std  lib=", show(r.std), " ref=", show(ref.std_dev), " rel err=", show(rel_err(r.std, ref.std_dev)));
      CHECK(rel_ok(r.mean, ref.mean, tol, ms == mean_scale::mean ? abs_ld(ref.mean) : ref.mean_abs));
      CHECK(rel_ok(r.std, ref.std_dev, tol, ref.std_dev));
      CHECK(r.finite() == ref.n_finite);
      if (th == 1)
        first = r;
      else
        CHECK(first_difference(first, r) == "");
    }
  }
}

std::vector<float> normal_f32(std::size_t n, double mu, double sigma, std::uint64_t seed) {
  rng g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(mu + sigma * g.normal());
  return v;
}
std::vector<double> normal_f64(std::size_t n, double mu, double sigma, std::uint64_t seed) {
  rng g(seed);
  std::vector<double> v(n);
  for (double& x : v) x = mu + sigma * g.normal();
  return v;
}

const std::size_t big_n = scaled(std::size_t{1} << 24, std::size_t{1} << 20);  // 16M, quick: 1M
const std::size_t hard_n = scaled(1000003, 200003);

}  // namespace

TEST_CASE("accuracy: 16M f32 ~ N(1000, 1e-3)") {
  const std::vector<float> v = normal_f32(big_n, 1000.0, 1e-3, 1);
  expect_accurate("N(1000, 1e-3)", dtype::f32, v.data(), v.size());
}

TEST_CASE("accuracy: 16M f64 ~ N(1000, 1e-3)") {
  const std::vector<double> v = normal_f64(big_n, 1000.0, 1e-3, 2);
  expect_accurate("N(1000, 1e-3)", dtype::f64, v.data(), v.size());
}

TEST_CASE("accuracy: 16M f16 and bf16 ~ N(100, 0.1)") {
  rng g(3);
  std::vector<std::uint16_t> h(big_n), b(big_n);
  for (std::size_t i = 0; i < big_n; ++i) {
    const double x = 100.0 + 0.1 * g.normal();
    h[i] = encode_normal_f16(x);
    b[i] = encode_normal_bf16(x);
  }
  // the helper encoder is right around 100 (f16 spacing 1/16, bf16 spacing 1/2)
  REQUIRE(ref_decode_f16(encode_normal_f16(100.03)) == 100.0);
  REQUIRE(ref_decode_f16(encode_normal_f16(100.04)) == 100.0625);
  REQUIRE(ref_decode_bf16(encode_normal_bf16(100.3)) == 100.5);
  expect_accurate("N(100, 0.1)", dtype::f16, h.data(), h.size());
  expect_accurate("N(100, 0.1)", dtype::bf16, b.data(), b.size());
}

TEST_CASE("accuracy: an outlier as the first element") {
  SUBCASE("f32: 1e8 then N(1, 1e-3)") {
    std::vector<float> v = normal_f32(hard_n, 1.0, 1e-3, 4);
    v[0] = 1e8f;
    expect_accurate("outlier first", dtype::f32, v.data(), v.size());
  }
  SUBCASE("f32: -3e4 then N(1, 1e-2)") {
    std::vector<float> v = normal_f32(hard_n, 1.0, 1e-2, 5);
    v[0] = -3e4f;
    expect_accurate("outlier first", dtype::f32, v.data(), v.size());
  }
  SUBCASE("f64: 1e12 then N(1, 1e-3)") {
    std::vector<double> v = normal_f64(hard_n, 1.0, 1e-3, 6);
    v[0] = 1e12;
    expect_accurate("outlier first", dtype::f64, v.data(), v.size());
  }
}

TEST_CASE("accuracy: huge magnitudes (f32 ~1e30, f64 ~1e200)") {
  SUBCASE("f32 N(1e30, 1e24)") {
    const std::vector<float> v = normal_f32(hard_n, 1e30, 1e24, 7);
    expect_accurate("huge", dtype::f32, v.data(), v.size());
  }
  SUBCASE("f32 N(-3e38, 1e32) near FLT_MAX") {
    const std::vector<float> v = normal_f32(hard_n, -3e38, 1e32, 8);
    expect_accurate("near FLT_MAX", dtype::f32, v.data(), v.size());
  }
  SUBCASE("f64 N(1e200, 1e194)") {
    // squared deviations (1e388) exceed the double range, the std (1e194) does not
    const std::vector<double> v = normal_f64(hard_n, 1e200, 1e194, 9);
    expect_accurate("huge", dtype::f64, v.data(), v.size());
  }
  SUBCASE("f64 N(1e140, 1e134)") {
    const std::vector<double> v = normal_f64(hard_n, 1e140, 1e134, 10);
    expect_accurate("large", dtype::f64, v.data(), v.size());
  }
}

TEST_CASE("accuracy: tiny magnitudes (1e-30, f64 1e-200 and subnormals)") {
  SUBCASE("f32 N(1e-30, 1e-36)") {
    const std::vector<float> v = normal_f32(hard_n, 1e-30, 1e-36, 11);
    expect_accurate("tiny", dtype::f32, v.data(), v.size());
  }
  SUBCASE("f32 subnormals") {
    const std::vector<float> v = normal_f32(hard_n, 1e-39, 1e-40, 12);
    expect_accurate("subnormal", dtype::f32, v.data(), v.size());
  }
  SUBCASE("f64 N(1e-30, 1e-36)") {
    const std::vector<double> v = normal_f64(hard_n, 1e-30, 1e-36, 13);
    expect_accurate("tiny", dtype::f64, v.data(), v.size());
  }
  SUBCASE("f64 N(1e-200, 1e-206)") {
    // squared deviations (1e-412) underflow the double range, the std (1e-206) does not
    const std::vector<double> v = normal_f64(hard_n, 1e-200, 1e-206, 14);
    expect_accurate("tiny", dtype::f64, v.data(), v.size());
  }
  SUBCASE("f64 subnormals") {
    const std::vector<double> v = normal_f64(hard_n, 1e-310, 1e-311, 15);
    expect_accurate("subnormal", dtype::f64, v.data(), v.size());
  }
}

TEST_CASE("accuracy: large offset, slow drift, alternating signs") {
  SUBCASE("f32 N(1e7, 1)") {
    const std::vector<float> v = normal_f32(hard_n, 1e7, 1.0, 16);
    expect_accurate("offset 1e7", dtype::f32, v.data(), v.size());
  }
  SUBCASE("f32 ramp 1000 + i * 1e-4") {
    std::vector<float> v(hard_n);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(1000.0 + static_cast<double>(i) * 1e-4);
    expect_accurate("ramp", dtype::f32, v.data(), v.size());
  }
  SUBCASE("f64 N(1e9, 1e-3)") {
    const std::vector<double> v = normal_f64(hard_n, 1e9, 1e-3, 17);
    expect_accurate("offset 1e9", dtype::f64, v.data(), v.size());
  }
  SUBCASE("f32 +-1e4 alternating plus N(5, 1)") {
    // mean 5 out of values of magnitude 1e4: an ill-conditioned sum (condition number 2000), so the mean is
    // held to 1e-6 of mean(|x|); the std (1e4) is well-conditioned.
    std::vector<float> v = normal_f32(hard_n, 5.0, 1.0, 18);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] += (i % 2 == 0) ? 1e4f : -1e4f;
    expect_accurate("alternating", dtype::f32, v.data(), v.size(), mean_scale::mean_abs);
  }
}
