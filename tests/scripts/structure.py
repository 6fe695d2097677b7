#!/usr/bin/env python3
"""structure.py - the shape of the code, checked: layers, circles and function lengths.

  structure.py layers [--edges]   file -> file dependencies of firmware/, configgen/ and
                                  audit/ against the layer order of tests/layers.txt
  structure.py funcs [N]          the N longest functions (default 15) and every one over
                                  the limit of tests/layers.txt ("max_function_lines")

A dependency is either a symbol one object references and another object of the same tree
defines (read with nm from the objects `make all` built), or an #include "..." of a header
in another folder. Rules (exit status 1 when one is broken, with every offender listed):
  - no file depends on a file of a higher layer (upward edge);
  - no two files depend on each other, directly or through others (a circle), within a
    layer too;
  - no function in the checked trees is longer than max_function_lines (a definition that
    starts at column 0 and ends at a "}" in column 0, both lines counted).
Standard library only; run from the project root after `make all`.
"""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYERS_FILE = os.path.join("tests", "layers.txt")


def read_layers():
    """tests/layers.txt: `tree <name> <object dir> <source root> <include dirs,...>` then
    `layers <name> <lowest> ... <highest>`; `max_function_lines N`; '#' comments."""
    trees, limit = {}, 120
    with open(os.path.join(ROOT, LAYERS_FILE)) as f:
        for n, line in enumerate(f, 1):
            w = line.split("#", 1)[0].split()
            if not w:
                continue
            if w[0] == "tree" and len(w) == 5:
                trees[w[1]] = {"obj": w[2], "src": w[3], "inc": w[4].split(","), "order": []}
            elif w[0] == "layers" and len(w) >= 3 and w[1] in trees:
                trees[w[1]]["order"] = w[2:]
            elif w[0] == "max_function_lines" and len(w) == 2:
                limit = int(w[1])
            else:
                sys.exit(f"{LAYERS_FILE}:{n}: cannot read '{line.strip()}'")
    return trees, limit


def layer_of(path, tree):
    """The layer of a source path: its first folder under the tree's source root ('.' for
    files at the root)."""
    rel = os.path.relpath(path, tree["src"])
    return rel.split(os.sep)[0] if os.sep in rel else "."


def nm_symbols(obj):
    out = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        p = line.split()
        if len(p) < 2:
            continue
        name, kind = p[0], p[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper() and kind not in "UVW":
            defined.add(name)
    return defined, undefined


def symbol_edges(tree):
    """{(src_a, src_b): [symbols]} for every object of the tree whose source is in it."""
    objs = {}
    for obj in glob.glob(os.path.join(tree["obj"], "**", "*.o"), recursive=True):
        rel = os.path.relpath(obj, tree["obj"])[:-2]
        for ext in (".c", ".cpp"):
            src = os.path.join(tree["src"], rel + ext)
            if os.path.exists(src):
                objs[src] = nm_symbols(obj)
    owner = {}
    for src, (defined, _) in objs.items():
        for s in defined:
            owner.setdefault(s, src)
    edges = {}
    for src, (_, undefined) in objs.items():
        for s in undefined:
            dst = owner.get(s)
            if dst and dst != src:
                edges.setdefault((src, dst), []).append(s)
    return objs, edges


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def include_edges(tree):
    """{(file, header): ['#include']} for includes that resolve to a file of the tree."""
    edges = {}
    files = [p for p in glob.glob(os.path.join(tree["src"], "**", "*"), recursive=True)
             if p.endswith((".c", ".h"))]
    for path in files:
        with open(path, errors="replace") as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            for base in [os.path.dirname(path)] + tree["inc"]:
                cand = os.path.normpath(os.path.join(base, inc))
                if os.path.exists(cand):
                    if cand.startswith(tree["src"] + os.sep) and cand != path:
                        edges.setdefault((path, cand), []).append("#include")
                    break
    return edges


def circles(nodes, edges):
    """Strongly connected components of more than one file (iterative Tarjan)."""
    succ = {}
    for a, b in edges:
        succ.setdefault(a, []).append(b)
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter[0]
                counter[0] += 1
                stack.append(v)
                on.add(v)
            nxt = sorted(succ.get(v, []))
            if i < len(nxt):
                work.append((v, i + 1))
                w = nxt[i]
                if w not in index:
                    work.append((w, 0))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
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
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return out


def check_layers(show_edges):
    trees, _ = read_layers()
    bad = 0
    for name, tree in trees.items():
        order = tree["order"]
        objs, sym = symbol_edges(tree)
        inc = include_edges(tree)
        if not objs:
            print(f"{name}: no objects under {tree['obj']} (run make all first)")
            bad += 1
            continue
        nodes = set(objs) | {a for a, _ in inc} | {b for _, b in inc}
        for a, b in list(sym) + list(inc):
            nodes.update((a, b))
        n_up = 0
        for kind, edges in (("calls", sym), ("includes", inc)):
            for (a, b), why in sorted(edges.items()):
                la, lb = layer_of(a, tree), layer_of(b, tree)
                for l in (la, lb):
                    if l not in order:
                        print(f"{name}: {l}/ is not in the layer order of {LAYERS_FILE}")
                        order.append(l)
                        bad += 1
                if order.index(la) < order.index(lb):
                    n_up += 1
                    print(f"{name}: upward: {a} ({la}) {kind} {b} ({lb}): "
                          f"{', '.join(sorted(set(why))[:4])}")
                elif show_edges:
                    print(f"{name}: {a} -> {b} ({kind}: {', '.join(sorted(set(why))[:3])})")
        circ = circles(nodes, list(sym) + list(inc))
        for c in circ:
            print(f"{name}: circle: {' <-> '.join(c)}")
        bad += n_up + len(circ)
        print(f"{name}: {len(objs)} objects, {len(sym)} call edges, {len(inc)} include edges, "
              f"{n_up} upward, {len(circ)} circles (order: {' < '.join(order)})")
    return 1 if bad else 0


FUNC_START = re.compile(r"^(?:[A-Za-z_][\w \*]*?[\s\*])?(\w+)\s*\([^;]*$")
NOT_FUNC = {"typedef", "if", "for", "while", "return", "switch", "else", "do", "case"}


ATTRIBUTE = re.compile(r"__attribute__\s*\(\(.*?\)\)")


def functions(path):
    """(name, first line, length) of every function defined at column 0."""
    out, name, start = [], None, 0
    with open(path, errors="replace") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if name is None:
            m = FUNC_START.match(ATTRIBUTE.sub("", line))
            if m and re.match(r"\w+", line) and re.match(r"\w+", line).group(0) not in NOT_FUNC:
                # the body opens on this line or within the next few (continued parameters)
                for j in range(i, min(i + 16, len(lines))):
                    if lines[j].rstrip().endswith(";"):
                        break
                    if lines[j].startswith("{") or lines[j].rstrip().endswith("{"):
                        name, start = m.group(1), i
                        break
        elif line.startswith("}"):
            out.append((name, start + 1, i - start + 1))
            name = None
    return out


def check_funcs(top):
    trees, limit = read_layers()
    rows = []
    for tree in trees.values():
        for path in glob.glob(os.path.join(tree["src"], "**", "*.c"), recursive=True):
            rows += [(n, path, line, length) for n, line, length in functions(path)]
    rows.sort(key=lambda r: -r[3])
    print(f"the {top} longest functions (limit {limit} lines):")
    for n, path, line, length in rows[:top]:
        print(f"  {length:5d}  {path}:{line}  {n}")
    over = [r for r in rows if r[3] > limit]
    for n, path, line, length in over:
        print(f"over the limit: {path}:{line} {n} is {length} lines (> {limit})")
    print(f"{len(rows)} functions, {len(over)} over {limit} lines")
    return 1 if over else 0


def main(argv):
    os.chdir(ROOT)
    if len(argv) >= 2 and argv[1] == "layers":
        return check_layers("--edges" in argv[2:])
    if len(argv) >= 2 and argv[1] == "funcs":
        return check_funcs(int(argv[2]) if len(argv) > 2 else 15)
    print(__doc__.strip().split("\n\n")[0], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
