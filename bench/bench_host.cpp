// nanscope benchmarks — host rows. Rows are named family/dtype/elements (Google Benchmark appends
// /real_time: every row is timed in wall-clock time so that single- and multi-threaded rows compare).
//
//   health           nanscope::check, check_mode::stats, threads = 1
//   health_hash      as health, with the content hash fused in (check_options::with_hash(), hash.hpp)
//   health_hist      as health, with the exponent histogram fused in (check_histogram, histogram.hpp)
//   health_seg       as health, with a segmented check (check(view, segments), segments.hpp): rows
//                    health_seg/<dtype>/<elements>/<segments>, uneven element segments (random cuts, fixed seed),
//                    segment_detail::flags and a threshold of 65504: the masks of segments holding NaN/Inf and
//                    over 65504, each bad segment's NaN/Inf counts and first NaN/Inf, in the same read
//   health_seg_counts  as health_seg with segment_detail::counts: also every segment's counts and abs_max
//   health_seg_kv    as health_seg on a KV-cache-like [elements / 1024, 1024] view in uniform blocks of 16 rows
//                    (tokens): health_seg_kv/<dtype>/<elements>/<blocks>
//   health_mx        as health, with the block-scaled what-if statistics in the same read (check_block_scaled,
//                    block_scaled.hpp): rows health_mx/<dtype>/<elements>/<format>, format one of mxfp8_e4m3,
//                    mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4, nvfp4 or all; the tensor is [elements / 4096, 4096]
//                    (blocks along rows of 4096), OCP scale rule, NVFP4's tensor amax given (a previous step's)
//   full_health      nanscope::check, check_mode::full_health, threads = 1
//   health_mt        nanscope::check, check_mode::stats, default threads
//   health_relu      as health, on max(x, 0) (half the elements are zeros): f32, f16, bf16
//   read_anchor      a plain vectorised sum of the same buffer, 1 thread: the memory-read yardstick
//   read_anchor_mt   the same sum on as many threads as health_mt uses
//   eigen_multipass  what a user writes with Eigen over an Eigen::Map of the buffer (built with Eigen)
//   torch_multiop    what a user writes with ATen over at::from_blob of the buffer (built with LibTorch)
//
// Every row reports bytes/s (the tensor's bytes per pass, whatever the row reads internally) and items/s.
// bench/ratios.py turns the JSON output of one or more runs into the target ratios (median and range across runs,
// PASS/FAIL on the worst run); bench/run_ratios.sh runs this benchmark 3 times with random interleaving and calls
// it; docs/benchmarks.md has the numbers.
//
// Build with the project's default flags (-O2/-O3, no -march=native): nanscope and the anchor pick their
// instruction set at run time, and the comparison rows get what a baseline x86-64 build gives a user.
#include <nanscope/check.hpp>
#include <nanscope/block_scaled.hpp>
#include <nanscope/histogram.hpp>
#include <nanscope/segments.hpp>

#include "bench_data.hpp"
#include "read_anchor.hpp"

#include <benchmark/benchmark.h>

#if defined(NANSCOPE_BENCH_HAVE_EIGEN) && NANSCOPE_BENCH_HAVE_EIGEN
#include <Eigen/Core>
#endif
#if defined(NANSCOPE_BENCH_HAVE_TORCH) && NANSCOPE_BENCH_HAVE_TORCH
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

using nanscope::dtype;

constexpr dtype bench_dtypes[] = {dtype::f32, dtype::f64, dtype::f16, dtype::bf16};
constexpr std::size_t bench_sizes[] = {std::size_t{1} << 12, std::size_t{1} << 18, std::size_t{1} << 24,
                                       std::size_t{1} << 26};

// nanscope's fixed parallel segment (check.hpp, detail::segment_elems): the multi-threaded anchor uses the
// same unit of work.
constexpr std::size_t segment_elems = std::size_t{1} << 17;

/// Threads a default nanscope check uses: NANSCOPE_THREADS if set, else the hardware threads (the rule of
/// nanscope's default_thread_count(), restated here so the bench does not lean on nanscope internals).
unsigned default_threads() {
  static const unsigned n = [] {
    if (const char* e = std::getenv("NANSCOPE_THREADS")) {
      const long v = std::strtol(e, nullptr, 10);
      if (v >= 1 && v <= 1024) return static_cast<unsigned>(v);
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1u : hw;
  }();
  return n;
}

/// Threads a default-threads check of n elements actually runs on: one below the parallel threshold
/// (nanscope::default_parallel_threshold(), 2^20 unless NANSCOPE_PARALLEL_THRESHOLD says otherwise) or when
/// there is a single segment (the rule in nanscope::check).
unsigned threads_for(std::size_t n) {
  const std::size_t segs = (n + segment_elems - 1) / segment_elems;
  if (n < nanscope::default_parallel_threshold() || segs < 2) return 1;
  return default_threads();
}

nsbench::anchor_pool& anchor_threads() {
  static nsbench::anchor_pool pool(default_threads() > 1 ? default_threads() - 1 : 0);
  return pool;
}

nsbench::lanes lanes_of(dtype t) {
  switch (t) {
    case dtype::f64: return nsbench::lanes::f64;
    case dtype::f32: return nsbench::lanes::f32;
    default: return nsbench::lanes::u16;
  }
}

void set_throughput(benchmark::State& state, dtype t, std::size_t n) {
  const auto per_pass = static_cast<std::int64_t>(n);
  state.SetItemsProcessed(state.iterations() * per_pass);
  state.SetBytesProcessed(state.iterations() * per_pass * static_cast<std::int64_t>(nanscope::size_of(t)));
}

const nsbench::buffer& data_for(benchmark::State& state, dtype t, std::size_t n,
                                nsbench::pattern p = nsbench::pattern::normal) {
  (void)state;
  return nsbench::buffer_cache::instance().get(t, n, p);
}

// ---------------------------------------------------------------------------------------------------------
// nanscope rows
// ---------------------------------------------------------------------------------------------------------
void bm_check(benchmark::State& state, dtype t, std::size_t n, nanscope::check_mode mode, unsigned threads,
              nsbench::pattern p, bool hash = false) {
  const nsbench::buffer& b = data_for(state, t, n, p);
  const nanscope::tensor_view v = nanscope::tensor_view::flat(b.data, t, static_cast<std::int64_t>(n));
  const auto opt = nanscope::check_options{}.with_mode(mode).with_threads(threads).with_hash(hash);
  {
    // not timed: the buffer is what the row claims to be (no NaN/Inf, so the fast path is measured)
    const nanscope::health_result r = nanscope::check(v, opt);
    if (r.nonfinite() != 0 || r.count != n || r.hash.valid != hash) {
      state.SkipWithError("benchmark buffer is not finite");
      return;
    }
  }
  for (auto _ : state) {
    nanscope::health_result r = nanscope::check(v, opt);
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  set_throughput(state, t, n);
  state.counters["nthreads"] = threads == 0 ? threads_for(n) : threads;
}

void bm_check_hist(benchmark::State& state, dtype t, std::size_t n) {
  const nsbench::buffer& b = data_for(state, t, n);
  const nanscope::tensor_view v = nanscope::tensor_view::flat(b.data, t, static_cast<std::int64_t>(n));
  const auto opt = nanscope::check_options{}.with_threads(1);
  {
    const nanscope::histogram_result r = nanscope::check_histogram(v, opt);
    if (r.health.nonfinite() != 0 || r.histogram.total() != n) {
      state.SkipWithError("benchmark buffer is not finite");
      return;
    }
  }
  for (auto _ : state) {
    nanscope::histogram_result r = nanscope::check_histogram(v, opt);
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  set_throughput(state, t, n);
  state.counters["nthreads"] = 1;
}

/// health_mx: check_block_scaled for one block format (or all: fmt < 0) on a [n / 4096, 4096] view.
void bm_check_mx(benchmark::State& state, dtype t, std::size_t n, int fmt) {
  const nsbench::buffer& b = data_for(state, t, n);
  const std::int64_t cols = 4096;
  const nanscope::tensor_view v =
      nanscope::tensor_view::contiguous(b.data, t, {static_cast<std::int64_t>(n) / cols, cols});
  const nanscope::health_result h = nanscope::check(v, nanscope::check_options{}.with_threads(1));
  nanscope::block_format_set formats =
      fmt < 0 ? nanscope::block_format_set::all() : nanscope::block_format_set{}.with(static_cast<nanscope::block_format>(fmt));
  const auto opt = nanscope::block_scaled_options{}
                       .with_formats(formats)
                       .with_check(nanscope::check_options{}.with_threads(1))
                       .with_nvfp4_tensor_amax(h.abs_max);  // as a previous step's amax: NVFP4 in the same read
  {
    const nanscope::block_scaled_result r = nanscope::check_block_scaled(v, opt);
    if (r.health.nonfinite() != 0 || r.health.count != n || r.formats.empty()) {
      state.SkipWithError("benchmark buffer is not finite");
      return;
    }
  }
  for (auto _ : state) {
    nanscope::block_scaled_result r = nanscope::check_block_scaled(v, opt);
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  set_throughput(state, t, n);
  state.counters["nthreads"] = 1;
}

/// health_seg / health_seg_counts / health_seg_kv: a segmented check, stats mode, 1 thread, threshold 65504. kv: a
/// [n / 1024, 1024] view in blocks of 16 rows; else `segments` uneven element segments of the flat view.
void bm_check_seg(benchmark::State& state, dtype t, std::size_t n, std::size_t segments, bool kv, bool counts) {
  const nsbench::buffer& b = data_for(state, t, n);
  const auto ni = static_cast<std::int64_t>(n);
  const nanscope::tensor_view v = kv ? nanscope::tensor_view::contiguous(b.data, t, {ni / 1024, 1024})
                                     : nanscope::tensor_view::flat(b.data, t, ni);
  std::vector<std::int64_t> offsets = {0, ni};
  std::uint64_t x = 0x9E3779B97F4A7C15ull;  // splitmix64, fixed seed: the same cuts in every run
  while (!kv && offsets.size() < segments + 1) {
    x += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    offsets.push_back(static_cast<std::int64_t>((z ^ (z >> 31)) % n));
    if (offsets.size() == segments + 1) {
      std::sort(offsets.begin(), offsets.end());
      offsets.erase(std::unique(offsets.begin(), offsets.end()), offsets.end());
    }
  }
  const nanscope::segments segs = kv ? nanscope::segments::every_rows(16) : nanscope::segments::elements(offsets);
  const auto opt = nanscope::check_options{}.with_threads(1);
  const auto so = nanscope::segment_options{}
                      .with_level(counts ? nanscope::segment_detail::counts : nanscope::segment_detail::flags)
                      .with_threshold(65504.0);
  {
    const nanscope::segmented_result r = nanscope::check(v, segs, opt, so);
    if (r.total.nonfinite() != 0 || r.total.count != n || r.count != segments || !r.bad.empty()) {
      state.SkipWithError("benchmark buffer is not finite, or the segmentation is not the row's");
      return;
    }
  }
  for (auto _ : state) {
    nanscope::segmented_result r = nanscope::check(v, segs, opt, so);
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  set_throughput(state, t, n);
  state.counters["nthreads"] = 1;
  state.counters["segments"] = static_cast<double>(segments);
}

// ---------------------------------------------------------------------------------------------------------
// The read anchor
// ---------------------------------------------------------------------------------------------------------
void bm_read_anchor(benchmark::State& state, dtype t, std::size_t n) {
  const nsbench::buffer& b = data_for(state, t, n);
  const nsbench::lanes k = lanes_of(t);
  for (auto _ : state) {
    double s = nsbench::read_sum(b.data, n, k);
    benchmark::DoNotOptimize(s);
  }
  set_throughput(state, t, n);
  state.counters["nthreads"] = 1;
}

void bm_read_anchor_mt(benchmark::State& state, dtype t, std::size_t n) {
  const nsbench::buffer& b = data_for(state, t, n);
  const nsbench::lanes k = lanes_of(t);
  const unsigned threads = threads_for(n);
  std::vector<double> partial((n + segment_elems - 1) / segment_elems + 1);
  nsbench::parallel_sum job{static_cast<const unsigned char*>(b.data), n, segment_elems, nanscope::size_of(t), k,
                            partial.data()};
  nsbench::anchor_pool& pool = anchor_threads();
  for (auto _ : state) {
    double s = threads > 1 ? job.run(pool) : nsbench::read_sum(b.data, n, k);
    benchmark::DoNotOptimize(s);
  }
  set_throughput(state, t, n);
  state.counters["nthreads"] = threads;
}

// ---------------------------------------------------------------------------------------------------------
// Eigen: the separate expressions a user writes, over an Eigen::Map of the same buffer
// ---------------------------------------------------------------------------------------------------------
#if defined(NANSCOPE_BENCH_HAVE_EIGEN) && NANSCOPE_BENCH_HAVE_EIGEN
template <class S>
void eigen_rows(benchmark::State& state, const void* data, std::size_t n) {
  const Eigen::Map<const Eigen::Array<S, Eigen::Dynamic, 1>> x(static_cast<const S*>(data),
                                                               static_cast<Eigen::Index>(n));
  for (auto _ : state) {
    const Eigen::Index nans = x.isNaN().count();
    const Eigen::Index infs = x.isInf().count();
    const S abs_max = x.abs().maxCoeff();
    const S lo = x.minCoeff();
    const S hi = x.maxCoeff();
    const S mean = x.mean();
    const double sd =
        std::sqrt(static_cast<double>((x - mean).square().sum()) / static_cast<double>(n - 1));
    benchmark::DoNotOptimize(nans);
    benchmark::DoNotOptimize(infs);
    benchmark::DoNotOptimize(abs_max);
    benchmark::DoNotOptimize(lo);
    benchmark::DoNotOptimize(hi);
    benchmark::DoNotOptimize(mean);
    benchmark::DoNotOptimize(sd);
  }
}

void bm_eigen_multipass(benchmark::State& state, dtype t, std::size_t n) {
  const nsbench::buffer& b = data_for(state, t, n);
  switch (t) {
    case dtype::f32: eigen_rows<float>(state, b.data, n); break;
    case dtype::f64: eigen_rows<double>(state, b.data, n); break;
    case dtype::f16: eigen_rows<Eigen::half>(state, b.data, n); break;
    case dtype::bf16: eigen_rows<Eigen::bfloat16>(state, b.data, n); break;
    default: state.SkipWithError("dtype not benchmarked"); return;
  }
  set_throughput(state, t, n);
  state.counters["nthreads"] = 1;  // Eigen without OpenMP: the calling thread
}
#endif

// ---------------------------------------------------------------------------------------------------------
// LibTorch (ATen): the separate ops a user writes, over at::from_blob of the same buffer (no copy)
// ---------------------------------------------------------------------------------------------------------
#if defined(NANSCOPE_BENCH_HAVE_TORCH) && NANSCOPE_BENCH_HAVE_TORCH
at::ScalarType torch_type(dtype t) {
  switch (t) {
    case dtype::f64: return at::kDouble;
    case dtype::f16: return at::kHalf;
    case dtype::bf16: return at::kBFloat16;
    default: return at::kFloat;
  }
}

void bm_torch_multiop(benchmark::State& state, dtype t, std::size_t n) {
  const nsbench::buffer& b = data_for(state, t, n);
  at::set_num_threads(1);
  const at::Tensor x = at::from_blob(b.data, {static_cast<std::int64_t>(n)},
                                     at::TensorOptions().dtype(torch_type(t)).device(at::kCPU));
  for (auto _ : state) {
    const std::int64_t nans = x.isnan().sum().item<std::int64_t>();
    const std::int64_t infs = x.isinf().sum().item<std::int64_t>();
    const double abs_max = x.abs().max().item<double>();
    const double lo = x.min().item<double>();
    const double hi = x.max().item<double>();
    const double mean = x.mean().item<double>();
    const double sd = x.std().item<double>();
    benchmark::DoNotOptimize(nans);
    benchmark::DoNotOptimize(infs);
    benchmark::DoNotOptimize(abs_max);
    benchmark::DoNotOptimize(lo);
    benchmark::DoNotOptimize(hi);
    benchmark::DoNotOptimize(mean);
    benchmark::DoNotOptimize(sd);
  }
  set_throughput(state, t, n);
  state.counters["nthreads"] = 1;
}
#endif

// ---------------------------------------------------------------------------------------------------------
// Registration: grouped by (dtype, elements) so that each buffer is generated once and the rows compared in
// a ratio run close together in time.
// ---------------------------------------------------------------------------------------------------------
std::string row_name(const char* family, dtype t, std::size_t n) {
  return std::string(family) + "/" + nanscope::name(t) + "/" + std::to_string(n);
}

template <class Fn>
void add_row(const char* family, dtype t, std::size_t n, Fn&& fn) {
  benchmark::RegisterBenchmark(row_name(family, t, n).c_str(), std::forward<Fn>(fn))
      ->UseRealTime()
      ->Unit(n >= (std::size_t{1} << 22) ? benchmark::kMillisecond : benchmark::kMicrosecond);
}

void register_rows() {
  using nanscope::check_mode;
  using nsbench::pattern;
  for (const dtype t : bench_dtypes) {
    for (const std::size_t n : bench_sizes) {
      add_row("read_anchor", t, n, [t, n](benchmark::State& s) { bm_read_anchor(s, t, n); });
      add_row("health", t, n,
              [t, n](benchmark::State& s) { bm_check(s, t, n, check_mode::stats, 1, pattern::normal); });
      add_row("health_hash", t, n,
              [t, n](benchmark::State& s) { bm_check(s, t, n, check_mode::stats, 1, pattern::normal, true); });
      add_row("health_hist", t, n, [t, n](benchmark::State& s) { bm_check_hist(s, t, n); });
      add_row("full_health", t, n,
              [t, n](benchmark::State& s) { bm_check(s, t, n, check_mode::full_health, 1, pattern::normal); });
      add_row("read_anchor_mt", t, n, [t, n](benchmark::State& s) { bm_read_anchor_mt(s, t, n); });
      add_row("health_mt", t, n,
              [t, n](benchmark::State& s) { bm_check(s, t, n, check_mode::stats, 0, pattern::normal); });
#if defined(NANSCOPE_BENCH_HAVE_EIGEN) && NANSCOPE_BENCH_HAVE_EIGEN
      add_row("eigen_multipass", t, n, [t, n](benchmark::State& s) { bm_eigen_multipass(s, t, n); });
#endif
#if defined(NANSCOPE_BENCH_HAVE_TORCH) && NANSCOPE_BENCH_HAVE_TORCH
      add_row("torch_multiop", t, n, [t, n](benchmark::State& s) { bm_torch_multiop(s, t, n); });
#endif
      if ((t == dtype::f32 || t == dtype::bf16) && n == (std::size_t{1} << 26)) {  // block-scaled what-if rows
        for (int f = -1; f < nanscope::block_format_count; ++f) {
          const std::string fname = f < 0 ? "all" : nanscope::name(static_cast<nanscope::block_format>(f));
          const std::string rname = row_name("health_mx", t, n) + "/" + fname;
          benchmark::RegisterBenchmark(rname.c_str(), [t, n, f](benchmark::State& s) { bm_check_mx(s, t, n, f); })
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
      if (n == (std::size_t{1} << 26)) {  // segmented checks (segments.hpp)
        struct seg_row {
          const char* family;
          std::size_t segments;
          bool kv, counts;
        };
        std::vector<seg_row> seg_rows;
        if (t == dtype::f32 || t == dtype::bf16) seg_rows.push_back({"health_seg", 1000, false, false});
        if (t == dtype::f32) {
          seg_rows.push_back({"health_seg", 100000, false, false});
          seg_rows.push_back({"health_seg_counts", 1000, false, true});
          seg_rows.push_back({"health_seg_counts", 100000, false, true});
        }
        if (t == dtype::f16) seg_rows.push_back({"health_seg_kv", n / 1024 / 16, true, false});
        for (const seg_row& row : seg_rows) {
          const std::size_t segs = row.segments;
          const bool kv = row.kv, counts = row.counts;
          benchmark::RegisterBenchmark((row_name(row.family, t, n) + "/" + std::to_string(segs)).c_str(),
                                       [t, n, segs, kv, counts](benchmark::State& s) {
                                         bm_check_seg(s, t, n, segs, kv, counts);
                                       })
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
      if (t != dtype::f64)  // the f32-compute kernels' zero blocks (detail/kernel_avx2_zero.hpp)
        add_row("health_relu", t, n,
                [t, n](benchmark::State& s) { bm_check(s, t, n, check_mode::stats, 1, pattern::relu); });
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("nanscope_version", std::to_string(NANSCOPE_VERSION));
  benchmark::AddCustomContext("nanscope_detected_isa", nanscope::name(nanscope::detected_isa()));
  benchmark::AddCustomContext("nanscope_isa", nanscope::name(nanscope::resolve_isa(nanscope::isa::automatic)));
  benchmark::AddCustomContext("nanscope_default_threads", std::to_string(default_threads()));
  benchmark::AddCustomContext("nanscope_parallel_threshold", std::to_string(nanscope::default_parallel_threshold()));
  benchmark::AddCustomContext("read_anchor_isa", nsbench::name(nsbench::best_anchor_isa()));
#if defined(NANSCOPE_BENCH_HAVE_EIGEN) && NANSCOPE_BENCH_HAVE_EIGEN
  benchmark::AddCustomContext("eigen", std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) +
                                           "." + std::to_string(EIGEN_MINOR_VERSION) + " (" +
                                           Eigen::SimdInstructionSetsInUse() + ")");
#else
  benchmark::AddCustomContext("eigen", "not built");
#endif
#if defined(NANSCOPE_BENCH_HAVE_TORCH) && NANSCOPE_BENCH_HAVE_TORCH
  benchmark::AddCustomContext("torch", "ATen, at::set_num_threads(1) in torch_multiop");
#else
  benchmark::AddCustomContext("torch", "not built");
#endif
  register_rows();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
