// nanscope — view.hpp: the one non-owning tensor view every algorithm sees, and its validation.
// Needs only the standard library.
#ifndef NANSCOPE_VIEW_HPP
#define NANSCOPE_VIEW_HPP

#include "config.hpp"
#include "dtype.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>

NANSCOPE_NAMESPACE_BEGIN

/// Where a view's data lives. Host algorithms accept `host` (and `cuda_managed`/`cuda_pinned`, which the
/// host can read); the CUDA backend accepts `cuda_device` and `cuda_managed`.
enum class memory_space : std::uint8_t { host, cuda_device, cuda_managed, cuda_pinned };

inline const char* name(memory_space s) {
  switch (s) {
    case memory_space::host: return "host";
    case memory_space::cuda_device: return "cuda_device";
    case memory_space::cuda_managed: return "cuda_managed";
    case memory_space::cuda_pinned: return "cuda_pinned";
  }
  return "?";
}

inline constexpr int max_rank = 8;

/// A non-owning, typed, strided view: data pointer, dtype, shape, strides in elements (row-major flat
/// index order is the logical order), memory space and an optional name used in messages.
/// Strides may be zero (broadcast) but not negative.
struct tensor_view {
  const void* data = nullptr;
  dtype type = dtype::f32;
  int rank = 0;
  std::int64_t shape[max_rank] = {};
  std::int64_t strides[max_rank] = {};
  memory_space space = memory_space::host;
  int device_id = -1;
  const char* name = nullptr;

  /// Contiguous row-major view with the given shape.
  static tensor_view contiguous(const void* data, dtype t, std::initializer_list<std::int64_t> shape,
                                const char* name = nullptr) {
    tensor_view v;
    v.data = data;
    v.type = t;
    v.name = name;
    if (shape.size() > static_cast<std::size_t>(max_rank))
      detail::fail(name, "rank " + std::to_string(shape.size()) + " exceeds max_rank " + std::to_string(max_rank));
    for (std::int64_t d : shape) v.shape[v.rank++] = d;
    v.set_contiguous_strides();
    return v;
  }
  /// One-dimensional contiguous view of n elements.
  static tensor_view flat(const void* data, dtype t, std::int64_t n, const char* name = nullptr) {
    return contiguous(data, t, {n}, name);
  }

  /// Fills strides for a row-major contiguous layout of the current shape.
  void set_contiguous_strides() {
    std::int64_t s = 1;
    for (int i = rank - 1; i >= 0; --i) {
      strides[i] = s;
      s *= (shape[i] > 0 ? shape[i] : 1);
    }
  }

  tensor_view& named(const char* n) {
    name = n;
    return *this;
  }

  /// Number of elements (product of the shape; 1 for rank 0). Call validate() first for untrusted shapes.
  std::uint64_t numel() const {
    std::uint64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= static_cast<std::uint64_t>(shape[i]);
    return n;
  }
  /// True when the elements are dense in row-major order (unit-extent dims may have any stride).
  bool is_contiguous() const {
    std::int64_t expect = 1;
    for (int i = rank - 1; i >= 0; --i) {
      if (shape[i] == 1) continue;
      if (strides[i] != expect) return false;
      expect *= shape[i];
    }
    return true;
  }
  std::size_t element_size() const { return size_of(type); }
};

/// Checks a view and throws nanscope::error naming the tensor and the problem: unsupported dtype, rank
/// out of range, negative extents, element counts or byte extents overflowing 64 bits, negative strides,
/// or null data with elements. A valid view can be traversed without overflow.
inline void validate(const tensor_view& v) {
  if (static_cast<unsigned>(v.type) >= static_cast<unsigned>(dtype_count))
    detail::fail(v.name, "unsupported dtype value " + std::to_string(static_cast<unsigned>(v.type)));
  if (v.rank < 0 || v.rank > max_rank)
    detail::fail(v.name, "rank " + std::to_string(v.rank) + " is outside [0, " + std::to_string(max_rank) + "]");
  std::uint64_t n = 1;
  bool empty = false;
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0)
      detail::fail(v.name, "negative extent " + std::to_string(v.shape[i]) + " in dimension " + std::to_string(i));
    if (v.shape[i] == 0) empty = true;
  }
  const std::uint64_t esize = size_of(v.type);
  const std::uint64_t limit = (~std::uint64_t{0} >> 1) / esize;  // elements whose byte offsets fit int64
  std::uint64_t max_offset = 0;  // largest element offset reached
  for (int i = 0; i < v.rank; ++i) {
    const auto d = static_cast<std::uint64_t>(v.shape[i]);
    if (!empty && d != 0 && n > limit / d)
      detail::fail(v.name, "shape product overflows: the element count does not fit in 64 bits");
    n *= d;
    if (v.strides[i] < 0)
      detail::fail(v.name, "negative stride " + std::to_string(v.strides[i]) + " in dimension " + std::to_string(i) +
                               " (negative strides are not supported)");
    if (!empty && d > 1) {
      const auto s = static_cast<std::uint64_t>(v.strides[i]);
      if (s != 0 && (d - 1) > (limit - max_offset) / s)
        detail::fail(v.name, "strides overflow: the byte offset of the last element does not fit in 64 bits");
      max_offset += (d - 1) * s;
    }
  }
  if (!empty && v.data == nullptr)
    detail::fail(v.name, "null data pointer with " + std::to_string(n) + " elements");
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_VIEW_HPP
