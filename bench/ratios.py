#!/usr/bin/env python3
"""Target ratios of nanscope's host benchmarks, from Google Benchmark JSON output.

    ./nanscope_bench_host --benchmark_repetitions=5 --benchmark_min_time=0.2 \
        --benchmark_out=bench.json --benchmark_out_format=json
    python3 bench/ratios.py bench.json                 # ratio table with PASS/FAIL, at 67108864 elements
    python3 bench/ratios.py bench.json --table         # also the per-row medians
    python3 bench/ratios.py bench.json --markdown      # the same as Markdown tables (docs/benchmarks.md)

Every statistic is the median across repetitions (of the per-repetition entries when present, else of
Google Benchmark's own "median" aggregate). A ratio is the ratio of the two rows' median items/s, i.e.
"how many times faster the first row is"; for rows of the same dtype it equals the bytes/s ratio.
Two more columns help on a shared machine, where other processes only ever make a row slower: "best reps"
is the ratio of each row's fastest repetition, and "CPU time" the ratio of median CPU times where both rows
are single-threaded (CPU time excludes preemption; memory contention from other processes still counts).
PASS/FAIL always uses the ratio of medians of wall-clock items/s. Standard library only.
"""

import argparse
import json
import statistics
import sys

TIME_TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

# (label, numerator row, denominator row, minimum ratio or None for information only)
# A row is (family, dtype); the element count is chosen on the command line.
TARGETS = [
    ("f32 full_health / read_anchor", ("full_health", "f32"), ("read_anchor", "f32"), 0.90),
    ("f32 health / read_anchor", ("health", "f32"), ("read_anchor", "f32"), 0.75),
    ("f32 health_mt / read_anchor_mt", ("health_mt", "f32"), ("read_anchor_mt", "f32"), 0.85),
    ("f64 health_mt / read_anchor_mt", ("health_mt", "f64"), ("read_anchor_mt", "f64"), 0.85),
    ("f16 health_mt / read_anchor_mt", ("health_mt", "f16"), ("read_anchor_mt", "f16"), 0.85),
    ("bf16 health_mt / read_anchor_mt", ("health_mt", "bf16"), ("read_anchor_mt", "bf16"), 0.85),
    ("f32 health vs eigen_multipass (speed-up)", ("health", "f32"), ("eigen_multipass", "f32"), 5.0),
    ("f32 health vs torch_multiop (speed-up)", ("health", "f32"), ("torch_multiop", "f32"), 50.0),
    ("f16 health items/s / f32 health items/s", ("health", "f16"), ("health", "f32"), 1.2),
    ("bf16 health items/s / f32 health items/s", ("health", "bf16"), ("health", "f32"), 1.2),
]

INFO = [
    ("f32 health_relu / read_anchor", ("health_relu", "f32"), ("read_anchor", "f32"), None),
    ("f32 read_anchor_mt / read_anchor", ("read_anchor_mt", "f32"), ("read_anchor", "f32"), None),
]
for _dt in ("f64", "f16", "bf16"):
    INFO += [
        (f"{_dt} full_health / read_anchor", ("full_health", _dt), ("read_anchor", _dt), None),
        (f"{_dt} health / read_anchor", ("health", _dt), ("read_anchor", _dt), None),
        (f"{_dt} health vs eigen_multipass (speed-up)", ("health", _dt), ("eigen_multipass", _dt), None),
        (f"{_dt} health vs torch_multiop (speed-up)", ("health", _dt), ("torch_multiop", _dt), None),
    ]

FAMILY_ORDER = ["read_anchor", "health", "full_health", "health_relu", "read_anchor_mt", "health_mt",
                "eigen_multipass", "torch_multiop"]
DTYPE_ORDER = ["f32", "f64", "f16", "bf16"]


def row_key(name):
    """'health/f32/4096/real_time' -> ('health', 'f32', 4096); None for names of another shape."""
    parts = name.split("/")
    if len(parts) < 3:
        return None
    try:
        n = int(parts[2])
    except ValueError:
        return None
    return parts[0], parts[1], n


class Row:
    def __init__(self):
        self.real_ns = []
        self.cpu_ns = []
        self.items = []
        self.bytes = []
        self.threads = None
        self.agg = {}  # aggregate median entry fields, used when there are no per-repetition entries

    def _med(self, values, agg_field):
        if values:
            return statistics.median(values)
        return self.agg.get(agg_field)

    @property
    def reps(self):
        return len(self.items)

    def real(self):
        return self._med(self.real_ns, "real_ns")

    def cpu(self):
        return self._med(self.cpu_ns, "cpu_ns")

    def items_per_s(self):
        return self._med(self.items, "items")

    def bytes_per_s(self):
        return self._med(self.bytes, "bytes")

    def spread(self):
        """(max - min) / median of items/s across repetitions: how noisy the row was."""
        if len(self.items) < 2:
            return None
        m = statistics.median(self.items)
        return (max(self.items) - min(self.items)) / m if m else None


def load(paths):
    rows = {}
    context = {}
    for path in paths:
        if path == "-":
            doc = json.load(sys.stdin)
        else:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        context.update(doc.get("context", {}))
        for b in doc.get("benchmarks", []):
            if b.get("error_occurred"):
                continue
            key = row_key(b.get("run_name", b.get("name", "")))
            if key is None:
                continue
            row = rows.setdefault(key, Row())
            scale = TIME_TO_NS.get(b.get("time_unit", "ns"), 1.0)
            if row.threads is None and "nthreads" in b:
                row.threads = b["nthreads"]  # threads the row ran on (a counter of bench_host.cpp)
            if b.get("run_type", "iteration") == "aggregate":
                if b.get("aggregate_name") == "median":
                    row.agg = {
                        "real_ns": b.get("real_time", 0.0) * scale,
                        "cpu_ns": b.get("cpu_time", 0.0) * scale,
                        "items": b.get("items_per_second"),
                        "bytes": b.get("bytes_per_second"),
                    }
                continue
            row.real_ns.append(b.get("real_time", 0.0) * scale)
            row.cpu_ns.append(b.get("cpu_time", 0.0) * scale)
            if b.get("items_per_second") is not None:
                row.items.append(b["items_per_second"])
            if b.get("bytes_per_second") is not None:
                row.bytes.append(b["bytes_per_second"])
    return rows, context


def ratio(rows, num, den, n, cpu=False, best=False):
    """Median items/s of row num over row den at n elements. With cpu=True the same from the rows' CPU
    times (only when both rows ran on one thread: CPU time ignores the time the thread was preempted);
    with best=True from each row's fastest repetition."""
    a = rows.get((num[0], num[1], n))
    b = rows.get((den[0], den[1], n))
    if a is None or b is None:
        return None
    if best:
        return max(a.items) / max(b.items) if a.items and b.items and max(b.items) else None
    if cpu:
        if a.threads not in (None, 1) or b.threads not in (None, 1):
            return None
        x, y = a.cpu(), b.cpu()
        return y / x if x and y else None
    x, y = a.items_per_s(), b.items_per_s()
    if not x or not y:
        return None
    return x / y


def fmt_time(ns):
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def print_table(headers, table, markdown):
    if markdown:
        print("| " + " | ".join(headers) + " |")
        print("|" + "|".join("---" if i == 0 else "---:" for i in range(len(headers))) + "|")
        for r in table:
            print("| " + " | ".join(r) + " |")
        return
    widths = [max(len(h), *(len(r[i]) for r in table)) if table else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths))))
    for r in table:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


def row_table(rows, sizes):
    table = []
    keys = sorted(
        (k for k in rows if sizes is None or k[2] in sizes),
        key=lambda k: (DTYPE_ORDER.index(k[1]) if k[1] in DTYPE_ORDER else 99, k[2],
                       FAMILY_ORDER.index(k[0]) if k[0] in FAMILY_ORDER else 99, k[0]),
    )
    for k in keys:
        r = rows[k]
        bps, ips = r.bytes_per_s(), r.items_per_s()
        real, cpu = r.real(), r.cpu()
        spread = r.spread()
        # single-threaded rows: wall time well above CPU time means the thread was preempted (shared machine)
        note = ""
        if r.threads in (None, 1) and real and cpu and real > 1.10 * cpu:
            note = f"wall/cpu {real / cpu:.2f}"
        table.append([
            "/".join([k[0], k[1], str(k[2])]),
            fmt_time(real),
            f"{bps / 1e9:.2f}" if bps else "-",
            f"{ips / 1e9:.3f}" if ips else "-",
            str(int(r.threads)) if isinstance(r.threads, (int, float)) else "-",
            str(r.reps),
            f"{100 * spread:.1f}%" if spread is not None else "-",
            note,
        ])
    return ["row", "median time", "GB/s", "Gitems/s", "threads", "reps", "spread", "note"], table


def ratio_table(rows, n, specs, with_status):
    table = []
    failed = []
    for label, num, den, target in specs:
        r = ratio(rows, num, den, n)
        if target is None:
            status = "info"
        elif r is None:
            status = "MISSING"
        else:
            status = "PASS" if r >= target else "FAIL"
        if status in ("FAIL", "MISSING"):
            failed.append(label)
        rc = ratio(rows, num, den, n, cpu=True)
        rb = ratio(rows, num, den, n, best=True)
        cols = [label, f"{r:.3f}" if r is not None else "-"]
        if with_status:
            cols += [f">= {target:g}" if target is not None else "-", status]
        cols.append(f"{rb:.3f}" if rb is not None else "-")
        cols.append(f"{rc:.3f}" if rc is not None else "-")
        table.append(cols)
    headers = (["ratio", "median"] + (["target", "status"] if with_status else []) +
               ["best reps", "CPU time"])
    return headers, table, failed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="Google Benchmark JSON file(s) ('-' for stdin)")
    ap.add_argument("--elements", type=int, action="append",
                    help="element count the ratios are taken at (repeatable; default 67108864)")
    ap.add_argument("--table", action="store_true", help="also print the per-row medians")
    ap.add_argument("--all-sizes", action="store_true", help="row table for every size, not only --elements")
    ap.add_argument("--info", action="store_true", help="also print informational ratios (other dtypes)")
    ap.add_argument("--markdown", action="store_true", help="Markdown tables")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a target fails or a row is missing")
    args = ap.parse_args(argv)

    rows, context = load(args.json)
    if not rows:
        print("no benchmark rows named family/dtype/elements in the input", file=sys.stderr)
        return 2
    sizes = args.elements or [67108864]

    keys = ("host_name", "date", "num_cpus", "mhz_per_cpu", "library_build_type", "nanscope_detected_isa",
            "nanscope_isa", "nanscope_default_threads", "nanscope_parallel_threshold", "read_anchor_isa", "eigen", "torch")
    ctx = [f"{k}={context[k]}" for k in keys if k in context]
    if ctx:
        print(("_" if args.markdown else "") + "context: " + ", ".join(ctx) + ("_" if args.markdown else ""))
        print()

    if args.table:
        headers, table = row_table(rows, None if args.all_sizes else set(sizes))
        if args.markdown:
            print("Medians across repetitions. GB/s = 1e9 bytes of the tensor per second; spread = "
                  "(max - min) / median of items/s across repetitions.\n")
        print_table(headers, table, args.markdown)
        print()

    any_failed = False
    for n in sizes:
        title = f"Ratios at {n} elements (median items/s of the first row / the second)"
        print(f"**{title}**\n" if args.markdown else title)
        headers, table, failed = ratio_table(rows, n, TARGETS, True)
        print_table(headers, table, args.markdown)
        if failed:
            any_failed = True
            print(("\n" if args.markdown else "") + "not met: " + "; ".join(failed))
        if args.info:
            print()
            headers, table, _ = ratio_table(rows, n, INFO, False)
            print_table(headers, table, args.markdown)
        print()
    return 1 if (args.strict and any_failed) else 0


if __name__ == "__main__":
    sys.exit(main())
