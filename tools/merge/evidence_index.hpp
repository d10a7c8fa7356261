// nanscope-merge: indexes over the loaded rank files (names shared by all files, collective instances by communicator and sequence number, matched send/recv pairs), built while checking that the marks agree between ranks.
#ifndef NANSCOPE_TOOLS_MERGE_EVIDENCE_INDEX_HPP
#define NANSCOPE_TOOLS_MERGE_EVIDENCE_INDEX_HPP

#include "evidence.hpp"
#include "report.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nanscope_merge {
namespace detail {

inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// "all_reduce #3 on 'world'", "send #2 (to 1, tag 0) on 'world'".
inline std::string transfer_name(const rank_file& f, const event& e) {
  if (e.type == ev_type::collective)
    return f.name(e.kind) + " #" + std::to_string(e.seq) + " on '" + f.name(e.comm) + "'";
  return f.name(e.kind) + " #" + std::to_string(e.seq) + " (" + (e.type == ev_type::send ? "to" : "from") + " " +
         std::to_string(e.peer) + ", tag " + std::to_string(e.tag) + ") on '" + f.name(e.comm) + "'";
}

/// The files' cross-rank structure. Constructing it checks what the marks must agree on and throws input_error
/// at the first disagreement, in file order then event order: world sizes, one file per rank, then each
/// collective (comm, seq) the same kind, size and members everywhere and once per rank, each send and recv once.
class evidence_index {
 public:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  struct member {
    std::uint32_t file, ev;
  };
  /// One collective instance: its records, in file order (one per rank).
  struct group {
    std::uint32_t comm;
    std::uint64_t seq;
    std::uint32_t last_file;
    std::vector<member> members;
  };
  /// A recv and the send it pairs with.
  struct match {
    member recv, send;
  };

  evidence_index(const std::vector<rank_file>& files, result& r) : files_(files), names_index_(names_) {
    check_ranks(r);
    share_names();
    index_transfers();
    pair_sends();
  }

  const std::string& name(std::uint32_t global) const { return names_[global]; }
  std::uint32_t comm(std::size_t fi, const event& e) const { return local_names_[fi][e.comm]; }
  const std::vector<group>& groups() const { return groups_; }
  /// The collective instance of a collective event.
  const group& group_of(std::size_t fi, const event& e) const {
    return groups_[group_ids_.at({comm(fi, e), e.seq})];
  }
  /// Every matched pair, by the recv's (file, event).
  const std::vector<match>& matches() const { return matches_; }
  /// The send paired with a recv, or nullptr.
  const member* send_of(std::uint32_t fi, std::uint32_t ei) const {
    const auto it = std::lower_bound(matches_.begin(), matches_.end(), member{fi, ei}, [](const match& m, const member& k) {
      return m.recv.file != k.file ? m.recv.file < k.file : m.recv.ev < k.ev;
    });
    if (it == matches_.end() || it->recv.file != fi || it->recv.ev != ei) return nullptr;
    return &it->send;
  }

 private:
  static std::uint64_t group_key(std::uint32_t comm, std::uint64_t seq) {
    return mix64(seq + 0x9E3779B97F4A7C15ULL * (static_cast<std::uint64_t>(comm) + 1));
  }
  struct group_hash {
    std::size_t operator()(const std::pair<std::uint32_t, std::uint64_t>& k) const {
      return static_cast<std::size_t>(group_key(k.first, k.second));
    }
  };
  struct p2p_key {
    std::uint32_t comm;
    int from, to, tag;
    std::uint64_t seq;
    bool operator==(const p2p_key& o) const {
      return comm == o.comm && from == o.from && to == o.to && tag == o.tag && seq == o.seq;
    }
    bool operator<(const p2p_key& o) const {
      return std::tie(comm, from, to, tag, seq) < std::tie(o.comm, o.from, o.to, o.tag, o.seq);
    }
  };
  struct keyed {
    p2p_key key;
    member at;
    bool operator<(const keyed& o) const {
      if (!(key == o.key)) return key < o.key;
      return at.file != o.at.file ? at.file < o.at.file : at.ev < o.at.ev;
    }
  };

  void check_ranks(result& r) {
    r.world_size = files_[0].world_size;
    std::vector<char> seen(static_cast<std::size_t>(r.world_size), 0);
    for (const auto& f : files_) {
      if (f.world_size != r.world_size)
        throw input_error(f.path + ": world size " + std::to_string(f.world_size) + " but " + files_[0].path +
                          " says " + std::to_string(r.world_size));
      if (seen[static_cast<std::size_t>(f.rank)]) throw input_error(f.path + ": a second file for rank " + std::to_string(f.rank));
      seen[static_cast<std::size_t>(f.rank)] = 1;
    }
    for (int i = 0; i < r.world_size; ++i) (seen[static_cast<std::size_t>(i)] ? r.present : r.missing).push_back(i);
    if (!r.missing.empty())
      r.notes.push_back("no evidence file from " + ranks_text(r.missing) +
                        " (crashed before writing, or saw nothing and did not write at exit)");
  }

  // Every file's names and member lists as ids shared by all files, so that comparing two is comparing ids.
  void share_names() {
    std::map<std::vector<int>, std::uint32_t> lists;
    lists.emplace(std::vector<int>(), 0);
    local_names_.resize(files_.size());
    local_members_.resize(files_.size());
    for (std::size_t fi = 0; fi < files_.size(); ++fi) {
      for (const auto& n : files_[fi].names) local_names_[fi].push_back(names_index_.id(n));
      for (const auto& m : files_[fi].member_lists)
        local_members_[fi].push_back(lists.emplace(m, static_cast<std::uint32_t>(lists.size())).first->second);
    }
  }

  // The first send or recv of file fi that repeats an earlier one's (communicator, peer, tag, seq), or none.
  std::uint32_t first_repeat(std::size_t fi, std::vector<keyed>& work) const {
    const rank_file& f = files_[fi];
    work.clear();
    for (std::uint32_t ei = 0; ei < f.events.size(); ++ei) {
      const event& e = f.events[ei];
      if (e.type == ev_type::send || e.type == ev_type::recv)  // `to` holds 1 for a send
        work.push_back(keyed{p2p_key{comm(fi, e), e.peer, e.type == ev_type::send ? 1 : 0, e.tag, e.seq},
                             member{static_cast<std::uint32_t>(fi), ei}});
    }
    std::sort(work.begin(), work.end());
    std::uint32_t first = none;
    for (std::size_t i = 1; i < work.size(); ++i)
      if (work[i].key == work[i - 1].key && work[i].at.ev < first) first = work[i].at.ev;
    return first;
  }

  void index_transfers() {
    std::vector<keyed> work;
    for (std::size_t fi = 0; fi < files_.size(); ++fi) {
      const rank_file& f = files_[fi];
      const std::uint32_t repeat = first_repeat(fi, work);
      for (std::size_t ei = 0; ei < f.events.size(); ++ei) {
        const event& e = f.events[ei];
        if (e.type == ev_type::collective) {
          const std::uint32_t c = comm(fi, e);
          const auto ins = group_ids_.emplace(std::make_pair(c, e.seq), static_cast<std::uint32_t>(groups_.size()));
          if (ins.second) {
            groups_.push_back(group{c, e.seq, static_cast<std::uint32_t>(fi), {}});
          } else {
            group& g = groups_[ins.first->second];
            if (g.last_file == fi)
              throw input_error(f.path + ": collective #" + std::to_string(e.seq) + " on '" + f.name(e.comm) +
                                "' appears twice (conflicting sequence numbers)");
            const rank_file& of = files_[g.members[0].file];
            const event& o = of.events[g.members[0].ev];
            if (local_names_[g.members[0].file][o.kind] != local_names_[fi][e.kind] || o.comm_size != e.comm_size ||
                local_members_[g.members[0].file][o.members] != local_members_[fi][e.members])
              throw input_error("conflicting sequence numbers: collective #" + std::to_string(e.seq) + " on '" +
                                f.name(e.comm) + "' is " + of.name(o.kind) + " of " + std::to_string(o.comm_size) +
                                " ranks in " + of.path + " but " + f.name(e.kind) + " of " +
                                std::to_string(e.comm_size) + " ranks in " + f.path +
                                " (every rank must mark the same collectives in the same order)");
            g.last_file = static_cast<std::uint32_t>(fi);
          }
          groups_[ins.first->second].members.push_back(member{static_cast<std::uint32_t>(fi), static_cast<std::uint32_t>(ei)});
        } else if (ei == repeat) {
          throw input_error(f.path + ": " + transfer_name(f, e) + " appears twice (conflicting sequence numbers)");
        }
      }
    }
  }

  // A send and a recv pair up by (communicator, sender, receiver, tag, seq), sender and receiver as world
  // ranks. Two records with one key (members naming one world rank twice): the later in file order counts.
  void pair_sends() {
    std::vector<keyed> sends, recvs;
    for (std::size_t fi = 0; fi < files_.size(); ++fi) {
      const rank_file& f = files_[fi];
      for (std::size_t ei = 0; ei < f.events.size(); ++ei) {
        const event& e = f.events[ei];
        const member m{static_cast<std::uint32_t>(fi), static_cast<std::uint32_t>(ei)};
        if (e.type == ev_type::send) sends.push_back(keyed{p2p_key{comm(fi, e), f.rank, f.world_of(e, e.peer), e.tag, e.seq}, m});
        if (e.type == ev_type::recv) recvs.push_back(keyed{p2p_key{comm(fi, e), f.world_of(e, e.peer), f.rank, e.tag, e.seq}, m});
      }
    }
    // sorted by key, then file order: the last of each run of equal keys is the one that counts
    std::sort(sends.begin(), sends.end());
    std::sort(recvs.begin(), recvs.end());
    std::size_t j = 0;
    for (std::size_t i = 0; i < sends.size(); ++i) {
      if (i + 1 < sends.size() && sends[i + 1].key == sends[i].key) continue;
      while (j < recvs.size() && recvs[j].key < sends[i].key) ++j;
      while (j + 1 < recvs.size() && recvs[j + 1].key == sends[i].key) ++j;
      if (j < recvs.size() && recvs[j].key == sends[i].key) matches_.push_back(match{recvs[j].at, sends[i].at});
    }
    std::sort(matches_.begin(), matches_.end(), [](const match& a, const match& b) {
      return a.recv.file != b.recv.file ? a.recv.file < b.recv.file : a.recv.ev < b.recv.ev;
    });
  }

  const std::vector<rank_file>& files_;
  std::vector<std::string> names_{std::string()};
  name_index names_index_;
  std::vector<std::vector<std::uint32_t>> local_names_, local_members_;
  std::vector<group> groups_;
  std::unordered_map<std::pair<std::uint32_t, std::uint64_t>, std::uint32_t, group_hash> group_ids_;
  std::vector<match> matches_;
};

}  // namespace detail
}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_EVIDENCE_INDEX_HPP
