// nanscope tests — block_scaled_recorder_test.cpp: the recorder, its warnings and the layer tree with block-scaled
// targets (issue 33 item 3).
//  - recorder_options::block_scaled: a module's tensors carry the per-format statistics; on hand-worked data (one
//    outlier in a block of 0.01s) the counts, scales and worst block are what the OCP and NVFP4 definitions give;
//    on random data every field equals check_block_scaled() of the same view (itself checked against an
//    independent reference quantizer in block_scaled_test.cpp), and the health equals check();
//  - the warning: its text, once per site and step, the threshold (warn_lossy_fraction; negative: never), the hf
//    style prints none unless warn_in_hf_style;
//  - site rules override the options' target (another format; block_target{} turns it off); tensors the target
//    does not fit (integers, an axis past the rank) are recorded without statistics, never with an error; a target
//    given with a checkpoint that does not fit throws check_block_scaled's error;
//  - NANSCOPE_DETECT_OVERFLOW_BLOCKS; segments and count_margins together with a target; another check mode;
//  - the tree's "nanscope_block_scaled" key parsed with nlohmann-json; without extras no byte changes.
#include "support/compare.hpp"
#include "support/files.hpp"
#include "support/json_files.hpp"
#include "support/recorder_support.hpp"

#include <nanscope/block_scaled.hpp>
#include <nanscope/macros.hpp>
#include <nanscope/recorder.hpp>
#include <nanscope/segments.hpp>
#include <nanscope/segments_guard.hpp>
#include <nanscope/tree.hpp>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace bsrec_test {

using nanscope::block_format;
using nanscope::block_format_set;
using nanscope::block_target;
using nanscope::on_detect;
using nanscope::recorder;
using nanscope::scale_rule;
using nanscope::scope;

/// 4 rows x 256 columns of 0.01 with one 900 in the first block of the first row.
std::vector<float> one_outlier() {
  std::vector<float> a(4 * 256, 0.01f);
  a[3] = 900.0f;
  return a;
}

/// The last tensor of the frame at `path` (a copy: frames() returns a copy; fails the test when absent).
nanscope::tensor_record only_tensor(const std::vector<nanscope::frame>& frames, const std::string& path) {
  for (const nanscope::frame& f : frames)
    if (f.module_path == path && !f.tensors.empty()) return f.tensors.back();
  FAIL("no frame " << path);
  return nanscope::tensor_record{};
}

void same_stats(const nanscope::block_format_stats& a, const nanscope::block_format_stats& b) {
  CAPTURE(nanscope::name(a.format));
  CHECK(a.format == b.format);
  CHECK(a.rule == b.rule);
  CHECK(a.block_size == b.block_size);
  CHECK(a.blocks == b.blocks);
  CHECK(a.elements == b.elements);
  CHECK(a.zero_blocks == b.zero_blocks);
  CHECK(a.nan_blocks == b.nan_blocks);
  CHECK(a.zero_scale_blocks == b.zero_scale_blocks);
  CHECK(a.lossy_blocks == b.lossy_blocks);
  CHECK(a.clipped == b.clipped);
  CHECK(a.flushed == b.flushed);
  CHECK(a.subnormal == b.subnormal);
  CHECK(a.scale_histogram == b.scale_histogram);
  CHECK(a.scale_exp_min == b.scale_exp_min);
  CHECK(a.scale_exp_max == b.scale_exp_max);
  CHECK(nstest::same_bits(a.scale_exp_mean, b.scale_exp_mean));
  CHECK(nstest::same_bits(a.scale_exp_std, b.scale_exp_std));
  CHECK(nstest::same_bits(static_cast<double>(a.tensor_scale), static_cast<double>(b.tensor_scale)));
  CHECK(a.worst.index == b.worst.index);
  CHECK(a.worst.first_element == b.worst.first_element);
  CHECK(a.worst.scale == b.worst.scale);
  CHECK(a.worst.clipped == b.worst.clipped);
  CHECK(a.worst.flushed == b.worst.flushed);
  CHECK(nstest::same_bits(a.worst.error_max_abs, b.worst.error_max_abs));
  CHECK(nstest::same_bits(a.worst.error_rms, b.worst.error_rms));
  CHECK(a.per_block.empty());
}

TEST_CASE("block-scaled recorder: an outlier in a module's output, as the OCP and NVFP4 definitions give") {
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out);
  o.block_scaled = block_target{block_format_set{}.with(block_format::mxfp8_e4m3).with(block_format::mxfp4)}
                       .with_warn_lossy_fraction(0.01);
  recorder rec(o);
  const std::vector<float> a = one_outlier();
  const std::vector<float> clean(4 * 256, 0.25f);
  {
    scope root(rec, "", "Net");
    {
      scope fc(rec, "fc1", "Linear");
      fc.input(nanscope::view_of(clean.data(), {4, 256}, "x"));
      fc.output(nanscope::view_of(a.data(), {4, 256}, "y"));
    }
  }
  const nanscope::tensor_record t = only_tensor(rec.frames(), "fc1");
  REQUIRE(t.block_scaled.applied);
  CHECK(t.block_scaled.axis == 1);
  CHECK(t.block_scaled.rule == scale_rule::ocp);
  REQUIRE(t.block_scaled.formats.size() == 2);
  // MXFP8 E4M3, floor rule: the outlier's block gets X = floor(log2 900) - 8 = 1; 900 / 2 = 450 > 448 clips, and
  // 0.01 / 2 = 0.005 lies below E4M3's smallest normal 2^-6 (subnormal, not flushed). Every other block: X =
  // floor(log2 0.01) - 8 = -15, nothing lost.
  const nanscope::block_format_stats* e4 = t.block_scaled.find(block_format::mxfp8_e4m3);
  REQUIRE(e4 != nullptr);
  CHECK(e4->blocks == 32);
  CHECK(e4->elements == 1024);
  CHECK(e4->lossy_blocks == 1);
  CHECK(e4->clipped == 1);
  CHECK(e4->flushed == 0);
  CHECK(e4->subnormal == 31);
  CHECK(e4->at(1) == 1);
  CHECK(e4->at(-15) == 31);
  CHECK(e4->scale_exp_min == -15);
  CHECK(e4->scale_exp_max == 1);
  CHECK(e4->worst.index == 0);
  CHECK(e4->worst.scale == 128);
  // MXFP4 (E2M1, emax 2): X = 9 - 2 = 7; 900 / 128 = 7.03 clips to 6; 0.01 / 128 is below a quarter (half of
  // E2M1's smallest subnormal 0.5): the 31 others flush.
  const nanscope::block_format_stats* f4 = t.block_scaled.find(block_format::mxfp4);
  REQUIRE(f4 != nullptr);
  CHECK(f4->lossy_blocks == 1);
  CHECK(f4->clipped == 1);
  CHECK(f4->flushed == 31);
  CHECK(f4->worst.index == 0);
  CHECK(f4->worst.first_element == 0);
  CHECK(f4->worst.clipped == 1);
  CHECK(f4->worst.flushed == 31);
  CHECK(f4->worst.error_max_abs == doctest::Approx(900.0 - 768.0));
  // the health is check()'s
  const nanscope::health_result h = nanscope::check(nanscope::view_of(a.data(), {4, 256}));
  CHECK(t.health.count == h.count);
  CHECK(t.health.abs_max == h.abs_max);
  CHECK(nstest::same_bits(t.health.mean, h.mean));
  // the clean input loses nothing under either format
  const std::vector<nanscope::frame> frames = rec.frames();
  for (const nanscope::frame& f : frames)
    for (const nanscope::tensor_record& r : f.tensors)
      if (r.context == "input[0]") {
        REQUIRE(r.block_scaled.applied);
        for (const auto& s : r.block_scaled.formats) CHECK(s.lossy_blocks == 0);
        CHECK(r.block_scaled.warned == 0);
      }
  // 1 of 32 blocks (3.1%) is past 1%: one warning per format, naming both
  CHECK(t.block_scaled.warned == ((1u << 0) | (1u << 4)));
  CHECK(rec.warnings() == 2);
  CHECK(nsrec::count_of(out.str(), "nanscope: warning: step 0 fc1: Linear: output as mxfp4 (ocp scales): 1 of 32 blocks "
                                   "(3.1%) lose values: 1 clipped, 31 flushed to 0; worst block 0 (elements 0-31, "
                                   "abs max 900, scale 2^7: 1 clipped, 31 flushed, error max 132, rms") == 1);
  CHECK(nsrec::count_of(out.str(), "output as mxfp8_e4m3 (ocp scales): 1 of 32 blocks (3.1%) lose values: 1 clipped, "
                                   "0 flushed to 0; worst block 0 (elements 0-31, abs max 900, scale 2^1") == 1);
  CHECK(nsrec::count_of(out.str(), "input[0]") == 0);
}

TEST_CASE("block-scaled recorder: random data: every field equals check_block_scaled(), every format and rule") {
  std::mt19937_64 rng(33);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> a(64 * 96);
  for (float& x : a) x = nd(rng) * std::exp2(static_cast<float>(static_cast<int>(rng() % 24) - 12));
  for (scale_rule rule : {scale_rule::ocp, scale_rule::round_up, scale_rule::even}) {
    CAPTURE(nanscope::name(rule));
    nsrec::capture out;
    nanscope::recorder_options o = nsrec::quiet_options(out);
    o.block_scaled = block_target{block_format_set::all()}.with_rule(rule);
    recorder rec(o);
    {
      scope s(rec, "proj", "Linear");
      s.output(nanscope::view_of(a.data(), {64, 96}, "y"));
    }
    const nanscope::tensor_record t = only_tensor(rec.frames(), "proj");
    const nanscope::block_scaled_result want = nanscope::check_block_scaled(
        nanscope::view_of(a.data(), {64, 96}), nanscope::block_scaled_options{}.with_rule(rule));
    REQUIRE(t.block_scaled.formats.size() == want.formats.size());
    for (std::size_t i = 0; i < want.formats.size(); ++i) same_stats(t.block_scaled.formats[i], want.formats[i]);
    // a column-wise target (axis 0)
    o.block_scaled = block_target{block_format::nvfp4}.with_axis(0).with_rule(rule);
    rec.set_options(o);
    {
      scope s(rec, "proj_t", "Linear");
      s.output(nanscope::view_of(a.data(), {64, 96}, "y"));
    }
    const nanscope::tensor_record c = only_tensor(rec.frames(), "proj_t");
    const nanscope::block_scaled_result wc = nanscope::check_block_scaled(
        nanscope::view_of(a.data(), {64, 96}),
        nanscope::block_scaled_options{}.with_rule(rule).with_axis(0).with_formats(block_format_set{}.with(block_format::nvfp4)));
    CHECK(c.block_scaled.axis == 0);
    REQUIRE(c.block_scaled.formats.size() == 1);
    same_stats(c.block_scaled.formats[0], wc.formats[0]);
  }
}

TEST_CASE("block-scaled recorder: warnings once per site and step, the threshold, the hf style") {
  const std::vector<float> a = one_outlier();
  auto run = [&](nanscope::recorder_options o, int steps) {
    recorder rec(o);
    for (int s = 0; s < steps; ++s) {
      scope root(rec, "", "Net");
      for (int k = 0; k < 2; ++k) {  // the same site twice in a step
        scope fc(rec, "fc1", "Linear");
        fc.output(nanscope::view_of(a.data(), {4, 256}, "y"));
      }
    }
    return rec.warnings();
  };
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out);
  o.block_scaled = block_target{block_format::mxfp4};
  CHECK(run(o, 3) == 0);  // the automatic threshold: 1 lossy block of 32 is far below MXFP4's 98.7%
  CHECK(nanscope::block_warn_threshold(nanscope::detail::qnan, block_format::mxfp4, scale_rule::ocp) ==
        doctest::Approx(0.987));
  CHECK(nanscope::block_warn_threshold(nanscope::detail::qnan, block_format::mxfp8_e4m3, scale_rule::ocp) ==
        doctest::Approx(0.586));
  CHECK(nanscope::block_warn_threshold(0.25, block_format::nvfp4, scale_rule::even) == 0.25);
  o.block_scaled->warn_lossy_fraction = 0.01;
  CHECK(run(o, 3) == 3);  // once per step
  CHECK(nsrec::count_of(out.str(), "as mxfp4") == 3);
  out.clear();
  o.block_scaled->warn_lossy_fraction = 1.0 / 32.0;  // 1 of 32 is not more than it
  CHECK(run(o, 1) == 0);
  o.block_scaled->warn_lossy_fraction = 0.03;
  CHECK(run(o, 1) == 1);
  o.block_scaled->warn_lossy_fraction = -1.0;  // never
  CHECK(run(o, 1) == 0);
  out.clear();
  o.block_scaled->warn_lossy_fraction = 0.0;
  o.style = nanscope::report_style::hf;
  CHECK(run(o, 1) == 0);
  CHECK(out.str().find("as mxfp4") == std::string::npos);
  o.warn_in_hf_style = true;
  CHECK(run(o, 1) == 1);
  CHECK(nsrec::count_of(out.str(), "as mxfp4") == 1);
}

TEST_CASE("block-scaled recorder: site rules, tensors the target does not fit, a checkpoint's own target") {
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out);
  o.block_scaled = block_target{block_format::mxfp8_e5m2};
  o.rules.emplace_back("attn.*", nanscope::allow::none, false, std::nullopt, block_target{block_format::nvfp4});
  o.rules.emplace_back("norm", nanscope::allow::none, false, std::nullopt, block_target{});  // off here
  recorder rec(o);
  const std::vector<float> a = one_outlier();
  const std::vector<std::int32_t> ids(16, 3);
  const float scalar = 2.0f;
  {
    scope root(rec, "", "Net");
    {
      scope s(rec, "attn.q", "Linear");
      s.output(nanscope::view_of(a.data(), {4, 256}, "q"));
    }
    {
      scope s(rec, "norm", "LayerNorm");
      s.output(nanscope::view_of(a.data(), {4, 256}, "n"));
    }
    {
      scope s(rec, "embed", "Embedding");
      s.input(nanscope::view_of(ids.data(), {16}, "ids"));          // integers: no statistics
      nanscope::tensor_view sv = nanscope::view_of(&scalar, 1, "s");
      sv.rank = 0;
      s.output(sv);  // rank 0: one block of one
      s.parameter(nanscope::view_of(a.data(), {4, 256}, "w"), "weight");  // parameters too
    }
  }
  const std::vector<nanscope::frame> frames = rec.frames();
  const nanscope::tensor_record q = only_tensor(frames, "attn.q");
  REQUIRE(q.block_scaled.formats.size() == 1);
  CHECK(q.block_scaled.formats[0].format == block_format::nvfp4);
  CHECK_FALSE(only_tensor(frames, "norm").block_scaled.applied);
  bool saw_ids = false, saw_weight = false, saw_scalar = false;
  for (const nanscope::frame& f : frames)
    for (const nanscope::tensor_record& t : f.tensors) {
      if (f.module_path != "embed") continue;
      if (t.context == "input[0]") {
        saw_ids = true;
        CHECK_FALSE(t.block_scaled.applied);
      } else if (t.context == "weight") {
        saw_weight = true;
        REQUIRE(t.block_scaled.formats.size() == 1);
        CHECK(t.block_scaled.formats[0].format == block_format::mxfp8_e5m2);
      } else {
        saw_scalar = true;
        REQUIRE(t.block_scaled.applied);
        CHECK(t.block_scaled.formats[0].blocks == 1);
        CHECK(t.block_scaled.formats[0].lossy_blocks == 0);
      }
    }
  CHECK(saw_ids);
  CHECK(saw_weight);
  CHECK(saw_scalar);
  // an axis past a 1-D tensor's rank: the options' target does not fit, the tensor is recorded without it
  o.block_scaled = block_target{block_format::mxfp4}.with_axis(1);
  rec.set_options(o);
  const std::vector<float> v(40, 1.0f);
  {
    scope s(rec, "bias", "Bias");
    CHECK_NOTHROW(s.output(nanscope::view_of(v.data(), {40}, "b")));
  }
  CHECK_FALSE(only_tensor(rec.frames(), "bias").block_scaled.applied);
  // a checkpoint's own target must fit: check_block_scaled's error names the tensor
  CHECK_THROWS_WITH_AS(rec.checkpoint(nanscope::view_of(v.data(), {40}, "b"), "bias check",
                                      block_target{block_format::mxfp4}.with_axis(1)),
                       doctest::Contains("'b'"), nanscope::error);
}

TEST_CASE("block-scaled recorder: NANSCOPE_DETECT_OVERFLOW_BLOCKS, with segments, margins and another mode") {
  nsrec::capture out;
  recorder rec(nsrec::quiet_options(out));
  const std::vector<float> a = one_outlier();
  const auto view = nanscope::view_of(a.data(), {4, 256}, "h");
  NANSCOPE_DETECT_OVERFLOW_BLOCKS_TO(rec, view, "before fc2", block_target{block_format::nvfp4}.with_warn_lossy_fraction(0));
  NANSCOPE_DETECT_OVERFLOW_BLOCKS_TO(rec, view, "before fc3",
                                     block_target{block_format::mxfp4}.with_rule(scale_rule::round_up));
  std::vector<nanscope::frame> frames = rec.frames();
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].checkpoint);
  REQUIRE(frames[0].tensors[0].block_scaled.formats.size() == 1);
  const nanscope::block_format_stats& nv = frames[0].tensors[0].block_scaled.formats[0];
  CHECK(nv.format == block_format::nvfp4);
  // NVFP4: tensor scale 900 / 2688; the outlier's block scale 900 / (6 s_t) = 448 exactly: 900 is 6 x scale x s_t,
  // no clip; 0.01 is far below a quarter of that scale: its 15 block mates flush
  CHECK(nv.clipped == 0);
  CHECK(nv.flushed == 15);
  CHECK(nv.lossy_blocks == 1);
  // round_up never clips: the outlier's MXFP4 block gets X = ceil(log2(900 / 6)) = 8
  const nanscope::block_format_stats& up = frames[1].tensors[0].block_scaled.formats[0];
  CHECK(up.rule == scale_rule::round_up);
  CHECK(up.clipped == 0);
  CHECK(up.flushed == 31);
  CHECK(up.worst.scale == 127 + 8);
  CHECK(nsrec::count_of(out.str(), "before fc2 as nvfp4 (e4m3 block scales): 1 of 64 blocks (1.6%)") == 1);

  // segments and margins each take their own pass; the block statistics are the same
  nanscope::recorder_options o = nsrec::quiet_options(out);
  o.count_margins = true;
  o.mode = nanscope::check_mode::curt_health;
  o.block_scaled = block_target{block_format::mxfp4};
  recorder rec2(o);
  const std::vector<std::int64_t> cu{0, 1, 4};
  {
    nanscope::segments_guard g(rec2, nanscope::segments::rows(cu));
    scope s(rec2, "seg", "Linear");
    s.output(view);
  }
  const nanscope::tensor_record t = only_tensor(rec2.frames(), "seg");
  CHECK(t.segmented.applied);
  CHECK(t.has_margins);
  REQUIRE(t.block_scaled.formats.size() == 1);
  CHECK(t.block_scaled.formats[0].clipped == 1);
  CHECK(t.block_scaled.formats[0].flushed == 31);
  CHECK(t.health.mode == nanscope::check_mode::curt_health);
}

TEST_CASE("block-scaled recorder: the extended detection report shows each format's lossy blocks") {
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out, on_detect::print_and_continue);
  o.block_scaled =
      block_target{block_format_set{}.with(block_format::mxfp4).with(block_format::mxfp8_e5m2)}.with_warn_lossy_fraction(0.01);
  recorder rec(o);
  std::vector<float> a = one_outlier();
  std::vector<float> b = a;
  b[600] = nsrec::qnan_f();  // block 18 of 32
  {
    scope root(rec, "", "Net");
    {
      scope s1(rec, "fc1", "Linear");
      s1.output(nanscope::view_of(a.data(), {4, 256}, "y"));
    }
    {
      scope s2(rec, "fc2", "Linear");
      s2.input(nanscope::view_of(a.data(), {4, 256}, "y"));
      s2.output(nanscope::view_of(b.data(), {4, 256}, "z"));
    }
  }
  REQUIRE(rec.detections() == 1);
  // fc1's output (and fc2's input) warned for both: E5M2's floor scale is 2^(9 - 15) = 2^-6 and 900 / 2^-6 = 57600
  // is past E5M2's 57344: it clips too
  CHECK(nsrec::count_of(out.str(), " mxfp8_e5m2 lossy=1/32! mxfp4 lossy=1/32!") == 2);
  // fc2's NaN block: a NaN scale, lost whole, in both formats (the detector reports the NaN; no warning)
  CHECK(nsrec::count_of(out.str(), " mxfp8_e5m2 lossy=2/32 mxfp4 lossy=2/32") == 1);
}

TEST_CASE("block-scaled recorder: the tree's nanscope_block_scaled key; without extras no byte changes") {
  const std::vector<float> a = one_outlier();
  auto run = [&](const std::string& dir, bool extras, bool target) {
    nsrec::capture out;
    nanscope::recorder_options o = nsrec::quiet_options(out);
    if (target)
      o.block_scaled =
          block_target{block_format_set{}.with(block_format::mxfp4).with(block_format::nvfp4)}.with_warn_lossy_fraction(0.01);
    recorder rec(o);
    nanscope::tree_writer w(rec, nanscope::tree_options{}.in(dir).with_rank(0).with_extras(extras));
    scope root(rec, "", "Net");
    scope l(rec, "fc1", "Linear");
    l.output(nanscope::view_of(a.data(), {4, 256}, "y"));
  };
  const std::string with = nstest::make_temp_dir("bsrec_tree");
  run(with, true, true);
  const nlohmann::json t = nstest::load_json(with + "/Net_debug_tree_SUMMARY.json");
  const nlohmann::json& k = t["children"][0]["outputs"]["nanscope_block_scaled"];
  REQUIRE(k.is_object());
  CHECK(k["rule"] == "ocp");
  CHECK(k["axis"] == 1);
  REQUIRE(k["formats"].size() == 2);
  const nlohmann::json& f4 = k["formats"][0];
  CHECK(f4["format"] == "mxfp4");
  CHECK(f4["block_size"] == 32);
  CHECK(f4["blocks"] == 32);
  CHECK(f4["lossy_blocks"] == 1);
  CHECK(f4["lossy_fraction"].get<double>() == 1.0 / 32.0);
  CHECK(f4["clipped"] == 1);
  CHECK(f4["flushed"] == 31);
  CHECK(f4["warned"] == true);
  CHECK(f4["warn_threshold"].get<double>() == 0.01);
  CHECK(k["warn_lossy_fraction"].get<double>() == 0.01);
  CHECK(f4["scale_exp"]["min"] == -9);
  CHECK(f4["scale_exp"]["max"] == 7);
  CHECK(f4["scale_exp"]["histogram"] == nlohmann::json::parse("[[-9, 31], [7, 1]]"));
  CHECK(f4["worst"]["index"] == 0);
  CHECK(f4["worst"]["scale"] == "2^7");
  CHECK(f4["worst"]["scale_byte"] == 134);
  CHECK(f4["worst"]["error_max_abs"].get<double>() == 132.0);
  CHECK_FALSE(f4.contains("tensor_scale"));
  const nlohmann::json& nv = k["formats"][1];
  CHECK(nv["format"] == "nvfp4");
  // written as the shortest digits of the f32 value: they read back as that float
  CHECK(static_cast<float>(nv["tensor_scale"].get<double>()) == nanscope::nvfp4_tensor_scale(900.0));
  CHECK(nv["flushed"] == 15);
  // HuggingFace's files: a target changes no byte
  const std::string plain = nstest::make_temp_dir("bsrec_tree"), bs_plain = nstest::make_temp_dir("bsrec_tree");
  run(plain, false, false);
  run(bs_plain, false, true);
  for (const char* f : {"/Net_debug_tree_SUMMARY.json", "/Net_debug_tree_FULL_TENSORS.json"}) {
    const std::string x = nstest::read_existing(plain + f), y = nstest::read_existing(bs_plain + f);
    CHECK(!x.empty());
    CHECK(x == y);
    CHECK(y.find("nanscope_block_scaled") == std::string::npos);
  }
}

TEST_CASE("block-scaled recorder: warnings in modes without abs_max, blocks along dimension 0, misuse, one block") {
  // curt_health has no abs_max: the block pass still runs and still warns
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out);
  o.mode = nanscope::check_mode::curt_health;
  o.block_scaled = block_target{block_format::mxfp4}.with_warn_lossy_fraction(0.01);
  recorder rec(o);
  const std::vector<float> a = one_outlier();
  {
    scope s(rec, "fc1", "Linear");
    s.output(nanscope::view_of(a.data(), {4, 256}, "y"));
  }
  CHECK(rec.warnings() == 1);
  CHECK(nsrec::count_of(out.str(), "output as mxfp4 (ocp scales): 1 of 32 blocks") == 1);
  // shape mode reads nothing: no block statistics from the options' target
  o.mode = nanscope::check_mode::shape;
  rec.set_options(o);
  {
    scope s(rec, "fc2", "Linear");
    s.output(nanscope::view_of(a.data(), {4, 256}, "y"));
  }
  CHECK_FALSE(only_tensor(rec.frames(), "fc2").block_scaled.applied);

  // blocks along dimension 0: the worst block is named by its first element and its dimension, not a flat range
  out.clear();
  std::vector<float> c(64 * 8, 0.01f);
  c[2] = 900.0f;  // column 2, row 0
  nanscope::recorder_options oc = nsrec::quiet_options(out);
  oc.block_scaled = block_target{block_format::mxfp4}.with_axis(0).with_warn_lossy_fraction(0.0);
  recorder rc(oc);
  {
    scope s(rc, "col", "Linear");
    s.output(nanscope::view_of(c.data(), {64, 8}, "y"));
  }
  CHECK(nsrec::count_of(out.str(), "worst block 2 (first element 2, 32 elements along dimension 0, abs max 900") == 1);

  // a checkpoint's own target on an integer tensor is an error naming it
  const std::vector<std::int32_t> ids(32, 1);
  CHECK_THROWS_WITH_AS(rc.checkpoint(nanscope::view_of(ids.data(), {32}, "ids"), "ids check", block_target{block_format::mxfp4}),
                       doctest::Contains("'ids'"), nanscope::error);

  // one block: no std of the scale exponents (the tree leaves it out, the text names the one exponent)
  out.clear();
  const std::vector<float> one(32, 1000.0f);
  rc.checkpoint(nanscope::view_of(one.data(), {32}, "one"), "one block", block_target{block_format::mxfp8_e4m3}.with_warn_lossy_fraction(0));
  CHECK(nsrec::count_of(out.str(), "; scale exponent 1") == 1);  // floor(log2 1000) - 8 = 1; 1000 / 2 = 500 clips
  // ...and its tree object has no "std" (a NaN there was written as the string "nan" in a numeric field)
  const std::vector<nanscope::frame> fr = rc.frames();
  const nlohmann::json j = nlohmann::json::parse(nanscope::detail::tree_block_scaled_json(fr.back().tensors.back().block_scaled));
  const nlohmann::json& se = j["formats"][0]["scale_exp"];
  CHECK(se["min"] == 1);
  CHECK(se["mean"].get<double>() == 1.0);
  CHECK_FALSE(se.contains("std"));
  CHECK(j["warn_lossy_fraction"].get<double>() == 0.0);  // given by the target
  CHECK(j["formats"][0]["warn_threshold"].get<double>() == 0.0);
}


TEST_CASE("block-scaled recorder: without <nanscope/block_scaled.hpp> in the program, a target is an error that says so") {
  // The recorder reaches the pass through a slot that block_scaled.hpp fills; this binary includes it, so the slot
  // is emptied for the test (as in a program where no file includes it) and restored after.
  const bool installed = nanscope::detail::block_check_slot().load() != nullptr;
  REQUIRE(installed);
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out);
  o.block_scaled = block_target{block_format::mxfp4};
  recorder rec(o);
  const std::vector<float> a(64, 1.0f);
  const auto saved = nanscope::detail::block_check_slot().exchange(nullptr);
  std::string what;
  try {
    scope s(rec, "fc1", "Linear");
    s.output(nanscope::view_of(a.data(), {2, 32}, "y"));
  } catch (const nanscope::error& e) {
    what = e.what();
  }
  nanscope::detail::block_check_slot().store(saved);
  CHECK(what.find("'y'") != std::string::npos);
  CHECK(what.find("<nanscope/block_scaled.hpp>") != std::string::npos);
  // restored: the same recording works
  {
    scope s(rec, "fc2", "Linear");
    s.output(nanscope::view_of(a.data(), {2, 32}, "y"));
  }
  CHECK(only_tensor(rec.frames(), "fc2").block_scaled.applied);
}

}  // namespace bsrec_test
