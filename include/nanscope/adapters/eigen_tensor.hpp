// nanscope — adapters/eigen_tensor.hpp: Eigen::Tensor, Eigen::TensorMap and Eigen::TensorFixedSize as
// tensors (the unsupported CXX11 Tensor module). Shape is the tensor's dimensions in order; strides follow
// its layout (ColMajor: the first dimension is fastest). Flat indices are row-major over the dimensions.
#ifndef NANSCOPE_ADAPTERS_EIGEN_TENSOR_HPP
#define NANSCOPE_ADAPTERS_EIGEN_TENSOR_HPP

#include "eigen.hpp"

#include <unsupported/Eigen/CXX11/Tensor>

NANSCOPE_NAMESPACE_BEGIN

namespace detail {
template <class T>
tensor_view eigen_tensor_view(const T& t) {
  using scalar = std::remove_cv_t<typename T::Scalar>;
  constexpr int rank = T::NumIndices;
  static_assert(rank <= max_rank, "nanscope: Eigen tensor rank exceeds nanscope::max_rank (8)");
  tensor_view v;
  v.data = t.data();
  v.type = dtype_of<scalar>();
  v.rank = rank;
  const auto& dims = t.dimensions();
  for (int i = 0; i < rank; ++i) v.shape[i] = static_cast<std::int64_t>(dims[i]);
  detail::dense_strides(nullptr, rank, v.shape, v.strides,
                        static_cast<int>(T::Layout) == static_cast<int>(Eigen::ColMajor));
  return v;
}
}  // namespace detail

template <class S, int N, int Opt, class Idx>
struct tensor_traits<Eigen::Tensor<S, N, Opt, Idx>> {
  static tensor_view view(const Eigen::Tensor<S, N, Opt, Idx>& t) { return detail::eigen_tensor_view(t); }
};
template <class P, int Opt, template <class> class MP>
struct tensor_traits<Eigen::TensorMap<P, Opt, MP>> {
  static tensor_view view(const Eigen::TensorMap<P, Opt, MP>& t) { return detail::eigen_tensor_view(t); }
};
template <class S, class Dims, int Opt, class Idx>
struct tensor_traits<Eigen::TensorFixedSize<S, Dims, Opt, Idx>> {
  static tensor_view view(const Eigen::TensorFixedSize<S, Dims, Opt, Idx>& t) { return detail::eigen_tensor_view(t); }
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_ADAPTERS_EIGEN_TENSOR_HPP
