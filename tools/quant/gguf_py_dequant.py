#!/usr/bin/env python3
"""gguf_py_dequant.py IN.gguf OUT.gguf — writes every tensor of IN,
dequantised to F32 by gguf-py (gguf.quants.dequantize), under the same name
into OUT. Used by tests/io/gguf_quant_test.cc as the independent reference
for attnflow's dequantisation of real tensors. Pinned: tools/deps/gguf.pip.
"""
import sys

import numpy as np
import gguf
from gguf.quants import dequantize


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(dst, arch="attnflow-dequant")
    for t in r.tensors:
        x = dequantize(t.data, t.tensor_type).astype(np.float32)
        ne = [int(n) for n in t.shape]  # innermost first
        w.add_tensor(t.name, np.ascontiguousarray(x.reshape(list(reversed(ne)))))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
