#!/usr/bin/env python3
"""Tests of the block-scaled statistics in `nanscope report` (issue 33 item 3): a tensor checked against a
block-scaled target carries "nanscope_block_scaled" in the layer tree (docs/block-scaled.md); the page shows, per
layer, the columns "blocks with loss" and "scale exponents", marks the layers whose blocks warned, lists the worst
block in a layer's details, and puts A's numbers beside B's in the diff of two runs (docs/report.md).

The trees are written by the real recorder and tree writer (tests/diff/segments_tree.cpp, `DIR --blocks`). The
reference is computed here from the trees' JSON with Python's json module, not from the page's data: each row's
lines, the warned tensors, the worst blocks, the pairs of A and B with the change of their lossy fraction.

Without the key the page is the page of before the feature, byte for byte: page_head + data + page_tail of
tools/cli/report_page.hpp (read from the source here), and the data of a tree stripped of the key equals the data
of the tree with it, less the block-scaled items.

Usage: blocks_test.py --nanscope PATH --writer PATH --work DIR [--chromium PATH]
--writer: nanscope_segments_tree. --chromium: also load the pages in headless chromium and check the text the
page's script draws (without it those checks are skipped and said so; the rest still runs). Exit status 0 when
every check passed, 1 otherwise.
"""
import argparse
import decimal
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_test import parse_dom, by_id  # noqa: E402  (the DOM of a page, as the other report tests read it)
from segments_test import slots  # noqa: E402  (a node's tensors, labelled as the tools label them)

FAILURES = []
CHECKS = [0]
KEY = "nanscope_block_scaled"
HOSTILE = "<img src=x onerror=alert(1)>\"&amp;"  # the module name segments_tree.cpp gives the markup child
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "cli", "report_page.hpp")


def expect(cond, msg):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg)
    return cond


# ---------------------------------------------------------------------------------------------------------------
# The reference: the page's texts, from the tree JSON
# ---------------------------------------------------------------------------------------------------------------
def fixed(x, places):
    """x.toFixed(places) of JavaScript: the exact binary value rounded half away from zero."""
    if x == 0:
        x = 0.0  # (-0).toFixed() has no sign
    q = decimal.Decimal(1).scaleb(-places)
    return str(decimal.Decimal(x).quantize(q, rounding=decimal.ROUND_HALF_UP))


def pct(f):
    return "?" if f is None else fixed(100 * f, 1) + "%"


def line(f):
    return f"{f['format']} {pct(f['lossy_fraction'])} ({f['lossy_blocks']}/{f['blocks']})"


def spread(f):
    s = f.get("scale_exp")
    return f"{s['min']}..{s['max']}, {fixed(s['mean'], 2)} \u00b1 {fixed(s['std'], 2)}" if s else "no scale"


def fmt_num(x):
    """The page's fmtNum for a finite number: x.toExponential(2) off [1e-3, 1e4), else String(Number(x.toPrecision(4)))
    (JavaScript rounds the exact binary value half up)."""
    if x == 0:
        return "0"
    d = decimal.Decimal(x)
    e = d.adjusted()
    if abs(x) >= 1e4 or abs(x) < 1e-3:
        m = d.scaleb(-e).quantize(decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP)
        if abs(m) >= 10:
            e += 1
            m = d.scaleb(-e).quantize(decimal.Decimal("0.01"), rounding=decimal.ROUND_HALF_UP)
        return f"{m}e{'+' if e >= 0 else '-'}{abs(e)}"
    s = repr(float(d.quantize(decimal.Decimal(1).scaleb(e - 3), rounding=decimal.ROUND_HALF_UP)))
    return s[:-2] if s.endswith(".0") else s


def worst_text(w):
    return (f"worst block {w['index']} (first element {w['first_element']}, {w['elements']} elements): |x| max "
            f"{fmt_num(w['abs_max'])}, scale {w['scale']} (byte {w['scale_byte']}): {w['clipped']} clipped, "
            f"{w['flushed']} flushed, error max {fmt_num(w['error_max_abs'])}, rms {fmt_num(w['error_rms'])}")


def preorder(root):
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.get("children", [])))


def tensors(n):
    """(label, role, tensor) of a node in the page's order: parameters, inputs, outputs (role 2, 1, 0)."""
    out = []
    for part, role in (("parameters", 2), ("inputs", 1), ("outputs", 0)):
        out += [(label, role, t) for label, t in slots(n, part) if isinstance(t, dict)]
    return out


def node_key(n):
    return (n["module_path"], n.get("nanscope_checkpoint"))


def row_reference(root):
    """Per row (module path, checkpoint): (loss lines, spread lines, warned) as the columns show them, or None."""
    out = {}
    for n in preorder(root):
        ts = [(label, role, t) for label, role, t in tensors(n) if KEY in t]
        if not ts:
            out[node_key(n)] = None
            continue
        use = [x for x in ts if x[1] == 0] or ts
        by = {}  # format -> its statistics in the tensor that loses the largest fraction of blocks (first on ties)
        for _, _, t in use:
            for f in t[KEY]["formats"]:
                if f["format"] not in by or f["lossy_fraction"] > by[f["format"]]["lossy_fraction"]:
                    by[f["format"]] = f
        warned = any(f["warned"] for _, _, t in ts for f in t[KEY]["formats"])
        out[node_key(n)] = ([line(f) for f in by.values()], [spread(f) for f in by.values()], warned)
    return out


def row_name(n):
    cp = n.get("nanscope_checkpoint")
    return n["module_path"] + (f" checkpoint \u201c{cp}\u201d" if cp is not None else "")


def diff_name(n):
    """A module as the diff names it (nanscope-diff's display: a checkpoint's text in straight quotes)."""
    cp = n.get("nanscope_checkpoint")
    return n["module_path"] + (f' checkpoint "{cp}"' if cp is not None else "")


def warned_reference(root, source=None):
    out = []
    for n in preorder(root):
        for label, _, t in tensors(n):
            b = t.get(KEY)
            fs = [f for f in b["formats"] if f["warned"]] if b else []
            if fs:
                # the target's threshold when it gave one, else each format's automatic one
                if "warn_lossy_fraction" in b:
                    text = f"{', '.join(line(f) for f in fs)} (above {pct(b['warn_lossy_fraction'])})"
                else:
                    text = ", ".join(f"{line(f)} (above {pct(f['warn_threshold'])})" for f in fs)
                out.append(f"{row_name(n)} {label}: {text}" + (f" ({source})" if source else ""))
    return out


def diff_reference(ra, rb):
    """The diff's table: [module, tensor, format, A, B, B - A, A's spread, B's spread] for the tensors either run checked, in A's pre-order
    (the trees have the same modules, each called once), formats of A then those of B only."""
    side = lambda f: (line(f)[len(f["format"]) + 1:] + (" warned" if f["warned"] else "")) if f else "not checked"
    nodes_b = {node_key(n): n for n in preorder(rb)}
    out = []
    for na in preorder(ra):
        nb = nodes_b[node_key(na)]
        ta = {(label, role): t for label, role, t in tensors(na)}
        tb = {(label, role): t for label, role, t in tensors(nb)}
        keys = [k for k in ta if KEY in ta[k] or KEY in tb.get(k, {})] + [k for k in tb if KEY in tb[k] and k not in ta]
        for k in keys:
            fa = ta.get(k, {}).get(KEY, {}).get("formats", [])
            fb = tb.get(k, {}).get(KEY, {}).get("formats", [])
            names = [f["format"] for f in fa] + [f["format"] for f in fb if f["format"] not in [g["format"] for g in fa]]
            for nm in names:
                a = next((f for f in fa if f["format"] == nm), None)
                b = next((f for f in fb if f["format"] == nm), None)
                d = ""
                if a and b:
                    x = 100 * (b["lossy_fraction"] - a["lossy_fraction"])
                    d = ("+" if x > 0 else "") + fixed(x, 1) + " pp"
                out.append([diff_name(na), k[0], nm, side(a), side(b), d, spread(a) if a else "",
                            spread(b) if b else ""])
    return out


# ---------------------------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------------------------
def run_report(nanscope, inputs, out, cwd=None):
    p = subprocess.run([nanscope, "report"] + inputs + ["-o", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, cwd=cwd)
    return p.returncode, p.stderr


def split_page(text):
    """(head, data text, tail) of a page."""
    m = re.search(r'(.*<script type="application/json" id="nanscope-data">)(.*?)(</script>.*)', text, re.S)
    return (m.group(1), m.group(2), m.group(3)) if m else (None, None, None)


def page_constants():
    src = open(SOURCE, encoding="utf-8").read()
    get = lambda name: re.search(r'inline constexpr const char\* ' + name + r' = R"NSHTML\((.*?)\)NSHTML";', src, re.S)
    return get("page_head").group(1), get("page_tail").group(1)


def strip_blocks(d):
    """The page's data less the block-scaled items: a tensor's 10th item (and its 9th when that is only the
    placeholder), a tree's "blocks", the diff's "blocks"."""
    d = json.loads(json.dumps(d))
    for t in d["trees"]:
        t.pop("blocks", None)
        for n in t["nodes"]:
            for x in n[2]:
                if len(x) == 10:
                    x.pop()
                    if x[8] is None:
                        x.pop()
    if d.get("diff"):
        d["diff"].pop("blocks", None)
    return d


def load_dom(chromium, page, profile):
    try:
        p = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                            "--user-data-dir=" + profile, "--window-size=1700,1200", "--dump-dom",
                            "file://" + os.path.abspath(page)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           universal_newlines=True, timeout=120)
    except subprocess.TimeoutExpired:
        expect(False, f"chromium timed out on {page}")
        return None, ""
    expect('data-ready="1"' in p.stdout, f"{page}: the page's script did not finish")
    return parse_dom(p.stdout), p.stdout


def dom_rows(dom):
    """Per row (data-path, data-checkpoint): (loss lines, spread lines, warned, label text, badge texts)."""
    out = {}
    for e in dom.iter():
        if e.tag != "div" or "row" not in e.classes():
            continue
        key = (e.attrs.get("data-path"), e.attrs.get("data-checkpoint"))
        loss = [x.text() for x in e.iter() if "blk-line" in x.classes()]
        exp = [x.text() for x in e.iter() if "blk-exp-text" in x.classes()]
        label = next((x.text() for x in e.iter() if "label" in x.classes()), None)
        badges = [x.text() for x in e.iter() if "badge" in x.classes() or "sub-blk" in x.classes()]
        cells = [x for x in e.children if not isinstance(x, str)]
        out[key] = (loss, exp, "blk-warned" in e.classes(), label, badges, len(cells))
    return out


def table_rows(tab):
    out = []
    for tr in (x for x in tab.iter() if x.tag == "tr"):
        tds = [x for x in tr.children if not isinstance(x, str) and x.tag == "td"]
        if tds:
            out.append([td.text() for td in tds])
    return out


def check_one(a, tree_path, root, work):
    """One tree: the data, and (chromium) the columns, the marks, the summary, the details of the warned row."""
    page = os.path.join(work, "one.html")
    rc, err = run_report(a.nanscope, [tree_path], page)
    if not expect(rc == 0, f"report one: exit {rc}: {err}"):
        return
    text = open(page, encoding="utf-8").read()
    _, data_text, _ = split_page(text)
    d = json.loads(data_text)
    t = d["trees"][0]
    nodes = list(preorder(root))
    expect(len(t["nodes"]) == len(nodes), "report one: the rows are the tree's nodes")
    carrying = 0
    for n, row in zip(nodes, t["nodes"]):
        want = tensors(n)
        expect([x[0] for x in row[2]] == [label for label, _, _ in want], f"report one: tensors of {row[1]}")
        for x, (label, _, tj) in zip(row[2], want):
            if KEY not in tj:
                expect(len(x) <= 9, f"report one: {row[1]} {label} has block items without the key")
                continue
            carrying += 1
            b = x[9] if len(x) == 10 else None
            if not expect(b is not None, f"report one: {row[1]} {label}: no block item"):
                continue
            kb = tj[KEY]
            expect(b["warn"] == kb.get("warn_lossy_fraction") and b["axis"] == kb["axis"] and b["rule"] == kb["rule"],
                   f"report one: {row[1]} {label}: target {b}")
            expect(len(b["formats"]) == len(kb["formats"]), f"report one: {row[1]} {label}: formats")
            for f, g in zip(b["formats"], kb["formats"]):
                for k, v in g.items():  # every field of the file, the same value (histogram pairs as lists)
                    expect(f.get(k) == v, f"report one: {row[1]} {label} {g['format']}.{k}: {f.get(k)!r} != {v!r}")
    expect(t.get("blocks") == carrying and carrying >= 7, f"report one: tree blocks {t.get('blocks')} vs {carrying}")
    expect("<img" not in text, "report one: the markup module name is in the file as markup")
    expect(">blocks with loss</span>" in text, "report one: no column head")
    if not a.chromium:
        return
    dom, raw = load_dom(a.chromium, page, os.path.join(work, "profile"))
    if dom is None:
        return
    expect("<img" not in raw, "page one: an element made of the module name")
    ref = row_reference(root)
    got = dom_rows(dom)
    expect(set(got) == set(ref), f"page one: rows {sorted(map(str, got))} != {sorted(map(str, ref))}")
    n_warned = 0
    for k, r in ref.items():
        g = got.get(k)
        if g is None:
            continue
        expect(g[5] == 11, f"page one: {k}: {g[5]} cells (the two block columns)")
        if r is None:
            expect(g[0] == [] and g[1] == [] and not g[2], f"page one: {k}: block cells {g}")
            continue
        expect(g[0] == r[0], f"page one: {k}: loss lines {g[0]} != {r[0]}")
        expect(g[1] == r[1], f"page one: {k}: spread lines {g[1]} != {r[1]}")
        expect(g[2] == r[2] and (("lossy blocks" in g[4]) == r[2]), f"page one: {k}: warned {g[2]} {g[4]} != {r[2]}")
        n_warned += r[2]
    expect(n_warned >= 3, f"page one: {n_warned} warned rows")
    hk = ("Model.mlp." + HOSTILE, None)
    expect(got.get(hk, [None] * 4)[3] == HOSTILE, f"page one: the markup module's label {got.get(hk)}")
    expect("\u25cf lossy blocks inside" in got.get(("Model.mlp", None), [[]] * 5)[4], "page one: mlp is not marked")
    ul = by_id(dom, "blocks-warned")
    items = [x.text() for x in ul.iter() if x.tag == "li"] if ul else None
    expect(items == warned_reference(root), f"page one: warned list {items} != {warned_reference(root)}")
    # no NaN/Inf: the first warned row in pre-order is selected; its details list every format and its worst block
    first = next(n for n in nodes if ref[node_key(n)] and ref[node_key(n)][2])
    tab = by_id(dom, "blk-details")
    want = []
    for label, _, tj in tensors(first):
        for f in tj.get(KEY, {}).get("formats", []):
            want.append([label, f["format"], str(f["block_size"]), str(f["blocks"]),
                         f"{pct(f['lossy_fraction'])} ({f['lossy_blocks']})", str(f["clipped"]), str(f["flushed"]),
                         str(f["subnormal"]), f"{f['zero_blocks']} / {f['nan_blocks']} / {f['zero_scale_blocks']}",
                         spread(f)])
            if "worst" in f:
                want.append([worst_text(f["worst"])])
    got_rows = [r[:10] if len(r) > 1 else r for r in table_rows(tab)] if tab else None
    expect(got_rows == want, f"page one: details of {first['module_path']}\n{got_rows}\n!= {want}")
    expect(any(len(r) == 1 for r in want), "page one: the reference has a worst block")


def check_two(a, pa, pb, ra, rb, work):
    page = os.path.join(work, "two.html")
    rc, err = run_report(a.nanscope, [pa, pb], page)
    if not expect(rc == 0, f"report two: exit {rc}: {err}"):
        return
    d = json.loads(split_page(open(page, encoding="utf-8").read())[1])
    diff = d["diff"]
    want = diff_reference(ra, rb)
    blocks = diff.get("blocks") or {"rows": []}
    expect(blocks.get("a") == 0 and diff["tree"] == 1, f"report two: trees {blocks.get('a')} {diff['tree']}")
    # the pairs of the data, resolved to their tensors, against the reference's pairs
    pairs = []
    for mod, label, ia, ka, ib, kb in blocks["rows"]:
        xa = d["trees"][0]["nodes"][ia][2][ka] if ka >= 0 else None
        xb = d["trees"][1]["nodes"][ib][2][kb] if kb >= 0 else None
        expect((xa is None or xa[0] == label) and (xb is None or xb[0] == label), f"report two: pair {mod} {label}")
        pairs.append((mod, label))
    want_pairs = []
    for r in want:
        if (r[0], r[1]) not in want_pairs:
            want_pairs.append((r[0], r[1]))
    expect(pairs == want_pairs, f"report two: pairs {pairs} != {want_pairs}")
    changed = [r for r in want if r[5] and r[5] != "0.0 pp"]
    expect(len(changed) >= 2 and any(r[4] == "not checked" for r in want),
           f"report two: the reference's changes {changed}")
    # the verdict is nanscope-diff's: the block statistics do not enter it
    expect("block" not in diff["verdict"], f"report two: verdict {diff['verdict']!r}")
    if not a.chromium:
        return
    dom, raw = load_dom(a.chromium, page, os.path.join(work, "profile"))
    if dom is None:
        return
    expect("<img" not in raw, "page two: an element made of the module name")
    tab = by_id(dom, "diff-blocks")
    got = table_rows(tab) if tab else None
    expect(got == want, f"page two: table\n{got}\n!= {want}")
    big = max((r for r in want if r[5]), key=lambda r: abs(float(r[5].split()[0])))
    s = by_id(dom, "diff-blocks-summary")
    want_s = (f"block-scaled targets, A vs B: {len(want)} tensor formats, {len(changed)} with another fraction of "
              f"blocks with loss; the largest change: {big[0]} {big[1]} {big[2]} {big[5]} (not counted in the verdict)")
    expect(s is not None and s.text() == want_s, f"page two: summary {s.text() if s else None!r} != {want_s!r}")
    worse = [x for x in tab.iter() if "worse" in x.classes()] if tab else []
    better = [x for x in tab.iter() if "better" in x.classes()] if tab else []
    expect(len(worse) == sum(1 for r in want if r[5].startswith("+")) and
           len(better) == sum(1 for r in want if r[5].startswith("-") and r[5] != "-0.0 pp"),
           f"page two: {len(worse)} worse, {len(better)} better")
    ul = by_id(dom, "blocks-warned")
    items = [x.text() for x in ul.iter() if x.tag == "li"] if ul else None
    expect(items == warned_reference(ra, pa) + warned_reference(rb, pb), f"page two: warned list {items}")


def check_identity(a, tree_path, root, work):
    """A tree without the key: the page of before the feature, byte for byte."""
    head, tail = page_constants()
    plain = json.loads(json.dumps(root))
    for n in preorder(plain):
        for _, _, t in tensors(n):
            t.pop(KEY, None)
    pages = {}
    for name, doc in (("plain", plain), ("keyed", root)):
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "tree.json"), "w") as f:
            json.dump(doc, f)
        rc, err = run_report(a.nanscope, ["tree.json"], "page.html", cwd=d)  # the same input name in both
        expect(rc == 0, f"report {name}: exit {rc}: {err}")
        pages[name] = open(os.path.join(d, "page.html"), encoding="utf-8").read() if rc == 0 else ""
    h, data, t = split_page(pages["plain"])
    expect(h == head and t == tail, "the page of a tree without the key is not page_head + data + page_tail")
    h2, data2, t2 = split_page(pages["keyed"])
    expect(h2 != head and t2 != tail, "the page of a tree with the key has no block-scaled parts")
    if data is not None and data2 is not None:
        dp, dk = json.loads(data), json.loads(data2)
        expect(all("blocks" not in x for x in dp["trees"]) and
               all(len(x) <= 9 and (len(x) < 9 or x[8] is not None) for n in dp["trees"][0]["nodes"] for x in n[2]),
               "the data of a tree without the key has block-scaled items")
        expect(strip_blocks(dk) == dp, "the data of a tree with the key, less its block items, is not the same")
    # a malformed key is refused with its JSON path
    bad = json.loads(json.dumps(root))
    bad["children"][1]["children"][0]["outputs"][KEY]["formats"][1]["blocks"] = "x"
    bad_path = os.path.join(work, "bad.json")
    with open(bad_path, "w") as f:
        json.dump(bad, f)
    rc, err = run_report(a.nanscope, [bad_path], os.path.join(work, "bad.html"))
    expect(rc == 2 and "children[1].children[0].outputs.nanscope_block_scaled.formats[1].blocks: expected a "
           "non-negative integer, got \"x\"" in err, f"report bad: {rc} {err}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanscope", required=True)
    ap.add_argument("--writer", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--chromium")
    a = ap.parse_args()
    a.nanscope, a.writer, a.work = os.path.abspath(a.nanscope), os.path.abspath(a.writer), os.path.abspath(a.work)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    p = subprocess.run([a.writer, a.work, "--blocks"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if not expect(p.returncode == 0, f"writer: {p.returncode} {p.stderr}"):
        return 1
    pa = os.path.join(a.work, "blocks_a", "Model_debug_tree_SUMMARY.json")
    pb = os.path.join(a.work, "blocks_b", "Model_debug_tree_SUMMARY.json")
    ra, rb = json.load(open(pa)), json.load(open(pb))
    expect(any(KEY in t for n in preorder(ra) for _, _, t in tensors(n)), "the writer wrote no block-scaled key")
    check_one(a, pa, ra, a.work)
    check_two(a, pa, pb, ra, rb, a.work)
    check_identity(a, pa, ra, a.work)
    print(f"{CHECKS[0]} checks, {len(FAILURES)} failed" + ("" if a.chromium else "; the browser checks were skipped (no chromium)"))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
