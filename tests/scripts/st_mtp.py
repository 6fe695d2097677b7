#!/usr/bin/env python3
"""st_mtp.py - safetensors helpers for the carried MTP head's checks (tests/e2e/70_mtp_keep.sh).

  FILE may also be a checkpoint directory: its model.safetensors.index.json's shards, merged.
  st_mtp.py list FILE                 one line per mtp.* tensor: name dtype shape sha256
  st_mtp.py same A B                  exit 0 iff A's and B's mtp.* tensors agree: the same
                                      names, dtypes, shapes and bytes (and there is one)
  st_mtp.py differ A B                exit 0 iff some non-mtp tensor's bytes differ (trained)
  st_mtp.py bf16 IN OUT               OUT = IN with its mtp.* tensors as BF16 (round to
                                      nearest even), the layout of the published checkpoints
  st_mtp.py rename IN OUT OLD NEW     OUT = IN with tensor names' prefix OLD replaced by NEW
Reads and writes with the standard library only (json, struct, hashlib)."""
import hashlib
import json
import os
import struct
import sys


def read(path):
    if os.path.isdir(path):
        with open(os.path.join(path, 'model.safetensors.index.json')) as f:
            files = sorted(set(json.load(f)['weight_map'].values()))
        out = {}
        for fn in files:
            out.update(read(os.path.join(path, fn))[1])
        return None, out
    with open(path, 'rb') as f:
        raw = f.read()
    n = struct.unpack('<Q', raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop('__metadata__', None)
    base = 8 + n
    out = {}
    for name, t in hdr.items():
        a, b = t['data_offsets']
        out[name] = (t['dtype'], t['shape'], raw[base + a:base + b])
    return meta, out


def write(path, meta, tensors):
    hdr, blobs, off = {}, [], 0
    if meta is not None:
        hdr['__metadata__'] = meta
    for name, (dt, shape, data) in tensors.items():
        hdr[name] = {'dtype': dt, 'shape': shape, 'data_offsets': [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(hdr, separators=(',', ':')).encode()
    h += b' ' * ((8 - len(h) % 8) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))


def to_bf16(data):
    out = bytearray()
    for (u,) in struct.iter_unpack('<I', data):
        u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
        out += struct.pack('<H', u & 0xFFFF)
    return bytes(out)


def mtp(ts):
    return {k: v for k, v in ts.items() if k.startswith('mtp.')}


def main(argv):
    cmd = argv[1]
    if cmd == 'list':
        for k, (dt, sh, data) in mtp(read(argv[2])[1]).items():
            print(k, dt, sh, hashlib.sha256(data).hexdigest()[:16])
        return 0
    if cmd == 'same':
        a, b = mtp(read(argv[2])[1]), mtp(read(argv[3])[1])
        if not a or a.keys() != b.keys():
            print('mtp.* names differ:', sorted(set(a) ^ set(b))[:5], len(a), len(b))
            return 1
        bad = [k for k in a if a[k] != b[k]]
        print('%d mtp.* tensors, %d differ %s' % (len(a), len(bad), bad[:3]))
        return 1 if bad else 0
    if cmd == 'differ':
        a, b = read(argv[2])[1], read(argv[3])[1]
        n = [k for k in a if not k.startswith(('mtp.', 'optimizer.')) and k in b
             and a[k][2] != b[k][2]]
        print('%d other tensors differ' % len(n))
        return 0 if n else 1
    if cmd == 'bf16':
        meta, ts = read(argv[2])
        ts = {k: (('BF16', v[1], to_bf16(v[2])) if k.startswith('mtp.') and v[0] == 'F32'
                  else v) for k, v in ts.items() if not k.startswith('optimizer.')}
        write(argv[3], {'format': 'pt'}, ts)
        return 0
    if cmd == 'rename':
        meta, ts = read(argv[2])
        old, new = argv[4], argv[5]
        ts = {(new + k[len(old):] if k.startswith(old) else k): v for k, v in ts.items()
              if not k.startswith('optimizer.')}
        write(argv[3], {'format': 'pt'}, ts)
        return 0
    print(__doc__)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv))
