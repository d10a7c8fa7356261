// nanscope — detail/kernel_avx2_zero.hpp: the AVX2 f32-compute kernel's run of zero blocks, for data with many
// zeros (ReLU outputs, masks, padding, sparse tensors). Internal: included at the end of kernel_x86.hpp.
#ifndef NANSCOPE_DETAIL_KERNEL_AVX2_ZERO_HPP
#define NANSCOPE_DETAIL_KERNEL_AVX2_ZERO_HPP

#if !defined(NANSCOPE_DETAIL_KERNEL_X86_HPP)
#error "nanscope/detail/kernel_avx2_zero.hpp is internal: include <nanscope/check.hpp>"
#endif

#include "kernel_common.hpp"

#include <cstdint>

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

// A zero is not tame (it must be counted, and kept out of the smallest non-zero |x|), so avx2_f32_run's plain
// optimistic block fails on it and the block goes through the per-lane path: with zeros in most blocks (half
// of a ReLU output is zeros) about 6x the plain block's time. A zero block assumes every lane is zero or tame:
// it counts the zeros in lanes, takes the smallest |x| over the non-zero lanes only (a zero lane becomes all
// ones, out of an unsigned min), and sums the zeros with the rest (0 - k is finite). f32 blocks take min and
// max over integer keys (key32: -0 below +0) and leave -0 out of the negatives. 16-bit blocks keep the plain
// block's raw-pattern extrema, with the zeros out of the two mins (0xFFFF there: a NaN pattern, which no tame
// block leaves; so the minimum |x| those give is over non-zero values) and in the two maxes (a +0 can become the
// signed max, used only when a non-negative value exists; a -0 the unsigned max, used only as the most negative
// value: both true values), count -0 apart, and at the run's end take each sign of zero seen as an extremum
// and -0 out of the negatives (zeros256). A block that is
// not all zeros and tame goes through the per-lane path, as in avx2_f32_run.
//
// avx2_f32_kernel runs avx2_f32_run until the per-lane path has met zeros densely enough (kernel_x86.hpp,
// avx2_zero_dense and avx2_zero_near: a zero block costs about 1.6 plain blocks, a plain block that fails on
// a zero and runs again per lane about 4, about 6 with zeros in every vector), then this run from the next block until avx2_zero_clear blocks in
// a row hold no zero, then avx2_f32_run again. Each run keeps its own registers (inlined into one loop, the
// zero block's took the plain block's accumulators' registers: +5-20 % on data without zeros) and adds into
// the chunk's output. Which blocks run which way depends only on the chunk's data, so results do not depend
// on the thread count.

/// The zeros of a run's zero blocks, and what they add at its end.
struct zeros256 {
  std::uint64_t zeros = 0;   // +0 and -0
  std::uint64_t nzeros = 0;  // -0 (16-bit sources)

  /// The zeros to `zero`. 16-bit sources (Half16) also take -0 out of the negatives and each sign of zero seen
  /// as an extremum (stats); the f32 zero blocks do both in their lanes.
  template <level L, bool Half16>
  void fold(std::uint64_t& zero, std::uint64_t& neg, chunk_out& o) const {
    zero += zeros;
    if constexpr (Half16) {
      neg -= nzeros;
      if constexpr (L == level::stats) {
        if (zeros > nzeros) {
          o.take_min(key64(double_to_bits(0.0)));
          o.take_max(key64(double_to_bits(0.0)));
        }
        if (nzeros != 0) {
          o.take_min(key64(double_to_bits(-0.0)));
          o.take_max(key64(double_to_bits(-0.0)));
        }
      }
    }
  }
};

/// The zeros in a zero block's lane counts (each below 256, so in the lanes' low bytes: 32-bit or 16-bit lanes).
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) inline unsigned zero_count256(__m256i zc) {
  const __m256i t = _mm256_sad_epu8(zc, _mm256_setzero_si256());
  const __m128i u = _mm_add_epi64(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
  return static_cast<unsigned>(_mm_cvtsi128_si32(_mm_add_epi64(u, _mm_unpackhi_epi64(u, u))));
}

/// What a zero block leaves for the run and the histogram hook: bmin, the unsigned min of the non-zero |x|
/// bits (all ones where a lane held only zeros); bmax, the max |x| bits; zc, the zeros per lane (32-bit lanes;
/// 16-bit sources: 16-bit lanes, and bmin / bmax only when run with Local); nz, the zeros (after a commit).
struct zero_block_out {
  __m256i bmin, bmax, zc;
  unsigned nz = 0;
};

/// A zero block of 128 f32 (or decoded) elements at p, stepping the hash hook hs (the block's first read).
/// Commits to s and z and returns true when every lane is zero or tame; otherwise s and z are untouched.
template <level L, class Load, class H>
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) inline bool zero_block256_f32(state256_f32& s, zeros256& z,
                                                                                        const unsigned char* p, H& hs,
                                                                                        zero_block_out& out) {
  constexpr std::size_t es = sizeof(typename Load::src);
  const __m256i absm = s.absm, zero = _mm256_setzero_si256();
  const __m256 k32 = s.k32;
  __m256i bmin = _mm256_set1_epi32(-1), bmax = zero, nb = zero, zc = zero;
  [[maybe_unused]] __m256i kmn = _mm256_set1_epi32(INT32_MAX), kmx = _mm256_set1_epi32(INT32_MIN);
  [[maybe_unused]] __m256 f1a = _mm256_setzero_ps(), f2a = f1a, f1b = f1a, f2b = f1a;
  NANSCOPE_IMPL_UNROLL(1) for (std::size_t j = 0; j < 128; j += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(p + j * es) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
    const __m256 x0 = Load::load(p + j * es);
    const __m256 x1 = Load::load(p + (j + 8) * es);
    if constexpr (H::enabled) {
      hs.step(x0);
      hs.step(x1);
    }
    const __m256i i0 = _mm256_castps_si256(x0), i1 = _mm256_castps_si256(x1);
    const __m256i a0 = _mm256_and_si256(i0, absm), a1 = _mm256_and_si256(i1, absm);
    const __m256i z0 = _mm256_cmpeq_epi32(a0, zero), z1 = _mm256_cmpeq_epi32(a1, zero);
    zc = _mm256_sub_epi32(_mm256_sub_epi32(zc, z0), z1);
    bmin = _mm256_min_epu32(bmin, _mm256_min_epu32(_mm256_or_si256(a0, z0), _mm256_or_si256(a1, z1)));
    bmax = _mm256_max_epi32(bmax, _mm256_max_epi32(a0, a1));
    const __m256i s0 = _mm256_srai_epi32(i0, 31), s1 = _mm256_srai_epi32(i1, 31);
    nb = _mm256_sub_epi32(_mm256_sub_epi32(nb, _mm256_andnot_si256(z0, s0)), _mm256_andnot_si256(z1, s1));
    if constexpr (L == level::stats) {
      const __m256i k0 = _mm256_xor_si256(i0, _mm256_srli_epi32(s0, 1));
      const __m256i k1 = _mm256_xor_si256(i1, _mm256_srli_epi32(s1, 1));
      kmn = _mm256_min_epi32(kmn, _mm256_min_epi32(k0, k1));
      kmx = _mm256_max_epi32(kmx, _mm256_max_epi32(k0, k1));
      const __m256 d0 = _mm256_sub_ps(x0, k32), d1 = _mm256_sub_ps(x1, k32);
      f1a = _mm256_add_ps(f1a, d0);
      f2a = _mm256_fmadd_ps(d0, d0, f2a);
      f1b = _mm256_add_ps(f1b, d1);
      f2b = _mm256_fmadd_ps(d1, d1, f2b);
    }
  }
  out.bmin = bmin;
  out.bmax = bmax;
  out.zc = zc;
  // every non-zero |x| in [lo, lo + span]: bmin >= lo as unsigned (a zeros-only lane's all ones pass), bmax <= hi
  const __m256i hi = _mm256_add_epi32(s.lo, s.span);
  const __m256i good = _mm256_andnot_si256(_mm256_cmpgt_epi32(bmax, hi),
                                           _mm256_cmpeq_epi32(_mm256_max_epu32(bmin, s.lo), bmin));
  if (_mm256_movemask_ps(_mm256_castsi256_ps(good)) != 0xFF) return false;
  out.nz = zero_count256(zc);
  z.zeros += out.nz;
  s.vneg = _mm256_add_epi32(s.vneg, nb);
  if constexpr (L == level::counts) s.kamax = _mm256_max_epi32(s.kamax, bmax);
  if constexpr (L == level::stats) {
    s.kamin = _mm256_min_epu32(s.kamin, bmin);
    s.kmin = _mm256_min_epi32(s.kmin, kmn);
    s.kmax = _mm256_max_epi32(s.kmax, kmx);
    widen_sums256(s, _mm256_add_ps(f1a, f1b), _mm256_add_ps(f2a, f2b));
  }
  return true;
}

/// A zero block of 128 raw f16 / bf16 elements at p; sx, sn, ux, un: the run's raw-pattern extrema (signed
/// max / min, unsigned max / min), zeros out of the mins. Local: the test reads the block's own min and max
/// |x| (counts level, where they are all there is, or for the histogram hook); otherwise, as the plain block
/// does, the run's raw extrema. Commits as zero_block256_f32 does.
template <level L, class Load, bool Local>
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) inline bool zero_block256_h16(
    state256_f32& s, zeros256& z, const unsigned char* p, const kernel_params& kp, __m256i& sx, __m256i& sn,
    __m256i& ux, __m256i& un, zero_block_out& out) {
  static_assert(Local || L == level::stats, "the counts level tests the block's own min and max");
  const __m256i m16 = _mm256_set1_epi16(0x7FFF), zero = _mm256_setzero_si256();
  const __m256i sgn = _mm256_set1_epi16(static_cast<short>(0x8000));
  const __m256 k32 = s.k32;
  [[maybe_unused]] __m256i bmin = _mm256_set1_epi16(-1), bmax = zero;
  __m256i neg16 = zero, zc = zero, znc = zero;
  [[maybe_unused]] __m256i bsx = sx, bsn = sn, bux = ux, bun = un;
  [[maybe_unused]] __m256 f1a = _mm256_setzero_ps(), f2a = f1a, f1b = f1a, f2b = f1a;
  NANSCOPE_IMPL_UNROLL(2) for (std::size_t j = 0; j < 128; j += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(p + j * 2) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
    const __m256i r = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + j * 2));
    const __m256i zn = _mm256_cmpeq_epi16(r, sgn);
    const __m256i zr = _mm256_or_si256(_mm256_cmpeq_epi16(r, zero), zn);
    zc = _mm256_sub_epi16(zc, zr);
    znc = _mm256_sub_epi16(znc, zn);
    neg16 = _mm256_add_epi16(neg16, _mm256_srli_epi16(r, 15));
    if constexpr (Local) {
      const __m256i a = _mm256_and_si256(r, m16);
      bmin = _mm256_min_epu16(bmin, _mm256_or_si256(a, zr));
      bmax = _mm256_max_epi16(bmax, a);
    }
    if constexpr (L == level::stats) {
      const __m256i rz = _mm256_or_si256(r, zr);
      bsx = _mm256_max_epi16(bsx, r);
      bsn = _mm256_min_epi16(bsn, rz);
      bux = _mm256_max_epu16(bux, r);
      bun = _mm256_min_epu16(bun, rz);
      const __m256 d0 = _mm256_sub_ps(Load::widen_lo(r), k32), d1 = _mm256_sub_ps(Load::widen_hi(r), k32);
      f1a = _mm256_add_ps(f1a, d0);
      f2a = _mm256_fmadd_ps(d0, d0, f2a);
      f1b = _mm256_add_ps(f1b, d1);
      f2b = _mm256_fmadd_ps(d1, d1, f2b);
    }
  }
  const __m256i lo = _mm256_set1_epi16(static_cast<short>(kp.tame_lo16));
  const __m256i hi = _mm256_set1_epi16(static_cast<short>(kp.tame_hi16));
  __m256i bad;
  if constexpr (Local) {
    out.bmin = bmin;
    out.bmax = bmax;
    const __m256i lo_ok = _mm256_cmpeq_epi16(_mm256_max_epu16(bmin, lo), bmin);  // unsigned: zeros-only lanes pass
    bad = _mm256_or_si256(_mm256_cmpgt_epi16(bmax, hi), _mm256_xor_si256(lo_ok, _mm256_set1_epi16(-1)));
  } else {  // the run's so far, zeros out of the mins (a lane with only zeros so far: 0xFFFF & m16)
    const __m256i tmin = _mm256_min_epi16(_mm256_and_si256(bun, m16), _mm256_and_si256(bsn, m16));
    const __m256i tmax = _mm256_max_epi16(_mm256_and_si256(bsx, m16), _mm256_and_si256(bux, m16));
    bad = _mm256_or_si256(_mm256_cmpgt_epi16(lo, tmin), _mm256_cmpgt_epi16(tmax, hi));
  }
  out.zc = zc;
  if (_mm256_testz_si256(bad, bad) == 0) return false;
  const __m256i one = _mm256_set1_epi16(1);
  out.nz = zero_count256(zc);
  z.zeros += out.nz;
  z.nzeros += zero_count256(znc);
  s.vneg = _mm256_add_epi32(s.vneg, _mm256_madd_epi16(neg16, one));  // -0 included: zeros256 takes it out
  if constexpr (L == level::counts) ux = _mm256_max_epi16(ux, bmax);  // the counts level's max |x|
  if constexpr (L == level::stats) {
    sx = bsx;
    sn = bsn;
    ux = bux;
    un = bun;
    widen_sums256(s, _mm256_add_ps(f1a, f1b), _mm256_add_ps(f2a, f2b));
  }
  return true;
}

/// The zero blocks of a chunk of n elements from begin (a multiple of 128; see the note above): returns the
/// start of the block after avx2_zero_clear in a row without a zero, or of the chunk's elements past its last
/// full block (avx2_f32_run takes those).
template <level L, class Load, class H, class G>
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((noinline)) std::size_t avx2_zero_run(const void* vp, std::size_t begin,
                                                                              std::size_t n, const kernel_params& kp,
                                                                              chunk_out& o, H* h, G* g) {
  static_assert(L >= level::counts, "zero blocks are optimistic blocks");
  constexpr std::size_t es = sizeof(typename Load::src);
  constexpr std::size_t block = 128;
  const auto* p = static_cast<const unsigned char*>(vp);
  state256_f32 s;
  init256_f32(s, kp);
  zeros256 zs;
  [[maybe_unused]] H hs;
  [[maybe_unused]] G gs;
  if constexpr (H::enabled) hs = *h;
  if constexpr (G::enabled) gs = *g;
  // 16-bit sources: the raw-pattern extrema (as in avx2_f32_run), zeros out of the mins
  __m256i smax16 = _mm256_set1_epi16(static_cast<short>(0x8000)), smin16 = _mm256_set1_epi16(0x7FFF),
          umax16 = _mm256_setzero_si256(), umin16 = _mm256_set1_epi16(-1);
  bool any16 = false;
  unsigned thin = 0;  // blocks in a row without a zero
  std::size_t i = begin;
  for (; i + block <= n; i += block) {
    const unsigned char* b = p + i * es;
    zero_block_out zb;
    bool ok;
    if constexpr (Load::half16) {
      ok = zero_block256_h16<L, Load, L == level::counts || G::enabled>(s, zs, b, kp, smax16, smin16, umax16, umin16,
                                                                        zb);
      any16 = any16 || ok;
    } else {
      ok = zero_block256_f32<L, Load>(s, zs, b, hs, zb);
    }
    std::uint64_t nz = zb.nz;
    if (!ok) {
      const std::uint64_t z0 = s.zero;
      for (std::size_t j = 0; j < block; j += 8) group256_f32<L>(s, Load::load(b + j * es), 0xFFu, i + j);
      flush256_f32<L>(s);
      nz = s.zero - z0;
    }
    if constexpr (G::enabled) {
      if constexpr (Load::half16) gs.end_block16_zero(b, zb.bmin, zb.bmax, zb.zc);
      else gs.end_block_zero(b, zb.bmin, zb.bmax, zb.zc);
    }
    thin = nz == 0 ? thin + 1 : 0;
    if (thin == avx2_zero_clear) {
      i += block;
      break;
    }
  }
  if constexpr (H::enabled) *h = hs;
  if constexpr (G::enabled) *g = gs;
  zs.fold<L, Load::half16>(s.zero, s.neg, o);
  fold256_f32<L, Load>(s, o, any16, smax16, smin16, umax16, umin16);
  return i;
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // NANSCOPE_HAS_X86_SIMD()

#endif  // NANSCOPE_DETAIL_KERNEL_AVX2_ZERO_HPP
