// nanscope tests — hf_style_test.cpp: report_style::hf against HuggingFace's DebugUnderflowOverflow as
// docs/formats.md describes it (issue 14 items 1-7).
//
// The independent reference is `hf_model` below: a naive transcription of §2's state and its eight steps
// (a ring of joined strings, the current frame as a list of lines, batch / calls / detected), with abs min/max
// computed from the data with torch semantics and numbers printed with snprintf("%8.2e") (what Python's
// `{:8.2e}` prints). It consumes the module completions of a scenario (children before parents, the root
// last) and produces the expected stdout bytes and exception texts. The real recorder runs the same scenario
// through scopes, printing into a sink; both must agree byte for byte.
//
// Where nanscope cannot do what Python does, the model follows nanscope's documented rule (docs/recorder.md,
// "Where the hf style differs from HuggingFace"): the ring stays bounded after a trace; a raise happens at
// the next record / scope / raise_pending() (the driver calls raise_pending() after each batch); after a
// raise the batch's remaining calls are not analysed and the batch still ends with the root (batch += 1 and
// its banner); a continuing policy clears the flag after each report and reports once per batch.
#include "support/recorder_support.hpp"

#include <nanscope/recorder.hpp>
#include <nanscope/report.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <cstdio>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using nanscope::on_detect;
using nanscope::recorder;
using nanscope::scope;
using vec = std::vector<double>;

const std::string PAD17(17, ' ');

// ---------------------------------------------------------------------------------------------------------
// A scenario: a tree of module calls per batch
// ---------------------------------------------------------------------------------------------------------

struct mod {
  std::string name;  // path component; "" for the root
  std::string cls;
  std::vector<std::pair<std::string, vec>> params;
  std::vector<vec> inputs;
  std::vector<mod> children;
  std::vector<vec> outputs;  // one: "output"; several: "output[i]"
};

std::string join_path(const std::string& parent, const std::string& name) {
  return parent.empty() ? name : parent + "." + name;
}

// ---------------------------------------------------------------------------------------------------------
// The reference (docs/formats.md, written from the text)
// ---------------------------------------------------------------------------------------------------------

// By the bits, not by comparisons: the fastmath preset builds this file with -ffast-math (x != x folds to false).
std::uint64_t bits_of(double x) {
  std::uint64_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b & 0x7FFFFFFFFFFFFFFFull;
}
bool bits_nan(double x) { return bits_of(x) > 0x7FF0000000000000ull; }
bool bits_inf(double x) { return bits_of(x) == 0x7FF0000000000000ull; }

std::string e8(double v) {
  if (bits_nan(v)) return "     nan";
  if (bits_inf(v)) return v > 0 ? "     inf" : "    -inf";
  char b[64];
  std::snprintf(b, sizeof b, "%8.2e", v);
  return b;
}

struct hf_model {
  std::vector<std::uint64_t> trace_batch_nums;
  std::size_t max_frames = 21;
  long long abort_after = -1;
  bool raise = true;  // throw_exception; false: print_and_continue

  std::string out;                  // stdout
  std::vector<std::string> raised;  // exception texts, in order
  std::deque<std::string> frames;
  std::vector<std::string> frame;
  std::uint64_t batch = 0, calls = 0;
  bool detected = false;
  long long reported_batch = -1;
  bool halted = false;     // raised in this forward pass: no more hooks
  bool root_done = false;  // the root's hook ran in this forward pass

  void print(const std::string& s) { out += s + "\n"; }
  static std::string join(const std::deque<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "\n" : "") + v[i];
    return s;
  }
  void banner() {
    frame.push_back("\n\n" + PAD17 + " *** Starting batch number=" + std::to_string(batch) + " ***");
    frame.push_back("abs min  abs max  metadata");
  }
  void analyse(const vec& x, const std::string& ctx) {
    bool nan = false, inf = false;
    double mn = nsrec::pos_inf(), mx = 0.0;
    for (double v : x) {
      nan = nan || bits_nan(v);
      inf = inf || bits_inf(v);
      const double a = v < 0 ? -v : v;
      if (a < mn) mn = a;
      if (a > mx) mx = a;
    }
    if (nan) mn = mx = nsrec::qnan();  // torch: abs().min() / max() are nan when any element is
    frame.push_back(e8(mn) + " " + e8(mx) + " " + ctx);
    if (nan) print(ctx + " has nans");
    if (inf) print(ctx + " has infs");
    detected = detected || nan || inf;
  }
  void call(const std::string& path, const mod& m, bool is_root) {
    if (halted) return;
    const bool trace = std::find(trace_batch_nums.begin(), trace_batch_nums.end(), batch) != trace_batch_nums.end();
    if (trace) frames.clear();                              // 1
    if (calls == 0) banner();                               // 2
    ++calls;
    // "once per batch" (nanscope's continuing policies) is keyed by the batch the call belongs to: a root's
    // call still belongs to the batch it ends, though HF prints the incremented number.
    const long long call_batch = static_cast<long long>(batch);
    if (is_root) {                                          // 3
      ++batch;
      root_done = true;
    }
    frame.push_back(PAD17 + " " + path + " " + m.cls);          // 4
    for (const auto& p : m.params) analyse(p.second, p.first);
    for (std::size_t i = 0; i < m.inputs.size(); ++i) analyse(m.inputs[i], "input[" + std::to_string(i) + "]");
    for (std::size_t i = 0; i < m.outputs.size(); ++i)
      analyse(m.outputs[i], m.outputs.size() == 1 ? std::string("output") : "output[" + std::to_string(i) + "]");
    std::string f;
    for (std::size_t i = 0; i < frame.size(); ++i) f += (i ? "\n" : "") + frame[i];
    frame.clear();
    frames.push_back(f);
    if (trace) {                                            // 5: HF's frames are a list since step 1 (unbounded)
      print(join(frames));
      frames.clear();
    } else {
      while (frames.size() > max_frames) frames.pop_front();  // a deque(maxlen=max_frames): 0 keeps none
    }
    if (is_root) banner();                                  // 6
    if (detected && !trace) {                               // 7
      detected = false;
      if (reported_batch != call_batch) {
        reported_batch = call_batch;
        print("\nDetected inf/nan during batch_number=" + std::to_string(batch));
        print("Last " + std::to_string(frames.size()) + " forward frames:");
        print("abs min  abs max  metadata");
        print(join(frames));
        print("\n\n");
        if (raise) {
          raised.push_back(
              "DebugUnderflowOverflow: inf/nan detected, aborting as there is no point running further. Please "
              "scroll up above this traceback to see the activation values prior to this event.");
          halted = true;
          return;
        }
      }
    }
    if (abort_after >= 0 && batch > static_cast<std::uint64_t>(abort_after)) {  // 8
      raised.push_back("DebugUnderflowOverflow: aborting after " + std::to_string(batch) +
                       " batches due to `abort_after_batch_num=" + std::to_string(abort_after) + "` arg");
      halted = true;
    }
  }
  void walk(const std::string& path, const mod& m, bool is_root) {
    for (const auto& c : m.children) walk(join_path(path, c.name), c, false);
    call(path, m, is_root);
  }
  void run_batch(const mod& root) {
    halted = false;
    root_done = false;
    walk(root.name, root, true);
    if (halted && !root_done) {  // nanscope: the batch still ends with the root
      ++batch;
      banner();
    }
  }
};

// ---------------------------------------------------------------------------------------------------------
// The real recorder, driven through scopes
// ---------------------------------------------------------------------------------------------------------

void run_scopes(recorder& rec, const mod& m) {
  scope s(rec, m.name, m.cls);
  for (const auto& p : m.params) s.parameter(p.second, p.first);
  for (const auto& x : m.inputs) s.input(x);
  for (const auto& c : m.children) run_scopes(rec, c);
  for (std::size_t i = 0; i < m.outputs.size(); ++i) {
    if (m.outputs.size() == 1) s.output(m.outputs[i]);
    else s.output(m.outputs[i], static_cast<int>(i));
  }
}

struct real_run {
  std::string out;
  std::vector<std::string> raised;
};

real_run run_real(const std::vector<mod>& batches, const hf_model& cfg) {
  nsrec::capture c;
  nanscope::recorder_options o;
  o.style = nanscope::report_style::hf;
  o.sink = c.sink();
  o.policy = cfg.raise ? on_detect::throw_exception : on_detect::print_and_continue;
  o.trace_steps = cfg.trace_batch_nums;
  o.max_frames = cfg.max_frames;
  o.abort_after_step = cfg.abort_after;
  recorder rec(o);
  real_run r;
  for (const auto& b : batches) {
    try {
      run_scopes(rec, b);
      rec.raise_pending();
    } catch (const nanscope::detection_error& e) {
      r.raised.push_back(e.what());
      CHECK(e.report().find("\nDetected inf/nan during batch_number=") == 0);
    } catch (const nanscope::stop_requested& e) {
      r.raised.push_back(e.what());
    }
  }
  r.out = c.str();
  return r;
}

void compare(const std::vector<mod>& batches, hf_model model) {
  const real_run r = run_real(batches, model);
  for (const auto& b : batches) model.run_batch(b);
  CHECK(r.out == model.out);
  CHECK(r.raised == model.raised);
}

// ---------------------------------------------------------------------------------------------------------
// Building blocks
// ---------------------------------------------------------------------------------------------------------

mod linear(const std::string& name, const vec& w, const vec& in, const vec& out) {
  mod m;
  m.name = name;
  m.cls = "Linear";
  m.params = {{"weight", w}, {"bias", vec{0.0, 0.5}}};
  m.inputs = {in};
  m.outputs = {out};
  return m;
}

/// root "" (Model) -> encoder (Encoder) -> layers.0, layers.1 (Linear), then act (GELU) with two outputs.
mod model(const vec& x, const vec& l0_out, const vec& l1_out, const vec& act_out, const vec& root_out) {
  mod enc;
  enc.name = "encoder";
  enc.cls = "Encoder";
  enc.inputs = {x};
  enc.children = {linear("layers.0", vec{0.25, -3.0}, x, l0_out), linear("layers.1", vec{1.5e2, 2.0}, l0_out, l1_out)};
  enc.outputs = {l1_out};
  mod act;
  act.name = "act";
  act.cls = "GELU";
  act.inputs = {l1_out};
  act.outputs = {act_out, vec{1.0}};
  mod root;
  root.name = "";
  root.cls = "Model";
  root.inputs = {x};
  root.children = {enc, act};
  root.outputs = {root_out};
  return root;
}

const vec ok{1.0, -2.0, 0.0};
const vec ok2{3.5e3, -0.125};
vec with_nan() { return vec{1.0, nsrec::qnan(), -4.0}; }
vec with_inf() { return vec{nsrec::neg_inf(), 2.0}; }
vec with_both() { return vec{nsrec::pos_inf(), nsrec::qnan()}; }

mod clean() { return model(ok, ok2, ok, ok2, ok); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------
// Against the reference
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("hf style: clean batches print nothing and raise nothing") {
  hf_model m;
  compare({clean(), clean(), clean()}, m);
  const real_run r = run_real({clean(), clean()}, m);
  CHECK(r.out.empty());
}

TEST_CASE("hf style: NaN in a leaf — has-lines first, the leaf's frame with parameters, HF's exception text") {
  for (std::size_t max_frames : {std::size_t{1}, std::size_t{2}, std::size_t{4}, std::size_t{21}}) {
    CAPTURE(max_frames);
    hf_model m;
    m.max_frames = max_frames;
    compare({clean(), model(ok, ok2, with_nan(), ok2, ok)}, m);  // layers.1 makes the NaN in batch 1
    compare({model(ok, with_both(), ok, ok2, ok)}, m);           // layers.0 in batch 0: nans then infs
  }
}

TEST_CASE("hf style: the banner frame is shown while it is in the ring, and falls out of a small ring") {
  // Batch 1's first frame (layers.0) carries the banner; layers.1 of batch 1 makes the inf. With max_frames 2
  // the banner frame is in the report; with 1 it is not.
  for (std::size_t max_frames : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
    CAPTURE(max_frames);
    hf_model m;
    m.max_frames = max_frames;
    compare({clean(), model(ok, ok2, with_inf(), ok2, ok)}, m);
  }
}

TEST_CASE("hf style: max_frames_to_save=0 keeps no frame: \"Last 0 forward frames:\", a traced frame still prints") {
  // HF's frames are collections.deque([], 0): nothing is saved, and the report lists no frame (nanscope kept one)
  hf_model m;
  m.max_frames = 0;
  compare({clean(), model(ok, ok2, with_nan(), ok2, ok)}, m);
  compare({model(with_nan(), ok2, ok, ok2, ok)}, m);
  const real_run r = run_real({model(ok, with_inf(), ok, ok2, ok)}, m);
  CHECK(r.out.find("Last 0 forward frames:\nabs min  abs max  metadata\n\n\n\n\n") != std::string::npos);
  hf_model t;  // in a traced batch HF's frames became a list: the traced frame prints
  t.max_frames = 0;
  t.trace_batch_nums = {0};
  compare({model(ok, ok2, with_nan(), ok2, ok), clean()}, t);
}

TEST_CASE("hf style: NaN in the model's input is reported at the first leaf that receives it") {
  hf_model m;
  compare({model(with_nan(), ok2, ok, ok2, ok)}, m);
  compare({clean(), model(with_nan(), ok2, ok, ok2, ok), clean()}, m);
}

TEST_CASE("hf style: an overflow made by the root's own code is reported with the next batch number") {
  hf_model m;
  compare({model(ok, ok2, ok, ok2, with_inf())}, m);
  compare({clean(), clean(), model(ok, ok2, ok, ok2, with_nan())}, m);
}

TEST_CASE("hf style: trace batches, with a NaN inside a traced batch") {
  hf_model m;
  m.trace_batch_nums = {1, 2};
  m.max_frames = 3;
  // batch 1 traced with a NaN (no report there; the flag carries into batch 3's first call), batch 2 traced
  // clean, batch 3 not traced.
  compare({clean(), model(ok, with_nan(), ok, ok2, ok), clean(), clean()}, m);
  hf_model t;
  t.trace_batch_nums = {0};
  compare({model(ok, ok2, with_nan(), ok2, ok), clean()}, t);
  hf_model u;  // the last batch traced: the flag never reaches a report
  u.trace_batch_nums = {1};
  compare({clean(), model(ok, ok2, ok, with_inf(), ok)}, u);
}

TEST_CASE("hf style: abort_after_batch_num 0 and 2") {
  for (long long n : {0LL, 2LL}) {
    CAPTURE(n);
    hf_model m;
    m.abort_after = n;
    compare({clean(), clean(), clean(), clean()}, m);
    m.trace_batch_nums = {0, 1};
    compare({clean(), clean(), clean(), clean()}, m);
  }
  hf_model d;  // a detection in the same batch raises first
  d.abort_after = 0;
  compare({model(ok, ok2, ok, ok2, with_nan()), clean()}, d);
}

TEST_CASE("hf style: print_and_continue reports once per batch, has-lines every time") {
  hf_model m;
  m.raise = false;
  m.max_frames = 4;
  compare({model(ok, with_nan(), with_nan(), ok2, ok), model(ok, ok2, ok, with_inf(), with_inf()), clean()}, m);
  m.trace_batch_nums = {1};
  compare({model(ok, with_nan(), with_nan(), ok2, ok), model(ok, ok2, ok, with_inf(), with_inf()), clean()}, m);
}

// ---------------------------------------------------------------------------------------------------------
// Literal goldens (hand-checked against §2, for readability)
// ---------------------------------------------------------------------------------------------------------

TEST_CASE("hf style golden: NaN in the input, seen by the first leaf, report ends with four newlines") {
  nsrec::capture c;
  nanscope::recorder_options o;
  o.style = nanscope::report_style::hf;
  o.sink = c.sink();
  recorder rec(o);
  const vec x{1.0, nsrec::qnan()};
  const vec w{0.5, -2.0};
  std::string what;
  try {
    scope root(rec, "", "Model");
    root.input(x);
    {
      scope l(rec, "dense", "Linear");
      l.parameter(w, "weight");
      l.input(x);
      l.output(x);
    }  // the hook: has-lines and the report are printed here
    CHECK(rec.detections() == 1);
    root.output(x);  // raises
    FAIL("not raised");
  } catch (const nanscope::detection_error& e) {
    what = e.what();
    CHECK(e.info().module_path == "dense");
    CHECK(e.info().context == "input[0]");
  }
  const std::string expected = "input[0] has nans\n"
                               "output has nans\n"
                               "\n"
                               "Detected inf/nan during batch_number=0\n"
                               "Last 1 forward frames:\n"
                               "abs min  abs max  metadata\n"
                               "\n\n" + PAD17 + " *** Starting batch number=0 ***\n"
                               "abs min  abs max  metadata\n" +
                               PAD17 + " dense Linear\n"
                               "5.00e-01 2.00e+00 weight\n"
                               "     nan      nan input[0]\n"
                               "     nan      nan output\n"
                               "\n\n\n";
  CHECK(c.str() == expected);
  CHECK(what ==
        "DebugUnderflowOverflow: inf/nan detected, aborting as there is no point running further. Please scroll up "
        "above this traceback to see the activation values prior to this event.");
  CHECK(rec.step() == 1);  // the root unwound: the batch ended
}

TEST_CASE("hf style golden: root-own overflow says batch_number=1; abort_after 0 prints nothing") {
  nsrec::capture c;
  nanscope::recorder_options o;
  o.style = nanscope::report_style::hf;
  o.sink = c.sink();
  o.max_frames = 2;
  recorder rec(o);
  const vec a{2.0};
  const vec inf{nsrec::pos_inf()};
  {
    scope root(rec, "", "Model");
    {
      scope l(rec, "l", "L");
      l.output(a);
    }
    root.output(inf);
  }
  const std::string expected = "output has infs\n"
                               "\n"
                               "Detected inf/nan during batch_number=1\n"
                               "Last 2 forward frames:\n"
                               "abs min  abs max  metadata\n"
                               "\n\n" + PAD17 + " *** Starting batch number=0 ***\n"
                               "abs min  abs max  metadata\n" +
                               PAD17 + " l L\n"
                               "2.00e+00 2.00e+00 output\n" +
                               PAD17 + "  Model\n"
                               "     inf      inf output\n"
                               "\n\n\n";
  CHECK(c.str() == expected);
  CHECK_THROWS_AS(rec.raise_pending(), nanscope::detection_error);

  nsrec::capture c2;
  o.sink = c2.sink();
  o.abort_after_step = 0;
  recorder stop(o);
  {
    scope root(stop, "", "Model");
  }
  CHECK(c2.str().empty());
  std::string what;
  try {
    scope next(stop, "", "Model");
  } catch (const nanscope::stop_requested& e) {
    what = e.what();
  }
  CHECK(what == "DebugUnderflowOverflow: aborting after 1 batches due to `abort_after_batch_num=0` arg");
}

TEST_CASE("hf style: checkpoints are HF's detect_overflow — lines at once, no frame, no report") {
  nsrec::capture c;
  nanscope::recorder_options o;
  o.style = nanscope::report_style::hf;
  o.sink = c.sink();
  recorder rec(o);
  const vec both{nsrec::qnan(), nsrec::neg_inf()};
  {
    scope root(rec, "", "Model");
    rec.checkpoint(both, "after layer_norm");
    CHECK(c.str() == "after layer_norm has nans\nafter layer_norm has infs\n");
  }
  CHECK(rec.detections() == 0);
  CHECK(c.str() == "after layer_norm has nans\nafter layer_norm has infs\n");
  CHECK(rec.frames().size() == 2);  // the recorder's own ring keeps the checkpoint
}

TEST_CASE("hf style: the default sink is stdout; no warnings unless asked") {
  nanscope::recorder_options o;
  CHECK(o.style == nanscope::report_style::extended);  // the native style is the default
  nsrec::capture c;
  o.style = nanscope::report_style::hf;
  o.sink = c.sink();
  o.cast_to = nanscope::dtype::f16;
  recorder rec(o);
  const vec big{3e4};
  {
    scope s(rec, "", "M");
    s.output(big);
  }
  CHECK(rec.warnings() == 0);
  CHECK(c.str().empty());
  o.warn_in_hf_style = true;
  recorder asked(o);
  {
    scope s(asked, "", "M");
    s.output(big);
  }
  CHECK(asked.warnings() == 1);
  CHECK(c.str().find("warning") != std::string::npos);
#if NANSCOPE_TEST_HAVE_FORK
  // stdout without a sink: run in a child whose stdout is a pipe.
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], 1);
    ::close(fds[0]);
    nanscope::recorder_options q;
    q.style = nanscope::report_style::hf;
    q.policy = on_detect::print_and_continue;
    recorder r(q);
    const vec bad{nsrec::qnan()};
    {
      scope s(r, "x", "X");
      s.output(bad);
    }
    std::fflush(stdout);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[256];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  INFO(got);
  CHECK(got.find("output has nans\n\nDetected inf/nan during batch_number=1\n") == 0);  // x is the root
#endif
}

#if NANSCOPE_IMPL_EXCEPTIONS
TEST_CASE("hf style: an exception thrown by the detection callback is raised later, never from ~scope") {
  // The hf style detects when a scope ends (a destructor): a throwing callback used to call std::terminate.
  nsrec::capture c;
  nanscope::recorder_options o;
  o.style = nanscope::report_style::hf;
  o.sink = c.sink();
  o.policy = nanscope::on_detect::callback;
  int calls = 0;
  o.callback = [&calls](const nanscope::detection&) {
    ++calls;
    throw std::runtime_error("stop training");
  };
  recorder rec(o);
  const vec nan{nsrec::qnan()};
  {
    scope root(rec, "", "Model");
    {
      scope l(rec, "l", "L");
      l.output(nan);
    }  // the callback runs (and throws) here
    CHECK(calls == 1);
    CHECK_THROWS_WITH_AS(rec.raise_pending(), "stop training", std::runtime_error);
  }
  CHECK_NOTHROW(rec.raise_pending());  // raised once
}
#endif

TEST_CASE("hf style: an integer input holding its type's minimum prints torch's wrapped abs") {
  // HF's report takes var.abs().min() / .max(); torch.abs(int8 -128) is -128, so the frame line is
  // "-1.28e+02 5.00e+00 input[0]" (format(-128, "8.2e")), as for int64's minimum.
  nsrec::capture c;
  nanscope::recorder_options o;
  o.style = nanscope::report_style::hf;
  o.sink = c.sink();
  o.policy = on_detect::print_and_continue;
  recorder rec(o);
  const std::vector<std::int8_t> ids{-128, 5};
  const std::vector<std::int64_t> wide{std::numeric_limits<std::int64_t>::min(), 7};
  const vec nan{nsrec::qnan()};
  {
    scope s(rec, "embed", "Embedding");
    s.input(ids);
    s.input(wide);
    s.output(nan);
  }
  CHECK(c.str().find("-1.28e+02 5.00e+00 input[0]\n") != std::string::npos);
  CHECK(c.str().find("-9.22e+18 7.00e+00 input[1]\n") != std::string::npos);
}
