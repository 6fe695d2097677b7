"""gold_e2e.py - writes tests/golden/e2e/<run>/ per tests/golden/SPEC.md section 2.

For each end-to-end run: draw initial weights (model.init_params, float32-representable),
redrawing with the next seed until every token of the step-0 forward has a router margin
(k-th minus (k+1)-th logit) >= 1e-4 in every MoE layer, so fp32 C and this fp64 reference
route identically; then 10 AdamW steps in float64 with the SPEC data rule, clipping and
schedule. Files: init.safetensors and grads0.safetensors (float32, on-disk HF layout of the
run's decoder), tokens.npy (<u2), expected.json.

MTP runs (mtp_num_layers > 0, *-mtp): the loss is the objective with the head
(docs/model.md 1.8); expected.json adds mtp_loss (the head's cross-entropy mean per step,
before the factor) and mtp_tokens (its normaliser).
Capacity runs (sparse_matmul: false, capacity_factor > 0, *-cap*: token dropping, issue 32):
expected.json also holds moe_dropped (assignments dropped per step, all layers and
sequences) and moe_assignments (B*S*k*L per step); generation fails if step 0 drops
nothing (a dropping golden that drops nothing tests nothing). test-next-cap0 has a capacity
of 0 (issue 35): every assignment drops, moe_dropped = moe_assignments.

Packed runs (packing: true, *-pack): the stream is packed_stream's crafted documents; the
loss skips the targets whose input is eos and is normalised by the step's count of the
others (expected.json also lists it per step as loss_tokens).
"""
import json
import os

import numpy as np
import torch

import config
import convert
import model

RUNS = ['test-next-tiny', 'test-35-tiny', 'test-next-lb', 'test-next-pack', 'test-35-pack',
        'test-next-cap1', 'test-next-cap2', 'test-35-cap1', 'test-35-cap2',
        'test-next-mtp', 'test-35-mtp',
        # issue 33 (appended: the earlier runs keep their seeds and bits): the z-loss, and
        # held-out eval losses under the WSD schedule (eval_data = the run's tokens.npy)
        'test-next-z', 'test-next-eval',
        # issue 31: the MTP head with packing and with token dropping
        'test-next-mtp-pack', 'test-35-mtp-pack', 'test-next-mtp-cap1',
        # issue 31: two MTP depths (the shared fc and norms), the head with the z-loss
        # (MaxText's rule: the main logits only)
        'test-next-mtp2', 'test-next-mtp-z',
        # issue 35: a layer count that is not a multiple of the cycle (6 layers, cycle 4)
        'test-next-6l',
        # issue 35: the held-out eval with the MTP head (its eval loss the main CE alone)
        'test-next-mtp-eval',
        # issue 35: a capacity of 0 (capacity_factor 0.1: C = 0), every routed assignment
        # dropped; the router trains through the load-balance term alone
        'test-next-cap0',
        # issue 35: an eval batch of 3 on the microbatch of 2 (qtrain pads the last forward)
        'test-next-eval-b3',
        # MaxText's mtp_eval_target_module: the acceptance rate of depth 2 of two in the
        # held-out eval, unpacked and packed (depth 1)
        'test-next-mtp2-acc', 'test-next-mtp-pack-acc']
N_STEPS = 10
MIN_MARGIN = 1e-4
SEED_TRIES = 64


def token_stream(V, n, seed):
    """A learnable stream: mostly an affine successor rule, 25% uniform noise."""
    rng = np.random.default_rng(seed)
    out = np.zeros(n, dtype=np.int64)
    out[0] = rng.integers(0, V)
    for i in range(1, n):
        out[i] = (out[i - 1] * 5 + 3) % V if rng.random() < 0.75 else rng.integers(0, V)
    return out


def packed_stream(V, n, seed, eos, S):
    """n tokens of documents that each end with eos: the contents continue token_stream's
    learnable stream (its eos ids moved to eos+1). The first windows (S = 16) are crafted:
      window 0: documents of 4, 1 (eos alone), 2 and 4 tokens (3, 1 and 0 shorter than
                the conv kernel K = 4 can reach) then one that runs into window 1;
      window 1: that document's end, then one ending exactly on the last input token
                (its target, window 2's first token, has no loss);
      window 2: eos as the first input token (a document of eos alone), a document, then
                one that spans windows 2 and 3 with content on both sides;
    then documents of random content lengths 1..20 (several boundaries per window)."""
    assert S == 16, 'the crafted prefix assumes max_target_length 16'
    rng = np.random.default_rng(seed + 1)
    src = token_stream(V, 2 * n, seed)
    src[src == eos] = (eos + 1) % V
    lens = [3, 0, 1, 3, 10, 9, 0, 8, 13]    # contents; every document then gets its eos
    out, at = [], 0
    while len(out) < n:
        L = lens.pop(0) if lens else int(rng.integers(1, 21))
        out.extend(int(x) for x in src[at:at + L])
        at += L
        out.append(eos)
    out = np.array(out[:n], dtype=np.int64)
    e = np.flatnonzero(out == eos)
    # the crafted layout (token indices of the eos: window n's inputs are [16n, 16n+16))
    assert list(e[:9]) == [3, 4, 6, 10, 21, 31, 32, 41, 55], e[:9]
    return out


def step_batch(tokens, dm, step):
    """SPEC data rule: global sequence j of step i uses window (i*B + j) % W."""
    S, B = dm['S'], dm['B']
    W = (len(tokens) - 1) // S
    wins = [((step * B + j) % W) * S for j in range(B)]
    inp = np.stack([tokens[w:w + S] for w in wins])
    tgt = np.stack([tokens[w + 1:w + S + 1] for w in wins])
    return torch.from_numpy(inp), torch.from_numpy(tgt)


def step0_margin(P, dm, tokens):
    inp, tgt = step_batch(tokens, dm, 0)
    stats = []
    with torch.no_grad():
        model.loss_fn(P, dm, inp, tgt, lb_c=model.lb_coefficient(dm), stats=stats)
    return min(stats)


def eval_due(dm, step):
    """MaxText: an eval after train step s when s >= eval_start_step and
    (s - eval_start_step) % eval_interval == 0."""
    iv, s0 = dm['eval_interval'], dm['eval_start_step']
    return iv > 0 and step >= s0 and (step - s0) % iv == 0


# A prediction whose logits' top-2 gap is below this may differ between the float64
# reference and the firmware's float32 logits: such positions are counted as near ties, and
# the firmware's matches may differ from the reference's by at most their count
# (tests/tools/metrics_compare.c); with none, every count and the rate must be exact. Why
# 1e-4: on these runs the firmware's eval losses agree with the reference's to <= 3e-8
# relative and its step-0 gradients to <= 2.3e-6 (the golden checks print both), so logits
# of magnitude <= 10 differ by ~1e-6 at most even at the gradients' drift; 1e-4 leaves 100x.
# (test-next-mtp2-acc has no near tie at it, test-next-mtp-pack-acc 2 at its second eval;
# at 1e-3 they would have 7-14 an eval.)
TIE_GAP = 1e-4


def accept_batch(aux, dm, B, S):
    """MaxText's calculate_mtp_acceptance_rate for one eval batch (mtp_eval_target_module
    k = dm['mtp_eval_k']): depth k's argmax at position t (torch.argmax: the first maximum,
    as jnp.argmax) against the main model's at t + k (roll_and_mask k times), over the
    positions where depth k has a loss (its cross entropy's mask; t + k stays inside the
    sequence there). Returns (matches, positions, near ties)."""
    k = dm['mtp_eval_k']
    main = aux['logits']
    lk, keep = aux['heads'][k]
    keep = keep.reshape(B, S)
    mp = torch.argmax(main, -1).reshape(B, S)
    kp = torch.argmax(lk, -1).reshape(B, S)

    def gap(x):
        top = torch.topk(x, 2, -1).values
        return (top[:, 0] - top[:, 1]).reshape(B, S)
    g0, gk = gap(main), gap(lk)
    hit = valid = near = 0
    for b in range(B):
        for t in range(S):
            if not keep[b, t]:
                continue
            assert t + k < S
            valid += 1
            hit += int(kp[b, t] == mp[b, t + k])
            near += int(min(float(gk[b, t]), float(g0[b, t + k])) < TIE_GAP)
    return hit, valid, near


def eval_loss(P, dm, tokens):
    """MaxText's eval/avg_loss at weights P over the eval file `tokens` read from its start:
    eval batch e of eval_B sequences is windows e*eval_B .. (the data rule with eval_B), every
    whole eval batch (eval_steps -1) or the first eval_steps; the masked cross entropy (with
    the z terms, as MaxText's xent_sum) summed over the pass / the targets counted. With the
    MTP head (test-next-mtp-eval) loss_fn runs the head but ce is the main model's alone:
    MaxText adds the head's loss only when is_train (eval reports mtp_loss 0)."""
    S, Be = dm['S'], dm['eval_B']
    W = (len(tokens) - 1) // S
    nb = W // Be
    if dm['eval_steps'] > 0:
        nb = min(nb, dm['eval_steps'])
    edm = dict(dm, B=Be)
    tot, n = 0.0, 0
    acc = {'hit': 0, 'valid': 0, 'near': 0}
    k = dm.get('mtp_eval_k', 0)
    with torch.no_grad():
        for e in range(nb):
            inp, tgt = step_batch(tokens, edm, e)
            aux = {'heads': {}} if k else None
            _, ce, _ = model.loss_fn(P, dm, inp, tgt, n_tok=1, aux=aux)
            tot += float(ce)
            # packed: the masked sum's targets (loss_mask), as the firmware counts them
            n += int(model.loss_mask(dm, inp).sum()) if dm['packing'] else Be * S
            if k:
                hit, valid, near = accept_batch(aux, dm, Be, S)
                acc['hit'] += hit
                acc['valid'] += valid
                acc['near'] += near
    if k:
        # the pass's rate, 100 x matches / positions in double, as the firmware's (session
        # 23; MaxText's eval/avg_mtp_acceptance_rate_percent, the plain mean of the batches'
        # float32 rates, agrees up to that rounding when the batches have equal positions);
        # its tolerance 100 x near ties / positions
        acc['rate'] = 100.0 * acc['hit'] / acc['valid'] if acc['valid'] else 0.0
        acc['tol'] = 100.0 * acc['near'] / max(acc['valid'], 1)
    return tot / n, n, acc


def train(P0, dm, tokens, steps=N_STEPS, chunk=None):
    """Returns (per-step records, step-0 canonical gradients)."""
    names = [n for n, _, _ in model.param_specs(dm)]
    P = {k: v.clone().requires_grad_(True) for k, v in P0.items()}
    opt = model.AdamW(dm, P)
    lb_c = model.lb_coefficient(dm)
    rec = {'loss': [], 'ce': [], 'lb': [], 'grad_norm': [], 'lr': [], 'route_margin_min': []}
    rec['loss_tokens'] = []
    rec['moe_dropped'] = []
    rec['z_loss'], rec['eval_step'], rec['eval_loss'], rec['eval_tokens'] = [], [], [], []
    grads0 = None
    for i in range(steps):
        inp, tgt = step_batch(tokens, dm, i)
        stats, drops, zs = [], [], []
        n_tok = dm['B'] * dm['S']
        if dm['packing']:
            n_tok = max(1, int(model.loss_mask(dm, inp).sum()))
        aux = {}
        loss, ce, lb = model.loss_fn(P, dm, inp, tgt, n_tok=n_tok, lb_c=lb_c,
                                     chunk=chunk, stats=stats, aux=aux, drops=drops, zs=zs)
        gl = torch.autograd.grad(loss, [P[n] for n in names])
        grads = {n: g.detach().clone() for n, g in zip(names, gl)}
        if i == 0:
            grads0 = {n: g.clone() for n, g in grads.items()}
        norm = model.clip_grads(grads, dm['gradient_clipping_threshold'])
        lr = model.lr_at(dm, i)
        opt.step(P, grads, lr)
        rec['loss'].append(float(loss))
        rec['ce'].append(float(ce) / n_tok)
        rec['loss_tokens'].append(n_tok)
        rec['lb'].append(float(lb))
        if dm['mtp']:
            rec.setdefault('mtp_loss', []).append(float(aux['mtp_sum']) / aux['mtp_n'])
            rec.setdefault('mtp_tokens', []).append(aux['mtp_n'])
        rec['grad_norm'].append(norm)
        rec['lr'].append(lr)
        rec['route_margin_min'].append(min(stats))
        rec['moe_dropped'].append(sum(drops))
        if zs:
            rec['z_loss'].append(float(zs[0]) / n_tok)
        if eval_due(dm, i):
            el, en, acc = eval_loss(P, dm, tokens)
            rec['eval_step'].append(i)
            rec['eval_loss'].append(el)
            rec['eval_tokens'].append(en)
            if dm.get('mtp_eval_k'):
                for key, val in (('eval_mtp_accepted', acc['hit']),
                                 ('eval_mtp_accept_positions', acc['valid']),
                                 ('eval_mtp_accept_near_ties', acc['near']),
                                 ('eval_mtp_acceptance_rate_percent', acc['rate']),
                                 ('eval_mtp_accept_rate_tol', acc['tol'])):
                    rec.setdefault(key, []).append(val)
    return rec, grads0


def to_f32_numpy(d):
    return {k: v.detach().to(torch.float32).numpy() for k, v in d.items()}


def generate_run(run, outdir, seed0):
    cfg = config.load(run)
    dm = config.dims(cfg)
    S, B = dm['S'], dm['B']
    n_tok = N_STEPS * B * S + 1
    if dm['packing']:
        tokens = packed_stream(dm['V'], n_tok, seed0, dm['eos'], S)
    else:
        tokens = token_stream(dm['V'], n_tok, seed0)
    # Prefer a seed whose whole 10-step trajectory keeps every router margin >= MIN_MARGIN
    # (fp32 parameters drift from the fp64 ones over the steps); required is step 0 only.
    best = None
    for seed in range(seed0, seed0 + SEED_TRIES):
        P0 = model.init_params(dm, seed)
        if step0_margin(P0, dm, tokens) < MIN_MARGIN:
            continue
        rec, grads0 = train(P0, dm, tokens)
        m = min(rec['route_margin_min'])
        if best is None or m > best[0]:
            best = (m, seed, P0, rec, grads0)
        if m >= MIN_MARGIN:
            break
    _, seed, P0, rec, grads0 = best
    d = os.path.join(outdir, run)
    os.makedirs(d, exist_ok=True)
    meta = {'generator': 'tests/reference/make_goldens.py', 'run': run, 'seed': seed,
            'layout': dm['block']}
    from st_io import write
    write(os.path.join(d, 'init.safetensors'), to_f32_numpy(convert.to_disk(P0, dm)), meta)
    write(os.path.join(d, 'grads0.safetensors'), to_f32_numpy(convert.to_disk(grads0, dm)), meta)
    np.save(os.path.join(d, 'tokens.npy'), tokens.astype('<u2'))
    exp = {'loss': rec['loss'], 'grad_norm': rec['grad_norm'], 'lr': rec['lr'],
           'tokens_per_step': B * S, 'ce': rec['ce'], 'lb': rec['lb'],
           'route_margin_min': rec['route_margin_min'], 'seed': seed, 'run': run,
           'min_margin_required_step0': MIN_MARGIN}
    if dm['mtp']:
        exp.update(mtp_num_layers=dm['mtp'], mtp_loss_scaling_factor=dm['mtp_scale'],
                   mtp_loss=rec['mtp_loss'], mtp_tokens=rec['mtp_tokens'])
    if dm['packing']:
        exp.update(packing=True, eos_id=dm['eos'], loss_tokens=rec['loss_tokens'])
    if model.dropping(dm):
        assert rec['moe_dropped'][0] > 0, '%s: step 0 drops no assignment' % run
        exp.update(capacity=model.capacity(dm), moe_dropped=rec['moe_dropped'],
                   moe_assignments=B * S * dm['k'] * dm['L'])
    if rec['z_loss']:
        exp.update(z_loss=rec['z_loss'], z_loss_multiplier=dm['z_loss_multiplier'])
    if rec['eval_step']:
        exp.update(eval_step=rec['eval_step'], eval_loss=rec['eval_loss'],
                   eval_tokens=rec['eval_tokens'], lr_schedule_type=dm['lr_schedule_type'])
    if dm.get('mtp_eval_k') and rec['eval_step']:
        exp.update(mtp_eval_target_module=dm['mtp_eval_k'], mtp_accept_tie_gap=TIE_GAP)
        for key in ('eval_mtp_accepted', 'eval_mtp_accept_positions',
                    'eval_mtp_accept_near_ties', 'eval_mtp_acceptance_rate_percent',
                    'eval_mtp_accept_rate_tol'):
            exp[key] = rec[key]
    with open(os.path.join(d, 'expected.json'), 'w') as f:
        json.dump(exp, f, indent=1, sort_keys=True)
        f.write('\n')
    return seed, rec


def seed0(i):
    """Where the seed search of RUNS[i] starts (appending a run keeps the earlier bits)."""
    return 100 * (i + 1)


def generate(outdir):
    out = {}
    for i, run in enumerate(RUNS):
        out[run] = generate_run(run, outdir, seed0(i))
    return out
