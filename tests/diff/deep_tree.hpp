// Writes a layer tree nested as deep as the tree writer allows (nanscope::max_tree_depth modules, root included),
// with the real writer (nanscope::tree_writer) through real nested nanscope::scope objects. The innermost module
// records the deepest values the writer writes: a tensor of nanscope::max_rank dimensions as a positional input,
// a named input, a parameter and two indexed outputs (a list), and its outputs hold a NaN; the root records one
// small input. (The files are large anyway: the writer indents by 2 spaces per JSON level, Python's indent=2.) Shared by the unit test
// tests/unit/tree_depth_test.cpp (which reads the tree in-process with the readers' code) and by
// nanscope_deep_tree (deep_tree.cpp), which writes the trees the nanscope-diff and nanscope report tests read.
#ifndef NANSCOPE_TESTS_DIFF_DEEP_TREE_HPP
#define NANSCOPE_TESTS_DIFF_DEEP_TREE_HPP

#include <nanscope/nanscope.hpp>
#include <nanscope/tree_limits.hpp>

#include <cstddef>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nstest_deep {

struct deep_tree_options {
  std::string directory;
  std::size_t depth = nanscope::max_tree_depth;  ///< nested modules, root included
  nanscope::tree_style style = nanscope::tree_style::numeric;
  bool perturb = false;  ///< change one value of the innermost module's first output (a diverged candidate)
};

/// The path the writer gives the module at depth `d` (1: the root): "Deep", "Deep.l", "Deep.l.l", ...
inline std::string deep_module_path(std::size_t d) {
  std::string p = "Deep";
  for (std::size_t i = 1; i < d; ++i) p += ".l";
  return p;
}

/// Writes one pass (Deep_debug_tree_SUMMARY.json and Deep_debug_tree_FULL_TENSORS.json in o.directory). Returns
/// the writer's error, or an empty string when the files were written.
inline std::string write_deep_tree(const deep_tree_options& o) {
  nanscope::recorder_options ro;
  ro.policy = nanscope::on_detect::print_and_continue;  // the NaN below is data, not a reason to stop
  ro.sink = [](std::string_view) {};
  nanscope::recorder rec(ro);
  std::string error;
  nanscope::tree_options to = nanscope::tree_options{}.in(o.directory).with_style(o.style).with_pruning(false);
  to.on_error = [&error](std::string_view e) { error.assign(e.data(), e.size()); };
  nanscope::tree_writer tree(rec, to);

  static const float input_values[4] = {0.5f, -1.25f, 3.0f, 2.0f};
  float output_values[4] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.5f, -4.0f};
  if (o.perturb) output_values[0] = 1.5f;
  float level_input[1] = {0.25f};
  // nanscope::max_rank dimensions: the deepest "value" (one JSON array per dimension) a tensor can have
  const auto deep = [](const float* data) {
    return nanscope::tensor_view::contiguous(data, nanscope::dtype::f32, {1, 1, 1, 1, 1, 1, 2, 2});
  };
  static_assert(nanscope::max_rank == 8, "the tensor above has nanscope::max_rank dimensions");

  std::vector<std::unique_ptr<nanscope::scope>> scopes;
  scopes.reserve(o.depth);
  for (std::size_t d = 1; d <= o.depth; ++d) {
    scopes.push_back(std::make_unique<nanscope::scope>(rec, d == 1 ? "" : "l", d == 1 ? "Deep" : "Level"));
    if (d == 1) scopes.back()->input(level_input);  // (tensors at every level: 80 MB of indentation per file)
  }
  nanscope::scope& inner = *scopes.back();
  inner.input(deep(input_values));
  inner.input(deep(input_values), "mask");
  inner.parameter(deep(input_values), "weight");
  inner.output(deep(output_values), 0);
  inner.output(deep(output_values), 1);
  while (!scopes.empty()) scopes.pop_back();  // innermost first, as automatic scopes end
  if (error.empty() && tree.trees_written() != 1) error = "the writer wrote no tree";
  return error;
}

/// A tree built as text (not by the writer): `modules` nested modules, each but the innermost with one small
/// input, the innermost with an input tensor whose numeric "value" nests `value_rank` arrays. Its deepest JSON
/// container is number 2 (modules - 1) + 1 + 3 + value_rank (the root object is 1): at modules =
/// nanscope::max_tree_depth and value_rank = nanscope::max_rank, the most the readers accept (2010).
inline std::string hand_built_tree(std::size_t modules, int value_rank) {
  const std::string small = "{\"shape\": [1], \"dtype\": \"torch.float32\", \"value\": [0.25]}";
  std::string shape = "[", value = "0.5";
  for (int i = 0; i < value_rank; ++i) {
    shape += i ? ", 1" : "1";
    value = "[" + value + "]";
  }
  shape += "]";
  std::string s;
  for (std::size_t d = 1; d <= modules; ++d) {
    s += "{\"module_path\": \"" + deep_module_path(d) + "\", \"inputs\": {\"args\": [";
    if (d < modules) {
      s += small + "]}, \"children\": [";
    } else {
      s += "{\"shape\": " + shape + ", \"dtype\": \"torch.float32\", \"value\": " + value + "}]}, \"outputs\": ";
      s += small + "}";
    }
  }
  for (std::size_t d = 1; d < modules; ++d) s += "]}";
  return s + "\n";
}

}  // namespace nstest_deep

#endif  // NANSCOPE_TESTS_DIFF_DEEP_TREE_HPP
