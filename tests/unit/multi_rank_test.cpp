// Multi-rank evidence without MPI: rank detection from launcher variables, the per-rank evidence file (read back
// with a real JSON parser), sequence numbers, and nanscope-merge's core (tools/merge/merge.hpp) on evidence
// written by four in-process "ranks" and on hand-made rank files (missing ranks, conflicting sequence numbers).
#include "support/files.hpp"
#include <nanscope/collective.hpp>
#include <nanscope/control.hpp>
#include <nanscope/rank.hpp>
#include <nanscope/rank_evidence.hpp>
#include <nanscope/report.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#if NANSCOPE_TEST_HAVE_JSON
#include "../../tools/merge/merge.hpp"
#endif

namespace {

struct env_guard {
  std::vector<std::pair<std::string, std::string>> saved;
  std::vector<std::string> unset_names;
  void set(const char* k, const char* v) {
    remember(k);
    ::setenv(k, v, 1);
  }
  void unset(const char* k) {
    remember(k);
    ::unsetenv(k);
  }
  void remember(const char* k) {
    if (const char* old = std::getenv(k)) {
      saved.emplace_back(k, old);
    } else {
      unset_names.emplace_back(k);
    }
  }
  ~env_guard() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) ::setenv(it->first.c_str(), it->second.c_str(), 1);
    for (const auto& k : unset_names) ::unsetenv(k.c_str());
  }
};

const char* const launcher_vars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                                     "SLURM_PROCID", "SLURM_NTASKS", "RANK", "WORLD_SIZE"};

// Scratch directories, removed when the test process ends.
struct scratch_dirs {
  std::vector<std::string> paths;
  ~scratch_dirs() {
    for (const auto& p : paths) {
      const std::string cmd = "rm -rf '" + p + "'";
      if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", p.c_str());
    }
  }
};
scratch_dirs g_scratch;

std::string temp_dir(const char* tag) {
  std::string t = "/tmp/nanscope_multi_rank_" + std::string(tag) + "_" + std::to_string(::getpid());
  std::string cmd = "rm -rf '" + t + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  g_scratch.paths.push_back(t);
  return t;
}

using nstest::list_dir;

// A silent recorder that keeps going after a detection.
nanscope::recorder_options silent_options() {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  o.warn_abs_max[0] = 0.0;
  return o;
}

}  // namespace

TEST_CASE("rank_from_environment: launcher variables, first valid pair wins, bad values ignored") {
  env_guard g;
  for (const char* v : launcher_vars) g.unset(v);
  nanscope::rank_info none = nanscope::rank_from_environment();
  CHECK_FALSE(none.known());
  CHECK(none.rank == 0);
  CHECK(none.world_size == 1);

  g.set("RANK", "3");
  g.set("WORLD_SIZE", "8");
  auto t = nanscope::rank_from_environment();
  CHECK(t.rank == 3);
  CHECK(t.world_size == 8);
  CHECK(t.source == "RANK");

  g.set("SLURM_PROCID", "1");
  g.set("SLURM_NTASKS", "2");
  CHECK(nanscope::rank_from_environment().source == "SLURM_PROCID");
  g.set("PMI_RANK", "5");
  g.set("PMI_SIZE", "6");
  CHECK(nanscope::rank_from_environment().rank == 5);
  g.set("OMPI_COMM_WORLD_RANK", "2");
  g.set("OMPI_COMM_WORLD_SIZE", "4");
  auto o = nanscope::rank_from_environment();
  CHECK(o.rank == 2);
  CHECK(o.world_size == 4);
  CHECK(o.source == "OMPI_COMM_WORLD_RANK");

  // an impossible or malformed Open MPI pair falls through to the next launcher
  g.set("OMPI_COMM_WORLD_RANK", "4");
  CHECK(nanscope::rank_from_environment().source == "PMI_RANK");
  g.set("OMPI_COMM_WORLD_RANK", "-1");
  CHECK(nanscope::rank_from_environment().source == "PMI_RANK");
  g.set("OMPI_COMM_WORLD_RANK", "1x");
  CHECK(nanscope::rank_from_environment().source == "PMI_RANK");
  g.set("PMI_SIZE", "99999999999");
  CHECK(nanscope::rank_from_environment().source == "SLURM_PROCID");
}

TEST_CASE("process_rank: explicit setting over the environment; rank_tag") {
  env_guard g;
  for (const char* v : launcher_vars) g.unset(v);
  CHECK(nanscope::rank_tag().empty());
  g.set("RANK", "1");
  g.set("WORLD_SIZE", "2");
  CHECK(nanscope::rank_tag() == "rank1of2");
  nanscope::set_process_rank(3, 4, "test");
  CHECK(nanscope::rank_tag() == "rank3of4");
  CHECK(nanscope::process_rank().source == "test");
  // snapshot and layer-tree names take the explicit rank first
  CHECK(nanscope::detail::parse_env_rank() == 3);
  nanscope::set_process_rank(-1, 0);  // invalid: back to the environment
  CHECK(nanscope::rank_tag() == "rank1of2");
  CHECK(nanscope::detail::parse_env_rank() == 1);
  CHECK_FALSE(nanscope::explicit_process_rank().known());
}

TEST_CASE("a detection report ends with the rank in a multi-process run, and only there") {
  env_guard g;
  for (const char* v : launcher_vars) g.unset(v);
  auto report_of_one_detection = [] {
    std::string printed;
    nanscope::recorder_options o;
    o.policy = nanscope::on_detect::print_and_continue;
    o.sink = [&printed](std::string_view t) { printed.append(t.data(), t.size()); };
    nanscope::recorder rec(o);
    std::vector<float> x(2, std::numeric_limits<float>::quiet_NaN());
    nanscope::scope s(rec, "m", "M");
    s.output(x);
    return printed;
  };
  const std::string single = report_of_one_detection();
  REQUIRE_FALSE(single.empty());
  CHECK(single.find("nanscope: rank ") == std::string::npos);
  g.set("OMPI_COMM_WORLD_RANK", "2");
  g.set("OMPI_COMM_WORLD_SIZE", "4");
  const std::string multi = report_of_one_detection();
  const std::string line = "nanscope: rank 2 of 4 (OMPI_COMM_WORLD_RANK)\n";
  REQUIRE(multi.size() > line.size());
  CHECK(multi.compare(multi.size() - line.size(), line.size(), line) == 0);
  CHECK(multi.compare(0, single.size(), single) == 0);  // the report itself is unchanged
}

TEST_CASE("the hf style's report is HuggingFace's bytes in a multi-process run too: no rank line") {
  env_guard g;
  for (const char* v : launcher_vars) g.unset(v);
  auto hf_output = [] {
    std::string printed;
    nanscope::recorder_options o;
    o.style = nanscope::report_style::hf;
    o.policy = nanscope::on_detect::print_and_continue;
    o.sink = [&printed](std::string_view t) { printed.append(t.data(), t.size()); };
    nanscope::recorder rec(o);
    std::vector<float> x(2, std::numeric_limits<float>::quiet_NaN());
    {
      nanscope::scope s(rec, "", "M");
      s.output(x);
    }
    return printed;
  };
  const std::string single = hf_output();
  REQUIRE(single.find("\nDetected inf/nan during batch_number=1\n") != std::string::npos);
  g.set("OMPI_COMM_WORLD_RANK", "2");
  g.set("OMPI_COMM_WORLD_SIZE", "4");
  CHECK(hf_output() == single);
}

TEST_CASE("collective kinds round-trip through their names") {
  for (int i = 0; i <= static_cast<int>(nanscope::collective_kind::recv); ++i) {
    const auto k = static_cast<nanscope::collective_kind>(i);
    nanscope::collective_kind back = nanscope::collective_kind::barrier;
    REQUIRE(nanscope::parse_collective_kind(nanscope::name(k), back));
    CHECK(back == k);
  }
  nanscope::collective_kind k{};
  CHECK_FALSE(nanscope::parse_collective_kind("allreduce", k));
  nanscope::communicator c{"tp", 2, 1, {4, 6}};
  CHECK(c.world_rank_of(1) == 6);
  CHECK(c.world_rank_of(2) == -1);
  nanscope::communicator plain{"w", 2, 0, {}};
  CHECK(plain.world_rank_of(1) == 1);
}

TEST_CASE("rank_evidence: sequence numbers per communicator and per (peer, tag, direction)") {
  nanscope::recorder rec(silent_options());
  nanscope::rank_evidence_options eo;
  eo.dir = temp_dir("seq");
  eo.rank = 0;
  eo.world_size = 2;
  nanscope::rank_evidence ev(rec, eo);
  CHECK(ev.next_collective_seq("a") == 0);
  CHECK(ev.next_collective_seq("a") == 1);
  CHECK(ev.next_collective_seq("b") == 0);
  CHECK(ev.next_pair_seq("a", 1, 0, true) == 0);
  CHECK(ev.next_pair_seq("a", 1, 0, true) == 1);
  CHECK(ev.next_pair_seq("a", 1, 0, false) == 0);
  CHECK(ev.next_pair_seq("a", 1, 5, true) == 0);
  CHECK(ev.next_pair_seq("a", 2, 0, true) == 0);
  CHECK(ev.writes() == 0);
  CHECK(list_dir(eo.dir).empty());  // nothing happened: nothing written
}

TEST_CASE("rank_evidence: writes from several threads leave the newest text on disk; dir is created with its parents") {
  // Texts were built in order under the lock but renamed after it: the older could land last, losing the
  // newer events (52 of 200 rounds here). And only the last level of dir was created.
  int stale = 0;
  const int rounds = 60;
  const std::string base = temp_dir("race");
  for (int round = 0; round < rounds; ++round) {
    nanscope::recorder rec(silent_options());
    nanscope::rank_evidence_options eo;
    eo.dir = base + "/a/b/evidence";  // missing parents
    eo.rank = 0;
    eo.world_size = 1;
    eo.max_events = 100000;
    nanscope::rank_evidence ev(rec, eo);
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&rec, &ev, t] {
        const std::vector<float> x(2, 1.0f);
        for (int i = 0; i < 5; ++i) {
          {
            nanscope::scope s(rec, "t" + std::to_string(t), "M");
            s.output(x);
          }
          ev.write("w");
        }
      });
    for (auto& th : ts) th.join();
    std::ifstream in(ev.path());
    std::stringstream text;
    text << in.rdbuf();
    // 20 frames, orders 0..19: the last text built holds all of them
    if (text.str().find("\"order\": 19,") == std::string::npos) ++stale;
  }
  CHECK(stale == 0);
}

TEST_CASE("rank_evidence: listens next to the other listeners and leaves them when it ends") {
  struct counting : nanscope::scope_listener {
    int opened = 0, tensors = 0, closed = 0;
    void scope_opened(const nanscope::frame&, bool) noexcept override { ++opened; }
    void tensor_recorded(const nanscope::frame&, const nanscope::tensor_record&) noexcept override { ++tensors; }
    void scope_closed(const nanscope::frame&, bool) noexcept override { ++closed; }
  } inner;
  nanscope::recorder rec(silent_options());
  rec.add_listener(&inner);
  {
    nanscope::rank_evidence_options eo;
    eo.dir = temp_dir("fwd");
    nanscope::rank_evidence ev(rec, eo);
    CHECK(rec.listener() == &ev);
    CHECK(rec.listener_count() == 2);
    CHECK(ev.attached());
    std::vector<float> x(4, 1.0f);
    nanscope::scope s(rec, "m", "M");
    s.input(x);
    s.output(x);
  }
  CHECK(rec.listener() == &inner);
  CHECK(rec.listener_count() == 1);
  CHECK(inner.opened == 1);
  CHECK(inner.tensors == 2);
  CHECK(inner.closed == 1);
}

#if NANSCOPE_TEST_HAVE_JSON
namespace {
nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}
}  // namespace

TEST_CASE("rank_evidence: the file written at detection holds the detecting frame and the transfers before it") {
  nanscope::recorder rec(silent_options());
  nanscope::rank_evidence_options eo;
  eo.dir = temp_dir("detect");
  eo.rank = 1;
  eo.world_size = 2;
  nanscope::rank_evidence ev(rec, eo);
  const nanscope::communicator world{"world", 2, 1, {0, 1}};
  std::vector<float> a(4, 1.0f), b(4, 2.0f);
  {
    nanscope::scope m(rec, "model", "M");
    {
      nanscope::scope s(rec, "l0", "Linear");
      s.input(a);
      s.output(b);
    }
    NANSCOPE_COLLECTIVE(ev, world, all_reduce, b, a, a[0] = 3.0f);
    {
      nanscope::scope s(rec, "l1", "Linear");
      s.input(a);
      b[2] = std::numeric_limits<float>::quiet_NaN();
      s.output(b);  // detection: the file is written before the scope closes
      CHECK(ev.detected());
      CHECK(ev.writes() == 1);
      const auto files = list_dir(eo.dir);
      REQUIRE(files.size() == 1);  // no temporary file left behind
      CHECK(files[0] == "nanscope_evidence_rank1of2.json");
      const auto j = read_json(ev.path());
      CHECK(j["format"] == "nanscope-rank-evidence");
      CHECK(j["rank"] == 1);
      CHECK(j["world_size"] == 2);
      CHECK(j["reason"] == "detection");
      CHECK(j["rank_source"] == "explicit");
      CHECK(j["detection"]["module_path"] == "model.l1");
      CHECK(j["detection"]["tensor"] == "output");
      const auto& evs = j["events"];
      REQUIRE(evs.size() == 3);
      CHECK(evs[0]["type"] == "frame");
      CHECK(evs[0]["module_path"] == "model.l0");
      CHECK(evs[1]["type"] == "collective");
      CHECK(evs[1]["kind"] == "all_reduce");
      CHECK(evs[1]["comm"] == "world");
      CHECK(evs[1]["seq"] == 0);
      CHECK(evs[1]["site"] == "model");
      CHECK(evs[1]["members"] == nlohmann::json::array({0, 1}));
      CHECK(evs[1]["input"]["nonfinite"] == false);
      CHECK(evs[2]["module_path"] == "model.l1");
      CHECK(evs[2]["complete"] == false);
      CHECK(evs[2]["tensors"][1]["health"]["nan"] == 1);
      CHECK(evs[2]["tensors"][1]["health"]["nonfinite"] == true);
      CHECK(evs[2]["order"] == 2);
    }
  }
  // a later write has the detecting frame complete, with the same program order, then its parent
  ev.write("exit");
  const auto j = read_json(ev.path());
  CHECK(j["reason"] == "exit");
  REQUIRE(j["events"].size() == 4);
  CHECK(j["events"][2]["module_path"] == "model.l1");
  CHECK(j["events"][2]["complete"] == true);
  CHECK(j["events"][2]["order"] == 2);
  CHECK(j["events"][3]["module_path"] == "model");
}

TEST_CASE("rank_evidence: a ring of max_events counts what it dropped; write_at_exit writes in the destructor") {
  const std::string dir = temp_dir("ring");
  std::string path;
  {
    nanscope::recorder rec(silent_options());
    nanscope::rank_evidence_options eo;
    eo.dir = dir;
    eo.rank = 0;
    eo.world_size = 1;
    eo.max_events = 3;
    eo.write_at_exit = true;
    nanscope::rank_evidence ev(rec, eo);
    path = ev.path();
    std::vector<float> x(2, 1.0f);
    for (int i = 0; i < 5; ++i) {
      nanscope::scope s(rec, "m" + std::to_string(i), "M");
      s.output(x);
    }
    CHECK(ev.writes() == 0);
  }
  const auto j = read_json(path);
  CHECK(j["reason"] == "exit");
  CHECK(j["dropped_events"] == 2);
  REQUIRE(j["events"].size() == 3);
  CHECK(j["events"][0]["module_path"] == "m2");
  CHECK(j["events"][0]["order"] == 2);
  CHECK(j["detection"].is_null());
}

TEST_CASE("rank_evidence: a failed write is an error (write throws; automatic writes report and go on)") {
  nanscope::recorder rec(silent_options());
  nanscope::rank_evidence_options eo;
  eo.dir = "/proc/nanscope_no_such_dir/x";
  eo.rank = 0;
  eo.world_size = 1;
  nanscope::rank_evidence ev(rec, eo);
  CHECK_THROWS_AS(ev.write("exit"), nanscope::error);
  std::vector<float> x(2, std::numeric_limits<float>::infinity());
  {
    nanscope::scope s(rec, "m", "M");
    s.output(x);
  }
  CHECK(ev.detected());
  CHECK(ev.last_error().find("nanscope_no_such_dir") != std::string::npos);
}

namespace {
// Four in-process ranks of a tensor-parallel step: layer0 (local), all_reduce, layer1, all_reduce, head.
// `bad_rank`/`bad_site` make a NaN; returns the directory of the four evidence files.
std::string run_fake_world(const char* tag, int bad_rank, const std::string& bad_site, int skip_rank = -1) {
  const std::string dir = temp_dir(tag);
  const int n = 4;
  std::vector<std::unique_ptr<nanscope::recorder>> recs;
  std::vector<std::unique_ptr<nanscope::rank_evidence>> evs;
  for (int r = 0; r < n; ++r) {
    nanscope::recorder_options ro = silent_options();
    ro.auto_step = false;  // the steps are set by hand below
    recs.push_back(std::make_unique<nanscope::recorder>(ro));
    nanscope::rank_evidence_options eo;
    eo.dir = dir;
    eo.rank = r;
    eo.world_size = n;
    evs.push_back(std::make_unique<nanscope::rank_evidence>(*recs.back(), eo));
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int step = 0; step < 3; ++step) {
    for (auto& rec : recs) rec->set_step(static_cast<std::uint64_t>(step));
    std::vector<std::vector<float>> part(n, std::vector<float>(4)), full(n, std::vector<float>(4, 0.0f));
    auto allreduce = [&](const char* site) {
      std::vector<float> sum(4, 0.0f);
      for (int r = 0; r < n; ++r)
        for (int i = 0; i < 4; ++i) sum[static_cast<std::size_t>(i)] += part[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
      for (int r = 0; r < n; ++r) {
        nanscope::communicator world{"world", n, r, {}};
        nanscope::collective_call c(*evs[static_cast<std::size_t>(r)], world, nanscope::collective_kind::all_reduce, site);
        c.input(part[static_cast<std::size_t>(r)]);
        full[static_cast<std::size_t>(r)] = sum;
        c.output(full[static_cast<std::size_t>(r)]);
      }
    };
    for (int r = 0; r < n; ++r) {
      nanscope::scope s(*recs[static_cast<std::size_t>(r)], "layer0", "Linear");
      for (int i = 0; i < 4; ++i) part[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)] = 0.5f * float(r + i);
      if (step == 1 && r == bad_rank && bad_site == "layer0") part[static_cast<std::size_t>(r)][1] = nan;
      s.output(part[static_cast<std::size_t>(r)]);
    }
    allreduce("reduce0");
    for (int r = 0; r < n; ++r) {
      nanscope::scope s(*recs[static_cast<std::size_t>(r)], "layer1", "Linear");
      s.input(full[static_cast<std::size_t>(r)]);
      part[static_cast<std::size_t>(r)] = full[static_cast<std::size_t>(r)];
      if (step == 1 && r == bad_rank && bad_site == "layer1") part[static_cast<std::size_t>(r)][0] = nan;
      s.output(part[static_cast<std::size_t>(r)]);
    }
    allreduce("reduce1");
    for (int r = 0; r < n; ++r) {
      nanscope::scope s(*recs[static_cast<std::size_t>(r)], "head", "Loss");
      s.input(full[static_cast<std::size_t>(r)]);
      std::vector<float> loss{full[static_cast<std::size_t>(r)][0]};
      if (step == 1 && r == bad_rank && bad_site == "head") loss[0] = nan;
      s.output(loss);
    }
  }
  for (int r = 0; r < n; ++r) {
    if (r != skip_rank) {
      evs[static_cast<std::size_t>(r)]->write("exit");
    } else {
      std::remove(evs[static_cast<std::size_t>(r)]->path().c_str());  // as if it had crashed before writing
    }
  }
  return dir;
}
}  // namespace

TEST_CASE("merge core on in-process ranks: the producer, the carrier, the receivers") {
  const std::string dir = run_fake_world("merge_allreduce", 2, "layer1");
  const auto r = nanscope_merge::merge_dir(dir);
  CHECK(r.exit == nanscope_merge::fault);
  REQUIRE(r.origins.size() == 1);
  CHECK(r.origins[0].rank == 2);
  CHECK(r.origins[0].step == 1);
  CHECK(r.origins[0].module_path == "layer1");
  CHECK(r.origins[0].tensor == "output");
  CHECK(r.origins[0].kind == "produced");
  CHECK(r.receivers == std::vector<int>{0, 1, 3});
  REQUIRE(r.chain.size() == 1);
  CHECK(r.chain[0].kind == "all_reduce");
  CHECK(r.chain[0].seq == 3);  // two per step: step 1's second one
  CHECK(r.chain[0].from == std::vector<int>{2});
  CHECK(r.chain[0].to == std::vector<int>{0, 1, 3});
  CHECK(r.chain[0].site == "reduce1");
  const auto j = nanscope_merge::to_json(r);
  CHECK(j["exit_code"] == 1);
  CHECK(j["origins"][0]["rank"] == 2);
  CHECK(nanscope_merge::to_text(r).find("first producing site: rank 2, step 1, layer1") != std::string::npos);
}

TEST_CASE("merge core: a fault after the last collective stays local; no fault gives exit 0") {
  const auto local = nanscope_merge::merge_dir(run_fake_world("merge_local", 1, "head"));
  CHECK(local.exit == nanscope_merge::fault);
  REQUIRE(local.origins.size() == 1);
  CHECK(local.origins[0].rank == 1);
  CHECK(local.origins[0].module_path == "head");
  CHECK(local.local_only);
  CHECK(local.receivers.empty());
  const auto clean = nanscope_merge::merge_dir(run_fake_world("merge_clean", -1, ""));
  CHECK(clean.exit == nanscope_merge::no_fault);
  CHECK(clean.origins.empty());
}

TEST_CASE("merge core: a missing rank's file is exit 3, naming it, with the attribution among the rest") {
  const auto r = nanscope_merge::merge_dir(run_fake_world("merge_missing", 2, "layer0", /*skip_rank=*/3));
  CHECK(r.exit == nanscope_merge::incomplete);
  CHECK(r.missing == std::vector<int>{3});
  REQUIRE(r.origins.size() == 1);
  CHECK(r.origins[0].rank == 2);
  CHECK(nanscope_merge::to_text(r).find("missing: rank 3") != std::string::npos);
  // the producer's own file missing: the receivers know the NaN came through all_reduce #0 but not from whom
  const auto q = nanscope_merge::merge_dir(run_fake_world("merge_missing_producer", 2, "layer0", 2));
  CHECK(q.exit == nanscope_merge::incomplete);
  CHECK(q.origins.empty());
  CHECK(q.receivers == std::vector<int>{0, 1, 3});
  REQUIRE(q.chain.size() == 1);
  CHECK(q.chain[0].text.find("carried it from a rank without a record of it to ranks 0, 1, 3") != std::string::npos);
  bool named = false;
  for (const auto& n : q.notes) named = named || n.find("no record of it from rank 2") != std::string::npos;
  CHECK(named);
}

namespace {
nlohmann::json frame_ev(std::uint64_t order, std::uint64_t step, const char* path, bool in_bad, bool out_bad) {
  auto h = [](bool bad) { return nlohmann::json::object({{"nonfinite", bad}}); };
  return {{"order", order},
          {"type", "frame"},
          {"step", step},
          {"module_path", path},
          {"tensors",
           {{{"role", "input"}, {"context", "input[0]"}, {"health", h(in_bad)}},
            {{"role", "output"}, {"context", "output"}, {"health", h(out_bad)}}}}};
}
nlohmann::json coll_ev(std::uint64_t order, std::uint64_t seq, const char* kind, bool in_bad, bool out_bad) {
  return {{"order", order}, {"type", "collective"}, {"kind", kind},  {"step", 0},
          {"comm", "w"},    {"comm_size", 2},       {"comm_rank", 0}, {"seq", seq},
          {"input", nlohmann::json::object({{"nonfinite", in_bad}})},
          {"output", nlohmann::json::object({{"nonfinite", out_bad}})}};
}
// The events as a vector: a one-element braced list converted to nlohmann::json is a copy under some compilers
// and an array under others.
nlohmann::json rank_json(int rank, int world, const std::vector<nlohmann::json>& events) {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& e : events) arr.push_back(e);
  return {{"format", "nanscope-rank-evidence"}, {"version", 1}, {"rank", rank}, {"world_size", world},
          {"events", arr}};
}
std::vector<nanscope_merge::rank_file> parse_all(const std::vector<nlohmann::json>& js) {
  std::vector<nanscope_merge::rank_file> out;
  for (std::size_t i = 0; i < js.size(); ++i) out.push_back(nanscope_merge::parse_rank_file(js[i], "r" + std::to_string(i)));
  return out;
}
}  // namespace

TEST_CASE("merge core on synthetic files: conflicting sequence numbers and bad files are errors") {
  // rank 0 says collective #0 is an all_reduce, rank 1 a broadcast
  auto files = parse_all({rank_json(0, 2, {coll_ev(0, 0, "all_reduce", false, false)}),
                          rank_json(1, 2, {coll_ev(0, 0, "broadcast", false, false)})});
  CHECK_THROWS_WITH_AS(nanscope_merge::analyse(files),
                       doctest::Contains("conflicting sequence numbers: collective #0 on 'w'"),
                       nanscope_merge::input_error);
  // the same collective twice on one rank
  auto twice = parse_all({rank_json(0, 2, {coll_ev(0, 0, "all_reduce", false, false), coll_ev(1, 0, "all_reduce", false, false)})});
  CHECK_THROWS_AS(nanscope_merge::analyse(twice), nanscope_merge::input_error);
  // world sizes disagree; two files for one rank
  CHECK_THROWS_AS(nanscope_merge::analyse(parse_all({rank_json(0, 2, {}),
                                                     rank_json(1, 3, {})})),
                  nanscope_merge::input_error);
  CHECK_THROWS_AS(nanscope_merge::analyse(parse_all({rank_json(0, 2, {}),
                                                     rank_json(0, 2, {})})),
                  nanscope_merge::input_error);
  // program order going backwards, an impossible rank, a missing field, a wrong type
  CHECK_THROWS_WITH_AS(
      nanscope_merge::parse_rank_file(rank_json(0, 1, {frame_ev(3, 0, "a", false, false), frame_ev(2, 0, "b", false, false)}), "f.json"),
      doctest::Contains("f.json: event 1: order 2 does not follow 3"), nanscope_merge::input_error);
  CHECK_THROWS_AS(nanscope_merge::parse_rank_file(rank_json(2, 2, {}), "f"), nanscope_merge::input_error);
  auto nofmt = rank_json(0, 1, {});
  nofmt.erase("format");
  CHECK_THROWS_AS(nanscope_merge::parse_rank_file(nofmt, "f"), nanscope_merge::input_error);
  auto badtype = rank_json(0, 1, {});
  badtype["rank"] = "zero";
  CHECK_THROWS_WITH_AS(nanscope_merge::parse_rank_file(badtype, "f"), doctest::Contains("\"rank\" is not an integer"),
                       nanscope_merge::input_error);
}

TEST_CASE("merge core on synthetic files: a wrong type, a non-integer or an out-of-range number is an error naming it") {
  const auto fails = [](const nlohmann::json& j, const char* what) {
    CHECK_THROWS_WITH_AS(nanscope_merge::parse_rank_file(j, "f.json"), doctest::Contains(what), nanscope_merge::input_error);
  };
  const auto with = [](const char* key, const nlohmann::json& v) {
    auto j = rank_json(0, 2, {frame_ev(0, 0, "a", false, false)});
    j[key] = v;
    return j;
  };
  // optional keys with the wrong type (json::value() threw a json::type_error here: the tool aborted)
  fails(with("host", 5), "\"host\" has the wrong type");
  fails(with("reason", nlohmann::json::array()), "\"reason\" has the wrong type");
  fails(with("pid", "x"), "\"pid\" is not an integer");
  fails(with("dropped_events", -1), "\"dropped_events\" is out of range");
  const auto event_with = [](const char* key, const nlohmann::json& v, bool in_tensor) {
    auto e = frame_ev(0, 0, "a", false, false);
    (in_tensor ? e["tensors"][0][key] : e[key]) = v;
    return rank_json(0, 2, {e});
  };
  fails(event_with("class", 5, false), "\"class\" has the wrong type");
  fails(event_with("complete", "yes", false), "\"complete\" has the wrong type");
  fails(event_with("tensor", "no", true), "\"tensor\" has the wrong type");
  fails(event_with("allowed", 1, true), "\"allowed\" has the wrong type");
  auto site = coll_ev(0, 0, "all_reduce", false, false);
  site["site"] = 5;
  fails(rank_json(0, 2, {site}), "\"site\" has the wrong type");
  // numbers converted silently before: 2^32 wrapped to rank 0, 0.9 truncated, -5 became 2^64 - 5
  fails(with("rank", 4294967296LL), "\"rank\" is out of range");
  fails(with("world_size", 4294967297LL), "\"world_size\" is out of range");
  fails(with("rank", 0.9), "\"rank\" is not an integer");
  fails(with("rank", 1e300), "\"rank\" is not an integer");
  fails(with("version", 1.5), "\"version\" is not an integer");
  auto neg = frame_ev(0, 0, "a", false, false);
  neg["step"] = -5;
  fails(rank_json(0, 2, {neg}), "\"step\" is out of range");
  // sizes that made the tool allocate per rank (2e9 ranks: about 16 GB, then std::bad_alloc)
  fails(rank_json(0, 2000000000, {}), "world size 2000000000 is beyond this tool's limit");
  auto big = coll_ev(0, 0, "all_reduce", false, true);
  big["comm_size"] = 2000000000;
  fails(rank_json(0, 2, {big}), "communicator size 2000000000 is impossible in world size 2");
  auto rank_past = coll_ev(0, 0, "all_reduce", false, false);
  rank_past["comm_rank"] = 2;
  fails(rank_json(0, 2, {rank_past}), "rank 2 of communicator size 2 is impossible");
  auto member = coll_ev(0, 0, "all_reduce", false, false);
  member["members"] = {0, 7};
  fails(rank_json(0, 2, {member}), "members[1] is 7, not a rank of world size 2");
  member["members"] = {0, {1}};
  fails(rank_json(0, 2, {member}), "members[1] is not an integer (array)");
  member["members"] = {0, 1.0};
  fails(rank_json(0, 2, {member}), "members[1] is not an integer (number)");
  auto peer = coll_ev(0, 0, "send", false, false);
  peer["type"] = "send";
  peer["peer"] = 5;
  peer["tag"] = 0;
  fails(rank_json(0, 2, {peer}), "peer 5 is not a rank of communicator size 2");
  // the same files with good values parse
  CHECK_NOTHROW(nanscope_merge::parse_rank_file(with("host", "node1"), "f.json"));
  member["members"] = {0, 1};
  CHECK_NOTHROW(nanscope_merge::parse_rank_file(rank_json(0, 2, {member}), "f.json"));
}

TEST_CASE("merge core on synthetic files: happens-before, not file order or clocks, picks the producer") {
  // rank 1 produces a local NaN before collective #0 (the collective's input stays finite); rank 0 produces one
  // after collective #0, whose output depends on rank 1's input to it: rank 1's happens before rank 0's.
  auto ordered = parse_all({rank_json(0, 2, {coll_ev(0, 0, "all_gather", false, false), frame_ev(1, 0, "late", false, true)}),
                            rank_json(1, 2, {frame_ev(0, 0, "early", false, true), coll_ev(1, 0, "all_gather", false, false)})});
  auto r = nanscope_merge::analyse(ordered);
  CHECK(r.exit == nanscope_merge::fault);
  REQUIRE(r.origins.size() == 1);
  CHECK(r.origins[0].rank == 1);
  CHECK(r.origins[0].module_path == "early");
  REQUIRE(r.later_producers.size() == 1);
  CHECK(r.later_producers[0].rank == 0);
  // both before the collective: concurrent, both named
  auto tie = parse_all({rank_json(0, 2, {frame_ev(0, 0, "a", false, true), coll_ev(1, 0, "all_gather", false, false)}),
                        rank_json(1, 2, {frame_ev(0, 0, "b", false, true), coll_ev(1, 0, "all_gather", false, false)})});
  auto t = nanscope_merge::analyse(tie);
  CHECK(t.origins.size() == 2);
  CHECK(nanscope_merge::to_json(t)["concurrent"] == true);
  // every input finite, every output not: the reduction itself overflowed
  auto ovf = parse_all({rank_json(0, 2, {coll_ev(0, 0, "all_reduce", false, true)}),
                        rank_json(1, 2, {coll_ev(0, 0, "all_reduce", false, true)})});
  auto o = nanscope_merge::analyse(ovf);
  CHECK(o.exit == nanscope_merge::fault);
  REQUIRE(o.origins.size() == 2);
  CHECK(o.origins[0].kind == "reduction");
  REQUIRE(o.chain.size() == 1);
  CHECK(o.chain[0].text.find("all_reduce #0 on 'w' made it (every input finite) on ranks 0, 1") != std::string::npos);
  // an input that is bad on the first event seen, with older events dropped from the ring: incomplete
  auto dropped = rank_json(0, 1, {frame_ev(10, 0, "x", true, true)});
  dropped["dropped_events"] = 10;
  auto d = nanscope_merge::analyse(parse_all({dropped}));
  CHECK(d.exit == nanscope_merge::incomplete);
  REQUIRE(d.origins.size() == 1);
  CHECK(d.origins[0].kind == "input");
}

TEST_CASE("merge_dir: no files is exit 3, a missing directory and a damaged file are exit 2") {
  const std::string dir = temp_dir("merge_empty");
  REQUIRE(std::system(("mkdir -p '" + dir + "'").c_str()) == 0);
  CHECK(nanscope_merge::merge_dir(dir).exit == nanscope_merge::incomplete);
  CHECK(nanscope_merge::merge_dir(dir + "/nope").exit == nanscope_merge::error);
  {
    std::ofstream other(dir + "/other.json");
    other << "{\"not\": \"evidence\"}";
  }
  CHECK(nanscope_merge::merge_dir(dir).exit == nanscope_merge::incomplete);  // other JSON files are ignored
  {
    std::ofstream bad(dir + "/nanscope_evidence_rank0of2.json");
    bad << "{\"format\": \"nanscope-rank-evi";
  }
  const auto r = nanscope_merge::merge_dir(dir);
  CHECK(r.exit == nanscope_merge::error);
  CHECK(r.error.find("nanscope_evidence_rank0of2.json: not valid JSON") != std::string::npos);
  std::remove((dir + "/nanscope_evidence_rank0of2.json").c_str());
  // another file whose "format" is not a string is ignored (it threw json::type_error: the tool aborted)
  {
    std::ofstream odd(dir + "/odd.json");
    odd << "{\"format\": 5}";
  }
  CHECK(nanscope_merge::merge_dir(dir).exit == nanscope_merge::incomplete);
  // a FIFO is never opened (the tool blocked in open() for ever): ignored, or an error when it has an evidence name
  REQUIRE(::mkfifo((dir + "/pipe.json").c_str(), 0600) == 0);
  CHECK(nanscope_merge::merge_dir(dir).exit == nanscope_merge::incomplete);
  REQUIRE(::mkfifo((dir + "/nanscope_evidence_rank0of1.json").c_str(), 0600) == 0);
  const auto f = nanscope_merge::merge_dir(dir);
  CHECK(f.exit == nanscope_merge::error);
  CHECK(f.error.find("nanscope_evidence_rank0of1.json: not a regular file") != std::string::npos);
  std::remove((dir + "/nanscope_evidence_rank0of1.json").c_str());
  // a wrong-typed optional key in an evidence file is exit 2 naming the file
  {
    std::ofstream bad(dir + "/nanscope_evidence_rank0of1.json");
    bad << "{\"format\": \"nanscope-rank-evidence\", \"version\": 1, \"rank\": 0, \"world_size\": 1, \"host\": 5, "
           "\"events\": []}";
  }
  const auto h = nanscope_merge::merge_dir(dir);
  CHECK(h.exit == nanscope_merge::error);
  CHECK(h.error.find("nanscope_evidence_rank0of1.json: \"host\" has the wrong type") != std::string::npos);
  // a member nested a million levels deep (2 MB): an error naming the file, not a stack overflow (the member
  // was copied into a new JSON value, a recursion per level)
  {
    auto ev = coll_ev(0, 0, "all_reduce", false, false);
    ev["members"] = "DEEP";
    std::string text = rank_json(0, 2, {ev}).dump();
    const std::size_t at = text.find("\"DEEP\"");
    REQUIRE(at != std::string::npos);
    text.replace(at, 6, std::string(1000000, '[') + std::string(1000000, ']'));
    std::ofstream deep(dir + "/nanscope_evidence_rank0of1.json");
    deep << text;
  }
  const auto d = nanscope_merge::merge_dir(dir);
  CHECK(d.exit == nanscope_merge::error);
  CHECK(d.error.find("nanscope_evidence_rank0of1.json: nested more than 64 levels deep") != std::string::npos);
}
#endif  // NANSCOPE_TEST_HAVE_JSON

TEST_CASE("process_rank: file names and reports take the rank from one resolution order") {
  env_guard g;
  for (const char* v : launcher_vars) g.unset(v);
  g.unset("LOCAL_RANK");
  nanscope::set_process_rank(-1, 0);  // no explicit rank: the environment decides
  // srun + torchrun: both pairs are set. rank.hpp's order gives Slurm's; the tree and snapshot names
  // (detail::parse_env_rank) used to read RANK first and disagreed with the report line.
  g.set("RANK", "1");
  g.set("WORLD_SIZE", "8");
  g.set("SLURM_PROCID", "3");
  g.set("SLURM_NTASKS", "4");
  CHECK(nanscope::rank_from_environment().rank == 3);
  CHECK(nanscope::detail::parse_env_rank() == 3);
  // RANK alone (no WORLD_SIZE) is no launcher pair: file names still fall back to it.
  g.unset("SLURM_PROCID");
  g.unset("WORLD_SIZE");
  CHECK_FALSE(nanscope::rank_from_environment().known());
  CHECK(nanscope::detail::parse_env_rank() == 1);
}

TEST_CASE("rank_evidence and controller: the recorder destroyed first is not touched again; the exit write happens") {
  // The evidence read the recorder's step in its exit write, and both detached from it, after it was freed
  // (ASan: heap-use-after-free).
  auto rec = std::make_unique<nanscope::recorder>(silent_options());
  nanscope::rank_evidence_options eo;
  eo.dir = temp_dir("gone");
  eo.rank = 0;
  eo.world_size = 1;
  eo.write_at_exit = true;
  auto ev = std::make_unique<nanscope::rank_evidence>(*rec, eo);
  auto ctl = std::make_unique<nanscope::controller>();
  ctl->attach(*rec);
  rec->set_step(7);
  const std::string path = ev->path();
  rec.reset();
  ev.reset();
  ctl.reset();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(text.str().find("\"reason\": \"exit\"") != std::string::npos);
  CHECK(text.str().find("\"step\": 7") != std::string::npos);
}
