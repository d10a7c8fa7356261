// The ODR test's main: both TUs must give bit-identical results, equal to a hand count.
#include "odr.hpp"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>

namespace {
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same(const nanscope::health_result& a, const nanscope::health_result& b) {
  return a.count == b.count && a.negative == b.negative && a.zero == b.zero && a.positive == b.positive &&
         a.neg_inf == b.neg_inf && a.pos_inf == b.pos_inf && a.nan == b.nan && a.subnormal == b.subnormal &&
         same_bits(a.min, b.min) && same_bits(a.max, b.max) && same_bits(a.abs_max, b.abs_max) &&
         same_bits(a.abs_min, b.abs_min) && same_bits(a.abs_min_nonzero, b.abs_min_nonzero) &&
         same_bits(a.mean, b.mean) && same_bits(a.std, b.std) && a.first_nonfinite == b.first_nonfinite;
}
}  // namespace

int main() {
  // Large enough for several segments (so the thread pool runs), with a NaN, an inf and a -inf.
  std::vector<float> v(300000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * 0.25f - 100.0f;
  v[7] = std::numeric_limits<float>::quiet_NaN();
  v[150000] = std::numeric_limits<float>::infinity();
  v[299999] = -std::numeric_limits<float>::infinity();

  int failures = 0;
  for (unsigned threads : {1u, 4u}) {
    const nanscope::health_result a = odr::check_o0(v, threads);
    const nanscope::health_result b = odr::check_o2(v, threads);
    if (!same(a, b)) {
      std::printf("FAIL: threads=%u: -O0 and -O2 translation units disagree\n  O0: %s\n  O2: %s\n", threads,
                  odr::summary_o0(a).c_str(), odr::summary_o2(b).c_str());
      ++failures;
    }
    if (a.nan != 1 || a.pos_inf != 1 || a.neg_inf != 1 || a.count != v.size() || a.first_nonfinite != 7) {
      std::printf("FAIL: threads=%u: wrong counts: %s\n", threads, odr::summary_o0(a).c_str());
      ++failures;
    }
    if (odr::summary_o0(a) != odr::summary_o2(b)) {
      std::printf("FAIL: threads=%u: summaries differ\n", threads);
      ++failures;
    }
  }
  std::printf("%s\n", odr::summary_o2(odr::check_o2(v, 1)).c_str());
  return failures == 0 ? 0 : 1;
}
