"""Deterministic safetensors bytes for the golden generators.

Shared by make_cases.py (tests/data/golden), make_nn_cases.py
(tests/data/nn) and make_vit_cases.py (tests/data/nn_vit); it imports no
attnflow code.

Invariants (the committed files are byte-identical on every run):
* tensors are ordered by element size (largest first), then by name, so all
  data is 8/4-byte aligned;
* ``__metadata__`` keys are sorted (``safetensors`` 0.7.0 serialises them from
  a hash map whose order changes from run to run);
* data is little-endian, C order; the header is compact ASCII JSON padded
  with spaces to a multiple of 8 bytes.
"""
import json
import struct

import numpy as np
import torch


def st_bytes(tensors, metadata, dtype_names):
    """The file's bytes; dtype_names maps each torch dtype written to its
    safetensors name (a dtype it lacks is a KeyError)."""
    order = sorted(tensors, key=lambda n: (-tensors[n].element_size(), n))
    header = {"__metadata__": {k: metadata[k] for k in sorted(metadata)}}
    blobs, off = [], 0
    for n in order:
        t = tensors[n].contiguous()
        a = t.numpy()
        a = a.astype(a.dtype.newbyteorder("<"), copy=False)
        b = a.tobytes(order="C")
        header[n] = {"dtype": dtype_names[t.dtype], "shape": list(t.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    h += b" " * ((-len(h)) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def st_load(path):
    """(tensors, metadata) of a file, read with the safetensors library."""
    from safetensors import safe_open
    with safe_open(path, framework="numpy") as f:
        meta = dict(f.metadata())
        tensors = {n: torch.from_numpy(np.array(f.get_tensor(n))) for n in f.keys()}
    return tensors, meta
