// nanscope — detail/cuda_block_scaled_launch.cuh: the CUDA side of the block-scaled what-if statistics: the kernels
// (bsc_kernel, and bsc_quad_kernel for contiguous rows of a multiple of 32), their launch, nanscope::cuda::check_block_scaled, check_block_scaled_async / finalize_block_scaled
// and checker::check_block_scaled. Included at the end of <nanscope/cuda.cuh>; the per-block arithmetic is in
// detail/cuda_block_scaled.cuh (shared with the host emulation test), which describes the kernel's design.
#ifndef NANSCOPE_DETAIL_CUDA_BLOCK_SCALED_LAUNCH_CUH
#define NANSCOPE_DETAIL_CUDA_BLOCK_SCALED_LAUNCH_CUH

#if !defined(__CUDACC__)
#error "nanscope/detail/cuda_block_scaled_launch.cuh is CUDA code: include <nanscope/cuda.cuh> (compiled by nvcc)"
#endif

#include "cuda_block_scaled.cuh"

#include <cuda_runtime.h>

#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace cuda {

/// The device records of one block-scaled check (check_block_scaled_async): per format the summed counts, the
/// scale-exponent histogram and the worst block's key, and the tensor's largest finite |x|.
using block_scaled_records = detail::bsc_records;

namespace detail {

/// Lane f's counters (format f) into the records with integer atomics (exact, order-free).
__device__ inline void bsc_fold_atomic(bsc_record& r, const bsc_lane_acc& a) {
  if (a.zero_blocks != 0) atomicAdd(&r.zero_blocks, a.zero_blocks);
  if (a.nan_blocks != 0) atomicAdd(&r.nan_blocks, a.nan_blocks);
  if (a.zero_scale_blocks != 0) atomicAdd(&r.zero_scale_blocks, a.zero_scale_blocks);
  if (a.lossy_blocks != 0) atomicAdd(&r.lossy_blocks, a.lossy_blocks);
  if (a.clipped != 0) atomicAdd(&r.clipped, a.clipped);
  if (a.flushed != 0) atomicAdd(&r.flushed, a.flushed);
  if (a.subnormal != 0) atomicAdd(&r.subnormal, a.subnormal);
  if (a.worst_key != 0) atomicMax(&r.worst_key, a.worst_key);
}

/// Blocks of 256 per SM the kernel is compiled for (__launch_bounds__: at most 64 registers a thread, 50% on sm_90;
/// tests/cuda/resource_usage.py checks it) and launched with (one wave).
inline constexpr int bsc_min_blocks_per_sm = 4;

/// The start of both block-scaled kernels: clears the block's shared histograms (by format, 256 bins each).
__device__ __forceinline__ void bsc_hist_clear(unsigned* hist) {
  for (unsigned i = threadIdx.x; i < static_cast<unsigned>(bsc_nformats) * 256u; i += block_threads) hist[i] = 0;
  __syncthreads();
}

/// The end of both block-scaled kernels (every thread of the block calls it): the warp's largest finite |x| into the
/// records (want_amax), this lane's counters into format f's record (f < 0: none), the block's histograms.
template <class Params>
__device__ __forceinline__ void bsc_kernel_end(const Params& p, const unsigned* hist, const bsc_lane_acc& acc,
                                               unsigned long long famax, int f) {
  if (p.want_amax != 0) {
    for (unsigned o = 16; o > 0; o >>= 1) {
      const unsigned long long b = __shfl_down_sync(0xFFFFFFFFu, famax, o);
      famax = b > famax ? b : famax;
    }
    if (threadIdx.x % 32u == 0 && famax != 0) atomicMax(&p.out->finite_amax, famax);
  }
  if (f >= 0) bsc_fold_atomic(p.out->f[f], acc);
  __syncthreads();
  for (unsigned i = threadIdx.x; i < static_cast<unsigned>(bsc_nformats) * 256u; i += block_threads)
    if (hist[i] != 0) atomicAdd(&p.out->f[i / 256u].hist[i % 256u], static_cast<unsigned long long>(hist[i]));
}

/// A lane's |x| (f64 bits) into its running largest finite |x| (want_amax).
__device__ __forceinline__ void bsc_note_finite(unsigned long long a, unsigned long long& famax) {
  const unsigned long long fa = a < bsc_inf ? a : 0ull;
  famax = fa > famax ? fa : famax;
}

/// The block-scaled pass (detail/cuda_block_scaled.cuh): a warp per 32-element unit block, grid-stride. A template
/// (of the parameters only) so that the header can be included by several translation units.
template <class Params>
__global__ void __launch_bounds__(block_threads, bsc_min_blocks_per_sm) bsc_kernel(const __grid_constant__ Params p) {
  constexpr unsigned all = 0xFFFFFFFFu;
  constexpr unsigned wpb = static_cast<unsigned>(block_threads) / 32u;
  __shared__ unsigned hist[bsc_nformats * 256];
  bsc_hist_clear(hist);
  const unsigned lane = threadIdx.x % 32u;
  const unsigned long long nwarps = static_cast<unsigned long long>(gridDim.x) * wpb;
  bsc_lane_acc acc;
  unsigned long long famax = 0;
  for (unsigned long long u = static_cast<unsigned long long>(blockIdx.x) * wpb + threadIdx.x / 32u; u < p.units;
       u += nwarps) {  // uniform per warp
    const bsc_unit g = bsc_unit_of(p, u);
    const unsigned long long a = static_cast<int>(lane) < g.len ? bsc_abs_bits(p, bsc_elem(p, g, lane)) : 0ull;
    if (p.want_amax != 0) bsc_note_finite(a, famax);
    unsigned long long h = a;  // the half-warp's amax (NVFP4), then the warp's (MX)
    for (unsigned o = 8; o > 0; o >>= 1) {
      const unsigned long long b = __shfl_xor_sync(all, h, o);
      h = b > h ? b : h;
    }
    const unsigned long long other = __shfl_xor_sync(all, h, 16);
    const unsigned long long full = other > h ? other : h;
    for (int f = 0; f < bsc_nformats; ++f) {
      if (((p.formats >> f) & 1u) == 0) continue;  // uniform
      const unsigned long long am = bsc_lane_amax(f, h, full);
      const bsc_th th = bsc_lane_thresholds(p, f, am);
      const unsigned c = bsc_classify(th, a);
      const unsigned clip = __ballot_sync(all, (c & 1u) != 0), flush = __ballot_sync(all, (c & 2u) != 0),
                     sub = __ballot_sync(all, (c & 4u) != 0);
      const bsc_lane_out o = bsc_lane_account(p, f, lane, g, th, am, clip, flush, sub, acc);
      if (o.bin >= 0) atomicAdd(&hist[f * 256 + o.bin], 1u);
      if (o.rec_at != ~0ull && p.per_block[f] != nullptr) p.per_block[f][o.rec_at] = o.rec;
    }
  }
  bsc_kernel_end(p, hist, acc, famax, bsc_lane_format(lane));
}

/// Quads (four unit blocks) whose loads a warp issues before it works on them (detail/cuda_block_scaled.cuh, the
/// packed path): 1 keeps the kernel within 64 registers (4 blocks of 256 a multiprocessor: it uses 58); 2 uses 75
/// (within the 80 of 3 blocks) and is built for measurement only (nanscope_bench_cuda's health_mx_unroll2 rows).
inline constexpr int bsc_quad_unroll = 1;
/// Blocks of 256 per SM the packed kernel is compiled for with `Unroll` quads in flight.
constexpr int bsc_quad_min_blocks(int unroll) { return unroll == 1 ? bsc_min_blocks_per_sm : 3; }

/// The packed path of the block-scaled pass (detail/cuda_block_scaled.cuh): a warp per quad of four unit blocks,
/// `Unroll` quads' loads at a time, grid-stride. The same records as bsc_kernel.
template <class Params, int Unroll = bsc_quad_unroll>
__global__ void __launch_bounds__(block_threads, bsc_quad_min_blocks(Unroll)) bsc_quad_kernel(const __grid_constant__ Params p) {
  constexpr unsigned all = 0xFFFFFFFFu;
  constexpr unsigned wpb = static_cast<unsigned>(block_threads) / 32u;
  __shared__ unsigned hist[bsc_nformats * 256];
  bsc_hist_clear(hist);
  const unsigned lane = threadIdx.x % 32u;
  const unsigned l8 = lane & 7u;
  const unsigned long long quads = (p.units + 3u) / 4u;
  const unsigned long long nwarps = static_cast<unsigned long long>(gridDim.x) * wpb;
  bsc_lane_acc acc;
  unsigned long long famax = 0;
  for (unsigned long long q0 = static_cast<unsigned long long>(blockIdx.x) * wpb + threadIdx.x / 32u; q0 < quads;
       q0 += nwarps * Unroll) {  // uniform per warp
    unsigned long long raw[Unroll][4];
#pragma unroll
    for (int r = 0; r < Unroll; ++r) {
      const unsigned long long q = q0 + static_cast<unsigned long long>(r) * nwarps;
      if (q < quads) bsc_quad_load(p, q, lane, raw[r]);
    }
#pragma unroll
    for (int r = 0; r < Unroll; ++r) {
      const unsigned long long q = q0 + static_cast<unsigned long long>(r) * nwarps;
      if (q >= quads) break;  // uniform
      const bool valid = q * 4u + (lane >> 3) < p.units;
      unsigned long long a[4];
      unsigned long long m = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        a[k] = valid ? bsc_abs_of_raw(p.type, raw[r][k]) : 0ull;
        m = a[k] > m ? a[k] : m;
        if (p.want_amax != 0) bsc_note_finite(a[k], famax);
      }
      unsigned long long h = m;  // the half's amax (NVFP4), then the unit's (MX)
      for (unsigned o = 1; o <= 2; o <<= 1) {
        const unsigned long long b = __shfl_xor_sync(all, h, o);
        h = b > h ? b : h;
      }
      const unsigned long long other = __shfl_xor_sync(all, h, 4);
      const unsigned long long full = other > h ? other : h;
      for (int f = 0; f < bsc_nformats; ++f) {
        if (((p.formats >> f) & 1u) == 0) continue;  // uniform
        const unsigned long long am = bsc_lane_amax(f, h, full);
        const bsc_th th = bsc_lane_thresholds(p, f, am);
        unsigned w = bsc_quad_classify(th, a);
        w += __shfl_xor_sync(all, w, 1);
        w += __shfl_xor_sync(all, w, 2);
        if (f != bsc_nv) w += __shfl_xor_sync(all, w, 4);
        if (valid && l8 == bsc_quad_account_lane(f, (lane >> 2) & 1u)) {
          const unsigned long long index = bsc_quad_index(f, q, lane);
          const bsc_lane_out o = bsc_account(index, th, am, w & 0xFFu, (w >> 8) & 0xFFu, (w >> 16) & 0xFFu, acc);
          if (o.bin >= 0) atomicAdd(&hist[f * 256 + o.bin], 1u);
          if (p.per_block[f] != nullptr) p.per_block[f][index] = o.rec;
        }
      }
    }
  }
  bsc_kernel_end(p, hist, acc, famax, bsc_quad_lane_format(lane));
}

/// One launch (a template, instantiated by tests/cuda/resource_usage.cu for the register budget): blocks of 8 warps,
/// one unit block (or, on the packed path, one quad of four) per warp and round, at most one wave (the blocks per
/// multiprocessor the kernel is compiled for: bsc_min_blocks_per_sm, or bsc_quad_min_blocks(Unroll)).
template <class Params, int Unroll = bsc_quad_unroll>
inline void bsc_launch(const Params& p, cudaStream_t stream, const char* name) {
  if (p.units == 0) return;
  const device_props props = current_props(name);
  const unsigned long long wpb = static_cast<unsigned long long>(block_threads) / 32u;
  const unsigned long long work = p.quad != 0 ? (p.units + 3u) / 4u : p.units;  // one per warp
  unsigned long long blocks = (work + wpb - 1u) / wpb;
  const int per_sm = p.quad != 0 ? bsc_quad_min_blocks(Unroll) : bsc_min_blocks_per_sm;
  const unsigned long long wave =
      static_cast<unsigned long long>(props.sm_count > 0 ? props.sm_count : 1) * static_cast<unsigned long long>(per_sm);
  if (blocks > wave) blocks = wave;
  if (p.quad != 0) bsc_quad_kernel<Params, Unroll><<<static_cast<unsigned>(blocks), block_threads, 0, stream>>>(p);
  else bsc_kernel<Params><<<static_cast<unsigned>(blocks), block_threads, 0, stream>>>(p);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) cuda_fail(name, e, "the block-scaled kernel launch");
}

/// Device memory of one synchronous check, freed (stream-ordered) however the check ends.
struct bsc_device_memory {
  cudaStream_t stream = nullptr;
  std::vector<void*> held;
  void* get(std::size_t bytes, const char* name) {
    void* d = nullptr;
    cuda_check(cudaMallocAsync(&d, bytes, stream), name, "cudaMallocAsync (block-scaled records)");
    held.push_back(d);
    return d;
  }
  ~bsc_device_memory() {
    for (void* d : held) (void)cudaFreeAsync(d, stream);
  }
};

/// Copies the raw elements of flat indices first, first + step, ... (len of them) of a device view to buf.
inline void bsc_fetch(const bsc_plan& pl, const buffer_view& b, unsigned long long first, unsigned long long step, int len,
                      unsigned char* buf) {
  const tensor_view& v = b.view;
  const std::size_t es = size_of(v.type);
  const auto* base = static_cast<const unsigned char*>(v.data);
  if (step == 1 && pl.layout.rank == 0) {
    cuda_check(cudaMemcpyAsync(buf, base + first * es, static_cast<std::size_t>(len) * es, cudaMemcpyDeviceToHost, b.stream),
               v.name, "cudaMemcpyAsync (the worst block)");
  } else {
    for (int k = 0; k < len; ++k) {
      const unsigned long long flat = first + static_cast<unsigned long long>(k) * step;
      const long long off = pl.layout.rank > 0 ? bsc_offset(pl.layout, flat) : static_cast<long long>(flat);
      cuda_check(cudaMemcpyAsync(buf + static_cast<std::size_t>(k) * es, base + off * static_cast<long long>(es), es,
                                 cudaMemcpyDeviceToHost, b.stream),
                 v.name, "cudaMemcpyAsync (the worst block)");
    }
  }
  cuda_check(cudaStreamSynchronize(b.stream), v.name, "cudaStreamSynchronize");
}

/// The whole synchronous check but the health part; `health` runs after the launches are queued (it queues the
/// health pass on the same stream or waits for the checker's).
template <class Health>
block_scaled_result bsc_run(const buffer_view& b, const block_scaled_options& opt, Health&& health) {
  const tensor_view& v = b.view;
  const bsc_plan pl = bsc_make_plan(v, opt);
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), v.name, "cudaGetDevice");
  check_device_pointer(b, dev);
  if (is_capturing(b.stream, v.name))
    ::nanscope::detail::fail(v.name, "cuda::check_block_scaled waits for its result and cannot be captured into a "
                                     "CUDA graph: use check_block_scaled_async (a given nvfp4_tensor_amax) there");
  bsc_device_memory mem;
  mem.stream = b.stream;
  auto* rec = static_cast<bsc_records*>(mem.get(sizeof(bsc_records), v.name));
  cuda_check(cudaMemsetAsync(rec, 0, sizeof(bsc_records), b.stream), v.name, "cudaMemsetAsync (block-scaled records)");
  std::vector<block_record> host_pb[bsc_nformats];
  block_record* dev_pb[bsc_nformats] = {};
  if (pl.keep_blocks)
    for (int k = 0; k < bsc_nformats; ++k)
      if (pl.formats.has(static_cast<block_format>(k))) {
        const std::size_t nb = static_cast<std::size_t>(pl.rows * bsc_blocks_per_row(pl, static_cast<block_format>(k)));
        host_pb[k].assign(nb, block_record{});
        if (nb != 0) dev_pb[k] = static_cast<block_record*>(mem.get(nb * sizeof(block_record), v.name));
      }
  const float ts = bsc_schedule(
      pl,
      [&](unsigned formats, bool want_amax, float tscale) {
        bsc_launch(bsc_make_params(pl, v.data, formats, want_amax, tscale, rec, dev_pb), b.stream, v.name);
      },
      [&] {
        unsigned long long amax = 0;
        cuda_check(cudaMemcpyAsync(&amax, &rec->finite_amax, sizeof amax, cudaMemcpyDeviceToHost, b.stream), v.name,
                   "cudaMemcpyAsync (tensor amax)");
        cuda_check(cudaStreamSynchronize(b.stream), v.name, "cudaStreamSynchronize");
        return amax;
      });
  health_result hr = health();
  bsc_records host{};
  cuda_check(cudaMemcpyAsync(&host, rec, sizeof host, cudaMemcpyDeviceToHost, b.stream), v.name,
             "cudaMemcpyAsync (block-scaled records)");
  for (int k = 0; k < bsc_nformats; ++k)
    if (dev_pb[k] != nullptr)
      cuda_check(cudaMemcpyAsync(host_pb[k].data(), dev_pb[k], host_pb[k].size() * sizeof(block_record),
                                 cudaMemcpyDeviceToHost, b.stream),
                 v.name, "cudaMemcpyAsync (block records)");
  cuda_check(cudaStreamSynchronize(b.stream), v.name, "cudaStreamSynchronize");
  block_scaled_result r = bsc_finalize(
      pl, host, ts,
      [&](unsigned long long first, unsigned long long step, int len, unsigned char* buf) {
        bsc_fetch(pl, b, first, step, len, buf);
      },
      pl.keep_blocks ? host_pb : nullptr);
  r.health = hr;
  return r;
}

/// The health part of a standalone check: check_async with its own storage, then finalize().
inline health_result bsc_health(const buffer_view& b, check_mode mode) {
  const tensor_view& v = b.view;
  std::size_t bytes = 0;
  check_async(nullptr, bytes, &b, 1, nullptr, mode, b.stream);
  bsc_device_memory mem;
  mem.stream = b.stream;
  void* temp = mem.get(bytes != 0 ? bytes : 16, v.name);
  cuda_check(cudaMemsetAsync(temp, 0, bytes != 0 ? bytes : 16, b.stream), v.name, "cudaMemsetAsync (storage)");
  auto* d = static_cast<device_result*>(mem.get(sizeof(device_result), v.name));
  cuda_check(cudaMemsetAsync(d, 0, sizeof(device_result), b.stream), v.name, "cudaMemsetAsync (result)");
  check_async(temp, bytes, &b, 1, d, mode, b.stream);
  device_result host{};
  cuda_check(cudaMemcpyAsync(&host, d, sizeof host, cudaMemcpyDeviceToHost, b.stream), v.name, "cudaMemcpyAsync (result)");
  cuda_check(cudaStreamSynchronize(b.stream), v.name, "cudaStreamSynchronize");
  return finalize(host, v, mode);
}

}  // namespace detail

/// The block-scaled what-if statistics of a device tensor (docs/block-scaled.md#cuda): what quantizing it to each
/// requested MXFP8 / MXFP6 / MXFP4 / NVFP4 format would lose, block by block, field for field what
/// nanscope::check_block_scaled gives on the host for the same data, and its health (check()'s, from a health
/// pass on the same stream). Synchronous: queues the launches on the view's stream and waits for them. Any
/// layout, blocks along any axis (block_scaled_options::axis); contiguous tensors blocked along their last
/// dimension are read coalesced, the others element by element. NVFP4 without
/// block_scaled_options::nvfp4_tensor_amax takes a first launch for the tensor's amax.
inline block_scaled_result check_block_scaled(const buffer_view& b, const block_scaled_options& opt = {}) {
  return detail::bsc_run(b, opt, [&] { return detail::bsc_health(b, opt.check.mode); });
}
/// Same for a view of device memory from any adapter, on `stream`.
inline block_scaled_result check_block_scaled(const tensor_view& v, cudaStream_t stream, const block_scaled_options& opt = {}) {
  return check_block_scaled(device_buffer(v, stream), opt);
}

inline block_scaled_result checker::check_block_scaled(const buffer_view& v, const block_scaled_options& opt) {
  return detail::bsc_run(v, opt, [&] { return check(v, opt.check).get(); });
}

/// Queues the block-scaled statistics of one device tensor on its stream (CUB's convention: nothing is allocated,
/// nothing synchronizes, it can be captured into a CUDA graph and replayed): clears `records` (device memory,
/// cudaMemsetAsync) and launches the kernel once. `per_block` (keep_blocks): one device array of block_records per
/// block_format (index by the format), each holding its format's block count, or null. NVFP4 needs its tensor
/// amax given (block_scaled_options::nvfp4_tensor_amax: one launch), else nanscope::error names the tensor. The
/// health part is not computed (queue check_async for it). Copy the records to the host, then
/// finalize_block_scaled().
inline void check_block_scaled_async(const buffer_view& b, const block_scaled_options& opt, block_scaled_records* records,
                                     block_record* const* per_block = nullptr) {
  const tensor_view& v = b.view;
  const detail::bsc_plan pl = detail::bsc_make_plan(v, opt);
  if (pl.nv && !pl.nv_given)
    ::nanscope::detail::fail(v.name, "check_block_scaled_async: NVFP4 needs block_scaled_options::nvfp4_tensor_amax "
                                     "(the tensor's own amax takes a host round trip: use check_block_scaled)");
  if (records == nullptr) ::nanscope::detail::fail(v.name, "check_block_scaled_async: null records");
  if (pl.keep_blocks && per_block == nullptr)
    ::nanscope::detail::fail(v.name, "check_block_scaled_async: keep_blocks without per-block device arrays");
  int dev = 0;
  detail::cuda_check(cudaGetDevice(&dev), v.name, "cudaGetDevice");
  detail::check_device_pointer(b, dev);
  detail::cuda_check(cudaMemsetAsync(records, 0, sizeof(block_scaled_records), b.stream), v.name,
                     "cudaMemsetAsync (block-scaled records)");
  (void)detail::bsc_schedule(
      pl,
      [&](unsigned formats, bool want_amax, float ts) {
        detail::bsc_launch(detail::bsc_make_params(pl, v.data, formats, want_amax, ts, records,
                                                   pl.keep_blocks ? per_block : nullptr),
                           b.stream, v.name);
      },
      [] { return 0ull; });
}

/// The host side of check_block_scaled_async: `records` copied to host memory (after the stream reached them),
/// `per_block` (keep_blocks) the host copies of the per-block arrays, moved into the result (one vector per
/// block_format, or null). The worst blocks' errors read those blocks' elements from the tensor's device memory
/// now (a synchronous copy of at most 32 elements per format on the view's stream): call it while the tensor
/// still holds the checked values. The result's health is empty (check_async gives it).
inline block_scaled_result finalize_block_scaled(const block_scaled_records& records, const buffer_view& b,
                                                 const block_scaled_options& opt,
                                                 std::vector<block_record>* per_block = nullptr) {
  const tensor_view& v = b.view;
  const detail::bsc_plan pl = detail::bsc_make_plan(v, opt);
  const float ts = pl.nv ? nvfp4_tensor_scale(pl.nv_amax) : 0.0f;
  return detail::bsc_finalize(
      pl, records, ts,
      [&](unsigned long long first, unsigned long long step, int len, unsigned char* buf) {
        detail::bsc_fetch(pl, b, first, step, len, buf);
      },
      pl.keep_blocks ? per_block : nullptr);
}

}  // namespace cuda
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_CUDA_BLOCK_SCALED_LAUNCH_CUH
