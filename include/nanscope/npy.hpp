// nanscope — npy.hpp: write a tensor as a numpy .npy file (atomically), and read one back.
//
//   nanscope::write_npy("dump/activations.npy", view);       // any layout; logical row-major order on disk
//   nanscope::npy_array a = nanscope::read_npy("dump/activations.npy");
//   nanscope::check(a.view());
//
// Files are .npy format version 1.0 (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html):
// the magic "\x93NUMPY", version 1.0, a little-endian uint16 header length, then a Python dict literal such as
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } padded with spaces and ended by '\n' so that the
// data starts at a multiple of 64 bytes; then the elements, little-endian, in row-major (C) order.
//
// dtypes: f64 '<f8', f32 '<f4', f16 '<f2', i8 '|i1', i16 '<i2', i32 '<i4', i64 '<i8', u8 '|u1', u16 '<u2',
// u32 '<u4', u64 '<u8', bool '|b1' (each byte written as 0 or 1). bf16, fp8 e4m3fn and fp8 e5m2 have no numpy
// dtype: they are written as '<f4', converted exactly (every value of those formats, NaN and inf included, is
// an f32 value), so the file reads back as f32. Single-byte types use '|' as numpy writes them; '<i1'/'<u1'
// are accepted on reading.
//
// parse_npy() finds the array inside a file already in memory (a memory mapping: nothing is copied) and also
// accepts big-endian descrs ('>f4'; npy_layout::needs_swap()), Fortran order as column-major strides, and the
// descrs that ml_dtypes-based code writes ('bfloat16', 'float8_e4m3fn', 'float8_e5m2', '<f1'; raw '<V2' / '|V1'
// only when told which dtype they hold). read_npy() is built on it (little-endian only).
//
// Writes go through detail::atomic_file: the target path holds either its previous content or the complete
// new file, never a partial one (POSIX only).
#ifndef NANSCOPE_NPY_HPP
#define NANSCOPE_NPY_HPP

#include "check.hpp"
#include "config.hpp"
#include "dtype.hpp"
#include "traits.hpp"
#include "view.hpp"

#include "detail/atomic_file.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// An array read from a .npy file: dtype, shape and the elements in row-major order (host byte order).
struct npy_array {
  dtype type = dtype::f32;
  std::vector<std::int64_t> shape;   ///< empty for a 0-d array (one element)
  std::vector<unsigned char> bytes;  ///< numel() * size_of(type) bytes

  std::uint64_t numel() const {
    std::uint64_t n = 1;
    for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
  }
  /// A contiguous view of the data (valid while this array lives and is not modified).
  tensor_view view(const char* name = nullptr) const {
    tensor_view v;
    v.data = bytes.empty() ? nullptr : bytes.data();
    v.type = type;
    v.name = name;
    v.rank = static_cast<int>(shape.size());
    for (int i = 0; i < v.rank; ++i) v.shape[i] = shape[static_cast<std::size_t>(i)];
    v.set_contiguous_strides();
    return v;
  }
};

/// The numpy descr that write_npy() writes for a dtype ('<f4' for bf16 and fp8).
inline const char* npy_descr(dtype t) {
  switch (t) {
    case dtype::f64: return "<f8";
    case dtype::f32:
    case dtype::bf16:
    case dtype::f8_e4m3fn:
    case dtype::f8_e5m2: return "<f4";
    case dtype::f16: return "<f2";
    case dtype::i8: return "|i1";
    case dtype::i16: return "<i2";
    case dtype::i32: return "<i4";
    case dtype::i64: return "<i8";
    case dtype::u8: return "|u1";
    case dtype::u16: return "<u2";
    case dtype::u32: return "<u4";
    case dtype::u64: return "<u8";
    case dtype::boolean: return "|b1";
  }
  detail::fail("", "npy_descr: unsupported dtype value " + std::to_string(static_cast<unsigned>(t)));
}

namespace detail {

/// The dtype a file of `t` holds (bf16 and fp8 are stored as f32).
inline dtype npy_file_dtype(dtype t) {
  return t == dtype::bf16 || t == dtype::f8_e4m3fn || t == dtype::f8_e5m2 ? dtype::f32 : t;
}

inline bool npy_host_is_big_endian() {
#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return true;
#else
  return false;
#endif
}
/// Reverses the bytes of each `es`-byte element in place (between host order and little-endian).
inline void npy_swap_elements(unsigned char* p, std::size_t n, std::size_t es) {
  if (es < 2) return;
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t a = 0, b = es - 1; a < b; ++a, --b) {
      const unsigned char t = p[i * es + a];
      p[i * es + a] = p[i * es + b];
      p[i * es + b] = t;
    }
}

/// The complete preamble (magic, version, header length, header dict) for a tensor of file dtype `ft`.
inline std::string npy_preamble(dtype ft, int rank, const std::int64_t* shape) {
  std::string dict = "{'descr': '";
  dict += npy_descr(ft);
  dict += "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < rank; ++i) {
    if (i > 0) dict += ", ";
    dict += std::to_string(shape[i]);
  }
  if (rank == 1) dict += ",";
  dict += "), }";
  const std::size_t fixed = 10;  // magic (6) + version (2) + header length (2)
  std::size_t total = fixed + dict.size() + 1;  // + '\n'
  total = (total + 63) / 64 * 64;
  const std::size_t header_len = total - fixed;  // at most a few hundred bytes: fits uint16
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header_len & 0xFFu);
  out += static_cast<char>((header_len >> 8) & 0xFFu);
  out += dict;
  out.append(total - out.size() - 1, ' ');
  out += '\n';
  return out;
}

/// Converts n elements of source dtype t (raw, host order) to the file's representation, little-endian, in out.
inline void npy_encode(const unsigned char* src, dtype t, std::size_t n, unsigned char* out) {
  const std::size_t es = size_of(t);
  switch (t) {
    case dtype::bf16:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        const std::uint32_t f = static_cast<std::uint32_t>(h) << 16;
        std::memcpy(out + 4 * i, &f, 4);
      }
      break;
    case dtype::f8_e4m3fn:
    case dtype::f8_e5m2: {
      const float* table = fp8_table(t);  // exact decode, built from bit fields
      for (std::size_t i = 0; i < n; ++i) std::memcpy(out + 4 * i, &table[src[i]], 4);
      break;
    }
    case dtype::boolean:
      for (std::size_t i = 0; i < n; ++i) out[i] = src[i] != 0 ? 1 : 0;
      break;
    default: std::memcpy(out, src, n * es); break;
  }
  if (npy_host_is_big_endian()) npy_swap_elements(out, n, size_of(npy_file_dtype(t)));
}

// ------------------------------------------------------------------------------------------------------------
// Strict parser of the header dict. Works on a view of the header bytes (no copy): the caller checks first that
// they are printable ASCII.
// ------------------------------------------------------------------------------------------------------------
class npy_header_parser {
 public:
  npy_header_parser(const std::string& path, std::string_view text) : path_(path), s_(text) {}

  void parse(std::string& descr, bool& fortran, std::vector<std::int64_t>& shape) {
    bool have_descr = false, have_fortran = false, have_shape = false;
    skip_ws();
    expect('{');
    skip_ws();
    while (peek() != '}') {
      const std::string key = string_literal("a dict key");
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (have_descr) bad("the key 'descr' appears twice");
        if (peek() != '\'' && peek() != '"')
          bad("'descr' is not a simple type string (structured and subarray dtypes are not supported)");
        descr = string_literal("the 'descr' value");
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_fortran) bad("the key 'fortran_order' appears twice");
        if (s_.compare(i_, 4, "True") == 0) {
          fortran = true;
          i_ += 4;
        } else if (s_.compare(i_, 5, "False") == 0) {
          fortran = false;
          i_ += 5;
        } else {
          bad("'fortran_order' must be True or False");
        }
        have_fortran = true;
      } else if (key == "shape") {
        if (have_shape) bad("the key 'shape' appears twice");
        parse_shape(shape);
        have_shape = true;
      } else {
        bad("unexpected key '" + key + "' in the header");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
        skip_ws();
      } else if (peek() != '}') {
        bad("expected ',' or '}' in the header dict");
      }
    }
    ++i_;  // '}'
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
    if (i_ + 1 != s_.size() || s_[i_] != '\n')
      bad("the header dict must be followed only by spaces and a final newline");
    if (!have_descr) bad("the header has no 'descr'");
    if (!have_fortran) bad("the header has no 'fortran_order'");
    if (!have_shape) bad("the header has no 'shape'");
  }

 private:
  const std::string& path_;
  std::string_view s_;
  std::size_t i_ = 0;

  [[noreturn]] void bad(const std::string& what) const { file_fail(path_, "malformed .npy header: " + what); }
  char peek() const {
    if (i_ >= s_.size()) bad("the header ends early");
    return s_[i_];
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string_literal(const char* what) {
    const char q = peek();
    if (q != '\'' && q != '"') bad(std::string("expected a quoted string for ") + what);
    const std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) bad(std::string("unterminated string for ") + what);
    const std::string_view body = s_.substr(i_ + 1, end - i_ - 1);
    if (body.find('\\') != std::string_view::npos) bad(std::string("escape sequences are not supported in ") + what);
    // Keys and descrs are short; a long one is garbage (and would only make the error message long).
    if (body.size() > 64) bad(std::string("the string for ") + what + " is " + std::to_string(body.size()) + " characters long");
    i_ = end + 1;
    return std::string(body);
  }
  void parse_shape(std::vector<std::int64_t>& shape) {
    shape.clear();
    expect('(');
    skip_ws();
    bool trailing_comma = false;
    while (peek() != ')') {
      if (peek() < '0' || peek() > '9') bad("'shape' must be a tuple of non-negative integers");
      // More extents than nanscope can hold: stop here rather than collect an unbounded list.
      if (shape.size() == static_cast<std::size_t>(max_rank))
        bad("'shape' has more than " + std::to_string(max_rank) + " dimensions (nanscope's max_rank)");
      std::uint64_t v = 0;
      while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
        const auto d = static_cast<std::uint64_t>(s_[i_] - '0');
        if (v > (static_cast<std::uint64_t>(INT64_MAX) - d) / 10) bad("a 'shape' extent does not fit in int64");
        v = v * 10 + d;
        ++i_;
      }
      if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long suffix, written by old numpy
      shape.push_back(static_cast<std::int64_t>(v));
      skip_ws();
      trailing_comma = false;
      if (peek() == ',') {
        ++i_;
        trailing_comma = true;
        skip_ws();
      } else if (peek() != ')') {
        bad("expected ',' or ')' in 'shape'");
      }
    }
    ++i_;  // ')'
    if (shape.size() == 1 && !trailing_comma) bad("'shape' (n) is not a tuple: a 1-d shape is written (n,)");
  }
};

/// The dtype and byte order of a descr. `big_endian` is set for '>' descrs of multi-byte types. Accepts what
/// numpy writes ('<f4', '|u1', '>i8', ...; '<'/'>' also for single-byte types) and what ml_dtypes-based code
/// writes for its types: 'bfloat16', 'float8_e4m3fn', 'float8_e5m2' (str(dtype) headers) and '<f1' (the descr
/// numpy.save writes for ml_dtypes.float8_e5m2). Raw void descrs ('<V2', '|V1': what numpy.save writes for
/// ml_dtypes.bfloat16 and most fp8 types) are not decided here (see npy_parse_options::void_type).
inline bool npy_descr_dtype(const std::string& d, dtype& t, bool& big_endian) {
  big_endian = false;
  static const struct {
    const char* name;
    dtype type;
  } named[] = {{"bfloat16", dtype::bf16}, {"float8_e4m3fn", dtype::f8_e4m3fn}, {"float8_e5m2", dtype::f8_e5m2}};
  for (const auto& k : named)
    if (d == k.name) {
      t = k.type;
      return true;
    }
  if (d.size() != 3) return false;
  static const struct {
    const char* code;
    dtype type;
  } known[] = {{"f8", dtype::f64}, {"f4", dtype::f32}, {"f2", dtype::f16}, {"f1", dtype::f8_e5m2},
               {"i1", dtype::i8},  {"i2", dtype::i16}, {"i4", dtype::i32}, {"i8", dtype::i64},
               {"u1", dtype::u8},  {"u2", dtype::u16}, {"u4", dtype::u32}, {"u8", dtype::u64},
               {"b1", dtype::boolean}};
  const char order = d[0];
  if (order != '<' && order != '>' && order != '|') return false;
  for (const auto& k : known) {
    if (d.compare(1, 2, k.code) != 0) continue;
    const bool single = size_of(k.type) == 1;
    if (order == '|' && !single) return false;  // '|' is numpy's "byte order not applicable"
    if (k.type == dtype::f8_e5m2 && order == '>') return false;
    t = k.type;
    big_endian = order == '>' && !single;
    return true;
  }
  return false;
}
/// As above, for little-endian descrs only (kept for existing callers).
inline bool npy_descr_dtype(const std::string& d, dtype& t) {
  dtype r = dtype::f32;
  bool big = false;
  if (!npy_descr_dtype(d, r, big) || big) return false;
  t = r;
  return true;
}

/// Reads a whole file.
inline std::vector<unsigned char> npy_read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) file_fail(path, errno_text("cannot open", errno));
  std::vector<unsigned char> data;
  unsigned char buf[1 << 16];
  for (;;) {
    const std::size_t got = std::fread(buf, 1, sizeof buf, f);
    data.insert(data.end(), buf, buf + got);
    if (got < sizeof buf) break;
  }
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) file_fail(path, errno_text("read failed", err));
  return data;
}

}  // namespace detail

namespace detail {
/// The .npy bytes of `v` written into `file` (not committed): the body of write_npy.
inline void write_npy_into(atomic_file& file, const tensor_view& v) {
  validate(v);
  if (v.space == memory_space::cuda_device)
    detail::fail(v.name, "write_npy: data is in CUDA device memory; copy it to the host first");
  const dtype ft = detail::npy_file_dtype(v.type);
  const std::string pre = detail::npy_preamble(ft, v.rank, v.shape);
  file.write(pre.data(), pre.size());
  const std::uint64_t n = v.numel();
  const std::size_t es = size_of(v.type), fes = size_of(ft);
  const bool raw = ft == v.type && v.type != dtype::boolean && !detail::npy_host_is_big_endian();
  if (n != 0 && raw && v.is_contiguous()) {
    file.write(v.data, static_cast<std::size_t>(n) * es);
  } else if (n != 0) {
    constexpr std::size_t chunk = std::size_t{1} << 16;
    std::vector<unsigned char> in(chunk * es), out(chunk * fes);
    for (std::uint64_t b = 0; b < n; b += chunk) {
      const std::size_t m = static_cast<std::size_t>((n - b) < chunk ? (n - b) : chunk);
      detail::gather(v, b, m, in.data());
      detail::npy_encode(in.data(), v.type, m, out.data());
      file.write(out.data(), m * fes);
    }
  }
}
}  // namespace detail

/// Writes a tensor view as a .npy file (format 1.0), atomically: the path holds either its previous content
/// or the complete new file. Strided views are written in logical row-major order; bf16 and fp8 as exact f32.
/// Throws nanscope::error for an invalid view, device memory, or any file-system error (naming the path).
inline void write_npy(const std::string& path, const tensor_view& v) {
  validate(v);
  if (v.space == memory_space::cuda_device)
    detail::fail(v.name, "write_npy: data is in CUDA device memory; copy it to the host first");
  detail::atomic_file file(path);
  detail::write_npy_into(file, v);
  file.commit();
}

/// Writes any supported tensor (see traits.hpp) as a .npy file.
template <class T, class = std::enable_if_t<!std::is_same<std::decay_t<T>, tensor_view>::value>>
void write_npy(const std::string& path, const T& tensor) {
  write_npy(path, to_view(tensor));
}

/// Options of parse_npy().
struct npy_parse_options {
  /// Accept big-endian ('>f4', ...) data; npy_layout::needs_swap() then tells that the bytes must be swapped.
  bool allow_big_endian = true;
  /// The dtype of raw void descrs ('|V2', '<V2', '|V1', '<V1'): numpy.save writes those for ml_dtypes.bfloat16
  /// and most ml_dtypes fp8 types, and nothing in the file says which one. When `void_type` is set and has the
  /// descr's size, the data is read as that dtype; otherwise a void descr is an error.
  bool has_void_type = false;
  dtype void_type = dtype::bf16;

  npy_parse_options& with_big_endian(bool allow) {
    allow_big_endian = allow;
    return *this;
  }
  npy_parse_options& with_void_type(dtype t) {
    has_void_type = true;
    void_type = t;
    return *this;
  }
};

/// Where the array of a .npy file is, found by parse_npy() in the file's bytes.
struct npy_layout {
  dtype type = dtype::f32;
  std::string descr;                  ///< as written in the header
  bool fortran_order = false;         ///< column-major data
  bool big_endian = false;            ///< multi-byte elements stored big-endian ('>' descr)
  std::vector<std::int64_t> shape;    ///< empty for a 0-d array (one element); at most max_rank extents
  std::uint64_t numel = 0;            ///< elements
  std::uint64_t data_offset = 0;      ///< the data starts this many bytes into the file
  std::uint64_t data_size = 0;        ///< numel * size_of(type): exactly the rest of the file

  /// True when the elements are not in the host's byte order (the bytes must be swapped before use).
  bool needs_swap() const { return size_of(type) > 1 && big_endian != detail::npy_host_is_big_endian(); }
  /// The array as a view of `file` (the bytes given to parse_npy): row-major strides, or column-major ones for
  /// a Fortran-ordered file. Throws nanscope::error when needs_swap(). The view's elements are at
  /// `file + data_offset`, which need not be aligned to the element size (format 1.0 aligns to 64 bytes, but a
  /// hand-written header need not).
  tensor_view view(const void* file, const char* name = nullptr) const {
    if (needs_swap()) detail::fail(name, "npy_layout::view: the data is in the other byte order; swap it first");
    tensor_view v;
    v.data = numel == 0 ? nullptr : static_cast<const unsigned char*>(file) + data_offset;
    v.type = type;
    v.name = name;
    v.rank = static_cast<int>(shape.size());
    for (int i = 0; i < v.rank; ++i) v.shape[i] = shape[static_cast<std::size_t>(i)];
    detail::dense_strides(name, v.rank, v.shape, v.strides, fortran_order);  // empty: no overflow, no error
    return v;
  }
};

/// Parses the complete contents of a .npy file (format 1.0 or 2.0) held in memory, e.g. a memory mapping:
/// `size` is the whole file. The header parser is strict: the magic, the version, a header length within the
/// file, printable ASCII, a dict with exactly 'descr', 'fortran_order' and 'shape', at most max_rank extents,
/// a supported descr (see npy_descr_dtype; void descrs with options.void_type), and data of exactly the size
/// the shape says (a shorter file and trailing bytes are both errors; the element count never overflows).
/// Nothing outside [file, file + size) is read. Throws nanscope::error("nanscope: file '<path>': <problem>").
inline npy_layout parse_npy(const void* file, std::size_t size, const std::string& path,
                            const npy_parse_options& options = {}) {
  const auto* f = static_cast<const unsigned char*>(file);
  if (size < 10) detail::file_fail(path, "not an .npy file: only " + std::to_string(size) + " bytes");
  if (std::memcmp(f, "\x93NUMPY", 6) != 0) detail::file_fail(path, "not an .npy file (bad magic)");
  const unsigned ver_major = f[6], ver_minor = f[7];
  std::size_t header_start, header_len;
  if (ver_major == 1 && ver_minor == 0) {
    header_start = 10;
    header_len = static_cast<std::size_t>(f[8]) | static_cast<std::size_t>(f[9]) << 8;
  } else if (ver_major == 2 && ver_minor == 0) {
    if (size < 12) detail::file_fail(path, "truncated .npy 2.0 preamble");
    header_start = 12;
    header_len = static_cast<std::size_t>(f[8]) | static_cast<std::size_t>(f[9]) << 8 |
                 static_cast<std::size_t>(f[10]) << 16 | static_cast<std::size_t>(f[11]) << 24;
  } else {
    detail::file_fail(path, "unsupported .npy format version " + std::to_string(ver_major) + "." +
                                std::to_string(ver_minor) + " (1.0 and 2.0 are supported)");
  }
  if (header_len > size - header_start)
    detail::file_fail(path, "truncated: the header length " + std::to_string(header_len) +
                                " runs past the end of the file (" + std::to_string(size) + " bytes)");
  const std::string_view header(reinterpret_cast<const char*>(f) + header_start, header_len);
  for (std::size_t i = 0; i < header.size(); ++i) {
    const char c = header[i];
    if (static_cast<unsigned char>(c) >= 0x80 || (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F)
      detail::file_fail(path, "malformed .npy header: it contains a non-ASCII or control byte (at offset " +
                                  std::to_string(header_start + i) + ")");
  }
  npy_layout a;
  detail::npy_header_parser(path, header).parse(a.descr, a.fortran_order, a.shape);
  bool known = detail::npy_descr_dtype(a.descr, a.type, a.big_endian);
  const bool is_void = a.descr.size() == 3 && (a.descr[0] == '<' || a.descr[0] == '|' || a.descr[0] == '>') &&
                       a.descr[1] == 'V' && (a.descr[2] == '1' || a.descr[2] == '2');
  if (!known && is_void && options.has_void_type &&
      size_of(options.void_type) == static_cast<std::size_t>(a.descr[2] - '0')) {
    a.type = options.void_type;  // raw bytes as the writer's host (little-endian) order
    a.big_endian = false;
    known = true;
  }
  if (known && a.big_endian && !options.allow_big_endian)
    detail::file_fail(path, "unsupported dtype descr '" + a.descr + "' (big-endian data is not supported)");
  if (!known) {
    std::string why = "unsupported dtype descr '" + a.descr + "'";
    if (is_void)
      why += " (a raw " + std::string(1, a.descr[2]) +
             "-byte void type: numpy.save writes it for ml_dtypes' bfloat16 and fp8 types; name the dtype it holds"
             " to read it)";
    why += "; supported: <f8 <f4 <f2 |i1 <i2 <i4 <i8 |u1 <u2 <u4 <u8 |b1";
    if (options.allow_big_endian) why += " (and '>' big-endian)";
    why += ", bfloat16, float8_e4m3fn, float8_e5m2, <f1 (ml_dtypes float8_e5m2)";
    detail::file_fail(path, why);
  }
  const std::size_t es = size_of(a.type);
  const std::size_t data_start = header_start + header_len;
  const std::size_t avail = size - data_start;
  // element count; a byte count beyond 64 bits is only reported as such (no overflow)
  std::uint64_t n = 1;
  bool too_big = false;
  bool has_zero = false;
  for (std::int64_t d : a.shape) has_zero = has_zero || d == 0;
  if (has_zero) {
    n = 0;
  } else {
    for (std::int64_t d : a.shape) {
      const auto u = static_cast<std::uint64_t>(d);
      if (n > (~std::uint64_t{0} / es) / u) {
        too_big = true;
        break;
      }
      n *= u;
    }
  }
  if (too_big || n * es > avail)
    detail::file_fail(path, "truncated: the data is shorter than the shape says (" +
                                (too_big ? std::string("more than 2^64") : std::to_string(n * es)) + " bytes needed, " +
                                std::to_string(avail) + " after the header)");
  if (n * es < avail)
    detail::file_fail(path, std::to_string(avail - n * es) + " unexpected trailing bytes after the data");
  a.numel = n;
  a.data_offset = data_start;
  a.data_size = n * es;
  return a;
}

/// Reads a .npy file (format 1.0 or 2.0) with parse_npy()'s strict checks (big-endian descrs and void descrs
/// are refused here). Fortran-ordered data is transposed into row-major order. Throws
/// nanscope::error("nanscope: file '<path>': <problem>") for anything else.
inline npy_array read_npy(const std::string& path) {
  const std::vector<unsigned char> f = detail::npy_read_file(path);
  const npy_layout lay = parse_npy(f.data(), f.size(), path, npy_parse_options{}.with_big_endian(false));
  npy_array a;
  a.type = lay.type;
  a.shape = lay.shape;
  const std::size_t es = size_of(a.type);
  const std::uint64_t n = lay.numel;
  const unsigned char* src = f.data() + lay.data_offset;
  a.bytes.resize(static_cast<std::size_t>(n) * es);
  const std::size_t rank = a.shape.size();
  if (!lay.fortran_order || rank < 2 || n == 0) {
    if (n != 0) std::memcpy(a.bytes.data(), src, a.bytes.size());
  } else {
    // column-major source: stride of dimension i is the product of the extents before it
    std::int64_t fstride[max_rank];  // n != 0 and n * es bytes are in the file: no stride overflows
    detail::dense_strides(path.c_str(), static_cast<int>(rank), a.shape.data(), fstride, true);
    std::int64_t idx[max_rank] = {};
    for (std::uint64_t k = 0; k < n; ++k) {
      std::int64_t off = 0;
      for (std::size_t i = 0; i < rank; ++i) off += idx[i] * fstride[i];
      std::memcpy(a.bytes.data() + k * es, src + static_cast<std::size_t>(off) * es, es);
      for (std::size_t i = rank; i-- > 0;) {
        if (++idx[i] < a.shape[i]) break;
        idx[i] = 0;
      }
    }
  }
  if (detail::npy_host_is_big_endian()) detail::npy_swap_elements(a.bytes.data(), static_cast<std::size_t>(n), es);
  return a;
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_NPY_HPP
