// nanscope — hash.hpp: an order-aware content hash of a tensor's bits, with change detection that is proven, not probable.
//
//   auto r = nanscope::check(t, nanscope::check_options{}.with_hash());   // r.hash, fused into the pass
//   std::string hex = nanscope::to_hex(r.hash);                           // 32 hex digits (64 for 8-byte dtypes)
//
// Definition (docs/tree.md, "Content hash", states it for other implementations). p = 2^61 - 1 (prime),
// B = 37 (a primitive root mod p). The tensor's elements are taken in logical row-major order, k = 0..n-1,
// whatever the strides; element k lies in block c = k / 8192 at position i = k % 8192. Each element's bit
// pattern is an unsigned integer; elements of 1, 2 or 4 bytes give one plane of 32-bit limbs x_k (the value
// zero-extended), 8-byte elements give two planes (the low 32 bits, then the high 32 bits). Per plane:
//   A = sum_k x_k * (i + 1) * B^c  mod p        S = sum_k x_k * B^c  mod p
// and the hash is, plane after plane, A then S, each as 16 lowercase hex digits.
//
// Guarantees (for fewer than p - 1 blocks, i.e. any tensor that fits in memory): changing any one element
// (a single-bit flip included) changes S, since x changes by a non-zero amount below p and B^c != 0; swapping
// two unequal elements in different blocks changes S by (a - b)(B^c1 - B^c2) != 0 (B has order p - 1), and in
// the same block changes A by (a - b)(i1 - i2) B^c != 0. Everything is exact integer arithmetic, so every
// ISA path and thread count gives the same bits; each block's contribution is absolute (weighted by its own
// B^c), so segments computed apart add up in any grouping.
#ifndef NANSCOPE_HASH_HPP
#define NANSCOPE_HASH_HPP

#include "config.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

NANSCOPE_NAMESPACE_BEGIN

/// The content hash of one tensor (see the definition above). `valid` is false when no hash was asked for.
struct content_hash {
  bool valid = false;
  std::uint8_t planes = 1;     ///< 1 for elements of 1, 2 or 4 bytes; 2 for 8-byte elements (low, high halves)
  std::uint64_t a[2] = {0, 0};  ///< per plane: the position-weighted sum A
  std::uint64_t s[2] = {0, 0};  ///< per plane: the block-weighted sum S
};

inline bool operator==(const content_hash& x, const content_hash& y) {
  if (x.valid != y.valid || x.planes != y.planes) return false;
  for (int q = 0; q < x.planes && q < 2; ++q)
    if (x.a[q] != y.a[q] || x.s[q] != y.s[q]) return false;
  return true;
}
inline bool operator!=(const content_hash& x, const content_hash& y) { return !(x == y); }

/// The hash as text: per plane A then S, 16 lowercase hex digits each; "" when not valid.
inline std::string to_hex(const content_hash& h) {
  if (!h.valid) return std::string();
  static const char digits[] = "0123456789abcdef";
  std::string out;
  for (int q = 0; q < h.planes && q < 2; ++q)
    for (std::uint64_t v : {h.a[q], h.s[q]})
      for (int sh = 60; sh >= 0; sh -= 4) out += digits[(v >> sh) & 0xF];
  return out;
}

namespace detail {

inline constexpr std::uint64_t hash_prime = (std::uint64_t{1} << 61) - 1;
inline constexpr std::uint64_t hash_base = 37;
inline constexpr std::size_t hash_block = std::size_t{1} << 13;  // equals check.hpp's chunk_elems

/// x mod p for any 64-bit x.
inline std::uint64_t mod61(std::uint64_t x) {
  x = (x & hash_prime) + (x >> 61);
  return x >= hash_prime ? x - hash_prime : x;
}
/// a * b mod p for a, b < p, in portable 64-bit arithmetic (2^64 = 8 mod p; 2^61 = 1 mod p).
inline std::uint64_t mulmod61(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t a0 = a & 0xFFFFFFFFu, a1 = a >> 32, b0 = b & 0xFFFFFFFFu, b1 = b >> 32;
  const std::uint64_t hi = (a1 * b1) << 3;                      // a1*b1 < 2^58: times 2^64 = 8
  const std::uint64_t mid = a1 * b0 + a0 * b1;                  // < 2^62: times 2^32
  const std::uint64_t midr = ((mid & ((std::uint64_t{1} << 29) - 1)) << 32) + (mid >> 29);
  const std::uint64_t lo = a0 * b0;                             // < 2^64
  const std::uint64_t lor = (lo & hash_prime) + (lo >> 61);     // < 2^61 + 8
  return mod61(mod61(hi + midr) + lor);
}
inline std::uint64_t addmod61(std::uint64_t a, std::uint64_t b) { return mod61(a + b); }
/// B^e mod p.
inline std::uint64_t hash_pow(std::uint64_t e) {
  std::uint64_t r = 1, b = hash_base;
  while (e != 0) {
    if (e & 1) r = mulmod61(r, b);
    b = mulmod61(b, b);
    e >>= 1;
  }
  return r;
}

/// Exact per-block sums of one plane: a = sum x * (i + 1), s = sum x (i from 0 within the block). With at
/// most 8192 limbs below 2^32, a < 2^58 and s < 2^45: no overflow.
struct block_sums {
  std::uint64_t a[2] = {0, 0};
  std::uint64_t s[2] = {0, 0};
};

/// Limb of element j (of `es` bytes) in plane q, read from the raw bytes.
inline std::uint32_t hash_limb(const unsigned char* p, std::size_t es, std::size_t j, int q) {
  switch (es) {
    case 1: return p[j];
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * j, 2);
      return v;
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, p + 4 * j, 4);
      return v;
    }
    default: {
      std::uint64_t v;
      std::memcpy(&v, p + 8 * j, 8);
      return static_cast<std::uint32_t>(q == 0 ? v : v >> 32);
    }
  }
}

/// Adds elements [from, m) of a block (positions from..m-1) to `out`, one at a time.
inline void hash_block_scalar(const void* data, std::size_t es, std::size_t from, std::size_t m, block_sums& out) {
  const auto* p = static_cast<const unsigned char*>(data);
  const int planes = es == 8 ? 2 : 1;
  for (int q = 0; q < planes; ++q) {
    std::uint64_t a = out.a[q], s = out.s[q];
    for (std::size_t j = from; j < m; ++j) {
      const std::uint64_t x = hash_limb(p, es, j, q);
      a += x * (j + 1);
      s += x;
    }
    out.a[q] = a;
    out.s[q] = s;
  }
}

/// Adds a block's exact sums, weighted by B^c (`weight`), to the hash.
inline void hash_add_block(content_hash& h, const block_sums& b, std::uint64_t weight) {
  for (int q = 0; q < h.planes; ++q) {
    h.a[q] = addmod61(h.a[q], mulmod61(mod61(b.a[q]), weight));
    h.s[q] = addmod61(h.s[q], mulmod61(mod61(b.s[q]), weight));
  }
}

/// Adds the hash of a disjoint set of blocks (a segment) to `h`.
inline void hash_merge(content_hash& h, const content_hash& part) {
  if (!part.valid) return;
  h.valid = true;
  h.planes = part.planes;
  for (int q = 0; q < part.planes && q < 2; ++q) {
    h.a[q] = addmod61(h.a[q], part.a[q]);
    h.s[q] = addmod61(h.s[q], part.s[q]);
  }
}

/// An empty, valid hash for elements of `es` bytes (the hash of zero elements).
inline content_hash hash_empty(std::size_t es) {
  content_hash h;
  h.valid = true;
  h.planes = es == 8 ? 2 : 1;
  return h;
}

}  // namespace detail

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_HASH_HPP
