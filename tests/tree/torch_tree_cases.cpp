// Writes a layer tree of real at::Tensor inputs for torch_print_real.py, which compares its torch-style strings
// (shape, dtype, value lines, mean, std, min, max) with PyTorch's own printing of the same tensors.
//
// A model Bank holds one Leaf per case in a ModuleList; it is attached with nanscope::torch::attach and run once,
// each Leaf through NANSCOPE_TORCH_CALL, with a tree_writer (FULL_TENSORS) attached: child i's input is case i.
// Each case's values are also written as case_<i>.npy (bf16 as exact float32). The cases: zeros (0-d, 1-d,
// -0.), NaN/Inf only, tiny, huge, mixed scales with NaN, integer-valued, summarised large tensors, float16,
// bfloat16, float64, int64, bool, one element, and float32 tensors whose mean/std torch rounds in its own order.
//
//   nanscope_tree_torch_cases <dir>
#include <nanscope/adapters/torch_attach.hpp>
#include <nanscope/npy.hpp>
#include <nanscope/tree.hpp>

#include <ATen/ATen.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace {

struct LeafImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return x; }
};
TORCH_MODULE(Leaf);

struct BankImpl : torch::nn::Module {
  torch::nn::ModuleList leaves{nullptr};
  explicit BankImpl(std::size_t n) {
    leaves = register_module("leaves", torch::nn::ModuleList());
    for (std::size_t i = 0; i < n; ++i) leaves->push_back(Leaf());
  }
  void forward(const std::vector<at::Tensor>& cases) {
    for (std::size_t i = 0; i < cases.size(); ++i) NANSCOPE_TORCH_CALL(leaves->ptr<LeafImpl>(i), cases[i]);
  }
};
TORCH_MODULE(Bank);

std::vector<at::Tensor> make_cases() {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  auto list = [&](std::vector<double> v, at::ScalarType t = at::kFloat) {
    return at::tensor(v, at::TensorOptions().dtype(at::kDouble)).to(t);
  };
  at::manual_seed(2024);
  std::vector<at::Tensor> c;
  c.push_back(at::zeros({}, f32));                      // tensor(0.)
  c.push_back(at::zeros({2}, f32));                     // tensor([0., 0.])
  c.push_back(list({-0.0, 0.0, -0.0}));                 // signed zeros
  c.push_back(at::full({}, nan, f32));                  // tensor(nan)
  c.push_back(list({inf, 0.0}));                        // tensor([inf, 0.])
  c.push_back(list({nan, inf, -inf}));                  // specials only
  c.push_back(at::full({2, 3}, nan, f32));              // all NaN
  c.push_back(at::zeros({3, 4}, at::kHalf));            // float16 zeros
  c.push_back(list({inf, nan, -inf, 0.0}, at::kBFloat16));
  c.push_back(at::randn({4, 5}) * 1e-30);               // tiny
  c.push_back(list({1e-40, -3e-42, 2e-45}));            // subnormals
  c.push_back(at::randn({3, 3}) * 1e30);                // huge
  c.push_back(list({1e-6, -2.5, 3e5, nan, 0.0, 7e6}));  // mixed scales with NaN
  c.push_back(list({1.0, 2.0, -3.0, 40.0}));            // integer-valued
  c.push_back(list({1e9, 3e9, -2e9}));                  // integer-valued, > 1e8
  c.push_back(list({2.5}));                             // one element: std nan
  c.push_back(at::randn({5, 7}));
  c.push_back(at::randn({40, 50}) * 3 + 0.5);           // summarised
  c.push_back(at::randn({3, 4, 1200}));                 // summarised, 3-d
  c.push_back(at::randn({3, 4}).to(at::kHalf));
  c.push_back((at::randn({6, 5}) * 100).to(at::kBFloat16));
  c.push_back(at::randn({6}).to(at::kDouble));
  c.push_back(at::arange(-5, 20, at::TensorOptions().dtype(at::kLong)));
  c.push_back(at::randn({7}) > 0);                      // bool
  c.push_back(at::randn({50}) * 1e-3 + 5e-3);           // long line wrapping
  for (int i = 0; i < 12; ++i) c.push_back(at::randn({1 + i * 211}) * 3 + 0.5);  // float32 reduction order
  for (int i = 0; i < 4; ++i) c.push_back(at::rand({300 + i * 50}).to(at::kHalf));
  for (int i = 0; i < 4; ++i) c.push_back(at::randn({300 + i * 50}).to(at::kBFloat16));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const std::vector<at::Tensor> cases = make_cases();
  for (std::size_t i = 0; i < cases.size(); ++i)
    nanscope::write_npy(dir + "/case_" + std::to_string(i) + ".npy", nanscope::torch::view(cases[i]));
  nanscope::recorder_options opts;
  opts.policy = nanscope::on_detect::print_and_continue;
  opts.sink = [](std::string_view) {};  // the NaN cases are meant: no reports
  nanscope::recorder rec(opts);
  Bank bank(cases.size());
  nanscope::torch::attach(bank, rec);
  nanscope::tree_writer tree(rec, nanscope::tree_options{}.in(dir));
  nanscope::torch::run(bank, cases);
  if (tree.trees_written() != 1 || !tree.last_error().empty()) {
    std::fprintf(stderr, "tree not written: %s\n", tree.last_error().c_str());
    return 1;
  }
  std::printf("%zu cases; tree %s\n", cases.size(), tree.full_path().c_str());
  return 0;
}
