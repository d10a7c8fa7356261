// nanscope tests — cuda_segments_emulation_test.cpp: the CUDA segment kernel (detail/cuda_segments.cuh,
// segment_kernel in detail/cuda_segments_launch.cuh) played on the CPU, tile by tile and thread by thread, with
// the kernel's own per-tile functions: the per-tile binary searches, the coalesced share of a tile inside one
// segment and its warps' shuffle trees (lane 0's record folded into the segment), the contiguous runs of a tile
// that straddles boundaries (flushed at every segment change), the offsets check. The atomics become plain
// folds (they are exact and order-free). The records then go through finalize_segments() and are compared with
// the host segmented check (nanscope::check(view, segments)) and with a naive per-segment loop. What this
// cannot test is CUDA itself (shuffles, atomics, loads): tests/cuda/cuda_test.cu does, on a GPU.
#define NANSCOPE_IMPL_CUDA_EMULATION 1
#include <nanscope/detail/cuda_segments.cuh>
#include <nanscope/segments.hpp>

#include "support/compare.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ns = nanscope;
namespace nc = nanscope::cuda;
namespace nd = nanscope::cuda::detail;

/// The kernel's warp merge of level-2 health records (warp_merge_group<2, 0>): a shuffle tree, lane 0 holds it.
void emulate_warp_merge_health(nc::device_result* lanes) {
  for (unsigned o = 16; o > 0; o >>= 1) {
    std::vector<nc::device_result> before(lanes, lanes + 32);
    for (unsigned i = 0; i < 32; ++i) nd::merge_group<2, 0>(lanes[i], before[i + o < 32 ? i + o : i]);
  }
}

/// The segment kernel of level L over `grid` blocks, as segment_kernel<L> runs it. Returns the nseg + 2 records.
template <int L>
std::vector<nc::segment_record> emulate_segment_kernel(const ns::tensor_view& v, const nc::device_segments& s,
                                                       const ns::segment_options& so, unsigned grid) {
  ns::validate(v);
  std::uint64_t extent = 0, unit = 1;
  const std::uint64_t nseg = nd::seg_host_validate(v, s, so, extent, unit);
  std::vector<nc::segment_record> rec(static_cast<std::size_t>(nseg + 2), nc::segment_record{});
  const nd::seg_params p = nd::seg_make_params(v, s, nseg, extent, unit, rec.data(), so);
  // the offsets check: thread i of the grid takes offsets i, i + grid threads, ...
  unsigned long long err = 0;
  for (unsigned long long i = 0; i <= nseg; ++i) {
    err |= nd::seg_check_offset(p, i);
    rec[static_cast<std::size_t>(i)].begin = nd::seg_begin(p, i);
  }
  rec[static_cast<std::size_t>(nseg)].nan |= err;
  const unsigned normal = nd::normal32_of(v.type);
  for (unsigned b = 0; b < grid; ++b) {
    std::vector<nd::thread_acc> tot(nd::block_threads);  // each thread's health state over its tiles (level 2)
    std::vector<nd::thread_acc32> tot32(nd::block_threads);
    for (unsigned long long tile = b; tile < p.tiles; tile += grid) {
      const nd::seg_tile_span span = nd::seg_tile_of(p, tile);
      const unsigned long long t0 = span.b, t1 = span.e, s0 = span.s0, s1 = span.s1;
      if (s0 == s1) {
        std::vector<nd::seg_acc> lanes(nd::block_threads);
        for (unsigned t = 0; t < static_cast<unsigned>(nd::block_threads); ++t)
          lanes[t] = nd::seg_whole_thread<L>(p, t0, t1, t, tot[t], tot32[t], normal);
        for (int w = 0; w < nd::block_threads / 32; ++w) {
          nd::seg_acc* l = lanes.data() + 32 * w;
          bool any = false;
          for (int i = 0; i < 32; ++i) any = any || nd::seg_nonempty(l[i]);
          if (!any) continue;
          for (unsigned o = 16; o > 0; o >>= 1) {  // __shfl_down_sync: a source past the warp reads its own value
            std::vector<nd::seg_acc> before(l, l + 32);
            for (unsigned i = 0; i < 32; ++i) nd::seg_merge(l[i], before[i + o < 32 ? i + o : i]);
          }
          nd::seg_fold_plain(rec[static_cast<std::size_t>(s0)], l[0]);
        }
      } else {
        for (unsigned t = 0; t < static_cast<unsigned>(nd::block_threads); ++t)
          nd::seg_straddle_thread<L>(p, t0, t1, t, s0, s1, tot[t], tot32[t], normal,
                                     [&](unsigned long long seg, const nd::seg_acc& a) {
                                       nd::seg_fold_plain(rec[static_cast<std::size_t>(seg)], a);
                                     });
      }
    }
    if (L >= 2 && b < p.tiles) {  // every block of a launch has a tile (seg_blocks)
      std::vector<nc::device_result> lanes(nd::block_threads);
      for (unsigned t = 0; t < static_cast<unsigned>(nd::block_threads); ++t)
        lanes[t] = nd::to_record(tot[t], tot32[t], v.type == ns::dtype::f64);
      for (int w = 0; w < nd::block_threads / 32; ++w) {
        emulate_warp_merge_health(lanes.data() + 32 * w);
        nd::seg_totals_fold_plain(reinterpret_cast<nd::seg_totals&>(rec[static_cast<std::size_t>(nseg + 1)]),
                                  lanes[static_cast<std::size_t>(32 * w)]);
      }
    }
  }
  return rec;
}

/// The emulated device result of a segmented check (level-1 modes: the totals from the segment records).
ns::segmented_result device_check(const ns::tensor_view& v, const nc::device_segments& s, ns::check_mode mode,
                                  const ns::segment_options& so, unsigned grid = 7) {
  const std::vector<nc::segment_record> rec = nd::seg_kernel_level(mode) >= 2
                                                   ? emulate_segment_kernel<2>(v, s, so, grid)
                                                   : emulate_segment_kernel<1>(v, s, so, grid);
  return nc::finalize_segments(nullptr, rec.data(), v, s, mode, so);
}

ns::segments host_segments(const nc::device_segments& d) {
  ns::segments h;
  h.axis = d.axis;
  h.offsets = d.offsets;
  h.offset_count = d.offset_count;
  h.uniform = d.uniform;
  h.ids = d.ids;
  h.id_count = d.id_count;
  return h;
}

bool same_double(double a, double b) { return ns::detail::double_to_bits(a) == ns::detail::double_to_bits(b); }

/// Every segment field of two results, bit for bit (abs_max by bit pattern: NaN == NaN).
void require_same_segments(const ns::segmented_result& a, const ns::segmented_result& b) {
  REQUIRE(a.count == b.count);
  CHECK(a.axis == b.axis);
  CHECK(a.row_elems == b.row_elems);
  CHECK(a.nonfinite_mask == b.nonfinite_mask);
  CHECK(a.over_mask == b.over_mask);
  REQUIRE(a.bad.size() == b.bad.size());
  for (std::size_t i = 0; i < a.bad.size(); ++i) {
    const ns::segment_health &x = a.bad[i], &y = b.bad[i];
    INFO("bad segment " << x.index);
    CHECK(x.index == y.index);
    CHECK(x.id == y.id);
    CHECK(x.begin == y.begin);
    CHECK(x.end == y.end);
    CHECK(x.nan == y.nan);
    CHECK(x.neg_inf == y.neg_inf);
    CHECK(x.pos_inf == y.pos_inf);
    CHECK(x.first_nonfinite == y.first_nonfinite);
    CHECK(same_double(x.abs_max, y.abs_max));
    CHECK(x.over_threshold == y.over_threshold);
  }
  REQUIRE(a.per_segment.size() == b.per_segment.size());
  for (std::size_t i = 0; i < a.per_segment.size(); ++i) {
    const ns::segment_counts &x = a.per_segment[i], &y = b.per_segment[i];
    INFO("segment " << i);
    CHECK(x.nan == y.nan);
    CHECK(x.neg_inf == y.neg_inf);
    CHECK(x.pos_inf == y.pos_inf);
    CHECK(x.first_nonfinite == y.first_nonfinite);
    CHECK(same_double(x.abs_max, y.abs_max));
  }
}

/// NaN / Inf by the bits (the fastmath preset builds the tests with -ffast-math, where x != x and x == inf fold).
std::uint64_t magnitude_bits(double x) { return ns::detail::double_to_bits(x) & ~(std::uint64_t{1} << 63); }
bool nan_bits(double x) { return magnitude_bits(x) > ns::detail::f64_inf_bits; }
bool inf_bits(double x) { return magnitude_bits(x) == ns::detail::f64_inf_bits; }
bool negative_bits(double x) { return (ns::detail::double_to_bits(x) >> 63) != 0; }

/// A naive per-segment loop over decoded values (logical order through `flat_to_offset`), counts level.
struct naive_segment {
  std::uint64_t nan = 0, ninf = 0, pinf = 0;
  std::int64_t first = -1;
  double amax = -1.0;  // -1: no non-NaN value
};
template <class Offset>
std::vector<naive_segment> naive(const unsigned char* base, ns::dtype t, const std::vector<std::uint64_t>& begins,
                                 Offset&& flat_to_offset) {
  std::vector<naive_segment> out(begins.size() - 1);
  for (std::size_t s = 0; s + 1 < begins.size(); ++s)
    for (std::uint64_t i = begins[s]; i < begins[s + 1]; ++i) {
      const double x = ns::detail::load_as_double(base, t, static_cast<std::size_t>(flat_to_offset(i)));
      naive_segment& r = out[s];
      if (nan_bits(x)) {
        ++r.nan;
      } else {
        if (inf_bits(x) && negative_bits(x)) ++r.ninf;
        if (inf_bits(x) && !negative_bits(x)) ++r.pinf;
        const double a = std::fabs(x);  // |-0| is +0
        r.amax = a > r.amax ? a : r.amax;
      }
      if ((nan_bits(x) || inf_bits(x)) && r.first < 0) r.first = static_cast<std::int64_t>(i);
    }
  return out;
}

void require_matches_naive(const ns::segmented_result& r, const std::vector<naive_segment>& ref) {
  REQUIRE(r.per_segment.size() == ref.size());
  for (std::size_t s = 0; s < ref.size(); ++s) {
    INFO("segment " << s);
    const ns::segment_counts& c = r.per_segment[s];
    CHECK(c.nan == ref[s].nan);
    CHECK(c.neg_inf == ref[s].ninf);
    CHECK(c.pos_inf == ref[s].pinf);
    CHECK(c.first_nonfinite == ref[s].first);
    if (ref[s].amax < 0) CHECK(nan_bits(c.abs_max));
    else CHECK_MESSAGE(same_double(c.abs_max, ref[s].amax), "abs_max " << c.abs_max << " naive " << ref[s].amax << " nan " << ref[s].nan);
    CHECK(r.has_nonfinite(s) == (ref[s].nan + ref[s].ninf + ref[s].pinf != 0));
  }
}

const ns::dtype all_float_types[] = {ns::dtype::f64, ns::dtype::f32, ns::dtype::f16,
                                     ns::dtype::bf16, ns::dtype::f8_e4m3fn, ns::dtype::f8_e5m2};

/// Random finite element bits of dtype t (es bytes), written at element e of buf.
void put_bits(std::vector<unsigned char>& buf, std::size_t e, std::size_t es, std::uint64_t bits) {
  std::memcpy(buf.data() + e * es, &bits, es);  // little-endian
}
std::uint64_t random_finite(std::mt19937_64& rng, ns::dtype t) {
  const std::size_t es = ns::size_of(t);
  const std::uint64_t sign = 1ull << (8 * es - 1), mask = sign - 1, bad = ns::detail::seg_bad_abs_bits(t);
  std::uint64_t b = rng();
  if (es < 8) b &= (1ull << (8 * es)) - 1;
  if ((b & mask) >= bad) b &= ~(sign >> 1);  // clear the top exponent bit: finite
  return b;
}
std::uint64_t bad_bits(std::mt19937_64& rng, ns::dtype t) {
  const std::size_t es = ns::size_of(t);
  const std::uint64_t sign = 1ull << (8 * es - 1), bad = ns::detail::seg_bad_abs_bits(t);
  const bool has_inf = t != ns::dtype::f8_e4m3fn;
  const std::uint64_t m = has_inf && rng() % 2 == 0 ? bad : (t == ns::dtype::f8_e4m3fn ? bad : bad | 1u);
  return rng() % 2 == 0 ? m | sign : m;
}

/// A random segmentation of `extent` units into about k segments: empty and one-unit segments, boundaries at
/// tile edges (in elements: multiples of seg_tile / unit) and next to them.
std::vector<std::int64_t> random_offsets(std::mt19937_64& rng, std::uint64_t extent, std::uint64_t unit, int k) {
  std::vector<std::int64_t> o = {0, static_cast<std::int64_t>(extent)};
  for (int i = 0; i < k; ++i) {
    std::uint64_t x = 0;
    switch (rng() % 5) {
      case 0: {  // a tile edge, or one unit off it
        const std::uint64_t edge = (rng() % (extent * unit / nd::seg_tile + 1)) * nd::seg_tile / unit;
        x = edge + (rng() % 3) - 1;
        break;
      }
      case 1: x = o[static_cast<std::size_t>(rng() % o.size())]; break;      // an empty segment
      case 2: x = o[static_cast<std::size_t>(rng() % o.size())] + 1; break;  // a one-unit segment
      default: x = rng() % (extent + 1); break;
    }
    if (x <= extent) o.push_back(static_cast<std::int64_t>(x));
  }
  std::sort(o.begin(), o.end());
  return o;
}

struct case_data {
  std::vector<unsigned char> buf;
  ns::tensor_view view;
};

/// A contiguous (rows x cols) tensor of dtype t with random finite values and NaN/Inf at the first and last
/// element of some segments and at random places. begins: the segments' element begins (with the end).
case_data make_case(std::mt19937_64& rng, ns::dtype t, std::int64_t rows, std::int64_t cols,
                    const std::vector<std::uint64_t>& begins, int byte_offset = 0) {
  case_data c;
  const std::size_t es = ns::size_of(t), n = static_cast<std::size_t>(rows * cols);
  c.buf.assign(n * es + 16, 0);
  std::vector<unsigned char> vals(n * es);
  for (std::size_t i = 0; i < n; ++i) put_bits(vals, i, es, random_finite(rng, t));
  for (std::size_t s = 0; s + 1 < begins.size(); ++s) {
    if (begins[s] == begins[s + 1] || rng() % 3 != 0) continue;
    if (rng() % 2 == 0) put_bits(vals, static_cast<std::size_t>(begins[s]), es, bad_bits(rng, t));
    if (rng() % 2 == 0) put_bits(vals, static_cast<std::size_t>(begins[s + 1] - 1), es, bad_bits(rng, t));
  }
  for (int k = 0; k < 3 && n != 0; ++k) put_bits(vals, static_cast<std::size_t>(rng() % n), es, bad_bits(rng, t));
  std::memcpy(c.buf.data() + byte_offset, vals.data(), vals.size());
  c.view = ns::tensor_view::contiguous(c.buf.data() + byte_offset, t, {rows, cols}, "logits");
  return c;
}

std::vector<std::uint64_t> element_begins(const std::vector<std::int64_t>& o, std::uint64_t unit) {
  std::vector<std::uint64_t> b;
  for (std::int64_t x : o) b.push_back(static_cast<std::uint64_t>(x) * unit);
  return b;
}

}  // namespace

TEST_CASE("cuda segment kernel (emulated): random row and element segmentations, every dtype, as the host check") {
  std::mt19937_64 rng(32);
#if defined(NANSCOPE_TEST_QUICK)
  const int rounds = 2;
#else
  const int rounds = 6;
#endif
  for (ns::dtype t : all_float_types)
    for (int round = 0; round < rounds; ++round) {
      const std::int64_t cols = round % 3 == 0 ? 1 : static_cast<std::int64_t>(1 + rng() % 300);
      const std::int64_t rows = static_cast<std::int64_t>(1 + rng() % (40000 / cols + 1));
      const bool by_rows = round % 2 == 0;
      const std::uint64_t unit = by_rows ? static_cast<std::uint64_t>(cols) : 1;
      const std::uint64_t extent = by_rows ? static_cast<std::uint64_t>(rows) : static_cast<std::uint64_t>(rows * cols);
      const std::vector<std::int64_t> off = random_offsets(rng, extent, unit, 1 + static_cast<int>(rng() % 60));
      std::vector<std::int64_t> ids(off.size() - 1);
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = 1000 + static_cast<std::int64_t>(i) * 7;
      const std::vector<std::uint64_t> begins = element_begins(off, unit);
      const case_data c = make_case(rng, t, rows, cols, begins);
      nc::device_segments ds = by_rows ? nc::device_segments::rows(off.data(), off.size())
                                       : nc::device_segments::elements(off.data(), off.size());
      ds.with_ids(ids.data(), ids.size());
      INFO("dtype " << std::string(ns::name(t)) << ", round " << round << ", shape (" << rows << ", " << cols << "), "
                    << ds.offset_count - 1 << " segments by " << std::string(by_rows ? "rows" : "elements"));
      for (int variant = 0; variant < 4; ++variant) {  // flags + threshold, counts, counts + threshold, flags
        ns::segment_options so;
        if (variant == 1 || variant == 2) so.with_level(ns::segment_detail::counts);
        if (variant == 0 || variant == 2) so.with_threshold(variant == 0 ? 1.0 : 0.0);
        // full_health: the segment kernel's level-2 totals (one read) are check()'s, bit for bit
        const ns::check_mode fm = ns::check_mode::full_health;
        const ns::segmented_result full = device_check(c.view, ds, fm, so, 1 + static_cast<unsigned>(rng() % 9));
        const ns::segmented_result host_full = ns::check(c.view, host_segments(ds), ns::check_options{}.with_mode(fm), so);
        require_same_segments(full, host_full);
        nstest::expect_same_health(full.total, host_full.total, 0.0);
        const ns::segmented_result dev = device_check(c.view, ds, ns::check_mode::concise_health, so,
                                                      1 + static_cast<unsigned>(rng() % 9));
        const ns::segmented_result host =
            ns::check(c.view, host_segments(ds), ns::check_options{}.with_mode(ns::check_mode::concise_health), so);
        require_same_segments(dev, host);
        CHECK(dev.total.nan == host.total.nan);
        CHECK(dev.total.pos_inf == host.total.pos_inf);
        CHECK(dev.total.neg_inf == host.total.neg_inf);
        CHECK(dev.total.first_nonfinite == host.total.first_nonfinite);
        CHECK(dev.total.any_nonfinite == host.total.any_nonfinite);
        if (so.level == ns::segment_detail::counts)
          require_matches_naive(dev, naive(static_cast<const unsigned char*>(c.view.data), t, begins,
                                           [](std::uint64_t i) { return i; }));
      }
    }
}

TEST_CASE("cuda segment kernel (emulated): boundaries on every tile edge, one-element and empty segments") {
  std::mt19937_64 rng(7);
  for (ns::dtype t : all_float_types) {
    const std::int64_t n = static_cast<std::int64_t>(nd::seg_tile) * 5 + 37;
    std::vector<std::int64_t> off = {0};
    for (std::int64_t e = static_cast<std::int64_t>(nd::seg_tile); e < n; e += static_cast<std::int64_t>(nd::seg_tile)) {
      off.push_back(e - 1);
      off.push_back(e);
      off.push_back(e);  // empty
      off.push_back(e + 1);  // one element
    }
    off.push_back(n);
    const std::vector<std::uint64_t> begins = element_begins(off, 1);
    case_data c = make_case(rng, t, 1, n, begins);
    // NaN/Inf at both ends of every segment
    const std::size_t es = ns::size_of(t);
    for (std::size_t s = 0; s + 1 < begins.size(); ++s)
      if (begins[s] != begins[s + 1]) {
        put_bits(c.buf, static_cast<std::size_t>(begins[s]), es, bad_bits(rng, t));
        put_bits(c.buf, static_cast<std::size_t>(begins[s + 1] - 1), es, bad_bits(rng, t));
      }
    const nc::device_segments ds = nc::device_segments::elements(off.data(), off.size());
    INFO("dtype " << std::string(ns::name(t)));
    {  // this case must exercise the kernel's 16-byte-word paths: an aligned buffer, full tiles (fp8: elements)
      std::uint64_t extent = 0, unit = 1;
      const ns::segment_options so;
      const std::uint64_t nseg = nd::seg_host_validate(c.view, ds, so, extent, unit);
      const nd::seg_params p = nd::seg_make_params(c.view, ds, nseg, extent, unit, nullptr, so);
      REQUIRE(reinterpret_cast<std::uintptr_t>(c.view.data) % 16u == 0);
      CHECK(p.vec == 1);
      CHECK(nd::seg_words_tile(p, 0, nd::seg_tile) == (es >= 2));
      CHECK_FALSE(nd::seg_words_tile(p, 5 * nd::seg_tile, static_cast<std::uint64_t>(n)));  // the partial tile
    }
    for (unsigned grid : {1u, 2u, 6u, 100u}) {
      const ns::segment_options so = ns::segment_options{}.with_level(ns::segment_detail::counts).with_threshold(0.5);
      const ns::segmented_result dev = device_check(c.view, ds, ns::check_mode::curt_health, so, grid);
      const ns::segmented_result host =
          ns::check(c.view, host_segments(ds), ns::check_options{}.with_mode(ns::check_mode::curt_health), so);
      require_same_segments(dev, host);
      CHECK(dev.total.any_nonfinite == host.total.any_nonfinite);
      CHECK(dev.total.first_nonfinite == host.total.first_nonfinite);
      require_matches_naive(dev, naive(static_cast<const unsigned char*>(c.view.data), t, begins,
                                       [](std::uint64_t i) { return i; }));
    }
  }
}

TEST_CASE("cuda segment kernel (emulated): uniform segments (KV blocks), strided and misaligned views") {
  std::mt19937_64 rng(99);
  for (ns::dtype t : all_float_types) {
    INFO("dtype " << std::string(ns::name(t)));
    // KV style: 300 blocks of 16 rows of 8 elements, the last block short
    {
      const std::int64_t rows = 300 * 16 - 5, cols = 8;
      std::vector<std::uint64_t> begins;
      for (std::int64_t r = 0; r < rows; r += 16) begins.push_back(static_cast<std::uint64_t>(r * cols));
      begins.push_back(static_cast<std::uint64_t>(rows * cols));
      const case_data c = make_case(rng, t, rows, cols, begins);
      const nc::device_segments ds = nc::device_segments::every_rows(16);
      const ns::segment_options so = ns::segment_options{}.with_level(ns::segment_detail::counts);
      const ns::segmented_result dev = device_check(c.view, ds, ns::check_mode::concise_health, so);
      const ns::segmented_result host = ns::check(c.view, host_segments(ds), ns::check_options{}, so);
      require_same_segments(dev, host);
      require_matches_naive(dev, naive(static_cast<const unsigned char*>(c.view.data), t, begins,
                                       [](std::uint64_t i) { return i; }));
    }
    // a transposed view (rows of the view are columns in memory), and a buffer one byte off alignment
    {
      const std::int64_t mr = 700, mc = 30;  // memory (mr, mc); the view is (mc, mr) with strides (1, mc)
      const std::vector<std::int64_t> off = random_offsets(rng, static_cast<std::uint64_t>(mc), static_cast<std::uint64_t>(mr), 8);
      const std::vector<std::uint64_t> begins = element_begins(off, static_cast<std::uint64_t>(mr));
      case_data c = make_case(rng, t, mr, mc, {0, static_cast<std::uint64_t>(mr * mc)});
      ns::tensor_view tv = c.view;
      tv.shape[0] = mc;
      tv.shape[1] = mr;
      tv.strides[0] = 1;
      tv.strides[1] = mc;
      const nc::device_segments ds = nc::device_segments::rows(off.data(), off.size());
      const ns::segment_options so = ns::segment_options{}.with_level(ns::segment_detail::counts).with_threshold(2.0);
      const ns::segmented_result dev = device_check(tv, ds, ns::check_mode::concise_health, so);
      const ns::segmented_result host = ns::check(tv, host_segments(ds), ns::check_options{}, so);
      require_same_segments(dev, host);
      require_matches_naive(dev, naive(static_cast<const unsigned char*>(tv.data), t, begins, [&](std::uint64_t i) {
                              return (i % static_cast<std::uint64_t>(mr)) * static_cast<std::uint64_t>(mc) +
                                     i / static_cast<std::uint64_t>(mr);
                            }));
      if (ns::size_of(t) > 1) {
        const std::vector<std::int64_t> eo = random_offsets(rng, 5000, 1, 20);
        const case_data m = make_case(rng, t, 1, 5000, element_begins(eo, 1), 1);
        const nc::device_segments es = nc::device_segments::elements(eo.data(), eo.size());
        const ns::segmented_result d2 = device_check(m.view, es, ns::check_mode::concise_health, so);
        require_same_segments(d2, ns::check(m.view, host_segments(es), ns::check_options{}, so));
      }
    }
  }
}

TEST_CASE("cuda segment kernel (emulated): modes that read nothing, integer dtypes, full_health segments") {
  std::mt19937_64 rng(5);
  const std::vector<std::int64_t> off = {0, 3, 3, 10};
  const case_data c = make_case(rng, ns::dtype::f32, 10, 4, element_begins(off, 4));
  const nc::device_segments ds = nc::device_segments::rows(off.data(), off.size());
  const ns::segment_options so = ns::segment_options{}.with_level(ns::segment_detail::counts).with_threshold(1.0);
  for (ns::check_mode m : {ns::check_mode::shape, ns::check_mode::no_tensor}) {
    const ns::segmented_result dev = nc::finalize_segments(nullptr, nullptr, c.view, ds, m, so);
    require_same_segments(dev, ns::check(c.view, host_segments(ds), ns::check_options{}.with_mode(m), so));
  }
  // full_health: segments and totals from the segment kernel; stats: the segments (its totals come from the
  // health kernel on the device)
  for (ns::check_mode m : {ns::check_mode::full_health, ns::check_mode::stats}) {
    const ns::segmented_result dev = device_check(c.view, ds, m, so);
    const ns::segmented_result host = ns::check(c.view, host_segments(ds), ns::check_options{}.with_mode(m), so);
    require_same_segments(dev, host);
    if (m == ns::check_mode::full_health) nstest::expect_same_health(dev.total, host.total, 0.0);
  }
  std::vector<std::int32_t> ints(40, 7);
  const ns::tensor_view iv = ns::tensor_view::contiguous(ints.data(), ns::dtype::i32, {10, 4}, "ids");
  const ns::segmented_result dev = nc::finalize_segments(nullptr, nullptr, iv, ds, ns::check_mode::concise_health, so);
  require_same_segments(dev, ns::check(iv, host_segments(ds), ns::check_options{}, so));
}

TEST_CASE("cuda segment kernel (emulated): invalid device offsets are reported naming the tensor, never attributed") {
  std::mt19937_64 rng(11);
  const case_data c = make_case(rng, ns::dtype::bf16, 10, 4, {0, 40});
  const auto expect_error = [&](std::vector<std::int64_t> off, const char* what) {
    const nc::device_segments ds = nc::device_segments::rows(off.data(), off.size());
    const std::vector<nc::segment_record> rec = emulate_segment_kernel<1>(c.view, ds, {}, 3);
    INFO(what);
    try {
      (void)nc::finalize_segments(nullptr, rec.data(), c.view, ds, ns::check_mode::concise_health, {});
      FAIL("no error");
    } catch (const ns::error& e) {
      const std::string m = e.what();
      CHECK(m.find("logits") != std::string::npos);
      CHECK(m.find(what) != std::string::npos);
    }
  };
  expect_error({1, 5, 10}, "start at 0");
  expect_error({0, 6, 5, 10}, "not ascending");
  expect_error({0, 5, 12}, "past the tensor");
  expect_error({0, 5, 9}, "not the extent");
  // host-side checks need no device read
  std::vector<std::int64_t> off = {0, 5, 10};
  std::vector<std::int64_t> ids = {1, 2, 3};
  CHECK_THROWS_AS(nc::finalize_segments(nullptr, nullptr, c.view,
                                        nc::device_segments::rows(off.data(), off.size()).with_ids(ids.data(), 3),
                                        ns::check_mode::concise_health, {}),
                  ns::error);
  CHECK_THROWS_AS(nc::finalize_segments(nullptr, nullptr, c.view, nc::device_segments::every_rows(0),
                                        ns::check_mode::concise_health, {}),
                  ns::error);
}
