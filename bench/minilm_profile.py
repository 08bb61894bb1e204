#!/usr/bin/env python3
"""Where MiniLM embedding time goes: `perf record -e cpu-clock -g` over
`attnflow embed --batch B --repeat R`, samples bucketed by their leaf symbol.

Hardware counters are not available on the 2-vCPU development machine; the
cpu-clock sampler is. Buckets (regexes on the leaf symbol, first match wins):
GEMM (ops::Linear's kernels; bias, GELU and residual are fused into its
store, so GELU has no samples of its own), attention (src/kernels), the
LayerNorm rows, other row-wise ops (embedding lookup, adds), tokenizer,
thread-pool hand-offs (ParallelFor / worker loop: spinning and waking),
memory (memcpy, memset, malloc/free), model load (weight packing, page
faults, the process's start-up) and the rest. "% of forward" leaves out the
load and start-up buckets (they happen once per process, outside the timed
runs). One process per line; ATTNFLOW_NUM_THREADS sets the threads.

  python3 bench/minilm_profile.py --cli build/attnflow --batches 1 32 --threads 2
  python3 bench/minilm_profile.py --cli OLD --cli NEW ...   (columns side by side)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BUCKETS = [
    ("GEMM (ops::Linear, fused epilogues)", r"LinearSmallMT|LinearBlockT|ops::Linear|SmallTile"),
    ("LayerNorm", r"LayerNormRows"),
    ("attention (src/kernels)", r"kernels::|attnflow::Attention|Prefill|Decode|Softmax"),
    ("embeddings, adds, pooling", r"EmbeddingLookup|AddT|BertModel::Forward|BertModel::LinearNorm"),
    ("tokenizer", r"WordPiece|wordpiece|unicode|Hashtable|Utf8|Normaliz|Tokeniz|EncodeText|ChunkEnd|bert::"),
    ("thread pool hand-offs", r"ThreadPool|WorkerLoop|RunTasks|ParallelFor|_Function_handler|sched_yield|futex|__schedule|finish_task_switch|_raw_spin|pause"),
    ("memcpy/memset/malloc", r"mem(cpy|move|set)|malloc|free|_int_|operator new|operator delete|Tensor::Zeros|clear_page"),
    ("load + start-up (once)", r"PackedMatrix::Pack|fault|folio|_dl_|Py|gc_|visit_|page|mmap|unmap|safetensors|Safetensors|Load|json|dict|lookdict|frame|exec|elf|do_anonymous|filemap|d_lookup|hwy::"),
]
ONCE = "load + start-up (once)"


def profile(cli, batch, threads, repeat, path, model, freq):
    fd, data = tempfile.mkstemp(suffix=".perf")
    os.close(fd)
    env = dict(os.environ, ATTNFLOW_NUM_THREADS=str(threads))
    cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(freq), "-g", "-o", data, "--",
           cli, "embed", "--file", path, "--batch", str(batch), "--repeat", str(repeat)]
    if model:
        cmd[cmd.index("embed") + 1:cmd.index("embed") + 1] = ["--model", model]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    bench = [l for l in (p.stdout + p.stderr).splitlines() if l.startswith("bench:")]
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "-g", "none",
                          "--sort", "sym", "--percent-limit", "0"],
                         capture_output=True, text=True).stdout
    os.unlink(data)
    shares = {name: 0.0 for name, _ in BUCKETS}
    shares["kernel, other"] = 0.0
    shares["other"] = 0.0
    for line in rep.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+\[(.)\]\s+(.*)", line)
        if not m:
            continue
        pct, kind, sym = float(m.group(1)), m.group(2), m.group(3)
        for name, rx in BUCKETS:
            if re.search(rx, sym):
                shares[name] += pct
                break
        else:
            shares["kernel, other" if kind == "k" else "other"] += pct
    return shares, (bench[0] if bench else "bench: (none)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", action="append", help="attnflow binaries (default build/attnflow)")
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 32])
    ap.add_argument("--threads", type=int, nargs="*", default=[2])
    ap.add_argument("--num", type=int, default=128, help="corpus sentences")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--freq", type=int, default=4000)
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    clis = args.cli or [os.path.join(ROOT, "build/attnflow")]
    data = open(os.path.join(ROOT, "tests/data/corpus/tokenizer_corpus.txt"), "rb").read()
    lines = [l.decode("utf-8") for l in data.split(b"\n") if l.strip()]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "sentences.txt")
        with open(path, "w") as f:
            f.write("\n".join(lines[i % len(lines)] for i in range(args.num)) + "\n")
        print(f"load average before: {os.getloadavg()}")
        for batch in args.batches:
            for threads in args.threads:
                cols = []
                for cli in clis:
                    cols.append(profile(cli, batch, threads, args.repeat, path, args.model, args.freq))
                print(f"\n### batch {batch}, {threads} threads, {args.num} sentences x (1 warm-up + "
                      f"{args.repeat} timed runs)")
                for i, (_, b) in enumerate(cols):
                    print(f"[{i}] {clis[i]}: {b}")
                print("| bucket | " + " | ".join(f"[{i}] % all / % forward" for i in range(len(cols))) + " |")
                print("|---|" + "---|" * len(cols))
                names = [n for n, _ in BUCKETS] + ["kernel, other", "other"]
                for n in names:
                    cells = []
                    for s, _ in cols:
                        fwd = 100.0 - s[ONCE]
                        cells.append(f"{s[n]:.1f} / " + ("–" if n == ONCE else f"{100.0 * s[n] / fwd:.1f}"))
                    print(f"| {n} | " + " | ".join(cells) + " |")
        print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    sys.exit(main())
