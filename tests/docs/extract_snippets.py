#!/usr/bin/env python3
"""Extract the C++ code blocks of README.md and docs/*.md into compilable, runnable .cpp files.

Every fenced block whose info string starts with ``cpp`` (or ``c++``) is a snippet. Conventions (the HTML comments are
invisible on GitHub; put them on the line right before the fence, blank lines allowed in between):

* A block that contains ``int main`` is a complete program: it is compiled as it is, run, and must exit 0.
* Any other block is a fragment: its ``#include`` lines go to the top of a wrapper file that already includes
  <nanscope/nanscope.hpp>, <fmt/format.h> and common standard headers; the rest becomes the body of a
  function that main() calls. So a fragment must declare what it uses, and it runs too.
* ``<!-- snippet: toplevel -->`` before a fragment puts it at namespace scope instead (declarations,
  specialisations) and adds an empty main().
* ``<!-- snippet: compile-only -->`` compiles the block but does not run it.
* ``<!-- snippet: skip -->`` leaves the block out (pseudo-code, code for another platform).
* ``<!-- snippet: output -->`` before a fenced block of any language makes that block the exact standard
  output expected from the latest snippet above it in the same file (trailing whitespace and
  leading or trailing blank lines ignored).
* ``<!-- snippet: excerpt -->`` before a table that quotes pieces of that output (a table explaining the parts
  of a printed line): every code span in the table's first column must occur verbatim in what the latest
  snippet above it prints, so the quoted numbers cannot drift from the program's. Spans with ``…`` are
  placeholders (``+inf=…``) and are not checked.

Blocks that mention ``Eigen`` need Eigen; the CMake side skips them when Eigen 3.4 is not found.
``#line`` directives map compiler diagnostics back to the Markdown file and line.

Usage: extract_snippets.py --root REPO_ROOT --out DIR   (writes DIR/*.cpp, DIR/*.expected, DIR/*.excerpts and
                                                          DIR/snippets.cmake)
       extract_snippets.py --root REPO_ROOT --list      (prints one line per snippet)
"""
import argparse
import os
import re
import sys

FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
MARKER = re.compile(r"^\s*<!--\s*snippet:\s*(?P<what>[a-z-]+)\s*-->\s*$")
KNOWN_MARKERS = {"skip", "compile-only", "toplevel", "output", "excerpt"}
CODE_SPAN = re.compile(r"(`+)(?P<code>.+?)\1")
TABLE_SEPARATOR = re.compile(r"^\s*\|?[-:| ]+\|?\s*$")
MAIN = re.compile(r"\bint\s+main\s*\(")
INCLUDE = re.compile(r"^\s*#\s*include\b")

PRELUDE_INCLUDES = [
    "<nanscope/nanscope.hpp>",
    "<fmt/format.h>",
    "<array>",
    "<cmath>",
    "<cstddef>",
    "<cstdint>",
    "<cstdio>",
    "<limits>",
    "<string>",
    "<vector>",
]


class Snippet:
    def __init__(self, source, line, code, markers):
        self.source = source  # path relative to the repository root, '/' separated
        self.line = line  # 1-based line of the first code line
        self.code = code  # list of lines without newline
        self.markers = markers
        self.expected = None  # expected stdout, or None
        self.excerpts = []  # pieces that must occur in stdout (tables quoting the output)
        self.name = ""

    @property
    def kind(self):
        if any(MAIN.search(l) for l in self.code):
            return "program"
        return "toplevel" if "toplevel" in self.markers else "fragment"

    @property
    def run(self):
        return "compile-only" not in self.markers

    @property
    def needs_eigen(self):
        return any("Eigen" in l for l in self.code)


def fail(source, line, message):
    sys.exit(f"{source}:{line}: error: {message}")


def parse(path, rel):
    """Returns the snippets of one Markdown file, with expected outputs attached."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    snippets = []
    pending = set()  # markers seen since the last fence
    last_cpp_skipped = False
    i = 0
    while i < len(lines):
        line = lines[i]
        m = MARKER.match(line)
        if m:
            what = m.group("what")
            if what not in KNOWN_MARKERS:
                fail(rel, i + 1, f"unknown snippet marker '{what}' (known: {', '.join(sorted(KNOWN_MARKERS))})")
            pending.add(what)
            i += 1
            continue
        f = FENCE.match(line)
        if not f and "excerpt" in pending and line.strip():
            i = parse_excerpt(rel, lines, i, snippets, last_cpp_skipped)
            pending = set()
            continue
        if not f:
            if line.strip():
                pending = set()  # a marker applies only to the fence right after it
            i += 1
            continue
        if "excerpt" in pending:
            fail(rel, i + 1, "'snippet: excerpt' must be followed by a table, not a code block")
        fence, indent = f.group("fence"), f.group("indent")
        info = f.group("info").strip()
        start = i + 1
        j = start
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and set(close) == {fence[0]}:
                break
            j += 1
        if j == len(lines):
            fail(rel, i + 1, "code fence is never closed")
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[start:j]]
        language = info.split()[0].lower() if info else ""
        if "output" in pending:
            if not snippets or last_cpp_skipped:
                fail(rel, i + 1, "'snippet: output' block with no extracted C++ snippet right before it")
            if snippets[-1].expected is not None:
                fail(rel, i + 1, "second 'snippet: output' block for the same snippet")
            if not snippets[-1].run:
                fail(rel, i + 1, "'snippet: output' block for a compile-only snippet")
            snippets[-1].expected = "\n".join(body)
        elif language in ("cpp", "c++"):
            last_cpp_skipped = "skip" in pending
            if not last_cpp_skipped:
                snippets.append(Snippet(rel, start + 1, body, set(pending)))
        pending = set()
        i = j + 1
    return snippets


def parse_excerpt(rel, lines, i, snippets, last_cpp_skipped):
    """Attaches the first-column code spans of the table at lines[i] to the latest snippet; returns the index of
    the first line after the table."""
    if not (lines[i].lstrip().startswith("|") and i + 1 < len(lines) and TABLE_SEPARATOR.match(lines[i + 1])):
        fail(rel, i + 1, "'snippet: excerpt' must be followed by a table")
    if not snippets or last_cpp_skipped:
        fail(rel, i + 1, "'snippet: excerpt' table with no extracted C++ snippet before it")
    if not snippets[-1].run:
        fail(rel, i + 1, "'snippet: excerpt' table for a compile-only snippet")
    j = i + 2
    while j < len(lines) and lines[j].lstrip().startswith("|"):
        first_cell = re.split(r"(?<!\\)\|", lines[j].strip())[1]
        for span in CODE_SPAN.finditer(first_cell):
            code = span.group("code")
            if "…" not in code:
                snippets[-1].excerpts.append(code)
        j += 1
    return j


def render(s):
    """The .cpp text of one snippet."""
    out = [f"// Generated by tests/docs/extract_snippets.py from {s.source}:{s.line} ({s.kind}). Do not edit."]
    if s.kind == "program":
        out.append(f'#line {s.line} "{s.source}"')
        out.extend(s.code)
        return "\n".join(out) + "\n"
    includes, body = [], []
    for k, l in enumerate(s.code):
        if INCLUDE.match(l):
            includes.append(f'#line {s.line + k} "{s.source}"')
            includes.append(l)
            body.append("")  # keeps the body's line numbers aligned with the Markdown file
        else:
            body.append(l)
    out.extend(f"#include {h}" for h in PRELUDE_INCLUDES)
    out.extend(includes)
    if s.kind == "toplevel":
        out.append(f'#line {s.line} "{s.source}"')
        out.extend(body)
        out.append("int main() { return 0; }")
    else:
        out.append("static void nanscope_doc_snippet() {")
        out.append(f'#line {s.line} "{s.source}"')
        out.extend(body)
        out.append("}")
        out.append("int main() {")
        out.append("  nanscope_doc_snippet();")
        out.append("  return 0;")
        out.append("}")
    return "\n".join(out) + "\n"


def stem_of(rel):
    base = os.path.splitext(os.path.basename(rel))[0].lower()
    return re.sub(r"[^a-z0-9]+", "_", base).strip("_")


def collect(root):
    files = ["README.md"]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += sorted("docs/" + n for n in os.listdir(docs) if n.endswith(".md"))
    result = []
    for rel in files:
        path = os.path.join(root, rel)
        if not os.path.isfile(path):
            continue
        snippets = parse(path, rel)
        stem = stem_of(rel)
        for k, s in enumerate(snippets, 1):
            s.name = f"{stem}_{k}"
        result += snippets
    return result


def cmake_quote(text):
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def write(root, out_dir, snippets):
    os.makedirs(out_dir, exist_ok=True)
    for n in os.listdir(out_dir):  # stale files from blocks that were removed or renumbered
        if n.endswith((".cpp", ".expected", ".excerpts")) or n == "snippets.cmake":
            os.remove(os.path.join(out_dir, n))
    manifest = ["# Generated by tests/docs/extract_snippets.py. Do not edit.", "set(NANSCOPE_DOC_SNIPPETS)"]
    for s in snippets:
        cpp = os.path.join(out_dir, s.name + ".cpp")
        with open(cpp, "w", encoding="utf-8", newline="\n") as f:
            f.write(render(s))
        expected = ""
        if s.expected is not None:
            expected = os.path.join(out_dir, s.name + ".expected")
            with open(expected, "w", encoding="utf-8", newline="\n") as f:
                f.write(s.expected + "\n")
        excerpts = ""
        if s.excerpts:
            excerpts = os.path.join(out_dir, s.name + ".excerpts")
            with open(excerpts, "w", encoding="utf-8", newline="\n") as f:
                f.write("".join(e + "\n" for e in s.excerpts))
        p = f"NANSCOPE_DOC_SNIPPET_{s.name}"
        manifest += [
            f"list(APPEND NANSCOPE_DOC_SNIPPETS {s.name})",
            f"set({p}_SOURCE {cmake_quote(cpp.replace(os.sep, '/'))})",
            f"set({p}_WHERE {cmake_quote(f'{s.source}:{s.line}')})",
            f"set({p}_RUN {'ON' if s.run else 'OFF'})",
            f"set({p}_EIGEN {'ON' if s.needs_eigen else 'OFF'})",
            f"set({p}_EXPECTED {cmake_quote(expected.replace(os.sep, '/'))})",
            f"set({p}_EXCERPTS {cmake_quote(excerpts.replace(os.sep, '/'))})",
        ]
    with open(os.path.join(out_dir, "snippets.cmake"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(manifest) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="repository root (holds README.md and docs/)")
    ap.add_argument("--out", help="output directory for the .cpp files and snippets.cmake")
    ap.add_argument("--list", action="store_true", help="print the snippets instead of writing them")
    args = ap.parse_args()
    snippets = collect(args.root)
    if args.list:
        for s in snippets:
            flags = [s.kind] + (["run"] if s.run else ["compile-only"]) + (["eigen"] if s.needs_eigen else [])
            flags += ["output"] if s.expected is not None else []
            flags += ["excerpt"] if s.excerpts else []
            print(f"{s.name:24} {s.source}:{s.line}  {' '.join(flags)}")
        return 0
    if not args.out:
        ap.error("--out DIR or --list is required")
    write(args.root, args.out, snippets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
