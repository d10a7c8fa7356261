// Snapshot on detection: the offending tensor and the producing frame's inputs/parameters are written as .npy
// files (read back here with read_npy and compared element by element) next to a JSON index (parsed with
// nlohmann-json when available).
#include <doctest/doctest.h>
#include <nanscope/nanscope.hpp>

#include "support/files.hpp"
#include "support/recorder_support.hpp"

#if NANSCOPE_TEST_HAVE_JSON
#include <nlohmann/json.hpp>
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

namespace {
using nstest::read_text;
/// The directory's names without hidden ones (a writer's temporaries start with '.').
std::vector<std::string> visible_files(const std::string& dir) {
  std::vector<std::string> out;
  for (std::string& name : nstest::list_dir(dir))
    if (name[0] != '.') out.push_back(std::move(name));
  return out;
}
template <class T>
std::vector<T> as_vector(const nanscope::npy_array& a) {
  std::vector<T> v(a.bytes.size() / sizeof(T));
  std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
  return v;
}
bool same_float_bits(float a, float b) {
  std::uint32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return x == y;
}
}  // namespace

TEST_CASE("snapshot: the producing frame's inputs and the offending output are written as .npy with an index") {
  const std::string dir = nstest::make_temp_dir("snapshot");
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  o.snapshot_dir = dir;
  nanscope::recorder rec(o);

  std::vector<float> x{1.0f, -2.0f, 3.0f, 0.5f, -0.25f, 8.0f};
  const std::vector<float> w{0.5f, 1.5f};
  std::vector<float> y(x.size());
  {
    nanscope::scope s(rec, "layer.3", "Log\"Op");  // a quote in the class name must stay valid JSON
    s.parameter(w, "weight");
    s.input(nanscope::view_of(x.data(), {2, 3}));
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = std::log(x[i]);  // NaN for the negative ones
    s.output(nanscope::view_of(y.data(), {2, 3}));
  }
  REQUIRE(rec.detections() == 1);

  const std::vector<std::string> files = visible_files(dir);
  std::string index_file;
  std::vector<std::string> npys;
  for (const auto& f : files) {
    if (f.size() > 11 && f.compare(f.size() - 11, 11, "_index.json") == 0) index_file = f;
    if (f.size() > 4 && f.compare(f.size() - 4, 4, ".npy") == 0) npys.push_back(f);
  }
  REQUIRE(!index_file.empty());
  CHECK(npys.size() == 3);  // the offending output, the input, the weight

  // every file reads back with the exact recorded values
  int seen_output = 0, seen_input = 0, seen_weight = 0;
  for (const auto& f : npys) {
    const nanscope::npy_array a = nanscope::read_npy(dir + "/" + f);
    CHECK(a.type == nanscope::dtype::f32);
    const std::vector<float> v = as_vector<float>(a);
    const std::vector<float>* expect = nullptr;
    if (f.find("output") != std::string::npos) {
      expect = &y;
      ++seen_output;
      CHECK(a.shape == std::vector<std::int64_t>{2, 3});
    } else if (f.find("input") != std::string::npos) {
      expect = &x;
      ++seen_input;
      CHECK(a.shape == std::vector<std::int64_t>{2, 3});
    } else if (f.find("weight") != std::string::npos) {
      expect = &w;
      ++seen_weight;
    }
    REQUIRE(expect != nullptr);
    REQUIRE(v.size() == expect->size());
    for (std::size_t i = 0; i < v.size(); ++i) CHECK(same_float_bits(v[i], (*expect)[i]));
  }
  CHECK(seen_output == 1);
  CHECK(seen_input == 1);
  CHECK(seen_weight == 1);

  const std::string index = read_text(dir + "/" + index_file);
#if NANSCOPE_TEST_HAVE_JSON
  const nlohmann::json j = nlohmann::json::parse(index);
  CHECK(j["step"] == 0);
  CHECK(j["module_path"] == "layer.3");
  CHECK(j["class"] == "Log\"Op");
  CHECK(j["context"] == "output");
  CHECK(j["produced_here"] == true);
  REQUIRE(j["files"].size() == 3);
  int offending = 0;
  for (const auto& f : j["files"]) {
    offending += f["offending"].get<bool>() ? 1 : 0;
    CHECK(f["dtype"] == "f32");
    std::ifstream exists(dir + "/" + f["file"].get<std::string>());
    CHECK(exists.good());
  }
  CHECK(offending == 1);
#else
  CHECK(index.find("\"produced_here\": true") != std::string::npos);
#endif
  for (const auto& f : visible_files(dir)) ::unlink((dir + "/" + f).c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("snapshot: a value that arrived non-finite saves only the offending tensor, and says why") {
  const std::string dir = nstest::make_temp_dir("snapshot");
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  o.snapshot_dir = dir;
  nanscope::recorder rec(o);
  const std::vector<double> bad{1.0, std::nan("")};
  {
    nanscope::scope s(rec, "mlp", "MLP");
    s.input(bad);  // arrives already NaN
  }
  const std::vector<std::string> files = visible_files(dir);
  int npy = 0;
  std::string index;
  for (const auto& f : files) {
    if (f.find(".npy") != std::string::npos) ++npy;
    if (f.find("_index.json") != std::string::npos) index = read_text(dir + "/" + f);
  }
  CHECK(npy == 1);
#if NANSCOPE_TEST_HAVE_JSON
  const nlohmann::json j = nlohmann::json::parse(index);
  CHECK(j["produced_here"] == false);
  CHECK(j.contains("note"));
#else
  CHECK(index.find("\"produced_here\": false") != std::string::npos);
#endif
  for (const auto& f : visible_files(dir)) ::unlink((dir + "/" + f).c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("snapshot: an unwritable directory is reported to the sink and does not hide the detection") {
  std::string seen;
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::throw_exception;
  o.sink = [&](std::string_view s) { seen.append(s.data(), s.size()); };
  o.snapshot_dir = "/proc/nanscope-cannot-write-here";
  nanscope::recorder rec(o);
  const std::vector<float> bad{std::nanf("")};
  nanscope::scope s(rec, "m", "M");
  CHECK_THROWS_AS(s.output(bad), nanscope::detection_error);
  CHECK(seen.find("nanscope: snapshot failed:") != std::string::npos);
}

TEST_CASE("snapshot: JSON strings stay valid for hostile module names") {
  const std::string hostile = std::string("a\"b\\c\n\x01\x7f") + "\xff\xfe" + "ok\xc3\xa9" + "\xe2\x82";
  const std::string q = nanscope::detail::json_quote(hostile);
#if NANSCOPE_TEST_HAVE_JSON
  const nlohmann::json j = nlohmann::json::parse(q);
  CHECK(j.get<std::string>().find("ok\xc3\xa9") != std::string::npos);  // valid UTF-8 kept
#endif
  CHECK(q.find("\\ufffd") != std::string::npos);  // invalid bytes replaced
  CHECK(q.find("\\u0001") != std::string::npos);
}

// ---- issue 13 items 10 and 11: parents created, names unique per process and recorder, nothing overwritten

namespace {
using nstest::remove_tree;
/// One detection in recorder `rec` at step 0: output of "m" is NaN.
void detect_once(nanscope::recorder& rec, float marker) {
  const std::vector<float> bad{marker, std::nanf("")};
  nanscope::scope s(rec, "m", "M");
  s.output(bad);
}
std::vector<std::string> with_suffix(const std::vector<std::string>& names, const std::string& suffix) {
  std::vector<std::string> out;
  for (const auto& n : names)
    if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) out.push_back(n);
  return out;
}
nanscope::recorder_options snapshot_options(const std::string& dir) {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  o.snapshot_dir = dir;
  return o;
}
}  // namespace

TEST_CASE("snapshot: a snapshot_dir whose parents do not exist is created with them") {
  const std::string base = nstest::make_temp_dir("snapshot");
  const std::string dir = base + "/a/b/c";  // the old code created only the last component: the write failed
  std::string seen;
  nanscope::recorder_options o = snapshot_options(dir);
  o.sink = [&](std::string_view s) { seen.append(s.data(), s.size()); };
  nanscope::recorder rec(o);
  detect_once(rec, 1.0f);
  CHECK(seen.find("snapshot failed") == std::string::npos);
  CHECK(with_suffix(visible_files(dir), "_index.json").size() == 1);
  CHECK(with_suffix(visible_files(dir), ".npy").size() == 1);
  remove_tree(base);
}

TEST_CASE("snapshot: two recorders and two processes share one directory without overwriting each other") {
  const std::string dir = nstest::make_temp_dir("snapshot");
  nanscope::recorder r1(snapshot_options(dir)), r2(snapshot_options(dir));
  CHECK(r1.id() != r2.id());
  detect_once(r1, 1.0f);  // same step, same detection count: the old names were equal
  detect_once(r2, 2.0f);
#if NANSCOPE_TEST_HAVE_FORK
  // a child process (another rank, say) with a copy of r1: same recorder id and counter, another pid
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::setenv("RANK", "3", 1);
    nanscope::recorder r3(snapshot_options(dir));
    detect_once(r3, 3.0f);
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  const int expected = 3;
#else
  const int expected = 2;
#endif
  const std::vector<std::string> names = visible_files(dir);
  const std::vector<std::string> indexes = with_suffix(names, "_index.json");
  REQUIRE(indexes.size() == static_cast<std::size_t>(expected));
  CHECK(with_suffix(names, ".npy").size() == static_cast<std::size_t>(expected));
  // every index names its own .npy, which holds that recorder's marker value
  std::vector<float> markers;
  for (const auto& ix : indexes) {
    CAPTURE(ix);
    const std::string pid_part = "_p" + std::to_string(ix.find("_r3_") != std::string::npos ? pid : ::getpid()) + "_";
    CHECK(ix.find(pid_part) != std::string::npos);
    CHECK(ix.find("_rec") != std::string::npos);
#if NANSCOPE_TEST_HAVE_JSON
    const nlohmann::json j = nlohmann::json::parse(read_text(dir + "/" + ix));
    REQUIRE(j["files"].size() == 1);
    const nanscope::npy_array a = nanscope::read_npy(dir + "/" + j["files"][0]["file"].get<std::string>());
    markers.push_back(as_vector<float>(a)[0]);
#endif
  }
#if NANSCOPE_TEST_HAVE_JSON
  std::sort(markers.begin(), markers.end());
  std::vector<float> want{1.0f, 2.0f, 3.0f};
  want.resize(static_cast<std::size_t>(expected));
  CHECK(markers == want);
#endif
  remove_tree(dir);
}

TEST_CASE("snapshot: an existing file of the same name is never overwritten") {
  for (const bool npy_taken : {true, false}) {  // the .npy and the index taken, or only the index
    const std::string dir = nstest::make_temp_dir("snapshot");
    nanscope::recorder rec(snapshot_options(dir));
    // the names the first detection would take (an earlier process with the same pid left them, say)
    const std::string stem = nanscope::detail::snapshot_prefix(rec.id(), 0, 1);
    const std::string index = dir + "/" + stem + "_index.json";
    const std::string npy = dir + "/" + stem + "_0_m_output.npy";
    CAPTURE(npy_taken);
    std::ofstream(index) << "precious index";
    if (npy_taken) std::ofstream(npy) << "precious data";
    detect_once(rec, 5.0f);
    CHECK(read_text(index) == "precious index");
    if (npy_taken) CHECK(read_text(npy) == "precious data");
    const std::string moved = dir + "/" + stem + "-1_index.json";
    const std::string moved_npy = dir + "/" + stem + "-1_0_m_output.npy";
    REQUIRE(!read_text(moved).empty());
    CHECK(as_vector<float>(nanscope::read_npy(moved_npy))[0] == 5.0f);
#if NANSCOPE_TEST_HAVE_JSON
    const nlohmann::json j = nlohmann::json::parse(read_text(moved));
    CHECK(j["files"][0]["file"] == stem + "-1_0_m_output.npy");
#endif
    // with only the index taken, the .npy written under the first name is removed again (the set moved on)
    CHECK(visible_files(dir).size() == (npy_taken ? 4u : 3u));
    remove_tree(dir);
  }
}

namespace snapshot_test {
/// stderr of this process into a file while alive (POSIX).
struct stderr_to_file {
  explicit stderr_to_file(const std::string& path) {
    std::fflush(stderr);
    saved = ::dup(2);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ~stderr_to_file() {
    std::fflush(stderr);
    ::dup2(saved, 2);
    ::close(saved);
  }
  stderr_to_file(const stderr_to_file&) = delete;
  stderr_to_file& operator=(const stderr_to_file&) = delete;
  int saved = -1;
};
}  // namespace snapshot_test

TEST_CASE("recorder: a sink that throws loses no text, ends no process and changes no policy") {
  // A throwing sink ended the process from ~scope (std::terminate, via the trace and stop texts), and at a
  // detection its exception left before the snapshot and the policy: no snapshot, no detection_error.
  const std::string dir = nstest::make_temp_dir("sink_throws");
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::throw_exception;
  o.sink = [](std::string_view) { throw std::runtime_error("log disk full"); };
  o.trace_steps = {0};  // step 0's frames are traced through the sink from ~scope
  o.snapshot_dir = dir;
  nanscope::recorder rec(o);
  const std::vector<float> ok{1.0f, 2.0f};
  const std::vector<float> bad{1.0f, std::numeric_limits<float>::quiet_NaN()};
  const std::string err = dir + "/stderr.txt";
  {
    snapshot_test::stderr_to_file capture(err);
    {
      nanscope::scope s(rec, "traced", "Linear");
      s.output(ok);
    }  // the trace goes through the throwing sink here, in the destructor
    nanscope::scope s(rec, "broken", "Linear");
    CHECK_THROWS_AS(s.output(bad), nanscope::detection_error);  // the policy, not the sink's exception
  }
  const std::string text = nstest::read_text(err);
  CHECK(text.find("nanscope: the recorder's sink threw (log disk full); the text it was given follows") != std::string::npos);
  CHECK(text.find("traced") != std::string::npos);  // the trace is on stderr instead
  CHECK(text.find("broken") != std::string::npos);  // so is the detection's report
  bool snapshot = false;
  for (const auto& e : nstest::list_dir(dir)) snapshot = snapshot || e.find(".npy") != std::string::npos ||
                                                         e.find("nanscope_") == 0;
  CHECK(snapshot);  // the evidence was written
}

TEST_CASE("tree_writer: an on_error that throws ends no process; the error goes to stderr") {
  // on_error is called from the writer's noexcept scope hooks: a throwing one ended the process.
  const std::string dir = nstest::make_temp_dir("tree_on_error_throws");
  nanscope::recorder_options ro;
  ro.sink = [](std::string_view) {};
  nanscope::recorder rec(ro);
  nanscope::tree_options to = nanscope::tree_options{}.in(dir).with_rank(0);
  to.on_error = [](std::string_view) { throw std::runtime_error("no log either"); };
  nanscope::tree_writer w(rec, to);
  const std::vector<float> x{1.0f};
  REQUIRE(::chmod(dir.c_str(), 0500) == 0);  // the pass cannot create its files
  bool root = ::access(dir.c_str(), W_OK) == 0;  // root writes anyway: make the directory vanish instead
  if (root) REQUIRE(std::system(("rm -rf '" + dir + "'").c_str()) == 0);
  {
    snapshot_test::stderr_to_file capture("/tmp/nanscope_tree_on_error_stderr.txt");
    nanscope::scope s(rec, "", "M");
    s.output(x);
  }
  const std::string text = nstest::read_text("/tmp/nanscope_tree_on_error_stderr.txt");
  CHECK(text.find("nanscope: tree_options::on_error threw (no log either)") != std::string::npos);
  CHECK(text.find("nanscope: tree_writer: ") != std::string::npos);
  std::remove("/tmp/nanscope_tree_on_error_stderr.txt");
  if (!root) (void)::chmod(dir.c_str(), 0700);
  (void)std::system(("rm -rf '" + dir + "'").c_str());
}
