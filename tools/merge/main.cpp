// nanscope-merge DIR: reads the per-rank evidence files of a multi-rank run and names the rank, step, module and
// tensor that produced the first non-finite value, by happens-before, with the collectives that carried it.
// Exit: 0 no fault, 1 fault attributed, 2 error, 3 evidence incomplete. See docs/multi-rank.md.
#include "merge.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>

#ifndef NANSCOPE_TOOLS_VERSION
#define NANSCOPE_TOOLS_VERSION "(version unknown)"  // tools/CMakeLists.txt passes the project's version
#endif

int main(int argc, char** argv) {
  // The name is given: CLI11 would otherwise show argv[0], a build path, in the usage line.
  CLI::App app{"nanscope-merge: names the rank and site that produced the first NaN/Inf of a multi-rank run",
               "nanscope-merge"};
  app.set_version_flag("--version", "nanscope-merge " NANSCOPE_TOOLS_VERSION);
  app.footer(
      "Exit status: 0 no fault (every rank's file present, none holds a non-finite value); 1 fault attributed\n"
      "(the first producing site named); 2 error (DIR unreadable, a damaged evidence file, evidence that\n"
      "contradicts itself); 3 evidence incomplete (a rank's file missing: the earliest site among the ranks\n"
      "present is printed).\n"
      "Documentation: docs/multi-rank.md");
  std::string dir;
  bool as_json = false;
  app.add_option("DIR", dir, "directory holding the ranks' nanscope_evidence_rank<R>of<N>.json files")->required();
  app.add_flag("--json", as_json, "print the result as JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // --help / --version print on stdout: a failed write there is an error too
    std::cout.flush();
    if (rc == 0 && (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout) != 0)) {
      std::fputs("nanscope-merge: error: cannot write the output\n", stderr);
      return 2;
    }
    return rc == 0 ? 0 : 2;
  }
  const nanscope_merge::result r = nanscope_merge::merge_dir(dir);
  const std::string text = as_json ? nanscope_merge::to_json_text(r) : nanscope_merge::to_text(r);
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
