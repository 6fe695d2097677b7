"""make_goldens.py - the one entry point of `make goldens`: regenerates every golden file.

Run from the project root as `/usr/bin/python3 tests/reference/make_goldens.py` (Debian's
python3-torch). Writes tests/golden/kernels/<op>.h (SPEC.md s.1; bf16.h: gold_bf16.py) and tests/golden/e2e/<run>/
(SPEC.md s.2). Deterministic: fixed seeds, one torch thread, float64, sorted outputs, no
dates; running it twice gives byte-identical files.
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


def main():
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    kdir = os.path.join(ROOT, 'tests', 'golden', 'kernels')
    ops = gold_kernels.generate(kdir)
    ops.append(gold_bf16.generate(kdir))
    print('kernel goldens: %s -> %s' % (' '.join(ops), os.path.relpath(kdir, ROOT)))
    edir = os.path.join(ROOT, 'tests', 'golden', 'e2e')
    for run, (seed, rec) in gold_e2e.generate(edir).items():
        print('e2e %s: seed %d, loss %.6f -> %.6f, min router margin %.3g' %
              (run, seed, rec['loss'][0], rec['loss'][-1], min(rec['route_margin_min'])))
    return 0


if __name__ == '__main__':
    sys.exit(main())
