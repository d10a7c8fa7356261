#!/usr/bin/env python3
"""Tests of tools/gpu-check.sh and its table printer tools/cuda_ratios.py, without a GPU.

    python3 tests/cuda/gpu_check_test.py --group table --work DIR
    python3 tests/cuda/gpu_check_test.py --group script --work DIR

table:  cuda_ratios.py on the saved benchmark runs of tests/cuda/fixtures/cuda_bench_run{1,2,3}.json (H200-like
        times, shuffled rows, run 3 with one row written as aggregates only and one row missing). The expected
        ratios are computed here from the fixture's own numbers (per run the median of the repetitions, then the
        median and range across runs, the worst run against the target), not copied from the script's output.
script: gpu-check.sh's argument parsing and refusals (exit 2 with a message), --dry-run, and a whole run against
        stand-in programs (a test binary, a benchmark that writes a fixture run, compute-sanitizer, nvidia-smi)
        from --bin-dir with --prefix: every step, the summary, the table, and a failing sanitizer making the run
        NOT CLEAN (exit 1). Skipped (77) without bash or timeout.
Standard library only.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RATIOS = os.path.join(ROOT, "tools", "cuda_ratios.py")
SCRIPT = os.path.join(ROOT, "tools", "gpu-check.sh")
FIXTURES = [os.path.join(HERE, "fixtures", f"cuda_bench_run{r}.json") for r in (1, 2, 3)]

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def fixture_medians(path):
    """Independent reading of a fixture: {row: median us}."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    reps, aggs = {}, {}
    for b in doc["benchmarks"]:
        name = b["run_name"].replace("/manual_time", "")
        if b["run_type"] == "iteration":
            reps.setdefault(name, []).append(b["real_time"])
        elif b.get("aggregate_name") == "median":
            aggs[name] = b["real_time"]
    out = {k: statistics.median(v) for k, v in reps.items()}
    for k, v in aggs.items():
        out.setdefault(k, v)
    return out


def line_of(text, label):
    for line in text.splitlines():
        if line.startswith(label):
            return line
    return ""


def group_table():
    runs = [fixture_medians(p) for p in FIXTURES]
    rc, out, err = run([sys.executable, RATIOS] + FIXTURES + ["--rows"])
    expect(rc == 0, f"cuda_ratios.py exits 0 without --strict (got {rc}; {err})")

    # throughput ratios: anchor time / health time, per run
    for dt, goal in (("f32", 0.90), ("bf16", 0.90), ("f64", 0.85), ("e4m3fn", 0.80)):
        vals = [r[f"read_anchor/{dt}/67108864"] / r[f"health/{dt}/67108864"] for r in runs]
        want = f"{statistics.median(vals):.3f} ({min(vals):.3f}-{max(vals):.3f})"
        line = line_of(out, f"{dt} health (STATS) / read_anchor, 67108864")
        expect(want in line, f"{dt} health ratio: want '{want}' in '{line}'")
        met = min(vals) >= goal
        is_met = re.search(r"\s\smet \(worst run", line) is not None
        expect(is_met == met and ("not met" in line) == (not met),
               f"{dt} health target status (worst {min(vals):.3f} vs {goal}): '{line}'")

    # a ">=" target met on every run
    vals = [r["read_anchor/f32/67108864"] / r["full_health/f32/67108864"] for r in runs]
    line = line_of(out, "f32 full_health")
    expect(f"{statistics.median(vals):.3f}" in line and " met (worst run" in line and "not met" not in line,
           f"f32 full_health met: '{line}'")
    # a row some run lacks: missing, naming the row and the run
    line = line_of(out, "bf16 full_health")
    expect("missing: full_health/bf16/67108864 (run 3)" in line, f"bf16 full_health missing in run 3: '{line}'")
    # rows no run has
    line = line_of(out, "forward_checked_graph / forward_plain_graph")
    expect("missing: forward_checked_graph (run 1), forward_plain_graph (run 1)" in line,
           f"graph rows missing: '{line}'")

    # time ratios, one run's forward_plain written as aggregates only (the median aggregate is used)
    vals = [r["forward_checked"] / r["forward_plain"] for r in runs]
    line = line_of(out, "forward_checked / forward_plain")
    expect(f"{statistics.median(vals):.3f}" in line and "not met" in line and "<= 1.030" in line,
           f"forward_checked ratio {statistics.median(vals):.3f}, not met: '{line}'")
    vals = [r["per_tensor/1000x65536"] / r["batched/1000x65536"] for r in runs]
    line = line_of(out, "per_tensor / batched")
    expect(f"{statistics.median(vals):.1f}x" in line and " met (worst run" in line, f"per_tensor/batched: '{line}'")

    # the fixed cost per check: per_tensor time less 1000 x 65536 f32 at the anchor's bandwidth, per check
    vals = [(r["per_tensor/1000x65536"] - r["read_anchor/f32/67108864"] * 1000 * 65536 / 67108864) / 1000
            for r in runs]
    line = line_of(out, "per_tensor/1000x65536: us per check")
    expect(f"{statistics.median(vals):.2f} us" in line and "not met" in line, f"fixed cost: '{line}'")

    # the information row has no target
    line = line_of(out, "forward_checked_batch / forward_plain")
    expect(line.rstrip().endswith("information"), f"information row: '{line}'")
    # the row table pools the runs
    line = line_of(out, "health/f32/67108864 ")
    want = statistics.median([r["health/f32/67108864"] for r in runs])
    expect(f"{want:.1f}" in line, f"row table health/f32: want {want:.1f} in '{line}'")
    m = re.search(r"^targets met: (\d+) of (\d+)", out, re.M)
    expect(m is not None and m.group(2) == "13" and m.group(1) == "2", f"summary line: {m and m.group(0)}")

    # no health_mx rows in the fixtures: no block-scaled lines
    expect("health_mx" not in out, "no health_mx information lines without health_mx rows")
    # health_mx rows (f32 only; mxfp4's time 1.6x health's, times the run's index; nvfp4 missing in run 2) and one
    # variant row (unitpath, 4x health_mx): information lines, computed per run, no new target
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        mx_files = []
        for i, path in enumerate(FIXTURES):
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
            h = runs[i]["health/f32/67108864"]
            for row, t in (("health_mx/f32/67108864/mxfp4", 1.6 * (i + 1) * h),
                           ("health_mx/f32/67108864/nvfp4", 3.0 * h),
                           ("health_mx_unitpath/f32/67108864/mxfp4", 4.0 * 1.6 * (i + 1) * h)):
                if i == 1 and row.endswith("nvfp4"):
                    continue
                doc["benchmarks"].append({"name": row + "/manual_time", "run_name": row + "/manual_time",
                                          "run_type": "iteration", "real_time": t, "time_unit": "us"})
            mx_files.append(os.path.join(tmp, f"mx{i}.json"))
            with open(mx_files[-1], "w", encoding="utf-8") as f:
                json.dump(doc, f)
        rc, out, err = run([sys.executable, RATIOS] + mx_files)
        expect(rc == 0, f"with health_mx rows: exit 0 (got {rc}; {err})")
        vals = [1 / (1.6 * (i + 1)) for i in range(3)]
        line = line_of(out, "f32 health / health_mx (mxfp4), 67108864")
        want = f"{statistics.median(vals):.3f} ({min(vals):.3f}-{max(vals):.3f})"
        expect(want in line and line.rstrip().endswith("information"), f"mxfp4 line: want '{want}' in '{line}'")
        line = line_of(out, "f32 health / health_mx (nvfp4), 67108864")
        expect("missing: health_mx/f32/67108864/nvfp4 (run 2)" in line, f"nvfp4 missing in run 2: '{line}'")
        line = line_of(out, "f32 health_mx_unitpath / health_mx (mxfp4), 67108864")
        expect("4.000 (4.000-4.000)" in line, f"unitpath line: '{line}'")
        expect(line_of(out, "f32 health_mx_unroll2") == "", "no unroll2 line without unroll2 rows")
        expect(line_of(out, "bf16 health / health_mx") == "", "no bf16 lines without bf16 health_mx rows")
        m = re.search(r"^targets met: (\d+) of (\d+)", out, re.M)
        expect(m is not None and m.group(2) == "13", f"health_mx lines are not targets: {m and m.group(0)}")

    # --strict, --markdown, one run, an unreadable file
    rc, _, _ = run([sys.executable, RATIOS] + FIXTURES + ["--strict"])
    expect(rc == 1, f"--strict exits 1 when a target is not met (got {rc})")
    rc, out, _ = run([sys.executable, RATIOS] + FIXTURES + ["--markdown"])
    expect(rc == 0 and "| ratio | median (range) | runs | target | status |" in out and "|---|---|" in out,
           "--markdown table header")
    rc, out, err = run([sys.executable, RATIOS, FIXTURES[0]])
    expect(rc == 0 and "1 run(s)" in out and "fewer than 3 runs" in err, "one run: table and a note on stderr")
    rc, out, err = run([sys.executable, RATIOS, os.path.join(HERE, "fixtures", "ptxas_spill.txt")])
    expect(rc == 2 and "cannot read" in err, f"not JSON: exit 2 with a message (got {rc}: {err.strip()})")


STUB_TESTS = """#!/usr/bin/env bash
echo "stub nanscope_cuda_tests $*"
exit "${STUB_TESTS_RC:-0}"
"""
STUB_BENCH = """#!/usr/bin/env bash
# writes fixture run N (the Nth call) to --benchmark_out
out=""
for a in "$@"; do case "$a" in --benchmark_out=*) out="${a#--benchmark_out=}" ;; esac; done
[[ "$*" == *--benchmark_enable_random_interleaving=true* ]] || { echo "not interleaved" >&2; exit 3; }
n=$(( $(cat "$STUB_STATE" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$STUB_STATE"
cp "$STUB_FIXTURES/cuda_bench_run$n.json" "$out"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
"""
STUB_SAN = """#!/usr/bin/env bash
echo "stub compute-sanitizer $*"
[[ "$2" == "${STUB_SAN_FAIL:-none}" ]] && { echo "========= ERROR SUMMARY: 1 error"; exit 1; }
echo "========= ERROR SUMMARY: 0 errors"
"""
STUB_SMI = """#!/usr/bin/env bash
echo "GPU 0: stub GPU (UUID: GPU-0)"
"""


def write_exe(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, 0o755)


def group_script(work):
    bash = shutil.which("bash")
    if bash is None or shutil.which("timeout") is None:
        print("SKIPPED: no bash or timeout")
        return 77
    # usage errors: exit 2 with a message naming the problem
    for args, msg in ((["--runs", "0"], "--runs 0"), (["--budget", "10"], "--budget 10"), (["--bogus"], "unknown"),
                      (["--reps"], "--reps needs a value"), (["--min-time", "x"], "--min-time x"),
                      (["--bin-dir", os.path.join(work, "nope")], "no such directory"),
                      (["--prefix", os.path.join(work, "nope")], "dpkg -x"), (["--arch", "sm90"], "--arch sm90")):
        rc, out, err = run([bash, SCRIPT] + args)
        expect(rc == 2 and msg in err, f"gpu-check.sh {' '.join(args)}: exit 2 naming '{msg}' (got {rc}: {err})")
    rc, out, _ = run([bash, SCRIPT, "--help"])
    expect(rc == 0 and "--bin-dir DIR" in out and "set -euo" not in out, "--help prints the options")

    # dry run: the plan, nothing run, no GPU needed
    rc, out, err = run([bash, SCRIPT, "--dry-run", "--out", os.path.join(work, "dry"), "--runs", "2"])
    expect(rc == 0 and "[build]" in out and "[bench2]" in out and "[bench3]" not in out and "[memcheck]" in out
           and "dry run: nothing was run" in out and not os.path.exists(os.path.join(work, "dry")),
           f"--dry-run plan (rc {rc}): {out[-400:]} {err}")

    # a whole run with stand-in programs, from --bin-dir, with a --prefix of "unpacked packages"
    bins = os.path.join(work, "bins")
    stubs = os.path.join(work, "stubs")
    prefix = os.path.join(work, "prefix")
    for d in (os.path.join(bins, "tests", "cuda"), os.path.join(bins, "bench"), stubs,
              os.path.join(prefix, "usr", "lib", "x86_64-linux-gnu")):
        os.makedirs(d, exist_ok=True)
    write_exe(os.path.join(bins, "tests", "cuda", "nanscope_cuda_tests"), STUB_TESTS)
    write_exe(os.path.join(bins, "bench", "nanscope_bench_cuda"), STUB_BENCH)
    write_exe(os.path.join(stubs, "compute-sanitizer"), STUB_SAN)
    write_exe(os.path.join(stubs, "nvidia-smi"), STUB_SMI)
    state = os.path.join(work, "bench_calls")

    def whole(name, extra_env):
        if os.path.exists(state):
            os.remove(state)
        env = dict(os.environ, STUB_STATE=state, STUB_FIXTURES=os.path.join(HERE, "fixtures"),
                   COMPUTE_SANITIZER=os.path.join(stubs, "compute-sanitizer"),
                   NVIDIA_SMI=os.path.join(stubs, "nvidia-smi"), PYTHON=sys.executable, **extra_env)
        out_dir = os.path.join(work, name)
        if os.path.exists(out_dir):
            shutil.rmtree(out_dir)
        rc, out, err = run([bash, SCRIPT, "--bin-dir", bins, "--prefix", prefix, "--out", out_dir], env=env)
        return rc, out, err, out_dir

    rc, out, err, out_dir = whole("clean", {})
    expect(rc == 0 and "every step that ran passed" in out, f"stub run passes (rc {rc}): {out[-600:]} {err}")
    for step in ("tests: PASS", "bench1: PASS", "bench2: PASS", "bench3: PASS", "memcheck: PASS", "racecheck: PASS",
                 "synccheck: PASS", "build: skipped (binaries from"):
        expect(step in out, f"summary has '{step}'")
    expect("table: 3 run(s); targets met: 2 of 13" in out, "summary has the table's count")
    expect("f32 health (STATS) / read_anchor, 67108864" in out and "stub GPU" in out, "table and GPU name printed")
    expect(os.path.isfile(os.path.join(out_dir, "table.md")) and os.path.isfile(os.path.join(out_dir, "cuda3.json")),
           "table.md and the JSON of each run kept")
    with open(os.path.join(out_dir, "bench1.log"), encoding="utf-8") as f:
        expect("prefix/usr/lib/x86_64-linux-gnu" in f.read(), "--prefix's libraries on LD_LIBRARY_PATH")
    with open(os.path.join(out_dir, "racecheck.log"), encoding="utf-8") as f:
        expect("-tc=adversarial*,clean*,batches*,block-scaled*,segmented*" in f.read(), "racecheck runs the documented test cases")

    rc, out, err, _ = whole("san_fail", {"STUB_SAN_FAIL": "racecheck"})
    expect(rc == 1 and "racecheck: FAIL (exit 1" in out and "NOT CLEAN" in out and "synccheck: PASS" in out,
           f"a failing sanitizer makes the run NOT CLEAN (rc {rc}): {out[-500:]}")
    rc, out, err, _ = whole("no_device", {"STUB_TESTS_RC": "77"})
    expect(rc == 1 and "tests: SKIPPED by the program (exit 77" in out,
           f"a suite that skips (no device) is not a pass (rc {rc}): {out[-500:]}")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", choices=["table", "script"], required=True)
    ap.add_argument("--work", default="gpu_check_work")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    rc = group_table() if args.group == "table" else group_script(os.path.abspath(args.work))
    if rc == 77:
        return 77
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print(f"OK: gpu-check {args.group}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
