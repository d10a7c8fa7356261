// nanscope fuzz targets — shared harness: scan a whole file held in libFuzzer's buffer (exactly `size` bytes on
// the heap, so AddressSanitizer sees any read past its end) with the CLI's engine, single-threaded, with small
// chunks so that the chunk loop, the staged (unaligned / byte-swapped) path and the margins pass all run on
// small inputs. Bad input must end in nanscope::error; anything else escaping (another exception, a crash, a
// sanitizer report, a broken invariant) is a finding.
#ifndef NANSCOPE_FUZZ_COMMON_HPP
#define NANSCOPE_FUZZ_COMMON_HPP

#include "scan.hpp"

#include <cstddef>
#include <cstdint>

namespace nanscope_fuzz {

/// Stops the run when an invariant does not hold (libFuzzer reports the input).
inline void require_that(bool ok) {
  if (!ok) __builtin_trap();
}

/// Checks what every scanned tensor must satisfy.
inline void check_report(const nanscope_cli::tensor_report& r) {
  if (!r.checked()) return;
  const nanscope::health_result& h = r.health;
  require_that(h.count == r.count);
  require_that(h.nan + h.pos_inf + h.neg_inf <= h.count);
  if (h.mode == nanscope::check_mode::full_health || h.mode == nanscope::check_mode::stats)
    require_that(h.negative + h.zero + h.positive + h.nan + h.pos_inf + h.neg_inf == h.count);
  require_that(h.has_nonfinite() == (h.first_nonfinite >= 0));
  require_that(h.first_nonfinite < static_cast<std::int64_t>(h.count));
  for (std::size_t k = 0; k < nanscope_cli::target_count; ++k) require_that(r.overflow[k] <= h.count);
}

inline void scan(const std::uint8_t* data, std::size_t size, const char* path, nanscope_cli::file_format fmt) {
  nanscope_cli::scan_settings st;
  st.threads = 1;
  st.chunk_elements = 7;  // odd on purpose: chunks start at every alignment
  st.mode = (size & 1) != 0 ? nanscope::check_mode::stats : nanscope::check_mode::full_health;
  if ((size & 2) != 0) st.npy.with_void_type((size & 4) != 0 ? nanscope::dtype::bf16 : nanscope::dtype::f8_e4m3fn);
  nanscope_cli::scan_callbacks cb;
  cb.on_tensor = [](const nanscope_cli::tensor_report& r) { check_report(r); };
  try {
    nanscope_cli::scan_buffer(data, size, path, fmt, st, cb);
  } catch (const nanscope::error&) {
  }
}

}  // namespace nanscope_fuzz

#endif  // NANSCOPE_FUZZ_COMMON_HPP
