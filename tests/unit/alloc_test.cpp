// "No heap allocation per check": replaces the global operator new of the test binary with a counting one
// and asserts that, once the thread pool and tables exist, checks allocate nothing — for every mode, dtype,
// strided views, and the multi-threaded path. The same operator new can fail the n-th allocation of a thread
// (alloc_fail_after): a scope's life survives an allocation failure at any point.
#include <doctest/doctest.h>
#include <nanscope/control.hpp>
#include <nanscope/history.hpp>
#include <nanscope/nanscope.hpp>

#include <atomic>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NANSCOPE_TEST_COUNT_ALLOCS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define NANSCOPE_TEST_COUNT_ALLOCS 0
#endif
#endif
#ifndef NANSCOPE_TEST_COUNT_ALLOCS
#define NANSCOPE_TEST_COUNT_ALLOCS 1
#endif

#if NANSCOPE_TEST_COUNT_ALLOCS
#if defined(__GNUC__) && !defined(__clang__)
// The replacement operators below pair malloc/free themselves; GCC cannot see that and warns.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
namespace {
std::atomic<long> g_allocs{0};
thread_local long alloc_fail_after = 0;  // > 0: this thread's n-th allocation from now throws std::bad_alloc
}
void* operator new(std::size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (alloc_fail_after > 0 && --alloc_fail_after == 0) throw std::bad_alloc();
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

TEST_CASE("check: no heap allocation per check (any mode, dtype, layout, thread count)") {
  using namespace nanscope;
  std::vector<float> f32(3u << 20, 1.5f);
  f32[12345] = -0.0f;
  std::vector<double> f64(70000, -2.0);
  std::vector<std::uint16_t> f16(50000, half::from_float(3.0).bits);
  std::vector<std::uint8_t> fp8(50000, float8_e4m3fn::from_float(0.5).bits);
  tensor_view strided = tensor_view::contiguous(f32.data(), dtype::f32, {1000, 1000});
  strided.strides[0] = 2000;  // every other row of a 2000-column buffer
  strided.strides[1] = 2;
  const tensor_view views[] = {to_view(f32), to_view(f64), tensor_view::flat(f16.data(), dtype::f16, 50000),
                               tensor_view::flat(fp8.data(), dtype::f8_e4m3fn, 50000), strided};
  const check_mode modes[] = {check_mode::stats, check_mode::full_health, check_mode::concise_health,
                              check_mode::curt_health, check_mode::shape};
  // warm-up: creates the pool threads and the fp8 tables once
  for (const auto& v : views)
    for (auto m : modes) (void)check(v, check_options{}.with_mode(m).with_threads(2).with_parallel_threshold(1));
  const long before = g_allocs.load();
  volatile double sink = 0;
  for (int rep = 0; rep < 3; ++rep)
    for (const auto& v : views)
      for (auto m : modes)
        for (unsigned th : {1u, 2u}) sink = check(v, check_options{}.with_mode(m).with_threads(th).with_parallel_threshold(1)).count;
  CHECK(g_allocs.load() - before == 0);
  CHECK(sink > 0);
}

namespace alloc_test {
/// Counts events; allocates nothing.
struct counting_listener : nanscope::scope_listener {
  int opened = 0, closed = 0;
  void scope_opened(const nanscope::frame&, bool) noexcept override { ++opened; }
  void tensor_recorded(const nanscope::frame&, const nanscope::tensor_record&) noexcept override {}
  void scope_closed(const nanscope::frame&, bool) noexcept override { ++closed; }
};
}  // namespace alloc_test

TEST_CASE("scope: an allocation failure anywhere in a scope's life (six listeners) leaves the chain whole") {
  // With more than four listeners the event calls copied the list: a failure there left the thread's chain
  // pointing at a scope whose constructor had thrown (used after it was gone), and in ~scope it ended the
  // process (std::terminate).
  nanscope::recorder r;
  alloc_test::counting_listener ls[6];
  for (auto& l : ls) r.add_listener(&l);
  int failures = 0;
  for (long k = 1; k < 400; ++k) {
    bool threw = false;
    alloc_fail_after = k;
    try {
      nanscope::scope outer(r, "a_module_name_longer_than_the_small_string_buffer", "AClassNameLongerThanThatBuffer");
      nanscope::scope inner(r, "an_inner_module_with_a_name_longer_than_that_too", "Linear");
      CHECK(nanscope::detail::thread_top_scope() == &inner);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    alloc_fail_after = 0;
    CHECK(nanscope::detail::thread_top_scope() == nullptr);
    if (!threw) break;  // k is past the last allocation of the sequence
    ++failures;
  }
  CHECK(failures >= 3);  // the long names (the inner path is the outer one plus its own)
  for (const auto& l : ls) CHECK(l.opened == l.closed);  // a scope heard of opening is heard of closing
  {
    nanscope::scope again(r, "again", "X");
    CHECK(nanscope::detail::thread_top_scope() == &again);
  }
  CHECK(nanscope::detail::thread_top_scope() == nullptr);
  for (auto& l : ls) r.remove_listener(&l);
}

namespace alloc_test {
/// A host result for deferred_log.
struct host_result {
  nanscope::health_result h;
  nanscope::health_result get() const { return h; }
};
}  // namespace alloc_test

TEST_CASE("memory running out inside a tree writer, a history or a deferred scope ends no process") {
  // Each path allocated in a noexcept function (the tree writer's abandon message, the history's site key,
  // deferred_log's close event in ~scope): std::bad_alloc there was std::terminate. Every allocation of the
  // sequence fails in turn; the run goes on.
  char tmpl[] = "/tmp/nanscope_alloc_XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  nanscope::recorder_options ro;
  ro.policy = nanscope::on_detect::print_and_continue;
  ro.sink = [](std::string_view) {};
  nanscope::recorder r(ro);
  nanscope::tree_options to = nanscope::tree_options{}.in(dir).with_rank(0);
  to.on_error = [](std::string_view) {};
  nanscope::tree_writer w(r, to);
  nanscope::history h;
  h.attach(r);
  std::vector<float> x(16, 1.5f);
  int failures = 0;
  for (long k = 1; k < 3000; ++k) {
    bool threw = false;
    alloc_fail_after = k;
    try {
      nanscope::scope root(r, "", "AModelClassNameLongerThanTheSmallBuffer");
      nanscope::scope layer(r, "model.layers.0.self_attn.o_proj", "Linear");
      layer.output(x);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    const bool reached = alloc_fail_after == 0;  // the k-th allocation happened (and failed)
    alloc_fail_after = 0;
    if (!threw && !reached) break;  // k is past the last allocation of the sequence
    ++failures;
  }
  CHECK(failures > 10);
  {  // the writer still works
    nanscope::scope root(r, "", "Again");
    nanscope::scope layer(r, "l", "L");
    layer.output(x);
  }
  CHECK(w.trees_written() >= 1);
  h.detach();

  nanscope::deferred_log<alloc_test::host_result> log(r);
  for (long k = 1; k < 50; ++k) {
    bool threw = false;
    try {
      nanscope::deferred_log<alloc_test::host_result>::scope s(log, "a_scope_name_longer_than_the_buffer", "Linear");
      alloc_fail_after = k;  // from here: ~scope appends the close event
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    alloc_fail_after = 0;
    CHECK_FALSE(threw);
  }
  log.replay();
  CHECK(log.empty());

  {  // a recorder destroyed with listeners attached, while memory is short: ~recorder allocates nothing
    auto owner = std::make_unique<nanscope::recorder>(ro);
    auto writer = std::make_unique<nanscope::tree_writer>(*owner, to);
    nanscope::history h2;
    h2.attach(*owner);
    alloc_fail_after = 1;
    owner.reset();
    const long left = alloc_fail_after;
    alloc_fail_after = 0;
    CHECK(left == 1);
    writer.reset();
  }
  const int rc = std::system(("rm -rf '" + dir + "'").c_str());
  (void)rc;
}

namespace alloc_test {
/// What a logger out of memory might throw: its what() allocates nothing.
struct out_of_memory : std::exception {
  const char* what() const noexcept override { return "the logger ran out of memory (a long reason)"; }
};
}  // namespace alloc_test

TEST_CASE("a user's text callback that throws while memory is short: its text still goes to stderr, no terminate") {
  // call_text_callback copied what() into a std::string: with the next allocation failing, that copy threw
  // std::bad_alloc out of the noexcept function (std::terminate).
  const std::function<void(std::string_view)> sink = [](std::string_view) {
    alloc_fail_after = 1;  // the next allocation on this thread fails
    throw alloc_test::out_of_memory();
  };
  std::fflush(stderr);
  const int saved = ::dup(2);
  REQUIRE(saved >= 0);
  const int null_fd = ::open("/dev/null", O_WRONLY);
  REQUIRE(null_fd >= 0);
  ::dup2(null_fd, 2);
  nanscope::detail::call_text_callback(sink, "the frames of the report\n", "the test's sink");
  const long left = alloc_fail_after;
  alloc_fail_after = 0;
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(null_fd);
  CHECK(left == 1);  // nothing was allocated after the callback threw
}
TEST_CASE("a config file read while memory runs out: bad_alloc or a result, never terminate") {
  // toml++'s own noexcept functions allocate (std::terminate on bad_alloc); nanscope's reader does not.
  const std::string text =
      "every = 4\nbudget = \"2%\"\n[[site]]\nglob = 'a_glob_longer_than_the_small_string_buffer.*'\n";
  int failures = 0;
  for (long k = 1; k < 10000; ++k) {
    nanscope::control_config c;
    std::string e;
    bool threw = false, ok = false;
    alloc_fail_after = k;
    try {
      ok = nanscope::parse_control_toml(text, "x.toml", c, e);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    const bool reached = alloc_fail_after == 0;
    alloc_fail_after = 0;
    if (!threw && !reached) {
      CHECK(ok);
      CHECK(c.every == 4);
      break;
    }
    ++failures;
  }
  CHECK(failures > 5);
}

TEST_CASE("a controller's checks and step boundaries while memory runs out end no process (issue 29 item 6)") {
  // controller::step_boundary and admit are noexcept and allocated (pending_errors_ += ..., new sites, the
  // re-read config): bad_alloc there was std::terminate. Every allocation of a step fails in turn, with the
  // config file changed before each step so that the boundary re-reads it.
  char tmpl[] = "/tmp/nanscope_alloc_ctl_XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/control.toml";
  nanscope::recorder_options ro;
  ro.policy = nanscope::on_detect::print_and_continue;
  ro.sink = [](std::string_view) {};
  nanscope::recorder r(ro);
  nanscope::controller_options co;
  co.config_path = path;
  co.read_environment = false;
  co.on_error = [](std::string_view) {};
  nanscope::controller c(co);
  c.attach(r);
  std::vector<float> x(16, 1.0f);
  std::fflush(stderr);
  const int saved = ::dup(2);  // the controller says "out of memory" on stderr each time
  REQUIRE(saved >= 0);
  const int null_fd = ::open("/dev/null", O_WRONLY);
  REQUIRE(null_fd >= 0);
  ::dup2(null_fd, 2);
  int failures = 0;
  long k = 1;
  for (; k < 4000; ++k) {
    {
      const std::string text = "every = 1\n# version " + std::to_string(k) +
                               "\n[[site]]\nglob = 'a_site_pattern_longer_than_the_small_string_buffer_" +
                               std::to_string(k) + "*'\n";
      std::FILE* f = std::fopen(path.c_str(), "w");
      REQUIRE(f != nullptr);
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
    bool threw = false;
    alloc_fail_after = k;
    try {
      nanscope::scope root(r, "", "Model");
      nanscope::scope l(r, "layer_with_a_name_longer_than_the_buffer_" + std::to_string(k % 7), "Linear");
      l.output(x);
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    const bool reached = alloc_fail_after == 0;
    alloc_fail_after = 0;
    if (!threw && !reached) break;
    ++failures;
  }
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(null_fd);
  CHECK(failures > 10);
  CHECK(k < 4000);  // the sequence of allocations of one step ended
  CHECK(c.report().errors > 0);  // failures inside the noexcept hooks were counted, not fatal
  {  // the controller still works
    nanscope::scope root(r, "", "Model");
    nanscope::scope l(r, "again", "Linear");
    l.output(x);
  }
  CHECK(c.report().checks > 0);
  c.detach();
  const int rc = std::system(("rm -rf '" + dir + "'").c_str());
  (void)rc;
}
#else
TEST_CASE("check: no heap allocation per check (skipped under sanitizers, which own operator new)") {
  MESSAGE("allocation counting is disabled in sanitizer builds");
}
#endif
