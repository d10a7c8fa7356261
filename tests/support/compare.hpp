// nanscope tests — support/compare.hpp: doctest assertions that compare a nanscope::health_result with the
// independent reference of reference.hpp, mode by mode, and bit-identity of two results.
#ifndef NANSCOPE_TESTS_SUPPORT_COMPARE_HPP
#define NANSCOPE_TESTS_SUPPORT_COMPARE_HPP

#include "reference.hpp"

#include <nanscope/check.hpp>
#include <nanscope/health.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

namespace nstest {

/// check() in one mode.
inline nanscope::health_result run_mode(const nanscope::tensor_view& v, nanscope::check_mode m) {
  return nanscope::check(v, nanscope::check_options{}.with_mode(m));
}

inline const nanscope::check_mode all_modes[] = {nanscope::check_mode::no_tensor,    nanscope::check_mode::shape,
                                                 nanscope::check_mode::curt_health,  nanscope::check_mode::concise_health,
                                                 nanscope::check_mode::full_health,  nanscope::check_mode::stats};
inline const nanscope::isa all_isas[] = {nanscope::isa::scalar, nanscope::isa::avx2, nanscope::isa::avx512};

/// A double printed with its bits, for failure messages.
inline std::string show(double x) {
  std::ostringstream os;
  os.precision(17);
  if (is_nan(x))
    os << "nan";
  else if (is_inf(x))
    os << (sign_bit(x) ? "-inf" : "inf");
  else
    os << x;
  os << " [0x" << std::hex << bits64(x) << "]";
  return os.str();
}
inline std::string show(long double x) {
  std::ostringstream os;
  os.precision(21);
  os << x;
  return os.str();
}

/// Exact equality for extrema: both NaN, or the same value (+0 and -0 are accepted for each other).
inline bool same_value(double lib, double ref) {
  if (is_nan(lib) || is_nan(ref)) return is_nan(lib) && is_nan(ref);
  if (is_zero(lib) && is_zero(ref)) return true;
  return bits64(lib) == bits64(ref);
}
/// Same double bit for bit (NaN payloads included).
inline bool same_bits(double a, double b) { return bits64(a) == bits64(b); }

/// Relative closeness: |lib - ref| <= tol * scale, with NaN/inf required to match exactly.
inline bool close_to(double lib, long double ref, long double tol, long double scale) {
  const double refd = static_cast<double>(ref);
  if (is_nan(refd) || !is_finite(refd) || !is_finite(lib)) return same_bits(lib, refd) || (is_nan(lib) && is_nan(refd));
  const long double diff = static_cast<long double>(lib) - ref;
  const long double ad = diff < 0 ? -diff : diff;
  return ad <= tol * scale;
}

/// Tolerance for mean/std/m2, as a relative error on the natural scale of each quantity:
///   mean: |Δ| <= tol * mean(|x|)        (the error bound of any summation is relative to Σ|x|)
///   std:  |Δ| <= tol * std              m2: |Δ| <= 2 * tol * m2
/// `tol` is chosen per kernel:
///  - double accumulation (f64 data, or the scalar ISA for every dtype): 1e-10. The library sums x - k with a
///    shift k taken from the data (a chunk's first finite value, then the running mean); when k is far from
///    the bulk of the data the cancellation in sum((x-k)^2) - (sum(x-k))^2/n costs a factor
///    1 + (mean-k)^2/var. Errors observed on the adversarial data sets reach 2e-12; 1e-10 leaves 50x margin
///    and still catches any formula error (a biased std is off by 1/(2n), a dropped element by ~1/n).
///  - kernels that sum short runs of (x - k) in f32 before moving them to double (AVX2/AVX-512 for f32, f16,
///    bf16 and fp8): 2e-6, a few f32 ulps of a 16-term partial sum (observed: <= 2e-8 on these data).
inline constexpr long double tol_double_accumulation = 1e-10L;
inline constexpr long double tol_f32_accumulation = 2e-6L;
inline long double moment_tol(nanscope::dtype t, nanscope::isa requested) {
  if (t == nanscope::dtype::f64) return tol_double_accumulation;
  if (nanscope::resolve_isa(requested) == nanscope::isa::scalar) return tol_double_accumulation;
  return tol_f32_accumulation;
}

/// Which fields a mode fills (health.hpp): the rest must stay at their defaults.
struct mode_fields {
  bool reads = false;     // any_nonfinite, first_nonfinite
  bool nonfinite = false; // neg_inf, pos_inf, nan
  bool counts = false;    // negative, zero, positive, subnormal, abs_max
  bool stats = false;     // min, max, abs_min, abs_min_nonzero, mean, std, m2
};
inline mode_fields fields_of(nanscope::check_mode m, bool float_type, bool nonempty) {
  mode_fields f;
  if (!float_type || !nonempty) return f;
  using nanscope::check_mode;
  f.reads = m != check_mode::no_tensor && m != check_mode::shape;
  f.nonfinite = m == check_mode::concise_health || m == check_mode::full_health || m == check_mode::stats;
  f.counts = m == check_mode::full_health || m == check_mode::stats;
  f.stats = m == check_mode::stats;
  return f;
}

/// Asserts that `r` (a check of `v` in `mode`) matches the reference `ref` of the same data: every field the
/// mode fills is exact (counts, extrema, first_nonfinite) or within `tol` (mean, std, m2); every other field
/// is at its default.
inline void expect_health(const nanscope::health_result& r, const ref_health& ref, const nanscope::tensor_view& v,
                          nanscope::check_mode mode, long double tol) {
  INFO("mode=", std::string(nanscope::name(mode)), " dtype=", std::string(nanscope::name(v.type)), " n=", ref.count);
  CHECK(r.type == v.type);
  CHECK(r.mode == mode);
  CHECK(r.rank == v.rank);
  for (int i = 0; i < nanscope::max_rank; ++i) {
    CAPTURE(i);
    CHECK(r.shape[i] == (i < v.rank ? v.shape[i] : 0));
  }
  CHECK(r.count == ref.count);
  const mode_fields f = fields_of(mode, ref_is_float(v.type), ref.count != 0);

  CHECK(r.any_nonfinite == (f.reads && ref.any_nonfinite));
  CHECK(r.first_nonfinite == (f.reads ? ref.first_nonfinite : -1));
  CHECK(r.has_nonfinite() == (f.reads && ref.any_nonfinite));

  CHECK(r.neg_inf == (f.nonfinite ? ref.neg_inf : 0));
  CHECK(r.pos_inf == (f.nonfinite ? ref.pos_inf : 0));
  CHECK(r.nan == (f.nonfinite ? ref.nan : 0));

  CHECK(r.negative == (f.counts ? ref.negative : 0));
  CHECK(r.zero == (f.counts ? ref.zero : 0));
  CHECK(r.positive == (f.counts ? ref.positive : 0));
  CHECK(r.subnormal == (f.counts ? ref.subnormal : 0));
  {
    INFO("abs_max lib=", show(r.abs_max), " ref=", show(ref.abs_max));
    CHECK(same_value(r.abs_max, f.counts ? ref.abs_max : qnan()));
  }

  const double d_nan = qnan();
  {
    INFO("min lib=", show(r.min), " ref=", show(ref.min));
    CHECK(same_value(r.min, f.stats ? ref.min : d_nan));
  }
  {
    INFO("max lib=", show(r.max), " ref=", show(ref.max));
    CHECK(same_value(r.max, f.stats ? ref.max : d_nan));
  }
  {
    INFO("abs_min lib=", show(r.abs_min), " ref=", show(ref.abs_min));
    CHECK(same_value(r.abs_min, f.stats ? ref.abs_min : d_nan));
    if (f.stats && !is_nan(r.abs_min)) CHECK_FALSE(sign_bit(r.abs_min));
  }
  {
    INFO("abs_min_nonzero lib=", show(r.abs_min_nonzero), " ref=", show(ref.abs_min_nonzero));
    CHECK(same_value(r.abs_min_nonzero, f.stats ? ref.abs_min_nonzero : d_nan));
  }
  if (f.counts && !is_nan(r.abs_max)) CHECK_FALSE(sign_bit(r.abs_max));

  if (!f.stats) {
    CHECK(is_nan(r.mean));
    CHECK(is_nan(r.std));
    CHECK(r.m2 == 0.0L);
    return;
  }
  {
    INFO("mean lib=", show(r.mean), " ref=", show(ref.mean), " n_finite=", ref.n_finite, " tol=", show(tol));
    if (ref.has_mean())
      CHECK(close_to(r.mean, ref.mean, tol, ref.mean_abs));
    else
      CHECK(is_nan(r.mean));
  }
  {
    INFO("std lib=", show(r.std), " ref=", show(ref.std_dev), " n_finite=", ref.n_finite, " tol=", show(tol));
    if (ref.has_std())
      CHECK(close_to(r.std, ref.std_dev, tol, ref.std_dev));
    else
      CHECK(is_nan(r.std));
  }
  {
    INFO("m2 lib=", show(static_cast<double>(r.m2)), " ref=", show(static_cast<double>(ref.m2)), " tol=", show(tol));
    if (ref.has_mean())
      CHECK(std::fabs(r.m2 - static_cast<long double>(ref.m2)) <= 2.0L * static_cast<long double>(tol) * std::fabs(static_cast<long double>(ref.m2)));
    else
      CHECK(r.m2 == 0.0L);
  }
}

/// Empty string when a and b are bit-identical in every field; else the name of the first field that differs.
inline std::string first_difference(const nanscope::health_result& a, const nanscope::health_result& b) {
  if (a.type != b.type) return "type";
  if (a.mode != b.mode) return "mode";
  if (a.rank != b.rank) return "rank";
  for (int i = 0; i < nanscope::max_rank; ++i)
    if (a.shape[i] != b.shape[i]) return "shape[" + std::to_string(i) + "]";
  if (a.count != b.count) return "count";
  if (a.negative != b.negative) return "negative";
  if (a.zero != b.zero) return "zero";
  if (a.positive != b.positive) return "positive";
  if (a.neg_inf != b.neg_inf) return "neg_inf";
  if (a.pos_inf != b.pos_inf) return "pos_inf";
  if (a.nan != b.nan) return "nan";
  if (a.subnormal != b.subnormal) return "subnormal";
  const double* da[] = {&a.min, &a.max, &a.abs_max, &a.abs_min, &a.abs_min_nonzero, &a.mean, &a.std};
  const double* db[] = {&b.min, &b.max, &b.abs_max, &b.abs_min, &b.abs_min_nonzero, &b.mean, &b.std};
  const char* names[] = {"min", "max", "abs_max", "abs_min", "abs_min_nonzero", "mean", "std"};
  for (int i = 0; i < 7; ++i)
    if (!same_bits(*da[i], *db[i])) return std::string(names[i]) + " " + show(*da[i]) + " vs " + show(*db[i]);
  // m2 is a long double (its padding bytes are unspecified): compare values; it is never NaN
  if (!(a.m2 == b.m2)) return "m2 " + show(static_cast<double>(a.m2)) + " vs " + show(static_cast<double>(b.m2));
  if (a.first_nonfinite != b.first_nonfinite) return "first_nonfinite";
  if (a.any_nonfinite != b.any_nonfinite) return "any_nonfinite";
  return "";
}

/// Two results of the same data from two implementations (the CUDA backend and the host pass): every count,
/// extremum and index the same bit for bit (+0 and -0 distinguished), mean and std within `tol` relative to
/// max(|mean|, std) (two summation orders), NaN where the other is NaN.
inline void expect_same_health(const nanscope::health_result& g, const nanscope::health_result& c, double tol) {
  CHECK(g.type == c.type);
  CHECK(g.mode == c.mode);
  CHECK(g.rank == c.rank);
  for (int i = 0; i < c.rank; ++i) CHECK(g.shape[i] == c.shape[i]);
  CHECK(g.count == c.count);
  CHECK(g.negative == c.negative);
  CHECK(g.zero == c.zero);
  CHECK(g.positive == c.positive);
  CHECK(g.neg_inf == c.neg_inf);
  CHECK(g.pos_inf == c.pos_inf);
  CHECK(g.nan == c.nan);
  CHECK(g.subnormal == c.subnormal);
  CHECK(g.first_nonfinite == c.first_nonfinite);
  CHECK(g.any_nonfinite == c.any_nonfinite);
  auto same = [](double a, double b) { return (is_nan(a) && is_nan(b)) || bits64(a) == bits64(b); };
  CHECK_MESSAGE(same(g.min, c.min), "min " << show(g.min) << " vs " << show(c.min));
  CHECK_MESSAGE(same(g.max, c.max), "max " << show(g.max) << " vs " << show(c.max));
  CHECK_MESSAGE(same(g.abs_max, c.abs_max), "abs_max " << show(g.abs_max) << " vs " << show(c.abs_max));
  CHECK_MESSAGE(same(g.abs_min, c.abs_min), "abs_min " << show(g.abs_min) << " vs " << show(c.abs_min));
  CHECK_MESSAGE(same(g.abs_min_nonzero, c.abs_min_nonzero),
                "abs_min_nonzero " << show(g.abs_min_nonzero) << " vs " << show(c.abs_min_nonzero));
  const double scale = std::fmax(is_nan(c.mean) ? 0.0 : std::fabs(c.mean), is_nan(c.std) ? 0.0 : c.std);
  auto close = [&](double a, double b) {
    if (is_nan(a) || is_nan(b)) return is_nan(a) && is_nan(b);
    if (!is_finite(a) || !is_finite(b)) return bits64(a) == bits64(b);
    return std::fabs(a - b) <= tol * scale + 1e-300;
  };
  CHECK_MESSAGE(close(g.mean, c.mean), "mean " << show(g.mean) << " vs " << show(c.mean));
  CHECK_MESSAGE(close(g.std, c.std), "std " << show(g.std) << " vs " << show(c.std));
}

/// Options for one configuration.
inline nanscope::check_options opts(nanscope::check_mode m, nanscope::isa i, unsigned threads) {
  return nanscope::check_options{}.with_mode(m).with_isa(i).with_threads(threads).with_parallel_threshold(0);
}

}  // namespace nstest

#endif  // NANSCOPE_TESTS_SUPPORT_COMPARE_HPP
