// nanscope — detail/cuda_segments_launch.cuh: the CUDA side of segmented checks: the segment kernel, its launch
// (check_segmented_async), pending_segmented and checker's segmented check / check_batch. Included at the end of
// <nanscope/cuda.cuh> (it needs the checker); the arithmetic is in detail/cuda_segments.cuh, shared with the
// host emulation test. See detail/cuda_segments.cuh for the kernel's design.
#ifndef NANSCOPE_DETAIL_CUDA_SEGMENTS_LAUNCH_CUH
#define NANSCOPE_DETAIL_CUDA_SEGMENTS_LAUNCH_CUH

#if !defined(__CUDACC__)
#error "nanscope/detail/cuda_segments_launch.cuh is CUDA code: include <nanscope/cuda.cuh> (compiled by nvcc)"
#endif

#include "cuda_segments.cuh"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace cuda {

namespace detail {

/// Folds a warp's (or thread's) accumulator into segment s's record with atomics (exact, order-free).
__device__ inline void seg_fold_atomic(segment_record* rec, unsigned long long s, const seg_acc& a) {
  segment_record& r = rec[s];
  if (a.nan != 0) atomicAdd(&r.nan, static_cast<unsigned long long>(a.nan));
  if (a.pinf != 0) atomicAdd(&r.pinf, static_cast<unsigned long long>(a.pinf));
  if (a.ninf != 0) atomicAdd(&r.ninf, static_cast<unsigned long long>(a.ninf));
  if (a.first != no_index) atomicMax(&r.first_enc, ~static_cast<unsigned long long>(a.first));
  if (a.amax != 0) atomicMax(&r.amax, a.amax);
}

/// Lane 0 := the merge of the warp's accumulators (a shuffle tree: lane i takes lane i + 16, ..., 1).
__device__ inline void seg_warp_merge(seg_acc& a) {
  constexpr unsigned all = 0xFFFFFFFFu;
  for (unsigned o = 16; o > 0; o >>= 1) {
    seg_acc b;
    b.nan = __shfl_down_sync(all, a.nan, o);
    b.pinf = __shfl_down_sync(all, a.pinf, o);
    b.ninf = __shfl_down_sync(all, a.ninf, o);
    b.first = __shfl_down_sync(all, a.first, o);
    b.amax = __shfl_down_sync(all, a.amax, o);
    seg_merge(a, b);
  }
}

/// Level 2: lane 0 folds the warp's merged health record into the totals with atomics (once per warp).
__device__ inline void seg_totals_fold_atomic(seg_totals* r, const device_result& a) {
  atomicAdd(&r->neg, a.neg);
  atomicAdd(&r->zero, a.zero);
  atomicAdd(&r->sub, a.sub);
  atomicMax(&r->kmin_enc, seg_enc_kmin(a.kmin));
  atomicMax(&r->kmax_enc, seg_enc_kmax(a.kmax));
  atomicMax(&r->amin_enc, ~a.amin_nz);
}

/// Blocks of 256 per SM the segment kernel of level L is compiled for (__launch_bounds__: a cap of 64 registers
/// a thread at level 1, 80 at level 2; tests/cuda/resource_usage.py checks the budgets, docs/cuda.md).
template <int L>
inline constexpr int seg_min_blocks_per_sm = L >= 2 ? 3 : 4;

/// The segment kernel's tiles of this block (detail/cuda_segments.cuh), K the way the dtype is known
/// (seg_generic: element loads; a dtype's value: its 16-byte-word paths and its health state only).
template <int L, int K>
__device__ __forceinline__ void seg_block_tiles(const seg_params& p) {
  const unsigned t = threadIdx.x;
  thread_acc tot;      // level 2: the thread's health state over all its tiles
  thread_acc32 tot32;
  const unsigned normal = normal32_of(K >= 0 ? static_cast<dtype>(K) : static_cast<dtype>(p.type));
  for (unsigned long long tile = blockIdx.x; tile < p.tiles; tile += gridDim.x) {
    const seg_tile_span span = seg_tile_of(p, tile);
    if (span.s0 == span.s1) {  // uniform per block
      seg_acc a = seg_whole_thread<L, K>(p, span.b, span.e, t, tot, tot32, normal);
      if (!__any_sync(0xFFFFFFFFu, seg_nonempty(a))) continue;
      seg_warp_merge(a);
      if (t % 32 == 0) seg_fold_atomic(p.records, span.s0, a);
    } else {
      seg_straddle_thread<L, K>(p, span.b, span.e, t, span.s0, span.s1, tot, tot32, normal,
                                [&](unsigned long long s, const seg_acc& a) { seg_fold_atomic(p.records, s, a); });
    }
  }
  if constexpr (L >= 2) {
    device_result r = to_record(tot, tot32, static_cast<dtype>(p.type) == dtype::f64);
    warp_merge_group<2, 0>(r);
    if (t % 32 == 0) seg_totals_fold_atomic(reinterpret_cast<seg_totals*>(p.records + p.nseg + 1), r);
  }
}

/// The segmented pass (detail/cuda_segments.cuh). Every thread of the grid also checks the offsets i, i + grid
/// threads, ... and writes their segments' begins. The tiles go through one body per dtype for 16-byte-aligned
/// contiguous tensors (each with its own health state: the registers are the heaviest body's, not the sum) and
/// a generic one for the others. A template (of seg_params only) so that the header can be included by several
/// translation units.
template <int L, class Params>
__global__ void __launch_bounds__(block_threads, seg_min_blocks_per_sm<L>) segment_kernel(const __grid_constant__ Params p) {
  const unsigned long long gthreads = static_cast<unsigned long long>(gridDim.x) * block_threads;
  unsigned long long err = 0;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * block_threads + threadIdx.x; i <= p.nseg;
       i += gthreads) {
    err |= seg_check_offset(p, i);
    p.records[i].begin = seg_begin(p, i);
  }
  if (err != 0) atomicOr(&p.records[p.nseg].nan, err);
  if (p.vec == 0) {
    seg_block_tiles<L, seg_generic>(p);
    return;
  }
  switch (static_cast<dtype>(p.type)) {
    case dtype::f64: seg_block_tiles<L, static_cast<int>(dtype::f64)>(p); break;
    case dtype::f32: seg_block_tiles<L, static_cast<int>(dtype::f32)>(p); break;
    case dtype::f16: seg_block_tiles<L, static_cast<int>(dtype::f16)>(p); break;
    case dtype::bf16: seg_block_tiles<L, static_cast<int>(dtype::bf16)>(p); break;
    default: seg_block_tiles<L, seg_generic>(p); break;  // fp8: element loads (see seg_words_tile)
  }
}

/// The segment kernel's launch (a template, instantiated by tests/cuda/resource_usage.cu for the budgets).
template <class Params>
inline void seg_launch(int level, const Params& p, unsigned blocks, cudaStream_t stream) {
  if (level >= 2) segment_kernel<2, Params><<<blocks, block_threads, 0, stream>>>(p);
  else segment_kernel<1, Params><<<blocks, block_threads, 0, stream>>>(p);
}

/// Blocks of one segment launch: one wave (the blocks the level's register budget lets each multiprocessor
/// hold, seg_min_blocks_per_sm), never more than there are tiles; the blocks then take tiles grid-stride. A
/// second, partial wave of blocks (the grid was 8 blocks per multiprocessor before) left most of the device idle
/// at the end.
inline unsigned seg_blocks(const seg_params& p, const device_props& props, int level) {
  const int per_sm = level >= 2 ? seg_min_blocks_per_sm<2> : seg_min_blocks_per_sm<1>;
  unsigned long long full = static_cast<unsigned long long>(props.sm_count) * static_cast<unsigned long long>(per_sm);
  if (full < 1) full = 1;
  unsigned long long b = p.tiles < full ? p.tiles : full;
  // the offsets check wants a thread per offset at most (it strides otherwise): at least one block
  if (b < 1) b = 1;
  return static_cast<unsigned>(b);
}

/// Device-readable memory, or a clear error naming the tensor.
inline void seg_check_offsets_pointer(const tensor_view& v, const void* p) {
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) cuda_fail(v.name, e, "cudaPointerGetAttributes (segment offsets)");
  if (attr.type == cudaMemoryTypeUnregistered)
    ::nanscope::detail::fail(v.name, "segments: the offsets are unregistered host memory: give a device array "
                                     "(cudaMalloc), or nanscope::segments to nanscope::check on the host");
}

}  // namespace detail

/// Segment records needed by check_segmented_async for v and s: the segment count + 2 (the status record and
/// the full_health totals).
inline std::size_t segment_records_needed(const tensor_view& v, const device_segments& s,
                                          const segment_options& so = {}) {
  validate(v);
  std::uint64_t extent = 0, unit = 1;
  return static_cast<std::size_t>(detail::seg_host_validate(v, s, so, extent, unit)) + 2;
}

/// Queues a segmented check of one device tensor on `stream` (CUB's convention, as check_async): with
/// temp_storage null only temp_storage_bytes is set (0 except for stats: then pass any non-null pointer, nothing
/// is written to it). `records`: segment_records_needed() segment_records in
/// device memory, cleared here by cudaMemsetAsync; `total`: one device_result (device-writable) for the stats
/// mode, whose totals (moments) come from the health kernel (a second read of the tensor); the other modes
/// take their totals from the segment kernel's records (one read: full_health's counts and extrema too) and may
/// pass null. Nothing is allocated, nothing
/// synchronizes: the memset and the launches can be captured into a CUDA graph, whose replays read the offsets'
/// current values. Copy the records (and the total) to the host, then finalize_segments().
inline void check_segmented_async(void* temp_storage, std::size_t& temp_storage_bytes, const buffer_view& b,
                                  const device_segments& s, device_result* total, segment_record* records,
                                  check_mode mode, const segment_options& so = {}) {
  const tensor_view& v = b.view;
  validate(v);
  std::uint64_t extent = 0, unit = 1;
  const std::uint64_t nseg = detail::seg_host_validate(v, s, so, extent, unit);
  const bool health = detail::seg_reads(v, mode) && detail::level_of(mode, v.type, v.numel()) >= 3;
  if (health) {
    check_async(temp_storage, temp_storage_bytes, &b, 1, total, mode, b.stream);
    if (temp_storage == nullptr) return;
  } else if (temp_storage == nullptr) {
    temp_storage_bytes = 0;
    return;
  }
  if (!detail::seg_reads(v, mode)) return;
  if (records == nullptr) ::nanscope::detail::fail(v.name, "check_segmented_async: null segment records");
  if (s.offsets != nullptr) detail::seg_check_offsets_pointer(v, s.offsets);
  detail::cuda_check(cudaMemsetAsync(records, 0, static_cast<std::size_t>(nseg + 2) * sizeof(segment_record), b.stream),
                     v.name, "cudaMemsetAsync (segment records)");
  const detail::seg_params p = detail::seg_make_params(v, s, nseg, extent, unit, records, so);
  const detail::device_props props = detail::current_props(v.name);
  const int level = detail::seg_kernel_level(mode);
  detail::seg_launch(level, p, detail::seg_blocks(p, props, level), b.stream);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) detail::cuda_fail(v.name, e, "the segment kernel launch");
}

namespace detail {

/// One segmented check's device and pinned buffers and event (pooled per process, never freed: a buffer is
/// reused once its event has completed).
struct seg_buffers {
  int device = 0;
  std::size_t capacity = 0;  // segment records
  segment_record* dev = nullptr;
  segment_record* host = nullptr;  // pinned
  cudaEvent_t event = nullptr;
  bool launched = false;
};

struct seg_pool {
  std::mutex mu;
  std::vector<seg_buffers*> free;
  static seg_pool& get() {
    static seg_pool* p = new seg_pool;  // process lifetime (no teardown after the CUDA context is gone)
    return *p;
  }
  seg_buffers* acquire(std::size_t records, cudaStream_t stream, const char* name) {
    int dev = 0;
    cuda_check(cudaGetDevice(&dev), name, "cudaGetDevice");
    {
      std::lock_guard<std::mutex> lock(mu);
      for (std::size_t i = 0; i < free.size(); ++i) {
        seg_buffers* b = free[i];
        if (b->device != dev || b->capacity < records) continue;
        if (b->launched && query_event(b->event) == cudaErrorNotReady) continue;
        free.erase(free.begin() + static_cast<std::ptrdiff_t>(i));
        return b;
      }
    }
    auto* b = new seg_buffers;
    b->device = dev;
    b->capacity = records < 64 ? 64 : records;
    cuda_check(cudaEventCreateWithFlags(&b->event, cudaEventDisableTiming), name, "cudaEventCreateWithFlags");
    void* d = nullptr;
    cuda_check(cudaMallocAsync(&d, b->capacity * sizeof(segment_record), stream), name, "cudaMallocAsync (segment records)");
    b->dev = static_cast<segment_record*>(d);
    void* h = nullptr;
    cuda_check(cudaHostAlloc(&h, b->capacity * sizeof(segment_record), cudaHostAllocPortable), name,
               "cudaHostAlloc (segment records)");
    b->host = static_cast<segment_record*>(h);
    return b;
  }
  void release(seg_buffers* b) {
    std::lock_guard<std::mutex> lock(mu);
    free.push_back(b);
  }
};

struct seg_state {
  seg_buffers* buf = nullptr;
  tensor_view view;
  std::string name;
  device_segments segs;
  std::vector<std::int64_t> ids;
  check_mode mode = check_mode::concise_health;
  segment_options so;
  ~seg_state() {
    if (buf != nullptr) seg_pool::get().release(buf);
  }
};

}  // namespace detail

/// The result of one segmented check on the device (checker::check with segments). Cheap to copy; get() waits
/// for this check's work only.
class pending_segmented {
 public:
  pending_segmented() = default;
  bool valid() const { return st_ != nullptr; }
  const char* name() const { return st_ != nullptr ? st_->name.c_str() : ""; }
  bool ready() const {
    require("ready");
    if (total_.valid() && !total_.ready()) return false;
    if (st_->buf == nullptr) return true;
    const cudaError_t e = detail::query_event(st_->buf->event);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    detail::cuda_fail(name(), e, "cudaEventQuery");
  }
  void wait() const {
    require("wait");
    if (total_.valid()) total_.wait();
    if (st_->buf != nullptr) detail::cuda_check(cudaEventSynchronize(st_->buf->event), name(), "cudaEventSynchronize");
  }
  /// Waits, then returns the result: the fields and semantics of nanscope::check(view, segments, opt, so).
  /// Throws nanscope::error naming the tensor when the kernel found the device offsets invalid.
  segmented_result get() const {
    wait();
    const segment_record* recs = st_->buf != nullptr ? st_->buf->host : nullptr;
    segmented_result r = finalize_segments(nullptr, recs, st_->view, st_->segs, st_->mode, st_->so);
    if (total_.valid()) r.total = total_.get();
    return r;
  }

 private:
  friend class checker;
  void require(const char* what) const {
    if (st_ == nullptr) ::nanscope::detail::fail(nullptr, std::string("pending_segmented::") + what + " on an empty handle");
  }
  std::shared_ptr<detail::seg_state> st_;
  pending total_;
};

namespace detail {

/// The segment part of a checker's segmented check of b (validated), its records copied to pinned memory and
/// the event recorded; null buffers when nothing is read.
inline std::shared_ptr<seg_state> seg_enqueue_checked(const buffer_view& b, const device_segments& s,
                                                      check_mode mode, const segment_options& so) {
  const tensor_view& v = b.view;
  auto st = std::make_shared<seg_state>();
  st->name = v.name != nullptr ? v.name : "";
  st->view = v;
  st->view.name = v.name != nullptr ? st->name.c_str() : nullptr;
  st->segs = s;
  if (s.ids != nullptr) st->ids.assign(s.ids, s.ids + s.id_count);
  st->segs.ids = s.ids != nullptr ? st->ids.data() : nullptr;
  st->mode = mode;
  st->so = so;
  const std::size_t need = segment_records_needed(v, s, so);
  if (!seg_reads(v, mode)) return st;
  st->buf = seg_pool::get().acquire(need, b.stream, v.name);
  std::size_t none = 0;
  // stats takes its totals from the checker's own health check: only the segment launch here (non-finite level)
  check_segmented_async(&none, none, b, s, nullptr, st->buf->dev,
                        level_of(mode, v.type, v.numel()) >= 3 ? check_mode::concise_health : mode, so);
  cuda_check(cudaMemcpyAsync(st->buf->host, st->buf->dev, need * sizeof(segment_record), cudaMemcpyDeviceToHost,
                             b.stream),
             v.name, "cudaMemcpyAsync (segment records)");
  cuda_check(cudaEventRecord(st->buf->event, b.stream), v.name, "cudaEventRecord");
  st->buf->launched = true;
  return st;
}

}  // namespace detail

inline pending_segmented checker::check(const buffer_view& v, const device_segments& s, const check_options& opt,
                                        const segment_options& so) {
  std::vector<pending_segmented> r = check_batch(&v, &s, 1, opt, so);
  return r[0];
}

inline std::vector<pending_segmented> checker::check_batch(const buffer_view* views, const device_segments* segs,
                                                           std::size_t count, const check_options& opt,
                                                           const segment_options& so) {
  std::vector<pending_segmented> out(count);
  if (count == 0) return out;
  if (views == nullptr || segs == nullptr) ::nanscope::detail::fail(nullptr, "check_batch: null views or segments");
  const char* name0 = views[0].view.name;
  if (detail::is_capturing(views[0].stream, name0))
    ::nanscope::detail::fail(name0, "segmented checks through the checker cannot be captured into a CUDA graph "
                                    "(they allocate and copy records): use check_segmented_async with your own "
                                    "records inside graph capture");
  for (std::size_t i = 0; i < count; ++i) {
    validate(views[i].view);
    (void)segment_records_needed(views[i].view, segs[i], so);
  }
  // totals of stats (moments): one health launch for the batch (as check_batch); full_health's come from the
  // segment kernel itself
  const bool health = static_cast<int>(::nanscope::detail::level_for(opt.mode)) >= 3;
  pending_batch totals;
  if (health) totals = check_batch(views, count, opt);
  for (std::size_t i = 0; i < count; ++i) {
    if (views[i].stream != views[0].stream)
      ::nanscope::detail::fail(views[i].view.name, "check_batch: every view of a batch must be on the same stream");
    out[i].st_ = detail::seg_enqueue_checked(views[i], segs[i], opt.mode, so);
    if (health) out[i].total_ = totals[i];
  }
  return out;
}

}  // namespace cuda
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_CUDA_SEGMENTS_LAUNCH_CUH
