// nanscope example: a small LibTorch model that develops a NaN, found by the recorder without touching the
// model's code.
//
// The model is a torch::nn::Sequential: fc1 -> GELU -> fc2 -> log_scale -> head. log_scale takes the log of
// its input to compress the range of fc2's features — fine while they are positive, but fc2 has a bias and
// some features go negative, and log(negative) is NaN. nanscope::torch::forward runs each child of the
// Sequential in its own recorder scope; the recorder checks every parameter, input and output, and when
// log_scale's output holds NaN while its inputs were finite it prints the report that names log_scale as
// the producer.
//
// Exit status: 0 when the NaN was detected in log_scale as its producer (the CTest entry example_torch_nan
// relies on it), 1 otherwise.
#include <nanscope/adapters/torch.hpp>
#include <nanscope/check.hpp>
#include <nanscope/format.hpp>
#include <nanscope/recorder.hpp>
#include <nanscope/report.hpp>  // the report formats (HuggingFace's, nanscope's extended one)

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
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

}  // namespace

int main() {
  at::manual_seed(7);
  torch::nn::Sequential model({
      {"fc1", torch::nn::Linear(16, 32)},
      {"act", torch::nn::GELU()},
      {"fc2", torch::nn::Linear(32, 8)},
      {"log_scale", LogScale()},
      {"head", torch::nn::Linear(8, 4)},
  });
  const at::Tensor batch = at::randn({4, 16});

  nanscope::recorder_options opts;
  opts.style = nanscope::report_style::extended;  // marks the frame that produced the NaN
  opts.policy = nanscope::on_detect::throw_exception;
  nanscope::recorder rec(opts);

  try {
    const at::Tensor out = nanscope::torch::forward(rec, model, batch, "model");
    std::printf("no NaN/Inf: output %s\n", nanscope::summary(nanscope::check(out)).c_str());
  } catch (const nanscope::detection_error& e) {
    // The report (frames of fc1, act, fc2 and log_scale) was printed to stderr when the NaN appeared.
    const nanscope::detection& d = e.info();
    std::printf("\nnanscope: %s in %s (%s) %s, step %llu: %llu NaN of %llu values; %s\n",
                d.health.has_nan() ? "NaN" : "Inf", d.module_path.c_str(), d.class_name.c_str(), d.context.c_str(),
                static_cast<unsigned long long>(d.step), static_cast<unsigned long long>(d.health.nan),
                static_cast<unsigned long long>(d.health.count),
                d.produced_here ? "its inputs were finite: this module produced it" : "it arrived from upstream");
    const bool expected = d.module_path == "model.log_scale" && d.context == "output" && d.produced_here;
    return expected ? 0 : 1;
  }
  std::printf("expected a NaN in model.log_scale, none was detected\n");
  return 1;
}
