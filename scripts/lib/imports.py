#!/usr/bin/env python3
"""The file-level import graph of src/, and its cycles.

  imports.py [SRC_DIR]            exit status 1 with one line per cycle; 0 when there is none
  imports.py --edges [SRC_DIR]    prints every edge (file -> file it imports from)
  imports.py --modules [SRC_DIR]  the same for the top-level modules (crate::relay, crate::store,
                                  ...): each cycle, then the edges inside it with a count and an
                                  example file each

An edge runs from a file to the file that defines a module it names in a `use` or a path
(`crate::…`, `super::…`, `self::…`). Declaring a child module (`mod x;`) is not an edge, so a
parent that only declares and re-exports its children, and children that import from their
siblings rather than from the parent, form no cycle. A path naming an item of a module points
at that module's file; a re-export is an edge like any other `use`. Unit tests are left out:
an inline `mod tests { … }` at a file's end, and a file declared under `#[cfg(test)]` (a test
may load a whole configuration from inside the module it tests).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PATH = re.compile(r"(?<![A-Za-z0-9_:])([a-z_][A-Za-z0-9_]*)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
COMMENT = re.compile(r"//[^\n]*")
STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def module_of(path: Path, src: Path) -> tuple[str, ...]:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib"):
        parts.pop()
    return tuple(parts)


def expand(tree: str) -> list[str]:
    """`a::{b, c::{d, self}}` -> ['a::b', 'a::c::d', 'a::c']."""
    tree = re.sub(r"\s+as\s+[A-Za-z_][A-Za-z0-9_]*", "", tree)
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and start is not None:
                prefix = tree[:start].rstrip(":")
                inner, rest = tree[start + 1 : i], tree[i + 1 :]
                items, level, cut = [], 0, 0
                for j, c in enumerate(inner):
                    level += c == "{"
                    level -= c == "}"
                    if c == "," and level == 0:
                        items.append(inner[cut:j])
                        cut = j + 1
                items.append(inner[cut:])
                out = []
                for item in filter(None, items):
                    for sub in expand(item):
                        out.append(prefix if sub == "self" else f"{prefix}::{sub}")
                return out + (expand(rest) if rest else [])
    return [tree] if tree else []


def resolve(here: tuple[str, ...], files, path: str) -> list[str] | None:
    parts = path.split("::")
    if parts[0] == "crate":
        base: list[str] = []
    elif here + (parts[0],) in files:
        # A child module named without `self::` (`use outbox::PgOutbox;` in a mod.rs).
        return list(here) + parts
    elif parts[0] in ("self", "super"):
        # A file `a/b.rs` is module a::b; its `super` is a. A mod.rs is the module of its folder.
        base = list(here)
        while parts and parts[0] in ("self", "super"):
            if parts[0] == "super":
                if not base:
                    return None
                base.pop()
            parts = parts[1:]
        return base + parts
    else:
        return None
    return base + parts[1:]


def graph(src: Path) -> dict[tuple[str, ...], set[tuple[str, ...]]]:
    files = {module_of(p, src): p for p in src.rglob("*.rs") if p.name != "main.rs"}
    test_only = set()
    for module, path in files.items():
        for child in re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", path.read_text()):
            test_only.add(module + (child,))
    files = {m: p for m, p in files.items() if m not in test_only}
    edges: dict[tuple[str, ...], set[tuple[str, ...]]] = {m: set() for m in files}
    for module, path in files.items():
        text = STRING.sub('""', COMMENT.sub("", path.read_text()))
        # A file's own unit tests (an inline `mod tests` at its end) import from the file itself.
        text = re.split(r"#\[cfg\(test\)\]\s*mod\s+tests\s*\{", text)[0]
        names: list[str] = []
        for tree in USE.findall(text):
            names.extend(expand(tree))
        names.extend(m.group(0) for m in PATH.finditer(text))
        for name in names:
            segments = resolve(module, files, name.replace(" ", ""))
            if segments is None:
                continue
            # The longest prefix that is a file of its own.
            for n in range(len(segments), -1, -1):
                target = tuple(segments[:n])
                if target in files:
                    break
            if target != module:
                edges[module].add(target)
    return edges


def cycles(edges: dict[tuple[str, ...], set[tuple[str, ...]]]) -> list[list[tuple[str, ...]]]:
    """Strongly connected components with more than one file (Tarjan)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on: set = set()
    found: list = []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def name(module: tuple[str, ...]) -> str:
    return "::".join(("crate",) + module)


def top_level(edges: dict[tuple[str, ...], set[tuple[str, ...]]]) -> dict[tuple[str, ...], dict]:
    """The edges between top-level modules, each with the file edges behind it."""
    top: dict[tuple[str, ...], dict] = {}
    for module, targets in edges.items():
        for target in targets:
            a, b = module[:1], target[:1]
            if a and b and a != b:
                top.setdefault(a, {}).setdefault(b, []).append((module, target))
    return top


def main(argv: list[str]) -> int:
    show_edges = "--edges" in argv
    args = [a for a in argv if not a.startswith("--")]
    src = Path(args[0] if args else "src")
    edges = graph(src)
    if "--modules" in argv:
        top = top_level(edges)
        found = cycles({a: set(bs) for a, bs in top.items()})
        for component in found:
            print("module cycle: " + ", ".join(name(m) for m in component))
            for a in component:
                for b, behind in sorted(top.get(a, {}).items()):
                    if b in component:
                        example = behind[0]
                        print(f"  {name(a)} -> {name(b)}: {len(behind)} ({name(example[0])} -> {name(example[1])})")
        return 1 if found else 0
    if show_edges:
        for module in sorted(edges):
            for target in sorted(edges[module]):
                print(f"{name(module)} -> {name(target)}")
        return 0
    found = cycles(edges)
    for component in found:
        print("import cycle: " + ", ".join(name(m) for m in component))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
