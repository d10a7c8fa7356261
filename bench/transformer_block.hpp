// A pre-norm transformer encoder block in Eigen (f32; d_model 512, 8 heads, d_ff 2048, sequence 128), used
// by the forward_* benchmark rows. Each including translation unit defines BLOCK_SCOPE / BLOCK_OUTPUT first:
// to nothing (forward_plain), to the nanscope macros (forward_checked), or to the nanscope macros with
// NANSCOPE_CONFIG_LEVEL 0 (forward_disabled). Everything here has internal linkage, so the three variants
// never collide (no ODR issue even though their macro expansions differ).
#ifndef NANSCOPE_BENCH_TRANSFORMER_BLOCK_HPP
#define NANSCOPE_BENCH_TRANSFORMER_BLOCK_HPP

#include <Eigen/Core>

#include <cmath>
#include <cstdint>

#if !defined(BLOCK_SCOPE) || !defined(BLOCK_OUTPUT)
#error "define BLOCK_SCOPE(name, cls) and BLOCK_OUTPUT(x) before including transformer_block.hpp"
#endif

namespace {
namespace block {
using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
constexpr int seq = 128, d_model = 512, heads = 8, d_head = 64, d_ff = 2048;

struct weights {
  Mat wq, wk, wv, wo, w1, w2;
  Eigen::RowVectorXf ln1_g, ln2_g;
};

inline Mat random_matrix(int r, int c, float scale, std::uint32_t seed) {
  Mat m(r, c);
  std::uint32_t s = seed;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    s = s * 1664525u + 1013904223u;
    m.data()[i] = scale * (static_cast<float>(s >> 8) / 16777216.0f - 0.5f);
  }
  return m;
}

inline weights make_weights() {
  weights w;
  const float s = 1.0f / std::sqrt(static_cast<float>(d_model));
  w.wq = random_matrix(d_model, d_model, 2 * s, 1);
  w.wk = random_matrix(d_model, d_model, 2 * s, 2);
  w.wv = random_matrix(d_model, d_model, 2 * s, 3);
  w.wo = random_matrix(d_model, d_model, 2 * s, 4);
  w.w1 = random_matrix(d_model, d_ff, 2 * s, 5);
  w.w2 = random_matrix(d_ff, d_model, 2.0f / std::sqrt(static_cast<float>(d_ff)), 6);
  w.ln1_g = Eigen::RowVectorXf::Ones(d_model);
  w.ln2_g = Eigen::RowVectorXf::Ones(d_model);
  return w;
}

inline Mat layer_norm(const Mat& x, const Eigen::RowVectorXf& g) {
  Mat y(x.rows(), x.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const float mean = x.row(r).mean();
    const float var = (x.row(r).array() - mean).square().mean();
    y.row(r) = ((x.row(r).array() - mean) / std::sqrt(var + 1e-5f)).matrix().cwiseProduct(g);
  }
  return y;
}

inline Mat forward(const Mat& x, const weights& w) {
  BLOCK_SCOPE("", "EncoderBlock");
  Mat h1;
  {
    BLOCK_SCOPE("ln1", "LayerNorm");
    h1 = layer_norm(x, w.ln1_g);
    BLOCK_OUTPUT(h1);
  }
  Mat q, k, v;
  {
    BLOCK_SCOPE("attn.q", "Linear");
    q = h1 * w.wq;
    BLOCK_OUTPUT(q);
  }
  {
    BLOCK_SCOPE("attn.k", "Linear");
    k = h1 * w.wk;
    BLOCK_OUTPUT(k);
  }
  {
    BLOCK_SCOPE("attn.v", "Linear");
    v = h1 * w.wv;
    BLOCK_OUTPUT(v);
  }
  Mat ctx(seq, d_model);
  {
    BLOCK_SCOPE("attn.core", "ScaledDotProductAttention");
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_head));
    for (int hd = 0; hd < heads; ++hd) {
      Mat scores = (q.middleCols(hd * d_head, d_head) * k.middleCols(hd * d_head, d_head).transpose()) * scale;
      for (Eigen::Index r = 0; r < scores.rows(); ++r) {
        const float m = scores.row(r).maxCoeff();
        scores.row(r) = (scores.row(r).array() - m).exp().matrix();
        scores.row(r) /= scores.row(r).sum();
      }
      ctx.middleCols(hd * d_head, d_head) = scores * v.middleCols(hd * d_head, d_head);
    }
    BLOCK_OUTPUT(ctx);
  }
  Mat x1;
  {
    BLOCK_SCOPE("attn.o", "Linear");
    x1 = ctx * w.wo;
    BLOCK_OUTPUT(x1);
  }
  x1 += x;
  Mat h2;
  {
    BLOCK_SCOPE("ln2", "LayerNorm");
    h2 = layer_norm(x1, w.ln2_g);
    BLOCK_OUTPUT(h2);
  }
  Mat f;
  {
    BLOCK_SCOPE("mlp.fc1", "Linear");
    f = h2 * w.w1;
    BLOCK_OUTPUT(f);
  }
  {
    BLOCK_SCOPE("mlp.act", "GELU");
    f = f.unaryExpr([](float t) { return 0.5f * t * (1.0f + std::erf(t * 0.70710678f)); });
    BLOCK_OUTPUT(f);
  }
  Mat out;
  {
    BLOCK_SCOPE("mlp.fc2", "Linear");
    out = f * w.w2;
    BLOCK_OUTPUT(out);
  }
  out += x1;
  BLOCK_OUTPUT(out);
  return out;
}
}  // namespace block
}  // namespace

#endif
