#!/usr/bin/env bash
# The GPU check of the CUDA backend in one prepared run (issue 31 item 4), within a time budget (default 8 minutes,
# the build included): build the two CUDA targets (or take binaries built elsewhere), run the CUDA suite, the
# benchmark rows in N separate processes (rows interleaved in each), the ratio table of docs/cuda.md
# (tools/cuda_ratios.py: median and range, targets met / not met), then compute-sanitizer memcheck, racecheck and
# synccheck with the time that is left.
#
#   bash tools/gpu-check.sh                                   # build in build/gpu-check, then everything
#   bash tools/gpu-check.sh --bin-dir DIR --prefix DEPS       # binaries built on another machine (docs/cuda.md)
#   bash tools/gpu-check.sh --dry-run                         # print the plan and the commands; needs no GPU
#
# Options:
#   --build-dir DIR   configure and build here (default build/gpu-check): Release, CMAKE_CUDA_ARCHITECTURES=--arch,
#                     targets nanscope_cuda_tests and nanscope_bench_cuda only
#   --bin-dir DIR     use the binaries under DIR instead of building (DIR/tests/cuda/nanscope_cuda_tests or
#                     DIR/nanscope_cuda_tests; DIR/bench/nanscope_bench_cuda or DIR/nanscope_bench_cuda)
#   --prefix DIR      Debian packages unpacked with dpkg -x (fmt, benchmark, doctest): their libraries go on
#                     LD_LIBRARY_PATH, their CMake packages on CMAKE_PREFIX_PATH (the GPU machine has none)
#   --out DIR         logs, benchmark JSON and the table (default build/gpu-check-out/<UTC time>)
#   --arch LIST       CMAKE_CUDA_ARCHITECTURES for the build (default 90: H100/H200)
#   --runs N          benchmark processes (default 3)       --reps N        repetitions of each row (default 5)
#   --min-time S      seconds per repetition (default 0.1)  --filter REGEX  benchmark rows (default: all)
#   --budget S        seconds for everything (default 480); each step gets at most what is left, the sanitizers
#                     what the build, the suite and the benchmark left (memcheck half, racecheck a quarter)
#   --skip-build --skip-tests --skip-bench --skip-sanitizer   leave that step out (it is reported as skipped)
#   --strict          exit 1 also when a benchmark target is not met
#   --dry-run         print the steps with their commands and run nothing
# Environment: CMAKE, NVIDIA_SMI, COMPUTE_SANITIZER, PYTHON (the programs; found on PATH or under /usr/local/cuda/bin).
#
# Exit status: 0 when every step that ran passed (the suite, each sanitizer with 0 errors, every benchmark process);
# 1 when one failed or ran out of time; 2 on a usage error or a missing program. Targets not met are reported in
# the table and the summary, and fail the run only with --strict. Every step's output is in --out/<step>.log.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PROG="gpu-check.sh"

usage() { sed -n '2,/^set -euo pipefail/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "$PROG: $*" >&2; exit 2; }
need_value() { [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || die "$1 needs a value (see --help)"; }
uint_at_least() { [[ "$1" =~ ^[0-9]+$ ]] && (( $1 >= $2 )); }

build_dir="$ROOT/build/gpu-check"
bin_dir=""
prefix=""
out=""
arch="90"
runs=3
reps=5
min_time="0.1"
filter=""
budget=480
skip_build=0 skip_tests=0 skip_bench=0 skip_san=0 strict=0 dry=0

while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --build-dir) need_value "$@"; build_dir="$2"; shift 2 ;;
    --bin-dir) need_value "$@"; bin_dir="$2"; shift 2 ;;
    --prefix) need_value "$@"; prefix="$2"; shift 2 ;;
    --out) need_value "$@"; out="$2"; shift 2 ;;
    --arch) need_value "$@"; arch="$2"; shift 2 ;;
    --runs) need_value "$@"; runs="$2"; shift 2 ;;
    --reps) need_value "$@"; reps="$2"; shift 2 ;;
    --min-time) need_value "$@"; min_time="$2"; shift 2 ;;
    --filter) need_value "$@"; filter="$2"; shift 2 ;;
    --budget) need_value "$@"; budget="$2"; shift 2 ;;
    --skip-build) skip_build=1; shift ;;
    --skip-tests) skip_tests=1; shift ;;
    --skip-bench) skip_bench=1; shift ;;
    --skip-sanitizer) skip_san=1; shift ;;
    --strict) strict=1; shift ;;
    --dry-run) dry=1; shift ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

uint_at_least "$runs" 1 || die "--runs $runs: a whole number >= 1"
uint_at_least "$reps" 1 || die "--reps $reps: a whole number >= 1"
uint_at_least "$budget" 60 || die "--budget $budget: whole seconds, at least 60"
[[ "$min_time" =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--min-time $min_time: seconds, e.g. 0.1"
[[ "$arch" =~ ^[0-9]+[a-z]?(\;[0-9]+[a-z]?)*$ ]] || die "--arch $arch: e.g. 90 or '80;90'"
if [[ -n "$prefix" ]]; then
  [[ -d "$prefix" ]] || die "--prefix $prefix: no such directory (unpack the .deb files there with dpkg -x)"
  prefix="$(cd "$prefix" && pwd)"
fi
if [[ -n "$bin_dir" ]]; then
  [[ -d "$bin_dir" ]] || die "--bin-dir $bin_dir: no such directory"
  bin_dir="$(cd "$bin_dir" && pwd)"
  skip_build=1
fi
[[ -n "$out" ]] || out="$ROOT/build/gpu-check-out/$(date -u +%Y%m%d-%H%M%S)"

find_prog() {  # find_prog VAR name: $VAR if set, else PATH, else /usr/local/cuda/bin
  local var="$1" name="$2" v
  v="${!var:-}"
  if [[ -n "$v" ]]; then echo "$v"; return; fi
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return; fi
  if [[ -x "/usr/local/cuda/bin/$name" ]]; then echo "/usr/local/cuda/bin/$name"; return; fi
  echo ""
}
CMAKE_BIN="$(find_prog CMAKE cmake)"
SMI_BIN="$(find_prog NVIDIA_SMI nvidia-smi)"
SAN_BIN="$(find_prog COMPUTE_SANITIZER compute-sanitizer)"
PY_BIN="$(find_prog PYTHON python3)"

# Libraries and CMake packages of the unpacked .deb files.
if [[ -n "$prefix" ]]; then
  for d in "$prefix/usr/lib/x86_64-linux-gnu" "$prefix/usr/lib/aarch64-linux-gnu" "$prefix/usr/lib" "$prefix/lib"; do
    if [[ -d "$d" ]]; then export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
  done
fi

# Binaries.
if [[ -n "$bin_dir" ]]; then
  tests_bin="" bench_bin=""
  for c in "$bin_dir/tests/cuda/nanscope_cuda_tests" "$bin_dir/nanscope_cuda_tests"; do
    if [[ -z "$tests_bin" && -x "$c" ]]; then tests_bin="$c"; fi
  done
  for c in "$bin_dir/bench/nanscope_bench_cuda" "$bin_dir/nanscope_bench_cuda"; do
    if [[ -z "$bench_bin" && -x "$c" ]]; then bench_bin="$c"; fi
  done
  (( skip_tests && skip_san )) || [[ -n "$tests_bin" ]] ||
    die "--bin-dir $bin_dir: no executable nanscope_cuda_tests (looked in tests/cuda/ and the directory itself)"
  (( skip_bench )) || [[ -n "$bench_bin" ]] ||
    die "--bin-dir $bin_dir: no executable nanscope_bench_cuda (looked in bench/ and the directory itself)"
else
  tests_bin="$build_dir/tests/cuda/nanscope_cuda_tests"
  bench_bin="$build_dir/bench/nanscope_bench_cuda"
fi

# --- steps -------------------------------------------------------------------------------------------------------
start=$SECONDS
declare -a summary=()
failed=0
left() { echo $(( budget - (SECONDS - start) )); }
show() { printf '%q ' "$@"; echo; }

# run_step NAME CAP CMD...: runs CMD with its output in $out/NAME.log (and on the terminal), under a time limit of
# min(CAP, what is left of the budget). Records PASS / FAIL (exit code) / TIMEOUT / NOT RUN in the summary.
run_step() {
  local name="$1" cap="$2"; shift 2
  local limit rc t0
  limit=$(left)
  (( cap > 0 && cap < limit )) && limit=$cap
  if (( dry )); then
    echo "[$name] (at most ${limit}s) $(show "$@")"
    summary+=("$name: dry run")
    return 0
  fi
  if (( limit < 5 )); then
    echo "== $name: NOT RUN (the ${budget}s budget is spent)"
    summary+=("$name: NOT RUN (budget spent)")
    failed=1
    return 1
  fi
  echo "== $name (at most ${limit}s): $(show "$@")"
  t0=$SECONDS
  set +e
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  local took=$(( SECONDS - t0 ))
  if (( rc == 0 )); then
    summary+=("$name: PASS (${took}s)")
  elif (( rc == 124 || rc == 137 )); then
    summary+=("$name: TIMEOUT after ${took}s (incomplete; see $out/$name.log)")
    failed=1
  elif (( rc == 77 )); then
    summary+=("$name: SKIPPED by the program (exit 77: no CUDA device?) - not a pass")
    failed=1
  else
    summary+=("$name: FAIL (exit $rc, ${took}s; see $out/$name.log)")
    failed=1
    if grep -q "error while loading shared libraries" "$out/$name.log" 2>/dev/null; then
      summary+=("  hint: a shared library is missing; carry the .deb files unpacked with dpkg -x and pass --prefix")
    fi
  fi
  return "$rc"
}

echo "$PROG: budget ${budget}s; output in $out"
if (( ! dry )); then
  mkdir -p "$out"
  if [[ -n "$SMI_BIN" ]]; then
    "$SMI_BIN" -L > "$out/gpu.txt" 2>&1 || true
    "$SMI_BIN" --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >> "$out/gpu.txt" 2>&1 || true
    cat "$out/gpu.txt"
  else
    echo "$PROG: no nvidia-smi (the CUDA suite will say whether there is a device)" | tee "$out/gpu.txt"
  fi
fi

# 1. Build.
if (( skip_build )); then
  if [[ -n "$bin_dir" ]]; then summary+=("build: skipped (binaries from $bin_dir)"); else summary+=("build: skipped"); fi
else
  [[ -n "$CMAKE_BIN" ]] || die "no cmake (set CMAKE, or pass --bin-dir with binaries built elsewhere)"
  cfg=("$CMAKE_BIN" -S "$ROOT" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DNANSCOPE_BUILD_CUDA=ON
       "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DNANSCOPE_BUILD_TESTS=ON -DNANSCOPE_BUILD_BENCHMARKS=ON
       -DNANSCOPE_BUILD_EXAMPLES=OFF -DNANSCOPE_BUILD_TOOLS=OFF -DNANSCOPE_WITH_TORCH=OFF
       -DNANSCOPE_TEST_CONSUMPTION=OFF -DNANSCOPE_TEST_DOCS=OFF)
  if command -v ninja >/dev/null 2>&1; then cfg+=(-G Ninja); fi
  if [[ -n "$prefix" ]]; then
    cfg+=("-DCMAKE_PREFIX_PATH=$prefix/usr")
    for pkg in fmt benchmark doctest; do  # explicit, for CMake that does not search the Debian multiarch paths
      for d in "$prefix"/usr/lib/*/cmake/"$pkg" "$prefix/usr/lib/cmake/$pkg" "$prefix/usr/share/$pkg/cmake"; do
        if [[ -f "$d/$pkg-config.cmake" || -f "$d/${pkg}Config.cmake" ]]; then cfg+=("-D${pkg}_DIR=$d"); break; fi
      done
    done
  fi
  jobs="$(nproc 2>/dev/null || echo 4)"
  run_step configure 0 "${cfg[@]}" || { echo "$PROG: configure failed; see $out/configure.log" >&2; }
  if (( ! failed )); then
    run_step build 0 "$CMAKE_BIN" --build "$build_dir" --target nanscope_cuda_tests nanscope_bench_cuda -j "$jobs" ||
      echo "$PROG: build failed; see $out/build.log" >&2
  fi
fi
built_ok=$(( ! failed ))

# 2. The CUDA suite.
if (( skip_tests )); then
  summary+=("tests: skipped")
elif (( built_ok )); then
  run_step tests 0 "$tests_bin" || true
fi

# 3. The benchmark: N processes, the rows' repetitions interleaved in each; then the table.
if (( skip_bench )); then
  summary+=("bench: skipped")
elif (( built_ok )); then
  jsons=()
  for r in $(seq 1 "$runs"); do
    args=("$bench_bin" --benchmark_enable_random_interleaving=true "--benchmark_repetitions=$reps"
          --benchmark_report_aggregates_only=false "--benchmark_min_time=$min_time"
          "--benchmark_out=$out/cuda$r.json" --benchmark_out_format=json)
    if [[ -n "$filter" ]]; then args+=("--benchmark_filter=$filter"); fi
    run_step "bench$r" 0 "${args[@]}" || true
    jsons+=("$out/cuda$r.json")
  done
  if (( dry )); then
    echo "[table] $(show "${PY_BIN:-python3}" "$ROOT/tools/cuda_ratios.py" "${jsons[@]}" --rows)"
  elif [[ -z "$PY_BIN" ]]; then
    summary+=("table: NOT PRINTED (no python3; the JSON files are in $out)")
  else
    present=()
    for j in "${jsons[@]}"; do if [[ -s "$j" ]]; then present+=("$j"); fi; done
    if (( ${#present[@]} == 0 )); then
      summary+=("table: no benchmark JSON was written")
      failed=1
    else
      tflags=(--rows)
      if (( strict )); then tflags+=(--strict); fi
      set +e
      "$PY_BIN" "$ROOT/tools/cuda_ratios.py" "${present[@]}" "${tflags[@]}" | tee "$out/table.txt"
      trc=${PIPESTATUS[0]}
      "$PY_BIN" "$ROOT/tools/cuda_ratios.py" "${present[@]}" --rows --markdown > "$out/table.md" 2>/dev/null
      set -e
      met_line="$(grep '^targets met:' "$out/table.txt" | cut -c1-120 || true)"
      if (( trc == 0 )); then
        summary+=("table: ${#present[@]} run(s); ${met_line:-see $out/table.txt}")
      else
        summary+=("table: exit $trc; ${met_line:-see $out/table.txt}")
        failed=1
      fi
    fi
  fi
fi

# 4. compute-sanitizer, with what is left (memcheck first: the whole suite).
if (( skip_san )); then
  summary+=("sanitizers: skipped")
elif (( built_ok )); then
  if [[ -z "$SAN_BIN" && $dry -eq 0 ]]; then
    summary+=("sanitizers: NOT RUN (no compute-sanitizer; set COMPUTE_SANITIZER)")
    failed=1
  else
    san="${SAN_BIN:-compute-sanitizer}"
    # memcheck (the whole suite) gets at most half of what is left, racecheck half of the rest, synccheck the rest
    run_step memcheck $(( $(left) / 2 )) "$san" --tool memcheck --error-exitcode 1 "$tests_bin" || true
    run_step racecheck $(( $(left) / 2 )) "$san" --tool racecheck --error-exitcode 1 "$tests_bin" '-tc=adversarial*,clean*,batches*,block-scaled*,segmented*' ||
      true
    run_step synccheck 0 "$san" --tool synccheck --error-exitcode 1 "$tests_bin" '-tc=adversarial*,batches*,block-scaled*,segmented*' || true
  fi
fi

echo
echo "== $PROG summary ($(( SECONDS - start ))s of ${budget}s)"
for s in "${summary[@]}"; do echo "  $s"; done
if (( dry )); then
  echo "dry run: nothing was run"
  exit 0
fi
{ for s in "${summary[@]}"; do echo "$s"; done; } > "$out/summary.txt"
if (( failed )); then
  echo "$PROG: NOT CLEAN (see above; logs in $out)"
  exit 1
fi
echo "$PROG: every step that ran passed; logs in $out"
