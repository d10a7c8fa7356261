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
