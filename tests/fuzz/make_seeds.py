#!/usr/bin/env python3
"""make_seeds.py - writes the committed seed corpora of tests/fuzz/corpus/<target>/.

Run from the project root: python3 tests/fuzz/make_seeds.py. Standard library only.
Sources: configgen/configs (run files), tests/golden/e2e/test-next-tiny (tokens.npy, and
init.safetensors, a valid weights-only checkpoint of the plan the ckpt_load target links).
The seeds are small valid inputs and near-valid variants (one defect each), so the fuzzer
starts inside every format instead of having to discover its magic and keys. The
checkpoint seeds are stored as BF16 (half the bytes of F32; the loader converts).
Deterministic: the same tree gives the same bytes, so the corpus only changes with it.
"""
import json
import os
import struct

ROOT = os.getcwd()
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
GOLD = os.path.join(ROOT, "tests", "golden", "e2e", "test-next-tiny")
PLAN_HASH = "0x0208877932cd99e2"   # generated/test-next-tiny/plan_main.c banner


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---- safetensors helpers
def st_read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    base = 8 + n
    tensors = []
    for k, v in h.items():
        s, e = v["data_offsets"]
        tensors.append((k, v["dtype"], v["shape"], b[base + s:base + e]))
    return meta, tensors


def st_write(meta, tensors, pad=8):
    h = {}
    if meta:
        h["__metadata__"] = meta
    off, blobs = 0, []
    for name, dtype, shape, data in tensors:
        h[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    j = json.dumps(h, separators=(",", ":")).encode()
    j += b" " * ((-len(j)) % pad)
    return struct.pack("<Q", len(j)) + j + b"".join(blobs)


def f32_to_bf16(data):
    out = bytearray()
    for (u,) in struct.iter_unpack("<I", data):
        out += struct.pack("<H", (u + 0x7FFF + ((u >> 16) & 1)) >> 16)   # round to nearest even
    return bytes(out)


def seeds_safetensors():
    t = "safetensors"
    f32 = struct.pack("<4f", 1.0, -2.5, 0.0, 3.25)
    put(t, "empty", st_write({}, []))
    put(t, "meta_only", st_write({"format": "pt", "step": "3"}, []))
    put(t, "f32", st_write({}, [("a", "F32", [2, 2], f32)]))
    put(t, "mixed", st_write({"format": "qtrain-1"}, [
        ("w.bf16", "BF16", [3], struct.pack("<3H", 0x3F80, 0xC000, 0x7F80)),
        ("w.f16", "F16", [2, 1], struct.pack("<2H", 0x3C00, 0x0001)),
        ("w.f64", "F64", [1], struct.pack("<d", 1e300)),
        ("i8", "I8", [4], b"\x01\xff\x02\x80"),
        ("u64", "U64", [1], struct.pack("<Q", 2**63)),
        ("b", "BOOL", [2], b"\x00\x01"),
        ("scalar", "I32", [], struct.pack("<i", -7)),
        ("zero", "F32", [0, 5], b""),
    ]))
    # near-valid: overlapping offsets, a hole, trailing bytes, truncated data
    good = st_write({}, [("a", "F32", [2], f32[:8]), ("b", "F32", [2], f32[8:])])
    put(t, "near_truncated", good[:-3])
    put(t, "near_trailing", good + b"\x00")
    hdr = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},' \
          b'"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
    put(t, "near_overlap", struct.pack("<Q", len(hdr)) + hdr + f32[:12])
    # the header of a real checkpoint, first three tensors
    _, ts = st_read(os.path.join(GOLD, "init.safetensors"))
    put(t, "real_head", st_write({"format": "pt"}, [x for x in ts if x[3] and len(x[3]) <= 2048][:3]))


def fuse_experts(ts):
    """The fused in-memory expert layout (ckpt_map.h): per layer mlp.experts.gate_up_proj
    [E,2I,d] (expert e: gate rows, then up rows) and mlp.experts.down_proj [E,d,I], and
    conv1d weights in the plan's [C,K] shape (the loader accepts both)."""
    by = {n: (dt, s, d) for n, dt, s, d in ts}
    out, done = [], set()
    for n, dt, s, d in ts:
        if ".mlp.experts." in n and n.split(".mlp.experts.")[1][0].isdigit():
            pre = n.split(".mlp.experts.")[0] + ".mlp.experts."
            if pre in done:
                continue
            done.add(pre)
            ne = 1 + max(int(k[len(pre):].split(".")[0]) for k in by if k.startswith(pre)
                         and k[len(pre)].isdigit())
            g0 = by[pre + "0.gate_proj.weight"][1]
            dn = by[pre + "0.down_proj.weight"][1]
            gu = b"".join(by[pre + "%d.gate_proj.weight" % e][2] + by[pre + "%d.up_proj.weight" % e][2]
                          for e in range(ne))
            down = b"".join(by[pre + "%d.down_proj.weight" % e][2] for e in range(ne))
            out.append((pre + "gate_up_proj", dt, [ne, 2 * g0[0], g0[1]], gu))
            out.append((pre + "down_proj", dt, [ne, dn[0], dn[1]], down))
        elif n.endswith("conv1d.weight") and len(s) == 3:
            out.append((n, dt, [s[0], s[2]], d))
        else:
            out.append((n, dt, s, d))
    return out


def seeds_ckpt():
    t = "ckpt_load"
    meta, ts = st_read(os.path.join(GOLD, "init.safetensors"))
    bf = [(n, "BF16", s, f32_to_bf16(d)) for n, _, s, d in ts]
    put(t, "weights_fused_bf16", st_write({"format": "pt"}, fuse_experts(bf)))
    # qtrain-1 with Adam state (m = 0, v = 0 in BF16), keyed by the plan hash, step 7
    opt = bf + [("optimizer.m." + n, "BF16", s, b"\x00" * len(d)) for n, _, s, d in bf] \
             + [("optimizer.v." + n, "BF16", s, b"\x00" * len(d)) for n, _, s, d in bf]
    put(t, "optimizer_bf16", st_write({"format": "qtrain-1", "step": "7", "data_pos": "14",
                                       "plan_hash": PLAN_HASH}, opt))
    # near-valid: header only (data cut off), one tensor missing, mtp.* extra tensor
    full = st_write({"format": "pt"}, bf)
    hl = struct.unpack("<Q", full[:8])[0]
    put(t, "header_only", full[:8 + hl])
    put(t, "small_missing", st_write({"format": "pt"}, [x for x in bf if x[3] and len(x[3]) <= 64]))
    put(t, "small_extra", st_write({"format": "pt"}, [("mtp.fc.weight", "BF16", [2], b"\x00" * 4),
                                                      ("model.visual.x", "F16", [1], b"\x00\x3c")]))


def seeds_st_index():
    t = "st_index"
    _, ts = st_read(os.path.join(GOLD, "init.safetensors"))
    wm = {n: ("model-00001-of-00002.safetensors" if i % 2 == 0 else
              "model-00002-of-00002.safetensors") for i, (n, _, _, _) in enumerate(ts)}
    put(t, "tiny_real", json.dumps({"metadata": {"total_size": 238608}, "weight_map": wm},
                                   indent=2))
    put(t, "minimal", '{"weight_map":{"a":"s.safetensors"}}')
    put(t, "empty_map", '{"metadata":{},"weight_map":{}}')
    put(t, "skipped_keys", '{"metadata":{"x":[1,{"y":"]}\\""}],"z":null,"n":-1.5e3},'
                           '"other":[[],{}],"weight_map":{"a.b":"s1","c":"s2","d":"s1"}}')
    put(t, "near_dup", '{"weight_map":{"a":"s","a":"t"}}')
    put(t, "near_slash", '{"weight_map":{"a":"../s.safetensors"}}')
    put(t, "near_unbalanced", '{"metadata":{"a":[}},"weight_map":{}}')


def npy(descr, shape, payload, version=1, fortran=False):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, "True" if fortran else "False",
        ", ".join(str(x) for x in shape) + ("," if len(shape) == 1 else ""))
    pre = 10 if version == 1 else 12
    d += " " * ((-(pre + len(d) + 1)) % 64) + "\n"
    ln = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + ln + d.encode() + payload


def seeds_npy():
    t = "npy"
    # control prefix (fuzz_npy.c): raw mode, vocab = 1 + b1 * 257, seq = 1 + b2 % 64, batch
    def ctl(raw, b1, seq, gb):
        return bytes([raw, b1, seq - 1, gb - 1])
    put(t, "golden_tokens", ctl(0, 255, 16, 2) + open(os.path.join(GOLD, "tokens.npy"), "rb").read())
    ids = list(range(40))
    put(t, "u1", ctl(0, 1, 8, 1) + npy("|u1", [40], bytes(ids)))
    put(t, "i2_2d", ctl(0, 1, 4, 3) + npy("<i2", [4, 10], struct.pack("<40h", *ids)))
    put(t, "u4_v2", ctl(0, 1, 8, 2) + npy("<u4", [40], struct.pack("<40I", *ids), version=2))
    put(t, "i8_v3_fortran1d", ctl(0, 1, 8, 4) + npy("<i8", [40], struct.pack("<40q", *ids),
                                                     version=3, fortran=True))
    put(t, "u8", ctl(0, 1, 2, 1) + npy("<u8", [10], struct.pack("<10Q", *ids[:10])))
    put(t, "qttokens2", ctl(0, 1, 8, 2) + b"QTTOKENS" + struct.pack("<IIQ", 1, 2, 40)
        + struct.pack("<40H", *ids))
    put(t, "qttokens4", ctl(0, 1, 8, 2) + b"QTTOKENS" + struct.pack("<IIQ", 1, 4, 20)
        + struct.pack("<20I", *ids[:20]))
    put(t, "raw_u16", ctl(1, 1, 8, 1) + struct.pack("<40H", *ids))
    put(t, "raw_u32", ctl(2, 1, 8, 1) + struct.pack("<20I", *ids[:20]))
    # near-valid: out-of-range id, float dtype, big-endian, short payload
    put(t, "near_range", ctl(0, 0, 8, 1) + npy("|u1", [40], bytes(ids)))
    put(t, "near_float", ctl(0, 1, 8, 1) + npy("<f4", [10], b"\x00" * 40))
    put(t, "near_bigendian", ctl(0, 1, 8, 1) + npy(">u2", [20], b"\x00" * 40))
    put(t, "near_short", ctl(0, 1, 8, 1) + npy("<u2", [40], b"\x00" * 70))


def seeds_yaml():
    t = "yaml"
    runs = os.path.join(ROOT, "configgen", "configs", "runs")
    for r in ["test-next-tiny", "default", "test-next-chunked", "mesh-next-dp2ep2",
              "mesh-35t-ep2tp2", "zero1-35-dp2fsdp2-z1", "mesh-35-dp2-auto", "test-next-lb"]:
        put(t, r + ".yml", open(os.path.join(runs, r + ".yml"), "rb").read())
    put(t, "overrides", open(os.path.join(runs, "test-next-tiny.yml")).read() +
        "%%\nsteps=3\nlearning_rate=1e-3\nici_data_parallelism=1\nlogical_axis_rules=[['activation_batch', ['data', 'fsdp']], ['embed', 'fsdp']]\n")
    put(t, "all_model_keys", open(os.path.join(ROOT, "configgen", "configs", "models",
                                               "qwen3.5-tiny.yml")).read()
        + 'model_name: ""\nrun_name: "all-keys"\nsteps: 2\n')
    put(t, "lists", "model_name: 'qwen3.5-tiny'\nmrope_section: [1, 0, 1]\n"
        "logical_axis_rules: [\n  ['activation_batch', ['data', 'fsdp', 'expert']],  # c\n"
        "  ['mlp', 'tensor'], ['embed', []],\n]\n")
    put(t, "near_indent", "model_name: qwen3-next-tiny\n  steps: 2\n")
    put(t, "near_unknown", "model_name: qwen3-next-tiny\nlearnig_rate: 1e-3\n")
    put(t, "near_float", "model_name: qwen3-next-tiny\nlearning_rate: 1e39\nadam_eps: 1e-50\n")
    put(t, "near_overflow", "model_name: qwen3-next-tiny\nbase_emb_dim: 1099511627776\n"
        "vocab_size: 1099511627776\n")


def seeds_cli():
    t = "cli"
    put(t, "typical", "steps=10\ndata=tests/golden/e2e/test-next-tiny/tokens.npy\n"
        "metrics=m.jsonl\nsave=c.safetensors\nsave_every=5\nseed=7")
    put(t, "all_keys", "steps=0\0data=x.bin\0data_dtype=uint16\0load=dir\0save=s\0"
        "save_every=1\0metrics=m\0seed=18446744073709551615\0learning_rate=3e-4\0"
        "dump_grads=g\0profile=1\0comm_timeout=2.5\0overwrite=0\0help=")
    put(t, "help", "help")
    put(t, "near", "stepz=3\nlearning_rate=-1\nsteps=9223372036854775807\nsave_every=2")


if __name__ == "__main__":
    for f in (seeds_safetensors, seeds_ckpt, seeds_st_index, seeds_npy, seeds_yaml, seeds_cli):
        f()
