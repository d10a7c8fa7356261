// nanscope — detail/packed_avx512.hpp: the AVX-512 kernel of check_packed()'s E2M1 pass for blocks of 32 elements (16
// bytes, OCP MXFP4): the code counts of 16 blocks at a time from bit planes, one popcount per (block, code).
// Internal: include <nanscope/packed.hpp>.
#ifndef NANSCOPE_DETAIL_PACKED_AVX512_HPP
#define NANSCOPE_DETAIL_PACKED_AVX512_HPP

#if !defined(NANSCOPE_PACKED_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/packed_avx512.hpp is internal: include <nanscope/packed.hpp>"
#endif

#include "kernel_x86.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// AVX-512 with VBMI (vpermb / vpermt2b), VPOPCNTDQ (vpopcntd) and GFNI (vgf2p8affineqb: the 8 x 8 bit transposes); a
// superset of NANSCOPE_IMPL_TARGET_AVX512, so that mask_bits() inlines
#define NANSCOPE_IMPL_TARGET_AVX512_PK                                                                           \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi,avx512vpopcntdq,gfni,avx2,fma,f16c,popcnt," \
                        "bmi,bmi2")))

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// cpu_has_avx512() and VBMI, VPOPCNTDQ and GFNI (CPUID leaf 7, sub-leaf 0, ECX bits 1, 14 and 8).
inline bool cpu_has_avx512_pk() {
  static const bool ok = [] {
    if (!cpu_has_avx512()) return false;
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return false;
    __cpuid_count(7, 0, a, b, c, d);
    return ((c >> 1) & 1u) != 0 && ((c >> 14) & 1u) != 0 && ((c >> 8) & 1u) != 0;
  }();
  return ok;
}

/// The index vectors of the kernel's two byte transposes (see pk5_e2m1_b32).
struct pk5_tables {
  alignas(64) unsigned char gather[64];   // bit planes of 4 blocks -> [plane k][block][lo, lo, hi, hi]
  alignas(64) unsigned char t1[2][64];    // [codes 0..7 | 8..15 of blocks 8h..8h+7]: [block][code % 8]
  alignas(64) unsigned char t2[4][64];    // 16-bit rows of blocks 2i, 2i + 1 (i % 4): [block][code][low byte]
  alignas(64) unsigned char planes[64];   // vgf2p8affineqb's x: byte m of each qword = 1 << m
  pk5_tables() : gather(), t1(), t2(), planes() {
    for (int k = 0; k < 4; ++k)
      for (int b = 0; b < 4; ++b) {
        // after the transpose, byte m of qword q is bit m of the qword's 8 bytes (byte 7 - j in bit j)
        gather[16 * k + 4 * b + 0] = static_cast<unsigned char>(8 * (2 * b) + k);
        gather[16 * k + 4 * b + 1] = static_cast<unsigned char>(8 * (2 * b + 1) + k);
        gather[16 * k + 4 * b + 2] = static_cast<unsigned char>(8 * (2 * b) + k + 4);
        gather[16 * k + 4 * b + 3] = static_cast<unsigned char>(8 * (2 * b + 1) + k + 4);
      }
    for (int h = 0; h < 2; ++h)
      for (int u = 0; u < 8; ++u)
        for (int c = 0; c < 8; ++c) {  // w[j] byte 16 * (b / 4) + 4 * (code % 4) + b % 4 holds codes 4j..4j+3
          const int b = 8 * h + u;
          t1[h][8 * u + c] = static_cast<unsigned char>((c >= 4 ? 64 : 0) + 16 * (b / 4) + 4 * (c % 4) + b % 4);
        }
    for (int i = 0; i < 4; ++i)
      for (int u = 0; u < 2; ++u)
        for (int c = 0; c < 16; ++c) {  // the high bytes (odd) are zeroed by the mask of vpermt2b
          t2[i][32 * u + 2 * c] = static_cast<unsigned char>((c >= 8 ? 64 : 0) + 8 * (2 * i + u) + c % 8);
          t2[i][32 * u + 2 * c + 1] = 0;
        }
    for (int q = 0; q < 8; ++q)
      for (int m = 0; m < 8; ++m) planes[8 * q + m] = static_cast<unsigned char>(1u << m);
  }
};

inline const pk5_tables& pk5_tab() {
  static const pk5_tables t;
  return t;
}

/// Blocks the AVX-512 E2M1 kernel has counted since the program started (tests: check_packed really takes it).
inline std::atomic<std::uint64_t>& pk5_blocks_counted() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}

/// E2M1 blocks [b0, b1) of 16 bytes each (scales sc, or 127 for all when sc is null): adds each block's 16 code counts
/// to codes[scale * 16 + code] and counts it in blocks[scale][0] (all 32 magnitudes zero) or [1]. Exactly what
/// pk_e2m1_blocks<16> computes. Groups of 16 blocks:
///   1. vgf2p8affineqb with the data as the matrix transposes each qword's 8 x 8 bits: byte m = bit m of its 8 bytes
///      (a bit plane); vpermb and a 4 x 4 shuffle of 128-bit lanes make R[k], dword b = block b's 32 bits of bit k of
///      its nibbles (16 low nibbles, 16 high ones; their order is the same in every plane);
///   2. code c's matches in block b = the AND over k of R[k] or ~R[k] (vpternlogd), counted by vpopcntd: dword b of
///      C[c] = block b's count of code c (at most 32);
///   3. vpackusdw / vpackuswb and two rounds of vpermt2b turn the 16 x 16 counts into a row of 16 x 16 bits per block
///      (the second round's mask zeroes the high bytes);
///   4. each row is added to its scale's row of 16-bit counters, emptied into the
///      64-bit counts every 2047 blocks at the latest, before a lane could wrap; zero blocks (codes 0 and 8 fill them)
///      are counted per scale, and a scale's other blocks at each emptying (its counts' sum / 32, less its zeros).
NANSCOPE_IMPL_TARGET_AVX512_PK inline void pk5_e2m1_b32(const unsigned char* d, const unsigned char* sc, std::uint64_t b0,
                                                        std::uint64_t b1, std::uint64_t* codes,
                                                        std::uint64_t (*blocks)[3]) {
  pk5_blocks_counted().fetch_add(b1 > b0 ? b1 - b0 : 0, std::memory_order_relaxed);
  const pk5_tables& T = pk5_tab();
  std::vector<std::uint16_t> acc(256 * 16, 0);
  std::vector<unsigned char> touched(256, 0);
  std::vector<std::uint32_t> zeros(256, 0);  // zero blocks per scale since the last flush
  alignas(64) std::uint16_t rows[16 * 16];
  const std::uint64_t flush_every = 65535 / 32;
  std::uint64_t since = 0;
  auto flush = [&]() {
    for (std::size_t s = 0; s < 256; ++s) {
      if (!touched[s]) continue;
      // every block holds 32 codes: the scale's blocks since the last flush are its counts' sum / 32
      std::uint64_t all = 0;
      for (std::size_t c = 0; c < 16; ++c) {
        codes[s * 16 + c] += acc[s * 16 + c];
        all += acc[s * 16 + c];
      }
      blocks[s][0] += zeros[s];
      blocks[s][1] += all / 32 - zeros[s];
      zeros[s] = 0;
      std::memset(acc.data() + s * 16, 0, 16 * sizeof(std::uint16_t));
      touched[s] = 0;
    }
    since = 0;
  };
  const __m512i xplanes = _mm512_load_si512(static_cast<const void*>(T.planes));
  const __m512i gather = _mm512_load_si512(static_cast<const void*>(T.gather));
  const __m512i t1a = _mm512_load_si512(static_cast<const void*>(T.t1[0]));
  const __m512i t1b = _mm512_load_si512(static_cast<const void*>(T.t1[1]));
  const __m512i t20 = _mm512_load_si512(static_cast<const void*>(T.t2[0]));
  const __m512i t21 = _mm512_load_si512(static_cast<const void*>(T.t2[1]));
  const __m512i t22 = _mm512_load_si512(static_cast<const void*>(T.t2[2]));
  const __m512i t23 = _mm512_load_si512(static_cast<const void*>(T.t2[3]));
  const __mmask64 even = 0x5555555555555555ull;
  const __m512i all32 = _mm512_set1_epi32(32);
  std::uint64_t k = b0;
  for (; k + 16 <= b1; k += 16) {
    const unsigned char* p = d + k * 16;
#if NANSCOPE_IMPL_PREFETCH_BYTES > 0
    // the groups ahead (kernel_x86.hpp's distance; the hardware prefetcher stops at each 4 KiB page): 0.30 -> 0.21 ns
    // a byte on 128 MiB out of cache. Only inside the range, so that no address past the data is touched even so
    if (k + 16 + NANSCOPE_IMPL_PREFETCH_BYTES / 16 <= b1)
      for (int i = 0; i < 256; i += 64)
        _mm_prefetch(reinterpret_cast<const char*>(p + NANSCOPE_IMPL_PREFETCH_BYTES + i), _MM_HINT_T0);
#endif
    // (named vectors, no arrays: GCC keeps arrays of vectors on the stack)
#define NANSCOPE_IMPL_PK5_PLANES(i)                                                                                  \
  _mm512_permutexvar_epi8(gather, _mm512_gf2p8affine_epi64_epi8(                                                    \
                                      xplanes, _mm512_loadu_si512(static_cast<const void*>(p + 64 * (i))), 0))
    const __m512i z0 = NANSCOPE_IMPL_PK5_PLANES(0), z1 = NANSCOPE_IMPL_PK5_PLANES(1);
    const __m512i z2 = NANSCOPE_IMPL_PK5_PLANES(2), z3 = NANSCOPE_IMPL_PK5_PLANES(3);
#undef NANSCOPE_IMPL_PK5_PLANES
    // R[k]: 128-bit lane i of R[k] = lane k of z[i] (blocks 4i..4i+3)
    const __m512i u0 = _mm512_shuffle_i32x4(z0, z1, 0x44), u1 = _mm512_shuffle_i32x4(z0, z1, 0xEE);
    const __m512i u2 = _mm512_shuffle_i32x4(z2, z3, 0x44), u3 = _mm512_shuffle_i32x4(z2, z3, 0xEE);
    const __m512i r0 = _mm512_shuffle_i32x4(u0, u2, 0x88), r1 = _mm512_shuffle_i32x4(u0, u2, 0xDD);
    const __m512i r2 = _mm512_shuffle_i32x4(u1, u3, 0x88), r3 = _mm512_shuffle_i32x4(u1, u3, 0xDD);
    // bits 3 and 2 of the code: A = r3, B = r2 (0xF0 / 0xCC); then with bits 1 and 0: B = r1, C = r0
    const __m512i h0 = _mm512_ternarylogic_epi32(r3, r2, r2, 0x03), h1 = _mm512_ternarylogic_epi32(r3, r2, r2, 0x0C);
    const __m512i h2 = _mm512_ternarylogic_epi32(r3, r2, r2, 0x30), h3 = _mm512_ternarylogic_epi32(r3, r2, r2, 0xC0);
#define NANSCOPE_IMPL_PK5_CODE(c, h)                                                  \
  const __m512i cnt##c = _mm512_popcnt_epi32(_mm512_ternarylogic_epi32(            \
      h, r1, r0, static_cast<int>(0xF0u & (((c) & 2) ? 0xCCu : 0x33u) & (((c) & 1) ? 0xAAu : 0x55u))));
    NANSCOPE_IMPL_PK5_CODE(0, h0)
    NANSCOPE_IMPL_PK5_CODE(1, h0)
    NANSCOPE_IMPL_PK5_CODE(2, h0)
    NANSCOPE_IMPL_PK5_CODE(3, h0)
    NANSCOPE_IMPL_PK5_CODE(4, h1)
    NANSCOPE_IMPL_PK5_CODE(5, h1)
    NANSCOPE_IMPL_PK5_CODE(6, h1)
    NANSCOPE_IMPL_PK5_CODE(7, h1)
    NANSCOPE_IMPL_PK5_CODE(8, h2)
    NANSCOPE_IMPL_PK5_CODE(9, h2)
    NANSCOPE_IMPL_PK5_CODE(10, h2)
    NANSCOPE_IMPL_PK5_CODE(11, h2)
    NANSCOPE_IMPL_PK5_CODE(12, h3)
    NANSCOPE_IMPL_PK5_CODE(13, h3)
    NANSCOPE_IMPL_PK5_CODE(14, h3)
    NANSCOPE_IMPL_PK5_CODE(15, h3)
#undef NANSCOPE_IMPL_PK5_CODE
    // zero blocks: codes 0 and 8 (+-0) fill the block
    std::uint32_t zero = mask_bits(_mm512_cmpeq_epi32_mask(_mm512_add_epi32(cnt0, cnt8), all32));
    // counts to bytes (at most 32: the saturating packs keep them): w[j] byte 16 * (b / 4) + 4 * t + b % 4 = the
    // count of code 4j + t in block b
#define NANSCOPE_IMPL_PK5_BYTES(a, b, c, d) \
  _mm512_packus_epi16(_mm512_packus_epi32(a, b), _mm512_packus_epi32(c, d))
    const __m512i w0 = NANSCOPE_IMPL_PK5_BYTES(cnt0, cnt1, cnt2, cnt3), w1 = NANSCOPE_IMPL_PK5_BYTES(cnt4, cnt5, cnt6, cnt7);
    const __m512i w2 = NANSCOPE_IMPL_PK5_BYTES(cnt8, cnt9, cnt10, cnt11), w3 = NANSCOPE_IMPL_PK5_BYTES(cnt12, cnt13, cnt14, cnt15);
#undef NANSCOPE_IMPL_PK5_BYTES
    // [block][code % 8] for codes 0..7 (from w0, w1) and 8..15 (w2, w3), blocks 0..7 and 8..15
    const __m512i lo0 = _mm512_permutex2var_epi8(w0, t1a, w1), lo1 = _mm512_permutex2var_epi8(w0, t1b, w1);
    const __m512i hi0 = _mm512_permutex2var_epi8(w2, t1a, w3), hi1 = _mm512_permutex2var_epi8(w2, t1b, w3);
    // 16-bit rows (the odd bytes zeroed): blocks 2i, 2i + 1 in each vector
#define NANSCOPE_IMPL_PK5_ROWS(i, t, lo, hi) \
  _mm512_store_si512(static_cast<void*>(rows + 32 * (i)), _mm512_maskz_permutex2var_epi8(even, lo, t, hi))
    NANSCOPE_IMPL_PK5_ROWS(0, t20, lo0, hi0);
    NANSCOPE_IMPL_PK5_ROWS(1, t21, lo0, hi0);
    NANSCOPE_IMPL_PK5_ROWS(2, t22, lo0, hi0);
    NANSCOPE_IMPL_PK5_ROWS(3, t23, lo0, hi0);
    NANSCOPE_IMPL_PK5_ROWS(4, t20, lo1, hi1);
    NANSCOPE_IMPL_PK5_ROWS(5, t21, lo1, hi1);
    NANSCOPE_IMPL_PK5_ROWS(6, t22, lo1, hi1);
    NANSCOPE_IMPL_PK5_ROWS(7, t23, lo1, hi1);
#undef NANSCOPE_IMPL_PK5_ROWS
    for (unsigned b = 0; b < 16; ++b) {
      const std::uint8_t s = sc != nullptr ? sc[k + b] : 127;
      std::uint16_t* a = acc.data() + static_cast<std::size_t>(s) * 16;
      const __m256i row = _mm256_load_si256(reinterpret_cast<const __m256i*>(rows + 16 * b));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(a), _mm256_add_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)), row));
      touched[s] = 1;
    }
    for (; zero != 0; zero &= zero - 1)  // rare: counted per scale, the other blocks at the flush
      ++zeros[sc != nullptr ? sc[k + static_cast<unsigned>(__builtin_ctz(zero))] : 127];
    since += 16;
    if (since + 16 > flush_every) flush();
  }
  flush();
  // the last blocks (fewer than 16): one at a time, the same counts
  for (; k < b1; ++k) {
    const std::uint8_t s = sc != nullptr ? sc[k] : 127;
    const unsigned char* p = d + k * 16;
    unsigned nz = 0;
    for (int j = 0; j < 16; ++j) {
      ++codes[static_cast<std::size_t>(s) * 16 + (p[j] & 15u)];
      ++codes[static_cast<std::size_t>(s) * 16 + (p[j] >> 4)];
      nz |= p[j] & 0x77u;
    }
    ++blocks[s][nz != 0 ? 1 : 0];
  }
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // NANSCOPE_HAS_X86_SIMD()

#endif  // NANSCOPE_DETAIL_PACKED_AVX512_HPP
