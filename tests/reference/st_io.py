"""st_io.py - minimal safetensors reader/writer (the python `safetensors` module is absent).

Format: 8-byte little-endian header length N, N bytes of JSON header
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}, then the raw
little-endian tensor bytes. Invariants of what we write: tensors sorted by name, packed in that
order without gaps, header padded with spaces to a multiple of 8 bytes, compact JSON with sorted
keys, so the same tensors always give the same bytes.
"""
import json
import struct

import numpy as np

_DT = {'F32': '<f4', 'F64': '<f8', 'I32': '<i4', 'I64': '<i8', 'U16': '<u2', 'BF16': None}
_DT_REV = {'<f4': 'F32', '<f8': 'F64', '<i4': 'I32', '<i8': 'I64', '<u2': 'U16'}


def write(path, tensors, metadata=None):
    """tensors: {name: numpy array}; arrays are stored in their own dtype (use float32)."""
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        dt = arr.dtype.newbyteorder('<').str
        if dt not in _DT_REV:
            raise ValueError('unsupported dtype %s for %s' % (arr.dtype, name))
        raw = arr.astype(dt).tobytes()
        header[name] = {'dtype': _DT_REV[dt], 'shape': list(arr.shape),
                        'data_offsets': [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header['__metadata__'] = {str(k): str(v) for k, v in metadata.items()}
    hj = json.dumps(header, sort_keys=True, separators=(',', ':')).encode()
    hj += b' ' * ((-len(hj)) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)


def read(path):
    """Returns ({name: numpy array}, metadata dict)."""
    with open(path, 'rb') as f:
        data = f.read()
    (n,) = struct.unpack('<Q', data[:8])
    header = json.loads(data[8:8 + n].decode())
    meta = header.pop('__metadata__', {})
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info['data_offsets']
        dt = _DT[info['dtype']]
        out[name] = np.frombuffer(data[base + b:base + e], dtype=dt).reshape(info['shape']).copy()
    return out, meta
