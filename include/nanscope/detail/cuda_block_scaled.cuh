// nanscope — detail/cuda_block_scaled.cuh: the per-block arithmetic of the block-scaled what-if statistics on the
// CUDA backend (issue 33, item 4), shared by the kernel and the host emulation test; the host-side plan and finalize.
// Internal: include <nanscope/cuda.cuh>; the public names (nanscope::cuda::check_block_scaled) are documented in
// docs/cuda.md#block-scaled-what-if-statistics and docs/block-scaled.md#cuda.
//
// The kernel (bsc_kernel, detail/cuda_block_scaled_launch.cuh) gives one warp to each 32-element unit block of a
// row (a run along the blocked axis, the last dimension unless block_scaled_options::axis says otherwise; a row's
// last unit may be shorter), warps taking units grid-stride. Elements are read by their flat row-major index
// (contiguous tensors: coalesced along the last dimension; strided views through their layout; blocks along
// another axis step by the product of the dimensions after it). Lane i holds |x| of element i of the unit as f64 bits (exact, integer decoding: nothing flushes).
// A shuffle tree gives each lane the largest |x| of its half (lanes 0-15, 16-31: NVFP4's blocks of 16) and of the
// whole unit (MX's blocks of 32). Per requested format each lane computes the block's scale and thresholds from
// that amax with the host's rules (bsc_mx_thresholds: mx_scale_code's; bsc_nv_thresholds: nvfp4_block_scale's,
// by a binary search over exact midpoint products) and classifies its element by exact compares of bit patterns
// (clipped, flushed, subnormal); ballots and popcounts give the block's counts. One lane per block accounts it
// (lane f for MX format f; lanes 5 and 21 for NVFP4's two halves) into its own counters, the scale-exponent
// histogram (shared memory, integer atomics) and its worst-block key (loss << 48 | inverted block index: a max is
// "most loss, then lowest index"). At the end the counters fold into the records with integer atomics: exact and
// order-free, so the result does not depend on the schedule or the grid.
//
// The host finalizes (bsc_finalize): blocks and elements from the geometry, the counts and histogram as summed,
// mean/std/min/max of the exponents from the histogram with check_block_scaled's own loop, and the worst block
// recomputed from that block's elements (copied back) with the host pass's functions (bs_block_thresholds,
// bs_block_error). NVFP4 without block_scaled_options::nvfp4_tensor_amax takes a first launch for the tensor's
// largest finite |x| (nvfp4_tensor_scale on the host), then a second launch for NVFP4.
//
// Contiguous tensors blocked along a last dimension that is a multiple of 32 take the packed kernel instead
// (bsc_quad_kernel: a warp per four unit blocks, one vector load a lane; "The packed path" below), with the same
// accounting (bsc_account) and records.
//
// This header also compiles as plain C++ under NANSCOPE_IMPL_CUDA_EMULATION:
// tests/unit/cuda_block_scaled_emulation_test.cpp plays the kernel's warps on the CPU with these functions.
#ifndef NANSCOPE_DETAIL_CUDA_BLOCK_SCALED_CUH
#define NANSCOPE_DETAIL_CUDA_BLOCK_SCALED_CUH

#include "../block_scaled.hpp"
#include "../block_scaled_formats.hpp"
#include "../block_scaled_result.hpp"
#include "cuda_pass.cuh"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define NANSCOPE_IMPL_BSC_DEV __device__ __forceinline__
#else
#define NANSCOPE_IMPL_BSC_DEV inline
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace cuda {
namespace detail {

inline constexpr int bsc_nformats = block_format_count;
inline constexpr int bsc_nv = static_cast<int>(block_format::nvfp4);
inline constexpr unsigned long long bsc_inf = 0x7FF0000000000000ull;
inline constexpr unsigned long long bsc_frac = 0x000FFFFFFFFFFFFFull;
inline constexpr unsigned long long bsc_index_mask = (1ull << 48) - 1u;  // worst key: loss << 48 | ~index

/// One MX element format as the kernel needs it: f64 bits of the thresholds at scale 1 (clip > max, flush <=
/// min_subnormal / 2, subnormal < min_normal - min_subnormal / 2: the host pass's) and the scale rules' constants.
struct bsc_element {
  unsigned long long clip1, flush1, sub1;
  unsigned long long max_sig;  // max_finite's significand in [2^52, 2^53) (round_up)
  int emax, mantissa_bits;
};

/// Per format, what the kernel sums (all-zero is the identity: cleared before the launch).
struct bsc_record {
  unsigned long long zero_blocks, nan_blocks, zero_scale_blocks, lossy_blocks, clipped, flushed, subnormal;
  unsigned long long worst_key;  // (loss << 48) | (2^48 - 1 - block index); 0: no block loses anything
  unsigned long long hist[256];  // by scale exponent + 127
};
struct bsc_records {
  bsc_record f[bsc_nformats];  // by block_format
  unsigned long long finite_amax;  // f64 bits of the largest finite |x| (launches with want_amax)
};

/// Launch parameters (by value).
struct bsc_params {
  const void* data;
  unsigned long long n;              // elements
  unsigned long long L;              // row length (the extent of the blocked axis)
  unsigned long long units;          // unit blocks of 32: rows * units_per_row
  unsigned long long units_per_row;  // ceil(L / 32)
  unsigned long long nb16;           // NVFP4 blocks per row: ceil(L / 16)
  unsigned long long inner;          // blocks along another axis: the product of the dimensions after it (else 1)
  strided_layout layout;             // rank 0: contiguous; else the view's shape and strides (elements)
  int type;                          // dtype
  int es;                            // element bytes
  int aligned;                       // data % es == 0: element loads (else byte loads)
  int quad;                          // the packed path (bsc_quad_kernel): contiguous, blocks along the last
                                     // dimension, L % 32 == 0, data aligned to min(16, 4 es) bytes
  int rule;                          // scale_rule
  unsigned formats;                  // bit per block_format evaluated by this launch
  int want_amax;                     // fold the largest finite |x| into finite_amax
  bsc_element el[bsc_nformats];      // MX formats (NVFP4's entry unused)
  unsigned long long nv_q;           // NVFP4: f64 bits of 6 x the tensor scale (exact)
  unsigned long long nv_ts;          // NVFP4: f64 bits of the tensor scale
  int nv_ts_ok;                      // the tensor scale is finite and non-zero
  bsc_records* out;
  block_record* per_block[bsc_nformats];  // keep_blocks: device records by block index, or null
};

/// One lane's counters (lane f: MX format f; lanes 5 and 21: NVFP4).
struct bsc_lane_acc {
  unsigned long long zero_blocks = 0, nan_blocks = 0, zero_scale_blocks = 0, lossy_blocks = 0;
  unsigned long long clipped = 0, flushed = 0, subnormal = 0, worst_key = 0;
};

/// A block's scale and thresholds (f64 bits of |x|): clipped a > clip, flushed 0 < a <= flush, subnormal
/// flush < a < sub.
struct bsc_th {
  unsigned long long clip = 0, flush = 0, sub = 0;
  unsigned scale = 0;
  int exponent = 0;
  bool nan = false;
  bool zero_scale = false;
};

/// Where a unit block lies: processed row `row` = (o, i) (o: the dimensions before the blocked axis, i: those
/// after it; row-wise blocks: o = row, i = 0), columns [col, col + len) along the axis; element k of the unit is
/// the tensor's flat (row-major) element first + k x inner.
struct bsc_unit {
  unsigned long long row, col, o, i, first;
  int len;
};

#if defined(__CUDACC__)
NANSCOPE_IMPL_BSC_DEV int bsc_popc(unsigned x) { return __popc(x); }
NANSCOPE_IMPL_BSC_DEV long long bsc_double_bits(double d) { return __double_as_longlong(d); }
#else
inline int bsc_popc(unsigned x) { return __builtin_popcount(x); }
inline long long bsc_double_bits(double d) {
  long long b;
  std::memcpy(&b, &d, sizeof b);
  return b;
}
#endif

NANSCOPE_IMPL_BSC_DEV bsc_unit bsc_unit_of(const bsc_params& p, unsigned long long u) {
  bsc_unit g;
  g.row = u / p.units_per_row;
  g.col = (u - g.row * p.units_per_row) * 32u;
  const unsigned long long rest = p.L - g.col;
  g.len = rest < 32u ? static_cast<int>(rest) : 32;
  if (p.inner == 1) {
    g.o = g.row;
    g.i = 0;
  } else {
    g.o = g.row / p.inner;
    g.i = g.row - g.o * p.inner;
  }
  g.first = (g.o * p.L + g.col) * p.inner + g.i;
  return g;
}

/// The flat (row-major) index of element k of a unit.
NANSCOPE_IMPL_BSC_DEV unsigned long long bsc_elem(const bsc_params& p, const bsc_unit& g, unsigned k) {
  return g.first + static_cast<unsigned long long>(k) * p.inner;
}

/// The element offset of flat (row-major) element i of a strided view (its layout: rank > 0).
NANSCOPE_HOST_DEVICE inline long long bsc_offset(const strided_layout& l, unsigned long long i) {
  long long off = 0;
  for (int dim = l.rank - 1; dim >= 0; --dim) {
    const auto ext = static_cast<unsigned long long>(l.shape[dim]);
    off += static_cast<long long>(i % ext) * l.strides[dim];
    i /= ext;
  }
  return off;
}

/// The raw bits of flat element i (element loads when the data is aligned to its element size, else bytes).
NANSCOPE_IMPL_BSC_DEV unsigned long long bsc_raw(const bsc_params& p, unsigned long long i) {
  const long long off = p.layout.rank > 0 ? bsc_offset(p.layout, i) : static_cast<long long>(i);
  const unsigned char* q = static_cast<const unsigned char*>(p.data) + off * p.es;
  if (p.aligned != 0) {
    switch (p.es) {
      case 8: return static_cast<unsigned long long>(dev_ldg(reinterpret_cast<const long long*>(q)));
      case 4: return dev_ldg(reinterpret_cast<const unsigned*>(q));
      case 2: return dev_ldg(reinterpret_cast<const unsigned short*>(q));
      default: return dev_ldg(q);
    }
  }
  unsigned long long b = 0;
  for (int k = 0; k < p.es; ++k) b |= static_cast<unsigned long long>(dev_ldg(q + k)) << (8 * k);
  return b;
}

/// |x| of an element of dtype `type` with raw bits b, as f64 bits (exact; integer operations only).
NANSCOPE_IMPL_BSC_DEV unsigned long long bsc_abs_of_raw(int type, unsigned long long b) {
  switch (static_cast<dtype>(type)) {
    case dtype::f64: return b & 0x7FFFFFFFFFFFFFFFull;
    case dtype::f32: return ::nanscope::detail::f32_to_f64_bits(static_cast<unsigned>(b) & 0x7FFFFFFFu);
    case dtype::bf16: return ::nanscope::detail::f32_to_f64_bits((static_cast<unsigned>(b) << 16) & 0x7FFFFFFFu);
    case dtype::f16: return ::nanscope::detail::f32_to_f64_bits(f16_to_f32_bits(static_cast<unsigned>(b) & 0x7FFFu));
    case dtype::f8_e4m3fn: return ::nanscope::detail::f32_to_f64_bits(e4m3_to_f32_bits(static_cast<unsigned>(b) & 0x7Fu));
    default: return ::nanscope::detail::f32_to_f64_bits(e5m2_to_f32_bits(static_cast<unsigned>(b) & 0x7Fu));  // e5m2
  }
}

/// |x| of flat element i as f64 bits.
NANSCOPE_IMPL_BSC_DEV unsigned long long bsc_abs_bits(const bsc_params& p, unsigned long long i) {
  return bsc_abs_of_raw(p.type, bsc_raw(p, i));
}

/// The thresholds of an MX block of element format e whose largest |x| has f64 bits amax: mx_scale_code's rules
/// (floor(log2 A) - emax; even: +1 when A's significand rounds up to 2 at M bits; round_up: +1 when it exceeds
/// max's), clamped to E8M0, then the thresholds at scale 2^X: X added to the exponent field (every product is a
/// normal double: exact).
NANSCOPE_IMPL_BSC_DEV bsc_th bsc_mx_thresholds(const bsc_element& e, int rule, unsigned long long amax) {
  bsc_th t;
  if (amax >= bsc_inf) {
    t.nan = true;
    t.scale = 0xFF;
    return t;
  }
  int x = -127;  // zero, or a subnormal double (floor(log2) <= -1023: clamped)
  const auto field = static_cast<int>(amax >> 52);
  if (field != 0) {
    x = field - 1023 - e.emax;
    const unsigned long long sig = (amax & bsc_frac) | (1ull << 52);
    if (rule == static_cast<int>(scale_rule::even)) {
      if (sig >= (1ull << 53) - (1ull << (51 - e.mantissa_bits))) ++x;
    } else if (rule == static_cast<int>(scale_rule::round_up)) {
      if (sig > e.max_sig) ++x;
    }
    if (x < -127) x = -127;
    if (x > 127) {
      t.nan = true;
      t.scale = 0xFF;
      return t;
    }
  }
  t.scale = static_cast<unsigned>(x + 127);
  t.exponent = x;
  const unsigned long long shift = static_cast<unsigned long long>(static_cast<long long>(x)) << 52;
  t.clip = e.clip1 + shift;
  t.flush = e.flush1 + shift;
  t.sub = e.sub1 + shift;
  return t;
}

/// f64 bits of E4M3 code c (0..0x7E).
NANSCOPE_IMPL_BSC_DEV unsigned long long bsc_e4m3_bits(unsigned c) {
  const unsigned field = c >> 3, m = c & 7u;
  if (field != 0)
    return (static_cast<unsigned long long>(field - 7u + 1023u) << 52) | (static_cast<unsigned long long>(m) << 49);
  if (m == 0) return 0;
  const int msb = m >= 4u ? 2 : m >= 2u ? 1 : 0;  // value m * 2^-9
  return (static_cast<unsigned long long>(1023 - 9 + msb) << 52) |
         ((static_cast<unsigned long long>(m) << (52 - msb)) & bsc_frac);
}

/// Whether |x| (a, finite) rounds above the E4M3 midpoint between codes k and k + 1 (k < 0x7E), in units of q:
/// a > mid x q, or a tie that goes to the even code k + 1. mid x q is exact (5 by 26 significant bits).
NANSCOPE_IMPL_BSC_DEV bool bsc_above_mid(double a, double q, unsigned k) {
  const double mid = (dev_as_double(static_cast<long long>(bsc_e4m3_bits(k))) +
                      dev_as_double(static_cast<long long>(bsc_e4m3_bits(k + 1u)))) * 0.5;
  const double m = mid * q;
  return a > m || (a == m && ((k + 1u) & 1u) == 0);
}

/// The thresholds of an NVFP4 block whose largest |x| has f64 bits amax: nvfp4_block_scale's code (the E4M3
/// value nearest to amax / q, ties to even, saturated at 448: the number of midpoints amax rounds above, by a
/// binary search of exact compares), then 6 S, S / 4, 3 S / 4 with S = E4M3 value x tensor scale (exact).
NANSCOPE_IMPL_BSC_DEV bsc_th bsc_nv_thresholds(const bsc_params& p, unsigned long long amax) {
  bsc_th t;
  if (amax >= bsc_inf) {
    t.nan = true;
    t.scale = 0x7F;
    return t;
  }
  unsigned code = 0;
  if (amax != 0 && p.nv_ts_ok != 0) {
    const double a = dev_as_double(static_cast<long long>(amax));
    const double q = dev_as_double(static_cast<long long>(p.nv_q));
    unsigned lo = 0, hi = 0x7E;  // the count of midpoints below: in [0, 126]
    while (lo < hi) {
      const unsigned mid = (lo + hi) / 2u;
      if (bsc_above_mid(a, q, mid)) lo = mid + 1u;
      else hi = mid;
    }
    code = lo;
  }
  if (code == 0) {
    t.zero_scale = amax != 0;
    t.clip = bsc_inf;  // nothing clips; every finite non-zero element flushes
    t.flush = bsc_inf - 1u;
    t.sub = bsc_inf - 1u;
    return t;
  }
  t.scale = code;
  const unsigned long long sb = bsc_e4m3_bits(code);
  const double S = dev_as_double(static_cast<long long>(sb)) * dev_as_double(static_cast<long long>(p.nv_ts));
  t.exponent = static_cast<int>(sb >> 52) - 1023;  // E4M3 values are normal doubles
  t.clip = static_cast<unsigned long long>(bsc_double_bits(6.0 * S));
  t.flush = static_cast<unsigned long long>(bsc_double_bits(0.25 * S));
  t.sub = static_cast<unsigned long long>(bsc_double_bits(0.75 * S));
  return t;
}

/// The largest |x| a lane uses for format f: its half's for NVFP4, the unit's for MX.
NANSCOPE_IMPL_BSC_DEV unsigned long long bsc_lane_amax(int f, unsigned long long half, unsigned long long full) {
  return f == bsc_nv ? half : full;
}

/// A lane's thresholds for format f (the same for every lane of a block).
NANSCOPE_IMPL_BSC_DEV bsc_th bsc_lane_thresholds(const bsc_params& p, int f, unsigned long long amax) {
  return f == bsc_nv ? bsc_nv_thresholds(p, amax) : bsc_mx_thresholds(p.el[f], p.rule, amax);
}

/// A lane's element against its block's thresholds: bit 0 clipped, bit 1 flushed, bit 2 subnormal (none for a
/// NaN scale; a lane past the unit's end holds 0: none either).
NANSCOPE_IMPL_BSC_DEV unsigned bsc_classify(const bsc_th& t, unsigned long long a) {
  if (t.nan) return 0;
  unsigned c = a > t.clip ? 1u : 0u;
  c |= (a != 0 && a <= t.flush) ? 2u : 0u;
  c |= (a > t.flush && a < t.sub) ? 4u : 0u;
  return c;
}

/// The worst-block key of a block losing `loss` elements.
NANSCOPE_IMPL_BSC_DEV unsigned long long bsc_worst_key(unsigned loss, unsigned long long index) {
  return (static_cast<unsigned long long>(loss) << 48) | (bsc_index_mask - index);
}

/// What one lane accounts after the ballots (clip, flush, sub: the warp's masks of the three classes).
/// Returns the histogram bin (scale exponent + 127) the block adds to, or -1; sets `rec_at` to the block index
/// and `rec` to its record when this lane accounts a block (else rec_at is ~0).
struct bsc_lane_out {
  int bin = -1;
  unsigned long long rec_at = ~0ull;
  block_record rec;
};
/// A block of format f with index `index`, thresholds t and largest |x| amax, whose elements include nc clipped,
/// nf flushed and ns subnormal ones, into the accounting lane's counters.
NANSCOPE_IMPL_BSC_DEV bsc_lane_out bsc_account(unsigned long long index, const bsc_th& t, unsigned long long amax,
                                              unsigned nc, unsigned nf, unsigned ns, bsc_lane_acc& acc) {
  bsc_lane_out o;
  o.rec_at = index;
  o.rec.scale = static_cast<std::uint8_t>(t.scale);
  if (t.nan) {
    ++acc.nan_blocks;
    ++acc.lossy_blocks;
    return o;
  }
  if (amax == 0) {
    ++acc.zero_blocks;
    return o;
  }
  if (t.zero_scale) ++acc.zero_scale_blocks;
  else o.bin = t.exponent + 127;
  acc.clipped += nc;
  acc.flushed += nf;
  acc.subnormal += ns;
  const unsigned loss = nc + nf;
  if (loss != 0) {
    ++acc.lossy_blocks;
    const unsigned long long k = bsc_worst_key(loss, index);
    acc.worst_key = k > acc.worst_key ? k : acc.worst_key;
  }
  o.rec.clipped = static_cast<std::uint8_t>(nc);
  o.rec.flushed = static_cast<std::uint8_t>(nf);
  o.rec.subnormal = static_cast<std::uint8_t>(ns);
  return o;
}

NANSCOPE_IMPL_BSC_DEV bsc_lane_out bsc_lane_account(const bsc_params& p, int f, unsigned lane, const bsc_unit& g,
                                                   const bsc_th& t, unsigned long long amax, unsigned clip,
                                                   unsigned flush, unsigned sub, bsc_lane_acc& acc) {
  bsc_lane_out o;
  unsigned long long index;
  if (f != bsc_nv) {
    if (lane != static_cast<unsigned>(f)) return o;
    index = (g.o * p.units_per_row + g.col / 32u) * p.inner + g.i;
  } else {
    // lane 5: the first half (elements 0-15); lane 21: the second, when the unit has one
    if (lane == static_cast<unsigned>(bsc_nv)) {
      clip &= 0xFFFFu;
      flush &= 0xFFFFu;
      sub &= 0xFFFFu;
      index = (g.o * p.nb16 + g.col / 16u) * p.inner + g.i;
    } else if (lane == static_cast<unsigned>(bsc_nv) + 16u && g.len > 16) {
      clip >>= 16;
      flush >>= 16;
      sub >>= 16;
      index = (g.o * p.nb16 + g.col / 16u + 1u) * p.inner + g.i;
    } else {
      return o;
    }
  }
  return bsc_account(index, t, amax, static_cast<unsigned>(bsc_popc(clip)), static_cast<unsigned>(bsc_popc(flush)),
                     static_cast<unsigned>(bsc_popc(sub)), acc);
}

/// The format a lane's counters belong to (lanes 0-5 and 21), or -1.
NANSCOPE_IMPL_BSC_DEV int bsc_lane_format(unsigned lane) {
  if (lane < static_cast<unsigned>(bsc_nformats)) return static_cast<int>(lane);
  return lane == static_cast<unsigned>(bsc_nv) + 16u ? bsc_nv : -1;
}

// ---------------------------------------------------------------------------------------------------------
// The packed path (bsc_quad_kernel): a warp takes four consecutive unit blocks (a "quad", 128 elements), lane l
// loads elements 4l..4l+3 of it in one vector load, so lanes 8j..8j+7 hold unit j, lanes 8j..8j+3 its first half
// (NVFP4's first block of 16) and 8j+4..8j+7 the second. Each lane's |x| maximum goes through a shuffle tree of
// xor 1, 2 (the half) and 4 (the unit); per format each lane classifies its four elements, packs the three counts
// into one word (8 bits each: at most 32 a unit) and sums it by the same tree; one lane per unit and format
// accounts the block (bsc_account) as the one-unit-per-warp path does. Only where unit u covers flat elements
// [32u, 32u + 32): contiguous, blocks along the last dimension, L a multiple of 32; the vector loads need the
// data aligned to min(16, 4 x element size) bytes (bsc_params::quad).
// ---------------------------------------------------------------------------------------------------------

/// Whether a launch takes the packed path (see above).
inline bool bsc_quad_eligible(const void* data, int es, unsigned long long L, const strided_layout& layout,
                              unsigned long long inner) {
  const std::uintptr_t align = es >= 4 ? 16u : static_cast<std::uintptr_t>(4 * es);
  return layout.rank == 0 && inner == 1 && L % 32u == 0 && reinterpret_cast<std::uintptr_t>(data) % align == 0;
}

/// The accounting lane, within its group of 8, of format f's block: MX formats 0, 1, 2, 4, 5 (formats 0-4); NVFP4
/// 3 for the first half and 7 for the second.
NANSCOPE_IMPL_BSC_DEV unsigned bsc_quad_account_lane(int f, unsigned half) {
  if (f == bsc_nv) return half != 0 ? 7u : 3u;
  return f < 3 ? static_cast<unsigned>(f) : static_cast<unsigned>(f) + 1u;
}

/// The format a lane's counters belong to on the packed path, or -1 (lane 6 of each group).
NANSCOPE_IMPL_BSC_DEV int bsc_quad_lane_format(unsigned lane) {
  const unsigned l8 = lane & 7u;
  if (l8 == 3u || l8 == 7u) return bsc_nv;
  if (l8 == 6u) return -1;
  return l8 < 3u ? static_cast<int>(l8) : static_cast<int>(l8) - 1;
}

/// The raw bits of the four elements lane `lane` holds of quad q (vector loads; zero where the unit is past the
/// tensor's last one).
NANSCOPE_IMPL_BSC_DEV void bsc_quad_load(const bsc_params& p, unsigned long long q, unsigned lane,
                                        unsigned long long (&raw)[4]) {
  raw[0] = raw[1] = raw[2] = raw[3] = 0;
  if (q * 4u + (lane >> 3) >= p.units) return;
  const unsigned long long e0 = q * 128u + lane * 4u;  // the lane's first flat element
  switch (p.es) {
    case 8: {
      const auto* v = static_cast<const vec16*>(p.data) + e0 / 2u;
      const vec16 x = dev_ldg(v), y = dev_ldg(v + 1);
      raw[0] = (static_cast<unsigned long long>(x.y) << 32) | x.x;
      raw[1] = (static_cast<unsigned long long>(x.w) << 32) | x.z;
      raw[2] = (static_cast<unsigned long long>(y.y) << 32) | y.x;
      raw[3] = (static_cast<unsigned long long>(y.w) << 32) | y.z;
      return;
    }
    case 4: {
      const vec16 x = dev_ldg(static_cast<const vec16*>(p.data) + e0 / 4u);
      raw[0] = x.x;
      raw[1] = x.y;
      raw[2] = x.z;
      raw[3] = x.w;
      return;
    }
    case 2: {
      const unsigned long long x = dev_ldg(static_cast<const unsigned long long*>(p.data) + e0 / 4u);
      raw[0] = x & 0xFFFFu;
      raw[1] = (x >> 16) & 0xFFFFu;
      raw[2] = (x >> 32) & 0xFFFFu;
      raw[3] = x >> 48;
      return;
    }
    default: {
      const unsigned x = dev_ldg(static_cast<const unsigned*>(p.data) + e0 / 4u);
      raw[0] = x & 0xFFu;
      raw[1] = (x >> 8) & 0xFFu;
      raw[2] = (x >> 16) & 0xFFu;
      raw[3] = x >> 24;
      return;
    }
  }
}

/// A lane's four elements against its block's thresholds: the clipped, flushed and subnormal counts packed in
/// bits 0-7, 8-15 and 16-23.
NANSCOPE_IMPL_BSC_DEV unsigned bsc_quad_classify(const bsc_th& t, const unsigned long long (&a)[4]) {
  unsigned w = 0;
  for (int k = 0; k < 4; ++k) {
    const unsigned c = bsc_classify(t, a[k]);
    w += (c & 1u) | ((c & 2u) << 7) | ((c & 4u) << 14);
  }
  return w;
}

/// The block index the accounting lane `lane` of quad q accounts for format f (MX: the unit; NVFP4: its half).
NANSCOPE_IMPL_BSC_DEV unsigned long long bsc_quad_index(int f, unsigned long long q, unsigned lane) {
  const unsigned long long u = q * 4u + (lane >> 3);
  return f == bsc_nv ? u * 2u + ((lane >> 2) & 1u) : u;
}

// ---------------------------------------------------------------------------------------------------------
// Host side: the plan and the finalisation
// ---------------------------------------------------------------------------------------------------------

/// A check's geometry and options, validated as check_block_scaled does, plus what the device path refuses.
struct bsc_plan {
  dtype type = dtype::f32;
  scale_rule rule = scale_rule::ocp;
  block_format_set formats;
  bool keep_blocks = false;
  int axis = 0;
  unsigned long long n = 0, L = 1, rows = 0;
  unsigned long long inner = 1;  // blocks along another axis than the last: the dimensions after it
  strided_layout layout{};       // rank 0: contiguous
  bool nv = false, nv_given = false;
  double nv_amax = -1.0;
};

inline bsc_plan bsc_make_plan(const tensor_view& v, const block_scaled_options& opt) {
  validate(v);
  const check_options& copt = opt.check;
  if (copt.mode != check_mode::full_health && copt.mode != check_mode::stats)
    ::nanscope::detail::fail(v.name, std::string("check_block_scaled needs mode FULL_HEALTH or STATS, got ") +
                                         name(copt.mode));
  if (!is_float(v.type))
    ::nanscope::detail::fail(v.name, std::string("check_block_scaled: dtype ") + name(v.type) + " is not a floating type");
  if (opt.formats.empty()) ::nanscope::detail::fail(v.name, "check_block_scaled: no block format requested");
  const int rank = v.rank;
  const int axis = opt.axis < 0 ? opt.axis + (rank > 0 ? rank : 1) : opt.axis;
  if (axis < 0 || axis >= (rank > 0 ? rank : 1))
    ::nanscope::detail::fail(v.name, "check_block_scaled: axis " + std::to_string(opt.axis) +
                                         " is out of range for rank " + std::to_string(rank));
  bsc_plan pl;
  pl.type = v.type;
  pl.rule = opt.rule;
  pl.formats = opt.formats;
  pl.keep_blocks = opt.keep_blocks;
  pl.axis = axis;
  pl.n = v.numel();
  pl.L = rank > 0 ? static_cast<unsigned long long>(v.shape[axis]) : 1u;
  if (pl.L == 0) pl.L = 1;
  pl.rows = pl.n / pl.L;
  for (int d = axis + 1; d < rank; ++d) pl.inner *= static_cast<unsigned long long>(v.shape[d]);
  if (pl.inner == 0) pl.inner = 1;  // (an empty tensor: no rows)
  if (!v.is_contiguous()) {
    pl.layout.rank = v.rank;
    for (int d = 0; d < v.rank; ++d) {
      pl.layout.shape[d] = v.shape[d];
      pl.layout.strides[d] = v.strides[d];
    }
  }
  pl.nv = opt.formats.has(block_format::nvfp4);
  pl.nv_given = pl.nv && opt.nvfp4_tensor_amax >= 0.0;
  pl.nv_amax = opt.nvfp4_tensor_amax;
  if (pl.rows * ((pl.L + 15u) / 16u) > bsc_index_mask)
    ::nanscope::detail::fail(v.name, "cuda::check_block_scaled: more than 2^48 blocks");
  return pl;
}

inline unsigned long long bsc_double_bits_host(double d) { return ::nanscope::detail::double_to_bits(d); }

/// Blocks of format f per row.
inline unsigned long long bsc_blocks_per_row(const bsc_plan& pl, block_format f) {
  return info(f).block_size == 32 ? (pl.L + 31u) / 32u : (pl.L + 15u) / 16u;
}

/// The parameters of one launch over `data` evaluating `formats` (a subset of the plan's), with NVFP4's tensor
/// scale `ts` (when NVFP4 is among them).
inline bsc_params bsc_make_params(const bsc_plan& pl, const void* data, unsigned formats, bool want_amax, float ts,
                                  bsc_records* out, block_record* const* per_block) {
  bsc_params p{};
  p.data = data;
  p.n = pl.n;
  p.L = pl.L;
  p.units_per_row = (pl.L + 31u) / 32u;
  p.units = pl.rows * p.units_per_row;
  p.nb16 = (pl.L + 15u) / 16u;
  p.inner = pl.inner;
  p.layout = pl.layout;
  p.type = static_cast<int>(pl.type);
  p.es = static_cast<int>(size_of(pl.type));
  p.aligned = reinterpret_cast<std::uintptr_t>(data) % size_of(pl.type) == 0 ? 1 : 0;
  p.quad = bsc_quad_eligible(data, p.es, pl.L, pl.layout, pl.inner) ? 1 : 0;
  p.rule = static_cast<int>(pl.rule);
  p.formats = formats;
  p.want_amax = want_amax ? 1 : 0;
  for (int k = 0; k < bsc_nformats; ++k) {
    const element_format_info& fi = info(info(static_cast<block_format>(k)).element);
    bsc_element& e = p.el[k];
    e.clip1 = bsc_double_bits_host(fi.max_finite);
    e.flush1 = bsc_double_bits_host(fi.min_subnormal * 0.5);
    e.sub1 = bsc_double_bits_host(fi.min_normal - fi.min_subnormal * 0.5);
    e.max_sig = (bsc_double_bits_host(fi.max_finite) & bsc_frac) | (1ull << 52);
    e.emax = fi.emax;
    e.mantissa_bits = fi.mantissa_bits;
    p.per_block[k] = per_block != nullptr ? per_block[k] : nullptr;
  }
  const std::uint32_t tb = ::nanscope::detail::float_to_bits(ts) & 0x7FFFFFFFu;
  p.nv_ts_ok = tb != 0 && tb < 0x7F800000u ? 1 : 0;
  if (p.nv_ts_ok != 0) {
    p.nv_ts = ::nanscope::detail::f32_to_f64_bits(tb);
    p.nv_q = bsc_double_bits_host(6.0 * ::nanscope::detail::bits_to_double(p.nv_ts));  // exact
  }
  p.out = out;
  return p;
}

/// The launches of one check, in order: `launch(formats, want_amax, tensor_scale)` runs the kernel over the
/// tensor; `read_amax()` waits for the launches so far and returns the records' finite_amax. Without NVFP4, or
/// with its tensor amax given, one launch; otherwise the MX formats and the tensor's largest finite |x| first,
/// then NVFP4 at the tensor scale from it (check_block_scaled's two reads). Returns NVFP4's tensor scale.
template <class Launch, class ReadAmax>
float bsc_schedule(const bsc_plan& pl, Launch&& launch, ReadAmax&& read_amax) {
  const unsigned all = pl.formats.bits, nvbit = 1u << bsc_nv;
  if (!pl.nv) {
    if (pl.n != 0) launch(all, false, 0.0f);
    return 0.0f;
  }
  if (pl.nv_given) {
    const float ts = nvfp4_tensor_scale(pl.nv_amax);
    if (pl.n != 0) launch(all, false, ts);
    return ts;
  }
  if (pl.n == 0) return nvfp4_tensor_scale(0.0);
  launch(all & ~nvbit, true, 0.0f);
  const float ts = nvfp4_tensor_scale(::nanscope::detail::bits_to_double(read_amax()));
  launch(nvbit, false, ts);
  return ts;
}

/// The result of a check from the summed records. `fetch(first, step, len, buf)` copies the raw elements of flat
/// (row-major) indices first, first + step, ... (len of them) into buf (the worst blocks' elements); `per_block[k]`: the host copies of the block
/// records (keep_blocks), moved into the result. `nv_ts`: NVFP4's tensor scale used.
template <class Fetch>
block_scaled_result bsc_finalize(const bsc_plan& pl, const bsc_records& rec, float nv_ts, Fetch&& fetch,
                                 std::vector<block_record>* per_block) {
  block_scaled_result r;
  r.axis = pl.axis;
  for (int k = 0; k < bsc_nformats; ++k) {
    const auto id = static_cast<block_format>(k);
    if (!pl.formats.has(id)) continue;
    const bsc_record& c = rec.f[k];
    block_format_stats st;
    st.format = id;
    st.rule = pl.rule;
    st.block_size = info(id).block_size;
    const unsigned long long nb = bsc_blocks_per_row(pl, id);
    st.blocks = pl.rows * nb;
    st.elements = pl.n;
    st.zero_blocks = c.zero_blocks;
    st.nan_blocks = c.nan_blocks;
    st.zero_scale_blocks = c.zero_scale_blocks;
    st.lossy_blocks = c.lossy_blocks;
    st.clipped = c.clipped;
    st.flushed = c.flushed;
    st.subnormal = c.subnormal;
    if (id == block_format::nvfp4) st.tensor_scale = nv_ts;
    std::uint64_t n_exp = 0;
    for (int i = 0; i < 256; ++i) {
      st.scale_histogram[static_cast<std::size_t>(i)] = c.hist[i];
      n_exp += c.hist[i];
    }
    if (n_exp > 0) {  // check_block_scaled's own arithmetic, in bin order
      const double ne = static_cast<double>(n_exp);
      double sum = 0.0;
      for (int i = 0; i < 256; ++i) sum += static_cast<double>(c.hist[i]) * (i - 127);
      st.scale_exp_mean = sum / ne;
      if (n_exp > 1) {
        double m2 = 0.0;
        for (int i = 0; i < 256; ++i) {
          const double d = (i - 127) - st.scale_exp_mean;
          m2 += static_cast<double>(c.hist[i]) * d * d;
        }
        st.scale_exp_std = std::sqrt(m2 / (ne - 1.0));
      }
      int lo = 255, hi = 0;
      for (int i = 0; i < 256; ++i)
        if (c.hist[i] != 0) {
          lo = i < lo ? i : lo;
          hi = i;
        }
      st.scale_exp_min = lo - 127;
      st.scale_exp_max = hi - 127;
    }
    if (per_block != nullptr) st.per_block = std::move(per_block[k]);
    if (c.worst_key != 0) {
      // the worst block, recomputed from its elements with the host pass's functions
      // its output index is (o x nb + j) x inner + i (check_block_scaled's order)
      const unsigned long long index = bsc_index_mask - (c.worst_key & bsc_index_mask);
      const auto B = static_cast<unsigned long long>(st.block_size);
      const unsigned long long in = index % pl.inner, t = index / pl.inner, o = t / nb, col = (t - o * nb) * B;
      const int len = static_cast<int>(pl.L - col < B ? pl.L - col : B);
      const unsigned long long first = (o * pl.L + col) * pl.inner + in;
      alignas(8) unsigned char buf[32 * 8];
      fetch(first, pl.inner, len, buf);
      std::uint64_t a[32];
      std::uint64_t amax = 0;
      for (int i = 0; i < len; ++i) {
        a[i] = ::nanscope::detail::bs_abs_bits(buf, pl.type, static_cast<std::size_t>(i));
        amax = a[i] > amax ? a[i] : amax;
      }
      ::nanscope::detail::bs_setup s;
      s.type = pl.type;
      s.rule = pl.rule;
      ::nanscope::detail::bs_format f;
      f.id = id;
      f.el = info(id).element;
      f.mx = info(id).mx;
      ::nanscope::detail::bs_set_thresholds(f);
      f.tensor_scale = nv_ts;
      const ::nanscope::detail::bs_thresholds th = ::nanscope::detail::bs_block_thresholds(s, f, amax);
      block_worst& w = st.worst;
      w.index = static_cast<std::int64_t>(index);
      w.first_element = static_cast<std::int64_t>(first);
      w.elements = len;
      w.abs_max = ::nanscope::detail::bits_to_double(amax);
      w.scale = th.scale;
      for (int i = 0; i < len; ++i) {
        w.clipped += a[i] > th.clip ? 1u : 0u;
        w.flushed += (a[i] != 0 && a[i] <= th.flush) ? 1u : 0u;
      }
      ::nanscope::detail::bs_block_error(f, a, len, th, w.error_max_abs, w.error_rms);
    }
    r.formats.push_back(std::move(st));
  }
  return r;
}

}  // namespace detail
}  // namespace cuda
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_CUDA_BLOCK_SCALED_CUH
