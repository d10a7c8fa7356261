// Crash consistency of the tree files under SIGKILL (issue 13 items 12 and 13). A child process writes layer
// trees in a loop; each pass records its own number as the root's input, so the two files of a pass can be
// matched independently of the writer's "nanscope_pair" key. Checked with nlohmann-json after every kill:
//  - every target present is complete JSON (never truncated) with every node and complete = true;
//  - when SUMMARY and FULL_TENSORS are both present they are of the same pass: equal "nanscope_pair" and equal
//    pass number in the data;
//  - temporaries of killed writers do not pile up: the next writer removes them, and once a writer has
//    finished a pass none is left.
// One test kills at random moments (40 kills, delays drawn from the measured pass time, bounded to a few
// seconds); another kills deterministically at every stage of the commit (the test hook
// detail::tree_commit_probe), with and without extras — the old SUMMARY-then-FULL order left SUMMARY of pass N
// next to FULL_TENSORS of pass N-1 there.
#include <doctest/doctest.h>
#include "support/files.hpp"

#include <nanscope/tree.hpp>

#include "support/recorder_support.hpp"

#if NANSCOPE_TEST_HAVE_JSON && NANSCOPE_TEST_HAVE_FORK
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {
#if defined(NANSCOPE_TEST_QUICK)
constexpr int kill_leaves = 120;
#else
constexpr int kill_leaves = 300;
#endif
const char* const summary_name = "Killed_debug_tree_SUMMARY.json";
const char* const full_name = "Killed_debug_tree_FULL_TENSORS.json";

std::vector<std::string> temporaries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : nstest::list_dir(dir))
    if (e.find(".tmp.") != std::string::npos) out.push_back(e);
  return out;
}
/// The pid in ".{name}.tmp.{pid}.{...}".
long temp_pid(const std::string& name) {
  const std::size_t at = name.find(".tmp.");
  return at == std::string::npos ? -1 : std::strtol(name.c_str() + at + 5, nullptr, 10);
}

/// One pass: the root's input is the pass number (numeric style: "min" is that number).
void write_pass(nanscope::recorder& rec, float pass, const std::vector<float>& x) {
  nanscope::scope root(rec, "", "Killed");
  const std::vector<float> id{pass, pass};
  root.input(id);
  for (int i = 0; i < kill_leaves; ++i) {
    nanscope::scope s(rec, "leaf" + std::to_string(i), "Leaf");
    s.output(nanscope::tensor_view::contiguous(x.data(), nanscope::dtype::f32, {static_cast<std::int64_t>(x.size())}));
  }
}
std::vector<float> leaf_data() {
  std::vector<float> x(900);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 50.0f;
  return x;
}
nanscope::tree_options kill_options(const std::string& dir, bool extras) {
  return nanscope::tree_options{}.in(dir).with_rank(0).with_style(nanscope::tree_style::numeric).with_extras(extras);
}

int probe_stage = 0;      // the child's commit stage to die at (0: never)
int probe_pass = 0;       // ... during this pass
int passes_committed = 0;
void die_at_stage(int stage) {
  if (stage == probe_stage && passes_committed + 1 == probe_pass) ::raise(SIGKILL);
  if (stage == 3) ++passes_committed;
}

[[noreturn]] void write_trees_forever(const std::string& dir, bool extras, float first_pass) {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  nanscope::recorder rec(o);
  nanscope::tree_writer w(rec, kill_options(dir, extras));
  const std::vector<float> x = leaf_data();
  const auto start = std::chrono::steady_clock::now();
  float pass = first_pass;
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {  // a safety net only
    write_pass(rec, pass, x);
    pass += 1.0f;
  }
  ::_exit(3);
}

void sleep_us(long us) {
  timespec ts{us / 1000000, (us % 1000000) * 1000L};
  while (::nanosleep(&ts, &ts) != 0) {
  }
}

nlohmann::json load_json(const std::string& path, bool& present) {
  std::ifstream f(path, std::ios::binary);
  present = static_cast<bool>(f);
  if (!present) return nlohmann::json();
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const std::exception& e) {
    FAIL_CHECK(path << " is not valid JSON after SIGKILL (" << ss.str().size() << " bytes): " << e.what());
    return nlohmann::json();
  }
}

/// Checks the targets in `dir`; returns the number of complete files seen; counts matched pairs.
int check_targets(const std::string& dir, bool extras, int& pairs) {
  bool has_s = false, has_f = false;
  const nlohmann::json s = load_json(dir + "/" + summary_name, has_s);
  const nlohmann::json f = load_json(dir + "/" + full_name, has_f);
  int complete = 0;
  for (const nlohmann::json* j : {&s, &f}) {
    if (j->is_null()) continue;
    CHECK((*j)["module_path"] == "Killed");
    CHECK((*j)["children"].size() == static_cast<std::size_t>(kill_leaves));
    if (extras) {
      CHECK((*j)["nanscope"]["complete"] == true);
      REQUIRE((*j).contains("nanscope_pair"));
    }
    ++complete;
  }
  if (!s.is_null() && !f.is_null()) {
    ++pairs;
    // the pass number recorded as data: the two files must be of the same pass
    CHECK(s["inputs"]["args"][0]["min"] == f["inputs"]["args"][0]["min"]);
    if (extras) {
      CHECK(s["nanscope_pair"] == f["nanscope_pair"]);
      CHECK(s["nanscope_pair"]["run"].is_string());
      CHECK(s["nanscope_pair"]["pass"].is_number_unsigned());
    }
  }
  return complete;
}

/// "nanscope_pair" is the root object's last key (the raw text, since nlohmann sorts keys).
void check_pair_is_last(const std::string& path) {
  if (!nstest::exists(path)) return;
  const std::string t = nstest::read_text(path);
  const std::size_t at = t.rfind("\n  \"nanscope_pair\": {");
  REQUIRE(at != std::string::npos);
  const std::size_t close = t.find("\n  }", at);
  REQUIRE(close != std::string::npos);
  CHECK(t.substr(close) == "\n  }\n}");
}

pid_t start_writer(const std::string& dir, bool extras, float first_pass) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) write_trees_forever(dir, extras, first_pass);
  return pid;
}
void kill_and_reap(pid_t pid) {
  ::kill(pid, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
}

std::string make_dir(const char* tag) { return nstest::make_temp_dir(std::string("tree_kill_") + tag); }
void remove_dir(const std::string& dir) {
  for (const auto& e : nstest::list_dir(dir)) ::unlink((dir + "/" + e).c_str());
  ::rmdir(dir.c_str());
}

/// A writer that finishes one pass in this process: afterwards no temporary may be left in `dir`.
void finish_one_pass_here(const std::string& dir, bool extras) {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  nanscope::recorder rec(o);
  nanscope::tree_writer w(rec, kill_options(dir, extras));
  write_pass(rec, 1e6f, leaf_data());
  REQUIRE(w.trees_written() == 1);
}
}  // namespace

TEST_CASE("tree: 40 SIGKILLs at random moments never leave a truncated file, a mismatched pair or stale temporaries") {
  const std::string dir = make_dir("random");
  // the time of one pass here (with fork and sanitizers as they are in this build) scales the kill delays
  const auto t0 = std::chrono::steady_clock::now();
  finish_one_pass_here(dir, true);
  const long pass_us = static_cast<long>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count());
  MESSAGE("one pass takes about " << pass_us / 1000 << " ms");
  std::mt19937 rng(20261125u);
  std::uniform_int_distribution<long> delay(0, 2 * pass_us + 5000);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int kills = 0, complete_files = 0, pairs = 0, kills_mid_write_over_old = 0, max_stale = 0;
  for (int round = 0; round < 40 && std::chrono::steady_clock::now() < deadline; ++round) {
    CAPTURE(round);
    const pid_t pid = start_writer(dir, true, static_cast<float>(round * 1000));
    sleep_us(delay(rng));
    bool old_target = false, temp = false;
    for (const auto& e : nstest::list_dir(dir)) {
      if (e.find(".tmp.") != std::string::npos && temp_pid(e) == pid) temp = true;
      if (e == full_name) old_target = true;
    }
    kill_and_reap(pid);
    ++kills;
    if (old_target && temp) ++kills_mid_write_over_old;
    complete_files += check_targets(dir, true, pairs);
    check_pair_is_last(dir + "/" + summary_name);
    check_pair_is_last(dir + "/" + full_name);
    // temporaries of dead writers do not pile up: a writer's first pass removes those of every earlier one, so
    // only the last writer that began a pass can have left any
    std::set<long> dead;
    for (const auto& t : temporaries(dir)) dead.insert(temp_pid(t));
    max_stale = std::max(max_stale, static_cast<int>(dead.size()));
    CHECK(dead.size() <= 1);
  }
  finish_one_pass_here(dir, true);
  CHECK(temporaries(dir).empty());
  complete_files += check_targets(dir, true, pairs);
  MESSAGE(kills << " kills; " << complete_files << " complete files and " << pairs << " pairs checked; "
                << kills_mid_write_over_old << " kills while a new file was being written over an old one");
  CHECK(kills >= 40);
  CHECK(complete_files > 0);
  CHECK(pairs > 0);
  CHECK(kills_mid_write_over_old > 0);
  remove_dir(dir);
}

TEST_CASE("tree: a kill at every stage of the commit leaves a matched pair or a single file") {
  for (bool extras : {true, false}) {
    for (int stage = 1; stage <= 3; ++stage) {
      CAPTURE(extras);
      CAPTURE(stage);
      const std::string dir = make_dir("stage");
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        probe_stage = stage;
        probe_pass = 2;  // pass 1 is committed, pass 2 dies at `stage`
        nanscope::detail::tree_commit_probe().store(&die_at_stage);
        write_trees_forever(dir, extras, 1.0f);
      }
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      REQUIRE(WIFSIGNALED(status));
      CHECK(WTERMSIG(status) == SIGKILL);
      int pairs = 0;
      const int files = check_targets(dir, extras, pairs);
      // stage 1: the old SUMMARY is gone, the old FULL stays; stage 2: the new FULL alone; stage 3: the new pair
      CHECK(files == (stage == 3 ? 2 : 1));
      CHECK(pairs == (stage == 3 ? 1 : 0));
      bool present = false;
      const nlohmann::json f = load_json(dir + "/" + full_name, present);
      REQUIRE(present);
      CHECK(f["inputs"]["args"][0]["min"] == (stage == 1 ? 1.0 : 2.0));
      if (extras) CHECK(f["nanscope_pair"]["pass"] == (stage == 1 ? 1 : 2));
      remove_dir(dir);
    }
  }
}

TEST_CASE("tree: the next writer removes temporaries of dead writers only") {
  const std::string dir = make_dir("stale");
  // a writer killed mid-pass leaves its temporaries
  const pid_t pid = start_writer(dir, true, 1.0f);
  for (int spin = 0; spin < 20000 && temporaries(dir).size() < 2; ++spin) sleep_us(200);
  REQUIRE(temporaries(dir).size() == 2);
  kill_and_reap(pid);
  REQUIRE(!temporaries(dir).empty());
  // a live writer's temporary (this process, another writer instance) and foreign files stay
  nanscope::detail::atomic_file live(dir + "/" + summary_name);
  live.write("x", 1);
  const std::string other = dir + "/.notours.tmp.1.2.3.4";
  std::ofstream(other) << "keep";
  finish_one_pass_here(dir, true);
  const std::vector<std::string> left = temporaries(dir);
  REQUIRE(left.size() == 2);
  for (const auto& t : left) CHECK((dir + "/" + t == live.temp_path() || dir + "/" + t == other));
  live.discard();
  remove_dir(dir);
}

#endif
