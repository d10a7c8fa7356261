// nanscope tests — shape_overflow_test.cpp: shapes and strides whose products or sums do not fit in 64 bits
// (issue 13 item 7). An impossible shape is nanscope's clear error naming the tensor; an empty shape (some
// extent 0) is valid however large its other extents are. Every case here overflowed int64 arithmetic (signed
// overflow: undefined behaviour, which the asan-ubsan preset turns into a failure) before the fix.
#include "support/errors.hpp"
#include <nanscope/check.hpp>
#include <nanscope/margins.hpp>
#include <nanscope/npy.hpp>
#include <nanscope/safetensors.hpp>

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace {

namespace ns = nanscope;
constexpr std::int64_t p62 = std::int64_t{1} << 62;  // 2**62
const std::string p62s = "4611686018427387904";
__extension__ typedef __int128 i128;  // exact products for the reference (GCC and Clang)
__extension__ typedef unsigned __int128 u128;

using nstest::error_of;

/// A .npy file (format 1.0) with the given header dict and no data (built as a string: GCC 12's -Warray-bounds
/// misfires on vector::insert at -O2).
std::vector<unsigned char> npy_bytes(const std::string& dict) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string f("\x93NUMPY\x01\x00", 8);
  f += static_cast<char>(header.size() & 0xFF);
  f += static_cast<char>(header.size() >> 8);
  f += header;
  return std::vector<unsigned char>(f.begin(), f.end());
}

/// A .safetensors file with the given JSON header and no data.
std::vector<unsigned char> st_bytes(const std::string& json) {
  std::string f;
  for (int i = 0; i < 8; ++i) f += static_cast<char>((static_cast<std::uint64_t>(json.size()) >> (8 * i)) & 0xFF);
  f += json;
  return std::vector<unsigned char>(f.begin(), f.end());
}

/// A file under $TMPDIR (or /tmp), removed at the end.
struct temp_file {
  std::string path;
  explicit temp_file(const std::vector<unsigned char>& bytes) {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t != nullptr && t[0] != '\0' ? t : "/tmp") + "/nanscope_shape_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    const int fd = ::mkstemp(buf.data());
    REQUIRE(fd >= 0);
    ::close(fd);
    path = buf.data();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
  }
  ~temp_file() { std::remove(path.c_str()); }
};

/// An empty view is checked as empty: count 0, the shape as given, nothing read.
void expect_empty_check(const ns::tensor_view& v) {
  ns::validate(v);
  CHECK(v.numel() == 0);
  CHECK(v.is_contiguous());
  for (auto m : {ns::check_mode::stats, ns::check_mode::full_health, ns::check_mode::curt_health}) {
    const auto r = ns::check(v, ns::check_options{}.with_mode(m));
    CHECK(r.count == 0);
    CHECK_FALSE(r.has_nonfinite());
    CHECK(r.rank == v.rank);
    for (int i = 0; i < v.rank; ++i) CHECK(r.shape[i] == v.shape[i]);
  }
  if (ns::is_float(v.type)) CHECK(ns::margins(v).count == 0);
}

}  // namespace

TEST_CASE("shape overflow: the checked helpers agree with exact 128-bit arithmetic") {
  const std::int64_t vals[] = {0, 1, -1, 2, 3, 7, 1 << 20, std::int64_t{1} << 31, std::int64_t{3037000499},
                               std::int64_t{3037000500}, p62, INT64_MAX, INT64_MIN, -p62, INT64_MAX / 3};
  for (std::int64_t a : vals)
    for (std::int64_t b : vals) {
      CAPTURE(a);
      CAPTURE(b);
      const i128 pm = static_cast<i128>(a) * b, ps = static_cast<i128>(a) + b;
      std::int64_t r = 0;
      const bool mo = ns::detail::mul_overflow(a, b, r);
      CHECK(mo == (pm > INT64_MAX || pm < INT64_MIN));
      if (!mo) CHECK(r == static_cast<std::int64_t>(pm));
      const bool ao = ns::detail::add_overflow(a, b, r);
      CHECK(ao == (ps > INT64_MAX || ps < INT64_MIN));
      if (!ao) CHECK(r == static_cast<std::int64_t>(ps));
      const auto ua = static_cast<std::uint64_t>(a), ub = static_cast<std::uint64_t>(b);
      std::uint64_t u = 0;
      const u128 um = static_cast<u128>(ua) * ub;
      CHECK(ns::detail::mul_overflow(ua, ub, u) == (um >> 64 != 0));
      CHECK(ns::detail::add_overflow(ua, ub, u) == (ua + ub < ua));
    }
}

TEST_CASE("shape overflow: tensor_view constructors") {
  float x = 0.0f;
  SUBCASE("empty shape with huge extents is valid and empty") {
    const auto v = ns::tensor_view::contiguous(&x, ns::dtype::f32, {0, p62, p62}, "e");
    CHECK(v.strides[2] == 1);
    CHECK(v.strides[1] == p62);
    CHECK(v.strides[0] == 0);  // would be 2**124: never applied, so 0
    expect_empty_check(v);
    expect_empty_check(ns::tensor_view::contiguous(nullptr, ns::dtype::f64, {p62, p62, 0, p62}, "e2"));
    expect_empty_check(ns::tensor_view::contiguous(nullptr, ns::dtype::bf16, {INT64_MAX, INT64_MAX, 0}, "e3"));
  }
  SUBCASE("element counts overflowing int64 are an error naming the tensor") {
    struct c {
      std::initializer_list<std::int64_t> shape;
      const char* text;
    };
    const c cases[] = {
        {{p62, p62}, "(4611686018427387904, 4611686018427387904)"},  // 2**124: overflows uint64 too
        {{p62, 4}, "(4611686018427387904, 4)"},                       // 2**64: the count alone overflows
        {{std::int64_t{1} << 31, std::int64_t{1} << 31, 2}, "(2147483648, 2147483648, 2)"},  // 2**63
        {{INT64_MAX, 2}, "(9223372036854775807, 2)"},
    };
    for (const c& k : cases) {
      const std::string e = error_of([&] { (void)ns::tensor_view::contiguous(&x, ns::dtype::f32, k.shape, "huge"); });
      CAPTURE(e);
      CHECK(e.find("nanscope: tensor 'huge': shape ") != std::string::npos);
      CHECK(e.find(k.text) != std::string::npos);
      CHECK(e.find("has more elements than fit in 64-bit arithmetic") != std::string::npos);
    }
    const std::string e = error_of([&] { (void)ns::tensor_view::flat(&x, ns::dtype::f32, INT64_MAX, "flat"); });
    CHECK(e == "(no nanscope::error)");  // a count that fits constructs; validate() judges the bytes
    const std::string e2 = error_of([&] { (void)ns::check(ns::tensor_view::flat(&x, ns::dtype::f32, INT64_MAX, "flat")); });
    CHECK(e2.find("nanscope: tensor 'flat': shape product overflows") != std::string::npos);
  }
  SUBCASE("byte offsets overflowing int64 are validate()'s error") {
    // 2**61 doubles: the count fits int64, the bytes (2**64) do not
    const auto v = ns::tensor_view::contiguous(&x, ns::dtype::f64, {std::int64_t{1} << 60, 2}, "bytes");
    const std::string e = error_of([&] { ns::validate(v); });
    CHECK(e.find("nanscope: tensor 'bytes': shape product overflows") != std::string::npos);
    ns::tensor_view s;  // 3x3 whose row stride runs past int64 bytes
    s.data = &x;
    s.type = ns::dtype::f32;
    s.rank = 2;
    s.shape[0] = 3;
    s.shape[1] = 3;
    s.strides[0] = p62;
    s.strides[1] = 1;
    s.name = "strided";
    CHECK_FALSE(s.is_contiguous());
    const std::string e3 = error_of([&] { (void)ns::check(s); });
    CHECK(e3.find("nanscope: tensor 'strided': strides overflow") != std::string::npos);
    // a view whose strides match a dense layout of an impossible shape: is_contiguous() must not overflow
    ns::tensor_view d = s;
    d.shape[0] = p62;
    d.shape[1] = p62;
    d.strides[0] = p62;
    d.name = "dense";
    (void)d.is_contiguous();
    const std::string e4 = error_of([&] { (void)ns::check(d); });
    CHECK(e4.find("nanscope: tensor 'dense': shape product overflows") != std::string::npos);
    // the last byte past the end of the address space
    ns::tensor_view w;
    w.data = reinterpret_cast<const void*>(~std::uintptr_t{0} - 15);
    w.type = ns::dtype::f32;
    w.rank = 1;
    w.shape[0] = 8;
    w.strides[0] = 1;
    w.name = "wrap";
    const std::string e5 = error_of([&] { ns::validate(w); });
    CHECK(e5.find("nanscope: tensor 'wrap': strides overflow: the last element would lie past the end of the address") !=
          std::string::npos);
  }
}

TEST_CASE("shape overflow: empty .npy arrays of shape (0, 2**62, 2**62), C and Fortran order") {
  for (const char* order : {"False", "True"}) {
    CAPTURE(std::string(order));
    const auto bytes = npy_bytes("{'descr': '<f8', 'fortran_order': " + std::string(order) + ", 'shape': (0, " + p62s +
                                 ", " + p62s + "), }");
    const ns::npy_layout lay = ns::parse_npy(bytes.data(), bytes.size(), "mem.npy");
    CHECK(lay.numel == 0);
    expect_empty_check(lay.view(bytes.data(), "npy_view"));
    temp_file tf(bytes);
    const ns::npy_array a = ns::read_npy(tf.path);
    CHECK(a.numel() == 0);
    expect_empty_check(a.view("npy_read"));
    // the empty extent last: Fortran strides overflow from the first dimension on
    const auto last0 = npy_bytes("{'descr': '<f4', 'fortran_order': " + std::string(order) + ", 'shape': (" + p62s +
                                 ", " + p62s + ", 0), }");
    expect_empty_check(ns::parse_npy(last0.data(), last0.size(), "mem2.npy").view(last0.data(), "npy_last0"));
    temp_file tf2(last0);
    expect_empty_check(ns::read_npy(tf2.path).view("npy_read_last0"));
  }
  // write_npy of such an empty view writes the shape; reading it back gives the same empty array
  {
    temp_file out(std::vector<unsigned char>{});
    const auto v = ns::tensor_view::contiguous(nullptr, ns::dtype::f16, {p62, 0, p62}, "w");
    ns::write_npy(out.path, v);
    const ns::npy_array back = ns::read_npy(out.path);
    CHECK(back.type == ns::dtype::f16);
    CHECK(back.shape == std::vector<std::int64_t>{p62, 0, p62});
    expect_empty_check(back.view("back"));
  }
  // a non-empty array of that size is refused by the parser (the data would not fit)
  const auto big = npy_bytes("{'descr': '<f8', 'fortran_order': True, 'shape': (2, " + p62s + ", " + p62s + "), }");
  const std::string e = error_of([&] { (void)ns::parse_npy(big.data(), big.size(), "big.npy"); });
  CHECK(e.find("nanscope: file 'big.npy': truncated") != std::string::npos);
}

TEST_CASE("shape overflow: an empty .safetensors tensor of shape [0, 2**62, 2**62]") {
  const auto bytes = st_bytes(R"({"e":{"dtype":"F32","shape":[0,)" + p62s + "," + p62s +
                              R"(],"data_offsets":[0,0]},"f":{"dtype":"BF16","shape":[)" + p62s + "," + p62s +
                              R"(,0],"data_offsets":[0,0]}})");
  const ns::safetensors_layout lay = ns::parse_safetensors(bytes.data(), bytes.size(), "mem.safetensors");
  REQUIRE(lay.tensors.size() == 2);
  for (const auto& t : lay.tensors) {
    CAPTURE(t.name);
    CHECK(t.numel == 0);
    expect_empty_check(t.view(bytes.data()));
  }
  const auto big = st_bytes(R"({"b":{"dtype":"F32","shape":[2,)" + p62s + "," + p62s + R"(],"data_offsets":[0,0]}})");
  const std::string e = error_of([&] { (void)ns::parse_safetensors(big.data(), big.size(), "big.safetensors"); });
  CHECK(e.find("has more elements than fit in 64 bits") != std::string::npos);
}
