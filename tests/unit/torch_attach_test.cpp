// nanscope tests — torch_attach_test.cpp: nanscope::torch::attach / run / NANSCOPE_TORCH_CALL
// (nanscope/adapters/torch_attach.hpp) and the LibTorch adapter's torch-computed mean/std for the layer tree.
//
//  - A real LibTorch model (Linear, Sequential, ModuleList of custom blocks, a nested custom module, a module
//    whose parent's forward() is called directly) run through one run() on the root and NANSCOPE_TORCH_CALL at
//    its call sites: the scopes opened (path, class, order) equal the module_path / class list HuggingFace's
//    model_addition_debugger writes for the same PyTorch structure, written out by hand below; parameters are
//    recorded in named_parameters(recurse=false) order.
//  - Unattached modules, empty holders, detach(): clear nanscope::error messages.
//  - mean/std: for at::Tensor inputs recorded through the adapter with a tree writer attached, the tree's
//    strings equal repr() of at::mean / at::std (found for tensors where nanscope's own exact-then-rounded
//    statistics print differently); for other tensors, nanscope's printed mean/std stay within the documented
//    bound of torch's float32 reduction.
#if defined(NANSCOPE_TEST_HAVE_TORCH) && NANSCOPE_TEST_HAVE_TORCH

#include <nanscope/adapters/torch_attach.hpp>

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE

#include "support/recorder_support.hpp"

#include <nanscope/check.hpp>
#include <nanscope/tree.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <stdlib.h>  // mkdtemp
#include <unistd.h>

namespace {

/// Records the scopes a recorder opens (path, class) and the contexts recorded into each, in order.
struct scope_log final : nanscope::scope_listener {
  struct entry {
    std::string path, class_name;
    std::vector<std::string> contexts;
  };
  std::vector<entry> opened;
  std::vector<const nanscope::frame*> stack;
  std::vector<std::size_t> index;
  void scope_opened(const nanscope::frame& f, bool) noexcept override {
    opened.push_back({f.module_path, f.class_name, {}});
    stack.push_back(&f);
    index.push_back(opened.size() - 1);
  }
  void tensor_recorded(const nanscope::frame& f, const nanscope::tensor_record& r) noexcept override {
    for (std::size_t i = stack.size(); i-- > 0;)
      if (stack[i] == &f) {
        opened[index[i]].contexts.push_back(r.context);
        return;
      }
  }
  void scope_closed(const nanscope::frame&, bool) noexcept override {
    stack.pop_back();
    index.pop_back();
  }
};

struct BlockImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  torch::nn::GELU act;
  BlockImpl() {
    fc = register_module("fc", torch::nn::Linear(4, 4));
    act = register_module("act", torch::nn::GELU());
  }
  at::Tensor forward(const at::Tensor& x) { return NANSCOPE_TORCH_CALL(act, NANSCOPE_TORCH_CALL(fc, x)) + x; }
};
TORCH_MODULE(Block);

struct InnerImpl : torch::nn::Module {
  torch::nn::Linear proj{nullptr};
  InnerImpl() { proj = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(4, 4).bias(false))); }
  at::Tensor forward(const at::Tensor& x) { return NANSCOPE_TORCH_CALL(proj, x); }
};
TORCH_MODULE(Inner);

struct EncoderImpl : torch::nn::Module {
  Inner inner;
  EncoderImpl() { inner = register_module("inner", Inner()); }
  // Calls its child directly (no scope of its own when the parent calls forward() instead of run()).
  at::Tensor forward(const at::Tensor& x) { return inner->forward(x); }
};
TORCH_MODULE(Encoder);

struct NetImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr};
  torch::nn::Sequential seq{nullptr};
  torch::nn::ModuleList layers{nullptr};
  Encoder encoder{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(3, 4));
    seq = register_module("seq", torch::nn::Sequential(torch::nn::Linear(4, 4), torch::nn::ReLU()));
    layers = register_module("layers", torch::nn::ModuleList(Block(), Block()));
    encoder = register_module("encoder", Encoder());
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = NANSCOPE_TORCH_CALL(fc1, x);
    h = NANSCOPE_TORCH_CALL(seq, h);
    for (std::size_t i = 0; i < layers->size(); ++i) h = NANSCOPE_TORCH_CALL(layers->ptr<BlockImpl>(i), h);
    h = encoder->forward(h);  // not through run(): encoder gets no scope, encoder.inner.proj keeps its path
    return h;
  }
};
TORCH_MODULE(Net);

/// Root of class Scaled: fc (Linear 2 -> 2, weight [[1, 2], [3, 4]], bias [0.5, -0.5]) through
/// NANSCOPE_TORCH_CALL, then the root's own code multiplies by `scale` (6e37: [3.5, 6.5] -> [2.1e38, inf]).
struct ScaledImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  float scale = 1.0f;
  int forwards = 0;
  explicit ScaledImpl(float s) : scale(s) {
    fc = register_module("fc", torch::nn::Linear(2, 2));
    at::NoGradGuard no_grad;
    fc->weight.copy_(at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2}));
    fc->bias.copy_(at::tensor({0.5f, -0.5f}));
  }
  at::Tensor forward(const at::Tensor& x) {
    ++forwards;
    return NANSCOPE_TORCH_CALL(fc, x) * scale;
  }
};
TORCH_MODULE(Scaled);

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_dir() {
  char tmpl[] = "/tmp/nanscope_torch_attach_XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  REQUIRE(d != nullptr);
  return d;
}

/// repr() of a 0-d float32 tensor holding x, through the torch_repr printer (tested against Python elsewhere).
std::string scalar_repr(double x) {
  nanscope::tensor_view like;
  return nanscope::detail::torch_scalar_repr(x, nanscope::dtype::f32, like, nanscope::detail::torch_print_options{});
}

/// The printed mantissa of "tensor(d.dddde±xx)" as an integer number of last-digit units, and the exponent.
bool printed_units(const std::string& repr, long long& units, int& exponent) {
  const std::size_t open = repr.find('('), e = repr.find('e', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || e == std::string::npos) return false;
  const double m = std::stod(repr.substr(open + 1, e - open - 1));
  exponent = std::stoi(repr.substr(e + 1));
  units = std::llround(m * 1e4);
  return true;
}

}  // namespace

TEST_CASE("torch attach: paths, classes and order equal HuggingFace's for the same structure") {
  at::manual_seed(3);
  Net net;
  nsrec::capture cap;
  nanscope::recorder rec(nsrec::quiet_options(cap));
  scope_log log;
  rec.set_listener(&log);
  // Python's named_modules() of the same PyTorch model, with the root: 15 modules.
  CHECK(nanscope::torch::attach(net, rec) == 15u);
  const at::Tensor out = nanscope::torch::run(net, at::randn({2, 3}));
  rec.set_listener(nullptr);
  CHECK(out.sizes() == at::IntArrayRef({2, 4}));

  // What model_addition_debugger_context writes for this structure (module_path without the "Net." prefix),
  // in call order; encoder's forward is not hooked here, so it has no node.
  const std::vector<std::pair<std::string, std::string>> want = {
      {"", "Net"},
      {"fc1", "Linear"},
      {"seq", "Sequential"},
      {"seq.0", "Linear"},
      {"seq.1", "ReLU"},
      {"layers.0", "Block"},
      {"layers.0.fc", "Linear"},
      {"layers.0.act", "GELU"},
      {"layers.1", "Block"},
      {"layers.1.fc", "Linear"},
      {"layers.1.act", "GELU"},
      {"encoder.inner.proj", "Linear"},
  };
  REQUIRE(log.opened.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    INFO("scope " << i);
    CHECK(log.opened[i].path == want[i].first);
    CHECK(log.opened[i].class_name == want[i].second);
  }
  // parameters in named_parameters(recurse=false) order, then inputs, then the output
  CHECK(log.opened[1].contexts == std::vector<std::string>{"weight", "bias", "input[0]", "output"});
  CHECK(log.opened[0].contexts == std::vector<std::string>{"input[0]", "output"});
  CHECK(log.opened[11].contexts == std::vector<std::string>{"weight", "input[0]", "output"});  // no bias

  CHECK(nanscope::torch::attached_name(net->layers[1]).first == "layers.1");
  CHECK(nanscope::torch::attached_name(net->encoder->inner->proj) ==
        std::pair<std::string, std::string>{"encoder.inner.proj", "Linear"});
  CHECK(nanscope::torch::detach(net) == 15u);
  CHECK_FALSE(nanscope::torch::attached(net->fc1));
}

TEST_CASE("torch attach: a module run under another scope nests under it; detection names the attached path") {
  torch::nn::Sequential model(torch::nn::Linear(2, 2), torch::nn::ReLU());
  nsrec::capture cap;
  nanscope::recorder rec(nsrec::quiet_options(cap, nanscope::on_detect::throw_exception));
  nanscope::torch::attach(model, rec);
  scope_log log;
  rec.set_listener(&log);
  {
    nanscope::scope outer(rec, "model", "Wrapper");
    nanscope::torch::run(model, at::ones({1, 2}));
  }
  rec.set_listener(nullptr);
  REQUIRE(log.opened.size() == 4u);
  CHECK(log.opened[1].path == "model");  // the root (path "") stays at the enclosing scope's path
  CHECK(log.opened[1].class_name == "Sequential");
  CHECK(log.opened[2].path == "model.0");
  CHECK(log.opened[3].path == "model.1");

  // a NaN made by seq.1's input? no: put NaN into the weights of 0: detected in "0" as a parameter
  {
    at::NoGradGuard g;
    model[0]->as<torch::nn::LinearImpl>()->weight.fill_(std::nan(""));
  }
  try {
    nanscope::torch::run(model, at::ones({1, 2}));
    FAIL("expected a detection");
  } catch (const nanscope::detection_error& e) {
    CHECK(e.info().module_path == "0");
    CHECK(e.info().class_name == "Linear");
    CHECK(e.info().context == "weight");
  }
  nanscope::torch::detach(model);
}

TEST_CASE("torch attach: unattached modules and empty holders are clear errors") {
  nsrec::capture cap;
  nanscope::recorder rec(nsrec::quiet_options(cap));
  torch::nn::Linear lone(2, 2);
  try {
    nanscope::torch::run(lone, at::ones({1, 2}));
    FAIL("expected nanscope::error");
  } catch (const nanscope::error& e) {
    const std::string what = e.what();
    CHECK(what.find("Linear") != std::string::npos);
    CHECK(what.find("is not attached") != std::string::npos);
    CHECK(what.find("nanscope::torch::attach(root, recorder)") != std::string::npos);
  }
  torch::nn::Linear empty{nullptr};
  CHECK_THROWS_WITH_AS(nanscope::torch::run(empty, at::ones({1, 2})),
                       doctest::Contains("the module is empty"), nanscope::error);
  // a module added after attach() is unknown until attached again
  Net net;
  nanscope::torch::attach(net, rec);
  auto extra = net->register_module("extra", torch::nn::Linear(4, 4));
  CHECK_THROWS_AS(nanscope::torch::run(extra, at::ones({1, 4})), nanscope::error);
  CHECK(nanscope::torch::attach(net, rec) == 16u);
  CHECK(nanscope::torch::attached_name(extra).first == "extra");
  nanscope::torch::detach(net);
  CHECK_THROWS_AS(nanscope::torch::run(net->fc1, at::ones({1, 3})), nanscope::error);
}

TEST_CASE("torch attach: the layer tree's mean/std of at::Tensor inputs are torch's own digits") {
  // Find float32 tensors whose mean or std nanscope prints differently from torch (exact-then-rounded vs
  // torch's float32 reduction): the cases where the reference statistics matter.
  at::manual_seed(11);
  std::vector<at::Tensor> differing;
  for (int i = 0; i < 400 && differing.size() < 3; ++i) {
    const at::Tensor t = at::randn({1 + i * 37}) * 3 + 0.5;
    const nanscope::health_result h = nanscope::check(t);
    const nanscope::detail::torch_stats s = nanscope::detail::torch_stats_of(h, true);
    if (scalar_repr(s.mean) != scalar_repr(t.mean().item<double>()) ||
        scalar_repr(s.std) != scalar_repr(t.std().item<double>()))
      differing.push_back(t);
  }
  REQUIRE(!differing.empty());

  struct IdentityImpl : torch::nn::Module {
    at::Tensor forward(const at::Tensor& x) { return x * 1; }
  };
  auto model = std::make_shared<IdentityImpl>();
  nsrec::capture cap;
  nanscope::recorder rec(nsrec::quiet_options(cap));
  nanscope::torch::attach(model, rec);
  const std::string dir = temp_dir();
  for (const at::Tensor& t : differing) {
    std::string summary;
    {
      nanscope::tree_writer tree(rec, nanscope::tree_options{}.in(dir));
      nanscope::torch::run(model, t);
      summary = read_file(tree.summary_path());
    }
    const std::string mean = scalar_repr(t.mean().item<double>());
    const std::string sd = scalar_repr(t.std().item<double>());
    INFO(summary);
    CHECK(summary.find("\"mean\": \"" + mean + "\"") != std::string::npos);
    CHECK(summary.find("\"std\": \"" + sd + "\"") != std::string::npos);
  }
  // without a tree writer nothing is computed: the pending slot stays empty
  nanscope::torch::run(model, differing[0]);
  CHECK(nanscope::detail::pending_reference_slot().data == nullptr);
  nanscope::torch::detach(model);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("tree mean/std of non-torch tensors: within the documented bound of torch's float32 reduction") {
  // Documented bound (docs/adapters.md): nanscope's mean is the float32 rounding of the exact mean; torch's
  // float32 reduction differs from the exact mean by at most (ceil(log2 n) + 2) * 2^-24 * mean|x|; so the two
  // printed values differ by at most that plus one float32 ulp, and — when that is below half a unit of the
  // 5th significant digit — by at most one unit in the last printed digit. std: torch accumulates in double,
  // so one float32 ulp of the std.
  at::manual_seed(5);
  int checked = 0, printed_differ = 0;
  for (int i = 0; i < 300; ++i) {
    const std::int64_t n = 1 + (i * 997) % 60000;
    at::Tensor t = (i % 3 == 0) ? at::randn({n}) : (i % 3 == 1) ? at::rand({n}) * 10 + 1 : at::randn({n}) * 1e-3 + 5e-3;
    const nanscope::health_result h = nanscope::check(t);
    const nanscope::detail::torch_stats s = nanscope::detail::torch_stats_of(h, true);
    const double tm = t.mean().item<double>();
    const double mean_abs = t.abs().to(at::kDouble).mean().item<double>();
    const double ulp = std::ldexp(1.0, std::ilogb(std::fabs(tm) > 0 ? std::fabs(tm) : 1e-38) - 23);
    const double bound = (std::ceil(std::log2(static_cast<double>(n))) + 2) * std::ldexp(1.0, -24) * mean_abs + ulp;
    INFO("n " << n << " ours " << s.mean << " torch " << tm);
    CHECK(std::fabs(s.mean - tm) <= bound);
    if (n > 1) {
      const double ts = t.std().item<double>();
      const double sulp = std::ldexp(1.0, std::ilogb(ts) - 23);
      CHECK(std::fabs(s.std - ts) <= 2 * sulp);
    }
    // printed: one unit in the last digit when the tensor is well conditioned (mean|x| close to |mean|)
    const std::string ours = scalar_repr(s.mean), theirs = scalar_repr(tm);
    if (ours != theirs) ++printed_differ;
    if (i % 3 != 0) {
      long long ua = 0, ub = 0;
      int ea = 0, eb = 0;
      REQUIRE(printed_units(ours, ua, ea));
      REQUIRE(printed_units(theirs, ub, eb));
      if (ea == eb) {
        CHECK(std::llabs(ua - ub) <= 1);
      } else {  // across a power of ten: 9.9999e+00 vs 1.0000e+01
        CHECK(std::fabs(s.mean - tm) <= 1e-4 * std::pow(10.0, std::max(ea, eb)));
      }
    }
    ++checked;
  }
  MESSAGE(checked << " tensors, " << printed_differ << " printed means differ from torch's in the last digits");
}

TEST_CASE("torch attach, hf style: the root's run raises where HuggingFace's root hook does") {
  // HuggingFace's DebugUnderflowOverflow on the same PyTorch model: the root's forward hook counts the batch,
  // builds the root's frame (its own output holds the inf), prints the report and raises ValueError out of
  // model(x) in batch 0; with abort_after_batch_num=0 the root's hook of batch 0 raises, printing nothing.
  const std::string pad(17, ' ');
  const std::string report = "output has infs\n"
                             "\n"
                             "Detected inf/nan during batch_number=1\n"
                             "Last 2 forward frames:\n"
                             "abs min  abs max  metadata\n"
                             "\n\n" + pad + " *** Starting batch number=0 ***\n"
                             "abs min  abs max  metadata\n" +
                             pad + " fc Linear\n"
                             "1.00e+00 4.00e+00 weight\n"
                             "5.00e-01 5.00e-01 bias\n"
                             "1.00e+00 1.00e+00 input[0]\n"
                             "3.50e+00 6.50e+00 output\n" +
                             pad + "  Scaled\n"
                             "1.00e+00 1.00e+00 input[0]\n"
                             "2.10e+38      inf output\n"
                             "\n\n\n";
  const at::Tensor x = at::ones({1, 2});
  for (int through_macro = 0; through_macro < 2; ++through_macro) {
    CAPTURE(through_macro);
    nsrec::capture cap;
    nanscope::recorder_options o = nsrec::quiet_options(cap, nanscope::on_detect::throw_exception);
    o.style = nanscope::report_style::hf;
    nanscope::recorder rec(o);
    Scaled model(6e37f);
    nanscope::torch::attach(model, rec);
    std::string what;
    try {
      if (through_macro != 0) {
        (void)NANSCOPE_TORCH_CALL(model, x);
      } else {
        (void)nanscope::torch::run(model, x);
      }
      FAIL("the root's run returned");
    } catch (const nanscope::detection_error& e) {
      what = e.what();
      CHECK(e.info().module_path == "");
      CHECK(e.info().class_name == "Scaled");
    }
    CHECK(what ==
          "DebugUnderflowOverflow: inf/nan detected, aborting as there is no point running further. Please scroll "
          "up above this traceback to see the activation values prior to this event.");
    CHECK(cap.str() == report);
    CHECK(model->forwards == 1);
    CHECK_NOTHROW(rec.raise_pending());
    nanscope::torch::detach(model);
  }

  nsrec::capture cap;
  nanscope::recorder_options o = nsrec::quiet_options(cap, nanscope::on_detect::throw_exception);
  o.style = nanscope::report_style::hf;
  o.abort_after_step = 0;
  nanscope::recorder rec(o);
  Scaled model(1.0f);
  nanscope::torch::attach(model, rec);
  CHECK_THROWS_WITH_AS((void)nanscope::torch::run(model, x),
                       "DebugUnderflowOverflow: aborting after 1 batches due to `abort_after_batch_num=0` arg",
                       nanscope::stop_requested);
  CHECK(model->forwards == 1);
  CHECK(cap.str().empty());
  nanscope::torch::detach(model);
  // A plain Sequential run as the root (child by child, through torch::forward): the same.
  torch::nn::Sequential seq(torch::nn::Linear(2, 2), torch::nn::ReLU());
  nanscope::recorder rec2(o);
  nanscope::torch::attach(seq, rec2);
  CHECK_THROWS_AS((void)nanscope::torch::run(seq, x), nanscope::stop_requested);
  nanscope::torch::detach(seq);
}

#endif  // NANSCOPE_TEST_HAVE_TORCH
