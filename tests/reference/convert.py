"""convert.py - canonical (Qwen3-Next names, fused experts) <-> on-disk HF layouts.

Canonical: what model.py and the plan's qt_param.name use, e.g.
  model.layers.N.linear_attn.in_proj_qkvz.weight, model.layers.N.mlp.experts.gate_up_proj.
On disk, Qwen3-Next: per-expert model.layers.N.mlp.experts.E.{gate_proj,up_proj,down_proj}.weight
  ([I,d], [I,d], [d,I]); everything else unchanged.
The MTP head (mtp.*, docs/model.md 1.8) keeps its names in both layouts (no language_model
  prefix), its experts per-expert as the main layers'.
On disk, Qwen3.5: every `model.` name gets the `model.language_model.` prefix (lm_head.weight
  stays), linear_attn.in_proj_qkvz is split into in_proj_qkv (rows: all q heads, all k heads,
  all v heads = the conv channel order) and in_proj_z (value-head-major), in_proj_ba into
  in_proj_b / in_proj_a ([Hv,d] each), experts per-expert as for Next.
Both directions are pure row permutations/splits, so they apply unchanged to gradients and
round-trip exactly. Works on numpy arrays or torch tensors.
"""
import numpy as np
import torch

import ops


def _cat(parts):
    return torch.cat(parts, 0) if isinstance(parts[0], torch.Tensor) else np.concatenate(parts, 0)


def _stack(parts):
    return torch.stack(parts, 0) if isinstance(parts[0], torch.Tensor) else np.stack(parts, 0)


def _rows(x, idx):
    return x[idx] if isinstance(x, torch.Tensor) else x[idx.numpy()]


def _empty_like_rows(x, n):
    if isinstance(x, torch.Tensor):
        return x.new_zeros((n,) + tuple(x.shape[1:]))
    return np.zeros((n,) + x.shape[1:], dtype=x.dtype)


def _prefix35(name):
    return 'model.language_model.' + name[len('model.'):] if name.startswith('model.') else name


def _unprefix35(name):
    p = 'model.language_model.'
    return 'model.' + name[len(p):] if name.startswith(p) else name


def to_disk(canon, dm):
    """canonical dict -> on-disk dict for dm['block'] ('qwen3_next' | 'qwen3_5')."""
    q35 = dm['block'] == 'qwen3_5'
    cols = ops.gdn_columns(dm['Hk'], dm['Dk'], dm['Hv'], dm['Dv'])
    bcols = ops.gdn_columns(dm['Hk'], 1, dm['Hv'], 1)
    I = dm['I']
    out = {}
    for name, t in canon.items():
        if name.endswith('mlp.experts.gate_up_proj'):
            base = name[:-len('gate_up_proj')]
            for e in range(t.shape[0]):
                out[base + '%d.gate_proj.weight' % e] = t[e, :I]
                out[base + '%d.up_proj.weight' % e] = t[e, I:]
            continue
        if name.endswith('mlp.experts.down_proj'):
            base = name[:-len('down_proj')]
            for e in range(t.shape[0]):
                out[base + '%d.down_proj.weight' % e] = t[e]
            continue
        if q35 and name.endswith('linear_attn.in_proj_qkvz.weight'):
            base = name[:-len('in_proj_qkvz.weight')]
            out[base + 'in_proj_qkv.weight'] = _rows(t, cols['conv'])
            out[base + 'in_proj_z.weight'] = _rows(t, cols['z'])
            continue
        if q35 and name.endswith('linear_attn.in_proj_ba.weight'):
            base = name[:-len('in_proj_ba.weight')]
            out[base + 'in_proj_b.weight'] = _rows(t, bcols['b'])
            out[base + 'in_proj_a.weight'] = _rows(t, bcols['a'])
            continue
        out[name] = t
    if q35:
        out = {_prefix35(k): v for k, v in out.items()}
    return out


def from_disk(disk, dm):
    """on-disk dict -> canonical dict (inverse of to_disk; raises KeyError if incomplete)."""
    q35 = dm['block'] == 'qwen3_5'
    src = {_unprefix35(k): v for k, v in disk.items()} if q35 else dict(disk)
    cols = ops.gdn_columns(dm['Hk'], dm['Dk'], dm['Hv'], dm['Dv'])
    bcols = ops.gdn_columns(dm['Hk'], 1, dm['Hv'], 1)
    E = dm['E']
    out = {}
    used = set()
    prefixes = ['model.layers.%d.' % l for l in range(dm['L'])]
    prefixes += ['mtp.layers.%d.' % j for j in range(dm.get('mtp', 0))]
    for p in prefixes:
        ex = p + 'mlp.experts.'
        gp = [src[ex + '%d.gate_proj.weight' % e] for e in range(E)]
        up = [src[ex + '%d.up_proj.weight' % e] for e in range(E)]
        dn = [src[ex + '%d.down_proj.weight' % e] for e in range(E)]
        out[ex + 'gate_up_proj'] = _stack([_cat([g, u]) for g, u in zip(gp, up)])
        out[ex + 'down_proj'] = _stack(dn)
        used |= {ex + '%d.%s_proj.weight' % (e, w) for e in range(E) for w in ('gate', 'up', 'down')}
        la = p + 'linear_attn.'
        if q35 and la + 'in_proj_qkv.weight' in src:
            qkv, z = src[la + 'in_proj_qkv.weight'], src[la + 'in_proj_z.weight']
            t = _empty_like_rows(qkv, cols['G'] * dm['Hk'])
            t[cols['conv'].numpy() if not isinstance(t, torch.Tensor) else cols['conv']] = qkv
            t[cols['z'].numpy() if not isinstance(t, torch.Tensor) else cols['z']] = z
            out[la + 'in_proj_qkvz.weight'] = t
            b, a = src[la + 'in_proj_b.weight'], src[la + 'in_proj_a.weight']
            t = _empty_like_rows(b, 2 * dm['Hv'])
            t[bcols['b'].numpy() if not isinstance(t, torch.Tensor) else bcols['b']] = b
            t[bcols['a'].numpy() if not isinstance(t, torch.Tensor) else bcols['a']] = a
            out[la + 'in_proj_ba.weight'] = t
            used |= {la + n for n in ('in_proj_qkv.weight', 'in_proj_z.weight',
                                      'in_proj_b.weight', 'in_proj_a.weight')}
    for k, v in src.items():
        if k not in used:
            out[k] = v
    return out
