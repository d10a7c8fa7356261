// nanscope — the one translation unit of the nanscope::compiled CMake target: the definitions of the
// separate-implementation mode (the host kernels and check(), the recorder's implementation, the report
// printers), compiled once for a program whose files include <nanscope/instrument.hpp> (docs/getting-started.md,
// "Compile time").
#define NANSCOPE_IMPLEMENTATION
#include <nanscope/instrument.hpp>
