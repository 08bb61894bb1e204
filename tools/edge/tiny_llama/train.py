#!/usr/bin/env python3
"""train.py — trains the tiny Llama-style char-level decoder of docs/edge.md
("The tiny Llama on the device") and writes its committed artefacts.
Deterministic: fixed seeds, one thread, torch.use_deterministic_algorithms;
pinned versions in tools/edge/tiny/requirements.txt. Run by
tools/edge/tiny_llama/train.sh (not by CI; CI uses the committed files).

Model (what micro/tiny/tiny_llama_main.c implements in f32 and
tiny_llama_s8_main.c in int8):
  vocab = sorted characters of tests/data/edge/tiny_text.txt
  x = tok_emb[t]                                        (d_model 64, no positions)
  2 x pre-RMSNorm blocks (RMSNorm eps 1e-5, weight only):
     q = W_q h, k = W_k h, v = W_v h    (4 query heads, 2 kv heads of 16: GQA)
     q, k rotated by RoPE (HF Llama's rotate_half layout, theta 10000)
     x = x + W_o . attn(q, k, v)         (causal, scale 1/4, head h reads kv h/2)
     x = x + W_down . (silu(W_gate h2) * W_up h2)        (SwiGLU, hidden 128)
  logits = RMSNorm_f(x) . tok_emb^T                    (tied head, no biases)
After training every parameter is rounded to float16 (the committed
tiny_llama.safetensors); the expected outputs are computed by this model in
float32 from those rounded weights: greedy generation of 64 tokens after the
prompt (argmax, first index on ties) -> tiny_llama_expected.json.
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
D, H, HKV, FF, LAYERS, T = 64, 4, 2, 128, 2, 256
DH = D // H
THETA = 10000.0
EPS = 1e-5
PROMPT = "The kernel "
GEN = 64


def rms(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * w


def rope(x, pos):
    """x [B, heads, L, DH]; HF Llama: rotate_half, inv_freq in float32."""
    inv = 1.0 / (THETA ** (torch.arange(0, DH, 2, dtype=torch.float32) / DH))
    ang = pos[:, None].to(torch.float32) * inv[None, :]           # [L, DH/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1)
    sin = torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., :DH // 2], x[..., DH // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


class TinyLlama(torch.nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tok = torch.nn.Parameter(torch.randn(vocab, D) * 0.05)
        self.layers = torch.nn.ModuleList()
        for _ in range(LAYERS):
            m = torch.nn.Module()
            m.norm1 = torch.nn.Parameter(torch.ones(D))
            m.wq = torch.nn.Linear(D, H * DH, bias=False)
            m.wk = torch.nn.Linear(D, HKV * DH, bias=False)
            m.wv = torch.nn.Linear(D, HKV * DH, bias=False)
            m.wo = torch.nn.Linear(H * DH, D, bias=False)
            m.norm2 = torch.nn.Parameter(torch.ones(D))
            m.gate = torch.nn.Linear(D, FF, bias=False)
            m.up = torch.nn.Linear(D, FF, bias=False)
            m.down = torch.nn.Linear(FF, D, bias=False)
            self.layers.append(m)
        self.normf = torch.nn.Parameter(torch.ones(D))

    def forward(self, idx):
        B, L = idx.shape
        pos = torch.arange(L)
        x = self.tok[idx]
        for m in self.layers:
            h = rms(x, m.norm1)
            q = rope(m.wq(h).view(B, L, H, DH).transpose(1, 2), pos)
            k = rope(m.wk(h).view(B, L, HKV, DH).transpose(1, 2), pos)
            v = m.wv(h).view(B, L, HKV, DH).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + m.wo(a.transpose(1, 2).reshape(B, L, D))
            h2 = rms(x, m.norm2)
            x = x + m.down(F.silu(m.gate(h2)) * m.up(h2))
        return rms(x, self.normf) @ self.tok.t()


def main():
    torch.manual_seed(2026)
    np.random.seed(2026)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    text = open(os.path.join(DATA, "tiny_text.txt"), encoding="ascii").read()
    vocab = sorted(set(text))
    stoi = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    model = TinyLlama(len(vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    steps = int(os.environ.get("TINY_STEPS", "2000"))
    g = torch.Generator().manual_seed(77)
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
    tensors = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            h = p.detach().to(torch.float16)
            tensors[name] = h.numpy()
            p.copy_(h.to(torch.float32))
    save_file(tensors, os.path.join(DATA, "tiny_llama.safetensors"),
              metadata={"vocab": json.dumps("".join(vocab)), "d_model": str(D), "heads": str(H),
                        "kv_heads": str(HKV), "ff": str(FF), "layers": str(LAYERS),
                        "max_len": str(T), "rope_theta": str(THETA), "rms_eps": str(EPS),
                        "format": "attnflow-tiny-llama/1"})
    ids = [stoi[c] for c in PROMPT]
    with torch.no_grad():
        for _ in range(GEN):
            logits = model(torch.tensor([ids]))[0, -1]
            ids.append(int(torch.argmax(logits).item()))  # first max on ties
        all_logits = model(torch.tensor([ids[:-1]]))[0]
        gaps = []
        for i in range(GEN):
            top2 = torch.topk(all_logits[len(PROMPT) - 1 + i], 2).values
            gaps.append(float(top2[0] - top2[1]))
    out = {
        "prompt": PROMPT,
        "prompt_ids": ids[:len(PROMPT)],
        "generated_ids": ids[len(PROMPT):],
        "generated_text": "".join(vocab[i] for i in ids[len(PROMPT):]),
        "top2_logit_gaps": gaps,
        "smallest_top2_logit_gap": min(gaps),
        "versions": {"torch": torch.__version__, "numpy": np.__version__},
        "steps": steps,
        "final_loss": float(loss.item()),
    }
    json.dump(out, open(os.path.join(DATA, "tiny_llama_expected.json"), "w"), indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "top2_logit_gaps"}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
