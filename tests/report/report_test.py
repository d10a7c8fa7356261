#!/usr/bin/env python3
"""Tests of `nanscope report` (tools/cli/report*.hpp): writes input files with known contents, runs the program,
and checks the HTML page it writes, in a real headless browser (Debian's chromium) for the page's behaviour.

References, independent of the C++ code:
  - the health counts of every module are summed here from the tree JSON (Python's json module);
  - the first NaN/Inf is found here by walking the tree in call order (a node's inputs, its children, its outputs);
  - the diff's first divergent module is what the nanscope-diff program prints (--json), run on the same files;
  - the heatmap cells are log2 of the abs-max values written here.
The page is loaded with `chromium --headless --dump-dom` (the DOM after its script ran: the script writes
data-ready and data-load-ms on <body>) and parsed with Python's html.parser; one screenshot is written.

Usage: report_test.py --nanscope PATH --work DIR [--nanscope-diff PATH] [--chromium PATH] [--quick]
       [--screenshot PATH] [--fsync-shim PATH] [--deep-tree-writer PATH] [--tinymlp-writer PATH] [--group NAME]...
--fsync-shim: an LD_PRELOAD library whose fsync() fails on directories (fail_dir_fsync.cpp), to provoke the late
directory-sync failure (group errors); --deep-tree-writer: nanscope_deep_tree (tests/diff/deep_tree.cpp), which
writes trees as deep as the tree writer allows (group depth); --tinymlp-writer: nanscope_tinymlp_tree
(tests/diff/tinymlp_tree.cpp), which writes the TinyMLP trees and a snapshot with the real writer (group producer).
Exit status 0 when every check passed, 1 when one failed, 77 (CTest: skipped) when a browser group runs and no
chromium is installed.
"""
import argparse
import html.parser
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time

SKIP = 77
FAILURES = []
CHECKS = [0]
NANSCOPE = None
NANSCOPE_DIFF = None
CHROMIUM = None
WORK = None
QUICK = False
SCREENSHOT = None
FSYNC_SHIM = None
DEEP_WRITER = None
TINYMLP_WRITER = None


def fail(msg):
    FAILURES.append(msg)
    print("FAIL: " + msg)


def expect(cond, msg):
    CHECKS[0] += 1
    if not cond:
        fail(msg)
    return cond


def run(*args, cwd=None):
    p = subprocess.run([NANSCOPE] + [str(a) for a in args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=600, cwd=cwd)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def path(name):
    return os.path.join(WORK, name)


def write_json(name, obj):
    with open(path(name), "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    return path(name)


def write_text(name, text, mode="w"):
    with open(path(name), mode) as f:
        f.write(text)
    return path(name)


# ---------------------------------------------------------------------------------------------------------------
# Trees written here (nanscope's numeric style with the health extras)
# ---------------------------------------------------------------------------------------------------------------
def tensor(nan=0, pinf=0, ninf=0, absmax=1.0, n=32):
    finite = n - nan - pinf - ninf
    return {"shape": [n], "dtype": "float32",
            "mean": "nan" if nan else ("inf" if pinf else 0.0), "std": "nan" if (nan or pinf or ninf) else 1.0,
            "min": "nan" if nan else ("-inf" if ninf else -absmax), "max": "nan" if nan else ("inf" if pinf else absmax),
            "health": {"negative": finite // 2, "zero": 0, "positive": finite - finite // 2, "neg_inf": ninf,
                       "pos_inf": pinf, "nan": nan},
            "abs_max": absmax}


def node(path_, inputs=(), output=None, children=None):
    n = {"module_path": path_, "inputs": {"args": list(inputs)}}
    if children:
        n["children"] = children
    if output is not None:
        n["outputs"] = output
    return n


def with_meta(root, step=None, rank=0):
    root["nanscope"] = {"format": 1, "style": "numeric", "step": step, "rank": rank, "pruned": False,
                        "complete": True}
    if step is None:
        del root["nanscope"]["step"]
    return root


def model_tree(bad_block=2, step=5, scale=1.0, nan_count=3):
    """Model.block.{0..3}.{attn,ff.{wi,wo}}; block.<bad_block>.ff.wo produces NaN, everything after sees it."""
    blocks = []
    poisoned = False
    for b in range(4):
        x = tensor(nan=nan_count if poisoned else 0, absmax=2.0 * scale * (b + 1))
        attn = node(f"Model.block.{b}.attn", [x], tensor(nan=nan_count if poisoned else 0, absmax=3.0 * scale * (b + 1)))
        wi = node(f"Model.block.{b}.ff.wi", [attn["outputs"]], tensor(nan=nan_count if poisoned else 0,
                                                                        absmax=40.0 * scale * (b + 1) ** 3))
        if b == bad_block:
            poisoned = True
        wo = node(f"Model.block.{b}.ff.wo", [wi["outputs"]],
                  tensor(nan=nan_count if poisoned else 0, pinf=1 if b == bad_block else 0, absmax=5.0 * scale * (b + 1)))
        ff = node(f"Model.block.{b}.ff", [attn["outputs"]], None, [wi, wo])
        blocks.append(node(f"Model.block.{b}", [x], None, [attn, ff]))
    return with_meta(node("Model", [tensor(absmax=1.0)], None, blocks), step=step)


def walk(n, parent=None):
    yield n, parent
    for c in n.get("children") or []:
        yield from walk(c, n)


def tensors_of(n, side):
    if side == "in":
        v = (n.get("inputs") or {}).get("args") or []
        return [t for t in v if isinstance(t, dict)]
    v = n.get("outputs")
    if v is None:
        return []
    return [t for t in (v if isinstance(v, list) else [v]) if isinstance(t, dict)]


def expected_counts(n):
    """A module's counts as the page defines them: its outputs' (its inputs' when it has no output)."""
    ts = tensors_of(n, "out") or tensors_of(n, "in")
    return tuple(sum(t["health"][k] for t in ts) for k in ("nan", "pos_inf", "neg_inf"))


def first_nonfinite(root):
    """(module path, 'inputs'|'outputs') of the first NaN/Inf in call order."""
    def bad(t):
        h = t["health"]
        return h["nan"] + h["pos_inf"] + h["neg_inf"] > 0

    def visit(n):
        if any(bad(t) for t in tensors_of(n, "in")):
            return n["module_path"], "inputs"
        for c in n.get("children") or []:
            r = visit(c)
            if r:
                return r
        if any(bad(t) for t in tensors_of(n, "out")):
            return n["module_path"], "outputs"
        return None
    return visit(root)


# ---------------------------------------------------------------------------------------------------------------
# The browser and the DOM
# ---------------------------------------------------------------------------------------------------------------
class Elem:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, dict(attrs), parent, []

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Elem):
                yield from c.iter()

    def classes(self):
        return (self.attrs.get("class") or "").split()


VOID = {"meta", "input", "br", "img", "hr", "link", "source", "col", "area", "base", "wbr", "embed", "track"}


class DomBuilder(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Elem("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        e = Elem(tag, attrs, self.cur)
        self.cur.children.append(e)
        if tag not in VOID:
            self.cur = e

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Elem(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        e = self.cur
        while e is not None and e.tag != tag:
            e = e.parent
        if e is not None and e.parent is not None:
            self.cur = e.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def parse_dom(text):
    b = DomBuilder()
    b.feed(text)
    b.close()
    return b.root


def by_id(dom, id_):
    for e in dom.iter():
        if e.attrs.get("id") == id_:
            return e
    return None


def chromium_cmd(extra, page, fragment=""):
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
            "--user-data-dir=" + path("chromium-profile")] + extra + ["file://" + os.path.abspath(page) + fragment]


def load(page, budget_ms=10000, timeout=120, fragment=""):
    """The DOM of the page after its script ran; (dom, wall seconds)."""
    t0 = time.monotonic()
    p = subprocess.run(["timeout", str(timeout)] + chromium_cmd(["--virtual-time-budget=" + str(budget_ms),
                                                                 "--dump-dom"], page, fragment),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.monotonic() - t0
    if not expect(p.returncode == 0 and p.stdout, f"chromium --dump-dom {page}: exit {p.returncode}, "
                  f"{p.stderr.decode('utf-8', 'replace')[-500:]}"):
        return parse_dom(""), wall
    dom = parse_dom(p.stdout.decode("utf-8", "replace"))
    body = next((e for e in dom.iter() if e.tag == "body"), None)
    expect(body is not None and body.attrs.get("data-ready") == "1",
           f"{page}: the page's script did not finish (body data-ready != 1)")
    return dom, wall


def screenshot(page, out, size="1400,1400"):
    if os.path.exists(out):
        os.remove(out)
    p = subprocess.run(["timeout", "120"] + chromium_cmd(["--virtual-time-budget=10000", "--window-size=" + size,
                                                          "--screenshot=" + os.path.abspath(out)], page),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ok = p.returncode == 0 and os.path.exists(out)
    if ok:
        with open(out, "rb") as f:
            ok = f.read(8) == b"\x89PNG\r\n\x1a\n"
    expect(ok, f"chromium --screenshot {out}: exit {p.returncode}, {p.stderr.decode('utf-8', 'replace')[-300:]}")


def make_fifo(name):
    p = path(name)
    if os.path.exists(p):
        os.remove(p)
    os.mkfifo(p)
    return p


def rows(dom):
    return [e for e in dom.iter() if "row" in e.classes() and "data-node" in e.attrs]


def report(out, *inputs):
    """Runs nanscope report in the work directory with the inputs' names relative to it (short names on the page)."""
    rc, so, se = run("report", *[os.path.relpath(i, WORK) for i in inputs], "-o", out, cwd=WORK)
    expect(rc == 0, f"nanscope report {' '.join(map(str, inputs))}: exit {rc}, stderr {se!r}")
    return path(out)


# ---------------------------------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------------------------------
def group_errors():
    """Bad input and output: exit 2, a message naming the file, and no file written (or the old one intact)."""
    good = write_json("good.json", model_tree())
    out = path("errors.html")
    write_text("errors.html", "old report")
    cases = [
        (path("missing.json"), "cannot open"),
        (WORK, "is a directory"),
        (write_text("empty.json", ""), "empty file"),
        (write_text("truncated.json", json.dumps(model_tree(), indent=1)[:-40]), "not valid JSON"),
        (write_text("array.json", "[1, 2, 3]"), "not a layer tree"),
        (write_text("object.json", json.dumps({"verdict": "x", "nodes": [1]}, indent=2)), "not a layer tree"),
        (write_text("noschema.jsonl", '{"a": 1}\n{"b": 2}\n'), "not a layer tree"),
        (write_text("badline.jsonl", '{"site": "a", "step": 1, "log2_abs_max": 2}\n{"site": \n'), "line 2"),
        (write_text("badstep.jsonl", '{"site": "a", "step": -1, "log2_abs_max": 2}\n'), "\"step\""),
        (write_text("nolog.jsonl", '{"site": "a", "step": 1}\n'), "log2_abs_max"),
        (write_text("badscan.jsonl", '{"kind":"tensor","file":"a.npy","nan":"x"}\n'), "\"nan\""),
        (write_text("badkind.jsonl", '{"kind":"what"}\n'), "unknown \"kind\""),
        (write_json("badtree.json", {"module_path": "M", "children": [{"module_path": 3}]}), "children[0].module_path"),
        (write_json("badhealth.json", node("M", [dict(tensor(), health={"nan": -1})])), "health"),
        (write_text("badutf8.json", b'{"module_path": "M\xff"}', "wb"), "UTF-8"),
        (write_text("badutf8.jsonl", b'{"kind":"summary"}\n{"kind":"tensor","file":"a\xfe.npy"}\n', "wb"), "line 2"),
        # hostile inputs: deep nesting overflowed the stack (SIGSEGV); a pipe without a writer hung; /dev/zero was
        # read until memory ran out
        (write_text("deep.json", '{"site": "a", "step": 1, "log2_abs_max": 1, "x": ' + "[" * 200000 + "]" * 200000 + "}"),
         "nested more than 2010 levels deep"),
        (write_text("deep.jsonl", '{"site": "a", "step": 1, "log2_abs_max": 1}\n{"site": "a", "x": ' + "[" * 100000 +
                    "]" * 100000 + "}\n"), "line 2: nested more than"),
        (make_fifo("nowriter.json"), "a named pipe (FIFO) with no writer"),
        ("/dev/zero", "not a JSON document"),
    ]
    for bad, needle in cases:
        rc, so, se = run("report", good, bad, "-o", out)
        expect(rc == 2, f"report with {bad}: exit {rc}, expected 2 (stderr {se!r})")
        expect(bad in se and needle in se, f"report with {bad}: stderr {se!r} should name the file and say {needle!r}")
        # the report has no --fifo-wait / --max-input-size (nanscope-diff's options): its messages name none
        expect("--fifo-wait" not in se and "--max-input-size" not in se and "tree file" not in se,
               f"report with {bad}: stderr {se!r} names an option or input kind of nanscope-diff")
        with open(out) as f:
            expect(f.read() == "old report", f"report with {bad}: the old output was touched")
    # usage
    rc, so, se = run("report", good)
    expect(rc == 2 and "output" in se.lower(), f"report without -o: exit {rc}, stderr {se!r}")
    rc, so, se = run("report", "-o", out)
    expect(rc == 2 and "inputs" in se, f"report without inputs: exit {rc}, stderr {se!r}")
    # `--`: what follows is an input even when it starts with '-'; `report --` alone is a usage error
    dash = path("-dash.json")
    shutil.copy(good, dash)
    p = subprocess.run([NANSCOPE, "report", "-o", out, "--", "-dash.json"], cwd=WORK, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    expect(p.returncode == 0, f"report -o OUT -- -dash.json: exit {p.returncode}, {p.stderr!r}")
    rc, so, se = run("report", "-o", out, "--")
    expect(rc == 2 and "inputs" in se, f"report -o OUT --: exit {rc}, stderr {se!r}")
    write_text("errors.html", "old report")
    # the output is one of the inputs (by another name too): refused, the input intact
    os.link(good, path("good_link.json"))
    for dest in (good, path("good_link.json")):
        before = open(good, "rb").read()
        rc, so, se = run("report", good, "-o", dest)
        expect(rc == 2 and "it is the input" in se, f"report -o {dest} (an input): exit {rc}, stderr {se!r}")
        expect(open(good, "rb").read() == before, f"report -o {dest}: the input was replaced")
    os.remove(path("good_link.json"))
    # output errors
    for dest, needle in [(path("no/such/dir/r.html"), "cannot create a temporary file"),
                         (WORK, "not a regular file"), ("/dev/null", "not a regular file")]:
        rc, so, se = run("report", good, "-o", dest)
        expect(rc == 2 and needle in se, f"report -o {dest}: exit {rc}, stderr {se!r}, expected {needle!r}")
    expect(os.path.exists("/dev/null") and not os.path.isfile("/dev/null"), "/dev/null was replaced")
    if os.geteuid() != 0:
        ro = path("readonly")
        os.makedirs(ro, exist_ok=True)
        os.chmod(ro, 0o555)
        rc, so, se = run("report", good, "-o", os.path.join(ro, "r.html"))
        expect(rc == 2 and "Permission denied" in se, f"report into a read-only directory: exit {rc}, {se!r}")
        os.chmod(ro, 0o755)
    # success: the file is replaced, no temporary file left behind
    rc, so, se = run("report", good, "-o", out)
    expect(rc == 0 and se == "", f"report of a good tree: exit {rc}, stderr {se!r}")
    with open(out, encoding="utf-8") as f:
        page = f.read()
    expect(page.startswith("<!DOCTYPE html>"), "the report is an HTML page")
    expect(not [n for n in os.listdir(WORK) if n.startswith(".nanscope-report-")], "a temporary file was left")
    # self-contained: no network reference anywhere (the SVG namespace is a name, not a fetch)
    for needle in ("src=\"http", "href=\"http", "url(", "@import", "//cdn", "fetch(", "XMLHttpRequest"):
        expect(needle not in page, f"the page references {needle!r}")
    output_names_escaped(good)


def output_names_escaped(good):
    """Every message names the output escaped (control characters and invalid UTF-8 as \\xNN, never raw), the
    late one included: the page renamed into place, the fsync() of its directory failed (provoked with an
    LD_PRELOAD shim, fail_dir_fsync.cpp, since no permission stops root from syncing a directory). It printed the
    library's text raw, escape sequences and all."""
    odd = os.path.join(os.fsencode(WORK), b"odd\x1b[31m\nline\xff")
    os.makedirs(odd, exist_ok=True)
    shown = b"odd\\x1b[31m\\x0aline\\xff"  # how the messages must show the directory's name

    def report_bytes(out, env=None):
        p = subprocess.run([os.fsencode(NANSCOPE), b"report", os.fsencode(good), b"-o", out], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=600, env=env)
        return p.returncode, p.stderr

    def no_raw(se, what):
        body = se[:-1] if se.endswith(b"\n") else se
        raw = [b for b in (b"\x1b", b"\x07", b"\xff", b"\n") if b in body]
        expect(not raw, f"{what}: raw {raw!r} in the message {se!r}")

    # early: no such directory below it (the error names the directory write_atomically tried)
    rc, se = report_bytes(os.path.join(odd, b"no\x07dir", b"r.html"))
    expect(rc == 2 and b"cannot create a temporary file in" in se and shown + b"/no\\x07dir/" in se,
           f"report into a missing directory with control characters in its name: exit {rc}, stderr {se!r}")
    no_raw(se, "report into a missing directory")
    if not FSYNC_SHIM:
        print("note: no --fsync-shim, the late directory-sync failure is not provoked")
        return
    env = dict(os.environ, LD_PRELOAD=FSYNC_SHIM)
    # (a sanitizer runtime must otherwise come first in the library list)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
    out = os.path.join(odd, b"r\x07.html")
    rc, se = report_bytes(out, env)
    expect(rc == 2, f"report with a failing directory fsync: exit {rc}, expected 2 (stderr {se!r})")
    expect(b"written, but fsync of its directory" in se and b"(a crash now may lose the report's new name; exit 2)" in se,
           f"report with a failing directory fsync: stderr {se!r}")
    expect(shown + b"/r\\x07.html" in se, f"the late directory-sync failure does not name the output escaped: {se!r}")
    no_raw(se, "the late directory-sync failure")
    with open(out, "rb") as f:
        expect(f.read(15) == b"<!DOCTYPE html>", "the page is not in place after the late directory-sync failure")


def hostile_names():
    return [
        "</script><script>window.pwned=1;document.body.setAttribute('data-pwned','1')</script>",
        "<img src=x onerror=\"window.pwned=2;document.body.setAttribute('data-pwned','2')\">",
        "</SCRIPT ><svg onload=\"document.body.setAttribute('data-pwned','3')\">",
        "<!-- comment --> & &amp; &lt;b&gt; \"quoted\" 'single'",
        "ctl\x01\x07\x1b[31mred\x7f\u0085 end",
        "line\u2028sep\u2029para",
        "M.\u00e9\u4e2d\U0001f600",
    ]


def group_browser():
    """The page in chromium: the summary names the right producer, counts equal the JSON's, the diff highlights
    the module nanscope-diff names, hostile names are text, the heatmap has the tree files' values."""
    tree = model_tree(bad_block=2, step=5)
    ref = model_tree(bad_block=99, step=5)  # the same model without the NaN
    a = write_json("ref.json", ref)
    b = write_json("nan.json", tree)
    page = report("browser.html", a, b)
    dom, wall = load(page)
    # the summary names the producer found here
    exp_path, exp_side = first_nonfinite(tree)
    first = by_id(dom, "first-nan")
    if expect(first is not None, "no #first-nan in the summary"):
        txt = first.text()
        expect(txt.startswith("first NaN: " + exp_path + " " + exp_side) and "step 5" in txt,
               f"summary says {txt!r}, expected first NaN: {exp_path} {exp_side}, step 5")
        expect(first.attrs.get("data-path") == exp_path, f"summary link data-path {first.attrs.get('data-path')!r}")
    # the producer's row is highlighted
    marked = [r for r in rows(dom) if "first" in r.classes()]
    expect(len(marked) == 1 and marked[0].attrs.get("data-path") == exp_path,
           f"rows marked first: {[r.attrs.get('data-path') for r in marked]}")
    # every module's counts equal the JSON's (the candidate tree is shown: it has the first NaN)
    expected = {n["module_path"]: expected_counts(n) for n, _ in walk(tree)}
    shown = {r.attrs["data-path"]: (int(r.attrs["data-nan"]), int(r.attrs["data-pos-inf"]), int(r.attrs["data-neg-inf"]))
             for r in rows(dom)}
    expect(shown == expected, f"row counts differ from the JSON's: {sorted(set(shown.items()) ^ set(expected.items()))[:6]}")
    # the counts also appear as text in the row's cells
    for r in rows(dom):
        cells = [c for c in r.children if isinstance(c, Elem) and "num" in c.classes()]
        n, pi, ni = expected[r.attrs["data-path"]]
        if not expect([c.text() for c in cells[:3]] == [str(n), str(pi), str(ni)],
                      f"row {r.attrs['data-path']}: cells {[c.text() for c in cells[:3]]}"):
            break
    totals = by_id(dom, "totals")
    n_bad = sum(1 for t_ in (ref, tree) for n_, _ in walk(t_) for side in ("in", "out") for t in tensors_of(n_, side)
                if t["health"]["nan"] + t["health"]["pos_inf"] + t["health"]["neg_inf"])
    expect(totals is not None and totals.attrs.get("data-nonfinite-tensors") == str(n_bad),
           f"totals: {totals.attrs if totals else None}, expected {n_bad} tensors with NaN/Inf")
    # the diff: the same module as nanscope-diff
    if NANSCOPE_DIFF:
        p = subprocess.run([NANSCOPE_DIFF, "--json", a, b], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        d = json.loads(p.stdout)
        prod = by_id(dom, "diff-producer")
        expect(prod is not None and prod.text() == d["likely_producer_text"],
               f"diff producer {prod.text() if prod else None!r}, nanscope-diff says {d['likely_producer_text']!r}")
        fd = d["first_divergence"]
        firstd = by_id(dom, "diff-first")
        expect(firstd is not None and firstd.text().startswith(fd["module"]),
               f"diff first divergence {firstd.text() if firstd else None!r}, nanscope-diff says {fd['module']!r}")
        hl = [r for r in rows(dom) if "diff-producer" in r.classes()]
        expect(len(hl) == 1 and hl[0].attrs.get("data-path") == d["likely_producer"],
               f"row highlighted as the diff's producer: {[r.attrs.get('data-path') for r in hl]}")
    # the heatmap: one column per tree file, cells for every module with outputs
    svg = [e for e in dom.iter() if e.tag == "svg" and "heatmap" in e.classes()]
    if expect(len(svg) == 1, f"{len(svg)} heatmaps, expected 1"):
        titles = [e.text() for e in svg[0].iter() if e.tag == "title"]
        # both files are step 5: the columns are "5 #1" (A) and "5 #2" (B)
        cell = "Model.block.1.ff.wi @ 5 #1: log2 |x|max = %.2f" % math.log2(40.0 * 8)
        expect(any(t == cell for t in titles), f"no heatmap cell {cell!r}")
        expect(any(t == "Model.block.3.ff.wo @ 5 #2: NaN/Inf" for t in titles), "the NaN cell is not marked")
    # real `nanscope scan --json` output of a hand-written .safetensors file: the page's counts are the scan's
    import struct
    values = {"model.layers.0.w": [1.0, float("nan"), 2.0, -3.0], "model.layers.1.w": [float("inf"), 5.0, 0.0, -1.0],
              "model.layers.1.b": [float("nan"), float("nan"), float("-inf"), 7.5], "head": [0.5, -0.25, 0.0, 1.0]}
    header, blob = {}, b""
    for name, v in values.items():
        header[name] = {"dtype": "F32", "shape": [len(v)], "data_offsets": [len(blob), len(blob) + 4 * len(v)]}
        blob += struct.pack("<%df" % len(v), *v)
    hj = json.dumps(header).encode()
    with open(path("m.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + blob)
    rc, so, se = run("scan", "--json", path("m.safetensors"))
    expect(rc == 1, f"scan of m.safetensors: exit {rc}, {se!r}")
    scan = write_text("m_scan.jsonl", so)
    sdom, _ = load(report("scan.html", scan))
    srows = {r.attrs["data-path"]: r for r in rows(sdom)}
    for rec in map(json.loads, so.splitlines()):
        if rec["kind"] != "tensor":
            continue
        r = srows.get(rec["name"])
        if not expect(r is not None, f"scan page: no row for tensor {rec['name']!r} (rows {sorted(srows)})"):
            continue
        got = (int(r.attrs["data-nan"]), int(r.attrs["data-pos-inf"]), int(r.attrs["data-neg-inf"]))
        v = values[rec["name"]]
        want = (sum(math.isnan(x) for x in v), sum(x == math.inf for x in v), sum(x == -math.inf for x in v))
        expect(got == want == (rec["nan"], rec["pos_inf"], rec["neg_inf"]),
               f"scan page: {rec['name']}: row {got}, values {want}, scan JSON {(rec['nan'], rec['pos_inf'], rec['neg_inf'])}")
        expect(float(r.attrs["data-abs-max"]) == max(abs(x) for x in v if not math.isnan(x)),
               f"scan page: {rec['name']}: abs max {r.attrs['data-abs-max']}")
    sf = by_id(sdom, "first-nan")
    expect(sf is not None and sf.text() == "first NaN: model.layers.0.w (m_scan.jsonl)",
           f"scan page: summary {sf.text() if sf else None!r}")
    # a series of tree files given out of order: one heatmap column per file, ordered by the `step` extra; the
    # NaN appears at step 5 after block.2's values grew step by step
    series = []
    for step in (3, 0, 5, 1, 4, 2):
        t_ = model_tree(bad_block=2 if step == 5 else 99, step=step, scale=4.0 ** step)
        series.append(write_json(f"series_{step}.json", t_))
    spage = report("series.html", *series)
    sdom, _ = load(spage)
    svg = [e for e in sdom.iter() if e.tag == "svg" and "heatmap" in e.classes()]
    if expect(len(svg) == 1, f"series: {len(svg)} heatmaps, expected 1"):
        texts = [e.text() for e in svg[0].iter() if e.tag == "text"]
        cols = [t for t in texts if t in [str(k) for k in range(6)]]
        expect(cols[-6:] == ["0", "1", "2", "3", "4", "5"], f"series: heatmap columns {cols}")
        titles = [e.text() for e in svg[0].iter() if e.tag == "title"]
        for step in range(6):
            want = "Model.block.2.ff.wi @ %d: log2 |x|max = %.2f" % (step, math.log2(40.0 * 4.0 ** step * 27))
            expect(want in titles, f"series: heatmap cell {want!r} missing")
        # cells above the fp16 limit are outlined
        over = [e for e in svg[0].iter() if e.tag == "rect" and e.attrs.get("stroke") == "#d50000"]
        n_over = 0
        for step in range(6):
            sc = 4.0 ** step
            for b in range(4):
                for kind, v in (("attn", 3.0), ("wi", 40.0 * (b + 1) ** 2), ("wo", 5.0)):
                    nan = step == 5 and (b == 3 or (b == 2 and kind == "wo"))
                    if not nan and math.log2(v * sc * (b + 1)) > math.log2(65504):
                        n_over += 1
        expect(len(over) == n_over, f"series: {len(over)} cells outlined above the fp16 limit, expected {n_over}")
    sfirst = by_id(sdom, "first-nan")
    expect(sfirst is not None and sfirst.text().startswith("first NaN: Model.block.2.ff.wo outputs, step 5"),
           f"series: summary {sfirst.text() if sfirst else None!r}")
    # a screenshot of the series page is the test's artifact (docs/report.png is made from it)
    screenshot(spage, SCREENSHOT or path("report.png"))


def group_hostile():
    names = hostile_names()
    kids = [node("M." + n, [tensor()], tensor(nan=i, absmax=1.0 + i)) for i, n in enumerate(names)]
    root = with_meta(node("M", [tensor()], None, kids), step=1)
    # written with \\u escapes for the control characters (json.dump escapes them)
    with open(path("hostile.json"), "w", encoding="utf-8") as f:
        json.dump(root, f, ensure_ascii=False)
    scan = path("hostile_scan.jsonl")
    with open(scan, "w", encoding="utf-8") as f:
        for i, n in enumerate(names):
            f.write(json.dumps({"kind": "tensor", "file": "f</script>.safetensors", "name": n, "dtype": "f32",
                                "shape": [2], "count": 2, "checked": True, "nan": 1, "pos_inf": 0, "neg_inf": 0,
                                "abs_max": 1.0, "status": "nonfinite"}) + "\n")
        f.write(json.dumps({"kind": "error", "file": "<b>x</b>", "name": None, "message": names[0]}) + "\n")
        f.write('{"kind":"summary","files":1,"tensors":7,"nonfinite_tensors":7,"overflow_tensors":0,"errors":1,'
                '"skipped":0,"warnings":0,"exit_code":2}\n')
    hist = path("hostile_history.jsonl")
    with open(hist, "w", encoding="utf-8") as f:
        for n in names:
            f.write(json.dumps({"site": n, "step": 1, "log2_abs_max": 2.5}) + "\n")
    page = report("hostile.html", path("hostile.json"), scan, hist)
    with open(page, encoding="utf-8") as f:
        text = f.read()
    # the only script end tags are the page's own two
    expect(text.lower().count("</script") == 2, f"{text.lower().count('</script')} </script in the page, expected 2")
    expect("\u2028" not in text and "\u2029" not in text and "\x01" not in text, "raw U+2028/U+2029/controls in the page")
    dom, wall = load(page)
    body = next(e for e in dom.iter() if e.tag == "body")
    expect("data-pwned" not in body.attrs, f"a hostile name ran script: body data-pwned={body.attrs.get('data-pwned')}")
    expect(not [e for e in dom.iter() if e.tag in ("img", "svg") and "heatmap" not in e.classes()
                and not (e.parent and e.parent.tag == "svg")],
           "a hostile name became an element")
    expect(not [e for e in dom.iter() if e.tag == "script"][2:], "a hostile name became a script element")
    shown = {r.attrs["data-path"] for r in rows(dom)}
    for n in names:
        expect("M." + n in shown, f"hostile name {n!r} not shown literally as a row")
    labels = [e.text() for e in dom.iter() if "label" in e.classes()]
    for n in names:
        expect(n in labels, f"hostile name {n!r} is not the literal text of a row label")
    titles = [e.text() for e in dom.iter() if e.tag == "title"]
    for n in names:
        expect(any(t.startswith(n + " @ 1:") for t in titles), f"hostile site {n!r} not literal in the heatmap")
    # (--dump-dom shows the DOM, not JavaScript globals: each payload that would set window.pwned also marks <body>
    # with data-pwned, checked above)
    # the scan's tree: the hostile names as (dotted) nodes, the error message as a note
    notes = [e.text() for e in dom.iter() if e.tag == "li"]
    expect(any(names[0] in n for n in notes), "the scan's error message is not shown literally")


def group_history():
    """A hand-made history file (the documented record) feeds the heatmap: cells, NaN marks, limits."""
    recs = []
    for step in (0, 10, 20, 30):
        for i, site in enumerate(["embed", "block.0.ff.wo", "block.1.ff.wo", "head"]):
            v = i + step / 5.0
            rec = {"site": site, "step": step, "log2_abs_max": v}
            if site == "block.1.ff.wo" and step == 30:
                rec = {"site": site, "step": step, "log2_abs_max": None, "nan": 4}
            recs.append(rec)
    hist = write_text("history.jsonl", "\n".join(json.dumps(r) for r in recs) + "\n\n")
    page = report("history.html", hist)
    dom, wall = load(page)
    svg = [e for e in dom.iter() if e.tag == "svg" and "heatmap" in e.classes()]
    if not expect(len(svg) == 1, f"{len(svg)} heatmaps from a history file, expected 1"):
        return
    titles = [e.text() for e in svg[0].iter() if e.tag == "title"]
    for r in recs:
        if r["log2_abs_max"] is None:
            want = f"{r['site']} @ {r['step']}: NaN/Inf"
        else:
            want = f"{r['site']} @ {r['step']}: log2 |x|max = {r['log2_abs_max']:.2f}"
        expect(want in titles, f"heatmap cell {want!r} missing")
    texts = [e.text() for e in svg[0].iter() if e.tag == "text"]
    for fmt, lim in (("fp16", 65504), ("e4m3fn", 448), ("e5m2", 57344)):
        want = f"{fmt} {math.log2(lim):.1f}"
        expect(want in texts, f"the {fmt} limit is not marked on the heatmap's scale as {want!r}")
    expect(any(t.startswith("bf16 limit 128.0") for t in texts), f"the bf16 limit is not named: {texts[:20]}")
    cols = [t for t in texts if t in ("0", "10", "20", "30")]
    expect(cols[-4:] == ["0", "10", "20", "30"], f"heatmap columns {cols}")
    # a finite value near the double's limit stays a number in the page's data (rounding it to 3 decimals
    # overflowed: "inf")
    big = write_text("big.jsonl", '{"site": "a", "step": 1, "log2_abs_max": 1e308}\n{"site": "a", "step": 2, "log2_abs_max": 3}\n')
    with open(report("big.html", big), encoding="utf-8") as f:
        m = re.search(r'"rows":\[\["a",\[([^\]]*)\]', f.read())
    expect(m is not None and m.group(1) == "1e+308,3", f"heatmap data of a 1e308 cell: {m.group(1) if m else None!r}")
    # bounded pages from hostile inputs: 8000 sites over 8000 steps made a dense 64M-cell heatmap (1.9 GB, a 450 MB
    # page); a 40 KB dotted tensor name made a node per prefix, each holding its prefix (2 GB, a 400 MB page)
    many = write_text("many.jsonl", "".join(json.dumps({"site": f"s{i}", "step": i, "log2_abs_max": 1}) + "\n"
                                            for i in range(8000)))
    page = report("many.html", many)
    with open(page, encoding="utf-8") as f:
        text = f.read()
    expect(len(text) < 16 << 20, f"the page of an 8000 x 8000 history is {len(text)} bytes")
    expect("20 steps a column, the largest value" in text and "6000 more are left out" in text,
           "the bounded heatmap does not say how it was bounded")
    dots = write_text("dots.jsonl", json.dumps({"kind": "tensor", "file": "f", "name": "a." * 20000}) + "\n")
    page = report("dots.html", dots)
    expect(os.path.getsize(page) < 4 << 20, f"the page of a 40 KB dotted name is {os.path.getsize(page)} bytes")


def group_large():
    """A 100k-module tree opens in the browser within the stated bound (the page measures itself)."""
    blocks, per = (200, 99) if QUICK else (1000, 99)
    t = {"shape": [8], "dtype": "float32", "health": {"negative": 4, "zero": 0, "positive": 4, "neg_inf": 0,
                                                      "pos_inf": 0, "nan": 0}, "abs_max": 1.5}
    bad = dict(t, health=dict(t["health"], nan=2, positive=2))
    children = []
    for b in range(blocks):
        kids = [{"module_path": f"Big.layers.{b}.op{c}", "outputs": bad if (b, c) == (blocks - 3, 7) else t}
                for c in range(per)]
        children.append({"module_path": f"Big.layers.{b}", "children": kids})
    root = with_meta({"module_path": "Big", "children": children}, step=0)
    src = write_json("large.json", root)
    n_modules = 1 + blocks * (per + 1)
    t0 = time.monotonic()
    page = report("large.html", src)
    gen = time.monotonic() - t0
    dom, wall = load(page, budget_ms=30000, timeout=300)
    body = next(e for e in dom.iter() if e.tag == "body")
    ms = float(body.attrs.get("data-load-ms", "inf"))
    bound = 3000.0
    print(f"large: {n_modules} modules; nanscope report {gen:.1f} s; page script {ms:.0f} ms; "
          f"chromium run {wall:.1f} s; {len(rows(dom))} rows in the DOM")
    expect(ms < bound, f"{n_modules}-module tree: the page took {ms:.0f} ms to render (bound {bound:.0f} ms)")
    expect(len(rows(dom)) < 3000, f"{len(rows(dom))} rows rendered at load: not lazy")
    first = by_id(dom, "first-nan")
    want = f"Big.layers.{blocks - 3}.op7"
    expect(first is not None and first.attrs.get("data-path") == want, f"large tree: first NaN should be {want}")
    expect(any(r.attrs.get("data-path") == want and "first" in r.classes() for r in rows(dom)),
           "large tree: the producer's row was not revealed")
    # a search over every module path (the page runs it from the URL fragment and times it)
    dom, _ = load(page, budget_ms=30000, timeout=300, fragment="#search=OP7")
    body = next(e for e in dom.iter() if e.tag == "body")
    res = by_id(dom, "search-results")
    want_n = sum(1 for n, _ in walk(root) if "op7" in n["module_path"].lower())
    expect(res is not None and res.attrs.get("data-matches") == str(want_n),
           f"large tree: search 'OP7' found {res.attrs.get('data-matches') if res else None}, expected {want_n}")
    listed = [e for e in res.iter() if "data-node" in e.attrs] if res else []
    expect(len(listed) == min(200, want_n) and all("op7" in e.text().lower() for e in listed),
           f"large tree: {len(listed)} search results listed")
    sms = float(body.attrs.get("data-search-ms", "inf"))
    print(f"large: search over {n_modules} paths: {sms:.0f} ms, {want_n} matches")
    expect(sms < 500.0, f"large tree: a search took {sms:.0f} ms (bound 500 ms)")


def load_dom_text(page, budget_ms=30000, timeout=300):
    """The dumped DOM as text (for pages whose DOM is too deep for Elem.iter's recursion); "" when chromium failed."""
    p = subprocess.run(["timeout", str(timeout)] + chromium_cmd(["--virtual-time-budget=" + str(budget_ms),
                                                                 "--dump-dom"], page),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    expect(p.returncode == 0 and p.stdout, f"chromium --dump-dom {page}: exit {p.returncode}, "
           f"{p.stderr.decode('utf-8', 'replace')[-500:]}")
    return p.stdout.decode("utf-8", "replace") if p.returncode == 0 else ""


def group_depth():
    """Trees as deep as the tree writer writes them (nanscope::max_tree_depth = 1000 modules, written by the real
    writer through nested scopes: tests/diff/deep_tree.hpp) are read, with the first NaN and the diff found at the
    innermost module; one module deeper, or one JSON level deeper than a tree at the limit needs, is refused with
    the shared text. With chromium, the page of the deep tree renders."""
    if not expect(DEEP_WRITER is not None, "group depth needs --deep-tree-writer"):
        return
    p = subprocess.run([DEEP_WRITER, path("deep")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if not expect(p.returncode == 0, f"nanscope_deep_tree: exit {p.returncode}, {p.stderr!r}"):
        return
    limit = 1000
    inner = "Deep" + ".l" * (limit - 1)
    full = "Deep_debug_tree_FULL_TENSORS.json"
    a, b, torch = (path(os.path.join("deep", d, full)) for d in ("a", "b", "torch"))

    if not os.path.exists(report("deep.html", a)):
        return
    d = page_data(path("deep.html"))
    nodes = d["trees"][0]["nodes"] if d.get("trees") else []
    expect(len(nodes) == limit, f"the deep tree has {len(nodes)} rows, expected {limit}")
    expect(all(n[0] == i - 1 for i, n in enumerate(nodes)), "the deep tree's rows are not one chain of parents")
    expect(nodes and nodes[-1][1] == inner, "the innermost row is not the innermost module")
    first = d.get("first") or {}
    expect(first.get("node") == limit - 1 and first.get("text", "").startswith("first NaN: " + inner + " outputs[0]"),
           f"the deep tree's first NaN: {str(first)[:200]}")

    d = page_data(report("deep_diff.html", a, b))
    diff = d.get("diff") or {}
    expect(diff.get("first_text") == inner + " outputs[0]" and diff.get("producer_module") == inner and
           diff.get("producer_text", "").startswith(inner + " (its inputs match") and
           diff.get("producer_node") == limit - 1, f"the deep diff: {str(diff)[:300]}")
    d = page_data(report("deep_styles.html", torch, a))
    expect((d.get("diff") or {}).get("diverged_flag") is False, "the deep trees of two styles differ")
    d = page_data(report("deep_hand.html", path("deep/hand_limit.json")))
    expect(len(d["trees"][0]["nodes"]) == limit if d.get("trees") else False, "the hand-built tree at the limit")

    for name, text in (("hand_deeper.json", "the layer tree is nested more than 1000 modules deep"),
                       ("hand_rank9.json", "nested more than 2010 levels deep")):
        rel = os.path.join("deep", name)
        rc, so, se = run("report", rel, "-o", "deep_refused.html", cwd=WORK)
        expect(rc == 2 and se == f"nanscope: file '{rel}': {text} (exit 2)\n", f"report {rel}: exit {rc}, stderr {se!r}")
        expect(not os.path.exists(path("deep_refused.html")), f"report {rel} wrote a page")

    if not CHROMIUM:
        print("note: no chromium, the deep tree's page is not rendered")
        return
    dom = load_dom_text(path("deep.html"))
    body = re.search(r"<body[^>]*>", dom)
    expect(body is not None and 'data-ready="1"' in body.group(0), "the deep tree's page did not finish its script")
    row_nodes = re.findall(r'<div class="row[^"]*" data-node="(\d+)"', dom)
    expect(len(row_nodes) == limit, f"the deep tree's page shows {len(row_nodes)} rows, expected {limit}")
    expect(re.search(r'<div class="row[^"]*\bfirst\b[^"]*" data-node="' + str(limit - 1) + '"', dom) is not None,
           "the deep tree's page does not mark the innermost row as the first NaN")


def page_data(page_path):
    """The JSON the page embeds (<script type="application/json" id="nanscope-data">)."""
    with open(page_path, encoding="utf-8") as f:
        page = f.read()
    m = re.search(r'<script type="application/json" id="nanscope-data">(.*?)</script>', page, re.S)
    expect(m is not None, "the page embeds its data")
    return json.loads(m.group(1)) if m else {}


def group_warnings():
    """Early warnings in a tree's root ("nanscope" -> "warnings", docs/tree.md) are listed among its notes, text
    for text (hostile text included: the page shows notes with textContent); a tree without them adds none."""
    texts = ["nanscope: early warning at step 7: block.1.ff.wo:output will overflow fp16 in ~37.9 steps",
             "nanscope: early warning at step 7: " + hostile_names()[0] + ":output jumped"]
    t = model_tree(bad_block=9, step=7)
    t["nanscope"]["warnings"] = [{"module_path": "Model.block.1.ff.wo", "site": "block.1.ff.wo:output", "step": 7,
                                  "rule": "steps-to-overflow", "steps_to_overflow": 37.9, "text": texts[0]},
                                 {"module_path": "Model", "site": "x:output", "step": 7, "rule": "jump",
                                  "steps_to_overflow": None, "text": texts[1]},
                                 {"module_path": "Model", "text": 3}]  # not a text: skipped, not an error
    t["children"][1]["children"][1]["children"][1]["nanscope_warnings"] = t["nanscope"]["warnings"][:1]
    with_w = write_json("warned.json", t)
    plain = write_json("plain.json", model_tree(bad_block=9, step=7))
    d = page_data(report("warned.html", with_w))
    notes = d["trees"][0]["notes"] if d.get("trees") else None
    expect(notes == texts, f"the tree's notes are the warnings' texts: {notes!r}")
    d = page_data(report("plain.html", plain))
    notes = d["trees"][0]["notes"] if d.get("trees") else None
    expect(notes == [], f"a tree without warnings has no notes: {notes!r}")


TINYMLP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "diff", "fixtures", "tinymlp")


def rows_by_path(d, tree=0):
    """{path or 'path checkpoint "text"': row index} of a tree in the page's data."""
    out = {}
    for i, n in enumerate(d["trees"][tree]["nodes"]):
        name = n[1] + (' checkpoint "%s"' % n[3]["checkpoint"] if len(n) > 3 and "checkpoint" in n[3] else "")
        out[name] = i
    return out


def reference_first(tree):
    """(node, side, label) of the first NaN/Inf in call order, computed here: a node's parameters and inputs when it
    is entered, its children, its outputs when it is left (nodes as JSON objects, health counts)."""
    def bad(t):
        return isinstance(t, dict) and sum(t["health"][k] for k in ("nan", "pos_inf", "neg_inf")) > 0

    def visit(n):
        for k, t in (n.get("parameters") or {}).items():
            if bad(t):
                return n, "p", "parameters." + k
        for i, t in enumerate((n.get("inputs") or {}).get("args") or []):
            if bad(t):
                return n, "i", "inputs.args[%d]" % i
        for c in n.get("children") or []:
            r = visit(c)
            if r:
                return r
        if bad(n.get("outputs")):
            return n, "o", "outputs"
        return None
    return visit(tree)


def write_npy(name, values, shape, descr="<f4"):
    """A .npy file (format 1.0) of float32 values, written here (no numpy)."""
    import struct
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }" % (
        descr, ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    pad = 64 - (10 + len(header) + 1) % 64
    header += " " * pad + "\n"
    data = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + struct.pack("<%df" % len(values), *values)
    with open(path(name), "wb") as f:
        f.write(data)
    return path(name)


def group_producer():
    """Issue 30 item 2: the summary's first NaN/Inf names its producer as the recorder does (the fixtures of
    tests/diff/fixtures/tinymlp: blocks.1's own code makes the Inf after its last child fc2), checkpoint rows and
    the recorder's detection are marked, pruning is noted, and a snapshot index shows the detection it records."""
    for n in os.listdir(TINYMLP):
        shutil.copy(os.path.join(TINYMLP, n), path(n.replace("_FULL", "")))
    dash = " \u2014 "

    def load_tree(name):
        with open(path(name + ".json"), encoding="utf-8") as f:
            return json.load(f)

    def page(name, *more):
        return page_data(report(name + ".html", path(name + ".json"), *[path(m + ".json") for m in more]))

    # the native tree: the recorder's detection on blocks.1 (produced here, after fc2)
    d = page("native_inf")
    rows_ = rows_by_path(d)
    want = ("first Inf: TinyMLP.blocks.1 outputs, step 0, rank 0 (native_inf.json)" + dash +
            "produced in TinyMLP.blocks.1, in its own code after TinyMLP.blocks.1.fc2 (the recorder's verdict)")
    expect((d.get("first") or {}).get("text") == want, f"native_inf: summary {d.get('first')!r}, expected {want!r}")
    ref = reference_first(load_tree("native_inf"))
    expect(d["first"]["node"] == rows_[ref[0]["module_path"]] and ref[2] == "outputs",
           f"native_inf: first row {d['first']['node']}, the reference walk says {ref[0]['module_path']} {ref[2]}")
    expect(d["first"].get("producer") == rows_["TinyMLP.blocks.1"] == d["trees"][0].get("producer"),
           f"native_inf: producer row {d['first'].get('producer')}, expected {rows_['TinyMLP.blocks.1']}")
    want_det = ("Inf at TinyMLP.blocks.1 outputs, step 0: produced in TinyMLP.blocks.1, in its own code after "
                "TinyMLP.blocks.1.fc2 (the recorder's verdict)")
    expect(d.get("detections") == [{"tree": 0, "node": rows_["TinyMLP.blocks.1"], "text": want_det}],
           f"native_inf: detections {d.get('detections')!r}")
    expect(d["trees"][0]["notes"] == [], f"native_inf: notes {d['trees'][0]['notes']!r}")

    # the writer before (outputs on leaves only, no detection), pruned: blocks.2's inputs carry it from the
    # left-out blocks.1
    d = page("today_inf_pruned")
    want = ("first Inf: TinyMLP.blocks.2 inputs.args[0], step 0, rank 0 (today_inf_pruned.json)" + dash +
            "carried from TinyMLP.blocks.1, which pruning left out of the file (it may also be TinyMLP.blocks.0, in "
            "its own code after TinyMLP.blocks.0.fc2, or TinyMLP, in its own code before TinyMLP.blocks.2)")
    expect((d.get("first") or {}).get("text") == want, f"today_inf_pruned: summary {d.get('first')!r}, expected {want!r}")
    want_note = ("the file was pruned (middle layer blocks left out: TinyMLP.blocks.1): the producer may be in a block "
                 "that is not in the file; write it with tree_options::with_pruning(false)")
    expect(d["trees"][0]["notes"] == [want_note], f"today_inf_pruned: notes {d['trees'][0]['notes']!r}")
    expect(d["first"].get("producer") == -1 and d.get("detections") == [],
           f"today_inf_pruned: producer {d['first'].get('producer')}, detections {d.get('detections')!r}")
    d = page("hf_inf_pruned")
    expect(d["first"]["text"].startswith("first Inf: TinyMLP.blocks.2 inputs.args[0] (hf_inf_pruned.json)" + dash +
                                         "carried from TinyMLP.blocks.1, which pruning left out of the file"),
           f"hf_inf_pruned: summary {d['first']['text']!r}")
    expect(d["trees"][0]["notes"] == [want_note + ' (no nanscope "pruned" key: inferred from the gaps in the block numbers)'],
           f"hf_inf_pruned: notes {d['trees'][0]['notes']!r}")
    # unpruned: blocks.1 records no outputs: its own code after fc2, inferred
    d = page("today_inf")
    want = ("first Inf: TinyMLP.blocks.2 inputs.args[0], step 0, rank 0 (today_inf.json)" + dash +
            "carried from TinyMLP.blocks.1, in its own code after TinyMLP.blocks.1.fc2 (inferred: the file does not "
            "record the outputs of TinyMLP.blocks.1; it may also be TinyMLP, in its own code before TinyMLP.blocks.2)")
    expect(d["first"]["text"] == want, f"today_inf: summary {d['first']['text']!r}, expected {want!r}")
    expect(d["first"].get("producer") == rows_by_path(d)["TinyMLP.blocks.1"], "today_inf: the producer's row")
    # a checkpoint row: its own node, marked; the producer is its module
    d = page("native_cp_inf")
    rows_ = rows_by_path(d)
    cp = rows_.get('TinyMLP.blocks.1 checkpoint "after residual"')
    nodes = d["trees"][0]["nodes"]
    expect(cp is not None and nodes[cp][0] == rows_["TinyMLP.blocks.1"] and nodes[cp][3] == {"checkpoint": "after residual"},
           f"native_cp_inf: no checkpoint row under TinyMLP.blocks.1: {[n[:2] + n[3:] for n in nodes]}")
    want = ('first Inf: TinyMLP.blocks.1 checkpoint "after residual" outputs, step 0, rank 0 (native_cp_inf.json)' +
            dash + 'produced in TinyMLP.blocks.1, in its own code after TinyMLP.blocks.1.fc2, found at its checkpoint '
            '"after residual" (the recorder\'s verdict)')
    expect(d["first"]["text"] == want and d["first"]["node"] == cp, f"native_cp_inf: summary {d['first']!r}")
    expect(d["first"].get("producer") == rows_["TinyMLP.blocks.1"] and d["trees"][0].get("detection") == cp,
           f"native_cp_inf: producer row {d['first'].get('producer')}, detection row {d['trees'][0].get('detection')}")
    # a parameter holding Inf is the producer (a row of role 2)
    d = page("native_wnan")
    rows_ = rows_by_path(d)
    t = d["trees"][0]["nodes"][d["first"]["node"]][2][d["first"]["tensor"]] if d.get("first") else None
    expect(d["first"]["node"] == rows_["TinyMLP.blocks.1.fc2"] and t and t[0] == "parameters.weight" and t[3] == 2 and
           t[5] == 1, f"native_wnan: first tensor {t!r}")
    expect(d["first"]["text"].endswith(dash + "a parameter holding Inf: TinyMLP.blocks.1.fc2 parameters.weight is the "
                                       "producer (it held Inf before the module ran)"), f"native_wnan: {d['first']['text']!r}")
    expect([x["text"] for x in d.get("detections", [])] ==
           ["Inf at TinyMLP.blocks.1.fc2 parameters.weight, step 0: a parameter holding Inf: TinyMLP.blocks.1.fc2 "
            "parameters.weight is the producer (it held Inf before the module ran)"], f"native_wnan: {d.get('detections')!r}")
    # a pass a throwing detection ended
    d = page("native_inf_thrown")
    expect(d["trees"][0]["notes"] == ["the pass ended at the recorder's detection (a throwing policy): the modules after "
                                      "it are not in the file"], f"native_inf_thrown: notes {d['trees'][0]['notes']!r}")
    # two trees: the diff's producer is nanscope-diff's, marked in B's tree (B's recorder names blocks.1, which A
    # left out)
    d = page("native_good_pruned", "native_inf_pruned")
    diff = d.get("diff") or {}
    rows_b = rows_by_path(d, 1)
    expect(diff.get("producer_node") == rows_b["TinyMLP.blocks.1"] and diff.get("producer_module") == "TinyMLP.blocks.1",
           f"diff of the pruned trees: {str(diff)[:400]}")
    expect(any(n.startswith("A was pruned (middle layer blocks left out)") for n in diff.get("notes", [])),
           f"diff of the pruned trees: notes {diff.get('notes')!r}")
    if NANSCOPE_DIFF:
        p = subprocess.run([NANSCOPE_DIFF, "--json", path("native_good_pruned.json"), path("native_inf_pruned.json")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        nd = json.loads(p.stdout)
        expect(diff.get("producer_text") == nd["likely_producer_text"],
               f"diff producer {diff.get('producer_text')!r}, nanscope-diff says {nd['likely_producer_text']!r}")
    # a detection on a node that records no tensor (a hand-made file): named, nothing read out of bounds
    bare = write_json("bare.json", {"module_path": "M", "children": [
        {"module_path": "M.a", "nanscope_detection": {"tensor": "output", "produced_here": True, "after": None}}]})
    d = page_data(report("bare.html", bare))
    want = "detection: M.a (bare.json)" + dash + "produced in M.a, in its own code (the recorder's verdict)"
    expect((d.get("first") or {}).get("text") == want and d["first"].get("tensor") == -1,
           f"a detection on a node without tensors: {d.get('first')!r}, expected {want!r}")
    snapshots()
    real_writer()
    if CHROMIUM:
        producer_page()


def real_writer():
    """The same TinyMLP through the real recorder and tree writer (tests/diff/tinymlp_tree.cpp), and the snapshot
    its detection wrote: the summary, the detection and the diff say what they say on the hand-built trees."""
    if TINYMLP_WRITER is None:
        print("note: no --tinymlp-writer, the trees of the real writer are not checked")
        return
    p = subprocess.run([TINYMLP_WRITER, path("real")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if not expect(p.returncode == 0, f"nanscope_tinymlp_tree: exit {p.returncode}, {p.stderr!r}"):
        return
    full = "TinyMLP_debug_tree_FULL_TENSORS.json"
    dash = " \u2014 "
    for run_, want in (("inf", "first Inf: TinyMLP.blocks.1 outputs, step 0, rank 0 (real/inf/%s)" % full + dash +
                        "produced in TinyMLP.blocks.1, in its own code after TinyMLP.blocks.1.fc2 (the recorder's verdict)"),
                       ("cp_inf", 'first Inf: TinyMLP.blocks.1 checkpoint "after residual" outputs, step 0, rank 0 '
                        '(real/cp_inf/%s)' % full + dash + 'produced in TinyMLP.blocks.1, in its own code after '
                        'TinyMLP.blocks.1.fc2, found at its checkpoint "after residual" (the recorder\'s verdict)'),
                       ("inf_thrown", "first Inf: TinyMLP.blocks.1 outputs, step 0, rank 0 (real/inf_thrown/%s)" % full +
                        dash + "produced in TinyMLP.blocks.1, in its own code after TinyMLP.blocks.1.fc2 (the "
                        "recorder's verdict)")):
        d = page_data(report("real_%s.html" % run_, path(os.path.join("real", run_, full))))
        expect((d.get("first") or {}).get("text") == want, f"real {run_}: summary {d.get('first')!r}, expected {want!r}")
        expect(len(d.get("detections", [])) == 1, f"real {run_}: detections {d.get('detections')!r}")
    d = page_data(report("real_thrown.html", path(os.path.join("real", "inf_thrown", full))))
    expect(d["trees"][0]["notes"] == ["the pass ended at the recorder's detection (a throwing policy): the modules "
                                      "after it are not in the file"], f"real inf_thrown: notes {d['trees'][0]['notes']!r}")
    # the pruned pair: the good run lost blocks.1, the run with the Inf kept it
    a, b = (path(os.path.join("real", r, full)) for r in ("good_pruned", "inf_pruned"))
    d = page_data(report("real_pruned.html", a, b))
    diff = d.get("diff") or {}
    expect(diff.get("producer_node") == rows_by_path(d, 1).get("TinyMLP.blocks.1") and
           any(n.startswith("A was pruned (middle layer blocks left out)") for n in diff.get("notes", [])),
           f"real pruned diff: {str(diff)[:400]}")
    if NANSCOPE_DIFF:
        p = subprocess.run([NANSCOPE_DIFF, "--json", a, b], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        nd = json.loads(p.stdout)
        expect(diff.get("producer_text") == nd["likely_producer_text"] and nd["likely_producer"] == "TinyMLP.blocks.1",
               f"real pruned diff: page {diff.get('producer_text')!r}, nanscope-diff {nd.get('likely_producer_text')!r}")
    # the snapshot the inf run's detection wrote
    idx = [n for n in os.listdir(path(os.path.join("real", "snap"))) if n.endswith("_index.json")]
    if expect(len(idx) == 1, f"real snapshot: {idx!r}"):
        d = page_data(report("real_snap.html", path(os.path.join("real", "snap", idx[0]))))
        want = ("first Inf: blocks.1 output, step 0 (real/snap/%s)" % idx[0] + dash + "produced here: every input and "
                "parameter of blocks.1 (Block) was finite (the recorder's verdict)")
        expect((d.get("first") or {}).get("text") == want, f"real snapshot: summary {d.get('first')!r}, expected {want!r}")
        ts = d["trees"][0]["nodes"][0][2] if d.get("trees") else []
        expect([t[:1] + t[3:7] for t in ts] == [["output", 0, 0, 2, 6], ["input[0]", 1, 0, 0, 0]],
               f"real snapshot: rows {ts!r}")


def snapshots():
    """`nanscope report` on a snapshot's index (recorder_options::snapshot_dir): the detection it records, with the
    counts of the .npy files next to it; files it cannot read are notes, never a hang or an escape from the
    directory."""
    os.makedirs(path("snap"), exist_ok=True)
    inf, nan = float("inf"), float("nan")
    out_v = [1.0, inf, -inf, 2.0, nan, 0.5, inf, -3.0]
    stem = "nanscope_p42_rec1_step3_1"
    write_npy(f"snap/{stem}_0_blocks.1_output.npy", out_v, [2, 4])
    write_npy(f"snap/{stem}_1_blocks.1_input[0].npy", [0.25] * 8, [2, 4])
    write_npy(f"snap/{stem}_2_blocks.1_weight.npy", [0.5, -0.5, 0.125, 1.5], [2, 2])
    index = {"step": 3, "module_path": "blocks.1", "class": "Block", "context": "output", "produced_here": True,
             "files": [{"file": f"{stem}_0_blocks.1_output.npy", "role": "output", "context": "output", "dtype": "f32",
                        "shape": [2, 4], "offending": True},
                       {"file": f"{stem}_1_blocks.1_input[0].npy", "role": "input", "context": "input[0]",
                        "dtype": "f32", "shape": [2, 4], "offending": False},
                       {"file": f"{stem}_2_blocks.1_weight.npy", "role": "parameter", "context": "weight",
                        "dtype": "f32", "shape": [2, 2], "offending": False}]}
    idx = write_json(f"snap/{stem}_index.json", index)
    d = page_data(report("snapshot.html", idx))
    tree = (d.get("trees") or [{}])[0]
    expect(tree.get("kind") == "snapshot", f"snapshot: kind {tree.get('kind')!r}")
    want = (f"first NaN: blocks.1 output, step 3 (snap/{stem}_index.json) \u2014 produced here: every input and "
            "parameter of blocks.1 (Block) was finite (the recorder's verdict)")
    expect((d.get("first") or {}).get("text") == want, f"snapshot: summary {d.get('first')!r}, expected {want!r}")
    ts = tree["nodes"][0][2] if tree.get("nodes") else []
    got = [(t[0], t[3], t[4], t[5], t[6], t[7]) for t in ts]
    counts = lambda v: (sum(math.isnan(x) for x in v), sum(x == inf for x in v), sum(x == -inf for x in v))
    # (|x| max over the non-NaN values, as the tree's abs_max: inf here)
    want_rows = [("output", 0) + counts(out_v) + ("inf",), ("input[0]", 1, 0, 0, 0, 0.25),
                 ("parameters.weight", 2, 0, 0, 0, 1.5)]
    expect(got == want_rows, f"snapshot: rows {got}, expected {want_rows}")
    expect([x["text"] for x in d.get("detections", [])] ==
           ["snapshot of a detection: blocks.1 (Block) output, step 3: produced here: every input and parameter of "
            "blocks.1 (Block) was finite (the recorder's verdict)"], f"snapshot: detections {d.get('detections')!r}")
    # the rank a launcher variable named is in the file name ("nanscope_r3_...")
    ranked = write_json("snap/nanscope_r3_p42_rec1_step3_2_index.json", index)
    d = page_data(report("snapshot_r3.html", ranked))
    expect((d.get("first") or {}).get("text", "").startswith("first NaN: blocks.1 output, step 3, rank 3 ("),
           f"snapshot of rank 3: summary {d.get('first')!r}")
    # more files than are read: one note
    many = write_json("snap/many_index.json", dict(index, files=[dict(index["files"][1], offending=False)] * 300 +
                                                   [index["files"][0]]))
    d = page_data(report("snapshot_many.html", many))
    expect(d["trees"][0]["notes"] == ["the index names 301 files: only the first 256 were read"],
           f"snapshot of 301 files: notes {d['trees'][0]['notes']!r}")
    # arrived already non-finite: only the offending tensor; hostile and unreadable files are notes
    os.mkfifo(path("snap/fifo.npy"))
    os.symlink("/etc/passwd", path("snap/link.npy"))
    write_text("snap/bad.npy", "\x93NUMPY garbage")
    write_npy("snap/ok.npy", [nan, 1.0], [2])
    files = [{"file": "ok.npy", "role": "output", "context": "output", "offending": True}] + [
        {"file": f, "role": "input", "context": "input[%d]" % i} for i, f in
        enumerate(["../escape.npy", "", "fifo.npy", "link.npy", "missing.npy", "bad.npy", "a\u0000b.npy"])]
    idx2 = write_json("snap/carried_index.json", {"step": 4, "module_path": "blocks.2", "class": "Block",
                                                   "context": "output", "produced_here": False, "files": files,
                                                   "note": "the value arrived already non-finite"})
    t0 = time.monotonic()
    d = page_data(report("snapshot2.html", idx2))
    expect(time.monotonic() - t0 < 60, "snapshot with a FIFO: the report took a minute")
    first = (d.get("first") or {}).get("text", "")
    expect(first.endswith("\u2014 it arrived already non-finite: made before blocks.2 (Block) ran (the "
                                       "recorder's verdict)") and first.startswith("first NaN: blocks.2 output"),
           f"snapshot (carried): summary {first!r}")
    notes = d["trees"][0]["notes"]
    for f, why in (("../escape.npy", "not a file name in the index's directory"), ("", "not a file name"),
                   ("fifo.npy", "not a regular file (a pipe)"), ("link.npy", "cannot open: "),
                   ("missing.npy", "cannot open: No such file or directory"), ("bad.npy", "not an .npy file"),
                   ("a\u0000b.npy", "not a file name")):
        expect(any(n.startswith(f"the snapshot's file '{f}' was not read: {why}") for n in notes),
               f"snapshot: no note for {f!r} ({why}): {notes!r}")
    expect("the value arrived already non-finite" in notes, f"snapshot: the index's note is not shown: {notes!r}")
    unknown = [t for t in d["trees"][0]["nodes"][0][2] if t[0] != "output"] if d["trees"][0]["nodes"] else []
    expect(all(t[4:7] == [-2, -2, -2] for t in unknown), f"snapshot: unread files have counts: {unknown!r}")
    # a malformed index is an error naming the key
    for bad, needle in (({"files": 3}, '"files" must be an array'), ({"produced_here": "yes"}, '"produced_here" must be'),
                        ({"files": [{"role": "output"}]}, 'files[0]."file" is missing')):
        b = write_json("snap/bad_index.json", dict(index, **bad))
        rc, so, se = run("report", b, "-o", path("bad.html"))
        expect(rc == 2 and needle in se, f"snapshot index {bad}: exit {rc}, stderr {se!r}")


def producer_page():
    """The page in the browser: checkpoint rows, the producer's and the detection's rows are marked."""
    dom, _ = load(path("native_cp_inf.html"))
    rs = rows(dom)
    cps = [r for r in rs if "checkpoint" in r.classes()]
    expect(len(cps) == 1 and cps[0].attrs.get("data-checkpoint") == "after residual" and "detection" in cps[0].classes(),
           f"checkpoint rows: {[(r.attrs.get('data-path'), r.classes()) for r in cps]}")
    label = [e.text() for e in cps[0].iter() if "label" in e.classes()] if cps else []
    expect(label == ["checkpoint \u201cafter residual\u201d"], f"the checkpoint row's label: {label!r}")
    prod = [r for r in rs if "producer" in r.classes()]
    expect(len(prod) == 1 and prod[0].attrs.get("data-path") == "TinyMLP.blocks.1" and "checkpoint" not in prod[0].classes(),
           f"producer rows: {[(r.attrs.get('data-path'), r.classes()) for r in prod]}")
    name = by_id(dom, "details-name")  # the first NaN/Inf's row is selected at load: the checkpoint's
    expect(name is not None and name.text() == "TinyMLP.blocks.1 checkpoint \u201cafter residual\u201d",
           f"the selected row's details: {name.text() if name else None!r}")
    link = by_id(dom, "producer")
    expect(link is not None and link.text() == "TinyMLP.blocks.1", f"#producer: {link.text() if link else None!r}")
    det = [e for e in dom.iter() if "detection-text" in e.classes()]
    expect(len(det) == 1 and det[0].text().startswith('Inf at TinyMLP.blocks.1 checkpoint "after residual" outputs'),
           f"the summary's detection: {[e.text() for e in det]!r}")
    dom, _ = load(path("snapshot.html"))
    expect(by_id(dom, "first-nan") is not None and by_id(dom, "no-nan") is None,
           "the snapshot's page says there is no NaN or Inf")


GROUPS = {"errors": (group_errors, False), "warnings": (group_warnings, False), "browser": (group_browser, True), "hostile": (group_hostile, True),
          "history": (group_history, True), "large": (group_large, True), "depth": (group_depth, False),
          "producer": (group_producer, False)}


def main():
    global NANSCOPE, NANSCOPE_DIFF, CHROMIUM, WORK, QUICK, SCREENSHOT, FSYNC_SHIM, DEEP_WRITER, TINYMLP_WRITER
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanscope", required=True)
    ap.add_argument("--nanscope-diff")
    ap.add_argument("--chromium")
    ap.add_argument("--work", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--screenshot")
    ap.add_argument("--fsync-shim")
    ap.add_argument("--deep-tree-writer")
    ap.add_argument("--tinymlp-writer")
    ap.add_argument("--group", action="append")
    a = ap.parse_args()
    NANSCOPE, QUICK, SCREENSHOT = os.path.abspath(a.nanscope), a.quick, a.screenshot
    NANSCOPE_DIFF = os.path.abspath(a.nanscope_diff) if a.nanscope_diff else None
    FSYNC_SHIM = os.path.abspath(a.fsync_shim) if a.fsync_shim else None
    DEEP_WRITER = os.path.abspath(a.deep_tree_writer) if a.deep_tree_writer else None
    TINYMLP_WRITER = os.path.abspath(a.tinymlp_writer) if a.tinymlp_writer else None
    CHROMIUM = a.chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if CHROMIUM and not os.access(CHROMIUM, os.X_OK):
        CHROMIUM = None
    groups = a.group or list(GROUPS)
    needs_browser = any(GROUPS[g][1] for g in groups)
    if needs_browser and not CHROMIUM:
        print("SKIPPED: no chromium installed (the optional package of tools/install-deps.sh)")
        return SKIP
    for g in groups:
        WORK = os.path.join(a.work, g)
        shutil.rmtree(WORK, ignore_errors=True)
        os.makedirs(WORK)
        print(f"--- {g}")
        GROUPS[g][0]()
    print(f"{CHECKS[0]} checks, {len(FAILURES)} failed")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
