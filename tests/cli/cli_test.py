#!/usr/bin/env python3
"""Tests of `nanscope scan` (tools/cli): generates files with known contents, runs the program, and checks its
text and JSON output and exit codes against references computed here, independently of the C++ library.

References:
  - .npy files are written by numpy (np.save), the independent writer; the expected counts come from numpy
    (isnan, isposinf, ...) on float64 copies of the data (exact for f16/f32/f64);
  - bf16 / fp8 data is written as raw bit patterns and decoded here by a decoder written from the format
    definitions (bit fields), not by nanscope's;
  - .safetensors files are written by hand here (8-byte little-endian header length, JSON header, data);
  - overflow counts use the round-to-nearest-even boundaries of each target format, written out below
    (f16 |x| >= 65520, bf16 |x| >= (2 - 2^-8) * 2^127, e4m3fn |x| > 464, e5m2 |x| >= 61440).

Usage: cli_test.py --nanscope PATH --work DIR [--group NAME]... (all groups when none is given).
Exit status 0 when every check passed, 1 when one failed, 77 (CTest: skipped) when numpy is missing for a group
that needs it.
"""
import argparse
import json
import math
import os
import re
import shutil
import stat
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:  # groups that need numpy are skipped
    np = None

SKIP = 77
FAILURES = []
CHECKS = [0]


def fail(msg):
    FAILURES.append(msg)
    print("FAIL: " + msg)


def expect(cond, msg):
    CHECKS[0] += 1
    if not cond:
        fail(msg)
    return cond


# ---------------------------------------------------------------------------------------------------------------
# Running the program
# ---------------------------------------------------------------------------------------------------------------
NANSCOPE = None


def run(*args, env=None, cwd=None, stdout_path=None):
    """Runs nanscope; returns (exit code, stdout text, stderr text). Output must be valid UTF-8. stdout goes to a
    pipe, or to the file stdout_path (opened for writing; read back unless it is a device such as /dev/full)."""
    cmd = [NANSCOPE] + [a if isinstance(a, (str, bytes)) else str(a) for a in args]
    e = dict(os.environ)
    if env:
        e.update(env)
    if stdout_path is None:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e, cwd=cwd, timeout=300)
        raw_out = p.stdout
    else:
        with open(stdout_path, "wb") as f:
            p = subprocess.run(cmd, stdout=f, stderr=subprocess.PIPE, env=e, cwd=cwd, timeout=300)
        raw_out = b""
        if os.path.isfile(stdout_path):
            with open(stdout_path, "rb") as f:
                raw_out = f.read()
    p.stdout = raw_out
    try:
        out = p.stdout.decode("utf-8")
    except UnicodeDecodeError as ex:
        fail("stdout of %s is not valid UTF-8: %s" % (cmd, ex))
        out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    for bad in ("AddressSanitizer", "runtime error:", "LeakSanitizer", "Segmentation", "Aborted"):
        expect(bad not in err, "sanitizer/crash report running %s:\n%s" % (cmd, err))
    return p.returncode, out, err


def reject_constant(name):
    raise ValueError("non-standard JSON constant " + name)


def json_lines(out):
    """Parses JSON Lines output strictly (no NaN/Infinity literals); returns the objects."""
    objs = []
    expect("\u2028" not in out and "\u2029" not in out and "\x85" not in out,
           "JSON output holds a raw U+2028 / U+2029 / U+0085 (line breaks to some readers)")
    for line in out.split("\n")[:-1] if out.endswith("\n") else out.split("\n"):
        try:
            objs.append(json.loads(line, parse_constant=reject_constant))
        except ValueError as ex:
            fail("invalid JSON line %r: %s" % (line, ex))
    if objs:
        expect(objs[-1].get("kind") == "summary", "the last JSON line is not the summary: %r" % objs[-1])
    return objs


def tensors_of(objs):
    return [o for o in objs if o.get("kind") == "tensor"]


# ---------------------------------------------------------------------------------------------------------------
# Reference decoding and expectations (independent of nanscope)
# ---------------------------------------------------------------------------------------------------------------
def decode_small(bits, eb, mb, has_inf):
    """Exact value of a small float format's bit pattern (sign, eb exponent bits, mb mantissa bits)."""
    bias = (1 << (eb - 1)) - 1
    sign = -1.0 if (bits >> (eb + mb)) & 1 else 1.0
    e = (bits >> mb) & ((1 << eb) - 1)
    m = bits & ((1 << mb) - 1)
    if has_inf and e == (1 << eb) - 1:
        return sign * math.inf if m == 0 else math.nan
    if not has_inf and e == (1 << eb) - 1 and m == (1 << mb) - 1:
        return math.nan
    if e == 0:
        return sign * m * 2.0 ** (1 - bias - mb)
    return sign * (1 + m / 2.0 ** mb) * 2.0 ** (e - bias)


def bf16_value(bits):
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


DECODE = {
    "bf16": bf16_value,
    "e4m3fn": lambda b: decode_small(b, 4, 3, False),
    "e5m2": lambda b: decode_small(b, 5, 2, True),
}
MIN_NORMAL = {"f64": 2.0 ** -1022, "f32": 2.0 ** -126, "f16": 2.0 ** -14, "bf16": 2.0 ** -126, "e4m3fn": 2.0 ** -6,
              "e5m2": 2.0 ** -14}
TARGETS = ["f16", "bf16", "e4m3fn", "e5m2"]
MAX_FINITE = {"f16": 65504.0, "bf16": (2 - 2.0 ** -7) * 2.0 ** 127, "e4m3fn": 448.0, "e5m2": 57344.0}


def overflows(x, target):
    a = abs(x)
    if target == "f16":
        return a >= 65520.0
    if target == "bf16":
        return a >= (2 - 2.0 ** -8) * 2.0 ** 127
    if target == "e4m3fn":
        return a > 464.0
    return a >= 61440.0


def expected(values, dtype):
    """Expected report of a float tensor from its values in row-major order (Python floats)."""
    fin = [v for v in values if math.isfinite(v)]
    non_nan = [abs(v) for v in values if not math.isnan(v)]
    first = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
    amax = max(non_nan) if non_nan else None
    e = {
        "count": len(values),
        "nan": sum(1 for v in values if math.isnan(v)),
        "pos_inf": sum(1 for v in values if v == math.inf),
        "neg_inf": sum(1 for v in values if v == -math.inf),
        "negative": sum(1 for v in fin if v < 0),
        "zero": sum(1 for v in fin if v == 0),
        "positive": sum(1 for v in fin if v > 0),
        "subnormal": sum(1 for v in fin if v != 0 and abs(v) < MIN_NORMAL[dtype]),
        "first_nonfinite": first,
        "abs_max": amax,
        "overflow": {t: sum(1 for v in fin if overflows(v, t)) for t in TARGETS},
        "min": min((v for v in values if not math.isnan(v)), default=None),
        "max": max((v for v in values if not math.isnan(v)), default=None),
        "mean": math.fsum(fin) / len(fin) if fin else None,
    }
    if len(fin) >= 2:
        m = e["mean"]
        sc = max(abs(v - m) for v in fin) or 1.0  # scaled: |x| up to 1e300 must not overflow the squares
        e["std"] = sc * math.sqrt(math.fsum(((v - m) / sc) ** 2 for v in fin) / (len(fin) - 1))
    else:
        e["std"] = None
    return e


def json_value(v):
    """How the JSON output spells a double: a number, "inf"/"-inf", null for NaN/none."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if v == math.inf:
        return "inf"
    if v == -math.inf:
        return "-inf"
    return v


def headroom(amax, target):
    if amax is None:
        return None
    if amax == 0:
        return "inf"
    if amax == math.inf:
        return "-inf"
    return math.log2(MAX_FINITE[target] / amax)


def unravel(flat, shape):
    """Row-major multi-dimensional index of a flat index (independent of nanscope's)."""
    idx = []
    for d in reversed(shape):
        idx.insert(0, flat % d)
        flat //= d
    return idx


def index_text(flat, shape):
    """How the text line names the first NaN/Inf: "[2, 517] (flat 2517)"; "[5]" for 1-d, "[]" for 0-d."""
    s = "[" + ", ".join(str(i) for i in unravel(flat, shape)) + "]"
    return s + (" (flat %d)" % flat if len(shape) >= 2 else "")


def close(a, b, rel=1e-9):
    if isinstance(a, str) or isinstance(b, str) or a is None or b is None:
        return a == b
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def compare_tensor(obj, exp, dtype, label, stats=False):
    """Checks one JSON tensor object against the expectations."""
    ok = True
    ok &= expect(obj["dtype"] == dtype, "%s: dtype %r, expected %r" % (label, obj["dtype"], dtype))
    ok &= expect(obj["checked"] is True, "%s: not checked" % label)
    for k in ("count", "nan", "pos_inf", "neg_inf", "negative", "zero", "positive", "subnormal", "first_nonfinite"):
        ok &= expect(obj[k] == exp[k], "%s: %s = %r, expected %r" % (label, k, obj[k], exp[k]))
    ok &= expect(obj["abs_max"] == json_value(exp["abs_max"]),
                 "%s: abs_max = %r, expected %r" % (label, obj["abs_max"], json_value(exp["abs_max"])))
    for t in TARGETS:
        f = obj["formats"][t]
        ok &= expect(f["overflow"] == exp["overflow"][t],
                     "%s: %s overflow = %r, expected %r" % (label, t, f["overflow"], exp["overflow"][t]))
        h = headroom(exp["abs_max"], t)
        ok &= expect(close(f["headroom_bits"], h), "%s: %s headroom = %r, expected %r" % (label, t, f["headroom_bits"], h))
    want_index = None if exp["first_nonfinite"] is None else unravel(exp["first_nonfinite"], obj["shape"])
    got_index = obj.get("first_nonfinite_index", "(missing)")
    ok &= expect(got_index == want_index, "%s: first_nonfinite_index = %r, expected %r" % (label, got_index, want_index))
    status = "nonfinite" if exp["first_nonfinite"] is not None else "ok"
    ok &= expect(obj["status"] == status, "%s: status %r, expected %r" % (label, obj["status"], status))
    if stats:
        for k in ("min", "max"):
            ok &= expect(obj[k] == json_value(exp[k]), "%s: %s = %r, expected %r" % (label, k, obj[k], exp[k]))
        for k in ("mean", "std"):
            ok &= expect(close(obj[k], json_value(exp[k]), 1e-6), "%s: %s = %r, expected %r" % (label, k, obj[k], exp[k]))
    return ok


TEXT_COUNTS = re.compile(r" n=(\d+) nan=(\d+) \+inf=(\d+) -inf=(\d+) neg=(\d+) zero=(\d+) pos=(\d+) sub=(\d+)")


def compare_text(line, exp, label):
    m = TEXT_COUNTS.search(line)
    if not expect(m is not None, "%s: no counts in the text line %r" % (label, line)):
        return
    got = [int(g) for g in m.groups()]
    want = [exp[k] for k in ("count", "nan", "pos_inf", "neg_inf", "negative", "zero", "positive", "subnormal")]
    expect(got == want, "%s: text counts %r, expected %r (%r)" % (label, got, want, line))
    shape_m = re.search(r"^.*?: \w+\[([\d,]*)\] n=", line)
    shape = [int(x) for x in shape_m.group(1).split(",") if x] if shape_m else []
    if exp["first_nonfinite"] is not None:
        want = " first_nonfinite=%s " % index_text(exp["first_nonfinite"], shape)
        expect(want in line, "%s: %r missing in %r" % (label, want, line))
        expect(line.endswith(" NONFINITE"), "%s: text line does not end with NONFINITE: %r" % (label, line))
    else:
        expect(line.endswith(" ok"), "%s: text line does not end with ok: %r" % (label, line))
    for t in TARGETS:
        n = exp["overflow"][t]
        if n:
            expect(re.search(r" %s=\S*\(%d overflow\)" % (t, n), line) is not None,
                   "%s: %s overflow %d missing in %r" % (label, t, n, line))


# ---------------------------------------------------------------------------------------------------------------
# Writers
# ---------------------------------------------------------------------------------------------------------------
def write_safetensors(path, tensors, metadata=None, align=False):
    """tensors: list of (name, dtype string, shape, raw bytes). Offsets in order; unpadded header (unaligned data)
    unless align."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dt, shape, raw in tensors:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, ensure_ascii=False).encode("utf-8")
    if align:
        h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def write_raw_safetensors(path, header, data=b""):
    h = header.encode("utf-8") if isinstance(header, str) else header
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def write_npy_header(path, descr, shape, raw, fortran=False):
    """A .npy file with a header written by numpy's own header writer (any descr string) and raw data."""
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": descr, "fortran_order": fortran, "shape": tuple(shape)})
        f.write(raw)


def npy_values(a):
    """Row-major float64 values of a numpy float array (exact for f16/f32/f64)."""
    return [float(v) for v in np.asarray(a, dtype=np.float64).ravel(order="C")]


def planted(rng, n, dtype, nan_at=(), pinf_at=(), ninf_at=(), extra=()):
    """n values N(0, 3) in `dtype`, with NaN / +inf / -inf planted at the given flat indices and (index, value) extras."""
    a = (rng.standard_normal(n) * 3).astype(dtype)
    a[n // 3] = 0.0
    for i, v in extra:
        a[i] = v
    for i in nan_at:
        a[i] = np.nan
    for i in pinf_at:
        a[i] = np.inf
    for i in ninf_at:
        a[i] = -np.inf
    return a


# ---------------------------------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------------------------------
def group_npy(work):
    """Every numpy dtype, C and Fortran order, little and big endian, 0-d, empty, ml_dtypes descrs, unaligned."""
    if np is None:
        return SKIP
    rng = np.random.default_rng(1234)
    cases = []  # (file, dtype, values in row-major order)

    for name, dt, extra in (("f64", np.float64, [(5, 1e300), (6, -3e-310)]),
                            ("f32", np.float32, [(5, 70000.0), (6, -1e-40), (7, 65519.0), (8, -65520.0)]),
                            ("f16", np.float16, [(5, 6e-8), (6, -65504.0)])):
        a = planted(rng, 50, dt, nan_at=[11, 40], pinf_at=[13], ninf_at=[49], extra=extra)
        p = os.path.join(work, "%s.npy" % name)
        np.save(p, a.reshape(5, 10))
        cases.append((p, name, npy_values(a)))
    # finite files (exit 0 alone)
    a = (rng.standard_normal((4, 6)) * 100).astype(np.float32)
    np.save(os.path.join(work, "finite.npy"), a)
    cases.append((os.path.join(work, "finite.npy"), "f32", npy_values(a)))
    # fp16-overflowing but bf16-safe values
    a = np.array([70000.0, -1e5, 65519.0, 65520.0, 1.0, 3e38], dtype=np.float32)
    np.save(os.path.join(work, "overflow.npy"), a)
    cases.append((os.path.join(work, "overflow.npy"), "f32", npy_values(a)))
    # Fortran order (3-d), NaN at a known logical index
    a = planted(rng, 60, np.float32, nan_at=[37], ninf_at=[58]).reshape(3, 4, 5)
    np.save(os.path.join(work, "fortran.npy"), np.asfortranarray(a))
    cases.append((os.path.join(work, "fortran.npy"), "f32", npy_values(a)))
    # big-endian, C and Fortran
    for descr, dt, tag in ((">f4", "f32", "be_f32"), (">f8", "f64", "be_f64"), (">f2", "f16", "be_f16")):
        a = planted(rng, 24, np.dtype(descr), nan_at=[17], pinf_at=[3], extra=[(4, 1e4)]).reshape(4, 6)
        np.save(os.path.join(work, tag + ".npy"), a)
        cases.append((os.path.join(work, tag + ".npy"), dt, npy_values(a)))
        np.save(os.path.join(work, tag + "_fortran.npy"), np.asfortranarray(a))
        cases.append((os.path.join(work, tag + "_fortran.npy"), dt, npy_values(a)))
    # 0-d and empty
    np.save(os.path.join(work, "scalar.npy"), np.array(np.float32(np.nan)))
    cases.append((os.path.join(work, "scalar.npy"), "f32", [math.nan]))
    np.save(os.path.join(work, "empty.npy"), np.zeros((0, 3), dtype=np.float64))
    cases.append((os.path.join(work, "empty.npy"), "f64", []))
    # several chunks (4 Mi elements each) and both threads: 9 Mi + 5 elements
    n = 9 * (1 << 20) + 5
    a = np.ones(n, dtype=np.float32)
    a[n - 2] = np.nan
    a[(1 << 22) + 7] = 1e5
    a[n - 1] = -np.inf
    np.save(os.path.join(work, "big.npy"), a)
    cases.append((os.path.join(work, "big.npy"), "f32", None))
    big_exp = expected([1.0] * 3 + [1e5, math.nan, -math.inf], "f32")
    big_exp.update(count=n, positive=n - 2, first_nonfinite=n - 2)
    # ml_dtypes spellings: 'bfloat16' / 'float8_e4m3fn' / 'float8_e5m2' / '<f1' descrs, raw bits
    bf_bits = [0x3F80, 0x7FC0, 0xFF80, 0x0001, 0x8000, 0x4780, 0x7F7F, 0xC2F7]
    write_npy_header(os.path.join(work, "bf16.npy"), "bfloat16", (2, 4), struct.pack("<8H", *bf_bits))
    cases.append((os.path.join(work, "bf16.npy"), "bf16", [DECODE["bf16"](b) for b in bf_bits]))
    e4_bits = [0x7E, 0xFE, 0x7F, 0x01, 0x00, 0x38, 0xF8]
    write_npy_header(os.path.join(work, "e4m3.npy"), "float8_e4m3fn", (7,), bytes(e4_bits))
    cases.append((os.path.join(work, "e4m3.npy"), "e4m3fn", [DECODE["e4m3fn"](b) for b in e4_bits]))
    e5_bits = [0x7B, 0x7C, 0xFD, 0x01, 0x3C]
    write_npy_header(os.path.join(work, "e5m2.npy"), "<f1", (5,), bytes(e5_bits))
    cases.append((os.path.join(work, "e5m2.npy"), "e5m2", [DECODE["e5m2"](b) for b in e5_bits]))
    # unaligned data (header written by hand so that f64 data starts at an odd offset)
    d = b"{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }"
    d = d + b" " * (63 - len(d) - 1 - 10 + 64) + b"\n"
    vals = [1.5, math.nan, -2e300]
    with open(os.path.join(work, "unaligned.npy"), "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d + struct.pack("<3d", *vals))
    cases.append((os.path.join(work, "unaligned.npy"), "f64", vals))

    files = [c[0] for c in cases]
    rc, out, err = run("scan", "--json", *files)
    expect(rc == 1, "npy: exit %d, expected 1 (NaN found)\n%s" % (rc, err))
    objs = tensors_of(json_lines(out))
    expect(len(objs) == len(cases), "npy: %d tensor objects for %d files" % (len(objs), len(cases)))
    by_file = {o["file"]: o for o in objs}
    for path, dt, values in cases:
        o = by_file.get(path)
        if not expect(o is not None, "npy: no output for " + path):
            continue
        exp = big_exp if values is None else expected(values, dt)
        expect(o["name"] is None, "npy: %s has a name" % path)
        compare_tensor(o, exp, dt, os.path.basename(path))
    # shapes as numpy says
    for path in (os.path.join(work, "fortran.npy"), os.path.join(work, "scalar.npy"), os.path.join(work, "empty.npy")):
        expect(by_file[path]["shape"] == list(np.load(path).shape), "npy: shape of %s" % path)
    # STATS mode on a few
    rc, out, err = run("scan", "--json", "--stats", *files[:4])
    for o, (path, dt, values) in zip(tensors_of(json_lines(out)), cases[:4]):
        compare_tensor(o, expected(values, dt), dt, os.path.basename(path) + " --stats", stats=True)

    # every integer and bool dtype: count only, exit 0
    ints = []
    for dt in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", ">i4", ">u8", "?"):
        a = (np.arange(12) % 7).astype(dt).reshape(3, 4)
        p = os.path.join(work, "int_%s.npy" % dt.replace(">", "be").replace("?", "bool"))
        np.save(p, a)
        ints.append(p)
    rc, out, err = run("scan", "--json", *ints)
    expect(rc == 0, "npy ints: exit %d, expected 0\n%s" % (rc, err))
    for o in tensors_of(json_lines(out)):
        expect(o["checked"] is False and o["count"] == 12 and o["shape"] == [3, 4] and o["status"] == "ok",
               "npy ints: %r" % o)
    names = sorted(o["dtype"] for o in tensors_of(json_lines(out)))
    expect(names == sorted(["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "i32", "u64", "bool"]),
           "npy ints: dtypes %r" % names)

    # the text output agrees
    rc, out, err = run("scan", *files)
    lines = out.splitlines()
    expect(len(lines) == len(cases) + 1, "npy text: %d lines for %d files" % (len(lines), len(cases)))
    for line, (path, dt, values) in zip(lines, cases):
        expect(line.startswith(path + ": %s[" % dt), "npy text: line %r does not start with the file and dtype" % line)
        compare_text(line, big_exp if values is None else expected(values, dt), os.path.basename(path))
    expect(lines[-1].startswith("nanscope: FAIL: %d files, %d tensors scanned: " % (len(cases), len(cases))),
           "npy text: verdict %r" % lines[-1])

    # void descrs need --npy-void
    write_npy_header(os.path.join(work, "void.npy"), "<V2", (4,), struct.pack("<4H", 0x3F80, 0x7F80, 0x0000, 0x4780))
    rc, out, err = run("scan", os.path.join(work, "void.npy"))
    expect(rc == 2 and "'<V2'" in err and "void" in err, "npy void without --npy-void: rc %d %r" % (rc, err))
    rc, out, err = run("scan", "--json", "--npy-void", "bf16", os.path.join(work, "void.npy"))
    objs = tensors_of(json_lines(out))
    expect(rc == 1 and len(objs) == 1, "npy void with --npy-void bf16: rc %d" % rc)
    if objs:
        compare_tensor(objs[0], expected([1.0, math.inf, 0.0, 65536.0], "bf16"), "bf16", "void.npy")
    return 0


def st_bits(vals, fmt):
    return struct.pack("<%d%s" % (len(vals), fmt), *vals)


def group_safetensors(work):
    """Every safetensors dtype, metadata, 0-d and empty tensors, several chunks, unaligned data, names."""
    rng_vals = [0.5 * ((i * 7919) % 23 - 11) for i in range(40)]
    tensors, expect_by_name = [], {}

    def add(name, dt_file, dt, shape, values, raw):
        tensors.append((name, dt_file, shape, raw))
        if values is not None:
            expect_by_name[name] = (dt, expected(values, dt))

    v = list(rng_vals)
    v[3], v[9], v[17], v[30] = math.nan, math.inf, -math.inf, 1e300
    add("model.f64", "F64", "f64", [4, 10], v, st_bits(v, "d"))
    v = list(rng_vals)
    v[0], v[1], v[2], v[39] = 70000.0, -1e-40, math.nan, 3.4e38
    f32v = [struct.unpack("<f", struct.pack("<f", x))[0] for x in v]
    add("model.f32", "F32", "f32", [40], f32v, st_bits(v, "f"))
    h_bits = [0x3C00, 0x7C00, 0xFC00, 0x7E00, 0x0001, 0x8000, 0x7BFF, 0xBC00]
    add("model.f16", "F16", "f16", [2, 2, 2], [decode_small(b, 5, 10, True) for b in h_bits], st_bits(h_bits, "H"))
    b_bits = [0x3F80, 0x7FC0, 0xFF80, 0x0001, 0x8000, 0x4780, 0x7F7F, 0xC2F7, 0x4400]
    add("model.bf16", "BF16", "bf16", [3, 3], [DECODE["bf16"](b) for b in b_bits], st_bits(b_bits, "H"))
    e4 = [0x7E, 0xFE, 0x7F, 0x01, 0x00, 0x38, 0xF8, 0x80]
    add("model.e4m3", "F8_E4M3", "e4m3fn", [8], [DECODE["e4m3fn"](b) for b in e4], bytes(e4))
    e5 = [0x7B, 0x7C, 0xFD, 0x01, 0x3C, 0xFB]
    add("model.e5m2", "F8_E5M2", "e5m2", [6], [DECODE["e5m2"](b) for b in e5], bytes(e5))
    add("scalar", "F32", "f32", [], [2.5], st_bits([2.5], "f"))
    add("empty", "BF16", "bf16", [0, 7], [], b"")
    fin = [1.0, -2.0, 0.0, 1e-3]
    add("finite", "F32", "f32", [4], fin, st_bits(fin, "f"))
    # several chunks: 4 Mi + 3 bf16 elements, +inf in the second chunk, a 1e5 (over fp16 and fp8)
    n = (1 << 22) + 3
    raw = bytearray(struct.pack("<H", 0x3F80) * n)
    raw[2 * ((1 << 22) + 1):2 * ((1 << 22) + 2)] = struct.pack("<H", 0x7F80)
    raw[2 * 5:2 * 6] = struct.pack("<H", 0x47C3)  # 99840
    add("big", "BF16", "bf16", [n], None, bytes(raw))
    big = expected([1.0, 99840.0, math.inf], "bf16")
    big.update(count=n, positive=n - 1, first_nonfinite=(1 << 22) + 1)
    expect_by_name["big"] = ("bf16", big)
    ints = [("i8", "I8", "b", [-1, 2]), ("i16", "I16", "h", [-1, 2]), ("i32", "I32", "i", [1]), ("i64", "I64", "q", [7, 8, 9]),
            ("u8", "U8", "B", [1]), ("u16", "U16", "H", [1]), ("u32", "U32", "I", [1]), ("u64", "U64", "Q", [1]),
            ("bool", "BOOL", "B", [0, 1, 1])]
    for nm, dtf, fmt, vals in ints:
        tensors.append(("int." + nm, dtf, [len(vals)], st_bits(vals, fmt)))
    weird = 'we"ird\\name\n\t\x01é😀\x9b\u2028'
    add(weird, "F32", "f32", [1], [math.nan], st_bits([math.nan], "f"))

    path = os.path.join(work, "model.safetensors")
    write_safetensors(path, tensors, metadata={"format": "pt", "note": "x\"y"})
    rc, out, err = run("scan", "--json", path)
    json_rc = rc
    expect(rc == 1, "safetensors: exit %d, expected 1\n%s" % (rc, err))
    objs = tensors_of(json_lines(out))
    expect(len(objs) == len(tensors), "safetensors: %d tensor objects, expected %d" % (len(objs), len(tensors)))
    for o in objs:
        expect(o["file"] == path, "safetensors: file %r" % o["file"])
        name = o["name"]
        if name.startswith("int."):
            expect(o["checked"] is False and o["status"] == "ok", "safetensors ints: %r" % o)
            continue
        if not expect(name in expect_by_name, "safetensors: unexpected tensor name %r" % name):
            continue
        dt, exp = expect_by_name[name]
        compare_tensor(o, exp, dt, "safetensors " + repr(name))
    expect(weird in [o["name"] for o in objs], "safetensors: the escaped name did not round-trip through JSON")
    # data order: offsets increase
    expect([o["name"] for o in objs] == [t[0] for t in tensors], "safetensors: tensors not reported in data order")
    # shapes
    for o in objs:
        want = next(t[2] for t in tensors if t[0] == o["name"])
        expect(o["shape"] == want, "safetensors: shape of %r %r, expected %r" % (o["name"], o["shape"], want))

    # text output: one line per tensor, the name quoted and escaped, counts as in JSON
    rc, out, err = run("scan", path)
    lines = out.splitlines()
    expect(len(lines) == len(tensors) + 1, "safetensors text: %d lines" % len(lines))
    for line in lines[:-1]:
        expect(line.startswith(path + " '"), "safetensors text: %r" % line)
        expect("\n" not in line and "\x01" not in line, "safetensors text: raw control character in %r" % line)
    expect(any("'we\"ird\\\\name\\x0a\\x09\\x01é😀\\x9b\\u{2028}'" in line for line in lines),
           "safetensors text: escaped name missing:\n" + "\n".join(lines))
    for name, (dt, exp) in expect_by_name.items():
        if name == weird:
            continue
        line = next((l for l in lines if l.startswith("%s '%s': " % (path, name))), None)
        if expect(line is not None, "safetensors text: no line for %r" % name):
            compare_text(line, exp, "text " + name)

    # aligned header (padding with spaces) reads the same
    path2 = os.path.join(work, "aligned.safetensors")
    write_safetensors(path2, tensors, align=True)
    rc2, out2, _ = run("scan", "--json", path2)
    a = [dict(o, file=None) for o in objs]
    b = [dict(o, file=None) for o in tensors_of(json_lines(out2))]
    expect(rc2 == json_rc and a == b, "safetensors: aligned and unaligned data give different results")

    # a finite-only file exits 0
    p = os.path.join(work, "finite.safetensors")
    write_safetensors(p, [("a", "F32", [4], st_bits(fin, "f")), ("b", "I64", [1], st_bits([5], "q"))])
    rc, out, err = run("scan", p)
    expect(rc == 0 and out.splitlines()[-1].startswith("nanscope: OK: 1 file, 2 tensors scanned: 0 with NaN/Inf"),
           "safetensors finite: rc %d %r" % (rc, out))
    # an empty header object and no data: no tensors, exit 0
    p = os.path.join(work, "no_tensors.safetensors")
    write_raw_safetensors(p, "{}")
    rc, out, err = run("scan", p)
    expect(rc == 0 and err == "", "safetensors without tensors: rc %d %r" % (rc, err))
    return 0


def group_json(work):
    """JSON Lines: always valid, names and paths escaped (invalid UTF-8 in a path), summary line, kinds."""
    p = os.path.join(work, 'q"uo\\te\n.safetensors')
    write_safetensors(p, [("\x00\x1f\x7f", "F32", [1], st_bits([1.0], "f")), ("\u2028x", "F16", [1], st_bits([0x7C00], "H"))])
    bad_utf8 = os.path.join(os.fsencode(work), b"bad\xff\xfename.safetensors")
    with open(bad_utf8, "wb") as f:
        f.write(open(p, "rb").read())
    missing = os.path.join(work, "missing\x01.npy")
    rc, out, err = run("scan", "--json", p, bad_utf8, missing)
    objs = json_lines(out)
    kinds = [o["kind"] for o in objs]
    expect(kinds == ["tensor", "tensor", "tensor", "tensor", "error", "summary"], "json: kinds %r" % kinds)
    t = tensors_of(objs)
    expect([o["name"] for o in t[:2]] == ["\x00\x1f\x7f", "\u2028x"], "json: names %r" % [o["name"] for o in t[:2]])
    expect(t[0]["file"] == p, "json: file %r" % t[0]["file"])
    expect(t[2]["file"] == os.path.join(work, "bad\ufffd\ufffdname.safetensors"),
           "json: invalid UTF-8 path not replaced by U+FFFD: %r" % t[2]["file"])
    err_obj = [o for o in objs if o["kind"] == "error"][0]
    expect(err_obj["file"] == missing and "No such file" in err_obj["message"] and err_obj["name"] is None,
           "json: error object %r" % err_obj)
    s = objs[-1]
    expect(s == {"kind": "summary", "files": 3, "tensors": 4, "nonfinite_tensors": 2, "overflow_tensors": 0, "errors": 1,
                 "skipped": 0, "warnings": 0, "exit_code": 2}, "json: summary %r" % s)
    expect(rc == 2, "json: exit %d" % rc)
    # every key of the schema, with its type
    keys = {"kind": str, "file": str, "name": (str, type(None)), "dtype": str, "file_dtype": str, "shape": list,
            "count": int, "checked": bool, "nan": int, "pos_inf": int, "neg_inf": int, "negative": int, "zero": int,
            "positive": int, "subnormal": int, "first_nonfinite": (int, type(None)),
            "first_nonfinite_index": (list, type(None)), "abs_max": (int, float, str, type(None)),
            "formats": dict, "status": str}
    for o in t:
        expect(set(o) == set(keys), "json: keys %r" % sorted(o))
        for k, ty in keys.items():
            expect(isinstance(o.get(k), ty), "json: %s has type %s" % (k, type(o.get(k))))
        expect(set(o["formats"]) == set(TARGETS), "json: formats %r" % o["formats"])
    # --stats adds min/max/mean/std; --quiet leaves only the summary
    rc, out, err = run("scan", "--json", "--stats", p)
    for o in tensors_of(json_lines(out)):
        expect({"min", "max", "mean", "std"} <= set(o), "json --stats: keys %r" % sorted(o))
    rc, out, err = run("scan", "--json", "--quiet", p)
    expect([o["kind"] for o in json_lines(out)] == ["summary"], "json --quiet: %r" % out)
    # a warning object for unused bytes
    g = os.path.join(work, "gap.safetensors")
    write_raw_safetensors(g, '{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', st_bits([1, 2, 3], "f"))
    rc, out, err = run("scan", "--json", g)
    objs = json_lines(out)
    expect(rc == 0 and [o["kind"] for o in objs] == ["warning", "warning", "tensor", "summary"] and objs[-1]["warnings"] == 2,
           "json warnings: rc %d %r" % (rc, objs))
    # integer tensors: null health fields
    i = os.path.join(work, "ints.safetensors")
    write_safetensors(i, [("i", "I32", [2], st_bits([1, 2], "i"))])
    rc, out, err = run("scan", "--json", i)
    o = tensors_of(json_lines(out))[0]
    expect(o["checked"] is False and o["negative"] is None and o["abs_max"] is None and o["formats"] is None
           and o["nan"] == 0 and o["status"] == "ok", "json ints: %r" % o)
    return 0


def group_exit_codes(work):
    """0 all finite, 1 NaN/Inf, 2 bad input (2 wins over 1), usage errors, --help, --version, --fail-on-overflow."""
    good = os.path.join(work, "good.safetensors")
    write_safetensors(good, [("a", "F32", [3], st_bits([1.0, 70000.0, -2.0], "f"))])
    nanf = os.path.join(work, "nan.safetensors")
    write_safetensors(nanf, [("a", "F32", [2], st_bits([1.0, math.nan], "f"))])
    bad = os.path.join(work, "bad.safetensors")
    write_raw_safetensors(bad, "{not json")
    rc, out, _ = run("scan", good)
    expect(rc == 0 and "nanscope: OK:" in out, "exit: finite file gave %d" % rc)
    rc, out, _ = run("scan", good, nanf)
    expect(rc == 1 and "nanscope: FAIL:" in out, "exit: NaN file gave %d" % rc)
    rc, out, err = run("scan", bad, good)
    expect(rc == 2 and "nanscope: ERROR:" in out and bad in err, "exit: bad file gave %d" % rc)
    rc, out, err = run("scan", nanf, bad, good)
    expect(rc == 2, "exit: bad + NaN gave %d, expected 2 (bad input wins)" % rc)
    expect(out.count("\n") == 3, "exit: the other files are still scanned:\n" + out)
    rc, out, err = run("scan", "--quiet", nanf, good)
    expect(rc == 1 and out.count("\n") == 1 and out.startswith("nanscope: FAIL:"), "exit: --quiet %r" % out)
    # --fail-on-overflow: 70000 overflows f16 and fp8 but not bf16
    rc, out, _ = run("scan", "--fail-on-overflow", "f16", good)
    expect(rc == 1 and " OVERFLOW" in out and "1 would overflow" in out, "exit: --fail-on-overflow f16 gave %d %r" % (rc, out))
    rc, _, _ = run("scan", "--fail-on-overflow", "bf16", good)
    expect(rc == 0, "exit: --fail-on-overflow bf16 gave %d" % rc)
    rc, _, _ = run("scan", "--fail-on-overflow", "bf16,e4m3fn", good)
    expect(rc == 1, "exit: --fail-on-overflow bf16,e4m3fn gave %d" % rc)
    rc, _, _ = run("scan", "--fail-on-overflow", "any", good)
    expect(rc == 1, "exit: --fail-on-overflow any gave %d" % rc)
    rc, out, _ = run("scan", "--json", "--fail-on-overflow", "e5m2", good)
    o = json_lines(out)
    expect(rc == 1 and o[0]["status"] == "overflow" and o[-1]["overflow_tensors"] == 1, "exit: json overflow %r" % o)
    # usage
    for args in ((), ("scan",), ("scan", "--threads", "0", good), ("scan", "--bogus", good), ("frobnicate",),
                 ("scan", "--fail-on-overflow", "f12", good), ("scan", "--npy-void", "f32", good)):
        rc, out, err = run(*args)
        expect(rc == 2, "exit: usage error %r gave %d" % (args, rc))
    rc, out, _ = run("--help")
    expect(rc == 0 and "scan" in out, "exit: --help gave %d" % rc)
    rc, out, _ = run("scan", "--help")
    expect(rc == 0 and "--fail-on-overflow" in out and "--json" in out, "exit: scan --help gave %d" % rc)
    rc, out, _ = run("--version")
    expect(rc == 0 and re.fullmatch(r"nanscope \d+\.\d+\.\d+\n", out) is not None, "exit: --version %d %r" % (rc, out))
    return 0


def hostile_cases(work):
    """(file name, bytes or a callable making the path, expected substring of the error)."""
    f32 = lambda *v: st_bits(list(v), "f")
    sth = lambda h, d=b"": struct.pack("<Q", len(h.encode() if isinstance(h, str) else h)) + (h.encode() if isinstance(h, str) else h) + d
    T = lambda extra="": '{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]%s}}' % extra

    def npy_raw(d, data, version=1):
        d = d + " " * ((-(len(d) + 11)) % 64) + "\n"
        return b"\x93NUMPY" + bytes([version, 0]) + struct.pack("<H", len(d)) + d.encode() + data

    good_npy = lambda shape="(2,)", descr="<f4", extra="": npy_raw(
        "{'descr': '%s', 'fortran_order': False, 'shape': %s, %s}" % (descr, shape, extra), f32(1, 2))
    return [
        # both formats
        ("empty.npy", b"", "empty file"),
        ("empty.safetensors", b"", "empty file"),
        ("unknown.bin", b"hello world, not a tensor file", "unrecognised file format"),
        # .npy
        ("short.npy", b"\x93NUM", "not an .npy file"),
        ("magic.npy", b"\x93NUMPX\x01\x00" + b"\x00" * 60, "bad magic"),
        ("header_past_end.npy", b"\x93NUMPY\x01\x00\xff\x7f{'descr': '<f4'", "runs past the end of the file"),
        ("truncated.npy", good_npy()[:-1], "shorter than the shape says"),
        ("trailing.npy", good_npy() + b"\x00", "trailing bytes"),
        ("absurd_shape.npy", good_npy("(4294967296, 4294967296, 4294967296)"), "more than 2^64"),
        ("huge_extent.npy", good_npy("(99999999999999999999,)"), "does not fit in int64"),
        ("rank9.npy", good_npy("(1, 1, 1, 1, 1, 1, 1, 1, 2)"), "more than 8 dimensions"),
        ("negative.npy", good_npy("(-2,)"), "non-negative"),
        ("descr.npy", good_npy(descr="<c8"), "unsupported dtype descr '<c8'"),
        ("descr_pipe.npy", good_npy(descr="|f4"), "unsupported dtype descr '|f4'"),
        ("structured.npy", npy_raw("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", f32(1, 2)), "structured"),
        ("extra_key.npy", good_npy(extra="'x': 1, "), "unexpected key 'x'"),
        ("non_ascii.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } \u00e9", f32(1, 2)), "non-ASCII"),
        ("version.npy", b"\x93NUMPY\x07\x00" + good_npy()[8:], "unsupported .npy format version 7.0"),
        # .safetensors
        ("short.safetensors", b"\x10\x00\x00", "less than the 8-byte header length"),
        ("header_past_end.safetensors", struct.pack("<Q", 1 << 62) + b"{}", "runs past the end of the file"),
        ("not_json.safetensors", sth("{not json"), "malformed header JSON"),
        ("not_object.safetensors", sth("[1, 2]"), "not a JSON object"),
        ("trailing_garbage.safetensors", sth(T() + " x", f32(1)), "unexpected bytes after the header"),
        ("trailing_comma.safetensors", sth(T()[:-1] + ",}", f32(1)), "malformed header JSON"),
        ("not_utf8.safetensors", sth(b'{"w\xc3\x28":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)), "not valid UTF-8"),
        ("overlong_utf8.safetensors", sth(b'{"\xc0\xaf":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)), "not valid UTF-8"),
        ("surrogate.safetensors", sth('{"\\udc00":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)), "surrogate"),
        ("control_char.safetensors", sth('{"a\x01":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)), "control character"),
        ("duplicate.safetensors", sth('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)), "tensor 'w' appears twice"),
        ("end_before_start.safetensors", sth('{"w":{"dtype":"F32","shape":[0],"data_offsets":[10,8]}}', b"\0" * 12), "tensor 'w': data_offsets [10, 8] end before start"),
        ("past_end.safetensors", sth('{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}', f32(1, 2)), "tensor 'w': data_offsets [0, 12] run past the end of the data section (8 bytes)"),
        ("huge_offset.safetensors", sth('{"w":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551615]}}', f32(1)), "run past the end of the data section"),
        ("size_mismatch.safetensors", sth('{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}}', f32(1, 2)), "tensor 'w': data_offsets [0, 8] hold 8 bytes, but F32 [2, 2] needs 16 bytes"),
        ("overlap.safetensors", sth('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', f32(1, 2, 3)), "tensor 'b': data_offsets [4, 12] overlap tensor 'a'"),
        ("same_range.safetensors", sth('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}', f32(1)), "overlap tensor"),
        ("absurd_shape.safetensors", sth('{"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}}', f32(1)), "tensor 'w': shape [4294967296, 4294967296, 16] has more elements than fit in 64 bits"),
        ("big_extent.safetensors", sth('{"w":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,4]}}', f32(1)), "is too large"),
        ("rank9.safetensors", sth('{"w":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}}', f32(1)), "more than 8 dimensions"),
        ("negative_shape.safetensors", sth('{"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}', f32(1)), "tensor 'w': a 'shape' extent must be non-negative"),
        ("float_shape.safetensors", sth('{"w":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}', f32(1)), "must be an integer"),
        ("missing_dtype.safetensors", sth('{"w":{"shape":[1],"data_offsets":[0,4]}}', f32(1)), "tensor 'w': the entry has no 'dtype'"),
        ("missing_offsets.safetensors", sth('{"w":{"dtype":"F32","shape":[1]}}', f32(1)), "no 'data_offsets'"),
        ("three_offsets.safetensors", sth('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}', f32(1, 2)), "two integers"),
        ("dtype_number.safetensors", sth('{"w":{"dtype":3,"shape":[1],"data_offsets":[0,4]}}', f32(1)), "'dtype' is not a string"),
        ("dup_key.safetensors", sth('{"w":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)), "'dtype' appears twice"),
        ("entry_not_object.safetensors", sth('{"w":[1,2]}', f32(1)), "tensor 'w': the entry is not an object"),
        ("metadata.safetensors", sth('{"__metadata__":{"a":1},' + T()[1:], f32(1)), "'__metadata__' value of 'a' is not a string"),
        ("deep.safetensors", sth(T(',"x":' + "[" * 100 + "]" * 100), f32(1)), "nested more than 64 levels"),
        ("unsupported.safetensors", sth('{"c":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}}', f32(1, 2)), "tensor 'c': dtype 'C64' is not supported"),
        ("unknown_dtype.safetensors", sth('{"c":{"dtype":"Q7","shape":[3],"data_offsets":[0,4]}}', f32(1)), "dtype 'Q7' is not supported"),
        ("nan_literal.safetensors", sth('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":NaN}}', f32(1)), "expected a JSON value"),
        ("name_escape.safetensors", sth('{"a\\nb\\u0001":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', f32(1)), "tensor 'a\\x0ab\\x01'"),
    ]


def group_hostile(work):
    """Every hostile file: exit 2 and an error naming the file and the problem; never a crash."""
    cases = hostile_cases(work)
    paths = []
    for name, data, msg in cases:
        p = os.path.join(work, name)
        with open(p, "wb") as f:
            f.write(data)
        paths.append(p)
        rc, out, err = run("scan", p)
        expect(rc == 2, "hostile %s: exit %d, expected 2\n%s%s" % (name, rc, out, err))
        expect("nanscope: file '%s': " % p in err, "hostile %s: the error does not name the file: %r" % (name, err))
        expect(msg in err, "hostile %s: expected %r in the error, got %r" % (name, msg, err))
        expect(out.splitlines()[-1:] == [l for l in out.splitlines() if l.startswith("nanscope: ERROR:")][-1:] and "(exit 2)" in out,
               "hostile %s: verdict %r" % (name, out))
    # special files
    rc, out, err = run("scan", work)
    expect(rc == 2 and "is a directory" in err, "hostile directory: rc %d %r" % (rc, err))
    rc, out, err = run("scan", os.path.join(work, "does_not_exist.npy"))
    expect(rc == 2 and "cannot open: No such file or directory" in err, "hostile missing: rc %d %r" % (rc, err))
    fifo = os.path.join(work, "fifo.npy")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    rc, out, err = run("scan", fifo)
    expect(rc == 2 and "not a regular file" in err, "hostile fifo: rc %d %r" % (rc, err))
    if os.geteuid() != 0:  # root reads anything
        p = os.path.join(work, "unreadable.npy")
        with open(p, "wb") as f:
            f.write(b"x")
        os.chmod(p, 0)
        rc, out, err = run("scan", p)
        expect(rc == 2 and "cannot open: Permission denied" in err, "hostile unreadable: rc %d %r" % (rc, err))
        os.chmod(p, stat.S_IRUSR | stat.S_IWUSR)
    # over the safetensors header limit (a sparse file: nothing past the first bytes is read)
    p = os.path.join(work, "huge_header.safetensors")
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", 100000001) + b"{")
        f.truncate(100000100)
    rc, out, err = run("scan", p)
    expect(rc == 2 and "exceeds the format's limit of 100000000 bytes" in err, "hostile header limit: rc %d %r" % (rc, err))
    # all at once, with a good file in the middle: every error reported, the good file still scanned
    good = os.path.join(work, "good.safetensors")
    write_safetensors(good, [("ok", "F32", [2], st_bits([1.0, 2.0], "f"))])
    rc, out, err = run("scan", *(paths[:20] + [good] + paths[20:]))
    expect(rc == 2, "hostile all: exit %d" % rc)
    expect(sum(1 for l in err.splitlines() if l.startswith("nanscope: file '")) == len(paths),
           "hostile all: %d error lines for %d files" % (len(err.splitlines()), len(paths)))
    expect(good + " 'ok': f32[2]" in out, "hostile all: the good file was not scanned:\n" + out)
    # gaps and an uncovered tail are warnings, not errors
    g = os.path.join(work, "gap.safetensors")
    write_raw_safetensors(g, '{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}}',
                          st_bits([1, 2, 3, 4, 5], "f"))
    rc, out, err = run("scan", g)
    expect(rc == 0 and "warning: 8 bytes of the data section in 2 gaps belong to no tensor (the first: [0, 4))" in err
           and "warning: the last 4 bytes of the data section belong to no tensor" in err,
           "hostile gap: rc %d %r" % (rc, err))
    # unsupported dtypes with --skip-unsupported: skipped, not errors
    u = os.path.join(work, "unsupported.safetensors")
    rc, out, err = run("scan", "--skip-unsupported", u)
    expect(rc == 0 and "skipped (unsupported dtype)" in out and err == "", "hostile --skip-unsupported: rc %d %r %r" % (rc, out, err))
    rc, out, err = run("scan", "--json", "--skip-unsupported", u)
    o = json_lines(out)
    expect(rc == 0 and o[0]["kind"] == "skipped" and o[0]["file_dtype"] == "C64" and o[-1]["skipped"] == 1,
           "hostile --skip-unsupported json: %r" % o)
    # --skip-unsupported skips a .npy of a dtype nanscope cannot check too (complex64: it was an error), with a note
    def npy_file(name, descr, shape, nbytes):
        h = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
        h = h + " " * ((-(len(h) + 11)) % 64) + "\n"
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + bytes(nbytes))
        return path
    c64 = npy_file("complex64.npy", "<c8", "(2, 3)", 48)
    rc, out, err = run("scan", c64)
    expect(rc == 2 and "unsupported dtype descr '<c8'" in err, "hostile complex .npy: rc %d %r" % (rc, err))
    rc, out, err = run("scan", "--skip-unsupported", c64)
    expect(rc == 0 and err == "" and out.splitlines() == [
        c64 + ": <c8[2,3] n=6 skipped (unsupported dtype)",
        "nanscope: OK: 1 file, 0 tensors scanned: 0 with NaN/Inf, 0 errors, 1 skipped (exit 0)"],
        "hostile complex .npy --skip-unsupported: rc %d %r %r" % (rc, out, err))
    rc, out, err = run("scan", "--json", "--skip-unsupported", c64)
    o = json_lines(out)
    expect(rc == 0 and o[0] == {"kind": "skipped", "file": c64, "name": None, "file_dtype": "<c8", "message":
                                "nanscope: file '%s': dtype '<c8' is not supported by nanscope (not scanned)" % c64}
           and o[-1]["skipped"] == 1, "hostile complex .npy --skip-unsupported json: %r" % o)
    others = [npy_file("c128.npy", "<c16", "(2,)", 32), npy_file("str.npy", "<U3", "(2,)", 24),
              npy_file("bytes.npy", "|S5", "(1,)", 5), npy_file("dates.npy", "<M8[ns]", "(3,)", 24)]
    rc, out, err = run("scan", "--skip-unsupported", *others)
    expect(rc == 0 and err == "" and out.count("skipped (unsupported dtype)") == 4, "hostile other dtypes: %d %r %r" % (rc, out, err))
    # skipped, but the layout is still checked: a complex .npy shorter than its shape says is an error
    for bad, msg in ((npy_file("c64_short.npy", "<c8", "(2, 3)", 40), "shorter than the shape says (48 bytes needed, 40"),
                     (npy_file("c64_long.npy", "<c8", "(2, 3)", 50), "2 unexpected trailing bytes")):
        rc, out, err = run("scan", "--skip-unsupported", bad)
        expect(rc == 2 and msg in err, "hostile complex .npy of the wrong size: %d %r" % (rc, err))
    return 0


def group_threads(work):
    """Results do not depend on the thread count (several chunks of a bf16 and an f32 tensor)."""
    n = (1 << 23) + 11
    raw = bytearray(struct.pack("<H", 0x3F80) * n)
    for i, bits in ((3, 0x7FC0), (n - 1, 0xFF80), (1 << 22, 0x47C3), ((1 << 22) + 5, 0x0001), (n // 3, 0x0000)):
        raw[2 * i:2 * i + 2] = struct.pack("<H", bits)
    p = os.path.join(work, "threads.safetensors")
    f32raw = st_bits([float(i % 1000) - 500.0 for i in range(3 * (1 << 20) + 1)], "f")
    write_safetensors(p, [("b", "BF16", [n], bytes(raw)), ("f", "F32", [3 * (1 << 20) + 1], f32raw)])
    results = []
    for t in ("1", "2", "3"):
        rc, out, err = run("scan", "--json", "--stats", "--threads", t, p)
        expect(rc == 1, "threads %s: exit %d" % (t, rc))
        results.append(tensors_of(json_lines(out)))
    expect(results[0] == results[1] == results[2], "threads: results differ between 1, 2 and 3 threads")
    b = results[0][0]
    expect(b["nan"] == 1 and b["neg_inf"] == 1 and b["first_nonfinite"] == 3 and b["zero"] == 1 and b["subnormal"] == 1
           and b["formats"]["f16"]["overflow"] == 1 and b["abs_max"] == "inf", "threads: bf16 result %r" % b)
    return 0


def group_shrink(work):
    """A file that shrinks while it is read (SIGBUS on its mapping): the results of the other files (before and
    after it) and of its tensors read before the fault are reported, then an error record naming the file and the
    offset, the summary; valid JSON Lines; exit 2; also when stdout is a file. The shrink is made deterministic
    by the documented test hook NANSCOPE_TEST_SHRINK_AFTER_MAP=BYTES:PATH (truncation right after the mapping,
    before any page is read)."""
    if np is None:
        return SKIP
    page = os.sysconf("SC_PAGE_SIZE")
    cut = 8192
    fault_at = -(-cut // page) * page  # the first page wholly past the new end of the file
    nanf = os.path.join(work, "nan.npy")
    a = np.ones(5, np.float32)
    a[1] = np.nan
    np.save(nanf, a)
    good = os.path.join(work, "good.npy")
    np.save(good, np.arange(7, dtype=np.float64))
    big = os.path.join(work, "big.npy")
    big_size = [0]

    def fresh_big():
        np.save(big, np.full((1 << 21) + 3, 0.5, np.float32))  # 8 MiB: several pages, pool threads at work
        big_size[0] = os.path.getsize(big)

    def shrink_env(path, to):
        # Under ASan: its own SIGBUS handler (handle_sigbus) would report the fault and abort, but with
        # allow_user_segv_handler=1 (the default, made explicit here) the scanner's sigaction() replaces it, and
        # that handler's recovery is what is tested. The other ASan options of the environment are kept.
        asan = os.environ.get("ASAN_OPTIONS", "")
        return {"NANSCOPE_TEST_SHRINK_AFTER_MAP": "%d:%s" % (to, path),
                "ASAN_OPTIONS": (asan + ":" if asan else "") + "allow_user_segv_handler=1"}

    def check_error(o, path, offset, size, now, label):
        expect(o.get("kind") == "error" and o.get("file") == path and o.get("name") is None, "%s: error record %r" % (label, o))
        msg = o.get("message", "")
        expect(msg == ("nanscope: file '%s': the file shrank while it was being read (SIGBUS at offset %d of the %d bytes"
                       " it had when opened, now %d bytes); its tensors from there on are not reported"
                       % (path, offset, size, now)), "%s: error message %r" % (label, msg))

    for threads in ("1", "2"):
        label = "shrink json -j%s" % threads
        fresh_big()
        rc, out, err = run("scan", "--json", "--threads", threads, nanf, big, good, env=shrink_env(big, cut))
        expect(os.path.getsize(big) == cut, "%s: the hook did not truncate the file (%d bytes)" % (label, os.path.getsize(big)))
        expect(rc == 2, "%s: exit %d, expected 2\n%s" % (label, rc, err))
        objs = json_lines(out)  # strict JSON Lines, the summary last
        expect([o.get("kind") for o in objs] == ["tensor", "error", "tensor", "summary"], "%s: records %r" % (label, objs))
        if len(objs) == 4:
            expect(objs[0]["file"] == nanf and objs[0]["nan"] == 1 and objs[0]["first_nonfinite"] == 1
                   and objs[0]["status"] == "nonfinite", "%s: the NaN of the first file %r" % (label, objs[0]))
            check_error(objs[1], big, fault_at, big_size[0], cut, label)
            expect(objs[2]["file"] == good and objs[2]["nan"] == 0 and objs[2]["zero"] == 1 and objs[2]["positive"] == 6,
                   "%s: the file after it %r" % (label, objs[2]))
            expect(objs[3] == {"kind": "summary", "files": 3, "tensors": 2, "nonfinite_tensors": 1, "overflow_tensors": 0,
                               "errors": 1, "skipped": 0, "warnings": 0, "exit_code": 2}, "%s: summary %r" % (label, objs[3]))
        expect(("the file shrank while it was being read (SIGBUS at offset %d" % fault_at) in err,
               "%s: no message on stderr: %r" % (label, err))

    # text output into a regular file (fully buffered: the case that lost everything when the handler exited)
    fresh_big()
    out_path = os.path.join(work, "report.txt")
    rc, out, err = run("scan", nanf, big, good, env=shrink_env(big, cut), stdout_path=out_path)
    lines = out.splitlines()
    expect(rc == 2 and len(lines) == 3, "shrink text: exit %d, lines %r" % (rc, lines))
    if len(lines) == 3:
        expect(lines[0].startswith(nanf + ": f32[5] n=5 nan=1 ") and lines[0].endswith(" NONFINITE"), "shrink text: %r" % lines[0])
        expect(lines[1].startswith(good + ": f64[7] n=7 nan=0 ") and lines[1].endswith(" ok"), "shrink text: %r" % lines[1])
        expect(lines[2] == "nanscope: ERROR: 3 files, 2 tensors scanned: 1 with NaN/Inf, 1 error (exit 2)",
               "shrink text: verdict %r" % lines[2])
    expect(("nanscope: file '%s': the file shrank while it was being read (SIGBUS at offset %d" % (big, fault_at)) in err,
           "shrink text: stderr %r" % err)

    # safetensors: the tensor before the cut is reported, the one it cuts is not
    st = os.path.join(work, "two.safetensors")
    n_b = 1 << 21
    write_safetensors(st, [("a", "F32", [4], st_bits([1.0, math.nan, -2.0, math.inf], "f")),
                           ("b", "F32", [n_b], st_bits([0.25], "f") * n_b)], align=True)
    st_size = os.path.getsize(st)
    rc, out, err = run("scan", "--json", st, env=shrink_env(st, cut))
    objs = json_lines(out)
    expect(rc == 2 and [o.get("kind") for o in objs] == ["tensor", "error", "summary"], "shrink st: %d %r" % (rc, objs))
    if len(objs) == 3:
        expect(objs[0]["name"] == "a" and objs[0]["nan"] == 1 and objs[0]["pos_inf"] == 1 and objs[0]["negative"] == 1,
               "shrink st: tensor a %r" % objs[0])
        check_error(objs[1], st, fault_at, st_size, cut, "shrink st")
        expect(objs[2]["tensors"] == 1 and objs[2]["errors"] == 1 and objs[2]["exit_code"] == 2, "shrink st: %r" % objs[2])

    # cut to nothing: the fault is in the header; reported as the shrink, not as a malformed file
    fresh_big()
    rc, out, err = run("scan", "--json", big, nanf, env=shrink_env(big, 0))
    objs = json_lines(out)
    expect(rc == 2 and [o.get("kind") for o in objs] == ["error", "tensor", "summary"], "shrink to 0: %d %r" % (rc, objs))
    if objs:
        check_error(objs[0], big, 0, big_size[0], 0, "shrink to 0")
    return 0


def group_write_errors(work):
    """A report that cannot be written (stdout on /dev/full: ENOSPC) is an error: a message on stderr, exit 2,
    whatever the scan found; text and --json, a failure at the final flush and in the middle of the run, and
    --help/--version. The same runs into a regular file succeed (the control)."""
    if not os.path.exists("/dev/full"):
        print("no /dev/full on this system")
        return SKIP
    good = os.path.join(work, "good.safetensors")
    write_safetensors(good, [("a", "F32", [3], st_bits([1.0, 2.0, -2.0], "f"))])
    nanf = os.path.join(work, "nan.safetensors")
    write_safetensors(nanf, [("a", "F32", [2], st_bits([1.0, math.nan], "f"))])
    control = os.path.join(work, "control.txt")
    many = [good] * 60  # about 12 KB of text: stdio's buffer fills, the first failure is in the middle of the run
    for args, ok_rc in ((("scan", good), 0), (("scan", "--json", good), 0), (("scan", nanf), 1),
                        (("scan", "--json", nanf), 1), (("scan", "--quiet", good), 0), (("scan", "--json", "--quiet", nanf), 1),
                        (("scan",) + tuple(many), 0), (("scan", "--json") + tuple(many), 0), (("--help",), 0),
                        (("scan", "--help"), 0), (("--version",), 0)):
        label = " ".join(a if a != good or args.count(good) == 1 else "good" for a in args[:4])
        rc, out, err = run(*args, stdout_path=control)
        expect(rc == ok_rc and len(out) > 0, "write errors: control %s gave %d" % (label, rc))
        rc, _, err = run(*args, stdout_path="/dev/full")
        expect(rc == 2, "write errors: %s > /dev/full exited %d, expected 2" % (label, rc))
        expect(err.count("nanscope: error writing the report to standard output: No space left on device") == 1,
               "write errors: %s > /dev/full: stderr %r" % (label, err[-500:]))
    # a pipe whose reader has gone: killed by SIGPIPE by default (as any POSIX tool); with SIGPIPE ignored
    # (inherited: restore_signals=False keeps Python's SIG_IGN), the EPIPE write error is reported, exit 2
    for ignore in (False, True):
        r, w = os.pipe()
        os.close(r)
        p = subprocess.run([NANSCOPE, "scan", "--json", nanf], stdout=w, stderr=subprocess.PIPE, timeout=300,
                           restore_signals=not ignore)
        os.close(w)
        err = p.stderr.decode("utf-8", "replace")
        if ignore:
            expect(p.returncode == 2 and "error writing the report to standard output: Broken pipe" in err,
                   "write errors: closed pipe, SIGPIPE ignored: %d %r" % (p.returncode, err))
        else:
            expect(p.returncode == -13, "write errors: closed pipe: %d %r (expected death by SIGPIPE)" % (p.returncode, err))
    # stdout closed altogether (EBADF)
    p = subprocess.run([NANSCOPE, "scan", good], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300,
                       preexec_fn=lambda: os.close(1))
    expect(p.returncode == 2 and b"error writing the report to standard output: Bad file descriptor" in p.stderr,
           "write errors: closed stdout: %d %r" % (p.returncode, p.stderr))
    return 0


def group_dashdash(work):
    """`--` ends option parsing wherever it appears: after it every argument is a file, even one named `--` or
    starting with '-'; before it options and files mix as usual."""
    if np is None:
        return SKIP
    np.save(os.path.join(work, "a.npy"), np.array([1.0, np.nan], np.float32))
    np.save(os.path.join(work, "-b.npy"), np.array([1.0, 2.0, 3.0], np.float32))
    with open(os.path.join(work, "--"), "wb") as f:  # a file named "--" (.npy magic, no extension)
        np.save(f, np.array([4.0], np.float64))

    def files_of(out):
        return [o["file"] for o in tensors_of(json_lines(out))]

    rc, out, err = run("scan", "a.npy", "--", "-b.npy", cwd=work)
    lines = out.splitlines()
    expect(rc == 1 and len(lines) == 3 and lines[0].startswith("a.npy: f32[2] n=2 nan=1 ")
           and lines[1].startswith("-b.npy: f32[3] n=3 nan=0 "), "dashdash: scan a.npy -- -b.npy: %d %r %r" % (rc, out, err))
    rc, out, err = run("scan", "--", "-b.npy", cwd=work)
    expect(rc == 0 and out.startswith("-b.npy: f32[3] n=3 "), "dashdash: scan -- -b.npy: %d %r %r" % (rc, out, err))
    rc, out, err = run("scan", "--json", "a.npy", "--", "-b.npy", "--", cwd=work)
    expect(rc == 1 and files_of(out) == ["a.npy", "-b.npy", "--"], "dashdash: the second -- is a file: %d %r %r" % (rc, out, err))
    rc, out, err = run("scan", "--json", "--", "--", "-b.npy", cwd=work)
    expect(rc == 0 and files_of(out) == ["--", "-b.npy"], "dashdash: scan -- -- -b.npy: %d %r %r" % (rc, out, err))
    rc, out, err = run("scan", "-j", "1", "--", "-b.npy", "a.npy", cwd=work)
    expect(rc == 1 and "nan=1" in out and out.startswith("-b.npy:"), "dashdash: options before --: %d %r" % (rc, out))
    # after --, an option's spelling is a file name (here a missing one: exit 2, text output, not JSON)
    rc, out, err = run("scan", "--", "--json", "-b.npy", cwd=work)
    expect(rc == 2 and "nanscope: file '--json': cannot open: No such file or directory" in err
           and out.startswith("-b.npy: f32[3]"), "dashdash: scan -- --json: %d %r %r" % (rc, out, err))
    # `--` also ends the values of a multi-valued option
    rc, out, err = run("scan", "--json", "--fail-on-overflow", "f16", "--", "-b.npy", cwd=work)
    expect(rc == 0 and files_of(out) == ["-b.npy"], "dashdash: --fail-on-overflow f16 -- -b.npy: %d %r %r" % (rc, out, err))
    rc, out, err = run("scan", "--", cwd=work)
    expect(rc == 2 and "files is required" in err, "dashdash: scan -- (no file): %d %r" % (rc, err))
    rc, out, err = run("scan", "-b.npy", cwd=work)
    expect(rc == 2 and out == "", "dashdash: -b.npy without -- is an unknown option: %d %r" % (rc, out))
    return 0


# ---------------------------------------------------------------------------------------------------------------
# .npz archives (numpy.savez / savez_compressed) and a zip writer of our own for the cases numpy does not write
# ---------------------------------------------------------------------------------------------------------------
HAVE_ZLIB = [True]  # --have-zlib 0: the tool was built without zlib (no .npz support): the npz groups are skipped


def zip_archive(members, zip64_end=False, cd_zip64=False, comment=b"", end_override=None, cd_extra_bytes=b""):
    """A zip file written here from the format's description (independent of nanscope's reader and of Python's
    zipfile). members: dicts with name (str), data (the member's bytes) and optional method (0 stored, 8
    deflate), compressed (raw bytes to store instead of the compressed data), crc, csize, usize (as the
    directories say), flags, descriptor (a data descriptor after the data), local_name, offset (the central
    directory's local header offset). zip64_end: a zip64 end record and locator; cd_zip64: sizes and offsets in
    a zip64 extra field (0xFFFFFFFF in the 32-bit fields). end_override: fields of the end record to replace."""
    import zlib
    out = b""
    entries = []
    for m in members:
        name = m["name"].encode("utf-8")
        data = m["data"]
        method = m.get("method", 0)
        if "compressed" in m:
            comp = m["compressed"]
        elif method == 8:
            c = zlib.compressobj(6, zlib.DEFLATED, -15)
            comp = c.compress(data) + c.flush()
        else:
            comp = data
        crc = m.get("crc", zlib.crc32(data) & 0xFFFFFFFF)
        csize, usize = m.get("csize", len(comp)), m.get("usize", len(data))
        flags = m.get("flags", 0) | (8 if m.get("descriptor") else 0)
        offset = len(out)
        lname = m.get("local_name", m["name"]).encode("utf-8")
        if m.get("descriptor"):
            local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, method, 0, 0x21, 0, 0, 0, len(lname), 0)
        else:
            local = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, flags, method, 0, 0x21, crc, csize & 0xFFFFFFFF,
                                usize & 0xFFFFFFFF, len(lname), 0)
        out += local + lname + comp
        if m.get("descriptor"):
            out += struct.pack("<IIII", 0x08074B50, crc, csize, usize)
        entries.append((name, method, flags, crc, csize, usize, m.get("offset", offset)))
    cd_offset = len(out)
    cd = b""
    for name, method, flags, crc, csize, usize, offset in entries:
        extra = b""
        if cd_zip64:
            extra = struct.pack("<HHQQQ", 1, 24, usize, csize, offset)
            csize = usize = offset = 0xFFFFFFFF
        cd += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, flags, method, 0, 0x21, crc, csize, usize, len(name),
                          len(extra), 0, 0, 0, 0, offset) + name + extra
    cd += cd_extra_bytes
    out += cd
    n = len(entries)
    end = {"disk": 0, "cd_disk": 0, "n_disk": n, "n": n, "cd_size": len(cd), "cd_offset": cd_offset}
    if zip64_end:
        z64_offset = len(out)
        out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, len(cd), cd_offset)
        out += struct.pack("<IIQI", 0x07064B50, 0, z64_offset, 1)
        end.update(n_disk=0xFFFF, n=0xFFFF, cd_size=0xFFFFFFFF, cd_offset=0xFFFFFFFF)
    end.update(end_override or {})
    out += struct.pack("<IHHHHIIH", 0x06054B50, end["disk"], end["cd_disk"], end["n_disk"], end["n"], end["cd_size"],
                       end["cd_offset"], len(comment)) + comment
    return out


def npy_bytes(a):
    """The .npy file numpy writes for an array (numpy's own writer)."""
    import io
    b = io.BytesIO()
    np.lib.format.write_array(b, a, allow_pickle=False)
    return b.getvalue()


def npz_arrays(rng):
    """Arrays of several dtypes with planted NaN/Inf (name -> array): what the npz groups store."""
    a32 = planted(rng, 24, np.float32, nan_at=[17], pinf_at=[20], extra=[(3, 70000.0)]).reshape(4, 6)
    return {
        "f64": planted(rng, 30, np.float64, ninf_at=[7], extra=[(2, 1e300)]).reshape(3, 10),
        "f32": a32,
        "f16": planted(rng, 16, np.float16, nan_at=[15]).reshape(2, 2, 4),
        "be_f32": planted(rng, 12, np.dtype(">f4"), pinf_at=[4]).reshape(3, 4),
        "fortran": np.asfortranarray(planted(rng, 60, np.float32, nan_at=[37], ninf_at=[58]).reshape(3, 4, 5)),
        "finite": (rng.standard_normal((5, 5)) * 10).astype(np.float32),
        "ints": np.arange(10, dtype=np.int64).reshape(2, 5),
        "flags": np.array([True, False, True]),
        "empty": np.zeros((0, 4), np.float32),
        "scalar": np.array(np.float64(np.nan)),
        "big": np.zeros(600000, np.float32),  # 2.4 MB of zeros: deflate's best ratio, several inflate calls
    }


def check_npz_report(path, arrays, out, label):
    """The JSON report of an archive holding `arrays`: one tensor per member, file "<path>:<key>", in order."""
    objs = tensors_of(json_lines(out))
    expect([o["file"] for o in objs] == ["%s:%s" % (path, k) for k in arrays],
           "%s: tensors %r, expected the members %r" % (label, [o["file"] for o in objs], list(arrays)))
    for o, (k, a) in zip(objs, arrays.items()):
        expect(o["name"] is None and o["shape"] == list(a.shape) and o["count"] == a.size, "%s %s: %r" % (label, k, o))
        if a.dtype.kind == "f":
            dt = {2: "f16", 4: "f32", 8: "f64"}[a.dtype.itemsize]
            vals = npy_values(a) if a.size != 600000 else None
            if vals is None:
                exp = expected([0.0], dt)
                exp.update(count=a.size, zero=a.size)
            else:
                exp = expected(vals, dt)
            compare_tensor(o, exp, dt, "%s %s" % (label, k))
        else:
            expect(o["checked"] is False and o["status"] == "ok", "%s %s: %r" % (label, k, o))


def group_npz(work):
    """.npz archives written by numpy (savez: stored members; savez_compressed: deflated), several dtypes, C and
    Fortran order, big-endian, an empty and a 0-d array; each member reported as '<file>:<key>' as numpy names it;
    the same results as the members saved as .npy files; zip64 records and data descriptors (written here)."""
    if np is None or not HAVE_ZLIB[0]:
        return SKIP
    import io
    import zipfile
    rng = np.random.default_rng(99)
    arrays = npz_arrays(rng)
    stored = os.path.join(work, "stored.npz")
    np.savez(stored, **arrays)
    packed = os.path.join(work, "packed.npz")
    np.savez_compressed(packed, **arrays)
    with zipfile.ZipFile(packed) as z:
        expect({i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}, "npz: savez_compressed did not deflate")
    with zipfile.ZipFile(stored) as z:
        expect({i.compress_type for i in z.infolist()} == {zipfile.ZIP_STORED}, "npz: savez did not store")
    for path in (stored, packed):
        label = "npz " + os.path.basename(path)
        rc, out, err = run("scan", "--json", path)
        expect(rc == 1 and err == "", "%s: exit %d, expected 1 (NaN found)\n%s" % (label, rc, err))
        check_npz_report(path, arrays, out, label)
        # one thread and small chunks read the same (--threads 1)
        rc1, out1, _ = run("scan", "--json", "--threads", "1", path)
        expect(rc1 == rc and tensors_of(json_lines(out1)) == tensors_of(json_lines(out)), "%s: -j1 differs" % label)
    # the members as .npy files give the same reports (but for the file names)
    npys = []
    for k, a in arrays.items():
        p = os.path.join(work, k + ".npy")
        np.save(p, a)
        npys.append(p)
    _, out_npy, _ = run("scan", "--json", *npys)
    _, out_npz, _ = run("scan", "--json", packed)
    strip = lambda objs: [dict(o, file=None) for o in tensors_of(json_lines(objs))]
    expect(strip(out_npy) == strip(out_npz), "npz: the compressed members and the same arrays as .npy differ")
    # text: one line per member, named <file>:<key>, the first NaN/Inf by its index
    rc, out, err = run("scan", packed)
    lines = out.splitlines()
    expect(len(lines) == len(arrays) + 1 and all(l.startswith(packed + ":") for l in lines[:-1]),
           "npz text: %r" % lines)
    f32_line = next((l for l in lines if l.startswith(packed + ":f32: ")), "")
    expect(" first_nonfinite=[2, 5] (flat 17) " in f32_line, "npz text: the index of f32's NaN in %r" % f32_line)
    expect(lines[-1] == "nanscope: FAIL: 1 file, %d tensors scanned: 6 with NaN/Inf, 0 errors (exit 1)" % len(arrays),
           "npz text: verdict %r" % lines[-1:])
    # an archive with no member (numpy.savez with no array): no tensor, exit 0
    empty = os.path.join(work, "none.npz")
    np.savez(empty)
    rc, out, err = run("scan", empty)
    expect(rc == 0 and err == "" and out.startswith("nanscope: OK: 1 file, 0 tensors"), "npz empty: %d %r %r" % (rc, out, err))

    # data descriptors: what zipfile writes to a stream it cannot seek back in (flag bit 3, sizes after the data)
    class Unseekable(io.RawIOBase):
        def __init__(self, f):
            self.f = f

        def writable(self):
            return True

        def write(self, b):
            return self.f.write(b)

    desc = os.path.join(work, "descriptor.npz")
    small = {k: arrays[k] for k in ("f32", "fortran", "scalar", "ints")}
    with open(desc, "wb") as raw:
        with zipfile.ZipFile(Unseekable(raw), "w", zipfile.ZIP_DEFLATED) as z:
            for k, a in small.items():
                with z.open(k + ".npy", "w") as w:
                    w.write(npy_bytes(a))
    with zipfile.ZipFile(desc) as z:
        expect(all(i.flag_bits & 8 for i in z.infolist()), "npz: zipfile wrote no data descriptor")
    rc, out, err = run("scan", "--json", desc)
    expect(rc == 1 and err == "", "npz descriptor: exit %d %r" % (rc, err))
    check_npz_report(desc, small, out, "npz descriptor")
    # zip64: the end record, its locator, and sizes and offsets in zip64 extra fields; stored and deflated
    for method in (0, 8):
        z64 = os.path.join(work, "zip64_%d.npz" % method)
        with open(z64, "wb") as f:
            f.write(zip_archive([{"name": k + ".npy", "data": npy_bytes(a), "method": method} for k, a in small.items()],
                                zip64_end=True, cd_zip64=True, comment=b"written by cli_test.py"))
        with zipfile.ZipFile(z64) as z:  # Python's reader agrees that the archive is sound
            expect(z.testzip() is None, "npz zip64: zipfile finds the hand-written archive broken")
        rc, out, err = run("scan", "--json", z64)
        expect(rc == 1 and err == "", "npz zip64 method %d: exit %d %r" % (method, rc, err))
        check_npz_report(z64, small, out, "npz zip64 method %d" % method)
    # --skip-unsupported: a complex64 member is skipped with a note, the others scanned
    cx = os.path.join(work, "complex.npz")
    np.savez_compressed(cx, c=np.ones((2, 3), np.complex64), f32=arrays["f32"])
    rc, out, err = run("scan", cx)
    expect(rc == 2 and "nanscope: file '%s': member 'c.npy': unsupported dtype descr '<c8'" % cx in err,
           "npz complex: %d %r" % (rc, err))
    rc, out, err = run("scan", "--skip-unsupported", cx)
    expect(rc == 1 and out.startswith("%s:c: <c8[2,3] n=6 skipped (unsupported dtype)\n" % cx) and err == ""
           and "1 skipped" in out, "npz complex --skip-unsupported: %d %r %r" % (rc, out, err))
    # a member that is not a .npy array: a warning, not scanned
    other = os.path.join(work, "other.npz")
    with open(other, "wb") as f:
        f.write(zip_archive([{"name": "readme.txt", "data": b"hello"},
                             {"name": "x.npy", "data": npy_bytes(arrays["finite"]), "method": 8}]))
    rc, out, err = run("scan", "--json", other)
    objs = json_lines(out)
    expect(rc == 0 and [o["kind"] for o in objs] == ["warning", "tensor", "summary"]
           and "member 'readme.txt' is not a .npy array" in objs[0]["message"], "npz other member: %d %r" % (rc, objs))
    return 0


def group_npz_hostile(work):
    """Damaged and hostile archives: each one exit 2 with an error naming the file (and the member) and the
    problem; never a crash, a hang, or memory in proportion to what a member claims."""
    if np is None or not HAVE_ZLIB[0]:
        return SKIP
    import zlib
    good = npy_bytes(np.array([1.0, 2.0, np.nan], np.float32))
    good2 = npy_bytes(np.arange(6, dtype=np.float64).reshape(2, 3))
    real = os.path.join(work, "real.npz")
    np.savez_compressed(real, a=np.zeros(1000, np.float32), b=np.ones((4, 4)))
    real_bytes = open(real, "rb").read()

    def deflated(data):
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return c.compress(data) + c.flush()

    corrupt = bytearray(deflated(good))
    corrupt[0] = 0x07  # BTYPE 11: a reserved block type
    noise_npy = npy_bytes(np.random.default_rng(5).standard_normal(4000))  # 32 KB that deflate barely shrinks
    # (file name, archive bytes, expected text in the error, member the error names or None)
    M = lambda **kw: dict({"name": "a.npy", "data": good}, **kw)
    cases = [
        ("tiny.npz", b"PK\x05\x06", "not a zip archive (.npz): only 4 bytes", None),
        ("truncated_half.npz", real_bytes[:len(real_bytes) // 2], "no end of central directory record", None),
        ("truncated_end.npz", real_bytes[:-1], "no end of central directory record", None),
        ("not_zip.npz", b"PK\x03\x04" + b"\x00" * 100, "no end of central directory record", None),
        ("cd_offset_past_end.npz", zip_archive([M()], end_override={"cd_offset": 0x7FFFFFFF}),
         "runs past the end of central directory record", None),
        ("cd_size_past_end.npz", zip_archive([M()], end_override={"cd_size": 0x7FFFFFFF}),
         "runs past the end of central directory record", None),
        ("too_many_entries.npz", zip_archive([M()], end_override={"n": 60000, "n_disk": 60000}),
         "counts 60000 members, more than a central directory of", None),
        ("multi_disk.npz", zip_archive([M()], end_override={"disk": 1}), "multi-disk", None),
        ("zip64_markers_no_locator.npz", zip_archive([M()], end_override={"cd_offset": 0xFFFFFFFF}),
         "no zip64 locator precedes it", None),
        ("bad_local_offset.npz", zip_archive([M(offset=7)]), "member 'a.npy': no local header at offset 7", None),
        ("local_offset_past_cd.npz", zip_archive([M(offset=0x7FFFFFF0)]), "member 'a.npy': its local header", None),
        ("cd_trailing.npz", zip_archive([M()], cd_extra_bytes=b"junk"), "bytes after its 1 entries", None),
        ("name_mismatch.npz", zip_archive([M(local_name="b.npy")]), "member 'a.npy': its local header names it 'b.npy'", None),
        ("data_past_cd.npz", zip_archive([M(csize=len(good) + 500, usize=len(good) + 500)]),
         "member 'a.npy': its %d bytes of data" % (len(good) + 500), None),
        ("stored_huge_claim.npz", zip_archive([M(usize=1 << 40)], cd_zip64=True),
         "member 'a.npy' is stored (not compressed), but its sizes differ", None),
        ("deflate_huge_claim.npz", zip_archive([M(method=8, usize=1 << 40)], cd_zip64=True),
         "claims 1099511627776 bytes inflated from", None),
        ("ratio_guard.npz", zip_archive([M(method=8, usize=len(deflated(good)) * 1040 + 5000)]),
         "more than deflate can produce (at most 1032 to 1): a damaged archive or a zip bomb", None),
        ("duplicate.npz", zip_archive([M(), M()]), "member 'a.npy' appears twice", None),
        ("encrypted.npz", zip_archive([M(flags=1)]), "member 'a.npy' is encrypted", None),
        ("bzip2.npz", zip_archive([M(method=12)]), "compression method 12 (bzip2) is not supported", None),
        # members
        ("corrupt_deflate.npz", zip_archive([M(method=8, compressed=bytes(corrupt)), {"name": "b.npy", "data": good2}]),
         "corrupt deflate data: invalid block type", "a"),
        ("crc_stored.npz", zip_archive([M(crc=0x12345678)]), "the central directory says 12345678", "a"),
        ("crc_deflated.npz", zip_archive([M(method=8, crc=0x12345678)]), "the central directory says 12345678", "a"),
        ("stream_cut.npz", zip_archive([M(method=8, compressed=deflated(noise_npy)[:9000], usize=len(noise_npy))]),
         "the compressed data ends before the deflate stream does (a truncated member)", "a"),
        ("stream_short.npz", zip_archive([M(method=8, compressed=deflated(good2[:-8]), usize=len(good2))]),
         "the deflate stream ends after %d bytes, but the central directory says %d" % (len(good2) - 8, len(good2)), "a"),
        # the stream inflates to far more than the directory says: inflation stops there
        ("stream_longer.npz", zip_archive([M(method=8, compressed=deflated(good + bytes(4 << 20)), usize=len(good),
                                              crc=zlib.crc32(good))]),
         "the deflate stream holds more than the %d bytes the central directory says" % len(good), "a"),
        ("stream_trailing.npz", zip_archive([M(method=8, compressed=deflated(good) + b"xyz", usize=len(good))]),
         "3 bytes of compressed data follow the end of the deflate stream", "a"),
        ("member_not_npy.npz", zip_archive([M(data=b"not an array at all")]), "member 'a.npy': not an .npy file", "a"),
        ("member_truncated_npy.npz", zip_archive([M(method=8, data=good[:-2])]),
         "member 'a.npy': truncated: the data is shorter than the shape says", "a"),
        ("member_huge_header.npz", zip_archive([M(method=8, data=b"\x93NUMPY\x02\x00" + struct.pack("<I", 3 << 20)
                                                    + b" " * (3 << 20))]),
         "over the limit of 1 MiB", "a"),
    ]
    # a member whose bytes overlap another's (the "overlapping files" zip bomb): A's data holds B's local header
    inner = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 0, 0, 0, zlib.crc32(good), len(good), len(good), 5, 0) + b"b.npy" + good
    ov = zip_archive([{"name": "a.npy", "data": inner}])
    ov_cd = ov.index(b"PK\x01\x02")
    b_cd = struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 0, 0, 0, zlib.crc32(good), len(good), len(good), 5, 0,
                       0, 0, 0, 0, 35) + b"b.npy"
    cd = ov[ov_cd:ov.index(b"PK\x05\x06")] + b_cd
    cases.append(("overlap.npz", ov[:ov_cd] + cd + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 2, 2, len(cd), ov_cd, 0),
                  "member 'b.npy' (local header at offset 35) overlaps member 'a.npy'", None))
    paths = []
    for name, data, msg, member in cases:
        p = os.path.join(work, name)
        with open(p, "wb") as f:
            f.write(data)
        paths.append(p)
        rc, out, err = run("scan", "--json", p)
        expect(rc == 2, "npz hostile %s: exit %d, expected 2\n%s%s" % (name, rc, out, err))
        prefix = "nanscope: file '%s': " % p + ("member '%s.npy': " % member if member else "")
        expect(prefix in err, "npz hostile %s: the error does not name the file%s: %r"
               % (name, " and the member" if member else "", err))
        expect(msg in err, "npz hostile %s: expected %r in the error, got %r" % (name, msg, err))
        objs = json_lines(out)
        errors = [o for o in objs if o.get("kind") == "error"]
        expect(len(errors) == 1 and errors[0]["file"] == (p + ":" + member if member else p),
               "npz hostile %s: error records %r" % (name, errors))
        if name == "corrupt_deflate.npz":  # the next member is still read
            expect([o["file"] for o in tensors_of(objs)] == [p + ":b"], "npz hostile: the member after a bad one %r" % objs)
    # all at once, with a good archive in the middle: every error reported, the good one scanned
    rc, out, err = run("scan", *(paths[:10] + [real] + paths[10:]))
    expect(rc == 2 and sum(1 for l in err.splitlines() if l.startswith("nanscope: file '")) == len(paths)
           and (real + ":b: f64[4,4]") in out, "npz hostile all: %d\n%s\n%s" % (rc, out, err))
    return 0


def group_recursive(work):
    """scan -r: every .npy/.npz/.safetensors file under a directory, depth first in byte order of the names, the
    same report per file; a link loop is reported (a warning) and not followed round; dangling links are reported;
    an unreadable directory is an error; never a hang. Without -r a directory says -r is needed."""
    root = os.path.join(work, "tree")
    os.makedirs(os.path.join(root, "sub", "deeper"))
    os.makedirs(os.path.join(root, "B"))
    os.makedirs(os.path.join(root, "empty"))
    write_safetensors(os.path.join(root, "b.safetensors"), [("w", "F32", [2], st_bits([1.0, math.nan], "f"))])
    write_safetensors(os.path.join(root, "a.safetensors"), [("w", "F32", [1], st_bits([1.0], "f"))])
    write_safetensors(os.path.join(root, "B", "x.safetensors"), [("w", "F32", [1], st_bits([2.0], "f"))])
    write_safetensors(os.path.join(root, "sub", "deeper", "d.SAFETENSORS"), [("w", "F32", [1], st_bits([3.0], "f"))])
    write_safetensors(os.path.join(root, "sub", "c.safetensors"), [("w", "F32", [1], st_bits([math.inf], "f"))])
    with open(os.path.join(root, "notes.txt"), "w") as f:
        f.write("not a tensor file\n")
    os.symlink("..", os.path.join(root, "sub", "loop"))          # back to the root: a loop
    os.symlink("a.safetensors", os.path.join(root, "link.safetensors"))  # a link to a file: scanned under its name
    os.symlink("self", os.path.join(root, "self"))                # a link to itself (ELOOP)
    os.symlink("missing", os.path.join(root, "dangling"))        # leads nowhere, a name scan does not read
    j = lambda *p: os.path.join(root, *p)
    order = [j("B", "x.safetensors"), j("a.safetensors"), j("b.safetensors"), j("link.safetensors"),
             j("sub", "c.safetensors"), j("sub", "deeper", "d.SAFETENSORS")]
    rc, out, err = run("scan", "--json", "-r", root)
    objs = json_lines(out)
    expect([o["file"] for o in tensors_of(objs)] == order, "recursive: files %r, expected %r" % (
        [o["file"] for o in tensors_of(objs)], order))
    warnings = [o["message"] for o in objs if o["kind"] == "warning"]
    expect(len(warnings) == 3 and rc == 1, "recursive: exit %d, warnings %r" % (rc, warnings))
    expect(any(("nanscope: file '%s': warning: a directory already scanned" % j("sub", "loop")) in w for w in warnings),
           "recursive: the loop is not reported: %r" % warnings)
    expect(any(("'%s': warning: a symbolic link that cannot be followed (Too many levels of symbolic links)" % j("self")) in w
               for w in warnings), "recursive: the self link is not reported: %r" % warnings)
    expect(any(("'%s': warning: a symbolic link that cannot be followed (No such file or directory)" % j("dangling")) in w
               for w in warnings), "recursive: the dangling link is not reported: %r" % warnings)
    expect(objs[-1:] and objs[-1]["files"] == 6 and objs[-1]["nonfinite_tensors"] == 2 and objs[-1]["errors"] == 0,
           "recursive: summary %r" % objs[-1:])
    # text: the same report per file as when the files are named one by one
    rc_r, out_r, _ = run("scan", "--recursive", root)
    rc_f, out_f, _ = run("scan", *order)
    expect(rc_r == rc_f == 1 and out_r == out_f, "recursive text differs from the files named:\n%s\n%s" % (out_r, out_f))
    # the same files again through a second name of the tree: still no loop, same order
    rc, out, err = run("scan", "--json", "-r", root + "/")
    expect([o["file"] for o in tensors_of(json_lines(out))] == [root + "/" + p[len(root) + 1:] for p in order],
           "recursive with a trailing slash: %r" % out)
    # a dangling link with a name scan reads is an error (exit 2), like a missing file
    os.symlink("missing.npy", os.path.join(root, "sub", "gone.npy"))
    rc, out, err = run("scan", "-r", os.path.join(root, "sub"))
    expect(rc == 2 and ("nanscope: file '%s': cannot open: No such file or directory" % j("sub", "gone.npy")) in err,
           "recursive dangling .npy: %d %r" % (rc, err))
    os.unlink(os.path.join(root, "sub", "gone.npy"))
    # an empty directory: nothing scanned, exit 0
    rc, out, err = run("scan", "-r", j("empty"))
    expect(rc == 0 and out.startswith("nanscope: OK: 0 files"), "recursive empty: %d %r %r" % (rc, out, err))
    # without -r: the directory is an error that names -r
    rc, out, err = run("scan", root)
    expect(rc == 2 and ("nanscope: file '%s': is a directory (-r / --recursive scans" % root) in err,
           "recursive: a directory without -r: %d %r" % (rc, err))
    # an unreadable directory is an error, the rest is scanned (as nobody when run as root: root reads anything)
    locked = j("locked")
    os.makedirs(locked)
    write_safetensors(os.path.join(locked, "z.safetensors"), [("w", "F32", [1], st_bits([1.0], "f"))])
    os.chmod(locked, 0)
    preexec = None
    can = True
    if os.geteuid() == 0:
        preexec = lambda: os.setuid(65534)
        d = root  # nobody must reach the tree: every parent searchable by others
        while d not in ("/", ""):
            if not os.stat(d).st_mode & stat.S_IXOTH:
                can = False
            d = os.path.dirname(d)
    if can:
        p = subprocess.run([NANSCOPE, "scan", "-r", root], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
                           preexec_fn=preexec)
        err = p.stderr.decode("utf-8", "replace")
        expect(p.returncode == 2 and ("nanscope: file '%s': cannot read the directory: Permission denied" % locked) in err
               and p.stdout.decode().count("\n") == len(order) + 1, "recursive unreadable: %d %r %r" % (p.returncode, p.stdout, err))
    else:
        print("recursive: the unreadable-directory case is skipped (the work directory is not reachable by others)")
    os.chmod(locked, stat.S_IRWXU)
    return 0


def group_messages(work):
    """What a first-time user meets: a misspelt subcommand, each subcommand's own exit codes in its --help, the
    report's line on success, --version of the project's version, and the first NaN/Inf of the text output named
    by its index as the demo names it."""
    rc, out, err = run("scna", "x.npy")
    expect(rc == 2 and out == "" and err.startswith("nanscope: unknown subcommand 'scna'; did you mean 'scan'?\n")
           and "scan, report" in err and "A subcommand is required" not in err, "messages: scna: %d %r" % (rc, err))
    rc, out, err = run("frobnicate")
    expect(rc == 2 and "unknown subcommand 'frobnicate'\n" in err and "did you mean" not in err, "messages: %r" % err)
    rc, out, err = run("\x1b[2Jx")
    expect(rc == 2 and "'\\x1b[2Jx'" in err, "messages: the unknown word is not escaped: %r" % err)
    rc, scan_help, _ = run("scan", "--help")
    expect(rc == 0 and "Exit status (scan): 0 every tensor finite" in scan_help and "report)" not in scan_help,
           "messages: scan --help: %r" % scan_help)
    if REPORT[0]:
        rc, report_help, _ = run("report", "--help")
        expect(rc == 0 and "Exit status (report): 0 the page was written; 2 bad input" in report_help
               and "NaN/Inf" not in report_help and "fail-on-overflow" not in report_help,
               "messages: report --help lists other exit codes: %r" % report_help)
        src = os.path.join(work, "s.safetensors")
        write_safetensors(src, [("w", "F32", [2], st_bits([1.0, 2.0], "f"))])
        jl = os.path.join(work, "scan.jsonl")
        with open(jl, "w") as f:
            f.write(run("scan", "--json", src)[1])
        page = os.path.join(work, "page\x01.html")
        rc, out, err = run("report", jl, "-o", page)
        size = os.path.getsize(page) if os.path.exists(page) else -1
        expect(rc == 0 and err == "" and out == "nanscope: report written to '%s' (%d bytes, 1 input)\n"
               % (page.replace("\x01", "\\x01"), size), "messages: report: %d %r %r" % (rc, out, err))
    rc, out, _ = run("--help")
    expect(rc == 0 and "Exit status (scan)" in out and (not REPORT[0] or "Exit status (report)" in out), "messages: --help %r" % out)
    if VERSION[0]:
        rc, out, _ = run("--version")
        expect(rc == 0 and out == "nanscope %s\n" % VERSION[0], "messages: --version %r, expected nanscope %s" % (out, VERSION[0]))
    # the demo's tensor: f64[4,1000] with a NaN at [2, 517]
    v = [0.5] * 4000
    v[2 * 1000 + 517] = math.nan
    p = os.path.join(work, "logits.safetensors")
    write_safetensors(p, [("logits", "F64", [4, 1000], st_bits(v, "d"))])
    rc, out, _ = run("scan", p)
    expect(" first_nonfinite=[2, 517] (flat 2517) " in out, "messages: the index of the first NaN: %r" % out)
    rc, out, _ = run("scan", "--json", p)
    o = tensors_of(json_lines(out))
    expect(len(o) == 1 and o[0]["first_nonfinite"] == 2517 and o[0].get("first_nonfinite_index") == [2, 517],
           "messages: JSON index %r" % o)
    return 0


GROUPS = {"npy": group_npy, "safetensors": group_safetensors, "json": group_json, "exit_codes": group_exit_codes,
          "hostile": group_hostile, "threads": group_threads, "shrink": group_shrink, "write_errors": group_write_errors,
          "dashdash": group_dashdash, "npz": group_npz, "npz_hostile": group_npz_hostile, "recursive": group_recursive,
          "messages": group_messages}
VERSION = [None]  # --version-expected: the project's version (CMakeLists.txt)
REPORT = [True]   # --have-report 0: the tool was built without `nanscope report` (no nlohmann-json)


def main():
    global NANSCOPE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nanscope", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--group", action="append", choices=sorted(GROUPS))
    ap.add_argument("--version-expected", help="the project's version, which --version must print")
    ap.add_argument("--have-zlib", type=int, default=1, help="0: built without zlib (no .npz): npz groups skipped")
    ap.add_argument("--have-report", type=int, default=1, help="0: built without `nanscope report`")
    args = ap.parse_args()
    NANSCOPE = os.path.abspath(args.nanscope)
    VERSION[0] = args.version_expected
    HAVE_ZLIB[0] = args.have_zlib != 0
    REPORT[0] = args.have_report != 0
    skipped = 0
    for g in args.group or sorted(GROUPS):
        work = os.path.join(os.path.abspath(args.work), g)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        before, checks_before = len(FAILURES), CHECKS[0]
        rc = GROUPS[g](work)
        if rc == SKIP:
            print("SKIP %s (numpy is not installed for %s, or the group needs what this system lacks)" % (g, sys.executable))
            skipped += 1
            continue
        print("%s %s (%d checks)" % ("PASS" if len(FAILURES) == before else "FAIL", g, CHECKS[0] - checks_before))
        if len(FAILURES) == before:
            shutil.rmtree(work, ignore_errors=True)
    if FAILURES:
        print("%d check(s) failed" % len(FAILURES))
        return 1
    return SKIP if skipped and skipped == len(args.group or GROUPS) else 0


if __name__ == "__main__":
    sys.exit(main())
