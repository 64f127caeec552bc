#!/usr/bin/env python3
"""The module graph of the crate (`src/`), and its cycles (issue 35: the graph is to be a DAG).

Two levels are read, each a graph of its own:
- the crate's top-level modules (`api`, `apiserver`, `index`, ...): `index` uses `metrics` when any file under
  `src/index` names `crate::metrics::...` (or reaches it through `super::`);
- the sibling modules of one parent (`runtime::queue` and `runtime::retry`): a child's use of its parent, or a parent's
  of its child, is no edge (a module owns its children).

Test code is left out: files named `tests.rs`, items under `#[cfg(test)]`, the simulation (`src/sim`), `src/bin`
and `src/main.rs`. Comments and string literals are skipped.

  tests/tools/module-graph.py            print both graphs and their cycles
  tests/tools/module-graph.py --check    fail on a cycle that is not within one listed in KNOWN_CYCLES below, or on
                                         a listed one that is gone or smaller (so that the list only shrinks), or on a
                                         glob import of one of the crate's own modules outside test code

The seam between the controllers and the index (issue 35) is measured too: the distinct methods that non-test code
under `src/controllers` calls on the index (`ctx.index.m(`, or `index.m(` on one passed in). `--check` fails when that
count is not SEAM_METHODS below (more: the seam widened; fewer: lower SEAM_METHODS, so that it only narrows).

A glob import (`use super::*;`, `pub use child::*;`) hides which module an item comes from, and two that import each
other's items that way (a parent and its children) are one module split by line count, not by a seam; test modules may
still `use super::*`.

A cycle (a strongly connected component) is named by its modules, sorted and joined with " ~ ".
"""
import argparse
import os
import re
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SRC = os.path.join(REPO, "src")

# Cycles tolerated for now: a cycle not within one of these fails `--check`, and so does one of these that is gone or
# has fewer modules now (write it as it is). Empty since issue 35 broke the last two: the graph is a DAG.
KNOWN_CYCLES = set()

# The distinct index methods the controllers call (49 at 7e0c6cf, 27 at 5cbd159; issue 35's target is 8).
SEAM_METHODS = 8


def strip(text):
    """The code of `text` without comments, string and char literals (each replaced by a space)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            out.append(" ")
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            i = n if j < 0 else j + len(end)
            out.append(" ")
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append(" ")
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or c == "'" and re.match(r"'\\u\{[0-9a-fA-F]+\}'", text[i:]):
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", text[i:])
            i += len(m.group(0))
            out.append(" ")
        else:
            out.append(c)
            i += 1
    return "".join(out)


def skip_item(code, i):
    """The index just past the item that starts at `i` (up to its `;` or its balanced `{}` block)."""
    depth = 0
    while i < len(code):
        c = code[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return i


def without_test_items(code):
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        if m.start() < i:
            continue
        out.append(code[i:m.start()])
        i = skip_item(code, m.end())
    out.append(code[i:])
    return "".join(out)


def module_of(path):
    """`src/index/registry/mod.rs` -> ["index", "registry"]; `src/lib.rs` -> []."""
    rel = os.path.relpath(path, SRC)[:-3].split(os.sep)
    if rel[-1] in ("mod", "lib"):
        rel = rel[:-1]
    return rel


def source_files():
    for root, dirs, files in os.walk(SRC):
        rel = os.path.relpath(root, SRC)
        if rel.split(os.sep)[0] in ("sim", "bin"):
            continue
        for f in sorted(files):
            if f.endswith(".rs") and f != "tests.rs" and not (rel == "." and f == "main.rs"):
                yield os.path.join(root, f)


def modules():
    """Every module path the crate has (a file, or a folder with mod.rs)."""
    return {tuple(module_of(p)) for p in source_files()}


def paths_in(code):
    """Every path that starts at `crate::`, `super::` or `self::`, with `{...}` groups expanded."""
    found = []

    def expand(prefix, rest):
        rest = rest.strip()
        if rest.startswith("{"):
            depth, part, parts = 0, "", []
            for c in rest[1:]:
                if c == "{":
                    depth += 1
                elif c == "}":
                    if depth == 0:
                        break
                    depth -= 1
                if c == "," and depth == 0:
                    parts.append(part)
                    part = ""
                else:
                    part += c
            parts.append(part)
            for p in parts:
                expand(prefix, p)
            return
        m = re.match(r"((?:r#)?[A-Za-z_][A-Za-z0-9_]*)\s*(::\s*)?", rest)
        if not m:
            if prefix:
                found.append(prefix)
            return
        name = m.group(1)
        if m.group(2):
            expand(prefix + [name], rest[m.end():])
        else:
            found.append(prefix + [name])

    for m in re.finditer(r"\b(crate|super|self)\s*::\s*", code):
        if m.start() and (code[m.start() - 1].isalnum() or code[m.start() - 1] in "_:$"):
            continue
        expand([m.group(1)], code[m.end():m.end() + 2000])
    return found


def resolve(path, here, known):
    """The module `path` (["super", "x", "Y"]) names from module `here`: its longest prefix that is a module."""
    if path[0] == "crate":
        segs = path[1:]
        base = []
    else:
        base = list(here)
        segs = path
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    full = base + segs
    for n in range(len(full), -1, -1):
        if tuple(full[:n]) in known:
            return tuple(full[:n])
    return tuple(base)


def edges():
    """(from module, to module) -> the first file that makes the edge."""
    known = modules()
    found = {}
    for path in source_files():
        here = tuple(module_of(path))
        with open(path, encoding="utf-8") as f:
            code = without_test_items(strip(f.read()))
        for p in paths_in(code):
            target = resolve(p, here, known)
            if target != here:
                found.setdefault((here, target), os.path.relpath(path, REPO))
    return found


def glob_imports():
    """Each glob import of the crate's own modules in non-test code: (file, the path imported)."""
    found = []
    for path in source_files():
        with open(path, encoding="utf-8") as f:
            code = without_test_items(strip(f.read()))
        children = set(re.findall(r"\bmod\s+(\w+)\s*;", code))
        for m in re.finditer(r"\buse\s+((?:\w+::)+)\*\s*;", code):
            first = m.group(1).split("::")[0]
            if first in ("crate", "super", "self") or first in children:
                found.append((os.path.relpath(path, REPO), m.group(1) + "*"))
    return found


def seam_methods():
    """The distinct methods non-test code under `src/controllers` calls on the index: {method: first file}."""
    found = {}
    for path in source_files():
        if os.path.relpath(path, SRC).split(os.sep)[0] != "controllers":
            continue
        with open(path, encoding="utf-8") as f:
            code = without_test_items(strip(f.read()))
        for m in re.finditer(r"(?<![\w.])(?:ctx\.)?index\s*\.\s*([a-z_][a-z0-9_]*)\s*\(", code):
            # Cloning the shared handle (`Arc<Index>`) crosses nothing.
            if m.group(1) != "clone":
                found.setdefault(m.group(1), os.path.relpath(path, REPO))
    return found


def cycles(graph):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def graphs(found):
    """The top-level graph and the sibling graphs, as {level name: {node: {nodes}}}, with the evidence of each edge."""
    levels, evidence = {}, {}
    for (a, b), where in found.items():
        if a and b and a[0] != b[0]:
            levels.setdefault("crate", {}).setdefault(a[0], set()).add(b[0])
            evidence.setdefault((a[0], b[0]), where)
        # Siblings: the children of their longest common parent that lead to each.
        common = 0
        while common < min(len(a), len(b)) and a[common] == b[common]:
            common += 1
        if common and common < len(a) and common < len(b):
            parent = "::".join(a[:common])
            x, y = "::".join(a[:common + 1]), "::".join(b[:common + 1])
            levels.setdefault(parent, {}).setdefault(x, set()).add(y)
            evidence.setdefault((x, y), where)
    return levels, evidence


def self_test():
    """The reading itself, on a small tree: a cycle through `crate::`, `super::` and a `{}` group is found; a path in a
    comment, a string or a `#[cfg(test)]` item makes no edge; a child's use of its parent is no sibling edge."""
    import tempfile
    global SRC
    files = {
        "lib.rs": "pub mod a; pub mod b; pub mod c; pub mod d;",
        "a/mod.rs": "pub mod x; pub mod y;\nuse crate::{b::B, a::x::X};\n// crate::c::C\nconst S: &str = \"crate::c\";",
        "a/x.rs": "use super::y::Y; pub struct X;",
        "a/y.rs": "use super::x::X; use super::A; pub struct Y;",
        "b.rs": "pub struct B; fn f() { super::a::x::X; }\n#[cfg(test)]\nmod t { use crate::d::D; }",
        "c.rs": "pub struct C; mod k; use k::*; use std::io::*;\n#[cfg(test)]\nmod tests { use super::*; }",
        "c/k.rs": "use super::*; pub struct K;",
        "d.rs": "use crate::b::B; pub struct D; fn g() { let _ = 'c'; let _ = r#\"crate::c\"#; }",
        "controllers/mod.rs": "fn f(ctx: C, index: &I) { ctx.index.view(k); index.hold(k); ctx.index.view(j); "
                              "my_index.other(k); ctx.index.pool; index.clone(); }\n// ctx.index.commented(k)\n"
                              "#[cfg(test)]\nmod t { fn g() { ctx.index.tested(k); } }",
    }
    saved = SRC
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(tmp, name)), exist_ok=True)
            with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
                f.write(text)
        SRC = tmp
        try:
            levels, _ = graphs(edges())
            globs = sorted(glob_imports())
            seam = sorted(seam_methods())
        finally:
            SRC = saved
    crate = {k: sorted(v) for k, v in levels["crate"].items()}
    assert crate == {"a": ["b"], "b": ["a"], "d": ["b"]}, crate
    assert [c for g in levels.values() for c in cycles(g)] == [["a", "b"], ["a::x", "a::y"]], levels
    assert [g for _, g in globs] == ["k::*", "super::*"], globs
    assert seam == ["hold", "view"], seam
    print("module-graph: self-test passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    parser.add_argument("--self-test", action="store_true", help="check the reading on a small tree of its own")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return
    levels, evidence = graphs(edges())
    found = {}
    for level, graph in sorted(levels.items()):
        for comp in cycles(graph):
            name = " ~ ".join(comp)
            ties = [f"{a} -> {b} ({evidence[(a, b)]})" for a in comp for b in sorted(graph.get(a, ())) if b in comp]
            found[name] = ties
    if not args.check:
        for level, graph in sorted(levels.items()):
            print(f"{level}:")
            for a in sorted(graph):
                print(f"  {a} -> {', '.join(sorted(graph[a]))}")
    members = {name: set(name.split(" ~ ")) for name in list(found) + list(KNOWN_CYCLES)}
    new = sorted(f for f in found if not any(members[f] <= members[k] for k in KNOWN_CYCLES))
    gone = sorted(k for k in KNOWN_CYCLES if k not in found)
    for name in sorted(found):
        mark = "NEW " if name in new else ""
        print(f"{mark}cycle: {name}")
        for tie in found[name]:
            print(f"    {tie}")
    for name in gone:
        print(f"gone or smaller (write KNOWN_CYCLES as the cycles above are): {name}")
    globs = glob_imports()
    for file, imported in globs:
        print(f"glob import: {file}: use {imported}; (name what is imported)")
    seam = seam_methods()
    if not args.check or len(seam) != SEAM_METHODS:
        print(f"the controllers call {len(seam)} distinct index methods (SEAM_METHODS = {SEAM_METHODS}):")
        for method, file in sorted(seam.items()):
            print(f"    {method} ({file})")
    if len(seam) > SEAM_METHODS:
        print("the seam between the controllers and the index widened: record a result with `Index::observe`")
    elif len(seam) < SEAM_METHODS:
        print(f"the seam narrowed: write SEAM_METHODS = {len(seam)}")
    if args.check and (new or gone or globs or len(seam) != SEAM_METHODS):
        sys.exit(1)
    if args.check:
        print(f"module-graph: {len(found)} known cycle(s), no new one; no glob import of the crate's own modules; "
              f"the controllers call {len(seam)} index methods")


if __name__ == "__main__":
    main()
