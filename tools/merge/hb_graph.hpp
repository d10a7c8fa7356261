// nanscope-merge: a directed graph in adjacency arrays with its strongly connected components, numbered so that every edge between two components goes from a higher number to a lower one.
#ifndef NANSCOPE_TOOLS_MERGE_HB_GRAPH_HPP
#define NANSCOPE_TOOLS_MERGE_HB_GRAPH_HPP

#include <cstdint>
#include <limits>
#include <new>
#include <utility>
#include <vector>

namespace nanscope_merge {
namespace detail {

/// The happens-before graph: add the edges, then finish(). Marks that disagree between ranks (collectives on
/// two communicators called in opposite orders, a recv marked before the send it waits for on both sides) make
/// cycles; every node of a cycle happens before every other, so the graph is condensed into its strongly
/// connected components (Tarjan's algorithm, without recursion). Components come out numbered in reverse
/// topological order: an edge from component a to component b != a has a > b, so a sweep from the highest
/// number down sees every component after all the components that happen before it.
class hb_graph {
 public:
  using node_id = std::uint32_t;
  static constexpr node_id none = std::numeric_limits<node_id>::max();

  explicit hb_graph(std::size_t nodes) {
    if (nodes >= none) throw std::bad_alloc();
    n_ = static_cast<node_id>(nodes);
  }
  node_id size() const { return n_; }
  void reserve(std::size_t edges) { edges_.reserve(edges); }
  void edge(node_id from, node_id to) { edges_.emplace_back(from, to); }

  /// Builds the adjacency arrays and the components.
  void finish() {
    build(succ_begin_, succ_, false);
    build(pred_begin_, pred_, true);
    std::vector<std::pair<node_id, node_id>>().swap(edges_);
    components();
  }

  // predecessors of v: pred_[pred_begin_[v] .. pred_begin_[v + 1])
  const node_id* preds_begin(node_id v) const { return pred_.data() + pred_begin_[v]; }
  const node_id* preds_end(node_id v) const { return pred_.data() + pred_begin_[v + 1]; }

  node_id component_count() const { return static_cast<node_id>(comp_begin_.size() - 1); }
  node_id component_of(node_id v) const { return comp_[v]; }
  const node_id* component_begin(node_id c) const { return comp_nodes_.data() + comp_begin_[c]; }
  const node_id* component_end(node_id c) const { return comp_nodes_.data() + comp_begin_[c + 1]; }

 private:
  void build(std::vector<std::size_t>& begin, std::vector<node_id>& to, bool reverse) const {
    begin.assign(static_cast<std::size_t>(n_) + 1, 0);
    for (const auto& e : edges_) ++begin[(reverse ? e.second : e.first) + 1];
    for (std::size_t i = 0; i < n_; ++i) begin[i + 1] += begin[i];
    to.resize(edges_.size());
    std::vector<std::size_t> at(begin.begin(), begin.end() - 1);
    for (const auto& e : edges_) to[at[reverse ? e.second : e.first]++] = reverse ? e.first : e.second;
  }

  void components() {
    // index_[v]: discovery number (none: not yet seen); low_[v]: the lowest discovery number reachable through
    // the DFS subtree and one back edge; comp_[v]: the component, none while v is on Tarjan's stack.
    std::vector<node_id> index(n_, none), low(n_, 0);
    comp_.assign(n_, none);
    comp_nodes_.clear();
    comp_nodes_.reserve(n_);
    comp_begin_.assign(1, 0);
    std::vector<node_id> stack;                        // Tarjan's stack of open nodes
    std::vector<std::pair<node_id, std::size_t>> dfs;  // (node, next successor position)
    node_id next = 0;
    for (node_id root = 0; root < n_; ++root) {
      if (index[root] != none) continue;
      index[root] = low[root] = next++;
      stack.push_back(root);
      dfs.emplace_back(root, succ_begin_[root]);
      while (!dfs.empty()) {
        const node_id v = dfs.back().first;
        std::size_t& i = dfs.back().second;
        if (i < succ_begin_[v + 1]) {
          const node_id w = succ_[i++];
          if (index[w] == none) {
            index[w] = low[w] = next++;
            stack.push_back(w);
            dfs.emplace_back(w, succ_begin_[w]);
          } else if (comp_[w] == none && index[w] < low[v]) {
            low[v] = index[w];
          }
          continue;
        }
        dfs.pop_back();
        if (!dfs.empty() && low[v] < low[dfs.back().first]) low[dfs.back().first] = low[v];
        if (low[v] != index[v]) continue;
        const auto c = static_cast<node_id>(comp_begin_.size() - 1);
        node_id w;
        do {
          w = stack.back();
          stack.pop_back();
          comp_[w] = c;
          comp_nodes_.push_back(w);
        } while (w != v);
        comp_begin_.push_back(comp_nodes_.size());
      }
    }
  }

  node_id n_ = 0;
  std::vector<std::pair<node_id, node_id>> edges_;
  std::vector<std::size_t> succ_begin_, pred_begin_;
  std::vector<node_id> succ_, pred_;
  std::vector<node_id> comp_, comp_nodes_;
  std::vector<std::size_t> comp_begin_;
};

}  // namespace detail
}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_HB_GRAPH_HPP
