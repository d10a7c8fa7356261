// nanscope-diff — tensor_health.hpp: what a tensor of a layer tree says about its dtype (default tolerance, whether
// it can hold NaN/Inf) and whether it holds NaN, +inf or -inf: from nanscope's health counts, or inferred from the
// statistics (torch's semantics) and the shown values. Shared by the comparison (diff.hpp), the search for the
// producer of a NaN/Inf (producer.hpp) and `nanscope report`.
#ifndef NANSCOPE_DIFF_TENSOR_HEALTH_HPP
#define NANSCOPE_DIFF_TENSOR_HEALTH_HPP

#include "tree_model.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <string_view>

namespace nsdiff {

inline std::string_view dtype_name(std::string_view d) {
  if (d.substr(0, 6) == "torch.") d.remove_prefix(6);
  return d;
}

/// The default relative tolerance for a dtype: about 8 units in the last place for the low-precision floats,
/// 1e-4 for float32/float64 (the torch_repr strings carry 5 significant digits), exact for integers and bool.
inline double default_rtol(std::string_view dtype) {
  const std::string_view d = dtype_name(dtype);
  if (d == "float16" || d == "half" || d == "complex32" || d == "chalf") return 8.0 / 2048.0;  // 8 * 2^-11
  if (d == "bfloat16") return 8.0 / 256.0;                                                       // 8 * 2^-8
  if (d.substr(0, 12) == "float8_e4m3f") return 2.0 / 16.0;                                      // 2 * 2^-4
  if (d.substr(0, 10) == "float8_e5m") return 2.0 / 8.0;                                          // 2 * 2^-3
  if (d == "bool" || d.substr(0, 3) == "int" || d.substr(0, 4) == "uint" || d == "long" || d == "short") return 0.0;
  return 1e-4;
}

/// Whether values of this dtype can be NaN/inf (unknown names are assumed to be floats).
inline bool float_like(std::string_view dtype) { return default_rtol(dtype) != 0.0; }

/// NaN / +inf / -inf presence of one tensor: 1 yes, 0 no, -1 unknown.
struct health_flags {
  int nan = -1, pos_inf = -1, neg_inf = -1;
  bool counted = false;
  health_counts counts;
};

inline health_flags flags_of(const tensor_info& t, bool use_counts) {
  health_flags f;
  if (!float_like(t.dtype)) {
    f.nan = f.pos_inf = f.neg_inf = 0;
    return f;
  }
  if (use_counts && t.has_health) {
    f.counted = true;
    f.counts = t.health;
    f.nan = t.health.nan > 0;
    f.pos_inf = t.health.pos_inf > 0;
    f.neg_inf = t.health.neg_inf > 0;
    return f;
  }
  auto set_yes = [](int& flag) { flag = 1; };
  auto set_no = [](int& flag) {
    if (flag != 1) flag = 0;
  };
  if (t.has_values) {
    bool nan = false, pinf = false, ninf = false;
    for (double v : t.values.v) {
      nan |= std::isnan(v);
      pinf |= v == std::numeric_limits<double>::infinity();
      ninf |= v == -std::numeric_limits<double>::infinity();
    }
    const bool complete = t.values.layout.find('e') == std::string::npos;
    if (nan) set_yes(f.nan);
    else if (complete) set_no(f.nan);
    if (pinf) set_yes(f.pos_inf);
    else if (complete) set_no(f.pos_inf);
    if (ninf) set_yes(f.neg_inf);
    else if (complete) set_no(f.neg_inf);
  }
  // Statistics, torch's semantics: min and max are NaN when any element is NaN; mean is finite only when every
  // element is.
  const double inf = std::numeric_limits<double>::infinity();
  if (t.min.present || t.max.present) {
    const bool nan = (t.min.present && std::isnan(t.min.v)) || (t.max.present && std::isnan(t.max.v));
    if (nan) {
      set_yes(f.nan);
    } else {
      set_no(f.nan);
      if (t.max.present) {
        if (t.max.v == inf) set_yes(f.pos_inf);
        else set_no(f.pos_inf);
      }
      if (t.min.present) {
        if (t.min.v == -inf) set_yes(f.neg_inf);
        else set_no(f.neg_inf);
      }
      if (t.min.present && t.min.v == inf) set_yes(f.pos_inf);
      if (t.max.present && t.max.v == -inf) set_yes(f.neg_inf);
    }
  } else if (t.mean.present && std::isfinite(t.mean.v)) {
    set_no(f.nan);
    set_no(f.pos_inf);
    set_no(f.neg_inf);
  }
  return f;
}

/// Whether a tensor holds NaN or an infinity (known from counts, statistics or values); false when unknown.
inline bool holds_nonfinite(const tensor_info& t, bool use_counts) {
  const health_flags f = flags_of(t, use_counts);
  return f.nan == 1 || f.pos_inf == 1 || f.neg_inf == 1;
}

/// "NaN", "Inf" or "NaN/Inf": what a tensor holds (for messages).
inline std::string nonfinite_word(const tensor_info& t, bool use_counts) {
  const health_flags f = flags_of(t, use_counts);
  const bool nan = f.nan == 1, inf = f.pos_inf == 1 || f.neg_inf == 1;
  return nan && inf ? "NaN/Inf" : nan ? "NaN" : inf ? "Inf" : "NaN/Inf";
}

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_TENSOR_HEALTH_HPP
