#!/usr/bin/env python3
"""hf_config_check.py - checks the config.json of a qtrain save= directory (tests/e2e/43_hf_config.sh).

    hf_config_check.py DIR PLAN_TXT

1. config.json against the plan: every field that the "== config ==" section of
   generated/<run>/plan.txt states (sizes, heads, GDN and MoE dims, layer cycle, norm eps,
   rotary dim and theta, sequence length, load-balance weight, dtype, decoder block), and
   the architecture's constants, field by field.
2. The tensors of the directory (model.safetensors.index.json and every shard's header)
   against what transformers instantiates from this config.json: the parameter names and
   shapes are derived here from the config alone (the Hugging Face layouts of
   /work/shared/research/hf_reference.md section 2 and 9: per-expert tensors on disk,
   Qwen3.5's split GDN projections under model.language_model.), not from qtrain's code.
Prints what it checked; exits 1 with the first differences otherwise.
"""
import json
import os
import re
import struct
import sys

errors = []


def fail(msg):
    errors.append(msg)


def plan_fields(path):
    """The plan's model as plan.txt's config section states it."""
    text = open(path).read()
    sec = text.split("== config ==", 1)[1].split("\n==", 1)[0]

    def grab(pattern, conv=int):
        m = re.search(pattern, sec)
        if not m:
            raise SystemExit("plan.txt: no match for %r" % pattern)
        return [conv(g) for g in m.groups()]

    f = {}
    f["decoder_block"], = grab(r"decoder_block (\w+)", str)
    f["d"], f["layers"], f["cycle"], f["vocab"], f["eps"] = grab(
        r"d (\d+), layers (\d+) \(cycle (\d+):.*\), vocab (\d+), norm eps ([0-9.e+-]+)",
        lambda s: float(s) if ("e" in s or "." in s) else int(s))
    f["q"], f["kv"], f["hd"], f["rot"] = grab(r"attention: (\d+) q / (\d+) kv heads of (\d+), rotary dim (\d+)")
    f["theta"], = grab(r"theta ([0-9.e+-]+)", float)
    f["gk"], f["gkd"], f["gv"], f["gvd"], f["conv"] = grab(
        r"gdn: (\d+) key heads of (\d+), (\d+) value heads of (\d+), conv (\d+)")
    f["E"], f["k"], f["I"], f["Is"] = grab(r"moe: (\d+) experts, top (\d+), width (\d+), shared expert width (\d+)")
    f["seq"], = grab(r"batch: \d+ seqs? x (\d+) tokens")
    f["lb"], = grab(r"load balance ([0-9.e+-]+)", float)
    m = re.search(r"dtype (\w+), weight_dtype", sec)
    f["dtype"] = m.group(1) if m else "float32"
    return f


def check_config(cfg, f):
    q35 = f["decoder_block"] == "qwen3_5"
    top = cfg
    if q35:
        want_top = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
                    "tie_word_embeddings": False, "torch_dtype": f["dtype"], "dtype": f["dtype"]}
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            fail("qwen3_5: config.json has no text_config object")
            return
        if not isinstance(cfg.get("vision_config"), dict) or \
           cfg["vision_config"].get("model_type") != "qwen3_5_moe_vision":
            fail("qwen3_5: vision_config missing or not qwen3_5_moe_vision")
    else:
        want_top = {"model_type": "qwen3_next", "architectures": ["Qwen3NextForCausalLM"]}
        text = cfg
    for k, v in want_top.items():
        if top.get(k) != v:
            fail("config.json %s = %r, expected %r" % (k, top.get(k), v))
    if "transformers_version" not in top:
        fail("config.json has no transformers_version")
    layer_types = ["full_attention" if (i + 1) % f["cycle"] == 0 else "linear_attention"
                   for i in range(f["layers"])]
    want = {
        "vocab_size": f["vocab"], "hidden_size": f["d"], "num_hidden_layers": f["layers"],
        "num_attention_heads": f["q"], "num_key_value_heads": f["kv"], "head_dim": f["hd"],
        "linear_num_key_heads": f["gk"], "linear_num_value_heads": f["gv"],
        "linear_key_head_dim": f["gkd"], "linear_value_head_dim": f["gvd"],
        "linear_conv_kernel_dim": f["conv"], "num_experts": f["E"], "num_experts_per_tok": f["k"],
        "moe_intermediate_size": f["I"], "shared_expert_intermediate_size": f["Is"],
        "full_attention_interval": f["cycle"], "layer_types": layer_types,
        "rms_norm_eps": f["eps"], "rope_theta": f["theta"],
        "partial_rotary_factor": f["rot"] / f["hd"], "max_position_embeddings": f["seq"],
        "hidden_act": "silu", "attention_bias": False, "tie_word_embeddings": False,
        "router_aux_loss_coef": f["lb"], "output_router_logits": f["lb"] > 0,
        "torch_dtype": f["dtype"], "dtype": f["dtype"],
        "model_type": "qwen3_5_moe_text" if q35 else "qwen3_next",
    }
    if not q35:
        want.update({"norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []})
    for k, v in want.items():
        got = text.get(k, "<missing>")
        same = got == v and type(got) is type(v) if not isinstance(v, float) else \
            isinstance(got, (int, float)) and not isinstance(got, bool) and float(got) == v
        if not same:
            fail("config.json %s%s = %r, expected %r (plan)" % ("text_config." if q35 else "", k, got, v))
    rp = text.get("rope_parameters", {})
    if rp.get("rope_theta") != f["theta"] or rp.get("partial_rotary_factor") != f["rot"] / f["hd"]:
        fail("rope_parameters %r disagree with the plan (theta %r, rotary %d of %d)" % (rp, f["theta"], f["rot"], f["hd"]))
    if q35 and sum(rp.get("mrope_section", [])) != f["rot"] // 2:
        fail("rope_parameters.mrope_section %r does not cover the %d rotary pairs" % (rp.get("mrope_section"), f["rot"] // 2))
    return text


def expected_tensors(cfg):
    """name -> shape of the checkpoint transformers loads for this config.json."""
    q35 = cfg.get("model_type") == "qwen3_5_moe"
    c = cfg["text_config"] if q35 else cfg
    H, V = c["hidden_size"], c["vocab_size"]
    nk, nv, dk, dv, K = (c["linear_num_key_heads"], c["linear_num_value_heads"],
                         c["linear_key_head_dim"], c["linear_value_head_dim"], c["linear_conv_kernel_dim"])
    nh, nkv, dh = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    E, I, Is = c["num_experts"], c["moe_intermediate_size"], c["shared_expert_intermediate_size"]
    pre = "model.language_model." if q35 else "model."
    t = {pre + "embed_tokens.weight": [V, H], pre + "norm.weight": [H]}
    if not c.get("tie_word_embeddings", False):
        t["lm_head.weight"] = [V, H]
    for i, kind in enumerate(c["layer_types"]):
        L = "%slayers.%d." % (pre, i)
        t[L + "input_layernorm.weight"] = [H]
        t[L + "post_attention_layernorm.weight"] = [H]
        if kind == "linear_attention":
            a = L + "linear_attn."
            if q35:
                t[a + "in_proj_qkv.weight"] = [2 * nk * dk + nv * dv, H]
                t[a + "in_proj_z.weight"] = [nv * dv, H]
                t[a + "in_proj_b.weight"] = [nv, H]
                t[a + "in_proj_a.weight"] = [nv, H]
            else:
                t[a + "in_proj_qkvz.weight"] = [2 * nk * dk + 2 * nv * dv, H]
                t[a + "in_proj_ba.weight"] = [2 * nv, H]
            t[a + "conv1d.weight"] = [2 * nk * dk + nv * dv, 1, K]
            t[a + "dt_bias"] = [nv]
            t[a + "A_log"] = [nv]
            t[a + "norm.weight"] = [dv]
            t[a + "out_proj.weight"] = [H, nv * dv]
        else:
            a = L + "self_attn."
            t[a + "q_proj.weight"] = [2 * nh * dh, H]
            t[a + "k_proj.weight"] = [nkv * dh, H]
            t[a + "v_proj.weight"] = [nkv * dh, H]
            t[a + "o_proj.weight"] = [H, nh * dh]
            t[a + "q_norm.weight"] = [dh]
            t[a + "k_norm.weight"] = [dh]
        moe = q35 or (E > 0 and i not in c.get("mlp_only_layers", []) and
                      (i + 1) % c.get("decoder_sparse_step", 1) == 0)
        m = L + "mlp."
        if not moe:
            fail("layer %d would be a dense MLP (intermediate_size), which qtrain never builds" % i)
            continue
        t[m + "gate.weight"] = [E, H]
        for e in range(E):
            t[m + "experts.%d.gate_proj.weight" % e] = [I, H]
            t[m + "experts.%d.up_proj.weight" % e] = [I, H]
            t[m + "experts.%d.down_proj.weight" % e] = [H, I]
        t[m + "shared_expert.gate_proj.weight"] = [Is, H]
        t[m + "shared_expert.up_proj.weight"] = [Is, H]
        t[m + "shared_expert.down_proj.weight"] = [H, Is]
        t[m + "shared_expert_gate.weight"] = [1, H]
    return t


def st_header(path):
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        return json.loads(fh.read(n))


def check_tensors(d, cfg):
    want = expected_tensors(cfg)
    index = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    wm = index["weight_map"]
    got = {}
    for shard in sorted(set(wm.values())):
        for name, info in st_header(os.path.join(d, shard)).items():
            if name == "__metadata__":
                continue
            if wm.get(name) != shard:
                fail("%s: tensor %s is not mapped to it by the index" % (shard, name))
            got[name] = info["shape"]
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    if missing:
        fail("%d tensors transformers expects are missing, e.g. %s" % (len(missing), missing[:3]))
    if extra:
        fail("%d tensors transformers does not expect, e.g. %s" % (len(extra), extra[:3]))
    if set(wm) != set(got):
        fail("index weight_map names %d tensors, the shards hold %d" % (len(wm), len(got)))
    bad = [(n, got[n], want[n]) for n in sorted(set(want) & set(got)) if got[n] != want[n]]
    for n, g, w in bad[:5]:
        fail("%s: shape %s, config.json implies %s" % (n, g, w))
    return len(want)


def main():
    d, plan_txt = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(d, "config.json")))
    f = plan_fields(plan_txt)
    check_config(cfg, f)
    n = check_tensors(d, cfg) if not errors else 0
    if errors:
        for e in errors[:12]:
            print("FAIL: " + e)
        sys.exit(1)
    print("config.json (%s, %s) agrees with %s; the %d tensors are the names and shapes "
          "transformers instantiates from it" % (cfg["model_type"], f["dtype"], plan_txt, n))


if __name__ == "__main__":
    main()
