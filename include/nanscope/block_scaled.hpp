// nanscope — block_scaled.hpp: what quantizing a tensor to MXFP8 / MXFP6 / MXFP4 / NVFP4 would lose, block by block,
// computed in the same read as its health check. docs/block-scaled.md.
//
//   nanscope::block_scaled_result r = nanscope::check_block_scaled(nanscope::to_view(activations));
//   const nanscope::block_format_stats& fp4 = *r.find(nanscope::block_format::mxfp4);
//   fp4.clipped;            // elements above the format's max at their block's scale (stored as +-max)
//   fp4.flushed;            // non-zero elements that would become 0
//   fp4.lossy_fraction();   // blocks with any clipped or flushed element (or a NaN scale)
//   fp4.worst.index;        // the block that loses the most elements, with its quantization error
//
// Blocks run along the last dimension (block_scaled_options::axis for another one). Counts are integers from exact
// compares of bit patterns: identical for every instruction set, thread count and -ffast-math.
#ifndef NANSCOPE_BLOCK_SCALED_HPP
#define NANSCOPE_BLOCK_SCALED_HPP

#include "block_scaled_formats.hpp"
#include "block_scaled_record.hpp"
#include "block_scaled_result.hpp"
#include "check.hpp"
#include "config.hpp"
#include "dtype.hpp"
#include "health.hpp"
#include "traits.hpp"
#include "view.hpp"

#include "detail/block_scaled_kernel.hpp"
#include "detail/block_scaled_avx2.hpp"
#include "detail/block_scaled_avx512.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN

/// Options of check_block_scaled. Chainable: block_scaled_options{}.with_rule(scale_rule::round_up).with_axis(0).
struct block_scaled_options {
  block_format_set formats = block_format_set::all();
  scale_rule rule = scale_rule::ocp;  ///< how MX block scales are chosen (NVFP4 has its own rule)
  int axis = -1;                      ///< the dimension blocks run along; negative counts from the end (-1: the last)
  check_options check;                ///< the health pass: mode (FULL_HEALTH or STATS), threads, instruction set, hash
  bool keep_blocks = false;           ///< fill block_format_stats::per_block (one record per block: allocates)
  /// NVFP4's per-tensor scale is computed from this magnitude (a known or previous step's abs max). Negative (the
  /// default): from the tensor's own largest finite |x|, which costs a second read of the tensor for NVFP4.
  double nvfp4_tensor_amax = -1.0;

  block_scaled_options& with_formats(block_format_set s) {
    formats = s;
    return *this;
  }
  block_scaled_options& with_rule(scale_rule r) {
    rule = r;
    return *this;
  }
  block_scaled_options& with_axis(int a) {
    axis = a;
    return *this;
  }
  block_scaled_options& with_check(const check_options& c) {
    check = c;
    return *this;
  }
  block_scaled_options& with_keep_blocks(bool on = true) {
    keep_blocks = on;
    return *this;
  }
  block_scaled_options& with_nvfp4_tensor_amax(double a) {
    nvfp4_tensor_amax = a;
    return *this;
  }
};

namespace detail {

/// The pass-wide state the hook's segments fold into.
struct bs_pass {
  const bs_setup* setup = nullptr;
  bs_units_fn vec = nullptr;     // the AVX2 path (null: none for this dtype or CPU)
  bs_units_fn vec512 = nullptr;  // the AVX-512 path (null: none)
  std::mutex mu;
  bs_counts total[block_format_count];
  std::uint64_t finite_amax = 0;
  std::vector<std::uint64_t> edges;
};

inline void* bs_hook_begin(void* ctx, std::uint64_t seg_begin, std::uint64_t seg_n) {
  (void)ctx;
  auto* l = new bs_local;
  l->seg_begin = seg_begin;
  l->seg_end = seg_begin + seg_n;
  return l;
}

inline void bs_hook_chunk(void* ctx, void* state, const void* raw, std::uint64_t first, std::size_t n, std::uint8_t isa_code) {
  auto* pass = static_cast<bs_pass*>(ctx);
  // 2: isa::avx2, 3: isa::avx512 (the AVX2 path where the AVX-512 one is missing)
  const bs_units_fn vec = isa_code >= 3 && pass->vec512 != nullptr ? pass->vec512 : isa_code >= 2 ? pass->vec : nullptr;
  bs_chunk(*pass->setup, *static_cast<bs_local*>(state), static_cast<const unsigned char*>(raw), first, n, vec);
}

inline void bs_hook_end(void* ctx, void* state) {
  auto* pass = static_cast<bs_pass*>(ctx);
  std::unique_ptr<bs_local> l(static_cast<bs_local*>(state));
#if NANSCOPE_HAS_X86_SIMD()
  bs_vector_end(*pass->setup, *l);
#endif
  std::lock_guard<std::mutex> lock(pass->mu);
  for (int k = 0; k < block_format_count; ++k) pass->total[k].merge(l->c[k]);
  if (l->finite_amax > pass->finite_amax) pass->finite_amax = l->finite_amax;
  pass->edges.insert(pass->edges.end(), l->edges.begin(), l->edges.end());
}

/// The unit blocks that ran across segment boundaries, from the view (gathered), after the pass.
inline void bs_fix_edges(const tensor_view& pv, bs_pass& pass) {
  const bs_setup& s = *pass.setup;
  const std::size_t es = size_of(s.type);
  bs_local l;
  std::sort(pass.edges.begin(), pass.edges.end());
  for (const std::uint64_t u : pass.edges) {
    const std::uint64_t col = u % s.L;
    const int len = static_cast<int>(s.L - col < bs_unit ? s.L - col : bs_unit);
    alignas(64) unsigned char buf[bs_unit * 8];
    if (pv.is_contiguous()) std::memcpy(buf, static_cast<const unsigned char*>(pv.data) + static_cast<std::size_t>(u) * es,
                                        static_cast<std::size_t>(len) * es);
    else gather(pv, u, static_cast<std::size_t>(len), buf);
    bs_unit_raw(s, l, buf, len, u / s.L, col);
  }
  for (int k = 0; k < block_format_count; ++k) pass.total[k].merge(l.c[k]);
  if (l.finite_amax > pass.finite_amax) pass.finite_amax = l.finite_amax;
  pass.edges.clear();
}

struct bs_drive_ctx {
  const tensor_view* v;
  const pass_hook* hook;
  std::uint8_t isa_code;
  std::uint64_t n;
};

inline void bs_drive_segment(void* vctx, std::size_t i) {
  auto* ctx = static_cast<bs_drive_ctx*>(vctx);
  const tensor_view& v = *ctx->v;
  const std::size_t es = size_of(v.type);
  const std::uint64_t begin = static_cast<std::uint64_t>(i) * segment_elems;
  const std::uint64_t n = ctx->n - begin < segment_elems ? ctx->n - begin : segment_elems;
  void* st = ctx->hook->begin(ctx->hook->ctx, begin, n);
  const bool contiguous = v.is_contiguous();
  std::unique_ptr<unsigned char[]> buf;
  if (!contiguous) buf.reset(new unsigned char[chunk_elems * 8]);
  for (std::uint64_t c = 0; c < n; c += chunk_elems) {
    const std::size_t m = static_cast<std::size_t>(n - c < chunk_elems ? n - c : chunk_elems);
    const void* p;
    if (contiguous) {
      p = static_cast<const unsigned char*>(v.data) + static_cast<std::size_t>(begin + c) * es;
    } else {
      gather(v, begin + c, m, buf.get());
      p = buf.get();
    }
    ctx->hook->chunk(ctx->hook->ctx, st, p, begin + c, m, ctx->isa_code);
  }
  ctx->hook->end(ctx->hook->ctx, st);
}

/// The hook alone over a view (no health kernel): the second read for NVFP4 without a given tensor amax, and the
/// pass over a column-wise view. Same segments as the health pass; on the pool when large enough.
inline void bs_drive(const tensor_view& v, const pass_hook& hook, const check_options& opt) {
  const std::uint64_t n = v.numel();
  if (n == 0) return;
  const std::uint64_t nseg = (n + segment_elems - 1) / segment_elems;
  bs_drive_ctx ctx{&v, &hook, static_cast<std::uint8_t>(resolve_isa(opt.instruction_set)), n};
  unsigned threads = opt.threads == 0 ? default_thread_count() : opt.threads;
  const std::uint64_t threshold =
      opt.parallel_threshold == check_options::use_default_threshold ? default_parallel_threshold() : opt.parallel_threshold;
  if (n < threshold || nseg < 2) threads = 1;
  if (threads <= 1) {
    for (std::uint64_t s = 0; s < nseg; ++s) bs_drive_segment(&ctx, static_cast<std::size_t>(s));
  } else {
    default_pool().run(static_cast<std::size_t>(nseg), threads - 1, &bs_drive_segment, &ctx);
  }
}

/// Thresholds at scale 1 of an element format: clip above max, flush at or below half the smallest subnormal,
/// subnormal below the smallest normal minus half the smallest subnormal (a tie there rounds up to the normal).
inline void bs_set_thresholds(bs_format& f) {
  const element_format_info& fi = info(f.el);
  f.clip1 = fi.max_finite;
  f.flush1 = fi.min_subnormal * 0.5;
  f.sub1 = fi.min_normal - fi.min_subnormal * 0.5;
}

/// Exact quantization error of one block for the worst-block report: dequantize(quantize(x)) - x per element.
inline void bs_block_error(const bs_format& f, const std::uint64_t* a, int len, const bs_thresholds& th, double& max_abs,
                           double& rms) {
  double mx = 0.0, s2 = 0.0;
  const double S = f.mx ? bs_pow2(th.exponent) : decode(element_format::e4m3, th.scale) * f32_bits_to_double(float_to_bits(f.tensor_scale));
  for (int i = 0; i < len; ++i) {
    const double x = bits_to_double(a[i]);  // |x|; the error's magnitude does not depend on the sign
    double q;
    if (f.mx) {
      q = decode(f.el, encode(f.el, x * bs_pow2(-th.exponent))) * S;  // x / 2^X is exact
    } else if (th.zero_scale || S == 0.0) {
      q = 0.0;
    } else {
      // E2M1 of x / S, nearest and ties to even, by exact compares against the midpoints times S
      static const double mids[7] = {0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0};
      unsigned c = 0;
      while (c < 7 && (x > mids[c] * S || (x == mids[c] * S && (c & 1u) == 0))) ++c;
      q = decode(element_format::e2m1, c) * S;
    }
    const double d = q > x ? q - x : x - q;
    mx = d > mx ? d : mx;
    s2 += d * d;
  }
  max_abs = mx;
  rms = len > 0 ? std::sqrt(s2 / len) : 0.0;
}

}  // namespace detail

/// Checks a tensor (check_options of block_scaled_options::check: mode FULL_HEALTH or STATS) and, in the same read of
/// memory, what quantizing it to each requested block format would lose (docs/block-scaled.md). Sources: f32, bf16,
/// f16 (vector kernels), f64 and fp8 (portable loop). Blocks along another axis than the last, and NVFP4 without
/// nvfp4_tensor_amax, cost a second read (said in the docs). Throws nanscope::error for an invalid view, a
/// non-floating dtype, another mode, an empty format set or an axis out of range.
inline block_scaled_result check_block_scaled(const tensor_view& v, const block_scaled_options& opt = {}) {
  validate(v);
  const check_options& copt = opt.check;
  if (copt.mode != check_mode::full_health && copt.mode != check_mode::stats)
    detail::fail(v.name, std::string("check_block_scaled needs mode FULL_HEALTH or STATS, got ") + name(copt.mode));
  if (!is_float(v.type))
    detail::fail(v.name, std::string("check_block_scaled: dtype ") + name(v.type) + " is not a floating type");
  if (opt.formats.empty()) detail::fail(v.name, "check_block_scaled: no block format requested");
  const int rank = v.rank;
  int axis = opt.axis < 0 ? opt.axis + (rank > 0 ? rank : 1) : opt.axis;
  if (axis < 0 || axis >= (rank > 0 ? rank : 1))
    detail::fail(v.name, "check_block_scaled: axis " + std::to_string(opt.axis) + " is out of range for rank " +
                             std::to_string(rank));
  block_scaled_result r;
  r.axis = axis;
  const std::uint64_t n = v.numel();

  // The processed view: the original, or (blocks along another axis) the original with that axis moved last.
  tensor_view pv = v;
  const bool columns = rank > 0 && axis != rank - 1;
  std::uint64_t inner = 1;
  if (columns) {
    int k = 0;
    for (int d = 0; d < rank; ++d) {
      if (d == axis) continue;
      pv.shape[k] = v.shape[d];
      pv.strides[k] = v.strides[d];
      ++k;
    }
    pv.shape[rank - 1] = v.shape[axis];
    pv.strides[rank - 1] = v.strides[axis];
    for (int d = axis + 1; d < rank; ++d) inner *= static_cast<std::uint64_t>(v.shape[d]);
  }
  detail::bs_setup s;
  s.type = v.type;
  s.rule = opt.rule;
  s.L = rank > 0 ? static_cast<std::uint64_t>(pv.shape[rank - 1]) : 1;
  if (s.L == 0) s.L = 1;  // (an empty tensor: no rows)
  s.rows = n / s.L;
  s.nb32 = (s.L + 31) / 32;
  s.nb16 = (s.L + 15) / 16;
  s.columns = columns;
  s.inner = inner == 0 ? 1 : inner;
  s.use_simd = resolve_isa(copt.instruction_set) != isa::scalar;

  for (int k = 0; k < block_format_count; ++k) {
    const auto id = static_cast<block_format>(k);
    if (!opt.formats.has(id)) continue;
    block_format_stats st;
    st.format = id;
    st.rule = opt.rule;
    st.block_size = info(id).block_size;
    const std::uint64_t nb = s.rows * (st.block_size == 32 ? s.nb32 : s.nb16);
    if (opt.keep_blocks) st.per_block.assign(static_cast<std::size_t>(nb), block_record{});
    r.formats.push_back(std::move(st));
  }
  auto setup_format = [&](block_format_stats& st) {
    detail::bs_format& f = s.f[s.nf++];
    f.id = st.format;
    f.el = info(st.format).element;
    f.mx = info(st.format).mx;
    detail::bs_set_thresholds(f);
    f.tensor_scale = st.tensor_scale;
    f.out = opt.keep_blocks ? st.per_block.data() : nullptr;
    (f.mx ? s.any_mx : s.any_nv) = true;
  };

  block_format_stats* nv = nullptr;
  for (block_format_stats& st : r.formats)
    if (st.format == block_format::nvfp4) nv = &st;
  const bool nv_given = nv != nullptr && opt.nvfp4_tensor_amax >= 0.0;
  if (nv_given) nv->tensor_scale = nvfp4_tensor_scale(opt.nvfp4_tensor_amax);
  // the first read: the health pass with MX (and NVFP4 when its tensor scale is known) riding in it
  for (block_format_stats& st : r.formats)
    if (st.format != block_format::nvfp4 || nv_given) setup_format(st);

  detail::bs_pass pass;
  pass.setup = &s;
#if NANSCOPE_HAS_X86_SIMD()
  pass.vec = detail::bs_units_simd_for(s);
  pass.vec512 = detail::bs_units_avx512_for(s);
#endif
  detail::pass_hook hook;
  hook.ctx = &pass;
  hook.begin = &detail::bs_hook_begin;
  hook.chunk = &detail::bs_hook_chunk;
  hook.end = &detail::bs_hook_end;

  const bool second_nv = nv != nullptr && !nv_given;
  const bool fused = !columns && n != 0 && (s.nf > 0 || second_nv);
  r.health = detail::check_impl(v, copt, nullptr, fused ? &hook : nullptr);
  if (n != 0 && columns && s.nf > 0) detail::bs_drive(pv, hook, copt);  // column-wise: a pass of its own
  if (n != 0) detail::bs_fix_edges(pv, pass);
  if (second_nv) {
    // NVFP4's tensor scale from the tensor's largest finite |x|, then NVFP4 alone in a second read
    nv->tensor_scale = nvfp4_tensor_scale(detail::bits_to_double(pass.finite_amax));
    s.nf = 0;
    s.any_mx = s.any_nv = false;
    setup_format(*nv);
#if NANSCOPE_HAS_X86_SIMD()
    pass.vec = detail::bs_units_simd_for(s);
  pass.vec512 = detail::bs_units_avx512_for(s);
#endif
    if (n != 0) {
      detail::bs_drive(pv, hook, copt);
      detail::bs_fix_edges(pv, pass);
    }
  }

  // Results and the worst blocks' errors.
  for (block_format_stats& st : r.formats) {
    const detail::bs_counts& c = pass.total[static_cast<int>(st.format)];
    st.blocks = c.blocks;
    st.elements = c.elements;
    st.zero_blocks = c.zero_blocks;
    st.nan_blocks = c.nan_blocks;
    st.zero_scale_blocks = c.zero_scale_blocks;
    st.lossy_blocks = c.lossy_blocks;
    st.clipped = c.clipped;
    st.flushed = c.flushed;
    st.subnormal = c.subnormal;
    for (int i = 0; i < 256; ++i) st.scale_histogram[static_cast<std::size_t>(i)] = c.hist[i];
    if (c.n_exp > 0) {
      // from the histogram, in bin order: the same bits for every thread count
      const double ne = static_cast<double>(c.n_exp);
      double sum = 0.0;
      for (int i = 0; i < 256; ++i) sum += static_cast<double>(c.hist[i]) * (i - 127);
      st.scale_exp_mean = sum / ne;
      if (c.n_exp > 1) {
        double m2 = 0.0;
        for (int i = 0; i < 256; ++i) {
          const double d = (i - 127) - st.scale_exp_mean;
          m2 += static_cast<double>(c.hist[i]) * d * d;
        }
        st.scale_exp_std = std::sqrt(m2 / (ne - 1.0));
      }
      int lo = 255, hi = 0;
      for (int i = 0; i < 256; ++i)
        if (c.hist[i] != 0) {
          lo = i < lo ? i : lo;
          hi = i;
        }
      st.scale_exp_min = lo - 127;
      st.scale_exp_max = hi - 127;
    }
    if (c.worst_loss != 0) {
      block_worst& w = st.worst;
      w.index = static_cast<std::int64_t>(c.worst_index);
      w.elements = c.worst_len;
      w.abs_max = detail::bits_to_double(c.worst_amax);
      w.scale = c.worst_scale;
      w.clipped = c.worst_clipped;
      w.flushed = c.worst_flushed;
      // its elements, from the processed view, and its first element's flat index in the original
      const std::uint64_t first_p = c.worst_row * s.L + c.worst_col;
      const std::size_t es = size_of(v.type);
      alignas(64) unsigned char buf[detail::bs_unit * 8];
      if (pv.is_contiguous()) std::memcpy(buf, static_cast<const unsigned char*>(pv.data) + static_cast<std::size_t>(first_p) * es,
                                          static_cast<std::size_t>(w.elements) * es);
      else detail::gather(pv, first_p, static_cast<std::size_t>(w.elements), buf);
      std::uint64_t a[detail::bs_unit];
      for (int i = 0; i < w.elements; ++i) a[i] = detail::bs_abs_bits(buf, v.type, static_cast<std::size_t>(i));
      const detail::bs_format* f = nullptr;
      for (int k = 0; k < s.nf; ++k)
        if (s.f[k].id == st.format) f = &s.f[k];
      detail::bs_format fcopy;
      if (f == nullptr) {  // (a format of the first read, when the setup now holds the second read's)
        fcopy.id = st.format;
        fcopy.el = info(st.format).element;
        fcopy.mx = info(st.format).mx;
        detail::bs_set_thresholds(fcopy);
        fcopy.tensor_scale = st.tensor_scale;
        f = &fcopy;
      }
      const detail::bs_thresholds th = detail::bs_block_thresholds(s, *f, c.worst_amax);
      detail::bs_block_error(*f, a, w.elements, th, w.error_max_abs, w.error_rms);
      if (!columns) {
        w.first_element = static_cast<std::int64_t>(first_p);
      } else {
        // processed row (outer o, inner i), column along the axis: flat = (o * A + col) * inner + i
        const std::uint64_t o = c.worst_row / s.inner, i = c.worst_row % s.inner;
        w.first_element = static_cast<std::int64_t>((o * s.L + c.worst_col) * s.inner + i);
      }
    }
  }
  return r;
}

/// check_block_scaled of any supported tensor (see traits.hpp).
template <class T, class = std::enable_if_t<!std::is_same<std::decay_t<T>, tensor_view>::value>>
block_scaled_result check_block_scaled(const T& tensor, const block_scaled_options& opt = {}) {
  return check_block_scaled(to_view(tensor), opt);
}

namespace detail {

/// The recorder's block-scaled pass (block_scaled_record.hpp's run_block_check): a target as options.
inline block_scaled_result recorder_block_check(const tensor_view& v, const block_target& t, const check_options& c) {
  block_scaled_options o;
  o.formats = t.formats;
  o.rule = t.rule;
  o.axis = t.axis;
  o.nvfp4_tensor_amax = t.nvfp4_tensor_amax;
  o.check = c;
  return check_block_scaled(v, o);
}
inline bool install_block_check() {
  block_check_slot().store(&recorder_block_check, std::memory_order_release);
  return true;
}
/// Installs the recorder's block-scaled pass when any translation unit includes this header.
inline const bool block_check_installed = install_block_check();

}  // namespace detail

NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_BLOCK_SCALED_HPP
