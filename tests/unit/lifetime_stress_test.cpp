// A bounded randomized stress test of the attachment model (attachment.hpp; issue 29): four threads create,
// attach, detach, re-attach, record through and destroy recorders, tree writers, histories, controllers and rank
// evidence in random orders, each thread from its own seeded generator, for a few seconds (10 s under the
// sanitizers, where it matters most; NANSCOPE_TEST_STRESS_SECONDS overrides). Objects live in a shared pool: a
// thread takes one out to use or destroy it, so no object is used by two threads except the recorders, which
// are shared (shared_ptr: each ends on whichever thread drops it last) and thread-safe. Checks: no sanitizer
// report, no deadlock (a watchdog), every tree file written parses as JSON with a complete pass, no temporary
// file is left, every evidence file parses.
#include <doctest/doctest.h>
#include "support/files.hpp"

#include <nanscope/control.hpp>
#include <nanscope/history.hpp>
#include <nanscope/rank_evidence.hpp>
#include <nanscope/tree.hpp>

#if NANSCOPE_TEST_HAVE_JSON
#include <nlohmann/json.hpp>
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NANSCOPE_STRESS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NANSCOPE_STRESS_SANITIZED 1
#endif
#endif
#ifndef NANSCOPE_STRESS_SANITIZED
#define NANSCOPE_STRESS_SANITIZED 0
#endif

namespace stress_test {

struct pool {
  std::mutex m;
  std::vector<std::shared_ptr<nanscope::recorder>> recs;
  std::vector<std::unique_ptr<nanscope::tree_writer>> writers;
  std::vector<std::unique_ptr<nanscope::history>> hists;
  std::vector<std::unique_ptr<nanscope::controller>> ctls;
  std::vector<std::unique_ptr<nanscope::rank_evidence>> evs;
  std::atomic<int> next_id{0};
  std::string dir;
};

template <class T>
std::unique_ptr<T> take(pool& p, std::vector<std::unique_ptr<T>>& v, std::mt19937_64& rng) {
  std::lock_guard<std::mutex> lk(p.m);
  if (v.empty()) return nullptr;
  const std::size_t i = rng() % v.size();
  std::unique_ptr<T> out = std::move(v[i]);
  v[i] = std::move(v.back());
  v.pop_back();
  return out;
}
template <class T>
void give(pool& p, std::vector<std::unique_ptr<T>>& v, std::unique_ptr<T> x) {
  std::lock_guard<std::mutex> lk(p.m);
  v.push_back(std::move(x));
}
inline std::shared_ptr<nanscope::recorder> any_recorder(pool& p, std::mt19937_64& rng) {
  std::lock_guard<std::mutex> lk(p.m);
  if (p.recs.empty()) return nullptr;
  return p.recs[rng() % p.recs.size()];
}

inline nanscope::recorder_options quiet() {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  return o;
}

inline void run_pass(nanscope::recorder& rec, std::mt19937_64& rng) {
  std::vector<float> x(16, 0.25f);
  if (rng() % 8 == 0) x[3] = std::numeric_limits<float>::quiet_NaN();
  nanscope::scope root(rec, "", "Net");
  root.input(x);
  const int layers = 1 + static_cast<int>(rng() % 3);
  for (int i = 0; i < layers; ++i) {
    nanscope::scope l(rec, "layers." + std::to_string(i), "Block");
    l.input(x);
    {
      nanscope::scope q(rec, "proj", "Linear");
      q.output(x);
    }
    l.output(x);
  }
  rec.checkpoint(x, "after the layers");
  root.output(x);
}

inline void worker(pool& p, std::uint64_t seed, std::chrono::steady_clock::time_point until) {
  std::mt19937_64 rng(seed);
  while (std::chrono::steady_clock::now() < until) {
    switch (rng() % 14) {
      case 0: {  // a new recorder
        auto r = std::make_shared<nanscope::recorder>(quiet());
        std::lock_guard<std::mutex> lk(p.m);
        if (p.recs.size() < 3) p.recs.push_back(std::move(r));
        break;
      }
      case 1: {  // a recorder leaves the pool (it ends where its last user drops it)
        std::shared_ptr<nanscope::recorder> gone;
        std::lock_guard<std::mutex> lk(p.m);
        if (!p.recs.empty()) {
          const std::size_t i = rng() % p.recs.size();
          gone = std::move(p.recs[i]);
          p.recs.erase(p.recs.begin() + static_cast<std::ptrdiff_t>(i));
        }
        break;
      }
      case 2:
      case 3: {  // record
        if (auto r = any_recorder(p, rng)) {
          const int n = 1 + static_cast<int>(rng() % 3);
          for (int i = 0; i < n; ++i) run_pass(*r, rng);
        }
        break;
      }
      case 4: {  // a new tree writer
        if (auto r = any_recorder(p, rng)) {
          const std::string d = p.dir + "/w" + std::to_string(p.next_id++);
          nanscope::tree_options o = nanscope::tree_options{}.in(d).with_rank(0);
          o.on_error = [](std::string_view) {};
          give(p, p.writers, std::make_unique<nanscope::tree_writer>(*r, o));
        }
        break;
      }
      case 5: {  // a writer ends
        auto w = take(p, p.writers, rng);
        break;
      }
      case 6: {  // a history or a controller is made, attached, detached or destroyed
        if (rng() % 2 == 0) {
          auto h = take(p, p.hists, rng);
          if (!h || rng() % 4 == 0) h = std::make_unique<nanscope::history>();
          const unsigned what = static_cast<unsigned>(rng() % 4);
          if (what == 0) {
            h->detach();
          } else if (what == 1) {
            h.reset();
          } else if (auto r = any_recorder(p, rng)) {
            h->attach(*r);
          }
          if (h) give(p, p.hists, std::move(h));
        } else {
          auto c = take(p, p.ctls, rng);
          if (!c || rng() % 4 == 0) {
            nanscope::controller_options o;
            o.read_environment = false;
            o.on_error = [](std::string_view) {};
            c = std::make_unique<nanscope::controller>(o);
          }
          const unsigned what = static_cast<unsigned>(rng() % 4);
          if (what == 0) {
            c->detach();
          } else if (what == 1) {
            c.reset();
          } else if (auto r = any_recorder(p, rng)) {
            c->attach(*r);
          }
          if (c) give(p, p.ctls, std::move(c));
        }
        break;
      }
      case 7: {  // rank evidence is made or ends
        if (rng() % 2 == 0) {
          if (auto r = any_recorder(p, rng)) {
            nanscope::rank_evidence_options o;
            o.dir = p.dir + "/e" + std::to_string(p.next_id++);
            o.rank = 0;
            o.world_size = 1;
            o.max_writes = 2;
            o.write_at_exit = rng() % 2 == 0;
            give(p, p.evs, std::make_unique<nanscope::rank_evidence>(*r, o));
          }
        } else {
          auto e = take(p, p.evs, rng);
        }
        break;
      }
      case 8: {  // a third party detaches an object it holds from a recorder
        auto r = any_recorder(p, rng);
        if (!r) break;
        if (auto w = take(p, p.writers, rng)) {
          r->remove_listener(w.get());
          if (rng() % 2 == 0) r->add_listener(w.get());  // the "remove and attach again" pattern
          give(p, p.writers, std::move(w));
        }
        break;
      }
      case 9: {  // set_listener / set_gate from outside
        if (auto r = any_recorder(p, rng)) {
          if (rng() % 2 == 0) {
            r->set_listener(nullptr);
          } else {
            r->set_gate(nullptr);
          }
        }
        break;
      }
      case 10: {  // an evidence marks a transfer (its recorder may have ended)
        if (auto e = take(p, p.evs, rng)) {
          std::vector<float> x(4, 1.0f);
          {
            nanscope::collective_call c(*e, nanscope::communicator{"world", 1, 0, {}},
                                        nanscope::collective_kind::all_reduce);
            c.input(x);
            c.output(x);
          }
          std::uint64_t s = 0;
          (void)e->take_new_detection(s);
          give(p, p.evs, std::move(e));
        }
        break;
      }
      case 11: {  // a history attached by hand to a second recorder too
        auto r = any_recorder(p, rng);
        if (auto h = take(p, p.hists, rng)) {
          if (r) r->add_listener(h.get());
          give(p, p.hists, std::move(h));
        }
        break;
      }
      case 12: {  // record on two recorders, nested
        auto a = any_recorder(p, rng), b = any_recorder(p, rng);
        if (a && b) {
          nanscope::scope outer(*a, "", "Net");
          run_pass(*b, rng);
        }
        break;
      }
      default: {  // recorder step changes from outside a pass
        if (auto r = any_recorder(p, rng)) r->set_step(r->step() + 1);
        break;
      }
    }
  }
}

inline double stress_seconds() {
  if (const char* s = std::getenv("NANSCOPE_TEST_STRESS_SECONDS")) return std::atof(s);
  return NANSCOPE_STRESS_SANITIZED ? 10.0 : 2.0;
}

}  // namespace stress_test

TEST_CASE("lifetime stress: threads attach, detach, record and destroy recorders and attachments in random orders") {
  const double seconds = stress_test::stress_seconds();
  const std::uint64_t seed = 20261127;
  MESSAGE("seed " << seed << ", " << seconds << " s");
  stress_test::pool p;
  p.dir = nstest::make_temp_dir("stress");
  std::atomic<bool> done{false};
  const double limit = seconds * 6 + 60;
  std::thread watchdog([&done, limit] {
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(limit));
    while (!done.load() && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!done.load()) {
      std::fprintf(stderr, "lifetime_stress_test: no progress in %.0f s (deadlock)\n", limit);
      std::_Exit(1);
    }
  });
  const std::chrono::steady_clock::time_point until =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> ts;
  for (std::uint64_t t = 0; t < 4; ++t) ts.emplace_back([&p, s = seed + t, until] { stress_test::worker(p, s, until); });
  for (auto& t : ts) t.join();
  // the rest ends in the pool's order: objects, then recorders
  p.writers.clear();
  p.hists.clear();
  p.ctls.clear();
  p.evs.clear();
  p.recs.clear();
  done = true;
  watchdog.join();

  int trees = 0, evidence = 0, temporaries = 0;
  for (const std::string& sub : nstest::list_dir(p.dir)) {
    const std::string d = p.dir + "/" + sub;
    for (const std::string& name : nstest::list_dir(d)) {
      if (name[0] == '.') {
        ++temporaries;
        continue;
      }
#if NANSCOPE_TEST_HAVE_JSON
      const std::string path = d + "/" + name;
      const auto j = nlohmann::json::parse(nstest::read_text(path), nullptr, false);
      REQUIRE_MESSAGE(!j.is_discarded(), path);
      if (sub[0] == 'w') {
        ++trees;
        CHECK(j["module_path"] == "Net");
        CHECK(j["nanscope"]["complete"] == true);
      } else {
        ++evidence;
        CHECK(j["format"] == "nanscope-rank-evidence");
      }
#endif
    }
  }
  CHECK(temporaries == 0);
  MESSAGE(trees << " tree files and " << evidence << " evidence files checked");
  nstest::remove_tree(p.dir);
}
