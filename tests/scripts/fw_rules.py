#!/usr/bin/env python3
"""fw_rules.py - the firmware's coding rules that the compiler does not check, checked.

  fw_rules.py names      every C source, header and .def of firmware/, configgen/src/, audit/,
                         dataprep/src/, linker/ and tests/tools/ starts with a /* comment
                         whose first word names the file ("name.c - ..." or "dir/name.c - ...")
  fw_rules.py heap       no firmware object (build/fw/) references the heap (malloc, calloc,
                         realloc, free, strdup, ...) or a process exit (exit, _Exit,
                         quick_exit, atexit) outside app/main.c
  fw_rules.py statics    each firmware object keeps its mutable state in at most one static
                         object (the file's module struct), and no function has a static
                         variable of its own
  fw_rules.py recursion  no function of the firmware reaches itself through direct calls
                         (calls and tail jumps read from the objects with objdump)
  fw_rules.py all        the four

Reads the objects `make all` built (build/fw/); exit status 1 when a rule is broken, with
every offender listed. What a rule cannot see: calls through function pointers (the op
table, the collective dispatch) are not edges of the call graph; a heap call made by a
library the firmware calls (MPI, realpath with a NULL buffer) is not a reference of the
firmware's own objects. VLAs are refused by the compiler (-Wvla in the Makefile's WARN).
Standard library and binutils only; run from the project root after `make all`.
"""
import glob
import os
import re
import subprocess
import sys

from structure import circles   # Tarjan's strongly connected components (tests/scripts/)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OBJ = os.path.join("build", "fw")

NAME_TREES = ["firmware", "configgen/src", "audit", "dataprep/src", "linker", "tests/tools"]

HEAP = {"malloc", "calloc", "realloc", "reallocarray", "free", "strdup", "strndup",
        "posix_memalign", "aligned_alloc", "memalign", "valloc", "asprintf", "vasprintf",
        "open_memstream", "getline", "getdelim", "scandir"}
EXIT = {"exit", "_Exit", "quick_exit", "atexit", "_exit"}
# object (relative to build/fw) -> symbols it may reference, and why
HEAP_ALLOWED = {
    "app/main.o": (EXIT, "main: the one place a process exit belongs"),
    "io/data.o": ({"_exit"}, "the SIGBUS handler of a token file truncated under its "
                  "mapping prints its line and _exit(1)s: the only async-signal-safe exit"),
}

# object -> (how many static objects it may have in writable sections, why)
STATICS_ALLOWED = {
    "kernels/attention.o": (4, "the kernels' scratch buffers, each declared beside the path "
                            "that uses it, after the sizes that path defines"),
    "runtime/arena.o": (3, "qt_arena_lo / qt_arena_hi are const volatile pointers to the "
                        "linker's arena bounds (volatile: read at run time), not state"),
}


def rel(o):
    return os.path.relpath(o, OBJ)


def objects():
    """The objects of build/fw/ whose source is still in firmware/ (a removed file's object
    may stay behind in a build directory)."""
    objs = sorted(o for o in glob.glob(os.path.join(OBJ, "**", "*.o"), recursive=True)
                  if os.path.exists(os.path.join("firmware", rel(o)[:-2] + ".c")))
    if not objs:
        sys.exit(f"fw_rules.py: no objects under {OBJ} (run make all first)")
    return objs


def run(args):
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def check_names():
    files = run(["git", "ls-files", "--"] + NAME_TREES).split()
    files = [f for f in files if f.endswith((".c", ".h", ".def"))]
    bad = []
    for f in files:
        with open(f, errors="replace") as fh:
            first = fh.readline()
        base = re.escape(os.path.basename(f))
        if not re.match(r"/\*\s*(?:[\w.-]+/)*" + base + r"\b", first):
            bad.append(f"{f}:1: the file does not start with a /* comment naming it: "
                       f"{first.strip()[:60]!r}")
    for b in bad:
        print(b)
    print(f"names: {len(files)} files, {len(bad)} without a header comment naming them")
    return len(bad)


def check_heap():
    bad = 0
    objs = objects()
    for o in objs:
        undef = {l.split()[0] for l in run(["nm", "-P", o]).splitlines()
                 if len(l.split()) > 1 and l.split()[1] == "U"}
        allowed = HEAP_ALLOWED.get(rel(o), (set(), ""))[0]
        for s in sorted((undef & (HEAP | EXIT)) - allowed):
            print(f"{o}: references {s} ({'the heap' if s in HEAP else 'a process exit'})")
            bad += 1
    print(f"heap: {len(objs)} objects, {bad} references to the heap or a process exit "
          f"(allowed: {', '.join(f'{k} {sorted(v[0])}' for k, v in HEAP_ALLOWED.items())})")
    return bad


WRITABLE = re.compile(r"^\.(data|bss)(\.|$)")


def check_statics():
    bad = 0
    objs = objects()
    for o in objs:
        mine = []
        for line in run(["objdump", "-t", o]).splitlines():
            # "0000000000000000 l     O .bss\t0000000000000400 qt_err_state"
            m = re.match(r"^[0-9a-f]+ l\s+O (\S+)\s+[0-9a-f]+ (\S+)$", line)
            if m and WRITABLE.match(m.group(1)) and "rel.ro" not in m.group(1):
                mine.append(m.group(2))
        for s in mine:
            if "." in s:
                print(f"{o}: function-local static {s.split('.')[0]} (put it in the file's "
                      f"module struct, or make it a local)")
                bad += 1
        limit = STATICS_ALLOWED.get(rel(o), (1, ""))[0]
        if len(mine) > limit:
            print(f"{o}: {len(mine)} static objects ({', '.join(mine)}); one module struct "
                  f"per file{f' (allowed here: {limit})' if limit > 1 else ''}")
            bad += 1
    print(f"statics: {len(objs)} objects, {bad} offenders")
    return bad


LABEL = re.compile(r"^[0-9a-f]+ <([^>]+)>:$")
BRANCH = re.compile(r"^\s*[0-9a-f]+:\s+(call|jmp)\w*\s+([0-9a-f]+) <([^>+]+)(\+0x[0-9a-f]+)?>")
RELOC = re.compile(r"^\s*[0-9a-f]+: R_X86_64_(?:PLT32|PC32)\s+([^\s+-]+)")


def call_graph():
    """{node: set(node)} of direct calls and tail jumps; a node is the function's name, or
    "object:name" for a file-local one."""
    succ, local_names = {}, {}
    objs = objects()
    for o in objs:
        local = {l.split()[-1] for l in run(["objdump", "-t", o]).splitlines()
                 if re.match(r"^[0-9a-f]+ l\s+F ", l)}
        local_names[o] = local

    def node(o, name):
        # gcc's clones (name.part.0, name.constprop.0, name.cold) stay nodes of their own:
        # a function jumps into its cold part, and recursion through a clone is a cycle too
        return f"{rel(o)}:{name}" if name in local_names[o] else name

    for o in objs:
        cur, branch = None, None   # branch: the displayed target of the last call / jmp
        for line in run(["objdump", "-dr", "--no-show-raw-insn", o]).splitlines():
            m = RELOC.match(line)
            if m and branch is not None:   # an unresolved target: the relocation names it
                succ.setdefault(cur, set()).add(node(o, m.group(1)))
                branch = None
                continue
            if branch:   # resolved in the object: a function's start (a label inside one,
                succ.setdefault(cur, set()).add(node(o, branch))   # +0x.., is a jump)
            branch = None
            m = LABEL.match(line)
            if m:
                cur = node(o, m.group(1))
                continue
            m = BRANCH.match(line)
            if m and cur is not None:
                branch = m.group(3) if m.group(4) is None and not m.group(3).startswith(".") else ""
        if branch:
            succ.setdefault(cur, set()).add(node(o, branch))
    return succ


def check_recursion():
    succ = call_graph()
    nodes = set(succ) | {b for v in succ.values() for b in v}
    edges = [(a, b) for a, bs in succ.items() for b in bs if a != b]
    found = circles(nodes, edges) + [[a] for a, bs in sorted(succ.items()) if a in bs]
    for c in found:
        print(f"recursion: {' -> '.join(sorted(c))}")
    print(f"recursion: {len(succ)} functions with calls, "
          f"{sum(len(v) for v in succ.values())} direct call edges, {len(found)} cycles")
    return len(found)


def main(argv):
    os.chdir(ROOT)
    checks = {"names": check_names, "heap": check_heap, "statics": check_statics,
              "recursion": check_recursion}
    if len(argv) == 2 and argv[1] in checks:
        return 1 if checks[argv[1]]() else 0
    if len(argv) == 2 and argv[1] == "all":
        return 1 if sum(f() for f in checks.values()) else 0
    print(__doc__.strip().split("\n\n")[0], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
