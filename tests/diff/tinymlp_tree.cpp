// nanscope_tinymlp_tree DIR: runs the TinyMLP of issue 30 item 2 through the real recorder and tree writer and
// writes its layer trees, for the nanscope-diff and nanscope report tests (the hand-built counterparts are
// fixtures/tinymlp, written by fixtures/make_fixtures.py with the same arithmetic).
//
// TinyMLP has blocks.0..2 (class Block), each with the children fc1 (Linear 4 -> 8) and fc2 (Linear 8 -> 4), their
// weights recorded as parameters. A block's own code, after fc2, adds the residual and casts to fp16:
// out = f16(x + scale * fc2(fc1(x))). In the runs with the Inf, blocks.1's own code has scale 1e6 (a porting bug):
// fc1 and fc2 match the good run, blocks.1's output holds +inf and -inf.
//
//   DIR/good, DIR/inf                  unpruned (tree_options::with_pruning(false))
//   DIR/good_pruned, DIR/inf_pruned    pruned (the default): the good run loses blocks.1, the other keeps it
//   DIR/w5000                          fc2's weight of blocks.1 at 5000 in one element (abs_max 0.27 -> 5000)
//   DIR/cp_good, DIR/cp_inf            blocks.1 takes a checkpoint "after residual" of its residual (fp16)
//   DIR/inf_thrown                     the throw_exception policy: the detection ends the pass at blocks.1
//   DIR/snap                           the snapshot of the inf run's detection (recorder_options::snapshot_dir)
// Each run writes TinyMLP_debug_tree_SUMMARY.json and _FULL_TENSORS.json in the numeric style with extras. Exit
// status 0, or 1 with the writer's error on stderr.
#include <nanscope/nanscope.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

constexpr int in_features = 4, hidden = 8, rows = 2, blocks = 3;

struct run_options {
  const char* name;
  bool inf = false;         ///< blocks.1's own code scales by 1e6
  bool w5000 = false;       ///< fc2's weight of blocks.1 has 5000 in one element
  bool checkpoint = false;  ///< blocks.1 checks its residual ("after residual")
  bool prune = false;
  bool thrown = false;  ///< the throw_exception policy
  bool snapshot = false;
};

float f32(double v) { return static_cast<float>(v); }

/// y[r] = sum_c w[r][c] * x[c], in float (sums of products rounded to float at the end, as the fixtures do).
std::vector<float> matvec(const std::vector<float>& w, int out, int in, const float* x) {
  std::vector<float> y(static_cast<std::size_t>(out));
  for (int r = 0; r < out; ++r) {
    double s = 0;
    for (int c = 0; c < in; ++c) s += static_cast<double>(w[static_cast<std::size_t>(r * in + c)]) * x[c];
    y[static_cast<std::size_t>(r)] = f32(s);
  }
  return y;
}

nanscope::tensor_view view(const std::vector<float>& v, std::int64_t r, std::int64_t c) {
  return nanscope::tensor_view::contiguous(v.data(), nanscope::dtype::f32, {r, c});
}
nanscope::tensor_view view(const std::vector<nanscope::half>& v, std::int64_t r, std::int64_t c) {
  return nanscope::tensor_view::contiguous(v.data(), nanscope::dtype::f16, {r, c});
}

/// One pass into `dir`. Returns the writer's error, or "".
std::string run(const std::string& dir, const run_options& o) {
  nanscope::recorder_options ro;
  ro.policy = o.thrown ? nanscope::on_detect::throw_exception : nanscope::on_detect::print_and_continue;
  ro.sink = [](std::string_view) {};
  if (o.snapshot) ro.snapshot_dir = dir + "/snap";
  nanscope::recorder rec(ro);
  std::string error;
  nanscope::tree_options to =
      nanscope::tree_options{}.in(dir + "/" + o.name).with_style(nanscope::tree_style::numeric).with_pruning(o.prune);
  to.on_error = [&error](std::string_view e) { error.assign(e.data(), e.size()); };
  nanscope::tree_writer tree(rec, to);

  std::vector<std::vector<float>> w1(blocks), w2(blocks);
  for (int b = 0; b < blocks; ++b) {
    for (int r = 0; r < hidden; ++r)
      for (int c = 0; c < in_features; ++c) w1[b].push_back(f32(0.45 * std::sin(1.7 * r + 0.9 * c + b)));
    for (int r = 0; r < in_features; ++r)
      for (int c = 0; c < hidden; ++c) w2[b].push_back(f32(0.27 * std::cos(0.8 * r + 1.3 * c - b)));
  }
  if (o.w5000) w2[1][2] = 5000.0f;
  std::vector<float> x;
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < in_features; ++c) x.push_back(f32(1.5 * std::sin(0.7 * i + 0.3 * c + 0.2)));

  try {
    nanscope::scope model(rec, "", "TinyMLP");
    model.input(view(x, rows, in_features));
    std::vector<float> h = x;                   // the block's input, as float
    std::vector<nanscope::half> h16;            // ... and as recorded after the first block (fp16)
    for (int b = 0; b < blocks; ++b) {
      nanscope::scope block(rec, "blocks." + std::to_string(b), "Block");
      if (b == 0) block.input(view(h, rows, in_features));
      else block.input(view(h16, rows, in_features));
      std::vector<float> hid, y;
      {
        nanscope::scope fc1(rec, "fc1", "Linear");
        fc1.parameter(view(w1[b], hidden, in_features), "weight");
        if (b == 0) fc1.input(view(h, rows, in_features));
        else fc1.input(view(h16, rows, in_features));
        for (int i = 0; i < rows; ++i) {
          const std::vector<float> r = matvec(w1[b], hidden, in_features, &h[static_cast<std::size_t>(i * in_features)]);
          hid.insert(hid.end(), r.begin(), r.end());
        }
        fc1.output(view(hid, rows, hidden));
      }
      {
        nanscope::scope fc2(rec, "fc2", "Linear");
        fc2.parameter(view(w2[b], in_features, hidden), "weight");
        fc2.input(view(hid, rows, hidden));
        for (int i = 0; i < rows; ++i) {
          const std::vector<float> r = matvec(w2[b], in_features, hidden, &hid[static_cast<std::size_t>(i * hidden)]);
          y.insert(y.end(), r.begin(), r.end());
        }
        fc2.output(view(y, rows, in_features));
      }
      // the block's own code: the residual and the fp16 cast
      const double scale = o.inf && b == 1 ? 1.0e6 : 1.0;
      std::vector<nanscope::half> out;
      for (std::size_t k = 0; k < h.size(); ++k) out.push_back(nanscope::half::from_float(h[k] + scale * y[k]));
      if (o.checkpoint && b == 1) rec.checkpoint(view(out, rows, in_features), "after residual");
      block.output(view(out, rows, in_features));
      h16 = out;
      for (std::size_t k = 0; k < h.size(); ++k) h[k] = out[k].to_float();
    }
    model.output(view(h16, rows, in_features));
  } catch (const nanscope::detection_error&) {
    // the throw_exception policy: the pass ended at the detection (its files are written by then)
  }
  if (error.empty() && tree.trees_written() != 1) error = "the writer wrote " + std::to_string(tree.trees_written()) + " trees";
  return error;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: nanscope_tinymlp_tree DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  run_options runs[] = {{"good"}, {"inf"}, {"good_pruned"}, {"inf_pruned"}, {"w5000"}, {"cp_good"}, {"cp_inf"},
                        {"inf_thrown"}};
  runs[1].inf = runs[3].inf = runs[6].inf = runs[7].inf = true;
  runs[1].snapshot = true;
  runs[2].prune = runs[3].prune = true;
  runs[4].w5000 = true;
  runs[5].checkpoint = runs[6].checkpoint = true;
  runs[7].thrown = true;
  for (const run_options& o : runs) {
    const std::string err = run(dir, o);
    if (!err.empty()) {
      std::fprintf(stderr, "nanscope_tinymlp_tree: %s/%s: %s\n", dir.c_str(), o.name, err.c_str());
      return 1;
    }
  }
  return 0;
}
