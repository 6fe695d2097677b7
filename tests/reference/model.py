"""model.py - the Qwen3-Next / Qwen3.5 hybrid decoder in torch (float64 for goldens).

Written from docs/model.md sections 1 and 3 (MaxText and Hugging Face math) with fp32-everywhere
semantics (no bf16 casts): embedding; per layer zero-centred (1+w) RMSNorm -> GDN (layer i is
full attention iff (i+1) % cycle == 0) or gated attention -> residual -> RMSNorm -> MoE ->
residual; final norm; untied lm_head; token-mean cross entropy plus optional load balance.

Packed documents (dm['packing'], docs/data.md "Packed documents"): a document starts at a
sequence's first token and right after every input token equal to dm['eos']; each token's
position inside its document drives rotary; attention is masked to the query's own document
(equal document ids, causal); the GDN conv runs on each document as a sequence of its own
(zero left padding at the document start); the delta rule's state is replaced by a fresh
zero state at every document start; a target whose input is eos carries no loss, and the
loss is normalised by the count of targets that do. Written from the rules, not from the
firmware's formulation (which uses t - pos[t] bounds and a zero decay).

Parameters are a dict keyed by the canonical Qwen3-Next HF names (fused experts
`mlp.experts.gate_up_proj` [E,2I,d] / `down_proj` [E,d,I]); convert.py maps them to and from
the on-disk layouts. This file splits the projections HF-style (view + slice), while ops.py
uses explicit index formulas; test_reference.py checks that both agree.

Float attributes that the plan stores as float32 (eps, q scale, attention scale, rope theta,
load-balance coefficient) are rounded to float32 here too (`f32`), so the float64 reference and
the firmware evaluate the same function.
"""
import math

import numpy as np
import torch

import ops

F = torch.nn.functional


def f32(x):
    return float(np.float32(x))


def is_attn(dm, layer):
    return (layer + 1) % dm['cycle'] == 0


# ------------------------------------------------------------------ parameters

def param_specs(dm):
    """Ordered [(canonical name, shape, init kind)] for the model dims `dm` (config.dims)."""
    d, V = dm['d'], dm['V']
    out = [('model.embed_tokens.weight', (V, d), 'mat')]
    for l in range(dm['L']):
        out += layer_specs(dm, 'model.layers.%d.' % l, is_attn(dm, l))
    out += [('model.norm.weight', (d,), 'norm1p'), ('lm_head.weight', (V, d), 'mat')]
    out += mtp_specs(dm)
    return out


def mtp_specs(dm):
    """The multi-token-prediction head's parameters (dm['mtp'] depths; none when 0), in the
    published checkpoint's names: the fc and the three norms are shared by the depths, each
    depth has one decoder layer of the full-attention kind."""
    d = dm['d']
    if not dm.get('mtp'):
        return []
    out = [('mtp.fc.weight', (d, 2 * d), 'mat'),
           ('mtp.pre_fc_norm_embedding.weight', (d,), 'norm1p'),
           ('mtp.pre_fc_norm_hidden.weight', (d,), 'norm1p')]
    for j in range(dm['mtp']):
        out += layer_specs(dm, 'mtp.layers.%d.' % j, True)
    out.append(('mtp.norm.weight', (d,), 'norm1p'))
    return out


def layer_specs(dm, p, attn):
    """[(name, shape, init kind)] of one decoder layer with prefix p (attention or GDN)."""
    d, E, I, Is = dm['d'], dm['E'], dm['I'], dm['Is']
    Hk, Hv, Dk, Dv, K = dm['Hk'], dm['Hv'], dm['Dk'], dm['Dv'], dm['K']
    Hq, Hkv, hd = dm['Hq'], dm['Hkv'], dm['hd']
    cc = 2 * Hk * Dk + Hv * Dv
    out = [(p + 'input_layernorm.weight', (d,), 'norm1p')]
    if attn:
        out += [(p + 'self_attn.q_proj.weight', (Hq * 2 * hd, d), 'mat'),
                (p + 'self_attn.k_proj.weight', (Hkv * hd, d), 'mat'),
                (p + 'self_attn.v_proj.weight', (Hkv * hd, d), 'mat'),
                (p + 'self_attn.o_proj.weight', (d, Hq * hd), 'mat'),
                (p + 'self_attn.q_norm.weight', (hd,), 'norm1p'),
                (p + 'self_attn.k_norm.weight', (hd,), 'norm1p')]
    else:
        a = p + 'linear_attn.'
        out += [(a + 'in_proj_qkvz.weight', (2 * Hk * Dk + 2 * Hv * Dv, d), 'mat'),
                (a + 'in_proj_ba.weight', (2 * Hv, d), 'mat'),
                (a + 'conv1d.weight', (cc, 1, K), 'conv'),
                (a + 'dt_bias', (Hv,), 'dt_bias'),
                (a + 'A_log', (Hv,), 'a_log'),
                (a + 'norm.weight', (Dv,), 'norm_w'),
                (a + 'out_proj.weight', (d, Hv * Dv), 'mat')]
    out += [(p + 'post_attention_layernorm.weight', (d,), 'norm1p'),
            (p + 'mlp.gate.weight', (E, d), 'mat'),
            (p + 'mlp.experts.gate_up_proj', (E, 2 * I, d), 'mat'),
            (p + 'mlp.experts.down_proj', (E, d, I), 'mat'),
            (p + 'mlp.shared_expert.gate_proj.weight', (Is, d), 'mat'),
            (p + 'mlp.shared_expert.up_proj.weight', (Is, d), 'mat'),
            (p + 'mlp.shared_expert.down_proj.weight', (d, Is), 'mat'),
            (p + 'mlp.shared_expert_gate.weight', (1, d), 'mat')]
    return out


def init_params(dm, seed, dtype=torch.float64):
    """Draws every parameter in float32 (so values are float32-representable), in
    param_specs order from one generator; returns {name: tensor(dtype)}."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape, kind in param_specs(dm):
        n = lambda s: torch.randn(shape, generator=gen, dtype=torch.float32) * s
        if kind in ('mat', 'norm1p'):
            t = n(0.02)
        elif kind == 'conv':
            t = n(0.2)
        elif kind == 'norm_w':
            t = 1.0 + n(0.02)
        elif kind == 'dt_bias':
            t = 1.0 + n(0.1)
        elif kind == 'a_log':
            t = torch.log(1.0 + 15.0 * torch.rand(shape, generator=gen, dtype=torch.float32))
        else:
            raise ValueError(kind)
        out[name] = t.to(dtype)
    return out


# ------------------------------------------------------------------ blocks

def rmsnorm_1p(x, w, eps):
    """Zero-centred RMSNorm over the last axis: x * rsqrt(mean x^2 + eps) * (1 + w)."""
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)


def doc_spans(docs):
    """docs [S] document ids (non-decreasing) -> [(first, end)] of each document."""
    out, s0 = [], 0
    for t in range(1, len(docs) + 1):
        if t == len(docs) or docs[t] != docs[t - 1]:
            out.append((s0, t))
            s0 = t
    return out


def conv_docs(u, w, K, docs):
    """u [B,Cc,S], w [Cc,1,K], docs [B,S]: the causal depthwise conv run on every document
    separately (each zero-padded on its left), concatenated back to [B,Cc,S]."""
    cc = u.shape[1]
    rows = []
    for bi in range(u.shape[0]):
        parts = [F.conv1d(u[bi:bi + 1, :, a:e], w, groups=cc, padding=K - 1)[..., :e - a]
                 for a, e in doc_spans(docs[bi].tolist())]
        rows.append(torch.cat(parts, dim=-1))
    return torch.cat(rows, dim=0)


def gdn_layer(P, pre, h, dm, B, S, chunk=None, docs=None):
    """h [T,d] -> [T,d]; Qwen3-Next GatedDeltaNet with canonical (grouped) weights.
    docs [B,S] (packed documents): each token's document id."""
    T = h.shape[0]
    Hk, Hv, Dk, Dv, K = dm['Hk'], dm['Hv'], dm['Dk'], dm['Dv'], dm['K']
    r = Hv // Hk
    eps = f32(dm['eps'])
    qkvz = (h @ P[pre + 'in_proj_qkvz.weight'].t()).view(T, Hk, 2 * Dk + 2 * r * Dv)
    q, k, v, z = torch.split(qkvz, [Dk, Dk, r * Dv, r * Dv], dim=-1)
    v = v.reshape(T, Hv, Dv)
    z = z.reshape(T, Hv, Dv)
    ba = (h @ P[pre + 'in_proj_ba.weight'].t()).view(T, Hk, 2 * r)
    b = ba[..., :r].reshape(T, Hv)
    a = ba[..., r:].reshape(T, Hv)
    u = torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], dim=-1)
    cc = u.shape[1]
    u = u.reshape(B, S, cc).transpose(1, 2)                      # [B,Cc,S]
    if docs is None:
        conv = F.conv1d(u, P[pre + 'conv1d.weight'], groups=cc, padding=K - 1)[..., :S]
    else:
        conv = conv_docs(u, P[pre + 'conv1d.weight'], K, docs)
    u = ops.silu(conv).transpose(1, 2)                            # [B,S,Cc]
    q = u[..., :Hk * Dk].reshape(B, S, Hk, Dk)
    k = u[..., Hk * Dk:2 * Hk * Dk].reshape(B, S, Hk, Dk)
    v = u[..., 2 * Hk * Dk:].reshape(B, S, Hv, Dv)
    beta = torch.sigmoid(b).reshape(B, S, Hv)
    g = (-torch.exp(P[pre + 'A_log']) * ops.softplus(a + P[pre + 'dt_bias'])).reshape(B, S, Hv)
    q = q.repeat_interleave(r, dim=2)
    k = k.repeat_interleave(r, dim=2)
    q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + f32(1e-6)) * f32(Dk ** -0.5)
    k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + f32(1e-6))
    start = None
    if docs is not None:
        start = torch.ones(B, S, dtype=torch.bool)
        start[:, 1:] = docs[:, 1:] != docs[:, :-1]
    if chunk:
        o = ops.delta_rule_chunked(q, k, v, g, beta, chunk, start=start)
    elif docs is not None:
        o = ops.delta_rule_recurrent(q, k, v, g, beta, start=start)
    else:
        o = ops.delta_rule_recurrent(q, k, v, g, beta)
    o = o.reshape(T, Hv, Dv)
    y = o * torch.rsqrt((o * o).mean(-1, keepdim=True) + eps) * P[pre + 'norm.weight'] * ops.silu(z)
    return y.reshape(T, Hv * Dv) @ P[pre + 'out_proj.weight'].t()


def rotate_half_partial(x, pos, R, theta):
    """x [..., S, H, hd] with positions pos [S] (or [B,S] for x [B,S,H,hd]: packed
    documents): rotate-half on the first R dims."""
    inv = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=torch.float64) / R))
    ang = pos[..., None].to(torch.float64) * inv
    emb = torch.cat([ang, ang], dim=-1).to(x.dtype)               # [(B,)S,R]
    cos, sin = torch.cos(emb)[..., None, :], torch.sin(emb)[..., None, :]
    xr, xp = x[..., :R], x[..., R:]
    rot = torch.cat([-xr[..., R // 2:], xr[..., :R // 2]], dim=-1)
    return torch.cat([xr * cos + rot * sin, xp], dim=-1)


def attn_layer(P, pre, h, dm, B, S, pos=None, docs=None):
    """h [T,d] -> [T,d]; gated full attention (per-head [q|gate] q_proj, q/k norm, partial
    RoPE, GQA, causal softmax, sigmoid output gate). Packed documents: pos [B,S] (rotary
    positions) and docs [B,S] (document ids: a query sees the earlier keys of its own
    document only)."""
    Hq, Hkv, hd, R = dm['Hq'], dm['Hkv'], dm['hd'], dm['R']
    eps = f32(dm['eps'])
    qg = (h @ P[pre + 'q_proj.weight'].t()).view(B, S, Hq, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(B, S, Hq * hd)
    k = (h @ P[pre + 'k_proj.weight'].t()).view(B, S, Hkv, hd)
    v = (h @ P[pre + 'v_proj.weight'].t()).view(B, S, Hkv, hd)
    q = rmsnorm_1p(q, P[pre + 'q_norm.weight'], eps)
    k = rmsnorm_1p(k, P[pre + 'k_norm.weight'], eps)
    if pos is None:
        pos = torch.arange(S)
    theta = f32(dm['theta'])
    q = rotate_half_partial(q, pos, R, theta)
    k = rotate_half_partial(k, pos, R, theta)
    grp = Hq // Hkv
    k = k.repeat_interleave(grp, dim=2)
    v = v.repeat_interleave(grp, dim=2)
    s = torch.einsum('bqhd,bkhd->bhqk', q, k) * f32(hd ** -0.5)
    causal = torch.tril(torch.ones(S, S, dtype=torch.bool))
    if docs is not None:
        causal = causal[None, None] & (docs[:, None, :, None] == docs[:, None, None, :])
    s = s.masked_fill(~causal, float('-inf'))
    o = torch.einsum('bhqk,bkhd->bqhd', torch.softmax(s, dim=-1), v).reshape(B, S, Hq * hd)
    o = o * torch.sigmoid(gate)
    return o.reshape(B * S, Hq * hd) @ P[pre + 'o_proj.weight'].t()


def capacity(dm, S=None):
    """MaxText's expert capacity per sequence (moe.py generate_masks), 0 = dropless:
    sparse_matmul false and capacity_factor cf > 0 give C = int(max(ceil(S*k/E) * cf, cf)),
    S*k counting the sequence's token-expert assignments; otherwise no assignment drops."""
    cf = dm.get('cf', -1.0)
    if dm.get('sparse', True) or not cf > 0:
        return 0
    S = dm['S'] if S is None else S
    return int(max(math.ceil(S * dm['k'] / dm['E']) * cf, cf))


def dropping(dm):
    """MaxText drops tokens (dense_matmul's generate_masks) iff sparse_matmul is false and
    capacity_factor > 0, whatever C is: a capacity of 0 (a tiny factor) drops every routed
    assignment (qtrain's plan field moe_drop_all)."""
    return not dm.get('sparse', True) and dm.get('cf', -1.0) > 0


def capacity_keep(idx, B, S, E, C):
    """idx [B*S,k] -> bool [B*S,k]: MaxText's dense-path mask, written as MaxText computes it:
    one_hot(top-k) [B,S,k,E] reshaped to [B, S*k, E] (token-major, then top-k rank), cumsum
    along S*k, an assignment kept iff its running count for its expert is <= C. Padding and
    end-of-document positions are routed and count like any token (the MoE never sees
    segment ids)."""
    k = idx.shape[1]
    oh = F.one_hot(idx.reshape(B, S * k), E)
    pos = (torch.cumsum(oh, dim=1) * oh).sum(-1)
    return (pos <= C).reshape(B * S, k)


def moe_layer(P, pre, h, dm, B, S, lb_c, stats, drops=None):
    """h [T,d] -> ([T,d], lb scalar). HF-style routing: softmax over all E, take the top-k
    (stable: ties to the lower index), renormalise (= softmax over the k selected logits).
    With a capacity (dropping(dm), C >= 0) an assignment past its expert's capacity contributes
    0 and the kept weights are not renormalised; the residual, the gated shared expert and
    the load-balance loss (pre-drop assignments) are unchanged. drops: a list that gets the
    layer's dropped assignment count appended."""
    T, d = h.shape
    E, k, I = dm['E'], dm['k'], dm['I']
    logits = h @ P[pre + 'mlp.gate.weight'].t()
    probs = torch.softmax(logits, dim=-1)
    idx = torch.sort(logits.detach(), dim=-1, descending=True, stable=True).indices
    if stats is not None:
        srt = torch.gather(logits.detach(), 1, idx)
        gap = srt[:, k - 1] - srt[:, k] if k < E else torch.full((T,), float('inf'))
        stats.append(float(gap.min()))
    idx = idx[:, :k]
    w = torch.gather(probs, 1, idx)
    w = w / w.sum(-1, keepdim=True)
    if dropping(dm):
        keep = capacity_keep(idx, B, S, E, capacity(dm, S))
        w = w * keep.to(w.dtype)
        if drops is not None:
            drops.append(int((~keep).sum()))
    elif drops is not None:
        drops.append(0)
    wgu, wd = P[pre + 'mlp.experts.gate_up_proj'], P[pre + 'mlp.experts.down_proj']
    routed = torch.zeros_like(h)
    for e in range(E):
        tok, slot = torch.nonzero(idx == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        gu = h[tok] @ wgu[e].t()
        y = (ops.silu(gu[:, :I]) * gu[:, I:]) @ wd[e].t()
        routed = routed.index_add(0, tok, (y * w[tok, slot][:, None]).to(routed.dtype))
    sh = (ops.silu(h @ P[pre + 'mlp.shared_expert.gate_proj.weight'].t())
          * (h @ P[pre + 'mlp.shared_expert.up_proj.weight'].t())) \
        @ P[pre + 'mlp.shared_expert.down_proj.weight'].t()
    sg = torch.sigmoid(h @ P[pre + 'mlp.shared_expert_gate.weight'].t())
    lb = h.new_zeros(())
    if lb_c:
        onehot = F.one_hot(idx, E).to(h.dtype).sum(1).reshape(B, S, E)   # no gradient
        f = onehot.mean(1)
        pbar = probs.reshape(B, S, E).mean(1)
        lb = f32(lb_c) * (f * pbar).sum()
    return routed + sg * sh, lb


def lb_coefficient(dm):
    """c of QT_OP_MOE_ROUTE_FWD: w * E / (global batch sequences * MoE layers)."""
    w = dm['load_balance_loss_weight']
    return w * dm['E'] / (dm['B'] * dm['L']) if w else 0.0


def doc_positions(inp, eos):
    """inp int64 [B,S] -> (pos [B,S], docs [B,S]): a document starts at the first token and
    right after every token equal to eos; pos is the position inside the document, docs
    counts the documents started so far (the id of the token's document)."""
    B, S = inp.shape
    start = torch.ones(B, S, dtype=torch.int64)
    start[:, 1:] = (inp[:, :-1] == eos).to(torch.int64)
    docs = torch.cumsum(start, dim=1) - 1
    pos = torch.zeros(B, S, dtype=torch.int64)
    for bi in range(B):
        for t in range(1, S):
            pos[bi, t] = 0 if start[bi, t] else pos[bi, t - 1] + 1
    return pos, docs


def loss_mask(dm, inp):
    """[B,S] bool: the targets that carry a loss (packed: not those whose input is eos)."""
    if not dm.get('packing'):
        return torch.ones(inp.shape, dtype=torch.bool)
    return inp != dm['eos']


def mtp_inputs(dm, inp, tgt, j):
    """Depth j >= 1 of the multi-token-prediction head (docs/model.md 1.8) for windows
    inp, tgt [B,S] (tgt[:, i] = x_{i+1}): (tok [B,S] the input token x_{i+j}, or -1 where
    i+j > S-1, i.e. past the window's inputs: a zero embedding; tgt_j [B,S] the target
    x_{i+j+1}; keep [B,S] bool: the positions with a loss). A position has a loss when its
    target is in the window (i+j <= S-1) and, packed, when no input x_i .. x_{i+j} is eos
    (the target would be in another document). The positions without a loss are the last
    j of every sequence (and, packed, those before a document end); no position with a loss
    reads them (attention is causal), so their inputs do not change the loss."""
    B, S = inp.shape
    tok = torch.full((B, S), -1, dtype=torch.int64)
    tj = torch.zeros((B, S), dtype=torch.int64)
    keep = torch.zeros((B, S), dtype=torch.bool)
    if j < S:
        tok[:, :S - j] = inp[:, j:]
        tj[:, :S - j] = tgt[:, j:]
        keep[:, :S - j] = True
    if dm.get('packing'):
        for k in range(j + 1):
            e = torch.zeros((B, S), dtype=torch.bool)
            e[:, :S - k] = inp[:, k:] == dm['eos']
            keep &= ~e
    return tok, tj, keep


def mtp_count(dm, inp):
    """The positions with an MTP loss over all depths of inp [B,S] (the MTP normaliser)."""
    n = 0
    for j in range(1, dm.get('mtp', 0) + 1):
        n += int(mtp_inputs(dm, inp, inp, j)[2].sum())
    return n


def mtp_head(P, dm, hf, inp, tgt, pos, docs, stats, heads=None):
    """The MTP head on the main model's final-normed hidden states hf [T,d]: returns the sum
    of its cross entropies over every depth and position with a loss. Per depth j:
    z = fc([pre_fc_norm_embedding(emb(x_{i+j})) ; pre_fc_norm_hidden(h^{j-1})]) (embedding
    first, no bias), h^j = the full-attention decoder layer mtp.layers.{j-1} on z (original
    positions, no load-balance term), logits = lm_head(mtp.norm(h^j)), target x_{i+j+1}.
    heads (a dict, optional) receives heads[j] = (depth j's logits [B*S,V], keep [B*S])."""
    B, S = inp.shape
    eps = f32(dm['eps'])
    h = hf
    total = hf.new_zeros(())
    for j in range(1, dm['mtp'] + 1):
        tok, tj, keep = mtp_inputs(dm, inp, tgt, j)
        e = P['model.embed_tokens.weight'][tok.clamp(min=0).reshape(-1)]
        e = e * (tok.reshape(-1, 1) >= 0).to(e.dtype)
        u = torch.cat([rmsnorm_1p(e, P['mtp.pre_fc_norm_embedding.weight'], eps),
                       rmsnorm_1p(h, P['mtp.pre_fc_norm_hidden.weight'], eps)], dim=-1)
        z = u @ P['mtp.fc.weight'].t()
        pre = 'mtp.layers.%d.' % (j - 1)
        a = rmsnorm_1p(z, P[pre + 'input_layernorm.weight'], eps)
        x1 = z + attn_layer(P, pre + 'self_attn.', a, dm, B, S, pos, docs)
        a = rmsnorm_1p(x1, P[pre + 'post_attention_layernorm.weight'], eps)
        y, _ = moe_layer(P, pre, a, dm, B, S, 0.0, stats)
        h = x1 + y
        logits = rmsnorm_1p(h, P['mtp.norm.weight'], eps) @ P['lm_head.weight'].t()
        ce = torch.logsumexp(logits, -1) - torch.gather(logits, 1, tj.reshape(-1, 1))[:, 0]
        total = total + torch.where(keep.reshape(-1), ce, torch.zeros_like(ce)).sum()
        if heads is not None:
            heads[j] = (logits.detach(), keep.reshape(-1))
    return total


def loss_fn(P, dm, inp, tgt, n_tok=None, lb_c=0.0, chunk=None, stats=None, mtp_n=None,
            aux=None, drops=None, zs=None):
    """inp, tgt int64 [B,S] -> (loss, ce_sum, lb_sum). loss = ce_sum / n_tok + lb_sum.
    n_tok defaults to B*S (the step's target count when this call covers the whole step).
    Packed documents (dm['packing']): ce_sum is over the targets of loss_mask only, and
    n_tok defaults to their count (at least 1).
    With the MTP head (dm['mtp'] > 0) the loss adds mtp_loss_scaling_factor x mtp_sum /
    mtp_n, mtp_n (default: mtp_count of this batch, at least 1) the step's positions with an
    MTP loss; aux (a dict) receives 'mtp_sum' and 'mtp_n', and with aux['heads'] set to a
    dict the main logits (aux['logits'], [B*S,V]) and each depth's (mtp_head's heads).

    z-loss (dm['z_loss_multiplier'] z != 0, MaxText's / T5X's cross_entropy_with_logits):
    each target's term is lse - logit[target] + z lse^2 (masked as the cross entropy), so
    ce_sum includes the z terms; zs (a list) receives their masked sum."""
    B, S = inp.shape
    eps = f32(dm['eps'])
    pos = docs = None
    if dm.get('packing'):
        pos, docs = doc_positions(inp, dm['eos'])
    x = P['model.embed_tokens.weight'][inp.reshape(-1)]
    lb_sum = x.new_zeros(())
    for l in range(dm['L']):
        pre = 'model.layers.%d.' % l
        h = rmsnorm_1p(x, P[pre + 'input_layernorm.weight'], eps)
        if is_attn(dm, l):
            x = x + attn_layer(P, pre + 'self_attn.', h, dm, B, S, pos, docs)
        else:
            x = x + gdn_layer(P, pre + 'linear_attn.', h, dm, B, S, chunk, docs)
        h = rmsnorm_1p(x, P[pre + 'post_attention_layernorm.weight'], eps)
        y, lb = moe_layer(P, pre, h, dm, B, S, lb_c, stats, drops)
        x = x + y
        lb_sum = lb_sum + lb
    hf = rmsnorm_1p(x, P['model.norm.weight'], eps)
    logits = hf @ P['lm_head.weight'].t()
    lse = torch.logsumexp(logits, -1)
    ce = lse - torch.gather(logits, 1, tgt.reshape(-1, 1))[:, 0]
    z = f32(dm.get('z_loss_multiplier', 0.0))
    if z != 0.0:
        zt = z * lse * lse
        ce = ce + zt
        if zs is not None:
            keep = loss_mask(dm, inp).reshape(-1)
            zs.append(torch.where(keep, zt, torch.zeros_like(zt)).sum())
    mtp = 0.0
    if dm.get('mtp'):
        heads = aux.get('heads') if aux is not None else None
        if heads is not None:
            aux['logits'] = logits.detach()
        mtp_sum = mtp_head(P, dm, hf, inp, tgt, pos, docs, stats, heads)
        m = mtp_n if mtp_n else max(1, mtp_count(dm, inp))
        mtp = f32(dm['mtp_scale']) * mtp_sum / m
        if aux is not None:
            aux['mtp_sum'], aux['mtp_n'] = mtp_sum, m
    if dm.get('packing'):
        keep = loss_mask(dm, inp).reshape(-1)
        ce_sum = torch.where(keep, ce, torch.zeros_like(ce)).sum()
        n = n_tok if n_tok else max(1, int(keep.sum()))
        return ce_sum / n + mtp + lb_sum, ce_sum, lb_sum
    ce_sum = ce.sum()
    n = n_tok if n_tok else B * S
    return ce_sum / n + mtp + lb_sum, ce_sum, lb_sum


# ------------------------------------------------------------------ optimizer

def lr_wsd(dm, t):
    """MaxText's WSD (../shared/research/maxtext-recipe.md s.4): L schedule steps, W =
    int(L x warmup_steps_fraction), D = int(L x wsd_decay_steps_fraction) (double, as
    MaxText), warmup lr t/W from 0, stable lr, decay over D steps to lr x final_fraction
    (linear: lr + (lr_f - lr) min(u/(D-1), 1); cosine: lr_f + (lr - lr_f)(1 + cos(pi u/(D-1)))/2;
    D = 1: lr), then 0 past L."""
    peak = f32(dm['learning_rate'])
    T = dm['schedule_steps']
    W = int(T * dm['warmup_steps_fraction'])
    D = int(T * dm['wsd_decay_steps_fraction'])
    final = peak * f32(dm['learning_rate_final_fraction'])
    if t >= T:
        return 0.0
    if W > 0 and t < W:
        return peak * t / W
    u = t - (T - D)
    if u < 0 or D <= 1:
        return peak
    if dm['wsd_decay_style'] == 'cosine':
        return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * u / (D - 1)))
    return peak + (final - peak) * min(u / (D - 1), 1.0)


def lr_at(dm, t):
    """Warmup + cosine (docs/model.md section 4), float32-rounded hyperparameters; MaxText's
    WSD when dm['lr_schedule_type'] is 'wsd' (lr_wsd)."""
    if dm.get('lr_schedule_type') == 'wsd':
        return lr_wsd(dm, t)
    peak = f32(dm['learning_rate'])
    T = dm['schedule_steps']
    warm = int(T * f32(dm['warmup_steps_fraction']))
    final = peak * f32(dm['learning_rate_final_fraction'])
    if t < warm:
        return peak * t / warm
    if t >= T:
        return 0.0
    s, n = t - warm, T - warm
    if n - 1 <= 0:
        return peak
    return final + (peak - final) * 0.5 * (1.0 + math.cos(math.pi * s / (n - 1)))


class AdamW:
    """MaxText/optax adamw (eps_root 0, decoupled weight decay times lr, on every param)."""

    def __init__(self, dm, params):
        self.b1, self.b2 = f32(dm['adam_b1']), f32(dm['adam_b2'])
        self.eps, self.wd = f32(dm['adam_eps']), f32(dm['adam_weight_decay'])
        self.m = {k: torch.zeros_like(v) for k, v in params.items()}
        self.v = {k: torch.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params, grads, lr):
        self.t += 1
        c1, c2 = 1.0 - self.b1 ** self.t, 1.0 - self.b2 ** self.t
        with torch.no_grad():
            for k in sorted(params):
                g = grads[k]
                self.m[k] = self.b1 * self.m[k] + (1.0 - self.b1) * g
                self.v[k] = self.b2 * self.v[k] + (1.0 - self.b2) * g * g
                upd = (self.m[k] / c1) / (torch.sqrt(self.v[k] / c2) + self.eps)
                params[k] -= lr * (upd + self.wd * params[k])


def clip_grads(grads, threshold):
    """Global-norm clipping: returns the norm before clipping; scales in place."""
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
    if threshold > 0 and norm > threshold:
        s = threshold / norm
        for g in grads.values():
            g.mul_(s)
    return norm
