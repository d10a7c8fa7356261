// nanscope — cuda.cuh: the CUDA backend. One fused pass per tensor on the device (every field of the host
// pass, every float dtype), many tensors per launch, results written by the device into pinned host memory
// and read by the host only when asked. Needs a CUDA compiler; host code keeps including the .hpp headers,
// whose meaning does not change under nvcc.
//
// Layers:
//  - nanscope::cuda::check_async(): CUB's calling convention. The caller owns the temporary storage (ask for its
//    size with a null pointer) and the result records (device-writable: pinned host or device memory).
//    Nothing is allocated, nothing synchronizes, and it can be captured into a CUDA graph.
//  - nanscope::cuda::checker: pools the storage, the pinned records and the events, and hands out `pending`
//    handles whose get() waits for their own event only.
//
// Numerics (docs/formats.md#numeric-conventions, identical to the host pass): counts, extrema, abs_min(_nonzero)
// and the first non-finite index are exact and equal the host's bit for bit. mean and std are computed in
// double with per-thread shifts and Chan's combination in a fixed order: deterministic run to run on a given
// device and launch shape, and within 1e-9 relative (of max(|mean|, std)) of the host's portable kernel
// (check_options::with_isa(isa::scalar)); the host's AVX2/AVX-512 kernels sum in f32 and are within ~1e-7.
#ifndef NANSCOPE_CUDA_CUH
#define NANSCOPE_CUDA_CUH

#if !defined(__CUDACC__)
#error "nanscope/cuda.cuh is CUDA code: compile it with nvcc (host-only code includes <nanscope/check.hpp>)"
#endif

#include "block_scaled.hpp"
#include "check.hpp"
#include "deferred.hpp"
#include "detail/cuda_pass.cuh"
#include "detail/cuda_segments.cuh"
#include "recorder.hpp"
#include "view.hpp"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace cuda {

namespace detail {

[[noreturn]] inline void cuda_fail(const char* tensor, cudaError_t e, const char* what) {
  ::nanscope::detail::fail(tensor, std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e) + " (" +
                                       cudaGetErrorName(e) + ")");
}
inline void cuda_check(cudaError_t e, const char* tensor, const char* what) {
  if (e != cudaSuccess) cuda_fail(tensor, e, what);
}
/// cudaEventQuery's "not ready" is recorded as the thread's last error: clear it, so that the launch check of
/// a later check does not mistake it for a failure.
inline cudaError_t query_event(cudaEvent_t ev) {
  const cudaError_t e = cudaEventQuery(ev);
  if (e == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
  return e;
}

/// r := group G (see record_groups) of the record at p, read through L2, bypassing L1 (another block wrote it).
template <int L, int G>
__device__ inline void load_group(device_result& r, const device_result* p) {
  if constexpr (G == 0) {
    r.nan = __ldcg(&p->nan);
    r.pinf = __ldcg(&p->pinf);
    r.ninf = __ldcg(&p->ninf);
    r.first_nf = __ldcg(&p->first_nf);
    if constexpr (L >= 2) {
      r.neg = __ldcg(&p->neg);
      r.zero = __ldcg(&p->zero);
      r.sub = __ldcg(&p->sub);
      r.kmin = __ldcg(&p->kmin);
      r.kmax = __ldcg(&p->kmax);
      r.amin_nz = __ldcg(&p->amin_nz);
    }
  } else {
    r.m[G - 1].n = __ldcg(&p->m[G - 1].n);
    r.m[G - 1].shift = __ldcg(&p->m[G - 1].shift);
    r.m[G - 1].mean = __ldcg(&p->m[G - 1].mean);
    r.m[G - 1].m2 = __ldcg(&p->m[G - 1].m2);
  }
}

/// Group G of *dst := group G of r.
template <int L, int G>
__device__ inline void store_group(device_result* dst, const device_result& r) {
  if constexpr (G == 0) {
    dst->nan = r.nan;
    dst->pinf = r.pinf;
    dst->ninf = r.ninf;
    dst->first_nf = r.first_nf;
    if constexpr (L >= 2) {
      dst->neg = r.neg;
      dst->zero = r.zero;
      dst->sub = r.sub;
      dst->kmin = r.kmin;
      dst->kmax = r.kmax;
      dst->amin_nz = r.amin_nz;
    }
  } else {
    dst->m[G - 1] = r.m[G - 1];
  }
}

/// The fields a kernel of level L does not compute, at their identities (a result record is read whole).
template <int L>
__device__ inline void store_other_fields(device_result* dst) {
  const device_result id = identity_result();
  if constexpr (L < 2) {
    dst->neg = id.neg;
    dst->zero = id.zero;
    dst->sub = id.sub;
    dst->kmin = id.kmin;
    dst->kmax = id.kmax;
    dst->amin_nz = id.amin_nz;
  }
  if constexpr (L < 3) {
    for (int q = 0; q < moment_parts; ++q) dst->m[q] = id.m[q];
  }
}

inline constexpr int block_warps = block_threads / 32;
static_assert(block_threads % 32 == 0, "whole warps");

/// Lane 0 of the warp := the merge of the warp's records in group G (the other lanes' results are partial): a
/// shuffle tree, lane i takes lane i + 16, then i + 8, ..., 1; the merges of merge_group<L, G>.
template <int L, int G>
__device__ inline void warp_merge_group(device_result& v) {
  constexpr unsigned all = 0xFFFFFFFFu;
  for (unsigned o = 16; o > 0; o >>= 1) {
    device_result b = identity_result();  // only group G is read by merge_group<L, G>
    if constexpr (G == 0) {
      b.nan = __shfl_down_sync(all, v.nan, o);
      b.pinf = __shfl_down_sync(all, v.pinf, o);
      b.ninf = __shfl_down_sync(all, v.ninf, o);
      b.first_nf = __shfl_down_sync(all, v.first_nf, o);
      if constexpr (L >= 2) {
        b.neg = __shfl_down_sync(all, v.neg, o);
        b.zero = __shfl_down_sync(all, v.zero, o);
        b.sub = __shfl_down_sync(all, v.sub, o);
        b.kmin = __shfl_down_sync(all, v.kmin, o);
        b.kmax = __shfl_down_sync(all, v.kmax, o);
        b.amin_nz = __shfl_down_sync(all, v.amin_nz, o);
      }
    } else {
      b.m[G - 1].n = __shfl_down_sync(all, v.m[G - 1].n, o);
      b.m[G - 1].shift = __shfl_down_sync(all, v.m[G - 1].shift, o);
      b.m[G - 1].mean = __shfl_down_sync(all, v.m[G - 1].mean, o);
      b.m[G - 1].m2 = __shfl_down_sync(all, v.m[G - 1].m2, o);
    }
    merge_group<L, G>(v, b);
  }
}

/// Every group of v merged across the warp, lane 0 storing each into the warp's slot of `warps` (shared memory)
/// as soon as it is done: only one group's incoming values are live at a time.
template <int L, int G = 0>
__device__ inline void warp_phase(device_result& v, device_result* warps) {
  warp_merge_group<L, G>(v);
  if (threadIdx.x % 32 == 0) store_group<L, G>(&warps[threadIdx.x / 32], v);
  if constexpr (G + 1 < record_groups<L>) warp_phase<L, G + 1>(v, warps);
}

/// Thread 0: the warps' slots merged in warp order and stored into *dst, group by group.
template <int L, int G = 0>
__device__ inline void store_block(const device_result* warps, device_result* dst) {
  device_result t = identity_result();
  for (int w = 0; w < block_warps; ++w) merge_group<L, G>(t, warps[w]);
  store_group<L, G>(dst, t);
  if constexpr (G + 1 < record_groups<L>) store_block<L, G + 1>(warps, dst);
}

/// The last block: thread i merges the blocks' records i, i + B, i + 2B, ... (B = block_threads), then the warp
/// phase; one pass over the records per group.
template <int L, int G = 0>
__device__ inline void gather_phase(const device_result* parts, unsigned n, device_result* warps) {
  device_result acc = identity_result();
  for (unsigned i = threadIdx.x; i < n; i += block_threads) {
    device_result r = identity_result();
    load_group<L, G>(r, parts + i);
    merge_group<L, G>(acc, r);
  }
  warp_merge_group<L, G>(acc);
  if (threadIdx.x % 32 == 0) store_group<L, G>(&warps[threadIdx.x / 32], acc);
  if constexpr (G + 1 < record_groups<L>) gather_phase<L, G + 1>(parts, n, warps);
}

/// Blocks of block_threads per SM the kernel of level L is compiled for (__launch_bounds__' second argument: a
/// cap of 65536 / (256 x blocks) registers a thread). Without it ptxas picks its own cap and spilled a few bytes
/// in the level-1 and level-2 kernels; tests/cuda/resource_usage.py checks the result (docs/cuda.md).
template <int L>
inline constexpr int min_blocks_per_sm = L >= 3 ? 3 : 4;

template <int L, class Params>
// __grid_constant__: the kernel indexes its parameters dynamically (the tensor lookup); without it nvcc would
// copy the ~25 KB of parameters to every thread's local memory.
__global__ void __launch_bounds__(block_threads, min_blocks_per_sm<L>) health_kernel(const __grid_constant__ Params prm) {
  __shared__ device_result warps[block_warps];
  __shared__ bool last;
  const int ti = tensor_of_block(prm, blockIdx.x);  // uniform per block
  const tensor_desc& d = prm.desc[ti];
  const unsigned end = tensor_block_end(prm, ti);
  const unsigned nblocks = end - d.block_begin;
  const unsigned local_block = blockIdx.x - d.block_begin;
  const unsigned long long g = static_cast<unsigned long long>(local_block) * block_threads + threadIdx.x;
  const unsigned long long stride = static_cast<unsigned long long>(nblocks) * block_threads;

  // The block merge (fixed order: a shuffle tree in each warp, then the warps in order), the fields of level L
  // only, one group at a time; thread 0 stores the block's record: the result, or the block's partial record.
  device_result mine = thread_record<L>(d, d.layout != 0 ? &prm.layouts[d.layout - 1] : nullptr, g, stride);
  warp_phase<L>(mine, warps);
  __syncthreads();
  if (nblocks == 1) {
    if (threadIdx.x == 0) {
      store_block<L>(warps, prm.results + d.result);
      store_other_fields<L>(prm.results + d.result);
    }
    return;
  }
  if (threadIdx.x == 0) {
    store_block<L>(warps, prm.partials + blockIdx.x);
    __threadfence();
    const unsigned done = atomicAdd(prm.counters + ti, 1u);
    last = done == nblocks - 1;
  }
  __syncthreads();  // also: thread 0 has read `warps`
  if (!last) return;
  __threadfence();
  gather_phase<L>(prm.partials + d.block_begin, nblocks, warps);
  __syncthreads();
  if (threadIdx.x == 0) {
    store_block<L>(warps, prm.results + d.result);
    store_other_fields<L>(prm.results + d.result);
    prm.counters[ti] = 0;  // ready for the next launch on this storage
  }
}

// ---------------------------------------------------------------------------------------------------------
// Host side: device properties, launch planning
// ---------------------------------------------------------------------------------------------------------

/// Properties of the current device, cached per device id.
inline device_props current_props(const char* tensor) {
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), tensor, "cudaGetDevice");
  static std::mutex mu;
  static std::vector<device_props> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<std::size_t>(dev) >= cache.size()) cache.resize(static_cast<std::size_t>(dev) + 1);
  device_props& p = cache[static_cast<std::size_t>(dev)];
  if (p.sm_count == 0) {
    cuda_check(cudaDeviceGetAttribute(&p.sm_count, cudaDevAttrMultiProcessorCount, dev), tensor,
               "cudaDeviceGetAttribute");
    int occ = 0;
    cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, health_kernel<3, batch_params>, block_threads, 0),
               tensor, "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    p.blocks_per_sm = occ > 0 ? occ : 1;
  }
  return p;
}

/// Host-side check of a (validated) device view's memory: device-readable, and on `dev`, the current device.
inline void check_device_pointer(const buffer_view& b, int dev) {
  const tensor_view& v = b.view;
  if (v.space == memory_space::host)
    ::nanscope::detail::fail(v.name, "the view says host memory: use nanscope::check on the host, or mark it "
                                     "memory_space::cuda_device");
  if (v.numel() == 0 || !is_float(v.type)) return;
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, v.data);
  if (e != cudaSuccess) cuda_fail(v.name, e, "cudaPointerGetAttributes");
  switch (attr.type) {
    case cudaMemoryTypeDevice:
      if (attr.device != dev)
        ::nanscope::detail::fail(v.name, "data is on CUDA device " + std::to_string(attr.device) +
                                             " but the current device is " + std::to_string(dev) +
                                             " (cudaSetDevice first)");
      return;
    case cudaMemoryTypeManaged: return;
    case cudaMemoryTypeHost:
      if (v.space == memory_space::cuda_pinned || v.space == memory_space::cuda_managed) return;
      ::nanscope::detail::fail(v.name, "a pinned host pointer was passed as device memory (mark the view "
                                       "memory_space::cuda_pinned to read it over the bus, or check it on the host)");
    default:
      ::nanscope::detail::fail(v.name, "a host pointer was passed as device memory (cudaPointerGetAttributes: "
                                       "unregistered memory)");
  }
}

template <int L, class Params>
inline void launch_level(const Params& prm, cudaStream_t s) {
  health_kernel<L, Params><<<prm.total_blocks, block_threads, 0, s>>>(prm);
}

template <class Params>
inline void launch(int level, const Params& prm, cudaStream_t s) {
  switch (level) {
    case 1: launch_level<1>(prm, s); break;
    case 2: launch_level<2>(prm, s); break;
    default: launch_level<3>(prm, s); break;
  }
}

/// Launch parameters of the batch path: ~32 KB, one per thread (no heap allocation per check).
inline batch_params& thread_batch_params() {
  static thread_local batch_params p;
  return p;
}

/// Validates the views and the mode, plans the launches (their size only) and returns the temporary storage
/// they need.
inline std::size_t storage_needed(const buffer_view* views, std::size_t count, check_mode mode,
                                  const device_props& props) {
  if (views == nullptr && count != 0) ::nanscope::detail::fail(nullptr, "check_async: null views with a count");
  if (static_cast<unsigned>(mode) < 1 || static_cast<unsigned>(mode) > 6)
    ::nanscope::detail::fail(count != 0 ? views[0].view.name : nullptr,
                             "unknown check mode " + std::to_string(static_cast<unsigned>(mode)));
  for (std::size_t i = 0; i < count; ++i) validate(views[i].view);
  static thread_local std::vector<std::size_t> idx;
  batch_params& bp = thread_batch_params();
  std::size_t max_blocks = 0;
  for_each_group(views, count, mode, idx, [&](std::size_t base, const std::size_t* ix, std::size_t m) {
    single_params sp{};
    const unsigned b = m == 1 ? plan(views, ix, 1, base, props, sp, 1)
                              : plan(views, ix, m, base, props, bp, batch_strided_cap);
    if (b > max_blocks) max_blocks = b;
  });
  return storage_bytes(static_cast<std::size_t>(batch_cap), max_blocks);
}

/// The launches of views already validated by storage_needed(), into storage of the size it gave.
inline void enqueue(void* temp_storage, const buffer_view* views, std::size_t count, device_result* results,
                    check_mode mode, cudaStream_t stream, const device_props& props) {
  const char* first_name = count != 0 ? views[0].view.name : nullptr;
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), first_name, "cudaGetDevice");
  bool any = false;
  for (std::size_t i = 0; i < count; ++i) {
    if (level_of(mode, views[i].view.type, views[i].view.numel()) == 0) continue;
    check_device_pointer(views[i], dev);
    any = true;
  }
  if (!any) return;
  if (results == nullptr) ::nanscope::detail::fail(first_name, "check_async: null results");
  const int level = static_cast<int>(::nanscope::detail::level_for(mode));
  // An error left pending by earlier CUDA calls (not ours) would otherwise be reported as a launch failure.
  const cudaError_t earlier = cudaGetLastError();
  if (earlier != cudaSuccess && earlier != cudaErrorNotReady)
    cuda_fail(first_name, earlier, "an earlier CUDA call (the error was pending before nanscope's launch)");
  auto* counters = static_cast<unsigned*>(temp_storage);
  auto* partials = reinterpret_cast<device_result*>(static_cast<unsigned char*>(temp_storage) +
                                                    storage_bytes(static_cast<std::size_t>(batch_cap), 0));
  static thread_local std::vector<std::size_t> idx;
  batch_params& bp = thread_batch_params();
  for_each_group(views, count, mode, idx, [&](std::size_t base, const std::size_t* ix, std::size_t m) {
    if (m == 1) {
      single_params sp{};
      plan(views, ix, 1, base, props, sp, 1);
      sp.counters = counters;
      sp.partials = partials;
      sp.results = results + base;
      launch(level, sp, stream);
    } else {
      plan(views, ix, m, base, props, bp, batch_strided_cap);
      bp.counters = counters;
      bp.partials = partials;
      bp.results = results + base;
      launch(level, bp, stream);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) cuda_fail(views[ix[0]].view.name, e, "the health kernel launch");
  });
}

}  // namespace detail

/// Queues the fused pass over `count` device views at `mode` on `stream`, writing one device_result per view
/// into `results[i]` (device-writable memory: pinned host memory from cudaHostAlloc, or device memory).
///
/// CUB's calling convention: with `temp_storage == nullptr` only `temp_storage_bytes` is set (it depends on
/// the views' sizes and the current device). The storage must be zero-filled before its first use
/// (cudaMemset) and every completed call leaves it so; one storage serves one stream at a time.
/// Views that need no device work (empty, integer dtypes, the shape / no_tensor modes) get no record: finalize()
/// computes their result from the view alone. Up to 1000 tensors go into one launch (more take several).
/// Never allocates device memory, never synchronizes; can be captured into a CUDA graph. Throws
/// nanscope::error for invalid views, host pointers, too little storage and launch errors.
inline void check_async(void* temp_storage, std::size_t& temp_storage_bytes, const buffer_view* views,
                        std::size_t count, device_result* results, check_mode mode, cudaStream_t stream) {
  const detail::device_props props = detail::current_props(count != 0 && views != nullptr ? views[0].view.name : nullptr);
  const std::size_t need = detail::storage_needed(views, count, mode, props);
  if (temp_storage == nullptr) {
    temp_storage_bytes = need;
    return;
  }
  if (temp_storage_bytes < need)
    ::nanscope::detail::fail(views[0].view.name, "check_async: temporary storage of " +
                                                     std::to_string(temp_storage_bytes) + " bytes, " +
                                                     std::to_string(need) + " needed");
  detail::enqueue(temp_storage, views, count, results, mode, stream, props);
}

// ---------------------------------------------------------------------------------------------------------
// checker: pooled storage, pinned records, events and handles
// ---------------------------------------------------------------------------------------------------------

namespace detail {

/// One check's (or one batch's) records and event. Pooled: a released ticket is reused once its event has
/// completed, so an abandoned handle never has its records overwritten by a later check while in flight.
struct ticket {
  std::atomic<int> refs{0};
  cudaEvent_t event = nullptr;
  device_result* records = nullptr;  // pinned, mapped
  std::size_t capacity = 0;
  std::size_t count = 0;
  check_mode mode = check_mode::stats;
  std::vector<tensor_view> views;  // shapes for finalize; names point into `names`
  std::vector<std::string> names;
  bool launched = false;
  bool captured = false;
};

struct stream_storage {
  cudaStream_t stream = nullptr;
  void* ptr = nullptr;
  std::size_t bytes = 0;
};

struct checker_state {
  int device = 0;
  std::mutex mu;
  std::vector<std::unique_ptr<ticket>> tickets;
  std::vector<ticket*> free_tickets;
  std::vector<stream_storage> storage;
  std::vector<void*> retired;  // outgrown storage (a captured graph may still use it)

  ~checker_state() {
    int prev = 0;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    cudaSetDevice(device);
    // cudaFree waits for the device (the streams may be gone already: they are not touched)
    for (auto& s : storage)
      if (s.ptr != nullptr) cudaFree(s.ptr);
    for (void* p : retired) cudaFree(p);
    for (auto& t : tickets) {
      if (t->event != nullptr) {
        cudaEventSynchronize(t->event);
        cudaEventDestroy(t->event);
      }
      if (t->records != nullptr) cudaFreeHost(t->records);
    }
    if (have_prev) cudaSetDevice(prev);
  }

  /// A free ticket with room for `count` records, whose previous work has completed.
  ticket* acquire(std::size_t count, bool capturing, const char* name) {
    std::lock_guard<std::mutex> lock(mu);
    for (std::size_t i = 0; i < free_tickets.size(); ++i) {
      ticket* t = free_tickets[i];
      if (t->capacity < count) continue;
      // During capture no event may be queried: only tickets that never launched (reserve() leaves them so)
      if (capturing && t->launched) continue;
      if (!capturing && t->launched && query_event(t->event) == cudaErrorNotReady) continue;
      free_tickets.erase(free_tickets.begin() + static_cast<std::ptrdiff_t>(i));
      t->refs.store(1, std::memory_order_relaxed);
      return t;
    }
    if (capturing)
      ::nanscope::detail::fail(name, "the checker has no free pinned records for " + std::to_string(count) +
                                         " tensors during CUDA graph capture: call checker::reserve() before capturing");
    auto t = std::make_unique<ticket>();
    const std::size_t cap = count < 64 ? 64 : count;
    cuda_check(cudaEventCreateWithFlags(&t->event, cudaEventDisableTiming), name, "cudaEventCreateWithFlags");
    void* p = nullptr;
    cuda_check(cudaHostAlloc(&p, cap * sizeof(device_result), cudaHostAllocMapped | cudaHostAllocPortable), name,
               "cudaHostAlloc (pinned result records)");
    t->records = static_cast<device_result*>(p);
    t->capacity = cap;
    t->refs.store(1, std::memory_order_relaxed);
    tickets.push_back(std::move(t));
    return tickets.back().get();
  }

  void release(ticket* t) {
    if (t->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    // A ticket captured into a CUDA graph is written by every replay of that graph, which may outlive the
    // handles: it never returns to the pool (freed with the checker).
    if (t->captured) return;
    std::lock_guard<std::mutex> lock(mu);
    free_tickets.push_back(t);
  }

  /// Zero-filled temporary storage of at least `bytes` for `stream` (grown stream-ordered, never during capture).
  void* storage_for(cudaStream_t stream, std::size_t bytes, bool capturing, const char* name) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& s : storage) {
      if (s.stream != stream) continue;
      if (s.bytes >= bytes) return s.ptr;
      if (capturing)
        ::nanscope::detail::fail(name, "the checker's storage for this stream is too small during CUDA graph "
                                       "capture: call checker::reserve() with the largest batch first");
      // The old storage may be baked into a captured graph: it is retired, not freed (freed with the checker).
      // Growth doubles, so the retired total stays below the current size.
      if (bytes < 2 * s.bytes) bytes = 2 * s.bytes;
      retired.push_back(s.ptr);
      s.ptr = nullptr;
      s.bytes = 0;
      cuda_check(cudaMallocAsync(&s.ptr, bytes, stream), name, "cudaMallocAsync (checker storage)");
      cuda_check(cudaMemsetAsync(s.ptr, 0, bytes, stream), name, "cudaMemsetAsync");
      s.bytes = bytes;
      return s.ptr;
    }
    if (capturing)
      ::nanscope::detail::fail(name, "the checker has no storage for this stream during CUDA graph capture: call "
                                     "checker::reserve(stream, ...) before capturing");
    stream_storage s;
    s.stream = stream;
    cuda_check(cudaMallocAsync(&s.ptr, bytes, stream), name, "cudaMallocAsync (checker storage)");
    cuda_check(cudaMemsetAsync(s.ptr, 0, bytes, stream), name, "cudaMemsetAsync");
    s.bytes = bytes;
    storage.push_back(s);
    return storage.back().ptr;
  }
};

inline bool is_capturing(cudaStream_t s, const char* name) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cuda_check(cudaStreamIsCapturing(s, &st), name, "cudaStreamIsCapturing");
  return st == cudaStreamCaptureStatusActive;
}

}  // namespace detail

/// The result of one asynchronous check. Cheap to copy; the records stay valid while a handle refers to
/// them. ready() never blocks; wait() and get() wait for this check's event only.
class pending {
 public:
  pending() = default;
  pending(const pending& o) : st_(o.st_), tk_(o.tk_), index_(o.index_) {
    if (tk_ != nullptr) tk_->refs.fetch_add(1, std::memory_order_relaxed);
  }
  pending(pending&& o) noexcept : st_(std::move(o.st_)), tk_(o.tk_), index_(o.index_) { o.tk_ = nullptr; }
  pending& operator=(pending o) noexcept {
    std::swap(st_, o.st_);
    std::swap(tk_, o.tk_);
    std::swap(index_, o.index_);
    return *this;
  }
  ~pending() {
    if (tk_ != nullptr) st_->release(tk_);
  }

  bool valid() const { return tk_ != nullptr; }
  /// The tensor's name as given to the check (empty when unnamed).
  const char* name() const { return tk_ != nullptr && tk_->views[index_].name != nullptr ? tk_->views[index_].name : ""; }
  /// True once the device has written the result (always true for checks with no device work).
  bool ready() const {
    require("ready");
    if (!tk_->launched) return true;
    const cudaError_t e = detail::query_event(tk_->event);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    detail::cuda_fail(name(), e, "cudaEventQuery");
  }
  /// Blocks until the result is written. CUDA errors of the kernel surface here, naming the tensor.
  void wait() const {
    require("wait");
    if (tk_->launched) detail::cuda_check(cudaEventSynchronize(tk_->event), name(), "cudaEventSynchronize");
  }
  /// Waits, then returns the result (same fields and semantics as nanscope::check on the host).
  health_result get() const {
    wait();
    return finalize(tk_->records[index_], tk_->views[index_], tk_->mode);
  }

 private:
  friend class checker;
  friend class pending_batch;
  pending(std::shared_ptr<detail::checker_state> st, detail::ticket* tk, std::size_t index)
      : st_(std::move(st)), tk_(tk), index_(index) {}
  void require(const char* what) const {
    if (tk_ == nullptr) ::nanscope::detail::fail(nullptr, std::string("pending::") + what + " on an empty handle");
  }
  std::shared_ptr<detail::checker_state> st_;
  detail::ticket* tk_ = nullptr;
  std::size_t index_ = 0;
};

/// The results of one batch (one launch per 1000 tensors, one event).
class pending_batch {
 public:
  pending_batch() = default;
  std::size_t size() const { return first_.valid() ? first_.tk_->count : 0; }
  bool ready() const { return size() == 0 || first_.ready(); }
  void wait() const {
    if (size() != 0) first_.wait();
  }
  /// Handle of tensor i (shares the batch's records).
  pending operator[](std::size_t i) const {
    if (i >= size()) ::nanscope::detail::fail(nullptr, "pending_batch: index " + std::to_string(i) + " out of range");
    pending p = first_;
    p.index_ = i;
    return p;
  }
  health_result get(std::size_t i) const { return (*this)[i].get(); }

 private:
  friend class checker;
  explicit pending_batch(pending first) : first_(std::move(first)) {}
  pending first_;
};

class pending_segmented;  // detail/cuda_segments_launch.cuh

/// Checks device tensors asynchronously. Owns, per stream, the temporary storage of check_async, and a pool
/// of pinned result records and events; after warm-up a check allocates nothing on the device or in pinned
/// memory. Thread-safe. Checks inside CUDA graph capture work once reserve() has prepared the storage: the
/// captured launch writes the same records on every replay, and the handle's event is recorded by the graph.
class checker {
 public:
  /// For the current device. Throws nanscope::error when there is no usable CUDA device.
  checker() : st_(std::make_shared<detail::checker_state>()) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0)
      ::nanscope::detail::fail(nullptr, std::string("nanscope::cuda::checker: no CUDA device (") +
                                            (e != cudaSuccess ? cudaGetErrorString(e) : "device count 0") + ")");
    detail::cuda_check(cudaGetDevice(&st_->device), nullptr, "cudaGetDevice");
  }

  int device() const { return st_->device; }

  /// Prepares storage for batches of up to `tensors` tensors of up to `elements` elements each on `stream`,
  /// and `tickets` free result sets: needed before checking inside CUDA graph capture.
  void reserve(cudaStream_t stream, std::size_t tensors, std::uint64_t elements, std::size_t tickets = 4) {
    const detail::device_props props = detail::current_props(nullptr);
    const unsigned per = detail::blocks_for(elements * 8, props);
    std::size_t blocks = tensors * per;
    // plan() gives each tensor at least one block after scaling a batch down to the launch limit
    if (blocks > detail::max_blocks_per_launch + detail::batch_cap)
      blocks = detail::max_blocks_per_launch + detail::batch_cap;
    st_->storage_for(stream, detail::storage_bytes(static_cast<std::size_t>(detail::batch_cap), blocks), false, nullptr);
    std::vector<detail::ticket*> held;
    for (std::size_t i = 0; i < tickets; ++i) held.push_back(st_->acquire(tensors, false, nullptr));
    // capture takes only tickets that never launched (it may not query events): finish and reset them
    for (detail::ticket* t : held) {
      if (t->launched) detail::cuda_check(cudaEventSynchronize(t->event), nullptr, "cudaEventSynchronize");
      t->launched = false;
      st_->release(t);
    }
  }

  /// Queues the check of one device tensor on its stream and returns at once.
  pending check(const buffer_view& v, const check_options& opt = {}) { return check_batch(&v, 1, opt)[0]; }
  /// Same for a view of device memory from any adapter, checked on `stream` (e.g. a LibTorch CUDA tensor:
  /// check(nanscope::torch::any_device_view(t, "name"), at::cuda::getCurrentCUDAStream())).
  pending check(const tensor_view& v, cudaStream_t stream, const check_options& opt = {}) {
    return check(device_buffer(v, stream), opt);
  }

  /// Queues the check of `count` device tensors (all on views[0].stream) in one launch per 1000 tensors.
  pending_batch check_batch(const buffer_view* views, std::size_t count, const check_options& opt = {}) {
    if (count == 0) return pending_batch{};
    if (views == nullptr) ::nanscope::detail::fail(nullptr, "check_batch: null views");
    const char* name0 = views[0].view.name;
    const cudaStream_t stream = views[0].stream;
    int current = 0;
    detail::cuda_check(cudaGetDevice(&current), name0, "cudaGetDevice");
    if (current != st_->device)
      ::nanscope::detail::fail(name0, "the current CUDA device is " + std::to_string(current) + " but this checker is for device " +
                                          std::to_string(st_->device) + " (one checker per device)");
    for (std::size_t i = 1; i < count; ++i)
      if (views[i].stream != stream)
        ::nanscope::detail::fail(views[i].view.name, "check_batch: every view of a batch must be on the same stream");
    const bool capturing = detail::is_capturing(stream, name0);
    // one planning pass for the size (it also validates), one for the launches
    const detail::device_props props = detail::current_props(name0);
    const std::size_t bytes = detail::storage_needed(views, count, opt.mode, props);
    detail::ticket* t = st_->acquire(count, capturing, name0);
    pending first(st_, t, 0);  // owns the ticket from here (released on exceptions)
    t->count = count;
    t->mode = opt.mode;
    t->names.resize(count);
    t->views.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      t->views[i] = views[i].view;
      t->names[i] = views[i].view.name != nullptr ? views[i].view.name : "";
      t->views[i].name = views[i].view.name != nullptr ? t->names[i].c_str() : nullptr;
    }
    bool needs_device = false;
    for (std::size_t i = 0; i < count && !needs_device; ++i)
      needs_device = detail::level_of(opt.mode, views[i].view.type, views[i].view.numel()) != 0;
    t->launched = false;
    t->captured = capturing;
    if (needs_device) {
      void* storage = st_->storage_for(stream, bytes, capturing, name0);
      try {
        detail::enqueue(storage, views, count, t->records, opt.mode, stream, props);
      } catch (...) {
        // earlier groups of the batch may have launched: the records stay out of the pool until they finish
        if (!capturing && cudaEventRecord(t->event, stream) == cudaSuccess) t->launched = true;
        t->captured = false;  // a failed capture is invalid anyway: the ticket may return to the pool
        throw;
      }
      const cudaError_t e = capturing ? cudaEventRecordWithFlags(t->event, stream, cudaEventRecordExternal)
                                      : cudaEventRecord(t->event, stream);
      detail::cuda_check(e, name0, "cudaEventRecord");
      t->launched = true;
    }
    return pending_batch(std::move(first));
  }

  /// Queues a segmented check of one device tensor (docs/segments.md#cuda): the offsets are read by the kernel
  /// from device memory. `total` is check()'s; the segments' flags, counts and first indices are the host
  /// segmented check's. Not for graph capture (use check_segmented_async there).
  pending_segmented check(const buffer_view& v, const device_segments& s, const check_options& opt = {},
                          const segment_options& so = {});
  /// Segmented checks of `count` device tensors, segs[i] for views[i] (all on views[0].stream): the totals of
  /// full_health and stats in one health launch per 1000 tensors, one segment launch per tensor.
  std::vector<pending_segmented> check_batch(const buffer_view* views, const device_segments* segs,
                                             std::size_t count, const check_options& opt = {},
                                             const segment_options& so = {});

  /// The block-scaled what-if statistics of one device tensor (docs/block-scaled.md#cuda), its health from this
  /// checker's check(). Synchronous (waits for the result); not for graph capture (check_block_scaled_async).
  block_scaled_result check_block_scaled(const buffer_view& v, const block_scaled_options& opt = {});

  /// The step boundary: waits for every check queued so far on every stream this checker has used.
  void synchronize() {
    std::vector<cudaStream_t> streams;
    {
      std::lock_guard<std::mutex> lock(st_->mu);
      for (const auto& s : st_->storage) streams.push_back(s.stream);
    }
    for (cudaStream_t s : streams) detail::cuda_check(cudaStreamSynchronize(s), nullptr, "cudaStreamSynchronize");
  }

 private:
  std::shared_ptr<detail::checker_state> st_;
};

/// The recorder for device tensors. Scopes log each tensor with an asynchronous check (nothing waits);
/// end_step() is the step boundary: one synchronization for all of the step's checks, then the step is replayed
/// into the recorder, whose frames, detections, reports, warnings and layer-tree events are those the host path
/// gives for the same values. Integer tensors are recorded shape-only (no abs range, which the host path adds)
/// and the recorder's count_margins does not apply to device tensors. One per recording thread.
class deferred_recorder {
 public:
  using log_type = deferred_log<pending>;

  deferred_recorder(recorder& r, checker& c) : log_(r), ck_(c), mode_(r.options().mode) {}
  deferred_recorder(const deferred_recorder&) = delete;
  deferred_recorder& operator=(const deferred_recorder&) = delete;

  class scope {
   public:
    scope(deferred_recorder& d, std::string_view name, std::string_view class_name, source_location where = {})
        : d_(d), s_(d.log_, name, class_name, where) {}
    void input(const buffer_view& b, source_location where = {}) { s_.input(b.view, d_.check(b), where); }
    void input(const buffer_view& b, std::string_view name, source_location where = {}) {
      s_.input(b.view, d_.check(b), name, where);
    }
    void output(const buffer_view& b, source_location where = {}) { s_.output(b.view, d_.check(b), where); }
    void output(const buffer_view& b, int i, source_location where = {}) { s_.output(b.view, d_.check(b), i, where); }
    void parameter(const buffer_view& b, std::string_view name, source_location where = {}) {
      s_.parameter(b.view, d_.check(b), name, where);
    }
    void non_tensor_input(bool is_none = false) { s_.non_tensor_input(is_none); }
    void value_input(std::string_view repr) { s_.value_input(repr); }

   private:
    deferred_recorder& d_;
    log_type::scope s_;
  };

  /// A checkpoint (DETECT_OVERFLOW) of a device tensor, under the innermost open scope at replay.
  void checkpoint(const buffer_view& b, std::string_view context, source_location where = {}) {
    log_.checkpoint(b.view, check(b), context, where);
  }
  /// Checks logged since the last end_step().
  std::size_t pending_tensors() const { return log_.pending_tensors(); }
  /// The step boundary: waits once for the step's checks, then replays the step into the recorder.
  void end_step() {
    // One wait: for the step's last check (the checks of one stream finish in order; replay's get() calls wait
    // for any other stream's). Not checker::synchronize(), which would touch every stream the checker knows.
    if (last_.valid()) last_.wait();
    last_ = pending{};
    log_.replay();
    mode_ = log_.owner().options().mode;  // options changed during the step apply from the next one
  }

 private:
  pending check(const buffer_view& b) {
    last_ = ck_.check(b, check_options{}.with_mode(mode_));
    return last_;
  }
  log_type log_;
  checker& ck_;
  check_mode mode_;
  pending last_;
};

}  // namespace cuda
NANSCOPE_NAMESPACE_END

#include "detail/cuda_segments_launch.cuh"  // segmented checks: the kernel, check_segmented_async, pending_segmented
#include "detail/cuda_block_scaled_launch.cuh"  // block-scaled what-if statistics: check_block_scaled

#endif  // NANSCOPE_CUDA_CUH
