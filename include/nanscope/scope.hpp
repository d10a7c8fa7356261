// nanscope — scope.hpp: module scopes: a scope names one module call on its thread, nests into the enclosing
// scope's path, records the call's tensors into its frame and hands the frame to the recorder when it ends.
#ifndef NANSCOPE_SCOPE_HPP
#define NANSCOPE_SCOPE_HPP

#include "config.hpp"
#include "frame.hpp"
#include "recorder.hpp"
#include "view.hpp"

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

NANSCOPE_NAMESPACE_BEGIN

namespace detail {
/// The innermost active scope of this thread (any recorder); scopes link to their enclosing one. A scope
/// unlinks itself when it ends, also when it ends out of order (see ~scope).
inline scope*& thread_top_scope() {
  thread_local scope* top = nullptr;
  return top;
}
}  // namespace detail

/// RAII module scope: names a module (path components nest with '.'), collects its tensors, and hands the
/// completed frame to the recorder when it ends. One scope per module call; not movable.
class scope {
 public:
  scope(recorder& r, std::string_view name, std::string_view class_name, source_location where = {})
      : rec_((r.raise_pending_stop(), r)), parent_(detail::thread_top_scope()), where_(where) {
    const scope* p = parent_;
    while (p != nullptr && &p->rec_ != &r) p = p->parent_;
    same_parent_ = p;
    if (!r.enabled()) {  // checking is off: count the step, nothing else
      inert_ = true;
      detail::thread_top_scope() = this;
      return;
    }
    if (p != nullptr && !p->frame_.module_path.empty() && !name.empty()) {
      frame_.module_path.reserve(p->frame_.module_path.size() + 1 + name.size());
      frame_.module_path = p->frame_.module_path;
      frame_.module_path += '.';
      frame_.module_path.append(name.data(), name.size());
    } else if (p != nullptr && name.empty()) {
      frame_.module_path = p->frame_.module_path;  // an unnamed sub-scope stays at its parent's path
    } else {
      frame_.module_path.assign(name.data(), name.size());
    }
    frame_.where = where;
    frame_.class_name.assign(class_name.data(), class_name.size());
    frame_.step = r.step();
    frame_.serial = detail::next_frame_serial();
    frame_.recorder = r.id();
    detail::thread_top_scope() = this;
    r.notify([&](scope_listener& l) { l.scope_opened(frame_, same_parent_ == nullptr); });
  }
  scope(std::string_view name, std::string_view class_name, source_location where = {})
      : scope(default_recorder(), name, class_name, where) {}
  scope(const scope&) = delete;
  scope& operator=(const scope&) = delete;
  /// Ends the module call. Scopes must end in the reverse order of their creation, on the thread that created
  /// them (automatic variables always do). A heap-allocated scope ended while scopes opened inside it are still
  /// alive is unlinked from the thread's chain (those scopes now nest in its enclosing scope), and the misuse is
  /// printed to the recorder's sink; a scope ended on another thread than its own is reported and aborts the
  /// process (the owning thread's chain cannot be repaired from here), never a use of freed memory.
  ~scope() {
    scope*& top = detail::thread_top_scope();
    if (top == this) {
      top = parent_;
    } else {
      unlink_out_of_order(top);
    }
    if (inert_) {  // opened while checking was off: only the step advances
      if (same_parent_ == nullptr) rec_.complete_inert();
      return;
    }
    rec_.notify([&](scope_listener& l) { l.scope_closed(frame_, same_parent_ == nullptr); });
    frame_.complete = true;
    rec_.complete(std::move(frame_), same_parent_ == nullptr);
  }

  /// Records the module's next positional input (`input[k]`).
  template <class T>
  health_result input(const T& x, source_location where = {}) {
    return rec_.record(frame_, tensor_role::input, "input[" + std::to_string(inputs_++) + "]", to_view(x), where,
                       allow::none);
  }
  /// Records a named input (a keyword argument): the context is its name.
  template <class T>
  health_result input(const T& x, std::string_view name, source_location where = {}) {
    return rec_.record(frame_, tensor_role::input, std::string(name), to_view(x), where, allow::none);
  }
  /// Records the output (`output`), or output `i` of several (`output[i]`).
  template <class T>
  health_result output(const T& x, source_location where = {}) {
    return rec_.record(frame_, tensor_role::output, "output", to_view(x), where, allow::none);
  }
  template <class T>
  health_result output(const T& x, int i, source_location where = {}) {
    return rec_.record(frame_, tensor_role::output, "output[" + std::to_string(i) + "]", to_view(x), where,
                       allow::none);
  }
  /// The same, checked with segmentation `s` (the rows of each request, expert or KV block): a detection names
  /// the bad segments. A segmentation that does not fit the tensor throws check()'s nanscope::error.
  template <class T>
  health_result input(const T& x, const segments& s, source_location where = {}) {
    return rec_.record(frame_, tensor_role::input, "input[" + std::to_string(inputs_++) + "]", to_view(x), where,
                       allow::none, nullptr, &s);
  }
  template <class T>
  health_result input(const T& x, std::string_view name, const segments& s, source_location where = {}) {
    return rec_.record(frame_, tensor_role::input, std::string(name), to_view(x), where, allow::none, nullptr, &s);
  }
  template <class T>
  health_result output(const T& x, const segments& s, source_location where = {}) {
    return rec_.record(frame_, tensor_role::output, "output", to_view(x), where, allow::none, nullptr, &s);
  }
  template <class T>
  health_result output(const T& x, int i, const segments& s, source_location where = {}) {
    return rec_.record(frame_, tensor_role::output, "output[" + std::to_string(i) + "]", to_view(x), where,
                       allow::none, nullptr, &s);
  }
  /// Records a parameter (`weight`, `bias`).
  template <class T>
  health_result parameter(const T& x, std::string_view name, source_location where = {}) {
    return rec_.record(frame_, tensor_role::parameter, std::string(name), to_view(x), where, allow::none);
  }
  /// Records a non-tensor argument ("not a tensor") or an absent one ("None"), as the HF report shows them.
  void non_tensor_input(bool is_none = false) {
    rec_.record_non_tensor(frame_, tensor_role::input, "input[" + std::to_string(inputs_++) + "]", is_none,
                           is_none ? "None" : "");
  }
  /// Records a non-tensor positional argument with its text (an int, a config object: what repr() shows). The
  /// layer tree writes the text; the reports show "not a tensor".
  void value_input(std::string_view repr) {
    rec_.record_non_tensor(frame_, tensor_role::input, "input[" + std::to_string(inputs_++) + "]", false,
                           std::string(repr));
  }
  /// Records a named non-tensor argument (a keyword argument) with its text.
  void value_input(std::string_view repr, std::string_view name) {
    rec_.record_non_tensor(frame_, tensor_role::input, std::string(name), false, std::string(repr));
  }

  /// Records a tensor whose health was computed elsewhere (a device check resolved at the step boundary, see
  /// deferred.hpp): as input()/output()/parameter(), without reading the data. An empty `context` for an input
  /// is the next positional one (`input[k]`).
  health_result record_result(tensor_role role, std::string_view context, const tensor_view& v,
                              const health_result& h, source_location where = {}) {
    std::string ctx = role == tensor_role::input && context.empty() ? "input[" + std::to_string(inputs_++) + "]"
                                                                      : std::string(context);
    return rec_.record(frame_, role, std::move(ctx), v, where, allow::none, &h);
  }

  const std::string& module_path() const { return frame_.module_path; }
  const frame& current() const { return frame_; }
  recorder& owner() const { return rec_; }
  scope* parent_for_lookup() const { return parent_; }

 private:
  friend class recorder;
  static std::string describe(const scope* s) {
    std::string out = "'" + s->frame_.module_path + "'";
    if (!s->frame_.class_name.empty()) out += " (" + s->frame_.class_name + ")";
    return out;
  }
  /// ~scope of a scope that is not the innermost of this thread: remove it from the chain, or stop.
  void unlink_out_of_order(scope*& top) {
    scope* inner = top;
    while (inner != nullptr && inner->parent_ != this) inner = inner->parent_;
    if (inner == nullptr) {
      rec_.report_misuse("nanscope: scope " + describe(this) +
                         " ended on a thread that does not have it open (a scope must end on the thread that "
                         "created it); aborting, since its own thread's scope chain would point to freed memory\n");
      std::abort();
    }
    // Scopes opened inside this one (still alive) now nest in this one's enclosing scope.
    for (scope* s = top; s != this; s = s->parent_)
      if (s->same_parent_ == this) s->same_parent_ = same_parent_;
    inner->parent_ = parent_;
    rec_.report_misuse("nanscope: scope " + describe(this) + " ended before the scope " + describe(top) +
                       " opened inside it on this thread (scopes must end in the reverse order of their creation); "
                       "the scopes still open now nest in its enclosing scope\n");
  }
  recorder& rec_;
  scope* parent_;
  const scope* same_parent_ = nullptr;
  source_location where_;
  frame frame_;
  int inputs_ = 0;
  bool inert_ = false;  ///< opened while checking was off (recorder::set_enabled)
};

namespace detail {
/// The innermost scope of this thread that belongs to `r`, or null.
inline scope* current_scope(recorder& r) {
  scope* s = thread_top_scope();
  while (s != nullptr && &s->owner() != &r) s = s->parent_for_lookup();
  return s;
}
}  // namespace detail

inline health_result recorder::checkpoint_impl(const tensor_view& v, std::string_view context, source_location where,
                                               allow allowed, const health_result* known, const segments* seg,
                                               const block_target* target) {
  if (!enabled()) {
    health_result off;
    off.mode = check_mode::no_tensor;
    return off;
  }
  scope* s = detail::current_scope(*this);
  // The frame is completed into the ring even when the check throws (throw_exception policy).
  struct pending {
    recorder& r;
    frame f;
    ~pending() {
      f.complete = true;
      r.complete(std::move(f), false);
    }
  } p{*this, frame{}};
  p.f.checkpoint = true;
  p.f.step = step();
  p.f.where = where;
  p.f.serial = detail::next_frame_serial();
  p.f.recorder = id_;
  if (s != nullptr) {
    p.f.module_path = s->module_path();
    p.f.class_name = s->current().class_name;
  }
  return record(p.f, tensor_role::checkpoint, std::string(context), v, where, allowed, known, seg, target);
}

NANSCOPE_NAMESPACE_END

// The recorder's entry points (recording, detection, reports, snapshots), which need both the recorder and the
// scope complete: here in the header-only mode (whichever of recorder.hpp and scope.hpp was included first); in
// the separate mode only in the file that defines NANSCOPE_IMPLEMENTATION (config.hpp).
#if !NANSCOPE_IMPL_SEPARATE || defined(NANSCOPE_IMPLEMENTATION)
#include "detail/recorder_impl.hpp"
#endif

#endif  // NANSCOPE_SCOPE_HPP
