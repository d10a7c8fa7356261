#!/usr/bin/env bash
# Benchmark of `nanscope scan` against `cat FILE > /dev/null` on a 2 GB .safetensors file in the page cache.
#
#   cmake --preset release && cmake --build --preset release --target nanscope_cli
#   bash tools/bench_scan.sh                      # 7 repetitions; prints medians, GB/s and the ratio
#
# Environment:
#   NANSCOPE        the program (default build/release/tools/cli/nanscope)
#   BENCH_FILE      the test file (default ${TMPDIR:-/tmp}/nanscope_bench_2g[_xSCALE].safetensors), created when
#                   missing: two bf16 tensors [16384, 16384] and two f32 tensors (65536 x 2048, 32768 x 4096) of
#                   N(0, 1) values times BENCH_SCALE, 2 GiB of data in all (python3 with numpy writes it)
#   BENCH_FORMAT    bf16 (the default: the file above) or mxfp4: a packed MXFP4 file instead, an F4 weight
#                   [65536, 65536] (2 GiB, random codes) and its F8_E8M0 scales [65536, 2048] (128 MiB, exponents
#                   -9..0), default name ${TMPDIR:-/tmp}/nanscope_bench_2g_mxfp4.safetensors (issue 33's target)
#   BENCH_SCALE     multiplies the values (default 1). With 1000 every chunk holds values past fp8's 464, so the
#                   exact overflow counts (nanscope::margins) are computed everywhere: the worst case
#   BENCH_REPS      repetitions (default 7; at least 5)
#   BENCH_VARIANTS  extra nanscope argument sets, separated by ';' (default "--threads 1;--stats")
#
# Each repetition runs every command once, in an order that rotates between repetitions (cat first, then
# nanscope first, ...), so that a burst of other activity does not land on one command only. The file is read
# twice before timing so that it sits in the page cache (the machine needs RAM for it: 2 GiB).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NANSCOPE="${NANSCOPE:-$ROOT/build/release/tools/cli/nanscope}"
SCALE="${BENCH_SCALE:-1}"
FORMAT="${BENCH_FORMAT:-bf16}"
if [[ "$SCALE" == 1 ]]; then suffix=""; else suffix="_x$SCALE"; fi
if [[ "$FORMAT" == mxfp4 ]]; then suffix="_mxfp4"; fi
FILE="${BENCH_FILE:-${TMPDIR:-/tmp}/nanscope_bench_2g$suffix.safetensors}"
REPS="${BENCH_REPS:-7}"
VARIANTS="${BENCH_VARIANTS-"--threads 1;--stats"}"

if [[ ! -x "$NANSCOPE" ]]; then
  echo "bench_scan.sh: $NANSCOPE is missing; build it first:" >&2
  echo "  cmake --preset release && cmake --build --preset release --target nanscope_cli" >&2
  exit 1
fi
if (( REPS < 5 )); then
  echo "bench_scan.sh: BENCH_REPS=$REPS: use at least 5 repetitions" >&2
  exit 1
fi

# --- the file ----------------------------------------------------------------------------------------------------
if [[ ! -f "$FILE" ]]; then
  PY=""
  for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null && "$p" -c "import numpy" 2>/dev/null; then PY="$p"; break; fi
  done
  if [[ -z "$PY" ]]; then
    echo "bench_scan.sh: creating $FILE needs python3 with numpy" >&2
    exit 1
  fi
  echo "creating $FILE (2 GiB)..."
  if [[ "$FORMAT" == mxfp4 ]]; then
  "$PY" - "$FILE" <<'EOF'
import json, os, struct, sys
import numpy as np
path = sys.argv[1]
rows, cols = 65536, 65536
wbytes, sbytes = rows * cols // 2, rows * (cols // 32)
header = {"__metadata__": {"format": "pt"},
          "model.layers.0.mlp.experts.0.down_proj.weight": {"dtype": "F4", "shape": [rows, cols], "data_offsets": [0, wbytes]},
          "model.layers.0.mlp.experts.0.down_proj.weight_scale": {"dtype": "F8_E8M0", "shape": [rows, cols // 32],
                                                                  "data_offsets": [wbytes, wbytes + sbytes]}}
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
rng = np.random.default_rng(7)
with open(path + ".tmp", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for left, lo, hi in ((wbytes, 0, 256), (sbytes, 118, 128)):
        while left:
            m = min(left, 1 << 26)
            f.write(rng.integers(lo, hi, m, dtype=np.uint8).tobytes())
            left -= m
os.replace(path + ".tmp", path)
EOF
  else
  "$PY" - "$FILE" "$SCALE" <<'EOF'
import json, struct, sys
import numpy as np
path, scale = sys.argv[1], float(sys.argv[2])
tensors = [("model.layers.0.weight", "BF16", (16384, 16384)), ("model.layers.1.weight", "BF16", (16384, 16384)),
           ("model.embed.weight", "F32", (65536, 2048)), ("model.head.weight", "F32", (32768, 4096))]
header, off = {"__metadata__": {"format": "pt"}}, 0
for name, dt, shape in tensors:
    n = int(np.prod(shape)) * (2 if dt == "BF16" else 4)
    header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
    off += n
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
rng = np.random.default_rng(7)
with open(path + ".tmp", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    for name, dt, shape in tensors:
        left = int(np.prod(shape))
        while left:
            m = min(left, 1 << 25)
            x = rng.standard_normal(m, dtype=np.float32)
            if scale != 1:
                x *= np.float32(scale)
            f.write((x.view(np.uint32) >> 16).astype(np.uint16).tobytes() if dt == "BF16" else x.tobytes())
            left -= m
import os
os.replace(path + ".tmp", path)
EOF
  fi
fi
BYTES=$(stat -c %s "$FILE")

# --- commands ----------------------------------------------------------------------------------------------------
CMDS=("cat" "nanscope scan")
IFS=';' read -r -a extra <<<"$VARIANTS"
for v in "${extra[@]}"; do
  [[ -n "${v// /}" ]] && CMDS+=("nanscope scan $v")
done

run_cmd() {  # $1: the command label
  case "$1" in
    cat) cat "$FILE" >/dev/null ;;
    *)
      local args=(${1#nanscope scan})
      local rc=0
      "$NANSCOPE" scan --no-progress "${args[@]}" "$FILE" >/dev/null || rc=$?
      if (( rc != 0 )); then echo "bench_scan.sh: nanscope exited with $rc" >&2; exit 1; fi
      ;;
  esac
}

now() { date +%s.%N; }

echo "file: $FILE ($BYTES bytes); nanscope: $NANSCOPE; $(nproc) CPUs; $REPS repetitions"
echo "warming the page cache..."
cat "$FILE" >/dev/null
cat "$FILE" >/dev/null
run_cmd "nanscope scan"

declare -A times
n=${#CMDS[@]}
for ((r = 0; r < REPS; r++)); do
  for ((k = 0; k < n; k++)); do
    c="${CMDS[$(((k + r) % n))]}"
    t0=$(now)
    run_cmd "$c"
    t1=$(now)
    times[$c]+="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f", b - a }') "
  done
done

median() { tr ' ' '\n' <<<"$1" | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

cat_med=$(median "${times[cat]}")
printf '\n%-34s %10s %10s %9s %10s\n' "command" "median s" "best s" "GB/s" "vs cat"
for c in "${CMDS[@]}"; do
  med=$(median "${times[$c]}")
  best=$(tr ' ' '\n' <<<"${times[$c]}" | grep -v '^$' | sort -g | head -1)
  awk -v c="$c" -v m="$med" -v b="$best" -v B="$BYTES" -v cm="$cat_med" \
    'BEGIN { printf "%-34s %10.3f %10.3f %9.2f %10.2f\n", c, m, b, B / m / 1e9, cm / m }'
done
echo
echo "ratio = cat median time / command median time (>= 0.8 is the target for 'nanscope scan')"
