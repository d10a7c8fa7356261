// nanscope-diff — segments.hpp: the bad segments of a tensor recorded with a segmentation ("nanscope_segments",
// docs/segments.md), named as the recorder names them ("request 17 (rows 4096-4351): 3 NaN, first at row 4102"),
// each with the module that first produced it in the file; and the comparison of one tensor's bad segments in A
// with those in B (bad in B only, in A only, in both; or segmentations that differ). Used by nanscope-diff and
// `nanscope report`.
#ifndef NANSCOPE_DIFF_SEGMENTS_HPP
#define NANSCOPE_DIFF_SEGMENTS_HPP

#include "producer.hpp"
#include "tree_model.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nsdiff {

/// "row 5" or "rows 5-11" ("element(s)" for element segments): a segment's range.
inline std::string segment_range_text(const segment_info& s) {
  const char* axis = s.rows ? "row" : "element";
  if (s.first_unit == s.last_unit) return std::string(axis) + " " + std::to_string(s.first_unit);
  return std::string(axis) + "s " + std::to_string(s.first_unit) + "-" + std::to_string(s.last_unit);
}

/// "request 17 (rows 4096-4351)".
inline std::string segment_name(const segment_info& s) {
  return s.unit + " " + std::to_string(s.id) + " (" + segment_range_text(s) + ")";
}

/// "3 NaN, 1 +inf, first at row 4102": what a bad segment holds.
inline std::string segment_counts_text(const segment_info& s) {
  std::string kinds;
  auto add = [&](std::uint64_t n, const char* what) {
    if (n == 0) return;
    kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(s.nan, "NaN");
  add(s.pos_inf, "+inf");
  add(s.neg_inf, "-inf");
  std::string out = kinds.empty() ? std::string("no NaN/Inf") : kinds;
  if (s.first >= 0) out += std::string(", first at ") + (s.rows ? "row " : "element ") + std::to_string(s.first);
  return out;
}

/// "request 17 (rows 4096-4351): 3 NaN, 1 +inf, first at row 4102" (the recorder's words).
inline std::string segment_text(const segment_info& s) { return segment_name(s) + ": " + segment_counts_text(s); }

/// Whether a slot's tensor holds the segment (unit, id) bad.
inline bool slot_holds_segment(const slot& s, const std::string& unit, std::int64_t id) {
  if (s.kind != slot_kind::tensor) return false;
  for (const segment_info& g : s.tensor.segments)
    if (g.unit == unit && g.id == id) return true;
  return false;
}

/// Where a bad segment was first produced in a tree, in call order: the first node whose outputs hold it bad while
/// its inputs and parameters do not ("produced in X outputs"); else the first place that holds it bad ("first bad
/// at X inputs.args[0]"). Empty when no tensor of the file holds it.
inline std::string segment_origin_text(const tree_node& root, const std::string& unit, std::int64_t id) {
  std::string first_seen, produced;
  walk_call_order(root, [&](const call_event& e) {
    const tree_node& n = *e.node;
    if (e.enter) {
      if (first_seen.empty())
        for (const auto* list : {&n.params, &n.inputs})
          for (const slot& s : *list)
            if (first_seen.empty() && slot_holds_segment(s, unit, id)) first_seen = "first bad at " + node_name(n) + " " + s.label;
      return true;
    }
    bool in_bad = false;
    for (const auto* list : {&n.params, &n.inputs})
      for (const slot& s : *list) in_bad = in_bad || slot_holds_segment(s, unit, id);
    for (const slot& s : n.outputs) {
      if (!slot_holds_segment(s, unit, id)) continue;
      if (!in_bad) {
        produced = "produced in " + node_name(n) + " " + s.label;
        return false;
      }
      if (first_seen.empty()) first_seen = "first bad at " + node_name(n) + " " + s.label;
    }
    return true;
  });
  return produced.empty() ? first_seen : produced;
}

/// The lines of a tensor's bad segments, each followed by where it was produced in the tree (null root: none),
/// at most `limit` of them, then "... and N more <unit>s".
inline std::vector<std::string> segment_lines(const tensor_info& t, const tree_node* root, std::size_t limit = 16) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < t.segments.size() && i < limit; ++i) {
    const segment_info& s = t.segments[i];
    std::string line = segment_text(s);
    if (root != nullptr) {
      const std::string o = segment_origin_text(*root, s.unit, s.id);
      if (!o.empty()) line += "; " + o;
    }
    out.push_back(std::move(line));
  }
  if (t.segments.size() > limit)
    out.push_back("... and " + std::to_string(t.segments.size() - limit) + " more " + t.segments.front().unit + "s");
  return out;
}

/// The slot of node `n` labelled `label` (outputs, inputs, parameters), or null.
inline const slot* slot_labelled(const tree_node& n, const std::string& label) {
  for (const auto* list : {&n.outputs, &n.inputs, &n.params})
    for (const slot& s : *list)
      if (s.label == label) return &s;
  return nullptr;
}

// --- A's bad segments against B's ----------------------------------------------------------------------------
//
// A file records only the bad segments of a tensor (unit, index, id, range, counts, first NaN/Inf), not the whole
// segmentation. Two tensors' bad segments are compared when every pair of recorded segments is consistent with one
// segmentation: the same unit and axis, the same extent (rows, or elements), the same id at the same index with the
// same range, no index holding two ids and no two ids covering the same rows. A segment recorded in one file only
// is then bad in that run only: the other run's segment with that id was clean (a bad one would be recorded). A
// difference that only clean segments show (how many segments there are, where the clean ones start) cannot be
// seen in the files.

/// One segment bad in both runs.
struct segment_pair {
  segment_info a, b;
  bool same = false;  ///< the same NaN, +inf and -inf counts and the same first NaN/Inf
};

/// One tensor's bad segments in A against those in B (both recorded with a segmentation).
struct segment_comparison {
  std::string mismatch;  ///< why the segmentations differ; "" when the files show no difference
  std::vector<segment_info> b_only, a_only;  ///< by index
  std::vector<segment_pair> both;            ///< by index
  /// Segments bad in one run only, or in both with different counts or first NaN/Inf (0 when the segmentations
  /// differ: nothing was compared).
  std::size_t differences() const {
    if (!mismatch.empty()) return 0;
    std::size_t n = b_only.size() + a_only.size();
    for (const segment_pair& p : both) n += p.same ? 0 : 1;
    return n;
  }
};

/// The number of rows (element segments: elements) a segmentation of a tensor of this shape covers; -1 unknown.
inline std::int64_t segment_extent(const std::vector<std::int64_t>& shape, bool rows) {
  if (shape.empty()) return -1;
  if (rows) return shape[0];
  std::int64_t n = 1;
  for (const std::int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > INT64_MAX / d) return -1;
    n *= d;
  }
  return n;
}

/// Why the bad segments of A (`a`, of a tensor of shape `shape_a`) and of B cannot come from one segmentation, in a
/// few words; "" when they can. O((n + m) log m): a batch may have thousands of bad requests in every tensor.
inline std::string segmentation_mismatch(const std::vector<segment_info>& a, const std::vector<segment_info>& b,
                                         const std::vector<std::int64_t>& shape_a, const std::vector<std::int64_t>& shape_b) {
  if (a.empty() || b.empty()) return std::string();
  // one unit and one axis on both sides: every segment of each side against the other side's first
  auto kind_mismatch = [](const segment_info& x, const segment_info& y) -> std::string {
    if (x.unit != y.unit) return "A's segments are " + x.unit + "s, B's " + y.unit + "s";
    if (x.rows != y.rows)
      return std::string("A's segments are ranges of ") + (x.rows ? "rows" : "elements") + ", B's of " +
             (y.rows ? "rows" : "elements");
    return std::string();
  };
  for (const segment_info& x : a)
    if (std::string m = kind_mismatch(x, b.front()); !m.empty()) return m;
  for (const segment_info& y : b)
    if (std::string m = kind_mismatch(a.front(), y); !m.empty()) return m;
  const bool rows = a.front().rows;
  const std::int64_t ea = segment_extent(shape_a, rows), eb = segment_extent(shape_b, rows);
  if (ea >= 0 && eb >= 0 && ea != eb)
    return "A's tensor has " + std::to_string(ea) + (rows ? " rows" : " elements") + ", B's " + std::to_string(eb);
  // an id twice in one file (ids that are not unique): segments cannot be matched by id
  for (const auto* side : {&a, &b}) {
    std::map<std::int64_t, const segment_info*> seen;
    for (const segment_info& s : *side)
      if (const auto [it, fresh] = seen.emplace(s.id, &s); !fresh)
        return s.unit + " " + std::to_string(s.id) + " is at indices " + std::to_string(it->second->index) + " and " +
               std::to_string(s.index) + " in " + (side == &a ? "A" : "B");
  }
  std::map<std::int64_t, const segment_info*> b_by_id, b_by_index;
  for (const segment_info& y : b) {
    b_by_id.emplace(y.id, &y);
    b_by_index.emplace(y.index, &y);
  }
  std::vector<const segment_info*> b_by_range;  // by last row (element); the segments of one side do not overlap
  for (const segment_info& y : b) b_by_range.push_back(&y);
  std::sort(b_by_range.begin(), b_by_range.end(),
            [](const segment_info* x, const segment_info* y) { return x->last_unit < y->last_unit; });
  for (const segment_info& x : a) {
    const std::string ux = x.unit + " " + std::to_string(x.id);
    if (const auto it = b_by_id.find(x.id); it != b_by_id.end()) {
      const segment_info& y = *it->second;
      if (x.first_unit != y.first_unit || x.last_unit != y.last_unit)
        return ux + " is " + segment_range_text(x) + " in A, " + segment_range_text(y) + " in B";
      if (x.index != y.index)
        return ux + " is at index " + std::to_string(x.index) + " in A, " + std::to_string(y.index) + " in B";
    }
    if (const auto it = b_by_index.find(x.index); it != b_by_index.end() && it->second->id != x.id)
      return "index " + std::to_string(x.index) + " is " + segment_name(x) + " in A, " + segment_name(*it->second) + " in B";
    // B's segments over x's rows: from the first that ends at or after x's first row, while they start by its last
    auto y = std::lower_bound(b_by_range.begin(), b_by_range.end(), x.first_unit,
                              [](const segment_info* s, std::int64_t first) { return s->last_unit < first; });
    for (; y != b_by_range.end() && (*y)->first_unit <= x.last_unit; ++y)
      if ((*y)->id != x.id) return segment_name(x) + " in A overlaps " + segment_name(**y) + " in B";
  }
  return std::string();
}

/// Compares the bad segments of one tensor in A and in B (both non-empty).
inline segment_comparison compare_segments(const tensor_info& a, const tensor_info& b) {
  segment_comparison c;
  c.mismatch = segmentation_mismatch(a.segments, b.segments, a.shape, b.shape);
  if (!c.mismatch.empty()) return c;
  std::map<std::int64_t, const segment_info*> a_by_id, b_by_id;
  for (const segment_info& x : a.segments) a_by_id.emplace(x.id, &x);
  for (const segment_info& y : b.segments) b_by_id.emplace(y.id, &y);
  for (const segment_info& y : b.segments) {
    const auto it = a_by_id.find(y.id);
    if (it == a_by_id.end()) {
      c.b_only.push_back(y);
      continue;
    }
    const segment_info& x = *it->second;
    segment_pair p;
    p.a = x;
    p.b = y;
    p.same = x.nan == y.nan && x.pos_inf == y.pos_inf && x.neg_inf == y.neg_inf && x.first == y.first;
    c.both.push_back(std::move(p));
  }
  for (const segment_info& x : a.segments)
    if (b_by_id.find(x.id) == b_by_id.end()) c.a_only.push_back(x);
  auto by_index = [](const segment_info& x, const segment_info& y) { return x.index < y.index; };
  std::stable_sort(c.b_only.begin(), c.b_only.end(), by_index);
  std::stable_sort(c.a_only.begin(), c.a_only.end(), by_index);
  std::stable_sort(c.both.begin(), c.both.end(),
                   [](const segment_pair& x, const segment_pair& y) { return x.b.index < y.b.index; });
  return c;
}

/// The comparison in lines: "segmentations differ: <why>; their bad segments are not compared", or, at most `limit`
/// lines, "bad in B only: <segment>", then "bad in A only: <segment>", then "bad in both: <name>: <counts> (the same
/// in A and B)" or "bad in both: <name>: A: <counts>; B: <counts>", then "... and N more <unit>s".
inline std::vector<std::string> comparison_lines(const segment_comparison& c, std::size_t limit = 16) {
  if (!c.mismatch.empty()) return {"segmentations differ: " + c.mismatch + "; their bad segments are not compared"};
  std::vector<std::string> out;
  for (const segment_info& s : c.b_only) out.push_back("bad in B only: " + segment_text(s));
  for (const segment_info& s : c.a_only) out.push_back("bad in A only: " + segment_text(s));
  for (const segment_pair& p : c.both) {
    if (p.same)
      out.push_back("bad in both: " + segment_text(p.b) + " (the same in A and B)");
    else
      out.push_back("bad in both: " + segment_name(p.b) + ": A: " + segment_counts_text(p.a) + "; B: " +
                    segment_counts_text(p.b));
  }
  if (out.size() > limit) {
    const std::size_t more = out.size() - limit;
    out.resize(limit);
    const std::string& unit = !c.b_only.empty() ? c.b_only.front().unit : !c.a_only.empty() ? c.a_only.front().unit : c.both.front().b.unit;
    out.push_back("... and " + std::to_string(more) + " more " + unit + "s");
  }
  return out;
}

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_SEGMENTS_HPP
