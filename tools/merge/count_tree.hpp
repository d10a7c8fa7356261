// nanscope-merge: persistent trees of per-rank counts with their sum, shared between versions and joined by pointwise maximum, to count the carriers that happen before each carrier.
#ifndef NANSCOPE_TOOLS_MERGE_COUNT_TREE_HPP
#define NANSCOPE_TOOLS_MERGE_COUNT_TREE_HPP

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>
#include <vector>

namespace nanscope_merge {
namespace detail {

/// Trees over `leaves` counters (a complete binary tree of height ceil(log2(leaves))), each node holding the
/// sum of its leaves. A tree is never changed: raise() and join() return new trees that share every subtree
/// they leave alone, so that a value per graph node costs only the paths where it differs from its inputs.
/// Tree 0 is all zeros.
class count_forest {
 public:
  using tree = std::uint32_t;

  explicit count_forest(std::uint32_t leaves) {
    while ((std::uint64_t{1} << height_) < leaves) ++height_;
    nodes_.push_back(node{0, 0, 0});
  }

  std::uint64_t sum(tree t) const { return nodes_[t].sum; }
  std::uint64_t leaf(tree t, std::uint32_t i) const {
    for (unsigned h = height_; h > 0; --h) t = ((i >> (h - 1)) & 1U) != 0 ? nodes_[t].right : nodes_[t].left;
    return nodes_[t].sum;
  }
  std::size_t size() const { return nodes_.size(); }

  /// t with leaf i raised to at least v.
  tree raise(tree t, std::uint32_t i, std::uint64_t v) { return raise_at(t, i, v, height_); }

  /// The pointwise maximum of the trees in [first, last). Costs about the number of nodes where the inputs
  /// differ: trees that share a subtree are joined there at once.
  tree join(const tree* first, const tree* last) {
    if (last - first == 1) return *first;
    work_.assign(first, last);
    return join_at(0, height_);
  }

 private:
  struct node {
    tree left, right;
    std::uint64_t sum;
  };

  tree make(tree l, tree r, std::uint64_t sum) {
    if (nodes_.size() >= std::numeric_limits<tree>::max()) throw std::bad_alloc();
    nodes_.push_back(node{l, r, sum});
    return static_cast<tree>(nodes_.size() - 1);
  }

  tree raise_at(tree t, std::uint32_t i, std::uint64_t v, unsigned h) {
    if (h == 0) return nodes_[t].sum >= v ? t : make(0, 0, v);
    const node n = nodes_[t];
    const bool right = ((i >> (h - 1)) & 1U) != 0;
    const tree child = right ? n.right : n.left;
    const tree c = raise_at(child, i, v, h - 1);
    if (c == child) return t;
    const tree l = right ? n.left : c;
    const tree r = right ? c : n.right;
    return make(l, r, nodes_[l].sum + nodes_[r].sum);
  }

  // Joins work_[from, end) (trees of height h) and shrinks work_ back to `from`.
  tree join_at(std::size_t from, unsigned h) {
    // distinct non-empty inputs only
    if (mark_.size() < nodes_.size()) mark_.resize(nodes_.size() + nodes_.size() / 2 + 16, 0);
    if (++epoch_ == 0) {
      std::fill(mark_.begin(), mark_.end(), 0U);
      epoch_ = 1;
    }
    std::size_t w = from;
    for (std::size_t i = from; i < work_.size(); ++i) {
      const tree t = work_[i];
      if (t == 0 || mark_[t] == epoch_) continue;
      mark_[t] = epoch_;
      work_[w++] = t;
    }
    work_.resize(w);
    if (w == from) return 0;
    if (w == from + 1) {
      const tree t = work_[from];
      work_.resize(from);
      return t;
    }
    if (h == 0) {
      tree best = work_[from];
      for (std::size_t i = from + 1; i < w; ++i)
        if (nodes_[work_[i]].sum > nodes_[best].sum) best = work_[i];
      work_.resize(from);
      return best;
    }
    for (std::size_t i = from; i < w; ++i) work_.push_back(nodes_[work_[i]].left);
    const tree l = join_at(w, h - 1);
    for (std::size_t i = from; i < w; ++i) work_.push_back(nodes_[work_[i]].right);
    const tree r = join_at(w, h - 1);
    tree same = 0;
    for (std::size_t i = from; i < w && same == 0; ++i)
      if (nodes_[work_[i]].left == l && nodes_[work_[i]].right == r) same = work_[i];
    work_.resize(from);
    return same != 0 ? same : make(l, r, nodes_[l].sum + nodes_[r].sum);
  }

  unsigned height_ = 0;
  std::vector<node> nodes_;
  std::vector<tree> work_;
  std::vector<std::uint32_t> mark_;
  std::uint32_t epoch_ = 0;
};

}  // namespace detail
}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_COUNT_TREE_HPP
