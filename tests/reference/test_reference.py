"""test_reference.py - self-checks of the PyTorch reference (run: /usr/bin/python3
tests/reference/test_reference.py from the project root).

Checks: torch.autograd.gradcheck of every per-op function in ops.py; recurrent vs chunked
gated delta rule at 1e-12 in float64; canonical <-> on-disk layout round trips; the Qwen3.5
split projection layout computes the same GDN layer; ops.py's explicit index formulas compose
to the same layers as model.py's reshape-based split; accumulation split invariance; config
reader behaviour; safetensors round trip; packed documents equal separate documents.
"""
import math
import os
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # keep tests/reference free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import config  # noqa: E402
import convert  # noqa: E402
import model  # noqa: E402
import ops  # noqa: E402
import st_io  # noqa: E402

D = torch.float64
gradcheck = torch.autograd.gradcheck


def rn(*s, scale=1.0, shift=0.0):
    return (torch.randn(*s, dtype=D) * scale + shift).requires_grad_(True)


class GradcheckOps(unittest.TestCase):
    """Analytic (autograd) vs numerical Jacobians of each op, eps 1e-6, atol 1e-5 (the
    torch.autograd.gradcheck defaults for float64)."""

    def setUp(self):
        torch.manual_seed(7)

    def test_dense(self):
        self.assertTrue(gradcheck(ops.matmul, (rn(4, 3), rn(5, 3))))
        for zc in (True, False):
            self.assertTrue(gradcheck(lambda x, w: ops.rmsnorm(x, w, 1e-6, zc)[0], (rn(4, 6), rn(6))))
        tok = torch.tensor([1, 0, 1, 3])
        self.assertTrue(gradcheck(lambda w: ops.embed(tok, w), (rn(4, 3),)))
        self.assertTrue(gradcheck(ops.swiglu, (rn(7), rn(7))))
        self.assertTrue(gradcheck(lambda x, g: ops.sigmoid_gate_heads(x, g, 2, 3), (rn(3, 6), rn(3, 12))))
        self.assertTrue(gradcheck(ops.sigmoid_gate_row, (rn(3, 5), rn(3))))

    def test_gdn(self):
        B, S, Hk, Dk, Hv, Dv, K = 2, 4, 2, 3, 4, 2, 3
        G = 2 * Dk + 2 * (Hv // Hk) * Dv
        Cc = 2 * Hk * Dk + Hv * Dv
        self.assertTrue(gradcheck(lambda q, w: ops.gdn_conv(q, w, B, S, Hk, Dk, Hv, Dv, K)[0],
                                  (rn(B * S, Hk * G), rn(Cc, K))))
        self.assertTrue(gradcheck(lambda ba, al, dt: ops.gdn_gates(ba, al, dt, Hk, Hv),
                                  (rn(5, 2 * Hv), rn(Hv), rn(Hv, shift=1.0))))
        c = rn(B * S, Cc)
        g = (-torch.rand(B * S, Hv, dtype=D)).requires_grad_(True)
        beta = torch.rand(B * S, Hv, dtype=D).requires_grad_(True)
        for chunk in (None, 3):
            self.assertTrue(gradcheck(
                lambda c, g, b: ops.gdn_core(c, g, b, B, S, Hk, Dk, Hv, Dv, 0.5, 1e-6, chunk)[0],
                (c, g, beta)))
        self.assertTrue(gradcheck(lambda o, q, w: ops.gated_rmsnorm(o, q, w, Hk, Dk, Hv, Dv, 1e-6)[0],
                                  (rn(3, Hv * Dv), rn(3, Hk * G), rn(Dv, shift=1.0))))

    def test_attention(self):
        B, S, H, hd, R = 2, 3, 2, 6, 4
        tab = ops.rope_table(S, R, 10000.0)
        self.assertTrue(gradcheck(lambda x: ops.rope(x, tab, B, S, H, hd, R), (rn(B * S, H, hd),)))
        self.assertTrue(gradcheck(lambda q, k, v: ops.attn(q, k, v, B, S, 4, 2, 3, 0.5),
                                  (rn(B * S, 4, 3), rn(B * S, 2, 3), rn(B * S, 2, 3))))

    def test_moe(self):
        logits = rn(6, 5)
        self.assertTrue(gradcheck(lambda l: ops.moe_route(l, 2, 3, 0.37)[1], (logits,)))
        self.assertTrue(gradcheck(lambda l: ops.moe_route(l, 2, 3, 0.37)[2], (logits,)))
        idx = ops.topk_idx(logits, 2)
        self.assertTrue(gradcheck(lambda x, a, b: ops.expert_ffn(x, idx, a, b)[0],
                                  (rn(6, 4), rn(5, 6, 4), rn(5, 4, 3))))
        self.assertTrue(gradcheck(ops.moe_combine, (rn(4, 2), rn(8, 3))))
        tgt = torch.tensor([1, 4, 0, 2, 2, 3])
        self.assertTrue(gradcheck(lambda l: ops.xent(l, tgt, 3), (rn(6, 5),)))

    def test_topk_ties_to_lower_index(self):
        idx = ops.topk_idx(torch.tensor([[1.0, 2.0, 2.0, 0.5, 2.0]], dtype=D), 2)
        self.assertEqual(idx.tolist(), [[1, 2]])

    def test_xent_grad_is_softmax_minus_onehot(self):
        l = rn(4, 6)
        tgt = torch.tensor([0, 5, 2, 2])
        g, = torch.autograd.grad(ops.xent(l, tgt, 2).sum(), l)
        want = torch.softmax(l, -1) - torch.nn.functional.one_hot(tgt, 6)
        self.assertLess(float((g - want).abs().max()), 1e-14)  # same formula, rounding only


class DeltaRule(unittest.TestCase):
    def test_recurrent_vs_chunked(self):
        """Two algorithms, same math: max |diff| <= 1e-12 in float64 (O(S) rounding)."""
        torch.manual_seed(3)
        for (B, S, H, Dk, Dv) in ((2, 13, 3, 4, 5), (1, 64, 2, 8, 8), (1, 5, 1, 3, 2)):
            q = torch.randn(B, S, H, Dk, dtype=D)
            k = torch.nn.functional.normalize(torch.randn(B, S, H, Dk, dtype=D), dim=-1)
            v = torch.randn(B, S, H, Dv, dtype=D)
            g = -torch.rand(B, S, H, dtype=D) * 2.0
            beta = torch.rand(B, S, H, dtype=D)
            ref = ops.delta_rule_recurrent(q, k, v, g, beta)
            for C in (1, 2, 3, 4, 8, 16, 64):
                err = float((ops.delta_rule_chunked(q, k, v, g, beta, C) - ref).abs().max())
                self.assertLess(err, 1e-12, 'S=%d C=%d' % (S, C))

    def test_recurrent_vs_chunked_packed(self):
        """Packed documents (starts mid-chunk, at a chunk's first and last token, one-token
        documents): the two algorithms agree to 1e-12, and the starts change the result."""
        torch.manual_seed(5)
        for (B, S, H, Dk, Dv) in ((2, 13, 3, 4, 5), (1, 40, 2, 8, 8)):
            q = torch.randn(B, S, H, Dk, dtype=D)
            k = torch.nn.functional.normalize(torch.randn(B, S, H, Dk, dtype=D), dim=-1)
            v = torch.randn(B, S, H, Dv, dtype=D)
            g = -torch.rand(B, S, H, dtype=D) * 2.0
            beta = torch.rand(B, S, H, dtype=D)
            start = torch.zeros(B, S, dtype=torch.bool)
            start[:, 0] = True
            for t in (3, 4, 6, 7, 11, 12):
                start[-1, t] = True          # the first sequence keeps one document
            ref = ops.delta_rule_recurrent(q, k, v, g, beta, start=start)
            plain = ops.delta_rule_recurrent(q, k, v, g, beta)
            self.assertGreater(float((ref - plain).abs().max()), 1e-3)
            for C in (1, 2, 3, 4, 8, 16, 64):
                got = ops.delta_rule_chunked(q, k, v, g, beta, C, start=start)
                err = float((got - ref).abs().max())
                self.assertLess(err, 1e-12, 'S=%d C=%d' % (S, C))

    def test_matches_rank1_state_definition(self):
        """o_t = S_t^T q_t with S_t built explicitly from the unrolled sum (1e-12)."""
        torch.manual_seed(4)
        S, Dk, Dv = 6, 3, 2
        q = torch.randn(1, S, 1, Dk, dtype=D)
        k = torch.nn.functional.normalize(torch.randn(1, S, 1, Dk, dtype=D), dim=-1)
        v = torch.randn(1, S, 1, Dv, dtype=D)
        g = -torch.rand(1, S, 1, dtype=D)
        beta = torch.rand(1, S, 1, dtype=D)
        o = ops.delta_rule_recurrent(q, k, v, g, beta)
        st = torch.zeros(Dk, Dv, dtype=D)
        for t in range(S):
            a = math.exp(float(g[0, t, 0]))
            kt, vt = k[0, t, 0], v[0, t, 0]
            st = a * st + torch.outer(kt, beta[0, t, 0] * (vt - a * (st.t() @ kt)))
            self.assertLess(float((st.t() @ q[0, t, 0] - o[0, t, 0]).abs().max()), 1e-12)


def tiny(run='test-next-tiny'):
    return config.dims(config.load(run))


class Layout(unittest.TestCase):
    def test_round_trip(self):
        for run in ('test-next-tiny', 'test-35-tiny'):
            dm = tiny(run)
            P = model.init_params(dm, 5)
            disk = convert.to_disk(P, dm)
            back = convert.from_disk(disk, dm)
            self.assertEqual(sorted(back), sorted(P))
            for k in P:
                self.assertTrue(torch.equal(P[k], back[k]), k)
            npd = {k: v.numpy() for k, v in disk.items()}
            back2 = convert.from_disk(npd, dm)
            for k in P:
                self.assertTrue(np.array_equal(P[k].numpy(), back2[k]), k)
            n_disk = sum(v.numel() for v in disk.values())
            self.assertEqual(n_disk, sum(v.numel() for v in P.values()))

    def test_disk_names(self):
        dm = tiny('test-35-tiny')
        disk = convert.to_disk(model.init_params(dm, 5), dm)
        self.assertIn('model.language_model.layers.0.linear_attn.in_proj_qkv.weight', disk)
        self.assertIn('model.language_model.layers.2.mlp.experts.5.down_proj.weight', disk)
        self.assertIn('lm_head.weight', disk)
        self.assertFalse(any('in_proj_qkvz' in k or 'gate_up_proj' in k for k in disk))
        self.assertEqual(tuple(disk['model.language_model.layers.0.linear_attn.in_proj_b.weight'].shape),
                         (dm['Hv'], dm['d']))

    def test_qwen35_split_layer(self):
        """A GDN layer written against Qwen3.5's flat in_proj_qkv/z/b/a equals model.gdn_layer
        on the canonical grouped weights (1e-13: same math, different summation grouping)."""
        dm = tiny('test-35-tiny')
        P = model.init_params(dm, 6)
        disk = convert.to_disk(P, dm)
        B, S = 2, 7
        h = torch.randn(B * S, dm['d'], dtype=D)
        ref = model.gdn_layer(P, 'model.layers.0.linear_attn.', h, dm, B, S)
        got = qwen35_gdn_layer(disk, 'model.language_model.layers.0.linear_attn.', h, dm, B, S)
        self.assertLess(float((ref - got).abs().max()), 1e-13)


def qwen35_gdn_layer(W, pre, h, dm, B, S):
    """HF Qwen3.5 GatedDeltaNet on the flat split layout (independent of convert.py's maps)."""
    Hk, Hv, Dk, Dv, K = dm['Hk'], dm['Hv'], dm['Dk'], dm['Dv'], dm['K']
    T = h.shape[0]
    W = {k: torch.as_tensor(v) for k, v in W.items()}
    qkv = h @ W[pre + 'in_proj_qkv.weight'].t()
    z = (h @ W[pre + 'in_proj_z.weight'].t()).reshape(T, Hv, Dv)
    b = h @ W[pre + 'in_proj_b.weight'].t()
    a = h @ W[pre + 'in_proj_a.weight'].t()
    cc = qkv.shape[1]
    u = qkv.reshape(B, S, cc).transpose(1, 2)
    u = torch.nn.functional.conv1d(u, W[pre + 'conv1d.weight'], groups=cc, padding=K - 1)[..., :S]
    u = ops.silu(u).transpose(1, 2)
    q = u[..., :Hk * Dk].reshape(B, S, Hk, Dk).repeat_interleave(Hv // Hk, 2)
    k = u[..., Hk * Dk:2 * Hk * Dk].reshape(B, S, Hk, Dk).repeat_interleave(Hv // Hk, 2)
    v = u[..., 2 * Hk * Dk:].reshape(B, S, Hv, Dv)
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + model.f32(1e-6)) * model.f32(Dk ** -0.5)
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + model.f32(1e-6))
    beta = torch.sigmoid(b).reshape(B, S, Hv)
    g = (-torch.exp(W[pre + 'A_log']) * ops.softplus(a + W[pre + 'dt_bias'])).reshape(B, S, Hv)
    o = ops.delta_rule_chunked(q, k, v, g, beta, 4).reshape(T, Hv, Dv)
    y = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + model.f32(dm['eps'])) * W[pre + 'norm.weight'] * ops.silu(z)
    return y.reshape(T, -1) @ W[pre + 'out_proj.weight'].t()


class OpsComposeToModel(unittest.TestCase):
    """The qt_ops.h-layout functions chained as configgen's step graph equal model.py's
    layers (1e-13 absolute on O(1) outputs: float64 rounding only)."""

    def setUp(self):
        torch.manual_seed(11)
        self.dm = tiny('test-next-tiny')
        self.dm['Hv'] = 4
        self.P = model.init_params(self.dm, 9)
        self.B, self.S = 2, 5
        self.h = torch.randn(self.B * self.S, self.dm['d'], dtype=D)

    def test_gdn(self):
        dm, P, B, S, h = self.dm, self.P, self.B, self.S, self.h
        p = 'model.layers.0.linear_attn.'
        Hk, Dk, Hv, Dv = dm['Hk'], dm['Dk'], dm['Hv'], dm['Dv']
        eps = model.f32(dm['eps'])
        qkvz = ops.matmul(h, P[p + 'in_proj_qkvz.weight'])
        ba = ops.matmul(h, P[p + 'in_proj_ba.weight'])
        c, _ = ops.gdn_conv(qkvz, P[p + 'conv1d.weight'][:, 0, :], B, S, Hk, Dk, Hv, Dv, dm['K'])
        beta, g = ops.gdn_gates(ba, P[p + 'A_log'], P[p + 'dt_bias'], Hk, Hv)
        o, _, _ = ops.gdn_core(c, g, beta, B, S, Hk, Dk, Hv, Dv, model.f32(Dk ** -0.5), model.f32(1e-6))
        y, _ = ops.gated_rmsnorm(o, qkvz, P[p + 'norm.weight'], Hk, Dk, Hv, Dv, eps)
        got = ops.matmul(y, P[p + 'out_proj.weight'])
        ref = model.gdn_layer(P, p, h, dm, B, S)
        self.assertLess(float((got - ref).abs().max()), 1e-13)

    def test_attention(self):
        dm, P, B, S, h = self.dm, self.P, self.B, self.S, self.h
        p = 'model.layers.3.self_attn.'
        Hq, Hkv, hd, R = dm['Hq'], dm['Hkv'], dm['hd'], dm['R']
        T = B * S
        eps = model.f32(dm['eps'])
        qg = ops.matmul(h, P[p + 'q_proj.weight'])
        k0 = ops.matmul(h, P[p + 'k_proj.weight'])
        v = ops.matmul(h, P[p + 'v_proj.weight'])
        qn, _ = ops.rmsnorm(qg.reshape(T * Hq, 2 * hd)[:, :hd], P[p + 'q_norm.weight'], eps, True)
        kn, _ = ops.rmsnorm(k0.reshape(T * Hkv, hd), P[p + 'k_norm.weight'], eps, True)
        tab = ops.rope_table(S, R, model.f32(dm['theta']))
        qr = ops.rope(qn.reshape(T, Hq, hd), tab, B, S, Hq, hd, R)
        kr = ops.rope(kn.reshape(T, Hkv, hd), tab, B, S, Hkv, hd, R)
        att, _ = ops.attn(qr, kr, v.reshape(T, Hkv, hd), B, S, Hq, Hkv, hd, model.f32(hd ** -0.5))
        got = ops.matmul(ops.sigmoid_gate_heads(att, qg, Hq, hd), P[p + 'o_proj.weight'])
        ref = model.attn_layer(P, p, h, dm, B, S)
        self.assertLess(float((got - ref).abs().max()), 1e-13)

    def test_moe_and_lb(self):
        dm, P, B, S, h = self.dm, self.P, self.B, self.S, self.h
        p = 'model.layers.1.'
        c = 0.37
        rl = ops.matmul(h, P[p + 'mlp.gate.weight'])
        idx, pr, lb = ops.moe_route(rl, dm['k'], S, c)
        ey, _ = ops.expert_ffn(h, idx, P[p + 'mlp.experts.gate_up_proj'], P[p + 'mlp.experts.down_proj'])
        routed = ops.moe_combine(pr, ey)
        sh = ops.matmul(ops.swiglu(ops.matmul(h, P[p + 'mlp.shared_expert.gate_proj.weight']),
                                   ops.matmul(h, P[p + 'mlp.shared_expert.up_proj.weight'])),
                        P[p + 'mlp.shared_expert.down_proj.weight'])
        sg = ops.matmul(h, P[p + 'mlp.shared_expert_gate.weight'])[:, 0]
        got = routed + ops.sigmoid_gate_row(sh, sg)
        ref, lbref = model.moe_layer(P, p, h, dm, B, S, c, None)
        self.assertLess(float((got - ref).abs().max()), 1e-13)
        self.assertLess(abs(float(lb.sum()) - float(lbref)), 1e-15 + 1e-7 * abs(float(lbref)))  # f32(c) vs c

    def test_moe_capacity_drops(self):
        """ops.moe_capacity (explicit queue scan) + combine over kept slots == model.moe_layer
        with MaxText's cumsum mask, cf 1.0 and 2.0 (E raised so that 2.0 can drop too);
        some assignments really drop; lb from pre-drop counts is unchanged by dropping."""
        B, S = self.B, self.S
        p = 'model.layers.1.'
        c = 0.37
        for cf in (1.0, 2.0, 0.5):
            dm = dict(self.dm, sparse=False, cf=cf)
            C = model.capacity(dm, S)
            self.assertEqual(C, int(max(math.ceil(S * dm['k'] / dm['E']) * cf, cf)))
            P, h = self.P, self.h
            rl = ops.matmul(h, P[p + 'mlp.gate.weight'])
            idx, pr, lb = ops.moe_route(rl, dm['k'], S, c)
            kidx, drops = ops.moe_capacity(idx, S, dm['E'], C)
            ey, _ = ops.expert_ffn(h, kidx, P[p + 'mlp.experts.gate_up_proj'],
                                   P[p + 'mlp.experts.down_proj'])
            routed = ops.moe_combine(pr, ey, kidx)
            sh = ops.matmul(ops.swiglu(ops.matmul(h, P[p + 'mlp.shared_expert.gate_proj.weight']),
                                       ops.matmul(h, P[p + 'mlp.shared_expert.up_proj.weight'])),
                            P[p + 'mlp.shared_expert.down_proj.weight'])
            sg = ops.matmul(h, P[p + 'mlp.shared_expert_gate.weight'])[:, 0]
            got = routed + ops.sigmoid_gate_row(sh, sg)
            dl = []
            ref, lbref = model.moe_layer(P, p, h, dm, B, S, c, None, dl)
            self.assertLess(float((got - ref).abs().max()), 1e-13)
            self.assertEqual(int(drops.sum()), dl[0])
            self.assertLess(abs(float(lb.sum()) - float(lbref)), 1e-15 + 1e-7 * abs(float(lbref)))
            if cf <= 1.0:
                self.assertGreater(dl[0], 0, 'cf %g: nothing dropped, the case tests nothing' % cf)
        # MaxText's rule, by hand: ceil before x cf, int() truncates, at least int(cf)
        dm = dict(self.dm, sparse=False, S=16, k=2, E=4)
        for cf, want in ((1.0, 8), (2.0, 16), (0.3, 2), (0.01, 0), (1.26, 10)):
            self.assertEqual(model.capacity(dict(dm, cf=cf)), want, cf)
        self.assertEqual(model.capacity(dict(dm, cf=1.0, sparse=True)), 0)
        self.assertEqual(model.capacity(dict(dm, cf=0.0)), 0)

    def test_moe_capacity_zero_drops_all(self):
        """A capacity of 0 (cf 0.01: C = 0, issue 35) drops every routed assignment: the MoE
        block is the gated shared expert alone (routed output exactly 0), every assignment
        counts as dropped, and the load-balance term (pre-drop counts) is the dropless one."""
        B, S = self.B, self.S
        p = 'model.layers.1.'
        c = 0.37
        dm = dict(self.dm, sparse=False, cf=0.01)
        self.assertEqual(model.capacity(dm, S), 0)
        self.assertTrue(model.dropping(dm))
        self.assertFalse(model.dropping(dict(dm, cf=0.0)))
        P, h = self.P, self.h
        sh = ops.matmul(ops.swiglu(ops.matmul(h, P[p + 'mlp.shared_expert.gate_proj.weight']),
                                   ops.matmul(h, P[p + 'mlp.shared_expert.up_proj.weight'])),
                        P[p + 'mlp.shared_expert.down_proj.weight'])
        sg = ops.matmul(h, P[p + 'mlp.shared_expert_gate.weight'])[:, 0]
        dl = []
        ref, lbref = model.moe_layer(P, p, h, dm, B, S, c, None, dl)
        self.assertEqual(float((ref - ops.sigmoid_gate_row(sh, sg)).abs().max()), 0.0)
        self.assertEqual(dl[0], B * S * dm['k'])
        idx, _, _ = ops.moe_route(ops.matmul(h, P[p + 'mlp.gate.weight']), dm['k'], S, c)
        kidx, drops = ops.moe_capacity(idx, S, dm['E'], 0)
        self.assertTrue(bool((kidx == -1).all()))
        self.assertEqual(int(drops.sum()), B * S * dm['k'])
        _, lbfree = model.moe_layer(P, p, h, dict(dm, cf=-1.0), B, S, c, None)
        self.assertEqual(float(lbref), float(lbfree))

    def test_lb_matches_maxtext_formula(self):
        """sum over layers/sequences of c*sum f*Pbar == w * mean_layers((E/B) sum_b sum_e f Pbar)."""
        dm = dict(self.dm, load_balance_loss_weight=0.01, B=2)
        c = model.lb_coefficient(dm)
        self.assertAlmostEqual(c * dm['B'] * dm['L'], 0.01 * dm['E'], places=15)


class Training(unittest.TestCase):
    def test_accumulation_split_invariance(self):
        """Gradient of one B=4 step == sum of gradients of 4 microbatches of 1 sequence with
        the global token count (float64 rounding: 1e-14 relative)."""
        dm = tiny('test-next-tiny')
        dm['B'] = 4
        P = {k: v.requires_grad_(True) for k, v in model.init_params(dm, 2).items()}
        inp = torch.randint(0, dm['V'], (4, 16))
        tgt = torch.randint(0, dm['V'], (4, 16))
        names = sorted(P)
        c = 0.0025
        full = torch.autograd.grad(model.loss_fn(P, dm, inp, tgt, 64, c)[0], [P[n] for n in names])
        acc = [torch.zeros_like(g) for g in full]
        for m in range(4):
            gm = torch.autograd.grad(model.loss_fn(P, dm, inp[m:m + 1], tgt[m:m + 1], 64, c)[0],
                                     [P[n] for n in names])
            acc = [a + g for a, g in zip(acc, gm)]
        for n, a, f in zip(names, acc, full):
            self.assertLess(float((a - f).abs().max()), 1e-14 * max(1.0, float(f.abs().max())) + 1e-17, n)

    def test_model_gradient_directional(self):
        """Autograd directional derivative of the full loss vs central difference (h=1e-6,
        rel 1e-6). Measured: the error scales as h^2 (7.6e-6 at h=1e-5, 7.6e-8 at 1e-6: the
        l2-normalised GDN q/k have large curvature); rounding is ~1e-9 at h=1e-6; much larger
        h flips routes (a jump at 3e-4)."""
        dm = tiny('test-35-tiny')
        P = model.init_params(dm, 3)
        inp = torch.randint(0, dm['V'], (2, 9))
        tgt = torch.randint(0, dm['V'], (2, 9))
        torch.manual_seed(1)
        dirs = {k: torch.randn_like(v) for k, v in P.items()}
        Pg = {k: v.clone().requires_grad_(True) for k, v in P.items()}
        loss = model.loss_fn(Pg, dm, inp, tgt, lb_c=0.01)[0]
        gs = torch.autograd.grad(loss, list(Pg.values()))
        ana = sum(float((g * dirs[k]).sum()) for k, g in zip(Pg, gs))
        h = 1e-6
        lp = float(model.loss_fn({k: v + h * dirs[k] for k, v in P.items()}, dm, inp, tgt, lb_c=0.01)[0])
        lm = float(model.loss_fn({k: v - h * dirs[k] for k, v in P.items()}, dm, inp, tgt, lb_c=0.01)[0])
        self.assertLess(abs((lp - lm) / (2 * h) - ana), 1e-6 * max(1.0, abs(ana)))

    def test_schedule(self):
        dm = tiny('test-next-tiny')
        peak = model.f32(dm['learning_rate'])
        self.assertEqual(model.lr_at(dm, 0), 0.0)                 # warm = 1
        self.assertAlmostEqual(model.lr_at(dm, 1), peak, places=15)
        self.assertAlmostEqual(model.lr_at(dm, 9), peak * model.f32(0.1), places=15)


class Packing(unittest.TestCase):
    """Packed documents (docs/model.md 1.7): the packed model's loss sum and its gradients
    equal the sums over every document run as an unpacked sequence of its own (a causal
    model: a document ending with eos is run without that eos, whose target has no loss),
    1e-12 relative (float64 rounding only); positions and the config keys."""

    def test_positions_and_config(self):
        inp = torch.tensor([[7, 1, 7, 7, 2, 3], [1, 2, 3, 7, 4, 5]])
        pos, docs = model.doc_positions(inp, 7)
        self.assertEqual(pos.tolist(), [[0, 0, 1, 0, 0, 1], [0, 1, 2, 3, 0, 1]])
        self.assertEqual(docs.tolist(), [[0, 1, 1, 2, 3, 3], [0, 0, 0, 0, 1, 1]])
        dm = tiny('test-next-pack')
        self.assertTrue(dm['packing'])
        self.assertEqual(dm['eos'], 7)
        self.assertFalse(tiny('test-next-tiny')['packing'])

    def test_packed_equals_separate_documents(self):
        for run in ('test-next-pack', 'test-35-pack'):
            dm = tiny(run)
            E, S = dm['eos'], dm['S']
            P = model.init_params(dm, 3)
            gen = torch.Generator().manual_seed(5)
            tok = torch.randint(0, dm['V'], (2, S + 1), generator=gen)
            tok[tok == E] = E + 1
            for t in (0, 3, 4, 6, 10):            # documents of 1, 1, 2, 4 tokens, ...
                tok[0, t] = E
            for t in (5, 15):                      # eos on the last input token
                tok[1, t] = E
            inp, tgt = tok[:, :S], tok[:, 1:]
            Pg = {k: v.clone().requires_grad_(True) for k, v in P.items()}
            ce = model.loss_fn(Pg, dm, inp, tgt)[1]
            g_pack = torch.autograd.grad(ce, list(Pg.values()))
            plain = dict(dm, packing=False)
            total, g_sep = 0.0, [torch.zeros_like(v) for v in P.values()]
            n = 0
            for b in range(2):
                docs = model.doc_spans(model.doc_positions(inp, E)[1][b].tolist())
                for a, e in docs:
                    e2 = e - 1 if int(inp[b, e - 1]) == E else e   # the eos' target: no loss
                    if e2 <= a:
                        continue
                    n += e2 - a
                    Pd = {k: v.clone().requires_grad_(True) for k, v in P.items()}
                    ced = model.loss_fn(Pd, plain, inp[b:b + 1, a:e2], tgt[b:b + 1, a:e2])[1]
                    total += float(ced)
                    for acc, g in zip(g_sep, torch.autograd.grad(ced, list(Pd.values()))):
                        acc += g
            self.assertEqual(n, int(model.loss_mask(dm, inp).sum()))
            self.assertLess(abs(float(ce) - total), 1e-12 * abs(total))
            for k, a, b in zip(P, g_pack, g_sep):
                scale = max(float(b.abs().max()), 1e-30)
                self.assertLess(float((a - b).abs().max()), 1e-12 * scale, '%s %s' % (run, k))
            # not vacuous: the unpacked model on the same window differs
            ce_u = model.loss_fn(P, plain, inp, tgt)[1]
            self.assertGreater(abs(float(ce_u) - total), 1e-3)


class Mtp(unittest.TestCase):
    """The multi-token-prediction head (docs/model.md 1.8): a finite-difference check of its
    backward in float64 (every parameter direction, the head's and the trunk's, with two
    depths and packing, so the shared fc / norms and the document masks are exercised),
    its target and mask rule, and the disk layout of its names."""

    def test_head_gradient_directional(self):
        for run, extra in (('test-next-mtp', {'mtp': 2}),
                           ('test-35-mtp', {'mtp': 2, 'packing': True, 'eos': 5})):
            dm = dict(tiny(run), **extra)
            P = model.init_params(dm, 3)
            gen = torch.Generator().manual_seed(4)
            inp = torch.randint(0, dm['V'], (2, 9), generator=gen)
            tgt = torch.randint(0, dm['V'], (2, 9), generator=gen)
            if dm.get('packing'):
                inp[0, 2] = inp[1, 6] = dm['eos']
            torch.manual_seed(1)
            dirs = {k: torch.randn_like(v) for k, v in P.items()}
            Pg = {k: v.clone().requires_grad_(True) for k, v in P.items()}
            aux = {}
            loss = model.loss_fn(Pg, dm, inp, tgt, aux=aux)[0]
            self.assertGreater(float(aux['mtp_sum']), 0.0)
            gs = torch.autograd.grad(loss, list(Pg.values()))
            # the head's parameters all get a gradient
            for k, g in zip(Pg, gs):
                if k.startswith('mtp.'):
                    self.assertGreater(float(g.abs().max()), 0.0, k)
            ana = sum(float((g * dirs[k]).sum()) for k, g in zip(Pg, gs))
            h = 1e-6
            lp = float(model.loss_fn({k: v + h * dirs[k] for k, v in P.items()}, dm, inp, tgt)[0])
            lm = float(model.loss_fn({k: v - h * dirs[k] for k, v in P.items()}, dm, inp, tgt)[0])
            self.assertLess(abs((lp - lm) / (2 * h) - ana), 1e-6 * max(1.0, abs(ana)), run)

    def test_targets_and_masks(self):
        dm = dict(tiny('test-next-mtp'), packing=True, eos=9)
        inp = torch.tensor([[1, 2, 9, 4, 5, 6]])
        tgt = torch.tensor([[2, 9, 4, 5, 6, 7]])
        tok, tj, keep = model.mtp_inputs(dm, inp, tgt, 1)
        self.assertEqual(tok.tolist(), [[2, 9, 4, 5, 6, -1]])
        self.assertEqual(tj.tolist(), [[9, 4, 5, 6, 7, 0]])
        # x_{i+2} must share x_i's document: not across the eos at 2, not past the window
        self.assertEqual(keep.tolist(), [[True, False, False, True, True, False]])
        tok, tj, keep = model.mtp_inputs(dm, inp, tgt, 2)
        self.assertEqual(keep.tolist(), [[False, False, False, True, False, False]])
        self.assertEqual(model.mtp_count(dict(dm, packing=False, mtp=2), inp), 5 + 4)

    def test_disk_names(self):
        for run in ('test-next-mtp', 'test-35-mtp'):
            dm = tiny(run)
            P = model.init_params(dm, 1)
            disk = convert.to_disk(P, dm)
            self.assertIn('mtp.fc.weight', disk)
            self.assertEqual(tuple(disk['mtp.fc.weight'].shape), (dm['d'], 2 * dm['d']))
            self.assertIn('mtp.layers.0.mlp.experts.3.down_proj.weight', disk)
            self.assertIn('mtp.layers.0.self_attn.q_norm.weight', disk)
            self.assertFalse([k for k in disk if 'language_model.mtp' in k])
            back = convert.from_disk(disk, dm)
            self.assertEqual(sorted(back), sorted(P))
            for k in P:
                self.assertTrue(torch.equal(back[k], P[k]), k)


class Config(unittest.TestCase):
    def test_multiline_nested_list_and_comments(self):
        txt = 'a: 1  # c\nb: [\n  [\'x\', [\'y\', "z"]],  # note\n  [\'w\', 3],\n]\nc: "q#r"\nd: 1.0e-5\n'
        got = config.parse_text(txt)
        self.assertEqual(got['a'][0], 1)
        self.assertEqual(got['b'][0], [['x', ['y', 'z']], ['w', 3]])
        self.assertEqual(got['c'][0], 'q#r')
        self.assertEqual(got['d'], (1e-5, 7))

    def test_errors_name_line(self):
        with self.assertRaisesRegex(config.ConfigError, r'<text>:2:'):
            config.parse_text('a: 1\n  b: 2\n')
        with self.assertRaisesRegex(config.ConfigError, r'<text>:1: unterminated list'):
            config.parse_text('a: [1, 2\n')

    def test_layering(self):
        cfg = config.load('test-next-lb')
        self.assertEqual(cfg['base_emb_dim'], 32)          # model file over base
        self.assertEqual(cfg['learning_rate'], 3.0e-3)     # run file over base
        self.assertEqual(cfg['run_name'], 'test-next-lb')
        self.assertEqual(cfg['adam_b2'], 0.95)             # base default
        cfg = config.load('test-next-lb', ['base_emb_dim=64'])
        self.assertEqual(cfg['base_emb_dim'], 64)
        with self.assertRaisesRegex(config.ConfigError, 'unknown key'):
            config.load('test-next-lb', ['no_such_key=1'])
        self.assertEqual(len(cfg['logical_axis_rules']), 46)

    def test_safetensors_round_trip(self):
        t = {'b': np.arange(6, dtype=np.float32).reshape(2, 3), 'a': np.ones(3, np.float32)}
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, 'x.safetensors')
            st_io.write(p, t, {'k': 'v'})
            back, meta = st_io.read(p)
            with open(p, 'rb') as f:
                n = int.from_bytes(f.read(8), 'little')
        self.assertEqual(n % 8, 0)
        self.assertEqual(meta, {'k': 'v'})
        for k in t:
            self.assertTrue(np.array_equal(t[k], back[k]))


if __name__ == '__main__':
    torch.set_num_threads(1)
    unittest.main(verbosity=1)
