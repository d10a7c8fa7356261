// nanscope — segments_api.hpp: the segmentation types (segments, segment_options, segment_health,
// segmented_result) without the segmented pass, for the light headers: the recorder and its macros take a
// segmentation (NANSCOPE_SEGMENTS, scope::output(x, seg)); segments.hpp has the check itself.
#ifndef NANSCOPE_SEGMENTS_API_HPP
#define NANSCOPE_SEGMENTS_API_HPP

#include "config.hpp"
#include "health.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// What a segmentation's offsets count: rows (indices along the first dimension; a row is every element under
/// one index of it) or elements (flat row-major indices).
enum class segment_axis : std::uint8_t { rows, elements };

/// How much a segmented check reports per segment. `flags`: the masks of segments holding NaN/Inf (and over the
/// threshold, when one is set) and, for each bad segment, its NaN/Inf counts and first NaN/Inf. `counts`: also
/// every segment's NaN/-Inf/+Inf counts, first NaN/Inf and abs_max (segmented_result::per_segment).
enum class segment_detail : std::uint8_t { flags, counts };

inline const char* name(segment_axis a) {
  switch (a) {
    case segment_axis::rows: return "rows";
    case segment_axis::elements: return "elements";
  }
  return "?";
}
inline const char* name(segment_detail d) {
  switch (d) {
    case segment_detail::flags: return "flags";
    case segment_detail::counts: return "counts";
  }
  return "?";
}

/// A segmentation of a tensor: a non-owning view of the caller's offsets (and ids), like tensor_view. Segment i is
/// [offsets[i], offsets[i + 1]) along the axis; the offsets ascend (equal neighbours make an empty segment), start
/// at 0 and end at the extent (the first dimension's size for rows, the element count for elements), so every
/// element belongs to exactly one segment. Or, without offsets, uniform segments of `uniform` rows or elements
/// each (the last one may be shorter). The arrays must stay valid during the check. Checked at every check:
/// a mismatch throws nanscope::error naming the tensor.
struct segments {
  segment_axis axis = segment_axis::rows;
  const std::int64_t* offsets = nullptr;  ///< offset_count ascending offsets (segments + 1), or null: uniform
  std::size_t offset_count = 0;
  std::int64_t uniform = 0;               ///< with offsets null: rows or elements per segment (> 0)
  const std::int64_t* ids = nullptr;      ///< optional: one id per segment (request ids, expert ids, block numbers)
  std::size_t id_count = 0;
  /// optional: what a segment is, for the recorder's texts, the layer tree and the reports ("request", "expert",
  /// "block"); null: "segment". check() ignores it.
  const char* unit = nullptr;

  /// Segments along the first dimension: offsets[0] = 0 < ... <= offsets[n] = shape[0] (a vLLM-style cu_seqlens).
  static segments rows(const std::int64_t* offsets, std::size_t offset_count) {
    return make(segment_axis::rows, offsets, offset_count);
  }
  static segments rows(const std::vector<std::int64_t>& offsets) { return rows(offsets.data(), offsets.size()); }
  static segments rows(std::vector<std::int64_t>&&) = delete;  // the segmentation would point into a temporary
  /// Segments along the flat row-major index: offsets[0] = 0 <= ... <= offsets[n] = the element count.
  static segments elements(const std::int64_t* offsets, std::size_t offset_count) {
    return make(segment_axis::elements, offsets, offset_count);
  }
  static segments elements(const std::vector<std::int64_t>& offsets) { return elements(offsets.data(), offsets.size()); }
  static segments elements(std::vector<std::int64_t>&&) = delete;
  /// Uniform segments of `rows_per_segment` rows (a paged KV cache's blocks of 16 tokens: every_rows(16)).
  static segments every_rows(std::int64_t rows_per_segment) {
    segments s;
    s.axis = segment_axis::rows;
    s.uniform = rows_per_segment;
    return s;
  }
  /// Uniform segments of `elements_per_segment` elements.
  static segments every_elements(std::int64_t elements_per_segment) {
    segments s;
    s.axis = segment_axis::elements;
    s.uniform = elements_per_segment;
    return s;
  }
  /// One id per segment, reported in segment_health::id (the segment's index without ids).
  segments& with_ids(const std::int64_t* segment_ids, std::size_t count) {
    ids = segment_ids;
    id_count = count;
    return *this;
  }
  segments& with_ids(const std::vector<std::int64_t>& segment_ids) { return with_ids(segment_ids.data(), segment_ids.size()); }
  segments& with_ids(std::vector<std::int64_t>&&) = delete;
  /// Names what a segment is ("request", "expert", "block"): the recorder says "request 17 (rows 4096-4351)".
  /// The text must outlive the segmentation's use (a string literal does).
  segments& with_unit(const char* what) {
    unit = what;
    return *this;
  }

 private:
  static segments make(segment_axis a, const std::int64_t* o, std::size_t n) {
    segments s;
    s.axis = a;
    s.offsets = o;
    s.offset_count = n;
    return s;
  }
};

/// Options of a segmented check, beside check_options. Chainable.
struct segment_options {
  segment_detail level = segment_detail::flags;
  /// A segment is "over" when it holds a non-NaN value with |x| > threshold (an Inf included), e.g. 65504, the
  /// f16 maximum, for f32 activations about to be cast. Off unless with_threshold() was called.
  bool has_threshold = false;
  double threshold = 0.0;

  segment_options& with_level(segment_detail d) {
    level = d;
    return *this;
  }
  segment_options& with_threshold(double t) {
    has_threshold = true;
    threshold = t;
    return *this;
  }
};

/// One segment's NaN/Inf counts, first NaN/Inf and abs_max (segmented_result::per_segment).
struct segment_counts {
  std::uint64_t nan = 0;
  std::uint64_t neg_inf = 0;
  std::uint64_t pos_inf = 0;
  std::int64_t first_nonfinite = -1;  ///< flat row-major index in the tensor of the segment's first NaN/Inf, -1 if none
  /// |x| max over the segment's non-NaN values (an Inf gives inf); NaN when the segment has none or when the
  /// check read no data.
  double abs_max = detail::qnan;

  std::uint64_t nonfinite() const { return nan + neg_inf + pos_inf; }
  bool has_nonfinite() const { return nonfinite() != 0; }
};

/// A segment as reported in segmented_result::bad: where it is and what it holds.
struct segment_health {
  std::size_t index = 0;  ///< position in the segmentation
  std::int64_t id = 0;    ///< the caller's id (segments::with_ids), else the index
  std::uint64_t begin = 0, end = 0;  ///< flat row-major element range [begin, end)
  std::uint64_t nan = 0;
  std::uint64_t neg_inf = 0;
  std::uint64_t pos_inf = 0;
  std::int64_t first_nonfinite = -1;  ///< flat index in the tensor of the first NaN/Inf, -1 if none
  double abs_max = detail::qnan;      ///< as segment_counts::abs_max with segment_detail::counts; NaN with flags
  bool over_threshold = false;

  std::uint64_t count() const { return end - begin; }
  std::uint64_t nonfinite() const { return nan + neg_inf + pos_inf; }
  bool has_nonfinite() const { return nonfinite() != 0; }
};

/// The result of a segmented check.
struct segmented_result {
  health_result total;  ///< bit-identical to check(view, options) without segments
  segment_axis axis = segment_axis::rows;
  std::uint64_t row_elems = 1;  ///< elements per unit of the axis (a row's elements; 1 for elements)
  std::size_t count = 0;        ///< segments
  segment_detail level = segment_detail::flags;
  bool has_threshold = false;
  double threshold = 0.0;
  std::vector<std::uint64_t> nonfinite_mask;  ///< bit i % 64 of word i / 64: segment i holds a NaN or Inf
  std::vector<std::uint64_t> over_mask;       ///< the same for "over the threshold"; empty without a threshold
  std::vector<segment_health> bad;            ///< the segments holding NaN/Inf, by ascending index
  std::vector<segment_counts> per_segment;    ///< every segment (segment_detail::counts); empty with flags

  bool has_nonfinite(std::size_t i) const { return i < count && ((nonfinite_mask[i / 64] >> (i % 64)) & 1u) != 0; }
  bool over_threshold(std::size_t i) const {
    return i < count && !over_mask.empty() && ((over_mask[i / 64] >> (i % 64)) & 1u) != 0;
  }
  /// Segments holding NaN/Inf.
  std::size_t bad_count() const { return bad.size(); }
  /// Indices of the segments over the threshold, ascending (empty without a threshold).
  std::vector<std::size_t> over_indices() const {
    std::vector<std::size_t> out;
    for (std::size_t w = 0; w < over_mask.size(); ++w)
      for (std::uint64_t b = over_mask[w]; b != 0; b &= b - 1) out.push_back(w * 64 + static_cast<std::size_t>(__builtin_ctzll(b)));
    return out;
  }
  /// The row (first-dimension index) of a flat index: what a first_nonfinite means in rows.
  std::int64_t row_of(std::int64_t flat) const {
    return row_elems == 0 || flat < 0 ? -1 : static_cast<std::int64_t>(static_cast<std::uint64_t>(flat) / row_elems);
  }
};

namespace detail {
/// Enters segment i ([b, e), counts c, over the threshold or not; ids: the caller's, or null) into a result's masks and, when it holds
/// NaN/Inf, its list of bad segments: the last step of the host and the CUDA segmented checks alike.
inline void seg_enter(segmented_result& out, const std::int64_t* ids, std::size_t i, std::uint64_t b, std::uint64_t e,
                      const segment_counts& c, bool over) {
  const std::uint64_t bit = std::uint64_t{1} << (i % 64);
  if (over) out.over_mask[i / 64] |= bit;
  if (!c.has_nonfinite()) return;
  out.nonfinite_mask[i / 64] |= bit;
  segment_health h;
  h.index = i;
  h.id = ids != nullptr ? ids[i] : static_cast<std::int64_t>(i);
  h.begin = b;
  h.end = e;
  h.nan = c.nan;
  h.neg_inf = c.neg_inf;
  h.pos_inf = c.pos_inf;
  h.first_nonfinite = c.first_nonfinite;
  h.abs_max = c.abs_max;
  h.over_threshold = over;
  out.bad.push_back(h);
}
}  // namespace detail

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_SEGMENTS_API_HPP
