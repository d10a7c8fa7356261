// nanscope tests — ODR: the same inline functions and templates, instantiated in two translation units built
// with different optimisation levels (odr_o0.cpp at -O0, odr_o2.cpp at -O2) and different include sets,
// then linked into one program (the idea of fmt's ranges-odr-test). The linker keeps one copy of each
// inline function, so a definition that depended on the TU's settings would show up here as a wrong answer
// or a link error.
#ifndef NANSCOPE_TESTS_ODR_HPP
#define NANSCOPE_TESTS_ODR_HPP

#include <nanscope/health.hpp>

#include <string>
#include <vector>

namespace odr {
nanscope::health_result check_o0(const std::vector<float>& v, unsigned threads);
nanscope::health_result check_o2(const std::vector<float>& v, unsigned threads);
std::string summary_o0(const nanscope::health_result& r);
std::string summary_o2(const nanscope::health_result& r);
}  // namespace odr

#endif
