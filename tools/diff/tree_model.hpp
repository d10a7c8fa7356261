// nanscope-diff — tree_model.hpp: reads a layer-tree JSON file (HuggingFace's model_addition_debugger format or
// nanscope's tree_writer output, either tensor style, SUMMARY or FULL_TENSORS) into a small in-memory model:
// nodes with their module path, and each node's tensors flattened into labelled slots ("inputs.args[0]",
// "inputs.kwargs.mask", "outputs", "outputs[1]", ...). Everything that cannot be read is reported as a
// bad_input whose message starts with the JSON path of the offending value (children[3].inputs.args[0].shape).
#ifndef NANSCOPE_DIFF_TREE_MODEL_HPP
#define NANSCOPE_DIFF_TREE_MODEL_HPP

#include "input.hpp"
#include "names.hpp"
#include "nesting.hpp"
#include "pair.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <istream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace nsdiff {

using json = nlohmann::json;

inline constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
/// The deepest bracket nesting read in torch's print of a tensor (one level per dimension; the parser recurses).
inline constexpr int max_print_nesting = 512;

/// One statistic ("mean", "std", "min", "max"): absent, or a value (NaN and ±inf allowed).
struct stat_value {
  bool present = false;
  double v = not_a_number;
};

/// The values a file shows for a tensor, in print order. `layout` has one character per token — '[' and ']'
/// for the brackets, 'n' for a number, 'e' for torch's "..." — so two tensors are compared element by element
/// only when their layouts are equal (same nesting, same summarised positions).
struct shown_values {
  std::string layout;
  std::vector<double> v;
};

enum class tensor_style : std::uint8_t { torch_repr, numeric };

/// nanscope's health counts (tree_writer's "health" key).
struct health_counts {
  std::uint64_t negative = 0, zero = 0, positive = 0, neg_inf = 0, pos_inf = 0, nan = 0;
  std::uint64_t total() const { return negative + zero + positive + neg_inf + pos_inf + nan; }
};

/// One bad segment of a tensor recorded with a segmentation (nanscope's "nanscope_segments", docs/segments.md):
/// "request 17 (rows 4096-4351): 3 NaN, first at row 4102".
struct segment_info {
  std::string unit;                 ///< "request", "expert", "segment"
  std::int64_t index = 0, id = 0;
  bool rows = true;                 ///< "rows" (else "elements")
  std::int64_t first_unit = 0, last_unit = 0;  ///< the segment's first and last row (element)
  std::uint64_t nan = 0, pos_inf = 0, neg_inf = 0;
  std::int64_t first = -1;          ///< the row (element) of its first NaN/Inf
};

struct tensor_info {
  std::string jpath;  ///< where it is in its file
  tensor_style style = tensor_style::torch_repr;
  std::vector<std::int64_t> shape;
  std::string dtype;  ///< "torch.float32"
  stat_value mean, std, min, max;
  bool has_values = false;      ///< values that can be compared
  bool values_opaque = false;   ///< a value that is not a tensor print (a DTensor repr, a .safetensors path)
  shown_values values;
  bool has_health = false;
  health_counts health;
  stat_value abs_max;  ///< nanscope extra
  std::string hash;    ///< nanscope extra: the content hash (32 or 64 hex digits), "" when absent
  std::vector<segment_info> segments;  ///< nanscope extra: the bad segments ("nanscope_segments")
};

enum class slot_kind : std::uint8_t { tensor, text };

/// One input or output of a node: a tensor, or the text of a non-tensor ("None", a repr).
struct slot {
  std::string label;  ///< "inputs.args[0]", "inputs.kwargs.attention_mask", "outputs", "outputs[1]", ...
  slot_kind kind = slot_kind::text;
  tensor_info tensor;
  std::string text;
};

/// nanscope's "nanscope_detection" on the node whose tensor triggered the recorder's detection (docs/tree.md).
struct node_detection {
  bool present = false;
  std::string tensor;        ///< the recorder's name of the tensor: "output", "input[0]", a checkpoint's text, ...
  bool produced_known = false;
  bool produced_here = false;  ///< the recorder's verdict: the frame's inputs were finite
  std::string after;           ///< module path of the node's last child closed before the detection ("": none)
  bool counts = false;         ///< nan / pos_inf / neg_inf were given
  std::uint64_t nan = 0, pos_inf = 0, neg_inf = 0;
};

/// The root's "nanscope": {"detection": {...}}: the pass's detection, by module path (and checkpoint text).
struct file_detection {
  bool present = false;
  std::string module_path;
  bool has_checkpoint = false;
  std::string checkpoint;
  std::string tensor;
  bool produced_known = false, produced_here = false;
  std::string after;  ///< "" when null or absent
  bool has_step = false;
  std::uint64_t step = 0;
};

struct tree_node {
  std::string path;   ///< module_path
  std::string jpath;  ///< "" for the root, "children[2].children[0]" below
  std::vector<slot> inputs, outputs;
  std::vector<slot> params;  ///< nanscope's "parameters": {"weight": tensor}, labelled "parameters.weight"
  bool is_checkpoint = false;  ///< a DETECT_OVERFLOW checkpoint ("nanscope_checkpoint"): path is its module's
  std::string checkpoint;      ///< the checkpoint's text
  node_detection detection;    ///< "nanscope_detection"
  std::vector<tree_node> children;

  tree_node() = default;
  tree_node(tree_node&&) noexcept = default;
  tree_node& operator=(tree_node&&) noexcept = default;
  tree_node(const tree_node&) = delete;  // a copy would recurse as deep as the tree: trees are moved, never copied
  tree_node& operator=(const tree_node&) = delete;
  /// Destroys the subtree without recursion (a tree nests up to max_module_depth modules): the descendants are
  /// moved out onto a list, level after level, so that each one is destroyed without children of its own.
  ~tree_node() {
    if (children.empty()) return;
    std::vector<tree_node> below;
    for (tree_node& c : children) below.push_back(std::move(c));
    children.clear();
    while (!below.empty()) {
      tree_node n = std::move(below.back());
      below.pop_back();
      for (tree_node& c : n.children) below.push_back(std::move(c));
      n.children.clear();
    }
  }
};

struct tree_file {
  std::string file;
  tree_node root;
  std::size_t nodes = 0, tensors = 0, torch_tensors = 0, numeric_tensors = 0, tensors_with_values = 0;
  std::size_t parameters = 0;  ///< tensors under "parameters" (not counted in `tensors`)
  std::size_t checkpoints = 0;
  bool nanscope_meta = false;  ///< the root has nanscope's "nanscope" object
  bool pruned_known = false, pruned = false;
  bool complete = true;
  std::string ended_by;        ///< nanscope.ended_by ("detection": a throwing detection ended the pass)
  file_detection detection;    ///< nanscope.detection
  pair_id pair;  ///< the root's "nanscope_pair" (SUMMARY/FULL_TENSORS of one pass)
};

// ---------------------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------------------

inline std::string join_path(const std::string& base, const std::string& key) {
  return base.empty() ? key : base + "." + key;
}
inline std::string index_path(const std::string& base, std::size_t i) { return base + "[" + std::to_string(i) + "]"; }

/// A JSON value for a message, cut to a readable length.
inline std::string shown(const json& j) {
  if (j.is_array()) return "an array of " + std::to_string(j.size()) + " elements";
  if (j.is_object()) return "an object";
  std::string s = j.dump();
  if (s.size() > 60) s = std::string(cut_utf8(s, 57)) + "...";
  return s;
}
inline std::string quote_text(std::string_view s) {
  std::string out = "\"";
  out.append(cut_utf8(s, 60));
  if (s.size() > 60) out += "...";
  return out + "\"";
}

[[noreturn]] inline void fail_at(const std::string& jpath, const std::string& problem) {
  throw bad_input(jpath.empty() ? problem : jpath + ": " + problem);
}

inline bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

/// A number as Python or torch prints it: decimal/scientific, "nan", "inf", "-inf" (also "True"/"False").
inline bool parse_number(std::string_view s, double& out) {
  if (s == "True") return out = 1.0, true;
  if (s == "False") return out = 0.0, true;
  if (s.empty()) return false;
  std::string_view body = s;
  bool neg = false;
  if (body.front() == '-' || body.front() == '+') {
    neg = body.front() == '-';
    body.remove_prefix(1);
  }
  if (body == "nan") return out = not_a_number, true;
  if (body == "inf") return out = neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity(), true;
  if (body.empty() || !((body.front() >= '0' && body.front() <= '9') || body.front() == '.')) return false;
  double x = 0;
  const auto r = std::from_chars(body.data(), body.data() + body.size(), x, std::chars_format::general);
  if (r.ptr != body.data() + body.size()) return false;  // "1e400x": not a number, in range or not
  if (r.ec == std::errc::result_out_of_range) {
    // from_chars leaves x unset on overflow and on underflow to zero (1e400, 1e-400, 0.000...0001): the value is
    // 0.d... x 10^(lead + exp), lead being the digits before the point or minus the zeros after it
    const std::size_t epos = body.find_first_of("eE");
    const std::string_view mant = body.substr(0, epos);
    long long lead = 0;
    bool point = false, nonzero = false;
    for (const char c : mant) {
      if (c == '.') {
        point = true;
      } else if (!nonzero && c == '0') {
        if (point) --lead;
      } else {
        nonzero = true;
        if (!point) ++lead;
      }
    }
    long long e10 = 0;
    if (epos != std::string_view::npos) {
      std::string_view ex = body.substr(epos + 1);
      const bool eneg = !ex.empty() && ex.front() == '-';
      if (!ex.empty() && (ex.front() == '-' || ex.front() == '+')) ex.remove_prefix(1);
      for (const char c : ex) e10 = e10 < 1000000000LL ? e10 * 10 + (c - '0') : e10;  // digits: from_chars read them all
      if (eneg) e10 = -e10;
    }
    x = nonzero && lead + e10 > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  } else if (r.ec != std::errc()) {
    return false;
  }
  out = neg ? -x : x;
  return true;
}

// ---------------------------------------------------------------------------------------------------------
// torch's text: "tensor([[ 1.5000e+00, ...]], dtype=torch.float16)", "tensor(nan, device='cuda:0')",
// "torch.Size([2, 3])"
// ---------------------------------------------------------------------------------------------------------

class torch_text_parser {
 public:
  explicit torch_text_parser(std::string_view s) : s_(s) {}

  /// Where parsing stopped (0-based offset into the text).
  std::size_t position() const { return pos_; }

  /// Parses a whole "tensor(BODY[, key=value...])" into `out`; false with `err` set when it is not one.
  bool parse_tensor(shown_values& out, std::string& err) {
    skip_ws();
    if (!eat("tensor(")) return error(err, "does not start with \"tensor(\"");
    skip_ws();
    if (!element(out, 0, err)) return false;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ',') {
      // suffixes: ", dtype=torch.float16", ", device='cuda:0'", ", size=(0, 3)", ", grad_fn=<...>"
      ++pos_;
      skip_ws();
      const std::size_t name_start = pos_;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
      if (pos_ == name_start || pos_ >= s_.size() || s_[pos_] != '=')
        return error(err, "unexpected text after the values (expected \", name=value\" or \")\")");
      const std::string_view rest = trim(s_.substr(pos_));
      if (rest.empty() || rest.back() != ')') return error(err, "missing the closing \")\"");
      return true;
    }
    if (pos_ >= s_.size() || s_[pos_] != ')') return error(err, "expected \")\" after the values");
    ++pos_;
    skip_ws();
    if (pos_ != s_.size()) return error(err, "unexpected text after the closing \")\"");
    return true;
  }

  /// "torch.Size([2, 3])" → {2, 3}.
  bool parse_size(std::vector<std::int64_t>& shape) {
    skip_ws();
    if (!eat("torch.Size([")) return false;
    skip_ws();
    if (eat("])")) return trim(s_.substr(pos_)).empty();
    while (true) {
      skip_ws();
      std::int64_t d = 0;
      const auto r = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), d);
      if (r.ec != std::errc() || d < 0) return false;
      pos_ = static_cast<std::size_t>(r.ptr - s_.data());
      shape.push_back(d);
      skip_ws();
      if (eat(",")) continue;
      if (eat("])")) return trim(s_.substr(pos_)).empty();
      return false;
    }
  }

 private:
  bool error(std::string& err, const char* what) {
    err = what;
    return false;
  }
  void skip_ws() {
    while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
  }
  bool eat(std::string_view lit) {
    if (s_.substr(pos_, lit.size()) != lit) return false;
    pos_ += lit.size();
    return true;
  }
  bool element(shown_values& out, int depth, std::string& err) {
    if (depth > max_print_nesting) return error(err, "nested too deeply");
    if (pos_ < s_.size() && s_[pos_] == '[') {
      ++pos_;
      out.layout += '[';
      skip_ws();
      if (eat("]")) return out.layout += ']', true;
      while (true) {
        skip_ws();
        if (!element(out, depth + 1, err)) return false;
        skip_ws();
        if (eat(",")) continue;
        if (eat("]")) return out.layout += ']', true;
        return error(err, "expected \",\" or \"]\"");
      }
    }
    if (eat("...")) return out.layout += 'e', true;
    const std::size_t start = pos_;
    while (pos_ < s_.size() && !is_space(s_[pos_]) && s_[pos_] != ',' && s_[pos_] != ']' && s_[pos_] != ')' &&
           s_[pos_] != '[')
      ++pos_;
    double x = 0;
    if (pos_ == start) return error(err, "expected a number");
    if (!parse_number(s_.substr(start, pos_ - start), x)) {
      pos_ = start;
      return error(err, "not a number");
    }
    out.layout += 'n';
    out.v.push_back(x);
    return true;
  }

  std::string_view s_;
  std::size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------------------
// Layout checks and element labels
// ---------------------------------------------------------------------------------------------------------

inline std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// Checks that shown values fit the shape: numbers at depth == rank, each list holding shape[d] entries (fewer
/// around one "..."). Returns an empty string when they do, else the problem.
inline std::string check_layout(const std::string& layout, const std::vector<std::int64_t>& shape) {
  const std::size_t rank = shape.size();
  if (rank == 0) return layout == "n" ? std::string() : "a 0-d tensor (shape []) must show one number";
  // an empty tensor: torch prints "tensor([], size=(3, 0))" whatever its shape
  if (layout == "[]" && std::find(shape.begin(), shape.end(), std::int64_t{0}) != shape.end()) return std::string();
  struct level {
    std::int64_t items = 0;
    int ellipses = 0;
  };
  std::vector<level> st;
  for (char c : layout) {
    if (c != ']' && !st.empty()) ++st.back().items;
    if (c == '[') {
      if (st.size() >= rank) return "values nested deeper than the shape " + shape_text(shape);
      st.push_back({});
    } else if (c == ']') {
      if (st.empty()) return "unbalanced brackets in the values";
      const level l = st.back();
      const std::int64_t want = shape[st.size() - 1];
      const std::int64_t shown_items = l.items - l.ellipses;
      if (l.ellipses > 1 || (l.ellipses == 0 && shown_items != want) || (l.ellipses == 1 && shown_items >= want))
        return "a dimension shows " + std::to_string(shown_items) + (l.ellipses ? " values and \"...\"" : " values") +
               " but the shape " + shape_text(shape) + " says " + std::to_string(want);
      st.pop_back();
    } else if (c == 'n') {
      if (st.size() != rank) return "values nested " + std::to_string(st.size()) + " deep for the shape " + shape_text(shape);
    } else if (c == 'e') {
      if (st.empty()) return "a bare \"...\" as the value";
      ++st.back().ellipses;
    }
  }
  if (!st.empty()) return "unbalanced brackets in the values";
  return std::string();
}

/// "value[1, 99]": the index, in the full tensor, of the k-th shown number (the positions after a "..." count
/// from the end of their dimension). The layout must have passed check_layout.
inline std::string element_label(const std::string& layout, const std::vector<std::int64_t>& shape, std::size_t k) {
  if (layout == "n") return "value";
  struct level {
    std::int64_t next = 0;
    bool after = false;
    std::int64_t base = 0;
  };
  std::vector<level> st;
  std::vector<std::int64_t> idx;
  std::size_t count = 0;
  auto take = [&](level& l) { return l.after ? l.base + l.next++ : l.next++; };
  for (std::size_t p = 0; p < layout.size(); ++p) {
    const char c = layout[p];
    if (c == ']') {
      st.pop_back();
      idx.pop_back();
      continue;
    }
    if (c == 'e') {
      // items left in this list: count the top-level entries up to the matching ']'
      std::int64_t left = 0;
      int depth = 0;
      for (std::size_t q = p + 1; q < layout.size(); ++q) {
        const char d = layout[q];
        if (d == ']') {
          if (depth == 0) break;
          --depth;
        } else {
          if (depth == 0) ++left;
          if (d == '[') ++depth;
        }
      }
      level& l = st.back();
      const std::size_t dim = st.size() - 1;
      l.base = (dim < shape.size() ? shape[dim] : l.next + left) - left;
      l.next = 0;
      l.after = true;
      continue;
    }
    const std::int64_t i = st.empty() ? 0 : take(st.back());
    if (!st.empty()) idx.back() = i;
    if (c == '[') {
      st.push_back({});
      idx.push_back(0);
      continue;
    }
    if (count++ == k) {
      std::string s = "value[";
      for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? "," : "") + std::to_string(idx[d]);
      return s + "]";
    }
  }
  return "value[?]";
}

// ---------------------------------------------------------------------------------------------------------
// JSON → model
// ---------------------------------------------------------------------------------------------------------

class tree_loader {
 public:
  explicit tree_loader(tree_file& f) : f_(f) {}

  void load(const json& doc) {
    if (!doc.is_object()) fail_at("", "the top level is " + kind_of(doc) + ", not a node object with \"module_path\"");
    if (!doc.contains("module_path"))
      fail_at("", "the top level has no \"module_path\" (not a layer-tree file)");
    // pre-order, without recursion: a node's inputs and outputs, then its children in order (the first problem met
    // is the one reported, as a recursive walk would find it)
    std::vector<pending_node> todo;
    todo.push_back({&doc, std::string(), &f_.root, 1});
    while (!todo.empty()) {
      pending_node p = std::move(todo.back());
      todo.pop_back();
      node(*p.j, p.jp, *p.out, p.depth, todo);
    }
    if (auto it = doc.find("nanscope"); it != doc.end() && it->is_object()) {
      f_.nanscope_meta = true;
      if (auto p = it->find("pruned"); p != it->end() && p->is_boolean()) {
        f_.pruned_known = true;
        f_.pruned = p->get<bool>();
      }
      if (auto c = it->find("complete"); c != it->end() && c->is_boolean()) f_.complete = c->get<bool>();
      if (auto e = it->find("ended_by"); e != it->end() && !e->is_null()) {
        if (!e->is_string()) fail_at("nanscope.ended_by", "expected a string, got " + shown(*e));
        f_.ended_by = e->get<std::string>();
      }
      if (auto d = it->find("detection"); d != it->end() && !d->is_null()) file_det(*d, "nanscope.detection");
    }
  }

 private:
  static std::string kind_of(const json& j) {
    switch (j.type()) {
      case json::value_t::null: return "null";
      case json::value_t::object: return "an object";
      case json::value_t::array: return "an array";
      case json::value_t::string: return "a string";
      case json::value_t::boolean: return "a boolean";
      default: return "a number";
    }
  }

  /// A node still to be read: its JSON, its JSON path, where it goes, its module depth (the root is 1).
  struct pending_node {
    const json* j;
    std::string jp;
    tree_node* out;
    std::size_t depth;
  };

  /// Reads one node and queues its children (in reverse, so that they are read in order).
  void node(const json& j, const std::string& jp, tree_node& out, std::size_t depth, std::vector<pending_node>& todo) {
    // (the parse refuses such a tree already: this guards documents parsed without nesting_guard())
    if (depth > max_module_depth) throw bad_input(nanscope::tree_depth_error());
    if (!j.is_object()) fail_at(jp, "a node must be an object with \"module_path\", got " + kind_of(j));
    ++f_.nodes;
    out.jpath = jp;
    const auto mp = j.find("module_path");
    if (mp == j.end()) fail_at(jp, "a node without \"module_path\"");
    if (!mp->is_string()) fail_at(join_path(jp, "module_path"), "expected a string, got " + shown(*mp));
    out.path = mp->get<std::string>();

    if (auto in = j.find("inputs"); in != j.end() && !in->is_null()) {
      const std::string ip = join_path(jp, "inputs");
      if (!in->is_object()) fail_at(ip, "expected an object {\"args\": [...], \"kwargs\": {...}}, got " + shown(*in));
      if (auto a = in->find("args"); a != in->end() && !a->is_null()) {
        const std::string ap = join_path(ip, "args");
        if (!a->is_array()) fail_at(ap, "expected an array, got " + shown(*a));
        for (std::size_t i = 0; i < a->size(); ++i)
          io((*a)[i], index_path(ap, i), index_path("inputs.args", i), out.inputs);
      }
      if (auto k = in->find("kwargs"); k != in->end() && !k->is_null()) {
        const std::string kp = join_path(ip, "kwargs");
        if (!k->is_object()) fail_at(kp, "expected an object, got " + shown(*k));
        for (auto it = k->begin(); it != k->end(); ++it)
          io(it.value(), join_path(kp, it.key()), "inputs.kwargs." + it.key(), out.inputs);
      }
    }
    if (auto o = j.find("outputs"); o != j.end() && !o->is_null())
      io(*o, join_path(jp, "outputs"), "outputs", out.outputs);
    if (auto pa = j.find("parameters"); pa != j.end() && !pa->is_null()) {
      const std::string pp = join_path(jp, "parameters");
      if (!pa->is_object()) fail_at(pp, "expected an object of named tensors {\"weight\": {...}}, got " + shown(*pa));
      const std::size_t before = f_.tensors;
      for (auto it = pa->begin(); it != pa->end(); ++it)
        io(it.value(), join_path(pp, it.key()), "parameters." + it.key(), out.params);
      f_.parameters += f_.tensors - before;  // parameters are counted apart from the inputs and outputs
      f_.tensors = before;
    }
    if (auto cp = j.find("nanscope_checkpoint"); cp != j.end() && !cp->is_null()) {
      if (!cp->is_string()) fail_at(join_path(jp, "nanscope_checkpoint"), "expected a string (the checkpoint's text), got " + shown(*cp));
      out.is_checkpoint = true;
      out.checkpoint = cp->get<std::string>();
      ++f_.checkpoints;
    }
    if (auto d = j.find("nanscope_detection"); d != j.end() && !d->is_null())
      node_det(*d, join_path(jp, "nanscope_detection"), out.detection);
    if (auto c = j.find("children"); c != j.end() && !c->is_null()) {
      const std::string cp = join_path(jp, "children");
      if (!c->is_array()) fail_at(cp, "expected an array of nodes, got " + shown(*c));
      out.children.resize(c->size());  // never resized again: the queued pointers into it stay valid
      for (std::size_t i = c->size(); i-- > 0;)
        todo.push_back({&(*c)[i], index_path(cp, i), &out.children[i], depth + 1});
    }
  }

  static bool looks_like_tensor(const json& j) { return j.is_object() && j.contains("shape") && j.contains("dtype"); }

  // nanscope's detection keys: every field is optional, but one that is there must have its type (a hostile or
  // garbled file is refused with the JSON path, as for the other known keys).
  static const json* member(const json& o, const char* key) {
    const auto it = o.find(key);
    return it == o.end() || it->is_null() ? nullptr : &*it;
  }
  static std::string string_member(const json& o, const char* key, const std::string& op) {
    const json* v = member(o, key);
    if (v == nullptr) return std::string();
    if (!v->is_string()) fail_at(join_path(op, key), "expected a string, got " + shown(*v));
    return v->get<std::string>();
  }
  static bool bool_member(const json& o, const char* key, const std::string& op, bool& out) {
    const json* v = member(o, key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) fail_at(join_path(op, key), "expected true or false, got " + shown(*v));
    out = v->get<bool>();
    return true;
  }
  static bool count_member(const json& o, const char* key, const std::string& op, std::uint64_t& out) {
    const json* v = member(o, key);
    if (v == nullptr) return false;
    if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<std::int64_t>() >= 0))
      fail_at(join_path(op, key), "expected a non-negative integer, got " + shown(*v));
    out = v->get<std::uint64_t>();
    return true;
  }

  /// A node's "nanscope_detection": {"tensor", "produced_here", "after", "nan", "pos_inf", "neg_inf"}.
  static void node_det(const json& d, const std::string& dp, node_detection& out) {
    if (!d.is_object()) fail_at(dp, "expected an object {\"tensor\": ..., \"produced_here\": ...}, got " + shown(d));
    out.present = true;
    out.tensor = string_member(d, "tensor", dp);
    out.produced_known = bool_member(d, "produced_here", dp, out.produced_here);
    out.after = string_member(d, "after", dp);
    const bool a = count_member(d, "nan", dp, out.nan), b = count_member(d, "pos_inf", dp, out.pos_inf),
               c = count_member(d, "neg_inf", dp, out.neg_inf);
    out.counts = a || b || c;
  }

  /// The root's "nanscope": {"detection": {"module_path", "checkpoint", "tensor", "produced_here", "after", "step"}}.
  void file_det(const json& d, const std::string& dp) {
    if (!d.is_object()) fail_at(dp, "expected an object {\"module_path\": ..., ...}, got " + shown(d));
    file_detection& out = f_.detection;
    out.present = true;
    out.module_path = string_member(d, "module_path", dp);
    if (member(d, "checkpoint") != nullptr) {
      out.has_checkpoint = true;
      out.checkpoint = string_member(d, "checkpoint", dp);
    }
    out.tensor = string_member(d, "tensor", dp);
    out.produced_known = bool_member(d, "produced_here", dp, out.produced_here);
    out.after = string_member(d, "after", dp);
    out.has_step = count_member(d, "step", dp, out.step);
  }

  /// An input or output value, flattened into slots: a tensor, a list or object of them (labelled by index or
  /// key), or the text of anything else. Without recursion: a value may be nested as deep as the parse allows.
  void io(const json& j, const std::string& jp, const std::string& label, std::vector<slot>& out) {
    struct item {
      const json* j;
      std::string jp, label;
    };
    std::vector<item> todo;
    todo.push_back({&j, jp, label});
    std::vector<item> members;
    while (!todo.empty()) {
      const item it = std::move(todo.back());
      todo.pop_back();
      const json& v = *it.j;
      if (looks_like_tensor(v)) {
        slot s;
        s.label = it.label;
        s.kind = slot_kind::tensor;
        tensor(v, it.jp, s.tensor);
        out.push_back(std::move(s));
        continue;
      }
      if (v.is_array() && !v.empty()) {
        for (std::size_t i = v.size(); i-- > 0;) todo.push_back({&v[i], index_path(it.jp, i), index_path(it.label, i)});
        continue;
      }
      if (v.is_object() && !v.empty()) {
        members.clear();
        for (auto m = v.begin(); m != v.end(); ++m)
          members.push_back({&m.value(), join_path(it.jp, m.key()), it.label + "." + m.key()});
        for (std::size_t i = members.size(); i-- > 0;) todo.push_back(std::move(members[i]));
        continue;
      }
      slot s;
      s.label = it.label;
      s.kind = slot_kind::text;
      s.text = v.is_string() ? v.get<std::string>() : v.is_null() ? std::string("None") : v.dump();
      out.push_back(std::move(s));
    }
  }

  void tensor(const json& j, const std::string& jp, tensor_info& t) {
    ++f_.tensors;
    t.jpath = jp;
    const json& shape = j["shape"];
    if (shape.is_string()) {
      t.style = tensor_style::torch_repr;
      ++f_.torch_tensors;
      const std::string s = shape.get<std::string>();
      torch_text_parser p(s);
      if (!p.parse_size(t.shape))
        fail_at(join_path(jp, "shape"), "cannot parse " + quote_text(s) + " (expected \"torch.Size([d0, d1, ...])\")");
    } else if (shape.is_array()) {
      t.style = tensor_style::numeric;
      ++f_.numeric_tensors;
      for (std::size_t i = 0; i < shape.size(); ++i) {
        const json& d = shape[i];
        if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
          fail_at(index_path(join_path(jp, "shape"), i), "expected a non-negative integer, got " + shown(d));
        t.shape.push_back(d.get<std::int64_t>());
      }
    } else {
      fail_at(join_path(jp, "shape"),
              "expected \"torch.Size([...])\" or an array of non-negative integers, got " + shown(shape));
    }
    const json& dt = j["dtype"];
    if (!dt.is_string()) fail_at(join_path(jp, "dtype"), "expected a string such as \"torch.float32\", got " + shown(dt));
    t.dtype = dt.get<std::string>();

    if (auto v = j.find("value"); v != j.end() && !v->is_null()) value(*v, join_path(jp, "value"), t);
    statistic(j, jp, "mean", t.mean);
    statistic(j, jp, "std", t.std);
    statistic(j, jp, "min", t.min);
    statistic(j, jp, "max", t.max);
    statistic(j, jp, "abs_max", t.abs_max);
    if (auto h = j.find("health"); h != j.end() && !h->is_null()) health(*h, join_path(jp, "health"), t);
    if (auto h = j.find("hash"); h != j.end() && !h->is_null()) {
      const bool ok = h->is_string() && (h->get_ref<const std::string&>().size() == 32 || h->get_ref<const std::string&>().size() == 64) &&
                      h->get_ref<const std::string&>().find_first_not_of("0123456789abcdef") == std::string::npos;
      if (!ok) fail_at(join_path(jp, "hash"), "expected 32 or 64 lowercase hex digits (a content hash), got " + shown(*h));
      t.hash = h->get<std::string>();
    }
    if (auto s = j.find("nanscope_segments"); s != j.end() && !s->is_null()) segments(*s, join_path(jp, "nanscope_segments"), t);
  }

  static void segments(const json& a, const std::string& sp, tensor_info& t) {
    if (!a.is_array()) fail_at(sp, "expected an array of bad segments, got " + shown(a));
    for (std::size_t i = 0; i < a.size(); ++i) {
      const json& s = a[i];
      const std::string ip = index_path(sp, i);
      if (!s.is_object()) fail_at(ip, "expected an object (a bad segment), got " + shown(s));
      segment_info si;
      auto integer = [&](const json& o, const std::string& p, bool non_negative) -> std::int64_t {
        if (!o.is_number_integer() || (non_negative && o.get<std::int64_t>() < 0))
          fail_at(p, std::string("expected ") + (non_negative ? "a non-negative " : "an ") + "integer, got " + shown(o));
        return o.get<std::int64_t>();
      };
      auto field = [&](const char* key) -> const json& {
        const auto it = s.find(key);
        if (it == s.end()) fail_at(ip, std::string("missing \"") + key + "\"");
        return *it;
      };
      const json& unit = field("unit");
      if (!unit.is_string()) fail_at(join_path(ip, "unit"), "expected a string, got " + shown(unit));
      si.unit = unit.get<std::string>();
      si.index = integer(field("index"), join_path(ip, "index"), true);
      si.id = integer(field("id"), join_path(ip, "id"), false);
      si.rows = s.contains("rows");
      const char* axis = si.rows ? "rows" : "elements";
      const json& range = field(axis);
      if (!range.is_array() || range.size() != 2) fail_at(join_path(ip, axis), "expected [first, last], got " + shown(range));
      si.first_unit = integer(range[0], index_path(join_path(ip, axis), 0), true);
      si.last_unit = integer(range[1], index_path(join_path(ip, axis), 1), true);
      si.nan = static_cast<std::uint64_t>(integer(field("nan"), join_path(ip, "nan"), true));
      si.pos_inf = static_cast<std::uint64_t>(integer(field("pos_inf"), join_path(ip, "pos_inf"), true));
      si.neg_inf = static_cast<std::uint64_t>(integer(field("neg_inf"), join_path(ip, "neg_inf"), true));
      si.first = integer(field("first"), join_path(ip, "first"), false);
      t.segments.push_back(std::move(si));
    }
  }

  void value(const json& v, const std::string& vp, tensor_info& t) {
    if (t.style == tensor_style::torch_repr) {
      if (v.is_string()) {  // the Python tool's use_repr=False mode: a path to a .safetensors file
        t.values_opaque = true;
        return;
      }
      if (!v.is_array()) fail_at(vp, "expected the lines of print(tensor) (an array of strings), got " + shown(v));
      std::string text;
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string()) fail_at(index_path(vp, i), "expected a string (a line of print(tensor)), got " + shown(v[i]));
        if (i) text += '\n';
        text += v[i].get_ref<const std::string&>();
      }
      if (v.empty()) fail_at(vp, "an empty list of lines");
      if (trim(text).substr(0, 7) != "tensor(") {  // a DTensor or subclass repr: nothing to compare
        t.values_opaque = true;
        return;
      }
      torch_text_parser p(text);
      std::string err;
      if (!p.parse_tensor(t.values, err)) {
        // name the line and column of the problem
        const std::size_t at = std::min(p.position(), text.size());
        const std::size_t line = static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
        const std::size_t line_start = text.rfind('\n', at == 0 ? 0 : at - 1);
        const std::size_t column = at - (line_start == std::string::npos || line == 0 ? 0 : line_start + 1) + 1;
        fail_at(index_path(vp, line), "cannot parse the printed tensor: " + err + " at column " + std::to_string(column));
      }
    } else {
      numeric_value(v, vp, t.values);
    }
    const std::string problem = check_layout(t.values.layout, t.shape);
    if (!problem.empty()) fail_at(vp, problem);
    t.has_values = true;
    ++f_.tensors_with_values;
  }

  /// The numeric style's "value": nested arrays of numbers, "nan"/"inf"/"-inf" and "...", read into `out` in print
  /// order. Without recursion: the open arrays are a stack of (array, next index).
  static void numeric_value(const json& v, const std::string& vp, shown_values& out) {
    struct level {
      const json* a;
      std::size_t next;
    };
    std::vector<level> open;
    auto where = [&]() {  // the JSON path of the element being read
      std::string p = vp;
      for (const level& l : open) p = index_path(p, l.next - 1);
      return p;
    };
    const json* cur = &v;
    while (true) {
      if (cur != nullptr) {
        if (cur->is_array()) {
          out.layout += '[';
          open.push_back({cur, 0});
        } else {
          numeric_element(*cur, where, out);
        }
        cur = nullptr;
      }
      if (open.empty()) return;
      level& l = open.back();
      if (l.next < l.a->size()) {
        cur = &(*l.a)[l.next++];
      } else {
        out.layout += ']';
        open.pop_back();
      }
    }
  }

  template <class Where>
  static void numeric_element(const json& v, const Where& where, shown_values& out) {
    double x = 0;
    if (v.is_number()) {
      x = v.get<double>();
    } else if (v.is_boolean()) {
      x = v.get<bool>() ? 1.0 : 0.0;
    } else if (v.is_string() && v.get_ref<const std::string&>() == "...") {
      out.layout += 'e';
      return;
    } else if (!(v.is_string() && parse_number(v.get_ref<const std::string&>(), x))) {
      fail_at(where(), "expected a number, \"nan\", \"inf\", \"-inf\" or \"...\", got " + shown(v));
    }
    out.layout += 'n';
    out.v.push_back(x);
  }

  static void statistic(const json& j, const std::string& jp, const char* key, stat_value& out) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    const std::string kp = join_path(jp, key);
    if (it->is_number()) {
      out.present = true;
      out.v = it->get<double>();
      return;
    }
    if (!it->is_string()) fail_at(kp, "expected \"tensor(<number>)\" or a number, got " + shown(*it));
    const std::string& s = it->get_ref<const std::string&>();
    double x = 0;
    if (parse_number(trim(s), x)) {
      out.present = true;
      out.v = x;
      return;
    }
    shown_values sv;
    std::string err;
    torch_text_parser p(s);
    if (!p.parse_tensor(sv, err))
      fail_at(kp, "cannot parse " + quote_text(s) + ": " + err + " at character " + std::to_string(p.position() + 1) +
                      " (expected \"tensor(<number>[, dtype=...])\")");
    if (sv.layout != "n") fail_at(kp, "cannot parse " + quote_text(s) + ": expected one number, not a list");
    out.present = true;
    out.v = sv.v[0];
  }

  static void health(const json& h, const std::string& hp, tensor_info& t) {
    if (!h.is_object()) fail_at(hp, "expected an object of counts, got " + shown(h));
    auto count = [&](const char* key, std::uint64_t& out) {
      const auto it = h.find(key);
      if (it == h.end()) fail_at(hp, std::string("missing the count \"") + key + "\"");
      if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<std::int64_t>() >= 0))
        fail_at(join_path(hp, key), "expected a non-negative integer, got " + shown(*it));
      out = it->get<std::uint64_t>();
    };
    count("negative", t.health.negative);
    count("zero", t.health.zero);
    count("positive", t.health.positive);
    count("neg_inf", t.health.neg_inf);
    count("pos_inf", t.health.pos_inf);
    count("nan", t.health.nan);
    const health_counts& c = t.health;
    std::uint64_t sum = 0;
    for (const std::uint64_t x : {c.negative, c.zero, c.positive, c.neg_inf, c.pos_inf, c.nan}) {
      if (x > UINT64_MAX - sum) fail_at(hp, "the counts add up to more than 18446744073709551615 elements");
      sum += x;
    }
    t.has_health = true;
  }

  tree_file& f_;
};

/// A parser callback that refuses a document nesting too deeply while it is parsed, before the depth costs memory
/// or stack: a tree of more than max_module_depth modules (nanscope::tree_depth_error()'s text), or more than
/// max_nesting JSON containers one inside the other (nesting.hpp). Throws bad_input.
inline json::parser_callback_t nesting_guard() {
  auto t = std::make_shared<nesting_tracker>();
  return [t](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start: {
        std::string problem = t->open(event == json::parse_event_t::object_start);
        if (!problem.empty()) throw bad_input(problem);
        break;
      }
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        t->close();
        break;
      case json::parse_event_t::key:
        if (parsed.is_string()) t->key(parsed.get_ref<const std::string&>());
        break;
      case json::parse_event_t::value:
        t->scalar();
        break;
    }
    return true;
  };
}

/// Reads and parses one file (streamed, within `limits`). Throws bad_input with a message for the user (without
/// the file name).
inline tree_file load_tree_file(const std::string& path, const input_limits& limits = input_limits{}) {
  tree_file f;
  f.file = path;
  json doc;
  {
    input_file in(path, limits);
    std::istream is(&in);
    try {
      doc = json::parse(is, nesting_guard());
    } catch (const json::exception& e) {
      std::string msg = e.what();
      if (!msg.empty() && msg.front() == '[') {  // drop nlohmann's "[json.exception.parse_error.101] "
        const std::size_t close = msg.find("] ");
        if (close != std::string::npos) msg = msg.substr(close + 2);
      }
      throw bad_input("not valid JSON: " + msg);
    }
  }
  tree_loader(f).load(doc);
  f.pair = pair_of(doc);
  return f;
}

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_TREE_MODEL_HPP
