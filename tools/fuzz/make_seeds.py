#!/usr/bin/env python3
"""Writes the hand-made seed corpora of the fuzz targets: corpus/npy/ and corpus/safetensors/.

Small valid files (every dtype family, Fortran and big-endian .npy, 0-d and empty arrays, NaN/Inf, values past
the fp16 and fp8 ranges) and small invalid ones (each a hostile case of docs/cli.md). Standard library only;
run it from anywhere: python3 tools/fuzz/make_seeds.py. Findings of fuzzing runs that were fixed are kept next
to the seeds as regress-*.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def npy(descr, shape, data, fortran=False, version=1, raw_dict=None):
    d = raw_dict if raw_dict is not None else "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, "True" if fortran else "False", "".join("%d, " % s for s in shape) if len(shape) != 1 else "%d," % shape[0])
    pre = 10 if version == 1 else 12
    total = (pre + len(d) + 1 + 63) // 64 * 64
    d = d + " " * (total - pre - len(d) - 1) + "\n"
    hl = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + hl + d.encode() + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


INF, NAN = float("inf"), float("nan")

NPY = {
    "f32_c.npy": npy("<f4", (2, 3), f32(1, -2, 0, NAN, 5, INF)),
    "f64_fortran_be.npy": npy(">f8", (2, 2), struct.pack(">4d", 1.0, -INF, 3.0, 1e300), fortran=True),
    "f16.npy": npy("<f2", (4,), struct.pack("<4H", 0x3C00, 0x7C00, 0x7E00, 0x0001)),
    "f16_be_fortran3d.npy": npy(">f2", (2, 1, 2), struct.pack(">4H", 0x3C00, 0xFC00, 0x0000, 0x8001), fortran=True),
    "i8.npy": npy("|i1", (3,), bytes([1, 255, 0])),
    "u64_be.npy": npy(">u8", (1,), struct.pack(">Q", 7)),
    "bool.npy": npy("|b1", (2,), bytes([0, 1])),
    "scalar_0d.npy": npy("<f4", (), f32(70000.0)),
    "empty.npy": npy("<f4", (0, 3), b""),
    "bfloat16_named.npy": npy("bfloat16", (2,), struct.pack("<2H", 0x7F80, 0x4480)),
    "e4m3_named.npy": npy("float8_e4m3fn", (3,), bytes([0x7F, 0x7E, 0x01])),
    "e5m2_f1.npy": npy("<f1", (2,), bytes([0x7C, 0x3C])),
    "void2.npy": npy("<V2", (2,), struct.pack("<2H", 0x7FC0, 0x3F80)),
    "void1.npy": npy("|V1", (1,), bytes([0x7F])),
    "v2_header.npy": npy("<f4", (1,), f32(1), version=2),
    "unaligned.npy": b"\x93NUMPY\x01\x00" + struct.pack("<H", 63) + b"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }".ljust(62) + b"\n" + struct.pack("<2d", NAN, 1.0),
    # invalid
    "bad_magic.npy": b"\x93NUMPX\x01\x00\x10\x00" + b" " * 15 + b"\n",
    "truncated_data.npy": npy("<f4", (4,), f32(1, 2, 3)),
    "trailing.npy": npy("<f4", (1,), f32(1) + b"\0"),
    "header_past_end.npy": b"\x93NUMPY\x01\x00\xff\x7f{'descr'",
    "huge_product.npy": npy("<f4", (4294967296, 4294967296), f32(1)),
    "rank9.npy": npy("<f4", (1,) * 9, f32(1)),
    "structured.npy": npy(None, None, f32(1), raw_dict="{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }"),
    "dup_key.npy": npy(None, None, f32(1), raw_dict="{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,), }"),
    "version3.npy": b"\x93NUMPY\x03\x00" + npy("<f4", (1,), f32(1))[8:],
}


def st(tensors, meta=None, pad=b"", raw_header=None, extra=b""):
    hdr, data = {}, b""
    if meta is not None:
        hdr["__metadata__"] = meta
    for name, (dt, shape, raw) in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = raw_header if raw_header is not None else json.dumps(hdr, separators=(",", ":")).encode() + pad
    return struct.pack("<Q", len(h)) + h + data + extra


def raw_st(header, data):
    h = header.encode() if isinstance(header, str) else header
    return struct.pack("<Q", len(h)) + h + data


ST = {
    "mixed.safetensors": st([("w", ("F32", [2, 2], f32(1, NAN, -INF, 70000.0))),
                             ("b", ("BF16", [3], struct.pack("<3H", 0x3F80, 0x7F80, 0x4480))),
                             ("h", ("F16", [2], struct.pack("<2H", 0x7C00, 0x3C00)))], meta={"format": "pt"}, pad=b"  "),
    "fp8.safetensors": st([("e4", ("F8_E4M3", [4], bytes([0x7F, 0x7E, 0xFF, 0x01]))), ("e5", ("F8_E5M2", [2], bytes([0x7C, 0x7B])))]),
    "ints.safetensors": st([("i", ("I64", [2], struct.pack("<2q", -1, 2))), ("m", ("BOOL", [3], bytes([0, 1, 1]))),
                            ("u", ("U16", [1], b"\1\0"))]),
    "f64_0d_empty.safetensors": st([("s", ("F64", [], struct.pack("<d", 1e300))), ("e", ("F32", [0, 5], b""))]),
    "unsupported.safetensors": st([("c", ("C64", [1], f32(1, 2))), ("f4", ("F4", [2], b"\x12")), ("x", ("F32", [1], f32(2)))]),
    "escaped_name.safetensors": raw_st('{"a\\"b\\u0000\\ud83d\\ude00\\n":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(NAN)),
    "unknown_key.safetensors": raw_st('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":[1,{"a":null},true,-1.5e3]}}', f32(1)),
    "unaligned.safetensors": raw_st('{"w":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}', struct.pack("<d", INF)),
    # invalid
    "end_before_start.safetensors": raw_st('{"w":{"dtype":"F32","shape":[0],"data_offsets":[10,8]}}', b"\0" * 12),
    "past_end.safetensors": raw_st('{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', f32(1)),
    "size_mismatch.safetensors": raw_st('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', f32(1)),
    "overlap.safetensors": raw_st('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)),
    "gap.safetensors": raw_st('{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2, 3)),
    "duplicate.safetensors": raw_st('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}', f32(1, 2)),
    "header_past_end.safetensors": struct.pack("<Q", 1 << 40) + b'{"a":1}',
    "not_utf8.safetensors": raw_st(b'{"\xff":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)),
    "huge_shape.safetensors": raw_st('{"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}', f32(1)),
    "trailing_comma.safetensors": raw_st('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},}', f32(1)),
    "deep.safetensors": raw_st('{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":' + "[" * 80 + "]" * 80 + "}}", f32(1)),
    "lone_surrogate.safetensors": raw_st('{"\\ud800":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', f32(1)),
    "short.safetensors": b"\x05\0\0",
}


def main():
    for sub, files in (("npy", NPY), ("safetensors", ST)):
        d = os.path.join(HERE, "corpus", sub)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    print("wrote %d .npy and %d .safetensors seeds" % (len(NPY), len(ST)))


if __name__ == "__main__":
    main()
