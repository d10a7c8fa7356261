// nanscope — the command-line scanner: `nanscope scan FILE...` checks every tensor of .npy, .npz and .safetensors
// files (and with -r, of every such file under a directory) for NaN/Inf and for values that would overflow fp16,
// bf16, fp8 e4m3fn or fp8 e5m2. See docs/cli.md.
//
// Exit status: 0 every tensor finite; 1 a NaN/Inf (or an overflow named by --fail-on-overflow) was found;
// 2 bad input or usage (a file missing, unreadable, malformed, or shrinking while read; an unsupported dtype) or
// a report that could not be written to stdout: 2 wins over 1, since a run that could not read everything cannot
// vouch for the rest. Every file is scanned even after an input error (not after an output error).
// `nanscope report INPUT... -o FILE` (report.hpp, docs/report.md): 0 the page was written, 2 bad input or output.
#include "output.hpp"
#include "scan.hpp"
#if NANSCOPE_CLI_HAVE_ZLIB
#include "npz.hpp"
#endif
#if NANSCOPE_CLI_HAVE_REPORT
#include "report.hpp"
#endif

#include <nanscope/config.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace {

using namespace nanscope_cli;

// The project's version (CMakeLists.txt, passed by tools/CMakeLists.txt), else the headers' own.
#if defined(NANSCOPE_TOOLS_VERSION)
constexpr const char* version_text = "nanscope " NANSCOPE_TOOLS_VERSION;
#else
#define NANSCOPE_CLI_STR2(x) #x
#define NANSCOPE_CLI_STR(x) NANSCOPE_CLI_STR2(x)
constexpr const char* version_text = "nanscope " NANSCOPE_CLI_STR(NANSCOPE_VERSION_MAJOR) "." NANSCOPE_CLI_STR(
    NANSCOPE_VERSION_MINOR) "." NANSCOPE_CLI_STR(NANSCOPE_VERSION_PATCH);
#endif

[[noreturn]] void file_error(const std::string& path, const std::string& problem) {
  throw nanscope::error("nanscope: file '" + path + "': " + problem);
}

// ------------------------------------------------------------------------------------------------------------
// A file that shrinks while it is read (another process truncating it): reading a page of the mapping that now
// lies wholly past the end of the file raises SIGBUS in whichever thread touched it (the main thread or one of
// the library's pool workers). The handler recovers instead of exiting: it maps anonymous zero pages over the
// rest of the mapping (from the faulting page on), records the offset, and returns; the faulting load is then
// retried and reads zeros, so every thread finishes its chunk normally and no thread's control flow is torn
// (no longjmp out of the library's pool). The main thread sees the recorded offset after the scan, reports the
// file as an error and throws away everything computed from it that was not reported before (the zeros).
// Async-signal-safety: the handler touches only lock-free atomics and makes one mmap system call (a raw
// syscall on Linux, so that sanitizer interceptors are not entered from the handler); a SIGBUS outside the
// current mapping restores the default action and returns, so the fault repeats and kills the process as usual.
// ------------------------------------------------------------------------------------------------------------
std::atomic<std::uintptr_t> g_map_begin{0};  // the mapping being scanned: [begin, end), end rounded up to a page
std::atomic<std::uintptr_t> g_map_end{0};
std::atomic<std::uint64_t> g_shrink_offset{~std::uint64_t{0}};  // lowest faulting page's offset in the file
std::uintptr_t g_page_size = 4096;                              // set in main() before the handler is installed
static_assert(std::atomic<std::uintptr_t>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free,
              "the SIGBUS handler needs lock-free atomics");

void* map_zero_pages(std::uintptr_t addr, std::size_t len) {
#if defined(__linux__) && defined(SYS_mmap)
  const long r = ::syscall(SYS_mmap, addr, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0L);
  return r < 0 && r > -4096 ? MAP_FAILED : reinterpret_cast<void*>(r);
#else
  return ::mmap(reinterpret_cast<void*>(addr), len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
#endif
}

extern "C" void on_sigbus(int sig, siginfo_t* info, void*) {
  const int saved_errno = errno;
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  const std::uintptr_t begin = g_map_begin.load(), end = g_map_end.load();
  const std::uintptr_t page = addr & ~(g_page_size - 1);
  if (begin == 0 || addr < begin || addr >= end || map_zero_pages(page, end - page) == MAP_FAILED) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);  // not ours (or no way to recover): the fault repeats and kills as usual
  } else {
    const std::uint64_t off = page - begin;
    std::uint64_t cur = g_shrink_offset.load();
    while (off < cur && !g_shrink_offset.compare_exchange_weak(cur, off)) {
    }
  }
  errno = saved_errno;
}

// Test hook (docs/cli.md): NANSCOPE_TEST_SHRINK_AFTER_MAP=BYTES:PATH truncates the file PATH (as given on the
// command line) to BYTES bytes right after it is mapped, before any of it is read: a deterministic shrink.
std::string g_shrink_path;
off_t g_shrink_to = -1;

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
      file_error(path, "is a directory (-r / --recursive scans the .npy, .npz and .safetensors files under it)");
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
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      file_error(path, std::string("cannot map: ") + std::strerror(err));
    }
    fd_ = fd;  // kept open: after a SIGBUS, fstat() tells a shrink from a read error
    data_ = static_cast<const unsigned char*>(p);
    (void)::madvise(p, size_, MADV_SEQUENTIAL);
    // Published to the SIGBUS handler before any page is read (the pool's workers get their work after this).
    const auto b = reinterpret_cast<std::uintptr_t>(p);
    g_map_begin.store(0);
    g_shrink_offset.store(~std::uint64_t{0});
    g_map_end.store(b + ((size_ + g_page_size - 1) & ~(g_page_size - 1)));
    g_map_begin.store(b);
    if (g_shrink_to >= 0 && path == g_shrink_path && ::truncate(path.c_str(), g_shrink_to) != 0)
      std::fprintf(stderr, "nanscope: NANSCOPE_TEST_SHRINK_AFTER_MAP: cannot truncate '%s': %s\n", path.c_str(),
                   std::strerror(errno));
  }
  ~mapped_file() {
    if (data_ == nullptr) return;
    g_map_begin.store(0);
    g_map_end.store(0);
    ::munmap(const_cast<unsigned char*>(data_), size_);
    ::close(fd_);
  }
  /// The file's size now (-1 when fstat fails).
  std::int64_t current_size() const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 ? static_cast<std::int64_t>(st.st_size) : -1;
  }
  /// The offset of the first page found past the end of the file (the file shrank while mapped), or -1.
  static std::int64_t shrink_offset() {
    const std::uint64_t off = g_shrink_offset.load();
    return off == ~std::uint64_t{0} ? -1 : static_cast<std::int64_t>(off);
  }
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  int fd_ = -1;
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
  int out_errno = 0;  ///< set (non-zero) once a write to stdout failed: the report is incomplete

  bool out_failed() const { return out_errno != 0; }
  /// Records the first failed write to stdout (the errno of the failing call).
  void check_out(bool ok) {
    if (out_errno == 0 && (!ok || std::ferror(stdout) != 0)) out_errno = errno != 0 ? errno : EIO;
  }
  void out_line(const std::string& s) {
    bar.clear();
    errno = 0;
    const bool ok = std::fwrite(s.data(), 1, s.size(), stdout) == s.size() && std::fputc('\n', stdout) != EOF;
    check_out(ok);
  }
  /// Flushes stdout; false (and out_errno set) when anything written to it so far was lost.
  bool flush_out() {
    errno = 0;
    check_out(std::fflush(stdout) == 0);
    return !out_failed();
  }
  void err_line(const std::string& s) {
    bar.clear();
    flush_out();  // keeps stdout and stderr in order when both go to one place
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
      const std::string msg = "nanscope: file '" + r.file + "': " +
                              (r.has_name ? "tensor " + nanscope::detail::st_quote(r.name) + ": " : std::string()) +
                              "dtype '" + r.file_dtype + "' is not supported by nanscope (not scanned)";
      if (!skip_unsupported) {
        error(r.file, &r.name, msg);
        return;
      }
      ++skipped;
      if (json && !quiet)
        out_line("{\"kind\":\"skipped\",\"file\":" + json_string(r.file) +
                 ",\"name\":" + (r.has_name ? json_string(r.name) : std::string("null")) +
                 ",\"file_dtype\":" + json_string(r.file_dtype) + ",\"message\":" + json_string(msg) + "}");
      else if (!json && !quiet)
        out_line(text_escape(r.file) + (r.has_name ? " " + nanscope::detail::st_quote(r.name, ~std::size_t{0}) : "") +
                 ": " + text_escape(r.file_dtype) + shape_text(r) + " n=" + std::to_string(r.count) +
                 " skipped (unsupported dtype)");
      return;
    }
    ++tensors;
    if (r.nonfinite()) ++nonfinite;
    if (overflow_fails(r, fail_on)) ++overflowing;
    if (quiet) return;
    out_line(json ? json_tensor(r, fail_on) : text_line(r, fail_on));
  }
  void expert(const expert_report& e) {
    if (quiet) return;
    out_line(json ? json_expert(e) : text_expert(e));
  }
  int exit_code() const { return errors != 0 ? 2 : (nonfinite != 0 || overflowing != 0) ? 1 : 0; }
};

/// Thrown from the progress callback to stop scanning a file found to have shrunk (what is left reads zeros).
struct stop_scan : std::exception {
  const char* what() const noexcept override { return "stopped"; }
};

void scan_file(const std::string& path, const scan_settings& settings, run_state& rs) {
  ++rs.files;
  // A file that shrank: the tensors read from the zero pages mapped in by on_sigbus() are never reported.
  auto shrink_message = [&](const mapped_file& file, std::int64_t offset) {
    const std::int64_t now = file.current_size();
    const std::string where = "(SIGBUS at offset " + std::to_string(offset) + " of the " + std::to_string(file.size()) +
                              " bytes it had when opened";
    if (now >= 0 && now <= offset)
      return "nanscope: file '" + path + "': the file shrank while it was being read " + where + ", now " +
             std::to_string(now) + " bytes); its tensors from there on are not reported";
    return "nanscope: file '" + path + "': reading the file failed " + where + ", now " + std::to_string(now) +
           " bytes: an I/O error, or it shrank and grew again); its tensors from there on are not reported";
  };
  try {
    const mapped_file file(path);
    try {
      const file_format fmt = detect_format(file.data(), file.size(), path);
      if (fmt == file_format::unknown && mapped_file::shrink_offset() < 0)
        file_error(path,
                   "unrecognised file format: no .npy magic, no zip signature, no .npy/.npz/.safetensors extension, "
                   "no JSON header");
      const bool show_bar = rs.progress && file.size() > (std::uint64_t{1} << 30) && ::isatty(STDERR_FILENO) == 1;
      if (show_bar) rs.bar.start(path, file.size());
      scan_callbacks cb;
      cb.on_tensor = [&](const tensor_report& r) {
        if (mapped_file::shrink_offset() < 0) rs.tensor(r);
      };
      cb.on_expert = [&](const expert_report& e) {
        if (mapped_file::shrink_offset() < 0) rs.expert(e);
      };
      cb.on_warning = [&](const std::string& w) {
        if (mapped_file::shrink_offset() < 0) rs.warning(path, w);
      };
      // Called on the main thread between chunks (the pool is idle): the place to stop a file that shrank.
      cb.on_progress = [&](std::uint64_t done) {
        if (mapped_file::shrink_offset() >= 0) throw stop_scan{};
        if (show_bar) rs.bar.update(done);
      };
      if (fmt == file_format::npz) {
#if NANSCOPE_CLI_HAVE_ZLIB
        // a problem inside one member is that member's error (not reported when it came from a shrink)
        scan_npz(file.data(), file.size(), path, settings, cb, [&](const std::string& label, const std::string& msg) {
          if (mapped_file::shrink_offset() < 0) rs.error(label, nullptr, msg);
        });
#else
        file_error(path, ".npz archives are not supported by this build of nanscope (built without zlib)");
#endif
      } else if (fmt != file_format::unknown) {
        scan_buffer(file.data(), file.size(), path, fmt, settings, cb);
      }
      rs.bar.stop();
    } catch (const std::exception&) {
      // A parse error caused by the zero pages of a file that shrank is reported as the shrink.
      if (mapped_file::shrink_offset() < 0) throw;
    }
    rs.bar.stop();
    const std::int64_t shrunk = mapped_file::shrink_offset();
    if (shrunk >= 0) rs.error(path, nullptr, shrink_message(file, shrunk));
  } catch (const std::exception& e) {
    rs.bar.stop();
    rs.error(path, nullptr, e.what());
  }
}

/// True when a directory entry is a file `scan -r` reads: .npy, .npz, .safetensors (without case).
bool scanned_name(const std::string& name) {
  for (const char* ext : scanned_extensions)
    if (has_extension(name, ext)) return true;
  return false;
}

/// `scan -r DIR`: scans every .npy, .npz and .safetensors file under `dir`, depth first, the entries of each
/// directory in byte order of their names. Symbolic links are followed; a directory reached a second time (a
/// link back to one of its parents, or two links to one directory) is reported (a warning) and not entered
/// again, so a loop ends. A directory that cannot be read and an entry that cannot be examined are errors; a
/// link that leads nowhere (or round in a circle of links) is a warning unless its name is one scan reads.
void scan_tree(const std::string& dir, const struct stat& dir_st, const scan_settings& settings, run_state& rs,
               std::set<std::pair<dev_t, ino_t>>& seen) {
  if (!seen.insert({dir_st.st_dev, dir_st.st_ino}).second) {
    rs.warning(dir, "a directory already scanned (a symbolic link back to a parent, or a second link to it): "
                    "not entered again");
    return;
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    const int err = errno;
    rs.error(dir, nullptr, "nanscope: file '" + dir + "': cannot read the directory: " + std::strerror(err));
    return;
  }
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(d);
    if (e == nullptr) {
      if (errno != 0) {
        const int err = errno;
        rs.error(dir, nullptr, "nanscope: file '" + dir + "': reading the directory failed: " + std::strerror(err));
      }
      break;
    }
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());  // std::string orders bytes as unsigned char: locale-independent
  const std::string prefix = !dir.empty() && dir.back() == '/' ? dir : dir + "/";
  for (const std::string& name : names) {
    if (rs.out_failed()) return;
    const std::string path = prefix + name;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      const int err = errno;
      struct stat lst {};
      if (scanned_name(name))
        scan_file(path, settings, rs);  // reports why it cannot be opened
      else if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
        rs.warning(path, std::string("a symbolic link that cannot be followed (") + std::strerror(err) + "): not scanned");
      else
        rs.error(path, nullptr, "nanscope: file '" + path + "': cannot examine it: " + std::strerror(err));
      continue;
    }
    if (S_ISDIR(st.st_mode))
      scan_tree(path, st, settings, rs, seen);
    else if (scanned_name(name))
      scan_file(path, settings, rs);  // also the FIFOs and devices so named: "not a regular file"
  }
}

/// Prints the message for a failed write to stdout (the report is incomplete) on stderr.
void report_write_error(int err) {
  std::fprintf(stderr, "nanscope: error writing the report to standard output: %s (exit 2)\n", std::strerror(err));
  std::fflush(stderr);
}

/// Edits between two words (insertions, deletions, substitutions, and swaps of two neighbours: "scna" is 1 from
/// "scan").
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t v = std::min(d[i - 1][j] + 1, d[i][j - 1] + 1);
      v = std::min(v, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) v = std::min(v, d[i - 2][j - 2] + 1);
      d[i][j] = v;
    }
  return d[a.size()][b.size()];
}

/// The message for a first operand that names no subcommand: which ones there are, and the closest when it is
/// near one (at most 2 edits, or a prefix of it).
std::string unknown_subcommand(const std::string& word, const std::vector<std::string>& valid) {
  std::string best;
  std::size_t best_d = ~std::size_t{0};
  for (const std::string& v : valid) {
    const std::size_t dist = !word.empty() && v.compare(0, word.size(), word) == 0 ? 1 : edit_distance(word, v);
    if (dist < best_d) {
      best_d = dist;
      best = v;
    }
  }
  std::string msg = "nanscope: unknown subcommand '" + text_escape(word) + "'";
  if (best_d <= 2 && word.size() > best_d) msg += "; did you mean '" + best + "'?";
  msg += "\nThe subcommands are:";
  for (std::size_t i = 0; i < valid.size(); ++i) msg += (i == 0 ? " " : ", ") + valid[i];
  return msg + " (nanscope --help for more; exit 2)";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "nanscope: find NaN, Inf and low-precision overflow in the tensors of .npy, .npz and .safetensors files",
      "nanscope"};
  app.set_version_flag("--version", version_text);
  app.require_subcommand(1);
  // Each subcommand's --help shows its own exit codes (a subcommand copies its parent's footer when it is made:
  // each is set again below).
  constexpr const char* scan_exit_codes =
      "Exit status (scan): 0 every tensor finite; 1 a NaN/Inf found (or an overflow named by --fail-on-overflow);\n"
      "2 bad input or usage, or the report could not be written (2 wins over 1).";
  constexpr const char* report_exit_codes =
      "Exit status (report): 0 the page was written; 2 bad input or usage, or the page could not be written.";
  app.footer(std::string(scan_exit_codes) + "\n" + report_exit_codes +
             "\nDocumentation: docs/cli.md, docs/report.md");

  std::vector<std::string> files;
  bool json = false, quiet = false, stats = false, skip_unsupported = false, no_progress = false, recursive = false;
  unsigned threads = 0;
  std::vector<std::string> fail_on;
  std::string npy_void;
  CLI::App* scan =
      app.add_subcommand("scan", "Scan .npy, .npz and .safetensors files: one line (or JSON object) per tensor");
  scan->footer(std::string(scan_exit_codes) + "\nDocumentation: docs/cli.md");
  CLI::Option* files_opt = scan->add_option(
      "files", files, "Files to scan (.npy, .npz, .safetensors; directories with -r); those starting with '-' after '--'");
  scan->add_flag("-r,--recursive", recursive,
                 "Scan every .npy, .npz and .safetensors file under the directories given (links followed)");
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
                 "Report tensors of dtypes nanscope cannot check (C64, unknown names) as skipped, not as errors");
  std::vector<std::string> scales_rules;
  scan->add_option("--scales", scales_rules,
                   "Pair packed weights with their block scales: W=S[,T]: a tensor whose name ends in W takes the "
                   "tensor named with S in its place as scales (and T as NVFP4's per-tensor scale); repeatable, "
                   "tried before the naming conventions (docs/cli.md)")
      ->check([](const std::string& r) {
        const std::size_t eq = r.find('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == r.size() || r[eq + 1] == ',')
          return std::string("--scales wants W=S or W=S,T (name endings), e.g. .weight=.weight_scale");
        return std::string();
      });
  scan->add_flag("--no-progress", no_progress, "No progress bar (shown on a terminal for files over 1 GiB)");

#if NANSCOPE_CLI_HAVE_REPORT
  nanscope_report::report_args report_args;
  CLI::Option* report_inputs = nullptr;
  CLI::App* report = nanscope_report::add_report_command(app, report_args, report_inputs);
  report->footer(std::string(report_exit_codes) + "\nDocumentation: docs/report.md");
#endif

  // `--` ends option parsing wherever it appears (POSIX Utility Syntax Guideline 10): everything after the first
  // one is a file, even `--` itself or a name starting with '-'. CLI11 gets only what comes before it (CLI11 2.x
  // refuses operands after `--` once the positional has taken some before it).
  // Without `--` the files are required as before (CLI11 then also keeps the last argument for them rather than
  // giving it to a multi-valued option such as --fail-on-overflow); with it, the files may all come after it, and
  // `--` also ends such an option's values.
  std::vector<std::string> operands;
  bool dashdash = false;
  int cli_argc = argc;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--") == 0) {
      dashdash = true;
      cli_argc = i;
      operands.assign(argv + i + 1, argv + argc);
      break;
    }
  // A first operand that names no subcommand (CLI11 would only say "A subcommand is required").
  {
    std::vector<std::string> valid{scan->get_name()};
#if NANSCOPE_CLI_HAVE_REPORT
    valid.push_back(report->get_name());
#endif
    for (int i = 1; i < cli_argc; ++i) {
      const std::string a = argv[i];
      if (!a.empty() && a[0] == '-') continue;  // the top level's options are all flags (--help, --version)
      if (std::find(valid.begin(), valid.end(), a) == valid.end()) {
        std::fprintf(stderr, "%s\n", unknown_subcommand(a, valid).c_str());
        return 2;
      }
      break;
    }
  }
  if (operands.empty()) files_opt->required();
#if NANSCOPE_CLI_HAVE_REPORT
  if (operands.empty()) report_inputs->required();
#endif
  try {
    app.parse(cli_argc, argv);
    if (dashdash && scan->parsed() && files.empty() && operands.empty())
      throw CLI::RequiredError("files");  // `scan --` alone: the usual "files is required" message and exit 2
#if NANSCOPE_CLI_HAVE_REPORT
    if (dashdash && report->parsed() && report_args.inputs.empty() && operands.empty())
      throw CLI::RequiredError("inputs");
#endif
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // --help / --version (rc 0) print on stdout: a failed write there is an error too
    std::cout.flush();
    if (rc == 0 && (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout) != 0)) {
      report_write_error(errno != 0 ? errno : EIO);
      return 2;
    }
    return rc == 0 ? 0 : 2;
  }
#if NANSCOPE_CLI_HAVE_REPORT
  if (report->parsed()) {
    report_args.inputs.insert(report_args.inputs.end(), operands.begin(), operands.end());
    const int report_rc = nanscope_report::run_report(report_args, version_text);
    if (report_rc != 0) return report_rc;
    // One line on success, on stdout as scan's verdict: what was written, from how many inputs.
    struct stat page {};
    const std::string size =
        ::stat(report_args.output.c_str(), &page) == 0 ? std::to_string(page.st_size) + " bytes, " : std::string();
    const std::size_t n = report_args.inputs.size();
    std::printf("nanscope: report written to '%s' (%s%zu input%s)\n", text_escape(report_args.output).c_str(),
                size.c_str(), n, n == 1 ? "" : "s");
    if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
      std::fprintf(stderr, "nanscope: the report was written, but this could not be said on standard output: %s (exit 2)\n",
                   std::strerror(errno != 0 ? errno : EIO));
      return 2;
    }
    return 0;
  }
#endif
  files.insert(files.end(), operands.begin(), operands.end());

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
  for (const std::string& rule : scales_rules) {
    const std::size_t eq = rule.find('='), comma = rule.find(',', eq);
    scan_settings::scales_rule sr;
    sr.weight = rule.substr(0, eq);
    sr.scale = rule.substr(eq + 1, comma == std::string::npos ? std::string::npos : comma - eq - 1);
    if (comma != std::string::npos) sr.tensor_scale = rule.substr(comma + 1);
    settings.scale_rules.push_back(sr);
  }
  settings.report_unsupported_npy = skip_unsupported;  // a complex .npy is then skipped like a C64 safetensor
  if (threads != 0) {
    // The library's pool is sized from NANSCOPE_THREADS on first use: set it before any scan.
    ::setenv("NANSCOPE_THREADS", std::to_string(threads).c_str(), 1);
    settings.threads = threads;
  }
  if (!npy_void.empty())
    settings.npy.with_void_type(npy_void == "bf16" ? nanscope::dtype::bf16
                                : npy_void == "e4m3fn" ? nanscope::dtype::f8_e4m3fn
                                                       : nanscope::dtype::f8_e5m2);

  if (const char* hook = std::getenv("NANSCOPE_TEST_SHRINK_AFTER_MAP")) {
    char* end = nullptr;
    const long long n = std::strtoll(hook, &end, 10);
    if (end != hook && *end == ':' && n >= 0) {
      g_shrink_to = static_cast<off_t>(n);
      g_shrink_path = end + 1;
    }
  }
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page > 0) g_page_size = static_cast<std::uintptr_t>(page);
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);

  std::set<std::pair<dev_t, ino_t>> seen_dirs;  // -r: every directory entered (a link loop ends there)
  for (const std::string& f : files) {
    if (rs.out_failed()) break;  // the report is lost: no point reading the rest
    struct stat st {};
    if (recursive && ::stat(f.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
      scan_tree(f, st, settings, rs, seen_dirs);
    else
      scan_file(f, settings, rs);
  }

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
  // Every write to stdout is checked, and the final flush too: a report that did not reach its destination
  // (disk full, /dev/full, a closed descriptor) is an error, exit 2, never a silent success.
  if (!rs.flush_out()) {
    report_write_error(rs.out_errno);
    return 2;
  }
  return rc;
}
