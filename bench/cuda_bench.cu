// nanscope benchmarks — CUDA rows (target nanscope_bench_cuda). Every row is timed on the GPU: a CUDA event is
// recorded on the stream before the queued work and another one after it, the host waits for the second event,
// and the elapsed event time is handed to Google Benchmark (UseManualTime: it appends /manual_time to the row
// names, as the host rows get /real_time). Host-side enqueue cost counts only where it keeps the GPU waiting,
// which is what a training loop sees as well.
//
// Rows (the names are an interface: scripts match on them):
//   health/<dtype>/<elements>    one nanscope::cuda::checker::check (check_mode::stats) of a contiguous device
//                                buffer of a normal-ish pseudo-random fill (no NaN/Inf), queued on the stream.
//                                dtype: f32 bf16 f16 f64 e4m3fn e5m2; elements: 1048576 16777216 67108864.
//                                At 1048576 elements the kernel is a few microseconds and the host-side
//                                enqueue of the check (validation, pointer attributes, launch) shows in the row.
//   full_health/<dtype>/67108864 the same check in check_mode::full_health (counts and extrema, no moments: the
//                                level-2 kernel), f32 and bf16 only (issue 31's full-health target)
//   health_seg/<dtype>/67108864/<segments>
//                                checker::check with device_segments (issue 32 item 2): the same buffer in
//                                check_mode::full_health cut into 1000 or 100000 uneven element segments
//                                (offsets in device memory), f32 and bf16; compare with full_health/<dtype>
//                                (the segment kernel computes the totals too: one read). The row includes the
//                                copy of every segment's record to pinned memory (48 bytes a segment).
//   health_seg_kv/bf16/67108864/4096
//                                [65536, 1024] in every_rows(16): 4096 KV blocks of 16 tokens, full_health
//   health_mx/<dtype>/67108864/<format>
//                                checker::check (stats) and cuda::check_block_scaled_async of one block format
//                                (mxfp8_e4m3 mxfp8_e5m2 mxfp6_e2m3 mxfp6_e3m2 mxfp4 nvfp4, or all) queued
//                                together on a [16384, 4096] view, f32 and bf16, NVFP4's tensor amax given: the
//                                block-scaled what-if's cost over health/<dtype>/67108864 (the host's row names)
//   health_mx_unroll2/<dtype>/67108864/<format>
//                                the same with the packed kernel's variant that has two quads' loads in flight
//                                (80 registers, 3 blocks a multiprocessor; formats all, mxfp8_e4m3, nvfp4): a
//                                measurement of bsc_quad_unroll's choice, checked against the default's records
//   health_mx_unitpath/<dtype>/67108864/<format>
//                                the same with the one-unit-per-warp kernel (bsc_kernel, which serves strided,
//                                misaligned and L % 32 != 0 views): what the packed kernel gains
//   read_anchor/<dtype>/<elements>
//                                the same bytes reduced by cub::DeviceReduce::Sum (f32 as float, the other
//                                dtypes as unsigned integers of the same width): a bare read-and-reduce of
//                                the buffer, the memory-bandwidth yardstick. Temporary storage is allocated
//                                once, outside the timed loop.
//   batched/1000x65536           1000 f32 tensors of 65536 elements (slices of one allocation) checked by one
//                                checker::check_batch; timed until the results are written (event after
//                                the batch, host waits on it; results are not read in the timed region).
//   per_tensor/1000x65536        the same 1000 tensors, one checker::check each (1000 launches).
//   host_enqueue/1000x65536      the host's side of per_tensor: wall time of the 1000 checker::check calls
//                                (steady_clock around the calls; the stream is drained outside the timing).
//                                Where it is close to per_tensor, the per-check cost is the host's (issue 31
//                                item 2), not the kernel's.
//   host_api/<call>              wall time of 1000 calls of one CUDA runtime call that a check makes:
//                                pointer_attributes (cudaPointerGetAttributes), is_capturing
//                                (cudaStreamIsCapturing), get_device, event_record, event_query, get_last_error,
//                                launch_empty (an empty kernel, <<<4, 256>>>): where the per-check time goes.
//   forward_plain                a post-norm transformer block in f32 on cuBLAS (8 sequences x 256 tokens =
//                                2048 tokens, d_model 1024, 16 heads of 64, d_ff 4096): QKV projection,
//                                multi-head softmax attention (scores by strided-batched SGEMM, a row
//                                softmax kernel, then P.V), output projection, residual, layernorm, MLP with
//                                GELU (tanh form), residual, layernorm. No biases. cuBLAS default math
//                                (FP32, no TF32).
//   forward_checked              the same forward with each of its 10 layer outputs checked by checker::check
//                                on the compute stream right after the layer (what a user instruments);
//                                results are not read in the loop.
//   forward_checked_batch        the same forward with the 10 layer outputs checked by one check_batch at
//                                the end.
//   forward_checked_health       forward_checked in check_mode::full_health (counts and extrema, no moments).
//   forward_plain_graph          forward_plain captured once into a CUDA graph, replayed per iteration.
//   forward_checked_graph        forward_checked (STATS, one check per layer) captured the same way; the
//                                checker's storage and tickets are reserved before the capture.
// Every forward row ends its iteration with a stream synchronization.
//
// Targets (on an H100):
//   health/f32/67108864  >= 0.90x read_anchor/f32/67108864   (bytes/s)
//   health/bf16/67108864 >= 0.90x read_anchor/bf16/67108864  (bytes/s)
//   batched/1000x65536   >= 10x per_tensor/1000x65536        (i.e. at most a tenth of its time)
//   forward_checked      <= 1.05x forward_plain              (time per iteration)
//
// Run (three separate processes, each with the repetitions of all rows shuffled; report every ratio as the
// median and range across the runs, the target held to the worst run, as bench/ratios.py does for the host rows):
//   for r in 1 2 3; do
//     build/<preset>/bench/nanscope_bench_cuda --benchmark_enable_random_interleaving=true
//         --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//         --benchmark_out=cuda$r.json --benchmark_out_format=json
//   done
// Without a CUDA device the program prints "nanscope_bench_cuda: skipped: ..." and exits with 0. Each row runs
// for Google Benchmark's default minimum time (0.5 s of GPU time here; --benchmark_min_time changes it). No
// per-row MinTime() on purpose: it would add "/min_time:..." to every row name.
#include <nanscope/cuda.cuh>

#include <benchmark/benchmark.h>
#include <cub/device/device_reduce.cuh>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

namespace {

using nanscope::dtype;

// ---------------------------------------------------------------------------------------------------------
// Error checking: any failing CUDA / cuBLAS call ends the program with the call, the place and the error.
// ---------------------------------------------------------------------------------------------------------
void cuda_ok(cudaError_t e, const char* call, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "nanscope_bench_cuda: %s:%d: %s failed: %s (%s)\n", file, line, call, cudaGetErrorString(e),
               cudaGetErrorName(e));
  std::fflush(stderr);
  std::abort();
}
void cublas_ok(cublasStatus_t s, const char* call, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "nanscope_bench_cuda: %s:%d: %s failed: %s (status %d)\n", file, line, call,
               cublasGetStatusString(s), static_cast<int>(s));
  std::fflush(stderr);
  std::abort();
}
#define NSB_CUDA(call) cuda_ok((call), #call, __FILE__, __LINE__)
#define NSB_CUBLAS(call) cublas_ok((call), #call, __FILE__, __LINE__)
#define NSB_LAUNCHED() cuda_ok(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

// ---------------------------------------------------------------------------------------------------------
// Process-wide state: one stream, one cuBLAS handle, one checker (created in main, destroyed before exit in
// the order checker, handle, stream: the checker's destructor synchronizes the streams it used).
// ---------------------------------------------------------------------------------------------------------
struct bench_env {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::unique_ptr<nanscope::cuda::checker> chk;
  int sm_count = 1;
};
bench_env* g_env = nullptr;

/// Owned device memory (not copyable, not movable: members and locals only).
class device_mem {
 public:
  explicit device_mem(std::size_t bytes) { NSB_CUDA(cudaMalloc(&ptr_, bytes)); }
  device_mem(const device_mem&) = delete;
  device_mem& operator=(const device_mem&) = delete;
  ~device_mem() {
    if (ptr_ != nullptr) NSB_CUDA(cudaFree(ptr_));
  }

  void* get() const { return ptr_; }
  float* f32() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

/// A timing event pair, and the GPU time between them.
class event_timer {
 public:
  event_timer() {
    NSB_CUDA(cudaEventCreate(&start_));
    NSB_CUDA(cudaEventCreate(&stop_));
  }
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;
  ~event_timer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start(cudaStream_t s) { NSB_CUDA(cudaEventRecord(start_, s)); }
  void stop(cudaStream_t s) { NSB_CUDA(cudaEventRecord(stop_, s)); }
  /// Waits for the stop event; seconds between the two events.
  double seconds() {
    NSB_CUDA(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    NSB_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

unsigned grid_for(std::size_t n, unsigned threads) {
  const std::size_t want = (n + threads - 1) / threads;
  const std::size_t cap = static_cast<std::size_t>(g_env->sm_count) * 32u;
  const std::size_t g = want < cap ? want : cap;
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

// ---------------------------------------------------------------------------------------------------------
// Data: a hash-based normal-ish fill (Irwin-Hall: four uniforms, unit variance, |x| < 3.5), encoded per dtype
// ---------------------------------------------------------------------------------------------------------
__device__ __forceinline__ std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

__device__ __forceinline__ float normalish(std::uint64_t i, std::uint32_t seed) {
  const std::uint32_t h1 = mix32(static_cast<std::uint32_t>(i) ^ mix32(static_cast<std::uint32_t>(i >> 32) + seed));
  const std::uint32_t h2 = mix32(h1 + 0x6A09E667u);
  const float inv = 1.0f / 65536.0f;
  const float u = (static_cast<float>(h1 & 0xFFFFu) + 0.5f) * inv + (static_cast<float>(h1 >> 16) + 0.5f) * inv +
                  (static_cast<float>(h2 & 0xFFFFu) + 0.5f) * inv + (static_cast<float>(h2 >> 16) + 0.5f) * inv;
  return (u - 2.0f) * 1.7320508f;  // variance of the sum of 4 uniforms is 1/3
}

struct enc_f32 {
  using type = float;
  __device__ static type encode(float x) { return x; }
};
struct enc_f64 {
  using type = double;
  // a few extra low mantissa bits so that the f64 data is not just widened f32
  __device__ static type encode(float x) { return static_cast<double>(x) * (1.0 + 0x1p-40); }
};
struct enc_f16 {
  using type = unsigned short;
  __device__ static type encode(float x) { return __half_as_ushort(__float2half(x)); }
};
struct enc_bf16 {
  using type = unsigned short;
  // round to nearest even on the top 16 bits of the f32 (finite inputs only)
  __device__ static type encode(float x) {
    const std::uint32_t u = __float_as_uint(x);
    return static_cast<type>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
};
struct enc_e4m3fn {
  using type = unsigned char;
  __device__ static type encode(float x) { return static_cast<type>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3)); }
};
struct enc_e5m2 {
  using type = unsigned char;
  __device__ static type encode(float x) { return static_cast<type>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2)); }
};

template <class Enc>
__global__ void fill_normalish(typename Enc::type* out, std::uint64_t n, std::uint32_t seed) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = Enc::encode(normalish(i, seed));
}

template <class Enc>
void launch_fill(void* p, std::uint64_t n, std::uint32_t seed, cudaStream_t s) {
  fill_normalish<Enc><<<grid_for(n, 256), 256, 0, s>>>(static_cast<typename Enc::type*>(p), n, seed);
  NSB_LAUNCHED();
}

void fill_device(void* p, dtype t, std::uint64_t n, std::uint32_t seed, cudaStream_t s) {
  switch (t) {
    case dtype::f32: launch_fill<enc_f32>(p, n, seed, s); break;
    case dtype::f64: launch_fill<enc_f64>(p, n, seed, s); break;
    case dtype::f16: launch_fill<enc_f16>(p, n, seed, s); break;
    case dtype::bf16: launch_fill<enc_bf16>(p, n, seed, s); break;
    case dtype::f8_e4m3fn: launch_fill<enc_e4m3fn>(p, n, seed, s); break;
    case dtype::f8_e5m2: launch_fill<enc_e5m2>(p, n, seed, s); break;
    default:
      std::fprintf(stderr, "nanscope_bench_cuda: fill_device: not a float dtype\n");
      std::abort();
  }
}

/// Uniform in [offset - scale, offset + scale) (f32 weights and layernorm parameters).
__global__ void fill_uniform_f32(float* out, std::uint64_t n, std::uint32_t seed, float scale, float offset) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint32_t h = mix32((static_cast<std::uint32_t>(i) * 0x9E3779B9u) ^ mix32(seed + static_cast<std::uint32_t>(i >> 32)));
    const float u = (static_cast<float>(h >> 8) + 0.5f) * (1.0f / 16777216.0f);  // (0, 1)
    out[i] = offset + scale * (2.0f * u - 1.0f);
  }
}

void fill_uniform(float* p, std::uint64_t n, std::uint32_t seed, float scale, float offset, cudaStream_t s) {
  fill_uniform_f32<<<grid_for(n, 256), 256, 0, s>>>(p, n, seed, scale, offset);
  NSB_LAUNCHED();
}

// ---------------------------------------------------------------------------------------------------------
// Shared helpers of the rows
// ---------------------------------------------------------------------------------------------------------
struct dtype_row {
  dtype type;
  const char* name;
};
constexpr dtype_row row_dtypes[] = {{dtype::f32, "f32"},         {dtype::bf16, "bf16"},     {dtype::f16, "f16"},
                                    {dtype::f64, "f64"},         {dtype::f8_e4m3fn, "e4m3fn"}, {dtype::f8_e5m2, "e5m2"}};
constexpr std::uint64_t row_elements[] = {1048576ull, 16777216ull, 67108864ull};

constexpr int warmup_calls = 2;

void set_throughput(benchmark::State& state, std::uint64_t elements, std::size_t elem_bytes) {
  const auto per_iter = static_cast<std::int64_t>(elements);
  state.SetItemsProcessed(state.iterations() * per_iter);
  state.SetBytesProcessed(state.iterations() * per_iter * static_cast<std::int64_t>(elem_bytes));
}

nanscope::check_options stats_mode() { return nanscope::check_options{}.with_mode(nanscope::check_mode::stats); }

/// Not timed: a checked buffer holds what the row claims (n finite values), so the measured path is the
/// common one.
bool result_is_clean(const nanscope::health_result& r, std::uint64_t n) {
  return r.count == n && !r.any_nonfinite && r.nonfinite() == 0;
}

// ---------------------------------------------------------------------------------------------------------
// health/<dtype>/<elements>
// ---------------------------------------------------------------------------------------------------------
void bm_health(benchmark::State& state, dtype t, std::uint64_t n,
               nanscope::check_mode mode = nanscope::check_mode::stats) {
  bench_env& env = *g_env;
  const std::size_t es = nanscope::size_of(t);
  device_mem buf(n * es);
  fill_device(buf.get(), t, n, 0x5EED0001u, env.stream);
  NSB_CUDA(cudaStreamSynchronize(env.stream));
  const nanscope::cuda::buffer_view view =
      nanscope::cuda::device_buffer(buf.get(), t, {static_cast<std::int64_t>(n)}, env.stream, "bench.x");
  const nanscope::check_options opt = nanscope::check_options{}.with_mode(mode);

  for (int w = 0; w < warmup_calls; ++w) {
    const nanscope::cuda::pending p = env.chk->check(view, opt);
    if (!result_is_clean(p.get(), n)) {
      state.SkipWithError("the benchmark buffer is not what the row claims (non-finite values or wrong count)");
      return;
    }
  }

  event_timer timer;
  for (auto _ : state) {
    timer.start(view.stream);
    nanscope::cuda::pending p = env.chk->check(view, opt);
    timer.stop(view.stream);
    state.SetIterationTime(timer.seconds());
  }
  set_throughput(state, n, es);
}

// ---------------------------------------------------------------------------------------------------------
// health_mx/<dtype>/67108864/<format>: the health pass (STATS) and the block-scaled what-if statistics of one
// format (or all six) queued together on a [n / 4096, 4096] view, as the host's rows of that name; NVFP4's tensor
// amax given (a previous step's), so each is one launch. Ratio to health/<dtype>/67108864: the what-if's cost.
// ---------------------------------------------------------------------------------------------------------
/// unroll: 0 the public check_block_scaled_async; 2 the packed kernel's unroll-2 variant; -1 the one-unit kernel.
void bm_health_mx(benchmark::State& state, dtype t, std::uint64_t n, int fmt, int unroll = 0) {
  bench_env& env = *g_env;
  const std::size_t es = nanscope::size_of(t);
  device_mem buf(n * es);
  fill_device(buf.get(), t, n, 0x5EED0001u, env.stream);
  NSB_CUDA(cudaStreamSynchronize(env.stream));
  const std::int64_t cols = 4096;
  const nanscope::cuda::buffer_view view = nanscope::cuda::device_buffer(
      buf.get(), t, {static_cast<std::int64_t>(n) / cols, cols}, env.stream, "bench.x");
  const nanscope::block_format_set formats =
      fmt < 0 ? nanscope::block_format_set::all()
              : nanscope::block_format_set{}.with(static_cast<nanscope::block_format>(fmt));
  const nanscope::check_options copt = stats_mode();
  nanscope::block_scaled_options opt = nanscope::block_scaled_options{}.with_formats(formats).with_check(copt);
  {  // not timed: the data is finite and the synchronous check agrees on what the row measures
    const nanscope::block_scaled_result r = env.chk->check_block_scaled(view, opt);
    if (!result_is_clean(r.health, n) || r.formats.empty()) {
      state.SkipWithError("the benchmark buffer is not what the row claims (non-finite values or wrong count)");
      return;
    }
    opt = opt.with_nvfp4_tensor_amax(r.health.abs_max);
  }
  device_mem rec(sizeof(nanscope::cuda::block_scaled_records));
  auto* records = static_cast<nanscope::cuda::block_scaled_records*>(rec.get());
  // unroll 2: the packed kernel with two quads' loads in flight (3 blocks a multiprocessor), launched as
  // check_block_scaled_async launches the default one (clear the records, one launch)
  namespace nd = nanscope::cuda::detail;
  const nd::bsc_plan plan = nd::bsc_make_plan(view.view, opt);
  nd::bsc_params params = nd::bsc_make_params(plan, view.view.data, plan.formats.bits, false,
                                              nanscope::nvfp4_tensor_scale(plan.nv_amax), records, nullptr);
  if (unroll < 0) params.quad = 0;  // the one-unit-per-warp kernel
  auto queue = [&] {
    if (unroll != 0) {
      NSB_CUDA(cudaMemsetAsync(records, 0, sizeof(nanscope::cuda::block_scaled_records), view.stream));
      if (unroll == 2) nd::bsc_launch<nd::bsc_params, 2>(params, view.stream, view.view.name);
      else nd::bsc_launch<nd::bsc_params>(params, view.stream, view.view.name);
    } else {
      nanscope::cuda::check_block_scaled_async(view, opt, records);
    }
  };
  for (int w = 0; w < warmup_calls; ++w) {
    const nanscope::cuda::pending p = env.chk->check(view, copt);
    queue();
    if (!result_is_clean(p.get(), n)) {
      state.SkipWithError("the benchmark buffer is not what the row claims (non-finite values or wrong count)");
      return;
    }
  }
  if (unroll != 0) {  // not timed: the variant's records are the default kernel's
    nanscope::cuda::block_scaled_records a{}, b{};
    NSB_CUDA(cudaMemcpyAsync(&a, records, sizeof a, cudaMemcpyDeviceToHost, view.stream));
    nanscope::cuda::check_block_scaled_async(view, opt, records);
    NSB_CUDA(cudaMemcpyAsync(&b, records, sizeof b, cudaMemcpyDeviceToHost, view.stream));
    NSB_CUDA(cudaStreamSynchronize(view.stream));
    if (std::memcmp(&a, &b, sizeof a) != 0) {
      state.SkipWithError("the variant kernel's records differ from the default kernel's");
      return;
    }
  }
  event_timer timer;
  for (auto _ : state) {
    timer.start(view.stream);
    nanscope::cuda::pending p = env.chk->check(view, copt);
    queue();
    timer.stop(view.stream);
    state.SetIterationTime(timer.seconds());
  }
  set_throughput(state, n, es);
}

// ---------------------------------------------------------------------------------------------------------
// health_seg/<dtype>/67108864/<segments>, health_seg_kv/bf16/67108864/4096
// ---------------------------------------------------------------------------------------------------------
void bm_health_seg(benchmark::State& state, dtype t, std::uint64_t n, std::uint64_t segments, bool kv) {
  bench_env& env = *g_env;
  const std::size_t es = nanscope::size_of(t);
  device_mem buf(n * es);
  fill_device(buf.get(), t, n, 0x5EED0001u, env.stream);
  // uneven cuts: a fixed pseudo-random set of segments - 1 distinct points, sorted
  std::vector<std::int64_t> off;
  off.push_back(0);
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (std::uint64_t i = 1; i < segments; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    off.push_back(static_cast<std::int64_t>(x % n));
  }
  off.push_back(static_cast<std::int64_t>(n));
  std::sort(off.begin(), off.end());
  device_mem doff(off.size() * sizeof(std::int64_t));
  NSB_CUDA(cudaMemcpy(doff.get(), off.data(), off.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice));
  NSB_CUDA(cudaStreamSynchronize(env.stream));
  const std::int64_t cols = 1024;
  const nanscope::cuda::buffer_view view =
      kv ? nanscope::cuda::device_buffer(buf.get(), t, {static_cast<std::int64_t>(n) / cols, cols}, env.stream, "bench.kv")
         : nanscope::cuda::device_buffer(buf.get(), t, {static_cast<std::int64_t>(n)}, env.stream, "bench.x");
  const nanscope::cuda::device_segments segs =
      kv ? nanscope::cuda::device_segments::every_rows(16)
         : nanscope::cuda::device_segments::elements(static_cast<const std::int64_t*>(doff.get()), off.size());
  const nanscope::check_options opt = nanscope::check_options{}.with_mode(nanscope::check_mode::full_health);
  for (int w = 0; w < warmup_calls; ++w) {
    const nanscope::segmented_result r = env.chk->check(view, segs, opt).get();
    if (!result_is_clean(r.total, n) || !r.bad.empty()) {
      state.SkipWithError("the benchmark buffer is not what the row claims (non-finite values or wrong count)");
      return;
    }
  }
  event_timer timer;
  for (auto _ : state) {
    timer.start(view.stream);
    nanscope::cuda::pending_segmented p = env.chk->check(view, segs, opt);
    timer.stop(view.stream);
    state.SetIterationTime(timer.seconds());
  }
  set_throughput(state, n, es);
}

// ---------------------------------------------------------------------------------------------------------
// read_anchor/<dtype>/<elements>
// ---------------------------------------------------------------------------------------------------------
template <class In, class Out>
void run_read_anchor(benchmark::State& state, const void* data, std::uint64_t n, std::size_t es) {
  bench_env& env = *g_env;
  const In* in = static_cast<const In*>(data);
  device_mem out(sizeof(Out));
  Out* d_out = static_cast<Out*>(out.get());
  std::size_t temp_bytes = 0;
  NSB_CUDA(cub::DeviceReduce::Sum(nullptr, temp_bytes, in, d_out, static_cast<std::int64_t>(n), env.stream));
  device_mem temp(temp_bytes > 0 ? temp_bytes : 1);

  for (int w = 0; w < warmup_calls; ++w)
    NSB_CUDA(cub::DeviceReduce::Sum(temp.get(), temp_bytes, in, d_out, static_cast<std::int64_t>(n), env.stream));
  NSB_CUDA(cudaStreamSynchronize(env.stream));

  event_timer timer;
  for (auto _ : state) {
    timer.start(env.stream);
    NSB_CUDA(cub::DeviceReduce::Sum(temp.get(), temp_bytes, in, d_out, static_cast<std::int64_t>(n), env.stream));
    timer.stop(env.stream);
    state.SetIterationTime(timer.seconds());
  }
  set_throughput(state, n, es);
}

void bm_read_anchor(benchmark::State& state, dtype t, std::uint64_t n) {
  bench_env& env = *g_env;
  const std::size_t es = nanscope::size_of(t);
  device_mem buf(n * es);
  fill_device(buf.get(), t, n, 0x5EED0001u, env.stream);
  NSB_CUDA(cudaStreamSynchronize(env.stream));
  switch (es) {
    case 4: run_read_anchor<float, float>(state, buf.get(), n, es); break;  // f32
    case 8: run_read_anchor<unsigned long long, unsigned long long>(state, buf.get(), n, es); break;
    case 2: run_read_anchor<unsigned short, unsigned>(state, buf.get(), n, es); break;
    default: run_read_anchor<unsigned char, unsigned>(state, buf.get(), n, es); break;
  }
}

// ---------------------------------------------------------------------------------------------------------
// batched/1000x65536 and per_tensor/1000x65536
// ---------------------------------------------------------------------------------------------------------
constexpr std::size_t many_count = 1000;
constexpr std::int64_t many_elems = 65536;

struct many_tensors {
  device_mem buf;
  std::vector<std::string> names;
  std::vector<nanscope::cuda::buffer_view> views;

  explicit many_tensors(cudaStream_t s)
      : buf(many_count * static_cast<std::size_t>(many_elems) * sizeof(float)), names(many_count) {
    fill_device(buf.get(), dtype::f32, many_count * static_cast<std::uint64_t>(many_elems), 0x5EED0002u, s);
    NSB_CUDA(cudaStreamSynchronize(s));
    views.reserve(many_count);
    for (std::size_t i = 0; i < many_count; ++i) {
      names[i] = "layer" + std::to_string(i);
      const float* p = buf.f32() + i * static_cast<std::size_t>(many_elems);
      views.push_back(nanscope::cuda::device_buffer(p, dtype::f32, {many_elems}, s, names[i].c_str()));
    }
  }
};

void bm_batched(benchmark::State& state) {
  bench_env& env = *g_env;
  many_tensors data(env.stream);
  const nanscope::check_options opt = stats_mode();

  for (int w = 0; w < warmup_calls; ++w) {
    const nanscope::cuda::pending_batch b = env.chk->check_batch(data.views.data(), data.views.size(), opt);
    for (std::size_t i = 0; i < many_count; ++i) {
      if (!result_is_clean(b.get(i), static_cast<std::uint64_t>(many_elems))) {
        state.SkipWithError("a benchmark tensor is not what the row claims");
        return;
      }
    }
  }

  event_timer timer;
  nanscope::cuda::pending_batch held;
  for (auto _ : state) {
    timer.start(env.stream);
    held = env.chk->check_batch(data.views.data(), data.views.size(), opt);
    timer.stop(env.stream);  // after the batch's own event: the records are written when this completes
    state.SetIterationTime(timer.seconds());
  }
  set_throughput(state, many_count * static_cast<std::uint64_t>(many_elems), sizeof(float));
}

void bm_per_tensor(benchmark::State& state) {
  bench_env& env = *g_env;
  many_tensors data(env.stream);
  const nanscope::check_options opt = stats_mode();
  std::vector<nanscope::cuda::pending> held(many_count);

  // two passes: the checker's pool reaches its steady state (tickets of the previous pass are reused)
  for (int w = 0; w < warmup_calls; ++w) {
    for (std::size_t i = 0; i < many_count; ++i) held[i] = env.chk->check(data.views[i], opt);
    for (std::size_t i = 0; i < many_count; ++i) {
      if (!result_is_clean(held[i].get(), static_cast<std::uint64_t>(many_elems))) {
        state.SkipWithError("a benchmark tensor is not what the row claims");
        return;
      }
    }
  }

  event_timer timer;
  for (auto _ : state) {
    timer.start(env.stream);
    for (std::size_t i = 0; i < many_count; ++i) held[i] = env.chk->check(data.views[i], opt);
    timer.stop(env.stream);
    state.SetIterationTime(timer.seconds());
  }
  set_throughput(state, many_count * static_cast<std::uint64_t>(many_elems), sizeof(float));
}

// ---------------------------------------------------------------------------------------------------------
// The transformer block (f32, row-major activations [tokens, features])
// ---------------------------------------------------------------------------------------------------------
namespace block {

constexpr int seqs = 8, seq = 256, tokens = seqs * seq;
constexpr int d_model = 1024, heads = 16, d_head = 64, d_ff = 4096;
static_assert(heads * d_head == d_model, "heads x d_head must be d_model");
constexpr int ln_threads = 256;
static_assert(d_model == 4 * ln_threads, "the layernorm kernel takes 4 values (one float4) per thread");
constexpr float ln_eps = 1e-5f;

/// Row-major C[m, n] = alpha * op(A)[m, k] . op(B)[k, n] + beta * C with column-major cuBLAS: the column-major
/// view of a row-major matrix is its transpose, so this computes C^T = op(B)^T . op(A)^T.
void gemm(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  NSB_CUBLAS(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b, ldb,
                         a, lda, &beta, c, ldc));
}

/// The same over `batch` matrices at fixed element strides.
void gemm_batched(cublasHandle_t h, bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                  long long stride_a, const float* b, int ldb, long long stride_b, float beta, float* c, int ldc,
                  long long stride_c, int batch) {
  NSB_CUBLAS(cublasSgemmStridedBatched(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                                       &alpha, b, ldb, stride_b, a, lda, stride_a, &beta, c, ldc, stride_c, batch));
}

struct max_op {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// In-place softmax of rows of N values, one block of N threads per row.
template <int N>
__global__ void __launch_bounds__(N) softmax_rows(float* rows) {
  using reduce = cub::BlockReduce<float, N>;
  __shared__ typename reduce::TempStorage temp;
  __shared__ float shared_value;
  float* row = rows + static_cast<std::size_t>(blockIdx.x) * N;
  const float v = row[threadIdx.x];
  const float mx = reduce(temp).Reduce(v, max_op{});
  if (threadIdx.x == 0) shared_value = mx;
  __syncthreads();
  const float e = __expf(v - shared_value);
  __syncthreads();  // every thread has read shared_value; temp is reused
  const float sum = reduce(temp).Sum(e);
  if (threadIdx.x == 0) shared_value = sum;
  __syncthreads();
  row[threadIdx.x] = e / shared_value;
}

/// out = layernorm(in) * gain + bias over rows of d_model values, one block per row.
__global__ void __launch_bounds__(ln_threads) layernorm_rows(const float* in, const float* gain, const float* bias,
                                                             float* out) {
  using reduce = cub::BlockReduce<float, ln_threads>;
  __shared__ typename reduce::TempStorage temp;
  __shared__ float shared_value;
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * d_model;
  const float4 v = reinterpret_cast<const float4*>(in + row)[threadIdx.x];
  const float s = reduce(temp).Sum(v.x + v.y + v.z + v.w);
  if (threadIdx.x == 0) shared_value = s / static_cast<float>(d_model);
  __syncthreads();
  const float mean = shared_value;
  const float dx = v.x - mean, dy = v.y - mean, dz = v.z - mean, dw = v.w - mean;
  __syncthreads();  // every thread has read shared_value; temp is reused
  const float ss = reduce(temp).Sum(dx * dx + dy * dy + dz * dz + dw * dw);
  if (threadIdx.x == 0) shared_value = rsqrtf(ss / static_cast<float>(d_model) + ln_eps);
  __syncthreads();
  const float rstd = shared_value;
  const float4 g = reinterpret_cast<const float4*>(gain)[threadIdx.x];
  const float4 b = reinterpret_cast<const float4*>(bias)[threadIdx.x];
  float4 o;
  o.x = dx * rstd * g.x + b.x;
  o.y = dy * rstd * g.y + b.y;
  o.z = dz * rstd * g.z + b.z;
  o.w = dw * rstd * g.w + b.w;
  reinterpret_cast<float4*>(out + row)[threadIdx.x] = o;
}

/// GELU, tanh approximation.
__global__ void gelu(const float* in, float* out, std::uint64_t n) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = in[i];
    out[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
  }
}

/// out = a + b (the residual connections).
__global__ void add(const float* a, const float* b, float* out, std::uint64_t n) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = a[i] + b[i];
}

enum class checking { none, per_layer, per_layer_health, batch_at_end };

struct model {
  static constexpr std::size_t f = sizeof(float);
  static constexpr std::size_t td = static_cast<std::size_t>(tokens) * d_model;
  static constexpr std::size_t tf = static_cast<std::size_t>(tokens) * d_ff;

  // input, weights ([in, out] row-major) and layernorm parameters
  device_mem x{td * f}, wqkv{static_cast<std::size_t>(d_model) * 3 * d_model * f},
      wo{static_cast<std::size_t>(d_model) * d_model * f}, w1{static_cast<std::size_t>(d_model) * d_ff * f},
      w2{static_cast<std::size_t>(d_ff) * d_model * f}, ln1_g{d_model * f}, ln1_b{d_model * f}, ln2_g{d_model * f},
      ln2_b{d_model * f};
  // activations
  device_mem qkv{3 * td * f}, scores{static_cast<std::size_t>(seqs) * heads * seq * seq * f}, ctx{td * f},
      attn_out{td * f}, resid1{td * f}, ln1{td * f}, ff1{tf * f}, act{tf * f}, ff2{td * f}, resid2{td * f},
      out{td * f};

  // the checked layer outputs, in forward order
  enum output { o_qkv, o_ctx, o_attn_out, o_resid1, o_ln1, o_ff1, o_act, o_ff2, o_resid2, o_out, output_count };
  std::vector<nanscope::cuda::buffer_view> views;
  std::vector<nanscope::cuda::pending> held;  // per-layer handles of the last forward
  nanscope::cuda::pending_batch held_batch;    // batch handle of the last forward

  explicit model(cudaStream_t s) {
    fill_device(x.get(), dtype::f32, td, 0x5EED0100u, s);
    const float sd = 1.0f / std::sqrt(static_cast<float>(d_model));
    const float sf = 1.0f / std::sqrt(static_cast<float>(d_ff));
    // uniform(-a, a) with a = sqrt(3 / fan_in): variance 1 / fan_in
    fill_uniform(wqkv.f32(), static_cast<std::uint64_t>(d_model) * 3 * d_model, 0x5EED0101u, 1.7320508f * sd, 0.0f, s);
    fill_uniform(wo.f32(), static_cast<std::uint64_t>(d_model) * d_model, 0x5EED0102u, 1.7320508f * sd, 0.0f, s);
    fill_uniform(w1.f32(), static_cast<std::uint64_t>(d_model) * d_ff, 0x5EED0103u, 1.7320508f * sd, 0.0f, s);
    fill_uniform(w2.f32(), static_cast<std::uint64_t>(d_ff) * d_model, 0x5EED0104u, 1.7320508f * sf, 0.0f, s);
    fill_uniform(ln1_g.f32(), d_model, 0x5EED0105u, 0.1f, 1.0f, s);
    fill_uniform(ln1_b.f32(), d_model, 0x5EED0106u, 0.1f, 0.0f, s);
    fill_uniform(ln2_g.f32(), d_model, 0x5EED0107u, 0.1f, 1.0f, s);
    fill_uniform(ln2_b.f32(), d_model, 0x5EED0108u, 0.1f, 0.0f, s);
    NSB_CUDA(cudaStreamSynchronize(s));

    using nanscope::cuda::device_buffer;
    const std::int64_t t = tokens, dm = d_model, dff = d_ff;
    views.resize(output_count);
    views[o_qkv] = device_buffer(qkv.get(), dtype::f32, {t, 3 * dm}, s, "block.attn.qkv");
    views[o_ctx] = device_buffer(ctx.get(), dtype::f32, {t, dm}, s, "block.attn.context");
    views[o_attn_out] = device_buffer(attn_out.get(), dtype::f32, {t, dm}, s, "block.attn.out_proj");
    views[o_resid1] = device_buffer(resid1.get(), dtype::f32, {t, dm}, s, "block.attn.residual");
    views[o_ln1] = device_buffer(ln1.get(), dtype::f32, {t, dm}, s, "block.ln1");
    views[o_ff1] = device_buffer(ff1.get(), dtype::f32, {t, dff}, s, "block.mlp.fc1");
    views[o_act] = device_buffer(act.get(), dtype::f32, {t, dff}, s, "block.mlp.gelu");
    views[o_ff2] = device_buffer(ff2.get(), dtype::f32, {t, dm}, s, "block.mlp.fc2");
    views[o_resid2] = device_buffer(resid2.get(), dtype::f32, {t, dm}, s, "block.mlp.residual");
    views[o_out] = device_buffer(out.get(), dtype::f32, {t, dm}, s, "block.ln2");
    held.resize(output_count);
  }

  /// One forward pass queued on `s` (cuBLAS handle bound to `s`), with the layer outputs checked as `mode` says.
  void forward(cudaStream_t s, cublasHandle_t h, nanscope::cuda::checker& chk, checking mode) {
    const nanscope::check_options opt = mode == checking::per_layer_health
                                            ? nanscope::check_options{}.with_mode(nanscope::check_mode::full_health)
                                            : stats_mode();
    const auto layer_done = [&](output o) {
      if (mode == checking::per_layer || mode == checking::per_layer_health) held[o] = chk.check(views[o], opt);
    };
    const int ld_qkv = 3 * d_model;

    // QKV projection: [tokens, d_model] . [d_model, 3 d_model]
    gemm(h, false, false, tokens, 3 * d_model, d_model, 1.0f, x.f32(), d_model, wqkv.f32(), 3 * d_model, 0.0f,
         qkv.f32(), ld_qkv);
    layer_done(o_qkv);

    // attention per sequence, heads batched: scores = Q K^T / sqrt(d_head), softmax, context = P V
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
    const long long head_scores = static_cast<long long>(seq) * seq;
    for (int b = 0; b < seqs; ++b) {
      const float* q = qkv.f32() + static_cast<std::size_t>(b) * seq * ld_qkv;
      const float* k = q + d_model;
      float* sc = scores.f32() + static_cast<std::size_t>(b) * heads * head_scores;
      gemm_batched(h, false, true, seq, seq, d_head, scale, q, ld_qkv, d_head, k, ld_qkv, d_head, 0.0f, sc, seq,
                   head_scores, heads);
    }
    softmax_rows<seq><<<seqs * heads * seq, seq, 0, s>>>(scores.f32());
    NSB_LAUNCHED();
    for (int b = 0; b < seqs; ++b) {
      const float* v = qkv.f32() + static_cast<std::size_t>(b) * seq * ld_qkv + 2 * d_model;
      const float* p = scores.f32() + static_cast<std::size_t>(b) * heads * head_scores;
      float* c = ctx.f32() + static_cast<std::size_t>(b) * seq * d_model;
      gemm_batched(h, false, false, seq, d_head, seq, 1.0f, p, seq, head_scores, v, ld_qkv, d_head, 0.0f, c, d_model,
                   d_head, heads);
    }
    layer_done(o_ctx);

    // output projection, residual, layernorm
    gemm(h, false, false, tokens, d_model, d_model, 1.0f, ctx.f32(), d_model, wo.f32(), d_model, 0.0f,
         attn_out.f32(), d_model);
    layer_done(o_attn_out);
    add<<<grid_for(td, 256), 256, 0, s>>>(x.f32(), attn_out.f32(), resid1.f32(), td);
    NSB_LAUNCHED();
    layer_done(o_resid1);
    layernorm_rows<<<tokens, ln_threads, 0, s>>>(resid1.f32(), ln1_g.f32(), ln1_b.f32(), ln1.f32());
    NSB_LAUNCHED();
    layer_done(o_ln1);

    // MLP: fc1, GELU, fc2, residual, layernorm
    gemm(h, false, false, tokens, d_ff, d_model, 1.0f, ln1.f32(), d_model, w1.f32(), d_ff, 0.0f, ff1.f32(), d_ff);
    layer_done(o_ff1);
    gelu<<<grid_for(tf, 256), 256, 0, s>>>(ff1.f32(), act.f32(), tf);
    NSB_LAUNCHED();
    layer_done(o_act);
    gemm(h, false, false, tokens, d_model, d_ff, 1.0f, act.f32(), d_ff, w2.f32(), d_model, 0.0f, ff2.f32(), d_model);
    layer_done(o_ff2);
    add<<<grid_for(td, 256), 256, 0, s>>>(ln1.f32(), ff2.f32(), resid2.f32(), td);
    NSB_LAUNCHED();
    layer_done(o_resid2);
    layernorm_rows<<<tokens, ln_threads, 0, s>>>(resid2.f32(), ln2_g.f32(), ln2_b.f32(), out.f32());
    NSB_LAUNCHED();
    layer_done(o_out);

    if (mode == checking::batch_at_end) held_batch = chk.check_batch(views.data(), views.size(), opt);
  }

  /// Not timed: every layer output of the last checked forward is finite.
  bool outputs_clean(checking mode) const {
    for (std::size_t i = 0; i < views.size(); ++i) {
      const std::uint64_t n = static_cast<std::uint64_t>(views[i].view.numel());
      const nanscope::health_result r = mode == checking::batch_at_end ? held_batch.get(i) : held[i].get();
      if (!result_is_clean(r, n)) return false;
    }
    return true;
  }
};

}  // namespace block

void bm_forward(benchmark::State& state, block::checking mode) {
  bench_env& env = *g_env;
  block::model m(env.stream);

  for (int w = 0; w < warmup_calls; ++w) {
    m.forward(env.stream, env.blas, *env.chk, mode);
    NSB_CUDA(cudaStreamSynchronize(env.stream));
  }
  if (mode != block::checking::none && !m.outputs_clean(mode)) {
    state.SkipWithError("a layer output of the benchmark block is not finite");
    return;
  }

  event_timer timer;
  for (auto _ : state) {
    timer.start(env.stream);
    m.forward(env.stream, env.blas, *env.chk, mode);
    timer.stop(env.stream);
    state.SetIterationTime(timer.seconds());
    NSB_CUDA(cudaStreamSynchronize(env.stream));
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(block::tokens));
  state.counters["checked_tensors"] =
      mode == block::checking::none ? 0.0 : static_cast<double>(block::model::output_count);
}

/// forward_plain_graph / forward_checked_graph: the forward (plain, or with its 10 layer outputs checked one by
/// one, STATS) captured once into a CUDA graph and replayed; the checker's storage and tickets are reserved
/// before the capture (checker::reserve), as a user capturing a checked forward must.
void bm_forward_graph(benchmark::State& state, block::checking mode) {
  bench_env& env = *g_env;
  block::model m(env.stream);
  m.forward(env.stream, env.blas, *env.chk, block::checking::none);  // cuBLAS's first-call setup, not captured
  NSB_CUDA(cudaStreamSynchronize(env.stream));
  if (mode != block::checking::none)
    env.chk->reserve(env.stream, 1, static_cast<std::uint64_t>(block::tokens) * block::d_ff,
                     block::model::output_count + 2);
  // a capture that fails skips the row (a message, not an abort: the other rows of the process still run)
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaError_t e = cudaStreamBeginCapture(env.stream, cudaStreamCaptureModeThreadLocal);
  std::string why;
  if (e == cudaSuccess) {
    try {
      m.forward(env.stream, env.blas, *env.chk, mode);
    } catch (const std::exception& ex) {
      why = ex.what();
    }
    e = cudaStreamEndCapture(env.stream, &graph);
    if (!why.empty() && e == cudaSuccess) e = cudaErrorStreamCaptureInvalidated;
  }
  if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    if (graph != nullptr) cudaGraphDestroy(graph);
    state.SkipWithError(
        (std::string("CUDA graph capture of the forward failed: ") + (why.empty() ? cudaGetErrorString(e) : why)).c_str());
    return;
  }
  for (int w = 0; w < warmup_calls; ++w) {
    NSB_CUDA(cudaGraphLaunch(exec, env.stream));
    NSB_CUDA(cudaStreamSynchronize(env.stream));
  }
  if (mode != block::checking::none && !m.outputs_clean(mode)) {
    state.SkipWithError("a layer output of the benchmark block is not finite (graph replay)");
  } else {
    event_timer timer;
    for (auto _ : state) {
      timer.start(env.stream);
      NSB_CUDA(cudaGraphLaunch(exec, env.stream));
      timer.stop(env.stream);
      state.SetIterationTime(timer.seconds());
      NSB_CUDA(cudaStreamSynchronize(env.stream));
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(block::tokens));
  }
  NSB_CUDA(cudaGraphExecDestroy(exec));
  NSB_CUDA(cudaGraphDestroy(graph));
}

// ---------------------------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------------------------
template <class Fn>
void add_row(const std::string& name, Fn&& fn) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn))->UseManualTime()->Unit(benchmark::kMicrosecond);
}

// ---------------------------------------------------------------------------------------------------------
// host_enqueue/1000x65536, host_api/<call>: the host's per-check cost (wall time, steady_clock)
// ---------------------------------------------------------------------------------------------------------
__global__ void empty_kernel() {}

void bm_host_enqueue(benchmark::State& state) {
  bench_env& env = *g_env;
  many_tensors data(env.stream);
  const nanscope::check_options opt = stats_mode();
  std::vector<nanscope::cuda::pending> held(many_count);
  for (int w = 0; w < warmup_calls; ++w) {
    for (std::size_t i = 0; i < many_count; ++i) held[i] = env.chk->check(data.views[i], opt);
    NSB_CUDA(cudaStreamSynchronize(env.stream));
  }
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < many_count; ++i) held[i] = env.chk->check(data.views[i], opt);
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    NSB_CUDA(cudaStreamSynchronize(env.stream));
  }
}

template <class Call>
void bm_host_api(benchmark::State& state, Call&& call) {
  bench_env& env = *g_env;
  for (int i = 0; i < 1000; ++i) call(env);
  NSB_CUDA(cudaStreamSynchronize(env.stream));
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) call(env);
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    NSB_CUDA(cudaStreamSynchronize(env.stream));
  }
}

struct api_buffers {
  device_mem buf{1 << 20};
  cudaEvent_t event = nullptr;
  api_buffers() { NSB_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)); }
  ~api_buffers() { cudaEventDestroy(event); }
};
api_buffers& api() {
  static api_buffers* a = new api_buffers;  // process lifetime
  return *a;
}

void register_host_rows() {
  add_row("host_enqueue/1000x65536", [](benchmark::State& s) { bm_host_enqueue(s); });
  add_row("host_api/pointer_attributes", [](benchmark::State& s) {
    bm_host_api(s, [](bench_env&) {
      cudaPointerAttributes a{};
      NSB_CUDA(cudaPointerGetAttributes(&a, api().buf.get()));
    });
  });
  add_row("host_api/is_capturing", [](benchmark::State& s) {
    bm_host_api(s, [](bench_env& e) {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      NSB_CUDA(cudaStreamIsCapturing(e.stream, &st));
    });
  });
  add_row("host_api/get_device", [](benchmark::State& s) {
    bm_host_api(s, [](bench_env&) {
      int d = 0;
      NSB_CUDA(cudaGetDevice(&d));
    });
  });
  add_row("host_api/get_last_error", [](benchmark::State& s) {
    bm_host_api(s, [](bench_env&) { (void)cudaGetLastError(); });
  });
  add_row("host_api/event_record", [](benchmark::State& s) {
    bm_host_api(s, [](bench_env& e) { NSB_CUDA(cudaEventRecord(api().event, e.stream)); });
  });
  add_row("host_api/event_query", [](benchmark::State& s) {
    bm_host_api(s, [](bench_env&) { (void)cudaEventQuery(api().event); });
  });
  add_row("host_api/launch_empty", [](benchmark::State& s) {
    bm_host_api(s, [](bench_env& e) { empty_kernel<<<4, 256, 0, e.stream>>>(); });
  });
}

void register_rows() {
  for (const std::uint64_t n : row_elements) {
    for (const dtype_row& d : row_dtypes) {
      const dtype t = d.type;
      const std::string suffix = std::string("/") + d.name + "/" + std::to_string(n);
      add_row("read_anchor" + suffix, [t, n](benchmark::State& s) { bm_read_anchor(s, t, n); });
      add_row("health" + suffix, [t, n](benchmark::State& s) { bm_health(s, t, n); });
    }
  }
  for (const dtype_row& d : row_dtypes) {
    if (d.type != dtype::f32 && d.type != dtype::bf16) continue;
    const dtype t = d.type;
    add_row(std::string("full_health/") + d.name + "/67108864",
            [t](benchmark::State& s) { bm_health(s, t, 67108864ull, nanscope::check_mode::full_health); });
    for (const std::uint64_t k : {1000ull, 100000ull})
      add_row(std::string("health_seg/") + d.name + "/67108864/" + std::to_string(k),
              [t, k](benchmark::State& s) { bm_health_seg(s, t, 67108864ull, k, false); });
  }
  for (const dtype_row& d : row_dtypes) {
    if (d.type != dtype::f32 && d.type != dtype::bf16) continue;
    const dtype t = d.type;
    for (int f = -1; f < nanscope::block_format_count; ++f) {
      const std::string fname = f < 0 ? "all" : nanscope::name(static_cast<nanscope::block_format>(f));
      add_row(std::string("health_mx/") + d.name + "/67108864/" + fname,
              [t, f](benchmark::State& s) { bm_health_mx(s, t, 67108864ull, f); });
      if (f == -1 || f == 0 || f == nanscope::block_format_count - 1)  // all, mxfp8_e4m3, nvfp4
      {
        add_row(std::string("health_mx_unroll2/") + d.name + "/67108864/" + fname,
                [t, f](benchmark::State& s) { bm_health_mx(s, t, 67108864ull, f, 2); });
        add_row(std::string("health_mx_unitpath/") + d.name + "/67108864/" + fname,
                [t, f](benchmark::State& s) { bm_health_mx(s, t, 67108864ull, f, -1); });
      }
    }
  }
  add_row("health_seg_kv/bf16/67108864/4096",
          [](benchmark::State& s) { bm_health_seg(s, dtype::bf16, 67108864ull, 4096, true); });
  add_row("batched/1000x65536", [](benchmark::State& s) { bm_batched(s); });
  add_row("per_tensor/1000x65536", [](benchmark::State& s) { bm_per_tensor(s); });
  register_host_rows();
  add_row("forward_plain", [](benchmark::State& s) { bm_forward(s, block::checking::none); });
  add_row("forward_checked", [](benchmark::State& s) { bm_forward(s, block::checking::per_layer); });
  add_row("forward_checked_batch", [](benchmark::State& s) { bm_forward(s, block::checking::batch_at_end); });
  add_row("forward_checked_health", [](benchmark::State& s) { bm_forward(s, block::checking::per_layer_health); });
  add_row("forward_plain_graph", [](benchmark::State& s) { bm_forward_graph(s, block::checking::none); });
  add_row("forward_checked_graph", [](benchmark::State& s) { bm_forward_graph(s, block::checking::per_layer); });
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("nanscope_bench_cuda: skipped: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found 0 devices");
    return 0;
  }

  int dev = 0;
  NSB_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  NSB_CUDA(cudaGetDeviceProperties(&prop, dev));
  std::fprintf(stderr,
               "nanscope_bench_cuda: device %d: %s (sm_%d%d, %d SMs, %.1f GiB)\n"
               "nanscope_bench_cuda: note: times are GPU time between CUDA events around the queued work "
               "(Google Benchmark's manual time, rows named .../manual_time); the machine should be otherwise idle\n",
               dev, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
               static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  benchmark::AddCustomContext("cuda_device", prop.name);
  benchmark::AddCustomContext("cuda_compute_capability", std::to_string(prop.major) + "." + std::to_string(prop.minor));
  benchmark::AddCustomContext("cuda_sm_count", std::to_string(prop.multiProcessorCount));

  bench_env env;
  env.sm_count = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 1;
  NSB_CUDA(cudaStreamCreateWithFlags(&env.stream, cudaStreamNonBlocking));
  NSB_CUBLAS(cublasCreate(&env.blas));
  NSB_CUBLAS(cublasSetStream(env.blas, env.stream));
  int rc = 0;
  try {
    env.chk = std::make_unique<nanscope::cuda::checker>();
    g_env = &env;
    register_rows();
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "nanscope_bench_cuda: error: %s\n", ex.what());
    rc = 1;
  }
  benchmark::Shutdown();
  env.chk.reset();  // synchronizes and frees its storage while the stream still exists
  g_env = nullptr;
  NSB_CUBLAS(cublasDestroy(env.blas));
  NSB_CUDA(cudaStreamDestroy(env.stream));
  return rc;
}
