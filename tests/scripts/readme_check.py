#!/usr/bin/env python3
"""readme_check.py - runs the command blocks of README.md as written (tests/e2e/07_readme.sh).

    readme_check.py list README.md               one line per fenced block: index, kind, line
    readme_check.py run README.md N SCRATCH       block N, in the directory SCRATCH

The README's code blocks are fenced, and the fence's word says what a block is:
  * ```sh    commands a user types at the project root; `run` executes the block with
             `bash -e -x` (the first command that exits non-zero fails it) in SCRATCH, with
             make's own variables (MAKEFLAGS, MAKELEVEL, MFLAGS) removed from the environment,
             as in a user's shell. The one line `make test` (the caller of this check) is
             skipped and said so;
  * ```yaml  a file the user writes: its first line is `# PATH`, and `run` writes the whole
             block to SCRATCH/PATH (creating it; a file of that name already in the
             repository must hold exactly the block);
  * ```text  a picture or output: never run.
A block that cannot run on one machine (several hosts, Slurm) is marked by the line
`<!-- readme-check: not run (REASON) -->` right before its fence; `run` reports it as
skipped with the reason. Any other fence word, an unclosed fence, an indented code block (4
spaces after a blank line, outside a list) or a marker without a reason fails `list`, so
no block escapes the check by its form. Exit status: 0 ran (or skipped as marked), 1
failed, 2 usage."""
import os
import re
import subprocess
import sys

MARK = re.compile(r"^<!-- readme-check: not run \((.+)\) -->$")
KINDS = ("sh", "yaml", "text")


def blocks(path):
    """[(kind, first line number, lines, skip reason or None)]; raises ValueError on a form
    the check cannot classify."""
    out, lines = [], open(path, encoding="utf-8").read().split("\n")
    i, prev_blank, in_list = 0, True, False
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("```"):
            kind = ln[3:].strip()
            if kind not in KINDS:
                raise ValueError(f"{path}:{i + 1}: fence '{ln}': expected ```sh, ```yaml or ```text")
            m = MARK.match(lines[i - 1]) if i else None
            if i and lines[i - 1].startswith("<!-- readme-check") and not m:
                raise ValueError(f"{path}:{i}: expected '<!-- readme-check: not run (REASON) -->'")
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            if j == len(lines):
                raise ValueError(f"{path}:{i + 1}: fence never closed")
            out.append((kind, i + 1, lines[i + 1:j], m.group(1) if m else None))
            i, prev_blank = j + 1, False
            continue
        if ln.startswith("    ") and prev_blank and not in_list and ln.strip():
            raise ValueError(f"{path}:{i + 1}: an indented code block; fence it as ```sh, ```yaml or ```text")
        if not ln.strip():
            prev_blank = True
            in_list = in_list and i + 1 < len(lines) and lines[i + 1].startswith("  ")
        else:
            prev_blank = False
            in_list = bool(re.match(r"^(\*|-|\d+\.) ", ln)) or (in_list and ln.startswith("  "))
        i += 1
    return out


def run_yaml(lines, scratch):
    m = re.match(r"^# (\S+)", lines[0]) if lines else None
    if not m:
        print("a yaml block must start with '# PATH' (the file it is)")
        return 1
    rel, text = m.group(1), "\n".join(lines) + "\n"
    dst = os.path.join(scratch, rel)
    if os.path.exists(dst):
        same = open(dst, encoding="utf-8").read() == text
        print(f"{rel}: in the repository, {'identical to' if same else 'DIFFERENT from'} the block")
        return 0 if same else 1
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {rel} ({len(lines)} lines)")
    return 0


def run_sh(lines, scratch):
    body = []
    for ln in lines:
        if re.match(r"^make test(\s+#.*)?$", ln):
            print("skipped: make test (this check runs inside it)")
            body.append(": skipped make test")
        else:
            body.append(ln)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    r = subprocess.run(["bash", "-e", "-x", "-c", "\n".join(body)], cwd=scratch, env=env)
    print(f"exit status {r.returncode}")
    return 0 if r.returncode == 0 else 1


def main(argv):
    if len(argv) < 3 or argv[1] not in ("list", "run") or (argv[1] == "run" and len(argv) != 5):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    try:
        bl = blocks(argv[2])
    except (OSError, ValueError) as e:
        print(f"readme_check.py: {e}", file=sys.stderr)
        return 1
    if argv[1] == "list":
        for n, (kind, line, lines, skip) in enumerate(bl):
            head = next((x for x in lines if x.strip()), "")[:60]
            print(f"{n} {kind} {line} {'skip' if skip else 'run'} {head}")
        return 0
    kind, line, lines, skip = bl[int(argv[3])]
    print(f"README.md:{line}: ```{kind} block of {len(lines)} lines")
    if skip:
        print(f"not run: {skip}")
        return 0
    if kind == "text":
        return 0
    return run_yaml(lines, argv[4]) if kind == "yaml" else run_sh(lines, argv[4])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
