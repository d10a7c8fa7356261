#!/usr/bin/env python3
"""Runs nanscope-diff once and checks its exit status and what it printed.

  run_case.py --rc N [--out RE]... [--err RE]... [--not RE]... [--lines N] [--json-eq PATH=VALUE]...
              [--stdout FILE | --stdout-closed-pipe] [--fifo PATH [--feed FILE --feed-delay S]] [--timeout S]
              [--max-rss-mb N] -- EXE ARGS...

--out / --err: a regular expression (re.search, MULTILINE) that stdout / stderr must match; --not: one that
neither may match; --lines: stdout has exactly N lines; --json-eq: stdout is JSON and the value at the dotted
PATH (list indices as numbers) equals VALUE (compared as text; JSON null is "null").
--stdout: the program's stdout is FILE opened for writing (e.g. /dev/full); --stdout-closed-pipe: a pipe whose
reading end is closed. --fifo: a named pipe is made at PATH first (replacing what is there); --feed: a thread
opens it for writing after --feed-delay seconds and writes FILE into it. --timeout: the program is killed after
S seconds (default 60) and the case fails ("hung"). --max-rss-mb: its peak resident memory (VmHWM, watched
while it runs, and wait4's ru_maxrss) must stay below N MiB; it is killed when it goes above.
Exit 0 when every check passes, 1 with the reasons (and the program's output) otherwise.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time


def main(argv):
    if "--" not in argv:
        print("run_case.py: missing '--' before the command", file=sys.stderr)
        return 2
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1:]
    want_rc, outs, errs, nots, lines, json_eq = None, [], [], [], None, []
    stdout_file, closed_pipe, fifo, feed, feed_delay, timeout, max_rss = None, False, None, None, 0.0, 60.0, None
    i = 0
    while i < len(opts):
        key = opts[i]
        if key == "--stdout-closed-pipe":
            closed_pipe = True
            i += 1
            continue
        val = opts[i + 1]
        i += 2
        if key == "--rc":
            want_rc = int(val)
        elif key == "--out":
            outs.append(val)
        elif key == "--err":
            errs.append(val)
        elif key == "--not":
            nots.append(val)
        elif key == "--lines":
            lines = int(val)
        elif key == "--json-eq":
            json_eq.append(val)
        elif key == "--stdout":
            stdout_file = val
        elif key == "--fifo":
            fifo = val
        elif key == "--feed":
            feed = val
        elif key == "--feed-delay":
            feed_delay = float(val)
        elif key == "--timeout":
            timeout = float(val)
        elif key == "--max-rss-mb":
            max_rss = float(val)
        else:
            print("run_case.py: unknown option " + key, file=sys.stderr)
            return 2
    if fifo:
        if os.path.lexists(fifo):
            os.unlink(fifo)
        os.mkfifo(fifo)
    if feed:
        def feeder():
            time.sleep(feed_delay)
            with open(feed, "rb") as src, open(fifo, "wb") as dst:
                dst.write(src.read())

        threading.Thread(target=feeder, daemon=True).start()
    rc, out, err, peak_kib, problems = run(cmd, stdout_file, closed_pipe, timeout, max_rss)
    if want_rc is not None and rc != want_rc:
        problems.append("exit status %d, expected %d" % (rc, want_rc))
    if max_rss is not None and peak_kib / 1024.0 >= max_rss:
        problems.append("peak memory %.1f MiB, expected below %g MiB" % (peak_kib / 1024.0, max_rss))
    for rx in outs:
        if not re.search(rx, out, re.MULTILINE):
            problems.append("stdout does not match: " + rx)
    for rx in errs:
        if not re.search(rx, err, re.MULTILINE):
            problems.append("stderr does not match: " + rx)
    for rx in nots:
        if re.search(rx, out + err, re.MULTILINE):
            problems.append("output matches what it must not: " + rx)
    if lines is not None and len(out.splitlines()) != lines:
        problems.append("stdout has %d lines, expected %d" % (len(out.splitlines()), lines))
    if json_eq:
        try:
            doc = json.loads(out)
        except ValueError as e:
            doc = None
            problems.append("stdout is not JSON: %s" % e)
        for check in json_eq if doc is not None else []:
            path, _, want = check.partition("=")
            node = doc
            try:
                for part in path.split("."):
                    node = node[int(part)] if isinstance(node, list) else node[part]
                got = "null" if node is None else (json.dumps(node) if isinstance(node, (bool, dict, list)) else str(node))
            except (KeyError, IndexError, ValueError, TypeError):
                got = "<missing>"
            if got != want:
                problems.append("JSON %s is %s, expected %s" % (path, got, want))
    if problems:
        print("command: " + " ".join(cmd))
        print("--- stdout ---\n" + out + "--- stderr ---\n" + err + "--------------")
        for p in problems:
            print("FAILED: " + p)
        return 1
    print("ok (exit status %d%s)" % (rc, ", peak memory %.1f MiB" % (peak_kib / 1024.0) if max_rss else ""))
    return 0


def vm_hwm_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def run(cmd, stdout_file, closed_pipe, timeout, max_rss):
    """Runs cmd; returns (exit status or -signal, stdout, stderr, peak resident KiB, problems)."""
    problems = []
    out_fd, read_end = None, None
    if stdout_file:
        out_fd = os.open(stdout_file, os.O_WRONLY)
    elif closed_pipe:
        read_end, out_fd = os.pipe()
        os.close(read_end)
        read_end = None
    if out_fd is None:
        read_end, out_fd = os.pipe()
    err_r, err_w = os.pipe()
    proc = subprocess.Popen(cmd, stdout=out_fd, stderr=err_w)
    os.close(out_fd)
    os.close(err_w)
    chunks = {"out": [], "err": []}

    def drain(fd, key):
        while True:
            b = os.read(fd, 65536)
            if not b:
                break
            chunks[key].append(b)
        os.close(fd)

    readers = [threading.Thread(target=drain, args=(err_r, "err"))]
    if read_end is not None:
        readers.append(threading.Thread(target=drain, args=(read_end, "out")))
    for t in readers:
        t.start()
    start, peak, status, usage = time.time(), 0, None, None
    while status is None:
        pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status, usage = st, ru
            break
        if max_rss is not None:
            peak = max(peak, vm_hwm_kib(proc.pid))
            if peak / 1024.0 >= max_rss:
                problems.append("killed: peak memory above %g MiB" % max_rss)
                proc.kill()
        if time.time() - start > timeout:
            problems.append("hung: killed after %g s" % timeout)
            proc.kill()
            timeout = float("inf")
        time.sleep(0.01)
    proc.returncode = 0  # reaped by wait4 above
    for t in readers:
        t.join()
    peak = max(peak, usage.ru_maxrss)
    rc = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else (
        -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
    dec = lambda k: b"".join(chunks[k]).decode("utf-8", "replace")
    return rc, dec("out"), dec("err"), peak, problems


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
