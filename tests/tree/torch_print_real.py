#!/usr/bin/env python3
"""Compares the layer tree's torch-style strings with PyTorch's own printing (needs python3-torch).

nanscope_tree_torch_cases writes a tree (FULL_TENSORS) whose child i received case i, an at::Tensor recorded
through the LibTorch adapter, and case_<i>.npy with its values. For every case this script rebuilds the tensor
in PyTorch and checks, under torch.set_printoptions(sci_mode=True, linewidth=120) as HuggingFace's
model_addition_debugger sets it:
  shape == repr(t.shape), dtype == repr(t.dtype), value == str(t).split("\\n"),
  mean/std/min/max == repr(t.mean()) / repr(t.std()) / repr(t.min()) / repr(t.max())   (float16/32, bfloat16)
byte for byte. One documented difference is normalised: nanscope counts -0.0 as a zero, so a min/max that is a
negative zero prints as "0." (torch: "-0.").

Exits 77 (CTest: skipped) with "skipped: python3-torch missing" when `import torch` fails.

    torch_print_real.py <cases binary> <work dir>
"""
import glob
import json
import os
import subprocess
import sys

try:
    import torch
except ImportError:
    print("skipped: python3-torch missing")
    sys.exit(77)
import numpy as np

DTYPES = {"torch.float64": torch.float64, "torch.float32": torch.float32, "torch.float16": torch.float16,
          "torch.bfloat16": torch.bfloat16, "torch.int64": torch.int64, "torch.bool": torch.bool}


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    for f in glob.glob(os.path.join(work, "*")):
        os.remove(f)
    subprocess.run([binary, work], check=True)
    full = glob.glob(os.path.join(work, "*_debug_tree_FULL_TENSORS.json"))
    if len(full) != 1:
        print("FAIL: expected one FULL_TENSORS tree, found", full)
        return 1
    with open(full[0], encoding="utf-8") as f:
        root = json.load(f)
    torch.set_printoptions(sci_mode=True, linewidth=120)
    children = root.get("children", [])
    n_cases = len(glob.glob(os.path.join(work, "case_*.npy")))
    failures, checked = 0, 0
    if len(children) != n_cases or n_cases == 0:
        print(f"FAIL: {len(children)} children for {n_cases} cases")
        return 1
    for i, child in enumerate(children):
        io = child["inputs"]["args"][0]
        t = torch.from_numpy(np.load(os.path.join(work, f"case_{i}.npy"))).to(DTYPES[io["dtype"]])
        want = {"shape": repr(t.shape), "dtype": repr(t.dtype), "value": str(t).split("\n")}
        if t.dtype in (torch.float16, torch.float32, torch.bfloat16):
            want["mean"] = repr(t.mean())
            want["std"] = repr(t.std())
            want["min"] = repr(t.min()).replace("tensor(-0.", "tensor(0.")
            want["max"] = repr(t.max()).replace("tensor(-0.", "tensor(0.")
        for key, w in want.items():
            checked += 1
            if io.get(key) != w:
                failures += 1
                print(f"MISMATCH case {i} ({child['module_path']}) {key}:\n  torch:    {w!r}\n  nanscope: {io.get(key)!r}")
        extra = {"mean", "std", "min", "max"} & (set(io) - set(want))
        if extra:
            failures += 1
            print(f"MISMATCH case {i}: statistics {sorted(extra)} written for {io['dtype']}")
    print(f"torch print (real PyTorch {torch.__version__}): {n_cases} tensors, {checked} strings, {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
