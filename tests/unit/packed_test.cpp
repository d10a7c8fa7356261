// nanscope tests — packed_test.cpp: check_packed() / decode_packed() (packed.hpp) against a reference written here from
// the format definitions, sharing no code with the library:
//
//   - element values from the OCP MX v1.0 definitions (sign, exponent field, mantissa, bias, E4M3's only NaN S.1111.111,
//     E5M2 IEEE-like) with std::ldexp; E8M0 as 2^(code - 127), 0xFF NaN;
//   - packing as a plain bit stream: element i is bits i*w .. i*w + w - 1, bit q being bit (q % 8) of byte q / 8
//     (lsb_first) or bit 7 - (q % 8) (msb_first), written and read one bit at a time;
//   - statistics by walking every element: its block's scale, its code, its value.
//
// Every nibble, 6-bit and byte pattern in every position of a stream; random packed tensors (odd row lengths, partial
// blocks, NaN scales, zero blocks, both bit orders, 1 and 2 threads) for MXFP8/6/4 and NVFP4; hostile geometry.
#include <nanscope/packed.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace packed_test_ns {

using nanscope::element_format;
using nanscope::packed_order;
using nanscope::packed_scale;

struct fmt_def {
  int w, E, M, bias;
  bool ieee, e4m3;
};

fmt_def def_of(element_format f) {
  switch (f) {
    case element_format::e2m1: return {4, 2, 1, 1, false, false};
    case element_format::e2m3: return {6, 2, 3, 1, false, false};
    case element_format::e3m2: return {6, 3, 2, 3, false, false};
    case element_format::e4m3: return {8, 4, 3, 7, false, true};
    default: return {8, 5, 2, 15, true, false};
  }
}

double ref_value(element_format f, unsigned c) {
  const fmt_def d = def_of(f);
  const bool neg = (c >> (d.w - 1)) & 1u;
  const unsigned e = (c >> d.M) & ((1u << d.E) - 1u), m = c & ((1u << d.M) - 1u);
  double v;
  if (d.ieee && e == (1u << d.E) - 1u) v = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  else if (d.e4m3 && e == 15 && m == 7) v = std::numeric_limits<double>::quiet_NaN();
  else if (e == 0) v = std::ldexp(static_cast<double>(m), 1 - d.bias - d.M);
  else v = std::ldexp(static_cast<double>((1u << d.M) + m), static_cast<int>(e) - d.bias - d.M);
  return neg ? -v : v;
}

bool bits_nan(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, 8);
  return (b & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
}
bool bits_inf(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, 8);
  return (b & 0x7FFFFFFFFFFFFFFFull) == 0x7FF0000000000000ull;
}
bool same(double a, double b) {
  if (bits_nan(a) || bits_nan(b)) return bits_nan(a) && bits_nan(b);
  std::uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return x == y;
}

bool is_zero(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, 8);
  return (b & 0x7FFFFFFFFFFFFFFFull) == 0;
}

double ref_scale(packed_scale t, std::uint8_t s, float ts) {
  if (t == packed_scale::e8m0) return s == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, s - 127);
  return ref_value(element_format::e4m3, s) * static_cast<double>(ts);
}

void put_bits(std::vector<unsigned char>& buf, std::uint64_t i, int w, unsigned code, packed_order o) {
  for (int k = 0; k < w; ++k) {
    const std::uint64_t q = i * static_cast<std::uint64_t>(w) + static_cast<std::uint64_t>(k);
    const unsigned bit = (code >> k) & 1u;  // bit k of the code (k = 0: least significant)
    // lsb_first: the code's bits go up from the stream position; msb_first: its most significant bit first
    const std::uint64_t pos = o == packed_order::lsb_first ? q : i * static_cast<std::uint64_t>(w) + static_cast<std::uint64_t>(w - 1 - k);
    const unsigned sh = o == packed_order::lsb_first ? static_cast<unsigned>(pos % 8) : 7u - static_cast<unsigned>(pos % 8);
    if (bit) buf[static_cast<std::size_t>(pos / 8)] = static_cast<unsigned char>(buf[static_cast<std::size_t>(pos / 8)] | (1u << sh));
  }
}

unsigned get_bits(const std::vector<unsigned char>& buf, std::uint64_t i, int w, packed_order o) {
  unsigned code = 0;
  for (int k = 0; k < w; ++k) {
    const std::uint64_t pos = o == packed_order::lsb_first ? i * static_cast<std::uint64_t>(w) + static_cast<std::uint64_t>(k)
                                                           : i * static_cast<std::uint64_t>(w) + static_cast<std::uint64_t>(w - 1 - k);
    const unsigned sh = o == packed_order::lsb_first ? static_cast<unsigned>(pos % 8) : 7u - static_cast<unsigned>(pos % 8);
    code |= ((buf[static_cast<std::size_t>(pos / 8)] >> sh) & 1u) << k;
  }
  return code;
}

const element_format all_el[] = {element_format::e2m1, element_format::e2m3, element_format::e3m2, element_format::e4m3,
                                 element_format::e5m2};

TEST_CASE("packed: every code in every position of a stream decodes as the definitions say") {
  for (element_format f : all_el)
    for (packed_order o : {packed_order::lsb_first, packed_order::msb_first}) {
      const int w = def_of(f).w;
      const unsigned nc = 1u << w;
      // each code at each of 8 stream positions (every bit phase), neighbours random
      std::mt19937 rng(7);
      int bad = 0;
      for (unsigned c = 0; c < nc; ++c)
        for (unsigned at = 0; at < 8; ++at) {
          const std::uint64_t n = 9;
          std::vector<unsigned char> buf((n * static_cast<std::uint64_t>(w) + 7) / 8, 0);
          std::vector<unsigned> codes(n);
          for (std::uint64_t i = 0; i < n; ++i) {
            codes[i] = i == at ? c : static_cast<unsigned>(rng() % nc);
            put_bits(buf, i, w, codes[i], o);
          }
          nanscope::packed_view v;
          v.data = buf.data();
          v.bytes = buf.size();
          v.element = f;
          v.order = o;
          v.set_shape({static_cast<std::int64_t>(n)});
          for (std::uint64_t i = 0; i < n; ++i) {
            if (get_bits(buf, i, w, o) != codes[i]) ++bad;  // the reference packer round-trips
            if (!same(nanscope::decode_packed(v, i), ref_value(f, codes[i]))) ++bad;
          }
        }
      CHECK_MESSAGE(bad == 0, nanscope::name(f));
    }
  // the stated convention, spelled out on bytes: E2M1 0x21 holds element 0 = 0x1 (0.5), element 1 = 0x2 (1.0)
  const unsigned char b[1] = {0x21};
  nanscope::packed_view v;
  v.data = b;
  v.bytes = 1;
  v.set_shape({2});
  CHECK(nanscope::decode_packed(v, 0) == 0.5);
  CHECK(nanscope::decode_packed(v, 1) == 1.0);
  // E2M3 lsb_first: 24-bit little-endian word, element j in bits 6j..6j+5
  const unsigned char c6[3] = {0x01 | (0x02 << 6), (0x02 >> 2) | (0x03 << 4), (0x03 >> 4) | (0x3F << 2)};
  v.data = c6;
  v.bytes = 3;
  v.element = element_format::e2m3;
  v.set_shape({4});
  CHECK(nanscope::decode_packed(v, 0) == 0.125);
  CHECK(nanscope::decode_packed(v, 1) == 0.25);
  CHECK(nanscope::decode_packed(v, 2) == 0.375);
  CHECK(nanscope::decode_packed(v, 3) == -7.5);
}

struct ref_stats {
  std::uint64_t nan = 0, pinf = 0, ninf = 0, zero = 0, neg = 0, pos = 0, sub = 0, at_max = 0;
  std::uint64_t nan_scales = 0, blocks = 0, zero_blocks = 0, nan_blocks = 0, zero_scale_blocks = 0;
  std::int64_t first = -1;
  double mn = std::numeric_limits<double>::quiet_NaN(), mx = mn, amax = mn;
  long double sum = 0;
  std::uint64_t finite = 0;
  std::vector<std::uint64_t> hist = std::vector<std::uint64_t>(256, 0);
};

ref_stats reference(const std::vector<unsigned char>& data, const std::vector<unsigned char>& scales, element_format f,
                    packed_order o, std::uint64_t rows, std::uint64_t L, int B, packed_scale st, float ts) {
  ref_stats r;
  const fmt_def d = def_of(f);
  const std::uint64_t nb = (L + B - 1) / B;
  const double fmax = ref_value(f, f == element_format::e4m3 ? 0x7E : f == element_format::e5m2 ? 0x7B : (1u << (d.w - 1)) - 1u);
  for (std::uint64_t row = 0; row < rows; ++row)
    for (std::uint64_t j = 0; j < nb; ++j) {
      const std::uint8_t s = scales[static_cast<std::size_t>(row * nb + j)];
      const double sv = ref_scale(st, s, ts);
      ++r.blocks;
      bool any_nonzero = false, any_bad = false;
      for (std::uint64_t i = j * B; i < std::min<std::uint64_t>(L, (j + 1) * B); ++i) {
        const std::uint64_t flat = row * L + i;
        const unsigned c = get_bits(data, flat, d.w, o);
        const double e = ref_value(f, c);
        const double x = e * sv;
        if (bits_nan(e) || bits_inf(e)) any_bad = true;
        if (!is_zero(e)) any_nonzero = true;
        if (bits_nan(x) || bits_inf(x)) {
          if (r.first < 0) r.first = static_cast<std::int64_t>(flat);
          if (bits_nan(x)) ++r.nan;
          else if (x > 0) ++r.pinf;
          else ++r.ninf;
          continue;
        }
        if (x == 0) ++r.zero;
        else if (x < 0) ++r.neg;
        else ++r.pos;
        if (e != 0 && std::fabs(e) < ref_value(f, 1u << d.M)) ++r.sub;
        if (std::fabs(e) == fmax) ++r.at_max;
        r.mn = bits_nan(r.mn) || x < r.mn ? x : r.mn;
        r.mx = bits_nan(r.mx) || x > r.mx ? x : r.mx;
        r.amax = bits_nan(r.amax) || std::fabs(x) > r.amax ? std::fabs(x) : r.amax;
        r.sum += x;
        ++r.finite;
      }
      if (bits_nan(sv)) {
        ++r.nan_scales;
        ++r.nan_blocks;
        continue;
      }
      if (any_bad) {
        ++r.nan_blocks;
        continue;
      }
      if (!any_nonzero) {
        ++r.zero_blocks;
        continue;
      }
      if (sv == 0) {
        ++r.zero_scale_blocks;
        continue;
      }
      const int x = st == packed_scale::e8m0 ? s - 127 : std::ilogb(ref_value(element_format::e4m3, s & 0x7F));
      ++r.hist[static_cast<std::size_t>(x + 127)];
    }
  return r;
}

void compare(const nanscope::packed_result& p, const ref_stats& r, const std::string& label) {
  INFO(label);
  const nanscope::health_result& h = p.health;
  CHECK(h.nan == r.nan);
  CHECK(h.pos_inf == r.pinf);
  CHECK(h.neg_inf == r.ninf);
  CHECK(h.zero == r.zero);
  CHECK(h.negative == r.neg);
  CHECK(h.positive == r.pos);
  CHECK(h.subnormal == r.sub);
  CHECK(p.blocks.clipped == r.at_max);
  CHECK(h.first_nonfinite == r.first);
  CHECK(same(h.min, r.mn));
  CHECK(same(h.max, r.mx));
  CHECK(same(h.abs_max, r.amax));
  if (r.finite != 0) {
    const double mean = static_cast<double>(r.sum / static_cast<long double>(r.finite));
    CHECK(std::fabs(h.mean - mean) <= 1e-12 * (std::fabs(mean) + r.amax));
  }
  CHECK(p.nan_scales == r.nan_scales);
  CHECK(p.blocks.blocks == r.blocks);
  CHECK(p.blocks.zero_blocks == r.zero_blocks);
  CHECK(p.blocks.nan_blocks == r.nan_blocks);
  CHECK(p.blocks.zero_scale_blocks == r.zero_scale_blocks);
  int hist_bad = 0;
  for (int i = 0; i < 256; ++i) hist_bad += p.blocks.scale_histogram[static_cast<std::size_t>(i)] != r.hist[static_cast<std::size_t>(i)];
  CHECK(hist_bad == 0);
}

TEST_CASE("packed: random MX and NVFP4 tensors against the element-by-element reference") {
  std::mt19937_64 rng(20261127);
  struct cfg {
    element_format f;
    packed_scale st;
    int B;
  };
  const cfg cfgs[] = {{element_format::e2m1, packed_scale::e8m0, 32}, {element_format::e2m1, packed_scale::e4m3, 16},
                      {element_format::e2m3, packed_scale::e8m0, 32}, {element_format::e3m2, packed_scale::e8m0, 32},
                      {element_format::e4m3, packed_scale::e8m0, 32}, {element_format::e5m2, packed_scale::e8m0, 32},
                      {element_format::e2m1, packed_scale::e8m0, 8},  {element_format::e2m1, packed_scale::e4m3, 6}};
  const std::uint64_t lens[] = {64, 96, 33, 7, 31, 1, 128, 50};
  for (const cfg& c : cfgs)
    for (std::uint64_t L : lens)
      for (packed_order o : {packed_order::lsb_first, packed_order::msb_first}) {
        const int w = def_of(c.f).w;
        const std::uint64_t rows = 1 + rng() % 9;
        const std::uint64_t n = rows * L, nb = (L + c.B - 1) / c.B;
        std::vector<unsigned char> data((n * static_cast<std::uint64_t>(w) + 7) / 8);
        for (auto& b : data) b = static_cast<unsigned char>(rng());
        // some all-zero blocks: clear a few element ranges
        for (std::uint64_t row = 0; row < rows; ++row)
          if (rng() % 3 == 0)
            for (std::uint64_t i = 0; i < std::min<std::uint64_t>(L, static_cast<std::uint64_t>(c.B)); ++i) {
              const std::uint64_t flat = row * L + i;
              for (int k = 0; k < w; ++k) {
                const std::uint64_t q = flat * static_cast<std::uint64_t>(w) + static_cast<std::uint64_t>(k);
                data[static_cast<std::size_t>(q / 8)] = static_cast<unsigned char>(data[static_cast<std::size_t>(q / 8)] & ~(1u << (q % 8)));
              }
            }
        std::vector<unsigned char> scales(static_cast<std::size_t>(rows * nb));
        for (auto& s : scales) {
          const std::uint64_t u = rng() % 20;
          s = c.st == packed_scale::e8m0 ? static_cast<unsigned char>(u == 0 ? 0xFF : u == 1 ? 0 : u == 2 ? 254 : 120 + rng() % 16)
                                         : static_cast<unsigned char>(u == 0 ? 0x7F : u == 1 ? 0 : rng() % 0x7F);
        }
        const float ts = c.st == packed_scale::e4m3 ? 0.0625f : 1.0f;
        nanscope::packed_view v;
        v.data = data.data();
        v.bytes = data.size();
        v.element = c.f;
        v.order = o;
        v.rank = 2;
        v.shape[0] = static_cast<std::int64_t>(rows);
        v.shape[1] = static_cast<std::int64_t>(L);
        v.scales = scales.data();
        v.scale_bytes = scales.size();
        v.scale_type = c.st;
        v.block_size = c.B;
        v.tensor_scale = ts;
        v.name = "w";
        const ref_stats ref = reference(data, scales, c.f, o, rows, L, c.B, c.st, ts);
        const std::string label = std::string(nanscope::name(c.f)) + " L=" + std::to_string(L) + " rows=" + std::to_string(rows) +
                                  (o == packed_order::lsb_first ? " lsb" : " msb");
        nanscope::packed_options one;
        one.threads = 1;
        const nanscope::packed_result r1 = nanscope::check_packed(v, one);
        compare(r1, ref, label);
        nanscope::packed_options two;
        two.threads = 2;
        two.parallel_threshold = 0;
        const nanscope::packed_result r2 = nanscope::check_packed(v, two);
        compare(r2, ref, label + " 2 threads");
        CHECK(same(r1.health.mean, r2.health.mean));
        CHECK(same(r1.blocks.scale_exp_std, r2.blocks.scale_exp_std));
        // decode_packed against the reference, element by element
        int bad = 0;
        for (std::uint64_t i = 0; i < n; ++i) {
          const double want = ref_value(c.f, get_bits(data, i, w, o)) *
                              ref_scale(c.st, scales[static_cast<std::size_t>((i / L) * nb + (i % L) / c.B)], ts);
          if (!same(nanscope::decode_packed(v, i), want)) ++bad;
        }
        CHECK_MESSAGE(bad == 0, label);
      }
}

TEST_CASE("packed: E2M1 tensors of many blocks per scale (the 16-bit per-scale rows are emptied before they wrap)") {
  std::mt19937_64 rng(99);
  for (int B : {32, 16}) {
    const std::uint64_t L = 64, rows = 70000;  // 140000 (or 280000) blocks over 3 scales: far past 65535 / B per row
    const std::uint64_t n = rows * L, nb = L / static_cast<std::uint64_t>(B);
    std::vector<unsigned char> data(static_cast<std::size_t>(n / 2));
    for (auto& b : data) b = static_cast<unsigned char>(rng() % 4 == 0 ? 0 : rng());
    for (std::size_t i = 0; i < 64; ++i) data[i] = 0;  // a few zero blocks at the start
    std::vector<unsigned char> scales(static_cast<std::size_t>(rows * nb));
    for (auto& s : scales) s = static_cast<unsigned char>(B == 32 ? 125 + rng() % 3 : 0x30 + rng() % 3);
    nanscope::packed_view v;
    v.data = data.data();
    v.bytes = data.size();
    v.rank = 2;
    v.shape[0] = static_cast<std::int64_t>(rows);
    v.shape[1] = static_cast<std::int64_t>(L);
    v.scales = scales.data();
    v.scale_bytes = scales.size();
    v.block_size = B;
    v.scale_type = B == 32 ? packed_scale::e8m0 : packed_scale::e4m3;
    // the naive count of every (scale, code) pair and of the zero blocks
    std::vector<std::uint64_t> want(256 * 16, 0);
    std::uint64_t zero_blocks = 0;
    for (std::uint64_t k = 0; k < rows * nb; ++k) {
      bool zero = true;
      for (std::uint64_t i = 0; i < static_cast<std::uint64_t>(B); ++i) {
        const unsigned c = get_bits(data, k * static_cast<std::uint64_t>(B) + i, 4, packed_order::lsb_first);
        ++want[scales[static_cast<std::size_t>(k)] * 16u + c];
        zero = zero && (c & 7u) == 0;
      }
      zero_blocks += zero;
    }
    for (unsigned threads : {1u, 2u}) {
      nanscope::packed_options o;
      o.threads = threads;
      o.parallel_threshold = 0;
      const nanscope::packed_result r = nanscope::check_packed(v, o);
      std::vector<std::uint64_t> got(256 * 16, 0);
      for (const nanscope::packed_value_count& e : r.values) got[e.scale * 16u + e.code] += e.count;
      CHECK(got == want);
      CHECK(r.blocks.zero_blocks == zero_blocks);
      CHECK(r.blocks.blocks == rows * nb);
      CHECK(r.health.count == n);
    }
  }
}

TEST_CASE("packed: no scales, E8M0 tensors on their own, empty tensors") {
  const unsigned char d[2] = {0x7F, 0xF1};  // E2M1, low nibble first: 0xF (-6), 0x7 (6), 0x1 (0.5), 0xF (-6)
  nanscope::packed_view v;
  v.data = d;
  v.bytes = 2;
  v.set_shape({4});
  const nanscope::packed_result r = nanscope::check_packed(v);
  CHECK_FALSE(r.scaled);
  CHECK(r.health.max == 6.0);
  CHECK(r.health.min == -6.0);
  CHECK(r.health.positive == 2);
  CHECK(r.health.negative == 2);
  CHECK(r.count_at_or_above(6.0) == 3);
  CHECK(r.count_above(6.0) == 0);
  CHECK(r.count_above(0.5) == 3);
  const unsigned char e[4] = {127, 0xFF, 130, 0xFF};
  const nanscope::health_result h = nanscope::check_e8m0(e, 4);
  CHECK(h.nan == 2);
  CHECK(h.first_nonfinite == 1);
  CHECK(h.max == 8.0);
  nanscope::packed_view z;
  z.set_shape({0, 32});
  const nanscope::packed_result rz = nanscope::check_packed(z);
  CHECK(rz.health.count == 0);
  CHECK(rz.blocks.blocks == 0);
}

TEST_CASE("packed: a geometry that does not fit its buffers is an error naming the tensor, never a read past them") {
  std::vector<unsigned char> d(16), s(1, 127);
  nanscope::packed_view v = nanscope::packed_view::mx(d.data(), 16, element_format::e2m1, {32}, s.data(), 1);
  v.name = "layers.0.w";
  CHECK_NOTHROW(nanscope::check_packed(v));
  auto throws_with = [](const nanscope::packed_view& pv, const char* what) {
    try {
      (void)nanscope::check_packed(pv);
      return false;
    } catch (const nanscope::error& e) {
      const std::string m = e.what();
      return m.find("layers.0.w") != std::string::npos && m.find(what) != std::string::npos;
    }
  };
  nanscope::packed_view t = v;
  t.bytes = 15;  // truncated
  CHECK(throws_with(t, "packs into 16 bytes, the buffer holds 15"));
  t = v;
  t.set_shape({33});  // 33 elements need 17 bytes
  CHECK(throws_with(t, "packs into 17 bytes"));
  t = v;
  t.scale_bytes = 2;  // scales that do not match the shape
  CHECK(throws_with(t, "needs 1 scales"));
  t = v;
  t.block_size = 0;
  CHECK(throws_with(t, "block size 0"));
  t = v;
  t.shape[0] = -4;
  CHECK(throws_with(t, "negative extent"));
  // 6-bit: 5 elements are 30 bits, 4 bytes; a reader of whole 3-byte groups would read a fifth and sixth
  std::vector<unsigned char> d6(4, 0xFF), s6(1, 127);
  nanscope::packed_view v6 = nanscope::packed_view::mx(d6.data(), 4, element_format::e3m2, {5}, s6.data(), 1);
  const nanscope::packed_result r6 = nanscope::check_packed(v6);
  CHECK(r6.health.count == 5);
  CHECK(r6.health.negative == 5);
}

// The AVX-512 E2M1 kernel (blocks of 32, detail/packed_avx512.hpp) against the portable path: the raw per-(scale, code)
// and per-block tables of both on the same block ranges, and every field of check_packed()'s result, on random and
// adversarial data (every code filling a block, one code among zeros, +-0 mixes, every scale byte including 0xFF,
// runs of one scale past the 16-bit rows' flush, block counts around multiples of 16, unaligned data, no scales).
bool same_result(const nanscope::packed_result& a, const nanscope::packed_result& b) {
  const nanscope::health_result &x = a.health, &y = b.health;
  bool ok = x.count == y.count && x.nan == y.nan && x.pos_inf == y.pos_inf && x.neg_inf == y.neg_inf && x.zero == y.zero &&
            x.positive == y.positive && x.negative == y.negative && x.subnormal == y.subnormal &&
            x.any_nonfinite == y.any_nonfinite && x.first_nonfinite == y.first_nonfinite && same(x.min, y.min) &&
            same(x.max, y.max) && same(x.abs_max, y.abs_max) && same(x.abs_min, y.abs_min) &&
            same(x.abs_min_nonzero, y.abs_min_nonzero) && same(x.mean, y.mean) && same(x.std, y.std) && x.m2 == y.m2;
  const nanscope::block_format_stats &p = a.blocks, &q = b.blocks;
  ok = ok && p.blocks == q.blocks && p.elements == q.elements && p.zero_blocks == q.zero_blocks && p.nan_blocks == q.nan_blocks &&
       p.zero_scale_blocks == q.zero_scale_blocks && p.lossy_blocks == q.lossy_blocks && p.clipped == q.clipped &&
       p.flushed == q.flushed && p.subnormal == q.subnormal && p.scale_histogram == q.scale_histogram &&
       same(p.scale_exp_mean, q.scale_exp_mean) && same(p.scale_exp_std, q.scale_exp_std) && p.scale_exp_min == q.scale_exp_min &&
       p.scale_exp_max == q.scale_exp_max;
  ok = ok && a.nan_scales == b.nan_scales && a.nan_elements == b.nan_elements && a.inf_elements == b.inf_elements &&
       a.scaled == b.scaled && a.values.size() == b.values.size();
  for (std::size_t i = 0; ok && i < a.values.size(); ++i)
    ok = a.values[i].scale == b.values[i].scale && a.values[i].code == b.values[i].code && a.values[i].count == b.values[i].count &&
         same(a.values[i].value, b.values[i].value);
  return ok;
}

TEST_CASE("packed: the AVX-512 E2M1 kernel (blocks of 32) against the portable path, field by field") {
#if NANSCOPE_HAS_X86_SIMD()
  const bool have = nanscope::detail::cpu_has_avx512_pk();
#else
  const bool have = false;
#endif
  MESSAGE("AVX-512 E2M1 kernel (VBMI, VPOPCNTDQ, GFNI) on this CPU: " << std::string(have ? "yes, compared" : "no, the portable path only"));
  std::mt19937_64 rng(20261128);
  // data kinds: 0 random bytes, 1 each block one code throughout, 2 one random nibble among zeros, 3 +-0 only,
  // 4 mostly zero bytes, 5 a byte pattern per block (the same byte 16 times)
  auto fill = [&](std::vector<unsigned char>& d, std::size_t off, std::uint64_t nblocks, int kind) {
    for (std::uint64_t k = 0; k < nblocks; ++k) {
      unsigned char* p = d.data() + off + k * 16;
      const int kk = kind == 6 ? static_cast<int>(rng() % 6) : kind;
      const unsigned code = static_cast<unsigned>(rng() % 16), byte = static_cast<unsigned>(rng() % 256);
      for (int j = 0; j < 16; ++j) {
        unsigned v = 0;
        switch (kk) {
          case 0: v = static_cast<unsigned>(rng()); break;
          case 1: v = code | (code << 4); break;
          case 2: v = 0; break;
          case 3: v = (rng() % 2 ? 8u : 0u) | (rng() % 2 ? 0x80u : 0u); break;
          case 4: v = rng() % 8 == 0 ? static_cast<unsigned>(rng()) : 0u; break;
          default: v = byte; break;
        }
        p[j] = static_cast<unsigned char>(v);
      }
      if (kk == 2) {
        const unsigned j = static_cast<unsigned>(rng() % 32);
        p[j / 2] = static_cast<unsigned char>(j % 2 ? code << 4 : code);
      }
    }
  };
  int cases = 0, raw_bad = 0, res_bad = 0, path_bad = 0;
  const std::uint64_t block_counts[] = {1, 2, 15, 16, 17, 31, 32, 33, 47, 63, 64, 65, 100, 257, 1000, 2047, 2048, 2049, 5003};
  for (std::uint64_t nblk : block_counts)
    for (int kind = 0; kind <= 6; ++kind)
      for (int scales_kind = 0; scales_kind < 4; ++scales_kind) {
        // scales: 0 every byte at random, 1 one scale throughout (past the 2047-block flush), 2 a few incl. 0xFF, 3 none
        const std::size_t off = static_cast<std::size_t>(rng() % 64);  // data not aligned to anything
        std::vector<unsigned char> d(off + nblk * 16 + 64);
        fill(d, off, nblk, kind);
        std::vector<unsigned char> sc(static_cast<std::size_t>(nblk));
        const unsigned char one = static_cast<unsigned char>(rng() % 256);
        for (auto& s : sc)
          s = scales_kind == 0 ? static_cast<unsigned char>(rng()) : scales_kind == 1 ? one
              : static_cast<unsigned char>(rng() % 4 == 0 ? 0xFF : 125 + rng() % 3);
        const unsigned char* scp = scales_kind == 3 ? nullptr : sc.data();
        // the raw tables on sub-ranges: [b0, b1) with b0 not a multiple of 16
        for (int rep = 0; rep < 3; ++rep) {
          const std::uint64_t b0 = rep == 0 ? 0 : rng() % nblk, b1 = rep == 0 ? nblk : b0 + rng() % (nblk - b0 + 1);
          std::vector<std::uint64_t> c1(256 * 16, 0), c2(256 * 16, 0);
          std::uint64_t k1[256][3] = {}, k2[256][3] = {};
          nanscope::detail::pk_e2m1_blocks<16>(d.data() + off, scp, b0, b1, 16, c1.data(), k1);
#if NANSCOPE_HAS_X86_SIMD()
          if (have) nanscope::detail::pk5_e2m1_b32(d.data() + off, scp, b0, b1, c2.data(), k2);
#endif
          if (!have) continue;
          bool ok = c1 == c2;
          for (int s = 0; s < 256; ++s)
            for (int t = 0; t < 3; ++t) ok = ok && k1[s][t] == k2[s][t];
          if (!ok) ++raw_bad;
        }
        // check_packed: a row length of 32 * m elements, rows * m = nblk
        std::uint64_t m = 1;
        for (std::uint64_t f : {7u, 5u, 3u, 2u})
          if (nblk % f == 0 && rng() % 2) m *= f;
        if (nblk % m != 0) m = 1;
        const nanscope::packed_view v = nanscope::packed_view::mx(
            d.data() + off, nblk * 16, element_format::e2m1,
            {static_cast<std::int64_t>(nblk / m), static_cast<std::int64_t>(32 * m)}, scp, scp ? nblk : 0);
        for (unsigned threads : {1u, 2u, 3u}) {
          nanscope::packed_options po;
          po.threads = threads;
          po.parallel_threshold = 0;
          const nanscope::packed_result want = nanscope::check_packed(v, nanscope::packed_options(po).with_isa(nanscope::isa::scalar));
#if NANSCOPE_HAS_X86_SIMD()
          const std::uint64_t before = nanscope::detail::pk5_blocks_counted().load();
#endif
          const nanscope::packed_result got = nanscope::check_packed(v, nanscope::packed_options(po).with_isa(nanscope::isa::avx512));
#if NANSCOPE_HAS_X86_SIMD()
          // where the CPU has it, check_packed took the kernel for every block (not the portable path twice)
          if (have && nanscope::detail::pk5_blocks_counted().load() - before != nblk) ++path_bad;
#endif
          ++cases;
          if (!same_result(want, got)) {
            ++res_bad;
            MESSAGE("mismatch: blocks " << nblk << " kind " << kind << " scales " << scales_kind << " threads " << threads);
          }
        }
      }
  MESSAGE(cases << " check_packed comparisons");
  CHECK(raw_bad == 0);
  CHECK(res_bad == 0);
  CHECK(path_bad == 0);
}

}  // namespace packed_test_ns
