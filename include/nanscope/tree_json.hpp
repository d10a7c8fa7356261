// nanscope — tree_json.hpp: the JSON text primitives of the layer tree (tree.hpp): strings, numbers and the
// indent=2 layout exactly as Python's json.dump writes them, and the text of one input/output for both files.
#ifndef NANSCOPE_TREE_JSON_HPP
#define NANSCOPE_TREE_JSON_HPP

#include "config.hpp"
#include "dtype.hpp"

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// A JSON string literal as Python's json.dumps writes it (ensure_ascii): \" \\ \n \r \t \b \f named, other
/// control characters and DEL as \u00XX, every non-ASCII character as \uXXXX (surrogate pairs above U+FFFF).
/// Bytes that are not valid UTF-8 become \ufffd, so the result is always valid JSON.
inline void py_json_quote_to(std::string& out, std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  auto u16 = [&](unsigned cp) {
    out += "\\u";
    out += hex[(cp >> 12) & 15];
    out += hex[(cp >> 8) & 15];
    out += hex[(cp >> 4) & 15];
    out += hex[cp & 15];
  };
  out += '"';
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        default:
          if (c < 0x20 || c == 0x7F) u16(c);
          else out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // Invalid UTF-8 becomes U+FFFD once per maximal subpart (Unicode's recommended practice, what Python's
    // bytes.decode("utf-8", "replace") does): a lead byte and the continuation bytes that could still have
    // completed it.
    const std::size_t len = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
    std::size_t got = 1;
    while (len != 0 && got < len && i + got < n) {
      const unsigned char b = p[i + got];
      unsigned char lo = 0x80, hi = 0xBF;
      if (got == 1) {
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;  // no surrogates
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
      }
      if (b < lo || b > hi) break;
      ++got;
    }
    if (len == 0 || got < len) {
      u16(0xFFFD);
      i += got;
      continue;
    }
    unsigned cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3Fu);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      u16(0xD800 + (cp >> 10));
      u16(0xDC00 + (cp & 0x3FF));
    } else {
      u16(cp);
    }
    i += len;
  }
  out += '"';
}
inline std::string py_json_quote(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  py_json_quote_to(out, s);
  return out;
}

/// A JSON number for x as Python's repr() writes a float ("7.0", "0.0001", "1e-05", "1.5e+16"), from the
/// shortest digits that round-trip — for the value's own type when it is no wider than float ("0.1" for 0.1f).
/// Non-finite values become the strings "nan", "inf", "-inf".
inline std::string json_number(double x, bool as_float) {
  const std::uint64_t b = double_to_bits(x);
  if ((b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull) {
    if ((b & 0x000FFFFFFFFFFFFFull) != 0) return "\"nan\"";
    return (b >> 63) ? "\"-inf\"" : "\"inf\"";
  }
  char buf[64];
  std::to_chars_result r = as_float ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(x), std::chars_format::scientific)
                                    : std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  // buf: [-]d[.ddd]e[+-]XX
  const char* p = buf;
  std::string out;
  if (*p == '-') {
    out += '-';
    ++p;
  }
  std::string digits;
  const char* q = p;
  for (; q < r.ptr && *q != 'e'; ++q)
    if (*q != '.') digits += *q;
  int e10 = 0;
  (void)std::from_chars(q + 1 + (q[1] == '+' ? 1 : 0), r.ptr, e10);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  if (e10 >= -4 && e10 < 16) {
    if (e10 >= 0) {
      const std::size_t int_len = static_cast<std::size_t>(e10) + 1;
      if (digits.size() <= int_len) {
        out += digits;
        out.append(int_len - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_len);
        out += '.';
        out += digits.substr(int_len);
      }
    } else {
      out += "0.";
      out.append(static_cast<std::size_t>(-e10 - 1), '0');
      out += digits;
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  out += e10 < 0 ? "e-" : "e+";
  const int a = e10 < 0 ? -e10 : e10;
  if (a < 10) out += '0';
  out += std::to_string(a);
  return out;
}

/// Appends a JSON fragment rendered at indentation level 0, re-indented to `level`.
inline void append_at(std::string& out, const std::string& frag, int level) {
  const std::size_t pad = static_cast<std::size_t>(level) * 2;
  std::size_t b = 0;
  for (std::size_t nl = frag.find('\n'); nl != std::string::npos; nl = frag.find('\n', b)) {
    out.append(frag, b, nl + 1 - b);
    out.append(pad, ' ');
    b = nl + 1;
  }
  out.append(frag, b, std::string::npos);
}
/// Python json.dump(indent=2) layout of an array / object whose items are fragments at level 0.
inline std::string py_array(const std::vector<std::string>& items) {
  if (items.empty()) return "[]";
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += i ? ",\n  " : "\n  ";
    append_at(out, items[i], 1);
  }
  return out + "\n]";
}
inline std::string py_object(const std::vector<std::pair<std::string, std::string>>& items) {
  if (items.empty()) return "{}";
  std::string out = "{";
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += i ? ",\n  " : "\n  ";
    py_json_quote_to(out, items[i].first);
    out += ": ";
    append_at(out, items[i].second, 1);
  }
  return out + "\n}";
}

inline std::string indent(int level) {
  std::string s = "\n";
  s.append(static_cast<std::size_t>(level) * 2, ' ');
  return s;
}

/// One serialised input/output: a tensor or a non-tensor's text.
struct tree_io {
  bool is_tensor = false;
  std::string name;  ///< kwargs name / output context
  std::string text;  ///< non-tensor: the JSON string
  std::string shape, type;                 ///< JSON fragments (level 0)
  std::string value;                       ///< FULL only: JSON fragment (level 0); empty when not written
  std::vector<std::pair<const char*, std::string>> fields;  ///< statistics and extras, JSON fragments (level 0)

  void render(std::string& out, int level, bool full) const {
    if (!is_tensor) {
      out += text;
      return;
    }
    const std::string in1 = indent(level + 1);
    out += '{';
    out += in1;
    out += "\"shape\": ";
    append_at(out, shape, level + 1);
    out += ',';
    out += in1;
    out += "\"dtype\": ";
    out += type;
    if (full && !value.empty()) {
      out += ',';
      out += in1;
      out += "\"value\": ";
      append_at(out, value, level + 1);
    }
    for (const auto& f : fields) {
      out += ',';
      out += in1;
      out += '"';
      out += f.first;
      out += "\": ";
      append_at(out, f.second, level + 1);
    }
    out += indent(level);
    out += '}';
  }
};

/// Text for both files at once (only for the files being written).
struct tree_text {
  std::string summary, full;
  bool with_summary = true, with_full = true;
  void add(std::string_view s) {
    if (with_summary) summary.append(s.data(), s.size());
    if (with_full) full.append(s.data(), s.size());
  }
  void add(const tree_text& t) {
    summary += t.summary;
    full += t.full;
  }
  void add_io(const tree_io& io, int level) {
    if (with_summary) io.render(summary, level, false);
    if (with_full) io.render(full, level, true);
  }
  std::size_t size() const { return summary.size() + full.size(); }
  bool empty() const { return summary.empty() && full.empty(); }
  void clear() {
    summary.clear();
    full.clear();
  }
};

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_TREE_JSON_HPP
