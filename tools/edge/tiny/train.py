#!/usr/bin/env python3
"""train.py — trains the tiny char-level decoder of docs/edge.md ("tiny model")
and writes its committed artefacts. Deterministic: fixed seeds, one thread,
torch.use_deterministic_algorithms; pinned versions in requirements.txt.
Run by tools/edge/tiny/train.sh (not by CI; CI uses the committed files).

Model (what micro/tiny/tiny_model.c implements, in f32):
  vocab = sorted characters of tests/data/edge/tiny_text.txt
  x = tok_emb[t] + pos_emb[p]                          (d_model 64, T <= 128)
  2 x pre-LayerNorm blocks:
     x = x + W_o . attn(LN1(x)) + b_o   (4 heads of 16, causal, scale 1/4)
     x = x + W_2 . relu(W_1 . LN2(x) + b_1) + b_2       (hidden 128)
  logits = LN_f(x) . tok_emb^T                         (tied head)
  LayerNorm eps 1e-5, with weight and bias.
After training every parameter is rounded to float16 (the committed
tiny_model.safetensors, F16, <= 200 KiB); the expected outputs are computed
by this model in float32 from those rounded weights: greedy generation of 64
tokens after the prompt (argmax, first index on ties) -> tiny_expected.json.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import save_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "edge")
D, H, FF, LAYERS, T = 64, 4, 128, 2, 128
PROMPT = "The kernel "
GEN = 64


class Tiny(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok = torch.nn.Parameter(torch.randn(vocab, D) * 0.05)
        self.pos = torch.nn.Parameter(torch.randn(T, D) * 0.02)
        self.layers = torch.nn.ModuleList()
        for _ in range(LAYERS):
            m = torch.nn.Module()
            m.ln1 = torch.nn.LayerNorm(D)
            m.wq, m.wk, m.wv, m.wo = (torch.nn.Linear(D, D) for _ in range(4))
            m.ln2 = torch.nn.LayerNorm(D)
            m.w1 = torch.nn.Linear(D, FF)
            m.w2 = torch.nn.Linear(FF, D)
            self.layers.append(m)
        self.lnf = torch.nn.LayerNorm(D)

    def forward(self, idx):
        B, L = idx.shape
        x = self.tok[idx] + self.pos[:L]
        for m in self.layers:
            h = m.ln1(x)
            q = m.wq(h).view(B, L, H, D // H).transpose(1, 2)
            k = m.wk(h).view(B, L, H, D // H).transpose(1, 2)
            v = m.wv(h).view(B, L, H, D // H).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + m.wo(a.transpose(1, 2).reshape(B, L, D))
            x = x + m.w2(F.relu(m.w1(m.ln2(x))))
        return self.lnf(x) @ self.tok.t()


def main():
    torch.manual_seed(1234)
    np.random.seed(1234)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    text = open(os.path.join(DATA, "tiny_text.txt"), encoding="ascii").read()
    vocab = sorted(set(text))
    stoi = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    model = Tiny(len(vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    steps = int(os.environ.get("TINY_STEPS", "2000"))
    g = torch.Generator().manual_seed(99)
    for step in range(steps):
        ix = torch.randint(0, len(data) - 65, (32,), generator=g)
        xb = torch.stack([data[i:i + 64] for i in ix])
        yb = torch.stack([data[i + 1:i + 65] for i in ix])
        loss = F.cross_entropy(model(xb).reshape(-1, len(vocab)), yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 250 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    # Round to float16, reload as float32: the model every other
    # implementation reproduces.
    tensors = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            h = p.detach().to(torch.float16)
            tensors[name] = h.numpy()
            p.copy_(h.to(torch.float32))
    save_file(tensors, os.path.join(DATA, "tiny_model.safetensors"),
              metadata={"vocab": json.dumps("".join(vocab)), "d_model": str(D),
                        "heads": str(H), "ff": str(FF), "layers": str(LAYERS),
                        "max_len": str(T), "format": "attnflow-tiny/1"})
    # Greedy generation in float32.
    ids = [stoi[c] for c in PROMPT]
    with torch.no_grad():
        for _ in range(GEN):
            logits = model(torch.tensor([ids]))[0, -1]
            ids.append(int(torch.argmax(logits).item()))  # first max on ties
        logits = model(torch.tensor([ids[:-1]]))[0, -1]
        top2 = torch.topk(logits, 2).values
    out = {
        "prompt": PROMPT,
        "prompt_ids": ids[:len(PROMPT)],
        "generated_ids": ids[len(PROMPT):],
        "generated_text": "".join(vocab[i] for i in ids[len(PROMPT):]),
        "last_step_logit_gap_top2": float(top2[0] - top2[1]),
        "versions": {"torch": torch.__version__, "numpy": np.__version__},
        "steps": steps,
        "final_loss": float(loss.item()),
    }
    json.dump(out, open(os.path.join(DATA, "tiny_expected.json"), "w"), indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
