// nanscope — detail/process.hpp: who is writing: the process id, its start time and host (to tell a dead
// writer's leftovers from a live one's), the launcher's rank, and ids unique per writer instance.
#ifndef NANSCOPE_DETAIL_PROCESS_HPP
#define NANSCOPE_DETAIL_PROCESS_HPP

#include "../config.hpp"
#include "../rank.hpp"

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>

#if defined(__unix__) || defined(__unix) || (defined(__APPLE__) && defined(__MACH__))
#define NANSCOPE_IMPL_POSIX_PROCESS 1
#include <cerrno>
#include <csignal>
#include <sys/types.h>
#include <unistd.h>
#else
#define NANSCOPE_IMPL_POSIX_PROCESS 0
#endif

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// The rank from the usual launcher variables (RANK, LOCAL_RANK, OMPI_COMM_WORLD_RANK, PMI_RANK; the first
/// set wins): the rank, -1 when none is set, -2 when the first one set is not a non-negative integer (its name
/// and value are then stored in *bad_var / *bad_value when given). A rank set explicitly (set_process_rank,
/// mpi::use_communicator; rank.hpp) comes first.
inline int parse_env_rank(const char** bad_var = nullptr, const char** bad_value = nullptr) {
  if (const rank_info set = explicit_process_rank(); set.known()) return set.rank;
  // The launcher pairs in rank.hpp's order first, so file names and reports agree on the rank.
  if (const rank_info env = rank_from_environment(); env.known()) return env.rank;
  static const char* const vars[] = {"RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
  for (const char* var : vars) {
    const char* v = std::getenv(var);
    if (v == nullptr || *v == '\0') continue;
    long long r = 0;
    const char* end = v + std::strlen(v);
    auto res = std::from_chars(v, end, r);
    if (res.ec != std::errc() || res.ptr != end || r < 0 || r > 0x7FFFFFFF) {
      if (bad_var != nullptr) *bad_var = var;
      if (bad_value != nullptr) *bad_value = v;
      return -2;
    }
    return static_cast<int>(r);
  }
  return -1;
}

/// This process's id (0 where there is no such thing).
inline unsigned long long process_id() {
#if NANSCOPE_IMPL_POSIX_PROCESS
  return static_cast<unsigned long long>(::getpid());
#else
  return 0;
#endif
}

/// The start time of process `pid` in clock ticks since boot (field 22 of /proc/<pid>/stat), or 0 when it
/// cannot be read (no such process, no /proc). Together with the pid it names a process uniquely on a host:
/// a reused pid has a later start time.
inline unsigned long long process_start_time(unsigned long long pid) {
#if defined(__linux__)
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%llu/stat", pid);
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return 0;
  char buf[1024];
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) state ..." — comm may hold spaces and parentheses: fields count from the last ')'
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  ++p;
  int field = 2;
  while (*p != '\0' && field < 22) {
    while (*p == ' ') ++p;
    ++field;
    if (field == 22) break;
    while (*p != '\0' && *p != ' ') ++p;
  }
  if (field != 22) return 0;
  while (*p == ' ') ++p;
  unsigned long long t = 0;
  const char* e = p;
  while (*e >= '0' && *e <= '9') ++e;
  if (std::from_chars(p, e, t).ec != std::errc()) return 0;
  return t;
#else
  (void)pid;
  return 0;
#endif
}

/// Whether process `pid` (started at `start`, 0: unknown) may still be running on this host. Errs on the side
/// of "alive": only a pid that does not exist, or that now belongs to a process started at another time, is dead.
inline bool process_may_be_alive(unsigned long long pid, unsigned long long start) {
#if NANSCOPE_IMPL_POSIX_PROCESS
  if (pid == 0 || pid > 0x7FFFFFFFull) return true;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  if (start != 0) {
    const unsigned long long now = process_start_time(pid);
    if (now != 0 && now != start) return false;  // the pid was reused by a later process
  }
  return true;
#else
  (void)pid;
  (void)start;
  return true;
#endif
}

/// This process's start time (see process_start_time), read when the pid changes (after fork()).
inline unsigned long long self_start_time() {
  static std::atomic<unsigned long long> cached_pid{~0ull};
  static std::atomic<unsigned long long> cached{0};
  const unsigned long long pid = process_id();
  if (cached_pid.load(std::memory_order_acquire) != pid) {
    cached.store(process_start_time(pid), std::memory_order_relaxed);
    cached_pid.store(pid, std::memory_order_release);
  }
  return cached.load(std::memory_order_relaxed);
}

/// 8 hex digits naming the process table this process sees: FNV-1a of the host name, the kernel's boot id and
/// the pid namespace (Linux: /proc/sys/kernel/random/boot_id, /proc/self/ns/pid). A leftover temporary is judged
/// only by a writer with the same tag, because only there does its pid name the same process: containers on one
/// host (often one host name, each its own pid namespace, a shared volume) and hosts with one name on a shared
/// file system each keep their own. A tag of an earlier boot matches no live writer, so its leftovers stay.
inline std::string host_tag() {
  std::string id;
#if NANSCOPE_IMPL_POSIX_PROCESS
  char name[256] = {0};
  if (::gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  id = name;
#endif
#if defined(__linux__)
  if (std::FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char boot[64] = {0};
    const std::size_t n = std::fread(boot, 1, sizeof boot - 1, f);
    std::fclose(f);
    id.append("\nboot:").append(boot, n);
  }
  char ns[128];
  const ssize_t len = ::readlink("/proc/self/ns/pid", ns, sizeof ns);
  if (len > 0 && static_cast<std::size_t>(len) < sizeof ns) id.append("\nns:").append(ns, static_cast<std::size_t>(len));
#endif
  std::uint32_t h = 2166136261u;
  for (const char c : id) {
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  char out[9];
  std::snprintf(out, sizeof out, "%08x", static_cast<unsigned>(h));
  return out;
}

/// A string unique per call across processes and time: hex of the pid, the wall clock in ns and a counter.
inline std::string unique_run_id() {
  static std::atomic<unsigned long long> counter{0};
  const auto ns = static_cast<unsigned long long>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  char buf[80];
  std::snprintf(buf, sizeof buf, "%llx-%llx-%llx", process_id(), ns, counter.fetch_add(1, std::memory_order_relaxed));
  return buf;
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_PROCESS_HPP
