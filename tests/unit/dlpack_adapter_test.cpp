// nanscope tests — dlpack_adapter_test.cpp: the DLPack adapter (nanscope/adapters/dlpack.hpp).
//
// DLTensors are built by hand over byte buffers whose unused bytes are 0xFF (a NaN in every float format), so
// that reading outside the described elements changes the counts. Each case is checked three ways: through
// the adapter (nanscope::check on the DLPack struct), through a tensor_view the test builds itself from the
// same geometry, and against the independent reference of support/reference.hpp computed from the logical
// sequence of raw values the test laid out (no strides involved). Then every refusal: a nanscope::error whose
// message names the tensor and the problem.
#if __has_include(<dlpack/dlpack.h>)

#include "support/compare.hpp"
#include "support/reference.hpp"

#include "support/errors.hpp"
#include <nanscope/adapters/dlpack.hpp>
#include <nanscope/check.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using nanscope::dtype;

// A struct with DLPack 1.x's DLManagedTensorVersioned layout, declared here so that the versioned path is
// tested whatever <dlpack/dlpack.h> provides (Debian's 0.6 has no versioned struct).
struct test_pack_version {
  std::uint32_t major;
  std::uint32_t minor;
};
struct test_managed_versioned {
  test_pack_version version;
  void* manager_ctx;
  void (*deleter)(test_managed_versioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
constexpr std::uint64_t test_flag_read_only = 1;  // DLPACK_FLAG_BITMASK_READ_ONLY

struct dl_type_case {
  dtype type;
  std::uint8_t code;
  std::uint8_t bits;
  int needs_version;  // DLPack version (major * 100 + minor) that defines the code
};
const dl_type_case all_types[] = {
    {dtype::f64, 2, 64, 0},        {dtype::f32, 2, 32, 0},       {dtype::f16, 2, 16, 0},
    {dtype::bf16, 4, 16, 0},       {dtype::i8, 0, 8, 0},         {dtype::i16, 0, 16, 0},
    {dtype::i32, 0, 32, 0},        {dtype::i64, 0, 64, 0},       {dtype::u8, 1, 8, 0},
    {dtype::u16, 1, 16, 0},        {dtype::u32, 1, 32, 0},       {dtype::u64, 1, 64, 0},
    {dtype::boolean, 6, 8, 8},     {dtype::f8_e4m3fn, 10, 8, 101}, {dtype::f8_e5m2, 12, 8, 101},
};

/// Raw element values for a dtype: the special values of its format (zeros, subnormals, min normal, one,
/// max, infinities, NaNs, both signs) then pseudo-random bit patterns; integers and bool get random bits.
std::vector<std::uint64_t> raw_values(dtype t, std::size_t n, std::uint64_t seed) {
  std::vector<std::uint64_t> out;
  const std::size_t bits = nstest::ref_size_of(t) * 8;
  const std::uint64_t mask = bits == 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << bits) - 1;
  nstest::float_layout l{};
  if (nstest::layout_of(t, l)) {
    const std::uint64_t man = (std::uint64_t{1} << l.man_bits) - 1;
    const std::uint64_t exp_all = (std::uint64_t{1} << l.exp_bits) - 1;
    const std::uint64_t sign = std::uint64_t{1} << (bits - 1);
    const std::uint64_t bias = (exp_all >> 1);
    const std::uint64_t specials[] = {
        0,                                  // +0
        1,                                  // smallest subnormal
        man,                                // largest subnormal
        std::uint64_t{1} << l.man_bits,     // smallest normal
        bias << l.man_bits,                 // 1.0
        (bias << l.man_bits) | 1,           // just above 1
        l.fn ? ((exp_all << l.man_bits) | (man - 1)) : (((exp_all - 1) << l.man_bits) | man),  // max finite
        exp_all << l.man_bits,              // inf (e4m3fn: 256, a normal)
        (exp_all << l.man_bits) | man,      // NaN
        ((exp_all << l.man_bits) | 1),      // NaN with a small payload (e4m3fn: normal)
    };
    for (std::uint64_t s : specials) {
      out.push_back(s);
      out.push_back(s | sign);
    }
  }
  std::uint64_t x = seed;
  while (out.size() < n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::uint64_t r = (x >> 17) ^ (x << 23);
    if (t == dtype::boolean) r &= 1;
    out.push_back(r & mask);
  }
  out.resize(n);
  // Shuffle the specials through the tensor (deterministically) so that strides matter.
  for (std::size_t i = n; i > 1; --i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(out[i - 1], out[static_cast<std::size_t>((x >> 33) % i)]);
  }
  return out;
}

/// A byte buffer, the DLTensor over it and the view the test expects.
struct dl_case {
  std::vector<unsigned char> bytes;  // 0xFF wherever no element lives
  std::vector<std::int64_t> shape, strides;
  DLTensor t{};
  nanscope::tensor_view expected;  // built by the test
  std::vector<std::uint64_t> logical;
};

/// Lays `logical` out with the given geometry (strides in elements; empty: compact) after `offset_elems`
/// leading elements of padding, and describes it as a DLTensor with that byte_offset.
void build(dl_case& c, dtype t, DLDataType dl, std::vector<std::int64_t> shape, std::vector<std::int64_t> strides,
           std::size_t offset_elems, std::uint64_t seed, bool null_strides) {
  const std::size_t es = nstest::ref_size_of(t);
  c.shape = std::move(shape);
  const int rank = static_cast<int>(c.shape.size());
  std::vector<std::int64_t> eff = strides;
  if (null_strides) {
    eff.assign(static_cast<std::size_t>(rank), 0);
    std::int64_t s = 1;
    for (int i = rank - 1; i >= 0; --i) {
      eff[static_cast<std::size_t>(i)] = s;
      s *= c.shape[static_cast<std::size_t>(i)];
    }
  }
  std::uint64_t n = 1;
  for (auto d : c.shape) n *= static_cast<std::uint64_t>(d);
  std::int64_t span = 0;
  for (int i = 0; i < rank; ++i)
    if (c.shape[static_cast<std::size_t>(i)] > 0 && eff[static_cast<std::size_t>(i)] > 0)
      span += (c.shape[static_cast<std::size_t>(i)] - 1) * eff[static_cast<std::size_t>(i)];
  c.bytes.assign((offset_elems + static_cast<std::size_t>(span) + 2) * es, 0xFF);
  c.logical = raw_values(t, static_cast<std::size_t>(n), seed);
  // Write the values, then read the logical sequence back (with a zero stride, later writes win).
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<std::int64_t> idx(static_cast<std::size_t>(rank), 0);
    for (std::uint64_t k = 0; k < n; ++k) {
      std::int64_t off = 0;
      for (int d = 0; d < rank; ++d)
        if (c.shape[static_cast<std::size_t>(d)] > 1) off += idx[static_cast<std::size_t>(d)] * eff[static_cast<std::size_t>(d)];
      unsigned char* p = c.bytes.data() + (offset_elems + static_cast<std::size_t>(off)) * es;
      if (pass == 0) {
        std::memcpy(p, &c.logical[k], es);
      } else {
        c.logical[k] = 0;
        std::memcpy(&c.logical[k], p, es);
      }
      for (int d = rank - 1; d >= 0; --d) {
        if (++idx[static_cast<std::size_t>(d)] < c.shape[static_cast<std::size_t>(d)]) break;
        idx[static_cast<std::size_t>(d)] = 0;
      }
    }
  }
  c.strides = strides;
  c.t.data = c.bytes.data();
  c.t.device.device_type = kDLCPU;
  c.t.device.device_id = 0;
  c.t.ndim = rank;
  c.t.dtype = dl;
  c.t.shape = rank > 0 ? c.shape.data() : nullptr;
  c.t.strides = null_strides ? nullptr : c.strides.data();
  c.t.byte_offset = offset_elems * es;

  c.expected = nanscope::tensor_view{};
  c.expected.data = c.bytes.data() + offset_elems * es;
  c.expected.type = t;
  c.expected.rank = rank;
  for (int i = 0; i < rank; ++i) {
    c.expected.shape[i] = c.shape[static_cast<std::size_t>(i)];
    const std::int64_t st = eff[static_cast<std::size_t>(i)];
    c.expected.strides[i] = st < 0 ? 0 : st;  // a negative stride is only allowed where it is never applied
  }
}

struct geometry {
  const char* label;
  std::vector<std::int64_t> shape, strides;  // strides empty with null_strides
  std::size_t offset_elems;
  bool null_strides;
};
const geometry all_geometries[] = {
    {"compact, null strides", {3, 4, 5}, {}, 0, true},
    {"row-major strides", {3, 4, 5}, {20, 5, 1}, 0, false},
    {"column-major", {3, 4, 5}, {1, 3, 12}, 0, false},
    {"padded rows, byte offset", {5, 7}, {11, 1}, 3, false},
    {"every third column", {4, 6}, {18, 3}, 1, false},
    {"broadcast (stride 0)", {3, 8}, {0, 1}, 2, false},
    {"rank 0", {}, {}, 1, true},
    {"rank 1 stride 2", {33}, {2}, 5, false},
    {"extent 1 with negative stride", {1, 9}, {-4, 1}, 0, false},
    {"rank 8", {2, 1, 2, 3, 1, 2, 2, 2}, {}, 0, true},
};

void check_three_ways(const dl_case& c, const nanscope::health_result& via_adapter) {
  const nanscope::health_result via_view = nanscope::check(c.expected);
  CHECK(nstest::first_difference(via_adapter, via_view) == "");
  const nstest::ref_health ref = nstest::reference(c.expected.type, c.logical);
  nstest::expect_health(via_adapter, ref, c.expected, nanscope::check_mode::stats,
                        nstest::moment_tol(c.expected.type, nanscope::isa::automatic));
}

using nstest::error_of;

}  // namespace

TEST_CASE("dlpack: DLTensor of every dtype and geometry equals the core check and the reference") {
  std::uint64_t seed = 1;
  for (const auto& tc : all_types) {
    if (tc.needs_version > NANSCOPE_DLPACK_HEADER_VERSION()) continue;  // the versioned test covers them
    for (const auto& g : all_geometries) {
      CAPTURE(std::string(nanscope::name(tc.type)));
      CAPTURE(std::string(g.label));
      dl_case c;
      build(c, tc.type, DLDataType{tc.code, tc.bits, 1}, g.shape, g.strides, g.offset_elems, ++seed, g.null_strides);
      const nanscope::tensor_view v = nanscope::dlpack::view(c.t, "dl");
      CHECK(v.data == c.expected.data);
      CHECK(v.type == tc.type);
      CHECK(v.rank == c.expected.rank);
      CHECK(v.space == nanscope::memory_space::host);
      CHECK(std::string(v.name) == "dl");
      for (int i = 0; i < v.rank; ++i) {
        CHECK(v.shape[i] == c.expected.shape[i]);
        if (v.shape[i] > 1) CHECK(v.strides[i] == c.expected.strides[i]);
      }
      check_three_ways(c, nanscope::check(c.t));
    }
  }
}

TEST_CASE("dlpack: the data outside the described elements is never read") {
  // Control for the poisoned padding: the same buffer described as compact rows would count the 0xFF NaNs.
  dl_case c;
  build(c, dtype::f32, DLDataType{2, 32, 1}, {4, 3}, {8, 2}, 1, 99, false);
  const auto described = nanscope::check(c.t);
  DLTensor wide = c.t;
  std::vector<std::int64_t> wide_shape = {3, 8};
  wide.shape = wide_shape.data();
  wide.strides = nullptr;
  const auto all = nanscope::check(wide);
  CHECK(all.nan > described.nan);
}

TEST_CASE("dlpack: DLManagedTensor and pointers") {
  dl_case c;
  build(c, dtype::f16, DLDataType{2, 16, 1}, {6, 5}, {10, 2}, 4, 7, false);
  DLManagedTensor m{};
  m.dl_tensor = c.t;
  CHECK(nanscope::is_tensor<DLManagedTensor>::value);
  CHECK(nanscope::is_tensor<DLTensor>::value);
  check_three_ways(c, nanscope::check(m));
  check_three_ways(c, nanscope::check(nanscope::dlpack::view(&m, "m")));
  check_three_ways(c, nanscope::check(nanscope::dlpack::view(&c.t, "t")));
  CHECK(nanscope::to_view(m).data == c.expected.data);
  const DLManagedTensor* null_managed = nullptr;
  const DLTensor* null_tensor = nullptr;
  const std::string e1 = error_of([&] { (void)nanscope::dlpack::view(null_managed, "pm"); });
  CHECK(e1.find("'pm'") != std::string::npos);
  CHECK(e1.find("null DLManagedTensor pointer") != std::string::npos);
  const std::string e2 = error_of([&] { (void)nanscope::dlpack::view(null_tensor, "pt"); });
  CHECK(e2.find("'pt'") != std::string::npos);
  CHECK(e2.find("null DLTensor pointer") != std::string::npos);
}

TEST_CASE("dlpack: versioned managed tensors (a struct with DLPack 1.x's layout)") {
  static_assert(nanscope::detail::is_dlpack_versioned<test_managed_versioned>::value, "versioned layout");
  static_assert(!nanscope::detail::is_dlpack_versioned<DLManagedTensor>::value, "legacy struct is not versioned");
  CHECK(nanscope::is_tensor<test_managed_versioned>::value);
  std::uint64_t seed = 500;
  for (const auto& tc : all_types) {
    for (std::uint32_t minor : {0u, 1u, 3u}) {
      CAPTURE(std::string(nanscope::name(tc.type)));
      CAPTURE(minor);
      dl_case c;
      build(c, tc.type, DLDataType{tc.code, tc.bits, 1}, {5, 4}, {12, 3}, 2, ++seed, false);
      test_managed_versioned m{};
      m.version = {1, minor};
      m.flags = test_flag_read_only;  // read-only makes no difference to reading
      m.dl_tensor = c.t;
      const int known = 100 + static_cast<int>(minor) > NANSCOPE_DLPACK_HEADER_VERSION()
                            ? 100 + static_cast<int>(minor)
                            : NANSCOPE_DLPACK_HEADER_VERSION();
      if (tc.needs_version <= known) {
        check_three_ways(c, nanscope::check(m));
        check_three_ways(c, nanscope::check(nanscope::dlpack::view(&m, "vm")));
      } else {
        const std::string e = error_of([&] { (void)nanscope::dlpack::view(m, "vm"); });
        CHECK(e.find("'vm'") != std::string::npos);
        CHECK(e.find("is defined from DLPack 1.1") != std::string::npos);
      }
    }
  }
}

#if NANSCOPE_DLPACK_HEADER_VERSION() >= 100
TEST_CASE("dlpack: the header's DLManagedTensorVersioned") {
  dl_case c;
  build(c, dtype::f32, DLDataType{2, 32, 1}, {3, 3}, {}, 0, 3, true);
  DLManagedTensorVersioned m{};
  m.version.major = 1;
  m.version.minor = DLPACK_MINOR_VERSION;
  m.dl_tensor = c.t;
  check_three_ways(c, nanscope::check(m));
}
#endif

TEST_CASE("dlpack: codes newer than the header are refused on unversioned tensors") {
  for (const auto& tc : all_types) {
    if (tc.needs_version <= NANSCOPE_DLPACK_HEADER_VERSION()) continue;
    CAPTURE(std::string(nanscope::name(tc.type)));
    dl_case c;
    build(c, tc.type, DLDataType{tc.code, tc.bits, 1}, {4}, {}, 0, 1, true);
    const std::string e = error_of([&] { (void)nanscope::check(nanscope::dlpack::view(c.t, "old_header")); });
    CHECK(e.find("'old_header'") != std::string::npos);
    CHECK(e.find("is defined from DLPack") != std::string::npos);
    CHECK(e.find("newer than this tensor's DLPack") != std::string::npos);
  }
}

TEST_CASE("dlpack: devices") {
  dl_case c;
  build(c, dtype::f32, DLDataType{2, 32, 1}, {4, 4}, {}, 0, 11, true);
  SUBCASE("kDLCUDAHost is pinned host memory, read by the host check") {
    c.t.device = DLDevice{kDLCUDAHost, 0};
    const auto v = nanscope::dlpack::view(c.t, "pinned");
    CHECK(v.space == nanscope::memory_space::cuda_pinned);
    check_three_ways(c, nanscope::check(c.t));
  }
  SUBCASE("kDLCUDAManaged becomes a cuda_managed view") {
    c.t.device = DLDevice{kDLCUDAManaged, 1};
    const auto v = nanscope::dlpack::view(c.t, "managed");
    CHECK(v.space == nanscope::memory_space::cuda_managed);
    CHECK(v.device_id == 1);
  }
  SUBCASE("kDLCUDA becomes a cuda_device view, which the host check refuses") {
    c.t.device = DLDevice{kDLCUDA, 3};
    const auto v = nanscope::dlpack::view(c.t, "on_gpu");
    CHECK(v.space == nanscope::memory_space::cuda_device);
    CHECK(v.device_id == 3);
    const std::string e = error_of([&] { (void)nanscope::check(v); });
    CHECK(e.find("'on_gpu'") != std::string::npos);
    CHECK(e.find("CUDA device memory") != std::string::npos);
  }
  SUBCASE("other devices are refused") {
    c.t.device = DLDevice{kDLOpenCL, 0};
    const std::string e = error_of([&] { (void)nanscope::dlpack::view(c.t, "cl"); });
    CHECK(e.find("'cl'") != std::string::npos);
    CHECK(e.find("kDLOpenCL") != std::string::npos);
    c.t.device = DLDevice{kDLROCM, 0};
    const std::string e2 = error_of([&] { (void)nanscope::check(c.t); });
    CHECK(e2.find("'<unnamed>'") != std::string::npos);
    CHECK(e2.find("kDLROCM") != std::string::npos);
  }
}

TEST_CASE("dlpack: empty tensors, null data") {
  std::vector<std::int64_t> shape = {0, 5};
  DLTensor t{};
  t.data = nullptr;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 2;
  t.dtype = DLDataType{2, 32, 1};
  t.shape = shape.data();
  t.byte_offset = 64;
  const auto r = nanscope::check(t);
  CHECK(r.count == 0);
  CHECK(r.rank == 2);
  CHECK(r.shape[1] == 5);
  CHECK_FALSE(r.has_nonfinite());
}

TEST_CASE("dlpack: data + byte_offset at any alignment is read (issue 13 item 8)") {
  // f64 elements at every byte offset from an aligned base, compact and strided: the same as the reference
  std::uint64_t seed = 500;
  for (std::size_t off = 0; off < 8; ++off) {
    CAPTURE(off);
    const std::vector<std::uint64_t> raw = raw_values(dtype::f64, 37, ++seed);
    std::vector<std::uint64_t> store(2 * raw.size() + 2, ~std::uint64_t{0});
    auto* base = reinterpret_cast<unsigned char*>(store.data());
    for (std::size_t k = 0; k < raw.size(); ++k) std::memcpy(base + off + 16 * k, &raw[k], 8);  // stride 2
    std::vector<std::int64_t> shape = {static_cast<std::int64_t>(raw.size())}, strides = {2};
    DLTensor t{};
    t.data = base;
    t.byte_offset = off;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = DLDataType{2, 64, 1};
    t.shape = shape.data();
    t.strides = strides.data();
    const auto r = nanscope::check(t);
    nanscope::tensor_view v = nanscope::dlpack::view(t, "unaligned");
    CHECK(v.data == base + off);
    nstest::expect_health(r, nstest::reference(dtype::f64, raw), v, nanscope::check_mode::stats,
                          nstest::tol_double_accumulation);
  }
}

TEST_CASE("dlpack: empty tensors whose compact strides overflow int64; impossible shapes (issue 13 item 7)") {
  const std::int64_t p62 = std::int64_t{1} << 62;
  std::vector<std::int64_t> empty_shape = {0, p62, p62}, huge_shape = {p62, p62};
  DLTensor t{};
  t.data = nullptr;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 3;
  t.dtype = DLDataType{2, 32, 1};
  t.shape = empty_shape.data();
  const auto r = nanscope::check(t);
  CHECK(r.count == 0);
  CHECK(r.shape[2] == p62);
  float x = 0.0f;
  t.data = &x;
  t.ndim = 2;
  t.shape = huge_shape.data();
  const std::string e = error_of([&] { (void)nanscope::dlpack::view(t, "huge"); });
  CHECK(e.find("nanscope: tensor 'huge': shape (4611686018427387904, 4611686018427387904) has more elements") !=
        std::string::npos);
}

TEST_CASE("dlpack: every refusal names the tensor and the problem") {
  float buf[64] = {};
  std::vector<std::int64_t> shape = {4, 4}, strides = {4, 1};
  auto base = [&] {
    DLTensor t{};
    t.data = buf;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 2;
    t.dtype = DLDataType{2, 32, 1};
    t.shape = shape.data();
    t.strides = strides.data();
    return t;
  };
  struct bad {
    const char* what;
    std::function<void(DLTensor&)> change;
    const char* expect;
  };
  std::vector<std::int64_t> nine(9, 1), neg_stride = {4, -1}, neg_extent = {4, -2};
  const std::vector<bad> cases = {
      {"complex", [](DLTensor& t) { t.dtype = DLDataType{5, 64, 1}; }, "complex tensors are not read"},
      {"lanes", [](DLTensor& t) { t.dtype = DLDataType{2, 32, 4}; }, "lanes != 1"},
      {"int4", [](DLTensor& t) { t.dtype = DLDataType{0, 4, 1}; }, "kDLInt with 4 bits is not supported"},
      {"uint1", [](DLTensor& t) { t.dtype = DLDataType{1, 1, 1}; }, "kDLUInt with 1 bits is not supported"},
      {"float8 code", [](DLTensor& t) { t.dtype = DLDataType{2, 8, 1}; }, "kDLFloat with 8 bits is not supported"},
      {"float128", [](DLTensor& t) { t.dtype = DLDataType{2, 128, 1}; }, "kDLFloat with 128 bits"},
      {"bfloat32", [](DLTensor& t) { t.dtype = DLDataType{4, 32, 1}; }, "kDLBfloat has 16 bits"},
      {"opaque", [](DLTensor& t) { t.dtype = DLDataType{3, 64, 1}; }, "opaque handle"},
      {"unknown code", [](DLTensor& t) { t.dtype = DLDataType{42, 32, 1}; }, "unknown DLPack type code 42"},
      {"negative stride", [&](DLTensor& t) { t.strides = neg_stride.data(); }, "negative stride -1 in dimension 1"},
      {"ndim 9", [&](DLTensor& t) { t.ndim = 9; t.shape = nine.data(); t.strides = nullptr; }, "ndim 9"},
      {"ndim -1", [](DLTensor& t) { t.ndim = -1; }, "ndim -1"},
      {"null shape", [](DLTensor& t) { t.shape = nullptr; }, "null shape"},
      {"negative extent", [&](DLTensor& t) { t.shape = neg_extent.data(); }, "negative extent -2 in dimension 1"},
      {"null data", [](DLTensor& t) { t.data = nullptr; }, "null data and 16 elements"},
      {"device", [](DLTensor& t) { t.device = DLDevice{kDLVulkan, 0}; }, "kDLVulkan"},
  };
  for (const auto& b : cases) {
    CAPTURE(std::string(b.what));
    DLTensor t = base();
    (void)nanscope::check(nanscope::dlpack::view(t, "good"));  // the base is fine
    b.change(t);
    const std::string e = error_of([&] { (void)nanscope::check(nanscope::dlpack::view(t, "bad_tensor")); });
    CAPTURE(e);
    CHECK(e.find("nanscope: tensor 'bad_tensor'") != std::string::npos);
    CHECK(e.find(b.expect) != std::string::npos);
  }
}

TEST_CASE("dlpack: bool needs 8 bits; versioned tensors of an unknown major version are refused") {
  std::uint8_t bytes[8] = {0, 1, 1, 0, 1, 0, 0, 1};
  std::vector<std::int64_t> shape = {8}, half_shape = {4};
  test_managed_versioned m{};
  m.version = {1, 0};
  m.dl_tensor.data = bytes;
  m.dl_tensor.device = DLDevice{kDLCPU, 0};
  m.dl_tensor.ndim = 1;
  m.dl_tensor.dtype = DLDataType{6, 8, 1};
  m.dl_tensor.shape = shape.data();
  const auto r = nanscope::check(m);
  CHECK(r.type == dtype::boolean);
  CHECK(r.count == 8);
  m.dl_tensor.dtype = DLDataType{6, 16, 1};
  m.dl_tensor.shape = half_shape.data();
  std::string e = error_of([&] { (void)nanscope::dlpack::view(m, "flags"); });
  CHECK(e.find("'flags'") != std::string::npos);
  CHECK(e.find("kDLBool with 16 bits") != std::string::npos);
  CHECK(e.find("bool as one byte") != std::string::npos);
  m.dl_tensor.dtype = DLDataType{6, 8, 1};
  m.dl_tensor.shape = shape.data();
  m.version = {2, 0};
  e = error_of([&] { (void)nanscope::dlpack::view(m, "future"); });
  CHECK(e.find("'future'") != std::string::npos);
  CHECK(e.find("DLPack 2.0") != std::string::npos);
  CHECK(e.find("major version 1") != std::string::npos);
  const test_managed_versioned* null_versioned = nullptr;
  e = error_of([&] { (void)nanscope::dlpack::view(null_versioned, "nv"); });
  CHECK(e.find("null DLManagedTensorVersioned pointer") != std::string::npos);
}

TEST_CASE("dlpack: fp8 codes against the reference (versioned 1.1)") {
  // Every e4m3fn and e5m2 bit pattern once, as a [16, 16] tensor read through a transposed geometry.
  for (const auto& tc : all_types) {
    if (tc.type != dtype::f8_e4m3fn && tc.type != dtype::f8_e5m2) continue;
    CAPTURE(std::string(nanscope::name(tc.type)));
    std::vector<std::uint8_t> mem(256);
    for (int i = 0; i < 256; ++i) mem[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i);
    std::vector<std::int64_t> shape = {16, 16}, strides = {1, 16};
    test_managed_versioned m{};
    m.version = {1, 1};
    m.dl_tensor.data = mem.data();
    m.dl_tensor.device = DLDevice{kDLCPU, 0};
    m.dl_tensor.ndim = 2;
    m.dl_tensor.dtype = DLDataType{tc.code, 8, 1};
    m.dl_tensor.shape = shape.data();
    m.dl_tensor.strides = strides.data();
    std::vector<std::uint64_t> logical;
    for (int r = 0; r < 16; ++r)
      for (int col = 0; col < 16; ++col) logical.push_back(static_cast<std::uint64_t>(col * 16 + r));
    nanscope::tensor_view v;
    v.data = mem.data();
    v.type = tc.type;
    v.rank = 2;
    v.shape[0] = v.shape[1] = 16;
    v.strides[0] = 1;
    v.strides[1] = 16;
    const auto r = nanscope::check(m);
    CHECK(nstest::first_difference(r, nanscope::check(v)) == "");
    nstest::expect_health(r, nstest::reference(tc.type, logical), v, nanscope::check_mode::stats,
                          nstest::moment_tol(tc.type, nanscope::isa::automatic));
    CHECK(r.nan == (tc.type == dtype::f8_e4m3fn ? 2u : 6u));
  }
}

#endif  // __has_include(<dlpack/dlpack.h>)
