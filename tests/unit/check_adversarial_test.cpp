// nanscope tests — check_adversarial_test.cpp: random and adversarial f32 / f64 tensors (NaN payloads,
// signalling NaNs, -0, subnormals, +-max, +-inf, all-NaN, all-inf, all-zero, empty, one element, lengths
// 0..100, around the 8192-element chunk and the 131072-element segment, a few million, ReLU-like data)
// against the independent reference, for every check_mode, contiguous and hand-built strided views, 1/2/4
// threads and every ISA. Thread counts must give bit-identical results; a strided view must give the same
// result as a contiguous copy of its logical data (bit for bit; for permuted layouts such as transposes the
// general cases compare every exact field and the "strided: permuted" case holds mean/std/m2 to bit identity,
// so that one behaviour shows up as one failing test case).
#include "support/compare.hpp"
#include "support/reference.hpp"
#include "support/views.hpp"

#include <nanscope/check.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

using nanscope::check_mode;
using nanscope::dtype;
using nanscope::isa;
using namespace nstest;

template <class T>
T from_u(std::uint64_t b) {
  T x;
  if (sizeof(T) == 4) {
    const auto b32 = static_cast<std::uint32_t>(b);
    std::memcpy(&x, &b32, 4);
  } else {
    std::memcpy(&x, &b, sizeof(T));
  }
  return x;
}
template <class T>
constexpr dtype dtype_for() {
  return sizeof(T) == 4 ? dtype::f32 : dtype::f64;
}

template <class T>
struct pools;
template <>
struct pools<float> {
  static std::vector<std::uint64_t> nans() {
    return {0x7FC00000u, 0xFFC00000u, 0x7F800001u /*sNaN*/, 0x7FBFFFFFu /*sNaN*/, 0xFFFFFFFFu, 0x7FC12345u,
            0xFF800001u /*-sNaN*/};
  }
  static std::vector<std::uint64_t> specials() {
    std::vector<std::uint64_t> s = nans();
    const std::uint64_t more[] = {0x00000000u, 0x80000000u,                            // +-0
                                  0x00000001u, 0x80000001u, 0x007FFFFFu, 0x807FFFFFu,  // subnormals
                                  0x00012345u, 0x00800000u, 0x80800000u,               // min normal
                                  0x7F7FFFFFu, 0xFF7FFFFFu,                            // +-max
                                  0x7F800000u, 0xFF800000u,                            // +-inf
                                  0x3F800000u, 0xBF800000u};
    s.insert(s.end(), std::begin(more), std::end(more));
    return s;
  }
  static std::uint64_t random_bits(rng& g) { return g.next() & 0xFFFFFFFFu; }
  static std::uint64_t random_subnormal(rng& g) {
    return (g.next() & 0x80000000u) | (1 + g.below(0x007FFFFFu));
  }
};
template <>
struct pools<double> {
  static std::vector<std::uint64_t> nans() {
    return {0x7FF8000000000000ull, 0xFFF8000000000000ull, 0x7FF0000000000001ull /*sNaN*/,
            0x7FF7FFFFFFFFFFFFull /*sNaN*/, 0xFFFFFFFFFFFFFFFFull, 0x7FF8000000012345ull, 0xFFF0000000000001ull};
  }
  // +-DBL_MAX is not in this pool: a double m2 cannot hold its square; see the dedicated test case below.
  static std::vector<std::uint64_t> specials() {
    std::vector<std::uint64_t> s = nans();
    const std::uint64_t more[] = {0x0ull, 0x8000000000000000ull,                        // +-0
                                  0x1ull, 0x8000000000000001ull, 0x000FFFFFFFFFFFFFull,  // subnormals
                                  0x800FFFFFFFFFFFFFull, 0x0010000000000000ull,          // min normal
                                  0x8010000000000000ull, 0x7FF0000000000000ull,          // +-inf
                                  0xFFF0000000000000ull, 0x3FF0000000000000ull, 0xBFF0000000000000ull,
                                  0x47EFFFFFE0000000ull, 0xC7EFFFFFE0000000ull};  // +-FLT_MAX as doubles
    s.insert(s.end(), std::begin(more), std::end(more));
    return s;
  }
  // Random bit patterns whose finite magnitudes stay within [2^-480, 2^480] (zero, subnormals, inf and NaN
  // keep their natural frequencies): squares of differences then fit a double m2.
  static std::uint64_t random_bits(rng& g) {
    std::uint64_t b = g.next();
    const std::uint64_t e = (b >> 52) & 0x7FF;
    if (e != 0 && e != 0x7FF) {
      const std::uint64_t ne = 1023 - 480 + (e % 961);
      b = (b & ~(0x7FFull << 52)) | (ne << 52);
    }
    return b;
  }
  static std::uint64_t random_subnormal(rng& g) {
    return (g.next() & 0x8000000000000000ull) | (1 + g.below(0x000FFFFFFFFFFFFFull));
  }
};

enum class kind {
  normal,
  random_bits,
  specials_10pct,
  specials_sparse,
  relu,
  all_nan,
  all_pos_inf,
  all_neg_inf,
  all_pos_zero,
  mixed_zeros,
  subnormal_mix,
  constant,
  late_nonfinite,
  mid_inf,
};
const kind all_kinds[] = {kind::normal,       kind::random_bits, kind::specials_10pct, kind::specials_sparse,
                          kind::relu,         kind::all_nan,     kind::all_pos_inf,    kind::all_neg_inf,
                          kind::all_pos_zero, kind::mixed_zeros, kind::subnormal_mix,  kind::constant,
                          kind::late_nonfinite, kind::mid_inf};
const char* kind_name(kind k) {
  switch (k) {
    case kind::normal: return "normal";
    case kind::random_bits: return "random_bits";
    case kind::specials_10pct: return "specials_10pct";
    case kind::specials_sparse: return "specials_sparse";
    case kind::relu: return "relu";
    case kind::all_nan: return "all_nan";
    case kind::all_pos_inf: return "all_pos_inf";
    case kind::all_neg_inf: return "all_neg_inf";
    case kind::all_pos_zero: return "all_pos_zero";
    case kind::mixed_zeros: return "mixed_zeros";
    case kind::subnormal_mix: return "subnormal_mix";
    case kind::constant: return "constant";
    case kind::late_nonfinite: return "late_nonfinite";
    case kind::mid_inf: return "mid_inf";
  }
  return "?";
}

template <class T>
std::vector<T> generate(kind k, std::size_t n, rng& g) {
  using P = pools<T>;
  std::vector<T> v(n);
  const std::vector<std::uint64_t> specials = P::specials();
  const std::vector<std::uint64_t> nans = P::nans();
  auto normal = [&] { return static_cast<T>(g.normal()); };
  for (std::size_t i = 0; i < n; ++i) {
    switch (k) {
      case kind::normal: v[i] = normal(); break;
      case kind::random_bits: v[i] = from_u<T>(P::random_bits(g)); break;
      case kind::specials_10pct:
        v[i] = g.below(10) == 0 ? from_u<T>(specials[g.below(specials.size())]) : normal();
        break;
      case kind::specials_sparse:
        v[i] = g.below(4000) == 0 ? from_u<T>(specials[g.below(specials.size())]) : static_cast<T>(3.0 + g.normal());
        break;
      case kind::relu: {
        const double z = g.normal();
        v[i] = z > 0 ? static_cast<T>(z) : T(0);
        break;
      }
      case kind::all_nan: v[i] = from_u<T>(nans[g.below(nans.size())]); break;
      case kind::all_pos_inf: v[i] = from_u<T>(sizeof(T) == 4 ? 0x7F800000ull : 0x7FF0000000000000ull); break;
      case kind::all_neg_inf: v[i] = from_u<T>(sizeof(T) == 4 ? 0xFF800000ull : 0xFFF0000000000000ull); break;
      case kind::all_pos_zero: v[i] = T(0); break;
      case kind::mixed_zeros: v[i] = from_u<T>((g.next() & 1) ? (sizeof(T) == 4 ? 0x80000000ull : 0x8000000000000000ull) : 0); break;
      case kind::subnormal_mix:  // subnormals with some normal values (first one included) so that the
                                 // squared deviations stay in the double range (all-subnormal f64 moments
                                 // are covered by accuracy_test.cpp)
        v[i] = (i == 0 || g.below(8) == 0) ? normal() : from_u<T>(P::random_subnormal(g));
        break;
      case kind::constant: v[i] = static_cast<T>(1.5); break;
      case kind::late_nonfinite:
      case kind::mid_inf: v[i] = static_cast<T>(-2.0 + 0.5 * g.normal()); break;
    }
  }
  if (k == kind::late_nonfinite && n > 0) v[n - 1] = from_u<T>(nans[(n / 7) % nans.size()]);
  if (k == kind::mid_inf && n > 0) {
    v[n / 2] = from_u<T>(sizeof(T) == 4 ? 0xFF800000ull : 0xFFF0000000000000ull);
    if (n > 2) v[n - 2] = from_u<T>(sizeof(T) == 4 ? 0x7F800000ull : 0x7FF0000000000000ull);
  }
  return v;
}

/// Poison for memory a strided view must not read.
template <class T>
std::vector<T> poison() {
  if (sizeof(T) == 4) return {from_u<T>(0x7FC0DEADu), from_u<T>(0xFF800000u), from_u<T>(0x7F7FFFFFu), from_u<T>(0u)};
  return {from_u<T>(0x7FF80000DEADull), from_u<T>(0xFFF0000000000000ull), from_u<T>(0x7FEFFFFFFFFFFFFFull),
          from_u<T>(0ull)};
}

/// Checks one view in the given modes on every ISA: against the reference; thread counts bit-identical to the
/// single-threaded result; and, when `twin` is given (a contiguous view of the same logical data and shape),
/// bit-identical to the twin's result.
/// first_difference() ignoring mean, std and m2, and the sign of a zero min/max (the reference here takes -0
/// and +0 as equal; nanscope orders -0 below +0 on every kernel, which kernel_zero_test checks).
std::string first_exact_difference(nanscope::health_result a, nanscope::health_result b) {
  a.mean = b.mean = 0;
  a.std = b.std = 0;
  a.m2 = b.m2 = 0;
  if (is_zero(a.min) && is_zero(b.min)) a.min = b.min = 0;
  if (is_zero(a.max) && is_zero(b.max)) a.max = b.max = 0;
  return first_difference(a, b);
}

/// `twin_moments`: whether mean/std/m2 must also be bit-identical to the twin's (see the "permuted views"
/// test case: layouts the library reads in memory order are compared field by field there).
void verify(const nanscope::tensor_view& v, const ref_health& ref, const std::vector<check_mode>& modes,
            const std::vector<unsigned>& extra_threads, const nanscope::tensor_view* twin, bool twin_moments = true) {
  for (isa i : all_isas) {
    for (check_mode m : modes) {
      INFO("isa=", std::string(nanscope::name(i)));
      const nanscope::health_result r1 = nanscope::check(v, opts(m, i, 1));
      expect_health(r1, ref, v, m, moment_tol(v.type, i));
      for (unsigned th : extra_threads) {
        INFO("threads=", th, " mode=", std::string(nanscope::name(m)));
        const nanscope::health_result rn = nanscope::check(v, opts(m, i, th));
        CHECK(first_difference(r1, rn) == "");
      }
      if (twin != nullptr) {
        INFO("strided vs contiguous copy, mode=", std::string(nanscope::name(m)));
        const nanscope::health_result rc = nanscope::check(*twin, opts(m, i, 1));
        if (twin_moments)
          CHECK(first_difference(r1, rc) == "");
        else
          CHECK(first_exact_difference(r1, rc) == "");
      }
    }
  }
}

std::vector<check_mode> every_mode() { return std::vector<check_mode>(std::begin(all_modes), std::end(all_modes)); }

std::int64_t divisor_at_most(std::int64_t n, std::int64_t cap) {
  for (std::int64_t d = cap; d > 1; --d)
    if (n % d == 0) return d;
  return 1;
}

/// The strided geometries used for a logical length n (all of them reach exactly n elements).
std::vector<layout> layouts_for(std::int64_t n) {
  std::vector<layout> ls;
  ls.push_back(make_layout("every other element", {n}, {2}));
  const std::int64_t r = divisor_at_most(n, 64), c = n == 0 ? 0 : n / (r == 0 ? 1 : r);
  ls.push_back(make_layout("transposed 2-D", {r, c}, {1, r}));
  ls.back().permuted = r > 1 && c > 1;
  ls.push_back(make_layout("2-D padded rows", {r, c}, {c + 3, 1}));
  if (n % 2 == 0)
    ls.push_back(make_layout("rank 3, inner stride 3", {2, 1, n / 2}, {(n / 2) * 3 + 5, 7, 3}));
  else
    ls.push_back(make_layout("rank 3, inner stride 3", {1, 1, n}, {11, 7, 3}));
  const std::int64_t a = divisor_at_most(n, 5), b = n == 0 ? 0 : n / (a == 0 ? 1 : a);
  const std::int64_t c2 = divisor_at_most(b, 3), b2 = b == 0 ? 0 : b / (c2 == 0 ? 1 : c2);
  // rank 3 permuted (outer and inner swapped) with gaps: memory is b2 x c2 x a with padding
  ls.push_back(make_layout("rank 3 permuted", {a, c2, b2}, {1, a * b2 + 1, a}));
  ls.back().permuted = true;
  ls.push_back(make_layout("unit dims with odd strides", {1, n, 1}, {1000003, 1, 17}));
  return ls;
}

template <class T>
void run_contiguous_and_strided(kind k, std::size_t n, bool with_strided, std::uint64_t seed,
                                const std::vector<check_mode>& modes = every_mode(),
                                std::vector<unsigned> threads = {2u, 4u}) {
  rng g(seed);
  const std::vector<T> data = generate<T>(k, n, g);
  const dtype t = dtype_for<T>();
  INFO("dtype=", std::string(nanscope::name(t)), " data=", std::string(kind_name(k)), " n=", n);
  const ref_health ref = reference(t, raw_of(data));
  // sanity of the generator for the kinds whose content is known
  if (k == kind::all_nan) REQUIRE(ref.nan == n);
  if (k == kind::late_nonfinite && n > 0) REQUIRE(ref.first_nonfinite == static_cast<std::int64_t>(n - 1));

  const nanscope::tensor_view flat = nanscope::tensor_view::flat(data.data(), t, static_cast<std::int64_t>(n));
  if (n <= 131072) threads.clear();  // one segment: nothing to split
  {
    INFO("layout=contiguous");
    verify(flat, ref, modes, threads, nullptr);
  }
  if (!with_strided) return;
  for (const layout& l : layouts_for(static_cast<std::int64_t>(n))) {
    INFO("layout=", l.label);
    REQUIRE(l.numel() == n);
    const strided_tensor<T> st = scatter(data, t, l, poison<T>());
    const nanscope::tensor_view twin = contiguous_like(data.data(), t, l);
    verify(st.view, ref, modes, {}, &twin, !l.permuted);
  }
}

}  // namespace

TEST_CASE("adversarial: every length 0..100, every data kind, mode and ISA, strided views") {
  const std::size_t strided_lengths[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 47, 63, 64, 65, 100};
  for (std::size_t n = 0; n <= 100; ++n) {
    bool strided = false;
    for (std::size_t s : strided_lengths) strided = strided || s == n;
    for (kind k : all_kinds) {
      run_contiguous_and_strided<float>(k, n, strided, 1000 + n * 31 + static_cast<std::size_t>(k));
      run_contiguous_and_strided<double>(k, n, strided, 5000 + n * 31 + static_cast<std::size_t>(k));
    }
  }
}

TEST_CASE("adversarial: lengths around SIMD blocks and the 8192-element chunk") {
  const std::size_t lengths[] = {127, 128, 129, 255, 256, 257, 1000, 4097, 8191, 8192, 8193, 16385};
  for (std::size_t n : lengths)
    for (kind k : all_kinds) {
      const bool strided = k == kind::specials_10pct || k == kind::random_bits || k == kind::late_nonfinite;
      run_contiguous_and_strided<float>(k, n, strided, 77 + n + static_cast<std::size_t>(k));
      run_contiguous_and_strided<double>(k, n, strided, 99 + n + static_cast<std::size_t>(k));
    }
}

TEST_CASE("adversarial: lengths around the 131072-element segment, 1/2/4 threads bit-identical") {
  const std::size_t lengths[] = {131071, 131072, 131073};
  const kind kinds[] = {kind::random_bits, kind::specials_sparse, kind::relu, kind::late_nonfinite, kind::mid_inf};
  for (std::size_t n : lengths)
    for (kind k : kinds) {
      const bool strided = n == 131073 && (k == kind::specials_sparse || k == kind::late_nonfinite);
      run_contiguous_and_strided<float>(k, n, strided, 3 + n + static_cast<std::size_t>(k));
      run_contiguous_and_strided<double>(k, n, strided, 5 + n + static_cast<std::size_t>(k));
    }
}

TEST_CASE("adversarial: a few million elements, 1/2/4 threads bit-identical to each other and exact") {
  // NANSCOPE_TEST_QUICK (sanitizer builds): 300k elements, still several segments.
  const std::size_t n = scaled(2100003, 300007);
  const kind kinds[] = {kind::specials_sparse, kind::relu, kind::late_nonfinite};
  const std::vector<check_mode> modes = {check_mode::curt_health, check_mode::full_health, check_mode::stats};
  for (kind k : kinds) {
    run_contiguous_and_strided<float>(k, n, false, 11 + static_cast<std::size_t>(k), modes, {2u});
    run_contiguous_and_strided<double>(k, n, false, 13 + static_cast<std::size_t>(k), modes, {2u});
  }
  // one large strided case: every other element
  rng g(17);
  const std::vector<float> data = generate<float>(kind::specials_sparse, n, g);
  const layout l = make_layout("every other element", {static_cast<std::int64_t>(n)}, {2});
  const strided_tensor<float> st = scatter(data, dtype::f32, l, poison<float>());
  const nanscope::tensor_view twin = contiguous_like(data.data(), dtype::f32, l);
  const ref_health ref = reference(dtype::f32, raw_of(data));
  verify(st.view, ref, {check_mode::curt_health, check_mode::full_health, check_mode::stats}, {2u}, &twin);
}

TEST_CASE("adversarial: the first non-finite value is found in every mode and thread count, wherever it is") {
  // One NaN or inf planted at positions around group/chunk/segment boundaries of a large finite tensor;
  // curt_health may stop early, so earlier segments must still be searched first.
  const std::size_t n = 3 * 131072 + 77;
  std::vector<float> data(n);
  rng g(23);
  for (float& x : data) x = static_cast<float>(g.normal());
  const std::size_t positions[] = {0, 1, 15, 16, 8191, 8192, 131071, 131072, 131073, 262143, 262144, n - 1};
  for (std::size_t pos : positions) {
    for (int variant = 0; variant < 2; ++variant) {
      std::vector<float> d = data;
      d[pos] = variant == 0 ? qnan_f() : neg_inf_f();
      if (pos + 5000 < n) d[pos + 5000] = pos_inf_f();  // a later one must not win
      if (pos + 140000 < n) d[pos + 140000] = qnan_f();  // nor one in a later segment
      CAPTURE(pos);
      CAPTURE(variant);
      const nanscope::tensor_view v = nanscope::tensor_view::flat(d.data(), dtype::f32, static_cast<std::int64_t>(n));
      for (isa i : all_isas)
        for (check_mode m : {check_mode::curt_health, check_mode::concise_health, check_mode::full_health}) {
          for (unsigned th : {1u, 2u, 4u}) {
            const nanscope::health_result r = nanscope::check(v, opts(m, i, th));
            CHECK(r.first_nonfinite == static_cast<std::int64_t>(pos));
            CHECK(r.any_nonfinite);
          }
        }
    }
  }
}

// A view that is a permutation of a dense layout (a transpose, Eigen's column-major storage) is read in memory
// order at full speed. Counts, extrema and first_nonfinite (re-found in logical order) are then identical to a
// contiguous copy of the logical data; mean, std and m2 are summed in a different order, so they agree to
// rounding, not bit for bit: 1e-12 where values are summed in double (f64, the scalar kernel), 2e-6 where the
// SIMD kernels sum f32 lanes in f32 over short runs. Documented in docs/concepts.md.
namespace {
void check_permuted_matches(const nanscope::health_result& a, const nanscope::health_result& b, double tol) {
  nanscope::health_result a2 = a, b2 = b;
  a2.mean = b2.mean = 0.0;
  a2.std = b2.std = 0.0;
  a2.m2 = b2.m2 = 0.0L;
  CHECK(first_difference(a2, b2) == "");
  CHECK(close_to(a.mean, b.mean, tol, std::fabs(b.std)));
  CHECK(close_to(a.std, b.std, tol, b.std));
}
}  // namespace

TEST_CASE("strided: permuted (transposed) views match a contiguous copy (moments to rounding)") {
  struct shape2 {
    std::int64_t rows, cols;
  };
  const shape2 shapes[] = {{37, 11}, {64, 128}, {3, 5000}, {300, 300}, {2, 70000}};
  for (const shape2& sh : shapes) {
    const std::int64_t n = sh.rows * sh.cols;
    rng g(static_cast<std::uint64_t>(n));
    const std::vector<float> f = generate<float>(kind::specials_sparse, static_cast<std::size_t>(n), g);
    const std::vector<double> d = generate<double>(kind::normal, static_cast<std::size_t>(n), g);
    const layout l = make_layout("transposed 2-D", {sh.rows, sh.cols}, {1, sh.rows});
    const strided_tensor<float> sf = scatter(f, dtype::f32, l, poison<float>());
    const strided_tensor<double> sd = scatter(d, dtype::f64, l, poison<double>());
    const nanscope::tensor_view tf = contiguous_like(f.data(), dtype::f32, l);
    const nanscope::tensor_view td = contiguous_like(d.data(), dtype::f64, l);
    for (isa i : all_isas)
      for (unsigned th : {1u, 2u}) {
        INFO("shape ", sh.rows, "x", sh.cols, " isa=", std::string(nanscope::name(i)), " threads=", th);
        check_permuted_matches(nanscope::check(sf.view, opts(check_mode::stats, i, th)),
                               nanscope::check(tf, opts(check_mode::stats, i, th)), i == isa::scalar ? 1e-12 : 2e-6);
        check_permuted_matches(nanscope::check(sd.view, opts(check_mode::stats, i, th)),
                               nanscope::check(td, opts(check_mode::stats, i, th)), 1e-12);
      }
  }
}

TEST_CASE("adversarial: broadcast views (stride 0) match the reference and a materialised copy") {
  for (int which = 0; which < 2; ++which) {
    rng g(31 + static_cast<std::uint64_t>(which));
    const std::vector<float> base_f = generate<float>(kind::specials_10pct, 257, g);
    const std::vector<double> base_d = generate<double>(kind::specials_10pct, 257, g);
    const layout layouts[] = {make_layout("rows broadcast", {5, 257}, {0, 1}),
                              make_layout("columns broadcast", {257, 3}, {1, 0}),
                              make_layout("scalar broadcast to 2-D", {40, 33}, {0, 0}),
                              make_layout("rank 3 middle broadcast", {1, 64, 4}, {0, 0, 1})};
    for (const layout& l : layouts) {
      INFO("layout=", l.label);
      auto run = [&](const auto& base, dtype t) {
        using T = typename std::decay_t<decltype(base)>::value_type;
        const nanscope::tensor_view v = make_view(base.data(), t, l);
        const std::vector<std::uint64_t> logical = logical_raw(v);
        std::vector<T> copy(logical.size());
        for (std::size_t i = 0; i < copy.size(); ++i) copy[i] = from_u<T>(logical[i]);
        const nanscope::tensor_view twin = contiguous_like(copy.data(), t, l);
        verify(v, reference(t, logical), every_mode(), {}, &twin);
      };
      run(base_f, dtype::f32);
      run(base_d, dtype::f64);
    }
  }
}

TEST_CASE("adversarial: rank-0 views and views with a zero extent") {
  const float one[] = {-0.0f};
  nanscope::tensor_view scalar;
  scalar.data = one;
  scalar.type = dtype::f32;
  scalar.rank = 0;
  const ref_health ref = reference(scalar);
  REQUIRE(ref.count == 1);
  verify(scalar, ref, every_mode(), {}, nullptr);

  const double nanv[] = {qnan()};
  nanscope::tensor_view scalar_nan;
  scalar_nan.data = nanv;
  scalar_nan.type = dtype::f64;
  verify(scalar_nan, reference(scalar_nan), every_mode(), {}, nullptr);

  // zero extents: nothing is read, even through a null pointer
  const layout empties[] = {make_layout("0 x 5", {0, 5}, {5, 1}), make_layout("3 x 0 x 2", {3, 0, 2}, {0, 2, 1})};
  for (const layout& l : empties) {
    INFO("layout=", l.label);
    const nanscope::tensor_view v = make_view(static_cast<const float*>(nullptr), dtype::f32, l);
    const ref_health r0 = reference(dtype::f32, {});
    verify(v, r0, every_mode(), {2u}, nullptr);
  }
}

TEST_CASE("adversarial: f64 +-DBL_MAX among ordinary values (exact fields, std of a representable spread)") {
  // Counts and extrema must be exact. The true unbiased std of these tensors is a finite double (DBL_MAX / sqrt(n)
  // order), so the reference expects it; m2 itself exceeds the double range and must read +inf.
  const std::size_t lengths[] = {2, 3, 16, 17, 100, 1000};
  for (std::size_t n : lengths) {
    rng g(41 + n);
    std::vector<double> d(n);
    for (double& x : d) x = g.normal();
    d[0] = f64_from_bits(0x7FEFFFFFFFFFFFFFull);
    d[n - 1] = f64_from_bits(0xFFEFFFFFFFFFFFFFull);
    CAPTURE(n);
    const nanscope::tensor_view v = nanscope::tensor_view::flat(d.data(), dtype::f64, static_cast<std::int64_t>(n));
    verify(v, reference(v), every_mode(), {}, nullptr);
  }
}

TEST_CASE("adversarial: integer and bool tensors give the count only, in every mode") {
  const std::vector<std::int32_t> ints = {1, -2, 3, 0, 2147483647};
  const std::vector<std::uint8_t> bytes(1000, 255);
  const bool flags[3] = {true, false, true};
  for (check_mode m : all_modes) {
    for (isa i : all_isas) {
      INFO("mode=", std::string(nanscope::name(m)), " isa=", std::string(nanscope::name(i)));
      const nanscope::health_result a = nanscope::check(ints, opts(m, i, 1));
      const nanscope::health_result b = nanscope::check(bytes, opts(m, i, 2));
      const nanscope::health_result c = nanscope::check(flags, opts(m, i, 1));
      expect_health(a, ref_health{5}, nanscope::to_view(ints), m, 0);
      expect_health(b, ref_health{1000}, nanscope::to_view(bytes), m, 0);
      expect_health(c, ref_health{3}, nanscope::to_view(flags), m, 0);
      CHECK(a.type == dtype::i32);
      CHECK(b.type == dtype::u8);
      CHECK(c.type == dtype::boolean);
    }
  }
}
