#!/usr/bin/env python3
"""The layer-tree rows of nanscope_bench_host (bench/forward_tree.cpp), from Google Benchmark JSON output.

    build/release/bench/nanscope_bench_host --benchmark_filter='^(forward24|tree_summary)' \
        --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true \
        --benchmark_out=tree.json --benchmark_out_format=json
    python3 bench/tree_ratios.py tree.json [--markdown]

Prints, per row, the median wall time across repetitions, the ratio to forward24_plain and to
forward24_checked, and the median MB/s of SUMMARY JSON (bytes written / wall time) with the bytes per pass.
Standard library only.
"""
import argparse
import json
import statistics
import sys

ORDER = ["forward24_plain", "forward24_checked", "forward24_tree/pruned", "forward24_tree/unpruned",
         "tree_summary/pruned", "tree_summary/unpruned"]
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    with open(args.json) as f:
        data = json.load(f)
    runs = {}
    for b in data.get("benchmarks", []):
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        name = b["name"].removesuffix("/real_time")
        r = runs.setdefault(name, {"ms": [], "bps": [], "bytes": []})
        r["ms"].append(b["real_time"] * TO_MS[b.get("time_unit", "ns")])
        if "bytes_per_second" in b:
            r["bps"].append(b["bytes_per_second"])
        if "json_bytes_per_pass" in b:
            r["bytes"].append(b["json_bytes_per_pass"])
    if not runs:
        print("no rows", file=sys.stderr)
        return 2
    med = {k: statistics.median(v["ms"]) for k, v in runs.items()}
    headers = ["row", "median", "reps", "vs forward24_plain", "vs forward24_checked", "JSON MB/s", "JSON bytes/pass"]
    table = []
    for name in ORDER + sorted(k for k in runs if k not in ORDER):
        if name not in runs:
            continue
        r = runs[name]
        rel = lambda base: f"{med[name] / med[base]:.3f}" if base in med and not name.startswith("tree_summary") else "-"
        table.append([name, f"{med[name]:.2f} ms", str(len(r["ms"])), rel("forward24_plain"), rel("forward24_checked"),
                      f"{statistics.median(r['bps']) / 1e6:.1f}" if r["bps"] else "-",
                      f"{statistics.median(r['bytes']):.0f}" if r["bytes"] else "-"])
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
