// nanscope CLI — report.hpp: `nanscope report INPUT... -o report.html`, one self-contained HTML page (inline CSS,
// SVG and JavaScript; no network) from layer-tree files, `nanscope scan --json` output and per-site history.
// See docs/report.md. Exit status: 0 written, 2 bad input, usage, or a report that could not be written.
#ifndef NANSCOPE_CLI_REPORT_HPP
#define NANSCOPE_CLI_REPORT_HPP

#include "../diff/segments.hpp"  // nsdiff::comparison_lines: the bad segments of A against B
#include "output.hpp"
#include "report_model.hpp"
#include "report_page.hpp"


#include <CLI/CLI.hpp>
#include <nanscope/detail/atomic_file.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace nanscope_report {

using nanscope_cli::json_number;
using nanscope_cli::json_string;

/// The largest finite value of each format the page measures headroom against (fp16, bf16, fp8 e4m3fn, e5m2).
struct format_limit {
  const char* name;
  double max;
};
inline constexpr format_limit format_limits[] = {
    {"fp16", 65504.0}, {"bf16", 3.3895313892515355e38}, {"e4m3fn", 448.0}, {"e5m2", 57344.0}};

/// Makes JSON text safe inside <script type="application/json">: '<', '>' and '&' only occur inside strings (JSON
/// has no other place for them), where \u003c, \u003e and \u0026 mean the same characters. U+2028/U+2029 are
/// escaped by json_string already.
inline void html_safe_json(std::string& s) {
  std::string out;
  out.reserve(s.size() + s.size() / 16);
  for (char c : s) {
    if (c == '<') out += "\\u003c";
    else if (c == '>') out += "\\u003e";
    else if (c == '&') out += "\\u0026";
    else out += c;
  }
  s.swap(out);
}

inline std::string count_json(std::int64_t c) { return std::to_string(c); }

inline std::string first_word(const tensor_row& t) {
  const bool nan = t.nan > 0 || t.nan == -1;
  const bool inf = t.pos_inf > 0 || t.pos_inf == -1 || t.neg_inf > 0 || t.neg_inf == -1;
  if (!nan && !inf) return "detection: ";  // a snapshot whose tensor could not be read
  return std::string(nan ? "first NaN: " : "first Inf: ");
}

/// How a row is named: its module path; a checkpoint's row as `path checkpoint "text"`.
inline std::string row_name(const node_row& n) {
  return n.is_checkpoint ? n.path + " checkpoint \"" + n.checkpoint + "\"" : n.path;
}

/// "first NaN: block.2.ff.wo outputs, step 5, rank 0 (file) — produced in block.2.ff.wo, in its own code"
inline std::string first_text(const tree_view& v) {
  const node_row& n = v.nodes[static_cast<std::size_t>(v.first_node)];
  static const tensor_row none;
  const tensor_row& t = v.first_tensor >= 0 ? n.tensors[static_cast<std::size_t>(v.first_tensor)] : none;
  std::string s = first_word(t) + row_name(n);
  if (v.kind != "scan" && !t.label.empty()) s += " " + t.label;
  if (v.step >= 0) s += ", step " + std::to_string(v.step);
  if (v.rank >= 0) s += ", rank " + std::to_string(v.rank);
  s += " (" + v.source + ")";
  if (!v.producer_text.empty()) s += " \u2014 " + v.producer_text;
  return s;
}

struct heatmap {
  std::string title;
  std::vector<std::string> cols;
  std::vector<std::string> sites;
  std::vector<std::vector<double>> v;   ///< log2 abs-max, NaN = no data
  std::vector<std::vector<char>> bad;   ///< NaN/Inf seen
};

inline void heat_put(heatmap& h, std::map<std::string, std::size_t>& row_of, const std::string& site, std::size_t col,
                     double log2v, bool bad) {
  auto it = row_of.find(site);
  if (it == row_of.end()) {
    it = row_of.emplace(site, h.sites.size()).first;
    h.sites.push_back(site);
    h.v.emplace_back(h.cols.size(), nan_value);
    h.bad.emplace_back(h.cols.size(), 0);
  }
  double& cell = h.v[it->second][col];
  if (!std::isnan(log2v) && (std::isnan(cell) || log2v > cell)) cell = log2v;
  if (bad) h.bad[it->second][col] = 1;
}

/// One column per layer-tree file, ordered by the `step` extra (else by input order); one row per module path
/// with outputs (a path called several times: the largest value).
inline heatmap tree_heatmap(const model& m) {
  heatmap h;
  h.title = "layer \u00d7 step, from " + std::to_string(m.tree_files.size()) + " tree files";
  std::vector<std::size_t> order = m.tree_files;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const long sa = m.trees[a].step, sb = m.trees[b].step;
    if (sa < 0 || sb < 0) return false;
    return sa < sb;
  });
  bool all_steps = true, ranks_differ = false;
  for (std::size_t i : order) {
    all_steps = all_steps && m.trees[i].step >= 0;
    ranks_differ = ranks_differ || m.trees[i].rank != m.trees[order[0]].rank;
  }
  std::map<std::string, int> uses;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const tree_view& t = m.trees[order[k]];
    std::string c = all_steps ? std::to_string(t.step) : "#" + std::to_string(k + 1);
    if (ranks_differ && t.rank >= 0) c += " r" + std::to_string(t.rank);
    h.cols.push_back(c);
    ++uses[c];
  }
  for (std::size_t k = 0; k < order.size(); ++k)  // the same step twice (two runs): tell the files apart
    if (uses[h.cols[k]] > 1) h.cols[k] += " #" + std::to_string(k + 1);
  std::map<std::string, std::size_t> row_of;
  for (std::size_t k = 0; k < order.size(); ++k) {
    for (const node_row& n : m.trees[order[k]].nodes) {
      double amax = nan_value;
      bool any = false, bad = false;
      for (const tensor_row& t : n.tensors) {
        if (t.input || t.param) continue;
        any = true;
        bad = bad || t.nonfinite();
        if (!std::isnan(t.abs_max) && (std::isnan(amax) || t.abs_max > amax)) amax = t.abs_max;
      }
      if (!any) continue;
      const double l = std::isnan(amax) || amax <= 0 ? nan_value : std::log2(amax);
      heat_put(h, row_of, n.path, k, l, bad);
    }
  }
  return h;
}

/// A history heatmap's bounds: past max_heat_cols steps, consecutive steps share a column (the largest value);
/// past max_heat_rows sites, the later sites are left out (the title says how many). A history of 8000 sites
/// over 8000 steps made a dense 64M-cell matrix (1.9 GB, a 450 MB page).
inline constexpr std::size_t max_heat_cols = 400;
inline constexpr std::size_t max_heat_rows = 2000;

inline heatmap history_heatmap(const history_file& f) {
  heatmap h;
  h.title = "site \u00d7 step, from " + f.source;
  std::vector<long> steps;
  for (const auto& p : f.points) steps.push_back(p.step);
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  const std::size_t per = steps.size() > max_heat_cols ? (steps.size() + max_heat_cols - 1) / max_heat_cols : 1;
  for (std::size_t c = 0; c < steps.size(); c += per) {
    const std::size_t last = std::min(c + per, steps.size()) - 1;
    h.cols.push_back(last == c ? std::to_string(steps[c]) : std::to_string(steps[c]) + "\u2013" + std::to_string(steps[last]));
  }
  std::map<std::string, std::size_t> row_of;
  std::set<std::string> left_out;
  for (const auto& p : f.points) {
    if (h.sites.size() >= max_heat_rows && row_of.count(p.site) == 0) {
      left_out.insert(p.site);
      continue;
    }
    const auto idx = static_cast<std::size_t>(std::lower_bound(steps.begin(), steps.end(), p.step) - steps.begin());
    heat_put(h, row_of, p.site, idx / per, p.log2_abs_max, p.nan + p.pos_inf + p.neg_inf > 0);
  }
  if (per > 1) h.title += " (" + std::to_string(per) + " steps a column, the largest value)";
  if (!left_out.empty())
    h.title += " (the first " + std::to_string(max_heat_rows) + " sites; " + std::to_string(left_out.size()) +
               " more are left out)";
  return h;
}

inline std::string heatmap_json(const heatmap& h) {
  std::string s = "{\"title\":" + json_string(h.title) + ",\"cols\":[";
  for (std::size_t j = 0; j < h.cols.size(); ++j) s += (j ? "," : "") + json_string(h.cols[j]);
  s += "],\"rows\":[";
  for (std::size_t i = 0; i < h.sites.size(); ++i) {
    s += (i ? ",[" : "[") + json_string(h.sites[i]) + ",[";
    for (std::size_t j = 0; j < h.cols.size(); ++j) {
      const double x = h.v[i][j];
      s += (j ? "," : "");
      // rounded to 3 decimals where that cannot overflow (x * 1000 of 1e308 is inf)
      s += std::isfinite(x) ? json_number(std::fabs(x) < 1e300 ? std::round(x * 1000.0) / 1000.0 : x) : std::string("null");
    }
    s += "],[";
    for (std::size_t j = 0; j < h.cols.size(); ++j) s += (j ? "," : "") + std::string(h.bad[i][j] ? "1" : "0");
    s += "]]";
  }
  return s + "]}";
}

/// A tensor's block-scaled statistics for the page (docs/report.md, "Blocks with loss"): the file's fields, checked
/// and written again (numbers as numbers, "inf", or null for NaN; the strings as JSON strings).
inline std::string block_json(const block_scaled_info& b) {
  auto i64 = [](std::int64_t x) { return std::to_string(x); };
  std::string s = "{\"rule\":" + json_string(b.rule) + ",\"axis\":" + i64(b.axis) +
                  ",\"warn\":" + json_number(b.warn_lossy_fraction) + ",\"formats\":[";
  for (std::size_t i = 0; i < b.formats.size(); ++i) {
    const block_format_row& f = b.formats[i];
    s += (i ? ",{" : "{") + std::string("\"format\":") + json_string(f.format) + ",\"block_size\":" + i64(f.block_size) +
         ",\"blocks\":" + i64(f.blocks) + ",\"elements\":" + i64(f.elements) + ",\"lossy_blocks\":" + i64(f.lossy_blocks) +
         ",\"lossy_fraction\":" + json_number(f.lossy_fraction) + ",\"clipped\":" + i64(f.clipped) +
         ",\"flushed\":" + i64(f.flushed) + ",\"subnormal\":" + i64(f.subnormal) + ",\"zero_blocks\":" +
         i64(f.zero_blocks) + ",\"nan_blocks\":" + i64(f.nan_blocks) + ",\"zero_scale_blocks\":" +
         i64(f.zero_scale_blocks) + ",\"warned\":" + (f.warned ? "true" : "false") +
         ",\"warn_threshold\":" + json_number(f.warn_threshold);
    if (!std::isnan(f.tensor_scale)) s += ",\"tensor_scale\":" + json_number(f.tensor_scale);
    if (f.has_scale_exp) {
      s += ",\"scale_exp\":{\"min\":" + i64(f.exp_min) + ",\"max\":" + i64(f.exp_max) + ",\"mean\":" +
           json_number(f.exp_mean) + ",\"std\":" + json_number(f.exp_std) + ",\"histogram\":[";
      for (std::size_t k = 0; k < f.histogram.size(); ++k)
        s += (k ? ",[" : "[") + i64(f.histogram[k].first) + "," + i64(f.histogram[k].second) + "]";
      s += "]}";
    }
    if (f.has_worst)
      s += ",\"worst\":{\"index\":" + i64(f.worst_index) + ",\"first_element\":" + i64(f.worst_first) +
           ",\"elements\":" + i64(f.worst_elements) + ",\"abs_max\":" + json_number(f.worst_abs_max) +
           ",\"scale\":" + json_string(f.worst_scale) + ",\"scale_byte\":" + i64(f.worst_scale_byte) +
           ",\"clipped\":" + i64(f.worst_clipped) + ",\"flushed\":" + i64(f.worst_flushed) +
           ",\"error_max_abs\":" + json_number(f.worst_error_max) + ",\"error_rms\":" + json_number(f.worst_error_rms) +
           "}";
    s += "}";
  }
  return s + "]}";
}

inline std::string tree_json(const tree_view& v) {
  std::string s = "{\"source\":" + json_string(v.source) + ",\"kind\":" + json_string(v.kind) +
                  ",\"step\":" + std::to_string(v.step) + ",\"rank\":" + std::to_string(v.rank) + ",\"notes\":[";
  for (std::size_t i = 0; i < v.notes.size(); ++i) s += (i ? "," : "") + json_string(v.notes[i]);
  s += "],\"first\":";
  s += v.first_node >= 0 ? "[" + std::to_string(v.first_node) + "," + std::to_string(v.first_tensor) + "]" : "null";
  s += ",\"producer\":" + std::to_string(v.producer_node) + ",\"producer_text\":" + json_string(v.producer_text) +
       ",\"detection\":" + std::to_string(v.detection_node) + ",\"detection_text\":" + json_string(v.detection_text);
  s += ",\"nodes\":[";
  std::size_t block_tensors = 0;
  for (std::size_t i = 0; i < v.nodes.size(); ++i) {
    const node_row& n = v.nodes[i];
    s += (i ? ",[" : "[") + std::to_string(n.parent) + "," + json_string(n.path) + ",[";
    for (std::size_t k = 0; k < n.tensors.size(); ++k) {
      const tensor_row& t = n.tensors[k];
      // role: 0 an output, 1 an input, 2 a parameter
      s += (k ? ",[" : "[") + json_string(t.label) + "," + json_string(t.dtype) + "," + json_string(t.shape) + "," +
           (t.param ? "2" : t.input ? "1" : "0") + "," + count_json(t.nan) + "," + count_json(t.pos_inf) + "," +
           count_json(t.neg_inf) + "," + json_number(t.abs_max);
      if (!t.segments.empty()) {  // its bad segments (a tensor recorded with a segmentation)
        s += ",[";
        for (std::size_t q = 0; q < t.segments.size(); ++q) s += (q ? "," : "") + json_string(t.segments[q]);
        s += "]";
      } else if (t.blocks.present) {
        s += ",null";
      }
      if (t.blocks.present) {  // what a block-scaled target would lose (10th item; none without the key)
        s += "," + block_json(t.blocks);
        ++block_tensors;
      }
      s += "]";
    }
    s += "]";
    if (n.is_checkpoint) s += ",{\"checkpoint\":" + json_string(n.checkpoint) + "}";
    s += "]";
  }
  s += "]";
  // the tensors with block-scaled statistics (the page's "blocks with loss" column); no key in a tree without them
  if (block_tensors) s += ",\"blocks\":" + std::to_string(block_tensors);
  return s + "}";
}

/// Whether any tree of the page carries block-scaled statistics (the page then has the "blocks with loss" parts).
inline bool any_block_scaled(const model& m) {
  for (const tree_view& v : m.trees)
    for (const node_row& n : v.nodes)
      for (const tensor_row& t : n.tensors)
        if (t.blocks.present) return true;
  return false;
}

/// Each node of a tree by its pre-order index (the order of tree_view::nodes).
inline std::map<const nsdiff::tree_node*, long> preorder_index(const nsdiff::tree_node& root) {
  std::map<const nsdiff::tree_node*, long> index;
  std::vector<const nsdiff::tree_node*> st{&root};
  long i = 0;
  while (!st.empty()) {
    const nsdiff::tree_node* n = st.back();
    st.pop_back();
    index[n] = i++;
    for (std::size_t c = n->children.size(); c-- > 0;) st.push_back(&n->children[c]);
  }
  return index;
}

/// The diff of the two layer-tree inputs, as nanscope-diff computes it with its default options; the modules it
/// names are marked in the second tree (B, the candidate).
inline std::string diff_json(model& m) {
  nsdiff::tree_file& a = m.diff_inputs[0];
  nsdiff::tree_file& b = m.diff_inputs[1];
  const nsdiff::diff_options o;
  const nsdiff::report r = nsdiff::diff_trees(a, b, o);
  const std::map<const nsdiff::tree_node*, long> rows_b = preorder_index(b.root);  // B's rows, by node
  auto row_b = [&](const nsdiff::tree_node* n) -> long {
    const auto it = n ? rows_b.find(n) : rows_b.end();
    return it == rows_b.end() ? -1 : it->second;
  };
  auto node_index = [&](long ni) -> long {
    return ni >= 0 && static_cast<std::size_t>(ni) < r.nodes.size() ? row_b(r.nodes[static_cast<std::size_t>(ni)].b) : -1;
  };
  // the verdict counts what nanscope-diff's counts: divergences, and segments bad in one run only or in both with
  // other counts (nsdiff::report::verdict_diverged)
  const bool diverged = r.verdict_diverged(o);
  std::string verdict;
  if (diverged) {
    verdict = "verdict: diverged (" + std::to_string(r.tensors_diverged) + " of " +
              std::to_string(r.tensors_compared + r.params_compared) + " tensors";
    if (!r.structural.empty()) verdict += ", " + std::to_string(r.structural.size()) + " structural differences";
    if (r.segment_diffs)
      verdict += ", " + std::to_string(r.segment_diffs) + (r.segment_diffs == 1 ? " segment difference" : " segment differences");
    verdict += ")";
  } else {
    verdict = "verdict: same within tolerance (" + std::to_string(r.tensors_compared + r.params_compared) +
              " tensors compared)";
  }
  std::string first_text, producer_text, producer_module;
  long first_node = -1, producer_node = -1;
  if (r.first >= 0) {
    const nsdiff::tensor_result& t = r.tensors[static_cast<std::size_t>(r.first)];
    first_text = r.nodes[t.node].display + " " + t.label;
    first_node = node_index(static_cast<long>(t.node));
    producer_text = nsdiff::likely_producer_text(r);
    producer_module = r.likely.module;
    producer_node = row_b(r.likely.in_b);
  }
  std::string s = "{\"a\":" + json_string(a.file) + ",\"b\":" + json_string(b.file) +
                  ",\"tree\":" + std::to_string(m.tree_files[1]) + ",\"verdict\":" + json_string(verdict) +
                  ",\"diverged_flag\":" + (diverged ? "true" : "false") +
                  ",\"first_text\":" + json_string(first_text) + ",\"first_node\":" + std::to_string(first_node) +
                  ",\"producer_text\":" + json_string(producer_text) +
                  ",\"producer_module\":" + json_string(producer_module) +
                  ",\"producer_node\":" + std::to_string(producer_node) + ",\"diverged\":[";
  bool comma = false;
  for (std::size_t i = 0; i < r.nodes.size(); ++i)
    if ((r.nodes[i].inputs_diverged || r.nodes[i].outputs_diverged || r.nodes[i].params_diverged) &&
        node_index(static_cast<long>(i)) >= 0) {
      s += (comma ? "," : "") + std::to_string(node_index(static_cast<long>(i)));
      comma = true;
    }
  s += "],\"structural\":[";
  for (std::size_t i = 0; i < r.structural.size(); ++i) {
    const auto& d = r.structural[i];
    s += (i ? ",[" : "[") + json_string(d.kind) + "," + json_string(d.module) + "," + json_string(d.tensor) + "," +
         json_string(d.a) + "," + json_string(d.b) + "]";
  }
  // the bad segments of A against B, as nanscope-diff prints them (tools/diff/segments.hpp): the section's summary
  // ("" when no tensor's bad segments are recorded in both files) and one line per comparison line
  s += "],\"segment_diffs\":" + std::to_string(r.segment_diffs) + ",\"segment_summary\":" +
       json_string(r.segment_tensors ? nsdiff::segment_comparison_summary(r) : std::string()) + ",\"segments\":[";
  bool seg_comma = false;
  for (const nsdiff::tensor_result& t : r.tensors) {
    if (!t.segments_compared) continue;
    for (const std::string& l : nsdiff::comparison_lines(t.segments)) {
      s += (seg_comma ? "," : "") + json_string(r.nodes[t.node].display + " " + t.label + ": " + l);
      seg_comma = true;
    }
  }
  s += "],\"notes\":[";
  for (std::size_t i = 0; i < r.notes.size(); ++i) s += (i ? "," : "") + json_string(r.notes[i]);
  s += "]";
  // the tensors either run checked against a block-scaled target, paired as the diff pairs modules and, in a pair,
  // by role and label: [module, tensor, A's row, its tensor index, B's row, its tensor index] (-1: not in that run)
  const tree_view& va = m.trees[m.tree_files[0]];
  const tree_view& vb = m.trees[m.tree_files[1]];
  bool blocks_a = false, blocks_b = false;
  for (const node_row& n : va.nodes)
    for (const tensor_row& t : n.tensors) blocks_a = blocks_a || t.blocks.present;
  for (const node_row& n : vb.nodes)
    for (const tensor_row& t : n.tensors) blocks_b = blocks_b || t.blocks.present;
  if (blocks_a || blocks_b) {
    const std::map<const nsdiff::tree_node*, long> rows_a = preorder_index(a.root);
    s += ",\"blocks\":{\"a\":" + std::to_string(m.tree_files[0]) + ",\"rows\":[";
    bool bcomma = false;
    auto emit = [&](const std::string& module, const std::string& label, long ra, long ka, long rb, long kb) {
      s += (bcomma ? ",[" : "[") + json_string(module) + "," + json_string(label) + "," + std::to_string(ra) + "," +
           std::to_string(ka) + "," + std::to_string(rb) + "," + std::to_string(kb) + "]";
      bcomma = true;
    };
    for (const nsdiff::node_result& n : r.nodes) {
      const auto ia = rows_a.find(n.a);
      const long ra = ia == rows_a.end() ? -1 : ia->second, rb = row_b(n.b);
      if (ra < 0 || rb < 0 || static_cast<std::size_t>(ra) >= va.nodes.size() ||
          static_cast<std::size_t>(rb) >= vb.nodes.size())
        continue;
      const std::vector<tensor_row>& ta = va.nodes[static_cast<std::size_t>(ra)].tensors;
      const std::vector<tensor_row>& tb = vb.nodes[static_cast<std::size_t>(rb)].tensors;
      auto find = [](const std::vector<tensor_row>& ts, const tensor_row& x) -> long {
        for (std::size_t k = 0; k < ts.size(); ++k)
          if (ts[k].label == x.label && ts[k].input == x.input && ts[k].param == x.param) return static_cast<long>(k);
        return -1;
      };
      for (std::size_t k = 0; k < ta.size(); ++k) {
        const long kb = find(tb, ta[k]);
        if (ta[k].blocks.present || (kb >= 0 && tb[static_cast<std::size_t>(kb)].blocks.present))
          emit(n.display, ta[k].label, ra, static_cast<long>(k), rb, kb);
      }
      for (std::size_t k = 0; k < tb.size(); ++k)
        if (tb[k].blocks.present && find(ta, tb[k]) < 0) emit(n.display, tb[k].label, ra, -1, rb, static_cast<long>(k));
    }
    s += "]}";
  }
  return s + "}";
}

/// The page's data (the JSON between page_head and page_tail, not yet made HTML-safe).
inline std::string page_data(model& m, const std::vector<std::string>& inputs, const std::string& version) {
  std::string s = "{\"version\":" + json_string(version) + ",\"inputs\":[";
  for (std::size_t i = 0; i < inputs.size(); ++i) s += (i ? "," : "") + json_string(inputs[i]);
  s += "],\"formats\":[";
  for (std::size_t i = 0; i < sizeof format_limits / sizeof format_limits[0]; ++i)
    s += std::string(i ? "," : "") + "[" + json_string(format_limits[i].name) + "," + json_number(format_limits[i].max) + "]";
  s += "],\"histories\":" + std::to_string(m.histories.size());
  // the first NaN/Inf: the earliest step among the layer trees (input order when there are no steps), then the
  // scan files in input order
  long best = -1;
  for (std::size_t i = 0; i < m.trees.size(); ++i) {
    const tree_view& t = m.trees[i];
    if (t.first_node < 0) continue;
    if (best < 0) {
      best = static_cast<long>(i);
      continue;
    }
    const tree_view& b = m.trees[static_cast<std::size_t>(best)];
    // layer trees and snapshots by step; scan files after them
    const bool tt = t.kind != "scan", bt = b.kind != "scan";
    if (tt && bt && t.step >= 0 && b.step >= 0 && t.step < b.step) best = static_cast<long>(i);
    else if (tt && !bt) best = static_cast<long>(i);
  }
  s += ",\"first\":";
  if (best >= 0) {
    const tree_view& t = m.trees[static_cast<std::size_t>(best)];
    s += "{\"tree\":" + std::to_string(best) + ",\"node\":" + std::to_string(t.first_node) +
         ",\"tensor\":" + std::to_string(t.first_tensor) + ",\"text\":" + json_string(first_text(t)) +
         ",\"producer\":" + std::to_string(t.producer_node) + ",\"producer_text\":" + json_string(t.producer_text) +
         ",\"segments\":[";
    for (std::size_t k = 0; k < t.segment_lines.size(); ++k) s += (k ? "," : "") + json_string(t.segment_lines[k]);
    s += "]}";
  } else {
    s += "null";
  }
  // the recorder's detections the inputs record (a layer tree's nanscope_detection, a snapshot)
  s += ",\"detections\":[";
  bool any = false;
  for (std::size_t i = 0; i < m.trees.size(); ++i) {
    const tree_view& t = m.trees[i];
    if (t.detection_text.empty()) continue;
    s += std::string(any ? "," : "") + "{\"tree\":" + std::to_string(i) + ",\"node\":" +
         std::to_string(t.detection_node) + ",\"text\":" + json_string(t.detection_text) + "}";
    any = true;
  }
  s += "]";
  s += ",\"trees\":[";
  for (std::size_t i = 0; i < m.trees.size(); ++i) s += (i ? "," : "") + tree_json(m.trees[i]);
  s += "],\"heatmaps\":[";
  bool comma = false;
  for (const history_file& h : m.histories) {
    s += (comma ? "," : "") + heatmap_json(history_heatmap(h));
    comma = true;
  }
  if (m.tree_files.size() >= 2) {
    s += (comma ? "," : "") + heatmap_json(tree_heatmap(m));
  }
  s += "],\"diff\":";
  s += m.tree_files.size() == 2 ? diff_json(m) : std::string("null");
  s += "}";
  return s;
}

/// Writes `text` to `path` atomically: a temporary file in the same directory, then rename(). Returns an empty
/// string, or the error; `renamed` is set when the page is in place (only the directory sync after it failed).
inline std::string write_atomically(const std::string& path, const std::string& text, bool& renamed) {
  renamed = false;
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : path.substr(0, slash + 1);
  std::string tmpl = (slash == std::string::npos ? std::string() : dir) + ".nanscope-report-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const int fd = ::mkstemp(buf.data());
  if (fd < 0) return std::string("cannot create a temporary file in '") + dir + "': " + std::strerror(errno);
  const std::string tmp(buf.data());
  auto fail = [&](const char* what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return std::string(what) + ": " + std::strerror(err);
  };
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("cannot write", errno);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0644) != 0) return fail("cannot set permissions", errno);
  if (::fsync(fd) != 0 && errno != EINVAL) return fail("cannot sync", errno);
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return std::string("cannot close: ") + std::strerror(err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return std::string("cannot rename the temporary file into place: ") + std::strerror(err);
  }
  renamed = true;
  // the rename itself survives a crash once the directory is synced (file systems that cannot: accepted)
  try {
    nanscope::detail::fsync_directory(dir, path);
  } catch (const std::exception& e) {
    return e.what();  // "nanscope: file '...': written, but fsync of its directory '...' failed: ..."
  }
  return std::string();
}

struct report_args {
  std::vector<std::string> inputs;
  std::string output;
};

/// Adds the `report` subcommand to the CLI.
/// Adds the `report` subcommand to the CLI; `inputs` gets the option of the input files.
inline CLI::App* add_report_command(CLI::App& app, report_args& args, CLI::Option*& inputs) {
  CLI::App* cmd = app.add_subcommand(
      "report", "Write one self-contained HTML report from tree files, `scan --json` output and site history");
  inputs = cmd->add_option("inputs", args.inputs,
                           "Layer-tree JSON files (nanscope's or HuggingFace's), `nanscope scan --json` output, "
                           "per-site history JSON Lines (docs/report.md); those starting with '-' after '--'");
  cmd->add_option("-o,--output", args.output, "The HTML file to write (replaced atomically)")->required();
  return cmd;
}

/// Prints one error of `nanscope report` to stderr and returns its exit status, 2. Every message goes through here:
/// the whole text is escaped for a terminal (nanscope_cli::text_escape: control characters and invalid UTF-8 as
/// \xNN), because file and directory names enter it from many places (the inputs, the output, the directory of the
/// output inside an error text built by write_atomically or the library). `note`, when given, goes before the exit
/// status: "MESSAGE (NOTE; exit 2)".
inline int report_failure(const std::string& message, const char* note = nullptr) {
  std::fprintf(stderr, "%s (%s%sexit 2)\n", nanscope_cli::text_escape(message).c_str(), note ? note : "",
               note ? "; " : "");
  return 2;
}

/// Runs `nanscope report`. Returns the exit status.
inline int run_report(const report_args& args, const std::string& version) {
  model m;
  for (const std::string& in : args.inputs) {
    try {
      read_input(m, in);
    } catch (const input_error& e) {
      return report_failure(e.what());
    } catch (const std::exception& e) {
      return report_failure("nanscope: file '" + in + "': " + e.what());
    }
  }
  std::string page;
  try {
    std::string data = page_data(m, args.inputs, version);
    html_safe_json(data);
    page.reserve(data.size() + 40000);
    // the block-scaled parts only when a tree carries "nanscope_block_scaled": other pages stay byte for byte
    const bool blocks = any_block_scaled(m);
    page += blocks ? block_page_head() : std::string(page_head);
    page += data;
    page += blocks ? block_page_tail() : std::string(page_tail);
  } catch (const std::exception& e) {
    return report_failure(std::string("nanscope: report: ") + e.what());
  }
  struct stat st {};
  if (::stat(args.output.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    return report_failure("nanscope: cannot write the report '" + args.output +
                          "': it exists and is not a regular file");
  // never over one of its own inputs (the same file by device and inode: another name, a link): that would
  // replace the evidence with the page
  if (::stat(args.output.c_str(), &st) == 0) {
    for (const std::string& in : args.inputs) {
      struct stat si {};
      if (::stat(in.c_str(), &si) == 0 && si.st_dev == st.st_dev && si.st_ino == st.st_ino)
        return report_failure("nanscope: cannot write the report '" + args.output + "': it is the input '" + in + "'");
    }
  }
  bool renamed = false;
  const std::string err = write_atomically(args.output, page, renamed);
  // (the library's text names the output and its directory: "written, but fsync of its directory '...' failed")
  if (renamed && !err.empty()) return report_failure(err, "a crash now may lose the report's new name");
  if (!err.empty()) return report_failure("nanscope: cannot write the report '" + args.output + "': " + err);
  return 0;
}

}  // namespace nanscope_report

#endif  // NANSCOPE_CLI_REPORT_HPP
