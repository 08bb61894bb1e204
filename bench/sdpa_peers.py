#!/usr/bin/env python3
"""sdpa_peers.py — attnflow's attention kernels next to PyTorch SDPA, in one run.

For every shape, runs (same thread count, same process tree, back to back):
  * attnflow:   `build/attnflow bench prefill|decode --json ...` (fast kernels),
  * attnflow reference: the float64 oracle (small shapes only; it is slow on
    purpose),
  * PyTorch:    torch.nn.functional.scaled_dot_product_attention (fp32, and
    fp16 K/V upcast where asked), torch.set_num_threads(threads).
Reports min and median seconds, useful GFLOP/s (visible pairs only:
4·B·H·Lq·Lk·D non-causal), decode GB/s of K/V, % of the machine peaks that
`attnflow bench` measures in the same run, and the speed-up over PyTorch.
Writes a markdown table and a PNG plot of GFLOP/s against L.

Pinned versions: bench/requirements.txt. Usage:
  python bench/sdpa_peers.py --threads 2 --out bench/results
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def attnflow_bench(cli, mode, threads, repeat, extra):
    cmd = [cli, "bench", mode, "--json", "--threads", str(threads), "--repeat", str(repeat)] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def visible_pairs(lq, lk, causal):
    if causal == "none":
        return lq * lk
    total = 0
    for i in range(lq):
        last = i if causal == "top_left" else i + (lk - lq)
        total += max(0, min(last, lk - 1) + 1)
    return total


def torch_sdpa(torch, b, h, hkv, lq, lk, d, causal, kv_dtype, repeat, warmup=2):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(1)
    q = torch.randn(b, h, lq, d, generator=g)
    k = torch.randn(b, hkv, lk, d, generator=g)
    v = torch.randn(b, hkv, lk, d, generator=g)
    if kv_dtype == "f16":
        k, v = k.half(), v.half()
    elif kv_dtype == "bf16":
        k, v = k.bfloat16(), v.bfloat16()
    mask = None
    is_causal = False
    if causal == "top_left":
        is_causal = True
    elif causal == "bottom_right":
        i = torch.arange(lq)[:, None]
        j = torch.arange(lk)[None, :]
        mask = j <= i + (lk - lq)

    def run():
        kk, vv = k, v
        if kv_dtype != "f32":  # PyTorch CPU SDPA needs one dtype: upcast per call
            kk, vv = k.float(), v.float()
        if hkv != h:
            return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, is_causal=is_causal,
                                                  enable_gqa=True)
        return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask, is_causal=is_causal)

    times = []
    with torch.no_grad():
        for r in range(warmup + repeat):
            t0 = time.perf_counter()
            run()
            dt = time.perf_counter() - t0
            if r >= warmup:
                times.append(dt)
    return min(times), statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "attnflow"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--quick", action="store_true", help="fewer shapes")
    ap.add_argument("--reference-max-len", type=int, default=256,
                    help="run the float64 reference up to this L")
    args = ap.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)

    prefill = []
    lens = [256, 1024, 4096] if not args.quick else [256, 1024]
    for d in (64, 128):
        for L in lens:
            prefill.append(dict(mode="prefill", b=1, h=8, hkv=8, lq=L, lk=L, d=d, causal="none", kv="f32"))
        prefill.append(dict(mode="prefill", b=1, h=8, hkv=8, lq=lens[-1], lk=lens[-1], d=d, causal="bottom_right", kv="f32"))
        prefill.append(dict(mode="prefill", b=1, h=8, hkv=8, lq=lens[-1], lk=lens[-1], d=d, causal="none", kv="f16"))
    decode = []
    for d in (64, 128):
        decode.append(dict(mode="decode", b=1, h=8, hkv=8, lq=1, lk=4096, d=d, causal="bottom_right", kv="f32"))
        decode.append(dict(mode="decode", b=1, h=8, hkv=8, lq=1, lk=4096, d=d, causal="bottom_right", kv="f16"))
    decode.append(dict(mode="decode", b=1, h=8, hkv=8, lq=1, lk=131072, d=64, causal="bottom_right", kv="f32"))
    if args.quick:
        decode = decode[:2]

    rows = []
    peaks = None
    for s in prefill + decode:
        extra = ["--batch", str(s["b"]), "--heads", str(s["h"]), "--kv-heads", str(s["hkv"]),
                 "--q-len", str(s["lq"]), "--kv-len", str(s["lk"]), "--head-dim", str(s["d"]),
                 "--causal", s["causal"], "--kv-dtype", s["kv"]]
        # Short calls (decode steps, small prefills) get more repetitions for a
        # stable median.
        repeat = args.repeat if s["mode"] == "prefill" and s["lq"] >= 1024 else max(args.repeat, 50)
        # PyTorch's OpenMP workers keep spinning for a while after its last
        # call (GNU/Intel OpenMP wait policy) and would steal the cores from
        # the attnflow subprocess: let them go to sleep first.
        time.sleep(1.0)
        res = attnflow_bench(args.cli, s["mode"], args.threads, repeat,
                             extra + ([] if peaks is None or s["mode"] == "decode" else ["--no-peak"]))[0]
        if peaks is None:
            peaks = (res["peak_gflops"], res["peak_gbps"])
        ref = None
        if s["lq"] <= args.reference_max_len and s["lk"] <= args.reference_max_len:
            ref = attnflow_bench(args.cli, s["mode"], args.threads, 1,
                                 extra + ["--no-peak", "--kernel", "reference", "--warmup", "0"])[0]
        tmin, tmed = torch_sdpa(torch, s["b"], s["h"], s["hkv"], s["lq"], s["lk"], s["d"],
                                s["causal"], s["kv"], repeat)
        flops = 4.0 * s["b"] * s["h"] * s["d"] * visible_pairs(s["lq"], s["lk"], s["causal"])
        kv_bytes = res["kv_bytes"]
        row = dict(s, attnflow_kernel=res["kernel"], attnflow_min_s=res["min_s"],
                   attnflow_median_s=res["median_s"], attnflow_gflops=res["gflops"],
                   attnflow_gbps=res["gbps"], torch_min_s=tmin, torch_median_s=tmed,
                   torch_gflops=flops / tmed * 1e-9, torch_gbps=kv_bytes / tmed * 1e-9,
                   speedup=tmed / res["median_s"],
                   read_same_bytes_s=res.get("read_same_bytes_s") or None,
                   reference_median_s=ref["median_s"] if ref else None,
                   peak_gflops=peaks[0], peak_gbps=peaks[1])
        rows.append(row)
        print(json.dumps(row), flush=True)

    with open(os.path.join(args.out, "sdpa_peers.json"), "w") as f:
        json.dump(dict(threads=args.threads, torch=torch.__version__, rows=rows), f, indent=1)
    lines = [f"Measured {time.strftime('%Y-%m-%d')}, {args.threads} threads, PyTorch {torch.__version__}; "
             f"machine peak measured in the same run: {peaks[0]:.0f} GFLOP/s fp32 FMA, {peaks[1]:.1f} GB/s read.",
             "",
             "Decode rows also give the time of a plain read of the same K/V bytes (same threads, same "
             "cache state; `attnflow bench` measures it) and attnflow's median as a multiple of it.",
             "",
             "| mode | D | Lq | Lk | causal | K/V | attnflow min / median ms | GFLOP/s (% peak) | GB/s (% peak) | plain read ms (× of it) | PyTorch median ms | PyTorch GFLOP/s | speed-up |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['d']} | {r['lq']} | {r['lk']} | {r['causal']} | {r['kv']} | "
            f"{r['attnflow_min_s']*1e3:.3f} / {r['attnflow_median_s']*1e3:.3f} | "
            f"{r['attnflow_gflops']:.1f} ({100*r['attnflow_gflops']/r['peak_gflops']:.0f}%) | "
            f"{r['attnflow_gbps']:.1f} ({100*r['attnflow_gbps']/r['peak_gbps']:.0f}%) | "
            + (f"{r['read_same_bytes_s']*1e3:.3f} ({r['attnflow_median_s']/r['read_same_bytes_s']:.2f}×) | "
               if r.get('read_same_bytes_s') else "– | ")
            + f"{r['torch_median_s']*1e3:.3f} | {r['torch_gflops']:.1f} | {r['speedup']:.2f}x |")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "sdpa_peers.md"), "w") as f:
        f.write(md)
    print(md)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for d in (64, 128):
            pts = [r for r in rows if r["mode"] == "prefill" and r["d"] == d and r["causal"] == "none" and r["kv"] == "f32"]
            ax.plot([r["lq"] for r in pts], [r["attnflow_gflops"] for r in pts], "o-", label=f"attnflow D={d}")
            ax.plot([r["lq"] for r in pts], [r["torch_gflops"] for r in pts], "s--", label=f"PyTorch SDPA D={d}")
        ax.axhline(peaks[0], color="gray", lw=0.8, ls=":", label="measured FMA peak")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("L (= Lq = Lk)")
        ax.set_ylabel("useful GFLOP/s")
        ax.set_title(f"Non-causal fp32 prefill, B=1 H=8, {args.threads} threads")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "sdpa_peers.png"), dpi=120)
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)


if __name__ == "__main__":
    main()
