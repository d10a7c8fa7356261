// nanscope — detail/torch_print.hpp: PyTorch's printed form of a tensor, byte for byte, for the layer-tree
// writer's torch_repr style (what HuggingFace's model_addition_debugger stores: `print(tensor)` lines under
// torch.set_printoptions(sci_mode=True, linewidth=120), `repr(tensor.mean())`, `repr(tensor.shape)`).
//
// The rules reproduced (torch/_tensor_str.py):
//  - more than `threshold` (1000) elements: every dimension longer than 2*edgeitems shows its first and last
//    `edgeitems` (3) entries around "...";
//  - the element width is measured over the shown non-zero finite values, in the notation torch would have
//    chosen without sci_mode (integers "{:.0f}" + 1, fixed "{:.4f}", or sci "{:.4e}"), and every value is then
//    printed "{:{width}.4e}" because sci_mode is forced: so columns line up only when torch's own choice was sci;
//  - a floating tensor with no shown non-zero finite value (all zeros, or only inf/nan) keeps the integer
//    style, width 1, because torch's formatter returns before applying sci_mode: "tensor([0., -0., nan, inf])";
//  - elements per line = max(1, floor((linewidth - indent) / (width + 2))), continuation lines indented;
//  - suffixes (device, dtype unless float32/int64/bool, size of an empty tensor) as torch adds them.
// Floating values are formatted from their exact double value (f16/bf16/fp8 convert exactly, as torch's
// `self.float()` does); snprintf rounds exactly like Python's format().
#ifndef NANSCOPE_DETAIL_TORCH_PRINT_HPP
#define NANSCOPE_DETAIL_TORCH_PRINT_HPP

#if !defined(NANSCOPE_TREE_HPP) && !defined(NANSCOPE_IMPL_INTERNAL_INCLUDE)
#error "nanscope/detail/torch_print.hpp is internal: include <nanscope/tree.hpp> or <nanscope/nanscope.hpp>"
#endif

#include "../config.hpp"
#include "../dtype.hpp"
#include "../health.hpp"
#include "../view.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <charconv>
#include <cstring>
#include <string>
#include <vector>

NANSCOPE_NAMESPACE_BEGIN
namespace detail {

/// Print options (torch's defaults, with HuggingFace's sci_mode and linewidth).
struct torch_print_options {
  std::uint64_t threshold = 1000;
  int edge_items = 3;
  int line_width = 120;
  int precision = 4;
};

/// Python's "{:.{p}e}" / "{:.{p}f}" of a double; non-finite values as Python writes them ("nan", "inf", "-inf").
inline std::string py_format(double v, int precision, char conv) {
  const std::uint64_t b = double_to_bits(v);
  const bool neg = (b >> 63) != 0;
  if ((b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull) {
    if ((b & 0x000FFFFFFFFFFFFFull) != 0) return "nan";
    return neg ? "-inf" : "inf";
  }
  // std::to_chars with a precision is specified as printf's %.{p}e / %.{p}f in the C locale (exactly rounded),
  // and is several times faster than snprintf; snprintf is the fallback for "{:.4f}" of very large values.
  char fast[64];
  const std::to_chars_result r = std::to_chars(
      fast, fast + sizeof fast, v, conv == 'e' ? std::chars_format::scientific : std::chars_format::fixed, precision);
  if (r.ec == std::errc()) return std::string(fast, static_cast<std::size_t>(r.ptr - fast));
  char fmt_buf[16];
  std::snprintf(fmt_buf, sizeof fmt_buf, "%%.%d%c", precision, conv);
  char stack_buf[64];
  const int n = std::snprintf(stack_buf, sizeof stack_buf, fmt_buf, v);
  if (n < 0) return "?";
  if (static_cast<std::size_t>(n) < sizeof stack_buf) return std::string(stack_buf, static_cast<std::size_t>(n));
  std::string big(static_cast<std::size_t>(n) + 1, '\0');  // "{:.4f}" of 1e300 has 305 characters
  std::snprintf(&big[0], big.size(), fmt_buf, v);
  big.resize(static_cast<std::size_t>(n));
  return big;
}

inline std::string pad_left(std::string s, std::size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

/// Reads element values of a host view by flat storage offset (in elements).
struct element_reader {
  const unsigned char* base;
  dtype type;
  std::size_t size;

  explicit element_reader(const tensor_view& v)
      : base(static_cast<const unsigned char*>(v.data)), type(v.type), size(size_of(v.type)) {}
  std::uint64_t bits(std::int64_t off) const {
    std::uint64_t b = 0;
    const unsigned char* p = base + static_cast<std::size_t>(off) * size;
    switch (size) {
      case 1: b = p[0]; break;
      case 2: { std::uint16_t x; std::memcpy(&x, p, 2); b = x; break; }
      case 4: { std::uint32_t x; std::memcpy(&x, p, 4); b = x; break; }
      default: std::memcpy(&b, p, 8); break;
    }
    return b;
  }
  double as_double(std::int64_t off) const { return decode(type, bits(off)); }
  /// Integer text ("True"/"False" for bool).
  std::string as_int_text(std::int64_t off) const {
    const std::uint64_t b = bits(off);
    switch (type) {
      case dtype::boolean: return b != 0 ? "True" : "False";
      case dtype::i8: return std::to_string(static_cast<std::int8_t>(b));
      case dtype::i16: return std::to_string(static_cast<std::int16_t>(b));
      case dtype::i32: return std::to_string(static_cast<std::int32_t>(b));
      case dtype::i64: return std::to_string(static_cast<std::int64_t>(b));
      default: return std::to_string(b);
    }
  }
};

/// The indices torch shows along a dimension of length n, in order; -1 stands for the "..." entry.
inline std::vector<std::int64_t> torch_shown_indices(std::int64_t n, bool summarize, int edge) {
  std::vector<std::int64_t> out;
  const std::int64_t e = edge < 0 ? 0 : edge;
  if (summarize && n > 2 * e) {
    for (std::int64_t i = 0; i < e; ++i) out.push_back(i);
    out.push_back(-1);
    for (std::int64_t i = n - e; i < n; ++i) out.push_back(i);
  } else {
    for (std::int64_t i = 0; i < n; ++i) out.push_back(i);
  }
  return out;
}

/// Visits the storage offsets of the elements torch shows, in print order. `emit(offset)` for an element;
/// the structure callbacks are handled by the printer below, this one is for the formatter's width pass.
template <class F>
void torch_shown_elements(const tensor_view& v, bool summarize, int edge, F&& f) {
  if (v.rank == 0) {
    f(std::int64_t{0});
    return;
  }
  struct rec_t {
    const tensor_view& v;
    bool summarize;
    int edge;
    F& f;
    void run(int d, std::int64_t off) {
      for (std::int64_t i : torch_shown_indices(v.shape[d], summarize, edge)) {
        if (i < 0) continue;
        const std::int64_t o = off + i * v.strides[d];
        if (d + 1 == v.rank) {
          f(o);
        } else {
          run(d + 1, o);
        }
      }
    }
  } r{v, summarize, edge, f};
  r.run(0, 0);
}

/// torch's _Formatter, with sci_mode forced on. `int_style`: a floating tensor with no non-zero finite value
/// among the shown ones (all zeros, or only inf/nan) — torch's formatter returns before it applies sci_mode, so
/// values print as "{:.0f}" plus a "." for finite ones ("0.", "-0.", "nan", "inf"), width 1.
struct torch_formatter {
  bool floating = true;
  bool int_style = false;
  std::size_t width = 1;
  int precision = 4;

  std::string format_float(double x) const {
    if (int_style) {
      std::string s = py_format(x, 0, 'f');
      if (is_finite_bits(x)) s += '.';
      return pad_left(std::move(s), width);
    }
    return pad_left(py_format(x, precision, 'e'), width);
  }
  std::string format_int(const std::string& s) const { return pad_left(s, width); }
};

inline torch_formatter make_torch_formatter(const tensor_view& v, bool summarize, const torch_print_options& o) {
  torch_formatter fm;
  fm.precision = o.precision;
  const element_reader rd(v);
  if (!is_float(v.type)) {
    fm.floating = false;
    torch_shown_elements(v, summarize, o.edge_items, [&](std::int64_t off) {
      const std::size_t len = rd.as_int_text(off).size();
      if (len > fm.width) fm.width = len;
    });
    return fm;
  }
  // Pass 1: non-zero finite values: integral?, min and max of |x|.
  bool any = false, int_mode = true;
  double amin = 0.0, amax = 0.0;
  torch_shown_elements(v, summarize, o.edge_items, [&](std::int64_t off) {
    const double x = rd.as_double(off);
    if (!is_finite_bits(x) || x == 0.0) return;
    const double a = std::fabs(x);
    if (!any) {
      amin = amax = a;
      any = true;
    } else {
      if (a < amin) amin = a;
      if (a > amax) amax = a;
    }
    if (int_mode && std::ceil(x) != x) int_mode = false;
  });
  if (!any) {  // torch's early return: integer style, width 1, sci_mode never applied
    fm.int_style = true;
    return fm;
  }
  char notation;
  bool plus_one = false;
  if (int_mode) {
    if (amax / amin > 1000.0 || amax > 1.0e8) {
      notation = 'e';
    } else {
      notation = 'i';
      plus_one = true;
    }
  } else {
    notation = (amax / amin > 1000.0 || amax > 1.0e8 || amin < 1.0e-4) ? 'e' : 'f';
  }
  torch_shown_elements(v, summarize, o.edge_items, [&](std::int64_t off) {
    const double x = rd.as_double(off);
    if (!is_finite_bits(x) || x == 0.0) return;
    std::size_t len;
    if (notation == 'e') len = py_format(x, o.precision, 'e').size();
    else if (notation == 'f') len = py_format(x, o.precision, 'f').size();
    else len = py_format(x, 0, 'f').size() + (plus_one ? 1 : 0);
    if (len > fm.width) fm.width = len;
  });
  return fm;
}

inline std::string torch_format_at(const torch_formatter& fm, const element_reader& rd, std::int64_t off) {
  return fm.floating ? fm.format_float(rd.as_double(off)) : fm.format_int(rd.as_int_text(off));
}

struct torch_printer {
  const tensor_view& v;
  const torch_print_options& o;
  const torch_formatter& fm;
  element_reader rd;
  bool summarize;

  std::string vector_str(std::int64_t off, int d, std::size_t indent) const {
    const std::size_t element_length = fm.width + 2;
    const double avail = static_cast<double>(o.line_width) - static_cast<double>(indent);
    double per = std::floor(avail / static_cast<double>(element_length));
    if (per < 1.0) per = 1.0;
    const std::size_t per_line = static_cast<std::size_t>(per);
    std::vector<std::string> data;
    for (std::int64_t i : torch_shown_indices(v.shape[d], summarize, o.edge_items)) {
      if (i < 0) data.emplace_back(o.edge_items > 0 ? " ..." : "...");
      else data.push_back(torch_format_at(fm, rd, off + i * v.strides[d]));
    }
    std::string out = "[";
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (i != 0) {
        if (i % per_line == 0) {
          out += ",\n";
          out.append(indent + 1, ' ');
        } else {
          out += ", ";
        }
      }
      out += data[i];
    }
    return out + "]";
  }

  std::string tensor_str(std::int64_t off, int d, std::size_t indent) const {
    const int dims_left = v.rank - d;
    if (dims_left == 1) return vector_str(off, d, indent);
    std::string sep = ",";
    sep.append(static_cast<std::size_t>(dims_left - 1), '\n');
    sep.append(indent + 1, ' ');
    std::string out = "[";
    bool first = true;
    for (std::int64_t i : torch_shown_indices(v.shape[d], summarize, o.edge_items)) {
      if (!first) out += sep;
      first = false;
      if (i < 0) out += "...";
      else out += tensor_str(off + i * v.strides[d], d + 1, indent + 1);
    }
    return out + "]";
  }
};

/// "torch.Size([2, 3])"
inline std::string torch_size_repr(const tensor_view& v) {
  std::string s = "torch.Size([";
  for (int i = 0; i < v.rank; ++i) {
    if (i) s += ", ";
    s += std::to_string(v.shape[i]);
  }
  return s + "])";
}

/// Appends torch's suffixes (", dtype=torch.float16", on a new line when the line would pass the width).
inline std::string torch_add_suffixes(std::string s, const std::vector<std::string>& suffixes, std::size_t indent,
                                      int line_width) {
  const std::size_t nl = s.rfind('\n');
  // Python: len(s) - s.rfind("\n") + 1, with rfind = -1 when there is no newline.
  long long last = static_cast<long long>(s.size()) - (nl == std::string::npos ? -1LL : static_cast<long long>(nl)) + 1;
  for (const auto& suf : suffixes) {
    const long long len = static_cast<long long>(suf.size());
    if (last + len + 2 > line_width) {
      s += ",\n";
      s.append(indent, ' ');
      s += suf;
      last = static_cast<long long>(indent) + len;
    } else {
      s += ", ";
      s += suf;
      last += len + 2;
    }
  }
  return s + ")";
}

inline std::string torch_device_suffix(const tensor_view& v) {
  if (v.space == memory_space::cuda_device || v.space == memory_space::cuda_managed)
    return "device='cuda:" + std::to_string(v.device_id < 0 ? 0 : v.device_id) + "'";
  return {};
}

/// Whether torch prints "dtype=..." for a non-empty tensor of this type.
inline bool torch_default_dtype(dtype t) { return t == dtype::f32 || t == dtype::i64 || t == dtype::boolean; }

/// The full text of print(tensor) (without the final newline).
inline std::string torch_tensor_repr(const tensor_view& v, const torch_print_options& o) {
  const std::string prefix = "tensor(";
  const std::size_t indent = prefix.size();
  std::vector<std::string> suffixes;
  const std::string dev = torch_device_suffix(v);
  if (!dev.empty()) suffixes.push_back(dev);
  const std::uint64_t n = v.numel();
  std::string body;
  if (n == 0) {
    if (v.rank != 1) {
      std::string sz = "size=(";
      for (int i = 0; i < v.rank; ++i) {
        if (i) sz += ", ";
        sz += std::to_string(v.shape[i]);
      }
      suffixes.push_back(sz + ")");
    }
    if (v.type != dtype::f32) suffixes.push_back(std::string("dtype=") + info(v.type).torch_name);
    body = "[]";
  } else {
    if (!torch_default_dtype(v.type)) suffixes.push_back(std::string("dtype=") + info(v.type).torch_name);
    const bool summarize = n > o.threshold;
    const torch_formatter fm = make_torch_formatter(v, summarize, o);
    if (v.rank == 0) {
      body = torch_format_at(fm, element_reader(v), 0);
    } else {
      const torch_printer pr{v, o, fm, element_reader(v), summarize};
      body = pr.tensor_str(0, 0, indent);
    }
  }
  return torch_add_suffixes(prefix + body, suffixes, indent, o.line_width);
}

/// repr() of a 0-d tensor of type t holding x (x already rounded to t), e.g. "tensor(-8.9514e-01)".
inline std::string torch_scalar_repr(double x, dtype t, const tensor_view& like, const torch_print_options& o) {
  // a one-element view over a double: the formatter only needs the value
  const double stored = x;
  tensor_view v;
  v.data = &stored;
  v.type = dtype::f64;
  v.rank = 0;
  const torch_formatter fm = make_torch_formatter(v, false, o);
  std::vector<std::string> suffixes;
  const std::string dev = torch_device_suffix(like);
  if (!dev.empty()) suffixes.push_back(dev);
  if (!torch_default_dtype(t)) suffixes.push_back(std::string("dtype=") + info(t).torch_name);
  return torch_add_suffixes("tensor(" + fm.format_float(x), suffixes, 7, o.line_width);
}

/// x rounded to dtype t (round to nearest even), as torch stores a reduction's result.
inline double round_to_dtype(double x, dtype t) {
  switch (t) {
    case dtype::f32: return exact_double(static_cast<float>(x));
    case dtype::f16: return decode(t, encode_small_float<5, 10, true>(x));
    case dtype::bf16: return decode(t, encode_small_float<8, 7, true>(x));
    case dtype::f8_e4m3fn: return decode(t, encode_small_float<4, 3, false>(x));
    case dtype::f8_e5m2: return decode(t, encode_small_float<5, 2, true>(x));
    default: return x;
  }
}

/// mean, std, min, max as torch computes them (NaN propagates; an inf makes the mean inf, both signs NaN; any
/// non-finite value makes the std NaN), derived from nanscope's counts and finite-value statistics.
struct torch_stats {
  double mean, std, min, max;
};
inline torch_stats torch_stats_of(const health_result& h, bool round) {
  torch_stats s{qnan, qnan, qnan, qnan};
  const double inf = std::numeric_limits<double>::infinity();
  if (h.count == 0 || h.nan != 0) return s;
  // nanscope counts -0.0 as a zero (docs/formats.md, numeric conventions): a zero extreme prints as +0
  // ("tensor(0.)"). By bits, so that -ffast-math (no signed zeros) cannot fold it away.
  auto plus_zero = [](double x) { return (double_to_bits(x) << 1) == 0 ? 0.0 : x; };
  s.min = plus_zero(h.min);
  s.max = plus_zero(h.max);
  if (h.pos_inf != 0 && h.neg_inf != 0) {
    s.mean = qnan;
  } else if (h.pos_inf != 0) {
    s.mean = inf;
  } else if (h.neg_inf != 0) {
    s.mean = -inf;
  } else {
    s.mean = h.mean;
    s.std = h.std;
  }
  if (round) {
    s.mean = round_to_dtype(s.mean, h.type);
    s.std = round_to_dtype(s.std, h.type);
  }
  return s;
}

}  // namespace detail
NANSCOPE_NAMESPACE_END

#endif  // NANSCOPE_DETAIL_TORCH_PRINT_HPP
