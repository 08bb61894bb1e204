#!/usr/bin/env python3
"""Writes tests/data/quant/quant_refs.gguf: independent expected values for
attnflow's GGUF (de)quantisation (src/io/gguf_quants.cc), made by gguf-py.

Pinned: gguf==0.19.0, numpy==2.4.6 (tools/deps/gguf.pip). Run:
  python tools/quant/make_quant_refs.py [--out tests/data/quant/quant_refs.gguf]

For every type T in Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q4_K Q5_K Q6_K:
  deq.T.raw  [rows, cols] tensor of type T holding random blocks (random
             bytes, the f16 scale fields replaced by random finite halves of
             both signs incl. subnormals and zero),
  deq.T.f32  the same blocks dequantised by gguf.quants.dequantize (F32).
For every type gguf-py can quantise (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0):
  q.T.in     [rows, cols] F32 input (normal, scaled per row, with some zero
             and constant blocks),
  q.T.raw    gguf.quants.quantize(q.T.in, T) (type T).
Invariant: nothing here comes from attnflow.
"""
import argparse
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as Q
from gguf import quants

# (type, offsets of f16 scale fields inside a block)
DEQ_TYPES = [
    (Q.Q4_0, [0]), (Q.Q4_1, [0, 2]), (Q.Q5_0, [0]), (Q.Q5_1, [0, 2]),
    (Q.Q8_0, [0]), (Q.Q4_K, [0, 2]), (Q.Q5_K, [0, 2]), (Q.Q6_K, [208]),
]
QUANT_TYPES = [Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0]


def random_halves(rng, n):
    # Mix of magnitudes: typical weights' scales, subnormal, zero, negative.
    mag = rng.choice([1e-3, 1e-2, 0.1, 1.0, 30.0, 1e-6], size=n)
    h = (rng.standard_normal(n) * mag).astype(np.float16)
    h[rng.random(n) < 0.05] = np.float16(0.0)
    return h


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "..", "tests", "data", "quant", "quant_refs.gguf"))
    args = ap.parse_args()
    rng = np.random.default_rng(20261201)
    w = gguf.GGUFWriter(args.out, arch="attnflow-quant-refs")
    w.add_string("attnflow.generator", "tools/quant/make_quant_refs.py gguf==%s numpy==%s"
                 % ("0.19.0", np.__version__))
    for qt, scale_offsets in DEQ_TYPES:
        bs, tb = gguf.GGML_QUANT_SIZES[qt]
        rows, blocks_per_row = 3, 4 if bs == 256 else 5
        raw = rng.integers(0, 256, size=(rows * blocks_per_row, tb), dtype=np.uint8)
        for off in scale_offsets:
            raw[:, off:off + 2] = random_halves(rng, rows * blocks_per_row).view(np.uint8).reshape(-1, 2)
        raw = raw.reshape(rows, blocks_per_row * tb)
        deq = quants.dequantize(raw, qt).astype(np.float32)
        assert deq.shape == (rows, blocks_per_row * bs)
        w.add_tensor("deq.%s.raw" % qt.name, raw, raw_dtype=qt)
        w.add_tensor("deq.%s.f32" % qt.name, deq)
    for qt in QUANT_TYPES:
        bs, tb = gguf.GGML_QUANT_SIZES[qt]
        rows, cols = 4, 8 * bs
        x = (rng.standard_normal((rows, cols)) * np.array([[1e-3], [0.05], [1.0], [40.0]])).astype(np.float32)
        x[0, :bs] = 0.0            # an all-zero block
        x[1, bs:2 * bs] = 0.25     # a constant block
        x[2, 2 * bs] = 7.5         # one outlier
        raw = quants.quantize(x, qt)
        w.add_tensor("q.%s.in" % qt.name, x)
        w.add_tensor("q.%s.raw" % qt.name, raw, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", os.path.normpath(args.out))


if __name__ == "__main__":
    main()
