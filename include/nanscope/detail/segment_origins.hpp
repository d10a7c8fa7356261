// nanscope — detail/segment_origins.hpp: which frame produced each bad segment of a detection's tensor (the
// request, expert or block a NaN/Inf first appeared in), from the frames the recorder kept.
#ifndef NANSCOPE_DETAIL_SEGMENT_ORIGINS_HPP
#define NANSCOPE_DETAIL_SEGMENT_ORIGINS_HPP

#include "../config.hpp"
#include "../frame.hpp"
#include "../segment_record.hpp"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// The bad segments of a detection's tensor whose origin is looked for (the report prints fewer).
inline constexpr std::size_t max_segment_origins = 64;

/// Per bad segment of `segs` (the first max_segment_origins): the first frame, oldest first, whose output or
/// checkpoint holds it bad while no input of that frame segmented with the same unit does (produced there); if no
/// frame qualifies, the first frame in which any tensor holds it bad (it arrived already bad). Segments are matched
/// across tensors by unit and id.
inline std::vector<segment_origin> find_segment_origins(const std::vector<frame>& frames, const recorded_segments& segs) {
  std::vector<segment_origin> out;
  auto holds = [&](const tensor_record& t, std::int64_t id) {
    return t.segmented.applied && t.segmented.unit == segs.unit && t.segmented.find(id) != nullptr;
  };
  for (std::size_t k = 0; k < segs.bad.size() && k < max_segment_origins; ++k) {
    const std::int64_t id = segs.bad[k].id;
    segment_origin first_seen;
    bool seen = false, produced = false;
    for (std::size_t fi = 0; fi < frames.size() && !produced; ++fi) {
      const frame& f = frames[fi];
      bool input_bad = false;
      for (const tensor_record& t : f.tensors)
        if (t.role == tensor_role::input && holds(t, id)) input_bad = true;
      for (const tensor_record& t : f.tensors) {
        if (!holds(t, id)) continue;
        if (!seen) {
          seen = true;
          first_seen.id = id;
          first_seen.frame = fi;
          first_seen.context = t.context;
        }
        if ((t.role == tensor_role::output || t.role == tensor_role::checkpoint) && !input_bad) {
          segment_origin o;
          o.id = id;
          o.frame = fi;
          o.context = t.context;
          o.produced = true;
          out.push_back(std::move(o));
          produced = true;
          break;
        }
      }
    }
    if (!produced && seen) out.push_back(std::move(first_seen));
  }
  return out;
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_SEGMENT_ORIGINS_HPP
