// nanscope CLI — report_model.hpp: reads the inputs of `nanscope report` (layer-tree files, `nanscope scan --json`
// output, per-site history JSON Lines; docs/report.md) into one in-memory model for the HTML page.
#ifndef NANSCOPE_CLI_REPORT_MODEL_HPP
#define NANSCOPE_CLI_REPORT_MODEL_HPP

#include "../diff/diff.hpp"
#include "../diff/tree_model.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <sys/stat.h>

namespace nanscope_report {

using json = nlohmann::json;

/// A file that cannot be read: the message names the file (and the line or JSON path) and the problem.
struct input_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();

/// One tensor of a node, as the page shows it. Counts are -1 when the file only tells presence (statistics of a
/// file without nanscope's health counts), -2 when it tells nothing.
struct tensor_row {
  std::string label, dtype, shape;
  bool input = false;
  std::int64_t nan = -2, pos_inf = -2, neg_inf = -2;
  double abs_max = nan_value;  ///< NaN: unknown
  bool nonfinite() const { return nan > 0 || nan == -1 || pos_inf > 0 || pos_inf == -1 || neg_inf > 0 || neg_inf == -1; }
};

struct node_row {
  long parent = -1;
  std::string path;
  std::vector<tensor_row> tensors;
};

/// One tree: a layer-tree file, or the tensors of a `nanscope scan --json` file grouped by file and dotted name.
struct tree_view {
  std::string source;  ///< the input file
  std::string kind;    ///< "tree" or "scan"
  long step = -1, rank = -1;
  bool complete = true;
  std::vector<node_row> nodes;  ///< pre-order (a parent before its children), nodes[0] the root
  std::vector<std::string> notes;
  // first NaN/Inf in call order: node index and tensor index, or -1
  long first_node = -1, first_tensor = -1;
};

/// One history record (docs/report.md).
struct history_point {
  std::string site;
  long step = 0;
  double log2_abs_max = nan_value;  ///< NaN: null (no finite non-zero value)
  std::int64_t nan = 0, pos_inf = 0, neg_inf = 0;
};

struct history_file {
  std::string source;
  std::vector<history_point> points;
};

struct model {
  std::vector<tree_view> trees;
  std::vector<history_file> histories;
  std::vector<std::size_t> tree_files;  ///< indices into trees of the layer-tree inputs, in input order
  std::vector<nsdiff::tree_file> diff_inputs;  ///< the layer-tree inputs as nanscope-diff reads them (for the diff)
};

// ---------------------------------------------------------------------------------------------------------

/// The whole input file, read as nanscope-diff reads its inputs (tools/diff/input.hpp): a pipe without a writer
/// fails after a bounded wait, an input past 512 MiB or one that cannot start a JSON text (/dev/zero) stops.
inline std::string read_whole_file(const std::string& path) {
  std::string out;
  try {
    nsdiff::input_limits limits;  // the report has no options for these limits: its messages name none
    limits.size_option = "";
    limits.size_option_in = "";
    limits.wait_option = "";
    limits.expected = "an input file";
    limits.starts_with = "the report's inputs (JSON, JSON lines) start with '{'";
    nsdiff::input_file in(path, limits);
    // straight from the buffer: a stream's operator<< would swallow the buffer's exceptions (the limits)
    char chunk[1 << 16];
    for (std::streamsize n; (n = in.sgetn(chunk, sizeof chunk)) > 0;) out.append(chunk, static_cast<std::size_t>(n));
  } catch (const nsdiff::bad_input& e) {
    throw input_error("nanscope: file '" + path + "': " + e.what());
  }
  return out;
}

/// Parses one JSON text, refusing nesting deeper than nanscope-diff's limits while parsing (a deep document
/// overflowed the stack): a tree of more than nanscope::max_tree_depth modules, JSON deeper than the deepest tree
/// needs (tools/diff/nesting.hpp). `where` names the file (and line) in the error.
inline json parse_bounded(std::string_view text, const std::string& where) {
  try {
    return json::parse(text, nsdiff::nesting_guard());
  } catch (const nsdiff::bad_input& e) {
    throw input_error(where + ": " + e.what());
  }
}

/// nlohmann's message without its "[json.exception.parse_error.101] " prefix.
inline std::string json_message(const json::exception& e) {
  std::string msg = e.what();
  if (!msg.empty() && msg.front() == '[') {
    const std::size_t close = msg.find("] ");
    if (close != std::string::npos) msg = msg.substr(close + 2);
  }
  return msg;
}

inline tensor_row tensor_of(const nsdiff::slot& s, bool input) {
  tensor_row t;
  t.label = s.label;
  t.input = input;
  if (s.kind != nsdiff::slot_kind::tensor) return t;
  const nsdiff::tensor_info& ti = s.tensor;
  t.dtype = std::string(nsdiff::dtype_name(ti.dtype));
  t.shape = nsdiff::shape_text(ti.shape);
  const nsdiff::health_flags f = nsdiff::flags_of(ti, true);
  auto count = [&](int flag, std::uint64_t n) -> std::int64_t {
    if (f.counted) return static_cast<std::int64_t>(n);
    return flag == 1 ? -1 : flag == 0 ? 0 : -2;
  };
  t.nan = count(f.nan, f.counts.nan);
  t.pos_inf = count(f.pos_inf, f.counts.pos_inf);
  t.neg_inf = count(f.neg_inf, f.counts.neg_inf);
  if (ti.abs_max.present) {
    t.abs_max = ti.abs_max.v;
  } else if (ti.min.present && ti.max.present && !std::isnan(ti.min.v) && !std::isnan(ti.max.v)) {
    t.abs_max = std::max(std::fabs(ti.min.v), std::fabs(ti.max.v));
  } else if (ti.has_values) {
    double m = -1;
    for (double v : ti.values.v)
      if (!std::isnan(v)) m = std::max(m, std::fabs(v));
    if (m >= 0) t.abs_max = m;
  }
  return t;
}

/// Finds the first NaN/Inf in call order: a node's inputs when it is entered, its children, then its outputs.
inline void find_first(tree_view& v) {
  std::vector<std::vector<std::size_t>> kids(v.nodes.size());
  for (std::size_t i = 1; i < v.nodes.size(); ++i) kids[static_cast<std::size_t>(v.nodes[i].parent)].push_back(i);
  // iterative walk: (node, phase) phase 0 = inputs + push children, 1 = outputs
  std::vector<std::pair<std::size_t, int>> st;
  if (!v.nodes.empty()) st.push_back({0, 0});
  while (!st.empty()) {
    const auto [n, phase] = st.back();
    st.pop_back();
    const auto& ts = v.nodes[n].tensors;
    for (std::size_t k = 0; k < ts.size(); ++k)
      if (ts[k].input == (phase == 0) && ts[k].nonfinite()) {
        v.first_node = static_cast<long>(n);
        v.first_tensor = static_cast<long>(k);
        return;
      }
    if (phase == 0) {
      st.push_back({n, 1});
      for (std::size_t c = kids[n].size(); c-- > 0;) st.push_back({kids[n][c], 0});
    }
  }
}

inline void add_tree_node(tree_view& v, const nsdiff::tree_node& n, long parent) {
  // iterative pre-order (trees may be deep)
  std::vector<std::pair<const nsdiff::tree_node*, long>> st{{&n, parent}};
  while (!st.empty()) {
    const auto [p, par] = st.back();
    st.pop_back();
    node_row r;
    r.parent = par;
    r.path = p->path;
    for (const auto& s : p->inputs) r.tensors.push_back(tensor_of(s, true));
    for (const auto& s : p->outputs) r.tensors.push_back(tensor_of(s, false));
    const long me = static_cast<long>(v.nodes.size());
    v.nodes.push_back(std::move(r));
    for (std::size_t c = p->children.size(); c-- > 0;) st.push_back({&p->children[c], me});
  }
}

inline long int_field(const json& o, const char* key) {
  const auto it = o.find(key);
  if (it == o.end() || !it->is_number_integer()) return -1;
  return static_cast<long>(it->get<std::int64_t>());
}

/// A layer-tree document (already parsed).
inline void read_tree(model& m, const std::string& path, const json& doc) {
  nsdiff::tree_file f;
  f.file = path;
  try {
    nsdiff::tree_loader(f).load(doc);
  } catch (const nsdiff::bad_input& e) {
    throw input_error("nanscope: file '" + path + "': " + e.what());
  }
  tree_view v;
  v.source = path;
  v.kind = "tree";
  v.complete = f.complete;
  if (!f.complete) v.notes.push_back("the pass did not complete (an exception was in flight when it was written)");
  if (auto it = doc.find("nanscope"); it != doc.end() && it->is_object()) {
    v.step = int_field(*it, "step");
    v.rank = int_field(*it, "rank");
    // the pass's early warnings (docs/tree.md, "Early warnings in the tree"): their text, as printed
    if (auto w = it->find("warnings"); w != it->end() && w->is_array())
      for (const auto& e : *w)
        if (e.is_object())
          if (auto t = e.find("text"); t != e.end() && t->is_string()) v.notes.push_back(t->get<std::string>());
  }
  add_tree_node(v, f.root, -1);
  find_first(v);
  m.tree_files.push_back(m.trees.size());
  m.trees.push_back(std::move(v));
  m.diff_inputs.push_back(std::move(f));
}

inline double json_double(const json& j) {
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
  }
  return nan_value;
}

/// Tensor names of a scan are grouped by their dotted components up to this depth (deeper ones stay in the last
/// group's name) ...
inline constexpr std::size_t max_name_levels = 32;
/// ... and not at all past this length.
inline constexpr std::size_t max_split_name = 4096;

/// `nanscope scan --json` output: one view, root = the scan file, then one node per scanned file, then the dotted
/// tensor names as a hierarchy.
inline void read_scan(model& m, const std::string& path, const std::vector<std::pair<std::size_t, json>>& lines) {
  tree_view v;
  v.source = path;
  v.kind = "scan";
  v.nodes.push_back(node_row{-1, path, {}});
  std::map<std::string, std::size_t> index;  // "file\0a.b" -> node
  auto node_for = [&](const std::string& file, const std::string& name) -> std::size_t {
    std::string key = file;
    key += '\0';
    auto it = index.find(key);
    std::size_t cur;
    if (it == index.end()) {
      v.nodes.push_back(node_row{0, file, {}});
      cur = v.nodes.size() - 1;
      index.emplace(key, cur);
    } else {
      cur = it->second;
    }
    // a node per dotted prefix, at most max_name_levels of them, and none for a name past max_split_name bytes:
    // each node holds its whole prefix, so 'a.a.a....' of 40 KB took 2 GB and a 400 MB page
    std::size_t pos = 0;
    std::size_t levels = 0;
    const bool split = name.size() <= max_split_name;
    while (pos < name.size()) {
      std::size_t dot = split && ++levels < max_name_levels ? name.find('.', pos) : std::string::npos;
      if (dot == std::string::npos) dot = name.size();
      const std::string prefix = name.substr(0, dot);
      key = file + '\0' + prefix;
      it = index.find(key);
      if (it == index.end()) {
        v.nodes.push_back(node_row{static_cast<long>(cur), prefix, {}});
        cur = v.nodes.size() - 1;
        index.emplace(key, cur);
      } else {
        cur = it->second;
      }
      pos = dot + 1;
    }
    return cur;
  };
  bool summary = false;
  std::vector<std::pair<std::size_t, std::size_t>> order;  // (node, tensor) in file order, for the first NaN
  for (const auto& rec : lines) {
    const std::size_t lineno = rec.first;
    const json& o = rec.second;  // (not a structured binding: C++17 lambdas cannot capture those)
    auto where = [&]() { return "nanscope: file '" + path + "': line " + std::to_string(lineno) + ": "; };
    const auto kind = o.find("kind");
    if (kind == o.end() || !kind->is_string())
      throw input_error(where() + "no \"kind\" (not `nanscope scan --json` output)");
    const std::string& k = kind->get_ref<const std::string&>();
    auto str = [&](const char* key) -> std::string {
      const auto it = o.find(key);
      if (it == o.end() || it->is_null()) return std::string();
      if (!it->is_string()) throw input_error(where() + "\"" + key + "\" is not a string");
      return it->get<std::string>();
    };
    if (k == "summary") {
      summary = true;
      continue;
    }
    if (k == "error" || k == "warning" || k == "skipped") {
      v.notes.push_back(k + ": " + str("message"));
      continue;
    }
    if (k != "tensor") throw input_error(where() + "unknown \"kind\" \"" + k + "\"");
    const std::string file = str("file");
    const std::string name = str("name");
    tensor_row t;
    t.label = name.empty() ? file : name;
    t.dtype = str("dtype");
    if (auto sh = o.find("shape"); sh != o.end() && sh->is_array()) {
      std::vector<std::int64_t> dims;
      for (const auto& d : *sh) {
        if (!d.is_number_integer()) throw input_error(where() + "\"shape\" holds a non-integer");
        dims.push_back(d.get<std::int64_t>());
      }
      t.shape = nsdiff::shape_text(dims);
    }
    auto cnt = [&](const char* key) -> std::int64_t {
      const auto it = o.find(key);
      if (it == o.end() || it->is_null()) return -2;
      if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
        throw input_error(where() + "\"" + key + "\" is not a non-negative integer");
      return it->get<std::int64_t>();
    };
    t.nan = cnt("nan");
    t.pos_inf = cnt("pos_inf");
    t.neg_inf = cnt("neg_inf");
    if (auto am = o.find("abs_max"); am != o.end() && !am->is_null()) {
      if (!am->is_number() && !am->is_string()) throw input_error(where() + "\"abs_max\" is not a number");
      t.abs_max = json_double(*am);
    }
    const std::size_t n = node_for(file, name);
    v.nodes[n].tensors.push_back(std::move(t));
    order.push_back({n, v.nodes[n].tensors.size() - 1});
  }
  if (!summary) v.notes.push_back("no summary line: the scan output may be incomplete");
  for (const auto& [n, k] : order)
    if (v.nodes[n].tensors[k].nonfinite()) {
      v.first_node = static_cast<long>(n);
      v.first_tensor = static_cast<long>(k);
      break;
    }
  // the pre-order invariant (parent index < child index) holds: nodes are appended after their parents. Reorder
  // to a real pre-order so that the page can lay the rows out in one pass.
  std::vector<std::vector<std::size_t>> kids(v.nodes.size());
  for (std::size_t i = 1; i < v.nodes.size(); ++i) kids[static_cast<std::size_t>(v.nodes[i].parent)].push_back(i);
  std::vector<std::size_t> order_new;
  std::vector<std::size_t> st{0};
  while (!st.empty()) {
    const std::size_t n = st.back();
    st.pop_back();
    order_new.push_back(n);
    for (std::size_t c = kids[n].size(); c-- > 0;) st.push_back(kids[n][c]);
  }
  std::vector<long> new_index(v.nodes.size());
  for (std::size_t i = 0; i < order_new.size(); ++i) new_index[order_new[i]] = static_cast<long>(i);
  std::vector<node_row> sorted;
  sorted.reserve(v.nodes.size());
  for (std::size_t old : order_new) {
    node_row r = std::move(v.nodes[old]);
    if (r.parent >= 0) r.parent = new_index[static_cast<std::size_t>(r.parent)];
    sorted.push_back(std::move(r));
  }
  v.nodes = std::move(sorted);
  if (v.first_node >= 0) v.first_node = new_index[static_cast<std::size_t>(v.first_node)];
  m.trees.push_back(std::move(v));
}

/// The per-site history (docs/report.md): {"site": "...", "step": 5, "log2_abs_max": 3.2, "nan": 0, ...}.
inline void read_history(model& m, const std::string& path, const std::vector<std::pair<std::size_t, json>>& lines) {
  history_file h;
  h.source = path;
  for (const auto& [lineno, o] : lines) {
    const std::string where = "nanscope: file '" + path + "': line " + std::to_string(lineno) + ": ";
    history_point p;
    const auto site = o.find("site");
    if (site == o.end() || !site->is_string()) throw input_error(where + "\"site\" must be a string");
    p.site = site->get<std::string>();
    const auto step = o.find("step");
    if (step == o.end() || !step->is_number_integer() || step->get<std::int64_t>() < 0)
      throw input_error(where + "\"step\" must be a non-negative integer");
    p.step = static_cast<long>(step->get<std::int64_t>());
    const auto l = o.find("log2_abs_max");
    if (l == o.end()) throw input_error(where + "\"log2_abs_max\" is missing (a number, or null)");
    if (!l->is_null()) {
      if (!l->is_number()) throw input_error(where + "\"log2_abs_max\" must be a number or null");
      p.log2_abs_max = l->get<double>();
    }
    for (auto [key, dst] : {std::pair<const char*, std::int64_t*>{"nan", &p.nan}, {"pos_inf", &p.pos_inf},
                            {"neg_inf", &p.neg_inf}}) {
      const auto it = o.find(key);
      if (it == o.end()) continue;
      if (!it->is_number_integer() || it->get<std::int64_t>() < 0)
        throw input_error(where + "\"" + key + "\" must be a non-negative integer");
      *dst = it->get<std::int64_t>();
    }
    h.points.push_back(std::move(p));
  }
  if (h.points.empty()) throw input_error("nanscope: file '" + path + "': no history records");
  m.histories.push_back(std::move(h));
}

/// Reads one input file, deciding its kind from its content.
inline void read_input(model& m, const std::string& path) {
  const std::string text = read_whole_file(path);
  if (nsdiff::trim(text).empty()) throw input_error("nanscope: file '" + path + "': empty file");
  json doc;
  bool whole = true;
  std::string whole_error;
  try {
    doc = parse_bounded(text, "nanscope: file '" + path + "'");
  } catch (const json::exception& e) {
    whole = false;
    whole_error = json_message(e);
  }
  if (whole && doc.is_object() && doc.contains("module_path")) {
    read_tree(m, path, doc);
    return;
  }
  if (whole && (!doc.is_object() || !(doc.contains("kind") || doc.contains("site"))))
    throw input_error("nanscope: file '" + path +
                      "': not a layer tree (no object with \"module_path\"), `nanscope scan --json` output (no "
                      "\"kind\") or site history (no \"site\")");
  if (whole) {  // one JSON Lines record, possibly spread over lines
    std::vector<std::pair<std::size_t, json>> one;
    one.emplace_back(1, std::move(doc));  // (a braced list would copy the document)
    if (one.front().second.contains("kind")) return read_scan(m, path, one);
    return read_history(m, path, one);
  }
  // JSON Lines
  std::vector<std::pair<std::size_t, json>> lines;
  std::size_t pos = 0, lineno = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++lineno;
    const std::string_view line = nsdiff::trim(std::string_view(text).substr(pos, end - pos));
    pos = end + 1;
    if (line.empty()) continue;
    json o;
    try {
      o = parse_bounded(line, "nanscope: file '" + path + "': line " + std::to_string(lineno));
    } catch (const json::exception& e) {
      // the first line already fails: report the file as one broken JSON document (a truncated tree file)
      if (lines.empty() && !whole_error.empty())
        throw input_error("nanscope: file '" + path + "': not valid JSON: " + whole_error);
      throw input_error("nanscope: file '" + path + "': line " + std::to_string(lineno) + ": not valid JSON: " +
                        json_message(e));
    }
    if (!o.is_object())
      throw input_error("nanscope: file '" + path + "': line " + std::to_string(lineno) + ": not a JSON object");
    lines.push_back({lineno, std::move(o)});
  }
  const json& first = lines.front().second;
  if (first.contains("kind")) return read_scan(m, path, lines);
  if (first.contains("site")) return read_history(m, path, lines);
  throw input_error("nanscope: file '" + path +
                    "': not a layer tree (no \"module_path\"), `nanscope scan --json` output (no \"kind\") or site "
                    "history (no \"site\")");
}

/// Maps the diff's paired nodes (report::nodes, in call order) to node indices (pre-order) of the second tree,
/// the candidate, by walking the two trees with nanscope-diff's pairing rule (module path below the root and
/// occurrence index among siblings with that path).
inline std::vector<long> diff_node_map(const nsdiff::tree_file& a, const nsdiff::tree_file& b) {
  std::map<const nsdiff::tree_node*, long> index_b;  // pre-order index of every node of b
  {
    std::vector<const nsdiff::tree_node*> st{&b.root};
    long i = 0;
    while (!st.empty()) {
      const nsdiff::tree_node* n = st.back();
      st.pop_back();
      index_b[n] = i++;
      for (std::size_t c = n->children.size(); c-- > 0;) st.push_back(&n->children[c]);
    }
  }
  // pre-order over the paired nodes (the order of the diff's report::nodes), without recursion (trees nest up to
  // nsdiff::max_module_depth modules): a pair, then its paired children in A's order, each with its subtree
  auto rel = [](const std::string& path, const std::string& root) {
    if (path == root) return std::string();
    if (path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '.')
      return path.substr(root.size() + 1);
    return "\x01" + path;
  };
  std::vector<long> out;
  std::vector<std::pair<const nsdiff::tree_node*, const nsdiff::tree_node*>> todo{{&a.root, &b.root}};
  std::vector<std::pair<const nsdiff::tree_node*, const nsdiff::tree_node*>> paired;
  while (!todo.empty()) {
    const auto [x, y] = todo.back();
    todo.pop_back();
    out.push_back(index_b.at(y));
    using key = std::pair<std::string, int>;
    std::map<std::string, int> seen;
    std::map<key, std::size_t> in_y;
    for (std::size_t i = 0; i < y->children.size(); ++i) {
      const std::string r = rel(y->children[i].path, b.root.path);
      in_y.emplace(key{r, seen[r]++}, i);
    }
    seen.clear();
    paired.clear();
    for (const auto& c : x->children) {
      const std::string r = rel(c.path, a.root.path);
      const int k = seen[r]++;
      const auto it = in_y.find(key{r, k});
      if (it != in_y.end()) paired.emplace_back(&c, &y->children[it->second]);
    }
    for (std::size_t i = paired.size(); i-- > 0;) todo.push_back(paired[i]);
  }
  return out;
}

}  // namespace nanscope_report

#endif  // NANSCOPE_CLI_REPORT_MODEL_HPP
