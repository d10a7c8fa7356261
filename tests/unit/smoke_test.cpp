// nanscope tests — smoke: the build works end to end (a check of a std::vector against a hand loop).
#include <nanscope/nanscope.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

TEST_CASE("smoke: one NaN in a std::vector<float> is counted once, as a hand loop counts it") {
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 100.0f;
  v[123] = std::numeric_limits<float>::quiet_NaN();

  std::uint64_t hand_nan = 0;
  for (float x : v) {
    std::uint32_t b;
    std::memcpy(&b, &x, sizeof b);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) ++hand_nan;  // bit test: valid under -ffast-math too
  }

  const nanscope::health_result r = nanscope::check(v);
  CHECK(hand_nan == 1);
  CHECK(r.nan == 1);
  CHECK(r.nan == hand_nan);
  CHECK(r.count == v.size());
  CHECK(r.first_nonfinite == 123);
  CHECK(r.has_nonfinite());
}
