// nanscope tests — segments_recorder_test.cpp: the recorder names the segment (issue 32 item 3).
//  - a NANSCOPE_SEGMENTS guard and per-call segmentations (scope::output(x, seg), DETECT_OVERFLOW_SEGMENTS):
//    the recorded bad segments against a naive per-segment loop over the data (counts by bit pattern, first
//    index), the detection text, what();
//  - a guard whose segmentation does not fit a tensor: checked unsegmented; parameters never segmented; a
//    per-call segmentation that does not fit: check()'s own error;
//  - the first producing module per segment across frames;
//  - the guard is per thread and per recorder, the innermost wins;
//  - random segmentations and NaN positions against the naive loop;
//  - the layer tree's "nanscope_segments" key (extras only), parsed with nlohmann-json; files without extras are
//    byte-identical with and without a segmentation.
#include "support/json_files.hpp"
#include "support/recorder_support.hpp"

#include <nanscope/macros.hpp>
#include <nanscope/recorder.hpp>
#include <nanscope/report.hpp>
#include <nanscope/segments.hpp>
#include <nanscope/segments_guard.hpp>
#include <nanscope/tree.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace segrec_test {

using nanscope::on_detect;
using nanscope::recorder;
using nanscope::scope;
using nanscope::segments;

/// What a naive loop over the data finds in one segment.
struct naive_seg {
  std::int64_t id = 0;
  std::int64_t first_unit = 0, last_unit = 0;  // inclusive, in rows (row segments) or elements
  std::uint64_t nan = 0, pos = 0, neg = 0;
  std::int64_t first_flat = -1;
};

/// Classifies by bit pattern (valid under -ffast-math).
int kind_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  const std::uint32_t a = b & 0x7FFFFFFFu;
  if (a < 0x7F800000u) return 0;
  if (a > 0x7F800000u) return 1;  // NaN
  return (b >> 31) != 0 ? 3 : 2;  // -inf : +inf
}

/// The bad segments of `data` (rows of `row_len` elements, or elements when row_len is 1 and `by_rows` false),
/// cut at `offsets` (in rows or elements), with `ids` (empty: the index).
std::vector<naive_seg> naive(const std::vector<float>& data, std::int64_t row_len, const std::vector<std::int64_t>& offsets,
                             const std::vector<std::int64_t>& ids) {
  std::vector<naive_seg> out;
  for (std::size_t i = 0; i + 1 < offsets.size(); ++i) {
    naive_seg s;
    s.id = ids.empty() ? static_cast<std::int64_t>(i) : ids[i];
    s.first_unit = offsets[i];
    s.last_unit = offsets[i + 1] - 1;
    for (std::int64_t e = offsets[i] * row_len; e < offsets[i + 1] * row_len; ++e) {
      const int k = kind_of(data[static_cast<std::size_t>(e)]);
      if (k == 0) continue;
      if (k == 1) ++s.nan;
      if (k == 2) ++s.pos;
      if (k == 3) ++s.neg;
      if (s.first_flat < 0) s.first_flat = e;
    }
    if (s.nan + s.pos + s.neg != 0) out.push_back(s);
  }
  return out;
}

/// The text the recorder should print for one segment, written from the naive values.
std::string expected_text(const std::string& unit, const naive_seg& s, std::int64_t row_len, bool rows) {
  std::string t = unit + " " + std::to_string(s.id) + " (";
  const std::string axis = rows ? "row" : "element";
  if (s.first_unit == s.last_unit) t += axis + " " + std::to_string(s.first_unit);
  else t += axis + "s " + std::to_string(s.first_unit) + "-" + std::to_string(s.last_unit);
  t += "): ";
  std::string kinds;
  if (s.nan) kinds += std::to_string(s.nan) + " NaN";
  if (s.pos) kinds += (kinds.empty() ? "" : ", ") + std::to_string(s.pos) + " +inf";
  if (s.neg) kinds += (kinds.empty() ? "" : ", ") + std::to_string(s.neg) + " -inf";
  t += kinds + ", first at " + axis + " " + std::to_string(rows ? s.first_flat / row_len : s.first_flat);
  return t;
}

void check_same(const nanscope::recorded_segments& got, const std::vector<naive_seg>& want, std::int64_t row_len) {
  REQUIRE(got.bad.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const nanscope::segment_health& g = got.bad[i];
    CHECK(g.id == want[i].id);
    CHECK(g.begin == static_cast<std::uint64_t>(want[i].first_unit * row_len));
    CHECK(g.end == static_cast<std::uint64_t>((want[i].last_unit + 1) * row_len));
    CHECK(g.nan == want[i].nan);
    CHECK(g.pos_inf == want[i].pos);
    CHECK(g.neg_inf == want[i].neg);
    CHECK(g.first_nonfinite == want[i].first_flat);
  }
}

/// Options collecting every detection (callback policy, no printing, every detection of a step).
struct collector {
  std::shared_ptr<std::vector<nanscope::detection>> got = std::make_shared<std::vector<nanscope::detection>>();
  nanscope::recorder_options options(const nsrec::capture& c) const {
    nanscope::recorder_options o = nsrec::quiet_options(c, on_detect::callback);
    for (double& w : o.warn_abs_max) w = 0.0;
    o.report_once_per_step = false;
    auto g = got;
    o.callback = [g](const nanscope::detection& d) { g->push_back(d); };
    return o;
  }
};

const float nan_f = nsrec::qnan_f();
const float pinf_f = nsrec::pos_inf_f();
const float ninf_f = nsrec::neg_inf_f();

TEST_CASE("segments in the recorder: a NANSCOPE_SEGMENTS guard names the bad requests of an output") {
  nsrec::capture out;
  collector col;
  recorder rec(col.options(out));
  const std::int64_t vocab = 8;
  const std::vector<std::int64_t> cu = {0, 5, 12, 12, 20};
  const std::vector<std::int64_t> ids = {17, 23, 42, 8};
  std::vector<float> logits(static_cast<std::size_t>(20 * vocab), 0.5f);
  logits[7 * vocab + 3] = pinf_f;
  logits[9 * vocab + 2] = nan_f;
  logits[6 * vocab + 7] = nan_f;
  logits[19 * vocab + 0] = ninf_f;
  const nanscope::tensor_view v = nanscope::view_of(logits.data(), {20, vocab}, "logits");
  {
    NANSCOPE_SEGMENTS_TO(rec, segments::rows(cu).with_ids(ids).with_unit("request"));
    NANSCOPE_SCOPE_TO(rec, "lm_head", "Linear");
    NANSCOPE_OUTPUT_TO(rec, v);
  }
  const std::vector<naive_seg> want = naive(logits, vocab, cu, ids);
  REQUIRE(want.size() == 2);
  REQUIRE(col.got->size() == 1);
  const nanscope::detection& d = col.got->front();
  CHECK(d.segmented.applied);
  CHECK(d.segmented.unit == "request");
  CHECK(d.segmented.count == 4);
  check_same(d.segmented, want, vocab);
  // the frame kept in the ring carries the same segments
  REQUIRE(rec.frames().size() == 1);
  check_same(rec.frames()[0].tensors.at(0).segmented, want, vocab);
  // both bad requests were produced by lm_head (its output; it had no segmented input)
  REQUIRE(d.segment_origins.size() == 2);
  for (const nanscope::segment_origin& o : d.segment_origins) {
    CHECK(o.produced);
    CHECK(d.frames.at(o.frame).module_path == "lm_head");
    CHECK(o.context == "output");
  }
  // the report's lines, written here from the naive values
  const std::string report = nanscope::format_report(nanscope::report_style::extended, d);
  CHECK(report.find("\n  2 of 4 requests hold inf/nan:") != std::string::npos);
  for (const naive_seg& s : want) {
    const std::string line = "\n    " + expected_text("request", s, vocab, true) + "; produced by 'lm_head' (Linear) output";
    CHECK_MESSAGE(report.find(line) != std::string::npos, line, "\n--- in ---\n", report);
  }
  CHECK(report.find("request 23 (rows 5-11): 2 NaN, 1 +inf, first at row 6") != std::string::npos);
  CHECK(report.find("request 8 (rows 12-19): 1 -inf, first at row 19") != std::string::npos);
  CHECK(report.find(" | bad: requests 23, 8") != std::string::npos);
  CHECK(nanscope::detail::short_detection_text(d).find("'lm_head' output (requests 23, 8) at step 0") != std::string::npos);
}

TEST_CASE("segments in the recorder: guard misfits are checked unsegmented, parameters never segmented") {
  nsrec::capture out;
  collector col;
  recorder rec(col.options(out));
  const std::vector<std::int64_t> cu = {0, 2, 4};
  std::vector<float> fits(4 * 3, 1.0f), other(5 * 3, 1.0f), weight(4 * 3, 1.0f), scalar(1, 1.0f);
  fits[10] = nan_f;  // row 3: segment 1
  other[14] = nan_f;
  weight[0] = nan_f;
  {
    NANSCOPE_SEGMENTS_TO(rec, segments::rows(cu));
    scope s(rec, "block", "Block");
    s.input(nanscope::view_of(fits.data(), {4, 3}, "x"));
    s.output(nanscope::view_of(other.data(), {5, 3}, "y"));       // 5 rows: the guard does not fit, no error
    s.output(nanscope::tensor_view::contiguous(scalar.data(), nanscope::dtype::f32, {}), 1);  // a scalar
    s.parameter(nanscope::view_of(weight.data(), {4, 3}, "w"), "weight");  // fits, but a parameter
  }
  const nanscope::frame f = rec.frames().at(0);
  REQUIRE(f.tensors.size() == 4);
  CHECK(f.tensors[0].segmented.applied);
  check_same(f.tensors[0].segmented, naive(fits, 3, cu, {}), 3);
  CHECK(f.tensors[0].segmented.unit_name() == std::string("segment"));
  CHECK_FALSE(f.tensors[1].segmented.applied);
  CHECK(f.tensors[1].health.nan == 1);
  CHECK_FALSE(f.tensors[2].segmented.applied);
  CHECK_FALSE(f.tensors[3].segmented.applied);
  CHECK(f.tensors[3].health.nan == 1);
  // the detection on the input (default unit) says so
  REQUIRE(!col.got->empty());
  const std::string report = nanscope::format_report(nanscope::report_style::extended, col.got->front());
  CHECK(report.find("1 of 2 segments holds inf/nan:\n    segment 1 (rows 2-3): 1 NaN, first at row 3; already bad in "
                    "'block' (Block) input[0]") != std::string::npos);
}

TEST_CASE("segments in the recorder: a per-call segmentation that does not fit is check()'s error") {
  nsrec::capture out;
  collector col;
  recorder rec(col.options(out));
  const std::vector<std::int64_t> cu = {0, 2, 4};
  std::vector<float> y(5 * 3, 1.0f);
  const nanscope::tensor_view v = nanscope::view_of(y.data(), {5, 3}, "y");
  std::string expected;
  try {
    (void)nanscope::check(v, segments::rows(cu));
  } catch (const nanscope::error& e) {
    expected = e.what();
  }
  REQUIRE(expected.find("offsets end at 4 but the tensor has 5 rows") != std::string::npos);
  std::string got;
  {
    scope s(rec, "block", "Block");
    try {
      s.output(v, segments::rows(cu));
    } catch (const nanscope::error& e) {
      got = e.what();
    }
    CHECK_THROWS_AS(NANSCOPE_OUTPUT_SEGMENTS_TO(rec, v, segments::rows(cu)), nanscope::error);
    CHECK_THROWS_AS(rec.checkpoint(v, "after", segments::rows(cu)), nanscope::error);
  }
  CHECK(got == expected);
  // the same segmentation on a tensor it fits is fine
  std::vector<float> z(4 * 3, 2.0f);
  CHECK_NOTHROW(rec.checkpoint(nanscope::view_of(z.data(), {4, 3}, "z"), "z", segments::rows(cu)));
}

TEST_CASE("segments in the recorder: DETECT_OVERFLOW_SEGMENTS with element segments and a per-call output") {
  nsrec::capture out;
  collector col;
  recorder rec(col.options(out));
  std::vector<float> h(100, 0.25f);
  h[0] = nan_f;
  h[41] = pinf_f;
  h[42] = pinf_f;
  h[99] = nan_f;
  const std::vector<std::int64_t> cut = {0, 1, 40, 41, 60, 100};
  NANSCOPE_DETECT_OVERFLOW_SEGMENTS_TO(rec, h, "after the residual add", segments::elements(cut).with_unit("block"));
  REQUIRE(col.got->size() == 1);
  const nanscope::detection& d = col.got->front();
  const std::vector<naive_seg> want = naive(h, 1, cut, {});
  check_same(d.segmented, want, 1);
  const std::string report = nanscope::format_report(nanscope::report_style::extended, d);
  for (const naive_seg& s : want)
    CHECK_MESSAGE(report.find(expected_text("block", s, 1, false)) != std::string::npos, expected_text("block", s, 1, false));
  CHECK(report.find("block 0 (element 0): 1 NaN, first at element 0") != std::string::npos);
  CHECK(report.find("block 3 (elements 41-59): 2 +inf, first at element 41") != std::string::npos);
  // per-call output inside a scope, uniform row blocks with ids
  std::vector<float> kv(12, 1.0f);  // [12, 1]: 3 KV blocks of 4 rows
  kv[5] = nan_f;                     // row 5: the second block (id 3)
  const std::vector<std::int64_t> blocks = {7, 3, 9};
  {
    scope s(rec, "kv_write", "KVCache");
    s.output(nanscope::view_of(kv.data(), {12, 1}, "k"), segments::every_rows(4).with_ids(blocks).with_unit("block"));
  }
  REQUIRE(col.got->size() == 2);
  const std::vector<naive_seg> want_kv = naive(kv, 1, {0, 4, 8, 12}, blocks);
  check_same(col.got->back().segmented, want_kv, 1);
  CHECK(col.got->back().segmented.bad.at(0).id == 3);
}

TEST_CASE("segments in the recorder: the first producing module per segment") {
  nsrec::capture out;
  collector col;
  recorder rec(col.options(out));
  const std::vector<std::int64_t> cu = {0, 2, 4, 6};
  const std::vector<std::int64_t> ids = {100, 200, 300};
  std::vector<float> x(6 * 2, 1.0f), a(6 * 2, 1.0f), b(6 * 2, 1.0f);
  a[4] = nan_f;        // row 2: request 200 goes bad in layer a
  b[4] = nan_f;        // ... and stays bad after layer b
  b[11] = pinf_f;      // request 300 goes bad in layer b
  {
    NANSCOPE_SEGMENTS_TO(rec, segments::rows(cu).with_ids(ids).with_unit("request"));
    NANSCOPE_SCOPE_TO(rec, "model", "Model");
    {
      NANSCOPE_SCOPE_TO(rec, "a", "A");
      NANSCOPE_INPUT_TO(rec, nanscope::view_of(x.data(), {6, 2}, "x"));
      NANSCOPE_OUTPUT_TO(rec, nanscope::view_of(a.data(), {6, 2}, "a"));
    }
    {
      NANSCOPE_SCOPE_TO(rec, "b", "B");
      NANSCOPE_INPUT_TO(rec, nanscope::view_of(a.data(), {6, 2}, "a"));
      NANSCOPE_OUTPUT_TO(rec, nanscope::view_of(b.data(), {6, 2}, "b"));
    }
  }
  // detections: a's output, b's input, b's output
  REQUIRE(col.got->size() == 3);
  const nanscope::detection& d = col.got->back();
  CHECK(d.module_path == "model.b");
  REQUIRE(d.segment_origins.size() == 2);
  CHECK(d.segment_origins[0].id == 200);
  CHECK(d.segment_origins[0].produced);
  CHECK(d.frames.at(d.segment_origins[0].frame).module_path == "model.a");
  CHECK(d.segment_origins[1].id == 300);
  CHECK(d.segment_origins[1].produced);
  CHECK(d.frames.at(d.segment_origins[1].frame).module_path == "model.b");
  const std::string report = nanscope::format_report(nanscope::report_style::extended, d);
  CHECK(report.find("request 200 (rows 2-3): 1 NaN, first at row 2; produced by 'model.a' (A) output") != std::string::npos);
  CHECK(report.find("request 300 (rows 4-5): 1 +inf, first at row 5; produced by 'model.b' (B) output") != std::string::npos);
  // b's input: request 200 arrived already bad (the frame that first held it bad is a, where it was produced)
  const nanscope::detection& din = (*col.got)[1];
  CHECK(din.context == "input[0]");
  REQUIRE(din.segment_origins.size() == 1);
  CHECK(din.frames.at(din.segment_origins[0].frame).module_path == "model.a");
}

TEST_CASE("segments in the recorder: a guard is per thread and per recorder; the innermost wins") {
  nsrec::capture out;
  collector col;
  recorder rec(col.options(out)), other(col.options(out));
  const std::vector<std::int64_t> two = {0, 1, 2}, one = {0, 2};
  std::vector<float> y(2 * 2, 1.0f);
  y[3] = nan_f;
  const nanscope::tensor_view v = nanscope::view_of(y.data(), {2, 2}, "y");
  nanscope::segments_guard g(rec, segments::rows(one).with_unit("outer"));
  {
    nanscope::segments_guard inner(rec, segments::rows(two).with_unit("inner"));
    rec.checkpoint(v, "in");
    other.checkpoint(v, "other recorder");
    std::thread t([&] { rec.checkpoint(v, "thread"); });
    t.join();
  }
  rec.checkpoint(v, "out");
  REQUIRE(col.got->size() == 4);
  CHECK((*col.got)[0].segmented.unit == "inner");
  CHECK((*col.got)[0].segmented.bad.at(0).id == 1);
  CHECK_FALSE((*col.got)[1].segmented.applied);  // other recorder
  CHECK_FALSE((*col.got)[2].segmented.applied);  // other thread
  CHECK((*col.got)[3].segmented.unit == "outer");
  CHECK((*col.got)[3].segmented.bad.at(0).id == 0);
}

TEST_CASE("segments in the recorder: random segmentations against the naive loop") {
  std::mt19937_64 rng(32);
  nsrec::capture out;
  collector col;
  recorder rec(col.options(out));
  for (int round = 0; round < 60; ++round) {
    const std::int64_t rows = 1 + static_cast<std::int64_t>(rng() % 300), row_len = 1 + static_cast<std::int64_t>(rng() % 40);
    std::vector<float> t(static_cast<std::size_t>(rows * row_len));
    for (float& x : t) x = static_cast<float>(static_cast<double>(rng() % 2000) - 1000.0);
    const int bad = static_cast<int>(rng() % 6);
    for (int k = 0; k < bad; ++k) {
      const float vals[3] = {nan_f, pinf_f, ninf_f};
      t[static_cast<std::size_t>(rng() % t.size())] = vals[rng() % 3];
    }
    std::vector<std::int64_t> cut = {0};
    while (cut.back() < rows) cut.push_back(std::min<std::int64_t>(rows, cut.back() + static_cast<std::int64_t>(rng() % 40)));
    std::vector<std::int64_t> ids;
    for (std::size_t i = 0; i + 1 < cut.size(); ++i) ids.push_back(static_cast<std::int64_t>(rng() % 100000));
    const std::size_t before = col.got->size();
    {
      NANSCOPE_SEGMENTS_TO(rec, segments::rows(cut).with_ids(ids));
      rec.checkpoint(nanscope::view_of(t.data(), {rows, row_len}, "t"), "t");
    }
    const std::vector<naive_seg> want = naive(t, row_len, cut, ids);
    CHECK(col.got->size() == before + (want.empty() ? 0 : 1));
    const nanscope::frame f = rec.frames().back();
    check_same(f.tensors.at(0).segmented, want, row_len);
  }
}

TEST_CASE("segments in the recorder: the layer tree's nanscope_segments key") {
  const std::int64_t vocab = 4;
  const std::vector<std::int64_t> cu = {0, 3, 3, 7, 10};
  const std::vector<std::int64_t> ids = {5, 6, 7, 8};
  std::vector<float> x(10 * 4, 1.0f), y(10 * 4, 1.0f);
  y[4 * 4 + 1] = nan_f;
  y[6 * 4 + 3] = ninf_f;
  y[9 * 4 + 0] = pinf_f;
  y[9 * 4 + 2] = nan_f;
  auto run = [&](const std::string& dir, bool extras, bool segmented) {
    nsrec::capture out;
    nanscope::recorder rec(nsrec::quiet_options(out, on_detect::print_and_continue));
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).with_extras(extras));
    std::unique_ptr<nanscope::segments_guard> g;
    if (segmented) g = std::make_unique<nanscope::segments_guard>(rec, segments::rows(cu).with_ids(ids).with_unit("request"));
    scope root(rec, "", "Net");
    scope l(rec, "head", "Head");
    l.input(nanscope::view_of(x.data(), {10, vocab}, "x"));
    l.output(nanscope::view_of(y.data(), {10, vocab}, "y"));
  };
  const std::string with = nstest::make_temp_dir("segrec_tree");
  run(with, true, true);
  const nlohmann::json t = nstest::load_json(with + "/Net_debug_tree_SUMMARY.json");
  const nlohmann::json& head = t["children"][0];
  CHECK_FALSE(head["inputs"]["args"][0].contains("nanscope_segments"));  // clean: no key
  const nlohmann::json& segs = head["outputs"]["nanscope_segments"];
  const std::vector<naive_seg> want = naive(y, vocab, cu, ids);
  REQUIRE(segs.is_array());
  REQUIRE(segs.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const nlohmann::json& s = segs[i];
    CHECK(s["unit"] == "request");
    CHECK(s["id"].get<std::int64_t>() == want[i].id);
    CHECK(s["rows"][0].get<std::int64_t>() == want[i].first_unit);
    CHECK(s["rows"][1].get<std::int64_t>() == want[i].last_unit);
    CHECK(s["nan"].get<std::uint64_t>() == want[i].nan);
    CHECK(s["pos_inf"].get<std::uint64_t>() == want[i].pos);
    CHECK(s["neg_inf"].get<std::uint64_t>() == want[i].neg);
    CHECK(s["first"].get<std::int64_t>() == want[i].first_flat / vocab);
    CHECK(s["first_flat"].get<std::int64_t>() == want[i].first_flat);
  }
  CHECK(segs[0]["index"] == 2);
  // without extras (HuggingFace's files) a segmentation changes no byte
  const std::string plain = nstest::make_temp_dir("segrec_tree"), seg_plain = nstest::make_temp_dir("segrec_tree");
  run(plain, false, false);
  run(seg_plain, false, true);
  for (const char* f : {"/Net_debug_tree_SUMMARY.json", "/Net_debug_tree_FULL_TENSORS.json"}) {
    const std::string a = nstest::read_existing(plain + f), b = nstest::read_existing(seg_plain + f);
    CHECK(!a.empty());
    CHECK(a == b);
    CHECK(b.find("nanscope_segments") == std::string::npos);
  }
}

}  // namespace segrec_test
