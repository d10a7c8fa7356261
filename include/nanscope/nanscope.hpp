// nanscope — umbrella header (host side): views, dtypes, the fused health pass and its text output.
// Adapters (adapters/eigen.hpp, ...) and the CUDA backend (*.cuh) are included separately.
#ifndef NANSCOPE_NANSCOPE_HPP
#define NANSCOPE_NANSCOPE_HPP

#include "config.hpp"
#include "dtype.hpp"
#include "view.hpp"
#include "traits.hpp"
#include "health.hpp"
#include "check.hpp"
#include "format.hpp"

#endif  // NANSCOPE_NANSCOPE_HPP
