// nanscope tests — cuda_emulation_test.cpp: the CUDA backend's device code (nanscope/detail/cuda_pass.cuh) run on
// the CPU. The header's arithmetic compiles as plain C++ under NANSCOPE_IMPL_CUDA_EMULATION; this file plays the
// kernel's part (health_kernel in cuda.cuh) sequentially: the block -> tensor lookup, every thread's share through
// thread_record, the block merge (the warps' shuffle trees and the warps in order, group by group: only the
// fields of the kernel's level), the blocks' records merged by the "last block", the counters. Results go
// through the real launch planning (for_each_group, plan) and finalize(), and are compared with the host pass
// (portable kernel): counts, extrema and first index bit for bit, mean/std within 1e-9 relative.
// What this cannot test is CUDA itself (the shuffle instructions, shared memory, fences, atomics, loads):
// tests/cuda does, on a GPU.
#define NANSCOPE_IMPL_CUDA_EMULATION 1
#include <nanscope/detail/cuda_pass.cuh>

#include "support/compare.hpp"
#include "support/reference.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace ns = nanscope;
namespace nc = nanscope::cuda;
namespace nd = nanscope::cuda::detail;
constexpr int threads_per_block = nd::block_threads;

/// The kernel's warp merge of one group (warp_merge_group): a __shfl_down_sync tree, lane i takes lane i + 16,
/// then i + 8, ..., 1 (a lane whose source is past the warp reads its own value, as the shuffle does); every
/// group in turn (warp_phase).
template <int L, int G = 0>
void emulate_warp_phase(nc::device_result* lanes) {
  for (unsigned o = 16; o > 0; o >>= 1) {
    std::vector<nc::device_result> before(lanes, lanes + 32);  // a shuffle reads the values before the round
    for (unsigned i = 0; i < 32; ++i) nd::merge_group<L, G>(lanes[i], before[i + o < 32 ? i + o : i]);
  }
  if constexpr (G + 1 < nd::record_groups<L>) emulate_warp_phase<L, G + 1>(lanes);
}

/// The kernel's block merge of the block's per-thread records: each warp's tree, then thread 0 merges the warps'
/// lane-0 records in warp order (store_block), the fields of level L only (the others stay at their identities,
/// as store_other_fields writes them). The same merges in the same order as the device, so the moments too are
/// the device's (given the same per-thread records).
template <int L>
nc::device_result emulate_block_merge(std::vector<nc::device_result> threads) {
  nc::device_result total = nd::identity_result();
  for (int w = 0; w < threads_per_block / 32; ++w) {
    emulate_warp_phase<L>(threads.data() + 32 * w);
    total = nd::level_merge<L>{}(total, threads[static_cast<std::size_t>(32 * w)]);
  }
  return total;
}

/// One launch, block by block and thread by thread, as health_kernel runs it.
template <int L, class Params>
void emulate_kernel(const Params& prm) {
  std::vector<nc::device_result> threads(threads_per_block);
  for (unsigned bx = 0; bx < prm.total_blocks; ++bx) {
    const int lo = nd::tensor_of_block(prm, bx);
    const nd::tensor_desc& d = prm.desc[lo];
    const unsigned end = nd::tensor_block_end(prm, lo);
    const unsigned nblocks = end - d.block_begin;
    const unsigned local = bx - d.block_begin;
    for (int tx = 0; tx < threads_per_block; ++tx) {
      const unsigned long long g = static_cast<unsigned long long>(local) * threads_per_block + static_cast<unsigned>(tx);
      const unsigned long long stride = static_cast<unsigned long long>(nblocks) * threads_per_block;
      threads[static_cast<std::size_t>(tx)] =
          nd::thread_record<L>(d, d.layout != 0 ? &prm.layouts[d.layout - 1] : nullptr, g, stride);
    }
    const nc::device_result block = emulate_block_merge<L>(threads);
    if (nblocks == 1) {
      prm.results[d.result] = block;
      continue;
    }
    prm.partials[bx] = block;
    if (++prm.counters[lo] != nblocks) continue;
    // the last block: thread i merges records i, i + B, ... (gather_phase); then the block merge
    std::vector<nc::device_result> acc(threads_per_block, nd::identity_result());
    for (unsigned i = 0; i < nblocks; ++i)
      acc[i % threads_per_block] = nd::level_merge<L>{}(acc[i % threads_per_block], prm.partials[d.block_begin + i]);
    prm.results[d.result] = emulate_block_merge<L>(acc);
    prm.counters[lo] = 0;
  }
}

template <class Params>
void emulate_launch(int level, const Params& p) {
  if (level == 1) emulate_kernel<1>(p);
  else if (level == 2) emulate_kernel<2>(p);
  else emulate_kernel<3>(p);
}

/// check_async's host half with the emulated kernel. Returns the records' finalised results.
std::vector<ns::health_result> emulate_check(const std::vector<nc::buffer_view>& views, ns::check_mode mode,
                                             nd::device_props props) {
  static nd::batch_params bp;  // ~25 KB
  std::vector<std::size_t> idx;
  std::size_t max_blocks = 0;
  nd::for_each_group(views.data(), views.size(), mode, idx, [&](std::size_t base, const std::size_t* ix, std::size_t m) {
    nd::single_params sp{};
    const unsigned b = m == 1 ? nd::plan(views.data(), ix, 1, base, props, sp, 1)
                              : nd::plan(views.data(), ix, m, base, props, bp, nd::batch_strided_cap);
    max_blocks = std::max<std::size_t>(max_blocks, b);
  });
  std::vector<unsigned char> storage(nd::storage_bytes(nd::batch_cap, max_blocks), 0);
  auto* counters = reinterpret_cast<unsigned*>(storage.data());
  auto* partials = reinterpret_cast<nc::device_result*>(storage.data() + nd::storage_bytes(nd::batch_cap, 0));
  std::vector<nc::device_result> records(views.size());
  std::memset(static_cast<void*>(records.data()), 0xAB, records.size() * sizeof(nc::device_result));
  const int level = nd::level_of(mode, ns::dtype::f32, 1);  // the level of a float tensor with data
  nd::for_each_group(views.data(), views.size(), mode, idx, [&](std::size_t base, const std::size_t* ix, std::size_t m) {
    if (m == 1) {
      nd::single_params sp{};
      nd::plan(views.data(), ix, 1, base, props, sp, 1);
      sp.counters = counters;
      sp.partials = partials;
      sp.results = records.data() + base;
      emulate_launch(level, sp);
    } else {
      nd::plan(views.data(), ix, m, base, props, bp, nd::batch_strided_cap);
      bp.counters = counters;
      bp.partials = partials;
      bp.results = records.data() + base;
      emulate_launch(level, bp);
    }
  });
  for (std::size_t i = 0; i < static_cast<std::size_t>(nd::batch_cap); ++i) REQUIRE(counters[i] == 0);  // left reset
  std::vector<ns::health_result> out;
  for (std::size_t i = 0; i < views.size(); ++i) out.push_back(nc::finalize(records[i], views[i].view, mode));
  return out;
}

std::uint64_t bits_of(double x) { return nstest::bits64(x); }

// Moments: two double summations of the same values agree to ~1e-13; 1e-9 is the documented device tolerance.
// Under -ffast-math (the fastmath preset builds this file) the host's SSE arithmetic flushes f64 subnormals,
// which a GPU never does, so the emulated sums of subnormal-only data differ from the device's: only counts and
// extrema (integer work) are held to the usual standard there.
#if defined(__FAST_MATH__)
constexpr double moment_tol = 1.0;
constexpr long double reference_tol = 1.0L;
#else
constexpr double moment_tol = 1e-9;
constexpr long double reference_tol = nstest::tol_double_accumulation;
#endif

using nstest::all_modes;
// an H100-like grid (132 SMs x 2 blocks: what occupancy gives the kernel) and a tiny one (many elements per thread)
const nd::device_props h100{132, 2};
const nd::device_props tiny{1, 1};

/// Emulated device result, in every mode, vs the host's portable kernel (bit for bit but the moments, as a GPU
/// must match it) and vs the independent naive reference of tests/support/reference.hpp.
void check_view(const ns::tensor_view& host_view, const std::string& what, nd::device_props props = h100) {
  // The host pass reads any alignment too (issue 13 item 8): both read the same misaligned view.
  const ns::tensor_view& ref = host_view;
  const nstest::ref_health expected = nstest::reference(ref);
  for (ns::check_mode m : all_modes) {
    CAPTURE(what);
    CAPTURE(ns::name(m));
    nc::buffer_view bv;
    bv.view = host_view;  // the emulated "device" reads host memory
    bv.view.space = ns::memory_space::cuda_device;
    const auto g = emulate_check({bv}, m, props);
    nstest::expect_same_health(
        g[0], ns::check(ref, ns::check_options{}.with_mode(m).with_isa(ns::isa::scalar).with_threads(1)), moment_tol);
    nstest::expect_health(g[0], expected, ref, m, reference_tol);
  }
}

double adversarial(std::mt19937_64& rng, bool f64) {
  std::normal_distribution<double> normal(0.0, 1.0);
  switch (rng() % 16) {
    case 0: return std::numeric_limits<double>::quiet_NaN();
    case 1: return (rng() & 1) ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
    case 2: return (rng() & 1) ? 0.0 : -0.0;
    case 3: return (f64 ? 4.9e-324 : 1.4e-45) * static_cast<double>(rng() % 1000 + 1);
    case 4: return normal(rng) * (f64 ? 1e300 : 1e37);
    case 5: return normal(rng) * (f64 ? 1e-300 : 1e-40);
    case 6: return 1e8 + normal(rng);
    case 7: return (f64 ? 0x1p480 : 1.0) * (1.0 + normal(rng) * 1e-3);  // around the f64 part boundary
    default: return normal(rng) * 3.0;
  }
}

}  // namespace

TEST_CASE("cuda emulation: decoders agree with the host's on every 8- and 16-bit pattern") {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const float h = ns::detail::decode_small_float<5, 10, true>(i);
    const std::uint32_t d = nd::f16_to_f32_bits(i);
    if ((ns::detail::float_to_bits(h) & 0x7FFFFFFFu) > 0x7F800000u) {
      CHECK((d & 0x7FFFFFFFu) > 0x7F800000u);
    } else {
      CHECK(d == ns::detail::float_to_bits(h));
    }
  }
  for (std::uint32_t i = 0; i < 256; ++i) {
    const float e4 = ns::detail::decode_small_float<4, 3, false>(i);
    const float e5 = ns::detail::decode_small_float<5, 2, true>(i);
    const std::uint32_t d4 = nd::e4m3_to_f32_bits(i), d5 = nd::e5m2_to_f32_bits(i);
    const bool nan4 = (ns::detail::float_to_bits(e4) & 0x7FFFFFFFu) > 0x7F800000u;
    const bool nan5 = (ns::detail::float_to_bits(e5) & 0x7FFFFFFFu) > 0x7F800000u;
    CHECK(nan4 == ((d4 & 0x7FFFFFFFu) > 0x7F800000u));
    CHECK(nan5 == ((d5 & 0x7FFFFFFFu) > 0x7F800000u));
    if (!nan4) CHECK(d4 == ns::detail::float_to_bits(e4));
    if (!nan5) CHECK(d5 == ns::detail::float_to_bits(e5));
  }
  // f32 -> f64: every exponent, with edge mantissas (subnormals included)
  for (std::uint32_t e = 0; e < 256; ++e)
    for (std::uint32_t m : {0u, 1u, 2u, 3u, 0x400000u, 0x7FFFFFu, 0x123457u})
      for (std::uint32_t s : {0u, 0x80000000u}) {
        const std::uint32_t b = s | (e << 23) | m;
        if (e != 255) CHECK(ns::detail::f32_to_f64_bits(b) == bits_of(nstest::ref_decode_f32(b)));  // shared by host and device
        if (e != 255) CHECK(bits_of(nd::f32_finite_to_double(b)) == ns::detail::f32_to_f64_bits(b));
      }
}

TEST_CASE("cuda emulation: exhaustive 16- and 8-bit patterns, every mode, several grids and alignments") {
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<std::uint16_t>(i);
  std::mt19937_64 rng(3);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<std::uint8_t> bytes(all.size() * 2 + 16);
  for (ns::dtype t : {ns::dtype::f16, ns::dtype::bf16})
    for (std::size_t off : {std::size_t{0}, std::size_t{2}, std::size_t{6}, std::size_t{1}}) {  // 1: element-misaligned (byte loads)
      std::memcpy(bytes.data() + off, all.data(), all.size() * 2);
      check_view(ns::tensor_view::flat(bytes.data() + off, t, 65536), std::string(ns::name(t)) + " offset " + std::to_string(off));
    }
  std::vector<std::uint8_t> fp8;
  for (int r = 0; r < 64; ++r)
    for (int i = 0; i < 256; ++i) fp8.push_back(static_cast<std::uint8_t>(i));
  std::shuffle(fp8.begin(), fp8.end(), rng);
  for (ns::dtype t : {ns::dtype::f8_e4m3fn, ns::dtype::f8_e5m2}) {
    check_view(ns::tensor_view::flat(fp8.data(), t, static_cast<std::int64_t>(fp8.size())), "fp8");
    check_view(ns::tensor_view::flat(fp8.data() + 3, t, 1000), "fp8 unaligned", tiny);
    for (int i = 0; i < 256; i += 5) {
      const std::uint8_t b = static_cast<std::uint8_t>(i);
      check_view(ns::tensor_view::flat(&b, t, 1), "fp8 pattern " + std::to_string(i));
    }
  }
}

TEST_CASE("cuda emulation: adversarial f32/f64 at many sizes, offsets and grids") {
  std::mt19937_64 rng(17);
  for (std::int64_t n : {1, 2, 3, 5, 15, 16, 17, 33, 1000, 4099, 70001}) {
    std::vector<float> f(static_cast<std::size_t>(n) + 8);
    std::vector<double> d(static_cast<std::size_t>(n) + 4);
    for (auto& x : f) x = static_cast<float>(adversarial(rng, false));
    for (auto& x : d) x = adversarial(rng, true);
    for (std::size_t off : {std::size_t{0}, std::size_t{1}, std::size_t{3}}) {
      check_view(ns::tensor_view::flat(f.data() + off, ns::dtype::f32, n), "f32 n=" + std::to_string(n));
      check_view(ns::tensor_view::flat(d.data() + off, ns::dtype::f64, n), "f64 n=" + std::to_string(n));
    }
    // byte-misaligned copies
    std::vector<unsigned char> raw(static_cast<std::size_t>(n) * 8 + 8);
    std::memcpy(raw.data() + 1, f.data(), static_cast<std::size_t>(n) * 4);
    check_view(ns::tensor_view::flat(raw.data() + 1, ns::dtype::f32, n), "f32 misaligned", tiny);
    std::memcpy(raw.data() + 5, d.data(), static_cast<std::size_t>(n) * 8);
    check_view(ns::tensor_view::flat(raw.data() + 5, ns::dtype::f64, n), "f64 misaligned");
  }
  // a large clean tensor with planted non-finite values: many blocks, the last block merging > 256 records
  std::vector<float> big(std::size_t{1} << 21);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : big) x = 1e4f + normal(rng);
  big[1234567] = -std::numeric_limits<float>::infinity();
  big[2000000] = std::numeric_limits<float>::quiet_NaN();
  check_view(ns::tensor_view::flat(big.data(), ns::dtype::f32, static_cast<std::int64_t>(big.size())), "big",
             nd::device_props{300, 4});
}

TEST_CASE("cuda emulation: f64 mean >> std over a full grid (the case that failed on an H200)") {
  // Each thread's mean rounds at ulp(1e12) ~ 1e-4 when kept absolute; the Chan merges of the 16384 thread
  // records of this grid (64 blocks: 4 MiB at 64 KiB a block; 32 elements a thread) then put a ~1e-9 relative
  // error into m2 (the moment records keep their mean as an offset from a shift so that it does not).
  std::mt19937_64 rng(29);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> d(std::size_t{1} << 19);
  const auto view = ns::tensor_view::flat(d.data(), ns::dtype::f64, static_cast<std::int64_t>(d.size()));
  for (auto& x : d) x = 1e12 + normal(rng);
  check_view(view, "f64 1e12 + N(0,1)", nd::device_props{132, 2});
  for (auto& x : d) x = -3e15 + 0.25 * normal(rng);  // ulp(3e15) = 0.5: the spread is below one ulp of the mean
  check_view(view, "f64 -3e15 + N(0,1/16)", nd::device_props{132, 2});
}

TEST_CASE("cuda emulation: a huge first value, then values near 1 (the shift far from the mean)") {
  // Thread 0's shift is 3e38, far from the mean (~4e31): were each merge's mean offset kept relative to that
  // shift, it would round at ulp(3e38) ~ 4e22 in every one of the ~10^5 merges. The records move their mean into
  // the shift after each merge (an exact two-sum), so the offset stays small.
  std::mt19937_64 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> f(std::size_t{1} << 23);
  const auto view = ns::tensor_view::flat(f.data(), ns::dtype::f32, static_cast<std::int64_t>(f.size()));
  for (auto& x : f) x = 1.0f + 1e-3f * normal(rng);
  f[0] = 3e38f;
  check_view(view, "3e38 then ~1", nd::device_props{132, 2});
  f[0] = -3e38f;
  f[1] = 3e38f;  // mean back near 1 after two huge values of opposite sign
  check_view(view, "-3e38, 3e38 then ~1", nd::device_props{132, 2});
}

TEST_CASE("cuda emulation: f32 range boundaries in aligned groups of four (the tame test's edges)") {
  // smallest normal, largest finite and their negatives (tame); the largest subnormal, +-0 and +-inf (not)
  const std::uint32_t tame[] = {0x00800000u, 0x7F7FFFFFu, 0x80800000u, 0xFF7FFFFFu, 0x3F800000u, 0x00800001u};
  const std::uint32_t wild[] = {0x007FFFFFu, 0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x807FFFFFu,
                                0x00000001u};
  std::mt19937_64 rng(37);
  std::vector<std::uint32_t> bits(4096 * 4);
  for (std::size_t g = 0; g < bits.size() / 4; ++g)
    for (std::size_t j = 0; j < 4; ++j)
      bits[4 * g + j] = (g % 3 == 0 && j == rng() % 4) ? wild[rng() % 7] : tame[rng() % 6];
  const auto view = ns::tensor_view::flat(bits.data(), ns::dtype::f32, static_cast<std::int64_t>(bits.size()));
  check_view(view, "f32 edges");
  check_view(view, "f32 edges", tiny);
}

TEST_CASE("cuda emulation: strided views and a batch of mixed tensors") {
  std::mt19937_64 rng(23);
  std::vector<double> d(300 * 257);
  for (auto& x : d) x = adversarial(rng, true);
  ns::tensor_view t = ns::tensor_view::contiguous(d.data(), ns::dtype::f64, {300, 257});
  std::swap(t.shape[0], t.shape[1]);
  std::swap(t.strides[0], t.strides[1]);
  check_view(t, "transpose");
  ns::tensor_view gap = ns::tensor_view::contiguous(d.data(), ns::dtype::f64, {300, 128});
  gap.strides[0] = 257;
  gap.strides[1] = 2;
  check_view(gap, "gapped");
  ns::tensor_view bcast = ns::tensor_view::contiguous(d.data(), ns::dtype::f64, {40, 257});
  bcast.strides[0] = 0;
  check_view(bcast, "broadcast");

  // 1300 tensors: more than one launch (1000 per launch), more than 8 strided per launch, empty and integer ones
  std::vector<std::vector<float>> data(1300);
  std::vector<nc::buffer_view> views;
  std::vector<ns::tensor_view> host_views;
  for (std::size_t i = 0; i < data.size(); ++i) {
    const std::size_t n = i % 97 == 0 ? 0 : static_cast<std::size_t>(rng() % (i % 100 == 1 ? 200000 : 3000)) + 2;
    data[i].resize(n + 2);
    for (auto& x : data[i]) x = static_cast<float>(adversarial(rng, false));
    ns::tensor_view hv = ns::tensor_view::flat(data[i].data(), i % 13 == 0 ? ns::dtype::i32 : ns::dtype::f32,
                                               static_cast<std::int64_t>(n));
    if (i % 50 == 7 && n % 2 == 0 && n >= 4) {  // transposed [n/2, 2]
      hv = ns::tensor_view::contiguous(data[i].data(), ns::dtype::f32, {static_cast<std::int64_t>(n / 2), 2});
      std::swap(hv.shape[0], hv.shape[1]);
      std::swap(hv.strides[0], hv.strides[1]);
    }
    host_views.push_back(hv);
    nc::buffer_view bv;
    bv.view = hv;
    bv.view.space = ns::memory_space::cuda_device;
    views.push_back(bv);
  }
  for (ns::check_mode m : {ns::check_mode::stats, ns::check_mode::concise_health}) {
    const auto g = emulate_check(views, m, h100);
    REQUIRE(g.size() == views.size());
    for (std::size_t i = 0; i < views.size(); ++i) {
      CAPTURE(i);
      nstest::expect_same_health(
          g[i], ns::check(host_views[i], ns::check_options{}.with_mode(m).with_isa(ns::isa::scalar).with_threads(1)),
          moment_tol);
      nstest::expect_health(g[i], nstest::reference(host_views[i]), host_views[i], m, reference_tol);
    }
  }
}
