// nanscope-diff — pair.hpp: checks that a nanscope SUMMARY file and its FULL_TENSORS sibling come from one pass
// (their roots' "nanscope_pair" values {"run": "<id>", "pass": <n>} are equal), reading only the sibling's root
// keys up to that value with a streaming (SAX) parse.
#ifndef NANSCOPE_DIFF_PAIR_HPP
#define NANSCOPE_DIFF_PAIR_HPP

#include "input.hpp"
#include "nesting.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <istream>
#include <string>

#include <sys/stat.h>

namespace nsdiff {

/// The root's "nanscope_pair" value.
struct pair_id {
  bool present = false;
  std::string run;
  std::uint64_t pass = 0;
  bool operator==(const pair_id& o) const { return present == o.present && run == o.run && pass == o.pass; }
  bool operator!=(const pair_id& o) const { return !(*this == o); }
};

inline constexpr const char* pair_key = "nanscope_pair";
inline constexpr const char* pair_expected = "expected {\"run\": \"<id>\", \"pass\": <unsigned integer>}";

/// The pair value of a parsed root object (absent when the key is not there). Throws bad_input when malformed.
inline pair_id pair_of(const nlohmann::json& root) {
  pair_id p;
  if (!root.is_object()) return p;
  const auto it = root.find(pair_key);
  if (it == root.end()) return p;
  const auto& v = *it;
  const auto run = v.is_object() ? v.find("run") : v.end();
  const auto pass = v.is_object() ? v.find("pass") : v.end();
  if (!v.is_object() || run == v.end() || pass == v.end() || !run->is_string() || !pass->is_number_unsigned())
    throw bad_input(std::string(pair_key) + ": " + pair_expected);
  p.present = true;
  p.run = run->get<std::string>();
  p.pass = pass->get<std::uint64_t>();
  return p;
}

/// "run \"x\" pass 3" or "no \"nanscope_pair\"".
inline std::string pair_text(const pair_id& p) {
  if (!p.present) return std::string("no \"") + pair_key + "\"";
  return "run " + nlohmann::json(p.run).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         " pass " + std::to_string(p.pass);
}

/// The SUMMARY <-> FULL_TENSORS sibling of a file named *_SUMMARY.json or *_FULL_TENSORS.json, else "".
inline std::string pair_sibling(const std::string& path) {
  static const std::string summary = "_SUMMARY.json", full = "_FULL_TENSORS.json";
  const std::size_t slash = path.rfind('/');
  const std::size_t base = slash == std::string::npos ? 0 : slash + 1;
  auto ends = [&](const std::string& suffix) {
    return path.size() >= base + suffix.size() + 1 && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends(summary)) return path.substr(0, path.size() - summary.size()) + full;
  if (ends(full)) return path.substr(0, path.size() - full.size()) + summary;
  return std::string();
}

/// SAX handler that stops as soon as the root's "nanscope_pair" value has been read.
class pair_reader {
 public:
  pair_id result;
  bool not_object = false, malformed = false;
  std::string error;     ///< a parse error's message
  std::string too_deep;  ///< why the document nests too deeply (nesting.hpp), else empty

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_integer(std::int64_t v) {
    if (capturing_ && depth_ == 2 && key_ == "pass" && v >= 0) return take_pass(static_cast<std::uint64_t>(v));
    return scalar();
  }
  bool number_unsigned(std::uint64_t v) {
    if (capturing_ && depth_ == 2 && key_ == "pass") return take_pass(v);
    return scalar();
  }
  bool number_float(double, const std::string&) { return scalar(); }
  bool string(std::string& s) {
    if (capturing_ && depth_ == 2 && key_ == "run") {
      run_ = true;
      result.run = s;
      return true;
    }
    return scalar();
  }
  bool binary(nlohmann::json::binary_t&) { return scalar(); }
  bool start_object(std::size_t) {
    if (depth_ == 1 && want_) capturing_ = true;
    else if (capturing_ && depth_ == 2 && (key_ == "run" || key_ == "pass")) return bad();
    return push(true);
  }
  bool key(std::string& k) {
    nesting_.key(k);
    if (depth_ == 1) want_ = k == pair_key;
    if (capturing_ && depth_ == 2) key_ = k;
    return true;
  }
  bool end_object() {
    --depth_;
    nesting_.close();
    if (capturing_ && depth_ == 1) {
      if (!run_ || !pass_) return bad();
      result.present = true;
      return false;  // done: stop reading
    }
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 0) {
      not_object = true;
      return false;
    }
    if (depth_ == 1 && want_) return bad();
    if (capturing_ && depth_ == 2 && (key_ == "run" || key_ == "pass")) return bad();
    return push(false);
  }
  bool end_array() {
    --depth_;
    nesting_.close();
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error = e.what();
    return false;
  }

 private:
  bool push(bool object) {
    ++depth_;
    too_deep = nesting_.open(object);
    return too_deep.empty();
  }
  bool scalar() {
    nesting_.scalar();
    if (depth_ == 0) {
      not_object = true;
      return false;
    }
    if (depth_ == 1 && want_) return bad();
    if (capturing_ && depth_ == 2 && (key_ == "run" || key_ == "pass")) return bad();
    return true;
  }
  bool take_pass(std::uint64_t v) {
    pass_ = true;
    result.pass = v;
    return true;
  }
  bool bad() {
    malformed = true;
    return false;
  }
  nesting_tracker nesting_;  // the same bounds as the trees (a sibling of a tree at the limit is read)
  int depth_ = 0;
  bool want_ = false, capturing_ = false, run_ = false, pass_ = false;
  std::string key_;
};

/// Reads the pair value of a file's root object, obeying the same input limits as the trees. Throws bad_input.
inline pair_id read_pair(const std::string& path, const input_limits& limits) {
  input_file in(path, limits);
  std::istream is(&in);
  pair_reader r;
  nlohmann::json::sax_parse(is, &r);
  if (r.not_object) throw bad_input("the top level is not an object (not a layer-tree file)");
  if (r.malformed) throw bad_input(std::string(pair_key) + ": " + pair_expected);
  if (!r.too_deep.empty()) throw bad_input(r.too_deep);
  if (!r.result.present && !r.error.empty()) {
    std::string msg = r.error;
    if (!msg.empty() && msg.front() == '[') {
      const std::size_t close = msg.find("] ");
      if (close != std::string::npos) msg = msg.substr(close + 2);
    }
    throw bad_input("not valid JSON: " + msg);
  }
  return r.result;
}

/// Whether a path names an existing file (of any kind).
inline bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_PAIR_HPP
