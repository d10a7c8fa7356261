// The layer-tree writer (tree.hpp), checked through the files it writes, parsed with nlohmann-json:
//  - numeric style: shape, dtype, mean/std/min/max (torch semantics), health counts, abs_max, first_nonfinite
//    and the FULL_TENSORS values against a naive scalar reference computed here from the same data;
//  - golden files of a small tree in both styles (tests/tree/golden; NANSCOPE_UPDATE_GOLDEN=1 rewrites them);
//  - rank selection (explicit, every_rank, each environment variable, malformed values);
//  - a detection exception unwinding the scopes still closes a valid tree marked incomplete;
//  - scopes of a second thread during a pass are left out; step selection; the FULL file is streamed while
//    the pass runs; directory and write errors.
// tests/tree/ adds byte-level checks with Python's json module and the torch-repr reference; the atomic write
// under SIGKILL is in tree_kill_test.cpp.
#include <doctest/doctest.h>
#include <nanscope/nanscope.hpp>
#include <nanscope/history.hpp>

#include "support/json_files.hpp"
#include "support/reference.hpp"

#if NANSCOPE_TEST_HAVE_JSON
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {
using nanscope::dtype;
using nanscope::scope;
using nanscope::tensor_view;
using json = nlohmann::json;

using nstest::exists;
using nstest::list_dir;
using nstest::read_text;

/// Quiet recorder options: detections are reported into a string and the pass goes on.
nanscope::recorder_options quiet() {
  nanscope::recorder_options o;
  o.policy = nanscope::on_detect::print_and_continue;
  o.sink = [](std::string_view) {};
  return o;
}

/// Restores an environment variable at the end of a test.
struct env_var_guard {
  std::string name;
  bool had;
  std::string old;
  explicit env_var_guard(const char* n) : name(n) {
    const char* v = std::getenv(n);
    had = v != nullptr;
    if (had) old = v;
  }
  void set(const char* v) const { ::setenv(name.c_str(), v, 1); }
  void unset() const { ::unsetenv(name.c_str()); }
  ~env_var_guard() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

// --- the naive reference of one tensor's entry ----------------------------------------------------------

struct ref_entry {
  std::vector<double> x;  // decoded values, in order
  double mean, std, min, max, abs_max;
  std::uint64_t neg = 0, zero = 0, pos = 0, ninf = 0, pinf = 0, nan = 0;
  long long first_nonfinite = -1;
};

ref_entry reference_of(std::vector<double> x) {
  ref_entry r;
  r.x = std::move(x);
  const double qn = nstest::qnan(), inf = nstest::pos_inf();
  double sum = 0, lo = inf, hi = -inf, amax = 0;
  for (std::size_t i = 0; i < r.x.size(); ++i) {
    const double v = r.x[i];
    if (nstest::is_nan(v)) {
      ++r.nan;
    } else if (nstest::is_inf(v)) {
      ++(nstest::sign_bit(v) ? r.ninf : r.pinf);
    } else if (nstest::is_zero(v)) {
      ++r.zero;
    } else {
      ++(v < 0 ? r.neg : r.pos);
    }
    if (!nstest::is_finite(v) && r.first_nonfinite < 0) r.first_nonfinite = static_cast<long long>(i);
    if (!nstest::is_nan(v)) {
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
      amax = std::fabs(v) > amax ? std::fabs(v) : amax;
    }
    if (nstest::is_finite(v)) sum += v;
  }
  const std::size_t n = r.x.size();
  r.abs_max = amax;
  // torch: NaN anywhere makes every statistic NaN; +inf and -inf make the mean ±inf (both: NaN), std NaN
  if (r.nan != 0 || n == 0) {
    r.mean = r.std = r.min = r.max = qn;
    return r;
  }
  r.min = lo;
  r.max = hi;
  if (r.pinf != 0 || r.ninf != 0) {
    r.mean = r.pinf != 0 && r.ninf != 0 ? qn : r.pinf != 0 ? inf : -inf;
    r.std = qn;
    return r;
  }
  r.mean = sum / static_cast<double>(n);
  double ss = 0;  // scaled by abs_max: the squares of 1e200 values would overflow
  const double unit = amax > 0 ? amax : 1.0;
  for (double v : r.x) ss += (v / unit - r.mean / unit) * (v / unit - r.mean / unit);
  r.std = n > 1 ? std::sqrt(ss / static_cast<double>(n - 1)) * unit : qn;
  return r;
}

/// A JSON number, or "nan" / "inf" / "-inf" as the numeric style writes them.
double number_of(const json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "nan") return nstest::qnan();
    if (s == "inf") return nstest::pos_inf();
    if (s == "-inf") return nstest::neg_inf();
    FAIL("unexpected string " << s);
  }
  REQUIRE(j.is_number());
  return j.get<double>();
}

/// tol < 0: exact after rounding to float (the numeric style writes min, max, abs_max and the values of f32,
/// f16, bf16 and fp8 tensors in float's shortest form); otherwise |got - expected| <= tol.
void check_close(const json& j, double expected, double tol, const char* what) {
  double got = number_of(j);
  if (tol < 0) {
    got = static_cast<float>(got);
    expected = static_cast<float>(expected);
    tol = 0;
  }
  INFO(what << ": got " << got << ", expected " << expected);
  if (nstest::is_nan(expected)) {
    CHECK(nstest::is_nan(got));
  } else if (!nstest::is_finite(expected)) {
    CHECK(got == expected);
  } else {
    CHECK(std::fabs(got - expected) <= tol);
  }
}

/// The core computes mean and std to 1e-6 relative (accuracy_test.cpp); min, max, abs_max are exact.
void check_entry(const json& e, const ref_entry& r, std::int64_t n, const char* torch_dtype, bool narrow) {
  CHECK(e["shape"] == json::array({n}));
  CHECK(e["dtype"] == torch_dtype);
  double scale = 0;
  for (double v : r.x)
    if (nstest::is_finite(v)) scale += std::fabs(v);
  scale = r.x.empty() ? 0 : scale / static_cast<double>(r.x.size());
  const double exact = narrow ? -1 : 0;
  check_close(e.at("mean"), r.mean, 1e-6 * scale + 1e-300, "mean");
  check_close(e.at("std"), r.std, 1e-6 * (nstest::is_finite(r.std) ? r.std : 0) + 1e-300, "std");
  check_close(e.at("min"), r.min, exact, "min");
  check_close(e.at("max"), r.max, exact, "max");
  check_close(e.at("abs_max"), r.abs_max, exact, "abs_max");
  const json& h = e.at("health");
  CHECK(h["negative"] == r.neg);
  CHECK(h["zero"] == r.zero);
  CHECK(h["positive"] == r.pos);
  CHECK(h["neg_inf"] == r.ninf);
  CHECK(h["pos_inf"] == r.pinf);
  CHECK(h["nan"] == r.nan);
  if (r.first_nonfinite >= 0) CHECK(e.at("first_nonfinite") == r.first_nonfinite);
  else CHECK_FALSE(e.contains("first_nonfinite"));
}

/// FULL_TENSORS values of a 1-D tensor: every value, or the first and last `edge` around "..." above 1000.
void check_values(const json& value, const ref_entry& r, bool narrow) {
  const std::size_t n = r.x.size();
  std::vector<long long> shown;
  if (n > 1000) {
    for (std::size_t i = 0; i < 3; ++i) shown.push_back(static_cast<long long>(i));
    shown.push_back(-1);
    for (std::size_t i = n - 3; i < n; ++i) shown.push_back(static_cast<long long>(i));
  } else {
    for (std::size_t i = 0; i < n; ++i) shown.push_back(static_cast<long long>(i));
  }
  REQUIRE(value.is_array());
  REQUIRE(value.size() == shown.size());
  for (std::size_t k = 0; k < shown.size(); ++k) {
    if (shown[k] < 0) {
      CHECK(value[k] == "...");
      continue;
    }
    CAPTURE(k);
    check_close(value[k], r.x[static_cast<std::size_t>(shown[k])], narrow ? -1 : 0, "value");
  }
}

// --- a small model for the golden files, rank and error tests -------------------------------------------

struct small_model {
  std::vector<float> a{0.5f, -1.25f, 3.0f, 0.0f, 2.5f, -0.75f}, b{1e-3f, 2e-3f, -4e-3f, 8e-3f};
  std::vector<std::uint16_t> h;
  std::vector<std::int64_t> ids{101, 7592, 2088, 102};
  small_model() {
    for (double v : {1.0, -2.5, 65504.0, 0.0}) h.push_back(nanscope::half::from_float(v).bits);
    h[3] = 0x7C00;  // +inf
  }
  void run(nanscope::recorder& rec) const {
    scope root(rec, "", "TinyNet");
    root.input(tensor_view::contiguous(ids.data(), dtype::i64, {1, 4}));
    root.value_input("<Cache object at 0x7f00deadbeef>", "past_key_values");
    {
      scope e(rec, "embed", "Embedding");
      e.input(tensor_view::contiguous(ids.data(), dtype::i64, {1, 4}));
      e.output(tensor_view::contiguous(a.data(), dtype::f32, {2, 3}));
    }
    for (int i = 0; i < 3; ++i) {
      scope l(rec, "layers." + std::to_string(i), "Block");
      l.input(tensor_view::contiguous(a.data(), dtype::f32, {2, 3}));
      {
        scope q(rec, "proj", "Linear");
        q.input(tensor_view::contiguous(a.data(), dtype::f32, {6}));
        q.parameter(tensor_view::contiguous(b.data(), dtype::f32, {2, 2}), "weight");
        q.output(tensor_view::contiguous(b.data(), dtype::f32, {4}), 0);
        q.output(tensor_view::contiguous(h.data(), dtype::f16, {4}), 1);
      }
    }
    {
      scope n(rec, "norm", "LayerNorm");
      n.input(tensor_view::contiguous(a.data(), dtype::f32, {3, 2}));
      n.output(tensor_view::contiguous(a.data() + 2, dtype::f32, {}));
    }
  }
};

const char* const golden_names[] = {"TinyNet_debug_tree_SUMMARY.json", "TinyNet_debug_tree_FULL_TENSORS.json"};

}  // namespace

TEST_CASE("tree: numeric style statistics, health counts and values equal a naive reference") {
  std::mt19937_64 rng(20261122);
  std::normal_distribution<double> g(0.0, 3.0);
  const double inf = nstest::pos_inf(), nan = nstest::qnan();
  // f32 tensors of several sizes (one summarised), with and without non-finite values; f64; f16
  std::vector<std::vector<float>> f32s;
  for (std::size_t n : {1u, 2u, 7u, 64u, 999u, 1500u}) {
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(g(rng));
    f32s.push_back(v);
  }
  f32s.push_back({1.0f, static_cast<float>(inf), -2.0f});
  f32s.push_back({static_cast<float>(-inf), 3.0f, static_cast<float>(inf)});
  f32s.push_back({1.0f, static_cast<float>(nan), 0.0f, -0.0f});
  f32s.push_back({0.0f, -0.0f, 0.0f});
  std::vector<double> f64(300);
  for (auto& x : f64) x = g(rng) * 1e200;
  std::vector<std::uint16_t> f16;
  for (int i = 0; i < 50; ++i) f16.push_back(nanscope::half::from_float(g(rng) * 1000).bits);
  f16[7] = 0xFC00;  // -inf

  const std::string dir = nstest::make_temp_dir("tree");
  nanscope::recorder rec(quiet());
  {
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_style(nanscope::tree_style::numeric).with_rank(0));
    {
      scope root(rec, "", "Probe");
      for (std::size_t k = 0; k < f32s.size(); ++k) {
        scope s(rec, "f32." + std::to_string(k), "Leaf");
        s.output(tensor_view::contiguous(f32s[k].data(), dtype::f32, {static_cast<std::int64_t>(f32s[k].size())}));
      }
      {
        scope s(rec, "f64", "Leaf");
        s.output(tensor_view::contiguous(f64.data(), dtype::f64, {300}));
      }
      {
        scope s(rec, "f16", "Leaf");
        s.output(tensor_view::contiguous(f16.data(), dtype::f16, {50}));
      }
    }
    REQUIRE(w.trees_written() == 1);
    CHECK(w.last_error().empty());
  }
  const json full = nstest::load_json(dir + "/Probe_debug_tree_FULL_TENSORS.json");
  const json summary = nstest::load_json(dir + "/Probe_debug_tree_SUMMARY.json");
  const json& kids = full["children"];
  REQUIRE(kids.size() == f32s.size() + 2);
  for (std::size_t k = 0; k < f32s.size(); ++k) {
    CAPTURE(k);
    std::vector<double> x(f32s[k].begin(), f32s[k].end());
    const ref_entry r = reference_of(x);
    CHECK(kids[k]["module_path"] == "Probe.f32." + std::to_string(k));
    check_entry(kids[k]["outputs"], r, static_cast<std::int64_t>(x.size()), "torch.float32", true);
    check_entry(summary["children"][k]["outputs"], r, static_cast<std::int64_t>(x.size()), "torch.float32", true);
    check_values(kids[k]["outputs"]["value"], r, true);
    // headroom to the fp16 and e4m3fn limits of a finite tensor: log2(max_finite / abs_max)
    // (abs_max ignores NaN; an all-zero tensor has infinite headroom; an infinite abs_max has none written)
    if (r.pinf + r.ninf == 0 && r.abs_max > 0) {
      const json& hb = kids[k]["outputs"].at("headroom_bits");
      CHECK(hb.at("f16").get<double>() == doctest::Approx(std::log2(65504.0 / r.abs_max)).epsilon(1e-12));
      CHECK(hb.at("e4m3fn").get<double>() == doctest::Approx(std::log2(448.0 / r.abs_max)).epsilon(1e-12));
    } else if (r.pinf + r.ninf == 0) {
      CHECK(kids[k]["outputs"].at("headroom_bits").at("bf16") == "inf");
    } else {
      CHECK_FALSE(kids[k]["outputs"].contains("headroom_bits"));
    }
    CHECK_FALSE(summary["children"][k]["outputs"].contains("value"));
  }
  {
    const ref_entry r = reference_of(f64);
    check_entry(kids[f32s.size()]["outputs"], r, 300, "torch.float64", false);
    check_values(kids[f32s.size()]["outputs"]["value"], r, false);
  }
  {
    std::vector<double> x;
    for (auto b : f16) x.push_back(nstest::ref_decode_f16(b));
    const ref_entry r = reference_of(x);
    check_entry(kids[f32s.size() + 1]["outputs"], r, 50, "torch.float16", true);
    check_values(kids[f32s.size() + 1]["outputs"]["value"], r, true);
  }
}

TEST_CASE("tree: golden files of a small tree in both styles") {
  const std::string golden = std::string(NANSCOPE_TEST_SOURCE_DIR) + "/tree/golden";
  const bool update = std::getenv("NANSCOPE_UPDATE_GOLDEN") != nullptr;
  for (auto style : {nanscope::tree_style::torch_repr, nanscope::tree_style::numeric}) {
    const std::string sname = style == nanscope::tree_style::torch_repr ? "torch_repr" : "numeric";
    CAPTURE(sname);
    const std::string dir = nstest::make_temp_dir("tree");
    nanscope::recorder rec(quiet());
    std::string run_id;
    {
      nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_style(style).with_rank(0));
      small_model{}.run(rec);
      REQUIRE(w.trees_written() == 1);
      run_id = w.run_id();
    }
    for (const char* f : golden_names) {
      std::string got = read_text(dir + "/" + f);
      // the pair's run id differs per writer instance: the golden files hold "RUN-ID" in its place
      const std::string quoted_id = "\"run\": \"" + run_id + "\"";
      const std::size_t at = got.find(quoted_id);
      REQUIRE(at != std::string::npos);
      got.replace(at, quoted_id.size(), "\"run\": \"RUN-ID\"");
      CHECK(got.find(run_id) == std::string::npos);
      const std::string path = golden + "/" + sname + "/" + f;
      if (update) {
        nanscope::detail::make_directories(golden + "/" + sname);
        std::ofstream(path, std::ios::binary) << got;
        MESSAGE("rewrote " << path);
        continue;
      }
      const std::string want = read_text(path);
      REQUIRE_MESSAGE(!want.empty(), "missing golden file " << path);
      if (got != want) {
        std::size_t i = 0;
        while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
        FAIL_CHECK(path << " differs at byte " << i << ": got «" << got.substr(i < 80 ? 0 : i - 80, 160)
                        << "», golden «" << want.substr(i < 80 ? 0 : i - 80, 160) << "»");
      }
      (void)nstest::load_json(dir + "/" + f);
    }
  }
}

TEST_CASE("tree: the small tree's structure (pruning, outputs on leaves, sanitised addresses, extras)") {
  const std::string dir = nstest::make_temp_dir("tree");
  nanscope::recorder rec(quiet());
  {
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0));
    small_model{}.run(rec);
  }
  const json t = nstest::load_json(dir + "/TinyNet_debug_tree_SUMMARY.json");
  CHECK(t["module_path"] == "TinyNet");
  CHECK(t["inputs"]["args"][0]["shape"] == "torch.Size([1, 4])");
  CHECK(t["inputs"]["args"][0]["dtype"] == "torch.int64");
  CHECK_FALSE(t["inputs"]["args"][0].contains("mean"));  // HF: statistics only for float16/32, bfloat16
  CHECK(t["inputs"]["kwargs"]["past_key_values"] == "<Cache object at 0xXXXXXXXX>");
  CHECK_FALSE(t.contains("outputs"));
  std::vector<std::string> paths;
  for (const auto& c : t["children"]) paths.push_back(c["module_path"]);
  // layers.1 is a middle layer block, but it holds an Inf (its proj's fp16 output): the native tree keeps it
  CHECK(paths == std::vector<std::string>{"TinyNet.embed", "TinyNet.layers.0", "TinyNet.layers.1", "TinyNet.layers.2",
                                          "TinyNet.norm"});
  const json& l0 = t["children"][1];
  CHECK_FALSE(l0.contains("outputs"));  // the block itself recorded no output
  const json& proj = l0["children"][0];
  CHECK(proj["module_path"] == "TinyNet.layers.0.proj");
  REQUIRE(proj["outputs"].is_array());
  CHECK(proj["outputs"][1]["dtype"] == "torch.float16");
  CHECK(proj["outputs"][1]["max"] == "tensor(inf, dtype=torch.float16)");
  CHECK(proj["outputs"][1]["health"]["pos_inf"] == 1);
  CHECK(proj["outputs"][1]["first_nonfinite"] == 3);
  CHECK(proj["parameters"]["weight"]["shape"] == "torch.Size([2, 2])");
  CHECK(t["children"][4]["outputs"]["shape"] == "torch.Size([])");
  // the first Inf: layers.0.proj's output[1], made in that leaf (its inputs were finite)
  CHECK(proj["nanscope_detection"]["tensor"] == "output[1]");
  CHECK(proj["nanscope_detection"]["produced_here"] == true);
  CHECK(t["nanscope"]["detection"]["module_path"] == "TinyNet.layers.0.proj");
  CHECK(t["nanscope"]["complete"] == true);
  CHECK(t["nanscope"]["rank"] == 0);

  // extras off: only HuggingFace's keys remain
  const std::string dir2 = nstest::make_temp_dir("tree");
  {
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir2).with_rank(0).with_extras(false).with_pruning(false));
    small_model{}.run(rec);
  }
  const std::string text = read_text(dir2 + "/TinyNet_debug_tree_FULL_TENSORS.json");
  for (const char* k : {"\"health\"", "\"abs_max\"", "\"nanscope\"", "\"parameters\"", "\"headroom_bits\""})
    CHECK_MESSAGE(text.find(k) == std::string::npos, k);
  CHECK(json::parse(text)["children"].size() == 5);  // not pruned
  // extras off and pruned: HuggingFace's pruning, whatever the blocks hold
  const std::string dir3 = nstest::make_temp_dir("tree");
  {
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir3).with_rank(0).with_extras(false));
    small_model{}.run(rec);
  }
  std::vector<std::string> hf_paths;
  const json hf = nstest::load_json(dir3 + "/TinyNet_debug_tree_SUMMARY.json");
  for (const auto& c : hf["children"]) hf_paths.push_back(c["module_path"]);
  CHECK(hf_paths == std::vector<std::string>{"TinyNet.embed", "TinyNet.layers.0", "TinyNet.layers.2", "TinyNet.norm"});
}

TEST_CASE("tree: rank selection from options and from the environment") {
  env_var_guard r("RANK"), lr("LOCAL_RANK"), om("OMPI_COMM_WORLD_RANK"), pm("PMI_RANK");
  r.unset();
  lr.unset();
  om.unset();
  pm.unset();
  nanscope::recorder rec(quiet());
  const auto run = [&](const nanscope::tree_options& o) {
    const std::string dir = o.directory;
    nanscope::tree_writer w(rec, o);
    small_model{}.run(rec);
    return std::make_pair(w.rank(), list_dir(dir));
  };
  SUBCASE("no variable: rank 0 writes") {
    const std::string dir = nstest::make_temp_dir("tree");
    const auto res = run(nanscope::tree_options{}.in(dir));
    CHECK(res.first == 0);
    CHECK(res.second.size() == 2);
  }
  SUBCASE("explicit rank 1, rank0_only: nothing is written, not even the directory") {
    const std::string dir = nstest::make_temp_dir("tree") + "/never";
    const auto res = run(nanscope::tree_options{}.in(dir).with_rank(1));
    CHECK(res.first == 1);
    CHECK_FALSE(exists(dir));
  }
  SUBCASE("every_rank: one file set per rank, named after it") {
    const std::string dir = nstest::make_temp_dir("tree");
    const auto res = run(nanscope::tree_options{}.in(dir).with_rank(3).with_ranks(nanscope::tree_ranks::every_rank));
    CHECK(res.second.size() == 2);
    const json t = nstest::load_json(dir + "/TinyNet_rank3_debug_tree_SUMMARY.json");
    CHECK(t["nanscope"]["rank"] == 3);
    CHECK(exists(dir + "/TinyNet_rank3_debug_tree_FULL_TENSORS.json"));
  }
  SUBCASE("each variable, in order of precedence") {
    struct row {
      const env_var_guard* var;
      const char* value;
      int expected;
    };
    for (const row& c : {row{&r, "2", 2}, row{&lr, "5", 5}, row{&om, "0", 0}, row{&pm, "7", 7}}) {
      CAPTURE(c.var->name);
      r.unset();
      lr.unset();
      om.unset();
      pm.unset();
      c.var->set(c.value);
      const std::string dir = nstest::make_temp_dir("tree");
      const auto res = run(nanscope::tree_options{}.in(dir));
      CHECK(res.first == c.expected);
      CHECK(res.second.size() == (c.expected == 0 ? 2u : 0u));
    }
    r.set("4");
    pm.set("0");  // RANK wins over PMI_RANK
    CHECK(run(nanscope::tree_options{}.in(nstest::make_temp_dir("tree"))).first == 4);
    CHECK(run(nanscope::tree_options{}.in(nstest::make_temp_dir("tree")).with_rank(0)).first == 0);  // explicit wins
  }
  SUBCASE("malformed values are errors that name the variable") {
    for (const char* bad : {"abc", "-1", "1x", " 1", "99999999999", "0x10"}) {
      CAPTURE(bad);
      lr.set(bad);
      const std::string dir = nstest::make_temp_dir("tree");
      bool threw = false;
      try {
        nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir));
      } catch (const nanscope::error& e) {
        threw = true;
        const std::string msg = e.what();
        CHECK(msg.find("LOCAL_RANK") != std::string::npos);
        CHECK(msg.find(bad) != std::string::npos);
        CHECK(msg.find("tree_writer") != std::string::npos);
      }
      CHECK(threw);
      CHECK(rec.listener() == nullptr);
    }
  }
}

TEST_CASE("tree: a detection exception unwinding the scopes still writes a complete, valid tree marked incomplete") {
  const std::string dir = nstest::make_temp_dir("tree");
  nanscope::recorder_options o;  // the default policy throws
  o.sink = [](std::string_view) {};
  nanscope::recorder rec(o);
  const std::vector<float> ok{1, 2, 3}, bad{1, nstest::qnan_f(), 3};
  nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_style(nanscope::tree_style::numeric).with_rank(0));
  bool caught = false;
  try {
    scope root(rec, "", "Net");
    {
      scope a(rec, "a", "Linear");
      a.output(tensor_view::contiguous(ok.data(), dtype::f32, {3}));
    }
    {
      scope b(rec, "b", "Block");
      scope c(rec, "c", "Linear");
      c.input(tensor_view::contiguous(ok.data(), dtype::f32, {3}));
      c.output(tensor_view::contiguous(bad.data(), dtype::f32, {3}));  // throws detection_error
      FAIL("not reached");
    }
  } catch (const nanscope::detection_error&) {
    caught = true;
  }
  REQUIRE(caught);
  CHECK(w.trees_written() == 1);
  const json t = nstest::load_json(dir + "/Net_debug_tree_FULL_TENSORS.json");
  CHECK(t["nanscope"]["complete"] == false);
  REQUIRE(t["children"].size() == 2);
  CHECK(t["children"][1]["children"][0]["module_path"] == "Net.b.c");
  // the output was detected as it was recorded: the tree shows it
  CHECK(t["children"][1]["children"][0]["outputs"]["health"]["nan"] == 1);
}

TEST_CASE("tree: scopes opened by another thread during a pass are not in the tree") {
  const std::string dir = nstest::make_temp_dir("tree");
  nanscope::recorder rec(quiet());
  const std::vector<float> x{1, 2};
  {
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).named("Main"));
    {
      scope root(rec, "", "Main");
      {
        scope a(rec, "a", "Leaf");
        a.output(tensor_view::contiguous(x.data(), dtype::f32, {2}));
        std::thread other([&] {
          scope s(rec, "", "Other");
          scope t(rec, "inner", "Leaf");
          t.output(tensor_view::contiguous(x.data(), dtype::f32, {2}));
        });
        other.join();
      }
      scope b(rec, "b", "Leaf");
      b.output(tensor_view::contiguous(x.data(), dtype::f32, {2}));
    }
    CHECK(w.trees_written() == 1);
  }
  const json t = nstest::load_json(dir + "/Main_debug_tree_SUMMARY.json");
  REQUIRE(t["children"].size() == 2);
  CHECK(t["children"][0]["module_path"] == "Main.a");
  CHECK(t["children"][1]["module_path"] == "Main.b");
  CHECK(read_text(dir + "/Main_debug_tree_SUMMARY.json").find("inner") == std::string::npos);
}

TEST_CASE("tree: step selection writes only the chosen passes") {
  const std::string dir = nstest::make_temp_dir("tree");
  nanscope::recorder rec(quiet());
  nanscope::tree_options o = nanscope::tree_options{}.in(dir).with_rank(0);
  o.steps = {1};
  o.write_full = false;
  nanscope::tree_writer w(rec, o);
  for (int i = 0; i < 3; ++i) small_model{}.run(rec);
  CHECK(w.trees_written() == 1);
  CHECK(list_dir(dir) == std::vector<std::string>{"TinyNet_debug_tree_SUMMARY.json"});
  CHECK(nstest::load_json(dir + "/TinyNet_debug_tree_SUMMARY.json")["nanscope"]["step"] == 1);
}

TEST_CASE("tree: the FULL_TENSORS file is streamed while the pass runs and the target appears only at the end") {
  const std::string dir = nstest::make_temp_dir("tree");
  nanscope::recorder rec(quiet());
  std::vector<float> x(900);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.37f - 100.0f;
  nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).with_style(nanscope::tree_style::numeric));
  std::uint64_t largest_temp = 0;
  {
    scope root(rec, "", "Wide");
    for (int i = 0; i < 400; ++i) {
      scope s(rec, "leaf" + std::to_string(i), "Leaf");
      s.output(tensor_view::contiguous(x.data(), dtype::f32, {900}));
    }
    for (const auto& f : list_dir(dir)) {
      struct stat st;
      if (f.find(".tmp.") != std::string::npos && ::stat((dir + "/" + f).c_str(), &st) == 0)
        largest_temp = std::max<std::uint64_t>(largest_temp, static_cast<std::uint64_t>(st.st_size));
    }
    CHECK_FALSE(exists(dir + "/Wide_debug_tree_FULL_TENSORS.json"));
  }
  // 400 leaves of 900 values: about 5 MB; at least 1 MB must already be on disk before the pass ended
  CHECK(largest_temp >= (1u << 20));
  CHECK(w.full_bytes() > 4u * (1u << 20));
  const json t = nstest::load_json(dir + "/Wide_debug_tree_FULL_TENSORS.json");
  CHECK(t["children"].size() == 400);
  for (const auto& f : list_dir(dir)) CHECK_MESSAGE(f.find(".tmp.") == std::string::npos, f);
}

TEST_CASE("tree: directory and write errors") {
  nanscope::recorder rec(quiet());
  SUBCASE("missing parents are created") {
    const std::string dir = nstest::make_temp_dir("tree") + "/a/b/c";
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0));
    small_model{}.run(rec);
    CHECK(exists(dir + "/TinyNet_debug_tree_SUMMARY.json"));
  }
  SUBCASE("a regular file as the directory: an error naming it") {
    const std::string file = nstest::make_temp_dir("tree") + "/plain";
    std::ofstream(file) << "x";
    bool threw = false;
    try {
      nanscope::tree_writer w(rec, nanscope::tree_options{}.in(file).with_rank(0));
    } catch (const nanscope::error& e) {
      threw = true;
      CHECK(std::string(e.what()).find(file) != std::string::npos);
      CHECK(std::string(e.what()).find("not a directory") != std::string::npos);
    }
    CHECK(threw);
  }
  SUBCASE("the directory vanishes: the pass goes on, the error is reported, nothing is written") {
    const std::string dir = nstest::make_temp_dir("tree") + "/gone";
    std::vector<std::string> errors;
    nanscope::tree_options o = nanscope::tree_options{}.in(dir).with_rank(0);
    o.on_error = [&](std::string_view m) { errors.emplace_back(m); };
    nanscope::tree_writer w(rec, o);
    REQUIRE(::rmdir(dir.c_str()) == 0);
    small_model{}.run(rec);  // does not throw
    CHECK(w.trees_written() == 0);
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find("TinyNet_debug_tree_") != std::string::npos);
    CHECK(errors[0].find("not written") != std::string::npos);
    CHECK_FALSE(w.last_error().empty());
    // the next pass, with the directory back, is written
    REQUIRE(::mkdir(dir.c_str(), 0777) == 0);
    small_model{}.run(rec);
    CHECK(w.trees_written() == 1);
  }
}

TEST_CASE("tree: on_error may call the writer; a root closed while detached; a recorder that ends first") {
  SUBCASE("on_error calls the writer's accessors (it ran under the writer's lock: a deadlock)") {
    nanscope::recorder rec(quiet());
    const std::string dir = nstest::make_temp_dir("tree") + "/gone";
    std::vector<std::string> seen;
    nanscope::tree_writer* wp = nullptr;
    nanscope::tree_options o = nanscope::tree_options{}.in(dir).with_rank(0);
    o.on_error = [&](std::string_view m) {
      seen.push_back(std::string(m) + "|" + wp->last_error() + "|" + std::to_string(wp->trees_written()));
    };
    nanscope::tree_writer w(rec, o);
    wp = &w;
    REQUIRE(::rmdir(dir.c_str()) == 0);
    std::atomic<bool> done{false};
    std::thread watchdog([&done] {
      for (int i = 0; i < 400 && !done.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (!done.load()) {
        std::fprintf(stderr, "tree_test: on_error calling the writer did not return in 20 s (deadlock)\n");
        std::_Exit(1);
      }
    });
    small_model{}.run(rec);
    done.store(true);
    watchdog.join();
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].find("not written") != std::string::npos);
    CHECK(seen[0].find("|0") != std::string::npos);  // trees_written() answered inside on_error
  }
  SUBCASE("the pass's root closed while the writer was detached: that pass is abandoned, the next is written") {
    nanscope::recorder rec(quiet());
    const std::string dir = nstest::make_temp_dir("tree");
    std::vector<std::string> errors;
    nanscope::tree_options o = nanscope::tree_options{}.in(dir).with_rank(0);
    o.on_error = [&](std::string_view m) { errors.emplace_back(m); };
    nanscope::tree_writer w(rec, o);
    {
      scope root(rec, "", "TinyNet");
      REQUIRE(rec.remove_listener(&w));  // as set_listener(nullptr) and back does
    }
    rec.add_listener(&w);
    small_model{}.run(rec);
    CHECK(w.trees_written() == 1);  // the stale pass blocked every later one
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].find("detached from its recorder while a pass was open") != std::string::npos);
    CHECK(exists(dir + "/TinyNet_debug_tree_SUMMARY.json"));
  }
  SUBCASE("the recorder is destroyed before the writer and a history attached to it") {
    auto rec = std::make_unique<nanscope::recorder>(quiet());
    const std::string dir = nstest::make_temp_dir("tree");
    auto w = std::make_unique<nanscope::tree_writer>(*rec, nanscope::tree_options{}.in(dir).with_rank(0));
    nanscope::history h;
    h.attach(*rec);
    small_model{}.run(*rec);
    CHECK(w->trees_written() == 1);
    rec.reset();  // their destructors detached from freed memory (ASan: heap-use-after-free)
    w.reset();
    h.detach();
    CHECK(h.site_count() > 0);
  }
}

TEST_CASE("tree: any byte in a module name gives strict JSON (nlohmann rejects invalid UTF-8)") {
  const std::string dir = nstest::make_temp_dir("tree");
  nanscope::recorder rec(quiet());
  const std::vector<float> x{1};
  std::string all;
  for (int c = 1; c < 256; ++c) all += static_cast<char>(c);
  {
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).named("Net"));
    scope root(rec, "", "Net");
    for (std::size_t k = 0; k + 16 <= all.size(); k += 16) {
      scope s(rec, all.substr(k, 16), all.substr(all.size() - k - 16, 16));
      s.output(tensor_view::contiguous(x.data(), dtype::f32, {1}));
    }
    scope big(rec, std::string(100000, 'x'), "Long");
  }
  for (const char* f : {"/Net_debug_tree_SUMMARY.json", "/Net_debug_tree_FULL_TENSORS.json"}) {
    const std::string text = read_text(dir + f);
    std::size_t outside = 0;  // ensure_ascii: printable ASCII and newlines only
    for (unsigned char c : text) outside += (c >= 0x20 && c < 0x7f) || c == '\n' ? 0 : 1;
    CHECK(outside == 0);
    const json t = json::parse(text);
    CHECK(t["children"].size() == 16);
    // printable ASCII survives unchanged
    CHECK(t["children"][2]["module_path"] == "Net." + all.substr(32, 16));
  }
}

#endif  // NANSCOPE_TEST_HAVE_JSON
