// nanscope CLI — scan.hpp: the scanning engine of `nanscope scan`, on a file already in memory (a memory mapping
// in the tool, a plain buffer in the fuzz targets). No I/O, no printing: results go to callbacks.
//
// One tensor is scanned in memory order, in chunks of 4 Mi elements:
//   - nanscope::check() (FULL_HEALTH, or STATS with --stats; multi-threaded) on each chunk, results merged in order;
//   - nanscope::margins() on the chunks whose abs_max reaches the lowest overflow threshold of the four targets
//     (fp8 e4m3fn: 464): every other chunk provably has no value that overflows any target, so the exact
//     overflow counts cost a second look only where one can be non-zero;
//   - data that is in the other byte order (big-endian .npy) or not aligned to its element size (a header whose
//     length is not a multiple of the element size) is copied chunk by chunk into an aligned buffer first (and
//     swapped): the kernels then read aligned, host-order elements;
//   - Fortran-ordered data is read in memory order (counts do not depend on the order); when it holds a NaN/Inf,
//     the first one in logical (row-major) order is found again: check(CURT_HEALTH) on the column-major view,
//     or an element-by-element walk for staged data.
#ifndef NANSCOPE_CLI_SCAN_HPP
#define NANSCOPE_CLI_SCAN_HPP

#include <nanscope/check.hpp>
#include <nanscope/health.hpp>
#include <nanscope/margins.hpp>
#include <nanscope/npy.hpp>
#include <nanscope/safetensors.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace nanscope_cli {

using nanscope::dtype;

enum class file_format { unknown, npy, safetensors };

inline const char* name(file_format f) {
  switch (f) {
    case file_format::npy: return "npy";
    case file_format::safetensors: return "safetensors";
    default: return "unknown";
  }
}

inline constexpr std::size_t target_count = nanscope::margin_targets.size();

/// The result of one tensor.
struct tensor_report {
  std::string file;
  bool has_name = false;  ///< safetensors tensors have names; a .npy file holds one unnamed array
  std::string name;
  std::string file_dtype;  ///< the file's spelling: npy descr ('<f4') or safetensors dtype ("BF16")
  bool supported = true;   ///< false: a dtype nanscope cannot check (not scanned)
  dtype type = dtype::f32;
  int rank = 0;
  std::int64_t shape[nanscope::max_rank] = {};
  std::uint64_t count = 0;
  bool fortran_order = false;
  bool byte_swapped = false;
  nanscope::health_result health;  ///< FULL_HEALTH or STATS; only `count` for integer and bool tensors
  std::array<std::uint64_t, target_count> overflow{};  ///< per margin target: finite values a cast would overflow
  std::array<double, target_count> headroom{};         ///< per margin target: headroom_bits(abs_max)

  bool checked() const { return supported && nanscope::is_float(type); }
  bool nonfinite() const { return checked() && health.has_nonfinite(); }
};

struct scan_settings {
  nanscope::check_mode mode = nanscope::check_mode::full_health;
  unsigned threads = 0;  ///< 0: nanscope's default (NANSCOPE_THREADS or all hardware threads)
  nanscope::npy_parse_options npy;
  std::uint64_t chunk_elements = std::uint64_t{1} << 22;
};

/// Callbacks of one file's scan. Any may be empty.
struct scan_callbacks {
  std::function<void(const tensor_report&)> on_tensor;
  std::function<void(const std::string&)> on_warning;
  std::function<void(std::uint64_t bytes_done)> on_progress;  ///< bytes of tensor data scanned so far in the file
};

/// Guesses the format: the .npy magic; else the extension; else a '{' where a safetensors header starts.
inline file_format detect_format(const unsigned char* data, std::size_t size, const std::string& path) {
  if (size >= 6 && std::memcmp(data, "\x93NUMPY", 6) == 0) return file_format::npy;
  auto ends_with = [&](const char* ext) {
    const std::size_t n = std::strlen(ext);
    if (path.size() < n) return false;
    for (std::size_t i = 0; i < n; ++i) {
      char c = path[path.size() - n + i];
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (c != ext[i]) return false;
    }
    return true;
  };
  if (ends_with(".npy")) return file_format::npy;
  if (ends_with(".safetensors")) return file_format::safetensors;
  if (size >= 9 && data[8] == '{') return file_format::safetensors;
  return file_format::unknown;
}

namespace detail {

inline unsigned thread_count(const scan_settings& s) {
  return s.threads != 0 ? s.threads : nanscope::detail::default_thread_count();
}

/// Element `bits` of one raw element (es bytes at p), swapped when asked.
inline std::uint64_t load_bits(const unsigned char* p, std::size_t es, bool swap) {
  unsigned char b[8] = {};
  std::memcpy(b, p, es);
  if (swap)
    for (std::size_t i = 0, j = es - 1; i < j; ++i, --j) {
      const unsigned char t = b[i];
      b[i] = b[j];
      b[j] = t;
    }
  switch (es) {
    case 1: return b[0];
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, b, 2);
      return v;
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, b, 4);
      return v;
    }
    default: {
      std::uint64_t v;
      std::memcpy(&v, b, 8);
      return v;
    }
  }
}

/// The first NaN/Inf in logical row-major order of column-major data (raw bytes, maybe in the other byte
/// order), or -1. Walks the elements one by one: used only for staged Fortran-ordered data that holds one.
inline std::int64_t first_nonfinite_fortran(const unsigned char* data, dtype t, int rank, const std::int64_t* shape,
                                            std::uint64_t n, bool swap) {
  const std::size_t es = nanscope::size_of(t);
  std::uint64_t fstride[nanscope::max_rank];
  std::uint64_t s = 1;
  for (int i = 0; i < rank; ++i) {
    fstride[i] = s;
    s *= static_cast<std::uint64_t>(shape[i]);
  }
  std::int64_t idx[nanscope::max_rank] = {};
  std::uint64_t off = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    const double x = nanscope::decode(t, load_bits(data + off * es, es, swap));
    if (!nanscope::detail::is_finite_bits(x)) return static_cast<std::int64_t>(k);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) {
        off += fstride[d];
        break;
      }
      off -= static_cast<std::uint64_t>(shape[d] - 1) * fstride[d];
      idx[d] = 0;
    }
  }
  return -1;
}

struct margins_job {
  const unsigned char* data;
  dtype type;
  std::uint64_t n;
  std::uint64_t part;
  std::vector<nanscope::margins_result>* out;
};

inline void margins_task(void* ctx, std::size_t i) {
  auto* job = static_cast<margins_job*>(ctx);
  const std::uint64_t b = i * job->part;
  const std::uint64_t m = job->n - b < job->part ? job->n - b : job->part;
  const std::size_t es = nanscope::size_of(job->type);
  (*job->out)[i] = nanscope::margins(
      nanscope::tensor_view::flat(job->data + static_cast<std::size_t>(b) * es, job->type, static_cast<std::int64_t>(m)));
}

/// Adds the overflow counts of n contiguous, aligned, host-order elements, split over the threads.
inline void add_overflow(const unsigned char* data, dtype t, std::uint64_t n, unsigned threads,
                         std::array<std::uint64_t, target_count>& overflow) {
  std::uint64_t parts = threads == 0 ? 1 : threads;
  if (n < (std::uint64_t{1} << 20)) parts = 1;
  std::vector<nanscope::margins_result> results(static_cast<std::size_t>(parts));
  margins_job job{data, t, n, (n + parts - 1) / parts, &results};
  if (parts == 1) {
    margins_task(&job, 0);
  } else {
    nanscope::detail::default_pool().run(static_cast<std::size_t>(parts), static_cast<unsigned>(parts - 1), &margins_task,
                                         &job);
  }
  for (const nanscope::margins_result& r : results)
    for (std::size_t k = 0; k < target_count; ++k) overflow[k] += r.formats[k].overflow;
}

}  // namespace detail

/// Scans one tensor of `n` elements whose bytes start at `data` (memory order: row-major, or column-major
/// when `fortran`), in the other byte order when `swap`. Fills r.health, r.overflow and r.headroom.
inline void scan_tensor(const unsigned char* data, dtype t, std::uint64_t n, bool fortran, bool swap,
                        const scan_settings& st, tensor_report& r, std::uint64_t& bytes_done,
                        const scan_callbacks& cb) {
  const std::size_t es = nanscope::size_of(t);
  nanscope::health_result acc;
  acc.type = t;
  acc.mode = st.mode;
  r.overflow.fill(0);
  r.byte_swapped = swap && es > 1;
  if (!nanscope::is_float(t) || n == 0) {
    bytes_done += n * es;
    if (cb.on_progress) cb.on_progress(bytes_done);
  } else {
    const bool staged = r.byte_swapped || reinterpret_cast<std::uintptr_t>(data) % es != 0;
    double lowest_threshold = nanscope::info(nanscope::margin_targets[0]).overflow_threshold;
    for (dtype target : nanscope::margin_targets) {
      const double th = nanscope::info(target).overflow_threshold;
      if (th < lowest_threshold) lowest_threshold = th;
    }
    const unsigned threads = detail::thread_count(st);
    const nanscope::check_options copt = nanscope::check_options{}.with_mode(st.mode).with_threads(st.threads);
    const std::uint64_t chunk = st.chunk_elements;
    std::vector<std::uint64_t> stage;
    if (staged) stage.resize(static_cast<std::size_t>(((n < chunk ? n : chunk) * es + 7) / 8));  // no more than needed
    for (std::uint64_t b = 0; b < n; b += chunk) {
      const std::uint64_t m = n - b < chunk ? n - b : chunk;
      const unsigned char* p = data + static_cast<std::size_t>(b) * es;
      if (staged) {
        auto* q = reinterpret_cast<unsigned char*>(stage.data());
        std::memcpy(q, p, static_cast<std::size_t>(m) * es);
        if (r.byte_swapped) nanscope::detail::npy_swap_elements(q, static_cast<std::size_t>(m), es);
        p = q;
      }
      nanscope::health_result h = (nanscope::check)(nanscope::tensor_view::flat(p, t, static_cast<std::int64_t>(m)), copt);
      if (h.first_nonfinite >= 0) h.first_nonfinite += static_cast<std::int64_t>(b);
      nanscope::merge(acc, h);
      // A chunk whose largest |x| is below every overflow threshold has no value that overflows any target.
      if (!nanscope::detail::is_nan_bits(h.abs_max) && !(h.abs_max < lowest_threshold))
        detail::add_overflow(p, t, m, threads, r.overflow);
      bytes_done += m * es;
      if (cb.on_progress) cb.on_progress(bytes_done);
    }
    if (fortran && r.rank >= 2 && acc.any_nonfinite) {
      if (!staged) {
        nanscope::tensor_view v;
        v.data = data;
        v.type = t;
        v.rank = r.rank;
        std::int64_t s = 1;
        for (int i = 0; i < r.rank; ++i) {
          v.shape[i] = r.shape[i];
          v.strides[i] = s;
          s *= r.shape[i];
        }
        acc.first_nonfinite =
            (nanscope::check)(v, nanscope::check_options{copt}.with_mode(nanscope::check_mode::curt_health)).first_nonfinite;
      } else {
        acc.first_nonfinite = detail::first_nonfinite_fortran(data, t, r.rank, r.shape, n, r.byte_swapped);
      }
    }
  }
  acc.count = n;
  acc.rank = r.rank;
  for (int i = 0; i < r.rank; ++i) acc.shape[i] = r.shape[i];
  r.health = acc;
  for (std::size_t k = 0; k < target_count; ++k)
    r.headroom[k] = nanscope::is_float(t) ? nanscope::headroom_bits(acc.abs_max, nanscope::margin_targets[k])
                                          : nanscope::detail::qnan;
}

/// Scans every tensor of a file held in memory. Throws nanscope::error for a malformed file (before any tensor
/// is reported: the whole layout is checked first).
inline void scan_buffer(const unsigned char* data, std::size_t size, const std::string& path, file_format fmt,
                        const scan_settings& st, const scan_callbacks& cb) {
  std::uint64_t done = 0;
  if (fmt == file_format::npy) {
    const nanscope::npy_layout lay = nanscope::parse_npy(data, size, path, st.npy);
    tensor_report r;
    r.file = path;
    r.file_dtype = lay.descr;
    r.type = lay.type;
    r.rank = static_cast<int>(lay.shape.size());
    for (int i = 0; i < r.rank; ++i) r.shape[i] = lay.shape[static_cast<std::size_t>(i)];
    r.count = lay.numel;
    r.fortran_order = lay.fortran_order;
    scan_tensor(data + lay.data_offset, lay.type, lay.numel, lay.fortran_order, lay.needs_swap(), st, r, done, cb);
    if (cb.on_tensor) cb.on_tensor(r);
    return;
  }
  if (fmt != file_format::safetensors)
    nanscope::detail::st_fail(path, "unrecognised file format (neither .npy nor .safetensors)");
  const nanscope::safetensors_layout lay = nanscope::parse_safetensors(data, size, path);
  for (const std::string& w : lay.warnings)
    if (cb.on_warning) cb.on_warning(w);
  const bool swap = nanscope::detail::npy_host_is_big_endian();  // safetensors data is little-endian
  for (const nanscope::safetensors_tensor& t : lay.tensors) {
    tensor_report r;
    r.file = path;
    r.has_name = true;
    r.name = t.name;
    r.file_dtype = t.dtype_name;
    r.supported = t.supported;
    r.type = t.type;
    r.rank = t.rank;
    for (int i = 0; i < t.rank; ++i) r.shape[i] = t.shape[i];
    r.count = t.numel;
    r.health.count = t.numel;
    if (t.supported) {
      scan_tensor(data + t.file_offset, t.type, t.numel, false, swap, st, r, done, cb);
    } else {
      done += t.byte_size();
      if (cb.on_progress) cb.on_progress(done);
    }
    if (cb.on_tensor) cb.on_tensor(r);
  }
}

}  // namespace nanscope_cli

#endif  // NANSCOPE_CLI_SCAN_HPP
