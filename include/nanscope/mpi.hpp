// nanscope — mpi.hpp: the MPI binding of the multi-rank records (the only nanscope header that includes <mpi.h>):
// a communicator description from an MPI_Comm, this process's rank from MPI, and the optional all-stop.
//
//   nanscope::mpi::use_communicator(MPI_COMM_WORLD);          // rank/world size in reports and file names
//   auto world = nanscope::mpi::describe(MPI_COMM_WORLD);     // name, size, rank, members' world ranks
//   nanscope::rank_evidence ev(rec, {"evidence"});
//   nanscope::mpi::all_stop stop(ev, MPI_COMM_WORLD, /*enabled=*/true);
//   for (step ...) {
//     ...  NANSCOPE_COLLECTIVE(ev, world, all_reduce, g, g, MPI_Allreduce(MPI_IN_PLACE, ...));
//     if (stop.step_boundary()) break;                         // every rank breaks at the same step
//   }
// Nothing here sends anything by itself except the all-stop flag, and only when the all-stop is enabled.
#ifndef NANSCOPE_MPI_HPP
#define NANSCOPE_MPI_HPP

#include "collective.hpp"
#include "config.hpp"
#include "rank.hpp"
#include "rank_evidence.hpp"

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace mpi {

/// Describes `c` for the records, without communicating: size, this process's rank in it, and its members'
/// ranks in MPI_COMM_WORLD. The name is `name` when given, else the communicator's MPI name (MPI_Comm_set_name;
/// "MPI_COMM_WORLD" for the world), else "group:" and the members' world ranks ("group:0,2"). Two communicators
/// over the same group need distinct names (MPI_Comm_set_name or `name`), or their sequence numbers mix.
inline communicator describe(MPI_Comm c, std::string name = {}) {
  communicator d;
  MPI_Comm_size(c, &d.size);
  MPI_Comm_rank(c, &d.rank);
  MPI_Group g = MPI_GROUP_NULL, wg = MPI_GROUP_NULL;
  MPI_Comm_group(c, &g);
  MPI_Comm_group(MPI_COMM_WORLD, &wg);
  std::vector<int> in(static_cast<std::size_t>(d.size));
  for (int i = 0; i < d.size; ++i) in[static_cast<std::size_t>(i)] = i;
  d.members.assign(static_cast<std::size_t>(d.size), -1);
  if (d.size > 0) MPI_Group_translate_ranks(g, d.size, in.data(), wg, d.members.data());
  MPI_Group_free(&g);
  MPI_Group_free(&wg);
  if (name.empty()) {
    char buf[MPI_MAX_OBJECT_NAME] = {};
    int len = 0;
    MPI_Comm_get_name(c, buf, &len);
    name.assign(buf, static_cast<std::size_t>(len > 0 ? len : 0));
  }
  if (name.empty()) {
    name = "group:";
    for (std::size_t i = 0; i < d.members.size(); ++i) name += (i ? "," : "") + std::to_string(d.members[i]);
  }
  d.name = std::move(name);
  return d;
}

/// Makes `c`'s rank and size this process's rank (rank.hpp) for reports and file names. Use the world communicator.
inline rank_info use_communicator(MPI_Comm c) {
  int r = 0, n = 1;
  MPI_Comm_rank(c, &r);
  MPI_Comm_size(c, &n);
  set_process_rank(r, n, "communicator");
  return process_rank();
}

/// The optional all-stop: at each step boundary every rank contributes the step of the first non-finite value it
/// saw since the previous boundary (or none) to a nonblocking all-reduce (MPI_Iallreduce, minimum) on the user's
/// communicator and waits for it; when any rank saw one, every rank writes its evidence file (reason "all-stop",
/// with the earliest such step of all ranks) and step_boundary() returns true on all of them at the same step. A
/// rank that goes on after a stop (a print-and-continue policy) stops again only for a new detection.
/// Disabled: step_boundary() does nothing and returns false (no communication at all).
/// Every rank of `c` must call step_boundary() the same number of times, like any collective.
class all_stop {
 public:
  all_stop(rank_evidence& ev, MPI_Comm c, bool enabled) : ev_(ev), comm_(c), enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  /// All-reduces issued so far (0 when disabled).
  std::uint64_t collectives_issued() const { return issued_; }

  /// Call at the end of every step, on every rank. True: stop now (the evidence is written).
  bool step_boundary() {
    if (!enabled_) return false;
    constexpr std::uint64_t none = ~std::uint64_t{0};
    std::uint64_t step = 0;
    std::uint64_t mine = ev_.take_new_detection(step) ? step : none;
    std::uint64_t first = none;
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Iallreduce(&mine, &first, 1, MPI_UINT64_T, MPI_MIN, comm_, &req);
    ++issued_;
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    if (first == none) return false;
    ev_.set_stop(first, mine != none ? "detected here" : "detected on another rank");
    ev_.write("all-stop");
    return true;
  }

 private:
  rank_evidence& ev_;
  MPI_Comm comm_;
  bool enabled_;
  std::uint64_t issued_ = 0;
};

}  // namespace mpi
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_MPI_HPP
