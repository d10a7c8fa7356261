// nanscope — detail/histogram_kernel.hpp: the per-chunk exponent-histogram kernel that rides in the fused
// pass (check.hpp) when nanscope/histogram.hpp asks for it. Internal: include <nanscope/histogram.hpp>.
#ifndef NANSCOPE_DETAIL_HISTOGRAM_KERNEL_HPP
#define NANSCOPE_DETAIL_HISTOGRAM_KERNEL_HPP

#if !defined(NANSCOPE_CHECK_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/histogram_kernel.hpp is internal: include <nanscope/histogram.hpp>"
#endif

#include "../config.hpp"
#include "../dtype.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

// Bins are the biased exponent field of |x| in the *source* dtype: field = |x| bits >> mantissa bits.
// Field 0 holds zeros and subnormals, the all-ones field inf and NaN (e4m3fn: normals and its one NaN).
// Besides the bins, the kernel counts, for up to hist_max_bounds "boundary" patterns b[k] of |x|, how many
// elements of b[k]'s own bin are >= b[k] (an integer compare of the bits). With the bins above it, that gives
// #{|x| >= b[k]} exactly, whatever the rounding at the boundary: this is how zero/subnormal/inf/NaN counts
// and the low-precision margins come out of the histogram with no second pass. Only bins that contain a
// boundary strictly inside them ("flagged") take the slower per-element path; zeros never do.
inline constexpr unsigned hist_max_bins = 2048;   // f64: 11-bit exponent field
inline constexpr int hist_max_bounds = 16;
inline constexpr unsigned hist_copies = 4;        // interleaved sub-histograms: no store-to-load chains

/// What the fused pass needs to histogram one dtype (built by histogram.hpp, shared by every segment).
struct hist_setup {
  unsigned shift = 0;       // mantissa bits of the source dtype
  unsigned nbins = 0;       // 1 << exponent bits
  std::uint64_t abs_mask = 0;
  int nbounds = 0;
  std::uint64_t bound[hist_max_bounds] = {};
  std::uint8_t flag[hist_max_bins] = {};  // 1: the bin contains a boundary strictly inside it
};

/// The pass-wide accumulator: segments add their integer counts atomically (the sum does not depend on the
/// order, so the result is the same for any thread count).
struct hist_acc {
  const hist_setup* setup = nullptr;
  std::atomic<std::uint64_t> bins[hist_max_bins];
  std::atomic<std::uint64_t> in_bin[hist_max_bounds];
  hist_acc() {
    for (auto& b : bins) b.store(0, std::memory_order_relaxed);
    for (auto& b : in_bin) b.store(0, std::memory_order_relaxed);
  }
};

/// One segment's counters (uint32: a segment holds far fewer than 2^32 elements).
struct hist_local {
  std::uint32_t c[hist_max_bins * hist_copies];
  std::uint64_t in_bin[hist_max_bounds];

  void reset(const hist_setup& s) {
    std::memset(c, 0, sizeof(std::uint32_t) * s.nbins * hist_copies);
    for (auto& b : in_bin) b = 0;
  }
  void flush(const hist_setup& s, hist_acc& acc) const {
    for (unsigned e = 0; e < s.nbins; ++e) {
      std::uint64_t t = 0;
      for (unsigned j = 0; j < hist_copies; ++j) t += c[e * hist_copies + j];
      if (t != 0) acc.bins[e].fetch_add(t, std::memory_order_relaxed);
    }
    for (int k = 0; k < s.nbounds; ++k)
      if (in_bin[k] != 0) acc.in_bin[k].fetch_add(in_bin[k], std::memory_order_relaxed);
  }
};

/// The boundaries inside bin e (rare path: only flagged bins, non-zero elements).
inline void hist_slow(const hist_setup& s, std::uint64_t a, unsigned e, hist_local& h) {
  for (int k = 0; k < s.nbounds; ++k)
    h.in_bin[k] += static_cast<std::uint64_t>(((s.bound[k] >> s.shift) == e) & (a >= s.bound[k]));
}

template <class U>
inline void hist_chunk_typed(const unsigned char* p, std::size_t n, const hist_setup& s, hist_local& h) {
  const U mask = static_cast<U>(s.abs_mask);
  const unsigned sh = s.shift;
  std::uint32_t* c = h.c;
  const std::uint8_t* flag = s.flag;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    U x[4];
    std::memcpy(x, p + i * sizeof(U), sizeof x);  // any alignment
    const U a0 = static_cast<U>(x[0] & mask), a1 = static_cast<U>(x[1] & mask);
    const U a2 = static_cast<U>(x[2] & mask), a3 = static_cast<U>(x[3] & mask);
    const unsigned e0 = static_cast<unsigned>(a0 >> sh), e1 = static_cast<unsigned>(a1 >> sh);
    const unsigned e2 = static_cast<unsigned>(a2 >> sh), e3 = static_cast<unsigned>(a3 >> sh);
    ++c[e0 * hist_copies + 0];
    ++c[e1 * hist_copies + 1];
    ++c[e2 * hist_copies + 2];
    ++c[e3 * hist_copies + 3];
    const unsigned f0 = flag[e0] & static_cast<unsigned>(a0 != 0), f1 = flag[e1] & static_cast<unsigned>(a1 != 0);
    const unsigned f2 = flag[e2] & static_cast<unsigned>(a2 != 0), f3 = flag[e3] & static_cast<unsigned>(a3 != 0);
    if (__builtin_expect((f0 | f1 | f2 | f3) != 0, 0)) {
      if (f0) hist_slow(s, a0, e0, h);
      if (f1) hist_slow(s, a1, e1, h);
      if (f2) hist_slow(s, a2, e2, h);
      if (f3) hist_slow(s, a3, e3, h);
    }
  }
  for (; i < n; ++i) {
    U x;
    std::memcpy(&x, p + i * sizeof(U), sizeof x);
    const U a = static_cast<U>(x & mask);
    const unsigned e = static_cast<unsigned>(a >> sh);
    ++c[e * hist_copies];
    if (flag[e] && a != 0) hist_slow(s, a, e, h);
  }
}

/// Histograms n contiguous raw elements of element size es (the source dtype's bits, any alignment).
inline void hist_chunk(const void* vp, std::size_t es, std::size_t n, const hist_setup& s, hist_local& h) {
  const auto* p = static_cast<const unsigned char*>(vp);
  switch (es) {
    case 1: hist_chunk_typed<std::uint8_t>(p, n, s, h); break;
    case 2: hist_chunk_typed<std::uint16_t>(p, n, s, h); break;
    case 4: hist_chunk_typed<std::uint32_t>(p, n, s, h); break;
    default: hist_chunk_typed<std::uint64_t>(p, n, s, h); break;
  }
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_HISTOGRAM_KERNEL_HPP
