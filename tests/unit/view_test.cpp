// nanscope tests — view_test.cpp: validation of bad views (nanscope::error naming the tensor and the problem),
// the tensor_view helpers, and every way into nanscope::to_view: std::vector, std::array, C arrays, view_of,
// const element types, and a foreign tensor type known only to this test, plugged in through a
// nanscope::tensor_traits specialisation and through an ADL `nanscope_view` hook.
#include "support/compare.hpp"
#include "support/reference.hpp"

#include <nanscope/check.hpp>
#include <nanscope/traits.hpp>
#include <nanscope/view.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

// -----------------------------------------------------------------------------------------------------------
// Foreign tensor types, defined only here.
// -----------------------------------------------------------------------------------------------------------
namespace foreign {
/// A matrix that stores its elements column-major, like Eigen's default.
struct col_matrix {
  std::vector<float> storage;  // element (r, c) at storage[c * rows + r]
  std::int64_t rows = 0, cols = 0;
  float at(std::int64_t r, std::int64_t c) const { return storage[static_cast<std::size_t>(c * rows + r)]; }
};
}  // namespace foreign

template <>
struct nanscope::tensor_traits<foreign::col_matrix> {
  static nanscope::tensor_view view(const foreign::col_matrix& m) {
    nanscope::tensor_view v;
    v.data = m.storage.data();
    v.type = nanscope::dtype::f32;
    v.rank = 2;
    v.shape[0] = m.rows;
    v.shape[1] = m.cols;
    v.strides[0] = 1;
    v.strides[1] = m.rows;
    v.name = "col_matrix";
    return v;
  }
};

namespace other_lib {
/// A rank-3 double tensor with a padded innermost dimension; joins through the ADL hook.
struct padded3 {
  std::vector<double> storage;
  std::int64_t d0 = 0, d1 = 0, d2 = 0, pad = 0;  // row length in memory: d2 + pad
  double at(std::int64_t i, std::int64_t j, std::int64_t k) const {
    return storage[static_cast<std::size_t>((i * d1 + j) * (d2 + pad) + k)];
  }
};
nanscope::tensor_view nanscope_view(const padded3& t) {
  nanscope::tensor_view v;
  v.data = t.storage.data();
  v.type = nanscope::dtype::f64;
  v.rank = 3;
  v.shape[0] = t.d0;
  v.shape[1] = t.d1;
  v.shape[2] = t.d2;
  v.strides[2] = 1;
  v.strides[1] = t.d2 + t.pad;
  v.strides[0] = t.d1 * (t.d2 + t.pad);
  v.name = "padded3";
  return v;
}

/// A type that has both a traits specialisation and an ADL hook: the specialisation must win.
struct both {
  float x[2] = {1.0f, 2.0f};
};
nanscope::tensor_view nanscope_view(const both& b) { return nanscope::view_of(b.x, 2, "hook"); }

/// A span-like type with const element access only.
struct const_span {
  const double* p;
  std::size_t n;
  const double* data() const { return p; }
  std::size_t size() const { return n; }
};
}  // namespace other_lib

template <>
struct nanscope::tensor_traits<other_lib::both> {
  static nanscope::tensor_view view(const other_lib::both& b) { return nanscope::view_of(b.x, 2, "traits"); }
};

namespace {

using nanscope::dtype;
using nanscope::tensor_view;
using namespace nstest;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

/// The what() of the nanscope::error thrown by f, lower-cased; "<no exception>" if none.
std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const nanscope::error& e) {
    return lower(e.what());
  } catch (...) {
    return "<other exception>";
  }
  return "<no exception>";
}
bool has(const std::string& hay, const char* needle) { return hay.find(needle) != std::string::npos; }

tensor_view base_view(const void* data, const char* name) {
  tensor_view v;
  v.data = data;
  v.type = dtype::f32;
  v.rank = 2;
  v.shape[0] = 2;
  v.shape[1] = 3;
  v.strides[0] = 3;
  v.strides[1] = 1;
  v.name = name;
  return v;
}

/// Checks that both validate() and check() reject v with an error naming the tensor and containing each
/// of the problem words.
void expect_rejected(const tensor_view& v, std::initializer_list<const char*> words) {
  const std::string a = error_text([&] { nanscope::validate(v); });
  const std::string b = error_text([&] { (void)nanscope::check(v); });
  INFO("validate(): ", a);
  INFO("check():    ", b);
  const std::string name = v.name != nullptr ? lower(v.name) : std::string("<unnamed>");
  CHECK(has(a, name.c_str()));
  CHECK(has(b, name.c_str()));
  for (const char* w : words) {
    CAPTURE(std::string(w));
    CHECK(has(a, w));
    CHECK(has(b, w));
  }
}

}  // namespace

// -----------------------------------------------------------------------------------------------------------
// Validation
// -----------------------------------------------------------------------------------------------------------
TEST_CASE("view validation: bad views throw nanscope::error naming the tensor and the problem") {
  const float buf[64] = {};

  SUBCASE("null data with elements") {
    tensor_view v = base_view(nullptr, "layer3.weight");
    expect_rejected(v, {"null"});
    v.shape[1] = 0;  // no elements: a null pointer is fine
    CHECK_NOTHROW(nanscope::validate(v));
    CHECK(nanscope::check(v).count == 0);
  }
  SUBCASE("shape product overflow") {
    tensor_view v = base_view(buf, "huge_act");
    v.rank = 3;
    v.shape[0] = std::int64_t{1} << 40;
    v.shape[1] = std::int64_t{1} << 40;
    v.shape[2] = 1;
    v.strides[0] = 0;
    v.strides[1] = 0;
    v.strides[2] = 0;
    expect_rejected(v, {"overflow"});
  }
  SUBCASE("negative extent") {
    tensor_view v = base_view(buf, "neg_shape");
    v.shape[1] = -3;
    expect_rejected(v, {"negative", "extent"});
  }
  SUBCASE("negative stride") {
    tensor_view v = base_view(buf, "flipped");
    v.strides[1] = -1;
    expect_rejected(v, {"negative", "stride"});
  }
  SUBCASE("strides whose byte offsets overflow") {
    tensor_view v = base_view(buf, "far_strides");
    v.strides[0] = std::int64_t{1} << 62;
    expect_rejected(v, {"stride", "overflow"});
  }
  SUBCASE("rank above max_rank, and negative rank") {
    tensor_view v = base_view(buf, "rank9");
    v.rank = 9;
    expect_rejected(v, {"rank", "9"});
    v.rank = -1;
    v.name = "rank_neg";
    expect_rejected(v, {"rank"});
    const std::string c = error_text([&] {
      (void)tensor_view::contiguous(buf, dtype::f32, {1, 1, 1, 1, 1, 1, 1, 1, 1}, "nine_dims");
    });
    CHECK(has(c, "nine_dims"));
    CHECK(has(c, "rank"));
    CHECK_NOTHROW((void)tensor_view::contiguous(buf, dtype::f32, {1, 1, 1, 1, 1, 1, 1, 2}, "eight_dims"));
  }
  SUBCASE("invalid dtype value") {
    tensor_view v = base_view(buf, "bad_dtype");
    v.type = static_cast<dtype>(99);
    expect_rejected(v, {"dtype", "99"});
    v.type = static_cast<dtype>(nanscope::dtype_count);
    expect_rejected(v, {"dtype"});
  }
  SUBCASE("CUDA device memory on the host") {
    tensor_view v = base_view(buf, "gpu_tensor");
    v.space = nanscope::memory_space::cuda_device;
    v.device_id = 0;
    const std::string b = error_text([&] { (void)nanscope::check(v); });
    INFO(b);
    CHECK(has(b, "gpu_tensor"));
    CHECK(has(b, "cuda"));
    // host-readable CUDA memory kinds are accepted
    v.space = nanscope::memory_space::cuda_managed;
    CHECK(nanscope::check(v).count == 6);
    v.space = nanscope::memory_space::cuda_pinned;
    CHECK(nanscope::check(v).count == 6);
  }
  SUBCASE("an unknown check mode") {
    const tensor_view v = base_view(buf, "modes");
    for (unsigned m : {0u, 7u, 200u}) {
      const std::string b = error_text([&] {
        (void)nanscope::check(v, nanscope::check_options{}.with_mode(static_cast<nanscope::check_mode>(m)));
      });
      INFO(b);
      CHECK(has(b, "modes"));
      CHECK(has(b, "mode"));
    }
  }
  SUBCASE("unnamed tensors and names given at the call") {
    tensor_view v = base_view(nullptr, nullptr);
    const std::string a = error_text([&] { (void)nanscope::check(v); });
    CHECK(has(a, "<unnamed>"));
    const std::string b = error_text([&] { (void)nanscope::check(v, "given_at_call"); });
    CHECK(has(b, "given_at_call"));
  }
  SUBCASE("the error type") {
    tensor_view v = base_view(nullptr, "t");
    CHECK_THROWS_AS(nanscope::validate(v), nanscope::error);
    CHECK_THROWS_AS(nanscope::validate(v), std::invalid_argument);
  }
  SUBCASE("valid edge cases pass") {
    tensor_view v = base_view(buf, "ok");
    v.strides[0] = 0;  // broadcast
    CHECK_NOTHROW(nanscope::validate(v));
    v.rank = 0;  // scalar
    CHECK_NOTHROW(nanscope::validate(v));
    CHECK(v.numel() == 1);
  }
}

TEST_CASE("tensor_view helpers: contiguous, flat, numel, is_contiguous, named") {
  const float buf[24] = {};
  const tensor_view c = tensor_view::contiguous(buf, dtype::f32, {2, 3, 4}, "c");
  CHECK(c.rank == 3);
  CHECK(c.shape[0] == 2);
  CHECK(c.shape[2] == 4);
  CHECK(c.strides[0] == 12);
  CHECK(c.strides[1] == 4);
  CHECK(c.strides[2] == 1);
  CHECK(c.numel() == 24);
  CHECK(c.is_contiguous());
  CHECK(std::string(c.name) == "c");
  CHECK(c.element_size() == 4);
  tensor_view t = c;
  t.strides[1] = 1;
  t.strides[2] = 3;  // a transposed inner pair
  CHECK_FALSE(t.is_contiguous());
  const tensor_view f = tensor_view::flat(buf, dtype::bf16, 24);
  CHECK(f.rank == 1);
  CHECK(f.numel() == 24);
  CHECK(f.strides[0] == 1);
  CHECK(f.name == nullptr);
  tensor_view g = f;
  CHECK(std::string(g.named("renamed").name) == "renamed");
  const tensor_view z = tensor_view::contiguous(buf, dtype::f32, {3, 0, 2});
  CHECK(z.numel() == 0);
  const tensor_view u = tensor_view::contiguous(buf, dtype::f32, {1, 24, 1});
  tensor_view u2 = u;
  u2.strides[0] = 12345;
  u2.strides[2] = 7;
  CHECK(u2.is_contiguous());  // unit-extent dims may have any stride
}

// -----------------------------------------------------------------------------------------------------------
// Traits
// -----------------------------------------------------------------------------------------------------------
TEST_CASE("to_view: standard containers, C arrays, view_of") {
  SUBCASE("std::vector") {
    const std::vector<float> v = {1.0f, -2.0f, 0.0f, 4.0f, 5.0f};
    const tensor_view tv = nanscope::to_view(v);
    CHECK(tv.data == v.data());
    CHECK(tv.type == dtype::f32);
    CHECK(tv.rank == 1);
    CHECK(tv.shape[0] == 5);
    CHECK(tv.strides[0] == 1);
    const nanscope::health_result r = nanscope::check(v);
    expect_health(r, reference(tv), tv, nanscope::check_mode::stats, moment_tol(dtype::f32, nanscope::isa::automatic));
    CHECK(r.min == -2.0);
    CHECK(r.max == 5.0);
    CHECK(std::string(nanscope::to_view(v, "named_vec").name) == "named_vec");
  }
  SUBCASE("std::array") {
    const std::array<double, 4> a = {0.5, 1.5, -0.0, 2.0};
    const tensor_view tv = nanscope::to_view(a);
    CHECK(tv.data == a.data());
    CHECK(tv.type == dtype::f64);
    CHECK(tv.shape[0] == 4);
    const nanscope::health_result r = nanscope::check(a);
    CHECK(r.zero == 1);
    CHECK(r.positive == 3);
    CHECK(r.mean == 1.0);
  }
  SUBCASE("std::array of const elements, and const containers") {
    const std::array<const float, 3> a = {1.0f, 2.0f, 3.0f};
    const tensor_view tv = nanscope::to_view(a);
    CHECK(tv.type == dtype::f32);
    CHECK(tv.shape[0] == 3);
    CHECK(nanscope::check(a).mean == 2.0);
    const std::vector<nanscope::half> h = {nanscope::half::from_bits(0x3C00), nanscope::half::from_bits(0x7C00)};
    const std::vector<nanscope::half>& ch = h;
    const nanscope::health_result rh = nanscope::check(ch);
    CHECK(rh.type == dtype::f16);
    CHECK(rh.pos_inf == 1);
    CHECK(rh.first_nonfinite == 1);
  }
  SUBCASE("C arrays: 1-D, 2-D gives {M, N}, 3-D, const") {
    const float a1[6] = {1, 2, 3, 4, 5, 6};
    const tensor_view v1 = nanscope::to_view(a1);
    CHECK(v1.rank == 1);
    CHECK(v1.shape[0] == 6);
    CHECK(v1.data == static_cast<const void*>(a1));
    float a2[2][3] = {{1, 2, 3}, {4, 5, 6}};
    const tensor_view v2 = nanscope::to_view(a2);
    CHECK(v2.rank == 2);
    CHECK(v2.shape[0] == 2);
    CHECK(v2.shape[1] == 3);
    CHECK(v2.strides[0] == 3);
    CHECK(v2.strides[1] == 1);
    CHECK(v2.type == dtype::f32);
    const nanscope::health_result r2 = nanscope::check(a2);
    CHECK(r2.rank == 2);
    CHECK(r2.shape[0] == 2);
    CHECK(r2.shape[1] == 3);
    CHECK(r2.mean == 3.5);
    const double a3[2][2][5] = {};
    const tensor_view v3 = nanscope::to_view(a3);
    CHECK(v3.rank == 3);
    CHECK(v3.shape[2] == 5);
    CHECK(v3.strides[0] == 10);
    CHECK(v3.type == dtype::f64);
    CHECK(nanscope::check(a3).zero == 20);
  }
  SUBCASE("view_of(ptr, n) and view_of(ptr, {shape})") {
    const std::vector<double> d(24, 1.0);
    const tensor_view a = nanscope::view_of(d.data(), d.size(), "flat24");
    CHECK(a.rank == 1);
    CHECK(a.shape[0] == 24);
    CHECK(a.type == dtype::f64);
    CHECK(std::string(a.name) == "flat24");
    const tensor_view b = nanscope::view_of(d.data(), {2, 3, 4});
    CHECK(b.rank == 3);
    CHECK(b.shape[1] == 3);
    CHECK(b.strides[0] == 12);
    CHECK(b.strides[2] == 1);
    const nanscope::health_result r = nanscope::check(b);
    CHECK(r.count == 24);
    CHECK(r.mean == 1.0);
    CHECK(r.std == 0.0);  // 24 equal values
  }
}

TEST_CASE("to_view: a foreign type through a tensor_traits specialisation (column-major matrix)") {
  foreign::col_matrix m;
  m.rows = 37;
  m.cols = 11;
  m.storage.resize(static_cast<std::size_t>(m.rows * m.cols));
  rng g(5);
  for (float& x : m.storage) x = static_cast<float>(g.normal());
  m.storage[5 * 37 + 2] = qnan_f();  // logical (2, 5): flat row-major index 2 * 11 + 5 = 27
  m.storage[0 * 37 + 30] = neg_inf_f();  // logical (30, 0): index 330, later in row-major order
  CHECK(nanscope::is_tensor<foreign::col_matrix>::value);
  CHECK(nanscope::is_tensor<const foreign::col_matrix>::value);
  const tensor_view v = nanscope::to_view(m);
  CHECK(v.rank == 2);
  CHECK(v.shape[0] == 37);
  CHECK(v.shape[1] == 11);
  CHECK(std::string(v.name) == "col_matrix");
  // independent logical order, from the type's own accessor
  std::vector<float> logical;
  for (std::int64_t r = 0; r < m.rows; ++r)
    for (std::int64_t c = 0; c < m.cols; ++c) logical.push_back(m.at(r, c));
  const ref_health ref = reference(dtype::f32, raw_of(logical));
  REQUIRE(ref.first_nonfinite == 27);
  for (nanscope::check_mode mode : all_modes) {
    const nanscope::health_result r = nanscope::check(m, nanscope::check_options{}.with_mode(mode));
    expect_health(r, ref, v, mode, moment_tol(dtype::f32, nanscope::isa::automatic));
  }
  CHECK(std::string(nanscope::to_view(m, "override").name) == "override");
}

TEST_CASE("to_view: a foreign type through an ADL nanscope_view hook (padded rank-3)") {
  other_lib::padded3 t;
  t.d0 = 3;
  t.d1 = 5;
  t.d2 = 7;
  t.pad = 2;
  t.storage.assign(static_cast<std::size_t>(t.d0 * t.d1 * (t.d2 + t.pad)), qnan());  // padding is NaN
  rng g(6);
  std::vector<double> logical;
  for (std::int64_t i = 0; i < t.d0; ++i)
    for (std::int64_t j = 0; j < t.d1; ++j)
      for (std::int64_t k = 0; k < t.d2; ++k) {
        const double x = g.normal() * 100;
        t.storage[static_cast<std::size_t>((i * t.d1 + j) * (t.d2 + t.pad) + k)] = x;
        logical.push_back(t.at(i, j, k));
      }
  CHECK(nanscope::is_tensor<other_lib::padded3>::value);
  const tensor_view v = nanscope::to_view(t);
  CHECK(v.rank == 3);
  CHECK(v.type == dtype::f64);
  CHECK(std::string(v.name) == "padded3");
  const ref_health ref = reference(dtype::f64, raw_of(logical));
  REQUIRE(ref.nan == 0);
  for (nanscope::check_mode mode : all_modes) {
    const nanscope::health_result r = nanscope::check(t, nanscope::check_options{}.with_mode(mode));
    expect_health(r, ref, v, mode, moment_tol(dtype::f64, nanscope::isa::automatic));
  }
}

TEST_CASE("to_view: the tensor_traits specialisation wins over the ADL hook, span-like const types") {
  const other_lib::both b;
  CHECK(std::string(nanscope::to_view(b).name) == "traits");
  const double d[3] = {1.0, 2.0, 4.0};
  const other_lib::const_span s{d, 3};
  CHECK(nanscope::is_tensor<other_lib::const_span>::value);
  const tensor_view v = nanscope::to_view(s);
  CHECK(v.data == static_cast<const void*>(d));
  CHECK(v.type == dtype::f64);
  CHECK(v.shape[0] == 3);
  CHECK(nanscope::check(s).max == 4.0);
  CHECK_FALSE(nanscope::is_tensor<int>::value);
  CHECK_FALSE(nanscope::is_tensor<std::vector<std::string>>::value);
  CHECK(nanscope::is_tensor<tensor_view>::value);
  CHECK(nanscope::is_tensor<float[3][4]>::value);
}

TEST_CASE("integer and bool tensors: count only, in every mode") {
  const std::vector<std::int64_t> i64 = {-1, 0, 1, 9223372036854775807LL};
  const std::vector<std::uint16_t> u16(300, 7);
  const bool flags[2][3] = {{true, false, true}, {false, false, true}};
  for (nanscope::check_mode mode : all_modes) {
    const nanscope::health_result a = nanscope::check(i64, nanscope::check_options{}.with_mode(mode));
    const nanscope::health_result b = nanscope::check(u16, nanscope::check_options{}.with_mode(mode));
    const nanscope::health_result c = nanscope::check(flags, nanscope::check_options{}.with_mode(mode));
    expect_health(a, ref_health{4}, nanscope::to_view(i64), mode, 0);
    expect_health(b, ref_health{300}, nanscope::to_view(u16), mode, 0);
    expect_health(c, ref_health{6}, nanscope::to_view(flags), mode, 0);
    CHECK(a.type == dtype::i64);
    CHECK(b.type == dtype::u16);
    CHECK(c.type == dtype::boolean);
    CHECK(c.rank == 2);
    CHECK_FALSE(a.is_float());
  }
}
