"""gold_bf16.py - writes tests/golden/kernels/bf16.h: bf16 goldens from PyTorch (issue 17).

What a PyTorch bf16 user gets, next to a near-exact reference, for the kernels of
firmware/kernels/bf16.h and bf16_matmul.h (tests/unit/test_gold_bf16.cpp reads them):

* case `cvt`: fp32 -> bf16 by torch's `.to(torch.bfloat16)` on N normal fp32 values (random
  normals, random bit patterns over every normal exponent that does not round to inf, exact
  ties with an even and an odd kept bit, one below and one above a tie, signed zeros, the
  largest value that stays finite). Checked here to be round-to-nearest-even (an integer
  model of RNE on the bits, assert), so qtrain's VCVTNEPS2BF16 conversion must give the
  same bits on every one of them.
* case `dn`: fp32 denormals. torch does NOT flush them: it rounds the denormal's bits to
  nearest even like any other value (bf16 denormals, or the smallest normal), where
  VCVTNEPS2BF16 (and qt_bf16_from_f32) gives the zero of the sign. Emitted so the C test
  pins the difference down (qtrain: signed zero; torch: the value below), not to demand
  equality. Checked here too (torch's bits = integer RNE, and most are nonzero).
* cases `c0` `c1` `c2` (matmuls): x[M,K], w[N,K], dy[M,N] are seeded float32 normals
  rounded by torch's `.to(torch.bfloat16)`; dx0[M,K] is plain float32 (bwd_data
  accumulates into it). Slots, all as float64 of the exact values:
    y   = x W^T,        dx = dx0 + dy W,   dw = dy^T x         torch in float64 from the bf16
                                                              values (products exact;
                                                              near-exact sums)
    y_torch = x W^T,  dx_torch = dy W,  dw_torch = dy^T x     torch's own bf16 matmul
                                                              (bf16 operands, bf16 output;
                                                              no dx0: what torch returns)
  Shapes: c0 5x7x9 (every contraction odd), c1 8x6x16 (even), c2 13x35x41 (past the kernels'
  12x32 and 6x16 register tiles; contractions 41, 35 and 13 are odd and no multiple of a
  tile width).
* How torch accumulates its bf16 matmul (Debian's torch 1.13, CPU, measured and asserted
  here): for M*N*K > 16^3 it calls oneDNN, fp32 accumulation and one bf16 rounding of the
  output; at or below 16^3 it runs its native cpublas gemm, where `x @ w.t()` is a dot
  product in fp32 (one rounding) but `dy @ w` and `dy.t() @ x` add each product into the
  bf16 output (a bf16 rounding per step: 2/3 of the outputs differ from the rounded exact
  sum, by up to ~20 bf16 half-ulps). So c0 and c1 (315 and 768) have bf16-accumulated
  dx_torch and dw_torch, c2 (18655) has none. Each is emitted as `<SLOT>_ACC` = the bits of
  torch's accumulator's precision (24: fp32, 8: bf16), and asserted: an ACC 24 output is
  within 2^-8 |t| + (P + 2) 2^-24 sum|ab| of the exact sum, an ACC 8 output is not (the
  distinction is real) but within 2^-8 |t| + (P + 2) (2^-8 + 2^-24) sum|ab|.
Everything is emitted with gold_kernels.emit (`gold_bf16_<case>_<slot>`, `GOLD_BF16_<CASE>_*`).
"""
import numpy as np
import torch

import gold_kernels

SEED = 1700  # issue 17


def bf16_rne_bits(u32):
    """Integer model of fp32 -> bf16 round-to-nearest-even on the bit pattern (no flush, no
    NaN handling: finite inputs only)."""
    u = u32.astype(np.uint64)
    return ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def torch_bf16_bits(f32):
    """torch's fp32 -> bf16 (`.to(torch.bfloat16)`) as uint16 bits."""
    t = torch.from_numpy(f32).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def bits_to_f64(b16):
    return torch.from_numpy((b16.astype(np.uint32) << 16).view(np.float32).astype(np.float64))


def cvt_inputs(g, n):
    """n fp32 values (bit patterns), all normal or zero, none rounding past the largest bf16."""
    parts = []
    parts.append(g.standard_normal(n // 4).astype(np.float32).view(np.uint32))
    # random bits over every normal exponent 1..253 (254 could round to inf)
    r = g.integers(0, 1 << 32, n // 4, dtype=np.uint64).astype(np.uint32)
    e = g.integers(1, 254, n // 4, dtype=np.uint64).astype(np.uint32)
    parts.append((r & 0x807fffff) | (e << 23))
    # ties and their neighbours: low 16 bits 0x8000, 0x7fff, 0x8001, kept lsb even and odd
    m = n - 2 * (n // 4) - 4
    hi = (g.integers(0, 1 << 16, m, dtype=np.uint64).astype(np.uint32) << 16)
    ex = ((hi >> 23) & 0xff)
    hi = np.where((ex == 0) | (ex >= 254), (hi & 0x807fffff) | (127 << 23), hi).astype(np.uint32)
    low = np.array([0x8000, 0x7fff, 0x8001], dtype=np.uint32)[np.arange(m) % 3]
    parts.append(hi | low)
    parts.append(np.array([0x00000000, 0x80000000, 0x7f7f7fff, 0xff7f7fff], dtype=np.uint32))
    return np.concatenate(parts).astype(np.uint32)


def gen_cvt(g):
    u = cvt_inputs(g, 512)
    f = u.view(np.float32)
    tb = torch_bf16_bits(f)
    assert (tb == bf16_rne_bits(u)).all(), 'torch fp32->bf16 is not round-to-nearest-even'
    assert ((u & 0x7f800000) != 0x7f800000).all()
    assert (((u & 0x7f800000) != 0) | ((u & 0x7fffffff) == 0)).all(), 'denormal in cvt'
    ties = int(((u & 0xffff) == 0x8000).sum())
    cvt = ('cvt', dict(N=len(u), TIES=ties),
           [('x', torch.from_numpy(f.astype(np.float64))), ('y', bits_to_f64(tb))])
    # denormals: torch rounds them (no flush); VCVTNEPS2BF16 gives signed zero
    m = g.integers(1, 1 << 23, 16, dtype=np.uint64).astype(np.uint32)
    m[:4] = [1, 0x7fffff, 0x8000, 0x7f8000]  # smallest; largest (rounds to FLT_MIN); ties
    s = (np.arange(16) % 2).astype(np.uint32) << 31
    ud = (m | s).astype(np.uint32)
    td = torch_bf16_bits(ud.view(np.float32))
    assert (td == bf16_rne_bits(ud)).all(), 'torch does something else than RNE on denormals'
    nz = int(((td & 0x7fff) != 0).sum())
    assert nz >= 12, 'torch flushes denormals here?'
    dn = ('dn', dict(N=len(ud), NONZERO=nz),
          [('x', torch.from_numpy(ud.view(np.float32).astype(np.float64))), ('y', bits_to_f64(td))])
    return [cvt, dn]


def gen_mm(g, case, M, N, K):
    def bf(*shape):
        return torch.from_numpy(g.standard_normal(shape).astype(np.float32)).to(torch.bfloat16)
    x, w, dy = bf(M, K), bf(N, K), bf(M, N)
    dx0 = torch.from_numpy(g.standard_normal((M, K)).astype(np.float32))
    x64, w64, dy64 = x.double(), w.double(), dy.double()
    y = x64 @ w64.t()
    dx = dx0.double() + dy64 @ w64
    dw = dy64.t() @ x64
    yt, dxt, dwt = x @ w.t(), dy @ w, dy.t() @ x
    assert yt.dtype == torch.bfloat16 and dxt.dtype == torch.bfloat16
    onednn = M * N * K > 16 ** 3
    acc = dict(Y_TORCH_ACC=24, DX_TORCH_ACC=24 if onednn else 8, DW_TORCH_ACC=24 if onednn else 8)
    mag = dict(Y_TORCH_ACC=(x64.abs() @ w64.abs().t(), K), DX_TORCH_ACC=(dy64.abs() @ w64.abs(), N),
               DW_TORCH_ACC=(dy64.abs().t() @ x64.abs(), M))
    for key, t, e in (('Y_TORCH_ACC', yt, y), ('DX_TORCH_ACC', dxt, dy64 @ w64),
                      ('DW_TORCH_ACC', dwt, dw)):
        err = (t.double() - e).abs()
        sab, P = mag[key]
        fp32_ok = bool((err <= 2.0 ** -8 * t.double().abs() + (P + 2) * 2.0 ** -24 * sab).all())
        bf16_ok = bool((err <= 2.0 ** -8 * t.double().abs() +
                        (P + 2) * (2.0 ** -8 + 2.0 ** -24) * sab).all())
        assert bf16_ok and fp32_ok == (acc[key] == 24), (case, key, fp32_ok)
    return (case, dict(M=M, N=N, K=K, **acc),
            [('x', x64), ('w', w64), ('dy', dy64), ('dx0', dx0.double()),
             ('y', y), ('dx', dx), ('dw', dw),
             ('y_torch', yt.double()), ('dx_torch', dxt.double()), ('dw_torch', dwt.double())])


def generate(outdir):
    g = np.random.default_rng(SEED)
    cases = gen_cvt(g)
    for case, (M, N, K) in (('c0', (5, 7, 9)), ('c1', (8, 6, 16)), ('c2', (13, 35, 41))):
        cases.append(gen_mm(g, case, M, N, K))
    gold_kernels.emit(outdir, 'bf16', cases, 'gold_bf16.py')
    return 'bf16'
