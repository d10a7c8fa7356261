#!/usr/bin/env python3
"""Ratios of the segmented-check rows (health_seg, health_seg_counts, health_seg_kv; docs/segments.md) to the
unsegmented health row of the same dtype and size, from Google Benchmark JSON files, one per run (process):

    for i in 1 2 3; do
        NANSCOPE_BENCH_CACHE_MB=2048 build/release/bench/nanscope_bench_host --benchmark_enable_random_interleaving=true \\
            --benchmark_repetitions=5 --benchmark_min_time=0.2 \\
            --benchmark_filter='^(health|health_seg|health_seg_counts|health_seg_kv)/(f32|bf16|f16)/67108864(/|$)' \\
            --benchmark_out=run$i.json --benchmark_out_format=json
    done
    python3 bench/seg_ratios.py run1.json run2.json run3.json [--markdown]

(bench/ratios.py reads rows named family/dtype/elements; these rows carry a fourth part, the segment count.)
Within a run, each row's statistic is the median over its repetitions; a ratio is seg items/s / health items/s
(wall clock), and "CPU" the same with CPU time (what other processes on a shared machine do not inflate). Across
runs: the median and the range. PASS/FAIL judges the worst run's wall-clock ratio against the target.
Standard library only.
"""
import argparse
import json
import statistics

# (numerator row prefix, target or None)
TARGETS = [
    ("health_seg/f32/67108864/1000", 0.90),
    ("health_seg/bf16/67108864/1000", 0.90),
    ("health_seg/f32/67108864/100000", 0.80),
    ("health_seg_kv/f16/67108864/4096", 0.90),
    ("health_seg_counts/f32/67108864/1000", None),
    ("health_seg_counts/f32/67108864/100000", None),
]


def load(path):
    """row name (without /real_time) -> (median items/s, median cpu ns) over the run's repetitions."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    items, cpu = {}, {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = b["name"].removesuffix("/real_time")
        items.setdefault(name, []).append(b["items_per_second"])
        cpu.setdefault(name, []).append(b["cpu_time"])
    return {k: (statistics.median(items[k]), statistics.median(cpu[k])) for k in items}


def base_of(row):
    family, dtype, n = row.split("/")[:3]
    return f"health/{dtype}/{n}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    runs = [load(p) for p in args.runs]
    rows = []
    for row, target in TARGETS:
        wall, cpu = [], []
        for r in runs:
            if row in r and base_of(row) in r:
                wall.append(r[row][0] / r[base_of(row)][0])
                cpu.append(r[base_of(row)][1] / r[row][1])
        if not wall:
            rows.append((row, "missing", "", "", "" if target is None else f">= {target:.2f}", "MISSING"))
            continue
        verdict = "info" if target is None else ("PASS" if min(wall) >= target else "FAIL")
        rows.append((row + " / " + base_of(row), f"{statistics.median(wall):.3f}", f"{min(wall):.3f}-{max(wall):.3f}",
                     f"{statistics.median(cpu):.3f}", "" if target is None else f">= {target:.2f}", verdict))
    head = ("ratio (items/s)", "median", "range", "CPU", "target", f"runs={len(runs)}")
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = [max(len(str(x[i])) for x in rows + [head]) for i in range(len(head))]
        for r in [head] + rows:
            print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)))


if __name__ == "__main__":
    main()
