// A program that uses nanscope the way a user project does: check a vector, print the summary line.
#include <nanscope/nanscope.hpp>

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#if defined(CONSUME_WITH_EIGEN)
#include <nanscope/adapters/eigen.hpp>

#include <Eigen/Core>
#endif

int main() {
  std::vector<float> v(1000, 0.5f);
  v[42] = std::numeric_limits<float>::quiet_NaN();
  v[999] = std::numeric_limits<float>::infinity();
  const nanscope::health_result r = nanscope::check(v, "activations");
  const std::string line = nanscope::summary(r);
  std::printf("%s\n", line.c_str());
  bool ok = r.count == 1000 && r.nan == 1 && r.pos_inf == 1 && r.first_nonfinite == 42 &&
            line == "f32[1000] n=1000 x\u2208[0.5, inf] \u03bc=0.5 \u03c3=0 +inf=1 nan=1";
#if defined(CONSUME_WITH_EIGEN)
  Eigen::MatrixXd m = Eigen::MatrixXd::Zero(3, 4);
  m(2, 1) = -std::numeric_limits<double>::infinity();
  const nanscope::health_result e = nanscope::check(m);
  std::printf("%s\n", nanscope::summary(e).c_str());
  ok = ok && e.count == 12 && e.neg_inf == 1 && e.first_nonfinite == 9;
#endif
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
