// nanscope-merge: a strict scanner of JSON text (the grammar and UTF-8 rules nlohmann-json applies) that never builds a tree and gives up, by throwing json_scanner::decline, at the first thing it does not accept.
#ifndef NANSCOPE_TOOLS_MERGE_JSON_SCAN_HPP
#define NANSCOPE_TOOLS_MERGE_JSON_SCAN_HPP

#include <clocale>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

namespace nanscope_merge {
namespace detail {

/// Scans JSON text from a position on, for a reader that knows what it expects: a string, a number, a value to
/// skip. Everything it accepts nlohmann-json accepts too, with the same meaning (RFC 8259 grammar, strings of
/// valid UTF-8 without raw control characters, integers as nlohmann-json keeps them); what it does not accept
/// (an error, a \u escape of a surrogate, nesting deeper than max_depth) throws `decline`, and the caller reads
/// the text another way.
class json_scanner {
 public:
  static constexpr int max_depth = 32;
  struct decline {};

 protected:
  explicit json_scanner(std::string_view text)
      : p_(reinterpret_cast<const unsigned char*>(text.data())), end_(p_ + text.size()) {}

  [[noreturn]] static void no() { throw decline{}; }

  struct number {
    bool integer = false;  // a JSON integer that nlohmann keeps as one (not a float, not beyond 64 bits)
    bool negative = false;
    std::uint64_t magnitude = 0;
  };

  /// k == lit, with a comparison of constant length (inlined, unlike string_view's).
  template <std::size_t N>
  static bool is(std::string_view k, const char (&lit)[N]) {
    return k.size() == N - 1 && std::memcmp(k.data(), lit, N - 1) == 0;
  }

  // ---- JSON grammar -------------------------------------------------------------------------------------
  void ws() {
    const unsigned char* p = p_;
    while (p != end_ && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) ++p;
    p_ = p;
  }
  unsigned char peek() {
    ws();
    if (p_ == end_) no();
    return *p_;
  }
  void expect(unsigned char c) {
    if (peek() != c) no();
    ++p_;
  }
  /// After a member or element: true for ',' (another follows), false for the closing bracket.
  bool more(unsigned char close) {
    const unsigned char c = peek();
    ++p_;
    if (c == ',') return true;
    if (c != close) no();
    return false;
  }
  /// '{' and '}' at once: the object is empty.
  bool open(unsigned char open_c, unsigned char close_c) {
    expect(open_c);
    if (peek() == close_c) {
      ++p_;
      return false;
    }
    return true;
  }
  // One UTF-8 sequence of 2 to 4 bytes starting at p_ (RFC 3629, as nlohmann-json checks it).
  void utf8() {
    const unsigned char c = *p_;
    std::ptrdiff_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c == 0xE0) {
      n = 3;
      lo = 0xA0;
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
      n = 3;
    } else if (c == 0xED) {
      n = 3;
      hi = 0x9F;
    } else if (c == 0xF0) {
      n = 4;
      lo = 0x90;
    } else if (c >= 0xF1 && c <= 0xF3) {
      n = 4;
    } else if (c == 0xF4) {
      n = 4;
      hi = 0x8F;
    } else {
      no();
    }
    if (end_ - p_ < n || p_[1] < lo || p_[1] > hi) no();
    for (std::ptrdiff_t i = 2; i < n; ++i)
      if (p_[i] < 0x80 || p_[i] > 0xBF) no();
    p_ += n;
  }
  /// A string's content: a view of the text when it has no escape, else decoded into `buf`.
  std::string_view str(std::string& buf) {
    expect('"');
    const unsigned char* p = p_;  // a local: the loop keeps it in a register
    const unsigned char* const s = p;
    for (;;) {
      // eight bytes at a time while none of them is a quote, a backslash, a control character or non-ASCII
      while (end_ - p >= 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        constexpr std::uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
        const std::uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
        const std::uint64_t special = ((quote - ones) & ~quote) | ((backslash - ones) & ~backslash) |
                                      ((w - ones * 0x20) & ~w) | w;
        if ((special & highs) != 0) {
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
          p += __builtin_ctzll(special & highs) / 8;  // the lowest flagged byte is the first special one
#endif
          break;
        }
        p += 8;
      }
      if (p == end_) no();
      const unsigned char c = *p;
      if (c == '"') {
        p_ = p + 1;
        return std::string_view(reinterpret_cast<const char*>(s), static_cast<std::size_t>(p - s));
      }
      if (c == '\\') {
        p_ = p;
        buf.assign(reinterpret_cast<const char*>(s), static_cast<std::size_t>(p - s));
        return escaped(buf);
      }
      if (c < 0x20) no();
      if (c < 0x80) {
        ++p;
      } else {
        p_ = p;
        utf8();
        p = p_;
      }
    }
  }
  std::string_view escaped(std::string& buf) {
    for (;;) {
      if (p_ == end_) no();
      const unsigned char c = *p_;
      if (c == '"') {
        ++p_;
        return buf;
      }
      if (c == '\\') {
        if (end_ - p_ < 2) no();
        const unsigned char e = p_[1];
        p_ += 2;
        switch (e) {
          case '"': buf += '"'; break;
          case '\\': buf += '\\'; break;
          case '/': buf += '/'; break;
          case 'b': buf += '\b'; break;
          case 'f': buf += '\f'; break;
          case 'n': buf += '\n'; break;
          case 'r': buf += '\r'; break;
          case 't': buf += '\t'; break;
          case 'u': {
            if (end_ - p_ < 4) no();
            unsigned cp = 0;
            for (int i = 0; i < 4; ++i) {
              const unsigned char h = p_[i];
              cp <<= 4;
              if (h >= '0' && h <= '9') {
                cp |= static_cast<unsigned>(h - '0');
              } else if (h >= 'a' && h <= 'f') {
                cp |= static_cast<unsigned>(h - 'a' + 10);
              } else if (h >= 'A' && h <= 'F') {
                cp |= static_cast<unsigned>(h - 'A' + 10);
              } else {
                no();
              }
            }
            p_ += 4;
            if (cp >= 0xD800 && cp <= 0xDFFF) no();  // surrogates (pairs included): the slow reader decodes them
            if (cp < 0x80) {
              buf += static_cast<char>(cp);
            } else if (cp < 0x800) {
              buf += static_cast<char>(0xC0 | (cp >> 6));
              buf += static_cast<char>(0x80 | (cp & 0x3F));
            } else {
              buf += static_cast<char>(0xE0 | (cp >> 12));
              buf += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
              buf += static_cast<char>(0x80 | (cp & 0x3F));
            }
            break;
          }
          default: no();
        }
        continue;
      }
      if (c < 0x20) no();
      const unsigned char* s = p_;
      if (c < 0x80) {
        ++p_;
      } else {
        utf8();
      }
      buf.append(reinterpret_cast<const char*>(s), static_cast<std::size_t>(p_ - s));
    }
  }
  number num() {
    number n;
    const unsigned char* const start = (ws(), p_);
    if (peek() == '-') {
      n.negative = true;
      ++p_;
    }
    if (p_ == end_) no();
    bool overflow = false;
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      const unsigned char* p = p_;
      std::uint64_t m = 0;
      while (p != end_ && *p >= '0' && *p <= '9') {
        const auto d = static_cast<std::uint64_t>(*p - '0');
        if (m > (std::numeric_limits<std::uint64_t>::max() - d) / 10) {
          overflow = true;
        } else {
          m = m * 10 + d;
        }
        ++p;
      }
      p_ = p;
      n.magnitude = m;
    } else {
      no();
    }
    n.integer = !overflow;
    if (p_ != end_ && *p_ == '.') {
      n.integer = false;
      ++p_;
      digits();
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      n.integer = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      digits();
    }
    if (n.negative && n.magnitude > (std::uint64_t{1} << 63)) n.integer = false;  // below int64: a float
    if (!n.integer) finite(start);
    return n;
  }
  // A number nlohmann-json keeps as a double: it refuses the document when strtod makes it infinite (1e400),
  // after putting the locale's decimal point in place of '.', as here.
  void finite(const unsigned char* start) {
    scratch_.assign(reinterpret_cast<const char*>(start), static_cast<std::size_t>(p_ - start));
    const char point = *std::localeconv()->decimal_point;
    for (char& c : scratch_)
      if (c == '.') c = point;
    if (!finite_bits(std::strtod(scratch_.c_str(), nullptr))) no();
  }
  /// Finite by the exponent bits: std::isfinite is folded to true under -ffast-math (-ffinite-math-only), which
  /// the fastmath test preset compiles this header with.
  static bool finite_bits(double x) {
    std::uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    return (b & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
  }
  void digits() {
    if (p_ == end_ || *p_ < '0' || *p_ > '9') no();
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
  }
  void literal(const char* word) {
    const std::size_t n = std::strlen(word);
    if (static_cast<std::size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0) no();
    p_ += n;
  }
  /// A boolean value; false in `ok` (the value skipped) for any other type.
  bool boolean(bool& ok) {
    const unsigned char c = peek();
    if (c == 't') {
      literal("true");
      ok = true;
      return true;
    }
    if (c == 'f') {
      literal("false");
      ok = true;
      return false;
    }
    skip(max_depth);
    ok = false;
    return false;
  }
  void skip(int depth) {
    if (depth > max_depth) no();
    switch (peek()) {
      case '"': skip_str(); return;
      case '{':
        if (!open('{', '}')) return;
        do {
          skip_str();
          expect(':');
          skip(depth + 1);
        } while (more('}'));
        return;
      case '[':
        if (!open('[', ']')) return;
        do skip(depth + 1);
        while (more(']'));
        return;
      case 't': literal("true"); return;
      case 'f': literal("false"); return;
      case 'n': literal("null"); return;
      default: (void)num(); return;
    }
  }
  void skip_str() { (void)str(scratch_); }

  /// A JSON integer as T under value_as's rules (in range, never a float); false when it is not one.
  template <class T>
  static bool as(const number& n, T& out) {
    if (!n.integer) return false;
    if (!n.negative) {
      if (n.magnitude > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return false;
      out = static_cast<T>(n.magnitude);
      return true;
    }
    const std::int64_t i = n.magnitude == (std::uint64_t{1} << 63) ? std::numeric_limits<std::int64_t>::min()
                                                                   : -static_cast<std::int64_t>(n.magnitude);
    if constexpr (std::is_signed_v<T>) {
      if (i < static_cast<std::int64_t>(std::numeric_limits<T>::min())) return false;
    } else {
      if (i < 0) return false;
    }
    out = static_cast<T>(i);
    return true;
  }
  /// An integer value of type T; false (the value skipped) for any other value.
  template <class T>
  bool integer(T& out, int depth) {
    const unsigned char c = peek();
    if (c == '-' || (c >= '0' && c <= '9')) return as(num(), out);
    skip(depth);
    return false;
  }
  /// A string value; false (the value skipped) for any other type.
  bool string(std::string_view& out, std::string& buf, int depth) {
    if (peek() != '"') {
      skip(depth);
      return false;
    }
    out = str(buf);
    return true;
  }

  const unsigned char* p_;
  const unsigned char* end_;
  std::string key_, scratch_;
};

}  // namespace detail
}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_JSON_SCAN_HPP
