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
// scan_tensor_stream() does the same on data that arrives in order from a byte source (an .npz member being
// inflated, npz.hpp): one chunk in memory at a time, Fortran order resolved chunk by chunk.
#ifndef NANSCOPE_CLI_SCAN_HPP
#define NANSCOPE_CLI_SCAN_HPP

#include <nanscope/check.hpp>
#include <nanscope/health.hpp>
#include <nanscope/margins.hpp>
#include <nanscope/npy.hpp>
#include <nanscope/packed.hpp>
#include <nanscope/safetensors.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace nanscope_cli {

using nanscope::dtype;

/// npz: a zip archive of .npy members (numpy.savez / savez_compressed). scan_buffer() does not read it: the tool
/// does, with npz.hpp (which needs zlib).
enum class file_format { unknown, npy, safetensors, npz };

inline const char* name(file_format f) {
  switch (f) {
    case file_format::npy: return "npy";
    case file_format::safetensors: return "safetensors";
    case file_format::npz: return "npz";
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
  /// Packed block-scaled tensors (safetensors F4, F6_E2M3, F6_E3M2, and F8 with an F8_E8M0 scale tensor) and E8M0
  /// tensors scanned alone: health of the exactly decoded values (type f64, STATS), plus the fields below.
  bool packed = false;
  std::string packed_kind;        ///< "mxfp4", "nvfp4", "mxfp6_e2m3", ...; "e2m1" etc. without scales; "e8m0"
  std::string scale_name;         ///< the scale tensor paired with it ("" none)
  std::string tensor_scale_name;  ///< NVFP4: the per-tensor f32 scale tensor ("" none: 1)
  float tensor_scale = 1.0f;
  bool has_blocks = false;        ///< `blocks` and `nan_scales` are set (a packed tensor, scaled or not)
  nanscope::block_format_stats blocks;
  std::uint64_t nan_scales = 0;
  int expert = -1;  ///< the expert index parsed from the name ("...experts.17...."), -1 none

  bool checked() const { return supported && nanscope::is_float(type); }
  bool nonfinite() const { return checked() && health.has_nonfinite(); }
};

struct scan_settings {
  nanscope::check_mode mode = nanscope::check_mode::full_health;
  unsigned threads = 0;  ///< 0: nanscope's default (NANSCOPE_THREADS or all hardware threads)
  nanscope::npy_parse_options npy;
  std::uint64_t chunk_elements = std::uint64_t{1} << 22;
  /// `--scales W=S[,T]`: a tensor whose name ends with W takes as block scales the tensor named with that ending
  /// replaced by S (and, for E4M3 scales, as per-tensor scale the one ending in T). Tried before the conventions.
  struct scales_rule {
    std::string weight, scale, tensor_scale;
  };
  std::vector<scales_rule> scale_rules;
  /// A .npy array of a dtype nanscope cannot check (complex, strings, datetimes, objects) is reported as an
  /// unsupported tensor (tensor_report::supported false) instead of an error (`--skip-unsupported`).
  bool report_unsupported_npy = false;
};

/// Callbacks of one file's scan. Any may be empty.
/// The per-expert totals of a MoE checkpoint file (tensors whose names carry "experts.<N>"), reported after its
/// tensors when the file holds a packed tensor.
struct expert_report {
  std::string file;
  int expert = -1;
  std::uint64_t tensors = 0, packed = 0, nonfinite_tensors = 0, nan = 0, inf = 0, nan_scales = 0, blocks = 0,
                lossy_blocks = 0;
  double abs_max = nanscope::detail::qnan;
  int scale_exp_min = 0, scale_exp_max = 0;
  bool has_scale_exp = false;
};

struct scan_callbacks {
  std::function<void(const tensor_report&)> on_tensor;
  std::function<void(const expert_report&)> on_expert;
  std::function<void(const std::string&)> on_warning;
  std::function<void(std::uint64_t bytes_done)> on_progress;  ///< bytes of tensor data scanned so far in the file
};

/// True when `path` ends with `ext` (ASCII letters compared without case).
inline bool has_extension(const std::string& path, const char* ext) {
  const std::size_t n = std::strlen(ext);
  if (path.size() < n) return false;
  for (std::size_t i = 0; i < n; ++i) {
    char c = path[path.size() - n + i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != ext[i]) return false;
  }
  return true;
}

/// The extensions `scan --recursive` picks up in a directory (lower case; matched without case).
inline constexpr const char* scanned_extensions[] = {".npy", ".npz", ".safetensors"};

/// Guesses the format: the .npy magic; else a zip signature (a local header, or the end record of an empty
/// archive); else the extension; else a '{' where a safetensors header starts.
inline file_format detect_format(const unsigned char* data, std::size_t size, const std::string& path) {
  if (size >= 6 && std::memcmp(data, "\x93NUMPY", 6) == 0) return file_format::npy;
  if (size >= 4 && (std::memcmp(data, "PK\x03\x04", 4) == 0 || std::memcmp(data, "PK\x05\x06", 4) == 0))
    return file_format::npz;
  auto ends_with = [&](const char* ext) { return has_extension(path, ext); };
  if (ends_with(".npy")) return file_format::npy;
  if (ends_with(".npz")) return file_format::npz;
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

namespace detail {

/// The lowest overflow threshold of the margin targets (fp8 e4m3fn: 464): a chunk whose largest |x| is below it
/// has no value that overflows any target.
inline double lowest_overflow_threshold() {
  double lowest = nanscope::info(nanscope::margin_targets[0]).overflow_threshold;
  for (dtype target : nanscope::margin_targets) {
    const double th = nanscope::info(target).overflow_threshold;
    if (th < lowest) lowest = th;
  }
  return lowest;
}

/// The row-major (logical) flat index of the element at column-major memory index k of an array of this shape.
inline std::int64_t fortran_to_row_major(std::uint64_t k, int rank, const std::int64_t* shape) {
  std::uint64_t idx[nanscope::max_rank] = {};
  for (int d = 0; d < rank; ++d) {
    const auto e = static_cast<std::uint64_t>(shape[d]);
    idx[d] = k % e;
    k /= e;
  }
  std::uint64_t flat = 0;
  for (int d = 0; d < rank; ++d) flat = flat * static_cast<std::uint64_t>(shape[d]) + idx[d];
  return static_cast<std::int64_t>(flat);
}

/// The lowest logical (row-major) index among the NaN/Inf elements of m host-order column-major elements at p,
/// the first of which is memory index `first`; -1 when there is none.
inline std::int64_t min_logical_nonfinite(const unsigned char* p, dtype t, std::uint64_t first, std::uint64_t m,
                                          int rank, const std::int64_t* shape) {
  const std::size_t es = nanscope::size_of(t);
  std::int64_t best = -1;
  for (std::uint64_t i = 0; i < m; ++i) {
    const double x = nanscope::decode(t, load_bits(p + static_cast<std::size_t>(i) * es, es, false));
    if (nanscope::detail::is_finite_bits(x)) continue;
    const std::int64_t l = fortran_to_row_major(first + i, rank, shape);
    if (best < 0 || l < best) best = l;
  }
  return best;
}

/// The chunk loop shared by scan_tensor() and scan_tensor_stream(): `fetch(b, m)` returns the m elements from
/// element b on, aligned and in host order; `on_chunk(p, b, m, h)` sees each chunk after its check.
template <class Fetch, class OnChunk>
void scan_chunks(Fetch&& fetch, OnChunk&& on_chunk, dtype t, std::uint64_t n, const scan_settings& st,
                 nanscope::health_result& acc, tensor_report& r, std::uint64_t& bytes_done, const scan_callbacks& cb) {
  const std::size_t es = nanscope::size_of(t);
  const double lowest_threshold = lowest_overflow_threshold();
  const unsigned threads = thread_count(st);
  const nanscope::check_options copt = nanscope::check_options{}.with_mode(st.mode).with_threads(st.threads);
  const std::uint64_t chunk = st.chunk_elements;
  for (std::uint64_t b = 0; b < n; b += chunk) {
    const std::uint64_t m = n - b < chunk ? n - b : chunk;
    const unsigned char* p = fetch(b, m);
    nanscope::health_result h = (nanscope::check)(nanscope::tensor_view::flat(p, t, static_cast<std::int64_t>(m)), copt);
    if (h.first_nonfinite >= 0) h.first_nonfinite += static_cast<std::int64_t>(b);
    nanscope::merge(acc, h);
    // A chunk whose largest |x| is below every overflow threshold has no value that overflows any target.
    if (!nanscope::detail::is_nan_bits(h.abs_max) && !(h.abs_max < lowest_threshold))
      add_overflow(p, t, m, threads, r.overflow);
    on_chunk(p, b, m, h);
    bytes_done += m * es;
    if (cb.on_progress) cb.on_progress(bytes_done);
  }
}

/// What every scan of a tensor ends with: count and shape into the result, the headroom per target.
inline void finish_tensor(nanscope::health_result& acc, dtype t, std::uint64_t n, tensor_report& r) {
  acc.count = n;
  acc.rank = r.rank;
  for (int i = 0; i < r.rank; ++i) acc.shape[i] = r.shape[i];
  r.health = acc;
  for (std::size_t k = 0; k < target_count; ++k)
    r.headroom[k] = nanscope::is_float(t) ? nanscope::headroom_bits(acc.abs_max, nanscope::margin_targets[k])
                                          : nanscope::detail::qnan;
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
    const std::uint64_t chunk = st.chunk_elements;
    std::vector<std::uint64_t> stage;
    if (staged) stage.resize(static_cast<std::size_t>(((n < chunk ? n : chunk) * es + 7) / 8));  // no more than needed
    auto fetch = [&](std::uint64_t b, std::uint64_t m) -> const unsigned char* {
      const unsigned char* p = data + static_cast<std::size_t>(b) * es;
      if (!staged) return p;
      auto* q = reinterpret_cast<unsigned char*>(stage.data());
      std::memcpy(q, p, static_cast<std::size_t>(m) * es);
      if (r.byte_swapped) nanscope::detail::npy_swap_elements(q, static_cast<std::size_t>(m), es);
      return q;
    };
    auto no_op = [](const unsigned char*, std::uint64_t, std::uint64_t, const nanscope::health_result&) {};
    detail::scan_chunks(fetch, no_op, t, n, st, acc, r, bytes_done, cb);
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
        const nanscope::check_options copt =
            nanscope::check_options{}.with_mode(nanscope::check_mode::curt_health).with_threads(st.threads);
        acc.first_nonfinite = (nanscope::check)(v, copt).first_nonfinite;
      } else {
        acc.first_nonfinite = detail::first_nonfinite_fortran(data, t, r.rank, r.shape, n, r.byte_swapped);
      }
    }
  }
  detail::finish_tensor(acc, t, n, r);
}

/// Reads the next `n` bytes of a stream into dst, exactly (throws nanscope::error when it cannot).
using byte_source = std::function<void(unsigned char* dst, std::size_t n)>;

/// scan_tensor() for data that arrives in order from `read` (n elements, n * size_of(t) bytes, all of them read,
/// also for integer tensors): one chunk is in memory at a time. The first NaN/Inf of Fortran-ordered data is
/// found chunk by chunk (each chunk holding one is walked element by element).
inline void scan_tensor_stream(const byte_source& read, dtype t, std::uint64_t n, bool fortran, bool swap,
                               const scan_settings& st, tensor_report& r, std::uint64_t& bytes_done,
                               const scan_callbacks& cb) {
  const std::size_t es = nanscope::size_of(t);
  nanscope::health_result acc;
  acc.type = t;
  acc.mode = st.mode;
  r.overflow.fill(0);
  r.byte_swapped = swap && es > 1;
  const std::uint64_t chunk = st.chunk_elements;
  std::vector<std::uint64_t> stage(static_cast<std::size_t>(((n < chunk ? n : chunk) * es + 7) / 8));
  auto* q = reinterpret_cast<unsigned char*>(stage.data());
  if (!nanscope::is_float(t) || n == 0) {
    for (std::uint64_t b = 0; b < n; b += chunk) {  // read (and so verified by the source), not checked
      const std::uint64_t m = n - b < chunk ? n - b : chunk;
      read(q, static_cast<std::size_t>(m) * es);
      bytes_done += m * es;
      if (cb.on_progress) cb.on_progress(bytes_done);
    }
  } else {
    auto fetch = [&](std::uint64_t, std::uint64_t m) -> const unsigned char* {
      read(q, static_cast<std::size_t>(m) * es);
      if (r.byte_swapped) nanscope::detail::npy_swap_elements(q, static_cast<std::size_t>(m), es);
      return q;
    };
    const bool walk = fortran && r.rank >= 2;
    std::int64_t first_logical = -1;
    auto on_chunk = [&](const unsigned char* p, std::uint64_t b, std::uint64_t m, const nanscope::health_result& h) {
      if (!walk || h.first_nonfinite < 0) return;
      const std::int64_t l = detail::min_logical_nonfinite(p, t, b, m, r.rank, r.shape);
      if (l >= 0 && (first_logical < 0 || l < first_logical)) first_logical = l;
    };
    detail::scan_chunks(fetch, on_chunk, t, n, st, acc, r, bytes_done, cb);
    if (walk && acc.any_nonfinite) acc.first_nonfinite = first_logical;
  }
  detail::finish_tensor(acc, t, n, r);
}

namespace detail {

/// The item size in bytes of a numpy descr string nanscope does not scan: '<c8' (complex64) 8, '<c16' 16, '|S3' 3,
/// '<U5' 20 (UCS-4), '<M8[ns]' 8, '|V4' 4; 0 when the descr does not tell it ('|O': pickled objects, no fixed
/// layout in the file).
inline std::uint64_t npy_descr_itemsize(const std::string& d) {
  std::size_t i = 0;
  if (i < d.size() && (d[i] == '<' || d[i] == '>' || d[i] == '|' || d[i] == '=')) ++i;
  if (i >= d.size()) return 0;
  const char kind = d[i++];
  if (kind == 'O') return 0;
  std::uint64_t n = 0;
  std::size_t digits = 0;
  while (i < d.size() && d[i] >= '0' && d[i] <= '9' && digits < 12) {
    n = n * 10 + static_cast<std::uint64_t>(d[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0) return 0;
  const bool unit = i < d.size() && d[i] == '[' && d.back() == ']' && (kind == 'M' || kind == 'm');
  if (i != d.size() && !unit) return 0;
  return kind == 'U' ? n * 4 : n;
}

/// For a .npy file that parse_npy() refused: when the reason is a descr nanscope cannot scan (complex, strings,
/// datetimes, raw voids without --npy-void, objects), fills `r` as an unsupported tensor and returns true, after
/// the same checks of the layout as parse_npy() (the data must be exactly as long as the shape says, when the
/// descr tells the item size). Returns false for any other problem: parse_npy()'s error stands.
inline bool npy_unsupported(const unsigned char* f, std::size_t size, const std::string& path,
                            const scan_settings& st, tensor_report& r) {
  if (size < 12 || std::memcmp(f, "\x93NUMPY", 6) != 0 || f[7] != 0 || (f[6] != 1 && f[6] != 2)) return false;
  const std::size_t header_start = f[6] == 1 ? 10 : 12;
  std::size_t header_len = static_cast<std::size_t>(f[8]) | static_cast<std::size_t>(f[9]) << 8;
  if (f[6] == 2) header_len |= static_cast<std::size_t>(f[10]) << 16 | static_cast<std::size_t>(f[11]) << 24;
  if (header_len > size - header_start) return false;
  const std::string_view header(reinterpret_cast<const char*>(f) + header_start, header_len);
  for (const char c : header)
    if (static_cast<unsigned char>(c) >= 0x80 || (c < 0x20 && c != '\n' && c != '\t') || c == 0x7F) return false;
  std::string descr;
  bool fortran = false;
  std::vector<std::int64_t> shape;
  try {
    nanscope::detail::npy_header_parser(path, header).parse(descr, fortran, shape);
  } catch (const nanscope::error&) {
    return false;
  }
  dtype t = dtype::f32;
  bool big_endian = false;
  if (nanscope::detail::npy_descr_dtype(descr, t, big_endian)) return false;  // refused for another reason
  const bool is_void = descr.size() == 3 && descr[1] == 'V' && (descr[2] == '1' || descr[2] == '2');
  if (is_void && st.npy.has_void_type && nanscope::size_of(st.npy.void_type) == static_cast<std::size_t>(descr[2] - '0'))
    return false;
  bool has_zero = false;
  for (const std::int64_t e : shape) has_zero = has_zero || e == 0;
  std::uint64_t n = has_zero ? 0 : 1;
  bool too_big = false;
  for (const std::int64_t e : shape) {
    if (has_zero) break;
    const auto u = static_cast<std::uint64_t>(e);
    if (n > ~std::uint64_t{0} / u) {
      too_big = true;
      break;
    }
    n *= u;
  }
  const std::uint64_t es = npy_descr_itemsize(descr);
  const std::uint64_t avail = size - header_start - header_len;
  if (es != 0) {
    if (too_big || (n != 0 && n > ~std::uint64_t{0} / es) || n * es > avail)
      nanscope::detail::file_fail(path, "truncated: the data is shorter than the shape says (" +
                                            (too_big || (n != 0 && n > ~std::uint64_t{0} / es)
                                                 ? std::string("more than 2^64")
                                                 : std::to_string(n * es)) +
                                            " bytes needed, " + std::to_string(avail) + " after the header)");
    if (n * es < avail)
      nanscope::detail::file_fail(path, std::to_string(avail - n * es) + " unexpected trailing bytes after the data");
  } else if (too_big) {
    nanscope::detail::file_fail(path, "the shape has more than 2^64 elements");
  }
  r = tensor_report{};
  r.file = path;
  r.file_dtype = descr;
  r.supported = false;
  r.rank = static_cast<int>(shape.size());
  for (int i = 0; i < r.rank; ++i) r.shape[i] = shape[static_cast<std::size_t>(i)];
  r.count = n;
  r.health.count = n;
  r.fortran_order = fortran;
  return true;
}

}  // namespace detail

namespace detail {

/// The element format of a packed safetensors dtype (F4, F6_E2M3, F6_E3M2); false for any other.
inline bool packed_element(const std::string& dt, nanscope::element_format& f) {
  if (dt == "F4") f = nanscope::element_format::e2m1;
  else if (dt == "F6_E2M3") f = nanscope::element_format::e2m3;
  else if (dt == "F6_E3M2") f = nanscope::element_format::e3m2;
  else return false;
  return true;
}

/// The expert index in a tensor name: the digits after "experts." or "experts_" (followed by '.', '_' or the end);
/// -1 when there is none.
inline int expert_index(const std::string& name) {
  for (const char* key : {"experts.", "experts_"}) {
    std::size_t at = 0;
    while ((at = name.find(key, at)) != std::string::npos) {
      std::size_t i = at + std::strlen(key), j = i;
      long v = 0;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9' && j - i < 9) v = v * 10 + (name[j++] - '0');
      if (j > i && (j == name.size() || name[j] == '.' || name[j] == '_')) return static_cast<int>(v);
      at = i;
    }
  }
  return -1;
}

/// One packed weight and what it was paired with.
struct packed_pair {
  std::size_t weight = 0;
  bool has_scale = false, has_tensor_scale = false;
  std::size_t scale = 0, tensor_scale = 0;
  nanscope::element_format element = nanscope::element_format::e2m1;
  nanscope::packed_scale scale_type = nanscope::packed_scale::e8m0;
  int block_size = 32;
  bool u8_blocks = false;  // U8 "X_blocks" [..., G, 16]: read as E2M1 [..., G, 32]
  std::vector<std::string> tried;  // the scale names looked for (for the warning of an unpaired weight)
};

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// The block-scale candidates of a weight name (then the matching per-tensor scale name), --scales rules first.
inline std::vector<std::pair<std::string, std::string>> scale_candidates(const std::string& w, const scan_settings& st) {
  std::vector<std::pair<std::string, std::string>> c;
  for (const scan_settings::scales_rule& r : st.scale_rules)
    if (ends_with(w, r.weight)) {
      const std::string base = w.substr(0, w.size() - r.weight.size());
      c.emplace_back(base + r.scale, r.tensor_scale.empty() ? std::string() : base + r.tensor_scale);
    }
  // ModelOpt NVFP4 / compressed-tensors: X.weight + X.weight_scale (+ X.weight_scale_2); FP8 block checkpoints:
  // X.weight_scale_inv; MX exports: X.weight_scales / X.scales; gpt-oss style X_blocks + X_scales
  for (const char* sfx : {"_scale", "_scale_inv", "_scales", ".scale", ".scales"}) c.emplace_back(w + sfx, w + "_scale_2");
  if (ends_with(w, ".weight")) {
    const std::string base = w.substr(0, w.size() - 7);
    c.emplace_back(base + ".scales", base + ".weight_scale_2");
    c.emplace_back(base + ".scale", base + ".weight_scale_2");
  }
  for (const char* sfx : {"_blocks", ".blocks"})
    if (ends_with(w, sfx)) c.emplace_back(w.substr(0, w.size() - 7) + (sfx[0] == '_' ? "_scales" : ".scales"), std::string());
  return c;
}

/// Pairs every packed weight of a file with its scales and checks the shapes (throws nanscope::error naming the
/// tensors when a scale tensor does not fit its weight). `role[i]`: 0 ordinary, 1 packed weight, 2 its scales
/// (not reported alone), 3 an E8M0 tensor no weight claimed (scanned alone).
inline std::vector<packed_pair> plan_packed(const nanscope::safetensors_layout& lay, const std::string& path,
                                            const scan_settings& st, std::vector<int>& role) {
  using nanscope::detail::st_quote;
  std::vector<packed_pair> out;
  role.assign(lay.tensors.size(), 0);
  std::vector<std::pair<std::string, std::size_t>> by_name;
  by_name.reserve(lay.tensors.size());
  for (std::size_t i = 0; i < lay.tensors.size(); ++i) by_name.emplace_back(lay.tensors[i].name, i);
  std::sort(by_name.begin(), by_name.end());
  auto find = [&](const std::string& n, std::size_t& at) {
    auto it = std::lower_bound(by_name.begin(), by_name.end(), std::make_pair(n, std::size_t{0}));
    if (it == by_name.end() || it->first != n) return false;
    at = it->second;
    return true;
  };
  auto shape_of = [](const nanscope::safetensors_tensor& t) {
    std::string s = "[";
    for (int i = 0; i < t.rank; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
    return s + "]";
  };
  for (std::size_t i = 0; i < lay.tensors.size(); ++i) {
    const nanscope::safetensors_tensor& w = lay.tensors[i];
    packed_pair p;
    p.weight = i;
    const bool f8 = w.supported && (w.type == nanscope::dtype::f8_e4m3fn || w.type == nanscope::dtype::f8_e5m2);
    if (f8) p.element = w.type == nanscope::dtype::f8_e4m3fn ? nanscope::element_format::e4m3 : nanscope::element_format::e5m2;
    else if (!packed_element(w.dtype_name, p.element)) {
      // gpt-oss style MXFP4: U8 "X_blocks" [..., G, 16] (16 bytes: one block of 32 E2M1 codes) + U8 "X_scales" [..., G]
      if (w.dtype_name != "U8" || w.rank < 2 || w.shape[w.rank - 1] != 16 || !(ends_with(w.name, "_blocks") || ends_with(w.name, ".blocks")))
        continue;
      p.u8_blocks = true;
      p.element = nanscope::element_format::e2m1;
    }
    for (const auto& cand : scale_candidates(w.name, st)) {
      std::size_t at = 0;
      p.tried.push_back(cand.first);
      if (!find(cand.first, at) || at == i) continue;
      const nanscope::safetensors_tensor& s = lay.tensors[at];
      // MXFP8 only with E8M0 scales: an F8 weight's F32 / F8_E4M3 "weight_scale" is ordinary FP8 scaling
      if (s.dtype_name == "F8_E8M0" || (s.dtype_name == "U8" && !f8)) {
        p.scale_type = nanscope::packed_scale::e8m0;
        p.block_size = 32;
      } else if (s.dtype_name == "F8_E4M3" && !f8 && p.element == nanscope::element_format::e2m1) {
        p.scale_type = nanscope::packed_scale::e4m3;
        p.block_size = 16;
      } else {
        continue;
      }
      if (p.u8_blocks) {
        // U8 blocks take E8M0 bytes (U8 or F8_E8M0) shaped as the blocks without their last extent
        if (p.scale_type != nanscope::packed_scale::e8m0) continue;
        bool ok = s.rank == w.rank - 1;
        for (int d = 0; ok && d < s.rank; ++d) ok = s.shape[d] == w.shape[d];
        if (!ok) {
          std::string want = "[";
          for (int d = 0; d + 1 < w.rank; ++d) want += (d ? ", " : "") + std::to_string(w.shape[d]);
          nanscope::detail::st_fail(path, "tensor " + st_quote(w.name) + ": its scale tensor " + st_quote(s.name) + " (" +
                                              s.dtype_name + " " + shape_of(s) + ") does not match it: MXFP4 blocks U8 " +
                                              shape_of(w) + " need " + s.dtype_name + " " + want + "]");
        }
        if (role[at] == 2)
          nanscope::detail::st_fail(path, "tensor " + st_quote(s.name) + " is the scale tensor of two weights (the second: " +
                                              st_quote(w.name) + ")");
        p.has_scale = true;
        p.scale = at;
        break;
      }
      // the scale tensor's shape: the weight's, with the last extent ceil(last / block)
      const int wr = w.rank == 0 ? 1 : w.rank;
      const std::int64_t L = w.rank == 0 ? 1 : w.shape[w.rank - 1];
      bool ok = s.rank == wr;
      for (int d = 0; ok && d + 1 < wr; ++d) ok = s.shape[d] == w.shape[d];
      const std::int64_t need = (L + p.block_size - 1) / p.block_size;
      ok = ok && s.shape[wr - 1] == need;
      if (!ok) {
        std::string want = "[";
        for (int d = 0; d + 1 < wr; ++d) want += std::to_string(w.shape[d]) + ", ";
        want += std::to_string(need) + "]";
        nanscope::detail::st_fail(path, "tensor " + st_quote(w.name) + ": its scale tensor " + st_quote(s.name) + " (" +
                                            s.dtype_name + " " + shape_of(s) + ") does not match it: " + w.dtype_name + " " +
                                            shape_of(w) + " in blocks of " + std::to_string(p.block_size) + " needs " +
                                            s.dtype_name + " " + want);
      }
      if (role[at] == 2)
        nanscope::detail::st_fail(path, "tensor " + st_quote(s.name) + " is the scale tensor of two weights (the second: " +
                                            st_quote(w.name) + ")");
      p.has_scale = true;
      p.scale = at;
      if (p.scale_type == nanscope::packed_scale::e4m3 && !cand.second.empty() && find(cand.second, at)) {
        const nanscope::safetensors_tensor& t = lay.tensors[at];
        if (t.dtype_name != "F32" || t.numel != 1)
          nanscope::detail::st_fail(path, "tensor " + st_quote(w.name) + ": its per-tensor scale " + st_quote(t.name) +
                                              " must be one F32 value, not " + t.dtype_name + " " + shape_of(t));
        p.has_tensor_scale = true;
        p.tensor_scale = at;
      }
      break;
    }
    if ((f8 || p.u8_blocks) && !p.has_scale) continue;  // an ordinary fp8 or u8 tensor
    role[i] = 1;
    if (p.has_scale) role[p.scale] = 2;
    out.push_back(std::move(p));
  }
  for (std::size_t i = 0; i < lay.tensors.size(); ++i)
    if (role[i] == 0 && lay.tensors[i].dtype_name == "F8_E8M0") role[i] = 3;
  return out;
}

/// Scans one packed weight (check_packed() over the mapping) into r.
inline void scan_packed(const unsigned char* data, const nanscope::safetensors_layout& lay, const packed_pair& p,
                        const scan_settings& st, tensor_report& r) {
  const nanscope::safetensors_tensor& w = lay.tensors[p.weight];
  nanscope::packed_view v;
  v.data = data + w.file_offset;
  v.bytes = w.byte_size();
  v.element = p.element;
  v.name = w.name.c_str();
  v.rank = w.rank == 0 ? 1 : w.rank;
  if (w.rank == 0) v.shape[0] = 1;
  for (int d = 0; d < w.rank; ++d) v.shape[d] = w.shape[d];
  if (p.u8_blocks) {
    // 16 bytes a block: the logical shape has 32 elements there (reported so: first_nonfinite indexes it)
    v.shape[w.rank - 1] = 32;
    r.shape[w.rank - 1] = 32;
    r.count = w.numel * 2;
  }
  if (p.has_scale) {
    const nanscope::safetensors_tensor& s = lay.tensors[p.scale];
    v.scales = data + s.file_offset;
    v.scale_bytes = s.byte_size();
    v.scale_type = p.scale_type;
    v.block_size = p.block_size;
    r.scale_name = s.name;
  }
  if (p.has_tensor_scale) {
    const nanscope::safetensors_tensor& t = lay.tensors[p.tensor_scale];
    std::uint32_t b = 0;
    for (int k = 3; k >= 0; --k) b = (b << 8) | data[t.file_offset + static_cast<std::uint64_t>(k)];  // little-endian
    v.tensor_scale = nanscope::detail::bits_to_float(b);
    r.tensor_scale_name = t.name;
  }
  nanscope::packed_options opt;
  opt.threads = st.threads;
  const nanscope::packed_result res = nanscope::check_packed(v, opt);
  r.packed = true;
  r.type = nanscope::dtype::f64;
  r.tensor_scale = v.tensor_scale;
  r.packed_kind = !p.has_scale ? std::string(nanscope::name(p.element)) : nanscope::name(res.blocks.format);
  r.health = res.health;
  r.health.mode = st.mode;
  r.has_blocks = p.has_scale;
  r.blocks = res.blocks;
  r.nan_scales = res.nan_scales;
  for (std::size_t k = 0; k < target_count; ++k) {
    const double th = nanscope::info(nanscope::margin_targets[k]).overflow_threshold;
    // as nanscope::margins counts: |x| >= threshold, except e4m3fn, whose tie at 464 rounds down to 448
    r.overflow[k] = nanscope::margin_targets[k] == nanscope::dtype::f8_e4m3fn ? res.count_above(th) : res.count_at_or_above(th);
    r.headroom[k] = nanscope::headroom_bits(res.health.abs_max, nanscope::margin_targets[k]);
  }
}

}  // namespace detail

/// Scans every tensor of a file held in memory. Throws nanscope::error for a malformed file (before any tensor
/// is reported: the whole layout is checked first).
inline void scan_buffer(const unsigned char* data, std::size_t size, const std::string& path, file_format fmt,
                        const scan_settings& st, const scan_callbacks& cb) {
  std::uint64_t done = 0;
  if (fmt == file_format::npy) {
    nanscope::npy_layout lay;
    try {
      lay = nanscope::parse_npy(data, size, path, st.npy);
    } catch (const nanscope::error&) {
      tensor_report u;
      if (!st.report_unsupported_npy || !detail::npy_unsupported(data, size, path, st, u)) throw;
      if (cb.on_progress) cb.on_progress(size);
      if (cb.on_tensor) cb.on_tensor(u);
      return;
    }
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
  // packed block-scaled weights and their scales, paired and checked before any tensor is reported
  std::vector<int> role;
  const std::vector<detail::packed_pair> pairs = detail::plan_packed(lay, path, st, role);
  std::vector<std::size_t> pair_of(lay.tensors.size(), 0);
  for (std::size_t k = 0; k < pairs.size(); ++k) pair_of[pairs[k].weight] = k;
  for (const detail::packed_pair& p : pairs)
    if (!p.has_scale && cb.on_warning) {
      std::string looked;
      for (std::size_t k = 0; k < p.tried.size() && k < 4; ++k) looked += (k ? ", " : "") + nanscope::detail::st_quote(p.tried[k]);
      cb.on_warning("tensor " + nanscope::detail::st_quote(lay.tensors[p.weight].name) + ": " +
                    lay.tensors[p.weight].dtype_name + " without a scale tensor (looked for " + looked +
                    ", ...; --scales names another): its elements are checked unscaled");
    }
  std::vector<expert_report> experts;
  for (std::size_t i = 0; i < lay.tensors.size(); ++i) {
    const nanscope::safetensors_tensor& t = lay.tensors[i];
    if (role[i] == 2) {  // scales: reported with their weight
      done += t.byte_size();
      if (cb.on_progress) cb.on_progress(done);
      continue;
    }
    tensor_report r;
    r.file = path;
    r.has_name = true;
    r.name = t.name;
    r.file_dtype = t.dtype_name;
    r.supported = t.supported;
    r.type = t.type;
    r.rank = t.rank;
    for (int k = 0; k < t.rank; ++k) r.shape[k] = t.shape[k];
    r.count = t.numel;
    r.health.count = t.numel;
    r.expert = detail::expert_index(t.name);
    if (role[i] == 1) {
      r.supported = true;
      detail::scan_packed(data, lay, pairs[pair_of[i]], st, r);
      done += t.byte_size();
      if (cb.on_progress) cb.on_progress(done);
    } else if (role[i] == 3) {
      r.supported = true;
      r.packed = true;
      r.type = nanscope::dtype::f64;
      r.packed_kind = "e8m0";
      r.health = nanscope::check_e8m0(data + t.file_offset, t.numel);
      r.health.mode = st.mode;
      r.health.rank = t.rank;
      for (int k = 0; k < t.rank; ++k) r.health.shape[k] = t.shape[k];
      for (std::size_t k = 0; k < target_count; ++k)
        r.headroom[k] = nanscope::headroom_bits(r.health.abs_max, nanscope::margin_targets[k]);
      for (std::size_t k = 0; k < target_count; ++k) {
        // E8M0 values are powers of two: those at or above the threshold
        std::uint64_t c = 0;
        const double th = nanscope::info(nanscope::margin_targets[k]).overflow_threshold;
        for (std::uint64_t e = 0; e < t.numel; ++e) {
          const std::uint8_t b = data[t.file_offset + e];
          if (b != 0xFF && (nanscope::decode_e8m0(b) > th ||
                            (nanscope::margin_targets[k] != nanscope::dtype::f8_e4m3fn && nanscope::decode_e8m0(b) == th)))
            ++c;
        }
        r.overflow[k] = c;
      }
      done += t.byte_size();
      if (cb.on_progress) cb.on_progress(done);
    } else if (t.supported) {
      scan_tensor(data + t.file_offset, t.type, t.numel, false, swap, st, r, done, cb);
    } else {
      done += t.byte_size();
      if (cb.on_progress) cb.on_progress(done);
    }
    if (r.expert >= 0 && r.checked()) {
      expert_report* e = nullptr;
      for (expert_report& x : experts)
        if (x.expert == r.expert) e = &x;
      if (e == nullptr) {
        experts.emplace_back();
        e = &experts.back();
        e->file = path;
        e->expert = r.expert;
      }
      ++e->tensors;
      if (r.has_blocks) ++e->packed;
      if (r.nonfinite()) ++e->nonfinite_tensors;
      e->nan += r.health.nan;
      e->inf += r.health.pos_inf + r.health.neg_inf;
      e->abs_max = nanscope::detail::max_non_nan(e->abs_max, r.health.abs_max);
      if (r.has_blocks) {
        e->nan_scales += r.nan_scales;
        e->blocks += r.blocks.blocks;
        e->lossy_blocks += r.blocks.lossy_blocks;
        if (!nanscope::detail::is_nan_bits(r.blocks.scale_exp_mean)) {
          e->scale_exp_min = e->has_scale_exp ? std::min(e->scale_exp_min, r.blocks.scale_exp_min) : r.blocks.scale_exp_min;
          e->scale_exp_max = e->has_scale_exp ? std::max(e->scale_exp_max, r.blocks.scale_exp_max) : r.blocks.scale_exp_max;
          e->has_scale_exp = true;
        }
      }
    }
    if (cb.on_tensor) cb.on_tensor(r);
  }
  bool any_packed = false;
  for (const expert_report& e : experts) any_packed = any_packed || e.packed != 0;
  if (any_packed && cb.on_expert) {
    std::sort(experts.begin(), experts.end(), [](const expert_report& a, const expert_report& b) { return a.expert < b.expert; });
    for (const expert_report& e : experts) cb.on_expert(e);
  }
}

}  // namespace nanscope_cli

#endif  // NANSCOPE_CLI_SCAN_HPP
