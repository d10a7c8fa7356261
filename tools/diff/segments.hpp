// nanscope-diff — segments.hpp: the bad segments of a tensor recorded with a segmentation ("nanscope_segments",
// docs/segments.md), named as the recorder names them ("request 17 (rows 4096-4351): 3 NaN, first at row 4102"),
// each with the module that first produced it in the file. Used by nanscope-diff and `nanscope report`.
#ifndef NANSCOPE_DIFF_SEGMENTS_HPP
#define NANSCOPE_DIFF_SEGMENTS_HPP

#include "producer.hpp"
#include "tree_model.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace nsdiff {

/// "request 17 (rows 4096-4351): 3 NaN, 1 +inf, first at row 4102" (the recorder's words).
inline std::string segment_text(const segment_info& s) {
  const char* axis = s.rows ? "row" : "element";
  std::string out = s.unit + " " + std::to_string(s.id) + " (";
  if (s.first_unit == s.last_unit) out += std::string(axis) + " " + std::to_string(s.first_unit);
  else out += std::string(axis) + "s " + std::to_string(s.first_unit) + "-" + std::to_string(s.last_unit);
  out += "): ";
  std::string kinds;
  auto add = [&](std::uint64_t n, const char* what) {
    if (n == 0) return;
    kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  add(s.nan, "NaN");
  add(s.pos_inf, "+inf");
  add(s.neg_inf, "-inf");
  out += kinds.empty() ? std::string("no NaN/Inf") : kinds;
  if (s.first >= 0) out += std::string(", first at ") + axis + " " + std::to_string(s.first);
  return out;
}

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

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_SEGMENTS_HPP
