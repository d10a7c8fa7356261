// nanscope — detail/tree_node.hpp: one node of the layer tree while its pass runs, and the JSON text of its
// inputs, outputs and own keys (the order and spacing of HuggingFace's json.dump with indent=2).
#ifndef NANSCOPE_DETAIL_TREE_NODE_HPP
#define NANSCOPE_DETAIL_TREE_NODE_HPP

#include "../config.hpp"
#include "../frame.hpp"
#include "../tree_json.hpp"
#include "../tree_warnings.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// A closed child that layer pruning may still drop (the latest layer block of a run, and what followed it).
struct tree_piece {
  tree_text text;
  bool layer;
  bool keep;  ///< with extras: holds evidence, so pruning never drops it
};
/// A node of the pass while it is open: what its JSON needs once it closes, and how pruning sees it.
struct tree_node {
  std::uint64_t serial = 0;   ///< the frame's (frame::serial)
  std::string module_path;    ///< the frame's
  std::string path;
  int depth = 0;
  bool numbered = false;
  std::string number;
  bool buffered = false;  ///< writes into `own` (pruning may drop it) instead of its parent's stream
  int out = -1;           ///< index of the node whose `own` receives this node's text; -1: the files
  tree_text own;
  bool header_done = false;
  bool has_children = false;
  bool child_has_number = false;
  int emitted = 0;      ///< children written into this node's "children" array
  int layer_blocks = 0; ///< layer-block children seen
  std::vector<tree_piece> pending;  ///< after the 2nd layer block: the latest block and what followed it
  std::vector<tree_io> args, kwargs, outputs, params;
  std::vector<std::string> warnings;  ///< early warnings about this node's tensors (JSON fragments, level 0)
  source_location where;
  std::string checkpoint;     ///< a checkpoint node: its text ("nanscope_checkpoint"); empty for a module
  std::string last_child;     ///< the path of the last module child closed so far
  std::string detection;      ///< "nanscope_detection" (a JSON object, level 0), when the recorder detected here
  bool evidence = false;      ///< this node or one below holds a NaN/Inf, a warning or the detection (kept by pruning)
};

/// The kwargs object. HF's SUMMARY is FULL_TENSORS with every "value" key removed from the objects under
/// inputs and outputs (its strip_values), so a kwarg named "value" (an attention module's) is not in the
/// SUMMARY file, and its object is left as {} when it was the only one.
inline void write_named(tree_text& w, const std::vector<tree_io>& items, int level) {
  for (const bool full : {false, true}) {
    if (!(full ? w.with_full : w.with_summary)) continue;
    std::string& out = full ? w.full : w.summary;
    out += '{';
    std::size_t shown = 0;
    for (const auto& item : items) {
      if (!full && item.name == "value") continue;
      if (shown++ != 0) out += ',';
      out += indent(level + 1);
      out += py_json_quote(item.name);
      out += ": ";
      item.render(out, level + 1, full);
    }
    if (shown != 0) out += indent(level);
    out += '}';
  }
}

inline void write_node_inputs(tree_text& w, const tree_node& n, int k) {
  const bool root = n.depth == 0;
  const bool has_args = !n.args.empty() || root;
  const bool has_kwargs = !n.kwargs.empty() || root;
  if (!has_args && !has_kwargs) {
    w.add("{}");
    return;
  }
  w.add("{");
  if (has_args) {
    w.add(indent(k + 1));
    w.add("\"args\": ");
    if (n.args.empty()) {
      w.add("[]");
    } else {
      w.add("[");
      for (std::size_t i = 0; i < n.args.size(); ++i) {
        if (i) w.add(",");
        w.add(indent(k + 2));
        w.add_io(n.args[i], k + 2);
      }
      w.add(indent(k + 1));
      w.add("]");
    }
    if (has_kwargs) w.add(",");
  }
  if (has_kwargs) {
    w.add(indent(k + 1));
    w.add("\"kwargs\": ");
    write_named(w, n.kwargs, k + 1);
  }
  w.add(indent(k));
  w.add("}");
}

inline void write_node_outputs(tree_text& w, const tree_node& n, int k) {
  // a single "output" → the tensor; output[i] → a list by index (gaps as null)
  if (n.outputs.size() == 1 && n.outputs[0].name == "output") {
    w.add_io(n.outputs[0], k);
    return;
  }
  std::vector<const tree_io*> slots;
  for (const auto& o : n.outputs) {
    std::size_t i = slots.size();
    if (o.name.size() > 8 && o.name.compare(0, 7, "output[") == 0) i = std::strtoul(o.name.c_str() + 7, nullptr, 10);
    if (i > slots.size() + 4096) i = slots.size();  // a absurd index: append
    if (i >= slots.size()) slots.resize(i + 1, nullptr);
    slots[i] = &o;
  }
  w.add("[");
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (i) w.add(",");
    w.add(indent(k + 1));
    if (slots[i]) w.add_io(*slots[i], k + 1);
    else w.add("null");
  }
  w.add(indent(k));
  w.add("]");
}

/// A node's own keys after its inputs, children and outputs (extras): parameters, source, warnings, the detection.
inline void write_node_keys(tree_text& w, const tree_node& n, int k) {
  if (!n.params.empty()) {
    w.add(",");
    w.add(indent(k));
    w.add("\"parameters\": ");
    write_named(w, n.params, k);
  }
  if (n.where.file != nullptr && n.where.file[0] != '\0') {
    w.add(",");
    w.add(indent(k));
    w.add("\"source\": ");
    w.add(py_json_quote(std::string(n.where.file) + ":" + std::to_string(n.where.line)));
  }
  if (!n.warnings.empty()) {
    std::string s;
    append_warning_list(s, "nanscope_warnings", n.warnings, k);
    w.add(s);
  }
  if (!n.detection.empty()) {
    w.add(",");
    w.add(indent(k));
    std::string s = "\"nanscope_detection\": ";
    append_at(s, n.detection, k);
    w.add(s);
  }
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_TREE_NODE_HPP
