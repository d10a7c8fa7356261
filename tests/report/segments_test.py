#!/usr/bin/env python3
"""Tests of the bad segments in `nanscope report` and nanscope-diff (issue 32 item 3): a tensor recorded with a
segmentation carries "nanscope_segments" in the layer tree (docs/segments.md); both tools print, for the first
NaN/Inf, one line per bad segment ("request 23 (rows 5-11): 2 NaN, first at row 6") followed by where that segment
was produced in the file.

`nanscope report A B` also shows nanscope-diff's comparison of A's bad segments with B's ("Server.attn outputs: bad
in B only: request 17 (rows 0-4): 1 NaN, first at row 2") and counts the segment differences in its verdict.

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
import html
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


def comparison_reference(root_a, root_b):
    """The bad segments of A against B, written here from the two trees' JSON (the trees have the same modules and
    one segmentation): for each tensor with bad segments in both, in call order, the segments bad in B only, in A
    only, then in both (each group by index), as "<module> <tensor>: <line>"."""
    out = []
    for (na, enter), (nb, _) in zip(call_order(root_a), call_order(root_b)):
        for p in (("parameters", "inputs") if enter else ("outputs",)):
            for (label, ta), (_, tb) in zip(slots(na, p), slots(nb, p)):
                sa = ta.get("nanscope_segments", []) if isinstance(ta, dict) else []
                sb = tb.get("nanscope_segments", []) if isinstance(tb, dict) else []
                if not sa or not sb:
                    continue
                a_ids = {x["id"]: x for x in sa}
                b_ids = {y["id"] for y in sb}
                lines = [f"bad in B only: {seg_line(y)}" for y in sorted(sb, key=lambda s: s["index"]) if y["id"] not in a_ids]
                lines += [f"bad in A only: {seg_line(x)}" for x in sorted(sa, key=lambda s: s["index"]) if x["id"] not in b_ids]
                for y in sorted(sb, key=lambda s: s["index"]):
                    x = a_ids.get(y["id"])
                    if x is None:
                        continue
                    name, counts_b = seg_line(y).split(": ", 1)
                    counts_a = seg_line(x).split(": ", 1)[1]
                    if all(x[k] == y[k] for k in ("nan", "pos_inf", "neg_inf", "first")):
                        lines.append(f"bad in both: {name}: {counts_b} (the same in A and B)")
                    else:
                        lines.append(f"bad in both: {name}: A: {counts_a}; B: {counts_b}")
                out += [f"{na['module_path']} {label}: {l}" for l in lines]
    return out


def report_diff(nanscope, tree_a, tree_b, out_html):
    """`nanscope report A B`: the page's diff data, or None."""
    p = subprocess.run([nanscope, "report", tree_a, tree_b, "-o", out_html], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    if not expect(p.returncode == 0, f"report {tree_a} {tree_b}: exit {p.returncode}: {p.stderr}"):
        return None
    d = page_data(out_html)
    if not expect(d is not None and d.get("diff") is not None, f"{out_html}: no diff data"):
        return None
    return d["diff"]


def page_dom(chromium, html_path, profile):
    """The page's DOM after its script ran ("" when chromium did not finish)."""
    try:
        p = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir=" + profile,
                            "--dump-dom", "file://" + os.path.abspath(html_path)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, universal_newlines=True, timeout=120)
    except subprocess.TimeoutExpired:
        expect(False, f"chromium timed out on {html_path}")
        return ""
    return p.stdout


def page_diff_segments(dom):
    """The diff's verdict, the segment section's heading and its items as the page's script draws them (text)."""
    v = re.search(r'<div class="verdict" id="diff-verdict">(.*?)</div>', dom, re.S)
    h = re.search(r'<div class="stats" id="diff-segments-summary">(.*?)</div>', dom, re.S)
    m = re.search(r'<ul class="segments" id="diff-segments">(.*?)</ul>', dom, re.S)
    items = [html.unescape(x) for x in re.findall(r"<li>(.*?)</li>", m.group(1))] if m else None
    return (html.unescape(v.group(1)) if v else None, html.unescape(h.group(1)) if h else None, items)


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

    # `nanscope report A B` with a hostile module name: B lost expert 9; the line names the module as text
    hostile = "Net.<i class=hostile>x</i>&amp;"  # markup that would show as an element (no script: no dialog)
    ha, hb = json.loads(json.dumps(trees["experts"])), json.loads(json.dumps(trees["experts"]))
    for t in (ha, hb):
        t["children"][1]["module_path"] = hostile
    for n in (hb["children"][1], hb):
        n["outputs"]["nanscope_segments"] = n["outputs"]["nanscope_segments"][:1]
        n["outputs"]["health"].update(neg_inf=0, positive=62)
    for name, t in (("hostile_a", ha), ("hostile_b", hb)):
        paths[name] = os.path.join(a.work, f"seg_{name}.json")
        with open(paths[name], "w") as f:
            json.dump(t, f, indent=2)
    want = [f"{hostile} outputs: bad in A only: expert 9 (row 12): 1 -inf, first at row 12",
            f"{hostile} outputs: bad in both: expert 3 (rows 0-3): 2 NaN, first at row 1 (the same in A and B)",
            "Net outputs: bad in A only: expert 9 (row 12): 1 -inf, first at row 12",
            "Net outputs: bad in both: expert 3 (rows 0-3): 2 NaN, first at row 1 (the same in A and B)"]
    expect(comparison_reference(ha, hb) == want, f"the reference for the hostile pair: {comparison_reference(ha, hb)}")
    hostile_html = os.path.join(a.work, "seg_hostile.html")
    d = report_diff(a.nanscope, paths["hostile_a"], paths["hostile_b"], hostile_html)
    if d is not None:
        expect(d.get("segments") == want, f"report hostile: segments {d.get('segments')}")
        expect(d.get("segment_diffs") == 2 and d.get("diverged_flag") is True and "2 segment differences" in d.get("verdict", ""),
               f"report hostile: {d.get('segment_diffs')} {d.get('diverged_flag')} {d.get('verdict')!r}")
        expect("<i class" not in open(hostile_html, encoding="utf-8").read(), "report hostile: raw markup in the file")
        if a.chromium:
            dom = page_dom(a.chromium, hostile_html, os.path.abspath(os.path.join(a.work, "chromium-profile")))
            _, _, items = page_diff_segments(dom)
            expect(items == want, f"page hostile: items {items}")
            expect("<i class" not in dom, "page hostile: an element made of the module's name")

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

        # `nanscope report A B`: the bad segments of A against B, and the verdict counting them as nanscope-diff does
        summary = lambda x: os.path.join(real, x, "Server_debug_tree_SUMMARY.json")
        want_verdict = {
            # the NaN moved to request 17 with the same counts: no statistic and no health count differs, the
            # segments alone make the verdict
            "swapped": "verdict: diverged (0 of 6 tensors, 8 segment differences)",
            "moved": "verdict: diverged (4 of 6 tensors, 8 segment differences)",
            "nan": "verdict: same within tolerance (6 tensors compared)",
        }
        for other in ("swapped", "moved", "nan"):
            ra, rb = json.load(open(nan_tree)), json.load(open(summary(other)))
            want = comparison_reference(ra, rb)
            out_html = os.path.join(a.work, f"real_nan_{other}.html")
            d = report_diff(a.nanscope, nan_tree, summary(other), out_html)
            if d is None:
                continue
            ndiff = 0 if other == "nan" else 8
            expect(d.get("verdict") == want_verdict[other], f"report nan {other}: verdict {d.get('verdict')!r}")
            expect(d.get("diverged_flag") == (other != "nan"), f"report nan {other}: diverged_flag {d.get('diverged_flag')}")
            expect(d.get("segment_diffs") == ndiff, f"report nan {other}: segment_diffs {d.get('segment_diffs')}")
            expect(d.get("segment_summary") == f"4 tensors recorded with bad segments in both; {ndiff} segment differences",
                   f"report nan {other}: segment_summary {d.get('segment_summary')!r}")
            expect(d.get("segments") == want, f"report nan {other}: segments\n{d.get('segments')}\n!= reference\n{want}")
            if a.nanscope_diff:  # the same lines and the same verdict as nanscope-diff --json
                rc, out, err = diff_json(a.nanscope_diff, nan_tree, summary(other))
                j = json.loads(out) if out else {}
                lines = [f"{c['module']} {c['tensor']}: {l}" for c in j.get("segment_comparison", []) for l in c["lines"]]
                expect(lines == d.get("segments"), f"nan {other}: nanscope-diff's lines {lines} != the report's")
                expect(rc == (1 if d.get("diverged_flag") else 0) and
                       j.get("verdict") == ("diverged" if d.get("diverged_flag") else "same"),
                       f"nan {other}: nanscope-diff exit {rc} verdict {j.get('verdict')} vs the report's {d.get('verdict')}")
            if a.chromium:  # as the page's script draws them
                v, h, items = page_diff_segments(page_dom(a.chromium, out_html,
                                                          os.path.abspath(os.path.join(a.work, "chromium-profile"))))
                expect(v == want_verdict[other], f"page nan {other}: verdict {v!r}")
                expect(h == f"bad segments, A vs B ({d.get('segment_summary')}):", f"page nan {other}: heading {h!r}")
                expect(items == want, f"page nan {other}: items {items}")
        # the reference's lines, spelled out for the pair whose NaN moved to another request
        expect(comparison_reference(json.load(open(nan_tree)), json.load(open(summary("swapped"))))[:2] == [
            "Server.attn outputs: bad in B only: request 17 (rows 0-4): 1 NaN, first at row 2",
            "Server.attn outputs: bad in both: request 23 (rows 5-11): A: 2 NaN, first at row 6; B: 1 NaN, first at row 9"],
            "the reference's lines for nan against swapped")

    print(f"{CHECKS[0]} checks, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
