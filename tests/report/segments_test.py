#!/usr/bin/env python3
"""Tests of the bad segments in `nanscope report` and nanscope-diff (issue 32 item 3): a tensor recorded with a
segmentation carries "nanscope_segments" in the layer tree (docs/segments.md); both tools print, for the first
NaN/Inf, one line per bad segment ("request 23 (rows 5-11): 2 NaN, first at row 6") followed by where that segment
was produced in the file.

References, independent of the C++ code: the lines are written here from the JSON fields, and each segment's
producer is found here by walking the tree in call order (a node's parameters and inputs when entered, its children,
its outputs when left): the first node whose outputs hold the segment while its inputs and parameters do not, else
the first tensor that holds it.

Usage: segments_test.py --nanscope PATH --work DIR [--nanscope-diff PATH] [--segments-writer PATH] [--chromium PATH]
--chromium: also load the page in headless chromium and check the summary's list as the page's script draws it.
--segments-writer: nanscope_segments_tree (tests/diff/segments_tree.cpp), trees written by the real recorder and
tree writer under a NANSCOPE_SEGMENTS guard. Exit status 0 when every check passed, 1 otherwise.
"""
import argparse
import json
import os
import re
import subprocess
import sys

FAILURES = []
CHECKS = [0]


def expect(cond, msg):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg)
    return cond


def tensor(shape, nan=0, pos=0, neg=0, segments=None):
    n = 1
    for d in shape:
        n *= d
    t = {"shape": shape, "dtype": "torch.float32", "mean": 0.5, "std": 0.25, "min": 0.0, "max": 1.0,
         "health": {"negative": 0, "zero": 0, "positive": n - nan - pos - neg, "neg_inf": neg, "pos_inf": pos,
                    "nan": nan},
         "abs_max": 1.0}
    if nan or pos or neg:
        t["mean"] = t["std"] = t["min"] = t["max"] = "nan" if nan else "inf"
        del t["mean"], t["std"], t["min"], t["max"]
    if segments:
        t["nanscope_segments"] = segments
    return t


def seg(unit, index, ident, rows, nan=0, pos=0, neg=0, first=0, row_len=4):
    return {"unit": unit, "index": index, "id": ident, "rows": rows, "nan": nan, "pos_inf": pos, "neg_inf": neg,
            "first": first, "first_flat": first * row_len}


def seg_line(s):
    axis = "row" if "rows" in s else "element"
    a, b = s["rows"] if "rows" in s else s["elements"]
    where = f"{axis} {a}" if a == b else f"{axis}s {a}-{b}"
    kinds = [f"{s[k]} {w}" for k, w in (("nan", "NaN"), ("pos_inf", "+inf"), ("neg_inf", "-inf")) if s[k]]
    return f"{s['unit']} {s['id']} ({where}): {', '.join(kinds)}, first at {axis} {s['first']}"


def slots(node, part):
    """(label, tensor) of a node's inputs, outputs or parameters, labelled as the tools label them."""
    v = node.get(part)
    out = []
    if part == "inputs" and isinstance(v, dict):
        for i, t in enumerate(v.get("args", [])):
            out.append((f"inputs.args[{i}]", t))
        for k, t in v.get("kwargs", {}).items():
            out.append((f"inputs.kwargs.{k}", t))
    elif part == "outputs" and isinstance(v, list):
        out = [(f"outputs[{i}]", t) for i, t in enumerate(v)]
    elif part == "outputs" and isinstance(v, dict):
        out = [("outputs", v)]
    elif part == "parameters" and isinstance(v, dict):
        out = [(f"parameters.{k}", t) for k, t in v.items()]
    return out


def holds(t, unit, ident):
    return isinstance(t, dict) and any(s["unit"] == unit and s["id"] == ident for s in t.get("nanscope_segments", []))


def call_order(root):
    """(node, entering) in call order, iteratively."""
    stack = [(root, False), (root, True)]
    out = []
    while stack:
        n, enter = stack.pop()
        out.append((n, enter))
        if enter:
            for c in reversed(n.get("children", [])):
                stack.append((c, False))
                stack.append((c, True))
    return out


def first_bad(root):
    """The first tensor holding NaN/Inf in call order: (node, label, tensor)."""
    for n, enter in call_order(root):
        parts = ("parameters", "inputs") if enter else ("outputs",)
        for p in parts:
            for label, t in slots(n, p):
                h = t.get("health", {}) if isinstance(t, dict) else {}
                if h.get("nan", 0) or h.get("pos_inf", 0) or h.get("neg_inf", 0):
                    return n, label, t
    return None


def origin(root, unit, ident):
    seen = None
    for n, enter in call_order(root):
        if enter:
            for p in ("parameters", "inputs"):
                for label, t in slots(n, p):
                    if seen is None and holds(t, unit, ident):
                        seen = f"first bad at {n['module_path']} {label}"
            continue
        in_bad = any(holds(t, unit, ident) for p in ("parameters", "inputs") for _, t in slots(n, p))
        for label, t in slots(n, "outputs"):
            if holds(t, unit, ident):
                if not in_bad:
                    return f"produced in {n['module_path']} {label}"
                if seen is None:
                    seen = f"first bad at {n['module_path']} {label}"
    return seen


def expected_lines(root):
    fb = first_bad(root)
    if fb is None:
        return []
    _, _, t = fb
    lines = []
    for s in t.get("nanscope_segments", []):
        o = origin(root, s["unit"], s["id"])
        lines.append(seg_line(s) + ("; " + o if o else ""))
    return lines


def page_data(path):
    text = open(path, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="nanscope-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1)) if m else None


def report_lines(nanscope, tree_path, out_html):
    p = subprocess.run([nanscope, "report", tree_path, "-o", out_html], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if not expect(p.returncode == 0, f"report {tree_path}: exit {p.returncode}: {p.stderr}"):
        return None
    d = page_data(out_html)
    if not expect(d is not None, f"{out_html}: no nanscope-data"):
        return None
    return (d.get("first") or {}).get("segments", [])


def diff_json(nanscope_diff, a, b):
    p = subprocess.run([nanscope_diff, "--json", a, b], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    return p.returncode, p.stdout, p.stderr


def hand_trees():
    """Hand-made trees: `experts`, whose first NaN/Inf (Net.moe outputs) holds two bad experts produced there;
    `inputs`, whose model input already holds a bad request; `clean`, `experts` without NaN/Inf."""
    moe_out = [seg("expert", 0, 3, [0, 3], nan=2, first=1), seg("expert", 3, 9, [12, 12], neg=1, first=12)]
    experts = {
        "module_path": "Net",
        "inputs": {"args": [tensor([16, 4])]},
        "children": [
            {"module_path": "Net.router", "inputs": {"args": [tensor([16, 4])]}, "outputs": tensor([16, 4])},
            {"module_path": "Net.moe", "inputs": {"args": [tensor([16, 4])]},
             "outputs": tensor([16, 4], nan=2, neg=1, segments=moe_out)},
        ],
        "outputs": tensor([16, 4], nan=2, neg=1, segments=moe_out),
    }
    req = seg("request", 2, 23, [5, 11], nan=1, first=6)
    inputs = {
        "module_path": "Net",
        "inputs": {"args": [tensor([20, 4], nan=1, segments=[req])]},
        "children": [{"module_path": "Net.head", "inputs": {"args": [tensor([20, 4], nan=1, segments=[req])]},
                      "outputs": tensor([20, 4], nan=1, segments=[req])}],
        "outputs": tensor([20, 4], nan=1, segments=[req]),
    }
    clean = json.loads(json.dumps(experts))
    for n in [clean] + clean["children"]:
        for part in ("inputs", "outputs"):
            for _, t in slots(n, part):
                t.pop("nanscope_segments", None)
                t["health"].update(nan=0, pos_inf=0, neg_inf=0, positive=64)
    return {"experts": experts, "inputs": inputs, "clean": clean}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanscope", required=True)
    ap.add_argument("--nanscope-diff")
    ap.add_argument("--segments-writer")
    ap.add_argument("--chromium")
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    trees = hand_trees()
    paths = {}
    for name, t in trees.items():
        paths[name] = os.path.join(a.work, f"seg_{name}.json")
        with open(paths[name], "w") as f:
            json.dump(t, f, indent=2)

    # nanscope report: the first NaN/Inf's bad segments, with their producers
    for name in ("experts", "inputs"):
        want = expected_lines(trees[name])
        expect(len(want) == (2 if name == "experts" else 1), f"{name}: the reference found {want}")
        got = report_lines(a.nanscope, paths[name], os.path.join(a.work, f"seg_{name}.html"))
        expect(got == want, f"report {name}: segments {got} != {want}")
    expect(expected_lines(trees["experts"])[0] == "expert 3 (rows 0-3): 2 NaN, first at row 1; produced in Net.moe outputs",
           "the reference's first line")
    expect(expected_lines(trees["experts"])[1] == "expert 9 (row 12): 1 -inf, first at row 12; produced in Net.moe outputs",
           "the reference's second line")
    expect(expected_lines(trees["inputs"])[0] == "request 23 (rows 5-11): 1 NaN, first at row 6; first bad at Net inputs.args[0]",
           "the reference's line for a model input")
    # every tensor's row carries its own bad segments (9th item), without producers; clean tensors have 8 items
    d = page_data(os.path.join(a.work, "seg_experts.html"))
    rows = {(n[1], x[0]): x for n in d["trees"][0]["nodes"] for x in n[2]}
    moe = trees["experts"]["children"][1]["outputs"]["nanscope_segments"]
    expect(rows[("Net.moe", "outputs")][8:] == [[seg_line(s) for s in moe]],
           f"the Net.moe outputs row: {rows[('Net.moe', 'outputs')]}")
    expect(all(len(x) == 8 for k, x in rows.items() if k != ("Net.moe", "outputs") and k != ("Net", "outputs")),
           "clean tensors carry no segment item")
    if a.chromium:  # the summary's list as the page's script draws it
        html_path = os.path.abspath(os.path.join(a.work, "seg_experts.html"))
        p = subprocess.run([a.chromium, "--headless", "--no-sandbox", "--disable-gpu",
                            "--user-data-dir=" + os.path.abspath(os.path.join(a.work, "chromium-profile")),
                            "--dump-dom", "file://" + html_path], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           universal_newlines=True, timeout=120)
        m = re.search(r'<ul class="segments" id="first-segments">(.*?)</ul>', p.stdout, re.S)
        items = re.findall(r"<li>(.*?)</li>", m.group(1)) if m else None
        expect(items == expected_lines(trees["experts"]), f"the page's list: {items}")
    # a clean tree: no segments on the page
    got = report_lines(a.nanscope, paths["clean"], os.path.join(a.work, "seg_clean.html"))
    expect(got == [], f"report clean: {got}")

    if a.nanscope_diff:
        rc, out, err = diff_json(a.nanscope_diff, paths["clean"], paths["experts"])
        expect(rc == 1, f"diff clean experts: exit {rc}: {err}")
        j = json.loads(out) if out else {}
        expect(j.get("bad_segments") == {"a": [], "b": expected_lines(trees["experts"])},
               f"diff --json bad_segments: {j.get('bad_segments')}")
        p = subprocess.run([a.nanscope_diff, paths["clean"], paths["experts"]], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True)
        want = "bad segments of B's first NaN/Inf (Net.moe outputs):\n" + "".join(
            "  " + l + "\n" for l in expected_lines(trees["experts"]))
        expect(want in p.stdout, f"diff text: {want!r} not in\n{p.stdout}")
        # no segments anywhere: no key, no line
        rc, out, err = diff_json(a.nanscope_diff, paths["clean"], paths["clean"])
        expect(rc == 0 and "bad_segments" not in json.loads(out), f"diff clean clean: {rc} {out[:200]} {err}")
        # a malformed key is an error naming its JSON path
        bad = json.loads(json.dumps(trees["inputs"]))
        bad["outputs"]["nanscope_segments"][0]["rows"] = [5]
        bad_path = os.path.join(a.work, "seg_bad.json")
        with open(bad_path, "w") as f:
            json.dump(bad, f)
        rc, out, err = diff_json(a.nanscope_diff, paths["inputs"], bad_path)
        expect(rc == 2 and "outputs.nanscope_segments[0].rows: expected [first, last]" in err,
               f"diff malformed: {rc} {err}")

    if a.segments_writer:  # the real recorder and tree writer (tests/diff/segments_tree.cpp)
        real = os.path.join(a.work, "real")
        p = subprocess.run([a.segments_writer, real], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        expect(p.returncode == 0, f"segments writer: {p.returncode} {p.stderr}")
        nan_tree = os.path.join(real, "nan", "Server_debug_tree_SUMMARY.json")
        root = json.load(open(nan_tree))
        want = expected_lines(root)
        expect(want == ["request 23 (rows 5-11): 2 NaN, first at row 6; produced in Server.attn outputs"],
               f"the real tree's reference lines: {want}")
        got = report_lines(a.nanscope, nan_tree, os.path.join(a.work, "real.html"))
        expect(got == want, f"report real: {got} != {want}")
        lm = root["children"][1]["outputs"]["nanscope_segments"]
        expect([seg_line(s) for s in lm] == ["request 23 (rows 5-11): 2 NaN, first at row 6",
                                             "request 8 (rows 12-19): 1 -inf, first at row 19"],
               f"the real lm_head output's segments: {lm}")
        expect(origin(root, "request", 8) == "produced in Server.lm_head outputs", "request 8's producer")

    print(f"{CHECKS[0]} checks, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
