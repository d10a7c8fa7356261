// nanscope — check_api.hpp: how to call the host check: its options and its declaration, without the kernels
// (check.hpp defines it; in the separate-implementation mode only the file that defines NANSCOPE_IMPLEMENTATION
// compiles it).
//
//   nanscope::health_result r = nanscope::check(tensor);                        // STATS, default threads
//   auto r = nanscope::check(tensor, nanscope::check_options{}.with_mode(nanscope::check_mode::full_health));
#ifndef NANSCOPE_CHECK_API_HPP
#define NANSCOPE_CHECK_API_HPP

#include "config.hpp"
#include "health.hpp"
#include "traits.hpp"
#include "view.hpp"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

NANSCOPE_NAMESPACE_BEGIN

/// Instruction sets the host pass can use. `automatic` picks the best the CPU supports (overridable with
/// the NANSCOPE_ISA environment variable: scalar, avx2, avx512). Asking for more than the CPU has falls
/// back to the best it has.
enum class isa : std::uint8_t { automatic, scalar, avx2, avx512 };

inline const char* name(isa i) {
  switch (i) {
    case isa::automatic: return "automatic";
    case isa::scalar: return "scalar";
    case isa::avx2: return "avx2";
    case isa::avx512: return "avx512";
  }
  return "?";
}

/// Options of one check. Chainable: check_options{}.with_mode(check_mode::full_health).with_threads(1).
struct check_options {
  check_mode mode = check_mode::stats;
  unsigned threads = 0;  ///< 0: default (NANSCOPE_THREADS or the hardware threads); 1: calling thread only
  /// Elements below which one thread runs; the default is the process-wide default_parallel_threshold().
  std::uint64_t parallel_threshold = use_default_threshold;
  static constexpr std::uint64_t use_default_threshold = ~std::uint64_t{0};
  isa instruction_set = isa::automatic;
  /// Also compute the content hash of the tensor's bits (health_result::hash, see hash.hpp), fused into the
  /// pass: any dtype, any mode (modes that stop early or read nothing get a separate hashing pass).
  bool hash = false;

  check_options& with_hash(bool on = true) {
    hash = on;
    return *this;
  }
  check_options& with_mode(check_mode m) {
    mode = m;
    return *this;
  }
  check_options& with_threads(unsigned t) {
    threads = t;
    return *this;
  }
  check_options& with_parallel_threshold(std::uint64_t n) {
    parallel_threshold = n;
    return *this;
  }
  check_options& with_isa(isa i) {
    instruction_set = i;
    return *this;
  }
};

namespace detail {
inline std::atomic<std::uint64_t>& parallel_threshold_setting() {
  static std::atomic<std::uint64_t> v{[] {
    if (const char* e = std::getenv("NANSCOPE_PARALLEL_THRESHOLD")) {
      char* end = nullptr;
      const unsigned long long x = std::strtoull(e, &end, 10);
      if (end != e) return static_cast<std::uint64_t>(x);
    }
    return std::uint64_t{1} << 20;
  }()};
  return v;
}
}  // namespace detail

/// Elements below which a check with the default options runs on the calling thread only: 2^20, or the
/// NANSCOPE_PARALLEL_THRESHOLD environment variable, or what set_default_parallel_threshold() set.
inline std::uint64_t default_parallel_threshold() {
  return detail::parallel_threshold_setting().load(std::memory_order_relaxed);
}
inline void set_default_parallel_threshold(std::uint64_t n) {
  detail::parallel_threshold_setting().store(n, std::memory_order_relaxed);
}

/// Checks one tensor view on the host. Throws nanscope::error for an invalid view or device memory.
// The name is parenthesised in declarations and calls so that a function-like `check` macro (Apple's
// AssertMacros.h defines one) cannot expand here.
NANSCOPE_IMPL_ENTRY health_result(check)(const tensor_view& v, const check_options& opt = {});

/// Checks any supported tensor (see traits.hpp).
template <class T, class = std::enable_if_t<!std::is_same<std::decay_t<T>, tensor_view>::value>>
health_result(check)(const T& tensor, const check_options& opt = {}) {
  return (check)(to_view(tensor), opt);
}
/// Checks any supported tensor, naming it in error messages.
template <class T>
health_result(check)(const T& tensor, const char* name, const check_options& opt = {}) {
  return (check)(to_view(tensor, name), opt);
}

NANSCOPE_NAMESPACE_END

// The definition and the kernels: here in the header-only mode.
#if !NANSCOPE_IMPL_SEPARATE
#include "check.hpp"
#endif

#endif  // NANSCOPE_CHECK_API_HPP
