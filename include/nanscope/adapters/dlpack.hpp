// nanscope — adapters/dlpack.hpp: DLPack tensors (DLTensor, DLManagedTensor, DLManagedTensorVersioned).
//
//   #include <nanscope/adapters/dlpack.hpp>
//   nanscope::check(*managed);                                  // DLTensor, DLManagedTensor, versioned
//   nanscope::check(nanscope::dlpack::view(managed, "logits")); // pointers too, named in error messages
//
// Needs <dlpack/dlpack.h> (any version; Debian's libdlpack-dev is 0.6). What is read:
//  - dtype: kDLFloat 16/32/64 bits, kDLBfloat 16, kDLInt and kDLUInt 8/16/32/64, kDLBool 8 bits, and the fp8
//    codes kDLFloat8_e4m3fn / kDLFloat8_e5m2 (8 bits). lanes must be 1.
//  - strides in elements; null strides mean compact row-major. A negative stride is refused unless its
//    dimension has extent 0 or 1 (where it is never applied: it is read as 0).
//  - byte_offset is added to data; the result may have any alignment (nanscope reads unaligned data).
//  - device: kDLCPU -> memory_space::host, kDLCUDAHost -> cuda_pinned (both read by the host check);
//    kDLCUDA -> cuda_device and kDLCUDAManaged -> cuda_managed views (device_id from the tensor), for a CUDA
//    backend: the host check refuses cuda_device views. Every other device is refused.
// The codes a header defines decide what a DLTensor / DLManagedTensor may use: kDLBool (code 6) needs a
// DLPack >= 0.8 header, the fp8 codes (10 and 12) a DLPack >= 1.1 header. A versioned tensor also states its
// own DLPack version: a code that exists in that version is read even when the header predates it (the
// numbers are fixed by the standard).
//
// Versioned tensors: any struct with `version` (.major, .minor), `flags` and a DLTensor `dl_tensor` — the
// header's DLManagedTensorVersioned (DLPack >= 1.0) or a struct of the same layout declared by code that
// must build against an older header. Major version 1 is read; others are refused (their ABI is unknown).
// Flags: READ_ONLY, IS_COPIED and IS_SUBBYTE_TYPE_PADDED do not change how nanscope reads (it never writes,
// and refuses sub-byte types).
//
// Every unreadable tensor (complex, opaque handles, lanes != 1, unusual bit widths, bool with bits != 8,
// negative strides, ndim outside [0, 8], null shape, null data with elements, an unknown
// device) is a nanscope::error that names the tensor and the problem.
#ifndef NANSCOPE_ADAPTERS_DLPACK_HPP
#define NANSCOPE_ADAPTERS_DLPACK_HPP

#include "../config.hpp"
#include "../dtype.hpp"
#include "../traits.hpp"
#include "../view.hpp"

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

// The header's DLPack version as major * 100 + minor: DLPack >= 1.0 defines DLPACK_MAJOR_VERSION and
// DLPACK_MINOR_VERSION; before that DLPACK_VERSION was 10 * minor (60 for 0.6, 80 for 0.8).
#if defined(DLPACK_MAJOR_VERSION) && defined(DLPACK_MINOR_VERSION)
#define NANSCOPE_IMPL_DLPACK_VERSION (DLPACK_MAJOR_VERSION * 100 + DLPACK_MINOR_VERSION)
#elif defined(DLPACK_VERSION)
#define NANSCOPE_IMPL_DLPACK_VERSION (DLPACK_VERSION / 10)
#else
#define NANSCOPE_IMPL_DLPACK_VERSION 0
#endif
/// The DLPack version of <dlpack/dlpack.h> as major * 100 + minor (6 for 0.6, 101 for 1.1).
#define NANSCOPE_DLPACK_HEADER_VERSION() NANSCOPE_IMPL_DLPACK_VERSION

NANSCOPE_NAMESPACE_BEGIN

namespace detail {

// Type codes and device types by their numbers in the DLPack standard: older headers lack some names.
inline constexpr unsigned dl_code_int = 0, dl_code_uint = 1, dl_code_float = 2, dl_code_opaque = 3,
                          dl_code_bfloat = 4, dl_code_complex = 5, dl_code_bool = 6, dl_code_f8_e4m3fn = 10,
                          dl_code_f8_e5m2 = 12;
inline constexpr int dl_cpu = 1, dl_cuda = 2, dl_cuda_host = 3, dl_cuda_managed = 13;

// Where the header names them, the numbers must agree.
static_assert(static_cast<unsigned>(kDLInt) == dl_code_int && static_cast<unsigned>(kDLUInt) == dl_code_uint &&
                  static_cast<unsigned>(kDLFloat) == dl_code_float &&
                  static_cast<unsigned>(kDLOpaqueHandle) == dl_code_opaque &&
                  static_cast<unsigned>(kDLBfloat) == dl_code_bfloat &&
                  static_cast<unsigned>(kDLComplex) == dl_code_complex,
              "nanscope: unexpected DLPack type codes");
static_assert(static_cast<int>(kDLCPU) == dl_cpu && static_cast<int>(kDLCUDA) == dl_cuda &&
                  static_cast<int>(kDLCUDAHost) == dl_cuda_host && static_cast<int>(kDLCUDAManaged) == dl_cuda_managed,
              "nanscope: unexpected DLPack device types");
#if NANSCOPE_IMPL_DLPACK_VERSION >= 8
static_assert(static_cast<unsigned>(kDLBool) == dl_code_bool, "nanscope: unexpected DLPack type code for kDLBool");
#endif
#if NANSCOPE_IMPL_DLPACK_VERSION >= 101
static_assert(static_cast<unsigned>(kDLFloat8_e4m3fn) == dl_code_f8_e4m3fn &&
                  static_cast<unsigned>(kDLFloat8_e5m2) == dl_code_f8_e5m2,
              "nanscope: unexpected DLPack fp8 type codes");
#endif

/// The first DLPack version (major * 100 + minor) that defines a type code.
inline int dl_code_since(unsigned code) {
  if (code <= dl_code_complex) return 0;
  if (code == dl_code_bool) return 8;
  if (code <= 17) return 101;  // the fp8, fp6 and fp4 codes of DLPack 1.1
  return 10000;                // unknown
}

inline const char* dl_code_name(unsigned code) {
  switch (code) {
    case 0: return "kDLInt";
    case 1: return "kDLUInt";
    case 2: return "kDLFloat";
    case 3: return "kDLOpaqueHandle";
    case 4: return "kDLBfloat";
    case 5: return "kDLComplex";
    case 6: return "kDLBool";
    case 7: return "kDLFloat8_e3m4";
    case 8: return "kDLFloat8_e4m3";
    case 9: return "kDLFloat8_e4m3b11fnuz";
    case 10: return "kDLFloat8_e4m3fn";
    case 11: return "kDLFloat8_e4m3fnuz";
    case 12: return "kDLFloat8_e5m2";
    case 13: return "kDLFloat8_e5m2fnuz";
    case 14: return "kDLFloat8_e8m0fnu";
    case 15: return "kDLFloat6_e2m3fn";
    case 16: return "kDLFloat6_e3m2fn";
    case 17: return "kDLFloat4_e2m1fn";
    default: return nullptr;
  }
}

inline std::string dl_version_text(int v) { return std::to_string(v / 100) + "." + std::to_string(v % 100); }

inline std::string dl_type_text(const DLDataType& t) {
  const char* n = dl_code_name(t.code);
  std::string s = n != nullptr ? std::string(n) : "type code " + std::to_string(unsigned{t.code});
  s += " with " + std::to_string(unsigned{t.bits}) + " bits";
  if (t.lanes != 1) s += " and " + std::to_string(unsigned{t.lanes}) + " lanes";
  return s;
}

/// The nanscope dtype of a DLPack type, or an error. `known_version`: the newest DLPack version whose codes
/// may be used (the header's, or a versioned tensor's own when newer).
inline dtype dl_dtype(const DLDataType& t, int known_version, const char* name) {
  const unsigned code = t.code, bits = t.bits;
  if (t.lanes != 1)
    fail(name, "DLPack dtype " + dl_type_text(t) + ": vector types (lanes != 1) are not supported; view the "
                                                   "lanes as an extra dimension");
  if (dl_code_since(code) > known_version) {
    const char* n = dl_code_name(code);
    if (n == nullptr) fail(name, "unknown DLPack type code " + std::to_string(code));
    fail(name, std::string("DLPack type code ") + std::to_string(code) + " (" + n + ") is defined from DLPack " +
                   dl_version_text(dl_code_since(code)) + ", newer than this tensor's DLPack " +
                   dl_version_text(known_version) + " (the <dlpack/dlpack.h> nanscope was built with is " +
                   dl_version_text(NANSCOPE_IMPL_DLPACK_VERSION) + ")");
  }
  auto by_bits = [&](dtype d8, dtype d16, dtype d32, dtype d64) -> dtype {
    switch (bits) {
      case 8: return d8;
      case 16: return d16;
      case 32: return d32;
      case 64: return d64;
      default: break;
    }
    fail(name, "DLPack dtype " + dl_type_text(t) + " is not supported: integers have 8, 16, 32 or 64 bits");
  };
  switch (code) {
    case dl_code_int: return by_bits(dtype::i8, dtype::i16, dtype::i32, dtype::i64);
    case dl_code_uint: return by_bits(dtype::u8, dtype::u16, dtype::u32, dtype::u64);
    case dl_code_float:
      if (bits == 16) return dtype::f16;
      if (bits == 32) return dtype::f32;
      if (bits == 64) return dtype::f64;
      fail(name, "DLPack dtype " + dl_type_text(t) +
                     " is not supported: kDLFloat has 16, 32 or 64 bits (fp8 formats have their own codes)");
    case dl_code_bfloat:
      if (bits == 16) return dtype::bf16;
      fail(name, "DLPack dtype " + dl_type_text(t) + " is not supported: kDLBfloat has 16 bits");
    case dl_code_bool:
      if (bits == 8) return dtype::boolean;
      fail(name, "DLPack dtype " + dl_type_text(t) + " is not supported: nanscope reads bool as one byte (bits 8)");
    case dl_code_f8_e4m3fn:
    case dl_code_f8_e5m2:
      if (bits == 8) return code == dl_code_f8_e4m3fn ? dtype::f8_e4m3fn : dtype::f8_e5m2;
      fail(name, "DLPack dtype " + dl_type_text(t) + " is not supported: fp8 formats have 8 bits");
    case dl_code_complex:
      fail(name, "DLPack dtype " + dl_type_text(t) +
                     " is not supported: complex tensors are not read; view them as real pairs (an extra "
                     "dimension of 2)");
    case dl_code_opaque: fail(name, "DLPack dtype " + dl_type_text(t) + " is an opaque handle, not numbers");
    default: break;
  }
  fail(name, "DLPack dtype " + dl_type_text(t) + " is not supported by nanscope");
}

inline std::string dl_device_text(int type) {
  switch (type) {
    case 4: return "kDLOpenCL";
    case 7: return "kDLVulkan";
    case 8: return "kDLMetal";
    case 9: return "kDLVPI";
    case 10: return "kDLROCM";
    case 11: return "kDLROCMHost";
    case 12: return "kDLExtDev";
    case 14: return "kDLOneAPI";
    case 15: return "kDLWebGPU";
    case 16: return "kDLHexagon";
    case 17: return "kDLMAIA";
    default: return "device type " + std::to_string(type);
  }
}

/// The view of a DLTensor, or an error naming `name`.
inline tensor_view dl_view(const DLTensor& t, const char* name, int known_version) {
  tensor_view v;
  v.name = name;
  const int device = static_cast<int>(t.device.device_type);
  switch (device) {
    case dl_cpu: v.space = memory_space::host; break;
    case dl_cuda_host: v.space = memory_space::cuda_pinned; break;
    case dl_cuda: v.space = memory_space::cuda_device; break;
    case dl_cuda_managed: v.space = memory_space::cuda_managed; break;
    default:
      fail(name, "DLPack tensor on " + dl_device_text(device) +
                     ": nanscope reads kDLCPU and kDLCUDAHost memory (and kDLCUDA / kDLCUDAManaged with its CUDA "
                     "backend)");
  }
  v.device_id = v.space == memory_space::host ? -1 : static_cast<int>(t.device.device_id);
  v.type = dl_dtype(t.dtype, known_version, name);
  if (t.ndim < 0 || t.ndim > max_rank)
    fail(name, "DLPack tensor with ndim " + std::to_string(t.ndim) + ": nanscope views have 0 to " +
                   std::to_string(max_rank) + " dimensions");
  v.rank = static_cast<int>(t.ndim);
  if (v.rank > 0 && t.shape == nullptr) fail(name, "DLPack tensor with ndim " + std::to_string(v.rank) + " and a null shape");
  bool empty = false;
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = t.shape[i];
    if (v.shape[i] < 0)
      fail(name, "DLPack tensor with negative extent " + std::to_string(v.shape[i]) + " in dimension " +
                     std::to_string(i));
    if (v.shape[i] == 0) empty = true;
  }
  if (t.strides == nullptr) {
    v.set_contiguous_strides();
  } else {
    for (int i = 0; i < v.rank; ++i) {
      const std::int64_t s = t.strides[i];
      if (s < 0 && v.shape[i] > 1)
        fail(name, "DLPack tensor with negative stride " + std::to_string(s) + " in dimension " + std::to_string(i) +
                       " (extent " + std::to_string(v.shape[i]) + "): nanscope does not read reversed layouts; "
                       "make it contiguous first");
      v.strides[i] = s < 0 ? 0 : s;  // a stride that is never applied (extent 0 or 1)
    }
  }
  if (t.data == nullptr) {
    if (!empty)
      fail(name, "DLPack tensor with null data and " + std::to_string(v.numel()) + " elements");
    v.data = nullptr;  // byte_offset of nothing
  } else {
    v.data = static_cast<const unsigned char*>(t.data) + t.byte_offset;  // any alignment is read
  }
  validate(v);
  return v;
}

/// A versioned managed tensor: `version.major`, `version.minor`, `flags` and a DLTensor `dl_tensor`.
template <class T, class = void>
struct is_dlpack_versioned : std::false_type {};
template <class T>
struct is_dlpack_versioned<T, void_t<decltype(std::declval<const T&>().version.major),
                                     decltype(std::declval<const T&>().version.minor),
                                     decltype(std::declval<const T&>().flags),
                                     decltype(std::declval<const T&>().dl_tensor)>>
    : std::integral_constant<bool, std::is_same<std::remove_cv_t<decltype(std::declval<T&>().dl_tensor)>,
                                                DLTensor>::value &&
                                       std::is_integral<decltype(std::declval<T&>().flags)>::value> {};

template <class T>
tensor_view dl_versioned_view(const T& m, const char* name) {
  const auto major = m.version.major;
  const auto minor = m.version.minor;
  if (major != 1)
    fail(name, "DLManagedTensorVersioned of DLPack " + std::to_string(major) + "." + std::to_string(minor) +
                   ": nanscope reads major version 1 (another major version may change the layout)");
  const int own = 100 + static_cast<int>(minor > 99 ? 99 : minor);
  return dl_view(m.dl_tensor, name, own > NANSCOPE_IMPL_DLPACK_VERSION ? own : NANSCOPE_IMPL_DLPACK_VERSION);
}

}  // namespace detail

#if NANSCOPE_IMPL_DLPACK_VERSION >= 100
static_assert(detail::is_dlpack_versioned<DLManagedTensorVersioned>::value,
              "nanscope: DLManagedTensorVersioned does not have the expected members");
#endif

namespace dlpack {

/// The view of a DLTensor. `name` (which must outlive the view) appears in error messages.
inline tensor_view view(const DLTensor& t, const char* name = nullptr) {
  return detail::dl_view(t, name, NANSCOPE_IMPL_DLPACK_VERSION);
}
inline tensor_view view(const DLTensor* t, const char* name = nullptr) {
  if (t == nullptr) detail::fail(name, "null DLTensor pointer");
  return view(*t, name);
}
/// The view of a (legacy, unversioned) DLManagedTensor's tensor. Ownership is untouched: the deleter stays
/// the caller's to call.
inline tensor_view view(const DLManagedTensor& m, const char* name = nullptr) { return view(m.dl_tensor, name); }
inline tensor_view view(const DLManagedTensor* m, const char* name = nullptr) {
  if (m == nullptr) detail::fail(name, "null DLManagedTensor pointer");
  return view(m->dl_tensor, name);
}
/// The view of a DLManagedTensorVersioned (or any struct of its layout).
template <class T, class = std::enable_if_t<detail::is_dlpack_versioned<T>::value>>
tensor_view view(const T& m, const char* name = nullptr) {
  return detail::dl_versioned_view(m, name);
}
template <class T, class = std::enable_if_t<detail::is_dlpack_versioned<T>::value>>
tensor_view view(const T* m, const char* name = nullptr) {
  if (m == nullptr) detail::fail(name, "null DLManagedTensorVersioned pointer");
  return detail::dl_versioned_view(*m, name);
}

}  // namespace dlpack

template <>
struct tensor_traits<DLTensor> {
  static tensor_view view(const DLTensor& t) { return dlpack::view(t); }
};
template <>
struct tensor_traits<DLManagedTensor> {
  static tensor_view view(const DLManagedTensor& m) { return dlpack::view(m); }
};
template <class T>
struct tensor_traits<T, std::enable_if_t<detail::is_dlpack_versioned<T>::value>> {
  static tensor_view view(const T& m) { return detail::dl_versioned_view(m, nullptr); }
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_ADAPTERS_DLPACK_HPP
