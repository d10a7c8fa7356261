// nanscope — adapters/eigen.hpp: Eigen dense objects as tensors.
//
// Accepted: anything derived from Eigen::DenseBase with direct memory access — Matrix, Array, Map (any
// Stride), Block, Ref, Transpose of those, row- and column-major, including Eigen::half / Eigen::bfloat16
// scalars. Vectors (compile-time one row or one column) become rank-1 views of shape {size}; everything
// else is rank 2 {rows, cols} with strides in elements, so flat indices (first_nonfinite) are row-major
// indices of (row, col): index = row * cols + col, whatever the storage order.
//
// Rejected at compile time: expressions without direct access (a + b, x.array().abs(), ...). Evaluate them
// first — nanscope::check(expr.eval()) — so that the temporary is visible in your code rather than
// allocated behind your back.
//
// For Eigen::Tensor and Eigen::TensorMap include <nanscope/adapters/eigen_tensor.hpp>.
#ifndef NANSCOPE_ADAPTERS_EIGEN_HPP
#define NANSCOPE_ADAPTERS_EIGEN_HPP

#include "../traits.hpp"

#include <Eigen/Core>

#include <type_traits>

NANSCOPE_NAMESPACE_BEGIN

template <>
struct scalar_traits<Eigen::half> {
  static constexpr dtype value = dtype::f16;
};
template <>
struct scalar_traits<Eigen::bfloat16> {
  static constexpr dtype value = dtype::bf16;
};

namespace detail {
template <class T>
struct is_eigen_dense : std::is_base_of<Eigen::DenseBase<T>, T> {};

template <class T, bool IsDense = is_eigen_dense<T>::value>
struct eigen_has_direct_access : std::false_type {};
template <class T>
struct eigen_has_direct_access<T, true>
    : std::integral_constant<bool, (Eigen::internal::traits<T>::Flags & Eigen::DirectAccessBit) != 0> {};
}  // namespace detail

/// Eigen dense objects with direct access.
template <class T>
struct tensor_traits<T, std::enable_if_t<detail::is_eigen_dense<T>::value>> {
  static tensor_view view(const T& x) {
    static_assert(detail::eigen_has_direct_access<T>::value,
                  "nanscope: this Eigen expression has no direct memory access (a + b, .abs(), ...). "
                  "Evaluate it first: nanscope::check(expr.eval()).");
    using scalar = std::remove_cv_t<typename T::Scalar>;
    tensor_view v;
    v.data = x.data();
    v.type = dtype_of<scalar>();
    if constexpr (T::IsVectorAtCompileTime) {
      v.rank = 1;
      v.shape[0] = static_cast<std::int64_t>(x.size());
      v.strides[0] = static_cast<std::int64_t>(x.innerStride());
    } else {
      v.rank = 2;
      v.shape[0] = static_cast<std::int64_t>(x.rows());
      v.shape[1] = static_cast<std::int64_t>(x.cols());
      const auto inner = static_cast<std::int64_t>(x.innerStride());
      const auto outer = static_cast<std::int64_t>(x.outerStride());
      if (T::IsRowMajor) {
        v.strides[0] = outer;
        v.strides[1] = inner;
      } else {
        v.strides[0] = inner;
        v.strides[1] = outer;
      }
    }
    return v;
  }
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_ADAPTERS_EIGEN_HPP
