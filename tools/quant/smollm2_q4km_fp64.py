#!/usr/bin/env python3
"""smollm2_q4km_fp64.py — whose error is the Q4_K_M logit difference?
(issue 14 §3b, docs/quantize.md "Logits vs transformers").

Loads the Q4_K_M SmolLM2 made by `attnflow quantize` in transformers twice
over the same dequantised weights (gguf-py dequantises to float32; Q4_K/Q5_0/
Q6_K values d*q - m are exact in float32): once computing in float32 (what
tests/data/quant/smollm2_q4_k_m/logits.safetensors holds) and once in float64
(model.double()). Prints max |fp32 - fp64| per prompt, and writes OUT_DIR/
logits.safetensors: the committed file with the float64 logits (rounded to
float32) at the same top-16 ids and full rows, so that
tests/io/gguf_quant_smollm2_test can be pointed at it to measure attnflow
against float64 (copy it over the committed file, run the test, restore).

Environment: tools/models/requirements-smollm2.txt (transformers 4.57.3,
torch 2.9.1, gguf 0.17.1).
Usage: python tools/quant/smollm2_q4km_fp64.py Q4_K_M.gguf OUT_DIR
"""
import copy
import json
import os
import sys

import numpy as np
import torch
from safetensors.numpy import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm2_stage_errors import make_float64  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
REF = os.path.join(ROOT, "tests", "data", "quant", "smollm2_q4_k_m")


def main():
    gguf, out_dir = sys.argv[1], sys.argv[2]
    torch.set_num_threads(2)
    ref = load_file(os.path.join(REF, "logits.safetensors"))
    meta = json.load(open(os.path.join(REF, "meta.json")))
    m = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(gguf)),
                                             gguf_file=os.path.basename(gguf), dtype=torch.float32).eval()
    m64 = copy.deepcopy(m).double().eval()
    make_float64(m64)
    out, rep = dict(ref), {}
    with torch.no_grad():
        for n, lp in enumerate(meta["logit_prompts"]):
            ids = torch.from_numpy(ref[f"p{n}.ids"].astype(np.int64))[None]
            l32 = m(ids).logits[0].double().numpy()
            l64 = m64(ids).logits[0].numpy()
            row = lp["full_row"]
            top = ref[f"p{n}.top_ids"].astype(np.int64)
            rep.setdefault("committed_vs_fp32_now", []).append(
                float(np.abs(l32[row] - ref[f"p{n}.full_row"]).max()))
            # What the test compares: top-16 ids at every position and one full row.
            d = max(np.abs(np.take_along_axis(l32 - l64, top, axis=1)).max(), np.abs(l32[row] - l64[row]).max())
            rep.setdefault("fp32_vs_fp64_tested_entries", []).append(float(d))
            rep.setdefault("fp32_vs_fp64_all_logits", []).append(float(np.abs(l32 - l64).max()))
            out[f"p{n}.full_row"] = l64[row].astype(np.float32)
            out[f"p{n}.top_values"] = np.take_along_axis(l64, top, axis=1).astype(np.float32)
    os.makedirs(out_dir, exist_ok=True)
    save_file(out, os.path.join(out_dir, "logits.safetensors"))
    print(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
