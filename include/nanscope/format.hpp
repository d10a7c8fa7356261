// nanscope — format.hpp: text for results. A one-line summary in the spirit of lovely-tensors, and an
// fmt::formatter for health_result ("{}" the summary line, "{:v}" every field). Needs fmt. `os << result` and
// summary()'s declaration: format_api.hpp.
#ifndef NANSCOPE_FORMAT_HPP
#define NANSCOPE_FORMAT_HPP

#include "config.hpp"
#include "dtype.hpp"
#include "format_api.hpp"
#include "health.hpp"

#include <fmt/format.h>

#include <cmath>
#include <iterator>
#include <string>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {
/// A number the way the summary prints it: 4 significant digits in [1e-3, 1e3), else 3-decimal scientific;
/// inf, -inf and nan spelled out.
template <class Out>
Out format_number(Out out, double x) {
  const std::uint64_t b = double_to_bits(x);
  const std::uint64_t a = b & 0x7FFFFFFFFFFFFFFFull;
  if (a > 0x7FF0000000000000ull) return fmt::format_to(out, "nan");
  if (a == 0x7FF0000000000000ull) return fmt::format_to(out, "{}", (b >> 63) ? "-inf" : "inf");
  if (a == 0) return fmt::format_to(out, "0");
  // Subnormal doubles are printed through long double: x87 arithmetic ignores the SSE flush-to-zero and
  // denormals-are-zero modes that -ffast-math turns on (which would print them as 0).
  if (a < 0x0010000000000000ull) {
    // mantissa and decimal exponent computed in x87 long double (immune to SSE FTZ/DAZ); fmt then only prints a
    // normal double in [1, 10) and an integer.
    const long double v = static_cast<long double>(a) * 4.9406564584124654417656879286822137236506e-324L;
    int e10 = static_cast<int>(std::floor(std::log10(v)));
    long double m = v / std::pow(10.0L, e10);
    if (m >= 9.9995L) {
      m /= 10.0L;
      ++e10;
    }
    if (b >> 63) *out++ = '-';
    return fmt::format_to(out, "{:.3f}e{}{:02d}", static_cast<double>(m), e10 < 0 ? '-' : '+', e10 < 0 ? -e10 : e10);
  }
  if (a >= 0x3F50624DD2F1A9FCull && a < 0x408F400000000000ull) return fmt::format_to(out, "{:.4g}", x);  // [1e-3, 1e3)
  return fmt::format_to(out, "{:.3e}", x);
}
}  // namespace detail

/// Writes the one-line summary, e.g. `f32[2,6] n=12 x∈[-3.541e+03, -3.369e-05] μ=-393.8 σ=1.180e+03 +inf=1 nan=2`.
/// Fields a mode did not compute are left out; non-finite counts appear only when non-zero.
template <class Out>
Out format_summary(Out out, const health_result& r) {
  out = fmt::format_to(out, "{}[", name(r.type));
  for (int i = 0; i < r.rank; ++i) {
    if (i != 0) *out++ = ',';
    out = fmt::format_to(out, "{}", r.shape[i]);
  }
  out = fmt::format_to(out, "] n={}", r.count);
  if (!r.reads_data() || !r.is_float()) return out;
  if (r.mode == check_mode::stats) {
    if (!detail::is_nan_bits(r.min)) {
      out = fmt::format_to(out, " x\u2208[");
      out = detail::format_number(out, r.min);
      out = fmt::format_to(out, ", ");
      out = detail::format_number(out, r.max);
      out = fmt::format_to(out, "]");
    }
    if (!detail::is_nan_bits(r.mean)) {
      out = fmt::format_to(out, " \u03bc=");
      out = detail::format_number(out, r.mean);
    }
    if (!detail::is_nan_bits(r.std)) {
      out = fmt::format_to(out, " \u03c3=");
      out = detail::format_number(out, r.std);
    }
  } else if (r.mode == check_mode::full_health && !detail::is_nan_bits(r.abs_max)) {
    out = fmt::format_to(out, " |x|\u2264");
    out = detail::format_number(out, r.abs_max);
  }
  if (r.mode == check_mode::curt_health) {
    if (r.has_nonfinite()) out = fmt::format_to(out, " nonfinite@{}", r.first_nonfinite);
    return out;
  }
  if (r.neg_inf != 0) out = fmt::format_to(out, " -inf={}", r.neg_inf);
  if (r.pos_inf != 0) out = fmt::format_to(out, " +inf={}", r.pos_inf);
  if (r.nan != 0) out = fmt::format_to(out, " nan={}", r.nan);
  return out;
}

#if !NANSCOPE_IMPL_SEPARATE || defined(NANSCOPE_IMPLEMENTATION)
/// The one-line summary as a string (declared in format_api.hpp).
NANSCOPE_IMPL_ENTRY std::string summary(const health_result& r) {
  std::string s;
  format_summary(std::back_inserter(s), r);
  return s;
}
#endif

/// Every field, one `key=value` pair each, for logs.
template <class Out>
Out format_verbose(Out out, const health_result& r) {
  out = format_summary(out, r);
  out = fmt::format_to(out, " | mode={} neg={} zero={} pos={} -inf={} +inf={} nan={} subnormal={} first_nonfinite={}",
                       name(r.mode), r.negative, r.zero, r.positive, r.neg_inf, r.pos_inf, r.nan, r.subnormal,
                       r.first_nonfinite);
  const double vals[] = {r.min, r.max, r.abs_max, r.abs_min, r.abs_min_nonzero, r.mean, r.std};
  const char* keys[] = {"min", "max", "abs_max", "abs_min", "abs_min_nonzero", "mean", "std"};
  for (int i = 0; i < 7; ++i) {
    out = fmt::format_to(out, " {}=", keys[i]);
    out = detail::format_number(out, vals[i]);
  }
  return out;
}

NANSCOPE_NAMESPACE_END

template <>
struct fmt::formatter<nanscope::health_result> {
  bool verbose = false;
  constexpr auto parse(fmt::format_parse_context& ctx) -> decltype(ctx.begin()) {
    auto it = ctx.begin();
    if (it != ctx.end() && *it == 'v') {
      verbose = true;
      ++it;
    }
    if (it != ctx.end() && *it != '}') FMT_THROW(fmt::format_error("nanscope: health_result takes {} or {:v}"));
    return it;
  }
  template <class FormatContext>
  auto format(const nanscope::health_result& r, FormatContext& ctx) const -> decltype(ctx.out()) {
    return verbose ? nanscope::format_verbose(ctx.out(), r) : nanscope::format_summary(ctx.out(), r);
  }
};

#endif  // NANSCOPE_FORMAT_HPP
