#!/usr/bin/env python3
"""How nanscope-merge's time and memory grow with the number of ranks (issue 29, item 8).

Writes synthetic evidence for N ranks x E events (the format rank_evidence.hpp writes) into a temporary
directory and times `nanscope-merge --json DIR` under `/usr/bin/time -v`, pinned to one core with
`taskset -c 0`. The run it models, every step on every rank:

  embed, layer0, layer1, all_reduce on the rank's tensor-parallel group of 8 ("tp<g>", with "members"),
  layer2, send to rank+1 and recv from rank-1 on "world" (a ring), layer3, all_reduce on "world" (no
  "members", as an NCCL user describes it), head

so 10 events a step. At step --fault-step every rank's layer0 makes a NaN: every rank is a first producing site at
the same step (all concurrent), every later send/recv carries it (N carriers a step to put in happens-before
order), and every collective after it has non-finite inputs everywhere.

  merge_scale.py --merge build/h-merge/tools/merge/nanscope-merge [--ranks 512,1024,2048,4096] [--events 1000]
                 [--fault-step 40] [--repeat 3] [--judge cpu|wall] [--work DIR] [--keep] [--no-pin]

Runs each size --repeat times (3) and keeps the fastest. Prints one line per size (wall-clock and CPU seconds,
peak RSS, the ratio to the previous size) and, last,
`N of M targets met`. Targets: the largest size (4096 ranks x 1000 events by default) in <= 10 s and <= 4 GiB;
every doubling of the ranks costs <= 2.3x the time. Times are judged on CPU seconds (user + system) unless
--judge wall: on an idle core they are the wall-clock time, and on a shared machine they are not inflated by other
processes. This is a measurement, not a test: it does not fail a build.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

MAX_SECONDS = 10.0
MAX_RSS_KIB = 4 * 1024 * 1024
MAX_DOUBLING = 2.3
TP = 8  # tensor-parallel group size


def health(bad):
    return ('{"dtype": "f32", "shape": [1024], "count": 1024, "nan": %d, "pos_inf": 0, "neg_inf": 0, '
            '"nonfinite": %s}' % ((1, "true") if bad else (0, "false")))


H = {False: health(False), True: health(True)}


def frame(order, step, path, cls, in_bad, out_bad):
    return ('    {"order": %d, "type": "frame", "step": %d, "module_path": "%s", "class": "%s", "complete": true, '
            '"tensors": [\n      {"role": "input", "context": "input[0]", "allowed": false, "health": %s},\n'
            '      {"role": "output", "context": "output", "allowed": false, "health": %s}]}'
            % (order, step, path, cls, H[in_bad], H[out_bad]))


def collective(order, step, comm, size, crank, members, seq, in_bad, out_bad):
    return ('    {"order": %d, "type": "collective", "kind": "all_reduce", "step": %d, "comm": "%s", "comm_size": %d, '
            '"comm_rank": %d, "members": [%s], "seq": %d, "site": "model", "input": %s, "output": %s}'
            % (order, step, comm, size, crank, members, seq, H[in_bad], H[out_bad]))


def p2p(order, step, kind, world, rank, peer, seq, bad):
    side = "input" if kind == "send" else "output"
    return ('    {"order": %d, "type": "%s", "kind": "%s", "step": %d, "comm": "world", "comm_size": %d, '
            '"comm_rank": %d, "members": [], "seq": %d, "peer": %d, "tag": 0, "site": "pipe", "%s": %s}'
            % (order, kind, kind, step, world, rank, seq, peer, side, H[bad]))


def rank_file(rank, world, events, fault_step):
    g = rank // TP
    tp_members = ", ".join(str(m) for m in range(g * TP, min(world, g * TP + TP)))
    tp_size = min(world, g * TP + TP) - g * TP
    out = []
    order = 0
    step = 0
    while len(out) < events:
        bad = step > fault_step  # everything is non-finite after the fault step
        here = step == fault_step
        seq = step
        evs = [
            lambda o: frame(o, step, "model.embed", "Embedding", bad, bad),
            lambda o: frame(o, step, "model.layer0", "Linear", bad, bad or here),
            lambda o: frame(o, step, "model.layer1", "Linear", bad or here, bad or here),
            lambda o: collective(o, step, "tp%d" % g, tp_size, rank - g * TP, tp_members, seq, bad or here,
                                 bad or here),
            lambda o: frame(o, step, "model.layer2", "Linear", bad or here, bad or here),
            lambda o: p2p(o, step, "send", world, rank, (rank + 1) % world, seq, bad or here),
            lambda o: p2p(o, step, "recv", world, rank, (rank - 1) % world, seq, bad or here),
            lambda o: frame(o, step, "model.layer3", "Linear", bad or here, bad or here),
            lambda o: collective(o, step, "world", world, rank, "", seq, bad or here, bad or here),
            lambda o: frame(o, step, "model.head", "Linear", bad or here, bad or here),
        ]
        for make in evs:
            if len(out) == events:
                break
            out.append(make(order))
            order += 1
        step += 1
    return ('{\n  "format": "nanscope-rank-evidence",\n  "version": 1,\n  "rank": %d,\n  "world_size": %d,\n'
            '  "rank_source": "explicit",\n  "host": "node%d",\n  "pid": %d,\n  "reason": "exit",\n  "step": %d,\n'
            '  "dropped_events": 0,\n  "detection": {"order": %d, "step": %d, "module_path": "model.layer0", '
            '"tensor": "output", "role": "output", "transfer": false},\n  "stop": null,\n  "events": [\n%s\n  ]\n}\n'
            % (rank, world, rank // 8, 1000 + rank, step, fault_step * 10 + 1, fault_step,
               ",\n".join(out)))


def write_world(d, world, events, fault_step):
    os.makedirs(d, exist_ok=True)
    total = 0
    for r in range(world):
        text = rank_file(r, world, events, fault_step)
        total += len(text)
        with open(os.path.join(d, "nanscope_evidence_rank%dof%d.json" % (r, world)), "w") as f:
            f.write(text)
    return total


def timed(cmd):
    """(exit status, wall seconds, CPU seconds (user + system), peak RSS KiB, stdout bytes, stderr) of cmd under
    /usr/bin/time -v."""
    full = ["/usr/bin/time", "-v"] + cmd
    p = subprocess.run(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    err = p.stderr.decode("utf-8", "replace")
    m = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", err)
    wall = (int(m.group(1) or 0) * 3600 + int(m.group(2)) * 60 + float(m.group(3))) if m else float("nan")
    user = re.search(r"User time \(seconds\): ([\d.]+)", err)
    system = re.search(r"System time \(seconds\): ([\d.]+)", err)
    cpu = float(user.group(1)) + float(system.group(1)) if user and system else float("nan")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    return p.returncode, wall, cpu, int(rss.group(1)) if rss else -1, len(p.stdout), err


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--merge", required=True, help="the nanscope-merge binary")
    ap.add_argument("--ranks", default="512,1024,2048,4096")
    ap.add_argument("--events", type=int, default=1000)
    ap.add_argument("--fault-step", type=int, default=40)
    ap.add_argument("--work", help="where to make the temporary directory (default: the system's)")
    ap.add_argument("--keep", action="store_true", help="keep the evidence directories")
    ap.add_argument("--no-pin", action="store_true", help="do not pin to core 0 with taskset")
    ap.add_argument("--expect-exit", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="runs per size; the fastest counts (default 3)")
    ap.add_argument("--judge", choices=["cpu", "wall"], default="cpu",
                    help="the time the targets are judged on: CPU seconds (user + system, the default: the same as "
                         "the wall clock on an idle core, and not inflated by other work on a shared machine) or "
                         "wall-clock seconds")
    a = ap.parse_args()
    if not os.path.exists("/usr/bin/time"):
        print("needs /usr/bin/time (Debian: apt-get install time)")
        return 2
    pin = [] if a.no_pin or shutil.which("taskset") is None else ["taskset", "-c", "0"]
    sizes = [int(x) for x in a.ranks.split(",")]
    root = tempfile.mkdtemp(prefix="nanscope_merge_scale_", dir=a.work)
    rows = []
    targets = met = 0
    try:
        print("nanscope-merge --json on N ranks x %d events, every rank a producing site at step %d%s"
              % (a.events, a.fault_step, ", taskset -c 0" if pin else ""))
        print("%6s %9s %9s %9s %9s %9s %8s" % ("ranks", "events", "input MB", "wall s", "CPU s", "peak MiB",
                                                "x prev"))
        for n in sizes:
            d = os.path.join(root, "n%d" % n)
            t0 = time.time()
            size = write_world(d, n, a.events, a.fault_step)
            gen = time.time() - t0
            runs = [timed(pin + [os.path.abspath(a.merge), "--json", d]) for _ in range(a.repeat)]
            rc, wall, cpu, rss, out_bytes, err = runs[0]
            wall = min(x[1] for x in runs)
            cpu = min(x[2] for x in runs)
            rss = max(x[3] for x in runs)
            if rc != a.expect_exit:
                print("n=%d: nanscope-merge exited %d (expected %d)\n%s" % (n, rc, a.expect_exit, err[-2000:]))
            secs = cpu if a.judge == "cpu" else wall
            ratio = secs / rows[-1][1] if rows and rows[-1][0] * 2 == n and rows[-1][1] > 0 else None
            rows.append((n, secs, rss))
            print("%6d %9d %9.0f %9.2f %9.2f %9.0f %8s   (generated in %.0f s, %d bytes of output)"
                  % (n, n * a.events, size / 1e6, wall, cpu, rss / 1024.0, "%.2f" % ratio if ratio else "-", gen,
                     out_bytes))
            sys.stdout.flush()
            if not a.keep:
                shutil.rmtree(d, ignore_errors=True)
        for i in range(1, len(rows)):
            if rows[i][0] == rows[i - 1][0] * 2:
                targets += 1
                ok = rows[i - 1][1] > 0 and rows[i][1] / rows[i - 1][1] <= MAX_DOUBLING
                met += ok
                print("target: %d -> %d ranks costs <= %.1fx the %s time: %.2fx %s"
                      % (rows[i - 1][0], rows[i][0], MAX_DOUBLING, a.judge, rows[i][1] / max(rows[i - 1][1], 1e-9),
                         "met" if ok else "NOT met"))
        n, secs, rss = rows[-1]
        targets += 2
        met += secs <= MAX_SECONDS
        met += 0 <= rss <= MAX_RSS_KIB
        print("target: %d ranks x %d events in <= %.0f s (%s): %.2f s %s"
              % (n, a.events, MAX_SECONDS, a.judge, secs, "met" if secs <= MAX_SECONDS else "NOT met"))
        print("target: %d ranks x %d events in <= 4 GiB: %.0f MiB %s"
              % (n, a.events, rss / 1024.0, "met" if 0 <= rss <= MAX_RSS_KIB else "NOT met"))
    finally:
        if a.keep:
            print("evidence kept in " + root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print("%d of %d targets met" % (met, targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
