// nanscope — detail/hist_fused_avx2.hpp: the exponent histogram in the AVX2 kernel's pass (the optimistic
// blocks read again from L1, 1 KiB at a time; one-hot crumbs in 32-bit lanes, 16-bit sources unwidened). Internal:
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

#if defined(__GNUC__)
// v is in a vector register here: the compiler cannot move arithmetic across this point
#define NANSCOPE_IMPL_OPAQUE_YMM(v) __asm__("" : "+x"(v))
#else
#define NANSCOPE_IMPL_OPAQUE_YMM(v) (void)(v)
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// How the bins ride in avx2_f32_kernel (its hook G). At each 128-element block's end the hook queues the block
// (it is in L1: the kernel has just read it), and for every 1 KiB of blocks an out-of-line function reads their
// raw patterns again, so neither the kernel's accumulators nor the hook's spill (AVX2 has 16 vector registers;
// together they needed about 26, and the spilled accumulators' store-to-load chains cost more than the whole
// STATS loop; inlined, the counting loop also changed how GCC allocated the kernel's own registers). For a 32-bit
// lane holding source pattern x (f32: one element; f16 / bf16: the even or the odd element of the lane),
// t = 2 * (field(x) mod 16) comes from one shift and one mask (the mask also drops the sign): the window's 16
// source fields [w0, w0 + 16) have 16 different residues, so slot s = field mod 16 needs no subtraction. Slot s
// is the crumb (2-bit counter) at bits 2s, 2s + 1 of a 32-bit lane: 1 << t (vpsllvd). A field outside the window
// also lands in the slot of its residue; such an element makes its block's min or max |x| leave the window, and
// the block's rescan (below) counts it in its own bin and takes it out of that slot again (corr). A block's even
// and odd vectors (f32) or even and odd elements (16-bit) are two streams of 8 one-hot vectors; each stream sums
// them in crumbs 3, 3 and 2 at a time (a crumb holds 3) and after each group moves the even slots' crumbs to the
// nibbles of e and the odd slots' to those of o (one mask, one shift, one mask), so a nibble takes at most 8 a
// block. At the block's end the nibbles are split into bytes (at most 16 a block, 15 blocks per flush) and every
// 15 blocks the bytes into 16-bit counters (at most 240 a flush, cleared at the chunk's end: a chunk of 8192
// elements is 5 flushes, 1024 at most in a word; the static_assert in histogram.hpp keeps chunks at 273 flushes
// or fewer). Per 8 lanes that is 3 instructions a one-hot vector, plus 5/8 of an add and 15/8 for the moves to
// nibbles (the 16 slots as nibbles of two registers, with the window subtracted, took 8).
// A block whose min or max |x| lies outside the window (zeros, subnormals, inf, NaN, wide data) is scanned
// again from L1 and its elements outside the window counted one by one (after the kernel's zero block, whose
// zeros are counted apart, only a non-zero element outside the window makes it so: end_block_zero); the margins' dirty boundaries in the
// window are compared on every element (the first two: direct) or, any others, looked for in the blocks whose
// nibbles show an element in their field (lazy). So the counts are exactly the scalar loop's, for any data.
/// The hook's state touched once a block or less.
struct hist_cold256 {
  const hist_setup* s = nullptr;
  hist_local* h = nullptr;
  unsigned w0 = 1;
  std::uint32_t lazy_bits = 0;  // window bins (bit j: field w0 + j) holding a lazy dirty boundary
  int corr[16] = {};            // slot s: minus the elements outside the window the crumbs put in it
  int nd = 0;                   // direct boundaries: dk[0..nd)
  int dk[2] = {0, 0};
  unsigned blocks = 0;          // blocks in the byte counters since the last flush
  static constexpr unsigned max_queue = 4;  // 1 KiB of 16-bit blocks (f32: 2)
  const unsigned char* queued[max_queue] = {};  // blocks read by the kernel, not counted yet (still in L1)
  unsigned nq = 0;
  unsigned outside = 0;  // bit k: queued[k] has an element outside the window
  unsigned zeros_in = 0;  // bit k: queued[k]'s zeros are counted already (end_block_zero)
  __m256i byt[4];               // bytes: [q]: q 0 / 1 the low / high nibbles of e's bytes, 2 / 3 those of o
  __m256i wrd[8];               // 16-bit counters: [2 * q + hb]: word k of a 32-bit lane is byte 2k + hb of byt[q]
};

/// Scans a block of 128 elements again from L1: counts its zeros in bulk (unless zeros_in: counted already),
/// and one by one the elements outside the window (all work) and those in a lazy boundary's field (their dirty
/// boundaries only).
template <class U, unsigned Shift>
NANSCOPE_IMPL_TARGET_AVX2 inline void hist_scan256(hist_cold256& cs, const unsigned char* p, bool zeros_in) {
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
    if (!zeros_in) {
      h.c[0] += static_cast<std::uint32_t>(__builtin_popcount(zm));
      cs.corr[0] -= __builtin_popcount(zm);  // field 0 went to slot 0
    }
    unsigned cand = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_or_si256(out, lz)))) & ~zm;
    while (cand != 0) {
      const unsigned l = static_cast<unsigned>(__builtin_ctz(cand));
      cand &= cand - 1;
      U x;
      std::memcpy(&x, p + (v + l) * es, es);
      x = static_cast<U>(x & static_cast<U>(s.abs_mask));
      const unsigned f = static_cast<unsigned>(x >> Shift);
      if (f < w0 || f >= w0 + 16) {
        ++h.c[f * hist_copies];
        --cs.corr[f & 15];  // the crumbs put it in slot f mod 16
      }
      hist_dirty(s, h, x, f);
    }
  }
}

/// avx2_f32_kernel's hook G. U, Shift: the source's storage and mantissa bits.
template <class U, unsigned Shift>
struct hist_hook256 {
  static constexpr bool enabled = true;
  static constexpr int max_direct = 2;
  static constexpr std::size_t es = sizeof(U);
  static_assert(es == 4 || es == 2, "f32, or a 16-bit source");
  // blocks counted together: 1 KiB. Longer runs left DRAM idle while they were counted (the kernel's prefetch
  // runs 2 KiB ahead): with 4 KiB (8 f32 blocks) f32 health_hist / health fell from ~0.79 to ~0.72 on Zen 3
  static constexpr unsigned queue_len = 1024 / (128 * es);
  static_assert(queue_len <= hist_cold256::max_queue, "the queue holds the blocks");

  hist_cold256* cold = nullptr;
  bool any_lazy = false;
  __m256i lze, lzo;  // 0xF in nibble k where slot 2k (lze) or slot 2k + 1 (lzo) is lazy
  __m256i dv[max_direct];  // direct boundaries' per-lane counts (f32: 32-bit lanes; 16-bit sources: 16-bit lanes)
  std::uint32_t bm[max_direct] = {0, 0};  // direct boundaries as |x| patterns minus 1

  /// Picks the chunk's window (kept while five samples stay inside it) and sets the counters up.
  NANSCOPE_IMPL_TARGET_AVX2 void begin(hist_cold256& c, const hist_setup& s, hist_local& h, const unsigned char* p,
                                       std::size_t n) {
    cold = &c;
    c.s = &s;
    c.h = &h;
    // inf / NaN field outside the window (f16: [w0, w0 + 16) within the normal fields 1..30)
    // w >= 1 (hist_pick_window): field 0 (zeros, subnormals) is never in the window, so zeros are counted by
    // the rescan's bulk count or, after a zero block, by take_zeros, and subnormals one by one (all also went to
    // the crumbs' slot 0, which those correct through corr[0])
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
    std::uint32_t le = 0, lo = 0;
    for (unsigned j = 0; j < 16; ++j)
      if ((c.lazy_bits >> j & 1u) != 0) {
        const unsigned sl = (w + j) & 15u;  // field w + j's slot
        (sl % 2 == 0 ? le : lo) |= 0xFu << (4 * (sl / 2));
      }
    lze = _mm256_set1_epi32(static_cast<int>(le));
    lzo = _mm256_set1_epi32(static_cast<int>(lo));
    for (auto& x : c.byt) x = _mm256_setzero_si256();
    for (auto& x : c.wrd) x = _mm256_setzero_si256();
    c.blocks = 0;
    for (int j = 0; j < max_direct; ++j) {
      bm[j] = j < c.nd ? static_cast<std::uint32_t>(s.b[c.dk[j]] - 1u) : 0u;
      dv[j] = _mm256_setzero_si256();
    }
  }

  /// A one in the crumb (2-bit counter) of the lane's slot: t is 2 x (the lane's field mod 16); slot s is bits
  /// 2s, 2s + 1 of the lane. The 16 fields of the window fill the 16 slots; a field outside it lands in the slot
  /// of its residue, and the block's rescan takes it out again (corr).
  NANSCOPE_IMPL_TARGET_AVX2 static __attribute__((always_inline)) __m256i onehot(__m256i t) {
    return _mm256_sllv_epi32(_mm256_set1_epi32(1), t);
  }

  /// The constants of count_block and its direct boundaries' counts.
  template <int ND>
  struct block_regs {
    __m256i f2, absm, bv[ND > 0 ? ND : 1], d[ND > 0 ? ND : 1];
  };

  /// Step i (0..7) of a block at p: the one-hot vectors of streams 0 and 1 (h0, h1), and the direct
  /// boundaries: |x| > b - 1 <=> |x| >= b (|x| patterns are below the sign bit: signed compares order them),
  /// the compare's -1 subtracted counts one.
  template <int ND>
  NANSCOPE_IMPL_TARGET_AVX2 static __attribute__((always_inline)) void step(const unsigned char* p, std::size_t i,
                                                                            block_regs<ND>& g, __m256i& h0,
                                                                            __m256i& h1) {
    __m256i r[es == 4 ? 2 : 1];
    if constexpr (es == 4) {
      r[0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * i));
      r[1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 * i + 32));
      h0 = onehot(_mm256_and_si256(_mm256_srli_epi32(r[0], Shift - 1), g.f2));
      h1 = onehot(_mm256_and_si256(_mm256_srli_epi32(r[1], Shift - 1), g.f2));
    } else {
      r[0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i));
      h0 = onehot(_mm256_and_si256(_mm256_srli_epi32(r[0], Shift - 1), g.f2));
      h1 = onehot(_mm256_and_si256(_mm256_srli_epi32(r[0], Shift + 15), g.f2));
    }
    if constexpr (ND > 0) {
      for (const __m256i v : r) {
        const __m256i x = _mm256_and_si256(v, g.absm);
        for (int j = 0; j < ND; ++j) {
          if constexpr (es == 4) g.d[j] = _mm256_sub_epi32(g.d[j], _mm256_cmpgt_epi32(x, g.bv[j]));
          else g.d[j] = _mm256_sub_epi16(g.d[j], _mm256_cmpgt_epi16(x, g.bv[j]));
        }
      }
      // the counts stay one chain: GCC otherwise reassociates the block's compares into a tree, hoisting every
      // load of the block and spilling its |x| vectors
      for (int j = 0; j < ND; ++j) NANSCOPE_IMPL_OPAQUE_YMM(g.d[j]);
    }
  }

  /// Steps i0 .. i0 + len - 1 (len <= 3) into crumbs, then the crumbs into the nibbles.
  template <int ND>
  NANSCOPE_IMPL_TARGET_AVX2 static __attribute__((always_inline)) void group(const unsigned char* p, std::size_t i0,
                                                                             std::size_t len,
                                                                             block_regs<ND>& g, __m256i& e0,
                                                                             __m256i& o0, __m256i& e1, __m256i& o1) {
    __m256i c0, c1;
    step<ND>(p, i0, g, c0, c1);
    for (std::size_t i = i0 + 1; i < i0 + len; ++i) {
      __m256i h0, h1;
      step<ND>(p, i, g, h0, h1);
      c0 = _mm256_add_epi32(c0, h0);
      c1 = _mm256_add_epi32(c1, h1);
    }
    const __m256i m = _mm256_set1_epi8(0x33);
    const __m256i ce0 = _mm256_and_si256(c0, m), co0 = _mm256_and_si256(_mm256_srli_epi32(c0, 2), m);
    const __m256i ce1 = _mm256_and_si256(c1, m), co1 = _mm256_and_si256(_mm256_srli_epi32(c1, 2), m);
    e0 = _mm256_add_epi32(e0, ce0);
    o0 = _mm256_add_epi32(o0, co0);
    e1 = _mm256_add_epi32(e1, ce1);
    o1 = _mm256_add_epi32(o1, co1);
  }

  /// The block's 128 elements at p (in L1) into the nibbles of e0 / o0 (stream 0) and e1 / o1 (stream 1), and
  /// its ND direct boundaries into dv. f32: stream 0 takes the even vectors, stream 1 the odd ones; 16-bit
  /// sources: stream 0 the low (even) element of each 32-bit lane, stream 1 the high (odd) one. Each stream
  /// puts its 8 one-hot vectors into crumbs in groups of 3, 3 and 2 (a crumb holds 3), and after each group
  /// the even slots' crumbs into the nibbles of e (slot 2k: nibble k), the odd slots' into o (slot 2k + 1):
  /// a nibble takes at most 8 a block.
  template <int ND>
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void count_block(const unsigned char* p, __m256i& e0,
                                                                            __m256i& o0, __m256i& e1, __m256i& o1) {
    block_regs<ND> g;
    g.f2 = _mm256_set1_epi32(0x1E);  // 2 x (field mod 16); drops the sign and the other element's bits
    g.absm = es == 4 ? _mm256_set1_epi32(0x7FFFFFFF) : _mm256_set1_epi16(0x7FFF);
    for (int j = 0; j < ND; ++j) {
      g.bv[j] = es == 4 ? _mm256_set1_epi32(static_cast<int>(bm[j])) : _mm256_set1_epi16(static_cast<short>(bm[j]));
      g.d[j] = dv[j];
    }
    e0 = o0 = e1 = o1 = _mm256_setzero_si256();
    group<ND>(p, 0, 3, g, e0, o0, e1, o1);
    group<ND>(p, 3, 3, g, e0, o0, e1, o1);
    group<ND>(p, 6, 2, g, e0, o0, e1, o1);
    for (int j = 0; j < ND; ++j) dv[j] = g.d[j];
  }

  /// After the kernel's pass over the 128 elements at p: their bins and direct boundaries; the block is scanned
  /// again when some element lay outside the window or in a lazy bin. bmin, bmax: the kernel's (signed) min and
  /// max of the block's f32 |x| bits.
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void end_block(const unsigned char* p, __m256i bmin,
                                                                           __m256i bmax) {
    const unsigned w0 = cold->w0;
    const __m256i lo = _mm256_set1_epi32(static_cast<int>(w0 << Shift));
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(((w0 + 16) << Shift) - 1));
    const __m256i outv = _mm256_or_si256(_mm256_cmpgt_epi32(lo, bmin), _mm256_cmpgt_epi32(bmax, hi));
    queue(p, _mm256_testz_si256(outv, outv) == 0);
  }

  /// end_block for the 16-bit sources: bmin, bmax are the block's min and max of the raw |x| patterns, 16-bit
  /// lanes (at most 0x7FFF: signed compares order them).
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void end_block16(const unsigned char* p, __m256i bmin,
                                                                             __m256i bmax) {
    const unsigned w0 = cold->w0;
    const __m256i lo = _mm256_set1_epi16(static_cast<short>(w0 << Shift));
    const __m256i hi = _mm256_set1_epi16(static_cast<short>(((w0 + 16) << Shift) - 1));
    const __m256i outv = _mm256_or_si256(_mm256_cmpgt_epi16(lo, bmin), _mm256_cmpgt_epi16(bmax, hi));
    queue(p, _mm256_testz_si256(outv, outv) == 0);
  }

  /// end_block after a zero block (kernel_avx2_zero.hpp), which counted the zeros apart: bmin is the unsigned
  /// min of the non-zero |x| bits (all ones where a lane held only zeros), zc the zeros per 32-bit lane. When
  /// every non-zero element lies in the window the zeros are counted here (the crumbs put them in slot 0) and
  /// the block needs no rescan; otherwise the rescan counts them, as for any block.
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void end_block_zero(const unsigned char* p, __m256i bmin,
                                                                              __m256i bmax, __m256i zc) {
    const unsigned w0 = cold->w0;
    const __m256i lo = _mm256_set1_epi32(static_cast<int>(w0 << Shift));
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(((w0 + 16) << Shift) - 1));
    const __m256i inside = _mm256_andnot_si256(_mm256_cmpgt_epi32(bmax, hi),
                                               _mm256_cmpeq_epi32(_mm256_max_epu32(bmin, lo), bmin));
    const bool outside = _mm256_movemask_ps(_mm256_castsi256_ps(inside)) != 0xFF;
    if (!outside) take_zeros(zc);
    queue(p, outside, !outside);
  }

  /// end_block_zero for the 16-bit sources: 16-bit lanes.
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void end_block16_zero(const unsigned char* p, __m256i bmin,
                                                                                __m256i bmax, __m256i zc) {
    const unsigned w0 = cold->w0;
    const __m256i lo = _mm256_set1_epi16(static_cast<short>(w0 << Shift));
    const __m256i hi = _mm256_set1_epi16(static_cast<short>(((w0 + 16) << Shift) - 1));
    const __m256i inside = _mm256_andnot_si256(_mm256_cmpgt_epi16(bmax, hi),
                                               _mm256_cmpeq_epi16(_mm256_max_epu16(bmin, lo), bmin));
    const bool outside = static_cast<unsigned>(_mm256_movemask_epi8(inside)) != 0xFFFFFFFFu;
    if (!outside) take_zeros(zc);
    queue(p, outside, !outside);
  }

  /// A block's zeros (per lane) into bin 0, and out of slot 0.
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) void take_zeros(__m256i zc) {
    const unsigned nz = zero_count256(zc);
    cold->h->c[0] += nz;
    cold->corr[0] -= static_cast<int>(nz);
  }

  /// Queues the block at p (outside: some element lies outside the window; zeros_in: its zeros are counted
  /// already); a full queue is counted.
  __attribute__((always_inline)) void queue(const unsigned char* p, bool outside, bool zeros_in = false) {
    hist_cold256& c = *cold;
    c.queued[c.nq] = p;
    c.outside |= static_cast<unsigned>(outside) << c.nq;
    c.zeros_in |= static_cast<unsigned>(zeros_in) << c.nq;
    if (++c.nq == queue_len) count_queue();
  }

  /// Counts the queued blocks. Out of line, so that the kernel's loop keeps its own registers: the call
  /// costs the kernel's live accumulators a store and a load every queue_len blocks.
  NANSCOPE_IMPL_TARGET_AVX2 __attribute__((noinline)) void count_queue() {
    switch (cold->nd) {
      case 0: count_queue_nd<0>(); break;
      case 1: count_queue_nd<1>(); break;
      default: count_queue_nd<2>(); break;
    }
    cold->nq = 0;
    cold->outside = 0;
    cold->zeros_in = 0;
  }

  /// For each queued block: its bins and direct boundaries, its nibbles to bytes, and its rescan when some
  /// element lay outside the window or a lazy slot saw an element.
  template <int ND>
  NANSCOPE_IMPL_TARGET_AVX2 void count_queue_nd() {
    hist_cold256& c = *cold;
    for (unsigned k = 0; k < c.nq; ++k) {
      const unsigned char* p = c.queued[k];
      __m256i e0, o0, e1, o1;
      count_block<ND>(p, e0, o0, e1, o1);
      bool lazy = false;
      if (any_lazy) {
        const __m256i hit = _mm256_or_si256(_mm256_and_si256(_mm256_or_si256(e0, e1), lze),
                                            _mm256_and_si256(_mm256_or_si256(o0, o1), lzo));
        lazy = _mm256_testz_si256(hit, hit) == 0;
      }
      // a byte's low nibble to byt[q], its high one to byt[q + 1]: byte j of a lane in byt[0] / byt[1] /
      // byt[2] / byt[3] counts slot 4j / 4j + 2 / 4j + 1 / 4j + 3
      const __m256i m = _mm256_set1_epi8(0x0F);
      c.byt[0] = _mm256_add_epi8(c.byt[0], _mm256_add_epi8(_mm256_and_si256(e0, m), _mm256_and_si256(e1, m)));
      c.byt[1] = _mm256_add_epi8(c.byt[1], _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi32(e0, 4), m),
                                                           _mm256_and_si256(_mm256_srli_epi32(e1, 4), m)));
      c.byt[2] = _mm256_add_epi8(c.byt[2], _mm256_add_epi8(_mm256_and_si256(o0, m), _mm256_and_si256(o1, m)));
      c.byt[3] = _mm256_add_epi8(c.byt[3], _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi32(o0, 4), m),
                                                           _mm256_and_si256(_mm256_srli_epi32(o1, 4), m)));
      if (__builtin_expect(((c.outside >> k) & 1u) != 0 || lazy, 0)) hist_scan256<U, Shift>(c, p, ((c.zeros_in >> k) & 1u) != 0);
      if (++c.blocks == 15) flush_bytes(c);
    }
  }

  /// Byte counters to the 16-bit counters.
  NANSCOPE_IMPL_TARGET_AVX2 static void flush_bytes(hist_cold256& c) {
    const __m256i lo = _mm256_set1_epi16(0x00FF);
    for (int q = 0; q < 4; ++q) {
      c.wrd[2 * q] = _mm256_add_epi16(c.wrd[2 * q], _mm256_and_si256(c.byt[q], lo));
      c.wrd[2 * q + 1] = _mm256_add_epi16(c.wrd[2 * q + 1], _mm256_srli_epi16(c.byt[q], 8));
      c.byt[q] = _mm256_setzero_si256();
    }
    c.blocks = 0;
  }

  /// End of the chunk's main loop: everything to the segment's counters.
  NANSCOPE_IMPL_TARGET_AVX2 void finish() {
    hist_cold256& c = *cold;
    if (c.nq != 0) count_queue();
    if (c.blocks != 0) flush_bytes(c);
    // wrd[2 * q + hb], word k of a 32-bit lane: byte j = 2k + hb of byt[q], i.e. slot 4j + 2 (q & 1) + (q >> 1)
    std::uint64_t slot[16] = {};
    for (int q = 0; q < 4; ++q)
      for (int hb = 0; hb < 2; ++hb) {
        alignas(32) std::uint16_t w[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(w), c.wrd[2 * q + hb]);
        for (int l = 0; l < 16; ++l) slot[4 * (2 * (l % 2) + hb) + 2 * (q & 1) + (q >> 1)] += w[l];
      }
    // slot s holds field w0 + ((s - w0) mod 16), less the corrections
    for (unsigned sl = 0; sl < 16; ++sl) {
      const unsigned f = c.w0 + ((sl - c.w0) & 15u);
      c.h->c[f * hist_copies] += static_cast<std::uint32_t>(static_cast<std::int64_t>(slot[sl]) + c.corr[sl]);
    }
    for (int j = 0; j < c.nd; ++j) {
      std::uint64_t t = 0;
      if constexpr (es == 4) {
        alignas(32) std::uint32_t w[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(w), dv[j]);
        for (const std::uint32_t x : w) t += x;
      } else {
        alignas(32) std::uint16_t w[16];
        _mm256_store_si256(reinterpret_cast<__m256i*>(w), dv[j]);
        for (const std::uint16_t x : w) t += x;
      }
      c.h->d[c.dk[j]] += t;
    }
  }
};

/// The AVX2 kernel and the histogram in one pass over a chunk of n contiguous raw f32 / f16 / bf16 elements
/// at level L; the elements past the last full block are binned by the scalar loop.
template <level L, class Load, class U, unsigned Shift>
NANSCOPE_IMPL_TARGET_AVX2 inline void hist_fused_run256(const void* p, std::size_t n, const kernel_params& kp, chunk_out& o,
                                                        const hist_setup& s, hist_local& h) {
  hist_cold256 cold;
  hist_hook256<U, Shift> g;
  const auto* b = static_cast<const unsigned char*>(p);
  g.begin(cold, s, h, b, n);
  avx2_f32_kernel<L, Load, kernel_no_hash, hist_hook256<U, Shift>>(p, n, kp, o, nullptr, &g);
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
