// nanscope-merge: the happens-before graph of the evidence (a collective instance is one node) and the one sweep over it that tells, for every producing site, whether another one happens before it and, for every carrier, how many carriers happen before it.
#ifndef NANSCOPE_TOOLS_MERGE_HB_SWEEP_HPP
#define NANSCOPE_TOOLS_MERGE_HB_SWEEP_HPP

#include "count_tree.hpp"
#include "evidence.hpp"
#include "evidence_index.hpp"
#include "hb_graph.hpp"

#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

namespace nanscope_merge {
namespace detail {

/// The model (docs/multi-rank.md): every event has an "in" node (its inputs as they were) and an "out" node (its
/// outputs); program order links out(e) to in(next e) on a rank, a frame or send links its in to its out, a
/// recv's out depends on its in and on the in of the send it pairs with, and one collective instance is one node
/// that every member's in leads to and that leads to every member's out (N edges, not N^2). Frames other than a
/// rank's first non-finite event only pass program order on, so they are left out of the graph.
///
/// "a happens before b" is a path from a's node to b's. Two questions need it:
///  - which producing sites have another producing site before them: every node gets the set of producing sites
///    that reach it, capped at two (a site is preceded by another exactly when two reach its own node);
///  - for each carrier, how many carriers happen before it: the carriers before a node are, on each rank, a
///    prefix of that rank's carriers in program order, so the count is a vector of per-rank prefix lengths (a
///    vector clock restricted to carriers) whose sum is the answer. It is kept as a count_forest tree per node:
///    a node's tree is the pointwise maximum of its predecessors' (a multi-way join that shares what they
///    share), raised at the carriers it holds.
/// Both are computed in one sweep over the strongly connected components in topological order.
class hb_sweep {
 public:
  using member = evidence_index::member;
  static constexpr std::uint32_t none = evidence_index::none;
  /// A producing site: an event's "in" node (side 0) or "out" node (side 1).
  struct site_node {
    member at;
    int side;
  };

  /// `sites`: at most one per file; `carriers`: the transfer event whose out node stands for each carrier.
  hb_sweep(const std::vector<rank_file>& files, const evidence_index& index, const std::vector<site_node>& sites,
           const std::vector<member>& carriers)
      : files_(files), idx_(index) {
    run(sites, carriers);
  }

  /// Per site: another site happens before it.
  const std::vector<char>& preceded() const { return preceded_; }
  /// Per carrier: how many other carriers happen before it.
  const std::vector<std::uint64_t>& carriers_before() const { return carriers_before_; }

 private:
  void run(const std::vector<site_node>& sites, const std::vector<member>& carriers) {
    // the events in the graph: transfers and the sites' events
    std::vector<std::size_t> base(files_.size() + 1, 0);
    for (std::size_t fi = 0; fi < files_.size(); ++fi) base[fi + 1] = base[fi] + files_[fi].events.size();
    std::vector<std::uint32_t> kept(base.back(), none);
    for (const auto& s : sites) kept[base[s.at.file] + s.at.ev] = 0;
    std::vector<member> kept_events;
    std::size_t transfers = 0;
    for (const auto& f : files_)
      for (const auto& e : f.events) transfers += e.is_transfer();
    kept_events.reserve(transfers + sites.size());
    for (std::uint32_t fi = 0; fi < files_.size(); ++fi) {
      const auto& evs = files_[fi].events;
      for (std::uint32_t ei = 0; ei < evs.size(); ++ei) {
        if (!evs[ei].is_transfer() && kept[base[fi] + ei] == none) continue;
        if (kept_events.size() >= none / 2) throw std::bad_alloc();
        kept[base[fi] + ei] = static_cast<std::uint32_t>(kept_events.size());
        kept_events.push_back(member{fi, ei});
      }
    }
    const auto k_of = [&](const member& m) { return kept[base[m.file] + m.ev]; };
    const std::size_t n_kept = kept_events.size();
    const auto& groups = idx_.groups();
    hb_graph g(2 * n_kept + groups.size());
    std::size_t collective_records = 0;
    for (const auto& gr : groups) collective_records += gr.members.size();
    g.reserve(2 * n_kept + 2 * collective_records + idx_.matches().size());
    for (std::size_t k = 0; k < n_kept; ++k) {
      const auto in = static_cast<hb_graph::node_id>(2 * k);
      if (ev(kept_events[k]).type != ev_type::collective) g.edge(in, in + 1);
      if (k > 0 && kept_events[k - 1].file == kept_events[k].file) g.edge(in - 1, in);  // out(previous) -> in
    }
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const auto x = static_cast<hb_graph::node_id>(2 * n_kept + gi);
      for (const member& m : groups[gi].members) {
        g.edge(2 * k_of(m), x);
        g.edge(x, 2 * k_of(m) + 1);
      }
    }
    for (const auto& m : idx_.matches()) g.edge(2 * k_of(m.send), 2 * k_of(m.recv) + 1);
    g.finish();

    // producing sites and carriers on their nodes
    std::vector<std::uint32_t> source_at(g.size(), none), carrier_at(g.size(), none);
    for (std::uint32_t i = 0; i < sites.size(); ++i)
      source_at[2 * k_of(sites[i].at) + static_cast<std::uint32_t>(sites[i].side)] = i;
    // each carrier's leaf (its rank among the ranks holding carriers) and its place in its rank's carriers
    std::vector<std::uint32_t> leaf(carriers.size()), place(carriers.size());
    std::uint32_t leaves = 0;
    {
      std::vector<std::uint32_t> by_position(carriers.size());
      for (std::uint32_t j = 0; j < carriers.size(); ++j) by_position[j] = j;
      std::sort(by_position.begin(), by_position.end(), [&](std::uint32_t a, std::uint32_t b) {
        const member& x = carriers[a];
        const member& y = carriers[b];
        return x.file != y.file ? x.file < y.file : x.ev < y.ev;
      });
      std::uint32_t count = 0;
      for (std::size_t i = 0; i < by_position.size(); ++i) {
        const std::uint32_t j = by_position[i];
        if (i == 0 || carriers[by_position[i - 1]].file != carriers[j].file) {
          ++leaves;
          count = 0;
        }
        leaf[j] = leaves - 1;
        place[j] = ++count;
        carrier_at[2 * k_of(carriers[j]) + 1] = j;
      }
    }

    // the sweep, in topological order of the components
    const hb_graph::node_id comps = g.component_count();
    std::vector<std::uint32_t> first_source(comps, none), second_source(comps, none);
    std::vector<count_forest::tree> before(comps, 0);
    count_forest forest(leaves);
    std::vector<count_forest::tree> inputs;
    for (hb_graph::node_id c = comps; c-- > 0;) {
      std::uint32_t a = none, b = none;
      const auto add = [&](std::uint32_t s) {
        if (s == none || s == a || s == b) return;
        if (a == none) {
          a = s;
        } else if (b == none) {
          b = s;
        }
      };
      inputs.clear();
      for (const hb_graph::node_id* v = g.component_begin(c); v != g.component_end(c); ++v) {
        for (const hb_graph::node_id* u = g.preds_begin(*v); u != g.preds_end(*v); ++u) {
          const hb_graph::node_id cu = g.component_of(*u);
          if (cu == c) continue;
          add(first_source[cu]);
          add(second_source[cu]);
          if (before[cu] != 0) inputs.push_back(before[cu]);
        }
      }
      count_forest::tree t = inputs.empty() ? 0 : forest.join(inputs.data(), inputs.data() + inputs.size());
      for (const hb_graph::node_id* v = g.component_begin(c); v != g.component_end(c); ++v) {
        add(source_at[*v]);
        const std::uint32_t j = carrier_at[*v];
        if (j != none) t = forest.raise(t, leaf[j], place[j]);
      }
      first_source[c] = a;
      second_source[c] = b;
      before[c] = t;
    }
    preceded_.assign(sites.size(), 0);
    for (std::uint32_t i = 0; i < sites.size(); ++i) {
      const auto v = 2 * k_of(sites[i].at) + static_cast<std::uint32_t>(sites[i].side);
      preceded_[i] = second_source[g.component_of(v)] != none;
    }
    carriers_before_.assign(carriers.size(), 0);
    for (std::uint32_t j = 0; j < carriers.size(); ++j)
      carriers_before_[j] = forest.sum(before[g.component_of(2 * k_of(carriers[j]) + 1)]) - 1;
  }

  const event& ev(const member& m) const { return files_[m.file].events[m.ev]; }

  const std::vector<rank_file>& files_;
  const evidence_index& idx_;
  std::vector<char> preceded_;
  std::vector<std::uint64_t> carriers_before_;
};

}  // namespace detail
}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_HB_SWEEP_HPP
