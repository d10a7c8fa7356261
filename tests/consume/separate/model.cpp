// A user's model file in the separate-implementation mode: only the light header (docs/getting-started.md,
// "Compile time"). Two blocks; the second one's own code overflows fp16's range when asked to.
#include <nanscope/instrument.hpp>

#include <vector>

std::vector<float> block(const std::vector<float>& x, int i, bool blow_up) {
  NANSCOPE_SCOPE("blocks." + std::to_string(i), "Block");
  NANSCOPE_INPUT(x);
  std::vector<float> y(x);
  for (float& v : y) v = v * 2.0f + 1.0f;
  if (blow_up) y[1] = (y[1] * y[1] + 1.0f) * 1e30f * 1e30f;  // +inf, made here
  DETECT_OVERFLOW(y, "after the residual add");
  NANSCOPE_OUTPUT(y);
  return y;
}

std::vector<float> model(const std::vector<float>& x, bool blow_up) {
  NANSCOPE_SCOPE("", "TinyNet");
  NANSCOPE_INPUT(x);
  std::vector<float> h = block(x, 0, false);
  h = block(h, 1, blow_up);
  NANSCOPE_OUTPUT(h);
  return h;
}
