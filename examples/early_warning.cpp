// nanscope example — early_warning.cpp: nanscope::history warns that one layer's activations will overflow fp16
// well before they do.
//
// A small Eigen student network is trained, layer by layer, to match a teacher (each layer a linear map of its
// RMS-normalised input, trained with SGD on its own squared error). In "fault" mode one layer's learning rate is
// too high for its weight: the weight's error is multiplied by |1 - 2*lr*lambda| > 1 every step, so that
// layer's activations grow geometrically while every other layer stays put. The activations are float32; the
// target format is fp16 (what an fp16 deployment would cast them to). The program checks every layer output
// through a recorder with a history attached, and independently casts each activation to fp16
// (Eigen::half) to find the first step an fp16 cast would produce an Inf.
//
//   nanscope_early_warning fault [seed]       exit 0 when the first warning names the faulty layer and comes at
//                                             least 10 steps before the first fp16 Inf
//   nanscope_early_warning clean [seeds]      exit 0 when none of `seeds` clean runs (default 20) raises a
//                                             warning
// Exit 1 otherwise, 2 on bad arguments.
#include <nanscope/adapters/eigen.hpp>
#include <nanscope/history.hpp>
#include <nanscope/nanscope.hpp>

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

using Mat = Eigen::MatrixXf;

constexpr int layers = 4;
constexpr int width = 32;
constexpr int batch = 128;
constexpr int faulty_layer = 2;
constexpr int max_steps = 400;

Mat random_matrix(std::mt19937& gen, int rows, int cols, float scale) {
  std::normal_distribution<float> z(0.0f, scale);
  Mat m(rows, cols);
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) m(i, j) = z(gen);
  return m;
}

// Each column scaled to unit RMS (what a pre-norm layer sees).
Mat rms_norm(const Mat& x) {
  Mat y = x;
  for (int j = 0; j < y.cols(); ++j) {
    const float r = std::sqrt(y.col(j).squaredNorm() / static_cast<float>(y.rows()) + 1e-6f);
    y.col(j) /= r;
  }
  return y;
}

bool fp16_cast_has_inf(const Mat& a) {
  for (Eigen::Index i = 0; i < a.size(); ++i)
    if (std::isinf(static_cast<float>(static_cast<Eigen::half>(a.data()[i])))) return true;
  return false;
}

std::string layer_path(int l) { return "student.layers." + std::to_string(l) + ".fc"; }

struct outcome {
  std::vector<nanscope::early_warning> warnings;
  int first_inf_step = -1;
  int first_inf_layer = -1;
};

outcome run(unsigned seed, bool fault, bool verbose) {
  std::mt19937 gen(seed);
  const float init = 1.0f / std::sqrt(static_cast<float>(width));
  std::vector<Mat> teacher, student;
  for (int l = 0; l < layers; ++l) {
    teacher.push_back(random_matrix(gen, width, width, init));
    student.push_back(teacher.back() + random_matrix(gen, width, width, 0.01f * init));
  }
  std::vector<float> lr(layers, 0.01f);
  if (fault) lr[faulty_layer] = 0.24f;  // 2*lr*lambda > 2 for the largest eigenvalues of its input covariance

  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.warn_abs_max[0] = 0.0;  // the fixed 1e4 threshold is not what this example shows
  o.sink = [&](std::string_view t) {
    if (verbose) std::fwrite(t.data(), 1, t.size(), stdout);
  };
  nanscope::recorder rec(o);
  nanscope::history hist;  // default rules: fp16 target, warn when fewer than 100 steps are left
  hist.attach(rec);

  outcome out;
  std::normal_distribution<float> noise(0.0f, 0.01f);
  for (int step = 0; step < max_steps && out.first_inf_step < 0; ++step) {
    const Mat x = random_matrix(gen, width, batch, 1.0f);
    Mat h = x;
    NANSCOPE_SCOPE_TO(rec, "student", "Student");
    for (int l = 0; l < layers; ++l) {
      NANSCOPE_SCOPE_TO(rec, "layers." + std::to_string(l) + ".fc", "Linear");
      const Mat u = rms_norm(h);
      Mat a = student[l] * u;
      NANSCOPE_OUTPUT_TO(rec, a);
      if (out.first_inf_step < 0 && fp16_cast_has_inf(a)) {
        out.first_inf_step = step;
        out.first_inf_layer = l;
      }
      // SGD on this layer's squared error against the teacher (plus a little label noise)
      Mat target = teacher[l] * u;
      for (Eigen::Index i = 0; i < target.size(); ++i) target.data()[i] += noise(gen);
      const Mat grad = (2.0f / static_cast<float>(batch)) * (a - target) * u.transpose();
      student[l] -= lr[l] * grad;
      h = a;
    }
  }
  out.warnings = hist.warnings();
  return out;
}

int site_layer(const std::string& site) {
  for (int l = 0; l < layers; ++l)
    if (site == layer_path(l) + ":output") return l;
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "fault";
  if (mode == "fault") {
    const unsigned seed = argc > 2 ? static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)) : 1u;
    const outcome o = run(seed, true, true);
    if (o.warnings.empty()) {
      std::printf("FAIL: no early warning (first fp16 inf at step %d)\n", o.first_inf_step);
      return 1;
    }
    const auto& w = o.warnings.front();
    std::printf("first warning: step %llu, %s (%s); first fp16 inf: step %d in %s\n",
                static_cast<unsigned long long>(w.step), w.site.c_str(), nanscope::name(w.rule), o.first_inf_step,
                o.first_inf_layer >= 0 ? layer_path(o.first_inf_layer).c_str() : "(none)");
    if (o.first_inf_step < 0) {
      std::printf("FAIL: the faulty layer never overflowed fp16 within %d steps\n", max_steps);
      return 1;
    }
    if (site_layer(w.site) != faulty_layer || o.first_inf_layer != faulty_layer) {
      std::printf("FAIL: expected %s\n", layer_path(faulty_layer).c_str());
      return 1;
    }
    const long long lead = static_cast<long long>(o.first_inf_step) - static_cast<long long>(w.step);
    if (lead < 10) {
      std::printf("FAIL: the warning came only %lld steps before the first fp16 inf\n", lead);
      return 1;
    }
    std::printf("OK: warned %lld steps ahead\n", lead);
    return 0;
  }
  if (mode == "clean") {
    const unsigned seeds = argc > 2 ? static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)) : 20u;
    if (seeds == 0) {
      std::fprintf(stderr, "nanscope_early_warning: clean needs at least one seed\n");
      return 2;
    }
    int bad = 0;
    for (unsigned s = 0; s < seeds; ++s) {
      const outcome o = run(1000 + s, false, false);
      if (!o.warnings.empty() || o.first_inf_step >= 0) {
        ++bad;
        std::printf("FAIL: clean run seed %u: %zu warning(s)%s\n", 1000 + s, o.warnings.size(),
                    o.first_inf_step >= 0 ? ", and an fp16 inf" : "");
        for (const auto& w : o.warnings) std::fputs(w.text().c_str(), stdout);
      }
    }
    if (bad != 0) return 1;
    std::printf("OK: %u clean runs of %d steps, no warning\n", seeds, max_steps);
    return 0;
  }
  std::fprintf(stderr, "usage: nanscope_early_warning fault [seed] | clean [seeds]\n");
  return 2;
}
