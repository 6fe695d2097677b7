"""make_goldens.py - the one entry point of `make goldens`: regenerates every golden file.

Run from the project root as `/usr/bin/python3 tests/reference/make_goldens.py` (Debian's
python3-torch). Writes tests/golden/kernels/<op>.h (SPEC.md s.1; bf16.h: gold_bf16.py) and tests/golden/e2e/<run>/
(SPEC.md s.2). Deterministic: fixed seeds, one torch thread, float64, sorted outputs, no
dates; running it twice gives byte-identical files.

`make_goldens.py --jobs N` spreads the work over N worker processes (`make goldens` and
tests/e2e/50_reference.sh use 2, one per core): the kernel goldens are one task, each e2e
run another, handed out in order to whichever worker is free. Every file depends only on
its own seeds (run i's seed search starts at 100 * (i + 1) whoever runs it, one torch thread
each), so the files are those of the one-process run, byte for byte.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # keep tests/reference free of __pycache__
sys.path.insert(0, HERE)

import torch  # noqa: E402

import gold_bf16  # noqa: E402
import gold_e2e  # noqa: E402
import gold_kernels  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, '..', '..'))


def setup():
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)


def task(t):
    """One unit of work: 'kernels' (every kernel golden) or the e2e run of index t."""
    setup()
    if t == 'kernels':
        kdir = os.path.join(ROOT, 'tests', 'golden', 'kernels')
        ops = gold_kernels.generate(kdir)
        ops.append(gold_bf16.generate(kdir))
        return 'kernel goldens: %s -> %s' % (' '.join(ops), os.path.relpath(kdir, ROOT))
    run = gold_e2e.RUNS[t]
    seed, rec = gold_e2e.generate_run(run, os.path.join(ROOT, 'tests', 'golden', 'e2e'),
                                      gold_e2e.seed0(t))
    return ('e2e %s: seed %d, loss %.6f -> %.6f, min router margin %.3g' %
            (run, seed, rec['loss'][0], rec['loss'][-1], min(rec['route_margin_min'])))


def parse_jobs(argv):
    """--jobs N -> N; no argument -> 1 (this process does everything)."""
    if not argv:
        return 1
    if len(argv) == 2 and argv[0] == '--jobs' and argv[1].isdigit() and int(argv[1]) >= 1:
        return int(argv[1])
    sys.exit('usage: make_goldens.py [--jobs N] (N >= 1), got: %s' % ' '.join(argv))


def main():
    jobs = parse_jobs(sys.argv[1:])
    tasks = ['kernels'] + list(range(len(gold_e2e.RUNS)))
    if jobs == 1:
        for t in tasks:
            print(task(t), flush=True)
        return 0
    import multiprocessing
    # spawn: each worker imports torch afresh (no state forked from this process)
    with multiprocessing.get_context('spawn').Pool(jobs) as pool:
        for line in pool.imap(task, tasks, chunksize=1):
            print(line, flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
