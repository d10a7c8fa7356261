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

namespace detail {
// Overflow-checked arithmetic for extents, strides and byte counts: every product or sum of them in the
// library goes through these (signed overflow is undefined behaviour). Each returns true when the exact
// result does not fit, and then leaves `r` unspecified.
inline bool mul_overflow(std::int64_t a, std::int64_t b, std::int64_t& r) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_mul_overflow(a, b, &r);
#else
  if (a == 0 || b == 0) {
    r = 0;
    return false;
  }
  const std::uint64_t ua = a < 0 ? 0 - static_cast<std::uint64_t>(a) : static_cast<std::uint64_t>(a);
  const std::uint64_t ub = b < 0 ? 0 - static_cast<std::uint64_t>(b) : static_cast<std::uint64_t>(b);
  const bool neg = (a < 0) != (b < 0);
  const std::uint64_t lim = neg ? std::uint64_t{1} << 63 : (std::uint64_t{1} << 63) - 1;
  if (ua > lim / ub) return true;
  const std::uint64_t m = ua * ub;
  r = neg ? static_cast<std::int64_t>(0 - m) : static_cast<std::int64_t>(m);
  return false;
#endif
}
inline bool add_overflow(std::int64_t a, std::int64_t b, std::int64_t& r) {
#if defined(__GNUC__) || defined(__clang__)
  return __builtin_add_overflow(a, b, &r);
#else
  if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return true;
  r = a + b;
  return false;
#endif
}
inline bool mul_overflow(std::uint64_t a, std::uint64_t b, std::uint64_t& r) {
  if (a != 0 && b > ~std::uint64_t{0} / a) return true;
  r = a * b;
  return false;
}
inline bool add_overflow(std::uint64_t a, std::uint64_t b, std::uint64_t& r) {
  r = a + b;  // unsigned: wraps, never undefined
  return r < a;
}

/// "(2, 3, 4)": a shape as messages print it.
inline std::string shape_text(int rank, const std::int64_t* shape) {
  std::string s = "(";
  for (int i = 0; i < rank; ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

/// Dense strides (in elements) of a shape: row-major (last dimension fastest) or column-major. Extents below
/// 1 count as 1 here (validate() rejects negative ones). A non-empty shape whose strides or element count do
/// not fit in int64 is an error naming the tensor; an empty shape (some extent 0) never is: it has no element
/// to reach, so a stride that would not fit in int64 is set to 0 instead.
inline void dense_strides(const char* name, int rank, const std::int64_t* shape, std::int64_t* strides,
                          bool column_major) {
  bool empty = false;
  for (int i = 0; i < rank; ++i) empty = empty || shape[i] == 0;
  std::int64_t s = 1;
  bool overflowed = false;
  for (int k = 0; k < rank; ++k) {
    const int i = column_major ? k : rank - 1 - k;
    strides[i] = overflowed ? 0 : s;
    if (overflowed) continue;
    if (mul_overflow(s, shape[i] > 0 ? shape[i] : 1, s)) {
      if (!empty)
        fail(name, "shape " + shape_text(rank, shape) +
                       " has more elements than fit in 64-bit arithmetic (its element count overflows int64)");
      overflowed = true;
    }
  }
}
}  // namespace detail

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

  /// Fills strides for a row-major contiguous layout of the current shape. Throws nanscope::error when a
  /// non-empty shape's element count does not fit in int64; an empty shape gets 0 for any stride that would
  /// not fit (see detail::dense_strides).
  void set_contiguous_strides() {
    if (rank < 0 || rank > max_rank)
      detail::fail(name, "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(max_rank) + "]");
    detail::dense_strides(name, rank, shape, strides, false);
  }

  tensor_view& named(const char* n) {
    name = n;
    return *this;
  }

  /// Number of elements (product of the shape; 1 for rank 0; 0 when an extent is 0, however large the
  /// others). Call validate() first for untrusted shapes: the product of a shape that validate() rejects wraps.
  std::uint64_t numel() const {
    for (int i = 0; i < rank; ++i)
      if (shape[i] == 0) return 0;
    std::uint64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= static_cast<std::uint64_t>(shape[i]);  // unsigned: wraps, never UB
    return n;
  }
  /// True when the elements are dense in row-major order (unit-extent dims may have any stride; an empty
  /// view is contiguous whatever its strides).
  bool is_contiguous() const {
    for (int i = 0; i < rank; ++i)
      if (shape[i] == 0) return true;
    std::int64_t expect = 1;
    bool overflowed = false;  // expect no longer fits: no later non-unit dimension can match it
    for (int i = rank - 1; i >= 0; --i) {
      if (shape[i] == 1) continue;
      if (overflowed || strides[i] != expect) return false;
      overflowed = detail::mul_overflow(expect, shape[i], expect);
    }
    return true;
  }
  std::size_t element_size() const { return size_of(type); }
};

/// Checks a view and throws nanscope::error naming the tensor and the problem: unsupported dtype, rank
/// out of range, negative extents, negative strides, a non-empty view whose element count or byte offset of
/// its last element does not fit in int64 (or whose last byte would lie past the end of the address space),
/// or null data with elements. A valid view can be traversed without overflow. An empty view (some extent 0)
/// is valid whatever its other extents and strides: it has no element to reach. The data pointer may have
/// any alignment.
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
  if (!empty) {
    // max_offset <= limit, so the byte count cannot overflow; the address of the last byte must not wrap
    const std::uint64_t last_byte = max_offset * esize + (esize - 1);
    const auto base = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(v.data));
    if (last_byte > ~std::uint64_t{0} - base || last_byte > static_cast<std::uint64_t>(UINTPTR_MAX) - base)
      detail::fail(v.name, "strides overflow: the last element would lie past the end of the address space");
  }
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_VIEW_HPP
