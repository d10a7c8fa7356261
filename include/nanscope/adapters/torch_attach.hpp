// nanscope — adapters/torch_attach.hpp: LibTorch modules named by the model itself (paths from named_modules(),
// classes from name()), so that a call site needs no hand-typed name.
//
//   nanscope::torch::attach(*model, rec);        // once, on the root module (holder, shared_ptr or object)
//   at::Tensor y = nanscope::torch::run(*model, x);   // the pass: the root's scope ("" / "Net")
//   // inside Net::forward, and in every module below it:
//   x = NANSCOPE_TORCH_CALL(fc1, x);             // = nanscope::torch::run(fc1, x) with the call site's location
//
// attach() walks root.named_modules() once and remembers, keyed by each module's address, its path as
// HuggingFace writes it ("" for the root, "encoder.layers.0.fc1" below; a module reachable twice keeps its
// first path, as Python's named_modules() does), its class (name() without namespace and "Impl": "Linear",
// "ModuleList", "Net") and the recorder. run(module, args...) looks the module up, opens its scope, records its
// own parameters (named_parameters(recurse=false) order, unless call_options::parameters is off), its inputs,
// calls forward(args...) and records the outputs — what torch::call() does, minus the name.
//
// Nesting. A scope's path is its module's attached path, made relative to the innermost open scope of the same
// recorder when that scope's path is an ancestor of it, so a child called from its parent's forward() nests
// under the parent's scope with nothing routed through a helper. A module whose parent did not open a scope
// (the parent's forward() called directly) still gets its full path, under the nearest open ancestor; a
// module run outside every attached ancestor (say inside a scope "model" of your own) nests under that scope.
//
// Raising. A scope's end cannot throw, so the hf style's detection_error and abort_after_step's stop_requested
// wait in the recorder (recorder::raise_pending); the outermost run() of a recorder on its thread (the root's,
// where HuggingFace's hook raises them) raises them as it returns, as torch::call() and torch::forward() do.
//
// Errors (nanscope::error): running a module that no attach() reached — the message names its class and says
// to attach the root that contains it; an empty holder. Entries of destroyed modules are never used for a new
// module at the same address (modules owned by a shared_ptr are checked through a weak_ptr); a root that is a
// plain object (not owned by a shared_ptr) should be detach()ed before it is destroyed.
//
// NANSCOPE_CONFIG_LEVEL 0 turns NANSCOPE_TORCH_CALL(m, args...) into a plain m->forward(args...).
#ifndef NANSCOPE_ADAPTERS_TORCH_ATTACH_HPP
#define NANSCOPE_ADAPTERS_TORCH_ATTACH_HPP

#include "torch.hpp"

#include <cstddef>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

NANSCOPE_NAMESPACE_BEGIN

namespace detail {

/// What attach() learnt about one module.
struct torch_attached {
  std::string path;        ///< "" for the root, "encoder.fc1" below
  std::string class_name;  ///< "Linear"
  recorder* rec = nullptr;
  ::nanscope::torch::call_options opts;
  bool owned = false;  ///< owned by a shared_ptr: `alive` tells whether it still exists
  std::weak_ptr<const ::torch::nn::Module> alive;
};

struct torch_attach_registry {
  std::mutex m;
  std::unordered_map<const ::torch::nn::Module*, torch_attached> modules;
};
inline torch_attach_registry& torch_registry() {
  static torch_attach_registry r;
  return r;
}

inline std::string torch_pointer_text(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

[[noreturn]] inline void torch_attach_fail(const std::string& problem) {
  NANSCOPE_IMPL_THROW(::nanscope::error("nanscope::torch: " + problem));
#if !NANSCOPE_IMPL_EXCEPTIONS
  std::abort();
#endif
}

template <class M>
const ::torch::nn::Module& torch_module_required(const M& m, const char* what) {
  static_assert(torch_is_holder<std::decay_t<M>>::value || torch_is_module_ptr<std::decay_t<M>>::value ||
                    torch_is_module_rawptr<std::decay_t<M>>::value || torch_is_module_object<std::decay_t<M>>::value,
                "nanscope::torch::attach/run take a module: a holder (torch::nn::Linear, a TORCH_MODULE), a "
                "std::shared_ptr or pointer to a module, or a module object");
  const ::torch::nn::Module* p = torch_module_of(m);
  if (p == nullptr)
    torch_attach_fail(std::string(what) + ": the module is empty (a default-constructed holder, a null pointer or "
                                          "nullptr): it has no forward() to run");
  return *p;
}

/// The module's entry, copied; a nanscope::error when attach() never reached it (or it was destroyed since).
inline torch_attached torch_lookup(const ::torch::nn::Module& m) {
  torch_attach_registry& reg = torch_registry();
  std::lock_guard<std::mutex> lk(reg.m);
  auto it = reg.modules.find(&m);
  if (it != reg.modules.end() && it->second.owned && it->second.alive.expired()) {
    reg.modules.erase(it);  // a destroyed module's entry, now another module's address
    it = reg.modules.end();
  }
  if (it == reg.modules.end())
    torch_attach_fail("run(): module " + torch_class_name(m.name()) + " (" + m.name() + " at " +
                      torch_pointer_text(&m) +
                      ") is not attached: call nanscope::torch::attach(root, recorder) on the model that contains "
                      "it (after registering it as a submodule) before running it");
  return it->second;
}

/// A plain torch::nn::Sequential (holder or shared_ptr), whose children run() gives scopes of their own.
template <class T>
struct torch_is_plain_sequential : std::false_type {};
template <>
struct torch_is_plain_sequential<::torch::nn::Sequential> : std::true_type {};
template <>
struct torch_is_plain_sequential<std::shared_ptr<::torch::nn::SequentialImpl>> : std::true_type {};

/// The scope name for a module at `path`, relative to the innermost open scope of `rec` (see the file comment).
inline std::string torch_relative_name(recorder& rec, const std::string& path) {
  const scope* p = current_scope(rec);
  if (p == nullptr) return path;
  const std::string& pp = p->module_path();
  if (pp.empty() || path.empty()) return path;
  if (path == pp) return {};
  if (path.size() > pp.size() && path.compare(0, pp.size(), pp) == 0 && path[pp.size()] == '.')
    return path.substr(pp.size() + 1);
  return path;
}

}  // namespace detail

namespace torch {

/// Remembers the path and class of `root` and of every module below it (named_modules()), bound to `rec`, so
/// that run() / NANSCOPE_TORCH_CALL can open their scopes. `root`: a holder (torch::nn::Sequential, your
/// TORCH_MODULE), a shared_ptr or pointer to a module, or a module object. Attaching again (after adding
/// modules, or to another recorder) replaces the entries. Returns the number of modules attached (root
/// included).
template <class M>
std::size_t attach(const M& root, recorder& rec, const call_options& opts = {}) {
  const ::torch::nn::Module& r = detail::torch_module_required(root, "attach()");
  detail::torch_attach_registry& reg = detail::torch_registry();
  std::unordered_set<const ::torch::nn::Module*> seen;
  auto add = [&](const ::torch::nn::Module* m, std::string path) {
    if (!seen.insert(m).second) return;  // reachable twice: the first path, as Python's named_modules()
    detail::torch_attached a;
    a.path = std::move(path);
    a.class_name = detail::torch_class_name(m->name());
    a.rec = &rec;
    a.opts = opts;
    a.alive = m->weak_from_this();
    a.owned = !a.alive.expired();
    reg.modules[m] = std::move(a);
  };
  // named_modules(include_self=true) needs a root owned by a shared_ptr: the root is added by hand.
  const auto below = r.named_modules(std::string(), /*include_self=*/false);
  std::lock_guard<std::mutex> lk(reg.m);
  add(&r, std::string());
  for (const auto& item : below) add(item.value().get(), item.key());
  return seen.size();
}
/// The same with nanscope::default_recorder() (the macros' recorder).
template <class M>
std::size_t attach(const M& root, const call_options& opts = {}) {
  return ::nanscope::torch::attach(root, default_recorder(), opts);
}

/// Forgets `root` and every module below it. Returns the number of entries removed.
template <class M>
std::size_t detach(const M& root) {
  const ::torch::nn::Module& r = detail::torch_module_required(root, "detach()");
  const auto below = r.named_modules(std::string(), /*include_self=*/false);
  detail::torch_attach_registry& reg = detail::torch_registry();
  std::lock_guard<std::mutex> lk(reg.m);
  std::size_t n = reg.modules.erase(&r);
  for (const auto& item : below) n += reg.modules.erase(item.value().get());
  return n;
}

/// Whether run() would find `m` (attached and not destroyed since).
template <class M>
bool attached(const M& m) {
  const ::torch::nn::Module* p = detail::torch_module_of(m);
  if (p == nullptr) return false;
  detail::torch_attach_registry& reg = detail::torch_registry();
  std::lock_guard<std::mutex> lk(reg.m);
  const auto it = reg.modules.find(p);
  return it != reg.modules.end() && !(it->second.owned && it->second.alive.expired());
}

/// The attached path of `m` ("" for the root) and its class, as run() names its scope; throws when not attached.
template <class M>
std::pair<std::string, std::string> attached_name(const M& m) {
  const detail::torch_attached a = detail::torch_lookup(detail::torch_module_required(m, "attached_name()"));
  return {a.path, a.class_name};
}

/// Runs an attached module's forward(args...) in its own scope (see the file comment) and returns its result.
/// A plain Sequential (a torch::nn::Sequential holder or shared_ptr<SequentialImpl>) given one tensor runs child
/// by child, each child in its own scope, as torch::forward() does (HuggingFace's hooks see every child too).
/// The outermost run of a recorder on its thread (the root's) raises, as it returns, what the end of its scope
/// left pending, as torch::call() does: HuggingFace raises in the root's forward hook.
template <class M, class... Args>
decltype(auto) run_at(source_location where, M&& module, Args&&... args) {
  const detail::torch_attached a = detail::torch_lookup(detail::torch_module_required(module, "run()"));
  using D = std::decay_t<M>;
  if constexpr (detail::torch_is_plain_sequential<D>::value && sizeof...(Args) == 1 &&
                (std::is_base_of<at::TensorBase, std::decay_t<Args>>::value && ...)) {
    const ::torch::nn::Sequential seq(module);
    return ::nanscope::torch::forward(*a.rec, seq, args..., detail::torch_relative_name(*a.rec, a.path), a.opts);
  } else {
    return detail::torch_outermost_call(*a.rec, [&]() -> decltype(auto) {
      scope s(*a.rec, detail::torch_relative_name(*a.rec, a.path), a.class_name, where);
      const ::torch::nn::Module* m = detail::torch_module_of(module);
      return detail::torch_call_in(s, a.opts, m, std::forward<M>(module), std::forward<Args>(args)...);
    });
  }
}
template <class M, class... Args>
decltype(auto) run(M&& module, Args&&... args) {
  return ::nanscope::torch::run_at(source_location{}, std::forward<M>(module), std::forward<Args>(args)...);
}

}  // namespace torch

NANSCOPE_NAMESPACE_END

#if !defined(NANSCOPE_CONFIG_LEVEL) || NANSCOPE_CONFIG_LEVEL > 0
/// Runs an attached module in its scope: NANSCOPE_TORCH_CALL(fc1, x) is nanscope::torch::run(fc1, x), with the
/// call site as the scope's source location.
#define NANSCOPE_TORCH_CALL(...)                                                                          \
  ::nanscope::torch::run_at(::nanscope::source_location{__FILE__, __LINE__, static_cast<const char*>(__func__)}, \
                            __VA_ARGS__)
#else
#define NANSCOPE_TORCH_CALL(...) ::nanscope::detail::torch_invoke(__VA_ARGS__)
#endif

#endif  // NANSCOPE_ADAPTERS_TORCH_ATTACH_HPP
