// nanscope tests — macros_test.cpp: the check macros (NANSCOPE_CONFIG_LEVEL 1, the default) build the right
// module paths (nesting with '.', the root ""), contexts (input[0], input[1], output, output[2], weight,
// checkpoint texts) and source locations (the __LINE__ of the macro), on the default recorder and, with the
// *_TO variants, on an explicit one.
#include "support/recorder_support.hpp"

#include <nanscope/macros.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

using nanscope::frame;
using nanscope::tensor_role;

/// Points the default recorder at a capture for one test and puts its options back afterwards.
class default_recorder_guard {
 public:
  explicit default_recorder_guard(nanscope::on_detect policy = nanscope::on_detect::print_and_continue)
      : saved_(nanscope::default_recorder().options()), saved_step_(nanscope::default_recorder().step()) {
    nanscope::recorder_options o = nsrec::quiet_options(out, policy);
    o.max_frames = 64;
    for (double& w : o.warn_abs_max) w = 0.0;
    nanscope::default_recorder().set_options(o);
    nanscope::default_recorder().clear();
    nanscope::default_recorder().set_step(0);
  }
  ~default_recorder_guard() {
    nanscope::default_recorder().clear();
    nanscope::default_recorder().set_options(saved_);
    nanscope::default_recorder().set_step(saved_step_);
  }
  default_recorder_guard(const default_recorder_guard&) = delete;
  default_recorder_guard& operator=(const default_recorder_guard&) = delete;

  nsrec::capture out;

 private:
  nanscope::recorder_options saved_;
  std::uint64_t saved_step_;
};

bool ends_with(const char* s, const char* suffix) {
  const std::size_t n = std::strlen(s), m = std::strlen(suffix);
  return n >= m && std::strcmp(s + n - m, suffix) == 0;
}

const nanscope::tensor_record& tensor(const frame& f, std::size_t i) { return f.tensors.at(i); }

}  // namespace

TEST_CASE("macros: NANSCOPE_SCOPE nests paths; INPUT/OUTPUT/OUTPUT_AT/PARAM/DETECT_OVERFLOW contexts and lines") {
  default_recorder_guard g;
  const std::vector<float> x{1.0f, -2.0f};
  const std::vector<float> y{3.0f};
  const std::vector<float> w{0.5f};
  int l_root_in = 0, l_param = 0, l_in0 = 0, l_in1 = 0, l_out2 = 0, l_cp_long = 0, l_cp_short = 0, l_enc_out = 0;
  {
    NANSCOPE_SCOPE("", "Model");
    NANSCOPE_INPUT(x); l_root_in = __LINE__;
    {
      NANSCOPE_SCOPE("encoder", "Encoder");
      {
        NANSCOPE_SCOPE("block.0", "Block");
        NANSCOPE_PARAM(w, "weight"); l_param = __LINE__;
        NANSCOPE_INPUT(x); l_in0 = __LINE__;
        NANSCOPE_INPUT(y); l_in1 = __LINE__;
        NANSCOPE_OUTPUT_AT(y, 2); l_out2 = __LINE__;
        NANSCOPE_DETECT_OVERFLOW(y, "after block"); l_cp_long = __LINE__;
        DETECT_OVERFLOW(x, "short alias"); l_cp_short = __LINE__;
      }
      NANSCOPE_OUTPUT(y); l_enc_out = __LINE__;
    }
    NANSCOPE_OUTPUT(y);
  }
  const auto f = nanscope::default_recorder().frames();
  REQUIRE(f.size() == 5);
  // The checkpoints complete first, then block.0, encoder, the root.
  CHECK(f[0].checkpoint);
  CHECK(f[0].module_path == "encoder.block.0");
  CHECK(f[0].class_name == "Block");
  CHECK(tensor(f[0], 0).context == "after block");
  CHECK(tensor(f[0], 0).role == tensor_role::checkpoint);
  CHECK(tensor(f[0], 0).where.line == l_cp_long);
  CHECK(f[1].checkpoint);
  CHECK(f[1].module_path == "encoder.block.0");
  CHECK(tensor(f[1], 0).context == "short alias");
  CHECK(tensor(f[1], 0).where.line == l_cp_short);

  CHECK_FALSE(f[2].checkpoint);
  CHECK(f[2].module_path == "encoder.block.0");
  CHECK(f[2].class_name == "Block");
  REQUIRE(f[2].tensors.size() == 4);
  CHECK(tensor(f[2], 0).context == "weight");
  CHECK(tensor(f[2], 0).role == tensor_role::parameter);
  CHECK(tensor(f[2], 0).where.line == l_param);
  CHECK(tensor(f[2], 1).context == "input[0]");
  CHECK(tensor(f[2], 1).role == tensor_role::input);
  CHECK(tensor(f[2], 1).where.line == l_in0);
  CHECK(tensor(f[2], 2).context == "input[1]");
  CHECK(tensor(f[2], 2).where.line == l_in1);
  CHECK(tensor(f[2], 3).context == "output[2]");
  CHECK(tensor(f[2], 3).role == tensor_role::output);
  CHECK(tensor(f[2], 3).where.line == l_out2);
  for (const auto& t : f[2].tensors) {
    CHECK(ends_with(t.where.file, "macros_test.cpp"));
    CHECK(std::strlen(t.where.function) > 0);
  }

  CHECK(f[3].module_path == "encoder");
  CHECK(f[3].class_name == "Encoder");
  REQUIRE(f[3].tensors.size() == 1);
  CHECK(tensor(f[3], 0).context == "output");
  CHECK(tensor(f[3], 0).where.line == l_enc_out);

  CHECK(f[4].module_path == "");
  CHECK(f[4].class_name == "Model");
  REQUIRE(f[4].tensors.size() == 2);
  CHECK(tensor(f[4], 0).context == "input[0]");
  CHECK(tensor(f[4], 0).where.line == l_root_in);
  CHECK(tensor(f[4], 1).context == "output");

  CHECK(nanscope::default_recorder().step() == 1);  // the root scope was the outermost
  CHECK(g.out.str().empty());
}

TEST_CASE("macros: a detection through a macro carries the macro's file and line") {
  default_recorder_guard g(nanscope::on_detect::throw_exception);
  const std::vector<double> bad{1.0, nsrec::qnan()};
  int line = 0;
  bool thrown = false;
  try {
    NANSCOPE_SCOPE("head", "Linear");
    line = __LINE__; NANSCOPE_OUTPUT(bad);
  } catch (const nanscope::detection_error& e) {
    thrown = true;
    CHECK(e.info().module_path == "head");
    CHECK(e.info().context == "output");
    CHECK(e.info().where.line == line);
    CHECK(ends_with(e.info().where.file, "macros_test.cpp"));
  }
  CHECK(thrown);
  thrown = false;
  try {
    line = __LINE__; DETECT_OVERFLOW(bad, "loss");
  } catch (const nanscope::detection_error& e) {
    thrown = true;
    CHECK(e.info().module_path == "");
    CHECK(e.info().context == "loss");
    CHECK(e.info().role == tensor_role::checkpoint);
    CHECK(e.info().where.line == line);
  }
  CHECK(thrown);
}

TEST_CASE("macros: INPUT, OUTPUT and PARAM outside any scope become checkpoints of the root") {
  default_recorder_guard g;
  const std::vector<float> x{2.0f};
  NANSCOPE_INPUT(x);
  NANSCOPE_OUTPUT(x);
  NANSCOPE_OUTPUT_AT(x, 3);
  NANSCOPE_PARAM(x, "bias");
  const auto f = nanscope::default_recorder().frames();
  REQUIRE(f.size() == 4);
  for (const auto& fr : f) {
    CHECK(fr.checkpoint);
    CHECK(fr.module_path == "");
    CHECK(fr.class_name == "");
  }
  CHECK(tensor(f[0], 0).context == "input");
  CHECK(tensor(f[1], 0).context == "output");
  CHECK(tensor(f[2], 0).context == "output");
  CHECK(tensor(f[3], 0).context == "bias");
  CHECK(nanscope::default_recorder().step() == 0);  // checkpoints are not steps
}

TEST_CASE("macros: NANSCOPE_DETECT_OVERFLOW_ALLOW lets the allowed categories through") {
  default_recorder_guard g(nanscope::on_detect::throw_exception);
  const std::vector<double> mask{0.0, nsrec::neg_inf()};
  const std::vector<double> nan{nsrec::qnan()};
  {
    NANSCOPE_SCOPE("attn", "Attention");
    CHECK_NOTHROW(NANSCOPE_DETECT_OVERFLOW_ALLOW(mask, "mask", nanscope::allow::neg_inf));
    CHECK_THROWS_AS(NANSCOPE_DETECT_OVERFLOW_ALLOW(nan, "scores", nanscope::allow::neg_inf),
                    nanscope::detection_error);
  }
  // Like a scope's frame, the checkpoint that threw stays in the ring: mask, scores, attn.
  const auto f = nanscope::default_recorder().frames();
  CHECK(f.size() == 3);
  REQUIRE_FALSE(f.empty());
  CHECK(tensor(f[0], 0).allowed);
  CHECK(tensor(f[0], 0).context == "mask");
  CHECK(f[0].module_path == "attn");
}

TEST_CASE("macros: the *_TO variants record into the recorder they name") {
  default_recorder_guard g;
  nsrec::capture out;
  nanscope::recorder rec(nsrec::quiet_options(out, nanscope::on_detect::print_and_continue));
  const std::vector<float> x{1.0f};
  int l_in = 0, l_param = 0, l_out = 0, l_out_at = 0, l_cp = 0, l_cp_allow = 0;
  {
    NANSCOPE_SCOPE("outer", "Default");  // a scope of the default recorder around them
    {
      NANSCOPE_SCOPE_TO(rec, "enc", "Encoder");
      {
        NANSCOPE_SCOPE_TO(rec, "layer.1", "Layer");
        NANSCOPE_PARAM_TO(rec, x, "gamma"); l_param = __LINE__;
        NANSCOPE_INPUT_TO(rec, x); l_in = __LINE__;
        NANSCOPE_INPUT(x);  // the default recorder's innermost scope is "outer"
        NANSCOPE_OUTPUT_TO(rec, x); l_out = __LINE__;
        NANSCOPE_OUTPUT_AT_TO(rec, x, 1); l_out_at = __LINE__;
        NANSCOPE_DETECT_OVERFLOW_TO(rec, x, "cp"); l_cp = __LINE__;
        NANSCOPE_DETECT_OVERFLOW_ALLOW_TO(rec, x, "cp2", nanscope::allow::nan); l_cp_allow = __LINE__;
      }
    }
  }
  const auto f = rec.frames();
  REQUIRE(f.size() == 4);
  CHECK(f[0].checkpoint);
  CHECK(f[0].module_path == "enc.layer.1");  // not "outer.enc.layer.1": "outer" belongs to another recorder
  CHECK(tensor(f[0], 0).context == "cp");
  CHECK(tensor(f[0], 0).where.line == l_cp);
  CHECK(tensor(f[1], 0).context == "cp2");
  CHECK(tensor(f[1], 0).where.line == l_cp_allow);
  CHECK(f[2].module_path == "enc.layer.1");
  CHECK(f[2].class_name == "Layer");
  REQUIRE(f[2].tensors.size() == 4);
  CHECK(tensor(f[2], 0).context == "gamma");
  CHECK(tensor(f[2], 0).role == tensor_role::parameter);
  CHECK(tensor(f[2], 0).where.line == l_param);
  CHECK(tensor(f[2], 1).context == "input[0]");
  CHECK(tensor(f[2], 1).where.line == l_in);
  CHECK(tensor(f[2], 2).context == "output");
  CHECK(tensor(f[2], 2).where.line == l_out);
  CHECK(tensor(f[2], 3).context == "output[1]");
  CHECK(tensor(f[2], 3).where.line == l_out_at);
  CHECK(f[3].module_path == "enc");
  CHECK(rec.step() == 1);

  const auto d = nanscope::default_recorder().frames();
  REQUIRE(d.size() == 1);
  CHECK(d[0].module_path == "outer");
  REQUIRE(d[0].tensors.size() == 1);
  CHECK(tensor(d[0], 0).context == "input[0]");
}

TEST_CASE("macros: several NANSCOPE_SCOPEs in one block, and macros as single statements") {
  default_recorder_guard g;
  const std::vector<float> x{1.0f};
  {
    NANSCOPE_SCOPE("a", "A");
    NANSCOPE_SCOPE("b", "B");  // a second scope in the same block nests inside the first
    if (x.size() == 1)
      NANSCOPE_OUTPUT(x);
    else
      NANSCOPE_INPUT(x);
  }
  const auto f = nanscope::default_recorder().frames();
  REQUIRE(f.size() == 2);
  CHECK(f[0].module_path == "a.b");
  REQUIRE(f[0].tensors.size() == 1);
  CHECK(tensor(f[0], 0).context == "output");
  CHECK(f[1].module_path == "a");
}

TEST_CASE("macros: the level of this translation unit is 1") {
  static_assert(NANSCOPE_CONFIG_LEVEL == 1, "macros_test.cpp is the enabled configuration");
  CHECK(NANSCOPE_CONFIG_LEVEL == 1);
}
