// nanscope — packed.hpp: checks block-scaled tensors as checkpoints and kernels store them (packed E2M1 / E2M3 / E3M2 /
// E4M3 / E5M2 elements, E8M0 or E4M3 block scales in their own buffer), decoded exactly. docs/block-scaled.md.
//
//   nanscope::packed_view p = nanscope::packed_view::mx(weight_bytes, nbytes, nanscope::element_format::e2m1,
//                                                        {4096, 4096}, scale_bytes, nscales);
//   nanscope::packed_result r = nanscope::check_packed(p);
//   r.nan_scales;               // blocks whose E8M0 scale is 0xFF (NaN): all their elements decode to NaN
//   r.health.nan;               // decoded NaN elements (NaN scales, E4M3/E5M2 NaN codes)
//   r.blocks.scale_exp_std;     // the spread of the block scale exponents
//
// Packing (the bit order of safetensors' F4 / F6_* and of PyTorch's float4_e2m1fn_x2): the elements form a little-endian
// bit stream, element i in bits [i * w, i * w + w) counted from bit 0 of byte 0 (packed_order::lsb_first): E2M1 element
// 2k in the low nibble of byte k, 2k + 1 in the high nibble; E2M3 / E3M2 four elements in three bytes, element 4k + j in
// bits 6j..6j+5 of the 24-bit little-endian word of bytes 3k..3k+2. packed_order::msb_first is the other stream (first
// element in the high bits: torchao's pack_uint6). Scales: one per block of `block_size` consecutive elements along the
// last dimension (a row's last block may be shorter), row-major [rows, ceil(last / block_size)].
//
// Every count is an integer from exact compares of codes; the statistics come from a table of (scale, code) counts, so
// they are the same for every thread count and under -ffast-math. Needs only the standard library.
#ifndef NANSCOPE_PACKED_HPP
#define NANSCOPE_PACKED_HPP

#include "block_scaled.hpp"
#include "block_scaled_formats.hpp"
#include "config.hpp"
#include "dtype.hpp"
#include "health.hpp"
#include "detail/packed_avx512.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// The bit order of packed elements narrower than a byte (see the top of packed.hpp).
enum class packed_order : std::uint8_t { lsb_first, msb_first };

/// The type of the block scales: E8M0 (OCP MX: 2^(code - 127), 0xFF NaN) or E4M3 (NVFP4, times the per-tensor scale).
enum class packed_scale : std::uint8_t { e8m0, e4m3 };

/// A packed block-scaled tensor and its scales, as stored. No ownership; nothing is read outside
/// [data, data + bytes) and [scales, scales + scale_bytes).
struct packed_view {
  const void* data = nullptr;
  std::uint64_t bytes = 0;  ///< must be ceil(numel * bits / 8)
  element_format element = element_format::e2m1;
  packed_order order = packed_order::lsb_first;
  int rank = 0;
  std::int64_t shape[max_rank] = {};  ///< in elements (not bytes)
  const void* scales = nullptr;       ///< nullptr: no scales, every element is checked at scale 1
  std::uint64_t scale_bytes = 0;      ///< must be rows * ceil(shape[rank - 1] / block_size)
  packed_scale scale_type = packed_scale::e8m0;
  int block_size = 32;
  float tensor_scale = 1.0f;  ///< E4M3 scales: the per-tensor decode factor (NVFP4's weight_scale_2); ignored for E8M0
  const char* name = "";

  std::uint64_t numel() const {
    std::uint64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= static_cast<std::uint64_t>(shape[i]);
    return n;
  }
  /// OCP MX: E8M0 scales, blocks of 32.
  static packed_view mx(const void* data, std::uint64_t bytes, element_format el, std::initializer_list<std::int64_t> shape,
                        const void* scales, std::uint64_t scale_bytes) {
    packed_view p;
    p.data = data;
    p.bytes = bytes;
    p.element = el;
    p.set_shape(shape);
    p.scales = scales;
    p.scale_bytes = scale_bytes;
    return p;
  }
  /// NVFP4: E2M1 elements, E4M3 scales per block of 16, a per-tensor f32 decode factor.
  static packed_view nvfp4(const void* data, std::uint64_t bytes, std::initializer_list<std::int64_t> shape, const void* scales,
                           std::uint64_t scale_bytes, float tensor_scale) {
    packed_view p = mx(data, bytes, element_format::e2m1, shape, scales, scale_bytes);
    p.scale_type = packed_scale::e4m3;
    p.block_size = 16;
    p.tensor_scale = tensor_scale;
    return p;
  }
  packed_view& set_shape(std::initializer_list<std::int64_t> s) {
    rank = 0;
    for (std::int64_t e : s)
      if (rank < max_rank) shape[rank++] = e;
    return *this;
  }
};

/// How many elements of one decoded value a tensor holds: `count` elements with element code `code` in blocks whose
/// scale byte is `scale`, each decoding to `value` (exact).
struct packed_value_count {
  std::uint8_t scale = 0;
  std::uint8_t code = 0;
  std::uint64_t count = 0;
  double value = 0.0;
};

/// The result of check_packed().
struct packed_result {
  /// The health of the decoded values (STATS: counts, min, max, abs_max, mean, std, first_nonfinite; type f64, since
  /// every decoded value is exact in a double). `subnormal` counts the elements stored as a subnormal code of the
  /// element format.
  health_result health;
  /// The per-block statistics of block_scaled.hpp that apply to stored data: blocks, elements, zero_blocks, nan_blocks
  /// (a NaN scale or a NaN/Inf element), zero_scale_blocks (an E4M3 scale of 0 over non-zero elements), lossy_blocks
  /// (either), subnormal, the scale-exponent histogram and its mean/std/min/max. `clipped` counts the elements stored
  /// at +-max (where clipped values land: an upper bound of the clipped ones); `flushed` is 0 (a stored zero does not
  /// tell what it was); `worst` is empty.
  block_format_stats blocks;
  std::uint64_t nan_scales = 0;    ///< blocks whose scale is NaN (E8M0 0xFF, E4M3 S.1111.111)
  std::uint64_t nan_elements = 0;  ///< element codes that are NaN (E4M3 / E5M2 elements only)
  std::uint64_t inf_elements = 0;  ///< element codes that are infinite (E5M2 only)
  bool scaled = true;              ///< false: the view had no scales (every value at scale 1)
  std::vector<packed_value_count> values;  ///< every (scale, code) pair present, by scale then code

  /// Finite decoded values with |v| >= threshold (e.g. dtype_info::overflow_threshold: what a cast to f16, bf16 or
  /// e5m2 would overflow).
  std::uint64_t count_at_or_above(double threshold) const { return count_beyond(threshold, true); }
  /// Finite decoded values with |v| > threshold (e4m3fn: a tie at its threshold 464 rounds down to 448).
  std::uint64_t count_above(double threshold) const { return count_beyond(threshold, false); }

 private:
  std::uint64_t count_beyond(double threshold, bool inclusive) const {
    std::uint64_t n = 0;
    for (const packed_value_count& v : values) {
      const std::uint64_t b = detail::double_to_bits(v.value) & 0x7FFFFFFFFFFFFFFFull;
      if (b >= 0x7FF0000000000000ull) continue;
      const double a = detail::bits_to_double(b);
      if (a > threshold || (inclusive && a == threshold)) n += v.count;
    }
    return n;
  }
};

/// Options of check_packed().
struct packed_options {
  unsigned threads = 0;  ///< 0: nanscope's default (NANSCOPE_THREADS or the hardware threads)
  std::uint64_t parallel_threshold = std::uint64_t{1} << 22;  ///< fewer elements: one thread
  /// isa::avx512 (what automatic picks where the CPU has it, and VBMI, VPOPCNTDQ and GFNI): E2M1 in blocks of 32 is
  /// counted by the AVX-512 kernel (detail/packed_avx512.hpp); any other: the portable code. The results are the same.
  isa instruction_set = isa::automatic;
  packed_options& with_isa(isa i) {
    instruction_set = i;
    return *this;
  }
  packed_options& with_threads(unsigned t) {
    threads = t;
    return *this;
  }
};

namespace detail {

inline int pk_bits(element_format f) { return info(f).bits; }

/// Element code i of a packed stream (the caller guarantees i < numel, and bytes >= ceil(numel * bits / 8)): reads only
/// the bytes that hold its bits.
inline unsigned pk_code(const unsigned char* d, int bits, packed_order order, std::uint64_t i) {
  if (bits == 8) return d[i];
  const std::uint64_t p = i * static_cast<std::uint64_t>(bits);
  const std::uint64_t byte = p >> 3;
  const unsigned sh = static_cast<unsigned>(p & 7u);
  const unsigned mask = (1u << bits) - 1u;
  const bool two = sh + static_cast<unsigned>(bits) > 8u;
  if (order == packed_order::lsb_first) {
    unsigned w = d[byte];
    if (two) w |= static_cast<unsigned>(d[byte + 1]) << 8;
    return (w >> sh) & mask;
  }
  unsigned w = static_cast<unsigned>(d[byte]) << 8;
  if (two) w |= d[byte + 1];
  return (w >> (16u - sh - static_cast<unsigned>(bits))) & mask;
}

/// Exact value of a scale byte (E8M0, or E4M3 times the tensor scale); NaN for the NaN codes.
inline double pk_scale_value(packed_scale t, std::uint8_t s, float tensor_scale) {
  if (t == packed_scale::e8m0) return decode_e8m0(s);
  return decode(element_format::e4m3, s) * f32_bits_to_double(float_to_bits(tensor_scale));
}

inline bool pk_scale_nan(packed_scale t, std::uint8_t s) {
  return t == packed_scale::e8m0 ? s == 0xFF : (s & 0x7Fu) == 0x7Fu;
}

/// Per element code: 1 NaN, 2 +-inf, 0 finite.
inline int pk_code_kind(element_format f, unsigned c) {
  if (f == element_format::e4m3) return (c & 0x7Fu) == 0x7Fu ? 1 : 0;
  if (f == element_format::e5m2) return (c & 0x7Fu) > 0x7Cu ? 1 : (c & 0x7Fu) == 0x7Cu ? 2 : 0;
  return 0;
}

/// One worker's tables: code counts by scale byte (E2M1 and 8-bit elements: byte counts, folded at the end), and block
/// counts by scale byte: [0] all-zero blocks, [1] other blocks, [2] blocks with a NaN/Inf element code.
struct pk_state {
  std::vector<std::uint64_t> counts;  // [256][256] bytes (4 / 8-bit fast path) or [256][64] codes
  std::vector<std::uint64_t> codes;   // [256][2^bits] codes (generic path)
  std::uint64_t blocks[256][3] = {};
};

#if (defined(__GNUC__) || defined(__clang__)) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define NANSCOPE_PK_VECTOR 1
/// 16 counters of 8 bits (a GNU vector, one SSE2 register): lane c counts E2M1 code c within one block (at most 254
/// elements, so a lane never wraps); and 8 counters of 16 bits for the per-scale sums of blocks.
typedef std::uint8_t pk_u8x16 __attribute__((vector_size(16)));
typedef std::uint16_t pk_u16x8 __attribute__((vector_size(16)));

/// For each byte: how many of its two nibbles are each code (lane c: (lo == c) + (hi == c)).
inline const pk_u8x16* pk_nibble_table() {
  static const struct tab {
    pk_u8x16 t[256];
    tab() : t() {
      for (unsigned b = 0; b < 256; ++b) {
        t[b][b & 15u] = static_cast<std::uint8_t>(t[b][b & 15u] + 1);
        t[b][b >> 4] = static_cast<std::uint8_t>(t[b][b >> 4] + 1);
      }
    }
  } table;
  return table.t;
}

/// The code counts of one block of BB bytes (BB known: the loop unrolls), or of bb bytes.
template <int BB>
inline pk_u8x16 pk_block_counts(const pk_u8x16* tab, const unsigned char* p, std::uint64_t) {
  // four partial sums: the additions of one block do not wait on each other in one chain
  static_assert(BB % 4 == 0, "a multiple of 4 bytes");
  pk_u8x16 a0 = tab[p[0]], a1 = tab[p[1]], a2 = tab[p[2]], a3 = tab[p[3]];
  for (int j = 4; j < BB; j += 4) {
    a0 += tab[p[j]];
    a1 += tab[p[j + 1]];
    a2 += tab[p[j + 2]];
    a3 += tab[p[j + 3]];
  }
  return (a0 + a1) + (a2 + a3);
}
template <>
inline pk_u8x16 pk_block_counts<0>(const pk_u8x16* tab, const unsigned char* p, std::uint64_t bb) {
  pk_u8x16 a = tab[p[0]];
  for (std::uint64_t j = 1; j < bb; ++j) a += tab[p[j]];
  return a;
}

/// E2M1 in whole blocks of bytes: a block's code counts are the sum of its bytes' table rows (no store per byte);
/// they are added, as 16-bit even and odd lanes, to the row of the block's scale, and the 16-bit rows are emptied
/// into the 64-bit counts (codes[scale * 16 + code]) before they can overflow.
template <int BB>
inline void pk_e2m1_blocks(const unsigned char* d, const unsigned char* sc, std::uint64_t b0, std::uint64_t b1, std::uint64_t bb,
                           std::uint64_t* codes, std::uint64_t (*blocks)[3]) {
  const pk_u8x16* tab = pk_nibble_table();
  const std::uint64_t B = 2 * bb;
  struct row {
    pk_u16x8 even, odd;
  };
  std::vector<row> acc(256, row{pk_u16x8{}, pk_u16x8{}});
  std::vector<unsigned char> touched(256, 0);
  const std::uint64_t flush_every = 65535 / B;
  std::uint64_t since = 0;
  auto flush = [&]() {
    for (std::size_t s = 0; s < 256; ++s) {
      if (!touched[s]) continue;
      for (int i = 0; i < 8; ++i) {
        codes[s * 16 + static_cast<std::size_t>(2 * i)] += acc[s].even[i];
        codes[s * 16 + static_cast<std::size_t>(2 * i + 1)] += acc[s].odd[i];
      }
      acc[s].even = pk_u16x8{};
      acc[s].odd = pk_u16x8{};
      touched[s] = 0;
    }
    since = 0;
  };
  const pk_u16x8 low = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  for (std::uint64_t k = b0; k < b1; ++k) {
    const std::uint8_t s = sc != nullptr ? sc[k] : 127;
    const pk_u8x16 a = pk_block_counts<BB>(tab, d + k * bb, bb);
    pk_u16x8 w;
    std::memcpy(&w, &a, sizeof w);
    acc[s].even += w & low;
    acc[s].odd += w >> 8;
    touched[s] = 1;
    ++blocks[s][static_cast<std::uint64_t>(a[0]) + a[8] == B ? 0 : 1];
    if (++since == flush_every) flush();
  }
  flush();
}
#else
#define NANSCOPE_PK_VECTOR 0
#endif

struct pk_job {
  const packed_view* v;
  int bits;
  std::uint64_t L, nb, rows;  // row length, blocks per row, rows
  bool fast;                  // every block a whole run of bytes of B * bits / 8
  bool avx512;                // E2M1 blocks of 32: the AVX-512 kernel
  std::uint64_t total_blocks, part;
  std::vector<pk_state>* states;
};

inline void pk_task(void* vctx, std::size_t t) {
  auto* job = static_cast<pk_job*>(vctx);
  const packed_view& v = *job->v;
  pk_state& st = (*job->states)[t];
  const auto* d = static_cast<const unsigned char*>(v.data);
  const auto* sc = static_cast<const unsigned char*>(v.scales);
  const int bits = job->bits;
  const element_format el = v.element;
  const bool fp8 = bits == 8;
  const std::uint64_t b0 = static_cast<std::uint64_t>(t) * job->part;
  const std::uint64_t b1 = (std::min)(job->total_blocks, b0 + job->part);
  if (b0 >= b1) return;
  const std::uint64_t B = static_cast<std::uint64_t>(v.block_size);
#if NANSCOPE_PK_VECTOR
  if (job->fast && bits == 4 && B <= 254) {
    // E2M1 in whole blocks of bytes, by table rows (pk_e2m1_blocks); blocks of 16 and 32 unrolled
    st.codes.assign(256 * 16, 0);
    const std::uint64_t bb = B / 2;
#if NANSCOPE_HAS_X86_SIMD()
    if (bb == 16 && job->avx512) {
      pk5_e2m1_b32(d, sc, b0, b1, st.codes.data(), st.blocks);
      return;
    }
#endif
    if (bb == 16) pk_e2m1_blocks<16>(d, sc, b0, b1, bb, st.codes.data(), st.blocks);
    else if (bb == 8) pk_e2m1_blocks<8>(d, sc, b0, b1, bb, st.codes.data(), st.blocks);
    else pk_e2m1_blocks<0>(d, sc, b0, b1, bb, st.codes.data(), st.blocks);
    return;
  }
#endif
  if (job->fast && bits != 6) {
    // whole blocks of bytes: count bytes per scale byte (a byte is two E2M1 codes or one 8-bit code)
    st.counts.assign(256 * 256, 0);
    const std::uint64_t bb = B * static_cast<std::uint64_t>(bits) / 8;
    const unsigned char mag = bits == 4 ? 0x77 : 0x7F;
    for (std::uint64_t k = b0; k < b1; ++k) {
      const std::uint8_t s = sc != nullptr ? sc[k] : 127;
      std::uint64_t* h = st.counts.data() + static_cast<std::size_t>(s) * 256;
      const unsigned char* p = d + k * bb;
      unsigned any = 0, bad = 0;
      for (std::uint64_t j = 0; j < bb; ++j) {
        const unsigned char c = p[j];
        ++h[c];
        any |= c & mag;
        if (fp8) bad |= static_cast<unsigned>(pk_code_kind(el, c));
      }
      ++st.blocks[s][bad != 0 ? 2 : any != 0 ? 1 : 0];
    }
    return;
  }
  // generic: element by element (6-bit elements, partial blocks, rows that do not start on a byte)
  st.codes.assign(static_cast<std::size_t>(256) << bits, 0);
  const unsigned mag = (1u << (bits - 1)) - 1u;
  for (std::uint64_t k = b0; k < b1; ++k) {
    const std::uint64_t r = k / job->nb, j = k % job->nb;
    const std::uint64_t first = r * job->L + j * B;
    const std::uint64_t len = (std::min)(B, job->L - j * B);
    const std::uint8_t s = sc != nullptr ? sc[k] : 127;
    std::uint64_t* h = st.codes.data() + (static_cast<std::size_t>(s) << bits);
    unsigned any = 0, bad = 0;
    for (std::uint64_t i = 0; i < len; ++i) {
      const unsigned c = pk_code(d, bits, v.order, first + i);
      ++h[c];
      any |= c & mag;
      bad |= static_cast<unsigned>(pk_code_kind(el, c));
    }
    ++st.blocks[s][bad != 0 ? 2 : any != 0 ? 1 : 0];
  }
}

/// The health of a list of (value, count) pairs (exact values), in the list's order: deterministic.
inline void pk_health(const std::vector<packed_value_count>& vals, health_result& h) {
  long double sum = 0.0L;
  std::uint64_t finite = 0;
  for (const packed_value_count& e : vals) {
    const std::uint64_t b = double_to_bits(e.value);
    const std::uint64_t a = b & 0x7FFFFFFFFFFFFFFFull;
    const bool neg = (b >> 63) != 0;
    if (a > 0x7FF0000000000000ull) {
      h.nan += e.count;
      continue;
    }
    if (a == 0x7FF0000000000000ull) {
      (neg ? h.neg_inf : h.pos_inf) += e.count;
      continue;
    }
    if (a == 0) h.zero += e.count;
    else (neg ? h.negative : h.positive) += e.count;
    const double x = e.value, ax = bits_to_double(a);
    h.min = min_non_nan(h.min, x);
    h.max = max_non_nan(h.max, x);
    h.abs_max = max_non_nan(h.abs_max, ax);
    h.abs_min = min_non_nan(h.abs_min, ax);
    if (a != 0) h.abs_min_nonzero = min_non_nan(h.abs_min_nonzero, ax);
    sum += static_cast<long double>(x) * static_cast<long double>(e.count);
    finite += e.count;
  }
  h.any_nonfinite = h.nan + h.pos_inf + h.neg_inf != 0;
  if (finite != 0) {
    const long double mean = sum / static_cast<long double>(finite);
    h.mean = static_cast<double>(mean);
    long double m2 = 0.0L;
    for (const packed_value_count& e : vals) {
      const std::uint64_t a = double_to_bits(e.value) & 0x7FFFFFFFFFFFFFFFull;
      if (a >= 0x7FF0000000000000ull) continue;
      const long double dv = static_cast<long double>(e.value) - mean;
      m2 += dv * dv * static_cast<long double>(e.count);
    }
    h.m2 = m2;
    h.std = std_from(finite, m2);
  }
}

inline std::string pk_shape_text(const packed_view& v) {
  std::string s = "[";
  for (int i = 0; i < v.rank; ++i) s += (i ? ", " : "") + std::to_string(v.shape[i]);
  return s + "]";
}

}  // namespace detail

/// Checks a packed view's geometry: a rank of at least 1 with non-negative extents, a byte count of exactly
/// ceil(numel * bits / 8), a block size in [1, 256], and (with scales) one scale byte per block. Throws nanscope::error
/// naming the tensor (the bytes the shape needs and the bytes given).
inline void validate(const packed_view& v) {
  if (v.rank < 1 || v.rank > max_rank) detail::fail(v.name, "a packed tensor needs a rank in [1, " + std::to_string(max_rank) + "]");
  if (static_cast<unsigned>(v.element) >= static_cast<unsigned>(element_format_count))
    detail::fail(v.name, "unknown element format");
  if (v.block_size < 1 || v.block_size > 256)
    detail::fail(v.name, "block size " + std::to_string(v.block_size) + " is outside [1, 256]");
  const std::uint64_t bits = static_cast<std::uint64_t>(detail::pk_bits(v.element));
  std::uint64_t n = 1;
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0) detail::fail(v.name, "negative extent in shape " + detail::pk_shape_text(v));
    const auto e = static_cast<std::uint64_t>(v.shape[i]);
    if (e != 0 && n > (std::uint64_t{1} << 60) / e) detail::fail(v.name, "shape " + detail::pk_shape_text(v) + " is too large");
    n *= e;
  }
  const std::uint64_t need = (n * bits + 7) / 8;
  if (v.bytes != need)
    detail::fail(v.name, std::string(name(v.element)) + " " + detail::pk_shape_text(v) + " packs into " + std::to_string(need) +
                             " bytes, the buffer holds " + std::to_string(v.bytes));
  if (need != 0 && v.data == nullptr) detail::fail(v.name, "null data");
  if (v.scales != nullptr || v.scale_bytes != 0) {
    const std::uint64_t L = static_cast<std::uint64_t>(v.shape[v.rank - 1]);
    const std::uint64_t B = static_cast<std::uint64_t>(v.block_size);
    const std::uint64_t nb = (L + B - 1) / B, rows = L == 0 ? 0 : n / L;
    if (v.scale_bytes != rows * nb)
      detail::fail(v.name, detail::pk_shape_text(v) + " in blocks of " + std::to_string(B) + " needs " +
                               std::to_string(rows * nb) + " scales (" + std::to_string(rows) + " x " + std::to_string(nb) +
                               "), the scale buffer holds " + std::to_string(v.scale_bytes));
    if (v.scale_bytes != 0 && v.scales == nullptr) detail::fail(v.name, "null scales");
  }
}

/// The exact value of element i (flat, row-major) of a packed view (validated by the caller): the element code
/// decoded times its block's scale. NaN for a NaN scale or a NaN code.
inline double decode_packed(const packed_view& v, std::uint64_t i) {
  const int bits = detail::pk_bits(v.element);
  const unsigned c = detail::pk_code(static_cast<const unsigned char*>(v.data), bits, v.order, i);
  const double e = decode(v.element, c);
  if (v.scales == nullptr) return e;
  const std::uint64_t L = static_cast<std::uint64_t>(v.shape[v.rank - 1]);
  const std::uint64_t B = static_cast<std::uint64_t>(v.block_size), nb = (L + B - 1) / B;
  const std::uint8_t s = static_cast<const unsigned char*>(v.scales)[(i / L) * nb + (i % L) / B];
  return e * detail::pk_scale_value(v.scale_type, s, v.tensor_scale);
}

/// Decodes a packed view exactly and reports its health, its NaN scales and elements, and its per-block statistics
/// (packed_result). Throws nanscope::error (validate()) for a geometry that does not fit its buffers.
inline packed_result check_packed(const packed_view& v, const packed_options& opt = {}) {
  validate(v);
  packed_result r;
  const element_format_info& fi = info(v.element);
  const int bits = fi.bits;
  const std::uint64_t n = v.numel();
  const std::uint64_t L = static_cast<std::uint64_t>(v.shape[v.rank - 1]);
  const std::uint64_t B = static_cast<std::uint64_t>(v.block_size);
  const std::uint64_t nb = L == 0 ? 0 : (L + B - 1) / B, rows = L == 0 ? 0 : n / L;
  r.scaled = v.scales != nullptr;

  block_format_stats& bs = r.blocks;
  bs.format = v.scale_type == packed_scale::e4m3 ? block_format::nvfp4
              : v.element == element_format::e2m1 ? block_format::mxfp4
              : v.element == element_format::e2m3 ? block_format::mxfp6_e2m3
              : v.element == element_format::e3m2 ? block_format::mxfp6_e3m2
              : v.element == element_format::e4m3 ? block_format::mxfp8_e4m3
                                                  : block_format::mxfp8_e5m2;
  bs.block_size = v.block_size;
  bs.tensor_scale = v.scale_type == packed_scale::e4m3 ? v.tensor_scale : 0.0f;

  health_result& h = r.health;
  h.type = dtype::f64;
  h.mode = check_mode::stats;
  h.rank = v.rank;
  for (int i = 0; i < v.rank; ++i) h.shape[i] = v.shape[i];
  h.count = n;
  if (n == 0) return r;

  // the pass: blocks split over the threads, one table set per part
  detail::pk_job job;
  job.v = &v;
  job.bits = bits;
  job.L = L;
  job.nb = nb;
  job.rows = rows;
  job.fast = L % B == 0 && (B * static_cast<std::uint64_t>(bits)) % 8 == 0;
  job.total_blocks = rows * nb;
#if NANSCOPE_HAS_X86_SIMD()
  job.avx512 = resolve_isa(opt.instruction_set) == isa::avx512 && detail::cpu_has_avx512_pk();
#else
  job.avx512 = false;
#endif
  unsigned threads = opt.threads == 0 ? detail::default_thread_count() : opt.threads;
  if (n < opt.parallel_threshold) threads = 1;
  const std::uint64_t parts = (std::min<std::uint64_t>)(threads, job.total_blocks);
  job.part = (job.total_blocks + parts - 1) / parts;
  std::vector<detail::pk_state> states(static_cast<std::size_t>(parts));
  job.states = &states;
  if (parts <= 1) detail::pk_task(&job, 0);
  else detail::default_pool().run(static_cast<std::size_t>(parts), static_cast<unsigned>(parts - 1), &detail::pk_task, &job);

  // fold: code counts by (scale, code); block counts by scale
  const std::size_t ncodes = std::size_t{1} << bits;
  std::vector<std::uint64_t> codes(256 * ncodes, 0);
  std::uint64_t blocks[256][3] = {};
  for (const detail::pk_state& st : states) {
    if (!st.counts.empty()) {
      for (std::size_t s = 0; s < 256; ++s)
        for (std::size_t b = 0; b < 256; ++b) {
          const std::uint64_t c = st.counts[s * 256 + b];
          if (c == 0) continue;
          if (bits == 4) {
            codes[s * ncodes + (b & 15u)] += c;
            codes[s * ncodes + (b >> 4)] += c;
          } else {
            codes[s * ncodes + b] += c;
          }
        }
    }
    if (!st.codes.empty())
      for (std::size_t k = 0; k < codes.size(); ++k) codes[k] += st.codes[k];
    for (int s = 0; s < 256; ++s)
      for (int k = 0; k < 3; ++k) blocks[s][k] += st.blocks[s][k];
  }

  // the values and the health
  const unsigned mag_mask = (1u << (bits - 1)) - 1u;
  for (std::size_t s = 0; s < 256; ++s) {
    const double sv = r.scaled ? detail::pk_scale_value(v.scale_type, static_cast<std::uint8_t>(s), v.tensor_scale) : 1.0;
    const bool snan = r.scaled && detail::pk_scale_nan(v.scale_type, static_cast<std::uint8_t>(s));
    for (std::size_t c = 0; c < ncodes; ++c) {
      const std::uint64_t k = codes[s * ncodes + c];
      if (k == 0) continue;
      packed_value_count e;
      e.scale = static_cast<std::uint8_t>(s);
      e.code = static_cast<std::uint8_t>(c);
      e.count = k;
      const double ev = decode(v.element, static_cast<unsigned>(c));
      // 0 times a finite scale keeps the element's sign; a NaN scale makes every element NaN
      e.value = ev * sv;
      r.values.push_back(e);
      const int kind = detail::pk_code_kind(v.element, static_cast<unsigned>(c));
      if (kind == 1) r.nan_elements += k;
      if (kind == 2) r.inf_elements += k;
      const unsigned m = static_cast<unsigned>(c) & mag_mask;
      if (snan || kind != 0) continue;  // subnormal and at-max codes: of the values that decode to numbers
      if (m != 0 && (m >> fi.mantissa_bits) == 0) h.subnormal += k;
      if (m == fi.max_code) bs.clipped += k;
    }
  }
  detail::pk_health(r.values, h);
  bs.elements = n;
  bs.subnormal = h.subnormal;

  // per block
  std::uint64_t n_exp = 0;
  for (int s = 0; s < 256; ++s) {
    const std::uint64_t zero = blocks[s][0], other = blocks[s][1], bad = blocks[s][2];
    const std::uint64_t all = zero + other + bad;
    if (all == 0) continue;
    bs.blocks += all;
    const bool nan_scale = r.scaled && detail::pk_scale_nan(v.scale_type, static_cast<std::uint8_t>(s));
    if (nan_scale) {
      r.nan_scales += all;
      bs.nan_blocks += all;
      bs.lossy_blocks += all;
      continue;
    }
    bs.nan_blocks += bad;
    bs.zero_blocks += zero;
    bool zero_scale = false;
    int x = 0;
    if (!r.scaled) {
      x = 0;
    } else if (v.scale_type == packed_scale::e8m0) {
      x = s - 127;
    } else {
      const double sc = decode(element_format::e4m3, static_cast<unsigned>(s) & 0x7Fu);
      zero_scale = sc == 0.0;
      if (!zero_scale) x = detail::bs_floor_log2(sc);
    }
    if (zero_scale) bs.zero_scale_blocks += other;
    bs.lossy_blocks += bad + (zero_scale ? other : 0);
    if (!zero_scale && other != 0) {
      bs.scale_histogram[static_cast<std::size_t>(x + 127)] += other;
      n_exp += other;
    }
  }
  if (n_exp != 0) {
    double sum = 0.0;
    int lo = 256, hi = -1;
    for (int i = 0; i < 256; ++i) {
      const std::uint64_t c = bs.scale_histogram[static_cast<std::size_t>(i)];
      if (c == 0) continue;
      sum += static_cast<double>(c) * (i - 127);
      lo = (std::min)(lo, i);
      hi = i;
    }
    bs.scale_exp_mean = sum / static_cast<double>(n_exp);
    if (n_exp > 1) {
      double m2 = 0.0;
      for (int i = 0; i < 256; ++i) {
        const double dv = (i - 127) - bs.scale_exp_mean;
        m2 += static_cast<double>(bs.scale_histogram[static_cast<std::size_t>(i)]) * dv * dv;
      }
      bs.scale_exp_std = std::sqrt(m2 / (static_cast<double>(n_exp) - 1.0));
    }
    bs.scale_exp_min = lo - 127;
    bs.scale_exp_max = hi - 127;
  }

  // the first NaN/Inf in row-major order: only when there is one
  if (h.any_nonfinite) {
    const auto* sc = static_cast<const unsigned char*>(v.scales);
    const auto* d = static_cast<const unsigned char*>(v.data);
    for (std::uint64_t k = 0; k < rows * nb && h.first_nonfinite < 0; ++k) {
      const std::uint64_t first = (k / nb) * L + (k % nb) * B, len = (std::min)(B, L - (k % nb) * B);
      if (r.scaled && detail::pk_scale_nan(v.scale_type, sc[k])) {
        h.first_nonfinite = static_cast<std::int64_t>(first);
        break;
      }
      if (bits != 8) continue;  // only 8-bit elements have NaN / Inf codes
      for (std::uint64_t i = 0; i < len; ++i)
        if (detail::pk_code_kind(v.element, d[first + i]) != 0) {
          h.first_nonfinite = static_cast<std::int64_t>(first + i);
          break;
        }
    }
  }
  return r;
}

/// The health of a tensor of E8M0 bytes on their own (e.g. a scale tensor no weight claimed): each byte decoded as
/// 2^(code - 127), 0xFF as NaN.
inline health_result check_e8m0(const void* data, std::uint64_t n) {
  std::uint64_t hist[256] = {};
  const auto* d = static_cast<const unsigned char*>(data);
  for (std::uint64_t i = 0; i < n; ++i) ++hist[d[i]];
  std::vector<packed_value_count> vals;
  for (int s = 0; s < 256; ++s)
    if (hist[s] != 0) {
      packed_value_count e;
      e.scale = static_cast<std::uint8_t>(s);
      e.count = hist[s];
      e.value = decode_e8m0(static_cast<std::uint8_t>(s));
      vals.push_back(e);
    }
  health_result h;
  h.type = dtype::f64;
  h.mode = check_mode::stats;
  h.count = n;
  detail::pk_health(vals, h);
  if (hist[255] != 0)
    for (std::uint64_t i = 0; i < n; ++i)
      if (d[i] == 0xFF) {
        h.first_nonfinite = static_cast<std::int64_t>(i);
        break;
      }
  return h;
}

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_PACKED_HPP
