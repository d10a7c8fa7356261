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
// Numerics (shared/FORMATS.md §6 semantics, identical to the host pass): counts, extrema, abs_min(_nonzero)
// and the first non-finite index are exact and equal the host's bit for bit. mean and std are computed in
// double with per-thread shifts and Chan's combination in a fixed order: deterministic run to run on a given
// device and launch shape, and within 1e-9 relative (of max(|mean|, std)) of the host's portable kernel
// (check_options::with_isa(isa::scalar)); the host's AVX2/AVX-512 kernels sum in f32 and are within ~1e-7.
#ifndef NANSCOPE_CUDA_CUH
#define NANSCOPE_CUDA_CUH

#if !defined(__CUDACC__)
#error "nanscope/cuda.cuh is CUDA code: compile it with nvcc (host-only code includes <nanscope/check.hpp>)"
#endif

#include "check.hpp"
#include "deferred.hpp"
#include "recorder.hpp"
#include "view.hpp"

#include <cub/block/block_reduce.cuh>
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

// ---------------------------------------------------------------------------------------------------------
// Views of raw CUDA buffers
// ---------------------------------------------------------------------------------------------------------

/// A raw CUDA buffer: device pointer, dtype, shape (and strides) in a tensor_view, plus the stream the data
/// is produced on. The check is ordered after the work already queued on that stream.
struct buffer_view {
  tensor_view view;
  cudaStream_t stream = nullptr;
};

/// A contiguous row-major device buffer.
inline buffer_view device_buffer(const void* device_ptr, dtype t, std::initializer_list<std::int64_t> shape,
                                 cudaStream_t stream = nullptr, const char* name = nullptr) {
  buffer_view b;
  b.view = tensor_view::contiguous(device_ptr, t, shape, name);
  b.view.space = memory_space::cuda_device;
  b.stream = stream;
  return b;
}
/// A strided device view (any tensor_view whose data is device memory).
inline buffer_view device_buffer(tensor_view v, cudaStream_t stream = nullptr) {
  if (v.space == memory_space::host) v.space = memory_space::cuda_device;
  return buffer_view{v, stream};
}

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

// ---------------------------------------------------------------------------------------------------------
// Device-side records
// ---------------------------------------------------------------------------------------------------------

/// (n, mean, m2) of one magnitude class of finite values. Part 0: f32-range values and f64 values within
/// [2^-480, 2^480] (or zero); part 1: larger f64 values, scaled by 2^-600; part 2: smaller non-zero f64
/// values, scaled by 2^600. Scaling keeps every square and every Chan merge inside double's range; the host
/// unscales in long double.
struct moments {
  unsigned long long n;
  double mean;
  double m2;
};

inline constexpr int moment_parts = 3;
inline constexpr double huge_scale = 0x1p-600;
inline constexpr double tiny_scale = 0x1p600;

}  // namespace detail

/// What the device writes for one tensor (a POD record; `check_async` callers allocate these in pinned host
/// memory or device memory and turn them into a health_result with finalize()). Extrema are raw: keys of f64
/// bit patterns (see detail::key64) that stay at their identities when no value was seen.
struct device_result {
  unsigned long long neg, zero, sub, nan, pinf, ninf;
  long long kmin, kmax;          // over non-NaN values
  unsigned long long amin_nz;    // |x| bits over non-NaN non-zero values (f64 +inf bits when none)
  long long first_nf;            // flat row-major index of the first NaN/Inf; INT64_MAX when none
  detail::moments m[detail::moment_parts];
};

namespace detail {

inline constexpr int block_threads = 256;
inline constexpr int unroll = 4;                      // 16-byte loads in flight per thread
inline constexpr long long no_index = 0x7FFFFFFFFFFFFFFFll;
inline constexpr std::int64_t key64_pos_inf = 0x7FF0000000000000ll;
inline constexpr std::int64_t key64_neg_inf = static_cast<std::int64_t>(0x800FFFFFFFFFFFFFull);

__host__ __device__ inline device_result identity_result() {
  device_result r{};
  r.kmin = key64_pos_inf;
  r.kmax = key64_neg_inf;
  r.amin_nz = 0x7FF0000000000000ull;
  r.first_nf = no_index;
  return r;
}

__host__ __device__ inline moments merge_moments_d(const moments& a, const moments& b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const double na = static_cast<double>(a.n), nb = static_cast<double>(b.n), nt = na + nb;
  const double delta = b.mean - a.mean;
  moments r;
  r.n = a.n + b.n;
  r.mean = a.mean + delta * (nb / nt);
  r.m2 = a.m2 + b.m2 + delta * delta * (na * (nb / nt));
  return r;
}

/// Combines two records (a's elements, b's elements: the order matters only for the moments, whose merge
/// order is fixed by the launch shape).
struct merge_op {
  __host__ __device__ device_result operator()(const device_result& a, const device_result& b) const {
    device_result r;
    r.neg = a.neg + b.neg;
    r.zero = a.zero + b.zero;
    r.sub = a.sub + b.sub;
    r.nan = a.nan + b.nan;
    r.pinf = a.pinf + b.pinf;
    r.ninf = a.ninf + b.ninf;
    r.kmin = b.kmin < a.kmin ? b.kmin : a.kmin;
    r.kmax = b.kmax > a.kmax ? b.kmax : a.kmax;
    r.amin_nz = b.amin_nz < a.amin_nz ? b.amin_nz : a.amin_nz;
    r.first_nf = b.first_nf < a.first_nf ? b.first_nf : a.first_nf;
    for (int p = 0; p < moment_parts; ++p) r.m[p] = merge_moments_d(a.m[p], b.m[p]);
    return r;
  }
};

__device__ __forceinline__ long long dev_key64(unsigned long long bits) {
  return static_cast<long long>(bits ^ (static_cast<unsigned long long>(static_cast<long long>(bits) >> 63) >> 1));
}
__device__ __forceinline__ int dev_key32(unsigned bits) {
  return static_cast<int>(bits ^ (static_cast<unsigned>(static_cast<int>(bits) >> 31) >> 1));
}

/// Exact f32 -> f64 bit pattern with integer operations only (immune to flush-to-zero).
__device__ __forceinline__ unsigned long long f32_to_f64_bits_dev(unsigned b) {
  const unsigned long long sign = static_cast<unsigned long long>(b >> 31) << 63;
  const unsigned e = (b >> 23) & 0xFFu;
  const unsigned m = b & 0x7FFFFFu;
  if (e == 0xFFu) return sign | 0x7FF0000000000000ull | (static_cast<unsigned long long>(m) << 29);
  if (e != 0) return sign | (static_cast<unsigned long long>(e + 896u) << 52) | (static_cast<unsigned long long>(m) << 29);
  if (m == 0) return sign;
  const int p = 31 - __clz(static_cast<int>(m));  // top bit position, 0..22; value = m * 2^-149
  const unsigned long long mant = (static_cast<unsigned long long>(m) << (52 - p)) & 0xFFFFFFFFFFFFFull;
  return sign | (static_cast<unsigned long long>(p - 149 + 1023) << 52) | mant;
}
/// Finite f32 bits -> double, exactly (integer conversion for subnormals: FP64 arithmetic never flushes).
__device__ __forceinline__ double f32_finite_to_double(unsigned b) {
  const unsigned a = b & 0x7FFFFFFFu;
  double x;
  if (a >= 0x00800000u) {
    x = __longlong_as_double(static_cast<long long>((static_cast<unsigned long long>(a) << 29) + (896ull << 52)));
  } else {
    x = static_cast<double>(a) * 0x1p-149;
  }
  return (b >> 31) != 0 ? -x : x;
}

/// f16 bits -> f32 bits, exact, integer-only.
__device__ __forceinline__ unsigned f16_to_f32_bits(unsigned h) {
  const unsigned sign = (h & 0x8000u) << 16;
  const unsigned e = (h >> 10) & 0x1Fu;
  const unsigned m = h & 0x3FFu;
  if (e == 0x1Fu) return sign | 0x7F800000u | (m << 13);
  if (e != 0) return sign | ((e + 112u) << 23) | (m << 13);
  if (m == 0) return sign;
  const int p = 31 - __clz(static_cast<int>(m));  // 0..9; value = m * 2^-24
  return sign | (static_cast<unsigned>(p + 103) << 23) | ((m << (23 - p)) & 0x7FFFFFu);
}
/// fp8 e4m3fn bits -> f32 bits (no infinities; S.1111.111 is NaN).
__device__ __forceinline__ unsigned e4m3_to_f32_bits(unsigned b) {
  const unsigned sign = (b & 0x80u) << 24;
  if ((b & 0x7Fu) == 0x7Fu) return sign | 0x7FC00000u;
  const unsigned e = (b >> 3) & 0xFu;
  const unsigned m = b & 7u;
  if (e != 0) return sign | ((e + 120u) << 23) | (m << 20);
  if (m == 0) return sign;
  const int p = 31 - __clz(static_cast<int>(m));  // 0..2; value = m * 2^-9
  return sign | (static_cast<unsigned>(p + 118) << 23) | ((m << (23 - p)) & 0x7FFFFFu);
}
/// fp8 e5m2 is the top byte of an f16.
__device__ __forceinline__ unsigned e5m2_to_f32_bits(unsigned b) { return f16_to_f32_bits(b << 8); }

/// Min normal of each float dtype, as f32 bits (f64 uses 2^-1022 directly).
__device__ __forceinline__ unsigned normal32_of(dtype t) {
  switch (t) {
    case dtype::f16:
    case dtype::f8_e5m2: return 113u << 23;   // 2^-14
    case dtype::f8_e4m3fn: return 121u << 23;  // 2^-6
    default: return 0x00800000u;               // f32, bf16: 2^-126
  }
}

/// Per-thread accumulators. Counts fit 32 bits: a thread sees at most n / (threads in its tensor's blocks)
/// elements, and the host bounds that.
struct thread_acc {
  unsigned neg = 0, zero = 0, sub = 0, nan = 0, pinf = 0, ninf = 0;
  long long kmin = key64_pos_inf, kmax = key64_neg_inf;
  unsigned long long amin = 0x7FF0000000000000ull;
  long long first = no_index;
  // moments of each part: count, shift, shifted sums
  unsigned cnt[moment_parts] = {0, 0, 0};
  double k[moment_parts] = {0.0, 0.0, 0.0};
  double s1[moment_parts] = {0.0, 0.0, 0.0};
  double s2[moment_parts] = {0.0, 0.0, 0.0};
};

/// The 32-bit state of the common path (f32, f16, bf16, fp8): extrema as f32 keys.
struct thread_acc32 {
  int kmin = 0x7F800000, kmax = static_cast<int>(0x807FFFFFu);
  unsigned amin = 0x7F800000u;
};

__device__ __forceinline__ void add_moment(thread_acc& t, int part, double x) {
  if (t.cnt[part] == 0) t.k[part] = x;
  const double d = x - t.k[part];
  t.s1[part] += d;
  t.s2[part] = fma(d, d, t.s2[part]);
  ++t.cnt[part];
}

/// One element given as f32 bits (every dtype but f64). L: 1 non-finite only, 2 counts, 3 stats.
template <int L>
__device__ __forceinline__ void visit32(thread_acc& t, thread_acc32& t32, unsigned b, unsigned normal,
                                        long long index) {
  const unsigned a = b & 0x7FFFFFFFu;
  const bool sgn = (b >> 31) != 0;
  if (a >= 0x7F800000u) {  // rare: NaN or Inf
    const bool is_nan = a > 0x7F800000u;
    t.nan += is_nan;
    t.pinf += !is_nan && !sgn;
    t.ninf += !is_nan && sgn;
    if (index < t.first) t.first = index;
    if (L >= 2 && !is_nan) {
      const int key = dev_key32(b);
      t32.kmin = key < t32.kmin ? key : t32.kmin;
      t32.kmax = key > t32.kmax ? key : t32.kmax;
    }
    return;
  }
  if (L >= 2) {
    const bool z = a == 0;
    t.zero += z;
    t.neg += !z && sgn;
    t.sub += !z && a < normal;
    const int key = dev_key32(b);
    t32.kmin = key < t32.kmin ? key : t32.kmin;
    t32.kmax = key > t32.kmax ? key : t32.kmax;
    if (L >= 3) {
      const unsigned am = z ? 0x7F800000u : a;
      t32.amin = am < t32.amin ? am : t32.amin;
      add_moment(t, 0, f32_finite_to_double(b));
    }
  }
}

inline constexpr unsigned long long f64_hi_bits = static_cast<unsigned long long>(1023 + 480) << 52;
inline constexpr unsigned long long f64_lo_bits = static_cast<unsigned long long>(1023 - 480) << 52;

/// One f64 element.
template <int L>
__device__ __forceinline__ void visit64(thread_acc& t, unsigned long long b, long long index) {
  const unsigned long long a = b & 0x7FFFFFFFFFFFFFFFull;
  const bool sgn = (b >> 63) != 0;
  if (a >= 0x7FF0000000000000ull) {
    const bool is_nan = a > 0x7FF0000000000000ull;
    t.nan += is_nan;
    t.pinf += !is_nan && !sgn;
    t.ninf += !is_nan && sgn;
    if (index < t.first) t.first = index;
    if (L >= 2 && !is_nan) {
      const long long key = dev_key64(b);
      t.kmin = key < t.kmin ? key : t.kmin;
      t.kmax = key > t.kmax ? key : t.kmax;
    }
    return;
  }
  if (L >= 2) {
    const bool z = a == 0;
    t.zero += z;
    t.neg += !z && sgn;
    t.sub += !z && a < 0x0010000000000000ull;
    const long long key = dev_key64(b);
    t.kmin = key < t.kmin ? key : t.kmin;
    t.kmax = key > t.kmax ? key : t.kmax;
    if (L >= 3) {
      const unsigned long long am = z ? 0x7FF0000000000000ull : a;
      t.amin = am < t.amin ? am : t.amin;
      const double x = __longlong_as_double(static_cast<long long>(b));
      if (a > f64_hi_bits) {
        add_moment(t, 1, x * huge_scale);
      } else if (!z && a < f64_lo_bits) {
        add_moment(t, 2, x * tiny_scale);
      } else {
        add_moment(t, 0, x);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Launch parameters: passed by value (the driver copies them at launch: nothing to keep alive, and a
// captured graph keeps its own copy)
// ---------------------------------------------------------------------------------------------------------

struct tensor_desc {
  const void* data;
  unsigned long long n;
  unsigned block_begin;  // first block of this tensor in the grid (blocks run to the next tensor's begin)
  unsigned char type;    // dtype
  unsigned char layout;  // 0: contiguous; k > 0: strided, layouts[k - 1]
  unsigned short result;  // record index relative to launch_params::results
};

struct strided_layout {
  int rank;
  int pad;
  long long shape[max_rank];
  long long strides[max_rank];
};

template <int Cap, int StridedCap>
struct launch_params {
  device_result* partials;  // one per block
  unsigned* counters;       // one per tensor: blocks finished (reset to 0 by the last one)
  device_result* results;   // one per tensor (pinned host or device memory)
  int count;
  unsigned total_blocks;
  tensor_desc desc[Cap];
  strided_layout layouts[StridedCap];
};

inline constexpr int batch_cap = 1000;     // tensors per launch (kernel parameters are limited to 32764 bytes)
inline constexpr int batch_strided_cap = 8;
using single_params = launch_params<1, 1>;
using batch_params = launch_params<batch_cap, batch_strided_cap>;
static_assert(sizeof(batch_params) <= 32764, "kernel parameters exceed CUDA's limit");

/// Element bytes of a dtype index (float dtypes only reach the kernel).
__device__ __forceinline__ int esize_of(dtype t) {
  switch (t) {
    case dtype::f64: return 8;
    case dtype::f32: return 4;
    case dtype::f16:
    case dtype::bf16: return 2;
    default: return 1;
  }
}

/// Raw bits of element at byte address p (as f32 bits; f64 handled apart).
__device__ __forceinline__ unsigned load32_bits(const unsigned char* p, dtype t) {
  switch (t) {
    case dtype::f32: return __ldg(reinterpret_cast<const unsigned*>(p));
    case dtype::f16: return f16_to_f32_bits(__ldg(reinterpret_cast<const unsigned short*>(p)));
    case dtype::bf16: return static_cast<unsigned>(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16;
    case dtype::f8_e4m3fn: return e4m3_to_f32_bits(__ldg(p));
    default: return e5m2_to_f32_bits(__ldg(p));
  }
}

/// Element at a byte address that may not be aligned to the element size: assembled from byte loads.
template <int L>
__device__ __forceinline__ void visit_bytes(thread_acc& t, thread_acc32& t32, const unsigned char* p, dtype ty, int es,
                                            unsigned normal, long long index) {
  unsigned long long bits = 0;
  for (int b = es - 1; b >= 0; --b) bits = (bits << 8) | __ldg(p + b);
  if (ty == dtype::f64) {
    visit64<L>(t, bits, index);
    return;
  }
  const unsigned raw = static_cast<unsigned>(bits);
  const unsigned fb = ty == dtype::f32         ? raw
                      : ty == dtype::f16       ? f16_to_f32_bits(raw)
                      : ty == dtype::bf16      ? raw << 16
                      : ty == dtype::f8_e4m3fn ? e4m3_to_f32_bits(raw)
                                               : e5m2_to_f32_bits(raw);
  visit32<L>(t, t32, fb, normal, index);
}

template <int L>
__device__ __forceinline__ void visit_at(thread_acc& t, thread_acc32& t32, const unsigned char* p, dtype ty,
                                         unsigned normal, long long index) {
  if (ty == dtype::f64) {
    visit64<L>(t, static_cast<unsigned long long>(__ldg(reinterpret_cast<const long long*>(p))), index);
  } else {
    visit32<L>(t, t32, load32_bits(p, ty), normal, index);
  }
}

/// The elements of one 16-byte word.
template <int L, dtype T>
__device__ __forceinline__ void visit_vec(thread_acc& t, thread_acc32& t32, const uint4& v, unsigned normal,
                                          long long index) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (T == dtype::f64) {
#pragma unroll
    for (int j = 0; j < 2; ++j)
      visit64<L>(t, (static_cast<unsigned long long>(w[2 * j + 1]) << 32) | w[2 * j], index + j);
  } else if constexpr (T == dtype::f32) {
#pragma unroll
    for (int j = 0; j < 4; ++j) visit32<L>(t, t32, w[j], normal, index + j);
  } else if constexpr (T == dtype::f16 || T == dtype::bf16) {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const unsigned h = (w[j >> 1] >> ((j & 1) * 16)) & 0xFFFFu;
      visit32<L>(t, t32, T == dtype::f16 ? f16_to_f32_bits(h) : h << 16, normal, index + j);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      const unsigned b = (w[j >> 2] >> ((j & 3) * 8)) & 0xFFu;
      visit32<L>(t, t32, T == dtype::f8_e4m3fn ? e4m3_to_f32_bits(b) : e5m2_to_f32_bits(b), normal, index + j);
    }
  }
}

/// Contiguous, 16-byte aligned body: `unroll` loads in flight per thread, grid-stride over the tensor's
/// blocks.
template <int L, dtype T>
__device__ void run_body(thread_acc& t, thread_acc32& t32, const uint4* vec, unsigned long long nvec,
                         long long index0, unsigned long long g, unsigned long long stride) {
  constexpr int epv = 16 / static_cast<int>(T == dtype::f64 ? 8 : T == dtype::f32 ? 4 : (T == dtype::f16 || T == dtype::bf16) ? 2 : 1);
  const unsigned normal = normal32_of(T);
  for (unsigned long long base = g; base < nvec; base += stride * unroll) {
    uint4 v[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const unsigned long long i = base + static_cast<unsigned long long>(u) * stride;
      if (i < nvec) v[u] = __ldg(vec + i);
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const unsigned long long i = base + static_cast<unsigned long long>(u) * stride;
      if (i < nvec) visit_vec<L, T>(t, t32, v[u], normal, index0 + static_cast<long long>(i) * epv);
    }
  }
}

/// The thread's share of one tensor.
template <int L>
__device__ void run_tensor(thread_acc& t, thread_acc32& t32, const tensor_desc& d, const strided_layout* layout,
                           unsigned long long g, unsigned long long stride) {
  const dtype ty = static_cast<dtype>(d.type);
  const int es = esize_of(ty);
  const unsigned normal = normal32_of(ty);
  const auto* base = static_cast<const unsigned char*>(d.data);
  const unsigned long long n = d.n;
  const unsigned long long addr = reinterpret_cast<unsigned long long>(base);
  const bool aligned = addr % static_cast<unsigned long long>(es) == 0;  // then every element is (strides count elements)
  if (layout != nullptr) {  // strided: element by element, logical (row-major) index order
    for (unsigned long long i = g; i < n; i += stride) {
      unsigned long long rest = i;
      long long off = 0;
      for (int dim = layout->rank - 1; dim >= 0; --dim) {
        const unsigned long long ext = static_cast<unsigned long long>(layout->shape[dim]);
        off += static_cast<long long>(rest % ext) * layout->strides[dim];
        rest /= ext;
      }
      if (aligned) {
        visit_at<L>(t, t32, base + off * es, ty, normal, static_cast<long long>(i));
      } else {
        visit_bytes<L>(t, t32, base + off * es, ty, es, normal, static_cast<long long>(i));
      }
    }
    return;
  }
  if (!aligned) {  // misaligned elements: byte-exact element loads
    for (unsigned long long i = g; i < n; i += stride)
      visit_bytes<L>(t, t32, base + i * es, ty, es, normal, static_cast<long long>(i));
    return;
  }
  const unsigned long long epv = 16u / static_cast<unsigned>(es);
  unsigned long long head = ((16u - addr % 16u) % 16u) / static_cast<unsigned>(es);
  if (head > n) head = n;
  const unsigned long long nvec = (n - head) / epv;
  const unsigned long long tail_begin = head + nvec * epv;
  // head and tail: a few elements, taken by the first threads of the tensor
  if (g < head) visit_at<L>(t, t32, base + g * es, ty, normal, static_cast<long long>(g));
  if (g < n - tail_begin) {
    const unsigned long long i = tail_begin + g;
    visit_at<L>(t, t32, base + i * es, ty, normal, static_cast<long long>(i));
  }
  const auto* vec = reinterpret_cast<const uint4*>(base + head * es);
  const auto h = static_cast<long long>(head);
  switch (ty) {
    case dtype::f64: run_body<L, dtype::f64>(t, t32, vec, nvec, h, g, stride); break;
    case dtype::f32: run_body<L, dtype::f32>(t, t32, vec, nvec, h, g, stride); break;
    case dtype::f16: run_body<L, dtype::f16>(t, t32, vec, nvec, h, g, stride); break;
    case dtype::bf16: run_body<L, dtype::bf16>(t, t32, vec, nvec, h, g, stride); break;
    case dtype::f8_e4m3fn: run_body<L, dtype::f8_e4m3fn>(t, t32, vec, nvec, h, g, stride); break;
    default: run_body<L, dtype::f8_e5m2>(t, t32, vec, nvec, h, g, stride); break;
  }
}

/// Per-thread state -> record (f32 keys and abs bits become f64 ones).
__device__ inline device_result to_record(const thread_acc& t, const thread_acc32& t32, bool f64) {
  device_result r = identity_result();
  r.neg = t.neg;
  r.zero = t.zero;
  r.sub = t.sub;
  r.nan = t.nan;
  r.pinf = t.pinf;
  r.ninf = t.ninf;
  r.first_nf = t.first;
  if (f64) {
    r.kmin = t.kmin;
    r.kmax = t.kmax;
    r.amin_nz = t.amin;
  } else {
    // keys are their own inverse; the identities (+inf / -inf) convert to the f64 identities
    r.kmin = dev_key64(f32_to_f64_bits_dev(static_cast<unsigned>(dev_key32(static_cast<unsigned>(t32.kmin)))));
    r.kmax = dev_key64(f32_to_f64_bits_dev(static_cast<unsigned>(dev_key32(static_cast<unsigned>(t32.kmax)))));
    r.amin_nz = f32_to_f64_bits_dev(t32.amin);
  }
  for (int p = 0; p < moment_parts; ++p) {
    if (t.cnt[p] == 0) continue;
    const double n = static_cast<double>(t.cnt[p]);
    r.m[p].n = t.cnt[p];
    r.m[p].mean = t.k[p] + t.s1[p] / n;
    const double m2 = t.s2[p] - t.s1[p] * (t.s1[p] / n);
    r.m[p].m2 = m2 > 0.0 ? m2 : 0.0;
  }
  return r;
}

/// Reads a record another block wrote (through L2, bypassing L1).
__device__ inline device_result load_cg(const device_result* p) {
  device_result r;
  const auto* src = reinterpret_cast<const unsigned long long*>(p);
  auto* dst = reinterpret_cast<unsigned long long*>(&r);
  for (unsigned i = 0; i < sizeof(device_result) / 8; ++i) dst[i] = __ldcg(src + i);
  return r;
}

/// The fused pass over a batch: each block finds its tensor, reduces its share, and the last block of a
/// tensor to finish merges that tensor's block records in index order and writes the result.
template <int L, class Params>
// __grid_constant__: the kernel indexes its parameters dynamically (the tensor lookup); without it nvcc would
// copy the ~25 KB of parameters to every thread's local memory.
__global__ void __launch_bounds__(block_threads) health_kernel(const __grid_constant__ Params prm) {
  using block_reduce = cub::BlockReduce<device_result, block_threads, cub::BLOCK_REDUCE_WARP_REDUCTIONS>;
  __shared__ typename block_reduce::TempStorage temp;
  __shared__ bool last;
  // which tensor: the last desc whose block_begin <= blockIdx.x (uniform per block)
  int lo = 0, hi = prm.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (prm.desc[mid].block_begin <= blockIdx.x) lo = mid; else hi = mid - 1;
  }
  const int ti = lo;
  const tensor_desc& d = prm.desc[ti];
  const unsigned end = ti + 1 < prm.count ? prm.desc[ti + 1].block_begin : prm.total_blocks;
  const unsigned nblocks = end - d.block_begin;
  const unsigned local_block = blockIdx.x - d.block_begin;
  const unsigned long long g = static_cast<unsigned long long>(local_block) * block_threads + threadIdx.x;
  const unsigned long long stride = static_cast<unsigned long long>(nblocks) * block_threads;

  thread_acc t;
  thread_acc32 t32;
  run_tensor<L>(t, t32, d, d.layout != 0 ? &prm.layouts[d.layout - 1] : nullptr, g, stride);
  const device_result mine = to_record(t, t32, static_cast<dtype>(d.type) == dtype::f64);
  const device_result block = block_reduce(temp).Reduce(mine, merge_op{});

  if (nblocks == 1) {
    if (threadIdx.x == 0) prm.results[d.result] = block;
    return;
  }
  if (threadIdx.x == 0) {
    prm.partials[blockIdx.x] = block;
    __threadfence();
    const unsigned done = atomicAdd(prm.counters + ti, 1u);
    last = done == nblocks - 1;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  // fixed order: thread i merges records i, i + B, i + 2B, ... then the block reduction (a fixed tree)
  device_result acc = identity_result();
  for (unsigned i = threadIdx.x; i < nblocks; i += block_threads)
    acc = merge_op{}(acc, load_cg(prm.partials + d.block_begin + i));
  __syncthreads();  // temp storage reuse
  const device_result total = block_reduce(temp).Reduce(acc, merge_op{});
  if (threadIdx.x == 0) {
    prm.results[d.result] = total;
    prm.counters[ti] = 0;  // ready for the next launch on this storage
  }
}

// ---------------------------------------------------------------------------------------------------------
// Host side: device properties, launch planning
// ---------------------------------------------------------------------------------------------------------

struct device_props {
  int sm_count = 0;
  int blocks_per_sm = 0;
};

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

inline constexpr unsigned max_blocks_per_launch = 1u << 16;
/// Bytes a block should read at least before the grid grows (keeps short tensors to few blocks).
inline constexpr unsigned long long bytes_per_block = 64ull << 10;

/// Blocks for one tensor of `bytes` bytes: enough to fill the device, never more than useful.
inline unsigned blocks_for(unsigned long long bytes, const device_props& p) {
  const unsigned long long full = static_cast<unsigned long long>(p.sm_count) * static_cast<unsigned long long>(p.blocks_per_sm);
  unsigned long long b = (bytes + bytes_per_block - 1) / bytes_per_block;
  if (b < 1) b = 1;
  if (b > full) b = full;
  return static_cast<unsigned>(b);
}

/// Level of a mode (0: nothing to read on the device).
inline int level_of(check_mode m, dtype t, std::uint64_t n) {
  if (!is_float(t) || n == 0) return 0;
  switch (m) {
    case check_mode::stats: return 3;
    case check_mode::full_health: return 2;
    case check_mode::concise_health:
    case check_mode::curt_health: return 1;
    default: return 0;
  }
}

/// Host-side checks of a device view: a valid view, device-readable memory on the current device.
inline void validate_device_view(const buffer_view& b) {
  const tensor_view& v = b.view;
  validate(v);
  if (v.space == memory_space::host)
    ::nanscope::detail::fail(v.name, "the view says host memory: use nanscope::check on the host, or mark it "
                                     "memory_space::cuda_device");
  if (v.numel() == 0 || !is_float(v.type)) return;
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, v.data);
  if (e != cudaSuccess) cuda_fail(v.name, e, "cudaPointerGetAttributes");
  int dev = 0;
  cuda_check(cudaGetDevice(&dev), v.name, "cudaGetDevice");
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

/// Storage layout of check_async's temporary storage for `count` tensors and `blocks` blocks.
inline std::size_t storage_bytes(std::size_t count, std::size_t blocks) {
  const std::size_t counters = ((count * sizeof(unsigned) + 255) / 256) * 256;
  return counters + blocks * sizeof(device_result);
}

/// Plans the blocks of views[first, first + m) at one level, filling params. Returns the block count.
template <class Params>
inline unsigned plan(const buffer_view* views, const std::size_t* idx, std::size_t m, std::size_t group_base,
                     const device_props& props, Params& prm, int strided_cap) {
  unsigned blocks = 0;
  int strided = 0;
  // scale per-tensor blocks down when the sum would exceed a launch's limit
  unsigned long long want = 0;
  for (std::size_t j = 0; j < m; ++j) {
    const tensor_view& v = views[idx[j]].view;
    want += blocks_for(v.numel() * size_of(v.type), props);
  }
  const unsigned long long budget = max_blocks_per_launch;
  for (std::size_t j = 0; j < m; ++j) {
    const tensor_view& v = views[idx[j]].view;
    const std::uint64_t n = v.numel();
    unsigned b = blocks_for(n * size_of(v.type), props);
    if (want > budget) {
      const unsigned long long scaled = static_cast<unsigned long long>(b) * budget / want;
      b = scaled < 1 ? 1u : static_cast<unsigned>(scaled);
    }
    // per-thread counters are 32-bit: at most 2^31 elements per thread
    while (static_cast<unsigned long long>(b) * block_threads * (1ull << 31) < n) b *= 2;
    tensor_desc& d = prm.desc[j];
    d = tensor_desc{};
    d.data = v.data;
    d.n = n;
    d.block_begin = blocks;
    d.type = static_cast<unsigned char>(v.type);
    d.layout = 0;
    d.result = static_cast<unsigned short>(idx[j] - group_base);
    if (!v.is_contiguous()) {
      if (strided >= strided_cap) ::nanscope::detail::fail(v.name, "internal: too many strided views in one launch");
      strided_layout& l = prm.layouts[strided++];
      l = strided_layout{};
      l.rank = v.rank;
      for (int i = 0; i < v.rank; ++i) {
        l.shape[i] = v.shape[i];
        l.strides[i] = v.strides[i];
      }
      d.layout = static_cast<unsigned char>(strided);
    }
    blocks += b;
  }
  prm.count = static_cast<int>(m);
  prm.total_blocks = blocks;
  return blocks;
}

/// Splits views[0, count) into launch groups: at most batch_cap views with device work, batch_strided_cap
/// strided ones, and a span of at most 65535 views (record offsets are 16-bit). Calls f(begin, idx, m).
template <class F>
inline void for_each_group(const buffer_view* views, std::size_t count, check_mode mode, std::vector<std::size_t>& idx,
                           F&& f) {
  std::size_t i = 0;
  while (i < count) {
    idx.clear();
    int strided = 0;
    std::size_t j = i;
    for (; j < count && idx.size() < static_cast<std::size_t>(batch_cap) && j - i < 65535; ++j) {
      const tensor_view& v = views[j].view;
      if (level_of(mode, v.type, v.numel()) == 0) continue;
      if (!v.is_contiguous()) {
        if (strided == batch_strided_cap) break;
        ++strided;
      }
      idx.push_back(j);
    }
    if (!idx.empty()) f(i, idx.data(), idx.size());
    i = j;
  }
}

/// Launch parameters of the batch path: ~32 KB, one per thread (no heap allocation per check).
inline batch_params& thread_batch_params() {
  static thread_local batch_params p;
  return p;
}

inline int mode_level(check_mode mode) {
  switch (mode) {
    case check_mode::stats: return 3;
    case check_mode::full_health: return 2;
    case check_mode::concise_health:
    case check_mode::curt_health: return 1;
    default: return 0;
  }
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
  if (views == nullptr && count != 0) ::nanscope::detail::fail(nullptr, "check_async: null views with a count");
  if (static_cast<unsigned>(mode) < 1 || static_cast<unsigned>(mode) > 6)
    ::nanscope::detail::fail(count != 0 ? views[0].view.name : nullptr,
                             "unknown check mode " + std::to_string(static_cast<unsigned>(mode)));
  for (std::size_t i = 0; i < count; ++i) validate(views[i].view);
  const char* first_name = count != 0 ? views[0].view.name : nullptr;
  const detail::device_props props = detail::current_props(first_name);
  static thread_local std::vector<std::size_t> idx;
  detail::batch_params& bp = detail::thread_batch_params();
  std::size_t max_blocks = 0;
  detail::for_each_group(views, count, mode, idx, [&](std::size_t base, const std::size_t* ix, std::size_t m) {
    const unsigned b = m == 1 ? [&] {
      detail::single_params sp{};
      return detail::plan(views, ix, 1, base, props, sp, 1);
    }()
                              : detail::plan(views, ix, m, base, props, bp, detail::batch_strided_cap);
    if (b > max_blocks) max_blocks = b;
  });
  const std::size_t need = detail::storage_bytes(static_cast<std::size_t>(detail::batch_cap), max_blocks);
  if (temp_storage == nullptr) {
    temp_storage_bytes = need;
    return;
  }
  if (temp_storage_bytes < need)
    ::nanscope::detail::fail(first_name, "check_async: temporary storage of " + std::to_string(temp_storage_bytes) +
                                             " bytes, " + std::to_string(need) + " needed");
  if (results == nullptr && max_blocks != 0) ::nanscope::detail::fail(first_name, "check_async: null results");
  for (std::size_t i = 0; i < count; ++i)
    if (detail::level_of(mode, views[i].view.type, views[i].view.numel()) != 0) detail::validate_device_view(views[i]);
  const int level = detail::mode_level(mode);
  // An error left pending by earlier CUDA calls (not ours) would otherwise be reported as a launch failure.
  const cudaError_t earlier = cudaGetLastError();
  if (earlier != cudaSuccess && earlier != cudaErrorNotReady)
    detail::cuda_fail(first_name, earlier, "an earlier CUDA call (the error was pending before nanscope's launch)");
  auto* counters = static_cast<unsigned*>(temp_storage);
  auto* partials = reinterpret_cast<device_result*>(static_cast<unsigned char*>(temp_storage) +
                                                    detail::storage_bytes(static_cast<std::size_t>(detail::batch_cap), 0));
  detail::for_each_group(views, count, mode, idx, [&](std::size_t base, const std::size_t* ix, std::size_t m) {
    if (m == 1) {
      detail::single_params sp{};
      detail::plan(views, ix, 1, base, props, sp, 1);
      sp.counters = counters;
      sp.partials = partials;
      sp.results = results + base;
      detail::launch(level, sp, stream);
    } else {
      detail::plan(views, ix, m, base, props, bp, detail::batch_strided_cap);
      bp.counters = counters;
      bp.partials = partials;
      bp.results = results + base;
      detail::launch(level, bp, stream);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) detail::cuda_fail(views[ix[0]].view.name, e, "the health kernel launch");
  });
}

/// The health_result of a view from its device record (the record is ignored for views that needed no
/// device work). Same fields, same semantics as nanscope::check on the host.
inline health_result finalize(const device_result& rec, const tensor_view& v, check_mode mode) {
  health_result r;
  r.type = v.type;
  r.mode = mode;
  r.rank = v.rank;
  for (int i = 0; i < v.rank; ++i) r.shape[i] = v.shape[i];
  const std::uint64_t n = v.numel();
  r.count = n;
  if (detail::level_of(mode, v.type, n) == 0) {
    if (mode == check_mode::stats) r.m2 = 0.0L;
    return r;
  }
  r.any_nonfinite = (rec.nan + rec.pinf + rec.ninf) != 0;
  r.first_nonfinite = rec.first_nf == detail::no_index ? -1 : static_cast<std::int64_t>(rec.first_nf);
  if (mode == check_mode::curt_health) return r;
  r.nan = rec.nan;
  r.pos_inf = rec.pinf;
  r.neg_inf = rec.ninf;
  if (mode == check_mode::concise_health) return r;
  r.negative = rec.neg;
  r.zero = rec.zero;
  r.subnormal = rec.sub;
  r.positive = n - rec.nan - rec.pinf - rec.ninf - rec.neg - rec.zero;
  const std::uint64_t not_nan = n - rec.nan;
  double mn = ::nanscope::detail::qnan, mx = ::nanscope::detail::qnan;
  if (not_nan != 0) {
    const std::uint64_t bmin = ::nanscope::detail::unkey64(rec.kmin), bmax = ::nanscope::detail::unkey64(rec.kmax);
    mn = ::nanscope::detail::bits_to_double(bmin);
    mx = ::nanscope::detail::bits_to_double(bmax);
    const std::uint64_t amn = bmin & 0x7FFFFFFFFFFFFFFFull, amx = bmax & 0x7FFFFFFFFFFFFFFFull;
    r.abs_max = ::nanscope::detail::bits_to_double(amn > amx ? amn : amx);
  }
  if (mode == check_mode::full_health) return r;
  r.min = mn;
  r.max = mx;
  const std::uint64_t nonzero = not_nan - rec.zero;
  r.abs_min_nonzero = nonzero != 0 ? ::nanscope::detail::bits_to_double(rec.amin_nz) : ::nanscope::detail::qnan;
  r.abs_min = rec.zero != 0 ? 0.0 : r.abs_min_nonzero;
  // parts 1 and 2 are scaled by 2^-600 / 2^600: unscale in long double and merge in a fixed order
  std::uint64_t nn = 0;
  double mean = 0.0;
  long double m2 = 0.0L;
  const long double unscale_mean[detail::moment_parts] = {1.0L, 0x1p600L, 0x1p-600L};
  for (int p = 0; p < detail::moment_parts; ++p) {
    const detail::moments& m = rec.m[p];
    if (m.n == 0) continue;
    const long double um = static_cast<long double>(m.mean) * unscale_mean[p];
    const long double um2 = static_cast<long double>(m.m2) * unscale_mean[p] * unscale_mean[p];
    if (nn == 0) {
      nn = m.n;
      mean = static_cast<double>(um);
      m2 = um2;
    } else {
      ::nanscope::detail::merge_moments(nn, mean, m2, m.n, static_cast<double>(um), um2);
    }
  }
  r.mean = nn != 0 ? mean : ::nanscope::detail::qnan;
  r.m2 = nn != 0 ? m2 : 0.0L;
  r.std = ::nanscope::detail::std_from(nn, r.m2);
  return r;
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
    std::size_t bytes = 0;
    check_async(nullptr, bytes, views, count, nullptr, opt.mode, stream);
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
        check_async(storage, bytes, views, count, t->records, opt.mode, stream);
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

#endif  // NANSCOPE_CUDA_CUH
