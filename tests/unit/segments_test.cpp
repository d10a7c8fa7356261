// nanscope tests — segments_test.cpp: segmented checks (segments.hpp) against a naive reference written here: each
// element of the logical sequence decoded from its bits and classified, one segment after another. Every dtype,
// every ISA, 1 and 4 threads, every mode, contiguous and strided views (gapped, transposed, broadcast), rows and
// elements, offsets and uniform segments, boundaries at vector (8/16/32), chunk (8192) and parallel-segment
// (2^17) edges, empty and one-element segments, NaN/Inf at a segment's first and last element; the totals
// bit-identical to check(); the bad-input errors.
#include "support/compare.hpp"
#include "support/errors.hpp"

#include <nanscope/segments.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace segments_test {

namespace ns = nanscope;
using ns::check_mode;
using ns::dtype;

// --- the reference ----------------------------------------------------------------------------------------------
struct fmt_bits {
  int bytes, ebits, mbits;
  bool has_inf;
};
fmt_bits bits_of(dtype t) {
  switch (t) {
    case dtype::f64: return {8, 11, 52, true};
    case dtype::f32: return {4, 8, 23, true};
    case dtype::f16: return {2, 5, 10, true};
    case dtype::bf16: return {2, 8, 7, true};
    case dtype::f8_e5m2: return {1, 5, 2, true};
    default: return {1, 4, 3, false};  // e4m3fn
  }
}
std::uint64_t raw_at(const std::vector<unsigned char>& b, std::size_t i, int bytes) {
  std::uint64_t v = 0;
  std::memcpy(&v, b.data() + i * static_cast<std::size_t>(bytes), static_cast<std::size_t>(bytes));
  return v;
}
enum class kind { finite, nan, pinf, ninf };
/// Classifies one element from its bits alone.
kind classify(std::uint64_t v, const fmt_bits& f) {
  const int w = f.bytes * 8;
  const std::uint64_t sign = (v >> (w - 1)) & 1u;
  const std::uint64_t mmask = (std::uint64_t{1} << f.mbits) - 1;
  const std::uint64_t emax = (std::uint64_t{1} << f.ebits) - 1;
  const std::uint64_t e = (v >> f.mbits) & emax, m = v & mmask;
  if (!f.has_inf) return (e == emax && m == mmask) ? kind::nan : kind::finite;
  if (e != emax) return kind::finite;
  if (m != 0) return kind::nan;
  return sign ? kind::ninf : kind::pinf;
}
/// |x| of a non-NaN element, exactly, through ldexp (no float arithmetic that flush-to-zero could touch).
double magnitude(std::uint64_t v, const fmt_bits& f) {
  const std::uint64_t mmask = (std::uint64_t{1} << f.mbits) - 1;
  const std::uint64_t emax = (std::uint64_t{1} << f.ebits) - 1;
  const std::uint64_t e = (v >> f.mbits) & emax, m = v & mmask;
  const int bias = static_cast<int>((std::uint64_t{1} << (f.ebits - 1)) - 1);
  if (f.has_inf && e == emax) return std::numeric_limits<double>::infinity();
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - bias - f.mbits);
  return std::ldexp(static_cast<double>(m | (std::uint64_t{1} << f.mbits)), static_cast<int>(e) - bias - f.mbits);
}
std::uint64_t dbits(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, 8);
  return b;
}
bool nan_bits(double x) { return (dbits(x) & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull; }

struct ref_segment {
  std::uint64_t begin = 0, end = 0, nan = 0, pinf = 0, ninf = 0;
  std::int64_t first = -1;
  bool any_non_nan = false;
  double amax = 0.0;
};
/// The naive loop: for each segment, each of its elements.
std::vector<ref_segment> reference(const std::vector<unsigned char>& logical, dtype t,
                                   const std::vector<std::uint64_t>& flat_bounds) {
  const fmt_bits f = bits_of(t);
  std::vector<ref_segment> out;
  for (std::size_t s = 0; s + 1 < flat_bounds.size(); ++s) {
    ref_segment r;
    r.begin = flat_bounds[s];
    r.end = flat_bounds[s + 1];
    for (std::uint64_t i = r.begin; i < r.end; ++i) {
      const std::uint64_t v = raw_at(logical, static_cast<std::size_t>(i), f.bytes);
      const kind k = classify(v, f);
      if (k != kind::finite && r.first < 0) r.first = static_cast<std::int64_t>(i);
      if (k == kind::nan) {
        ++r.nan;
        continue;
      }
      if (k == kind::pinf) ++r.pinf;
      if (k == kind::ninf) ++r.ninf;
      const double a = magnitude(v, f);
      if (!r.any_non_nan || dbits(a) > dbits(r.amax)) r.amax = a;
      r.any_non_nan = true;
    }
    out.push_back(r);
  }
  return out;
}

// --- data -------------------------------------------------------------------------------------------------------
const dtype float_types[] = {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::f8_e4m3fn, dtype::f8_e5m2};

/// A random finite element (random sign, exponent and mantissa; NaN/Inf patterns redrawn).
std::uint64_t random_finite(std::mt19937_64& g, dtype t) {
  const fmt_bits f = bits_of(t);
  const int w = f.bytes * 8;
  for (;;) {
    std::uint64_t v = g();
    if (w < 64) v &= (std::uint64_t{1} << w) - 1;
    if (t == dtype::f64 || t == dtype::f32) {  // keep magnitudes moderate most of the time (realistic data)
      if ((g() & 7u) != 0) {
        const double x = std::ldexp(static_cast<double>(g() % 2000001) - 1000000.0, -static_cast<int>(g() % 30));
        if (t == dtype::f64) return dbits(x);
        const float xf = static_cast<float>(x);
        std::uint32_t b;
        std::memcpy(&b, &xf, 4);
        return b;
      }
    }
    if (classify(v, f) == kind::finite) return v;
  }
}
std::uint64_t bad_value(dtype t, kind k) {
  switch (t) {
    case dtype::f64: return k == kind::nan ? 0x7FF8000000000001ull : k == kind::pinf ? 0x7FF0000000000000ull : 0xFFF0000000000000ull;
    case dtype::f32: return k == kind::nan ? 0xFFC00000u : k == kind::pinf ? 0x7F800000u : 0xFF800000u;
    case dtype::f16: return k == kind::nan ? 0x7E01u : k == kind::pinf ? 0x7C00u : 0xFC00u;
    case dtype::bf16: return k == kind::nan ? 0xFFC1u : k == kind::pinf ? 0x7F80u : 0xFF80u;
    case dtype::f8_e5m2: return k == kind::nan ? 0xFEu : k == kind::pinf ? 0x7Cu : 0xFCu;
    default: return k == kind::nan || (k == kind::pinf) ? 0x7Fu : 0xFFu;  // e4m3fn: only NaN
  }
}
/// A value of about `mag` (for the threshold), as the dtype's bits.
std::uint64_t value_bits(dtype t, double x) {
  switch (t) {
    case dtype::f64: return dbits(x);
    case dtype::f32: {
      const float xf = static_cast<float>(x);
      std::uint32_t b;
      std::memcpy(&b, &xf, 4);
      return b;
    }
    case dtype::f16: return ns::half::from_float(x).bits;
    case dtype::bf16: return ns::bfloat16::from_float(x).bits;
    case dtype::f8_e5m2: return ns::float8_e5m2::from_float(x).bits;
    default: return ns::float8_e4m3fn::from_float(x).bits;
  }
}

/// A view geometry over a memory buffer, and the logical sequence it reads.
struct tensor {
  dtype t = dtype::f32;
  std::vector<unsigned char> mem;
  std::vector<unsigned char> logical;
  std::vector<std::size_t> offsets;  // memory element of each logical index
  ns::tensor_view v;
};
/// shape/strides in elements; memory random, gaps poisoned with NaN; then `plant` (logical index -> bits).
/// `scale` > 0: the values are uniform in (-scale, scale) instead of random bit patterns.
tensor make_tensor(dtype t, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides, std::mt19937_64& g,
                   const std::vector<std::pair<std::size_t, std::uint64_t>>& plant, double scale = 0.0) {
  tensor x;
  x.t = t;
  const int es = bits_of(t).bytes;
  const int rank = static_cast<int>(shape.size());
  std::size_t n = 1, span = 1;
  for (int d = 0; d < rank; ++d) {
    n *= static_cast<std::size_t>(shape[d]);
    span += static_cast<std::size_t>((shape[d] - 1) * strides[d]);
  }
  x.mem.resize(span * static_cast<std::size_t>(es));
  const std::uint64_t poison = bad_value(t, kind::nan);
  for (std::size_t i = 0; i < span; ++i) std::memcpy(x.mem.data() + i * es, &poison, static_cast<std::size_t>(es));
  x.offsets.resize(n);
  std::vector<std::int64_t> idx(static_cast<std::size_t>(rank), 0);
  for (std::size_t i = 0; i < n; ++i) {
    std::int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += idx[static_cast<std::size_t>(d)] * strides[static_cast<std::size_t>(d)];
    x.offsets[i] = static_cast<std::size_t>(off);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < shape[static_cast<std::size_t>(d)]) break;
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
  std::vector<bool> written(span, false);
  for (std::size_t i = 0; i < n; ++i) {
    if (written[x.offsets[i]]) continue;
    written[x.offsets[i]] = true;
    const double u = static_cast<double>(g() >> 11) * 0x1.0p-53 * 2.0 - 1.0;
    const std::uint64_t v = scale > 0.0 ? value_bits(t, u * scale) : random_finite(g, t);
    std::memcpy(x.mem.data() + x.offsets[i] * es, &v, static_cast<std::size_t>(es));
  }
  for (const auto& p : plant)
    if (p.first < n) std::memcpy(x.mem.data() + x.offsets[p.first] * es, &p.second, static_cast<std::size_t>(es));
  x.logical.resize(n * static_cast<std::size_t>(es));
  for (std::size_t i = 0; i < n; ++i)
    std::memcpy(x.logical.data() + i * es, x.mem.data() + x.offsets[i] * es, static_cast<std::size_t>(es));
  x.v.data = x.mem.data();
  x.v.type = t;
  x.v.rank = rank;
  for (int d = 0; d < rank; ++d) {
    x.v.shape[d] = shape[static_cast<std::size_t>(d)];
    x.v.strides[d] = strides[static_cast<std::size_t>(d)];
  }
  x.v.name = "acts";
  return x;
}
std::vector<std::int64_t> dense_strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (std::size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * shape[d];
  return s;
}

// --- comparing ----------------------------------------------------------------------------------------------------
struct config {
  check_mode mode;
  ns::isa i;
  unsigned threads;
  ns::segment_detail detail;
  bool threshold;
};

/// One segmented check against the reference and against check() without segments.
ns::segmented_result expect_segments(const tensor& x, const ns::segments& segs, const std::vector<std::uint64_t>& bounds,
                                     const config& c, double thr) {
  const auto opt = ns::check_options{}.with_mode(c.mode).with_isa(c.i).with_threads(c.threads).with_parallel_threshold(0);
  auto so = ns::segment_options{}.with_level(c.detail);
  if (c.threshold) so.with_threshold(thr);
  const ns::segmented_result r = ns::check(x.v, segs, opt, so);
  const ns::health_result plain = ns::check(x.v, opt);
  INFO("dtype " << std::string(ns::name(x.t)) << " mode " << std::string(ns::name(c.mode)) << " isa "
                << std::string(ns::name(c.i)) << " threads " << c.threads << " level " << std::string(ns::name(c.detail))
                << " threshold " << c.threshold);
  CHECK(nstest::first_difference(r.total, plain) == "");
  CHECK(r.total.hash == plain.hash);
  const std::size_t nseg = bounds.size() - 1;
  REQUIRE(r.count == nseg);
  const bool reads = plain.reads_data() && ns::is_float(x.t) && plain.count != 0;
  const std::vector<ref_segment> ref = reads ? reference(x.logical, x.t, bounds) : std::vector<ref_segment>(nseg);
  std::size_t nbad = 0;
  for (std::size_t s = 0; s < nseg; ++s) {
    INFO("segment " << s << " [" << bounds[s] << ", " << bounds[s + 1] << ")");
    const ref_segment& e = ref[s];
    const bool bad = e.nan + e.pinf + e.ninf != 0;
    CHECK(r.has_nonfinite(s) == bad);
    const bool over = c.threshold && reads && e.any_non_nan && dbits(e.amax) > dbits(thr);
    CHECK(r.over_threshold(s) == over);
    if (bad) {
      REQUIRE(nbad < r.bad.size());
      const ns::segment_health& h = r.bad[nbad++];
      CHECK(h.index == s);
      CHECK(h.begin == bounds[s]);
      CHECK(h.end == bounds[s + 1]);
      CHECK(h.nan == e.nan);
      CHECK(h.pos_inf == e.pinf);
      CHECK(h.neg_inf == e.ninf);
      CHECK(h.first_nonfinite == e.first);
      CHECK(h.over_threshold == over);
      if (c.detail == ns::segment_detail::counts && e.any_non_nan) CHECK(dbits(h.abs_max) == dbits(e.amax));
      else CHECK(nan_bits(h.abs_max));
    }
    if (c.detail == ns::segment_detail::counts) {
      REQUIRE(r.per_segment.size() == nseg);
      const ns::segment_counts& p = r.per_segment[s];
      CHECK(p.nan == e.nan);
      CHECK(p.pos_inf == e.pinf);
      CHECK(p.neg_inf == e.ninf);
      CHECK(p.first_nonfinite == e.first);
      if (reads && e.any_non_nan) CHECK(dbits(p.abs_max) == dbits(e.amax));
      else CHECK(nan_bits(p.abs_max));
    } else {
      CHECK(r.per_segment.empty());
    }
  }
  CHECK(nbad == r.bad.size());
  return r;
}

/// Every field of two segmented results is the same (1 vs 4 threads).
void expect_identical(const ns::segmented_result& a, const ns::segmented_result& b) {
  CHECK(nstest::first_difference(a.total, b.total) == "");
  CHECK(a.nonfinite_mask == b.nonfinite_mask);
  CHECK(a.over_mask == b.over_mask);
  REQUIRE(a.bad.size() == b.bad.size());
  for (std::size_t i = 0; i < a.bad.size(); ++i) {
    CHECK(a.bad[i].index == b.bad[i].index);
    CHECK(a.bad[i].first_nonfinite == b.bad[i].first_nonfinite);
    CHECK(a.bad[i].nan == b.bad[i].nan);
    CHECK(dbits(a.bad[i].abs_max) == dbits(b.bad[i].abs_max));
  }
  REQUIRE(a.per_segment.size() == b.per_segment.size());
  for (std::size_t i = 0; i < a.per_segment.size(); ++i) {
    CHECK(a.per_segment[i].nan == b.per_segment[i].nan);
    CHECK(a.per_segment[i].first_nonfinite == b.per_segment[i].first_nonfinite);
    CHECK(dbits(a.per_segment[i].abs_max) == dbits(b.per_segment[i].abs_max));
  }
}

std::vector<std::uint64_t> to_u64(const std::vector<std::int64_t>& v, std::uint64_t unit) {
  std::vector<std::uint64_t> out;
  for (std::int64_t x : v) out.push_back(static_cast<std::uint64_t>(x) * unit);
  return out;
}

/// Sorted unique offsets in [0, n], with 0 and n, from a list of candidate boundaries.
std::vector<std::int64_t> make_offsets(std::vector<std::int64_t> cand, std::int64_t n, std::mt19937_64& g,
                                       int empties) {
  cand.push_back(0);
  cand.push_back(n);
  std::vector<std::int64_t> out;
  for (std::int64_t c : cand)
    if (c >= 0 && c <= n) out.push_back(c);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  for (int k = 0; k < empties; ++k) {  // duplicate some offsets: empty segments (0 and n included)
    const std::size_t at = static_cast<std::size_t>(g() % out.size());
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), out[at]);
  }
  return out;
}

const config all_configs[] = {
    {check_mode::stats, ns::isa::automatic, 1, ns::segment_detail::counts, true},
    {check_mode::stats, ns::isa::automatic, 4, ns::segment_detail::flags, false},
    {check_mode::full_health, ns::isa::automatic, 1, ns::segment_detail::flags, true},
    {check_mode::concise_health, ns::isa::automatic, 4, ns::segment_detail::counts, false},
    {check_mode::curt_health, ns::isa::automatic, 1, ns::segment_detail::counts, true},
};


TEST_CASE("segments: boundaries at vector, chunk and parallel-segment edges, every dtype, ISA and mode") {
#if defined(NANSCOPE_TEST_QUICK)
  const std::int64_t n = (std::int64_t{1} << 17) * 2 + 8192 + 77;
#else
  const std::int64_t n = (std::int64_t{1} << 17) * 3 + 8192 * 2 + 77;
#endif
  std::mt19937_64 g(1234);
  std::vector<std::int64_t> cand;
  for (std::int64_t e : {std::int64_t{8}, std::int64_t{16}, std::int64_t{32}, std::int64_t{8192}, std::int64_t{1} << 17})
    for (std::int64_t k = e; k < n; k += e * (e < 8192 ? 997 : 1))  // every chunk/parallel edge, some vector edges
      for (std::int64_t d : {std::int64_t{-1}, std::int64_t{0}, std::int64_t{1}}) cand.push_back(k + d);
  for (int k = 0; k < 200; ++k) cand.push_back(static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n)));
  for (std::int64_t k = 500; k < 540; ++k) cand.push_back(k);  // a run of one-element segments
  const std::vector<std::int64_t> offs = make_offsets(cand, n, g, 12);
  const std::vector<std::uint64_t> bounds = to_u64(offs, 1);
  std::vector<std::int64_t> ids;
  for (std::size_t s = 0; s + 1 < offs.size(); ++s) ids.push_back(1000 + static_cast<std::int64_t>(s) * 3);

  for (const dtype t : float_types) {
    // NaN/Inf at the first and the last element of some segments, clean segments between them, one over the
    // threshold
    std::vector<std::pair<std::size_t, std::uint64_t>> plant;
    for (std::size_t s = 0; s + 1 < bounds.size(); s += 7) {
      if (bounds[s] == bounds[s + 1]) continue;
      const kind k = s % 3 == 0 ? kind::nan : s % 3 == 1 ? kind::pinf : kind::ninf;
      plant.push_back({static_cast<std::size_t>(bounds[s]), bad_value(t, k)});
      if (s % 2 == 0) plant.push_back({static_cast<std::size_t>(bounds[s + 1] - 1), bad_value(t, kind::nan)});
    }
    for (std::size_t s = 3; s + 1 < bounds.size(); s += 11)
      if (bounds[s] != bounds[s + 1]) plant.push_back({static_cast<std::size_t>(bounds[s + 1] - 1), value_bits(t, 300.0)});
    const tensor x = make_tensor(t, {n}, {1}, g, plant);
    const double thr = t == dtype::f8_e4m3fn ? 256.0 : t == dtype::f8_e5m2 ? 30000.0 : 200.0;
    const ns::segments segs = ns::segments::elements(offs).with_ids(ids);
    for (const config& c : all_configs) {
      const ns::segmented_result r = expect_segments(x, segs, bounds, c, thr);
      CHECK(r.bad.size() > 3);
      for (const ns::segment_health& h : r.bad) CHECK(h.id == 1000 + static_cast<std::int64_t>(h.index) * 3);
    }
    for (const ns::isa i : nstest::all_isas) {
      const config c1{check_mode::stats, i, 1, ns::segment_detail::counts, true};
      const config c4{check_mode::stats, i, 4, ns::segment_detail::counts, true};
      expect_identical(expect_segments(x, segs, bounds, c1, thr), expect_segments(x, segs, bounds, c4, thr));
      const config f1{check_mode::concise_health, i, 1, ns::segment_detail::flags, false};
      const config f4{check_mode::concise_health, i, 4, ns::segment_detail::flags, false};
      expect_identical(expect_segments(x, segs, bounds, f1, thr), expect_segments(x, segs, bounds, f4, thr));
    }
  }
}

TEST_CASE("segments: a threshold over moderate data: chunks with nothing over it are skipped, the flags stay exact") {
  std::mt19937_64 g(5);
  const std::int64_t n = (std::int64_t{1} << 17) + 8192 * 5 + 999;
  std::vector<std::int64_t> cand;
  for (int k = 0; k < 300; ++k) cand.push_back(static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n)));
  for (std::int64_t k = 8192; k < n; k += 8192) cand.push_back(k);
  const std::vector<std::int64_t> offs = make_offsets(cand, n, g, 5);
  const std::vector<std::uint64_t> bounds = to_u64(offs, 1);
  for (const dtype t : float_types) {
    const double thr = t == dtype::f8_e4m3fn ? 200.0 : 1000.0;
    std::vector<std::pair<std::size_t, std::uint64_t>> plant;
    for (std::size_t s = 2; s + 1 < bounds.size(); s += 13) {
      if (bounds[s] == bounds[s + 1]) continue;
      plant.push_back({static_cast<std::size_t>(s % 2 ? bounds[s] : bounds[s + 1] - 1), value_bits(t, s % 4 < 2 ? -400.0 : 4096.0)});
    }
    plant.push_back({static_cast<std::size_t>(bounds[5]), bad_value(t, kind::nan)});
    plant.push_back({static_cast<std::size_t>(n - 1), value_bits(t, thr)});  // equal: not over
    const tensor x = make_tensor(t, {n}, {1}, g, plant, 2.0);
    for (const check_mode m : {check_mode::stats, check_mode::full_health, check_mode::concise_health})
      for (const ns::isa i : nstest::all_isas)
        for (const unsigned th : {1u, 4u}) {
          const ns::segmented_result r = expect_segments(x, ns::segments::elements(offs), bounds,
                                                         config{m, i, th, ns::segment_detail::flags, true}, thr);
          CHECK(!r.over_indices().empty());
          expect_segments(x, ns::segments::elements(offs), bounds, config{m, i, th, ns::segment_detail::counts, true}, thr);
        }
  }
}

TEST_CASE("segments: small tensors, one-element segments, every vector edge, random segmentations") {
  std::mt19937_64 g(99);
  for (const dtype t : float_types) {
    for (int trial = 0; trial < 6; ++trial) {
      const std::int64_t n = 1 + static_cast<std::int64_t>(g() % 3000);
      std::vector<std::int64_t> cand;
      if (trial == 0)
        for (std::int64_t k = 1; k < n; ++k) cand.push_back(k);  // every element its own segment
      else if (trial == 1)
        for (std::int64_t k = 8; k < n; k += 8) cand.push_back(k);
      else if (trial == 2)
        for (std::int64_t k = 32; k < n; k += 32) cand.push_back(k - (k / 32) % 2);
      else
        for (int k = 0; k < trial * 10; ++k) cand.push_back(static_cast<std::int64_t>(g() % static_cast<std::uint64_t>(n)));
      const std::vector<std::int64_t> offs = make_offsets(cand, n, g, trial);
      std::vector<std::pair<std::size_t, std::uint64_t>> plant;
      for (int k = 0; k < 1 + trial * 3; ++k)
        plant.push_back({static_cast<std::size_t>(g() % static_cast<std::uint64_t>(n)), bad_value(t, static_cast<kind>(1 + k % 3))});
      const tensor x = make_tensor(t, {n}, {1}, g, plant);
      for (const config& c : all_configs) expect_segments(x, ns::segments::elements(offs), to_u64(offs, 1), c, 100.0);
      for (const ns::isa i : nstest::all_isas)
        expect_segments(x, ns::segments::elements(offs), to_u64(offs, 1),
                        config{check_mode::full_health, i, 1, ns::segment_detail::counts, true}, 100.0);
    }
  }
}

TEST_CASE("segments: rows of strided views (gapped, transposed, broadcast) and uniform segments") {
  std::mt19937_64 g(7);
  const std::int64_t R = 300, C = 530;  // 159000 elements: more than one parallel segment
  for (const dtype t : float_types) {
    std::vector<std::pair<std::size_t, std::uint64_t>> plant = {
        {0, bad_value(t, kind::nan)}, {static_cast<std::size_t>(5 * C + 3), bad_value(t, kind::pinf)},
        {static_cast<std::size_t>(17 * C - 1), bad_value(t, kind::ninf)},
        {static_cast<std::size_t>(250 * C + 100), bad_value(t, kind::nan)},
        {static_cast<std::size_t>(R * C - 1), bad_value(t, kind::nan)}};
    std::vector<std::int64_t> rows = {0, 5, 6, 6, 17, 40, 100, 101, 250, 299, 300};
    struct geometry {
      const char* label;
      std::vector<std::int64_t> shape, strides;
    };
    const geometry geoms[] = {
        {"contiguous", {R, C}, {C, 1}},
        {"gapped rows", {R, C}, {C + 5, 1}},
        {"transposed", {R, C}, {1, R}},
        {"strided columns", {R, C}, {2 * C, 2}},
        {"broadcast rows", {R, C}, {0, 1}},
        {"3-d", {R, 10, 53}, {530, 53, 1}},
    };
    for (const geometry& geo : geoms) {
      INFO(geo.label);
      const tensor x = make_tensor(t, geo.shape, geo.strides, g, plant);
      const ns::segments segs = ns::segments::rows(rows);
      for (const config& c : all_configs) expect_segments(x, segs, to_u64(rows, C), c, 50.0);
      // uniform: blocks of 16 rows, the last one shorter (300 = 18 * 16 + 12)
      std::vector<std::int64_t> blocks;
      for (std::int64_t b = 0; b < R; b += 16) blocks.push_back(b);
      blocks.push_back(R);
      std::vector<std::int64_t> block_ids;
      for (std::size_t b = 0; b + 1 < blocks.size(); ++b) block_ids.push_back(static_cast<std::int64_t>(b) * 10);
      const ns::segments kv = ns::segments::every_rows(16).with_ids(block_ids);
      for (const config& c : all_configs) {
        const ns::segmented_result r = expect_segments(x, kv, to_u64(blocks, C), c, 50.0);
        for (const ns::segment_health& h : r.bad) {
          CHECK(h.id == static_cast<std::int64_t>(h.index) * 10);
          CHECK(r.row_of(h.first_nonfinite) / 16 == static_cast<std::int64_t>(h.index));
        }
      }
      std::vector<std::int64_t> eb;
      for (std::int64_t e = 0; e < R * C; e += 1000) eb.push_back(e);
      eb.push_back(R * C);
      expect_segments(x, ns::segments::every_elements(1000), to_u64(eb, 1), all_configs[0], 50.0);
    }
  }
}

TEST_CASE("segments: with the content hash, the totals (hash included) are check()'s in every mode and layout") {
  std::mt19937_64 g(11);
  const std::int64_t R = 260, C = 600;
  std::vector<std::int64_t> rows = {0, 1, 9, 9, 130, 259, 260};
  for (const dtype t : {dtype::f32, dtype::bf16}) {
    const tensor dense = make_tensor(t, {R, C}, {C, 1}, g, {{0, bad_value(t, kind::nan)}, {70000, bad_value(t, kind::pinf)}});
    const tensor transposed = make_tensor(t, {R, C}, {1, R}, g, {{5, bad_value(t, kind::nan)}});
    for (const tensor* x : {&dense, &transposed})
      for (const check_mode m : {check_mode::curt_health, check_mode::concise_health, check_mode::full_health, check_mode::stats})
        for (const unsigned th : {1u, 4u}) {
          const auto opt = ns::check_options{}.with_mode(m).with_threads(th).with_parallel_threshold(0).with_hash();
          const ns::segmented_result r = ns::check(x->v, ns::segments::rows(rows), opt);
          const ns::health_result plain = ns::check(x->v, opt);
          CHECK(nstest::first_difference(r.total, plain) == "");
          CHECK(r.total.hash.valid);
          CHECK(r.total.hash == plain.hash);
          CHECK(r.has_nonfinite(0));  // both tensors hold a NaN in row 0
        }
  }
}

TEST_CASE("segments: what a serving engine sees: the poisoned requests, their first bad row") {
  const std::int64_t vocab = 64;
  std::vector<std::int64_t> cu = {0, 3, 3, 10, 11, 20};  // 5 requests (one with no token this step)
  std::vector<std::int64_t> req = {17, 4, 9, 23, 42};
  std::vector<float> logits(static_cast<std::size_t>(20 * vocab), 0.25f);
  logits[static_cast<std::size_t>(7 * vocab + 5)] = std::numeric_limits<float>::infinity();   // request 9, row 7
  logits[static_cast<std::size_t>(8 * vocab + 1)] = std::numeric_limits<float>::quiet_NaN();  // request 9, row 8
  logits[static_cast<std::size_t>(19 * vocab + 63)] = std::numeric_limits<float>::quiet_NaN();  // request 42, last
  logits[static_cast<std::size_t>(10 * vocab)] = 70000.0f;  // request 23: over the f16 limit
  const ns::tensor_view v = ns::view_of(logits.data(), {20, vocab}, "logits");
  const ns::segmented_result r =
      ns::check(v, ns::segments::rows(cu).with_ids(req), {}, ns::segment_options{}.with_threshold(65504.0));
  REQUIRE(r.bad.size() == 2);
  CHECK(r.bad[0].id == 9);
  CHECK(r.row_of(r.bad[0].first_nonfinite) == 7);
  CHECK(r.bad[0].pos_inf == 1);
  CHECK(r.bad[0].nan == 1);
  CHECK(r.bad[1].id == 42);
  CHECK(r.row_of(r.bad[1].first_nonfinite) == 19);
  CHECK(r.over_indices() == std::vector<std::size_t>{2, 3});  // request 9 holds an Inf; request 23 holds 70000
  CHECK(r.total.nan == 2);
  CHECK(r.total.first_nonfinite == 7 * vocab + 5);
}

TEST_CASE("segments: no data read: integer dtypes, empty tensors, modes that read nothing") {
  std::vector<std::int32_t> ints(100, 7);
  std::vector<std::int64_t> offs = {0, 50, 100};
  const ns::segmented_result a =
      ns::check(ns::view_of(ints.data(), 100, "ints"), ns::segments::elements(offs), {},
                ns::segment_options{}.with_level(ns::segment_detail::counts).with_threshold(1.0));
  CHECK(a.count == 2);
  CHECK(a.bad.empty());
  CHECK(a.over_indices().empty());
  CHECK(nan_bits(a.per_segment[0].abs_max));
  std::vector<float> f(100, std::numeric_limits<float>::quiet_NaN());
  for (check_mode m : {check_mode::no_tensor, check_mode::shape}) {
    const ns::segmented_result b = ns::check(ns::view_of(f.data(), 100, "f"), ns::segments::elements(offs),
                                             ns::check_options{}.with_mode(m));
    CHECK(b.bad.empty());
    CHECK(nstest::first_difference(b.total, ns::check(ns::view_of(f.data(), 100, "f"), ns::check_options{}.with_mode(m))) == "");
  }
  std::vector<std::int64_t> zero = {0, 0, 0};
  const ns::segmented_result e = ns::check(ns::view_of(f.data(), {0, 4}, "empty"), ns::segments::rows(zero));
  CHECK(e.count == 2);
  CHECK(e.bad.empty());
  CHECK(e.total.count == 0);
}

TEST_CASE("segments: bad input names the tensor and the problem") {
  std::vector<float> x(40, 1.0f);
  const ns::tensor_view v = ns::view_of(x.data(), {10, 4}, "logits");
  auto err = [&](const ns::segments& s, ns::segment_options so = {}) {
    return nstest::error_of([&] { (void)ns::check(v, s, {}, so); });
  };
  std::vector<std::int64_t> desc = {0, 5, 3, 10}, past = {0, 5, 12}, short_end = {0, 5, 8}, late = {2, 5, 10},
                            ok = {0, 5, 10}, elems = {0, 20, 40}, none, ids3 = {1, 2, 3};
  CHECK(err(ns::segments::rows(desc)) ==
        "nanscope: tensor 'logits': segments: offsets are not ascending: offsets[2] = 3 < offsets[1] = 5");
  CHECK(err(ns::segments::rows(past)) == "nanscope: tensor 'logits': segments: offsets[2] = 12 is past the tensor: it "
                                         "has 10 rows (shape (10, 4), rows are the first dimension)");
  CHECK(err(ns::segments::rows(short_end)) ==
        "nanscope: tensor 'logits': segments: offsets end at 8 but the tensor has 10 rows (shape (10, 4), rows are "
        "the first dimension): every element must belong to a segment");
  CHECK(err(ns::segments::rows(late)) == "nanscope: tensor 'logits': segments: offsets must start at 0, offsets[0] = 2");
  CHECK(err(ns::segments::rows(elems)) == "nanscope: tensor 'logits': segments: offsets[1] = 20 is past the tensor: it "
                                          "has 10 rows (shape (10, 4), rows are the first dimension)");
  CHECK(err(ns::segments::elements(ok)) ==
        "nanscope: tensor 'logits': segments: offsets end at 10 but the tensor has 40 elements (shape (10, 4)): every "
        "element must belong to a segment");
  CHECK(err(ns::segments::rows(none)).find("segments: no offsets") != std::string::npos);
  CHECK(err(ns::segments::rows(ok).with_ids(ids3)) == "nanscope: tensor 'logits': segments: 3 ids for 2 segments");
  CHECK(err(ns::segments::every_rows(3).with_ids(ids3)) == "nanscope: tensor 'logits': segments: 3 ids for 4 segments");
  CHECK(err(ns::segments::every_rows(0)).find("no uniform segment size") != std::string::npos);
  CHECK(err(ns::segments::rows(ok), ns::segment_options{}.with_threshold(-1.0)).find("threshold must be >= 0") !=
        std::string::npos);
  CHECK(err(ns::segments::rows(ok), ns::segment_options{}.with_threshold(std::numeric_limits<double>::quiet_NaN()))
            .find("threshold must be >= 0") != std::string::npos);
  CHECK(err(ns::segments::rows(ok).with_ids(nullptr, 2)) == "nanscope: tensor 'logits': segments: 2 ids given with a null pointer");
  float scalar = 1.0f;
  CHECK(nstest::error_of([&] { (void)ns::check(ns::view_of(&scalar, {}, "s"), ns::segments::rows(ok)); }) ==
        "nanscope: tensor 's': segments: row segments need a view of rank >= 1, got a scalar");
  // a transposed tensor (vocab first) with the requests' row offsets: refused, not attributed to the wrong rows
  std::vector<std::int64_t> cu = {0, 2, 4};
  CHECK(nstest::error_of([&] { (void)ns::check(ns::view_of(x.data(), {10, 4}, "logits_t"), ns::segments::rows(cu)); })
            .find("offsets end at 4 but the tensor has 10 rows") != std::string::npos);
  CHECK(err(ns::segments::rows(ok)) == "(no nanscope::error)");
}

}  // namespace segments_test
