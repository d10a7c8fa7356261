// nanscope — collective.hpp: transport-agnostic records of collectives (all-reduce, all-gather, ...) and of
// point-to-point transfers (send/recv), the edges along which a NaN travels from rank to rank. Nothing here
// talks to a network: a record names its communicator, its kind and its sequence number, and those agree on
// every rank because every rank calls its collectives on a communicator in the same order (MPI, NCCL and
// Gloo all require it). rank_evidence.hpp marks them at the call site; mpi.hpp describes an MPI_Comm.
// The per-rank evidence file format and the causal model are in docs/multi-rank.md.
#ifndef NANSCOPE_COLLECTIVE_HPP
#define NANSCOPE_COLLECTIVE_HPP

#include "config.hpp"
#include "health.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// What a record is. send/recv are point-to-point; everything else is a collective over the communicator.
enum class collective_kind : std::uint8_t {
  all_reduce,
  all_gather,
  reduce_scatter,
  broadcast,
  reduce,
  all_to_all,
  gather,
  scatter,
  barrier,
  send,
  recv,
};

inline const char* name(collective_kind k) {
  switch (k) {
    case collective_kind::all_reduce: return "all_reduce";
    case collective_kind::all_gather: return "all_gather";
    case collective_kind::reduce_scatter: return "reduce_scatter";
    case collective_kind::broadcast: return "broadcast";
    case collective_kind::reduce: return "reduce";
    case collective_kind::all_to_all: return "all_to_all";
    case collective_kind::gather: return "gather";
    case collective_kind::scatter: return "scatter";
    case collective_kind::barrier: return "barrier";
    case collective_kind::send: return "send";
    case collective_kind::recv: return "recv";
  }
  return "?";
}

/// The kind named `s` (as name() writes it); false for an unknown name.
inline bool parse_collective_kind(std::string_view s, collective_kind& out) {
  for (int i = 0; i <= static_cast<int>(collective_kind::recv); ++i) {
    const auto k = static_cast<collective_kind>(i);
    if (s == name(k)) {
      out = k;
      return true;
    }
  }
  return false;
}

constexpr bool is_point_to_point(collective_kind k) {
  return k == collective_kind::send || k == collective_kind::recv;
}

/// A communicator as the records name it. `name` must be the same string on every member and different for
/// every communicator whose collectives are marked (sequence numbers are counted per name).
struct communicator {
  std::string name;          ///< "world", "tp.0", "dp"; mpi::describe derives one from an MPI_Comm
  int size = 0;              ///< number of members
  int rank = -1;             ///< this process's rank inside the communicator
  std::vector<int> members;  ///< the members' world ranks, in communicator-rank order; empty: unknown (then
                             ///< communicator rank r is taken to be world rank r)

  /// The world rank of communicator rank `r` (r itself when `members` is empty).
  int world_rank_of(int r) const {
    return members.empty() ? r
                           : (r >= 0 && static_cast<std::size_t>(r) < members.size() ? members[static_cast<std::size_t>(r)] : -1);
  }
};

/// One marked collective or point-to-point transfer on this rank.
struct collective_record {
  collective_kind kind = collective_kind::all_reduce;
  std::string comm;            ///< communicator name
  int comm_size = 0;
  int comm_rank = -1;
  std::vector<int> members;    ///< world ranks of the communicator's members (may be empty)
  std::uint64_t seq = 0;       ///< collectives: per communicator; send/recv: per (communicator, peer, tag, direction)
  int peer = -1;               ///< send/recv: the other side's rank in the communicator (its world rank via members)
  int tag = 0;                 ///< send/recv: the message tag
  std::uint64_t step = 0;      ///< the recorder's step when the call was marked
  std::string site;            ///< a label: the caller's, else the enclosing scope's module path
  bool has_input = false;      ///< the input was checked before the call (send, and collectives with input)
  bool has_output = false;     ///< the output was checked after the call (recv, and collectives with output)
  health_result input;
  health_result output;
  bool input_nonfinite() const { return has_input && input.has_nonfinite(); }
  bool output_nonfinite() const { return has_output && output.has_nonfinite(); }
};

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_COLLECTIVE_HPP
