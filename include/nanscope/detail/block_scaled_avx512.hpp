// nanscope — detail/block_scaled_avx512.hpp: the AVX-512 kernel of the block-scaled what-if statistics: groups of 16 blocks, compares into mask registers, one popcount per count.
// Internal: include <nanscope/block_scaled.hpp>.
#ifndef NANSCOPE_DETAIL_BLOCK_SCALED_AVX512_HPP
#define NANSCOPE_DETAIL_BLOCK_SCALED_AVX512_HPP

#if !defined(NANSCOPE_BLOCK_SCALED_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/block_scaled_avx512.hpp is internal: include <nanscope/block_scaled.hpp>"
#endif

#include "block_scaled_avx2.hpp"
#include "block_scaled_kernel.hpp"
#include "kernel_x86.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>

// Whether the AVX-512 path prefetches the next chunk while it counts this one (1, the default; 0 for measurements).
#ifndef NANSCOPE_IMPL_BS_PREFETCH
#define NANSCOPE_IMPL_BS_PREFETCH 1
#endif

// GCC 12 warns that _mm512_undefined_*()'s self-initialised value is used uninitialised at every inlining site of
// the unpack / permute intrinsics (GCC bug 105593, fixed in GCC 13); as in kernel_x86.hpp, scoped to this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

#if NANSCOPE_HAS_X86_SIMD()

// The same arithmetic as the AVX2 kernel (block_scaled_avx2.hpp: bs_vsetup's thresholds, the fast-block range, the
// NVFP4 mantissa boundaries, the portable code for everything else), on groups of 16 unit blocks (lane k of a
// reduced vector = block k). What AVX-512 changes:
//   - unsigned compares straight into mask registers: an element's b = |x| - 1 (0 wraps to the largest value, so
//     zeros fall out of every "below" count) against the block's thresholds, broadcast from memory; a block's
//     count is one popcount of its 32 (16) mask bits, no packing;
//   - bf16 stays in 16-bit lanes: one compare covers a whole block of 32;
//   - the next chunk of the pass (same offset, chunk_elems further on) is prefetched into L2 while this chunk is
//     counted, so that at sizes beyond the caches the counting overlaps the health kernel's memory reads.

/// Sources: `VB` 512-bit vectors per unit block of 32 (f32 and f16 widened by vcvtph2ps: 2; bf16: 1 of 32 lanes).
struct bs5_src_f32 {
  static constexpr int VB = 2;
  static constexpr bool wide = true;
  static constexpr std::size_t es = 4;
  NANSCOPE_IMPL_TARGET_AVX512 static __m512i abs(const unsigned char* q, int j) {
    return _mm512_and_si512(_mm512_loadu_si512(q + 64 * j), _mm512_set1_epi32(0x7FFFFFFF));
  }
};
struct bs5_src_f16 {
  static constexpr int VB = 2;
  static constexpr bool wide = true;
  static constexpr std::size_t es = 2;
  NANSCOPE_IMPL_TARGET_AVX512 static __m512i abs(const unsigned char* q, int j) {
    const __m256i h = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * j)), _mm256_set1_epi16(0x7FFF));
    return _mm512_castps_si512(_mm512_cvtph_ps(h));
  }
};
struct bs5_src_bf16 {
  static constexpr int VB = 1;
  static constexpr bool wide = false;
  static constexpr std::size_t es = 2;
  NANSCOPE_IMPL_TARGET_AVX512 static __m512i abs(const unsigned char* q, int j) {
    return _mm512_and_si512(_mm512_loadu_si512(q + 64 * j), _mm512_set1_epi16(0x7FFF));
  }
};

/// The operation of a transposed reduction (bs5_hext16).
enum class bs5_op { max, min, add };
/// Transposed reduction of 16 vectors of 16 32-bit lanes: lane k = the max (unsigned), unsigned min or sum of v[k]'s
/// lanes. W16 (max and min): the operation is on 16-bit halves (the lanes' low halves reduce among themselves; the
/// caller keeps those).
template <bs5_op Op, bool W16>
NANSCOPE_IMPL_TARGET_AVX512 inline __m512i bs5_ext(__m512i a, __m512i b) {
  static_assert(Op != bs5_op::add || !W16, "sums are of 32-bit lanes");
  if constexpr (Op == bs5_op::add) return _mm512_add_epi32(a, b);
  else if constexpr (W16) return Op == bs5_op::min ? _mm512_min_epu16(a, b) : _mm512_max_epu16(a, b);
  else return Op == bs5_op::min ? _mm512_min_epu32(a, b) : _mm512_max_epu32(a, b);
}
template <bs5_op Op, bool W16 = false>
NANSCOPE_IMPL_TARGET_AVX512 inline __m512i bs5_hext16(const __m512i* v) {
  __m512i p[8], q[4], r[2];
  NANSCOPE_IMPL_UNROLL(8) for (int i = 0; i < 8; ++i)
    p[i] = bs5_ext<Op, W16>(_mm512_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  NANSCOPE_IMPL_UNROLL(4) for (int i = 0; i < 4; ++i)
    q[i] = bs5_ext<Op, W16>(_mm512_unpacklo_epi64(p[2 * i], p[2 * i + 1]), _mm512_unpackhi_epi64(p[2 * i], p[2 * i + 1]));
  // each 128-bit chunk of q[i] now holds, in lane j, its chunk's result of v[4i + j]: combine the chunks
  NANSCOPE_IMPL_UNROLL(2) for (int i = 0; i < 2; ++i)
    r[i] = bs5_ext<Op, W16>(_mm512_shuffle_i64x2(q[2 * i], q[2 * i + 1], 0x88), _mm512_shuffle_i64x2(q[2 * i], q[2 * i + 1], 0xDD));
  const __m512i t = bs5_ext<Op, W16>(_mm512_shuffle_i64x2(r[0], r[1], 0x88), _mm512_shuffle_i64x2(r[0], r[1], 0xDD));
  return W16 ? _mm512_and_si512(t, _mm512_set1_epi32(0xFFFF)) : t;
}

/// The per-segment histograms of the AVX-512 path (as bs_vhist, with a window of 16 bins in 16-lane vectors).
struct bs5_vhist {
  __m512i acc[16];  // acc[j]: bin w0 + j, a count per lane
  __m512i fin;      // the largest finite |x| of the fast blocks (f32 patterns, per lane)
  std::int32_t w0 = -1;
  std::uint32_t mx[8][256 * 4];
  int mx_lo = 256 * 4, mx_hi = -1;
  std::uint32_t nv[8][16];
  bool used = false;
};

/// Folds the AVX-512 histograms into the segment's counters (the AVX2 fold's arithmetic: bs_vhist_bins).
inline void bs5_vhist_fold(const bs_setup& s, const bs_vsetup& vs, bs5_vhist& h, bs_local& l) {
  if (!h.used) return;
  std::uint64_t mx[256 * 4], nv[16] = {};
  int lo = h.mx_lo, hi = h.mx_hi;
  if (h.w0 >= 0) {
    lo = h.w0 < lo ? h.w0 : lo;
    hi = h.w0 + 15 > hi ? h.w0 + 15 : hi;
  }
  for (int b = lo; b <= hi; ++b) mx[b] = 0;
  for (int b = h.mx_lo; b <= h.mx_hi; ++b)
    for (int cp = 0; cp < 8; ++cp) mx[b] += h.mx[cp][b];
  if (h.w0 >= 0) {
    for (int j = 0; j < 16; ++j) {
      alignas(64) std::uint32_t lanes[16];
      std::memcpy(lanes, &h.acc[j], sizeof lanes);
      for (int t = 0; t < 16; ++t) mx[h.w0 + j] += lanes[t];
      std::memset(&h.acc[j], 0, sizeof h.acc[j]);
    }
  }
  for (int cp = 0; cp < 8; ++cp)
    for (int b = 0; b < 16; ++b) nv[b] += h.nv[cp][b];
  bs_vhist_bins(s, vs, l, mx, lo, hi, nv);
  h.mx_lo = 256 * 4;
  h.mx_hi = -1;
  std::memset(h.nv, 0, sizeof h.nv);
  h.used = false;
  alignas(64) std::uint32_t fl[16];
  std::memcpy(fl, &h.fin, sizeof fl);
  std::memset(&h.fin, 0, sizeof h.fin);
  std::uint32_t f32 = 0;
  for (int t = 0; t < 16; ++t) f32 = fl[t] > f32 ? fl[t] : f32;
  const std::uint64_t fin = f32_to_f64_bits(f32);
  if (fin > l.finite_amax) l.finite_amax = fin;
}

/// Threshold lanes (f32 patterns) in the compare domain of b = |x| - 1 (Below: b < t counts 0 < |x| < T) or of
/// |x| itself (flush: b < t counts 0 < |x| <= T; clip: |x| > t counts |x| > T). f32 domain: T, T - 1, T. bf16
/// (|x| = 16-bit pattern P, |x|'s f32 pattern P << 16): P <= T >> 16, P < ceil(T / 2^16), P > T >> 16.
template <class Src, bool Below>
NANSCOPE_IMPL_TARGET_AVX512 inline __m512i bs5_dom(__m512i t) {
  if constexpr (Src::wide) {
    return Below ? _mm512_sub_epi32(t, _mm512_set1_epi32(1)) : t;
  } else {
    if constexpr (Below)
      return _mm512_sub_epi32(_mm512_srli_epi32(_mm512_add_epi32(t, _mm512_set1_epi32(0xFFFF)), 16), _mm512_set1_epi32(1));
    else return _mm512_srli_epi32(t, 16);
  }
}

/// One block's (or NVFP4 half's) counts against broadcast thresholds: fl = #{0 < |x| <= T_flush},
/// below = #{0 < |x| < T_sub} (Small; else both 0: the block has no element below T_sub), cl = #{|x| > T_clip} (Clip).
/// Half: the 16 elements of an NVFP4 half.
template <class Src, bool Half, bool Small, bool Clip>
NANSCOPE_IMPL_TARGET_AVX512 inline void bs5_block_counts(const unsigned char* q, std::uint32_t tf, std::uint32_t ts,
                                                         std::uint32_t tc, unsigned& fl, unsigned& below, unsigned& cl) {
  if constexpr (Src::wide) {
    constexpr int V = Half ? 1 : 2;
    const __m512i vf = _mm512_set1_epi32(static_cast<int>(tf)), vs = _mm512_set1_epi32(static_cast<int>(ts));
    const __m512i vc = _mm512_set1_epi32(static_cast<int>(tc));
    std::uint32_t mf = 0, ms = 0, mc = 0;
    NANSCOPE_IMPL_UNROLL(2) for (int v = 0; v < V; ++v) {
      const __m512i a = Src::abs(q, v);
      const __m512i b = _mm512_sub_epi32(a, _mm512_set1_epi32(1));
      if constexpr (Small) {
        mf |= mask_bits(_mm512_cmplt_epu32_mask(b, vf)) << (16 * v);
        ms |= mask_bits(_mm512_cmplt_epu32_mask(b, vs)) << (16 * v);
      }
      if constexpr (Clip) mc |= mask_bits(_mm512_cmpgt_epu32_mask(a, vc)) << (16 * v);
    }
    fl = static_cast<unsigned>(__builtin_popcount(mf));
    below = static_cast<unsigned>(__builtin_popcount(ms));
    cl = Clip ? static_cast<unsigned>(__builtin_popcount(mc)) : 0u;
  } else if constexpr (!Half) {
    const __m512i a = Src::abs(q, 0);
    const __m512i b = _mm512_sub_epi16(a, _mm512_set1_epi16(1));
    fl = Small ? static_cast<unsigned>(__builtin_popcountll(mask_bits(_mm512_cmplt_epu16_mask(b, _mm512_set1_epi16(static_cast<short>(tf)))))) : 0u;
    below =
        Small ? static_cast<unsigned>(__builtin_popcountll(mask_bits(_mm512_cmplt_epu16_mask(b, _mm512_set1_epi16(static_cast<short>(ts)))))) : 0u;
    cl = Clip ? static_cast<unsigned>(__builtin_popcountll(mask_bits(_mm512_cmpgt_epu16_mask(a, _mm512_set1_epi16(static_cast<short>(tc))))))
              : 0u;
  } else {
    const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), _mm256_set1_epi16(0x7FFF));
    const __m256i b = _mm256_sub_epi16(a, _mm256_set1_epi16(1));
    fl = Small ? static_cast<unsigned>(__builtin_popcount(mask_bits(_mm256_cmplt_epu16_mask(b, _mm256_set1_epi16(static_cast<short>(tf)))))) : 0u;
    below =
        Small ? static_cast<unsigned>(__builtin_popcount(mask_bits(_mm256_cmplt_epu16_mask(b, _mm256_set1_epi16(static_cast<short>(ts)))))) : 0u;
    cl = Clip ? static_cast<unsigned>(__builtin_popcount(mask_bits(_mm256_cmpgt_epu16_mask(a, _mm256_set1_epi16(static_cast<short>(tc))))))
              : 0u;
  }
  (void)tf;
  (void)ts;
  (void)tc;
}

/// Whether a block that loses `loss` elements (flat index `flat`) may become the worst block: more loss than the
/// worst so far, or a tie won by a lower index (row-wise a lower flat index `wflat`, no division; column-wise
/// bs_note_block decides). Evaluated without branches: whether a block loses anything is a coin toss for some
/// formats and data.
inline bool bs5_worst_candidate(const bs_counts& c, unsigned loss, std::uint64_t flat, std::uint64_t wflat, bool cols) {
  return (loss > c.worst_loss) | ((loss == c.worst_loss) & (loss != 0) & (cols | (flat < wflat)));
}

/// Counts and accounts the blocks `todo` of a group (16 lanes: blocks of B elements, block k at q + k * bytes) for
/// one format, from its threshold lanes in the compare domain (bs5_dom); Small / Clip as in bs5_block_counts.
template <class Src, bool Half, bool Small, bool Clip>
NANSCOPE_IMPL_TARGET_AVX512 inline void bs5_count_group(const bs_setup& s, const bs_format& f, bs_counts& c,
                                                        const unsigned char* q, std::size_t bytes, unsigned todo, __m512i tf,
                                                        __m512i ts, __m512i tc, __m512i scale, __m512i amax32, int B,
                                                        std::uint64_t flat0) {
  alignas(64) std::uint32_t vf[16], vs[16], vc[16], sc[16], am[16];
  _mm512_store_si512(vf, tf);
  _mm512_store_si512(vs, ts);
  if (Clip) _mm512_store_si512(vc, tc);
  else std::memset(vc, 0, sizeof vc);
  unsigned fl_sum = 0, below_sum = 0, cl_sum = 0, lossy = 0;
  bool stored = false;
  const bool cols = s.columns, keep = f.out != nullptr;
  std::uint64_t wflat = c.worst_row * s.L + c.worst_col;
  while (todo != 0) {
    const int k = __builtin_ctz(todo);
    todo &= todo - 1u;
    unsigned fl, below, cl;
    bs5_block_counts<Src, Half, Small, Clip>(q + static_cast<std::size_t>(k) * bytes, vf[k], vs[k], vc[k], fl, below, cl);
    fl_sum += fl;
    below_sum += below;
    cl_sum += cl;
    const unsigned loss = fl + cl;
    lossy += loss != 0 ? 1u : 0u;
    const std::uint64_t flat = flat0 + static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(B);
    const bool cand = bs5_worst_candidate(c, loss, flat, wflat, cols);
    if (cand | keep) {
      if (!stored) {
        _mm512_store_si512(sc, scale);
        _mm512_store_si512(am, amax32);
        stored = true;
      }
      bs_note_block(s, f, c, flat, B, cl, fl, below - fl, am[k],
                    static_cast<std::uint8_t>(sc[k]));
      wflat = c.worst_row * s.L + c.worst_col;
    }
  }
  c.flushed += fl_sum;
  c.subnormal += below_sum - fl_sum;
  c.clipped += cl_sum;
  c.lossy_blocks += lossy;
}

/// One block's (or NVFP4 half's) counts fl and below as bs5_block_counts<Src, Half, true, false>, packed per element
/// lane instead of popcounted: a vector whose 32-bit lanes sum to fl + (below << 6) (each at most 32: 6-bit fields).
template <class Src, bool Half>
NANSCOPE_IMPL_TARGET_AVX512 inline __m512i bs5_block_vec(const unsigned char* q, std::uint32_t tf, std::uint32_t ts) {
  if constexpr (Src::wide) {
    constexpr int V = Half ? 1 : 2;
    const __m512i vf = _mm512_set1_epi32(static_cast<int>(tf)), vs = _mm512_set1_epi32(static_cast<int>(ts));
    __m512i acc = _mm512_setzero_si512();
    NANSCOPE_IMPL_UNROLL(2) for (int v = 0; v < V; ++v) {
      const __m512i a = Src::abs(q, v);
      const __m512i b = _mm512_sub_epi32(a, _mm512_set1_epi32(1));
      acc = _mm512_mask_add_epi32(acc, _mm512_cmplt_epu32_mask(b, vf), acc, _mm512_set1_epi32(1));
      acc = _mm512_mask_add_epi32(acc, _mm512_cmplt_epu32_mask(b, vs), acc, _mm512_set1_epi32(1 << 6));
    }
    return acc;
  } else if constexpr (!Half) {
    const __m512i a = Src::abs(q, 0);
    const __m512i b = _mm512_sub_epi16(a, _mm512_set1_epi16(1));
    __m512i acc = _mm512_maskz_mov_epi16(_mm512_cmplt_epu16_mask(b, _mm512_set1_epi16(static_cast<short>(tf))), _mm512_set1_epi16(1));
    acc = _mm512_mask_add_epi16(acc, _mm512_cmplt_epu16_mask(b, _mm512_set1_epi16(static_cast<short>(ts))), acc,
                                _mm512_set1_epi16(1 << 6));
    return _mm512_madd_epi16(acc, _mm512_set1_epi16(1));  // (lane values <= 65: no sign trouble)
  } else {
    const __m256i a = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), _mm256_set1_epi16(0x7FFF));
    const __m256i b = _mm256_sub_epi16(a, _mm256_set1_epi16(1));
    __m256i acc = _mm256_maskz_mov_epi16(_mm256_cmplt_epu16_mask(b, _mm256_set1_epi16(static_cast<short>(tf))), _mm256_set1_epi16(1));
    acc = _mm256_mask_add_epi16(acc, _mm256_cmplt_epu16_mask(b, _mm256_set1_epi16(static_cast<short>(ts))), acc,
                                _mm256_set1_epi16(1 << 6));
    return _mm512_zextsi256_si512(_mm256_madd_epi16(acc, _mm256_set1_epi16(1)));
  }
}

/// bs5_count_group<Src, Half, true, ...> for a group where most blocks are counted: all 16 blocks' flushed and
/// below-T_sub counts at once (bs5_block_vec, one transposed sum: bs5_hext16<bs5_op::add>), the clipped ones only in the blocks of `clip`
/// (those whose max clips: the others have none); totals and the lossy blocks from vectors; the worst-block
/// bookkeeping runs per block only when some block of `todo` could be a candidate (its loss at least the worst so
/// far) or blocks are recorded. Same results as bs5_count_group (the worst block's choice does not depend on the
/// order its candidates come in).
template <class Src, bool Half>
NANSCOPE_IMPL_TARGET_AVX512 inline void bs5_count_group_vec(const bs_setup& s, const bs_format& f, bs_counts& c,
                                                            const unsigned char* q, std::size_t bytes, unsigned todo,
                                                            unsigned clip, __m512i tf, __m512i ts, __m512i tc, __m512i scale,
                                                            __m512i amax32, int B, std::uint64_t flat0) {
  alignas(64) std::uint32_t vf[16], vs[16], vc[16];
  _mm512_store_si512(vf, tf);
  _mm512_store_si512(vs, ts);
  _mm512_store_si512(vc, tc);
  __m512i acc[16];
  if constexpr (!Src::wide && Half) {
    // bf16 NVFP4 halves two at a time (one 512-bit vector of 32 elements: half 2j in the low 256 bits, 2j + 1 in the
    // high), each 256-bit half against its own thresholds (the low 16 bits of each threshold lane, as the one-half code)
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    const __m512i tf2 = _mm512_or_si512(_mm512_and_si512(tf, lo16), _mm512_slli_epi32(tf, 16));
    const __m512i ts2 = _mm512_or_si512(_mm512_and_si512(ts, lo16), _mm512_slli_epi32(ts, 16));
    const __m512i pair = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    NANSCOPE_IMPL_UNROLL(8) for (int j = 0; j < 8; ++j) {
      const __m512i idx = _mm512_add_epi32(pair, _mm512_set1_epi32(2 * j));
      const __m512i a = Src::abs(q + static_cast<std::size_t>(2 * j) * bytes, 0);
      const __m512i b = _mm512_sub_epi16(a, _mm512_set1_epi16(1));
      __m512i a16 = _mm512_maskz_mov_epi16(_mm512_cmplt_epu16_mask(b, _mm512_permutexvar_epi32(idx, tf2)), _mm512_set1_epi16(1));
      a16 = _mm512_mask_add_epi16(a16, _mm512_cmplt_epu16_mask(b, _mm512_permutexvar_epi32(idx, ts2)), a16, _mm512_set1_epi16(1 << 6));
      const __m512i p = _mm512_madd_epi16(a16, _mm512_set1_epi16(1));
      acc[2 * j] = _mm512_maskz_mov_epi32(0x00FF, p);
      acc[2 * j + 1] = _mm512_maskz_mov_epi32(0xFF00, p);
    }
  } else {
    NANSCOPE_IMPL_UNROLL(16) for (int k = 0; k < 16; ++k)
      acc[k] = bs5_block_vec<Src, Half>(q + static_cast<std::size_t>(k) * bytes, vf[k], vs[k]);
  }
  const __m512i cnt = bs5_hext16<bs5_op::add>(acc);
  __m512i cl = _mm512_setzero_si512();
  for (unsigned t = clip & todo; t != 0; t &= t - 1u) {
    const int k = __builtin_ctz(t);
    unsigned fl_k, below_k, cl_k;
    bs5_block_counts<Src, Half, false, true>(q + static_cast<std::size_t>(k) * bytes, vf[k], vs[k], vc[k], fl_k, below_k, cl_k);
    cl = _mm512_mask_set1_epi32(cl, _cvtu32_mask16(1u << k), static_cast<int>(cl_k));
  }
  const __mmask16 m = _cvtu32_mask16(todo);
  const __m512i f6 = _mm512_set1_epi32(63);
  const __m512i fl = _mm512_and_si512(cnt, f6), below = _mm512_and_si512(_mm512_srli_epi32(cnt, 6), f6);
  const __m512i loss = _mm512_add_epi32(fl, cl);
  // totals in 10-bit fields (each at most 16 * 32)
  const __m512i packed = _mm512_maskz_mov_epi32(
      m, _mm512_add_epi32(fl, _mm512_add_epi32(_mm512_slli_epi32(below, 10), _mm512_slli_epi32(cl, 20))));
  const auto sums = static_cast<std::uint32_t>(_mm512_reduce_add_epi32(packed));
  const unsigned fl_sum = sums & 1023u, below_sum = (sums >> 10) & 1023u, cl_sum = sums >> 20;
  const unsigned lossy = static_cast<unsigned>(__builtin_popcount(mask_bits(_mm512_mask_cmpneq_epi32_mask(m, loss, _mm512_setzero_si512()))));
  const auto maxloss = static_cast<std::uint32_t>(_mm512_reduce_max_epu32(_mm512_maskz_mov_epi32(m, loss)));
  const bool keep = f.out != nullptr;
  if (keep || (maxloss != 0 && maxloss >= c.worst_loss)) {
    alignas(64) std::uint32_t afl[16], abl[16], acl[16], sc[16], am[16];
    _mm512_store_si512(afl, fl);
    _mm512_store_si512(abl, below);
    _mm512_store_si512(acl, cl);
    _mm512_store_si512(sc, scale);
    _mm512_store_si512(am, amax32);
    const bool cols = s.columns;
    std::uint64_t wflat = c.worst_row * s.L + c.worst_col;
    for (unsigned t = todo; t != 0; t &= t - 1u) {
      const int k = __builtin_ctz(t);
      const unsigned loss_k = afl[k] + acl[k];
      const std::uint64_t flat = flat0 + static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(B);
      const bool cand = bs5_worst_candidate(c, loss_k, flat, wflat, cols);
      if (cand | keep) {
        bs_note_block(s, f, c, flat, B, acl[k], afl[k], abl[k] - afl[k], am[k], static_cast<std::uint8_t>(sc[k]));
        wflat = c.worst_row * s.L + c.worst_col;
      }
    }
  }
  c.flushed += fl_sum;
  c.subnormal += below_sum - fl_sum;
  c.clipped += cl_sum;
  c.lossy_blocks += lossy;
}

/// Blocks counted at once (bs5_count_group_vec) from this many blocks of a group on; fewer: one by one.
#ifndef NANSCOPE_IMPL_BS5_VEC_MIN
#define NANSCOPE_IMPL_BS5_VEC_MIN 8
#endif

/// NVFP4 block scales of 16 halves (bs_nv_scale's arithmetic in 16 lanes): E4M3 codes, `ok` where the scale is a
/// normal E4M3 and its thresholds normal f32, exp_s the scale's exponent.
NANSCOPE_IMPL_TARGET_AVX512 inline __m512i bs5_nv_scale(const bs_vfmt& f, __m512i a, __mmask16& ok, __m512i& exp_s) {
  const __m512i mant = _mm512_and_si512(a, _mm512_set1_epi32(0x7FFFFF));
  const __m512i ea = _mm512_srli_epi32(a, 23);
  const __mmask16 low = _mm512_cmplt_epi32_mask(mant, _mm512_set1_epi32(f.mq_mant));
  const __m512i mp = _mm512_mask_add_epi32(_mm512_or_si512(mant, _mm512_set1_epi32(127 << 23)), low,
                                           _mm512_or_si512(mant, _mm512_set1_epi32(127 << 23)), _mm512_set1_epi32(1 << 23));
  __m512i k = _mm512_setzero_si512();
  for (int j = 0; j < 8; ++j)
    k = _mm512_mask_add_epi32(k, _mm512_cmpge_epi32_mask(mp, _mm512_set1_epi32(f.g[j])), k, _mm512_set1_epi32(1));
  const __m512i e = _mm512_mask_sub_epi32(_mm512_sub_epi32(ea, _mm512_set1_epi32(127 + f.kq)), low,
                                          _mm512_sub_epi32(ea, _mm512_set1_epi32(127 + f.kq)), _mm512_set1_epi32(1));
  __m512i code = _mm512_add_epi32(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(7)), 3), k);
  const __mmask16 normal = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(-7));
  code = _mm512_min_epi32(code, _mm512_set1_epi32(0x7E));
  exp_s = _mm512_sub_epi32(_mm512_srli_epi32(code, 3), _mm512_set1_epi32(7));
  const __m512i shift = _mm512_add_epi32(exp_s, _mm512_set1_epi32(f.kt));
  ok = normal & _mm512_cmpgt_epi32_mask(shift, _mm512_set1_epi32(-100)) & _mm512_cmplt_epi32_mask(shift, _mm512_set1_epi32(100));
  return code;
}

/// NVFP4 thresholds of 16 halves from a per-mantissa table of 8: t[j] plus the exponent shift sh23.
NANSCOPE_IMPL_TARGET_AVX512 inline __m512i bs5_table(const std::int32_t* t, __m512i j, __m512i sh23) {
  const __m512i tab = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t)));
  return _mm512_add_epi32(_mm512_permutexvar_epi32(j, tab), sh23);
}

/// The 16 unit blocks' smallest b = |x| - 1 (lane k: block k; bf16: in the low 16 bits).
template <class Src>
NANSCOPE_IMPL_TARGET_AVX512 inline __m512i bs5_block_mins(const unsigned char* q) {
  constexpr std::size_t UB = 32 * Src::es;
  __m512i mn[16];
  NANSCOPE_IMPL_UNROLL(16) for (int k = 0; k < 16; ++k) {
    const unsigned char* bq = q + static_cast<std::size_t>(k) * UB;
    if constexpr (Src::wide) {
      const __m512i one = _mm512_set1_epi32(1);
      mn[k] = _mm512_min_epu32(_mm512_sub_epi32(Src::abs(bq, 0), one), _mm512_sub_epi32(Src::abs(bq, 1), one));
    } else {
      const __m512i b = _mm512_sub_epi16(Src::abs(bq, 0), _mm512_set1_epi16(1));
      mn[k] = _mm512_min_epu16(b, _mm512_srli_epi32(b, 16));
    }
  }
  return bs5_hext16<bs5_op::min, !Src::wide>(mn);
}

/// Pass 1 over a group's 16 unit blocks: per block a vector whose lanes' max is the block's max |x| (Nv: per half
/// too), and (Min) in mn_blk[0] (to be set to all ones by the caller) the running lane-wise unsigned min of b = |x| - 1
/// over the group (bf16: per 16-bit lane); 32-bit lanes (bf16: the larger /
/// smaller of each lane's two 16-bit values in the lane's low half, the high half to be ignored: bs5_hext16<.., true>). Prefetches the same bytes one chunk further on (pf: 0 for none).
template <class Src, bool Nv, bool Min>
NANSCOPE_IMPL_TARGET_AVX512 inline void bs5_pass1(const unsigned char* q, std::size_t pf, __m512i* mx_half, __m512i* mx_blk,
                                                  __m512i* mn_blk) {
  constexpr std::size_t UB = 32 * Src::es;
  NANSCOPE_IMPL_UNROLL(16) for (int k = 0; k < 16; ++k) {
    const unsigned char* bq = q + static_cast<std::size_t>(k) * UB;
    if (pf != 0) {
      for (std::size_t o = 0; o < UB; o += 64) _mm_prefetch(reinterpret_cast<const char*>(bq + pf + o), _MM_HINT_T1);
    }
    if constexpr (Src::wide) {
      const __m512i x0 = Src::abs(bq, 0), x1 = Src::abs(bq, 1);
      if constexpr (Nv) {
        mx_half[2 * k] = x0;
        mx_half[2 * k + 1] = x1;
      }
      if constexpr (!Nv) mx_blk[k] = _mm512_max_epu32(x0, x1);  // (Nv: the block maxima come from the halves')
      if constexpr (Min) {
        const __m512i one = _mm512_set1_epi32(1);
        mn_blk[0] = _mm512_min_epu32(mn_blk[0], _mm512_min_epu32(_mm512_sub_epi32(x0, one), _mm512_sub_epi32(x1, one)));
      }
    } else {
      const __m512i x = Src::abs(bq, 0);
      const __m512i f = _mm512_max_epu16(x, _mm512_srli_epi32(x, 16));
      mx_blk[k] = f;
      if constexpr (Nv) {
        mx_half[2 * k] = _mm512_maskz_mov_epi32(0x00FF, f);
        mx_half[2 * k + 1] = _mm512_maskz_mov_epi32(0xFF00, f);
      }
      if constexpr (Min) {
        const __m512i b = _mm512_sub_epi16(x, _mm512_set1_epi16(1));
        mn_blk[0] = _mm512_min_epu16(mn_blk[0], b);
      }
    }
  }
}

/// One group of 16 unit blocks of 32 at q (flat index flat0 of the first element; nunits < 16: only the first nunits
/// are real, the rest of the buffer is zero padding). pf: prefetch distance in bytes (0: none).
template <class Src>
NANSCOPE_IMPL_TARGET_AVX512 inline void bs5_group(const bs_setup& s, const bs_vsetup& vs, bs5_vhist& h, bs_local& l,
                                                  const unsigned char* q, int nunits, std::uint64_t flat0, std::size_t pf) {
  constexpr std::size_t UB = 32 * Src::es;
  __m512i mx_half[32], mx_blk[16], mn_blk[16];
  mn_blk[0] = _mm512_set1_epi32(-1);
  if (vs.any_nv) {
    if (vs.need_min) bs5_pass1<Src, true, true>(q, pf, mx_half, mx_blk, mn_blk);
    else bs5_pass1<Src, true, false>(q, pf, mx_half, mx_blk, mn_blk);
  } else {
    if (vs.need_min) bs5_pass1<Src, false, true>(q, pf, mx_half, mx_blk, mn_blk);
    else bs5_pass1<Src, false, false>(q, pf, mx_half, mx_blk, mn_blk);
  }
  // NVFP4: the 32 halves' maxima (two vectors of 16), and the blocks' as the larger of each pair of halves
  __m512i an_part[2];
  __m512i amax;
  if (vs.any_nv) {
    an_part[0] = bs5_hext16<bs5_op::max, !Src::wide>(mx_half);
    an_part[1] = bs5_hext16<bs5_op::max, !Src::wide>(mx_half + 16);
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    amax = _mm512_max_epu32(_mm512_permutex2var_epi32(an_part[0], even, an_part[1]),
                            _mm512_permutex2var_epi32(an_part[0], odd, an_part[1]));
  } else {
    an_part[0] = an_part[1] = _mm512_setzero_si512();
    amax = bs5_hext16<bs5_op::max, !Src::wide>(mx_blk);
  }
  // MXFP8: the group's smallest b = |x| - 1 (its blocks' own smallest ones only when some block might be below T_sub)
  std::uint32_t gmin = 0;
  if (vs.need_min) {
    const __m512i g = Src::wide ? mn_blk[0] : _mm512_min_epu32(_mm512_and_si512(mn_blk[0], _mm512_set1_epi32(0xFFFF)),
                                                               _mm512_srli_epi32(mn_blk[0], 16));
    gmin = static_cast<std::uint32_t>(_mm512_reduce_min_epu32(g));
  }
  __m512i bmin = _mm512_setzero_si512();
  bool have_bmin = false;
  const __m512i amax32 = Src::wide ? amax : _mm512_slli_epi32(amax, 16);
  const unsigned real = nunits >= 16 ? 0xFFFFu : (1u << nunits) - 1u;
  const unsigned fast = mask_bits(static_cast<__mmask16>(_mm512_cmpgt_epu32_mask(amax32, _mm512_set1_epi32(0x1FFFFFFF)) &
                                                         _mm512_cmplt_epu32_mask(amax32, _mm512_set1_epi32(0x7F800000)))) & real;
  const unsigned zero = mask_bits(_mm512_cmpeq_epi32_mask(amax32, _mm512_setzero_si512())) & real;
  const unsigned special = real & ~fast & ~zero;
  h.fin = _mm512_mask_max_epu32(h.fin, static_cast<__mmask16>(fast), h.fin, amax32);
  h.used = true;
  if (special != 0) {  // the largest finite |x| of the special blocks, from their elements
    std::uint64_t m64 = 0;
    for (unsigned m = special; m != 0; m &= m - 1u) {
      const unsigned char* bp = q + static_cast<std::size_t>(__builtin_ctz(m)) * UB;
      for (int e = 0; e < 32; ++e) {
        const std::uint64_t ab = bs_abs_bits(bp, s.type, static_cast<std::size_t>(e));
        if (ab < bs_inf_bits && ab > m64) m64 = ab;
      }
    }
    if (m64 > l.finite_amax) l.finite_amax = m64;
  }
  const __m512i mant = _mm512_and_si512(amax32, _mm512_set1_epi32(0x7FFFFF));
  // the shared MX histogram: (exponent field, mantissa class) of the fast blocks; a window of 16 bins in lanes
  if (vs.nmx > 0 && fast != 0) {
    __m512i cls = _mm512_setzero_si512();
    for (int t = 0; t < vs.ncls; ++t)
      cls = _mm512_mask_add_epi32(cls, _mm512_cmpge_epi32_mask(mant, _mm512_set1_epi32(vs.cls[t])), cls, _mm512_set1_epi32(1));
    const __m512i bin = _mm512_add_epi32(_mm512_slli_epi32(_mm512_srli_epi32(amax32, 23), 2), cls);
    alignas(64) std::int32_t bins[16];
    if (h.w0 < 0) {  // the window around the first block's bin
      _mm512_store_si512(bins, bin);
      const int b0 = bins[__builtin_ctz(fast)] - 7;
      h.w0 = b0 < 0 ? 0 : b0 > 256 * 4 - 16 ? 256 * 4 - 16 : b0;
      for (int j = 0; j < 16; ++j) h.acc[j] = _mm512_setzero_si512();
    }
    const __m512i d = _mm512_sub_epi32(bin, _mm512_set1_epi32(h.w0));
    const __mmask16 fk = static_cast<__mmask16>(fast);
    const __m512i one = _mm512_set1_epi32(1);
    NANSCOPE_IMPL_UNROLL(16) for (int j = 0; j < 16; ++j)
      h.acc[j] = _mm512_mask_add_epi32(h.acc[j], _mm512_mask_cmpeq_epi32_mask(fk, d, _mm512_set1_epi32(j)), h.acc[j], one);
    const unsigned out = fast & ~mask_bits(_mm512_cmplt_epu32_mask(d, _mm512_set1_epi32(16)));
    if (out != 0) {
      _mm512_store_si512(bins, bin);
      for (unsigned m = out; m != 0; m &= m - 1u) {
        const int k = __builtin_ctz(m);
        const int b = bins[k];
        if (b < h.mx_lo || b > h.mx_hi) {
          const int lo = b < h.mx_lo ? b : h.mx_lo, hi = b > h.mx_hi ? b : h.mx_hi;
          for (int cp = 0; cp < 8; ++cp)
            for (int t = lo; t <= hi; ++t)
              if (t < h.mx_lo || t > h.mx_hi) h.mx[cp][t] = 0;
          h.mx_lo = lo;
          h.mx_hi = hi;
        }
        ++h.mx[k & 7][b];
      }
    }
  }

  // MX formats
  for (int w = 0; w < vs.nmx; ++w) {
    const bs_vfmt& vf = vs.f[vs.mxi[w]];
    const bs_format& f = s.f[vf.k];
    bs_counts& c = l.c[static_cast<int>(f.id)];
    bs_zero_blocks(s, f, c, zero, 32, flat0);
    if (special != 0) bs_portable_lanes(s, f, c, q, special, 32, flat0);
    if (fast == 0) continue;
    const unsigned nfast = static_cast<unsigned>(__builtin_popcount(fast));
    c.blocks += nfast;
    c.elements += 32u * nfast;
    // D = X << 23, X = exponent of max |x| - emax (+ 1 where the rule says so)
    const __m512i D0 = _mm512_sub_epi32(_mm512_and_si512(amax32, _mm512_set1_epi32(0x7F800000)), _mm512_set1_epi32(vf.bias));
    const __m512i D = _mm512_mask_add_epi32(D0, _mm512_cmpge_epi32_mask(mant, _mm512_set1_epi32(vf.delta_mant)), D0,
                                            _mm512_set1_epi32(1 << 23));
    const __m512i tc32 = _mm512_add_epi32(_mm512_set1_epi32(vf.c_clip), D);
    const unsigned clip = vf.can_clip ? mask_bits(_mm512_cmpgt_epu32_mask(amax32, tc32)) & fast : 0u;
    const __m512i ts = bs5_dom<Src, true>(_mm512_add_epi32(_mm512_set1_epi32(vf.c_sub), D));
    unsigned low = fast;
    if (!vf.precise) {  // MXFP8: only blocks whose smallest non-zero |x| is below T_sub have small elements
      // no fast block has an element below its T_sub when the group's smallest b is at least the largest threshold
      const auto tsmax = static_cast<std::uint32_t>(_mm512_reduce_max_epu32(_mm512_maskz_mov_epi32(_cvtu32_mask16(fast), ts)));
      if (gmin >= tsmax) {
        low = 0;
      } else {
        if (!have_bmin) {
          bmin = bs5_block_mins<Src>(q);
          have_bmin = true;
        }
        low = mask_bits(_mm512_cmplt_epu32_mask(bmin, ts)) & fast;
      }
    }
    // blocks with small elements: every count; the others (clipping, or recorded) only the clipped one
    const unsigned rest = (f.out != nullptr ? fast : clip) & ~low;
    if ((low | rest) == 0) continue;
    const __m512i tf = bs5_dom<Src, false>(_mm512_add_epi32(_mm512_set1_epi32(vf.c_flush), D));
    const __m512i tc = bs5_dom<Src, false>(tc32);
    const __m512i scale = _mm512_add_epi32(_mm512_srai_epi32(D, 23), _mm512_set1_epi32(127));
    if (rest == 0 && __builtin_popcount(low) >= NANSCOPE_IMPL_BS5_VEC_MIN) {
      bs5_count_group_vec<Src, false>(s, f, c, q, UB, low, clip, tf, ts, tc, scale, amax32, 32, flat0);
      continue;
    }
    // (the clipped count only in the blocks whose max clips: the others have none)
    if ((low & clip) != 0) bs5_count_group<Src, false, true, true>(s, f, c, q, UB, low & clip, tf, ts, tc, scale, amax32, 32, flat0);
    if ((low & ~clip) != 0) bs5_count_group<Src, false, true, false>(s, f, c, q, UB, low & ~clip, tf, ts, tc, scale, amax32, 32, flat0);
    if ((rest & clip) != 0) bs5_count_group<Src, false, false, true>(s, f, c, q, UB, rest & clip, tf, ts, tc, scale, amax32, 32, flat0);
    if ((rest & ~clip) != 0) bs5_count_group<Src, false, false, false>(s, f, c, q, UB, rest & ~clip, tf, ts, tc, scale, amax32, 32, flat0);
  }

  // NVFP4: 32 halves, two parts of 16
  if (!vs.any_nv) return;
  for (int i = 0; i < vs.n; ++i) {
    const bs_vfmt& vf = vs.f[i];
    if (vf.mx) continue;
    const bs_format& f = s.f[vf.k];
    bs_counts& c = l.c[static_cast<int>(f.id)];
    for (int part = 0; part < 2; ++part) {
      const int nh = 2 * nunits - 16 * part;  // real halves in this part
      const unsigned realh = nh >= 16 ? 0xFFFFu : nh <= 0 ? 0u : (1u << nh) - 1u;
      if (realh == 0) continue;
      const unsigned char* qp = q + static_cast<std::size_t>(part) * 256 * Src::es;
      const std::uint64_t hflat0 = flat0 + static_cast<std::uint64_t>(part) * 256;
      const __m512i an = an_part[part];
      const __m512i a32 = Src::wide ? an : _mm512_slli_epi32(an, 16);
      const unsigned zh = mask_bits(_mm512_cmpeq_epi32_mask(a32, _mm512_setzero_si512())) & realh;
      bs_zero_blocks(s, f, c, zh, 16, hflat0);
      if (vf.off) {
        bs_portable_lanes(s, f, c, qp, realh & ~zh, 16, hflat0);
        continue;
      }
      const __mmask16 fastk = _mm512_cmpgt_epu32_mask(a32, _mm512_set1_epi32(0x1FFFFFFF)) &
                              _mm512_cmplt_epu32_mask(a32, _mm512_set1_epi32(0x7F800000));
      __mmask16 ok;
      __m512i es;
      const __m512i code = bs5_nv_scale(vf, a32, ok, es);
      const unsigned fh = mask_bits(static_cast<__mmask16>(fastk & ok)) & realh;
      const unsigned sh = realh & ~fh & ~zh;
      if (sh != 0) bs_portable_lanes(s, f, c, qp, sh, 16, hflat0);
      if (fh == 0) continue;
      const unsigned nfast = static_cast<unsigned>(__builtin_popcount(fh));
      c.blocks += nfast;
      c.elements += 16u * nfast;
      {  // the scale exponents' histogram: one count per distinct exponent of the fast halves (usually a few)
        const __m512i exv = _mm512_srli_epi32(code, 3);
        alignas(64) std::int32_t ex[16];
        _mm512_store_si512(ex, exv);
        for (unsigned m = fh; m != 0;) {
          const int k = __builtin_ctz(m);
          const unsigned same = mask_bits(_mm512_cmpeq_epi32_mask(exv, _mm512_set1_epi32(ex[k]))) & m;
          h.nv[k & 7][ex[k]] += static_cast<std::uint32_t>(__builtin_popcount(same));
          m &= ~same;
        }
      }
      const __m512i j = _mm512_and_si512(code, _mm512_set1_epi32(7));
      const __m512i sh23 = _mm512_slli_epi32(_mm512_add_epi32(es, _mm512_set1_epi32(vf.kt)), 23);
      const __m512i tc32 = bs5_table(vf.t_clip, j, sh23);
      const unsigned clip = mask_bits(_mm512_cmpgt_epu32_mask(a32, tc32)) & fh;
      const __m512i tf = bs5_dom<Src, false>(bs5_table(vf.t_flush, j, sh23));
      const __m512i ts = bs5_dom<Src, true>(bs5_table(vf.t_sub, j, sh23));
      const __m512i tc = bs5_dom<Src, false>(tc32);
      if (__builtin_popcount(fh) >= NANSCOPE_IMPL_BS5_VEC_MIN) {
        bs5_count_group_vec<Src, true>(s, f, c, qp, 16 * Src::es, fh, clip, tf, ts, tc, code, a32, 16, hflat0);
        continue;
      }
      if ((fh & clip) != 0) bs5_count_group<Src, true, true, true>(s, f, c, qp, 16 * Src::es, fh & clip, tf, ts, tc, code, a32, 16, hflat0);
      if ((fh & ~clip) != 0) bs5_count_group<Src, true, true, false>(s, f, c, qp, 16 * Src::es, fh & ~clip, tf, ts, tc, code, a32, 16, hflat0);
    }
  }
}

/// Unit blocks the AVX-512 path has taken since the program started (tests: the path really runs).
inline std::atomic<std::uint64_t>& bs_vector_units_avx512() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}

/// The AVX-512 path over a run of whole unit blocks (bs_units_fn).
template <class Src>
NANSCOPE_IMPL_TARGET_AVX512 inline bool bs_units_avx512(const bs_setup& s, bs_local& l, const unsigned char* p,
                                                        std::uint64_t units, std::uint64_t row, std::uint64_t col) {
  if (l.vsetup == nullptr) {
    l.vsetup = new bs_vsetup(bs_make_vsetup(s));
    auto* vh = new bs5_vhist;
    std::memset(vh->nv, 0, sizeof vh->nv);
    vh->fin = _mm512_setzero_si512();
    l.vhist = vh;
    l.vkind = 2;
  } else if (l.vkind != 2) {
    return false;  // (a segment the AVX2 path started: never happens, one instruction set per pass)
  }
  const bs_vsetup& vs = *static_cast<const bs_vsetup*>(l.vsetup);
  bs5_vhist& h = *static_cast<bs5_vhist*>(l.vhist);
  bs_vector_units_avx512().fetch_add(units, std::memory_order_relaxed);
  std::uint64_t flat = row * s.L + col;
  // the next chunk of this segment, at the same offset: prefetched while this one is counted
  const std::size_t pf = chunk_elems * Src::es;
  std::uint64_t u = 0;
  for (; u + 16 <= units; u += 16) {
    const bool ahead = NANSCOPE_IMPL_BS_PREFETCH != 0 && flat + chunk_elems + 512 <= l.seg_end;
    bs5_group<Src>(s, vs, h, l, p + static_cast<std::size_t>(u) * 32 * Src::es, 16, flat, ahead ? pf : 0);
    flat += 512;
  }
  if (u < units) {  // the last few: padded with zeros (their lanes are not accounted)
    alignas(64) unsigned char buf[512 * 4] = {};
    const std::size_t bytes = static_cast<std::size_t>(units - u) * 32 * Src::es;
    std::memcpy(buf, p + static_cast<std::size_t>(u) * 32 * Src::es, bytes);
    bs5_group<Src>(s, vs, h, l, buf, static_cast<int>(units - u), flat, 0);
  }
  return true;
}

inline bool bs_units_avx512_f32(const bs_setup& s, bs_local& l, const unsigned char* p, std::uint64_t units, std::uint64_t row,
                                std::uint64_t col) {
  return bs_units_avx512<bs5_src_f32>(s, l, p, units, row, col);
}
inline bool bs_units_avx512_f16(const bs_setup& s, bs_local& l, const unsigned char* p, std::uint64_t units, std::uint64_t row,
                                std::uint64_t col) {
  return bs_units_avx512<bs5_src_f16>(s, l, p, units, row, col);
}
inline bool bs_units_avx512_bf16(const bs_setup& s, bs_local& l, const unsigned char* p, std::uint64_t units,
                                 std::uint64_t row, std::uint64_t col) {
  return bs_units_avx512<bs5_src_bf16>(s, l, p, units, row, col);
}

/// The AVX-512 path for a setup (null: none; the AVX2 path or the portable loop then): f32, f16, bf16 on CPUs with
/// AVX-512 F/BW/DQ/VL.
inline bs_units_fn bs_units_avx512_for(const bs_setup& s) {
  static const bool avx512 = cpu_has_avx512() && cpu_has_f16c();  // (cpuid once)
  if (!avx512) return nullptr;
  switch (s.type) {
    case dtype::f32: return &bs_units_avx512_f32;
    case dtype::f16: return &bs_units_avx512_f16;
    case dtype::bf16: return &bs_units_avx512_bf16;
    default: return nullptr;
  }
}

/// Folds the vector path's histograms (AVX2 or AVX-512) into the segment's counters and frees its state.
inline void bs_vector_end(const bs_setup& s, bs_local& l) {
  if (l.vsetup == nullptr) return;
  const bs_vsetup& vs = *static_cast<const bs_vsetup*>(l.vsetup);
  if (l.vkind == 2) {
    bs5_vhist_fold(s, vs, *static_cast<bs5_vhist*>(l.vhist), l);
    delete static_cast<bs5_vhist*>(l.vhist);
  } else {
    bs_vhist_fold(s, vs, *static_cast<bs_vhist*>(l.vhist), l);
    delete static_cast<bs_vhist*>(l.vhist);
  }
  delete static_cast<bs_vsetup*>(l.vsetup);
  l.vsetup = nullptr;
  l.vhist = nullptr;
  l.vkind = 0;
}

#endif  // NANSCOPE_HAS_X86_SIMD()

}  // namespace detail
NANSCOPE_NAMESPACE_END

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // NANSCOPE_DETAIL_BLOCK_SCALED_AVX512_HPP
