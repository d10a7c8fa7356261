// nanscope tests — hostile macros: nanscope's headers must compile after macros that real system and
// third-party headers are known to define (CCCL's header tests do the same with I, small and B0).
//
// Each macro is #undef'd first (some, like BIG_ENDIAN, come with glibc already) and then expands to a stray
// '@', a compile error wherever it is expanded: any use of one of these names inside nanscope fails loudly
// and points at the line.
//
// The standard-library and third-party headers that nanscope itself includes are included first (the
// generated hostile_prelude.hpp lists them): the test is about nanscope's code, not about whether
// libstdc++ or fmt survive <windows.h>.
//
// NANSCOPE_HOSTILE_APPLE_CHECK adds Apple's AssertMacros.h `check(assertion)`; it is a separate CTest entry
// (hostile_macros_apple_check), see tests/CMakeLists.txt.
// Not tested on purpose: single-letter template-parameter names such as T, N, E or U. No system header
// defines them, and no template library (the standard library and fmt included) survives them.
#include "hostile_prelude.hpp"

// <complex.h>
#undef I
#define I @hostile_I_from_complex_h@
// <windows.h> (rpcndr.h, minwindef.h, objbase.h)
#undef small
#define small @hostile_small_from_rpcndr_h@
#undef hyper
#define hyper @hostile_hyper_from_rpcndr_h@
#undef min
#define min(a, b) @hostile_min_from_windows_h@
#undef max
#define max(a, b) @hostile_max_from_windows_h@
#undef near
#define near @hostile_near_from_windows_h@
#undef far
#define far @hostile_far_from_windows_h@
#undef interface
#define interface @hostile_interface_from_objbase_h@
#undef IN
#define IN @hostile_IN_from_windows_h@
#undef OUT
#define OUT @hostile_OUT_from_windows_h@
#undef OPTIONAL
#define OPTIONAL @hostile_OPTIONAL_from_windows_h@
#undef ERROR
#define ERROR @hostile_ERROR_from_wingdi_h@
#undef DELETE
#define DELETE @hostile_DELETE_from_winnt_h@
#undef TRUE
#define TRUE @hostile_TRUE_from_windows_h@
#undef FALSE
#define FALSE @hostile_FALSE_from_windows_h@
#undef CALLBACK
#define CALLBACK @hostile_CALLBACK_from_windows_h@
#undef VOID
#define VOID @hostile_VOID_from_windows_h@
// <termios.h>
#undef B0
#define B0 @hostile_B0_from_termios_h@
#undef B50
#define B50 @hostile_B50_from_termios_h@
#undef B9600
#define B9600 @hostile_B9600_from_termios_h@
#undef CS8
#define CS8 @hostile_CS8_from_termios_h@
// <sys/sysmacros.h>
#undef major
#define major(dev) @hostile_major_from_sysmacros_h@
#undef minor
#define minor(dev) @hostile_minor_from_sysmacros_h@
#undef makedev
#define makedev(a, b) @hostile_makedev_from_sysmacros_h@
// Apple AssertMacros.h (the ones that do not collide with nanscope's API)
#undef verify
#define verify(assertion) @hostile_verify_from_AssertMacros_h@
#undef require
#define require(assertion, label) @hostile_require_from_AssertMacros_h@
#undef debug_string
#define debug_string(message) @hostile_debug_string_from_AssertMacros_h@
#if defined(NANSCOPE_HOSTILE_APPLE_CHECK)
#undef check
#define check(assertion) @hostile_check_from_AssertMacros_h@
#endif
// GCC's GNU-mode predefined macros, build-system favourites, test frameworks (glog, Catch, doctest)
#ifndef unix
#define unix 1
#endif
#ifndef linux
#define linux 1
#endif
#undef DEBUG
#define DEBUG @hostile_DEBUG@
#undef CHECK
#define CHECK(x) @hostile_CHECK_from_glog@
#undef REQUIRE
#define REQUIRE(x) @hostile_REQUIRE_from_catch@
#undef DCHECK
#define DCHECK(x) @hostile_DCHECK_from_glog@
#undef BIG_ENDIAN
#define BIG_ENDIAN @hostile_BIG_ENDIAN_from_endian_h@
#undef LITTLE_ENDIAN
#define LITTLE_ENDIAN @hostile_LITTLE_ENDIAN_from_endian_h@
#undef BYTE_ORDER
#define BYTE_ORDER @hostile_BYTE_ORDER_from_endian_h@

// Every public header (generated list), the Eigen adapters too when Eigen is there.
#include "hostile_nanscope_headers.hpp"
#include <nanscope/nanscope.hpp>

// Use the API (the formatter, the check templates) so that the test is not only about declarations.
int nanscope_hostile_macros_use() {
  float data[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  const nanscope::health_result r =
      (nanscope::check)(data, nanscope::check_options{}.with_mode(nanscope::check_mode::stats).with_threads(1));
  const std::string s = nanscope::summary(r) + fmt::format("{}{:v}", r, r);
  return static_cast<int>(r.count) + static_cast<int>(s.size() % 2);
}
