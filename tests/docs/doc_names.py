#!/usr/bin/env python3
"""Collect the C++ names that README.md and docs/*.md show outside code blocks and write translation units that
name each one, so that a table or sentence naming a type, function, field or enumerator that does not exist
fails the build (the code blocks themselves are compiled by extract_snippets.py).

What is collected, from the text outside fenced blocks (prose, tables, inline code):

* every qualified name ``nanscope::a::b`` (up to a ``<``, ``(`` or anything else that is not part of a name);
  CMake targets (``nanscope::nanscope``, ``nanscope::eigen``: every ``add_library(nanscope::X ALIAS ...)`` of
  the top-level CMakeLists.txt) are left out;
* the first column of a table preceded by ``<!-- names: SCOPE -->`` (blank lines allowed in between): the
  leading identifier of each code span there is a member of SCOPE (``max_frames`` under
  ``<!-- names: nanscope::recorder_options -->`` is ``nanscope::recorder_options::max_frames``;
  ``shape[8]`` and ``with_mode(check_mode)`` name ``shape`` and ``with_mode``). SCOPE may be a class, an enum or
  a namespace. ``<!-- names: SCOPE columns 1 2 -->`` reads those columns instead.

How each name is checked, from what it is a member of (the script reads the declarations under include/ to
know which identifiers are namespaces, enums and final classes; the compiler decides whether the name exists):

* a namespace: ``namespace alias = nanscope::torch;``
* a member of a namespace (functions and their overloads, templates, types, variables): ``using N;``
* an enumerator: ``constexpr auto x = N;``
* a member of a class: ``struct probe : Class { using N; };`` (any public member: functions, overloads, data,
  nested types); of a final class: ``decltype(&N)``.

Names are compiled in groups, by what their header needs: ``core`` (every public header but mpi.hpp), ``torch``
(nanscope::torch::..., the LibTorch adapters), ``cuda`` (nanscope::cuda::..., a .cu file), ``mpi``
(nanscope::mpi::...), ``dlpack`` (nanscope::dlpack::...), and one small group per ABI namespace of another
configuration (``nanscope::v0_nosimd`` is compiled with NANSCOPE_CONFIG_NO_SIMD). ``#line`` directives point
compiler errors at the Markdown file and line.

Usage: doc_names.py --root REPO_ROOT --out DIR   (writes DIR/names_<group>.cpp or .cu and DIR/names.cmake)
       doc_names.py --root REPO_ROOT --list      (prints one line per name: group, name, where)
"""
import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import extract_snippets  # noqa: E402  (the fence grammar, the list of Markdown files)

QUALIFIED = re.compile(r"(?<![A-Za-z0-9_:])nanscope(?:::~?[A-Za-z_][A-Za-z0-9_]*)+")
NAMES_MARKER = re.compile(r"^\s*<!--\s*names:\s*(?P<scope>[A-Za-z_][A-Za-z0-9_:]*)"
                          r"(?:\s+columns?\s+(?P<cols>[0-9][0-9 ,]*))?\s*-->\s*$")
CODE_SPAN = re.compile(r"(`+)(?P<code>.+?)\1")
LEADING_IDENT = re.compile(r"^\s*(?P<id>[A-Za-z_][A-Za-z0-9_]*)")
ALIAS_TARGET = re.compile(r"add_library\(\s*(nanscope::[A-Za-z0-9_]+)\s+ALIAS\b")
ABI_NAMESPACE = re.compile(r"^nanscope::v0(?P<tags>(?:_[a-z]+)*)$")
ABI_TAG_MACROS = {"nosimd": "NANSCOPE_CONFIG_NO_SIMD", "noexc": "NANSCOPE_CONFIG_NO_EXCEPTIONS"}

# Names whose declaring header needs a dependency: the first matching prefix decides the group.
GROUP_PREFIXES = [
    ("nanscope::torch::", "torch"),
    ("nanscope::detail::register_cuda_backend", "torch"),
    ("nanscope::cuda::", "cuda"),
    ("nanscope::mpi::", "mpi"),
    ("nanscope::dlpack::", "dlpack"),
]
GROUP_HEADERS = {
    "torch": ["<nanscope/adapters/torch_attach.hpp>", "<nanscope/nanscope.hpp>"],
    "cuda": ["<nanscope/cuda.cuh>"],
    "mpi": ["<nanscope/mpi.hpp>"],
    "dlpack": ["<nanscope/adapters/dlpack.hpp>", "<nanscope/nanscope.hpp>"],
}


class Name:
    def __init__(self, name, source, line):
        self.name = name
        self.source = source
        self.line = line


def fail(source, line, message):
    sys.exit(f"{source}:{line}: error: {message}")


def table_rows(lines, start):
    """The body rows of the table whose header is lines[start], as (line index, cells)."""
    rows = []
    j = start + 2
    while j < len(lines) and lines[j].lstrip().startswith("|"):
        cells = re.split(r"(?<!\\)\|", lines[j].strip())
        rows.append((j, cells[1:-1] if lines[j].strip().endswith("|") else cells[1:]))
        j += 1
    return rows


def collect_file(path, rel):
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    names = []
    i = 0
    pending_scope = None  # (scope, columns, marker line) waiting for its table
    while i < len(lines):
        line = lines[i]
        fence = extract_snippets.FENCE.match(line)
        if fence:  # skip the whole fenced block: code blocks are compiled (or skipped) by extract_snippets.py
            mark = fence.group("fence")
            j = i + 1
            while j < len(lines):
                close = lines[j].strip()
                if close.startswith(mark[0] * len(mark)) and set(close) == {mark[0]}:
                    break
                j += 1
            if pending_scope:
                fail(rel, pending_scope[2], "'names:' marker followed by a code block, not a table")
            i = j + 1
            continue
        m = NAMES_MARKER.match(line)
        if m:
            cols = [int(c) for c in re.split(r"[ ,]+", (m.group("cols") or "1").strip()) if c]
            if not m.group("scope").startswith("nanscope"):
                fail(rel, i + 1, f"'names:' scope '{m.group('scope')}' is not a nanscope name")
            pending_scope = (m.group("scope"), cols, i + 1)
            i += 1
            continue
        if pending_scope and line.strip():
            header_sep = i + 1 < len(lines) and re.match(r"^\s*\|[-:| ]+\|?\s*$", lines[i + 1])
            if not (line.lstrip().startswith("|") and header_sep):
                fail(rel, pending_scope[2], "'names:' marker not followed by a table")
            scope, cols, _ = pending_scope
            for row, cells in table_rows(lines, i):
                for c in cols:
                    if c < 1 or c > len(cells):
                        fail(rel, row + 1, f"'names:' column {c}: the row has {len(cells)} columns")
                    for span in CODE_SPAN.finditer(cells[c - 1]):
                        ident = LEADING_IDENT.match(span.group("code"))
                        if ident:
                            names.append(Name(scope + "::" + ident.group("id"), rel, row + 1))
            pending_scope = None
        for q in QUALIFIED.finditer(line):
            names.append(Name(q.group(0), rel, i + 1))
        i += 1
    if pending_scope:
        fail(rel, pending_scope[2], "'names:' marker at the end of the file")
    return names


def markdown_files(root):
    files = ["README.md"]
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        files += sorted("docs/" + n for n in os.listdir(docs) if n.endswith(".md"))
    return [f for f in files if os.path.isfile(os.path.join(root, f))]


def declarations(root):
    """Identifiers declared under include/ as namespaces, enums and final classes."""
    namespaces, enums, finals = set(), set(), set()
    inc = os.path.join(root, "include")
    for dirpath, _, files in os.walk(inc):
        for n in files:
            if not n.endswith((".hpp", ".h", ".cuh")):
                continue
            with open(os.path.join(dirpath, n), encoding="utf-8") as f:
                text = f.read()
            namespaces.update(re.findall(r"\bnamespace\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", text))
            enums.update(re.findall(r"\benum\s+(?:class\s+|struct\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?::[^{;]*)?\{", text))
            finals.update(re.findall(r"\b(?:class|struct)\s+([A-Za-z_][A-Za-z0-9_]*)\s+final\b", text))
    namespaces.add("nanscope")
    return namespaces, enums, finals


def cmake_targets(root):
    targets = set()
    path = os.path.join(root, "CMakeLists.txt")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            targets.update(ALIAS_TARGET.findall(f.read()))
    return targets


def group_of(name):
    m = ABI_NAMESPACE.match(name)
    if m and m.group("tags"):
        return "abi" + m.group("tags")
    for prefix, group in GROUP_PREFIXES:
        if name.startswith(prefix):
            return group
    return "core"


def check_line(k, n, namespaces, enums, finals):
    """One declaration that compiles only if the name exists."""
    parts = n.name.split("::")
    last, owner = parts[-1], parts[-2]
    is_abi = ABI_NAMESPACE.match(n.name) is not None
    if last in namespaces or is_abi:
        return f"namespace nanscope_doc_ns_{k} = {n.name};"
    if owner in namespaces or ABI_NAMESPACE.match("::".join(parts[:-1])):
        return f"namespace nanscope_doc_{k} {{ using {n.name}; }}"
    if owner in enums:
        return f"[[maybe_unused]] constexpr auto nanscope_doc_{k} = {n.name};"
    cls = "::".join(parts[:-1])
    if owner in finals:
        return f"using nanscope_doc_{k} = decltype(&{n.name});"
    return f"struct nanscope_doc_{k} : {cls} {{ using {n.name}; }};"


def render(group, names, root, namespaces, enums, finals):
    out = [f"// Generated by tests/docs/doc_names.py ({group}): every name the docs show outside code blocks. "
           "Do not edit."]
    if group == "core":
        headers = ["<nanscope/nanscope.hpp>"]
        inc = os.path.join(root, "include", "nanscope")
        headers += sorted(f"<nanscope/{h}>" for h in os.listdir(inc)
                          if h.endswith(".hpp") and h not in ("nanscope.hpp", "mpi.hpp"))
    elif group.startswith("abi"):
        out += [f"#define {ABI_TAG_MACROS[t]} 1" for t in group[len("abi_"):].split("_")]
        headers = ["<nanscope/dtype.hpp>"]
    else:
        headers = GROUP_HEADERS[group]
    out += [f"#include {h}" for h in headers]
    for k, n in enumerate(names):
        out.append(f'#line {n.line} "{n.source}"')
        out.append(check_line(k, n, namespaces, enums, finals))
    return "\n".join(out) + "\n"


def collect(root):
    skip = cmake_targets(root)
    names, seen = [], set()
    for rel in markdown_files(root):
        for n in collect_file(os.path.join(root, rel), rel):
            if n.name in skip or n.name in seen:
                continue
            seen.add(n.name)
            names.append(n)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True, help="repository root (holds README.md, docs/ and include/)")
    ap.add_argument("--out", help="output directory for the translation units and names.cmake")
    ap.add_argument("--list", action="store_true", help="print the names instead of writing them")
    args = ap.parse_args()
    names = collect(args.root)
    groups = {}
    for n in names:
        groups.setdefault(group_of(n.name), []).append(n)
    if args.list:
        for g in sorted(groups):
            for n in groups[g]:
                print(f"{g:10} {n.name:50} {n.source}:{n.line}")
        return 0
    if not args.out:
        ap.error("--out DIR or --list is required")
    for g in groups:
        if not (g == "core" or g.startswith("abi_") or g in GROUP_HEADERS):
            sys.exit(f"doc_names.py: no headers known for group '{g}'")
        if g.startswith("abi_") and any(t not in ABI_TAG_MACROS for t in g[len("abi_"):].split("_")):
            fail(groups[g][0].source, groups[g][0].line, f"unknown ABI namespace {groups[g][0].name}")
    namespaces, enums, finals = declarations(args.root)
    os.makedirs(args.out, exist_ok=True)
    for n in os.listdir(args.out):  # stale files of groups that are gone
        if n.startswith("names_") or n == "names.cmake":
            os.remove(os.path.join(args.out, n))
    manifest = ["# Generated by tests/docs/doc_names.py. Do not edit.", "set(NANSCOPE_DOC_NAME_GROUPS)"]
    for g in sorted(groups):
        path = os.path.join(args.out, f"names_{g}.{'cu' if g == 'cuda' else 'cpp'}")
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(render(g, groups[g], args.root, namespaces, enums, finals))
        manifest += [f"list(APPEND NANSCOPE_DOC_NAME_GROUPS {g})",
                     f"set(NANSCOPE_DOC_NAMES_{g}_SOURCE {extract_snippets.cmake_quote(path.replace(os.sep, '/'))})",
                     f"set(NANSCOPE_DOC_NAMES_{g}_COUNT {len(groups[g])})"]
    with open(os.path.join(args.out, "names.cmake"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n".join(manifest) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
