// nanscope tests — check_exhaustive_test.cpp: tensors made of every bit pattern of f16, bf16, fp8 e4m3fn and
// fp8 e5m2 (in order, shuffled, tiled past a segment, and cut at many lengths and offsets so that SIMD tails,
// 16-lane groups, 256-element blocks, 8192-element chunks and 131072-element segments are all hit), checked in
// every mode and on every ISA against the independent reference of tests/support/reference.hpp.
// Counts, extrema and first_nonfinite must be exact; mean/std/m2 within the tolerances of compare.hpp.
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

const dtype small_types[] = {dtype::f16, dtype::bf16, dtype::f8_e4m3fn, dtype::f8_e5m2};
const check_mode reading_modes[] = {check_mode::curt_health, check_mode::concise_health, check_mode::full_health,
                                    check_mode::stats};

/// A pattern_buffer of raw elements of a 1- or 2-byte dtype.
struct pattern_buffer {
  dtype t;
  std::vector<std::uint16_t> h;  // 16-bit formats
  std::vector<std::uint8_t> b;   // 8-bit formats
  std::size_t size() const { return t == dtype::f16 || t == dtype::bf16 ? h.size() : b.size(); }
  const void* at(std::size_t i) const {
    return t == dtype::f16 || t == dtype::bf16 ? static_cast<const void*>(h.data() + i)
                                               : static_cast<const void*>(b.data() + i);
  }
  std::uint64_t raw(std::size_t i) const { return t == dtype::f16 || t == dtype::bf16 ? h[i] : b[i]; }
  void push(std::uint64_t p) {
    if (t == dtype::f16 || t == dtype::bf16)
      h.push_back(static_cast<std::uint16_t>(p));
    else
      b.push_back(static_cast<std::uint8_t>(p));
  }
};

std::uint64_t patterns(dtype t) { return t == dtype::f16 || t == dtype::bf16 ? 65536u : 256u; }

/// `copies` copies of every pattern; each copy shuffled with its own seed when `shuffled`.
pattern_buffer all_patterns(dtype t, int copies, bool shuffled, std::uint64_t seed) {
  pattern_buffer buf{t, {}, {}};
  rng g(seed);
  for (int c = 0; c < copies; ++c) {
    std::vector<std::uint64_t> ps(patterns(t));
    for (std::uint64_t p = 0; p < ps.size(); ++p) ps[p] = p;
    if (shuffled) shuffle(ps, g);
    for (std::uint64_t p : ps) buf.push(p);
  }
  return buf;
}

ref_health reference_of(const pattern_buffer& buf, std::size_t off, std::size_t len) {
  std::vector<std::uint64_t> raw(len);
  for (std::size_t i = 0; i < len; ++i) raw[i] = buf.raw(off + i);
  return reference(buf.t, raw);
}

/// Checks buf[off, off+len) in the given modes on every ISA with one thread.
void check_window(const pattern_buffer& buf, std::size_t off, std::size_t len, const check_mode* modes, std::size_t nmodes) {
  const ref_health ref = reference_of(buf, off, len);
  const nanscope::tensor_view v = nanscope::tensor_view::flat(buf.at(off), buf.t, static_cast<std::int64_t>(len));
  for (isa i : all_isas) {
    INFO("isa=", std::string(nanscope::name(i)), " offset=", off, " length=", len);
    for (std::size_t m = 0; m < nmodes; ++m) {
      const nanscope::health_result r = nanscope::check(v, opts(modes[m], i, 1));
      expect_health(r, ref, v, modes[m], moment_tol(buf.t, i));
    }
  }
}

}  // namespace

TEST_CASE("exhaustive: every bit pattern in order, every mode, every ISA") {
  for (dtype t : small_types) {
    INFO("dtype ", std::string(nanscope::name(t)));
    const pattern_buffer buf = all_patterns(t, 1, false, 0);
    check_window(buf, 0, buf.size(), all_modes, sizeof(all_modes) / sizeof(all_modes[0]));
  }
}

TEST_CASE("exhaustive: every bit pattern shuffled, every mode, every ISA") {
  for (dtype t : small_types) {
    INFO("dtype ", std::string(nanscope::name(t)));
    const int copies = t == dtype::f16 || t == dtype::bf16 ? 1 : 37;  // fp8: 9472 elements, past one chunk
    const pattern_buffer buf = all_patterns(t, copies, true, 0xE1 + static_cast<std::uint64_t>(t));
    check_window(buf, 0, buf.size(), all_modes, sizeof(all_modes) / sizeof(all_modes[0]));
  }
}

TEST_CASE("exhaustive: tiled past one segment, 1/2/4 threads agree with the reference and bit for bit") {
  for (dtype t : small_types) {
    INFO("dtype ", std::string(nanscope::name(t)));
    // > 131072 elements so that the work splits into segments; odd tail on purpose
    const int copies = t == dtype::f16 || t == dtype::bf16 ? 3 : 1031;
    pattern_buffer buf = all_patterns(t, copies, true, 0x7E57 + static_cast<std::uint64_t>(t));
    const std::size_t len = buf.size() - 13;
    const ref_health ref = reference_of(buf, 0, len);
    const nanscope::tensor_view v = nanscope::tensor_view::flat(buf.at(0), t, static_cast<std::int64_t>(len));
    for (isa i : all_isas) {
      for (check_mode m : reading_modes) {
        INFO("isa=", std::string(nanscope::name(i)), " mode=", std::string(nanscope::name(m)));
        const nanscope::health_result r1 = nanscope::check(v, opts(m, i, 1));
        expect_health(r1, ref, v, m, moment_tol(t, i));
        for (unsigned threads : {2u, 4u}) {
          CAPTURE(threads);
          const nanscope::health_result rn = nanscope::check(v, opts(m, i, threads));
          CHECK(first_difference(r1, rn) == "");
        }
      }
    }
  }
}

TEST_CASE("exhaustive: windows of many lengths and offsets (SIMD tails, groups, chunk boundaries)") {
  const std::size_t offsets[] = {0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 33};
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n <= 40; ++n) lengths.push_back(n);
  for (std::size_t n : {47u, 48u, 63u, 64u, 65u, 127u, 128u, 129u, 255u, 256u, 257u, 271u, 511u, 512u, 513u, 1000u,
                        4095u, 8191u, 8192u, 8193u, 16383u, 16400u})
    lengths.push_back(n);
  const check_mode modes[] = {check_mode::curt_health, check_mode::concise_health, check_mode::full_health,
                              check_mode::stats};
  for (dtype t : small_types) {
    INFO("dtype ", std::string(nanscope::name(t)));
    const int copies = t == dtype::f16 || t == dtype::bf16 ? 1 : 70;
    const pattern_buffer buf = all_patterns(t, copies, true, 0xABC + static_cast<std::uint64_t>(t));
    for (std::size_t off : offsets)
      for (std::size_t len : lengths) check_window(buf, off, len, modes, 4);
  }
}

TEST_CASE("exhaustive: the first non-finite value at every position near SIMD and chunk boundaries") {
  // In-order patterns: the positive finite values end right before +inf. A window that starts k elements
  // before the first non-finite pattern has its first NaN/Inf at index k.
  const check_mode modes[] = {check_mode::curt_health, check_mode::concise_health, check_mode::stats};
  std::vector<std::size_t> ks;
  for (std::size_t k = 0; k <= 40; ++k) ks.push_back(k);
  for (std::size_t k : {63u, 64u, 65u, 255u, 256u, 257u, 8191u, 8192u, 8193u, 20000u}) ks.push_back(k);
  for (dtype t : small_types) {
    INFO("dtype ", std::string(nanscope::name(t)));
    pattern_buffer buf = all_patterns(t, 1, false, 0);
    const std::uint64_t first_nonfinite_pattern = t == dtype::f16 ? 0x7C00 : t == dtype::bf16 ? 0x7F80 : t == dtype::f8_e4m3fn ? 0x7F : 0x7C;
    for (std::size_t k : ks) {
      if (k > first_nonfinite_pattern) continue;
      const std::size_t off = static_cast<std::size_t>(first_nonfinite_pattern) - k;
      const std::size_t len = k + 5;
      CAPTURE(k);
      REQUIRE(reference_of(buf, off, len).first_nonfinite == static_cast<std::int64_t>(k));
      check_window(buf, off, len, modes, 3);
    }
  }
}
