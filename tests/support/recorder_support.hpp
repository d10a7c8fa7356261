// nanscope tests — support/recorder_support.hpp: helpers shared by the recorder, report and macro tests.
//
//  - capture: a sink that appends everything the recorder prints to a string (recorder_options::sink).
//  - quiet_options(): options whose output goes to a capture, with a chosen policy.
//  - count_of(): occurrences of a substring.
//  - exit_of_child(): runs a function in a forked child process and reports how the child ended (for the
//    `abort` policy, which ends the process).
// Namespace nsrec, not nstest: support/reference.hpp has its own nstest::pos_inf() & co., and two different
// inline definitions of one name in one binary would break the ODR.
#ifndef NANSCOPE_TESTS_SUPPORT_RECORDER_SUPPORT_HPP
#define NANSCOPE_TESTS_SUPPORT_RECORDER_SUPPORT_HPP

#include <nanscope/recorder.hpp>
#include <nanscope/report.hpp>

#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#define NANSCOPE_TEST_HAVE_FORK 1
#else
#define NANSCOPE_TEST_HAVE_FORK 0
#endif

namespace nsrec {

// Special values by bit pattern (valid under -ffast-math too).
inline double f64_bits(std::uint64_t b) {
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
}
inline float f32_bits(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
inline double pos_inf() { return f64_bits(0x7FF0000000000000ull); }
inline double neg_inf() { return f64_bits(0xFFF0000000000000ull); }
inline double qnan() { return f64_bits(0x7FF8000000000000ull); }
inline float pos_inf_f() { return f32_bits(0x7F800000u); }
inline float neg_inf_f() { return f32_bits(0xFF800000u); }
inline float qnan_f() { return f32_bits(0x7FC00000u); }

/// Collects what a recorder prints. Copies share the text, so a copy can go into the options.
struct capture {
  std::shared_ptr<std::string> text = std::make_shared<std::string>();
  std::shared_ptr<std::size_t> calls = std::make_shared<std::size_t>(0);

  std::function<void(std::string_view)> sink() const {
    auto t = text;
    auto c = calls;
    return [t, c](std::string_view s) {
      t->append(s.data(), s.size());
      ++*c;
    };
  }
  const std::string& str() const { return *text; }
  void clear() {
    text->clear();
    *calls = 0;
  }
};

/// Options that print into `c`, with the given policy; everything else at its default.
inline nanscope::recorder_options quiet_options(const capture& c,
                                                nanscope::on_detect policy = nanscope::on_detect::print_and_continue) {
  nanscope::recorder_options o;
  o.sink = c.sink();
  o.policy = policy;
  return o;
}

/// Number of non-overlapping occurrences of `needle` in `hay`.
inline std::size_t count_of(const std::string& hay, const std::string& needle) {
  if (needle.empty()) return 0;
  std::size_t n = 0;
  for (std::size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + needle.size())) ++n;
  return n;
}

/// How a child process ended.
struct child_end {
  bool ran = false;         ///< false: no fork on this platform (the caller skips its checks)
  bool signaled = false;
  int signal = 0;
  bool exited = false;
  int exit_code = 0;
};

/// Runs fn() in a forked child. The child leaves with _exit(0) when fn returns and _exit(3) when it throws, so
/// only a signal (std::abort: SIGABRT) ends it otherwise. The child's stderr is closed so that a deliberate
/// abort does not clutter the test log. Sanitizer runtimes are fine with this: the child only runs fn.
template <class Fn>
child_end exit_of_child(Fn&& fn) {
  child_end e;
#if NANSCOPE_TEST_HAVE_FORK
  std::cout.flush();  // nothing buffered may be written twice
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return e;
  if (pid == 0) {
    // The test runner's crash handlers would report the deliberate abort as a crashed test (and print the
    // runner's summary from the child): the child gets the default action back.
    std::signal(SIGABRT, SIG_DFL);
    ::close(2);
    try {
      std::forward<Fn>(fn)();
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return e;
  e.ran = true;
  if (WIFSIGNALED(status)) {
    e.signaled = true;
    e.signal = WTERMSIG(status);
  } else if (WIFEXITED(status)) {
    e.exited = true;
    e.exit_code = WEXITSTATUS(status);
  }
#else
  (void)fn;
#endif
  return e;
}

}  // namespace nsrec

#endif  // NANSCOPE_TESTS_SUPPORT_RECORDER_SUPPORT_HPP
