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
#include <type_traits>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

// Bins are the biased exponent field of |x| in the *source* dtype: field = |x| bits >> mantissa bits.
// Field 0 holds zeros and subnormals, the all-ones field inf and NaN (e4m3fn: normals and its one NaN).
//
// Beside the bins, the margins need #{|x| bits >= b} for boundary patterns b (margins.hpp). Each boundary b
// lies in one field F = b >> mantissa bits, so #{|x| >= b} = (sum of the bins above F) + E, where E counts the
// elements of field F at or above b. E is 0 work when b is F's first pattern (then E is bin F, "clean"), and
// otherwise ("dirty") it is counted exactly, element by element, but only for elements of field F: the
// vector kernel leaves the fields outside its 16-bin window to a scalar path that does it, and a dirty
// boundary whose field lies inside the window is counted directly, #{|x| >= b}, with one compare per vector.
// zero, NaN and inf come from the health counts of the same pass (histogram.hpp).
inline constexpr unsigned hist_max_bins = 2048;  // f64: 11-bit exponent field
inline constexpr int hist_max_bounds = 16;
inline constexpr unsigned hist_copies = 4;       // interleaved sub-histograms: no store-to-load chains

struct hist_setup;
struct hist_local;
/// Runs the health kernel and the bins of one chunk of raw elements in one pass (hist_fused_x86.hpp); false:
/// not for this chunk (dtype, level, instruction set), the caller runs the kernel and then hist_chunk.
using hist_fused_fn = bool (*)(const void* p, dtype t, std::size_t n, level lv, std::uint8_t isa_code,
                               const kernel_params& kp, chunk_out& o, const hist_setup& s, hist_local& h);

/// What the fused pass needs to histogram one dtype (built by histogram.hpp, shared by every segment).
struct hist_setup {
  hist_fused_fn fused = nullptr;
  dtype type = dtype::f32;
  unsigned shift = 0;  // mantissa bits of the source dtype
  unsigned nbins = 0;  // 1 << exponent bits
  std::uint64_t abs_mask = 0;
  int nbounds = 0;                          // boundaries b[0..nbounds)
  int first_bound = 0;                      // boundaries below this come from the health counts
  std::uint64_t b[hist_max_bounds] = {};    // boundary patterns (|x| bits)
  unsigned field[hist_max_bounds] = {};     // b >> shift
  bool dirty[hist_max_bounds] = {};         // b is not its field's first pattern
  unsigned char dirty_field[hist_max_bins] = {};  // 1: some dirty boundary lies in this field
  bool bins = true;  // false: the histogram is not reported (check_margins); the bins are counted anyway
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

/// One segment's counters (uint32 bins: a segment holds far fewer than 2^32 elements). A dirty boundary k is
/// either "direct" (d[k] = #{|x| >= b[k]} over the segment so far) or not (e[k] = #{field F_k, |x| >= b[k]});
/// it is direct while the vector kernel's window holds its field, and switches at a window change.
struct hist_local {
  std::uint32_t c[hist_max_bins * hist_copies];
  std::uint64_t d[hist_max_bounds];
  std::uint64_t e[hist_max_bounds];
  bool direct[hist_max_bounds];
  unsigned w0 = 0;  // the vector window [w0, w0 + 16); 0: none (every dirty boundary indirect)
  int cap0 = hist_max_bounds;  // at most this many direct boundaries

  void reset(const hist_setup& s) {
    std::memset(c, 0, sizeof(std::uint32_t) * s.nbins * hist_copies);
    for (int k = 0; k < hist_max_bounds; ++k) {
      d[k] = e[k] = 0;
      direct[k] = false;
    }
    w0 = 0;
    cap0 = hist_max_bounds;
  }
  std::uint64_t bin(unsigned f) const {
    std::uint64_t t = 0;
    for (unsigned j = 0; j < hist_copies; ++j) t += c[f * hist_copies + j];
    return t;
  }
  /// above[k] = elements so far in the fields above boundary k's field.
  void above_all(const hist_setup& s, std::uint64_t* above) const {
    unsigned lo = s.nbins;  // lowest boundary field: the suffix sums start there
    for (int k = s.first_bound; k < s.nbounds; ++k) lo = s.field[k] < lo ? s.field[k] : lo;
    std::uint64_t suf[hist_max_bins + 1];
    suf[s.nbins] = 0;
    for (unsigned f = s.nbins; f-- > lo;) suf[f] = suf[f + 1] + bin(f);
    for (int k = s.first_bound; k < s.nbounds; ++k) above[k] = suf[s.field[k] + 1];
  }
  /// Whether dirty boundary k counts directly in window w with at most `cap` direct boundaries (the first
  /// `cap` dirty boundaries, in index order, whose field lies in [w, w + 16)).
  static bool wants_direct(const hist_setup& s, unsigned w, int cap, int k) {
    if (w == 0 || !s.dirty[k] || s.field[k] < w || s.field[k] >= w + 16) return false;
    int before = 0;
    for (int j = s.first_bound; j < k; ++j)
      if (s.dirty[j] && s.field[j] >= w && s.field[j] < w + 16) ++before;
    return before < cap;
  }
  /// Moves to the vector window w (0: none): from now on the dirty boundaries wants_direct picks count
  /// directly, the others through hist_dirty.
  void set_window(const hist_setup& s, unsigned w, int cap = hist_max_bounds) {
    if (w == w0 && cap == cap0) return;
    bool change = false;
    for (int k = s.first_bound; k < s.nbounds; ++k)
      if (wants_direct(s, w, cap, k) != direct[k]) change = true;
    w0 = w;
    cap0 = cap;
    if (!change) return;
    std::uint64_t up[hist_max_bounds];
    above_all(s, up);
    for (int k = s.first_bound; k < s.nbounds; ++k) {
      const bool want = wants_direct(s, w, cap, k);
      if (want == direct[k]) continue;
      if (want) d[k] = up[k] + e[k];
      else e[k] = d[k] - up[k];
      direct[k] = want;
    }
  }
  void flush(const hist_setup& s, hist_acc& acc) const {
    for (unsigned f = 0; f < s.nbins; ++f) {
      const std::uint64_t t = bin(f);
      if (t != 0) acc.bins[f].fetch_add(t, std::memory_order_relaxed);
    }
    std::uint64_t up[hist_max_bounds];
    above_all(s, up);
    for (int k = s.first_bound; k < s.nbounds; ++k) {
      // #{|x| >= b[k]} over the segment
      const std::uint64_t g = s.dirty[k] ? (direct[k] ? d[k] : up[k] + e[k]) : up[k] + bin(s.field[k]);
      if (g != 0) acc.ge[k].fetch_add(g, std::memory_order_relaxed);
    }
  }
};

/// The exact per-element work for one |x| pattern a of field f that the vector bins did not see: its dirty
/// boundaries that are not counted directly.
inline void hist_dirty(const hist_setup& s, hist_local& h, std::uint64_t a, unsigned f) {
  if (s.dirty_field[f] == 0) return;
  for (int k = s.first_bound; k < s.nbounds; ++k)
    if (s.dirty[k] && !h.direct[k] && s.field[k] == f && a >= s.b[k]) ++h.e[k];
}

/// The vector window [w0, w0 + 16) for a chunk of n elements of type U at p: the current one while five samples
/// of the chunk stay inside it (and it was set with at most `cap` direct boundaries), else one that ends a
/// little above the largest sampled field (data rarely spans more than 16 binades below its top), at most
/// max_w0.
template <class U, unsigned Shift>
inline unsigned hist_pick_window(const hist_setup& s, const hist_local& h, const unsigned char* p, std::size_t n,
                                 unsigned max_w0, int cap) {
  unsigned top = 0;
  bool inside = h.w0 != 0 && h.cap0 == cap;
  for (std::size_t k = 0; k < 5; ++k) {
    U x;
    std::memcpy(&x, p + (n - 1) * k / 4 * sizeof(U), sizeof(U));
    const unsigned f = static_cast<unsigned>((x & static_cast<U>(s.abs_mask)) >> Shift);
    if (f + 1 < s.nbins && f > top) top = f;  // not inf / NaN
    if (f != 0 && (f < h.w0 || f >= h.w0 + 16)) inside = false;
  }
  if (inside) return h.w0;
  unsigned w = top + 2 > 15 ? top + 2 - 15 : 1;
  if (w > max_w0) w = max_w0;
  return w < 1 ? 1 : w;
}

/// Scalar bins and boundary counts of n raw elements (any alignment); `direct` also counts the direct
/// boundaries (elements the vector kernel did not compare).
template <class U>
inline void hist_scalar_typed(const unsigned char* p, std::size_t n, const hist_setup& s, hist_local& h, bool direct) {
  const U mask = static_cast<U>(s.abs_mask);
  const unsigned sh = s.shift;
  std::uint32_t* c = h.c;
  int nd = 0;
  int dk[hist_max_bounds];
  if (direct)
    for (int k = s.first_bound; k < s.nbounds; ++k)
      if (s.dirty[k] && h.direct[k]) dk[nd++] = k;
  for (std::size_t i = 0; i < n; ++i) {
    U x;
    std::memcpy(&x, p + i * sizeof(U), sizeof x);
    const U a = static_cast<U>(x & mask);
    const unsigned f = static_cast<unsigned>(a >> sh);
    ++c[f * hist_copies + (i & (hist_copies - 1))];
    if (s.dirty_field[f] != 0) hist_dirty(s, h, a, f);
    for (int j = 0; j < nd; ++j) h.d[dk[j]] += a >= static_cast<U>(s.b[dk[j]]) ? 1u : 0u;
  }
}

inline void hist_scalar(const unsigned char* p, std::size_t n, const hist_setup& s, hist_local& h, bool direct) {
  switch (size_of(s.type)) {
    case 1: hist_scalar_typed<std::uint8_t>(p, n, s, h, direct); break;
    case 2: hist_scalar_typed<std::uint16_t>(p, n, s, h, direct); break;
    case 4: hist_scalar_typed<std::uint32_t>(p, n, s, h, direct); break;
    default: hist_scalar_typed<std::uint64_t>(p, n, s, h, direct); break;
  }
}

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
/// The exponent field of |x| for 64 elements as 64 bytes, in element order (f32: 4 loads; f16 / bf16: 2).
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

/// Mask of the 64 elements at p whose |x| is exactly 0.
template <unsigned ES>
NANSCOPE_IMPL_TARGET_AVX512 inline std::uint64_t hist_zero_mask64(const unsigned char* p) {
  if constexpr (ES == 4) {
    const __m512i m = _mm512_set1_epi32(0x7FFFFFFF);
    std::uint64_t z = 0;
    for (int j = 0; j < 4; ++j)
      z |= static_cast<std::uint64_t>(mask_bits(_mm512_testn_epi32_mask(_mm512_loadu_si512(p + 64 * j), m))) << (16 * j);
    return z;
  } else {
    const __m512i m = _mm512_set1_epi16(0x7FFF);
    return mask_bits(_mm512_testn_epi16_mask(_mm512_loadu_si512(p), m)) |
           (mask_bits(_mm512_testn_epi16_mask(_mm512_loadu_si512(p + 64), m)) << 32);
  }
}

/// Sums of the low and high nibbles of the 64 bytes of a, added to lo and hi (per 64-bit lane).
NANSCOPE_IMPL_TARGET_AVX512 inline void hist_nibble_flush(__m512i a, __m512i& lo, __m512i& hi) {
  const __m512i m = _mm512_set1_epi8(0x0F);
  const __m512i z = _mm512_setzero_si512();
  lo = _mm512_add_epi64(lo, _mm512_sad_epu8(_mm512_and_si512(a, m), z));
  hi = _mm512_add_epi64(hi, _mm512_sad_epu8(_mm512_and_si512(_mm512_srli_epi16(a, 4), m), z));
}

/// AVX-512 bins for f32 / f16 / bf16 over whole groups of 64 elements: a window of 16 consecutive exponent
/// fields picked from the chunk's own data is counted with nibble counters (a byte shuffle turns a field into
/// 1 or 16 in one of 8 accumulators), field 0 with byte counters, the rest one by one; dirty boundaries in
/// the window are counted directly. The counts are the same integers as the scalar loop's, for any data.
template <unsigned ES, unsigned Shift>
NANSCOPE_IMPL_TARGET_AVX512 inline std::size_t hist_bins_avx512(const unsigned char* p, std::size_t n, const hist_setup& s,
                                                                hist_local& h) {
  using U = std::conditional_t<ES == 4, std::uint32_t, std::uint16_t>;
  const std::size_t groups = n / 64;
  if (groups == 0) return 0;
  // Window [w0, w0 + 16): ends a little above the largest field among five samples (data rarely spans
  // more than 16 binades below its top). Kept while the samples stay inside it.
  h.set_window(s, hist_pick_window<U, Shift>(s, h, p, n, s.nbins - 16, hist_max_bounds), hist_max_bounds);
  const unsigned w0 = h.w0;
  // The direct boundaries (dirty, field in the window), compared on |x| bits.
  int nd = 0;
  int dk[hist_max_bounds];
  for (int k = s.first_bound; k < s.nbounds; ++k)
    if (s.dirty[k] && h.direct[k]) dk[nd++] = k;
  // direct counts per lane: at most 4 * 8192 / 16 (f32) or 2 * 8192 / 32 (16-bit) per chunk, no overflow
  __m512i bvec[hist_max_bounds], dacc[hist_max_bounds];
  const __m512i minus1 = _mm512_set1_epi32(-1);
  const __m512i absm = ES == 4 ? _mm512_set1_epi32(0x7FFFFFFF) : _mm512_set1_epi16(0x7FFF);
  for (int j = 0; j < nd; ++j) {
    bvec[j] = ES == 4 ? _mm512_set1_epi32(static_cast<int>(s.b[dk[j]])) : _mm512_set1_epi16(static_cast<short>(s.b[dk[j]]));
    dacc[j] = _mm512_setzero_si512();
  }
  const __m512i b0 = nd > 0 ? bvec[0] : absm, b1 = nd > 1 ? bvec[1] : absm;
  __m512i d0 = _mm512_setzero_si512(), d1 = _mm512_setzero_si512();
  std::uint32_t* c = h.c;
  const __m512i base = _mm512_set1_epi8(static_cast<char>(w0));
  const __m512i ones = _mm512_set1_epi8(1);
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i zero = _mm512_setzero_si512();
  // lut[m] byte i: 1 when i == 2m, 16 when i == 2m + 1 (nibble counters for window bins 2m and 2m + 1)
  __m512i lut[8];
  for (int m = 0; m < 8; ++m) {
    alignas(64) unsigned char t[64] = {};
    for (int l = 0; l < 4; ++l) {
      t[16 * l + 2 * m] = 1;
      t[16 * l + 2 * m + 1] = 16;
    }
    lut[m] = _mm512_load_si512(t);
  }
  __m512i slo[8], shi[8];  // nibble sums per 64-bit lane
  for (int m = 0; m < 8; ++m) slo[m] = shi[m] = zero;
  __m512i acc0 = zero;
  std::size_t since0 = 0;
  alignas(64) unsigned char fields[64];
  for (std::size_t g0 = 0; g0 < groups; g0 += 15) {  // nibble counters: at most 15 groups per flush
    const std::size_t g1 = groups - g0 < 15 ? groups : g0 + 15;
    __m512i acc[8];
    NANSCOPE_IMPL_UNROLL(8) for (auto& a : acc) a = zero;
    for (std::size_t g = g0; g < g1; ++g) {
      const unsigned char* q = p + g * 64 * ES;
      const __m512i f = hist_fields64<ES, Shift>(q);
      const __m512i r = _mm512_sub_epi8(f, base);  // window index, wraps for fields below w0
      const __mmask64 in = _mm512_cmplt_epu8_mask(r, sixteen);
      const __mmask64 z = _mm512_cmpeq_epi8_mask(f, zero);
      acc0 = _mm512_mask_add_epi8(acc0, z, acc0, ones);
      NANSCOPE_IMPL_UNROLL(8) for (int m = 0; m < 8; ++m) acc[m] = _mm512_add_epi8(acc[m], _mm512_maskz_shuffle_epi8(in, lut[m], r));
      if (nd != 0) {  // |x| bits of the group once, then one compare per vector and direct boundary
        __m512i av[4];
        NANSCOPE_IMPL_UNROLL(4) for (unsigned v = 0; v < (ES == 4 ? 4u : 2u); ++v)
          av[v] = _mm512_and_si512(_mm512_loadu_si512(q + 64 * v), absm);
        // the first two in registers (typical data has one or two dirty fields in the window), others in memory
        NANSCOPE_IMPL_UNROLL(4) for (unsigned v = 0; v < (ES == 4 ? 4u : 2u); ++v) {
          if constexpr (ES == 4) {
            d0 = _mm512_mask_sub_epi32(d0, _mm512_cmpge_epu32_mask(av[v], b0), d0, minus1);
            if (nd > 1) d1 = _mm512_mask_sub_epi32(d1, _mm512_cmpge_epu32_mask(av[v], b1), d1, minus1);
          } else {
            d0 = _mm512_mask_sub_epi16(d0, _mm512_cmpge_epu16_mask(av[v], b0), d0, minus1);
            if (nd > 1) d1 = _mm512_mask_sub_epi16(d1, _mm512_cmpge_epu16_mask(av[v], b1), d1, minus1);
          }
        }
        for (int j = 2; j < nd; ++j) {
          NANSCOPE_IMPL_UNROLL(4) for (unsigned v = 0; v < (ES == 4 ? 4u : 2u); ++v) {
            if constexpr (ES == 4)
              dacc[j] = _mm512_mask_sub_epi32(dacc[j], _mm512_cmpge_epu32_mask(av[v], bvec[j]), dacc[j], minus1);
            else
              dacc[j] = _mm512_mask_sub_epi16(dacc[j], _mm512_cmpge_epu16_mask(av[v], bvec[j]), dacc[j], minus1);
          }
        }
      }
      std::uint64_t rest = static_cast<std::uint64_t>(~in & ~z);
      if (z != 0) {
        // field 0 is counted above; its non-zero (subnormal) elements still meet the dirty boundaries there
        rest |= static_cast<std::uint64_t>(z) & ~hist_zero_mask64<ES>(q);
      }
      if (rest != 0) {
        _mm512_store_si512(fields, f);
        while (rest != 0) {
          const unsigned l = static_cast<unsigned>(__builtin_ctzll(rest));
          const unsigned fl = fields[l];
          if (fl != 0) ++c[fl * hist_copies];
          U x;
          std::memcpy(&x, q + l * ES, ES);
          hist_dirty(s, h, static_cast<std::uint64_t>(x & static_cast<U>(s.abs_mask)), fl);
          rest &= rest - 1;
        }
      }
      if (++since0 == 255) {
        c[0] += static_cast<std::uint32_t>(_mm512_reduce_add_epi64(_mm512_sad_epu8(acc0, zero)));
        acc0 = zero;
        since0 = 0;
      }
    }
    NANSCOPE_IMPL_UNROLL(8) for (int m = 0; m < 8; ++m) hist_nibble_flush(acc[m], slo[m], shi[m]);
  }
  c[0] += static_cast<std::uint32_t>(_mm512_reduce_add_epi64(_mm512_sad_epu8(acc0, zero)));
  for (int m = 0; m < 8; ++m) {
    c[(w0 + 2 * static_cast<unsigned>(m)) * hist_copies] += static_cast<std::uint32_t>(_mm512_reduce_add_epi64(slo[m]));
    c[(w0 + 2 * static_cast<unsigned>(m) + 1) * hist_copies] += static_cast<std::uint32_t>(_mm512_reduce_add_epi64(shi[m]));
  }
  if (nd > 0) dacc[0] = d0;
  if (nd > 1) dacc[1] = d1;
  for (int j = 0; j < nd; ++j) {
    const __m512i w = ES == 4 ? dacc[j]
                              : _mm512_add_epi32(_mm512_and_si512(dacc[j], _mm512_set1_epi32(0xFFFF)),
                                                 _mm512_srli_epi32(dacc[j], 16));
    h.d[dk[j]] += static_cast<std::uint64_t>(_mm512_reduce_add_epi32(w));
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
  std::size_t done = 0;
#if NANSCOPE_HAS_X86_SIMD()
  if (isa_code == 3) {  // isa::avx512
    if (s.type == dtype::f32) done = hist_bins_avx512<4, 23>(p, n, s, h);
    else if (s.type == dtype::f16) done = hist_bins_avx512<2, 10>(p, n, s, h);
    else if (s.type == dtype::bf16) done = hist_bins_avx512<2, 7>(p, n, s, h);
  }
#endif
  if (done == 0) h.set_window(s, 0);  // every dirty boundary through the scalar path
  hist_scalar(p + done * size_of(s.type), n - done, s, h, true);
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_HISTOGRAM_KERNEL_HPP
