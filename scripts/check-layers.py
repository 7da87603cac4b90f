#!/usr/bin/env python3
"""Check that a crate's modules depend on each other one way only.

Reads every .rs file under a crate's src/, finds the crate-internal paths its
code names (`use crate::a::b`, `super::c`, `crate::a::f(..)`), resolves each
to the module file it lands in, and checks two rules:

1. Layers: with `--layers s3 keyspace scan fleet` (lowest first), a module
   under one top-level module may import only from the same or a lower one.
   Several names joined by a comma share a rank (`--layers crd,metrics ...`).
2. No circle: no module file reaches itself again through imports (a file
   importing through its own folder's `mod.rs` re-exports counts, since that
   `mod.rs` imports the file back).

Test modules (`#[cfg(test)] mod ... { }`) and comments are not product code
and are skipped: a test may reach across layers to check one against another.

Usage: scripts/check-layers.py CRATE_SRC [--layers L1 L2 ...] [--graph]
       scripts/check-layers.py --self-test   (it catches a circle and an upward import)
Exit status 1 and one line per violation when a rule is broken.
"""
import argparse
import pathlib
import re
import sys


def module_of(src: pathlib.Path, path: pathlib.Path) -> tuple:
    rel = path.relative_to(src).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] in ("lib", "main", "mod"):
        parts = parts[:-1]
    if parts and parts[0] == "bin":  # binaries are crates of their own
        return None
    return tuple(parts)


def strip_tests_and_comments(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i : m.start()])
        depth, j = 1, m.end()
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def expand_use(tree: str) -> list:
    """`a::{b, c::{d, e}}` -> ['a::b', 'a::c::d', 'a::c::e']."""
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [tree]
    head, inner = tree[:brace], tree[brace + 1 : tree.rindex("}")]
    items, depth, start = [], 0, 0
    for k, ch in enumerate(inner):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(inner[start:k])
            start = k + 1
    items.append(inner[start:])
    return [p for it in items if it for p in expand_use(head + it)]


def paths_in(code: str) -> list:
    found = []
    for m in re.finditer(r"\buse\s+([^;]+);", code):
        found += expand_use(m.group(1))
    code_wo_use = re.sub(r"\buse\s+[^;]+;", "", code)
    # Paths in code: `crate::a::f()`, `super::b::g()`, and `child::h()` (kept
    # only when `child` is a child module, see `resolve`).
    found += re.findall(r"(?<![\w:])\w+(?:::\w+)+", code_wo_use)
    return found


def resolve(path: str, here: tuple, modules: set):
    parts = path.split("::")
    if " as " in parts[-1]:
        parts[-1] = parts[-1].split(" as ")[0]
    if parts[0] == "crate":
        base, rest = (), parts[1:]
    elif parts[0] not in ("self", "super"):
        # `use child::X` in a module names its own child module (2018 paths);
        # anything else is another crate.
        if here + (parts[0],) not in modules:
            return None
        base, rest = here, parts
    else:
        # `self`/`super` are relative to the module itself; a file `a/b.rs` is
        # module a::b whose parent is a.
        base = here
        rest = parts
        while rest and rest[0] in ("self", "super"):
            if rest[0] == "super":
                base = base[:-1]
            rest = rest[1:]
    target = base
    for seg in rest:
        if target + (seg,) in modules:
            target = target + (seg,)
        else:
            break
    return target


def self_test() -> int:
    """The checker must fail on a crate with a circle and an upward import."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src = pathlib.Path(tmp)
        for rel, text in {
            "lib.rs": "pub mod low;\npub mod high;\n",
            "low/mod.rs": "pub mod a;\npub mod b;\npub use a::A;\n",
            "low/a.rs": "use super::b::B;\npub struct A;\n",
            "low/b.rs": "pub struct B;\npub fn f() { super::a::g(); }\n",
            "high.rs": "use crate::low::A;\n",
        }.items():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_text(text)
        run = lambda *layers: subprocess.run(
            [sys.executable, __file__, str(src), "--layers", *layers], capture_output=True, text=True
        )
        circle = run("low", "high")
        upward = run("high", "low")
        ok = (
            circle.returncode == 1
            and "import circle: low::a <-> low::b" in circle.stderr
            and "upward import" not in circle.stderr
            and upward.returncode == 1
            and "upward import: high" in upward.stderr
        )
        (src / "low/b.rs").write_text("pub struct B;\n")
        clean = run("low", "high")
        ok = ok and clean.returncode == 0
        print("check-layers self-test:", "ok" if ok else f"FAILED\n{circle}\n{upward}\n{clean}")
        return 0 if ok else 1


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=pathlib.Path)
    ap.add_argument("--layers", nargs="*", default=[])
    ap.add_argument("--graph", action="store_true", help="print the module graph")
    args = ap.parse_args()

    files = {}
    for f in sorted(args.src.rglob("*.rs")):
        mod = module_of(args.src, f)
        if mod is not None:
            files[mod] = f
    modules = set(files)
    edges = {m: set() for m in modules}
    for mod, f in files.items():
        code = strip_tests_and_comments(f.read_text())
        for p in paths_in(code):
            target = resolve(p, mod, modules)
            # Importing from an ancestor's mod.rs (its re-exports) is an edge
            # too: that mod.rs imports its children back.
            if target not in (None, (), mod):
                edges[mod].add(target)

    rank = {}
    for i, group in enumerate(args.layers):
        for name in group.split(","):
            rank[name] = i
    problems = []
    name = lambda m: "::".join(m) or "crate"
    for mod, targets in sorted(edges.items()):
        for t in sorted(targets):
            a, b = mod[:1], t[:1]
            if a and b and a != b and a[0] in rank and b[0] in rank and rank[b[0]] > rank[a[0]]:
                problems.append(f"upward import: {name(mod)} ({files[mod]}) uses {name(t)}")
    for layer in rank:
        if (layer,) not in modules:
            problems.append(f"--layers names {layer!r}, which is not a module of {args.src}")

    # Circles: strongly connected components with more than one module.
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(modules):
        if v not in index:
            visit(v)
    for comp in comps:
        problems.append("import circle: " + " <-> ".join(sorted(name(m) for m in comp)))

    if args.graph:
        for mod in sorted(edges):
            print(f"{name(mod)} -> {', '.join(name(t) for t in sorted(edges[mod])) or '-'}")
    for p in problems:
        print(p, file=sys.stderr)
    if not problems:
        print(f"{args.src}: {len(modules)} modules, {sum(map(len, edges.values()))} imports, "
              "no upward import, no circle")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
