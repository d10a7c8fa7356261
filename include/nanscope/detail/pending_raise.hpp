// nanscope — detail/pending_raise.hpp: what a recorder raises later than it learns it. A scope's destructor must
// not throw, so the hf style's detection_error, the exception a detection callback threw there, and
// abort_after_step's stop_requested wait here until the next scope opens, the next record, next_step() or
// raise_pending().
#ifndef NANSCOPE_DETAIL_PENDING_RAISE_HPP
#define NANSCOPE_DETAIL_PENDING_RAISE_HPP

#include "../config.hpp"
#include "../frame.hpp"
#include "../hf_style.hpp"

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// Thread-safe. The armed flags are read without the lock (one atomic load on the recording path).
class pending_raise {
 public:
  /// Whether anything waits to be raised.
  bool any() const noexcept { return detection_armed() || stop_armed(); }
  bool detection_armed() const noexcept { return detection_.load(std::memory_order_acquire); }
  bool stop_armed() const noexcept { return stop_.load(std::memory_order_acquire); }

  /// A detection_error for `d` is raised next (the hf style: HuggingFace raises in the hook of the call).
  void arm_detection(std::shared_ptr<const detection> d) noexcept {
    std::lock_guard<std::mutex> lk(m_);
    detection_info_ = std::move(d);
    detection_.store(true, std::memory_order_release);
  }
#if NANSCOPE_IMPL_EXCEPTIONS
  /// What a detection callback threw inside a scope's destructor is raised next, in the detection's place.
  void arm_callback_error(std::exception_ptr e) noexcept {
    std::lock_guard<std::mutex> lk(m_);
    callback_error_ = std::move(e);
    detection_.store(true, std::memory_order_release);
  }
#endif
  /// stop_requested(message) is raised next, unless a stop is armed already (then false: the first one stays).
  bool arm_stop(std::string message) {
    std::lock_guard<std::mutex> lk(m_);
    if (stop_.load(std::memory_order_relaxed)) return false;
    stop_message_ = std::move(message);
    stop_.store(true, std::memory_order_release);
    return true;
  }
  /// Disarms the stop; returns whether one was armed, with its message in `message`.
  bool take_stop(std::string& message) {
    std::lock_guard<std::mutex> lk(m_);
    if (!stop_.exchange(false, std::memory_order_relaxed)) return false;
    message = std::move(stop_message_);
    stop_message_.clear();
    return true;
  }

  /// Throws the armed detection (the callback's own exception first), once; nothing when none is armed.
  void raise_detection() {
    if (!detection_armed()) return;
    std::shared_ptr<const detection> d;
#if NANSCOPE_IMPL_EXCEPTIONS
    std::exception_ptr error;
#endif
    {
      std::lock_guard<std::mutex> lk(m_);
      if (!detection_.exchange(false, std::memory_order_relaxed)) return;
      d = std::move(detection_info_);
      detection_info_.reset();
#if NANSCOPE_IMPL_EXCEPTIONS
      error = std::move(callback_error_);
      callback_error_ = nullptr;
#endif
    }
#if NANSCOPE_IMPL_EXCEPTIONS
    if (error) std::rethrow_exception(error);
#endif
    if (d) NANSCOPE_IMPL_THROW(detection_error(d, detail::hf_detected_text()));
  }
  /// Throws the armed stop, once.
  void raise_stop() {
    if (!stop_armed()) return;
    std::string msg;
    if (take_stop(msg)) NANSCOPE_IMPL_THROW(stop_requested(msg));
  }

 private:
  mutable std::mutex m_;
  std::atomic<bool> detection_{false};
  std::atomic<bool> stop_{false};
  std::shared_ptr<const detection> detection_info_;
  std::string stop_message_;
#if NANSCOPE_IMPL_EXCEPTIONS
  std::exception_ptr callback_error_;
#endif
};

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_PENDING_RAISE_HPP
