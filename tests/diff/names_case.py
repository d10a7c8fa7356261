#!/usr/bin/env python3
"""nanscope-diff with file and module names of any bytes (issue 13 item 6).

  names_case.py NANSCOPE_DIFF FIXTURES_DIR WORK_DIR

Copies hf_ref_FULL.json under names holding invalid UTF-8 (each kind of maximal subpart), control characters,
a C1 control, DEL, a backslash and a bidirectional override, then checks, against references written here in
Python:
  --json: the report is strict UTF-8 JSON and a.file / b.file equal the path decoded with errors="replace" (one
          U+FFFD per maximal invalid subpart, what nanscope's tree writer does);
  text:   stdout and stderr hold no control character but newlines, no C1 control, no bidi control, and name the
          file with each invalid byte and control character as \\xNN, a backslash as \\\\, bidi controls as
          \\u{NNNN};
  module names with control characters (hf_ctrl_names_FULL.json) come out exactly in --json.
Exit 0 when all pass, 1 with the reasons.
"""
import json
import os
import shutil
import subprocess
import sys

SEQUENCES = [
    b"plain", b"\xff", b"\xfe\xfe", b"\xc0\xaf", b"\xc2", b"\xe0\x80\xaf", b"\xe0\xa0", b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80", b"\xe2\x82x", b"a\xe2\x82\xffb\x80",
    b"\x1b[31mred", b"line\nbreak", b"tab\t", b"\x7f", b"\xc2\x9b2J", b"back\\slash", b"\xe2\x80\xaertl",
    b"caf\xc3\xa9",
]
BIDI = {0x200E, 0x200F, 0x2028, 0x2029, 0x202A, 0x202B, 0x202C, 0x202D, 0x202E, 0x2066, 0x2067, 0x2068, 0x2069}


def terminal_reference(raw):
    """The text form the tool must print for the bytes `raw`."""
    out = []
    for ch in raw.decode("utf-8", "surrogateescape"):
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:
            out.append("\\x%02x" % (cp - 0xDC00))
        elif ch == "\\":
            out.append("\\\\")
        elif cp < 0x20 or cp == 0x7F or 0x80 <= cp <= 0x9F:
            out.append("\\x%02x" % cp)
        elif cp in BIDI:
            out.append("\\u{%04x}" % cp)
        else:
            out.append(ch)
    return "".join(out)


def unsafe_for_terminal(text):
    """Characters that must never reach a terminal raw."""
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or ord(c) == 0x7F or 0x80 <= ord(c) <= 0x9F
            or ord(c) in BIDI]


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main(exe, fixtures, work):
    ref = os.path.join(fixtures, "hf_ref_FULL.json")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    wb = os.fsencode(work)
    problems = []
    for seq in SEQUENCES:
        path = wb + b"/t_" + seq + b".json"
        shutil.copyfile(ref, path)
        label = repr(seq)
        # --json: strict UTF-8, the path with U+FFFD replacements
        rc, out, err = run([os.fsencode(exe), b"--json", os.fsencode(ref), path])
        try:
            doc = json.loads(out.decode("utf-8", "strict"))
            want = path.decode("utf-8", "replace")
            if doc["b"]["file"] != want:
                problems.append("%s: --json b.file is %r, expected %r" % (label, doc["b"]["file"], want))
        except (ValueError, KeyError) as e:
            problems.append("%s: --json output is not strict UTF-8 JSON with b.file (%s); exit %d, stderr %r"
                            % (label, e, rc, err[:200]))
        if rc != 0:
            problems.append("%s: --json exit status %d, expected 0" % (label, rc))
        # text: escaped, nothing unsafe
        rc, out, err = run([os.fsencode(exe), os.fsencode(ref), path])
        text, etext = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
        want_line = "  B (candidate): " + terminal_reference(path) + "  ["
        if want_line not in text.splitlines() and not any(l.startswith(want_line) for l in text.splitlines()):
            problems.append("%s: text report has no line starting %r" % (label, want_line))
        if unsafe_for_terminal(text) or b"\xff" in out or unsafe_for_terminal(etext):
            problems.append("%s: raw control or invalid bytes in the text output: %r" % (label, out[:400]))
        if rc != 0:
            problems.append("%s: text exit status %d, expected 0" % (label, rc))
        # a message naming a missing file of that name
        missing = wb + b"/missing_" + seq + b".json"
        rc, out, err = run([os.fsencode(exe), os.fsencode(ref), missing])
        want_err = "nanscope-diff: " + terminal_reference(missing) + ": cannot open: No such file or directory\n"
        if rc != 2 or err.decode("utf-8", "replace") != want_err:
            problems.append("%s: missing file: exit %d, stderr %r, expected 2 and %r" % (label, rc, err, want_err))

    # module names from the file (valid UTF-8 with control characters): exact in --json
    ctrl = os.path.join(fixtures, "hf_ctrl_names_FULL.json")
    rc, out, err = run([exe, "--json", ref, ctrl])
    want_module = "TinyModel.layers.0.self_attn\x1b[31mRED\nfake line\u009b2J\u202e"
    try:
        doc = json.loads(out.decode("utf-8", "strict"))
        extra = [s["module"] for s in doc["structural"] if s["kind"] == "extra module"]
        if extra != [want_module]:
            problems.append("control-character module name in --json: %r, expected [%r]" % (extra, want_module))
    except (ValueError, KeyError) as e:
        problems.append("control-character module names: --json output unreadable (%s)" % e)
    rc, out, err = run([exe, ref, ctrl])
    if unsafe_for_terminal(out.decode("utf-8", "replace")):
        problems.append("control-character module names printed raw: %r" % out[:600])
    if terminal_reference(want_module.encode("utf-8")) not in out.decode("utf-8", "replace"):
        problems.append("the text report does not show the module name as %r"
                        % terminal_reference(want_module.encode("utf-8")))

    if problems:
        for p in problems:
            print("FAILED: " + p)
        return 1
    print("ok (%d names)" % len(SEQUENCES))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
