// nanscope tests — torch_adapter_test.cpp: the LibTorch adapter (nanscope/adapters/torch.hpp).
//
//  - Tensors of every dtype this LibTorch has (f64, f32, f16, bf16, int8/16/32/64, uint8, bool; fp8 with
//    LibTorch >= 2.1), filled with NaN, ±inf, ±0, subnormals and ordinary values, seen through contiguous and
//    non-contiguous views (transpose, narrow, step slices, expand, permute, scalar, empty, storage offsets).
//    Each is checked three ways: nanscope::check(tensor); nanscope::check of a tensor_view the test builds
//    itself from the base tensor's pointer and the geometry it knows the view has; and, for float dtypes, an
//    independent reference computed with LibTorch's own operations (isnan, isposinf, masked_select, mean,
//    std, ...) on the tensor converted to double.
//  - Every refusal (undefined, sparse, quantized, complex, meta, other devices, CUDA, negative bit, rank > 8,
//    misaligned data) is a nanscope::error naming the tensor and the problem.
//  - torch::call / torch::forward: the recorder's frames (paths, class names, contexts, healths) for modules,
//    Sequentials (nested ones too) and plain callables, and detection in the layer that makes the NaN.
#if defined(NANSCOPE_TEST_HAVE_TORCH) && NANSCOPE_TEST_HAVE_TORCH

// LibTorch first: a LibTorch built with glog (Debian's) defines glog's CHECK, CHECK_EQ, ... macros, which are
// dropped here before doctest defines its own.
#include <nanscope/adapters/torch.hpp>

#include "support/errors.hpp"

#include <ATen/ATen.h>
#include <ATen/ops/from_blob.h>
#include <torch/nn/modules/activation.h>
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

#include "support/compare.hpp"
#include "support/recorder_support.hpp"
#include "support/reference.hpp"

#include <nanscope/check.hpp>
#include <nanscope/macros.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace {

using nanscope::dtype;
using nanscope::frame;
using nanscope::tensor_role;

struct torch_type {
  at::ScalarType torch;
  dtype ours;
  double min_normal;  // 0 for integers
};
std::vector<torch_type> all_types() {
  std::vector<torch_type> v = {
      {at::kDouble, dtype::f64, std::ldexp(1.0, -1022)}, {at::kFloat, dtype::f32, std::ldexp(1.0, -126)},
      {at::kHalf, dtype::f16, std::ldexp(1.0, -14)},     {at::kBFloat16, dtype::bf16, std::ldexp(1.0, -126)},
      {at::kChar, dtype::i8, 0.0},                       {at::kShort, dtype::i16, 0.0},
      {at::kInt, dtype::i32, 0.0},                       {at::kLong, dtype::i64, 0.0},
      {at::kByte, dtype::u8, 0.0},                       {at::kBool, dtype::boolean, 0.0},
  };
#if NANSCOPE_TORCH_HAS_FLOAT8()
  v.push_back({at::ScalarType::Float8_e4m3fn, dtype::f8_e4m3fn, std::ldexp(1.0, -6)});
  v.push_back({at::ScalarType::Float8_e5m2, dtype::f8_e5m2, std::ldexp(1.0, -14)});
#endif
  return v;
}

/// A [6, 10] contiguous tensor of the type: random values with NaN, ±inf, ±0, subnormals and a value that
/// overflows the narrow formats, spread so that every view below meets some of them.
at::Tensor make_base(const torch_type& t, std::uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  if (t.min_normal == 0.0) {
    if (t.torch == at::kBool) return at::randint(0, 2, {6, 10}, gen, at::kLong).to(at::kBool);
    if (t.torch == at::kByte) return at::randint(0, 256, {6, 10}, gen, at::kLong).to(at::kByte);
    return at::randint(-128, 128, {6, 10}, gen, at::kLong).to(t.torch);
  }
  at::Tensor d = at::randn({6, 10}, gen, at::kDouble) * 3.0;
  double* p = d.data_ptr<double>();
  const double nan = nstest::qnan(), inf = nstest::pos_inf();
  p[13] = nan;
  p[22] = inf;
  p[31] = -inf;
  p[4] = 0.0;
  p[40] = -0.0;
  p[7] = t.min_normal / 4;   // subnormal in every float format
  p[36] = -t.min_normal / 2;
  p[51] = 1e6;              // inf in f16, NaN in e4m3fn (which has no inf)
  p[59] = nan;
  p[25] = t.min_normal;
  return d.to(t.torch);
}

/// A view of the base whose geometry the test knows: shape, strides and element offset from the base's start.
struct layout_case {
  const char* label;
  std::function<at::Tensor(const at::Tensor&)> make;
  std::vector<std::int64_t> shape, strides;
  std::int64_t offset;
};
std::vector<layout_case> all_layouts() {
  return {
      {"contiguous", [](const at::Tensor& b) { return b; }, {6, 10}, {10, 1}, 0},
      {"transpose", [](const at::Tensor& b) { return b.t(); }, {10, 6}, {1, 10}, 0},
      {"narrow", [](const at::Tensor& b) { return b.narrow(1, 2, 5); }, {6, 5}, {10, 1}, 2},
      {"step slice", [](const at::Tensor& b) { return b.slice(1, 0, 10, 3); }, {6, 4}, {10, 3}, 0},
      {"rows 2..4 (storage offset)", [](const at::Tensor& b) { return b.slice(0, 2, 5); }, {3, 10}, {10, 1}, 20},
      {"steps and offset", [](const at::Tensor& b) { return b.slice(0, 1, 6, 2).slice(1, 1, 10, 4); }, {3, 3},
       {20, 4}, 11},
      {"expanded (stride 0)", [](const at::Tensor& b) { return b.select(0, 1).unsqueeze(0).expand({4, 10}); },
       {4, 10}, {0, 1}, 10},
      {"permuted 3-d", [](const at::Tensor& b) { return b.view({2, 3, 10}).permute({2, 0, 1}); }, {10, 2, 3},
       {1, 30, 10}, 0},
      {"unsqueezed", [](const at::Tensor& b) { return b.unsqueeze(1); }, {6, 1, 10}, {10, 10, 1}, 0},
      {"scalar", [](const at::Tensor& b) { return b.select(0, 2).select(0, 3); }, {}, {}, 23},
      {"empty", [](const at::Tensor& b) { return b.narrow(0, 0, 0); }, {0, 10}, {10, 1}, 0},
  };
}

nanscope::tensor_view hand_view(const at::Tensor& base, dtype t, const layout_case& l) {
  nanscope::tensor_view v;
  v.data = static_cast<const unsigned char*>(base.data_ptr()) +
           static_cast<std::size_t>(l.offset) * nstest::ref_size_of(t);
  v.type = t;
  v.rank = static_cast<int>(l.shape.size());
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = l.shape[static_cast<std::size_t>(i)];
    v.strides[i] = l.strides[static_cast<std::size_t>(i)];
  }
  return v;
}

/// The health of a float tensor computed with LibTorch's own operations, in double.
struct torch_reference {
  std::uint64_t count = 0, negative = 0, zero = 0, positive = 0, neg_inf = 0, pos_inf = 0, nan = 0, subnormal = 0;
  double min = nstest::qnan(), max = nstest::qnan(), abs_max = nstest::qnan(), abs_min = nstest::qnan(),
         abs_min_nonzero = nstest::qnan(), mean = nstest::qnan(), std_dev = nstest::qnan(), mean_abs = 0.0;
  std::int64_t first_nonfinite = -1;
};
torch_reference reference_of(const at::Tensor& t, double min_normal) {
  torch_reference r;
  const at::Tensor x = t.to(at::kDouble).reshape({-1});  // logical row-major order
  auto count = [](const at::Tensor& mask) { return static_cast<std::uint64_t>(mask.sum().item<std::int64_t>()); };
  const at::Tensor is_nan = x.isnan(), finite = x.isfinite();
  r.count = static_cast<std::uint64_t>(x.numel());
  r.nan = count(is_nan);
  r.pos_inf = count(x.isposinf());
  r.neg_inf = count(x.isneginf());
  r.zero = count(x == 0);
  r.negative = count(finite & (x < 0));
  r.positive = count(finite & (x > 0));
  r.subnormal = count(finite & (x != 0) & (x.abs() < min_normal));
  const at::Tensor bad = at::logical_not(finite).nonzero();
  if (bad.size(0) > 0) r.first_nonfinite = bad[0][0].item<std::int64_t>();
  const at::Tensor not_nan = x.masked_select(at::logical_not(is_nan));
  if (not_nan.numel() > 0) {
    r.min = not_nan.min().item<double>();
    r.max = not_nan.max().item<double>();
    r.abs_max = not_nan.abs().max().item<double>();
    r.abs_min = not_nan.abs().min().item<double>();
    const at::Tensor nz = not_nan.abs().masked_select(not_nan != 0);
    if (nz.numel() > 0) r.abs_min_nonzero = nz.min().item<double>();
  }
  const at::Tensor fin = x.masked_select(finite);
  if (fin.numel() > 0) {
    r.mean = fin.mean().item<double>();
    r.mean_abs = fin.abs().mean().item<double>();
  }
  if (fin.numel() > 1) r.std_dev = fin.std().item<double>();  // unbiased, as nanscope's
  return r;
}

void expect_matches(const nanscope::health_result& h, const torch_reference& r, dtype t) {
  CHECK(h.count == r.count);
  CHECK(h.nan == r.nan);
  CHECK(h.pos_inf == r.pos_inf);
  CHECK(h.neg_inf == r.neg_inf);
  CHECK(h.zero == r.zero);
  CHECK(h.negative == r.negative);
  CHECK(h.positive == r.positive);
  CHECK(h.subnormal == r.subnormal);
  CHECK(h.first_nonfinite == r.first_nonfinite);
  CHECK(h.has_nonfinite() == (r.first_nonfinite >= 0));
  INFO("min ", nstest::show(h.min), " vs ", nstest::show(r.min), "; max ", nstest::show(h.max), " vs ",
       nstest::show(r.max));
  CHECK(nstest::same_value(h.min, r.min));
  CHECK(nstest::same_value(h.max, r.max));
  CHECK(nstest::same_value(h.abs_max, r.abs_max));
  CHECK(nstest::same_value(h.abs_min, r.abs_min));
  CHECK(nstest::same_value(h.abs_min_nonzero, r.abs_min_nonzero));
  const long double tol = nstest::moment_tol(t, nanscope::isa::automatic) + 1e-12L;
  INFO("mean ", nstest::show(h.mean), " vs ", nstest::show(r.mean), "; std ", nstest::show(h.std), " vs ",
       nstest::show(r.std_dev));
  CHECK(nstest::close_to(h.mean, r.mean, tol, r.mean_abs));
  CHECK(nstest::close_to(h.std, r.std_dev, tol, r.std_dev));
}

using nstest::error_of;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A module that makes NaN from negative inputs, as a log-scaling layer does.
struct LogImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return at::log(x); }
};
TORCH_MODULE(Log);

// A Sequential that can sit inside another (LibTorch needs a non-template forward for that).
struct BlockImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  at::Tensor forward(const at::Tensor& x) { return SequentialImpl::forward(x); }
};
TORCH_MODULE(Block);

nanscope::recorder_options options_for(const nsrec::capture& c, nanscope::on_detect policy) {
  nanscope::recorder_options o = nsrec::quiet_options(c, policy);
  o.max_frames = 64;
  for (double& w : o.warn_abs_max) w = 0.0;
  return o;
}

/// The health recorded for one tensor of a frame (a failed REQUIRE when there is none).
nanscope::health_result find(const frame& f, tensor_role role, const std::string& context) {
  for (const auto& t : f.tensors)
    if (t.role == role && t.context == context) return t.health;
  CAPTURE(f.module_path);
  CAPTURE(context);
  REQUIRE(false);
  return {};
}

std::vector<std::string> contexts(const frame& f) {
  std::vector<std::string> out;
  for (const auto& t : f.tensors) out.push_back(t.context);
  return out;
}

// The hf style on a LibTorch model, against what HuggingFace's DebugUnderflowOverflow does with the same
// PyTorch model: its forward hook runs as each module call completes, the root's last; the root's hook counts
// the batch (batch_number += 1) before it builds the root's frame, prints the report and raises ValueError
// when a frame held inf/nan, and raises the abort_after_batch_num error once batch_number exceeds it. The
// exception leaves model(x): the root's call never returns.

/// Root "" of class Scaled: fc (Linear 2 -> 2, weight [[1, 2], [3, 4]], bias [0.5, -0.5]), then the root's own
/// code multiplies fc's output by `scale` (6e37: [3.5, 6.5] becomes [2.1e38, inf] in float32).
struct ScaledImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  nanscope::recorder* rec = nullptr;
  float scale = 1.0f;
  int forwards = 0;
  ScaledImpl(nanscope::recorder& r, float s) : rec(&r), scale(s) {
    fc = register_module("fc", torch::nn::Linear(2, 2));
    at::NoGradGuard no_grad;
    fc->weight.copy_(at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).reshape({2, 2}));
    fc->bias.copy_(at::tensor({0.5f, -0.5f}));
  }
  at::Tensor forward(const at::Tensor& x) {
    ++forwards;
    return nanscope::torch::call(*rec, "fc", fc, x) * scale;
  }
};
TORCH_MODULE(Scaled);

nanscope::recorder_options hf_options(const nsrec::capture& c) {
  nanscope::recorder_options o = nsrec::quiet_options(c, nanscope::on_detect::throw_exception);
  o.style = nanscope::report_style::hf;
  return o;
}

const std::string hf_pad(17, ' ');
const char* const hf_detected_what =
    "DebugUnderflowOverflow: inf/nan detected, aborting as there is no point running further. Please scroll up "
    "above this traceback to see the activation values prior to this event.";

/// HuggingFace's stdout for batch 0 of Scaled with scale 6e37: the root's own output holds the inf; its hook
/// has counted the batch already, so the report says batch_number=1 and shows both frames of batch 0.
std::string hf_scaled_report() {
  return "output has infs\n"
         "\n"
         "Detected inf/nan during batch_number=1\n"
         "Last 2 forward frames:\n"
         "abs min  abs max  metadata\n"
         "\n\n" + hf_pad + " *** Starting batch number=0 ***\n"
         "abs min  abs max  metadata\n" +
         hf_pad + " fc Linear\n"
         "1.00e+00 4.00e+00 weight\n"
         "5.00e-01 5.00e-01 bias\n"
         "1.00e+00 1.00e+00 input[0]\n"
         "3.50e+00 6.50e+00 output\n" +
         hf_pad + "  Scaled\n"
         "1.00e+00 1.00e+00 input[0]\n"
         "2.10e+38      inf output\n"
         "\n\n\n";
}

}  // namespace

TEST_CASE("torch: every dtype and view equals the core check and LibTorch's own counts") {
  std::uint64_t seed = 1;
  for (const torch_type& t : all_types()) {
    const at::Tensor base = make_base(t, ++seed);
    REQUIRE(base.is_contiguous());
    for (const layout_case& l : all_layouts()) {
      CAPTURE(std::string(nanscope::name(t.ours)));
      CAPTURE(std::string(l.label));
      const at::Tensor x = l.make(base);
      const nanscope::tensor_view expected = hand_view(base, t.ours, l);
      const nanscope::tensor_view v = nanscope::torch::view(x, "x");
      if (x.numel() > 0) CHECK(v.data == expected.data);  // LibTorch gives no pointer for an empty tensor
      CHECK(v.type == t.ours);
      CHECK(v.rank == expected.rank);
      CHECK(v.space == nanscope::memory_space::host);
      for (int i = 0; i < v.rank; ++i) {
        CHECK(v.shape[i] == expected.shape[i]);
        CHECK(v.strides[i] == expected.strides[i]);
      }
      const nanscope::health_result h = nanscope::check(x);
      CHECK(nstest::first_difference(h, nanscope::check(expected)) == "");
      CHECK(h.type == t.ours);
      CHECK(h.count == static_cast<std::uint64_t>(x.numel()));
      if (t.min_normal != 0.0) expect_matches(h, reference_of(x, t.min_normal), t.ours);
    }
  }
}

TEST_CASE("torch: a misaligned from_blob is read like an aligned copy") {
  alignas(8) unsigned char raw[4 * 5 + 3] = {};
  const float vals[5] = {1.5f, -2.0f, std::numeric_limits<float>::infinity(), 0.0f, std::nanf("")};
  for (std::size_t off = 1; off < 4; ++off) {
    std::memcpy(raw + off, vals, sizeof vals);
    const at::Tensor mis = at::from_blob(raw + off, {5}, at::kFloat);
    const nanscope::tensor_view v = nanscope::torch::view(mis, "mis");
    CHECK(v.data == static_cast<const void*>(raw + off));
    const nanscope::health_result got = nanscope::check(v);
    const nanscope::health_result want = nanscope::check(nanscope::tensor_view::contiguous(vals, nanscope::dtype::f32, {5}));
    CHECK(got.count == 5);
    CHECK(got.pos_inf == want.pos_inf);
    CHECK(got.nan == want.nan);
    CHECK(got.zero == want.zero);
    CHECK(got.first_nonfinite == 2);
    CHECK(got.min == want.min);
    CHECK(got.max == want.max);
  }
}

TEST_CASE("torch: the data around a view is never read") {
  // Control: a NaN just outside a narrow view must not be counted, and is counted once the view includes it.
  at::Tensor b = at::zeros({4, 8}, at::kFloat);
  b.index_put_({1, 5}, nstest::qnan_f());
  CHECK(nanscope::check(b.narrow(1, 0, 5)).nan == 0);
  CHECK(nanscope::check(b.narrow(1, 0, 6)).nan == 1);
  CHECK(nanscope::check(b.slice(1, 0, 8, 2)).nan == 0);
  CHECK(nanscope::check(b.slice(1, 1, 8, 2)).nan == 1);
  CHECK(nanscope::check(b.t()).first_nonfinite == 5 * 4 + 1);
}

TEST_CASE("torch: at::Tensor is a tensor for check, to_view, the recorder and the macros") {
  CHECK(nanscope::is_tensor<at::Tensor>::value);
  CHECK(nanscope::is_tensor<at::TensorBase>::value);
  at::Tensor t = at::arange(12, at::kFloat).reshape({3, 4});
  t.index_put_({2, 1}, nstest::pos_inf_f());
  CHECK(nanscope::check(t).pos_inf == 1);
  CHECK(nanscope::check(t, "named").first_nonfinite == 9);
  CHECK(std::string(nanscope::to_view(t, "n").name) == "n");
  const std::vector<at::Half> halves = {at::Half(1.0f), at::Half(-2.0f)};
  CHECK(nanscope::check(halves).type == dtype::f16);
  const std::vector<at::BFloat16> bhalves = {at::BFloat16(1.0f)};
  CHECK(nanscope::check(bhalves).type == dtype::bf16);

  nsrec::capture c;
  nanscope::recorder rec(options_for(c, nanscope::on_detect::print_and_continue));
  {
    NANSCOPE_SCOPE_TO(rec, "layer", "Layer");
    NANSCOPE_INPUT_TO(rec, at::ones({2}));
    NANSCOPE_OUTPUT_TO(rec, t);
  }
  const auto frames = rec.frames();
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].module_path == "layer");
  REQUIRE(frames[0].tensors.size() == 2);
  CHECK(frames[0].tensors[1].health.pos_inf == 1);
  CHECK(rec.detections() == 1);
  CHECK(contains(c.str(), "layer"));
}

TEST_CASE("torch: every refusal names the tensor and the problem") {
  const at::Tensor dense = at::randn({3, 4});
  float buf[8] = {};
  auto expect_error = [](const std::function<at::Tensor()>& make, const char* problem) {
    CAPTURE(std::string(problem));
    const at::Tensor t = make();
    const std::string named = error_of([&] { (void)nanscope::check(nanscope::torch::view(t, "my_tensor")); });
    CAPTURE(named);
    CHECK(contains(named, "nanscope: tensor 'my_tensor': "));
    CHECK(contains(named, problem));
    const std::string unnamed = error_of([&] { (void)nanscope::check(t); });
    CAPTURE(unnamed);
    CHECK(contains(unnamed, "'<unnamed>'"));
    CHECK(contains(unnamed, problem));
  };
  expect_error([] { return at::Tensor(); }, "undefined at::Tensor");
  expect_error([&] { return dense.to_sparse(); }, "has layout Sparse: only strided (dense) tensors");
  expect_error([&] { return at::quantize_per_tensor(dense, 0.1, 10, at::kQUInt8); }, "is quantized");
  expect_error([] { return at::randn({2, 2}, at::kComplexFloat); }, "at::Tensor ComplexFloat[2, 2] on cpu is complex");
  expect_error([] { return at::empty({2, 3}, at::TensorOptions().device(at::kMeta)); }, "is a meta tensor");
  expect_error([&] { return at::_neg_view(dense); }, "negative bit set");
  expect_error([] { return at::zeros({1, 1, 1, 1, 1, 1, 1, 1, 2}); }, "has rank 9; nanscope views have at most 8");
  // Tensors on other devices, described without touching the device: LibTorch builds a CPU-only tensor object
  // for any device when told the target device explicitly.
  auto on_device = [&buf](at::Device d) {
    return at::for_blob(buf, {2, 4})
        .target_device(d)
        .options(at::TensorOptions().dtype(at::kFloat).device(d))
        .make_tensor();
  };
  expect_error([&] { return on_device(at::Device(at::kCUDA, 1)); },
               "at::Tensor Float[2, 4] is on cuda:1; nanscope's CUDA backend (nanscope/cuda.cuh) is not "
               "compiled in");
  expect_error([&] { return on_device(at::Device(at::kMPS, 0)); }, "is on mps:0; nanscope reads CPU tensors");

  // The device view a CUDA backend will consume.
  const at::Tensor gpu = on_device(at::Device(at::kCUDA, 1));
  const nanscope::tensor_view dv = nanscope::torch::any_device_view(gpu, "g");
  CHECK(dv.space == nanscope::memory_space::cuda_device);
  CHECK(dv.device_id == 1);
  CHECK(dv.data == static_cast<const void*>(buf));
  CHECK(dv.rank == 2);
  CHECK(dv.strides[0] == 4);
}

TEST_CASE("torch: forward() records every child of a Sequential and finds the layer that makes the NaN") {
  nsrec::capture c;
  nanscope::recorder rec(options_for(c, nanscope::on_detect::throw_exception));
  torch::nn::Sequential seq({{"fc1", torch::nn::Linear(4, 8)}, {"act", torch::nn::ReLU()},
                             {"fc2", torch::nn::Linear(8, 3)}});
  const at::Tensor x = at::randn({2, 4});
  const at::Tensor y = nanscope::torch::forward(rec, seq, x, "model");
  CHECK(at::equal(y, seq->forward(x)));
  auto frames = rec.frames();
  REQUIRE(frames.size() == 4);
  const char* paths[] = {"model.fc1", "model.act", "model.fc2", "model"};
  const char* classes[] = {"Linear", "ReLU", "Linear", "Sequential"};
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(frames[i].module_path == paths[i]);
    CHECK(frames[i].class_name == classes[i]);
  }
  CHECK((contexts(frames[0]) == std::vector<std::string>{"weight", "bias", "input[0]", "output"}));
  CHECK((contexts(frames[1]) == std::vector<std::string>{"input[0]", "output"}));
  CHECK((contexts(frames[3]) == std::vector<std::string>{"input[0]", "output"}));
  // The recorded healths are those of the real tensors.
  auto fc1 = seq[0]->as<torch::nn::Linear>();
  REQUIRE(fc1 != nullptr);
  const at::Tensor h1 = fc1->forward(x);
  CHECK(nstest::first_difference(find(frames[0], tensor_role::output, "output"),
                                 nanscope::check(h1)) == "");
  CHECK(nstest::first_difference(find(frames[0], tensor_role::parameter, "weight"),
                                 nanscope::check(fc1->weight)) == "");
  CHECK(nstest::first_difference(find(frames[1], tensor_role::output, "output"),
                                 nanscope::check(at::relu(h1))) == "");
  CHECK(nstest::first_difference(find(frames[3], tensor_role::output, "output"), nanscope::check(y)) == "");

  // Without parameters.
  rec.clear();
  (void)nanscope::torch::forward(rec, seq, x, "model", nanscope::torch::call_options{}.with_parameters(false));
  frames = rec.frames();
  REQUIRE(frames.size() == 4);
  CHECK((contexts(frames[0]) == std::vector<std::string>{"input[0]", "output"}));

  // A log layer that turns the negative outputs of fc into NaN: detected there, as the producer.
  torch::nn::Sequential bad({{"fc", torch::nn::Linear(4, 4)}, {"log", Log()}, {"head", torch::nn::Linear(4, 2)}});
  bool detected = false;
  try {
    (void)nanscope::torch::forward(rec, bad, at::randn({8, 4}), "net");
  } catch (const nanscope::detection_error& e) {
    detected = true;
    CHECK(e.info().module_path == "net.log");
    CHECK(e.info().class_name == "Log");
    CHECK(e.info().context == "output");
    CHECK(e.info().produced_here);
    CHECK(e.info().health.nan > 0);
  }
  CHECK(detected);
  CHECK(contains(c.str(), "net.log"));
}

TEST_CASE("torch: forward() with a Sequential subclass inside; a root scope without a name") {
  nsrec::capture c;
  nanscope::recorder rec(options_for(c, nanscope::on_detect::print_and_continue));
  Block inner(torch::nn::Linear(3, 5), torch::nn::Tanh());
  torch::nn::Sequential outer({{"block", inner}, {"head", torch::nn::Linear(5, 2)}});
  const at::Tensor x = at::randn({4, 3});
  const at::Tensor y = nanscope::torch::forward(rec, outer, x);
  CHECK(at::equal(y, outer->forward(x)));
  auto frames = rec.frames();
  std::vector<std::string> paths, classes;
  for (const auto& f : frames) {
    paths.push_back(f.module_path);
    classes.push_back(f.class_name);
  }
  // By default the subclass is one module: its own forward() runs.
  CHECK((paths == std::vector<std::string>{"block", "head", ""}));
  CHECK((classes == std::vector<std::string>{"Block", "Linear", "Sequential"}));

  rec.clear();
  const at::Tensor y2 =
      nanscope::torch::forward(rec, outer, x, "m", nanscope::torch::call_options{}.with_descend_sequentials(true));
  CHECK(at::equal(y2, y));
  frames = rec.frames();
  paths.clear();
  classes.clear();
  for (const auto& f : frames) {
    paths.push_back(f.module_path);
    classes.push_back(f.class_name);
  }
  CHECK((paths == std::vector<std::string>{"m.block.0", "m.block.1", "m.block", "m.head", "m"}));
  CHECK((classes == std::vector<std::string>{"Linear", "Tanh", "Block", "Linear", "Sequential"}));
}

TEST_CASE("torch: call() with modules in every form and with plain callables") {
  nsrec::capture c;
  nanscope::recorder rec(options_for(c, nanscope::on_detect::print_and_continue));
  torch::nn::Linear fc(3, 2);
  const at::Tensor x = at::randn({5, 3});
  const at::Tensor expected = fc->forward(x);

  CHECK(at::equal(nanscope::torch::call(rec, "holder", fc, x), expected));
  CHECK(at::equal(nanscope::torch::call(rec, "shared_ptr", fc.ptr(), x), expected));
  CHECK(at::equal(nanscope::torch::call(rec, "object", *fc, x), expected));
  const torch::nn::Linear& const_fc = fc;
  CHECK(at::equal(nanscope::torch::call(rec, "const_holder", const_fc, x), expected));
  CHECK(at::equal(nanscope::torch::call(rec, nanscope::torch::call_options{}.with_parameters(false), "no_params", fc, x),
                  expected));
  auto frames = rec.frames();
  REQUIRE(frames.size() == 5);
  for (std::size_t i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(frames[i].class_name == "Linear");
    CHECK((contexts(frames[i]) == std::vector<std::string>{"weight", "bias", "input[0]", "output"}));
    CHECK(nstest::first_difference(find(frames[i], tensor_role::output, "output"),
                                   nanscope::check(expected)) == "");
  }
  CHECK(frames[0].module_path == "holder");
  CHECK(frames[1].module_path == "shared_ptr");
  CHECK(frames[3].module_path == "const_holder");
  CHECK((contexts(frames[4]) == std::vector<std::string>{"input[0]", "output"}));

  // A callable with tensor and non-tensor arguments, returning a tuple with a non-tensor in the middle.
  rec.clear();
  const at::Tensor a = at::randn({2, 2}), b = at::randn({2, 2});
  auto split = [](const at::Tensor& p, int k, const at::Tensor& q) { return std::make_tuple(p + q, k, p * q); };
  const auto out = nanscope::torch::call(rec, "split", split, a, 3, b);
  CHECK(std::get<1>(out) == 3);
  CHECK(at::equal(std::get<2>(out), a * b));
  frames = rec.frames();
  REQUIRE(frames.size() == 1);
  CHECK(frames[0].class_name == "callable");
  CHECK((contexts(frames[0]) == std::vector<std::string>{"input[0]", "input[1]", "input[2]", "output[0]", "output[2]"}));
  CHECK(frames[0].tensors[0].is_tensor);
  CHECK_FALSE(frames[0].tensors[1].is_tensor);
  CHECK_FALSE(frames[0].tensors[1].is_none);
  CHECK(nstest::first_difference(frames[0].tensors[4].health, nanscope::check(a * b)) == "");

  // Vectors of tensors in and out; absent tensors (undefined, nullopt) are None; a void callable.
  rec.clear();
  auto stack = [](const std::vector<at::Tensor>& ts, const at::Tensor& maybe, c10::optional<at::Tensor> opt) {
    (void)maybe;
    (void)opt;
    return std::vector<at::Tensor>{ts[0] * 2, ts[1] * 2};
  };
  const std::vector<at::Tensor> two = {a, b};
  const auto outs = nanscope::torch::call(rec, "stack", stack, two, at::Tensor(), c10::optional<at::Tensor>());
  CHECK(outs.size() == 2);
  int calls = 0;
  nanscope::torch::call(rec, "void", [&calls](const at::Tensor&) { ++calls; }, a);
  CHECK(calls == 1);
  frames = rec.frames();
  REQUIRE(frames.size() == 2);
  CHECK((contexts(frames[0]) ==
        std::vector<std::string>{"input[0]", "input[1]", "input[2]", "input[3]", "output[0]", "output[1]"}));
  CHECK(frames[0].tensors[2].is_none);
  CHECK(frames[0].tensors[3].is_none);
  CHECK((contexts(frames[1]) == std::vector<std::string>{"input[0]"}));

  // Nesting: calls inside a call's callable land under its path.
  rec.clear();
  auto block = [&](const at::Tensor& in) { return nanscope::torch::call(rec, "fc", fc, in).relu(); };
  (void)nanscope::torch::call(rec, "block", block, x);
  frames = rec.frames();
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].module_path == "block.fc");
  CHECK(frames[1].module_path == "block");
}

TEST_CASE("torch: call() detects in the right module and names bad arguments") {
  nsrec::capture c;
  nanscope::recorder rec(options_for(c, nanscope::on_detect::throw_exception));
  torch::nn::Linear fc(3, 3);
  Log log;
  const at::Tensor x = at::tensor({1.0f, -2.0f, 3.0f}).reshape({1, 3});
  bool detected = false;
  try {
    (void)nanscope::torch::call(rec, "log", log, x);
  } catch (const nanscope::detection_error& e) {
    detected = true;
    CHECK(e.info().module_path == "log");
    CHECK(e.info().class_name == "Log");
    CHECK(e.info().context == "output");
    CHECK(e.info().produced_here);
    CHECK(e.info().health.nan == 1);
  }
  CHECK(detected);

  // A NaN in a weight is reported at that parameter, before the module runs.
  rec.set_step(1);
  fc->weight.detach().index_put_({0, 0}, nstest::qnan_f());  // the same storage, outside autograd
  detected = false;
  try {
    (void)nanscope::torch::call(rec, "fc", fc, x.abs());
  } catch (const nanscope::detection_error& e) {
    detected = true;
    CHECK(e.info().module_path == "fc");
    CHECK(e.info().context == "weight");
    CHECK(e.info().role == tensor_role::parameter);
  }
  CHECK(detected);

  const at::Tensor meta = at::empty({2, 3}, at::TensorOptions().device(at::kMeta));
  const std::string e = error_of([&] { (void)nanscope::torch::call(rec, "enc", [](const at::Tensor& t) { return t; }, meta); });
  CHECK(contains(e, "nanscope: tensor 'enc.input[0]'"));
  CHECK(contains(e, "is a meta tensor"));
}

TEST_CASE("torch: call() and forward() on the default recorder") {
  nanscope::recorder& d = nanscope::default_recorder();
  const nanscope::recorder_options saved = d.options();
  nsrec::capture c;
  d.set_options(options_for(c, nanscope::on_detect::print_and_continue));
  d.clear();
  torch::nn::Sequential seq(torch::nn::Linear(2, 2));
  torch::nn::Linear lin(2, 2);
  const at::Tensor x = at::randn({1, 2});
  (void)nanscope::torch::call("single", lin, x);
  (void)nanscope::torch::forward(seq, x, "seq");
  const auto frames = d.frames();
  d.clear();
  d.set_options(saved);
  REQUIRE(frames.size() == 3);
  CHECK(frames[0].module_path == "single");
  CHECK(frames[1].module_path == "seq.0");
  CHECK(frames[2].module_path == "seq");
}

TEST_CASE("torch: class names") {
  CHECK(nanscope::detail::torch_class_name("torch::nn::LinearImpl") == "Linear");
  CHECK(nanscope::detail::torch_class_name("(anonymous namespace)::LogImpl") == "Log");
  CHECK(nanscope::detail::torch_class_name("MyBlock") == "MyBlock");
  CHECK(nanscope::detail::torch_class_name("Impl") == "Impl");
  CHECK(nanscope::detail::torch_class_name("ns::Wrap<a::b>") == "Wrap<a::b>");
  CHECK(nanscope::detail::torch_class_name("ns::WrapImpl<a::bImpl>") == "Wrap<a::bImpl>");
}

TEST_CASE("torch hf style: an inf made by the root's own code is raised by the root's call, in batch 0") {
  nsrec::capture c;
  nanscope::recorder rec(hf_options(c));
  Scaled model(rec, 6e37f);
  const at::Tensor x = at::ones({1, 2});
  std::string what;
  try {
    (void)nanscope::torch::call(rec, "", model, x);
    FAIL("the root's call returned: HuggingFace raises in the root's forward hook");
  } catch (const nanscope::detection_error& e) {
    what = e.what();
    CHECK(e.info().module_path == "");
    CHECK(e.info().class_name == "Scaled");
    CHECK(e.info().context == "output");
    CHECK(e.info().produced_here);
  }
  CHECK(what == hf_detected_what);
  CHECK(c.str() == hf_scaled_report());
  CHECK(model->forwards == 1);
  CHECK(rec.detections() == 1);
  CHECK_NOTHROW(rec.raise_pending());  // raised once, by the call
  CHECK(rec.step() == 1);              // the root's call ended batch 0
}

TEST_CASE("torch hf style: abort_after_step raises in the root's call of that batch and prints nothing") {
  for (std::int64_t n : {0, 2}) {
    CAPTURE(n);
    nsrec::capture c;
    nanscope::recorder_options o = hf_options(c);
    o.abort_after_step = n;
    nanscope::recorder rec(o);
    Scaled model(rec, 1.0f);
    const at::Tensor x = at::ones({1, 2});
    for (std::int64_t batch = 0; batch < n; ++batch) {
      CAPTURE(batch);
      CHECK_NOTHROW((void)nanscope::torch::call(rec, "", model, x));
    }
    std::string what;
    try {
      (void)nanscope::torch::call(rec, "", model, x);
      FAIL("batch abort_after_step returned: HuggingFace raises at its end");
    } catch (const nanscope::stop_requested& e) {
      what = e.what();
    }
    CHECK(what == "DebugUnderflowOverflow: aborting after " + std::to_string(n + 1) +
                      " batches due to `abort_after_batch_num=" + std::to_string(n) + "` arg");
    CHECK(model->forwards == n + 1);  // batch n ran to its end; nothing of batch n + 1 ran
    CHECK(c.str().empty());
    CHECK_NOTHROW(rec.raise_pending());
  }
  // forward() on a Sequential: the same, from the Sequential's scope (the root).
  nsrec::capture c;
  nanscope::recorder_options o = hf_options(c);
  o.abort_after_step = 0;
  nanscope::recorder rec(o);
  torch::nn::Sequential seq(torch::nn::Linear(2, 2), torch::nn::ReLU());
  CHECK_THROWS_WITH_AS((void)nanscope::torch::forward(rec, seq, at::ones({1, 2})),
                       "DebugUnderflowOverflow: aborting after 1 batches due to `abort_after_batch_num=0` arg",
                       nanscope::stop_requested);
  CHECK(c.str().empty());
}

TEST_CASE("torch hf style: only the outermost call raises; a nested call leaves it to the enclosing scope") {
  nsrec::capture c;
  nanscope::recorder rec(hf_options(c));
  Scaled model(rec, 6e37f);
  const at::Tensor x = at::ones({1, 2});
  {
    nanscope::scope outer(rec, "", "Loop");  // the root is a scope of the caller's
    CHECK_NOTHROW((void)nanscope::torch::call(rec, "model", model, x));  // model's frame is reported here...
    CHECK(rec.detections() == 1);
    // ...and raised by the next record of the enclosing scope, not by the nested call's return.
    CHECK_THROWS_AS(outer.output(x), nanscope::detection_error);
  }
  CHECK_NOTHROW(rec.raise_pending());
}

TEST_CASE("torch: the native styles raise abort_after_step's stop as the outermost call returns") {
  // The stop is armed when the outermost scope ends (a destructor: it cannot throw there); the root's call is
  // the first place that can, so the step that reached the limit is the last one that returns.
  nsrec::capture c;
  nanscope::recorder_options o = options_for(c, nanscope::on_detect::throw_exception);
  o.abort_after_step = 1;
  nanscope::recorder rec(o);
  torch::nn::Linear fc(2, 2);
  const at::Tensor x = at::ones({1, 2});
  CHECK_NOTHROW((void)nanscope::torch::call(rec, "fc", fc, x));
  CHECK_THROWS_WITH_AS((void)nanscope::torch::call(rec, "fc", fc, x),
                       "DebugUnderflowOverflow: aborting after 2 batches due to `abort_after_batch_num=1` arg",
                       nanscope::stop_requested);
  CHECK(contains(c.str(), "aborting after 2 batches"));  // the native styles print the message too
  CHECK_NOTHROW(rec.raise_pending());
}

#endif  // NANSCOPE_TEST_HAVE_TORCH
