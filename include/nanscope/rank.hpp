// nanscope — rank.hpp: which rank of a multi-process run this process is (rank, world size), from an explicit
// setting or from the launcher's environment (Open MPI, MPICH/PMI, Slurm, torchrun), and the tag that reports,
// layer-tree file names and snapshot names carry ("rank2of4").
//
//   nanscope::set_process_rank(r, n);        // explicit (nanscope::mpi::use_communicator does this)
//   nanscope::process_rank()                 // explicit, else the environment, else rank 0 of 1 (unknown)
//   nanscope::rank_tag()                     // "rank2of4"; "" for a single process (world size 1 or unknown)
#ifndef NANSCOPE_RANK_HPP
#define NANSCOPE_RANK_HPP

#include "config.hpp"

#include <cstdlib>
#include <mutex>
#include <string>

NANSCOPE_NAMESPACE_BEGIN

/// A process's place in a multi-process run.
struct rank_info {
  int rank = 0;
  int world_size = 1;
  std::string source;  ///< where it came from: "explicit", "communicator", an environment variable's name; "" unknown
  bool known() const { return !source.empty(); }
};

namespace detail {
/// A non-negative decimal integer that fits an int; false for anything else ("", "-1", "3x", overflow).
inline bool parse_rank_number(const char* s, int& out) {
  if (s == nullptr || *s == '\0') return false;
  long long v = 0;
  for (const char* p = s; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return false;
    v = v * 10 + (*p - '0');
    if (v > 0x7fffffffLL) return false;
  }
  out = static_cast<int>(v);
  return true;
}
struct process_rank_state {
  std::mutex m;
  bool explicit_set = false;
  rank_info info;
};
inline process_rank_state& rank_state() {
  static process_rank_state s;
  return s;
}
}  // namespace detail

/// Rank and world size from the launcher's environment, first match wins: Open MPI (OMPI_COMM_WORLD_RANK/SIZE),
/// MPICH and Intel MPI (PMI_RANK/PMI_SIZE), Slurm (SLURM_PROCID/SLURM_NTASKS), torchrun (RANK/WORLD_SIZE). A pair
/// is used only when both are valid numbers and rank < size; otherwise unknown (rank 0 of 1, empty source).
inline rank_info rank_from_environment() {
  static const char* const pairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                         {"PMI_RANK", "PMI_SIZE"},
                                         {"SLURM_PROCID", "SLURM_NTASKS"},
                                         {"RANK", "WORLD_SIZE"}};
  for (const auto& p : pairs) {
    int r = 0, n = 0;
    if (detail::parse_rank_number(std::getenv(p[0]), r) && detail::parse_rank_number(std::getenv(p[1]), n) && n > 0 &&
        r < n) {
      rank_info info;
      info.rank = r;
      info.world_size = n;
      info.source = p[0];
      return info;
    }
  }
  return rank_info{};
}

/// Sets this process's rank explicitly (overrides the environment). `source` says where it came from.
inline void set_process_rank(int rank, int world_size, const char* source = "explicit") {
  auto& s = detail::rank_state();
  std::lock_guard<std::mutex> lk(s.m);
  s.explicit_set = world_size > 0 && rank >= 0 && rank < world_size;
  if (!s.explicit_set) return;
  s.info.rank = rank;
  s.info.world_size = world_size;
  s.info.source = source;
}

/// The rank set with set_process_rank, or unknown (rank 0 of 1, empty source) when none was set.
inline rank_info explicit_process_rank() {
  auto& s = detail::rank_state();
  std::lock_guard<std::mutex> lk(s.m);
  return s.explicit_set ? s.info : rank_info{};
}

/// This process's rank: the explicit setting, else the environment (read on every call), else rank 0 of 1.
inline rank_info process_rank() {
  auto& s = detail::rank_state();
  {
    std::lock_guard<std::mutex> lk(s.m);
    if (s.explicit_set) return s.info;
  }
  return rank_from_environment();
}

/// "rank<R>of<N>" when this process is one of several (world size > 1), else "".
inline std::string rank_tag() {
  const rank_info r = process_rank();
  if (r.world_size <= 1) return std::string();
  return "rank" + std::to_string(r.rank) + "of" + std::to_string(r.world_size);
}

/// The line a detection report of the native styles ends with in a run of several processes (the hf style adds
/// none: HuggingFace's bytes): "nanscope: rank 2 of 4 (source)\n";
/// "" for a single process. At the end, so that the report's first line (an exception's what()) is unchanged.
inline std::string rank_report_line() {
  const rank_info r = process_rank();
  if (r.world_size <= 1) return std::string();
  return "nanscope: rank " + std::to_string(r.rank) + " of " + std::to_string(r.world_size) + " (" + r.source + ")\n";
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_RANK_HPP
