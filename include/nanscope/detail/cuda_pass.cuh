// nanscope — detail/cuda_pass.cuh: the arithmetic of the CUDA backend's fused pass (element decoding,
// classification, per-thread accumulation, records and their merge), its launch planning and the host-side
// finalisation of a record. Internal: include <nanscope/cuda.cuh>.
//
// Everything here also compiles as plain C++ when NANSCOPE_IMPL_CUDA_EMULATION is defined (the CUDA intrinsics
// it uses have exact host stand-ins below). tests/unit/cuda_emulation_test.cpp does that: it runs the device
// code on the CPU, thread by thread, and compares it with the host pass, so the kernel's logic is tested on
// machines without a GPU. Only that test defines the macro; it must never be mixed with CUDA translation units
// in one program (the same names would have different stream types).
#ifndef NANSCOPE_DETAIL_CUDA_PASS_CUH
#define NANSCOPE_DETAIL_CUDA_PASS_CUH

#if !defined(__CUDACC__) && !defined(NANSCOPE_IMPL_CUDA_EMULATION)
#error "nanscope/detail/cuda_pass.cuh is internal CUDA code: include <nanscope/cuda.cuh> (compiled by nvcc)"
#endif

#include "../check.hpp"
#include "../health.hpp"
#include "../view.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#include <cuda_runtime.h>
#define NANSCOPE_IMPL_DEV __device__ __forceinline__
#define NANSCOPE_IMPL_DEV_FN __device__ inline
#define NANSCOPE_IMPL_HD __host__ __device__ inline
#define NANSCOPE_IMPL_UNROLL_ALL _Pragma("unroll")
#else
#define NANSCOPE_IMPL_UNROLL_ALL
#define NANSCOPE_IMPL_DEV inline
#define NANSCOPE_IMPL_DEV_FN inline
#define NANSCOPE_IMPL_HD inline
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace cuda {

#if defined(__CUDACC__)
using stream_type = cudaStream_t;
#else
struct emulated_stream;
using stream_type = emulated_stream*;
#endif

namespace detail {
// The CUDA intrinsics of the pass, and exact host stand-ins for the emulation.
#if defined(__CUDACC__)
using vec16 = uint4;
NANSCOPE_IMPL_DEV int dev_clz(int x) { return __clz(x); }
NANSCOPE_IMPL_DEV double dev_as_double(long long b) { return __longlong_as_double(b); }
NANSCOPE_IMPL_DEV double dev_fma(double a, double b, double c) { return fma(a, b, c); }
NANSCOPE_IMPL_DEV float dev_as_float(unsigned b) { return __uint_as_float(b); }
NANSCOPE_IMPL_DEV unsigned dev_float_bits(float x) { return __float_as_uint(x); }
/// The two f16 halves of a word as f32 bits (cvt.f32.f16: exact for every f16 value, no flushing; only tame
/// lanes, which are normal f16 values, rely on it: the rest are decoded again by f16_to_f32_bits).
NANSCOPE_IMPL_DEV void dev_f16x2_to_f32_bits(unsigned w, unsigned& lo, unsigned& hi) {
  float a, b;
  asm("{.reg .b16 l, h;\n\tmov.b32 {l, h}, %2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;}"
      : "=f"(a), "=f"(b)
      : "r"(w));
  lo = __float_as_uint(a);
  hi = __float_as_uint(b);
}
template <class T>
NANSCOPE_IMPL_DEV T dev_ldg(const T* p) {
  return __ldg(p);
}
#else
struct vec16 {
  unsigned x, y, z, w;
};
inline int dev_clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline double dev_as_double(long long b) {
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}
inline double dev_fma(double a, double b, double c) { return std::fma(a, b, c); }
inline float dev_as_float(unsigned b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}
inline unsigned dev_float_bits(float x) {
  unsigned b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
inline unsigned f16_to_f32_bits(unsigned h);  // defined below
inline void dev_f16x2_to_f32_bits(unsigned w, unsigned& lo, unsigned& hi) {
  lo = f16_to_f32_bits(w & 0xFFFFu);
  hi = f16_to_f32_bits(w >> 16);
}
template <class T>
inline T dev_ldg(const T* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
#endif
}  // namespace detail

// ---------------------------------------------------------------------------------------------------------
// Views of raw CUDA buffers
// ---------------------------------------------------------------------------------------------------------

/// A raw CUDA buffer: device pointer, dtype, shape (and strides) in a tensor_view, plus the stream the data
/// is produced on. The check is ordered after the work already queued on that stream.
struct buffer_view {
  tensor_view view;
  stream_type stream = nullptr;
};

/// A contiguous row-major device buffer.
inline buffer_view device_buffer(const void* device_ptr, dtype t, std::initializer_list<std::int64_t> shape,
                                 stream_type stream = nullptr, const char* name = nullptr) {
  buffer_view b;
  b.view = tensor_view::contiguous(device_ptr, t, shape, name);
  b.view.space = memory_space::cuda_device;
  b.stream = stream;
  return b;
}
/// A strided device view (any tensor_view whose data is device memory).
inline buffer_view device_buffer(tensor_view v, stream_type stream = nullptr) {
  if (v.space == memory_space::host) v.space = memory_space::cuda_device;
  return buffer_view{v, stream};
}


namespace detail {

// ---------------------------------------------------------------------------------------------------------
// Device-side records
// ---------------------------------------------------------------------------------------------------------

/// (n, shift + mean, m2) of one magnitude class of finite values. Part 0: f32-range values and f64 values
/// within [2^-480, 2^480] (or zero); part 1: larger f64 values, scaled by 2^-600; part 2: smaller non-zero f64
/// values, scaled by 2^600. Scaling keeps every square and every Chan merge inside double's range; the host
/// unscales in long double.
///
/// The mean is kept as a shift plus an offset (recentre() makes the shift the double nearest the mean after
/// every merge; the offset is what that leaves). Where the mean is far larger than the spread (f64
/// 1e12 + N(0, 1)), an absolute mean rounds at ulp(1e12) ~ 1e-4 and every Chan merge's delta of two such means
/// carries that error into m2 (1e-8 relative over the ~10^5 merges of an H100 grid, seen on an H200); the
/// difference of two shifts is exact there (Sterbenz) and the offsets keep their low bits.
struct moments {
  unsigned long long n;
  double shift;
  double mean;  // mean - shift
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

NANSCOPE_IMPL_HD device_result identity_result() {
  device_result r{};
  r.kmin = ::nanscope::detail::key64_max;  // key of +inf
  r.kmax = ::nanscope::detail::key64_min;  // key of -inf
  r.amin_nz = ::nanscope::detail::f64_inf_bits;
  r.first_nf = no_index;
  return r;
}

/// shift := the double nearest shift + mean, mean := the rest, exactly (a branch-free two-sum). The shift
/// then follows the mean: where the first value was far from it (3e38 then values near 1), an offset kept
/// relative to that value would round at ulp(3e38) in every merge.
NANSCOPE_IMPL_HD void recentre(moments& m) {
  const double s = m.shift + m.mean;
  const double back = s - m.shift;
  m.mean = (m.shift - (s - back)) + (m.mean - back);
  m.shift = s;
}

NANSCOPE_IMPL_HD moments merge_moments_d(const moments& a, const moments& b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const double na = static_cast<double>(a.n), nb = static_cast<double>(b.n), nt = na + nb;
  const double delta = (b.shift - a.shift) + (b.mean - a.mean);
  moments r;
  r.n = a.n + b.n;
  r.shift = a.shift;
  r.mean = a.mean + delta * (nb / nt);
  r.m2 = a.m2 + b.m2 + delta * delta * (na * (nb / nt));
  recentre(r);
  return r;
}

/// The field groups of a record that a kernel of level L fills, merged one group at a time by the kernel (only
/// one group's incoming values are live at once): group 0 holds the counts, the first non-finite index and the
/// extrema the level computes (level 1: the non-finite counts and the index only), group 1 + q moment part q
/// (level 3 only).
template <int L>
inline constexpr int record_groups = L >= 3 ? 1 + moment_parts : 1;

/// a := a merged with b in group G of level L (a's elements first: the order matters only for the moments).
template <int L, int G>
NANSCOPE_IMPL_HD void merge_group(device_result& a, const device_result& b) {
  static_assert(L >= 1 && L <= 3 && G >= 0 && G < record_groups<L>, "check levels are 1, 2 and 3");
  if constexpr (G == 0) {
    a.nan += b.nan;
    a.pinf += b.pinf;
    a.ninf += b.ninf;
    a.first_nf = b.first_nf < a.first_nf ? b.first_nf : a.first_nf;
    if constexpr (L >= 2) {
      a.neg += b.neg;
      a.zero += b.zero;
      a.sub += b.sub;
      a.kmin = b.kmin < a.kmin ? b.kmin : a.kmin;
      a.kmax = b.kmax > a.kmax ? b.kmax : a.kmax;
      a.amin_nz = b.amin_nz < a.amin_nz ? b.amin_nz : a.amin_nz;
    }
  } else {
    a.m[G - 1] = merge_moments_d(a.m[G - 1], b.m[G - 1]);
  }
}

template <int L, int G = 0>
NANSCOPE_IMPL_HD void merge_groups(device_result& a, const device_result& b) {
  merge_group<L, G>(a, b);
  if constexpr (G + 1 < record_groups<L>) merge_groups<L, G + 1>(a, b);
}

/// Combines two records (a's elements, b's elements: the order matters only for the moments, whose merge
/// order is fixed by the launch shape), in the fields a kernel of level L fills: 1 (non-finite only) the
/// non-finite counts and the first index; 2 (counts and extrema) also the other counts and the extrema; 3
/// (stats) also the moments. The other fields are a's: a reduction that starts from identity_result() keeps
/// them at their identities, which is what a kernel of that level leaves there (and finalize() ignores), so a
/// lower level carries no moments through its reductions. The kernel merges the same fields group by group
/// (merge_group), in the same order per field.
template <int L>
struct level_merge {
  static_assert(L >= 1 && L <= 3, "check levels are 1, 2 and 3");
  NANSCOPE_IMPL_HD device_result operator()(const device_result& a, const device_result& b) const {
    device_result r = a;
    merge_groups<L>(r, b);
    return r;
  }
};
/// Every field (level 3).
using merge_op = level_merge<3>;

// Keys and the exact f32 -> f64 bit conversion are the host pass's (kernel_common.hpp, dtype.hpp: host and
// device functions): one definition of the order and of the conversion for both.
using ::nanscope::detail::f32_to_f64_bits;
using ::nanscope::detail::key32;
using ::nanscope::detail::key64;
using ::nanscope::detail::f32_abs_mask;
using ::nanscope::detail::f32_inf_bits;
using ::nanscope::detail::f64_abs_mask;
using ::nanscope::detail::f64_inf_bits;

/// Finite f32 bits -> double, exactly (integer conversion for subnormals: FP64 arithmetic never flushes).
NANSCOPE_IMPL_DEV double f32_finite_to_double(unsigned b) {
  const unsigned a = b & 0x7FFFFFFFu;
  double x;
  if (a >= 0x00800000u) {
    x = dev_as_double(static_cast<long long>((static_cast<unsigned long long>(a) << 29) + (896ull << 52)));
  } else {
    x = static_cast<double>(a) * 0x1p-149;
  }
  return (b >> 31) != 0 ? -x : x;
}

/// f16 bits -> f32 bits, exact, integer-only.
NANSCOPE_IMPL_DEV unsigned f16_to_f32_bits(unsigned h) {
  const unsigned sign = (h & 0x8000u) << 16;
  const unsigned e = (h >> 10) & 0x1Fu;
  const unsigned m = h & 0x3FFu;
  if (e == 0x1Fu) return sign | 0x7F800000u | (m << 13);
  if (e != 0) return sign | ((e + 112u) << 23) | (m << 13);
  if (m == 0) return sign;
  const int p = 31 - dev_clz(static_cast<int>(m));  // 0..9; value = m * 2^-24
  return sign | (static_cast<unsigned>(p + 103) << 23) | ((m << (23 - p)) & 0x7FFFFFu);
}
/// fp8 e4m3fn bits -> f32 bits (no infinities; S.1111.111 is NaN).
NANSCOPE_IMPL_DEV unsigned e4m3_to_f32_bits(unsigned b) {
  const unsigned sign = (b & 0x80u) << 24;
  if ((b & 0x7Fu) == 0x7Fu) return sign | 0x7FC00000u;
  const unsigned e = (b >> 3) & 0xFu;
  const unsigned m = b & 7u;
  if (e != 0) return sign | ((e + 120u) << 23) | (m << 20);
  if (m == 0) return sign;
  const int p = 31 - dev_clz(static_cast<int>(m));  // 0..2; value = m * 2^-9
  return sign | (static_cast<unsigned>(p + 118) << 23) | ((m << (23 - p)) & 0x7FFFFFu);
}
/// fp8 e5m2 is the top byte of an f16.
NANSCOPE_IMPL_DEV unsigned e5m2_to_f32_bits(unsigned b) { return f16_to_f32_bits(b << 8); }

/// Min normal of each float dtype, as f32 bits (f64 uses 2^-1022 directly).
NANSCOPE_IMPL_DEV unsigned normal32_of(dtype t) {
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
  long long kmin = ::nanscope::detail::key64_max, kmax = ::nanscope::detail::key64_min;
  unsigned long long amin = ::nanscope::detail::f64_inf_bits;
  long long first = no_index;
  // moments of each part: count, shift, shifted sums
  unsigned cnt[moment_parts] = {0, 0, 0};
  double k[moment_parts] = {0.0, 0.0, 0.0};
  double s1[moment_parts] = {0.0, 0.0, 0.0};
  double s2[moment_parts] = {0.0, 0.0, 0.0};
};

/// The 32-bit state of the common path (f32, f16, bf16, fp8): extrema as f32 keys (lanes taken one by one)
/// and as floats (tame vectors: no NaN, no zero, no subnormal, so float min/max are exact and order-free).
struct thread_acc32 {
  int kmin = key32(f32_inf_bits), kmax = key32(f32_inf_bits | 0x80000000u);  // keys of +inf / -inf
  unsigned amin = f32_inf_bits;
  float fmin = HUGE_VALF, fmax = -HUGE_VALF;
};

NANSCOPE_IMPL_DEV void add_moment(thread_acc& t, int part, double x) {
  if (t.cnt[part] == 0) t.k[part] = x;
  const double d = x - t.k[part];
  t.s1[part] += d;
  t.s2[part] = dev_fma(d, d, t.s2[part]);
  ++t.cnt[part];
}

/// One element given as f32 bits (every dtype but f64). L: 1 non-finite only, 2 counts, 3 stats.
template <int L>
NANSCOPE_IMPL_DEV void visit32(thread_acc& t, thread_acc32& t32, unsigned b, unsigned normal,
                                        long long index) {
  const unsigned a = b & f32_abs_mask;
  const bool sgn = (b >> 31) != 0;
  if (a >= f32_inf_bits) {  // rare: NaN or Inf
    const bool is_nan = a > f32_inf_bits;
    t.nan += is_nan;
    t.pinf += !is_nan && !sgn;
    t.ninf += !is_nan && sgn;
    if (index < t.first) t.first = index;
    if (L >= 2 && !is_nan) {
      const int key = key32(b);
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
    const int key = key32(b);
    t32.kmin = key < t32.kmin ? key : t32.kmin;
    t32.kmax = key > t32.kmax ? key : t32.kmax;
    if (L >= 3) {
      const unsigned am = z ? f32_inf_bits : a;
      t32.amin = am < t32.amin ? am : t32.amin;
      add_moment(t, 0, f32_finite_to_double(b));
    }
  }
}

/// Four consecutive elements as f32 bits. When every lane is tame (finite, non-zero, at least the dtype's
/// smallest normal: what a healthy tensor holds almost everywhere), the counts, extrema and moments are
/// taken for the four together, without classifying lanes, and it returns true; else it changes nothing and
/// returns false, and the caller visits each lane with visit32 (the exact path). 2|x| - 2 normal is below
/// 2 inf - 2 normal exactly for tame lanes (zeros and subnormals wrap around): one max decides.
template <int L>
NANSCOPE_IMPL_DEV bool visit4_tame(thread_acc& t, thread_acc32& t32, const unsigned (&b)[4], unsigned normal) {
  if constexpr (L == 1) {  // non-finite only: tame here means finite
    const unsigned u0 = b[0] << 1, u1 = b[1] << 1, u2 = b[2] << 1, u3 = b[3] << 1;
    const unsigned m01 = u0 > u1 ? u0 : u1, m23 = u2 > u3 ? u2 : u3;
    return (m01 > m23 ? m01 : m23) < (f32_inf_bits << 1);
  } else {
    const unsigned two_normal = normal << 1;
    const unsigned v0 = (b[0] << 1) - two_normal, v1 = (b[1] << 1) - two_normal;
    const unsigned v2 = (b[2] << 1) - two_normal, v3 = (b[3] << 1) - two_normal;
    const unsigned h01 = v0 > v1 ? v0 : v1, h23 = v2 > v3 ? v2 : v3;
    if ((h01 > h23 ? h01 : h23) >= (f32_inf_bits << 1) - two_normal) return false;
    t.neg += (b[0] >> 31) + (b[1] >> 31) + (b[2] >> 31) + (b[3] >> 31);
    const float x0 = dev_as_float(b[0]), x1 = dev_as_float(b[1]), x2 = dev_as_float(b[2]), x3 = dev_as_float(b[3]);
    const float lo01 = x0 < x1 ? x0 : x1, lo23 = x2 < x3 ? x2 : x3, hi01 = x0 < x1 ? x1 : x0, hi23 = x2 < x3 ? x3 : x2;
    const float lo = lo01 < lo23 ? lo01 : lo23, hi = hi01 < hi23 ? hi23 : hi01;
    t32.fmin = lo < t32.fmin ? lo : t32.fmin;
    t32.fmax = hi > t32.fmax ? hi : t32.fmax;
    if constexpr (L >= 3) {
      const unsigned l01 = v0 < v1 ? v0 : v1, l23 = v2 < v3 ? v2 : v3;
      const unsigned am = ((l01 < l23 ? l01 : l23) >> 1) + normal;  // the smallest |x| bits
      t32.amin = am < t32.amin ? am : t32.amin;
      const double d0 = static_cast<double>(x0), d1 = static_cast<double>(x1);  // normal: exact
      const double d2 = static_cast<double>(x2), d3 = static_cast<double>(x3);
      if (t.cnt[0] == 0) t.k[0] = d0;
      const double k = t.k[0];
      const double e0 = d0 - k, e1 = d1 - k, e2 = d2 - k, e3 = d3 - k;
      t.s1[0] += (e0 + e1) + (e2 + e3);
      t.s2[0] = dev_fma(e3, e3, dev_fma(e2, e2, dev_fma(e1, e1, dev_fma(e0, e0, t.s2[0]))));
      t.cnt[0] += 4;
    }
    return true;
  }
}

inline constexpr unsigned long long f64_hi_bits = static_cast<unsigned long long>(1023 + 480) << 52;
inline constexpr unsigned long long f64_lo_bits = static_cast<unsigned long long>(1023 - 480) << 52;

/// One f64 element.
template <int L>
NANSCOPE_IMPL_DEV void visit64(thread_acc& t, unsigned long long b, long long index) {
  const unsigned long long a = b & f64_abs_mask;
  const bool sgn = (b >> 63) != 0;
  if (a >= f64_inf_bits) {
    const bool is_nan = a > f64_inf_bits;
    t.nan += is_nan;
    t.pinf += !is_nan && !sgn;
    t.ninf += !is_nan && sgn;
    if (index < t.first) t.first = index;
    if (L >= 2 && !is_nan) {
      const long long key = key64(b);
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
    const long long key = key64(b);
    t.kmin = key < t.kmin ? key : t.kmin;
    t.kmax = key > t.kmax ? key : t.kmax;
    if (L >= 3) {
      const unsigned long long am = z ? f64_inf_bits : a;
      t.amin = am < t.amin ? am : t.amin;
      const double x = dev_as_double(static_cast<long long>(b));
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

/// The launch's tensor that block `block` works on: the last descriptor whose block_begin <= block.
template <class Params>
NANSCOPE_IMPL_HD int tensor_of_block(const Params& prm, unsigned block) {
  if constexpr (sizeof(Params::desc) / sizeof(tensor_desc) == 1) {
    (void)prm;
    (void)block;
    return 0;
  } else {
    int lo = 0, hi = prm.count - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (prm.desc[mid].block_begin <= block) lo = mid; else hi = mid - 1;
    }
    return lo;
  }
}

/// One past the last block of tensor `ti` of the launch.
template <class Params>
NANSCOPE_IMPL_HD unsigned tensor_block_end(const Params& prm, int ti) {
  if constexpr (sizeof(Params::desc) / sizeof(tensor_desc) == 1) {
    (void)ti;
    return prm.total_blocks;
  } else {
    return ti + 1 < prm.count ? prm.desc[ti + 1].block_begin : prm.total_blocks;
  }
}

/// Element bytes of a dtype index (float dtypes only reach the kernel).
NANSCOPE_IMPL_DEV int esize_of(dtype t) {
  switch (t) {
    case dtype::f64: return 8;
    case dtype::f32: return 4;
    case dtype::f16:
    case dtype::bf16: return 2;
    default: return 1;
  }
}

/// Raw bits of element at byte address p (as f32 bits; f64 handled apart).
NANSCOPE_IMPL_DEV unsigned load32_bits(const unsigned char* p, dtype t) {
  switch (t) {
    case dtype::f32: return dev_ldg(reinterpret_cast<const unsigned*>(p));
    case dtype::f16: return f16_to_f32_bits(dev_ldg(reinterpret_cast<const unsigned short*>(p)));
    case dtype::bf16: return static_cast<unsigned>(dev_ldg(reinterpret_cast<const unsigned short*>(p))) << 16;
    case dtype::f8_e4m3fn: return e4m3_to_f32_bits(dev_ldg(p));
    default: return e5m2_to_f32_bits(dev_ldg(p));
  }
}

/// Element at a byte address that may not be aligned to the element size: assembled from byte loads.
template <int L>
NANSCOPE_IMPL_DEV void visit_bytes(thread_acc& t, thread_acc32& t32, const unsigned char* p, dtype ty, int es,
                                            unsigned normal, long long index) {
  unsigned long long bits = 0;
  for (int b = es - 1; b >= 0; --b) bits = (bits << 8) | dev_ldg(p + b);
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
NANSCOPE_IMPL_DEV void visit_at(thread_acc& t, thread_acc32& t32, const unsigned char* p, dtype ty,
                                         unsigned normal, long long index) {
  if (ty == dtype::f64) {
    visit64<L>(t, static_cast<unsigned long long>(dev_ldg(reinterpret_cast<const long long*>(p))), index);
  } else {
    visit32<L>(t, t32, load32_bits(p, ty), normal, index);
  }
}

/// Element bytes of a float dtype known at compile time.
template <dtype T>
inline constexpr int elem_bytes = static_cast<int>(size_of(T));

/// The elements of one 16-byte word.
template <int L, dtype T>
NANSCOPE_IMPL_DEV void visit_vec(thread_acc& t, thread_acc32& t32, const vec16& v, unsigned normal,
                                          long long index) {
  const unsigned w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (T == dtype::f64) {
NANSCOPE_IMPL_UNROLL_ALL
    for (int j = 0; j < 2; ++j)
      visit64<L>(t, (static_cast<unsigned long long>(w[2 * j + 1]) << 32) | w[2 * j], index + j);
  } else if constexpr (T == dtype::f32) {
    if (visit4_tame<L>(t, t32, w, normal)) return;
NANSCOPE_IMPL_UNROLL_ALL
    for (int j = 0; j < 4; ++j) visit32<L>(t, t32, w[j], normal, index + j);
  } else if constexpr (T == dtype::f16 || T == dtype::bf16) {
NANSCOPE_IMPL_UNROLL_ALL
    for (int g = 0; g < 2; ++g) {  // four lanes at a time, from two words
      unsigned b[4];
      if constexpr (T == dtype::bf16) {
        b[0] = w[2 * g] << 16;
        b[1] = w[2 * g] & 0xFFFF0000u;
        b[2] = w[2 * g + 1] << 16;
        b[3] = w[2 * g + 1] & 0xFFFF0000u;
      } else {
        dev_f16x2_to_f32_bits(w[2 * g], b[0], b[1]);
        dev_f16x2_to_f32_bits(w[2 * g + 1], b[2], b[3]);
      }
      if (visit4_tame<L>(t, t32, b, normal)) continue;
NANSCOPE_IMPL_UNROLL_ALL
      for (int j = 0; j < 4; ++j) {
        const unsigned h = (w[2 * g + (j >> 1)] >> ((j & 1) * 16)) & 0xFFFFu;
        visit32<L>(t, t32, T == dtype::f16 ? f16_to_f32_bits(h) : h << 16, normal, index + 4 * g + j);
      }
    }
  } else {
    // fp8 stays lane by lane: through visit4_tame (16 lanes decoded, four groups) e4m3fn at 64 Mi elements
    // took 1.5x longer on an H200; why is not measured yet (the unrolled body grows a lot)
NANSCOPE_IMPL_UNROLL_ALL
    for (int j = 0; j < 16; ++j) {
      const unsigned b = (w[j >> 2] >> ((j & 3) * 8)) & 0xFFu;
      visit32<L>(t, t32, T == dtype::f8_e4m3fn ? e4m3_to_f32_bits(b) : e5m2_to_f32_bits(b), normal, index + j);
    }
  }
}

/// Contiguous, 16-byte aligned body: `unroll` loads in flight per thread, grid-stride over the tensor's
/// blocks.
template <int L, dtype T>
NANSCOPE_IMPL_DEV_FN void run_body(thread_acc& t, thread_acc32& t32, const vec16* vec, unsigned long long nvec,
                         long long index0, unsigned long long g, unsigned long long stride) {
  constexpr int epv = 16 / elem_bytes<T>;
  const unsigned normal = normal32_of(T);
  for (unsigned long long base = g; base < nvec; base += stride * unroll) {
    vec16 v[unroll];
NANSCOPE_IMPL_UNROLL_ALL
    for (int u = 0; u < unroll; ++u) {
      const unsigned long long i = base + static_cast<unsigned long long>(u) * stride;
      if (i < nvec) v[u] = dev_ldg(vec + i);
    }
NANSCOPE_IMPL_UNROLL_ALL
    for (int u = 0; u < unroll; ++u) {
      const unsigned long long i = base + static_cast<unsigned long long>(u) * stride;
      if (i < nvec) visit_vec<L, T>(t, t32, v[u], normal, index0 + static_cast<long long>(i) * epv);
    }
  }
}

/// Per-thread state -> record (f32 keys and abs bits become f64 ones).
NANSCOPE_IMPL_DEV_FN device_result to_record(const thread_acc& t, const thread_acc32& t32, bool f64) {
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
    // the tame vectors' float extrema join the lanes' keys (their identities +-inf are the keys' identities)
    const int fmin_key = key32(dev_float_bits(t32.fmin)), fmax_key = key32(dev_float_bits(t32.fmax));
    const int kmin = fmin_key < t32.kmin ? fmin_key : t32.kmin, kmax = fmax_key > t32.kmax ? fmax_key : t32.kmax;
    r.kmin = key64(f32_to_f64_bits(static_cast<std::uint32_t>(key32(static_cast<std::uint32_t>(kmin)))));
    r.kmax = key64(f32_to_f64_bits(static_cast<std::uint32_t>(key32(static_cast<std::uint32_t>(kmax)))));
    r.amin_nz = f32_to_f64_bits(t32.amin);
  }
  for (int p = 0; p < moment_parts; ++p) {
    if (t.cnt[p] == 0) continue;
    const double n = static_cast<double>(t.cnt[p]);
    r.m[p].n = t.cnt[p];
    r.m[p].shift = t.k[p];
    r.m[p].mean = t.s1[p] / n;
    const double m2 = t.s2[p] - t.s1[p] * (t.s1[p] / n);
    r.m[p].m2 = m2 > 0.0 ? m2 : 0.0;
    recentre(r.m[p]);
  }
  return r;
}

/// The thread's share of a strided or element-misaligned tensor (element loads; dtype decided per element
/// within the 32-bit dtypes or f64: F64 says which, so a 32-bit tensor carries no f64 moment parts).
template <int L, bool F64>
NANSCOPE_IMPL_DEV_FN device_result element_record(const tensor_desc& d, const strided_layout* layout, bool aligned,
                                                  unsigned long long g, unsigned long long stride) {
  const dtype ty = F64 ? dtype::f64 : static_cast<dtype>(d.type);
  const int es = F64 ? 8 : esize_of(ty);
  const unsigned normal = normal32_of(ty);
  const auto* base = static_cast<const unsigned char*>(d.data);
  const unsigned long long n = d.n;
  thread_acc t;
  thread_acc32 t32;
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
  } else {  // misaligned elements: byte-exact element loads
    const auto ues = static_cast<unsigned long long>(es);
    for (unsigned long long i = g; i < n; i += stride)
      visit_bytes<L>(t, t32, base + i * ues, ty, es, normal, static_cast<long long>(i));
  }
  return to_record(t, t32, F64);
}

/// The thread's share of a contiguous, element-aligned tensor of dtype T: the head and tail elements (before
/// the first and after the last 16-byte word; the tensor's first threads take them), then the 16-byte words.
/// Its own state, of T's kind only: the registers of the kernel are those of its heaviest dtype, not the sum.
template <int L, dtype T>
NANSCOPE_IMPL_DEV_FN device_result contiguous_record(const tensor_desc& d, unsigned long long g,
                                                     unsigned long long stride) {
  constexpr int es = elem_bytes<T>;
  constexpr auto ues = static_cast<unsigned long long>(es);
  const unsigned normal = normal32_of(T);
  const auto* base = static_cast<const unsigned char*>(d.data);
  const unsigned long long n = d.n;
  const unsigned long long addr = reinterpret_cast<unsigned long long>(base);
  constexpr unsigned long long epv = 16u / ues;
  unsigned long long head = ((16u - addr % 16u) % 16u) / ues;
  if (head > n) head = n;
  const unsigned long long nvec = (n - head) / epv;
  const unsigned long long tail_begin = head + nvec * epv;
  thread_acc t;
  thread_acc32 t32;
  if (g < head) visit_at<L>(t, t32, base + g * ues, T, normal, static_cast<long long>(g));
  if (g < n - tail_begin) {
    const unsigned long long i = tail_begin + g;
    visit_at<L>(t, t32, base + i * ues, T, normal, static_cast<long long>(i));
  }
  run_body<L, T>(t, t32, reinterpret_cast<const vec16*>(base + head * ues), nvec, static_cast<long long>(head), g,
                 stride);
  return to_record(t, t32, T == dtype::f64);
}

/// The record of the thread's share of one tensor (thread g of `stride` threads on it), as the kernel's
/// block merge takes it. Each path keeps its own state (see contiguous_record).
template <int L>
NANSCOPE_IMPL_DEV_FN device_result thread_record(const tensor_desc& d, const strided_layout* layout,
                                                 unsigned long long g, unsigned long long stride) {
  const dtype ty = static_cast<dtype>(d.type);
  const unsigned long long addr = reinterpret_cast<unsigned long long>(d.data);
  const bool aligned = addr % static_cast<unsigned long long>(esize_of(ty)) == 0;  // then every element is
  if (layout != nullptr || !aligned) {
    return ty == dtype::f64 ? element_record<L, true>(d, layout, aligned, g, stride)
                            : element_record<L, false>(d, layout, aligned, g, stride);
  }
  switch (ty) {
    case dtype::f64: return contiguous_record<L, dtype::f64>(d, g, stride);
    case dtype::f32: return contiguous_record<L, dtype::f32>(d, g, stride);
    case dtype::f16: return contiguous_record<L, dtype::f16>(d, g, stride);
    case dtype::bf16: return contiguous_record<L, dtype::bf16>(d, g, stride);
    case dtype::f8_e4m3fn: return contiguous_record<L, dtype::f8_e4m3fn>(d, g, stride);
    default: return contiguous_record<L, dtype::f8_e5m2>(d, g, stride);
  }
}

struct device_props {
  int sm_count = 0;
  int blocks_per_sm = 0;
};

inline constexpr unsigned max_blocks_per_launch = 1u << 16;
/// Bytes a block should read at least before the grid grows (keeps short tensors to few blocks). 16 KiB was
/// measured on an H200 (2026-11-26): checks of 1000 tensors of 256 KiB in one launch took twice as long (more
/// blocks and records to merge), and the per-layer checks of the transformer block did not get faster.
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
/// (1, 2, 3: the host pass's detail::level, which the kernel takes as its template argument.)
inline int level_of(check_mode m, dtype t, std::uint64_t n) {
  if (!is_float(t) || n == 0 || m == check_mode::no_tensor || m == check_mode::shape) return 0;
  return static_cast<int>(::nanscope::detail::level_for(m));
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


}  // namespace detail

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
  // Every field from the record (a lower-level kernel leaves the rest at identities), then the host pass's
  // rule for which of them the mode reports.
  health_result acc;
  acc.nan = rec.nan;
  acc.pos_inf = rec.pinf;
  acc.neg_inf = rec.ninf;
  acc.negative = rec.neg;
  acc.zero = rec.zero;
  acc.subnormal = rec.sub;
  acc.positive = n - rec.nan - rec.pinf - rec.ninf - rec.neg - rec.zero;
  const std::uint64_t not_nan = n - rec.nan;
  if (not_nan != 0) {
    const std::uint64_t bmin = ::nanscope::detail::unkey64(rec.kmin), bmax = ::nanscope::detail::unkey64(rec.kmax);
    acc.min = ::nanscope::detail::bits_to_double(bmin);
    acc.max = ::nanscope::detail::bits_to_double(bmax);
    const std::uint64_t amn = bmin & detail::f64_abs_mask, amx = bmax & detail::f64_abs_mask;
    acc.abs_max = ::nanscope::detail::bits_to_double(amn > amx ? amn : amx);
  }
  const std::uint64_t nonzero = not_nan - rec.zero;
  acc.abs_min_nonzero = nonzero != 0 ? ::nanscope::detail::bits_to_double(rec.amin_nz) : ::nanscope::detail::qnan;
  acc.abs_min = rec.zero != 0 ? 0.0 : acc.abs_min_nonzero;
  // parts 1 and 2 are scaled by 2^-600 / 2^600: unscale in long double and merge in a fixed order
  std::uint64_t nn = 0;
  double mean = 0.0;
  long double m2 = 0.0L;
  const long double unscale_mean[detail::moment_parts] = {1.0L, 0x1p600L, 0x1p-600L};
  for (int p = 0; p < detail::moment_parts; ++p) {
    const detail::moments& m = rec.m[p];
    if (m.n == 0) continue;
    const long double um = (static_cast<long double>(m.shift) + static_cast<long double>(m.mean)) * unscale_mean[p];
    const long double um2 = static_cast<long double>(m.m2) * unscale_mean[p] * unscale_mean[p];
    if (nn == 0) {
      nn = m.n;
      mean = static_cast<double>(um);
      m2 = um2;
    } else {
      ::nanscope::detail::merge_moments(nn, mean, m2, m.n, static_cast<double>(um), um2);
    }
  }
  acc.mean = nn != 0 ? mean : ::nanscope::detail::qnan;
  acc.m2 = nn != 0 ? m2 : 0.0L;
  acc.std = ::nanscope::detail::std_from(nn, acc.m2);
  ::nanscope::detail::take_reported_fields(r, acc, ::nanscope::detail::level_for(mode));
  return r;
}


}  // namespace cuda
NANSCOPE_NAMESPACE_END

#undef NANSCOPE_IMPL_DEV
#undef NANSCOPE_IMPL_DEV_FN
#undef NANSCOPE_IMPL_HD
#undef NANSCOPE_IMPL_UNROLL_ALL

#endif  // NANSCOPE_DETAIL_CUDA_PASS_CUH
