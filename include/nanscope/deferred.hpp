// nanscope — deferred.hpp: record a step whose tensor results arrive later (asynchronous device checks), then
// replay it into a recorder at the step boundary. The replay opens the same scopes in the same order and
// records the same tensors with their resolved results, so the recorder's frames, detections, reports,
// warnings, step counting and its listener (the layer-tree writer) see exactly what the direct path shows.
// Needs only the standard library; the CUDA backend (cuda.cuh) builds nanscope::cuda::deferred_recorder on it.
#ifndef NANSCOPE_DEFERRED_HPP
#define NANSCOPE_DEFERRED_HPP

#include "config.hpp"
#include "health.hpp"
#include "recorder.hpp"
#include "view.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// The log of one step. `Result` is any copyable type with `health_result get() const` (nanscope::cuda::pending;
/// a host type in tests). Single-threaded: one log per recording thread.
template <class Result>
class deferred_log {
 public:
  explicit deferred_log(recorder& r) : rec_(&r) {}
  deferred_log(const deferred_log&) = delete;
  deferred_log& operator=(const deferred_log&) = delete;

  recorder& owner() const { return *rec_; }
  /// Tensors logged since the last replay.
  std::size_t pending_tensors() const { return tensors_; }
  bool empty() const { return events_.empty(); }

  /// A module scope of the log (RAII, same naming as nanscope::scope). Tensors are logged with their (still
  /// unresolved) result.
  class scope {
   public:
    scope(deferred_log& log, std::string_view name, std::string_view class_name, source_location where = {})
        : log_(log) {
      event e;
      e.what = kind::open;
      e.text.assign(name.data(), name.size());
      e.text2.assign(class_name.data(), class_name.size());
      e.where = where;
      log_.make_room();
      log_.events_.push_back(std::move(e));
      ++log_.depth_;
    }
    scope(const scope&) = delete;
    scope& operator=(const scope&) = delete;
    ~scope() {
      event e;
      e.what = kind::close;
      log_.events_.push_back(std::move(e));  // no reallocation: make_room kept a place for every open scope's close
      --log_.depth_;
    }

    /// The next positional input (`input[k]`), or a named one.
    void input(const tensor_view& v, Result r, source_location where = {}) {
      log_.add(tensor_role::input, std::string(), v, std::move(r), where);
    }
    void input(const tensor_view& v, Result r, std::string_view name, source_location where = {}) {
      log_.add(tensor_role::input, std::string(name), v, std::move(r), where);
    }
    /// The output (`output`), or output `i` of several (`output[i]`).
    void output(const tensor_view& v, Result r, source_location where = {}) {
      log_.add(tensor_role::output, "output", v, std::move(r), where);
    }
    void output(const tensor_view& v, Result r, int i, source_location where = {}) {
      log_.add(tensor_role::output, "output[" + std::to_string(i) + "]", v, std::move(r), where);
    }
    void parameter(const tensor_view& v, Result r, std::string_view name, source_location where = {}) {
      log_.add(tensor_role::parameter, std::string(name), v, std::move(r), where);
    }
    /// A non-tensor argument ("not a tensor") or an absent one ("None").
    void non_tensor_input(bool is_none = false) {
      event e;
      e.what = kind::non_tensor;
      e.is_none = is_none;
      log_.make_room();
      log_.events_.push_back(std::move(e));
    }
    /// A non-tensor positional argument with its text.
    void value_input(std::string_view repr) {
      event e;
      e.what = kind::value;
      e.text.assign(repr.data(), repr.size());
      log_.make_room();
      log_.events_.push_back(std::move(e));
    }

   private:
    deferred_log& log_;
  };

  /// Resolves every logged result (in logging order) and replays the step into the recorder: scopes open and
  /// close, tensors are recorded with their results, detections and warnings fire as they would have. Call it
  /// with every scope of the log closed. The log is empty afterwards, whatever happens (a detection_error of the
  /// throw_exception policy propagates after the open replay scopes have completed their frames).
  void replay() {
    if (depth_ != 0)
      detail::fail(nullptr, "deferred_log::replay with " + std::to_string(depth_) + " scope(s) still open");
    std::vector<event> events;
    events.swap(events_);
    tensors_ = 0;
    std::vector<std::unique_ptr<::nanscope::scope>> open;
    // Scopes close innermost first, also while an exception (detection_error) unwinds the replay, as they do on
    // the direct path.
    struct closer {
      std::vector<std::unique_ptr<::nanscope::scope>>& v;
      ~closer() {
        while (!v.empty()) v.pop_back();
      }
    } close_all{open};
    for (event& e : events) {
      switch (e.what) {
        case kind::open: open.push_back(std::make_unique<::nanscope::scope>(*rec_, e.text, e.text2, e.where)); break;
        case kind::close:
          if (!open.empty()) open.pop_back();
          break;
        case kind::tensor: {
          const health_result h = e.result.get();
          // a checkpoint is its own frame under the innermost open scope, as recorder::checkpoint makes it
          if (e.role == tensor_role::checkpoint || open.empty()) {
            rec_->checkpoint_result(e.view, h, e.text, e.where);
          } else {
            open.back()->record_result(e.role, e.text, e.view, h, e.where);
          }
          break;
        }
        case kind::non_tensor:
          if (!open.empty()) open.back()->non_tensor_input(e.is_none);
          break;
        case kind::value:
          if (!open.empty()) open.back()->value_input(e.text);
          break;
      }
    }
  }

  /// A tensor outside any scope: a checkpoint frame (DETECT_OVERFLOW) named by `context`.
  void checkpoint(const tensor_view& v, Result r, std::string_view context, source_location where = {}) {
    add(tensor_role::checkpoint, std::string(context), v, std::move(r), where);
  }

 private:
  enum class kind : std::uint8_t { open, close, tensor, non_tensor, value };
  struct event {
    kind what = kind::open;
    tensor_role role = tensor_role::output;
    bool is_none = false;
    std::string text;   // scope name, tensor context, value repr
    std::string text2;  // class name
    source_location where;
    tensor_view view;
    Result result{};
  };
  void add(tensor_role role, std::string context, const tensor_view& v, Result r, source_location where) {
    event e;
    e.what = kind::tensor;
    e.role = role;
    e.text = std::move(context);
    e.view = v;
    e.view.name = nullptr;  // the caller's name may not outlive the step; contexts name tensors in reports
    e.result = std::move(r);
    e.where = where;
    make_room();
    events_.push_back(std::move(e));
    ++tensors_;
  }
  /// Before an event is added (it may throw, there): room for it, one more open scope and the close of every
  /// open scope, so that ~scope appends its close without allocating (a destructor must not throw).
  void make_room() {
    const std::size_t need = events_.size() + static_cast<std::size_t>(depth_) + 2;
    if (events_.capacity() < need) events_.reserve(need > 2 * events_.capacity() ? need : 2 * events_.capacity());
  }

  recorder* rec_;
  std::vector<event> events_;
  std::size_t tensors_ = 0;
  int depth_ = 0;
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DEFERRED_HPP
