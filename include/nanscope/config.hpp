// nanscope — find NaN, Inf and low-precision overflow in the tensors of C++ ML engines.
// SPDX-License-Identifier: MIT
//
// config.hpp: version, namespace macros, user switches and the error type.
// Needs only the standard library.
#ifndef NANSCOPE_CONFIG_HPP
#define NANSCOPE_CONFIG_HPP

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#define NANSCOPE_VERSION_MAJOR 0
#define NANSCOPE_VERSION_MINOR 1
#define NANSCOPE_VERSION_PATCH 0
#define NANSCOPE_VERSION (NANSCOPE_VERSION_MAJOR * 10000 + NANSCOPE_VERSION_MINOR * 100 + NANSCOPE_VERSION_PATCH)

// Everything lives in an inline namespace (nanscope::v0...), so a future ABI break can change its name. The
// configuration macros that change definitions are part of the name (nlohmann's ABI tags): translation units
// built with different settings then never share an inline function by mistake (ODR).
#define NANSCOPE_NAMESPACE_BEGIN \
  namespace nanscope {           \
  inline namespace NANSCOPE_IMPL_ABI_NAME(v0, NANSCOPE_IMPL_ABI_SIMD, NANSCOPE_IMPL_ABI_EXCEPTIONS) {
#define NANSCOPE_NAMESPACE_END \
  }                            \
  }

#define NANSCOPE_IMPL_ABI_CAT(a, b, c) a##b##c
#define NANSCOPE_IMPL_ABI_NAME(a, b, c) NANSCOPE_IMPL_ABI_CAT(a, b, c)

// Header-only or separate implementation (docs/getting-started.md, "Compile time"). Header-only (the default,
// <nanscope/nanscope.hpp>): every function is inline and compiled in every file that uses it. Separate
// (<nanscope/instrument.hpp> turns it on, or NANSCOPE_CONFIG_SEPARATE_IMPL=1 for the whole program, as the
// nanscope::compiled CMake target does): the entry points of checks and of the recorder (NANSCOPE_IMPL_ENTRY) are
// only declared, and defined once, in the file that defines NANSCOPE_IMPLEMENTATION before including
// <nanscope/instrument.hpp>; the kernels, the recorder's implementation and the report printers are compiled
// there only. The mode is fixed by the first inclusion of this header in a translation unit.
#if defined(NANSCOPE_CONFIG_SEPARATE_IMPL) && NANSCOPE_CONFIG_SEPARATE_IMPL
#define NANSCOPE_IMPL_SEPARATE 1
#define NANSCOPE_IMPL_ENTRY
#else
#define NANSCOPE_IMPL_SEPARATE 0
#define NANSCOPE_IMPL_ENTRY inline
#endif
// Where the entry points are defined: `#if !NANSCOPE_IMPL_SEPARATE || defined(NANSCOPE_IMPLEMENTATION)`.

// Feature tests are function-like so that a typo fails to compile.
#if defined(__CUDACC__)
#define NANSCOPE_IMPL_CUDA_COMPILATION 1
#else
#define NANSCOPE_IMPL_CUDA_COMPILATION 0
#endif
#define NANSCOPE_CUDA_COMPILATION() NANSCOPE_IMPL_CUDA_COMPILATION

#if defined(__CUDACC__)
#define NANSCOPE_HOST_DEVICE __host__ __device__
#else
#define NANSCOPE_HOST_DEVICE
#endif

// `NANSCOPE_IMPL_UNROLL(n) for (...)`: unrolls a fixed-count loop over vector registers (GCC and Clang honour
// `#pragma GCC unroll`). nvcc's front end rejects that pragma (error 1675 under -Werror), so it is empty there.
#if defined(__CUDACC__)
#define NANSCOPE_IMPL_UNROLL(n)
#else
#define NANSCOPE_IMPL_PRAGMA(x) _Pragma(#x)
#define NANSCOPE_IMPL_UNROLL(n) NANSCOPE_IMPL_PRAGMA(GCC unroll n)
#endif

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDA_ARCH__)
#define NANSCOPE_IMPL_X86_SIMD 1
#else
#define NANSCOPE_IMPL_X86_SIMD 0
#endif
// 1 when the AVX2 / AVX-512 kernels are compiled in (x86-64 with GCC or Clang). They are chosen at run time.
#ifndef NANSCOPE_CONFIG_NO_SIMD
#define NANSCOPE_HAS_X86_SIMD() NANSCOPE_IMPL_X86_SIMD
#else
#define NANSCOPE_HAS_X86_SIMD() 0
#endif
#if defined(NANSCOPE_CONFIG_NO_SIMD)
#define NANSCOPE_IMPL_ABI_SIMD _nosimd
#else
#define NANSCOPE_IMPL_ABI_SIMD
#endif

// Exceptions: auto-detected, overridable with NANSCOPE_CONFIG_NO_EXCEPTIONS.
#if !defined(NANSCOPE_CONFIG_NO_EXCEPTIONS)
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define NANSCOPE_IMPL_EXCEPTIONS 1
#else
#define NANSCOPE_IMPL_EXCEPTIONS 0
#endif
#else
#define NANSCOPE_IMPL_EXCEPTIONS 0
#endif
#define NANSCOPE_EXCEPTIONS() NANSCOPE_IMPL_EXCEPTIONS
#if NANSCOPE_IMPL_EXCEPTIONS
#define NANSCOPE_IMPL_ABI_EXCEPTIONS
#else
#define NANSCOPE_IMPL_ABI_EXCEPTIONS _noexc
#endif

#if NANSCOPE_IMPL_EXCEPTIONS
#define NANSCOPE_IMPL_THROW(ex) throw ex
#else
#include <cstdio>
#include <cstdlib>
#define NANSCOPE_IMPL_THROW(ex)                              \
  do {                                                       \
    std::fprintf(stderr, "nanscope: fatal: %s\n", (ex).what()); \
    std::abort();                                            \
  } while (false)
#endif


NANSCOPE_NAMESPACE_BEGIN

/// The one exception type nanscope throws for bad input. what() names the tensor and the problem.
class error : public std::invalid_argument {
 public:
  explicit error(const std::string& message) : std::invalid_argument(message) {}
};

namespace detail {
[[noreturn]] inline void fail(const char* tensor_name, const std::string& problem) {
  std::string msg = "nanscope: tensor '";
  msg += (tensor_name != nullptr && tensor_name[0] != '\0') ? tensor_name : "<unnamed>";
  msg += "': ";
  msg += problem;
  NANSCOPE_IMPL_THROW(::nanscope::error(msg));
#if !NANSCOPE_IMPL_EXCEPTIONS
  std::abort();
#endif
}
}  // namespace detail

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_CONFIG_HPP
