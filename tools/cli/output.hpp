// nanscope CLI — output.hpp: the text line and the JSON object of one tensor, and the escaping both need.
// Non-finite doubles never reach fmt (it asserts on them under -ffast-math): they are spelled out here.
#ifndef NANSCOPE_CLI_OUTPUT_HPP
#define NANSCOPE_CLI_OUTPUT_HPP

#include "scan.hpp"

#include <nanscope/health.hpp>
#include <nanscope/safetensors.hpp>

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace nanscope_cli {

/// The code point of the valid UTF-8 sequence of `len` bytes at s[i].
inline unsigned code_point(std::string_view s, std::size_t i, std::size_t len) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned>(static_cast<unsigned char>(s[i + k])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    case 3: return ((b(0) & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    default: return ((b(0) & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
  }
}

/// Characters escaped even though they are valid: C0 and C1 controls, DEL (terminals act on them), and the
/// Unicode line and paragraph separators (line splitters such as Python's splitlines() break lines there).
inline bool must_escape(unsigned cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029;
}

/// Text for humans: invalid UTF-8 bytes as \xNN, the characters of must_escape() as \xNN or \u{NNNN}; the
/// rest kept as it is.
inline std::string text_escape(std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = nanscope::detail::utf8_sequence(s, i);
    const unsigned cp = len == 0 ? 0 : code_point(s, i, len);
    if (len == 0 || cp < 0x100) {
      if (len == 0 || must_escape(cp)) {
        const unsigned v = len == 0 ? c : cp;
        out += "\\x";
        out += hex[v >> 4];
        out += hex[v & 15];
      } else {
        out.append(s.substr(i, len));
      }
      i += len == 0 ? 1 : len;
    } else {
      if (must_escape(cp)) out += fmt::format("\\u{{{:04x}}}", cp);
      else out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

/// A JSON string literal (RFC 8259): quotes, backslashes, control characters and the characters of must_escape()
/// escaped; invalid UTF-8 bytes (possible in file paths) become U+FFFD, so the output is always valid UTF-8 JSON
/// and one object is always one line.
inline std::string json_string(std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = nanscope::detail::utf8_sequence(s, i);
    if (len == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        const unsigned cp = code_point(s, i, len);
        if (must_escape(cp)) {
          out += "\\u";
          out += hex[(cp >> 12) & 15];
          out += hex[(cp >> 8) & 15];
          out += hex[(cp >> 4) & 15];
          out += hex[cp & 15];
        } else {
          out.append(s.substr(i, len));
        }
      }
    }
    i += len;
  }
  out += '"';
  return out;
}

/// A double for JSON: the shortest round-trip form when finite; "inf" / "-inf" as strings; null for NaN (the
/// library's "no value": the statistic has nothing to range over).
inline std::string json_number(double x) {
  const std::uint64_t b = nanscope::detail::double_to_bits(x);
  const std::uint64_t a = b & 0x7FFFFFFFFFFFFFFFull;
  if (a > 0x7FF0000000000000ull) return "null";
  if (a == 0x7FF0000000000000ull) return (b >> 63) ? "\"-inf\"" : "\"inf\"";
  return fmt::format("{}", x);
}

/// A double for the text line: 4 significant digits; inf, -inf, nan spelled out.
inline std::string text_number(double x, const char* spec = "{:.4g}") {
  const std::uint64_t b = nanscope::detail::double_to_bits(x);
  const std::uint64_t a = b & 0x7FFFFFFFFFFFFFFFull;
  if (a > 0x7FF0000000000000ull) return "nan";
  if (a == 0x7FF0000000000000ull) return (b >> 63) ? "-inf" : "inf";
  return fmt::format(fmt::runtime(spec), x);
}

inline std::string shape_text(const tensor_report& r) {
  std::string s = "[";
  for (int i = 0; i < r.rank; ++i) {
    if (i != 0) s += ',';
    s += std::to_string(r.shape[i]);
  }
  return s + "]";
}

/// The multi-dimensional (row-major) index of the element at flat index `flat` of the tensor, as the demo and
/// the docs write it: "[2, 517]" in a [4, 1000] tensor, "[5]" in a 1-d one, "[]" in a 0-d one.
inline std::string index_text(const tensor_report& r, std::int64_t flat, const char* sep = ", ") {
  std::int64_t idx[nanscope::max_rank] = {};
  std::int64_t rest = flat;
  for (int d = r.rank - 1; d >= 0; --d) {
    if (r.shape[d] <= 0) return "[]";  // an empty tensor has no element (never asked)
    idx[d] = rest % r.shape[d];
    rest /= r.shape[d];
  }
  std::string s = "[";
  for (int d = 0; d < r.rank; ++d) {
    if (d != 0) s += sep;
    s += std::to_string(idx[d]);
  }
  return s + "]";
}

/// Which margin targets fail the run when a cast would overflow (--fail-on-overflow).
using target_mask = std::array<bool, target_count>;

inline bool overflow_fails(const tensor_report& r, const target_mask& fail_on) {
  if (!r.checked()) return false;
  for (std::size_t k = 0; k < target_count; ++k)
    if (fail_on[k] && r.overflow[k] != 0) return true;
  return false;
}

inline const char* status_of(const tensor_report& r, const target_mask& fail_on) {
  if (r.nonfinite()) return "nonfinite";
  if (overflow_fails(r, fail_on)) return "overflow";
  return "ok";
}

/// The text line of one scanned tensor (no newline).
inline std::string text_line(const tensor_report& r, const target_mask& fail_on) {
  std::string s = text_escape(r.file);
  if (r.has_name) s += " " + nanscope::detail::st_quote(r.name, ~std::size_t{0});
  s += ": ";
  if (r.packed) {
    // "F4[4096,4096] mxfp4 scales='x.weight_scale'": the file's dtype, the format it was read as, its scales
    s += text_escape(r.file_dtype) + shape_text(r) + " " + r.packed_kind;
    if (!r.scale_name.empty()) s += " scales=" + nanscope::detail::st_quote(r.scale_name, ~std::size_t{0});
    if (!r.tensor_scale_name.empty())
      s += " tensor_scale=" + nanscope::detail::st_quote(r.tensor_scale_name, ~std::size_t{0}) + "(" +
           text_number(static_cast<double>(r.tensor_scale), "{:.6g}") + ")";
  } else {
    s += nanscope::name(r.type);
    s += shape_text(r);
  }
  if (r.expert >= 0) s += " expert=" + std::to_string(r.expert);
  s += " n=" + std::to_string(r.count);
  if (!nanscope::is_float(r.type)) return s + " (integer data: no NaN/Inf) ok";
  const nanscope::health_result& h = r.health;
  s += fmt::format(" nan={} +inf={} -inf={} neg={} zero={} pos={} sub={}", h.nan, h.pos_inf, h.neg_inf, h.negative,
                   h.zero, h.positive, h.subnormal);
  // the multi-dimensional index, and the flat one when they differ (rank 2 and more): "[2, 517] (flat 2517)"
  if (h.first_nonfinite >= 0) {
    s += " first_nonfinite=" + index_text(r, h.first_nonfinite);
    if (r.rank >= 2) s += " (flat " + std::to_string(h.first_nonfinite) + ")";
  }
  s += " |x|max=" + text_number(h.abs_max);
  if (h.mode == nanscope::check_mode::stats)
    s += " min=" + text_number(h.min) + " max=" + text_number(h.max) + " mean=" + text_number(h.mean) +
         " std=" + text_number(h.std);
  if (r.has_blocks) {
    const nanscope::block_format_stats& b = r.blocks;
    s += fmt::format(" blocks={} nan_scales={} zero_blocks={} lossy_blocks={} at_max={}", b.blocks, r.nan_scales, b.zero_blocks,
                     b.lossy_blocks, b.clipped);
    if (!nanscope::detail::is_nan_bits(b.scale_exp_mean))
      s += fmt::format(" scale_exp=[{},{}] mean={} std={}", b.scale_exp_min, b.scale_exp_max, text_number(b.scale_exp_mean),
                       text_number(b.scale_exp_std));
  }
  s += " headroom";
  for (std::size_t k = 0; k < target_count; ++k) {
    s += ' ';
    s += nanscope::name(nanscope::margin_targets[k]);
    s += '=';
    const double hb = r.headroom[k];
    if (nanscope::detail::is_nan_bits(hb)) s += "n/a";                                  // empty or all-NaN
    else if (nanscope::detail::is_finite_bits(hb)) s += text_number(hb, "{:+.1f}") + "b";  // bits
    else s += text_number(hb);                                                            // inf / -inf
    if (r.overflow[k] != 0) s += "(" + std::to_string(r.overflow[k]) + " overflow)";
  }
  s += r.nonfinite() ? " NONFINITE" : overflow_fails(r, fail_on) ? " OVERFLOW" : " ok";
  return s;
}

/// The JSON object of one scanned tensor (one line, no newline). Schema: docs/cli.md.
inline std::string json_tensor(const tensor_report& r, const target_mask& fail_on) {
  const nanscope::health_result& h = r.health;
  const bool fl = r.checked();
  auto count_or_null = [&](std::uint64_t v) { return fl ? std::to_string(v) : std::string("null"); };
  std::string s = "{\"kind\":\"tensor\",\"file\":" + json_string(r.file);
  s += ",\"name\":" + (r.has_name ? json_string(r.name) : std::string("null"));
  s += ",\"dtype\":" + json_string(r.packed ? r.packed_kind.c_str() : nanscope::name(r.type));
  s += ",\"file_dtype\":" + json_string(r.file_dtype);
  s += ",\"shape\":[";
  for (int i = 0; i < r.rank; ++i) s += (i != 0 ? "," : "") + std::to_string(r.shape[i]);
  s += "],\"count\":" + std::to_string(r.count);
  s += ",\"checked\":";
  s += fl ? "true" : "false";
  s += ",\"nan\":" + (fl ? std::to_string(h.nan) : std::string("0"));
  s += ",\"pos_inf\":" + (fl ? std::to_string(h.pos_inf) : std::string("0"));
  s += ",\"neg_inf\":" + (fl ? std::to_string(h.neg_inf) : std::string("0"));
  s += ",\"negative\":" + count_or_null(h.negative);
  s += ",\"zero\":" + count_or_null(h.zero);
  s += ",\"positive\":" + count_or_null(h.positive);
  s += ",\"subnormal\":" + count_or_null(h.subnormal);
  s += ",\"first_nonfinite\":" + (fl && h.first_nonfinite >= 0 ? std::to_string(h.first_nonfinite) : std::string("null"));
  s += ",\"first_nonfinite_index\":" +
       (fl && h.first_nonfinite >= 0 ? index_text(r, h.first_nonfinite, ",") : std::string("null"));  // [2,517]
  s += ",\"abs_max\":" + (fl ? json_number(h.abs_max) : std::string("null"));
  if (h.mode == nanscope::check_mode::stats) {
    s += ",\"min\":" + (fl ? json_number(h.min) : std::string("null"));
    s += ",\"max\":" + (fl ? json_number(h.max) : std::string("null"));
    s += ",\"mean\":" + (fl ? json_number(h.mean) : std::string("null"));
    s += ",\"std\":" + (fl ? json_number(h.std) : std::string("null"));
  }
  s += ",\"formats\":";
  if (!fl) {
    s += "null";
  } else {
    s += "{";
    for (std::size_t k = 0; k < target_count; ++k) {
      if (k != 0) s += ",";
      s += json_string(nanscope::name(nanscope::margin_targets[k]));
      s += ":{\"headroom_bits\":" + json_number(r.headroom[k]) + ",\"overflow\":" + std::to_string(r.overflow[k]) + "}";
    }
    s += "}";
  }
  if (r.expert >= 0) s += ",\"expert\":" + std::to_string(r.expert);
  if (r.packed) {
    // packed block-scaled tensors (docs/cli.md): what was paired, and the per-block statistics
    s += ",\"packed\":{\"scales\":" + (r.scale_name.empty() ? std::string("null") : json_string(r.scale_name));
    s += ",\"tensor_scale_name\":" + (r.tensor_scale_name.empty() ? std::string("null") : json_string(r.tensor_scale_name));
    s += ",\"tensor_scale\":" + json_number(static_cast<double>(r.tensor_scale));
    if (r.has_blocks) {
      const nanscope::block_format_stats& b = r.blocks;
      s += fmt::format(",\"block_size\":{},\"blocks\":{},\"nan_scales\":{},\"nan_blocks\":{},\"zero_blocks\":{},"
                       "\"zero_scale_blocks\":{},\"lossy_blocks\":{},\"at_max\":{}",
                       b.block_size, b.blocks, r.nan_scales, b.nan_blocks, b.zero_blocks, b.zero_scale_blocks, b.lossy_blocks,
                       b.clipped);
      const bool has_exp = !nanscope::detail::is_nan_bits(b.scale_exp_mean);
      s += ",\"scale_exp_min\":" + (has_exp ? std::to_string(b.scale_exp_min) : std::string("null"));
      s += ",\"scale_exp_max\":" + (has_exp ? std::to_string(b.scale_exp_max) : std::string("null"));
      s += ",\"scale_exp_mean\":" + json_number(b.scale_exp_mean);
      s += ",\"scale_exp_std\":" + json_number(b.scale_exp_std);
    }
    s += "}";
  }
  s += ",\"status\":" + json_string(status_of(r, fail_on)) + "}";
  return s;
}

/// The text line of one expert's totals (no newline).
inline std::string text_expert(const expert_report& e) {
  std::string s = text_escape(e.file) + " expert " + std::to_string(e.expert) + ": " + std::to_string(e.tensors) + " tensor" +
                  (e.tensors == 1 ? "" : "s") + " (" + std::to_string(e.packed) + " packed)";
  s += fmt::format(" nan={} inf={} nan_scales={} blocks={} lossy_blocks={} |x|max={}", e.nan, e.inf, e.nan_scales, e.blocks,
                   e.lossy_blocks, text_number(e.abs_max));
  if (e.has_scale_exp) s += fmt::format(" scale_exp=[{},{}]", e.scale_exp_min, e.scale_exp_max);
  s += e.nonfinite_tensors != 0 ? " NONFINITE" : " ok";
  return s;
}

/// The JSON object of one expert's totals (one line).
inline std::string json_expert(const expert_report& e) {
  std::string s = "{\"kind\":\"expert\",\"file\":" + json_string(e.file) + ",\"expert\":" + std::to_string(e.expert);
  s += fmt::format(",\"tensors\":{},\"packed\":{},\"nonfinite_tensors\":{},\"nan\":{},\"inf\":{},\"nan_scales\":{},"
                   "\"blocks\":{},\"lossy_blocks\":{}",
                   e.tensors, e.packed, e.nonfinite_tensors, e.nan, e.inf, e.nan_scales, e.blocks, e.lossy_blocks);
  s += ",\"abs_max\":" + json_number(e.abs_max);
  s += ",\"scale_exp_min\":" + (e.has_scale_exp ? std::to_string(e.scale_exp_min) : std::string("null"));
  s += ",\"scale_exp_max\":" + (e.has_scale_exp ? std::to_string(e.scale_exp_max) : std::string("null"));
  s += ",\"status\":" + json_string(e.nonfinite_tensors != 0 ? "nonfinite" : "ok") + "}";
  return s;
}

}  // namespace nanscope_cli

#endif  // NANSCOPE_CLI_OUTPUT_HPP
