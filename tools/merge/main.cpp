// nanscope-merge DIR: reads the per-rank evidence files of a multi-rank run and names the rank, step, module and
// tensor that produced the first non-finite value, by happens-before, with the collectives that carried it.
// Exit: 0 no fault, 1 fault attributed, 2 error, 3 evidence incomplete. See docs/multi-rank.md.
#include "merge.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  CLI::App app{"nanscope-merge: names the rank and site that produced the first NaN/Inf of a multi-rank run"};
  std::string dir;
  bool as_json = false;
  app.add_option("DIR", dir, "directory holding the ranks' nanscope_evidence_rank<R>of<N>.json files")->required();
  app.add_flag("--json", as_json, "print the result as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // --help prints on stdout: a failed write there is an error too
    std::cout.flush();
    if (rc == 0 && (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout) != 0)) {
      std::fputs("nanscope-merge: error: cannot write the output\n", stderr);
      return 2;
    }
    return rc == 0 ? 0 : 2;
  }
  const nanscope_merge::result r = nanscope_merge::merge_dir(dir);
  const std::string text = as_json ? nanscope_merge::to_json(r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" : nanscope_merge::to_text(r);
  if (r.exit == nanscope_merge::error && !as_json) {
    std::fputs(text.c_str(), stderr);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fputs("nanscope-merge: error: cannot write the output\n", stderr);
    return 2;
  }
  return r.exit;
}
