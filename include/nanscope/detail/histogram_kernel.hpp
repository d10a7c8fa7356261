// nanscope — detail/histogram_kernel.hpp: the per-chunk exponent-histogram kernel that rides in the fused
// pass (check.hpp) when nanscope/histogram.hpp asks for it. Internal: include <nanscope/histogram.hpp>.
#ifndef NANSCOPE_DETAIL_HISTOGRAM_KERNEL_HPP
#define NANSCOPE_DETAIL_HISTOGRAM_KERNEL_HPP

#if !defined(NANSCOPE_CHECK_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/histogram_kernel.hpp is internal: include <nanscope/histogram.hpp>"
#endif

#include "../config.hpp"
#include "../dtype.hpp"
#include "kernel_x86.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

// Bins are the biased exponent field of |x| in the *source* dtype: field = |x| bits >> mantissa bits.
// Field 0 holds zeros and subnormals, the all-ones field inf and NaN (e4m3fn: normals and its one NaN).
// Beside the bins, the pass counts #{|x| bits >= b[k]} for the margins' boundary patterns b[k] (margins.hpp)
// with the margins' own integer-compare kernels, on the same chunk while it is in cache: zero, NaN, inf and
// every low-precision margin come out exact from these, with no second pass over the tensor.
inline constexpr unsigned hist_max_bins = 2048;  // f64: 11-bit exponent field
inline constexpr int hist_max_bounds = 16;
inline constexpr unsigned hist_copies = 4;       // interleaved sub-histograms: no store-to-load chains

/// Counts #{|x| bits >= b[k]} over n raw elements (any alignment) and adds them to ge[k] (histogram.hpp
/// points it at the margins kernels: check.hpp cannot include margins.hpp, which is built on it).
using hist_ge_fn = void (*)(const void* p, dtype t, std::size_t n, std::uint8_t isa_code, std::uint64_t* ge);

/// What the fused pass needs to histogram one dtype (built by histogram.hpp, shared by every segment).
struct hist_setup {
  dtype type = dtype::f32;
  unsigned shift = 0;  // mantissa bits of the source dtype
  unsigned nbins = 0;  // 1 << exponent bits
  std::uint64_t abs_mask = 0;
  int nbounds = 0;
  hist_ge_fn count_ge = nullptr;
  bool bins = true;  // false: the boundary counts only (fused margins, histogram.hpp)
};

/// The pass-wide accumulator: segments add their integer counts atomically (the sum does not depend on the
/// order, so the result is the same for any thread count).
struct hist_acc {
  const hist_setup* setup = nullptr;
  std::atomic<std::uint64_t> bins[hist_max_bins];
  std::atomic<std::uint64_t> ge[hist_max_bounds];
  hist_acc() {
    for (auto& b : bins) b.store(0, std::memory_order_relaxed);
    for (auto& b : ge) b.store(0, std::memory_order_relaxed);
  }
};

/// One segment's counters (uint32: a segment holds far fewer than 2^32 elements).
struct hist_local {
  std::uint32_t c[hist_max_bins * hist_copies];
  std::uint64_t ge[hist_max_bounds];

  void reset(const hist_setup& s) {
    if (s.bins) std::memset(c, 0, sizeof(std::uint32_t) * s.nbins * hist_copies);
    for (auto& b : ge) b = 0;
  }
  void flush(const hist_setup& s, hist_acc& acc) const {
    for (unsigned e = 0; e < (s.bins ? s.nbins : 0u); ++e) {
      std::uint64_t t = 0;
      for (unsigned j = 0; j < hist_copies; ++j) t += c[e * hist_copies + j];
      if (t != 0) acc.bins[e].fetch_add(t, std::memory_order_relaxed);
    }
    for (int k = 0; k < s.nbounds; ++k)
      if (ge[k] != 0) acc.ge[k].fetch_add(ge[k], std::memory_order_relaxed);
  }
};

template <class U>
inline void hist_bins_typed(const unsigned char* p, std::size_t n, const hist_setup& s, hist_local& h) {
  const U mask = static_cast<U>(s.abs_mask);
  const unsigned sh = s.shift;
  std::uint32_t* c = h.c;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    U x[4];
    std::memcpy(x, p + i * sizeof(U), sizeof x);  // any alignment
    ++c[static_cast<unsigned>(static_cast<U>(x[0] & mask) >> sh) * hist_copies + 0];
    ++c[static_cast<unsigned>(static_cast<U>(x[1] & mask) >> sh) * hist_copies + 1];
    ++c[static_cast<unsigned>(static_cast<U>(x[2] & mask) >> sh) * hist_copies + 2];
    ++c[static_cast<unsigned>(static_cast<U>(x[3] & mask) >> sh) * hist_copies + 3];
  }
  for (; i < n; ++i) {
    U x;
    std::memcpy(&x, p + i * sizeof(U), sizeof x);
    ++c[static_cast<unsigned>(static_cast<U>(x & mask) >> sh) * hist_copies];
  }
}

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/// The exponent field of |x| for 64 elements as 64 bytes (f32: 4 loads; f16 / bf16: 2 loads).
template <unsigned ES, unsigned Shift>
NANSCOPE_IMPL_TARGET_AVX512 inline __m512i hist_fields64(const unsigned char* p) {
  if constexpr (ES == 4) {
    // bits >> 23 keeps sign:exponent in 9 bits; the truncation to a byte drops the sign
    const __m128i a = _mm512_cvtepi32_epi8(_mm512_srli_epi32(_mm512_loadu_si512(p), 23));
    const __m128i b = _mm512_cvtepi32_epi8(_mm512_srli_epi32(_mm512_loadu_si512(p + 64), 23));
    const __m128i c = _mm512_cvtepi32_epi8(_mm512_srli_epi32(_mm512_loadu_si512(p + 128), 23));
    const __m128i d = _mm512_cvtepi32_epi8(_mm512_srli_epi32(_mm512_loadu_si512(p + 192), 23));
    const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
    const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(c), d, 1);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  } else {
    // 16-bit lanes: shift the field down, mask off the sign, narrow to bytes
    const __m512i m = _mm512_set1_epi16(static_cast<short>(0x7FFF >> Shift));
    const __m256i a = _mm512_cvtepi16_epi8(_mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(p), Shift), m));
    const __m256i b = _mm512_cvtepi16_epi8(_mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(p + 64), Shift), m));
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
  }
}

/// Sum of the 64 unsigned bytes of a.
NANSCOPE_IMPL_TARGET_AVX512 inline std::uint32_t hist_sum_bytes(__m512i a) {
  return static_cast<std::uint32_t>(_mm512_reduce_add_epi64(_mm512_sad_epu8(a, _mm512_setzero_si512())));
}

/// AVX-512 bins for f32 / f16 / bf16: byte counters for a window of 16 consecutive exponent fields picked
/// from the chunk's own data, plus field 0 (zeros); fields outside the window are counted one by one. The
/// counts are the same integers as the scalar loop's, for any data.
template <unsigned ES, unsigned Shift>
NANSCOPE_IMPL_TARGET_AVX512 inline std::size_t hist_bins_avx512(const unsigned char* p, std::size_t n, const hist_setup& s,
                                                                hist_local& h) {
  const std::size_t groups = n / 64;
  if (groups == 0) return 0;
  // Window [w0, w0 + 16): ends a little above the largest field among five samples (data rarely spans
  // more than 16 binades below its top).
  unsigned top = 0;
  for (std::size_t k = 0; k < 5; ++k) {
    const std::size_t i = (n - 1) * k / 4;
    std::uint64_t x = 0;
    std::memcpy(&x, p + i * ES, ES);
    const unsigned f = static_cast<unsigned>((x & s.abs_mask) >> Shift);
    if (f + 1 < s.nbins && f > top) top = f;  // not inf/NaN
  }
  const unsigned max_w0 = s.nbins - 16;
  unsigned w0 = top + 2 > 15 ? top + 2 - 15 : 1;
  if (w0 > max_w0) w0 = max_w0;
  if (w0 < 1) w0 = 1;
  std::uint32_t* c = h.c;
  const __m512i base = _mm512_set1_epi8(static_cast<char>(w0));
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i zero = _mm512_setzero_si512();
  alignas(64) unsigned char fields[64];
  for (std::size_t g0 = 0; g0 < groups; g0 += 255) {  // byte counters: at most 255 groups per flush
    const std::size_t g1 = groups - g0 < 255 ? groups : g0 + 255;
    __m512i acc[16];
    for (auto& a : acc) a = zero;
    __m512i acc0 = zero;
    for (std::size_t g = g0; g < g1; ++g) {
      const __m512i f = hist_fields64<ES, Shift>(p + g * 64 * ES);
      const __m512i r = _mm512_sub_epi8(f, base);  // window index, wraps for fields below w0
      const __mmask64 out = _mm512_cmpge_epu8_mask(r, sixteen);
      const __mmask64 z = _mm512_cmpeq_epi8_mask(f, zero);
      acc0 = _mm512_mask_add_epi8(acc0, z, acc0, ones);
      for (int j = 0; j < 16; ++j)
        acc[j] = _mm512_mask_add_epi8(acc[j], _mm512_cmpeq_epi8_mask(r, _mm512_set1_epi8(static_cast<char>(j))), acc[j], ones);
      std::uint64_t rest = static_cast<std::uint64_t>(out & ~z);
      if (rest != 0) {
        _mm512_store_si512(fields, f);
        while (rest != 0) {
          const unsigned l = static_cast<unsigned>(__builtin_ctzll(rest));
          ++c[static_cast<unsigned>(fields[l]) * hist_copies];
          rest &= rest - 1;
        }
      }
    }
    c[0] += hist_sum_bytes(acc0);
    for (unsigned j = 0; j < 16; ++j) c[(w0 + j) * hist_copies] += hist_sum_bytes(acc[j]);
  }
  return groups * 64;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // NANSCOPE_HAS_X86_SIMD()

/// Histograms n contiguous raw elements of the setup's dtype (its bits, any alignment) and counts them
/// against the boundaries, with the instruction set `isa_code` (nanscope::isa's value).
inline void hist_chunk(const void* vp, std::size_t n, std::uint8_t isa_code, const hist_setup& s, hist_local& h) {
  const auto* p = static_cast<const unsigned char*>(vp);
  if (!s.bins) {
    s.count_ge(p, s.type, n, isa_code, h.ge);
    return;
  }
  std::size_t done = 0;
#if NANSCOPE_HAS_X86_SIMD()
  if (isa_code == 3) {  // isa::avx512
    if (s.type == dtype::f32) done = hist_bins_avx512<4, 23>(p, n, s, h);
    else if (s.type == dtype::f16) done = hist_bins_avx512<2, 10>(p, n, s, h);
    else if (s.type == dtype::bf16) done = hist_bins_avx512<2, 7>(p, n, s, h);
  }
#endif
  const unsigned char* q = p + done * size_of(s.type);
  const std::size_t m = n - done;
  switch (size_of(s.type)) {
    case 1: hist_bins_typed<std::uint8_t>(q, m, s, h); break;
    case 2: hist_bins_typed<std::uint16_t>(q, m, s, h); break;
    case 4: hist_bins_typed<std::uint32_t>(q, m, s, h); break;
    default: hist_bins_typed<std::uint64_t>(q, m, s, h); break;
  }
  s.count_ge(p, s.type, n, isa_code, h.ge);
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_HISTOGRAM_KERNEL_HPP
