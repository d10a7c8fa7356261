// nanscope — detail/hash_x86.hpp: AVX2 and AVX-512 versions of one block's exact hash sums (hash.hpp).
// Internal: include <nanscope/check.hpp> instead.
//
// Per lane, only additions: S += x and T += S after each vector, so that after q vectors T = sum_t x_t (q - t)
// (t = the vector's index). An element in vector t at slot j of V sits at position t*V + j, hence
// sum x (position + 1) = V (q S - T) + (j + 1) S, all exact in 64 bits. Same result as the scalar loop.
#ifndef NANSCOPE_DETAIL_HASH_X86_HPP
#define NANSCOPE_DETAIL_HASH_X86_HPP

#if !defined(NANSCOPE_CHECK_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/hash_x86.hpp is internal: include <nanscope/check.hpp> or <nanscope/nanscope.hpp>"
#endif

#include "../hash.hpp"
#include "kernel_x86.hpp"

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// Folds lane sums into a plane's block sums. `s`/`t` hold, for slot j (0..V-1), the lane's S and T over q
/// vectors whose first element sits at block position `base`.
inline void hash_fold_slots(const std::uint64_t* s, const std::uint64_t* t, std::size_t v, std::size_t q,
                            std::size_t base, std::uint64_t& a_out, std::uint64_t& s_out) {
  for (std::size_t j = 0; j < v; ++j) {
    a_out += v * (q * s[j] - t[j]) + (base + j + 1) * s[j];
    s_out += s[j];
  }
}

/// Splits 64-bit lane sums into per-slot arrays: even slots from the low halves, odd from the high halves.
inline void hash_interleave(const std::uint64_t* ve, const std::uint64_t* vo, const std::uint64_t* we,
                            const std::uint64_t* wo, int lanes, std::uint64_t* s, std::uint64_t* t) {
  for (int l = 0; l < lanes; ++l) {
    s[2 * l] = ve[l];
    t[2 * l] = we[l];
    s[2 * l + 1] = vo[l];
    t[2 * l + 1] = wo[l];
  }
}

// --- AVX-512 ------------------------------------------------------------------------------------------------

/// The hook the AVX-512 f32 and f64 kernels call with each full vector of their main loop (kernel_x86.hpp):
/// the raw bits are hashed while they are in registers, so the hash costs no extra read.
struct hash_lanes512 {
  static constexpr bool enabled = true;
  // Per 64-bit lane: sw = S of the whole lane word mod 2^64 and sh = S of its high halves (exact), tw / th their
  // T. The low halves' sums follow at the end: S_lo = sw - 2^32 sh (mod 2^64, exact since S_lo < 2^64), which
  // saves masking every vector.
  __m512i sw, sh, tw, th;
  NANSCOPE_IMPL_TARGET_AVX512 hash_lanes512() : sw(_mm512_setzero_si512()), sh(sw), tw(sw), th(sw) {}
  NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline void step_bits(__m512i x) {
    sw = _mm512_add_epi64(sw, x);
    sh = _mm512_add_epi64(sh, _mm512_srli_epi64(x, 32));
    tw = _mm512_add_epi64(tw, sw);
    th = _mm512_add_epi64(th, sh);
  }
  NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline void step(__m512 x) { step_bits(_mm512_castps_si512(x)); }
  NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline void step(__m512d x) { step_bits(_mm512_castpd_si512(x)); }
  /// Adds the sums of the first q vectors of a block (elements of `es` = 4 or 8 bytes) to `out`.
  NANSCOPE_IMPL_TARGET_AVX512 void finish(std::size_t es, std::size_t q, block_sums& out) const {
    alignas(64) std::uint64_t a0[8], a1[8], b0[8], b1[8];
    _mm512_store_si512(a0, sw);
    _mm512_store_si512(a1, sh);
    _mm512_store_si512(b0, tw);
    _mm512_store_si512(b1, th);
    for (int l = 0; l < 8; ++l) {
      a0[l] -= a1[l] << 32;
      b0[l] -= b1[l] << 32;
    }
    if (es == 8) {  // lane l holds element l: plane 0 = low halves, plane 1 = high halves
      hash_fold_slots(a0, b0, 8, q, 0, out.a[0], out.s[0]);
      hash_fold_slots(a1, b1, 8, q, 0, out.a[1], out.s[1]);
    } else {  // lane l holds elements 2l (low half) and 2l + 1 (high half)
      std::uint64_t s[16], t[16];
      hash_interleave(a0, a1, b0, b1, 8, s, t);
      hash_fold_slots(s, t, 16, q, 0, out.a[0], out.s[0]);
    }
  }
};

/// Sums over 16 zero-extended 32-bit limbs per vector; `load(i)` gives the limbs of elements [16 i, 16 i + 16).
struct hash_ld512_u32 {
  NANSCOPE_IMPL_TARGET_AVX512 static __m512i load(const unsigned char* p, std::size_t i) { return _mm512_loadu_si512(p + 64 * i); }
};
struct hash_ld512_u16 {
  NANSCOPE_IMPL_TARGET_AVX512 static __m512i load(const unsigned char* p, std::size_t i) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i)));
  }
};
struct hash_ld512_u8 {
  NANSCOPE_IMPL_TARGET_AVX512 static __m512i load(const unsigned char* p, std::size_t i) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)));
  }
};

template <class Load>
NANSCOPE_IMPL_TARGET_AVX512 inline void hash_u32x16_avx512(const unsigned char* p, std::size_t q, std::size_t base,
                                                           block_sums& out) {
  const __m512i lo32 = _mm512_set1_epi64(0xFFFFFFFFll);
  __m512i se = _mm512_setzero_si512(), so = se, te = se, to = se;
  for (std::size_t i = 0; i < q; ++i) {
    const __m512i x = Load::load(p, i);
    se = _mm512_add_epi64(se, _mm512_and_si512(x, lo32));
    so = _mm512_add_epi64(so, _mm512_srli_epi64(x, 32));
    te = _mm512_add_epi64(te, se);
    to = _mm512_add_epi64(to, so);
  }
  alignas(64) std::uint64_t ve[8], vo[8], we[8], wo[8];
  _mm512_store_si512(ve, se);
  _mm512_store_si512(vo, so);
  _mm512_store_si512(we, te);
  _mm512_store_si512(wo, to);
  std::uint64_t s[16], t[16];
  hash_interleave(ve, vo, we, wo, 8, s, t);
  hash_fold_slots(s, t, 16, q, base, out.a[0], out.s[0]);
}

NANSCOPE_IMPL_TARGET_AVX512 inline void hash_block_avx512(const void* data, std::size_t es, std::size_t from, std::size_t m,
                                                          block_sums& out) {
  const auto* p = static_cast<const unsigned char*>(data) + from * es;
  const std::size_t n = m - from;
  std::size_t done = from;
  if (es == 8) {
    const std::size_t q = n / 8;
    const __m512i lo32 = _mm512_set1_epi64(0xFFFFFFFFll);
    __m512i sl = _mm512_setzero_si512(), sh = sl, tl = sl, th = sl;
    for (std::size_t i = 0; i < q; ++i) {
      const __m512i x = _mm512_loadu_si512(p + 64 * i);
      sl = _mm512_add_epi64(sl, _mm512_and_si512(x, lo32));
      sh = _mm512_add_epi64(sh, _mm512_srli_epi64(x, 32));
      tl = _mm512_add_epi64(tl, sl);
      th = _mm512_add_epi64(th, sh);
    }
    alignas(64) std::uint64_t s0[8], s1[8], t0[8], t1[8];
    _mm512_store_si512(s0, sl);
    _mm512_store_si512(s1, sh);
    _mm512_store_si512(t0, tl);
    _mm512_store_si512(t1, th);
    hash_fold_slots(s0, t0, 8, q, from, out.a[0], out.s[0]);
    hash_fold_slots(s1, t1, 8, q, from, out.a[1], out.s[1]);
    done = from + q * 8;
  } else {
    const std::size_t q = n / 16;
    if (es == 4) hash_u32x16_avx512<hash_ld512_u32>(p, q, from, out);
    else if (es == 2) hash_u32x16_avx512<hash_ld512_u16>(p, q, from, out);
    else hash_u32x16_avx512<hash_ld512_u8>(p, q, from, out);
    done = from + q * 16;
  }
  hash_block_scalar(data, es, done, m, out);
}

// --- AVX2 ---------------------------------------------------------------------------------------------------

/// The hook of the AVX2 f32 kernel (see hash_lanes512).
struct hash_lanes256 {
  static constexpr bool enabled = true;
  __m256i sw, sh, tw, th;  // as in hash_lanes512
  NANSCOPE_IMPL_TARGET_AVX2 hash_lanes256() : sw(_mm256_setzero_si256()), sh(sw), tw(sw), th(sw) {}
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) inline void step(__m256 v) {
    const __m256i x = _mm256_castps_si256(v);
    sw = _mm256_add_epi64(sw, x);
    sh = _mm256_add_epi64(sh, _mm256_srli_epi64(x, 32));
    tw = _mm256_add_epi64(tw, sw);
    th = _mm256_add_epi64(th, sh);
  }
  /// Adds the sums of the first q vectors (8 elements of 4 bytes each) of a block to `out`.
  NANSCOPE_IMPL_TARGET_AVX2 void finish(std::size_t q, block_sums& out) const {
    alignas(32) std::uint64_t a0[4], a1[4], b0[4], b1[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(a0), sw);
    _mm256_store_si256(reinterpret_cast<__m256i*>(a1), sh);
    _mm256_store_si256(reinterpret_cast<__m256i*>(b0), tw);
    _mm256_store_si256(reinterpret_cast<__m256i*>(b1), th);
    for (int l = 0; l < 4; ++l) {
      a0[l] -= a1[l] << 32;
      b0[l] -= b1[l] << 32;
    }
    std::uint64_t s[8], t[8];
    hash_interleave(a0, a1, b0, b1, 4, s, t);
    hash_fold_slots(s, t, 8, q, 0, out.a[0], out.s[0]);
  }
};

struct hash_ld256_u32 {
  NANSCOPE_IMPL_TARGET_AVX2 static __m256i load(const unsigned char* p, std::size_t i) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i));
  }
};
struct hash_ld256_u16 {
  NANSCOPE_IMPL_TARGET_AVX2 static __m256i load(const unsigned char* p, std::size_t i) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)));
  }
};
struct hash_ld256_u8 {
  NANSCOPE_IMPL_TARGET_AVX2 static __m256i load(const unsigned char* p, std::size_t i) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8 * i)));
  }
};

template <class Load>
NANSCOPE_IMPL_TARGET_AVX2 inline void hash_u32x8_avx2(const unsigned char* p, std::size_t q, std::size_t base,
                                                      block_sums& out) {
  const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFFll);
  __m256i se = _mm256_setzero_si256(), so = se, te = se, to = se;
  for (std::size_t i = 0; i < q; ++i) {
    const __m256i x = Load::load(p, i);
    se = _mm256_add_epi64(se, _mm256_and_si256(x, lo32));
    so = _mm256_add_epi64(so, _mm256_srli_epi64(x, 32));
    te = _mm256_add_epi64(te, se);
    to = _mm256_add_epi64(to, so);
  }
  alignas(32) std::uint64_t ve[4], vo[4], we[4], wo[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(ve), se);
  _mm256_store_si256(reinterpret_cast<__m256i*>(vo), so);
  _mm256_store_si256(reinterpret_cast<__m256i*>(we), te);
  _mm256_store_si256(reinterpret_cast<__m256i*>(wo), to);
  std::uint64_t s[8], t[8];
  hash_interleave(ve, vo, we, wo, 4, s, t);
  hash_fold_slots(s, t, 8, q, base, out.a[0], out.s[0]);
}

NANSCOPE_IMPL_TARGET_AVX2 inline void hash_block_avx2(const void* data, std::size_t es, std::size_t from, std::size_t m,
                                                      block_sums& out) {
  const auto* p = static_cast<const unsigned char*>(data) + from * es;
  const std::size_t n = m - from;
  std::size_t done = from;
  if (es == 8) {
    const std::size_t q = n / 4;
    const __m256i lo32 = _mm256_set1_epi64x(0xFFFFFFFFll);
    __m256i sl = _mm256_setzero_si256(), sh = sl, tl = sl, th = sl;
    for (std::size_t i = 0; i < q; ++i) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i));
      sl = _mm256_add_epi64(sl, _mm256_and_si256(x, lo32));
      sh = _mm256_add_epi64(sh, _mm256_srli_epi64(x, 32));
      tl = _mm256_add_epi64(tl, sl);
      th = _mm256_add_epi64(th, sh);
    }
    alignas(32) std::uint64_t s0[4], s1[4], t0[4], t1[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(s0), sl);
    _mm256_store_si256(reinterpret_cast<__m256i*>(s1), sh);
    _mm256_store_si256(reinterpret_cast<__m256i*>(t0), tl);
    _mm256_store_si256(reinterpret_cast<__m256i*>(t1), th);
    hash_fold_slots(s0, t0, 4, q, from, out.a[0], out.s[0]);
    hash_fold_slots(s1, t1, 4, q, from, out.a[1], out.s[1]);
    done = from + q * 4;
  } else {
    const std::size_t q = n / 8;
    if (es == 4) hash_u32x8_avx2<hash_ld256_u32>(p, q, from, out);
    else if (es == 2) hash_u32x8_avx2<hash_ld256_u16>(p, q, from, out);
    else hash_u32x8_avx2<hash_ld256_u8>(p, q, from, out);
    done = from + q * 8;
  }
  hash_block_scalar(data, es, done, m, out);
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // NANSCOPE_HAS_X86_SIMD()

#endif  // NANSCOPE_DETAIL_HASH_X86_HPP
