// nanscope — detail/block_scaled_avx2.hpp: the AVX2 kernel of the block-scaled what-if statistics (block_scaled.hpp):
// groups of 8 MX blocks (16 NVFP4 blocks) of f32, f16 (widened exactly by F16C) or bf16 (16-bit lanes, unwidened).
// Internal: include <nanscope/block_scaled.hpp>.
#ifndef NANSCOPE_DETAIL_BLOCK_SCALED_AVX2_HPP
#define NANSCOPE_DETAIL_BLOCK_SCALED_AVX2_HPP

#if !defined(NANSCOPE_BLOCK_SCALED_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/block_scaled_avx2.hpp is internal: include <nanscope/block_scaled.hpp>"
#endif

#include "block_scaled_kernel.hpp"
#include "kernel_x86.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

#if NANSCOPE_HAS_X86_SIMD()

// How a group of 256 elements (8 unit blocks) is counted, exactly:
//   1. |x| patterns (f32 bits; f16 widened by vcvtph2ps, which is exact and ignores denormals-are-zero; bf16 as its
//      16-bit patterns). Per block, max |x| comes from a transposed max-reduction (lane k = block k), and so does
//      the smallest non-zero |x| when some requested MX format can skip blocks with nothing near its small thresholds.
//   2. MX thresholds per block and format: the block's scale exponent X is the exponent field of max |x| minus
//      (127 + emax), plus the rule's 0 or 1 (a compare of the mantissa); the thresholds are the scale-1 thresholds
//      (few significant bits) with X added to their exponent field: exact as long as they stay normal f32, which a
//      "fast" block (max |x| in [2^-63, inf)) guarantees. bf16 compares with the thresholds' top 16 bits (exact:
//      their low 16 bits are zero).
//   3. NVFP4: the E4M3 block scale by counting which of 8 exact mantissa boundaries the block's max passes (the
//      tensor scale is fixed, so the boundaries are too), thresholds from per-mantissa tables of floor / ceil f32
//      patterns plus the exponent: exact while the scale is a normal E4M3 and the thresholds normal f32.
//   4. Elements: flushed = #{0 < |x| <= T_flush}, subnormal = #{0 < |x| < T_sub} - flushed, clipped = #{|x| > T_clip}
//      (only in blocks whose max passes T_clip; MXFP8: small elements only in blocks whose smallest non-zero |x| is
//      below T_sub). Zeros are kept out with one add: b = |x| + 0x7FFFFFFF (16-bit: + 0x7FFF) maps 0 to the largest
//      signed value and 1.. to the smallest upward, so signed compares of b count non-zero elements below a
//      threshold. A block's compare results are packed to bytes (signed saturation keeps -1), one movemask and one
//      popcount give its count; per-block work beyond that (the worst block, records) only for blocks that may be
//      the worst or when records are kept.
// Blocks outside the fast range (zeros aside: counted here; tiny, NaN / inf, E4M3-subnormal NVFP4 scales) go to the
// portable per-block code, so the counts are the portable loop's for any data.

/// The f32-domain sources (f32; f16 widened) and bf16 (16-bit lanes).
struct bs_src_f32 {
  static constexpr int lanes = 8;     // elements per vector
  static constexpr bool wide = true;  // 32-bit lanes
  static constexpr std::size_t es = 4;
  NANSCOPE_IMPL_TARGET_AVX2 static __m256i abs(const unsigned char* q, int j) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * j)), _mm256_set1_epi32(0x7FFFFFFF));
  }
};
struct bs_src_f16 {
  static constexpr int lanes = 8;
  static constexpr bool wide = true;
  static constexpr std::size_t es = 2;
  NANSCOPE_IMPL_TARGET_AVX2 static __m256i abs(const unsigned char* q, int j) {
    const __m128i h = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * j)), _mm_set1_epi16(0x7FFF));
    return _mm256_castps_si256(_mm256_cvtph_ps(h));
  }
};
struct bs_src_bf16 {
  static constexpr int lanes = 16;
  static constexpr bool wide = false;
  static constexpr std::size_t es = 2;
  NANSCOPE_IMPL_TARGET_AVX2 static __m256i abs(const unsigned char* q, int j) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * j)), _mm256_set1_epi16(0x7FFF));
  }
};

/// Horizontal max (signed 32-bit) of 8 vectors: lane k = max of v[k]'s lanes.
template <bool Min>
NANSCOPE_IMPL_TARGET_AVX2 inline __m256i bs_ext(__m256i a, __m256i b) {
  if constexpr (Min) return _mm256_min_epi32(a, b);
  else return _mm256_max_epi32(a, b);
}
template <bool Min>
NANSCOPE_IMPL_TARGET_AVX2 inline __m256i bs_hext8(const __m256i* v) {
  __m256i p[4], q2[2];
  NANSCOPE_IMPL_UNROLL(4) for (int i = 0; i < 4; ++i)
    p[i] = bs_ext<Min>(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]), _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
  NANSCOPE_IMPL_UNROLL(2) for (int i = 0; i < 2; ++i)
    q2[i] = bs_ext<Min>(_mm256_unpacklo_epi64(p[2 * i], p[2 * i + 1]), _mm256_unpackhi_epi64(p[2 * i], p[2 * i + 1]));
  return bs_ext<Min>(_mm256_permute2x128_si256(q2[0], q2[1], 0x20), _mm256_permute2x128_si256(q2[0], q2[1], 0x31));
}

/// Per-format constants of the vector path.
struct bs_vfmt {
  int k = 0;  // index in bs_setup::f
  bool mx = true;
  bool precise = true;   // count small elements in every block (FP4 / FP6 / NVFP4) instead of testing the block min
  bool can_clip = true;  // (MX round_up never clips)
  // MX: scale-1 thresholds (f32 bits), exponent bias offset, the rule's mantissa switch
  std::int32_t c_flush = 0, c_sub = 0, c_clip = 0;
  std::int32_t bias = 0;       // (127 + emax) << 23
  std::int32_t delta_mant = 0;  // the rule's +1 when (max |x| & 0x7FFFFF) >= this (0x800000: never)
  int emax = 0;
  // NVFP4: the tensor scale q = 6 s_t = Mq 2^Kq; boundaries of M' (f32 bits, see bs_nv_scale) and the per-mantissa
  // threshold tables: floor patterns of 0.25 (1 + j/8) Mt and 6 (1 + j/8) Mt, ceil of 0.75 (1 + j/8) Mt, at exponent 0
  std::int32_t mq_mant = 0;  // Mq's 23-bit mantissa pattern
  int kq = 0;
  std::int32_t g[8] = {};
  std::int32_t t_flush[8] = {}, t_sub[8] = {}, t_clip[8] = {};
  int kt = 0;  // s_t = Mt 2^kt
  bool off = false;  // NVFP4 with a tensor scale of 0 or not finite: every block takes the portable code
};

/// The per-pass constants of the vector path (built from the setup once per check).
struct bs_vsetup {
  int n = 0;
  bs_vfmt f[block_format_count];
  bool need_min = false;  // some MX format tests the block min
  bool any_mx = false, any_nv = false;
  // the shared MX histogram's mantissa classes: up to 3 switch points (23-bit mantissa patterns; a class counts the
  // points the max's mantissa reaches)
  int ncls = 0;
  std::int32_t cls[3] = {};
  int nmx = 0, mxi[block_format_count] = {};  // the MX formats (indices in f)
};

/// floor / ceil f32 bit patterns of a positive double in f32's normal range (integer operations).
inline std::int32_t bs_f32_floor_bits(double v) {
  const std::uint64_t b = double_to_bits(v);
  const int e = static_cast<int>(b >> 52) - 1023;
  return static_cast<std::int32_t>((static_cast<std::uint32_t>(e + 127) << 23) | static_cast<std::uint32_t>((b >> 29) & 0x7FFFFF));
}
inline std::int32_t bs_f32_ceil_bits(double v) {
  const std::int32_t f = bs_f32_floor_bits(v);
  return (double_to_bits(v) & 0x1FFFFFFFull) != 0 ? f + 1 : f;
}

inline bs_vsetup bs_make_vsetup(const bs_setup& s) {
  bs_vsetup v;
  for (int k = 0; k < s.nf; ++k) {
    const bs_format& f = s.f[k];
    bs_vfmt& vf = v.f[v.n++];
    vf.k = k;
    vf.mx = f.mx;
    const element_format_info& fi = info(f.el);
    if (f.mx) {
      v.any_mx = true;
      v.mxi[v.nmx++] = v.n - 1;
      vf.precise = f.el == element_format::e2m1 || f.el == element_format::e2m3 || f.el == element_format::e3m2;
      vf.can_clip = s.rule != scale_rule::round_up;
      vf.c_flush = static_cast<std::int32_t>(float_to_bits(static_cast<float>(f.flush1)));
      vf.c_sub = static_cast<std::int32_t>(float_to_bits(static_cast<float>(f.sub1)));
      vf.c_clip = static_cast<std::int32_t>(float_to_bits(static_cast<float>(f.clip1)));
      vf.emax = fi.emax;
      vf.bias = (127 + fi.emax) << 23;
      if (s.rule == scale_rule::even) vf.delta_mant = 0x800000 - (1 << (22 - fi.mantissa_bits));
      else if (s.rule == scale_rule::round_up) vf.delta_mant = (float_to_bits(static_cast<float>(fi.max_finite)) & 0x7FFFFF) + 1;
      else vf.delta_mant = 0x800000;
      if (!vf.precise) v.need_min = true;
      if (vf.delta_mant != 0x800000) {
        bool have = false;
        for (int i = 0; i < v.ncls; ++i) have = have || v.cls[i] == vf.delta_mant;
        if (!have) v.cls[v.ncls++] = vf.delta_mant;
      }
    } else {
      v.any_nv = true;
      vf.precise = true;
      const std::uint32_t tb = float_to_bits(f.tensor_scale) & 0x7FFFFFFFu;
      if (tb == 0 || tb >= 0x7F800000u) {
        vf.off = true;
        continue;
      }
      const double st = f32_bits_to_double(tb);
      const double q = 6.0 * st;
      vf.kq = bs_floor_log2(q);
      const double mq = q * bs_pow2(-vf.kq);
      vf.mq_mant = static_cast<std::int32_t>(bs_f32_floor_bits(mq) & 0x7FFFFF);
      // M' = Ma (Ma >= Mq) or 2 Ma (Ma < Mq) lies in [Mq, 2 Mq); the E4M3 mantissa j of M' / Mq rounds up past the
      // boundary Mq (1 + (2j + 1) / 16); at an exact tie it rounds to the even j, i.e. up when j is odd
      for (int j = 0; j < 8; ++j) {
        const double b = mq * (1.0 + (2.0 * j + 1.0) / 16.0);  // exact: 26 + 5 bits
        const std::int32_t fl = bs_f32_floor_bits(b);
        const bool exact = (double_to_bits(b) & 0x1FFFFFFFull) == 0;
        vf.g[j] = exact ? fl + ((j % 2 == 0) ? 1 : 0) : fl + 1;  // M' bits >= g[j]: passes boundary j
      }
      vf.kt = bs_floor_log2(st);
      const double mt = st * bs_pow2(-vf.kt);
      for (int j = 0; j < 8; ++j) {
        const double sj = (1.0 + j / 8.0) * mt;  // exact
        vf.t_flush[j] = bs_f32_floor_bits(0.25 * sj);
        vf.t_sub[j] = bs_f32_ceil_bits(0.75 * sj);
        vf.t_clip[j] = bs_f32_floor_bits(6.0 * sj);
      }
    }
  }
  // the classes in increasing order
  std::sort(v.cls, v.cls + v.ncls);
  return v;
}

/// The NVFP4 block scales of 8 blocks whose max |x| (f32 bits, normal) is a: E4M3 codes, and `ok` lanes (-1) where the
/// scale is a normal E4M3 (code >= 8; saturation included) and its thresholds normal f32.
NANSCOPE_IMPL_TARGET_AVX2 inline __m256i bs_nv_scale(const bs_vfmt& f, __m256i a, __m256i& ok, __m256i& exp_s) {
  const __m256i mant = _mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF));
  const __m256i ea = _mm256_srli_epi32(a, 23);  // biased
  // case L: Ma < Mq, M' = 2 Ma (exponent field 128), else M' = Ma (127)
  const __m256i low = _mm256_cmpgt_epi32(_mm256_set1_epi32(f.mq_mant), mant);
  const __m256i mp = _mm256_or_si256(mant, _mm256_sub_epi32(_mm256_set1_epi32(127 << 23), _mm256_slli_epi32(low, 23)));
  __m256i k = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j) k = _mm256_sub_epi32(k, _mm256_cmpgt_epi32(mp, _mm256_set1_epi32(f.g[j] - 1)));
  // E4M3 exponent e = Ea - 127 - Kq - (case L); code = ((e + 7) << 3) + k (k = 8 carries into the exponent)
  const __m256i e = _mm256_add_epi32(_mm256_sub_epi32(ea, _mm256_set1_epi32(127 + f.kq)), low);  // low is -1 in case L
  __m256i code = _mm256_add_epi32(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(7)), 3), k);
  // normal E4M3 only (e >= -6); saturation at 0x7E
  const __m256i normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(-7));
  code = _mm256_min_epi32(code, _mm256_set1_epi32(0x7E));
  // threshold exponent: e_s + kt where e_s = code >> 3 - 7, must keep the thresholds normal f32: the smallest
  // (0.25 S: field of t_flush plus the shift) >= 1, the largest (6 S) <= 254
  exp_s = _mm256_sub_epi32(_mm256_srli_epi32(code, 3), _mm256_set1_epi32(7));
  const __m256i shift = _mm256_add_epi32(exp_s, _mm256_set1_epi32(f.kt));
  const __m256i lo_ok = _mm256_cmpgt_epi32(shift, _mm256_set1_epi32(-100));
  const __m256i hi_ok = _mm256_cmpgt_epi32(_mm256_set1_epi32(100), shift);
  ok = _mm256_and_si256(normal, _mm256_and_si256(lo_ok, hi_ok));
  return code;
}

/// The per-segment histogram copies of the vector path (folded into the formats' histograms at the segment's end).
struct bs_vhist {
  // MX: by (exponent field of max |x|) * 4 + mantissa class. The bins [w0, w0 + 8) count in vector lanes (acc[j]:
  // bin w0 + j, a count per lane); bins outside that window in copies per lane (no store-to-load chains)
  __m256i acc[8];
  std::int32_t w0 = -1;  // -1: not placed yet (on the first group's first block)
  std::uint32_t mx[8][256 * 4];  // (zeroed when first used: mx_lo <= mx_hi)
  int mx_lo = 256 * 4, mx_hi = -1;  // the bins of mx that may be non-zero
  std::uint32_t fin32 = 0;  // the largest finite |x| of the fast blocks (f32 pattern)
  // NVFP4: by E4M3 scale exponent field (1..15), 8 copies
  std::uint32_t nv[8][16];
  bool used = false;
};

/// Adds the vector paths' histogram bins to the formats' counters: MX bins [lo, hi] by (exponent field of max |x|) * 4 +
/// mantissa class, NVFP4 bins by E4M3 scale exponent field.
inline void bs_vhist_bins(const bs_setup& s, const bs_vsetup& vs, bs_local& l, const std::uint64_t* mx, int lo, int hi,
                          const std::uint64_t* nv) {
  for (int i = 0; i < vs.n; ++i) {
    const bs_vfmt& vf = vs.f[i];
    bs_counts& c = l.c[static_cast<int>(s.f[vf.k].id)];
    if (vf.mx) {
      // the rule's +1 in mantissa class cl: this format's switch point is among the cl points reached
      int delta[4] = {0, 0, 0, 0};
      for (int cl = 1; cl < 4; ++cl) delta[cl] = delta[cl - 1] + (cl - 1 < vs.ncls && vs.cls[cl - 1] == vf.delta_mant ? 1 : 0);
      for (int b = lo; b <= hi; ++b) {
        if (mx[b] == 0) continue;
        const int x = (b >> 2) - 127 - vf.emax + delta[b & 3];
        c.hist[x + 127] += mx[b];
        c.n_exp += mx[b];
      }
    } else {
      for (int fld = 1; fld < 16; ++fld) {
        if (nv[fld] == 0) continue;
        c.hist[fld - 7 + 127] += nv[fld];
        c.n_exp += nv[fld];
      }
    }
  }
}

inline void bs_vhist_fold(const bs_setup& s, const bs_vsetup& vs, bs_vhist& h, bs_local& l) {
  if (!h.used) return;
  // the MX bins [lo, hi]: the window and the bins counted outside it
  std::uint64_t mx[256 * 4], nv[16] = {};
  int lo = h.mx_lo, hi = h.mx_hi;
  if (h.w0 >= 0) {
    lo = h.w0 < lo ? h.w0 : lo;
    hi = h.w0 + 7 > hi ? h.w0 + 7 : hi;
  }
  for (int b = lo; b <= hi; ++b) mx[b] = 0;
  for (int b = h.mx_lo; b <= h.mx_hi; ++b)
    for (int cp = 0; cp < 8; ++cp) mx[b] += h.mx[cp][b];
  if (h.w0 >= 0) {
    for (int j = 0; j < 8; ++j) {
      alignas(32) std::uint32_t lanes[8];
      std::memcpy(lanes, &h.acc[j], sizeof lanes);
      for (int t = 0; t < 8; ++t) mx[h.w0 + j] += lanes[t];
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
  const std::uint64_t fin = f32_to_f64_bits(h.fin32);
  if (fin > l.finite_amax) l.finite_amax = fin;
  h.fin32 = 0;
}

/// Compare of signed lanes (32-bit for the f32 domain, 16-bit for bf16): -1 where a > b.
template <class Src>
NANSCOPE_IMPL_TARGET_AVX2 inline __m256i bs_gt(__m256i a, __m256i b) {
  if constexpr (Src::wide) return _mm256_cmpgt_epi32(a, b);
  else return _mm256_cmpgt_epi16(a, b);
}

/// The number of set lanes in V compare results (lanes of -1 / 0) of one block or NVFP4 half: packed to bytes with
/// signed saturation (-1 stays -1; the order of the bytes does not matter to a count), one movemask, one popcount.
template <class Src, int V>
NANSCOPE_IMPL_TARGET_AVX2 inline unsigned bs_popc(const __m256i* m) {
  if constexpr (Src::wide && V == 4) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(m[0], m[1]), _mm256_packs_epi32(m[2], m[3]));
    return static_cast<unsigned>(__builtin_popcount(static_cast<unsigned>(_mm256_movemask_epi8(p))));
  } else if constexpr (Src::wide && V == 2) {  // 16-bit lanes: each counted twice
    const __m256i p = _mm256_packs_epi32(m[0], m[1]);
    return static_cast<unsigned>(__builtin_popcount(static_cast<unsigned>(_mm256_movemask_epi8(p)))) / 2u;
  } else if constexpr (!Src::wide && V == 2) {
    const __m256i p = _mm256_packs_epi16(m[0], m[1]);
    return static_cast<unsigned>(__builtin_popcount(static_cast<unsigned>(_mm256_movemask_epi8(p))));
  } else {  // bf16, one vector: 16-bit lanes, each counted twice
    static_assert(!Src::wide && V == 1, "block of 32 or 16 elements");
    return static_cast<unsigned>(__builtin_popcount(static_cast<unsigned>(_mm256_movemask_epi8(m[0])))) / 2u;
  }
}

/// The element counts of one block (or NVFP4 half: V vectors at q) against its broadcast thresholds in the source's
/// compare domain: flushed = #{b < tf}, below = #{b < ts} (flushed or subnormal), clipped = #{|x| > tc} (Clip), where
/// b = |x| + K keeps zeros out of the "below" counts (K maps 0 to the largest signed value, 1.. to the smallest).
/// No branches: a block without small elements or without a clipped one simply counts 0 there.
template <class Src, int V, bool Clip>
NANSCOPE_IMPL_TARGET_AVX2 inline void bs_block_counts(const unsigned char* q, __m256i tf, __m256i ts, __m256i tc, unsigned& fl,
                                                      unsigned& below, unsigned& cl) {
  __m256i a[V], m[V], n[V], c[V];
  NANSCOPE_IMPL_UNROLL(4) for (int v = 0; v < V; ++v) {
    a[v] = Src::abs(q, v);
    const __m256i b = Src::wide ? _mm256_add_epi32(a[v], _mm256_set1_epi32(0x7FFFFFFF))
                                : _mm256_add_epi16(a[v], _mm256_set1_epi16(0x7FFF));
    m[v] = bs_gt<Src>(tf, b);
    n[v] = bs_gt<Src>(ts, b);
    if constexpr (Clip) c[v] = bs_gt<Src>(a[v], tc);
  }
  fl = bs_popc<Src, V>(m);
  below = bs_popc<Src, V>(n);
  if constexpr (Clip) cl = bs_popc<Src, V>(c);
  else cl = 0;
  (void)tc;
}

/// Threshold vectors (lane = block, f32 patterns) in the source's compare domain, ready for a per-block broadcast by
/// one vpermd: f32 as they are; bf16: floor (>> 16) or ceil (+ 0xFFFF, >> 16) of the pattern, plus `add` (16-bit
/// wrap-around), in both 16-bit halves of the lane.
template <class Src, bool Ceil>
NANSCOPE_IMPL_TARGET_AVX2 inline __m256i bs_dom(__m256i t, std::int32_t add) {
  if constexpr (Src::wide) {
    return _mm256_add_epi32(t, _mm256_set1_epi32(add));
  } else {
    if constexpr (Ceil) t = _mm256_add_epi32(t, _mm256_set1_epi32(0xFFFF));
    const __m256i h = _mm256_and_si256(_mm256_add_epi32(_mm256_srli_epi32(t, 16), _mm256_set1_epi32(add)),
                                       _mm256_set1_epi32(0xFFFF));
    return _mm256_or_si256(h, _mm256_slli_epi32(h, 16));
  }
}

/// A block this path counted whose loss may make it the worst one, or whose record is kept (cold: a division).
inline void bs_note_block(const bs_setup& s, const bs_format& f, bs_counts& c, std::uint64_t flat, int B, unsigned cl,
                          unsigned fl, unsigned sub, std::uint32_t amax32, std::uint8_t scale) {
  const std::uint64_t row = flat / s.L, col = flat % s.L;
  const std::uint64_t idx = s.out_index(row, col / static_cast<std::uint64_t>(B), B);
  const unsigned loss = cl + fl;
  if (loss != 0 && (loss > c.worst_loss || (loss == c.worst_loss && idx < c.worst_index))) {
    c.worst_loss = loss;
    c.worst_index = idx;
    c.worst_row = row;
    c.worst_col = col;
    c.worst_clipped = cl;
    c.worst_flushed = fl;
    c.worst_amax = f32_to_f64_bits(amax32);
    c.worst_scale = scale;
    c.worst_len = B;
  }
  if (f.out != nullptr) {
    block_record& r = f.out[idx];
    r.scale = scale;
    r.clipped = static_cast<std::uint8_t>(cl);
    r.flushed = static_cast<std::uint8_t>(fl);
    r.subnormal = static_cast<std::uint8_t>(sub);
  }
}

/// Zero blocks (every |x| = 0) of one format: counted, recorded.
inline void bs_zero_blocks(const bs_setup& s, const bs_format& f, bs_counts& c, unsigned zero, int B, std::uint64_t flat0) {
  if (zero == 0) return;
  const unsigned nz = static_cast<unsigned>(__builtin_popcount(zero));
  c.blocks += nz;
  c.elements += static_cast<std::uint64_t>(nz) * static_cast<std::uint64_t>(B);
  c.zero_blocks += nz;
  if (f.out == nullptr) return;
  for (unsigned m = zero; m != 0; m &= m - 1u) {
    const std::uint64_t flat = flat0 + static_cast<std::uint64_t>(__builtin_ctz(m)) * static_cast<std::uint64_t>(B);
    f.out[s.out_index(flat / s.L, (flat % s.L) / static_cast<std::uint64_t>(B), B)] = block_record{};
  }
}

/// Counts and accounts the blocks `todo` of a group (8 lanes: blocks of B elements, block k at q + k * bytes) for one
/// format, from its threshold vectors in the compare domain. Loss-free blocks outside todo add nothing.
template <class Src, int V, bool Clip>
NANSCOPE_IMPL_TARGET_AVX2 inline void bs_count_group(const bs_setup& s, const bs_format& f, bs_counts& c, const unsigned char* q,
                                                     std::size_t bytes, unsigned todo, __m256i tf, __m256i ts, __m256i tc,
                                                     __m256i scale, __m256i amax32, int B, std::uint64_t flat0) {
  unsigned fl_sum = 0, below_sum = 0, cl_sum = 0, lossy = 0;
  alignas(32) std::int32_t sc[8], am[8];
  bool stored = false;
  while (todo != 0) {
    const int k = __builtin_ctz(todo);
    todo &= todo - 1u;
    const __m256i idx = _mm256_set1_epi32(k);
    unsigned fl, below, cl;
    bs_block_counts<Src, V, Clip>(q + static_cast<std::size_t>(k) * bytes, _mm256_permutevar8x32_epi32(tf, idx),
                                  _mm256_permutevar8x32_epi32(ts, idx), _mm256_permutevar8x32_epi32(tc, idx), fl, below, cl);
    fl_sum += fl;
    below_sum += below;
    cl_sum += cl;
    const unsigned loss = fl + cl;
    lossy += loss != 0 ? 1u : 0u;
    if ((loss != 0 && loss >= c.worst_loss) || f.out != nullptr) {
      if (!stored) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(sc), scale);
        _mm256_store_si256(reinterpret_cast<__m256i*>(am), amax32);
        stored = true;
      }
      bs_note_block(s, f, c, flat0 + static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(B), B, cl, fl, below - fl,
                    static_cast<std::uint32_t>(am[k]), static_cast<std::uint8_t>(sc[k]));
    }
  }
  c.flushed += fl_sum;
  c.subnormal += below_sum - fl_sum;
  c.clipped += cl_sum;
  c.lossy_blocks += lossy;
}

/// The largest lane (signed 32-bit) of v.
NANSCOPE_IMPL_TARGET_AVX2 inline std::int32_t bs_hmax(__m256i m) {
  m = _mm256_max_epi32(m, _mm256_permute2x128_si256(m, m, 0x01));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0x4E));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0xB1));
  return _mm256_cvtsi256_si32(m);
}

/// The portable code for the blocks `which` (lanes of B elements at q + k * B elements) of one format.
inline void bs_portable_lanes(const bs_setup& s, const bs_format& f, bs_counts& c, const unsigned char* q, unsigned which,
                              int B, std::uint64_t flat0) {
  const std::size_t es = size_of(s.type);
  while (which != 0) {
    const int k = __builtin_ctz(which);
    which &= which - 1u;
    std::uint64_t ab[32];
    const unsigned char* bp = q + static_cast<std::size_t>(k) * static_cast<std::size_t>(B) * es;
    for (int e = 0; e < B; ++e) ab[e] = bs_abs_bits(bp, s.type, static_cast<std::size_t>(e));
    const std::uint64_t flat = flat0 + static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(B);
    const std::uint64_t row = flat / s.L, col = flat % s.L;
    bs_eval_block(s, f, c, ab, B, s.out_index(row, col / static_cast<std::uint64_t>(B), B), row, col);
  }
}

/// 16-bit values (<= 0x7FFF) to the larger of each 32-bit lane's two.
NANSCOPE_IMPL_TARGET_AVX2 inline __m256i bs_fold16(__m256i m) {
  return _mm256_max_epi32(_mm256_and_si256(m, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(m, 16));
}

/// NVFP4 thresholds of 8 halves from a per-mantissa table: t[j] plus the exponent shift sh23.
NANSCOPE_IMPL_TARGET_AVX2 inline __m256i bs_table(const std::int32_t* t, __m256i j, __m256i sh23) {
  return _mm256_add_epi32(_mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(t)), j), sh23);
}

/// Pass 1 over a group's 8 unit blocks: per block a vector whose lanes' max is the block's max |x| (Nv: per half
/// too), and (Min) one whose lanes' min is the smallest b = |x| + K; lanes of 32 bits (bf16: the larger of a lane's
/// two 16-bit values, the smaller b sign-extended).
template <class Src, bool Nv, bool Min>
NANSCOPE_IMPL_TARGET_AVX2 inline void bs_pass1(const unsigned char* q, __m256i* mx_half, __m256i* mx_blk, __m256i* mn_blk) {
  constexpr int VB = 32 / Src::lanes;
  constexpr std::size_t UB = 32 * Src::es;
  NANSCOPE_IMPL_UNROLL(8) for (int k = 0; k < 8; ++k) {
    const unsigned char* bq = q + static_cast<std::size_t>(k) * UB;
    __m256i x[VB];
    NANSCOPE_IMPL_UNROLL(4) for (int v = 0; v < VB; ++v) x[v] = Src::abs(bq, v);
    if constexpr (Src::wide) {
      const __m256i h0 = _mm256_max_epi32(x[0], x[1]), h1 = _mm256_max_epi32(x[2], x[3]);
      if constexpr (Nv) {
        mx_half[2 * k] = h0;
        mx_half[2 * k + 1] = h1;
      }
      mx_blk[k] = _mm256_max_epi32(h0, h1);
      if constexpr (Min) {
        const __m256i kk = _mm256_set1_epi32(0x7FFFFFFF);
        mn_blk[k] = _mm256_min_epi32(_mm256_min_epi32(_mm256_add_epi32(x[0], kk), _mm256_add_epi32(x[1], kk)),
                                     _mm256_min_epi32(_mm256_add_epi32(x[2], kk), _mm256_add_epi32(x[3], kk)));
      }
    } else {
      if constexpr (Nv) {
        mx_half[2 * k] = bs_fold16(x[0]);
        mx_half[2 * k + 1] = bs_fold16(x[1]);
        mx_blk[k] = _mm256_max_epi32(mx_half[2 * k], mx_half[2 * k + 1]);
      } else {
        mx_blk[k] = bs_fold16(_mm256_max_epi16(x[0], x[1]));
      }
      if constexpr (Min) {
        const __m256i kk = _mm256_set1_epi16(0x7FFF);
        const __m256i mn = _mm256_min_epi16(_mm256_add_epi16(x[0], kk), _mm256_add_epi16(x[1], kk));
        mn_blk[k] = _mm256_min_epi32(_mm256_srai_epi32(_mm256_slli_epi32(mn, 16), 16), _mm256_srai_epi32(mn, 16));
      }
    }
  }
}

/// One group of 8 unit blocks of 32 at q (flat index flat0 of the first element; nunits < 8: only the first nunits
/// are real, the rest of the buffer is zero padding).
template <class Src>
NANSCOPE_IMPL_TARGET_AVX2 inline void bs_group(const bs_setup& s, const bs_vsetup& vs, bs_vhist& h, bs_local& l,
                                               const unsigned char* q, int nunits, std::uint64_t flat0) {
  constexpr int VB = 32 / Src::lanes;       // vectors per unit block
  constexpr std::size_t UB = 32 * Src::es;  // bytes per unit block
  constexpr std::int32_t K = Src::wide ? 0x7FFFFFFF : 0x7FFF;
  constexpr std::int32_t K1 = static_cast<std::int32_t>(static_cast<std::uint32_t>(K) + 1u);  // (f32: INT32_MIN)
  // pass 1: per unit block max |x| (and per NVFP4 half), the smallest b = |x| + K when an MXFP8 format wants it
  __m256i mx_half[16], mx_blk[8], mn_blk[8];
  if (vs.any_nv) {
    if (vs.need_min) bs_pass1<Src, true, true>(q, mx_half, mx_blk, mn_blk);
    else bs_pass1<Src, true, false>(q, mx_half, mx_blk, mn_blk);
  } else {
    if (vs.need_min) bs_pass1<Src, false, true>(q, mx_half, mx_blk, mn_blk);
    else bs_pass1<Src, false, false>(q, mx_half, mx_blk, mn_blk);
  }
  const __m256i amax = bs_hext8<false>(mx_blk);
  const __m256i bmin = vs.need_min ? bs_hext8<true>(mn_blk) : _mm256_setzero_si256();
  const __m256i amax32 = Src::wide ? amax : _mm256_slli_epi32(amax, 16);  // f32 patterns
  const unsigned real = (1u << nunits) - 1u;
  // fast blocks: max |x| in [2^-63, inf): their scales and thresholds are exact in the f32 exponent field
  const __m256i fast_v = _mm256_and_si256(_mm256_cmpgt_epi32(amax32, _mm256_set1_epi32(0x1FFFFFFF)),
                                          _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F800000), amax32));
  const unsigned fast = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(fast_v))) & real;
  const unsigned zero =
      static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(amax32, _mm256_setzero_si256())))) & real;
  const unsigned special = real & ~fast & ~zero;
  {  // the largest finite |x|: the fast blocks' maxima (folded at the end), the special blocks' elements
    const auto m32 = static_cast<std::uint32_t>(bs_hmax(_mm256_and_si256(amax32, fast_v)));
    h.fin32 = m32 > h.fin32 ? m32 : h.fin32;
    h.used = true;
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
  // the shared MX histogram: (exponent field, mantissa class) of the fast blocks, a copy per lane
  if (vs.nmx > 0 && fast != 0) {
    __m256i cls = _mm256_setzero_si256();
    const __m256i mant = _mm256_and_si256(amax32, _mm256_set1_epi32(0x7FFFFF));
    for (int t = 0; t < vs.ncls; ++t) cls = _mm256_sub_epi32(cls, _mm256_cmpgt_epi32(mant, _mm256_set1_epi32(vs.cls[t] - 1)));
    const __m256i bin = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(amax32, 23), 2), cls);
    alignas(32) std::int32_t bins[8];
    if (h.w0 < 0) {  // the window around the first block's bin
      _mm256_store_si256(reinterpret_cast<__m256i*>(bins), bin);
      const int b0 = bins[__builtin_ctz(fast)] - 3;
      h.w0 = b0 < 0 ? 0 : b0 > 256 * 4 - 8 ? 256 * 4 - 8 : b0;
      for (int j = 0; j < 8; ++j) h.acc[j] = _mm256_setzero_si256();
    }
    // d = bin - w0, -1 in lanes that are not fast blocks; lanes with d in [0, 8) count in the window
    const __m256i d = _mm256_or_si256(_mm256_sub_epi32(bin, _mm256_set1_epi32(h.w0)),
                                      _mm256_andnot_si256(fast_v, _mm256_set1_epi32(-1)));
    const __m256i inwin = _mm256_cmpeq_epi32(_mm256_min_epu32(d, _mm256_set1_epi32(7)), d);
    NANSCOPE_IMPL_UNROLL(8) for (int j = 0; j < 8; ++j)
      h.acc[j] = _mm256_sub_epi32(h.acc[j], _mm256_cmpeq_epi32(d, _mm256_set1_epi32(j)));
    const unsigned out = fast & ~static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(inwin)));
    if (out != 0) {
      _mm256_store_si256(reinterpret_cast<__m256i*>(bins), bin);
      for (unsigned m = out; m != 0; m &= m - 1u) {
        const int k = __builtin_ctz(m);
        const int b = bins[k];
        if (b < h.mx_lo || b > h.mx_hi) {  // widen the range of live bins, zeroing the new ones
          const int lo = b < h.mx_lo ? b : h.mx_lo, hi = b > h.mx_hi ? b : h.mx_hi;
          for (int cp = 0; cp < 8; ++cp)
            for (int t = lo; t <= hi; ++t)
              if (t < h.mx_lo || t > h.mx_hi) h.mx[cp][t] = 0;
          h.mx_lo = lo;
          h.mx_hi = hi;
        }
        ++h.mx[k][b];
      }
    }
    h.used = true;
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
    c.elements += 32u * nfast;  // (their exponents: the shared histogram, folded at the segment's end)
    // D = X << 23, X = exponent of max |x| - emax (+ 1 where the rule says so)
    const __m256i mant = _mm256_and_si256(amax32, _mm256_set1_epi32(0x7FFFFF));
    const __m256i up = _mm256_cmpgt_epi32(mant, _mm256_set1_epi32(vf.delta_mant - 1));
    const __m256i D = _mm256_sub_epi32(
        _mm256_sub_epi32(_mm256_and_si256(amax32, _mm256_set1_epi32(0x7F800000)), _mm256_set1_epi32(vf.bias)),
        _mm256_slli_epi32(up, 23));
    const __m256i tc32 = _mm256_add_epi32(_mm256_set1_epi32(vf.c_clip), D);
    const unsigned clip =
        vf.can_clip ? static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(amax32, tc32)))) & fast
                    : 0u;
    const __m256i ts = bs_dom<Src, true>(_mm256_add_epi32(_mm256_set1_epi32(vf.c_sub), D), K);
    unsigned low = fast;
    if (!vf.precise) {  // MXFP8: only blocks whose smallest non-zero |x| is below T_sub have small elements
      const __m256i ts_c = Src::wide ? ts : _mm256_srai_epi32(_mm256_slli_epi32(ts, 16), 16);
      low = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(ts_c, bmin)))) & fast;
    }
    const unsigned todo = f.out != nullptr ? fast : (low | clip);
    if (todo == 0) continue;
    const __m256i tf = bs_dom<Src, false>(_mm256_add_epi32(_mm256_set1_epi32(vf.c_flush), D), K1);
    const __m256i tc = bs_dom<Src, false>(tc32, 0);
    const __m256i scale = _mm256_add_epi32(_mm256_srai_epi32(D, 23), _mm256_set1_epi32(127));
    if (clip != 0) bs_count_group<Src, VB, true>(s, f, c, q, UB, todo, tf, ts, tc, scale, amax32, 32, flat0);
    else bs_count_group<Src, VB, false>(s, f, c, q, UB, todo, tf, ts, tc, scale, amax32, 32, flat0);
  }

  // NVFP4: 16 halves, two parts of 8
  if (!vs.any_nv) return;
  for (int i = 0; i < vs.n; ++i) {
    const bs_vfmt& vf = vs.f[i];
    if (vf.mx) continue;
    const bs_format& f = s.f[vf.k];
    bs_counts& c = l.c[static_cast<int>(f.id)];
    for (int part = 0; part < 2; ++part) {
      const unsigned realh = part == 0 ? (nunits >= 4 ? 0xFFu : (1u << (2 * nunits)) - 1u)
                                       : (nunits <= 4 ? 0u : (1u << (2 * (nunits - 4))) - 1u);
      if (realh == 0) continue;
      const unsigned char* qp = q + static_cast<std::size_t>(part) * 128 * Src::es;
      const std::uint64_t hflat0 = flat0 + static_cast<std::uint64_t>(part) * 128;
      const __m256i an = bs_hext8<false>(mx_half + 8 * part);
      const __m256i a32 = Src::wide ? an : _mm256_slli_epi32(an, 16);
      const unsigned zh =
          static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(a32, _mm256_setzero_si256())))) & realh;
      bs_zero_blocks(s, f, c, zh, 16, hflat0);
      if (vf.off) {
        bs_portable_lanes(s, f, c, qp, realh & ~zh, 16, hflat0);
        continue;
      }
      const __m256i fastv = _mm256_and_si256(_mm256_cmpgt_epi32(a32, _mm256_set1_epi32(0x1FFFFFFF)),
                                             _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F800000), a32));
      __m256i ok, es;
      const __m256i code = bs_nv_scale(vf, a32, ok, es);
      const unsigned fh = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_and_si256(fastv, ok)))) & realh;
      const unsigned sh = realh & ~fh & ~zh;
      if (sh != 0) bs_portable_lanes(s, f, c, qp, sh, 16, hflat0);
      if (fh == 0) continue;
      const unsigned nfast = static_cast<unsigned>(__builtin_popcount(fh));
      c.blocks += nfast;
      c.elements += 16u * nfast;
      alignas(32) std::int32_t ex[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(ex), _mm256_srli_epi32(code, 3));
      for (unsigned m = fh; m != 0; m &= m - 1u) {
        const int k = __builtin_ctz(m);
        ++h.nv[k][ex[k]];
      }
      h.used = true;
      // thresholds: the tables by E4M3 mantissa j, plus (e_s + kt) << 23
      const __m256i j = _mm256_and_si256(code, _mm256_set1_epi32(7));
      const __m256i sh23 = _mm256_slli_epi32(_mm256_add_epi32(es, _mm256_set1_epi32(vf.kt)), 23);
      const __m256i tc32 = bs_table(vf.t_clip, j, sh23);
      const unsigned clip = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(a32, tc32)))) & fh;
      const __m256i tf = bs_dom<Src, false>(bs_table(vf.t_flush, j, sh23), K1);
      const __m256i ts = bs_dom<Src, true>(bs_table(vf.t_sub, j, sh23), K);
      const __m256i tc = bs_dom<Src, false>(tc32, 0);
      if (clip != 0) bs_count_group<Src, VB / 2, true>(s, f, c, qp, 16 * Src::es, fh, tf, ts, tc, code, a32, 16, hflat0);
      else bs_count_group<Src, VB / 2, false>(s, f, c, qp, 16 * Src::es, fh, tf, ts, tc, code, a32, 16, hflat0);
    }
  }
}

/// Unit blocks the vector path has taken since the program started (tests: the path really runs).
inline std::atomic<std::uint64_t>& bs_vector_units() {
  static std::atomic<std::uint64_t> n{0};
  return n;
}

/// The vector path over a run of whole unit blocks (bs_units_fn).
template <class Src>
NANSCOPE_IMPL_TARGET_AVX2 inline bool bs_units_avx2(const bs_setup& s, bs_local& l, const unsigned char* p,
                                                    std::uint64_t units, std::uint64_t row, std::uint64_t col) {
  if (l.vsetup == nullptr) {
    l.vsetup = new bs_vsetup(bs_make_vsetup(s));
    auto* vh = new bs_vhist;
    std::memset(vh->nv, 0, sizeof vh->nv);
    l.vhist = vh;
    l.vkind = 1;
  } else if (l.vkind != 1) {
    return false;  // (a segment the AVX-512 path started: never happens, one instruction set per pass)
  }
  const bs_vsetup& vs = *static_cast<const bs_vsetup*>(l.vsetup);
  bs_vhist& h = *static_cast<bs_vhist*>(l.vhist);
  bs_vector_units().fetch_add(units, std::memory_order_relaxed);
  std::uint64_t flat = row * s.L + col;
  std::uint64_t u = 0;
  for (; u + 8 <= units; u += 8) {
    bs_group<Src>(s, vs, h, l, p + static_cast<std::size_t>(u) * 32 * Src::es, 8, flat);
    flat += 256;
  }
  if (u < units) {  // the last few: padded with zeros (their lanes are not accounted)
    alignas(32) unsigned char buf[256 * 4] = {};
    const std::size_t bytes = static_cast<std::size_t>(units - u) * 32 * Src::es;
    std::memcpy(buf, p + static_cast<std::size_t>(u) * 32 * Src::es, bytes);
    bs_group<Src>(s, vs, h, l, buf, static_cast<int>(units - u), flat);
  }
  return true;
}

inline bool bs_units_avx2_f32(const bs_setup& s, bs_local& l, const unsigned char* p, std::uint64_t units, std::uint64_t row,
                              std::uint64_t col) {
  return bs_units_avx2<bs_src_f32>(s, l, p, units, row, col);
}
inline bool bs_units_avx2_f16(const bs_setup& s, bs_local& l, const unsigned char* p, std::uint64_t units, std::uint64_t row,
                              std::uint64_t col) {
  return bs_units_avx2<bs_src_f16>(s, l, p, units, row, col);
}
inline bool bs_units_avx2_bf16(const bs_setup& s, bs_local& l, const unsigned char* p, std::uint64_t units, std::uint64_t row,
                               std::uint64_t col) {
  return bs_units_avx2<bs_src_bf16>(s, l, p, units, row, col);
}

/// The vector path for a setup (null: the portable loop only): f32, f16, bf16 on CPUs with AVX2.
inline bs_units_fn bs_units_simd_for(const bs_setup& s) {
  static const bool avx2 = cpu_has_avx2();  // (cpuid: slow, in a virtual machine very slow)
  if (!avx2) return nullptr;
  switch (s.type) {
    case dtype::f32: return &bs_units_avx2_f32;
    case dtype::f16: return &bs_units_avx2_f16;
    case dtype::bf16: return &bs_units_avx2_bf16;
    default: return nullptr;
  }
}

#endif  // NANSCOPE_HAS_X86_SIMD()

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_BLOCK_SCALED_AVX2_HPP
