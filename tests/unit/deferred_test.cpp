// nanscope tests — deferred_test.cpp: a step logged with results that resolve later (deferred_log, what the CUDA
// backend's deferred_recorder uses) and replayed at the step boundary gives exactly what the direct path gives:
// the same printed reports and warnings, the same saved frames, detections, step numbers, and the same layer-tree
// files. The "later" results here are host checks run at get() time, so the test runs without a GPU.
#include "support/recorder_support.hpp"

#include "support/files.hpp"
#include <nanscope/deferred.hpp>
#include <nanscope/recorder.hpp>
#include <nanscope/report.hpp>
#include <nanscope/tree.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

using nanscope::dtype;
using nanscope::on_detect;
using nanscope::recorder;
using nanscope::tensor_view;

/// A result computed when asked, as a device check's result is only read at the step boundary. Counts its
/// resolutions so the test can tell that nothing was resolved before the replay.
struct later {
  tensor_view v;
  nanscope::check_mode mode = nanscope::check_mode::stats;
  int* resolved = nullptr;
  nanscope::health_result get() const {
    ++*resolved;
    return (nanscope::check)(v, nanscope::check_options{}.with_mode(mode));
  }
};



/// The data of a small model: two blocks, an fp16-hot activation (warning), an integer input, a NaN made by
/// layer `nan_layer` (none when < 0).
struct model_data {
  std::vector<std::int64_t> ids{3, 1, 4, 1, 5};
  std::vector<float> x, w, hidden[3], out;
  explicit model_data(int nan_layer) {
    for (int i = 0; i < 64; ++i) x.push_back(0.25f * static_cast<float>(i % 9) - 1.0f);
    for (int i = 0; i < 64; ++i) w.push_back(0.01f * static_cast<float>(i));
    for (int l = 0; l < 3; ++l) {
      hidden[l] = x;
      for (auto& h : hidden[l]) h = h * static_cast<float>(l + 2);
      if (l == 1) hidden[l][5] = 2e4f;  // above the fp16 warning threshold
      if (l == nan_layer) hidden[l][7] = std::numeric_limits<float>::quiet_NaN();
    }
    out = hidden[2];
  }
  static tensor_view view(const std::vector<float>& v) {
    return tensor_view::flat(v.data(), dtype::f32, static_cast<std::int64_t>(v.size()));
  }
};

/// The direct path.
void run_direct(recorder& rec, const model_data& m) {
  nanscope::scope root(rec, "", "TinyModel");
  root.input(tensor_view::flat(m.ids.data(), dtype::i64, 5));
  root.non_tensor_input(true);
  for (int l = 0; l < 3; ++l) {
    nanscope::scope blk(rec, "layers." + std::to_string(l), "Block");
    blk.input(model_data::view(l == 0 ? m.x : m.hidden[l - 1]));
    {
      nanscope::scope lin(rec, "dense", "Linear");
      lin.parameter(model_data::view(m.w), "weight");
      lin.input(model_data::view(l == 0 ? m.x : m.hidden[l - 1]));
      lin.value_input("scale=2");
      lin.output(model_data::view(m.hidden[l]));
    }
    rec.checkpoint(model_data::view(m.hidden[l]), "after dense");
    blk.output(model_data::view(m.hidden[l]), 0);
  }
  root.output(model_data::view(m.out));
}

/// The same calls through a deferred log, replayed at the end.
void run_deferred(recorder& rec, const model_data& m, int& resolved) {
  nanscope::deferred_log<later> log(rec);
  auto r = [&](const tensor_view& v) { return later{v, rec.options().mode, &resolved}; };
  {
    nanscope::deferred_log<later>::scope root(log, "", "TinyModel");
    const tensor_view ids = tensor_view::flat(m.ids.data(), dtype::i64, 5);
    root.input(ids, r(ids));
    root.non_tensor_input(true);
    for (int l = 0; l < 3; ++l) {
      nanscope::deferred_log<later>::scope blk(log, "layers." + std::to_string(l), "Block");
      const tensor_view in = model_data::view(l == 0 ? m.x : m.hidden[l - 1]);
      blk.input(in, r(in));
      {
        nanscope::deferred_log<later>::scope lin(log, "dense", "Linear");
        lin.parameter(model_data::view(m.w), r(model_data::view(m.w)), "weight");
        lin.input(in, r(in));
        lin.value_input("scale=2");
        lin.output(model_data::view(m.hidden[l]), r(model_data::view(m.hidden[l])));
      }
      log.checkpoint(model_data::view(m.hidden[l]), r(model_data::view(m.hidden[l])), "after dense");
      blk.output(model_data::view(m.hidden[l]), r(model_data::view(m.hidden[l])), 0);
    }
    root.output(model_data::view(m.out), r(model_data::view(m.out)));
  }
  CHECK(resolved == 0);  // nothing is read before the step boundary
  CHECK(log.pending_tensors() == 20);
  log.replay();
  CHECK(log.empty());
}

void same_frames(const std::vector<nanscope::frame>& a, const std::vector<nanscope::frame>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i].module_path == b[i].module_path);
    CHECK(a[i].class_name == b[i].class_name);
    CHECK(a[i].step == b[i].step);
    CHECK(a[i].checkpoint == b[i].checkpoint);
    REQUIRE(a[i].tensors.size() == b[i].tensors.size());
    for (std::size_t k = 0; k < a[i].tensors.size(); ++k) {
      const auto& x = a[i].tensors[k];
      const auto& y = b[i].tensors[k];
      CHECK(x.context == y.context);
      CHECK(x.role == y.role);
      CHECK(x.is_tensor == y.is_tensor);
      CHECK(x.health.nan == y.health.nan);
      CHECK(x.health.count == y.health.count);
      CHECK(x.health.first_nonfinite == y.health.first_nonfinite);
      CHECK(x.warned == y.warned);
      CHECK(x.allowed == y.allowed);
    }
  }
}

}  // namespace

TEST_CASE("deferred replay: reports, frames, warnings and steps equal the direct path") {
  for (on_detect policy : {on_detect::print_and_continue, on_detect::throw_exception}) {
    for (int nan_layer : {-1, 1}) {
      CAPTURE(nan_layer);
      const model_data m(nan_layer);
      nsrec::capture out_direct, out_deferred;
      nanscope::recorder_options od = nsrec::quiet_options(out_direct, policy);
      nanscope::recorder_options odef = nsrec::quiet_options(out_deferred, policy);
      od.max_frames = odef.max_frames = 40;
      od.cast_to = odef.cast_to = dtype::f16;  // f32 activations measured against fp16 (the warning below)
      recorder direct(od), deferred(odef);
      bool threw_direct = false, threw_deferred = false;
      for (int step = 0; step < 2; ++step) {  // two steps: auto_step numbering and per-step reporting
        try {
          run_direct(direct, m);
        } catch (const nanscope::detection_error&) {
          threw_direct = true;
        }
        int resolved = 0;
        try {
          run_deferred(deferred, m, resolved);
        } catch (const nanscope::detection_error&) {
          threw_deferred = true;
        }
        CHECK(resolved > 0);
      }
      CHECK(threw_direct == threw_deferred);
      CHECK(threw_direct == (nan_layer >= 0 && policy == on_detect::throw_exception));
      CHECK(out_direct.str() == out_deferred.str());
      CHECK(!out_direct.str().empty());  // the fp16 warning at least
      CHECK(direct.step() == deferred.step());
      CHECK(direct.detections() == deferred.detections());
      CHECK(direct.warnings() == deferred.warnings());
      same_frames(direct.frames(), deferred.frames());
    }
  }
}

TEST_CASE("deferred replay feeds the layer-tree writer the same events") {
  const model_data m(-1);
  const std::string d1 = nstest::make_temp_dir("deferred"), d2 = nstest::make_temp_dir("deferred");
  nsrec::capture o1, o2;
  recorder a(nsrec::quiet_options(o1, on_detect::print_and_continue));
  recorder b(nsrec::quiet_options(o2, on_detect::print_and_continue));
  std::string run_a, run_b;  // the writers' pair ids differ by design
  {
    nanscope::tree_writer wa(a, nanscope::tree_options{}.in(d1).with_rank(0));
    nanscope::tree_writer wb(b, nanscope::tree_options{}.in(d2).with_rank(0));
    run_direct(a, m);
    int resolved = 0;
    run_deferred(b, m, resolved);
    CHECK(wa.trees_written() == 1);
    CHECK(wb.trees_written() == 1);
    run_a = wa.run_id();
    run_b = wb.run_id();
  }
  auto masked = [](std::string t, const std::string& id) {
    const std::size_t at = t.find("\"" + id + "\"");
    if (at != std::string::npos) t.replace(at, id.size() + 2, "\"RUN-ID\"");
    return t;
  };
  for (const char* f : {"/TinyModel_debug_tree_SUMMARY.json", "/TinyModel_debug_tree_FULL_TENSORS.json"}) {
    const std::string x = masked(nstest::read_text(d1 + f), run_a), y = masked(nstest::read_text(d2 + f), run_b);
    CHECK(!x.empty());
    CHECK(x == y);
  }
}

TEST_CASE("deferred_log refuses to replay with scopes open") {
  nsrec::capture out;
  recorder rec(nsrec::quiet_options(out, on_detect::print_and_continue));
  nanscope::deferred_log<later> log(rec);
  nanscope::deferred_log<later>::scope s(log, "open", "Module");
  CHECK_THROWS_WITH_AS(log.replay(), doctest::Contains("still open"), nanscope::error);
}
