// nanscope tests — kernel_block_test.cpp: the SIMD kernels run a block of 256 elements optimistically (every
// lane assumed ordinary, checked once at the block's end) and re-run a block that held anything else through
// the exact path (f64: blocks of 128). One special value at every kind of position among ordinary values (first and last lane of a
// vector, of a 256-element block, of the 8192-element chunk), for f64, f32, f16 and bf16, in every reading mode and
// ISA, must give exactly the independent reference's counts, extrema and first index.
#include "support/compare.hpp"
#include "support/reference.hpp"

#include <nanscope/check.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using nanscope::check_mode;
using nanscope::dtype;
using namespace nstest;

// Ordinary values of each dtype (normal, well inside the fast-path range), as raw bit patterns.
std::uint64_t ordinary_bits(dtype t, std::size_t i) {
  const float v = (i % 3 == 0 ? -1.0f : 1.0f) * (0.75f + 0.125f * static_cast<float>(i % 11));
  if (t == dtype::f64) {
    const double d = static_cast<double>(v);
    std::uint64_t b64;
    std::memcpy(&b64, &d, 8);
    return b64;
  }
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  if (t == dtype::f32) return b;
  if (t == dtype::bf16) return b >> 16;  // exact: at most 3 fraction bits
  // f16: same sign, exponent rebiased (values 0.75 .. 2, exact in f16)
  const std::uint32_t sign = (b >> 16) & 0x8000u;
  const std::uint32_t exp = ((b >> 23) & 0xFFu) - 127u + 15u;
  return sign | (exp << 10) | ((b >> 13) & 0x3FFu);
}

std::vector<std::uint64_t> specials(dtype t) {
  if (t == dtype::f64)
    return {0x0ull, 0x8000000000000000ull, 0x1ull, 0x800FFFFFFFFFFFFFull, 0x7FF0000000000000ull,
            0xFFF0000000000000ull, 0x7FF8000000000000ull, 0xFFF0000000000001ull, 0x7FEFFFFFFFFFFFFFull,
            0x5F40000000000000ull /* 2^501 */, 0x20A0000000000000ull /* 2^-501 */, 0x0010000000000000ull};
  if (t == dtype::f32)
    return {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0xFF800001u,
            0x7F7FFFFFu, 0x5F800001u /* > 2^64 */, 0x2A800000u /* 2^-42 */, 0x00800000u};
  if (t == dtype::f16)
    return {0x0000u, 0x8000u, 0x0001u, 0x83FFu, 0x7C00u, 0xFC00u, 0x7E00u, 0xFC01u, 0x7BFFu, 0xFBFFu, 0x0400u};
  return {0x0000u, 0x8000u, 0x0001u, 0x807Fu, 0x7F80u, 0xFF80u, 0x7FC0u, 0xFF81u, 0x7F7Fu, 0x5F80u, 0x2A80u, 0x0080u};
}

void store(dtype t, std::vector<unsigned char>& buf, std::size_t i, std::uint64_t bits) {
  const std::size_t es = nanscope::size_of(t);
  if (es == 8) {
    std::memcpy(buf.data() + i * 8, &bits, 8);
  } else if (es == 4) {
    const auto b = static_cast<std::uint32_t>(bits);
    std::memcpy(buf.data() + i * 4, &b, 4);
  } else {
    const auto b = static_cast<std::uint16_t>(bits);
    std::memcpy(buf.data() + i * 2, &b, 2);
  }
}

}  // namespace

TEST_CASE("kernel blocks: one special value at block, vector and chunk edges, every mode and ISA, exact") {
  const std::size_t n = 8192 + 600;  // a whole chunk, then a part chunk with full blocks and a tail
  const std::size_t positions[] = {0, 1, 15, 16, 31, 32, 255, 256, 257, 511, 4000, 8191, 8192, 8447, 8448, 8591};
  const check_mode modes[] = {check_mode::concise_health, check_mode::full_health, check_mode::stats};
  for (dtype t : {dtype::f64, dtype::f32, dtype::f16, dtype::bf16}) {
    for (std::uint64_t sp : specials(t)) {
      for (std::size_t pos : positions) {
        std::vector<unsigned char> buf(n * nanscope::size_of(t));
        std::vector<std::uint64_t> raw(n);
        for (std::size_t i = 0; i < n; ++i) {
          raw[i] = i == pos ? sp : ordinary_bits(t, i);
          store(t, buf, i, raw[i]);
        }
        const ref_health ref = reference(t, raw);
        const auto v = nanscope::tensor_view::flat(buf.data(), t, static_cast<std::int64_t>(n));
        for (nanscope::isa i : all_isas) {
          for (check_mode m : modes) {
            INFO("dtype=", nanscope::name(t), " special=", sp, " pos=", pos, " isa=", static_cast<int>(i));
            const auto r = nanscope::check(v, opts(m, i, 1));
            expect_health(r, ref, v, m, moment_tol(t, i));
          }
        }
      }
    }
  }
}
