// nanscope CUDA backend tests: every case runs the same data through nanscope::cuda and through the host
// pass (nanscope::check) and compares every field: counts, extrema and indices bit for bit, mean and std within
// the documented 1e-9 relative tolerance; single-tensor cases are also held to the independent naive reference
// of tests/support/reference.hpp.
//
// Without a usable CUDA device the program prints "skipped: no CUDA device (...)" and exits with 77, which
// CTest reports as skipped (SKIP_RETURN_CODE), never as passed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <nanscope/cuda.cuh>
#include <nanscope/report.hpp>

#include "support/compare.hpp"
#include "support/reference.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace ns = nanscope;

namespace {

#define CUDA_OK(call)                                                                                  \
  do {                                                                                                 \
    const cudaError_t e_ = (call);                                                                     \
    if (e_ != cudaSuccess) FAIL(#call << ": " << cudaGetErrorString(e_));                              \
  } while (false)

/// Device copy of host bytes (with `offset` bytes of padding in front, to test alignments).
struct device_bytes {
  unsigned char* base = nullptr;
  std::size_t offset = 0;
  device_bytes(const void* host, std::size_t bytes, std::size_t off = 0) : offset(off) {
    CUDA_OK(cudaMalloc(&base, bytes + off + 16));
    if (bytes != 0) CUDA_OK(cudaMemcpy(base + off, host, bytes, cudaMemcpyHostToDevice));
  }
  device_bytes(const device_bytes&) = delete;
  device_bytes& operator=(const device_bytes&) = delete;
  ~device_bytes() { cudaFree(base); }
  void* ptr() const { return base + offset; }
};

std::uint64_t bits_of(double x) { return nstest::bits64(x); }

/// The device result vs the host pass's: bit for bit but mean/std (1e-9 relative: two summation orders).
void compare(const ns::health_result& g, const ns::health_result& c, const std::string& what, double tol = 1e-9) {
  INFO(what);
  nstest::expect_same_health(g, c, tol);
}

/// The host reference: the portable kernel (the AVX kernels sum in f32: ~1e-7 relative, the device is closer).
ns::health_result host_ref(const ns::tensor_view& v, ns::check_mode mode = ns::check_mode::stats) {
  return ns::check(v, ns::check_options{}.with_mode(mode).with_isa(ns::isa::scalar));
}

using nstest::all_modes;

/// Checks host data of dtype t on the device (copied at byte offset `off`) and on the host, in `mode`.
void run_case(ns::cuda::checker& ck, const void* host, ns::dtype t, std::int64_t n, const std::string& what,
              ns::check_mode mode = ns::check_mode::stats, std::size_t off = 0) {
  const std::size_t bytes = static_cast<std::size_t>(n) * ns::size_of(t);
  device_bytes d(host, bytes, off);
  const auto bv = ns::cuda::device_buffer(d.ptr(), t, {n}, nullptr, "case");
  const ns::health_result g = ck.check(bv, ns::check_options{}.with_mode(mode)).get();
  const ns::tensor_view hv = ns::tensor_view::flat(host, t, n);
  compare(g, host_ref(hv, mode), what + " mode " + ns::name(mode) + " offset " + std::to_string(off));
  // and the independent naive reference of tests/support/reference.hpp
  nstest::expect_health(g, nstest::reference(hv), hv, mode, nstest::tol_double_accumulation);
}

double random_adversarial(std::mt19937_64& rng, bool f64) {
  std::uniform_int_distribution<int> pick(0, 15);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double inf = std::numeric_limits<double>::infinity();
  switch (pick(rng)) {
    case 0: return std::numeric_limits<double>::quiet_NaN();
    case 1: return (rng() & 1) ? inf : -inf;
    case 2: return (rng() & 1) ? 0.0 : -0.0;
    case 3: return f64 ? 4.9e-324 * static_cast<double>(rng() % 1000 + 1) : 1.4e-45 * static_cast<double>(rng() % 1000 + 1);
    case 4: return f64 ? normal(rng) * 1e300 : normal(rng) * 1e37;
    case 5: return f64 ? normal(rng) * 1e-300 : normal(rng) * 1e-40;
    case 6: return 1e8 + normal(rng);
    default: return normal(rng) * 3.0;
  }
}

template <class T>
std::vector<T> adversarial(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(random_adversarial(rng, sizeof(T) == 8));
  return v;
}

}  // namespace

TEST_CASE("exhaustive 16-bit patterns: f16 and bf16, every mode") {
  ns::cuda::checker ck;
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<std::uint16_t>(i);
  for (ns::dtype t : {ns::dtype::f16, ns::dtype::bf16})
    for (ns::check_mode m : all_modes) run_case(ck, all.data(), t, 65536, std::string("all ") + ns::name(t), m);
  // shuffled and repeated 40 times: many blocks per tensor, NaN first at a random place
  std::vector<std::uint16_t> big;
  std::mt19937_64 rng(7);
  for (int r = 0; r < 40; ++r) {
    std::vector<std::uint16_t> s = all;
    std::shuffle(s.begin(), s.end(), rng);
    big.insert(big.end(), s.begin(), s.end());
  }
  for (ns::dtype t : {ns::dtype::f16, ns::dtype::bf16})
    for (std::size_t off : {0, 2, 6})
      run_case(ck, big.data(), t, static_cast<std::int64_t>(big.size()), std::string("shuffled ") + ns::name(t),
               ns::check_mode::stats, off);
}

TEST_CASE("exhaustive 8-bit patterns: e4m3fn and e5m2") {
  ns::cuda::checker ck;
  std::vector<std::uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = static_cast<std::uint8_t>(i);
  for (ns::dtype t : {ns::dtype::f8_e4m3fn, ns::dtype::f8_e5m2}) {
    for (ns::check_mode m : all_modes) run_case(ck, all.data(), t, 256, std::string("all ") + ns::name(t), m);
    // each pattern alone: classification of every value
    for (int i = 0; i < 256; ++i) run_case(ck, &all[i], t, 1, std::string("single ") + std::to_string(i));
  }
  std::vector<std::uint8_t> big;
  std::mt19937_64 rng(11);
  for (int r = 0; r < 3000; ++r) {
    std::vector<std::uint8_t> s = all;
    std::shuffle(s.begin(), s.end(), rng);
    big.insert(big.end(), s.begin(), s.end());
  }
  for (ns::dtype t : {ns::dtype::f8_e4m3fn, ns::dtype::f8_e5m2})
    for (std::size_t off : {0, 1, 5, 15})
      run_case(ck, big.data(), t, static_cast<std::int64_t>(big.size()), "shuffled fp8", ns::check_mode::stats, off);
}

TEST_CASE("every single f16 value alone (classification and extrema of each pattern)") {
  ns::cuda::checker ck;
  // one batch of 65536 one-element tensors: also exercises the batch path with tiny tensors
  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<std::uint16_t>(i);
  device_bytes d(all.data(), all.size() * 2);
  std::vector<ns::cuda::buffer_view> views;
  for (std::size_t i = 0; i < all.size(); ++i)
    views.push_back(ns::cuda::device_buffer(static_cast<const std::uint16_t*>(d.ptr()) + i, ns::dtype::f16, {1}));
  const auto batch = ck.check_batch(views.data(), views.size());
  REQUIRE(batch.size() == all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto c = host_ref(ns::tensor_view::flat(&all[i], ns::dtype::f16, 1));
    compare(batch.get(i), c, "f16 pattern " + std::to_string(i));
  }
}

TEST_CASE("adversarial f32 and f64: sizes, alignments, modes") {
  ns::cuda::checker ck;
  const std::int64_t sizes[] = {1, 2, 3, 7, 15, 16, 17, 31, 1000, 65537, (1 << 20) + 13};
  std::uint64_t seed = 100;
  for (std::int64_t n : sizes) {
    const auto f = adversarial<float>(static_cast<std::size_t>(n), ++seed);
    const auto d = adversarial<double>(static_cast<std::size_t>(n), ++seed);
    for (std::size_t off : {0, 4, 12}) {
      run_case(ck, f.data(), ns::dtype::f32, n, "adversarial f32 n=" + std::to_string(n), ns::check_mode::stats, off);
      run_case(ck, d.data(), ns::dtype::f64, n, "adversarial f64 n=" + std::to_string(n), ns::check_mode::stats,
               off == 4 ? 8 : off);
    }
    // element-misaligned pointers (byte-wise loads)
    run_case(ck, f.data(), ns::dtype::f32, n, "f32 misaligned by 1 byte", ns::check_mode::stats, 1);
    run_case(ck, d.data(), ns::dtype::f64, n, "f64 misaligned by 3 bytes", ns::check_mode::stats, 3);
    for (ns::check_mode m : all_modes) {
      run_case(ck, f.data(), ns::dtype::f32, n, "f32 modes", m);
      run_case(ck, d.data(), ns::dtype::f64, n, "f64 modes", m);
    }
  }
}

TEST_CASE("clean large tensors: first non-finite index exact, mean >> std accurate") {
  ns::cuda::checker ck;
  const std::size_t n = std::size_t{1} << 24;
  std::vector<float> v(n);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto& x : v) x = 1e4f + normal(rng);
  run_case(ck, v.data(), ns::dtype::f32, static_cast<std::int64_t>(n), "clean f32 2^24");
  for (std::size_t at : {n - 1, n / 2 + 3, std::size_t{17}}) {
    v[at] = std::numeric_limits<float>::quiet_NaN();
    run_case(ck, v.data(), ns::dtype::f32, static_cast<std::int64_t>(n), "NaN planted at " + std::to_string(at));
  }
  std::vector<double> dv(n / 4);
  for (auto& x : dv) x = 1e12 + static_cast<double>(normal(rng));
  run_case(ck, dv.data(), ns::dtype::f64, static_cast<std::int64_t>(dv.size()), "f64 mean >> std");
  for (auto& x : dv) x = -3e15 + 0.25 * static_cast<double>(normal(rng));  // spread below one ulp of the mean
  run_case(ck, dv.data(), ns::dtype::f64, static_cast<std::int64_t>(dv.size()), "f64 -3e15 + N(0, 1/16)");
}

TEST_CASE("strided views: transpose, gaps, broadcast, rank 8") {
  ns::cuda::checker ck;
  const std::int64_t rows = 300, cols = 257;
  const auto f = adversarial<float>(static_cast<std::size_t>(rows * cols), 3);
  const auto d = adversarial<double>(static_cast<std::size_t>(rows * cols), 4);
  std::vector<std::uint16_t> b(static_cast<std::size_t>(rows * cols));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<std::uint16_t>(i * 2654435761u >> 7);
  struct layout {
    const char* name;
    int rank;
    std::int64_t shape[8];
    std::int64_t strides[8];
  };
  const layout layouts[] = {
      {"transpose", 2, {cols, rows}, {1, cols}},
      {"every other column", 2, {rows, (cols + 1) / 2}, {cols, 2}},
      {"broadcast row", 2, {rows, cols}, {0, 1}},
      {"rank 8", 8, {2, 3, 2, 2, 3, 2, 2, 5}, {3000, 1000, 400, 100, 30, 10, 5, 1}},
  };
  const void* hosts[] = {f.data(), d.data(), b.data()};
  const ns::dtype types[] = {ns::dtype::f32, ns::dtype::f64, ns::dtype::bf16};
  for (int k = 0; k < 6; ++k) {
    // k >= 3: the same data at an element-misaligned address (byte loads on the strided path)
    device_bytes dev(hosts[k % 3], b.size() * ns::size_of(types[k % 3]), k == 3 ? 2 : k == 4 ? 4 : k == 5 ? 1 : 0);
    for (const layout& l : layouts) {
      ns::tensor_view hv;
      hv.data = hosts[k % 3];
      hv.type = types[k % 3];
      hv.rank = l.rank;
      for (int i = 0; i < l.rank; ++i) {
        hv.shape[i] = l.shape[i];
        hv.strides[i] = l.strides[i];
      }
      ns::tensor_view dv = hv;
      dv.data = dev.ptr();
      dv.space = ns::memory_space::cuda_device;
      for (ns::check_mode m : {ns::check_mode::stats, ns::check_mode::curt_health}) {
        const auto g = ck.check(ns::cuda::device_buffer(dv), ns::check_options{}.with_mode(m)).get();
        compare(g, host_ref(hv, m),
                std::string(l.name) + " " + ns::name(types[k % 3]) + " " + ns::name(m) + (k >= 3 ? " misaligned" : ""));
      }
    }
  }
}

TEST_CASE("empty tensors and integer dtypes need no device work") {
  ns::cuda::checker ck;
  std::int32_t ints[6] = {1, 2, 3, 4, 5, 6};
  device_bytes d(ints, sizeof ints);
  const auto gi = ck.check(ns::cuda::device_buffer(d.ptr(), ns::dtype::i32, {2, 3})).get();
  compare(gi, host_ref(ns::tensor_view::contiguous(ints, ns::dtype::i32, {2, 3})), "i32");
  CHECK(gi.count == 6);
  const auto ge = ck.check(ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {0, 5})).get();
  compare(ge, host_ref(ns::tensor_view::contiguous(ints, ns::dtype::f32, {0, 5})), "empty");
  CHECK(ge.count == 0);
  // a view from any adapter, with its stream
  std::vector<float> fl = adversarial<float>(3000, 77);
  device_bytes df(fl.data(), fl.size() * 4);
  compare(ck.check(ns::tensor_view::flat(df.ptr(), ns::dtype::f32, 3000), nullptr).get(),
          host_ref(ns::tensor_view::flat(fl.data(), ns::dtype::f32, 3000)), "tensor_view overload");
}

TEST_CASE("batches: 1200 tensors of mixed sizes, dtypes and layouts, one result each") {
  ns::cuda::checker ck;
  std::mt19937_64 rng(99);
  const ns::dtype types[] = {ns::dtype::f32, ns::dtype::f64, ns::dtype::f16, ns::dtype::bf16, ns::dtype::f8_e4m3fn,
                             ns::dtype::f8_e5m2, ns::dtype::i16};
  struct item {
    std::vector<unsigned char> host;
    std::unique_ptr<device_bytes> dev;
    ns::tensor_view hv;
  };
  std::vector<item> items(1200);
  std::vector<ns::cuda::buffer_view> views;
  for (std::size_t i = 0; i < items.size(); ++i) {
    item& it = items[i];
    const ns::dtype t = types[rng() % 7];
    const std::int64_t n = (rng() % 10 == 0) ? 0 : static_cast<std::int64_t>(rng() % (i % 50 == 0 ? 300000 : 5000));
    const std::size_t es = ns::size_of(t);
    it.host.resize(static_cast<std::size_t>(n) * es);
    if (t == ns::dtype::f32 || t == ns::dtype::f64) {
      for (std::int64_t k = 0; k < n; ++k) {
        const double x = random_adversarial(rng, t == ns::dtype::f64);
        if (t == ns::dtype::f32) {
          const float y = static_cast<float>(x);
          std::memcpy(&it.host[static_cast<std::size_t>(k) * 4], &y, 4);
        } else {
          std::memcpy(&it.host[static_cast<std::size_t>(k) * 8], &x, 8);
        }
      }
    } else {
      for (auto& byte : it.host) byte = static_cast<unsigned char>(rng());
    }
    it.dev = std::make_unique<device_bytes>(it.host.data(), it.host.size(), (rng() % 4) * es);
    // every 40th tensor is viewed as a transposed matrix (strided path; more than 8 per launch)
    if (i % 40 == 0 && n >= 4 && n % 2 == 0) {
      it.hv = ns::tensor_view::contiguous(it.host.data(), t, {n / 2, 2});
      std::swap(it.hv.shape[0], it.hv.shape[1]);
      std::swap(it.hv.strides[0], it.hv.strides[1]);
    } else {
      it.hv = ns::tensor_view::flat(it.host.data(), t, n);
    }
    ns::tensor_view dv = it.hv;
    dv.data = it.dev->ptr();
    dv.space = ns::memory_space::cuda_device;
    views.push_back(ns::cuda::device_buffer(dv));
  }
  for (ns::check_mode m : {ns::check_mode::stats, ns::check_mode::full_health}) {
    const auto batch = ck.check_batch(views.data(), views.size(), ns::check_options{}.with_mode(m));
    REQUIRE(batch.size() == items.size());
    for (std::size_t i = 0; i < items.size(); ++i)
      compare(batch.get(i), host_ref(items[i].hv, m),
              "batch item " + std::to_string(i) + " " + ns::name(items[i].hv.type));
  }
}

TEST_CASE("results are deterministic run to run") {
  ns::cuda::checker ck;
  const auto v = adversarial<float>(std::size_t{1} << 22, 8);
  device_bytes d(v.data(), v.size() * 4);
  const auto bv = ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {static_cast<std::int64_t>(v.size())});
  const auto a = ck.check(bv).get();
  for (int r = 0; r < 3; ++r) {
    const auto b = ck.check(bv).get();
    CHECK(bits_of(a.mean) == bits_of(b.mean));
    CHECK(bits_of(a.std) == bits_of(b.std));
  }
}

namespace {
__global__ void spin_until(volatile int* flag, long long max_cycles) {
  const long long start = clock64();
  while (*flag == 0 && clock64() - start < max_cycles) {
  }
}
}  // namespace

TEST_CASE("a check never waits for the device: ready() is false while the stream is busy") {
  ns::cuda::checker ck;
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* flag = nullptr;
  CUDA_OK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  const auto v = adversarial<float>(100000, 9);
  device_bytes d(v.data(), v.size() * 4);
  // first use of the stream allocates its storage (stream-ordered); warm it up
  ck.check(ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {100000}, s)).get();
  spin_until<<<1, 1, 0, s>>>(flag, 20'000'000'000ll);  // ~10 s at most, released below
  CUDA_OK(cudaGetLastError());
  const auto t0 = std::chrono::steady_clock::now();
  const auto p = ck.check(ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {100000}, s, "busy"));
  const double queued_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(!p.ready());
  INFO("queueing took " << queued_ms << " ms");
  // a "not ready" query must not poison the next check's launch
  const auto q = ck.check(ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {50000}, s, "busy too"));
  CHECK(!q.ready());
  *flag = 1;
  p.wait();
  CHECK(p.ready());
  compare(q.get(), host_ref(ns::tensor_view::flat(v.data(), ns::dtype::f32, 50000)), "second check behind the spin");
  compare(p.get(), host_ref(ns::tensor_view::flat(v.data(), ns::dtype::f32, 100000)), "after the spin");
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaFreeHost(flag));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("CUDA graph capture: capture, replay, read the results of each replay") {
  ns::cuda::checker ck;
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::int64_t n = 1 << 20;
  auto a = adversarial<float>(static_cast<std::size_t>(n), 21);
  for (auto& x : a) x = std::isfinite(x) ? x : 1.0f;
  auto b = adversarial<double>(static_cast<std::size_t>(n), 22);
  device_bytes da(a.data(), a.size() * 4), db(b.data(), b.size() * 8);
  const ns::cuda::buffer_view views[2] = {ns::cuda::device_buffer(da.ptr(), ns::dtype::f32, {n}, s, "a"),
                                          ns::cuda::device_buffer(db.ptr(), ns::dtype::f64, {n}, s, "b")};
  // eager checks on the same checker first: capture must not query their events
  compare(ck.check_batch(views, 2).get(0), host_ref(ns::tensor_view::flat(a.data(), ns::dtype::f32, n)), "eager a");
  ck.reserve(s, 2, static_cast<std::uint64_t>(n));
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  const auto batch = ck.check_batch(views, 2);
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 3; ++replay) {
    if (replay == 1) {  // change the data between replays: the results follow
      a[12345] = std::numeric_limits<float>::infinity();
      CUDA_OK(cudaMemcpy(da.ptr(), a.data(), a.size() * 4, cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaGraphLaunch(exec, s));
    batch.wait();
    CUDA_OK(cudaStreamSynchronize(s));
    compare(batch.get(0), host_ref(ns::tensor_view::flat(a.data(), ns::dtype::f32, n)), "graph a");
    compare(batch.get(1), host_ref(ns::tensor_view::flat(b.data(), ns::dtype::f64, n)), "graph b");
  }
  CHECK(batch.get(0).pos_inf == 1);
  CHECK(batch.get(0).first_nonfinite == 12345);
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("check_async: caller-owned storage and pinned records (CUB's convention)") {
  const std::int64_t n = 300000;
  const auto v = adversarial<float>(static_cast<std::size_t>(n), 31);
  device_bytes d(v.data(), v.size() * 4);
  const ns::cuda::buffer_view bv[3] = {ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {n}),
                                       ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {0}),
                                       ns::cuda::device_buffer(d.ptr(), ns::dtype::f16, {n})};
  std::size_t bytes = 0;
  ns::cuda::check_async(nullptr, bytes, bv, 3, nullptr, ns::check_mode::stats, nullptr);
  CHECK(bytes > 0);
  void* temp = nullptr;
  CUDA_OK(cudaMalloc(&temp, bytes));
  CUDA_OK(cudaMemset(temp, 0, bytes));
  ns::cuda::device_result* rec = nullptr;
  CUDA_OK(cudaHostAlloc(&rec, 3 * sizeof(ns::cuda::device_result), cudaHostAllocMapped));
  std::size_t small = bytes - 1;
  CHECK_THROWS_WITH_AS(ns::cuda::check_async(temp, small, bv, 3, rec, ns::check_mode::stats, nullptr),
                       doctest::Contains("needed"), ns::error);
  for (int round = 0; round < 2; ++round) {  // the storage is left zeroed: reusable
    ns::cuda::check_async(temp, bytes, bv, 3, rec, ns::check_mode::stats, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    compare(ns::cuda::finalize(rec[0], bv[0].view, ns::check_mode::stats),
            host_ref(ns::tensor_view::flat(v.data(), ns::dtype::f32, n)), "check_async f32");
    compare(ns::cuda::finalize(rec[1], bv[1].view, ns::check_mode::stats),
            host_ref(ns::tensor_view::flat(v.data(), ns::dtype::f32, 0)), "check_async empty");
    compare(ns::cuda::finalize(rec[2], bv[2].view, ns::check_mode::stats),
            host_ref(ns::tensor_view::flat(v.data(), ns::dtype::f16, n)), "check_async f16 over the same bytes");
  }
  CUDA_OK(cudaFreeHost(rec));
  CUDA_OK(cudaFree(temp));
}

TEST_CASE("errors name the tensor and the problem") {
  ns::cuda::checker ck;
  std::vector<float> host(100, 1.0f);
  CHECK_THROWS_WITH_AS(ck.check(ns::cuda::device_buffer(host.data(), ns::dtype::f32, {100}, nullptr, "weights")),
                       doctest::Contains("'weights': a host pointer was passed as device memory"), ns::error);
  CHECK_THROWS_WITH_AS(ck.check(ns::cuda::device_buffer(nullptr, ns::dtype::f32, {100}, nullptr, "null")),
                       doctest::Contains("'null': null data pointer"), ns::error);
  ns::tensor_view hv = ns::tensor_view::flat(host.data(), ns::dtype::f32, 100, "hostview");
  CHECK_THROWS_WITH_AS(ck.check(ns::cuda::buffer_view{hv, nullptr}), doctest::Contains("'hostview': the view says host"),
                       ns::error);
  float* dev = nullptr;
  CUDA_OK(cudaMalloc(&dev, 400));
  ns::tensor_view neg = ns::tensor_view::flat(dev, ns::dtype::f32, 100, "neg");
  neg.shape[0] = -1;
  CHECK_THROWS_WITH_AS(ck.check(ns::cuda::device_buffer(neg)), doctest::Contains("'neg': negative extent"), ns::error);
  CHECK_THROWS_WITH_AS(ns::check(ns::cuda::device_buffer(dev, ns::dtype::f32, {100}, nullptr, "on_gpu").view),
                       doctest::Contains("CUDA device memory"), ns::error);
  ns::cuda::pending empty;
  CHECK_THROWS_WITH_AS(empty.get(), doctest::Contains("empty handle"), ns::error);
  CUDA_OK(cudaFree(dev));
}

TEST_CASE("deferred recorder: device checks resolved at the step boundary give the host path's report") {
  ns::cuda::checker ck;
  // three layers; layer 1 makes a NaN (from its finite input), layer 2 propagates it
  const std::int64_t n = 4096;
  std::vector<std::vector<float>> acts(4, std::vector<float>(static_cast<std::size_t>(n)));
  for (std::int64_t i = 0; i < n; ++i) acts[0][static_cast<std::size_t>(i)] = std::sin(0.01f * static_cast<float>(i)) * 3.0f;
  for (int l = 1; l < 4; ++l) {
    acts[static_cast<std::size_t>(l)] = acts[static_cast<std::size_t>(l - 1)];
    for (auto& x : acts[static_cast<std::size_t>(l)]) x = x * 2.0f + 1.0f;
  }
  acts[2][100] = std::numeric_limits<float>::quiet_NaN();
  acts[3][100] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::unique_ptr<device_bytes>> dev;
  for (const auto& a : acts) dev.push_back(std::make_unique<device_bytes>(a.data(), a.size() * 4));
  auto options = [](std::string& out) {
    ns::recorder_options o;
    o.policy = ns::on_detect::print_and_continue;
    o.sink = [&out](std::string_view t) { out.append(t.data(), t.size()); };
    o.max_frames = 10;
    return o;
  };
  std::string host_text, device_text;
  ns::recorder host_rec(options(host_text)), dev_rec(options(device_text));
  for (int step = 0; step < 2; ++step) {
    {
      ns::scope root(host_rec, "", "Net");
      root.input(ns::tensor_view::flat(acts[0].data(), ns::dtype::f32, n));
      for (int l = 0; l < 3; ++l) {
        ns::scope s(host_rec, "layers." + std::to_string(l), "Layer");
        s.input(ns::tensor_view::flat(acts[static_cast<std::size_t>(l)].data(), ns::dtype::f32, n));
        s.output(ns::tensor_view::flat(acts[static_cast<std::size_t>(l + 1)].data(), ns::dtype::f32, n));
      }
      root.output(ns::tensor_view::flat(acts[3].data(), ns::dtype::f32, n));
    }
    ns::cuda::deferred_recorder dr(dev_rec, ck);
    {
      ns::cuda::deferred_recorder::scope root(dr, "", "Net");
      root.input(ns::cuda::device_buffer(dev[0]->ptr(), ns::dtype::f32, {n}));
      for (int l = 0; l < 3; ++l) {
        ns::cuda::deferred_recorder::scope s(dr, "layers." + std::to_string(l), "Layer");
        s.input(ns::cuda::device_buffer(dev[static_cast<std::size_t>(l)]->ptr(), ns::dtype::f32, {n}));
        s.output(ns::cuda::device_buffer(dev[static_cast<std::size_t>(l + 1)]->ptr(), ns::dtype::f32, {n}));
      }
      root.output(ns::cuda::device_buffer(dev[3]->ptr(), ns::dtype::f32, {n}));
    }
    CHECK(dr.pending_tensors() == 8);
    CHECK(dev_rec.detections() == static_cast<std::uint64_t>(step));  // nothing resolved before end_step
    dr.end_step();
    CHECK(dev_rec.detections() == host_rec.detections());
  }
  CHECK(host_text.find("layers.1") != std::string::npos);
  CHECK(device_text == host_text);
  CHECK(dev_rec.step() == host_rec.step());
  const auto hf = host_rec.frames(), df = dev_rec.frames();
  REQUIRE(hf.size() == df.size());
  for (std::size_t i = 0; i < hf.size(); ++i) {
    CHECK(hf[i].module_path == df[i].module_path);
    REQUIRE(hf[i].tensors.size() == df[i].tensors.size());
    for (std::size_t k = 0; k < hf[i].tensors.size(); ++k)
      compare(df[i].tensors[k].health, hf[i].tensors[k].health,
              "frame " + std::to_string(i) + " " + hf[i].tensors[k].context, 1e-6);  // host recorder: SIMD kernel
  }
}

// ---------------------------------------------------------------------------------------------------------
// Segmented checks (issue 32 item 2): the segment kernel against the host segmented check
// ---------------------------------------------------------------------------------------------------------

/// Every segment field of the device's result and the host's, bit for bit (abs_max by bit pattern).
void compare_segments(const ns::segmented_result& g, const ns::segmented_result& c, const std::string& what) {
  INFO(what);
  REQUIRE(g.count == c.count);
  CHECK(g.nonfinite_mask == c.nonfinite_mask);
  CHECK(g.over_mask == c.over_mask);
  REQUIRE(g.bad.size() == c.bad.size());
  for (std::size_t i = 0; i < g.bad.size(); ++i) {
    INFO("bad segment " << c.bad[i].index);
    CHECK(g.bad[i].index == c.bad[i].index);
    CHECK(g.bad[i].id == c.bad[i].id);
    CHECK(g.bad[i].begin == c.bad[i].begin);
    CHECK(g.bad[i].end == c.bad[i].end);
    CHECK(g.bad[i].nan == c.bad[i].nan);
    CHECK(g.bad[i].neg_inf == c.bad[i].neg_inf);
    CHECK(g.bad[i].pos_inf == c.bad[i].pos_inf);
    CHECK(g.bad[i].first_nonfinite == c.bad[i].first_nonfinite);
    CHECK(bits_of(g.bad[i].abs_max) == bits_of(c.bad[i].abs_max));
    CHECK(g.bad[i].over_threshold == c.bad[i].over_threshold);
  }
  REQUIRE(g.per_segment.size() == c.per_segment.size());
  for (std::size_t i = 0; i < g.per_segment.size(); ++i) {
    INFO("segment " << i);
    CHECK(g.per_segment[i].nan == c.per_segment[i].nan);
    CHECK(g.per_segment[i].neg_inf == c.per_segment[i].neg_inf);
    CHECK(g.per_segment[i].pos_inf == c.per_segment[i].pos_inf);
    CHECK(g.per_segment[i].first_nonfinite == c.per_segment[i].first_nonfinite);
    CHECK(bits_of(g.per_segment[i].abs_max) == bits_of(c.per_segment[i].abs_max));
  }
}

ns::segments host_segments_of(const ns::cuda::device_segments& d, const std::vector<std::int64_t>& host_offsets) {
  ns::segments h;
  h.axis = d.axis;
  h.offsets = d.offsets != nullptr ? host_offsets.data() : nullptr;
  h.offset_count = d.offset_count;
  h.uniform = d.uniform;
  h.ids = d.ids;
  h.id_count = d.id_count;
  return h;
}

/// Random offsets over `extent` units: empty and one-unit segments, boundaries at and next to the kernel's tile
/// edges (4096 elements).
std::vector<std::int64_t> seg_offsets(std::mt19937_64& rng, std::int64_t extent, std::int64_t unit, int k) {
  std::vector<std::int64_t> o = {0, extent};
  for (int i = 0; i < k; ++i) {
    std::int64_t x = 0;
    switch (rng() % 4) {
      case 0: x = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(extent * unit / 4096 + 1)) * 4096 / unit + static_cast<std::int64_t>(rng() % 3) - 1; break;
      case 1: x = o[rng() % o.size()]; break;
      case 2: x = o[rng() % o.size()] + 1; break;
      default: x = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(extent + 1)); break;
    }
    if (x >= 0 && x <= extent) o.push_back(x);
  }
  std::sort(o.begin(), o.end());
  return o;
}

TEST_CASE("segmented checks: the segment kernel gives the host segmented check's result, every dtype and mode") {
  ns::cuda::checker ck;
  std::mt19937_64 rng(3201);
  for (ns::dtype t : {ns::dtype::f64, ns::dtype::f32, ns::dtype::f16, ns::dtype::bf16, ns::dtype::f8_e4m3fn,
                      ns::dtype::f8_e5m2}) {
    const std::size_t es = ns::size_of(t);
    const std::int64_t rows = 3001, cols = 67, n = rows * cols;
    std::vector<unsigned char> host(static_cast<std::size_t>(n) * es);
    for (auto& b : host) b = static_cast<unsigned char>(rng());
    device_bytes d(host.data(), host.size());
    const std::vector<std::int64_t> off = seg_offsets(rng, rows, cols, 200);
    std::vector<std::int64_t> ids(off.size() - 1);
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = 17 + static_cast<std::int64_t>(i);
    device_bytes doff(off.data(), off.size() * sizeof(std::int64_t));
    const auto bv = ns::cuda::device_buffer(d.ptr(), t, {rows, cols}, nullptr, "logits");
    const ns::tensor_view hv = ns::tensor_view::contiguous(host.data(), t, {rows, cols}, "logits");
    const std::vector<ns::cuda::device_segments> segs = {
        ns::cuda::device_segments::rows(static_cast<const std::int64_t*>(doff.ptr()), off.size()).with_ids(ids.data(), ids.size()),
        ns::cuda::device_segments::every_rows(16), ns::cuda::device_segments::every_elements(1000)};
    for (const ns::cuda::device_segments& s : segs)
      for (ns::check_mode mode : {ns::check_mode::concise_health, ns::check_mode::full_health, ns::check_mode::stats})
        for (int variant = 0; variant < 2; ++variant) {
          ns::segment_options so;
          if (variant == 1) so.with_level(ns::segment_detail::counts).with_threshold(1.0);
          const std::string what = std::string(ns::name(t)) + " " + ns::name(mode) + " uniform " +
                                   std::to_string(s.uniform) + " variant " + std::to_string(variant);
          const ns::segmented_result g = ck.check(bv, s, ns::check_options{}.with_mode(mode), so).get();
          const ns::segmented_result c =
              ns::check(hv, host_segments_of(s, off), ns::check_options{}.with_mode(mode).with_isa(ns::isa::scalar), so);
          compare_segments(g, c, what);
          compare(g.total, c.total, what);
        }
  }
}

TEST_CASE("segmented checks: check_batch with segments, strided views") {
  ns::cuda::checker ck;
  std::mt19937_64 rng(3202);
  std::vector<float> a(50000), b(4096 * 3);
  for (auto& x : a) x = static_cast<float>(rng() % 1000) * 0.01f;
  for (auto& x : b) x = static_cast<float>(rng() % 1000) * -0.01f;
  a[4095] = nstest::qnan_f();
  a[4096] = nstest::pos_inf_f();
  a[49999] = nstest::neg_inf_f();
  b[8191] = nstest::qnan_f();
  device_bytes da(a.data(), a.size() * 4), db(b.data(), b.size() * 4);
  const std::vector<std::int64_t> oa = {0, 4095, 4096, 4097, 4097, 50000}, ob = {0, 8191, 8192, 12288};
  device_bytes doa(oa.data(), oa.size() * 8), dob(ob.data(), ob.size() * 8);
  // b as a transposed (3, 4096) view of a (4096, 3) buffer: rows of the view are columns in memory
  ns::tensor_view tv = ns::tensor_view::contiguous(db.ptr(), ns::dtype::f32, {4096, 3}, "kv");
  tv.shape[0] = 3;
  tv.shape[1] = 4096;
  tv.strides[0] = 1;
  tv.strides[1] = 3;
  ns::tensor_view htv = tv;
  htv.data = b.data();
  const std::vector<std::int64_t> orows = {0, 1, 1, 3};
  device_bytes dor(orows.data(), orows.size() * 8);
  const ns::cuda::buffer_view views[3] = {ns::cuda::device_buffer(da.ptr(), ns::dtype::f32, {50000}, nullptr, "a"),
                                          ns::cuda::device_buffer(db.ptr(), ns::dtype::f32, {12288}, nullptr, "b"),
                                          ns::cuda::device_buffer(tv)};
  const ns::cuda::device_segments segs[3] = {
      ns::cuda::device_segments::elements(static_cast<const std::int64_t*>(doa.ptr()), oa.size()),
      ns::cuda::device_segments::elements(static_cast<const std::int64_t*>(dob.ptr()), ob.size()),
      ns::cuda::device_segments::rows(static_cast<const std::int64_t*>(dor.ptr()), orows.size())};
  const ns::tensor_view hviews[3] = {ns::tensor_view::flat(a.data(), ns::dtype::f32, 50000),
                                     ns::tensor_view::flat(b.data(), ns::dtype::f32, 12288), htv};
  const std::vector<std::int64_t>* hoff[3] = {&oa, &ob, &orows};
  for (ns::check_mode mode : {ns::check_mode::curt_health, ns::check_mode::full_health}) {
    const ns::segment_options so = ns::segment_options{}.with_level(ns::segment_detail::counts);
    const std::vector<ns::cuda::pending_segmented> r = ck.check_batch(views, segs, 3, ns::check_options{}.with_mode(mode), so);
    REQUIRE(r.size() == 3);
    for (int i = 0; i < 3; ++i) {
      const ns::segmented_result c = ns::check(hviews[i], host_segments_of(segs[i], *hoff[i]),
                                               ns::check_options{}.with_mode(mode).with_isa(ns::isa::scalar), so);
      const ns::segmented_result g = r[static_cast<std::size_t>(i)].get();
      compare_segments(g, c, "batch view " + std::to_string(i) + " " + ns::name(mode));
      compare(g.total, c.total, "batch view " + std::to_string(i));
    }
  }
}

TEST_CASE("segmented checks in a CUDA graph: replays read new boundaries from the device array") {
  std::mt19937_64 rng(3203);
  const std::int64_t rows = 2048, cols = 33, n = rows * cols;
  std::vector<float> host(static_cast<std::size_t>(n));
  for (auto& x : host) x = static_cast<float>(rng() % 2000) * 0.001f;
  for (int k = 0; k < 12; ++k) host[rng() % host.size()] = k % 2 ? nstest::qnan_f() : nstest::neg_inf_f();
  device_bytes d(host.data(), host.size() * 4);
  const std::size_t nseg = 64;  // fixed at capture: fewer requests are padded with empty segments
  std::int64_t* doff = nullptr;
  CUDA_OK(cudaMalloc(&doff, (nseg + 1) * sizeof(std::int64_t)));
  const auto bv = ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {rows, cols}, nullptr, "logits");
  const ns::cuda::device_segments ds = ns::cuda::device_segments::rows(doff, nseg + 1);
  const ns::segment_options so = ns::segment_options{}.with_level(ns::segment_detail::counts).with_threshold(1.5);
  const std::size_t nrec = ns::cuda::segment_records_needed(bv.view, ds, so);
  ns::cuda::segment_record* drec = nullptr;
  ns::cuda::segment_record* hrec = nullptr;
  CUDA_OK(cudaMalloc(&drec, nrec * sizeof(ns::cuda::segment_record)));
  CUDA_OK(cudaHostAlloc(&hrec, nrec * sizeof(ns::cuda::segment_record), cudaHostAllocDefault));
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  ns::cuda::buffer_view sbv = bv;
  sbv.stream = s;
  std::size_t temp_bytes = 0;
  ns::cuda::check_segmented_async(nullptr, temp_bytes, sbv, ds, nullptr, drec, ns::check_mode::concise_health, so);
  CHECK(temp_bytes == 0);  // concise_health: the totals come from the segment records
  std::vector<std::int64_t> off = {0, rows};
  CUDA_OK(cudaMemcpy(doff, off.data(), 2 * sizeof(std::int64_t), cudaMemcpyHostToDevice));  // a valid array at capture
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  std::size_t one = 1;
  ns::cuda::check_segmented_async(&one, one, sbv, ds, nullptr, drec, ns::check_mode::concise_health, so);
  CUDA_OK(cudaMemcpyAsync(hrec, drec, nrec * sizeof(ns::cuda::segment_record), cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  const ns::tensor_view hv = ns::tensor_view::contiguous(host.data(), ns::dtype::f32, {rows, cols}, "logits");
  for (int replay = 0; replay < 5; ++replay) {
    // new boundaries: `live` requests, the rest padded as empty segments at the end
    const int live = 1 + static_cast<int>(rng() % nseg);
    std::vector<std::int64_t> o = seg_offsets(rng, rows, cols, live - 1);
    o.resize(std::min(o.size(), static_cast<std::size_t>(live + 1)));
    o.back() = rows;
    while (o.size() < nseg + 1) o.push_back(rows);
    CUDA_OK(cudaMemcpyAsync(doff, o.data(), o.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    const ns::segmented_result g = ns::cuda::finalize_segments(nullptr, hrec, hv, ds, ns::check_mode::concise_health, so);
    ns::segments hs = ns::segments::rows(o.data(), o.size());
    const ns::segmented_result c = ns::check(hv, hs, ns::check_options{}, so);
    compare_segments(g, c, "replay " + std::to_string(replay));
    CHECK(g.total.nan == c.total.nan);
    CHECK(g.total.first_nonfinite == c.total.first_nonfinite);
  }
  // an invalid array on a replay: the result is an error naming the tensor, never an attribution
  const std::vector<std::int64_t> bad(nseg + 1, 5);
  CUDA_OK(cudaMemcpyAsync(doff, bad.data(), bad.size() * sizeof(std::int64_t), cudaMemcpyHostToDevice, s));
  CUDA_OK(cudaGraphLaunch(exec, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK_THROWS_WITH_AS(ns::cuda::finalize_segments(nullptr, hrec, hv, ds, ns::check_mode::concise_health, so),
                       doctest::Contains("logits"), ns::error);
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaStreamDestroy(s));
  cudaFree(doff);
  cudaFree(drec);
  cudaFreeHost(hrec);
}

TEST_CASE("segmented checks: bad segmentations are errors naming the tensor") {
  ns::cuda::checker ck;
  std::vector<float> host(100, 1.0f);
  device_bytes d(host.data(), host.size() * 4);
  const auto bv = ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {10, 10}, nullptr, "logits");
  const std::vector<std::int64_t> desc = {0, 6, 4, 10};
  device_bytes dd(desc.data(), desc.size() * 8);
  CHECK_THROWS_WITH_AS(ck.check(bv, ns::cuda::device_segments::rows(static_cast<const std::int64_t*>(dd.ptr()), 4)).get(),
                       doctest::Contains("not ascending"), ns::error);
  // host offsets given as device offsets
  CHECK_THROWS_WITH_AS(ck.check(bv, ns::cuda::device_segments::rows(desc.data(), 4)), doctest::Contains("host memory"),
                       ns::error);
  std::vector<std::int64_t> ids = {1, 2};
  CHECK_THROWS_WITH_AS(ck.check(bv, ns::cuda::device_segments::every_rows(4).with_ids(ids.data(), 2)),
                       doctest::Contains("2 ids for 3 segments"), ns::error);
}

namespace {

// ---------------------------------------------------------------------------------------------------------
// Block-scaled what-if statistics (nanscope::cuda::check_block_scaled): every field against the host's
// ---------------------------------------------------------------------------------------------------------

/// Every field of a device block-scaled result against the host's check_block_scaled (health: compare()).
void compare_block_scaled(const ns::block_scaled_result& g, const ns::block_scaled_result& h, const std::string& what) {
  INFO(what);
  REQUIRE(g.formats.size() == h.formats.size());
  CHECK(g.axis == h.axis);
  for (std::size_t k = 0; k < g.formats.size(); ++k) {
    const ns::block_format_stats &d = g.formats[k], &c = h.formats[k];
    INFO(ns::name(c.format));
    CHECK(d.format == c.format);
    CHECK(d.rule == c.rule);
    CHECK(d.block_size == c.block_size);
    CHECK(d.blocks == c.blocks);
    CHECK(d.elements == c.elements);
    CHECK(d.zero_blocks == c.zero_blocks);
    CHECK(d.nan_blocks == c.nan_blocks);
    CHECK(d.zero_scale_blocks == c.zero_scale_blocks);
    CHECK(d.lossy_blocks == c.lossy_blocks);
    CHECK(d.clipped == c.clipped);
    CHECK(d.flushed == c.flushed);
    CHECK(d.subnormal == c.subnormal);
    CHECK(d.scale_histogram == c.scale_histogram);
    CHECK(bits_of(d.scale_exp_mean) == bits_of(c.scale_exp_mean));
    CHECK(bits_of(d.scale_exp_std) == bits_of(c.scale_exp_std));
    CHECK(d.scale_exp_min == c.scale_exp_min);
    CHECK(d.scale_exp_max == c.scale_exp_max);
    CHECK(bits_of(d.tensor_scale) == bits_of(c.tensor_scale));
    CHECK(d.worst.index == c.worst.index);
    CHECK(d.worst.first_element == c.worst.first_element);
    CHECK(d.worst.elements == c.worst.elements);
    CHECK(bits_of(d.worst.abs_max) == bits_of(c.worst.abs_max));
    CHECK(d.worst.scale == c.worst.scale);
    CHECK(d.worst.clipped == c.worst.clipped);
    CHECK(d.worst.flushed == c.worst.flushed);
    CHECK(bits_of(d.worst.error_max_abs) == bits_of(c.worst.error_max_abs));
    CHECK(bits_of(d.worst.error_rms) == bits_of(c.worst.error_rms));
    REQUIRE(d.per_block.size() == c.per_block.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < d.per_block.size(); ++i) {
      const ns::block_record &x = d.per_block[i], &y = c.per_block[i];
      differ += (x.scale != y.scale || x.clipped != y.clipped || x.flushed != y.flushed || x.subnormal != y.subnormal) ? 1 : 0;
    }
    CHECK(differ == 0);
  }
}

/// f32 bits as a bf16 or f16 pattern (truncated; f16: beyond its range inf, below it subnormals then 0).
std::uint16_t to_16(std::uint32_t b, ns::dtype t) {
  if (t == ns::dtype::bf16) return static_cast<std::uint16_t>(b >> 16);
  const std::uint32_t sign = (b >> 16) & 0x8000u, e = (b >> 23) & 0xFFu, m = b & 0x7FFFFFu;
  if (e == 0xFF) return static_cast<std::uint16_t>(sign | 0x7C00u | (m != 0 ? 0x200u : 0u));
  if (e >= 127 + 16) return static_cast<std::uint16_t>(sign | 0x7C00u);
  if (e >= 127 - 14) return static_cast<std::uint16_t>(sign | ((e - 112u) << 10) | (m >> 13));
  if (e >= 127 - 25) return static_cast<std::uint16_t>(sign | (((m | 0x800000u) >> (126u - 14u - e + 13u + 1u)) & 0x3FFu));
  return static_cast<std::uint16_t>(sign);
}

/// Raw bytes of `n` values of dtype t: N(0,1) at block-varying scales, zero blocks, outliers, NaN/Inf now and
/// then, subnormal stretches.
std::vector<unsigned char> block_data(ns::dtype t, std::size_t n, std::size_t L, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> g(0.0, 1.0);
  std::vector<unsigned char> out;
  int scale = 0, kind = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t col = i % L;
    if (col % 32 == 0) {
      scale = static_cast<int>(rng() % 40) - 20;
      kind = static_cast<int>(rng() % 10);
    }
    double v = std::ldexp(g(rng), scale);
    if (kind == 0) v = 0.0;
    if (kind == 1 && col % 32 == 7) v = 900.0;
    if (kind == 2) v = std::ldexp(g(rng), t == ns::dtype::f16 ? -18 : -130);
    float f = static_cast<float>(v);
    std::uint32_t b;
    std::memcpy(&b, &f, 4);
    if (kind == 3 && rng() % 20 == 0) b = rng() & 1 ? 0x7FC00000u : 0xFF800000u;
    if (t == ns::dtype::f32) {
      const auto* q = reinterpret_cast<const unsigned char*>(&b);
      out.insert(out.end(), q, q + 4);
    } else if (t == ns::dtype::f64) {
      double d = ns::detail::bits_to_double(ns::detail::f32_to_f64_bits(b));
      if (kind == 4) d *= 1e290;
      const auto* q = reinterpret_cast<const unsigned char*>(&d);
      out.insert(out.end(), q, q + 8);
    } else if (t == ns::dtype::f8_e4m3fn || t == ns::dtype::f8_e5m2) {
      out.push_back(static_cast<unsigned char>(rng()));
    } else {
      const std::uint16_t h = to_16(b, t);
      const auto* q = reinterpret_cast<const unsigned char*>(&h);
      out.insert(out.end(), q, q + 2);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("block-scaled statistics: the device gives check_block_scaled's result, every dtype, format and rule") {
  ns::cuda::checker ck;
  struct shape_case {
    std::int64_t rows, L;
  };
  // L a multiple of 32 (contiguous, aligned): the packed kernel; {5, 224} and {1, 100000} end in a partial quad.
  // {8192, 128} (8192 quads) and {4096, 97} (12288 units, the one-unit kernel) need several rounds of the grid-stride
  // loop on any GPU up to 12288 warps in one wave (an H200: 4224)
  const shape_case shapes[] = {{64, 256}, {37, 47}, {100, 19}, {3, 1}, {1, 100000}, {4096, 96}, {5, 224}, {8192, 128},
                               {4096, 97}};
  unsigned seed = 1;
  for (ns::dtype t : {ns::dtype::f32, ns::dtype::bf16, ns::dtype::f16, ns::dtype::f64, ns::dtype::f8_e4m3fn,
                      ns::dtype::f8_e5m2})
    for (const shape_case& sc : shapes) {
      const std::size_t n = static_cast<std::size_t>(sc.rows * sc.L);
      const auto bytes = block_data(t, n, static_cast<std::size_t>(sc.L), seed++);
      device_bytes d(bytes.data(), bytes.size());
      const auto bv = ns::cuda::device_buffer(d.ptr(), t, {sc.rows, sc.L}, nullptr, "acts");
      const ns::tensor_view hv = ns::tensor_view::contiguous(bytes.data(), t, {sc.rows, sc.L}, "acts");
      for (ns::scale_rule rule : {ns::scale_rule::ocp, ns::scale_rule::round_up, ns::scale_rule::even}) {
        const std::string what = std::string(ns::name(t)) + " [" + std::to_string(sc.rows) + ", " +
                                 std::to_string(sc.L) + "] " + ns::name(rule);
        auto opt = ns::block_scaled_options{}.with_rule(rule).with_keep_blocks(sc.rows * sc.L < 200000);
        const ns::block_scaled_result h = ns::check_block_scaled(hv, opt);
        const ns::block_scaled_result g = ns::cuda::check_block_scaled(bv, opt);
        compare_block_scaled(g, h, what);
        compare(g.health, host_ref(hv, opt.check.mode), what + " health");
        if (rule == ns::scale_rule::ocp) {
          // through the checker, and NVFP4 with a given tensor amax (one launch)
          opt.with_nvfp4_tensor_amax(100.0);
          compare_block_scaled(ck.check_block_scaled(bv, opt), ns::check_block_scaled(hv, opt), what + " checker, amax 100");
          if (ns::size_of(t) > 1) {  // at an odd address: byte loads
            device_bytes odd(bytes.data(), bytes.size(), 1);
            const auto ov = ns::cuda::device_buffer(odd.ptr(), t, {sc.rows, sc.L}, nullptr, "acts");
            compare_block_scaled(ns::cuda::check_block_scaled(ov, opt), ns::check_block_scaled(hv, opt), what + " misaligned");
          }
          {  // one element past an allocation: element loads, not aligned for the packed kernel's vector loads
            device_bytes shifted(bytes.data(), bytes.size(), ns::size_of(t));
            const auto sv = ns::cuda::device_buffer(shifted.ptr(), t, {sc.rows, sc.L}, nullptr, "acts");
            compare_block_scaled(ns::cuda::check_block_scaled(sv, opt), ns::check_block_scaled(hv, opt),
                                 what + " one element in");
          }
        }
      }
    }
}

TEST_CASE("block-scaled statistics: check_block_scaled_async in a CUDA graph, finalize_block_scaled") {
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::int64_t rows = 512, L = 200;
  auto bytes = block_data(ns::dtype::bf16, static_cast<std::size_t>(rows * L), static_cast<std::size_t>(L), 77);
  device_bytes d(bytes.data(), bytes.size());
  const auto bv = ns::cuda::device_buffer(d.ptr(), ns::dtype::bf16, {rows, L}, s, "kv");
  const auto opt = ns::block_scaled_options{}.with_rule(ns::scale_rule::even).with_nvfp4_tensor_amax(2688.0).with_keep_blocks();
  ns::cuda::block_scaled_records* rec = nullptr;
  CUDA_OK(cudaMalloc(&rec, sizeof(ns::cuda::block_scaled_records)));
  // the graph copies into pinned host memory (captured copies to pageable memory are not allowed)
  ns::block_record* pb[ns::block_format_count] = {};
  ns::block_record* host_pb[ns::block_format_count] = {};
  std::size_t nbs[ns::block_format_count] = {};
  for (int k = 0; k < ns::block_format_count; ++k) {
    const std::int64_t bs = ns::info(static_cast<ns::block_format>(k)).block_size;
    nbs[k] = static_cast<std::size_t>(rows * ((L + bs - 1) / bs));
    CUDA_OK(cudaMalloc(&pb[k], nbs[k] * sizeof(ns::block_record)));
    CUDA_OK(cudaHostAlloc(&host_pb[k], nbs[k] * sizeof(ns::block_record), cudaHostAllocDefault));
  }
  ns::cuda::block_scaled_records* host_rec = nullptr;
  CUDA_OK(cudaHostAlloc(&host_rec, sizeof *host_rec, cudaHostAllocDefault));
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  ns::cuda::check_block_scaled_async(bv, opt, rec, pb);
  CUDA_OK(cudaMemcpyAsync(host_rec, rec, sizeof *host_rec, cudaMemcpyDeviceToHost, s));
  for (int k = 0; k < ns::block_format_count; ++k)
    CUDA_OK(cudaMemcpyAsync(host_pb[k], pb[k], nbs[k] * sizeof(ns::block_record), cudaMemcpyDeviceToHost, s));
  CUDA_OK(cudaStreamEndCapture(s, &graph));
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    if (replay == 1) {  // new data between replays: the statistics follow
      bytes = block_data(ns::dtype::bf16, static_cast<std::size_t>(rows * L), static_cast<std::size_t>(L), 78);
      CUDA_OK(cudaMemcpy(d.ptr(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaGraphLaunch(exec, s));
    CUDA_OK(cudaStreamSynchronize(s));
    std::vector<ns::block_record> moved[ns::block_format_count];
    for (int k = 0; k < ns::block_format_count; ++k) moved[k].assign(host_pb[k], host_pb[k] + nbs[k]);
    ns::block_scaled_result g = ns::cuda::finalize_block_scaled(*host_rec, bv, opt, moved);
    const ns::tensor_view hv = ns::tensor_view::contiguous(bytes.data(), ns::dtype::bf16, {rows, L}, "kv");
    ns::block_scaled_result h = ns::check_block_scaled(hv, opt);
    compare_block_scaled(g, h, "graph replay " + std::to_string(replay));
  }
  CHECK_THROWS_WITH_AS(ns::cuda::check_block_scaled_async(bv, ns::block_scaled_options{}, rec),
                       doctest::Contains("nvfp4_tensor_amax"), ns::error);
  CUDA_OK(cudaGraphExecDestroy(exec));
  CUDA_OK(cudaGraphDestroy(graph));
  CUDA_OK(cudaFreeHost(host_rec));
  for (ns::block_record* p : host_pb) CUDA_OK(cudaFreeHost(p));
  for (ns::block_record* p : pb) CUDA_OK(cudaFree(p));
  CUDA_OK(cudaFree(rec));
  CUDA_OK(cudaStreamDestroy(s));
}

TEST_CASE("block-scaled statistics: blocks along every axis and strided views") {
  const std::int64_t A = 6, B = 45, C = 70;
  for (ns::dtype t : {ns::dtype::f32, ns::dtype::bf16, ns::dtype::f16}) {
    const auto bytes = block_data(t, static_cast<std::size_t>(A * B * C), static_cast<std::size_t>(C), 91);
    device_bytes d(bytes.data(), bytes.size());
    const ns::tensor_view hv = ns::tensor_view::contiguous(bytes.data(), t, {A, B, C}, "x");
    const ns::tensor_view dv = ns::tensor_view::contiguous(d.ptr(), t, {A, B, C}, "x");
    for (int axis : {0, 1, 2}) {
      const auto opt = ns::block_scaled_options{}.with_axis(axis).with_keep_blocks();
      compare_block_scaled(ns::cuda::check_block_scaled(ns::cuda::device_buffer(dv), opt), ns::check_block_scaled(hv, opt),
                           std::string(ns::name(t)) + " axis " + std::to_string(axis));
    }
    // every other element of the last dimension, then the same transposed (the last two dimensions swapped)
    auto gaps = [](ns::tensor_view v) {
      v.shape[2] = 35;
      v.strides[2] = 2;
      return v;
    };
    auto swapped = [](ns::tensor_view v) {
      std::swap(v.shape[1], v.shape[2]);
      std::swap(v.strides[1], v.strides[2]);
      return v;
    };
    for (int which = 0; which < 2; ++which) {
      const ns::tensor_view h = which == 0 ? gaps(hv) : swapped(gaps(hv));
      const ns::tensor_view g = which == 0 ? gaps(dv) : swapped(gaps(dv));
      for (int axis : {-1, 1}) {
        const auto opt = ns::block_scaled_options{}.with_axis(axis).with_keep_blocks();
        compare_block_scaled(ns::cuda::check_block_scaled(ns::cuda::device_buffer(g), opt), ns::check_block_scaled(h, opt),
                             std::string(ns::name(t)) + (which == 0 ? " gaps" : " gaps transposed") + " axis " +
                                 std::to_string(axis));
      }
    }
  }
}

TEST_CASE("block-scaled statistics: refusals name the tensor") {
  std::vector<float> host(64, 1.0f);
  device_bytes d(host.data(), host.size() * 4);
  const auto bv = ns::cuda::device_buffer(d.ptr(), ns::dtype::f32, {8, 8}, nullptr, "w");
  CHECK_THROWS_WITH_AS(ns::cuda::check_block_scaled(bv, ns::block_scaled_options{}.with_axis(2)),
                       doctest::Contains("'w'"), ns::error);
  CHECK_THROWS_WITH_AS(ns::cuda::check_block_scaled(bv, ns::block_scaled_options{}.with_formats(ns::block_format_set{})),
                       doctest::Contains("no block format"), ns::error);
  CHECK_THROWS_WITH_AS(ns::cuda::check_block_scaled(ns::cuda::device_buffer(host.data(), ns::dtype::f32, {64}, nullptr, "h")),
                       doctest::Contains("host pointer"), ns::error);
}

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("nanscope_cuda_tests: skipped: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount returned 0");
    return 77;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess)
    std::printf("nanscope_cuda_tests: device 0: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount);
  doctest::Context ctx(argc, argv);
  return ctx.run();
}
