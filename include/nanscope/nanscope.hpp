// nanscope — umbrella header (host side): views, dtypes, the fused health pass, its text output, the
// low-precision margins, the frame recorder with its report printers and macros, .npy files, and the
// layer-tree JSON writer.
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
#include "margins.hpp"
#include "histogram.hpp"
#include "npy.hpp"
#include "safetensors.hpp"
#include "recorder.hpp"
#include "report.hpp"
#include "macros.hpp"
#include "tree.hpp"
#include "deferred.hpp"

#endif  // NANSCOPE_NANSCOPE_HPP
