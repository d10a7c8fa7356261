// nanscope tests — toml_config_test.cpp: the config file's TOML reader (detail/toml_config.hpp) and the config
// built from it (detail/control_toml.hpp). toml++ is the independent reference where it is installed: hand-written
// edge cases and seeded random documents (every key and string style, integers in every base, floats, arrays,
// inline tables, [tables] and [[arrays of tables]]) must give the same tree as toml++ (values, types and lines),
// and every randomly mutated document must be refused by both or read the same by both; the one thing toml++
// accepts and this reader refuses is a date or time (its own error). Every allocation failing in turn gives a
// parsed document or std::bad_alloc, never std::terminate; hostile texts (deep nesting, wide tables) end in an
// error or a result.
#include <nanscope/control.hpp>
#include <nanscope/detail/control_toml.hpp>
#include <nanscope/detail/toml_config.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <clocale>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#if __has_include(<toml++/toml.h>)
#include <toml++/toml.h>
#endif

namespace toml_config_test {

using nanscope::detail::toml_type;
using nanscope::detail::toml_value;

#if defined(NANSCOPE_TEST_QUICK)
constexpr int scale = 1;
#else
constexpr int scale = 4;
#endif

/// The text with control and non-ASCII bytes escaped, for messages.
inline std::string shown(std::string_view s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n\n";
    } else if (u < 0x20 || u >= 0x7F) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", u);
      out += b;
    } else {
      out += c;
    }
  }
  return out;
}

/// Parses with nanscope's reader; true when it read the text.
inline bool mine(std::string_view text, toml_value& doc, std::string& error) {
  return nanscope::detail::toml_parse(text, "mine.toml", doc, error);
}

/// An error text is "mine.toml:<line>: <problem>".
inline bool well_formed_error(const std::string& e) {
  const std::string prefix = "mine.toml:";
  if (e.compare(0, prefix.size(), prefix) != 0) return false;
  std::size_t i = prefix.size();
  const std::size_t digits_from = i;
  while (i < e.size() && e[i] >= '0' && e[i] <= '9') ++i;
  return i > digits_from && e.compare(i, 2, ": ") == 0 && e.size() > i + 2;
}

/// Two of nanscope's trees (of any allocators) are the same: types, values, keys, lines and order.
template <class A, class B>
bool same_doc(const nanscope::detail::basic_toml_value<A>& a, const nanscope::detail::basic_toml_value<B>& b) {
  if (a.type() != b.type() || a.line() != b.line() || a.key() != b.key() || a.size() != b.size()) return false;
  switch (a.type()) {
    case toml_type::string: return a.as_string() == b.as_string();
    case toml_type::integer: return a.as_integer() == b.as_integer();
    case toml_type::boolean: return a.as_boolean() == b.as_boolean();
    case toml_type::floating: {
      const double x = a.as_floating(), y = b.as_floating();
      return std::memcmp(&x, &y, sizeof x) == 0 || (std::isnan(x) && std::isnan(y));
    }
    default: break;
  }
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_doc(a.items()[i], b.items()[i])) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------------------------
// A stateless allocator whose n-th allocation on this thread (from when `countdown` was set) throws std::bad_alloc.
// ---------------------------------------------------------------------------------------------------------------
inline thread_local long countdown = 0;
inline thread_local long allocations = 0;
template <class T>
struct failing_allocator {
  using value_type = T;
  using is_always_equal = std::true_type;
  failing_allocator() = default;
  template <class U>
  failing_allocator(const failing_allocator<U>&) {}
  T* allocate(std::size_t n) {
    ++allocations;
    if (countdown > 0 && --countdown == 0) throw std::bad_alloc();
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, std::size_t n) { std::allocator<T>().deallocate(p, n); }
  template <class U>
  bool operator==(const failing_allocator<U>&) const { return true; }
  template <class U>
  bool operator!=(const failing_allocator<U>&) const { return false; }
};
using failing_doc = nanscope::detail::basic_toml_value<failing_allocator<char>>;

// ---------------------------------------------------------------------------------------------------------------
// Hand-written documents
// ---------------------------------------------------------------------------------------------------------------
/// Valid TOML 1.0 (toml++ reads each; so must nanscope).
inline std::vector<std::string> valid_corpus() {
  return {
      "",
      "\n\n\n",
      "# only a comment",
      "\xEF\xBB\xBF" "a = 1\n",
      "\xEF\xBB\xBF",
      "a = 1",
      "a = 1\r\nb = 2\r\n",
      "a=1\nb=\"x\"\n",
      "  a  =  1  # comment\n",
      "\ta\t=\t1\t\n",
      "a.b.c = 1\na.b.d = 2\na.e = 3\n",
      "a . b = 1\na\t.\tc = 2\n",
      "\"a.b\" = 1\n'c.d' = 2\n\"a\".\"x y\" = 3\n",
      "\"\" = 1\n",
      "'' = 1\n",
      "\"\\u00e9\".y = 1\n\"é\".x = 2\n",
      "1234 = 1\n-_- = 2\n_ = 3\n- = 4\n",
      "true = 1\nfalse = 2\ninf = 3\nnan = 4\n",
      "3.14159 = 'pi'\n",
      "a = \"\\b\\t\\n\\f\\r\\\"\\\\\\u00e9\\U0001F600\\u0000\\u007F\\uFFFF\\U0010FFFF\"\n",
      "a = \"\\u0041\\U00000042\"\n",
      "a = 'C:\\Users\\x\\n'\n",
      "a = \"tab\there\"\nb = 'tab\there'\n",
      "a = 'é中😀'\nb = \"é中😀\"\n",
      "a = \"\"\"\nline1\nline2\"\"\"\n",
      "a = \"\"\"\r\nline1\r\nline2\"\"\"\n",
      "a = \"\"\"\n\nafter a blank line\"\"\"\n",
      "a = \"\"\"one \\\n   two \\\n\n  three\"\"\"\n",
      "a = \"\"\"trailing \\   \n  x\"\"\"\n",
      "a = \"\"\"trailing \\\t\r\n\t x\"\"\"\n",
      "a = \"\"\"\\\n\"\"\"\n",
      "a = \"\"\"\"\"\"\n",
      "a = \"\"\"\"quoted\"\"\"\"\n",
      "a = \"\"\"x\"\"\"\"\"\n",
      "a = \"\"\"x\"\"y\"\"\"\n",
      "a = \"\"\"\"\"x\"\"\"\n",
      "a = \"\"\"tab\there\\ttab\"\"\"\n",
      "a = '''\n raw \\n '''\n",
      "a = ''''one''''\n",
      "a = '''x'''''\n",
      "a = '''''x'''\n",
      "a = '''\r\nx\r\ny'''\n",
      "a = ''''''\n",
      "a = +99\nb = 42\nc = 0\nd = -17\ne = 1_000\nf = 5_349_221\ng = 1_2_3_4_5\nh = -0\ni = +0\n",
      "a = 9223372036854775807\nb = -9223372036854775808\nc = +9223372036854775807\n",
      "a = 0xDEADBEEF\nb = 0xdeadbeef\nc = 0xdead_beef\nd = 0o01234567\ne = 0o755\nf = 0b11010110\n",
      "a = 0x7FFFFFFFFFFFFFFF\nb = 0x0000000000000000000001\nc = 0o777777777777777777777\n",
      "a = 0b111111111111111111111111111111111111111111111111111111111111111\n",
      "a = 0b0\nb = 0o0\nc = 0x0\nd = 0x00_00\n",
      "a = +1.0\nb = 3.1415\nc = -0.01\nd = 5e+22\ne = 1e06\nf = -2E-2\ng = 6.626e-34\n",
      "a = 224_617.445_991_228\nb = 0.0\nc = -0.0\nd = +0.0\ne = 0e0\nf = 1E0_0\ng = 1_0.0_1e1_0\n",
      "a = 1e-400\nb = -1e-400\nc = 3e-324\nd = 2.4703282292062328e-324\ne = 1e-310\n",
      "a = 1.7976931348623157e308\nb = -1.7976931348623158e308\nc = 0e99999999999999\n",
      "a = 0.1\nb = 0.2\nc = 0.30000000000000004\nd = 9007199254740993\ne = 9007199254740993.0\n",
      "a = 123456789012345678901234567890.123456789\nb = 1.00000000000000011102230246251565404236316680908203125\n",
      "a = inf\nb = +inf\nc = -inf\nd = nan\ne = +nan\nf = -nan\n",
      "a = true\nb = false\n",
      "a = [1, 2, 3]\nb = ['a', \"b\"]\nc = [[1, 2], [3]]\nd = [1, 'mixed', 2.5, true, [], {}]\n",
      "e = [\n  1,\n  2, # comment\n]\nf = []\ng = [ ]\nh = [\n]\n",
      "a = [\n\n# only comments\n\n]\n",
      "a = [ [ ], [ [ ] ] ]\nb = [1,2,]\nc = [\"\"\"x\ny\"\"\", '''z''']\n",
      "a = [\r\n1,\r\n2\r\n]\r\n",
      "a = { x = 1, y = 'two', z.w = 3 }\nb = {}\nc = { d = { e = [1, {f = 2}] } }\n",
      "a = {x = [\n1,\n2]}\nb = {s = \"\"\"multi\nline\"\"\"}\n",
      "a = {b.c = 1, b.d = 2}\n",
      "a = {\"q k\" = 1, 'l k' = 2, b . c = 3}\n",
      "[t]\nx = 1\n[u]\ny = 2\n",
      "[ t ]\n[ t . u ]\n[\tt\t.\tv\t]\n",
      "[a.b.c]\nx = 1\n[a]\ny = 2\n",
      "[a.b.c]\n[a.b]\n",
      "[a.b]\n[a]\n[a.c]\n",
      "[a]\n[b]\n[a.c]\n",
      "[[site]]\nglob = 'x'\n[[site]]\nglob = 'y'\n",
      "[[a]]\n[a.b]\nx = 1\n[[a]]\n[a.b]\nx = 2\n",
      "[[a]]\n[[a.b]]\n[[a.b]]\n[[a]]\n[[a.b]]\n",
      "[[a.b]]\n[a]\n",
      "[a]\nb.c = 1\n[a.b.d]\ne = 2\n",
      "x.y = 1\n[x.z]\n",
      "[\"quoted header\".'literal part']\n",
      "[a]\n[a.\"b.c\"]\n",
      "[a.b.c]\n[a]\nb.d = 1\n",
      "[a.b.c]\n[a]\nb.d.e = 1\n[a.b]\n",
      "[a.b.c]\n[a]\nb.x = {y = 1}\n[a.b]\n",
      "[a.b.c]\n[a]\nb.x = [{y = 1}]\n[a.b]\n",
      "[a]\nb = {c = 1}\n[a.d]\n",
      "x = 1 # comment\n# comment\n[t] # c\n[[s]] # c\n",
      "a = 1\t# tab then comment\nb = 1#c\n",
      "a = \"# not a comment\"\n",
      "# comment with unicode é 中 😀 and a tab\t and \"quotes\" and [brackets] = x\n",
      "a = 1\n\n\n\nb = 2\n",
      "key = \"value\"\nbare_key = \"value\"\nbare-key = \"value\"\n1234 = \"value\"\n",
      "a = 1\r\n[t]\r\nb = '''\r\nx\r\ny'''\r\n",
      "site = [{glob = 'x'}, {regex = 'y'}]\n",
      "[\"\"]\n", "[''.a]\n", "\"\" = {}\n", "a = {\"\" = 1}\n", "[a]\n\"\" = 1\n",
      "\"\\u0000\" = 1\n\"\\u0000x\" = 2\n",
      "a = \"\"\"\\\r\n\"\"\"\n", "a = 1 \r\n# c\r\n[t] \r\n",
      "a = \"" + std::string(20000, 'x') + "\"\n",
      "a = 1 # " + std::string(5000, '#') + "\n",
      "a = 1." + std::string(120, '5') + "\n",
      "a = 0x" + std::string(127, '0') + "1\n",
  };
}

/// Invalid TOML 1.0 (toml++ refuses each; so must nanscope).
inline std::vector<std::string> invalid_corpus() {
  return {
      "a = \n", "= 1\n", "a\n", "a = 1 b = 2\n", "a = 1\nb\n", "a.= 1\n", ".a = 1\n", "a..b = 1\n", "a = 1,\n",
      "a = 1\na = 2\n", "a.b = 1\na.b = 2\n", "a = 1\na.b = 2\n", "a.b = 1\na = 2\n", "\"a\" = 1\na = 2\n",
      "a = 1\n'a' = 2\n", "\"\\u0061\" = 1\na = 2\n",
      "[a]\n[a]\n", "[a]\nb=1\n[a.b]\n", "[a.b]\n[a]\n[a]\n", "a = {}\n[a]\n", "a = {}\n[a.b]\n",
      "a = {b = 1}\na.c = 2\n", "[a]\nb.c=1\n[a.b]\n", "a = []\n[[a]]\n", "[[a]]\n[a]\n", "[a]\n[[a]]\n",
      "a = 1\n[a]\n", "a.b = 1\n[a]\n", "[a.b]\nc=1\n[a]\nb.d = 2\n", "a = [{}]\n[a.b]\n", "a = 1\n[a.b]\n",
      "[a.b.c]\n[a]\nb.d = 1\n[a.b]\n", "[a.b.c]\n[a]\nb.x = []\n[a.b]\n", "[a.b.c]\n[a]\nb.x = [1]\n[a.b]\n",
      "[[a.b]]\n[a]\n[a]\n", "[a]\n[a.b]\n[a.b]\n", "[a.b]\nx = 1\n[a.b.x]\n",
      "[]\n", "[ ]\n", "[a\n", "[a]]\n", "[[a]\n", "[[a] ]\n", "[ [a]]\n", "[a] b = 1\n", "[a.]\n", "[.a]\n",
      "[a..b]\n", "[\"\"\"a\"\"\"]\n", "[[]]\n", "[a]x\n",
      "\"\"\"a\"\"\" = 1\n", "'''a''' = 1\n", "\"a\nb\" = 1\n", "a\"b\" = 1\n",
      "a = \"unterminated\n", "a = 'unterminated\n", "a = \"\"\"unterminated", "a = '''unterminated",
      "a = \"unterminated", "a = '''x''''''\n", "a = \"\"\"x\"\"\"\"\"\"\n", "a = \"", "a = '",
      "a = \"\\x41\"\n", "a = \"\\e\"\n", "a = \"\\/\"\n", "a = \"\\ \"\n", "a = \"\\uD800\"\n", "a = \"\\uDFFF\"\n",
      "a = \"\\U00110000\"\n", "a = \"\\u12\"\n", "a = \"\\U1234567\"\n", "a = \"\\uGGGG\"\n", "a = \"\\\"\n",
      "a = \"\\U0000D800\"\n", "a = \"\\UFFFFFFFF\"\n",
      "a = \"\"\"x\\ y\"\"\"\n", "a = \"\"\"x\\  \"\"\"\n", "a = \"\"\"x\\\ry\"\"\"\n",
      std::string("a = \"tab\x01\"\n"), "a = 'x\x7F'\n", "a = \"\"\"\x0b\"\"\"\n", "a = '''\x0c'''\n",
      "# bad \x01 comment\n", "# \x7F\n", std::string("a = 1 #\x00\n", 10),
      "a = 1\r\n\r", "a = 1\rb = 2\n", "a = \"x\ry\"\n", "a = \"\"\"a\rb\"\"\"\n", "a = '''a\rb'''\n",
      "# c\r", "a = [1,\r2]\n", "\r", "[a]\r\n\rb = 1\n",
      "a = 01\n", "a = 00\n", "a = +01\n", "a = 0_1\n", "a = 1__0\n", "a = _1\n", "a = 1_\n", "a = 1e\n",
      "a = 1e_1\n", "a = 1.\n", "a = .1\n", "a = +.1\n", "a = 1._1\n", "a = 1_.1\n", "a = 1e1.5\n", "a = 1e1e1\n",
      "a = 1.1.1\n", "a = 01.5\n", "a = -01.5\n", "a = 00.5\n", "a = 1e+-1\n", "a = 1__1.0\n", "a = 1e1_\n",
      "a = 1.e5\n", "a = 1_e5\n", "a = 0_0\n", "a = -0_0\n", "a = 1,000\n", "a = 1 000\n",
      "a = 0x\n", "a = 0xG\n", "a = 0X1\n", "a = -0x1\n", "a = +0x1\n", "a = 0x_1\n", "a = 0x1_\n", "a = 0o8\n",
      "a = 0b2\n", "a = 0B1\n", "a = 0O1\n", "a = 0x1.5\n", "a = 0o\n", "a = 0b\n", "a = 0x1__2\n",
      "a = 9223372036854775808\n", "a = -9223372036854775809\n", "a = 0x8000000000000000\n",
      "a = 99999999999999999999\n", "a = 0o1000000000000000000000\n",
      "a = 0b1000000000000000000000000000000000000000000000000000000000000000\n",
      "a = 1e400\n", "a = -1e400\n", "a = 1.8e308\n",
      "a = Inf\n", "a = NaN\n", "a = infinity\n", "a = nan1\n", "a = True\n", "a = FALSE\n", "a = truex\n",
      "a = tru\n", "a = +true\n", "a = -\n", "a = +\n", "a = ++1\n", "a = --1\n", "a = +-1\n", "a = inf.0\n",
      "a = [1 2]\n", "a = [,]\n", "a = [1,,2]\n", "a = [1\n", "a = [\n", "a = ]\n", "a = [1,]]\n",
      "a = {b = 1,}\n", "a = {,}\n", "a = {b = 1\n", "a = {\nb = 1}\n", "a = {b = 1 c = 2}\n",
      "a = {b = 1, b = 2}\n", "a = {b = 1, # c\n}\n", "a = {b.c = 1, b = 2}\n", "a = {b = {c = 1}, b.d = 2}\n",
      "a = {b = 1}}\n", "a = {b = 1,\n}\n", "a = {b}\n", "a = {= 1}\n",
      "a = 1 # ok\nb = 2 c\n", "a = 'x' 'y'\n", "a = \"x\"y\n", "a = [1]2\n", "a = {}x\n", "a = truefalse\n",
      "\xff = 1\n", "a = \"\xc0\x80\"\n", "a = \"\xed\xa0\x80\"\n", "a = \"\xe2\x82\"\n", "a = \"\xf4\x90\x80\x80\"\n",
      "# \xf5\n", "a = 1 \x80\n", "a = '\xe0\x80\x80'\n", "a = 1 # \xc1\xbf\n", "a = \"\xf0\x8f\xbf\xbf\"\n",
      "a = 1\xc2\xa0\n", "\xc2\xa0" "a = 1\n", "a =\xc2\xa0" "1\n", "a = 1 # x\n\xe2\x80\xa8",
      std::string("a\x00= 1\n", 6), std::string("a = \x00\n", 6),
      "\xEF\xBB\xBF\xEF\xBB\xBF" "a = 1\n", "a = 1\n\xEF\xBB\xBF" "b = 2\n",
      "a = \"\"\"\n", "a = '''\n", "a = 1979-05-27x\n", "a = 1979-13-01\n", "a = 24:00:00\n",
      "[a]\n[a.b]\nc = 1\n[a.b]\n", "[[a]]\nb = 1\n[a.b]\n", "a = {a = 1, a.b = 2}\n", "[a]\n[a.b]\n[a.b.c]\n[a]\n",
      "a =\f1\n", "a = 1\f\n", "\"\\u0000\" = 1\n\"\\u0000\" = 2\n", "a = \"\"\"\\\r\"\"\"\n",
      "a = 1." + std::string(130, '5') + "\n", "a = 0x" + std::string(130, '0') + "1\n",
  };
}

/// Dates and times: toml++ reads them; nanscope refuses them with toml_date_error.
inline std::vector<std::string> date_corpus() {
  return {"a = 1979-05-27T07:32:00Z\n",  "a = 1979-05-27T00:32:00-07:00\n", "a = 1979-05-27 07:32:00\n",
          "a = 1979-05-27\n",            "a = 07:32:00\n",                  "a = 00:32:00.999999\n",
          "a = [1979-05-27]\n",          "a = {d = 07:32:00}\n",            "a = 1979-05-27t07:32:00.5+01:00\n",
          "a = 1979-05-27T07:32:00.999999999999Z\n"};
}

#if __has_include(<toml++/toml.h>)
// ---------------------------------------------------------------------------------------------------------------
// Comparison with toml++
// ---------------------------------------------------------------------------------------------------------------
inline bool has_date(const toml::node& n) {
  if (n.is_date() || n.is_time() || n.is_date_time()) return true;
  if (const auto* t = n.as_table()) {
    for (auto&& kv : *t)
      if (has_date(kv.second)) return true;
  }
  if (const auto* a = n.as_array()) {
    for (auto&& e : *a)
      if (has_date(e)) return true;
  }
  return false;
}

/// Walks both trees; on the first difference, `why` says where and what.
inline bool same_tree(const toml::node& ref, const toml_value& m, const std::string& path, std::string& why) {
  if (ref.source().begin.line != m.line()) {
    why = path + ": line " + std::to_string(m.line()) + ", toml++ " + std::to_string(ref.source().begin.line);
    return false;
  }
  auto differ = [&](const char* what) {
    why = path + ": " + what;
    return false;
  };
  switch (ref.type()) {
    case toml::node_type::table: {
      if (!m.is_table()) return differ("not a table");
      const toml::table& t = *ref.as_table();
      if (t.size() != m.size()) return differ("a different number of keys");
      for (auto&& kv : t) {
        const toml_value* e = m.find(kv.first.str());
        if (e == nullptr) return differ(("no key '" + std::string(kv.first.str()) + "'").c_str());
        if (e->key() != kv.first.str()) return differ("a key differs");
        if (!same_tree(kv.second, *e, path + "." + std::string(kv.first.str()), why)) return false;
      }
      return true;
    }
    case toml::node_type::array: {
      if (!m.is_array()) return differ("not an array");
      const toml::array& a = *ref.as_array();
      if (a.size() != m.size()) return differ("a different number of elements");
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (!m.items()[i].key().empty()) return differ("an array element with a key");
        if (!same_tree(a[i], m.items()[i], path + "[" + std::to_string(i) + "]", why)) return false;
      }
      return true;
    }
    case toml::node_type::string:
      if (!m.is_string()) return differ("not a string");
      if (ref.as_string()->get() != m.as_string()) {
        return differ(("string '" + shown(m.as_string()) + "', toml++ '" + shown(ref.as_string()->get()) + "'").c_str());
      }
      return true;
    case toml::node_type::integer:
      if (!m.is_integer()) return differ("not an integer");
      if (ref.as_integer()->get() != m.as_integer()) {
        return differ(("integer " + std::to_string(m.as_integer()) + ", toml++ " +
                       std::to_string(ref.as_integer()->get())).c_str());
      }
      return true;
    case toml::node_type::floating_point: {
      if (!m.is_floating()) return differ("not a float");
      const double r = ref.as_floating_point()->get(), v = m.as_floating();
      std::uint64_t rb = 0, vb = 0;
      std::memcpy(&rb, &r, sizeof r);
      std::memcpy(&vb, &v, sizeof v);
      const std::uint64_t mag = ~(std::uint64_t{1} << 63), inf = 0x7FF0000000000000ull;
      const bool both_nan = (rb & mag) > inf && (vb & mag) > inf;  // by the bits: -ffast-math folds isnan
#if NANSCOPE_TEST_FAST_MATH
      // -ffast-math links crtfastmath (flush-to-zero, denormals-are-zero): toml++'s strtod-like conversion then
      // gives 0 for a subnormal, where nanscope's reader (integer arithmetic only) keeps the exact subnormal
      const bool ftz = (rb & mag) == 0 && (vb & mag) != 0 && (vb & inf) == 0 && (rb >> 63) == (vb >> 63);
#else
      const bool ftz = false;
#endif
      if (rb != vb && !both_nan && !ftz) {
        char b[96];
        std::snprintf(b, sizeof b, "float %.17g, toml++ %.17g", v, r);
        return differ(b);
      }
      return true;
    }
    case toml::node_type::boolean:
      if (!m.is_boolean()) return differ("not a boolean");
      if (ref.as_boolean()->get() != m.as_boolean()) return differ("a different boolean");
      return true;
    default: return differ("toml++ has a date or time here");
  }
}

/// toml++ 3.3 asserts its preconditions (with NDEBUG, clang assumes them: undefined behaviour) where two invalid
/// texts reach it: a table header whose key starts with a character no key starts with (`[.a]`), and an array
/// element position holding '}' or U+0085/U+2028/U+2029 (`[1, }`). Such texts are not given to toml++: false when
/// `text` may be one (found the way toml++ gets there: a '[' first on its line, or any '[' or ',' followed by
/// spaces, line breaks and comments).
/// toml++ 3.3's is_non_ascii_horizontal_whitespace reaches TOML_UNREACHABLE (undefined behaviour, a UBSan report)
/// for most code points in U+00A1..U+0499, U+2D0E..U+3107 and U+FB26..U+FEFE (é among them) wherever it asks
/// whether a character is whitespace: at a statement's start, after a value, after a line-ending backslash.
inline bool tomlpp_whitespace_ub(std::uint32_t c) {
  if (c < 0xA0 || c > 0xFEFF || c == 0xA0 || c == 0x3000 || c == 0xFEFF) return false;
  const std::uint64_t child = (c - 0xA0u) / 0x3FAu;
  return ((std::uint64_t{1} << child) & 0x7FFFFFFFFFFFF75Eull) == 0 && child != 5 && child != 7;
}

inline bool tomlpp_safe(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {  // valid UTF-8 sequences of such code points
    const auto u = static_cast<unsigned char>(text[i]);
    if (u < 0xC2 || u > 0xEF || i + 1 >= text.size()) continue;
    const auto b1 = static_cast<unsigned char>(text[i + 1]);
    std::uint32_t c = 0;
    if (u < 0xE0) {
      c = ((u & 0x1Fu) << 6) | (b1 & 0x3Fu);
    } else if (i + 2 < text.size()) {
      c = ((u & 0x0Fu) << 12) | ((b1 & 0x3Fu) << 6) | (static_cast<unsigned char>(text[i + 2]) & 0x3Fu);
    }
    if (tomlpp_whitespace_ub(c)) return false;
  }
  auto key_start = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '"' || c == '\'';
  };
  auto spaces = [&](std::size_t i) {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    return i;
  };
  // A '[' first on its line is an array's element, not a header, when the text before it ends (spaces and line
  // breaks aside) with '[' or ',' on a line without '#': no statement ends so (inside a string, toml++ is not at a
  // statement either).
  auto in_array = [&](std::size_t line) {
    std::size_t k = line;
    while (k > 0 && (text[k - 1] == ' ' || text[k - 1] == '\t' || text[k - 1] == '\n' || text[k - 1] == '\r')) --k;
    if (k == 0 || (text[k - 1] != ',' && text[k - 1] != '[')) return false;
    const std::size_t from = text.rfind('\n', k - 1);
    return text.substr(from == std::string_view::npos ? 0 : from, k - (from == std::string_view::npos ? 0 : from))
               .find('#') == std::string_view::npos;
  };
  const std::size_t bom = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  for (std::size_t line = bom; line < text.size();) {  // headers
    std::size_t i = spaces(line);
    if (i < text.size() && text[i] == '[' && !in_array(line)) {
      const std::size_t after = i + 1;
      i = spaces(after);
      bool refused = false;  // "[ [": refused before the key is read
      if (i < text.size() && text[i] == '[') {
        refused = i != after;
        i = spaces(i + 1);
      }
      if (!refused && i < text.size() && text[i] != ']' && !key_start(text[i])) return false;
    }
    const std::size_t nl = text.find('\n', line);
    line = nl == std::string_view::npos ? text.size() : nl + 1;
  }
  for (std::size_t i = 0; i < text.size(); ++i) {  // array elements
    if (text[i] != '[' && text[i] != ',') continue;
    std::size_t k = i + 1;
    for (;;) {
      k = spaces(k);
      if (k < text.size() && (text[k] == '\n' || text[k] == '\r')) {
        ++k;
      } else if (k < text.size() && text[k] == '#') {
        while (k < text.size() && text[k] != '\n' && text[k] != '\r') ++k;
      } else {
        break;
      }
    }
    const std::string_view rest = text.substr(k);
    if (rest.compare(0, 1, "}") == 0 || rest.compare(0, 2, "\xC2\x85") == 0 || rest.compare(0, 3, "\xE2\x80\xA8") == 0 ||
        rest.compare(0, 3, "\xE2\x80\xA9") == 0) {
      return false;
    }
  }
  return true;
}

/// toml++ 3.3, after a line-ending backslash in a multi-line basic string, also drops the non-ASCII spaces it
/// knows (U+00A0, U+1680, U+180E, U+2000..U+200B, U+202F, U+205F, U+2060, U+3000, U+FEFF); TOML 1.0 drops only
/// spaces, tabs and line breaks, as nanscope does. True when `text` has a backslash, spaces, a line break, spaces
/// and line breaks, then one of those: the values may differ there by design.
inline bool tomlpp_trims_unicode_space(std::string_view text) {
  auto unicode_space = [&](std::size_t i) {
    static const char* const spaces[] = {"\xC2\xA0", "\xE1\x9A\x80", "\xE1\xA0\x8E", "\xE2\x80\x80", "\xE2\x80\x81",
                                         "\xE2\x80\x82", "\xE2\x80\x83", "\xE2\x80\x84", "\xE2\x80\x85", "\xE2\x80\x86",
                                         "\xE2\x80\x87", "\xE2\x80\x88", "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\x8B",
                                         "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE2\x81\xA0", "\xE3\x80\x80", "\xEF\xBB\xBF"};
    for (const char* sp : spaces)
      if (text.compare(i, std::strlen(sp), sp) == 0) return true;
    return false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') continue;
    std::size_t k = i + 1;
    while (k < text.size() && (text[k] == ' ' || text[k] == '\t')) ++k;
    if (k >= text.size() || (text[k] != '\n' && text[k] != '\r')) continue;
    while (k < text.size() && (text[k] == ' ' || text[k] == '\t' || text[k] == '\n' || text[k] == '\r')) ++k;
    if (k < text.size() && unicode_space(k)) return true;
  }
  return false;
}

struct tally {
  int both_read = 0, both_refused = 0, dates = 0, not_for_tomlpp = 0;
  int fastmath_refused = 0;  ///< valid TOML that toml++ built with -ffast-math refused (the fastmath preset only)
};

/// "" when nanscope and toml++ agree on `text` (both refuse it, both read the same tree, or toml++ reads a date
/// that nanscope refuses with its date error); otherwise what differs. A text that is `valid` TOML never reaches
/// toml++'s assertions (only invalid constructs do): tomlpp_safe is not asked.
inline std::string compare_with_tomlpp(const std::string& text, tally* t = nullptr, bool valid = false) {
  if (!valid && !tomlpp_safe(text)) {  // nanscope alone: it must end (in an error or a result)
    toml_value doc;
    std::string error;
    if (!mine(text, doc, error) && !well_formed_error(error)) return "a malformed error text: " + error;
    if (t != nullptr) ++t->not_for_tomlpp;
    return "";
  }
  std::optional<toml::table> ref;
  std::string ref_error;
  try {
    ref = toml::parse(std::string_view(text), std::string_view("ref.toml"));
  } catch (const toml::parse_error& e) {
    ref_error = std::string(e.description()) + " (line " + std::to_string(e.source().begin.line) + ")";
  }
  toml_value doc;
  std::string error;
  const bool ok = mine(text, doc, error);
  if (!ok && !well_formed_error(error)) return "a malformed error text: " + error;
  if (!ok && (doc.size() != 0 || !doc.is_table())) return "a refused text left a document behind";
#if NANSCOPE_TEST_FAST_MATH
  // toml++'s number parsing built with -ffast-math refuses some valid numbers: no reference for such a text
  if (valid && !ref && ok) {
    if (t != nullptr) ++t->fastmath_refused;
    return "";
  }
#endif
  if (ref && ok) {
    std::string why;
    if (!same_tree(*ref, doc, "", why) && !tomlpp_trims_unicode_space(text)) return "a different tree: " + why;
    if (t != nullptr) ++t->both_read;
    return "";
  }
  if (!ref && !ok) {
    if (t != nullptr) ++t->both_refused;
    return "";
  }
  if (ok) return "read what toml++ refuses: " + ref_error;
  if (error.find(nanscope::detail::toml_date_error) != std::string::npos && has_date(*ref)) {
    if (t != nullptr) ++t->dates;
    return "";
  }
  return "refused what toml++ reads: " + error;
}

// ---------------------------------------------------------------------------------------------------------------
// Random documents: valid by construction (toml++ must read each), in every style TOML allows
// ---------------------------------------------------------------------------------------------------------------
class doc_gen {
 public:
  explicit doc_gen(std::uint64_t seed) : rng_(seed) {}

  std::string document() {
    crlf_ = chance(0.2);
    std::string out;
    if (chance(0.05)) out += "\xEF\xBB\xBF";
    if (chance(0.3)) out += "# " + comment_text() + nl();
    std::vector<std::string> root_dotted;
    section_body(out, 0, &root_dotted);
    std::vector<std::vector<std::string>> header_tables;  // [T] and promoted ones: sub-tables may follow
    std::vector<std::string> implicit_tables;             // P of [P.Q]: [P] may follow
    std::vector<std::string> arrays;                      // names of [[A]]
    const std::size_t sections = below(9);
    for (std::size_t s = 0; s < sections; ++s) {
      if (chance(0.3)) out += nl();
      if (chance(0.15)) out += sp() + "# " + comment_text() + nl();
      switch (below(7)) {
        case 0: {  // [T]
          const std::string t = fresh();
          out += header({t}, false);
          header_tables.push_back({t});
          break;
        }
        case 1: {  // [T.S] under a defined table
          if (header_tables.empty()) continue;
          std::vector<std::string> path = header_tables[below(header_tables.size())];
          path.push_back(fresh());
          out += header(path, false);
          if (path.size() < 4) header_tables.push_back(path);
          break;
        }
        case 2: {  // [P.Q]: P made implicitly
          const std::string p = fresh();
          out += header({p, fresh()}, false);
          implicit_tables.push_back(p);
          break;
        }
        case 3: {  // [P] defines an implicit table
          if (implicit_tables.empty()) continue;
          const std::size_t i = below(implicit_tables.size());
          const std::string p = implicit_tables[i];
          implicit_tables.erase(implicit_tables.begin() + static_cast<std::ptrdiff_t>(i));
          out += header({p}, false);
          header_tables.push_back({p});
          break;
        }
        case 4:
        case 5: {  // [[A]], appended to when A is used again; then maybe [A.S] or [[A.L]] for its last table
          if (arrays.empty() || chance(0.3)) {
            arrays.push_back(chance(0.5) ? std::string("site") + std::to_string(arrays.size()) : fresh());
          }
          const std::string a = arrays[below(arrays.size())];
          out += header({a}, true);
          section_body(out, 1, nullptr);
          if (chance(0.3)) {
            const bool list = chance(0.5);
            out += header({a, list ? std::string("list") : fresh()}, list);
          }
          break;
        }
        default: {  // [D.S] under a table that root's dotted keys made
          if (root_dotted.empty()) continue;
          out += header({root_dotted[below(root_dotted.size())], fresh()}, false);
          break;
        }
      }
      section_body(out, 1, nullptr);
    }
    if (chance(0.1) && !out.empty() && out.back() == '\n') {  // no line break at the end
      out.pop_back();
      if (!out.empty() && out.back() == '\r') out.pop_back();
    }
    return out;
  }

  /// A value of any kind, as text.
  std::string value(int depth) {
    switch (below(depth >= 3 ? 4 : 6)) {
      case 0: return integer();
      case 1: return floating();
      case 2: return string_value(false);
      case 3: return chance(0.5) ? "true" : "false";
      case 4: return array(depth);
      default: return inline_table(depth);
    }
  }

  std::size_t below(std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_); }
  bool chance(double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_) < p; }
  std::mt19937_64& rng() { return rng_; }

 private:
  std::string nl() { return crlf_ ? "\r\n" : "\n"; }
  std::string sp() {
    static const char* const w[] = {"", "", "", " ", " ", "\t", "  ", " \t "};
    return w[below(8)];
  }
  std::string comment_text() {
    static const char* const pieces[] = {"note", " ", "\t", "#",  "\"", "'", "=",
                                         "[x]",  "\u05d0", "中", "😀", "\\", "{", ","};
    std::string s;
    for (std::size_t i = below(8); i > 0; --i) s += pieces[below(14)];
    return s;
  }
  std::string trailing_comment() { return chance(0.15) ? " " + sp() + "#" + comment_text() : std::string(); }

  /// Code points for names and strings: ASCII, controls, quotes, backslash, and every UTF-8 length.
  std::uint32_t code_point(bool rich) {
    static const std::uint32_t special[] = {'"',  '\'',   '\\',   '\t',    '\n',    '\r',    0x01,     0x1F,
                                            0x7F, 0x08,   0x0C,   0x5D0,   0x80,    0x7FF,   0x800,    0x4E2D,
                                            0xFFFD, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF, ' ', '.', '#', '=', '_'};
    if (rich && chance(0.3)) return special[below(sizeof(special) / sizeof(special[0]))];
    static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
    return static_cast<unsigned char>(plain[below(sizeof(plain) - 1)]);
  }
  static void utf8(std::string& out, std::uint32_t c) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  static bool is_control(std::uint32_t c) { return (c < 0x20 && c != '\t') || c == 0x7F; }
  /// `c` in a basic string: raw where allowed (sometimes), else an escape.
  void basic_char(std::string& out, std::uint32_t c, bool multi) {
    char b[16];
    if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n' && multi && chance(0.7)) {
      out += nl();
    } else if (is_control(c) || chance(0.1)) {
      switch (chance(0.5) ? c : 0u) {
        case '\b': out += "\\b"; break;
        case '\t': out += "\\t"; break;
        case '\n': out += "\\n"; break;
        case '\f': out += "\\f"; break;
        case '\r': out += "\\r"; break;
        default:
          if (c > 0xFFFF || chance(0.3)) {
            std::snprintf(b, sizeof b, chance(0.5) ? "\\U%08X" : "\\U%08x", static_cast<unsigned>(c));
          } else {
            std::snprintf(b, sizeof b, chance(0.5) ? "\\u%04X" : "\\u%04x", static_cast<unsigned>(c));
          }
          out += b;
      }
    } else {
      utf8(out, c);
    }
  }
  std::vector<std::uint32_t> content(bool rich, std::size_t max_len) {
    std::vector<std::uint32_t> cs(below(max_len + 1));
    for (auto& c : cs) c = code_point(rich);
    return cs;
  }
  /// A string in one of TOML's four styles (keys: single-line only).
  std::string string_value(bool key_style) {
    const auto cs = content(true, 12);
    bool literal_ok = true, multi_literal_ok = true;
    std::size_t run = 0;
    for (std::uint32_t c : cs) {
      if (c == '\'' || c == '\n' || is_control(c)) literal_ok = false;
      if (c == '\r' || (is_control(c) && c != '\n')) multi_literal_ok = false;
      run = c == '\'' ? run + 1 : 0;
      if (run >= 3) multi_literal_ok = false;
    }
    std::string out;
    const std::size_t style = below(key_style ? 2 : 4);
    if (style == 1 && literal_ok) {
      out += '\'';
      for (std::uint32_t c : cs) utf8(out, c);
      out += '\'';
    } else if (style == 2) {
      out += "\"\"\"";
      if (chance(0.4)) out += nl();  // trimmed
      for (std::uint32_t c : cs) {
        if (chance(0.08)) out += "\\" + sp() + nl() + (chance(0.5) ? sp() + nl() : std::string()) + sp();
        basic_char(out, c, true);
      }
      out += "\"\"\"";
    } else if (style == 3 && multi_literal_ok) {
      out += "'''";
      if (chance(0.4)) out += nl();
      for (std::uint32_t c : cs) {
        if (c == '\n') out += nl();
        else utf8(out, c);
      }
      out += "'''";
    } else {
      out += '"';
      for (std::uint32_t c : cs) basic_char(out, c, false);
      out += '"';
    }
    return out;
  }
  /// A new name (a key's decoded text), never used before in this document.
  std::string fresh() {
    std::string n;
    for (auto c : content(chance(0.3), 6)) utf8(n, c);
    return n + "_" + std::to_string(next_++);
  }
  /// `name` as a key: bare where it can be, else quoted (basic or literal).
  std::string key_text(const std::string& name) {
    bool bare = !name.empty(), literal = true;
    for (char c : name) {
      const auto u = static_cast<unsigned char>(c);
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) {
        bare = false;
      }
      if (c == '\'' || c == '\n' || (u < 0x20 && c != '\t') || u == 0x7F) literal = false;
    }
    const std::size_t style = below(3);
    if (bare && style != 2) return name;
    if (literal && style == 1) return "'" + name + "'";
    std::string out = "\"";
    std::size_t i = 0;
    while (i < name.size()) {  // decode one code point, write it as a basic string allows
      const auto u = static_cast<unsigned char>(name[i]);
      const std::size_t len = u < 0x80 ? 1 : u < 0xE0 ? 2 : u < 0xF0 ? 3 : 4;
      std::uint32_t c = len == 1 ? u : len == 2 ? (u & 0x1Fu) : len == 3 ? (u & 0x0Fu) : (u & 0x07u);
      for (std::size_t k = 1; k < len; ++k) c = (c << 6) | (static_cast<unsigned char>(name[i + k]) & 0x3Fu);
      basic_char(out, c, false);
      i += len;
    }
    return out + "\"";
  }
  std::string dotted(const std::vector<std::string>& path) {
    std::string out;
    for (std::size_t i = 0; i < path.size(); ++i) {
      if (i != 0) out += sp() + "." + sp();
      out += key_text(path[i]);
    }
    return out;
  }
  std::string header(const std::vector<std::string>& path, bool array_of_tables) {
    return std::string(array_of_tables ? "[[" : "[") + sp() + dotted(path) + sp() + (array_of_tables ? "]]" : "]") +
           trailing_comment() + nl();
  }
  /// Key/value lines of a table; `dotted_out` collects the first segments of dotted keys (root only).
  void section_body(std::string& out, int depth, std::vector<std::string>* dotted_out) {
    std::vector<std::vector<std::string>> prefixes;  // tables dotted keys made here: more may go in
    for (std::size_t i = below(6); i > 0; --i) {
      std::vector<std::string> path;
      if (!prefixes.empty() && chance(0.4)) {
        path = prefixes[below(prefixes.size())];
      } else if (chance(0.3)) {
        path.push_back(fresh());
        if (chance(0.3)) path.push_back(fresh());
        prefixes.push_back(path);
        if (dotted_out != nullptr) dotted_out->push_back(path[0]);
      }
      path.push_back(fresh());
      out += sp() + dotted(path) + sp() + "=" + sp() + value(depth) + trailing_comment() + nl();
      if (chance(0.1)) out += nl();
    }
  }
  std::string digits(const std::string& ds) {  // underscores between some digits
    std::string out;
    for (std::size_t i = 0; i < ds.size(); ++i) {
      if (i != 0 && chance(0.15)) out += '_';
      out += ds[i];
    }
    return out;
  }
  std::string integer() {
    std::int64_t v;
    switch (below(5)) {
      case 0: v = static_cast<std::int64_t>(below(10)); break;
      case 1: v = static_cast<std::int64_t>(below(2000)) - 1000; break;
      case 2: v = static_cast<std::int64_t>(rng_()); break;
      case 3:
        v = chance(0.5) ? (std::numeric_limits<std::int64_t>::max)() : (std::numeric_limits<std::int64_t>::min)();
        break;
      default: v = static_cast<std::int64_t>(rng_() >> below(64)); break;
    }
    const std::size_t base = v >= 0 && chance(0.4) ? below(3) : 3;
    if (base == 3) {  // decimal
      const std::uint64_t mag = v < 0 ? 0 - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
      return std::string(v < 0 ? "-" : chance(0.2) ? "+" : "") + digits(std::to_string(mag));
    }
    const char* prefix[] = {"0x", "0o", "0b"};
    const unsigned radix[] = {16, 8, 2};
    std::string ds;
    for (std::uint64_t m = static_cast<std::uint64_t>(v); m != 0; m /= radix[base]) {
      const unsigned d = static_cast<unsigned>(m % radix[base]);
      ds.insert(ds.begin(), static_cast<char>(d < 10 ? '0' + d : (chance(0.5) ? 'a' : 'A') + d - 10));
    }
    if (ds.empty()) ds = "0";
    ds.insert(0, below(3), '0');
    return prefix[base] + digits(ds);
  }
  std::string floating() {
    switch (below(6)) {
      case 0: {
        static const char* const special[] = {"inf", "+inf", "-inf", "nan", "+nan", "-nan", "0.0", "-0.0", "+0.0"};
        return special[below(9)];
      }
      case 1:
      case 2: {  // any finite double, at 17 or fewer significant digits
        double d;
        do {
          const std::uint64_t bits = rng_();
          std::memcpy(&d, &bits, sizeof d);
        } while (!std::isfinite(d));
        char b[64];
        std::snprintf(b, sizeof b, "%.*g", static_cast<int>(1 + below(17)), d);
        std::string s = b;
        if (s.find_first_of(".e") == std::string::npos) s += ".0";  // %g may write an integer
        const std::size_t e = s.find('e');  // %g writes e+05: TOML allows the sign and leading zeros
        const std::size_t dot = s.find('.');
        const std::size_t sign = s[0] == '-' ? 1 : 0;
        return s.substr(0, sign) + digits(s.substr(sign, (dot == std::string::npos ? e : dot) - sign)) +
               s.substr(dot == std::string::npos ? e : dot);
      }
      default: {  // written from parts
        std::string s = below(3) == 0 ? "-" : below(3) == 0 ? "+" : "";
        std::string ip = below(4) == 0 ? std::string("0") : std::to_string(1 + below(9));
        for (std::size_t i = below(12); i > 0 && ip != "0"; --i) ip += static_cast<char>('0' + below(10));
        s += digits(ip);
        const bool frac = chance(0.7), expo = !frac || chance(0.4);
        if (frac) {
          std::string fp;
          for (std::size_t i = 1 + below(18); i > 0; --i) fp += static_cast<char>('0' + below(10));
          s += "." + digits(fp);
        }
        if (expo) {
          s += chance(0.5) ? "e" : "E";
          s += below(3) == 0 ? "-" : below(2) == 0 ? "+" : "";
          std::string ep(below(3), '0');
          ep += std::to_string(below(100));
          s += digits(ep);
        }
        return s;
      }
    }
  }
  std::string array(int depth) {
    const bool lines = chance(0.4);
    std::string out = "[";
    const std::size_t n = below(5);
    for (std::size_t i = 0; i < n; ++i) {
      out += lines ? nl() + sp() : sp();
      out += value(depth + 1);
      if (i + 1 < n || chance(0.3)) out += sp() + ",";
      if (lines && chance(0.3)) out += sp() + "# " + comment_text();
    }
    out += (lines ? nl() : sp()) + "]";
    return out;
  }
  std::string inline_table(int depth) {
    std::string out = "{" + sp();
    std::vector<std::vector<std::string>> prefixes;
    const std::size_t n = below(4);
    for (std::size_t i = 0; i < n; ++i) {
      std::vector<std::string> path;
      if (!prefixes.empty() && chance(0.4)) {
        path = prefixes[below(prefixes.size())];
      } else if (chance(0.3)) {
        path.push_back(fresh());
        prefixes.push_back(path);
      }
      path.push_back(fresh());
      if (i != 0) out += sp() + "," + sp();
      out += dotted(path) + sp() + "=" + sp() + value(depth + 1);
    }
    return out + sp() + "}";
  }

  std::mt19937_64 rng_;
  bool crlf_ = false;
  std::uint64_t next_ = 0;
};

/// One to three random edits of a document: bytes and tokens inserted, removed or replaced, lines repeated,
/// swapped or cut.
inline std::string mutate(std::string s, doc_gen& g) {
  static const char* const tokens[] = {
      "\"", "'", "\"\"\"", "'''", "[", "]", "[[", "]]", "{", "}", "=", ",", ".", "#", "\\", "\n", "\r", "\r\n",
      " ", "\t", "_", "+", "-", "0", "1", "9", "e", "E", "x", "o", "b", ":", "inf", "nan", "true", "a", "Z",
      "\x01", "\x7f", "\x1f", "\x0c", "\u05d0", "\xff", "\xc0\x80", "\xed\xa0\x80", "\xe2\x82", "a = 1\n", "[t]\n",
      "[[site]]\n", "\\u00e9", "\\U0001F600", "\\uD800", "\\x41", "1979-05-27", "07:32:00", "0x", "0o", "0b",
      "1e400", "_1", "1_", "00", "\"\"", "''", "{}", "[]", "a.b", "\\\n"};
  const std::size_t n_tokens = sizeof(tokens) / sizeof(tokens[0]);
  for (std::size_t edits = 1 + g.below(3); edits > 0; --edits) {
    const std::size_t at = s.empty() ? 0 : g.below(s.size() + 1);
    switch (g.below(8)) {
      case 0:
      case 1: s.insert(at, tokens[g.below(n_tokens)]); break;
      case 2:
      case 3:
        if (!s.empty()) s.erase(std::min(at, s.size() - 1), 1 + g.below(3));
        break;
      case 4:
        if (!s.empty()) s.replace(std::min(at, s.size() - 1), 1, tokens[g.below(n_tokens)]);
        break;
      case 5: {  // repeat a line
        std::vector<std::string> lines;
        for (std::size_t b = 0; b < s.size();) {
          const std::size_t e = s.find('\n', b);
          lines.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e + 1 - b));
          b = e == std::string::npos ? s.size() : e + 1;
        }
        if (lines.empty()) break;
        const std::size_t i = g.below(lines.size()), j = g.below(lines.size() + 1);
        std::string line = lines[i];
        if (line.empty() || line.back() != '\n') line += '\n';
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(j), line);
        s.clear();
        for (const auto& l : lines) s += l;
        break;
      }
      case 6: {  // swap two lines
        const std::size_t a = s.find('\n', at);
        if (a == std::string::npos) break;
        const std::size_t b = s.find('\n', a + 1);
        if (b == std::string::npos) break;
        const std::size_t ls = s.rfind('\n', at == 0 ? 0 : at - 1);
        const std::size_t start = ls == std::string::npos || at == 0 ? 0 : ls + 1;
        s = s.substr(0, start) + s.substr(a + 1, b - a) + s.substr(start, a + 1 - start) + s.substr(b + 1);
        break;
      }
      default: s.resize(at); break;
    }
  }
  return s;
}
#endif  // toml++

// ===============================================================================================================
// Tests (inside the namespace: in a unity batch, its names hide other files' anonymous ones, never clash)
// ===============================================================================================================

TEST_CASE("toml_config: the reader on its own: values, lines, keys in document order, errors with their line") {
  toml_value doc;
  std::string error;
  const char* text =
      "\xEF\xBB\xBF# a config\n"
      "every = 4\r\n"
      "budget = \"2%\"\n"
      "h = 0xff_FF\n"
      "f = -1_000.5e-3\n"
      "s = \"\"\"\n  tab\\tA\\u00e9 \\\n     end\"\"\"\n"
      "arr = [1, 'two', [3.0], {x = true},]\n"
      "[[site]]\n"
      "glob = 'enc.*'\n"
      "a.b = 1\n"
      "[[site]]\n"
      "regex = '''x\\.y'''\n";
  REQUIRE_MESSAGE(mine(text, doc, error), error);
  REQUIRE(doc.size() == 7);
  const char* keys[] = {"every", "budget", "h", "f", "s", "arr", "site"};
  for (std::size_t i = 0; i < 7; ++i) CHECK(doc.items()[i].key() == keys[i]);
  CHECK(doc.find("every")->as_integer() == 4);
  CHECK(doc.find("every")->line() == 2);
  CHECK(doc.find("budget")->as_string() == "2%");
  CHECK(doc.find("h")->as_integer() == 0xffff);
  CHECK(doc.find("f")->as_floating() == -1.0005);
  CHECK(doc.find("s")->as_string() == "  tab\tA\xc3\xa9 end");
  CHECK(doc.find("s")->line() == 6);
  const toml_value& arr = *doc.find("arr");
  REQUIRE(arr.is_array());
  REQUIRE(arr.size() == 4);
  CHECK(arr.items()[1].as_string() == "two");
  CHECK(arr.items()[2].items()[0].as_floating() == 3.0);
  CHECK(arr.items()[3].find("x")->as_boolean());
  const toml_value& site = *doc.find("site");
  REQUIRE(site.is_array());
  REQUIRE(site.size() == 2);
  CHECK(site.line() == 10);
  CHECK(site.items()[0].line() == 10);
  CHECK(site.items()[1].line() == 13);
  CHECK(site.items()[0].find("a")->line() == 12);
  CHECK(site.items()[0].find("a")->find("b")->as_integer() == 1);
  CHECK(site.items()[1].find("regex")->as_string() == "x\\.y");
  CHECK(doc.find("nope") == nullptr);

  struct bad {
    const char* text;
    const char* error;
  };
  const bad bads[] = {
      {"a = 1\n\nb = \n", "mine.toml:3: expected a value"},
      {"a = 1\na = 2\n", "mine.toml:2: 'a' is defined twice"},
      {"[t]\nx.y = 1\n[t]\n", "mine.toml:3: table 't' is defined twice"},
      {"a = 2024-01-01\n", "mine.toml:1: dates and times are not supported in a nanscope config"},
      {"a = 07:00:00\n", "mine.toml:1: dates and times are not supported in a nanscope config"},
      {"x = 1\ny = \"\\uD800\"\n", "mine.toml:2: a unicode escape cannot be a surrogate"},
      {"x = 9223372036854775808\n", "mine.toml:1: integer out of range"},
      {"x = 1\n\xff = 2\n", "mine.toml:2: invalid UTF-8"},
      {"x = 01\n", "mine.toml:1: leading zeros are not allowed"},
      {"x = [1,\n2,\n3 4]\n", "mine.toml:3: expected ',' or ']'"},
      {"x = 1e999\n", "mine.toml:1: float out of range"},
  };
  for (const auto& b : bads) {
    CAPTURE(b.text);
    CHECK_FALSE(mine(b.text, doc, error));
    CHECK_MESSAGE(error.compare(0, std::strlen(b.error), b.error) == 0, error);
    CHECK(doc.size() == 0);
  }
}

TEST_CASE("toml_config: floats convert the same with std::from_chars and with strtod, whatever the locale") {
  const char* cases[] = {"0.1", "1e-400", "3e-324", "2.4703282292062328e-324", "2.4703282292062327e-324",
                         "1.7976931348623157e308", "5e-324", "123456789012345678901234567890.5", "1e23",
                         "8.98846567431158e307", "0.30000000000000004", "9007199254740993"};
  for (const char* c : cases) {
    double a = -1, b = -2;
    CHECK(nanscope::detail::toml_to_double(c, a));
    CHECK(nanscope::detail::toml_strtod(c, b));
    CHECK(std::memcmp(&a, &b, sizeof a) == 0);
  }
  double x = 0;
  CHECK_FALSE(nanscope::detail::toml_to_double("1e400", x));
  CHECK_FALSE(nanscope::detail::toml_strtod("1.8e308", x));
  std::mt19937_64 rng(7);
  for (int i = 0; i < 2000 * scale; ++i) {
    double d;
    const std::uint64_t bits = rng() & ~(std::uint64_t{1} << 63);
    std::memcpy(&d, &bits, sizeof d);
    if (!std::isfinite(d)) continue;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*e", static_cast<int>(rng() % 20), d);
    double a = -1, b = -2;
    REQUIRE(nanscope::detail::toml_to_double(buf, a));
    REQUIRE(nanscope::detail::toml_strtod(buf, b));
    REQUIRE_MESSAGE(std::memcmp(&a, &b, sizeof a) == 0, buf);
  }
  // A locale with a decimal comma (when one is installed): strtod's reading of '.' changes, the result must not.
  const char* saved = std::setlocale(LC_NUMERIC, nullptr);
  const std::string restore = saved != nullptr ? saved : "C";
  bool comma = false;
  for (const char* loc : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8", "ru_RU.UTF-8", "de_DE"}) {
    if (std::setlocale(LC_NUMERIC, loc) != nullptr) {
      comma = true;
      break;
    }
  }
  if (comma) {
    double b = 0;
    CHECK(nanscope::detail::toml_strtod("1.25", b));
    CHECK(b == 1.25);
    toml_value doc;
    std::string error;
    CHECK(mine("x = 2.5e-1\n", doc, error));
    CHECK(doc.find("x")->as_floating() == 0.25);
  } else {
    MESSAGE("no locale with a decimal comma is installed: strtod's locale handling not exercised");
  }
  std::setlocale(LC_NUMERIC, restore.c_str());
}

TEST_CASE("toml_config: hostile texts: nesting, wide tables, long keys end in an error or a result") {
  toml_value doc;
  std::string error;
  const std::size_t max = nanscope::detail::toml_max_depth;
  // arrays: the outermost is `a`, at depth 1
  CHECK(mine("a = " + std::string(max, '[') + std::string(max, ']') + "\n", doc, error));
  CHECK_FALSE(mine("a = " + std::string(max + 1, '[') + std::string(max + 1, ']') + "\n", doc, error));
  CHECK(error.find("nested more than 128") != std::string::npos);
  CHECK_FALSE(mine("a = " + std::string(100000, '[') + "\n", doc, error));  // never recurses that deep
  std::string inl = "a = ";
  for (std::size_t i = 0; i < 100000; ++i) inl += "{b = ";
  CHECK_FALSE(mine(inl, doc, error));
  CHECK(error.find("nested more than") != std::string::npos);
  // dotted keys and headers nest tables too
  std::string deep_key = "a";
  for (std::size_t i = 0; i < 50000; ++i) deep_key += ".a";
  CHECK_FALSE(mine(deep_key + " = 1\n", doc, error));
  CHECK_FALSE(mine("[" + deep_key + "]\n", doc, error));
  CHECK_FALSE(mine("[[" + deep_key + "]]\n", doc, error));
  std::string ok_key = "a";
  for (std::size_t i = 1; i < max; ++i) ok_key += ".a";
  CHECK(mine(ok_key + " = 1\n", doc, error));
  CHECK(mine("[" + ok_key + "]\n", doc, error));
  // a wide table (hashed lookups) in about a MiB, and a duplicate at its end
  std::string wide;
  for (int i = 0; i < 90000; ++i) wide += "k" + std::to_string(i) + " = " + std::to_string(i) + "\n";
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(mine(wide, doc, error));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(doc.size() == 90000);
  CHECK(doc.find("k4711")->as_integer() == 4711);
  CHECK(doc.find("k89999")->line() == 90000);
  CHECK(seconds < 20.0);  // linear: well under a second in a normal build
  CHECK_FALSE(mine(wide + "k123 = 0\n", doc, error));
  CHECK(error == "mine.toml:90001: 'k123' is defined twice");
  // many [[site]] tables, many sub-tables
  std::string sites;
  for (int i = 0; i < 20000; ++i) {
    sites += "[[site]]\nglob = 'g" + std::to_string(i) + "'\n[t" + std::to_string(i) + ".x]\n";
  }
  REQUIRE(mine(sites, doc, error));
  CHECK(doc.find("site")->size() == 20000);
  CHECK(doc.size() == 20001);
}

TEST_CASE("toml_config: every allocation failing in turn gives a document or std::bad_alloc, never terminate") {
  std::vector<std::string> texts = {
      "every = 4\nbudget = \"2%\"\n[[site]]\nglob = 'a_glob_longer_than_the_small_string_buffer.*'\n"
      "mode = \"full_health\"\n[[site]]\nregex = '''x\\.y'''\n",
      "a = [1, 'a string longer than the small string buffer', [2.5, {x = \"\\u00e9 and more text here\"}]]\n"
      "b.c.d = \"\"\"\nmulti \\\n  line\"\"\"\n[t.u]\n[t]\nv = {w = 1, x.y = 'z'}\n[[arr]]\n[arr.sub]\n",
      "a = 1\nlong_key_name_that_does_not_fit_in_a_small_string = 2\n"
      "long_key_name_that_does_not_fit_in_a_small_string = 3\n",
      "a = [1, 2, 3 4]\n",
  };
  std::string wide;  // a table large enough for its hash index
  for (int i = 0; i < 40; ++i) wide += "key_" + std::to_string(i) + " = " + std::to_string(i) + "\n";
  texts.push_back(wide);
  for (const std::string& text : texts) {
    CAPTURE(text);
    toml_value expected;
    std::string expected_error;
    const bool expected_ok = mine(text, expected, expected_error);
    int failures = 0;
    for (long k = 1; k < 100000; ++k) {
      failing_doc doc;
      std::string error;
      bool threw = false, ok = false;
      countdown = k;
      try {
        ok = nanscope::detail::toml_parse(text, "mine.toml", doc, error);
      } catch (const std::bad_alloc&) {
        threw = true;
      }
      const bool reached = countdown == 0;
      countdown = 0;
      if (threw) {
        ++failures;
        CHECK(doc.size() == 0);  // the caller's document is untouched
        continue;
      }
      CHECK_FALSE(reached);  // a failed allocation was reported
      CHECK(ok == expected_ok);
      if (ok) CHECK(same_doc(doc, expected));
      if (!ok) CHECK(error == expected_error);
      break;  // k is past the last allocation
    }
    CHECK(failures >= 3);
  }
  // the config on top: a document of the failing allocator reads the same
  failing_doc doc;
  std::string error;
  REQUIRE(nanscope::detail::toml_parse(texts[0], "mine.toml", doc, error));
  nanscope::control_config cfg;
  REQUIRE(nanscope::detail::control_from_toml_document(doc, "mine.toml", cfg, error));
  CHECK(cfg.every == 4);
  CHECK(cfg.sites.size() == 2);
}

TEST_CASE("toml_config: the config built from the reader: values, order of keys, error texts") {
  using nanscope::control_config;
  using nanscope::detail::control_from_toml;
  control_config c;
  std::string error;
  REQUIRE_MESSAGE(control_from_toml("# x\nmode = \"off\"\nenabled = true\nevery = 3\nfrom = 10\nto = 20\n"
                                    "budget = \"2%\"\nmax_skip = 5\ndefault = \"off\"\n"
                                    "[[site]]\nglob = \"enc.*\"\nmode = \"full_health\"\nevery = 2\n"
                                    "[[site]]\nregex = 'dec\\.[0-9]+'\nenabled = false\nfrom = 1\nto = 9\n",
                                    "c.toml", c, error),
                  error);
  CHECK_FALSE(c.enabled);  // keys in sorted order: `enabled` before `mode`, whose "off" wins
  CHECK(c.every == 3);
  CHECK(c.from == 10);
  CHECK(c.to == 20);
  CHECK(c.budget == doctest::Approx(0.02));
  CHECK(c.max_skip == 5);
  CHECK_FALSE(c.sites_default_on);
  REQUIRE(c.sites.size() == 2);
  CHECK(c.sites[0].pattern == "enc.*");
  CHECK(c.sites[0].has_mode);
  CHECK(c.sites[0].mode == nanscope::check_mode::full_health);
  CHECK(c.sites[0].every == 2);
  CHECK(c.sites[1].regex);
  CHECK(c.sites[1].pattern == "dec\\.[0-9]+");
  CHECK_FALSE(c.sites[1].on);
  CHECK(c.sites[1].to == 9);
  struct bad {
    const char* text;
    const char* error;
  };
  const bad bads[] = {
      {"enabled = true\nevry = 3\n",
       "c.toml:2: unknown key 'evry' (enabled, mode, every, from, to, budget, max_skip, default, [[site]])"},
      {"enabled = 1\n", "c.toml:1: 'enabled' must be true or false"},
      {"[[site]]\nglob = 'x'\nmode = \"loud\"\n",
       "c.toml:3: 'mode' must be one of \"stats\", \"curt_health\", \"concise_health\", \"full_health\", \"shape\", "
       "\"no_tensor\", \"off\""},
      {"every = 0\n", "c.toml:1: 'every' must be an integer >= 1"},
      {"from = -1\n", "c.toml:1: 'from' must be an integer >= 0"},
      {"to = 1.5\n", "c.toml:1: 'to' must be an integer >= 0"},
      {"max_skip = 1000001\n", "c.toml:1: 'max_skip' must be <= 1000000"},
      {"budget = 2\n", "c.toml:1: 'budget' must be a fraction in [0, 1] (0.02) or a percentage string (\"2%\")"},
      {"budget = nan\n", "c.toml:1: 'budget' must be a fraction"},
      {"budget = \"lots\"\n", "c.toml:1: 'budget' must be a fraction"},
      {"default = \"maybe\"\n", "c.toml:1: 'default' must be \"on\" or \"off\""},
      {"site = 1\n", "c.toml:1: 'site' must be an array of tables ([[site]])"},
      {"site = [\n1]\n", "c.toml:2: each [[site]] must be a table"},
      {"\n[[site]]\nmode = 'off'\n", "c.toml:2: a [[site]] needs a 'glob' or a 'regex'"},
      {"[[site]]\nglob = 'x'\nregex = 'y'\n",
       "c.toml:3: a [[site]] needs exactly one non-empty 'glob' or 'regex' string"},
      {"[[site]]\nglob = ''\n", "c.toml:2: a [[site]] needs exactly one non-empty 'glob' or 'regex' string"},
      {"[[site]]\nglob = 'x'\nspeed = 1\n",
       "c.toml:3: unknown key 'speed' in [[site]] (glob, regex, mode, enabled, every, from, to)"},
      {"[[site]]\nglob = 'x'\nfrom = 5\nto = 4\n", "c.toml:1: 'to' is before 'from'"},
      {"from = 5\nto = 4\n", "c.toml: 'to' is before 'from'"},
      {"zzz = 1\nevery = 0\n", "c.toml:2: 'every' must be an integer >= 1"},  // sorted: every before zzz
      {"enabled = \n", "c.toml:1: expected a value"},
  };
  for (const auto& b : bads) {
    CAPTURE(b.text);
    control_config d;
    CHECK_FALSE(control_from_toml(b.text, "c.toml", d, error));
    CHECK_MESSAGE(error.compare(0, std::strlen(b.error), b.error) == 0, error);
  }
}

#if __has_include(<toml++/toml.h>)
TEST_CASE("toml_config: hand-written documents read as toml++ reads them") {
  tally t;
  for (const std::string& text : valid_corpus()) {
    CAPTURE(shown(text));
    bool ref_ok = true;
    try {
      (void)toml::parse(text);
    } catch (const toml::parse_error& e) {
      ref_ok = false;
      MESSAGE("toml++: " << e.description());
    }
    CHECK(ref_ok);  // the corpus is valid TOML
    CHECK(compare_with_tomlpp(text, &t, true) == "");
  }
  CHECK(t.both_read == static_cast<int>(valid_corpus().size()));
  for (const std::string& text : invalid_corpus()) {
    CAPTURE(shown(text));
    if (!tomlpp_safe(text)) {
      toml_value doc;
      std::string error;
      CHECK_FALSE(mine(text, doc, error));
      continue;
    }
    bool ref_ok = true;
    try {
      (void)toml::parse(text);
    } catch (const toml::parse_error&) {
      ref_ok = false;
    }
    CHECK_FALSE(ref_ok);  // the corpus is invalid TOML
    CHECK(compare_with_tomlpp(text, &t) == "");
  }
  {  // the one difference by design: Unicode spaces after a line-ending backslash stay (TOML 1.0)
    const std::string text = "a = \"\"\"x\\\n\xC2\xA0y\"\"\"\n";
    toml_value doc;
    std::string error;
    REQUIRE(mine(text, doc, error));
    CHECK(doc.find("a")->as_string() == "x\xC2\xA0y");
    CHECK(toml::parse(text)["a"].value_or(std::string()) == "xy");
    CHECK(tomlpp_trims_unicode_space(text));
  }
  for (const std::string& text : date_corpus()) {
    CAPTURE(text);
    toml_value doc;
    std::string error;
    CHECK_FALSE(mine(text, doc, error));
    CHECK(error.find(nanscope::detail::toml_date_error) != std::string::npos);
    CHECK(compare_with_tomlpp(text, &t, true) == "");
  }
  CHECK(t.dates == static_cast<int>(date_corpus().size()));
}

TEST_CASE("toml_config: random documents read as toml++ reads them, and so do their random mutations") {
  doc_gen g(20240611);
  tally valid, mutated;
  const int docs = 500 * scale;
  for (int i = 0; i < docs; ++i) {
    const std::string text = g.document();
    bool ref_ok = true;
    std::string ref_error;
    try {
      (void)toml::parse(text);
    } catch (const toml::parse_error& e) {
      ref_ok = false;
      ref_error = std::string(e.description());
    }
#if NANSCOPE_TEST_FAST_MATH
    if (!ref_ok) {  // toml++ built with -ffast-math refuses some valid numbers: no reference for this document
      ++valid.fastmath_refused;
      continue;
    }
#endif
    REQUIRE_MESSAGE(ref_ok, "the generator wrote invalid TOML (" << ref_error << "):\n" << shown(text));
    const std::string d = compare_with_tomlpp(text, &valid, true);
    REQUIRE_MESSAGE(d.empty(), d << "\n" << shown(text));
    for (int m = 0; m < 6; ++m) {
      const std::string bad = mutate(text, g);
      const std::string dm = compare_with_tomlpp(bad, &mutated);
      REQUIRE_MESSAGE(dm.empty(), dm << "\n" << shown(bad));
    }
  }
  CHECK(valid.both_read == docs - valid.fastmath_refused);
  CHECK(valid.fastmath_refused < docs / 20);
  CHECK(mutated.not_for_tomlpp < docs * 6 / 10);  // a few per cent: tomlpp_safe is cautious
  MESSAGE("mutations: " << mutated.both_read << " read by both, " << mutated.both_refused << " refused by both, "
                        << mutated.dates << " dates, " << mutated.not_for_tomlpp << " not given to toml++");
  CHECK(mutated.both_refused > docs);  // the mutations do find errors
  CHECK(mutated.both_read > docs / 4);
}

TEST_CASE("toml_config: random sequences of tables, arrays of tables and dotted keys over three names: TOML's rules "
          "on defining a key or table twice, as toml++ applies them") {
  static const char* const lines[] = {
      "[a]",        "[b]",          "[a.b]",        "[b.a]",       "[a.b.c]",     "[[a]]",         "[[b]]",
      "[[a.b]]",    "[[b.c]]",      "[a.c]",        "a = 1",       "b = 1",       "c = 1",         "a.b = 1",
      "b.c = 1",    "a.b.c = 1",    "c.a = 1",      "a = {}",      "b = {c = 1}", "a = {b.c = 1}", "a = []",
      "b = [{}]",   "c = [{a = 1}]", "b.a = {c = 2}", "a.c = []",   "[c]",         "[c.a.b]",       "[[c.a]]",
      "\"a\".b = 2", "['a'.\"c\"]",  "[ a . c ]",    "c.b.a = 3",   "[[ a.b ]]",   "a.b = [{c = 1}]"};
  const std::size_t n = sizeof(lines) / sizeof(lines[0]);
  std::mt19937_64 rng(11);
  tally t;
  for (int i = 0; i < 20000 * scale; ++i) {
    std::string text;
    for (std::size_t k = 1 + rng() % 7; k > 0; --k) text += std::string(lines[rng() % n]) + "\n";
    const std::string d = compare_with_tomlpp(text, &t);
    REQUIRE_MESSAGE(d.empty(), d << "\n" << text);
  }
  MESSAGE(t.both_read << " read by both, " << t.both_refused << " refused by both");
  CHECK(t.both_read > 1000 * scale);
  CHECK(t.both_refused > 1000 * scale);
}

TEST_CASE("toml_config: random values, one per line, read as toml++ reads them") {
  doc_gen g(99);
  for (int i = 0; i < 4000 * scale; ++i) {
    const std::string text = "v = " + g.value(0) + "\n";
    const std::string d = compare_with_tomlpp(text, nullptr, true);
    REQUIRE_MESSAGE(d.empty(), d << "\n" << shown(text));
  }
}

TEST_CASE("toml_config: control_from_toml gives parse_control_toml's config and error texts") {
  // Until control.hpp calls control_from_toml, its parse_control_toml reads with toml++ (when installed): the same
  // config and, for a text both read, the same error text. (Once it does, this compares the reader with itself.)
  std::vector<std::string> texts = {
      "",
      "enabled = false\n",
      "mode = \"off\"\nenabled = true\n",
      "enabled = true\nmode = 'CURT_health'\n",
      "every = 3\nfrom = 5\nto = 50\nmax_skip = 0\nbudget = 0.25\ndefault = 'on'\n",
      "budget = 1\n", "budget = 0\n", "budget = '3.5%'\n", "budget = -0.0\n", "budget = inf\n", "budget = '200%'\n",
      "max_skip = 1000000\n", "max_skip = -1\n", "every = 1\nevery = 2\n", "to = 0\n", "from = 9223372036854775807\n",
      "site = []\n", "site = [{glob = 'a'}, {regex = 'b', mode = 'shape'}]\n", "site = {glob = 'x'}\n",
      "[[site]]\nglob = 'x'\n[[site]]\n", "[[site]]\nglob = 'x'\nenabled = false\nmode = 'stats'\n",
      "[[site]]\nglob = 'x'\nmode = 'off'\nenabled = true\n", "[[site]]\nregex = 1\n", "[[site]]\nglob = 'x'\nto = -1\n",
      "[[site]]\nglob = 'x'\n[site.sub]\n", "site.glob = 'x'\n", "[site]\nglob = 'x'\n", "Enabled = true\n",
      "enabled = \"true\"\n", "default = true\n", "mode = 5\n", "b = 1\na = 2\n", "unknown.dotted = 1\n",
  };
  std::mt19937_64 rng(5);
  const char* keys[] = {"enabled", "mode", "every", "from", "to", "budget", "max_skip", "default", "bogus"};
  const char* values[] = {"true", "false", "0", "1", "7", "-3", "0.5", "2.0", "'2%'", "\"off\"", "'stats'", "\"on\"",
                          "'full_health'", "[]", "{}", "nan", "1e3", "''", "'x'", "1_000"};
  const char* site_keys[] = {"glob", "regex", "mode", "enabled", "every", "from", "to", "other"};
  for (int i = 0; i < 1500 * scale; ++i) {
    std::string text;
    std::vector<int> used(9, 0);
    for (int k = static_cast<int>(rng() % 5); k > 0; --k) {
      const std::size_t key = rng() % 9;
      if (used[key]++ != 0) continue;
      text += std::string(keys[key]) + " = " + values[rng() % 20] + "\n";
    }
    for (int s = static_cast<int>(rng() % 4); s > 0; --s) {
      text += "[[site]]\n";
      std::vector<int> su(8, 0);
      for (int k = static_cast<int>(rng() % 5); k > 0; --k) {
        const std::size_t key = rng() % 8;
        if (su[key]++ != 0) continue;
        text += std::string(site_keys[key]) + " = " + values[rng() % 20] + "\n";
      }
    }
    texts.push_back(text);
  }
  for (const std::string& text : texts) {
    CAPTURE(text);
    nanscope::control_config ref, got;
    ref.every = got.every = 2;  // kept when absent
    std::string ref_error, error;
    const bool ref_ok = nanscope::parse_control_toml(text, "c.toml", ref, ref_error);
    const bool ok = nanscope::detail::control_from_toml(text, "c.toml", got, error);
    REQUIRE(ok == ref_ok);
    if (!ok) {
      toml_value doc;
      std::string syntax;
      if (mine(text, doc, syntax)) CHECK(error == ref_error);  // a semantic error: the same text
      continue;
    }
    CHECK(got.enabled == ref.enabled);
    CHECK(got.sites_default_on == ref.sites_default_on);
    CHECK(got.has_mode == ref.has_mode);
    CHECK(got.mode == ref.mode);
    CHECK(got.every == ref.every);
    CHECK(got.from == ref.from);
    CHECK(got.to == ref.to);
    CHECK(got.budget == ref.budget);
    CHECK(got.max_skip == ref.max_skip);
    REQUIRE(got.sites.size() == ref.sites.size());
    for (std::size_t s = 0; s < got.sites.size(); ++s) {
      CHECK(got.sites[s].pattern == ref.sites[s].pattern);
      CHECK(got.sites[s].regex == ref.sites[s].regex);
      CHECK(got.sites[s].on == ref.sites[s].on);
      CHECK(got.sites[s].has_mode == ref.sites[s].has_mode);
      CHECK(got.sites[s].mode == ref.sites[s].mode);
      CHECK(got.sites[s].every == ref.sites[s].every);
      CHECK(got.sites[s].from == ref.sites[s].from);
      CHECK(got.sites[s].to == ref.sites[s].to);
    }
  }
}
#else
TEST_CASE("toml_config: the comparison with toml++ (skipped: toml++ is not installed)") {
  MESSAGE("toml++ (<toml++/toml.h>) not found: the reader is tested on its own only");
}
#endif

}  // namespace toml_config_test
