// nanscope-diff — names.hpp: how names of any bytes (file paths, module paths, labels) are shown: valid UTF-8
// for the JSON report (invalid bytes become U+FFFD, like nanscope's tree writer and Python's errors="replace"),
// and terminal-safe text for the text report and messages (control characters escaped, never printed raw).
#ifndef NANSCOPE_DIFF_NAMES_HPP
#define NANSCOPE_DIFF_NAMES_HPP

#include <cstddef>
#include <string>
#include <string_view>

namespace nsdiff {

/// Length of the valid UTF-8 sequence at s[i] (1-4), or 0 when the bytes there do not form one. `got` is set to
/// the length of the maximal subpart that was looked at (the lead byte and the continuation bytes that could
/// still have completed it): what Unicode's recommended practice replaces by one U+FFFD.
inline std::size_t utf8_at(std::string_view s, std::size_t i, std::size_t& got) {
  const auto c = static_cast<unsigned char>(s[i]);
  got = 1;
  if (c < 0x80) return 1;
  const std::size_t len = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
  while (len != 0 && got < len && i + got < s.size()) {
    const auto b = static_cast<unsigned char>(s[i + got]);
    unsigned char lo = 0x80, hi = 0xBF;
    if (got == 1) {
      if (c == 0xE0) lo = 0xA0;  // no overlong forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
      if (c == 0xF0) lo = 0x90;  // no overlong forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    }
    if (b < lo || b > hi) break;
    ++got;
  }
  return (len != 0 && got == len) ? len : 0;
}

/// s with every maximal subpart of an invalid UTF-8 sequence replaced by U+FFFD (Python's
/// bytes.decode("utf-8", errors="replace")); valid UTF-8 is returned unchanged.
inline std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t got = 0;
    const std::size_t len = utf8_at(s, i, got);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      i += got;
    } else {
      out.append(s.substr(i, len));
      i += len;
    }
  }
  return out;
}

/// s for a terminal: a backslash becomes "\\"; C0 control characters (newline and tab included), DEL, C1
/// controls (U+0080-U+009F) and bytes that are not valid UTF-8 become "\xNN" (the byte, or the C1 code point);
/// line/paragraph separators and the bidirectional controls (U+2028/9, U+200E/F, U+202A-E, U+2066-9) become
/// "\u{NNNN}". Everything else, other valid UTF-8 included, is kept.
inline std::string terminal_safe(std::string_view s) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  auto byte = [&](unsigned v) {
    out += "\\x";
    out += hex[(v >> 4) & 15];
    out += hex[v & 15];
  };
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t got = 0;
    const std::size_t len = utf8_at(s, i, got);
    if (len == 0) {
      for (std::size_t k = 0; k < got; ++k) byte(static_cast<unsigned char>(s[i + k]));
      i += got;
      continue;
    }
    if (len == 1) {
      if (c == '\\') out += "\\\\";
      else if (c < 0x20 || c == 0x7F) byte(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    unsigned cp = len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
    if (cp >= 0x80 && cp <= 0x9F) {
      byte(cp);
    } else if (cp == 0x200E || cp == 0x200F || (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) {
      out += "\\u{";
      for (int sh = 12; sh >= 0; sh -= 4) out += hex[(cp >> sh) & 15];
      out += "}";
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

/// The first `n` bytes of s or fewer, never ending inside a UTF-8 sequence.
inline std::string_view cut_utf8(std::string_view s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t k = n;
  while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
  return s.substr(0, k);
}

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_NAMES_HPP
