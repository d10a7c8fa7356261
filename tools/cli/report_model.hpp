// nanscope CLI — report_model.hpp: reads the inputs of `nanscope report` (layer-tree files, `nanscope scan --json`
// output, per-site history JSON Lines; docs/report.md) into one in-memory model for the HTML page.
#ifndef NANSCOPE_CLI_REPORT_MODEL_HPP
#define NANSCOPE_CLI_REPORT_MODEL_HPP

#include "../diff/diff.hpp"
#include "../diff/producer.hpp"
#include "../diff/segments.hpp"
#include "../diff/tree_model.hpp"

#include <nanscope/check.hpp>
#include <nanscope/npy.hpp>

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

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace nanscope_report {

using json = nlohmann::json;

/// A file that cannot be read: the message names the file (and the line or JSON path) and the problem.
struct input_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();

/// One format of a tensor checked against a block-scaled target ("nanscope_block_scaled" in a layer tree, written
/// by the recorder's tree writer; docs/block-scaled.md): what quantizing it would lose.
struct block_format_row {
  std::string format;  ///< "mxfp4", "nvfp4", ...
  std::int64_t block_size = 0, blocks = 0, elements = 0, lossy_blocks = 0;
  double lossy_fraction = nan_value;
  std::int64_t clipped = 0, flushed = 0, subnormal = 0, zero_blocks = 0, nan_blocks = 0, zero_scale_blocks = 0;
  bool warned = false;               ///< the recorder warned: lossy_fraction above the target's threshold
  double warn_threshold = nan_value;  ///< the threshold in effect for this format (NaN: not in the file)
  double tensor_scale = nan_value;   ///< NVFP4's per-tensor scale (NaN: not in the file)
  bool has_scale_exp = false;        ///< the spread of the block scale exponents
  std::int64_t exp_min = 0, exp_max = 0;
  double exp_mean = nan_value, exp_std = nan_value;
  std::vector<std::pair<std::int64_t, std::int64_t>> histogram;  ///< (exponent, blocks), ascending
  bool has_worst = false;  ///< the block that loses the most elements
  std::int64_t worst_index = 0, worst_first = 0, worst_elements = 0, worst_scale_byte = 0, worst_clipped = 0,
               worst_flushed = 0;
  double worst_abs_max = nan_value, worst_error_max = nan_value, worst_error_rms = nan_value;
  std::string worst_scale;  ///< "2^7", NVFP4's "448"
};

/// A tensor's "nanscope_block_scaled" (present: the key is in the file).
struct block_scaled_info {
  bool present = false;
  std::string rule;  ///< the MX scale rule: "ocp", "round_up", "even"
  std::int64_t axis = 0;
  double warn_lossy_fraction = nan_value;
  std::vector<block_format_row> formats;
};

/// One tensor of a node, as the page shows it. Counts are -1 when the file only tells presence (statistics of a
/// file without nanscope's health counts), -2 when it tells nothing.
struct tensor_row {
  std::string label, dtype, shape;
  bool input = false;
  bool param = false;  ///< a parameter ("parameters.weight"); neither input nor output
  std::int64_t nan = -2, pos_inf = -2, neg_inf = -2;
  double abs_max = nan_value;  ///< NaN: unknown
  std::vector<std::string> segments;  ///< its bad segments ("request 23 (rows 5-11): 2 NaN, first at row 6")
  block_scaled_info blocks;  ///< what a block-scaled target would lose (a layer tree's "nanscope_block_scaled")
  bool nonfinite() const { return nan > 0 || nan == -1 || pos_inf > 0 || pos_inf == -1 || neg_inf > 0 || neg_inf == -1; }
};

struct node_row {
  long parent = -1;
  std::string path;
  std::vector<tensor_row> tensors;
  bool is_checkpoint = false;  ///< a DETECT_OVERFLOW checkpoint of the module `path`
  std::string checkpoint;      ///< its text
};

/// One tree: a layer-tree file, or the tensors of a `nanscope scan --json` file grouped by file and dotted name.
struct tree_view {
  std::string source;  ///< the input file
  std::string kind;    ///< "tree" or "scan"
  long step = -1, rank = -1;
  bool complete = true;
  std::vector<node_row> nodes;  ///< pre-order (a parent before its children), nodes[0] the root
  std::vector<std::string> notes;
  // first NaN/Inf: the recorder's detection when the file records one, else the first in call order (node index
  // and tensor index, or -1)
  long first_node = -1, first_tensor = -1;
  std::string producer_text;  ///< where it was made: "produced in X, in its own code after Y (...)", "carried from ..."
  long producer_node = -1;    ///< the producer's row, when it is in the file
  long detection_node = -1;   ///< the row of the recorder's detection (nanscope_detection, a snapshot's module)
  std::string detection_text; ///< "Inf at X outputs, step 3: produced in ..."
  std::vector<std::string> producer_alternatives;
  /// the first NaN/Inf's tensor recorded with a segmentation: its bad segments, each with where it was produced
  /// ("request 23 (rows 5-11): 2 NaN, first at row 6; produced in Server.attn outputs")
  std::vector<std::string> segment_lines;
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

inline tensor_row tensor_of(const nsdiff::slot& s, bool input, bool param = false) {
  tensor_row t;
  t.label = s.label;
  t.input = input;
  t.param = param;
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
  t.segments = nsdiff::segment_lines(ti, nullptr);
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

// ---------------------------------------------------------------------------------------------------------
// "nanscope_block_scaled" (a tensor checked against a block-scaled target; include/nanscope/detail/tree_tensor.hpp,
// tree_block_scaled_json): read with the same strictness as nanscope-diff reads nanscope's other keys: a field that
// is there must have its type, and a wrong one is refused with its JSON path.
// ---------------------------------------------------------------------------------------------------------

/// A member of a block-scaled object, or null when it is absent (or JSON null).
inline const json* block_member(const json& o, const char* key) {
  const auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

inline std::int64_t block_integer(const json& o, const char* key, const std::string& at, bool non_negative,
                                  bool required, std::int64_t fallback = 0) {
  const json* v = block_member(o, key);
  const std::string p = nsdiff::join_path(at, key);
  if (v == nullptr) {
    if (required) nsdiff::fail_at(p, "missing (a block-scaled statistic)");
    return fallback;
  }
  if (!v->is_number_integer() || (non_negative && v->get<std::int64_t>() < 0))
    nsdiff::fail_at(p, std::string("expected ") + (non_negative ? "a non-negative " : "an ") + "integer, got " +
                           nsdiff::shown(*v));
  return v->get<std::int64_t>();
}

/// A number, or the tree writer's "nan", "inf", "-inf"; NaN when absent.
inline double block_real(const json& o, const char* key, const std::string& at) {
  const json* v = block_member(o, key);
  if (v == nullptr) return nan_value;
  if (v->is_number()) return v->get<double>();
  if (v->is_string()) {
    const std::string& t = v->get_ref<const std::string&>();
    if (t == "nan") return nan_value;
    if (t == "inf") return std::numeric_limits<double>::infinity();
    if (t == "-inf") return -std::numeric_limits<double>::infinity();
  }
  nsdiff::fail_at(nsdiff::join_path(at, key), "expected a number, got " + nsdiff::shown(*v));
}

inline std::string block_text(const json& o, const char* key, const std::string& at, bool required) {
  const json* v = block_member(o, key);
  const std::string p = nsdiff::join_path(at, key);
  if (v == nullptr) {
    if (required) nsdiff::fail_at(p, "missing (a block-scaled statistic)");
    return std::string();
  }
  if (!v->is_string()) nsdiff::fail_at(p, "expected a string, got " + nsdiff::shown(*v));
  return v->get<std::string>();
}

inline const json& block_object(const json& v, const std::string& at, const char* what) {
  if (!v.is_object()) nsdiff::fail_at(at, std::string("expected an object (") + what + "), got " + nsdiff::shown(v));
  return v;
}

/// Reads a tensor's "nanscope_block_scaled" object; `at` is its JSON path (for the messages).
inline block_scaled_info read_block_scaled(const json& j, const std::string& at) {
  block_object(j, at, "what a block-scaled target would lose");
  block_scaled_info b;
  b.present = true;
  b.rule = block_text(j, "rule", at, false);
  b.axis = block_integer(j, "axis", at, true, false);
  b.warn_lossy_fraction = block_real(j, "warn_lossy_fraction", at);
  const json* fs = block_member(j, "formats");
  const std::string fp = nsdiff::join_path(at, "formats");
  if (fs == nullptr) nsdiff::fail_at(fp, "missing (the statistics of each format)");
  if (!fs->is_array()) nsdiff::fail_at(fp, "expected an array of formats, got " + nsdiff::shown(*fs));
  for (std::size_t i = 0; i < fs->size(); ++i) {
    const std::string ip = nsdiff::index_path(fp, i);
    const json& f = block_object((*fs)[i], ip, "one format's statistics");
    block_format_row r;
    r.format = block_text(f, "format", ip, true);
    r.block_size = block_integer(f, "block_size", ip, true, false);
    r.blocks = block_integer(f, "blocks", ip, true, true);
    r.elements = block_integer(f, "elements", ip, true, false);
    r.lossy_blocks = block_integer(f, "lossy_blocks", ip, true, true);
    r.lossy_fraction = block_real(f, "lossy_fraction", ip);
    if (std::isnan(r.lossy_fraction) && r.blocks > 0)
      r.lossy_fraction = static_cast<double>(r.lossy_blocks) / static_cast<double>(r.blocks);
    r.clipped = block_integer(f, "clipped", ip, true, false);
    r.flushed = block_integer(f, "flushed", ip, true, false);
    r.subnormal = block_integer(f, "subnormal", ip, true, false);
    r.zero_blocks = block_integer(f, "zero_blocks", ip, true, false);
    r.nan_blocks = block_integer(f, "nan_blocks", ip, true, false);
    r.zero_scale_blocks = block_integer(f, "zero_scale_blocks", ip, true, false);
    if (const json* w = block_member(f, "warned")) {
      if (!w->is_boolean()) nsdiff::fail_at(nsdiff::join_path(ip, "warned"), "expected true or false, got " + nsdiff::shown(*w));
      r.warned = w->get<bool>();
    }
    r.warn_threshold = block_real(f, "warn_threshold", ip);
    r.tensor_scale = block_real(f, "tensor_scale", ip);
    if (const json* se = block_member(f, "scale_exp")) {
      const std::string sp = nsdiff::join_path(ip, "scale_exp");
      block_object(*se, sp, "the spread of the scale exponents");
      r.has_scale_exp = true;
      r.exp_min = block_integer(*se, "min", sp, false, true);
      r.exp_max = block_integer(*se, "max", sp, false, true);
      r.exp_mean = block_real(*se, "mean", sp);
      r.exp_std = block_real(*se, "std", sp);
      if (const json* h = block_member(*se, "histogram")) {
        const std::string hp = nsdiff::join_path(sp, "histogram");
        if (!h->is_array()) nsdiff::fail_at(hp, "expected an array of [exponent, blocks], got " + nsdiff::shown(*h));
        for (std::size_t k = 0; k < h->size(); ++k) {
          const json& e = (*h)[k];
          const std::string ep = nsdiff::index_path(hp, k);
          if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number_integer() ||
              e[1].get<std::int64_t>() < 0)
            nsdiff::fail_at(ep, "expected [exponent, blocks] (integers), got " + nsdiff::shown(e));
          r.histogram.emplace_back(e[0].get<std::int64_t>(), e[1].get<std::int64_t>());
        }
        std::sort(r.histogram.begin(), r.histogram.end());
      }
    }
    if (const json* w = block_member(f, "worst")) {
      const std::string wp = nsdiff::join_path(ip, "worst");
      block_object(*w, wp, "the block that loses the most");
      r.has_worst = true;
      r.worst_index = block_integer(*w, "index", wp, true, true);
      r.worst_first = block_integer(*w, "first_element", wp, true, false);
      r.worst_elements = block_integer(*w, "elements", wp, true, false);
      r.worst_abs_max = block_real(*w, "abs_max", wp);
      r.worst_scale = block_text(*w, "scale", wp, false);
      r.worst_scale_byte = block_integer(*w, "scale_byte", wp, true, false, -1);
      r.worst_clipped = block_integer(*w, "clipped", wp, true, false);
      r.worst_flushed = block_integer(*w, "flushed", wp, true, false);
      r.worst_error_max = block_real(*w, "error_max_abs", wp);
      r.worst_error_rms = block_real(*w, "error_rms", wp);
    }
    b.formats.push_back(std::move(r));
  }
  return b;
}

/// The values of one input, output or parameter of a node, in the order nanscope-diff's loader makes its slots
/// (tools/diff/tree_model.hpp, tree_loader::io): depth first, an array's elements and an object's members in order,
/// stopping at a tensor; a tensor's object, or null for a slot of text. The report pairs them with the slots.
inline void slot_values(const json& j, std::vector<const json*>& out) {
  std::vector<const json*> todo{&j};
  std::vector<const json*> members;
  while (!todo.empty()) {
    const json* v = todo.back();
    todo.pop_back();
    if (v->is_object() && v->contains("shape") && v->contains("dtype")) {
      out.push_back(v);
    } else if (v->is_array() && !v->empty()) {
      for (std::size_t i = v->size(); i-- > 0;) todo.push_back(&(*v)[i]);
    } else if (v->is_object() && !v->empty()) {
      members.clear();
      for (auto it = v->begin(); it != v->end(); ++it) members.push_back(&it.value());
      for (std::size_t i = members.size(); i-- > 0;) todo.push_back(members[i]);
    } else {
      out.push_back(nullptr);
    }
  }
}

/// The slot values of a node's parameters, inputs and outputs (as the loader reads them: it has refused a node
/// whose parts have other types).
struct node_values {
  std::vector<const json*> params, inputs, outputs;
};
inline node_values values_of(const json& n) {
  node_values v;
  if (const json* in = block_member(n, "inputs"); in != nullptr && in->is_object()) {
    if (const json* a = block_member(*in, "args"); a != nullptr && a->is_array())
      for (const json& x : *a) slot_values(x, v.inputs);
    if (const json* k = block_member(*in, "kwargs"); k != nullptr && k->is_object())
      for (auto it = k->begin(); it != k->end(); ++it) slot_values(it.value(), v.inputs);
  }
  if (const json* o = block_member(n, "outputs")) slot_values(*o, v.outputs);
  if (const json* p = block_member(n, "parameters"); p != nullptr && p->is_object())
    for (auto it = p->begin(); it != p->end(); ++it) slot_values(it.value(), v.params);
  return v;
}

/// Reads the block-scaled statistics of the tensors of `slots` from their JSON values (`values`, paired one to one;
/// nothing when the counts differ, which the loader's order rules out).
inline void add_block_scaled(std::vector<tensor_row>& rows, std::size_t first, const std::vector<nsdiff::slot>& slots,
                             const std::vector<const json*>& values) {
  if (values.size() != slots.size()) return;
  for (std::size_t k = 0; k < slots.size(); ++k) {
    if (values[k] == nullptr || slots[k].kind != nsdiff::slot_kind::tensor) continue;
    if (const json* b = block_member(*values[k], "nanscope_block_scaled"))
      rows[first + k].blocks = read_block_scaled(*b, nsdiff::join_path(slots[k].tensor.jpath, "nanscope_block_scaled"));
  }
}

/// Adds the rows of a tree (pre-order); `index` gets each node's row. `doc`, the tree's JSON (the loader's input),
/// gives what the loader does not keep: the block-scaled statistics.
inline void add_tree_node(tree_view& v, const nsdiff::tree_node& n, long parent,
                          std::map<const nsdiff::tree_node*, long>& index, const json* doc = nullptr) {
  // iterative pre-order (trees may be deep)
  struct item {
    const nsdiff::tree_node* p;
    long parent;
    const json* j;  ///< the node's object in the document (null: not known)
  };
  std::vector<item> st{{&n, parent, doc}};
  while (!st.empty()) {
    const item it = st.back();
    st.pop_back();
    const nsdiff::tree_node* p = it.p;
    node_row r;
    r.parent = it.parent;
    r.path = p->path;
    r.is_checkpoint = p->is_checkpoint;
    r.checkpoint = p->checkpoint;
    for (const auto& s : p->params) r.tensors.push_back(tensor_of(s, false, true));
    for (const auto& s : p->inputs) r.tensors.push_back(tensor_of(s, true));
    for (const auto& s : p->outputs) r.tensors.push_back(tensor_of(s, false));
    const json* children = nullptr;
    if (it.j != nullptr && it.j->is_object()) {
      const node_values nv = values_of(*it.j);
      add_block_scaled(r.tensors, 0, p->params, nv.params);
      add_block_scaled(r.tensors, p->params.size(), p->inputs, nv.inputs);
      add_block_scaled(r.tensors, p->params.size() + p->inputs.size(), p->outputs, nv.outputs);
      children = block_member(*it.j, "children");
      if (children != nullptr && (!children->is_array() || children->size() != p->children.size())) children = nullptr;
    }
    const long me = static_cast<long>(v.nodes.size());
    index[p] = me;
    v.nodes.push_back(std::move(r));
    for (std::size_t c = p->children.size(); c-- > 0;)
      st.push_back({&p->children[c], me, children != nullptr ? &(*children)[c] : nullptr});
  }
}

/// The first NaN/Inf of a tree and where it was made (nsdiff::find_origin: the recorder's detection when the file
/// records one, else the first in call order: a node's parameters and inputs when it is entered, its children,
/// then its outputs), and the notes a reader needs to weigh it: pruning, a pass ended by the detection.
inline void find_first(tree_view& v, const nsdiff::tree_file& f, const std::map<const nsdiff::tree_node*, long>& index) {
  auto row = [&](const nsdiff::tree_node* n) -> long {
    const auto it = n ? index.find(n) : index.end();
    return it == index.end() ? -1 : it->second;
  };
  const nsdiff::origin o = nsdiff::find_origin(f, true);
  if (o.found() && o.at != nullptr) {
    v.first_node = row(o.at);
    if (v.first_node >= 0) {
      const auto& ts = v.nodes[static_cast<std::size_t>(v.first_node)].tensors;
      for (std::size_t k = 0; k < ts.size(); ++k)
        if (ts[k].label == o.label && ts[k].param == (o.side == 'p') && ts[k].input == (o.side == 'i')) {
          v.first_tensor = static_cast<long>(k);
          break;
        }
      if (v.first_tensor < 0 && !ts.empty()) v.first_tensor = 0;  // (a detection named on a node without tensors: -1)
    }
    v.producer_text = o.sentence();
    v.producer_node = row(o.producer);
    if (const nsdiff::slot* s = nsdiff::slot_labelled(*o.at, o.label); s != nullptr && s->kind == nsdiff::slot_kind::tensor)
      v.segment_lines = nsdiff::segment_lines(s->tensor, &f.root);
  }
  if (o.detection) {
    v.detection_node = row(o.det_at);
    v.detection_text = nsdiff::detection_text(o);
  }
  if (f.ended_by == "detection")
    v.notes.push_back("the pass ended at the recorder's detection (a throwing policy): the modules after it are not "
                      "in the file");
  const nsdiff::pruning_info pr = nsdiff::pruning_of(f);
  if (pr.left_out())
    v.notes.push_back(std::string("the file was pruned (middle layer blocks left out: ") + pr.text() +
                      "): the producer may be in a block that is not in the file; write it with "
                      "tree_options::with_pruning(false)" +
                      (pr.flag < 0 ? " (no nanscope \"pruned\" key: inferred from the gaps in the block numbers)" : ""));
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
  if (!f.complete && f.ended_by != "detection")
    v.notes.push_back("the pass did not complete (an exception was in flight when it was written)");
  if (auto it = doc.find("nanscope"); it != doc.end() && it->is_object()) {
    v.step = int_field(*it, "step");
    v.rank = int_field(*it, "rank");
    // the pass's early warnings (docs/tree.md, "Early warnings in the tree"): their text, as printed
    if (auto w = it->find("warnings"); w != it->end() && w->is_array())
      for (const auto& e : *w)
        if (e.is_object())
          if (auto t = e.find("text"); t != e.end() && t->is_string()) v.notes.push_back(t->get<std::string>());
  }
  std::map<const nsdiff::tree_node*, long> index;
  try {
    add_tree_node(v, f.root, -1, index, &doc);
  } catch (const nsdiff::bad_input& e) {  // a malformed "nanscope_block_scaled", named by its JSON path
    throw input_error("nanscope: file '" + path + "': " + e.what());
  }
  find_first(v, f, index);
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
  v.nodes.push_back(node_row{-1, path, {}, false, {}});
  std::map<std::string, std::size_t> index;  // "file\0a.b" -> node
  auto node_for = [&](const std::string& file, const std::string& name) -> std::size_t {
    std::string key = file;
    key += '\0';
    auto it = index.find(key);
    std::size_t cur;
    if (it == index.end()) {
      v.nodes.push_back(node_row{0, file, {}, false, {}});
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
        v.nodes.push_back(node_row{static_cast<long>(cur), prefix, {}, false, {}});
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
    if (k == "expert") continue;  // per-expert totals of a packed MoE checkpoint: the tensors carry the same data
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

// ---------------------------------------------------------------------------------------------------------
// A detection's snapshot index (recorder_options::snapshot_dir; include/nanscope/snapshot.hpp)
// ---------------------------------------------------------------------------------------------------------

/// Whether a JSON object is a snapshot's `..._index.json`: "module_path", "produced_here" and "files", and none of a
/// layer tree's node keys.
inline bool is_snapshot_index(const json& doc) {
  return doc.is_object() && doc.contains("module_path") && doc.contains("produced_here") && doc.contains("files") &&
         !doc.contains("inputs") && !doc.contains("outputs") && !doc.contains("children");
}

/// The largest .npy file of a snapshot that is read (as the report's other inputs), and the most files and bytes
/// read for one index (a hostile index may name one large file many times).
inline constexpr std::uint64_t max_snapshot_npy = std::uint64_t{512} << 20;
inline constexpr std::size_t max_snapshot_files = 256;
inline constexpr std::uint64_t max_snapshot_bytes = std::uint64_t{2} << 30;

/// Reads one .npy file a snapshot index names, `name` in the directory `dir`, and counts its NaN and infinities
/// (nanscope::check). Returns "" and fills `t`, or why it could not be read. Only a plain file name next to the
/// index is opened (no '/', no "..", no NUL), never a link or anything but a regular file, at most
/// max_snapshot_npy bytes; the header is parsed by the library's strict parse_npy.
inline std::string read_snapshot_npy(const std::string& dir, const std::string& name, tensor_row& t,
                                     std::uint64_t& budget) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos)
    return "not a file name in the index's directory";
  const std::string file = dir + name;
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::string("cannot open: ") + std::strerror(errno);
  struct closer {
    int fd;
    ~closer() { ::close(fd); }
  } c{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::string("cannot stat: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return std::string("not a regular file (") + nsdiff::file_kind(st.st_mode) + ")";
  if (static_cast<std::uint64_t>(st.st_size) > max_snapshot_npy)
    return "larger than " + nsdiff::byte_size_text(max_snapshot_npy);
  if (static_cast<std::uint64_t>(st.st_size) > budget)
    return "the files of this index read so far reach " + nsdiff::byte_size_text(max_snapshot_bytes);
  budget -= static_cast<std::uint64_t>(st.st_size);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::string("read error: ") + std::strerror(errno);
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  try {
    nanscope::npy_layout lay = nanscope::parse_npy(bytes.data(), bytes.size(), file);
    if (lay.needs_swap()) return "stored in the other byte order";
    // the elements, copied to the start of an allocation (aligned for any element type)
    std::vector<unsigned char> data(bytes.begin() + static_cast<std::ptrdiff_t>(lay.data_offset),
                                    bytes.begin() + static_cast<std::ptrdiff_t>(lay.data_offset + lay.data_size));
    t.dtype = nanscope::name(lay.type);
    t.shape = nsdiff::shape_text(lay.shape);
    if (lay.numel == 0) {
      t.nan = t.pos_inf = t.neg_inf = 0;
      return std::string();
    }
    const nanscope::check_options opt = nanscope::check_options{}.with_threads(1);
    const nanscope::health_result h = (nanscope::check)(
        nanscope::tensor_view::flat(data.data(), lay.type, static_cast<std::int64_t>(lay.numel)), opt);
    t.nan = static_cast<std::int64_t>(h.nan);
    t.pos_inf = static_cast<std::int64_t>(h.pos_inf);
    t.neg_inf = static_cast<std::int64_t>(h.neg_inf);
    t.abs_max = h.abs_max;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    const std::string prefix = "nanscope: file '" + file + "': ";  // parse_npy's own prefix: the note names the file
    if (msg.compare(0, prefix.size(), prefix) == 0) msg.erase(0, prefix.size());
    return msg;
  }
  return std::string();
}

/// A snapshot index: one row, the module of the detection, with the saved tensors (the offending one, and, when
/// the module produced the value, its inputs and parameters), their counts read from the .npy files next to it.
inline void read_snapshot(model& m, const std::string& path, const json& doc) {
  const std::string where = "nanscope: file '" + path + "': ";
  auto str = [&](const json& o, const char* key, const std::string& at, bool required) -> std::string {
    const auto it = o.find(key);
    if (it == o.end() || it->is_null()) {
      if (required) throw input_error(where + at + "\"" + key + "\" is missing (a snapshot index)");
      return std::string();
    }
    if (!it->is_string()) throw input_error(where + at + "\"" + key + "\" must be a string");
    return it->get<std::string>();
  };
  tree_view v;
  v.source = path;
  v.kind = "snapshot";
  const std::string module = str(doc, "module_path", "", true);
  const std::string cls = str(doc, "class", "", false);
  const std::string context = str(doc, "context", "", false);
  const auto ph = doc.find("produced_here");
  if (!ph->is_boolean()) throw input_error(where + "\"produced_here\" must be true or false");
  const bool produced_here = ph->get<bool>();
  if (const auto st = doc.find("step"); st != doc.end() && !st->is_null()) {
    if (!st->is_number_integer() || st->get<std::int64_t>() < 0)
      throw input_error(where + "\"step\" must be a non-negative integer");
    v.step = static_cast<long>(st->get<std::int64_t>());
  }
  const json& files = doc["files"];
  if (!files.is_array()) throw input_error(where + "\"files\" must be an array");
  node_row r;
  r.path = module.empty() ? std::string("(the root module)") : module;
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  long offending = -1;
  std::uint64_t budget = max_snapshot_bytes;
  // "nanscope_r{rank}_p...": the rank a launcher variable named when the snapshot was written
  {
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    if (base.compare(0, 10, "nanscope_r") == 0) {
      std::size_t k = 10;
      long rank = 0;
      while (k < base.size() && k < 19 && base[k] >= '0' && base[k] <= '9') rank = rank * 10 + (base[k++] - '0');
      if (k > 10 && k < base.size() && base[k] == '_') v.rank = rank;
    }
  }
  for (std::size_t i = 0; i < files.size(); ++i) {
    const json& e = files[i];
    const std::string at = "files[" + std::to_string(i) + "].";
    if (!e.is_object()) throw input_error(where + "files[" + std::to_string(i) + "] must be an object");
    const std::string file = str(e, "file", at, true);
    const std::string role = str(e, "role", at, false);
    const std::string ctx = str(e, "context", at, false);
    bool off = false;
    if (const auto o = e.find("offending"); o != e.end() && !o->is_null()) {
      if (!o->is_boolean()) throw input_error(where + at + "\"offending\" must be true or false");
      off = o->get<bool>();
    }
    tensor_row t;
    t.label = role == "parameter" ? "parameters." + ctx : ctx.empty() ? file : ctx;
    t.input = role == "input";
    t.param = role == "parameter";
    t.dtype = str(e, "dtype", at, false);
    if (const auto sh = e.find("shape"); sh != e.end() && sh->is_array()) {
      std::vector<std::int64_t> dims;
      for (const auto& d : *sh) {
        if (!d.is_number_integer() || d.get<std::int64_t>() < 0)
          throw input_error(where + at + "\"shape\" must hold non-negative integers");
        dims.push_back(d.get<std::int64_t>());
      }
      t.shape = nsdiff::shape_text(dims);
    }
    const std::string problem = i < max_snapshot_files ? read_snapshot_npy(dir, file, t, budget) : std::string();
    if (!problem.empty()) v.notes.push_back("the snapshot's file '" + file + "' was not read: " + problem);
    if (off && offending < 0) offending = static_cast<long>(r.tensors.size());
    r.tensors.push_back(std::move(t));
  }
  if (files.size() > max_snapshot_files)
    v.notes.push_back("the index names " + std::to_string(files.size()) + " files: only the first " +
                      std::to_string(max_snapshot_files) + " were read");
  if (const auto n = doc.find("note"); n != doc.end() && n->is_string()) v.notes.push_back(n->get<std::string>());
  v.nodes.push_back(std::move(r));
  // the detection the snapshot records: the offending tensor, and the recorder's verdict
  v.first_node = 0;
  v.first_tensor = offending >= 0 ? offending : (v.nodes[0].tensors.empty() ? -1 : 0);
  v.detection_node = 0;
  v.producer_node = produced_here ? 0 : -1;
  const std::string name = (module.empty() ? std::string("the root module") : module) + (cls.empty() ? "" : " (" + cls + ")");
  v.producer_text = produced_here
                        ? "produced here: every input and parameter of " + name + " was finite (the recorder's verdict)"
                        : "it arrived already non-finite: made before " + name + " ran (the recorder's verdict)";
  v.detection_text = "snapshot of a detection: " + name + " " + (context.empty() ? std::string("?") : context) +
                     (v.step >= 0 ? ", step " + std::to_string(v.step) : std::string()) + ": " + v.producer_text;
  m.trees.push_back(std::move(v));
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
  if (whole && is_snapshot_index(doc)) {
    read_snapshot(m, path, doc);
    return;
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
    // (a checkpoint is paired by its module's path and its text, as nanscope-diff pairs it)
    auto cp = [](const nsdiff::tree_node& n) { return n.is_checkpoint ? "\x02" + n.checkpoint : std::string(); };
    for (std::size_t i = 0; i < y->children.size(); ++i) {
      const std::string r = rel(y->children[i].path, b.root.path) + cp(y->children[i]);
      in_y.emplace(key{r, seen[r]++}, i);
    }
    seen.clear();
    paired.clear();
    for (const auto& c : x->children) {
      const std::string r = rel(c.path, a.root.path) + cp(c);
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
