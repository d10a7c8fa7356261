// nanscope — histogram.hpp: exponent histogram of |x| in the fused health pass, and exact low-precision margins from it.
//
//   nanscope::histogram_result h = nanscope::check_histogram(tensor);  // one pass: STATS + histogram
//   h.histogram.at(-3);        // elements with 2^-3 <= |x| < 2^-2
//   h.histogram.subnormal;     // non-zero values below the dtype's min normal
//   nanscope::margins_result m = h.margins();  // == nanscope::margins(tensor), with no second pass
//
// The histogram is of |x| (the sign is ignored: the magnitudes are what overflow and underflow depend on;
// the signed counts are in health_result). Bins: one per binary exponent of the source dtype's normal range
// (f64 -1022..1023, f32/bf16 -126..127, f16 -14..15, e4m3fn -6..8, e5m2 -14..15), plus zero, subnormal, inf
// and NaN. Counts are integers, identical for every instruction set and thread count.
#ifndef NANSCOPE_HISTOGRAM_HPP
#define NANSCOPE_HISTOGRAM_HPP

#include "check.hpp"
#include "config.hpp"
#include "detail/hist_fused_x86.hpp"
#include "dtype.hpp"
#include "health.hpp"
#include "margins.hpp"
#include "traits.hpp"
#include "view.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

NANSCOPE_NAMESPACE_BEGIN

/// Exponent histogram of |x| over one tensor.
struct exponent_histogram {
  /// Unbiased exponents e are stored at normal[e - lowest_exponent], for the widest dtype (f64).
  static constexpr int lowest_exponent = -1022;
  static constexpr int highest_exponent = 1023;

  dtype type = dtype::f32;
  std::uint64_t count = 0;      ///< elements
  std::uint64_t zero = 0;       ///< +0 and -0
  std::uint64_t subnormal = 0;  ///< non-zero, below the dtype's min normal
  std::uint64_t inf = 0;        ///< +inf and -inf
  std::uint64_t nan = 0;
  /// normal[e - lowest_exponent]: finite normal values with 2^e <= |x| < 2^(e+1).
  std::array<std::uint64_t, static_cast<std::size_t>(highest_exponent - lowest_exponent + 1)> normal{};

  /// Internal (margins): margin_ge[k] = #{|x| bits >= margin_bounds_for(type).b[k]}, exact.
  std::array<std::uint64_t, detail::mb_count> margin_ge{};

  /// Elements with 2^e <= |x| < 2^(e+1) (normal values only); 0 outside the dtype's range.
  std::uint64_t at(int e) const {
    if (e < lowest_exponent || e > highest_exponent) return 0;
    return normal[static_cast<std::size_t>(e - lowest_exponent)];
  }
  /// The dtype's smallest and largest normal exponent: the range of bins that can be non-zero.
  int min_exponent() const { return 1 - exponent_bias(); }
  int max_exponent() const {
    const int top = (1 << exponent_bits()) - 1;
    return (type == dtype::f8_e4m3fn ? top : top - 1) - exponent_bias();
  }
  int exponent_bits() const {
    switch (type) {
      case dtype::f64: return 11;
      case dtype::f32:
      case dtype::bf16: return 8;
      case dtype::f8_e4m3fn: return 4;
      default: return 5;  // f16, e5m2
    }
  }
  int exponent_bias() const { return (1 << (exponent_bits() - 1)) - 1; }
  /// Sum of every bin: equals count.
  std::uint64_t total() const {
    std::uint64_t t = zero + subnormal + inf + nan;
    for (std::uint64_t c : normal) t += c;
    return t;
  }
};

/// The health of a tensor and its exponent histogram, from one pass.
struct histogram_result {
  health_result health;
  exponent_histogram histogram;

  /// The low-precision margins (margins.hpp), exact and equal to nanscope::margins() of the same tensor,
  /// from the histogram and health.abs_max: no second pass.
  margins_result margins() const;
};

namespace detail {

inline int hist_mantissa_bits(dtype t) {
  switch (t) {
    case dtype::f64: return 52;
    case dtype::f32: return 23;
    case dtype::f16: return 10;
    case dtype::bf16: return 7;
    case dtype::f8_e4m3fn: return 3;
    default: return 2;  // e5m2
  }
}

static_assert(mb_count <= hist_max_bounds, "every margins boundary has a counter");

/// Histogram setup for a floating source dtype: the margins' boundaries, each with its field and whether it
/// is the field's first pattern (histogram_kernel.hpp). nonzero, inf and NaN come from the health counts.
inline hist_setup make_hist_setup(dtype t) {
  hist_setup s;
  s.type = t;
  s.shift = static_cast<unsigned>(hist_mantissa_bits(t));
  const margin_bounds& mb = margin_bounds_for(t);
  s.abs_mask = mb.abs_mask;
  s.nbins = static_cast<unsigned>((s.abs_mask >> s.shift) + 1);
  s.nbounds = mb_count;
  s.first_bound = mb_target0;
#if NANSCOPE_HAS_X86_SIMD()
  s.fused = &hist_fused_chunk;  // AVX-512 and AVX2, f32 / f16 / bf16: the bins are counted block by block in the kernel's pass (AVX2: each block read again from L1)
  // the AVX2 hook's 16-bit slot counters take at most 240 per 15 blocks of 128 elements: 65535 / 240 flushes
  static_assert(chunk_elems / (15 * 128) + 1 <= 65535 / 240, "a chunk overflows the AVX2 histogram's 16-bit counters");
#endif
  const std::uint64_t low = (std::uint64_t{1} << s.shift) - 1;
  for (int k = 0; k < mb_count; ++k) {
    s.b[k] = mb.b[k];
    s.field[k] = static_cast<unsigned>(mb.b[k] >> s.shift);
    s.dirty[k] = k >= s.first_bound && (mb.b[k] & low) != 0;
    if (s.dirty[k]) s.dirty_field[s.field[k]] = 1;
  }
  return s;
}

/// Setups per floating dtype, built once: with bins (check_histogram) or boundary counts only (check_margins).
inline const hist_setup& hist_setup_for(dtype t, bool bins = true) {
  static const std::array<hist_setup, 12> table = [] {
    std::array<hist_setup, 12> a{};
    for (int i = 0; i < 6; ++i) {
      a[static_cast<std::size_t>(i)] = make_hist_setup(static_cast<dtype>(i));
      a[static_cast<std::size_t>(i + 6)] = a[static_cast<std::size_t>(i)];
      a[static_cast<std::size_t>(i + 6)].bins = false;
    }
    return a;
  }();
  return table[static_cast<std::size_t>(t) + (bins ? 0u : 6u)];
}

/// Turns the pass's raw bins and boundary counts, and the zero / inf / NaN counts of its health result, into
/// the histogram.
inline void finish_histogram(const hist_setup& s, const hist_acc& acc, const health_result& hr, std::uint64_t n,
                             exponent_histogram& h) {
  std::uint64_t bins[hist_max_bins];
  for (unsigned e = 0; e < s.nbins; ++e) bins[e] = acc.bins[e].load(std::memory_order_relaxed);
  for (int k = 0; k < mb_count; ++k)
    h.margin_ge[static_cast<std::size_t>(k)] = acc.ge[k].load(std::memory_order_relaxed);
  h.count = n;
  h.zero = hr.zero;
  h.nan = hr.nan;
  h.inf = hr.neg_inf + hr.pos_inf;
  h.margin_ge[mb_nonzero] = n - h.zero;
  h.margin_ge[mb_inf] = h.inf + h.nan;  // e4m3fn: no inf, its NaN pattern is both boundaries
  h.margin_ge[mb_nan] = h.nan;
  if (!s.bins) return;  // check_margins: no exponent bins
  h.subnormal = bins[0] - h.zero;
  const int bias = h.exponent_bias();
  const unsigned top = s.nbins - 1;
  // The all-ones field holds only inf and NaN, except in e4m3fn (normals 256..448 beside its one NaN).
  const unsigned last_normal = h.type == dtype::f8_e4m3fn ? top : top - 1;
  for (unsigned e = 1; e <= last_normal; ++e) {
    const std::uint64_t c = e == top ? bins[e] - h.nan : bins[e];
    h.normal[static_cast<std::size_t>(static_cast<int>(e) - bias - exponent_histogram::lowest_exponent)] = c;
  }
}

}  // namespace detail

namespace detail {
inline histogram_result check_histogram_impl(const tensor_view& v, const check_options& opt, bool bins,
                                             const char* what) {
  validate(v);
  if (opt.mode != check_mode::full_health && opt.mode != check_mode::stats)
    fail(v.name, std::string(what) + " needs mode FULL_HEALTH or STATS, got " + name(opt.mode));
  if (!is_float(v.type))
    fail(v.name, std::string(what) + ": dtype " + name(v.type) +
                     " is not a floating type (f64, f32, f16, bf16, e4m3fn or e5m2)");
  const hist_setup& s = hist_setup_for(v.type, bins);
  auto acc = std::make_unique<hist_acc>();  // 16 KiB of atomic counters: on the heap
  acc->setup = &s;
  histogram_result r;
  r.health = check_impl(v, opt, acc.get());
  r.histogram.type = v.type;
  finish_histogram(s, *acc, r.health, v.numel(), r.histogram);
  return r;
}
}  // namespace detail

/// Checks one tensor view (check_options as check(): mode, threads, instruction set, hash) and histograms
/// the exponents of |x| in the same pass. The mode must read every element: full_health or stats (the
/// default); abs_max, which margins() needs, comes from the health result. Floating dtypes only. Throws
/// nanscope::error for an invalid view, another mode, a non-floating dtype or device memory.
inline histogram_result check_histogram(const tensor_view& v, const check_options& opt = {}) {
  return detail::check_histogram_impl(v, opt, true, "check_histogram");
}

/// The health of a tensor and its low-precision margins (margins.hpp) from one pass: what check() and
/// margins() give, without the second read of the tensor (the margins' boundary counts ride in the fused
/// pass; no exponent bins, so it costs less than check_histogram). Same requirements as check_histogram.
inline std::pair<health_result, margins_result> check_margins(const tensor_view& v, const check_options& opt = {}) {
  const histogram_result r = detail::check_histogram_impl(v, opt, false, "check_margins");
  return {r.health, r.margins()};
}

/// Histogram of any supported tensor (see traits.hpp).
template <class T, class = std::enable_if_t<!std::is_same<std::decay_t<T>, tensor_view>::value>>
histogram_result check_histogram(const T& tensor, const check_options& opt = {}) {
  return check_histogram(to_view(tensor), opt);
}
/// Histogram of any supported tensor, naming it in error messages.
template <class T>
histogram_result check_histogram(const T& tensor, const char* name, const check_options& opt = {}) {
  return check_histogram(to_view(tensor, name), opt);
}

/// Margins from a histogram and the abs_max of the same tensor (health_result::abs_max of a FULL_HEALTH or
/// STATS pass): the same numbers as margins() of that tensor, shape aside (rank and shape are left empty).
inline margins_result margins_from_histogram(const exponent_histogram& h, double abs_max) {
  margins_result r;
  r.type = h.type;
  r.count = h.count;
  r.zero = h.zero;
  r.inf = h.inf;
  r.nan = h.nan;
  r.abs_max = h.count - h.nan != 0 ? abs_max : detail::margin_qnan();
  const auto& ge = h.margin_ge;
  for (std::size_t i = 0; i < 4; ++i) {
    format_margin& f = r.formats[i];
    f.target = margin_targets[i];
    f.max_finite = info(f.target).max_finite;
    f.headroom_bits = headroom_bits(r.abs_max, f.target);
    const auto z = static_cast<std::size_t>(detail::mb_target0 + 3 * static_cast<int>(i));
    f.underflow_to_zero = ge[detail::mb_nonzero] - ge[z];
    f.subnormal = ge[z] - ge[z + 1];
    f.overflow = ge[z + 2] - ge[detail::mb_inf];
  }
  return r;
}

inline margins_result histogram_result::margins() const {
  margins_result m = margins_from_histogram(histogram, health.abs_max);
  m.rank = health.rank;
  for (int i = 0; i < health.rank; ++i) m.shape[i] = health.shape[i];
  return m;
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_HISTOGRAM_HPP
