// nanscope-merge's core: reads the per-rank evidence files (rank_evidence.hpp) and names the first producing
// site of a non-finite value, ordered by happens-before (program order on each rank plus collective and
// send/recv edges), never by wall clocks. Header-only so that unit tests feed it synthetic rank files.
// The model and the exit codes are in docs/multi-rank.md; the parts:
//   evidence.hpp        a rank's evidence in memory, and its exact reading from a parsed JSON document
//   json_scan.hpp       a strict JSON scanner that builds no tree
//   fast_reader.hpp     the reading of evidence text in one pass on it, for well-formed files
//   evidence_index.hpp  names shared across files, collective instances, send/recv pairs; the consistency checks
//   hb_graph.hpp        a graph in adjacency arrays and its strongly connected components
//   count_tree.hpp      persistent per-rank count trees (how many carriers happen before a carrier)
//   hb_sweep.hpp        the happens-before graph of the evidence and the sweep that orders sites and carriers
//   analysis.hpp        the analysis: first non-finite events, their kinds, the verdict
//   report.hpp          the result, as text and as JSON
#ifndef NANSCOPE_TOOLS_MERGE_HPP
#define NANSCOPE_TOOLS_MERGE_HPP

#include "analysis.hpp"
#include "evidence.hpp"
#include "fast_reader.hpp"
#include "report.hpp"

#include <nanscope/detail/read_file.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include <dirent.h>

namespace nanscope_merge {

/// Analyses loaded rank files. Throws input_error for inconsistent evidence (exit 2).
inline result analyse(const std::vector<rank_file>& files) { return detail::analysis(files).run(); }

/// Reads every evidence file in `dir` (nanscope_evidence_*.json; other .json files without the format marker
/// are ignored) and analyses them. Never throws: problems become exit 2 with `error` set.
inline result merge_dir(const std::string& dir) {
  result r;
  r.dir = dir;
  try {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) throw input_error(dir + ": cannot open the directory");
    std::vector<std::string> names;
    while (dirent* de = ::readdir(d)) {
      const std::string n = de->d_name;
      if (n.empty() || n[0] == '.' || n.size() < 5 || n.compare(n.size() - 5, 5, ".json") != 0) continue;
      names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    std::vector<rank_file> files;
    std::string text;  // one buffer for every file
    for (const auto& n : names) {
      const std::string path = dir + "/" + n;
      const bool named = n.rfind("nanscope_evidence_", 0) == 0;
      // only regular files, checked on the open descriptor: a FIFO would block the open or the read, a device
      // never end
      const nanscope::detail::read_result rd =
          nanscope::detail::read_regular_file(path, static_cast<std::uint64_t>(max_file_bytes), text);
      if (!rd.ok()) {
        if (named)
          throw input_error(path + ": " +
                            nanscope::detail::read_failure_text(rd, static_cast<std::uint64_t>(max_file_bytes),
                                                                "this tool's limit"));
        continue;
      }
      // well-formed evidence in one pass; anything else the slow way, which names the problem
      {
        rank_file f;
        if (read_evidence_fast(text, path, f)) {
          files.push_back(std::move(f));
          continue;
        }
      }
      json j;
      try {
        j = json::parse(text, detail::nesting_guard(), false);
      } catch (const input_error& e) {
        if (named) throw input_error(path + ": " + e.what());
        continue;
      }
      if (j.is_discarded()) {
        if (named) throw input_error(path + ": not valid JSON (truncated or damaged)");
        continue;
      }
      if (!named) {
        const auto fmt = j.is_object() ? j.find("format") : j.end();
        if (fmt == j.end() || !fmt->is_string() || fmt->get_ref<const std::string&>() != "nanscope-rank-evidence") continue;
      }
      try {
        files.push_back(parse_rank_file(j, path));
      } catch (const json::exception& e) {  // a shape parse_rank_file did not foresee
        throw input_error(path + ": " + e.what());
      }
    }
    std::sort(files.begin(), files.end(), [](const rank_file& a, const rank_file& b) { return a.rank < b.rank; });
    result a = analyse(files);
    a.dir = dir;
    return a;
  } catch (const input_error& e) {
    r.exit = error;
    r.verdict = "error";
    r.error = e.what();
    return r;
  } catch (const std::bad_alloc&) {
    r.exit = error;
    r.verdict = "error";
    r.error = dir + ": out of memory while reading the evidence";
    return r;
  }
}

}  // namespace nanscope_merge

#endif  // NANSCOPE_TOOLS_MERGE_HPP
