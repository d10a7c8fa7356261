#!/usr/bin/env python3
"""The layer-tree rows of nanscope_bench_host (bench/forward_tree.cpp), from Google Benchmark JSON output:
one file per run (one benchmark process each), every run with random interleaving.

    for r in 1 2 3; do
        build/release/bench/nanscope_bench_host --benchmark_filter='^(forward24|tree_summary)' \
            --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true --benchmark_min_time=0.5 \
            --benchmark_out=tree$r.json --benchmark_out_format=json
    done
    python3 bench/tree_ratios.py tree1.json tree2.json tree3.json [--markdown]
    # or: BENCH_FILTER='^(forward24|tree_summary)' BENCH_MIN_TIME=0.5 bash bench/run_ratios.sh --tree

Per run and row: the median wall time across repetitions, its ratio to forward24_plain's and to
forward24_checked's median of the same run, the median MB/s of SUMMARY JSON (bytes written / wall time) and
the bytes per pass. Across runs each of these is the median of the runs' values; with more than one run the
ratio cells add the range, "median [min-max]", and a "runs" column counts the runs that have the row. "reps"
counts the repetitions of all runs. With one file the output is that run's values, as before. Rows whose
repetitions look not interleaved get the warning of bench/ratios.py (stderr). Standard library only.
"""
import argparse
import json
import os
import statistics
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ratios import interleaving  # noqa: E402  (same directory)

ORDER = ["forward24_plain", "forward24_checked", "forward24_tree/pruned", "forward24_tree/unpruned",
         "tree_summary/pruned", "tree_summary/unpruned"]
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def load_run(data):
    """{row: {"ms": [...], "bps": [...], "bytes": [...]}} of one run's per-repetition entries."""
    rows = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b["name"].removesuffix("/real_time")
        r = rows.setdefault(name, {"ms": [], "bps": [], "bytes": []})
        r["ms"].append(b["real_time"] * TO_MS[b.get("time_unit", "ns")])
        if "bytes_per_second" in b:
            r["bps"].append(b["bytes_per_second"])
        if "json_bytes_per_pass" in b:
            r["bytes"].append(b["json_bytes_per_pass"])
    return rows


def cell(values, fmt, with_range):
    """'-' without values; the median, and with with_range ' [min-max]' of the runs' values."""
    if not values:
        return "-"
    text = fmt.format(statistics.median(values))
    if with_range:
        text += " [" + fmt.format(min(values)) + "-" + fmt.format(max(values)) + "]"
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="Google Benchmark JSON file(s), one per run")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    runs = []
    for path in args.json:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        state, detail = interleaving(data)
        if state == "sequential":
            print(f"tree_ratios.py: warning: {path}: not run with --benchmark_enable_random_interleaving=true? "
                  f"{detail}", file=sys.stderr)
        runs.append(load_run(data))
    names = set().union(*runs)
    if not names:
        print("no rows", file=sys.stderr)
        return 2
    multi = len(runs) > 1
    # per run: the median wall time of every row
    meds = [{k: statistics.median(v["ms"]) for k, v in run.items()} for run in runs]
    headers = ["row", "median", "reps"] + (["runs"] if multi else []) + [
        "vs forward24_plain", "vs forward24_checked", "JSON MB/s", "JSON bytes/pass"]
    table = []
    for name in ORDER + sorted(k for k in names if k not in ORDER):
        if name not in names:
            continue
        present = [i for i, run in enumerate(runs) if name in run]

        def rel(base):
            if name.startswith("tree_summary"):
                return "-"
            return cell([meds[i][name] / meds[i][base] for i in present if base in meds[i]], "{:.3f}", multi)

        line = [name, cell([meds[i][name] for i in present], "{:.2f}", False) + " ms",
                str(sum(len(runs[i][name]["ms"]) for i in present))]
        if multi:
            line.append(str(len(present)))
        line += [rel("forward24_plain"), rel("forward24_checked"),
                 cell([statistics.median(runs[i][name]["bps"]) / 1e6 for i in present if runs[i][name]["bps"]],
                      "{:.1f}", multi),
                 cell([statistics.median(runs[i][name]["bytes"]) for i in present if runs[i][name]["bytes"]],
                      "{:.0f}", False)]
        table.append(line)
    if multi:
        print(f"{len(runs)} runs: median across runs of each run's value [min-max]")
        print()
    if args.markdown:
        print("| " + " | ".join(headers) + " |")
        print("|" + "---|" + "---:|" * (len(headers) - 1))
        for row in table:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(x) for x in col) for col in zip(headers, *table)]
        for row in [headers] + table:
            print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
