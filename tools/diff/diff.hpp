// nanscope-diff — diff.hpp: aligns two layer trees and compares them.
//
// Alignment: the roots are paired; below a paired node, children are paired by (module path relative to the root,
// the checkpoint's text for a DETECT_OVERFLOW checkpoint, occurrence index among siblings with that key), so a
// module called twice pairs call by call. Unpaired children are missing/extra modules. Within a pair of nodes,
// parameters, inputs and outputs are paired by their label ("parameters.weight", "inputs.args[0]",
// "inputs.kwargs.mask", "outputs[1]").
//
// Comparison of a tensor pair: shape and dtype (a change is structural), the statistics both sides have (mean,
// std, min, max), the shown values element by element when both sides show values with the same layout, and
// health (NaN / ±inf present in one run only, from nanscope's counts or inferred from the statistics). A pair of
// numbers a, b passes when |a − b| ≤ atol + rtol·max(|a|, |b|); NaN equals NaN, ±inf equals the same inf.
// When both files record the tensor's bad segments (nanscope_segments), they are compared too (segments.hpp): a
// segment bad in one run only, or in both with other counts, is a segment difference (report::segment_diffs). It is
// not a divergence of the tensor (the first divergence and the producer are the values' and health's) and
// report::diverged leaves it out; the verdict of nanscope-diff and of `nanscope report` counts it (verdict_diverged).
// When the compared values do not cover every element (torch's print elided some, or a file has no values), mean
// and std are the only witnesses of the unseen elements: their default atol is divided by min(√numel, 64), so a
// change hidden in the elided part is not averaged away below the per-element tolerance.
//
// The walk is in call order — a node's parameters and inputs when it is entered, its children, its outputs when it
// is left — so the first diverged tensor met is the first divergence, and it tells the likely producer: a
// parameter that differs; a node whose outputs diverge while its inputs and its children's outputs match (a leaf,
// or its own code after its last child); a checkpoint's tensor (its module's own code before it); or, for inputs
// that already differ, the code that ran since the last matching tensor (producer.hpp). A file's recorded detection
// (nanscope_detection) names the producer when the difference arrives already made in one run only.
#ifndef NANSCOPE_DIFF_DIFF_HPP
#define NANSCOPE_DIFF_DIFF_HPP

#include "producer.hpp"
#include "segments.hpp"
#include "tensor_health.hpp"
#include "tree_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
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
  std::string label;     ///< "inputs.args[0]", "outputs", "parameters.weight", ...
  bool input = false;
  bool param = false;    ///< a parameter (nanscope's "parameters")
  double abs_a = 0, abs_b = 0;  ///< |x| max of each side (abs_max, else max(|min|, |max|)); NaN: unknown
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
  bool segments_compared = false;  ///< both files record bad segments of it (nanscope_segments; not --ignore-extras)
  segment_comparison segments;     ///< its bad segments in A against B (segments_compared)
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
  std::string display;  ///< module path (a checkpoint: `path checkpoint "text"`), with " (call k)" when it repeats
  bool inputs_diverged = false, outputs_diverged = false, params_diverged = false;
  bool has_tensors = false;
  const tree_node* a = nullptr;  ///< the pair
  const tree_node* b = nullptr;
  long parent = -1;              ///< index into report::nodes
};

/// The likely producer of the first divergence (report::likely).
struct likely_producer {
  bool present = false;
  /// "parameter", "outputs" (a leaf: its inputs match, its outputs diverge), "own_code", "checkpoint", "left_out"
  /// (layer blocks pruning left out), "one_side" (a module only one file records), "recorded" (a file's detection),
  /// "model_inputs"
  std::string kind;
  std::string module;            ///< the module path named; "" when the producer is not in the files
  long node = -1;                ///< index into report::nodes when it is a paired node
  const tree_node* in_b = nullptr;  ///< the module in B (paired or not), for the report's tree
  std::string after, before, checkpoint, parameter, pruned;
  std::string source = "comparison";  ///< "comparison", or "recorder of A" / "recorder of B"
  bool inferred = false;              ///< from a file without the outputs of the module it names
  std::vector<std::string> alternatives;
  std::string text;
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
  long producer = -1;      ///< index into nodes: the node `likely` names, when it is a paired one
  long last_clean = -1;    ///< when there is no producer: the node before the first divergence
  likely_producer likely;  ///< the likely producer of the first divergence
  std::size_t stats_compared = 0, values_compared = 0, tensors_compared = 0, params_compared = 0;
  std::size_t tensors_diverged = 0, health_diffs = 0;
  /// tensors whose bad segments both files record, and the segments that differ among them (bad in one run only,
  /// or in both with other counts or another first NaN/Inf; segment_comparison::differences)
  std::size_t segment_tensors = 0, segment_diffs = 0;
  std::size_t segment_mismatches = 0;  ///< of segment_tensors: those whose segmentations differ (not compared)
  pruning_info pruning_a, pruning_b;  ///< what each file says and shows about pruning
  bool detection_a = false, detection_b = false;  ///< the file records the recorder's detection
  origin origin_a, origin_b;          ///< each file's first NaN/Inf and its producer (find_origin)

  bool diverged(const diff_options& o) const {
    return tensors_diverged > 0 || !structural.empty() || (o.strict_text && !texts.empty());
  }
  /// The verdict of nanscope-diff and of `nanscope report`: the divergences above, and segments bad in one run only
  /// or in both with other counts (segment_diffs: tensors whose bad segments both files record).
  bool verdict_diverged(const diff_options& o) const { return diverged(o) || segment_diffs > 0; }
};

/// What the section of bad segments, A against B, is about: "4 tensors recorded with bad segments in both; 8 segment
/// differences" (and "; N with different segmentations"). Shared by nanscope-diff and `nanscope report`.
inline std::string segment_comparison_summary(const report& r) {
  auto count = [](std::size_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  std::string s = count(r.segment_tensors, "tensor", "tensors") + " recorded with bad segments in both; " +
                  count(r.segment_diffs, "segment difference", "segment differences");
  if (r.segment_mismatches) s += "; " + std::to_string(r.segment_mismatches) + " with different segmentations";
  return s;
}

// ---------------------------------------------------------------------------------------------------------

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

/// "0.27", "5000", "1.234e-05": a number in a few digits for a sentence.
inline std::string short_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

/// |x| max of a tensor from what its file says: nanscope's abs_max, else max(|min|, |max|); NaN when unknown.
inline double abs_max_of(const tensor_info& t, bool use_extras) {
  if (use_extras && t.abs_max.present) return t.abs_max.v;
  if (t.min.present && t.max.present) return std::max(std::fabs(t.min.v), std::fabs(t.max.v));
  return std::numeric_limits<double>::quiet_NaN();
}

class differ {
 public:
  differ(const tree_file& a, const tree_file& b, const diff_options& o, report& r) : a_(a), b_(b), o_(o), r_(r) {}

  void run() {
    if (a_.root.path != b_.root.path)
      r_.notes.push_back("the roots are named differently (A: \"" + a_.root.path + "\", B: \"" + b_.root.path +
                         "\"); modules are paired by their path below the root");
    incomplete_note(a_, "A");
    incomplete_note(b_, "B");
    visit(a_.root, b_.root, a_.root.path);
    finish();
  }

 private:
  void incomplete_note(const tree_file& f, const char* side) {
    if (f.complete) return;
    if (f.ended_by == "detection") {
      std::string at;
      if (f.detection.present)
        at = " at " + f.detection.module_path +
             (f.detection.has_checkpoint ? " checkpoint \"" + f.detection.checkpoint + "\"" : std::string());
      r_.notes.push_back(std::string(side) + "'s pass ended at the recorder's detection" + at +
                         ", by a throwing policy: the modules after it are not in " + side);
      return;
    }
    r_.notes.push_back(std::string(side) + "'s pass did not complete (an exception was in flight when it was written)");
  }

  std::string relative(const std::string& path, const std::string& root) const {
    if (path == root) return std::string();
    if (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '.')
      return path.substr(root.size() + 1);
    return "\x01" + path;  // not under the root: keep the whole path (cannot collide with a relative one)
  }
  /// What a child is paired by (with its occurrence index): its path below the root, and a checkpoint's text.
  std::string key_of(const tree_node& n, const std::string& root) const {
    std::string k = relative(n.path, root);
    if (n.is_checkpoint) k += "\x02" + n.checkpoint;
    return k;
  }

  static std::string call_display(const std::string& name, int k, int total) {
    if (total <= 1) return name;
    return name + " (call " + std::to_string(k + 1) + ")";
  }

  /// A paired node being visited: its children are paired and visited in A's order, one at a time.
  struct visit_frame {
    const tree_node* a;
    const tree_node* b;
    std::size_t index;  ///< into report::nodes
    std::string display;
    std::map<std::string, int> total_a, total_b, seen;
    std::map<std::pair<std::string, int>, std::size_t> in_b;  ///< (key, occurrence) -> index in b
    std::vector<bool> used;                                   ///< b's children paired so far
    std::size_t next = 0;                                     ///< a's next child
    std::size_t last_b = 0;
    bool reordered = false;
  };

  /// Enters a node pair: compares its parameters and inputs, prepares the pairing of its children.
  visit_frame enter(const tree_node& a, const tree_node& b, const std::string& display, long parent) {
    const std::size_t ni = r_.nodes.size();
    node_result nr;
    nr.display = display;
    nr.a = &a;
    nr.b = &b;
    nr.parent = parent;
    r_.nodes.push_back(std::move(nr));
    paired_a_[&a] = static_cast<long>(ni);
    paired_b_[&b] = static_cast<long>(ni);
    compare_slots(ni, a.params, b.params, 'p');
    compare_slots(ni, a.inputs, b.inputs, 'i');
    visit_frame f;
    f.a = &a;
    f.b = &b;
    f.index = ni;
    f.display = display;
    for (const auto& c : a.children) ++f.total_a[key_of(c, a_.root.path)];
    for (const auto& c : b.children) ++f.total_b[key_of(c, b_.root.path)];
    for (std::size_t i = 0; i < b.children.size(); ++i) {
      const std::string key = key_of(b.children[i], b_.root.path);
      f.in_b.emplace(std::make_pair(key, f.seen[key]++), i);
    }
    f.seen.clear();
    f.used.assign(b.children.size(), false);
    return f;
  }

  /// Leaves a node pair after its last child: compares its outputs; B's children left unpaired are extra modules.
  void leave(visit_frame& f) {
    compare_slots(f.index, f.a->outputs, f.b->outputs, 'o');
    f.seen.clear();
    const tree_node& b = *f.b;
    for (std::size_t i = 0; i < b.children.size(); ++i) {
      const std::string key = key_of(b.children[i], b_.root.path);
      const int k = f.seen[key]++;
      if (f.used[i]) continue;
      const std::size_t sub = subtree_size(b.children[i]) - 1;
      const int total = std::max(f.total_a[key], f.total_b[key]);
      r_.structural.push_back({"extra module", call_display(node_name(b.children[i]), k, total), "", "",
                               sub ? std::to_string(sub) : std::string()});
      ++r_.extra_modules;
    }
    if (f.reordered) r_.notes.push_back("the children of " + f.display + " are called in a different order in B");
  }

  /// Visits a pair of nodes and everything below them in call order: a node's parameters and inputs, its children
  /// one by one (each with everything below it), then its outputs and B's unpaired children. Without recursion:
  /// the open pairs are a stack of frames (trees nest up to max_module_depth modules).
  void visit(const tree_node& a, const tree_node& b, const std::string& display) {
    std::vector<visit_frame> open;
    open.push_back(enter(a, b, display, -1));
    while (!open.empty()) {
      visit_frame& f = open.back();
      if (f.next == f.a->children.size()) {
        leave(f);
        open.pop_back();
        continue;
      }
      const tree_node& ca = f.a->children[f.next++];
      const std::string key = key_of(ca, a_.root.path);
      const int k = f.seen[key]++;
      const int total = std::max(f.total_a[key], f.total_b[key]);
      const auto it = f.in_b.find(std::make_pair(key, k));
      if (it == f.in_b.end()) {
        const std::size_t sub = subtree_size(ca) - 1;
        r_.structural.push_back({"missing module", call_display(node_name(ca), k, total), "",
                                 sub ? std::to_string(sub) : std::string(), ""});
        ++r_.missing_modules;
        continue;
      }
      f.used[it->second] = true;
      if (it->second < f.last_b) f.reordered = true;
      f.last_b = it->second;
      const tree_node& cb = f.b->children[it->second];
      const long parent = static_cast<long>(f.index);
      visit_frame child = enter(ca, cb, call_display(node_name(ca), k, total), parent);  // (f is invalid after the push)
      open.push_back(std::move(child));
    }
  }

  void compare_slots(std::size_t ni, const std::vector<slot>& as, const std::vector<slot>& bs, char side) {
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
      compare_tensor(ni, sa.label, side, sa.tensor, sb.tensor);
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

  void compare_tensor(std::size_t ni, const std::string& label, char side, const tensor_info& a, const tensor_info& b) {
    tensor_result t;
    t.node = ni;
    t.label = label;
    t.input = side == 'i';
    t.param = side == 'p';
    t.abs_a = abs_max_of(a, o_.use_extras);
    t.abs_b = abs_max_of(b, o_.use_extras);
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

    if (o_.use_extras && !a.segments.empty() && !b.segments.empty()) {  // both runs name their bad segments
      t.segments_compared = true;
      t.segments = compare_segments(a, b);
      ++r_.segment_tensors;
      r_.segment_diffs += t.segments.differences();
      if (!t.segments.mismatch.empty()) ++r_.segment_mismatches;
    }

    if (t.param) ++r_.params_compared;
    else ++r_.tensors_compared;
    r_.stats_compared += t.stats_compared;
    r_.values_compared += t.values_compared;
    r_.health_diffs += t.health.size();
    node_result& n = r_.nodes[ni];
    n.has_tensors = true;
    if (t.diverged()) {
      ++r_.tensors_diverged;
      (t.param ? n.params_diverged : t.input ? n.inputs_diverged : n.outputs_diverged) = true;
      if (r_.first < 0) r_.first = static_cast<long>(r_.tensors.size());
    }
    r_.tensors.push_back(std::move(t));
  }

  // --- the likely producer --------------------------------------------------------------------------------

  /// The paired index of a node of A (or B), -1 when it is in one file only.
  long paired(const std::map<const tree_node*, long>& m, const tree_node* n) const {
    const auto it = m.find(n);
    return it == m.end() ? -1 : it->second;
  }
  /// The child of `parent` just before `child`, or null.
  static const tree_node* prior_of(const tree_node* parent, const tree_node* child) {
    if (parent == nullptr || child == nullptr || parent->children.empty()) return nullptr;
    const auto i = static_cast<std::size_t>(child - parent->children.data());
    return i > 0 && i < parent->children.size() ? &parent->children[i - 1] : nullptr;
  }
  /// Where `n` is entered in the call order of the tree `root` (an index; -1 when it is not in it).
  static long enter_position(const tree_node& root, const tree_node* n) {
    long pos = 0, found = -1;
    walk_call_order(root, [&](const call_event& e) {
      if (!e.enter) return true;
      if (e.node == n) {
        found = pos;
        return false;
      }
      ++pos;
      return true;
    });
    return found;
  }

  /// "TinyMLP.blocks.1.fc2 parameters.weight: abs_max 0.27 -> 5000" and what else tells the change.
  std::string parameter_change(const tensor_result& t) const {
    const std::string head = r_.nodes[t.node].display + " " + t.label + ": ";
    if (!t.health.empty()) return head + t.health.front();
    if (!std::isnan(t.abs_a) && !std::isnan(t.abs_b) && !compare_numbers(t.abs_a, t.abs_b, t.atol, t.rtol).pass)
      return head + "abs_max " + short_number(t.abs_a) + " -> " + short_number(t.abs_b);
    if (t.has_worst && !t.worst.pass)
      return head + t.worst.field + " " + short_number(t.worst.a) + " -> " + short_number(t.worst.b);
    if (t.shape_changed) return head + "shape " + t.shape_a + " -> " + t.shape_b;
    if (t.dtype_changed) return head + "dtype " + t.dtype_a + " -> " + t.dtype_b;
    return head + "differs";
  }

  /// The side whose NaN/Inf appears in one run only at the first divergence ('A', 'B'), or 0.
  static char nonfinite_side(const tensor_result& t) {
    for (const std::string& h : t.health) {
      if (h.find(" in B only") != std::string::npos) return 'B';
      if (h.find(" in A only") != std::string::npos) return 'A';
    }
    return 0;
  }

  /// The likely producer when the first divergence is the inputs of the paired node `ni` (or the tensor of the
  /// checkpoint `ni`): the code that ran since the last tensor that matches.
  void between(likely_producer& p, std::size_t ni) {
    const node_result& n = r_.nodes[ni];
    const node_result& par = r_.nodes[static_cast<std::size_t>(n.parent)];
    const tree_node* prior_a = prior_of(par.a, n.a);
    const tree_node* prior_b = prior_of(par.b, n.b);
    const std::string cp = n.a->is_checkpoint ? n.a->checkpoint : std::string();
    const std::string parent_code = own_code_text(par.display, nullptr, n.a->is_checkpoint ? nullptr : n.a, std::string());
    const pruning_gap* gap_a = prior_a ? r_.pruning_a.between(par.a, prior_a, n.a) : nullptr;
    const pruning_gap* gap_b = prior_b ? r_.pruning_b.between(par.b, prior_b, n.b) : nullptr;
    const auto tail = prior_a ? unrecorded_tail(*prior_a) : std::vector<std::pair<const tree_node*, const tree_node*>>{};
    auto tail_alternatives = [&](std::size_t from) {
      for (std::size_t i = from; i < tail.size(); ++i)
        p.alternatives.push_back(own_code_text(tail[i].first->path, tail[i].second, nullptr, std::string()));
    };
    if (gap_a || gap_b) {
      p.kind = "left_out";
      p.pruned = (gap_a ? gap_a : gap_b)->text();
      const char* which = gap_a && gap_b ? "both files" : gap_a ? "A" : "B";
      p.text = p.pruned + ", which pruning left out of " + which;
      // the kept block before the gap, in a file that left the gap (its tail, when it records no outputs)
      for (const auto& [m, after] : unrecorded_tail(gap_a ? *prior_a : *prior_b))
        p.alternatives.push_back(own_code_text(m->path, after, nullptr, std::string()));
      p.alternatives.push_back(parent_code);
      return;
    }
    if (prior_b != nullptr && paired(paired_b_, prior_b) < 0) {  // a module only B records, just before
      p.kind = "one_side";
      p.module = prior_b->path;
      p.in_b = prior_b;
      p.text = node_name(*prior_b) + ", which only B records";
      p.alternatives.push_back(parent_code);
      return;
    }
    if (prior_a != nullptr && paired(paired_a_, prior_a) < 0) {
      p.kind = "one_side";
      p.module = prior_a->path;
      p.text = node_name(*prior_a) + ", which only A records";
      p.alternatives.push_back(parent_code);
      return;
    }
    p.kind = cp.empty() ? "own_code" : "checkpoint";
    p.checkpoint = cp;
    if (prior_a == nullptr || tail.empty()) {
      p.module = par.a->path;
      p.node = n.parent;
      p.in_b = par.b;
      p.after = prior_a ? node_name(*prior_a) : std::string();
      p.before = prior_a || !cp.empty() ? std::string() : n.display;
      p.text = own_code_text(par.display, prior_a, prior_a || !cp.empty() ? nullptr : n.a, cp);
      if (!cp.empty()) p.text += " (everything before the checkpoint matches, its tensor diverges)";
      else if (prior_a) p.text += " (the outputs of " + node_name(*prior_a) + " match, the inputs of " + n.display + " differ)";
      else p.text += " (its inputs match, the inputs of its first submodule " + n.display + " differ)";
      return;
    }
    // the module before records no outputs (HuggingFace's format for modules with children): its own code after
    // its last child is the likeliest; the code around it the alternatives
    p.inferred = true;
    p.module = tail.front().first->path;
    p.node = paired(paired_a_, tail.front().first);
    p.in_b = p.node >= 0 ? r_.nodes[static_cast<std::size_t>(p.node)].b : nullptr;
    p.after = tail.front().second ? node_name(*tail.front().second) : std::string();
    p.text = own_code_text(tail.front().first->path, tail.front().second, nullptr, std::string()) +
             " (inferred: the files do not record the outputs of " + prior_a->path + ")";
    tail_alternatives(1);
    p.alternatives.push_back(cp.empty() ? parent_code : own_code_text(par.display, prior_a, nullptr, cp));
  }

  void finish() {
    r_.origin_a = find_origin(a_, o_.use_extras);
    r_.origin_b = find_origin(b_, o_.use_extras);
    r_.detection_a = r_.origin_a.detection;
    r_.detection_b = r_.origin_b.detection;
    if (r_.first < 0) return;
    const tensor_result& t = r_.tensors[static_cast<std::size_t>(r_.first)];
    const node_result& n = r_.nodes[t.node];
    likely_producer& p = r_.likely;
    p.present = true;
    if (t.param) {  // a parameter that differs: named before the activations it feeds
      p.kind = "parameter";
      p.module = n.a->path;
      p.node = static_cast<long>(t.node);
      p.in_b = n.b;
      p.parameter = t.label;
      p.text = parameter_change(t) + " (a parameter that differs between the runs; the activations it feeds come after it)";
    } else if (!t.input && n.a->is_checkpoint && n.parent >= 0) {
      between(p, t.node);
    } else if (!t.input) {
      p.module = n.a->path;
      p.node = static_cast<long>(t.node);
      p.in_b = n.b;
      if (n.a->children.empty()) {
        p.kind = "outputs";
        p.text = n.display + " (its inputs match, its outputs diverge)";
      } else {
        p.kind = "own_code";
        const tree_node* last = &n.a->children.back();
        p.after = node_name(*last);
        p.text = own_code_text(n.display, last, nullptr, std::string()) +
                 " (its inputs and its submodules' outputs match, its outputs diverge)";
        for (const auto& [m, after] : unrecorded_tail(*last)) {
          p.inferred = true;
          p.alternatives.push_back(own_code_text(m->path, after, nullptr, std::string()));
        }
      }
    } else if (n.parent < 0) {
      p.kind = "model_inputs";
      p.text = "none: the root's inputs already differ (the runs were fed different inputs)";
    } else {
      between(p, t.node);
      // the run whose NaN/Inf the other lacks recorded where it was produced: the recorder's word, when that
      // detection comes before the module whose inputs first differ
      const char side = nonfinite_side(t);
      const origin& o = side == 'B' ? r_.origin_b : r_.origin_a;
      const tree_file& f = side == 'B' ? b_ : a_;
      const tree_node* here = side == 'B' ? n.b : n.a;
      const bool placed = o.producer != nullptr && o.at != nullptr &&
                          enter_position(f.root, o.at) <= enter_position(f.root, here);
      const bool unplaced = o.producer == nullptr && !o.module.empty();  // its module is not in the tree
      if (side != 0 && o.recorded && (placed || unplaced)) {
        likely_producer q;
        q.present = true;
        q.kind = "recorded";
        q.source = std::string("recorder of ") + side;
        q.module = o.module;
        q.node = o.producer ? paired(side == 'B' ? paired_b_ : paired_a_, o.producer) : -1;
        q.in_b = side == 'B' ? o.producer : (q.node >= 0 ? r_.nodes[static_cast<std::size_t>(q.node)].b : nullptr);
        q.after = o.after;
        q.checkpoint = o.checkpoint;
        const char other = side == 'B' ? 'A' : 'B';
        q.text = o.text + " (" + side + "'s recorder: produced here" +
                 (o.producer == nullptr ? std::string("; the module is in neither compared tree")
                  : q.node < 0          ? std::string("; ") + other + " does not record " + o.module
                                        : std::string()) +
                 ")";
        const bool same = p.module == q.module || p.pruned == q.module || p.pruned.compare(0, q.module.size() + 1, q.module + " ") == 0;
        if (!same) q.alternatives.push_back(p.text);
        p = std::move(q);
      }
    }
    r_.producer = p.node;
    if (r_.producer < 0) {
      for (std::size_t i = t.node; i-- > 0;)
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
  std::map<const tree_node*, long> paired_a_, paired_b_;
};

/// The likely producer as the reports print it: its text, then what else it may be.
inline std::string likely_producer_text(const report& r) {
  if (r.first < 0 || !r.likely.present) return std::string();
  std::string s = r.likely.text;
  if (!r.likely.alternatives.empty()) {
    s += "; it may also be ";
    for (std::size_t i = 0; i < r.likely.alternatives.size(); ++i) s += (i ? ", or " : "") + r.likely.alternatives[i];
  }
  return s;
}

/// What each file says and shows about pruning (report::pruning_a, pruning_b).
inline void find_pruning(const tree_file& a, const tree_file& b, const diff_options& o, report& r) {
  r.pruning_a = pruning_of(a);
  r.pruning_b = pruning_of(b);
  if (o.prune) {  // --prune-layers: whatever the files say, both trees are pruned now
    r.pruning_a.gaps = pruning_gaps(a.root);
    r.pruning_b.gaps = pruning_gaps(b.root);
  }
}

/// The note on pruning: which files left middle layer blocks out (the producer may be among them).
inline void pruning_notes(const diff_options& o, report& r) {
  const bool la = r.pruning_a.left_out(), lb = r.pruning_b.left_out();
  if (!la && !lb) return;
  std::string which;
  if (la && lb) {
    which = std::string(o.prune ? "both trees were pruned by --prune-layers" : "both files were pruned") +
            " (middle layer blocks left out): the producer may be in a block that is not in either file";
    if (!o.prune) which += "; write them with tree_options::with_pruning(false)";
  } else {
    const char* side = la ? "A" : "B";
    which = std::string(side) + " was pruned (middle layer blocks left out): the producer may be in a block that is "
            "not in " + side + "; write it with tree_options::with_pruning(false)";
  }
  std::string left;
  if (la) left += "A: " + r.pruning_a.text();
  if (lb) left += std::string(la ? "; " : "") + "B: " + r.pruning_b.text();
  which += " (left out: " + left + ")";
  if ((la && r.pruning_a.flag < 0) || (lb && r.pruning_b.flag < 0))
    which += "; a file without nanscope's \"pruned\" key is taken as pruned from the gaps in its block numbers";
  r.notes.push_back(which);
}

/// Compares two loaded trees (pruning them in place first when asked).
inline report diff_trees(tree_file& a, tree_file& b, const diff_options& o) {
  report r;
  if (o.prune) {
    prune_layers(a.root);
    prune_layers(b.root);
  }
  find_pruning(a, b, o, r);
  differ(a, b, o, r).run();
  pruning_notes(o, r);
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
