#!/usr/bin/env python3
# hf_published_dir.py - writes a checkpoint directory in the layout of a published Hugging
# Face Qwen3.5 checkpoint from a qtrain single-file checkpoint (tests/e2e/43_hf_config.sh):
# two shards model-0000K-of-00002.safetensors and model.safetensors.index.json, with the
# extra tensors a published multimodal checkpoint carries (model.visual.* of the vision
# tower, mtp.* of the draft head). Standard library only (no numpy, no safetensors).
#
#   hf_published_dir.py SRC.safetensors OUTDIR MODE
#   MODE: f32_vision     the tensors as they are, plus two model.visual.* tensors
#         bf16_vision_mtp every tensor rounded to BF16 (nearest even), plus model.visual.*
#                        and mtp.* tensors in BF16 (as the published files are)
#         missing_shard  as f32_vision, the second shard not written (the index lists it)
#         extra_tensor   as f32_vision, plus a text tensor no Qwen3.5 model has
# The output directory is emptied first. Exit 0, or 2 on a bad argument.
import json
import os
import struct
import sys


def read(path):
    blob = open(path, 'rb').read()
    n = struct.unpack('<Q', blob[:8])[0]
    head = json.loads(blob[8:8 + n])
    base = 8 + n
    out = []
    for name, t in head.items():
        if name == '__metadata__':
            continue
        a, b = t['data_offsets']
        out.append((name, t['dtype'], t['shape'], blob[base + a:base + b]))
    return out


def numel(shape):
    n = 1
    for x in shape:
        n *= x
    return n


def to_bf16(f32):
    out = bytearray()
    for i in range(0, len(f32), 4):
        u = struct.unpack('<I', f32[i:i + 4])[0]
        u += 0x7FFF + ((u >> 16) & 1)  # round to nearest even (finite values only)
        out += struct.pack('<H', (u >> 16) & 0xFFFF)
    return bytes(out)


def write(path, tensors):
    head, off, data = {}, 0, bytearray()
    for name, dtype, shape, raw in tensors:
        head[name] = {'dtype': dtype, 'shape': shape, 'data_offsets': [off, off + len(raw)]}
        off += len(raw)
        data += raw
    head['__metadata__'] = {'format': 'pt'}
    js = json.dumps(head).encode()
    js += b' ' * ((8 - len(js) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(js)) + js + bytes(data))


def main():
    if len(sys.argv) != 4:
        sys.stderr.write('usage: hf_published_dir.py SRC.safetensors OUTDIR MODE\n')
        return 2
    src, outdir, mode = sys.argv[1:]
    if mode not in ('f32_vision', 'bf16_vision_mtp', 'missing_shard', 'extra_tensor'):
        sys.stderr.write('hf_published_dir.py: unknown MODE %s\n' % mode)
        return 2
    ts = read(src)
    vision = [('model.visual.blocks.0.norm1.weight', [16]),
              ('model.visual.merger.linear_fc1.weight', [4, 4])]
    if mode == 'bf16_vision_mtp':
        ts = [(n, 'BF16', s, to_bf16(r)) for n, _, s, r in ts]
        ts += [(n, 'BF16', s, b'\x80\x3f' * numel(s))
               for n, s in vision]
        hidden = next(s[1] for n, _, s, _ in ts if n == 'lm_head.weight')
        ts += [('mtp.fc.weight', 'BF16', [hidden, 2 * hidden], b'\x00\x00' * (2 * hidden * hidden)),
               ('mtp.norm.weight', 'BF16', [hidden], b'\x80\x3f' * hidden)]
    else:
        ts += [(n, 'F32', s, b'\x00\x00\x80\x3f' * numel(s))
               for n, s in vision]
    if mode == 'extra_tensor':
        ts.append(('model.language_model.layers.0.self_attn.q_norm.bias', 'F32', [4], b'\x00' * 16))
    os.makedirs(outdir, exist_ok=True)
    for f in os.listdir(outdir):
        os.unlink(os.path.join(outdir, f))
    half = len(ts) // 2
    weight_map = {}
    for k, part in enumerate((ts[:half], ts[half:])):
        fn = 'model-%05d-of-00002.safetensors' % (k + 1)
        if not (mode == 'missing_shard' and k == 1):
            write(os.path.join(outdir, fn), part)
        for t in part:
            weight_map[t[0]] = fn
    total = sum(len(t[3]) for t in ts)
    with open(os.path.join(outdir, 'model.safetensors.index.json'), 'w') as f:
        json.dump({'metadata': {'total_size': total}, 'weight_map': weight_map}, f, indent=2)
    return 0


if __name__ == '__main__':
    sys.exit(main())
