// nanscope — check.hpp: the fused health pass on the host (its options and declaration: check_api.hpp).
//
//   nanscope::health_result r = nanscope::check(tensor);                        // STATS, default threads
//   auto r = nanscope::check(tensor, nanscope::check_options{}.with_mode(nanscope::check_mode::full_health));
//
// One read of memory per tensor; branch-free bit-pattern classification (identical answers under
// -ffast-math); AVX-512 / AVX2 kernels chosen at run time with a portable fallback; strided views; large
// tensors split across a persistent thread pool. Results are identical for any thread count: the tensor is
// cut into fixed segments whose results are merged left to right. No heap allocation per check.
#ifndef NANSCOPE_CHECK_HPP
#define NANSCOPE_CHECK_HPP

#include "check_api.hpp"
#include "config.hpp"
#include "dtype.hpp"
#include "health.hpp"
#include "traits.hpp"
#include "view.hpp"

#include "detail/kernel_common.hpp"
#include "detail/kernel_x86.hpp"
#include "detail/hash_x86.hpp"
#include "detail/histogram_kernel.hpp"
#include "detail/thread_pool.hpp"

#include <atomic>
#include <memory>
#include <cmath>
#include <cstdlib>
#include <cstring>

NANSCOPE_NAMESPACE_BEGIN

/// The best instruction set this CPU supports (ignores NANSCOPE_ISA).
inline isa detected_isa() {
#if NANSCOPE_HAS_X86_SIMD()
  static const isa best = detail::cpu_has_avx512() ? isa::avx512 : detail::cpu_has_avx2() ? isa::avx2 : isa::scalar;
  return best;
#else
  return isa::scalar;
#endif
}

/// The instruction set a check with `requested` actually uses.
inline isa resolve_isa(isa requested) {
  if (requested == isa::automatic) {
    static const isa from_env = [] {
      const char* e = std::getenv("NANSCOPE_ISA");
      if (e == nullptr) return isa::automatic;
      if (std::strcmp(e, "scalar") == 0) return isa::scalar;
      if (std::strcmp(e, "avx2") == 0) return isa::avx2;
      if (std::strcmp(e, "avx512") == 0) return isa::avx512;
      return isa::automatic;
    }();
    requested = from_env == isa::automatic ? detected_isa() : from_env;
  }
  const isa best = detected_isa();
  return static_cast<std::uint8_t>(requested) <= static_cast<std::uint8_t>(best) ? requested : best;
}

namespace detail {

// Fixed geometry: part of the result's definition (determinism), not a tuning knob per call.
inline constexpr std::size_t chunk_elems = std::size_t{1} << 13;    // shift K is refreshed per chunk
inline constexpr std::size_t segment_elems = std::size_t{1} << 17;  // unit of parallel work, merged in order
inline constexpr std::size_t wave_segments = 64;                    // segment results held at once

/// A computation that rides in the host pass beside the kernel (block_scaled.hpp): per segment, begin() makes its
/// state; chunk() sees each chunk's raw elements in logical order right after the kernel read them (still in
/// L1/L2), with the flat index of the first and the pass's instruction set; end() takes the state back (also when
/// the segment stops early). chunk() must not throw.
struct pass_hook {
  void* ctx = nullptr;
  void* (*begin)(void* ctx, std::uint64_t seg_begin, std::uint64_t seg_n) = nullptr;
  void (*chunk)(void* ctx, void* state, const void* raw, std::uint64_t first, std::size_t n, std::uint8_t isa_code) = nullptr;
  void (*end)(void* ctx, void* state) = nullptr;
  /// Optional (segments.hpp): after chunk(), the kernel's raw output for the same chunk (o.first_nf is an index
  /// within the chunk); chunk() may then be null. Must not throw.
  void (*kernel_chunk)(void* ctx, void* state, const chunk_out& o, const void* raw, std::uint64_t first, std::size_t n,
                       std::uint8_t isa_code) = nullptr;
};

struct pass_plan {
  tensor_view v;
  level lv;
  isa use;
  bool stop_at_first;  // curt_health
  bool contiguous;
  bool hash = false;       // fold each chunk into the segment's content hash
  bool hash_only = false;  // hash without running the health kernel
  hist_acc* hist = nullptr;  // also histogram each chunk's raw bits (histogram.hpp), right after the kernel
  const pass_hook* hook = nullptr;  // also hand each chunk's raw bits to the hook, right after the kernel
};

/// Kernel thresholds for a source dtype at a level (in f32 bits, or f64 bits for f64).
inline void set_thresholds(kernel_params& kp, dtype t, level lv) {
  const dtype_info& inf = info(t);
  if (t == dtype::f64) {
    kp.normal64 = double_to_bits(inf.min_normal);
    kp.huge64 = f64_huge_bits;
    std::uint64_t lo = 0, hi = f64_inf_bits - 1;
    if (lv >= level::counts) lo = kp.normal64;
    if (lv == level::stats) {
      lo = f64_tiny_bits;
      hi = f64_huge_bits;
    }
    kp.tame_lo64 = lo;
    kp.tame_span64 = hi - lo;
    return;
  }
  kp.normal32 = float_to_bits(static_cast<float>(inf.min_normal));
  kp.normal64 = double_to_bits(inf.min_normal);
  kp.huge64 = f64_huge_bits;
  std::uint32_t lo = 0, hi = f32_inf_bits - 1;
  if (lv >= level::counts) {
    lo = kp.normal32;
    hi = float_to_bits(static_cast<float>(inf.max_finite));
  }
  if (lv == level::stats) {
    if (lo < f32_sum_lo_bits) lo = f32_sum_lo_bits;
    if (hi > f32_sum_hi_bits) hi = f32_sum_hi_bits;
  }
  kp.tame_lo32 = lo;
  kp.tame_span32 = hi - lo;
  if (t == dtype::f16 || t == dtype::bf16) {
    // The same range in the source's own |x| bit patterns: decoding is monotonic on [0, inf], so the first
    // pattern at or above lo and the last at or below hi are found by bisection.
    const std::uint32_t top = t == dtype::f16 ? 0x7C00u : 0x7F80u;  // +inf
    auto f32_bits_of = [t](std::uint32_t h) {
      const auto h16 = static_cast<std::uint16_t>(h);
      return float_to_bits(static_cast<float>(load_as_double(&h16, t, 0)));
    };
    std::uint32_t a = 0, b = top + 1;  // first h with bits(h) >= lo
    while (a < b) {
      const std::uint32_t m = (a + b) / 2;
      if (f32_bits_of(m) >= lo) b = m;
      else a = m + 1;
    }
    kp.tame_lo16 = static_cast<std::uint16_t>(a);
    a = 0;
    b = top + 1;  // first h with bits(h) > hi; the last tame pattern is the one before it
    while (a < b) {
      const std::uint32_t m = (a + b) / 2;
      if (f32_bits_of(m) > hi) b = m;
      else a = m + 1;
    }
    kp.tame_hi16 = static_cast<std::uint16_t>(a - 1);
  }
}

/// Runs the chosen kernel on n contiguous elements of dtype t (fp8 already decoded to f32 when SIMD). With
/// `hb` (a block's hash sums; only when p holds the raw f32/f64 elements), the AVX2/AVX-512 f32 and the
/// AVX-512 f64 kernels hash their main loop's elements as they go; returns how many leading elements were
/// hashed (0: none, the caller hashes the chunk).
inline std::size_t run_kernel(const void* p, dtype t, std::size_t n, level lv, isa use, const kernel_params& kp,
                              chunk_out& o, block_sums* hb = nullptr) {
#if NANSCOPE_HAS_X86_SIMD()
  if (hb != nullptr && use == isa::avx512 && (t == dtype::f32 || t == dtype::f64)) {
    hash_lanes512 h;
    auto go = [&](auto lvl_tag) {
      constexpr level L = decltype(lvl_tag)::value;
      if (t == dtype::f64) avx512_f64_kernel<L>(p, n, kp, o, &h);
      else avx512_f32_kernel<L, load512_f32>(p, n, kp, o, &h);
    };
    if (lv == level::stats) go(std::integral_constant<level, level::stats>{});
    else if (lv == level::counts) go(std::integral_constant<level, level::counts>{});
    else go(std::integral_constant<level, level::nonfinite>{});
    const std::size_t v = t == dtype::f64 ? 8 : 256, done = n / v * v;
    h.finish(size_of(t), t == dtype::f64 ? done / 8 : done / 16, *hb);
    return done;
  }
  if (hb != nullptr && use == isa::avx2 && t == dtype::f32) {
    hash_lanes256 h;
    if (lv == level::stats) avx2_f32_kernel<level::stats, load256_f32>(p, n, kp, o, &h);
    else if (lv == level::counts) avx2_f32_kernel<level::counts, load256_f32>(p, n, kp, o, &h);
    else avx2_f32_kernel<level::nonfinite, load256_f32>(p, n, kp, o, &h);
    const std::size_t done = n / 128 * 128;
    h.finish(done / 8, *hb);
    return done;
  }
  if (use == isa::avx512) {
    auto go = [&](auto lvl_tag) {
      constexpr level L = decltype(lvl_tag)::value;
      switch (t) {
        case dtype::f64: avx512_f64_kernel<L>(p, n, kp, o); break;
        case dtype::f16: avx512_f32_kernel<L, load512_f16>(p, n, kp, o); break;
        case dtype::bf16: avx512_f32_kernel<L, load512_bf16>(p, n, kp, o); break;
        default: avx512_f32_kernel<L, load512_f32>(p, n, kp, o); break;  // f32 and decoded fp8
      }
    };
    if (lv == level::stats) go(std::integral_constant<level, level::stats>{});
    else if (lv == level::counts) go(std::integral_constant<level, level::counts>{});
    else go(std::integral_constant<level, level::nonfinite>{});
    return 0;
  }
  if (use == isa::avx2) {
    auto go = [&](auto lvl_tag) {
      constexpr level L = decltype(lvl_tag)::value;
      switch (t) {
        case dtype::f64: avx2_f64_kernel<L>(p, n, kp, o); break;
        case dtype::f16: avx2_f32_kernel<L, load256_f16>(p, n, kp, o); break;
        case dtype::bf16: avx2_f32_kernel<L, load256_bf16>(p, n, kp, o); break;
        default: avx2_f32_kernel<L, load256_f32>(p, n, kp, o); break;
      }
    };
    if (lv == level::stats) go(std::integral_constant<level, level::stats>{});
    else if (lv == level::counts) go(std::integral_constant<level, level::counts>{});
    else go(std::integral_constant<level, level::nonfinite>{});
    return 0;
  }
#else
  (void)use;
  (void)hb;
#endif
  if (lv == level::stats) scalar_kernel<level::stats>(p, t, n, kp, o);
  else if (lv == level::counts) scalar_kernel<level::counts>(p, t, n, kp, o);
  else scalar_kernel<level::nonfinite>(p, t, n, kp, o);
  return 0;
}

/// Copies logical elements [begin, begin + n) of a strided view into buf (row-major order).
inline void gather(const tensor_view& v, std::uint64_t begin, std::size_t n, unsigned char* buf) {
  const std::size_t es = size_of(v.type);
  const auto* base = static_cast<const unsigned char*>(v.data);
  const int r = v.rank;
  std::int64_t idx[max_rank] = {};
  std::uint64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    const auto ext = static_cast<std::uint64_t>(v.shape[d]);
    idx[d] = static_cast<std::int64_t>(rem % ext);
    rem /= ext;
  }
  std::size_t out = 0;
  const std::int64_t inner_ext = r > 0 ? v.shape[r - 1] : 1;
  const std::int64_t inner_stride = r > 0 ? v.strides[r - 1] : 1;
  while (out < n) {
    std::int64_t off = 0;
    for (int d = 0; d < r - 1; ++d) off += idx[d] * v.strides[d];
    const std::int64_t start = r > 0 ? idx[r - 1] : 0;
    std::size_t run = static_cast<std::size_t>(inner_ext - start);
    if (run > n - out) run = n - out;
    if (inner_stride == 1) {
      std::memcpy(buf + out * es, base + static_cast<std::size_t>(off + start) * es, run * es);
    } else {
      const unsigned char* src = base + static_cast<std::size_t>(off + start * inner_stride) * es;
      for (std::size_t j = 0; j < run; ++j) std::memcpy(buf + (out + j) * es, src + j * static_cast<std::size_t>(inner_stride) * es, es);
    }
    out += run;
    if (r == 0) break;
    idx[r - 1] += static_cast<std::int64_t>(run);
    for (int d = r - 1; d > 0 && idx[d] >= v.shape[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

/// Median of up to 5 values (insertion sort; n >= 1).
inline double median_of(double* v, int n) {
  for (int i = 1; i < n; ++i)
    for (int j = i; j > 0 && order_key(v[j]) < order_key(v[j - 1]); --j) {
      const double t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return v[n / 2];
}

/// Picks the shifts of a chunk from its own data: the median of five finite samples spread over the chunk
/// (robust to an outlier such as a first element of 1e8 among ones), else its first finite value. A shift
/// close to the data keeps the variance accurate when mean >> std; depending only on the chunk's data keeps
/// results independent of the thread count and of the view's layout.
/// The five sample positions of a chunk of n elements (see choose_shift).
inline void shift_positions(std::size_t n, std::size_t (&pos)[5]) {
  pos[0] = 0;
  pos[1] = n / 4;
  pos[2] = n / 2;
  pos[3] = (3 * n) / 4;
  pos[4] = n - 1;
}

/// Median of five total-order keys (health.hpp's order_key), branch-free: a 9-comparator sorting network whose
/// middle output is the median.
inline std::int64_t median5_keys(std::int64_t v0, std::int64_t v1, std::int64_t v2, std::int64_t v3, std::int64_t v4) {
  auto cx = [](std::int64_t& a, std::int64_t& b) {
    const std::int64_t lo = a < b ? a : b, hi = a < b ? b : a;
    a = lo;
    b = hi;
  };
  cx(v0, v1);
  cx(v3, v4);
  cx(v2, v4);
  cx(v2, v3);
  cx(v0, v3);
  cx(v0, v2);
  cx(v1, v4);
  cx(v1, v3);
  cx(v1, v2);
  return v2;
}

inline void choose_shift_general(const void* p, dtype t, std::size_t n, kernel_params& kp);

/// Picks the shifts of a chunk (see choose_shift_general). The common case, five finite samples of ordinary
/// magnitude (|x| <= 2^59, and 0 or >= 2^-500), gives all three shifts the same median, found without branches.
inline void choose_shift(const void* p, dtype t, std::size_t n, kernel_params& kp) {
  std::size_t pos[5];
  shift_positions(n, pos);
  std::int64_t key[5];
  bool ordinary = true;
  for (int j = 0; j < 5; ++j) {
    const std::uint64_t b = double_to_bits(load_as_double(p, t, pos[j]));
    const std::uint64_t a = b & f64_abs_mask;
    ordinary &= a <= 0x43A0000000000000ull /* 2^59 */ && (a == 0 || a >= f64_tiny_bits);
    key[j] = order_key(bits_to_double(b));
  }
  if (!ordinary) {
    choose_shift_general(p, t, n, kp);
    return;
  }
  const double m = bits_to_double(unkey64(median5_keys(key[0], key[1], key[2], key[3], key[4])));
  kp.k_ld = m;
  kp.k64 = m;
  kp.k32 = static_cast<float>(m);
}

inline void choose_shift_general(const void* p, dtype t, std::size_t n, kernel_params& kp) {
  std::size_t pos[5];
  shift_positions(n, pos);
  double all[5], dbl[5], f32[5];
  int na = 0, nd = 0, nf = 0;
  for (std::size_t i : pos) {
    const double x = load_as_double(p, t, i);
    if (!is_finite_bits(x)) continue;
    all[na++] = x;
    const std::uint64_t a = double_to_bits(x) & f64_abs_mask;
    if (a <= f64_huge_bits && (a == 0 || a >= f64_tiny_bits)) dbl[nd++] = x;
    if (a <= f64_huge_bits && a <= double_to_bits(576460752303423488.0 /* 2^59 */)) f32[nf++] = x;
  }
  if (na == 0) {
    for (std::size_t i = 0; i < n; ++i) {
      const double x = load_as_double(p, t, i);
      if (!is_finite_bits(x)) continue;
      all[na++] = x;
      const std::uint64_t a = double_to_bits(x) & f64_abs_mask;
      if (a <= f64_huge_bits && (a == 0 || a >= f64_tiny_bits)) dbl[nd++] = x;
      if (a <= double_to_bits(576460752303423488.0)) f32[nf++] = x;
      break;
    }
  }
  kp.k_ld = na != 0 ? median_of(all, na) : 0.0;
  kp.k64 = nd != 0 ? median_of(dbl, nd) : 0.0;
  kp.k32 = nf != 0 ? static_cast<float>(median_of(f32, nf)) : 0.0f;
}

/// Converts one chunk's raw kernel output into a health_result fragment and merges it into `seg`.
inline void fold_chunk(health_result& seg, const chunk_out& o, std::uint64_t n, std::uint64_t chunk_begin,
                       const kernel_params& kp, level lv) {
  health_result h;
  h.type = seg.type;
  h.mode = seg.mode;
  h.count = n;
  h.nan = o.nan;
  h.pos_inf = o.pinf;
  h.neg_inf = o.ninf;
  h.any_nonfinite = (o.nan + o.pinf + o.ninf) != 0;
  if (o.first_nf >= 0) h.first_nonfinite = static_cast<std::int64_t>(chunk_begin) + o.first_nf;
  const std::uint64_t not_nan = n - o.nan;
  if (lv >= level::counts) {
    h.negative = o.neg;
    h.zero = o.zero;
    h.subnormal = o.sub;
    h.positive = n - o.nan - o.pinf - o.ninf - o.neg - o.zero;
    if (lv == level::counts) h.abs_max = not_nan != 0 ? bits_to_double(o.amax) : qnan;
  }
  if (lv == level::stats) {
    if (not_nan != 0) {
      const std::uint64_t mn = unkey64(o.kmin), mx = unkey64(o.kmax);
      h.min = bits_to_double(mn);
      h.max = bits_to_double(mx);
      const std::uint64_t amn = mn & f64_abs_mask, amx = mx & f64_abs_mask;
      h.abs_max = bits_to_double(amn > amx ? amn : amx);
    }
    const std::uint64_t nonzero = not_nan - o.zero;
    h.abs_min_nonzero = nonzero != 0 ? bits_to_double(o.amin_nz) : qnan;
    h.abs_min = o.zero != 0 ? 0.0 : h.abs_min_nonzero;
    // combine the f32-summed, double-summed and long-double-summed parts
    const std::uint64_t fin = h.finite();
    const std::uint64_t n_fast = fin - o.n_slow - o.ld_n;
    // The f32-summed and double-summed parts are combined in double (their values are within f32 / 2^+-500
    // range); only the rare long-double part (and the merge into the segment) uses long double.
    std::uint64_t nn = 0;
    double mean = 0.0;
    double m2d = 0.0;
    auto add_part = [&](std::uint64_t np, double k, double s1, double s2) {
      if (np == 0) return;
      const double dn = static_cast<double>(np);
      const double pm = k + s1 / dn;
      double pm2 = s2 - s1 * (s1 / dn);
      if (pm2 < 0.0) pm2 = 0.0;
      if (nn == 0) {
        nn = np;
        mean = pm;
        m2d = pm2;
        return;
      }
      const double na = static_cast<double>(nn), nt = na + dn, delta = pm - mean;
      mean += delta * (dn / nt);
      m2d += pm2 + delta * delta * (na * dn / nt);
      nn += np;
    };
    add_part(n_fast, static_cast<double>(kp.k32), o.fast_s1, o.fast_s2);
    add_part(o.n_slow, kp.k64, o.slow_s1, o.slow_s2);
    long double m2 = m2d;
    if (o.ld_n != 0) {
      const long double dn = static_cast<long double>(o.ld_n);
      const long double pm = static_cast<long double>(kp.k_ld) + o.ld_s1 / dn;
      long double pm2 = o.ld_s2 - o.ld_s1 * (o.ld_s1 / dn);
      if (pm2 < 0.0L) pm2 = 0.0L;
      merge_moments(nn, mean, m2, o.ld_n, static_cast<double>(pm), pm2);
    }
    h.mean = nn != 0 ? mean : qnan;
    h.m2 = nn != 0 ? m2 : 0.0L;
    h.std = std_from(nn, h.m2);
  }
  merge(seg, h);
}

/// Computes one segment [begin, begin + n) of the plan into `seg` (which must be empty).
inline void run_segment(const pass_plan& plan, std::uint64_t begin, std::uint64_t n, health_result& seg) {
  const dtype t = plan.v.type;
  const std::size_t es = size_of(t);
  alignas(64) unsigned char gbuf[chunk_elems * 8];
  alignas(64) float dbuf[chunk_elems];
  kernel_params kp;
  set_thresholds(kp, t, plan.lv);
  const bool fp8 = t == dtype::f8_e4m3fn || t == dtype::f8_e5m2;
  static_assert(chunk_elems == hash_block, "a chunk is a hash block");
  std::uint64_t weight = 0;  // B^(index of the chunk's hash block)
  // The segment's exponent histogram (histogram.hpp), flushed at the end: on the heap and only in that mode, so
  // a plain check() keeps its stack and its no-allocation promise.
  std::unique_ptr<hist_local> hl;
  if (plan.hist != nullptr) {
    hl.reset(new hist_local);
    hl->reset(*plan.hist->setup);
  }
  void* hook_state = plan.hook != nullptr ? plan.hook->begin(plan.hook->ctx, begin, n) : nullptr;
  if (plan.hash) {
    seg.hash = hash_empty(es);
    weight = hash_pow(begin / hash_block);
  }
  for (std::uint64_t c = 0; c < n; c += chunk_elems) {
    const std::size_t m = static_cast<std::size_t>((n - c) < chunk_elems ? (n - c) : chunk_elems);
    const std::uint64_t cb = begin + c;
    const void* p;
    if (plan.contiguous) {
      p = static_cast<const unsigned char*>(plan.v.data) + static_cast<std::size_t>(cb) * es;
    } else {
      gather(plan.v, cb, m, gbuf);
      p = gbuf;
    }
    const void* raw = p;
#if NANSCOPE_HAS_X86_SIMD()
    // The next chunk's shift samples sit 8 KiB apart: fetching them now hides four memory latencies per chunk
    // (about 10% of a pass from DRAM) behind this chunk's kernel.
    if (plan.contiguous && plan.lv == level::stats && c + chunk_elems < n) {
      const std::uint64_t nb = c + chunk_elems, nm = (n - nb) < chunk_elems ? (n - nb) : chunk_elems;
      std::size_t pos[5];
      shift_positions(static_cast<std::size_t>(nm), pos);
      const auto* next = static_cast<const char*>(plan.v.data) + static_cast<std::size_t>(begin + nb) * es;
      for (int j = 1; j < 5; ++j) __builtin_prefetch(next + pos[j] * es, 0, 3);
    }
#endif
    block_sums bs;
    std::size_t hashed = 0;  // leading elements the kernel hashed on the way
    if (!plan.hash_only) {
      dtype kt = t;
      if (fp8 && plan.use != isa::scalar) {
        const float* table = fp8_table(t);
        const auto* b = static_cast<const unsigned char*>(p);
        for (std::size_t i = 0; i < m; ++i) dbuf[i] = table[b[i]];
        p = dbuf;
        kt = dtype::f32;
      }
      if (plan.lv == level::stats) choose_shift(p, kt, m, kp);
      chunk_out o;
      const hist_setup* hs = plan.hist != nullptr ? plan.hist->setup : nullptr;
      if (hs != nullptr && hs->fused != nullptr && !plan.hash && p == raw &&
          hs->fused(p, kt, m, plan.lv, static_cast<std::uint8_t>(plan.use), kp, o, *hs, *hl)) {
        fold_chunk(seg, o, m, cb, kp, plan.lv);  // kernel and bins in one pass over the chunk
      } else {
        hashed = run_kernel(p, kt, m, plan.lv, plan.use, kp, o, plan.hash && p == raw ? &bs : nullptr);
        fold_chunk(seg, o, m, cb, kp, plan.lv);
        if (hs != nullptr)  // the raw bits, still in L1/L2
          hist_chunk(raw, m, static_cast<std::uint8_t>(plan.use), *hs, *hl);
      }
      if (plan.hook != nullptr) {
        if (plan.hook->chunk != nullptr)
          plan.hook->chunk(plan.hook->ctx, hook_state, raw, cb, m, static_cast<std::uint8_t>(plan.use));
        if (plan.hook->kernel_chunk != nullptr)
          plan.hook->kernel_chunk(plan.hook->ctx, hook_state, o, raw, cb, m, static_cast<std::uint8_t>(plan.use));
      }
    }
    if (plan.hash) {  // the rest of the chunk's raw bits, right after the kernel read them (still in L1/L2)
      if (hashed < m) {
#if NANSCOPE_HAS_X86_SIMD()
        if (plan.use == isa::avx512) hash_block_avx512(raw, es, hashed, m, bs);
        else if (plan.use == isa::avx2) hash_block_avx2(raw, es, hashed, m, bs);
        else hash_block_scalar(raw, es, hashed, m, bs);
#else
        hash_block_scalar(raw, es, hashed, m, bs);
#endif
      }
      hash_add_block(seg.hash, bs, weight);
      weight = mulmod61(weight, hash_base);
    }
    if (plan.stop_at_first && seg.any_nonfinite) break;
  }
  if (plan.hook != nullptr) plan.hook->end(plan.hook->ctx, hook_state);
  if (plan.stop_at_first && seg.any_nonfinite) return;
  if (plan.hist != nullptr) hl->flush(*plan.hist->setup, *plan.hist);
}

inline health_result empty_like(const health_result& r) {
  health_result e;
  e.type = r.type;
  e.mode = r.mode;
  return e;
}

struct parallel_ctx {
  const pass_plan* plan;
  std::uint64_t n;
  std::uint64_t first_segment;
  health_result* slots;
  std::atomic<std::uint64_t>* stop_after;  // curt_health: segments after this one may be skipped
};

inline void parallel_task(void* vctx, std::size_t i) {
  auto* ctx = static_cast<parallel_ctx*>(vctx);
  const std::uint64_t s = ctx->first_segment + i;
  if (ctx->plan->stop_at_first && s > ctx->stop_after->load(std::memory_order_relaxed)) return;
  const std::uint64_t begin = s * segment_elems;
  const std::uint64_t m = (ctx->n - begin) < segment_elems ? (ctx->n - begin) : segment_elems;
  run_segment(*ctx->plan, begin, m, ctx->slots[i]);
  if (ctx->plan->stop_at_first && ctx->slots[i].any_nonfinite) {
    std::uint64_t cur = ctx->stop_after->load(std::memory_order_relaxed);
    while (s < cur && !ctx->stop_after->compare_exchange_weak(cur, s, std::memory_order_relaxed)) {
    }
  }
}

/// The kernel level a mode that reads data needs.
inline level level_for(check_mode mode) {
  return mode == check_mode::stats         ? level::stats
         : mode == check_mode::full_health ? level::counts
                                           : level::nonfinite;
}

/// Copies into `r` the fields of a pass's accumulated result `acc` (computed at level `lv`) that a mode of
/// that level reports, beyond count and the first non-finite index: the non-finite counts, then (counts) the
/// other counts and abs_max, then (stats) the extrema and moments. Shared by the host pass and the CUDA
/// backend's finalize(), so both report the same fields for a mode.
inline void take_reported_fields(health_result& r, const health_result& acc, level lv) {
  r.neg_inf = acc.neg_inf;
  r.pos_inf = acc.pos_inf;
  r.nan = acc.nan;
  if (lv >= level::counts) {
    r.negative = acc.negative;
    r.zero = acc.zero;
    r.positive = acc.positive;
    r.subnormal = acc.subnormal;
    r.abs_max = acc.abs_max;
  }
  if (lv == level::stats) {
    r.min = acc.min;
    r.max = acc.max;
    r.abs_min = acc.abs_min;
    r.abs_min_nonzero = acc.abs_min_nonzero;
    r.mean = acc.mean;
    r.std = acc.std;
    r.m2 = acc.m2;
  }
}

/// If the view is a permutation of a dense row-major layout (a transpose, Eigen's column-major storage),
/// writes that dense view to `out` and returns true. Broadcast (stride 0) and gapped views return false.
inline bool dense_permutation(const tensor_view& v, tensor_view& out) {
  int dims[max_rank];
  int m = 0;
  for (int i = 0; i < v.rank; ++i)
    if (v.shape[i] != 1) dims[m++] = i;
  // insertion sort by stride, largest first (stable)
  for (int i = 1; i < m; ++i) {
    const int d = dims[i];
    int j = i;
    while (j > 0 && v.strides[dims[j - 1]] < v.strides[d]) {
      dims[j] = dims[j - 1];
      --j;
    }
    dims[j] = d;
  }
  std::int64_t expect = 1;
  for (int k = m - 1; k >= 0; --k) {
    if (v.strides[dims[k]] != expect) return false;
    if (mul_overflow(expect, v.shape[dims[k]], expect)) return false;  // not for a valid view: gather instead
  }
  out = v;
  out.rank = 1;
  out.shape[0] = static_cast<std::int64_t>(v.numel());
  out.strides[0] = 1;
  return true;
}

/// Runs the plan over n elements in fixed segments (on the pool when large enough), merged in order.
inline health_result run_pass(const pass_plan& plan, std::uint64_t n, const check_options& opt, const health_result& r) {
  health_result acc = empty_like(r);
  if (plan.hash) acc.hash = hash_empty(size_of(plan.v.type));
  const std::uint64_t nseg = (n + segment_elems - 1) / segment_elems;
  unsigned threads = opt.threads == 0 ? default_thread_count() : opt.threads;
  const std::uint64_t threshold =
      opt.parallel_threshold == check_options::use_default_threshold ? default_parallel_threshold() : opt.parallel_threshold;
  if (n < threshold || nseg < 2) threads = 1;
  if (threads <= 1) {
    for (std::uint64_t s = 0; s < nseg; ++s) {
      health_result seg = empty_like(r);
      const std::uint64_t begin = s * segment_elems;
      run_segment(plan, begin, (n - begin) < segment_elems ? (n - begin) : segment_elems, seg);
      merge(acc, seg);
      hash_merge(acc.hash, seg.hash);
      if (plan.stop_at_first && acc.any_nonfinite) break;
    }
  } else {
    health_result slots[wave_segments];
    std::atomic<std::uint64_t> stop_after{~std::uint64_t{0}};
    for (std::uint64_t w = 0; w < nseg; w += wave_segments) {
      const std::uint64_t cnt = (nseg - w) < wave_segments ? (nseg - w) : wave_segments;
      for (std::uint64_t i = 0; i < cnt; ++i) slots[i] = empty_like(r);
      parallel_ctx ctx{&plan, n, w, slots, &stop_after};
      default_pool().run(static_cast<std::size_t>(cnt), threads - 1, &parallel_task, &ctx);
      bool stop = false;
      for (std::uint64_t i = 0; i < cnt; ++i) {
        merge(acc, slots[i]);
        hash_merge(acc.hash, slots[i].hash);
        if (plan.stop_at_first && acc.any_nonfinite) {
          stop = true;
          break;
        }
      }
      if (stop) break;
    }
  }
  return acc;
}

/// The content hash alone (a pass that runs no health kernel), for what the fused pass does not read in
/// full logical order: integer dtypes, modes that read nothing or stop early.
inline content_hash hash_pass(const tensor_view& v, const check_options& opt, const health_result& r) {
  const std::uint64_t n = v.numel();
  if (n == 0) return hash_empty(size_of(v.type));
  pass_plan plan{v, level::nonfinite, resolve_isa(opt.instruction_set), false, v.is_contiguous()};
  plan.hash = true;
  plan.hash_only = true;
  return run_pass(plan, n, opt, r).hash;
}

/// The host pass behind check(); `hist` (histogram.hpp) also histograms every element in the same pass (the
/// caller has validated that the mode reads every element and the dtype is floating).
inline health_result check_impl(const tensor_view& v, const check_options& opt, hist_acc* hist,
                                const pass_hook* hook = nullptr) {
  validate(v);
  if (v.space == memory_space::cuda_device)
    detail::fail(v.name, "data is in CUDA device memory: use nanscope::cuda::check from <nanscope/cuda.cuh>");
  const check_mode mode = opt.mode;
  if (static_cast<unsigned>(mode) < 1 || static_cast<unsigned>(mode) > 6)
    detail::fail(v.name, "unknown check mode " + std::to_string(static_cast<unsigned>(mode)));
  health_result r;
  r.type = v.type;
  r.mode = mode;
  r.rank = v.rank;
  for (int i = 0; i < v.rank; ++i) r.shape[i] = v.shape[i];
  const std::uint64_t n = v.numel();
  if (mode == check_mode::no_tensor || mode == check_mode::shape || !is_float(v.type) || n == 0) {
    r.count = n;
    if (mode == check_mode::stats) r.m2 = 0.0L;
    if (opt.hash) r.hash = detail::hash_pass(v, opt, r);
    return r;
  }
  detail::pass_plan plan{v, detail::level_for(mode), resolve_isa(opt.instruction_set),
                         mode == check_mode::curt_health, v.is_contiguous()};
  plan.hist = hist;
  plan.hook = hook;  // (the caller has validated that the mode reads every element and the dtype is floating)
  // The hash rides along in the pass unless the pass stops early (curt_health), which would leave it partial.
  plan.hash = opt.hash && !plan.stop_at_first;
  // A permuted dense layout is read in memory order at full speed. Counts and extrema do not depend on the
  // order; the first non-finite index does, so when one exists it is found again in logical order below.
  bool permuted = false;
  // The hash is defined in logical order, so a hashed pass keeps the logical (gathered) order.
  // A hook sees the chunks in logical order: no reordering then.
  if (!plan.contiguous && mode != check_mode::curt_health && !plan.hash && hook == nullptr &&
      detail::dense_permutation(v, plan.v)) {
    plan.contiguous = true;
    permuted = true;
  }
  const health_result acc = detail::run_pass(plan, n, opt, r);
  r.count = n;
  if (plan.hash) r.hash = acc.hash;
  else if (opt.hash) r.hash = detail::hash_pass(v, opt, r);
  r.any_nonfinite = acc.any_nonfinite;
  r.first_nonfinite = acc.first_nonfinite;
  if (permuted && acc.any_nonfinite) {
    check_options first_only = opt;
    first_only.mode = check_mode::curt_health;
    r.first_nonfinite = check_impl(v, first_only, nullptr).first_nonfinite;
  }
  if (mode == check_mode::curt_health) return r;  // counts of an early-stopped pass are partial: not reported
  detail::take_reported_fields(r, acc, plan.lv);
  return r;
}

}  // namespace detail

#if !NANSCOPE_IMPL_SEPARATE || defined(NANSCOPE_IMPLEMENTATION)
NANSCOPE_IMPL_ENTRY health_result(check)(const tensor_view& v, const check_options& opt) {
  return detail::check_impl(v, opt, nullptr);
}
#endif

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_CHECK_HPP
