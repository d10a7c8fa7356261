// nanscope-diff — producer.hpp: where the first NaN/Inf of one layer tree was made, named as the recorder names it
// ("TinyMLP.blocks.1, in its own code after TinyMLP.blocks.1.fc2"), and which layer blocks pruning left out of a
// tree. Shared by nanscope-diff (diff.hpp: the likely producer of a divergence, the detections the files record)
// and `nanscope report` (the producer of the first NaN/Inf).
//
// A tree written with nanscope's extras says it itself: the node whose tensor triggered the recorder's detection
// carries "nanscope_detection" (produced_here, and "after": its last child closed before the detection), the root's
// "nanscope" object "detection". Older files (no such key, outputs on leaves only) are read in call order — a
// node's parameters and inputs when it is entered, its children, its outputs when it is left — and the first
// NaN/Inf met tells:
//   - in a parameter: that parameter is the producer;
//   - in a node's outputs (its inputs, parameters and children's outputs were finite, or they would have been met
//     first): made in that node's own code, after its last child;
//   - in a checkpoint's tensor: made in the enclosing module's own code, after the child before the checkpoint;
//   - in a node's inputs: made before the node was entered, in the code that ran since the last recorded tensor:
//     the parent's own code after the previous child — or, when that child records no outputs (HuggingFace's
//     format: non-leaf modules have none), that child's own code after its last child; or in layer blocks that
//     pruning left out, when the previous child and the node are layer blocks with a gap in their numbers.
#ifndef NANSCOPE_DIFF_PRODUCER_HPP
#define NANSCOPE_DIFF_PRODUCER_HPP

#include "tensor_health.hpp"
#include "tree_model.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace nsdiff {

/// Python's `(.*)\.(\d+)$` on a module path: the trailing number, or empty.
inline std::string trailing_number(const std::string& path) {
  std::size_t b = path.size();
  while (b > 0 && path[b - 1] >= '0' && path[b - 1] <= '9') --b;
  if (b == path.size() || b == 0 || path[b - 1] != '.') return std::string();
  return path.substr(b);
}

/// The Python tool's layer-block test: a numbered path with children, one of which has ".<n>." in its path.
inline bool is_layer_block(const tree_node& n) {
  const std::string num = trailing_number(n.path);
  if (num.empty() || n.children.empty()) return false;
  const std::string needle = "." + num + ".";
  for (const auto& c : n.children)
    if (c.path.find(needle) != std::string::npos) return true;
  return false;
}

/// How a node is named in reports: its module path; a checkpoint as `<its module's path> checkpoint "<text>"`.
inline std::string node_name(const tree_node& n) {
  if (!n.is_checkpoint) return n.path;
  return n.path + " checkpoint \"" + n.checkpoint + "\"";
}

/// One step of a walk in call order: a node entered (its parameters and inputs were recorded then) or left (its
/// outputs). `parent` is null for the root; `index` is the node's place among its parent's children.
struct call_event {
  const tree_node* node;
  const tree_node* parent;
  std::size_t index;
  bool enter;
};

/// Calls f(event) for every node entered and left, in call order, without recursion (trees nest up to
/// max_module_depth modules). f returns false to stop the walk.
template <class F>
inline void walk_call_order(const tree_node& root, F&& f) {
  struct open_node {
    const tree_node* n;
    const tree_node* parent;
    std::size_t index, next;
  };
  if (!f(call_event{&root, nullptr, 0, true})) return;
  std::vector<open_node> open{{&root, nullptr, 0, 0}};
  while (!open.empty()) {
    open_node& o = open.back();
    if (o.next < o.n->children.size()) {
      const std::size_t i = o.next++;
      const tree_node* parent = o.n;
      const tree_node* c = &parent->children[i];
      if (!f(call_event{c, parent, i, true})) return;
      open.push_back({c, parent, i, 0});  // (o is invalid from here)
      continue;
    }
    const call_event e{o.n, o.parent, o.index, false};
    open.pop_back();
    if (!f(e)) return;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Pruning: the layer blocks a pruned tree leaves out
// ---------------------------------------------------------------------------------------------------------

/// Layer blocks left out between two kept ones: `before` and `after` are consecutive layer blocks with the same
/// path prefix among the children of `parent`, and the numbers first..last between theirs are in no child.
struct pruning_gap {
  const tree_node* parent = nullptr;
  const tree_node* before = nullptr;
  const tree_node* after = nullptr;
  std::string prefix;  ///< "TinyMLP.blocks"
  std::uint64_t first = 0, last = 0;

  std::uint64_t count() const { return last - first + 1; }
  /// "TinyMLP.blocks.1", "TinyMLP.blocks.1 and TinyMLP.blocks.2", "TinyMLP.blocks.1 to TinyMLP.blocks.6 (6 blocks)"
  std::string text() const {
    const std::string a = prefix + "." + std::to_string(first), b = prefix + "." + std::to_string(last);
    if (first == last) return a;
    if (count() == 2) return a + " and " + b;
    return a + " to " + b + " (" + std::to_string(count()) + " blocks)";
  }
};

/// What a file says and shows about pruning.
struct pruning_info {
  int flag = -1;                   ///< nanscope.pruned: 1 true, 0 false, -1 not said (HuggingFace's files)
  std::vector<pruning_gap> gaps;   ///< blocks left out (none when the file says it was not pruned)
  bool left_out() const { return !gaps.empty(); }
  /// The gap between two consecutive children of `parent`, or null.
  const pruning_gap* between(const tree_node* parent, const tree_node* before, const tree_node* after) const {
    for (const auto& g : gaps)
      if (g.parent == parent && g.before == before && g.after == after) return &g;
    return nullptr;
  }
  /// "TinyMLP.blocks.1; TinyMLP.encoder.layers.3 to ... (5 blocks)": every gap, for notes.
  std::string text() const {
    std::string s;
    for (std::size_t i = 0; i < gaps.size() && i < 8; ++i) s += (i ? "; " : "") + gaps[i].text();
    if (gaps.size() > 8) s += "; and " + std::to_string(gaps.size() - 8) + " more runs";
    return s;
  }
};

/// The layer blocks missing between kept ones, at every depth. Pruning (the Python tool's, and nanscope's writer's)
/// always keeps the first and the last block of a run, so a tree it shortened has a gap in the numbers of the
/// blocks it kept. Numbers of more than 18 digits are ignored.
inline std::vector<pruning_gap> pruning_gaps(const tree_node& root) {
  std::vector<pruning_gap> out;
  std::vector<const tree_node*> todo{&root};
  while (!todo.empty()) {
    const tree_node& n = *todo.back();
    todo.pop_back();
    std::map<std::string, std::pair<std::uint64_t, const tree_node*>> last;  // prefix -> (number, block)
    for (const tree_node& c : n.children) {
      if (c.is_checkpoint || !is_layer_block(c)) continue;
      const std::string num = trailing_number(c.path);
      if (num.size() > 18) continue;
      const std::uint64_t k = std::stoull(num);
      const std::string prefix = c.path.substr(0, c.path.size() - num.size() - 1);
      const auto it = last.find(prefix);
      if (it != last.end() && k > it->second.first + 1) {
        pruning_gap g;
        g.parent = &n;
        g.before = it->second.second;
        g.after = &c;
        g.prefix = prefix;
        g.first = it->second.first + 1;
        g.last = k - 1;
        out.push_back(std::move(g));
      }
      last[prefix] = {k, &c};
    }
    for (std::size_t i = n.children.size(); i-- > 0;) todo.push_back(&n.children[i]);
  }
  return out;
}

inline pruning_info pruning_of(const tree_file& f) {
  pruning_info p;
  p.flag = f.pruned_known ? (f.pruned ? 1 : 0) : -1;
  if (p.flag != 0) p.gaps = pruning_gaps(f.root);  // a file written without pruning has the model's own numbers
  return p;
}

// ---------------------------------------------------------------------------------------------------------
// The producer of a file's first NaN/Inf
// ---------------------------------------------------------------------------------------------------------

enum class origin_kind {
  none,          ///< no NaN/Inf in the file
  parameter,     ///< a parameter holds it
  own_code,      ///< made in the own code of `producer` (after `after`, or before `before`)
  left_out,      ///< made in layer blocks that pruning left out of the file (`pruned`), most likely
  model_inputs,  ///< the root's inputs hold it
};

struct origin {
  origin_kind kind = origin_kind::none;
  // where it shows: the recorder's detection when the file has one, else the first NaN/Inf in call order
  const tree_node* at = nullptr;
  std::string label;   ///< "outputs", "inputs.args[0]", "parameters.weight", ...
  char side = 'o';     ///< 'p' a parameter, 'i' an input, 'o' an output (or a checkpoint's tensor)
  std::string word;    ///< "NaN", "Inf" or "NaN/Inf"
  // where it was made
  const tree_node* producer = nullptr;  ///< the module whose code or parameter made it; null: not in the file
  std::string after, before;            ///< the producer's child it was made after / before (names)
  std::string checkpoint;               ///< found at this checkpoint of the producer
  std::string pruned;                   ///< the left-out blocks, for left_out
  std::vector<std::string> alternatives;  ///< other code that may have made it (named like `text`)
  std::string unrecorded;               ///< why it is inferred: the module whose outputs the file does not record
  bool recorded = false;          ///< the recorder's verdict (nanscope_detection / nanscope.detection)
  bool recorder_carried = false;  ///< the recorder said the value arrived already non-finite at `at`
  bool carried = false;           ///< `at` is an input: the value was made before that module ran
  std::string text;               ///< the producer, named: "TinyMLP.blocks.1, in its own code after TinyMLP.blocks.1.fc2"
  std::string module;             ///< the producer's module path ("" when it is not in the file or unknown)
  // the recorder's detection, when the file records one
  bool detection = false;
  const tree_node* det_at = nullptr;  ///< its node (null: not in the tree)
  std::string det_name;               ///< its node's name, or the root's module_path (and checkpoint)
  std::string det_label;              ///< its tensor: the slot's label, else the recorder's name
  std::string det_word;               ///< "NaN", "Inf", "NaN/Inf"
  int det_produced_here = -1;         ///< the recorder's verdict: 1 produced here, 0 arrived non-finite, -1 not said
  bool has_step = false;
  std::uint64_t step = 0;

  bool found() const { return kind != origin_kind::none; }
  /// text with what it rests on: "(the recorder's verdict)", "(inferred: ...; it may also be ...)".
  std::string full() const {
    std::string s = text;
    std::string why;
    if (recorded) why = "the recorder's verdict";
    if (!unrecorded.empty()) why = "inferred: the file does not record the outputs of " + unrecorded;
    if (recorder_carried) why += std::string(why.empty() ? "" : "; ") + "the recorder: it arrived already non-finite";
    if (!alternatives.empty()) {
      why += std::string(why.empty() ? "" : "; ") + "it may also be ";
      for (std::size_t i = 0; i < alternatives.size(); ++i) why += (i ? ", or " : "") + alternatives[i];
    }
    return why.empty() ? s : s + " (" + why + ")";
  }
  /// "produced in <full>", "carried from <full>", or for a parameter "a parameter: ..."
  std::string sentence() const {
    if (kind == origin_kind::parameter)
      return "a parameter holding " + word + ": " + text + " is the producer (it held " + word + " before the module ran)";
    if (kind == origin_kind::model_inputs) return "the model's inputs already hold it";
    return (carried ? "carried from " : "produced in ") + full();
  }
};

/// "X, in its own code after Y", "X, in its own code before Y", "X, in its own code"; with the checkpoint:
/// ", found at its checkpoint "t"". A checkpoint of X named as `after` reads "after its checkpoint "t"".
inline std::string own_code_text(const std::string& module, const tree_node* after, const tree_node* before,
                                 const std::string& checkpoint) {
  std::string s = module + ", in its own code";
  auto name = [&](const tree_node& n) {
    return n.is_checkpoint && n.path == module ? "its checkpoint \"" + n.checkpoint + "\"" : node_name(n);
  };
  if (after != nullptr) s += " after " + name(*after);
  else if (before != nullptr) s += " before " + name(*before);
  if (!checkpoint.empty()) s += ", found at its checkpoint \"" + checkpoint + "\"";
  return s;
}

/// Whether a node records outputs (a checkpoint's tensor counts).
inline bool records_outputs(const tree_node& n) {
  for (const slot& s : n.outputs)
    if (s.kind == slot_kind::tensor) return true;
  return false;
}

/// The code that ran inside `s` after its last recorded tensor when `s` records no outputs: `s`'s own code after
/// its last child, then that child's when it records none either, ... (outermost first). Empty when `s` records
/// its outputs.
inline std::vector<std::pair<const tree_node*, const tree_node*>> unrecorded_tail(const tree_node& s) {
  std::vector<std::pair<const tree_node*, const tree_node*>> chain;  // (module, after)
  const tree_node* x = &s;
  while (x != nullptr && !x->is_checkpoint && !records_outputs(*x)) {
    const tree_node* last = x->children.empty() ? nullptr : &x->children.back();
    chain.emplace_back(x, last);
    x = last;
  }
  return chain;
}

/// The slot of `n` the recorder's tensor name refers to: the exact label, "output" → outputs, "output[k]" →
/// outputs[k], "input[k]" → inputs.args[k], a name → inputs.kwargs.<name> or parameters.<name>; a checkpoint's
/// tensor; else the node's first slot holding NaN/Inf. Null when the node has none of them.
inline const slot* detection_slot(const tree_node& n, const std::string& tensor, bool use_counts, char& side) {
  auto find = [&](const std::string& label) -> const slot* {
    for (const slot& s : n.outputs)
      if (s.label == label) return side = 'o', &s;
    for (const slot& s : n.inputs)
      if (s.label == label) return side = 'i', &s;
    for (const slot& s : n.params)
      if (s.label == label) return side = 'p', &s;
    return nullptr;
  };
  if (const slot* s = find(tensor)) return s;
  if (n.is_checkpoint && !n.outputs.empty()) return side = 'o', &n.outputs.front();
  if (tensor == "output") {
    if (const slot* s = find("outputs")) return s;
  }
  if (tensor.compare(0, 7, "output[") == 0) {
    if (const slot* s = find("outputs" + tensor.substr(6))) return s;
  }
  if (tensor.compare(0, 6, "input[") == 0) {
    if (const slot* s = find("inputs.args" + tensor.substr(5))) return s;
  }
  if (const slot* s = find("inputs.kwargs." + tensor)) return s;
  if (const slot* s = find("parameters." + tensor)) return s;
  for (const auto& [list, sd] : {std::pair<const std::vector<slot>*, char>{&n.outputs, 'o'}, {&n.inputs, 'i'}, {&n.params, 'p'}})
    for (const slot& s : *list)
      if (s.kind == slot_kind::tensor && holds_nonfinite(s.tensor, use_counts)) return side = sd, &s;
  return nullptr;
}

namespace producer_detail {

/// The first NaN/Inf of a tree in call order, and the node carrying the recorder's detection.
struct scan_result {
  bool found = false;
  call_event event{nullptr, nullptr, 0, true};
  const slot* s = nullptr;
  char side = 'o';
  const tree_node* det = nullptr;         ///< the node with "nanscope_detection" (or named by nanscope.detection)
  const tree_node* det_parent = nullptr;
  std::size_t det_index = 0;
};

inline scan_result scan(const tree_file& f, bool use_counts) {
  scan_result r;
  const file_detection& fd = f.detection;
  const tree_node* named = nullptr;  // the first node nanscope.detection names, when no node carries the key
  const tree_node* named_parent = nullptr;
  std::size_t named_index = 0;
  walk_call_order(f.root, [&](const call_event& e) {
    const tree_node& n = *e.node;
    if (e.enter) {
      if (n.detection.present && r.det == nullptr) {
        r.det = &n;
        r.det_parent = e.parent;
        r.det_index = e.index;
      }
      if (fd.present && named == nullptr && n.path == fd.module_path && n.is_checkpoint == fd.has_checkpoint &&
          (!fd.has_checkpoint || n.checkpoint == fd.checkpoint)) {
        named = &n;
        named_parent = e.parent;
        named_index = e.index;
      }
    }
    if (!r.found) {
      auto check = [&](const std::vector<slot>& list, char side) {
        for (const slot& s : list)
          if (s.kind == slot_kind::tensor && holds_nonfinite(s.tensor, use_counts)) {
            r.found = true;
            r.event = e;
            r.s = &s;
            r.side = side;
            return true;
          }
        return false;
      };
      if (e.enter) {
        if (!check(n.params, 'p')) check(n.inputs, 'i');
      } else {
        check(n.outputs, 'o');
      }
    }
    return true;
  });
  if (r.det == nullptr && named != nullptr) {
    r.det = named;
    r.det_parent = named_parent;
    r.det_index = named_index;
  }
  return r;
}

inline void finish_text(origin& o) {
  switch (o.kind) {
    case origin_kind::none: o.text.clear(); break;
    case origin_kind::parameter: o.text = node_name(*o.producer) + " " + o.label; break;
    case origin_kind::own_code: break;  // set where it is decided
    case origin_kind::left_out: o.text = o.pruned + ", which pruning left out of the file"; break;
    case origin_kind::model_inputs: o.text = "the model's inputs (" + node_name(*o.at) + " " + o.label + ")"; break;
  }
}

/// The code that made a value first seen in the inputs of `n` (or in the checkpoint `n`): what ran since the
/// previous child of `parent`.
inline void between(origin& o, const tree_node& parent, std::size_t index, const tree_node& n, const pruning_info& pr) {
  const tree_node* prior = index > 0 ? &parent.children[index - 1] : nullptr;
  const std::string cp = n.is_checkpoint ? n.checkpoint : std::string();
  const std::string parent_code = own_code_text(parent.path, nullptr, n.is_checkpoint ? nullptr : &n, std::string());
  const auto tail = prior ? unrecorded_tail(*prior) : std::vector<std::pair<const tree_node*, const tree_node*>>{};
  if (const pruning_gap* g = prior ? pr.between(&parent, prior, &n) : nullptr) {
    o.kind = origin_kind::left_out;
    o.pruned = g->text();
    for (const auto& [m, after] : tail) o.alternatives.push_back(own_code_text(m->path, after, nullptr, std::string()));
    o.alternatives.push_back(parent_code);
    return;
  }
  o.kind = origin_kind::own_code;
  if (prior == nullptr || tail.empty()) {  // the parent's own code since it was entered / since `prior` returned
    o.producer = &parent;
    o.after = prior ? node_name(*prior) : std::string();
    o.before = prior || n.is_checkpoint ? std::string() : node_name(n);
    o.checkpoint = cp;
    o.text = own_code_text(parent.path, prior, prior || n.is_checkpoint ? nullptr : &n, cp);
    return;
  }
  // `prior` records no outputs (HuggingFace's format for modules with children): its own code after its last
  // child is the likeliest (a block's residual add, a cast), the code of the modules around it the alternatives
  o.producer = tail.front().first;
  o.after = tail.front().second ? node_name(*tail.front().second) : std::string();
  o.unrecorded = prior->path;
  o.text = own_code_text(prior->path, tail.front().second, nullptr, std::string());
  for (std::size_t i = 1; i < tail.size(); ++i)
    o.alternatives.push_back(own_code_text(tail[i].first->path, tail[i].second, nullptr, std::string()));
  if (!cp.empty()) {
    o.alternatives.push_back(own_code_text(parent.path, prior, nullptr, cp));
  } else {
    o.alternatives.push_back(parent_code);
  }
}

}  // namespace producer_detail

/// Where the first NaN/Inf of a file was made: the recorder's verdict when the file records a detection, else
/// inferred from the tree in call order (the file comment). `use_counts`: use nanscope's health counts.
inline origin find_origin(const tree_file& f, bool use_counts = true) {
  using namespace producer_detail;
  origin o;
  const scan_result sr = scan(f, use_counts);
  const pruning_info pr = pruning_of(f);
  if (sr.det != nullptr || f.detection.present) {
    o.detection = true;
    o.has_step = f.detection.present && f.detection.has_step;
    o.step = f.detection.step;
    o.det_at = sr.det;
    o.det_word = "NaN/Inf";
    const bool on_node = sr.det != nullptr && sr.det->detection.present;
    const bool known = on_node ? sr.det->detection.produced_known : f.detection.produced_known;
    const bool here = on_node ? sr.det->detection.produced_here : f.detection.produced_here;
    o.det_produced_here = known ? (here ? 1 : 0) : -1;
    if (sr.det != nullptr) {
      const tree_node& d = *sr.det;
      const std::string& tensor = d.detection.present ? d.detection.tensor : f.detection.tensor;
      char side = 'o';
      const slot* s = detection_slot(d, tensor, use_counts, side);
      o.det_name = node_name(d);
      o.det_label = s ? s->label : tensor;
      if (s && s->kind == slot_kind::tensor) o.det_word = nonfinite_word(s->tensor, use_counts);
      if (o.det_word == "NaN/Inf" && d.detection.present && d.detection.counts) {
        const bool nan = d.detection.nan > 0, inf = d.detection.pos_inf + d.detection.neg_inf > 0;
        o.det_word = nan && !inf ? "NaN" : inf && !nan ? "Inf" : "NaN/Inf";
      }
    } else {
      o.det_name = f.detection.module_path +
                   (f.detection.has_checkpoint ? " checkpoint \"" + f.detection.checkpoint + "\"" : std::string());
      o.det_label = f.detection.tensor;
    }
  }
  // the recorder's detection
  if (sr.det != nullptr) {
    const tree_node& d = *sr.det;
    const bool on_node = d.detection.present;
    const std::string& tensor = on_node ? d.detection.tensor : f.detection.tensor;
    const bool known = on_node ? d.detection.produced_known : f.detection.produced_known;
    const bool here = on_node ? d.detection.produced_here : f.detection.produced_here;
    const std::string& after = on_node ? d.detection.after : f.detection.after;
    char side = 'o';
    const slot* s = detection_slot(d, tensor, use_counts, side);
    if (known && here) {
      o.recorded = true;
      o.at = &d;
      o.side = side;
      o.label = s ? s->label : std::string(d.is_checkpoint ? "outputs" : tensor);
      o.word = s && s->kind == slot_kind::tensor ? nonfinite_word(s->tensor, use_counts) : std::string("NaN/Inf");
      if (o.word == "NaN/Inf" && on_node && d.detection.counts) {
        const bool nan = d.detection.nan > 0, inf = d.detection.pos_inf + d.detection.neg_inf > 0;
        o.word = nan && !inf ? "NaN" : inf && !nan ? "Inf" : "NaN/Inf";
      }
      if (side == 'p') {
        o.kind = origin_kind::parameter;
        o.producer = &d;
        o.module = d.path;
        finish_text(o);
        return o;
      }
      o.kind = origin_kind::own_code;
      const bool cp = d.is_checkpoint && sr.det_parent != nullptr;
      const tree_node& module = cp ? *sr.det_parent : d;
      o.producer = &module;
      o.module = module.path;
      o.after = after;
      o.checkpoint = d.is_checkpoint ? d.checkpoint : std::string();
      o.text = module.path + ", in its own code" + (after.empty() ? std::string() : " after " + after) +
               (o.checkpoint.empty() ? std::string() : ", found at its checkpoint \"" + o.checkpoint + "\"");
      return o;
    }
    if (known && !here) o.recorder_carried = true;
    if (!sr.found) {  // the recorder saw NaN/Inf arrive, the file shows none (a tree without counts or values)
      o.kind = origin_kind::own_code;
      o.at = &d;
      o.side = side;
      o.label = s ? s->label : tensor;
      o.word = "NaN/Inf";
      o.carried = true;
      o.text = "code outside the recorded modules, before " + node_name(d);
      return o;
    }
  }
  if (sr.det == nullptr && f.detection.present && f.detection.produced_known && f.detection.produced_here) {
    // the root names a detection whose node is not in the tree (left out by --prune-layers, say)
    o.kind = origin_kind::own_code;
    o.recorded = true;
    o.label = f.detection.tensor;
    o.word = "NaN/Inf";
    o.after = f.detection.after;
    o.checkpoint = f.detection.has_checkpoint ? f.detection.checkpoint : std::string();
    o.module = f.detection.module_path;
    o.text = f.detection.module_path + ", in its own code" + (o.after.empty() ? std::string() : " after " + o.after) +
             (o.checkpoint.empty() ? std::string() : ", found at its checkpoint \"" + o.checkpoint + "\"");
    return o;
  }
  if (!sr.found) return o;
  const call_event& e = sr.event;
  const tree_node& n = *e.node;
  o.at = &n;
  o.label = sr.s->label;
  o.side = sr.side;
  o.word = nonfinite_word(sr.s->tensor, use_counts);
  if (sr.side == 'p') {
    o.kind = origin_kind::parameter;
    o.producer = &n;
    if (sr.det == &n) o.recorder_carried = false;  // the recorder counts parameters among a frame's inputs
  } else if (sr.side == 'o' && n.is_checkpoint && e.parent != nullptr) {
    between(o, *e.parent, e.index, n, pr);  // made in the module's own code before its checkpoint
  } else if (sr.side == 'o') {
    o.kind = origin_kind::own_code;
    o.producer = &n;
    const tree_node* last = n.children.empty() ? nullptr : &n.children.back();
    o.after = last ? node_name(*last) : std::string();
    o.text = own_code_text(n.path, last, nullptr, std::string());
    if (last != nullptr) {
      const auto tail = unrecorded_tail(*last);
      for (const auto& [m, after] : tail) o.alternatives.push_back(own_code_text(m->path, after, nullptr, std::string()));
    }
  } else if (e.parent == nullptr) {
    o.kind = origin_kind::model_inputs;
    o.carried = true;
  } else {
    o.carried = true;
    between(o, *e.parent, e.index, n, pr);
  }
  finish_text(o);
  if (o.producer != nullptr) o.module = o.producer->path;
  return o;
}

/// "Inf at TinyMLP.blocks.1 outputs, step 3: produced in TinyMLP.blocks.1, in its own code after ... (the
/// recorder's verdict)": what a file's recorded detection says (empty when it records none).
inline std::string detection_text(const origin& o) {
  if (!o.detection) return std::string();
  std::string s = o.det_word + " at " + o.det_name + (o.det_label.empty() ? "" : " " + o.det_label);
  if (o.has_step) s += ", step " + std::to_string(o.step);
  if (o.det_at == nullptr) s += " (its module is not in the tree)";
  return s + ": " + (o.found() ? o.sentence() : std::string("no NaN/Inf in the file"));
}

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_PRODUCER_HPP
