#!/usr/bin/env python3
"""Paired A/B of two attnflow binaries' decode speed on a noisy machine.

Runs `attnflow generate` (each run its own process) for binary A and binary B
back to back, PAIRS times, alternating which goes first (A B, B A, A B, ...),
with the same model, prompt (bench/smollm2_peers.py's prompt of CTX tokens),
decode steps and threads, and reads each run's "[decode] ... ms/token" line.
A pair shares the machine's state of that moment (other tenants, memory
bandwidth), so the per-pair ratio B/A is far less noisy than the two
binaries' separate medians when the host's bandwidth drifts; the script
prints min and median of each binary and the median and quartiles of the
per-pair ratios.

    python3 bench/decode_ab.py --a OLD/attnflow --b build/attnflow --model M.gguf \\
        [--pairs 20] [--ctx 128] [--steps 129] [--threads 2] [-- --fast-dot]

Arguments after `--` are passed to both `generate` runs.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from smollm2_peers import prompt_text  # noqa: E402

DECODE = re.compile(r"\[decode\] \d+ tokens generated, (\d+) decode steps: ([\d.]+) ms/token")


def run(binary, a, extra):
    cmd = [binary, "generate", "--model", a.model, "--prompt", prompt_text(a.ctx), "--max-tokens",
           str(a.steps), "--threads", str(a.threads), "--ignore-eos"] + extra
    try:
        r = subprocess.run(cmd, capture_output=True, text=True,
                           env=dict(os.environ, ATTNFLOW_NUM_THREADS=str(a.threads)))
    except OSError as e:
        sys.exit(f"decode_ab: cannot run {binary}: {e}")
    m = DECODE.search(r.stderr)
    if r.returncode != 0 or m is None:
        sys.exit(f"{binary} failed (exit {r.returncode}):\n{r.stderr[-2000:]}")
    return float(m.group(2))


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="binary A (the baseline)")
    ap.add_argument("--b", required=True, help="binary B")
    ap.add_argument("--model", required=True, help="GGUF file")
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--ctx", type=int, default=128, help="prompt tokens")
    ap.add_argument("--steps", type=int, default=129, help="--max-tokens of each run")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    if a.pairs < 1 or a.ctx < 1 or a.steps < 2:
        sys.exit("decode_ab: need --pairs >= 1, --ctx >= 1, --steps >= 2")
    ta, tb, ratios = [], [], []
    for i in range(a.pairs):
        if i % 2 == 0:
            x = run(a.a, a, extra)
            y = run(a.b, a, extra)
        else:
            y = run(a.b, a, extra)
            x = run(a.a, a, extra)
        ta.append(x)
        tb.append(y)
        ratios.append(y / x)
    q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
    print(f"ctx {a.ctx}, {a.steps} tokens, {a.threads} threads {' '.join(extra)}: "
          f"A min {min(ta):.3f} median {statistics.median(ta):.3f} ms/token | "
          f"B min {min(tb):.3f} median {statistics.median(tb):.3f} | "
          f"B/A per pair: median {statistics.median(ratios):.3f} (quartiles {q[0]:.3f}-{q[2]:.3f}, {a.pairs} pairs)")


if __name__ == "__main__":
    main()
