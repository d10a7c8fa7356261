// nanscope example: localising a divergence between two runs of a model with the layer tree and nanscope-diff.
//
// A tiny MLP (TinyMLP: layers.0 .. layers.3, each an `fc` Linear and an `act` GELU, then a `head` Linear), written
// with plain loops, runs twice in one process: a reference run into REF_DIR and a candidate run into CAND_DIR,
// where one weight of one layer is perturbed (a stand-in for a porting bug). Each run writes its layer tree
// (TinyMLP_debug_tree_SUMMARY.json / _FULL_TENSORS.json, HuggingFace's format). Then
//
//   nanscope-diff REF_DIR/TinyMLP_debug_tree_FULL_TENSORS.json CAND_DIR/TinyMLP_debug_tree_FULL_TENSORS.json
//
// names the first module whose tensors diverge (layers.2.fc by default) and the likely producer.
//
// Layer pruning is turned off: with the Python tool's default (keep only the first and the last numbered layer
// block) layers.1 and layers.2 would not be written at all, and a bug in layers.2 would first show in the
// inputs of layers.3, where nothing says which layer produced it. For a diff, write every layer.
//
//   nanscope_tree_diff REF_DIR CAND_DIR [--perturb-layer N|none] [--nan-layer N]
//                      [--style-a torch_repr|numeric] [--style-b torch_repr|numeric]
//     --perturb-layer N  layer whose fc weight is changed in the candidate run (default 2; none: identical runs)
//     --nan-layer N      also put a NaN into that layer's fc weight in the candidate run
//     --style-a/-b       tensor style of each run's tree (default torch_repr, HuggingFace's strings)
//     --ulp-layer N      also move that layer's fc weight w[4] by one ulp in the candidate run (bits differ, prints agree)
//     --hash             write each tensor's content hash ("hash"; compare with nanscope-diff --bitwise)
#include <nanscope/nanscope.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace {

constexpr int kIn = 8;       // features
constexpr int kBatch = 2;    // rows
constexpr int kLayers = 4;   // layers.0 .. layers.3
constexpr int kClasses = 3;  // head outputs

struct linear_weights {
  int in = 0, out = 0;
  std::vector<float> w;  // [out][in], row-major
  std::vector<float> b;  // [out]
};

struct tiny_mlp {
  linear_weights layers[kLayers];
  linear_weights head;
};

linear_weights make_linear(int in, int out, int seed) {
  linear_weights l;
  l.in = in;
  l.out = out;
  l.w.resize(static_cast<std::size_t>(in * out));
  l.b.resize(static_cast<std::size_t>(out));
  for (int o = 0; o < out; ++o) {
    for (int i = 0; i < in; ++i)
      l.w[static_cast<std::size_t>(o * in + i)] = 0.45f * std::sin(0.7f * static_cast<float>(o) + 1.3f * static_cast<float>(i) + 0.9f * static_cast<float>(seed));
    l.b[static_cast<std::size_t>(o)] = 0.05f * std::cos(static_cast<float>(o + seed));
  }
  return l;
}

tiny_mlp make_model() {
  tiny_mlp m;
  for (int i = 0; i < kLayers; ++i) m.layers[i] = make_linear(kIn, kIn, i + 1);
  m.head = make_linear(kIn, kClasses, 7);
  return m;
}

nanscope::tensor_view view_of(const std::vector<float>& x, int rows, int cols) {
  return nanscope::tensor_view::contiguous(x.data(), nanscope::dtype::f32, {rows, cols});
}

std::vector<float> linear(const std::vector<float>& x, const linear_weights& l, const char* name) {
  NANSCOPE_SCOPE(name, "Linear");
  NANSCOPE_PARAM(view_of(l.w, l.out, l.in), "weight");
  NANSCOPE_INPUT(view_of(x, kBatch, l.in));
  std::vector<float> y(static_cast<std::size_t>(kBatch * l.out));
  for (int r = 0; r < kBatch; ++r)
    for (int o = 0; o < l.out; ++o) {
      float acc = l.b[static_cast<std::size_t>(o)];
      for (int i = 0; i < l.in; ++i)
        acc += x[static_cast<std::size_t>(r * l.in + i)] * l.w[static_cast<std::size_t>(o * l.in + i)];
      y[static_cast<std::size_t>(r * l.out + o)] = acc;
    }
  NANSCOPE_OUTPUT(view_of(y, kBatch, l.out));
  return y;
}

std::vector<float> gelu(const std::vector<float>& x, int cols) {
  NANSCOPE_SCOPE("act", "GELU");
  NANSCOPE_INPUT(view_of(x, kBatch, cols));
  std::vector<float> y(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) {
    const float v = x[k];
    y[k] = 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v)));
  }
  NANSCOPE_OUTPUT(view_of(y, kBatch, cols));
  return y;
}

std::vector<float> forward(const tiny_mlp& m, const std::vector<float>& x) {
  NANSCOPE_SCOPE("", "TinyMLP");
  NANSCOPE_INPUT(view_of(x, kBatch, kIn));
  std::vector<float> h = x;
  for (int i = 0; i < kLayers; ++i) {
    NANSCOPE_SCOPE("layers." + std::to_string(i), "MLPBlock");
    NANSCOPE_INPUT(view_of(h, kBatch, kIn));
    h = gelu(linear(h, m.layers[i], "fc"), kIn);
  }
  return linear(h, m.head, "head");
}

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "nanscope_tree_diff: %s\n"
               "usage: nanscope_tree_diff REF_DIR CAND_DIR [--perturb-layer N|none] [--nan-layer N]\n"
               "                          [--style-a torch_repr|numeric] [--style-b torch_repr|numeric]\n"
               "                          [--ulp-layer N] [--hash]\n",
               msg);
  std::exit(2);
}

int layer_arg(const char* s) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < 0 || v >= kLayers) usage("a layer must be 0 .. 3");
  return static_cast<int>(v);
}

nanscope::tree_style style_arg(const char* s) {
  if (std::strcmp(s, "torch_repr") == 0) return nanscope::tree_style::torch_repr;
  if (std::strcmp(s, "numeric") == 0) return nanscope::tree_style::numeric;
  usage("a style is torch_repr or numeric");
}

/// One run with its own tree writer; returns the FULL_TENSORS path.
std::string run(const tiny_mlp& m, const std::vector<float>& x, const std::string& dir, nanscope::tree_style style,
                bool hash) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);  // the tree writer creates one level only
  nanscope::tree_writer tree(nanscope::default_recorder(),
                             nanscope::tree_options{}.in(dir).with_style(style).with_pruning(false).with_hash(hash));
  const std::vector<float> logits = forward(m, x);
  std::printf("%s: logits[0] = %.6f %.6f %.6f\n", dir.c_str(), static_cast<double>(logits[0]),
              static_cast<double>(logits[1]), static_cast<double>(logits[2]));
  return tree.full_path();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) usage("expected REF_DIR and CAND_DIR");
  const std::string ref_dir = argv[1], cand_dir = argv[2];
  int perturb = 2, nan_layer = -1, ulp_layer = -1;
  bool hash = false;
  nanscope::tree_style style_a = nanscope::tree_style::torch_repr, style_b = style_a;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--hash") {
      hash = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing the value of " + a).c_str());
    const char* v = argv[++i];
    if (a == "--perturb-layer") perturb = std::strcmp(v, "none") == 0 ? -1 : layer_arg(v);
    else if (a == "--nan-layer") nan_layer = layer_arg(v);
    else if (a == "--ulp-layer") ulp_layer = layer_arg(v);
    else if (a == "--style-a") style_a = style_arg(v);
    else if (a == "--style-b") style_b = style_arg(v);
    else usage(("unknown option " + a).c_str());
  }

  // A NaN in the candidate must not stop the run: report each detection in one line and go on.
  nanscope::recorder_options ro;
  ro.policy = nanscope::on_detect::callback;
  ro.callback = [](const nanscope::detection&) { std::printf("nanscope: NaN/Inf detected in the candidate run\n"); };
  nanscope::default_recorder().set_options(ro);

  std::vector<float> x(static_cast<std::size_t>(kBatch * kIn));
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = 0.8f * std::cos(0.37f * static_cast<float>(k));

  const tiny_mlp reference = make_model();
  tiny_mlp candidate = reference;
  if (perturb >= 0) candidate.layers[perturb].w[3] += 0.05f;  // the "porting bug": one weight of layers.N.fc
  if (ulp_layer >= 0) {
    float& w = candidate.layers[ulp_layer].w[4];  // w[4]: its 1-ulp change reaches the fc output
    w = std::nextafter(w, std::numeric_limits<float>::infinity());
  }
  if (nan_layer >= 0) candidate.layers[nan_layer].w[5] = std::numeric_limits<float>::quiet_NaN();

  const std::string a = run(reference, x, ref_dir, style_a, hash);
  const std::string b = run(candidate, x, cand_dir, style_b, hash);
  std::printf("compare with:\n  nanscope-diff %s %s\n", a.c_str(), b.c_str());
  return 0;
}
