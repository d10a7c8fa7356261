#!/usr/bin/env python3
"""Checks the trees nanscope_tree_cases writes, with Python's own json module as the reference:

1. every file is byte-identical to json.dumps(json.load(file), indent=2) — the layout, escaping (ensure_ascii),
   key order and number spelling of HuggingFace's json.dump;
2. SUMMARY equals FULL_TENSORS with every "value" removed (HuggingFace's definition);
3. the pruned tree equals the unpruned one pruned by an independent implementation of the Python tool's rule
   (its regex, evaluated by Python's re), and pruning actually removed something;
4. schema: node keys and tensor keys in HuggingFace's order, outputs only on leaves, module paths prefixed with
   the root's, extras only under nanscope's own keys.

    tree_check.py <cases binary> <work dir>
"""
import json
import os
import re
import shutil
import subprocess
import sys

LAYER = re.compile(r"(.*)\.(\d+)$")
NODE_KEYS = ["module_path", "nanscope_checkpoint", "inputs", "outputs", "children", "parameters", "source",
             "nanscope_detection", "nanscope", "nanscope_pair"]
TENSOR_KEYS = ["shape", "dtype", "value", "mean", "std", "min", "max", "health", "abs_max", "abs_min_nonzero",
               "headroom_bits", "first_nonfinite", "nanscope_segments"]
errors = []


def fail(msg):
    errors.append(msg)
    print("FAIL:", msg)


def is_layer_block(node):
    m = LAYER.match(node.get("module_path", ""))
    if not m or not node.get("children"):
        return False
    return any("." + m.group(2) + "." in c.get("module_path", "") for c in node["children"])


def holds_nonfinite(x):
    if isinstance(x, dict):
        h = x.get("health")
        if isinstance(h, dict) and (h.get("nan", 0) or h.get("pos_inf", 0) or h.get("neg_inf", 0)):
            return True
        return any(holds_nonfinite(v) for v in x.values())
    if isinstance(x, list):
        return any(holds_nonfinite(v) for v in x)
    return False


def has_evidence(node):
    """The native writer's rule (docs/tree.md, "Pruning keeps the evidence"): a block holding a NaN/Inf in any
    recorded tensor, an early warning or the recorder's detection, here or below, is never dropped."""
    if "nanscope_detection" in node or node.get("nanscope", {}).get("warnings"):
        return True
    if any(holds_nonfinite(node.get(k)) for k in ("inputs", "outputs", "parameters")):
        return True
    return any(has_evidence(c) for c in node.get("children", []))


def prune(node, extras):
    kids = node.get("children")
    if not kids:
        return
    blocks = [i for i, c in enumerate(kids) if is_layer_block(c)]
    if len(blocks) > 2:
        drop = set(i for i in blocks[1:-1] if not (extras and has_evidence(kids[i])))
        node["children"] = [c for i, c in enumerate(kids) if i not in drop]
    for c in node["children"]:
        prune(c, extras)


def strip_values(x):
    if isinstance(x, dict):
        return {k: strip_values(v) for k, v in x.items() if k != "value"}
    if isinstance(x, list):
        return [strip_values(v) for v in x]
    return x


def in_order(keys, order, where):
    pos = [order.index(k) if k in order else -1 for k in keys]
    if -1 in pos or pos != sorted(pos):
        fail(f"{where}: keys {keys} not in the order {order}")


def check_io(io, where):
    if isinstance(io, list):
        for i, x in enumerate(io):
            check_io(x, f"{where}[{i}]")
    elif isinstance(io, dict) and "shape" in io:
        in_order(list(io.keys()), TENSOR_KEYS, where)
    elif isinstance(io, dict):
        for k, v in io.items():
            check_io(v, f"{where}.{k}")
    elif not (isinstance(io, str) or io is None):
        fail(f"{where}: unexpected IO {io!r}")


def check_node(node, root_path, where, is_root):
    in_order(list(node.keys()), NODE_KEYS, where)
    path = node.get("module_path")
    if not isinstance(path, str) or not (path == root_path or path.startswith(root_path + ".")):
        fail(f"{where}: module_path {path!r} does not start with {root_path!r}")
    inputs = node.get("inputs")
    if is_root:
        if list(inputs.keys()) != ["args", "kwargs"]:
            fail(f"{where}: root inputs keys {list(inputs.keys())}")
    elif not isinstance(inputs, dict) or any(k not in ("args", "kwargs") for k in inputs) or \
            any(not v for v in inputs.values()):
        fail(f"{where}: inputs {inputs!r}")
    check_io(inputs, where + ".inputs")
    if node.get("children"):
        if "outputs" in node:
            fail(f"{where}: a node with children has outputs")
        for i, c in enumerate(node["children"]):
            check_node(c, root_path, f"{where}.children[{i}]", False)
    else:
        if "children" in node:
            fail(f"{where}: empty children list written")
        if not is_root and "outputs" not in node:
            fail(f"{where}: leaf without outputs")
        check_io(node.get("outputs"), where + ".outputs")


def load(path):
    with open(path, encoding="ascii") as f:  # ensure_ascii: pure ASCII
        text = f.read()
    data = json.loads(text)
    again = json.dumps(data, indent=2)
    if again != text:
        i = next((k for k in range(min(len(text), len(again))) if text[k] != again[k]), min(len(text), len(again)))
        fail(f"{path}: not byte-identical to json.dumps(indent=2) at offset {i}: "
             f"ours {text[max(0, i - 60):i + 60]!r} python {again[max(0, i - 60):i + 60]!r}")
    return data


def count(node):
    return 1 + sum(count(c) for c in node.get("children", []))


def main():
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    subprocess.run([binary, work], check=True)
    trees = {}
    for style in ("torch_repr", "numeric"):
        for mode in ("pruned", "unpruned"):
            d = os.path.join(work, f"{style}_{mode}")
            full = load(os.path.join(d, "TinyModel_debug_tree_FULL_TENSORS.json"))
            summary = load(os.path.join(d, "TinyModel_debug_tree_SUMMARY.json"))
            if strip_values(full) != summary:
                fail(f"{d}: SUMMARY is not FULL_TENSORS without values")
            if "value" not in json.dumps(full):
                fail(f"{d}: FULL_TENSORS has no values")
            check_node(full, "TinyModel", f"{d}:root", True)
            if full["nanscope"]["style"] != style or full["nanscope"]["pruned"] != (mode == "pruned"):
                fail(f"{d}: nanscope extras {full['nanscope']}")
            if list(full.keys())[-1] != "nanscope_pair" or full["nanscope_pair"] != summary["nanscope_pair"]:
                fail(f"{d}: nanscope_pair missing, not last, or different in SUMMARY and FULL_TENSORS")
            trees[(style, mode)] = full
    for style in ("torch_repr", "numeric"):
        unpruned, pruned = trees[(style, "unpruned")], trees[(style, "pruned")]
        reference = json.loads(json.dumps(unpruned))
        prune(reference, True)
        # the root's own nanscope object differs on purpose (its "pruned" flag and the recorder's step), and so
        # does the pair id (another writer)
        reference.pop("nanscope")
        reference.pop("nanscope_pair")
        pruned = {k: v for k, v in pruned.items() if k not in ("nanscope", "nanscope_pair")}
        if reference != pruned:
            fail(f"{style}: the streamed pruning differs from the Python rule applied to the unpruned tree")
        if count(pruned) >= count(unpruned):
            fail(f"{style}: pruning removed nothing ({count(pruned)} vs {count(unpruned)} nodes)")
        print(f"{style}: {count(unpruned)} nodes unpruned, {count(pruned)} pruned")
    names = [c["module_path"] for c in trees[("numeric", "unpruned")]["children"]]
    for expected in ["TinyModel.ctl" + "".join(chr(c) for c in range(1, 32)) + "\x7f", "TinyModel.q\"uo\\te'",
                     "TinyModel.caf\u00e9 \u20ac \U0001F600", "TinyModel.x.9\n",
                     "TinyModel." + b"bad\xff\xfe utf8 \xc0\x80 \xed\xa0\x80 \xe2\x82".decode("utf-8", "replace")]:
        if expected not in names:
            fail(f"hostile name {expected!r} not found in {[n[:40] for n in names]}")
    # invalid UTF-8: one U+FFFD per maximal subpart, as Python's decode("utf-8", "replace")
    with open(os.path.join(work, "utf8_names.bin"), "rb") as f:
        raw = f.read()
    expected, i = [], 0
    while i < len(raw):
        n = raw[i]
        expected.append("TinyModel.utf8." + raw[i + 1:i + 1 + n].decode("utf-8", "replace"))
        i += 1 + n
    utf8 = next(c for c in trees[("numeric", "unpruned")]["children"] if c["module_path"] == "TinyModel.utf8")
    got = [c["module_path"] for c in utf8["children"]]
    if got != expected:
        bad = [(e, g) for e, g in zip(expected, got) if e != g]
        fail(f"{len(bad)} of {len(expected)} invalid-UTF-8 names differ from Python's decoding, e.g. {bad[:3]!r}")
    print(f"utf8: {len(expected)} random byte-string names decoded as Python does")
    print(f"tree_check: {len(errors)} failures")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
