// nanscope tests — merge_index_test.cpp: nanscope-merge's indexed core (tools/merge/) against independent
// references: the analysis against a naive one that builds every happens-before edge of docs/multi-rank.md's model
// (N^2 per collective) and searches the graph once per pair, on thousands of random small worlds (cycles from
// marks that disagree, sub-communicators, send/recv chains, missing and cut-short ranks); the one-pass evidence
// reader against nlohmann-json + parse_rank_file on valid and damaged text (it must decline or agree); the count
// trees against plain vectors; the strongly connected components against pairwise reachability.
#if NANSCOPE_TEST_HAVE_JSON
#include "../../tools/merge/merge.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace merge_index_test {

namespace nm = nanscope_merge;
using nlohmann::json;

// Sanitizer builds (NANSCOPE_TEST_QUICK) run a quarter of the random rounds.
#if NANSCOPE_TEST_QUICK
constexpr int quick = 4;
#else
constexpr int quick = 1;
#endif

struct rng {
  std::uint64_t x;
  std::uint64_t next() {
    x += 0x9E3779B97F4A7C15ULL;
    std::uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
  bool chance(int per_mille) { return below(1000) < per_mille; }
};

// ---- random worlds ----------------------------------------------------------------------------------------
json health(bool bad) { return json{{"dtype", "f32"}, {"nonfinite", bad}}; }

/// A random run of `world` ranks as their evidence documents (missing ranks left out). NaNs are injected and
/// carried by the transfers; some flags are flipped at random; on some ranks two neighbouring events are
/// swapped (marks that disagree between ranks: cycles).
std::vector<json> random_world(rng& g, int world) {
  struct comm {
    std::string name;
    std::vector<int> members;
    int style;  // 0: no "members", 1: [], 2: the list
  };
  std::vector<comm> comms{{"world", {}, g.below(3)}};
  for (int r = 0; r < world; ++r) comms[0].members.push_back(r);
  for (int k = 0, n = g.below(3); k < n; ++k) {
    std::vector<int> all(comms[0].members);
    for (int i = world - 1; i > 0; --i) std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(g.below(i + 1))]);
    all.resize(static_cast<std::size_t>(1 + g.below(world)));
    comms.push_back({"sub" + std::to_string(k), all, 2});
  }
  std::vector<std::vector<json>> evs(static_cast<std::size_t>(world));
  std::vector<std::uint64_t> order(static_cast<std::size_t>(world), 0);
  std::vector<bool> bad(static_cast<std::size_t>(world), false);
  std::map<std::string, std::uint64_t> coll_seq;
  std::map<std::tuple<std::string, int, int, int, bool>, std::uint64_t> p2p_seq;
  const bool noise = g.chance(250);
  const int faults = 1 + g.below(3);
  const int ops = 2 + g.below(30);
  std::uint64_t step = 0;
  const auto flip = [&](bool b) { return noise && g.chance(80) ? !b : b; };
  const auto add = [&](int r, json e) {
    order[static_cast<std::size_t>(r)] += 1 + static_cast<std::uint64_t>(g.below(2));
    e["order"] = order[static_cast<std::size_t>(r)];
    e["step"] = step;
    evs[static_cast<std::size_t>(r)].push_back(std::move(e));
  };
  for (int op = 0; op < ops; ++op) {
    if (g.chance(150)) ++step;
    const int what = g.below(100);
    if (what < 45 || world == 1) {
      const int r = g.below(world);
      const bool fault = g.chance(faults * 60);
      const bool in_bad = bad[static_cast<std::size_t>(r)] || (fault && g.chance(300));
      const bool out_bad = in_bad || fault;
      const bool ckpt = g.chance(80);
      json tensors = json::array();
      if (!ckpt) {
        tensors.push_back({{"role", g.chance(150) ? "parameter" : "input"}, {"context", "x"}, {"health", health(flip(in_bad))}});
        tensors.push_back({{"role", "output"}, {"context", "y"}, {"health", health(flip(out_bad))}});
      } else {
        tensors.push_back({{"role", "checkpoint"}, {"context", "c"}, {"health", health(flip(out_bad))}});
      }
      bad[static_cast<std::size_t>(r)] = out_bad;
      add(r, {{"type", ckpt ? "checkpoint" : "frame"}, {"module_path", "m" + std::to_string(g.below(4))}, {"tensors", tensors}});
    } else if (what < 75) {
      const comm& c = comms[static_cast<std::size_t>(g.below(static_cast<int>(comms.size())))];
      const char* kinds[] = {"all_reduce", "all_gather", "broadcast", "reduce_scatter", "scatter"};
      const std::string kind = kinds[g.below(5)];
      const std::uint64_t seq = coll_seq[c.name]++;
      std::vector<bool> ins;
      bool any = false;
      for (int m : c.members) {
        ins.push_back(bad[static_cast<std::size_t>(m)] || g.chance(faults * 30));
        any = any || ins.back();
      }
      const bool out = g.chance(40) ? true : kind == "broadcast" || kind == "scatter" ? static_cast<bool>(ins[0]) : any;
      for (std::size_t cr = 0; cr < c.members.size(); ++cr) {
        json e{{"type", "collective"}, {"kind", kind}, {"comm", c.name}, {"comm_size", c.members.size()}, {"comm_rank", cr},
               {"seq", seq}, {"site", g.chance(500) ? "s" : ""}};
        if (c.style == 1) e["members"] = json::array();
        if (c.style == 2) e["members"] = c.members;
        if (!g.chance(50)) e["input"] = health(flip(ins[cr]));
        if (!g.chance(50)) e["output"] = health(flip(out));
        add(c.members[cr], e);
        bad[static_cast<std::size_t>(c.members[cr])] = out;
      }
    } else {
      const comm& c = comms[static_cast<std::size_t>(g.below(static_cast<int>(comms.size())))];
      const int n = static_cast<int>(c.members.size());
      const int a = g.below(n);
      int b = g.below(n);
      if (a == b && n > 1 && !g.chance(100)) b = (a + 1) % n;
      const int tag = g.below(2);
      const int sa = c.members[static_cast<std::size_t>(a)], sb = c.members[static_cast<std::size_t>(b)];
      std::uint64_t sseq = p2p_seq[{c.name, sa, b, tag, true}]++;
      std::uint64_t rseq = p2p_seq[{c.name, sb, a, tag, false}]++;
      if (g.chance(30)) rseq = p2p_seq[{c.name, sb, a, tag, false}]++;  // a number skipped: no matching send
      const bool sbad = bad[static_cast<std::size_t>(sa)] || g.chance(faults * 30);
      const bool rbad = g.chance(40) ? !sbad : sbad;
      json base{{"comm", c.name}, {"comm_size", n}, {"site", "p"}};
      if (c.style == 1) base["members"] = json::array();
      if (c.style == 2) base["members"] = c.members;
      json s = base, rv = base;
      s.update({{"type", "send"}, {"kind", "send"}, {"comm_rank", a}, {"peer", b}, {"tag", tag}, {"seq", sseq}, {"input", health(flip(sbad))}});
      rv.update({{"type", "recv"}, {"kind", "recv"}, {"comm_rank", b}, {"peer", a}, {"tag", tag}, {"seq", rseq}, {"output", health(flip(rbad))}});
      if (!g.chance(30)) add(sa, s);
      add(sb, rv);
      bad[static_cast<std::size_t>(sb)] = rbad || bad[static_cast<std::size_t>(sb)];
    }
  }
  std::vector<json> out;
  const int missing = world > 1 && g.chance(120) ? g.below(world) : -1;
  for (int r = 0; r < world; ++r) {
    auto& e = evs[static_cast<std::size_t>(r)];
    if (e.size() >= 2 && g.chance(150)) {  // two neighbouring marks swapped
      const std::size_t i = static_cast<std::size_t>(g.below(static_cast<int>(e.size()) - 1));
      std::swap(e[i], e[i + 1]);
      std::swap(e[i]["order"], e[i + 1]["order"]);
    }
    std::uint64_t dropped = 0;
    if (!e.empty() && g.chance(60)) {
      dropped = static_cast<std::uint64_t>(1 + g.below(static_cast<int>(e.size())));
      e.erase(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(dropped));
    }
    if (!e.empty() && g.chance(60)) e.resize(static_cast<std::size_t>(g.below(static_cast<int>(e.size()) + 1)));
    if (r == missing) continue;
    json arr = json::array();
    for (auto& x : e) arr.push_back(x);
    out.push_back({{"format", "nanscope-rank-evidence"}, {"version", 1}, {"rank", r}, {"world_size", world},
                   {"dropped_events", dropped}, {"events", arr}});
  }
  return out;
}

std::vector<nm::rank_file> parse_world(const std::vector<json>& docs) {
  std::vector<nm::rank_file> files;
  for (std::size_t i = 0; i < docs.size(); ++i) files.push_back(nm::parse_rank_file(docs[i], "f" + std::to_string(i)));
  return files;
}

// ---- the naive reference, from docs/multi-rank.md -----------------------------------------------------------
struct ref_site {
  int rank;
  std::string kind;
  std::uint64_t order;
  bool operator==(const ref_site& o) const { return rank == o.rank && kind == o.kind && order == o.order; }
};
struct ref_carrier {
  std::string type, comm;
  std::uint64_t seq, step;
  int tag;
  std::vector<int> from, to;
  bool operator==(const ref_carrier& o) const {
    return std::tie(type, comm, seq, step, tag, from, to) == std::tie(o.type, o.comm, o.seq, o.step, o.tag, o.from, o.to);
  }
};
struct ref_result {
  int exit = 0;
  std::vector<ref_site> origins, later;
  std::vector<int> receivers;
  std::vector<ref_carrier> chain;
  bool local_only = false;
};

/// Every event an "in" and an "out" node; in -> out; out -> the next event's in; a collective instance: every
/// member's in -> every member's out; a send's in -> the out of the recv with the same (communicator, sender,
/// receiver, tag, seq). "a happens before b": a search from a finds b. The carriers: collectives with a member
/// whose output went bad from a finite input, and send/recv pairs from a bad input to a bad output, in
/// (communicator, seq) then recv order, then by (step, number of other carriers before them).
ref_result reference(const std::vector<nm::rank_file>& files) {
  std::map<std::pair<int, int>, int> node;  // (file, 2 * event + side)
  std::vector<std::vector<int>> adj;
  const auto id = [&](int fi, int ei, int side) {
    const auto key = std::make_pair(fi, 2 * ei + side);
    const auto it = node.find(key);
    if (it != node.end()) return it->second;
    node.emplace(key, static_cast<int>(adj.size()));
    adj.emplace_back();
    return static_cast<int>(adj.size()) - 1;
  };
  const auto link = [&](int a, int b) { adj[static_cast<std::size_t>(a)].push_back(b); };  // ids made first
  std::vector<std::pair<int, int>> all;  // (file, event)
  for (int fi = 0; fi < static_cast<int>(files.size()); ++fi)
    for (int ei = 0; ei < static_cast<int>(files[static_cast<std::size_t>(fi)].events.size()); ++ei) all.emplace_back(fi, ei);
  const auto E = [&](const std::pair<int, int>& x) -> const nm::event& {
    return files[static_cast<std::size_t>(x.first)].events[static_cast<std::size_t>(x.second)];
  };
  const auto F = [&](const std::pair<int, int>& x) -> const nm::rank_file& { return files[static_cast<std::size_t>(x.first)]; };
  for (const auto& x : all) {
    link(id(x.first, x.second, 0), id(x.first, x.second, 1));
    if (x.second + 1 < static_cast<int>(F(x).events.size()))
      link(id(x.first, x.second, 1), id(x.first, x.second + 1, 0));
  }
  std::map<std::pair<std::string, std::uint64_t>, std::vector<std::pair<int, int>>> instances;
  for (const auto& x : all)
    if (E(x).type == nm::ev_type::collective) instances[{F(x).name(E(x).comm), E(x).seq}].push_back(x);
  for (const auto& in : instances)
    for (const auto& a : in.second)
      for (const auto& b : in.second) link(id(a.first, a.second, 0), id(b.first, b.second, 1));
  std::vector<std::pair<std::pair<int, int>, std::pair<int, int>>> pairs;  // (recv, send)
  for (const auto& s : all)
    for (const auto& r : all) {
      const nm::event& es = E(s);
      const nm::event& er = E(r);
      if (es.type != nm::ev_type::send || er.type != nm::ev_type::recv) continue;
      if (F(s).name(es.comm) != F(r).name(er.comm) || es.tag != er.tag || es.seq != er.seq) continue;
      if (F(s).world_of(es, es.peer) != F(r).rank || F(r).world_of(er, er.peer) != F(s).rank) continue;
      link(id(s.first, s.second, 0), id(r.first, r.second, 1));
      pairs.emplace_back(r, s);
    }
  std::sort(pairs.begin(), pairs.end());
  const auto reaches = [&](int from, int to) {
    std::vector<char> seen(adj.size(), 0);
    std::vector<int> todo{from};
    seen[static_cast<std::size_t>(from)] = 1;
    while (!todo.empty()) {
      const int v = todo.back();
      todo.pop_back();
      if (v == to) return true;
      for (int w : adj[static_cast<std::size_t>(v)])
        if (!seen[static_cast<std::size_t>(w)]) {
          seen[static_cast<std::size_t>(w)] = 1;
          todo.push_back(w);
        }
    }
    return false;
  };

  ref_result res;
  int world = files.empty() ? 0 : files[0].world_size;
  bool incomplete = static_cast<int>(files.size()) < world, any_bad = false;
  struct first {
    int fi, ei, side;
    std::string kind;
  };
  std::vector<first> firsts;
  for (int fi = 0; fi < static_cast<int>(files.size()); ++fi) {
    const auto& f = files[static_cast<std::size_t>(fi)];
    for (int ei = 0; ei < static_cast<int>(f.events.size()); ++ei) {
      const nm::event& e = f.events[static_cast<std::size_t>(ei)];
      if (!e.in_bad && !e.out_bad) continue;
      any_bad = true;
      if (e.in_bad)
        firsts.push_back({fi, ei, 0, e.type == nm::ev_type::frame ? "input" : "before_transfer"});
      else
        firsts.push_back({fi, ei, 1, e.is_transfer() ? "received" : "produced"});
      if (ei == 0 && f.dropped > 0) incomplete = true;
      break;
    }
  }
  for (auto& fb : firsts) {
    if (fb.kind != "received") continue;
    const std::pair<int, int> x{fb.fi, fb.ei};
    const nm::event& e = E(x);
    bool source = false, unknown = false;
    if (e.type == nm::ev_type::collective) {
      std::set<int> have;
      for (const auto& m : instances[{F(x).name(e.comm), e.seq}]) {
        have.insert(F(m).rank);
        source = source || E(m).in_bad;
      }
      for (int c = 0; c < e.comm_size; ++c) unknown = unknown || !have.count(F(x).world_of(e, c));
    } else {
      bool matched = false;
      for (const auto& p : pairs)
        if (p.first == x) {
          matched = true;
          source = E(p.second).in_bad;
        }
      unknown = !matched;
    }
    const std::string& kind = F(x).name(e.kind);
    if (!source && !unknown && e.type == nm::ev_type::collective && kind != "broadcast" && kind != "scatter")
      fb.kind = "reduction";
    else if (!source)
      incomplete = true;
  }
  for (const auto& b : firsts) {
    if (b.kind == "received") {
      res.receivers.push_back(files[static_cast<std::size_t>(b.fi)].rank);
      continue;
    }
    bool before = false;
    for (const auto& a : firsts)
      if (&a != &b && a.kind != "received" && reaches(id(a.fi, a.ei, a.side), id(b.fi, b.ei, b.side))) before = true;
    const ref_site s{files[static_cast<std::size_t>(b.fi)].rank, b.kind, E({b.fi, b.ei}).order};
    (before ? res.later : res.origins).push_back(s);
  }
  std::sort(res.receivers.begin(), res.receivers.end());
  std::vector<std::pair<ref_carrier, int>> chain;  // (carrier, representative node)
  for (const auto& in : instances) {
    ref_carrier c{"collective", in.first.first, in.first.second, 0, 0, {}, {}};
    int rep = -1;
    for (const auto& m : in.second) {
      if (E(m).in_bad) c.from.push_back(F(m).rank);
      if (E(m).out_bad && !E(m).in_bad) {
        c.to.push_back(F(m).rank);
        if (rep < 0) rep = id(m.first, m.second, 1);
      }
      c.step = E(m).step;
    }
    if (rep < 0) continue;
    std::sort(c.from.begin(), c.from.end());
    std::sort(c.to.begin(), c.to.end());
    chain.emplace_back(c, rep);
  }
  for (const auto& p : pairs) {
    if (!E(p.first).out_bad || !E(p.second).in_bad) continue;
    chain.emplace_back(ref_carrier{"send/recv", F(p.first).name(E(p.first).comm), E(p.first).seq, E(p.first).step,
                                   E(p.first).tag, {F(p.second).rank}, {F(p.first).rank}},
                       id(p.first.first, p.first.second, 1));
  }
  std::vector<std::pair<std::pair<std::uint64_t, int>, std::size_t>> keyed;
  for (std::size_t i = 0; i < chain.size(); ++i) {
    int before = 0;
    for (std::size_t j = 0; j < chain.size(); ++j)
      if (j != i && reaches(chain[j].second, chain[i].second)) ++before;
    keyed.push_back({{chain[i].first.step, before}, i});
  }
  std::sort(keyed.begin(), keyed.end());  // ties: the order above
  for (const auto& k : keyed) res.chain.push_back(chain[k.second].first);
  res.local_only = !res.origins.empty() && res.chain.empty();
  if (!any_bad) {
    res.exit = incomplete ? 3 : 0;
  } else {
    res.exit = incomplete || res.origins.empty() ? 3 : 1;
  }
  return res;
}

ref_result summarise(const nm::result& r) {
  ref_result s;
  s.exit = r.exit;
  for (const auto& o : r.origins) s.origins.push_back({o.rank, o.kind, o.order});
  for (const auto& o : r.later_producers) s.later.push_back({o.rank, o.kind, o.order});
  s.receivers = r.receivers;
  for (const auto& c : r.chain) s.chain.push_back({c.type, c.comm, c.seq, c.step, c.tag, c.from, c.to});
  s.local_only = r.local_only;
  return s;
}

std::string describe(const std::vector<json>& docs) {
  std::string s;
  for (const auto& d : docs) s += d.dump() + "\n";
  return s;
}

}  // namespace merge_index_test

TEST_CASE("merge index: the analysis agrees with a naive pairwise happens-before reference on random worlds") {
  namespace t = merge_index_test;
  namespace nm = nanscope_merge;
  using nlohmann::json;
  t::rng g{2024};
  int compared = 0, with_chain = 0, with_later = 0, concurrent = 0, errors = 0;
  const int rounds = 3000 / t::quick;
  for (int round = 0; round < rounds; ++round) {
    const int world = 1 + g.below(round % 10 == 0 ? 12 : 6);
    const auto docs = t::random_world(g, world);
    const auto files = t::parse_world(docs);
    nm::result got;
    try {
      got = nm::analyse(files);
    } catch (const nm::input_error&) {
      ++errors;  // the generator keeps the marks consistent: never
      continue;
    }
    const t::ref_result want = t::reference(files);
    const t::ref_result have = t::summarise(got);
    const bool same = have.exit == want.exit && have.origins == want.origins && have.later == want.later &&
                      have.receivers == want.receivers && have.chain == want.chain && have.local_only == want.local_only;
    if (!same) {
      INFO("world " << round << ":\n" << t::describe(docs) << nm::to_text(got));
      CHECK(same);
      break;
    }
    // the JSON written directly is nlohmann-json's dump of to_json, byte for byte
    const std::string direct = nm::to_json_text(got);
    if (direct != nm::to_json(got).dump(2, ' ', false, json::error_handler_t::replace) + "\n") {
      CHECK(direct == nm::to_json(got).dump(2, ' ', false, json::error_handler_t::replace) + "\n");
      break;
    }
    ++compared;
    with_chain += have.chain.size() > 1;
    with_later += !have.later.empty();
    concurrent += have.origins.size() > 1;
  }
  CHECK(errors == 0);
  CHECK(compared == rounds);
  // the random worlds exercise what they are meant to
  CHECK(with_chain > 300 / t::quick);
  CHECK(with_later > 50 / t::quick);
  CHECK(concurrent > 100 / t::quick);
}

TEST_CASE("merge index: the JSON written directly is nlohmann-json's dump, escapes and invalid UTF-8 included") {
  namespace nm = nanscope_merge;
  using nlohmann::json;
  const auto same = [](const nm::result& r) {
    CHECK(nm::to_json_text(r) == nm::to_json(r).dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  };
  nm::result r;
  same(r);  // everything empty
  r.exit = nm::fault;
  r.verdict = "fault";
  r.dir = std::string("d\xff\xfe/\xc3(x") + '\0' + "\x7f";  // not UTF-8: U+FFFD
  r.world_size = 3;
  r.present = {0, 2};
  r.missing = {1};
  r.receivers = {2};
  r.notes = {"a \"quoted\" note\twith\x01control\x1f", "caf\xc3\xa9 \xf0\x9f\x98\x80", "\\back\bslash\f\r\n"};
  nm::site s;
  s.rank = 0;
  s.step = 18446744073709551615ULL;
  s.order = 7;
  s.kind = "produced";
  s.module_path = "m\xe2\x82\xac";
  s.text = "t";
  r.origins = {s, s};
  r.later_producers = {s};
  nm::carrier c;
  c.type = "collective";
  c.from = {0};
  c.seq = 3;
  c.tag = -4;
  c.text = "x";
  r.chain = {c, c};
  same(r);
  r.local_only = true;
  r.origins.clear();
  r.chain.clear();
  same(r);
  r.exit = nm::error;
  r.verdict = "error";
  r.error = "d/\xc3: bad\n";
  same(r);
}

TEST_CASE("merge index: marks that disagree make a cycle; the sites on it all happen before one another") {
  namespace t = merge_index_test;
  namespace nm = nanscope_merge;
  using nlohmann::json;
  // rank 0 calls all_reduce #0 on 'a' and later #0 on 'b'; rank 1 the other way round (a deadlock in a real run,
  // but files can say so). Every value stays finite except where a frame makes a NaN.
  const auto coll = [](std::uint64_t order, const char* comm, int rank) {
    return json{{"order", order}, {"type", "collective"}, {"kind", "all_reduce"}, {"step", 0}, {"comm", comm},
                {"comm_size", 2}, {"comm_rank", rank}, {"seq", 0}, {"input", t::health(false)}, {"output", t::health(false)}};
  };
  const auto frame = [](std::uint64_t order, bool out_bad) {
    return json{{"order", order}, {"type", "frame"}, {"step", 0}, {"module_path", "m"},
                {"tensors", {{{"role", "output"}, {"context", "y"}, {"health", t::health(out_bad)}}}}};
  };
  const auto doc = [](int rank, std::vector<json> evs) {
    json arr = json::array();
    for (auto& e : evs) arr.push_back(e);
    return json{{"format", "nanscope-rank-evidence"}, {"version", 1}, {"rank", rank}, {"world_size", 2}, {"events", arr}};
  };
  // NaNs made before both collectives: nothing leads to either, both are first (concurrent)
  const auto early = t::parse_world({doc(0, {frame(0, true), coll(1, "a", 0), coll(2, "b", 0)}),
                                     doc(1, {frame(0, true), coll(1, "b", 1), coll(2, "a", 1)})});
  const nm::result e = nm::analyse(early);
  CHECK(t::summarise(e).origins == t::reference(early).origins);
  CHECK(e.origins.size() == 2);
  CHECK(e.exit == nm::fault);
  // NaNs made between the two collectives: rank 0's site -> b#0 -> rank 1's site -> a#0 -> rank 0's site. Each
  // happens before the other: neither is first, both are later sites, and the verdict is incomplete
  const auto cyc = t::parse_world({doc(0, {coll(0, "a", 0), frame(1, true), coll(2, "b", 0)}),
                                   doc(1, {coll(0, "b", 1), frame(1, true), coll(2, "a", 1)})});
  const nm::result c = nm::analyse(cyc);
  CHECK(t::summarise(c).later == t::reference(cyc).later);
  CHECK(c.origins.empty());
  CHECK(c.later_producers.size() == 2);
  CHECK(c.exit == nm::incomplete);
  // one site on the cycle, one after it on rank 0: the one on the cycle is first
  const auto one = t::parse_world({doc(0, {coll(0, "a", 0), frame(1, false), coll(2, "b", 0), frame(3, true)}),
                                   doc(1, {coll(0, "b", 1), frame(1, true), coll(2, "a", 1)})});
  const nm::result o = nm::analyse(one);
  CHECK(t::summarise(o).origins == t::reference(one).origins);
  REQUIRE(o.origins.size() == 1);
  CHECK(o.origins[0].rank == 1);
  REQUIRE(o.later_producers.size() == 1);
  CHECK(o.later_producers[0].rank == 0);
}

TEST_CASE("merge index: the one-pass reader agrees with nlohmann-json + parse_rank_file or declines") {
  namespace t = merge_index_test;
  namespace nm = nanscope_merge;
  using nlohmann::json;
  t::rng g{77};
  const auto slow = [](const std::string& text, nm::rank_file& f) {
    try {
      const json j = json::parse(text, nm::detail::nesting_guard(), false);
      if (j.is_discarded()) return false;
      f = nm::parse_rank_file(j, "p");
      return true;
    } catch (const nm::input_error&) {
      return false;
    } catch (const json::exception&) {
      return false;
    }
  };
  const auto same = [](const nm::rank_file& a, const nm::rank_file& b) {
    if (std::tie(a.path, a.rank, a.world_size, a.host, a.reason, a.pid, a.dropped, a.stopped, a.stop_step) !=
            std::tie(b.path, b.rank, b.world_size, b.host, b.reason, b.pid, b.dropped, b.stopped, b.stop_step) ||
        a.events.size() != b.events.size())
      return false;
    for (std::size_t i = 0; i < a.events.size(); ++i) {
      const nm::event& x = a.events[i];
      const nm::event& y = b.events[i];
      const auto key = [](const nm::rank_file& f, const nm::event& e) {
        return std::make_tuple(e.order, e.step, e.seq, static_cast<int>(e.type), e.in_bad, e.out_bad, f.name(e.module_path),
                               f.name(e.cls), f.name(e.bad_in_context), f.name(e.bad_other_context), f.name(e.kind),
                               f.name(e.comm), f.name(e.site), f.member_lists[e.members], e.comm_size, e.comm_rank,
                               e.peer, e.tag);
      };
      if (key(a, x) != key(b, y)) return false;
    }
    return true;
  };
  // strings the writer may hold: escapes, UTF-8 of 2 to 4 bytes, a surrogate pair (declined: slow path)
  const char* names[] = {"model.layer0", "a\"b", "tab\there", "caf\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "", "x\\y"};
  int fast_ok = 0, fast_ok_damaged = 0, damaged = 0;
  for (int round = 0; round < 1500 / t::quick; ++round) {
    auto docs = t::random_world(g, 1 + g.below(4));
    if (docs.empty()) continue;
    json d = docs[0];
    d["host"] = names[g.below(8)];
    d["reason"] = "exit";
    d["pid"] = g.below(100000);
    if (g.chance(300)) d["stop"] = g.chance(500) ? json{{"step", 4}, {"reason", "x"}} : json(nullptr);
    d["detection"] = nullptr;
    for (auto& e : d["events"]) {
      if (e.contains("module_path")) e["module_path"] = names[g.below(8)];
      if (e.contains("tensors") && g.chance(200)) e["tensors"].push_back({{"role", "input"}, {"context", names[g.below(8)]}, {"tensor", false}});
      if (e.contains("tensors") && g.chance(100)) e["tensors"][0]["allowed"] = true;
      if (e.contains("comm") && g.chance(200)) e["site"] = names[g.below(8)];
      if (g.chance(100)) e["class"] = names[g.below(8)];
      if (g.chance(100)) e["complete"] = false;
    }
    std::string text = d.dump(g.below(3) - 1, ' ', g.chance(300));
    nm::rank_file a, b;
    const bool f_ok = nm::read_evidence_fast(text, "p", a);
    const bool s_ok = slow(text, b);
    CHECK(s_ok);
    if (f_ok) {
      ++fast_ok;
      CHECK(same(a, b));
    }
    // damage it: a byte replaced, inserted or removed, the text cut, a value of another type
    for (int k = 0; k < 6; ++k) {
      std::string d2 = text;
      const int how = g.below(6);
      const std::size_t at = static_cast<std::size_t>(g.below(static_cast<int>(d2.size())));
      const char bytes[] = {'"', '\\', '{', '}', '[', ']', ',', ':', '0', '-', '.', 'e', 't', 'n', ' ', 'x', '1',
                            '\x01', '\x7f', '\x80', '\xc3', '\xed', '\xf4', '\xff'};
      const char b1 = bytes[g.below(static_cast<int>(sizeof bytes))];
      if (how == 0) d2[at] = b1;
      if (how == 1) d2.insert(at, 1, b1);
      if (how == 2) d2.erase(at, 1);
      if (how == 3) d2.resize(at);
      if (how >= 4) {
        // a value swapped for one of another type or range, or a key doubled
        const char* keys[] = {"\"order\": ", "\"step\": ", "\"seq\": ", "\"comm_size\": ", "\"rank\": ", "\"nonfinite\": ",
                              "\"peer\": ", "\"members\": ", "\"type\": ", "\"comm\": ", "\"tensors\": ", "\"version\": ",
                              "\"order\":", "\"nonfinite\":", "\"world_size\":", "\"input\":"};
        const char* values[] = {"-1", "1.0", "1e2", "18446744073709551616", "-0", "\"s\"", "true", "null", "[]", "{}",
                                "4294967296", "9223372036854775808", "-9223372036854775809", "[1,2]", "0", "00",
                                "1e400", "[1e-400]"};
        const std::string key = keys[g.below(16)];
        const std::size_t p = d2.find(key, at);
        if (p == std::string::npos) continue;
        if (how == 4) {
          d2.insert(p + key.size(), std::string(values[g.below(18)]) + (g.chance(500) ? ", " + key : std::string(" ")));
          // the old value now follows: either a syntax error or, after ", key", a doubled key
        } else {
          std::size_t q = p + key.size();
          while (q < d2.size() && d2[q] == ' ') ++q;
          std::size_t e = q;
          while (e < d2.size() && d2[e] != ',' && d2[e] != '}' && d2[e] != ']' && d2[e] != '\n') ++e;
          d2.replace(q, e - q, values[g.below(18)]);
        }
      }
      ++damaged;
      nm::rank_file x, y;
      const bool fx = nm::read_evidence_fast(d2, "p", x);
      const bool sy = slow(d2, y);
      if (fx) {
        ++fast_ok_damaged;
        if (!sy || !same(x, y)) {
          INFO("text: " << d2);
          CHECK(sy);
          CHECK(same(x, y));
          return;
        }
      }
    }
  }
  CHECK(fast_ok > 900 / t::quick);          // valid files take the fast path (except surrogate escapes)
  CHECK(fast_ok_damaged > 500 / t::quick);  // harmless damage (a space, a value of the right type) too
  CHECK(damaged > 5000 / t::quick);
}

TEST_CASE("merge index: the one-pass reader declines what only the exact reader may judge") {
  namespace t = merge_index_test;
  namespace nm = nanscope_merge;
  using nlohmann::json;
  const std::string good =
      R"({"format": "nanscope-rank-evidence", "version": 1, "rank": 0, "world_size": 2, "events": [)"
      R"({"order": 1, "type": "collective", "kind": "all_reduce", "step": 0, "comm": "w", "comm_size": 2, "comm_rank": 0,)"
      R"( "seq": 0, "members": [0, 1], "input": {"nonfinite": false}, "output": {"nonfinite": true}}]})";
  nm::rank_file f;
  REQUIRE(nm::read_evidence_fast(good, "p", f));
  CHECK(f.events.size() == 1);
  CHECK(f.events[0].out_bad);
  CHECK(f.member_lists[f.events[0].members] == std::vector<int>{0, 1});
  const auto declines = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    const std::size_t p = t.find(from);
    REQUIRE(p != std::string::npos);
    t.replace(p, from.size(), to);
    nm::rank_file x;
    CHECK_MESSAGE(!nm::read_evidence_fast(t, "p", x), t);
  };
  declines("\"version\": 1", "\"version\": 1.0");
  declines("\"version\": 1", "\"version\": 2");
  declines("\"rank\": 0", "\"rank\": 2");
  declines("\"rank\": 0", "\"rank\": 0, \"rank\": 1");  // a doubled key: nlohmann keeps the last
  declines("\"step\": 0", "\"step\": -1");
  declines("\"step\": 0", "\"step\": 18446744073709551616");
  declines("\"members\": [0, 1]", "\"members\": [0, 2]");
  declines("\"members\": [0, 1]", "\"members\": [0]");
  declines("\"comm\": \"w\"", "\"comm\": \"\\ud800\"");          // a lone surrogate: nlohmann's error
  declines("\"comm\": \"w\"", "\"comm\": \"\\ud83d\\ude00\"");  // a pair: decoded the slow way
  declines("\"comm\": \"w\"", "\"comm\": \"\xc0\xaf\"");        // an overlong encoding
  declines("\"comm\": \"w\"", "\"comm\": \"\xed\xa0\x80\"");    // a surrogate in UTF-8
  declines("\"comm\": \"w\"", "\"comm\": \"a\nb\"");             // a raw control character
  declines("{\"format\"", "\xef\xbb\xbf{\"format\"");           // a byte order mark
  declines("]}", "]} x");
  declines("]}", "]}/* */");
  declines("\"order\": 1", "\"order\": 01");
  declines("\"input\": {\"nonfinite\": false}", "\"input\": {\"nonfinite\": 0}");
  declines("\"input\": {\"nonfinite\": false}", "\"input\": null");
  declines("\"kind\": \"all_reduce\"", "\"kind\": \"send\"");
  declines("\"seq\": 0", "\"seq\": 0, \"x\": 1e400");    // a double that overflows: nlohmann's error
  declines("\"seq\": 0", "\"seq\": 0, \"x\": [-1E+999]");
  declines("\"seq\": 0", "\"seq\": 0, \"x\": " + std::string(400, '9'));
  // what is accepted: keys in any order, unknown keys of any shape, escapes, -0
  std::string text = good;
  text.replace(text.find("\"step\": 0"), 9,
               "\"step\": -0, \"extra\": [{\"deep\": [1.5e3, null, true, 1e-400, 18446744073709551616, -0.0]}], "
               "\"site\": \"a\\u00e9\\n\"");
  REQUIRE(nm::read_evidence_fast(text, "p", f));
  CHECK(f.events[0].step == 0);
  CHECK(f.name(f.events[0].site) == "a\xc3\xa9\n");
}

TEST_CASE("merge index: count trees join and raise like per-rank vectors") {
  namespace t = merge_index_test;
  t::rng g{5};
  for (std::uint32_t leaves : {1U, 2U, 3U, 7U, 64U, 100U}) {
    nanscope_merge::detail::count_forest forest(leaves);
    std::vector<nanscope_merge::detail::count_forest::tree> trees{0};
    std::vector<std::vector<std::uint64_t>> plain{std::vector<std::uint64_t>(leaves, 0)};
    for (int step = 0; step < 400; ++step) {
      if (g.chance(500)) {
        const std::size_t t = static_cast<std::size_t>(g.below(static_cast<int>(trees.size())));
        const std::uint32_t i = static_cast<std::uint32_t>(g.below(static_cast<int>(leaves)));
        const std::uint64_t v = static_cast<std::uint64_t>(g.below(20));
        trees.push_back(forest.raise(trees[t], i, v));
        plain.push_back(plain[t]);
        plain.back()[i] = std::max(plain.back()[i], v);
      } else {
        std::vector<nanscope_merge::detail::count_forest::tree> in;
        std::vector<std::uint64_t> want(leaves, 0);
        for (int k = 0, n = 1 + g.below(6); k < n; ++k) {
          const std::size_t t = static_cast<std::size_t>(g.below(static_cast<int>(trees.size())));
          in.push_back(trees[t]);
          for (std::uint32_t i = 0; i < leaves; ++i) want[i] = std::max(want[i], plain[t][i]);
        }
        trees.push_back(forest.join(in.data(), in.data() + in.size()));
        plain.push_back(want);
      }
      const auto t = trees.back();
      std::uint64_t sum = 0;
      for (std::uint32_t i = 0; i < leaves; ++i) {
        REQUIRE(forest.leaf(t, i) == plain.back()[i]);
        sum += plain.back()[i];
      }
      REQUIRE(forest.sum(t) == sum);
    }
  }
  // sharing: trees that differ from a common one in one leaf each are joined along those leaves' paths only
  nanscope_merge::detail::count_forest forest(4096);
  nanscope_merge::detail::count_forest::tree base = 0;
  for (std::uint32_t r = 0; r < 4096; ++r) base = forest.raise(base, r, 1);
  std::vector<nanscope_merge::detail::count_forest::tree> in(100, base);
  for (std::uint32_t r = 0; r < 16; ++r) in.push_back(forest.raise(base, r * 256, 3));
  const std::size_t before = forest.size();
  const auto joined = forest.join(in.data(), in.data() + in.size());
  CHECK(forest.sum(joined) == 4096 + 16 * 2);
  CHECK(forest.size() - before <= 16 * 12);
}

TEST_CASE("merge index: strongly connected components and their order against pairwise reachability") {
  namespace t = merge_index_test;
  t::rng g{11};
  for (int round = 0; round < 300; ++round) {
    const int n = 1 + g.below(25);
    nanscope_merge::detail::hb_graph graph(static_cast<std::size_t>(n));
    std::vector<std::vector<char>> reach(static_cast<std::size_t>(n), std::vector<char>(static_cast<std::size_t>(n), 0));
    for (int e = 0, m = g.below(3 * n); e < m; ++e) {
      const int a = g.below(n), b = g.below(n);
      graph.edge(static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(b));
      reach[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)] = 1;
    }
    for (int i = 0; i < n; ++i) reach[static_cast<std::size_t>(i)][static_cast<std::size_t>(i)] = 1;
    for (int k = 0; k < n; ++k)  // Floyd-Warshall closure
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          if (reach[static_cast<std::size_t>(i)][static_cast<std::size_t>(k)] && reach[static_cast<std::size_t>(k)][static_cast<std::size_t>(j)])
            reach[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] = 1;
    graph.finish();
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const auto ci = graph.component_of(static_cast<std::uint32_t>(i));
        const auto cj = graph.component_of(static_cast<std::uint32_t>(j));
        const bool both = reach[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] && reach[static_cast<std::size_t>(j)][static_cast<std::size_t>(i)];
        REQUIRE((ci == cj) == both);
        if (ci != cj && reach[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)]) REQUIRE(ci > cj);
      }
    std::size_t listed = 0;
    for (std::uint32_t c = 0; c < graph.component_count(); ++c)
      for (const auto* v = graph.component_begin(c); v != graph.component_end(c); ++v) {
        REQUIRE(graph.component_of(*v) == c);
        ++listed;
      }
    CHECK(listed == static_cast<std::size_t>(n));
  }
}

#endif  // NANSCOPE_TEST_HAVE_JSON
