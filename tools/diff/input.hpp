// nanscope-diff — input.hpp: reads an input file safely: named pipes without a writer fail after a bounded wait
// instead of hanging, endless inputs stop at a size limit or at the first byte that cannot start a JSON
// document, and the bytes are streamed to the JSON parser through a small buffer (no copy of the whole file).
#ifndef NANSCOPE_DIFF_INPUT_HPP
#define NANSCOPE_DIFF_INPUT_HPP

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <streambuf>
#include <string>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace nsdiff {

/// A file that cannot be read as a layer tree. what(): "<json path>: <problem>" or just "<problem>".
struct bad_input : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct input_limits {
  std::uint64_t max_bytes = std::uint64_t{512} << 20;  ///< 0: no limit (--max-input-size)
  double fifo_wait_s = 5.0;                           ///< how long a pipe may stay without a writer (--fifo-wait)
  /// How messages name the options that set the limits (" (--max-input-size)"; empty: the tool has none) and
  /// what an input should be ("a tree file").
  const char* size_option = " (--max-input-size)";
  const char* size_option_in = "--max-input-size; ";
  const char* wait_option = " (--fifo-wait)";
  const char* expected = "a tree file";
  const char* starts_with = "a layer-tree file starts with '{'";
};

/// "1 GiB", "512 MiB", "123 bytes".
inline std::string byte_size_text(std::uint64_t n) {
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB"};
  if (n < 1024 || n % 1024 != 0) return std::to_string(n) + " bytes";
  int u = -1;
  while (n % 1024 == 0 && n >= 1024 && u < 3) {
    n /= 1024;
    ++u;
  }
  return std::to_string(n) + " " + units[u];
}

/// What kind of file a stat describes, for messages.
inline const char* file_kind(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISFIFO(m)) return "a pipe";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISDIR(m)) return "a directory";
  return "a special file";
}

/// Whether `c` can be the first byte of a JSON text (after whitespace and a UTF-8 byte order mark).
inline bool can_start_json(unsigned char c) {
  return c == '{' || c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n';
}

/// An open input file, read through a 64 KiB buffer as a std::streambuf (what nlohmann's parser reads from).
/// Throws bad_input from the constructor and from underflow(): nlohmann calls sbumpc() on the buffer directly,
/// so the exception reaches the caller of the parse.
class input_file : public std::streambuf {
 public:
  input_file(const std::string& path, const input_limits& limits) : limits_(limits) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) throw bad_input(std::string("cannot open: ") + std::strerror(errno));
    try {
      inspect();
    } catch (...) {
      ::close(fd_);  // the destructor does not run for a constructor that throws
      fd_ = -1;
      throw;
    }
    setg(buf_, buf_, buf_);
  }
  ~input_file() override {
    if (fd_ >= 0) ::close(fd_);
  }
  input_file(const input_file&) = delete;
  input_file& operator=(const input_file&) = delete;

  mode_t mode() const { return mode_; }
  std::uint64_t bytes_read() const { return total_; }

 private:
  void inspect() {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail_errno("cannot stat");
    mode_ = st.st_mode;
    if (S_ISDIR(st.st_mode)) fail(std::string("is a directory, not ") + limits_.expected);
    if (S_ISREG(st.st_mode) && limits_.max_bytes && static_cast<std::uint64_t>(st.st_size) > limits_.max_bytes)
      fail("is " + std::to_string(st.st_size) + " bytes, larger than the input limit of " +
           byte_size_text(limits_.max_bytes) + limits_.size_option);
    // Regular files and devices are read blocking from here on. A pipe stays non-blocking until a writer is seen.
    if (!S_ISFIFO(st.st_mode)) set_blocking();
  }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    if (eof_) return traits_type::eof();
    std::size_t want = sizeof buf_;
    if (limits_.max_bytes) {
      if (total_ >= limits_.max_bytes) {
        // one byte more tells an input of exactly the limit from a longer one
        char extra = 0;
        if (read_some(&extra, 1) == 0) return at_end();
        fail("more than " + byte_size_text(limits_.max_bytes) + " without the end of the JSON document: stopped at " +
             "the input limit (" + limits_.size_option_in + "is it " + std::string(file_kind(mode_)) + " that never ends?)");
      }
      if (limits_.max_bytes - total_ < want) want = static_cast<std::size_t>(limits_.max_bytes - total_);
    }
    const std::size_t n = read_some(buf_, want);
    if (n == 0) return at_end();
    if (!started_) check_start(n);
    total_ += n;
    setg(buf_, buf_, buf_ + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const { throw bad_input(msg); }
  [[noreturn]] void fail_errno(const char* what) const { throw bad_input(std::string(what) + ": " + std::strerror(errno)); }

  void set_blocking() {
    const int fl = ::fcntl(fd_, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) (void)::fcntl(fd_, F_SETFL, fl & ~O_NONBLOCK);
    blocking_ = true;
  }

  int_type at_end() {
    eof_ = true;
    if (!started_) fail(total_ == 0 ? "empty file" : "empty file (only whitespace)");
    return traits_type::eof();
  }

  /// Reads up to n bytes (0 at the end). A pipe opened before its writer: a non-blocking read returns 0 while
  /// no writer is connected and fails with EAGAIN while one is connected without data yet. Without a writer we
  /// poll for one up to fifo_wait_s; once a writer was seen the pipe is read blocking (a slow writer is fine).
  std::size_t read_some(char* out, std::size_t n) {
    while (true) {
      const ssize_t r = ::read(fd_, out, n);
      if (r > 0) {
        if (!blocking_) set_blocking();
        return static_cast<std::size_t>(r);
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && !blocking_) {
        set_blocking();  // a writer is connected: wait for its data as long as it takes
        continue;
      }
      if (r < 0) fail_errno("read error");
      // r == 0: the end, or (a pipe we have not yet seen a writer on) no writer yet
      if (blocking_ || waited_) return 0;
      waited_ = true;
      if (!wait_for_writer()) {
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", limits_.fifo_wait_s);
        fail(std::string("a named pipe (FIFO) with no writer: nothing connected to it within ") + secs +
             " s" + limits_.wait_option + "; start the program that writes it first, or pass a regular file");
      }
    }
  }

  /// Polls the pipe up to fifo_wait_s; true when a writer connected (data, or its close) in time.
  bool wait_for_writer() {
    const double limit_ms = limits_.fifo_wait_s * 1000.0;
    struct timespec start {};
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    while (true) {
      struct timespec now {};
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      const double spent = static_cast<double>(now.tv_sec - start.tv_sec) * 1000.0 +
                           static_cast<double>(now.tv_nsec - start.tv_nsec) / 1.0e6;
      if (spent >= limit_ms) return false;
      const double left = limit_ms - spent;
      struct pollfd p {};
      p.fd = fd_;
      p.events = POLLIN;
      const int r = ::poll(&p, 1, left > 1.0e9 ? 1000000000 : static_cast<int>(left) + 1);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail_errno("poll");
      if (r == 0) continue;  // re-check the clock
      return true;           // POLLIN or POLLHUP: a writer came (and maybe left)
    }
  }

  /// The first byte that is not whitespace or a UTF-8 byte order mark must be able to start a JSON text.
  void check_start(std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const auto c = static_cast<unsigned char>(buf_[i]);
      const std::uint64_t at = total_ + i;
      static const unsigned char bom[3] = {0xEF, 0xBB, 0xBF};
      if (at < 3 && bom_ == at && c == bom[at]) {
        ++bom_;
        continue;
      }
      if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
      started_ = true;
      if (can_start_json(c)) return;
      static const char hex[] = "0123456789abcdef";
      std::string what = "0x";
      what += hex[c >> 4];
      what += hex[c & 15];
      if (c >= 0x21 && c < 0x7F) what += std::string(" '") + static_cast<char>(c) + "'";
      std::string msg = std::string(file_kind(mode_)) + ", not a JSON document: its first";
      msg += at > bom_ ? " non-blank byte (at offset " + std::to_string(at) + ")" : " byte";
      msg += " is " + what + "; " + limits_.starts_with;
      if (c == 0x1f && i + 1 < n && static_cast<unsigned char>(buf_[i + 1]) == 0x8b)
        msg += " (this looks gzip-compressed: decompress it first, e.g. <(zcat FILE))";
      fail(msg);
    }
  }

  input_limits limits_;
  int fd_ = -1;
  mode_t mode_ = 0;
  bool blocking_ = false, waited_ = false, eof_ = false, started_ = false;
  std::uint64_t total_ = 0, bom_ = 0;
  char buf_[64 * 1024];
};

}  // namespace nsdiff

#endif  // NANSCOPE_DIFF_INPUT_HPP
