// nanscope — tree_warnings.hpp: an early warning (early_warning.hpp) as a layer-tree JSON entry, for the
// "nanscope_warnings" key of a node and the "warnings" list of the root's "nanscope" object (docs/tree.md).
#ifndef NANSCOPE_TREE_WARNINGS_HPP
#define NANSCOPE_TREE_WARNINGS_HPP

#include "config.hpp"
#include "early_warning.hpp"
#include "health.hpp"
#include "tree_json.hpp"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// A warning's number as the tree writes it: Python's repr of the double when finite, null otherwise (JSON has
/// no NaN or Inf, and a reader should not take "inf" for a measurement).
inline std::string tree_warning_number(double x) { return is_finite_bits(x) ? json_number(x, false) : "null"; }

/// One warning as a JSON object (a fragment at indentation level 0). `module_path` (the node's path in the
/// tree, "{Class}.dotted.path") is written first when it is not empty: the root's list has it, a node's own
/// list does not. `steps_to_overflow` is null when there is no estimate; `text` is the warning's text() without
/// its final newline. Keys, in order: [module_path], site, step, rule, target, abs_max, ema_abs_max,
/// warmup_max, slope_bits_per_step, r2, trend_points, headroom_bits, steps_to_overflow, text.
inline std::string tree_warning_json(const early_warning& w, std::string_view module_path) {
  std::vector<std::pair<std::string, std::string>> f;
  f.reserve(14);
  if (!module_path.empty()) f.emplace_back("module_path", py_json_quote(module_path));
  f.emplace_back("site", py_json_quote(w.site));
  f.emplace_back("step", std::to_string(w.step));
  f.emplace_back("rule", py_json_quote(name(w.rule)));
  f.emplace_back("target", py_json_quote(lp_format_name(w.target)));
  f.emplace_back("abs_max", tree_warning_number(w.abs_max));
  f.emplace_back("ema_abs_max", tree_warning_number(w.ema_abs_max));
  f.emplace_back("warmup_max", tree_warning_number(w.warmup_max));
  f.emplace_back("slope_bits_per_step", tree_warning_number(w.slope_bits));
  f.emplace_back("r2", tree_warning_number(w.fit_r2));
  f.emplace_back("trend_points", std::to_string(w.trend_points));
  f.emplace_back("headroom_bits", tree_warning_number(w.headroom_bits));
  f.emplace_back("steps_to_overflow", w.steps_to_overflow >= 0.0 ? tree_warning_number(w.steps_to_overflow) : "null");
  std::string text = w.text();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  f.emplace_back("text", py_json_quote(text));
  return py_object(f);
}

/// Appends `,\n<indent k>"<key>": [entries...]` (the entries are fragments at level 0) when there are any.
inline void append_warning_list(std::string& out, std::string_view key, const std::vector<std::string>& entries, int k) {
  if (entries.empty()) return;
  out += ',';
  out += indent(k);
  py_json_quote_to(out, key);
  out += ": ";
  append_at(out, py_array(entries), k);
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_TREE_WARNINGS_HPP
