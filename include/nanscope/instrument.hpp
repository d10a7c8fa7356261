// nanscope — instrument.hpp: the light header for instrumenting code: views and traits, check(), the recorder,
// scopes and the macros, without the kernels, the recorder's implementation or the report printers, which are
// compiled once, in one file of the program:
//
//   // in every file that instruments code (about a second to compile):
//   #include <nanscope/instrument.hpp>
//   NANSCOPE_SCOPE("blocks.1", "Block"); NANSCOPE_OUTPUT(y); DETECT_OVERFLOW(h, "after the residual add");
//
//   // in exactly one file of the program (or link the nanscope::compiled CMake target instead):
//   #define NANSCOPE_IMPLEMENTATION
//   #include <nanscope/instrument.hpp>
//
// Including this header first in a file selects the separate-implementation mode for that file (config.hpp):
// include it, not <nanscope/nanscope.hpp>, first in every file of a program that uses it (other nanscope headers,
// the tree writer's say, may follow it), or define NANSCOPE_CONFIG_SEPARATE_IMPL=1 for the whole program.
// docs/getting-started.md, "Compile time", has the measurements.
#ifndef NANSCOPE_INSTRUMENT_HPP
#define NANSCOPE_INSTRUMENT_HPP

#ifndef NANSCOPE_CONFIG_SEPARATE_IMPL
#define NANSCOPE_CONFIG_SEPARATE_IMPL 1
#endif

#include "config.hpp"
#include "dtype.hpp"
#include "view.hpp"
#include "traits.hpp"
#include "health.hpp"
#include "check_api.hpp"
#include "format_api.hpp"
#include "recorder.hpp"
#include "macros.hpp"

#if defined(NANSCOPE_IMPLEMENTATION)
// The one file that compiles the definitions: the host kernels and check(), the recorder's implementation and
// the report printers and the recorder's block-scaled pass (their static registration included).
#include "block_scaled.hpp"
#include "check.hpp"
#include "format.hpp"
#include "report.hpp"
#include "detail/recorder_impl.hpp"
#endif

#endif  // NANSCOPE_INSTRUMENT_HPP
