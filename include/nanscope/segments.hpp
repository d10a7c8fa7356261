// nanscope — segments.hpp: segmented checks: which request, expert or KV block holds NaN/Inf, in the same read.
//
//   std::vector<std::int64_t> rows = {0, 7, 7, 19, 32};            // 4 requests' token rows (one is empty)
//   std::vector<std::int64_t> ids = {101, 102, 103, 104};
//   auto r = nanscope::check(logits, nanscope::segments::rows(rows).with_ids(ids));
//   for (const nanscope::segment_health& s : r.bad) abort_request(s.id);    // r.total == nanscope::check(logits)
//
// A segmentation cuts the tensor's logical (row-major) order into consecutive ranges: along the first dimension
// (rows) or along the flat index (elements), given as ascending offsets or as a uniform size (KV blocks). The
// pass is check()'s own: same chunks, same kernel, same order, so `total` is bit-identical to check(view, opt);
// the kernel's per-chunk output is folded into the segment that owns the chunk, and only a chunk that straddles
// a segment boundary (or holds a NaN/Inf) is looked at again, while it is still in L1/L2, piece by piece: segment
// lookup costs nothing per element. Results are identical for any thread count.
#ifndef NANSCOPE_SEGMENTS_HPP
#define NANSCOPE_SEGMENTS_HPP

#include "check.hpp"
#include "margins.hpp"
#include "segments_api.hpp"

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

namespace detail {

/// Bit patterns of a source dtype's |x|: the first NaN/Inf pattern (every |x| pattern at or above it is NaN/Inf;
/// margins.hpp's margin_inf_pattern); none for integer dtypes.
inline std::uint64_t seg_bad_abs_bits(dtype t) { return is_float(t) ? margin_inf_pattern(t) : ~std::uint64_t{0}; }

/// Max of the |x| bit patterns of n elements of a float dtype (any alignment): portable version.
template <class U>
inline std::uint64_t seg_max_abs_portable(const unsigned char* p, std::size_t n, U mask) {
  U m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    U x;
    std::memcpy(&x, p + i * sizeof(U), sizeof(U));
    x = static_cast<U>(x & mask);
    m = x > m ? x : m;
  }
  return m;
}

#if NANSCOPE_HAS_X86_SIMD()
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <std::size_t ES>
NANSCOPE_IMPL_TARGET_AVX2 inline __m256i seg_max256(__m256i a, __m256i b) {
  if constexpr (ES == 4) return _mm256_max_epu32(a, b);
  else if constexpr (ES == 2) return _mm256_max_epu16(a, b);
  else return _mm256_max_epu8(a, b);
}
template <std::size_t ES>
NANSCOPE_IMPL_TARGET_AVX512 inline __m512i seg_max512(__m512i a, __m512i b) {
  if constexpr (ES == 8) return _mm512_max_epu64(a, b);
  else if constexpr (ES == 4) return _mm512_max_epu32(a, b);
  else if constexpr (ES == 2) return _mm512_max_epu16(a, b);
  else return _mm512_max_epu8(a, b);
}
/// The largest unsigned lane of a 128-bit vector of ES-byte lanes.
template <std::size_t ES>
NANSCOPE_IMPL_TARGET_AVX2 inline std::uint64_t seg_hmax128(__m128i m) {
  if constexpr (ES == 8) {
    const auto a = static_cast<std::uint64_t>(_mm_cvtsi128_si64(m)), b = static_cast<std::uint64_t>(_mm_extract_epi64(m, 1));
    return a > b ? a : b;
  } else if constexpr (ES == 4) {
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0x4E));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, 0xB1));
    return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m));
  } else if constexpr (ES == 2) {  // max = ~min(~x), and phminposuw finds the min
    const __m128i inv = _mm_xor_si128(m, _mm_set1_epi32(-1));
    return 0xFFFFu & ~static_cast<std::uint32_t>(_mm_cvtsi128_si32(_mm_minpos_epu16(inv)));
  } else {
    m = _mm_max_epu8(m, _mm_srli_si128(m, 8));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 4));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 2));
    m = _mm_max_epu8(m, _mm_srli_si128(m, 1));
    return static_cast<std::uint32_t>(_mm_cvtsi128_si32(m)) & 0xFFu;
  }
}
template <std::size_t ES>
NANSCOPE_IMPL_TARGET_AVX2 inline __m128i seg_max128(__m128i a, __m128i b) {
  if constexpr (ES == 4) return _mm_max_epu32(a, b);
  else if constexpr (ES == 2) return _mm_max_epu16(a, b);
  else return _mm_max_epu8(a, b);
}

template <class U>
inline constexpr U seg_abs_mask() {
  return static_cast<U>(~U{0} >> 1);
}

/// The same with AVX2, for 1-, 2- and 4-byte elements: 4 vectors of 32 bytes per step.
template <class U>
NANSCOPE_IMPL_TARGET_AVX2 inline std::uint64_t seg_max_abs_avx2(const unsigned char* p, std::size_t n) {
  constexpr std::size_t es = sizeof(U);
  const std::size_t bytes = n * es;
  __m256i mask;
  if constexpr (es == 4) mask = _mm256_set1_epi32(0x7FFFFFFF);
  else if constexpr (es == 2) mask = _mm256_set1_epi16(0x7FFF);
  else mask = _mm256_set1_epi8(0x7F);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    a0 = seg_max256<es>(a0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), mask));
    a1 = seg_max256<es>(a1, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)), mask));
    a2 = seg_max256<es>(a2, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)), mask));
    a3 = seg_max256<es>(a3, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)), mask));
  }
  a0 = seg_max256<es>(seg_max256<es>(a0, a1), seg_max256<es>(a2, a3));
  for (; i + 32 <= bytes; i += 32)
    a0 = seg_max256<es>(a0, _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), mask));
  if constexpr (es == 4) {  // the last 1-7 elements: a masked load (the masked-off lanes read as 0)
    if (i < bytes) {
      const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
      const __m256i live = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>((bytes - i) / 4)), lane);
      a0 = seg_max256<es>(a0, _mm256_and_si256(_mm256_maskload_epi32(reinterpret_cast<const int*>(p + i), live), mask));
      i = bytes;
    }
  }
  const std::uint64_t v =
      seg_hmax128<es>(seg_max128<es>(_mm256_castsi256_si128(a0), _mm256_extracti128_si256(a0, 1)));
  const std::uint64_t rest = seg_max_abs_portable<U>(p + i, (bytes - i) / es, seg_abs_mask<U>());
  return rest > v ? rest : v;
}
/// 8-byte elements with AVX2 (no unsigned 64-bit max): |x| patterns are below 2^63, a signed compare orders them.
template <>
NANSCOPE_IMPL_TARGET_AVX2 inline std::uint64_t seg_max_abs_avx2<std::uint64_t>(const unsigned char* p, std::size_t n) {
  const std::size_t bytes = n * 8;
  const __m256i mask = _mm256_set1_epi64x(0x7FFFFFFFFFFFFFFFll);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0;
  std::size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m256i x0 = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)), mask);
    const __m256i x1 = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)), mask);
    a0 = _mm256_blendv_epi8(a0, x0, _mm256_cmpgt_epi64(x0, a0));
    a1 = _mm256_blendv_epi8(a1, x1, _mm256_cmpgt_epi64(x1, a1));
  }
  a0 = _mm256_blendv_epi8(a0, a1, _mm256_cmpgt_epi64(a1, a0));
  alignas(32) unsigned char lanes[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), a0);
  const std::uint64_t v = seg_max_abs_portable<std::uint64_t>(lanes, 4, ~std::uint64_t{0});
  const std::uint64_t rest = seg_max_abs_portable<std::uint64_t>(p + i, (bytes - i) / 8, seg_abs_mask<std::uint64_t>());
  return rest > v ? rest : v;
}

/// The same with AVX-512 (F, BW): 4 vectors of 64 bytes per step.
template <class U>
NANSCOPE_IMPL_TARGET_AVX512 inline std::uint64_t seg_max_abs_avx512(const unsigned char* p, std::size_t n) {
  constexpr std::size_t es = sizeof(U);
  const std::size_t bytes = n * es;
  __m512i mask;
  if constexpr (es == 8) mask = _mm512_set1_epi64(0x7FFFFFFFFFFFFFFFll);
  else if constexpr (es == 4) mask = _mm512_set1_epi32(0x7FFFFFFF);
  else if constexpr (es == 2) mask = _mm512_set1_epi16(0x7FFF);
  else mask = _mm512_set1_epi8(0x7F);
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  std::size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    a0 = seg_max512<es>(a0, _mm512_and_si512(_mm512_loadu_si512(p + i), mask));
    a1 = seg_max512<es>(a1, _mm512_and_si512(_mm512_loadu_si512(p + i + 64), mask));
    a2 = seg_max512<es>(a2, _mm512_and_si512(_mm512_loadu_si512(p + i + 128), mask));
    a3 = seg_max512<es>(a3, _mm512_and_si512(_mm512_loadu_si512(p + i + 192), mask));
  }
  a0 = seg_max512<es>(seg_max512<es>(a0, a1), seg_max512<es>(a2, a3));
  for (; i + 64 <= bytes; i += 64) a0 = seg_max512<es>(a0, _mm512_and_si512(_mm512_loadu_si512(p + i), mask));
  if (i < bytes) {  // the last bytes: a masked load (masked-off bytes read as 0 and are not touched in memory)
    const __mmask64 live = _cvtu64_mask64((~std::uint64_t{0}) >> (64 - (bytes - i)));
    a0 = seg_max512<es>(a0, _mm512_and_si512(_mm512_maskz_loadu_epi8(live, p + i), mask));
  }
  if constexpr (es == 8) return _mm512_reduce_max_epu64(a0);
  if constexpr (es == 4) return _mm512_reduce_max_epu32(a0);
  const __m256i h = seg_max256<es>(_mm512_castsi512_si256(a0), _mm512_extracti64x4_epi64(a0, 1));
  return seg_hmax128<es>(seg_max128<es>(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1)));
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // NANSCOPE_HAS_X86_SIMD()

/// Max |x| bit pattern (in the source format) of n elements of dtype t at p, with the pass's instruction set.
inline std::uint64_t seg_max_abs(const unsigned char* p, std::size_t n, dtype t, std::uint8_t isa_code) {
  const std::size_t es = size_of(t);
#if NANSCOPE_HAS_X86_SIMD()
  if (isa_code == static_cast<std::uint8_t>(isa::avx512)) {
    switch (es) {
      case 8: return seg_max_abs_avx512<std::uint64_t>(p, n);
      case 4: return seg_max_abs_avx512<std::uint32_t>(p, n);
      case 2: return seg_max_abs_avx512<std::uint16_t>(p, n);
      default: return seg_max_abs_avx512<std::uint8_t>(p, n);
    }
  }
  if (isa_code == static_cast<std::uint8_t>(isa::avx2)) {
    switch (es) {
      case 8: return seg_max_abs_avx2<std::uint64_t>(p, n);
      case 4: return seg_max_abs_avx2<std::uint32_t>(p, n);
      case 2: return seg_max_abs_avx2<std::uint16_t>(p, n);
      default: return seg_max_abs_avx2<std::uint8_t>(p, n);
    }
  }
#else
  (void)isa_code;
#endif
  switch (es) {
    case 8: return seg_max_abs_portable<std::uint64_t>(p, n, 0x7FFFFFFFFFFFFFFFull);
    case 4: return seg_max_abs_portable<std::uint32_t>(p, n, 0x7FFFFFFFu);
    case 2: return seg_max_abs_portable<std::uint16_t>(p, n, 0x7FFFu);
    default: return seg_max_abs_portable<std::uint8_t>(p, n, 0x7Fu);
  }
}

/// |x| of a source |x| bit pattern (not NaN), as the bits of a double.
inline std::uint64_t seg_abs_double_bits(std::uint64_t abs_bits, dtype t) {
  unsigned char b[8] = {};
  switch (size_of(t)) {
    case 8: std::memcpy(b, &abs_bits, 8); break;
    case 4: {
      const auto v = static_cast<std::uint32_t>(abs_bits);
      std::memcpy(b, &v, 4);
      break;
    }
    case 2: {
      const auto v = static_cast<std::uint16_t>(abs_bits);
      std::memcpy(b, &v, 2);
      break;
    }
    default: b[0] = static_cast<unsigned char>(abs_bits); break;
  }
  return double_to_bits(load_as_double(b, t, 0)) & f64_abs_mask;
}

inline void seg_take_first(std::int64_t& a, std::int64_t b) {
  if (b >= 0 && (a < 0 || b < a)) a = b;
}
inline void seg_take_amax(double& a, std::uint64_t abs_bits) {
  if (abs_bits > double_to_bits(a)) a = bits_to_double(abs_bits);
}
/// Folds one partial record into another (counts add, first is the earliest, abs_max the largest): exact and
/// order-free, so any thread count gives the same records.
inline void seg_fold(segment_counts& a, const segment_counts& b) {
  a.nan += b.nan;
  a.neg_inf += b.neg_inf;
  a.pos_inf += b.pos_inf;
  seg_take_first(a.first_nonfinite, b.first_nonfinite);
  seg_take_amax(a.abs_max, double_to_bits(b.abs_max));
}

/// Per parallel segment (check.hpp's segment_elems): the user segments it touches first and last may be shared
/// with its neighbours, so its contributions to them go to two records of its own, folded in after the pass.
/// Sparse (segment_detail::flags): only the segments something is recorded for, as (segment, record) events in
/// ascending segment order; nothing per segment is allocated.
struct seg_par_state {
  std::uint64_t first_seg = 0, last_seg = 0, cur = 0;
  segment_counts edge[2];
  std::vector<std::pair<std::uint64_t, segment_counts>> events;
};

struct seg_pass {
  dtype type = dtype::f32;
  level lv = level::nonfinite;
  bool need_amax = false;          // pieces' |x| max: for abs_max (counts detail) or the threshold
  bool exact_amax = false;         // every segment's abs_max (counts detail); else only "over the threshold"
  std::uint64_t thr_bits = 0;      // the threshold's bits (flags detail: chunks whose max is not over are skipped)
  const std::int64_t* offsets = nullptr;
  std::uint64_t uniform = 0;       // units per segment when offsets is null
  std::uint64_t extent = 0;        // units along the axis
  std::uint64_t unit = 1;          // elements per unit
  std::uint64_t nseg = 0;
  std::uint64_t bad_lo = 0;        // seg_bad_abs_bits(type)
  segment_counts* acc = nullptr;   // nseg records (abs_max holds +0 until the end: a max by bit pattern)
  seg_par_state* par = nullptr;

  std::uint64_t seg_begin(std::uint64_t s) const {
    if (offsets != nullptr) return static_cast<std::uint64_t>(offsets[s]) * unit;
    const std::uint64_t u = s * uniform;
    return (u < extent ? u : extent) * unit;
  }
  std::uint64_t seg_end(std::uint64_t s) const { return seg_begin(s + 1); }
  /// The segment holding flat element e (< the element count): the last s with seg_begin(s) <= e; empty segments
  /// are skipped (their begin equals the next one's).
  std::uint64_t find(std::uint64_t e) const {
    if (offsets == nullptr) return e / unit / uniform;
    std::uint64_t lo = 0, hi = nseg;  // seg_begin(lo) <= e < seg_begin(hi)
    while (hi - lo > 1) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (seg_begin(mid) <= e) lo = mid;
      else hi = mid;
    }
    return lo;
  }
  segment_counts& route(seg_par_state& st, std::uint64_t s) const {
    if (acc == nullptr) {  // sparse
      if (st.events.empty() || st.events.back().first != s) {
        st.events.emplace_back(s, segment_counts{});
        st.events.back().second.abs_max = 0.0;
      }
      return st.events.back().second;
    }
    if (s == st.first_seg) return st.edge[0];
    if (s == st.last_seg) return st.edge[1];
    return acc[s];
  }
};

inline void* seg_begin_hook(void* ctx, std::uint64_t begin, std::uint64_t n) {
  auto* sp = static_cast<seg_pass*>(ctx);
  seg_par_state& st = sp->par[begin / segment_elems];
  st.first_seg = sp->find(begin);
  st.last_seg = sp->find(begin + n - 1);
  st.cur = st.first_seg;
  st.edge[0] = segment_counts{};
  st.edge[1] = segment_counts{};
  st.edge[0].abs_max = st.edge[1].abs_max = 0.0;
  return &st;
}
inline void seg_end_hook(void*, void*) {}

/// Exact per-element classification of a piece [first, first + n) holding a NaN/Inf (the rare path).
inline void seg_scan_slow(const seg_pass& sp, const unsigned char* p, std::size_t n, std::uint64_t first,
                          segment_counts& r) {
  std::uint64_t amax = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t bits = double_to_bits(load_as_double(p, sp.type, i));
    const std::uint64_t a = bits & f64_abs_mask;
    if (a < f64_inf_bits) {
      amax = a > amax ? a : amax;
      continue;
    }
    if (a == f64_inf_bits) {
      amax = a;
      if ((bits >> 63) != 0) ++r.neg_inf;
      else ++r.pos_inf;
    } else {
      ++r.nan;
    }
    seg_take_first(r.first_nonfinite, static_cast<std::int64_t>(first + i));
  }
  seg_take_amax(r.abs_max, amax);
}

/// One piece of a chunk inside one segment, with nothing known from the kernel: the |x| max of its bit patterns,
/// and the exact scan when that shows a NaN/Inf.
inline void seg_scan_piece(const seg_pass& sp, const unsigned char* p, std::size_t n, std::uint64_t first,
                           std::uint8_t isa_code, segment_counts& r) {
  const std::uint64_t m = seg_max_abs(p, n, sp.type, isa_code);
  if (m >= sp.bad_lo) seg_scan_slow(sp, p, n, first, r);
  else if (sp.need_amax) seg_take_amax(r.abs_max, seg_abs_double_bits(m, sp.type));
}

inline void seg_kernel_chunk(void* ctx, void* state, const chunk_out& o, const void* raw, std::uint64_t first,
                             std::size_t n, std::uint8_t isa_code) {
  const auto& sp = *static_cast<const seg_pass*>(ctx);
  auto& st = *static_cast<seg_par_state*>(state);
  std::uint64_t s = st.cur;
  while (sp.seg_end(s) <= first) ++s;  // the segment holding the chunk's first element
  st.cur = s;
  const std::uint64_t nf = o.nan + o.pinf + o.ninf, last = first + n;
  if (nf == 0 && !sp.need_amax) return;  // nothing to attribute
  std::uint64_t chunk_amax = 0;  // the kernel's |x| max of the chunk (counts and stats levels), as double bits
  if (sp.lv == level::counts) {
    chunk_amax = o.amax;
  } else if (sp.lv == level::stats) {
    const std::uint64_t a = unkey64(o.kmin) & f64_abs_mask, b = unkey64(o.kmax) & f64_abs_mask;
    chunk_amax = a > b ? a : b;
  }
  // flags detail with a threshold: a chunk with nothing over it has nothing to tell
  if (nf == 0 && !sp.exact_amax && sp.lv != level::nonfinite && chunk_amax <= sp.thr_bits) return;
  const auto* p = static_cast<const unsigned char*>(raw);
  if (sp.seg_end(s) >= last) {  // the whole chunk is in segment s: the kernel's output is the segment's
    segment_counts& r = sp.route(st, s);
    if (nf != 0) {
      r.nan += o.nan;
      r.pos_inf += o.pinf;
      r.neg_inf += o.ninf;
      seg_take_first(r.first_nonfinite, static_cast<std::int64_t>(first) + o.first_nf);
    }
    if (!sp.need_amax || o.nan == n) return;
    if (sp.lv != level::nonfinite) {
      seg_take_amax(r.abs_max, chunk_amax);
    } else if (o.nan != 0) {  // the bit-pattern max would be a NaN's: scan (counts are in already)
      segment_counts tmp;
      tmp.abs_max = 0.0;
      seg_scan_slow(sp, p, n, first, tmp);
      seg_take_amax(r.abs_max, double_to_bits(tmp.abs_max));
    } else {
      const std::uint64_t m = seg_max_abs(p, n, sp.type, isa_code);  // an Inf's pattern decodes to inf
      seg_take_amax(r.abs_max, m >= sp.bad_lo ? f64_inf_bits : seg_abs_double_bits(m, sp.type));
    }
    return;
  }
  // The chunk straddles segment boundaries: piece by piece, one segment each.
  const std::size_t es = size_of(sp.type);
  std::uint64_t pos = first;
  while (pos < last) {
    const std::uint64_t e0 = sp.seg_end(s), e = e0 < last ? e0 : last;
    if (e > pos) {
      seg_scan_piece(sp, p + static_cast<std::size_t>(pos - first) * es, static_cast<std::size_t>(e - pos), pos,
                     isa_code, sp.route(st, s));
      pos = e;
    }
    if (pos < last) ++s;
  }
  st.cur = s;
}

[[noreturn]] inline void seg_fail(const tensor_view& v, const std::string& problem) {
  fail(v.name, "segments: " + problem);
}

/// What is wrong with segmentation `s` for view `v` ("" when it fits): check() throws this text (naming the
/// tensor); the recorder checks a tensor unsegmented when a NANSCOPE_SEGMENTS guard's segmentation does not fit
/// it. Sets `nseg` (the segments) and `unit` (elements per unit of the axis: a row's elements, or 1).
inline std::string segment_problem(const tensor_view& v, const segments& s, std::uint64_t& nseg, std::uint64_t& unit) {
  if (s.axis != segment_axis::rows && s.axis != segment_axis::elements)
    return "unknown axis " + std::to_string(static_cast<unsigned>(s.axis));
  const std::uint64_t n = v.numel();
  std::uint64_t extent = n;
  unit = 1;
  const char* what = "elements";
  if (s.axis == segment_axis::rows) {
    if (v.rank < 1) return "row segments need a view of rank >= 1, got a scalar";
    extent = static_cast<std::uint64_t>(v.shape[0]);
    std::int64_t inner = 1;
    for (int d = 1; d < v.rank; ++d)
      if (mul_overflow(inner, v.shape[d], inner)) inner = 0;  // only for an empty tensor (validate)
    unit = static_cast<std::uint64_t>(inner);
    what = "rows";
  }
  std::string shape_text = "(";
  for (int d = 0; d < v.rank; ++d) shape_text += (d ? ", " : "") + std::to_string(v.shape[d]);
  shape_text += v.rank == 1 ? ",)" : ")";
  nseg = 0;
  if (s.offsets == nullptr) {
    if (s.offset_count != 0) return std::to_string(s.offset_count) + " offsets given with a null pointer";
    if (s.uniform <= 0)
      return "no offsets and no uniform segment size (got " + std::to_string(s.uniform) +
             "): use segments::rows, elements, every_rows or every_elements";
    const auto u = static_cast<std::uint64_t>(s.uniform);
    nseg = extent / u + (extent % u != 0);
  } else {
    if (s.offset_count == 0)
      return "no offsets: k segments need k + 1 offsets, the first 0 and the last the extent";
    nseg = s.offset_count - 1;
    if (s.offsets[0] != 0)
      return "offsets must start at 0, offsets[0] = " + std::to_string(s.offsets[0]);
    for (std::size_t i = 1; i < s.offset_count; ++i) {
      if (s.offsets[i] < s.offsets[i - 1])
        return "offsets are not ascending: offsets[" + std::to_string(i) + "] = " +
             std::to_string(s.offsets[i]) + " < offsets[" + std::to_string(i - 1) +
             "] = " + std::to_string(s.offsets[i - 1]);
      if (static_cast<std::uint64_t>(s.offsets[i]) > extent)
        return "offsets[" + std::to_string(i) + "] = " + std::to_string(s.offsets[i]) +
             " is past the tensor: it has " + std::to_string(extent) + " " + what +
             " (shape " + shape_text + (s.axis == segment_axis::rows ? ", rows are the first dimension)" : ")");
    }
    const auto last = static_cast<std::uint64_t>(s.offsets[s.offset_count - 1]);
    if (last != extent)
      return "offsets end at " + std::to_string(last) + " but the tensor has " + std::to_string(extent) +
             " " + what + " (shape " + shape_text +
             (s.axis == segment_axis::rows ? ", rows are the first dimension" : "") +
             "): every element must belong to a segment";
  }
  if (s.ids == nullptr && s.id_count != 0)
    return std::to_string(s.id_count) + " ids given with a null pointer";
  if (s.ids != nullptr && s.id_count != nseg)
    return std::to_string(s.id_count) + " ids for " + std::to_string(nseg) + " segments";
  return std::string();
}

}  // namespace detail

/// Checks a view and attributes its NaN/Inf (and values over the threshold) to the segments of `s`, in the same
/// read. `total` is bit-identical to check(v, opt). Throws nanscope::error for an invalid view or segmentation.
/// A mode that reads no data, an integer dtype or an empty tensor flags no segment. In curt_health mode the pass
/// does not stop at the first NaN/Inf (every segment is looked at); `total` still has curt_health's fields only.
inline segmented_result(check)(const tensor_view& v, const segments& s, const check_options& opt = {},
                               const segment_options& so = {}) {
  validate(v);
  segmented_result out;
  out.axis = s.axis;
  out.level = so.level;
  out.has_threshold = so.has_threshold;
  out.threshold = so.threshold;
  // --- the segmentation against the view
  if (so.level != segment_detail::flags && so.level != segment_detail::counts)
    detail::seg_fail(v, "unknown level " + std::to_string(static_cast<unsigned>(so.level)));
  if (so.has_threshold && !(detail::double_to_bits(so.threshold) <= detail::f64_inf_bits))  // NaN or negative
    detail::seg_fail(v, "the threshold must be >= 0, got " + std::to_string(so.threshold));
  const std::uint64_t n = v.numel();
  std::uint64_t nseg = 0, unit = 1;
  {
    const std::string problem = detail::segment_problem(v, s, nseg, unit);
    if (!problem.empty()) detail::seg_fail(v, problem);
  }
  const std::uint64_t extent = s.axis == segment_axis::rows ? static_cast<std::uint64_t>(v.shape[0]) : n;
  out.row_elems = unit;
  out.count = static_cast<std::size_t>(nseg);

  // --- the pass
  const bool need_amax = so.level == segment_detail::counts || so.has_threshold;
  const bool reads = opt.mode != check_mode::no_tensor && opt.mode != check_mode::shape && is_float(v.type) && n != 0;
  // counts detail: a record per segment (the result's per_segment); flags: sparse events (seg_par_state)
  const bool sparse = so.level == segment_detail::flags;
  std::vector<segment_counts> acc(sparse ? 0 : static_cast<std::size_t>(nseg));
  if (need_amax)
    for (segment_counts& c : acc) c.abs_max = 0.0;  // a max by bit pattern until the end
  detail::seg_pass sp;
  sp.type = v.type;
  sp.need_amax = need_amax;
  sp.exact_amax = so.level == segment_detail::counts;
  sp.thr_bits = so.has_threshold ? detail::double_to_bits(so.threshold) : detail::f64_inf_bits;
  sp.offsets = s.offsets;
  sp.uniform = s.offsets == nullptr ? static_cast<std::uint64_t>(s.uniform) : 0;
  sp.extent = extent;
  sp.unit = unit;
  sp.nseg = nseg;
  sp.bad_lo = detail::seg_bad_abs_bits(v.type);
  sp.acc = sparse ? nullptr : acc.data();
  std::vector<detail::seg_par_state> par;
  detail::pass_hook hook;
  hook.ctx = &sp;
  hook.begin = &detail::seg_begin_hook;
  hook.end = &detail::seg_end_hook;
  hook.kernel_chunk = &detail::seg_kernel_chunk;
  if (!reads) {
    out.total = (check)(v, opt);
  } else {
    par.resize(static_cast<std::size_t>((n + detail::segment_elems - 1) / detail::segment_elems));
    sp.par = par.data();
    check_options run = opt;
    // curt_health would stop at the first NaN/Inf: read everything at the same kernel level instead.
    if (run.mode == check_mode::curt_health) run.mode = check_mode::concise_health;
    // check() reads a transposed dense layout in memory order; a hook needs logical order. Counts, extrema and
    // indices do not depend on the order, mean and std do: in stats mode the totals then come from check() and
    // the segments from a second, logical-order read at full_health.
    tensor_view dense;
    const bool permuted = run.mode == check_mode::stats && !opt.hash && !v.is_contiguous() &&
                          detail::dense_permutation(v, dense);
    if (permuted) run.mode = check_mode::full_health;
    sp.lv = detail::level_for(run.mode);
    health_result r = detail::check_impl(v, run, nullptr, &hook);
    if (permuted) {
      r = (check)(v, opt);
    } else if (opt.mode == check_mode::curt_health) {  // the fields check() reports in curt_health
      r.mode = check_mode::curt_health;
      r.nan = r.pos_inf = r.neg_inf = 0;
    }
    out.total = r;
    if (!sparse) {
      for (const detail::seg_par_state& st : par) {  // the edge records, in any order (the folds are exact)
        detail::seg_fold(acc[static_cast<std::size_t>(st.first_seg)], st.edge[0]);
        if (st.last_seg != st.first_seg) detail::seg_fold(acc[static_cast<std::size_t>(st.last_seg)], st.edge[1]);
      }
    }
  }

  // --- the result
  const std::size_t words = static_cast<std::size_t>((nseg + 63) / 64);
  out.nonfinite_mask.assign(words, 0);
  if (so.has_threshold) out.over_mask.assign(words, 0);
  const std::uint64_t thr = detail::double_to_bits(so.threshold) & detail::f64_abs_mask;
  auto emit = [&](std::size_t i, segment_counts& c) {
    const std::uint64_t b = sp.seg_begin(i), e = sp.seg_end(i);
    const bool has_value = reads && e - b != c.nan;  // a non-NaN element was read
    const bool over = so.has_threshold && has_value && detail::double_to_bits(c.abs_max) > thr;
    // flags detail: the maxima are partial (chunks with nothing over the threshold were skipped): not reported
    if (!(sp.exact_amax && has_value)) c.abs_max = detail::qnan;
    detail::seg_enter(out, s.ids, i, b, e, c, over);
  };
  if (!sparse) {
    for (std::size_t i = 0; i < acc.size(); ++i) emit(i, acc[i]);
  } else {  // the events of all parallel segments, in order: ascending segments, a segment's events adjacent
    bool open = false;
    std::uint64_t cur = 0;
    segment_counts c;
    for (const detail::seg_par_state& st : par)
      for (const auto& ev : st.events) {
        if (open && ev.first == cur) {
          detail::seg_fold(c, ev.second);
          continue;
        }
        if (open) emit(static_cast<std::size_t>(cur), c);
        open = true;
        cur = ev.first;
        c = ev.second;
      }
    if (open) emit(static_cast<std::size_t>(cur), c);
  }
  if (so.level == segment_detail::counts) out.per_segment = std::move(acc);
  return out;
}

/// Segmented check of any supported tensor (see traits.hpp).
template <class T, class = std::enable_if_t<!std::is_same<std::decay_t<T>, tensor_view>::value>>
segmented_result(check)(const T& tensor, const segments& s, const check_options& opt = {},
                        const segment_options& so = {}) {
  return (check)(to_view(tensor), s, opt, so);
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_SEGMENTS_HPP
