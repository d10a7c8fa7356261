// The native layer tree names the producer (issue 30, items 2 and 3): a new user's TinyMLP whose blocks.1 makes
// an Inf in its own code (a residual add and an fp16 cast, after its last child fc2). With the default options
// the tree keeps every module's outputs, checkpoints as nodes in call order, the recorder's verdict on the
// detecting node and in the root, and pruning keeps the block that holds the Inf; with the default throw policy
// and no try/catch the files are committed before the exception leaves (std::terminate unwinds nothing). The
// HuggingFace-compatible tree (extras off) keeps HuggingFace's shape. Files are read with nlohmann-json.
#include <doctest/doctest.h>
#include "support/files.hpp"

#include <nanscope/macros.hpp>
#include <nanscope/tree.hpp>

#include "support/recorder_support.hpp"

#if NANSCOPE_TEST_HAVE_JSON
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace native_tree_test {

using json = nlohmann::json;

/// A small engine of its own: fp16 activations stored as float (cast with round-to-fp16 semantics), MLP blocks
/// of two linear layers. Block `bad` doubles its residual past fp16's range in its own code, after fc2.
struct tiny_mlp {
  nanscope::recorder* rec = &nanscope::default_recorder();
  int blocks = 5;
  int bad = 1;
  bool checkpoints = true;
  static float to_f16(float v) {  // the cast an engine does: finite values past 65504 become inf
    return std::fabs(v) > 65504.0f ? std::copysign(nsrec::pos_inf_f(), v) : v;
  }
  std::vector<float> linear(const std::string& name, const std::vector<float>& x, float w) const {
    NANSCOPE_SCOPE_TO(*rec, name, "Linear");
    NANSCOPE_INPUT_TO(*rec, x);
    std::vector<float> wt(4, w);
    NANSCOPE_PARAM_TO(*rec, wt, "weight");
    std::vector<float> y(x);
    for (float& v : y) v *= w;
    NANSCOPE_OUTPUT_TO(*rec, y);
    return y;
  }
  std::vector<float> block(int i, const std::vector<float>& x) const {
    NANSCOPE_SCOPE_TO(*rec, "blocks." + std::to_string(i), "Block");
    NANSCOPE_INPUT_TO(*rec, x);
    std::vector<float> h = linear("fc1", x, 1.5f);
    h = linear("fc2", h, 0.5f);
    std::vector<float> y(x.size());
    for (std::size_t k = 0; k < x.size(); ++k) y[k] = x[k] + h[k];  // the residual add
    if (i == bad) y[2] = y[2] * 40000.0f;
    for (float& v : y) v = to_f16(v);  // the fp16 cast
    if (checkpoints) NANSCOPE_DETECT_OVERFLOW_TO(*rec, y, "after the residual add");
    NANSCOPE_OUTPUT_TO(*rec, y);
    return y;
  }
  std::vector<float> run(const std::vector<float>& x) const {
    NANSCOPE_SCOPE_TO(*rec, "", "TinyMLP");
    NANSCOPE_INPUT_TO(*rec, x);
    std::vector<float> h = x;
    for (int i = 0; i < blocks; ++i) h = block(i, h);
    NANSCOPE_OUTPUT_TO(*rec, h);
    return h;
  }
};

inline json load(const std::string& path) { return json::parse(nstest::read_existing(path)); }

/// The node of `path` (and, for a checkpoint, its text) in call order below `n`; nullptr if absent.
inline const json* find(const json& n, const std::string& path, const std::string& checkpoint = std::string()) {
  const bool is_cp = n.contains("nanscope_checkpoint");
  if (n["module_path"] == path && (checkpoint.empty() ? !is_cp : (is_cp && n["nanscope_checkpoint"] == checkpoint)))
    return &n;
  if (n.contains("children"))
    for (const auto& c : n["children"])
      if (const json* f = find(c, path, checkpoint)) return f;
  return nullptr;
}

inline std::vector<std::string> child_paths(const json& n) {
  std::vector<std::string> out;
  for (const auto& c : n["children"])
    out.push_back(c["module_path"].get<std::string>() +
                  (c.contains("nanscope_checkpoint") ? " @" + c["nanscope_checkpoint"].get<std::string>() : ""));
  return out;
}

inline nanscope::recorder_options quiet_continue() {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  return o;
}

}  // namespace native_tree_test

TEST_CASE("native tree: every module's outputs, checkpoints in call order, the verdict, pruning keeps the producer") {
  namespace nt = native_tree_test;
  const std::string dir = nstest::make_temp_dir("native");
  nanscope::recorder rec(nt::quiet_continue());
  nt::tiny_mlp m;
  m.rec = &rec;
  m.blocks = 5;
  m.bad = 2;  // a middle block: pruning would drop it
  {
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0));
    m.run(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f});
    REQUIRE(w.trees_written() == 1);
  }
  for (const char* file : {"/TinyMLP_debug_tree_SUMMARY.json", "/TinyMLP_debug_tree_FULL_TENSORS.json"}) {
    CAPTURE(file);
    const nt::json t = nt::load(dir + file);
    // pruning keeps the first and last blocks and those that hold the Inf (made in 2, carried by 3): only 1 goes
    CHECK(nt::child_paths(t) ==
          std::vector<std::string>{"TinyMLP.blocks.0", "TinyMLP.blocks.2", "TinyMLP.blocks.3", "TinyMLP.blocks.4"});
    const nt::json* b2 = nt::find(t, "TinyMLP.blocks.2");
    REQUIRE(b2 != nullptr);
    // a non-leaf module keeps its outputs: the Inf shows on blocks.2, made after fc2
    REQUIRE(b2->contains("outputs"));
    CHECK((*b2)["outputs"]["health"]["pos_inf"] == 1);
    CHECK(nt::child_paths(*b2) == std::vector<std::string>{"TinyMLP.blocks.2.fc1", "TinyMLP.blocks.2.fc2",
                                                           "TinyMLP.blocks.2 @after the residual add"});
    const nt::json* cp = nt::find(t, "TinyMLP.blocks.2", "after the residual add");
    REQUIRE(cp != nullptr);
    CHECK((*cp)["outputs"]["health"]["pos_inf"] == 1);
    CHECK((*cp)["inputs"] == nt::json::object());
    CHECK_FALSE(cp->contains("children"));
    // the detection fired at the checkpoint (the first non-finite tensor recorded): the verdict in the root
    const nt::json& det = t["nanscope"]["detection"];
    CHECK(det["module_path"] == "TinyMLP.blocks.2");
    CHECK(det["checkpoint"] == "after the residual add");
    CHECK(det["produced_here"] == true);  // the block's inputs were finite
    CHECK(det["after"] == "TinyMLP.blocks.2.fc2");
    CHECK(det["pos_inf"] == 1);
    CHECK(det["step"] == 0);
    CHECK(t["nanscope"]["complete"] == true);
    CHECK_FALSE(t["nanscope"].contains("ended_by"));
    // the fc2 weights are in the tree
    CHECK(nt::find(t, "TinyMLP.blocks.2.fc2")->at("parameters").contains("weight"));
  }
  nstest::remove_tree(dir);
}

TEST_CASE("native tree: a module's own output detection marks its node with the verdict and the last child") {
  namespace nt = native_tree_test;
  const std::string dir = nstest::make_temp_dir("native");
  nanscope::recorder rec(nt::quiet_continue());
  nt::tiny_mlp m;
  m.rec = &rec;
  m.blocks = 3;
  m.checkpoints = false;  // the block's output is the first non-finite tensor recorded
  {
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0));
    m.run(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f});
  }
  const nt::json t = nt::load(dir + "/TinyMLP_debug_tree_SUMMARY.json");
  const nt::json* b1 = nt::find(t, "TinyMLP.blocks.1");
  REQUIRE(b1 != nullptr);
  REQUIRE(b1->contains("nanscope_detection"));
  const nt::json& d = (*b1)["nanscope_detection"];
  CHECK(d["tensor"] == "output");
  CHECK(d["produced_here"] == true);
  CHECK(d["after"] == "TinyMLP.blocks.1.fc2");
  CHECK(t["nanscope"]["detection"]["module_path"] == "TinyMLP.blocks.1");
  CHECK_FALSE(t["nanscope"]["detection"].contains("checkpoint"));
  // blocks.2 carries it: its input is non-finite, no second verdict
  CHECK_FALSE(nt::find(t, "TinyMLP.blocks.2")->contains("nanscope_detection"));
  CHECK(nt::find(t, "TinyMLP.blocks.2")->at("inputs")["args"][0]["health"]["pos_inf"] == 1);
  nstest::remove_tree(dir);
}

TEST_CASE("HuggingFace-compatible tree (extras off): outputs on leaves only, no checkpoint nodes, HF's pruning") {
  namespace nt = native_tree_test;
  const std::string dir = nstest::make_temp_dir("native");
  nanscope::recorder rec(nt::quiet_continue());
  nt::tiny_mlp m;
  m.rec = &rec;
  m.blocks = 5;
  m.bad = 2;
  {
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).with_extras(false));
    m.run(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f});
  }
  const nt::json t = nt::load(dir + "/TinyMLP_debug_tree_SUMMARY.json");
  CHECK(nt::child_paths(t) == std::vector<std::string>{"TinyMLP.blocks.0", "TinyMLP.blocks.4"});
  const nt::json* b0 = nt::find(t, "TinyMLP.blocks.0");
  REQUIRE(b0 != nullptr);
  CHECK_FALSE(b0->contains("outputs"));
  CHECK(nt::child_paths(*b0) == std::vector<std::string>{"TinyMLP.blocks.0.fc1", "TinyMLP.blocks.0.fc2"});
  CHECK_FALSE(t.contains("nanscope"));
  nstest::remove_tree(dir);
}

#if NANSCOPE_TEST_HAVE_FORK
TEST_CASE("evidence first: an uncaught detection leaves a committed tree, no temporaries, the report printed once") {
  // The default throw policy and no try/catch: the program ends in std::terminate, which unwinds nothing. The old
  // writer left two 0-byte temporaries and no tree, and the report was printed twice (by the recorder and in
  // what()).
  namespace nt = native_tree_test;
  const std::string dir = nstest::make_temp_dir("native");
  const std::string err = dir + "/stderr.txt";
  const nsrec::child_end e = nsrec::exit_of_child([&] {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    // the default recorder with its default options: throw_exception, reports to stderr
    nanscope::tree_writer w(nanscope::default_recorder(), nanscope::tree_options{}.in(dir + "/trees").with_rank(0));
    nt::tiny_mlp m;
    m.blocks = 3;
    m.checkpoints = false;
    // nobody catches it: an exception leaving a noexcept function is std::terminate, without unwinding (as one
    // leaving main() is)
    [&]() noexcept { m.run(std::vector<float>{0.5f, -1.0f, 2.0f, 0.25f}); }();
  });
  REQUIRE(e.ran);
  CHECK(e.signaled);
  CHECK(e.signal == SIGABRT);
  const std::vector<std::string> names = nstest::list_dir(dir + "/trees");
  for (const auto& n : names) CHECK_MESSAGE(n.find(".tmp.") == std::string::npos, n);  // no temporary left
  const nt::json t = nt::load(dir + "/trees/TinyMLP_debug_tree_SUMMARY.json");
  const nt::json full = nt::load(dir + "/trees/TinyMLP_debug_tree_FULL_TENSORS.json");
  CHECK(t["nanscope_pair"] == full["nanscope_pair"]);
  CHECK(t["nanscope"]["complete"] == false);
  CHECK(t["nanscope"]["ended_by"] == "detection");
  CHECK(t["nanscope"]["detection"]["module_path"] == "TinyMLP.blocks.1");
  CHECK(t["nanscope"]["detection"]["after"] == "TinyMLP.blocks.1.fc2");
  // the tree ends at the detection: blocks.2 never ran
  CHECK(nt::child_paths(t) == std::vector<std::string>{"TinyMLP.blocks.0", "TinyMLP.blocks.1"});
  CHECK(nt::find(t, "TinyMLP.blocks.1")->at("outputs")["health"]["pos_inf"] == 1);
  const std::string text = nstest::read_text(err);
  CHECK(nsrec::count_of(text, "=== nanscope: inf/nan detected ===") == 1);
  // what(), as std::terminate prints it: one short line that points to the report
  CHECK(text.find("what():  nanscope: 1 +inf in 'blocks.1' output at step 0 (produced there); the report") !=
        std::string::npos);
  nstest::remove_tree(dir);
}
#endif

#endif  // NANSCOPE_TEST_HAVE_JSON
