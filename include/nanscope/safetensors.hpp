// nanscope — safetensors.hpp: a strict parser of the .safetensors layout, for files already in memory.
//
//   const nanscope::safetensors_layout lay = nanscope::parse_safetensors(data, size, "model.safetensors");
//   for (const nanscope::safetensors_tensor& t : lay.tensors)
//     if (t.supported) nanscope::check(t.view(data));
//
// The format (https://github.com/huggingface/safetensors): an unsigned little-endian 64-bit header length N,
// N bytes of UTF-8 JSON — an object mapping each tensor name to {"dtype": "F32", "shape": [2, 3],
// "data_offsets": [begin, end]}, plus an optional "__metadata__" object of strings — then the data section:
// offsets are relative to its start, elements are little-endian and row-major.
//
// What is an error (nanscope::error "nanscope: file '<path>': <problem>", naming the tensor where there is one):
// fewer than 8 bytes; a header length beyond the file or above the format's 100 MB limit; a header that is not
// UTF-8 or not strict JSON (RFC 8259: no trailing commas, no NaN, no leading zeros, no lone surrogates, control
// characters escaped); anything but an object at the top; a tensor entry without "dtype" (a string), "shape" (an
// array of at most max_rank non-negative integers) and "data_offsets" (two non-negative integers); a key twice in
// one entry; a tensor name twice; "__metadata__" twice or not an object of strings; a shape whose byte size does
// not fit in 64 bits; data_offsets with end before start, past the end of the data section, or of a length that
// does not match dtype and shape; two tensors whose bytes overlap. Unknown keys inside a tensor entry are
// ignored (as the reference implementation does). Bytes of the data section that belong to no tensor (gaps, a
// tail) are not an error: they are reported in `warnings`. Dtypes nanscope cannot check (F4, F6_*, F8_E8M0, C64,
// or a name it does not know) are parsed, their byte sizes checked where the width is known, and marked
// `supported = false`. The parser reads nothing outside [file, file + size) and recurses at most 64 levels.
// Needs only the standard library.
#ifndef NANSCOPE_SAFETENSORS_HPP
#define NANSCOPE_SAFETENSORS_HPP

#include "config.hpp"
#include "dtype.hpp"
#include "view.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// One tensor entry of a .safetensors header.
struct safetensors_tensor {
  std::string name;            ///< valid UTF-8 (may contain any character, NUL included)
  std::string dtype_name;      ///< as written: "BF16", "F8_E4M3", ...
  bool supported = false;      ///< the dtype is one nanscope checks; `type` is then set
  dtype type = dtype::f32;
  int rank = 0;
  std::int64_t shape[max_rank] = {};
  std::uint64_t numel = 0;        ///< product of the shape (1 for rank 0)
  std::uint64_t begin = 0;        ///< data_offsets[0], relative to the data section
  std::uint64_t end = 0;          ///< data_offsets[1]
  std::uint64_t file_offset = 0;  ///< where the tensor's bytes start in the file: 8 + header length + begin

  std::uint64_t byte_size() const { return end - begin; }

  /// A contiguous row-major view of the tensor inside `file` (the bytes given to parse_safetensors). The data
  /// pointer need not be aligned to the element size. Throws nanscope::error for an unsupported dtype.
  tensor_view view(const void* file) const {
    if (!supported) detail::fail(name.c_str(), "dtype '" + dtype_name + "' is not supported by nanscope");
    tensor_view v;
    v.data = numel == 0 ? nullptr : static_cast<const unsigned char*>(file) + file_offset;
    v.type = type;
    v.name = name.c_str();
    v.rank = rank;
    for (int i = 0; i < rank; ++i) v.shape[i] = shape[i];
    v.set_contiguous_strides();
    return v;
  }
};

/// The layout of a .safetensors file, from parse_safetensors().
struct safetensors_layout {
  std::uint64_t header_size = 0;  ///< N: the JSON header's length in bytes
  std::uint64_t data_start = 0;   ///< 8 + N
  std::uint64_t data_size = 0;    ///< bytes from data_start to the end of the file
  std::vector<safetensors_tensor> tensors;                     ///< in data order (by begin, then end)
  std::vector<std::pair<std::string, std::string>> metadata;  ///< "__metadata__", in header order
  std::vector<std::string> warnings;                          ///< oddities that are not errors (unused bytes)
};

/// The nanscope dtype of a safetensors dtype name (F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I8 I16 I32 I64 U8 U16 U32
/// U64 BOOL); false for anything else. F8_E4M3 is the "fn" variant (max 448, no infinities), as in PyTorch.
inline bool safetensors_dtype(std::string_view name, dtype& t) {
  static const struct {
    const char* name;
    dtype type;
  } table[] = {{"F64", dtype::f64},       {"F32", dtype::f32},         {"F16", dtype::f16},  {"BF16", dtype::bf16},
               {"F8_E4M3", dtype::f8_e4m3fn}, {"F8_E5M2", dtype::f8_e5m2}, {"I8", dtype::i8},    {"I16", dtype::i16},
               {"I32", dtype::i32},       {"I64", dtype::i64},         {"U8", dtype::u8},    {"U16", dtype::u16},
               {"U32", dtype::u32},       {"U64", dtype::u64},         {"BOOL", dtype::boolean}};
  for (const auto& e : table)
    if (name == e.name) {
      t = e.type;
      return true;
    }
  return false;
}

/// The safetensors dtype name of a nanscope dtype ("F32", "BF16", "F8_E4M3", "BOOL", ...).
inline const char* safetensors_dtype_name(dtype t) {
  switch (t) {
    case dtype::f64: return "F64";
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::f8_e4m3fn: return "F8_E4M3";
    case dtype::f8_e5m2: return "F8_E5M2";
    case dtype::i8: return "I8";
    case dtype::i16: return "I16";
    case dtype::i32: return "I32";
    case dtype::i64: return "I64";
    case dtype::u8: return "U8";
    case dtype::u16: return "U16";
    case dtype::u32: return "U32";
    case dtype::u64: return "U64";
    case dtype::boolean: return "BOOL";
  }
  return "?";
}

namespace detail {

[[noreturn]] inline void st_fail(const std::string& path, const std::string& problem) {
  NANSCOPE_IMPL_THROW(::nanscope::error("nanscope: file '" + path + "': " + problem));
#if !NANSCOPE_IMPL_EXCEPTIONS
  std::abort();
#endif
}

/// Length of the valid UTF-8 sequence at s[i] (1-4), or 0 when the bytes there are not one (overlong forms,
/// surrogates and code points above U+10FFFF are invalid).
inline std::size_t utf8_sequence(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  std::size_t len;
  unsigned lo = 0x80, hi = 0xBF;  // range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong
    if (b0 == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  const auto b1 = static_cast<unsigned char>(s[i + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (std::size_t k = 2; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < 0x80 || b > 0xBF) return 0;
  }
  return len;
}

/// A tensor name for messages: quoted, cut after 120 bytes (at a character boundary). Quotes and backslashes
/// are escaped with a backslash; invalid UTF-8 bytes, C0 and C1 control characters and DEL (which terminals act
/// on) as \xNN; U+2028 and U+2029 (line breaks to some readers) as \u{2028} and \u{2029}.
inline std::string st_quote(std::string_view name, std::size_t limit = 120) {
  static const char hex[] = "0123456789abcdef";
  std::string out = "'";
  std::size_t i = 0;
  while (i < name.size()) {
    if (out.size() > limit) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(name[i]);
    const std::size_t len = utf8_sequence(name, i);
    if (len == 2 && c == 0xC2 && static_cast<unsigned char>(name[i + 1]) < 0xA0) {  // C1 control U+0080..U+009F
      const auto c1 = static_cast<unsigned char>(name[i + 1]);
      out += "\\x";
      out += hex[c1 >> 4];
      out += hex[c1 & 15];
      i += 2;
    } else if (len == 3 && c == 0xE2 && static_cast<unsigned char>(name[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(name[i + 2]) == 0xA8 || static_cast<unsigned char>(name[i + 2]) == 0xA9)) {
      out += static_cast<unsigned char>(name[i + 2]) == 0xA8 ? "\\u{2028}" : "\\u{2029}";
      i += 3;
    } else if (c < 0x20 || c == 0x7F || len == 0) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
      ++i;
    } else if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else {
      out.append(name.substr(i, len));
      i += len;
    }
  }
  out += "'";
  return out;
}

/// Strict JSON reader for the header, directed by the safetensors schema.
class st_header_parser {
 public:
  st_header_parser(const std::string& path, std::string_view text) : path_(path), s_(text) {}

  void parse(safetensors_layout& out) {
    ws();
    if (i_ >= s_.size()) bad_json("the header holds no JSON value");
    if (s_[i_] != '{') bad_json("the header is not a JSON object");
    ++i_;
    ws();
    bool have_metadata = false;
    if (peek() == '}') {
      ++i_;
    } else {
      for (;;) {
        ws();
        std::string key = string_value();
        ws();
        expect(':');
        ws();
        if (key == "__metadata__") {
          if (have_metadata) bad("'__metadata__' appears twice in the header");
          have_metadata = true;
          metadata(out);
        } else {
          safetensors_tensor t;
          t.name = std::move(key);
          tensor_entry(t);
          out.tensors.push_back(std::move(t));
        }
        ws();
        const char c = peek();
        ++i_;
        if (c == '}') break;
        if (c != ',') bad_json("expected ',' or '}' after a member of the header object");
      }
    }
    ws();
    if (i_ != s_.size()) bad_json("unexpected bytes after the header's JSON object");
  }

 private:
  const std::string& path_;
  std::string_view s_;
  std::size_t i_ = 0;

  [[noreturn]] void bad(const std::string& what) const { st_fail(path_, what); }
  [[noreturn]] void bad_json(const std::string& what) const {
    st_fail(path_, "malformed header JSON at byte " + std::to_string(i_ + 8) + ": " + what);
  }
  [[noreturn]] void bad_tensor(const std::string& name, const std::string& what) const {
    st_fail(path_, "tensor " + st_quote(name) + ": " + what);
  }
  char peek() const {
    if (i_ >= s_.size()) bad_json("the header ends early");
    return s_[i_];
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad_json(std::string("expected '") + c + "'");
    ++i_;
  }
  void literal(const char* word) {
    const std::size_t n = std::strlen(word);
    if (s_.compare(i_, n, word) != 0) bad_json("invalid literal");
    i_ += n;
  }

  unsigned hex4() {
    if (s_.size() - i_ < 4) bad_json("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s_[i_++];
      unsigned d;
      if (c >= '0' && c <= '9') d = static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') d = static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') d = static_cast<unsigned>(c - 'A' + 10);
      else bad_json("invalid hex digit in a \\u escape");
      v = v * 16 + d;
    }
    return v;
  }
  static void put_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  /// A JSON string (the header is already known to be valid UTF-8).
  std::string string_value() {
    if (peek() != '"') bad_json("expected a string");
    ++i_;
    std::string out;
    for (;;) {
      // copy the run of plain bytes at once
      std::size_t j = i_;
      while (j < s_.size() && s_[j] != '"' && s_[j] != '\\' && static_cast<unsigned char>(s_[j]) >= 0x20) ++j;
      out.append(s_.substr(i_, j - i_));
      i_ = j;
      const char c = peek();
      if (c == '"') {
        ++i_;
        return out;
      }
      if (c != '\\') bad_json("unescaped control character in a string");
      ++i_;
      const char e = peek();
      ++i_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) bad_json("lone low surrogate in a \\u escape (not valid Unicode)");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.size() - i_ < 6 || s_[i_] != '\\' || s_[i_ + 1] != 'u')
              bad_json("lone high surrogate in a \\u escape (not valid Unicode)");
            i_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) bad_json("high surrogate not followed by a low one in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        default: bad_json("invalid escape sequence in a string");
      }
    }
  }
  /// A non-negative JSON integer (no sign, fraction or exponent) into v; `what` names it in messages.
  std::uint64_t uint_value(const std::string& tensor, const char* what, std::uint64_t limit) {
    const char c = peek();
    if (c == '-') bad_tensor(tensor, std::string(what) + " must be non-negative");
    if (c < '0' || c > '9') bad_tensor(tensor, std::string(what) + " must be a non-negative integer");
    std::uint64_t v = 0;
    const std::size_t start = i_;
    bool overflow = false;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      const auto d = static_cast<std::uint64_t>(s_[i_] - '0');
      if (v > (limit - d) / 10) overflow = true;
      if (!overflow) v = v * 10 + d;
      ++i_;
    }
    if (i_ - start > 1 && s_[start] == '0') bad_json("a number with a leading zero");
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E'))
      bad_tensor(tensor, std::string(what) + " must be an integer");
    if (overflow) bad_tensor(tensor, std::string(what) + " " + std::string(s_.substr(start, i_ - start > 40 ? 40 : i_ - start)) +
                                         (i_ - start > 40 ? "..." : "") + " is too large");
    return v;
  }
  /// Skips any JSON value (unknown keys), at most 64 levels deep.
  void skip_value(int depth) {
    if (depth > 64) bad_json("values nested more than 64 levels deep");
    const char c = peek();
    if (c == '"') {
      (void)string_value();
    } else if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      ++i_;
      ws();
      if (peek() == close) {
        ++i_;
        return;
      }
      for (;;) {
        ws();
        if (c == '{') {
          (void)string_value();
          ws();
          expect(':');
          ws();
        }
        skip_value(depth + 1);
        ws();
        const char d = peek();
        ++i_;
        if (d == close) return;
        if (d != ',') bad_json(std::string("expected ',' or '") + close + "'");
      }
    } else if (c == 't') {
      literal("true");
    } else if (c == 'f') {
      literal("false");
    } else if (c == 'n') {
      literal("null");
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (c == '-') ++i_;
      if (peek() == '0') {
        ++i_;
      } else if (peek() >= '1' && peek() <= '9') {
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      } else {
        bad_json("invalid number");
      }
      if (i_ < s_.size() && s_[i_] == '.') {
        ++i_;
        if (peek() < '0' || peek() > '9') bad_json("invalid number");
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      }
      if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
        ++i_;
        if (peek() == '+' || peek() == '-') ++i_;
        if (peek() < '0' || peek() > '9') bad_json("invalid number");
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
      }
    } else {
      bad_json("expected a JSON value");
    }
  }
  void metadata(safetensors_layout& out) {
    if (peek() != '{') bad("'__metadata__' must be an object of strings");
    ++i_;
    ws();
    if (peek() == '}') {
      ++i_;
      return;
    }
    for (;;) {
      ws();
      std::string key = string_value();
      ws();
      expect(':');
      ws();
      if (peek() != '"') bad("'__metadata__' value of " + st_quote(key) + " is not a string");
      std::string value = string_value();
      out.metadata.emplace_back(std::move(key), std::move(value));
      ws();
      const char c = peek();
      ++i_;
      if (c == '}') return;
      if (c != ',') bad_json("expected ',' or '}' in '__metadata__'");
    }
  }
  void tensor_entry(safetensors_tensor& t) {
    if (peek() != '{') bad_tensor(t.name, "the entry is not an object with dtype, shape and data_offsets");
    ++i_;
    bool have_dtype = false, have_shape = false, have_offsets = false;
    ws();
    if (peek() == '}') {
      ++i_;
    } else {
      for (;;) {
        ws();
        const std::string key = string_value();
        ws();
        expect(':');
        ws();
        if (key == "dtype") {
          if (have_dtype) bad_tensor(t.name, "'dtype' appears twice");
          if (peek() != '"') bad_tensor(t.name, "'dtype' is not a string");
          t.dtype_name = string_value();
          have_dtype = true;
        } else if (key == "shape") {
          if (have_shape) bad_tensor(t.name, "'shape' appears twice");
          if (peek() != '[') bad_tensor(t.name, "'shape' is not an array");
          ++i_;
          ws();
          if (peek() == ']') {
            ++i_;
          } else {
            for (;;) {
              ws();
              if (t.rank == max_rank)
                bad_tensor(t.name, "'shape' has more than " + std::to_string(max_rank) +
                                       " dimensions (nanscope's max_rank)");
              t.shape[t.rank++] = static_cast<std::int64_t>(
                  uint_value(t.name, "a 'shape' extent", static_cast<std::uint64_t>(INT64_MAX)));
              ws();
              const char c = peek();
              ++i_;
              if (c == ']') break;
              if (c != ',') bad_json("expected ',' or ']' in 'shape'");
            }
          }
          have_shape = true;
        } else if (key == "data_offsets") {
          if (have_offsets) bad_tensor(t.name, "'data_offsets' appears twice");
          if (peek() != '[') bad_tensor(t.name, "'data_offsets' is not an array");
          ++i_;
          ws();
          if (peek() == ']') bad_tensor(t.name, "'data_offsets' must hold two integers [begin, end]");
          t.begin = uint_value(t.name, "'data_offsets' begin", ~std::uint64_t{0});
          ws();
          if (peek() != ',') bad_tensor(t.name, "'data_offsets' must hold two integers [begin, end]");
          ++i_;
          ws();
          t.end = uint_value(t.name, "'data_offsets' end", ~std::uint64_t{0});
          ws();
          if (peek() != ']') bad_tensor(t.name, "'data_offsets' must hold two integers [begin, end]");
          ++i_;
          have_offsets = true;
        } else {
          skip_value(1);  // unknown keys are ignored, as by the reference implementation
        }
        ws();
        const char c = peek();
        ++i_;
        if (c == '}') break;
        if (c != ',') bad_json("expected ',' or '}' in the entry of tensor " + st_quote(t.name));
      }
    }
    if (!have_dtype) bad_tensor(t.name, "the entry has no 'dtype'");
    if (!have_shape) bad_tensor(t.name, "the entry has no 'shape'");
    if (!have_offsets) bad_tensor(t.name, "the entry has no 'data_offsets'");
  }
};

/// Bits per element of the safetensors dtypes nanscope does not check (0: unknown name).
inline unsigned st_unsupported_bits(std::string_view name) {
  if (name == "F4") return 4;
  if (name == "F6_E2M3" || name == "F6_E3M2") return 6;
  if (name == "F8_E8M0") return 8;
  if (name == "C64") return 64;
  return 0;
}

inline std::string st_offsets(const safetensors_tensor& t) {
  return "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
}

inline std::string st_shape(const safetensors_tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.rank; ++i) {
    if (i != 0) s += ", ";
    s += std::to_string(t.shape[i]);
  }
  return s + "]";
}

}  // namespace detail

/// Parses the layout of a .safetensors file held in memory (e.g. a memory mapping: `size` is the whole file) and
/// checks it as described at the top of this header. Throws nanscope::error("nanscope: file '<path>': ...").
inline safetensors_layout parse_safetensors(const void* file, std::size_t size, const std::string& path) {
  const auto* f = static_cast<const unsigned char*>(file);
  if (size < 8)
    detail::st_fail(path, "not a .safetensors file: only " + std::to_string(size) +
                              " bytes, less than the 8-byte header length");
  std::uint64_t n = 0;
  for (int k = 7; k >= 0; --k) n = (n << 8) | f[k];
  if (n > size - 8)
    detail::st_fail(path, "truncated: the header length " + std::to_string(n) + " runs past the end of the file (" +
                              std::to_string(size) + " bytes)");
  constexpr std::uint64_t max_header = 100000000;  // the reference implementation's limit
  if (n > max_header)
    detail::st_fail(path, "the header length " + std::to_string(n) + " exceeds the format's limit of " +
                              std::to_string(max_header) + " bytes");
  safetensors_layout lay;
  lay.header_size = n;
  lay.data_start = 8 + n;
  lay.data_size = size - lay.data_start;
  const std::string_view header(reinterpret_cast<const char*>(f) + 8, static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < header.size();) {
    const std::size_t len = detail::utf8_sequence(header, i);
    if (len == 0) {
      static const char hex[] = "0123456789ABCDEF";
      const auto b = static_cast<unsigned char>(header[i]);
      detail::st_fail(path, std::string("the header is not valid UTF-8 (byte 0x") + hex[b >> 4] + hex[b & 15] +
                                " at offset " + std::to_string(i + 8) + ")");
    }
    i += len;
  }
  detail::st_header_parser(path, header).parse(lay);

  // Per tensor: dtype, element count, offsets within the data section, byte size.
  for (safetensors_tensor& t : lay.tensors) {
    const std::string who = "tensor " + detail::st_quote(t.name) + ": ";
    t.supported = safetensors_dtype(t.dtype_name, t.type);
    const std::uint64_t bits = t.supported ? info(t.type).bits : detail::st_unsupported_bits(t.dtype_name);
    bool empty = false;
    for (int i = 0; i < t.rank; ++i) empty = empty || t.shape[i] == 0;
    std::uint64_t count = 1;
    if (empty) {
      count = 0;
    } else {
      // bytes must fit in 64 bits (elements * bits / 8), and elements in int64 for views
      const std::uint64_t limit = static_cast<std::uint64_t>(INT64_MAX) / (bits == 0 ? 8 : bits);
      for (int i = 0; i < t.rank; ++i) {
        const auto d = static_cast<std::uint64_t>(t.shape[i]);
        if (count > limit / d)
          detail::st_fail(path, who + "shape " + detail::st_shape(t) + " has more elements than fit in 64 bits");
        count *= d;
      }
    }
    t.numel = count;
    if (t.end < t.begin) detail::st_fail(path, who + detail::st_offsets(t) + " end before start");
    if (t.end > lay.data_size)
      detail::st_fail(path, who + detail::st_offsets(t) + " run past the end of the data section (" +
                                std::to_string(lay.data_size) + " bytes)");
    if (bits != 0) {
      const std::uint64_t total_bits = count * bits;  // no overflow: count <= INT64_MAX / bits
      if (total_bits % 8 != 0 || total_bits / 8 != t.byte_size())
        detail::st_fail(path, who + detail::st_offsets(t) + " hold " + std::to_string(t.byte_size()) + " bytes, but " +
                                  t.dtype_name + " " + detail::st_shape(t) + " needs " +
                                  (total_bits % 8 != 0 ? std::to_string(total_bits) + " bits"
                                                       : std::to_string(total_bits / 8) + " bytes"));
    }
    t.file_offset = lay.data_start + t.begin;
  }

  // Names are unique.
  {
    std::vector<std::size_t> order(lay.tensors.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return lay.tensors[a].name < lay.tensors[b].name; });
    for (std::size_t i = 1; i < order.size(); ++i)
      if (lay.tensors[order[i]].name == lay.tensors[order[i - 1]].name)
        detail::st_fail(path, "tensor " + detail::st_quote(lay.tensors[order[i]].name) + " appears twice in the header");
  }

  // Data order; no two tensors share a byte; bytes of no tensor are reported.
  std::stable_sort(lay.tensors.begin(), lay.tensors.end(), [](const safetensors_tensor& a, const safetensors_tensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0, unused = 0, gaps = 0, first_gap_begin = 0, first_gap_end = 0;
  const safetensors_tensor* last = nullptr;
  for (const safetensors_tensor& t : lay.tensors) {
    if (t.byte_size() == 0) continue;
    if (t.begin < covered)
      detail::st_fail(path, "tensor " + detail::st_quote(t.name) + ": " + detail::st_offsets(t) + " overlap tensor " +
                                detail::st_quote(last->name) + " (" + detail::st_offsets(*last) + ")");
    if (t.begin > covered) {
      if (gaps == 0) {
        first_gap_begin = covered;
        first_gap_end = t.begin;
      }
      ++gaps;
      unused += t.begin - covered;
    }
    covered = t.end;
    last = &t;
  }
  if (gaps != 0)
    lay.warnings.push_back(std::to_string(unused) + " bytes of the data section in " + std::to_string(gaps) +
                           (gaps == 1 ? " gap" : " gaps") + " belong to no tensor (the first: [" +
                           std::to_string(first_gap_begin) + ", " + std::to_string(first_gap_end) + "))");
  if (covered < lay.data_size)
    lay.warnings.push_back("the last " + std::to_string(lay.data_size - covered) +
                           " bytes of the data section belong to no tensor");
  return lay;
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_SAFETENSORS_HPP
