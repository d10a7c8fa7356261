// nanscope tests — fastmath_test.cpp: the properties that -ffast-math threatens, checked in whatever
// configuration the suite is built (CI also builds the whole suite with -ffast-math, where the compiler may
// fold std::isnan(x) to false and reassociate sums):
//  - the reference's own classification (by bits) and its known answers;
//  - the library's NaN/inf/-0/subnormal classification for every float dtype, mode and ISA;
//  - text output spelling nan/inf.
#include "support/compare.hpp"
#include "support/reference.hpp"

#include <nanscope/check.hpp>
#include <nanscope/format.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using nanscope::check_mode;
using nanscope::dtype;
using nanscope::isa;
using namespace nstest;

#if defined(__FAST_MATH__)
constexpr bool built_with_fast_math = true;
#else
constexpr bool built_with_fast_math = false;
#endif

/// Values produced at run time, where the compiler cannot see them (an opaque round trip through memory).
double opaque(double x) {
  volatile double v = x;
  return v;
}

}  // namespace

TEST_CASE("fast-math: the reference classifies by bits") {
  MESSAGE("built with -ffast-math: ", built_with_fast_math);
  const double nan_rt = opaque(qnan());
  const double inf_rt = opaque(pos_inf());
  const double ninf_rt = opaque(neg_inf());
  const double one = opaque(1.0);
  CHECK(is_nan(nan_rt));
  CHECK(is_nan(opaque(f64_from_bits(0x7FF0000000000001ull))));  // signalling NaN
  CHECK(is_nan(opaque(f64_from_bits(0xFFFFFFFFFFFFFFFFull))));
  CHECK_FALSE(is_nan(inf_rt));
  CHECK_FALSE(is_nan(one));
  CHECK(is_inf(inf_rt));
  CHECK(is_inf(ninf_rt));
  CHECK_FALSE(is_inf(nan_rt));
  CHECK_FALSE(is_finite(nan_rt));
  CHECK_FALSE(is_finite(inf_rt));
  CHECK(is_finite(opaque(1.7976931348623157e308)));
  CHECK(is_zero(opaque(-0.0)) == true);
  CHECK(sign_bit(with_sign(opaque(0.0), true)));
  CHECK(order_key(ninf_rt) < order_key(opaque(-1.7976931348623157e308)));
  CHECK(order_key(inf_rt) > order_key(opaque(1.7976931348623157e308)));
  CHECK(order_key(opaque(-0.0)) == order_key(opaque(0.0)));
  CHECK(same_value(nan_rt, f64_from_bits(0xFFF8000000000001ull)));
  CHECK_FALSE(same_value(nan_rt, inf_rt));
  CHECK_FALSE(same_value(one, nan_rt));
}

TEST_CASE("fast-math: reference known answers") {
  const std::vector<float> d = {1.0f, qnan_f(), -0.0f, pos_inf_f(), f32_from_bits(1u), -2.0f, neg_inf_f(), 4.0f};
  const ref_health r = reference(dtype::f32, raw_of(d));
  CHECK(r.count == 8);
  CHECK(r.nan == 1);
  CHECK(r.pos_inf == 1);
  CHECK(r.neg_inf == 1);
  CHECK(r.zero == 1);
  CHECK(r.negative == 1);
  CHECK(r.positive == 3);
  CHECK(r.subnormal == 1);
  CHECK(r.first_nonfinite == 1);
  CHECK(bits64(r.min) == bits64(neg_inf()));
  CHECK(bits64(r.max) == bits64(pos_inf()));
  CHECK(bits64(r.abs_max) == bits64(pos_inf()));
  CHECK(r.abs_min == 0.0);
  CHECK(r.abs_min_nonzero == std::ldexp(1.0, -149));
  CHECK(r.n_finite == 5);
  // mean of 1, 0, 2^-149, -2, 4 = 3/5 (+ negligible)
  CHECK(static_cast<double>(r.mean) == doctest::Approx(0.6).epsilon(1e-15));
  const float four[] = {1.0f, 2.0f, 3.0f, 4.0f};
  const ref_moments m = reference_moments(dtype::f32, four, 4);
  CHECK(static_cast<double>(m.mean) == 2.5);
  CHECK(static_cast<double>(m.m2) == 5.0);
  CHECK(static_cast<double>(m.std_dev) == doctest::Approx(std::sqrt(5.0 / 3.0)).epsilon(1e-15));
  // a sum double precision cannot do: (1e17 + 1) - 1e17 is 0 in double, 1 in long double (64-bit mantissa)
  const double big[] = {1e17, 1.0, -1e17};
  const ref_moments b = reference_moments(dtype::f64, big, 3);
  CHECK(static_cast<double>(b.mean * 3) == 1.0);
}

TEST_CASE("fast-math: the library classifies NaN, inf, -0 and subnormals exactly in every dtype, mode and ISA") {
  // one buffer per dtype holding every class, repeated so that SIMD groups and tails both see them
  const std::vector<std::uint64_t> f32_bits = {0x7FC00000u, 0xFF800000u, 0x7F800000u, 0x80000000u, 0x00000001u,
                                               0x3F800000u, 0xBF800000u, 0x7F800001u, 0x00000000u, 0x807FFFFFu};
  const std::vector<std::uint64_t> f64_bits = {0x7FF8000000000000ull, 0xFFF0000000000000ull, 0x7FF0000000000000ull,
                                               0x8000000000000000ull, 0x1ull, 0x3FF0000000000000ull,
                                               0xBFF0000000000000ull, 0x7FF0000000000001ull, 0x0ull,
                                               0x800FFFFFFFFFFFFFull};
  const std::vector<std::uint64_t> f16_bits = {0x7E00, 0xFC00, 0x7C00, 0x8000, 0x0001, 0x3C00, 0xBC00, 0x7C01, 0x0000, 0x83FF};
  const std::vector<std::uint64_t> bf16_bits = {0x7FC0, 0xFF80, 0x7F80, 0x8000, 0x0001, 0x3F80, 0xBF80, 0x7F81, 0x0000, 0x807F};
  const std::vector<std::uint64_t> e4m3_bits = {0x7F, 0xFF, 0x7E, 0x80, 0x01, 0x38, 0xB8, 0xFE, 0x00, 0x87};
  const std::vector<std::uint64_t> e5m2_bits = {0x7E, 0xFC, 0x7C, 0x80, 0x01, 0x3C, 0xBC, 0x7D, 0x00, 0x83};
  struct input {
    dtype t;
    const std::vector<std::uint64_t>* bits;
  };
  const input inputs[] = {{dtype::f32, &f32_bits},       {dtype::f64, &f64_bits},       {dtype::f16, &f16_bits},
                          {dtype::bf16, &bf16_bits},     {dtype::f8_e4m3fn, &e4m3_bits}, {dtype::f8_e5m2, &e5m2_bits}};
  for (const input& in : inputs) {
    for (std::size_t reps : {1u, 3u, 7u}) {
      std::vector<std::uint64_t> raw;
      for (std::size_t r = 0; r < reps; ++r) raw.insert(raw.end(), in.bits->begin(), in.bits->end());
      // rotate so the first non-finite moves around
      std::vector<std::uint64_t> rot(raw.begin() + static_cast<std::ptrdiff_t>(reps % raw.size()), raw.end());
      rot.insert(rot.end(), raw.begin(), raw.begin() + static_cast<std::ptrdiff_t>(reps % raw.size()));
      const std::size_t es = ref_size_of(in.t);
      std::vector<unsigned char> bytes(rot.size() * es);
      for (std::size_t i = 0; i < rot.size(); ++i) std::memcpy(bytes.data() + i * es, &rot[i], es);
      const nanscope::tensor_view v =
          nanscope::tensor_view::flat(bytes.data(), in.t, static_cast<std::int64_t>(rot.size()));
      const ref_health ref = reference(in.t, rot);
      for (isa i : all_isas)
        for (check_mode m : all_modes) {
          INFO("dtype=", std::string(nanscope::name(in.t)), " reps=", reps, " isa=", std::string(nanscope::name(i)));
          expect_health(nanscope::check(v, opts(m, i, 1)), ref, v, m, moment_tol(in.t, i));
        }
    }
  }
}

TEST_CASE("fast-math: text output spells nan and inf") {
  const float d[] = {qnan_f(), neg_inf_f(), 1.0f};
  const nanscope::health_result r = nanscope::check(d);
  CHECK(nanscope::summary(r) == "f32[3] n=3 x\u2208[-inf, 1] \u03bc=1 -inf=1 nan=1");
  nanscope::health_result h;
  h.count = 1;
  h.rank = 1;
  h.shape[0] = 1;
  h.min = opaque(qnan());
  h.max = opaque(qnan());
  h.mean = opaque(pos_inf());
  CHECK(nanscope::summary(h) == "f32[1] n=1 \u03bc=inf");
}
