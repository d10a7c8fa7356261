// nanscope example: a T5-style gated-GELU feed-forward stack in Eigen, run with fp16 activations, whose
// `wo` output overflows in the third block — the scenario of HuggingFace's "Activations Overflow" guide.
//
// Every module is a NANSCOPE_SCOPE; inputs and outputs are recorded. The pass runs twice: in the hf style, which
// prints what HuggingFace's DebugUnderflowOverflow prints when wo's call completes (and raises its exception),
// and in the extended style, which marks the frame that PRODUCED the inf (its inputs were finite) and shows how
// the fp16 headroom shrank block after block.
#include <nanscope/adapters/eigen.hpp>
#include <nanscope/macros.hpp>
#include <nanscope/nanscope.hpp>

#include <Eigen/Core>

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>

namespace {
using MatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatH = Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// fp16 "mixed precision": weights and activations stored in fp16, matmuls accumulated in f32, outputs
// rounded back to fp16 — where anything above 65504 becomes inf.
MatH to_half(const MatF& m) { return m.cast<Eigen::half>(); }
MatF to_float(const MatH& m) { return m.cast<float>(); }

MatH linear(const MatH& x, const MatH& w, const char* name) {
  NANSCOPE_SCOPE(name, "Linear");
  NANSCOPE_PARAM(w, "weight");
  NANSCOPE_INPUT(x);
  MatH y = to_half(to_float(x) * to_float(w));
  NANSCOPE_OUTPUT(y);
  return y;
}

MatH gelu(const MatH& x) {
  MatF f = to_float(x);
  f = f.unaryExpr([](float v) { return 0.5f * v * (1.0f + std::tanh(0.7978845608f * (v + 0.044715f * v * v * v))); });
  return to_half(f);
}

MatH layer_norm(const MatH& x) {  // T5LayerNorm: RMS normalisation, no mean subtraction
  NANSCOPE_SCOPE("layer_norm", "T5LayerNorm");
  NANSCOPE_INPUT(x);
  MatF f = to_float(x);
  for (Eigen::Index r = 0; r < f.rows(); ++r) {
    const float rms = std::sqrt(f.row(r).squaredNorm() / static_cast<float>(f.cols()) + 1e-6f);
    f.row(r) /= rms;
  }
  MatH y = to_half(f);
  NANSCOPE_OUTPUT(y);
  return y;
}

struct ffn_weights {
  MatH wi_0, wi_1, wo;
};

MatH dense_relu_dense(const MatH& x, const ffn_weights& w) {
  NANSCOPE_SCOPE("DenseReluDense", "T5DenseGatedGeluDense");
  NANSCOPE_INPUT(x);
  const MatH gate = gelu(linear(x, w.wi_0, "wi_0"));
  const MatH lin = linear(x, w.wi_1, "wi_1");
  MatH h = to_half(to_float(gate).cwiseProduct(to_float(lin)));
  {
    NANSCOPE_SCOPE("dropout", "Dropout");  // identity at inference
    NANSCOPE_INPUT(h);
    NANSCOPE_OUTPUT(h);
  }
  MatH y = linear(h, w.wo, "wo");
  NANSCOPE_OUTPUT(y);
  return y;
}

MatH t5_layer_ff(const MatH& x, const ffn_weights& w) {
  NANSCOPE_SCOPE("layer.1", "T5LayerFF");
  NANSCOPE_INPUT(x);
  const MatH normed = layer_norm(x);
  DETECT_OVERFLOW(normed, "after layer_norm");
  const MatH ff = dense_relu_dense(normed, w);
  DETECT_OVERFLOW(ff, "after DenseReluDense");
  MatH y = to_half(to_float(x) + to_float(ff));
  NANSCOPE_OUTPUT(y);
  return y;
}

// Deterministic pseudo-random weights (no <random> distribution differences between platforms).
MatH weights(Eigen::Index rows, Eigen::Index cols, float scale, unsigned seed) {
  MatF m(rows, cols);
  unsigned s = seed;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    m.data()[i] = scale * (static_cast<float>(s >> 8) / 16777216.0f - 0.5f);
  }
  return to_half(m);
}
}  // namespace

MatH t5_stack(const ffn_weights (&blocks)[3], MatH hidden) {
  NANSCOPE_SCOPE("", "T5Stack");  // the root module (HF's model)
  NANSCOPE_INPUT(hidden);
  for (unsigned b = 0; b < 3; ++b) {
    NANSCOPE_SCOPE("block." + std::to_string(b), "T5Block");
    NANSCOPE_INPUT(hidden);
    hidden = t5_layer_ff(hidden, blocks[b]);
    NANSCOPE_OUTPUT(hidden);
  }
  NANSCOPE_OUTPUT(hidden);
  return hidden;
}

int main() {
  constexpr Eigen::Index seq = 8, d_model = 64, d_ff = 256;
  // The wo weights grow block after block (a model trained in bf16 whose activations fp16 cannot hold).
  ffn_weights blocks[3];
  for (unsigned b = 0; b < 3; ++b) {
    const float growth = std::pow(12.0f, static_cast<float>(b));
    blocks[b].wi_0 = weights(d_model, d_ff, 1.0f, 11 + b);
    blocks[b].wi_1 = weights(d_model, d_ff, 2.0f * growth, 23 + b);
    blocks[b].wo = weights(d_ff, d_model, 4.0f * growth, 37 + b);
  }
  const MatH input = weights(seq, d_model, 4.0f, 5);
  nanscope::recorder& rec = nanscope::default_recorder();

  // 1. What HuggingFace's DebugUnderflowOverflow(model, max_frames_to_save=12) prints for the same model, byte
  //    for byte: `output has infs` when wo's call completes, the report, then HF's ValueError.
  nanscope::recorder_options hf;
  hf.style = nanscope::report_style::hf;  // stdout, as HF
  hf.max_frames = 12;
  rec.set_options(hf);
  std::puts("----- report_style::hf (HuggingFace DebugUnderflowOverflow) -----");
  try {
    t5_stack(blocks, input);
  } catch (const nanscope::detection_error& e) {
    std::printf("detection_error: %s\n", e.what());
  }

  // 2. nanscope's extended report of the same pass: detection as the tensor is recorded, the frame that
  //    PRODUCED the inf, fp16 headroom per tensor (fp16 tensors: warnings at 1e4), exact margin counts.
  nanscope::recorder_options ext;
  ext.style = nanscope::report_style::extended;
  ext.max_frames = 12;
  ext.count_margins = true;  // also count the values that would overflow / flush if cast to each format
  ext.policy = nanscope::on_detect::print_and_continue;
  ext.sink = [](std::string_view s) { std::fwrite(s.data(), 1, s.size(), stdout); };
  rec.set_options(ext);
  rec.clear();
  rec.set_step(0);
  std::puts("----- report_style::extended (nanscope) -----");
  const MatH out = t5_stack(blocks, input);
  const auto final_health = nanscope::check(out, "hidden");
  std::printf("final hidden state: %s\n", nanscope::summary(final_health).c_str());
  return rec.detections() == 2 ? 0 : 1;
}
