#!/usr/bin/env python3
"""plan_flops.py - recomputes plan.txt's "model FLOPs" section and the MTP head's FLOP line
from the run config, independently of configgen, and checks every printed figure.

    tests/scripts/plan_flops.py RUN.yml PLAN.txt [key=value ...]

RUN.yml is resolved as configgen does for these keys: configgen/configs/base.yml, then
configgen/configs/models/<model_name>.yml, then the run file, then key=value overrides (top-level
"key: value" lines only). The count is docs/bench.md's (2 x multiply-accumulates forward,
training 3 x forward), written out here from the model dims; tokens per step are
per_device_batch_size x gradient_accumulation_steps x ranks x max_target_length, with the
rank count read from plan.txt's mesh section (the mesh is not a FLOP question). With a head,
the MTP head's parameter count (mtp.* elements over the mesh) is recomputed too, and its
local parameter and activation MiB are summed again from plan.txt's tensor lines. Every
integer must equal plan.txt's, every "%.1f <unit>" figure must read the same to the last digit.
Prints the checked totals; exits 1 naming every mismatch, 2 on unreadable input.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def read_yaml(path, into):
    with open(path) as f:
        for line in f:
            if not line.strip() or line[0] in " #-\t":
                continue
            key, sep, val = line.partition(":")
            if not sep:
                continue
            val = re.sub(r"\s+#.*$", "", val).strip().strip('"').strip("'")
            into[key.strip()] = val


def resolve(run, overrides):
    cfg = {}
    read_yaml(os.path.join(ROOT, "configgen/configs/base.yml"), cfg)
    runcfg = {}
    read_yaml(run, runcfg)
    over = dict(kv.split("=", 1) for kv in overrides)
    name = over.get("model_name", runcfg.get("model_name", cfg.get("model_name", "")))
    if name:
        read_yaml(os.path.join(ROOT, "configgen/configs/models", name + ".yml"), cfg)
    cfg.update(runcfg)
    cfg.update(over)
    return cfg


def unit(x):
    for v, u in ((1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if x >= v:
            return "%.1f %s" % (x / v, u)
    return "%.1f FLOP" % x


def parts(c):
    """[(key, count, MACs per token)] in plan.txt's order; the main and MTP keys."""
    i = lambda k: int(float(c[k]))
    d, L, cyc, V, S = i("base_emb_dim"), i("base_num_decoder_layers"), \
        i("inhomogeneous_layer_cycle_interval"), i("vocab_size"), i("max_target_length")
    hq, hkv, hd = i("base_num_query_heads"), i("base_num_kv_heads"), i("head_dim")
    hk, hv, dk, dv = i("gdn_num_key_heads"), i("gdn_num_value_heads"), \
        i("gdn_key_head_dim"), i("gdn_value_head_dim")
    E, k, f, fs = i("num_experts"), i("num_experts_per_tok"), i("base_moe_mlp_dim"), \
        i("shared_expert_mlp_dim")
    if fs == -1:
        fs = f
    mtp = i("mtp_num_layers")
    na = L // max(cyc, 1)
    ng = L - na
    attn_proj = d * 2 * hq * hd + 2 * d * hkv * hd + hq * hd * d
    attn_core = hq * hd * S
    main = [("gdn_proj", ng, d * (2 * hk * dk + 2 * hv * dv) + 2 * d * hv + hv * dv * d),
            ("gdn_delta", ng, 3 * hv * dk * dv),
            ("attn_proj", na, attn_proj), ("attn_core", na, attn_core),
            ("moe_router", L, d * E), ("moe_routed", L, k * 3 * d * f),
            ("moe_shared", L, 3 * d * fs + d), ("lm_head", 1, d * V)]
    head = [("mtp_fc", mtp, 2 * d * d), ("mtp_attn_proj", mtp, attn_proj),
            ("mtp_attn_core", mtp, attn_core), ("mtp_moe_router", mtp, d * E),
            ("mtp_moe_routed", mtp, k * 3 * d * f), ("mtp_moe_shared", mtp, 3 * d * fs + d),
            ("mtp_lm_head", mtp, d * V)]
    return [p for p in main if p[1] > 0], [p for p in head if p[1] > 0]


def head_params(c):
    """The mtp.* parameter elements over the mesh: mtp.fc, the two pre-fc norms and mtp.norm
    (shared by the depths), and per depth one full-attention MoE decoder layer."""
    i = lambda k: int(float(c[k]))
    d, hq, hkv, hd = i("base_emb_dim"), i("base_num_query_heads"), i("base_num_kv_heads"), \
        i("head_dim")
    E, f, fs = i("num_experts"), i("base_moe_mlp_dim"), i("shared_expert_mlp_dim")
    if fs == -1:
        fs = f
    layer = (2 * d                                   # input / post-attention layernorm
             + 2 * hq * hd * d + 2 * hkv * hd * d    # q_proj (with the gate), k_proj, v_proj
             + hq * hd * d + 2 * hd                  # o_proj, q_norm, k_norm
             + E * d + E * 3 * d * f                 # router, experts (gate, up, down)
             + 3 * d * fs + d)                       # shared expert and its gate
    return 2 * d * d + 3 * d + i("mtp_num_layers") * layer


def main(argv):
    if len(argv) < 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    try:
        cfg = resolve(argv[1], argv[3:])
        text = open(argv[2]).read()
    except (OSError, ValueError) as e:
        print("plan_flops.py: %s" % e, file=sys.stderr)
        return 2
    sec = re.search(r"^== model FLOPs .*?(?=^== )", text, re.M | re.S)
    ranks = re.search(r"^  ranks: (\d+)$", text, re.M)
    if not sec or not ranks:
        print("plan_flops.py: %s has no model FLOPs section or no ranks line" % argv[2])
        return 1
    sec, R = sec.group(0), int(ranks.group(1))
    rows = {}
    for line in sec.splitlines():
        m = re.match(r"^  (\w+) +(?:(\d+) x +(\d+) MAC +)?fwd +(\d+) +train +(\d+) +(.*)$", line)
        if m:
            rows[m.group(1)] = m.groups()[1:]
    main_p, head_p = parts(cfg)
    bad = []

    def want(key, got, exp):
        if got != exp:
            bad.append("%s: plan.txt %s, expected %s" % (key, got, exp))

    for key, n, mac in main_p + head_p:
        r = rows.get(key)
        want(key, r and r[:4], (str(n), str(mac), str(2 * n * mac), str(6 * n * mac)))
    fwd_main = sum(2 * n * mac for _, n, mac in main_p)
    fwd_mtp = sum(2 * n * mac for _, n, mac in head_p)
    extra = set(rows) - {p[0] for p in main_p + head_p} - {"main", "mtp", "total"}
    want("rows", sorted(extra), [])
    totals = [("main", fwd_main), ("total", fwd_main + fwd_mtp)] + \
        ([("mtp", fwd_mtp)] if head_p else [])
    for key, fwd in totals:
        r = rows.get(key)
        want(key, r and (r[2], r[3], r[4][:r[4].index(" per token")]),
             (str(fwd), str(3 * fwd), "(%s" % unit(3.0 * fwd)))
    want("mtp row", "mtp" in rows, bool(head_p))
    fwd = fwd_main + fwd_mtp
    tok = int(float(cfg["per_device_batch_size"]) * int(cfg["gradient_accumulation_steps"]) * R) \
        * int(cfg["max_target_length"])
    step = 3 * fwd * tok
    m = re.search(r"^  per step: (\d+) tokens .* x (\d+) = (\d+) FLOP \(([^)]*)\) trained$", sec,
                  re.M)
    want("per step", m and m.groups(), (str(tok), str(3 * fwd), str(step), unit(float(step))))
    per_rank = float(step) / R
    m = re.search(r"^  per rank: ([\d.]+) FLOP \(([^)]*)\) per step, the step's over (\d+) rank",
                  sec, re.M)
    want("per rank", m and m.groups(), ("%.1f" % per_rank, unit(per_rank), str(R)))
    if head_p:
        m = re.search(r"^  MTP head parameters: \d+ tensors \(mtp\.\*\), (\d+) elements over", text,
                      re.M)
        want("MTP head parameters", m and m.group(1), str(head_params(cfg)))
        # the local figures, summed again from plan.txt's tensor lines
        # ("id role dtype [local] global ... name")
        nbytes = {"f32": 4, "i32": 4, "bf16": 2}
        p_el = p_b = a_b = 0
        for t in re.finditer(r"^ +\d+ (\w+) +(\w+) +\[([\d,]+)\] .* (\S+)$", text, re.M):
            role, dt, shp, name = t.groups()
            n = 1
            for x in shp.split(","):
                n *= int(x)
            if role == "param" and name.startswith("mtp.") and "~" not in name:  # not gathers
                p_el += n
                p_b += n * nbytes[dt]
            elif role != "param" and ("MTP" in name or "mtp" in name):
                a_b += n * nbytes[dt]
        m = re.search(r"^  MTP head parameters: .* local shapes hold (\d+) = ([\d.]+) MiB", text,
                      re.M)
        want("MTP head parameters here", m and m.groups(), (str(p_el), "%.3f" % (p_b / 1048576.0)))
        m = re.search(r"^  MTP head activations: \d+ tensors .* = ([\d.]+) MiB on this rank", text,
                      re.M)
        want("MTP head activations", m and m.group(1), "%.3f" % (a_b / 1048576.0))
        m = re.search(r"^  MTP head FLOPs: fwd (\d+), train (\d+) per token \(([^,]*), "
                      r"([\d.]+)% of the plan's (\d+)\), ([^)]*) per rank per step", text, re.M)
        want("MTP head FLOPs", m and m.groups(),
             (str(fwd_mtp), str(3 * fwd_mtp), unit(3.0 * fwd_mtp),
              "%.1f" % (100.0 * fwd_mtp / fwd), str(3 * fwd),
              unit(3.0 * fwd_mtp * tok / R)))
    if bad:
        print("plan_flops.py: %s against %s:\n  %s" % (argv[2], argv[1], "\n  ".join(bad)))
        return 1
    print("plan_flops.py: %s: main %d, MTP head %d, total %d FLOP per token trained (%s); "
          "%d per step over %d rank%s: every figure matches" %
          (argv[2], 3 * fwd_main, 3 * fwd_mtp, 3 * fwd, unit(3.0 * fwd), step, R,
           "" if R == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
