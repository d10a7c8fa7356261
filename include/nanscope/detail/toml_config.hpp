// nanscope — detail/toml_config.hpp: the TOML reader of nanscope's config files; short of memory it throws bad_alloc.
//
// toml++ (which nanscope used before) allocates in noexcept functions: short of memory, it called std::terminate
// inside the controller's step boundary. Here every allocation may throw std::bad_alloc to the caller (nothing
// noexcept allocates), and a bad text is an error returned, never thrown (so it builds with -fno-exceptions).
//
//   nanscope::detail::toml_value doc;          // the root table
//   std::string error;
//   if (!nanscope::detail::toml_parse(text, "nanscope.toml", doc, error)) ...  // error: "nanscope.toml:3: ..."
//   for (const auto& kv : doc.items()) use(kv.key(), kv.type(), kv.line());
//
// What is read (docs/runtime-control.md, "The TOML that is read"): comments, CRLF, a UTF-8 BOM, bare, quoted and
// dotted keys, [tables], [[arrays of tables]] and TOML's rules on defining a key or table twice, the four kinds of
// strings with every escape, integers (decimal, 0x, 0o, 0b, underscores), floats (inf and nan too), booleans,
// arrays and inline tables, with the values toml++ 3.3 gives. Dates and times are refused with their own error.
// The text must be valid UTF-8. Limits against hostile text: no value deeper than toml_max_depth tables and
// arrays, numbers of at most toml_max_number_chars characters (toml++'s limit too); large tables are hashed.
// One difference from toml++, on purpose: after a line-ending backslash in a multi-line string only spaces, tabs
// and line breaks are dropped (TOML 1.0); toml++ drops Unicode spaces (U+00A0, U+3000, ...) too.
//
// The document model is a template on a stateless allocator so that a test can fail each allocation in turn
// (tests/unit/toml_config_test.cpp); everything else uses basic_toml_value<std::allocator<char>> (toml_value).
#ifndef NANSCOPE_DETAIL_TOML_CONFIG_HPP
#define NANSCOPE_DETAIL_TOML_CONFIG_HPP

#include "../config.hpp"

#include <charconv>
#include <clocale>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// The kinds of TOML value the reader produces (no dates and times).
enum class toml_type : std::uint8_t { table, array, string, integer, floating, boolean };

/// "table", "array", "string", "integer", "float", "boolean".
inline const char* toml_type_name(toml_type t) {
  switch (t) {
    case toml_type::table: return "table";
    case toml_type::array: return "array";
    case toml_type::string: return "string";
    case toml_type::integer: return "integer";
    case toml_type::floating: return "float";
    case toml_type::boolean: return "boolean";
  }
  return "value";
}

/// "a string", "an integer", ...
inline std::string toml_type_with_article(toml_type t) {
  return std::string(t == toml_type::integer || t == toml_type::array ? "an " : "a ") + toml_type_name(t);
}

/// No value sits deeper than this many tables and arrays below the root (the reader recurses into arrays and
/// inline tables, and the tree is destroyed recursively).
inline constexpr std::size_t toml_max_depth = 128;
/// A number has at most this many characters, not counting its sign and underscores (toml++ 3.3's limit).
inline constexpr std::size_t toml_max_number_chars = 128;
/// The error text of a date or time (a value toml++ accepts and this reader does not).
inline constexpr const char* toml_date_error = "dates and times are not supported in a nanscope config";

template <class Alloc>
class toml_reader;

/// One TOML value: a table (its entries in document order), an array, a string, an integer, a float or a boolean,
/// with the line it starts on (a table: its header's line, or its key's line when a dotted key made it; toml++'s
/// source().begin.line). A table's entries are values whose key() names them.
template <class Alloc = std::allocator<char>>
class basic_toml_value {
 public:
  template <class T>
  using alloc_for = typename std::allocator_traits<Alloc>::template rebind_alloc<T>;
  using string_type = std::basic_string<char, std::char_traits<char>, alloc_for<char>>;
  using list_type = std::vector<basic_toml_value, alloc_for<basic_toml_value>>;

  /// An empty table.
  basic_toml_value() = default;

  toml_type type() const { return type_; }
  std::uint32_t line() const { return line_; }
  /// The key naming this value in its table; empty for an array's element and the root.
  std::string_view key() const { return std::string_view(key_.data(), key_.size()); }

  bool is_table() const { return type_ == toml_type::table; }
  bool is_array() const { return type_ == toml_type::array; }
  bool is_string() const { return type_ == toml_type::string; }
  bool is_integer() const { return type_ == toml_type::integer; }
  bool is_floating() const { return type_ == toml_type::floating; }
  bool is_boolean() const { return type_ == toml_type::boolean; }

  /// The value (meaningful for its type only).
  std::string_view as_string() const { return std::string_view(str_.data(), str_.size()); }
  std::int64_t as_integer() const { return int_; }
  double as_floating() const { return float_; }
  bool as_boolean() const { return int_ != 0; }

  /// A table's entries in document order, or an array's elements.
  const list_type& items() const { return items_; }
  std::size_t size() const { return items_.size(); }
  /// A table's entry named `k`, or nullptr.
  const basic_toml_value* find(std::string_view k) const { return const_cast<basic_toml_value*>(this)->find_entry(k); }

 private:
  friend class toml_reader<Alloc>;
  using index_type = std::vector<std::uint32_t, alloc_for<std::uint32_t>>;

  // How a table came to be, for TOML's rules on defining it again (toml++'s lists of such tables).
  enum flag : std::uint8_t {
    implicit = 1,     ///< made as a parent of a [header]: a header of its own may still define it (once)
    dotted = 2,       ///< made by a dotted key: dotted keys may add to it, a header may not
    inline_made = 4,  ///< an inline table: closed once read
    table_array = 8,  ///< an array made by [[header]]s: a [[header]] appends to it
  };
  static constexpr std::size_t index_from = 16;  ///< tables with more entries than this get a hash index

  static std::uint64_t hash(std::string_view k) {
    // FNV-1a, seeded with an address (randomised where the loader randomises them): the layout of a table's
    // index is not predictable from the text.
    static const char anchor = 0;
    std::uint64_t h = 1469598103934665603ull ^ (static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&anchor)) *
                                                0x9E3779B97F4A7C15ull);
    for (char c : k) {
      h ^= static_cast<unsigned char>(c);
      h *= 1099511628211ull;
    }
    return h ^ (h >> 31);
  }
  basic_toml_value* find_entry(std::string_view k) {
    if (index_.empty()) {
      for (auto& e : items_)
        if (e.key() == k) return &e;
      return nullptr;
    }
    const std::size_t mask = index_.size() - 1;
    for (std::size_t i = static_cast<std::size_t>(hash(k)) & mask; index_[i] != 0; i = (i + 1) & mask) {
      basic_toml_value& e = items_[index_[i] - 1];
      if (e.key() == k) return &e;
    }
    return nullptr;
  }
  void index_entry(std::size_t n) {  // allocates nothing: the index has room
    const std::size_t mask = index_.size() - 1;
    std::size_t i = static_cast<std::size_t>(hash(items_[n].key())) & mask;
    while (index_[i] != 0) i = (i + 1) & mask;
    index_[i] = static_cast<std::uint32_t>(n + 1);
  }
  /// Appends an entry named `k` (not there yet). On std::bad_alloc the table is as it was.
  basic_toml_value& add_entry(std::string_view k, toml_type t, std::uint32_t at) {
    basic_toml_value e;
    e.key_.assign(k.data(), k.size());
    e.type_ = t;
    e.line_ = at;
    const std::size_t n = items_.size() + 1;
    if (n > index_from && n * 2 > index_.size()) {
      std::size_t cap = 64;
      while (cap < n * 4) cap *= 2;
      index_type fresh(cap, 0u);
      index_.swap(fresh);
      for (std::size_t i = 0; i + 1 < n; ++i) index_entry(i);
    }
    items_.push_back(std::move(e));  // on std::bad_alloc the index lacks only this entry: consistent
    if (!index_.empty()) index_entry(n - 1);
    return items_.back();
  }

  toml_type type_ = toml_type::table;
  std::uint8_t flags_ = 0;
  std::uint32_t line_ = 1;
  std::int64_t int_ = 0;  ///< integer; boolean (0 or 1)
  double float_ = 0.0;
  string_type key_;
  string_type str_;
  list_type items_;
  index_type index_;  ///< a large table's open-addressing index: entry number + 1, 0 for a free slot
};

using toml_value = basic_toml_value<>;

/// Converts a decimal float written as TOML allows once its sign and underscores are gone ("12.5e-3") with
/// std::strtod, whatever the C locale's decimal point. false when it is too large for a double (toml++ refuses
/// those too); too small, it becomes 0 or a subnormal (as toml++ and strtod give).
inline bool toml_strtod(std::string_view digits, double& out) {
  char buf[toml_max_number_chars + 16];
  const char* point = ".";
  if (const std::lconv* lc = std::localeconv()) {
    if (lc->decimal_point != nullptr && lc->decimal_point[0] != '\0') point = lc->decimal_point;
  }
  const std::size_t plen = std::strlen(point);
  std::size_t n = 0;
  for (char c : digits) {
    if (c == '.') {
      if (plen > 8 || n + plen >= sizeof(buf)) return false;
      std::memcpy(buf + n, point, plen);
      n += plen;
    } else {
      if (n + 1 >= sizeof(buf)) return false;
      buf[n++] = c;
    }
  }
  buf[n] = '\0';
  char* end = nullptr;
  const double v = std::strtod(buf, &end);
  if (end != buf + n) return false;
  // infinite by the exponent bits (a comparison with infinity is folded away under -ffast-math)
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  if ((bits & 0x7FFFFFFFFFFFFFFFull) == 0x7FF0000000000000ull) return false;
  out = v;
  return true;
}

/// toml_strtod's contract, with std::from_chars where the library has it for double (locale-free).
inline bool toml_to_double(std::string_view digits, double& out) {
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  double v = 0.0;
  const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v, std::chars_format::general);
  if (r.ec == std::errc() && r.ptr == digits.data() + digits.size()) {
    out = v;
    return true;
  }
  if (r.ec == std::errc::not_enough_memory) {  // libstdc++ 11 copies long inputs, and says so when that fails
#if NANSCOPE_IMPL_EXCEPTIONS
    throw std::bad_alloc();
#endif
  }
  // out of range (std::from_chars leaves `v` as it was): strtod tells overflow from underflow
#endif
  return toml_strtod(digits, out);
}

/// The reader behind toml_parse. One per parse.
template <class Alloc>
class toml_reader {
 public:
  using value = basic_toml_value<Alloc>;
  using string_type = typename value::string_type;

  toml_reader(std::string_view text, std::string_view source, std::string& error)
      : s_(text), source_(source), error_(error) {}

  bool read(value& root) {
    root = value();
    if (s_.size() >= 0xFFFFFFFFu) return fail("the text is larger than 4 GiB");
    if (!valid_utf8()) return false;
    if (s_.size() >= 3 && s_.compare(0, 3, "\xEF\xBB\xBF") == 0) p_ = 3;
    value* current = &root;
    std::size_t depth = 0;  // of `current`
    while (p_ < s_.size()) {
      const char c = s_[p_];
      if (c == ' ' || c == '\t') {
        ++p_;
      } else if (c == '\n' || c == '\r') {
        if (line_break() < 0) return false;
      } else if (c == '#') {
        if (!comment()) return false;
      } else if (c == '[') {
        if (!header(root, current, depth)) return false;
      } else if (key_start(c)) {
        if (!key_value(*current, depth) || !end_of_line("after a value")) return false;
      } else {
        return fail("expected a key, a [table] header or a comment");
      }
    }
    return true;
  }

 private:
  enum : std::uint8_t {
    implicit = value::implicit,
    dotted = value::dotted,
    inline_made = value::inline_made,
    table_array = value::table_array
  };

  // --- errors and characters ---
  bool fail_at(std::uint32_t at, std::string_view problem) {
    error_.assign(source_.data(), source_.size());
    error_ += ':';
    error_ += std::to_string(at);
    error_ += ": ";
    error_.append(problem.data(), problem.size());
    return false;
  }
  bool fail(std::string_view problem) { return fail_at(line_, problem); }
  bool fail_key(std::uint32_t at, const char* before, const char* after) {
    std::string m(before);
    for (std::size_t i = 0; i < nkeys_; ++i) {
      if (i != 0) m += '.';
      m.append(keys_[i].data(), keys_[i].size());
    }
    m += after;
    return fail_at(at, m);
  }
  bool too_deep(std::size_t depth, std::uint32_t at_line) {
    if (depth <= toml_max_depth) return false;
    fail_at(at_line, "nested more than " + std::to_string(toml_max_depth) + " tables and arrays deep");
    return true;
  }
  static bool bare_key_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }
  static bool key_start(char c) { return bare_key_char(c) || c == '"' || c == '\''; }
  /// A control character TOML refuses unescaped (all but the tab; newlines are checked before).
  static bool control(char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u < 0x20 && u != '\t') || u == 0x7F;
  }
  bool at(char c) const { return p_ < s_.size() && s_[p_] == c; }
  void skip_spaces() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t')) ++p_;
  }
  /// 1: consumed "\n" or "\r\n"; 0: no line break here; -1: a carriage return alone (error set).
  int line_break() {
    if (at('\n')) {
      ++p_;
      ++line_;
      return 1;
    }
    if (at('\r')) {
      if (p_ + 1 < s_.size() && s_[p_ + 1] == '\n') {
        p_ += 2;
        ++line_;
        return 1;
      }
      fail("a carriage return must be followed by a line feed");
      return -1;
    }
    return 0;
  }
  /// At '#': up to the end of the line (not consumed).
  bool comment() {
    for (++p_; p_ < s_.size(); ++p_) {
      const char c = s_[p_];
      if (c == '\n' || c == '\r') break;
      if (control(c)) return fail("control characters other than tab are not allowed in a comment");
    }
    return true;
  }
  /// Spaces, then a comment, then the end of the line or of the text.
  bool end_of_line(const char* where) {
    skip_spaces();
    if (at('#') && !comment()) return false;
    if (p_ >= s_.size()) return true;
    const int r = line_break();
    if (r > 0) return true;
    if (r == 0) return fail(std::string("expected the end of the line ") + where);
    return false;
  }
  /// Spaces, line breaks and comments (inside an array).
  bool skip_blank() {
    for (;;) {
      skip_spaces();
      if (p_ >= s_.size()) return true;
      const char c = s_[p_];
      if (c == '\n' || c == '\r') {
        if (line_break() < 0) return false;
      } else if (c == '#') {
        if (!comment()) return false;
      } else {
        return true;
      }
    }
  }
  bool valid_utf8() {
    std::uint32_t at_line = 1;
    const auto* b = reinterpret_cast<const unsigned char*>(s_.data());
    const std::size_t n = s_.size();
    for (std::size_t i = 0; i < n;) {
      const unsigned c = b[i];
      if (c < 0x80) {
        if (c == '\n') ++at_line;
        ++i;
        continue;
      }
      std::size_t len = 0;
      unsigned lo = 0x80, hi = 0xBF;  // the second byte's range
      if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
      } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;       // overlong
        else if (c == 0xED) hi = 0x9F;  // surrogates
      } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;       // overlong
        else if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
      } else {
        return fail_at(at_line, "invalid UTF-8");
      }
      if (i + len > n) return fail_at(at_line, "invalid UTF-8 (a truncated sequence)");
      if (b[i + 1] < lo || b[i + 1] > hi) return fail_at(at_line, "invalid UTF-8");
      for (std::size_t k = 2; k < len; ++k)
        if (b[i + k] < 0x80 || b[i + k] > 0xBF) return fail_at(at_line, "invalid UTF-8");
      i += len;
    }
    return true;
  }

  // --- keys ---
  /// A key (segments separated by dots, spaces around them) into keys_[0, nkeys_).
  bool key() {
    nkeys_ = 0;
    for (;;) {
      if (nkeys_ == keys_.size()) keys_.emplace_back();
      string_type& seg = keys_[nkeys_];
      seg.clear();
      if (p_ < s_.size() && bare_key_char(s_[p_])) {
        const std::size_t b = p_;
        while (p_ < s_.size() && bare_key_char(s_[p_])) ++p_;
        seg.assign(s_.data() + b, p_ - b);
      } else if (at('"') || at('\'')) {
        if (!string(seg, true)) return false;
      } else {
        return fail("expected a key");
      }
      ++nkeys_;
      skip_spaces();
      if (!at('.')) return true;
      ++p_;
      skip_spaces();
    }
  }
  std::string_view key_at(std::size_t i) const { return std::string_view(keys_[i].data(), keys_[i].size()); }

  /// `key = value` into `table` (at `depth`).
  bool key_value(value& table, std::size_t depth) {
    const std::uint32_t at_line = line_;
    if (!key()) return false;
    if (!at('=')) return fail("expected '=' after the key");
    ++p_;
    skip_spaces();
    value* t = &table;
    std::size_t d = depth;
    for (std::size_t i = 0; i + 1 < nkeys_; ++i) {
      if (too_deep(++d, at_line)) return false;
      if (value* child = t->find_entry(key_at(i))) {
        if (child->type_ != toml_type::table || (child->flags_ & (implicit | dotted)) == 0) {
          std::string m = "cannot add keys to '";
          m.append(key_at(i).data(), key_at(i).size());
          m += "' with a dotted key: it is ";
          m += child->type_ != toml_type::table   ? toml_type_with_article(child->type_)
               : (child->flags_ & inline_made) != 0 ? std::string("an inline table")
                                                    : std::string("a table defined by a [header]");
          return fail_at(at_line, m);
        }
        t = child;
      } else {
        t = &t->add_entry(key_at(i), toml_type::table, at_line);
        t->flags_ = dotted;
      }
    }
    if (too_deep(++d, at_line)) return false;
    if (t->find_entry(key_at(nkeys_ - 1)) != nullptr) return fail_key(at_line, "'", "' is defined twice");
    value& v = t->add_entry(key_at(nkeys_ - 1), toml_type::integer, at_line);
    return parse_value(v, d);  // keys_ is reused by inline tables from here
  }

  /// `[a.b]` or `[[a.b]]` and the rest of its line; `current` becomes the table it names.
  bool header(value& root, value*& current, std::size_t& depth) {
    const std::uint32_t at_line = line_;
    ++p_;
    const bool array_of_tables = at('[');
    if (array_of_tables) ++p_;
    skip_spaces();
    if (!key()) return false;
    if (!at(']')) return fail("expected ']' at the end of the table header");
    ++p_;
    if (array_of_tables) {
      if (!at(']')) return fail("expected ']]' at the end of the array-of-tables header");
      ++p_;
    }
    if (!end_of_line("after a table header")) return false;
    value* t = &root;
    std::size_t d = 0;
    for (std::size_t i = 0; i + 1 < nkeys_; ++i) {
      value* child = t->find_entry(key_at(i));
      if (child == nullptr) {
        if (too_deep(d + 1, at_line)) return false;
        t = &t->add_entry(key_at(i), toml_type::table, at_line);
        t->flags_ = implicit;
        d += 1;
      } else if (child->type_ == toml_type::table) {
        if ((child->flags_ & inline_made) != 0) {
          std::string m = "cannot add to the inline table '";
          m.append(key_at(i).data(), key_at(i).size());
          m += "'";
          return fail_at(at_line, m);
        }
        t = child;
        d += 1;
      } else if (child->type_ == toml_type::array && (child->flags_ & table_array) != 0) {
        t = &child->items_.back();  // the array's last table
        d += 2;
      } else {
        std::string m = "'";
        m.append(key_at(i).data(), key_at(i).size());
        m += "' is ";
        m += toml_type_with_article(child->type_);
        m += ", not a table";
        return fail_at(at_line, m);
      }
    }
    const std::string_view last = key_at(nkeys_ - 1);
    value* child = t->find_entry(last);
    if (child != nullptr) {
      if (array_of_tables && child->type_ == toml_type::array && (child->flags_ & table_array) != 0) {
        if (too_deep(d + 2, at_line)) return false;
        child->items_.emplace_back();
        value& e = child->items_.back();
        e.line_ = at_line;
        current = &e;
        depth = d + 2;
        return true;
      }
      if (!array_of_tables && child->type_ == toml_type::table && (child->flags_ & implicit) != 0 &&
          only_tables(*child)) {
        child->flags_ = static_cast<std::uint8_t>(child->flags_ & ~implicit);
        child->line_ = at_line;
        current = child;
        depth = d + 1;
        return true;
      }
      if (child->type_ == toml_type::table) {
        return array_of_tables ? fail_key(at_line, "'", "' is a table, not an array of tables")
                               : fail_key(at_line, "table '", "' is defined twice");
      }
      if (child->type_ == toml_type::array && (child->flags_ & table_array) != 0) {
        return fail_key(at_line, "'", "' is an array of tables: [[...]] adds a table to it, [...] cannot define it");
      }
      const std::string after = "' is " + toml_type_with_article(child->type_) +
                                (array_of_tables ? ", not an array of tables" : ", not a table");
      return fail_key(at_line, "'", after.c_str());
    }
    if (array_of_tables) {
      if (too_deep(d + 2, at_line)) return false;
      value& a = t->add_entry(last, toml_type::array, at_line);
      a.flags_ = table_array;
      a.items_.emplace_back();
      a.items_.back().line_ = at_line;
      current = &a.items_.back();
      depth = d + 2;
      return true;
    }
    if (too_deep(d + 1, at_line)) return false;
    current = &t->add_entry(last, toml_type::table, at_line);
    depth = d + 1;
    return true;
  }
  /// An implicitly made table that a [header] may define: it holds only tables and arrays of tables so far.
  static bool only_tables(const value& t) {
    for (const value& e : t.items_) {
      if (e.type_ == toml_type::table) continue;
      if (e.type_ != toml_type::array || e.items_.empty()) return false;
      for (const value& x : e.items_)
        if (x.type_ != toml_type::table) return false;
    }
    return true;
  }

  // --- values ---
  /// The value at p_ into `v` (at `depth`, already checked).
  bool parse_value(value& v, std::size_t depth) {
    v.line_ = line_;
    if (p_ >= s_.size()) return fail("expected a value");
    const char c = s_[p_];
    if (c == '"' || c == '\'') {
      v.type_ = toml_type::string;
      return string(v.str_, false);
    }
    if (c == '[') return array(v, depth);
    if (c == '{') return inline_table(v, depth);
    // everything else is one token: a number, a boolean, inf/nan (or a date, refused)
    const std::size_t b = p_;
    while (p_ < s_.size() && token_char(s_[p_])) ++p_;
    const std::string_view tok = s_.substr(b, p_ - b);
    if (tok.empty()) return fail("expected a value (a string, number, boolean, array or inline table)");
    if (tok == "true" || tok == "false") {
      v.type_ = toml_type::boolean;
      v.int_ = tok == "true" ? 1 : 0;
      return true;
    }
    return number(tok, v);
  }
  static bool token_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '+' ||
           c == '-' || c == '.' || c == ':';
  }
  static bool dec_digit(char c) { return c >= '0' && c <= '9'; }
  static bool hex_digit(char c) { return dec_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
  static unsigned digit_value(char c) {
    if (c >= 'a') return static_cast<unsigned>(c - 'a' + 10);
    if (c >= 'A') return static_cast<unsigned>(c - 'A' + 10);
    return static_cast<unsigned>(c - '0');
  }
  /// Digits of base `base` with single underscores between them, from tok[i], appended to buf[n] (at most
  /// toml_max_number_chars in all). Returns how many digits were read (0: none, or an error with `bad` set).
  static std::size_t digit_run(std::string_view tok, std::size_t& i, unsigned base, char* buf, std::size_t& n,
                               const char*& bad) {
    std::size_t count = 0;
    for (;;) {
      if (i >= tok.size()) break;
      const char c = tok[i];
      const bool ok = base == 16 ? hex_digit(c) : c >= '0' && c < static_cast<char>('0' + base);
      if (!ok) break;
      if (n >= toml_max_number_chars) {
        bad = "a number may have at most 128 characters (underscores and sign not counted)";
        return 0;
      }
      buf[n++] = c;
      ++count;
      ++i;
      if (i < tok.size() && tok[i] == '_') {
        ++i;
        const char d = i < tok.size() ? tok[i] : '\0';
        if (!(base == 16 ? hex_digit(d) : d >= '0' && d < static_cast<char>('0' + base))) {
          bad = "an underscore in a number must be between two digits";
          return 0;
        }
      }
    }
    if (count == 0 && bad == nullptr) bad = "expected a digit";
    return count;
  }
  bool number(std::string_view tok, value& v) {
    std::size_t i = 0;
    const bool negative = tok[0] == '-';
    const bool has_sign = negative || tok[0] == '+';
    if (has_sign) i = 1;
    const std::string_view body = tok.substr(i);
    if (body == "inf" || body == "nan") {
      v.type_ = toml_type::floating;
      if (body == "nan") {
        v.float_ = std::numeric_limits<double>::quiet_NaN();  // toml++ drops nan's sign
      } else {
        v.float_ = negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      }
      return true;
    }
    if (body.empty() || !dec_digit(body[0])) {
      return fail("expected a value (a string, number, boolean, array or inline table)");
    }
    if (!has_sign && ((body.size() >= 5 && dec_digit(body[1]) && dec_digit(body[2]) && dec_digit(body[3]) &&
                       body[4] == '-') ||
                      (body.size() >= 3 && dec_digit(body[1]) && body[2] == ':'))) {
      return fail(toml_date_error);
    }
    char buf[toml_max_number_chars + 1];
    std::size_t n = 0;
    const char* bad = nullptr;
    if (body.size() >= 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'o' || body[1] == 'b')) {
      if (has_sign) return fail("a hexadecimal, octal or binary integer cannot have a sign");
      const unsigned base = body[1] == 'x' ? 16u : body[1] == 'o' ? 8u : 2u;
      i += 2;
      if (digit_run(tok, i, base, buf, n, bad) == 0) return fail(bad);
      if (i != tok.size()) return fail("invalid integer");
      std::uint64_t r = 0;
      const std::uint64_t limit = static_cast<std::uint64_t>((std::numeric_limits<std::int64_t>::max)());
      for (std::size_t k = 0; k < n; ++k) {
        const unsigned dv = digit_value(buf[k]);
        if (r > (limit - dv) / base) return fail("integer out of range (64-bit signed)");
        r = r * base + dv;
      }
      v.type_ = toml_type::integer;
      v.int_ = static_cast<std::int64_t>(r);
      return true;
    }
    const std::size_t int_digits = digit_run(tok, i, 10, buf, n, bad);
    if (int_digits == 0) return fail(bad);
    if (int_digits > 1 && buf[0] == '0') return fail("leading zeros are not allowed in a number");
    bool is_float = false;
    if (i < tok.size() && tok[i] == '.') {
      ++i;
      if (n >= toml_max_number_chars) return fail("a number may have at most 128 characters");
      buf[n++] = '.';
      if (digit_run(tok, i, 10, buf, n, bad) == 0) return fail(bad);
      is_float = true;
    }
    if (i < tok.size() && (tok[i] == 'e' || tok[i] == 'E')) {
      ++i;
      if (n + 2 > toml_max_number_chars) return fail("a number may have at most 128 characters");
      buf[n++] = 'e';
      if (i < tok.size() && (tok[i] == '+' || tok[i] == '-')) buf[n++] = tok[i++];
      if (digit_run(tok, i, 10, buf, n, bad) == 0) return fail(bad);
      is_float = true;
    }
    if (i != tok.size()) return fail("invalid number");
    if (!is_float) {
      if (int_digits > 19) return fail("integer out of range (64-bit signed)");
      std::uint64_t r = 0;
      for (std::size_t k = 0; k < n; ++k) r = r * 10 + static_cast<unsigned>(buf[k] - '0');
      const std::uint64_t limit = static_cast<std::uint64_t>((std::numeric_limits<std::int64_t>::max)());
      if (r > limit + (negative ? 1u : 0u)) return fail("integer out of range (64-bit signed)");
      v.type_ = toml_type::integer;
      if (negative) {
        v.int_ = r == limit + 1 ? (std::numeric_limits<std::int64_t>::min)() : -static_cast<std::int64_t>(r);
      } else {
        v.int_ = static_cast<std::int64_t>(r);
      }
      return true;
    }
    double d = 0.0;
    if (!toml_to_double(std::string_view(buf, n), d)) return fail("float out of range (larger than a double)");
    v.type_ = toml_type::floating;
    v.float_ = negative ? -d : d;
    return true;
  }

  bool array(value& v, std::size_t depth) {
    v.type_ = toml_type::array;
    ++p_;
    bool after_value = false;
    for (;;) {
      if (!skip_blank()) return false;
      if (p_ >= s_.size()) return fail("unterminated array (expected ']')");
      const char c = s_[p_];
      if (c == ']') {
        ++p_;
        return true;
      }
      if (c == ',') {
        if (!after_value) return fail("expected a value or ']' in an array, not ','");
        after_value = false;
        ++p_;
        continue;
      }
      if (after_value) return fail("expected ',' or ']' after an array element");
      if (too_deep(depth + 1, line_)) return false;
      v.items_.emplace_back();
      if (!parse_value(v.items_.back(), depth + 1)) return false;
      after_value = true;
    }
  }

  bool inline_table(value& v, std::size_t depth) {
    v.type_ = toml_type::table;
    v.flags_ = inline_made;
    ++p_;
    enum { start, after_pair, after_comma } state = start;
    for (;;) {
      skip_spaces();
      if (p_ >= s_.size()) return fail("unterminated inline table (expected '}')");
      const char c = s_[p_];
      if (c == '}') {
        if (state == after_comma) return fail("a trailing comma is not allowed in an inline table");
        ++p_;
        return true;
      }
      if (c == ',') {
        if (state != after_pair) return fail("expected a key or '}' in an inline table, not ','");
        state = after_comma;
        ++p_;
        continue;
      }
      if (state == after_pair) return fail("expected ',' or '}' after a key/value pair in an inline table");
      if (!key_start(c)) return fail("expected a key or '}' in an inline table (on one line)");
      if (!key_value(v, depth)) return false;
      state = after_pair;
    }
  }

  // --- strings ---
  /// A string at p_ (a quote) into `out`. A key may not be multi-line.
  bool string(string_type& out, bool is_key) {
    const char q = s_[p_];
    const bool multi = p_ + 2 < s_.size() && s_[p_ + 1] == q && s_[p_ + 2] == q;
    if (multi && is_key) return fail("a key cannot be a multi-line string");
    if (!multi) return q == '"' ? basic_string(out) : literal_string(out);
    p_ += 3;
    if (line_break() < 0) return false;  // a newline right after the opening quotes is not part of the string
    return q == '"' ? multi_basic_string(out) : multi_literal_string(out);
  }
  bool basic_string(string_type& out) {
    ++p_;
    for (;;) {
      const std::size_t b = p_;
      while (p_ < s_.size() && s_[p_] != '"' && s_[p_] != '\\' && !control(s_[p_])) ++p_;
      out.append(s_.data() + b, p_ - b);
      if (p_ >= s_.size()) return fail("unterminated string (expected '\"')");
      const char c = s_[p_];
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c == '\\') {
        if (!escape(out)) return false;
        continue;
      }
      if (c == '\n' || c == '\r') return fail("unterminated string (a single-line string ends at its line's end)");
      return fail("control characters other than tab must be escaped in a string");
    }
  }
  bool literal_string(string_type& out) {
    ++p_;
    const std::size_t b = p_;
    while (p_ < s_.size() && s_[p_] != '\'' && !control(s_[p_])) ++p_;
    if (p_ >= s_.size() || s_[p_] == '\n' || s_[p_] == '\r') {
      return fail("unterminated literal string (expected \"'\")");
    }
    if (s_[p_] != '\'') return fail("control characters other than tab are not allowed in a literal string");
    out.append(s_.data() + b, p_ - b);
    ++p_;
    return true;
  }
  /// At a run of quote characters `q` inside a multi-line string: 1 the string ended, 0 they were content,
  /// -1 too many (error set).
  int closing_quotes(string_type& out, char q) {
    std::size_t k = 0;
    while (p_ + k < s_.size() && s_[p_ + k] == q) ++k;
    p_ += k;
    if (k < 3) {
      out.append(k, q);
      return 0;
    }
    if (k > 5) {
      fail("more than five quotes in a row at the end of a multi-line string");
      return -1;
    }
    out.append(k - 3, q);  // up to two quotes right before the closing three belong to the string
    return 1;
  }
  bool multi_basic_string(string_type& out) {
    for (;;) {
      const std::size_t b = p_;
      while (p_ < s_.size() && s_[p_] != '"' && s_[p_] != '\\' && !control(s_[p_])) ++p_;
      out.append(s_.data() + b, p_ - b);
      if (p_ >= s_.size()) return fail("unterminated multi-line string (expected '\"\"\"')");
      const char c = s_[p_];
      if (c == '"') {
        const int r = closing_quotes(out, '"');
        if (r != 0) return r > 0;
      } else if (c == '\n' || c == '\r') {
        if (line_break() < 0) return false;
        out += '\n';  // CRLF too (as toml++)
      } else if (c == '\\') {
        std::size_t k = p_ + 1;
        while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t')) ++k;
        if (k < s_.size() && (s_[k] == '\n' || s_[k] == '\r')) {
          // a line-ending backslash: drop the line break and all spaces and line breaks after it
          p_ = k;
          for (;;) {
            skip_spaces();
            const int r = line_break();
            if (r < 0) return false;
            if (r == 0) break;
          }
        } else if (k > p_ + 1) {
          return fail("a line-ending backslash must be the last character on its line but spaces");
        } else if (!escape(out)) {
          return false;
        }
      } else {
        return fail("control characters other than tab must be escaped in a string");
      }
    }
  }
  bool multi_literal_string(string_type& out) {
    for (;;) {
      const std::size_t b = p_;
      while (p_ < s_.size() && s_[p_] != '\'' && !control(s_[p_])) ++p_;
      out.append(s_.data() + b, p_ - b);
      if (p_ >= s_.size()) return fail("unterminated multi-line literal string (expected \"'''\")");
      const char c = s_[p_];
      if (c == '\'') {
        const int r = closing_quotes(out, '\'');
        if (r != 0) return r > 0;
      } else if (c == '\n' || c == '\r') {
        if (line_break() < 0) return false;
        out += '\n';
      } else {
        return fail("control characters other than tab are not allowed in a literal string");
      }
    }
  }
  /// At a backslash: one escape sequence.
  bool escape(string_type& out) {
    ++p_;
    if (p_ >= s_.size()) return fail("unterminated string (a backslash at the end)");
    const char c = s_[p_++];
    switch (c) {
      case 'b': out += '\b'; return true;
      case 't': out += '\t'; return true;
      case 'n': out += '\n'; return true;
      case 'f': out += '\f'; return true;
      case 'r': out += '\r'; return true;
      case '"': out += '"'; return true;
      case '\\': out += '\\'; return true;
      case 'u':
      case 'U': break;
      default: {
        std::string m = "invalid escape sequence '\\";
        if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7F) m += c;
        m += "' (TOML has \\b \\t \\n \\f \\r \\\" \\\\ \\uXXXX \\UXXXXXXXX)";
        return fail(m);
      }
    }
    const std::size_t len = c == 'u' ? 4 : 8;
    std::uint32_t cp = 0;
    for (std::size_t k = 0; k < len; ++k, ++p_) {
      if (p_ >= s_.size() || !hex_digit(s_[p_])) {
        return fail(c == 'u' ? "expected 4 hexadecimal digits after \\u" : "expected 8 hexadecimal digits after \\U");
      }
      cp = cp * 16 + digit_value(s_[p_]);
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) return fail("a unicode escape cannot be a surrogate (U+D800 to U+DFFF)");
    if (cp > 0x10FFFF) return fail("a unicode escape cannot be above U+10FFFF");
    char u[4];
    std::size_t n = 0;
    if (cp < 0x80) {
      u[n++] = static_cast<char>(cp);
    } else if (cp < 0x800) {
      u[n++] = static_cast<char>(0xC0 | (cp >> 6));
      u[n++] = static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      u[n++] = static_cast<char>(0xE0 | (cp >> 12));
      u[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      u[n++] = static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      u[n++] = static_cast<char>(0xF0 | (cp >> 18));
      u[n++] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      u[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      u[n++] = static_cast<char>(0x80 | (cp & 0x3F));
    }
    out.append(u, n);
    return true;
  }

  using key_list = std::vector<string_type, typename value::template alloc_for<string_type>>;

  std::string_view s_;
  std::string_view source_;
  std::string& error_;
  std::size_t p_ = 0;
  std::uint32_t line_ = 1;
  key_list keys_;  ///< the segments of the key being read (reused: their buffers stay)
  std::size_t nkeys_ = 0;
};

/// Parses `text` into `root` (a table). false: `error` is "<source>:<line>: <problem>" and `root` an empty
/// table. Allocations may throw std::bad_alloc (nothing noexcept allocates); `root` is then unchanged.
template <class Alloc>
bool toml_parse(std::string_view text, std::string_view source, basic_toml_value<Alloc>& root, std::string& error) {
  basic_toml_value<Alloc> doc;
  toml_reader<Alloc> r(text, source, error);
  if (!r.read(doc)) {
    root = basic_toml_value<Alloc>();
    return false;
  }
  root = std::move(doc);
  return true;
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_TOML_CONFIG_HPP
