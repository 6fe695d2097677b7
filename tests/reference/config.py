"""config.py - the reference's reader for qtrain's flat YAML subset and its layering.

Grammar (docs/design.md section 2): one `key: value` per line; `#` starts a comment outside
quotes; a value is a quoted string ("..." or '...'), true/false, an integer, a float, a bare
string, or a list in [...] that may nest and span lines. Anything else raises ConfigError
naming file:line.

Layering (the same order configgen applies): base.yml, then models/<model_name>.yml, then the
run file, then key=value overrides. model_name is looked up in the overrides, then the run
file, then base.yml. A key that base.yml does not define is an error. run_name defaults to the
run file's stem.
"""
import os
import re

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
CONFIG_DIR = os.path.join(ROOT, 'configgen', 'configs')


class ConfigError(Exception):
    pass


def _strip_comment(line):
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in '"\'':
            quote = ch
        elif ch == '#':
            return line[:i]
    return line


_INT_RE = re.compile(r'^[+-]?\d+$')
_FLOAT_RE = re.compile(r'^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$')


def _scalar(tok, where):
    tok = tok.strip()
    if not tok:
        raise ConfigError('%s: empty value' % where)
    if tok[0] in '"\'':
        if len(tok) < 2 or tok[-1] != tok[0]:
            raise ConfigError('%s: unterminated string %s' % (where, tok))
        return tok[1:-1]
    if tok == 'true':
        return True
    if tok == 'false':
        return False
    if _INT_RE.match(tok):
        return int(tok)
    if _FLOAT_RE.match(tok):
        return float(tok)
    if re.search(r'[\[\]{}:,]', tok):
        raise ConfigError('%s: bad value %r' % (where, tok))
    return tok


def _parse_list(text, pos, where):
    """Parses a list starting at text[pos] == '['; returns (list, next position)."""
    assert text[pos] == '['
    pos += 1
    out = []
    while True:
        while pos < len(text) and text[pos] in ' \t\n,':
            pos += 1
        if pos >= len(text):
            raise ConfigError('%s: unterminated list' % where)
        ch = text[pos]
        if ch == ']':
            return out, pos + 1
        if ch == '[':
            item, pos = _parse_list(text, pos, where)
            out.append(item)
            continue
        if ch in '"\'':
            end = text.find(ch, pos + 1)
            if end < 0:
                raise ConfigError('%s: unterminated string' % where)
            out.append(text[pos + 1:end])
            pos = end + 1
            continue
        end = pos
        while end < len(text) and text[end] not in ',]\n':
            end += 1
        out.append(_scalar(text[pos:end], where))
        pos = end


def parse_text(text, fname='<text>'):
    """Returns an ordered dict of (key -> value, line number)."""
    lines = text.split('\n')
    out = {}
    i = 0
    while i < len(lines):
        lineno = i + 1
        where = '%s:%d' % (fname, lineno)
        line = _strip_comment(lines[i]).rstrip()
        i += 1
        if not line.strip():
            continue
        if line[0] in ' \t':
            raise ConfigError('%s: unexpected indentation' % where)
        m = re.match(r'^([A-Za-z_][A-Za-z0-9_]*):(\s+(.*))?$', line)
        if not m:
            raise ConfigError('%s: expected "key: value"' % where)
        key, val = m.group(1), (m.group(3) or '').strip()
        if not val:
            raise ConfigError('%s: key %s has no value' % (where, key))
        if val.startswith('['):
            buf = val
            while buf.count('[') > buf.count(']'):
                if i >= len(lines):
                    raise ConfigError('%s: unterminated list for %s' % (where, key))
                buf += '\n' + _strip_comment(lines[i])
                i += 1
            value, pos = _parse_list(buf, 0, where)
            if buf[pos:].strip():
                raise ConfigError('%s: trailing text after list' % where)
        else:
            value = _scalar(val, where)
        if key in out:
            raise ConfigError('%s: duplicate key %s' % (where, key))
        out[key] = (value, lineno)
    return out


def parse_file(path):
    with open(path) as f:
        return parse_text(f.read(), os.path.relpath(path, ROOT))


def _coerce(key, value, default, where):
    """Type of the base.yml default decides the accepted type (int accepts 2.0)."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError('%s: %s=%r: expected true/false' % (where, key, value))
        return value
    if isinstance(default, int):
        if isinstance(value, float) and value == int(value):
            return int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError('%s: %s=%r: expected an integer' % (where, key, value))
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError('%s: %s=%r: expected a number' % (where, key, value))
        return float(value)
    if isinstance(default, str):
        return value if isinstance(value, str) else str(value)
    return value


def load(run, overrides=()):
    """run: a run name (configgen/configs/runs/<run>.yml) or a path. Returns a plain dict."""
    path = run if run.endswith('.yml') else os.path.join(CONFIG_DIR, 'runs', run + '.yml')
    base = {k: v for k, (v, _) in parse_file(os.path.join(CONFIG_DIR, 'base.yml')).items()}
    runf = parse_file(path)
    ov = {}
    for kv in overrides:
        if '=' not in kv:
            raise ConfigError('command line: expected key=value, got %r' % kv)
        k, v = kv.split('=', 1)
        ov[k.strip()] = (_scalar(v, 'command line'), 0)
    model = ov.get('model_name', runf.get('model_name', (base['model_name'], 0)))[0]
    layers = []
    if model:
        layers.append((os.path.join(CONFIG_DIR, 'models', model + '.yml'), None))
    layers.append((path, runf))
    cfg = dict(base)
    for lpath, parsed in layers:
        parsed = parsed if parsed is not None else parse_file(lpath)
        for k, (v, ln) in parsed.items():
            where = '%s:%d' % (os.path.relpath(lpath, ROOT), ln)
            if k not in base:
                raise ConfigError('%s: unknown key %s' % (where, k))
            cfg[k] = _coerce(k, v, base[k], where)
    for k, (v, _) in ov.items():
        if k not in base:
            raise ConfigError('command line: unknown key %s' % k)
        cfg[k] = _coerce(k, v, base[k], 'command line')
    if not cfg['run_name']:
        cfg['run_name'] = os.path.splitext(os.path.basename(path))[0]
    return cfg


def dims(cfg):
    """Derived model and training sizes (the qt_model_dims / qt_train_cfg meaning)."""
    hd = cfg['head_dim']
    moe = cfg['base_moe_mlp_dim']
    sh = cfg['shared_expert_mlp_dim']
    ranks = cfg['num_ranks']
    d = dict(
        block=cfg['decoder_block'], d=cfg['base_emb_dim'], L=cfg['base_num_decoder_layers'],
        V=cfg['vocab_size'], cycle=cfg['inhomogeneous_layer_cycle_interval'],
        Hq=cfg['base_num_query_heads'], Hkv=cfg['base_num_kv_heads'], hd=hd,
        R=int(hd * cfg['partial_rotary_factor']), theta=float(cfg['rope_max_timescale']),
        Hk=cfg['gdn_num_key_heads'], Hv=cfg['gdn_num_value_heads'],
        Dk=cfg['gdn_key_head_dim'], Dv=cfg['gdn_value_head_dim'],
        K=cfg['gdn_conv_kernel_dim'], chunk=cfg['gdn_chunk_size'],
        E=cfg['num_experts'], k=cfg['num_experts_per_tok'], I=moe,
        Is=moe if sh == -1 else sh, eps=float(cfg['normalization_layer_epsilon']),
        b=int(cfg['per_device_batch_size']), S=cfg['max_target_length'],
        ga=cfg['gradient_accumulation_steps'], steps=cfg['steps'],
        # packed documents (docs/data.md "Packed documents"): documents end at token eos
        packing=bool(cfg['packing']), eos=int(cfg['eos_id']),
        # multi-token prediction (docs/model.md 1.8): depths and the loss factor
        mtp=int(cfg['mtp_num_layers']), mtp_scale=float(cfg['mtp_loss_scaling_factor']),
        # the held-out eval's acceptance rate of depth mtp_eval_k (0: none; gold_e2e.py)
        mtp_eval_k=int(cfg['mtp_eval_target_module']),
        # MoE form (model.capacity): dropping needs sparse_matmul false and cf > 0
        sparse=bool(cfg['sparse_matmul']), cf=float(cfg['capacity_factor']),
    )
    if d['packing'] and not 0 <= d['eos'] < d['V']:
        raise ConfigError('eos_id=%d with packing: true: expected 0..%d' % (d['eos'], d['V'] - 1))
    # One rank for now (configgen rejects larger meshes); the global batch counts sequences
    # of every rank of one optimizer step.
    d['B'] = d['b'] * d['ga'] * ranks
    ss = cfg['learning_rate_schedule_steps']
    d['schedule_steps'] = cfg['steps'] if ss == -1 else ss
    for key in ('learning_rate', 'adam_b1', 'adam_b2', 'adam_eps', 'adam_weight_decay',
                'gradient_clipping_threshold', 'warmup_steps_fraction',
                'learning_rate_final_fraction', 'load_balance_loss_weight',
                'z_loss_multiplier'):
        d[key] = float(cfg[key])
    # schedule and held-out eval (issue 33): MaxText's keys, as configgen reads them
    d['lr_schedule_type'] = cfg['lr_schedule_type']
    d['wsd_decay_steps_fraction'] = float(cfg['wsd_decay_steps_fraction'])
    d['wsd_decay_style'] = cfg['wsd_decay_style']
    for key in ('eval_interval', 'eval_steps', 'eval_start_step'):
        d[key] = int(cfg[key])
    epb = float(cfg['eval_per_device_batch_size'])
    d['eval_B'] = int((epb if epb > 0 else d['b']) * ranks)
    return d
