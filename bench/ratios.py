#!/usr/bin/env python3
"""Target ratios of nanscope's host benchmarks, from Google Benchmark JSON output: one file per run.

    bash bench/run_ratios.sh                           # 3 interleaved runs of build/release/bench/nanscope_bench_host,
                                                       # then this script on the three JSON files
    # or by hand: one process per run, each with random interleaving
    for r in 1 2 3; do
        build/release/bench/nanscope_bench_host --benchmark_enable_random_interleaving=true \
            --benchmark_repetitions=5 --benchmark_min_time=0.2 \
            --benchmark_out=run$r.json --benchmark_out_format=json
    done
    python3 bench/ratios.py run1.json run2.json run3.json              # ratio table with PASS/FAIL, 67108864 elements
    python3 bench/ratios.py run1.json run2.json run3.json --table      # also the per-row medians
    python3 bench/ratios.py run1.json run2.json run3.json --markdown   # as Markdown tables (docs/benchmarks.md)

Each JSON file is one run (one benchmark process). Within a run every statistic is the median across
repetitions (of the per-repetition entries when present, else of Google Benchmark's own "median" aggregate).
Two kinds of ratio:
  - rows named family/dtype/elements (health/f32/67108864/real_time): the ratio of the two rows' median items/s
    at the chosen element count, i.e. "how many times faster the first row is"; for rows of the same dtype it
    equals the bytes/s ratio. Targets are minimums (">="), e.g. health_hist >= 0.85x health.
  - the time rows forward_plain, forward_checked and forward_disabled (named forward_plain/real_time: no dtype,
    no element count; the same in every table): the ratio of the two rows' median real TIME, i.e. "how many
    times longer the first row takes", e.g. forward_checked time / forward_plain time. Targets are upper
    bounds ("<="), e.g. <= 1.03.
Across runs the tables give the median of the runs' ratios, their range (min-max) and the number of runs.
PASS/FAIL is judged on the WORST run: the smallest run's ratio against a ">=" target, the largest against a
"<=" target; a target whose rows some run lacks is MISSING (listed under "not met", like a failure). With one
file the range is that run's single value. The row table (--table) pools the repetitions of all runs.
Two more columns help on a shared machine, where other processes only ever make a row slower: "best reps"
is the ratio of each row's fastest repetition (highest items/s; shortest time for the time rows), and
"CPU time" the ratio of median CPU times (in the same direction as the ratio) where both rows are
single-threaded (CPU time excludes preemption; memory contention from other processes still counts); both
are medians across runs. PASS/FAIL always uses wall-clock items/s or wall-clock time.

Interleaving check (a warning on stderr, never a failure): Google Benchmark does not record
--benchmark_enable_random_interleaving in its JSON, and it writes each row's repetitions and aggregates together
once the row's last repetition has run, interleaved or not. Without interleaving the rows therefore come out in
registration order, i.e. (family_index, per_family_instance_index) ascending; with it, in the order their last
repetitions happened to finish. A file whose rows are in ascending order is reported as "not interleaved" (a
shuffled run of k rows gives that order by chance with probability 1/k!, which the warning states when k < 5);
a file whose repetitions of one row are not contiguous counts as interleaved; a file without family_index
(Google Benchmark before 1.6) gets a "cannot tell" warning. With fewer than 3 runs a note on stderr says so.
Standard library only.
"""

import argparse
import json
import math
import statistics
import sys

TIME_TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

# (label, numerator row, denominator row, target: a minimum ratio, ("<=", maximum), or None for information only)
# A row is (family, dtype); the element count is chosen on the command line. A time row (TIME_FAMILIES) is
# (family, None): it has no dtype and no element count, and a ratio of two time rows is one of median real time.
TIME_FAMILIES = ("forward_plain", "forward_checked", "forward_disabled")

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
    ("f32 health_hist / health", ("health_hist", "f32"), ("health", "f32"), 0.85),
    ("f16 health_hist / health", ("health_hist", "f16"), ("health", "f16"), 0.85),
    ("forward_checked time / forward_plain time", ("forward_checked", None), ("forward_plain", None), ("<=", 1.03)),
    ("forward_disabled time / forward_plain time", ("forward_disabled", None), ("forward_plain", None), ("<=", 1.02)),
]

INFO = [
    ("f32 health_relu / read_anchor", ("health_relu", "f32"), ("read_anchor", "f32"), None),
    ("f32 health_relu / health (the cost of half zeros)", ("health_relu", "f32"), ("health", "f32"), None),
    ("f16 health_relu / health", ("health_relu", "f16"), ("health", "f16"), None),
    ("bf16 health_relu / health", ("health_relu", "bf16"), ("health", "bf16"), None),
    ("f32 read_anchor_mt / read_anchor", ("read_anchor_mt", "f32"), ("read_anchor", "f32"), None),
    ("bf16 health_hist / health", ("health_hist", "bf16"), ("health", "bf16"), None),
]
# Block-scaled what-if statistics (issue 33): rows health_mx/<dtype>/<elements>/<format>, family "health_mx/<format>".
MX_FORMATS = ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "nvfp4")
for _dt in ("f32", "bf16"):
    TARGETS += [(f"{_dt} health_mx {_f} / health", (f"health_mx/{_f}", _dt), ("health", _dt), 0.80) for _f in MX_FORMATS]
    TARGETS += [(f"{_dt} health_mx all / health", ("health_mx/all", _dt), ("health", _dt), 0.60)]
for _dt in ("f64", "f16", "bf16"):
    INFO += [
        (f"{_dt} full_health / read_anchor", ("full_health", _dt), ("read_anchor", _dt), None),
        (f"{_dt} health / read_anchor", ("health", _dt), ("read_anchor", _dt), None),
        (f"{_dt} health vs eigen_multipass (speed-up)", ("health", _dt), ("eigen_multipass", _dt), None),
        (f"{_dt} health vs torch_multiop (speed-up)", ("health", _dt), ("torch_multiop", _dt), None),
    ]

FAMILY_ORDER = ["read_anchor", "health", "health_hist", "full_health", "health_relu", "read_anchor_mt", "health_mt",
                "eigen_multipass", "torch_multiop", *TIME_FAMILIES, *[f"health_mx/{_f}" for _f in (*MX_FORMATS, "all")]]
DTYPE_ORDER = ["f32", "f64", "f16", "bf16"]


def row_key(name):
    """'health/f32/4096/real_time' -> ('health', 'f32', 4096); a time row, 'forward_plain/real_time' (or
    'forward_plain') -> ('forward_plain', None, None); None for names of another shape (forward24_plain/real_time,
    forward_budget/200/real_time, tree_summary/pruned, ...)."""
    parts = name.split("/")
    if parts[0] in TIME_FAMILIES and parts[1:] in ([], ["real_time"]):
        return parts[0], None, None
    if len(parts) < 3:
        return None
    try:
        n = int(parts[2])
    except ValueError:
        return None
    if parts[0] == "health_mx" and len(parts) >= 4 and parts[3] != "real_time":
        return f"health_mx/{parts[3]}", parts[1], n  # the block format is part of the family
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
        return len(self.real_ns)  # every per-repetition entry has a time; items/s only where the row sets items

    def real(self):
        return self._med(self.real_ns, "real_ns")

    def cpu(self):
        return self._med(self.cpu_ns, "cpu_ns")

    def items_per_s(self):
        return self._med(self.items, "items")

    def bytes_per_s(self):
        return self._med(self.bytes, "bytes")

    def spread(self):
        """(max - min) / median of items/s across repetitions (of real time for a row without items/s): how
        noisy the row was."""
        values = self.items or self.real_ns
        if len(values) < 2:
            return None
        m = statistics.median(values)
        return (max(values) - min(values)) / m if m else None


def read_doc(path):
    if path == "-":
        return json.load(sys.stdin)
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def add_entries(rows, doc):
    """Adds the entries of one Google Benchmark JSON document to rows ({(family, dtype, n): Row})."""
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
            if b.get("aggregate_name") == "median" and not row.agg:
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


def load(paths):
    """One run per path: [(path, rows, context, doc)]."""
    runs = []
    for path in paths:
        doc = read_doc(path)
        rows = {}
        add_entries(rows, doc)
        runs.append((path, rows, doc.get("context", {}), doc))
    return runs


def pooled(runs):
    """Every run's repetitions in one set of rows (the row table)."""
    rows = {}
    for _, run_rows, _, _ in runs:
        for key, r in run_rows.items():
            row = rows.setdefault(key, Row())
            row.real_ns += r.real_ns
            row.cpu_ns += r.cpu_ns
            row.items += r.items
            row.bytes += r.bytes
            if row.threads is None:
                row.threads = r.threads
            if not row.agg:
                row.agg = dict(r.agg)
    return rows


def interleaving(doc):
    """('interleaved' | 'sequential' | 'unknown', detail) for one Google Benchmark JSON document.

    Google Benchmark records no interleaving flag, and writes all of a row's entries at once when the row's last
    repetition is done. Without --benchmark_enable_random_interleaving the rows come out in registration order,
    (family_index, per_family_instance_index) ascending; with it, in the random order their last repetitions
    finished. Entries of one row that are not contiguous (a writer reporting each repetition at once) also
    mean interleaving."""
    order = []      # distinct rows in order of first appearance
    position = {}   # row -> its index in order
    index_of = {}   # row -> (family_index, per_family_instance_index)
    split = False
    previous = None
    for b in doc.get("benchmarks", []):
        name = b.get("run_name", b.get("name", ""))
        if name not in position:
            position[name] = len(order)
            order.append(name)
            if "family_index" in b:
                index_of[name] = (b["family_index"], b.get("per_family_instance_index", 0))
        elif previous != name:
            split = True  # back to a row after another one
        previous = name
    if split:
        return "interleaved", "the repetitions of a row are not contiguous"
    k = len(order)
    if k < 2:
        return "unknown", f"{k} row(s): nothing to interleave"
    if len(index_of) < k:
        return "unknown", "no family_index in the entries (Google Benchmark before 1.6): cannot tell"
    keys = [index_of[name] for name in order]
    if all(keys[i] < keys[i + 1] for i in range(k - 1)):
        detail = f"its {k} rows are in registration order"
        if k < 5:
            detail += f" (a shuffled run of {k} rows gives that order by chance 1 time in {math.factorial(k)})"
        return "sequential", detail
    return "interleaved", f"its {k} rows are out of registration order"


def is_time_ratio(num, den):
    """Whether the ratio of rows num and den ((family, dtype)) is one of time rows (no dtype, no element count)."""
    return num[1] is None and den[1] is None


def spec_key(spec_row, n):
    """The rows key of (family, dtype) at n elements; a time row's key has no dtype and no element count."""
    family, dtype = spec_row
    return (family, None, None) if dtype is None else (family, dtype, n)


def ratio(rows, num, den, n, cpu=False, best=False):
    """Median items/s of row num over row den at n elements; for two time rows (is_time_ratio) median real time
    of num over den, whatever n. With cpu=True the same from the rows' CPU times (only when both rows ran on one
    thread: CPU time ignores the time the thread was preempted); with best=True from each row's fastest
    repetition."""
    a = rows.get(spec_key(num, n))
    b = rows.get(spec_key(den, n))
    if a is None or b is None:
        return None
    if is_time_ratio(num, den):
        if best:
            x, y = (min(a.real_ns), min(b.real_ns)) if a.real_ns and b.real_ns else (None, None)
        elif cpu:
            if a.threads not in (None, 1) or b.threads not in (None, 1):
                return None
            x, y = a.cpu(), b.cpu()
        else:
            x, y = a.real(), b.real()
        return x / y if x and y else None
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
    """One line per row at the element counts sizes (None: all), then the time rows (no element count)."""
    table = []
    keys = sorted(
        (k for k in rows if sizes is None or k[2] is None or k[2] in sizes),
        key=lambda k: (k[2] is None, DTYPE_ORDER.index(k[1]) if k[1] in DTYPE_ORDER else 99, k[2] or 0,
                       FAMILY_ORDER.index(k[0]) if k[0] in FAMILY_ORDER else 99, k[0], k[1] or ""),
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
        time_row = k[1] is None  # its items (if any) are not tensor elements: no GB/s, no Gitems/s
        table.append([
            k[0] if time_row else "/".join([k[0], k[1], str(k[2])]),
            fmt_time(real),
            f"{bps / 1e9:.2f}" if bps and not time_row else "-",
            f"{ips / 1e9:.3f}" if ips and not time_row else "-",
            str(int(r.threads)) if isinstance(r.threads, (int, float)) else "-",
            str(r.reps),
            f"{100 * spread:.1f}%" if spread is not None else "-",
            note,
        ])
    return ["row", "median time", "GB/s", "Gitems/s", "threads", "reps", "spread", "note"], table


def target_text(target):
    """'>= 0.9' for a minimum (a number), '<= 1.05' for an upper bound (('<=', 1.05))."""
    if target is None:
        return "-"
    if isinstance(target, tuple):
        return f"{target[0]} {target[1]:g}"
    return f">= {target:g}"


def worst_meets(values, target):
    """(worst run's ratio, whether it meets target): the smallest ratio against a minimum, the largest against
    an upper bound."""
    if isinstance(target, tuple):
        op, bound = target
        if op != "<=":
            raise ValueError(f"unknown target operator {op!r}")
        worst = max(values)
        return worst, worst <= bound
    worst = min(values)
    return worst, worst >= target


def fmt_range(values, markdown):
    if not values:
        return "-"
    dash = "\u2013" if markdown else "-"
    return f"{min(values):.3f}{dash}{max(values):.3f}"


def ratio_table(runs, n, specs, with_status, markdown=False):
    """One line per ratio: the median of the runs' ratios, their range, the number of runs that have both rows,
    then target and status (judged on the worst run: the smallest ratio against a minimum, the largest against
    a "<=" bound; MISSING when any run lacks one of the rows), and the medians across runs of the best-reps and
    CPU-time ratios."""
    table = []
    failed = []
    for label, num, den, target in specs:
        values = [v for v in (ratio(r, num, den, n) for _, r, _, _ in runs) if v is not None]
        if target is None:
            status = "info"
        elif len(values) < len(runs):
            status = "MISSING"  # a run without both rows: its worst run is unknown
        else:
            _, ok = worst_meets(values, target)
            status = "PASS" if ok else "FAIL"
        if status in ("FAIL", "MISSING"):
            failed.append(label)
        rc = [v for v in (ratio(r, num, den, n, cpu=True) for _, r, _, _ in runs) if v is not None]
        rb = [v for v in (ratio(r, num, den, n, best=True) for _, r, _, _ in runs) if v is not None]
        runs_text = str(len(values)) if len(values) == len(runs) else f"{len(values)}/{len(runs)}"
        cols = [label, f"{statistics.median(values):.3f}" if values else "-", fmt_range(values, markdown),
                runs_text]
        if with_status:
            cols += [target_text(target), status]
        cols.append(f"{statistics.median(rb):.3f}" if rb else "-")
        cols.append(f"{statistics.median(rc):.3f}" if rc else "-")
        table.append(cols)
    headers = (["ratio", "median", "range", "runs"] + (["target", "status"] if with_status else []) +
               ["best reps", "CPU time"])
    return headers, table, failed


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="Google Benchmark JSON file(s), one per run ('-' for stdin)")
    ap.add_argument("--elements", type=int, action="append",
                    help="element count the ratios are taken at (repeatable; default 67108864)")
    ap.add_argument("--table", action="store_true", help="also print the per-row medians (all runs pooled)")
    ap.add_argument("--all-sizes", action="store_true", help="row table for every size, not only --elements")
    ap.add_argument("--info", action="store_true", help="also print informational ratios (other dtypes)")
    ap.add_argument("--markdown", action="store_true", help="Markdown tables")
    ap.add_argument("--strict", action="store_true",
                    help="exit 1 when a target fails (in its worst run) or a row is missing")
    args = ap.parse_args(argv)

    runs = load(args.json)
    for path, run_rows, _, doc in runs:
        state, detail = interleaving(doc)
        if state == "sequential":
            print(f"ratios.py: warning: {path}: not run with --benchmark_enable_random_interleaving=true? {detail}",
                  file=sys.stderr)
        elif state == "unknown" and len(run_rows) > 1:
            print(f"ratios.py: warning: {path}: cannot tell whether it was interleaved: {detail}", file=sys.stderr)
    rows = pooled(runs)
    if not rows:
        print("no benchmark rows named family/dtype/elements or " + "/".join(TIME_FAMILIES) + " in the input",
              file=sys.stderr)
        return 2
    if len(runs) < 3:
        print(f"ratios.py: note: {len(runs)} run(s); report ratios over at least 3 separate interleaved runs "
              "(bench/run_ratios.sh)", file=sys.stderr)
    sizes = args.elements or [67108864]

    keys = ("host_name", "date", "num_cpus", "mhz_per_cpu", "library_build_type", "nanscope_detected_isa",
            "nanscope_isa", "nanscope_default_threads", "nanscope_parallel_threshold", "read_anchor_isa", "eigen", "torch")
    context = runs[0][2]
    ctx = [f"{k}={context[k]}" for k in keys if k in context]
    if ctx:
        print(("_" if args.markdown else "") + "context: " + ", ".join(ctx) + ("_" if args.markdown else ""))
        print()
    if len(runs) > 1:
        lines = []
        for i, (path, _, c, _) in enumerate(runs, 1):
            extra = "".join(f", {k}={c[k]}" for k in ("date", "load_avg") if k in c)
            lines.append(f"run {i}: {path}{extra}")
        if args.markdown:
            print("_" + "; ".join(lines) + "_")
        else:
            print("\n".join(lines))
        print()

    if args.table:
        headers, table = row_table(rows, None if args.all_sizes else set(sizes))
        if args.markdown:
            print("Medians across repetitions" + (f" (the {len(runs)} runs pooled)" if len(runs) > 1 else "") +
                  ". GB/s = 1e9 bytes of the tensor per second; spread = "
                  "(max - min) / median of items/s across repetitions (of real time for a row without items/s).\n")
        print_table(headers, table, args.markdown)
        print()

    any_failed = False
    for n in sizes:
        title = (f"Ratios at {n} elements over {len(runs)} run(s): per run, median items/s of the first row / the "
                 "second (forward_* rows: median real time of the first / the second, at any size); median and "
                 "range (min-max) across runs; PASS/FAIL on the worst run")
        print(f"**{title}**\n" if args.markdown else title)
        headers, table, failed = ratio_table(runs, n, TARGETS, True, args.markdown)
        print_table(headers, table, args.markdown)
        if failed:
            any_failed = True
            print(("\n" if args.markdown else "") + "not met: " + "; ".join(failed))
        if args.info:
            print()
            headers, table, _ = ratio_table(runs, n, INFO, False, args.markdown)
            print_table(headers, table, args.markdown)
        print()
    return 1 if (args.strict and any_failed) else 0


if __name__ == "__main__":
    sys.exit(main())
