// nanscope — report.hpp: the printers of the recorder (needs fmt).
//  - format_hf_report:    HuggingFace DebugUnderflowOverflow's report, exactly its grammar (docs/formats.md)
//  - format_hf_v1_report: the one-line-per-tensor format of the original document (docs/formats.md)
//  - format_extended_report: nanscope's own — counts, low-precision headroom, source locations, and which
//    frame produced the first non-finite value as distinct from frames that propagated it.
// Including this header installs these printers into the recorder (recorder.hpp itself needs no fmt).
#ifndef NANSCOPE_REPORT_HPP
#define NANSCOPE_REPORT_HPP

#include "config.hpp"
#include "format.hpp"
#include "health.hpp"
#include "recorder.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>

NANSCOPE_NAMESPACE_BEGIN

namespace detail {
// hf_prefix, hf_header and hf_banner() are in hf_style.hpp.

/// abs min / abs max with torch semantics (what `var.abs().min()` prints): any NaN makes both NaN.
inline double hf_abs_min(const health_result& h) { return h.nan != 0 ? qnan : h.abs_min; }
inline double hf_abs_max(const health_result& h) { return h.nan != 0 ? qnan : h.abs_max; }

/// `{:>8.2e}` that never hands fmt a non-finite value: under -ffast-math fmt's own inf/NaN tests fold away
/// and it asserts. inf / nan are spelled by us, right-aligned in 8 like Python's format.
template <class Out>
Out format_e8(Out out, double v) {
  const std::uint64_t b = double_to_bits(v);
  const std::uint64_t a = b & 0x7FFFFFFFFFFFFFFFull;
  if (a > 0x7FF0000000000000ull) return fmt::format_to(out, "     nan");
  if (a == 0x7FF0000000000000ull) return fmt::format_to(out, "{}", (b >> 63) != 0 ? "    -inf" : "     inf");
  return fmt::format_to(out, "{:>8.2e}", v);
}

inline int role_rank(tensor_role r) {
  switch (r) {
    case tensor_role::parameter: return 0;
    case tensor_role::input: return 1;
    case tensor_role::output: return 2;
    case tensor_role::checkpoint: return 3;
  }
  return 3;
}

/// Calls fn(record) in the HF order: parameters, then inputs, then outputs (recording order within each).
template <class Fn>
void for_each_in_hf_order(const frame& f, Fn&& fn) {
  for (int r = 0; r < 4; ++r)
    for (const auto& t : f.tensors)
      if (role_rank(t.role) == r) fn(t);
}

/// FRAME of the grammar: the frame's banner lines (hf style), the module line, one line per tensor.
template <class Out>
Out format_hf_frame(Out out, const frame& f) {
  out = std::copy(f.banner.begin(), f.banner.end(), out);
  out = fmt::format_to(out, "{} {} {}", hf_prefix, f.module_path, f.class_name);
  for_each_in_hf_order(f, [&](const tensor_record& t) {
    if (t.is_none) {
      out = fmt::format_to(out, "\n{:>17} {}", "None", t.context);
    } else if (!t.is_tensor) {
      out = fmt::format_to(out, "\n{:>17} {}", "not a tensor", t.context);
    } else {
      *out++ = '\n';
      out = format_e8(out, hf_abs_min(t.health));
      *out++ = ' ';
      out = format_e8(out, hf_abs_max(t.health));
      out = fmt::format_to(out, " {}", t.context);
    }
  });
  return out;
}


inline const char* lp_name(lp_format f) {
  switch (f) {
    case lp_format::f16: return "f16";
    case lp_format::bf16: return "bf16";
    case lp_format::e4m3fn: return "e4m3";
    case lp_format::e5m2: return "e5m2";
  }
  return "?";
}

template <class Out>
Out format_headroom(Out out, const tensor_record& rec) {
  const health_result& h = rec.health;
  for (int i = 0; i < lp_format_count; ++i) {
    const auto f = static_cast<lp_format>(i);
    const dtype t = lp_dtype(f);
    const double hr = headroom_bits(h.abs_max, t);
    const bool over = !is_nan_bits(h.abs_max) && h.abs_max >= info(t).overflow_threshold;
    out = fmt::format_to(out, " {}", lp_name(f));
    if (is_nan_bits(hr)) {
      out = fmt::format_to(out, "=?");
    } else if (over) {
      out = fmt::format_to(out, "=OVERFLOW");
    } else if (!is_finite_bits(hr)) {
      out = fmt::format_to(out, "=inf");
    } else {
      out = fmt::format_to(out, "={:+.1f}", hr);
    }
    if ((rec.warned >> i) & 1u) out = fmt::format_to(out, "!");
    if (rec.has_margins) {
      const format_margin& m = rec.margins[t];
      if (m.overflow + m.subnormal + m.underflow_to_zero != 0)
        out = fmt::format_to(out, "(over={} sub={} zero={})", m.overflow, m.subnormal, m.underflow_to_zero);
    }
  }
  // block-scaled targets: the blocks that would lose values, per format ("!": warned)
  for (const block_format_stats& s : rec.block_scaled.formats) {
    out = fmt::format_to(out, " {} lossy={}/{}", name(s.format), s.lossy_blocks, s.blocks);
    if ((rec.block_scaled.warned >> static_cast<unsigned>(s.format)) & 1u) out = fmt::format_to(out, "!");
  }
  return out;
}

inline const char* role_name(tensor_role r) {
  switch (r) {
    case tensor_role::parameter: return "param";
    case tensor_role::input: return "in";
    case tensor_role::output: return "out";
    case tensor_role::checkpoint: return "check";
  }
  return "?";
}

}  // namespace detail

/// HuggingFace's report (docs/formats.md): preamble, `Last K forward frames:`, header, the frames joined with
/// '\n' (a `print`), then `print("\n\n")`: four newlines after the last frame.
template <class Out>
Out format_hf_report(Out out, const detection& d) {
  out = fmt::format_to(out, "\nDetected inf/nan during batch_number={}\nLast {} forward frames:\n{}\n", d.step,
                       d.frames.size(), detail::hf_header);
  for (std::size_t i = 0; i < d.frames.size(); ++i) {
    if (i != 0) out = fmt::format_to(out, "\n");
    out = detail::format_hf_frame(out, d.frames[i]);
  }
  return fmt::format_to(out, "\n\n\n\n");
}

/// One traced frame as HuggingFace prints it in trace mode. `banner`: put the batch banner of f.step before it
/// (the native styles' trace; in the hf style the frame carries its banner lines itself).
template <class Out>
Out format_hf_trace(Out out, const frame& f, bool banner) {
  if (banner) {
    const std::string b = detail::hf_banner(f.step);
    out = std::copy(b.begin(), b.end(), out);
  }
  out = detail::format_hf_frame(out, f);
  return fmt::format_to(out, "\n");
}

/// The original document's format (docs/formats.md): the detection line(s), `last N frames:`, then one line
/// per input/output tensor, oldest first. Parameters are not listed (the original did not record them);
/// checkpoints use `@` where inputs use `>` and outputs `<`.
template <class Out>
Out format_hf_v1_report(Out out, const detection& d) {
  const char dir = d.role == tensor_role::input ? '>' : d.role == tensor_role::output ? '<' : '@';
  if (d.health.has_inf())
    out = fmt::format_to(out, "{} [{}] {}: {}: {} has infs\n", dir, d.step, d.module_path, d.class_name, d.context);
  if (d.health.has_nan())
    out = fmt::format_to(out, "{} [{}] {}: {}: {} has nans\n", dir, d.step, d.module_path, d.class_name, d.context);
  std::size_t lines = 0;
  for (const auto& f : d.frames)
    for (const auto& t : f.tensors)
      if (t.is_tensor && t.role != tensor_role::parameter) ++lines;
  out = fmt::format_to(out, "\n\nlast {} frames:\n", lines);
  for (const auto& f : d.frames) {
    detail::for_each_in_hf_order(f, [&](const tensor_record& t) {
      if (!t.is_tensor || t.role == tensor_role::parameter) return;
      const char c = t.role == tensor_role::input ? '>' : t.role == tensor_role::output ? '<' : '@';
      out = fmt::format_to(out, "abs_max= ");
      out = detail::format_e8(out, detail::hf_abs_max(t.health));
      if (f.checkpoint)
        out = fmt::format_to(out, " {} [{}] {}: {}\n", c, f.step, f.module_path, t.context);
      else
        out = fmt::format_to(out, " {} [{}] {}: {}: {}\n", c, f.step, f.module_path, f.class_name, t.context);
    });
  }
  return out;
}

namespace detail {
/// The bad segments of a detection's tensor checked with a segmentation, each with the frame that first held it
/// bad (detection::segment_origins), at most 16 lines:
///   2 of 64 requests hold inf/nan:
///     request 23 (rows 5-11): 1 NaN, 1 +inf, first at row 7; produced by 'blocks.1.attn' (Attention) output
template <class Out>
Out format_bad_segments(Out out, const detection& d) {
  const recorded_segments& rs = d.segmented;
  if (rs.bad.empty()) return out;
  constexpr std::size_t shown = 16;
  out = fmt::format_to(out, "\n  {} of {} {}{} hold{} inf/nan:", rs.bad.size(), rs.count, rs.unit_name(),
                       rs.count == 1 ? "" : "s", rs.bad.size() == 1 ? "s" : "");
  for (std::size_t i = 0; i < rs.bad.size() && i < shown; ++i) {
    const std::string line = segment_text(rs, rs.bad[i]);
    out = fmt::format_to(out, "\n    {}", line);
    for (const segment_origin& o : d.segment_origins) {
      if (o.id != rs.bad[i].id || o.frame >= d.frames.size()) continue;
      const frame& f = d.frames[o.frame];
      out = fmt::format_to(out, "; {} '{}'{}{}{} {}", o.produced ? "produced by" : "already bad in",
                           f.module_path.empty() ? "<root>" : f.module_path, f.class_name.empty() ? "" : " (",
                           f.class_name, f.class_name.empty() ? "" : ")", o.context);
      if (f.step != d.step) out = fmt::format_to(out, " at step {}", f.step);
      break;
    }
  }
  if (rs.bad.size() > shown) out = fmt::format_to(out, "\n    ... and {} more", rs.bad.size() - shown);
  return out;
}
}  // namespace detail

/// nanscope's extended report.
template <class Out>
Out format_extended_report(Out out, const detection& d) {
  out = fmt::format_to(out, "\n=== nanscope: inf/nan detected ===\nstep {}, {} ({}), {}:", d.step,
                       d.module_path.empty() ? "<root>" : d.module_path, d.class_name, d.context);
  if (d.health.neg_inf != 0) out = fmt::format_to(out, " -inf={}", d.health.neg_inf);
  if (d.health.pos_inf != 0) out = fmt::format_to(out, " +inf={}", d.health.pos_inf);
  if (d.health.nan != 0) out = fmt::format_to(out, " nan={}", d.health.nan);
  if (d.health.first_nonfinite >= 0) out = fmt::format_to(out, " (first at flat index {})", d.health.first_nonfinite);
  if (d.where.line != 0) out = fmt::format_to(out, "\n  at {}:{}", d.where.file, d.where.line);
  if (d.role == tensor_role::input || d.role == tensor_role::parameter)
    out = fmt::format_to(out, "\n  verdict: arrived already non-finite in {} (made upstream, by code that is not checked "
                              "between the previous frame and this one)",
                         d.context);
  else if (d.produced_here)
    out = fmt::format_to(out, "\n  verdict: PRODUCED here: every input of this call was finite, its {} is not", d.context);
  else
    out = fmt::format_to(out, "\n  verdict: propagated here: an input of this call was already non-finite");
  out = detail::format_bad_segments(out, d);
  out = fmt::format_to(out,
                       "\nlast {} frames, oldest first (abs min/max over non-NaN values; headroom = log2(format max / "
                       "abs_max) in bits, ! = crossed the warning threshold):",
                       d.frames.size());
  bool first_producer_seen = false;
  for (const auto& f : d.frames) {
    const bool producer = !f.checkpoint && f.produced_nonfinite();
    const bool carrier = !producer && (f.outputs_nonfinite() || !f.inputs_finite());
    out = fmt::format_to(out, "\n  [{}] {}{}{}", f.step, f.module_path.empty() ? "<root>" : f.module_path,
                         f.class_name.empty() ? "" : ": ", f.class_name);
    if (f.where.line != 0) out = fmt::format_to(out, "  ({}:{})", detail::short_file(f.where.file), f.where.line);
    if (producer && !first_producer_seen) out = fmt::format_to(out, "   <== PRODUCED the first inf/nan");
    else if (producer) out = fmt::format_to(out, "   <== produced inf/nan from finite inputs");
    else if (carrier) out = fmt::format_to(out, "   <-- carries inf/nan");
    first_producer_seen = first_producer_seen || producer;
    detail::for_each_in_hf_order(f, [&](const tensor_record& t) {
      out = fmt::format_to(out, "\n      {:<5} {:<14}", detail::role_name(t.role), t.context);
      if (t.is_none || !t.is_tensor) {
        out = fmt::format_to(out, " {}", t.is_none ? "None" : "not a tensor");
        return;
      }
      const health_result& h = t.health;
      out = fmt::format_to(out, " abs_min=");
      out = detail::format_e8(out, h.abs_min);
      out = fmt::format_to(out, " abs_max=");
      out = detail::format_e8(out, h.abs_max);
      if (!h.is_float()) {
        out = fmt::format_to(out, " n={} ({})", h.count, name(h.type));
        return;
      }
      out = fmt::format_to(out, " n={} neg={} zero={} pos={}", h.count, h.negative, h.zero, h.positive);
      if (h.nonfinite() != 0) out = fmt::format_to(out, " -inf={} +inf={} nan={}", h.neg_inf, h.pos_inf, h.nan);
      out = fmt::format_to(out, " |");
      out = detail::format_headroom(out, t);
      if (t.where.line != 0) out = fmt::format_to(out, " | {}:{}", detail::short_file(t.where.file), t.where.line);
      if (!t.segmented.bad.empty()) out = fmt::format_to(out, " | bad: {}", detail::segment_ids_text(t.segmented));
    });
  }
  return fmt::format_to(out, "\n\n");
}

/// The report of a detection in the given style, as a string.
inline std::string format_report(report_style style, const detection& d) {
  std::string s;
  auto it = std::back_inserter(s);
  switch (style) {
    case report_style::hf: format_hf_report(it, d); break;
    case report_style::hf_v1: format_hf_v1_report(it, d); break;
    case report_style::extended: format_extended_report(it, d); break;
  }
  return s;
}

/// The warning line for a tensor that crossed a low-precision threshold. A tensor whose abs_max is already past
/// the format's largest finite value (a negative headroom) gets a line that says so, with the numbers: at or
/// past the rounding boundary the cast WILL overflow (to inf, or to NaN in e4m3fn, which has no inf); between
/// the largest finite value and the boundary it rounds down to the largest value, with no headroom left.
inline std::string format_warning(const frame& f, const tensor_record& t, lp_format fmt_id, double threshold) {
  const dtype target = lp_dtype(fmt_id);
  const dtype_info& ti = info(target);
  const char* lp = detail::lp_name(fmt_id);
  const double amax = t.health.abs_max;
  const double headroom = headroom_bits(amax, target);
  const std::string site = fmt::format("nanscope: warning: step {} {}: {}: {} abs_max={:.3e}", f.step,
                                       f.module_path.empty() ? "<root>" : f.module_path, f.class_name, t.context,
                                       amax);
  const std::string where =
      t.where.line != 0 ? " at " + detail::short_file(t.where.file) + ":" + std::to_string(t.where.line) : "";
  if (!(amax > ti.max_finite))
    return fmt::format("{} >= {:.3e} ({} headroom {:.2f} bits){}\n", site, threshold, lp, headroom, where);
  // Round to nearest even: |x| at or past max_finite + ulp(max_finite) / 2 leaves the format (e4m3fn's tie at
  // 464 rounds down to 448: only values above it do).
  const double boundary = ti.max_finite + std::ldexp(1.0, std::ilogb(ti.max_finite) - ti.mantissa_bits - 1);
  const char* from = ti.has_inf ? ">=" : ">";
  const char* to = ti.has_inf ? "inf" : "NaN";
  if (amax >= ti.overflow_threshold)
    return fmt::format("{} is already past the largest finite {} value {:.6g}: the cast to {} WILL OVERFLOW (|x| {} "
                       "{:.6g} becomes {}{}; {} headroom {:.2f} bits){}\n",
                       site, lp, ti.max_finite, lp, from, boundary, to, ti.has_inf ? "" : ", it has no inf", lp,
                       headroom, where);
  return fmt::format("{} is past the largest finite {} value {:.6g} and rounds down to it: no headroom left, any "
                     "growth overflows (|x| {} {:.6g} becomes {}; {} headroom {:.2f} bits){}\n",
                     site, lp, ti.max_finite, from, boundary, to, lp, headroom, where);
}

namespace detail {
inline std::string trace_to_string(const frame& f, bool banner) {
  std::string s;
  format_hf_trace(std::back_inserter(s), f, banner);
  return s;
}
inline bool install_report_printers() {
  report_formatter().store(&format_report);
  trace_formatter().store(&trace_to_string);
  warning_formatter().store(&format_warning);
  return true;
}
/// Installs the printers when any translation unit includes this header.
inline const bool report_printers_installed = install_report_printers();
}  // namespace detail

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_REPORT_HPP
