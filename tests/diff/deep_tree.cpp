// nanscope_deep_tree DIR: writes the deep trees the nanscope-diff and nanscope report tests read (deep_tree.hpp):
//   DIR/a/      Deep_debug_tree_{SUMMARY,FULL_TENSORS}.json: nanscope::max_tree_depth modules deep, numeric style,
//               written by the real tree writer
//   DIR/b/      the same with one value of the innermost module's output changed
//   DIR/torch/  as a/, in the torch_repr style
//   DIR/hand_limit.json    built as text: max_tree_depth modules and a value of max_rank arrays (the deepest JSON
//                          the readers accept)
//   DIR/hand_deeper.json   built as text: one module more (refused: nanscope::tree_depth_error())
//   DIR/hand_rank9.json    built as text: max_tree_depth modules and a value of max_rank + 1 arrays (one JSON
//                          level past the limit)
// Exit status 0, or 1 with the writer's error on stderr.
#include "deep_tree.hpp"

#include <cstdio>
#include <fstream>
#include <string>

namespace {

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) std::fprintf(stderr, "nanscope_deep_tree: cannot write %s\n", path.c_str());
  return static_cast<bool>(f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: nanscope_deep_tree DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
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
    const std::string err = nstest_deep::write_deep_tree(o);
    if (!err.empty()) {
      std::fprintf(stderr, "nanscope_deep_tree: %s: %s\n", o.directory.c_str(), err.c_str());
      return 1;
    }
  }
  const std::size_t limit = nanscope::max_tree_depth;
  const bool ok = write_file(dir + "/hand_limit.json", nstest_deep::hand_built_tree(limit, nanscope::max_rank)) &&
                  write_file(dir + "/hand_deeper.json", nstest_deep::hand_built_tree(limit + 1, 1)) &&
                  write_file(dir + "/hand_rank9.json", nstest_deep::hand_built_tree(limit, nanscope::max_rank + 1));
  return ok ? 0 : 1;
}
