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

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import tiny_train  # noqa: E402

D, H, FF, LAYERS, T = 64, 4, 128, 2, 128


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
    model, vocab, steps, loss = tiny_train.train(Tiny, seed=1234, batch_seed=99)
    tiny_train.save_f16(model, "tiny_model.safetensors",
                        {"vocab": json.dumps("".join(vocab)), "d_model": str(D), "heads": str(H),
                         "ff": str(FF), "layers": str(LAYERS), "max_len": str(T),
                         "format": "attnflow-tiny/1"})
    ids, logits = tiny_train.generate(model, vocab)
    out = tiny_train.expected(ids, vocab, {"last_step_logit_gap_top2": tiny_train.top2_gap(logits[-1])},
                              steps, loss)
    tiny_train.write_expected("tiny_expected.json", out)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
