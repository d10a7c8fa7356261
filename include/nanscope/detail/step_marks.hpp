// nanscope — detail/step_marks.hpp: what a recorder has said already in the current step (the detection it
// reported, the sites it warned about, the trace banner it printed), so that each is said once per step.
#ifndef NANSCOPE_DETAIL_STEP_MARKS_HPP
#define NANSCOPE_DETAIL_STEP_MARKS_HPP

#include "../config.hpp"

#include <cstdint>
#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// Not thread-safe: the recorder uses it under its lock.
class step_marks {
 public:
  static constexpr std::uint64_t none = ~std::uint64_t{0};
  /// A new step starts: nothing has been said in it. Allocates nothing.
  void begin_step() noexcept {
    reported_step_ = none;
    banner_step_ = none;
    warned_sites_.clear();
  }
  /// Whether a detection was reported in step `s`.
  bool reported(std::uint64_t s) const noexcept { return reported_step_ == s; }
  void mark_reported(std::uint64_t s) noexcept { reported_step_ = s; }
  /// True the first time it is asked for step `s` (a trace prints its banner once per step).
  bool first_banner(std::uint64_t s) noexcept {
    const bool first = banner_step_ != s;
    banner_step_ = s;
    return first;
  }
  /// True the first time `site` is warned about in this step (may throw std::bad_alloc).
  bool first_warning(std::string site) {
    for (const auto& w : warned_sites_)
      if (w == site) return false;
    warned_sites_.push_back(std::move(site));
    return true;
  }

 private:
  std::uint64_t reported_step_ = none;
  std::uint64_t banner_step_ = none;
  std::vector<std::string> warned_sites_;
};

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_STEP_MARKS_HPP
