// nanscope tests — report_test.cpp: the recorder's printers against golden text written by hand from the
// grammars of docs/formats.md: the HuggingFace DebugUnderflowOverflow report and its trace mode (§2), the
// one-line-per-tensor format of the original document (§1), and the key facts of nanscope's extended report
// (verdict, producer marker, counts, low-precision headroom, source locations).
//
// Output is captured through recorder_options::sink; the policies print_and_continue and callback keep the
// test running after a detection. The printer goldens take the detection of the native (extended) style through
// a callback and print it with format_report(hf, d); the hf style's own behaviour (detection at completion,
// has-lines, banners, exception texts) is in hf_style_test.cpp, with a few goldens here.
#include "support/recorder_support.hpp"

#include <nanscope/recorder.hpp>
#include <nanscope/report.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

using nanscope::on_detect;
using nanscope::recorder;
using nanscope::report_style;
using nanscope::scope;

// The grammar's PREFIX (17 spaces) and HEADER, written out by hand.
const std::string P = "                 ";
const std::string HEADER = "abs min  abs max  metadata";

/// Options for golden tests: output into `c`, the policy given, no low-precision warnings (they would add
/// lines to the captured text).
nanscope::recorder_options golden_options(const nsrec::capture& c, on_detect policy = on_detect::print_and_continue) {
  nanscope::recorder_options o = nsrec::quiet_options(c, policy);
  for (double& w : o.warn_abs_max) w = 0.0;
  return o;
}

/// Options whose callback keeps the first detection of the native style, for printer goldens.
nanscope::recorder_options printer_options(const nsrec::capture& c, std::shared_ptr<nanscope::detection>& got) {
  nanscope::recorder_options o = golden_options(c, on_detect::callback);
  o.callback = [&got](const nanscope::detection& d) {
    if (!got) got = std::make_shared<nanscope::detection>(d);
  };
  return o;
}

}  // namespace

TEST_CASE("report: the prefix and header constants of this test are what the grammar says") {
  CHECK(P.size() == 17);
  CHECK(P.find_first_not_of(' ') == std::string::npos);
  CHECK(HEADER.size() == 26);  // "abs min" padded to 8, a space, "abs max" padded to 8, a space, "metadata"
}

TEST_CASE("report: HF report golden text — parameters, then inputs, then outputs; None and not-a-tensor lines") {
  nsrec::capture out;
  std::shared_ptr<nanscope::detection> got;
  recorder rec(printer_options(out, got));
  const double inf = nsrec::pos_inf();
  const std::vector<float> x{1.0f, -2.0f, 0.5f};
  const std::vector<float> w{0.25f, -4.0f};
  const std::vector<float> b{0.0f, 1.0f};
  const std::vector<float> y{3.0f, -1500.0f};
  const std::vector<double> z{0.0, inf, -7.0};
  {
    scope model(rec, "", "Model");
    model.input(x);
    {
      scope lin(rec, "dense", "Linear");
      // Recorded out of HF order on purpose: the printer puts parameters first, then inputs, then outputs.
      lin.input(x);
      lin.non_tensor_input();
      lin.non_tensor_input(true);
      lin.parameter(w, "weight");
      lin.parameter(b, "bias");
      lin.output(y);
    }
    {
      scope act(rec, "act", "GELU");
      act.input(y);
      act.output(z);  // inf: detected here
    }
    model.output(z);  // same step: not reported again
  }
  const std::string expected =
      "\nDetected inf/nan during batch_number=0\n"
      "Last 2 forward frames:\n"
      "abs min  abs max  metadata\n" +
      P + " dense Linear\n"
          "2.50e-01 4.00e+00 weight\n"
          "0.00e+00 1.00e+00 bias\n"
          "5.00e-01 2.00e+00 input[0]\n"
          "     not a tensor input[1]\n"
          "             None input[2]\n"
          "3.00e+00 1.50e+03 output\n" +
      P + " act GELU\n"
          "3.00e+00 1.50e+03 input[0]\n"
          "0.00e+00      inf output\n"
          "\n\n\n";
  REQUIRE(got);
  CHECK(nanscope::format_report(report_style::hf, *got) == expected);
  CHECK(rec.detections() == 1);
}

TEST_CASE("report: HF report golden text — NaN in both columns, allowed -inf shows as inf, root path is empty") {
  nsrec::capture out;
  std::shared_ptr<nanscope::detection> got;
  nanscope::recorder_options o = printer_options(out, got);
  o.max_frames = 2;
  o.rules.push_back(nanscope::site_rule{"mask", nanscope::allow::neg_inf, false});
  recorder rec(o);
  const double inf = nsrec::pos_inf();
  const double nan = nsrec::qnan();
  const std::vector<double> a{-3.0, 0.125};
  const std::vector<double> m{-inf, 0.5};
  const std::vector<double> n{1.0, nan, -inf, 2.0};
  nanscope::detection seen;
  {
    scope model(rec, "", "Model");
    model.input(a);
    {
      scope l0(rec, "layers.0", "Linear");
      l0.input(a);
      l0.output(a);
    }
    {
      scope mask(rec, "mask", "Mask");
      mask.input(a);
      mask.output(m);  // -inf allowed by the rule: no detection, the line still reads inf
    }
    CHECK(rec.detections() == 0);
    model.output(n);
  }
  const std::string expected =
      "\nDetected inf/nan during batch_number=0\n"
      "Last 2 forward frames:\n"
      "abs min  abs max  metadata\n" +
      P + " mask Mask\n"
          "1.25e-01 3.00e+00 input[0]\n"
          "5.00e-01      inf output\n" +
      P + "  Model\n"
          "1.25e-01 3.00e+00 input[0]\n"
          "     nan      nan output\n"
          "\n\n\n";
  REQUIRE(got);
  CHECK(nanscope::format_report(report_style::hf, *got) == expected);
  CHECK(rec.detections() == 1);
}

TEST_CASE("report: hf style — detection_error carries the printed report; what() is HF's ValueError text") {
  nsrec::capture out;
  nanscope::recorder_options o = golden_options(out, on_detect::throw_exception);
  o.style = report_style::hf;
  recorder rec(o);
  const std::vector<float> bad{nsrec::qnan_f(), 1.0f};
  {
    scope s(rec, "head", "Linear");  // the root (outermost): batch 0 ends before its frame is built
    s.output(bad);
  }  // HF's hook: has-line and report printed now; the exception is raised by the next record/scope
  const std::string report =
      "\nDetected inf/nan during batch_number=1\n"
      "Last 1 forward frames:\n"
      "abs min  abs max  metadata\n"
      "\n\n" + P + " *** Starting batch number=0 ***\n" + HEADER + "\n" +
      P + " head Linear\n"
          "     nan      nan output\n"
          "\n\n\n";
  CHECK(out.str() == "output has nans\n" + report);
  bool thrown = false;
  try {
    scope next(rec, "head", "Linear");
  } catch (const nanscope::detection_error& e) {
    thrown = true;
    CHECK(e.report() == report);
    CHECK(e.info().report == report);
    CHECK(e.info().step == 1);
    CHECK(std::string(e.what()) ==
          "DebugUnderflowOverflow: inf/nan detected, aborting as there is no point running further. Please scroll "
          "up above this traceback to see the activation values prior to this event.");
  }
  CHECK(thrown);
  CHECK_NOTHROW(rec.raise_pending());  // raised once
}

TEST_CASE("report: extended style — detection_error's what() is one short line that points to the report") {
  nsrec::capture out;
  recorder rec(golden_options(out, on_detect::throw_exception));
  const std::vector<float> bad{nsrec::qnan_f(), 1.0f};
  bool thrown = false;
  try {
    scope s(rec, "head", "Linear");
    s.output(bad);  // the native style detects as the tensor is recorded
  } catch (const nanscope::detection_error& e) {
    thrown = true;
    CHECK(e.report() == out.str());
    // one short line that points to the report (printed already: an uncaught exception must not repeat it)
    CHECK(std::string(e.what()) ==
          "nanscope: 1 NaN in 'head' output at step 0 (produced there); the report with the frames that led to it "
          "was printed before this exception");
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
  CHECK(thrown);
}

TEST_CASE("report: the HF printer shows a native-style checkpoint as a frame of its enclosing module") {
  nsrec::capture out;
  std::shared_ptr<nanscope::detection> got;
  recorder rec(printer_options(out, got));
  const std::vector<float> ok{2.0f, -0.5f};
  const std::vector<float> bad{1.0f, nsrec::pos_inf_f()};
  {
    scope ff(rec, "encoder.ff", "T5LayerFF");
    ff.input(ok);
    rec.checkpoint(ok, "after layer_norm");
    rec.checkpoint(bad, "after DenseReluDense");
  }
  const std::string expected =
      "\nDetected inf/nan during batch_number=0\n"
      "Last 2 forward frames:\n"
      "abs min  abs max  metadata\n" +
      P + " encoder.ff T5LayerFF\n"
          "5.00e-01 2.00e+00 after layer_norm\n" +
      P + " encoder.ff T5LayerFF\n"
          "1.00e+00      inf after DenseReluDense\n"
          "\n\n\n";
  REQUIRE(got);
  CHECK(nanscope::format_report(report_style::hf, *got) == expected);
}

TEST_CASE("report: HF report does not show a (skipped) integer tensor as NaN") {
  // HuggingFace prints the abs min/max of integer tensors (input_ids into an Embedding are the first frame of
  // most models). An integer tensor cannot hold NaN, so a line reading `nan` would send the reader after a
  // NaN that does not exist.
  nsrec::capture out;
  nanscope::recorder_options o = golden_options(out);
  o.style = report_style::hf;
  recorder rec(o);
  const std::vector<std::int32_t> ids{0, 7, 3};
  const std::vector<float> bad{nsrec::qnan_f()};
  {
    scope emb(rec, "embed_tokens", "Embedding");
    emb.input(ids);
    emb.output(bad);
  }
  const std::string& s = out.str();
  CHECK(s.find("input[0] has") == std::string::npos);
  const std::string line_start = P + " embed_tokens Embedding\n";
  REQUIRE(s.find(line_start) != std::string::npos);
  const std::size_t b = s.find(line_start) + line_start.size();
  const std::string ids_line = s.substr(b, s.find('\n', b) - b);
  CHECK(ids_line.size() == std::string("xxxxxxxx xxxxxxxx input[0]").size());
  CHECK(ids_line.substr(18) == "input[0]");
  CHECK(ids_line.find("nan") == std::string::npos);
}

TEST_CASE("report: HF trace mode golden text — banner once per traced step, every frame as it completes") {
  nsrec::capture out;
  nanscope::recorder_options o = golden_options(out, on_detect::throw_exception);
  o.style = report_style::hf;
  o.trace_steps = {1, 2};
  recorder rec(o);
  const double nan = nsrec::qnan();
  const std::vector<double> a{-3.0, 0.125};
  const std::vector<double> n{nan, 1.0};
  auto step = [&](const std::vector<double>& l0_out) {
    scope model(rec, "", "Model");
    model.input(a);
    {
      scope l0(rec, "layers.0", "Linear");
      l0.input(a);
      l0.output(l0_out);
    }
    model.output(a);
  };
  step(a);  // step 0: not traced, nothing printed
  CHECK(out.str().empty());
  step(n);  // step 1: traced; the NaN is not reported while tracing (no throw), its has-line comes first
  const std::string step1 = "output has nans\n"
                            "\n\n" + P + " *** Starting batch number=1 ***\n" + HEADER + "\n" +  //
                            P + " layers.0 Linear\n"
                                "1.25e-01 3.00e+00 input[0]\n"
                                "     nan      nan output\n" +
                            P + "  Model\n"
                                "1.25e-01 3.00e+00 input[0]\n"
                                "1.25e-01 3.00e+00 output\n";
  CHECK(out.str() == step1);
  step(a);  // step 2: traced again, its own banner
  const std::string step2 = "\n\n" + P + " *** Starting batch number=2 ***\n" + HEADER + "\n" +  //
                            P + " layers.0 Linear\n"
                                "1.25e-01 3.00e+00 input[0]\n"
                                "1.25e-01 3.00e+00 output\n" +
                            P + "  Model\n"
                                "1.25e-01 3.00e+00 input[0]\n"
                                "1.25e-01 3.00e+00 output\n";
  CHECK(out.str() == step1 + step2);
  CHECK(rec.detections() == 0);
  out.clear();
  // step 3: not traced. HF's detected flag, set in step 1, was never reset: the first call of the next
  // untraced batch prints the report (its ring holds that one frame, with the batch banner) and raises.
  CHECK_THROWS_AS(step(a), nanscope::detection_error);
  const std::string step3 = "\nDetected inf/nan during batch_number=3\n"
                            "Last 1 forward frames:\n" + HEADER + "\n" +
                            "\n\n" + P + " *** Starting batch number=3 ***\n" + HEADER + "\n" +  //
                            P + " layers.0 Linear\n"
                                "1.25e-01 3.00e+00 input[0]\n"
                                "1.25e-01 3.00e+00 output\n"
                                "\n\n\n";
  CHECK(out.str() == step3);
  CHECK(rec.detections() == 1);
  out.clear();
  step(a);  // step 4 (the unwound root still ended step 3): clean
  CHECK(out.str().empty());
  CHECK(rec.step() == 5);
}

TEST_CASE("report: v1 one-line format golden text (docs/formats.md)") {
  nsrec::capture out;
  nanscope::recorder_options o = golden_options(out);
  o.style = report_style::hf_v1;
  o.auto_step = false;
  recorder rec(o);
  const std::vector<float> w{0.5f};
  const std::vector<float> in1{596.0f, -1.0f};
  const std::vector<float> out1{-3170.0f, 2.0f};
  const std::vector<float> in2{1.8e4f};
  const std::vector<float> out2{1.0f, nsrec::pos_inf_f()};
  {
    scope s(rec, "encoder.block.1.layer.1.DenseReluDense.wo", "Linear");
    s.parameter(w, "weight");  // parameters are not listed in this format
    s.input(in1);
    s.output(out1);
  }
  {
    scope s(rec, "encoder.block.2.layer.1.DenseReluDense.wo", "Linear");
    s.input(in2);
    s.output(out2);
  }
  const std::string expected =
      "< [0] encoder.block.2.layer.1.DenseReluDense.wo: Linear: output has infs\n"
      "\n"
      "\n"
      "last 4 frames:\n"
      "abs_max= 5.96e+02 > [0] encoder.block.1.layer.1.DenseReluDense.wo: Linear: input[0]\n"
      "abs_max= 3.17e+03 < [0] encoder.block.1.layer.1.DenseReluDense.wo: Linear: output\n"
      "abs_max= 1.80e+04 > [0] encoder.block.2.layer.1.DenseReluDense.wo: Linear: input[0]\n"
      "abs_max=      inf < [0] encoder.block.2.layer.1.DenseReluDense.wo: Linear: output\n";
  CHECK(out.str() == expected);
}

TEST_CASE("report: v1 format — a NaN reads `has nans`, an input detection uses `>`, the step is the batch") {
  nsrec::capture out;
  nanscope::recorder_options o = golden_options(out);
  o.style = report_style::hf_v1;
  o.auto_step = false;
  recorder rec(o);
  rec.set_step(3);
  const std::vector<double> bad{1.0, nsrec::qnan()};
  {
    scope s(rec, "decoder.lm_head", "Linear");
    s.input(bad);
  }
  const std::string expected =
      "> [3] decoder.lm_head: Linear: input[0] has nans\n"
      "\n"
      "\n"
      "last 1 frames:\n"
      "abs_max=      nan > [3] decoder.lm_head: Linear: input[0]\n";
  CHECK(out.str() == expected);
}

TEST_CASE("report: extended report — producer verdict and marker, counts, headroom, source locations") {
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out, on_detect::callback);  // default warnings: f16 at 1e4
  std::shared_ptr<nanscope::detection> got;
  o.callback = [&got](const nanscope::detection& d) { got = std::make_shared<nanscope::detection>(d); };
  o.style = report_style::extended;
  o.cast_to = nanscope::dtype::f16;  // f64 tensors, measured against fp16 (they will be cast to it)
  recorder rec(o);
  const double nan = nsrec::qnan();
  const std::vector<double> a{0.5, -2.0};
  const std::vector<double> big{1e4, -2.0};
  const std::vector<double> prod{nan, 1.0, nan};
  const nanscope::source_location here{"/src/model/layers.cpp", 42, "forward"};
  {
    scope model(rec, "", "Model");
    model.input(a);
    {
      scope l0(rec, "layers.0", "Linear");
      l0.input(a);
      l0.output(big);
    }
    {
      scope l1(rec, "layers.1", "Log");
      l1.input(big);
      l1.output(prod, here);
    }
  }
  REQUIRE(static_cast<bool>(got));
  const std::string& r = got->report;
  INFO(r);
  // Under the callback policy the report is handed over, not printed (the sink only got the f16 warning).
  CHECK(out.str().find("inf/nan detected") == std::string::npos);
  CHECK(out.str().find("warning") != std::string::npos);

  CHECK(r.find("step 0, layers.1 (Log), output: nan=2 (first at flat index 0)") != std::string::npos);
  CHECK(r.find("at /src/model/layers.cpp:42") != std::string::npos);
  CHECK(r.find("verdict: PRODUCED here") != std::string::npos);
  CHECK(r.find("arrived already non-finite") == std::string::npos);
  // The marker is on the producing frame's line and nowhere else.
  CHECK(nsrec::count_of(r, "<== PRODUCED") == 1);
  const std::size_t marker = r.find("<== PRODUCED");
  const std::size_t line_start = r.rfind('\n', marker);
  CHECK(r.substr(line_start, marker - line_start).find("layers.1: Log") != std::string::npos);
  const std::size_t l0_line = r.find("layers.0: Linear");
  REQUIRE(l0_line != std::string::npos);
  CHECK(r.substr(l0_line, r.find('\n', l0_line) - l0_line).find("<==") == std::string::npos);
  // Headroom of abs_max 1e4: f16 log2(65504/1e4) = 2.71 (and warned), bf16 114.71, e5m2 log2(57344/1e4) = 2.52,
  // e4m3 (max 448) already overflows.
  CHECK(r.find("f16=+2.7! bf16=+114.7 e4m3=OVERFLOW e5m2=+2.5") != std::string::npos);
  // Counts of the offending tensor, and the source location of the tensor line (file name only).
  CHECK(r.find("n=3 neg=0 zero=0 pos=1 -inf=0 +inf=0 nan=2") != std::string::npos);
  CHECK(r.find("| layers.cpp:42") != std::string::npos);
  CHECK(r.find("last 2 frames, oldest first") != std::string::npos);  // layers.0 and layers.1 (Model is still open)
}

TEST_CASE("report: extended report — a NaN that arrives at an input is not marked as produced there") {
  nsrec::capture out;
  nanscope::recorder_options o = golden_options(out, on_detect::callback);
  std::shared_ptr<nanscope::detection> got;
  o.callback = [&got](const nanscope::detection& d) { got = std::make_shared<nanscope::detection>(d); };
  o.style = report_style::extended;
  o.auto_step = false;  // two top-level scopes in one step
  recorder rec(o);
  const std::vector<float> a{1.0f, 2.0f};
  const std::vector<float> bad{nsrec::neg_inf_f(), 2.0f};
  {
    scope l0(rec, "layers.0", "Linear");
    l0.input(a);
    l0.output(a);
  }
  {
    scope l1(rec, "layers.1", "Linear");
    l1.input(bad);
  }
  REQUIRE(static_cast<bool>(got));
  const std::string& r = got->report;
  INFO(r);
  CHECK_FALSE(got->produced_here);
  CHECK(r.find("step 0, layers.1 (Linear), input[0]: -inf=1 (first at flat index 0)") != std::string::npos);
  CHECK(r.find("verdict: arrived already non-finite in input[0]") != std::string::npos);
  CHECK(r.find("PRODUCED") == std::string::npos);
  CHECK(r.find("<-- carries inf/nan") != std::string::npos);
}

TEST_CASE("report: extended report — a later frame fed by the producer is a carrier, not a producer") {
  nsrec::capture out;
  nanscope::recorder_options o = golden_options(out);
  o.style = report_style::extended;
  o.report_once_per_step = false;  // every detection reports
  recorder rec(o);
  const std::vector<float> a{1.0f, 2.0f};
  const std::vector<float> bad{nsrec::qnan_f(), 2.0f};
  {
    scope l0(rec, "layers.0", "Log");
    l0.input(a);
    l0.output(bad);  // report 1: produced here
  }
  {
    scope l1(rec, "layers.1", "Linear");
    l1.input(bad);   // report 2: arrived
    l1.output(bad);  // report 3: propagated
  }
  const std::string& s = out.str();
  INFO(s);
  CHECK(rec.detections() == 3);
  CHECK(nsrec::count_of(s, "=== nanscope: inf/nan detected ===") == 3);
  CHECK(nsrec::count_of(s, "verdict: PRODUCED here") == 1);
  CHECK(nsrec::count_of(s, "verdict: arrived already non-finite in input[0]") == 1);
  CHECK(nsrec::count_of(s, "verdict: propagated here") == 1);
  // The last report still names layers.0 as the producer and layers.1 as a carrier.
  const std::string last = s.substr(s.rfind("=== nanscope"));
  CHECK(last.find("layers.0: Log   <== PRODUCED the first inf/nan") != std::string::npos);
  CHECK(last.find("layers.1: Linear   <-- carries inf/nan") != std::string::npos);
}

TEST_CASE("report: the printers can be called directly on a hand-built detection") {
  nanscope::detection d;
  d.step = 7;
  d.module_path = "x";
  d.class_name = "X";
  d.context = "output";
  nanscope::frame f;
  f.step = 7;
  f.module_path = "x";
  f.class_name = "X";
  nanscope::tensor_record t;
  t.role = nanscope::tensor_role::output;
  t.context = "output";
  t.health.abs_min = 0.0;
  t.health.abs_max = nsrec::pos_inf();
  t.health.pos_inf = 1;
  t.health.any_nonfinite = true;
  f.tensors.push_back(t);
  d.frames.push_back(f);
  d.health = t.health;
  const std::string expected = "\nDetected inf/nan during batch_number=7\n"
                               "Last 1 forward frames:\n"
                               "abs min  abs max  metadata\n" +
                               P + " x X\n"
                                   "0.00e+00      inf output\n"
                                   "\n\n\n";
  CHECK(nanscope::format_report(report_style::hf, d) == expected);
  CHECK(nanscope::format_report(report_style::hf_v1, d) ==
        "< [7] x: X: output has infs\n\n\nlast 1 frames:\nabs_max=      inf < [7] x: X: output\n");
}
