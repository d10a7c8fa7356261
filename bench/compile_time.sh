#!/usr/bin/env bash
# What including nanscope costs a user's file: CPU seconds (user + system) and peak memory of one `g++ -c` for
# each translation unit below, in both modes (docs/getting-started.md, "Compile time"):
#   header-only   #include <nanscope/nanscope.hpp>: everything compiled in every file that includes it
#   light         #include <nanscope/instrument.hpp>: declarations, views, traits, scopes and macros; the heavy
#                 parts (kernels, the recorder's implementation, report printers) compiled once, in the file that
#                 defines NANSCOPE_IMPLEMENTATION (the row "implementation TU", or the nanscope::compiled target)
# and, for scale, an empty file, <fmt/format.h> and <Eigen/Dense> with one product. Each file is compiled RUNS
# times (default 3) and the median is shown; "over empty" subtracts the empty file's median. The last line is
# "N of M targets met" (targets at -O2, light header: include only <= 1.0 s over the empty file, one check()
# <= 1.5 s, one instrumented module <= 2.0 s and <= 200 MB; the implementation TU <= 40 s).
#
#   bash bench/compile_time.sh                 # -O2 and -O0, 3 runs each
#   RUNS=5 OPT="-O2" bash bench/compile_time.sh
#   CXX=clang++ bash bench/compile_time.sh
# Exit status: 0 when every target is met, 1 otherwise, 2 when a file does not compile.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CXX="${CXX:-g++}"
RUNS="${RUNS:-3}"
OPTS="${OPT:--O2 -O0}"
WORK="$(mktemp -d /tmp/nanscope_compile_time.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT

if ! command -v /usr/bin/time >/dev/null 2>&1 && ! [ -x /usr/bin/time ]; then
  echo "compile_time.sh: /usr/bin/time is needed (Debian: time)" >&2
  exit 2
fi

# --- the translation units ---------------------------------------------------------------------------------
cat >"$WORK/empty.cpp" <<'EOF'
int answer() { return 42; }
EOF
cat >"$WORK/fmt.cpp" <<'EOF'
#include <fmt/format.h>
int answer() { return 42; }
EOF
cat >"$WORK/eigen.cpp" <<'EOF'
#include <Eigen/Dense>
Eigen::MatrixXf product(const Eigen::MatrixXf& a, const Eigen::MatrixXf& b) { return a * b; }
EOF
for mode in full light; do
  if [[ $mode == full ]]; then inc='#include <nanscope/nanscope.hpp>'; else inc='#include <nanscope/instrument.hpp>'; fi
  cat >"$WORK/${mode}_include.cpp" <<EOF
$inc
int answer() { return 42; }
EOF
  cat >"$WORK/${mode}_check.cpp" <<EOF
$inc
#include <vector>
bool healthy(const std::vector<float>& x) { return !nanscope::check(x).has_nonfinite(); }
EOF
  cat >"$WORK/${mode}_module.cpp" <<EOF
$inc
#include <vector>
// one instrumented module: a scope, its input, its output and a checkpoint
std::vector<float> mlp(const std::vector<float>& x) {
  NANSCOPE_SCOPE("mlp", "MLP");
  NANSCOPE_INPUT(x);
  std::vector<float> y(x);
  for (float& v : y) v = v > 0 ? v : 0;
  DETECT_OVERFLOW(y, "after relu");
  NANSCOPE_OUTPUT(y);
  return y;
}
EOF
done
cat >"$WORK/impl.cpp" <<'EOF'
#define NANSCOPE_IMPLEMENTATION
#include <nanscope/instrument.hpp>
EOF

FMT_CFLAGS="$(pkg-config --cflags fmt 2>/dev/null || true)"
EIGEN_CFLAGS="$(pkg-config --cflags eigen3 2>/dev/null || echo -I/usr/include/eigen3)"

# measure FILE OPT -> prints "seconds kilobytes" of one compile (median of RUNS)
measure() {
  local file="$1" opt="$2" extra=""
  [[ $file == eigen.cpp ]] && extra="$EIGEN_CFLAGS"
  local samples=()
  for ((i = 0; i < RUNS; i++)); do
    if ! /usr/bin/time -f '%U %S %M' -o "$WORK/time.txt" \
        "$CXX" -std=c++17 $opt -I"$ROOT/include" $FMT_CFLAGS $extra -c "$WORK/$file" -o "$WORK/out.o" \
        2>"$WORK/err.txt"; then
      echo "compile_time.sh: $file does not compile with $opt:" >&2
      head -n 30 "$WORK/err.txt" >&2
      exit 2
    fi
    samples+=("$(tail -n 1 "$WORK/time.txt")")
  done
  printf '%s\n' "${samples[@]}" | python3 -c '
import sys, statistics
rows = [l.split() for l in sys.stdin if l.strip()]
secs = [float(u) + float(s) for u, s, _ in rows]
kb = [int(m) for _, _, m in rows]
print("%.3f %d" % (statistics.median(secs), statistics.median(kb)))'
}

met=0
total=0
judge() {  # judge NAME VALUE OP LIMIT UNIT
  local name="$1" value="$2" op="$3" limit="$4" unit="$5"
  total=$((total + 1))
  if python3 -c "import sys; sys.exit(0 if $value $op $limit else 1)"; then
    met=$((met + 1))
    printf '  met      %-52s %8s %s %s %s\n' "$name" "$value" "$op" "$limit" "$unit"
  else
    printf '  NOT MET  %-52s %8s %s %s %s\n' "$name" "$value" "$op" "$limit" "$unit"
  fi
}

echo "nanscope compile cost: $("$CXX" --version | head -n 1), $RUNS runs per file, median; $(nproc) CPUs"
for opt in $OPTS; do
  echo
  echo "== $opt =="
  read -r empty_s empty_kb < <(measure empty.cpp "$opt")
  read -r fmt_s _ < <(measure fmt.cpp "$opt")
  fmt_over=$(python3 -c "print('%.3f' % max($fmt_s - $empty_s, 1e-3))")
  printf '%-34s %9s %11s %10s %12s\n' "translation unit" "CPU s" "over empty" "peak MB" "x fmt TU"
  row() {  # row LABEL SECONDS KB
    python3 -c "
s, e, kb, f = $2, $empty_s, $3, $fmt_over
print('%-34s %9.2f %11.2f %10.0f %12.2f' % ('$1', s, s - e, kb / 1024.0, (s - e) / f))"
  }
  row "empty file" "$empty_s" "$empty_kb"
  row "<fmt/format.h>" "$fmt_s" 0
  read -r s kb < <(measure eigen.cpp "$opt")
  row "<Eigen/Dense>, one product" "$s" "$kb"
  declare -A light=()
  for mode in full light; do
    for what in include check module; do
      read -r s kb < <(measure "${mode}_${what}.cpp" "$opt")
      case $what in
        include) label="include only" ;;
        check) label="+ one check()" ;;
        module) label="+ one instrumented module" ;;
      esac
      if [[ $mode == full ]]; then row "header-only: $label" "$s" "$kb"; else row "light: $label" "$s" "$kb"; fi
      if [[ $mode == light ]]; then
        light[$what]="$(python3 -c "print('%.2f' % ($s - $empty_s))") $kb"
      fi
    done
  done
  read -r impl_s impl_kb < <(measure impl.cpp "$opt")
  row "implementation TU (once)" "$impl_s" "$impl_kb"
  if [[ $opt == -O2 ]]; then
    echo
    echo "targets ($opt, light header):"
    read -r v _ <<<"${light[include]}"
    judge "include only, s over the empty file" "$v" "<=" 1.0 s
    read -r v _ <<<"${light[check]}"
    judge "one check(), s over the empty file" "$v" "<=" 1.5 s
    read -r v kb <<<"${light[module]}"
    judge "one instrumented module, s over the empty file" "$v" "<=" 2.0 s
    judge "one instrumented module, peak MB" "$(python3 -c "print('%.0f' % ($kb / 1024.0))")" "<=" 200 MB
    judge "implementation TU, s" "$impl_s" "<=" 40 s
  fi
done
echo
echo "$met of $total targets met"
[[ $met -eq $total ]]
