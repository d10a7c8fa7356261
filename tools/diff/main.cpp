// nanscope-diff: compares two layer-tree JSON files (nanscope's tree_writer output or the files of HuggingFace's
// model_addition_debugger_context) and reports where the two runs first diverge. See docs/diff.md.
//
//   nanscope-diff [options] A.json B.json        A = reference, B = candidate
//
// Exit status: 0 same within tolerance, 1 diverged (values, structure or health), 2 bad input, usage, or a report
// that could not be written.
#include "bitwise.hpp"
#include "diff.hpp"
#include "names.hpp"
#include "pair.hpp"
#include "segments.hpp"
#include "tree_model.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <csignal>
#include <unistd.h>

#ifndef NANSCOPE_TOOLS_VERSION
#define NANSCOPE_TOOLS_VERSION "(version unknown)"  // tools/CMakeLists.txt passes the project's version
#endif

namespace {

using nsdiff::json;

constexpr const char* usage_text =
    "usage: nanscope-diff [options] A.json B.json\n"
    "Compares two layer-tree files (nanscope's tree_writer or HuggingFace's model_addition_debugger_context,\n"
    "SUMMARY or FULL_TENSORS, torch_repr or numeric style). A is the reference, B the candidate.\n"
    "\n"
    "options:\n"
    "  --rtol X          relative tolerance for every tensor (default: by dtype, see docs/diff.md)\n"
    "  --atol X          absolute tolerance for every tensor (default: rtol * max(|min|,|max|) of A's tensor)\n"
    "  --top N           rows in the table of largest divergences (default 10; 0: no table)\n"
    "  --json            print a machine-readable JSON report instead of text\n"
    "  --quiet           print only the verdict line\n"
    "  --ignore-extras   ignore nanscope's extra keys (health counts, abs_max); infer health from statistics\n"
    "  --prune-layers    prune both trees like the Python tool (first and last layer block) before comparing\n"
    "  --strict-text     count differing non-tensor arguments (reprs) as divergences\n"
    "  --fifo-wait S     seconds to wait for the writer of a named pipe with none (default 5)\n"
    "  --max-input-size N  refuse inputs larger than N bytes (K, M, G suffixes: KiB...; default 512M; 0: no limit)\n"
    "  --bitwise         compare content hashes instead (trees written with tree_options::with_hash()):\n"
    "                    name the first tensor whose bits differ\n"
    "  -h, --help        this text\n"
    "  --version         print the version (nanscope-diff X.Y.Z) and exit\n"
    "\n"
    "exit status: 0 same within tolerance, 1 diverged, 2 bad input, usage, or the report could not be written\n";

struct cli {
  nsdiff::diff_options diff;
  std::size_t top = 10;
  bool json = false;
  bool quiet = false;
  nsdiff::input_limits limits;
  bool bitwise = false;
  std::vector<std::string> files;
};

/// Writes all of `text` to standard output; on failure says so on stderr and exits 2 (the report is lost).
void write_stdout(const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      std::cerr << "nanscope-diff: cannot write the report to standard output: " << std::strerror(err) << "\n";
      std::exit(2);
    }
    done += static_cast<std::size_t>(n);
  }
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "nanscope-diff: " << nsdiff::terminal_safe(msg) << "\n"
            << "usage: nanscope-diff [options] A.json B.json (--help for more)\n";
  std::exit(2);
}

/// "1048576", "64K", "512M", "1G" (binary multiples).
std::uint64_t parse_size(const std::string& opt, const std::string& text) {
  std::uint64_t mult = 1;
  std::string digits = text;
  if (!digits.empty()) {
    const char u = digits.back();
    if (u == 'K' || u == 'k') mult = std::uint64_t{1} << 10;
    else if (u == 'M' || u == 'm') mult = std::uint64_t{1} << 20;
    else if (u == 'G' || u == 'g') mult = std::uint64_t{1} << 30;
    else if (u == 'T' || u == 't') mult = std::uint64_t{1} << 40;
    if (mult != 1) digits.pop_back();
  }
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = digits.empty() || digits[0] == '-' ? 0 : std::strtoull(digits.c_str(), &end, 10);
  if (digits.empty() || digits[0] == '-' || *end != '\0' || errno != 0 || n > UINT64_MAX / mult)
    usage_error(opt + ": expected a size in bytes (with an optional K, M, G or T suffix), got '" + text + "'");
  return static_cast<std::uint64_t>(n) * mult;
}

double parse_tolerance(const std::string& opt, const std::string& text) {
  double x = 0;
  if (!nsdiff::parse_number(text, x) || !std::isfinite(x) || x < 0)
    usage_error(opt + ": expected a non-negative number, got '" + text + "'");
  return x;
}

cli parse_args(int argc, char** argv) {
  cli c;
  bool options_done = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (options_done || arg.empty() || arg[0] != '-' || arg == "-") {
      c.files.push_back(arg);
      continue;
    }
    if (arg == "--") {
      options_done = true;
      continue;
    }
    std::string value;
    bool has_value = false;
    const std::size_t eq = arg.find('=');
    if (arg.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
      has_value = true;
    }
    auto take_value = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) usage_error(arg + " needs a value");
      return argv[++i];
    };
    auto no_value = [&]() {
      if (has_value) usage_error(arg + " takes no value");
    };
    if (arg == "-h" || arg == "--help") {
      write_stdout(usage_text);
      std::exit(0);
    } else if (arg == "--version") {
      no_value();
      write_stdout("nanscope-diff " NANSCOPE_TOOLS_VERSION "\n");
      std::exit(0);
    } else if (arg == "--rtol") {
      c.diff.rtol = parse_tolerance(arg, take_value());
      c.diff.rtol_set = true;
    } else if (arg == "--atol") {
      c.diff.atol = parse_tolerance(arg, take_value());
      c.diff.atol_set = true;
    } else if (arg == "--top") {
      const std::string v = take_value();
      char* end = nullptr;
      errno = 0;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 0 || errno != 0) usage_error("--top: expected a non-negative integer, got '" + v + "'");
      c.top = static_cast<std::size_t>(n);
    } else if (arg == "--fifo-wait") {
      const std::string v = take_value();
      double x = 0;
      if (!nsdiff::parse_number(v, x) || !std::isfinite(x) || x < 0 || x > 1.0e6)
        usage_error("--fifo-wait: expected a number of seconds (0 to 1e6), got '" + v + "'");
      c.limits.fifo_wait_s = x;
    } else if (arg == "--max-input-size") {
      c.limits.max_bytes = parse_size(arg, take_value());
    } else if (arg == "--json") {
      no_value();
      c.json = true;
    } else if (arg == "--quiet" || arg == "-q") {
      no_value();
      c.quiet = true;
    } else if (arg == "--ignore-extras") {
      no_value();
      c.diff.use_extras = false;
    } else if (arg == "--prune-layers") {
      no_value();
      c.diff.prune = true;
    } else if (arg == "--strict-text") {
      no_value();
      c.diff.strict_text = true;
    } else if (arg == "--bitwise") {
      no_value();
      c.bitwise = true;
    } else {
      usage_error("unknown option '" + arg + "'");
    }
  }
  if (c.files.size() != 2)
    usage_error(c.files.size() < 2 ? "expected two tree files, A (reference) and B (candidate)"
                                   : "expected two tree files, got " + std::to_string(c.files.size()));
  return c;
}

// --- formatting ---------------------------------------------------------------------------------------------

/// Text from the files or the command line, safe to print to a terminal (see names.hpp).
std::string safe(const std::string& s) { return nsdiff::terminal_safe(s); }

std::string num(double x, int digits = 4) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*e", digits, x);
  return buf;
}

json jnum(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

std::string style_of(const nsdiff::tree_file& f) {
  if (f.tensors == 0) return "no tensors";
  if (f.numeric_tensors == 0) return "torch_repr";
  if (f.torch_tensors == 0) return "numeric";
  return "mixed styles";
}

std::string describe_file(const nsdiff::tree_file& f) {
  return style_of(f) + ", " + (f.tensors_with_values ? "with values" : "statistics only") + ", " +
         std::to_string(f.nodes) + " modules, " + std::to_string(f.tensors) + " tensors";
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

/// Why a tensor whose shown values agree still diverged.
/// An element count held as a double: exact below 2^53, else 6 significant digits (a shape's product can pass
/// 2^64, where a cast to an integer is undefined).
std::string count_text(double n) {
  if (n < 9007199254740992.0) return std::to_string(static_cast<std::uint64_t>(n));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", n);
  return buf;
}
nlohmann::json count_json(double n) {
  if (n < 9007199254740992.0) return static_cast<std::uint64_t>(n);
  return n;
}

std::string elided_text(const nsdiff::tensor_result& t) {
  return "its " + std::to_string(t.values_compared) + " shown values agree, torch's print elided " +
         count_text(t.elided) + " of " + count_text(t.numel) + ": the verdict rests on its statistics";
}

/// What went wrong with one diverged tensor, in a few words.
std::string tensor_problem(const nsdiff::tensor_result& t) {
  std::vector<std::string> parts;
  if (t.has_worst && !t.worst.pass) {
    parts.push_back(t.worst.field + " " + num(t.worst.a) + " vs " + num(t.worst.b) + " (|A-B| " + num(t.worst.abs_diff, 2) +
                    " > tol " + num(t.worst.tol, 2) + ")");
  }
  if (t.shape_changed) parts.push_back("shape " + t.shape_a + " vs " + t.shape_b);
  if (t.dtype_changed) parts.push_back("dtype " + t.dtype_a + " vs " + t.dtype_b);
  for (const auto& h : t.health) parts.push_back(h);
  if (t.rests_on_elided()) parts.push_back(elided_text(t));
  std::string s;
  for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? "; " : "") + parts[i];
  return s;
}

std::string failed_counts(const nsdiff::tensor_result& t) {
  std::string s;
  if (t.stats_compared) s += std::to_string(t.stats_failed) + "/" + std::to_string(t.stats_compared) + " stats";
  if (t.values_compared) {
    if (!s.empty()) s += ", ";
    s += std::to_string(t.values_failed) + "/" + std::to_string(t.values_compared) + " values";
  }
  return s;
}

std::string producer_text(const nsdiff::report& r) { return nsdiff::likely_producer_text(r); }

std::vector<const nsdiff::tensor_result*> table_rows(const nsdiff::report& r, bool& within) {
  std::vector<const nsdiff::tensor_result*> rows;
  for (const auto& t : r.tensors)
    if (t.has_worst && !t.worst.pass) rows.push_back(&t);
  within = rows.empty();
  if (within)
    for (const auto& t : r.tensors)
      if (t.has_worst && t.worst.abs_diff > 0) rows.push_back(&t);
  std::stable_sort(rows.begin(), rows.end(), [](const nsdiff::tensor_result* x, const nsdiff::tensor_result* y) {
    return nsdiff::larger_diff(x->worst, y->worst);
  });
  return rows;
}

std::string structural_text(const nsdiff::structural_diff& s) {
  if (s.kind == "missing module")
    return "missing in B: module " + s.module + (s.a.empty() ? "" : " (and its " + plural(std::stoul(s.a), "submodule", "submodules") + ")");
  if (s.kind == "extra module")
    return "extra in B:   module " + s.module + (s.b.empty() ? "" : " (and its " + plural(std::stoul(s.b), "submodule", "submodules") + ")");
  if (s.kind == "missing tensor") return "missing in B: tensor " + s.module + " " + s.tensor;
  if (s.kind == "extra tensor") return "extra in B:   tensor " + s.module + " " + s.tensor;
  if (s.kind == "shape") return "shape changed: " + s.module + " " + s.tensor + ": " + s.a + " -> " + s.b;
  if (s.kind == "dtype") return "dtype changed: " + s.module + " " + s.tensor + ": " + s.a + " -> " + s.b;
  return "tensor vs non-tensor: " + s.module + " " + s.tensor + ": " + s.a + " -> " + s.b;
}

/// The verdict: the report's divergences, and segments bad in one run only or in both with other counts (tensors
/// whose bad segments both files record).
bool diverged(const nsdiff::report& r, const nsdiff::diff_options& o) { return r.verdict_diverged(o); }

std::string verdict_text(const nsdiff::report& r, const nsdiff::diff_options& o) {
  if (!diverged(r, o))
    return "verdict: same within tolerance (" + plural(r.tensors_compared, "tensor", "tensors") +
           (r.params_compared ? " and " + plural(r.params_compared, "parameter", "parameters") : std::string()) + ", " +
           std::to_string(r.stats_compared + r.values_compared) + " numbers compared)";
  std::vector<std::string> parts;
  std::size_t value_diverged = 0;
  for (const auto& t : r.tensors)
    if (t.stats_failed || t.values_failed) ++value_diverged;
  if (value_diverged) parts.push_back(plural(value_diverged, "tensor", "tensors") + " beyond tolerance");
  if (!r.structural.empty()) parts.push_back(plural(r.structural.size(), "structural difference", "structural differences"));
  if (r.health_diffs) parts.push_back(plural(r.health_diffs, "health difference", "health differences"));
  if (r.segment_diffs) parts.push_back(plural(r.segment_diffs, "segment difference", "segment differences"));
  if (o.strict_text && !r.texts.empty()) parts.push_back(plural(r.texts.size(), "argument difference", "argument differences"));
  std::string s = "verdict: DIVERGED (";
  for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  return s + ")";
}

std::string tolerance_text(const nsdiff::diff_options& o) {
  std::string s = "tolerance: |A-B| <= atol + rtol*max(|A|,|B|); ";
  if (o.rtol_set) {
    s += "rtol " + num(o.rtol, 2) + " (--rtol)";
  } else {
    s += "rtol by dtype (float32/64 1e-4, float16 3.9e-3, bfloat16 3.1e-2, float8 0.125/0.25, integers exact)";
  }
  s += "; ";
  if (o.atol_set) s += "atol " + num(o.atol, 2) + " (--atol)";
  else s += "atol = rtol * max(|min|,|max|) of A's tensor";
  return s;
}

void print_table(std::ostream& out, const nsdiff::report& r, std::size_t top) {
  bool within = false;
  std::vector<const nsdiff::tensor_result*> rows = table_rows(r, within);
  if (rows.empty() || top == 0) return;
  const std::size_t total = rows.size();
  if (rows.size() > top) rows.resize(top);
  out << "\n";
  if (within) out << "largest differences (all within tolerance; " << rows.size() << " of " << total << " tensors):\n";
  else out << "largest divergences (" << rows.size() << " of " << total << " tensors beyond tolerance, by relative difference):\n";
  std::vector<std::vector<std::string>> cells;
  cells.push_back({"module", "tensor", "field", "A", "B", "|A-B|", "rel", "tol", "failed"});
  for (const auto* t : rows)
    cells.push_back({safe(r.nodes[t->node].display), safe(t->label), t->worst.field, num(t->worst.a), num(t->worst.b),
                     num(t->worst.abs_diff, 2), num(t->worst.rel, 2), num(t->worst.tol, 2), failed_counts(*t)});
  std::vector<std::size_t> width(cells[0].size(), 0);
  for (const auto& row : cells)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : cells) {
    std::string line = " ";
    for (std::size_t c = 0; c < row.size(); ++c) {
      line += " " + row[c];
      if (c + 1 < row.size()) line.append(width[c] - row[c].size(), ' ');
    }
    out << line << "\n";
  }
}

/// The report's notes plus those about what could only be compared by statistics.
std::vector<std::string> all_notes(const nsdiff::tree_file& a, const nsdiff::tree_file& b, const nsdiff::report& r) {
  std::vector<std::string> notes = r.notes;
  std::size_t on_elided = 0;
  for (const auto& t : r.tensors)
    if (t.rests_on_elided()) ++on_elided;
  if (on_elided)
    notes.push_back(plural(on_elided, "tensor diverges", "tensors diverge") +
                    " only in mean/std/min/max while every shown value agrees: the difference sits in values torch's "
                    "print elided (\"...\"), so those verdicts rest on the statistics (mean and std are compared with "
                    "atol / min(sqrt(numel), 64) when values are elided)");
  std::size_t skipped = 0;
  for (const auto& t : r.tensors)
    if (!t.values_skipped.empty()) ++skipped;
  if (skipped)
    notes.push_back(plural(skipped, "tensor", "tensors") +
                    " shown with different summarising in the two files: only their statistics were compared");
  if (a.tensors_with_values == 0 && b.tensors_with_values == 0)
    notes.push_back("neither file has values (SUMMARY files): tensors were compared by their statistics only");
  else if (a.tensors_with_values == 0 || b.tensors_with_values == 0)
    notes.push_back(std::string(a.tensors_with_values == 0 ? "A" : "B") +
                    " has no values (a SUMMARY file): tensors were compared by their statistics only");
  return notes;
}

/// The bad segments of a file's first NaN/Inf (its tensor recorded with a segmentation), each with the module that
/// produced it in the file; empty when it has none.
std::vector<std::string> bad_segment_lines(const nsdiff::origin& o, const nsdiff::tree_file& f) {
  if (!o.found() || o.at == nullptr) return {};
  const nsdiff::slot* s = nsdiff::slot_labelled(*o.at, o.label);
  if (s == nullptr || s->kind != nsdiff::slot_kind::tensor || s->tensor.segments.empty()) return {};
  return nsdiff::segment_lines(s->tensor, &f.root);
}

void print_text(std::ostream& out, const cli& c, const nsdiff::tree_file& a, const nsdiff::tree_file& b,
                const nsdiff::report& r) {
  const auto& o = c.diff;
  if (c.quiet) {
    out << verdict_text(r, o) << "\n";
    return;
  }
  out << "nanscope-diff\n";
  out << "  A (reference): " << safe(a.file) << "  [" << describe_file(a) << "]\n";
  out << "  B (candidate): " << safe(b.file) << "  [" << describe_file(b) << "]\n";
  out << "  " << tolerance_text(o) << "\n";
  out << "  compared: " << plural(r.nodes.size(), "module", "modules") << ", " << plural(r.tensors_compared, "tensor", "tensors")
      << (r.params_compared ? ", " + plural(r.params_compared, "parameter", "parameters") : std::string()) << ", "
      << plural(r.stats_compared, "statistic", "statistics") << ", " << plural(r.values_compared, "value", "values")
      << "\n";

  if (r.first >= 0) {
    const auto& t = r.tensors[static_cast<std::size_t>(r.first)];
    out << "\nfirst divergence: " << safe(r.nodes[t.node].display + " " + t.label + ": " + tensor_problem(t)) << "\n";
    out << "likely producer: " << safe(producer_text(r)) << "\n";
  }
  if (r.detection_a || r.detection_b) out << (r.first >= 0 ? "" : "\n");
  if (r.detection_a) out << "recorded detection in A: " << safe(nsdiff::detection_text(r.origin_a)) << "\n";
  if (r.detection_b) out << "recorded detection in B: " << safe(nsdiff::detection_text(r.origin_b)) << "\n";
  // a first NaN/Inf recorded with a segmentation: its bad requests (experts, blocks) and who produced each
  for (const auto& [side, org, f] : {std::make_tuple('A', &r.origin_a, &a), std::make_tuple('B', &r.origin_b, &b)}) {
    const std::vector<std::string> lines = bad_segment_lines(*org, *f);
    if (lines.empty()) continue;
    out << "bad segments of " << side << "'s first NaN/Inf (" << safe(nsdiff::node_name(*org->at) + " " + org->label)
        << "):\n";
    for (const std::string& l : lines) out << "  " << safe(l) << "\n";
  }
  print_table(out, r, c.top);

  if (!r.structural.empty()) {
    out << "\nstructural differences (" << r.structural.size() << "):\n";
    for (const auto& s : r.structural) out << "  " << safe(structural_text(s)) << "\n";
  }
  if (r.health_diffs) {
    out << "\nhealth differences (" << r.health_diffs << "):\n";
    for (const auto& t : r.tensors)
      for (const auto& h : t.health) out << "  " << safe(r.nodes[t.node].display + " " + t.label + ": " + h) << "\n";
  }
  if (r.segment_tensors) {  // tensors whose bad segments both files record: which segments are bad where
    out << "\nbad segments, A vs B (" << nsdiff::segment_comparison_summary(r) << "):\n";
    for (const auto& t : r.tensors) {
      if (!t.segments_compared) continue;
      for (const std::string& l : nsdiff::comparison_lines(t.segments))
        out << "  " << safe(r.nodes[t.node].display + " " + t.label + ": " + l) << "\n";
    }
  }
  if (!r.texts.empty()) {
    out << "\nnon-tensor arguments that differ (" << r.texts.size()
        << (o.strict_text ? ", counted: --strict-text" : ", not counted; --strict-text counts them") << "):\n";
    for (const auto& t : r.texts) {
      std::string line = t.module + " " + t.label + ": ";
      if (t.missing_a) line += "only in B: " + nsdiff::quote_text(t.b);
      else if (t.missing_b) line += "only in A: " + nsdiff::quote_text(t.a);
      else line += nsdiff::quote_text(t.a) + " vs " + nsdiff::quote_text(t.b);
      out << "  " << safe(line) << "\n";
    }
  }
  const std::vector<std::string> notes = all_notes(a, b, r);
  if (!notes.empty()) {
    out << "\nnotes:\n";
    for (const auto& n : notes) out << "  " << safe(n) << "\n";
  }
  out << "\n" << verdict_text(r, o) << "\n";
}

json field_json(const nsdiff::field_diff& d) {
  return json{{"field", d.field}, {"a", jnum(d.a)},     {"b", jnum(d.b)},      {"abs_diff", jnum(d.abs_diff)},
              {"rel", jnum(d.rel)}, {"tol", jnum(d.tol)}, {"pass", d.pass}};
}

json tensor_json(const nsdiff::report& r, const nsdiff::tensor_result& t) {
  json j{{"module", r.nodes[t.node].display},
         {"tensor", t.label},
         {"rtol", jnum(t.rtol)},
         {"atol", jnum(t.atol)},
         {"stats_compared", t.stats_compared},
         {"stats_failed", t.stats_failed},
         {"values_compared", t.values_compared},
         {"values_failed", t.values_failed},
         {"health", t.health}};
  if (t.has_worst) j["worst"] = field_json(t.worst);
  if (t.shape_changed) j["shape"] = {t.shape_a, t.shape_b};
  if (t.dtype_changed) j["dtype"] = {t.dtype_a, t.dtype_b};
  if (!t.values_skipped.empty()) j["values_skipped"] = t.values_skipped;
  if (t.stats_atol != t.atol) j["stats_atol"] = jnum(t.stats_atol);
  if (t.elided > 0) j["elided_values"] = count_json(t.elided);
  // what the verdict on this tensor rests on: "values" (a shown value differs), "statistics" (only mean/std/min/
  // max differ), "structure" (shape/dtype), "health"; "elided" says the statistics cover values the files elide
  if (t.diverged()) {
    j["rests_on"] = t.values_failed ? "values" : t.stats_failed ? "statistics" : (t.shape_changed || t.dtype_changed) ? "structure" : "health";
    j["rests_on_elided_values"] = t.rests_on_elided();
  }
  return j;
}

void print_json(std::ostream& out, const cli& c, const nsdiff::tree_file& a, const nsdiff::tree_file& b,
                const nsdiff::report& r) {
  const auto& o = c.diff;
  auto file_json = [](const nsdiff::tree_file& f) {
    return json{{"file", nsdiff::valid_utf8(f.file)},       {"style", style_of(f)},    {"values", f.tensors_with_values > 0},
                {"modules", f.nodes},   {"tensors", f.tensors},    {"nanscope", f.nanscope_meta}};
  };
  json j;
  j["a"] = file_json(a);
  j["b"] = file_json(b);
  j["tolerance"] = {{"rtol", o.rtol_set ? json(o.rtol) : json("by dtype")},
                    {"atol", o.atol_set ? json(o.atol) : json("rtol * max(|min|,|max|) of A")}};
  const bool differ = diverged(r, o);
  j["verdict"] = differ ? "diverged" : "same";
  j["exit_code"] = differ ? 1 : 0;
  j["compared"] = {{"modules", r.nodes.size()},
                   {"tensors", r.tensors_compared},
                   {"parameters", r.params_compared},
                   {"statistics", r.stats_compared},
                   {"values", r.values_compared}};
  if (r.first >= 0) {
    const auto& t = r.tensors[static_cast<std::size_t>(r.first)];
    json f = tensor_json(r, t);
    f["side"] = t.param ? "parameters" : t.input ? "inputs" : "outputs";
    f["text"] = tensor_problem(t);
    j["first_divergence"] = f;
    const nsdiff::likely_producer& p = r.likely;
    j["likely_producer"] = p.module.empty() ? json(nullptr) : json(p.module);
    j["likely_producer_text"] = producer_text(r);
    auto opt = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
    j["producer"] = {{"kind", p.kind},
                     {"module", opt(p.module)},
                     {"after", opt(p.after)},
                     {"before", opt(p.before)},
                     {"checkpoint", opt(p.checkpoint)},
                     {"parameter", opt(p.parameter)},
                     {"left_out", opt(p.pruned)},
                     {"source", p.source},
                     {"inferred", p.inferred},
                     {"alternatives", p.alternatives},
                     {"text", p.text}};
  } else {
    j["first_divergence"] = nullptr;
    j["likely_producer"] = nullptr;
    j["producer"] = nullptr;
  }
  auto detection_json = [](const nsdiff::origin& o, bool has) -> json {
    if (!has) return nullptr;
    auto opt = [](const std::string& v) { return v.empty() ? json(nullptr) : json(v); };
    json d{{"module", o.det_at ? json(o.det_at->path) : json(nullptr)},
           {"checkpoint", o.det_at && o.det_at->is_checkpoint ? json(o.det_at->checkpoint) : json(nullptr)},
           {"tensor", opt(o.det_label)},
           {"produced_here", o.det_produced_here < 0 ? json(nullptr) : json(o.det_produced_here == 1)},
           {"producer", opt(o.module)},
           {"after", opt(o.after)},
           {"step", o.has_step ? json(o.step) : json(nullptr)},
           {"text", nsdiff::detection_text(o)}};
    if (o.det_at == nullptr) d["module"] = o.det_name;
    return d;
  };
  j["detections"] = {{"a", detection_json(r.origin_a, r.detection_a)}, {"b", detection_json(r.origin_b, r.detection_b)}};
  {  // only when a first NaN/Inf was recorded with a segmentation
    const std::vector<std::string> sa = bad_segment_lines(r.origin_a, a), sb = bad_segment_lines(r.origin_b, b);
    if (!sa.empty() || !sb.empty()) j["bad_segments"] = {{"a", sa}, {"b", sb}};
  }
  auto pruning_json = [](const nsdiff::tree_file& f, const nsdiff::pruning_info& p) {
    json gaps = json::array();
    for (const auto& g : p.gaps) gaps.push_back(g.text());
    return json{{"pruned", f.pruned_known ? json(f.pruned) : json(nullptr)}, {"left_out", gaps}};
  };
  j["pruning"] = {{"a", pruning_json(a, r.pruning_a)}, {"b", pruning_json(b, r.pruning_b)}};
  bool within = false;
  std::vector<const nsdiff::tensor_result*> rows = table_rows(r, within);
  json div = json::array();
  if (!within)
    for (const auto* t : rows) div.push_back(tensor_json(r, *t));
  j["divergences"] = div;
  json st = json::array();
  for (const auto& s : r.structural)
    st.push_back({{"kind", s.kind}, {"module", s.module}, {"tensor", s.tensor}, {"a", s.a}, {"b", s.b}, {"text", structural_text(s)}});
  j["structural"] = st;
  json he = json::array();
  for (const auto& t : r.tensors)
    for (const auto& h : t.health) he.push_back({{"module", r.nodes[t.node].display}, {"tensor", t.label}, {"what", h}});
  j["health"] = he;
  auto segment_json = [](const nsdiff::segment_info& g) {
    return json{{"unit", g.unit},
                {"index", g.index},
                {"id", g.id},
                {g.rows ? "rows" : "elements", {g.first_unit, g.last_unit}},
                {"nan", g.nan},
                {"pos_inf", g.pos_inf},
                {"neg_inf", g.neg_inf},
                {"first", g.first},
                {"text", nsdiff::segment_text(g)}};
  };
  json sc = json::array();
  for (const auto& t : r.tensors) {
    if (!t.segments_compared) continue;
    const nsdiff::segment_comparison& c = t.segments;
    json bo = json::array(), ao = json::array(), both = json::array();
    for (const auto& g : c.b_only) bo.push_back(segment_json(g));
    for (const auto& g : c.a_only) ao.push_back(segment_json(g));
    for (const auto& p : c.both) both.push_back({{"a", segment_json(p.a)}, {"b", segment_json(p.b)}, {"same", p.same}});
    sc.push_back({{"module", r.nodes[t.node].display},
                  {"tensor", t.label},
                  {"segmentations_differ", c.mismatch.empty() ? json(nullptr) : json(c.mismatch)},
                  {"b_only", bo},
                  {"a_only", ao},
                  {"both", both},
                  {"differences", c.differences()},
                  {"lines", nsdiff::comparison_lines(c)}});
  }
  j["segment_comparison"] = sc;
  json tx = json::array();
  for (const auto& t : r.texts)
    tx.push_back({{"module", t.module}, {"argument", t.label}, {"a", t.missing_a ? json(nullptr) : json(t.a)},
                  {"b", t.missing_b ? json(nullptr) : json(t.b)}});
  j["text_differences"] = tx;
  json notes = json::array();
  for (const auto& n : all_notes(a, b, r)) notes.push_back(nsdiff::valid_utf8(n));  // may name files
  j["notes"] = notes;
  // every string is valid UTF-8 already (file names went through valid_utf8); replace is a second guard
  out << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
}

}  // namespace

/// The SUMMARY/FULL_TENSORS pair rule for input `i`: when it is named *_SUMMARY.json or *_FULL_TENSORS.json and
/// its sibling exists, and either carries "nanscope_pair", both must carry the same value. Returns a message for
/// exit 2, or "" (a note may be added when the sibling cannot be read and the file has no pair key).
std::string check_pair(const cli& c, const nsdiff::tree_file (&trees)[2], int i, std::vector<std::string>& notes) {
  const nsdiff::tree_file& t = trees[i];
  const std::string sibling = nsdiff::pair_sibling(t.file);
  if (sibling.empty() || !nsdiff::path_exists(sibling)) return std::string();
  nsdiff::pair_id other;
  const nsdiff::tree_file& o = trees[1 - i];
  if (sibling == o.file) {
    other = o.pair;  // the two inputs are the pair itself: it was read already
  } else {
    try {
      other = nsdiff::read_pair(sibling, c.limits);
    } catch (const nsdiff::bad_input& e) {
      if (t.pair.present)
        return "cannot check that " + t.file + " and its sibling " + sibling + " are one pass: " + sibling + ": " + e.what();
      notes.push_back("could not read " + sibling + " to check that it is one pass with " + t.file + ": " + e.what());
      return std::string();
    }
  }
  if (!t.pair.present && !other.present) return std::string();  // HuggingFace's files: nothing to check
  if (t.pair == other) return std::string();
  return t.file + " (" + nsdiff::pair_text(t.pair) + ") and " + sibling + " (" + nsdiff::pair_text(other) +
         ") are not one pass: the writer was interrupted between its two commits or one file is stale";
}

int main(int argc, char** argv) {
  // A closed pipe on stdout is a write error (EPIPE, exit 2 with a message), not a silent death by SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  const cli c = parse_args(argc, argv);
  nsdiff::tree_file trees[2];
  for (int i = 0; i < 2; ++i) {
    const std::string& file = c.files[static_cast<std::size_t>(i)];
    try {
      trees[i] = nsdiff::load_tree_file(file, c.limits);
    } catch (const nsdiff::bad_input& e) {
      std::cerr << "nanscope-diff: " << safe(file) << ": " << safe(e.what()) << "\n";
      return 2;
    } catch (const std::bad_alloc&) {
      std::cerr << "nanscope-diff: " << safe(file) << ": out of memory while reading\n";
      return 2;
    }
  }
  std::vector<std::string> pair_notes;
  for (int i = 0; i < 2; ++i) {
    const std::string problem = check_pair(c, trees, i, pair_notes);
    if (!problem.empty()) {
      std::cerr << "nanscope-diff: " << safe(problem) << "\n";
      return 2;
    }
  }
  std::string text;
  int status = 0;
  try {
    std::ostringstream out;
    if (c.bitwise) {
      status = nsdiff::run_bitwise(out, std::cerr, trees[0], trees[1], c.json, c.quiet);
    } else {
      nsdiff::report r = nsdiff::diff_trees(trees[0], trees[1], c.diff);
      r.notes.insert(r.notes.end(), pair_notes.begin(), pair_notes.end());
      if (c.json) print_json(out, c, trees[0], trees[1], r);
      else print_text(out, c, trees[0], trees[1], r);
      status = diverged(r, c.diff) ? 1 : 0;
    }
    text = out.str();
  } catch (const std::exception& e) {
    std::cerr << "nanscope-diff: internal error: " << safe(e.what()) << "\n";
    return 2;
  }
  write_stdout(text);
  return status;
}
