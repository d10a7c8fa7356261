// nanscope tests — cuda_block_scaled_emulation_test.cpp: the CUDA block-scaled what-if kernel
// (detail/cuda_block_scaled.cuh, bsc_kernel in detail/cuda_block_scaled_launch.cuh) played on the CPU with the
// kernel's own per-block functions, composed as the kernel composes them: a grid of blocks of 8 warps, warps
// taking unit blocks grid-stride, each lane's |x|, the half-warp and warp amax by the kernel's xor-shuffle tree,
// per format each lane's thresholds and class, the ballots' masks, the accounting lane (f, or 5 and 21 for NVFP4)
// with its histogram bin (the block's shared histogram) and block record, and the lanes' counters folded into
// the records at the end (the atomics become plain folds: they are integer adds and maxes, exact and order-free).
// The launches are scheduled by bsc_schedule (NVFP4's tensor-amax launch first when no amax is given) and the
// records finalized by bsc_finalize, exactly as nanscope::cuda::check_block_scaled does; every field is compared
// with the host check_block_scaled (itself checked against an independent quantizer in block_scaled_test.cpp).
// What this cannot test is CUDA itself (shuffles, ballots, atomics, shared memory): tests/cuda/cuda_test.cu does,
// on a GPU.
#define NANSCOPE_IMPL_CUDA_EMULATION 1
#include <nanscope/detail/cuda_block_scaled.cuh>
#include <nanscope/block_scaled.hpp>

#include "support/reference.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ns = nanscope;
namespace nd = nanscope::cuda::detail;

/// A warp's end in either kernel (bsc_kernel_end): the finite amax by a shuffle tree into lane 0; each lane's
/// counters into its format (lane_format: the kernel's mapping; the atomics become plain folds).
void warp_end(const nd::bsc_params& p, const nd::bsc_lane_acc (&acc)[32], const unsigned long long (&famax)[32],
              int (*lane_format)(unsigned)) {
  unsigned long long m = 0;
  for (unsigned l = 0; l < 32; ++l) m = std::max(m, famax[l]);
  if (p.want_amax != 0) p.out->finite_amax = std::max(p.out->finite_amax, m);
  for (unsigned l = 0; l < 32; ++l) {
    const int f = lane_format(l);
    if (f < 0) continue;
    nd::bsc_record& r = p.out->f[f];
    r.zero_blocks += acc[l].zero_blocks;
    r.nan_blocks += acc[l].nan_blocks;
    r.zero_scale_blocks += acc[l].zero_scale_blocks;
    r.lossy_blocks += acc[l].lossy_blocks;
    r.clipped += acc[l].clipped;
    r.flushed += acc[l].flushed;
    r.subnormal += acc[l].subnormal;
    r.worst_key = std::max(r.worst_key, acc[l].worst_key);
  }
}

/// bsc_kernel over `grid` blocks of block_threads threads, played warp by warp and lane by lane.
void emulate_kernel(const nd::bsc_params& p, unsigned grid) {
  const unsigned wpb = static_cast<unsigned>(nd::block_threads) / 32u;
  const unsigned long long nwarps = static_cast<unsigned long long>(grid) * wpb;
  std::vector<unsigned> hist(static_cast<std::size_t>(nd::bsc_nformats) * 256u);
  for (unsigned b = 0; b < grid; ++b) {
    std::fill(hist.begin(), hist.end(), 0u);  // the block's shared histogram
    for (unsigned w = 0; w < wpb; ++w) {
      nd::bsc_lane_acc acc[32];
      unsigned long long famax[32] = {};
      for (unsigned long long u = static_cast<unsigned long long>(b) * wpb + w; u < p.units; u += nwarps) {
        const nd::bsc_unit g = nd::bsc_unit_of(p, u);
        unsigned long long a[32], h[32], full[32];
        for (unsigned l = 0; l < 32; ++l) {
          a[l] = static_cast<int>(l) < g.len ? nd::bsc_abs_bits(p, nd::bsc_elem(p, g, l)) : 0u;
          if (p.want_amax != 0) {
            const unsigned long long fa = a[l] < nd::bsc_inf ? a[l] : 0u;
            famax[l] = fa > famax[l] ? fa : famax[l];
          }
          h[l] = a[l];
        }
        for (unsigned o = 8; o > 0; o >>= 1) {  // __shfl_xor_sync: every lane takes its partner's value
          unsigned long long before[32];
          std::copy(h, h + 32, before);
          for (unsigned l = 0; l < 32; ++l) h[l] = std::max(before[l], before[l ^ o]);
        }
        for (unsigned l = 0; l < 32; ++l) full[l] = std::max(h[l], h[l ^ 16u]);
        for (int f = 0; f < nd::bsc_nformats; ++f) {
          if (((p.formats >> f) & 1u) == 0) continue;
          nd::bsc_th th[32];
          unsigned clip = 0, flush = 0, sub = 0;
          for (unsigned l = 0; l < 32; ++l) {
            th[l] = nd::bsc_lane_thresholds(p, f, nd::bsc_lane_amax(f, h[l], full[l]));
            const unsigned c = nd::bsc_classify(th[l], a[l]);
            clip |= (c & 1u) << l;
            flush |= ((c >> 1) & 1u) << l;
            sub |= ((c >> 2) & 1u) << l;
          }
          for (unsigned l = 0; l < 32; ++l) {
            const nd::bsc_lane_out o =
                nd::bsc_lane_account(p, f, l, g, th[l], nd::bsc_lane_amax(f, h[l], full[l]), clip, flush, sub, acc[l]);
            if (o.bin >= 0) ++hist[static_cast<std::size_t>(f) * 256u + static_cast<unsigned>(o.bin)];
            if (o.rec_at != ~0ull && p.per_block[f] != nullptr) p.per_block[f][o.rec_at] = o.rec;
          }
        }
      }
      warp_end(p, acc, famax, nd::bsc_lane_format);
    }
    for (std::size_t i = 0; i < hist.size(); ++i) p.out->f[i / 256u].hist[i % 256u] += hist[i];
  }
}

/// bsc_quad_kernel (the packed path: a warp per quad of four unit blocks, lane l holding elements 4l..4l+3 of it)
/// over `grid` blocks, played warp by warp and lane by lane: the vector loads, the xor-shuffle trees over lanes
/// (1, 2: the half; 4: the unit) of the maxima and of the packed counts, the accounting lanes.
void emulate_quad_kernel(const nd::bsc_params& p, unsigned grid, int unroll) {
  const unsigned wpb = static_cast<unsigned>(nd::block_threads) / 32u;
  const unsigned long long nwarps = static_cast<unsigned long long>(grid) * wpb;
  const unsigned long long quads = (p.units + 3u) / 4u;
  std::vector<unsigned> hist(static_cast<std::size_t>(nd::bsc_nformats) * 256u);
  for (unsigned b = 0; b < grid; ++b) {
    std::fill(hist.begin(), hist.end(), 0u);
    for (unsigned w = 0; w < wpb; ++w) {
      nd::bsc_lane_acc acc[32];
      unsigned long long famax[32] = {};
      for (unsigned long long q0 = static_cast<unsigned long long>(b) * wpb + w; q0 < quads;
           q0 += nwarps * static_cast<unsigned long long>(unroll)) {
        for (int r = 0; r < unroll; ++r) {
          const unsigned long long q = q0 + static_cast<unsigned long long>(r) * nwarps;
          if (q >= quads) break;
          unsigned long long a[32][4], h[32], full[32];
          bool valid[32];
          for (unsigned l = 0; l < 32; ++l) {
            unsigned long long raw[4];
            nd::bsc_quad_load(p, q, l, raw);
            valid[l] = q * 4u + (l >> 3) < p.units;
            unsigned long long m = 0;
            for (int k = 0; k < 4; ++k) {
              a[l][k] = valid[l] ? nd::bsc_abs_of_raw(p.type, raw[k]) : 0u;
              m = std::max(m, a[l][k]);
              if (p.want_amax != 0 && a[l][k] < nd::bsc_inf) famax[l] = std::max(famax[l], a[l][k]);
            }
            h[l] = m;
          }
          for (unsigned o = 1; o <= 2; o <<= 1) {
            unsigned long long before[32];
            std::copy(h, h + 32, before);
            for (unsigned l = 0; l < 32; ++l) h[l] = std::max(before[l], before[l ^ o]);
          }
          for (unsigned l = 0; l < 32; ++l) full[l] = std::max(h[l], h[l ^ 4u]);
          for (int f = 0; f < nd::bsc_nformats; ++f) {
            if (((p.formats >> f) & 1u) == 0) continue;
            nd::bsc_th th[32];
            unsigned cnt[32];
            for (unsigned l = 0; l < 32; ++l) {
              th[l] = nd::bsc_lane_thresholds(p, f, nd::bsc_lane_amax(f, h[l], full[l]));
              cnt[l] = nd::bsc_quad_classify(th[l], a[l]);
            }
            for (unsigned o = 1; o <= (f == nd::bsc_nv ? 2u : 4u); o <<= 1) {
              unsigned before[32];
              std::copy(cnt, cnt + 32, before);
              for (unsigned l = 0; l < 32; ++l) cnt[l] = before[l] + before[l ^ o];
            }
            for (unsigned l = 0; l < 32; ++l) {
              if (!valid[l] || (l & 7u) != nd::bsc_quad_account_lane(f, (l >> 2) & 1u)) continue;
              const unsigned long long index = nd::bsc_quad_index(f, q, l);
              const nd::bsc_lane_out o = nd::bsc_account(index, th[l], nd::bsc_lane_amax(f, h[l], full[l]),
                                                         cnt[l] & 0xFFu, (cnt[l] >> 8) & 0xFFu, (cnt[l] >> 16) & 0xFFu,
                                                         acc[l]);
              if (o.bin >= 0) ++hist[static_cast<std::size_t>(f) * 256u + static_cast<unsigned>(o.bin)];
              if (p.per_block[f] != nullptr) p.per_block[f][index] = o.rec;
            }
          }
        }
      }
      warp_end(p, acc, famax, nd::bsc_quad_lane_format);
    }
    for (std::size_t i = 0; i < hist.size(); ++i) p.out->f[i / 256u].hist[i % 256u] += hist[i];
  }
}

/// Launches that took the packed path (bsc_params::quad) and the one-unit path.
unsigned long long quad_launches = 0, unit_launches = 0;

/// nanscope::cuda::check_block_scaled's sequence with the emulated kernel; the health part from the host. As
/// bsc_launch: the packed path where the parameters allow it (even grids with two quads in flight, as the
/// measurement variant), else (or with force_unit) one unit per warp.
ns::block_scaled_result emulate_check(const ns::tensor_view& v, const ns::block_scaled_options& opt, unsigned grid,
                                      bool force_unit = false) {
  const nd::bsc_plan pl = nd::bsc_make_plan(v, opt);
  auto rec = std::make_unique<nd::bsc_records>();
  std::memset(rec.get(), 0, sizeof(nd::bsc_records));
  std::vector<ns::block_record> pb[nd::bsc_nformats];
  ns::block_record* ptr[nd::bsc_nformats] = {};
  if (pl.keep_blocks)
    for (int k = 0; k < nd::bsc_nformats; ++k)
      if (pl.formats.has(static_cast<ns::block_format>(k))) {
        pb[k].assign(static_cast<std::size_t>(pl.rows * nd::bsc_blocks_per_row(pl, static_cast<ns::block_format>(k))),
                     ns::block_record{});
        ptr[k] = pb[k].data();
      }
  const float ts = nd::bsc_schedule(
      pl,
      [&](unsigned formats, bool want_amax, float tscale) {
        const nd::bsc_params p = nd::bsc_make_params(pl, v.data, formats, want_amax, tscale, rec.get(), ptr);
        if (p.quad != 0 && !force_unit) {
          ++quad_launches;
          emulate_quad_kernel(p, grid, grid % 2 == 0 ? 2 : 1);
        } else {
          ++unit_launches;
          emulate_kernel(p, grid);
        }
      },
      [&] { return rec->finite_amax; });
  const std::size_t es = ns::size_of(v.type);
  ns::block_scaled_result r = nd::bsc_finalize(
      pl, *rec, ts,
      [&](unsigned long long first, unsigned long long step, int len, unsigned char* buf) {
        for (int k = 0; k < len; ++k) {
          const unsigned long long flat = first + static_cast<unsigned long long>(k) * step;
          const long long off = pl.layout.rank > 0 ? nd::bsc_offset(pl.layout, flat) : static_cast<long long>(flat);
          std::memcpy(buf + static_cast<std::size_t>(k) * es,
                      static_cast<const unsigned char*>(v.data) + off * static_cast<long long>(es), es);
        }
      },
      pl.keep_blocks ? pb : nullptr);
  r.health = ns::check(v, opt.check);
  return r;
}

bool same_double(double a, double b) {
  std::uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return x == y;
}

/// Every field of the two results; the number of differences (each reported).
int compare_results(const ns::block_scaled_result& dev, const ns::block_scaled_result& host, const std::string& what) {
  int bad = 0;
  auto expect = [&](bool ok, const char* field, const ns::block_format_stats& s, double got, double want) {
    if (ok) return;
    ++bad;
    if (bad <= 8)
      FAIL_CHECK(what << " " << std::string(ns::name(s.format)) << " " << std::string(ns::name(s.rule)) << ": "
                      << std::string(field) << " emulated " << got << ", host " << want);
  };
  if (dev.formats.size() != host.formats.size() || dev.axis != host.axis) {
    FAIL_CHECK(what << ": formats or axis differ");
    return 1;
  }
  for (std::size_t k = 0; k < dev.formats.size(); ++k) {
    const ns::block_format_stats &d = dev.formats[k], &h = host.formats[k];
    expect(d.format == h.format && d.rule == h.rule && d.block_size == h.block_size, "format", h, 0, 0);
#define NSBS_FIELD(f) expect(d.f == h.f, #f, h, static_cast<double>(d.f), static_cast<double>(h.f))
    NSBS_FIELD(blocks);
    NSBS_FIELD(elements);
    NSBS_FIELD(zero_blocks);
    NSBS_FIELD(nan_blocks);
    NSBS_FIELD(zero_scale_blocks);
    NSBS_FIELD(lossy_blocks);
    NSBS_FIELD(clipped);
    NSBS_FIELD(flushed);
    NSBS_FIELD(subnormal);
    NSBS_FIELD(scale_exp_min);
    NSBS_FIELD(scale_exp_max);
    NSBS_FIELD(worst.index);
    NSBS_FIELD(worst.first_element);
    NSBS_FIELD(worst.elements);
    NSBS_FIELD(worst.scale);
    NSBS_FIELD(worst.clipped);
    NSBS_FIELD(worst.flushed);
#undef NSBS_FIELD
    expect(d.scale_histogram == h.scale_histogram, "scale_histogram", h, 0, 0);
    expect(same_double(d.scale_exp_mean, h.scale_exp_mean), "scale_exp_mean", h, d.scale_exp_mean, h.scale_exp_mean);
    expect(same_double(d.scale_exp_std, h.scale_exp_std), "scale_exp_std", h, d.scale_exp_std, h.scale_exp_std);
    expect(same_double(d.tensor_scale, h.tensor_scale), "tensor_scale", h, d.tensor_scale, h.tensor_scale);
    expect(same_double(d.worst.abs_max, h.worst.abs_max), "worst.abs_max", h, d.worst.abs_max, h.worst.abs_max);
    expect(same_double(d.worst.error_max_abs, h.worst.error_max_abs), "worst.error_max_abs", h, d.worst.error_max_abs,
           h.worst.error_max_abs);
    expect(same_double(d.worst.error_rms, h.worst.error_rms), "worst.error_rms", h, d.worst.error_rms, h.worst.error_rms);
    bool pb = d.per_block.size() == h.per_block.size();
    for (std::size_t i = 0; pb && i < d.per_block.size(); ++i) {
      const ns::block_record &x = d.per_block[i], &y = h.per_block[i];
      pb = x.scale == y.scale && x.clipped == y.clipped && x.flushed == y.flushed && x.subnormal == y.subnormal;
    }
    expect(pb, "per_block", h, static_cast<double>(d.per_block.size()), static_cast<double>(h.per_block.size()));
  }
  return bad;
}

/// A source tensor: raw bytes of one dtype.
struct source {
  ns::dtype type = ns::dtype::f32;
  std::vector<unsigned char> bytes;
  void push_f32_bits(std::uint32_t b) {
    if (type == ns::dtype::f32) {
      const unsigned char* q = reinterpret_cast<const unsigned char*>(&b);
      bytes.insert(bytes.end(), q, q + 4);
      return;
    }
    std::uint16_t h;
    if (type == ns::dtype::bf16) {
      h = static_cast<std::uint16_t>(b >> 16);  // truncated: every bf16 pattern is data
    } else {
      // f16, truncated; beyond the range: inf (NaN stays NaN); below: subnormals, then 0
      const std::uint32_t sign = (b >> 16) & 0x8000u, e = (b >> 23) & 0xFFu, m = b & 0x7FFFFFu;
      if (e == 0xFF) h = static_cast<std::uint16_t>(sign | 0x7C00u | (m != 0 ? 0x200u : 0u));
      else if (e >= 127 + 16) h = static_cast<std::uint16_t>(sign | 0x7C00u);
      else if (e >= 127 - 14) h = static_cast<std::uint16_t>(sign | ((e - 112u) << 10) | (m >> 13));
      else if (e >= 127 - 25) h = static_cast<std::uint16_t>(sign | (((m | 0x800000u) >> (126u - 14u - e + 13u + 1u)) & 0x3FFu));
      else h = static_cast<std::uint16_t>(sign);
    }
    const unsigned char* q = reinterpret_cast<const unsigned char*>(&h);
    bytes.insert(bytes.end(), q, q + 2);
  }
  void push(double v) {
    const float f = static_cast<float>(v);
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    push_f32_bits(b);
  }
};

std::uint32_t f32_bits(double v) {
  const float f = static_cast<float>(v);
  std::uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

/// Values at, and one f32 step either side of, the element values and rounding midpoints of every MX format and
/// rule for a block whose top is `top`, and of NVFP4 at tensor scale 1; all at most `top`.
std::vector<std::uint32_t> boundary_bits(double top) {
  std::vector<std::uint32_t> v;
  auto around = [&](double x) {
    const std::uint32_t b = f32_bits(x);
    if ((b & 0x7FFFFFFFu) == 0 || (b & 0x7F800000u) == 0x7F800000u) return;
    for (std::uint32_t c : {b - 1u, b, b + 1u}) v.push_back(c);
  };
  const ns::element_format els[] = {ns::element_format::e2m1, ns::element_format::e2m3, ns::element_format::e3m2,
                                    ns::element_format::e4m3, ns::element_format::e5m2};
  for (ns::element_format f : els)
    for (ns::scale_rule rule : {ns::scale_rule::ocp, ns::scale_rule::round_up, ns::scale_rule::even}) {
      const unsigned code = ns::mx_scale_code(f, rule, top);
      if (code == 255) continue;
      const double X = std::ldexp(1.0, static_cast<int>(code) - 127);
      const unsigned mx = ns::info(f).max_code;
      for (unsigned c = 0; c <= mx; c += (mx > 32 ? 5u : 1u)) {  // the 8-bit formats: every fifth code
        const double a = ns::decode(f, c) * X;
        const double b = (c < mx ? ns::decode(f, c + 1) : 2 * ns::decode(f, c)) * X;
        around(a);
        around((a + b) / 2);
      }
    }
  const double S = ns::decode(ns::element_format::e4m3, ns::nvfp4_block_scale(top, 1.0f));
  for (unsigned c = 0; c < 7; ++c) {
    around(ns::decode(ns::element_format::e2m1, c) * S);
    around((ns::decode(ns::element_format::e2m1, c) + ns::decode(ns::element_format::e2m1, c + 1)) / 2 * S);
  }
  std::vector<std::uint32_t> kept;
  const std::uint32_t tb = f32_bits(top);
  for (std::uint32_t b : v)
    if (b <= tb) kept.push_back(b);
  return kept;
}

/// Block tops at and around the rules' switch points, E2M1/E4M3 maxima and NVFP4's E4M3 scale midpoints x 6.
const double tops[] = {1.0, 1.5, 1.75, 1.875, 1.9375, 5.5, 6.0, 7.0, 7.5, 0.3, 448.0, 464.0, 18.0, 19.5, 0.375, 28.0, 57344.0};

/// Kinds of data: 0 N(0,1); 1 zero rows and zero blocks; 2 one outlier per block; 3 rounding boundaries;
/// 4 subnormal sources; 5 NaN / +-Inf sprinkled; 6 a wide exponent range; 7 near the dtype's top.
source make(ns::dtype t, std::uint64_t rows, std::uint64_t L, int kind, std::mt19937_64& rng) {
  source s;
  s.type = t;
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<std::uint32_t> pool;
  std::size_t plant1 = 0, plant2 = 0;
  double top = 1.0;
  for (std::uint64_t r = 0; r < rows; ++r)
    for (std::uint64_t c = 0; c < L; ++c) {
      double v = g(rng);
      switch (kind) {
        case 0: break;
        case 1: v = (r % 3 == 0 || (c / 32) % 4 == 1) ? 0.0 : v; break;
        case 2: if (c % 32 == r % 32) v = (rng() & 1 ? -1 : 1) * std::ldexp(900.0, static_cast<int>(rng() % 9)); break;
        case 3: {
          if (c % 32 == 0) {
            static const std::vector<std::vector<std::uint32_t>> pools = [] {
              std::vector<std::vector<std::uint32_t>> p;
              for (double x : tops) p.push_back(boundary_bits(x));
              return p;
            }();
            const std::size_t k = static_cast<std::size_t>(rng() % (sizeof tops / sizeof tops[0]));
            top = tops[k];
            pool = pools[k];
            plant1 = static_cast<std::size_t>(rng() % 16);
            plant2 = 16 + static_cast<std::size_t>(rng() % 16);
          }
          std::uint32_t b = (c % 32 == plant1 || c % 32 == plant2 || pool.empty()) ? f32_bits(top)
                                                                                  : pool[rng() % pool.size()];
          if (rng() & 1) b |= 0x80000000u;
          s.push_f32_bits(b);
          continue;
        }
        case 4: v = std::ldexp(g(rng), t == ns::dtype::f16 ? -18 : -130); break;
        case 5: {
          const std::uint64_t k = rng() % 48;
          if (k < 3) {
            s.push_f32_bits(k == 0 ? 0x7FC00000u : k == 1 ? 0x7F800000u : 0xFF800000u);
            continue;
          }
          break;
        }
        case 6: v = std::ldexp(g(rng), static_cast<int>(rng() % 60) - 30); break;
        default: v = std::ldexp(g(rng), t == ns::dtype::f16 ? 14 : 120); break;
      }
      if (t == ns::dtype::f16 && std::fabs(v) > 65504.0) v = v < 0 ? -65504.0 : 65504.0;
      s.push(v);
    }
  return s;
}

ns::tensor_view view_of(const source& s, std::uint64_t rows, std::uint64_t L, const char* name = "t") {
  return ns::tensor_view::contiguous(s.bytes.data(), s.type,
                                     {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(L)}, name);
}

const ns::scale_rule all_rules[] = {ns::scale_rule::ocp, ns::scale_rule::round_up, ns::scale_rule::even};
const ns::dtype all_types[] = {ns::dtype::f32, ns::dtype::bf16, ns::dtype::f16};

}  // namespace

TEST_CASE("cuda emulation: block-scaled what-if kernel, random and adversarial data, every format, rule and dtype") {
  std::mt19937_64 rng(33);
  const unsigned long long quad0 = quad_launches, unit0 = unit_launches;
  // row lengths: whole units, a partial last unit (odd, below 16, between 16 and 32), one element
  const std::uint64_t Ls[] = {64, 96, 47, 7, 1, 19};
  const std::uint64_t target = nstest::scaled(640, 320);  // elements per tensor, about
  int bad = 0;
  for (ns::dtype t : all_types)
    for (int kind = 0; kind < 8; ++kind)
      for (std::uint64_t L : Ls) {
        const std::uint64_t rows = std::max<std::uint64_t>(1, target / L);
        const source s = make(t, rows, L, kind, rng);
        const ns::tensor_view v = view_of(s, rows, L);
        for (ns::scale_rule rule : all_rules) {
          auto opt = ns::block_scaled_options{}.with_rule(rule).with_keep_blocks(((kind + static_cast<int>(L)) & 1) != 0);
          const std::string what = std::string(ns::name(t)) + " kind " + std::to_string(kind) + " L " + std::to_string(L);
          bad += compare_results(emulate_check(v, opt, 3), ns::check_block_scaled(v, opt), what);
          if (L % 32 == 0)  // the packed path's data through the one-unit path too
            bad += compare_results(emulate_check(v, opt, 4, true), ns::check_block_scaled(v, opt), what + " unit path");
          if (kind == 3 && rule == ns::scale_rule::ocp) {  // NVFP4 at tensor scale 1: the boundaries are in the data
            opt.with_nvfp4_tensor_amax(2688.0);
            bad += compare_results(emulate_check(v, opt, 2), ns::check_block_scaled(v, opt), what + " amax 2688");
          }
        }
      }
  CHECK(bad == 0);
  CHECK(quad_launches > quad0);  // L = 64, 96: the packed path; the others and the forced runs: one unit per warp
  CHECK(unit_launches > unit0);
}

TEST_CASE("cuda emulation: block-scaled special tensors (zeros, one outlier, NaN/Inf blocks, subnormal, f16 top)") {
  int bad = 0;
  for (ns::dtype t : all_types) {
    auto run = [&](const source& s, std::uint64_t rows, std::uint64_t L, const std::string& what) {
      for (ns::scale_rule rule : all_rules) {
        const auto opt = ns::block_scaled_options{}.with_rule(rule).with_keep_blocks();
        const ns::tensor_view v = view_of(s, rows, L);
        bad += compare_results(emulate_check(v, opt, 1), ns::check_block_scaled(v, opt), std::string(ns::name(t)) + " " + what);
        // a subset of formats, NVFP4 alone without a tensor amax (the amax launch has no formats), and a given amax
        const auto nv = ns::block_scaled_options{}.with_rule(rule).with_formats(ns::block_format_set{}.with(ns::block_format::nvfp4));
        bad += compare_results(emulate_check(v, nv, 2), ns::check_block_scaled(v, nv), std::string(ns::name(t)) + " nv " + what);
        const auto nv0 = ns::block_scaled_options{nv}.with_nvfp4_tensor_amax(0.0);
        bad += compare_results(emulate_check(v, nv0, 1), ns::check_block_scaled(v, nv0), std::string(ns::name(t)) + " nv0 " + what);
        const auto sub = ns::block_scaled_options{}.with_rule(rule).with_formats(
            ns::block_format_set{}.with(ns::block_format::mxfp6_e3m2).with(ns::block_format::mxfp8_e5m2));
        bad += compare_results(emulate_check(v, sub, 1), ns::check_block_scaled(v, sub), std::string(ns::name(t)) + " sub " + what);
      }
    };
    source zeros;
    zeros.type = t;
    for (int i = 0; i < 4 * 40; ++i) zeros.push(i % 2 ? 0.0 : -0.0);
    run(zeros, 4, 40, "zeros");
    source outlier;
    outlier.type = t;
    for (int i = 0; i < 4 * 256; ++i) outlier.push(i == 3 ? 900.0 : 0.01);
    run(outlier, 4, 256, "one outlier");
    {  // the same elements at an odd address: the kernel's byte loads
      std::vector<unsigned char> shifted(outlier.bytes.size() + 1);
      std::memcpy(shifted.data() + 1, outlier.bytes.data(), outlier.bytes.size());
      const ns::tensor_view v = ns::tensor_view::contiguous(shifted.data() + 1, t, {4, 256}, "shifted");
      const auto opt = ns::block_scaled_options{}.with_keep_blocks();
      CHECK(nd::bsc_make_params(nd::bsc_make_plan(v, opt), v.data, 1u, false, 0.0f, nullptr, nullptr).aligned == 0);
      bad += compare_results(emulate_check(v, opt, 2), ns::check_block_scaled(v, opt), std::string(ns::name(t)) + " misaligned");
    }
    source bad_blocks;  // NaN in one block, +inf in another, -inf in a partial last block, NaN in a second half
    bad_blocks.type = t;
    for (int i = 0; i < 3 * 50; ++i) {
      if (i == 5) bad_blocks.push_f32_bits(0x7FC00000u);
      else if (i == 40) bad_blocks.push_f32_bits(0x7F800000u);
      else if (i == 50 + 49) bad_blocks.push_f32_bits(0xFF800000u);
      else if (i == 100 + 20) bad_blocks.push_f32_bits(0xFFC00001u);
      else bad_blocks.push(0.25 * (i % 7) - 0.5);
    }
    run(bad_blocks, 3, 50, "NaN/Inf blocks");
    source tiny;  // the smallest subnormals of the source dtype and their neighbours
    tiny.type = t;
    for (int i = 0; i < 2 * 33; ++i) {
      const std::uint32_t b = t == ns::dtype::f32    ? static_cast<std::uint32_t>(i % 5)
                              : t == ns::dtype::bf16 ? static_cast<std::uint32_t>(i % 5) << 16
                                                     : f32_bits(std::ldexp(static_cast<double>(i % 5), -24));
      tiny.push_f32_bits(b);
    }
    run(tiny, 2, 33, "smallest subnormals");
    source top;  // the dtype's largest finite values
    top.type = t;
    const std::uint32_t tb = t == ns::dtype::f32 ? 0x7F7FFFFFu : t == ns::dtype::bf16 ? 0x7F7F0000u : f32_bits(65504.0);
    for (int i = 0; i < 2 * 20; ++i) top.push_f32_bits(i % 3 == 0 ? tb : f32_bits(1.0 / (i + 1)));
    run(top, 2, 20, "dtype max");
    source single;
    single.type = t;
    single.push(3.0);
    for (ns::scale_rule rule : all_rules) {
      const auto opt = ns::block_scaled_options{}.with_rule(rule);
      const ns::tensor_view v0 = ns::tensor_view::contiguous(single.bytes.data(), t, {}, "scalar");
      bad += compare_results(emulate_check(v0, opt, 1), ns::check_block_scaled(v0, opt), "rank 0");
      const ns::tensor_view ve = ns::tensor_view::contiguous(single.bytes.data(), t, {3, 0}, "empty");
      bad += compare_results(emulate_check(ve, opt, 1), ns::check_block_scaled(ve, opt), "empty");
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("cuda emulation: block-scaled packed kernel only where its vector loads are aligned and its units whole") {
  alignas(64) static unsigned char buf[256];
  nd::strided_layout contiguous{};
  for (int es : {1, 2, 4, 8}) {
    const int vec = es >= 4 ? 16 : 4 * es;  // the vector load of four elements (f64: two of 16 bytes)
    CHECK(nd::bsc_quad_eligible(buf, es, 64, contiguous, 1));
    CHECK(nd::bsc_quad_eligible(buf + vec, es, 64, contiguous, 1));
    CHECK_FALSE(nd::bsc_quad_eligible(buf + es, es, 64, contiguous, 1));  // element-aligned only
    if (es > 1) CHECK_FALSE(nd::bsc_quad_eligible(buf + 1, es, 64, contiguous, 1));
    CHECK_FALSE(nd::bsc_quad_eligible(buf, es, 48, contiguous, 1));  // a row ends inside a unit
    CHECK_FALSE(nd::bsc_quad_eligible(buf, es, 64, contiguous, 3));  // blocks along another axis
    nd::strided_layout strided{};
    strided.rank = 1;
    strided.shape[0] = 64;
    strided.strides[0] = 2;
    CHECK_FALSE(nd::bsc_quad_eligible(buf, es, 64, strided, 1));
  }
}

TEST_CASE("cuda emulation: block-scaled f64 and fp8 sources") {
  std::mt19937_64 rng(7);
  int bad = 0;
  std::vector<double> d(5 * 45);
  std::normal_distribution<double> g(0.0, 1.0);
  for (std::size_t i = 0; i < d.size(); ++i)
    d[i] = i % 41 == 3 ? 1e300 : i % 43 == 7 ? 4e-310 : i % 47 == 1 ? 0.0 : std::ldexp(g(rng), static_cast<int>(rng() % 40) - 20);
  std::vector<std::uint8_t> e4(5 * 45), e5(5 * 45);
  for (std::size_t i = 0; i < e4.size(); ++i) {
    e4[i] = static_cast<std::uint8_t>(rng());
    e5[i] = static_cast<std::uint8_t>(rng());
  }
  for (ns::scale_rule rule : all_rules) {
    const auto opt = ns::block_scaled_options{}.with_rule(rule).with_keep_blocks();
    const ns::tensor_view vd = ns::tensor_view::contiguous(d.data(), ns::dtype::f64, {5, 45}, "f64");
    bad += compare_results(emulate_check(vd, opt, 2), ns::check_block_scaled(vd, opt), "f64");
    const ns::tensor_view v4 = ns::tensor_view::contiguous(e4.data(), ns::dtype::f8_e4m3fn, {5, 45}, "e4m3");
    bad += compare_results(emulate_check(v4, opt, 2), ns::check_block_scaled(v4, opt), "e4m3");
    const ns::tensor_view v5 = ns::tensor_view::contiguous(e5.data(), ns::dtype::f8_e5m2, {5, 45}, "e5m2");
    bad += compare_results(emulate_check(v5, opt, 2), ns::check_block_scaled(v5, opt), "e5m2");
    // [7, 32]: the packed path (7 units: the last quad has 3), one and two quads in flight
    const auto qd = ns::tensor_view::contiguous(d.data(), ns::dtype::f64, {7, 32}, "f64 packed");
    const auto q4 = ns::tensor_view::contiguous(e4.data(), ns::dtype::f8_e4m3fn, {7, 32}, "e4m3 packed");
    const auto q5 = ns::tensor_view::contiguous(e5.data(), ns::dtype::f8_e5m2, {7, 32}, "e5m2 packed");
    for (unsigned grid : {1u, 2u}) {
      const unsigned long long quad0 = quad_launches;
      bad += compare_results(emulate_check(qd, opt, grid), ns::check_block_scaled(qd, opt), "f64 packed");
      bad += compare_results(emulate_check(q4, opt, grid), ns::check_block_scaled(q4, opt), "e4m3 packed");
      bad += compare_results(emulate_check(q5, opt, grid), ns::check_block_scaled(q5, opt), "e5m2 packed");
      CHECK(quad_launches == quad0 + 6);  // two launches each: the tensor amax first, then NVFP4
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("cuda emulation: block-scaled NVFP4 scales against nvfp4_block_scale at every E4M3 midpoint") {
  // the kernel's binary search over exact midpoint products against the host's function, at and around every
  // midpoint, for a few tensor scales (subnormal f32 ones included)
  for (float ts : {1.0f, 0.372023809f, 7.44047619f, 1e-40f, 3.0e-39f, 123456.0f}) {
    nd::bsc_plan pl;
    pl.formats = ns::block_format_set{}.with(ns::block_format::nvfp4);
    const nd::bsc_params p = nd::bsc_make_params(pl, nullptr, 1u << nd::bsc_nv, false, ts, nullptr, nullptr);
    const double q = 6.0 * nanscope::detail::f32_bits_to_double(nanscope::detail::float_to_bits(ts));
    int bad = 0;
    for (unsigned c = 0; c < 0x7E; ++c) {
      const double mid = (ns::decode(ns::element_format::e4m3, c) + ns::decode(ns::element_format::e4m3, c + 1)) / 2 * q;
      const std::uint64_t mb = nanscope::detail::double_to_bits(mid);
      for (std::uint64_t b : {mb - 1u, mb, mb + 1u, mb + (std::uint64_t{1} << 20)}) {
        const nd::bsc_th th = nd::bsc_nv_thresholds(p, b);
        const unsigned want = ns::nvfp4_block_scale(nanscope::detail::bits_to_double(b), ts);
        if (th.scale != want) ++bad;
      }
    }
    CHECK_MESSAGE(bad == 0, "tensor scale " << ts);
  }
}

TEST_CASE("cuda emulation: block-scaled blocks along every axis, strided views (transposed, with gaps)") {
  std::mt19937_64 rng(5);
  int bad = 0;
  for (ns::dtype t : all_types) {
    // a [5, 37, 42] tensor of mixed kinds: each 32-element stretch of the flat data is one kind
    const std::uint64_t n = 5 * 37 * 42;
    source s;
    s.type = t;
    for (int kind : {3, 2, 0, 5, 1, 4})
      for (const unsigned char c : make(t, 1, n / 6, kind, rng).bytes) s.bytes.push_back(c);
    const ns::tensor_view v = ns::tensor_view::contiguous(s.bytes.data(), t, {5, 37, 42}, "x");
    for (int axis : {0, 1, 2, -2}) {
      const auto opt = ns::block_scaled_options{}.with_axis(axis).with_keep_blocks(axis != 1).with_rule(
          axis == 0 ? ns::scale_rule::round_up : ns::scale_rule::even);
      bad += compare_results(emulate_check(v, opt, 2), ns::check_block_scaled(v, opt),
                             std::string(ns::name(t)) + " axis " + std::to_string(axis));
    }
    // strided: the [37, 42] slice 2 transposed to [42, 37], and every other column of each row ([5, 37, 21])
    ns::tensor_view tr = ns::tensor_view::contiguous(s.bytes.data() + 2 * 37 * 42 * ns::size_of(t), t, {42, 37}, "tr");
    tr.strides[0] = 1;
    tr.strides[1] = 42;
    ns::tensor_view gaps = ns::tensor_view::contiguous(s.bytes.data(), t, {5, 37, 21}, "gaps");
    gaps.strides[2] = 2;
    gaps.strides[1] = 42;
    gaps.strides[0] = 37 * 42;
    for (const ns::tensor_view& w : {tr, gaps})
      for (int axis : {-1, 0}) {
        const auto opt = ns::block_scaled_options{}.with_axis(axis).with_keep_blocks();
        bad += compare_results(emulate_check(w, opt, 3), ns::check_block_scaled(w, opt),
                               std::string(ns::name(t)) + " " + w.name + " axis " + std::to_string(axis));
      }
  }
  CHECK(bad == 0);
}

TEST_CASE("cuda emulation: block-scaled refusals name the tensor") {
  std::vector<float> x(64, 1.0f);
  ns::tensor_view v = ns::tensor_view::contiguous(x.data(), ns::dtype::f32, {8, 8}, "acts");
  auto msg = [&](const ns::tensor_view& w, const ns::block_scaled_options& o) {
    try {
      (void)nd::bsc_make_plan(w, o);
    } catch (const ns::error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string axis = msg(v, ns::block_scaled_options{}.with_axis(2));
  CHECK(axis.find("acts") != std::string::npos);
  CHECK(axis.find("out of range") != std::string::npos);
  CHECK(msg(v, ns::block_scaled_options{}.with_formats(ns::block_format_set{})).find("no block format") != std::string::npos);
  CHECK(msg(v, ns::block_scaled_options{}.with_check(ns::check_options{}.with_mode(ns::check_mode::curt_health)))
            .find("FULL_HEALTH") != std::string::npos);
  std::vector<std::int32_t> ints(4);
  CHECK(msg(ns::tensor_view::contiguous(ints.data(), ns::dtype::i32, {4}, "ids"), ns::block_scaled_options{})
            .find("not a floating type") != std::string::npos);
}
