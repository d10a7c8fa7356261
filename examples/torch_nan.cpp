// nanscope example: a small LibTorch model that develops a NaN, found by the recorder with no hand-typed module
// name anywhere.
//
// The model is fc1 -> GELU -> fc2 -> log_scale -> head. log_scale takes the log of its input to compress the
// range of fc2's features — fine while they are positive, but fc2 has a bias and some features go negative, and
// log(negative) is NaN. nanscope::torch::attach() reads every module's path and class from the model itself
// (named_modules(), name()); each call site in TinyNet::forward is one NANSCOPE_TORCH_CALL, and one
// nanscope::torch::run() on the root opens the model's own scope. The recorder checks every parameter, input
// and output, and when log_scale's output holds NaN while its inputs were finite it prints the report that names
// log_scale as the producer.
//
// Exit status: 0 when the NaN was detected in log_scale as its producer (the CTest entry example_torch_nan
// relies on it), 1 otherwise.
#include <nanscope/adapters/torch_attach.hpp>
#include <nanscope/check.hpp>
#include <nanscope/format.hpp>
#include <nanscope/recorder.hpp>
#include <nanscope/report.hpp>  // the report formats (HuggingFace's, nanscope's extended one)

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <cstdio>
#include <string>

namespace {

/// log(x): compresses the range of positive features; NaN for negative ones.
struct LogScaleImpl : torch::nn::Module {
  at::Tensor forward(const at::Tensor& x) { return at::log(x); }
};
TORCH_MODULE(LogScale);

/// The model: the NANSCOPE_TORCH_CALL call sites are its only nanscope lines.
struct TinyNetImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
  torch::nn::GELU act;
  LogScale log_scale;

  TinyNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 32));
    act = register_module("act", torch::nn::GELU());
    fc2 = register_module("fc2", torch::nn::Linear(32, 8));
    log_scale = register_module("log_scale", LogScale());
    head = register_module("head", torch::nn::Linear(8, 4));
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = NANSCOPE_TORCH_CALL(fc1, x);
    h = NANSCOPE_TORCH_CALL(act, h);
    h = NANSCOPE_TORCH_CALL(fc2, h);
    h = NANSCOPE_TORCH_CALL(log_scale, h);
    return NANSCOPE_TORCH_CALL(head, h);
  }
};
TORCH_MODULE(TinyNet);

}  // namespace

int main() {
  at::manual_seed(7);
  TinyNet model;
  const at::Tensor batch = at::randn({4, 16});

  nanscope::recorder_options opts;
  opts.style = nanscope::report_style::extended;  // marks the frame that produced the NaN
  opts.policy = nanscope::on_detect::throw_exception;
  nanscope::recorder rec(opts);
  nanscope::torch::attach(model, rec);  // paths "", "fc1", ..., "head"; classes "TinyNet", "Linear", ...

  try {
    const at::Tensor out = nanscope::torch::run(model, batch);  // the root's scope; the call sites nest in it
    std::printf("no NaN/Inf: output %s\n", nanscope::summary(nanscope::check(out)).c_str());
  } catch (const nanscope::detection_error& e) {
    // The report (frames of fc1, act, fc2 and log_scale) was printed to stderr when the NaN appeared.
    const nanscope::detection& d = e.info();
    std::printf("\nnanscope: %s in %s (%s) %s, step %llu: %llu NaN of %llu values; %s\n",
                d.health.has_nan() ? "NaN" : "Inf", d.module_path.c_str(), d.class_name.c_str(), d.context.c_str(),
                static_cast<unsigned long long>(d.step), static_cast<unsigned long long>(d.health.nan),
                static_cast<unsigned long long>(d.health.count),
                d.produced_here ? "its inputs were finite: this module produced it" : "it arrived from upstream");
    const bool expected = d.module_path == "log_scale" && d.class_name == "LogScale" && d.context == "output" &&
                          d.produced_here;
    return expected ? 0 : 1;
  }
  std::printf("expected a NaN in log_scale, none was detected\n");
  return 1;
}
