// nanscope — macros.hpp: the check macros for a forward pass.
//
//   NANSCOPE_SCOPE("encoder.block.2", "T5Block");     // RAII module scope (nests into the module path)
//   NANSCOPE_INPUT(x);  NANSCOPE_OUTPUT(y);  NANSCOPE_PARAM(w, "weight");
//   NANSCOPE_DETECT_OVERFLOW(h, "after layer_norm");  // a checkpoint; short alias DETECT_OVERFLOW
//   NANSCOPE_DETECT_OVERFLOW_BLOCKS(h, "before fc2", nanscope::block_format::mxfp4);  // + what MXFP4 would lose
//
// All use nanscope::default_recorder(); the *_TO variants take a recorder. With NANSCOPE_CONFIG_LEVEL 0 every
// macro still parses its arguments (no unused-variable warnings, no rot) but never evaluates them and
// generates no code. Definitions never change with the level: only the macro expansions do, so translation
// units with different levels link together safely.
// NANSCOPE_CONFIG_NO_SHORT_MACROS removes the short DETECT_OVERFLOW alias.
#ifndef NANSCOPE_MACROS_HPP
#define NANSCOPE_MACROS_HPP

#include "recorder.hpp"
#include "segments_guard.hpp"

#ifndef NANSCOPE_CONFIG_LEVEL
#define NANSCOPE_CONFIG_LEVEL 1
#endif

#define NANSCOPE_IMPL_CAT2(a, b) a##b
#define NANSCOPE_IMPL_CAT(a, b) NANSCOPE_IMPL_CAT2(a, b)
#define NANSCOPE_IMPL_HERE() (::nanscope::source_location{__FILE__, __LINE__, static_cast<const char*>(__func__)})
// Parsed, never evaluated: the arguments sit in an `if (false)` block (which compilers drop even at -O0;
// unlike sizeof it accepts lambdas in C++17); the void casts defeat overloaded commas.
#define NANSCOPE_IMPL_UNUSED(...)             \
  do {                                        \
    if (false) {                              \
      NANSCOPE_IMPL_VOIDS(__VA_ARGS__);       \
    }                                         \
  } while (false)
#define NANSCOPE_IMPL_VOIDS(...) NANSCOPE_IMPL_VOIDS_N(__VA_ARGS__, 4, 3, 2, 1, 0)(__VA_ARGS__)
#define NANSCOPE_IMPL_VOIDS_N(a, b, c, d, N, ...) NANSCOPE_IMPL_VOIDS_##N
#define NANSCOPE_IMPL_VOIDS_1(a) static_cast<void>(a)
#define NANSCOPE_IMPL_VOIDS_2(a, b) static_cast<void>(a), static_cast<void>(b)
#define NANSCOPE_IMPL_VOIDS_3(a, b, c) static_cast<void>(a), static_cast<void>(b), static_cast<void>(c)
#define NANSCOPE_IMPL_VOIDS_4(a, b, c, d) \
  static_cast<void>(a), static_cast<void>(b), static_cast<void>(c), static_cast<void>(d)

#if NANSCOPE_CONFIG_LEVEL > 0

#define NANSCOPE_SCOPE_TO(rec, name, class_name)                                                \
  ::nanscope::scope NANSCOPE_IMPL_CAT(nanscope_scope_, __LINE__)((rec), (name), (class_name), \
                                                                 NANSCOPE_IMPL_HERE())
#define NANSCOPE_INPUT_TO(rec, x) ::nanscope::detail::macro_input((rec), (x), NANSCOPE_IMPL_HERE())
#define NANSCOPE_OUTPUT_TO(rec, x) ::nanscope::detail::macro_output((rec), (x), -1, NANSCOPE_IMPL_HERE())
#define NANSCOPE_OUTPUT_AT_TO(rec, x, i) ::nanscope::detail::macro_output((rec), (x), (i), NANSCOPE_IMPL_HERE())
#define NANSCOPE_PARAM_TO(rec, x, name) ::nanscope::detail::macro_param((rec), (x), (name), NANSCOPE_IMPL_HERE())
#define NANSCOPE_DETECT_OVERFLOW_TO(rec, x, context) \
  static_cast<void>((rec).checkpoint((x), (context), NANSCOPE_IMPL_HERE()))
#define NANSCOPE_DETECT_OVERFLOW_ALLOW_TO(rec, x, context, allowed) \
  static_cast<void>((rec).checkpoint((x), (context), NANSCOPE_IMPL_HERE(), (allowed)))
#define NANSCOPE_SEGMENTS_TO(rec, seg) \
  ::nanscope::segments_guard NANSCOPE_IMPL_CAT(nanscope_segments_, __LINE__)((rec), (seg))
#define NANSCOPE_INPUT_SEGMENTS_TO(rec, x, seg) \
  ::nanscope::detail::macro_input_segments((rec), (x), (seg), NANSCOPE_IMPL_HERE())
#define NANSCOPE_OUTPUT_SEGMENTS_TO(rec, x, seg) \
  ::nanscope::detail::macro_output_segments((rec), (x), (seg), NANSCOPE_IMPL_HERE())
#define NANSCOPE_DETECT_OVERFLOW_SEGMENTS_TO(rec, x, context, seg) \
  static_cast<void>((rec).checkpoint((x), (context), (seg), NANSCOPE_IMPL_HERE()))
#define NANSCOPE_DETECT_OVERFLOW_BLOCKS_TO(rec, x, context, target) \
  static_cast<void>((rec).checkpoint((x), (context), ::nanscope::block_target(target), NANSCOPE_IMPL_HERE()))

#else

#define NANSCOPE_SCOPE_TO(rec, name, class_name) NANSCOPE_IMPL_UNUSED(rec, name, class_name)
#define NANSCOPE_INPUT_TO(rec, x) NANSCOPE_IMPL_UNUSED(rec, x)
#define NANSCOPE_OUTPUT_TO(rec, x) NANSCOPE_IMPL_UNUSED(rec, x)
#define NANSCOPE_OUTPUT_AT_TO(rec, x, i) NANSCOPE_IMPL_UNUSED(rec, x, i)
#define NANSCOPE_PARAM_TO(rec, x, name) NANSCOPE_IMPL_UNUSED(rec, x, name)
#define NANSCOPE_DETECT_OVERFLOW_TO(rec, x, context) NANSCOPE_IMPL_UNUSED(rec, x, context)
#define NANSCOPE_DETECT_OVERFLOW_ALLOW_TO(rec, x, context, allowed) NANSCOPE_IMPL_UNUSED(rec, x, context, allowed)
#define NANSCOPE_SEGMENTS_TO(rec, seg) NANSCOPE_IMPL_UNUSED(rec, seg)
#define NANSCOPE_INPUT_SEGMENTS_TO(rec, x, seg) NANSCOPE_IMPL_UNUSED(rec, x, seg)
#define NANSCOPE_OUTPUT_SEGMENTS_TO(rec, x, seg) NANSCOPE_IMPL_UNUSED(rec, x, seg)
#define NANSCOPE_DETECT_OVERFLOW_SEGMENTS_TO(rec, x, context, seg) NANSCOPE_IMPL_UNUSED(rec, x, context, seg)
#define NANSCOPE_DETECT_OVERFLOW_BLOCKS_TO(rec, x, context, target) NANSCOPE_IMPL_UNUSED(rec, x, context, target)

#endif

#define NANSCOPE_SCOPE(name, class_name) NANSCOPE_SCOPE_TO(::nanscope::default_recorder(), name, class_name)
#define NANSCOPE_INPUT(x) NANSCOPE_INPUT_TO(::nanscope::default_recorder(), x)
#define NANSCOPE_OUTPUT(x) NANSCOPE_OUTPUT_TO(::nanscope::default_recorder(), x)
#define NANSCOPE_OUTPUT_AT(x, i) NANSCOPE_OUTPUT_AT_TO(::nanscope::default_recorder(), x, i)
#define NANSCOPE_PARAM(x, name) NANSCOPE_PARAM_TO(::nanscope::default_recorder(), x, name)
#define NANSCOPE_DETECT_OVERFLOW(x, context) NANSCOPE_DETECT_OVERFLOW_TO(::nanscope::default_recorder(), x, context)
#define NANSCOPE_DETECT_OVERFLOW_ALLOW(x, context, allowed) \
  NANSCOPE_DETECT_OVERFLOW_ALLOW_TO(::nanscope::default_recorder(), x, context, allowed)
// Segmentations (segments_guard.hpp, docs/segments.md): a guard for the tensors recorded on this thread while
// it lives, or one per call.
#define NANSCOPE_SEGMENTS(seg) NANSCOPE_SEGMENTS_TO(::nanscope::default_recorder(), seg)
#define NANSCOPE_INPUT_SEGMENTS(x, seg) NANSCOPE_INPUT_SEGMENTS_TO(::nanscope::default_recorder(), x, seg)
#define NANSCOPE_OUTPUT_SEGMENTS(x, seg) NANSCOPE_OUTPUT_SEGMENTS_TO(::nanscope::default_recorder(), x, seg)
#define NANSCOPE_DETECT_OVERFLOW_SEGMENTS(x, context, seg) \
  NANSCOPE_DETECT_OVERFLOW_SEGMENTS_TO(::nanscope::default_recorder(), x, context, seg)
// A checkpoint against a block-scaled target (block_scaled_record.hpp, docs/block-scaled.md): what quantizing the
// tensor to it would lose, warned about past the target's threshold and kept for the layer tree and the report.
//   NANSCOPE_DETECT_OVERFLOW_BLOCKS(h, "before the fp4 GEMM", nanscope::block_format::nvfp4);
#define NANSCOPE_DETECT_OVERFLOW_BLOCKS(x, context, target) \
  NANSCOPE_DETECT_OVERFLOW_BLOCKS_TO(::nanscope::default_recorder(), x, context, target)

#if !defined(NANSCOPE_CONFIG_NO_SHORT_MACROS)
#define DETECT_OVERFLOW(x, context) NANSCOPE_DETECT_OVERFLOW(x, context)
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace detail {
template <class T>
void macro_input(recorder& r, const T& x, source_location where) {
  if (scope* s = current_scope(r)) {
    s->input(x, where);
  } else {
    r.checkpoint(x, "input", where);
  }
}
template <class T>
void macro_output(recorder& r, const T& x, int i, source_location where) {
  if (scope* s = current_scope(r)) {
    if (i < 0) s->output(x, where);
    else s->output(x, i, where);
  } else {
    r.checkpoint(x, "output", where);
  }
}
template <class T>
void macro_param(recorder& r, const T& x, std::string_view name, source_location where) {
  if (scope* s = current_scope(r)) {
    s->parameter(x, name, where);
  } else {
    r.checkpoint(x, name, where);
  }
}
template <class T>
void macro_input_segments(recorder& r, const T& x, const segments& seg, source_location where) {
  if (scope* s = current_scope(r)) {
    s->input(x, seg, where);
  } else {
    r.checkpoint(x, "input", seg, where);
  }
}
template <class T>
void macro_output_segments(recorder& r, const T& x, const segments& seg, source_location where) {
  if (scope* s = current_scope(r)) {
    s->output(x, seg, where);
  } else {
    r.checkpoint(x, "output", seg, where);
  }
}
}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_MACROS_HPP
