// The one file of the program that compiles nanscope's definitions (the route without the CMake target).
#define NANSCOPE_IMPLEMENTATION
#include <nanscope/instrument.hpp>
