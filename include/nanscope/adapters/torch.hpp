// nanscope — adapters/torch.hpp: LibTorch tensors as tensors, and LibTorch modules run inside recorder scopes.
//
//   #include <nanscope/adapters/torch.hpp>
//   nanscope::check(t);                                    // any at::Tensor / torch::Tensor on the CPU
//   nanscope::check(nanscope::torch::view(t, "logits"));   // the same, named in error messages
//
//   nanscope::recorder rec;
//   at::Tensor y = nanscope::torch::call(rec, "fc1", fc1, x);   // one module (or any callable) in a scope
//   at::Tensor z = nanscope::torch::forward(rec, seq, x);       // every child of a Sequential in its own scope
//
// Tensors. CPU tensors of every dtype nanscope knows become host views: f64, f32, f16, bf16, int8/16/32/64,
// uint8, bool; float8_e4m3fn and float8_e5m2 with LibTorch >= 2.1; uint16/32/64 with LibTorch >= 2.3.
// Contiguous or not: sizes and strides (in elements, never negative in LibTorch) are copied as they are, and
// data_ptr() already includes the storage offset, so transposes, narrow/slice with steps, expand (stride 0)
// and views into the middle of a storage need no copy.
// Refused with nanscope::error (naming the tensor and the problem): undefined tensors, sparse/mkldnn layouts,
// nested, quantized, complex, meta tensors, tensors without storage, a lazy negation bit (resolve_neg()),
// devices other than the CPU, dtypes nanscope has no format for, rank > 8 (nanscope::max_rank).
//
// CUDA tensors. nanscope::torch::any_device_view() describes them as memory_space::cuda_device views (the
// CUDA index as device_id), which is what a CUDA backend consumes. The host path (torch::view, check, the
// recorder and the macros) refuses them with "... is on cuda:0; nanscope's CUDA backend (nanscope/cuda.cuh)
// is not compiled in" until a backend calls nanscope::detail::register_cuda_backend(); from then on they pass
// through as device views and are routed by whoever checks them.
//
// Names. tensor_traits<at::Tensor> has no name to give (nanscope::check(t, "name") attaches it after the
// conversion), so conversion errors of an unnamed tensor say '<unnamed>'; every message describes the tensor
// (dtype, shape, device). torch::view(t, "name") names it from the start; call() and forward() name every
// tensor after its module path and role ("encoder.fc1.weight", "encoder.fc1.input[0]").
//
// Raising. A scope's end cannot throw, so what the recorder learns there — the hf style's detection_error,
// abort_after_step's stop_requested — waits (recorder::raise_pending). The outermost call() / forward() of a
// recorder on its thread, the model's root call, raises it as it returns: where HuggingFace's forward hook of
// the root raises it. Nested calls leave it to the enclosing scope's next record.
//
// This header puts nanscope::torch next to ::torch: inside `using namespace nanscope;` write ::torch::nn.
#ifndef NANSCOPE_ADAPTERS_TORCH_HPP
#define NANSCOPE_ADAPTERS_TORCH_HPP

#include "../config.hpp"
#include "../dtype.hpp"
#include "../recorder.hpp"
#include "../traits.hpp"
#include "../view.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/Device.h>
#include <c10/core/Layout.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Type.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/version.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// LibTorch's version as major * 100 + minor (0 when <torch/version.h> does not say).
#if defined(TORCH_VERSION_MAJOR) && defined(TORCH_VERSION_MINOR)
#define NANSCOPE_IMPL_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)
#else
#define NANSCOPE_IMPL_TORCH_VERSION 0
#endif
// 1 when this LibTorch has float8_e4m3fn / float8_e5m2 (2.1) and uint16/32/64 (2.3) tensors.
#if NANSCOPE_IMPL_TORCH_VERSION >= 201
#define NANSCOPE_IMPL_TORCH_FLOAT8 1
#else
#define NANSCOPE_IMPL_TORCH_FLOAT8 0
#endif
#if NANSCOPE_IMPL_TORCH_VERSION >= 203
#define NANSCOPE_IMPL_TORCH_UNSIGNED 1
#else
#define NANSCOPE_IMPL_TORCH_UNSIGNED 0
#endif
#define NANSCOPE_TORCH_HAS_FLOAT8() NANSCOPE_IMPL_TORCH_FLOAT8
#define NANSCOPE_TORCH_HAS_UNSIGNED() NANSCOPE_IMPL_TORCH_UNSIGNED

NANSCOPE_NAMESPACE_BEGIN

// LibTorch's element types, so that containers of them (std::vector<at::Half>) are tensors too.
template <>
struct scalar_traits<c10::Half> {
  static constexpr dtype value = dtype::f16;
};
template <>
struct scalar_traits<c10::BFloat16> {
  static constexpr dtype value = dtype::bf16;
};
#if NANSCOPE_IMPL_TORCH_FLOAT8
template <>
struct scalar_traits<c10::Float8_e4m3fn> {
  static constexpr dtype value = dtype::f8_e4m3fn;
};
template <>
struct scalar_traits<c10::Float8_e5m2> {
  static constexpr dtype value = dtype::f8_e5m2;
};
#endif

namespace detail {

/// Set once a CUDA backend that can check device memory is linked in (nanscope/cuda.cuh will call
/// register_cuda_backend() from an inline variable's initialiser). Until then the host path refuses CUDA
/// tensors with a message that says so. A run-time flag rather than a macro: translation units that include
/// the backend and ones that do not must agree on every inline function (ODR).
inline std::atomic<bool>& cuda_backend_flag() {
  static std::atomic<bool> registered{false};
  return registered;
}
inline bool cuda_backend_registered() { return cuda_backend_flag().load(std::memory_order_acquire); }
inline bool register_cuda_backend() {
  cuda_backend_flag().store(true, std::memory_order_release);
  return true;
}

/// The nanscope dtype of a LibTorch scalar type; false for types nanscope has no format for.
inline bool torch_to_dtype(c10::ScalarType s, dtype& out) {
  switch (s) {
    case c10::ScalarType::Double: out = dtype::f64; return true;
    case c10::ScalarType::Float: out = dtype::f32; return true;
    case c10::ScalarType::Half: out = dtype::f16; return true;
    case c10::ScalarType::BFloat16: out = dtype::bf16; return true;
    case c10::ScalarType::Char: out = dtype::i8; return true;
    case c10::ScalarType::Short: out = dtype::i16; return true;
    case c10::ScalarType::Int: out = dtype::i32; return true;
    case c10::ScalarType::Long: out = dtype::i64; return true;
    case c10::ScalarType::Byte: out = dtype::u8; return true;
    case c10::ScalarType::Bool: out = dtype::boolean; return true;
#if NANSCOPE_IMPL_TORCH_FLOAT8
    case c10::ScalarType::Float8_e4m3fn: out = dtype::f8_e4m3fn; return true;
    case c10::ScalarType::Float8_e5m2: out = dtype::f8_e5m2; return true;
#endif
#if NANSCOPE_IMPL_TORCH_UNSIGNED
    case c10::ScalarType::UInt16: out = dtype::u16; return true;
    case c10::ScalarType::UInt32: out = dtype::u32; return true;
    case c10::ScalarType::UInt64: out = dtype::u64; return true;
#endif
    default: return false;
  }
}

/// "at::Tensor Float[2, 3] on cpu": the tensor as the error messages describe it.
inline std::string torch_describe(const at::TensorBase& t, bool with_device = true) {
  std::string s = "at::Tensor ";
  s += c10::toString(t.scalar_type());
  s += '[';
  const auto sizes = t.sizes();
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(sizes[i]);
  }
  s += ']';
  if (with_device) s += " on " + t.device().str();
  return s;
}

/// The view, or a nanscope::error. `accept_device`: CUDA tensors become cuda_device views instead of an error.
inline tensor_view torch_view(const at::TensorBase& t, const char* name, bool accept_device) {
  if (!t.defined())
    fail(name, "undefined at::Tensor (default-constructed, moved-from or an absent optional): there is no data "
               "to check");
  if (t.is_nested())
    fail(name, torch_describe(t) + " is a nested tensor: check its components (t.unbind()) one by one");
  if (t.layout() != c10::kStrided) {
    std::ostringstream layout;
    layout << t.layout();
    fail(name, torch_describe(t) + " has layout " + layout.str() +
                   ": only strided (dense) tensors can be checked; pass t.to_dense()");
  }
  if (t.is_quantized())
    fail(name, torch_describe(t) + " is quantized: check t.dequantize() (its values) or t.int_repr() (the "
                                   "stored integers)");
  if (t.is_meta()) fail(name, torch_describe(t) + " is a meta tensor: it has a shape and a dtype but no data");
  tensor_view v;
  v.name = name;
  if (t.is_cpu()) {
    v.space = memory_space::host;
  } else if (t.is_cuda()) {
    if (!accept_device)
      fail(name, torch_describe(t, false) + " is on " + t.device().str() +
                     "; nanscope's CUDA backend (nanscope/cuda.cuh) is not compiled in. Check t.cpu() on the host");
    v.space = memory_space::cuda_device;
    v.device_id = t.device().has_index() ? static_cast<int>(t.device().index()) : 0;
  } else {
    fail(name, torch_describe(t, false) + " is on " + t.device().str() +
                   "; nanscope reads CPU tensors (and CUDA tensors with its CUDA backend): pass t.cpu()");
  }
  if (t.is_complex())
    fail(name, torch_describe(t) + " is complex: check at::view_as_real(t), whose last dimension holds the "
                                   "real and imaginary parts");
  if (!torch_to_dtype(t.scalar_type(), v.type))
    fail(name, torch_describe(t) + " has dtype " + c10::toString(t.scalar_type()) + ", which nanscope cannot read");
  if (t.is_neg())
    fail(name, torch_describe(t) + " has its negative bit set (a lazy negation, e.g. x.conj().imag()): its "
                                   "values are the negated storage; pass t.resolve_neg()");
  if (!t.has_storage())
    fail(name, torch_describe(t) + " has no storage (a wrapper or functional tensor): there is no memory to read");
  const auto rank = t.dim();
  if (rank > max_rank)
    fail(name, torch_describe(t) + " has rank " + std::to_string(rank) + "; nanscope views have at most " +
                   std::to_string(max_rank) + " dimensions: reshape or flatten it first");
  v.rank = static_cast<int>(rank);
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  for (int i = 0; i < v.rank; ++i) {
    v.shape[i] = sizes[static_cast<std::size_t>(i)];
    v.strides[i] = strides[static_cast<std::size_t>(i)];
  }
  v.data = t.data_ptr();  // includes the storage offset; null only for an empty storage
  // Any alignment is fine (a misaligned from_blob): the kernels read unaligned data (docs/concepts.md).
  validate(v);
  return v;
}

}  // namespace detail

namespace torch {

/// The host view of a LibTorch tensor (at::Tensor, torch::Tensor, at::TensorBase). Throws nanscope::error for
/// anything nanscope cannot read on the host, CUDA tensors included (see any_device_view). `name` (which must
/// outlive the view) appears in error messages.
inline tensor_view view(const at::TensorBase& t, const char* name = nullptr) {
  return detail::torch_view(t, name, detail::cuda_backend_registered());
}

/// Like view(), but CUDA tensors become memory_space::cuda_device views (device_id: the CUDA index) whether
/// or not a CUDA backend is compiled in: for code that hands device views to a CUDA backend itself.
inline tensor_view any_device_view(const at::TensorBase& t, const char* name = nullptr) {
  return detail::torch_view(t, name, true);
}

}  // namespace torch

/// at::Tensor, torch::Tensor (the same type), at::TensorBase and classes derived from them.
template <class T>
struct tensor_traits<T, std::enable_if_t<std::is_base_of<at::TensorBase, T>::value>> {
  static tensor_view view(const T& t) { return ::nanscope::torch::view(t); }
};

// ---------------------------------------------------------------------------------------------------------
// Modules inside recorder scopes
// ---------------------------------------------------------------------------------------------------------

namespace torch {

/// What call() and forward() record besides the inputs and outputs.
struct call_options {
  /// Record the module's own parameters (named_parameters(/*recurse=*/false): "weight", "bias") before its
  /// inputs, as HuggingFace's DebugUnderflowOverflow does. Undefined parameters (Linear without bias) are
  /// skipped.
  bool parameters = true;
  /// forward(): run a child that is itself a Sequential child by child, each in its own scope, instead of
  /// calling its forward(). LibTorch cannot hold a plain Sequential inside another, so such a child is always
  /// a subclass with a forward() of its own: turn this on only when that forward() just chains the children.
  bool descend_sequentials = false;

  call_options& with_parameters(bool on) {
    parameters = on;
    return *this;
  }
  call_options& with_descend_sequentials(bool on) {
    descend_sequentials = on;
    return *this;
  }
};

}  // namespace torch

namespace detail {

/// The class name a report shows for a module: LibTorch's name() is the demangled C++ type of the
/// implementation ("torch::nn::LinearImpl"); the namespace and the "Impl" suffix of the pimpl idiom are
/// dropped ("Linear"). A name set explicitly through Module("MyName") is kept as it is, namespace-free.
inline std::string torch_class_name(const std::string& type_name) {
  std::size_t end = type_name.find('<');
  if (end == std::string::npos) end = type_name.size();
  const std::size_t colon = type_name.rfind("::", end);
  std::string s = colon == std::string::npos ? type_name : type_name.substr(colon + 2);
  const std::string impl = "Impl";
  const std::size_t base = s.find('<') == std::string::npos ? s.size() : s.find('<');
  if (base > impl.size() && s.compare(base - impl.size(), impl.size(), impl) == 0) s.erase(base - impl.size(), impl.size());
  return s;
}

template <class T, class = void>
struct torch_is_holder : std::false_type {};
template <class T>
struct torch_is_holder<T, void_t<typename T::ContainedType>>
    : std::is_base_of<::torch::nn::Module, typename T::ContainedType> {};

template <class T>
struct torch_is_module_ptr : std::false_type {};
template <class M>
struct torch_is_module_ptr<std::shared_ptr<M>> : std::is_base_of<::torch::nn::Module, M> {};

template <class T>
struct torch_is_module_rawptr : std::false_type {};
template <class M>
struct torch_is_module_rawptr<M*> : std::is_base_of<::torch::nn::Module, std::remove_cv_t<M>> {};

template <class T>
using torch_is_module_object = std::is_base_of<::torch::nn::Module, T>;

/// The module behind a callable (a ModuleHolder such as torch::nn::Linear, a shared_ptr or a plain pointer to a
/// module, or a module object), or null for any other callable.
template <class F>
const ::torch::nn::Module* torch_module_of(const F& f) {
  using D = std::decay_t<F>;
  if constexpr (torch_is_holder<D>::value) {
    return f.is_empty() ? nullptr : f.ptr().get();
  } else if constexpr (torch_is_module_ptr<D>::value) {
    return f.get();
  } else if constexpr (torch_is_module_rawptr<D>::value) {
    return f;
  } else if constexpr (torch_is_module_object<D>::value) {
    return &f;
  } else {
    return nullptr;
  }
}

/// Calls a module's forward() (through the holder's pointer, as its operator() does, so that a const holder
/// works too), or invokes a callable.
template <class F, class... Args>
decltype(auto) torch_invoke(F&& f, Args&&... args) {
  using D = std::decay_t<F>;
  if constexpr (torch_is_holder<D>::value) {
    return f.ptr()->forward(std::forward<Args>(args)...);
  } else if constexpr (torch_is_module_ptr<D>::value || torch_is_module_rawptr<D>::value) {
    return f->forward(std::forward<Args>(args)...);
  } else if constexpr (torch_is_module_object<D>::value) {
    return f.forward(std::forward<Args>(args)...);
  } else {
    return std::invoke(std::forward<F>(f), std::forward<Args>(args)...);
  }
}

/// Hands the recorder torch's own mean and std of a floating tensor (at::mean / at::std, unbiased, in the
/// tensor's dtype: the same reduction, in the same order, as `tensor.mean()` in Python), so that the layer tree
/// prints exactly torch's digits. A one-element std is NaN, as torch's (computed here without torch's warning).
/// If torch cannot reduce the tensor, nothing is offered and the tree uses nanscope's own statistics.
inline void torch_offer_stats(const at::TensorBase& base, const tensor_view& v) {
  if (v.data == nullptr) return;
  if (v.type != dtype::f32 && v.type != dtype::f16 && v.type != dtype::bf16 && v.type != dtype::f64) return;
  const std::int64_t n = base.numel();
  if (n == 0) return;
  const at::Tensor t(base);
  at::NoGradGuard no_grad;
  double mean = 0.0, sd = std::numeric_limits<double>::quiet_NaN();
#if NANSCOPE_IMPL_EXCEPTIONS
  try {
#endif
    mean = t.mean().item<double>();
    if (n > 1) sd = t.std().item<double>();
#if NANSCOPE_IMPL_EXCEPTIONS
  } catch (const std::exception&) {
    return;
  }
#endif
  offer_reference_stats(v.data, mean, sd);
}

/// Records tensors into a scope under names that say where they come from ("fc1.input[0]"): the view is
/// converted (and any problem reported) with that name, then recorded without it (the recorder's frames
/// outlive this object).
class torch_recording {
 public:
  explicit torch_recording(scope& s) : s_(s) {
    want_stats_ = s.owner().listeners_want_reference_stats();
  }

  tensor_view named_view(const at::TensorBase& t, const std::string& what) {
    label_ = s_.module_path();
    if (!label_.empty()) label_ += '.';
    label_ += what;
    tensor_view v = ::nanscope::torch::view(t, label_.c_str());
    v.name = nullptr;
    if (want_stats_) torch_offer_stats(t, v);
    return v;
  }

  void parameters(const ::torch::nn::Module& m) {
    for (const auto& p : m.named_parameters(/*recurse=*/false)) {
      if (!p.value().defined()) continue;
      s_.parameter(named_view(p.value(), p.key()), p.key());
    }
  }

  // Inputs: tensors are recorded (undefined ones as None, LibTorch's convention for an absent tensor);
  // optionals as the tensor or None; vectors of tensors element by element; anything else as "not a tensor".
  void input(const at::Tensor& t) {
    if (!t.defined()) {
      s_.non_tensor_input(true);
    } else {
      s_.input(named_view(t, "input[" + std::to_string(inputs_) + "]"));
    }
    ++inputs_;
  }
  void input(const c10::optional<at::Tensor>& t) {
    if (t.has_value()) {
      input(*t);
    } else {
      s_.non_tensor_input(true);
      ++inputs_;
    }
  }
  void input(const std::vector<at::Tensor>& ts) {
    for (const auto& t : ts) input(t);
  }
  void input(c10::ArrayRef<at::Tensor> ts) {
    for (const auto& t : ts) input(t);
  }
  void input(::torch::nn::AnyValue& value) {  // try_get is not const
    if (const at::Tensor* t = value.try_get<at::Tensor>()) {
      input(*t);
    } else {
      s_.non_tensor_input();
      ++inputs_;
    }
  }
  template <class T>
  void input(const T&) {
    s_.non_tensor_input();
    ++inputs_;
  }

  // Outputs: a tensor is "output"; tuples, pairs and vectors give "output[i]" for their tensor elements.
  void output(const at::Tensor& t) {
    if (t.defined()) s_.output(named_view(t, "output"));
  }
  void output_at(const at::Tensor& t, int i) {
    if (t.defined()) s_.output(named_view(t, "output[" + std::to_string(i) + "]"), i);
  }
  void output(const c10::optional<at::Tensor>& t) {
    if (t.has_value()) output(*t);
  }
  void output(const std::vector<at::Tensor>& ts) {
    int i = 0;
    for (const auto& t : ts) output_at(t, i++);
  }
  template <class... Ts>
  void output(const std::tuple<Ts...>& tuple) {
    output_tuple(tuple, std::index_sequence_for<Ts...>{});
  }
  template <class A, class B>
  void output(const std::pair<A, B>& pair) {
    output_element(pair.first, 0);
    output_element(pair.second, 1);
  }
  void output(::torch::nn::AnyValue& value) {
    if (const at::Tensor* t = value.try_get<at::Tensor>()) output(*t);
  }
  template <class T>
  void output(const T&) {}  // not a tensor: nothing to check

 private:
  template <class Tuple, std::size_t... I>
  void output_tuple(const Tuple& tuple, std::index_sequence<I...>) {
    (output_element(std::get<I>(tuple), static_cast<int>(I)), ...);
  }
  template <class T>
  void output_element(const T& x, int i) {
    if constexpr (std::is_base_of<at::TensorBase, T>::value) output_at(x, i);
  }

  scope& s_;
  std::string label_;
  int inputs_ = 0;
  bool want_stats_ = false;
};

inline ::torch::nn::AnyValue torch_run_sequential(recorder& rec, ::torch::nn::SequentialImpl& seq,
                                                  ::torch::nn::AnyValue value, const ::nanscope::torch::call_options& o,
                                                  const std::string& seq_path) {
  const auto children = seq.named_children();
  if (children.size() != seq.size())
    fail(seq_path.c_str(), "this Sequential has " + std::to_string(seq.size()) + " modules but " +
                               std::to_string(children.size()) + " registered children: their names are unknown");
  std::size_t i = 0;
  for (auto it = seq.begin(); it != seq.end(); ++it, ++i) {
    const std::shared_ptr<::torch::nn::Module> child = it->ptr();
    scope s(rec, children[i].key(), torch_class_name(child->name()));
    torch_recording r(s);
    if (o.parameters) r.parameters(*child);
    r.input(value);
    auto nested = std::dynamic_pointer_cast<::torch::nn::SequentialImpl>(child);
    if (nested != nullptr && o.descend_sequentials) {
      value = torch_run_sequential(rec, *nested, std::move(value), o, s.module_path());
    } else {
      value = it->any_forward(std::move(value));
    }
    r.output(value);
  }
  return value;
}

/// The body of a module call inside its open scope `s`: parameters, inputs, the call, its outputs.
template <class F, class... Args>
decltype(auto) torch_call_in(scope& s, const ::nanscope::torch::call_options& opts, const ::torch::nn::Module* m,
                             F&& fn, Args&&... args) {
  torch_recording r(s);
  if (m != nullptr && opts.parameters) r.parameters(*m);
  (r.input(args), ...);
  using result = decltype(torch_invoke(std::forward<F>(fn), std::forward<Args>(args)...));
  if constexpr (std::is_void<result>::value) {
    torch_invoke(std::forward<F>(fn), std::forward<Args>(args)...);
  } else {
    decltype(auto) out = torch_invoke(std::forward<F>(fn), std::forward<Args>(args)...);
    r.output(out);
    return out;
  }
}

/// Runs `body`, which opens and ends one scope of `rec`, and returns what it returns; when that scope was the
/// outermost of `rec` on this thread (the model's root call), raises afterwards what its end left pending
/// (recorder::raise_pending): the hf style's detection_error of a call that completed (the root's own frame
/// included) and abort_after_step's stop_requested. HuggingFace raises both inside the root module's forward
/// hook, so the root's call never returns normally; a scope's destructor cannot throw, but this return can.
/// Nested calls leave what is pending to the enclosing scope (its next record raises it), as scopes do.
template <class Body>
decltype(auto) torch_outermost_call(recorder& rec, Body&& body) {
  const bool outermost = current_scope(rec) == nullptr;
  using result = decltype(std::forward<Body>(body)());
  if constexpr (std::is_void<result>::value) {
    std::forward<Body>(body)();
    if (outermost) rec.raise_pending();
  } else if constexpr (std::is_reference<result>::value) {
    result r = std::forward<Body>(body)();
    if (outermost) rec.raise_pending();
    return static_cast<result>(r);
  } else {
    result r = std::forward<Body>(body)();
    if (outermost) rec.raise_pending();
    return r;
  }
}

}  // namespace detail

namespace torch {

/// Runs `fn(args...)` inside a recorder scope named `name` and returns what it returns. `fn` is a module —
/// a holder such as torch::nn::Linear or your TORCH_MODULE, a std::shared_ptr to a module, or a module
/// object, whose forward() is called — or any other callable (class name "callable"). Recorded: the module's
/// own parameters (call_options::parameters), every argument (tensors; vectors and optionals of tensors;
/// anything else as "not a tensor"), then the result (a tensor, or the tensors of a tuple / pair / vector as
/// output[i]). Detection follows the recorder's policy: with throw_exception a NaN in an input throws before
/// the module runs, one in the output after it ran. The outermost call of a recorder on its thread (the model's
/// root) raises, as it returns, what the end of its scope left pending (recorder::raise_pending): the hf
/// style's detection_error of a call that completed — the root's own output included — and abort_after_step's
/// stop_requested, where HuggingFace raises them, in the root's call.
template <class F, class... Args>
decltype(auto) call(recorder& rec, const call_options& opts, std::string_view name, F&& fn, Args&&... args) {
  return detail::torch_outermost_call(rec, [&]() -> decltype(auto) {
    const ::torch::nn::Module* m = detail::torch_module_of(fn);
    scope s(rec, name, m != nullptr ? detail::torch_class_name(m->name()) : std::string("callable"));
    return detail::torch_call_in(s, opts, m, std::forward<F>(fn), std::forward<Args>(args)...);
  });
}
template <class F, class... Args>
decltype(auto) call(recorder& rec, std::string_view name, F&& fn, Args&&... args) {
  return ::nanscope::torch::call(rec, call_options{}, name, std::forward<F>(fn), std::forward<Args>(args)...);
}
/// The same with nanscope::default_recorder() (the macros' recorder).
template <class F, class... Args>
decltype(auto) call(std::string_view name, F&& fn, Args&&... args) {
  return ::nanscope::torch::call(default_recorder(), call_options{}, name, std::forward<F>(fn),
                                 std::forward<Args>(args)...);
}

/// Runs a Sequential the way its forward() does, each child in its own scope named by its registered name
/// ("0", "1", ... or the names given to the Sequential), under a scope `name` for the Sequential itself
/// (empty: the enclosing scope's path, or the root). A child that is a Sequential subclass is called as one
/// module unless call_options::descend_sequentials. Children may pass non-tensor values along; the last must
/// return a tensor. As the outermost scope of `rec` on this thread it raises what its end left pending, as call().
inline at::Tensor forward(recorder& rec, const ::torch::nn::Sequential& seq, const at::Tensor& x,
                          std::string_view name = {}, const call_options& opts = {}) {
  return detail::torch_outermost_call(rec, [&]() -> at::Tensor {
    scope s(rec, name, detail::torch_class_name(seq->name()));
    detail::torch_recording r(s);
    r.input(x);
    ::torch::nn::AnyValue value =
        detail::torch_run_sequential(rec, *seq.ptr(), ::torch::nn::AnyValue(x), opts, s.module_path());
    const at::Tensor* out = value.try_get<at::Tensor>();
    if (out == nullptr)
      detail::fail(s.module_path().c_str(), std::string("the Sequential's last module returned a ") +
                                                c10::demangle(value.type_info().name()) + ", not an at::Tensor");
    r.output(*out);
    return *out;
  });
}
/// The same with nanscope::default_recorder().
inline at::Tensor forward(const ::torch::nn::Sequential& seq, const at::Tensor& x, std::string_view name = {},
                          const call_options& opts = {}) {
  return ::nanscope::torch::forward(default_recorder(), seq, x, name, opts);
}

}  // namespace torch

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_ADAPTERS_TORCH_HPP
