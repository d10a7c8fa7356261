// How deep a layer tree may nest (include/nanscope/tree_limits.hpp): what the tree writer writes, the readers of
// nanscope-diff (tools/diff) and nanscope report (tools/cli/report_model.hpp) read.
//  - the shared limit and its text;
//  - a tree nanscope::max_tree_depth = 1000 modules deep, written by the real writer through 1000 nested
//    nanscope::scope objects (tests/diff/deep_tree.hpp; the innermost module records tensors of max_rank
//    dimensions), is read, compared (nanscope-diff's statistical and bitwise walks, layer pruning) and turned into
//    the report's model, in a thread whose stack is 512 KiB: nothing recursive is left whose depth grows with the
//    tree (the old recursive pairing of nodes alone needed about 800 bytes per module);
//  - the JSON nesting bound is exactly what the writer's deepest tree needs (its FULL_TENSORS file in the numeric
//    style), one module more is refused with nanscope::tree_depth_error()'s text (by the readers and by the writer),
//    one JSON level more with "nested more than 2010 levels deep";
//  - inputs and values nested up to the JSON bound are read without recursion.
// The same trees are read by the programs in tests/diff (diff.deep_*) and tests/report (report_depth).
#include <doctest/doctest.h>
#include <nanscope/tree_limits.hpp>

#include "support/files.hpp"

#include <string>

TEST_CASE("tree limits: the module depth writer and readers share, and the text of a refusal") {
  CHECK(nanscope::max_tree_depth == 1000);
  CHECK(nanscope::tree_depth_error() == "the layer tree is nested more than 1000 modules deep");
}

#if NANSCOPE_TEST_HAVE_JSON && defined(__unix__)
#include "../diff/deep_tree.hpp"
#include "../../tools/cli/report_model.hpp"
#include "../../tools/diff/bitwise.hpp"
#include "../../tools/diff/diff.hpp"

#include <pthread.h>
#include <unistd.h>

#include <cstddef>
#include <exception>
#include <fstream>
#include <functional>
#include <vector>

namespace ns_tree_depth {

/// Runs `fn` on a thread with a stack of `bytes` and returns what it threw ("" when nothing). A reader that
/// recursed once per module would overflow such a stack (SIGSEGV: the test program dies, which fails the run).
inline std::string run_on_small_stack(std::size_t bytes, const std::function<void()>& fn) {
  struct job {
    const std::function<void()>* fn;
    std::string error;
  } j{&fn, std::string()};
  pthread_attr_t attr;
  REQUIRE(::pthread_attr_init(&attr) == 0);
  REQUIRE(::pthread_attr_setstacksize(&attr, bytes) == 0);
  pthread_t t;
  const int rc = ::pthread_create(
      &t, &attr,
      [](void* p) -> void* {
        auto* jp = static_cast<job*>(p);
        try {
          (*jp->fn)();
        } catch (const std::exception& e) {
          jp->error = e.what();
        } catch (...) {
          jp->error = "an exception of unknown type";
        }
        return nullptr;
      },
      &j);
  ::pthread_attr_destroy(&attr);
  REQUIRE(rc == 0);
  REQUIRE(::pthread_join(t, nullptr) == 0);
  return j.error;
}

/// The most JSON containers (objects, arrays) one inside the other in a text (strings skipped).
inline std::size_t json_depth(const std::string& s) {
  std::size_t depth = 0, most = 0;
  bool in_string = false, escaped = false;
  for (const char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > most) most = depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return most;
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  REQUIRE_MESSAGE(f.good(), path);
}

/// The modules from the root to the deepest node, root included.
inline std::size_t module_depth(const nsdiff::tree_node& root) {
  std::size_t most = 0;
  std::vector<std::pair<const nsdiff::tree_node*, std::size_t>> todo{{&root, 1}};
  while (!todo.empty()) {
    const auto [n, d] = todo.back();
    todo.pop_back();
    if (d > most) most = d;
    for (const auto& c : n->children) todo.emplace_back(&c, d + 1);
  }
  return most;
}

/// The files a test wrote, removed at the end (the deep trees are about 14 MB each: Python's indent=2 layout).
struct cleanup {
  std::vector<std::string> files, dirs;
  ~cleanup() {
    for (const auto& f : files) ::unlink(f.c_str());
    for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) ::rmdir(it->c_str());
  }
};

// ThreadSanitizer's instrumentation takes several times the stack of a plain frame (the reading of a whole file
// alone overflowed 512 KiB under it): a stack 4x larger there still fails a reader that recursed per module.
#if defined(__SANITIZE_THREAD__)
constexpr std::size_t small_stack = std::size_t{2048} << 10;
#else
constexpr std::size_t small_stack = std::size_t{512} << 10;
#endif

}  // namespace ns_tree_depth

TEST_CASE("tree limits: a tree as deep as the writer writes is read, compared and reported without deep recursion") {
  namespace td = ns_tree_depth;
  td::cleanup files;
  const std::string dir = nstest::make_temp_dir("tree_depth");
  files.dirs.push_back(dir);
  const char* const full = "/Deep_debug_tree_FULL_TENSORS.json";
  const char* const summary = "/Deep_debug_tree_SUMMARY.json";
  struct run {
    const char* sub;
    nanscope::tree_style style;
    bool perturb;
  };
  for (const run& r : {run{"a", nanscope::tree_style::numeric, false}, run{"b", nanscope::tree_style::numeric, true},
                       run{"torch", nanscope::tree_style::torch_repr, false}}) {
    nstest_deep::deep_tree_options o;
    o.directory = dir + "/" + r.sub;
    o.style = r.style;
    o.perturb = r.perturb;
    files.dirs.push_back(o.directory);
    files.files.push_back(o.directory + full);
    files.files.push_back(o.directory + summary);
    REQUIRE_MESSAGE(nstest_deep::write_deep_tree(o) == "", r.sub);
  }

  // The JSON bound of the readers is what the deepest tree the writer can write needs: its FULL_TENSORS file in
  // the numeric style (a value of max_rank arrays in the innermost module's inputs) reaches it exactly.
  CHECK(td::json_depth(nstest::read_existing(dir + "/a" + full)) == nsdiff::max_nesting);
  CHECK(td::json_depth(nstest::read_existing(dir + "/a" + summary)) < nsdiff::max_nesting);

  const std::string inner = nstest_deep::deep_module_path(nanscope::max_tree_depth);
  std::size_t depth_a = 0, nodes_a = 0, tensors_a = 0, nodes_torch = 0;
  std::string first_module, first_label, producer;
  std::size_t bitwise_tensors = 0, pruned_nodes = 0;
  std::size_t report_nodes = 0, report_map = 0;
  long report_first = -2;
  std::string report_first_path;
  const std::string error = td::run_on_small_stack(td::small_stack, [&]() {
    nsdiff::tree_file a = nsdiff::load_tree_file(dir + "/a" + full);
    nsdiff::tree_file b = nsdiff::load_tree_file(dir + "/b" + full);
    const nsdiff::tree_file t = nsdiff::load_tree_file(dir + "/torch" + full);
    depth_a = td::module_depth(a.root);
    nodes_a = a.nodes;
    tensors_a = a.tensors;
    nodes_torch = t.nodes;
    bitwise_tensors = nsdiff::bitwise_compare(a, b).tensors_a;
    const nsdiff::report r = nsdiff::diff_trees(a, b, nsdiff::diff_options{});
    if (r.first >= 0) {
      const nsdiff::tensor_result& f = r.tensors[static_cast<std::size_t>(r.first)];
      first_module = r.nodes[f.node].display;
      first_label = f.label;
    }
    if (r.producer >= 0) producer = r.nodes[static_cast<std::size_t>(r.producer)].display;
    nsdiff::diff_options prune;
    prune.prune = true;
    nsdiff::tree_file s = nsdiff::load_tree_file(dir + "/a" + summary);
    pruned_nodes = nsdiff::diff_trees(s, a, prune).nodes.size();

    nanscope_report::model m;
    nanscope_report::read_input(m, dir + "/a" + full);
    nanscope_report::read_input(m, dir + "/b" + full);
    report_nodes = m.trees[0].nodes.size();
    report_first = m.trees[0].first_node;
    if (report_first >= 0) report_first_path = m.trees[0].nodes[static_cast<std::size_t>(report_first)].path;
    report_map = nanscope_report::diff_node_map(m.diff_inputs[0], m.diff_inputs[1]).size();
  });  // the trees are destroyed in the thread too
  REQUIRE_MESSAGE(error == "", error);
  CHECK(depth_a == nanscope::max_tree_depth);
  CHECK(nodes_a == nanscope::max_tree_depth);
  CHECK(tensors_a == 5);  // the root's input, the innermost module's two inputs and two outputs
  CHECK(nodes_torch == nanscope::max_tree_depth);
  CHECK(bitwise_tensors == 5);
#if !defined(NANSCOPE_TEST_FAST_MATH)
  // the tools find NaN with std::isnan, which -ffast-math folds away (the fastmath preset compiles their headers
  // into this test; the tools themselves are never built with it)
  CHECK(first_module == inner);
  CHECK(first_label == "outputs[0]");
  CHECK(producer == inner);
#endif
  CHECK(pruned_nodes == nanscope::max_tree_depth);
  CHECK(report_nodes == nanscope::max_tree_depth);
#if !defined(NANSCOPE_TEST_FAST_MATH)
  CHECK(report_first == static_cast<long>(nanscope::max_tree_depth) - 1);  // the innermost module's NaN output
  CHECK(report_first_path == inner);
#endif
  CHECK(report_map == nanscope::max_tree_depth);
}

TEST_CASE("tree limits: one module or one JSON level more than a tree at the limit is refused while parsing") {
  namespace td = ns_tree_depth;
  td::cleanup files;
  const std::string dir = nstest::make_temp_dir("tree_depth");
  files.dirs.push_back(dir);
  auto file = [&](const char* name, const std::string& text) {
    const std::string p = dir + "/" + name;
    td::write_file(p, text);
    files.files.push_back(p);
    return p;
  };
  const std::size_t limit = nanscope::max_tree_depth;
  const std::string at_limit = file("limit.json", nstest_deep::hand_built_tree(limit, nanscope::max_rank));
  const std::string deeper = file("deeper.json", nstest_deep::hand_built_tree(limit + 1, 1));
  const std::string json_deeper = file("rank9.json", nstest_deep::hand_built_tree(limit, nanscope::max_rank + 1));
  // a sibling pair: the FULL_TENSORS file one module too deep is refused by the pair check's streaming reader too
  const std::string pair_dir = dir + "/pair";
  REQUIRE(::mkdir(pair_dir.c_str(), 0755) == 0);
  files.dirs.push_back(pair_dir);
  const std::string sibling = pair_dir + "/Deep_debug_tree_FULL_TENSORS.json";
  td::write_file(sibling, nstest_deep::hand_built_tree(limit + 1, 1));
  files.files.push_back(sibling);
  CHECK(td::json_depth(nstest::read_existing(at_limit)) == nsdiff::max_nesting);
  CHECK(td::json_depth(nstest::read_existing(json_deeper)) == nsdiff::max_nesting + 1);

  std::size_t limit_nodes = 0;
  std::string deeper_error, json_error, report_error, report_json_error, pair_error;
  const std::string error = td::run_on_small_stack(td::small_stack, [&]() {
    limit_nodes = nsdiff::load_tree_file(at_limit).nodes;
    try {
      nsdiff::load_tree_file(deeper);
    } catch (const nsdiff::bad_input& e) {
      deeper_error = e.what();
    }
    try {
      nsdiff::load_tree_file(json_deeper);
    } catch (const nsdiff::bad_input& e) {
      json_error = e.what();
    }
    try {
      nanscope_report::model m;
      nanscope_report::read_input(m, deeper);
    } catch (const nanscope_report::input_error& e) {
      report_error = e.what();
    }
    try {
      nanscope_report::model m;
      nanscope_report::read_input(m, json_deeper);
    } catch (const nanscope_report::input_error& e) {
      report_json_error = e.what();
    }
    try {
      nsdiff::read_pair(sibling, nsdiff::input_limits{});
    } catch (const nsdiff::bad_input& e) {
      pair_error = e.what();
    }
  });
  REQUIRE_MESSAGE(error == "", error);
  CHECK(limit_nodes == limit);
  CHECK(deeper_error == nanscope::tree_depth_error());
  CHECK(json_error == "nested more than 2010 levels deep");
  CHECK(report_error == "nanscope: file '" + deeper + "': " + nanscope::tree_depth_error());
  CHECK(report_json_error == "nanscope: file '" + json_deeper + "': nested more than 2010 levels deep");
  CHECK(pair_error == nanscope::tree_depth_error());

  // the writer refuses such a tree itself, with the same text (tree.hpp)
  nstest_deep::deep_tree_options o;
  o.directory = dir + "/written";
  o.depth = limit + 1;
  files.dirs.push_back(o.directory);
  const std::string written = nstest_deep::write_deep_tree(o);
  CHECK_MESSAGE(written.find(nanscope::tree_depth_error()) != std::string::npos, written.substr(0, 200));
}

TEST_CASE("tree limits: inputs and values nested up to the JSON bound are read without recursion") {
  namespace td = ns_tree_depth;
  td::cleanup files;
  const std::string dir = nstest::make_temp_dir("tree_depth");
  files.dirs.push_back(dir);
  // the root object, "inputs" {, "args" [ and then arrays down to the bound, a string at the bottom
  const std::size_t lists = nsdiff::max_nesting - 3;
  std::string nested_args = "{\"module_path\": \"M\", \"inputs\": {\"args\": [";
  nested_args += std::string(lists, '[') + "\"x\"" + std::string(lists, ']') + "]}}";
  // a tensor's numeric value nested down to the bound: the root, "outputs" {, then the value's arrays
  const std::size_t values = nsdiff::max_nesting - 2;
  std::string nested_value = "{\"module_path\": \"M\", \"outputs\": {\"shape\": [1], \"dtype\": \"float32\", \"value\": ";
  nested_value += std::string(values, '[') + "1.5" + std::string(values, ']') + "}}";
  const std::string args_path = dir + "/args.json", value_path = dir + "/value.json";
  td::write_file(args_path, nested_args);
  td::write_file(value_path, nested_value);
  files.files = {args_path, value_path};
  CHECK(td::json_depth(nested_args) == nsdiff::max_nesting);
  CHECK(td::json_depth(nested_value) == nsdiff::max_nesting);

  std::size_t label_size = 0, slots = 0;
  std::string value_error;
  const std::string error = td::run_on_small_stack(td::small_stack, [&]() {
    const nsdiff::tree_file f = nsdiff::load_tree_file(args_path);
    slots = f.root.inputs.size();
    if (slots == 1) label_size = f.root.inputs[0].label.size();
    try {
      nsdiff::load_tree_file(value_path);
    } catch (const nsdiff::bad_input& e) {
      value_error = e.what();
    }
  });
  REQUIRE_MESSAGE(error == "", error);
  CHECK(slots == 1);
  CHECK(label_size == std::string("inputs.args[0]").size() + 3 * lists);  // "[0]" per list
  CHECK(value_error == "outputs.value: values nested deeper than the shape [1]");
}
#endif
