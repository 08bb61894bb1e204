#!/usr/bin/env python3
"""plot_io.py — draws docs/img/flash_vs_naive_io.png from `attnflow bench prefill --io --json`.

Input: JSON lines (one per shape) as printed by
  attnflow bench prefill --io --json --q-len 128,256,512,1024,2048 --heads 4 --head-dim 64
Left panel: modelled DRAM bytes of the naive (materialised S and P) and the
flash (tiled) schedule against L = Lq = Lk. Right panel: measured median time
of both (min as the lower end of each bar of the error). Nothing is computed
here beyond unit conversion: the numbers are the CLI's.
Invariants: matplotlib (pinned: matplotlib==3.9.2, installed in a private venv,
not a test dependency), Agg backend, deterministic output for the same input.
Usage: plot_io.py IO.jsonl OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
  rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
  rows.sort(key=lambda r: r["q_len"])
  L = [r["q_len"] for r in rows]
  mib = 1.0 / (1 << 20)
  fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
  a.loglog(L, [r["naive_bytes"] * mib for r in rows], "o-", label="naive: Q,K,V,O + write/read S and P")
  a.loglog(L, [r["flash_bytes"] * mib for r in rows], "s-", label="flash: Q,O + K,V per query tile")
  a.loglog(L, [r["s_and_p_bytes"] * mib for r in rows], ":", color="grey", label="of which S and P (4·L²·4 B per head)")
  a.set_xlabel("sequence length L (Lq = Lk)")
  a.set_ylabel("modelled DRAM traffic (MiB)")
  a.set_title("Bytes moved (model)")
  a.legend(fontsize=7)
  a.grid(True, which="both", alpha=0.3)
  for key, mark, name in (("naive", "o-", "naive"), ("flash", "s-", "flash (tiled_prefill)")):
    med = [r[key + "_median_s"] * 1e3 for r in rows]
    mn = [r[key + "_min_s"] * 1e3 for r in rows]
    b.loglog(L, med, mark, label=name + " median")
    b.loglog(L, mn, "x", color=b.lines[-1].get_color(), label=name + " min")
  b.set_xlabel("sequence length L (Lq = Lk)")
  b.set_ylabel("time per call (ms)")
  r0 = rows[0]
  b.set_title(f"Measured, {r0['threads']} threads, H={r0['heads']} D={r0['head_dim']} fp32")
  b.legend(fontsize=7)
  b.grid(True, which="both", alpha=0.3)
  agree = all(r["agree"] for r in rows)
  fig.suptitle("Same math, different bytes: outputs agree with the float64 reference: "
               + ("yes" if agree else "NO"), fontsize=10)
  fig.tight_layout()
  fig.savefig(sys.argv[2], dpi=100)


if __name__ == "__main__":
  main()
