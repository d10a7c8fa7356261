// nanscope tests — support/views.hpp: hand-built strided views over test data.
//
// A "layout" is a view geometry (shape + strides in elements). scatter() lays a logical sequence into a fresh
// memory buffer following that geometry, filling every element the view does not reach with poison
// (NaN / inf / huge values), so a kernel that reads outside the view is caught. contiguous_like() gives the
// dense row-major view of the same logical data with the same shape, for strided-equals-contiguous checks.
#ifndef NANSCOPE_TESTS_SUPPORT_VIEWS_HPP
#define NANSCOPE_TESTS_SUPPORT_VIEWS_HPP

#include "reference.hpp"

#include <nanscope/view.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace nstest {

struct layout {
  std::string label;
  int rank = 0;
  std::int64_t shape[nanscope::max_rank] = {};
  std::int64_t strides[nanscope::max_rank] = {};
  bool permuted = false;  ///< a permutation of a dense layout (e.g. a transpose)

  std::uint64_t numel() const {
    std::uint64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= static_cast<std::uint64_t>(shape[i]);
    return n;
  }
  /// Elements of memory the geometry spans (largest offset + 1), 0 when empty.
  std::size_t span() const {
    if (numel() == 0) return 0;
    std::int64_t mx = 0;
    for (int i = 0; i < rank; ++i) mx += (shape[i] - 1) * strides[i];
    return static_cast<std::size_t>(mx) + 1;
  }
  /// Memory offsets of the logical elements in row-major order (own odometer).
  std::vector<std::size_t> offsets() const {
    std::vector<std::size_t> out;
    const std::uint64_t n = numel();
    out.reserve(static_cast<std::size_t>(n));
    std::int64_t idx[nanscope::max_rank] = {};
    for (std::uint64_t k = 0; k < n; ++k) {
      std::int64_t off = 0;
      for (int d = 0; d < rank; ++d) off += idx[d] * strides[d];
      out.push_back(static_cast<std::size_t>(off));
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[d] < shape[d]) break;
        idx[d] = 0;
      }
    }
    return out;
  }
};

inline layout make_layout(const std::string& label, std::initializer_list<std::int64_t> shape,
                          std::initializer_list<std::int64_t> strides) {
  layout l;
  l.label = label;
  for (std::int64_t s : shape) l.shape[l.rank++] = s;
  int i = 0;
  for (std::int64_t s : strides) l.strides[i++] = s;
  return l;
}

/// Row-major contiguous strides for a shape.
inline void contiguous_strides(int rank, const std::int64_t* shape, std::int64_t* strides) {
  std::int64_t s = 1;
  for (int i = rank - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i] > 0 ? shape[i] : 1;
  }
}

/// Memory + view of typed storage T (float or double, or any trivially copyable element).
template <class T>
struct strided_tensor {
  std::vector<T> memory;
  nanscope::tensor_view view;
};

template <class T>
nanscope::tensor_view make_view(const T* data, nanscope::dtype t, const layout& l) {
  nanscope::tensor_view v;
  v.data = data;
  v.type = t;
  v.rank = l.rank;
  for (int i = 0; i < l.rank; ++i) {
    v.shape[i] = l.shape[i];
    v.strides[i] = l.strides[i];
  }
  return v;
}

/// Lays `logical` (numel(l) elements) into memory following l; untouched memory holds `poison` values
/// cycling through the given list.
template <class T>
strided_tensor<T> scatter(const std::vector<T>& logical, nanscope::dtype t, const layout& l,
                          const std::vector<T>& poison) {
  strided_tensor<T> st;
  st.memory.resize(l.span() == 0 ? 1 : l.span());
  for (std::size_t i = 0; i < st.memory.size(); ++i) st.memory[i] = poison[i % poison.size()];
  const std::vector<std::size_t> offs = l.offsets();
  for (std::size_t k = 0; k < offs.size(); ++k) st.memory[offs[k]] = logical[k];
  st.view = make_view(st.memory.data(), t, l);
  return st;
}

/// Dense row-major view with the same shape as `l` over `data`.
template <class T>
nanscope::tensor_view contiguous_like(const T* data, nanscope::dtype t, const layout& l) {
  layout c = l;
  contiguous_strides(c.rank, c.shape, c.strides);
  return make_view(data, t, c);
}

}  // namespace nstest

#endif  // NANSCOPE_TESTS_SUPPORT_VIEWS_HPP
