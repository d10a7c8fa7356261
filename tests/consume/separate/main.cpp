// The separate-implementation mode from a user's project: two files include <nanscope/instrument.hpp>; the
// definitions come from the nanscope::compiled target, or (SEPARATE_OWN_IMPL) from impl.cpp, which defines
// NANSCOPE_IMPLEMENTATION. A clean pass, then a pass whose block 1 makes an Inf: the detection is raised with
// the producer named, and `std::cout << check(x)` prints the summary line.
#include <nanscope/instrument.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

std::vector<float> model(const std::vector<float>& x, bool blow_up);

int main() {
  std::string sink;
  nanscope::recorder_options o;
  o.sink = [&](std::string_view t) { sink.append(t); };
  nanscope::default_recorder().set_options(o);
  const std::vector<float> x{0.5f, -1.0f, 2.0f, 0.0f};
  bool ok = model(x, false).size() == 4;
  bool raised = false;
  try {
    model(x, true);
  } catch (const nanscope::detection_error& e) {
    raised = true;
    ok = ok && e.info().module_path == "blocks.1" && e.info().produced_here && e.info().health.pos_inf == 1;
  }
  // the report printers live in the implementation file: the report must be the full one, not the fallback
  ok = ok && raised && sink.find("blocks.1") != std::string::npos && sink.find("PRODUCED") != std::string::npos;
  std::ostringstream line;
  line << nanscope::check(x);
  ok = ok && line.str() == "f32[4] n=4 x\u2208[-1, 2] \u03bc=0.375 \u03c3=1.25";
  std::cout << line.str() << "\n" << (ok ? "ok" : "FAILED") << "\n";
  if (!ok) std::fputs(sink.c_str(), stderr);
  return ok ? 0 : 1;
}
