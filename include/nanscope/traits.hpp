// nanscope — traits.hpp: the customization point that turns any tensor type into a tensor_view.
//
// Three ways in, tried in this order by nanscope::to_view(x):
//   1. a specialisation `template <> struct nanscope::tensor_traits<T> { static tensor_view view(const T&); };`
//   2. an ADL hook: a free function `nanscope::tensor_view nanscope_view(const T&)` in T's namespace;
//   3. built-ins: tensor_view itself, C arrays (multi-dimensional too), and anything contiguous with
//      data() and size() whose element type has nanscope::scalar_traits (std::vector, std::array, spans...).
// Pointer + count: nanscope::view_of(ptr, n) or view_of(ptr, {d0, d1, ...}).
#ifndef NANSCOPE_TRAITS_HPP
#define NANSCOPE_TRAITS_HPP

#include "config.hpp"
#include "dtype.hpp"
#include "view.hpp"

#include <cstddef>
#include <initializer_list>
#include <type_traits>
#include <utility>

NANSCOPE_NAMESPACE_BEGIN

/// Primary template: left undefined on purpose (no `view` member). Specialise it for your tensor type.
template <class T, class Enable = void>
struct tensor_traits {};

/// traits<const T> forwards to traits<T>.
template <class T>
struct tensor_traits<const T> : tensor_traits<T> {};

/// View of `n` contiguous elements at `p`.
template <class T>
tensor_view view_of(const T* p, std::size_t n, const char* name = nullptr) {
  return tensor_view::flat(p, dtype_of<T>(), static_cast<std::int64_t>(n), name);
}
/// Contiguous row-major view of `p` with the given shape.
template <class T>
tensor_view view_of(const T* p, std::initializer_list<std::int64_t> shape, const char* name = nullptr) {
  return tensor_view::contiguous(p, dtype_of<T>(), shape, name);
}

namespace detail {
template <class...>
using void_t = void;

template <class T, class = void>
struct has_traits_view : std::false_type {};
template <class T>
struct has_traits_view<T, void_t<decltype(tensor_traits<T>::view(std::declval<const T&>()))>> : std::true_type {};

// ADL hook lookup happens here, in a namespace with a poison-pill declaration so that only ADL finds it.
namespace adl {
void nanscope_view() = delete;
template <class T, class = void>
struct has_hook : std::false_type {};
template <class T>
struct has_hook<T, void_t<decltype(nanscope_view(std::declval<const T&>()))>> : std::true_type {};
template <class T>
tensor_view call_hook(const T& t) {
  return nanscope_view(t);
}
}  // namespace adl

template <class T, class = void>
struct is_contiguous_range : std::false_type {};
template <class T>
struct is_contiguous_range<
    T, void_t<decltype(std::declval<const T&>().data()), decltype(std::declval<const T&>().size())>>
    : std::integral_constant<
          bool, std::is_pointer<decltype(std::declval<const T&>().data())>::value &&
                    has_scalar_traits<std::remove_cv_t<
                        std::remove_pointer_t<decltype(std::declval<const T&>().data())>>>::value> {};

template <class T>
struct c_array_base {
  using type = T;
};
template <class T, std::size_t N>
struct c_array_base<T[N]> {
  using type = typename c_array_base<T>::type;
};
template <class A>
void fill_c_array_shape(tensor_view& v) {
  if constexpr (std::is_array<A>::value) {
    v.shape[v.rank++] = static_cast<std::int64_t>(std::extent<A>::value);
    fill_c_array_shape<std::remove_extent_t<A>>(v);
  }
}
}  // namespace detail

/// True when nanscope::to_view accepts T.
template <class T>
struct is_tensor
    : std::integral_constant<bool, detail::has_traits_view<std::remove_cv_t<T>>::value ||
                                       detail::adl::has_hook<std::remove_cv_t<T>>::value ||
                                       std::is_same<std::remove_cv_t<T>, tensor_view>::value ||
                                       (std::is_array<T>::value &&
                                        detail::has_scalar_traits<std::remove_cv_t<
                                            typename detail::c_array_base<std::remove_cv_t<T>>::type>>::value) ||
                                       detail::is_contiguous_range<std::remove_cv_t<T>>::value> {};

/// Turns any supported tensor into a tensor_view. An unsupported type fails with a static_assert that says
/// what to add.
template <class T>
tensor_view to_view(const T& t, const char* name = nullptr) {
  using U = std::remove_cv_t<T>;
  tensor_view v;
  if constexpr (detail::has_traits_view<U>::value) {
    v = tensor_traits<U>::view(t);
  } else if constexpr (detail::adl::has_hook<U>::value) {
    v = detail::adl::call_hook(t);
  } else if constexpr (std::is_same<U, tensor_view>::value) {
    v = t;
  } else if constexpr (std::is_array<U>::value) {
    using E = typename detail::c_array_base<U>::type;
    v.data = &t;
    v.type = dtype_of<std::remove_cv_t<E>>();
    detail::fill_c_array_shape<U>(v);
    v.set_contiguous_strides();
  } else if constexpr (detail::is_contiguous_range<U>::value) {
    using E = std::remove_cv_t<std::remove_pointer_t<decltype(t.data())>>;
    v = view_of<E>(t.data(), static_cast<std::size_t>(t.size()));
  } else {
    static_assert(detail::has_traits_view<U>::value,
                  "nanscope: this type is not a tensor nanscope knows. Include the adapter for it "
                  "(nanscope/adapters/eigen.hpp, torch.hpp, dlpack.hpp), specialise "
                  "nanscope::tensor_traits<T> with `static nanscope::tensor_view view(const T&)`, or provide "
                  "`nanscope::tensor_view nanscope_view(const T&)` in T's namespace.");
  }
  if (name != nullptr) v.name = name;
  return v;
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_TRAITS_HPP
