// nanscope tests — support/errors.hpp: the message of the nanscope::error a call throws.
#ifndef NANSCOPE_TESTS_SUPPORT_ERRORS_HPP
#define NANSCOPE_TESTS_SUPPORT_ERRORS_HPP

#include <nanscope/config.hpp>

#include <functional>
#include <string>

namespace nstest {

/// What f throws as nanscope::error, or "(no nanscope::error)" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const nanscope::error& e) {
    return e.what();
  }
  return "(no nanscope::error)";
}

}  // namespace nstest

#endif  // NANSCOPE_TESTS_SUPPORT_ERRORS_HPP
