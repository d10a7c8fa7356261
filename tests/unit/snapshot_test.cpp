// Snapshot on detection: the offending tensor and the producing frame's inputs/parameters are written as .npy
// files (read back here with read_npy and compared element by element) next to a JSON index (parsed with
// nlohmann-json when available).
#include <doctest/doctest.h>
#include <nanscope/nanscope.hpp>

#if NANSCOPE_TEST_HAVE_JSON
#include <nlohmann/json.hpp>
#endif

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <dirent.h>
#include <unistd.h>

namespace {
std::string make_temp_dir() {
  char tmpl[] = "/tmp/nanscope_snapshot_XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  REQUIRE(d != nullptr);
  return d;
}
std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    ::closedir(d);
  }
  return out;
}
std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
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
  const std::string dir = make_temp_dir();
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

  const std::vector<std::string> files = list_dir(dir);
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
  for (const auto& f : list_dir(dir)) ::unlink((dir + "/" + f).c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("snapshot: a value that arrived non-finite saves only the offending tensor, and says why") {
  const std::string dir = make_temp_dir();
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
  const std::vector<std::string> files = list_dir(dir);
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
  for (const auto& f : list_dir(dir)) ::unlink((dir + "/" + f).c_str());
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
