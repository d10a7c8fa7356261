// nanscope tests — tf_export_test.cpp: TensorFlow DebugNumericSummaryV2 layouts (docs/formats.md):
// FULL_HEALTH (11), CONCISE_HEALTH (5), CURT_HEALTH (2), SHAPE (10, last 6 dims right-padded with 0,
// head-truncated when rank > 6), TF dtype enums, and which result modes each export accepts.
#include "support/compare.hpp"
#include "support/reference.hpp"

#include <nanscope/check.hpp>
#include <nanscope/health.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <vector>

namespace {

using nanscope::check_mode;
using nanscope::dtype;
using namespace nstest;

template <std::size_t N>
void expect_array(const std::array<double, N>& got, const std::array<double, N>& want) {
  for (std::size_t i = 0; i < N; ++i) {
    CAPTURE(i);
    CHECK(bits64(got[i]) == bits64(want[i]));
  }
}


/// f32 [2, 5]: -1, -0, +0, 2, +inf, -inf, nan, nan(payload), min subnormal, -5
std::vector<float> sample() {
  return {-1.0f,       f32_from_bits(0x80000000u), 0.0f,      2.0f, pos_inf_f(), neg_inf_f(), qnan_f(),
          f32_from_bits(0xFFC12345u), f32_from_bits(1u), -5.0f};
}

}  // namespace

TEST_CASE("tf export: FULL_HEALTH layout") {
  const std::vector<float> d = sample();
  const nanscope::tensor_view v = nanscope::view_of(d.data(), {2, 5});
  for (check_mode m : {check_mode::full_health, check_mode::stats}) {
    INFO("mode ", std::string(nanscope::name(m)));
    const nanscope::health_result r = run_mode(v, m);
    //                          id   dev  dtype rank numel -inf +inf nan  neg  zero pos
    expect_array(nanscope::to_tf_full_health(r), {-1.0, -1.0, 1.0, 2.0, 10.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0});
    expect_array(nanscope::to_tf_full_health(r, 7, 3), {7.0, 3.0, 1.0, 2.0, 10.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0});
  }
  // an f64 tensor of rank 1 and a bf16 tensor of rank 3
  const std::vector<double> dd = {1.0, -2.0, 0.0};
  expect_array(nanscope::to_tf_full_health(run_mode(nanscope::view_of(dd.data(), dd.size()), check_mode::full_health), 0),
               {0.0, -1.0, 2.0, 1.0, 3.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0});
  const std::vector<nanscope::bfloat16> bf = {nanscope::bfloat16::from_bits(0xFF80), nanscope::bfloat16::from_bits(0x3F80)};
  expect_array(nanscope::to_tf_full_health(run_mode(nanscope::view_of(bf.data(), {1, 2, 1}), check_mode::full_health), 42, 1),
               {42.0, 1.0, 14.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0});
}

TEST_CASE("tf export: CONCISE_HEALTH and CURT_HEALTH layouts") {
  const std::vector<float> d = sample();
  const nanscope::tensor_view v = nanscope::view_of(d.data(), {2, 5});
  for (check_mode m : {check_mode::concise_health, check_mode::full_health, check_mode::stats}) {
    INFO("mode ", std::string(nanscope::name(m)));
    const nanscope::health_result r = run_mode(v, m);
    expect_array(nanscope::to_tf_concise_health(r), {-1.0, 10.0, 1.0, 1.0, 2.0});
    expect_array(nanscope::to_tf_concise_health(r, 5), {5.0, 10.0, 1.0, 1.0, 2.0});
  }
  for (check_mode m : {check_mode::curt_health, check_mode::concise_health, check_mode::full_health, check_mode::stats}) {
    INFO("mode ", std::string(nanscope::name(m)));
    expect_array(nanscope::to_tf_curt_health(run_mode(v, m)), {-1.0, 1.0});
    expect_array(nanscope::to_tf_curt_health(run_mode(v, m), 12), {12.0, 1.0});
    const std::vector<float> clean = {1.0f, -0.0f, f32_from_bits(1u), -3e38f};
    expect_array(nanscope::to_tf_curt_health(run_mode(nanscope::view_of(clean.data(), clean.size()), m), 3), {3.0, 0.0});
    // a single NaN is enough, wherever it is
    std::vector<float> late(1000, 1.0f);
    late[999] = qnan_f();
    expect_array(nanscope::to_tf_curt_health(run_mode(nanscope::view_of(late.data(), late.size()), m)), {-1.0, 1.0});
  }
}

TEST_CASE("tf export: SHAPE layout, padding and head truncation") {
  const float buf[40320] = {};
  // rank 2: dims then zero padding
  expect_array(nanscope::to_tf_shape(run_mode(nanscope::view_of(buf, {2, 5}), check_mode::shape)),
               {-1.0, 1.0, 2.0, 10.0, 2.0, 5.0, 0.0, 0.0, 0.0, 0.0});
  // rank 0 (scalar): numel 1, no dims
  nanscope::tensor_view s = nanscope::view_of(buf, 1);
  s.rank = 0;
  expect_array(nanscope::to_tf_shape(run_mode(s, check_mode::shape), 9), {9.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0});
  // rank 6: all dims
  expect_array(nanscope::to_tf_shape(run_mode(nanscope::view_of(buf, {1, 2, 3, 4, 5, 6}), check_mode::shape)),
               {-1.0, 1.0, 6.0, 720.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0});
  // rank 7 and 8: the last 6 dims (head-truncated)
  expect_array(nanscope::to_tf_shape(run_mode(nanscope::view_of(buf, {2, 1, 2, 3, 4, 5, 6}), check_mode::shape)),
               {-1.0, 1.0, 7.0, 1440.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0});
  expect_array(nanscope::to_tf_shape(run_mode(nanscope::view_of(buf, {1, 2, 3, 4, 5, 6, 7, 8}), check_mode::shape), 4),
               {4.0, 1.0, 8.0, 40320.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0});
  // a zero extent
  expect_array(nanscope::to_tf_shape(run_mode(nanscope::view_of(buf, {3, 0}), check_mode::shape)),
               {-1.0, 1.0, 2.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0});
  // SHAPE can be exported from a result of any mode
  for (check_mode m : {check_mode::no_tensor, check_mode::curt_health, check_mode::concise_health,
                       check_mode::full_health, check_mode::stats}) {
    INFO("mode ", std::string(nanscope::name(m)));
    expect_array(nanscope::to_tf_shape(run_mode(nanscope::view_of(buf, {4, 3}), m)),
                 {-1.0, 1.0, 2.0, 12.0, 4.0, 3.0, 0.0, 0.0, 0.0, 0.0});
  }
}

TEST_CASE("tf export: dtype enums in SHAPE and FULL_HEALTH for every dtype") {
  struct row {
    dtype t;
    double tf;
  };
  const row rows[] = {{dtype::f32, 1},  {dtype::f64, 2},   {dtype::i32, 3},      {dtype::u8, 4},       {dtype::i16, 5},
                      {dtype::i8, 6},   {dtype::i64, 9},   {dtype::boolean, 10}, {dtype::bf16, 14},    {dtype::u16, 17},
                      {dtype::f16, 19}, {dtype::u32, 22},  {dtype::u64, 23},     {dtype::f8_e5m2, 24}, {dtype::f8_e4m3fn, 25}};
  const std::uint64_t zeros[8] = {};
  for (const row& r : rows) {
    INFO("dtype ", std::string(nanscope::name(r.t)));
    nanscope::tensor_view v = nanscope::tensor_view::contiguous(zeros, r.t, {2});
    CHECK(nanscope::tf_dtype_enum(r.t) == static_cast<int>(r.tf));
    expect_array(nanscope::to_tf_shape(run_mode(v, check_mode::shape)), {-1.0, r.tf, 1.0, 2.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0});
    const nanscope::health_result full = run_mode(v, check_mode::full_health);
    const std::array<double, 11> f = nanscope::to_tf_full_health(full);
    CHECK(f[2] == r.tf);
    CHECK(f[4] == 2.0);
    // all-zero bits: a float tensor has two zeros; an integer/bool tensor has no float categories
    const bool fl = nanscope::is_float(r.t);
    CHECK(f[9] == (fl ? 2.0 : 0.0));
  }
}

TEST_CASE("tf export: modes that lack the data are rejected") {
  const std::vector<float> d = sample();
  const nanscope::tensor_view v = nanscope::view_of(d.data(), d.size());
  for (check_mode m : {check_mode::no_tensor, check_mode::shape, check_mode::curt_health, check_mode::concise_health}) {
    INFO("mode ", std::string(nanscope::name(m)));
    CHECK_THROWS_AS(nanscope::to_tf_full_health(run_mode(v, m)), nanscope::error);
  }
  for (check_mode m : {check_mode::no_tensor, check_mode::shape, check_mode::curt_health}) {
    INFO("mode ", std::string(nanscope::name(m)));
    CHECK_THROWS_AS(nanscope::to_tf_concise_health(run_mode(v, m)), nanscope::error);
  }
  for (check_mode m : {check_mode::no_tensor, check_mode::shape}) {
    INFO("mode ", std::string(nanscope::name(m)));
    CHECK_THROWS_AS(nanscope::to_tf_curt_health(run_mode(v, m)), nanscope::error);
  }
}

TEST_CASE("tf export: counts above 2^24 stay exact (doubles, not the float32 of TF)") {
  // 2^24 + 3 elements from a single stored value through a zero stride: -inf everywhere
  const float one[] = {neg_inf_f()};
  nanscope::tensor_view v;
  v.data = one;
  v.type = dtype::f32;
  v.rank = 1;
  v.shape[0] = (std::int64_t{1} << 24) + 3;
  v.strides[0] = 0;
  const nanscope::health_result r = run_mode(v, check_mode::concise_health);
  const double n = 16777219.0;  // not representable in float32
  expect_array(nanscope::to_tf_concise_health(r), {-1.0, n, n, 0.0, 0.0});
  // and by hand, near 2^53
  nanscope::health_result h;
  h.mode = check_mode::full_health;
  h.type = dtype::f64;
  h.rank = 1;
  h.count = (std::uint64_t{1} << 53) - 1;
  h.positive = (std::uint64_t{1} << 53) - 2;
  h.nan = 1;
  const std::array<double, 11> f = nanscope::to_tf_full_health(h);
  CHECK(f[4] == 9007199254740991.0);
  CHECK(f[10] == 9007199254740990.0);
  CHECK(f[7] == 1.0);
}
