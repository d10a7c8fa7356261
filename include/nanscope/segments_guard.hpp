// nanscope — segments_guard.hpp: NANSCOPE_SEGMENTS's RAII guard: while it lives, the inputs, outputs and
// checkpoints recorded into its recorder on this thread are checked with its segmentation (when it fits them), so
// the recorder's texts, the layer tree and the reports name the request, expert or block that holds a NaN/Inf.
//
//   NANSCOPE_SEGMENTS(nanscope::segments::rows(cu_seqlens).with_ids(request_ids).with_unit("request"));
//   NANSCOPE_OUTPUT(logits);   // "request 17 (rows 4096-4351): 3 NaN, first at row 4102"
#ifndef NANSCOPE_SEGMENTS_GUARD_HPP
#define NANSCOPE_SEGMENTS_GUARD_HPP

#include "config.hpp"
#include "segments_api.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

NANSCOPE_NAMESPACE_BEGIN

class recorder;
class segments_guard;

namespace detail {
/// The innermost segments_guard of this thread (any recorder); guards link to the one they were opened in.
inline segments_guard*& thread_top_segments_guard() {
  thread_local segments_guard* top = nullptr;
  return top;
}
}  // namespace detail

/// Applies a segmentation to the tensors recorded into a recorder on this thread while it lives: inputs, outputs
/// and checkpoints (never parameters). A tensor the segmentation does not fit (another first dimension, a
/// scalar) is checked unsegmented, without an error. The innermost guard of a recorder wins. The guard copies the
/// `segments` value, not the arrays it points to: the offsets and ids must stay valid while the guard lives. It
/// keeps the recorder's id, not the recorder. Guards end in the reverse order of their creation, on their thread.
class segments_guard {
 public:
  segments_guard(recorder& r, const segments& s);
  /// For nanscope::default_recorder().
  explicit segments_guard(const segments& s);
  segments_guard(const segments_guard&) = delete;
  segments_guard& operator=(const segments_guard&) = delete;
  ~segments_guard() {
    segments_guard*& top = detail::thread_top_segments_guard();
    if (top == this) {
      top = prev_;
      return;
    }
    // Ended out of order (a heap-allocated guard): unlink it from its thread's chain.
    for (segments_guard* g = top; g != nullptr; g = g->prev_)
      if (g->prev_ == this) {
        g->prev_ = prev_;
        return;
      }
    std::fputs("nanscope: a segments_guard ended on a thread that does not have it open; aborting\n", stderr);
    std::abort();
  }

  const segments& segmentation() const { return seg_; }
  std::uint64_t recorder_id() const { return recorder_; }
  const segments_guard* enclosing() const { return prev_; }

 private:
  segments seg_;
  std::uint64_t recorder_;
  segments_guard* prev_;
};

namespace detail {
/// The segmentation of the innermost guard of this thread for the recorder with this id, or null.
inline const segments* active_segments(std::uint64_t recorder_id) {
  for (const segments_guard* g = thread_top_segments_guard(); g != nullptr; g = g->enclosing())
    if (g->recorder_id() == recorder_id) return &g->segmentation();
  return nullptr;
}
}  // namespace detail

NANSCOPE_NAMESPACE_END

// After the class: recorder.hpp's implementation part (detail/recorder_impl.hpp) includes this header and uses
// detail::active_segments.
#include "recorder.hpp"

NANSCOPE_NAMESPACE_BEGIN

inline segments_guard::segments_guard(recorder& r, const segments& s)
    : seg_(s), recorder_(r.id()), prev_(detail::thread_top_segments_guard()) {
  detail::thread_top_segments_guard() = this;
}
inline segments_guard::segments_guard(const segments& s) : segments_guard(default_recorder(), s) {}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_SEGMENTS_GUARD_HPP
