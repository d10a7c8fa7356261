// nanscope-diff — nesting.hpp: how deep a layer-tree document may nest, checked while it is parsed (before the
// depth costs memory or stack). Two bounds: the modules of the tree (nanscope::max_tree_depth, shared with the
// tree writer: a deeper tree is refused with nanscope::tree_depth_error()'s text) and the JSON containers one
// inside the other (max_nesting, what the deepest tree the writer can write needs).
#ifndef NANSCOPE_DIFF_NESTING_HPP
#define NANSCOPE_DIFF_NESTING_HPP

#include <nanscope/tree_limits.hpp>
#include <nanscope/view.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace nsdiff {

/// The most modules a tree nests, root included (the tree writer's limit).
inline constexpr std::size_t max_module_depth = nanscope::max_tree_depth;

/// The most JSON containers (objects and arrays) one inside the other that a layer-tree document may have: what
/// the deepest tree the writer can write needs. Module m (the root is 1) is an object inside 2(m - 1) containers:
/// each module above it adds its object and that object's "children" array. Within a node the deepest of the
/// writer's values is an input tensor of FULL_TENSORS in the numeric style: "inputs" {, "args" [ (or "kwargs" {),
/// the tensor {, then its "value" as one array per dimension, nanscope::max_rank of them at most. ("outputs" [,
/// "parameters" {, "nanscope_warnings" [, "health" {, a numeric "shape" [ and the root's "nanscope" { "warnings" [
/// { are shallower.) So the deepest container of a tree at the limit is number
///   2 (max_tree_depth - 1) + 1 + 3 + max_rank = 2010,
/// counting the root object as 1. HuggingFace's files (value as lines of text) nest less at the same depth.
inline constexpr std::size_t max_nesting =
    2 * (max_module_depth - 1) + 1 + 3 + static_cast<std::size_t>(nanscope::max_rank);
static_assert(max_nesting == 2010, "docs/diff.md and docs/report.md state the JSON nesting limit");

/// "nested more than 2010 levels deep": JSON deeper than any tree the writer can write (a tree whose modules are
/// too deep is refused earlier, with nanscope::tree_depth_error()).
inline std::string json_depth_error() {
  return "nested more than " + std::to_string(max_nesting) + " levels deep";
}

/// Follows the containers of a JSON document as a parser opens and closes them, and says when the document nests
/// too deeply: more modules than max_module_depth (an object in a node's "children" array is a node, the top-level
/// object is the root), or more containers than max_nesting. Memory: one byte per open container.
class nesting_tracker {
 public:
  /// A container opens (`object`: an object, else an array). Returns an empty string, or why the document is
  /// refused (the parse must stop: the tracker is then out of step).
  std::string open(bool object) {
    kind k = kind::other;
    if (open_.empty()) k = object ? kind::node : kind::other;
    else if (object && open_.back() == kind::children) k = kind::node;
    else if (!object && open_.back() == kind::node && children_key_) k = kind::children;
    children_key_ = false;
    if (k == kind::node && ++modules_ > max_module_depth) return nanscope::tree_depth_error();
    if (open_.size() >= max_nesting) return json_depth_error();
    open_.push_back(k);
    return std::string();
  }
  /// The innermost open container closes.
  void close() {
    if (open_.empty()) return;
    if (open_.back() == kind::node) --modules_;
    open_.pop_back();
  }
  /// An object key: the value after it is a node's children when the key is "children".
  void key(const std::string& k) { children_key_ = k == "children"; }
  /// A value that is not a container.
  void scalar() { children_key_ = false; }

 private:
  enum class kind : unsigned char { node, children, other };
  std::vector<kind> open_;
  std::size_t modules_ = 0;
  bool children_key_ = false;
};

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_NESTING_HPP
