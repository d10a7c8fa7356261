// nanscope — detail/cuda_segments.cuh: segmented checks on the CUDA backend (issue 32, item 2): which request,
// expert or KV block of a device tensor holds NaN/Inf, with the segment offsets read from device memory at run
// time (a captured CUDA graph replays with new boundaries). Internal: include <nanscope/cuda.cuh>; the public
// names (nanscope::cuda::device_segments, segment_record, check_segmented_async, finalize_segments,
// pending_segmented, checker::check with segments) are documented in docs/segments.md#cuda.
//
// The kernel (segment_kernel) works in tiles of seg_tile elements (block_threads x seg_per_thread = 16384), a
// block taking tiles grid-stride. Per tile, each warp finds the segments of the tile's first and last element
// (seg_find_warp: 32 probes per round, the same addresses for the whole block: L1 broadcasts). A tile inside one
// segment (s0 == s1, the
// common case) is read coalesced (thread t: elements t, t + 256, ...) with no segment lookup at all; its warps
// merge their accumulators by a shuffle tree and lane 0 folds the warp's record into the segment's record with
// atomics (integer adds, a max of the encoded first index, a max of the |x| bit pattern: exact and
// order-free, so results do not depend on the schedule). Only a tile that straddles a boundary splits its work:
// thread t takes the contiguous run [t * 64, t * 64 + 64) of the tile, finds the segment of its first element
// by a binary search limited to [s0, s1], walks forward (one compare per element, in straddling tiles only) and
// flushes its accumulator whenever the segment changes.
//
// A full tile of a 16-byte-aligned contiguous tensor (seg_params::vec; every dtype's tile is a whole number of
// 16-byte words) is read as 16-byte words instead of elements: inside one segment thread t takes words t,
// t + 256, ... (coalesced), in a straddling tile its run of 64 elements as consecutive words; a clean word costs
// one compare of its largest |x| pattern (seg_visit_word), and only a word holding NaN/Inf or crossing a
// boundary goes lane by lane. The kernel runs one body per dtype for such tensors (its own health state only,
// as the health kernel's contiguous_record) and an element body for strided or misaligned ones and the last,
// partial tile. fp8 stays on elements (words of 16 lanes spilled at the register budgets).
//
// The totals: the non-finite counts and first index are the segment records summed; at level 2 (full_health,
// segment_kernel<2, ...>) each thread also feeds every element to the health kernel's visit functions, and the
// warps fold the resulting records into an encoded totals record (seg_totals) at the end: one read for
// curt/concise/full_health. stats takes its totals from the health kernel (a second read).
//
// Per element the kernel classifies the raw bits of the source dtype: |x| bits at or above the dtype's first
// NaN/Inf pattern (detail::seg_bad_abs_bits, the host segmented check's) are NaN or Inf, every other |x| bit
// pattern feeds the |x| max (sign-magnitude formats: the bit-pattern order is the value order). The host turns
// a record into the segment's counts, first index and abs_max (finalize_segments), with the host segmented
// check's rules, so the results are identical to nanscope::check(view, segments, ...).
//
// This header also compiles as plain C++ under NANSCOPE_IMPL_CUDA_EMULATION: tests/unit/cuda_segments_emulation_test.cpp
// plays the kernel's tiles on the CPU with these functions. The kernel itself, its launch and the checker's
// segmented checks are in detail/cuda_segments_launch.cuh (CUDA only, included at the end of cuda.cuh).
#ifndef NANSCOPE_DETAIL_CUDA_SEGMENTS_CUH
#define NANSCOPE_DETAIL_CUDA_SEGMENTS_CUH

#include "../segments.hpp"
#include "cuda_pass.cuh"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define NANSCOPE_IMPL_SEG_DEV __device__ __forceinline__
#define NANSCOPE_IMPL_SEG_HD __host__ __device__ inline
#define NANSCOPE_IMPL_SEG_UNROLL _Pragma("unroll")
#else
#define NANSCOPE_IMPL_SEG_DEV inline
#define NANSCOPE_IMPL_SEG_HD inline
#define NANSCOPE_IMPL_SEG_UNROLL
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace cuda {

/// A segmentation of a device tensor (nanscope::segments' meaning): `offsets` points to device-readable memory
/// (cudaMalloc, managed or mapped pinned memory) holding offset_count ascending offsets; the kernel reads them
/// when it runs, so a captured graph replays with whatever the array holds then (the count is fixed at capture:
/// pad a variable number of requests with empty segments, offsets equal to the extent). Or, without offsets,
/// uniform segments. `ids` are host memory, read when the result is finalized (copied by checker::check).
struct device_segments {
  segment_axis axis = segment_axis::rows;
  const std::int64_t* offsets = nullptr;  ///< device-readable; offset_count entries (segments + 1), or null
  std::size_t offset_count = 0;
  std::int64_t uniform = 0;               ///< with offsets null: rows or elements per segment (> 0)
  const std::int64_t* ids = nullptr;      ///< host memory: one id per segment, optional
  std::size_t id_count = 0;

  static device_segments rows(const std::int64_t* device_offsets, std::size_t offset_count) {
    return make(segment_axis::rows, device_offsets, offset_count);
  }
  static device_segments elements(const std::int64_t* device_offsets, std::size_t offset_count) {
    return make(segment_axis::elements, device_offsets, offset_count);
  }
  static device_segments every_rows(std::int64_t rows_per_segment) {
    device_segments s;
    s.axis = segment_axis::rows;
    s.uniform = rows_per_segment;
    return s;
  }
  static device_segments every_elements(std::int64_t elements_per_segment) {
    device_segments s;
    s.axis = segment_axis::elements;
    s.uniform = elements_per_segment;
    return s;
  }
  device_segments& with_ids(const std::int64_t* host_ids, std::size_t count) {
    ids = host_ids;
    id_count = count;
    return *this;
  }

 private:
  static device_segments make(segment_axis a, const std::int64_t* o, std::size_t n) {
    device_segments s;
    s.axis = a;
    s.offsets = o;
    s.offset_count = n;
    return s;
  }
};

/// What the segment kernel writes per segment (records[0, count)) plus one status record (records[count]) and,
/// for full_health, the totals' other fields (records[count + 1], detail::seg_totals).
/// All-zero is the identity: the records are cleared with cudaMemsetAsync before each launch (a graph node).
/// first_enc is ~(first NaN/Inf flat index), 0 when none (a max of it is a min of the index); amax is the max |x|
/// bit pattern (source dtype) over non-NaN values; begin is the segment's first flat element index as the
/// kernel read it from the offsets. The status record: nan holds error bits (1: offsets[0] != 0, 2: not
/// ascending, 4: past the tensor, 8: the last offset is not the extent), begin the element count.
struct segment_record {
  unsigned long long nan, pinf, ninf, first_enc, amax, begin;
};

namespace detail {

inline constexpr int seg_per_thread = 64;  // elements per thread per tile
inline constexpr unsigned long long seg_tile = static_cast<unsigned long long>(block_threads) * seg_per_thread;

/// Error bits of the status record.
inline constexpr unsigned long long seg_err_start = 1, seg_err_order = 2, seg_err_past = 4, seg_err_end = 8;

/// Launch parameters of the segment kernel (by value: a captured graph keeps its own copy; the offsets' values
/// are not in here, only their address).
struct seg_params {
  const void* data;
  unsigned long long n;            // elements
  const long long* offsets;        // device offsets (nseg + 1), or null: uniform
  unsigned long long nseg;
  unsigned long long uniform;      // units per segment when offsets is null
  unsigned long long extent;       // units along the axis
  unsigned long long unit;         // elements per unit
  unsigned long long tiles;
  segment_record* records;         // nseg + 1
  unsigned long long bad_lo;       // |x| bits at or above: NaN/Inf
  unsigned long long inf_bits;     // |x| bits of Inf (~0: the dtype has none)
  unsigned long long abs_mask;
  unsigned long long sign_bit;
  int es;                          // element bytes
  int aligned;                     // data % es == 0
  int vec;                         // contiguous and data % 16 == 0: full tiles take 16-byte loads
  int need_amax;                   // the |x| max is reported (counts detail or a threshold): else not folded
  int type;                        // dtype (the level-2 totals decode elements)
  strided_layout layout;           // rank 0: contiguous
};

/// A thread's (or warp's) accumulator for one segment piece. Counts fit 32 bits (a thread sees 64 elements per
/// tile and flushes per tile).
struct seg_acc {
  unsigned nan = 0, pinf = 0, ninf = 0;
  long long first = no_index;
  unsigned long long amax = 0;
};

NANSCOPE_IMPL_SEG_HD void seg_merge(seg_acc& a, const seg_acc& b) {
  a.nan += b.nan;
  a.pinf += b.pinf;
  a.ninf += b.ninf;
  a.first = b.first < a.first ? b.first : a.first;
  a.amax = b.amax > a.amax ? b.amax : a.amax;
}
/// Whether an accumulator has anything for its segment's record.
NANSCOPE_IMPL_SEG_HD bool seg_nonempty(const seg_acc& a) { return (a.nan | a.pinf | a.ninf) != 0 || a.amax != 0; }

/// The offset `i` as read (clamped into [0, extent]: an invalid array never sends a read out of the tensor; the
/// status record reports it).
NANSCOPE_IMPL_SEG_DEV unsigned long long seg_offset(const seg_params& p, unsigned long long i) {
  const long long o = dev_ldg(p.offsets + i);
  if (o < 0) return 0;
  const auto u = static_cast<unsigned long long>(o);
  return u < p.extent ? u : p.extent;
}
/// First flat element of segment s (s <= nseg: seg_begin(nseg) is the element count).
NANSCOPE_IMPL_SEG_DEV unsigned long long seg_begin(const seg_params& p, unsigned long long s) {
  if (p.offsets != nullptr) return s >= p.nseg ? p.n : seg_offset(p, s) * p.unit;
  const unsigned long long u = s * p.uniform;
  return (u < p.extent ? u : p.extent) * p.unit;
}
/// The segment holding flat element e (< n) among [lo, hi]: the last s with seg_begin(s) <= e (empty segments
/// are skipped: their begin is the next one's).
NANSCOPE_IMPL_SEG_DEV unsigned long long seg_find(const seg_params& p, unsigned long long e, unsigned long long lo,
                                                  unsigned long long hi) {
  if (p.offsets == nullptr) {
    const unsigned long long s = e / p.unit / p.uniform;
    return s < p.nseg ? s : p.nseg - 1;
  }
  ++hi;  // seg_begin(lo) <= e < seg_begin(hi)
  while (hi - lo > 1) {
    const unsigned long long mid = lo + (hi - lo) / 2;
    if (seg_begin(p, mid) <= e) lo = mid;
    else hi = mid;
  }
  return lo;
}

/// A tile's elements [b, e) and the segments of its first and last element (s0 == s1: inside one segment).
struct seg_tile_span {
  unsigned long long b, e, s0, s1;
};
#if defined(__CUDACC__)
/// seg_find by the 32 lanes of a warp together (every lane calls it with the same arguments and gets seg_find's
/// answer): each round probes 32 evenly spaced segments at once and keeps the span between the last probe at or
/// before e and the next one, so 100000 segments take 4 rounds of one load instead of 17 dependent loads.
__device__ __forceinline__ unsigned long long seg_find_warp(const seg_params& p, unsigned long long e,
                                                            unsigned long long lo, unsigned long long hi) {
  if (p.offsets == nullptr) return seg_find(p, e, lo, hi);
  ++hi;  // seg_begin(lo) <= e < seg_begin(hi)
  const unsigned long long lane = threadIdx.x % 32u;
  while (hi - lo > 1) {
    const unsigned long long stride = (hi - lo + 31) / 32;  // probes lo + stride, lo + 2 stride, ... below hi
    const unsigned long long q = lo + (lane + 1) * stride;
    const bool at_or_before = q < hi && seg_begin(p, q) <= e;  // true for a prefix of the lanes
    const auto c = static_cast<unsigned long long>(__popc(__ballot_sync(0xFFFFFFFFu, at_or_before)));
    const unsigned long long next_hi = lo + (c + 1) * stride;
    lo += c * stride;
    hi = next_hi < hi ? next_hi : hi;
  }
  return lo;
}
#endif

/// The segments of a tile's first and last element. Every thread of the block calls it with the same tile
/// (the kernel: the warps search together, seg_find_warp; the emulation: seg_find, the same answer).
NANSCOPE_IMPL_SEG_DEV seg_tile_span seg_tile_of(const seg_params& p, unsigned long long tile) {
  seg_tile_span t;
  t.b = tile * seg_tile;
  t.e = t.b + seg_tile < p.n ? t.b + seg_tile : p.n;
#if defined(__CUDACC__)
  t.s0 = seg_find_warp(p, t.b, 0, p.nseg - 1);
  t.s1 = seg_find_warp(p, t.e - 1, t.s0, p.nseg - 1);
#else
  t.s0 = seg_find(p, t.b, 0, p.nseg - 1);
  t.s1 = seg_find(p, t.e - 1, t.s0, p.nseg - 1);
#endif
  return t;
}

/// Raw bits of logical (row-major) element i.
NANSCOPE_IMPL_SEG_DEV unsigned long long seg_load(const seg_params& p, unsigned long long i) {
  const auto* base = static_cast<const unsigned char*>(p.data);
  long long off = static_cast<long long>(i);
  if (p.layout.rank > 0) {
    unsigned long long rest = i;
    off = 0;
    for (int dim = p.layout.rank - 1; dim >= 0; --dim) {
      const auto ext = static_cast<unsigned long long>(p.layout.shape[dim]);
      off += static_cast<long long>(rest % ext) * p.layout.strides[dim];
      rest /= ext;
    }
  }
  const unsigned char* q = base + off * p.es;
  if (p.aligned != 0) {
    switch (p.es) {
      case 8: return dev_ldg(reinterpret_cast<const unsigned long long*>(q));
      case 4: return dev_ldg(reinterpret_cast<const unsigned*>(q));
      case 2: return dev_ldg(reinterpret_cast<const unsigned short*>(q));
      default: return dev_ldg(q);
    }
  }
  unsigned long long b = 0;
  for (int k = 0; k < p.es; ++k) b |= static_cast<unsigned long long>(dev_ldg(q + k)) << (8 * k);
  return b;
}

/// One element: its raw bits at flat index i.
NANSCOPE_IMPL_SEG_HD void seg_visit(seg_acc& a, const seg_params& p, unsigned long long bits, unsigned long long i) {
  const unsigned long long m = bits & p.abs_mask;
  if (m < p.bad_lo) {
    a.amax = m > a.amax ? m : a.amax;
    return;
  }
  if (m == p.inf_bits) {
    a.amax = m;  // the largest non-NaN pattern
    if ((bits & p.sign_bit) != 0) ++a.ninf;
    else ++a.pinf;
  } else {
    ++a.nan;
  }
  const auto li = static_cast<long long>(i);
  a.first = li < a.first ? li : a.first;
}

/// The level-2 totals beyond what the segment records sum to (negative, zero, subnormal counts, extrema, least
/// non-zero |x|), in records[nseg + 1], encoded so that all-zero is the identity and every fold is an add or a
/// max: kmin_enc = (key64_max ^ S) - (kmin ^ S), kmax_enc = (kmax ^ S) - (key64_min ^ S) (S the sign bit: keys
/// of non-NaN values lie in [key64_min, key64_max]), amin_enc = ~amin_nz.
struct seg_totals {
  unsigned long long neg, zero, sub, kmin_enc, kmax_enc, amin_enc;
};
static_assert(sizeof(seg_totals) == sizeof(segment_record), "the totals live in a segment record");
inline constexpr unsigned long long seg_key_sign = 0x8000000000000000ull;
NANSCOPE_IMPL_SEG_HD unsigned long long seg_enc_kmin(long long k) {
  return (static_cast<unsigned long long>(::nanscope::detail::key64_max) ^ seg_key_sign) -
         (static_cast<unsigned long long>(k) ^ seg_key_sign);
}
NANSCOPE_IMPL_SEG_HD unsigned long long seg_enc_kmax(long long k) {
  return (static_cast<unsigned long long>(k) ^ seg_key_sign) -
         (static_cast<unsigned long long>(::nanscope::detail::key64_min) ^ seg_key_sign);
}
inline long long seg_dec_kmin(unsigned long long e) {
  return static_cast<long long>(((static_cast<unsigned long long>(::nanscope::detail::key64_max) ^ seg_key_sign) - e) ^
                                seg_key_sign);
}
inline long long seg_dec_kmax(unsigned long long e) {
  return static_cast<long long>((e + (static_cast<unsigned long long>(::nanscope::detail::key64_min) ^ seg_key_sign)) ^
                                seg_key_sign);
}

/// How a segment-kernel path knows the dtype: seg_any_dtype (the dtype is read from the parameters; every
/// path, the 16-byte-word paths of each dtype too: the emulation's entry), seg_generic (element loads only: the
/// kernel's strided or misaligned tensors), or a dtype's value (the kernel's body for a 16-byte-aligned
/// contiguous tensor of that dtype: its health state only, as the health kernel's contiguous_record).
inline constexpr int seg_any_dtype = -1, seg_generic = -2;

/// Level 2: element i (raw bits) also into the health pass's per-thread state (the health kernel's visit
/// functions: the same classification, extrema and counts). Level 1: nothing.
template <int L, int K = seg_any_dtype>
NANSCOPE_IMPL_SEG_DEV void seg_visit_total(thread_acc& t, thread_acc32& t32, const seg_params& p,
                                           unsigned long long bits, unsigned long long i, unsigned normal) {
  if constexpr (L >= 2) {
    const auto ty = K >= 0 ? static_cast<dtype>(K) : static_cast<dtype>(p.type);
    if (ty == dtype::f64) {
      visit64<L>(t, bits, static_cast<long long>(i));
      return;
    }
    const auto raw = static_cast<unsigned>(bits);
    const unsigned fb = ty == dtype::f32         ? raw
                        : ty == dtype::f16       ? f16_to_f32_bits(raw)
                        : ty == dtype::bf16      ? raw << 16
                        : ty == dtype::f8_e4m3fn ? e4m3_to_f32_bits(raw)
                                                 : e5m2_to_f32_bits(raw);
    visit32<L>(t, t32, fb, normal, static_cast<long long>(i));
  } else {
    (void)t, (void)t32, (void)p, (void)bits, (void)i, (void)normal;
  }
}

/// Raw bits of lane j of a 16-byte word of dtype T.
template <dtype T>
NANSCOPE_IMPL_SEG_DEV unsigned long long seg_lane(const vec16& v, int j) {
  // the word is picked by selects, not by indexing an array: a lane index known only at run time (a boundary
  // inside the word) would otherwise put the word in local memory
  constexpr int epw = 4 / (elem_bytes<T> < 4 ? elem_bytes<T> : 4);  // lanes a 32-bit word (f64: two words a lane)
  const int k = elem_bytes<T> == 8 ? 2 * j : j / epw;
  const unsigned lo = k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
  if constexpr (elem_bytes<T> == 8) {
    const unsigned hi = k == 0 ? v.y : v.w;
    return (static_cast<unsigned long long>(hi) << 32) | lo;
  } else if constexpr (elem_bytes<T> == 4) {
    return lo;
  } else {
    return (lo >> ((j % epw) * 8 * elem_bytes<T>)) & ((1u << (8 * elem_bytes<T>)) - 1u);
  }
}

/// The lanes of one 16-byte word (flat indices i0, i0 + 1, ...), all in one segment, into its accumulator: the
/// largest |x| pattern of the word decides whether any lane is NaN or Inf (one compare for a clean word); only
/// a word that holds one goes lane by lane (seg_visit: counts and the first index).
template <dtype T>
NANSCOPE_IMPL_SEG_DEV void seg_visit_word(seg_acc& a, const seg_params& p, const vec16& v, unsigned long long i0) {
  constexpr int epv = 16 / elem_bytes<T>;
  unsigned long long m = 0;
  if constexpr (elem_bytes<T> <= 4) {  // 32-bit lanes: the masks and the max in 32-bit arithmetic (half the work)
    const auto mask = static_cast<unsigned>(p.abs_mask);
    unsigned m32 = 0;
NANSCOPE_IMPL_SEG_UNROLL
    for (int j = 0; j < epv; ++j) {
      const unsigned x = static_cast<unsigned>(seg_lane<T>(v, j)) & mask;
      m32 = x > m32 ? x : m32;
    }
    m = m32;
  } else {
NANSCOPE_IMPL_SEG_UNROLL
    for (int j = 0; j < epv; ++j) {
      const unsigned long long x = seg_lane<T>(v, j) & p.abs_mask;
      m = x > m ? x : m;
    }
  }
  if (m < p.bad_lo) {
    a.amax = m > a.amax ? m : a.amax;
    return;
  }
  for (int j = 0; j < epv; ++j) seg_visit(a, p, seg_lane<T>(v, j), i0 + static_cast<unsigned long long>(j));
}

/// Level 2: a 16-byte word into the thread's health state (the health kernel's visit_vec).
template <int L, dtype T>
NANSCOPE_IMPL_SEG_DEV void seg_total_word(thread_acc& tot, thread_acc32& tot32, const vec16& v, unsigned normal,
                                         unsigned long long i0) {
  if constexpr (L >= 2) {
    visit_vec<L, T>(tot, tot32, v, normal, static_cast<long long>(i0));
  } else {
    (void)tot, (void)tot32, (void)v, (void)normal, (void)i0;
  }
}

/// Words per thread per tile: seg_per_thread elements, 4 elem_bytes<T> words (f32: 16), loaded
/// seg_words_in_flight at a time: 32 bytes a thread, 24-32 KB a multiprocessor at the kernels' occupancy. Four
/// at a time spilled (tests/cuda/resource_usage.py).
inline constexpr int seg_words_in_flight = 2;

/// seg_whole_thread's full tile of a 16-byte-aligned contiguous tensor: words t, t + 256, ... of the tile
/// (coalesced 16-byte loads), each folded by seg_visit_word.
template <int L, dtype T>
NANSCOPE_IMPL_SEG_DEV seg_acc seg_whole_words(const seg_params& p, unsigned long long b, unsigned t, thread_acc& tot,
                                             thread_acc32& tot32, unsigned normal) {
  constexpr int words = seg_per_thread * elem_bytes<T> / 16, epv = 16 / elem_bytes<T>;
  constexpr int inflight = words < seg_words_in_flight ? words : seg_words_in_flight;
  const auto* base = reinterpret_cast<const vec16*>(static_cast<const unsigned char*>(p.data) + b * elem_bytes<T>);
  seg_acc a;
  for (int r = 0; r < words; r += inflight) {
    vec16 v[inflight];
NANSCOPE_IMPL_SEG_UNROLL
    for (int k = 0; k < inflight; ++k) v[k] = dev_ldg(base + static_cast<unsigned>(r + k) * block_threads + t);
NANSCOPE_IMPL_SEG_UNROLL
    for (int k = 0; k < inflight; ++k) {
      const unsigned long long i0 = b + (static_cast<unsigned long long>(r + k) * block_threads + t) * epv;
      seg_visit_word<T>(a, p, v[k], i0);
      seg_total_word<L, T>(tot, tot32, v[k], normal, i0);
    }
  }
  return a;
}

/// seg_straddle_thread's full tile of a 16-byte-aligned contiguous tensor: the thread's run of 64 elements is
/// elem_bytes<T> consecutive words; a word inside the current segment goes through seg_visit_word, a word that
/// crosses a boundary lane by lane (flushing at every segment change).
template <int L, dtype T, class Flush>
NANSCOPE_IMPL_SEG_DEV void seg_straddle_words(const seg_params& p, unsigned long long b, unsigned t,
                                             unsigned long long s0, unsigned long long s1, thread_acc& tot,
                                             thread_acc32& tot32, unsigned normal, Flush&& flush) {
  constexpr int words = seg_per_thread * elem_bytes<T> / 16, epv = 16 / elem_bytes<T>;
  constexpr int inflight = words < seg_words_in_flight ? words : seg_words_in_flight;
  const unsigned long long r0 = b + static_cast<unsigned long long>(t) * seg_per_thread;
  const auto* base = reinterpret_cast<const vec16*>(static_cast<const unsigned char*>(p.data) + r0 * elem_bytes<T>);
  unsigned long long s = seg_find(p, r0, s0, s1);
  unsigned long long end = seg_begin(p, s + 1);
  seg_acc a;
  for (int r = 0; r < words; r += inflight) {
    vec16 v[inflight];
NANSCOPE_IMPL_SEG_UNROLL
    for (int k = 0; k < inflight; ++k) v[k] = dev_ldg(base + r + k);
NANSCOPE_IMPL_SEG_UNROLL
    for (int k = 0; k < inflight; ++k) {
      const unsigned long long i0 = r0 + static_cast<unsigned long long>(r + k) * epv;
      seg_total_word<L, T>(tot, tot32, v[k], normal, i0);
      if (i0 + epv <= end) {
        seg_visit_word<T>(a, p, v[k], i0);
        continue;
      }
      for (int j = 0; j < epv; ++j) {  // a boundary inside the word (rare): lane by lane
        const unsigned long long i = i0 + static_cast<unsigned long long>(j);
        if (i >= end) {
          if (p.need_amax == 0) a.amax = 0;
          if (seg_nonempty(a)) flush(s, a);
          a = seg_acc{};
          do {
            ++s;
            end = seg_begin(p, s + 1);
          } while (i >= end && s < s1);
        }
        seg_visit(a, p, seg_lane<T>(v[k], j), i);
      }
    }
  }
  if (p.need_amax == 0) a.amax = 0;
  if (seg_nonempty(a)) flush(s, a);
}

/// Whether the tile [b, e) takes the 16-byte-word path: a full tile of a 16-byte-aligned contiguous tensor
/// (every full tile starts on a 16-byte boundary: seg_tile elements are a multiple of 16 bytes) of a dtype of 2
/// bytes or more. fp8 stays on elements: words of 16 lanes spilled at both levels' register budgets
/// (tests/cuda/resource_usage.py), and the kernel runs fp8 tensors in its element body.
NANSCOPE_IMPL_SEG_DEV bool seg_words_tile(const seg_params& p, unsigned long long b, unsigned long long e) {
  return p.vec != 0 && p.es >= 2 && e - b == seg_tile;
}

/// Thread t's share of a tile [b, e) inside one segment: elements b + t, b + t + 256, ... (coalesced; a full
/// tile of a 16-byte-aligned contiguous tensor as 16-byte words, seg_whole_words). Level 2: each element also
/// into (tot, tot32), the thread's health state over all its tiles. K: see seg_any_dtype.
template <int L, int K = seg_any_dtype>
NANSCOPE_IMPL_SEG_DEV seg_acc seg_whole_thread(const seg_params& p, unsigned long long b, unsigned long long e,
                                               unsigned t, thread_acc& tot, thread_acc32& tot32, unsigned normal) {
  seg_acc a;
  if constexpr (K != seg_generic) {
    if (seg_words_tile(p, b, e)) {
      if constexpr (K >= 0) {
        a = seg_whole_words<L, static_cast<dtype>(K)>(p, b, t, tot, tot32, normal);
      } else {
        switch (static_cast<dtype>(p.type)) {
          case dtype::f64: a = seg_whole_words<L, dtype::f64>(p, b, t, tot, tot32, normal); break;
          case dtype::f32: a = seg_whole_words<L, dtype::f32>(p, b, t, tot, tot32, normal); break;
          case dtype::f16: a = seg_whole_words<L, dtype::f16>(p, b, t, tot, tot32, normal); break;
          default: a = seg_whole_words<L, dtype::bf16>(p, b, t, tot, tot32, normal); break;  // no fp8 here
        }
      }
      if (p.need_amax == 0) a.amax = 0;
      return a;
    }
  }
  for (int k = 0; k < seg_per_thread; ++k) {
    const unsigned long long i = b + static_cast<unsigned long long>(k) * block_threads + t;
    if (i < e) {
      const unsigned long long bits = seg_load(p, i);
      seg_visit(a, p, bits, i);
      seg_visit_total<L, K>(tot, tot32, p, bits, i, normal);
    }
  }
  if (p.need_amax == 0) a.amax = 0;  // nothing to fold for a clean tile: no merge, no atomics
  return a;
}

/// Thread t's share of a tile [b, e) that straddles segments s0 < s1: the run [b + 64 t, b + 64 t + 64), walked
/// segment by segment (a full tile of a 16-byte-aligned contiguous tensor as 16-byte words,
/// seg_straddle_words); flush(s, acc) takes each non-empty piece. K: see seg_any_dtype.
template <int L, int K = seg_any_dtype, class Flush>
NANSCOPE_IMPL_SEG_DEV void seg_straddle_thread(const seg_params& p, unsigned long long b, unsigned long long e,
                                               unsigned t, unsigned long long s0, unsigned long long s1,
                                               thread_acc& tot, thread_acc32& tot32, unsigned normal, Flush&& flush) {
  if constexpr (K != seg_generic) {
    if (seg_words_tile(p, b, e)) {
      if constexpr (K >= 0) {
        seg_straddle_words<L, static_cast<dtype>(K)>(p, b, t, s0, s1, tot, tot32, normal, flush);
        return;
      } else {
        switch (static_cast<dtype>(p.type)) {
          case dtype::f64: seg_straddle_words<L, dtype::f64>(p, b, t, s0, s1, tot, tot32, normal, flush); return;
          case dtype::f32: seg_straddle_words<L, dtype::f32>(p, b, t, s0, s1, tot, tot32, normal, flush); return;
          case dtype::f16: seg_straddle_words<L, dtype::f16>(p, b, t, s0, s1, tot, tot32, normal, flush); return;
          case dtype::bf16: seg_straddle_words<L, dtype::bf16>(p, b, t, s0, s1, tot, tot32, normal, flush); return;
          default: break;  // fp8 never takes words (seg_words_tile)
        }
      }
    }
  }
  const unsigned long long r0 = b + static_cast<unsigned long long>(t) * seg_per_thread;
  if (r0 >= e) return;
  const unsigned long long r1 = r0 + seg_per_thread < e ? r0 + seg_per_thread : e;
  unsigned long long s = seg_find(p, r0, s0, s1);
  unsigned long long end = seg_begin(p, s + 1);
  seg_acc a;
  for (unsigned long long i = r0; i < r1; ++i) {
    if (i >= end) {
      if (p.need_amax == 0) a.amax = 0;
      if (seg_nonempty(a)) flush(s, a);
      a = seg_acc{};
      do {
        ++s;
        end = seg_begin(p, s + 1);
      } while (i >= end && s < s1);
    }
    const unsigned long long bits = seg_load(p, i);
    seg_visit(a, p, bits, i);
    seg_visit_total<L, K>(tot, tot32, p, bits, i, normal);
  }
  if (p.need_amax == 0) a.amax = 0;
  if (seg_nonempty(a)) flush(s, a);
}

/// Offset i's checks (i <= nseg) and its segment's begin into the records (segment_record::begin; the status
/// record's begin is n). Returns error bits.
NANSCOPE_IMPL_SEG_DEV unsigned long long seg_check_offset(const seg_params& p, unsigned long long i) {
  if (p.offsets == nullptr) return 0;
  const long long o = dev_ldg(p.offsets + i);
  unsigned long long err = 0;
  if (i == 0 && o != 0) err |= seg_err_start;
  if (i > 0 && o < dev_ldg(p.offsets + i - 1)) err |= seg_err_order;
  if (o < 0 || static_cast<unsigned long long>(o) > p.extent) err |= seg_err_past;
  if (i == p.nseg && static_cast<unsigned long long>(o) != p.extent) err |= seg_err_end;
  return err;
}

/// Non-atomic fold of an accumulator into a record (the emulation's stand-in for the kernel's atomics).
inline void seg_fold_plain(segment_record& r, const seg_acc& a) {
  r.nan += a.nan;
  r.pinf += a.pinf;
  r.ninf += a.ninf;
  if (a.first != no_index) {
    const unsigned long long enc = ~static_cast<unsigned long long>(a.first);
    r.first_enc = enc > r.first_enc ? enc : r.first_enc;
  }
  r.amax = a.amax > r.amax ? a.amax : r.amax;
}

/// Non-atomic fold of a (warp's) level-2 health record into the totals (the emulation's stand-in).
inline void seg_totals_fold_plain(seg_totals& r, const device_result& a) {
  r.neg += a.neg;
  r.zero += a.zero;
  r.sub += a.sub;
  const unsigned long long kmin = seg_enc_kmin(a.kmin), kmax = seg_enc_kmax(a.kmax), amin = ~a.amin_nz;
  r.kmin_enc = kmin > r.kmin_enc ? kmin : r.kmin_enc;
  r.kmax_enc = kmax > r.kmax_enc ? kmax : r.kmax_enc;
  r.amin_enc = amin > r.amin_enc ? amin : r.amin_enc;
}

/// The level the segment kernel runs at for a mode: 2 (full_health: the totals too, one read), else 1 (the
/// non-finite level; stats takes its totals from the health kernel).
inline int seg_kernel_level(check_mode mode) {
  return ::nanscope::detail::level_for(mode) == ::nanscope::detail::level::counts ? 2 : 1;
}

/// |x| Inf pattern of a dtype (~0 when it has none).
inline unsigned long long seg_inf_bits(dtype t) {
  return t == dtype::f8_e4m3fn ? ~0ull : ::nanscope::detail::seg_bad_abs_bits(t);
}

/// Segments of a validated view (host checks that need no device read). Throws naming the tensor.
inline std::uint64_t seg_host_validate(const tensor_view& v, const device_segments& s, const segment_options& so,
                                       std::uint64_t& extent, std::uint64_t& unit) {
  auto bad = [&](const std::string& m) { ::nanscope::detail::fail(v.name, "segments: " + m); };
  if (s.axis != segment_axis::rows && s.axis != segment_axis::elements)
    bad("unknown axis " + std::to_string(static_cast<unsigned>(s.axis)));
  if (so.level != segment_detail::flags && so.level != segment_detail::counts)
    bad("unknown level " + std::to_string(static_cast<unsigned>(so.level)));
  if (so.has_threshold && !(::nanscope::detail::double_to_bits(so.threshold) <= ::nanscope::detail::f64_inf_bits))
    bad("the threshold must be >= 0, got " + std::to_string(so.threshold));
  extent = v.numel();
  unit = 1;
  if (s.axis == segment_axis::rows) {
    if (v.rank < 1) bad("row segments need a view of rank >= 1, got a scalar");
    extent = static_cast<std::uint64_t>(v.shape[0]);
    std::uint64_t inner = 1;
    for (int d = 1; d < v.rank; ++d) inner *= static_cast<std::uint64_t>(v.shape[d]);
    unit = inner;
  }
  std::uint64_t nseg = 0;
  if (s.offsets == nullptr) {
    if (s.offset_count != 0) bad(std::to_string(s.offset_count) + " offsets given with a null pointer");
    if (s.uniform <= 0)
      bad("no offsets and no uniform segment size (got " + std::to_string(s.uniform) +
          "): use device_segments::rows, elements, every_rows or every_elements");
    const auto u = static_cast<std::uint64_t>(s.uniform);
    nseg = extent / u + (extent % u != 0);
  } else {
    if (s.offset_count == 0) bad("no offsets: k segments need k + 1 offsets, the first 0 and the last the extent");
    nseg = s.offset_count - 1;
  }
  if (nseg == 0 && extent != 0)
    bad("no segments for " + std::to_string(extent) + (s.axis == segment_axis::rows ? " rows" : " elements") +
        ": every element must belong to a segment");
  if (s.ids == nullptr && s.id_count != 0) bad(std::to_string(s.id_count) + " ids given with a null pointer");
  if (s.ids != nullptr && s.id_count != nseg)
    bad(std::to_string(s.id_count) + " ids for " + std::to_string(nseg) + " segments");
  return nseg;
}

/// Whether a check of v at `mode` reads its data (the host segmented check's rule: float dtype, not empty, a
/// mode that reads).
inline bool seg_reads(const tensor_view& v, check_mode mode) { return level_of(mode, v.type, v.numel()) != 0; }

/// The kernel's parameters for a validated view and segmentation (nseg from seg_host_validate).
inline seg_params seg_make_params(const tensor_view& v, const device_segments& s, std::uint64_t nseg,
                                  std::uint64_t extent, std::uint64_t unit, segment_record* records,
                                  const segment_options& so) {
  seg_params p{};
  p.need_amax = so.level == segment_detail::counts || so.has_threshold ? 1 : 0;
  p.type = static_cast<int>(v.type);
  p.data = v.data;
  p.n = v.numel();
  p.offsets = reinterpret_cast<const long long*>(s.offsets);
  p.nseg = nseg;
  p.uniform = s.offsets == nullptr ? static_cast<unsigned long long>(s.uniform) : 0;
  p.extent = extent;
  p.unit = unit;
  p.tiles = (p.n + seg_tile - 1) / seg_tile;
  p.records = records;
  p.es = static_cast<int>(size_of(v.type));
  p.bad_lo = ::nanscope::detail::seg_bad_abs_bits(v.type);
  p.inf_bits = seg_inf_bits(v.type);
  p.sign_bit = 1ull << (8 * p.es - 1);
  p.abs_mask = p.sign_bit - 1;  // the element's bits without the sign
  p.aligned = reinterpret_cast<std::uintptr_t>(v.data) % static_cast<std::uintptr_t>(p.es) == 0 ? 1 : 0;
  p.vec = v.is_contiguous() && reinterpret_cast<std::uintptr_t>(v.data) % 16u == 0 ? 1 : 0;
  p.layout = strided_layout{};
  if (!v.is_contiguous()) {
    p.layout.rank = v.rank;
    for (int d = 0; d < v.rank; ++d) {
      p.layout.shape[d] = v.shape[d];
      p.layout.strides[d] = v.strides[d];
    }
  }
  return p;
}

}  // namespace detail

/// The segmented result of a device check: `total` from the health record (stats; null for the other modes,
/// whose totals come from the segment kernel's records), `records` the segment kernel's nseg + 2 records
/// (segment_records_needed) copied to host memory. Same fields and semantics as nanscope::check(view, segments, opt,
/// so) on the host. Throws nanscope::error naming the tensor when the kernel found the offsets invalid.
inline segmented_result finalize_segments(const device_result* total, const segment_record* records,
                                          const tensor_view& v, const device_segments& s, check_mode mode,
                                          const segment_options& so) {
  std::uint64_t extent = 0, unit = 1;
  const std::uint64_t nseg = detail::seg_host_validate(v, s, so, extent, unit);
  const bool reads = detail::seg_reads(v, mode);
  const detail::seg_params geo = detail::seg_make_params(v, s, nseg, extent, unit, nullptr, so);
  if (reads && s.offsets != nullptr) {
    const unsigned long long err = records[nseg].nan;
    if (err != 0) {
      std::string what;
      if ((err & detail::seg_err_start) != 0) what += "offsets must start at 0; ";
      if ((err & detail::seg_err_order) != 0) what += "offsets are not ascending; ";
      if ((err & detail::seg_err_past) != 0)
        what += "an offset is past the tensor (" + std::to_string(extent) +
                (s.axis == segment_axis::rows ? " rows, the first dimension); " : " elements); ");
      if ((err & detail::seg_err_end) != 0) what += "the last offset is not the extent (every element must belong to a segment); ";
      what.resize(what.size() - 2);
      ::nanscope::detail::fail(v.name, "segments (device offsets as the kernel read them): " + what);
    }
  }
  segmented_result out;
  out.axis = s.axis;
  out.level = so.level;
  out.has_threshold = so.has_threshold;
  out.threshold = so.threshold;
  out.row_elems = unit;
  out.count = static_cast<std::size_t>(nseg);
  // --- the total: the health record, or (level 1) the segments' records summed
  device_result rec = detail::identity_result();
  if (total != nullptr) {
    rec = *total;
  } else if (reads) {
    if (detail::seg_kernel_level(mode) >= 2) {  // the segment kernel's level-2 totals
      const auto& tt = reinterpret_cast<const detail::seg_totals&>(records[nseg + 1]);
      rec.neg = tt.neg;
      rec.zero = tt.zero;
      rec.sub = tt.sub;
      rec.kmin = detail::seg_dec_kmin(tt.kmin_enc);
      rec.kmax = detail::seg_dec_kmax(tt.kmax_enc);
      rec.amin_nz = tt.amin_enc != 0 ? ~tt.amin_enc : detail::f64_inf_bits;
    }
    for (std::uint64_t i = 0; i < nseg; ++i) {
      const segment_record& r = records[i];
      rec.nan += r.nan;
      rec.pinf += r.pinf;
      rec.ninf += r.ninf;
      if (r.first_enc != 0) {
        const auto f = static_cast<long long>(~r.first_enc);
        rec.first_nf = f < rec.first_nf ? f : rec.first_nf;
      }
    }
  }
  out.total = finalize(rec, v, mode);
  // --- the segments, with the host segmented check's rules
  const std::size_t words = static_cast<std::size_t>((nseg + 63) / 64);
  out.nonfinite_mask.assign(words, 0);
  if (so.has_threshold) out.over_mask.assign(words, 0);
  const std::uint64_t thr = ::nanscope::detail::double_to_bits(so.threshold) & ::nanscope::detail::f64_abs_mask;
  const bool exact_amax = so.level == segment_detail::counts;
  if (exact_amax) out.per_segment.resize(static_cast<std::size_t>(nseg));
  for (std::uint64_t i = 0; i < nseg; ++i) {
    segment_counts c;
    std::uint64_t b = 0, e = 0;
    if (reads) {
      const segment_record& r = records[i];
      c.nan = r.nan;
      c.pos_inf = r.pinf;
      c.neg_inf = r.ninf;
      c.first_nonfinite = r.first_enc != 0 ? static_cast<std::int64_t>(~r.first_enc) : -1;
      b = r.begin;
      e = records[i + 1].begin;
      c.abs_max = ::nanscope::detail::bits_to_double(::nanscope::detail::seg_abs_double_bits(r.amax, v.type));
    } else {  // nothing was read: the geometry from the host (uniform) or unknown (device offsets)
      if (s.offsets == nullptr) {
        const std::uint64_t u0 = i * geo.uniform, u1 = (i + 1) * geo.uniform;
        b = (u0 < extent ? u0 : extent) * unit;
        e = (u1 < extent ? u1 : extent) * unit;
      }
    }
    const bool has_value = reads && e - b != c.nan;
    const bool over = so.has_threshold && has_value && ::nanscope::detail::double_to_bits(c.abs_max) > thr;
    if (!(exact_amax && has_value)) c.abs_max = ::nanscope::detail::qnan;
    ::nanscope::detail::seg_enter(out, s.ids, static_cast<std::size_t>(i), b, e, c, over);
    if (exact_amax) out.per_segment[static_cast<std::size_t>(i)] = c;
  }
  return out;
}


}  // namespace cuda
NANSCOPE_NAMESPACE_END

#undef NANSCOPE_IMPL_SEG_DEV
#undef NANSCOPE_IMPL_SEG_HD
#undef NANSCOPE_IMPL_SEG_UNROLL

#endif  // NANSCOPE_DETAIL_CUDA_SEGMENTS_CUH
