#!/usr/bin/env python3
"""Tests of the benchmark tools bench/ratios.py, bench/tree_ratios.py and bench/run_ratios.sh, on synthetic Google
Benchmark JSON files (no benchmark is built or run).

The files are written here the way Google Benchmark 1.7 writes them: each row's per-repetition entries
(repetition_index 0..R-1) followed by its mean/median/stddev/cv aggregates, with family_index and
per_family_instance_index; with random interleaving the rows come out in the random order their last
repetitions finished, without it in registration (family_index) order. The items/s of every repetition are
generated here, and the expected figures are computed here from those raw numbers with the statistics module:
per run the ratio of the two rows' median items/s (of the median real times for the time rows forward_plain,
forward_checked and forward_disabled, named 'forward_plain/real_time'), across runs the median and the min-max
range, and PASS/FAIL on the worst run (the smallest ratio against a ">=" target, the largest against a "<="
one). The scripts' printed tables are parsed and compared.

Groups (--group, repeatable; default all):
  ratios  ratios.py: three runs (a target whose median passes but whose worst run fails is FAIL), one run (the
          range collapses to the value), Markdown, the pooled row table, --strict, the interleaving warnings;
          health_hist / health >= 0.85 (f32, f16; bf16 in --info) and forward_checked / forward_disabled time over
          forward_plain's <= 1.03 / 1.02, judged on the largest run; files without the forward rows (MISSING),
          with them in only some runs, and with nothing else
  tree    tree_ratios.py: three runs (median [min-max] of the runs' ratios) and one run (the old columns)
  script  run_ratios.sh: a missing benchmark fails naming it; a stand-in benchmark (a Python script writing
          prepared JSON) is run N times as separate processes with the interleaving flags, and the ratio table
          of its files is printed
Usage: bench_tools_test.py --work DIR [--group NAME]...
Exit status 0 when every check passed, 1 when one failed, 77 (CTest: skipped) when the script group runs and no
bash is installed.
"""
import argparse
import json
import os
import random
import re
import shutil
import stat
import statistics
import subprocess
import sys

SKIP = 77
ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RATIOS = os.path.join(ROOT, "bench", "ratios.py")
TREE = os.path.join(ROOT, "bench", "tree_ratios.py")
RUN_RATIOS = os.path.join(ROOT, "bench", "run_ratios.sh")
N = 67108864
FAILURES = []
CHECKS = [0]
WORK = None


def fail(msg):
    FAILURES.append(msg)
    print("FAIL: " + msg)


def expect(cond, msg):
    CHECKS[0] += 1
    if not cond:
        fail(msg)
    return cond


def expect_eq(got, want, what):
    return expect(got == want, f"{what}: got {got!r}, expected {want!r}")


def run(*args, env=None):
    p = subprocess.run([str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                       env=env)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def path(name):
    return os.path.join(WORK, name)


# --- the ratio rows and targets (bench/ratios.py's TARGETS, restated: label, numerator, denominator, minimum) ----
# (the targets of health_hist and of the forward rows are NEW_TARGETS, further down)

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
ROWS = [("read_anchor", d) for d in ("f32", "f64", "f16", "bf16")] + \
       [("health", d) for d in ("f32", "f64", "f16", "bf16")] + [("full_health", "f32")] + \
       [("read_anchor_mt", d) for d in ("f32", "f64", "f16", "bf16")] + \
       [("health_mt", d) for d in ("f32", "f64", "f16", "bf16")] + \
       [("eigen_multipass", "f32"), ("torch_multiop", "f32")]
BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2}


# --- synthetic Google Benchmark output ---------------------------------------------------------------------------

class Rep:
    def __init__(self, items, cpu_factor, ms=None):
        self.items = items            # items/s of this repetition (None: the entry has no items_per_second)
        self.cpu_factor = cpu_factor  # cpu_time / real_time (single-threaded rows)
        self.ms = ms                  # real time in ms of a time row (forward_*); else n / items


def gbench_doc(rows, order, reps_split=False, with_index=True, date="2026-11-25T09:00:00+00:00"):
    """A Google Benchmark JSON document. rows: [(run_name, threads, [Rep])] in registration order; order: the
    indices of rows in the order they are written. reps_split: write each repetition round as a whole (rows
    not contiguous) and the aggregates at the end."""
    def entry(fi, name, threads, rep, idx, nreps, n):
        real_ms = rep.ms if rep.ms is not None else n / rep.items * 1e3
        e = {"name": name, "family_index": fi, "per_family_instance_index": 0, "run_name": name,
             "run_type": "iteration", "repetitions": nreps, "repetition_index": idx, "threads": 1,
             "iterations": 10, "real_time": real_ms, "cpu_time": real_ms * rep.cpu_factor, "time_unit": "ms",
             "bytes_per_second": rep.items * BYTES.get(name.split("/")[1], 4) if name.count("/") >= 2 else 0.0,
             "items_per_second": rep.items, "nthreads": float(threads or 1)}
        if rep.ms is not None:  # a time row (forward_*): no bytes, no nthreads counter, items/s only if given
            del e["bytes_per_second"], e["nthreads"]
            if rep.items is None:
                del e["items_per_second"]
        if not with_index:
            del e["family_index"], e["per_family_instance_index"]
        return e

    def aggregates(fi, name, threads, reps, n):
        out = []
        items = [r.items for r in reps if r.items is not None]
        real = [r.ms if r.ms is not None else n / r.items * 1e3 for r in reps]
        cpu = [t * r.cpu_factor for t, r in zip(real, reps)]
        cv = lambda v: statistics.stdev(v) / statistics.mean(v)  # noqa: E731
        for agg, f in (("mean", statistics.mean), ("median", statistics.median), ("stddev", statistics.stdev),
                       ("cv", cv)):
            e = {"name": f"{name}_{agg}", "family_index": fi, "per_family_instance_index": 0, "run_name": name,
                 "run_type": "aggregate", "repetitions": len(reps), "threads": 1, "aggregate_name": agg,
                 "aggregate_unit": "percentage" if agg == "cv" else "time", "iterations": len(reps), "real_time": f(real), "cpu_time": f(cpu),
                 "time_unit": "ms", "items_per_second": f(items) if items else None, "nthreads": float(threads or 1)}
            if threads is None:
                del e["nthreads"]
            if not items:
                del e["items_per_second"]
            if not with_index:
                del e["family_index"], e["per_family_instance_index"]
            out.append(e)
        return out

    def size(name):
        parts = name.split("/")
        return int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 1

    benchmarks = []
    if reps_split:
        nreps = len(rows[0][2])
        for i in range(nreps):
            for k in order:
                name, threads, reps = rows[k]
                benchmarks.append(entry(k, name, threads, reps[i], i, nreps, size(name)))
        for k in order:
            name, threads, reps = rows[k]
            benchmarks += aggregates(k, name, threads, reps, size(name))
    else:
        for k in order:
            name, threads, reps = rows[k]
            for i, r in enumerate(reps):
                benchmarks.append(entry(k, name, threads, r, i, len(reps), size(name)))
            benchmarks += aggregates(k, name, threads, reps, size(name))
    return {"context": {"date": date, "host_name": "synthetic", "num_cpus": 2, "mhz_per_cpu": 2600,
                        "cpu_scaling_enabled": False, "caches": [], "load_avg": [0.5, 0.4, 0.3],
                        "library_build_type": "release", "nanscope_isa": "avx512"},
            "benchmarks": benchmarks}


def shuffled_order(rng, k):
    """A random order of k rows that is not the registration order (what a shuffled run writes)."""
    order = list(range(k))
    while order == sorted(order):
        rng.shuffle(order)
    return order


def write(name, doc):
    with open(path(name), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2)
    return path(name)


# --- one synthetic host run ---------------------------------------------------------------------------------------

def make_run(rng, nreps, designed):
    """{(family, dtype): [Rep]} of one run. designed: {label: ratio of the medians wanted in this run}; a designed
    ratio's numerator reps are its denominator's reps times the ratio, in another order."""
    base = {"read_anchor": 7.6e9, "health": 5.7e9, "full_health": 6.1e9, "read_anchor_mt": 10.8e9,
            "health_mt": 8.6e9, "eigen_multipass": 0.75e9, "torch_multiop": 0.09e9}
    scale = {"f32": 1.0, "f64": 0.5, "f16": 1.9, "bf16": 1.8}
    data = {}
    for fam, dt in ROWS:
        b = base[fam] * scale[dt]
        data[(fam, dt)] = [Rep(b * rng.uniform(0.80, 1.15), rng.uniform(0.90, 1.0)) for _ in range(nreps)]
    by_label = {t[0]: t for t in TARGETS}
    for label, r in designed.items():
        _, num, den, _ = by_label[label]
        den_reps = data[den]
        items = [x.items * r for x in den_reps]
        rng.shuffle(items)
        data[num] = [Rep(v, rng.uniform(0.90, 1.0)) for v in items]
    return data


def run_doc(rng, data, interleaved=True, **kw):
    rows = [(f"{fam}/{dt}/{N}/real_time", 2 if fam.endswith("_mt") else 1, data[(fam, dt)]) for fam, dt in ROWS]
    order = shuffled_order(rng, len(rows)) if interleaved else list(range(len(rows)))
    return gbench_doc(rows, order, **kw)


def med(reps):
    return statistics.median([r.items for r in reps])


def expected_ratios(runs):
    """{label: (median, min, max, status, best median, cpu median or None)} from the raw numbers."""
    out = {}
    for label, num, den, target in TARGETS:
        vals = [med(d[num]) / med(d[den]) for d in runs]
        best = [max(r.items for r in d[num]) / max(r.items for r in d[den]) for d in runs]
        single = not num[0].endswith("_mt") and not den[0].endswith("_mt")
        cpu = None
        if single:
            cpu = statistics.median([
                statistics.median([N / r.items * 1e3 * r.cpu_factor for r in d[den]]) /
                statistics.median([N / r.items * 1e3 * r.cpu_factor for r in d[num]]) for d in runs])
        status = "PASS" if min(vals) >= target else "FAIL"
        out[label] = (statistics.median(vals), min(vals), max(vals), status, statistics.median(best), cpu)
    return out


def parse_text_table(text, first_header, nth=0):
    """Rows of the nth plain-text table whose header line starts with first_header: {first cell: [cells]}."""
    lines = text.splitlines()
    table = {}
    for i, line in enumerate(lines):
        if line.startswith(first_header + " "):
            if nth:
                nth -= 1
                continue
            for row in lines[i + 1:]:
                if not row.strip() or row.startswith("not met"):
                    break
                cells = re.split(r"\s{2,}", row.strip())
                table[cells[0]] = cells[1:]
            break
    return table


def parse_md_table(text, first_header):
    lines = text.splitlines()
    table = {}
    for i, line in enumerate(lines):
        if line.startswith(f"| {first_header} |"):
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                cells = [c.strip() for c in row.strip().strip("|").split("|")]
                table[cells[0]] = cells[1:]
            break
    return table


def check_ratio_table(table, expected, nruns, what, dash="-"):
    for label, (m, lo, hi, status, best, cpu) in expected.items():
        cells = table.get(label)
        if not expect(cells is not None, f"{what}: no line for '{label}'"):
            continue
        if not expect_eq(len(cells), 7, f"{what}: '{label}' cell count ({cells})"):
            continue
        got_med, got_range, got_runs, got_target, got_status, got_best, got_cpu = cells
        expect_eq(got_med, f"{m:.3f}", f"{what}: '{label}' median of the runs' ratios")
        expect_eq(got_range, f"{lo:.3f}{dash}{hi:.3f}", f"{what}: '{label}' range")
        expect_eq(got_runs, str(nruns), f"{what}: '{label}' runs")
        expect_eq(got_status, status, f"{what}: '{label}' status")
        expect_eq(got_best, f"{best:.3f}", f"{what}: '{label}' best reps")
        expect_eq(got_cpu, f"{cpu:.3f}" if cpu is not None else "-", f"{what}: '{label}' CPU time")


# --- groups -------------------------------------------------------------------------------------------------------

def group_ratios():
    rng = random.Random(18)
    nreps = 5
    health = "f32 health / read_anchor"
    full = "f32 full_health / read_anchor"
    t_health = dict((t[0], t[3]) for t in TARGETS)[health]
    t_full = dict((t[0], t[3]) for t in TARGETS)[full]
    # health: the median run passes, the worst run fails; full_health: every run passes
    designs = [{health: t_health * 1.06, full: t_full * 1.10},
               {health: t_health * 0.93, full: t_full * 1.02},
               {health: t_health * 1.03, full: t_full * 1.20}]
    runs = [make_run(rng, nreps, d) for d in designs]
    files = [write(f"run{i + 1}.json", run_doc(rng, d, date=f"2026-11-25T09:0{i}:00+00:00"))
             for i, d in enumerate(runs)]
    exp = expected_ratios(runs)
    expect(exp[health][0] >= t_health and exp[health][1] < t_health and exp[health][3] == "FAIL",
           "the test's own design: health median passes, worst fails")
    expect(exp[full][3] == "PASS", "the test's own design: full_health passes in every run")

    # three runs, plain text
    rc, out, err = run(sys.executable, RATIOS, *files)
    expect_eq(rc, 0, "ratios.py, 3 runs: exit status without --strict")
    expect("PASS/FAIL on the worst run" in out, "ratios.py: the header says PASS/FAIL is judged on the worst run")
    expect("over 3 run(s)" in out, "ratios.py: the header gives the number of runs")
    expect("warning" not in err, f"ratios.py: no interleaving warning for interleaved files (stderr: {err!r})")
    expect("note: " not in err, f"ratios.py: no 'fewer than 3 runs' note for 3 runs (stderr: {err!r})")
    table = parse_text_table(out, "ratio")
    check_ratio_table(table, exp, 3, "3 runs, text")
    if health in table:
        expect_eq(table[health][4], "FAIL", "worst run decides: median passes, status FAIL")
    not_met = [line for line in out.splitlines() if line.startswith("not met:")]
    expect(not_met and health in not_met[0] and full not in not_met[0],
           f"ratios.py: 'not met' names the health ratio and not full_health ({not_met})")
    for i, f in enumerate(files, 1):
        expect(f"run {i}: {f}" in out, f"ratios.py: run {i} is listed with its file")

    # --strict: exit 1 because a target fails in its worst run
    rc, _, _ = run(sys.executable, RATIOS, *files, "--strict")
    expect_eq(rc, 1, "ratios.py --strict with a failing worst run: exit status")

    # Markdown: median and range columns, the range with an en dash
    rc, out, _ = run(sys.executable, RATIOS, *files, "--markdown")
    expect_eq(rc, 0, "ratios.py --markdown: exit status")
    md = parse_md_table(out, "ratio")
    expect(out.count("| ratio | median | range | runs | target | status | best reps | CPU time |") == 1,
           "ratios.py --markdown: header with median and range columns")
    check_ratio_table(md, exp, 3, "3 runs, markdown", dash="\u2013")

    # row table: every run's repetitions pooled
    rc, out, _ = run(sys.executable, RATIOS, *files, "--table")
    rt = parse_text_table(out, "row")
    for fam, dt in (("health", "f32"), ("read_anchor_mt", "bf16")):
        cells = rt.get(f"{fam}/{dt}/{N}")
        if expect(cells is not None, f"row table: {fam}/{dt}"):
            pooled = [r.items for d in runs for r in d[(fam, dt)]]
            expect_eq(cells[2], f"{statistics.median(pooled) / 1e9:.3f}", f"row table {fam}/{dt}: Gitems/s pooled")
            expect_eq(cells[4], str(3 * nreps), f"row table {fam}/{dt}: repetitions of all runs")
            spread = (max(pooled) - min(pooled)) / statistics.median(pooled)
            expect_eq(cells[5], f"{100 * spread:.1f}%", f"row table {fam}/{dt}: spread")

    # one run: the range collapses to the run's value; a note asks for 3 runs
    rc, out, err = run(sys.executable, RATIOS, files[1])
    expect_eq(rc, 0, "ratios.py, 1 run: exit status")
    exp1 = expected_ratios(runs[1:2])
    t1 = parse_text_table(out, "ratio")
    check_ratio_table(t1, exp1, 1, "1 run, text")
    for label, (m, lo, hi, _, _, _) in exp1.items():
        expect(m == lo == hi, f"1 run: median = min = max for '{label}'")
    expect("note: 1 run(s)" in err, f"ratios.py, 1 run: a note on stderr asks for 3 runs ({err!r})")
    expect("run 1:" not in out, "ratios.py, 1 run: no per-run list (output as before)")

    # interleaving detection
    seq = write("sequential.json", run_doc(rng, runs[0], interleaved=False))
    rc, out, err = run(sys.executable, RATIOS, seq, files[0], files[2])
    expect_eq(rc, 0, "ratios.py with a non-interleaved file: still exit 0")
    warn = [line for line in err.splitlines() if "warning" in line]
    expect(len(warn) == 1 and seq in warn[0] and "random_interleaving" in warn[0] and "registration order" in warn[0],
           f"ratios.py: one warning, naming the non-interleaved file ({err!r})")
    split = write("split.json", run_doc(rng, runs[0], interleaved=False, reps_split=True))
    rc, out, err = run(sys.executable, RATIOS, split)
    expect("warning" not in err, f"ratios.py: repetitions not contiguous count as interleaved ({err!r})")
    check_ratio_table(parse_text_table(out, "ratio"), expected_ratios(runs[:1]), 1,
                      "1 run written repetition by repetition")
    noidx = write("noindex.json", run_doc(rng, runs[0], interleaved=False, with_index=False))
    rc, out, err = run(sys.executable, RATIOS, noidx)
    expect("cannot tell" in err and noidx in err, f"ratios.py: no family_index: 'cannot tell' warning ({err!r})")
    # an upper-bound target ("<=", as forward_checked <= 1.05x forward_plain would be) is judged on the largest run
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, os.path.dirname(RATIOS))
    import ratios  # noqa: E402  (bench/ratios.py)
    expect_eq(ratios.worst_meets([1.01, 1.06, 1.04], ("<=", 1.05)), (1.06, False), "worst_meets, <=, a run above")
    expect_eq(ratios.worst_meets([1.01, 1.04, 1.03], ("<=", 1.05)), (1.04, True), "worst_meets, <=, all below")
    expect_eq(ratios.worst_meets([0.80, 0.74, 0.79], 0.75), (0.74, False), "worst_meets, >=, a run below")
    expect_eq(ratios.target_text(("<=", 1.05)), "<= 1.05", "target_text of an upper bound")
    two = gbench_doc([(f"health/f32/{N}/real_time", 1, runs[0][("health", "f32")]),
                      (f"health_hash/f32/{N}/real_time", 1, runs[0][("read_anchor", "f32")])], [0, 1])
    rc, out, err = run(sys.executable, RATIOS, write("two.json", two))
    expect("warning" in err and "1 time in 2" in err, f"ratios.py: 2 rows in order: warning states the chance ({err!r})")

    check_forward_and_hist()


# --- the health_hist targets (issue 16) and the forward rows: health_hist >= 0.85x health, forward_* <= a bound ---

# (label, numerator, denominator, target); a dtype of None is a time row (forward_*: ratio of median real time)
NEW_TARGETS = [
    ("f32 health_hist / health", ("health_hist", "f32"), ("health", "f32"), 0.85),
    ("f16 health_hist / health", ("health_hist", "f16"), ("health", "f16"), 0.85),
    ("forward_checked time / forward_plain time", ("forward_checked", None), ("forward_plain", None), ("<=", 1.03)),
    ("forward_disabled time / forward_plain time", ("forward_disabled", None), ("forward_plain", None), ("<=", 1.02)),
]
BF16_HIST = ("bf16 health_hist / health", ("health_hist", "bf16"), ("health", "bf16"), None)
TOKENS = 128  # forward rows that report items/s report tokens per second (bench/forward_*.cpp)


def around(m, nreps, rng):
    """nreps values (odd) whose median is exactly m, the others spread below and above it."""
    half = nreps // 2
    values = [m * rng.uniform(0.90, 0.99) for _ in range(half)] + [m] + \
             [m * rng.uniform(1.01, 1.12) for _ in range(half)]
    rng.shuffle(values)
    return values


def make_fh_run(rng, nreps, hist, checked, disabled, health=True, forward=True, tokens=False):
    """{(family, dtype): [Rep]} of one run: health and health_hist in f32/f16/bf16 (hist: {dtype: ratio of the
    medians of items/s}), forward_plain/checked/disabled (checked, disabled: ratio of the median times; tokens:
    the forward entries also report items/s)."""
    data = {}
    if health:
        for dt, base in (("f32", 5.7e9), ("f16", 10.8e9), ("bf16", 10.3e9)):
            den = [base * rng.uniform(0.85, 1.15) for _ in range(nreps)]
            data[("health", dt)] = [Rep(v, rng.uniform(0.90, 1.0)) for v in den]
            num = around(statistics.median(den) * hist[dt], nreps, rng)
            data[("health_hist", dt)] = [Rep(v, rng.uniform(0.90, 1.0)) for v in num]
    if forward:
        plain = [rng.uniform(31.0, 35.0) for _ in range(nreps)]
        rows = {"forward_plain": plain,
                "forward_checked": around(statistics.median(plain) * checked, nreps, rng),
                "forward_disabled": around(statistics.median(plain) * disabled, nreps, rng)}
        for fam, ms in rows.items():
            data[(fam, None)] = [Rep(TOKENS / (t / 1e3) if tokens else None, rng.uniform(0.93, 1.0), ms=t)
                                 for t in ms]
    return data


def fh_doc(rng, data):
    """The run as Google Benchmark writes it, rows shuffled: forward_* as 'forward_plain/real_time' (no dtype,
    no element count, no nthreads counter), the others as 'health/f32/67108864/real_time'."""
    rows = []
    for (fam, dt), reps in data.items():
        if dt is None:
            rows.append((f"{fam}/real_time", None, reps))
        else:
            rows.append((f"{fam}/{dt}/{N}/real_time", 1, reps))
    return gbench_doc(rows, shuffled_order(rng, len(rows)))


def fh_expected(runs, specs):
    """{label: (median, min, max, status, best median, cpu median)} from the raw numbers; status MISSING (and
    the figures of the runs that have both rows) when a run lacks a row."""
    out = {}
    for label, num, den, target in specs:
        have = [d for d in runs if num in d and den in d]
        if num[1] is None:  # time rows: median real time of num / den; best = fastest (shortest) repetition
            vals = [statistics.median([r.ms for r in d[num]]) / statistics.median([r.ms for r in d[den]])
                    for d in have]
            best = [min(r.ms for r in d[num]) / min(r.ms for r in d[den]) for d in have]
            cpu = [statistics.median([r.ms * r.cpu_factor for r in d[num]]) /
                   statistics.median([r.ms * r.cpu_factor for r in d[den]]) for d in have]
        else:
            vals = [med(d[num]) / med(d[den]) for d in have]
            best = [max(r.items for r in d[num]) / max(r.items for r in d[den]) for d in have]
            cpu = [statistics.median([N / r.items * 1e3 * r.cpu_factor for r in d[den]]) /
                   statistics.median([N / r.items * 1e3 * r.cpu_factor for r in d[num]]) for d in have]
        if target is None:
            status = "info"
        elif len(have) < len(runs):
            status = "MISSING"
        elif isinstance(target, tuple):
            status = "PASS" if max(vals) <= target[1] else "FAIL"
        else:
            status = "PASS" if min(vals) >= target else "FAIL"
        m = lambda v: statistics.median(v) if v else None  # noqa: E731
        out[label] = (m(vals), min(vals) if vals else None, max(vals) if vals else None, status, m(best), m(cpu),
                      len(have))
    return out


def check_fh_table(table, expected, nruns, what, specs, dash="-"):
    """The lines of specs in a ratio table: median, range, runs, target text, status, best reps, CPU time."""
    targets = {label: target for label, _, _, target in specs}
    for label, (m, lo, hi, status, best, cpu, have) in expected.items():
        cells = table.get(label)
        if not expect(cells is not None, f"{what}: no line for '{label}'"):
            continue
        f3 = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        want = [f3(m), f"{lo:.3f}{dash}{hi:.3f}" if lo is not None else "-",
                str(have) if have == nruns else f"{have}/{nruns}"]
        if status != "info":
            t = targets[label]
            want += [f"{t[0]} {t[1]:g}" if isinstance(t, tuple) else f">= {t:g}", status]
        want += [f3(best), f3(cpu)]
        expect_eq(cells, want, f"{what}: '{label}' cells (median, range, runs, [target, status,] best, CPU)")


def check_forward_and_hist():
    rng = random.Random(31)
    nreps = 5
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, os.path.dirname(RATIOS))
    import ratios  # noqa: E402  (bench/ratios.py)

    # row names: the time rows parse without dtype and element count; other shapes are still not rows
    expect_eq(ratios.row_key("forward_plain/real_time"), ("forward_plain", None, None), "row_key forward_plain")
    expect_eq(ratios.row_key("forward_checked/real_time"), ("forward_checked", None, None),
              "row_key forward_checked")
    expect_eq(ratios.row_key("forward_disabled/real_time"), ("forward_disabled", None, None),
              "row_key forward_disabled")
    expect_eq(ratios.row_key(f"health/f32/{N}/real_time"), ("health", "f32", N), "row_key health")
    expect_eq(ratios.row_key(f"health_hist/f16/{N}/real_time"), ("health_hist", "f16", N), "row_key health_hist")
    for name in ("forward24_plain/real_time", "forward_budget/200/real_time", "tree_summary/pruned",
                 "forward_gate_on/real_time", "forward_plain/extra/real_time"):
        expect_eq(ratios.row_key(name), None, f"row_key {name} (not a ratio row)")

    # set A: health_hist f32 passes, f16's median passes and its worst (smallest) run fails;
    #        forward_checked passes (largest run 1.026 <= 1.03), forward_disabled's median passes (1.012) and its
    #        largest run fails (1.031 > 1.02); the forward entries report no items/s
    designs_a = [({"f32": 0.90, "f16": 0.88, "bf16": 0.70}, 1.010, 1.004),
                 ({"f32": 0.87, "f16": 0.80, "bf16": 0.75}, 1.026, 1.031),
                 ({"f32": 0.93, "f16": 0.86, "bf16": 0.72}, 1.018, 1.012)]
    runs_a = [make_fh_run(rng, nreps, h, c, d) for h, c, d in designs_a]
    files_a = [write(f"fh_a{i + 1}.json", fh_doc(rng, d)) for i, d in enumerate(runs_a)]
    exp_a = fh_expected(runs_a, NEW_TARGETS)
    checked, disabled = NEW_TARGETS[2][0], NEW_TARGETS[3][0]
    hist32, hist16 = NEW_TARGETS[0][0], NEW_TARGETS[1][0]
    expect([exp_a[k][3] for k in (hist32, hist16, checked, disabled)] == ["PASS", "FAIL", "PASS", "FAIL"],
           f"the test's own design of set A ({exp_a})")
    expect(exp_a[disabled][0] <= 1.02 < exp_a[disabled][2] and exp_a[hist16][0] >= 0.85 > exp_a[hist16][1],
           "the test's own design: the medians pass where the worst run fails")

    rc, out, err = run(sys.executable, RATIOS, *files_a, "--info")
    expect_eq(rc, 0, f"ratios.py, forward and health_hist rows: exit status ({err!r})")
    expect("warning" not in err, f"ratios.py, forward rows: no interleaving warning ({err!r})")
    table = parse_text_table(out, "ratio")
    check_fh_table(table, exp_a, 3, "set A, text", NEW_TARGETS)
    if disabled in table:
        expect_eq(table[disabled][3:5], ["<= 1.02", "FAIL"], "forward_disabled: largest run above the bound")
    if checked in table:
        expect_eq(table[checked][3:5], ["<= 1.03", "PASS"], "forward_checked: largest run within the bound")
    not_met = [line for line in out.splitlines() if line.startswith("not met:")]
    expect(not_met and disabled in not_met[0] and hist16 in not_met[0] and checked not in not_met[0] and
           hist32 not in not_met[0], f"set A: 'not met' names forward_disabled and f16 health_hist only ({not_met})")
    info = parse_text_table(out, "ratio", nth=1)
    check_fh_table(info, fh_expected(runs_a, [BF16_HIST]), 3, "set A, --info", [BF16_HIST])
    expect(BF16_HIST[0] not in table, "bf16 health_hist / health: information only, not a target")
    rc, _, _ = run(sys.executable, RATIOS, *files_a, "--strict")
    expect_eq(rc, 1, "set A --strict: a '<=' target fails in its largest run")

    rc, out, _ = run(sys.executable, RATIOS, *files_a, "--markdown")
    check_fh_table(parse_md_table(out, "ratio"), exp_a, 3, "set A, markdown", NEW_TARGETS, dash="\u2013")

    # row table: the time rows by their name alone, all runs' repetitions pooled; the health rows as before
    rc, out, _ = run(sys.executable, RATIOS, *files_a, "--table")
    rt = parse_text_table(out, "row")
    for fam in ("forward_plain", "forward_checked"):
        cells = rt.get(fam)
        if expect(cells is not None, f"row table: {fam}"):
            pooled_ms = [r.ms for d in runs_a for r in d[(fam, None)]]
            expect_eq(cells[0], f"{statistics.median(pooled_ms):.3g} ms", f"row table {fam}: median time")
            expect_eq(cells[1:3], ["-", "-"], f"row table {fam}: no GB/s, no Gitems/s")
            expect_eq(cells[4], str(3 * nreps), f"row table {fam}: repetitions of all runs")
    expect(f"health_hist/f32/{N}" in rt, "row table: health_hist/f32 row")

    # set B: forward rows only, with tokens/s; forward_checked's median passes (1.020) and its largest run fails
    # (1.045 > 1.03), forward_disabled passes; every other target is MISSING
    designs_b = [(1.012, 0.995), (1.045, 1.015), (1.020, 1.005)]
    runs_b = [make_fh_run(rng, nreps, None, c, d, health=False, tokens=True) for c, d in designs_b]
    files_b = [write(f"fh_b{i + 1}.json", fh_doc(rng, d)) for i, d in enumerate(runs_b)]
    exp_b = fh_expected(runs_b, NEW_TARGETS)
    expect([exp_b[k][3] for k in (hist32, hist16, checked, disabled)] == ["MISSING", "MISSING", "FAIL", "PASS"],
           f"the test's own design of set B ({exp_b})")
    rc, out, err = run(sys.executable, RATIOS, *files_b)
    expect_eq(rc, 0, f"ratios.py, forward rows only: exit status ({err!r})")
    table = parse_text_table(out, "ratio")
    check_fh_table(table, exp_b, 3, "set B (forward rows only), text", NEW_TARGETS)
    if checked in table:
        expect_eq(table[checked][4], "FAIL", "forward_checked: median passes, largest run fails, status FAIL")

    # files without forward rows still work: the forward targets are MISSING (0 of 3 runs), the others judged
    runs_c = [{k: v for k, v in d.items() if k[1] is not None} for d in runs_a]
    files_c = [write(f"fh_c{i + 1}.json", fh_doc(rng, d)) for i, d in enumerate(runs_c)]
    exp_c = fh_expected(runs_c, NEW_TARGETS)
    rc, out, err = run(sys.executable, RATIOS, *files_c)
    expect_eq(rc, 0, f"ratios.py, no forward rows: exit status ({err!r})")
    table = parse_text_table(out, "ratio")
    check_fh_table(table, exp_c, 3, "set C (no forward rows), text", NEW_TARGETS)
    if checked in table:
        expect_eq(table[checked], ["-", "-", "0/3", "<= 1.03", "MISSING", "-", "-"], "no forward rows: MISSING line")
    not_met = [line for line in out.splitlines() if line.startswith("not met:")]
    expect(not_met and checked in not_met[0] and disabled in not_met[0],
           f"no forward rows: 'not met' names the missing forward targets ({not_met})")
    rc, out, _ = run(sys.executable, RATIOS, *files_c, "--table")
    expect("forward_plain" not in out.split("Ratios at")[0], "no forward rows: none in the row table")

    # one run of three without forward rows: MISSING over 2/3 runs, median and range of the two that have them
    mixed = runs_a[:2] + runs_c[2:]
    exp_m = fh_expected(mixed, NEW_TARGETS)
    rc, out, _ = run(sys.executable, RATIOS, files_a[0], files_a[1], files_c[2])
    check_fh_table(parse_text_table(out, "ratio"), exp_m, 3, "forward rows in 2 of 3 runs", NEW_TARGETS)


def tree_rows(rng, nreps, checked_ratio, unpruned_ratio):
    """[(name, threads, [Rep])] of the tree rows; items/s = 1000 / ms so that real_time = ms (n = 1)."""
    plain_ms = [rng.uniform(540, 600) for _ in range(nreps)]
    checked_ms = [m * checked_ratio for m in plain_ms]
    rng.shuffle(checked_ms)
    pruned_ms = [rng.uniform(560, 620) for _ in range(nreps)]
    unpruned_ms = [m * unpruned_ratio for m in plain_ms]
    rng.shuffle(unpruned_ms)
    summary_ms = [rng.uniform(1.6, 1.9) for _ in range(nreps)]
    return {"forward24_plain": plain_ms, "forward24_checked": checked_ms, "forward24_tree/pruned": pruned_ms,
            "forward24_tree/unpruned": unpruned_ms, "tree_summary/pruned": summary_ms}


def tree_doc(rng, rows):
    entries = []
    order = shuffled_order(rng, len(rows))
    names = list(rows)
    for k in order:
        name = names[k]
        for i, ms in enumerate(rows[name]):
            e = {"name": name + "/real_time", "family_index": k, "per_family_instance_index": 0,
                 "run_name": name + "/real_time", "run_type": "iteration", "repetitions": len(rows[name]),
                 "repetition_index": i, "threads": 1, "iterations": 1, "real_time": ms * 1e6,
                 "cpu_time": ms * 1e6, "time_unit": "ns"}
            if name.startswith("tree_summary"):
                e["bytes_per_second"] = 19612 / (ms / 1e3)
                e["json_bytes_per_pass"] = 19612.0
            entries.append(e)
        entries.append({"name": name + "/real_time_median", "family_index": k, "per_family_instance_index": 0,
                        "run_name": name + "/real_time", "run_type": "aggregate", "aggregate_name": "median",
                        "repetitions": len(rows[name]), "threads": 1, "iterations": 5,
                        "real_time": statistics.median(rows[name]) * 1e6, "cpu_time": 0.0, "time_unit": "ns"})
    return {"context": {"date": "2026-11-25"}, "benchmarks": entries}


def group_tree():
    rng = random.Random(24)
    nreps = 5
    runs = [tree_rows(rng, nreps, c, u) for c, u in ((1.004, 1.020), (0.998, 1.031), (1.010, 1.012))]
    files = [write(f"tree{i + 1}.json", tree_doc(rng, r)) for i, r in enumerate(runs)]

    def per_run(name, base):
        return [statistics.median(r[name]) / statistics.median(r[base]) for r in runs]

    rc, out, err = run(sys.executable, TREE, *files)
    expect_eq(rc, 0, "tree_ratios.py, 3 runs: exit status")
    expect("warning" not in err, f"tree_ratios.py: no warning for interleaved files ({err!r})")
    t = parse_text_table(out, "row")
    # columns: median, reps, runs, vs plain, vs checked, JSON MB/s, JSON bytes/pass
    for name in ("forward24_checked", "forward24_tree/pruned", "forward24_tree/unpruned"):
        cells = t.get(name)
        if not expect(cells is not None and len(cells) == 7, f"tree 3 runs: line for {name} ({cells})"):
            continue
        meds = [statistics.median(r[name]) for r in runs]
        expect_eq(cells[0], f"{statistics.median(meds):.2f} ms", f"tree 3 runs: {name} median of the runs' medians")
        expect_eq(cells[1], str(3 * nreps), f"tree 3 runs: {name} reps of all runs")
        expect_eq(cells[2], "3", f"tree 3 runs: {name} runs")
        for col, base in ((3, "forward24_plain"), (4, "forward24_checked")):
            v = per_run(name, base)
            want = f"{statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"
            expect_eq(cells[col], want, f"tree 3 runs: {name} vs {base}")
    cells = t.get("tree_summary/pruned")
    if expect(cells is not None and len(cells) == 7, f"tree 3 runs: tree_summary line ({cells})"):
        mbs = [statistics.median([19612 / (ms / 1e3) for ms in r["tree_summary/pruned"]]) / 1e6 for r in runs]
        expect_eq(cells[5], f"{statistics.median(mbs):.1f} [{min(mbs):.1f}-{max(mbs):.1f}]",
                  "tree 3 runs: JSON MB/s median [range]")
        expect_eq(cells[3], "-", "tree 3 runs: no ratio for tree_summary rows")

    # one run: the columns of before, no range
    rc, out, err = run(sys.executable, TREE, files[0])
    t = parse_text_table(out, "row")
    cells = t.get("forward24_tree/unpruned")
    if expect(cells is not None and len(cells) == 6, f"tree 1 run: 6 cells as before ({cells})"):
        expect_eq(cells[1], str(nreps), "tree 1 run: reps")
        expect_eq(cells[2], f"{per_run('forward24_tree/unpruned', 'forward24_plain')[0]:.3f}",
                  "tree 1 run: vs forward24_plain")
    rc, out, _ = run(sys.executable, TREE, *files, "--markdown")
    expect(out.count("| row | median | reps | runs | vs forward24_plain |") == 1, "tree --markdown: header")


def group_script():
    bash = shutil.which("bash")
    if not bash:
        print("SKIPPED: no bash")
        return SKIP
    # a missing benchmark: exit 1, the message names it
    missing = path("no/such/nanscope_bench_host")
    env = dict(os.environ, BENCH_BIN=missing, BENCH_OUT=path("out_missing"))
    rc, out, err = run(bash, RUN_RATIOS, env=env)
    expect_eq(rc, 1, "run_ratios.sh without the benchmark: exit status")
    expect(missing in err and "missing" in err, f"run_ratios.sh: the message names the missing benchmark ({err!r})")
    expect(not os.path.exists(path("out_missing")), "run_ratios.sh without the benchmark: nothing written")

    # a stand-in benchmark: copies prepared JSON run k to --benchmark_out and logs its arguments, one line a process
    rng = random.Random(7)
    runs = [make_run(rng, 5, {}) for _ in range(4)]
    prepared = [write(f"prepared{i}.json", run_doc(rng, d)) for i, d in enumerate(runs)]
    fake = path("fake_bench.py")
    with open(fake, "w", encoding="utf-8") as f:
        f.write(f"""#!{sys.executable}
import json, os, shutil, sys
log = {path('fake_args.jsonl')!r}
n = sum(1 for _ in open(log)) if os.path.exists(log) else 0
with open(log, "a") as f:
    f.write(json.dumps({{"pid": os.getpid(), "argv": sys.argv[1:]}}) + "\\n")
out = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--benchmark_out=")][0]
shutil.copy({prepared!r}[n], out)
""")
    os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
    outdir = path("out_fake")
    env = dict(os.environ, BENCH_BIN=fake, PYTHON=sys.executable)
    rc, out, err = run(bash, RUN_RATIOS, "-n", "4", "-o", outdir, "-f", "^(health|read_anchor)/", "--", "--markdown",
                       env=env)
    expect_eq(rc, 0, f"run_ratios.sh with a stand-in benchmark: exit status (stderr {err!r})")
    calls = [json.loads(line) for line in open(path("fake_args.jsonl"))] if os.path.exists(
        path("fake_args.jsonl")) else []
    expect_eq(len(calls), 4, "run_ratios.sh -n 4: benchmark processes")
    expect_eq(len({c["pid"] for c in calls}), len(calls), "run_ratios.sh: each run a separate process")
    for i, c in enumerate(calls, 1):
        a = c["argv"]
        for flag in ("--benchmark_enable_random_interleaving=true", "--benchmark_repetitions=5",
                     "--benchmark_min_time=0.2", "--benchmark_out_format=json",
                     f"--benchmark_out={outdir}/run{i}.json", "--benchmark_filter=^(health|read_anchor)/"):
            expect(flag in a, f"run_ratios.sh run {i}: {flag} in {a}")
    expect("| ratio | median | range | runs |" in out, "run_ratios.sh: the ratio table (Markdown, from --)")
    rc2, direct, _ = run(sys.executable, RATIOS, *[f"{outdir}/run{i}.json" for i in range(1, 5)], "--markdown")
    expect_eq(out, direct, "run_ratios.sh output = ratios.py on its 4 files")
    check_ratio_table(parse_md_table(out, "ratio"), expected_ratios(runs), 4, "run_ratios.sh, 4 runs",
                      dash="\u2013")

    # a failing run: exit 1 with the run's log named
    failing = path("failing_bench.sh")
    with open(failing, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\necho 'benchmark broke' >&2\nexit 3\n")
    os.chmod(failing, 0o755)
    env = dict(os.environ, BENCH_BIN=failing, PYTHON=sys.executable)
    rc, out, err = run(bash, RUN_RATIOS, "-o", path("out_failing"), env=env)
    expect_eq(rc, 1, "run_ratios.sh with a failing benchmark: exit status")
    expect("run 1 failed (exit status 3)" in err and "benchmark broke" in err,
           f"run_ratios.sh: a failing run is reported with its output ({err!r})")


GROUPS = {"ratios": group_ratios, "tree": group_tree, "script": group_script}


def main():
    global WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--group", action="append", choices=list(GROUPS))
    a = ap.parse_args()
    skipped = False
    for g in a.group or list(GROUPS):
        WORK = os.path.join(os.path.abspath(a.work), g)
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
        print(f"--- {g}")
        if GROUPS[g]() == SKIP:
            skipped = True
    print(f"{CHECKS[0]} checks, {len(FAILURES)} failed")
    if FAILURES:
        return 1
    return SKIP if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
