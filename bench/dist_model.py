#!/usr/bin/env python3
"""bench/dist_model.py — model of ring attention past one machine, calibrated
by the loopback measurements in bench/results/dist_measured.jsonl
(bench/dist_measure.sh). Writes bench/results/dist_model.png and
bench/results/dist_model.md.

    python bench/dist_model.py        (numpy, matplotlib: bench/requirements.txt)

Model (causal prefill, zigzag layout, so every rank does the same work):
  per rank per ring step, block of c = L/P tokens:
    compute(c) = (c^2 / 2) * H * t_pair          t_pair: seconds per (query,key) pair per head
    comm(c)    = alpha + 2 * c * Hkv * D * e / BW  (K and V block, e bytes per element)
    step(c)    = max(compute, comm)               (transfer overlapped with compute, as
                                                   measured: see "hidden" in the jsonl)
  total prefill = P steps. Communication stops hiding when comm > compute, i.e. for
    c < c* = 4 * Hkv * D * e / (H * t_pair * BW)   (alpha neglected; the script solves
                                                     the full quadratic)
  Ring Attention (Liu et al. 2023, sec. 3) states the condition as c >= F / B
  (F FLOP/s per host, B bytes/s, MHA, no mask, bf16); with t_pair = 4 D / F, H = Hkv,
  e = 2 and no causal halving our c* equals exactly F / B, so the two agree; causal
  halves the compute per step and doubles c*, GQA (H/Hkv = 4) divides it by 4.
  Memory per rank: bytes per token measured from the peak RSS at L = 262144
  (P = 4 vs P = 1); max context = P * M / bytes_per_token for a per-rank budget M.

Inputs measured here: t_pair (one core of this machine, 1 kernel thread per rank),
alpha and the loopback BW (shared memory). Inputs ASSUMED (named in the plot): the
interconnect bandwidths and latencies, and an accelerator-class rank
(F = 400 TFLOP/s sustained) for comparison.
"""
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RES = os.path.join(HERE, "results")

# Interconnects: (name, bytes/s per direction, latency s) — ASSUMED nominal figures.
LINKS = [
    ("25 GbE", 25e9 / 8, 20e-6),
    ("100 Gb InfiniBand", 100e9 / 8, 2e-6),
    ("NVLink-class (450 GB/s)", 450e9, 2e-6),
]
# Model shape (Llama-3-8B-like attention): H=32 query heads, Hkv=8, D=128, bf16 K/V.
H, HKV, D, E = 32, 8, 128, 2
L_FIXED = 1 << 20  # 1M-token prefill for the time-per-step panel
PS = [8, 16, 32, 64, 128, 256, 512]
ACCEL_FLOPS = 400e12  # ASSUMED sustained attention FLOP/s of an accelerator rank


def load():
    rows = []
    with open(os.path.join(RES, "dist_measured.jsonl")) as f:
        for line in f:
            line = line.strip()
            if line:
                rows.append(json.loads(line))
    return rows


def pick(rows, **kw):
    out = [r for r in rows if all(r.get(k) == v for k, v in kw.items())]
    if not out:
        sys.exit(f"dist_model: no measurement with {kw} in dist_measured.jsonl")
    return out[0]


def calibrate(rows):
    # t_pair: P=1 causal prefill (one step, no communication).
    r1 = pick(rows, mode="prefill", P=1, causal="top_left", skip_compute=0)
    L = r1["Lq"]
    pairs = L * (L + 1) / 2 * r1["H"]
    t_pair = r1["step_compute_s"][0] / pairs  # min over iterations: the machine is shared
    # Transfer: skip-compute P=2 runs; bytes per rank per step vs comm time.
    xs, ys = [], []
    for r in rows:
        if r["mode"] == "prefill" and r["skip_compute"] == 1 and r["P"] == 2:
            b = r["step_bytes"][0] / r["P"]
            xs.append(b)
            ys.append(r["step_comm_s"][0])
    xs, ys = np.array(xs), np.array(ys)
    slope, alpha = np.polyfit(xs, ys, 1)
    alpha = max(alpha, 0.0)
    bw = 1.0 / slope
    # Memory per token per rank at L=262144: (RSS_P4 * 4 - RSS_P1) gives the
    # replicated overhead; per-token bytes from P=1.
    m1 = pick(rows, mode="prefill", P=1, Lq=262144)
    m4 = pick(rows, mode="prefill", P=4, Lq=262144)
    return dict(t_pair=t_pair, alpha=alpha, bw=bw, rss1=m1["rss_mib_max"],
                rss4=m4["rss_mib_max"], Lmem=m1["Lq"], shape_mem=(m1["H"], m1["Hkv"], m1["D"]),
                kv_mem=m1["kv"], L_tpair=L, shape_tpair=(r1["H"], r1["Hkv"], r1["D"]))


def step_times(c, t_pair, alpha, bw):
    compute = c * c / 2 * H * t_pair
    comm = alpha + 2 * c * HKV * D * E / bw
    return compute, comm


def crossover(t_pair, alpha, bw):
    # c^2/2 H t_pair = alpha + 2 c Hkv D e / bw
    a = H * t_pair / 2
    b = -2 * HKV * D * E / bw
    return (-b + math.sqrt(b * b + 4 * a * alpha)) / (2 * a)


def main():
    rows = load()
    cal = calibrate(rows)
    # t_pair measured at the measured D; scale to the model's D (work per pair is 4 D flops).
    t_pair_cpu = cal["t_pair"] * D / cal["shape_tpair"][2]
    t_pair_acc = 4 * D / ACCEL_FLOPS
    ranks = [("measured CPU rank (1 core of this machine)", t_pair_cpu),
             ("assumed accelerator rank (400 TFLOP/s)", t_pair_acc)]
    links = LINKS + [("loopback (measured)", cal["bw"], cal["alpha"])]
    # Bytes per token per rank: q and out (F32), lse, the K/V shard and two
    # in-flight K/V blocks (3 x K/V). Checked against the measured peak RSS.
    mh, mhkv, md = cal["shape_mem"]
    e_mem = 2 if cal["kv_mem"] in ("F16", "BF16") else 4

    def per_token(h, hkv, d, e, ring):
        return h * d * 4 * 2 + h * 4 + hkv * d * e * 2 * (3 if ring else 1)

    L = cal["Lmem"]
    pred1 = L * per_token(mh, mhkv, md, e_mem, False) / 2**20
    pred4 = L / 4 * per_token(mh, mhkv, md, e_mem, True) / 2**20
    per_token_model = per_token(H, HKV, D, E, True)

    fig, ax = plt.subplots(2, 2, figsize=(13, 10))
    md_lines = ["# Ring attention model (bench/dist_model.py)", "",
                f"Calibration (measured on loopback, 2 cores): t_pair = {cal['t_pair']*1e9:.3f} ns "
                f"per (pair, head) at D={cal['shape_tpair'][2]} (one kernel thread), "
                f"transfer alpha = {cal['alpha']*1e6:.1f} us, loopback bandwidth "
                f"{cal['bw']/1e9:.2f} GB/s; peak RSS at L={cal['Lmem']}: P=1 {cal['rss1']:.0f} MiB, "
                f"P=4 {cal['rss4']:.0f} MiB per rank (ratio {cal['rss4']/cal['rss1']:.3f}); "
                f"tensor bytes predicted {pred1:.0f} MiB and {pred4:.0f} MiB (the rest is the "
                f"process and MPI baseline).", "",
                f"Model shape: H={H}, Hkv={HKV}, D={D}, bf16 K/V, causal, zigzag; L = {L_FIXED} "
                f"for the time panels.", ""]
    for pi, (rname, tp) in enumerate(ranks):
        a = ax[0][pi]
        md_lines += [f"## {rname}", "",
                     "| link | c* (tokens) | P where comm stops hiding at L=1M | "
                     + " | ".join(f"P={p} step ms" for p in PS) + " |",
                     "|---|---|---|" + "---|" * len(PS)]
        cs = np.array([L_FIXED / p for p in PS])
        comp = np.array([step_times(c, tp, 0, 1)[0] for c in cs])
        a.plot(PS, comp * 1e3, "k-", lw=2, label="compute per step")
        for (lname, bw, lat) in links:
            comm = np.array([step_times(c, tp, lat, bw)[1] for c in cs])
            a.plot(PS, comm * 1e3, "--", label=f"comm per step: {lname}")
            cstar = crossover(tp, lat, bw)
            pstar = L_FIXED / cstar
            steps = [max(x, y) * 1e3 for x, y in zip(comp, comm)]
            pcol = f"{pstar:,.0f}" if pstar <= 512 else f"> 512 (c* at P={pstar:,.0f})"
            md_lines.append(f"| {lname} | {cstar:,.0f} | {pcol} | "
                            + " | ".join(f"{s:.3g}" for s in steps) + " |")
        md_lines.append("")
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("ranks P (block c = L/P)")
        a.set_ylabel("ms per ring step")
        a.set_title(f"L = 1M tokens, {rname}", fontsize=9)
        a.legend(fontsize=7)
        a.grid(True, which="both", alpha=0.3)
    # Crossover block size vs bandwidth, against Ring Attention's c >= F/B.
    a = ax[1][0]
    bws = np.logspace(8.5, 12, 50)
    for rname, tp in ranks:
        a.plot(bws / 1e9, [crossover(tp, 0, b) for b in bws], label=f"c* this model: {rname}")
        F = 4 * D / tp
        a.plot(bws / 1e9, F / bws, ":", label=f"Ring Attention paper c >= F/B, same F ({F/1e12:.3g} TFLOP/s)")
    for lname, bw, _ in links:
        a.axvline(bw / 1e9, color="grey", lw=0.5)
        a.text(bw / 1e9, 1.5, lname, rotation=90, fontsize=6)
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("link bandwidth per direction (GB/s)")
    a.set_ylabel("smallest block c (tokens/rank) that hides comm")
    a.set_title("Crossover: comm hides behind compute above the line", fontsize=9)
    a.legend(fontsize=6)
    a.grid(True, which="both", alpha=0.3)
    # Max context (memory-bound) vs P.
    a = ax[1][1]
    md_lines += ["## Largest context (memory)", "",
                 f"Bytes per token per rank for the model shape: {per_token_model:,.0f} "
                 "(q and out F32, lse, K/V shard and two in-flight K/V blocks in bf16; the "
                 "same formula predicts the measured RSS above).", "",
                 "| per-rank memory | " + " | ".join(f"P={p}" for p in PS) + " |",
                 "|---|" + "---|" * len(PS)]
    for mem_name, mem in [("80 GiB (accelerator HBM)", 80 * 2**30), ("256 GiB (CPU node)", 256 * 2**30)]:
        lmax = [p * mem / per_token_model for p in PS]
        a.plot(PS, lmax, "o-", label=mem_name)
        md_lines.append(f"| {mem_name} | " + " | ".join(f"{x/1e6:.1f}M" for x in lmax) + " |")
    a.set_xscale("log", base=2)
    a.set_yscale("log")
    a.set_xlabel("ranks P")
    a.set_ylabel("largest context (tokens)")
    a.set_title("Largest context: q, out, K/V shard + 2 in-flight blocks per rank", fontsize=9)
    a.legend(fontsize=7)
    a.grid(True, which="both", alpha=0.3)
    fig.suptitle("attnflow ring attention: measured on loopback, modelled past one machine "
                 "(H=32, Hkv=8, D=128, bf16 K/V, causal zigzag)", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(RES, "dist_model.png"), dpi=110)
    with open(os.path.join(RES, "dist_model.md"), "w") as f:
        f.write("\n".join(md_lines) + "\n")
    print("\n".join(md_lines))


if __name__ == "__main__":
    main()
