// nanscope benchmarks — read_anchor.hpp: the memory-read yardstick.
//
// A plain sum of a buffer, written to be as fast as a read of memory can be on this CPU: eight independent
// vector accumulators (no dependency chain limits the loads), unaligned loads, and the widest instruction
// set the CPU has, picked at run time with __builtin_cpu_supports (the benchmark binary itself is baseline
// x86-64, like the user binaries nanscope targets). f32 and f64 are summed as floating values; 16-bit types
// (f16, bf16) are summed as raw uint16 lanes with wrapping integer adds: the anchor measures reading, the
// value of the sum does not matter.
//
// `anchor_pool` runs the same sum on several threads with a persistent pool and dynamic scheduling over
// fixed segments, like nanscope's own parallel pass, so that health_mt / read_anchor_mt compares like with
// like.
#ifndef NANSCOPE_BENCH_READ_ANCHOR_HPP
#define NANSCOPE_BENCH_READ_ANCHOR_HPP

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define NSBENCH_X86 1
#include <immintrin.h>
#else
#define NSBENCH_X86 0
#endif

namespace nsbench {

/// What the anchor sums: the element kind decides the add instruction.
enum class lanes { f32, f64, u16 };

enum class anchor_isa { scalar, avx2, avx512 };

inline const char* name(anchor_isa i) {
  switch (i) {
    case anchor_isa::scalar: return "scalar";
    case anchor_isa::avx2: return "avx2";
    case anchor_isa::avx512: return "avx512";
  }
  return "?";
}

/// The widest instruction set the anchor can use on this CPU (avx512 needs F and BW: BW for 16-bit adds).
inline anchor_isa best_anchor_isa() {
#if NSBENCH_X86
  static const anchor_isa best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) return anchor_isa::avx512;
    if (__builtin_cpu_supports("avx2")) return anchor_isa::avx2;
    return anchor_isa::scalar;
  }();
  return best;
#else
  return anchor_isa::scalar;
#endif
}

namespace detail {

// ---------------------------------------------------------------------------------------------------------
// Scalar fallback (baseline x86-64 code: the compiler may use SSE2 where it can keep the semantics).
// ---------------------------------------------------------------------------------------------------------
template <class T, class Acc>
inline double sum_scalar(const T* p, std::size_t n) {
  Acc a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a0 += static_cast<Acc>(p[i]);
    a1 += static_cast<Acc>(p[i + 1]);
    a2 += static_cast<Acc>(p[i + 2]);
    a3 += static_cast<Acc>(p[i + 3]);
  }
  for (; i < n; ++i) a0 += static_cast<Acc>(p[i]);
  return static_cast<double>((a0 + a1) + (a2 + a3));
}

#if NSBENCH_X86
// The main loop of every vector variant: eight accumulators, one vector load each per step of 8 vectors.
// VEC: register type, W: elements per vector, LOAD/ADD/ZERO: intrinsics. Leaves the combined vector in `acc`
// and the index of the first element not yet summed in `i`.
#define NSBENCH_SUM8(VEC, W, LOAD, ADD, ZERO)                                      \
  VEC a0 = ZERO(), a1 = ZERO(), a2 = ZERO(), a3 = ZERO();                          \
  VEC a4 = ZERO(), a5 = ZERO(), a6 = ZERO(), a7 = ZERO();                          \
  std::size_t i = 0;                                                               \
  for (; i + 8 * (W) <= n; i += 8 * (W)) {                                         \
    a0 = ADD(a0, LOAD(p + i));                                                     \
    a1 = ADD(a1, LOAD(p + i + (W)));                                               \
    a2 = ADD(a2, LOAD(p + i + 2 * (W)));                                           \
    a3 = ADD(a3, LOAD(p + i + 3 * (W)));                                           \
    a4 = ADD(a4, LOAD(p + i + 4 * (W)));                                           \
    a5 = ADD(a5, LOAD(p + i + 5 * (W)));                                           \
    a6 = ADD(a6, LOAD(p + i + 6 * (W)));                                           \
    a7 = ADD(a7, LOAD(p + i + 7 * (W)));                                           \
  }                                                                                \
  for (; i + (W) <= n; i += (W)) a0 = ADD(a0, LOAD(p + i));                        \
  const VEC acc = ADD(ADD(ADD(a0, a1), ADD(a2, a3)), ADD(ADD(a4, a5), ADD(a6, a7)))

#define NSBENCH_AVX512 __attribute__((target("avx512f,avx512bw")))
#define NSBENCH_AVX2 __attribute__((target("avx2")))

NSBENCH_AVX512 inline __m512i load512i(const std::uint16_t* p) { return _mm512_loadu_si512(p); }
NSBENCH_AVX2 inline __m256i load256i(const std::uint16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

NSBENCH_AVX512 inline double sum_f32_avx512(const float* p, std::size_t n) {
  NSBENCH_SUM8(__m512, 16, _mm512_loadu_ps, _mm512_add_ps, _mm512_setzero_ps);
  double s = static_cast<double>(_mm512_reduce_add_ps(acc));
  for (; i < n; ++i) s += static_cast<double>(p[i]);
  return s;
}
NSBENCH_AVX512 inline double sum_f64_avx512(const double* p, std::size_t n) {
  NSBENCH_SUM8(__m512d, 8, _mm512_loadu_pd, _mm512_add_pd, _mm512_setzero_pd);
  double s = _mm512_reduce_add_pd(acc);
  for (; i < n; ++i) s += p[i];
  return s;
}
NSBENCH_AVX512 inline double sum_u16_avx512(const std::uint16_t* p, std::size_t n) {
  NSBENCH_SUM8(__m512i, 32, load512i, _mm512_add_epi16, _mm512_setzero_si512);
  alignas(64) std::uint16_t lane[32];
  _mm512_store_si512(lane, acc);
  std::uint64_t s = 0;
  for (std::uint16_t v : lane) s += v;
  for (; i < n; ++i) s += p[i];
  return static_cast<double>(s);
}

NSBENCH_AVX2 inline double sum_f32_avx2(const float* p, std::size_t n) {
  NSBENCH_SUM8(__m256, 8, _mm256_loadu_ps, _mm256_add_ps, _mm256_setzero_ps);
  alignas(32) float lane[8];
  _mm256_store_ps(lane, acc);
  double s = 0.0;
  for (float v : lane) s += static_cast<double>(v);
  for (; i < n; ++i) s += static_cast<double>(p[i]);
  return s;
}
NSBENCH_AVX2 inline double sum_f64_avx2(const double* p, std::size_t n) {
  NSBENCH_SUM8(__m256d, 4, _mm256_loadu_pd, _mm256_add_pd, _mm256_setzero_pd);
  alignas(32) double lane[4];
  _mm256_store_pd(lane, acc);
  double s = (lane[0] + lane[1]) + (lane[2] + lane[3]);
  for (; i < n; ++i) s += p[i];
  return s;
}
NSBENCH_AVX2 inline double sum_u16_avx2(const std::uint16_t* p, std::size_t n) {
  NSBENCH_SUM8(__m256i, 16, load256i, _mm256_add_epi16, _mm256_setzero_si256);
  alignas(32) std::uint16_t lane[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lane), acc);
  std::uint64_t s = 0;
  for (std::uint16_t v : lane) s += v;
  for (; i < n; ++i) s += p[i];
  return static_cast<double>(s);
}
#undef NSBENCH_SUM8
#endif  // NSBENCH_X86

}  // namespace detail

/// Sums n elements of kind `k` at p with the given instruction set (clamped to what the CPU has).
inline double read_sum(const void* p, std::size_t n, lanes k, anchor_isa use = best_anchor_isa()) {
  if (static_cast<int>(use) > static_cast<int>(best_anchor_isa())) use = best_anchor_isa();
#if NSBENCH_X86
  if (use == anchor_isa::avx512) {
    switch (k) {
      case lanes::f32: return detail::sum_f32_avx512(static_cast<const float*>(p), n);
      case lanes::f64: return detail::sum_f64_avx512(static_cast<const double*>(p), n);
      case lanes::u16: return detail::sum_u16_avx512(static_cast<const std::uint16_t*>(p), n);
    }
  }
  if (use == anchor_isa::avx2) {
    switch (k) {
      case lanes::f32: return detail::sum_f32_avx2(static_cast<const float*>(p), n);
      case lanes::f64: return detail::sum_f64_avx2(static_cast<const double*>(p), n);
      case lanes::u16: return detail::sum_u16_avx2(static_cast<const std::uint16_t*>(p), n);
    }
  }
#endif
  switch (k) {
    case lanes::f32: return detail::sum_scalar<float, float>(static_cast<const float*>(p), n);
    case lanes::f64: return detail::sum_scalar<double, double>(static_cast<const double*>(p), n);
    case lanes::u16: return detail::sum_scalar<std::uint16_t, std::uint64_t>(static_cast<const std::uint16_t*>(p), n);
  }
  return 0.0;
}

/// A persistent pool of worker threads for the multi-threaded anchor. run(count, fn, ctx) calls fn(ctx, i)
/// for every i in [0, count) on the caller and all workers (dynamic scheduling with an atomic counter) and
/// returns when every call has finished. One job at a time (the benchmark is the only user).
class anchor_pool {
 public:
  using task_fn = void (*)(void* ctx, std::size_t index);

  explicit anchor_pool(unsigned workers) {
    for (unsigned w = 0; w < workers; ++w) workers_.emplace_back([this] { loop(); });
  }
  ~anchor_pool() {
    {
      std::lock_guard<std::mutex> lk(mutex_);
      quit_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  anchor_pool(const anchor_pool&) = delete;
  anchor_pool& operator=(const anchor_pool&) = delete;

  unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }

  void run(std::size_t count, task_fn fn, void* ctx) {
    if (workers_.empty()) {
      for (std::size_t i = 0; i < count; ++i) fn(ctx, i);
      return;
    }
    {
      std::lock_guard<std::mutex> lk(mutex_);
      fn_ = fn;
      ctx_ = ctx;
      count_ = count;
      next_.store(0, std::memory_order_relaxed);
      busy_ = static_cast<unsigned>(workers_.size());
      ++round_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lk(mutex_);
    done_.wait(lk, [this] { return busy_ == 0; });
  }

 private:
  void work() {
    for (std::size_t i = next_.fetch_add(1, std::memory_order_relaxed); i < count_;
         i = next_.fetch_add(1, std::memory_order_relaxed))
      fn_(ctx_, i);
  }
  void loop() {
    std::uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mutex_);
    for (;;) {
      wake_.wait(lk, [&] { return quit_ || round_ != seen; });
      if (quit_) return;
      seen = round_;
      lk.unlock();
      work();
      lk.lock();
      if (--busy_ == 0) done_.notify_all();
    }
  }

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_, done_;
  bool quit_ = false;
  std::uint64_t round_ = 0;
  unsigned busy_ = 0;
  task_fn fn_ = nullptr;
  void* ctx_ = nullptr;
  std::size_t count_ = 0;
  std::atomic<std::size_t> next_{0};
};

/// The multi-threaded anchor: the buffer cut into fixed segments, summed by the pool, partial sums added in
/// segment order. `partial` must hold at least ceil(n / segment) doubles (allocated outside the timed loop).
struct parallel_sum {
  const unsigned char* base;
  std::size_t n, segment, elem_size;
  lanes kind;
  double* partial;

  static void task(void* vctx, std::size_t s) {
    auto* c = static_cast<parallel_sum*>(vctx);
    const std::size_t begin = s * c->segment;
    const std::size_t m = c->n - begin < c->segment ? c->n - begin : c->segment;
    c->partial[s] = read_sum(c->base + begin * c->elem_size, m, c->kind);
  }
  double run(anchor_pool& pool) {
    const std::size_t segs = (n + segment - 1) / segment;
    pool.run(segs, &parallel_sum::task, this);
    double s = 0.0;
    for (std::size_t i = 0; i < segs; ++i) s += partial[i];
    return s;
  }
};

}  // namespace nsbench

#endif  // NANSCOPE_BENCH_READ_ANCHOR_HPP
