// nanscope-merge: the analysis over loaded rank files: each rank's first non-finite event and its kind, the producing sites that no other one happens before, and the carriers in happens-before order, all from one sweep over the condensed happens-before graph.
#ifndef NANSCOPE_TOOLS_MERGE_ANALYSIS_HPP
#define NANSCOPE_TOOLS_MERGE_ANALYSIS_HPP

#include "evidence.hpp"
#include "evidence_index.hpp"
#include "hb_sweep.hpp"
#include "report.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nanscope_merge {
namespace detail {

/// The analysis (docs/multi-rank.md): each rank's first non-finite event and its kind (produced, input,
/// before_transfer, received, reduction), the producing sites and whether another one happens before each, the
/// carriers in happens-before order (hb_sweep answers both questions in one pass), and the verdict.
class analysis {
 public:
  explicit analysis(const std::vector<rank_file>& files) : files_(files) {}

  result run() {
    result r;
    if (files_.empty()) {
      r.exit = incomplete;
      r.verdict = "incomplete";
      r.notes.push_back("no rank evidence files: ranks write theirs at a detection, at an all-stop, or at exit "
                        "when asked (rank_evidence_options::write_at_exit)");
      return r;
    }
    const evidence_index index(files_, r);
    idx_ = &index;
    find_firsts(r);
    classify_received(r);
    collect_carriers();
    order_by_happens_before();
    assemble(r);
    return r;
  }

 private:
  using member = evidence_index::member;

  struct first_bad {
    std::uint32_t fi, ei;
    int side;  // 0: its in node, 1: its out node
    std::string kind;
  };
  struct carrier_acc {
    carrier c;
    member rep;  // whose out node stands for the carrier in happens-before order
  };

  const event& ev(const member& m) const { return files_[m.file].events[m.ev]; }

  void find_firsts(result& r) {
    for (std::uint32_t fi = 0; fi < files_.size(); ++fi) {
      const auto& evs = files_[fi].events;
      for (std::uint32_t ei = 0; ei < evs.size(); ++ei) {
        const event& e = evs[ei];
        std::string kind;
        int side = 0;
        if (e.in_bad) {
          kind = e.type == ev_type::frame ? "input" : "before_transfer";
        } else if (e.out_bad) {
          side = 1;
          kind = e.is_transfer() ? "received" : "produced";
        }
        if (kind.empty()) continue;
        any_bad_ = true;
        firsts_.push_back({fi, ei, side, std::move(kind)});
        if (ei == 0 && files_[fi].dropped > 0)
          incomplete_ = note(r, "rank " + std::to_string(files_[fi].rank) + ": the first event kept in its ring is "
                                "already non-finite and " + std::to_string(files_[fi].dropped) +
                                " older events were dropped (raise rank_evidence_options::max_events)");
        break;
      }
    }
  }

  // "received" through a collective whose every input is known and finite: the reduction made it.
  void classify_received(result& r) {
    struct group_info {
      bool source = false;
      std::vector<int> unknown;
    };
    std::unordered_map<const evidence_index::group*, group_info> seen;
    std::vector<std::uint32_t> stamp;
    std::uint32_t next_stamp = 0;
    for (auto& fb : firsts_) {
      if (fb.kind != "received") continue;
      const rank_file& f = files_[fb.fi];
      const event& e = f.events[fb.ei];
      group_info info;
      if (e.type == ev_type::collective) {
        const evidence_index::group& g = idx_->group_of(fb.fi, e);
        const auto it = seen.find(&g);
        if (it != seen.end()) {
          info = it->second;
        } else {
          // the members' (world) ranks with a record of it, and the communicator's ranks without one
          if (stamp.empty()) stamp.assign(files_[0].world_size > 0 ? static_cast<std::size_t>(files_[0].world_size) : 0, 0);
          ++next_stamp;
          for (const member& m : g.members) {
            stamp[static_cast<std::size_t>(files_[m.file].rank)] = next_stamp;
            if (ev(m).in_bad) info.source = true;
          }
          for (int c = 0; c < e.comm_size; ++c) {
            const int w = f.world_of(e, c);
            if (stamp[static_cast<std::size_t>(w)] != next_stamp) info.unknown.push_back(w);
          }
          seen.emplace(&g, info);
        }
      } else {
        const member* s = idx_->send_of(fb.fi, fb.ei);
        if (s == nullptr) {
          info.unknown.push_back(f.world_of(e, e.peer));
        } else if (ev(*s).in_bad) {
          info.source = true;
        }
      }
      const std::string& kind = f.name(e.kind);
      if (!info.source && info.unknown.empty() && e.type == ev_type::collective && kind != "broadcast" && kind != "scatter") {
        fb.kind = "reduction";
      } else if (!info.source && !info.unknown.empty()) {
        incomplete_ = note(r, "rank " + std::to_string(f.rank) + " received a non-finite value through " +
                              transfer_name(f, e) + " at step " + std::to_string(e.step) + "; no record of it from " +
                              ranks_text(info.unknown) + " (file missing or written before that call)");
      } else if (!info.source) {
        incomplete_ = note(r, "rank " + std::to_string(f.rank) + " received a non-finite value through " +
                              transfer_name(f, e) + " but no sender's input was non-finite (an unmarked transfer?)");
      }
    }
  }

  // The transfers that carried a non-finite value: collectives in (communicator name, seq) order, then
  // send/recv pairs in the recv's (file, event) order. The happens-before order is applied later.
  void collect_carriers() {
    std::vector<std::pair<const evidence_index::group*, carrier_acc>> colls;
    for (const auto& g : idx_->groups()) {
      carrier_acc a;
      bool carried = false;
      for (const member& m : g.members) {
        const event& e = ev(m);
        const int rk = files_[m.file].rank;
        if (e.in_bad) a.c.from.push_back(rk);
        if (e.out_bad && !e.in_bad) {
          a.c.to.push_back(rk);
          if (!carried) a.rep = m;
          carried = true;
        }
        if (a.c.site.empty()) a.c.site = files_[m.file].name(e.site);
      }
      if (!carried) continue;
      const member& last = g.members.back();
      const event& le = ev(last);
      a.c.type = "collective";
      a.c.kind = files_[last.file].name(le.kind);
      a.c.comm = files_[last.file].name(le.comm);
      a.c.seq = le.seq;
      a.c.step = le.step;
      a.c.all_members = static_cast<int>(g.members.size()) >= ev(g.members[0]).comm_size;
      std::sort(a.c.from.begin(), a.c.from.end());
      std::sort(a.c.to.begin(), a.c.to.end());
      colls.emplace_back(&g, std::move(a));
    }
    std::sort(colls.begin(), colls.end(), [this](const auto& x, const auto& y) {
      const std::string& cx = idx_->name(x.first->comm);
      const std::string& cy = idx_->name(y.first->comm);
      return cx != cy ? cx < cy : x.first->seq < y.first->seq;
    });
    for (auto& c : colls) carriers_.push_back(std::move(c.second));
    for (const auto& m : idx_->matches()) {
      const event& rv = ev(m.recv);
      const event& sd = ev(m.send);
      if (!rv.out_bad || !sd.in_bad) continue;
      carrier_acc a;
      a.c.type = "send/recv";
      a.c.kind = "send/recv";
      a.c.comm = files_[m.recv.file].name(rv.comm);
      a.c.seq = rv.seq;
      a.c.tag = rv.tag;
      a.c.step = rv.step;
      a.c.site = files_[m.send.file].name(sd.site);
      a.c.from.push_back(files_[m.send.file].rank);
      a.c.to.push_back(files_[m.recv.file].rank);
      a.rep = m.recv;
      carriers_.push_back(std::move(a));
    }
  }

  void order_by_happens_before() {
    std::vector<hb_sweep::site_node> sites;
    std::vector<std::size_t> site_of;  // firsts_ index of each site
    for (std::size_t i = 0; i < firsts_.size(); ++i)
      if (firsts_[i].kind != "received") {
        sites.push_back(hb_sweep::site_node{member{firsts_[i].fi, firsts_[i].ei}, firsts_[i].side});
        site_of.push_back(i);
      }
    std::vector<member> reps;
    for (const auto& c : carriers_) reps.push_back(c.rep);
    const hb_sweep sweep(files_, *idx_, sites, reps);
    preceded_.assign(firsts_.size(), 0);
    for (std::size_t k = 0; k < sites.size(); ++k) preceded_[site_of[k]] = sweep.preceded()[k];
    carriers_before_ = sweep.carriers_before();
  }

  site make_site(std::size_t fi, std::size_t ei, const std::string& kind) const {
    const rank_file& f = files_[fi];
    const event& e = f.events[ei];
    site s;
    s.rank = f.rank;
    s.step = e.step;
    s.order = e.order;
    s.kind = kind;
    if (e.is_transfer()) {
      s.module_path = f.name(e.site);
      s.tensor = (kind == "received" || kind == "reduction" ? "output of " : "input of ") + transfer_name(f, e);
    } else {
      s.module_path = f.name(e.module_path);
      s.cls = f.name(e.cls);
      s.tensor = f.name(kind == "input" ? e.bad_in_context : e.bad_other_context);
    }
    std::string where = "rank " + std::to_string(s.rank) + ", step " + std::to_string(s.step) + ", " +
                        (s.module_path.empty() ? std::string("<root>") : s.module_path) +
                        (s.cls.empty() ? "" : " (" + s.cls + ")") + ", tensor " + s.tensor;
    if (kind == "produced") where += ": inputs finite, output non-finite";
    if (kind == "input") where += ": arrived as an input with no earlier non-finite value on this rank (the rank's data)";
    if (kind == "before_transfer")
      where += ": already non-finite when handed to the transfer, with no earlier marked evidence on this rank "
               "(made by unmarked code since the previous record)";
    if (kind == "reduction") where += ": every rank's input was finite, the result is not (the reduction overflowed)";
    s.text = where;
    return s;
  }

  void assemble(result& r) {
    for (std::size_t i = 0; i < firsts_.size(); ++i) {
      if (firsts_[i].kind == "received") {
        r.receivers.push_back(files_[firsts_[i].fi].rank);
        continue;
      }
      site s = make_site(firsts_[i].fi, firsts_[i].ei, firsts_[i].kind);
      (preceded_[i] ? r.later_producers : r.origins).push_back(std::move(s));
    }
    std::sort(r.receivers.begin(), r.receivers.end());
    auto by_rank = [](const site& a, const site& b) { return a.rank < b.rank; };
    std::sort(r.origins.begin(), r.origins.end(), by_rank);
    std::sort(r.later_producers.begin(), r.later_producers.end(), by_rank);
    // happens-before order: a carrier with fewer carriers before it comes first, within a step
    std::vector<std::size_t> order(carriers_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return std::make_tuple(carriers_[a].c.step, carriers_before_[a]) <
             std::make_tuple(carriers_[b].c.step, carriers_before_[b]);
    });
    for (std::size_t i : order) {
      carrier c = std::move(carriers_[i].c);
      std::string what = c.type == "collective" ? c.kind + " #" + std::to_string(c.seq) + " on '" + c.comm + "'"
                                                : "send/recv on '" + c.comm + "' (tag " + std::to_string(c.tag) +
                                                      ", pair #" + std::to_string(c.seq) + ")";
      c.text = "step " + std::to_string(c.step) + ": " + what + (c.site.empty() ? "" : " at " + c.site) +
               (!c.from.empty()   ? " carried it from " + ranks_text(c.from) + " to "
                : c.all_members ? std::string(" made it (every input finite) on ")
                                : std::string(" carried it from a rank without a record of it to ")) +
               ranks_text(c.to);
      r.chain.push_back(std::move(c));
    }
    r.local_only = !r.origins.empty() && r.chain.empty();

    if (!any_bad_) {
      r.exit = r.missing.empty() && !incomplete_ ? no_fault : incomplete;
      r.verdict = r.exit == no_fault ? "no_fault" : "incomplete";
      if (r.exit == incomplete) r.notes.push_back("no non-finite value in the files present; the missing ranks may hold one");
      return;
    }
    if (r.origins.empty()) {
      incomplete_ = note(r, "non-finite values were received but their producer is not in the evidence present");
    }
    r.exit = r.missing.empty() && !incomplete_ ? fault : incomplete;
    r.verdict = r.exit == fault ? "fault" : "incomplete";
    if (r.exit == incomplete && !r.origins.empty())
      r.notes.push_back("what can still be concluded: the site named is the earliest among the evidence present; "
                        "a rank without evidence may hold a producing site concurrent with it or earlier");
  }

  static bool note(result& r, std::string text) {
    r.notes.push_back(std::move(text));
    return true;
  }

  const std::vector<rank_file>& files_;
  const evidence_index* idx_ = nullptr;
  std::vector<first_bad> firsts_;
  std::vector<carrier_acc> carriers_;
  std::vector<char> preceded_;                  // per first: another producing site happens before it
  std::vector<std::uint64_t> carriers_before_;  // per carrier: how many other carriers happen before it
  bool any_bad_ = false, incomplete_ = false;
};

}  // namespace detail
}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_ANALYSIS_HPP
