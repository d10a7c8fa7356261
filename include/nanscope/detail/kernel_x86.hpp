// nanscope — detail/kernel_x86.hpp: AVX2 and AVX-512 kernels, compiled with target attributes so that the
// user's binary stays baseline x86-64; check.hpp picks one at run time from CPU detection.
// Internal: include <nanscope/check.hpp> instead.
#ifndef NANSCOPE_DETAIL_KERNEL_X86_HPP
#define NANSCOPE_DETAIL_KERNEL_X86_HPP

#if !defined(NANSCOPE_CHECK_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/kernel_x86.hpp is internal: include <nanscope/check.hpp> or <nanscope/nanscope.hpp>"
#endif

#include "kernel_common.hpp"

#if NANSCOPE_HAS_X86_SIMD()
// GCC 12's AVX-512 intrinsic headers use deliberately uninitialised "undefined" vectors and warn about them
// at every inlining site (GCC bug 105593, fixed in GCC 13). The suppression is scoped to this header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define NANSCOPE_IMPL_POP_DIAGNOSTICS 1
#endif
#include <cpuid.h>
#include <immintrin.h>

#define NANSCOPE_IMPL_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c,popcnt,bmi,bmi2")))
// Software prefetch distance: with the core busy classifying, the hardware prefetcher alone left the fused
// pass at ~65% of a plain read on one core; 2 KiB ahead brought it to ~95% (measured, AVX-512, f32). On AVX2
// (Zen 3) no prefetch gave 0.64 of a read for f32 STATS against 0.84, and 1, 2, 4, 8 and 16 KiB were within the
// VM's noise of each other (benchmarks.md). Overridable (-DNANSCOPE_IMPL_PREFETCH_BYTES=...) for such runs.
#ifndef NANSCOPE_IMPL_PREFETCH_BYTES
#define NANSCOPE_IMPL_PREFETCH_BYTES 2048
#endif
#define NANSCOPE_IMPL_TARGET_AVX2 __attribute__((target("avx2,fma,f16c,popcnt,bmi,bmi2")))

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// The kernels' optional content-hash hook (hash_x86.hpp): the default does nothing. With a hook H, the main
/// loop hands each full vector's raw bits to a local H's step() while they are in registers, and stores that
/// H to *h at the end of the loop (the hashed prefix: the elements of the main loop's full blocks). The AVX2
/// f32 kernel's runs (avx2_f32_run, avx2_zero_run) each take the local H from *h and store it back.
struct kernel_no_hash {
  static constexpr bool enabled = false;
};

/// The f32-compute kernels' optional histogram hook (hist_fused_x86.hpp, hist_fused_avx2.hpp): the default does
/// nothing. With a hook G, the optimistic blocks (counts and stats levels) call a local G's end_block() with the
/// block's min / max of |x| after each block (AVX-512: 256 elements; AVX2: 128; AVX2 16-bit sources:
/// end_block16(), with the raw patterns' min / max; after an AVX2 zero block: end_block_zero() /
/// end_block16_zero(), with the non-zero |x| min, the max and the zeros per lane); AVX-512 also hands each full
/// vector's raw bits to its step<A>() (AVX2's hook reads the block again from L1: its registers and the
/// kernel's do not fit together). The local G is stored back at the end (AVX2: of each run).
struct kernel_no_hist {
  static constexpr bool enabled = false;
};

/// An 8-, 16- or 32-bit mask register's bits as an integer, moved through a general register. Why not a cast: GCC 12
/// may keep the zero-extended value of a cast mask in the mask register, spill it with a 16-bit store (kmovw) and
/// reload it with a 32-bit load, so the upper half comes from whatever was on the stack (found under -O1
/// -fsanitize=thread, whose calls force such spills: a block's clip count of 10 for 1). The asm makes the move
/// produce a full general-register value, and a general register spills whole. Every mask-to-integer conversion
/// of the AVX-512 kernels goes through these (always_inline: a call from code without AVX-512, e.g. an AVX2
/// kernel, fails to compile instead of running kmov on a CPU that lacks it).
NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline std::uint32_t mask_bits(__mmask8 m) {
  std::uint32_t r;
  __asm__("kmovb %1, %0" : "=r"(r) : "k"(m));
  return r;
}
NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline std::uint32_t mask_bits(__mmask16 m) {
  std::uint32_t r;
  __asm__("kmovw %1, %0" : "=r"(r) : "k"(m));
  return r;
}
NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline std::uint64_t mask_bits(__mmask32 m) {
  std::uint64_t r;
  __asm__("kmovd %1, %k0" : "=r"(r) : "k"(m));
  return r;
}

/// F16C from CPUID leaf 1 (ECX bit 29); Clang's __builtin_cpu_supports does not know "f16c".
inline bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return ((c >> 29) & 1u) != 0;
}
inline bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("popcnt");
}
inline bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c() &&
         __builtin_cpu_supports("popcnt");
}

// ------------------------------------------------------------------------------------------------------
// AVX-512, f32 compute (sources f32, f16, bf16, and fp8 pre-decoded to f32)
// ------------------------------------------------------------------------------------------------------
/// Folds f32 extrema (fast-path floats and slow-path keys) into a chunk_out, exactly.
inline void reduce_extrema_f32(chunk_out& o, float fmin, float fmax, float famin, std::int32_t kmin, std::int32_t kmax,
                               std::uint32_t kamin) {
  const std::int32_t mn = key32(float_to_bits(fmin)) < kmin ? key32(float_to_bits(fmin)) : kmin;
  const std::int32_t mx = key32(float_to_bits(fmax)) > kmax ? key32(float_to_bits(fmax)) : kmax;
  const std::uint32_t fa = float_to_bits(famin) & f32_abs_mask;
  const std::uint32_t am = fa < kamin ? fa : kamin;
  o.take_min(key64(f32_to_f64_bits(unkey32(mn))));
  o.take_max(key64(f32_to_f64_bits(unkey32(mx))));
  o.take_amin(f32_to_f64_bits(am));
}

struct load512_f32 {
  using src = float;
  static constexpr bool half16 = false;
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 load(const void* p) { return _mm512_loadu_ps(p); }
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 load_masked(const void* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};
struct load512_f16 {
  using src = std::uint16_t;
  static constexpr bool half16 = true;  // 16-bit source: the optimistic block works on the raw patterns
  static double decode(std::uint16_t h) { return dec_f16::get(reinterpret_cast<const unsigned char*>(&h), 0); }
  /// The 32 raw halves of r as two vectors of 16 floats (any lane order: only sums use them).
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 widen_lo(__m512i r) { return _mm512_cvtph_ps(_mm512_castsi512_si256(r)); }
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 widen_hi(__m512i r) { return _mm512_cvtph_ps(_mm512_extracti64x4_epi64(r, 1)); }
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 load(const void* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
  }
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 load_masked(const void* p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }
};
struct load512_bf16 {
  using src = std::uint16_t;
  static constexpr bool half16 = true;
  static double decode(std::uint16_t h) { return dec_bf16::get(reinterpret_cast<const unsigned char*>(&h), 0); }
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 widen_lo(__m512i r) {
    return _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), r));
  }
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 widen_hi(__m512i r) {
    return _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), r));
  }
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 load(const void* p) {
    const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  NANSCOPE_IMPL_TARGET_AVX512 static __m512 load_masked(const void* p, __mmask16 m) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};

/// Kernel state. The fast path's accumulators come in two sets (index A = 0, 1), used by alternate vectors: one
/// set would chain every vector's FMA onto the previous one (4 cycles of latency per 16 lanes on current cores,
/// the bound of the whole pass); two halve that chain. Negative tame lanes are counted in vector lanes (vneg).
struct state512_f32 {
  __m512 vmin[2], vmax[2], vamax[2], vamin[2], fs1[2], fs2[2];  // fast paths: tame values and zeros only
  __m512i vneg;                                // fast path: per-lane count of negative tame lanes
  __m512i kmin, kmax, kamin, kamax;            // slow path: integer keys, exact under flush-to-zero
  __m512d ds1a, ds1b, ds2a, ds2b;  // flushed f32 sums (fast lanes)
  __m512d ss1a, ss1b, ss2a, ss2b;  // slow lanes, in double
  std::uint64_t neg, zero, nan, pinf, ninf, sub, n_slow;
  std::int64_t first_nf;
};

template <level L>
NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline void slow512_f32(state512_f32& s, __m512 x, __mmask16 valid, __mmask16 tame,
                                                     std::int64_t index, const kernel_params& kp, __m512 k32,
                                                     __m512d k64) {
  const __m512i xi = _mm512_castps_si512(x);
  const __m512i a = _mm512_and_si512(xi, _mm512_set1_epi32(static_cast<int>(f32_abs_mask)));
  const __m512i inf = _mm512_set1_epi32(static_cast<int>(f32_inf_bits));
  const __mmask16 nanm = _mm512_mask_cmpgt_epu32_mask(valid, a, inf);
  const __mmask16 infm = _mm512_mask_cmpeq_epu32_mask(valid, a, inf);
  const __mmask16 finm = static_cast<__mmask16>(valid & ~nanm & ~infm);
  const __mmask16 sign = _mm512_movepi32_mask(xi);
  s.nan += static_cast<unsigned>(__builtin_popcount(mask_bits(nanm)));
  s.pinf += static_cast<unsigned>(__builtin_popcount(mask_bits(static_cast<__mmask16>(infm & ~sign))));
  s.ninf += static_cast<unsigned>(__builtin_popcount(mask_bits(static_cast<__mmask16>(infm & sign))));
  const unsigned nonfin = mask_bits(static_cast<__mmask16>(valid & ~finm));
  if (nonfin != 0 && s.first_nf < 0) s.first_nf = index + __builtin_ctz(nonfin);
  if constexpr (L >= level::counts) {
    const __mmask16 zerom = _mm512_mask_cmpeq_epu32_mask(valid, a, _mm512_setzero_si512());
    const __mmask16 subm =
        static_cast<__mmask16>(finm & ~zerom & _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(static_cast<int>(kp.normal32))));
    s.zero += static_cast<unsigned>(__builtin_popcount(mask_bits(zerom)));
    s.sub += static_cast<unsigned>(__builtin_popcount(mask_bits(subm)));
    s.neg += static_cast<unsigned>(__builtin_popcount(mask_bits(static_cast<__mmask16>(finm & ~zerom & sign))));
    const __mmask16 notnan = static_cast<__mmask16>(valid & ~nanm);
    if constexpr (L == level::counts) {
      s.kamax = _mm512_mask_max_epu32(s.kamax, notnan, s.kamax, a);
    } else {
      const __m512i key = _mm512_xor_si512(xi, _mm512_srli_epi32(_mm512_srai_epi32(xi, 31), 1));
      s.kmin = _mm512_mask_min_epi32(s.kmin, notnan, s.kmin, key);
      s.kmax = _mm512_mask_max_epi32(s.kmax, notnan, s.kmax, key);
      s.kamin = _mm512_mask_min_epu32(s.kamin, static_cast<__mmask16>(notnan & ~zerom), s.kamin, a);
      const __mmask16 tm = static_cast<__mmask16>(tame & valid);
      const __m512 d = _mm512_maskz_sub_ps(tm, x, k32);
      s.fs1[0] = _mm512_add_ps(s.fs1[0], d);
      s.fs2[0] = _mm512_fmadd_ps(d, d, s.fs2[0]);
      const __mmask16 other = static_cast<__mmask16>(finm & ~tm);
      if (other != 0) {
        s.n_slow += static_cast<unsigned>(__builtin_popcount(mask_bits(other)));
        const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
        const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
        const __m512d dlo = _mm512_maskz_sub_pd(static_cast<__mmask8>(other & 0xFF), lo, k64);
        const __m512d dhi = _mm512_maskz_sub_pd(static_cast<__mmask8>(other >> 8), hi, k64);
        s.ss1a = _mm512_add_pd(s.ss1a, dlo);
        s.ss1b = _mm512_add_pd(s.ss1b, dhi);
        s.ss2a = _mm512_fmadd_pd(dlo, dlo, s.ss2a);
        s.ss2b = _mm512_fmadd_pd(dhi, dhi, s.ss2b);
      }
    }
  }
}

template <level L>
NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline void flush512_f32(state512_f32& s) {
  if constexpr (L == level::stats) {
    // the two sets are added in f32 first (exact enough: each holds at most 8 values per lane), then widened
    const __m512 f1 = _mm512_add_ps(s.fs1[0], s.fs1[1]);
    const __m512 f2 = _mm512_add_ps(s.fs2[0], s.fs2[1]);
    s.ds1a = _mm512_add_pd(s.ds1a, _mm512_cvtps_pd(_mm512_castps512_ps256(f1)));
    s.ds1b = _mm512_add_pd(s.ds1b, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f1), 1))));
    s.ds2a = _mm512_add_pd(s.ds2a, _mm512_cvtps_pd(_mm512_castps512_ps256(f2)));
    s.ds2b = _mm512_add_pd(s.ds2b, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f2), 1))));
    s.fs1[0] = s.fs1[1] = _mm512_setzero_ps();
    s.fs2[0] = s.fs2[1] = _mm512_setzero_ps();
  }
}

/// The optimistic block's work for one vector whose lanes are all assumed tame (see avx512_f32_kernel): tame
/// lanes are never zero, so the sign bit alone says negative (a logical shift by 31 gives 1 for those).
template <level L, int A>
NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline void tame512_f32(state512_f32& s, __m512 x, __m512 k32) {
  s.vneg = _mm512_add_epi32(s.vneg, _mm512_srli_epi32(_mm512_castps_si512(x), 31));
  if constexpr (L == level::stats) {
    s.vmin[A] = _mm512_min_ps(s.vmin[A], x);
    s.vmax[A] = _mm512_max_ps(s.vmax[A], x);
    const __m512 d = _mm512_sub_ps(x, k32);
    s.fs1[A] = _mm512_add_ps(s.fs1[A], d);
    s.fs2[A] = _mm512_fmadd_ps(d, d, s.fs2[A]);
  }
}

/// One full group of 16 lanes: the fast path when every lane is tame, else the exact per-lane path. A picks the
/// fast path's accumulator set.
template <level L, int A>
NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline void group512_f32(
    state512_f32& s, __m512 x, std::size_t i, const kernel_params& kp, __m512i lo, __m512i span, __m512i absm,
    __m512 k32, __m512d k64) {
  const __m512i xi = _mm512_castps_si512(x);
  const __m512i a = _mm512_and_si512(xi, absm);
  const __mmask16 tame = _mm512_cmple_epu32_mask(_mm512_sub_epi32(a, lo), span);
  if (__builtin_expect(tame == 0xFFFF, 1)) {
    // tame lanes are never zero: the sign bit alone says negative (srli by 31 gives 1 for a negative lane)
    if constexpr (L >= level::counts) s.vneg = _mm512_add_epi32(s.vneg, _mm512_srli_epi32(xi, 31));
    if constexpr (L == level::counts) s.vamax[A] = _mm512_max_ps(s.vamax[A], _mm512_castsi512_ps(a));
    if constexpr (L == level::stats) {
      s.vmin[A] = _mm512_min_ps(s.vmin[A], x);
      s.vmax[A] = _mm512_max_ps(s.vmax[A], x);
      s.vamin[A] = _mm512_min_ps(s.vamin[A], _mm512_castsi512_ps(a));
      const __m512 d = _mm512_sub_ps(x, k32);
      s.fs1[A] = _mm512_add_ps(s.fs1[A], d);
      s.fs2[A] = _mm512_fmadd_ps(d, d, s.fs2[A]);
    }
  } else if constexpr (L >= level::counts) {
    // Second fast path: tame lanes and zeros only (ReLU outputs, sparse tensors). Zeros are summed like any
    // value (x - k is finite), excluded from abs_min_nonzero, and -0 is not counted as negative.
    const __mmask16 zerom = _mm512_testn_epi32_mask(a, a);
    if (static_cast<__mmask16>(tame | zerom) == 0xFFFF) {
      s.zero += static_cast<unsigned>(__builtin_popcount(mask_bits(zerom)));
      s.neg += static_cast<unsigned>(__builtin_popcount(mask_bits(static_cast<__mmask16>(_mm512_movepi32_mask(xi) & ~zerom))));
      if constexpr (L == level::counts) s.vamax[A] = _mm512_max_ps(s.vamax[A], _mm512_castsi512_ps(a));
      if constexpr (L == level::stats) {
        s.vmin[A] = _mm512_min_ps(s.vmin[A], x);
        s.vmax[A] = _mm512_max_ps(s.vmax[A], x);
        s.vamin[A] = _mm512_mask_min_ps(s.vamin[A], static_cast<__mmask16>(~zerom), s.vamin[A], _mm512_castsi512_ps(a));
        const __m512 d = _mm512_sub_ps(x, k32);
        s.fs1[A] = _mm512_add_ps(s.fs1[A], d);
        s.fs2[A] = _mm512_fmadd_ps(d, d, s.fs2[A]);
      }
    } else {
      slow512_f32<L>(s, x, 0xFFFF, tame, static_cast<std::int64_t>(i), kp, k32, k64);
    }
  } else {
    slow512_f32<L>(s, x, 0xFFFF, tame, static_cast<std::int64_t>(i), kp, k32, k64);
  }
}

/// Re-runs a block whose optimistic run met a lane that is not tame: its f32 sums are dropped (they are per
/// block) and every vector goes through the exact per-lane path, from L1.
template <level L, class Load>
NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline void exact_block512_f32(
    state512_f32& s, const unsigned char* p, std::size_t i, std::size_t block, const kernel_params& kp, __m512i lo,
    __m512i span, __m512i absm, __m512 k32, __m512d k64) {
  constexpr std::size_t es = sizeof(typename Load::src);
  s.fs1[0] = s.fs1[1] = s.fs2[0] = s.fs2[1] = _mm512_setzero_ps();
  for (std::size_t j = 0; j < block; j += 32) {
    group512_f32<L, 0>(s, Load::load(p + (i + j) * es), i + j, kp, lo, span, absm, k32, k64);
    group512_f32<L, 1>(s, Load::load(p + (i + j + 16) * es), i + j + 16, kp, lo, span, absm, k32, k64);
  }
}

/// Folds the 16-bit paths' lane extrema (see avx512_f32_kernel) into a chunk_out: `lanes` lanes of the signed
/// max / min and unsigned max / min of the raw patterns. counts: ux holds max |x|.
template <level L, class Load>
inline void fold_extrema16_lanes(chunk_out& o, const std::uint16_t* sx, const std::uint16_t* sn, const std::uint16_t* ux,
                                 const std::uint16_t* un, int lanes) {
  std::uint16_t smax = 0x8000, smin = 0x7FFF, umax = 0, umin = 0xFFFF;
  for (int l = 0; l < lanes; ++l) {
    if (static_cast<std::int16_t>(sx[l]) > static_cast<std::int16_t>(smax)) smax = sx[l];
    if (static_cast<std::int16_t>(sn[l]) < static_cast<std::int16_t>(smin)) smin = sn[l];
    umax = ux[l] > umax ? ux[l] : umax;
    umin = un[l] < umin ? un[l] : umin;
  }
  if constexpr (L == level::counts) {
    o.take_amax(double_to_bits(Load::decode(umax)));
  } else {
    // umin stays 0xFFFF (a NaN pattern: never tame) when the lanes saw no value but zeros (AVX2's zero blocks
    // keep zeros out of the mins and count them apart: kernel_avx2_zero.hpp)
    if (umin == 0xFFFFu) return;
    const std::uint16_t mx = umin < 0x8000u ? smax : umin;
    const std::uint16_t mn = umax >= 0x8000u ? umax : umin;
    const std::uint16_t an = static_cast<std::uint16_t>((umin & 0x7FFFu) < (smin & 0x7FFFu) ? (umin & 0x7FFFu) : (smin & 0x7FFFu));
    o.take_min(key64(double_to_bits(Load::decode(mn))));
    o.take_max(key64(double_to_bits(Load::decode(mx))));
    o.take_amin(double_to_bits(Load::decode(an)));
  }
}

template <level L, class Load>
NANSCOPE_IMPL_TARGET_AVX512 inline void fold_extrema16(chunk_out& o, __m512i smax16, __m512i smin16, __m512i umax16,
                                                      __m512i umin16) {
  alignas(64) std::uint16_t sx[32], sn[32], ux[32], un[32];
  _mm512_store_si512(sx, smax16);
  _mm512_store_si512(sn, smin16);
  _mm512_store_si512(ux, umax16);
  _mm512_store_si512(un, umin16);
  fold_extrema16_lanes<L, Load>(o, sx, sn, ux, un, 32);
}

/// One chunk of n elements through the AVX-512 f32-compute kernel.
template <level L, class Load, class H = kernel_no_hash, class G = kernel_no_hist>
NANSCOPE_IMPL_TARGET_AVX512 inline void avx512_f32_kernel(const void* vp, std::size_t n, const kernel_params& kp,
                                                           chunk_out& o, H* h = nullptr, G* g = nullptr) {
  static_assert(!G::enabled || L >= level::counts, "the histogram hook rides in the optimistic blocks only");
  static_assert(!H::enabled || !Load::half16 || L < level::counts, "the 16-bit blocks do not step a hash hook");
  constexpr std::size_t es = sizeof(typename Load::src);
  const auto* p = static_cast<const unsigned char*>(vp);  // any alignment: unaligned (or masked) loads only
  state512_f32 s;
  for (int a = 0; a < 2; ++a) {
    s.vmin[a] = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    s.vmax[a] = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    s.vamax[a] = _mm512_setzero_ps();
    s.vamin[a] = _mm512_set1_ps(std::numeric_limits<float>::infinity());
    s.fs1[a] = s.fs2[a] = _mm512_setzero_ps();
  }
  s.vneg = _mm512_setzero_si512();
  s.kmin = _mm512_set1_epi32(0x7F800000);                   // key of +inf
  s.kmax = _mm512_set1_epi32(key32(0xFF800000u));           // key of -inf
  s.kamin = _mm512_set1_epi32(0x7F800000);
  s.kamax = _mm512_setzero_si512();
  s.ds1a = s.ds1b = s.ds2a = s.ds2b = _mm512_setzero_pd();
  s.ss1a = s.ss1b = s.ss2a = s.ss2b = _mm512_setzero_pd();
  s.neg = s.zero = s.nan = s.pinf = s.ninf = s.sub = s.n_slow = 0;
  s.first_nf = -1;
  const __m512i lo = _mm512_set1_epi32(static_cast<int>(kp.tame_lo32));
  const __m512i span = _mm512_set1_epi32(static_cast<int>(kp.tame_span32));
  const __m512i absm = _mm512_set1_epi32(static_cast<int>(f32_abs_mask));
  const __m512 k32 = _mm512_set1_ps(kp.k32);
  const __m512d k64 = _mm512_set1_pd(kp.k64);

  constexpr std::size_t block = 256;  // f32 partial sums are flushed to double every block (8 values per lane and set)
  std::size_t i = 0;
  [[maybe_unused]] H hs;  // a local copy stays in registers
  [[maybe_unused]] G gs;
  if constexpr (G::enabled) gs = *g;
  const __m512i hi = _mm512_add_epi32(lo, span);
  // 16-bit sources: the optimistic block's checks and extrema on the raw patterns, 32 lanes per vector. For a
  // lane pattern r (sign-magnitude), as signed 16-bit integers positives sort above negatives and the most
  // negative value is the largest negative integer; so over a set of lanes, with m = 0x7FFF:
  //   max x = (unsigned min < 0x8000, i.e. any positive) ? signed max : unsigned min
  //   min x = (unsigned max >= 0x8000, i.e. any negative) ? unsigned max : unsigned min
  //   min |x| = min(unsigned min & m, signed min & m),  max |x| = max(signed max & m, unsigned max & m)
  // and a block is tame when lo16 <= min |x| and max |x| <= hi16 (NaN, inf, zero, subnormal fail that).
  [[maybe_unused]] __m512i smax16 = _mm512_set1_epi16(static_cast<short>(0x8000)),
                           smin16 = _mm512_set1_epi16(0x7FFF), umax16 = _mm512_setzero_si512(),
                           umin16 = _mm512_set1_epi16(-1);
  [[maybe_unused]] bool any16 = false;  // a block went through the 16-bit path
  for (; i + block <= n; i += block) {
    if constexpr (Load::half16 && L >= level::counts) {
      const __m512i lo16 = _mm512_set1_epi16(static_cast<short>(kp.tame_lo16));
      const __m512i hi16 = _mm512_set1_epi16(static_cast<short>(kp.tame_hi16));
      const __m512i m16 = _mm512_set1_epi16(0x7FFF);
      const __m512i sx0 = smax16, sn0 = smin16, ux0 = umax16, un0 = umin16;
      __m512i bmin = _mm512_set1_epi16(-1), bmax = _mm512_setzero_si512(), neg16 = _mm512_setzero_si512();
      for (std::size_t j = 0; j < block; j += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * es) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
        const __m512i r = _mm512_loadu_si512(p + (i + j) * es);
        if constexpr (G::enabled) gs.template step<0>(r);
        neg16 = _mm512_add_epi16(neg16, _mm512_srli_epi16(r, 15));
        if constexpr (L == level::counts) {
          const __m512i a = _mm512_and_si512(r, m16);
          bmin = _mm512_min_epu16(bmin, a);
          bmax = _mm512_max_epu16(bmax, a);
        } else {
          smax16 = _mm512_max_epi16(smax16, r);
          smin16 = _mm512_min_epi16(smin16, r);
          umax16 = _mm512_max_epu16(umax16, r);
          umin16 = _mm512_min_epu16(umin16, r);
          const __m512 d0 = _mm512_sub_ps(Load::widen_lo(r), k32);
          const __m512 d1 = _mm512_sub_ps(Load::widen_hi(r), k32);
          s.fs1[0] = _mm512_add_ps(s.fs1[0], d0);
          s.fs2[0] = _mm512_fmadd_ps(d0, d0, s.fs2[0]);
          s.fs1[1] = _mm512_add_ps(s.fs1[1], d1);
          s.fs2[1] = _mm512_fmadd_ps(d1, d1, s.fs2[1]);
        }
      }
      if constexpr (L == level::stats) {
        bmin = _mm512_min_epu16(_mm512_and_si512(umin16, m16), _mm512_and_si512(smin16, m16));
        bmax = _mm512_max_epu16(_mm512_and_si512(smax16, m16), _mm512_and_si512(umax16, m16));
      }
      const __mmask32 bad = _mm512_cmplt_epu16_mask(bmin, lo16) | _mm512_cmpgt_epu16_mask(bmax, hi16);
      if (__builtin_expect(bad == 0, 1)) {
        any16 = true;
        s.vneg = _mm512_add_epi32(s.vneg, _mm512_madd_epi16(neg16, _mm512_set1_epi16(1)));
        if constexpr (L == level::counts) {  // the block's max |x| as f32 bits (tame: an exact decode)
          umax16 = _mm512_max_epu16(umax16, bmax);
        }
      } else {
        smax16 = sx0;
        smin16 = sn0;
        umax16 = ux0;
        umin16 = un0;
        exact_block512_f32<L, Load>(s, p, i, block, kp, lo, span, absm, k32, k64);
      }
      if constexpr (G::enabled) gs.end_block(p + i * es, bmin, bmax);  // (not used by the 16-bit hook)
    } else if constexpr (L >= level::counts) {
      // Optimistic block: every lane is assumed tame, with no test per vector; the block's unsigned min and max
      // of |x| bits check that at the end. If any lane was not tame, the block's contributions are undone
      // (snapshot below; the f32 sums are per block anyway) and the block runs again through the exact path,
      // from L1. The hash is stepped once, on the first run.
      const __m512i neg0 = s.vneg;
      const __m512 min0 = s.vmin[0], min1 = s.vmin[1], max0 = s.vmax[0], max1 = s.vmax[1];
      __m512i bmin = _mm512_set1_epi32(-1), bmax = _mm512_setzero_si512();
      for (std::size_t j = 0; j < block; j += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * es) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
        if constexpr (es == 4)
          _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * es) + NANSCOPE_IMPL_PREFETCH_BYTES + 64, _MM_HINT_T0);
        const __m512 x0 = Load::load(p + (i + j) * es);
        const __m512 x1 = Load::load(p + (i + j + 16) * es);
        if constexpr (H::enabled) {  // hashes elements [0, n / 256 * 256)
          hs.step(x0);
          hs.step(x1);
        }
        if constexpr (G::enabled) {
          gs.template step<0>(_mm512_castps_si512(x0));
          gs.template step<1>(_mm512_castps_si512(x1));
        }
        const __m512i a0 = _mm512_and_si512(_mm512_castps_si512(x0), absm);
        const __m512i a1 = _mm512_and_si512(_mm512_castps_si512(x1), absm);
        bmin = _mm512_min_epu32(bmin, _mm512_min_epu32(a0, a1));
        bmax = _mm512_max_epu32(bmax, _mm512_max_epu32(a0, a1));
        tame512_f32<L, 0>(s, x0, k32);
        tame512_f32<L, 1>(s, x1, k32);
      }
      const __mmask16 bad = static_cast<__mmask16>(_mm512_cmplt_epu32_mask(bmin, lo) | _mm512_cmpgt_epu32_mask(bmax, hi));
      if (__builtin_expect(bad == 0, 1)) {
        if constexpr (L == level::counts) s.kamax = _mm512_max_epu32(s.kamax, bmax);  // tame: not NaN
        if constexpr (L == level::stats) s.kamin = _mm512_min_epu32(s.kamin, bmin);   // tame: not zero, not NaN
      } else {
        s.vneg = neg0;
        s.vmin[0] = min0;
        s.vmin[1] = min1;
        s.vmax[0] = max0;
        s.vmax[1] = max1;
        exact_block512_f32<L, Load>(s, p, i, block, kp, lo, span, absm, k32, k64);
      }
      if constexpr (G::enabled) gs.end_block(p + i * es, bmin, bmax);
    } else {
      for (std::size_t j = 0; j < block; j += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * es) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
        if constexpr (es == 4)
          _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * es) + NANSCOPE_IMPL_PREFETCH_BYTES + 64, _MM_HINT_T0);
        const __m512 x0 = Load::load(p + (i + j) * es);
        const __m512 x1 = Load::load(p + (i + j + 16) * es);
        if constexpr (H::enabled) {  // hashes elements [0, n / 256 * 256)
          hs.step(x0);
          hs.step(x1);
        }
        group512_f32<L, 0>(s, x0, i + j, kp, lo, span, absm, k32, k64);
        group512_f32<L, 1>(s, x1, i + j + 16, kp, lo, span, absm, k32, k64);
      }
    }
    flush512_f32<L>(s);
  }
  if constexpr (H::enabled) *h = hs;
  if constexpr (G::enabled) *g = gs;
  for (; i + 16 <= n; i += 16) group512_f32<L, 0>(s, Load::load(p + i * es), i, kp, lo, span, absm, k32, k64);
  if (i < n) {
    const __mmask16 valid = static_cast<__mmask16>((1u << (n - i)) - 1u);
    const __m512 x = Load::load_masked(p + i * es, valid);
    const __m512i a = _mm512_and_si512(_mm512_castps_si512(x), absm);
    const __mmask16 tame = _mm512_cmple_epu32_mask(_mm512_sub_epi32(a, lo), span);
    slow512_f32<L>(s, x, valid, tame, static_cast<std::int64_t>(i), kp, k32, k64);
  }
  flush512_f32<L>(s);

  if constexpr (L >= level::counts)  // at most n / 16 per lane: no overflow in 32 bits for any chunk size
    s.neg += static_cast<std::uint32_t>(_mm512_reduce_add_epi32(s.vneg));
  if constexpr (Load::half16 && L >= level::counts) {
    if (any16) fold_extrema16<L, Load>(o, smax16, smin16, umax16, umin16);
  }
  o.neg += s.neg;
  o.zero += s.zero;
  o.nan += s.nan;
  o.pinf += s.pinf;
  o.ninf += s.ninf;
  o.sub += s.sub;
  if (o.first_nf < 0) o.first_nf = s.first_nf;
  if constexpr (L == level::counts) {
    const std::uint32_t fa = float_to_bits(_mm512_reduce_max_ps(_mm512_max_ps(s.vamax[0], s.vamax[1])));
    const auto ka = static_cast<std::uint32_t>(_mm512_reduce_max_epu32(s.kamax));
    o.take_amax(f32_to_f64_bits(fa > ka ? fa : ka));
  }
  if constexpr (L == level::stats) {
    reduce_extrema_f32(o, _mm512_reduce_min_ps(_mm512_min_ps(s.vmin[0], s.vmin[1])),
                       _mm512_reduce_max_ps(_mm512_max_ps(s.vmax[0], s.vmax[1])),
                       _mm512_reduce_min_ps(_mm512_min_ps(s.vamin[0], s.vamin[1])),
                       _mm512_reduce_min_epi32(s.kmin), _mm512_reduce_max_epi32(s.kmax),
                       static_cast<std::uint32_t>(_mm512_reduce_min_epu32(s.kamin)));
    o.fast_s1 += _mm512_reduce_add_pd(_mm512_add_pd(s.ds1a, s.ds1b));
    o.fast_s2 += _mm512_reduce_add_pd(_mm512_add_pd(s.ds2a, s.ds2b));
    o.n_slow += s.n_slow;
    o.slow_s1 += _mm512_reduce_add_pd(_mm512_add_pd(s.ss1a, s.ss1b));
    o.slow_s2 += _mm512_reduce_add_pd(_mm512_add_pd(s.ss2a, s.ss2b));
  }
}

// ------------------------------------------------------------------------------------------------------
// AVX-512, f64
// ------------------------------------------------------------------------------------------------------
struct state512_f64 {
  __m512d vmin, vmax, vamax, vamin, s1, s2;
  __m512i kmin, kmax, kamin, kamax;
  std::uint64_t neg, zero, nan, pinf, ninf, sub, nacc;
  std::int64_t first_nf;
  __m512i lo, span, absm, inf, huge, tiny, normal;
  __m512d k;
};

template <level L>
NANSCOPE_IMPL_TARGET_AVX512 __attribute__((always_inline)) inline void group512_f64(state512_f64& s, __m512d x,
                                                                                      __mmask8 valid, std::size_t i,
                                                                                      const kernel_params& kp,
                                                                                      chunk_out& o) {
  const __m512i xi = _mm512_castpd_si512(x);
  const __m512i a = _mm512_and_si512(xi, s.absm);
  const __mmask8 tame = _mm512_cmple_epu64_mask(_mm512_sub_epi64(a, s.lo), s.span);
  if (__builtin_expect(valid == 0xFF && tame == 0xFF, 1)) {
    if constexpr (L >= level::counts) s.neg += static_cast<unsigned>(__builtin_popcount(mask_bits(_mm512_movepi64_mask(xi))));
    if constexpr (L == level::counts) s.vamax = _mm512_max_pd(s.vamax, _mm512_castsi512_pd(a));
    if constexpr (L == level::stats) {
      s.vmin = _mm512_min_pd(s.vmin, x);
      s.vmax = _mm512_max_pd(s.vmax, x);
      s.vamin = _mm512_min_pd(s.vamin, _mm512_castsi512_pd(a));
      const __m512d d = _mm512_sub_pd(x, s.k);
      s.s1 = _mm512_add_pd(s.s1, d);
      s.s2 = _mm512_fmadd_pd(d, d, s.s2);
      s.nacc += 8;
    }
    return;
  }
  const __mmask8 nanm = _mm512_mask_cmpgt_epu64_mask(valid, a, s.inf);
  const __mmask8 infm = _mm512_mask_cmpeq_epu64_mask(valid, a, s.inf);
  const __mmask8 finm = static_cast<__mmask8>(valid & ~nanm & ~infm);
  const __mmask8 sign = _mm512_movepi64_mask(xi);
  s.nan += static_cast<unsigned>(__builtin_popcount(mask_bits(nanm)));
  s.pinf += static_cast<unsigned>(__builtin_popcount(mask_bits(static_cast<__mmask8>(infm & ~sign))));
  s.ninf += static_cast<unsigned>(__builtin_popcount(mask_bits(static_cast<__mmask8>(infm & sign))));
  const unsigned nonfin = mask_bits(static_cast<__mmask8>(valid & ~finm));
  if (nonfin != 0 && s.first_nf < 0) s.first_nf = static_cast<std::int64_t>(i) + __builtin_ctz(nonfin);
  if constexpr (L >= level::counts) {
    const __mmask8 zerom = _mm512_mask_cmpeq_epu64_mask(valid, a, _mm512_setzero_si512());
    const __mmask8 subm = static_cast<__mmask8>(finm & ~zerom & _mm512_cmplt_epu64_mask(a, s.normal));
    s.zero += static_cast<unsigned>(__builtin_popcount(mask_bits(zerom)));
    s.sub += static_cast<unsigned>(__builtin_popcount(mask_bits(subm)));
    s.neg += static_cast<unsigned>(__builtin_popcount(mask_bits(static_cast<__mmask8>(finm & ~zerom & sign))));
    const __mmask8 notnan = static_cast<__mmask8>(valid & ~nanm);
    if constexpr (L == level::counts) {
      s.kamax = _mm512_mask_max_epu64(s.kamax, notnan, s.kamax, a);
    } else {
      const __m512i key = _mm512_xor_si512(xi, _mm512_srli_epi64(_mm512_srai_epi64(xi, 63), 1));
      s.kmin = _mm512_mask_min_epi64(s.kmin, notnan, s.kmin, key);
      s.kmax = _mm512_mask_max_epi64(s.kmax, notnan, s.kmax, key);
      s.kamin = _mm512_mask_min_epu64(s.kamin, static_cast<__mmask8>(notnan & ~zerom), s.kamin, a);
      // finite values within 2^+-500 (and zeros) are summed in double; the rest in long double (scalar, rare)
      const __mmask8 hugem = static_cast<__mmask8>(
          finm & (_mm512_cmpgt_epu64_mask(a, s.huge) |
                  (_mm512_cmplt_epu64_mask(a, s.tiny) & _mm512_test_epi64_mask(a, a))));
      const __mmask8 accm = static_cast<__mmask8>(finm & ~hugem);
      const __m512d d = _mm512_maskz_sub_pd(accm, x, s.k);
      s.s1 = _mm512_add_pd(s.s1, d);
      s.s2 = _mm512_fmadd_pd(d, d, s.s2);
      s.nacc += static_cast<unsigned>(__builtin_popcount(mask_bits(accm)));
      if (hugem != 0) {
        alignas(64) double tmp[8];
        _mm512_store_pd(tmp, x);
        for (int l = 0; l < 8; ++l) {
          if ((mask_bits(hugem) >> l) & 1u) {
            const long double dd = static_cast<long double>(tmp[l]) - static_cast<long double>(kp.k_ld);
            o.ld_s1 += dd;
            o.ld_s2 += dd * dd;
            ++o.ld_n;
          }
        }
      }
    }
  }
}

template <level L, class H = kernel_no_hash>
NANSCOPE_IMPL_TARGET_AVX512 inline void avx512_f64_kernel(const void* vp, std::size_t n, const kernel_params& kp,
                                                           chunk_out& o, H* h = nullptr) {
  const auto* p = static_cast<const unsigned char*>(vp);  // any alignment: unaligned (or masked) loads only
  state512_f64 s;
  s.vmin = _mm512_set1_pd(std::numeric_limits<double>::infinity());
  s.vmax = _mm512_set1_pd(-std::numeric_limits<double>::infinity());
  s.vamax = _mm512_setzero_pd();
  s.vamin = _mm512_set1_pd(std::numeric_limits<double>::infinity());
  s.s1 = _mm512_setzero_pd();
  s.s2 = _mm512_setzero_pd();
  s.kmin = _mm512_set1_epi64(key64_max);
  s.kmax = _mm512_set1_epi64(key64_min);
  s.kamin = _mm512_set1_epi64(static_cast<long long>(f64_inf_bits));
  s.kamax = _mm512_setzero_si512();
  s.neg = s.zero = s.nan = s.pinf = s.ninf = s.sub = s.nacc = 0;
  s.first_nf = -1;
  s.lo = _mm512_set1_epi64(static_cast<long long>(kp.tame_lo64));
  s.span = _mm512_set1_epi64(static_cast<long long>(kp.tame_span64));
  s.absm = _mm512_set1_epi64(static_cast<long long>(f64_abs_mask));
  s.inf = _mm512_set1_epi64(static_cast<long long>(f64_inf_bits));
  s.huge = _mm512_set1_epi64(static_cast<long long>(kp.huge64));
  s.tiny = _mm512_set1_epi64(static_cast<long long>(f64_tiny_bits));
  s.normal = _mm512_set1_epi64(static_cast<long long>(kp.normal64));
  s.k = _mm512_set1_pd(kp.k64);

  std::size_t i = 0;
  [[maybe_unused]] H hs;  // a local copy stays in registers
  if constexpr (L >= level::counts) {
    // Optimistic blocks of 128 elements, as in avx512_f32_kernel: no test per vector, two accumulator sets
    // local to the block, the block's unsigned min / max of |x| bits checked at its end; a block with any other
    // lane is dropped and re-run through the exact path from L1 (the hash is stepped on the first run only).
    const __m512i hi = _mm512_add_epi64(s.lo, s.span);
    __m512i vneg = _mm512_setzero_si512();
    for (; i + 128 <= n; i += 128) {
      __m512i bmin = _mm512_set1_epi64(-1), bmax = _mm512_setzero_si512(), bneg = _mm512_setzero_si512();
      __m512d mn0 = _mm512_set1_pd(std::numeric_limits<double>::infinity()), mn1 = mn0;
      __m512d mx0 = _mm512_set1_pd(-std::numeric_limits<double>::infinity()), mx1 = mx0;
      __m512d a0 = _mm512_setzero_pd(), a1 = a0, q0 = a0, q1 = a0;
      for (std::size_t j = 0; j < 128; j += 16) {
        _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * 8) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * 8) + NANSCOPE_IMPL_PREFETCH_BYTES + 64, _MM_HINT_T0);
        const __m512d x0 = _mm512_loadu_pd(p + (i + j) * 8);
        const __m512d x1 = _mm512_loadu_pd(p + (i + j + 8) * 8);
        if constexpr (H::enabled) {
          hs.step(x0);
          hs.step(x1);
        }
        const __m512i b0 = _mm512_and_si512(_mm512_castpd_si512(x0), s.absm);
        const __m512i b1 = _mm512_and_si512(_mm512_castpd_si512(x1), s.absm);
        bmin = _mm512_min_epu64(bmin, _mm512_min_epu64(b0, b1));
        bmax = _mm512_max_epu64(bmax, _mm512_max_epu64(b0, b1));
        bneg = _mm512_add_epi64(bneg, _mm512_add_epi64(_mm512_srli_epi64(_mm512_castpd_si512(x0), 63),
                                                       _mm512_srli_epi64(_mm512_castpd_si512(x1), 63)));
        if constexpr (L == level::stats) {
          mn0 = _mm512_min_pd(mn0, x0);
          mn1 = _mm512_min_pd(mn1, x1);
          mx0 = _mm512_max_pd(mx0, x0);
          mx1 = _mm512_max_pd(mx1, x1);
          const __m512d d0 = _mm512_sub_pd(x0, s.k), d1 = _mm512_sub_pd(x1, s.k);
          a0 = _mm512_add_pd(a0, d0);
          a1 = _mm512_add_pd(a1, d1);
          q0 = _mm512_fmadd_pd(d0, d0, q0);
          q1 = _mm512_fmadd_pd(d1, d1, q1);
        }
      }
      const __mmask8 bad = static_cast<__mmask8>(_mm512_cmplt_epu64_mask(bmin, s.lo) | _mm512_cmpgt_epu64_mask(bmax, hi));
      if (__builtin_expect(bad == 0, 1)) {
        vneg = _mm512_add_epi64(vneg, bneg);
        if constexpr (L == level::counts) s.kamax = _mm512_max_epu64(s.kamax, bmax);  // tame: not NaN
        if constexpr (L == level::stats) {
          s.kamin = _mm512_min_epu64(s.kamin, bmin);  // tame: not zero, not NaN
          s.vmin = _mm512_min_pd(s.vmin, _mm512_min_pd(mn0, mn1));
          s.vmax = _mm512_max_pd(s.vmax, _mm512_max_pd(mx0, mx1));
          s.s1 = _mm512_add_pd(s.s1, _mm512_add_pd(a0, a1));
          s.s2 = _mm512_add_pd(s.s2, _mm512_add_pd(q0, q1));
          s.nacc += 128;
        }
      } else {
        for (std::size_t j = 0; j < 128; j += 8) group512_f64<L>(s, _mm512_loadu_pd(p + (i + j) * 8), 0xFF, i + j, kp, o);
      }
    }
    s.neg += static_cast<std::uint64_t>(_mm512_reduce_add_epi64(vneg));
  }
  for (; i + 8 <= n; i += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i * 8) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
    const __m512d x = _mm512_loadu_pd(p + i * 8);
    if constexpr (H::enabled) hs.step(x);  // hashes elements [0, n / 8 * 8)
    group512_f64<L>(s, x, 0xFF, i, kp, o);
  }
  if constexpr (H::enabled) *h = hs;
  if (i < n) {
    const __mmask8 valid = static_cast<__mmask8>((1u << (n - i)) - 1u);
    group512_f64<L>(s, _mm512_maskz_loadu_pd(valid, p + i * 8), valid, i, kp, o);
  }
  o.neg += s.neg;
  o.zero += s.zero;
  o.nan += s.nan;
  o.pinf += s.pinf;
  o.ninf += s.ninf;
  o.sub += s.sub;
  if (o.first_nf < 0) o.first_nf = s.first_nf;
  if constexpr (L == level::counts) {
    o.take_amax(double_to_bits(_mm512_reduce_max_pd(s.vamax)));
    o.take_amax(static_cast<std::uint64_t>(_mm512_reduce_max_epu64(s.kamax)));
  }
  if constexpr (L == level::stats) {
    o.take_min(key64(double_to_bits(_mm512_reduce_min_pd(s.vmin))));
    o.take_min(_mm512_reduce_min_epi64(s.kmin));
    o.take_max(key64(double_to_bits(_mm512_reduce_max_pd(s.vmax))));
    o.take_max(_mm512_reduce_max_epi64(s.kmax));
    o.take_amin(double_to_bits(_mm512_reduce_min_pd(s.vamin)) & f64_abs_mask);
    o.take_amin(static_cast<std::uint64_t>(_mm512_reduce_min_epu64(s.kamin)));
    o.n_slow += s.nacc;  // f64: every double-summed lane is reported in `slow` (shift k64)
    o.slow_s1 += _mm512_reduce_add_pd(s.s1);
    o.slow_s2 += _mm512_reduce_add_pd(s.s2);
  }
}

// ------------------------------------------------------------------------------------------------------
// AVX2: optimistic blocks of tame lanes; a block with another lane goes through group256_f32's per-lane path,
// and where zeros are dense, blocks of zeros and tame lanes (kernel_avx2_zero.hpp).
// ------------------------------------------------------------------------------------------------------
struct load256_f32 {
  using src = float;
  static constexpr bool half16 = false;
  NANSCOPE_IMPL_TARGET_AVX2 static __m256 load(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }  // unaligned load
};
struct load256_f16 {
  using src = std::uint16_t;
  static constexpr bool half16 = true;  // 16-bit source: the optimistic block works on the raw patterns
  static double decode(std::uint16_t h) { return dec_f16::get(reinterpret_cast<const unsigned char*>(&h), 0); }
  /// The 16 raw halves of r as two vectors of 8 floats (any lane order: only the sums use them).
  NANSCOPE_IMPL_TARGET_AVX2 static __m256 widen_lo(__m256i r) { return _mm256_cvtph_ps(_mm256_castsi256_si128(r)); }
  NANSCOPE_IMPL_TARGET_AVX2 static __m256 widen_hi(__m256i r) { return _mm256_cvtph_ps(_mm256_extracti128_si256(r, 1)); }
  NANSCOPE_IMPL_TARGET_AVX2 static __m256 load(const void* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(p)));
  }
};
struct load256_bf16 {
  using src = std::uint16_t;
  static constexpr bool half16 = true;
  static double decode(std::uint16_t h) { return dec_bf16::get(reinterpret_cast<const unsigned char*>(&h), 0); }
  NANSCOPE_IMPL_TARGET_AVX2 static __m256 widen_lo(__m256i r) {
    return _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), r));
  }
  NANSCOPE_IMPL_TARGET_AVX2 static __m256 widen_hi(__m256i r) {
    return _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), r));
  }
  NANSCOPE_IMPL_TARGET_AVX2 static __m256 load(const void* p) {
    const __m128i h = _mm_loadu_si128(static_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
};

struct state256_f32 {
  __m256 vmin, vmax, vamax, vamin, fs1, fs2;
  __m256i kmin, kmax, kamin, kamax;
  __m256i vneg;  // negative lanes of the optimistic blocks, per vector lane
  __m256d ds1a, ds1b, ds2a, ds2b, ss1a, ss1b, ss2a, ss2b;
  std::uint64_t neg, zero, nan, pinf, ninf, sub, n_slow;
  std::int64_t first_nf;
  __m256i lo, span, absm, inf, normal;
  __m256 k32;
  __m256d k64;
};

/// One group of 8 lanes; `valid` (lane bits) < 0xFF only for the tail, whose missing lanes were loaded as 0.
template <level L>
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) inline void group256_f32(state256_f32& s, __m256 x,
                                                                                   unsigned valid, std::size_t i) {
  const __m256i xi = _mm256_castps_si256(x);
  const __m256i a = _mm256_and_si256(xi, s.absm);
  const __m256i off = _mm256_sub_epi32(a, s.lo);
  // unsigned off <= span  <=>  min_epu32(off, span) == off
  const __m256i tame_v = _mm256_cmpeq_epi32(_mm256_min_epu32(off, s.span), off);
  const unsigned tame = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(tame_v)));
  const __m256 ax = _mm256_castsi256_ps(a);
  if (__builtin_expect((tame & valid) == 0xFFu, 1)) {
    if constexpr (L >= level::counts) s.neg += static_cast<unsigned>(__builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(x))));
    if constexpr (L == level::counts) s.vamax = _mm256_max_ps(s.vamax, ax);
    if constexpr (L == level::stats) {
      s.vmin = _mm256_min_ps(s.vmin, x);
      s.vmax = _mm256_max_ps(s.vmax, x);
      s.vamin = _mm256_min_ps(s.vamin, ax);
      const __m256 d = _mm256_sub_ps(x, s.k32);
      s.fs1 = _mm256_add_ps(s.fs1, d);
      s.fs2 = _mm256_fmadd_ps(d, d, s.fs2);
    }
    return;
  }
  const __m256i nanv = _mm256_cmpgt_epi32(a, s.inf);  // a >= 0 as signed: plain compares work
  const __m256i infv = _mm256_cmpeq_epi32(a, s.inf);
  const __m256i zerov = _mm256_cmpeq_epi32(a, _mm256_setzero_si256());
  const __m256i subv = _mm256_cmpgt_epi32(s.normal, a);
  const unsigned nanb = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(nanv))) & valid;
  const unsigned infb = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(infv))) & valid;
  const unsigned zerob = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(zerov))) & valid;
  const unsigned subb = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(subv))) & valid & ~zerob;
  const unsigned signb = static_cast<unsigned>(_mm256_movemask_ps(x));
  const unsigned finb = valid & ~nanb & ~infb;
  s.nan += static_cast<unsigned>(__builtin_popcount(nanb));
  s.pinf += static_cast<unsigned>(__builtin_popcount(infb & ~signb));
  s.ninf += static_cast<unsigned>(__builtin_popcount(infb & signb));
  const unsigned nonfin = valid & ~finb;
  if (nonfin != 0 && s.first_nf < 0) s.first_nf = static_cast<std::int64_t>(i) + __builtin_ctz(nonfin);
  if constexpr (L >= level::counts) {
    s.zero += static_cast<unsigned>(__builtin_popcount(zerob));
    s.sub += static_cast<unsigned>(__builtin_popcount(subb & finb));
    s.neg += static_cast<unsigned>(__builtin_popcount(finb & ~zerob & signb));
    // lanes excluded from an extremum get a neutral value (tail lanes are 0 and are excluded via `valid`)
    const __m256i validv = _mm256_cmpgt_epi32(
        _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(valid)), _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128)),
        _mm256_setzero_si256());
    const __m256i notnan = _mm256_andnot_si256(nanv, validv);
    if constexpr (L == level::counts) {
      s.kamax = _mm256_max_epu32(s.kamax, _mm256_and_si256(a, notnan));
    } else {
      const __m256i key = _mm256_xor_si256(xi, _mm256_srli_epi32(_mm256_srai_epi32(xi, 31), 1));
      s.kmin = _mm256_min_epi32(s.kmin, _mm256_blendv_epi8(_mm256_set1_epi32(0x7F800000), key, notnan));
      s.kmax = _mm256_max_epi32(s.kmax, _mm256_blendv_epi8(_mm256_set1_epi32(key32(0xFF800000u)), key, notnan));
      const __m256i nz = _mm256_andnot_si256(zerov, notnan);
      s.kamin = _mm256_min_epu32(s.kamin, _mm256_blendv_epi8(_mm256_set1_epi32(0x7F800000), a, nz));
      const unsigned tm = tame & valid;
      const __m256 tmv = _mm256_and_ps(_mm256_castsi256_ps(tame_v), _mm256_castsi256_ps(validv));
      const __m256 d = _mm256_and_ps(_mm256_sub_ps(x, s.k32), tmv);
      s.fs1 = _mm256_add_ps(s.fs1, d);
      s.fs2 = _mm256_fmadd_ps(d, d, s.fs2);
      const unsigned other = finb & ~tm;
      if (other != 0) {
        s.n_slow += static_cast<unsigned>(__builtin_popcount(other));
        const __m256i ov = _mm256_cmpgt_epi32(
            _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(other)), _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128)),
            _mm256_setzero_si256());
        const __m256d mlo = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_castsi256_si128(ov)));
        const __m256d mhi = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm256_extracti128_si256(ov, 1)));
        // zero the excluded lanes before converting, so no inf/NaN enters the arithmetic
        const __m256 xs = _mm256_and_ps(x, _mm256_castsi256_ps(ov));
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(xs));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(xs, 1));
        const __m256d dlo = _mm256_and_pd(_mm256_sub_pd(lo, s.k64), mlo);
        const __m256d dhi = _mm256_and_pd(_mm256_sub_pd(hi, s.k64), mhi);
        s.ss1a = _mm256_add_pd(s.ss1a, dlo);
        s.ss1b = _mm256_add_pd(s.ss1b, dhi);
        s.ss2a = _mm256_fmadd_pd(dlo, dlo, s.ss2a);
        s.ss2b = _mm256_fmadd_pd(dhi, dhi, s.ss2b);
      }
    }
  }
}

/// Widens a block's f32 sums (of x - k and of its square) and adds them to the chunk's double sums.
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) inline void widen_sums256(state256_f32& s, __m256 f1, __m256 f2) {
  s.ds1a = _mm256_add_pd(s.ds1a, _mm256_cvtps_pd(_mm256_castps256_ps128(f1)));
  s.ds1b = _mm256_add_pd(s.ds1b, _mm256_cvtps_pd(_mm256_extractf128_ps(f1, 1)));
  s.ds2a = _mm256_add_pd(s.ds2a, _mm256_cvtps_pd(_mm256_castps256_ps128(f2)));
  s.ds2b = _mm256_add_pd(s.ds2b, _mm256_cvtps_pd(_mm256_extractf128_ps(f2, 1)));
}

template <level L>
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) inline void flush256_f32(state256_f32& s) {
  if constexpr (L == level::stats) {
    widen_sums256(s, s.fs1, s.fs2);
    s.fs1 = _mm256_setzero_ps();
    s.fs2 = _mm256_setzero_ps();
  }
}

NANSCOPE_IMPL_TARGET_AVX2 inline double hsum256(__m256d v) {
  alignas(32) double d[4];
  _mm256_store_pd(d, v);
  return (d[0] + d[1]) + (d[2] + d[3]);
}

/// The AVX2 f32-compute kernels' state at a chunk's (or a run's) start.
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) inline void init256_f32(state256_f32& s, const kernel_params& kp) {
  s.vmin = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  s.vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  s.vamax = _mm256_setzero_ps();
  s.vamin = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  s.kmin = _mm256_set1_epi32(0x7F800000);
  s.kmax = _mm256_set1_epi32(key32(0xFF800000u));
  s.kamin = _mm256_set1_epi32(0x7F800000);
  s.kamax = _mm256_setzero_si256();
  s.fs1 = s.fs2 = _mm256_setzero_ps();
  s.ds1a = s.ds1b = s.ds2a = s.ds2b = s.ss1a = s.ss1b = s.ss2a = s.ss2b = _mm256_setzero_pd();
  s.neg = s.zero = s.nan = s.pinf = s.ninf = s.sub = s.n_slow = 0;
  s.first_nf = -1;
  s.lo = _mm256_set1_epi32(static_cast<int>(kp.tame_lo32));
  s.span = _mm256_set1_epi32(static_cast<int>(kp.tame_span32));
  s.absm = _mm256_set1_epi32(static_cast<int>(f32_abs_mask));
  s.inf = _mm256_set1_epi32(static_cast<int>(f32_inf_bits));
  s.normal = _mm256_set1_epi32(static_cast<int>(kp.normal32));
  s.k32 = _mm256_set1_ps(kp.k32);
  s.k64 = _mm256_set1_pd(kp.k64);
  s.vneg = _mm256_setzero_si256();
}

/// Adds a run's state into o; any16 and the four raw-pattern extrema: the 16-bit blocks' (see avx2_f32_run).
template <level L, class Load>
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((always_inline)) inline void fold256_f32(state256_f32& s, chunk_out& o, bool any16,
                                                                                 __m256i smax16, __m256i smin16,
                                                                                 __m256i umax16, __m256i umin16) {
  if constexpr (Load::half16 && L >= level::counts) {
    if (any16) {
      alignas(32) std::uint16_t sx[16], sn[16], ux[16], un[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(sx), smax16);
      _mm256_store_si256(reinterpret_cast<__m256i*>(sn), smin16);
      _mm256_store_si256(reinterpret_cast<__m256i*>(ux), umax16);
      _mm256_store_si256(reinterpret_cast<__m256i*>(un), umin16);
      fold_extrema16_lanes<L, Load>(o, sx, sn, ux, un, 16);
    }
  }
  if constexpr (L >= level::counts) {
    alignas(32) std::uint32_t nv[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(nv), s.vneg);
    for (const std::uint32_t v : nv) s.neg += v;
  }
  o.neg += s.neg;
  o.zero += s.zero;
  o.nan += s.nan;
  o.pinf += s.pinf;
  o.ninf += s.ninf;
  o.sub += s.sub;
  if (o.first_nf < 0) o.first_nf = s.first_nf;
  alignas(32) std::uint32_t fa[8], ka[8], fb[8], kb[8], fc[8], kc[8];
  if constexpr (L == level::counts) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(fa), _mm256_castps_si256(s.vamax));
    _mm256_store_si256(reinterpret_cast<__m256i*>(ka), s.kamax);
    for (int l = 0; l < 8; ++l) o.take_amax(f32_to_f64_bits(fa[l] > ka[l] ? fa[l] : ka[l]));
  }
  if constexpr (L == level::stats) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(fa), _mm256_castps_si256(s.vmin));
    _mm256_store_si256(reinterpret_cast<__m256i*>(ka), s.kmin);
    _mm256_store_si256(reinterpret_cast<__m256i*>(fb), _mm256_castps_si256(s.vmax));
    _mm256_store_si256(reinterpret_cast<__m256i*>(kb), s.kmax);
    _mm256_store_si256(reinterpret_cast<__m256i*>(fc), _mm256_castps_si256(s.vamin));
    _mm256_store_si256(reinterpret_cast<__m256i*>(kc), s.kamin);
    for (int l = 0; l < 8; ++l)
      reduce_extrema_f32(o, bits_to_float(fa[l]), bits_to_float(fb[l]), bits_to_float(fc[l]),
                         static_cast<std::int32_t>(ka[l]), static_cast<std::int32_t>(kb[l]), kc[l]);
    o.fast_s1 += hsum256(_mm256_add_pd(s.ds1a, s.ds1b));
    o.fast_s2 += hsum256(_mm256_add_pd(s.ds2a, s.ds2b));
    o.n_slow += s.n_slow;
    o.slow_s1 += hsum256(_mm256_add_pd(s.ss1a, s.ss1b));
    o.slow_s2 += hsum256(_mm256_add_pd(s.ss2a, s.ss2b));
  }
}

/// When avx2_f32_run stops for avx2_zero_run (kernel_avx2_zero.hpp) to take the blocks from the next on: after
/// a block whose optimistic run failed and whose per-lane run then counted avx2_zero_dense zeros or more, or a
/// second one with any zero within avx2_zero_near blocks. avx2_zero_run goes back after avx2_zero_clear blocks
/// in a row without a zero.
inline constexpr std::uint64_t avx2_zero_dense = 8;
inline constexpr std::size_t avx2_zero_near = 4;
inline constexpr unsigned avx2_zero_clear = 8;

/// The AVX2 f32-compute kernel (sources f32, f16, bf16, decoded fp8) on elements [begin, n) of a chunk of n,
/// begin a multiple of the 128-element block: runs its blocks, and the elements past the last full block,
/// into o. Returns n, or the start of the block after one that made it stop for zeros (avx2_zero_dense,
/// avx2_zero_near).
template <level L, class Load, class H, class G>
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((noinline)) std::size_t avx2_f32_run(const void* vp, std::size_t begin,
                                                                             std::size_t n, const kernel_params& kp,
                                                                             chunk_out& o, H* h, G* g) {
  static_assert(!G::enabled || L >= level::counts, "the histogram hook rides in the optimistic blocks only");
  static_assert(!H::enabled || !Load::half16 || L < level::counts, "the 16-bit blocks do not step a hash hook");
  using src = typename Load::src;
  constexpr std::size_t es = sizeof(src);
  const auto* p = static_cast<const unsigned char*>(vp);  // any alignment: unaligned loads only
  state256_f32 s;
  init256_f32(s, kp);
  constexpr std::size_t block = 128;  // f32 partial sums are flushed to double every block
  std::size_t i = begin;
  [[maybe_unused]] H hs;  // a local copy stays in registers
  [[maybe_unused]] G gs;  // (the AVX2 histogram hook's out-of-line counting keeps it in memory: it is small)
  if constexpr (H::enabled) hs = *h;
  if constexpr (G::enabled) gs = *g;
  // 16-bit sources: the block's checks and extrema on the raw patterns, 16 lanes per vector, as in
  // avx512_f32_kernel (which explains the signed / unsigned min / max of sign-magnitude patterns); only the
  // sums see the widened floats. |x| patterns are at most 0x7FFF, so signed 16-bit
  // compares order them.
  [[maybe_unused]] __m256i smax16 = _mm256_set1_epi16(static_cast<short>(0x8000)), smin16 = _mm256_set1_epi16(0x7FFF),
                           umax16 = _mm256_setzero_si256(), umin16 = _mm256_set1_epi16(-1);
  [[maybe_unused]] bool any16 = false;  // a block went through the 16-bit path
  [[maybe_unused]] bool stop = false;    // the per-lane runs met zeros: avx2_zero_run goes on
  [[maybe_unused]] std::size_t last_zero = ~std::size_t{0};  // the last block whose per-lane run counted a zero
  for (; i + block <= n; i += block) {
    if constexpr (Load::half16 && L >= level::counts) {
      const __m256i m16 = _mm256_set1_epi16(0x7FFF);
      const __m256i sx0 = smax16, sn0 = smin16, ux0 = umax16, un0 = umin16;
      // block-local min / max of |x| (counts level, or for the hook's window test)
      __m256i bmin = _mm256_set1_epi16(0x7FFF), bmax = _mm256_setzero_si256(), neg16 = _mm256_setzero_si256();
      [[maybe_unused]] __m256 f1a = _mm256_setzero_ps(), f2a = _mm256_setzero_ps(), f1b = _mm256_setzero_ps(),
                              f2b = _mm256_setzero_ps();
      const __m256 k32 = s.k32;
      NANSCOPE_IMPL_UNROLL(2) for (std::size_t j = 0; j < block; j += 16) {  // (limited: fully unrolled, it spills)
        _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * es) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
        const __m256i r = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + (i + j) * es));
        neg16 = _mm256_add_epi16(neg16, _mm256_srli_epi16(r, 15));
        if constexpr (L == level::counts || G::enabled) {
          const __m256i a = _mm256_and_si256(r, m16);
          bmin = _mm256_min_epi16(bmin, a);
          bmax = _mm256_max_epi16(bmax, a);
        }
        if constexpr (L == level::stats) {
          const __m256 w0 = Load::widen_lo(r), w1 = Load::widen_hi(r);
          smax16 = _mm256_max_epi16(smax16, r);
          smin16 = _mm256_min_epi16(smin16, r);
          umax16 = _mm256_max_epu16(umax16, r);
          umin16 = _mm256_min_epu16(umin16, r);
          const __m256 d0 = _mm256_sub_ps(w0, k32), d1 = _mm256_sub_ps(w1, k32);
          f1a = _mm256_add_ps(f1a, d0);
          f2a = _mm256_fmadd_ps(d0, d0, f2a);
          f1b = _mm256_add_ps(f1b, d1);
          f2b = _mm256_fmadd_ps(d1, d1, f2b);
        }
      }
      __m256i tmin = bmin, tmax = bmax;
      if constexpr (L == level::stats) {  // the chunk's so far: earlier blocks were all tame
        tmin = _mm256_min_epi16(_mm256_and_si256(umin16, m16), _mm256_and_si256(smin16, m16));
        tmax = _mm256_max_epi16(_mm256_and_si256(smax16, m16), _mm256_and_si256(umax16, m16));
      }
      const __m256i badv = _mm256_or_si256(
          _mm256_cmpgt_epi16(_mm256_set1_epi16(static_cast<short>(kp.tame_lo16)), tmin),
          _mm256_cmpgt_epi16(tmax, _mm256_set1_epi16(static_cast<short>(kp.tame_hi16))));
      if (__builtin_expect(_mm256_testz_si256(badv, badv) != 0, 1)) {
        any16 = true;
        s.vneg = _mm256_add_epi32(s.vneg, _mm256_madd_epi16(neg16, _mm256_set1_epi16(1)));
        if constexpr (L == level::counts) umax16 = _mm256_max_epi16(umax16, bmax);  // max |x| (tame: exact)
        if constexpr (L == level::stats) {
          widen_sums256(s, _mm256_add_ps(f1a, f1b), _mm256_add_ps(f2a, f2b));
        }
      } else {
        smax16 = sx0;
        smin16 = sn0;
        umax16 = ux0;
        umin16 = un0;
        const std::uint64_t z0 = s.zero;
        for (std::size_t j = 0; j < block; j += 8) group256_f32<L>(s, Load::load(p + (i + j) * es), 0xFFu, i + j);
        flush256_f32<L>(s);
        if (s.zero != z0) {
          stop = s.zero - z0 >= avx2_zero_dense || (last_zero != ~std::size_t{0} && i - last_zero < avx2_zero_near * block);
          last_zero = i;
        }
      }
      if constexpr (G::enabled) gs.end_block16(p + i * es, bmin, bmax);
      if (stop) {
        i += block;
        break;
      }
    } else if constexpr (L >= level::counts) {
      // Optimistic block (as in avx512_f32_kernel): every lane is assumed tame, with no test per vector; the
      // block's min and max of |x| bits check that at its end (|x| bits are below 2^31, so signed compares
      // order them). Two accumulator sets of sums (8 values per lane each) break the add/FMA chains; min and
      // max take one set (their latency is one cycle). A block with a lane that is not tame leaves the
      // snapshot in s untouched and runs again through the exact per-lane path, from L1.
      const __m256i absm = s.absm;
      const __m256 k32 = s.k32;
      __m256i bmin = _mm256_set1_epi32(0x7FFFFFFF), bmax = _mm256_setzero_si256(), nb = _mm256_setzero_si256();
      [[maybe_unused]] __m256 mn = s.vmin, mx = s.vmax;
      [[maybe_unused]] __m256 f1a = _mm256_setzero_ps(), f2a = _mm256_setzero_ps(), f1b = _mm256_setzero_ps(),
                              f2b = _mm256_setzero_ps();
      NANSCOPE_IMPL_UNROLL(1) for (std::size_t j = 0; j < block; j += 16) {  // (not unrolled: fully, it spills)
        _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * es) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
        const __m256 x0 = Load::load(p + (i + j) * es);
        const __m256 x1 = Load::load(p + (i + j + 8) * es);
        if constexpr (H::enabled) {  // hashes elements [0, n / 128 * 128)
          hs.step(x0);
          hs.step(x1);
        }
        const __m256i i0 = _mm256_castps_si256(x0), i1 = _mm256_castps_si256(x1);
        const __m256i a0 = _mm256_and_si256(i0, absm), a1 = _mm256_and_si256(i1, absm);
        bmin = _mm256_min_epi32(bmin, _mm256_min_epi32(a0, a1));
        bmax = _mm256_max_epi32(bmax, _mm256_max_epi32(a0, a1));
        // tame lanes are never zero: the sign bit alone says negative (an arithmetic shift gives -1)
        nb = _mm256_sub_epi32(_mm256_sub_epi32(nb, _mm256_srai_epi32(i0, 31)), _mm256_srai_epi32(i1, 31));
        if constexpr (L == level::stats) {
          mn = _mm256_min_ps(mn, _mm256_min_ps(x0, x1));
          mx = _mm256_max_ps(mx, _mm256_max_ps(x0, x1));
          const __m256 d0 = _mm256_sub_ps(x0, k32), d1 = _mm256_sub_ps(x1, k32);
          f1a = _mm256_add_ps(f1a, d0);
          f2a = _mm256_fmadd_ps(d0, d0, f2a);
          f1b = _mm256_add_ps(f1b, d1);
          f2b = _mm256_fmadd_ps(d1, d1, f2b);
        }
      }
      // bmin >= lo and bmax <= lo + span <=> every lane of the block is tame
      const __m256i hi = _mm256_add_epi32(s.lo, s.span);
      const __m256i badv = _mm256_or_si256(_mm256_cmpgt_epi32(s.lo, bmin), _mm256_cmpgt_epi32(bmax, hi));
      if (__builtin_expect(_mm256_testz_si256(badv, badv) != 0, 1)) {
        s.vneg = _mm256_add_epi32(s.vneg, nb);
        if constexpr (L == level::counts) s.kamax = _mm256_max_epi32(s.kamax, bmax);  // tame: not NaN
        if constexpr (L == level::stats) {
          s.kamin = _mm256_min_epi32(s.kamin, bmin);  // tame: not zero, not NaN
          s.vmin = mn;
          s.vmax = mx;
          // the two sets are added in f32 first (each holds at most 8 values per lane), then widened
          widen_sums256(s, _mm256_add_ps(f1a, f1b), _mm256_add_ps(f2a, f2b));
        }
      } else {
        const std::uint64_t z0 = s.zero;
        for (std::size_t j = 0; j < block; j += 8) group256_f32<L>(s, Load::load(p + (i + j) * es), 0xFFu, i + j);
        flush256_f32<L>(s);
        if (s.zero != z0) {
          stop = s.zero - z0 >= avx2_zero_dense || (last_zero != ~std::size_t{0} && i - last_zero < avx2_zero_near * block);
          last_zero = i;
        }
      }
      if constexpr (G::enabled) gs.end_block(p + i * es, bmin, bmax);
      if (stop) {
        i += block;
        break;
      }
    } else {
      for (std::size_t j = 0; j < block; j += 8) {
        _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * es) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
        const __m256 x = Load::load(p + (i + j) * es);
        if constexpr (H::enabled) hs.step(x);  // hashes elements [0, n / 128 * 128)
        group256_f32<L>(s, x, 0xFFu, i + j);
      }
    }
  }
  if constexpr (H::enabled) *h = hs;
  if constexpr (G::enabled) *g = gs;
  const std::size_t stopped = stop ? i : n;
  if (!stop) {
    for (; i + 8 <= n; i += 8) group256_f32<L>(s, Load::load(p + i * es), 0xFFu, i);
    if (i < n) {
      alignas(32) src tail[8] = {};
      std::memcpy(tail, p + i * es, (n - i) * es);
      group256_f32<L>(s, Load::load(tail), (1u << (n - i)) - 1u, i);
    }
  }
  flush256_f32<L>(s);
  fold256_f32<L, Load>(s, o, any16, smax16, smin16, umax16, umin16);
  return stopped;
}

template <level L, class Load, class H, class G>
NANSCOPE_IMPL_TARGET_AVX2 __attribute__((noinline)) std::size_t avx2_zero_run(const void* vp, std::size_t begin,
                                                                              std::size_t n, const kernel_params& kp,
                                                                              chunk_out& o, H* h,
                                                                              G* g);  // kernel_avx2_zero.hpp

/// One chunk of n elements through the AVX2 f32-compute kernel (sources f32, f16, bf16, decoded fp8): its
/// plain blocks (avx2_f32_run) and, from a block whose per-lane run met zeros, zero blocks while the blocks
/// keep holding them (avx2_zero_run: ReLU outputs, masks, padding, sparse tensors). Both take the hooks'
/// state from h / g and leave it there, and add into o.
template <level L, class Load, class H = kernel_no_hash, class G = kernel_no_hist>
NANSCOPE_IMPL_TARGET_AVX2 inline void avx2_f32_kernel(const void* vp, std::size_t n, const kernel_params& kp,
                                                       chunk_out& o, H* h = nullptr, G* g = nullptr) {
  std::size_t i = avx2_f32_run<L, Load, H, G>(vp, 0, n, kp, o, h, g);
  if constexpr (L >= level::counts) {
    while (i < n) {
      i = avx2_zero_run<L, Load, H, G>(vp, i, n, kp, o, h, g);
      i = avx2_f32_run<L, Load, H, G>(vp, i, n, kp, o, h, g);
    }
  }
}

// ------------------------------------------------------------------------------------------------------
// AVX2, f64
// ------------------------------------------------------------------------------------------------------
/// One chunk of n f64 elements through the AVX2 kernel: optimistic blocks of 64 elements (as in
/// avx512_f64_kernel: no test per vector, two sets of sums local to the block) whose lanes are all tame, i.e.
/// finite and normal, and at the stats level within 2^+-500 (kp.tame_lo64 <= |x| bits <= tame_lo64 +
/// tame_span64). AVX2 has no
/// unsigned 64-bit compares, but |x| bits are below 2^63: off = |x| - lo is negative (sign bit) or above the
/// span (a signed compare) exactly for the lanes that are not tame, and the block ORs both into one vector
/// whose sign bits say "re-run". A block with such a lane runs through the portable kernel from L1, and so do
/// the elements past the last block, so every count, extremum and long-double sum is the portable kernel's.
template <level L>
NANSCOPE_IMPL_TARGET_AVX2 inline void avx2_f64_kernel(const void* vp, std::size_t n, const kernel_params& kp, chunk_out& o) {
  const auto* p = static_cast<const unsigned char*>(vp);  // any alignment: unaligned loads only
  // the portable kernel on elements [i, i + m), with first_nf as an index within the chunk
  auto exact = [&](std::size_t i, std::size_t m) {
    const bool had = o.first_nf >= 0;
    scalar_kernel_impl<L>(dec_f64{}, p + i * 8, m, kp, o);
    if (!had && o.first_nf >= 0) o.first_nf += static_cast<std::int64_t>(i);
  };
  std::size_t i = 0;
  if constexpr (L >= level::counts) {
    constexpr std::size_t block = 64;
    const __m256i absm = _mm256_set1_epi64x(static_cast<long long>(f64_abs_mask));
    const __m256i lo = _mm256_set1_epi64x(static_cast<long long>(kp.tame_lo64));
    const __m256i span = _mm256_set1_epi64x(static_cast<long long>(kp.tame_span64));
    const __m256d k = _mm256_set1_pd(kp.k64);
    __m256d vmin = _mm256_set1_pd(std::numeric_limits<double>::infinity());
    __m256d vmax = _mm256_set1_pd(-std::numeric_limits<double>::infinity());
    __m256d vamin = vmin, vamax = _mm256_setzero_pd();
    __m256d s1 = _mm256_setzero_pd(), s2 = _mm256_setzero_pd();
    __m256i vneg = _mm256_setzero_si256();
    std::uint64_t nacc = 0;
    for (; i + block <= n; i += block) {
      __m256i bad = _mm256_setzero_si256(), bneg = _mm256_setzero_si256();
      __m256d mn = vmin, mx = vmax, amn = vamin, amx = vamax;
      __m256d a0 = _mm256_setzero_pd(), a1 = a0, q0 = a0, q1 = a0;
      NANSCOPE_IMPL_UNROLL(2) for (std::size_t j = 0; j < block; j += 8) {
        _mm_prefetch(reinterpret_cast<const char*>(p + (i + j) * 8) + NANSCOPE_IMPL_PREFETCH_BYTES, _MM_HINT_T0);
        const __m256d x0 = _mm256_loadu_pd(reinterpret_cast<const double*>(p + (i + j) * 8));
        const __m256d x1 = _mm256_loadu_pd(reinterpret_cast<const double*>(p + (i + j + 4) * 8));
        const __m256i i0 = _mm256_castpd_si256(x0), i1 = _mm256_castpd_si256(x1);
        const __m256i b0 = _mm256_and_si256(i0, absm), b1 = _mm256_and_si256(i1, absm);
        const __m256i o0 = _mm256_sub_epi64(b0, lo), o1 = _mm256_sub_epi64(b1, lo);
        bad = _mm256_or_si256(bad, _mm256_or_si256(_mm256_or_si256(o0, _mm256_cmpgt_epi64(o0, span)),
                                                   _mm256_or_si256(o1, _mm256_cmpgt_epi64(o1, span))));
        bneg = _mm256_add_epi64(bneg, _mm256_add_epi64(_mm256_srli_epi64(i0, 63), _mm256_srli_epi64(i1, 63)));
        // tame lanes are normal and not NaN: |x| bits read as doubles order like the values
        if constexpr (L == level::counts)
          amx = _mm256_max_pd(amx, _mm256_max_pd(_mm256_castsi256_pd(b0), _mm256_castsi256_pd(b1)));
        if constexpr (L == level::stats) {
          mn = _mm256_min_pd(mn, _mm256_min_pd(x0, x1));
          mx = _mm256_max_pd(mx, _mm256_max_pd(x0, x1));
          amn = _mm256_min_pd(amn, _mm256_min_pd(_mm256_castsi256_pd(b0), _mm256_castsi256_pd(b1)));
          const __m256d d0 = _mm256_sub_pd(x0, k), d1 = _mm256_sub_pd(x1, k);
          a0 = _mm256_add_pd(a0, d0);
          a1 = _mm256_add_pd(a1, d1);
          q0 = _mm256_fmadd_pd(d0, d0, q0);
          q1 = _mm256_fmadd_pd(d1, d1, q1);
        }
      }
      if (__builtin_expect(_mm256_movemask_pd(_mm256_castsi256_pd(bad)) == 0, 1)) {
        vneg = _mm256_add_epi64(vneg, bneg);
        vamax = amx;
        if constexpr (L == level::stats) {
          vmin = mn;
          vmax = mx;
          vamin = amn;
          s1 = _mm256_add_pd(s1, _mm256_add_pd(a0, a1));
          s2 = _mm256_add_pd(s2, _mm256_add_pd(q0, q1));
          nacc += block;
        }
      } else {
        exact(i, block);
      }
    }
    alignas(32) std::uint64_t nv[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(nv), vneg);
    o.neg += nv[0] + nv[1] + nv[2] + nv[3];
    alignas(32) double t[4];
    if constexpr (L == level::counts) {
      _mm256_store_pd(t, vamax);
      for (const double v : t) o.take_amax(double_to_bits(v));
    }
    if constexpr (L == level::stats) {
      if (nacc != 0) {  // (no tame block: nothing to fold)
        _mm256_store_pd(t, vmin);
        for (const double v : t) o.take_min(key64(double_to_bits(v)));
        _mm256_store_pd(t, vmax);
        for (const double v : t) o.take_max(key64(double_to_bits(v)));
        _mm256_store_pd(t, vamin);
        for (const double v : t) o.take_amin(double_to_bits(v));
      }
      o.n_slow += nacc;  // f64: every double-summed lane is reported in `slow` (shift k64)
      o.slow_s1 += hsum256(s1);
      o.slow_s2 += hsum256(s2);
    }
  }
  if (i < n) exact(i, n - i);
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#if defined(NANSCOPE_IMPL_POP_DIAGNOSTICS)
#pragma GCC diagnostic pop
#undef NANSCOPE_IMPL_POP_DIAGNOSTICS
#endif
#endif  // NANSCOPE_HAS_X86_SIMD()

#include "kernel_avx2_zero.hpp"  // avx2_zero_run, which avx2_f32_kernel calls

#endif  // NANSCOPE_DETAIL_KERNEL_X86_HPP
