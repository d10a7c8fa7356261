// nanscope — detail/hist_fused_avx2.hpp: the exponent histogram fused into the AVX2 kernel's optimistic blocks
// (one-hot nibbles in 64-bit lanes, fed from the widened f32 vectors the kernel already holds). Internal:
// include <nanscope/histogram.hpp>.
#ifndef NANSCOPE_DETAIL_HIST_FUSED_AVX2_HPP
#define NANSCOPE_DETAIL_HIST_FUSED_AVX2_HPP

#if !defined(NANSCOPE_HISTOGRAM_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/hist_fused_avx2.hpp is internal: include <nanscope/histogram.hpp>"
#endif

#include "../config.hpp"
#include "../dtype.hpp"
#include "histogram_kernel.hpp"
#include "kernel_x86.hpp"

#include <cstdint>
#include <cstring>
#include <type_traits>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// How the bins ride in avx2_f32_kernel (its hook G). The kernel hands over every full vector as f32 bits:
// f32 as loaded, f16 and bf16 widened (exact, and monotone in |x|). A source field f is the widened field
// f + Off for the fields the window can hold (f16: Off = 112, normal f16 only; bf16 and f32: 0); the window is
// the 16 source fields [w0, w0 + 16). For a lane, t = 4 * (widened field - (w0 + Off)), as a 9-bit signed
// difference times 4, so a field below the window gives t >= 1024; 1 << t in the lane's 64-bit lane is a one in
// nibble t / 4 when the field is in the window and nothing otherwise (vpsllvq gives 0 for t >= 64). Even and
// odd f32 lanes of a 64-bit lane go to separate registers, and the kernel's two accumulator sets to separate
// pairs, so a nibble takes at most 8 ones in a 128-element block. At the block's end the nibbles are split
// into bytes (at most 32 a block, 7 blocks per flush) and every 7 blocks the bytes into 16-bit counters (at most
// 224 a flush, cleared at the chunk's end: a chunk of 8192 elements is 10 flushes, 2048 at most in a word; the
// static_assert in histogram.hpp keeps chunks below 292 flushes).
// A block whose min or max |x| lies outside the window (zeros, subnormals, inf, NaN, wide data) is scanned
// again from L1 and its elements outside the window counted one by one; the margins' dirty boundaries in the
// window are compared on every vector (the first two) or, any others, looked for in the blocks whose nibbles
// show an element in their field. So the counts are exactly the scalar loop's, for any data.
/// The hook's state touched once a block or less.
struct hist_cold256 {
  const hist_setup* s = nullptr;
  hist_local* h = nullptr;
  unsigned w0 = 1;
  std::uint32_t lazy_bits = 0;  // window bins (bit j: field w0 + j) holding a lazy dirty boundary
  int nd = 0;                   // direct boundaries: dk[0..nd)
  int dk[2] = {0, 0};
  unsigned blocks = 0;          // blocks in the byte counters since the last flush
  __m256i byt[2];               // bytes of even / odd nibbles: byte k of a 64-bit lane = slot 2k (+ 1)
  __m256i wrd[4];               // 16-bit counters: [2 * q + hb]: byte 2k + hb of byt[q] in word k of a 64-bit lane
};

/// Scans a block of 128 elements again from L1: counts its zeros in bulk, and one by one the elements
/// outside the window (all work) and those in a lazy boundary's field (their dirty boundaries only).
template <class U, unsigned Shift>
NANSCOPE_IMPL_TARGET_AVX2 inline void hist_scan256(hist_cold256& cs, const unsigned char* p) {
  constexpr std::size_t es = sizeof(U);
  const hist_setup& s = *cs.s;
  hist_local& h = *cs.h;
  const unsigned w0 = cs.w0;
  const __m256i absm = _mm256_set1_epi32(static_cast<int>(s.abs_mask));
  const __m256i wv = _mm256_set1_epi32(static_cast<int>(w0));
  const __m256i sixteen = _mm256_set1_epi32(16);
  const __m256i lazy = _mm256_set1_epi32(static_cast<int>(cs.lazy_bits));
  const __m256i one = _mm256_set1_epi32(1);
  for (std::size_t v = 0; v < 128; v += 8) {
    __m256i r;
    if constexpr (es == 4) r = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + v * es));
    else r = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + v * es)));
    const __m256i a = _mm256_and_si256(r, absm);
    const __m256i j = _mm256_sub_epi32(_mm256_srli_epi32(a, Shift), wv);  // below w0: wraps to a huge value
    const __m256i out = _mm256_cmpeq_epi32(_mm256_min_epu32(j, sixteen), sixteen);
    const __m256i zero = _mm256_cmpeq_epi32(a, _mm256_setzero_si256());
    const __m256i lz = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_sllv_epi32(one, j), lazy), _mm256_setzero_si256());
    const unsigned zm = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(zero)));
    h.c[0] += static_cast<std::uint32_t>(__builtin_popcount(zm));
    unsigned cand = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(out, lz)))) & ~zm;
    while (cand != 0) {
      const unsigned l = static_cast<unsigned>(__builtin_ctz(cand));
      cand &= cand - 1;
      U x;
      std::memcpy(&x, p + (v + l) * es, es);
      x = static_cast<U>(x & static_cast<U>(s.abs_mask));
      const unsigned f = static_cast<unsigned>(x >> Shift);
      if (f < w0 || f >= w0 + 16) ++h.c[f * hist_copies];
      hist_dirty(s, h, x, f);
    }
  }
}

/// avx2_f32_kernel's hook G: the per-vector registers (the kernel keeps a local copy, which never escapes).
/// U, Shift: the source's storage and mantissa bits; Off: widened field - source field (see above).
template <class U, unsigned Shift, unsigned Off>
struct hist_hook256 {
  static constexpr bool enabled = true;
  static constexpr int max_direct = 2;

  hist_cold256* cold = nullptr;
  bool any_lazy = false;
  __m256i wlo, whi;     // the window's lowest and highest widened |x| bits
  __m256i nib[4];       // [2 * set + odd lane]: nibble counters, one 64-bit lane per pair of f32 lanes
  __m256i lz;           // 0xF in the nibbles of lazy slots
  __m256i bm[max_direct], dv[max_direct];  // direct boundaries (widened |x| bits minus 1) and per-lane counts

  /// Widened |x| bits of source pattern b (exact: the kernel's own load of a one-element buffer).
  template <class Load>
  NANSCOPE_IMPL_TARGET_AVX2 static std::uint32_t widen(std::uint64_t b) {
    alignas(32) U buf[8] = {};
    buf[0] = static_cast<U>(b);
    alignas(32) std::uint32_t w[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(w), _mm256_castps_si256(Load::load(buf)));
    return w[0] & 0x7FFFFFFFu;
  }

  /// Picks the chunk's window (kept while five samples stay inside it) and sets the counters up.
  template <class Load>
  NANSCOPE_IMPL_TARGET_AVX2 void begin(hist_cold256& c, const hist_setup& s, hist_local& h, const unsigned char* p,
                                       std::size_t n) {
    cold = &c;
    c.s = &s;
    c.h = &h;
    // inf / NaN field outside the window (f16: [w0, w0 + 16) within the normal fields 1..30)
    // w >= 1 (hist_pick_window): field 0 (zeros; f16 subnormals, which widen below w0 + Off) is never in the
    // window, so zeros are counted only by the rescan's bulk count and subnormals only one by one
    const unsigned w = hist_pick_window<U, Shift>(s, h, p, n, s.nbins - 17, max_direct);
    h.set_window(s, w, max_direct);
    c.w0 = w;
    c.nd = 0;
    c.lazy_bits = 0;
    for (int k = s.first_bound; k < s.nbounds; ++k) {
      if (!s.dirty[k] || s.field[k] < w || s.field[k] >= w + 16) continue;
      if (h.direct[k]) c.dk[c.nd++] = k;
      else c.lazy_bits |= 1u << (s.field[k] - w);
    }
    any_lazy = c.lazy_bits != 0;
    std::uint64_t lzq = 0;
    for (unsigned j = 0; j < 16; ++j)
      if ((c.lazy_bits >> j & 1u) != 0) lzq |= std::uint64_t{0xF} << (4 * j);
    lz = _mm256_set1_epi64x(static_cast<long long>(lzq));
    for (auto& x : nib) x = _mm256_setzero_si256();
    for (auto& x : c.byt) x = _mm256_setzero_si256();
    for (auto& x : c.wrd) x = _mm256_setzero_si256();
    c.blocks = 0;
    for (int j = 0; j < max_direct; ++j) {
      // an unused one compares against 0x7FFFFFFF, which no |x| bits exceed
      const std::uint32_t b = j < c.nd ? widen<Load>(s.b[c.dk[j]]) - 1u : 0x7FFFFFFFu;
      bm[j] = _mm256_set1_epi32(static_cast<int>(b));
      dv[j] = _mm256_setzero_si256();
    }
    wlo = _mm256_set1_epi32(static_cast<int>((w + Off) << 23));
    whi = _mm256_set1_epi32(static_cast<int>(((w + Off + 16) << 23) - 1));
  }

  /// One full vector of widened f32 bits; A: the kernel's accumulator set.
  template <int A>
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void step(__m256i r) {
    const __m256i a = _mm256_and_si256(r, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i d = _mm256_sub_epi32(a, wlo);
    const __m256i tm = _mm256_set1_epi64x(0x7FC);
    const __m256i te = _mm256_and_si256(_mm256_srli_epi32(d, 21), tm);  // even lane: low half of the 64-bit lane
    const __m256i to = _mm256_and_si256(_mm256_srli_epi64(d, 53), tm);  // odd lane: the high half's bits 21..31
    const __m256i one = _mm256_set1_epi64x(1);
    nib[2 * A] = _mm256_add_epi64(nib[2 * A], _mm256_sllv_epi64(one, te));
    nib[2 * A + 1] = _mm256_add_epi64(nib[2 * A + 1], _mm256_sllv_epi64(one, to));
    // direct boundaries (|x| >= b <=> |x| > b - 1; |x| bits are below 2^31, so a signed compare orders them)
    dv[0] = _mm256_sub_epi32(dv[0], _mm256_cmpgt_epi32(a, bm[0]));
    dv[1] = _mm256_sub_epi32(dv[1], _mm256_cmpgt_epi32(a, bm[1]));
  }

  /// After the 128 elements at p went through step(): nibbles to bytes; the block is scanned again when
  /// some element lay outside the window or in a lazy bin. bmin, bmax: the kernel's (signed) min and max
  /// of the block's widened |x| bits.
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void end_block(const unsigned char* p, __m256i bmin,
                                                                           __m256i bmax) {
    const __m256i outv = _mm256_or_si256(_mm256_cmpgt_epi32(wlo, bmin), _mm256_cmpgt_epi32(bmax, whi));
    close_block(p, _mm256_testz_si256(outv, outv) == 0);
  }

  /// end_block for the 16-bit sources' raw path: bmin, bmax are the block's min and max of the raw |x|
  /// patterns, 16-bit lanes (at most 0x7FFF: signed compares order them).
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void end_block16(const unsigned char* p, __m256i bmin,
                                                                             __m256i bmax) {
    const unsigned w0 = cold->w0;
    const __m256i lo = _mm256_set1_epi16(static_cast<short>(w0 << Shift));
    const __m256i hi = _mm256_set1_epi16(static_cast<short>(((w0 + 16) << Shift) - 1));
    const __m256i outv = _mm256_or_si256(_mm256_cmpgt_epi16(lo, bmin), _mm256_cmpgt_epi16(bmax, hi));
    close_block(p, _mm256_testz_si256(outv, outv) == 0);
  }

  /// The block's nibbles to bytes, and its rescan when `outside` or a lazy slot saw an element.
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void close_block(const unsigned char* p, bool outside) {
    hist_cold256& c = *cold;
    const __m256i any = _mm256_or_si256(_mm256_or_si256(nib[0], nib[1]), _mm256_or_si256(nib[2], nib[3]));
    const bool lazy = any_lazy && _mm256_testz_si256(any, lz) == 0;
    const __m256i m = _mm256_set1_epi8(0x0F);
    const __m256i e = _mm256_add_epi8(_mm256_add_epi8(_mm256_and_si256(nib[0], m), _mm256_and_si256(nib[1], m)),
                                      _mm256_add_epi8(_mm256_and_si256(nib[2], m), _mm256_and_si256(nib[3], m)));
    const __m256i o = _mm256_add_epi8(
        _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi64(nib[0], 4), m), _mm256_and_si256(_mm256_srli_epi64(nib[1], 4), m)),
        _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi64(nib[2], 4), m), _mm256_and_si256(_mm256_srli_epi64(nib[3], 4), m)));
    c.byt[0] = _mm256_add_epi8(c.byt[0], e);
    c.byt[1] = _mm256_add_epi8(c.byt[1], o);
    for (auto& x : nib) x = _mm256_setzero_si256();
    if (__builtin_expect(outside || lazy, 0)) hist_scan256<U, Shift>(c, p);
    if (++c.blocks == 7) flush_bytes(c);
  }

  /// Byte counters to the 16-bit counters.
  NANSCOPE_IMPL_TARGET_AVX2 static void flush_bytes(hist_cold256& c) {
    const __m256i lo = _mm256_set1_epi16(0x00FF);
    for (int q = 0; q < 2; ++q) {
      c.wrd[2 * q] = _mm256_add_epi16(c.wrd[2 * q], _mm256_and_si256(c.byt[q], lo));
      c.wrd[2 * q + 1] = _mm256_add_epi16(c.wrd[2 * q + 1], _mm256_srli_epi16(c.byt[q], 8));
      c.byt[q] = _mm256_setzero_si256();
    }
    c.blocks = 0;
  }

  /// End of the chunk's main loop: everything to the segment's counters.
  NANSCOPE_IMPL_TARGET_AVX2 void finish() {
    hist_cold256& c = *cold;
    if (c.blocks != 0) flush_bytes(c);
    // wrd[2 * q + hb], word k of a 64-bit lane: byte 2k + hb of byt[q], i.e. slot 2 * (2k + hb) + q
    std::uint64_t slot[16] = {};
    for (int q = 0; q < 2; ++q)
      for (int hb = 0; hb < 2; ++hb) {
        alignas(32) std::uint16_t w[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(w), c.wrd[2 * q + hb]);
        for (int l = 0; l < 16; ++l) slot[2 * (2 * (l % 4) + hb) + q] += w[l];
      }
    for (unsigned j = 0; j < 16; ++j) c.h->c[(c.w0 + j) * hist_copies] += static_cast<std::uint32_t>(slot[j]);
    for (int j = 0; j < c.nd; ++j) {
      alignas(32) std::uint32_t w[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(w), dv[j]);
      std::uint64_t t = 0;
      for (const std::uint32_t x : w) t += x;
      c.h->d[c.dk[j]] += t;
    }
  }
};

/// The AVX2 kernel and the histogram in one pass over a chunk of n contiguous raw f32 / f16 / bf16 elements
/// at level L; the elements past the last full block are binned by the scalar loop.
template <level L, class Load, class U, unsigned Shift, unsigned Off>
NANSCOPE_IMPL_TARGET_AVX2 inline void hist_fused_run256(const void* p, std::size_t n, const kernel_params& kp, chunk_out& o,
                                                        const hist_setup& s, hist_local& h) {
  hist_cold256 cold;
  hist_hook256<U, Shift, Off> g;
  const auto* b = static_cast<const unsigned char*>(p);
  g.template begin<Load>(cold, s, h, b, n);
  avx2_f32_kernel<L, Load, kernel_no_hash, hist_hook256<U, Shift, Off>>(p, n, kp, o, nullptr, &g);
  g.finish();
  const std::size_t done = n / 128 * 128;
  hist_scalar(b + done * sizeof(U), n - done, s, h, true);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // NANSCOPE_HAS_X86_SIMD()

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_HIST_FUSED_AVX2_HPP
