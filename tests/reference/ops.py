"""ops.py - per-op reference functions with exactly the slot layouts of qt_ops.h.

Every function is plain differentiable torch (use float64 tensors): the kernel goldens take
gradients of L = sum(out * d_out) with torch.autograd, and test_reference.py gradchecks each
function. Layout index formulas (qkvz / ba grouping, q_proj [q|gate] per head, conv channel
order) are written out explicitly here, independently of model.py's reshape-based split, so
the two cross-check each other.

Invariants: no function mixes tokens of different sequences (row t belongs to sequence t // S);
every reduction is a plain sum in float64; top-k ties go to the lower expert index.
"""
import torch

F = torch.nn.functional


def silu(x):
    return x * torch.sigmoid(x)


def softplus(x):
    # Same threshold as the firmware's double build (QT_SOFTPLUS): linear above 20.
    return F.softplus(x, beta=1.0, threshold=20.0)


# ------------------------------------------------------------------ dense basics

def matmul(x, w):
    """x [M,K], w [N,K] (HF [out,in]) -> y [M,N] = x w^T."""
    return x @ w.t()


def rmsnorm(x, w, eps, zero_centred):
    """x [R,n], w [n] -> (y [R,n], rstd [R]); y = (x*rstd) * (1+w or w)."""
    rstd = 1.0 / torch.sqrt((x * x).mean(-1) + eps)
    s = 1.0 + w if zero_centred else w
    return (x * rstd[:, None]) * s, rstd


def embed(tokens, w):
    """tokens int64 [T], w [V,d] -> x [T,d]."""
    return w[tokens]


def swiglu(a, u):
    """h = silu(a) * u, elementwise."""
    return silu(a) * u


def sigmoid_gate_heads(x, qg, H, hd):
    """x [T,H*hd]; qg [T,H*2hd] is the q_proj output, gate of x[t][h*hd+i] at h*2hd+hd+i."""
    T = x.shape[0]
    cols = torch.tensor([h * 2 * hd + hd + i for h in range(H) for i in range(hd)])
    return x * torch.sigmoid(qg.reshape(T, H * 2 * hd)[:, cols])


def sigmoid_gate_row(x, gate):
    """x [T,n], gate [T] -> x * sigmoid(gate[t])."""
    return x * torch.sigmoid(gate)[:, None]


# ------------------------------------------------------------------ GDN layouts

def gdn_columns(Hk, Dk, Hv, Dv):
    """Column indices into in_proj_qkvz / in_proj_ba output (qt_ops.h grouped layout).
    Returns dict of LongTensors: conv (the Cc conv channels in order [q|k|v]), q, k, v, z,
    b, a; v/z/b/a are value-head-major (j*Dv + i, or j)."""
    r = Hv // Hk
    G = 2 * Dk + 2 * r * Dv
    q = [h * G + i for h in range(Hk) for i in range(Dk)]
    k = [h * G + Dk + i for h in range(Hk) for i in range(Dk)]
    v = [(j // r) * G + 2 * Dk + (j % r) * Dv + i for j in range(Hv) for i in range(Dv)]
    z = [(j // r) * G + 2 * Dk + r * Dv + (j % r) * Dv + i for j in range(Hv) for i in range(Dv)]
    b = [(j // r) * 2 * r + (j % r) for j in range(Hv)]
    a = [(j // r) * 2 * r + r + (j % r) for j in range(Hv)]
    t = lambda l: torch.tensor(l, dtype=torch.long)
    return dict(q=t(q), k=t(k), v=t(v), z=t(z), b=t(b), a=t(a), conv=t(q + k + v), G=G, r=r)


def gdn_conv(qkvz, w, B, S, Hk, Dk, Hv, Dv, K):
    """qkvz [T,Hk*G], w [Cc,K] -> (c [T,Cc], pre [T,Cc]); causal depthwise conv per
    sequence over the [q|k|v] channels, tap K-1 on the current token, then SiLU."""
    cols = gdn_columns(Hk, Dk, Hv, Dv)
    u = qkvz[:, cols['conv']]
    Cc = u.shape[1]
    u = u.reshape(B, S, Cc)
    up = torch.cat([u.new_zeros(B, K - 1, Cc), u], dim=1)
    pre = u.new_zeros(B, S, Cc)
    for j in range(K):
        pre = pre + w[:, j] * up[:, j:j + S, :]
    pre = pre.reshape(B * S, Cc)
    return silu(pre), pre


def gdn_gates(ba, a_log, dt_bias, Hk, Hv):
    """ba [T,2Hv] grouped -> (beta [T,Hv] = sigmoid(b), g [T,Hv] = -exp(A_log)*softplus(a+dt_bias))."""
    cols = gdn_columns(Hk, 1, Hv, 1)
    beta = torch.sigmoid(ba[:, cols['b']])
    g = -torch.exp(a_log) * softplus(ba[:, cols['a']] + dt_bias)
    return beta, g


def delta_rule_recurrent(q, k, v, g, beta, start=None):
    """q,k [B,S,H,Dk] (already normalised/scaled), v [B,S,H,Dv], g,beta [B,S,H] ->
    o [B,S,H,Dv]. S_0 = 0; decay, delta-rule write, read with the updated state.
    start [B,S] bool (packed documents): where true the token begins a document and the
    state is replaced by a fresh zero state (no decay: its g is not used)."""
    B, S, H, Dk = q.shape
    Dv = v.shape[-1]
    st = q.new_zeros(B, H, Dk, Dv)
    outs = []
    for t in range(S):
        if start is not None and bool(start[:, t].any()):
            fresh = start[:, t][:, None, None, None]
            keep = torch.exp(g[:, t])[:, :, None, None] * st
            st = torch.where(fresh, q.new_zeros(B, H, Dk, Dv), keep)
        else:
            st = torch.exp(g[:, t])[:, :, None, None] * st
        pred = torch.einsum('bhkv,bhk->bhv', st, k[:, t])
        delta = beta[:, t][:, :, None] * (v[:, t] - pred)
        st = st + k[:, t][:, :, :, None] * delta[:, :, None, :]
        outs.append(torch.einsum('bhkv,bhk->bhv', st, q[:, t]))
    return torch.stack(outs, dim=1)


def delta_rule_chunked(q, k, v, g, beta, C, start=None):
    """Same contract as delta_rule_recurrent, computed chunk by chunk with the WY form:
    (I + A) U = diag(beta) V - diag(beta e^G) K S0 (A strictly lower), O = diag(e^G) Q S0 +
    ((Q K^T) . D) U, S' = e^{G_C} S0 + (K . e^{G_C - G})^T U. The sequence is zero-padded to a
    multiple of C (g = beta = 0 there: no decay, no write).
    start [B,S] bool (packed documents), as delta_rule_recurrent: a start's decay is 0, so a
    chunk splits into segments at its starts. D keeps only pairs of one segment (no decay
    product crosses a start), e^G only the tokens before the chunk's first start (the later
    ones do not see S0), e^{G_C - G} only the last segment's tokens, and a start's g is
    replaced by 0 (it only ever enters differences within its own segment, where it cancels)."""
    B, S, H, Dk = q.shape
    Dv = v.shape[-1]
    n = (S + C - 1) // C
    pad = n * C - S
    if pad:
        z4 = lambda x: torch.cat([x, x.new_zeros((B, pad) + tuple(x.shape[2:]))], dim=1)
        q, k, v, g, beta = z4(q), z4(k), z4(v), z4(g), z4(beta)
    # [B,H,n,C,...]
    rs = lambda x: x.reshape((B, n, C) + tuple(x.shape[2:])).transpose(1, 2) if x.dim() == 3 \
        else x.reshape(B, n, C, H, x.shape[-1]).permute(0, 3, 1, 2, 4)
    q, k, v = rs(q), rs(k), rs(v)
    g = g.reshape(B, n, C, H).permute(0, 3, 1, 2)
    beta = beta.reshape(B, n, C, H).permute(0, 3, 1, 2)
    eye = torch.eye(C).to(q.dtype)
    strict = torch.tril(torch.ones(C, C, dtype=torch.bool), -1)
    incl = torch.tril(torch.ones(C, C, dtype=torch.bool), 0)
    if start is not None:
        sp = start if not pad else torch.cat([start, start.new_zeros(B, pad)], dim=1)
        sp = sp.reshape(B, 1, n, C)                        # [B,1,n,C], broadcast over H
    st = q.new_zeros(B, H, Dk, Dv)
    outs = []
    for c in range(n):
        qc, kc, vc = q[:, :, c], k[:, :, c], v[:, :, c]
        gc, bc = g[:, :, c], beta[:, :, c]
        if start is None:
            same = incl
            cont = torch.ones_like(gc)
        else:
            sc = sp[:, :, c].expand(gc.shape)              # [B,H,C]
            gc = torch.where(sc, torch.zeros_like(gc), gc)
            seg = torch.cumsum(sc.to(torch.int64), dim=-1)  # segment index in the chunk
            same = incl & (seg[..., :, None] == seg[..., None, :])
            cont = (seg == 0).to(q.dtype)                  # before the first start: sees S0
        G = torch.cumsum(gc, dim=-1)                       # [B,H,C]
        diff = G[..., :, None] - G[..., None, :]           # G_i - G_m
        # zero the masked exponents before exp so nothing can overflow
        d_incl = torch.exp(torch.where(same, diff, torch.zeros_like(diff))) * same
        d_strict = d_incl * strict
        kk = kc @ kc.transpose(-1, -2)
        A = bc[..., :, None] * d_strict * kk
        eG = torch.exp(G) * cont
        rhs = bc[..., None] * vc - (bc * eG)[..., None] * (kc @ st)
        U = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
        o = eG[..., None] * (qc @ st) + ((qc @ kc.transpose(-1, -2)) * d_incl) @ U
        GC = G[..., -1:]
        wl = torch.exp(GC - G) * same[..., -1, :]          # only the last segment reaches S'
        st = eG[..., -1:][..., None] * st + (kc * wl[..., None]).transpose(-1, -2) @ U
        outs.append(o)
    o = torch.stack(outs, dim=2).permute(0, 2, 3, 1, 4).reshape(B, n * C, H, Dv)
    return o[:, :S]


def gdn_core(c, g, beta, B, S, Hk, Dk, Hv, Dv, qscale, l2eps, chunk=None):
    """c [T,Cc] conv output, g/beta [T,Hv] -> (o [T,Hv*Dv], rq [T,Hk], rk [T,Hk]).
    rq/rk are the key-head l2 reciprocal norms; value head j reads key head j // r."""
    T = c.shape[0]
    r = Hv // Hk
    q = c[:, :Hk * Dk].reshape(T, Hk, Dk)
    k = c[:, Hk * Dk:2 * Hk * Dk].reshape(T, Hk, Dk)
    v = c[:, 2 * Hk * Dk:].reshape(B, S, Hv, Dv)
    rq = 1.0 / torch.sqrt((q * q).sum(-1) + l2eps)
    rk = 1.0 / torch.sqrt((k * k).sum(-1) + l2eps)
    qh = (q * rq[..., None] * qscale).repeat_interleave(r, dim=1).reshape(B, S, Hv, Dk)
    kh = (k * rk[..., None]).repeat_interleave(r, dim=1).reshape(B, S, Hv, Dk)
    gg, bb = g.reshape(B, S, Hv), beta.reshape(B, S, Hv)
    if chunk:
        o = delta_rule_chunked(qh, kh, v, gg, bb, chunk)
    else:
        o = delta_rule_recurrent(qh, kh, v, gg, bb)
    return o.reshape(T, Hv * Dv), rq, rk


def gated_rmsnorm(o, qkvz, w, Hk, Dk, Hv, Dv, eps):
    """o [T,Hv*Dv], z from qkvz (grouped), w [Dv] -> (y [T,Hv*Dv], rstd [T*Hv])."""
    T = o.shape[0]
    z = qkvz[:, gdn_columns(Hk, Dk, Hv, Dv)['z']].reshape(T, Hv, Dv)
    oo = o.reshape(T, Hv, Dv)
    rstd = 1.0 / torch.sqrt((oo * oo).mean(-1) + eps)
    y = ((oo * rstd[..., None]) * w) * silu(z)
    return y.reshape(T, Hv * Dv), rstd.reshape(T * Hv)


# ------------------------------------------------------------------ attention

def rope_table(S, R, theta, dtype=torch.float64):
    """[S, R/2, 2] of (cos, sin) of pos * theta^(-2i/R), in float64."""
    i = torch.arange(R // 2, dtype=torch.float64)
    inv = torch.pow(torch.tensor(float(theta), dtype=torch.float64), -2.0 * i / R)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1).to(dtype)


def rope(x, table, B, S, H, hd, R):
    """x [T,H,hd] -> y: rotate-half on the first R dims, position t % S."""
    h = R // 2
    pos = torch.arange(B * S) % S
    cos = table[pos, :, 0][:, None, :]
    sin = table[pos, :, 1][:, None, :]
    x1, x2, rest = x[..., :h], x[..., h:R], x[..., R:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


def attn(q, k, v, B, S, Hq, Hkv, hd, scale):
    """q [T,Hq,hd], k/v [T,Hkv,hd] -> (o [T,Hq*hd], lse [B,Hq,S]); causal, GQA."""
    grp = Hq // Hkv
    q = q.reshape(B, S, Hq, hd)
    k = k.reshape(B, S, Hkv, hd).repeat_interleave(grp, dim=2)
    v = v.reshape(B, S, Hkv, hd).repeat_interleave(grp, dim=2)
    s = torch.einsum('bihd,bjhd->bhij', q, k) * scale
    mask = torch.tril(torch.ones(S, S, dtype=torch.bool))
    s = s.masked_fill(~mask, float('-inf'))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None])
    o = torch.einsum('bhij,bjhd->bihd', p, v)
    return o.reshape(B * S, Hq * hd), lse


# ------------------------------------------------------------------ MoE

def topk_idx(logits, k):
    """Descending top-k on raw logits, ties to the lower index (stable sort)."""
    order = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices
    return order[:, :k]


def moe_route(logits, k, S, c=0.0):
    """logits [T,E] -> (idx [T,k] int64, p [T,k], lb_seq [T//S] or None).
    p = softmax over the k selected logits in slot order; lb_seq[s] = c sum_e f_e Pbar_e with
    f_e = (#(t,slot) of the sequence routed to e)/S (no gradient) and Pbar_e = mean_t softmax(
    all E logits)_e."""
    idx = topk_idx(logits, k)
    p = torch.softmax(torch.gather(logits, 1, idx), dim=-1)
    lb = None
    if c != 0.0:
        T, E = logits.shape
        nb = T // S
        P = torch.softmax(logits, dim=-1).reshape(nb, S, E)
        cnt = torch.zeros(nb, E, dtype=logits.dtype)
        cnt.scatter_add_(1, idx.reshape(nb, S * k), torch.ones(nb, S * k, dtype=logits.dtype))
        f = cnt / S
        lb = c * (f * P.mean(dim=1)).sum(-1)
    return idx, p, lb


def expert_ffn(x, idx, w_gu, w_down):
    """x [T,d], idx [T,k], w_gu [E,2f,d], w_down [E,d,f] -> (y [T*k,d], gu [T*k,2f]);
    row t*k+slot is expert idx[t,slot] applied to x_t, unweighted."""
    T, d = x.shape
    k = idx.shape[1]
    E, f2, _ = w_gu.shape
    f = f2 // 2
    flat = idx.reshape(-1)
    xr = x.repeat_interleave(k, dim=0)
    y = x.new_zeros(T * k, d)
    gu = x.new_zeros(T * k, f2)
    for e in range(E):
        sel = (flat == e).nonzero().reshape(-1)
        if sel.numel() == 0:
            continue
        ge = xr[sel] @ w_gu[e].t()
        he = silu(ge[:, :f]) * ge[:, f:]
        y = y.index_copy(0, sel, he @ w_down[e].t())
        gu = gu.index_copy(0, sel, ge)
    return y, gu


def moe_capacity(idx, S, E, C):
    """idx [T,k] -> (kidx [T,k], drops [T//S]) (QT_OP_MOE_CAPACITY): per sequence of S
    tokens, expert e's queue takes the (t, slot) assignments in increasing t then slot; the
    n-th (1-based) is kept iff n <= C, else its kidx is -1. drops = the sequence's dropped
    count. An explicit scan, independent of model.capacity_keep's cumsum form."""
    T, k = idx.shape
    kidx = idx.clone()
    drops = torch.zeros(T // S, dtype=torch.int64)
    for s in range(T // S):
        cnt = [0] * E
        for t in range(s * S, (s + 1) * S):
            for j in range(k):
                e = int(idx[t, j])
                cnt[e] += 1
                if cnt[e] > C:
                    kidx[t, j] = -1
                    drops[s] += 1
    return kidx, drops


def moe_combine(p, y, kidx=None):
    """p [T,k], y [T*k,d] -> out [T,d] = sum_slot p * y, over the kept slots only when kidx
    (kidx >= 0) is given."""
    T, k = p.shape
    if kidx is not None:
        p = p * (kidx >= 0).to(p.dtype)
    return (p[..., None] * y.reshape(T, k, -1)).sum(1)


def xent(logits, targets, S):
    """logits [T,V], targets int64 [T] -> loss_seq [T//S] (sum of lse - logit[target])."""
    lse = torch.logsumexp(logits, dim=-1)
    tok = lse - torch.gather(logits, 1, targets[:, None])[:, 0]
    return tok.reshape(-1, S).sum(-1)
