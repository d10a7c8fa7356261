#!/usr/bin/env python3
"""Independent reference for nanscope's torch_repr printer (include/nanscope/detail/torch_print.hpp).

Re-implements, in Python with numpy, the rules PyTorch's torch/_tensor_str.py applies under
torch.set_printoptions(sci_mode=True, linewidth=120) (precision 4, threshold 1000, edgeitems 3), and torch's
reduction semantics for mean/std/min/max, then compares with the text nanscope_tree_repr_cases wrote.
Number formatting is Python's own format(), which is what torch uses.

    torch_repr_ref.py <cases binary> <work dir>
"""
import glob
import math
import os
import subprocess
import sys

import numpy as np

PREC, THRESH, EDGE, WIDTH = 4, 1000, 3, 120
FLOAT_TYPES = {"torch.float64", "torch.float32", "torch.float16", "torch.bfloat16"}


class Formatter:
    def __init__(self, values, floating):
        self.floating = floating
        self.width = 1
        self.int_style = False
        if not floating:
            for v in values:
                self.width = max(self.width, len(str(v)))
            return
        nz = [v for v in values if math.isfinite(v) and v != 0]
        if not nz:
            # torch's _Formatter returns here, before `self.sci_mode = PRINT_OPTS.sci_mode`: integer style
            self.int_style = True
            return
        mags = [abs(v) for v in nz]
        lo, hi = min(mags), max(mags)
        if all(v == math.ceil(v) for v in nz):
            if hi / lo > 1000.0 or hi > 1.0e8:
                self.width = max(len("{:.{}e}".format(v, PREC)) for v in nz)
            else:
                self.width = max(len("{:.0f}".format(v)) + 1 for v in nz)
        elif hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4:
            self.width = max(len("{:.{}e}".format(v, PREC)) for v in nz)
        else:
            self.width = max(len("{:.{}f}".format(v, PREC)) for v in nz)

    def format(self, v):
        if self.floating and self.int_style:
            s = "{:.0f}".format(v) + ("." if math.isfinite(v) else "")
        else:
            s = "{:{}.{}e}".format(v, self.width, PREC) if self.floating else str(v)
        return " " * (self.width - len(s)) + s


def summarized(a):
    if a.ndim == 0:
        return a.reshape(1)
    if a.ndim == 1:
        return np.concatenate([a[:EDGE], a[-EDGE:]]) if a.shape[0] > 2 * EDGE else a
    rows = list(a[:EDGE]) + list(a[-EDGE:]) if a.shape[0] > 2 * EDGE else list(a)
    return np.concatenate([summarized(r).reshape(-1) for r in rows])


def vector_str(a, indent, summarize, fm):
    per_line = max(1, int(math.floor((WIDTH - indent) / (fm.width + 2))))
    if summarize and a.shape[0] > 2 * EDGE:
        data = [fm.format(v) for v in a[:EDGE].tolist()] + [" ..."] + [fm.format(v) for v in a[-EDGE:].tolist()]
    else:
        data = [fm.format(v) for v in a.tolist()]
    lines = [", ".join(data[i:i + per_line]) for i in range(0, len(data), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def tensor_str(a, indent, summarize, fm):
    if a.ndim == 0:
        return fm.format(a.item())
    if a.ndim == 1:
        return vector_str(a, indent, summarize, fm)
    if summarize and a.shape[0] > 2 * EDGE:
        slices = [tensor_str(a[i], indent + 1, summarize, fm) for i in range(EDGE)] + ["..."] + \
                 [tensor_str(a[i], indent + 1, summarize, fm) for i in range(a.shape[0] - EDGE, a.shape[0])]
    else:
        slices = [tensor_str(a[i], indent + 1, summarize, fm) for i in range(a.shape[0])]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(slices) + "]"


def add_suffixes(s, suffixes, indent):
    out = [s]
    last = len(s) - s.rfind("\n") + 1
    for suf in suffixes:
        if last + len(suf) + 2 > WIDTH:
            out.append(",\n" + " " * indent + suf)
            last = indent + len(suf)
        else:
            out.append(", " + suf)
            last += len(suf) + 2
    out.append(")")
    return "".join(out)


def tensor_repr(a, dtype_name):
    prefix, indent, suffixes = "tensor(", 7, []
    if a.size == 0:
        if a.ndim != 1:
            suffixes.append("size=" + str(tuple(a.shape)))
        if dtype_name != "torch.float32":
            suffixes.append("dtype=" + dtype_name)
        body = "[]"
    else:
        if dtype_name not in ("torch.float32", "torch.int64", "torch.bool"):
            suffixes.append("dtype=" + dtype_name)
        floating = dtype_name in FLOAT_TYPES
        if floating:
            a = a.astype(np.float64)
        summarize = a.size > THRESH
        fm = Formatter((summarized(a) if summarize else a.reshape(-1)).tolist(), floating)
        body = tensor_str(a, indent, summarize, fm)
    return add_suffixes(prefix + body, suffixes, indent)


def round_bf16(x):
    """Round a double to bfloat16 (nearest even), normal range and specials."""
    if not math.isfinite(x) or x == 0:
        return x
    m, e = math.frexp(abs(x))  # abs(x) = m * 2**e, m in [0.5, 1)
    q = m * 256  # 8 significant bits
    r = math.floor(q)
    frac = q - r
    if frac > 0.5 or (frac == 0.5 and r % 2 == 1):
        r += 1
    y = math.ldexp(r / 256, e)
    if y >= 2.0 ** 128 * (1 - 2.0 ** -9):
        y = math.inf
    return math.copysign(y, x)


def round_to(x, dtype_name):
    if dtype_name == "torch.float32":
        return float(np.float32(x))
    if dtype_name == "torch.float16":
        return float(np.float16(x))
    if dtype_name == "torch.bfloat16":
        return round_bf16(x)
    return x


def torch_stats(a, dtype_name):
    a = a.astype(np.float64).reshape(-1)
    nan = float("nan")
    if a.size == 0 or np.isnan(a).any():
        return [nan] * 4
    pinf, ninf = bool((a == np.inf).any()), bool((a == -np.inf).any())
    finite = a[np.isfinite(a)]
    # nanscope treats -0.0 as zero (docs/formats.md, numeric conventions): a min/max that is a zero prints as +0
    lo, hi = float(a.min()) + 0.0, float(a.max()) + 0.0
    if pinf and ninf:
        mean, std = nan, nan
    elif pinf:
        mean, std = math.inf, nan
    elif ninf:
        mean, std = -math.inf, nan
    else:
        mean = float(np.mean(finite, dtype=np.float64))
        std = float(np.std(finite, ddof=1)) if finite.size > 1 else nan
    return [round_to(mean, dtype_name), round_to(std, dtype_name), lo, hi]


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    for f in glob.glob(os.path.join(work, "case_*")):
        os.remove(f)
    subprocess.run([binary, work], check=True)
    failures, checked = 0, 0
    for txt in sorted(glob.glob(os.path.join(work, "case_*.txt"))):
        with open(txt, encoding="ascii") as f:
            content = f.read()
        dtype_name, rest = content.split("\n", 1)
        ours_repr, ours_stats = rest.split("\n--stats--\n")
        a = np.load(txt[:-4] + ".npy")
        want = tensor_repr(a, dtype_name)
        checked += 1
        if want != ours_repr:
            failures += 1
            print(f"MISMATCH {txt} ({dtype_name}, shape {a.shape}):\n--- reference\n{want}\n--- nanscope\n{ours_repr}\n")
        if dtype_name in FLOAT_TYPES:
            stats = torch_stats(a, dtype_name)
            suffix = "" if dtype_name == "torch.float32" else ", dtype=" + dtype_name
            # a 0-d tensor formats through the same Formatter as any other
            want_stats = [tensor_repr(np.array(s, dtype=np.float64), "torch.float32")[:-1] + suffix + ")" for s in stats]
            got = ours_stats.strip("\n").split("\n")
            checked += 1
            if got != want_stats:
                failures += 1
                print(f"STATS MISMATCH {txt}: reference {want_stats} nanscope {got}")
    print(f"torch_repr reference: {checked} comparisons, {failures} mismatches")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
