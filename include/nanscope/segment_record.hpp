// nanscope — segment_record.hpp: what the recorder keeps of a tensor checked with a segmentation (its bad
// segments, after the data and the caller's offsets are gone), where each bad segment was first produced, and
// the text that names one: "request 17 (rows 4096-4351): 3 NaN, first at row 4102".
#ifndef NANSCOPE_SEGMENT_RECORD_HPP
#define NANSCOPE_SEGMENT_RECORD_HPP

#include "config.hpp"
#include "segments_api.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// The segments of a recorded tensor checked with a segmentation (a NANSCOPE_SEGMENTS guard, scope::output(x, seg),
/// NANSCOPE_DETECT_OVERFLOW_SEGMENTS): tensor_record::segmented.
struct recorded_segments {
  bool applied = false;           ///< the tensor was checked with a segmentation
  std::string unit;               ///< what a segment is (segments::with_unit): "request", "expert"; empty: "segment"
  segment_axis axis = segment_axis::rows;
  std::uint64_t row_elems = 1;    ///< elements per row (1 for element segments)
  std::size_t count = 0;          ///< segments in the segmentation
  std::vector<segment_health> bad;  ///< the segments holding NaN/Inf, by ascending index

  const char* unit_name() const { return unit.empty() ? "segment" : unit.c_str(); }
  /// A flat index in units of the axis: its row for row segments, itself for element segments.
  std::int64_t unit_of(std::int64_t flat) const {
    if (flat < 0 || row_elems == 0) return -1;
    return axis == segment_axis::rows ? static_cast<std::int64_t>(static_cast<std::uint64_t>(flat) / row_elems) : flat;
  }
  /// The bad segment with this id, or null.
  const segment_health* find(std::int64_t id) const {
    for (const segment_health& s : bad)
      if (s.id == id) return &s;
    return nullptr;
  }
};

/// Where a bad segment of the detecting tensor was first seen bad among a detection's frames
/// (detection::segment_origins): the first frame (oldest first) whose output or checkpoint holds it bad while no
/// input of that frame segmented with the same unit holds it bad ("produced"); when no frame qualifies, the first
/// frame in which any tensor holds it bad (it arrived already bad, from before the saved frames or from code that
/// is not checked).
struct segment_origin {
  std::int64_t id = 0;        ///< the segment's id (its index without ids)
  std::size_t frame = 0;      ///< index into detection::frames
  std::string context;        ///< the tensor that held it bad there: "output", "input[0]", a checkpoint's text
  bool produced = false;      ///< that frame's segmented inputs had it clean
};

namespace detail {

/// "3 NaN, 1 +inf, 2 -inf" (the kinds present).
inline std::string segment_counts_text(const segment_health& s) {
  std::string out;
  auto add = [&](std::uint64_t n, const char* what) {
    if (n == 0) return;
    if (!out.empty()) out += ", ";
    out += std::to_string(n);
    out += ' ';
    out += what;
  };
  add(s.nan, "NaN");
  add(s.pos_inf, "+inf");
  add(s.neg_inf, "-inf");
  return out;
}

/// "request 17 (rows 4096-4351): 3 NaN, first at row 4102" (element segments: "elements 0-99", "first at element
/// 42"; a one-row segment: "row 5").
inline std::string segment_text(const recorded_segments& r, const segment_health& s) {
  const bool rows = r.axis == segment_axis::rows;
  const std::int64_t b = r.unit_of(static_cast<std::int64_t>(s.begin));
  const std::int64_t e = r.unit_of(static_cast<std::int64_t>(s.end)) - 1;
  std::string out = r.unit_name();
  out += ' ';
  out += std::to_string(s.id);
  out += " (";
  if (b == e) out += (rows ? "row " : "element ") + std::to_string(b);
  else out += (rows ? "rows " : "elements ") + std::to_string(b) + "-" + std::to_string(e);
  out += "): ";
  out += segment_counts_text(s);
  if (s.first_nonfinite >= 0) {
    out += rows ? ", first at row " : ", first at element ";
    out += std::to_string(r.unit_of(s.first_nonfinite));
  }
  return out;
}

/// "request 17", "requests 17, 23, 42" (at most `limit` ids, then "and N more").
inline std::string segment_ids_text(const recorded_segments& r, std::size_t limit = 8) {
  std::string out = r.unit_name();
  if (r.bad.size() != 1) out += 's';
  for (std::size_t i = 0; i < r.bad.size() && i < limit; ++i) {
    out += i == 0 ? " " : ", ";
    out += std::to_string(r.bad[i].id);
  }
  if (r.bad.size() > limit) out += " and " + std::to_string(r.bad.size() - limit) + " more";
  return out;
}

}  // namespace detail

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_SEGMENT_RECORD_HPP
