// nanscope tests — recorder_test.cpp: the frame recorder's behaviour through its public API.
//  - producer versus propagator: which frame made the first NaN/Inf, and NaN made by unchecked code between
//    two frames (first seen at an input);
//  - the ring of saved frames (wrap-around, oldest first, max_frames changes);
//  - steps: auto_step at the outermost scope, set_step, next_step;
//  - trace_steps (HF's trace_batch_nums) and abort_after_step (HF's abort_after_batch_num);
//  - every policy: throw_exception, print_and_continue, callback, abort (in a forked child);
//  - per-site rules (glob patterns, allowed categories, skip), integer tensors, low-precision warnings.
// This TU also defines NANSCOPE_CONFIG_NO_SHORT_MACROS: the short DETECT_OVERFLOW alias must not exist here,
// while the other test TUs of the same binary use it.
#define NANSCOPE_CONFIG_NO_SHORT_MACROS
#include "support/recorder_support.hpp"

#include <nanscope/macros.hpp>
#include <nanscope/recorder.hpp>
#include <nanscope/report.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using nanscope::allow;
using nanscope::on_detect;
using nanscope::recorder;
using nanscope::scope;
using nanscope::tensor_role;

using vec = std::vector<double>;

/// Options printing into `c`, with no low-precision warnings unless a test turns them on. The style is the
/// default, native one (extended): detection as each tensor is recorded. The hf style is in hf_style_test.cpp.
nanscope::recorder_options opts(const nsrec::capture& c, on_detect policy) {
  nanscope::recorder_options o = nsrec::quiet_options(c, policy);
  for (double& w : o.warn_abs_max) w = 0.0;
  return o;
}

bool all_finite(const nanscope::frame& f) {
  for (const auto& t : f.tensors)
    if (t.health.has_nonfinite()) return false;
  return true;
}

/// One "layer" of a toy network: a scope named layers.<i> recording its input and its output.
/// Layer `log_layer` computes log(x) (NaN for x < 0, -inf for 0); the others compute x - 1.
vec layer(recorder& rec, int i, const vec& in, int log_layer) {
  scope s(rec, "layers." + std::to_string(i), i == log_layer ? "LogLayer" : "Shift");
  s.input(in);
  vec out(in.size());
  for (std::size_t k = 0; k < in.size(); ++k) out[k] = i == log_layer ? std::log(in[k]) : in[k] - 1.0;
  s.output(out);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Producer versus propagator
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("recorder: the layer that computes log of a negative is named as the producer (throw_exception)") {
  nsrec::capture out;
  recorder rec(opts(out, on_detect::throw_exception));
  int layers_run = 0;
  std::shared_ptr<nanscope::detection> d;
  try {
    scope model(rec, "", "Model");
    vec h{0.5, 1.0, 2.0};
    model.input(h);
    for (int i = 0; i < 6; ++i) {
      h = layer(rec, i, h, 2);  // layer 3 of 6: its input {-1.5, -1, 0} is finite, its output is not
      ++layers_run;
    }
    model.output(h);
  } catch (const nanscope::detection_error& e) {
    d = std::make_shared<nanscope::detection>(e.info());
  }
  REQUIRE(static_cast<bool>(d));
  CHECK(layers_run == 2);  // the exception left layer 3; layers 4..6 never ran
  CHECK(d->module_path == "layers.2");
  CHECK(d->class_name == "LogLayer");
  CHECK(d->context == "output");
  CHECK(d->role == tensor_role::output);
  CHECK(d->produced_here);
  CHECK(d->step == 0);
  CHECK(d->health.nan == 2);
  CHECK(d->health.neg_inf == 1);
  CHECK(d->health.first_nonfinite == 0);
  REQUIRE(d->frames.size() == 3);
  CHECK(d->frames[0].module_path == "layers.0");
  CHECK(d->frames[1].module_path == "layers.1");
  CHECK(d->frames[2].module_path == "layers.2");
  CHECK(all_finite(d->frames[0]));
  CHECK(all_finite(d->frames[1]));
  CHECK(d->frames[2].produced_nonfinite());
  CHECK(d->frames[2].inputs_finite());
  CHECK_FALSE(d->frames[2].complete);  // the detection came while layer 3 was running
  CHECK(d->frames[2].tensors.size() == 2);
  for (const auto& f : d->frames)
    for (const auto& t : f.tensors) CHECK(t.view.data == nullptr);  // the data is not kept past the frame
  // Unwinding completed layer 3 and the model; the step advanced.
  const auto saved = rec.frames();
  REQUIRE(saved.size() == 4);
  CHECK(saved[2].module_path == "layers.2");
  CHECK(saved[3].module_path == "");
  CHECK(saved[3].class_name == "Model");
  CHECK(rec.step() == 1);
  CHECK(rec.detections() == 1);
}

TEST_CASE("recorder: print_and_continue — the producer is reported once, later layers propagate silently") {
  nsrec::capture out;
  recorder rec(opts(out, on_detect::print_and_continue));
  std::shared_ptr<nanscope::detection> first;
  {
    scope model(rec, "", "Model");
    vec h{0.5, 1.0, 2.0};
    model.input(h);
    for (int i = 0; i < 6; ++i) h = layer(rec, i, h, 2);
    model.output(h);
  }
  CHECK(rec.detections() == 1);
  CHECK(nsrec::count_of(out.str(), "=== nanscope: inf/nan detected ===\nstep 0, ") == 1);
  CHECK(out.str().find("step 0, layers.2 (LogLayer), output:") != std::string::npos);
  CHECK(out.str().find("layers.3") == std::string::npos);  // the report was printed at layer 3
  const auto saved = rec.frames();
  REQUIRE(saved.size() == 7);
  CHECK(saved[2].produced_nonfinite());
  for (int i = 3; i < 6; ++i) {
    CHECK_FALSE(saved[static_cast<std::size_t>(i)].produced_nonfinite());
    CHECK_FALSE(saved[static_cast<std::size_t>(i)].inputs_finite());
  }
}

TEST_CASE("recorder: NaN made by unchecked code between two layers is first seen at the next layer's input") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::callback);
  std::shared_ptr<nanscope::detection> d;
  o.callback = [&d](const nanscope::detection& x) { d = std::make_shared<nanscope::detection>(x); };
  o.style = nanscope::report_style::extended;
  recorder rec(o);
  {
    scope model(rec, "", "Model");
    vec h{2.5, 3.0, 4.0};
    model.input(h);
    h = layer(rec, 0, h, -1);
    h = layer(rec, 1, h, -1);  // {0.5, 1, 2}
    for (double& x : h) x = std::sqrt(x - 1.0);  // unchecked: sqrt(-0.5) is NaN
    h = layer(rec, 2, h, -1);
    h = layer(rec, 3, h, -1);
  }
  REQUIRE(static_cast<bool>(d));
  CHECK(d->module_path == "layers.2");
  CHECK(d->context == "input[0]");
  CHECK(d->role == tensor_role::input);
  CHECK_FALSE(d->produced_here);
  CHECK(d->health.nan == 1);
  REQUIRE(d->frames.size() == 3);
  CHECK(all_finite(d->frames[0]));
  CHECK(all_finite(d->frames[1]));
  CHECK_FALSE(d->frames[2].inputs_finite());
  CHECK(d->report.find("verdict: arrived already non-finite in input[0]") != std::string::npos);
  CHECK(d->report.find("PRODUCED") == std::string::npos);
  CHECK(out.str().empty());  // callback policy: nothing printed
}

// ---------------------------------------------------------------------------------------------------------
// The ring of frames
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("recorder: ring wrap-around keeps exactly the last max_frames frames, oldest first") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::callback);
  o.max_frames = 3;
  std::shared_ptr<nanscope::detection> d;
  o.callback = [&d](const nanscope::detection& x) { d = std::make_shared<nanscope::detection>(x); };
  recorder rec(o);
  const vec ok{1.0};
  for (int i = 0; i < 10; ++i) {
    scope s(rec, "f" + std::to_string(i), "F");
    s.output(ok);
  }
  auto saved = rec.frames();
  REQUIRE(saved.size() == 3);
  CHECK(saved[0].module_path == "f7");
  CHECK(saved[1].module_path == "f8");
  CHECK(saved[2].module_path == "f9");
  CHECK(saved[0].sequence == 7);
  CHECK(saved[1].sequence == 8);
  CHECK(saved[2].sequence == 9);
  for (const auto& f : saved) CHECK(f.complete);

  // A detection in the 11th frame: the report holds max_frames frames, the current one last.
  const vec bad{nsrec::qnan()};
  {
    scope s(rec, "f10", "F");
    s.output(bad);
  }
  REQUIRE(static_cast<bool>(d));
  REQUIRE(d->frames.size() == 3);
  CHECK(d->frames[0].module_path == "f8");
  CHECK(d->frames[1].module_path == "f9");
  CHECK(d->frames[2].module_path == "f10");

  // Fewer frames than the ring holds: only those.
  rec.clear();
  CHECK(rec.frames().empty());
  {
    scope s(rec, "g", "G");
  }
  REQUIRE(rec.frames().size() == 1);
  CHECK(rec.frames()[0].module_path == "g");

  // Changing max_frames drops the saved frames and resizes the ring.
  nanscope::recorder_options o2 = rec.options();
  o2.max_frames = 5;
  rec.set_options(o2);
  CHECK(rec.frames().empty());
  for (int i = 0; i < 7; ++i) scope s(rec, "h" + std::to_string(i), "H");
  saved = rec.frames();
  REQUIRE(saved.size() == 5);
  CHECK(saved.front().module_path == "h2");
  CHECK(saved.back().module_path == "h6");
}

TEST_CASE("recorder: max_frames 0 keeps no frame (HF's max_frames_to_save=0); a native report still shows the detecting one") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::callback);
  o.max_frames = 0;
  std::shared_ptr<nanscope::detection> d;
  o.callback = [&d](const nanscope::detection& x) { d = std::make_shared<nanscope::detection>(x); };
  recorder rec(o);
  for (int i = 0; i < 3; ++i) scope s(rec, "f" + std::to_string(i), "F");
  CHECK(rec.frames().empty());
  {
    scope s(rec, "bad", "B");
    s.output(vec{nsrec::qnan()});
  }
  CHECK(rec.frames().empty());
  REQUIRE(static_cast<bool>(d));
  REQUIRE(d->frames.size() == 1);
  CHECK(d->frames[0].module_path == "bad");
  // and back to a ring of 2 through set_options
  nanscope::recorder_options o2 = rec.options();
  o2.max_frames = 2;
  rec.set_options(o2);
  for (int i = 0; i < 3; ++i) scope s(rec, "g" + std::to_string(i), "G");
  REQUIRE(rec.frames().size() == 2);
  CHECK(rec.frames()[1].module_path == "g2");
}

TEST_CASE("recorder: frames are recorded when they complete — children before parents — with their paths") {
  nsrec::capture out;
  recorder rec(opts(out, on_detect::throw_exception));
  const vec x{1.0};
  {
    scope root(rec, "", "Model");
    {
      scope enc(rec, "encoder", "Encoder");
      {
        scope blk(rec, "block.0", "Block");
        CHECK(blk.module_path() == "encoder.block.0");
        rec.checkpoint(x, "inside block");
      }
      scope blk1(rec, "block.1", "Block");
      CHECK(blk1.module_path() == "encoder.block.1");
    }
    root.output(x);
  }
  const auto saved = rec.frames();
  REQUIRE(saved.size() == 5);
  CHECK(saved[0].module_path == "encoder.block.0");
  CHECK(saved[0].checkpoint);
  CHECK(saved[0].class_name == "Block");
  CHECK(saved[0].tensors.at(0).context == "inside block");
  CHECK(saved[0].tensors.at(0).role == tensor_role::checkpoint);
  CHECK(saved[1].module_path == "encoder.block.0");
  CHECK_FALSE(saved[1].checkpoint);
  CHECK(saved[2].module_path == "encoder.block.1");
  CHECK(saved[3].module_path == "encoder");
  CHECK(saved[4].module_path == "");
  for (std::size_t i = 1; i < saved.size(); ++i) CHECK(saved[i].sequence == saved[i - 1].sequence + 1);
}

TEST_CASE("recorder: scopes of two recorders nest independently") {
  nsrec::capture out;
  recorder a(opts(out, on_detect::throw_exception));
  recorder b(opts(out, on_detect::throw_exception));
  {
    scope sa(a, "outer", "A");
    {
      scope sb(b, "inner", "B");
      CHECK(sb.module_path() == "inner");  // not "outer.inner": sa belongs to another recorder
      scope sa2(a, "child", "A");
      CHECK(sa2.module_path() == "outer.child");
    }
    CHECK(b.step() == 1);  // sb was b's outermost scope
    CHECK(a.step() == 0);
  }
  CHECK(a.step() == 1);
  CHECK(a.frames().size() == 2);
  CHECK(b.frames().size() == 1);
}

TEST_CASE("recorder: a scope left by an exception restores the enclosing scope") {
  nsrec::capture out;
  recorder rec(opts(out, on_detect::throw_exception));
  const vec bad{nsrec::pos_inf()};
  {
    scope root(rec, "root", "R");
    try {
      scope s(rec, "child", "C");
      s.output(bad);
    } catch (const nanscope::detection_error&) {
    }
    scope next(rec, "next", "N");
    CHECK(next.module_path() == "root.next");
  }
  {
    scope after(rec, "after", "A");
    CHECK(after.module_path() == "after");
  }
  CHECK(rec.step() == 2);
}

TEST_CASE("recorder: the health returned by a scope stays valid while the scope records more tensors") {
  // The result is returned by value (the frame's storage moves as more tensors are recorded), so
  // `const health_result& h = s.input(x);` binds to a temporary whose lifetime is extended: it cannot dangle.
  nsrec::capture out;
  recorder rec(opts(out, on_detect::print_and_continue));
  const vec x{1.0, 2.0};
  const vec y{-3.0, 4.0, 5.0};
  scope s(rec, "m", "M");
  const nanscope::health_result& first = s.input(x);
  for (int i = 0; i < 64; ++i) s.input(y);
  CHECK(first.count == 2);
  CHECK(first.abs_max == 2.0);
  CHECK(s.current().tensors.size() == 65);
  CHECK(s.current().tensors.front().health.abs_max == 2.0);
  CHECK(s.current().tensors.back().health.abs_max == 5.0);
}

// ---------------------------------------------------------------------------------------------------------
// Steps
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("recorder: auto_step advances the step when the outermost scope ends, not before") {
  nsrec::capture out;
  recorder rec(opts(out, on_detect::throw_exception));
  const vec x{1.0};
  CHECK(rec.step() == 0);
  {
    scope root(rec, "", "Model");
    {
      scope a(rec, "a", "A");
      rec.checkpoint(x, "cp");
    }
    CHECK(rec.step() == 0);
    {
      scope b(rec, "b", "B");
    }
    CHECK(rec.step() == 0);
  }
  CHECK(rec.step() == 1);
  rec.checkpoint(x, "outside any scope");  // a checkpoint is not a step
  CHECK(rec.step() == 1);
  {
    scope root(rec, "", "Model");
  }
  CHECK(rec.step() == 2);
  const auto saved = rec.frames();
  REQUIRE(saved.size() == 6);
  for (std::size_t i = 0; i < 4; ++i) CHECK(saved[i].step == 0);
  CHECK(saved[4].step == 1);
  CHECK(saved[4].checkpoint);
  CHECK(saved[4].module_path == "");
  CHECK(saved[5].step == 1);
}

TEST_CASE("recorder: set_step and next_step") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::throw_exception);
  o.auto_step = false;
  recorder rec(o);
  {
    scope s(rec, "a", "A");
  }
  CHECK(rec.step() == 0);  // auto_step off
  rec.next_step();
  CHECK(rec.step() == 1);
  {
    scope s(rec, "b", "B");
  }
  rec.set_step(41);
  CHECK(rec.step() == 41);
  {
    scope s(rec, "c", "C");
  }
  rec.next_step();
  CHECK(rec.step() == 42);
  const auto saved = rec.frames();
  REQUIRE(saved.size() == 3);
  CHECK(saved[0].step == 0);
  CHECK(saved[1].step == 1);
  CHECK(saved[2].step == 41);

  // With auto_step on, set_step moves the counter and the outermost scope continues from there.
  recorder rec2(opts(out, on_detect::throw_exception));
  rec2.set_step(10);
  {
    scope s(rec2, "a", "A");
    CHECK(s.current().step == 10);
  }
  CHECK(rec2.step() == 11);
}

// ---------------------------------------------------------------------------------------------------------
// trace_steps
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("recorder: trace_steps prints every frame of a traced step as it completes, suppresses detection") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::throw_exception);
  o.trace_steps = {1};
  o.max_frames = 3;
  recorder rec(o);
  const vec ok{1.0};
  const vec bad{nsrec::qnan()};
  const std::string banner1 = " *** Starting batch number=1 ***";
  // step 0: nothing printed
  {
    scope root(rec, "", "Model");
    scope a(rec, "a", "A");
    a.output(ok);
  }
  CHECK(out.str().empty());
  // step 1: traced
  {
    scope root(rec, "", "Model");
    for (int i = 0; i < 10; ++i) {
      scope l(rec, "l" + std::to_string(i), "L");
      l.output(i == 4 ? bad : ok);  // no detection while tracing: no throw
    }
    // Each completed frame has been printed already, before the step ends.
    CHECK(*out.calls == 10);
    CHECK(out.str().find(" l9 L\n") != std::string::npos);
    CHECK(out.str().find("  Model\n") == std::string::npos);
  }
  CHECK(*out.calls == 11);
  CHECK(nsrec::count_of(out.str(), banner1) == 1);
  CHECK(nsrec::count_of(out.str(), "abs min  abs max  metadata") == 1);
  CHECK(out.str().find("  Model\n") != std::string::npos);
  CHECK(out.str().find("Detected inf/nan") == std::string::npos);
  CHECK(rec.detections() == 0);
  // The ring stayed bounded through the trace (HF's ring becomes unbounded after a trace).
  CHECK(rec.frames().size() == 3);
  // step 2: not traced; detection is back
  out.clear();
  bool thrown = false;
  try {
    scope root(rec, "", "Model");
    scope a(rec, "a", "A");
    a.output(bad);
  } catch (const nanscope::detection_error& e) {
    thrown = true;
    CHECK(e.info().step == 2);
  }
  CHECK(thrown);
  CHECK(out.str().find("Starting batch number") == std::string::npos);
  CHECK(out.str().find("=== nanscope: inf/nan detected ===\nstep 2, ") != std::string::npos);
  CHECK(rec.frames().size() == 3);
}

// ---------------------------------------------------------------------------------------------------------
// abort_after_step
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("recorder: abort_after_step — stop_requested when the next step starts, with HF's message") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::throw_exception);
  o.abort_after_step = 1;
  recorder rec(o);
  const std::string msg = "DebugUnderflowOverflow: aborting after 2 batches due to `abort_after_batch_num=1` arg";
  {
    scope root(rec, "", "Model");
  }
  CHECK(out.str().empty());
  {
    scope root(rec, "", "Model");
  }  // step 1 complete: the message is printed; a destructor does not throw
  CHECK(out.str() == msg + "\n");
  CHECK(rec.step() == 2);
  bool thrown = false;
  try {
    scope root(rec, "", "Model");
    FAIL("the first scope of step 2 must throw");
  } catch (const nanscope::stop_requested& e) {
    thrown = true;
    CHECK(std::string(e.what()) == msg);
  }
  CHECK(thrown);
  CHECK(rec.frames().size() == 2);  // the scope that threw never became a frame
}

TEST_CASE("recorder: abort_after_step — next_step() throws stop_requested itself") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::throw_exception);
  o.abort_after_step = 2;
  o.auto_step = false;
  recorder rec(o);
  rec.next_step();
  rec.next_step();
  CHECK(out.str().empty());
  bool thrown = false;
  try {
    rec.next_step();
  } catch (const nanscope::stop_requested& e) {
    thrown = true;
    CHECK(std::string(e.what()) ==
          "DebugUnderflowOverflow: aborting after 3 batches due to `abort_after_batch_num=2` arg");
  }
  CHECK(thrown);
  CHECK(out.str() == "DebugUnderflowOverflow: aborting after 3 batches due to `abort_after_batch_num=2` arg\n");
}

TEST_CASE("recorder: abort_after_step — the message names the option's value even after set_step") {
  // HF: `abort_after_batch_num={N}` is the argument the user passed.
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::throw_exception);
  o.abort_after_step = 2;
  o.auto_step = false;
  recorder rec(o);
  rec.set_step(5);
  bool thrown = false;
  try {
    rec.next_step();
  } catch (const nanscope::stop_requested& e) {
    thrown = true;
    CHECK(std::string(e.what()) ==
          "DebugUnderflowOverflow: aborting after 6 batches due to `abort_after_batch_num=2` arg");
  }
  CHECK(thrown);
}

// ---------------------------------------------------------------------------------------------------------
// Policies
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("recorder: throw_exception — detection_error carries the report and the structured facts") {
  nsrec::capture out;
  recorder rec(opts(out, on_detect::throw_exception));
  const vec bad{1.0, -2.0, nsrec::neg_inf(), nsrec::qnan()};
  const nanscope::source_location where{"net.cpp", 77, "forward"};
  bool thrown = false;
  try {
    scope s(rec, "blk", "Block");
    s.output(bad, 1, where);
  } catch (const nanscope::detection_error& e) {
    thrown = true;
    const nanscope::detection& d = e.info();
    CHECK(d.module_path == "blk");
    CHECK(d.class_name == "Block");
    CHECK(d.context == "output[1]");
    CHECK(d.health.count == 4);
    CHECK(d.health.neg_inf == 1);
    CHECK(d.health.nan == 1);
    CHECK(d.health.first_nonfinite == 2);
    CHECK(d.where.line == 77);
    CHECK(std::string(d.where.file) == "net.cpp");
    CHECK(e.report() == d.report);
    CHECK(e.report() == out.str());  // printed, and carried
    CHECK_FALSE(e.report().empty());
  }
  CHECK(thrown);
  CHECK(rec.detections() == 1);
}

TEST_CASE("recorder: print_and_continue — one report per step; the next step reports again") {
  nsrec::capture out;
  recorder rec(opts(out, on_detect::print_and_continue));
  const vec bad{nsrec::qnan()};
  for (int step = 0; step < 2; ++step) {
    scope root(rec, "", "Model");
    {
      scope a(rec, "a", "A");
      a.output(bad);
    }
    {
      scope b(rec, "b", "B");
      b.output(bad);  // same step: not reported again
    }
  }
  CHECK(rec.detections() == 2);
  CHECK(nsrec::count_of(out.str(), "inf/nan detected ===\nstep 0, ") == 1);
  CHECK(nsrec::count_of(out.str(), "inf/nan detected ===\nstep 1, ") == 1);
  CHECK(nsrec::count_of(out.str(), "inf/nan detected") == 2);

  // report_once_per_step = false: every detection reports.
  out.clear();
  nanscope::recorder_options o = rec.options();
  o.report_once_per_step = false;
  rec.set_options(o);
  {
    scope root(rec, "", "Model");
    root.input(bad);
    root.output(bad);
  }
  CHECK(nsrec::count_of(out.str(), "inf/nan detected ===\nstep 2, ") == 2);
  CHECK(rec.detections() == 4);
}

TEST_CASE("recorder: callback — called with the detection; nothing printed") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::callback);
  std::vector<std::string> seen;
  o.callback = [&seen](const nanscope::detection& d) { seen.push_back(d.module_path + ":" + d.context); };
  recorder rec(o);
  const vec bad{nsrec::pos_inf()};
  {
    scope s(rec, "x", "X");
    s.input(bad);
    s.output(bad);  // same step
  }
  {
    scope s(rec, "y", "Y");
    s.output(bad);
  }
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == "x:input[0]");
  CHECK(seen[1] == "y:output");
  CHECK(out.str().empty());
  CHECK(*out.calls == 0);
}

TEST_CASE("recorder: callback policy without a callback neither prints nor throws") {
  nsrec::capture out;
  recorder rec(opts(out, on_detect::callback));
  const vec bad{nsrec::pos_inf()};
  scope s(rec, "x", "X");
  CHECK_NOTHROW(s.output(bad));
  CHECK(rec.detections() == 1);
  CHECK(out.str().empty());
}

TEST_CASE("recorder: abort — the process ends with SIGABRT after printing the report") {
  const nsrec::child_end e = nsrec::exit_of_child([] {
    nsrec::capture out;
    recorder rec(opts(out, on_detect::abort));
    const vec bad{nsrec::qnan()};
    scope s(rec, "x", "X");
    s.output(bad);
  });
  if (!e.ran) return;  // no fork here
  CHECK(e.signaled);
  CHECK(e.signal == SIGABRT);
  CHECK_FALSE(e.exited);
}

TEST_CASE("recorder: abort — abort_after_step ends the process at the end of the step") {
  const nsrec::child_end e = nsrec::exit_of_child([] {
    nsrec::capture out;
    nanscope::recorder_options o = opts(out, on_detect::abort);
    o.abort_after_step = 0;
    recorder rec(o);
    {
      scope s(rec, "", "Model");
    }
    ::_exit(4);  // not reached when the policy aborts
  });
  if (!e.ran) return;
  CHECK(e.signaled);
  CHECK(e.signal == SIGABRT);
}

TEST_CASE("recorder: abort — a finite forward pass does not abort") {
  const nsrec::child_end e = nsrec::exit_of_child([] {
    nsrec::capture out;
    recorder rec(opts(out, on_detect::abort));
    const vec ok{1.0, 2.0};
    scope s(rec, "x", "X");
    s.output(ok);
  });
  if (!e.ran) return;
  CHECK(e.exited);
  CHECK(e.exit_code == 0);
}

// ---------------------------------------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("recorder: site_rule allows -inf in attention masks, but not NaN or +inf; glob patterns") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::callback);
  std::vector<std::string> seen;
  o.callback = [&seen](const nanscope::detection& d) { seen.push_back(d.module_path + ":" + d.context); };
  o.report_once_per_step = false;
  o.rules.push_back(nanscope::site_rule{"*.attention", allow::neg_inf, false});
  o.rules.push_back(nanscope::site_rule{"layers.?.softmax", allow::inf, false});
  recorder rec(o);
  const vec mask{0.0, nsrec::neg_inf(), 0.0};
  const vec pinf{nsrec::pos_inf()};
  const vec nan{nsrec::qnan()};
  {
    scope s(rec, "encoder.layers.0.attention", "Attention");
    const auto& h = s.input(mask, "mask");
    CHECK(h.neg_inf == 1);
    CHECK(seen.empty());
    CHECK(s.current().tensors.back().allowed);
    s.output(nan);
    s.output(pinf, 1);
  }
  REQUIRE(seen.size() == 2);
  CHECK(seen[0] == "encoder.layers.0.attention:output");
  CHECK(seen[1] == "encoder.layers.0.attention:output[1]");
  seen.clear();
  {
    scope s(rec, "encoder.layers.0.attention.dense", "Linear");  // `*.attention` must match the whole path
    s.input(mask);
  }
  CHECK(seen.size() == 1);
  seen.clear();
  {
    scope s(rec, "layers.7.softmax", "Softmax");
    s.output(pinf);
    s.output(mask, 1);
    CHECK(seen.empty());
    s.output(nan, 2);
  }
  CHECK(seen.size() == 1);
  seen.clear();
  {
    scope s(rec, "layers.17.softmax", "Softmax");  // `?` is exactly one character
    s.output(pinf);
  }
  CHECK(seen.size() == 1);
}

TEST_CASE("recorder: site_rule skip=true does not check the site's tensors") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::throw_exception);
  o.rules.push_back(nanscope::site_rule{"*dropout*", allow::none, true});
  recorder rec(o);
  const vec nan{nsrec::qnan(), 1.0, 2.0};
  scope root(rec, "model", "M");
  {
    scope s(rec, "dropout", "Dropout");
    nanscope::health_result h;
    CHECK_NOTHROW(h = s.output(nan));
    CHECK(h.count == 3);
    CHECK_FALSE(h.has_nonfinite());
  }
  CHECK(rec.detections() == 0);
  scope other(rec, "dense", "Linear");
  CHECK_THROWS_AS(other.output(nan), nanscope::detection_error);
}

TEST_CASE("recorder: integer tensors are recorded with abs min/max, never classified; skip leaves them out") {
  nsrec::capture out;
  recorder rec(opts(out, on_detect::throw_exception));
  const std::vector<std::int64_t> ids{-1, 2, -7, 4};
  scope s(rec, "embed", "Embedding");
  const nanscope::health_result h = s.input(ids);
  CHECK(h.count == 4);
  CHECK(h.type == nanscope::dtype::i64);
  CHECK_FALSE(h.reads_data());  // no NaN classification: shape/count only ...
  CHECK(h.abs_min == 1.0);      // ... plus the abs range the HF report prints
  CHECK(h.abs_max == 7.0);
  CHECK(s.current().tensors.size() == 1);

  nanscope::recorder_options o = rec.options();
  o.skip_integer_tensors = true;
  rec.set_options(o);
  const nanscope::health_result h2 = s.input(ids);
  CHECK(h2.count == 4);
  CHECK(s.current().tensors.size() == 1);  // left out of the frame
  CHECK(rec.detections() == 0);
}

TEST_CASE("recorder: integer abs min/max follow torch.abs, which wraps the most negative value") {
  // torch computes abs in the tensor's type: abs(int8 -128) is -128, so HF's report prints -1.28e+02 as abs min.
  // Reference: every int8 pair, wrapped with the two's-complement negation torch's kernel does.
  nsrec::capture out;
  recorder rec(opts(out, on_detect::throw_exception));
  scope s(rec, "embed", "Embedding");
  const auto wrap8 = [](int x) { return static_cast<double>(static_cast<std::int8_t>(static_cast<std::uint8_t>(x < 0 ? -x : x))); };
  int checked = 0;
  for (int a = -128; a < 128; a += 3)
    for (int b = -128; b < 128; b += 5) {
      const std::vector<std::int8_t> v{static_cast<std::int8_t>(a), static_cast<std::int8_t>(b)};
      const nanscope::health_result h = s.input(v);
      CHECK(h.abs_min == std::min(wrap8(a), wrap8(b)));
      CHECK(h.abs_max == std::max(wrap8(a), wrap8(b)));
      ++checked;
    }
  CHECK(checked > 2000);
  const std::vector<std::int8_t> only_min{-128, -128};
  CHECK(s.input(only_min).abs_max == -128.0);  // every |x| is -128: so is the max
  const std::vector<std::int64_t> i64{std::numeric_limits<std::int64_t>::min(), 3};
  CHECK(s.input(i64).abs_min == -9223372036854775808.0);
  CHECK(s.input(i64).abs_max == 3.0);
  const std::vector<std::int32_t> i32{std::numeric_limits<std::int32_t>::min() + 1, 0};
  CHECK(s.input(i32).abs_max == 2147483647.0);  // one above the minimum: an ordinary abs
}

// ---------------------------------------------------------------------------------------------------------
// Low-precision warnings
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("recorder: an fp16 warning for abs_max 2e4 once per site per step, never for non-finite values") {
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out, on_detect::callback);  // default: f16 at 1e4
  o.cast_to = nanscope::dtype::f16;  // these f64 tensors will be cast to fp16
  recorder rec(o);
  const vec big{2e4, 1.0};
  const vec small{9e3};
  const vec inf{nsrec::pos_inf(), 2e4};
  {
    scope root(rec, "", "Model");
    for (int call = 0; call < 2; ++call) {  // the same site twice in one step: one warning
      scope s(rec, "ff", "Linear");
      s.output(big);
    }
    CHECK(rec.warnings() == 1);
    {
      scope s(rec, "ff", "Linear");
      s.input(big);  // another site (input[0] of ff)
      s.output(small);
    }
    CHECK(rec.warnings() == 2);
    {
      scope s(rec, "other", "Linear");
      s.output(inf);  // abs_max inf: the detector's business, not a warning
    }
    CHECK(rec.warnings() == 2);
  }
  CHECK(nsrec::count_of(out.str(), "warning") == 2);
  {
    scope root(rec, "", "Model");
    scope s(rec, "ff", "Linear");
    s.output(big);  // next step: again
  }
  CHECK(rec.warnings() == 3);
  CHECK(nsrec::count_of(out.str(), "warning") == 3);
  CHECK(out.str().find("f16") != std::string::npos);
  // The frame records which threshold was crossed.
  const auto saved = rec.frames();
  REQUIRE_FALSE(saved.empty());
  CHECK(saved[saved.size() - 2].tensors.at(0).warned == 1u);
}

TEST_CASE("recorder: no low-precision warning for a tensor that holds NaN (the detector reports it)") {
  // abs_max is taken over non-NaN values, so {NaN, 2e4} has a finite abs_max of 2e4; the tensor is still
  // non-finite and is already reported as such.
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out, on_detect::callback);
  o.cast_to = nanscope::dtype::f16;
  recorder rec(o);
  const vec nan_big{nsrec::qnan(), 2e4};
  scope s(rec, "other", "Linear");
  s.output(nan_big);
  CHECK(rec.detections() == 1);
  CHECK(rec.warnings() == 0);
  CHECK(out.str().find("warning") == std::string::npos);
}

TEST_CASE("recorder: warning thresholds are set per low-precision format and measured against the cast target") {
  // A threshold of format F applies to a tensor whose cast target is F: the first matching rule's cast_to, else
  // recorder_options::cast_to, else the tensor's own dtype.
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out, on_detect::callback);  // f16 at 1e4 by default
  o.warn_abs_max[static_cast<int>(nanscope::lp_format::bf16)] = 1e30;
  o.warn_abs_max[static_cast<int>(nanscope::lp_format::e4m3fn)] = 100.0;
  o.rules.push_back(nanscope::site_rule{"kv.*", nanscope::allow::none, false, nanscope::dtype::f8_e4m3fn});
  recorder rec(o);
  const vec a{2e4};
  const vec b{2e30};
  const std::vector<float> af{2e4f};
  {
    scope s(rec, "m", "M");
    s.output(a);   // f64, no cast target: no low-precision format to warn about
    s.output(af, 1);  // f32 in an f32 model: no fp16 warning (issue 14 item 6)
    CHECK(rec.warnings() == 0);
    CHECK(s.current().tensors.back().warned == 0u);
  }
  {
    scope s(rec, "kv.cache", "KV");  // the rule: these are cast to e4m3fn
    s.output(a);
    CHECK(rec.warnings() == 1);
    CHECK(s.current().tensors.back().warned == (1u << 2));
    CHECK(out.str().find("e4m3") != std::string::npos);
  }
  const std::vector<nanscope::half> h{nanscope::half::from_float(3e4)};
  {
    scope s(rec, "fp16", "H");
    s.output(h);  // an fp16 tensor: its own dtype
    CHECK(rec.warnings() == 2);
    CHECK(s.current().tensors.back().warned == 1u);
  }
  nanscope::recorder_options o2 = rec.options();
  o2.cast_to = nanscope::dtype::bf16;  // everything else will be cast to bf16
  rec.set_options(o2);
  {
    scope s(rec, "m2", "M");
    s.output(b);
    s.output(a, 1);  // 2e4 is far below the bf16 threshold; the f16 one does not apply
    CHECK(rec.warnings() == 3);
    CHECK(s.current().tensors.at(0).warned == (1u << 1));
    CHECK(s.current().tensors.at(1).warned == 0u);
  }
  CHECK(out.str().find("bf16") != std::string::npos);
  CHECK(out.str().find("(f16 headroom") != std::string::npos);  // the fp16 tensor's warning
}

TEST_CASE("recorder: a warning past the format's largest finite value says the cast will overflow, with numbers") {
  // A negative headroom is not the routine 1e4 warning: the value cannot be stored in the target format.
  nsrec::capture out;
  nanscope::recorder_options o = nsrec::quiet_options(out, on_detect::callback);  // f16 at 1e4 by default
  o.cast_to = nanscope::dtype::f16;
  o.warn_abs_max[static_cast<int>(nanscope::lp_format::e4m3fn)] = 100.0;
  o.rules.push_back(nanscope::site_rule{"kv", nanscope::allow::none, false, nanscope::dtype::f8_e4m3fn});
  recorder rec(o);
  const vec routine{2e4, -1.0};
  const vec over{-7e4, 3.0};
  const vec edge{65510.0};  // past 65504, below the rounding boundary 65520: rounds down to 65504
  const vec kv{500.0};      // past e4m3fn's 448 and its boundary 464: NaN (e4m3fn has no inf)
  auto line_of = [&](const char* path, const vec& x) {
    out.clear();
    scope s(rec, path, "Linear");
    s.output(x);
    return out.str();
  };
  scope root(rec, "", "Model");  // one step
  CHECK(line_of("routine", routine) ==
        "nanscope: warning: step 0 routine: Linear: output abs_max=2.000e+04 >= 1.000e+04 (f16 headroom 1.71 bits)\n");
  CHECK(line_of("over", over) ==
        "nanscope: warning: step 0 over: Linear: output abs_max=7.000e+04 is already past the largest finite f16 value "
        "65504: the cast to f16 WILL OVERFLOW (|x| >= 65520 becomes inf; f16 headroom -0.10 bits)\n");
  CHECK(line_of("edge", edge) ==
        "nanscope: warning: step 0 edge: Linear: output abs_max=6.551e+04 is past the largest finite f16 value 65504 "
        "and rounds down to it: no headroom left, any growth overflows (|x| >= 65520 becomes inf; f16 headroom -0.00 "
        "bits)\n");
  CHECK(line_of("kv", kv) ==
        "nanscope: warning: step 0 kv: Linear: output abs_max=5.000e+02 is already past the largest finite e4m3 value "
        "448: the cast to e4m3 WILL OVERFLOW (|x| > 464 becomes NaN, it has no inf; e4m3 headroom -0.16 bits)\n");
  CHECK(rec.warnings() == 4);
}

// ---------------------------------------------------------------------------------------------------------
// NANSCOPE_CONFIG_NO_SHORT_MACROS (defined at the top of this file)
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("recorder: NANSCOPE_CONFIG_NO_SHORT_MACROS removes DETECT_OVERFLOW, keeps NANSCOPE_DETECT_OVERFLOW") {
#ifdef DETECT_OVERFLOW
  FAIL("DETECT_OVERFLOW is defined although NANSCOPE_CONFIG_NO_SHORT_MACROS is");
#endif
  nsrec::capture out;
  recorder rec(opts(out, on_detect::callback));
  const vec x{3.0};
  NANSCOPE_DETECT_OVERFLOW_TO(rec, x, "long name still works");
  REQUIRE(rec.frames().size() == 1);
  CHECK(rec.frames()[0].tensors.at(0).context == "long name still works");
}

TEST_CASE("recorder: count_margins stores exact would-overflow counts per format and the extended report shows them") {
  nsrec::capture out;
  nanscope::recorder_options o = opts(out, on_detect::callback);
  o.count_margins = true;
  o.style = nanscope::report_style::extended;
  std::string report;
  o.callback = [&](const nanscope::detection& d) { report = nanscope::format_report(nanscope::report_style::extended, d); };
  recorder rec(o);
  // 65519 stays finite in fp16 (rounds to 65504), 65520 overflows (docs/formats.md); 1e-8 flushes to zero in
  // fp16 (<= 2^-25) and 1e-6 becomes an fp16 subnormal; 500 overflows e4m3fn (> 464), 448 does not.
  const std::vector<float> x{65519.0f, 65520.0f, 1e-8f, 1e-6f, 500.0f, 448.0f};
  const std::vector<float> bad{std::nanf("")};
  scope s(rec, "proj", "Linear");
  s.input(x);
  const nanscope::tensor_record& r = s.current().tensors.back();
  REQUIRE(r.has_margins);
  CHECK(r.margins[nanscope::dtype::f16].overflow == 1);
  CHECK(r.margins[nanscope::dtype::f16].underflow_to_zero == 1);
  CHECK(r.margins[nanscope::dtype::f16].subnormal == 1);
  CHECK(r.margins[nanscope::dtype::f8_e4m3fn].overflow == 3);  // 65519, 65520, 500
  CHECK(r.margins[nanscope::dtype::bf16].overflow == 0);
  s.output(bad);
  CHECK(report.find("f16=OVERFLOW(over=1 sub=1 zero=1)") != std::string::npos);
}
