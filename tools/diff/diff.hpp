// nanscope-diff — diff.hpp: aligns two layer trees and compares them.
//
// Alignment: the roots are paired; below a paired node, children are paired by (module path relative to the root,
// occurrence index among siblings with that path), so a module called twice pairs call by call. Unpaired
// children are missing/extra modules. Within a pair of nodes, inputs and outputs are paired by their label
// ("inputs.args[0]", "inputs.kwargs.mask", "outputs[1]").
//
// Comparison of a tensor pair: shape and dtype (a change is structural), the statistics both sides have (mean,
// std, min, max), the shown values element by element when both sides show values with the same layout, and
// health (NaN / ±inf present in one run only, from nanscope's counts or inferred from the statistics). A pair of
// numbers a, b passes when |a − b| ≤ atol + rtol·max(|a|, |b|); NaN equals NaN, ±inf equals the same inf.
// When the compared values do not cover every element (torch's print elided some, or a file has no values), mean
// and std are the only witnesses of the unseen elements: their default atol is divided by min(√numel, 64), so a
// change hidden in the elided part is not averaged away below the per-element tolerance.
//
// The walk is in call order (pre-order: a node, its inputs, its outputs, then its children), so the first
// diverged tensor met is the first divergence; the likely producer is the first node whose inputs match but whose
// outputs do not.
#ifndef NANSCOPE_DIFF_DIFF_HPP
#define NANSCOPE_DIFF_DIFF_HPP

#include "tree_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nsdiff {

struct diff_options {
  bool rtol_set = false;
  double rtol = 0;
  bool atol_set = false;
  double atol = 0;
  bool use_extras = true;    ///< use nanscope's health counts and abs_max when present
  bool prune = false;        ///< prune both trees like the Python tool before aligning
  bool strict_text = false;  ///< differences in non-tensor arguments count as divergences
};

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

/// One compared pair of numbers.
struct field_diff {
  std::string field;  ///< "mean", "std", "min", "max", "value[1,2]"
  double a = 0, b = 0;
  double abs_diff = 0;  ///< inf when exactly one side is NaN or inf
  double rel = 0;       ///< abs_diff / max(|a|, |b|); inf when exactly one side is NaN or inf
  double tol = 0;
  bool pass = true;
};

inline field_diff compare_numbers(double a, double b, double atol, double rtol) {
  field_diff d;
  d.a = a;
  d.b = b;
  const bool na = std::isnan(a), nb = std::isnan(b);
  if (na || nb || std::isinf(a) || std::isinf(b)) {
    d.pass = (na && nb) || (!na && !nb && a == b);
    d.abs_diff = d.pass ? 0.0 : std::numeric_limits<double>::infinity();
    d.rel = d.abs_diff;
    d.tol = atol;
    return d;
  }
  const double m = std::max(std::fabs(a), std::fabs(b));
  d.abs_diff = std::fabs(a - b);
  d.tol = atol + rtol * m;
  d.pass = d.abs_diff <= d.tol;
  d.rel = m > 0 ? d.abs_diff / m : 0.0;
  return d;
}

/// Orders differences: larger relative error first, then larger absolute difference.
inline bool larger_diff(const field_diff& x, const field_diff& y) {
  if (x.rel != y.rel) return x.rel > y.rel;
  return x.abs_diff > y.abs_diff;
}

struct tensor_result {
  std::size_t node = 0;  ///< index into report::nodes
  std::string label;     ///< "inputs.args[0]", "outputs", ...
  bool input = false;
  bool shape_changed = false, dtype_changed = false;
  std::string shape_a, shape_b, dtype_a, dtype_b;
  std::vector<std::string> health;  ///< "NaN in B only (B: 3 of 12 elements)"
  double rtol = 0, atol = 0;
  double stats_atol = 0;       ///< the atol for mean and std (smaller than atol when not every value was compared)
  double numel = 0;            ///< elements of A's tensor
  double elided = 0;           ///< elements torch's print left out (the "..." part), when both show the same layout
                               ///< (a double like numel: a shape's product can pass 2^64)
  std::size_t stats_compared = 0, stats_failed = 0, values_compared = 0, values_failed = 0;
  std::string values_skipped;  ///< why shown values were not compared although both sides have some
  bool has_worst = false;
  field_diff worst;  ///< the failing pair with the largest relative error (largest of all when none fails)
  bool diverged() const {
    return stats_failed || values_failed || shape_changed || dtype_changed || !health.empty();
  }
  /// Diverged only in its statistics while every shown value agrees and some values were elided: the verdict
  /// rests on the statistics of values nobody can see in the files.
  bool rests_on_elided() const {
    return stats_failed > 0 && values_failed == 0 && values_compared > 0 && elided > 0 && !shape_changed &&
           !dtype_changed && health.empty();
  }
};

struct node_result {
  std::string display;  ///< module path, with " (call k)" when the path repeats among siblings
  bool inputs_diverged = false, outputs_diverged = false;
  bool has_tensors = false;
};

/// Structural differences: missing/extra modules or tensors, shape/dtype changes, tensor ↔ non-tensor.
struct structural_diff {
  std::string kind;    ///< "missing module", "extra module", "missing tensor", "extra tensor", "shape", "dtype", "kind"
  std::string module;  ///< display path
  std::string tensor;  ///< label (empty for modules)
  std::string a, b;    ///< the two sides for shape/dtype/kind; submodule count for modules
};

struct text_diff {
  std::string module, label, a, b;  ///< a or b empty: missing on that side
  bool missing_a = false, missing_b = false;
};

struct report {
  std::vector<node_result> nodes;  ///< paired nodes, in call order
  std::vector<tensor_result> tensors;
  std::vector<structural_diff> structural;
  std::vector<text_diff> texts;
  std::vector<std::string> notes;
  std::size_t missing_modules = 0, extra_modules = 0;
  long first = -1;         ///< index into tensors: the first divergence
  long producer = -1;      ///< index into nodes: first node whose inputs match and outputs diverge
  long last_clean = -1;    ///< when there is no producer: the node before the first divergence
  std::size_t stats_compared = 0, values_compared = 0, tensors_compared = 0;
  std::size_t tensors_diverged = 0, health_diffs = 0;

  bool diverged(const diff_options& o) const {
    return tensors_diverged > 0 || !structural.empty() || (o.strict_text && !texts.empty());
  }
};

// ---------------------------------------------------------------------------------------------------------

/// Python's `(.*)\.(\d+)$` on a module path: the trailing number, or empty.
inline std::string trailing_number(const std::string& path) {
  std::size_t b = path.size();
  while (b > 0 && path[b - 1] >= '0' && path[b - 1] <= '9') --b;
  if (b == path.size() || b == 0 || path[b - 1] != '.') return std::string();
  return path.substr(b);
}

/// The Python tool's layer-block test: a numbered path with children, one of which has ".<n>." in its path.
inline bool is_layer_block(const tree_node& n) {
  const std::string num = trailing_number(n.path);
  if (num.empty() || n.children.empty()) return false;
  const std::string needle = "." + num + ".";
  for (const auto& c : n.children)
    if (c.path.find(needle) != std::string::npos) return true;
  return false;
}

/// The Python tool's prune_intermediate_layers: of more than two layer-block children, keep the first and last,
/// at every depth. (Without recursion, as every walk of a tree here: trees nest up to max_module_depth modules.)
inline void prune_layers(tree_node& root) {
  std::vector<tree_node*> todo{&root};
  while (!todo.empty()) {
    tree_node& n = *todo.back();
    todo.pop_back();
    std::vector<std::size_t> blocks;
    for (std::size_t i = 0; i < n.children.size(); ++i)
      if (is_layer_block(n.children[i])) blocks.push_back(i);
    if (blocks.size() > 2) {
      std::vector<tree_node> kept;
      for (std::size_t i = 0; i < n.children.size(); ++i) {
        const bool middle = std::find(blocks.begin() + 1, blocks.end() - 1, i) != blocks.end() - 1;
        if (!middle) kept.push_back(std::move(n.children[i]));
      }
      n.children = std::move(kept);
    }
    for (auto& c : n.children) todo.push_back(&c);
  }
}

/// The number of nodes of a subtree, its root included.
inline std::size_t subtree_size(const tree_node& root) {
  std::size_t s = 0;
  std::vector<const tree_node*> todo{&root};
  while (!todo.empty()) {
    const tree_node* n = todo.back();
    todo.pop_back();
    ++s;
    for (const auto& c : n->children) todo.push_back(&c);
  }
  return s;
}

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

class differ {
 public:
  differ(const tree_file& a, const tree_file& b, const diff_options& o, report& r) : a_(a), b_(b), o_(o), r_(r) {}

  void run() {
    if (a_.root.path != b_.root.path)
      r_.notes.push_back("the roots are named differently (A: \"" + a_.root.path + "\", B: \"" + b_.root.path +
                         "\"); modules are paired by their path below the root");
    if (!a_.complete) r_.notes.push_back("A's pass did not complete (an exception was in flight when it was written)");
    if (!b_.complete) r_.notes.push_back("B's pass did not complete (an exception was in flight when it was written)");
    visit(a_.root, b_.root, a_.root.path);
    finish();
  }

 private:
  std::string relative(const std::string& path, const std::string& root) const {
    if (path == root) return std::string();
    if (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '.')
      return path.substr(root.size() + 1);
    return "\x01" + path;  // not under the root: keep the whole path (cannot collide with a relative one)
  }

  static std::string call_display(const std::string& path, int k, int total) {
    if (total <= 1) return path;
    return path + " (call " + std::to_string(k + 1) + ")";
  }

  /// A paired node being visited: its children are paired and visited in A's order, one at a time.
  struct visit_frame {
    const tree_node* a;
    const tree_node* b;
    std::string display;
    std::map<std::string, int> total_a, total_b, seen;
    std::map<std::pair<std::string, int>, std::size_t> in_b;  ///< (relative path, occurrence) -> index in b
    std::vector<bool> used;                                   ///< b's children paired so far
    std::size_t next = 0;                                     ///< a's next child
    std::size_t last_b = 0;
    bool reordered = false;
  };

  /// Compares a node pair's tensors and prepares the pairing of their children.
  visit_frame enter(const tree_node& a, const tree_node& b, const std::string& display) {
    const std::size_t ni = r_.nodes.size();
    r_.nodes.push_back(node_result{display, false, false, false});
    compare_slots(ni, a.inputs, b.inputs, true);
    compare_slots(ni, a.outputs, b.outputs, false);
    visit_frame f;
    f.a = &a;
    f.b = &b;
    f.display = display;
    for (const auto& c : a.children) ++f.total_a[relative(c.path, a_.root.path)];
    for (const auto& c : b.children) ++f.total_b[relative(c.path, b_.root.path)];
    for (std::size_t i = 0; i < b.children.size(); ++i) {
      const std::string rel = relative(b.children[i].path, b_.root.path);
      f.in_b.emplace(std::make_pair(rel, f.seen[rel]++), i);
    }
    f.seen.clear();
    f.used.assign(b.children.size(), false);
    return f;
  }

  /// After the last child of A: B's children left unpaired are extra modules.
  void leave(visit_frame& f) {
    f.seen.clear();
    const tree_node& b = *f.b;
    for (std::size_t i = 0; i < b.children.size(); ++i) {
      const std::string rel = relative(b.children[i].path, b_.root.path);
      const int k = f.seen[rel]++;
      if (f.used[i]) continue;
      const std::size_t sub = subtree_size(b.children[i]) - 1;
      const int total = std::max(f.total_a[rel], f.total_b[rel]);
      r_.structural.push_back(
          {"extra module", call_display(b.children[i].path, k, total), "", "", sub ? std::to_string(sub) : std::string()});
      ++r_.extra_modules;
    }
    if (f.reordered) r_.notes.push_back("the children of " + f.display + " are called in a different order in B");
  }

  /// Visits a pair of nodes and everything below them in call order: a node's tensors, then its children one by
  /// one (each with everything below it), then B's unpaired children. Without recursion: the open pairs are a
  /// stack of frames (trees nest up to max_module_depth modules).
  void visit(const tree_node& a, const tree_node& b, const std::string& display) {
    std::vector<visit_frame> open;
    open.push_back(enter(a, b, display));
    while (!open.empty()) {
      visit_frame& f = open.back();
      if (f.next == f.a->children.size()) {
        leave(f);
        open.pop_back();
        continue;
      }
      const tree_node& ca = f.a->children[f.next++];
      const std::string rel = relative(ca.path, a_.root.path);
      const int k = f.seen[rel]++;
      const int total = std::max(f.total_a[rel], f.total_b[rel]);
      const auto it = f.in_b.find(std::make_pair(rel, k));
      if (it == f.in_b.end()) {
        const std::size_t sub = subtree_size(ca) - 1;
        r_.structural.push_back({"missing module", call_display(ca.path, k, total), "",
                                 sub ? std::to_string(sub) : std::string(), ""});
        ++r_.missing_modules;
        continue;
      }
      f.used[it->second] = true;
      if (it->second < f.last_b) f.reordered = true;
      f.last_b = it->second;
      const tree_node& cb = f.b->children[it->second];
      visit_frame child = enter(ca, cb, call_display(ca.path, k, total));  // (f is invalid after the push)
      open.push_back(std::move(child));
    }
  }

  void compare_slots(std::size_t ni, const std::vector<slot>& as, const std::vector<slot>& bs, bool input) {
    std::map<std::string, std::size_t> in_b;
    for (std::size_t i = 0; i < bs.size(); ++i) in_b.emplace(bs[i].label, i);
    std::vector<bool> used(bs.size(), false);
    const std::string& module = r_.nodes[ni].display;
    for (const auto& sa : as) {
      const auto it = in_b.find(sa.label);
      if (it == in_b.end()) {
        if (sa.kind == slot_kind::tensor) r_.structural.push_back({"missing tensor", module, sa.label, "", ""});
        else r_.texts.push_back({module, sa.label, sa.text, "", false, true});
        continue;
      }
      used[it->second] = true;
      const slot& sb = bs[it->second];
      if (sa.kind != sb.kind) {
        r_.structural.push_back({"kind", module, sa.label, sa.kind == slot_kind::tensor ? "tensor" : "\"" + sa.text + "\"",
                                 sb.kind == slot_kind::tensor ? "tensor" : "\"" + sb.text + "\""});
        continue;
      }
      if (sa.kind == slot_kind::text) {
        if (sa.text != sb.text) r_.texts.push_back({module, sa.label, sa.text, sb.text, false, false});
        continue;
      }
      compare_tensor(ni, sa.label, input, sa.tensor, sb.tensor);
    }
    for (std::size_t i = 0; i < bs.size(); ++i) {
      if (used[i]) continue;
      if (bs[i].kind == slot_kind::tensor) r_.structural.push_back({"extra tensor", module, bs[i].label, "", ""});
      else r_.texts.push_back({module, bs[i].label, "", bs[i].text, true, false});
    }
  }

  double scale_of(const tensor_info& t) const {
    if (t.min.present && t.max.present && std::isfinite(t.min.v) && std::isfinite(t.max.v))
      return std::max(std::fabs(t.min.v), std::fabs(t.max.v));
    double s = -1;
    if (t.has_values)
      for (double v : t.values.v)
        if (std::isfinite(v)) s = std::max(s, std::fabs(v));
    if (s >= 0) return s;
    if (o_.use_extras && t.abs_max.present && std::isfinite(t.abs_max.v)) return t.abs_max.v;
    return -1;
  }

  void consider(tensor_result& t, field_diff d) {
    if (!t.has_worst) {
      t.worst = std::move(d);
      t.has_worst = true;
      return;
    }
    // a failing pair beats a passing one; then the larger difference
    if (!d.pass && t.worst.pass) {
      t.worst = std::move(d);
    } else if (d.pass == t.worst.pass && larger_diff(d, t.worst)) {
      t.worst = std::move(d);
    }
  }

  void compare_tensor(std::size_t ni, const std::string& label, bool input, const tensor_info& a, const tensor_info& b) {
    tensor_result t;
    t.node = ni;
    t.label = label;
    t.input = input;
    t.shape_a = shape_text(a.shape);
    t.shape_b = shape_text(b.shape);
    t.dtype_a = a.dtype;
    t.dtype_b = b.dtype;
    const std::string& module = r_.nodes[ni].display;
    if (a.shape != b.shape) {
      t.shape_changed = true;
      r_.structural.push_back({"shape", module, label, t.shape_a, t.shape_b});
    }
    if (a.dtype != b.dtype) {
      t.dtype_changed = true;
      r_.structural.push_back({"dtype", module, label, a.dtype, b.dtype});
    }
    t.rtol = o_.rtol_set ? o_.rtol : std::max(default_rtol(a.dtype), default_rtol(b.dtype));
    if (o_.atol_set) {
      t.atol = o_.atol;
    } else {
      double scale = scale_of(a);
      if (scale < 0) scale = scale_of(b);
      t.atol = scale > 0 ? t.rtol * scale : 0.0;
    }

    // Do the compared values cover every element? If not, mean and std also witness the unseen ones.
    t.numel = 1;
    for (const std::int64_t d : a.shape) t.numel *= static_cast<double>(d);
    const bool same_layout = a.has_values && b.has_values && a.values.layout == b.values.layout;
    if (same_layout && a.values.layout.find('e') != std::string::npos && t.numel > static_cast<double>(a.values.v.size()))
      t.elided = t.numel - static_cast<double>(a.values.v.size());
    const bool every_value = same_layout && a.values.layout.find('e') == std::string::npos;
    t.stats_atol = t.atol;
    if (!o_.atol_set && !every_value && t.numel > 1) t.stats_atol = t.atol / std::min(std::sqrt(t.numel), 64.0);

    const std::pair<const char*, const stat_value tensor_info::*> stats[] = {
        {"mean", &tensor_info::mean}, {"std", &tensor_info::std}, {"min", &tensor_info::min}, {"max", &tensor_info::max}};
    for (const auto& s : stats) {
      const stat_value& x = a.*(s.second);
      const stat_value& y = b.*(s.second);
      if (!x.present || !y.present) continue;
      const bool reduction = s.second == &tensor_info::mean || s.second == &tensor_info::std;
      field_diff d = compare_numbers(x.v, y.v, reduction ? t.stats_atol : t.atol, t.rtol);
      d.field = s.first;
      ++t.stats_compared;
      if (!d.pass) ++t.stats_failed;
      consider(t, std::move(d));
    }

    if (a.has_values && b.has_values) {
      if (a.values.layout != b.values.layout) {
        if (!t.shape_changed) t.values_skipped = "the two files show the values with different summarising";
      } else {
        long worst_k = -1;
        field_diff worst;
        for (std::size_t k = 0; k < a.values.v.size(); ++k) {
          field_diff d = compare_numbers(a.values.v[k], b.values.v[k], t.atol, t.rtol);
          ++t.values_compared;
          if (!d.pass) ++t.values_failed;
          if (worst_k < 0 || (!d.pass && worst.pass) || (d.pass == worst.pass && larger_diff(d, worst))) {
            worst = d;
            worst_k = static_cast<long>(k);
          }
        }
        if (worst_k >= 0) {
          worst.field = element_label(a.values.layout, a.shape, static_cast<std::size_t>(worst_k));
          consider(t, std::move(worst));
        }
      }
    }

    const health_flags fa = flags_of(a, o_.use_extras), fb = flags_of(b, o_.use_extras);
    auto of = [](const health_flags& f, std::uint64_t n) {
      return f.counted ? std::to_string(n) + " of " + std::to_string(f.counts.total()) : std::string();
    };
    auto flag = [&](const char* what, int x, int y, std::uint64_t cx, std::uint64_t cy) {
      if (x == 1 && y == 0) {
        const std::string c = of(fa, cx);
        t.health.push_back(std::string(what) + " in A only" + (c.empty() ? "" : " (A: " + c + ")"));
      } else if (x == 0 && y == 1) {
        const std::string c = of(fb, cy);
        t.health.push_back(std::string(what) + " in B only" + (c.empty() ? "" : " (B: " + c + ")"));
      } else if (x == 1 && y == 1 && fa.counted && fb.counted && cx != cy) {
        t.health.push_back(std::string(what) + " in both, " + std::to_string(cx) + " vs " + std::to_string(cy) +
                           " elements");
      }
    };
    flag("NaN", fa.nan, fb.nan, fa.counts.nan, fb.counts.nan);
    flag("+inf", fa.pos_inf, fb.pos_inf, fa.counts.pos_inf, fb.counts.pos_inf);
    flag("-inf", fa.neg_inf, fb.neg_inf, fa.counts.neg_inf, fb.counts.neg_inf);

    ++r_.tensors_compared;
    r_.stats_compared += t.stats_compared;
    r_.values_compared += t.values_compared;
    r_.health_diffs += t.health.size();
    node_result& n = r_.nodes[ni];
    n.has_tensors = true;
    if (t.diverged()) {
      ++r_.tensors_diverged;
      (input ? n.inputs_diverged : n.outputs_diverged) = true;
      if (r_.first < 0) r_.first = static_cast<long>(r_.tensors.size());
    }
    r_.tensors.push_back(std::move(t));
  }

  void finish() {
    if (r_.first < 0) return;
    for (std::size_t i = 0; i < r_.nodes.size(); ++i) {
      if (r_.nodes[i].outputs_diverged && !r_.nodes[i].inputs_diverged) {
        r_.producer = static_cast<long>(i);
        break;
      }
    }
    if (r_.producer < 0) {
      const std::size_t first_node = r_.tensors[static_cast<std::size_t>(r_.first)].node;
      for (std::size_t i = first_node; i-- > 0;)
        if (r_.nodes[i].has_tensors) {
          r_.last_clean = static_cast<long>(i);
          break;
        }
    }
  }

  const tree_file& a_;
  const tree_file& b_;
  const diff_options& o_;
  report& r_;
};

/// Compares two loaded trees (pruning them in place first when asked).
inline report diff_trees(tree_file& a, tree_file& b, const diff_options& o) {
  report r;
  if (o.prune) {
    prune_layers(a.root);
    prune_layers(b.root);
  }
  differ(a, b, o, r).run();
  if (r.missing_modules + r.extra_modules > 0) {
    if (a.pruned_known && b.pruned_known && a.pruned != b.pruned && !o.prune) {
      r.notes.push_back(std::string("A was written ") + (a.pruned ? "with" : "without") + " layer pruning and B " +
                        (b.pruned ? "with" : "without") + ": rerun with --prune-layers to compare the layers both keep");
    } else if (!o.prune) {
      bool all_blocks = true;
      std::size_t numbered = 0;
      for (const auto& s : r.structural) {
        if (s.kind != "missing module" && s.kind != "extra module") continue;
        std::string path = s.module;
        const std::size_t call = path.find(" (call ");
        if (call != std::string::npos) path.resize(call);
        if (trailing_number(path).empty() || (s.a.empty() && s.b.empty())) all_blocks = false;
        else ++numbered;
      }
      if (all_blocks && numbered > 0)
        r.notes.push_back("every unpaired module is a numbered layer block: if one tree was written with layer pruning "
                          "(the Python tool's default) and the other without, rerun with --prune-layers");
    }
  }
  return r;
}

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_DIFF_HPP
