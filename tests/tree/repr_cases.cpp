// Writes test cases for the torch_repr printer: for each case, case_<i>.npy (the values; bf16/fp8 stored as
// float32, exactly) and case_<i>.txt (line 1: the torch dtype name, line 2: the view's strides note, then our
// print(tensor) text, then a line "--stats--" and our mean/std/min/max reprs). torch_repr_ref.py re-derives the
// same text from the .npy file with an independent Python implementation of torch's printing rules and
// compares. Usage: nanscope_tree_repr_cases <dir>
#include <nanscope/npy.hpp>
#include <nanscope/tree.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

namespace {
struct rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  int below(int n) { return static_cast<int>(next() % static_cast<std::uint64_t>(n)); }
};

// A value of a chosen "flavour" so that every notation rule of torch's formatter is exercised.
double value(rng& g, int flavour) {
  const double inf = std::numeric_limits<double>::infinity();
  switch (flavour) {
    case 0: return std::floor((g.uniform() - 0.5) * 20);            // small integers (int mode)
    case 1: return (g.uniform() - 0.5) * 8;                          // fixed notation
    case 2: return (g.uniform() - 0.5) * std::pow(10.0, g.below(16) - 8);  // mixed scales: sci
    case 3: return std::floor(g.uniform() * 1e6) * (g.below(2) ? 1 : -1);  // large integers
    case 4: {  // special values sprinkled into fixed-notation data
      const int k = g.below(10);
      if (k == 0) return std::numeric_limits<double>::quiet_NaN();
      if (k == 1) return inf;
      if (k == 2) return -inf;
      if (k == 3) return 0.0;
      if (k == 4) return -0.0;
      return (g.uniform() - 0.5) * 3;
    }
    case 5: return 0.0;  // all zeros
    case 6: return g.uniform() * 1e-6;  // tiny
    case 7: return std::floor(g.uniform() * 3) * 1e9;  // huge integers (> 1e8: sci)
    case 8: {  // no non-zero finite value: zeros of both signs and specials (torch's integer style)
      const int k = g.below(5);
      return k == 0 ? 0.0 : k == 1 ? -0.0 : k == 2 ? inf : k == 3 ? -inf : std::numeric_limits<double>::quiet_NaN();
    }
    default: {  // only inf/nan
      const int k = g.below(3);
      return k == 0 ? inf : k == 1 ? -inf : std::numeric_limits<double>::quiet_NaN();
    }
  }
}

template <class T>
void put(std::vector<unsigned char>& buf, std::size_t i, T v) {
  std::memcpy(buf.data() + i * sizeof(T), &v, sizeof(T));
}
}  // namespace

int main(int argc, char** argv) {
  using namespace nanscope;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <dir>\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  rng g{12345};
  const dtype types[] = {dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::i32, dtype::i64, dtype::u8, dtype::boolean};
  int n_cases = 0;
  for (int c = 0; c < 500; ++c) {
    const dtype t = types[c % 8];
    const int flavour = g.below(10);
    // shapes: 0-d, 1-d, 2-d, 3-d; some above the 1000-element threshold; some empty
    int rank = g.below(4);
    std::int64_t shape[3] = {1, 1, 1};
    const bool big = g.below(5) == 0;
    for (int d = 0; d < rank; ++d) shape[d] = big ? 5 + g.below(60) : 1 + g.below(9);
    if (g.below(25) == 0 && rank > 0) shape[g.below(rank)] = 0;
    if (c < 8) {  // one long vector per type: line wrapping
      rank = 1;
      shape[0] = 40 + c;
    }
    std::int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    std::vector<unsigned char> buf(static_cast<std::size_t>(n) * size_of(t) + 8);
    for (std::int64_t i = 0; i < n; ++i) {
      const double x = value(g, flavour);
      const std::size_t k = static_cast<std::size_t>(i);
      switch (t) {
        case dtype::f64: put(buf, k, x); break;
        case dtype::f32: put(buf, k, static_cast<float>(x)); break;
        case dtype::f16: put(buf, k, half::from_float(x).bits); break;
        case dtype::bf16: put(buf, k, bfloat16::from_float(x).bits); break;
        case dtype::i32: put(buf, k, static_cast<std::int32_t>(detail::is_finite_bits(x) ? std::fmod(x, 2e9) : 7)); break;
        case dtype::i64: put(buf, k, static_cast<std::int64_t>(detail::is_finite_bits(x) ? x * 1000 : -3)); break;
        case dtype::u8: put(buf, k, static_cast<std::uint8_t>(g.below(256))); break;
        default: put(buf, k, static_cast<std::uint8_t>(g.below(2))); break;
      }
    }
    tensor_view v;
    v.data = buf.data();
    v.type = t;
    v.rank = rank;
    for (int d = 0; d < rank; ++d) v.shape[d] = shape[d];
    v.set_contiguous_strides();
    const std::string base = dir + "/case_" + std::to_string(c);
    write_npy(base + ".npy", v);
    detail::torch_print_options po;
    std::ofstream out(base + ".txt", std::ios::binary);
    out << info(t).torch_name << "\n" << detail::torch_tensor_repr(v, po) << "\n--stats--\n";
    if (t == dtype::f16 || t == dtype::f32 || t == dtype::bf16 || t == dtype::f64) {
      const health_result h = check(v);
      const detail::torch_stats s = detail::torch_stats_of(h, true);
      out << detail::torch_scalar_repr(s.mean, t, v, po) << "\n" << detail::torch_scalar_repr(s.std, t, v, po) << "\n"
          << detail::torch_scalar_repr(s.min, t, v, po) << "\n" << detail::torch_scalar_repr(s.max, t, v, po) << "\n";
    }
    ++n_cases;
  }
  std::printf("%d cases written to %s\n", n_cases, dir.c_str());
  return 0;
}
