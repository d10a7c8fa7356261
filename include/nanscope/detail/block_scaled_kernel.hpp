// nanscope — detail/block_scaled_kernel.hpp: the per-segment state and the portable per-block arithmetic of the
// block-scaled what-if statistics (block_scaled.hpp): blocks, scales, clipped / flushed / subnormal counts.
// Internal: include <nanscope/block_scaled.hpp>.
#ifndef NANSCOPE_DETAIL_BLOCK_SCALED_KERNEL_HPP
#define NANSCOPE_DETAIL_BLOCK_SCALED_KERNEL_HPP

#if !defined(NANSCOPE_BLOCK_SCALED_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/block_scaled_kernel.hpp is internal: include <nanscope/block_scaled.hpp>"
#endif

#include "../block_scaled_formats.hpp"
#include "../block_scaled_result.hpp"
#include "../config.hpp"
#include "../dtype.hpp"

#include <cstdint>
#include <cstring>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

namespace detail {

// Geometry of the pass: blocks run along the last dimension of the processed view (length L, "a row"); the unit of
// work is a 32-element stretch of a row ("unit block", the last one of a row may be shorter). An MX block is a
// unit block, an NVFP4 block is either half of one. Unit blocks of a row are contiguous in the pass's logical order.
inline constexpr int bs_unit = 32;

/// One requested format, as the kernels see it.
struct bs_format {
  block_format id = block_format::mxfp4;
  element_format el = element_format::e2m1;
  bool mx = true;
  // f64 bit patterns of the per-block thresholds at scale 1 (MX: shifted by the block's exponent in the exponent
  // field): clip (> max), flush (<= min_subnormal / 2), sub (< min_normal - min_subnormal / 2)
  double clip1 = 0, flush1 = 0, sub1 = 0;
  // NVFP4: the per-tensor scale and 6 times it (exact in a double)
  float tensor_scale = 0.0f;
  block_record* out = nullptr;  // keep_blocks: the records, by output block index
};

/// The pass-wide setup (built once per check).
struct bs_setup {
  dtype type = dtype::f32;
  scale_rule rule = scale_rule::ocp;
  std::uint64_t L = 1;            // row length of the processed view
  std::uint64_t rows = 1;
  std::uint64_t nb32 = 1, nb16 = 1;  // blocks per row, B = 32 and 16
  // column-wise: the processed view is the original with the blocked axis moved last; rows of the processed
  // view are (outer, inner) pairs, and output block indices are in the original's scale-tensor order
  bool columns = false;
  std::uint64_t inner = 1;
  int nf = 0;
  bs_format f[block_format_count];
  bool any_mx = false, any_nv = false;
  bool use_simd = true;  // the vector kernels may run (isa >= avx2); false: the portable loop only

  /// The output index of block j (of size B) of processed row r.
  std::uint64_t out_index(std::uint64_t r, std::uint64_t j, int B) const {
    const std::uint64_t nb = B == 32 ? nb32 : nb16;
    if (!columns) return r * nb + j;
    const std::uint64_t o = r / inner, i = r % inner;
    return (o * nb + j) * inner + i;
  }
};

/// One format's counters over a segment (or the whole pass).
struct bs_counts {
  std::uint64_t blocks = 0, elements = 0, zero_blocks = 0, nan_blocks = 0, zero_scale_blocks = 0, lossy_blocks = 0;
  std::uint64_t clipped = 0, flushed = 0, subnormal = 0;
  std::uint64_t n_exp = 0;  // blocks in the exponent statistics (the histogram's total)
  std::uint64_t hist[256] = {};  // by scale exponent + 127
  // the worst block: most clipped + flushed, then the lowest output index
  std::uint32_t worst_loss = 0;
  std::uint64_t worst_index = ~std::uint64_t{0};
  std::uint64_t worst_row = 0, worst_col = 0;  // where it starts in the processed view
  std::uint32_t worst_clipped = 0, worst_flushed = 0;
  std::uint64_t worst_amax = 0;  // f64 bits
  std::uint8_t worst_scale = 0;
  int worst_len = 0;

  void merge(const bs_counts& o) {
    blocks += o.blocks;
    elements += o.elements;
    zero_blocks += o.zero_blocks;
    nan_blocks += o.nan_blocks;
    zero_scale_blocks += o.zero_scale_blocks;
    lossy_blocks += o.lossy_blocks;
    clipped += o.clipped;
    flushed += o.flushed;
    subnormal += o.subnormal;
    n_exp += o.n_exp;
    for (int i = 0; i < 256; ++i) hist[i] += o.hist[i];
    if (o.worst_loss > worst_loss || (o.worst_loss == worst_loss && o.worst_loss != 0 && o.worst_index < worst_index)) {
      worst_loss = o.worst_loss;
      worst_index = o.worst_index;
      worst_row = o.worst_row;
      worst_col = o.worst_col;
      worst_clipped = o.worst_clipped;
      worst_flushed = o.worst_flushed;
      worst_amax = o.worst_amax;
      worst_scale = o.worst_scale;
      worst_len = o.worst_len;
    }
  }
};

/// A segment's state.
struct bs_local {
  bs_counts c[block_format_count];
  std::uint64_t finite_amax = 0;  // f64 bits of the largest finite |x| seen
  // a unit block cut by a chunk boundary: its first `stash_n` elements (raw bytes), starting at flat stash_at
  alignas(64) unsigned char stash[bs_unit * 8];
  int stash_n = 0;
  std::uint64_t stash_at = 0;
  std::uint64_t seg_begin = 0, seg_end = 0;
  std::vector<std::uint64_t> edges;  // flat starts of unit blocks that run past the segment's end
  void* vsetup = nullptr;  // the vector path's constants and histograms (block_scaled_avx2.hpp), made on first use
  void* vhist = nullptr;
  int vkind = 0;  // which vector path made vhist: 1 AVX2 (bs_vhist), 2 AVX-512 (bs5_vhist, block_scaled_avx512.hpp)
};

/// |x| of element i of a raw run as f64 bits (exact; integer operations only, so f32/f16 subnormals survive the
/// denormals-are-zero mode of -ffast-math).
inline std::uint64_t bs_abs_bits(const unsigned char* p, dtype t, std::size_t i) {
  switch (t) {
    case dtype::f64: {
      std::uint64_t b;
      std::memcpy(&b, p + i * 8, 8);
      return b & 0x7FFFFFFFFFFFFFFFull;
    }
    case dtype::f32: {
      std::uint32_t b;
      std::memcpy(&b, p + i * 4, 4);
      return f32_to_f64_bits(b & 0x7FFFFFFFu);
    }
    case dtype::bf16: {
      std::uint16_t b;
      std::memcpy(&b, p + i * 2, 2);
      return f32_to_f64_bits((static_cast<std::uint32_t>(b) << 16) & 0x7FFFFFFFu);
    }
    case dtype::f16: {
      std::uint16_t b;
      std::memcpy(&b, p + i * 2, 2);
      return f32_to_f64_bits(float_to_bits(decode_small_float<5, 10, true>(b & 0x7FFFu)));
    }
    case dtype::f8_e4m3fn: {
      const std::uint32_t b = p[i] & 0x7Fu;
      return f32_to_f64_bits(float_to_bits(decode_small_float<4, 3, false>(b)));
    }
    default: {  // e5m2
      const std::uint32_t b = p[i] & 0x7Fu;
      return f32_to_f64_bits(float_to_bits(decode_small_float<5, 2, true>(b)));
    }
  }
}

inline constexpr std::uint64_t bs_inf_bits = 0x7FF0000000000000ull;

/// The thresholds of one block (f64 bits of |x| values): clipped a > clip, flushed 0 < a <= flush, subnormal
/// flush < a < sub. `ok` false: the scale is NaN (a block with NaN or infinity).
struct bs_thresholds {
  std::uint64_t clip = 0, flush = 0, sub = 0;
  std::uint8_t scale = 0;
  int exponent = 0;   // the scale's binary exponent (NVFP4: of the E4M3 block scale)
  bool nan = false;   // NaN scale
  bool zero_scale = false;  // NVFP4: a block scale of 0 with non-zero elements (they all flush)
};

/// 2^x * v for a double v with few significant bits, exactly (both normal).
inline double bs_scaled(double v, int x) { return v * bs_pow2(x); }

/// The thresholds of a block of format f whose largest |x| has f64 bits amax (finite or not).
inline bs_thresholds bs_block_thresholds(const bs_setup& s, const bs_format& f, std::uint64_t amax) {
  bs_thresholds t;
  if (amax >= bs_inf_bits) {
    t.nan = true;
    t.scale = f.mx ? 0xFF : 0x7F;
    return t;
  }
  const double a = bits_to_double(amax);
  if (f.mx) {
    t.scale = mx_scale_code(f.el, s.rule, a);
    if (t.scale == 0xFF) {
      t.nan = true;
      return t;
    }
    const int x = static_cast<int>(t.scale) - 127;
    t.exponent = x;
    t.clip = double_to_bits(bs_scaled(f.clip1, x));
    t.flush = double_to_bits(bs_scaled(f.flush1, x));
    t.sub = double_to_bits(bs_scaled(f.sub1, x));
    return t;
  }
  t.scale = nvfp4_block_scale(a, f.tensor_scale);
  const double sb = decode(element_format::e4m3, t.scale);
  const double S = sb * f32_bits_to_double(float_to_bits(f.tensor_scale));  // exact: 4 x 24 significant bits
  if (t.scale == 0 || !(S > 0.0)) {
    t.zero_scale = amax != 0;
    t.clip = bs_inf_bits;  // nothing clips
    t.flush = bs_inf_bits - 1;  // every finite non-zero element flushes
    t.sub = bs_inf_bits - 1;
    return t;
  }
  t.exponent = bs_floor_log2(sb);
  t.clip = double_to_bits(6.0 * S);
  t.flush = double_to_bits(0.25 * S);
  t.sub = double_to_bits(0.75 * S);
  return t;
}

/// Adds one evaluated block to a format's counters and records.
inline void bs_account(const bs_setup& s, const bs_format& f, bs_counts& c, const bs_thresholds& t, std::uint64_t amax,
                       int len, unsigned clipped, unsigned flushed, unsigned sub, std::uint64_t out_index,
                       std::uint64_t row, std::uint64_t col) {
  (void)s;
  ++c.blocks;
  c.elements += static_cast<std::uint64_t>(len);
  block_record rec;
  rec.scale = t.scale;
  if (t.nan) {
    ++c.nan_blocks;
    ++c.lossy_blocks;
  } else if (amax == 0) {
    ++c.zero_blocks;
  } else {
    if (t.zero_scale) {
      ++c.zero_scale_blocks;
    } else {
      ++c.n_exp;
      ++c.hist[t.exponent + 127];
    }
    c.clipped += clipped;
    c.flushed += flushed;
    c.subnormal += sub;
    const unsigned loss = clipped + flushed;
    if (loss != 0) {
      ++c.lossy_blocks;
      if (loss > c.worst_loss || (loss == c.worst_loss && out_index < c.worst_index)) {
        c.worst_loss = loss;
        c.worst_index = out_index;
        c.worst_row = row;
        c.worst_col = col;
        c.worst_clipped = clipped;
        c.worst_flushed = flushed;
        c.worst_amax = amax;
        c.worst_scale = t.scale;
        c.worst_len = len;
      }
    }
    rec.clipped = static_cast<std::uint8_t>(clipped);
    rec.flushed = static_cast<std::uint8_t>(flushed);
    rec.subnormal = static_cast<std::uint8_t>(sub);
  }
  if (f.out != nullptr) f.out[out_index] = rec;
}

/// Evaluates one block of len elements (|x| as f64 bits) for format f, and accounts it.
inline void bs_eval_block(const bs_setup& s, const bs_format& f, bs_counts& c, const std::uint64_t* a, int len,
                          std::uint64_t out_index, std::uint64_t row, std::uint64_t col) {
  std::uint64_t amax = 0;
  for (int i = 0; i < len; ++i) amax = a[i] > amax ? a[i] : amax;
  const bs_thresholds t = bs_block_thresholds(s, f, amax);
  unsigned clipped = 0, flushed = 0, sub = 0;
  if (!t.nan) {
    for (int i = 0; i < len; ++i) {
      const std::uint64_t x = a[i];
      clipped += x > t.clip ? 1u : 0u;
      flushed += (x != 0 && x <= t.flush) ? 1u : 0u;
      sub += (x > t.flush && x < t.sub) ? 1u : 0u;
    }
  }
  bs_account(s, f, c, t, amax, len, clipped, flushed, sub, out_index, row, col);
}

/// One unit block (len <= 32 elements of a row, |x| as f64 bits) starting at column col of processed row `row`:
/// every requested format.
inline void bs_unit_block(const bs_setup& s, bs_local& l, const std::uint64_t* a, int len, std::uint64_t row,
                          std::uint64_t col) {
  std::uint64_t fin = l.finite_amax;
  for (int i = 0; i < len; ++i)
    if (a[i] < bs_inf_bits && a[i] > fin) fin = a[i];
  l.finite_amax = fin;
  for (int k = 0; k < s.nf; ++k) {
    const bs_format& f = s.f[k];
    bs_counts& c = l.c[static_cast<int>(f.id)];
    if (f.mx) {
      bs_eval_block(s, f, c, a, len, s.out_index(row, col / 32, 32), row, col);
    } else {
      const int h = len < 16 ? len : 16;
      bs_eval_block(s, f, c, a, h, s.out_index(row, col / 16, 16), row, col);
      if (len > 16) bs_eval_block(s, f, c, a + 16, len - 16, s.out_index(row, col / 16 + 1, 16), row, col + 16);
    }
  }
}

/// The portable path for a unit block of raw elements.
inline void bs_unit_raw(const bs_setup& s, bs_local& l, const unsigned char* p, int len, std::uint64_t row,
                        std::uint64_t col) {
  std::uint64_t a[bs_unit];
  for (int i = 0; i < len; ++i) a[i] = bs_abs_bits(p, s.type, static_cast<std::size_t>(i));
  bs_unit_block(s, l, a, len, row, col);
}

/// Runs of whole unit blocks inside one row (or, with L a multiple of 32 and row-wise blocks, across rows): the
/// vector kernels take them (block_scaled_avx2.hpp); this is the portable loop. p: the raw elements of `units`
/// unit blocks of 32, the first starting at column col of processed row row.
inline void bs_units_portable(const bs_setup& s, bs_local& l, const unsigned char* p, std::uint64_t units,
                              std::uint64_t row, std::uint64_t col) {
  const std::size_t es = size_of(s.type);
  for (std::uint64_t k = 0; k < units; ++k) {
    bs_unit_raw(s, l, p + static_cast<std::size_t>(k) * bs_unit * es, bs_unit, row, col);
    col += bs_unit;
    if (col >= s.L) {
      col = 0;
      ++row;
    }
  }
}

/// The vector path for runs of whole unit blocks (block_scaled_avx2.hpp, block_scaled_avx512.hpp when compiled): returns false when it
/// does not take the run (the portable loop then does).
using bs_units_fn = bool (*)(const bs_setup& s, bs_local& l, const unsigned char* p, std::uint64_t units,
                             std::uint64_t row, std::uint64_t col);

/// One chunk of the segment: n raw elements of the processed view, the first at flat index `first` (logical order;
/// chunks arrive in order and cover the segment).
inline void bs_chunk(const bs_setup& s, bs_local& l, const unsigned char* p, std::uint64_t first, std::size_t n,
                     bs_units_fn vec) {
  const std::size_t es = size_of(s.type);
  const std::uint64_t end = first + n;
  std::uint64_t pos = first;
  auto unit_len = [&](std::uint64_t u) {
    const std::uint64_t col = u % s.L;
    return static_cast<int>(s.L - col < bs_unit ? s.L - col : bs_unit);
  };
  if (l.stash_n > 0) {  // the rest of a unit block cut by the previous chunk's end
    const int len = unit_len(l.stash_at);
    const std::uint64_t take = static_cast<std::uint64_t>(len - l.stash_n) < n ? static_cast<std::uint64_t>(len - l.stash_n) : n;
    std::memcpy(l.stash + static_cast<std::size_t>(l.stash_n) * es, p, static_cast<std::size_t>(take) * es);
    l.stash_n += static_cast<int>(take);
    pos += take;
    if (l.stash_n < len) return;
    bs_unit_raw(s, l, l.stash, len, l.stash_at / s.L, l.stash_at % s.L);
    l.stash_n = 0;
  }
  if (pos == l.seg_begin && (pos % s.L) % bs_unit != 0) {
    // the segment starts inside a unit block: the previous segment hands it to the fix-up (edges)
    const std::uint64_t col = pos % s.L;
    const std::uint64_t next = pos - col % bs_unit + static_cast<std::uint64_t>(unit_len(pos - col % bs_unit));
    pos = next < end ? next : end;
  }
  while (pos < end) {
    const std::uint64_t row = pos / s.L, col = pos % s.L;
    const int len = unit_len(pos);
    if (pos + static_cast<std::uint64_t>(len) > l.seg_end) {  // runs into the next segment: the fix-up takes it
      l.edges.push_back(pos);
      return;
    }
    if (pos + static_cast<std::uint64_t>(len) > end) {  // cut by the chunk's end: stashed
      l.stash_n = static_cast<int>(end - pos);
      l.stash_at = pos;
      std::memcpy(l.stash, p + static_cast<std::size_t>(pos - first) * es, static_cast<std::size_t>(l.stash_n) * es);
      return;
    }
    if (len < bs_unit) {  // a row's short last block
      bs_unit_raw(s, l, p + static_cast<std::size_t>(pos - first) * es, len, row, col);
      pos += static_cast<std::uint64_t>(len);
      continue;
    }
    // whole unit blocks from here: to the row's last whole one, or across rows when rows hold whole blocks only
    std::uint64_t units = (end - pos) / bs_unit;
    if (s.L % bs_unit != 0 || s.columns) {
      const std::uint64_t in_row = (s.L - col) / bs_unit;
      units = units < in_row ? units : in_row;
    }
    const unsigned char* q = p + static_cast<std::size_t>(pos - first) * es;
    if (vec == nullptr || !vec(s, l, q, units, row, col)) bs_units_portable(s, l, q, units, row, col);
    pos += units * bs_unit;
  }
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_BLOCK_SCALED_KERNEL_HPP
