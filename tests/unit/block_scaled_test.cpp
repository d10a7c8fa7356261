// nanscope tests — block_scaled_test.cpp: the block-scaled formats (OCP MX v1.0, NVFP4) and check_block_scaled()
// against a reference quantizer written here from the definitions, sharing no code with the library:
//
//   - element values from the OCP MX v1.0 format tables (sign, exponent field, mantissa, bias; E4M3's only NaN
//     S.1111.111; E5M2 IEEE-like) with std::ldexp; quantization by searching the sorted list of every finite value
//     for the nearest, ties to the even code, saturating above the max;
//   - MX scales: floor(log2 amax) - emax with std::ilogb (ocp); the smallest X that does not clip, by trying X upward
//     (round_up); amax rounded to the element's mantissa width by std::nearbyint, then ilogb (even); clamped to
//     E8M0's [-127, 127];
//   - NVFP4: the f32 nearest amax / 2688 and the E4M3 nearest amax_block / (6 s_t) by searching their value lists
//     with exact products (no division whose rounding -ffast-math may change), elements against the midpoints
//     times the block's scale.
//
// Every bit pattern of each element format and of E8M0 is decoded; every f16 and bf16 pattern is checked as a
// one-element block; random and adversarial blocks (zeros, one outlier, values at and next to every rounding
// boundary, subnormal sources, NaN / inf, short last blocks, odd row lengths that cut blocks at chunk and segment
// boundaries) for every format and scale rule; 0 mismatches in every per-block field and total. Every instruction
// set and 1 / 4 threads give bit-identical results. NANSCOPE_TEST_QUICK scales the random data down.
#include "support/reference.hpp"

#include <nanscope/block_scaled.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace block_scaled_test_ns {

using nanscope::block_format;
using nanscope::dtype;
using nanscope::element_format;
using nanscope::scale_rule;
using namespace nstest;

// ---------------------------------------------------------------------------------------------------------
// Reference formats
// ---------------------------------------------------------------------------------------------------------
struct ref_fmt {
  int E, M, bias, emax;
  bool ieee_specials;  // E5M2: the top exponent field is inf / NaN
  bool e4m3_nan;       // E4M3: only S.1111.111 is NaN
};

ref_fmt ref_of(element_format f) {
  switch (f) {
    case element_format::e2m1: return {2, 1, 1, 2, false, false};
    case element_format::e2m3: return {2, 3, 1, 2, false, false};
    case element_format::e3m2: return {3, 2, 3, 4, false, false};
    case element_format::e4m3: return {4, 3, 7, 8, false, true};
    default: return {5, 2, 15, 15, true, false};
  }
}

const element_format all_elements[] = {element_format::e2m1, element_format::e2m3, element_format::e3m2,
                                       element_format::e4m3, element_format::e5m2};
const block_format all_blocks[] = {block_format::mxfp8_e4m3, block_format::mxfp8_e5m2, block_format::mxfp6_e2m3,
                                   block_format::mxfp6_e3m2, block_format::mxfp4, block_format::nvfp4};
const scale_rule all_rules[] = {scale_rule::ocp, scale_rule::round_up, scale_rule::even};

element_format element_of(block_format b) {
  switch (b) {
    case block_format::mxfp8_e4m3: return element_format::e4m3;
    case block_format::mxfp8_e5m2: return element_format::e5m2;
    case block_format::mxfp6_e2m3: return element_format::e2m3;
    case block_format::mxfp6_e3m2: return element_format::e3m2;
    default: return element_format::e2m1;
  }
}
int block_size_of(block_format b) { return b == block_format::nvfp4 ? 16 : 32; }

/// The value of a code from its fields (OCP MX v1.0, section 5.3 tables).
double ref_value(element_format f, unsigned code) {
  const ref_fmt r = ref_of(f);
  const int bits = 1 + r.E + r.M;
  const bool neg = ((code >> (bits - 1)) & 1u) != 0;
  const unsigned e = (code >> r.M) & ((1u << r.E) - 1u);
  const unsigned m = code & ((1u << r.M) - 1u);
  double v;
  if (r.ieee_specials && e == (1u << r.E) - 1u) {
    v = m == 0 ? pos_inf() : qnan();
  } else if (r.e4m3_nan && e == 15 && m == 7) {
    v = qnan();
  } else if (e == 0) {
    v = std::ldexp(static_cast<double>(m), 1 - r.bias - r.M);
  } else {
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -r.M), static_cast<int>(e) - r.bias);
  }
  return neg ? with_sign(v, true) : v;
}

/// The finite non-negative values of a format by code (codes are ordered by magnitude), built once.
const std::vector<double>& positive_values(element_format f) {
  static std::vector<double> tables[5];
  std::vector<double>& t = tables[static_cast<int>(f)];
  if (t.empty()) {
    const ref_fmt r = ref_of(f);
    for (unsigned c = 0; c < (1u << (r.E + r.M)); ++c) {
      const double v = ref_value(f, c);
      if (!is_finite(v)) break;
      t.push_back(v);
    }
  }
  return t;
}

unsigned max_code_of(element_format f) { return static_cast<unsigned>(positive_values(f).size() - 1); }
double max_of(element_format f) { return positive_values(f).back(); }

/// Nearest code to a >= 0 (finite), ties to the even code, saturating at the max. `clipped`: a above the max.
unsigned ref_quantize_mag(element_format f, double a, bool* clipped = nullptr) {
  const std::vector<double>& t = positive_values(f);
  const unsigned top = static_cast<unsigned>(t.size() - 1);
  if (clipped) *clipped = a > t[top];
  if (a >= t[top]) return top;
  // the largest value <= a
  const unsigned lo = static_cast<unsigned>(std::upper_bound(t.begin(), t.end(), a) - t.begin()) - 1;
  if (t[lo] == a) return lo;
  const double mid = (t[lo] + t[lo + 1]) / 2;  // exact: few significant bits
  if (a < mid) return lo;
  if (a > mid) return lo + 1;
  return (lo % 2 == 0) ? lo : lo + 1;
}

bool is_subnormal_code(element_format f, unsigned mag) {
  const ref_fmt r = ref_of(f);
  return mag != 0 && (mag >> r.M) == 0;
}

// ---------------------------------------------------------------------------------------------------------
// Reference scales
// ---------------------------------------------------------------------------------------------------------
/// E8M0 code of an MX block's scale; 255: NaN.
unsigned ref_mx_scale(element_format f, scale_rule rule, double amax) {
  if (!is_finite(amax)) return 255;
  if (amax == 0) return 0;
  const ref_fmt r = ref_of(f);
  int x;
  if (rule == scale_rule::ocp) {
    x = std::ilogb(amax) - r.emax;
  } else if (rule == scale_rule::even) {
    const int e = std::ilogb(amax);
    const double rounded = std::ldexp(std::nearbyint(std::ldexp(amax, r.M - e)), e - r.M);  // M mantissa bits, RNE
    x = std::ilogb(rounded) - r.emax;
  } else {
    const double mx = max_of(f);
    x = std::ilogb(amax) - r.emax - 2;
    while (std::ldexp(amax, -x) > mx) ++x;
  }
  if (x < -127) x = -127;
  if (x > 127) return 255;
  return static_cast<unsigned>(x + 127);
}

/// The f32 nearest amax / 2688 (ties to even): a bisection over the f32 patterns with exact products.
float ref_tensor_scale(double amax) {
  if (!(amax > 0) || !is_finite(amax)) return 0.0f;
  auto times = [](std::uint32_t b) { return static_cast<long double>(ref_decode_f32(b)) * 2688.0L; };  // exact
  std::uint32_t lo = 0, hi = 0x7F7FFFFFu;  // the largest pattern whose value * 2688 <= amax
  while (lo < hi) {
    const std::uint32_t mid = lo + (hi - lo + 1) / 2;
    if (times(mid) <= static_cast<long double>(amax)) lo = mid;
    else hi = mid - 1;
  }
  const long double below = static_cast<long double>(amax) - times(lo), above = times(lo + 1) - static_cast<long double>(amax);
  if (below < above || (below == above && lo % 2 == 0)) return f32_from_bits(lo);
  return f32_from_bits(lo + 1);
}

/// E4M3 code nearest amax_b / (6 s_t), ties to even, saturating at 448, by exact products with the midpoints.
unsigned ref_nv_block_scale(double amax_b, float st) {
  if (!is_finite(amax_b)) return 0x7F;
  if (amax_b == 0 || bits32(st) == 0) return 0;  // (bits: a subnormal scale is not 0 under -ffast-math)
  const double q = 6.0 * ref_decode_f32(bits32(st));
  unsigned c = 0;
  while (c < 0x7E) {
    const std::vector<double>& t = positive_values(element_format::e4m3);
    const double mid = (t[c] + t[c + 1]) / 2 * q;
    if (amax_b > mid || (amax_b == mid && (c % 2 != 0))) ++c;
    else break;
  }
  return c;
}

// ---------------------------------------------------------------------------------------------------------
// Reference blocks and tensors
// ---------------------------------------------------------------------------------------------------------
struct ref_block {
  unsigned scale = 0;
  unsigned clipped = 0, flushed = 0, sub = 0;
  bool nan = false, zero = false, zero_scale = false;
  int exp = 0;
  double amax = 0;
};

ref_block ref_eval(block_format b, scale_rule rule, const double* xs, int len, float st) {
  ref_block rb;
  const element_format el = element_of(b);
  for (int i = 0; i < len; ++i) {
    if (!is_finite(xs[i])) rb.nan = true;
    else rb.amax = std::max(rb.amax, abs_bits(xs[i]));
  }
  if (rb.nan) {
    rb.scale = b == block_format::nvfp4 ? 0x7F : 255;
    return rb;
  }
  rb.zero = rb.amax == 0;
  if (b != block_format::nvfp4) {
    rb.scale = ref_mx_scale(el, rule, rb.amax);
    if (rb.scale == 255) {
      rb.nan = true;
      return rb;
    }
    rb.exp = static_cast<int>(rb.scale) - 127;
    for (int i = 0; i < len; ++i) {
      const double a = std::ldexp(abs_bits(xs[i]), -rb.exp);  // exact: a power of two
      bool clipped = false;
      const unsigned q = ref_quantize_mag(el, a, &clipped);
      rb.clipped += clipped;
      rb.flushed += a != 0 && q == 0;
      rb.sub += is_subnormal_code(el, q);
    }
    return rb;
  }
  rb.scale = ref_nv_block_scale(rb.amax, st);
  const double sb = ref_value(element_format::e4m3, rb.scale);
  const double S = sb * ref_decode_f32(bits32(st));
  if (S == 0) {
    rb.zero_scale = !rb.zero;
    for (int i = 0; i < len; ++i) rb.flushed += abs_bits(xs[i]) != 0;
    return rb;
  }
  rb.exp = std::ilogb(sb);
  static const double vals[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (int i = 0; i < len; ++i) {
    const double a = abs_bits(xs[i]);
    rb.clipped += a > 6 * S;
    unsigned q = 0;
    while (q < 7) {
      const double mid = (vals[q] + vals[q + 1]) / 2 * S;
      if (a > mid || (a == mid && q % 2 != 0)) ++q;
      else break;
    }
    rb.flushed += a != 0 && q == 0;
    rb.sub += q == 1;
  }
  return rb;
}

struct ref_tensor {
  std::vector<ref_block> blocks;
  std::uint64_t clipped = 0, flushed = 0, sub = 0, lossy = 0, nan_blocks = 0, zero_blocks = 0, zero_scale = 0;
  std::vector<std::uint64_t> hist = std::vector<std::uint64_t>(256, 0);
  std::int64_t worst = -1;
  unsigned worst_loss = 0;
  float tensor_scale = 0.0f;
};

/// Blocks along the last dimension of a row-major [rows, L] tensor of values.
ref_tensor ref_check(block_format b, scale_rule rule, const std::vector<double>& x, std::uint64_t rows, std::uint64_t L,
                     double nv_amax = -1) {
  ref_tensor t;
  if (b == block_format::nvfp4) {
    double amax = 0;
    for (double v : x)
      if (is_finite(v)) amax = std::max(amax, abs_bits(v));
    t.tensor_scale = ref_tensor_scale(nv_amax >= 0 ? nv_amax : amax);
  }
  const std::uint64_t B = static_cast<std::uint64_t>(block_size_of(b));
  for (std::uint64_t r = 0; r < rows; ++r)
    for (std::uint64_t c = 0; c < L; c += B) {
      const int len = static_cast<int>(std::min<std::uint64_t>(B, L - c));
      const ref_block rb = ref_eval(b, rule, x.data() + r * L + c, len, t.tensor_scale);
      t.blocks.push_back(rb);
      if (rb.nan) {
        ++t.nan_blocks;
        ++t.lossy;
        continue;
      }
      if (rb.zero) {
        ++t.zero_blocks;
        continue;
      }
      if (rb.zero_scale) ++t.zero_scale;
      else ++t.hist[static_cast<std::size_t>(rb.exp + 127)];
      t.clipped += rb.clipped;
      t.flushed += rb.flushed;
      t.sub += rb.sub;
      const unsigned loss = rb.clipped + rb.flushed;
      if (loss != 0) {
        ++t.lossy;
        if (loss > t.worst_loss) {
          t.worst_loss = loss;
          t.worst = static_cast<std::int64_t>(t.blocks.size() - 1);
        }
      }
    }
  return t;
}

// ---------------------------------------------------------------------------------------------------------
// Tensors in each source dtype
// ---------------------------------------------------------------------------------------------------------
struct source {
  dtype type = dtype::f32;
  std::vector<unsigned char> bytes;
  std::vector<double> values;  // exact decoded values
};

std::uint32_t f32_bits_of(double v) { return exact_f32_bits(v); }

/// Rounds v into dtype t (f32: v must already be an f32 value or is truncated to one; f16 / bf16: nearest) and
/// appends it.
void push(source& s, double v) {
  if (s.type == dtype::f32) {
    std::uint32_t b;
    if (is_nan(v)) b = 0x7FC00000u;
    else if (is_inf(v)) b = sign_bit(v) ? 0xFF800000u : 0x7F800000u;
    else b = bits32(static_cast<float>(v));
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&b);
    s.bytes.insert(s.bytes.end(), p, p + 4);
    s.values.push_back(ref_decode_f32(b));
  } else {
    const bool f16 = s.type == dtype::f16;
    std::uint16_t h;
    if (is_nan(v)) h = f16 ? 0x7E00 : 0x7FC0;
    else if (is_inf(v)) h = static_cast<std::uint16_t>((sign_bit(v) ? 0x8000 : 0) | (f16 ? 0x7C00 : 0x7F80));
    else h = f16 ? nanscope::half::from_float(v).bits : nanscope::bfloat16::from_float(v).bits;
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&h);
    s.bytes.insert(s.bytes.end(), p, p + 2);
    s.values.push_back(f16 ? ref_decode_f16(h) : ref_decode_bf16(h));
  }
}

nanscope::tensor_view view_of(const source& s, std::uint64_t rows, std::uint64_t L) {
  return nanscope::tensor_view::contiguous(s.bytes.data(), s.type,
                                           {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(L)}, "t");
}

std::string where(block_format b, scale_rule r, dtype t, std::uint64_t L, const char* what) {
  return std::string(nanscope::name(b)) + " " + nanscope::name(r) + " " + nanscope::name(t) + " L=" +
         std::to_string(L) + " " + what;
}

/// check_block_scaled (keep_blocks) under each of `copts` against the reference (computed once per format), every
/// field; returns the mismatches.
int compare_each(const source& s, std::uint64_t rows, std::uint64_t L, scale_rule rule, const char* what,
                 const std::vector<nanscope::check_options>& copts, double nv_amax = -1) {
  std::vector<nanscope::block_scaled_result> results;
  for (const nanscope::check_options& copt : copts) {
    const auto opt = nanscope::block_scaled_options{}.with_rule(rule).with_keep_blocks().with_check(copt).with_nvfp4_tensor_amax(nv_amax);
    results.push_back(nanscope::check_block_scaled(view_of(s, rows, L), opt));
  }
  int bad = 0;
  for (block_format b : all_blocks) {
    const ref_tensor ref = ref_check(b, rule, s.values, rows, L, nv_amax);
    for (std::size_t ci = 0; ci < results.size(); ++ci) {
    const nanscope::block_format_stats* st = results[ci].find(b);
    REQUIRE(st != nullptr);
    const std::string w = where(b, rule, s.type, L, what) + " isa " + nanscope::name(copts[ci].instruction_set);
    if (st->per_block.size() != ref.blocks.size()) {
      FAIL(w << ": " << st->per_block.size() << " blocks, reference " << ref.blocks.size());
    }
    for (std::size_t i = 0; i < ref.blocks.size(); ++i) {
      const nanscope::block_record& k = st->per_block[i];
      const ref_block& e = ref.blocks[i];
      const bool ok = k.scale == e.scale && (e.nan || e.zero || (k.clipped == e.clipped && k.flushed == e.flushed && k.subnormal == e.sub));
      if (!ok && bad++ < 5)
        FAIL_CHECK(w << ": block " << i << " scale " << unsigned(k.scale) << "/" << e.scale << " clipped "
                     << unsigned(k.clipped) << "/" << e.clipped << " flushed " << unsigned(k.flushed) << "/" << e.flushed
                     << " subnormal " << unsigned(k.subnormal) << "/" << e.sub << " amax " << e.amax);
    }
    const bool totals = st->clipped == ref.clipped && st->flushed == ref.flushed && st->subnormal == ref.sub &&
                        st->lossy_blocks == ref.lossy && st->nan_blocks == ref.nan_blocks &&
                        st->zero_blocks == ref.zero_blocks && st->zero_scale_blocks == ref.zero_scale &&
                        st->blocks == ref.blocks.size() && st->worst.index == ref.worst &&
                        bits32(st->tensor_scale) == bits32(ref.tensor_scale) &&
                        std::equal(ref.hist.begin(), ref.hist.end(), st->scale_histogram.begin());
    if (!totals && bad++ < 5)
      FAIL_CHECK(w << ": totals clipped " << st->clipped << "/" << ref.clipped << " flushed " << st->flushed << "/"
                   << ref.flushed << " sub " << st->subnormal << "/" << ref.sub << " lossy " << st->lossy_blocks << "/"
                   << ref.lossy << " nan " << st->nan_blocks << "/" << ref.nan_blocks << " worst " << st->worst.index
                   << "/" << ref.worst << " ts " << st->tensor_scale << "/" << ref.tensor_scale);
    if (ref.worst >= 0 && st->worst.index == ref.worst) {
      const ref_block& e = ref.blocks[static_cast<std::size_t>(ref.worst)];
      CHECK(st->worst.clipped == e.clipped);
      CHECK(st->worst.flushed == e.flushed);
      CHECK(st->worst.abs_max == e.amax);
    }
    }
  }
  return bad;
}

/// compare_each with one check_options.
int compare(const source& s, std::uint64_t rows, std::uint64_t L, scale_rule rule, const char* what,
            nanscope::check_options copt = nanscope::check_options{}.with_threads(1), double nv_amax = -1) {
  return compare_each(s, rows, L, rule, what, {copt}, nv_amax);
}

// ---------------------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------------------
TEST_CASE("block_scaled: every element, E8M0 and E4M3-scale bit pattern decodes as the OCP tables say") {
  for (element_format f : all_elements) {
    const ref_fmt r = ref_of(f);
    const unsigned n = 1u << (1 + r.E + r.M);
    CHECK(nanscope::info(f).bits == 1 + r.E + r.M);
    for (unsigned c = 0; c < n; ++c) {
      const double want = ref_value(f, c), got = nanscope::decode(f, c);
      if (is_nan(want)) CHECK_MESSAGE(is_nan(got), nanscope::name(f) << " code " << c);
      else CHECK_MESSAGE(bits64(got) == bits64(want), nanscope::name(f) << " code " << c);
    }
    CHECK(nanscope::info(f).max_finite == max_of(f));
    CHECK(nanscope::info(f).max_code == max_code_of(f));
  }
  for (unsigned c = 0; c < 256; ++c) {
    const double got = nanscope::decode_e8m0(static_cast<std::uint8_t>(c));
    if (c == 255) CHECK(is_nan(got));
    else CHECK(bits64(got) == bits64(std::ldexp(1.0, static_cast<int>(c) - 127)));
  }
  // E4M3 is dtype::f8_e4m3fn's encoding
  for (unsigned c = 0; c < 256; ++c) {
    const double a = nanscope::decode(element_format::e4m3, c), b = ref_decode_e4m3fn(static_cast<std::uint8_t>(c));
    CHECK((is_nan(a) ? is_nan(b) : bits64(a) == bits64(b)));
  }
}

TEST_CASE("block_scaled: encode rounds to nearest even and saturates, at every rounding boundary") {
  std::mt19937_64 rng(33);
  for (element_format f : all_elements) {
    const unsigned top = max_code_of(f);
    std::vector<double> probes;
    for (unsigned c = 0; c <= top; ++c) {
      const double v = ref_value(f, c);
      probes.push_back(v);
      const double next = c < top ? ref_value(f, c + 1) : 2 * v;
      const double mid = (v + next) / 2;
      for (double p : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), std::nextafter(v, 0.0), std::nextafter(v, 1e300)})
        probes.push_back(p);
    }
    probes.push_back(1e30);
    probes.push_back(1e-300);
    for (int i = 0; i < 2000; ++i) probes.push_back(std::ldexp(std::uniform_real_distribution<double>(1, 2)(rng),
                                                               std::uniform_int_distribution<int>(-20, 20)(rng)));
    for (double p : probes) {
      for (bool neg : {false, true}) {
        const unsigned want = ref_quantize_mag(f, p) | (neg ? 1u << (nanscope::info(f).bits - 1) : 0u);
        const unsigned got = nanscope::encode(f, neg ? -p : p);
        if (got != want) FAIL_CHECK(nanscope::name(f) << " encode(" << (neg ? -p : p) << ") = " << got << ", want " << want);
      }
    }
  }
  CHECK(nanscope::encode(element_format::e4m3, qnan()) == 0x7Fu);
  CHECK(nanscope::encode(element_format::e5m2, pos_inf()) == 0x7Cu);
  CHECK(nanscope::encode(element_format::e2m1, neg_inf()) == 0xFu);
}

TEST_CASE("block_scaled: MX scale rules and NVFP4 scales against the reference") {
  std::vector<double> amaxes = {0.0, 1.0, 1.5, 1.75, 1.875, 1.9375, 2.0, 6.0, 7.0, 448.0, 449.0, 464.0, 480.0, 1e-30,
                                1e30, 3.0e38, ref_decode_f32(1), ref_decode_f32(0x007FFFFF), ref_decode_f32(0x00800000)};
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) amaxes.push_back(ref_decode_f32(static_cast<std::uint32_t>(rng()) & 0x7F7FFFFFu));
  for (int m = 0; m < 64; ++m)  // significands around every rule's switch point
    for (int e : {-130, -10, 0, 5, 100}) amaxes.push_back(std::ldexp(1.0 + m / 64.0, e));
  for (element_format f : all_elements)
    for (scale_rule rule : all_rules)
      for (double a : amaxes) {
        const unsigned want = ref_mx_scale(f, rule, a), got = nanscope::mx_scale_code(f, rule, a);
        if (got != want) FAIL_CHECK(nanscope::name(f) << " " << nanscope::name(rule) << " amax " << a << ": " << got << " want " << want);
      }
  CHECK(nanscope::mx_scale_code(element_format::e2m1, scale_rule::ocp, qnan()) == 0xFF);
  CHECK(nanscope::mx_scale_code(element_format::e2m1, scale_rule::ocp, pos_inf()) == 0xFF);
  // exact ties between E4M3 block scales, for tensor scales with few significant bits
  for (float st : {1.0f, 0.75f, 0.0009765625f, 3.0f}) {
    const double q = 6.0 * st;
    const std::vector<double>& t = positive_values(element_format::e4m3);
    for (std::size_t c = 0; c + 1 < t.size(); ++c) {
      const double mid = (t[c] + t[c + 1]) / 2 * q;
      for (double ab : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300), t[c] * q}) {
        const unsigned got = nanscope::nvfp4_block_scale(ab, st), want = ref_nv_block_scale(ab, st);
        if (got != want) FAIL_CHECK("tie: block amax " << ab << " tensor scale " << st << ": " << got << " want " << want);
      }
    }
  }
  for (double a : amaxes) {
    if (a > 3e38) continue;
    const float st = nanscope::nvfp4_tensor_scale(a);
    CHECK_MESSAGE(bits32(st) == bits32(ref_tensor_scale(a)), "tensor amax " << a);
    for (double frac : {1.0, 0.5, 0.3, 0.01, 1e-4, 1e-6, 3.0})
      for (double bump : {0.0, 1.0, -1.0}) {
        double ab = a * frac;
        if (bump != 0 && ab > 0) ab = std::nextafter(ab, bump > 0 ? 1e300 : 0.0);
        if (bits32(st) == 0) continue;
        const unsigned got = nanscope::nvfp4_block_scale(ab, st), want = ref_nv_block_scale(ab, st);
        if (got != want) FAIL_CHECK("block amax " << ab << " tensor scale " << st << ": " << got << " want " << want);
      }
  }
}

TEST_CASE("block_scaled: every f16 and bf16 pattern as a one-element block") {
  for (dtype t : {dtype::f16, dtype::bf16}) {
    source s;
    s.type = t;
    for (unsigned b = 0; b < 65536; ++b) {
      const auto h = static_cast<std::uint16_t>(b);
      const unsigned char* p = reinterpret_cast<const unsigned char*>(&h);
      s.bytes.insert(s.bytes.end(), p, p + 2);
      s.values.push_back(t == dtype::f16 ? ref_decode_f16(h) : ref_decode_bf16(h));
    }
    for (scale_rule rule : all_rules) CHECK(compare(s, 65536, 1, rule, "exhaustive") == 0);
  }
}

/// Values at, just below and just above every threshold of every format for a block whose top is `top`.
std::vector<double> boundary_values(double top) {
  std::vector<double> v;
  // a value, the midpoint to the next, and their f32 neighbours
  auto bound = [&](double a, double b) {
    const double mid = (a + b) / 2;
    for (double p : {mid, a})
      for (int d : {-1, 0, 1}) {
        const float pf = static_cast<float>(p);
        if ((bits32(pf) & 0x7F800000u) == 0x7F800000u || ref_decode_f32(bits32(pf)) != p || (bits32(pf) & 0x7FFFFFFFu) == 0) continue;
        v.push_back(ref_decode_f32(bits32(pf) + static_cast<std::uint32_t>(d)));
      }
  };
  for (element_format f : all_elements)
    for (scale_rule rule : all_rules) {
      const unsigned code = ref_mx_scale(f, rule, top);
      if (code == 255) continue;
      const double X = std::ldexp(1.0, static_cast<int>(code) - 127);
      const unsigned mx = max_code_of(f);
      for (unsigned c = 0; c <= mx; ++c) {
        const double a = ref_value(f, c) * X, b = (c < mx ? ref_value(f, c + 1) : 2 * ref_value(f, c)) * X;
        bound(a, b);
      }
    }
  // NVFP4 with a tensor scale of 1 (tensor amax 2688): the block scale of a block whose top is `top`, and the
  // elements at E2M1's values and midpoints times it
  const std::vector<double>& e4 = positive_values(element_format::e4m3);
  const std::vector<double>& e2 = positive_values(element_format::e2m1);
  const double S = e4[ref_nv_block_scale(top, 1.0f)];
  for (std::size_t k = 0; k + 1 < e2.size(); ++k) bound(e2[k] * S, e2[k + 1] * S);
  // and block tops at the E4M3 scales' midpoints times 6
  for (std::size_t c = 0; c + 1 < e4.size(); ++c) bound(e4[c] * 6, e4[c + 1] * 6);
  std::vector<double> kept;
  for (double x : v)
    if (x <= top) kept.push_back(x);
  return kept;
}

/// Block tops of the adversarial blocks: at and around the rules' switch points and the NVFP4 scale ties.
const double adversarial_tops[] = {1.0, 1.5, 1.75, 1.875, 1.9375, 5.5, 6.0, 7.0, 7.5, 0.3, 448.0, 464.0, 3.0 * 6, 3.25 * 6, 0.0625 * 6};

source make(dtype t, std::uint64_t rows, std::uint64_t L, int kind, std::mt19937_64& rng) {
  source s;
  s.type = t;
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<std::vector<double>> pools;
  if (kind == 3)
    for (double top : adversarial_tops) pools.push_back(boundary_values(top));
  std::size_t top_k = 0, plant1 = 0, plant2 = 0;
  for (std::uint64_t r = 0; r < rows; ++r)
    for (std::uint64_t c = 0; c < L; ++c) {
      double v = nd(rng);
      switch (kind) {
        case 0: break;                                      // N(0, 1)
        case 1: v = (r % 3 == 0) ? 0.0 : v; break;          // rows of zeros
        case 2: if (c % 37 == 5) v = 900.0 * (c % 2 ? -1 : 1); break;  // one outlier per block or so
        case 3: {
          // per 32-element stretch of a row: a top from the list planted once in each half, the other elements
          // from that top's boundary values (all at most the top)
          if (c % 32 == 0) {
            top_k = static_cast<std::size_t>(rng() % (sizeof adversarial_tops / sizeof adversarial_tops[0]));
            plant1 = static_cast<std::size_t>(rng() % 16);
            plant2 = 16 + static_cast<std::size_t>(rng() % 16);
          }
          const std::vector<double>& pool = pools[top_k];
          const double a = (c % 32 == plant1 || c % 32 == plant2) ? adversarial_tops[top_k]
                                                                 : pool[static_cast<std::size_t>(rng() % pool.size())];
          v = (rng() & 1) ? -a : a;
          break;
        }
        case 4: v = std::ldexp(nd(rng), t == dtype::f16 ? -18 : -130); break;  // subnormal sources
        case 5: {
          const std::uint64_t k = rng() % 64;
          v = k == 0 ? qnan() : k == 1 ? pos_inf() : k == 2 ? neg_inf() : v;
          break;
        }
        case 6: v = std::ldexp(nd(rng), static_cast<int>(rng() % 60) - 30); break;  // wide range
        default: v = std::ldexp(nd(rng), t == dtype::f16 ? 12 : 100); break;          // near the dtype's top
      }
      if (t == dtype::f16 && is_finite(v) && abs_bits(v) > 60000) v = 60000;
      push(s, v);
    }
  return s;
}

TEST_CASE("block_scaled: random and adversarial blocks, every format and rule, against the reference") {
  std::mt19937_64 rng(2024);
  const std::uint64_t Ls[] = {32, 64, 48, 40, 17, 16, 1, 1000};
  for (dtype t : {dtype::f32, dtype::bf16, dtype::f16})
    for (int kind = 0; kind < 8; ++kind)
      for (std::uint64_t L : Ls) {
        const std::uint64_t rows = std::max<std::uint64_t>(1, scaled(3000, 600) / L + 1);
        const source s = make(t, rows, L, kind, rng);
        for (scale_rule rule : all_rules) {
          const std::string what = "kind " + std::to_string(kind);
          CHECK(compare(s, rows, L, rule, what.c_str()) == 0);
          if (kind == 3)  // NVFP4's tensor scale 1: its boundaries are values of the data
            CHECK(compare(s, rows, L, rule, "kind 3, tensor amax 2688", nanscope::check_options{}.with_threads(1), 2688.0) == 0);
        }
      }
}

TEST_CASE("block_scaled: chunk and segment boundaries inside blocks, every ISA and 1 / 4 threads bit-identical") {
  std::mt19937_64 rng(5);
  for (dtype t : {dtype::f32, dtype::bf16, dtype::f16})
    for (std::uint64_t L : {std::uint64_t{1000}, std::uint64_t{4096}, std::uint64_t{8200}}) {
      const std::uint64_t rows = scaled(400000, 140000) / L;
      const source s = make(t, rows, L, static_cast<int>(rng() % 8), rng);
      nanscope::block_scaled_result base;
      bool have = false;
      for (nanscope::isa i : {nanscope::isa::scalar, nanscope::isa::avx2, nanscope::isa::avx512})
        for (unsigned th : {1u, 4u}) {
          const auto copt = nanscope::check_options{}.with_isa(i).with_threads(th).with_parallel_threshold(1);
          const auto opt = nanscope::block_scaled_options{}.with_keep_blocks().with_check(copt);
          const nanscope::block_scaled_result r = nanscope::check_block_scaled(view_of(s, rows, L), opt);
          if (!have) {
            base = r;
            have = true;
            CHECK(compare(s, rows, L, scale_rule::ocp, "segments", copt) == 0);
            continue;
          }
          for (std::size_t k = 0; k < r.formats.size(); ++k) {
            const auto& a = r.formats[k];
            const auto& b = base.formats[k];
            const std::string w = std::string(nanscope::name(a.format)) + " isa " + nanscope::name(i) + " threads " + std::to_string(th);
            CHECK_MESSAGE(a.clipped == b.clipped, w);
            CHECK_MESSAGE(a.flushed == b.flushed, w);
            CHECK_MESSAGE(a.subnormal == b.subnormal, w);
            CHECK_MESSAGE(a.lossy_blocks == b.lossy_blocks, w);
            CHECK_MESSAGE(a.scale_histogram == b.scale_histogram, w);
            CHECK_MESSAGE(bits64(a.scale_exp_mean) == bits64(b.scale_exp_mean), w);
            CHECK_MESSAGE(bits64(a.scale_exp_std) == bits64(b.scale_exp_std), w);
            CHECK_MESSAGE(a.worst.index == b.worst.index, w);
            CHECK_MESSAGE(bits64(a.worst.error_max_abs) == bits64(b.worst.error_max_abs), w);
            CHECK_MESSAGE(bits64(a.worst.error_rms) == bits64(b.worst.error_rms), w);
            CHECK_MESSAGE(bits32(a.tensor_scale) == bits32(b.tensor_scale), w);
            CHECK_MESSAGE(std::memcmp(a.per_block.data(), b.per_block.data(), a.per_block.size() * sizeof(nanscope::block_record)) == 0, w);
          }
          CHECK(r.health.count == base.health.count);
          CHECK(r.health.nan == base.health.nan);
          CHECK(bits64(r.health.abs_max) == bits64(base.health.abs_max));
        }
    }
}

TEST_CASE("block_scaled: the health part equals check(); NVFP4 with a given tensor amax") {
  std::mt19937_64 rng(9);
  const source s = make(dtype::f32, 300, 256, 2, rng);
  const auto v = view_of(s, 300, 256);
  const nanscope::health_result h = nanscope::check(v, nanscope::check_options{}.with_threads(1));
  const nanscope::block_scaled_result r =
      nanscope::check_block_scaled(v, nanscope::block_scaled_options{}.with_check(nanscope::check_options{}.with_threads(1)));
  CHECK(r.health.count == h.count);
  CHECK(bits64(r.health.mean) == bits64(h.mean));
  CHECK(bits64(r.health.std) == bits64(h.std));
  CHECK(bits64(r.health.max) == bits64(h.max));
  // a given amax: NVFP4 rides in the first read; the stale amax (half the real one) clips more
  CHECK(compare(s, 300, 256, scale_rule::ocp, "given amax", nanscope::check_options{}.with_threads(1), 450.0) == 0);
  const auto given = nanscope::check_block_scaled(v, nanscope::block_scaled_options{}.with_nvfp4_tensor_amax(450.0));
  const auto own = nanscope::check_block_scaled(v);
  CHECK(given.find(block_format::nvfp4)->clipped > own.find(block_format::nvfp4)->clipped);
}

TEST_CASE("block_scaled: column-wise blocks equal row-wise blocks of the transpose") {
  std::mt19937_64 rng(11);
  const std::uint64_t A = 70, N = 45;  // a short last block along the axis
  const source s = make(dtype::f32, A, N, 0, rng);
  source tr;
  tr.type = dtype::f32;
  for (std::uint64_t j = 0; j < N; ++j)
    for (std::uint64_t i = 0; i < A; ++i) push(tr, s.values[i * N + j]);
  const auto col = nanscope::check_block_scaled(view_of(s, A, N), nanscope::block_scaled_options{}.with_axis(0).with_keep_blocks());
  const auto row = nanscope::check_block_scaled(view_of(tr, N, A), nanscope::block_scaled_options{}.with_keep_blocks());
  CHECK(col.axis == 0);
  for (std::size_t k = 0; k < col.formats.size(); ++k) {
    const auto& a = col.formats[k];
    const auto& b = row.formats[k];
    CHECK(a.clipped == b.clipped);
    CHECK(a.flushed == b.flushed);
    CHECK(a.subnormal == b.subnormal);
    CHECK(a.scale_histogram == b.scale_histogram);
    // column-wise block (j along the axis, column i) is block i * nb + j of the transpose
    const std::uint64_t nb = (A + static_cast<std::uint64_t>(a.block_size) - 1) / static_cast<std::uint64_t>(a.block_size);
    for (std::uint64_t j = 0; j < nb; ++j)
      for (std::uint64_t i = 0; i < N; ++i) {
        const auto& x = a.per_block[j * N + i];
        const auto& y = b.per_block[i * nb + j];
        CHECK((x.scale == y.scale && x.clipped == y.clipped && x.flushed == y.flushed && x.subnormal == y.subnormal));
      }
    if (b.worst.index >= 0) {
      const std::uint64_t i = static_cast<std::uint64_t>(b.worst.index) / nb, j = static_cast<std::uint64_t>(b.worst.index) % nb;
      CHECK(a.worst.clipped + a.worst.flushed == b.worst.clipped + b.worst.flushed);
      (void)i;
      (void)j;
      CHECK(s.values[static_cast<std::size_t>(a.worst.first_element)] != 0.0);
    }
  }
}

TEST_CASE("block_scaled: the worst block's quantization error") {
  // one block of 32: 31 values 1.0 and one outlier 1000: MXFP4 (OCP) scale 2^(9 - 2) = 128, 1000 / 128 = 7.8 clips
  // to 6 (768), the ones flush (1 / 128 < 0.25)
  std::vector<float> x(64, 1.0f);
  x[3] = 1000.0f;
  const auto r = nanscope::check_block_scaled(nanscope::view_of(x.data(), {2, 32}));
  const auto* fp4 = r.find(block_format::mxfp4);
  REQUIRE(fp4 != nullptr);
  CHECK(fp4->worst.index == 0);
  CHECK(fp4->worst.first_element == 0);
  CHECK(fp4->worst.clipped == 1);
  CHECK(fp4->worst.flushed == 31);
  CHECK(fp4->worst.scale == 127 + 7);
  CHECK(fp4->worst.error_max_abs == 232.0);  // 1000 - 768
  CHECK(fp4->worst.error_rms == doctest::Approx(std::sqrt((232.0 * 232.0 + 31.0) / 32.0)));
  CHECK(fp4->lossy_blocks == 1);
  CHECK(fp4->lossy_fraction() == 0.5);
  CHECK(fp4->at(0) == 0);
  CHECK(fp4->at(7) == 1);
  CHECK(fp4->at(-2) == 1);  // the row of ones: floor(log2 1) - 2
}

TEST_CASE("block_scaled: errors name the tensor") {
  std::vector<float> x(10, 1.0f);
  std::vector<int> ints(10, 1);
  const auto v = nanscope::view_of(x.data(), {2, 5}, "acts");
  CHECK_THROWS_WITH_AS(nanscope::check_block_scaled(v, nanscope::block_scaled_options{}.with_axis(2)),
                       "nanscope: tensor 'acts': check_block_scaled: axis 2 is out of range for rank 2", nanscope::error);
  CHECK_THROWS_AS(nanscope::check_block_scaled(nanscope::view_of(ints.data(), {10}, "ids")), nanscope::error);
  CHECK_THROWS_AS(nanscope::check_block_scaled(v, nanscope::block_scaled_options{}.with_check(
                                                      nanscope::check_options{}.with_mode(nanscope::check_mode::curt_health))),
                  nanscope::error);
  CHECK_THROWS_AS(nanscope::check_block_scaled(v, nanscope::block_scaled_options{}.with_formats({})), nanscope::error);
  // an empty tensor: no blocks
  const auto e = nanscope::check_block_scaled(nanscope::view_of(x.data(), {0, 5}));
  CHECK(e.find(block_format::mxfp4)->blocks == 0);
}

}  // namespace block_scaled_test_ns

namespace block_scaled_test_ns {

/// Every field of two results, bit for bit; returns the mismatching fields (named in the failure messages).
int same_results(const nanscope::block_scaled_result& a, const nanscope::block_scaled_result& b, const std::string& what) {
  int bad = 0;
  auto check = [&](bool ok, const std::string& field) {
    if (!ok && bad++ < 5) FAIL_CHECK(what << ": " << field);
  };
  check(a.formats.size() == b.formats.size(), "format count");
  for (std::size_t k = 0; k < a.formats.size() && k < b.formats.size(); ++k) {
    const auto& x = a.formats[k];
    const auto& y = b.formats[k];
    const std::string f = nanscope::name(x.format);
    check(x.blocks == y.blocks && x.elements == y.elements, f + " blocks");
    check(x.zero_blocks == y.zero_blocks && x.nan_blocks == y.nan_blocks && x.zero_scale_blocks == y.zero_scale_blocks,
          f + " zero / nan blocks");
    check(x.clipped == y.clipped, f + " clipped");
    check(x.flushed == y.flushed, f + " flushed");
    check(x.subnormal == y.subnormal, f + " subnormal");
    check(x.lossy_blocks == y.lossy_blocks, f + " lossy blocks");
    check(x.scale_histogram == y.scale_histogram, f + " histogram");
    check(bits64(x.scale_exp_mean) == bits64(y.scale_exp_mean) && bits64(x.scale_exp_std) == bits64(y.scale_exp_std) &&
              x.scale_exp_min == y.scale_exp_min && x.scale_exp_max == y.scale_exp_max,
          f + " exponent statistics");
    check(bits32(x.tensor_scale) == bits32(y.tensor_scale), f + " tensor scale");
    check(x.worst.index == y.worst.index && x.worst.first_element == y.worst.first_element &&
              x.worst.elements == y.worst.elements && x.worst.scale == y.worst.scale && x.worst.clipped == y.worst.clipped &&
              x.worst.flushed == y.worst.flushed && bits64(x.worst.abs_max) == bits64(y.worst.abs_max) &&
              bits64(x.worst.error_max_abs) == bits64(y.worst.error_max_abs) &&
              bits64(x.worst.error_rms) == bits64(y.worst.error_rms),
          f + " worst block");
    check(x.per_block.size() == y.per_block.size() &&
              (x.per_block.empty() || std::memcmp(x.per_block.data(), y.per_block.data(), x.per_block.size() * sizeof(nanscope::block_record)) == 0),
          f + " per-block records");
  }
  check(a.health.count == b.health.count && a.health.nan == b.health.nan && bits64(a.health.abs_max) == bits64(b.health.abs_max),
        "health");
  return bad;
}

TEST_CASE("block_scaled: the AVX2 and AVX-512 paths run and are bit-identical to the portable loop (formats, rules, dtypes, axes)") {
  // every source dtype of the vector paths, every data kind (zeros, outliers, rounding boundaries, subnormal sources,
  // NaN / inf, wide and top ranges), row lengths with partial blocks, both axes, both NVFP4 tensor-scale sources, and
  // with and without per-block records (the vector paths account blocks differently when records are kept); each
  // instruction set on the same data, against the same portable result and the same reference
  std::mt19937_64 rng(77);
  const std::uint64_t Ls[] = {256, 48, 1000, 17};
  std::vector<nanscope::isa> isas;  // the vector paths this CPU has (an isa it lacks would silently fall back)
#if NANSCOPE_HAS_X86_SIMD()
  const bool have_avx2 = nanscope::detail::cpu_has_avx2();
  const bool have_avx512 = have_avx2 && nanscope::detail::cpu_has_avx512();
  if (have_avx2) isas.push_back(nanscope::isa::avx2);
  if (have_avx512) isas.push_back(nanscope::isa::avx512);
  if (!have_avx2) MESSAGE("this CPU has no AVX2: neither vector path is tested here, only the portable loop runs");
  else if (!have_avx512) MESSAGE("this CPU has no AVX-512: the AVX-512 path is NOT tested here (only AVX2 against the portable loop)");
  std::atomic<std::uint64_t>* counters[] = {&nanscope::detail::bs_vector_units(), &nanscope::detail::bs_vector_units_avx512()};
#endif
  std::vector<nanscope::check_options> vec_opts;
  for (nanscope::isa i : isas) vec_opts.push_back(nanscope::check_options{}.with_threads(1).with_isa(i));
  for (dtype t : {dtype::f32, dtype::bf16, dtype::f16})
    for (int kind = 0; kind < 8; ++kind)
      for (std::uint64_t L : Ls) {
        const std::uint64_t rows = std::max<std::uint64_t>(2, scaled(40000, 8000) / L + 1);
        const source s = make(t, rows, L, kind, rng);
        for (scale_rule rule : all_rules)
          for (int axis : {-1, 0})
            for (double nv_amax : {-1.0, 2688.0})
              for (bool keep : {false, true}) {
                if (axis == 0 && (nv_amax > 0 || keep)) continue;  // (fewer column-wise runs: it is the slow pass)
                auto opt = nanscope::block_scaled_options{}.with_rule(rule).with_axis(axis).with_keep_blocks(keep)
                               .with_nvfp4_tensor_amax(nv_amax);
                opt.check = nanscope::check_options{}.with_threads(1).with_isa(nanscope::isa::scalar);
                const auto ref = nanscope::check_block_scaled(view_of(s, rows, L), opt);
                const std::string what = std::string(nanscope::name(t)) + " kind " + std::to_string(kind) + " L=" +
                                         std::to_string(L) + " " + nanscope::name(rule) + " axis " + std::to_string(axis) +
                                         " nv_amax " + std::to_string(nv_amax) + (keep ? " records" : "");
                for (std::size_t ii = 0; ii < isas.size(); ++ii) {
                  opt.check = vec_opts[ii];
#if NANSCOPE_HAS_X86_SIMD()
                  const std::uint64_t before = counters[ii]->load();
#endif
                  const auto vec = nanscope::check_block_scaled(view_of(s, rows, L), opt);
#if NANSCOPE_HAS_X86_SIMD()
                  // the path of this isa took blocks (not the other one, not the portable loop)
                  if ((axis < 0 ? L : rows) >= 32) CHECK_MESSAGE(counters[ii]->load() > before, nanscope::name(isas[ii]) << " " << what);
#endif
                  CHECK(same_results(ref, vec, what + " isa " + nanscope::name(isas[ii])) == 0);
                }
              }
        // and the vector paths against the independent reference, every rule (records compared block by block); the
        // instruction sets take turns by rule and data kind (each is bit-identical to the portable loop above anyway)
        int turn = kind;
        if (!vec_opts.empty())
          for (scale_rule rule : all_rules)
            CHECK(compare(s, rows, L, rule, "vector", vec_opts[static_cast<std::size_t>(turn++) % vec_opts.size()]) == 0);
      }
}

TEST_CASE("block_scaled: the portable loop alone when the instruction set is scalar") {
#if NANSCOPE_HAS_X86_SIMD()
  std::vector<float> x(4096, 1.5f);
  const std::uint64_t before = nanscope::detail::bs_vector_units().load();
  (void)nanscope::check_block_scaled(nanscope::view_of(x.data(), {16, 256}), nanscope::block_scaled_options{}.with_check(
                                                                                  nanscope::check_options{}.with_isa(nanscope::isa::scalar)));
  CHECK(nanscope::detail::bs_vector_units().load() == before);
#endif
}

}  // namespace block_scaled_test_ns
