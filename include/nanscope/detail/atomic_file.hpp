// nanscope — detail/atomic_file.hpp: write a file so that readers see the old content or the new one, never
// a partial file, even if the writer is killed or the machine loses power midway.
//
//   nanscope::detail::atomic_file f("out/x.npy");  // creates out/.x.npy.tmp.<pid>.<n> (O_EXCL)
//   f.write(p, n); ...
//   f.commit();  // fsync the data, rename over out/x.npy, fsync the directory
//
// If commit() is not reached (an exception, an early return), the destructor removes the temporary file. A
// process killed midway leaves its temporary file behind under a name that is never the target's (a dot,
// the target's name, ".tmp.", the writer's pid and a counter): the target itself is untouched until the rename.
// Every failure throws nanscope::error naming the path and the system's reason (strerror). POSIX only; on
// other platforms the constructor throws "not supported".
#ifndef NANSCOPE_DETAIL_ATOMIC_FILE_HPP
#define NANSCOPE_DETAIL_ATOMIC_FILE_HPP

#include "../config.hpp"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__unix__) || defined(__unix) || (defined(__APPLE__) && defined(__MACH__))
#define NANSCOPE_IMPL_POSIX_FILES 1
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#else
#define NANSCOPE_IMPL_POSIX_FILES 0
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// Throws nanscope::error("nanscope: file '<path>': <problem>").
[[noreturn]] inline void file_fail(const std::string& path, const std::string& problem) {
  NANSCOPE_IMPL_THROW(::nanscope::error("nanscope: file '" + path + "': " + problem));
#if !NANSCOPE_IMPL_EXCEPTIONS
  std::abort();
#endif
}

/// "<what>: <strerror(err)>".
inline std::string errno_text(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

/// A file written under a temporary name in the target's directory and renamed over the target by commit().
class atomic_file {
 public:
  explicit atomic_file(const std::string& path) : path_(path) {
#if NANSCOPE_IMPL_POSIX_FILES
    const std::size_t slash = path.rfind('/');
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    if (base.empty() || base == "." || base == "..") file_fail(path, "the path names a directory, not a file");
    dir_ = slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : path.substr(0, slash);
    const std::string prefix = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "." + base +
                               ".tmp." + std::to_string(static_cast<long long>(::getpid())) + ".";
    // Keep the permissions of a file being replaced; a new file gets 0666 & ~umask like any other.
    mode_t mode = 0666;
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) file_fail(path, "the path names a directory, not a file");
      mode = st.st_mode & 07777;
    }
    for (int attempt = 0; attempt < 1000; ++attempt) {
      temp_ = prefix + std::to_string(next_serial());
      fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
      if (fd_ >= 0) break;
      if (errno != EEXIST) file_fail(path, errno_text(("cannot create the temporary file '" + temp_ + "'").c_str(), errno));
    }
    if (fd_ < 0) file_fail(path, "cannot find a free temporary file name next to it");
    if (mode != 0666 && ::fchmod(fd_, mode) != 0) fail_and_clean(errno_text("cannot copy the permissions", errno));
#else
    file_fail(path, "atomic file writes are not supported on this platform");
#endif
  }
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  ~atomic_file() { discard(); }

  /// Appends n bytes. Throws (after removing the temporary file) on any error.
  void write(const void* data, std::size_t n) {
#if NANSCOPE_IMPL_POSIX_FILES
    if (fd_ < 0) file_fail(path_, "write after commit or failure");
    const auto* p = static_cast<const unsigned char*>(data);
    while (n > 0) {
      const std::size_t piece = n < (std::size_t{1} << 30) ? n : (std::size_t{1} << 30);
      const ::ssize_t w = ::write(fd_, p, piece);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail_and_clean(errno_text("write failed", errno));
      }
      if (w == 0) fail_and_clean("write failed: no progress");
      p += w;
      n -= static_cast<std::size_t>(w);
    }
#else
    (void)data;
    (void)n;
#endif
  }

  /// Makes the written bytes the content of the target path: fsync, close, rename, fsync of the directory.
  void commit() {
#if NANSCOPE_IMPL_POSIX_FILES
    if (fd_ < 0) file_fail(path_, "commit after commit or failure");
    while (::fsync(fd_) != 0) {
      if (errno != EINTR) fail_and_clean(errno_text("fsync failed", errno));
    }
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_and_clean(errno_text("close failed", errno));
    if (::rename(temp_.c_str(), path_.c_str()) != 0) fail_and_clean(errno_text("rename over the target failed", errno));
    committed_ = true;
    temp_.clear();
    // The rename is durable only once the directory entry is on disk. Filesystems that cannot fsync a
    // directory (EINVAL, ENOTSUP) are accepted as they are.
    const int dfd = ::open(dir_.c_str(), O_RDONLY | O_CLOEXEC
#ifdef O_DIRECTORY
                                              | O_DIRECTORY
#endif
    );
    if (dfd < 0) file_fail(path_, errno_text(("written, but cannot open its directory '" + dir_ + "' to fsync it").c_str(), errno));
    int rc;
    while ((rc = ::fsync(dfd)) != 0 && errno == EINTR) {
    }
    const int err = errno;
    ::close(dfd);
    if (rc != 0 && err != EINVAL
#ifdef ENOTSUP
        && err != ENOTSUP
#endif
    )
      file_fail(path_, errno_text(("written, but fsync of its directory '" + dir_ + "' failed").c_str(), err));
#endif
  }

  /// Closes and removes the temporary file unless committed (the destructor does this too).
  void discard() noexcept {
#if NANSCOPE_IMPL_POSIX_FILES
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
    if (!committed_ && !temp_.empty()) {
      ::unlink(temp_.c_str());
      temp_.clear();
    }
#endif
  }

  const std::string& path() const { return path_; }
  /// The temporary file's path (empty once committed or discarded).
  const std::string& temp_path() const { return temp_; }

 private:
  std::string path_;
  std::string dir_;
  std::string temp_;
  int fd_ = -1;
  bool committed_ = false;

  static unsigned long long next_serial() {
    static std::atomic<unsigned long long> serial{0};
    return serial.fetch_add(1, std::memory_order_relaxed);
  }
  [[noreturn]] void fail_and_clean(const std::string& problem) {
    const std::string temp = temp_;
    discard();
    file_fail(path_, problem + (temp.empty() ? std::string() : " (temporary file '" + temp + "' removed)"));
  }
};

/// Writes `n` bytes as the whole new content of `path`, atomically (see atomic_file).
inline void write_file_atomically(const std::string& path, const void* data, std::size_t n) {
  atomic_file f(path);
  f.write(data, n);
  f.commit();
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_ATOMIC_FILE_HPP
