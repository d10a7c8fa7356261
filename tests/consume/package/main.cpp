// A program built against the packaged headers: the core check on a vector with one NaN.
#include <nanscope/check.hpp>

#include <cstdio>
#include <limits>
#include <vector>

int main() {
  std::vector<float> v(256, 1.0f);
  v[100] = std::numeric_limits<float>::quiet_NaN();
  const nanscope::health_result r = nanscope::check(v);
  const bool ok = r.count == 256 && r.nan == 1 && r.first_nonfinite == 100;
  std::printf("count=%llu nan=%llu first=%lld: %s\n", static_cast<unsigned long long>(r.count),
              static_cast<unsigned long long>(r.nan), static_cast<long long>(r.first_nonfinite), ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
