// Built with -O0; includes the headers one by one.
#include "odr.hpp"

#include <nanscope/check.hpp>
#include <nanscope/format.hpp>

namespace odr {
nanscope::health_result check_o0(const std::vector<float>& v, unsigned threads) {
  return nanscope::check(v, nanscope::check_options{}.with_threads(threads).with_parallel_threshold(1));
}
std::string summary_o0(const nanscope::health_result& r) { return nanscope::summary(r) + fmt::format(" {:v}", r); }
}  // namespace odr
