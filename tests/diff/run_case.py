#!/usr/bin/env python3
"""Runs nanscope-diff once and checks its exit status and what it printed.

  run_case.py --rc N [--out RE]... [--err RE]... [--not RE]... [--lines N] [--json-eq PATH=VALUE]... -- EXE ARGS...

--out / --err: a regular expression (re.search, MULTILINE) that stdout / stderr must match; --not: one that
neither may match; --lines: stdout has exactly N lines; --json-eq: stdout is JSON and the value at the dotted
PATH (list indices as numbers) equals VALUE (compared as text; JSON null is "null"). Exit 0 when every check
passes, 1 with the reasons (and the program's output) otherwise.
"""
import json
import re
import subprocess
import sys


def main(argv):
    if "--" not in argv:
        print("run_case.py: missing '--' before the command", file=sys.stderr)
        return 2
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1:]
    want_rc, outs, errs, nots, lines, json_eq = None, [], [], [], None, []
    i = 0
    while i < len(opts):
        key, val = opts[i], opts[i + 1]
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
        else:
            print("run_case.py: unknown option " + key, file=sys.stderr)
            return 2
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    problems = []
    if want_rc is not None and proc.returncode != want_rc:
        problems.append("exit status %d, expected %d" % (proc.returncode, want_rc))
    for rx in outs:
        if not re.search(rx, proc.stdout, re.MULTILINE):
            problems.append("stdout does not match: " + rx)
    for rx in errs:
        if not re.search(rx, proc.stderr, re.MULTILINE):
            problems.append("stderr does not match: " + rx)
    for rx in nots:
        if re.search(rx, proc.stdout + proc.stderr, re.MULTILINE):
            problems.append("output matches what it must not: " + rx)
    if lines is not None and len(proc.stdout.splitlines()) != lines:
        problems.append("stdout has %d lines, expected %d" % (len(proc.stdout.splitlines()), lines))
    if json_eq:
        try:
            doc = json.loads(proc.stdout)
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
        print("--- stdout ---\n" + proc.stdout + "--- stderr ---\n" + proc.stderr + "--------------")
        for p in problems:
            print("FAILED: " + p)
        return 1
    print("ok (exit status %d)" % proc.returncode)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
