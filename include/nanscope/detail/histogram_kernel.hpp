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
// Beside the bins, the pass counts #{|x| bits >= b[k]} for the margins' boundary patterns b[k] (margins.hpp)
// with the margins' own integer-compare kernels, on the same chunk while it is in cache: zero, NaN, inf and
// every low-precision margin come out exact from these, with no second pass over the tensor.
inline constexpr unsigned hist_max_bins = 2048;  // f64: 11-bit exponent field
inline constexpr int hist_max_bounds = 16;
inline constexpr unsigned hist_copies = 4;       // interleaved sub-histograms: no store-to-load chains

/// Counts #{|x| bits >= b[k]} over n raw elements (any alignment) and adds them to ge[k] (histogram.hpp
/// points it at the margins kernels: check.hpp cannot include margins.hpp, which is built on it).
using hist_ge_fn = void (*)(const void* p, dtype t, std::size_t n, std::uint8_t isa_code, std::uint64_t* ge);

/// What the fused pass needs to histogram one dtype (built by histogram.hpp, shared by every segment).
struct hist_setup {
  dtype type = dtype::f32;
  unsigned shift = 0;  // mantissa bits of the source dtype
  unsigned nbins = 0;  // 1 << exponent bits
  std::uint64_t abs_mask = 0;
  int nbounds = 0;
  hist_ge_fn count_ge = nullptr;
};

/// The pass-wide accumulator: segments add their integer counts atomically (the sum does not depend on the
/// order, so the result is the same for any thread count).
struct hist_acc {
  const hist_setup* setup = nullptr;
  std::atomic<std::uint64_t> bins[hist_max_bins];
  std::atomic<std::uint64_t> ge[hist_max_bounds];
  hist_acc() {
    for (auto& b : bins) b.store(0, std::memory_order_relaxed);
    for (auto& b : ge) b.store(0, std::memory_order_relaxed);
  }
};

/// One segment's counters (uint32: a segment holds far fewer than 2^32 elements).
struct hist_local {
  std::uint32_t c[hist_max_bins * hist_copies];
  std::uint64_t ge[hist_max_bounds];

  void reset(const hist_setup& s) {
    std::memset(c, 0, sizeof(std::uint32_t) * s.nbins * hist_copies);
    for (auto& b : ge) b = 0;
  }
  void flush(const hist_setup& s, hist_acc& acc) const {
    for (unsigned e = 0; e < s.nbins; ++e) {
      std::uint64_t t = 0;
      for (unsigned j = 0; j < hist_copies; ++j) t += c[e * hist_copies + j];
      if (t != 0) acc.bins[e].fetch_add(t, std::memory_order_relaxed);
    }
    for (int k = 0; k < s.nbounds; ++k)
      if (ge[k] != 0) acc.ge[k].fetch_add(ge[k], std::memory_order_relaxed);
  }
};

template <class U>
inline void hist_bins_typed(const unsigned char* p, std::size_t n, const hist_setup& s, hist_local& h) {
  const U mask = static_cast<U>(s.abs_mask);
  const unsigned sh = s.shift;
  std::uint32_t* c = h.c;
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    U x[4];
    std::memcpy(x, p + i * sizeof(U), sizeof x);  // any alignment
    ++c[static_cast<unsigned>(static_cast<U>(x[0] & mask) >> sh) * hist_copies + 0];
    ++c[static_cast<unsigned>(static_cast<U>(x[1] & mask) >> sh) * hist_copies + 1];
    ++c[static_cast<unsigned>(static_cast<U>(x[2] & mask) >> sh) * hist_copies + 2];
    ++c[static_cast<unsigned>(static_cast<U>(x[3] & mask) >> sh) * hist_copies + 3];
  }
  for (; i < n; ++i) {
    U x;
    std::memcpy(&x, p + i * sizeof(U), sizeof x);
    ++c[static_cast<unsigned>(static_cast<U>(x & mask) >> sh) * hist_copies];
  }
}

/// Histograms n contiguous raw elements of the setup's dtype (its bits, any alignment) and counts them
/// against the boundaries, with the instruction set `isa_code` (nanscope::isa's value).
inline void hist_chunk(const void* vp, std::size_t n, std::uint8_t isa_code, const hist_setup& s, hist_local& h) {
  const auto* p = static_cast<const unsigned char*>(vp);
  switch (size_of(s.type)) {
    case 1: hist_bins_typed<std::uint8_t>(p, n, s, h); break;
    case 2: hist_bins_typed<std::uint16_t>(p, n, s, h); break;
    case 4: hist_bins_typed<std::uint32_t>(p, n, s, h); break;
    default: hist_bins_typed<std::uint64_t>(p, n, s, h); break;
  }
  s.count_ge(p, s.type, n, isa_code, h.ge);
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_HISTOGRAM_KERNEL_HPP
