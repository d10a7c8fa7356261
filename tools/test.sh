#!/usr/bin/env bash
# nanscope's test command (README quick start, .ci/run).
#
#   bash tools/test.sh                         everything below
#   NANSCOPE_PRESETS="dev tsan" bash tools/test.sh   only these test presets (plus the two checks)
#   NANSCOPE_JOBS=4 bash tools/test.sh         more parallel jobs (default 2)
#
# Steps:
#   1. tools/install-deps.sh (installs missing Debian packages only)
#   2. python3 tools/amalgamate.py --check (the committed single header is up to date)
#   3. for each test preset: configure, build, ctest (CMakePresets.json: dev, asan-ubsan, fastmath, tsan,
#      no-exceptions, clang). Build trees stay in build/<preset> and are reused, so a second run only rebuilds
#      what changed. fastmath compiles against the single header and clang builds in C++20: the presets
#      single-include (g++, C++17) and cxx20 (g++) did the same full build once more each, and stay available
#      for NANSCOPE_PRESETS.
#   4. the release preset's benchmark target is compiled (not run), unless the dev preset ran and built it
#      (NANSCOPE_RELEASE_BENCH=1: always)
# The last line is "N passed, N failed": the CTest results of every preset (skipped tests, such as the CUDA suite
# on a machine without a GPU, are listed on the line before and counted in neither), plus one entry each for the
# amalgamation check and the benchmark build (when it runs), plus one failure for each preset that did not
# configure or build. The exit status is non-zero when anything failed.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT="$(pwd)"
JOBS="${NANSCOPE_JOBS:-2}"
PRESETS=(${NANSCOPE_PRESETS:-dev asan-ubsan fastmath tsan no-exceptions clang})
LOG_DIR="$ROOT/build/logs"

if ! bash tools/install-deps.sh; then
  echo "test.sh: installing dependencies failed" >&2
  echo "0 passed, 1 failed"
  exit 1
fi
mkdir -p "$LOG_DIR"

total_passed=0
total_failed=0
total_skipped=0
problems=()
summary=()
start_all=$SECONDS

section() { printf '\n======== %s ========\n' "$*"; }

# Shows the end of a log after a failed step.
show_failure() {
  local log="$1"
  echo "---- last 80 lines of $log ----"
  tail -n 80 "$log"
  echo "---- end of $log ----"
}

# --- amalgamation --------------------------------------------------------------------------------------------
section "single header: python3 tools/amalgamate.py --check"
if python3 tools/amalgamate.py --check; then
  total_passed=$((total_passed + 1))
else
  total_failed=$((total_failed + 1))
  problems+=("single_include/nanscope/nanscope.hpp is stale (run python3 tools/amalgamate.py)")
fi

# --- test presets --------------------------------------------------------------------------------------------
for preset in "${PRESETS[@]}"; do
  section "preset $preset"
  t0=$SECONDS
  # Configure only when the tree is new or the presets changed: `cmake --build` re-runs CMake by itself when a
  # CMakeLists.txt or a globbed directory changes, and a needless configure re-generates files (doc snippets)
  # that would then be rebuilt.
  stamp="build/$preset/.test-sh-configured"
  if [[ -f "build/$preset/CMakeCache.txt" && -f "$stamp" && ! CMakePresets.json -nt "$stamp" ]]; then
    echo "(reusing build/$preset)" >"$LOG_DIR/$preset-configure.log"
  elif cmake --preset "$preset" >"$LOG_DIR/$preset-configure.log" 2>&1; then
    touch "$stamp"
  else
    rm -f "$stamp"
    show_failure "$LOG_DIR/$preset-configure.log"
    total_failed=$((total_failed + 1))
    problems+=("$preset: configure failed ($LOG_DIR/$preset-configure.log)")
    summary+=("$(printf '%-16s configure FAILED' "$preset")")
    continue
  fi
  t1=$SECONDS
  echo "configured in $((t1 - t0)) s; building (-j$JOBS)..."
  if ! cmake --build --preset "$preset" -j "$JOBS" >"$LOG_DIR/$preset-build.log" 2>&1; then
    show_failure "$LOG_DIR/$preset-build.log"
    total_failed=$((total_failed + 1))
    problems+=("$preset: build failed ($LOG_DIR/$preset-build.log)")
    summary+=("$(printf '%-16s build FAILED after %4d s' "$preset" $((SECONDS - t1)))")
    continue
  fi
  t2=$SECONDS
  echo "built in $((t2 - t1)) s; testing..."
  ctest --preset "$preset" -j "$JOBS" 2>&1 | tee "$LOG_DIR/$preset-test.log"
  t3=$SECONDS
  # "100% tests passed, 0 tests failed out of 42" (disabled tests are not counted)
  line="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$LOG_DIR/$preset-test.log" | tail -n 1)"
  if [[ -z "$line" ]]; then
    total_failed=$((total_failed + 1))
    problems+=("$preset: ctest produced no result line ($LOG_DIR/$preset-test.log)")
    summary+=("$(printf '%-16s configure %3d s  build %4d s  test %4d s  NO RESULT' "$preset" \
      $((t1 - t0)) $((t2 - t1)) $((t3 - t2)))")
    continue
  fi
  failed="$(sed -E 's/^[0-9]+% tests passed, ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")"
  total="$(sed -E 's/^[0-9]+% tests passed, ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")"
  # Skipped tests (a CUDA suite on a machine without a GPU: exit code 77) are neither passed nor failed.
  skipped="$(grep -cE '^[[:space:]]*[0-9]+ - .*\(Skipped\)$' "$LOG_DIR/$preset-test.log")"
  passed=$((total - failed - skipped))
  total_passed=$((total_passed + passed))
  total_skipped=$((total_skipped + skipped))
  total_failed=$((total_failed + failed))
  if [[ "$failed" -ne 0 ]]; then
    problems+=("$preset: $failed of $total tests failed ($LOG_DIR/$preset-test.log)")
  fi
  summary+=("$(printf '%-16s configure %3d s  build %4d s  test %4d s  %4d passed %3d failed %2d skipped' "$preset" \
    $((t1 - t0)) $((t2 - t1)) $((t3 - t2)) "$passed" "$failed" "$skipped")")
done

# --- benchmarks: compile only --------------------------------------------------------------------------------
section "preset release: build nanscope_bench_host (not run)"
t0=$SECONDS
rm -f "$LOG_DIR/release-configure.log" "$LOG_DIR/release-build.log"
if [[ ! -f bench/CMakeLists.txt ]]; then
  echo "no bench/CMakeLists.txt: skipped"
  summary+=("$(printf '%-16s bench build skipped (no bench/CMakeLists.txt)' release)")
elif [[ " ${PRESETS[*]} " == *" dev "* && -x build/dev/bench/nanscope_bench_host && -z "${NANSCOPE_RELEASE_BENCH:-}" ]]; then
  # The dev preset builds every benchmark (-O2 -Werror); compiling them again at -O3 added minutes and found
  # nothing new. NANSCOPE_RELEASE_BENCH=1 builds them here anyway.
  echo "skipped: the dev preset built nanscope_bench_host (NANSCOPE_RELEASE_BENCH=1 builds the release one too)"
  summary+=("$(printf '%-16s bench build skipped (built by dev)' release)")
elif cmake --preset release >"$LOG_DIR/release-configure.log" 2>&1 &&
   cmake --build --preset release -j "$JOBS" --target nanscope_bench_host >"$LOG_DIR/release-build.log" 2>&1; then
  total_passed=$((total_passed + 1))
  summary+=("$(printf '%-16s bench build %4d s  ok' release $((SECONDS - t0)))")
else
  [[ -f "$LOG_DIR/release-build.log" ]] && show_failure "$LOG_DIR/release-build.log" || show_failure "$LOG_DIR/release-configure.log"
  total_failed=$((total_failed + 1))
  problems+=("release: the benchmark target did not build ($LOG_DIR/release-*.log)")
  summary+=("$(printf '%-16s bench build %4d s  FAILED' release $((SECONDS - t0)))")
fi

# --- summary -------------------------------------------------------------------------------------------------
section "summary ($((SECONDS - start_all)) s in all)"
printf '%s\n' "${summary[@]}"
if [[ ${#problems[@]} -gt 0 ]]; then
  echo
  echo "Problems:"
  printf '  - %s\n' "${problems[@]}"
fi
echo
[[ $total_skipped -ne 0 ]] && echo "$total_skipped skipped (not counted as passed; e.g. CUDA tests without a CUDA device)"
echo "$total_passed passed, $total_failed failed"
[[ $total_failed -eq 0 ]]
