#!/usr/bin/env bash
# Interleaved benchmark runs of nanscope_bench_host and their ratios: runs the benchmark RUNS times as separate
# processes, each with Google Benchmark's random interleaving of the repetitions of all rows, then gives all the
# JSON files to bench/ratios.py (or bench/tree_ratios.py), which prints every ratio as the median and range
# (min-max) across the runs and judges each target on the worst run (ratios.py: the smallest run's ratio against a
# ">=" target such as health_hist >= 0.85x health, the largest against a "<=" target such as forward_checked
# <= 1.03x forward_plain's time).
#
#   cmake --preset release && cmake --build --preset release --target nanscope_bench_host
#   bash bench/run_ratios.sh                                   # 3 runs, every row; ratio table
#   bash bench/run_ratios.sh -n 5 -f '/67108864' -- --markdown --table
#   bash bench/run_ratios.sh -f '^(forward_(plain|checked|disabled)|(health|health_hist)/(f32|f16|bf16)/67108864/)'
#   bash bench/run_ratios.sh --tree -f '^(forward24|tree_summary)'   # the layer-tree rows (tree_ratios.py)
#
# Options (each also as an environment variable):
#   -n RUNS, BENCH_RUNS            separate processes (default 3; ratios are reported over at least 3)
#   -f REGEX, BENCH_FILTER         --benchmark_filter of every run (default: every row)
#   -o DIR, BENCH_OUT              where run1.json ... go (default build/bench-runs/<date-time>)
#   --tree                         give the files to bench/tree_ratios.py instead of bench/ratios.py
#   -- ARGS...                     the rest goes to the ratio script (--markdown, --table, --info, --strict, ...)
# Environment only:
#   BENCH_BIN        the benchmark (default build/release/bench/nanscope_bench_host of this checkout)
#   BENCH_REPS       --benchmark_repetitions of every run (default 5)
#   BENCH_MIN_TIME   --benchmark_min_time of every run (default 0.2)
#   PYTHON           the Python 3 interpreter (default python3)
# Each run is
#   BENCH_BIN --benchmark_enable_random_interleaving=true --benchmark_repetitions=5 --benchmark_min_time=0.2
#             --benchmark_out=DIR/run<i>.json --benchmark_out_format=json [--benchmark_filter=REGEX]
# Set NANSCOPE_BENCH_CACHE_MB=2048 in the environment for the 67108864-element rows (docs/benchmarks.md): with
# interleaving every buffer should stay cached. Exit status: the ratio script's (1 with --strict when a target
# fails); 2 on bad usage; 1 when the benchmark is missing or a run fails.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${BENCH_BIN:-$ROOT/build/release/bench/nanscope_bench_host}"
RUNS="${BENCH_RUNS:-3}"
FILTER="${BENCH_FILTER:-}"
OUT="${BENCH_OUT:-}"
REPS="${BENCH_REPS:-5}"
MIN_TIME="${BENCH_MIN_TIME:-0.2}"
PY="${PYTHON:-python3}"
SCRIPT="$ROOT/bench/ratios.py"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

while (($#)); do
  case "$1" in
    -n) (($# >= 2)) || usage; RUNS="$2"; shift 2 ;;
    -f) (($# >= 2)) || usage; FILTER="$2"; shift 2 ;;
    -o) (($# >= 2)) || usage; OUT="$2"; shift 2 ;;
    --tree) SCRIPT="$ROOT/bench/tree_ratios.py"; shift ;;
    -h|--help) usage ;;
    --) shift; break ;;
    *) echo "run_ratios.sh: unknown argument '$1' (ratio script options go after --)" >&2; exit 2 ;;
  esac
done

if ! [[ "$RUNS" =~ ^[0-9]+$ ]] || ((RUNS < 1)); then
  echo "run_ratios.sh: the number of runs must be a positive integer, not '$RUNS'" >&2
  exit 2
fi
if [[ ! -x "$BIN" ]]; then
  echo "run_ratios.sh: the benchmark $BIN is missing (or not executable); build it first:" >&2
  echo "  cmake --preset release && cmake --build --preset release --target nanscope_bench_host" >&2
  exit 1
fi
if ((RUNS < 3)); then
  echo "run_ratios.sh: note: $RUNS run(s); the documented ratios use at least 3" >&2
fi
OUT="${OUT:-$ROOT/build/bench-runs/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"

files=()
for ((i = 1; i <= RUNS; i++)); do
  json="$OUT/run$i.json"
  args=(--benchmark_enable_random_interleaving=true "--benchmark_repetitions=$REPS"
        "--benchmark_min_time=$MIN_TIME" "--benchmark_out=$json" --benchmark_out_format=json)
  [[ -n "$FILTER" ]] && args+=("--benchmark_filter=$FILTER")
  echo "run_ratios.sh: run $i of $RUNS -> $json" >&2
  rc=0
  "$BIN" "${args[@]}" >"$OUT/run$i.log" 2>&1 || rc=$?
  if ((rc != 0)) || [[ ! -s "$json" ]]; then
    echo "run_ratios.sh: run $i failed (exit status $rc); its output is in $OUT/run$i.log:" >&2
    tail -n 20 "$OUT/run$i.log" >&2 || true
    exit 1
  fi
  files+=("$json")
done

echo "run_ratios.sh: $RUNS runs in $OUT" >&2
exec "$PY" "$SCRIPT" "${files[@]}" "$@"
