// nanscope — hf_style.hpp: HuggingFace DebugUnderflowOverflow's forward-hook state machine (docs/formats.md),
// which the recorder runs for report_style::hf each time a module call completes.
//
// The machine is a template over the recorder's frame type so that this header sits below recorder.hpp (it
// needs only the frame's fields: module path, tensors with role/context/health/allowed, and `banner`). It
// decides what HF would print and raise; the recorder formats (report.hpp) and applies its policy.
#ifndef NANSCOPE_HF_STYLE_HPP
#define NANSCOPE_HF_STYLE_HPP

#include "config.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

namespace detail {
inline constexpr const char* hf_prefix = "                 ";  // 17 spaces
inline constexpr const char* hf_header = "abs min  abs max  metadata";

/// BANNER(n): HF's batch_start_frame() lines, each ended with '\n' (they lead the frame they are added to).
inline std::string hf_banner(std::uint64_t n) {
  return std::string("\n\n") + hf_prefix + " *** Starting batch number=" + std::to_string(n) + " ***\n" + hf_header +
         "\n";
}

/// The ValueError text HF raises after printing its report.
inline std::string hf_detected_text() {
  return "DebugUnderflowOverflow: inf/nan detected, aborting as there is no point running further. Please scroll "
         "up above this traceback to see the activation values prior to this event.";
}

/// The ValueError text of abort_after_batch_num.
inline std::string hf_abort_text(std::uint64_t batches, std::int64_t n) {
  return "DebugUnderflowOverflow: aborting after " + std::to_string(batches) +
         " batches due to `abort_after_batch_num=" + std::to_string(n) + "` arg";
}

/// The forward hook's state and steps. Frame is nanscope::frame.
template <class Frame>
class hf_machine {
 public:
  struct outcome {
    std::string has_lines;  ///< step 4: "{ctx} has nans" / "{ctx} has infs", in analysis order
    bool trace = false;     ///< step 5: print `traced` (the frame, its banner first)
    Frame traced;
    bool report = false;    ///< step 7: print the report of frames() and raise
    bool stop = false;      ///< step 8: abort_after_batch_num reached
  };

  /// One hook call for the completed module call `f`; `batch` is the recorder's step (advanced here for the
  /// root, step 3). `tracing(b)`: b is in trace_batch_nums.
  template <class Tracing>
  outcome on_call(Frame&& f, bool is_root, std::uint64_t& batch, std::size_t max_frames, std::int64_t abort_after,
                  Tracing&& tracing) {
    outcome o;
    const bool trace = tracing(batch);                  // 1.
    if (trace) ring_.clear();
    if (calls_ == 0) banner_ += hf_banner(batch);      // 2.
    ++calls_;
    if (is_root) ++batch;                              // 3.
    f.banner = std::move(banner_);                     // 4. the frame: banner lines, then its own
    banner_.clear();
    for (int r = 0; r < 3; ++r) {
      for (std::size_t i = 0; i < f.tensors.size(); ++i) {
        const auto& t = f.tensors[i];
        if (role_rank(t.role) != r || !t.is_tensor || t.allowed) continue;
        if (t.health.has_nan()) o.has_lines += t.context + " has nans\n";
        if (t.health.has_inf()) o.has_lines += t.context + " has infs\n";
        if (t.health.has_nonfinite() && !detected_) {
          detected_ = true;
          first_ = f;  // what the detection names: the first tensor HF flagged since the last report
          first_tensor_ = i;
        }
      }
    }
    ring_.push_back(std::move(f));
    if (trace) {                                       // 5. (the ring held this frame only)
      o.trace = true;
      o.traced = std::move(ring_.back());
      ring_.clear();
    } else {
      while (ring_.size() > max_frames) ring_.pop_front();  // max_frames 0: none kept, "Last 0 forward frames"
    }
    if (is_root) banner_ += hf_banner(batch);          // 6.
    o.report = detected_ && !trace;                    // 7.
    o.stop = abort_after >= 0 && batch > static_cast<std::uint64_t>(abort_after);  // 8.
    return o;
  }

  /// The end of a batch without a root frame (recorder::next_step with auto_step off): steps 3, 6, 8.
  bool end_batch(std::uint64_t& batch, std::int64_t abort_after) {
    ++batch;
    banner_ += hf_banner(batch);
    return abort_after >= 0 && batch > static_cast<std::uint64_t>(abort_after);
  }

  /// The saved frames, oldest first.
  std::vector<Frame> frames() const { return std::vector<Frame>(ring_.begin(), ring_.end()); }
  /// The frame and tensor index of the first flagged tensor since the last report.
  const Frame& first_frame() const { return first_; }
  std::size_t first_tensor() const { return first_tensor_; }
  /// After a report (or a report left out by report_once_per_step): look for the next one.
  void clear_detected() { detected_ = false; }
  void clear() { ring_.clear(); }

 private:
  template <class Role>
  static int role_rank(Role r) {  // parameters, inputs, outputs; anything else (checkpoints) is not HF's
    return r == Role::parameter ? 0 : r == Role::input ? 1 : r == Role::output ? 2 : 3;
  }
  std::deque<Frame> ring_;
  std::string banner_;
  std::uint64_t calls_ = 0;
  bool detected_ = false;
  Frame first_;
  std::size_t first_tensor_ = 0;
};
}  // namespace detail

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_HF_STYLE_HPP
