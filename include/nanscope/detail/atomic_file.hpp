// nanscope — detail/atomic_file.hpp: write a file so that readers see the old content or the new one, never
// a partial file, even if the writer is killed or the machine loses power midway.
//
//   nanscope::detail::atomic_file f("out/x.npy");  // creates out/.x.npy.tmp.<pid>.<start>.<host>.<n> (O_EXCL)
//   f.write(p, n); ...
//   f.commit();      // fsync the data, rename over out/x.npy, fsync the directory
//   // or f.commit_new(): the same, but never replaces an existing out/x.npy (returns false instead)
//
// A target that exists as a pipe, device or socket is refused (a symbolic link is replaced, not followed).
// If commit() is not reached (an exception, an early return), the destructor removes the temporary file. A
// process killed midway leaves its temporary file behind under a name that is never the target's (a dot,
// the target's name, ".tmp.", the writer's pid, the process's start time, a tag of the host, boot and pid
// namespace (host_tag) and a counter): the target itself is untouched until the rename. remove_stale_temporaries()
// deletes such leftovers whose writer is dead (its pid gone, or reused by a process started at another time) and
// never those of a live one: it judges only temporaries of its own tag, whose pids name processes it can see.
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
#include <vector>

#include "process.hpp"

#if defined(__unix__) || defined(__unix) || (defined(__APPLE__) && defined(__MACH__))
#define NANSCOPE_IMPL_POSIX_FILES 1
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif
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

/// Creates `dir` and its missing parents (mkdir -p); false when it is not a directory afterwards.
inline bool make_directories(const std::string& dir) {
#if NANSCOPE_IMPL_POSIX_FILES
  struct stat st;
  if (dir.empty()) return false;
  if (::stat(dir.c_str(), &st) == 0) return S_ISDIR(st.st_mode);
  for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    const std::string prefix = dir.substr(0, pos);
    ::mkdir(prefix.c_str(), 0777);  // EEXIST (or a parent we may not write) is fine: the final stat decides
  }
  return ::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
#else
  (void)dir;
  return false;
#endif
}

/// fsync of directory `dir` (makes renames and unlinks in it durable); throws naming `path` on failure.
/// Filesystems that cannot fsync a directory (EINVAL, ENOTSUP) are accepted as they are.
inline void fsync_directory(const std::string& dir, const std::string& path) {
#if NANSCOPE_IMPL_POSIX_FILES
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_CLOEXEC
#ifdef O_DIRECTORY
                                          | O_DIRECTORY
#endif
  );
  if (dfd < 0) file_fail(path, errno_text(("written, but cannot open its directory '" + dir + "' to fsync it").c_str(), errno));
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
    file_fail(path, errno_text(("written, but fsync of its directory '" + dir + "' failed").c_str(), err));
#else
  (void)dir;
  (void)path;
#endif
}

/// The directory part of `path` ("." for a bare name, "/" for a file in the root).
inline std::string directory_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : path.substr(0, slash);
}

/// The parts of a temporary file name written by atomic_file: ".{base}.tmp.{pid}.{start}.{host}.{n}".
struct temp_name_parts {
  std::string base, host;
  unsigned long long pid = 0, start = 0;
};
inline bool parse_temp_name(const std::string& name, temp_name_parts& out) {
  if (name.size() < 2 || name[0] != '.') return false;
  std::size_t end = name.size();
  std::string field[4];  // n, host, start, pid (from the right)
  for (int i = 0; i < 4; ++i) {
    const std::size_t dot = name.rfind('.', end - 1);
    if (dot == std::string::npos || dot == 0 || dot + 1 >= end) return false;
    field[i] = name.substr(dot + 1, end - dot - 1);
    end = dot;
  }
  static const char tmp[] = ".tmp";
  if (end < 1 + 4 + 1 || name.compare(end - 4, 4, tmp) != 0) return false;
  auto digits = [](const std::string& s, unsigned long long& v) {
    if (s.empty() || s.size() > 19) return false;
    v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      v = v * 10 + static_cast<unsigned long long>(c - '0');
    }
    return true;
  };
  unsigned long long n = 0;
  if (!digits(field[0], n) || !digits(field[2], out.start) || !digits(field[3], out.pid)) return false;
  if (field[1].size() != 8 || field[1].find_first_not_of("0123456789abcdef") != std::string::npos) return false;
  out.host = field[1];
  out.base = name.substr(1, end - 4 - 1);
  return !out.base.empty();
}

/// Removes, in `dir`, the temporary files of atomic_file writers that are dead (killed midway): names
/// ".{base}.tmp.{pid}.{start}.{host}.{n}" of this host_tag (host, boot and pid namespace) whose `base` is one of
/// `bases` (or starts with `base_prefix` when `bases` is empty) and whose process is gone. Temporaries of live
/// writers, of other hosts, boots or pid namespaces (containers sharing the directory) and every other file are
/// left alone. Returns how many were removed; never throws.
inline std::size_t remove_stale_temporaries(const std::string& dir, const std::vector<std::string>& bases,
                                            const std::string& base_prefix = std::string()) noexcept {
  std::size_t removed = 0;
#if NANSCOPE_IMPL_POSIX_FILES
#if NANSCOPE_IMPL_EXCEPTIONS
  try {
#endif
    const std::string host = host_tag();
    const unsigned long long self = process_id();
    std::vector<std::string> victims;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name.size() < 2 || name[0] != '.' || name.find(".tmp.") == std::string::npos) continue;
        temp_name_parts t;
        if (!parse_temp_name(name, t) || t.host != host || t.pid == self) continue;
        bool wanted = false;
        if (bases.empty()) {
          wanted = t.base.compare(0, base_prefix.size(), base_prefix) == 0;
        } else {
          for (const auto& b : bases) wanted = wanted || b == t.base;
        }
        if (wanted && !process_may_be_alive(t.pid, t.start)) victims.push_back(name);
      }
      ::closedir(d);
    }
    for (const auto& v : victims) {
      const std::string p = dir + "/" + v;
      struct stat st;
      if (::lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::unlink(p.c_str()) == 0) ++removed;
    }
#if NANSCOPE_IMPL_EXCEPTIONS
  } catch (...) {
  }
#endif
#else
  (void)dir;
  (void)bases;
  (void)base_prefix;
#endif
  return removed;
}

/// A file written under a temporary name in the target's directory and renamed over the target by commit().
class atomic_file {
 public:
  explicit atomic_file(const std::string& path) : path_(path) {
#if NANSCOPE_IMPL_POSIX_FILES
    const std::size_t slash = path.rfind('/');
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    if (base.empty() || base == "." || base == "..") file_fail(path, "the path names a directory, not a file");
    dir_ = directory_of(path);
    const std::string prefix = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "." + base +
                               ".tmp." + std::to_string(process_id()) + "." + std::to_string(self_start_time()) + "." +
                               host_tag() + ".";
    // Keep the permissions of a file being replaced; a new file gets 0666 & ~umask like any other.
    mode_t mode = 0666;
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) file_fail(path, "the path names a directory, not a file");
      mode = st.st_mode & 07777;
    }
    // A pipe, device or socket is not replaced by a file (as root, "/dev/null" would be); a symbolic link is
    // (the rename replaces the link, never what it points to).
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
      file_fail(path, S_ISFIFO(st.st_mode)  ? "exists and is a named pipe, not a regular file"
                      : S_ISSOCK(st.st_mode) ? "exists and is a socket, not a regular file"
                                            : "exists and is a device or special file, not a regular file");
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
  void commit() { (void)finish(true); }

  /// As commit(), but never replaces an existing target: returns false (and removes the temporary file) when
  /// the target exists. Uses link(2), which fails on an existing name; where the filesystem has no hard links,
  /// renameat2(RENAME_NOREPLACE) on Linux, else a check followed by rename (not atomic against a concurrent
  /// writer of the same name).
  bool commit_new() { return finish(false); }

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

  bool finish(bool replace) {
#if NANSCOPE_IMPL_POSIX_FILES
    if (fd_ < 0) file_fail(path_, "commit after commit or failure");
    while (::fsync(fd_) != 0) {
      if (errno != EINTR) fail_and_clean(errno_text("fsync failed", errno));
    }
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail_and_clean(errno_text("close failed", errno));
    if (replace) {
      if (::rename(temp_.c_str(), path_.c_str()) != 0) fail_and_clean(errno_text("rename over the target failed", errno));
    } else if (!place_new()) {
      return false;
    }
    committed_ = true;
    temp_.clear();
    // The rename is durable only once the directory entry is on disk.
    fsync_directory(dir_, path_);
    return true;
#else
    (void)replace;
    return false;
#endif
  }

  /// Gives the temporary file the target's name unless the target exists (false, temporary removed).
  bool place_new() {
#if NANSCOPE_IMPL_POSIX_FILES
    if (::link(temp_.c_str(), path_.c_str()) == 0) {
      ::unlink(temp_.c_str());
      return true;
    }
    int err = errno;
    if (err == EEXIST) {
      discard();
      return false;
    }
#if defined(__linux__) && defined(SYS_renameat2)
    if (::syscall(SYS_renameat2, AT_FDCWD, temp_.c_str(), AT_FDCWD, path_.c_str(), 1u /* RENAME_NOREPLACE */) == 0)
      return true;
    err = errno;
    if (err == EEXIST) {
      discard();
      return false;
    }
#endif
    struct stat st;
    if (::lstat(path_.c_str(), &st) == 0) {
      discard();
      return false;
    }
    if (::rename(temp_.c_str(), path_.c_str()) != 0) fail_and_clean(errno_text("rename to the target failed", errno));
    return true;
#else
    return false;
#endif
  }

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
