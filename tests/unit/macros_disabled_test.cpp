// nanscope tests — macros_disabled_test.cpp: NANSCOPE_CONFIG_LEVEL 0. Every macro still parses its arguments
// (a variable used only in a macro raises no unused warning under -Wall -Wextra -Werror) but never evaluates
// them: each argument below has a side effect on a counter, and the counter must not move; the recorders
// must see nothing although the tensors hold NaN under the throw policy.
//
// This translation unit links into the same test binary as macros_test.cpp and recorder_test.cpp, which use
// level 1: that the binary links and both behave is the ODR check (the level changes macro expansions only,
// never a definition).
#define NANSCOPE_CONFIG_LEVEL 0
#include <nanscope/macros.hpp>

#include "support/recorder_support.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

static_assert(NANSCOPE_CONFIG_LEVEL == 0, "this translation unit compiles the macros out");

namespace {

struct counted {
  int calls = 0;
  std::vector<double> nan_tensor{1.0, nsrec::qnan()};
  nanscope::recorder* rec = nullptr;

  const std::vector<double>& tensor(int) {
    ++calls;
    return nan_tensor;
  }
  const char* text(int) {
    ++calls;
    return "text";
  }
  int index(int) {
    ++calls;
    return 1;
  }
  nanscope::allow allowed(int) {
    ++calls;
    return nanscope::allow::none;
  }
  nanscope::recorder& recorder(int) {
    ++calls;
    return *rec;
  }
  nanscope::segments segs(int) {
    ++calls;
    return nanscope::segments::every_rows(1);
  }
  nanscope::block_format format(int) {
    ++calls;
    return nanscope::block_format::mxfp4;
  }
};

}  // namespace

TEST_CASE("macros (level 0): no macro evaluates its arguments, no recorder sees anything") {
  nsrec::capture out;
  nanscope::recorder local(nsrec::quiet_options(out, nanscope::on_detect::throw_exception));
  nanscope::recorder& dflt = nanscope::default_recorder();
  const nanscope::recorder_options saved = dflt.options();
  dflt.set_options(nsrec::quiet_options(out, nanscope::on_detect::throw_exception));
  dflt.clear();
  const std::uint64_t dflt_step = dflt.step();
  const std::uint64_t dflt_detections = dflt.detections();

  counted c;
  c.rec = &local;
  int counter = 0;
  CHECK_NOTHROW([&] {
    NANSCOPE_SCOPE(c.text(counter++), c.text(counter++));
    NANSCOPE_INPUT(c.tensor(counter++));
    NANSCOPE_OUTPUT(c.tensor(counter++));
    NANSCOPE_OUTPUT_AT(c.tensor(counter++), c.index(counter++));
    NANSCOPE_PARAM(c.tensor(counter++), c.text(counter++));
    NANSCOPE_DETECT_OVERFLOW(c.tensor(counter++), c.text(counter++));
    NANSCOPE_DETECT_OVERFLOW_ALLOW(c.tensor(counter++), c.text(counter++), c.allowed(counter++));
    DETECT_OVERFLOW(c.tensor(counter++), c.text(counter++));

    NANSCOPE_SCOPE_TO(c.recorder(counter++), c.text(counter++), c.text(counter++));
    NANSCOPE_INPUT_TO(c.recorder(counter++), c.tensor(counter++));
    NANSCOPE_OUTPUT_TO(c.recorder(counter++), c.tensor(counter++));
    NANSCOPE_OUTPUT_AT_TO(c.recorder(counter++), c.tensor(counter++), c.index(counter++));
    NANSCOPE_PARAM_TO(c.recorder(counter++), c.tensor(counter++), c.text(counter++));
    NANSCOPE_DETECT_OVERFLOW_TO(c.recorder(counter++), c.tensor(counter++), c.text(counter++));
    NANSCOPE_DETECT_OVERFLOW_ALLOW_TO(c.recorder(counter++), c.tensor(counter++), c.text(counter++),
                                      c.allowed(counter++));

    NANSCOPE_SEGMENTS(c.segs(counter++));
    NANSCOPE_INPUT_SEGMENTS(c.tensor(counter++), c.segs(counter++));
    NANSCOPE_OUTPUT_SEGMENTS(c.tensor(counter++), c.segs(counter++));
    NANSCOPE_DETECT_OVERFLOW_SEGMENTS(c.tensor(counter++), c.text(counter++), c.segs(counter++));
    NANSCOPE_SEGMENTS_TO(c.recorder(counter++), c.segs(counter++));
    NANSCOPE_INPUT_SEGMENTS_TO(c.recorder(counter++), c.tensor(counter++), c.segs(counter++));
    NANSCOPE_OUTPUT_SEGMENTS_TO(c.recorder(counter++), c.tensor(counter++), c.segs(counter++));
    NANSCOPE_DETECT_OVERFLOW_SEGMENTS_TO(c.recorder(counter++), c.tensor(counter++), c.text(counter++),
                                         c.segs(counter++));
    NANSCOPE_DETECT_OVERFLOW_BLOCKS(c.tensor(counter++), c.text(counter++), c.format(counter++));
    NANSCOPE_DETECT_OVERFLOW_BLOCKS_TO(c.recorder(counter++), c.tensor(counter++), c.text(counter++),
                                       c.format(counter++));
  }());
  CHECK(counter == 0);
  CHECK(c.calls == 0);
  CHECK(local.frames().empty());
  CHECK(local.detections() == 0);
  CHECK(local.step() == 0);
  CHECK(dflt.frames().empty());
  CHECK(dflt.detections() == dflt_detections);
  CHECK(dflt.step() == dflt_step);
  CHECK(out.str().empty());
  dflt.set_options(saved);
}

TEST_CASE("macros (level 0): a variable used only in a disabled macro is not unused; macros are statements") {
  const std::vector<float> only_in_macro{1.0f};  // -Wunused-variable would fire if the macro dropped it
  const char* only_name = "n";
  nanscope::recorder rec;
  if (only_in_macro.size() == 1)
    NANSCOPE_OUTPUT_TO(rec, only_in_macro);
  else
    NANSCOPE_PARAM_TO(rec, only_in_macro, only_name);
  CHECK(rec.frames().empty());
}

TEST_CASE("macros (level 0): the API itself is unaffected by the level") {
  nsrec::capture out;
  nanscope::recorder rec(nsrec::quiet_options(out, nanscope::on_detect::print_and_continue));
  const std::vector<double> bad{nsrec::pos_inf()};
  {
    nanscope::scope s(rec, "direct", "Direct");
    s.output(bad);
  }
  REQUIRE(rec.frames().size() == 1);
  CHECK(rec.frames()[0].module_path == "direct");
  CHECK(rec.detections() == 1);
  // report.hpp's printers are installed in this TU too: the extended report (the default style).
  CHECK(out.str().find("=== nanscope: inf/nan detected ===\nstep 0, direct (Direct), output:") != std::string::npos);
}
