// An LD_PRELOAD library for report_test.py (group errors): fsync() of a directory fails with EIO, as a failing disk
// or a network file system may answer, so that `nanscope report` meets its late failure: the page was renamed into
// place, and the fsync() of its directory, which makes the new name durable, failed. No permission keeps root from
// syncing a directory, hence the shim. Other descriptors are synced for real.
#include <cerrno>

#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" int fsync(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    errno = EIO;
    return -1;
  }
  return static_cast<int>(::syscall(SYS_fsync, fd));
}
