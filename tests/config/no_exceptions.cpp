// nanscope tests — the no-exceptions configuration: built with -fno-exceptions -DNANSCOPE_CONFIG_NO_EXCEPTIONS.
//
//   nanscope_no_exceptions_test             checks work as usual; exit 0 when every expectation holds
//   nanscope_no_exceptions_test --bad-view  validates a bad view: nanscope must print its message and abort
//                                           (tests/cmake/expect_abort.cmake checks both)
//
// (header_compile_no_exceptions compiles every public header alone in this configuration.)
#include <nanscope/nanscope.hpp>

#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

static_assert(!NANSCOPE_EXCEPTIONS(), "NANSCOPE_CONFIG_NO_EXCEPTIONS must turn nanscope's exceptions off");
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#error "this test must be compiled with -fno-exceptions"
#endif

namespace {
int failures = 0;
void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what);
    ++failures;
  }
}
}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--bad-view") == 0) {
    float x = 0.0f;
    nanscope::tensor_view v = nanscope::view_of(&x, 1, "bad");
    v.shape[0] = -3;
    nanscope::validate(v);  // must not return
    std::printf("validate() returned for a negative extent\n");
    return 0;  // reaching this is the failure (expect_abort.cmake wants an abnormal end)
  }

  std::vector<float> v(100000, 1.5f);
  v[10] = std::numeric_limits<float>::quiet_NaN();
  v[20] = std::numeric_limits<float>::infinity();
  v[99999] = -std::numeric_limits<float>::infinity();
  const nanscope::health_result r = nanscope::check(v);
  expect(r.count == v.size(), "count");
  expect(r.nan == 1, "one NaN");
  expect(r.pos_inf == 1 && r.neg_inf == 1, "one +inf and one -inf");
  expect(r.first_nonfinite == 10, "first_nonfinite");
  expect(r.positive == v.size() - 3, "positive count");

  std::vector<double> clean(1000, -2.0);
  const nanscope::health_result c =
      nanscope::check(clean, nanscope::check_options{}.with_mode(nanscope::check_mode::full_health));
  expect(!c.has_nonfinite() && c.negative == 1000, "clean f64 tensor");

  const std::string line = nanscope::summary(r);
  expect(line.find("nan=1") != std::string::npos, "summary line names the NaN");
  std::printf("%s\n", line.c_str());

  std::printf("%s\n", failures == 0 ? "no-exceptions: all expectations hold" : "no-exceptions: FAILED");
  return failures == 0 ? 0 : 1;
}
