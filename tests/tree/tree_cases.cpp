// Writes layer trees for tree_check.py (tests/tree/CMakeLists.txt): every combination of style (torch_repr,
// numeric) and pruning (on, off) for a model whose structure exercises the pruning rule (numbered layer blocks
// with numbered sub-blocks, numbered leaves, non-layer siblings between layers, a list of exactly two blocks),
// tensors of every dtype with NaN/Inf/zeros, several outputs, keyword inputs, non-tensor arguments with memory
// addresses, parameters, and hostile module names (control characters, quotes, invalid UTF-8, long names).
//   nanscope_tree_cases <dir>   →  <dir>/<style>_<pruned|unpruned>/TinyModel_debug_tree_{SUMMARY,FULL_TENSORS}.json
#include <nanscope/tree.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace {
using nanscope::dtype;
using nanscope::scope;
using nanscope::tensor_view;

struct data {
  std::vector<float> f32;
  std::vector<double> f64;
  std::vector<std::uint16_t> f16, bf16;
  std::vector<std::uint8_t> e4m3, e5m2, u8;
  std::vector<std::int64_t> i64;
  explicit data(int n) {
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    for (int i = 0; i < n; ++i) {
      double x = std::sin(i * 0.7) * (1 + i % 5) * 3.0;
      if (i % 17 == 5) x = 0.0;
      f32.push_back(static_cast<float>(x));
      f64.push_back(x * 1e-3);
      const double y = i == 3 ? nan : i == 4 ? inf : i == 6 ? -inf : x;
      f16.push_back(nanscope::half::from_float(y * 1000).bits);
      bf16.push_back(nanscope::bfloat16::from_float(y).bits);
      e4m3.push_back(nanscope::float8_e4m3fn::from_float(x).bits);
      e5m2.push_back(nanscope::float8_e5m2::from_float(x).bits);
      u8.push_back(static_cast<std::uint8_t>(i * 7));
      i64.push_back(static_cast<std::int64_t>(i) * 1000003 - 50000);
    }
  }
};

/// 400 names of 1..12 bytes drawn from ASCII letters, continuation bytes, every lead byte and invalid bytes.
const std::vector<std::string>& utf8_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    std::uint64_t state = 0x9E3779B97F4A7C15ull;
    auto next = [&] {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<unsigned>(state >> 33);
    };
    for (int i = 0; i < 400; ++i) {
      std::string n = "u" + std::to_string(i) + "_";
      const unsigned len = 1 + next() % 12;
      for (unsigned k = 0; k < len; ++k) {
        const unsigned pick = next() % 8;
        unsigned char b;
        if (pick < 2) b = static_cast<unsigned char>('a' + next() % 26);
        else if (pick < 5) b = static_cast<unsigned char>(0x80 + next() % 64);   // continuation
        else if (pick < 7) b = static_cast<unsigned char>(0xC0 + next() % 53);   // leads C0..F4
        else b = static_cast<unsigned char>(0xF5 + next() % 11);                 // never valid
        n += static_cast<char>(b);
      }
      out.push_back(n);
    }
    return out;
  }();
  return names;
}

tensor_view view(const void* p, dtype t, std::initializer_list<std::int64_t> shape) {
  return tensor_view::contiguous(p, t, shape);
}

void block(nanscope::recorder& rec, const data& d, int i, const std::string& name) {
  scope s(rec, name, "Block");
  s.input(view(d.f32.data(), dtype::f32, {4, 8}));
  s.input(view(d.f16.data(), dtype::f16, {2, 3}), "attention_mask");
  s.value_input("<Config object at 0x7f3a2b1c0d90>", "config");
  {
    scope a(rec, "attn", "Attention");
    a.input(view(d.f32.data() + i, dtype::f32, {2, 16}));
    // a kwarg named "value": HF's SUMMARY drops it with the tensors' "value" lists (kwargs left as {})
    a.input(view(d.f32.data() + 1, dtype::f32, {2, 16}), "value");
    a.parameter(view(d.f32.data(), dtype::f32, {4}), "weight");
    a.output(view(d.f32.data() + 2 * i, dtype::f32, {2, 16}), 0);
    a.output(view(d.bf16.data(), dtype::bf16, {8}), 1);
  }
  {
    scope m(rec, "mlp", "MLP");
    m.input(view(d.f32.data(), dtype::f32, {32}));
    for (int e = 0; e < 4; ++e) {  // numbered sub-blocks: pruned inside each kept layer
      scope ex(rec, "experts." + std::to_string(e), "Expert");
      ex.input(view(d.f32.data() + e, dtype::f32, {8}));
      {
        scope l(rec, "linear", "Linear");
        l.input(view(d.f32.data() + e, dtype::f32, {8}));
        l.output(view(d.f64.data() + e, dtype::f64, {8}));
      }
    }
    {
      scope act(rec, "act", "GELU");
      act.input(view(d.e4m3.data(), dtype::f8_e4m3fn, {16}));
      act.output(view(d.e5m2.data(), dtype::f8_e5m2, {16}));
    }
  }
}

void run_model(nanscope::recorder& rec, const data& d) {
  scope root(rec, "", "TinyModel");
  root.input(view(d.i64.data(), dtype::i64, {2, 5}));
  root.non_tensor_input(true);
  {
    scope e(rec, "embed", "Embedding");
    e.input(view(d.u8.data(), dtype::u8, {10}));
    e.output(view(d.f32.data(), dtype::f32, {1200}));  // above torch's 1000-element threshold: summarised
  }
  for (int i = 0; i < 6; ++i) {
    block(rec, d, i, "layers." + std::to_string(i));
    if (i == 2) {
      scope n(rec, "between", "LayerNorm");  // a non-layer sibling between layer blocks
      n.input(view(d.f32.data(), dtype::f32, {40, 40}));
      n.output(view(d.f32.data(), dtype::f32, {3, 4, 5}));
    }
  }
  for (int h = 0; h < 3; ++h) {  // numbered leaves: not layer blocks (no children), never pruned
    scope head(rec, "heads." + std::to_string(h), "Linear");
    head.input(view(d.f32.data() + h, dtype::f32, {4}));
    head.output(view(d.f32.data() + h, dtype::f32, {4}));
  }
  {
    scope pair(rec, "pair", "ModuleList");  // exactly two layer blocks: nothing to prune
    for (int i = 0; i < 2; ++i) block(rec, d, i, "pair." + std::to_string(i));
  }
  {
    // hostile names: every control character, quotes, backslashes, invalid UTF-8, non-ASCII, a long name
    std::string ctl;
    for (int c = 1; c < 32; ++c) ctl += static_cast<char>(c);
    const std::string names[] = {"ctl" + ctl + "\x7f", "q\"uo\\te'", "bad\xff\xfe utf8 \xc0\x80 \xed\xa0\x80 \xe2\x82",
                                 "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", std::string(5000, 'n') + ".7", "x.9\n"};
    for (const auto& n : names) {
      scope h(rec, n, "Weird\"Class");
      h.output(view(d.f32.data(), dtype::f32, {0, 3}));
    }
  }
  {
    scope empty(rec, "empty", "Identity");  // a leaf with no inputs and no outputs
  }
  {
    // random byte strings rich in UTF-8 lead and continuation bytes: tree_check.py compares each module path
    // with Python's bytes.decode("utf-8", "replace") of the bytes listed in utf8_names.bin
    scope list(rec, "utf8", "ModuleList");
    for (const auto& n : utf8_names()) {
      scope leaf(rec, n, "Leaf");
    }
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  {
    FILE* f = std::fopen((dir + "/utf8_names.bin").c_str(), "wb");
    if (f == nullptr) return 2;
    for (const auto& n : utf8_names()) {
      const unsigned char len = static_cast<unsigned char>(n.size());
      std::fwrite(&len, 1, 1, f);
      std::fwrite(n.data(), 1, n.size(), f);
    }
    std::fclose(f);
  }
  const data d(2000);
  // The model plants a NaN in attention_mask: report it silently and go on, the tree must still be complete.
  nanscope::recorder_options ro;
  ro.policy = nanscope::on_detect::print_and_continue;
  ro.sink = [](std::string_view) {};
  nanscope::recorder rec(ro);
  for (auto style : {nanscope::tree_style::torch_repr, nanscope::tree_style::numeric}) {
    for (bool prune : {true, false}) {
      const std::string sub = dir + "/" + (style == nanscope::tree_style::torch_repr ? "torch_repr" : "numeric") +
                              (prune ? "_pruned" : "_unpruned");
      nanscope::tree_writer w(rec, nanscope::tree_options{}.in(sub).with_style(style).with_pruning(prune).with_rank(0));
      run_model(rec, d);
      if (w.trees_written() != 1 || !w.last_error().empty()) {
        std::fprintf(stderr, "tree not written: %s\n", w.last_error().c_str());
        return 1;
      }
      std::printf("%s: %llu + %llu bytes\n", sub.c_str(), static_cast<unsigned long long>(w.summary_bytes()),
                  static_cast<unsigned long long>(w.full_bytes()));
    }
  }
  return 0;
}
