#!/usr/bin/env python3
"""Tests of `nanscope scan` on packed block-scaled safetensors (F4, F6_E2M3, F6_E3M2, F8 + F8_E8M0 scales).

The files are written here with struct (no numpy): random element codes packed as a little-endian bit stream (element
i in bits i*w .. i*w+w-1, bit q of the stream being bit q % 8 of byte q // 8), scales in their own tensors. The
expected counts come from a decoder written here from the OCP MX v1.0 / NVFP4 definitions (sign, exponent field,
mantissa, bias; E4M3's only NaN S.1111.111; E5M2 IEEE-like; E8M0 2^(c-127), 0xFF NaN). Groups: basic (pairing by
the naming conventions, NaN scales, NVFP4 with its per-tensor scale, MXFP6, MXFP8, unpaired E8M0 and F4, per-expert
totals, text and JSON), rules (--scales), hostile (mismatched scales, truncated data, byte counts that do not fit,
unknown dtype strings, a truncated file: exit 2 with the tensor named, never a crash).

  packed_test.py --nanscope PATH --work DIR --group basic|rules|hostile
"""
import argparse
import json
import math
import os
import random
import struct
import subprocess
import sys

FAILURES = []


def expect(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL: " + msg)
    return cond


NANSCOPE = None


def run(*args):
    p = subprocess.run([NANSCOPE] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    out, err = p.stdout.decode("utf-8"), p.stderr.decode("utf-8", "replace")
    for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Segmentation", "Aborted"):
        expect(bad not in err, "sanitizer/crash report: %s" % err)
    return p.returncode, out, err


def write_st(path, tensors):
    header, data = {}, b""
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


# ----------------------------------------------------------------------------------------------------------------
# Reference formats
# ----------------------------------------------------------------------------------------------------------------
FMT = {"e2m1": (4, 2, 1, 1), "e2m3": (6, 2, 3, 1), "e3m2": (6, 3, 2, 3), "e4m3": (8, 4, 3, 7), "e5m2": (8, 5, 2, 15)}


def value(fmt, c):
    w, E, M, bias = FMT[fmt]
    s = -1.0 if (c >> (w - 1)) & 1 else 1.0
    e, m = (c >> M) & ((1 << E) - 1), c & ((1 << M) - 1)
    if fmt == "e5m2" and e == 31:
        return s * math.inf if m == 0 else math.nan
    if fmt == "e4m3" and e == 15 and m == 7:
        return math.nan
    if e == 0:
        return s * math.ldexp(m, 1 - bias - M)
    return s * math.ldexp((1 << M) + m, e - bias - M)


def e8m0(c):
    return math.nan if c == 255 else math.ldexp(1.0, c - 127)


def pack(codes, w):
    nbits = len(codes) * w
    out = bytearray((nbits + 7) // 8)
    for i, c in enumerate(codes):
        for k in range(w):
            if (c >> k) & 1:
                q = i * w + k
                out[q // 8] |= 1 << (q % 8)
    return bytes(out)


class Ref:
    def __init__(self):
        self.nan = self.pinf = self.ninf = self.neg = self.zero = self.pos = 0
        self.amax = None
        self.first = None
        self.nan_scales = self.blocks = self.zero_blocks = 0
        self.mags = []


def reference(fmt, codes, rows, L, scales, B, scale_kind, ts=1.0):
    r = Ref()
    nb = (L + B - 1) // B
    for row in range(rows):
        for j in range(nb):
            s = scales[row * nb + j] if scales is not None else 127
            sv = e8m0(s) if scale_kind == "e8m0" else value("e4m3", s) * ts
            r.blocks += 1
            if math.isnan(sv):
                r.nan_scales += 1
            allzero = True
            for i in range(j * B, min(L, (j + 1) * B)):
                flat = row * L + i
                e = value(fmt, codes[flat])
                if e != 0 or math.isnan(e):
                    allzero = False
                x = e * sv
                if math.isnan(x) or math.isinf(x):
                    if r.first is None:
                        r.first = flat
                    if math.isnan(x):
                        r.nan += 1
                    elif x > 0:
                        r.pinf += 1
                    else:
                        r.ninf += 1
                    continue
                if x == 0:
                    r.zero += 1
                elif x < 0:
                    r.neg += 1
                else:
                    r.pos += 1
                r.amax = abs(x) if r.amax is None else max(r.amax, abs(x))
                r.mags.append(abs(x))
            if allzero and not math.isnan(sv):
                r.zero_blocks += 1
    return r


def check_obj(o, ref, label):
    expect(o["nan"] == ref.nan and o["pos_inf"] == ref.pinf and o["neg_inf"] == ref.ninf,
           "%s: nan/inf %r %r %r, expected %d %d %d" % (label, o["nan"], o["pos_inf"], o["neg_inf"], ref.nan, ref.pinf, ref.ninf))
    expect(o["negative"] == ref.neg and o["zero"] == ref.zero and o["positive"] == ref.pos,
           "%s: neg/zero/pos %r %r %r, expected %d %d %d" % (label, o["negative"], o["zero"], o["positive"], ref.neg, ref.zero, ref.pos))
    expect(o["abs_max"] == ref.amax, "%s: abs_max %r, expected %r" % (label, o["abs_max"], ref.amax))
    expect(o["first_nonfinite"] == ref.first, "%s: first_nonfinite %r, expected %r" % (label, o["first_nonfinite"], ref.first))
    # overflow counts as nanscope::margins defines them: f16 |x| >= 65520, e4m3fn |x| > 464, e5m2 |x| >= 61440
    for fmt, bound, strict in (("f16", 65520.0, False), ("e4m3fn", 464.0, True), ("e5m2", 61440.0, False)):
        want = sum(1 for a in ref.mags if a > bound or (not strict and a == bound))
        expect(o["formats"][fmt]["overflow"] == want, "%s: %s overflow %r, expected %d" % (label, fmt, o["formats"][fmt]["overflow"], want))
    p = o.get("packed")
    if expect(p is not None, "%s: no packed object" % label) and "blocks" in p:
        expect(p["blocks"] == ref.blocks and p["nan_scales"] == ref.nan_scales and p["zero_blocks"] == ref.zero_blocks,
               "%s: blocks %r nan_scales %r zero_blocks %r, expected %d %d %d" % (label, p["blocks"], p["nan_scales"],
                                                                                 p["zero_blocks"], ref.blocks, ref.nan_scales, ref.zero_blocks))


def rand_codes(rng, n, w, zero_first=0):
    return [0 if i < zero_first else rng.randrange(1 << w) for i in range(n)]


def group_basic(work):
    rng = random.Random(33)
    tensors, refs = [], {}
    # MoE MXFP4: experts 0..2, F4 [4, 64] + F8_E8M0 [4, 2]; expert 1 has a NaN scale, expert 2 a zero block
    for ex in range(3):
        name = "model.layers.0.mlp.experts.%d.down_proj.weight" % ex
        codes = rand_codes(rng, 4 * 64, 4, zero_first=32 if ex == 2 else 0)
        scales = [rng.randrange(120, 135) for _ in range(8)]
        if ex == 1:
            scales[5] = 255
        tensors += [(name, "F4", [4, 64], pack(codes, 4)), (name + "_scale", "F8_E8M0", [4, 2], bytes(scales))]
        refs[name] = reference("e2m1", codes, 4, 64, scales, 32, "e8m0")
    # NVFP4: F4 [2, 40] (a partial block of 8) + F8_E4M3 [2, 3] + F32 per-tensor scale
    codes = rand_codes(rng, 80, 4)
    sc = [rng.randrange(0x08, 0x70) for _ in range(6)]
    tensors += [("nv.weight", "F4", [2, 40], pack(codes, 4)), ("nv.weight_scale", "F8_E4M3", [2, 3], bytes(sc)),
                ("nv.weight_scale_2", "F32", [], struct.pack("<f", 0.375))]
    refs["nv.weight"] = reference("e2m1", codes, 2, 40, sc, 16, "e4m3", 0.375)
    # MXFP6 both kinds, [3, 48] (a partial block of 16), scales named .scales
    for dt, fmt in (("F6_E2M3", "e2m3"), ("F6_E3M2", "e3m2")):
        codes = rand_codes(rng, 3 * 48, 6)
        sc = [rng.randrange(100, 140) for _ in range(6)]
        tensors += [("six_%s" % fmt, dt, [3, 48], pack(codes, 6)), ("six_%s.scales" % fmt, "F8_E8M0", [3, 2], bytes(sc))]
        refs["six_%s" % fmt] = reference(fmt, codes, 3, 48, sc, 32, "e8m0")
    # MXFP8 E4M3 with a NaN code; E5M2 with an infinity
    for dt, fmt, bad in (("F8_E4M3", "e4m3", 0x7F), ("F8_E5M2", "e5m2", 0xFC)):
        codes = [rng.randrange(0, 0x70) for _ in range(64)]
        codes[37] = bad
        sc = [127, 130]
        tensors += [("mx8_%s.weight" % fmt, dt, [64], bytes(codes)), ("mx8_%s.weight_scale" % fmt, "F8_E8M0", [2], bytes(sc))]
        refs["mx8_%s.weight" % fmt] = reference(fmt, codes, 1, 64, sc, 32, "e8m0")
    # gpt-oss style: U8 "_blocks" [2, 3, 16] (a block of 32 E2M1 codes in 16 bytes) + U8 "_scales" [2, 3]
    codes = rand_codes(rng, 2 * 3 * 32, 4)
    sc = [rng.randrange(120, 130) for _ in range(6)]
    sc[4] = 255
    tensors += [("model.layers.1.mlp.experts.gate_up_proj_blocks", "U8", [2, 3, 16], pack(codes, 4)),
                ("model.layers.1.mlp.experts.gate_up_proj_scales", "U8", [2, 3], bytes(sc))]
    refs["model.layers.1.mlp.experts.gate_up_proj_blocks"] = reference("e2m1", codes, 6, 32, sc, 32, "e8m0")
    # an E8M0 tensor alone, an F4 tensor without scales, an ordinary F32 one
    tensors += [("lonely", "F8_E8M0", [3], bytes([127, 255, 131])), ("raw", "F4", [8], pack([1, 2, 3, 4, 5, 6, 7, 15], 4)),
                ("plain", "F32", [2], struct.pack("<2f", 1.0, -2.0))]
    path = os.path.join(work, "packed.safetensors")
    write_st(path, tensors)

    rc, out, err = run("scan", "--json", path)
    expect(rc == 1, "basic: exit %d, expected 1 (NaN scales / NaN codes)\n%s" % (rc, err))
    objs = [json.loads(l) for l in out.splitlines()]
    by = {o["name"]: o for o in objs if o["kind"] == "tensor"}
    for scale in ("_scale", ".scales", ".weight_scale"):
        expect(not any(n.endswith(scale) and n != "nv.weight_scale_2" for n in by), "basic: a paired scale tensor reported alone: %r" % sorted(by))
    for name, ref in refs.items():
        if expect(name in by, "basic: no object for %r" % name):
            check_obj(by[name], ref, name)
    expect(by["model.layers.0.mlp.experts.1.down_proj.weight"]["dtype"] == "mxfp4", "basic: dtype of an MXFP4 weight")
    expect(by["model.layers.0.mlp.experts.1.down_proj.weight"]["expert"] == 1, "basic: expert index")
    expect(by["nv.weight"]["dtype"] == "nvfp4" and by["nv.weight"]["packed"]["tensor_scale"] == 0.375
           and by["nv.weight"]["packed"]["tensor_scale_name"] == "nv.weight_scale_2", "basic: NVFP4 %r" % by["nv.weight"])
    expect(by["six_e2m3"]["dtype"] == "mxfp6_e2m3" and by["mx8_e5m2.weight"]["dtype"] == "mxfp8_e5m2", "basic: MXFP6/8 dtypes")
    expect(by["mx8_e5m2.weight"]["status"] == "nonfinite" and by["mx8_e4m3.weight"]["status"] == "nonfinite", "basic: fp8 NaN/Inf codes")
    g = by.get("model.layers.1.mlp.experts.gate_up_proj_blocks", {})
    expect(g.get("dtype") == "mxfp4" and g.get("shape") == [2, 3, 32] and g.get("count") == 192 and g.get("file_dtype") == "U8",
           "basic: U8 blocks %r" % g)
    lon = by.get("lonely", {})
    expect(lon.get("dtype") == "e8m0" and lon.get("nan") == 1 and lon.get("first_nonfinite") == 1 and lon.get("abs_max") == 16.0,
           "basic: E8M0 tensor alone %r" % lon)
    raw = by.get("raw", {})
    expect(raw.get("dtype") == "e2m1" and raw.get("abs_max") == 6.0 and raw.get("negative") == 1, "basic: unscaled F4 %r" % raw)
    expect("tensor 'raw': F4 without a scale tensor" in err, "basic: no warning for the unscaled F4:\n%s" % err)
    experts = [o for o in objs if o["kind"] == "expert"]
    expect([e["expert"] for e in experts] == [0, 1, 2], "basic: expert objects %r" % experts)
    if len(experts) == 3:
        expect(experts[1]["nan_scales"] == 1 and experts[1]["status"] == "nonfinite" and experts[0]["status"] == "ok",
               "basic: expert 1 %r" % experts[1])
        expect(experts[1]["nan"] == refs["model.layers.0.mlp.experts.1.down_proj.weight"].nan, "basic: expert 1 nan count")
    summary = objs[-1]
    expect(summary["kind"] == "summary" and summary["exit_code"] == 1 and summary["errors"] == 0, "basic: summary %r" % summary)

    # `nanscope report` (when this build has it) reads the output, expert objects included
    if run("report", "--help")[0] == 0:
        jl = os.path.join(work, "packed.jsonl")
        with open(jl, "w") as f:
            f.write(out)
        rcr, outr, errr = run("report", jl, "-o", os.path.join(work, "packed.html"))
        expect(rcr == 0, "basic: nanscope report on the packed scan: rc %d %s" % (rcr, errr))
    rc2, out2, err2 = run("scan", path)
    expect(rc2 == 1, "basic text: exit %d" % rc2)
    line = [l for l in out2.splitlines() if "experts.1.down_proj.weight'" in l]
    expect(len(line) == 1 and "F4[4,64] mxfp4 scales='model.layers.0.mlp.experts.1.down_proj.weight_scale'" in line[0]
           and "expert=1" in line[0] and "nan_scales=1" in line[0] and line[0].endswith("NONFINITE"), "basic text: %r" % line)
    expect(any(" expert 1: 1 tensor (1 packed)" in l and l.endswith("NONFINITE") for l in out2.splitlines()),
           "basic text: no expert line:\n%s" % out2)
    # the same results with one thread and with several
    rc3, out3, _ = run("scan", "--json", "-j", "1", path)
    rc4, out4, _ = run("scan", "--json", "-j", "3", path)
    expect(rc3 == rc4 == 1 and out3 == out4 == out, "basic: results differ between thread counts")
    # a file with only finite packed data: exit 0
    codes = rand_codes(rng, 64, 4)
    ok = os.path.join(work, "ok.safetensors")
    write_st(ok, [("a.weight", "F4", [64], pack(codes, 4)), ("a.weight_scale", "F8_E8M0", [2], bytes([127, 128]))])
    rc5, out5, err5 = run("scan", ok)
    expect(rc5 == 0 and err5 == "", "basic finite: rc %d %r" % (rc5, err5))


def group_rules(work):
    rng = random.Random(5)
    codes = rand_codes(rng, 2 * 32, 4)
    sc = [140, 0xFF]
    path = os.path.join(work, "rules.safetensors")
    write_st(path, [("blk.3.qweight", "F4", [2, 32], pack(codes, 4)), ("blk.3.qs", "F8_E8M0", [2, 1], bytes(sc))])
    rc, out, err = run("scan", "--json", path)
    objs = [json.loads(l) for l in out.splitlines()]
    by = {o["name"]: o for o in objs if o["kind"] == "tensor"}
    expect("blk.3.qs" in by and by["blk.3.qweight"]["dtype"] == "e2m1", "rules: without --scales the weight is unpaired: %r" % sorted(by))
    expect(rc == 1, "rules: the unpaired E8M0 tensor holds a NaN: exit %d" % rc)
    rc, out, err = run("scan", "--json", "--scales", ".qweight=.qs", path)
    objs = [json.loads(l) for l in out.splitlines()]
    by = {o["name"]: o for o in objs if o["kind"] == "tensor"}
    expect(sorted(by) == ["blk.3.qweight"], "rules: --scales did not pair: %r" % sorted(by))
    if "blk.3.qweight" in by:
        check_obj(by["blk.3.qweight"], reference("e2m1", codes, 2, 32, sc, 32, "e8m0"), "rules")
        expect(by["blk.3.qweight"]["packed"]["scales"] == "blk.3.qs", "rules: scales name")
    # E4M3 block scales belong to NVFP4 (E2M1) only: an F6 weight does not take them
    p6 = os.path.join(work, "f6_e4m3.safetensors")
    write_st(p6, [("q6", "F6_E2M3", [32], pack(rand_codes(rng, 32, 6), 6)), ("q6_scale", "F8_E4M3", [2], bytes([0x38, 0x38]))])
    rc, out, err = run("scan", "--json", p6)
    by = {o["name"]: o for o in (json.loads(l) for l in out.splitlines()) if o["kind"] == "tensor"}
    expect(rc == 0 and by.get("q6", {}).get("dtype") == "e2m3" and by.get("q6_scale", {}).get("dtype") == "e4m3fn"
           and "tensor 'q6': F6_E2M3 without a scale tensor" in err, "rules: F6 with E4M3 scales: rc %d %r %s" % (rc, by, err))
    for bad in ("nothing", "=x", "a=", "a=,b"):
        rc, out, err = run("scan", "--scales", bad, path)
        expect(rc == 2 and "--scales wants W=S" in err, "rules: --scales %r: rc %d %r" % (bad, rc, err))


def group_hostile(work):
    def st(name, tensors):
        p = os.path.join(work, name)
        write_st(p, tensors)
        return p

    f4 = pack([1] * 64, 4)
    cases = [
        ("scale_shape.safetensors", [("w.weight", "F4", [2, 32], f4), ("w.weight_scale", "F8_E8M0", [2, 2], bytes(4))],
         "tensor 'w.weight': its scale tensor 'w.weight_scale' (F8_E8M0 [2, 2]) does not match it: F4 [2, 32] in blocks of 32 needs F8_E8M0 [2, 1]"),
        ("scale_rank.safetensors", [("w.weight", "F4", [2, 32], f4), ("w.weight_scale", "F8_E8M0", [2], bytes(2))],
         "does not match it"),
        ("nv_shape.safetensors", [("w.weight", "F4", [64], f4), ("w.weight_scale", "F8_E4M3", [2], bytes(2))],
         "in blocks of 16 needs F8_E4M3 [4]"),
        ("nv_ts.safetensors", [("w.weight", "F4", [64], f4), ("w.weight_scale", "F8_E4M3", [4], bytes(4)),
                               ("w.weight_scale_2", "F32", [2], bytes(8))], "per-tensor scale 'w.weight_scale_2' must be one F32 value"),
        ("odd_f4.safetensors", [("w", "F4", [3], b"\x11\x01")], "tensor 'w': data_offsets [0, 2] hold 2 bytes, but F4 [3] needs 12 bits"),
        ("short_f4.safetensors", [("w", "F4", [64], f4[:31])], "tensor 'w': data_offsets [0, 31] hold 31 bytes, but F4 [64] needs 32 bytes"),
        ("f6_bits.safetensors", [("w", "F6_E2M3", [5], bytes(4))], "F6_E2M3 [5] needs 30 bits"),
        ("unknown.safetensors", [("w", "F5", [4], bytes(4))], "tensor 'w': dtype 'F5' is not supported"),
        ("unknown2.safetensors", [("w", "F4_E2M1", [8], bytes(4))], "tensor 'w': dtype 'F4_E2M1' is not supported"),
    ]
    for fname, tensors, msg in cases:
        p = st(fname, tensors)
        rc, out, err = run("scan", p)
        expect(rc == 2 and msg in err, "hostile %s: rc %d, stderr %r (wanted %r)" % (fname, rc, err, msg))
        rc, out, err = run("scan", "--json", p)
        expect(rc == 2 and '"kind":"error"' in out, "hostile %s --json: rc %d %r" % (fname, rc, out))
    # a file cut inside the packed data: the header promises more than there is
    p = os.path.join(work, "truncated.safetensors")
    write_st(p, [("w.weight", "F4", [2, 32], f4), ("w.weight_scale", "F8_E8M0", [2, 1], bytes([127, 127]))])
    with open(p, "rb") as f:
        raw = f.read()
    with open(p, "wb") as f:
        f.write(raw[:-5])
    rc, out, err = run("scan", p)
    expect(rc == 2 and "run past the end of the data section" in err, "hostile truncated: rc %d %r" % (rc, err))
    p = st("blocks_shape.safetensors", [("x_blocks", "U8", [2, 16], bytes(32)), ("x_scales", "U8", [3], bytes(3))])
    rc, out, err = run("scan", p)
    expect(rc == 2 and "tensor 'x_blocks': its scale tensor 'x_scales' (U8 [3]) does not match it: MXFP4 blocks U8 [2, 16] need U8 [2]" in err,
           "hostile U8 blocks: rc %d %r" % (rc, err))
    # one scale tensor claimed by two weights (a --scales rule and the convention)
    p = st("shared.safetensors", [("a.weight", "F4", [32], f4[:16]), ("a.weight_scale", "F8_E8M0", [1], bytes([127])),
                                   ("b.weight", "F4", [32], f4[:16])])
    rc, out, err = run("scan", "--scales", "b.weight=a.weight_scale", p)
    expect(rc == 2 and "is the scale tensor of two weights" in err, "hostile shared scales: rc %d %r" % (rc, err))


def main():
    global NANSCOPE
    ap = argparse.ArgumentParser()
    ap.add_argument("--nanscope", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--group", required=True, choices=["basic", "rules", "hostile"])
    a = ap.parse_args()
    NANSCOPE = a.nanscope
    work = os.path.join(a.work, "packed_" + a.group)
    os.makedirs(work, exist_ok=True)
    {"basic": group_basic, "rules": group_rules, "hostile": group_hostile}[a.group](work)
    if FAILURES:
        print("%d failure(s)" % len(FAILURES))
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
