// nanscope — format_api.hpp: a check's one-line summary as text and on any output stream (`std::cout << check(y)`),
// declared without fmt (format.hpp defines them; in the separate-implementation mode only the file that defines
// NANSCOPE_IMPLEMENTATION compiles that).
#ifndef NANSCOPE_FORMAT_API_HPP
#define NANSCOPE_FORMAT_API_HPP

#include "config.hpp"
#include "health.hpp"

#include <string>
#include <type_traits>
#include <utility>

NANSCOPE_NAMESPACE_BEGIN

/// The one-line summary as a string ("shape=[2, 3] f32 n=6 ... all finite", format.hpp).
NANSCOPE_IMPL_ENTRY std::string summary(const health_result& r);

/// Writes the one-line summary to an output stream (std::ostream, or anything that takes a std::string).
template <class Stream, class = decltype(std::declval<Stream&>() << std::declval<const std::string&>())>
Stream& operator<<(Stream& os, const health_result& r) {
  os << summary(r);
  return os;
}

NANSCOPE_NAMESPACE_END

// The definition: here in the header-only mode (it needs fmt).
#if !NANSCOPE_IMPL_SEPARATE
#include "format.hpp"
#endif

#endif  // NANSCOPE_FORMAT_API_HPP
