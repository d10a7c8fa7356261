// nanscope — detail/block_scaled_avx2.hpp: the AVX2 kernel of the block-scaled what-if statistics (block_scaled.hpp).
// Internal: include <nanscope/block_scaled.hpp>.
#ifndef NANSCOPE_DETAIL_BLOCK_SCALED_AVX2_HPP
#define NANSCOPE_DETAIL_BLOCK_SCALED_AVX2_HPP

#if !defined(NANSCOPE_BLOCK_SCALED_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/block_scaled_avx2.hpp is internal: include <nanscope/block_scaled.hpp>"
#endif

#include "block_scaled_kernel.hpp"
#include "kernel_x86.hpp"

NANSCOPE_NAMESPACE_BEGIN
namespace detail {
#if NANSCOPE_HAS_X86_SIMD()
inline bs_units_fn bs_units_simd_for(const bs_setup& s) {
  (void)s;
  return nullptr;
}
#endif
}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_BLOCK_SCALED_AVX2_HPP
