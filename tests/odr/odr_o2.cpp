// Built with -O2; includes the umbrella header.
#include "odr.hpp"

#include <nanscope/nanscope.hpp>

namespace odr {
nanscope::health_result check_o2(const std::vector<float>& v, unsigned threads) {
  return nanscope::check(v, nanscope::check_options{}.with_threads(threads).with_parallel_threshold(1));
}
std::string summary_o2(const nanscope::health_result& r) { return nanscope::summary(r) + fmt::format(" {:v}", r); }
}  // namespace odr
