// Atomic tree files under SIGKILL: a child process writes layer trees (about 4 MB of FULL_TENSORS per pass)
// in a loop and is killed at varying moments. Whatever the moment, each target file is either absent (no pass
// finished yet) or a complete tree that nlohmann-json parses, with every node and the "complete" flag; never a
// truncated file. The test also makes sure that some kills did land while a new file was half written next to
// an older complete one, the case the temp-file-and-rename scheme exists for.
#include <doctest/doctest.h>
#include <nanscope/tree.hpp>

#include "support/recorder_support.hpp"

#if NANSCOPE_TEST_HAVE_JSON && NANSCOPE_TEST_HAVE_FORK
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

namespace {
constexpr int kill_leaves = 300;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.' || std::string(e->d_name).find(".tmp.") != std::string::npos) out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}

[[noreturn]] void write_trees_forever(const std::string& dir) {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  nanscope::recorder rec(o);
  nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).with_style(nanscope::tree_style::numeric));
  std::vector<float> x(900);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 50.0f;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {  // a safety net only
    nanscope::scope root(rec, "", "Killed");
    for (int i = 0; i < kill_leaves; ++i) {
      nanscope::scope s(rec, "leaf" + std::to_string(i), "Leaf");
      s.output(nanscope::tensor_view::contiguous(x.data(), nanscope::dtype::f32, {900}));
    }
  }
  ::_exit(3);
}

void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (::nanosleep(&ts, &ts) != 0) {
  }
}
}  // namespace

TEST_CASE("tree: a writer killed with SIGKILL at any moment never leaves a truncated tree file") {
  char tmpl[] = "/tmp/nanscope_tree_kill_XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const char* const targets[] = {"Killed_debug_tree_SUMMARY.json", "Killed_debug_tree_FULL_TENSORS.json"};
  int complete_files = 0, kills_mid_write_over_old = 0;
  for (int round = 0; round < 14; ++round) {
    CAPTURE(round);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) write_trees_forever(dir);
    sleep_ms(40 + 37 * round);  // kills from early in the first pass to several passes in
    // what was on disk just before the kill: an older complete file and a new one being written
    bool old_target = false, temp = false;
    for (const auto& e : entries(dir)) {
      if (e.find(".tmp.") != std::string::npos) temp = true;
      if (e == targets[1]) old_target = true;
    }
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    if (old_target && temp) ++kills_mid_write_over_old;
    for (const char* t : targets) {
      const std::string path = dir + "/" + t;
      std::ifstream f(path, std::ios::binary);
      if (!f) continue;  // no pass had finished: no file is fine
      std::stringstream ss;
      ss << f.rdbuf();
      nlohmann::json j;
      bool parsed = true;
      try {
        j = nlohmann::json::parse(ss.str());
      } catch (const std::exception& e) {
        parsed = false;
        FAIL_CHECK(path << " is not valid JSON after SIGKILL (" << ss.str().size() << " bytes): " << e.what());
      }
      if (!parsed) continue;
      CHECK(j["module_path"] == "Killed");
      CHECK(j["children"].size() == static_cast<std::size_t>(kill_leaves));
      CHECK(j["nanscope"]["complete"] == true);
      ++complete_files;
    }
  }
  MESSAGE(complete_files << " complete files checked; " << kills_mid_write_over_old
                         << " kills while a new file was being written over an old one");
  CHECK(complete_files > 0);
  CHECK(kills_mid_write_over_old > 0);
}

#endif
