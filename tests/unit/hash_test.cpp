// nanscope tests — hash_test.cpp: the content hash (hash.hpp) of check_options::with_hash() against a naive
// reference that follows the documented definition literally (docs/tree.md, "Content hash"): every dtype,
// every ISA, 1/2/4 threads, strided and permuted views, every mode; every single-bit flip and every swap of two
// unequal elements changes the hash.
#include "support/compare.hpp"

#include <nanscope/check.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ns = nanscope;
using ns::check_mode;
using ns::dtype;
using ns::isa;

__extension__ typedef unsigned __int128 u128;

// --- the reference: the definition, one element at a time ---------------------------------------------------
constexpr std::uint64_t M61 = (std::uint64_t{1} << 61) - 1;
std::uint64_t ref_mul(std::uint64_t a, std::uint64_t b) { return static_cast<std::uint64_t>((u128{a} * b) % M61); }
std::uint64_t ref_pow(std::uint64_t e) {
  std::uint64_t r = 1;
  for (std::uint64_t b = 37; e != 0; e >>= 1, b = ref_mul(b, b))
    if (e & 1) r = ref_mul(r, b);
  return r;
}

/// Elements of one dtype as raw little-endian bytes.
struct raw_tensor {
  dtype t;
  std::size_t es;
  std::vector<unsigned char> bytes;
  std::size_t size() const { return bytes.size() / es; }
  std::uint64_t get(std::size_t i) const {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes.data() + i * es, es);  // little-endian host
    return v;
  }
  void set(std::size_t i, std::uint64_t v) { std::memcpy(bytes.data() + i * es, &v, es); }
  ns::tensor_view view() const { return ns::tensor_view::flat(bytes.data(), t, static_cast<std::int64_t>(size())); }
};

/// The hash string of the definition: planes of 32-bit limbs, A = sum x (i+1) B^c, S = sum x B^c mod p.
std::string reference_hex(const raw_tensor& x) {
  const int planes = x.es == 8 ? 2 : 1;
  std::string out;
  for (int q = 0; q < planes; ++q) {
    std::uint64_t a = 0, s = 0, w = 1, wc = 0;  // w = B^wc, recomputed when the block changes
    for (std::size_t k = 0; k < x.size(); ++k) {
      const std::uint64_t v = x.get(k);
      const std::uint64_t limb = x.es == 8 ? (q == 0 ? v & 0xFFFFFFFFu : v >> 32) : v;
      const std::uint64_t c = k / 8192, i = k % 8192;
      if (c != wc) w = ref_pow(wc = c);
      a = (a + ref_mul(ref_mul(limb, i + 1), w)) % M61;
      s = (s + ref_mul(limb, w)) % M61;
    }
    char buf[40];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(a),
                  static_cast<unsigned long long>(s));
    out += buf;
  }
  return out;
}

raw_tensor random_tensor(dtype t, std::size_t n, std::uint64_t seed) {
  raw_tensor x{t, ns::size_of(t), {}};
  x.bytes.resize(n * x.es);
  std::mt19937_64 g(seed);
  for (auto& b : x.bytes) b = static_cast<unsigned char>(g());
  return x;
}

std::string hex_of(const ns::tensor_view& v, ns::check_options o = {}) {
  const ns::health_result r = ns::check(v, o.with_hash());
  REQUIRE(r.hash.valid);
  return ns::to_hex(r.hash);
}

const dtype hash_types[] = {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::f8_e4m3fn,
                           dtype::f8_e5m2, dtype::i8, dtype::i16, dtype::i32, dtype::i64,
                           dtype::u8, dtype::u16, dtype::u32, dtype::u64, dtype::boolean};
using nstest::all_isas;

}  // namespace

TEST_CASE("hash: off by default, 32 or 64 hex digits when on, empty tensors hash to zeros") {
  const raw_tensor x = random_tensor(dtype::f32, 100, 1);
  CHECK_FALSE(ns::check(x.view()).hash.valid);
  CHECK(hex_of(x.view()).size() == 32);
  CHECK(hex_of(random_tensor(dtype::u64, 3, 2).view()).size() == 64);
  const float dummy = 0;
  const ns::tensor_view e = ns::tensor_view::contiguous(&dummy, dtype::f32, {0, 4});
  CHECK(hex_of(e) == std::string(32, '0'));
}

TEST_CASE("hash: equals the reference for every dtype, ISA, thread count and many lengths") {
  const std::size_t lengths[] = {1, 2, 7, 15, 16, 17, 31, 33, 100, 8191, 8192, 8193, 2 * 131072 + 8192 * 3 + 5};
  for (dtype t : hash_types)
    for (std::size_t n : lengths) {
      const raw_tensor x = random_tensor(t, n, n * 31 + static_cast<unsigned>(t));
      const std::string want = reference_hex(x);
      for (isa i : all_isas)
        for (unsigned th : {1u, 2u, 4u}) {
          if (n < 8192 && th > 1) continue;
          CAPTURE(ns::name(t));
          CAPTURE(n);
          CAPTURE(ns::name(i));
          CAPTURE(th);
          const ns::check_options o = ns::check_options{}.with_isa(i).with_threads(th).with_parallel_threshold(0);
          CHECK(hex_of(x.view(), o) == want);
          if (n > 131072) {  // every mode, on the large tensor
            for (check_mode m : {check_mode::no_tensor, check_mode::shape, check_mode::curt_health,
                                 check_mode::concise_health, check_mode::full_health})
              CHECK(hex_of(x.view(), ns::check_options{o}.with_mode(m)) == want);
          }
        }
    }
}

TEST_CASE("hash: the hash rides along without changing the health result") {
  const raw_tensor x = random_tensor(dtype::f32, 300000, 9);
  const ns::health_result a = ns::check(x.view(), ns::check_options{}.with_threads(1));
  const ns::health_result b = ns::check(x.view(), ns::check_options{}.with_threads(1).with_hash());
  CHECK(a.nan == b.nan);
  CHECK(a.positive == b.positive);
  CHECK(std::memcmp(&a.mean, &b.mean, sizeof a.mean) == 0);
  CHECK(std::memcmp(&a.std, &b.std, sizeof a.std) == 0);
  CHECK(a.first_nonfinite == b.first_nonfinite);
}

TEST_CASE("hash: every single-bit flip of every element changes it, for every dtype") {
  for (dtype t : hash_types)
    for (std::size_t n : {std::size_t{1}, std::size_t{37}}) {
      raw_tensor x = random_tensor(t, n, 7 + n);
      const std::string base = hex_of(x.view());
      for (std::size_t k = 0; k < n; ++k)
        for (std::size_t bit = 0; bit < 8 * x.es; ++bit) {
          const std::uint64_t v = x.get(k);
          x.set(k, v ^ (std::uint64_t{1} << bit));
          const std::string h = hex_of(x.view());
          if (h == base) FAIL_CHECK(ns::name(t) << " n=" << n << " element " << k << " bit " << bit);
          x.set(k, v);
        }
      CHECK(hex_of(x.view()) == base);
    }
}

TEST_CASE("hash: single-bit flips in later blocks and segments change it") {
  for (dtype t : {dtype::f32, dtype::f64, dtype::bf16, dtype::u8}) {
    raw_tensor x = random_tensor(t, 131072 + 8192 + 20, 3);
    const ns::check_options o = ns::check_options{}.with_threads(2).with_parallel_threshold(0);
    const std::string base = hex_of(x.view(), o);
    for (std::size_t k : {std::size_t{8191}, std::size_t{8192}, std::size_t{131071}, std::size_t{131072},
                          x.size() - 1})
      for (std::size_t bit : {std::size_t{0}, 8 * x.es - 1}) {
        const std::uint64_t v = x.get(k);
        x.set(k, v ^ (std::uint64_t{1} << bit));
        CHECK(hex_of(x.view(), o) != base);
        x.set(k, v);
      }
  }
}

TEST_CASE("hash: every swap of two unequal elements changes it, for every dtype") {
  for (dtype t : hash_types) {
    raw_tensor x = random_tensor(t, 40, 11);
    if (t == dtype::boolean)
      for (std::size_t k = 0; k < x.size(); ++k) x.set(k, k % 3 == 0 ? 1 : 0);
    // make some elements differ only in their high half (8-byte) or by the same limb sum
    if (x.es == 8) {
      x.set(0, 0x0000000100000000ull);
      x.set(1, 0x0000000000000001ull);
    }
    const std::string base = hex_of(x.view());
    int swaps = 0;
    for (std::size_t i = 0; i < x.size(); ++i)
      for (std::size_t j = i + 1; j < x.size(); ++j) {
        const std::uint64_t a = x.get(i), b = x.get(j);
        if (a == b) continue;
        x.set(i, b);
        x.set(j, a);
        if (hex_of(x.view()) == base) FAIL_CHECK(ns::name(t) << " swap " << i << " " << j);
        ++swaps;
        x.set(i, a);
        x.set(j, b);
      }
    CHECK(swaps > 100);
  }
}

TEST_CASE("hash: swaps across blocks (same in-block position) change it") {
  for (dtype t : {dtype::f32, dtype::f64, dtype::f16, dtype::i8}) {
    raw_tensor x = random_tensor(t, 3 * 8192, 5);
    const std::string base = hex_of(x.view());
    for (std::size_t i : {std::size_t{0}, std::size_t{17}, std::size_t{8191}})
      for (std::size_t bj : {std::size_t{1}, std::size_t{2}}) {
        const std::size_t j = bj * 8192 + i;
        const std::uint64_t a = x.get(i), b = x.get(j);
        REQUIRE(a != b);
        x.set(i, b);
        x.set(j, a);
        CHECK(hex_of(x.view()) != base);
        x.set(i, a);
        x.set(j, b);
      }
  }
}

TEST_CASE("hash: strided and permuted views hash like their contiguous copy") {
  for (dtype t : {dtype::f32, dtype::f64, dtype::f16, dtype::u8, dtype::i64}) {
    // a transposed (permuted dense) 300 x 500 matrix: more than a segment
    const raw_tensor m = random_tensor(t, 300 * 500, 21);
    ns::tensor_view tv = m.view();
    tv.rank = 2;
    tv.shape[0] = 500;
    tv.shape[1] = 300;
    tv.strides[0] = 1;
    tv.strides[1] = 500;
    raw_tensor copy{t, m.es, std::vector<unsigned char>(m.bytes.size())};
    for (std::size_t r = 0; r < 500; ++r)
      for (std::size_t c = 0; c < 300; ++c) copy.set(r * 300 + c, m.get(c * 500 + r));
    const std::string want = reference_hex(copy);
    for (isa i : all_isas)
      for (unsigned th : {1u, 4u}) {
        const ns::check_options o = ns::check_options{}.with_isa(i).with_threads(th).with_parallel_threshold(0);
        CHECK(hex_of(tv, o) == want);
        CHECK(hex_of(copy.view(), o) == want);
      }
    // every third element of a 3-d block, with a broadcast dimension
    ns::tensor_view sv = m.view();
    sv.rank = 3;
    sv.shape[0] = 10;
    sv.shape[1] = 4;
    sv.shape[2] = 1000;
    sv.strides[0] = 12000;
    sv.strides[1] = 0;
    sv.strides[2] = 3;
    raw_tensor scopy{t, m.es, std::vector<unsigned char>(40000 * m.es)};
    for (std::size_t a = 0; a < 10; ++a)
      for (std::size_t b = 0; b < 4; ++b)
        for (std::size_t c = 0; c < 1000; ++c) scopy.set((a * 4 + b) * 1000 + c, m.get(a * 12000 + c * 3));
    const std::string swant = reference_hex(scopy);
    for (isa i : all_isas) CHECK(hex_of(sv, ns::check_options{}.with_isa(i)) == swant);
    CHECK(hex_of(sv, ns::check_options{}.with_mode(check_mode::curt_health)) == swant);
  }
}
