// nanscope — the command-line scanner: `nanscope scan FILE...` checks every tensor of .npy and .safetensors
// files for NaN/Inf and for values that would overflow fp16, bf16, fp8 e4m3fn or fp8 e5m2. See docs/cli.md.
//
// Exit status: 0 every tensor finite; 1 a NaN/Inf (or an overflow named by --fail-on-overflow) was found;
// 2 bad input or usage (a file missing, unreadable or malformed; an unsupported dtype): 2 wins over 1, since a
// run that could not read everything cannot vouch for the rest. Every file is scanned even after an error.
#include "output.hpp"
#include "scan.hpp"

#include <nanscope/config.hpp>

#include <CLI/CLI.hpp>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

using namespace nanscope_cli;

#define NANSCOPE_CLI_STR2(x) #x
#define NANSCOPE_CLI_STR(x) NANSCOPE_CLI_STR2(x)
constexpr const char* version_text = "nanscope " NANSCOPE_CLI_STR(NANSCOPE_VERSION_MAJOR) "." NANSCOPE_CLI_STR(
    NANSCOPE_VERSION_MINOR) "." NANSCOPE_CLI_STR(NANSCOPE_VERSION_PATCH);

[[noreturn]] void file_error(const std::string& path, const std::string& problem) {
  throw nanscope::error("nanscope: file '" + path + "': " + problem);
}

// ------------------------------------------------------------------------------------------------------------
// SIGBUS: a mapped file that shrinks while it is read (another process truncating it) faults on the pages past
// its new end. That is not recoverable in a multi-threaded scan; the handler names the file and exits with 2.
// ------------------------------------------------------------------------------------------------------------
char g_current_file[4096];

extern "C" void on_sigbus(int) {
  static const char a[] = "nanscope: file '";
  static const char b[] = "': the file shrank while it was being read (SIGBUS); stopping\n";
  ssize_t ignored = ::write(STDERR_FILENO, a, sizeof a - 1);
  ignored = ::write(STDERR_FILENO, g_current_file, std::strlen(g_current_file));
  ignored = ::write(STDERR_FILENO, b, sizeof b - 1);
  (void)ignored;
  ::_exit(2);
}

/// A read-only private mapping of a whole regular file.
class mapped_file {
 public:
  explicit mapped_file(const std::string& path) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below as not a regular file)
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) file_error(path, std::string("cannot open: ") + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      file_error(path, std::string("cannot stat: ") + std::strerror(err));
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      file_error(path, "is a directory");
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      file_error(path, "not a regular file");
    }
    if (st.st_size == 0) {
      ::close(fd);
      file_error(path, "empty file (0 bytes)");
    }
    size_ = static_cast<std::size_t>(st.st_size);
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) file_error(path, std::string("cannot map: ") + std::strerror(err));
    data_ = static_cast<const unsigned char*>(p);
    (void)::madvise(p, size_, MADV_SEQUENTIAL);
  }
  ~mapped_file() {
    if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

/// The progress bar on stderr (terminals only, files over 1 GiB).
class progress_bar {
 public:
  void start(const std::string& file, std::uint64_t total) {
    file_ = text_escape(file);
    total_ = total;
    active_ = true;
    last_ = std::chrono::steady_clock::time_point{};
  }
  void update(std::uint64_t done) {
    if (!active_ || total_ == 0) return;
    const auto now = std::chrono::steady_clock::now();
    if (visible_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    const double frac = done >= total_ ? 1.0 : static_cast<double>(done) / static_cast<double>(total_);
    const int width = 30, fill = static_cast<int>(frac * width);
    std::string bar(static_cast<std::size_t>(fill), '#');
    bar.append(static_cast<std::size_t>(width - fill), '.');
    std::fprintf(stderr, "\r\033[Knanscope: %s [%s] %3d%% %.1f/%.1f GB", file_.c_str(), bar.c_str(),
                 static_cast<int>(frac * 100.0), static_cast<double>(done) / 1e9, static_cast<double>(total_) / 1e9);
    std::fflush(stderr);
    visible_ = true;
  }
  /// Erases the bar (before any other output, and at the end of a file).
  void clear() {
    if (visible_) {
      std::fputs("\r\033[K", stderr);
      std::fflush(stderr);
    }
    visible_ = false;
  }
  void stop() {
    clear();
    active_ = false;
  }

 private:
  std::string file_;
  std::uint64_t total_ = 0;
  bool active_ = false, visible_ = false;
  std::chrono::steady_clock::time_point last_;
};

struct run_state {
  bool json = false, quiet = false, skip_unsupported = false, progress = true;
  target_mask fail_on{};
  std::uint64_t files = 0, tensors = 0, nonfinite = 0, overflowing = 0, errors = 0, skipped = 0, warnings = 0;
  progress_bar bar;

  void out_line(const std::string& s) {
    bar.clear();
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fputc('\n', stdout);
  }
  void err_line(const std::string& s) {
    bar.clear();
    std::fflush(stdout);
    std::fwrite(s.data(), 1, s.size(), stderr);
    std::fputc('\n', stderr);
  }
  void error(const std::string& file, const std::string* tensor, const std::string& message) {
    ++errors;
    if (json)
      out_line("{\"kind\":\"error\",\"file\":" + json_string(file) +
               ",\"name\":" + (tensor != nullptr ? json_string(*tensor) : std::string("null")) +
               ",\"message\":" + json_string(message) + "}");
    err_line(text_escape(message));
  }
  void warning(const std::string& file, const std::string& message) {
    ++warnings;
    const std::string full = "nanscope: file '" + file + "': warning: " + message;
    if (json && !quiet)
      out_line("{\"kind\":\"warning\",\"file\":" + json_string(file) + ",\"message\":" + json_string(full) + "}");
    err_line(text_escape(full));
  }
  void tensor(const tensor_report& r) {
    if (!r.supported) {
      const std::string msg = "nanscope: file '" + r.file + "': tensor " + nanscope::detail::st_quote(r.name) +
                              ": dtype '" + r.file_dtype + "' is not supported by nanscope (not scanned)";
      if (!skip_unsupported) {
        error(r.file, &r.name, msg);
        return;
      }
      ++skipped;
      if (json && !quiet)
        out_line("{\"kind\":\"skipped\",\"file\":" + json_string(r.file) + ",\"name\":" + json_string(r.name) +
                 ",\"file_dtype\":" + json_string(r.file_dtype) + ",\"message\":" + json_string(msg) + "}");
      else if (!json && !quiet)
        out_line(text_escape(r.file) + " " + nanscope::detail::st_quote(r.name, ~std::size_t{0}) + ": " + text_escape(r.file_dtype) +
                 shape_text(r) + " n=" + std::to_string(r.count) + " skipped (unsupported dtype)");
      return;
    }
    ++tensors;
    if (r.nonfinite()) ++nonfinite;
    if (overflow_fails(r, fail_on)) ++overflowing;
    if (quiet) return;
    out_line(json ? json_tensor(r, fail_on) : text_line(r, fail_on));
  }
  int exit_code() const { return errors != 0 ? 2 : (nonfinite != 0 || overflowing != 0) ? 1 : 0; }
};

void scan_file(const std::string& path, const scan_settings& settings, run_state& rs) {
  ++rs.files;
  std::snprintf(g_current_file, sizeof g_current_file, "%s", path.c_str());
  try {
    const mapped_file file(path);
    const file_format fmt = detect_format(file.data(), file.size(), path);
    if (fmt == file_format::unknown)
      file_error(path, "unrecognised file format: no .npy magic, no .npy/.safetensors extension, no JSON header");
    const bool show_bar = rs.progress && file.size() > (std::uint64_t{1} << 30) && ::isatty(STDERR_FILENO) == 1;
    if (show_bar) rs.bar.start(path, file.size());
    scan_callbacks cb;
    cb.on_tensor = [&](const tensor_report& r) { rs.tensor(r); };
    cb.on_warning = [&](const std::string& w) { rs.warning(path, w); };
    if (show_bar) cb.on_progress = [&](std::uint64_t done) { rs.bar.update(done); };
    scan_buffer(file.data(), file.size(), path, fmt, settings, cb);
    rs.bar.stop();
  } catch (const std::exception& e) {
    rs.bar.stop();
    rs.error(path, nullptr, e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nanscope: find NaN, Inf and low-precision overflow in the tensors of .npy and .safetensors files",
               "nanscope"};
  app.set_version_flag("--version", version_text);
  app.require_subcommand(1);
  app.footer("Exit status: 0 all finite, 1 NaN/Inf (or --fail-on-overflow) found, 2 bad input or usage.\n"
             "Documentation: docs/cli.md");

  std::vector<std::string> files;
  bool json = false, quiet = false, stats = false, skip_unsupported = false, no_progress = false;
  unsigned threads = 0;
  std::vector<std::string> fail_on;
  std::string npy_void;
  CLI::App* scan = app.add_subcommand("scan", "Scan .npy and .safetensors files: one line (or JSON object) per tensor");
  scan->add_option("files", files, "Files to scan (.npy, .safetensors)")->required();
  scan->add_flag("--json", json, "One JSON object per line (JSON Lines): tensors, errors, a final summary");
  scan->add_flag("-q,--quiet", quiet, "Print only the verdict (errors still go to stderr)");
  scan->add_flag("--stats", stats, "Also compute min, max, mean and std (STATS mode; a little slower)");
  scan->add_option("-j,--threads", threads, "Threads (default: all cores, or NANSCOPE_THREADS)")
      ->check(CLI::Range(1u, 1024u));
  scan->add_option("--fail-on-overflow", fail_on,
                   "Exit 1 when a cast to one of these formats would overflow: f16, bf16, e4m3fn, e5m2, any "
                   "(comma-separated or repeated)")
      ->delimiter(',')
      ->check(CLI::IsMember({"f16", "fp16", "bf16", "e4m3fn", "e4m3", "e5m2", "any"}));
  scan->add_option("--npy-void", npy_void,
                   "Read raw void .npy descrs ('<V2', '|V1': numpy.save of ml_dtypes types) as this dtype: bf16, "
                   "e4m3fn or e5m2")
      ->check(CLI::IsMember({"bf16", "e4m3fn", "e5m2"}));
  scan->add_flag("--skip-unsupported", skip_unsupported,
                 "Report tensors of dtypes nanscope cannot check (C64, F8_E8M0, ...) as skipped, not as errors");
  scan->add_flag("--no-progress", no_progress, "No progress bar (shown on a terminal for files over 1 GiB)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }

  run_state rs;
  rs.json = json;
  rs.quiet = quiet;
  rs.skip_unsupported = skip_unsupported;
  rs.progress = !no_progress;
  for (const std::string& f : fail_on) {
    for (std::size_t k = 0; k < target_count; ++k) {
      const std::string n = nanscope::name(nanscope::margin_targets[k]);
      if (f == "any" || f == n || (f == "fp16" && n == "f16") || (f == "e4m3" && n == "e4m3fn")) rs.fail_on[k] = true;
    }
  }

  scan_settings settings;
  settings.mode = stats ? nanscope::check_mode::stats : nanscope::check_mode::full_health;
  if (threads != 0) {
    // The library's pool is sized from NANSCOPE_THREADS on first use: set it before any scan.
    ::setenv("NANSCOPE_THREADS", std::to_string(threads).c_str(), 1);
    settings.threads = threads;
  }
  if (!npy_void.empty())
    settings.npy.with_void_type(npy_void == "bf16" ? nanscope::dtype::bf16
                                : npy_void == "e4m3fn" ? nanscope::dtype::f8_e4m3fn
                                                       : nanscope::dtype::f8_e5m2);

  struct sigaction sa {};
  sa.sa_handler = on_sigbus;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);

  for (const std::string& f : files) scan_file(f, settings, rs);

  const int rc = rs.exit_code();
  if (json) {
    rs.out_line(fmt::format(
        "{{\"kind\":\"summary\",\"files\":{},\"tensors\":{},\"nonfinite_tensors\":{},\"overflow_tensors\":{},"
        "\"errors\":{},\"skipped\":{},\"warnings\":{},\"exit_code\":{}}}",
        rs.files, rs.tensors, rs.nonfinite, rs.overflowing, rs.errors, rs.skipped, rs.warnings, rc));
  } else {
    const char* verdict = rc == 0 ? "OK" : rc == 1 ? "FAIL" : "ERROR";
    std::string line = fmt::format("nanscope: {}: {} file{}, {} tensor{} scanned: {} with NaN/Inf", verdict, rs.files,
                                   rs.files == 1 ? "" : "s", rs.tensors, rs.tensors == 1 ? "" : "s", rs.nonfinite);
    bool any_fail_on = false;
    for (bool b : rs.fail_on) any_fail_on = any_fail_on || b;
    if (any_fail_on) line += fmt::format(", {} would overflow", rs.overflowing);
    line += fmt::format(", {} error{}", rs.errors, rs.errors == 1 ? "" : "s");
    if (rs.skipped != 0) line += fmt::format(", {} skipped", rs.skipped);
    line += fmt::format(" (exit {})", rc);
    rs.out_line(line);
  }
  std::fflush(stdout);
  return rc;
}
