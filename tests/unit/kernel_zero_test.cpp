// nanscope tests — kernel_zero_test.cpp: data with zeros in many blocks (ReLU outputs, masks, sparse tensors).
// The AVX2 kernel runs such blocks as zero blocks (detail/kernel_avx2_zero.hpp) and switches between its plain
// and zero runs as the zeros thicken and thin out; the AVX-512 and scalar kernels have their own paths. Every
// pattern, in f32, f16, bf16 and fp8 e4m3fn, on every ISA and mode, must give exactly the independent
// reference's counts, extrema and first index, a zero extremum with nanscope's sign (order by key: -0 below
// +0; the reference takes the zeros as equal), bit-identical results on 1 and 4 threads, and the scalar
// path's content hash.
#include "support/compare.hpp"
#include "support/reference.hpp"

#include <nanscope/check.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

// A named namespace, not an anonymous one: the unity-build test compiles every test file in one unit.
namespace zero_blocks_test {

using nanscope::check_mode;
using nanscope::dtype;
using namespace nstest;

const dtype zero_test_types[] = {dtype::f32, dtype::f16, dtype::bf16, dtype::f8_e4m3fn};

std::size_t esize(dtype t) { return t == dtype::f32 ? 4 : t == dtype::f8_e4m3fn ? 1 : 2; }
std::uint64_t sign_of(dtype t) { return std::uint64_t{1} << (8 * esize(t) - 1); }

/// A normal value m/8 * 2^e (m in 8..15, e in -6..4: exact in every type here, and inside every fast range)
/// with the given sign, written from the bit fields.
std::uint64_t ordinary(dtype t, bool neg, unsigned m, int e) {
  const std::uint64_t frac = m - 8;  // 3 bits
  switch (t) {
    case dtype::f32: return (neg ? sign_of(t) : 0) | (static_cast<std::uint64_t>(e + 127) << 23) | (frac << 20);
    case dtype::f16: return (neg ? sign_of(t) : 0) | (static_cast<std::uint64_t>(e + 15) << 10) | (frac << 7);
    case dtype::bf16: return (neg ? sign_of(t) : 0) | (static_cast<std::uint64_t>(e + 127) << 7) | (frac << 4);
    default: return (neg ? sign_of(t) : 0) | (static_cast<std::uint64_t>(e + 7) << 3) | frac;  // e4m3fn
  }
}

std::uint64_t random_ordinary(dtype t, std::mt19937_64& rng, bool neg) {
  return ordinary(t, neg, 8 + static_cast<unsigned>(rng() % 8), static_cast<int>(rng() % 11) - 6);
}

/// Values other than the ordinary ones, each alone among ReLU zeros: non-finite (NaN of either sign), subnormal,
/// the largest finite, and the stats level's fast-range edges (f32 / bf16: 2^-40 and 2^59) with their outer
/// neighbours. Most send their block through the per-lane path; the rest (the edges inside, 448 in e4m3fn,
/// 65504 in f16) test the zero block's extrema next to them.
std::vector<std::uint64_t> specials(dtype t) {
  switch (t) {
    case dtype::f32:
      return {0x7FC00000u, 0xFFFFFFFFu, 0x7F800000u, 0xFF800000u, 0x00000001u, 0x807FFFFFu, 0x7F7FFFFFu,
              0x2B800000u /* 2^-40 */, 0xAB7FFFFFu, 0x5D000000u /* 2^59 */, 0x5D000001u};
    case dtype::f16: return {0x7E00u, 0xFE00u, 0xFFFFu, 0x7C00u, 0xFC00u, 0x0001u, 0x83FFu, 0x7BFFu};
    case dtype::bf16: return {0x7FC0u, 0xFFFFu, 0x7F80u, 0xFF80u, 0x0001u, 0x807Fu, 0x2B80u, 0xAB7Fu, 0x5D00u, 0x5D01u};
    default: return {0x7Fu, 0xFFu, 0x01u, 0x87u, 0x7Eu};  // e4m3fn: NaN, -NaN, subnormals, 448
  }
}

// Two whole chunks, half a chunk of full blocks and a tail of 77.
constexpr std::size_t zero_test_n = 2 * 8192 + 4096 + 77;

struct pattern {
  std::string name;
  std::function<std::uint64_t(dtype, std::size_t, std::mt19937_64&)> at;  // element i's raw bits
};

/// Which of 128-element block b's elements are zeros in the "stretches" pattern: runs of dense zeros, none, one
/// per block, two close blocks with one each, so the kernel switches runs back and forth, also across chunks.
bool stretch_zero(std::size_t i) {
  const std::size_t b = i / 128, j = i % 128, phase = b % 48;
  if (phase < 12) return j % 2 == 0;              // dense: the zero run
  if (phase < 22) return false;                   // none: back to the plain run after 8
  if (phase < 28) return j == 77;                 // one zero per block: the per-lane path, then the zero run
  if (phase < 31) return (j % 5) == 1;            // dense again
  if (phase < 40) return false;
  if (phase == 41 || phase == 44) return j == 3;  // one each, three blocks apart
  return false;
}

std::vector<pattern> patterns() {
  return {
      {"relu (+0)", [](dtype t, std::size_t, std::mt19937_64& r) { const bool neg = r() % 2 != 0; return neg ? std::uint64_t{0} : random_ordinary(t, r, false); }},
      {"relu (-0)", [](dtype t, std::size_t, std::mt19937_64& r) { const bool neg = r() % 2 != 0; return neg ? sign_of(t) : random_ordinary(t, r, false); }},
      {"negatives and both zeros", [](dtype t, std::size_t, std::mt19937_64& r) {
         const auto k = r() % 4;
         return k < 2 ? random_ordinary(t, r, true) : k == 2 ? std::uint64_t{0} : sign_of(t); }},
      {"negatives and -0 only", [](dtype t, std::size_t, std::mt19937_64& r) { return r() % 3 == 0 ? sign_of(t) : random_ordinary(t, r, true); }},
      {"positives and -0 only", [](dtype t, std::size_t, std::mt19937_64& r) { return r() % 3 == 0 ? sign_of(t) : random_ordinary(t, r, false); }},
      {"all +0", [](dtype, std::size_t, std::mt19937_64&) { return std::uint64_t{0}; }},
      {"all -0", [](dtype t, std::size_t, std::mt19937_64&) { return sign_of(t); }},
      {"+0 and -0", [](dtype t, std::size_t i, std::mt19937_64&) { return i % 3 == 0 ? sign_of(t) : std::uint64_t{0}; }},
      {"one zero every 100", [](dtype t, std::size_t i, std::mt19937_64& r) { const auto x = random_ordinary(t, r, r() % 2 != 0); return i % 100 == 3 ? std::uint64_t{0} : x; }},
      {"stretches", [](dtype t, std::size_t i, std::mt19937_64& r) {
         const auto x = random_ordinary(t, r, r() % 2 != 0);
         return stretch_zero(i) ? (i % 7 == 0 ? sign_of(t) : std::uint64_t{0}) : x; }},
      // zeros of one sign only in the first blocks of each chunk and in the tail (which the plain run sees), of
      // the other only in between (the zero run): the zero extremum must come from the zero run's zeros
      {"-0 only past each chunk's first blocks (min -0)", [](dtype t, std::size_t i, std::mt19937_64& r) {
         const bool early = i % 8192 < 4 * 128 || i >= zero_test_n - 200;
         return r() % 2 != 0 ? (early ? std::uint64_t{0} : sign_of(t)) : random_ordinary(t, r, false); }},
      {"+0 only past each chunk's first blocks (max +0)", [](dtype t, std::size_t i, std::mt19937_64& r) {
         const bool early = i % 8192 < 4 * 128 || i >= zero_test_n - 200;
         return r() % 2 != 0 ? (early ? sign_of(t) : std::uint64_t{0}) : random_ordinary(t, r, true); }},
      // vector lane 0 holds only zeros in even blocks and the smallest magnitude in odd ones: a lane's zeros
      // must not hide its smallest non-zero |x| from another block
      {"a lane of zeros, then its smallest value", [](dtype t, std::size_t i, std::mt19937_64& r) {
         const auto x = random_ordinary(t, r, r() % 2 != 0);
         if (i % 8 == 0) return (i / 128) % 2 == 0 ? std::uint64_t{0} : ordinary(t, false, 8, -6);
         return r() % 2 != 0 ? std::uint64_t{0} : (x & ~(sign_of(t) - 1)) | ordinary(t, false, 9, -5); }},
      {"zeros and subnormals", [](dtype t, std::size_t, std::mt19937_64& r) {
         const auto k = r() % 8;
         return k < 4 ? std::uint64_t{0} : k == 4 ? std::uint64_t{1} : random_ordinary(t, r, k == 5); }},
  };
}

void store_bits(dtype t, std::vector<unsigned char>& buf, std::size_t i, std::uint64_t bits) {
  std::memcpy(buf.data() + i * esize(t), &bits, esize(t));  // little endian
}

/// Checks the data in every mode, ISA and 1 / 4 threads against the reference.
void check_data(dtype t, const std::vector<std::uint64_t>& raw, const std::string& what) {
  std::vector<unsigned char> buf(raw.size() * esize(t));
  for (std::size_t i = 0; i < raw.size(); ++i) store_bits(t, buf, i, raw[i]);
  const ref_health ref = reference(t, raw);
  // The reference orders -0 and +0 alike; nanscope orders by key, -0 below +0: a zero minimum is -0 when any
  // zero is, a zero maximum +0 when any zero is.
  bool any_pos0 = false, any_neg0 = false;
  for (std::uint64_t b : raw) {
    any_pos0 = any_pos0 || b == 0;
    any_neg0 = any_neg0 || b == sign_of(t);
  }
  const auto v = nanscope::tensor_view::flat(buf.data(), t, static_cast<std::int64_t>(raw.size()));
  // the content hash, which the f32 kernels step as they read (the zero run too), is the scalar path's
  const nanscope::content_hash want = nanscope::check(v, opts(check_mode::stats, nanscope::isa::scalar, 1).with_hash()).hash;
  REQUIRE(want.valid);
  for (nanscope::isa i : all_isas) {
    for (check_mode m : {check_mode::concise_health, check_mode::full_health, check_mode::stats}) {
      INFO(what, " dtype=", std::string(nanscope::name(t)), " isa=", std::string(nanscope::name(i)));
      const auto r1 = nanscope::check(v, opts(m, i, 1));
      expect_health(r1, ref, v, m, moment_tol(t, i));
      if (m == check_mode::stats) {
        if (is_zero(ref.min)) CHECK(sign_bit(r1.min) == any_neg0);
        if (is_zero(ref.max)) CHECK(sign_bit(r1.max) == !any_pos0);
      }
      const auto r4 = nanscope::check(v, opts(m, i, 4));
      CHECK(first_difference(r1, r4) == "");
      CHECK(nanscope::check(v, opts(m, i, 1).with_hash()).hash == want);
    }
  }
}

TEST_CASE("zero blocks: ReLU outputs, +0 / -0 mixes, all zeros, sparse and dense stretches, exact") {
  for (dtype t : zero_test_types) {
    for (const pattern& p : patterns()) {
      std::mt19937_64 rng(11);
      std::vector<std::uint64_t> raw(zero_test_n);
      for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = p.at(t, i, rng);
      check_data(t, raw, p.name);
    }
  }
}

TEST_CASE("zero blocks: a special value among ReLU zeros sends its block through the per-lane path, exact") {
  // positions: inside the first zero run, a block's first and last lanes, a chunk's last element and the next
  // chunk's first, and the tail
  const std::size_t positions[] = {300, 4000, 4095, 8191, 8192, 8192 + 128 * 5 + 3, zero_test_n - 1};
  for (dtype t : zero_test_types) {
    for (std::uint64_t sp : specials(t)) {
      for (std::size_t pos : positions) {
        std::mt19937_64 rng(5);
        std::vector<std::uint64_t> raw(zero_test_n);
        for (std::size_t i = 0; i < raw.size(); ++i) {
          const bool zero = rng() % 2 != 0;
          raw[i] = zero ? (i % 5 == 0 ? sign_of(t) : 0) : random_ordinary(t, rng, false);
        }
        raw[pos] = sp;
        check_data(t, raw, "relu with special " + std::to_string(sp) + " at " + std::to_string(pos));
      }
    }
  }
}

TEST_CASE("zero blocks: the first non-finite value of a chunk whose later runs meet others") {
  // ReLU zeros, with non-finite values in the plain run's first block, in the zero run, in the plain run after
  // zero-free blocks, and in the next chunk: first_nonfinite is the first, whichever run met the others
  for (dtype t : zero_test_types) {
    const std::uint64_t nan = t == dtype::f32 ? 0x7FC00000u : t == dtype::f8_e4m3fn ? 0x7Fu : t == dtype::f16 ? 0x7E00u : 0x7FC0u;
    const std::uint64_t inf = t == dtype::f32 ? 0xFF800000u : t == dtype::f16 ? 0xFC00u : t == dtype::bf16 ? 0xFF80u : 0xFFu;
    const std::vector<std::vector<std::size_t>> layouts = {{5, 3000}, {3000, 6000}, {3000, 5000 + 2 * 128}, {7000, 9000}};
    for (const auto& at : layouts) {
      std::mt19937_64 rng(3);
      std::vector<std::uint64_t> raw(zero_test_n);
      for (std::size_t i = 0; i < raw.size(); ++i) {
        const bool clear = i >= 4000 && i < 5000 + 128;  // zero-free blocks: the zero run hands back
        raw[i] = !clear && rng() % 2 != 0 ? 0 : random_ordinary(t, rng, false);
      }
      raw[at[0]] = nan;
      raw[at[1]] = inf;
      check_data(t, raw, "non-finite at " + std::to_string(at[0]) + " and " + std::to_string(at[1]));
    }
  }
}

}  // namespace zero_blocks_test
