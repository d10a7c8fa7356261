// nanscope — listener.hpp: the two kinds of objects a recorder calls: scope listeners (the layer tree, the early
// warnings, the rank evidence) and the check gate (runtime control).
#ifndef NANSCOPE_LISTENER_HPP
#define NANSCOPE_LISTENER_HPP

#include "attachment.hpp"
#include "config.hpp"
#include "frame.hpp"
#include "health.hpp"

#include <cstdint>
#include <string_view>

NANSCOPE_NAMESPACE_BEGIN

class recorder;
struct early_warning;  // early_warning.hpp (raised by history.hpp, written by the layer tree)

/// Receives a recorder's scope events: the layer-tree writer (tree.hpp) is one. The calls come on the recording
/// thread, outside the recorder's lock, in call order for that thread; a listener synchronises itself. They must
/// not throw. A recorder has any number of listeners, each attached (recorder::connect, add_listener) and
/// detached on its own; a listener destroyed while attached detaches itself (attachable), and one whose recorder
/// ends first is told (attachable::detached). attachment.hpp and docs/recorder.md describe the lifetimes.
class scope_listener : public attachable {
 public:
  /// A scope opened; `outermost`: no enclosing scope of the same recorder on this thread.
  virtual void scope_opened(const frame& f, bool outermost) noexcept = 0;
  /// A tensor (or a non-tensor argument) was recorded into the open frame `f`; `rec.view` is valid during the
  /// call. Checkpoints (DETECT_OVERFLOW) arrive with a frame whose `checkpoint` is true.
  virtual void tensor_recorded(const frame& f, const tensor_record& rec) noexcept = 0;
  /// The scope is closing (also during stack unwinding).
  virtual void scope_closed(const frame& f, bool outermost) noexcept = 0;
  /// Whether tensor_record::reference is worth computing for this listener (adapters skip the cost otherwise).
  virtual bool wants_reference_stats() const noexcept { return false; }
  /// A layer above the recorder (history.hpp) raised an early warning about a tensor recorded into the open
  /// frame `f` (recorder::notify_warning). The layer-tree writer writes it into the tree; others ignore it.
  virtual void warning_raised(const frame& f, const early_warning& w) noexcept {
    (void)f;
    (void)w;
  }
  /// The recorder detected a NaN/Inf (not allowed by a rule) in a tensor recorded into frame `f` — the open frame
  /// of a module, or a checkpoint's frame — and printed its report (`d.report`). `stopping`: the recorder throws
  /// detection_error (or aborts) right after this call, and nobody may catch it: a listener that writes files
  /// commits what it holds now (the layer-tree writer ends its pass here). Not called in the hf style.
  virtual void detection_raised(const frame& f, const detection& d, bool stopping) noexcept {
    (void)f;
    (void)d;
    (void)stopping;
  }
};

/// Decides, per tensor, whether the recorder checks it and in which mode, and hears of step boundaries and of the
/// time each check took (control.hpp's controller is one). Calls come on the recording thread, outside the
/// recorder's lock; they must not throw. A recorder has at most one gate (recorder::connect_gate, set_gate):
/// attaching another ends the previous one's attachment, which is told (attachable::detached).
class check_gate : public attachable {
 public:
  static constexpr std::uint32_t skip = 0xFFFFFFFFu;
  /// A ticket for checked(), or `skip`: the tensor is neither checked nor recorded. May change `mode`.
  virtual std::uint32_t admit(const frame& f, tensor_role role, std::string_view context, check_mode& mode) noexcept = 0;
  /// The admitted check `ticket` read `bytes` bytes in `ns` nanoseconds (the same gate that admitted it: a gate
  /// is not detached between its admit and its checked).
  virtual void checked(std::uint32_t ticket, std::uint64_t bytes, std::uint64_t ns) noexcept = 0;
  /// A step ended (outermost scope with auto_step, next_step(), set_step()); `next` is the step that starts.
  virtual void step_boundary(std::uint64_t next) noexcept = 0;
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_LISTENER_HPP
