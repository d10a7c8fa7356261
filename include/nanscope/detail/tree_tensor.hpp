// nanscope — detail/tree_tensor.hpp: one tensor of the layer tree as JSON text: shape, dtype, value, torch's
// statistics and, with extras, nanscope's health keys (the writer's model of a pass is tree.hpp's).
#ifndef NANSCOPE_DETAIL_TREE_TENSOR_HPP
#define NANSCOPE_DETAIL_TREE_TENSOR_HPP

#include "../config.hpp"
#include "../check.hpp"
#include "../dtype.hpp"
#include "../hash.hpp"
#include "../health.hpp"
#include "../frame.hpp"
#include "../margins.hpp"
#include "../tree_json.hpp"
#include "../tree_options.hpp"
#include "../view.hpp"
#include "torch_print.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// The Python tool's address sanitiser: "object at 0x<hex>" becomes "object at 0xXXXXXXXX".
inline std::string sanitize_addresses(std::string_view s) {
  static const std::string_view key = "object at 0x";
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    const std::size_t at = s.find(key, i);
    if (at == std::string_view::npos) break;
    std::size_t j = at + key.size();
    std::size_t k = j;
    while (k < s.size() && ((s[k] >= '0' && s[k] <= '9') || (s[k] >= 'a' && s[k] <= 'f') || (s[k] >= 'A' && s[k] <= 'F'))) ++k;
    out.append(s.substr(i, j - i));
    if (k > j) {
      out += "XXXXXXXX";
      i = k;
    } else {
      i = j;
    }
  }
  out.append(s.substr(i));
  return out;
}

/// Nested arrays of the values torch would show ("..." where it summarises).
inline std::string tree_numeric_value(const tensor_view& v, const torch_print_options& po) {
  const element_reader rd(v);
  const bool summarize = v.numel() > po.threshold;
  const bool as_float = size_of(v.type) <= 4;
  auto one = [&](std::int64_t off) -> std::string {
    if (v.type == dtype::boolean) return rd.bits(off) != 0 ? "true" : "false";
    if (!is_float(v.type)) return rd.as_int_text(off);
    return json_number(rd.as_double(off), as_float);
  };
  if (v.rank == 0) return one(0);
  struct rec_t {
    const tensor_view& v;
    const torch_print_options& po;
    bool summarize;
    decltype(one)& f;
    std::string run(int d, std::int64_t off) {
      std::vector<std::string> items;
      for (std::int64_t i : torch_shown_indices(v.shape[d], summarize, po.edge_items)) {
        if (i < 0) {
          items.emplace_back("\"...\"");
          continue;
        }
        const std::int64_t o = off + i * v.strides[d];
        items.push_back(d + 1 == v.rank ? f(o) : run(d + 1, o));
      }
      return py_array(items);
    }
  } r{v, po, summarize, one};
  return r.run(0, 0);
}

/// The bad segments of a tensor recorded with a segmentation (extras only), by ascending index:
///   [{"unit": "request", "index": 1, "id": 23, "rows": [5, 11], "nan": 2, "pos_inf": 1, "neg_inf": 0,
///     "first": 6, "first_flat": 49}]
/// "rows" (or "elements" for element segments) holds the first and the last row of the segment; "first" the row
/// (element) of its first NaN/Inf, "first_flat" its flat index in the tensor.
inline std::string tree_segments_json(const recorded_segments& rs) {
  std::vector<std::string> items;
  const bool rows = rs.axis == segment_axis::rows;
  for (const segment_health& s : rs.bad) {
    const std::string range = py_array({std::to_string(rs.unit_of(static_cast<std::int64_t>(s.begin))),
                                        std::to_string(rs.unit_of(static_cast<std::int64_t>(s.end)) - 1)});
    items.push_back(py_object({{"unit", py_json_quote(rs.unit_name())},
                               {"index", std::to_string(s.index)},
                               {"id", std::to_string(s.id)},
                               {rows ? "rows" : "elements", range},
                               {"nan", std::to_string(s.nan)},
                               {"pos_inf", std::to_string(s.pos_inf)},
                               {"neg_inf", std::to_string(s.neg_inf)},
                               {"first", std::to_string(rs.unit_of(s.first_nonfinite))},
                               {"first_flat", std::to_string(s.first_nonfinite)}}));
  }
  return py_array(items);
}

/// What quantizing a tensor to its block-scaled target(s) would lose (extras only):
///   {"rule": "ocp", "axis": 1, "warn_lossy_fraction": 0.01, "formats": [{"format": "mxfp4", "block_size": 32,
///    "blocks": 32, "elements": 1024, "lossy_blocks": 1, "lossy_fraction": 0.03125, "clipped": 1, "flushed": 31,
///    "subnormal": 0, "zero_blocks": 0, "nan_blocks": 0, "zero_scale_blocks": 0, "warned": true, "warn_threshold": 0.01,
///    "scale_exp": {"min": -9, "max": 7, "mean": -8.5, "std": 2.83, "histogram": [[-9, 31], [7, 1]]},
///    "worst": {"index": 0, "first_element": 0, "elements": 32, "abs_max": 900, "scale": "2^7", "scale_byte": 134,
///              "clipped": 1, "flushed": 31, "error_max_abs": 132, "error_rms": 23.3}}]}
/// "scale_exp" is absent when no block has a finite non-zero scale (its "std" with fewer than two such blocks);
/// "worst" when no block loses a value; "warn_lossy_fraction" when the target's threshold is automatic (each
/// format's "warn_threshold" is the one in effect); NVFP4 adds "tensor_scale".
inline std::string tree_block_scaled_json(const recorded_block_scaled& kb) {
  std::vector<std::string> formats;
  for (const block_format_stats& s : kb.formats) {
    std::vector<std::pair<std::string, std::string>> f = {
        {"format", py_json_quote(name(s.format))},
        {"block_size", std::to_string(s.block_size)},
        {"blocks", std::to_string(s.blocks)},
        {"elements", std::to_string(s.elements)},
        {"lossy_blocks", std::to_string(s.lossy_blocks)},
        {"lossy_fraction", json_number(s.lossy_fraction(), false)},
        {"clipped", std::to_string(s.clipped)},
        {"flushed", std::to_string(s.flushed)},
        {"subnormal", std::to_string(s.subnormal)},
        {"zero_blocks", std::to_string(s.zero_blocks)},
        {"nan_blocks", std::to_string(s.nan_blocks)},
        {"zero_scale_blocks", std::to_string(s.zero_scale_blocks)},
        {"warned", ((kb.warned >> static_cast<unsigned>(s.format)) & 1u) != 0 ? "true" : "false"},
        {"warn_threshold", json_number(block_warn_threshold(kb.warn_lossy_fraction, s.format, s.rule), false)}};
    if (!info(s.format).mx) f.emplace_back("tensor_scale", json_number(static_cast<double>(s.tensor_scale), true));
    if (is_finite_bits(s.scale_exp_mean)) {
      std::vector<std::string> bins;
      for (int x = -127; x <= 128; ++x)
        if (const std::uint64_t c = s.at(x)) bins.push_back(py_array({std::to_string(x), std::to_string(c)}));
      std::vector<std::pair<std::string, std::string>> e = {{"min", std::to_string(s.scale_exp_min)},
                                                             {"max", std::to_string(s.scale_exp_max)},
                                                             {"mean", json_number(s.scale_exp_mean, false)}};
      if (is_finite_bits(s.scale_exp_std)) e.emplace_back("std", json_number(s.scale_exp_std, false));  // 2+ blocks
      e.emplace_back("histogram", py_array(bins));
      f.emplace_back("scale_exp", py_object(e));
    }
    const block_worst& w = s.worst;
    if (w.index >= 0)
      f.emplace_back("worst", py_object({{"index", std::to_string(w.index)},
                                         {"first_element", std::to_string(w.first_element)},
                                         {"elements", std::to_string(w.elements)},
                                         {"abs_max", json_number(w.abs_max, false)},
                                         {"scale", py_json_quote(block_scale_text(s.format, w.scale))},
                                         {"scale_byte", std::to_string(w.scale)},
                                         {"clipped", std::to_string(w.clipped)},
                                         {"flushed", std::to_string(w.flushed)},
                                         {"error_max_abs", json_number(w.error_max_abs, false)},
                                         {"error_rms", json_number(w.error_rms, false)}}));
    formats.push_back(py_object(f));
  }
  std::vector<std::pair<std::string, std::string>> top = {{"rule", py_json_quote(name(kb.rule))},
                                                           {"axis", std::to_string(kb.axis)}};
  if (!is_nan_bits(kb.warn_lossy_fraction))  // as given; absent: automatic (each format's warn_threshold)
    top.emplace_back("warn_lossy_fraction", json_number(kb.warn_lossy_fraction, false));
  top.emplace_back("formats", py_array(formats));
  return py_object(top);
}

inline void describe_tree_tensor(tree_io& io, const tensor_record& rec, const tree_options& opts) {
  io.is_tensor = true;
  const tensor_view& v = rec.view;
  const bool torch = opts.style == tree_style::torch_repr;
  torch_print_options po;
  po.threshold = opts.value_threshold;
  po.edge_items = opts.edge_items < 1 ? 1 : opts.edge_items;  // torch's edgeitems=0 mode is not reproduced
  po.line_width = opts.line_width;
  po.precision = opts.precision;
  const health_result* h = &rec.health;
  health_result own;
  const bool readable = v.data != nullptr && (v.space == memory_space::host || v.space == memory_space::cuda_pinned ||
                                              v.space == memory_space::cuda_managed);
  const bool want_hash = opts.hash && opts.extras && readable;
  if (is_float(v.type) && h->mode != check_mode::stats && readable) {
    own = (check)(v, check_options{}.with_mode(check_mode::stats).with_hash(want_hash));
    h = &own;
  }
  if (torch) {
    io.shape = py_json_quote(torch_size_repr(v));
    io.type = py_json_quote(info(v.type).torch_name);
  } else {
    std::vector<std::string> dims;
    for (int i = 0; i < v.rank; ++i) dims.push_back(std::to_string(v.shape[i]));
    io.shape = py_array(dims);
    io.type = py_json_quote(info(v.type).torch_name);
  }
  if (opts.write_full && readable) {
    if (torch) {
      const std::string text = torch_tensor_repr(v, po);
      std::vector<std::string> lines;
      std::size_t b = 0;
      while (true) {
        const std::size_t e = text.find('\n', b);
        lines.push_back(py_json_quote(text.substr(b, e == std::string::npos ? std::string::npos : e - b)));
        if (e == std::string::npos) break;
        b = e + 1;
      }
      io.value = py_array(lines);
    } else {
      io.value = tree_numeric_value(v, po);
    }
  }
  const bool hf_stats = v.type == dtype::f16 || v.type == dtype::f32 || v.type == dtype::bf16;
  if (is_float(v.type) && (torch ? hf_stats : true)) {
    torch_stats s = torch_stats_of(*h, torch);
    if (rec.reference.known) {  // the framework's own reduction (LibTorch adapter): its digits, not ours
      s.mean = rec.reference.mean;
      s.std = rec.reference.std;
    }
    if (torch) {
      io.fields.emplace_back("mean", py_json_quote(torch_scalar_repr(s.mean, v.type, v, po)));
      io.fields.emplace_back("std", py_json_quote(torch_scalar_repr(s.std, v.type, v, po)));
      io.fields.emplace_back("min", py_json_quote(torch_scalar_repr(s.min, v.type, v, po)));
      io.fields.emplace_back("max", py_json_quote(torch_scalar_repr(s.max, v.type, v, po)));
    } else {
      io.fields.emplace_back("mean", json_number(s.mean, false));
      io.fields.emplace_back("std", json_number(s.std, false));
      io.fields.emplace_back("min", json_number(s.min, size_of(v.type) <= 4));
      io.fields.emplace_back("max", json_number(s.max, size_of(v.type) <= 4));
    }
  }
  if (!opts.extras) return;
  if (is_float(v.type)) {
    io.fields.emplace_back("health", py_object({{"negative", std::to_string(h->negative)},
                                                        {"zero", std::to_string(h->zero)},
                                                        {"positive", std::to_string(h->positive)},
                                                        {"neg_inf", std::to_string(h->neg_inf)},
                                                        {"pos_inf", std::to_string(h->pos_inf)},
                                                        {"nan", std::to_string(h->nan)}}));
    const bool narrow = size_of(v.type) <= 4;
    io.fields.emplace_back("abs_max", json_number(h->abs_max, narrow));
    io.fields.emplace_back("abs_min_nonzero", json_number(h->abs_min_nonzero, narrow));
    if (is_finite_bits(h->abs_max)) {
      std::vector<std::pair<std::string, std::string>> hr;
      static const dtype targets[] = {dtype::f16, dtype::bf16, dtype::f8_e4m3fn, dtype::f8_e5m2};
      for (dtype t : targets) hr.emplace_back(name(t), json_number(headroom_bits(h->abs_max, t), false));
      io.fields.emplace_back("headroom_bits", py_object(hr));
    }
    if (h->first_nonfinite >= 0) io.fields.emplace_back("first_nonfinite", std::to_string(h->first_nonfinite));
    if (!rec.segmented.bad.empty()) io.fields.emplace_back("nanscope_segments", tree_segments_json(rec.segmented));
    if (rec.block_scaled.applied) io.fields.emplace_back("nanscope_block_scaled", tree_block_scaled_json(rec.block_scaled));
  } else if (is_finite_bits(h->abs_max)) {
    io.fields.emplace_back("abs_max", json_number(h->abs_max, false));
  }
  if (want_hash) {  // fused into the pass above when it ran, else a hashing pass of its own
    const content_hash ch =
        h->hash.valid ? h->hash : (check)(v, check_options{}.with_mode(check_mode::no_tensor).with_hash()).hash;
    io.fields.emplace_back("hash", py_json_quote(to_hex(ch)));
  }
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_TREE_TENSOR_HPP
