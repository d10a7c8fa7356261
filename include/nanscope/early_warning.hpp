// nanscope — early_warning.hpp: the record of one early warning (site, step, rule, trend, estimate) and its text,
// shared by the history that raises it (history.hpp) and the layer tree that writes it (tree_warnings.hpp).
#ifndef NANSCOPE_EARLY_WARNING_HPP
#define NANSCOPE_EARLY_WARNING_HPP

#include "config.hpp"
#include "recorder.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

NANSCOPE_NAMESPACE_BEGIN

/// Which rule fired.
enum class warning_rule : std::uint8_t { jump, warmup, overflow_steps };
inline const char* name(warning_rule r) {
  switch (r) {
    case warning_rule::jump: return "jump";
    case warning_rule::warmup: return "large-vs-warmup";
    case warning_rule::overflow_steps: return "steps-to-overflow";
  }
  return "?";
}
inline const char* lp_format_name(lp_format f) {
  switch (f) {
    case lp_format::f16: return "fp16";
    case lp_format::bf16: return "bf16";
    case lp_format::e4m3fn: return "fp8_e4m3fn";
    case lp_format::e5m2: return "fp8_e5m2";
  }
  return "?";
}

/// One early warning: the site, the step, the rule and the numbers behind it.
struct early_warning {
  std::string site;  ///< "module.path:context"
  std::uint64_t step = 0;
  warning_rule rule = warning_rule::overflow_steps;
  lp_format target = lp_format::f16;
  double abs_max = 0.0;
  double ema_abs_max = 0.0;        ///< 2^EMA(log2 abs_max) before this observation
  double warmup_max = 0.0;         ///< max over the first N observations
  double slope_bits = 0.0;         ///< trend, log2 units per step
  double fit_r2 = 0.0;             ///< r^2 of the trend
  std::uint32_t trend_points = 0;  ///< observations in the trend
  double headroom_bits = 0.0;      ///< log2(max_finite / abs_max)
  double steps_to_overflow = -1.0; ///< estimate; -1 when there is none

  std::string text() const {
    // the site is joined as a string (any length); the numbers around it fit the buffers
    char head[64];
    std::snprintf(head, sizeof head, "nanscope: early warning at step %llu: ", static_cast<unsigned long long>(step));
    char tail[1024] = "";  // two %.1f of the largest doubles take about 620
    switch (rule) {
      case warning_rule::overflow_steps:
        std::snprintf(tail, sizeof tail,
                      " will overflow %s in ~%.1f steps (abs_max %.6g, headroom %.2f bits, trend %+.3f bits/step over "
                      "%u steps, r2 %.2f)\n",
                      lp_format_name(target), steps_to_overflow, abs_max, headroom_bits, slope_bits, trend_points,
                      fit_r2);
        break;
      case warning_rule::jump:
        std::snprintf(tail, sizeof tail,
                      " jumped: abs_max %.6g is %.1fx its EMA %.6g (%s headroom %.2f bits, trend %+.3f bits/step)\n",
                      abs_max, ema_abs_max > 0 ? abs_max / ema_abs_max : 0.0, ema_abs_max, lp_format_name(target),
                      headroom_bits, slope_bits);
        break;
      case warning_rule::warmup:
        std::snprintf(tail, sizeof tail,
                      " is large against warm-up: abs_max %.6g is %.1fx the warm-up max %.6g (%s headroom %.2f bits, "
                      "trend %+.3f bits/step)\n",
                      abs_max, warmup_max > 0 ? abs_max / warmup_max : 0.0, warmup_max, lp_format_name(target),
                      headroom_bits, slope_bits);
        break;
      default:
        std::snprintf(tail, sizeof tail, ": a warning of unknown rule %d (abs_max %.6g)\n", static_cast<int>(rule),
                      abs_max);
        break;
    }
    std::string out = head;
    out += site;
    out += tail;
    return out;
  }
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_EARLY_WARNING_HPP
