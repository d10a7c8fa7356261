// nanscope demo: plants NaN, Inf and near-overflow values in tensors of several dtypes and prints what one
// nanscope::check() pass says about each, with a line of plain-language explanation.
//
//   cmake -S . -B build && cmake --build build --target nanscope_demo && ./build/examples/nanscope_demo
//   (or: g++ -std=c++17 -O2 -Iinclude -isystem /usr/include/eigen3 examples/demo.cpp -lfmt -pthread)
//
// Every explanation is computed from the result, so the output stays truthful if the data changes.
#include <nanscope/adapters/eigen.hpp>
#include <nanscope/nanscope.hpp>

#include <Eigen/Core>
#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace ns = nanscope;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// A smooth deterministic pattern in [-scale, scale].
double wave(std::int64_t i, double scale) { return scale * std::sin(0.37 * static_cast<double>(i) + 0.5); }

// "1 NaN at [2, 517]" style text for the first non-finite element of a result.
std::string where(const ns::health_result& r) {
  if (r.first_nonfinite < 0) return "";
  // first_nonfinite is a flat row-major index over the view's shape, whatever the storage order.
  std::string pos;
  std::int64_t rest = r.first_nonfinite;
  for (int d = r.rank - 1; d >= 0; --d) {
    pos = fmt::format("{}", rest % r.shape[d]) + (pos.empty() ? "" : ", ") + pos;
    rest /= r.shape[d];
  }
  return fmt::format("first at [{}] (flat index {})", pos, r.first_nonfinite);
}

// One plain-language line about a STATS or FULL_HEALTH result.
std::string explain(const ns::health_result& r) {
  const ns::dtype_info& facts = ns::info(r.type);
  if (r.has_nonfinite()) {
    std::string what;
    if (r.nan != 0) what += fmt::format("{} NaN", r.nan);
    if (r.has_inf()) what += fmt::format("{}{} Inf", what.empty() ? "" : " + ", r.neg_inf + r.pos_inf);
    return fmt::format("BAD: {}, {}", what, where(r));
  }
  std::string text = fmt::format("ok: all {} finite, |x| <= {:g}", r.count, r.abs_max);
  if (facts.bits >= 32) return text;  // f32/f64: overflow is not the usual failure
  const double used = r.abs_max / facts.max_finite;  // share of the dtype's range in use
  if (used >= 0.5)
    return fmt::format("NEAR OVERFLOW: |x| reaches {:g} = {:.0f}% of the {} max {:g}; x{:.2f} more overflows",
                       r.abs_max, 100 * used, facts.name, facts.max_finite, facts.overflow_threshold / r.abs_max);
  return text + fmt::format(", {:.0e}x below the {} max", 1 / used, facts.name);
}

void report(const char* name, const ns::health_result& r, const std::string& note = {}) {
  fmt::print("{:<10} {}\n", name, r);  // "{}" is nanscope::summary(r)
  fmt::print("{:<10}   -> {}{}\n", "", explain(r), note.empty() ? "" : "; " + note);
}

}  // namespace

int main() {
  fmt::print("nanscope {}.{}.{}: host pass on {} (set NANSCOPE_ISA=scalar|avx2|avx512 to compare)\n\n",
             NANSCOPE_VERSION_MAJOR, NANSCOPE_VERSION_MINOR, NANSCOPE_VERSION_PATCH,
             ns::name(ns::resolve_isa(ns::isa::automatic)));

  // 1. Healthy f32 weights in an Eigen matrix (column-major; nanscope sees rows x cols).
  const Eigen::MatrixXf weights =
      Eigen::MatrixXf::NullaryExpr(64, 128, [](Eigen::Index i, Eigen::Index j) { return float(wave(i * 128 + j, 0.05)); });
  report("weights", ns::check(weights));

  // 2. f64 logits with one NaN, as 0/0 in a softmax would leave. Eigen stores it column-major; the index is
  //    still reported row-major, (row, col) -> row * cols + col.
  Eigen::MatrixXd logits =
      Eigen::MatrixXd::NullaryExpr(4, 1000, [](Eigen::Index i, Eigen::Index j) { return wave(i * 1000 + j, 12.0); });
  logits(2, 517) = kNaN;
  const ns::health_result logits_health = ns::check(logits, "logits");
  report("logits", logits_health);

  // 3. f32 attention scores in a std::vector, viewed as [8, 64]: a huge dot product overflowed to +inf and
  //    a mask wrote -inf.
  std::vector<float> scores(8 * 64);
  for (std::size_t i = 0; i < scores.size(); ++i) scores[i] = static_cast<float>(wave(std::int64_t(i), 30.0));
  scores[3 * 64 + 9] = static_cast<float>(kInf);
  scores[5 * 64 + 1] = static_cast<float>(-kInf);
  report("scores", ns::check(ns::view_of(scores.data(), {8, 64})));

  // 4. An fp16 activation at 6.0e4: still finite, but fp16 stops at 65504. HuggingFace's rule of thumb is
  //    to keep fp16 activations well below 1e4.
  std::vector<ns::half> act(16 * 256);
  for (std::size_t i = 0; i < act.size(); ++i) act[i] = ns::half::from_float(wave(std::int64_t(i), 900.0));
  act[7 * 256 + 200] = ns::half::from_float(6.0e4);
  report("act_fp16", ns::check(ns::view_of(act.data(), {16, 256})));

  // 5. bf16 gradients with a 1e5 spike: it would overflow fp16 (>= 65520) but bf16 has f32's exponent range.
  std::vector<ns::bfloat16> grad(4096);
  for (std::size_t i = 0; i < grad.size(); ++i) grad[i] = ns::bfloat16::from_float(wave(std::int64_t(i), 1e-3));
  grad[1000] = ns::bfloat16::from_float(1.0e5);
  const ns::health_result grad_health = ns::check(grad);
  const bool fp16_would_overflow = grad_health.abs_max >= ns::info(ns::dtype::f16).overflow_threshold;
  report("grad_bf16", grad_health, fp16_would_overflow ? "in fp16 it would be inf" : "");

  // 6. An fp8 e4m3fn KV-cache block: e4m3fn has no infinity, so casting 500 (> 464) gives NaN, not inf.
  std::vector<ns::float8_e4m3fn> kv(1024);
  for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = ns::float8_e4m3fn::from_float(wave(std::int64_t(i), 100.0));
  kv[321] = ns::float8_e4m3fn::from_float(500.0);
  report("kv_fp8", ns::check(kv), "e4m3fn has no inf: 500 cast to NaN");

  // 7. A strided view, no copy: column 3 of a row-major [1000, 64] f32 buffer is shape {1000}, stride {64}.
  std::vector<float> table(1000 * 64, 1.0f);
  table[640 * 64 + 3] = static_cast<float>(kNaN);  // row 640, column 3
  table[10 * 64 + 4] = static_cast<float>(kNaN);   // column 4: outside the view, not seen
  ns::tensor_view col3;
  col3.data = table.data() + 3;
  col3.type = ns::dtype::f32;
  col3.rank = 1;
  col3.shape[0] = 1000;
  col3.strides[0] = 64;  // in elements, not bytes
  fmt::print("\nstrided view: column 3 of a row-major [1000, 64] buffer, shape {{1000}}, strides {{64}}\n");
  report("table[:,3]", ns::check(col3), "the NaN in column 4 is outside the view");

  // 8. Cheaper modes, and the TensorFlow DebugNumericSummaryV2 FULL_HEALTH vector of the logits.
  const auto curt = ns::check(logits, ns::check_options{}.with_mode(ns::check_mode::curt_health));
  const auto full = ns::check(logits, ns::check_options{}.with_mode(ns::check_mode::full_health));
  fmt::print("\nmodes:  {:<15} {}   (stops at the first NaN/Inf)\n", ns::name(curt.mode), curt);
  fmt::print("        {:<15} {}   (counts and |x| max, no mean/std)\n", ns::name(full.mode), full);
  const std::array<double, 11> tf = ns::to_tf_full_health(logits_health, /*tensor_id=*/2);
  fmt::print("TF FULL_HEALTH [id, device, dtype, rank, numel, -inf, +inf, nan, neg, zero, pos]:\n  [{}]\n",
             fmt::join(tf, ", "));
  return 0;
}
