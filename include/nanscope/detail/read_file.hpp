// nanscope — detail/read_file.hpp: reads a small regular file whole, checking what the path names on the open
// descriptor itself, so that a pipe, a directory or a device put there (even between a check and the open)
// neither blocks the reader nor reads as endless or empty text.
#ifndef NANSCOPE_DETAIL_READ_FILE_HPP
#define NANSCOPE_DETAIL_READ_FILE_HPP

#include "../config.hpp"

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// What read_regular_file found.
enum class read_status { ok, cannot_open, not_regular, too_large, read_error };

struct read_result {
  read_status status = read_status::ok;
  std::uint64_t size = 0;  ///< too_large: the size seen (at least limit + 1)
  bool grew = false;       ///< too_large: the file grew past the limit while it was read
  int error = 0;           ///< cannot_open / read_error: errno
  bool ok() const { return status == read_status::ok; }
};

/// Reads `path` into `out` when it names a regular file of at most `limit` bytes. Anything else is never opened
/// (a pipe's writer would see its reader come and go, a device may act on an open); a file put in its place
/// after that check is opened without blocking (O_NONBLOCK: a named pipe with no writer opens at once) and
/// refused by fstat on the descriptor. A file that grows past `limit` while it is read is too_large as well.
/// `out` is cleared first.
inline read_result read_regular_file(const std::string& path, std::uint64_t limit, std::string& out) {
  out.clear();
  read_result r;
  struct stat before {};
  if (::stat(path.c_str(), &before) != 0) {
    r.status = read_status::cannot_open;
    r.error = errno;
    return r;
  }
  if (!S_ISREG(before.st_mode)) {
    r.status = read_status::not_regular;
    return r;
  }
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    r.error = errno;
    r.status = r.error == ENXIO ? read_status::not_regular : read_status::cannot_open;  // a socket put there
    return r;
  }
  struct fd_closer {
    int fd;
    ~fd_closer() { ::close(fd); }
  } closer{fd};
  struct stat sb {};
  if (::fstat(fd, &sb) != 0) {
    r.status = read_status::read_error;
    r.error = errno;
    return r;
  }
  if (!S_ISREG(sb.st_mode)) {
    r.status = read_status::not_regular;
    return r;
  }
  if (sb.st_size < 0 || static_cast<std::uint64_t>(sb.st_size) > limit) {
    r.status = read_status::too_large;
    r.size = static_cast<std::uint64_t>(sb.st_size);
    return r;
  }
  // a regular file: read it blocking (O_NONBLOCK has no meaning for it on most file systems, EAGAIN on some)
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0 && (fl & O_NONBLOCK) != 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  out.reserve(static_cast<std::size_t>(sb.st_size));
  char buf[16384];
  for (;;) {
    const ssize_t k = ::read(fd, buf, sizeof buf);
    if (k < 0) {
      if (errno == EINTR) continue;
      r.status = read_status::read_error;
      r.error = errno;
      out.clear();
      return r;
    }
    if (k == 0) break;
    out.append(buf, static_cast<std::size_t>(k));
    if (out.size() > limit) {
      r.status = read_status::too_large;
      r.size = out.size();
      r.grew = true;
      out.clear();
      return r;
    }
  }
  r.size = out.size();
  return r;
}

/// A message for a failed read_regular_file (without the path): "not a regular file", "N bytes, more than
/// <limit_name> of L", "cannot be read: <strerror>".
inline std::string read_failure_text(const read_result& r, std::uint64_t limit, const char* limit_name) {
  switch (r.status) {
    case read_status::ok: return {};
    case read_status::not_regular: return "not a regular file";
    case read_status::too_large:
      if (r.grew) return std::string("more than ") + limit_name + " of " + std::to_string(limit) + " (it grew while read)";
      return std::to_string(r.size) + " bytes, more than " + limit_name + " of " + std::to_string(limit);
    case read_status::cannot_open:
    case read_status::read_error: break;
  }
  return std::string("cannot be read: ") + std::strerror(r.error);
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_READ_FILE_HPP
