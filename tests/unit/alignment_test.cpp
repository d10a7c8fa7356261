// nanscope tests — alignment_test.cpp: check() and margins() read data at any byte alignment (issue 13 item 8).
//
// Every dtype is laid out at every byte offset 0..(element size - 1) and a few larger ones from a 64-byte
// aligned base, contiguous and strided (gapped rows, a transposed dense layout, an inner stride of 2), and
// checked with every instruction set the CPU has, in every mode, against the independent naive reference of
// support/reference.hpp computed from the logical raw values. margins() is held to the same data read from an
// element-aligned copy with the portable kernel. The sanitizer presets make a misaligned typed load an error
// (-fsanitize=alignment is part of `undefined`), so these cases fail there on a kernel that loads through a
// typed pointer.
#include "support/compare.hpp"
#include "support/reference.hpp"

#include <nanscope/check.hpp>
#include <nanscope/margins.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace ns = nanscope;
using ns::dtype;

const dtype all_dtypes[] = {dtype::f64, dtype::f32, dtype::f16,  dtype::bf16, dtype::f8_e4m3fn,
                            dtype::f8_e5m2, dtype::i8, dtype::i16, dtype::i32, dtype::i64,
                            dtype::u8, dtype::u16, dtype::u32, dtype::u64, dtype::boolean};

/// Raw element values: mostly "tame" values near 1 (the SIMD fast paths), some special values (zeros,
/// infinities, NaN, subnormals, the largest finite value) and some arbitrary bit patterns.
std::vector<std::uint64_t> make_raw(dtype t, std::size_t n, std::uint64_t seed) {
  nstest::rng r(seed);
  std::vector<std::uint64_t> out(n);
  const std::size_t es = nstest::ref_size_of(t);
  const std::uint64_t mask = es == 8 ? ~std::uint64_t{0} : (std::uint64_t{1} << (8 * es)) - 1;
  nstest::float_layout l{};
  if (!nstest::layout_of(t, l)) {
    for (auto& x : out) x = t == dtype::boolean ? (r.next() & 1u) : (r.next() & mask);
    return out;
  }
  const int bits = 1 + l.exp_bits + l.man_bits;
  const std::uint64_t man_mask = (std::uint64_t{1} << l.man_bits) - 1;
  const std::uint64_t exp_all = (std::uint64_t{1} << l.exp_bits) - 1;
  const std::uint64_t bias = exp_all >> 1;
  const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t pick = r.below(16);
    std::uint64_t x;
    if (pick == 0) {
      x = r.next() & mask;
    } else if (pick == 1) {
      const std::uint64_t specials[] = {0, sign, exp_all << l.man_bits, sign | (exp_all << l.man_bits),
                                        (exp_all << l.man_bits) | man_mask, 1, sign | man_mask,
                                        ((exp_all - 1) << l.man_bits) | man_mask};
      x = specials[r.below(8)];
    } else {
      const std::uint64_t e = bias + r.below(9) - 4;
      x = (r.below(2) != 0 ? sign : 0) | (e << l.man_bits) | (r.next() & man_mask);
    }
    out[i] = x & mask;
  }
  return out;
}

/// Element storage starting at byte `offset` of a 64-byte aligned block; unused bytes are 0xFF (NaN in every
/// float format) so that reading a gap changes the counts.
struct buffer {
  std::vector<std::uint64_t> words;
  unsigned char* base = nullptr;
  buffer(std::size_t elems, std::size_t es, std::size_t offset) : words((elems * es + offset + 128) / 8 + 1) {
    auto* b = reinterpret_cast<unsigned char*>(words.data());
    std::memset(b, 0xFF, words.size() * 8);
    const auto addr = reinterpret_cast<std::uintptr_t>(b);
    base = b + ((64 - addr % 64) % 64) + offset;
  }
  void put(std::size_t i, std::size_t es, std::uint64_t raw) { std::memcpy(base + i * es, &raw, es); }
};

struct layout_case {
  const char* label;
  int rank;
  std::int64_t shape[2];
  std::int64_t strides[2];
  std::size_t phys_elems;
  /// Physical element index of logical element k (row-major over shape).
  std::size_t (*phys)(std::size_t k);
};

constexpr std::size_t n_elems = 1003;  // not a multiple of any vector width or block
const layout_case layouts[] = {
    {"contiguous", 1, {1003, 0}, {1, 0}, 1003, [](std::size_t k) { return k; }},
    {"gapped rows 17x59, pitch 61", 2, {17, 59}, {61, 1}, 17 * 61,
     [](std::size_t k) { return (k / 59) * 61 + k % 59; }},
    {"transposed 17x59 (dense permutation)", 2, {17, 59}, {1, 17}, 1003,
     [](std::size_t k) { return (k % 59) * 17 + k / 59; }},
    {"inner stride 2", 1, {1003, 0}, {2, 0}, 2006, [](std::size_t k) { return 2 * k; }},
};

std::vector<ns::isa> isas_available() {
  std::vector<ns::isa> out;
  for (ns::isa i : {ns::isa::scalar, ns::isa::avx2, ns::isa::avx512})
    if (ns::resolve_isa(i) == i) out.push_back(i);
  return out;
}

std::vector<std::size_t> offsets_for(std::size_t es) {
  std::vector<std::size_t> o;
  for (std::size_t i = 0; i < es; ++i) o.push_back(i);
  o.push_back(es + 3);
  o.push_back(61);
  return o;
}

bool same_margins(const ns::margins_result& a, const ns::margins_result& b) {
  if (a.count != b.count || a.zero != b.zero || a.inf != b.inf || a.nan != b.nan) return false;
  if (nstest::bits64(a.abs_max) != nstest::bits64(b.abs_max)) return false;
  for (std::size_t i = 0; i < a.formats.size(); ++i) {
    const auto &x = a.formats[i], &y = b.formats[i];
    if (x.overflow != y.overflow || x.subnormal != y.subnormal || x.underflow_to_zero != y.underflow_to_zero) return false;
    if (nstest::bits64(x.headroom_bits) != nstest::bits64(y.headroom_bits)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("alignment: every dtype at every byte offset, contiguous and strided, every ISA, against the reference") {
  const std::vector<ns::isa> isas = isas_available();
  std::uint64_t seed = 100;
  for (dtype t : all_dtypes) {
    const std::size_t es = ns::size_of(t);
    const std::vector<std::uint64_t> raw = make_raw(t, n_elems, ++seed);
    const nstest::ref_health ref = nstest::reference(t, raw);
    for (const layout_case& lc : layouts) {
      // the element-aligned copy: the data margins() is compared with
      buffer aligned(lc.phys_elems, es, 0);
      for (std::size_t k = 0; k < n_elems; ++k) aligned.put(lc.phys(k), es, raw[k]);
      for (std::size_t off : offsets_for(es)) {
        CAPTURE(std::string(ns::name(t)));
        CAPTURE(std::string(lc.label));
        CAPTURE(off);
        buffer b(lc.phys_elems, es, off);
        for (std::size_t k = 0; k < n_elems; ++k) b.put(lc.phys(k), es, raw[k]);
        ns::tensor_view v;
        v.data = b.base;
        v.type = t;
        v.rank = lc.rank;
        v.name = "unaligned";
        for (int d = 0; d < lc.rank; ++d) {
          v.shape[d] = lc.shape[d];
          v.strides[d] = lc.strides[d];
        }
        REQUIRE(nstest::logical_raw(v) == raw);  // the layout describes the data (independent addressing)
        ns::tensor_view va = v;
        va.data = aligned.base;
        for (ns::isa use : isas) {
          CAPTURE(std::string(ns::name(use)));
          for (ns::check_mode m : nstest::all_modes) {
            const auto r = ns::check(v, ns::check_options{}.with_mode(m).with_isa(use).with_threads(1));
            nstest::expect_health(r, ref, v, m, nstest::moment_tol(t, use));
          }
          if (ns::is_float(t)) {
            const auto mr = ns::margins(v, ns::margins_options{}.with_isa(use));
            const auto ma = ns::margins(va, ns::margins_options{}.with_isa(ns::isa::scalar));
            CHECK(same_margins(mr, ma));
            CHECK(mr.count == ref.count);
            CHECK(mr.nan == ref.nan);
            CHECK(mr.inf == ref.pos_inf + ref.neg_inf);
            CHECK(mr.zero == ref.zero);
          }
        }
      }
    }
  }
}

TEST_CASE("alignment: misaligned tensors split across threads give the single-thread answer and the reference") {
  // more than two segments of the parallel pass, so that several threads read misaligned segments
  const std::size_t n = ns::detail::segment_elems * 2 + 77;
  const std::vector<ns::isa> isas = isas_available();
  std::uint64_t seed = 900;
  for (dtype t : {dtype::f64, dtype::f32, dtype::bf16, dtype::f16}) {
    const std::size_t es = ns::size_of(t);
    const std::vector<std::uint64_t> raw = make_raw(t, n, ++seed);
    const nstest::ref_health ref = nstest::reference(t, raw);
    for (std::int64_t stride : {1, 2}) {
      const std::size_t off = es > 1 ? es - 1 : 0;
      buffer b(n * static_cast<std::size_t>(stride), es, off);
      for (std::size_t k = 0; k < n; ++k) b.put(k * static_cast<std::size_t>(stride), es, raw[k]);
      ns::tensor_view v;
      v.data = b.base;
      v.type = t;
      v.rank = 1;
      v.shape[0] = static_cast<std::int64_t>(n);
      v.strides[0] = stride;
      for (ns::isa use : isas) {
        for (unsigned threads : {1u, 4u}) {
          CAPTURE(std::string(ns::name(t)));
          CAPTURE(stride);
          CAPTURE(std::string(ns::name(use)));
          CAPTURE(threads);
          for (ns::check_mode m : {ns::check_mode::stats, ns::check_mode::full_health, ns::check_mode::curt_health}) {
            const auto r = ns::check(
                v, ns::check_options{}.with_mode(m).with_isa(use).with_threads(threads).with_parallel_threshold(0));
            nstest::expect_health(r, ref, v, m, nstest::moment_tol(t, use));
          }
        }
      }
    }
  }
}
