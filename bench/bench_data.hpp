// nanscope benchmarks — bench_data.hpp: the benchmark buffers.
//
// Values are N(0, 1) (a fixed-seed xoshiro256** generator and the Box–Muller transform), rounded to the
// buffer's dtype with round-to-nearest-even, so the timed buffers hold no NaN or Inf: the rows measure the
// fast path that a healthy tensor takes. The `relu` pattern is max(x, 0) of the same values: half the
// elements are exact zeros, as after a ReLU.
//
// Buffers are generated once per (dtype, elements, pattern) and cached, so benchmark setup (Google Benchmark
// calls a benchmark function several times while it sizes the iteration count) costs nothing after the
// first call. The cache holds at most NANSCOPE_BENCH_CACHE_MB MiB (default 1024): the least recently used
// buffers are freed first, so in the default row order a 512 MB f64 buffer is released when the next dtype's
// buffers need the room.
#ifndef NANSCOPE_BENCH_DATA_HPP
#define NANSCOPE_BENCH_DATA_HPP

#include <nanscope/check.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define NSBENCH_HAVE_F16C_PATH 1
#else
#define NSBENCH_HAVE_F16C_PATH 0
#endif

namespace nsbench {

enum class pattern { normal, relu };

inline const char* name(pattern p) { return p == pattern::normal ? "normal" : "relu"; }

/// xoshiro256** with a splitmix64 seeding: fast, and the same stream on every platform.
class rng {
 public:
  explicit rng(std::uint64_t seed) {
    for (auto& w : s_) {
      seed += 0x9E3779B97F4A7C15ull;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      w = z ^ (z >> 31);
    }
  }
  std::uint64_t next() {
    const std::uint64_t out = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return out;
  }
  /// Uniform in (0, 1]: never 0, so log() below stays finite.
  double uniform_open0() { return static_cast<double>((next() >> 11) + 1) * 0x1.0p-53; }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

/// Fills out[0..n) with N(0, 1) samples (Box–Muller, both outputs used).
inline void fill_normal(double* out, std::size_t n, rng& g) {
  constexpr double two_pi = 6.283185307179586476925286766559;
  std::size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    const double r = std::sqrt(-2.0 * std::log(g.uniform_open0()));
    const double a = two_pi * g.uniform_open0();
    out[i] = r * std::cos(a);
    out[i + 1] = r * std::sin(a);
  }
  if (i < n) out[i] = std::sqrt(-2.0 * std::log(g.uniform_open0())) * std::cos(two_pi * g.uniform_open0());
}

/// f32 -> bf16 bits, round to nearest even (the values here are finite).
inline std::uint16_t to_bf16_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

#if NSBENCH_HAVE_F16C_PATH
__attribute__((target("avx,f16c"))) inline void f32_to_f16_f16c(const float* in, std::uint16_t* out, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = nanscope::half::from_float(in[i]).bits;
}
#endif

#if NSBENCH_HAVE_F16C_PATH
/// F16C from CPUID leaf 1, ECX bit 29 (Clang's __builtin_cpu_supports does not know "f16c").
inline bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  return ((c >> 29) & 1u) != 0;
}
#endif

/// f32 -> f16 bits, round to nearest even: F16C when the CPU has it, nanscope's exact encoder otherwise.
inline void f32_to_f16(const float* in, std::uint16_t* out, std::size_t n) {
#if NSBENCH_HAVE_F16C_PATH
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx") && cpu_has_f16c()) {
    f32_to_f16_f16c(in, out, n);
    return;
  }
#endif
  for (std::size_t i = 0; i < n; ++i) out[i] = nanscope::half::from_float(in[i]).bits;
}

/// One cached buffer, 64-byte aligned (like the allocations of ML frameworks).
struct buffer {
  nanscope::dtype type;
  std::size_t elements;
  pattern pat;
  std::size_t bytes;
  void* data;

  buffer(nanscope::dtype t, std::size_t n, pattern p) : type(t), elements(n), pat(p) {
    bytes = n * nanscope::size_of(t);
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    data = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (data == nullptr) throw std::bad_alloc();
    generate();
  }
  ~buffer() { std::free(data); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

 private:
  void generate() {
    // Generated in blocks so that the scratch space stays small; the stream (and so the values) depends only
    // on the seed, not on the dtype: the same tensor in every format.
    constexpr std::size_t block = 1 << 16;
    rng g(0x6E616E73636F7065ull);  // "nanscope"
    std::unique_ptr<double[]> d(new double[block]);
    std::unique_ptr<float[]> f(new float[block]);
    for (std::size_t b = 0; b < elements; b += block) {
      const std::size_t m = elements - b < block ? elements - b : block;
      fill_normal(d.get(), m, g);
      if (pat == pattern::relu)
        for (std::size_t i = 0; i < m; ++i) d[i] = d[i] > 0.0 ? d[i] : 0.0;
      for (std::size_t i = 0; i < m; ++i) f[i] = static_cast<float>(d[i]);
      switch (type) {
        case nanscope::dtype::f64: std::memcpy(static_cast<double*>(data) + b, d.get(), m * sizeof(double)); break;
        case nanscope::dtype::f32: std::memcpy(static_cast<float*>(data) + b, f.get(), m * sizeof(float)); break;
        case nanscope::dtype::f16: f32_to_f16(f.get(), static_cast<std::uint16_t*>(data) + b, m); break;
        case nanscope::dtype::bf16: {
          auto* out = static_cast<std::uint16_t*>(data) + b;
          for (std::size_t i = 0; i < m; ++i) out[i] = to_bf16_bits(f[i]);
          break;
        }
        default: throw std::invalid_argument("nsbench: unsupported benchmark dtype");
      }
    }
  }
};

/// The buffer cache (least recently used first out, bounded in bytes).
class buffer_cache {
 public:
  static buffer_cache& instance() {
    static buffer_cache c;
    return c;
  }

  /// The buffer for (t, n, p), generated on first use. Valid until the next get() for a different key.
  const buffer& get(nanscope::dtype t, std::size_t n, pattern p) {
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if ((*it)->type == t && (*it)->elements == n && (*it)->pat == p) {
        lru_.splice(lru_.begin(), lru_, it);
        return *lru_.front();
      }
    }
    const std::size_t need = n * nanscope::size_of(t);
    // make room first, so the peak stays near the cap plus one buffer
    while (!lru_.empty() && held_ + need > cap_) {
      held_ -= lru_.back()->bytes;
      lru_.pop_back();
    }
    lru_.emplace_front(new buffer(t, n, p));
    held_ += need;
    return *lru_.front();
  }

  std::size_t cap_bytes() const { return cap_; }

 private:
  buffer_cache() {
    std::size_t mb = 1024;
    if (const char* e = std::getenv("NANSCOPE_BENCH_CACHE_MB")) {
      const long v = std::strtol(e, nullptr, 10);
      if (v > 0) mb = static_cast<std::size_t>(v);
    }
    cap_ = mb << 20;
  }
  std::list<std::unique_ptr<buffer>> lru_;
  std::size_t held_ = 0;
  std::size_t cap_ = 0;
};

}  // namespace nsbench

#endif  // NANSCOPE_BENCH_DATA_HPP
