#!/usr/bin/env python3
"""The ratio table of docs/cuda.md (issue 31's targets) from nanscope_bench_cuda's Google Benchmark JSON files.

    python3 tools/cuda_ratios.py cuda1.json cuda2.json cuda3.json            # one file per benchmark process
    python3 tools/cuda_ratios.py cuda*.json --markdown --rows                # Markdown, and the rows' medians
    python3 tools/cuda_ratios.py cuda*.json --strict                         # exit 1 unless every target is met

Each file is one run (one process, its rows interleaved). Within a run a row's time is the median real time of its
repetitions (the per-repetition entries; Google Benchmark's "median" aggregate when only aggregates were written).
Row names are nanscope_bench_cuda's (health/f32/67108864, read_anchor/f32/67108864, batched/1000x65536,
per_tensor/1000x65536, forward_plain, ...), with or without the /manual_time suffix.

Each ratio is computed per run from that run's medians; the table gives the median of the runs' ratios and their
range (min-max). A target is "met" only when the WORST run meets it (the smallest ratio of a ">=" target, the
largest of a "<=" one) and every run has its rows; a target whose rows some run lacks is "missing" (the rows are
named), which counts as not met. Kinds of ratio:
  - throughput: read_anchor time / health time for the same dtype and element count (= health's bytes/s over the
    anchor's), e.g. health / read_anchor >= 0.90;
  - time: numerator time / denominator time, e.g. forward_checked / forward_plain <= 1.03;
  - per-check fixed cost: (per_tensor time - its 1000 x 65536 f32 at read_anchor/f32's bandwidth) / 1000, in us.
Where a run has health_mx rows (block-scaled what-if statistics), information lines give health / health_mx per
format (no target on the GPU; the host's is >= 0.80, all formats >= 0.60).
Exit status: 0 (1 with --strict when a target is not met or missing; 2 when a file cannot be read).
Standard library only.
"""

import argparse
import json
import statistics
import sys

TIME_TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
ANCHOR_N = 67108864
TENSORS, TENSOR_N = 1000, 65536

HEALTH_TARGETS = [("f32", 0.90), ("bf16", 0.90), ("f16", 0.90), ("f64", 0.85), ("e4m3fn", 0.80), ("e5m2", 0.80)]


def targets(n):
    """(label, kind, rows, target) with target (">=" | "<=", value) or None (information only)."""
    t = []
    for dt, goal in HEALTH_TARGETS:
        t.append((f"{dt} health (STATS) / read_anchor, {n}", "throughput",
                  (f"health/{dt}/{n}", f"read_anchor/{dt}/{n}"), (">=", goal)))
    for dt in ("f32", "bf16"):
        t.append((f"{dt} full_health (counts + extrema) / read_anchor, {n}", "throughput",
                  (f"full_health/{dt}/{n}", f"read_anchor/{dt}/{n}"), (">=", 0.95)))
    t.append((f"per_tensor/{TENSORS}x{TENSOR_N}: us per check beyond its bytes at the anchor's bandwidth",
              "fixed_cost", (f"per_tensor/{TENSORS}x{TENSOR_N}", f"read_anchor/f32/{n}"), ("<=", 5.0)))
    t.append(("forward_checked / forward_plain", "time", ("forward_checked", "forward_plain"), ("<=", 1.03)))
    t.append(("forward_checked_health / forward_plain", "time", ("forward_checked_health", "forward_plain"),
              ("<=", 1.02)))
    t.append(("forward_checked_graph / forward_plain_graph", "time", ("forward_checked_graph", "forward_plain_graph"),
              ("<=", 1.02)))
    t.append((f"per_tensor / batched ({TENSORS}x{TENSOR_N})", "time",
              (f"per_tensor/{TENSORS}x{TENSOR_N}", f"batched/{TENSORS}x{TENSOR_N}"), (">=", 10.0)))
    t.append(("forward_checked_batch / forward_plain", "time", ("forward_checked_batch", "forward_plain"), None))
    return t


MX_FORMATS = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "nvfp4", "all")


def mx_lines(n, runs):
    """Information lines for the health_mx rows (block-scaled what-if statistics queued with the health pass):
    health time / health_mx time, as the host's health_mx ratios; only for the dtypes some run has rows of."""
    t = []
    for dt in ("f32", "bf16"):
        if not any(f"health_mx/{dt}/{n}/{f}" in r for r in runs for f in MX_FORMATS):
            continue
        for f in MX_FORMATS:
            t.append((f"{dt} health / health_mx ({f}), {n}", "throughput", (f"health_mx/{dt}/{n}/{f}", f"health/{dt}/{n}"),
                      None))
        # the packed kernel's variants, where the run has them: > 1 means the default (packed, one quad) is faster
        for variant in ("unitpath", "unroll2"):
            for f in MX_FORMATS:
                row = f"health_mx_{variant}/{dt}/{n}/{f}"
                if any(row in r for r in runs):
                    t.append((f"{dt} health_mx_{variant} / health_mx ({f}), {n}", "time", (row, f"health_mx/{dt}/{n}/{f}"),
                              None))
    return t


def row_name(name):
    for suffix in ("/manual_time", "/real_time"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def load_run(path):
    """{row: median real time in us} of one Google Benchmark JSON file."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        entries = doc["benchmarks"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"cuda_ratios: cannot read {path}: {e}") from None
    reps, medians = {}, {}
    for b in entries:
        if not isinstance(b, dict) or "real_time" not in b:
            continue
        if b.get("error_occurred"):
            continue
        name = row_name(b.get("run_name") or b.get("name", ""))
        us = float(b["real_time"]) * TIME_TO_US.get(b.get("time_unit", "ns"), 1e-3)
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[name] = us
        else:
            reps.setdefault(name, []).append(us)
    rows = {name: statistics.median(v) for name, v in reps.items()}
    for name, us in medians.items():
        rows.setdefault(name, us)
    return rows


def value(kind, rows, names, n):
    a, b = names
    if a not in rows or b not in rows:
        return None
    if kind == "throughput":
        return rows[b] / rows[a]
    if kind == "time":
        return rows[a] / rows[b]
    # fixed cost: the per-tensor row's time beyond its bytes read at the anchor's bandwidth, per check
    return (rows[a] - rows[b] * (TENSORS * TENSOR_N) / n) / TENSORS


def fmt(kind, v):
    return f"{v:.2f} us" if kind == "fixed_cost" else (f"{v:.1f}x" if v >= 10 else f"{v:.3f}")


def print_table(headers, table, markdown):
    if markdown:
        print("| " + " | ".join(headers) + " |")
        print("|" + "---|" * len(headers))
        for r in table:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in table)) if table else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip())
    for r in table:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="one Google Benchmark JSON file per run")
    ap.add_argument("--elements", type=int, default=ANCHOR_N, help="element count of the health rows")
    ap.add_argument("--rows", action="store_true", help="also the rows' median times (median across runs)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--strict", action="store_true", help="exit 1 unless every target is met")
    args = ap.parse_args()
    try:
        runs = [load_run(p) for p in args.files]
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2

    n = args.elements
    table, unmet = [], []
    for label, kind, names, target in targets(n) + mx_lines(n, runs):
        vals = [value(kind, r, names, n) for r in runs]
        missing = [f"{nm} (run {i + 1})" for i, r in enumerate(runs) for nm in names if nm not in r]
        present = [v for v in vals if v is not None]
        if present:
            med = statistics.median(present)
            shown = f"{fmt(kind, med)} ({fmt(kind, min(present))}-{fmt(kind, max(present))})"
        else:
            shown = "-"
        if target is None:
            status = "information" if not missing else "missing: " + ", ".join(missing)
            goal = "-"
        else:
            op, lim = target
            goal = f"{op} {fmt(kind, lim)}"
            if missing:
                status = "missing: " + ", ".join(missing)
                unmet.append(label)
            else:
                worst = min(present) if op == ">=" else max(present)
                ok = worst >= lim if op == ">=" else worst <= lim
                status = ("met" if ok else "not met") + f" (worst run {fmt(kind, worst)})"
                if not ok:
                    unmet.append(label)
        table.append([label, shown, str(len(present)), goal, status])

    print(f"nanscope_bench_cuda: {len(runs)} run(s); each ratio is per run (medians of its repetitions), shown as "
          f"the median of the runs and their range; a target is met when the worst run meets it")
    if len(runs) < 3:
        print("note: fewer than 3 runs; issue 31's targets are judged on 3 interleaved processes", file=sys.stderr)
    print_table(["ratio", "median (range)", "runs", "target", "status"], table, args.markdown)
    if args.rows:
        print()
        names = sorted(set().union(*runs))
        rows = []
        for nm in names:
            v = [r[nm] for r in runs if nm in r]
            rows.append([nm, f"{statistics.median(v):.1f}", f"{min(v):.1f}-{max(v):.1f}", str(len(v))])
        print_table(["row", "median us", "range us", "runs"], rows, args.markdown)
    print()
    n_targets = sum(1 for t in targets(n) if t[3] is not None)
    print("targets met: " + ("all" if not unmet else f"{n_targets - len(unmet)} of {n_targets}; not met or "
                             "missing: " + "; ".join(unmet)))
    return 1 if (args.strict and unmet) else 0


if __name__ == "__main__":
    sys.exit(main())
