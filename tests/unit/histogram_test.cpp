// nanscope tests — histogram_test.cpp: check_histogram() against a naive per-element reference, and the
// margins it derives against nanscope::margins() (itself checked against a reference cast in margins_test).
//
// The reference decodes every element with the test suite's own decoders (support/reference.hpp: std::ldexp
// on the bit fields), then classifies the double by its bits (-ffast-math proof): NaN, inf, zero, subnormal
// (below the source dtype's min normal, written out here), else its binary exponent from the double's
// exponent field. Sources: every f16 / bf16 / fp8 bit pattern, f32 / f64 values at and next to every margin
// threshold plus random bit patterns, at many sizes and byte offsets, on every ISA and 1/2/4 threads.
#include "support/reference.hpp"

#include <nanscope/check.hpp>
#include <nanscope/histogram.hpp>
#include <nanscope/margins.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using nanscope::check_mode;
using nanscope::dtype;
using nanscope::isa;
using namespace nstest;

// Source formats, written out here: element size and the smallest normal exponent.
std::size_t elem_size(dtype t) {
  switch (t) {
    case dtype::f64: return 8;
    case dtype::f32: return 4;
    case dtype::f16:
    case dtype::bf16: return 2;
    default: return 1;
  }
}
/// Explicit mantissa bits of the fused kernels' sources (f32, f16, bf16).
unsigned mant_bits(dtype t) { return t == dtype::f32 ? 23u : t == dtype::f16 ? 10u : 7u; }
int min_normal_exponent(dtype t) {
  switch (t) {
    case dtype::f64: return -1022;
    case dtype::f32:
    case dtype::bf16: return -126;
    case dtype::f16:
    case dtype::f8_e5m2: return -14;
    default: return -6;  // e4m3fn
  }
}

double ref_decode(dtype t, std::uint64_t raw) {
  switch (t) {
    case dtype::f64: return f64_from_bits(raw);
    case dtype::f32: {
      // from the bit fields (a float-to-double conversion would flush f32 subnormals under -ffast-math)
      const auto b = static_cast<std::uint32_t>(raw);
      const bool neg = (b >> 31) != 0;
      const int e = static_cast<int>((b >> 23) & 0xFFu);
      const auto m = static_cast<double>(b & 0x7FFFFFu);
      if (e == 0xFF) return (b & 0x7FFFFFu) == 0 ? inf_with_sign(neg) : nan_with_sign(neg);
      return with_sign(e == 0 ? std::ldexp(m, -149) : std::ldexp(8388608.0 + m, e - 150), neg);
    }
    case dtype::f16: return ref_decode_f16(static_cast<std::uint16_t>(raw));
    case dtype::bf16: return ref_decode_bf16(static_cast<std::uint16_t>(raw));
    case dtype::f8_e4m3fn: return ref_decode_e4m3fn(static_cast<std::uint8_t>(raw));
    default: return ref_decode_e5m2(static_cast<std::uint8_t>(raw));
  }
}

struct ref_hist {
  std::uint64_t zero = 0, sub = 0, inf = 0, nan = 0;
  std::vector<std::uint64_t> normal = std::vector<std::uint64_t>(2046, 0);  // index e + 1022
};

ref_hist hist_reference(dtype t, const std::vector<std::uint64_t>& raws) {
  ref_hist h;
  const std::uint64_t min_normal_bits = bits64(std::ldexp(1.0, min_normal_exponent(t)));
  for (std::uint64_t r : raws) {
    const std::uint64_t a = bits64(ref_decode(t, r)) & k_abs64;
    if (a > k_inf64) ++h.nan;
    else if (a == k_inf64) ++h.inf;
    else if (a == 0) ++h.zero;
    else if (a < min_normal_bits) ++h.sub;
    else ++h.normal[static_cast<std::size_t>(static_cast<int>(a >> 52) - 1023 + 1022)];
  }
  return h;
}

/// The raw patterns laid out in a byte buffer at byte offset `off` (any alignment).
struct raw_buffer {
  std::vector<unsigned char> bytes;
  const void* data = nullptr;
  raw_buffer(dtype t, const std::vector<std::uint64_t>& raws, std::size_t off) {
    const std::size_t es = elem_size(t);
    bytes.assign(off + raws.size() * es + 1, 0);
    for (std::size_t i = 0; i < raws.size(); ++i) std::memcpy(bytes.data() + off + i * es, &raws[i], es);  // little endian
    data = bytes.data() + off;
  }
};

void expect_same_margins(const nanscope::margins_result& a, const nanscope::margins_result& b, const std::string& what) {
  INFO(what);
  CHECK(a.type == b.type);
  CHECK(a.count == b.count);
  CHECK(a.zero == b.zero);
  CHECK(a.inf == b.inf);
  CHECK(a.nan == b.nan);
  CHECK(bits64(a.abs_max) == bits64(b.abs_max));
  CHECK(a.rank == b.rank);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("target " << std::string(nanscope::name(a.formats[i].target)));
    CHECK(a.formats[i].target == b.formats[i].target);
    CHECK(a.formats[i].overflow == b.formats[i].overflow);
    CHECK(a.formats[i].subnormal == b.formats[i].subnormal);
    CHECK(a.formats[i].underflow_to_zero == b.formats[i].underflow_to_zero);
    CHECK(bits64(a.formats[i].headroom_bits) == bits64(b.formats[i].headroom_bits));
  }
}

/// check_histogram on the patterns against the reference, margins() and plain check(), on one ISA /
/// thread count / byte offset / mode.
void check_one(dtype t, const std::vector<std::uint64_t>& raws, isa i, unsigned threads, std::size_t off,
               check_mode mode, const ref_hist& ref, const std::string& what) {
  INFO(what << " isa=" << std::string(nanscope::name(i)) << " threads=" << threads << " offset=" << off
            << " mode=" << std::string(nanscope::name(mode)) << " n=" << raws.size());
  const raw_buffer buf(t, raws, off);
  const auto n = static_cast<std::int64_t>(raws.size());
  const nanscope::tensor_view v = nanscope::tensor_view::flat(buf.data, t, n);
  const auto opt = nanscope::check_options{}.with_mode(mode).with_isa(i).with_threads(threads).with_parallel_threshold(0);
  const nanscope::histogram_result r = nanscope::check_histogram(v, opt);
  const nanscope::exponent_histogram& h = r.histogram;
  CHECK(h.type == t);
  CHECK(h.count == raws.size());
  CHECK(h.zero == ref.zero);
  CHECK(h.subnormal == ref.sub);
  CHECK(h.inf == ref.inf);
  CHECK(h.nan == ref.nan);
  CHECK(h.total() == raws.size());
  bool bins_equal = true;
  for (int e = -1022; e <= 1023; ++e) {
    if (h.at(e) != ref.normal[static_cast<std::size_t>(e + 1022)]) {
      bins_equal = false;
      INFO("exponent " << e);
      CHECK(h.at(e) == ref.normal[static_cast<std::size_t>(e + 1022)]);
    }
    if ((e < h.min_exponent() || e > h.max_exponent()) && h.at(e) != 0) bins_equal = false;
  }
  CHECK(bins_equal);
  // The health fields are those of a plain check().
  const nanscope::health_result plain = (nanscope::check)(v, opt);
  CHECK(r.health.nan == plain.nan);
  CHECK(r.health.zero == plain.zero);
  CHECK(r.health.subnormal == plain.subnormal);
  CHECK(bits64(r.health.abs_max) == bits64(plain.abs_max));
  CHECK(r.health.subnormal == h.subnormal);
  CHECK(r.health.zero == h.zero);
  // Margins from the histogram are those of the second pass, and so are check_margins' (no bins).
  const nanscope::margins_result second = nanscope::margins(v, nanscope::margins_options{}.with_isa(i));
  expect_same_margins(r.margins(), second, what);
  const auto fused = nanscope::check_margins(v, opt);
  expect_same_margins(fused.second, second, what + " (check_margins)");
  CHECK(fused.first.zero == plain.zero);
  CHECK(bits64(fused.first.abs_max) == bits64(plain.abs_max));
}

void check_all(dtype t, const std::vector<std::uint64_t>& raws, const std::string& what, bool all_offsets = true) {
  const ref_hist ref = hist_reference(t, raws);
  for (isa i : {isa::scalar, isa::avx2, isa::avx512, isa::automatic})
    for (unsigned threads : {1u, 2u, 4u})
      for (std::size_t off : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
        if (!all_offsets && off != 0) continue;
        check_one(t, raws, i, threads, off, threads == 2 ? check_mode::full_health : check_mode::stats, ref, what);
      }
}

/// Every bit pattern of a narrow dtype, tiled (shuffled) past two segments so that threads share the work.
std::vector<std::uint64_t> every_pattern(dtype t, std::size_t copies) {
  const std::uint64_t np = std::uint64_t{1} << (8 * elem_size(t));
  std::vector<std::uint64_t> out;
  std::mt19937_64 rng(42);
  for (std::size_t c = 0; c < copies; ++c) {
    std::vector<std::uint64_t> all(np);
    for (std::uint64_t p = 0; p < np; ++p) all[p] = p;
    if (c != 0) std::shuffle(all.begin(), all.end(), rng);
    out.insert(out.end(), all.begin(), all.end());
  }
  return out;
}

/// Magnitudes at every margin threshold of every target, and next to them.
std::vector<double> threshold_values() {
  std::vector<double> v = {464.0, 448.0, 480.0, 456.0, 472.0, 65504.0, 65520.0, 65536.0, 57344.0, 61440.0,
                           1.0, 0.5, 3.0, 1e-3, 1e-30, 1e-38, 1e-40, 1e-45, 3.39e38, 3.4e38};
  struct fmt { int emin, mb, emax; double max; };
  const fmt fmts[] = {{-14, 10, 15, 65504.0}, {-126, 7, 127, std::ldexp(255.0, 120)}, {-6, 3, 8, 448.0}, {-14, 2, 15, 57344.0}};
  for (const fmt& f : fmts) {
    const double s = std::ldexp(1.0, f.emin - f.mb), n = std::ldexp(1.0, f.emin);
    const double ulp = std::ldexp(1.0, f.emax - f.mb);
    const double add[] = {s / 2, s, 1.5 * s, 0.75 * s, n - s, n - s / 2, n, f.max, f.max + ulp / 2, f.max + ulp / 4,
                          f.max + ulp, 2 * f.max, s / 4};
    v.insert(v.end(), std::begin(add), std::end(add));
  }
  return v;
}

std::vector<std::uint64_t> f32_adversarial(std::size_t random_count) {
  std::vector<std::uint64_t> out;
  for (double m : threshold_values()) {
    const std::uint32_t base = bits32(static_cast<float>(m));
    for (int d = -3; d <= 3; ++d) {
      const std::int64_t p = static_cast<std::int64_t>(base) + d;
      if (p < 0 || p > 0x7FFFFFFF) continue;
      out.push_back(static_cast<std::uint64_t>(p));
      out.push_back(static_cast<std::uint64_t>(p) | 0x80000000u);
    }
  }
  const std::uint32_t specials[] = {0u, 1u, 2u, 0x7FFFFFu, 0x800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7F800001u, 0x7FC00000u,
                                    0x7FFFFFFFu, 0x3F800000u};
  for (std::uint32_t s : specials) {
    out.push_back(s);
    out.push_back(s | 0x80000000u);
  }
  std::mt19937_64 rng(7);
  for (std::size_t k = 0; k < random_count; ++k) out.push_back(rng() & 0xFFFFFFFFu);
  return out;
}

std::vector<std::uint64_t> f64_adversarial(std::size_t random_count) {
  std::vector<std::uint64_t> out;
  for (double m : threshold_values()) {
    const std::uint64_t base = bits64(m);
    for (int d = -3; d <= 3; ++d) {
      out.push_back(base + static_cast<std::uint64_t>(d));
      out.push_back((base + static_cast<std::uint64_t>(d)) | 0x8000000000000000ull);
    }
  }
  const std::uint64_t specials[] = {0, 1, 0xFFFFFFFFFFFFFull, 0x10000000000000ull, 0x7FEFFFFFFFFFFFFFull, k_inf64,
                                    k_inf64 + 1, 0x7FF8000000000000ull, k_abs64, 0x3FF0000000000000ull};
  for (std::uint64_t s : specials) {
    out.push_back(s);
    out.push_back(s | 0x8000000000000000ull);
  }
  std::mt19937_64 rng(9);
  for (std::size_t k = 0; k < random_count; ++k) out.push_back(rng());
  return out;
}

/// The patterns repeated / cut to n elements.
std::vector<std::uint64_t> resize_to(const std::vector<std::uint64_t>& raws, std::size_t n) {
  std::vector<std::uint64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = raws[(i * 7919) % raws.size()];
  return out;
}

}  // namespace

TEST_CASE("histogram: every f16 bit pattern (x3, shuffled), every ISA, 1/2/4 threads, offsets") {
  check_all(dtype::f16, every_pattern(dtype::f16, 3), "f16 patterns");
}
TEST_CASE("histogram: every bf16 bit pattern (x3, shuffled), every ISA, 1/2/4 threads, offsets") {
  check_all(dtype::bf16, every_pattern(dtype::bf16, 3), "bf16 patterns");
}
TEST_CASE("histogram: every fp8 e4m3fn and e5m2 bit pattern") {
  check_all(dtype::f8_e4m3fn, every_pattern(dtype::f8_e4m3fn, 1100), "e4m3fn patterns");
  check_all(dtype::f8_e5m2, every_pattern(dtype::f8_e5m2, 1100), "e5m2 patterns");
}
TEST_CASE("histogram: f32 values at and next to every threshold, random patterns, many sizes") {
  const std::vector<std::uint64_t> adv = f32_adversarial(scaled(300000, 140000));
  check_all(dtype::f32, adv, "f32 adversarial");
  for (std::size_t n : {1u, 3u, 15u, 17u, 255u, 8193u, 131073u})
    check_all(dtype::f32, resize_to(adv, n), "f32 n=" + std::to_string(n), n < 1000);
}
TEST_CASE("histogram: f64 values at and next to every threshold, random patterns, many sizes") {
  const std::vector<std::uint64_t> adv = f64_adversarial(scaled(300000, 140000));
  check_all(dtype::f64, adv, "f64 adversarial");
  for (std::size_t n : {1u, 2u, 7u, 9u, 8193u})
    check_all(dtype::f64, resize_to(adv, n), "f64 n=" + std::to_string(n), n < 1000);
}
/// Chunks (8192 elements) whose data sits in different binades, so that the vector kernel's 16-binade window
/// moves between chunks and each dirty boundary's field (margins boundary inside a binade) is populated in
/// some chunks and empty in others, inside the window in some and outside in others; every chunk also has
/// zeros, subnormals, inf, NaN and the boundary patterns and their neighbours sprinkled in.
std::vector<std::uint64_t> moving_binades(dtype t, std::size_t chunks, unsigned seed) {
  const unsigned es = static_cast<unsigned>(elem_size(t));
  const unsigned mant = mant_bits(t);
  const unsigned top = t == dtype::f32 || t == dtype::bf16 ? 255u : 31u;  // all-ones field
  const std::uint64_t sign = std::uint64_t{1} << (8 * es - 1);
  const nanscope::detail::margin_bounds& mb = nanscope::detail::margin_bounds_for(t);
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> out;
  for (std::size_t c = 0; c < chunks; ++c) {
    // the chunk's top binade: cycles through the whole range, so every boundary's field is hit
    const unsigned hi = 1u + static_cast<unsigned>((c * 7 + seed) % (top - 1));
    for (std::size_t i = 0; i < 8192; ++i) {
      std::uint64_t a;
      const unsigned pick = static_cast<unsigned>(rng() % 1000);
      if (pick == 0) a = 0;
      else if (pick == 1) a = 1 + rng() % ((std::uint64_t{1} << mant) - 1);  // subnormal
      else if (pick == 2) a = static_cast<std::uint64_t>(top) << mant;       // inf
      else if (pick == 3) a = (static_cast<std::uint64_t>(top) << mant) | (1 + rng() % 3);  // NaN
      else if (pick < 40) {
        const std::uint64_t b = mb.b[rng() % nanscope::detail::mb_count];
        a = b + (rng() % 5) - 2;  // at and next to a boundary
        if (a > mb.abs_mask) a = b;
      } else {
        const unsigned drop = static_cast<unsigned>(rng() % 18);  // mostly within 16 binades below hi
        const unsigned f = hi > drop ? hi - drop : 1u;
        a = (static_cast<std::uint64_t>(f) << mant) | (rng() & ((std::uint64_t{1} << mant) - 1));
      }
      out.push_back((rng() & 1) != 0 ? a | sign : a);
    }
  }
  out.resize(out.size() - 8192 + 4100);  // a partial last chunk
  return out;
}

TEST_CASE("histogram: the vector window moves between chunks; boundary binades populated in some chunks only") {
  for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    const std::size_t chunks = t == dtype::f16 ? 40 : scaled(260, 80);
    const std::vector<std::uint64_t> raws = moving_binades(t, chunks, 11);
    const ref_hist ref = hist_reference(t, raws);
    for (isa i : {isa::scalar, isa::avx2, isa::avx512, isa::automatic})
      for (unsigned threads : {1u, 3u})
        check_one(t, raws, i, threads, threads == 3 ? 2 : 0, check_mode::stats, ref,
                  std::string("moving binades ") + std::string(nanscope::name(t)));
  }
}

TEST_CASE("histogram: strided and transposed views histogram their logical elements") {
  const std::vector<std::uint64_t> raws = f32_adversarial(5000);
  std::vector<float> dense(raws.size());
  for (std::size_t i = 0; i < raws.size(); ++i) dense[i] = f32_from_bits(static_cast<std::uint32_t>(raws[i]));
  // every other element of the buffer (a gathered view) and its reference
  const std::int64_t half_n = static_cast<std::int64_t>(dense.size() / 2);
  nanscope::tensor_view v = nanscope::tensor_view::flat(dense.data(), dtype::f32, half_n);
  v.strides[0] = 2;
  std::vector<std::uint64_t> picked;
  for (std::int64_t i = 0; i < half_n; ++i) picked.push_back(raws[static_cast<std::size_t>(2 * i)]);
  const ref_hist ref = hist_reference(dtype::f32, picked);
  const nanscope::histogram_result r = nanscope::check_histogram(v);
  CHECK(r.histogram.zero == ref.zero);
  CHECK(r.histogram.subnormal == ref.sub);
  CHECK(r.histogram.nan == ref.nan);
  CHECK(r.histogram.inf == ref.inf);
  for (int e = -126; e <= 127; ++e) CHECK(r.histogram.at(e) == ref.normal[static_cast<std::size_t>(e + 1022)]);
  expect_same_margins(r.margins(), nanscope::margins(v), "strided");
}
TEST_CASE("histogram: modes that do not read every element, and integer dtypes, are refused") {
  std::vector<float> x(10, 1.0f);
  const nanscope::tensor_view v = nanscope::tensor_view::flat(x.data(), dtype::f32, 10);
  for (check_mode m : {check_mode::curt_health, check_mode::concise_health, check_mode::shape, check_mode::no_tensor})
  {
    CHECK_THROWS_AS(nanscope::check_histogram(v, nanscope::check_options{}.with_mode(m)), nanscope::error);
    CHECK_THROWS_AS(nanscope::check_margins(v, nanscope::check_options{}.with_mode(m)), nanscope::error);
  }
  std::vector<std::int32_t> ints(4, 1);
  CHECK_THROWS_AS(nanscope::check_histogram(nanscope::tensor_view::flat(ints.data(), dtype::i32, 4)), nanscope::error);
  // an empty tensor: every count 0, margins as margins()
  const nanscope::tensor_view e = nanscope::tensor_view::flat(x.data(), dtype::f32, 0);
  const nanscope::histogram_result r = nanscope::check_histogram(e);
  CHECK(r.histogram.total() == 0);
  expect_same_margins(r.margins(), nanscope::margins(e), "empty");
}
TEST_CASE("histogram: bins are exponents of |x| (a few values by hand)") {
  const std::vector<float> x = {1.0f, -1.5f, 2.0f, 0.25f, -0.0f, 3e-45f, 65520.0f, -7.0f};
  const nanscope::histogram_result r = nanscope::check_histogram(nanscope::tensor_view::flat(x.data(), dtype::f32, 8));
  CHECK(r.histogram.at(0) == 2);
  CHECK(r.histogram.at(1) == 1);
  CHECK(r.histogram.at(2) == 1);
  CHECK(r.histogram.at(-2) == 1);
  CHECK(r.histogram.at(15) == 1);
  CHECK(r.histogram.zero == 1);
  CHECK(r.histogram.subnormal == 1);
  CHECK(r.histogram.min_exponent() == -126);
  CHECK(r.histogram.max_exponent() == 127);
  CHECK(r.margins()[dtype::f16].overflow == 1);  // 65520 is the fp16 overflow tie
}

/// The margins' boundary patterns whose field lies in the window [top - 13, top + 2] that a chunk whose samples
/// hold field `top` gets (without those of field `top` itself when `skip_top`).
std::vector<std::uint64_t> window_boundaries(dtype t, unsigned top, bool skip_top) {
  const nanscope::detail::margin_bounds& mb = nanscope::detail::margin_bounds_for(t);
  const unsigned w0 = top + 2 - 15;
  std::vector<std::uint64_t> out;
  for (int k = nanscope::detail::mb_target0; k < nanscope::detail::mb_count; ++k) {
    const unsigned f = static_cast<unsigned>(mb.b[k] >> mant_bits(t));
    if (f >= w0 && f < w0 + 16 && !(skip_top && f == top)) out.push_back(mb.b[k]);
  }
  return out;
}

/// Whether element i of n is one of its chunk's five samples (check.hpp's shift_positions), which pick the
/// fused kernels' window.
bool chunk_sample(std::size_t i, std::size_t n) {
  const std::size_t in_chunk = i % 8192, m = (n - i + in_chunk) < 8192 ? n - i + in_chunk : 8192;
  return in_chunk == 0 || in_chunk == (m - 1) / 4 || in_chunk == (m - 1) / 2 || in_chunk == (m - 1) * 3 / 4 ||
         in_chunk == m - 1;
}

/// Data that stays inside the fused AVX-512 kernel's 16-binade window, so that most blocks are never scanned
/// again: fields [top - 13, top + 2] around a sampled top field (the chunk samples at 0, 1/4 ... of the chunk
/// hold field `top`), with the margins' dirty boundary patterns (and their neighbours) of the window's fields
/// sprinkled in. `inject` puts one element of pattern `special` at each listed position.
std::vector<std::uint64_t> in_window(dtype t, unsigned top, std::size_t n, unsigned seed,
                                     const std::vector<std::size_t>& inject, std::uint64_t special) {
  const unsigned mant = mant_bits(t);
  const std::uint64_t sign = std::uint64_t{1} << (8 * elem_size(t) - 1);
  const unsigned w0 = top + 2 - 15;
  const std::vector<std::uint64_t> dirty = window_boundaries(t, top, false);
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t a;
    if (chunk_sample(i, n)) {
      a = static_cast<std::uint64_t>(top) << mant;
    } else if (!dirty.empty() && rng() % 64 == 0) {
      a = dirty[rng() % dirty.size()] + (rng() % 5) - 2;  // at and next to a boundary: stays in its field
    } else {
      const unsigned f = w0 + static_cast<unsigned>(rng() % 16);
      a = (static_cast<std::uint64_t>(f) << mant) | (rng() & ((std::uint64_t{1} << mant) - 1));
    }
    out[i] = (rng() & 1) != 0 ? a | sign : a;
  }
  for (std::size_t pos : inject)
    if (pos < n) out[pos] = special;
  return out;
}

/// Data in one binade (`top`, which the chunk samples see, so the window is [top - 13, top + 2]) with, in about
/// one block in three, one element at or next to a dirty boundary of the window: a lazy boundary's elements then
/// sit in blocks whose other slots are empty, so a block is scanned again only if the lazy slot test finds them.
std::vector<std::uint64_t> sparse_boundaries(dtype t, unsigned top, std::size_t n, unsigned seed) {
  const unsigned mant = mant_bits(t);
  const std::uint64_t sign = std::uint64_t{1} << (8 * elem_size(t) - 1);
  const std::vector<std::uint64_t> dirty = window_boundaries(t, top, true);
  std::mt19937_64 rng(seed);
  std::vector<std::uint64_t> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t a = (static_cast<std::uint64_t>(top) << mant) | (rng() & ((std::uint64_t{1} << mant) - 1));
    if (!dirty.empty() && i % 8192 != 0 && rng() % 384 == 0) a = dirty[rng() % dirty.size()] + (rng() % 5) - 2;
    out[i] = (rng() & 1) != 0 ? a | sign : a;
  }
  return out;
}

TEST_CASE("histogram: the fused kernel's window: lazy boundaries' elements alone in their blocks") {
  struct shape { dtype t; unsigned top; };
  // top 118: window [105, 121): f32 holds five dirty boundaries, three of them lazy; bf16 four, two lazy (its fp16
  // min normal, 2^-14, is a field's first pattern); f16 windows hold at most two (both direct)
  const shape shapes[] = {{dtype::f32, 118}, {dtype::bf16, 118}, {dtype::f16, 14}, {dtype::f32, 124}};
  for (const shape& sh : shapes) {
    const std::vector<std::uint64_t> raws = sparse_boundaries(sh.t, sh.top, 4 * 8192 + 300, 17);
    const ref_hist ref = hist_reference(sh.t, raws);
    const std::string what = std::string("sparse boundaries ") + std::string(nanscope::name(sh.t)) + " top " +
                             std::to_string(sh.top);
    for (isa i : {isa::avx2, isa::avx512})
      for (check_mode m : {check_mode::stats, check_mode::full_health}) check_one(sh.t, raws, i, 1, 0, m, ref, what);
  }
}

TEST_CASE("histogram: the fused kernel's window: in-window data, lazy and direct boundaries, one element outside") {
  struct shape { dtype t; unsigned top; };
  // top 118: window [105, 121): f32 holds five dirty boundaries (fp16 and e5m2 flush / min normal, e4m3 flush and
  // min normal): two are compared per vector, three are lazy; bf16 four (its fp16 min normal, 2^-14, is a field's
  // first pattern), two lazy; f16 top 14: e4m3 flush and min normal
  const shape shapes[] = {{dtype::f32, 118}, {dtype::bf16, 118}, {dtype::f16, 14}, {dtype::f32, 127}, {dtype::bf16, 140}};
  for (const shape& sh : shapes) {
    const unsigned mant = mant_bits(sh.t);
    const std::uint64_t inf = (sh.t == dtype::f16 ? std::uint64_t{31} : std::uint64_t{255}) << mant;
    const std::uint64_t below = static_cast<std::uint64_t>(sh.top - 16) << mant;  // one binade under the window
    const std::uint64_t specials[] = {0, 1, inf, inf + 1, below, static_cast<std::uint64_t>(sh.top + 3) << mant};
    const std::size_t n = 3 * 8192 + 700;
    const std::string what = std::string("in-window ") + std::string(nanscope::name(sh.t)) + " top " + std::to_string(sh.top);
    {
      const std::vector<std::uint64_t> raws = in_window(sh.t, sh.top, n, 5, {}, 0);
      const ref_hist ref = hist_reference(sh.t, raws);
      for (isa i : {isa::avx2, isa::avx512})
        for (check_mode m : {check_mode::stats, check_mode::full_health})
          check_one(sh.t, raws, i, 1, 0, m, ref, what);
    }
    for (std::uint64_t sp : specials) {
      const std::vector<std::uint64_t> raws = in_window(sh.t, sh.top, n, 6, {0, 127, 128, 255, 256, 4000, 8191, 8192 + 17, 3 * 8192 - 1}, sp);
      const ref_hist ref = hist_reference(sh.t, raws);
      for (isa i : {isa::avx2, isa::avx512})
        check_one(sh.t, raws, i, 1, 0, check_mode::stats, ref, what + " with pattern " + std::to_string(sp));
    }
  }
}

TEST_CASE("histogram: the fused kernel's window with zeros in most blocks (AVX2 counts them without its rescan)") {
  // in-window data (above) with +0 / -0 in half the elements everywhere, or in stretches of 12 blocks out of
  // 24 (the AVX2 kernel then switches between its plain and zero runs); the chunk samples stay non-zero so the
  // window is the same; specials as above, also inside the zero stretches
  struct shape { dtype t; unsigned top; };
  // (f32 top 190: values around 2^60, past the stats level's fast range, in the window: zero blocks fail there
  // and run per lane, and the hook still counts their zeros)
  const shape shapes[] = {{dtype::f32, 118}, {dtype::bf16, 118}, {dtype::f16, 14}, {dtype::f32, 127}, {dtype::f32, 190}};
  for (const shape& sh : shapes) {
    const unsigned mant = mant_bits(sh.t);
    const std::uint64_t sign = std::uint64_t{1} << (8 * elem_size(sh.t) - 1);
    const std::uint64_t inf = (sh.t == dtype::f16 ? std::uint64_t{31} : std::uint64_t{255}) << mant;
    const std::uint64_t below = static_cast<std::uint64_t>(sh.top - 16) << mant;
    const std::uint64_t specials[] = {1, inf, below, static_cast<std::uint64_t>(sh.top + 3) << mant};
    const std::size_t n = 3 * 8192 + 700;
    for (bool stretches : {false, true}) {
      for (int sp = -1; sp < 4; ++sp) {
        std::vector<std::uint64_t> raws =
            in_window(sh.t, sh.top, n, 8, {300, 1000, 8191, 8192 + 129, 2 * 8192 + 640}, sp < 0 ? 0 : specials[sp]);
        std::mt19937_64 rng(9);
        for (std::size_t i = 0; i < n; ++i) {
          if (chunk_sample(i, n) || (sp >= 0 && raws[i] == specials[sp])) continue;
          const bool zero = (rng() & 1) != 0 && (!stretches || (i / 128) % 24 < 12);
          if (zero) raws[i] = rng() % 4 == 0 ? sign : 0;
        }
        const ref_hist ref = hist_reference(sh.t, raws);
        const std::string what = std::string("zeros ") + (stretches ? "in stretches " : "everywhere ") +
                                 std::string(nanscope::name(sh.t)) + " top " + std::to_string(sh.top) +
                                 " special " + std::to_string(sp);
        for (isa i : {isa::avx2, isa::avx512})
          for (check_mode m : {check_mode::stats, check_mode::full_health}) check_one(sh.t, raws, i, 1, 0, m, ref, what);
      }
    }
  }
}
