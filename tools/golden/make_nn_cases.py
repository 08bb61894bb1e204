#!/usr/bin/env python3
"""Independent float64 reference generator for attnflow's nn golden cases.

Purpose
-------
Writes ``tests/data/nn/*.safetensors``: golden cases (format
``attnflow-golden/1``, kinds ``nn_*``, see docs/nn.md "Golden format
extension") for the attention family of attnflow/nn.h: sinusoidal and learned
positions, RoPE (half / interleaved, partial, linear / NTK / dynamic-NTK
scaling, offsets), the T5 bucketed bias, Transformer blocks (post-/pre-norm,
LayerNorm / RMSNorm, ReLU / GELU / GELU-tanh / SwiGLU, ALiBi, T5, RoPE, KV
cache decode), the decoder layer, the full encoder-decoder Transformer,
Bahdanau / Luong alignment and Transformer-XL with memory.

No attnflow code is imported or executed: every expected value comes from the
explicit float64 transcriptions below (written from the papers / the
libraries' documented formulas), and each case is cross-checked inside this
script against an independent library implementation:

* torch.nn.TransformerEncoderLayer / TransformerDecoderLayer / Transformer
  (float64, norm_first both ways, padding masks) and nn.MultiheadAttention
  (per-head weights) -- agreement < 1e-10;
* torch.nn.RMSNorm, F.gelu (exact and tanh), F.silu -- < 1e-12;
* Hugging Face transformers==4.35.2: Llama ``apply_rotary_pos_emb`` /
  ``rotate_half`` and GPT-J ``apply_rotary_pos_emb`` / ``rotate_every_two``
  fed with our float64 cos/sin (< 1e-12); Llama rotary modules (plain, linear,
  dynamic NTK) and GPT-J ``create_sinusoidal_positions`` (these compute their
  frequencies in float32: < 2e-5); ``LlamaDecoderLayer`` incl. the KV cache
  path (HF upcasts softmax and RMSNorm to float32: < 2e-5); T5
  ``_relative_position_bucket`` (exact) and ``compute_bias`` (< 1e-12),
  ``T5LayerSelfAttention`` + ``T5LayerFF`` (float32 variance/softmax inside HF:
  < 2e-5); ``TransfoXLModel`` on two segments with memory reuse (HF rounds
  the scores to float32 when masking: < 2e-5; its float64 mask value
  finfo(float64).min overflows that float32 tensor, so the HF module is given
  a torch whose finfo(float64) is float32's -- masked weights stay exactly 0);
* the TransfoXL PositionalEmbedding and the PyTorch-tutorial sinusoidal
  formula (exp/log form) for the sinusoidal tables (< 1e-12);
* the ALiBi slopes from the paper's reference code (``get_slopes``);
* Bahdanau/Luong: the NumPy transcription of the paper's equations vs a
  second torch formulation (< 1e-12);
* the Bahdanau loop: ``torch.nn.GRU`` (bidirectional) + ``torch.nn.GRUCell``
  driving the same per-step additive alignment (< 1e-12);
* ViT: Hugging Face ``ViTModel`` (float64, no pooler) on the same weights,
  with and without ``interpolate_pos_encoding`` (< 1e-10), and
  ``torch.nn.functional.interpolate(mode="bicubic")`` for the resized
  position table (< 1e-12).

Inputs are drawn in float32 from a torch.Generator seeded with the CRC-32 of
the case name; the reference runs in float64 on the float32-rounded inputs
and every stage is rounded to float32 once. After writing, each file is read
back with the ``safetensors`` library and all stages are recomputed from the
file alone (inputs + config) and compared bit for bit.

Pinned versions: tools/golden/requirements-nn.txt.

How to run
----------
    python3 -m venv /work/nnvenv && /work/nnvenv/bin/pip install -r tools/golden/requirements-nn.txt
    /work/nnvenv/bin/python tools/golden/make_nn_cases.py            # write tests/data/nn
    /work/nnvenv/bin/python tools/golden/make_nn_cases.py --check    # byte identity
    /work/nnvenv/bin/python tools/golden/make_nn_cases.py --list
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from gen_common import given, installed_versions, main, write_case, write_manifest  # tools/golden
from st_io import st_bytes, st_load  # tools/golden/st_io.py

warnings.filterwarnings("ignore")

FORMAT = "attnflow-golden/1"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "nn"))
PINNED = {"torch": "2.9.1", "numpy": "2.3.5", "safetensors": "0.7.0", "transformers": "4.35.2"}
TOL = "2e-06"  # atol = rtol stored in every case
ST_DTYPE = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.bool: "BOOL"}
D64 = torch.float64
NEG_INF = float("-inf")


# ---------------------------------------------------------------------------
# Small utilities
# ---------------------------------------------------------------------------

def gen(name):
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def randn(g, *shape, scale=1.0):
    return (torch.randn(*shape, generator=g, dtype=D64) * scale).float()


def linear_w(g, out, inp, bias=True):
    w = randn(g, out, inp, scale=1.0 / math.sqrt(inp))
    b = randn(g, out, scale=0.1) if bias else None
    return w, b


def d(t):
    return None if t is None else t.to(D64)


def lin(x, w, b=None):
    y = x @ d(w).T
    return y if b is None else y + d(b)


def close(name, got, want, tol):
    got = torch.as_tensor(got).to(D64)
    want = torch.as_tensor(want).to(D64)
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    fin = torch.isfinite(want)
    assert torch.equal(fin, torch.isfinite(got)), f"{name}: non-finite pattern differs"
    assert torch.equal(got[~fin], want[~fin]), f"{name}: infinities differ"
    err = 0.0
    if fin.any():
        err = (got[fin] - want[fin]).abs().max().item()
        scale = max(1.0, want[fin].abs().max().item())
        assert err <= tol * scale, f"{name}: max abs diff {err:.3e} > {tol:.1e}*{scale:.2f}"
    return f"{name}: max_abs {err:.1e}"


def softmax_rows(masked):
    """Row softmax with the dead-row rule (no allowed key -> zeros)."""
    mx = masked.amax(dim=-1, keepdim=True)
    dead = torch.isinf(mx) & (mx < 0)
    e = torch.where(torch.isinf(masked) & (masked < 0), torch.zeros_like(masked),
                    torch.exp(masked - torch.where(dead, torch.zeros_like(mx), mx)))
    s = e.sum(-1, keepdim=True)
    w = torch.where(dead, torch.zeros_like(e), e / torch.where(dead, torch.ones_like(s), s))
    lse = torch.where(dead.squeeze(-1), torch.full_like(mx.squeeze(-1), NEG_INF),
                      (mx + torch.log(torch.where(dead, torch.ones_like(s), s))).squeeze(-1))
    return w, lse


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps)
    if w is not None:
        y = y * d(w)
    if b is not None:
        y = y + d(b)
    return y


def rms_norm(x, w, eps):
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    return y if w is None else y * d(w)


def norm(kind, x, nw, eps):
    if kind == "layernorm":
        return layer_norm(x, nw.get("weight"), nw.get("bias"), eps)
    assert nw.get("bias") is None
    return rms_norm(x, nw.get("weight"), eps)


def act(kind, x):
    if kind == "relu":
        return torch.clamp(x, min=0)
    if kind == "gelu":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    if kind == "gelu_tanh":
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if kind == "swiglu":  # silu of the gate
        return x / (1.0 + torch.exp(-x))
    raise ValueError(kind)


# ---------------------------------------------------------------------------
# Position transcriptions
# ---------------------------------------------------------------------------

def sinusoid(positions, dim, base=10000.0, layout="interleaved"):
    pos = torch.as_tensor(positions, dtype=D64)
    out = torch.zeros(len(pos), dim, dtype=D64)
    if layout == "interleaved":
        for c in range(dim):
            w = base ** (-2.0 * (c // 2) / dim)
            out[:, c] = torch.sin(pos * w) if c % 2 == 0 else torch.cos(pos * w)
    else:
        h = dim // 2
        for i in range(h):
            w = base ** (-2.0 * i / dim)
            out[:, i] = torch.sin(pos * w)
            out[:, h + i] = torch.cos(pos * w)
    return out


def rope_inv_freq(r, rope, seq_len):
    base = rope.get("theta", 10000.0)
    sc = rope.get("scaling", "none")
    f = rope.get("factor", 1.0)
    if sc == "ntk":
        base = base * f ** (r / (r - 2))
    elif sc == "dynamic_ntk":
        m = rope.get("max_positions", 2048)
        if seq_len > m:
            base = base * ((f * seq_len / m) - (f - 1)) ** (r / (r - 2))
    return 1.0 / (base ** (torch.arange(0, r, 2, dtype=D64) / r))


def rope_apply(x, pos, rope, seq_len):
    """x [B,H,L,D] float64; pos [B,L] int. Returns rotated copy."""
    D = x.shape[-1]
    r = rope.get("rotary_dim", 0) or D
    inv = rope_inv_freq(r, rope, seq_len)
    p = pos.to(D64)
    if rope.get("scaling", "none") == "linear":
        p = p / rope["factor"]
    ang = p[:, :, None] * inv[None, None, :]  # [B,L,r/2]
    cos, sin = torch.cos(ang)[:, None], torch.sin(ang)[:, None]  # [B,1,L,r/2]
    y = x.clone()
    h = r // 2
    if rope.get("layout", "half") == "half":
        a, b = x[..., :h], x[..., h:r]
        y[..., :h] = a * cos - b * sin
        y[..., h:r] = b * cos + a * sin
    else:
        a, b = x[..., 0:r:2], x[..., 1:r:2]
        y[..., 0:r:2] = a * cos - b * sin
        y[..., 1:r:2] = b * cos + a * sin
    return y, inv, cos[:, 0], sin[:, 0]


def t5_bucket(rel, bidirectional, num_buckets, max_distance):
    b = 0
    nb = num_buckets
    if bidirectional:
        nb //= 2
        b += nb if rel > 0 else 0
        n = abs(rel)
    else:
        n = -min(rel, 0)
    me = nb // 2
    if n < me:
        return b + n
    v = me + int(math.log(n / me) / math.log(max_distance / me) * (nb - me))
    return b + min(v, nb - 1)


def t5_bias(table, lq, lk, q_offset, t5):
    bk = torch.tensor([[t5_bucket(j - (q_offset + i), t5["bidirectional"], t5["num_buckets"],
                                  t5["max_distance"]) for j in range(lk)] for i in range(lq)])
    return bk, d(table)[bk].permute(2, 0, 1)  # [H,Lq,Lk]


def alibi_slopes_paper(n):
    """The ALiBi paper's reference code (ofirpress/attention_with_linear_biases)."""
    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio ** i for i in range(n)]
    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest) +
            alibi_slopes_paper(2 * closest)[0::2][:n - closest])


# ---------------------------------------------------------------------------
# Attention / block transcriptions (float64, explicit math)
# ---------------------------------------------------------------------------

def t_attention(xq, xkv, W, a, key_mask=None, pos=None, q_pos=None, st=None, pre=""):
    """Multi-head attention sublayer. xq [B,Lq,E], xkv [B,Lk,E] float64.
    pos/q_pos: absolute positions of keys / queries (int [B,L]) for RoPE, T5, causal."""
    B, Lq, E = xq.shape
    Lk = xkv.shape[1]
    H = a["num_heads"]
    Hkv = a.get("num_kv_heads", 0) or H
    Dh = a.get("head_dim", 0) or E // H
    q = lin(xq, W["w_q"], W.get("b_q")).view(B, Lq, H, Dh).transpose(1, 2)
    k = lin(xkv, W["w_k"], W.get("b_k")).view(B, Lk, Hkv, Dh).transpose(1, 2)
    v = lin(xkv, W["w_v"], W.get("b_v")).view(B, Lk, Hkv, Dh).transpose(1, 2)
    if pos is None:
        pos = torch.arange(Lk)[None].expand(B, Lk)
    if q_pos is None:
        q_pos = pos[:, Lk - Lq:]
    position = a.get("position", "none")
    if position == "rope":
        seq = int(max(pos.max().item(), q_pos.max().item())) + 1
        q = rope_apply(q, q_pos, a["rope"], seq)[0]
        k = rope_apply(k, pos, a["rope"], seq)[0]
    scale = a.get("scale", 1.0 / math.sqrt(Dh))
    kr = k.repeat_interleave(H // Hkv, dim=1)
    vr = v.repeat_interleave(H // Hkv, dim=1)
    scores = q @ kr.transpose(-1, -2)
    scaled = scores * scale
    add = torch.zeros(B, H, Lq, Lk, dtype=D64)
    qi = q_pos[:, None, :, None].expand(B, H, Lq, Lk)
    kj = pos[:, None, None, :].expand(B, H, Lq, Lk)
    if position == "alibi":
        sl = torch.tensor(alibi_slopes_paper(H), dtype=D64)[None, :, None, None]
        add = add - sl * (qi - kj).abs().to(D64)
    if position == "t5":
        t5 = a["t5"]
        tab = d(W["t5_table"])
        for b in range(B):
            for i in range(Lq):
                for j in range(Lk):
                    bk = t5_bucket(int(pos[b, j] - q_pos[b, i]), t5["bidirectional"],
                                   t5["num_buckets"], t5["max_distance"])
                    add[b, :, i, j] += tab[bk]
    allowed = torch.ones(B, H, Lq, Lk, dtype=torch.bool)
    if a.get("causal", "none") != "none":
        allowed &= kj <= qi
    if key_mask is not None:
        allowed &= key_mask[:, None, None, :]
    masked = torch.where(allowed, scaled + add, torch.full_like(scaled, NEG_INF))
    weights, lse = softmax_rows(masked)
    heads = weights @ vr
    concat = heads.transpose(1, 2).reshape(B, Lq, H * Dh)
    out = lin(concat, W["w_o"], W.get("b_o"))
    if st is not None:
        for n, t in (("q", q), ("k", k), ("v", v), ("scores", scores), ("scaled", scaled),
                     ("masked", masked), ("weights", weights), ("lse", lse), ("heads_out", heads),
                     ("concat", concat), ("attn_out", out)):
            st[pre + n] = t
    return out


ATTN_STAGES = ["q", "k", "v", "scores", "scaled", "masked", "weights", "lse", "heads_out",
               "concat", "attn_out"]
BLOCK_STAGES = ["attn_in"] + ATTN_STAGES + ["residual", "norm", "ffn_hidden", "ffn", "out"]
DEC_STAGES = (["self." + s for s in ["attn_in"] + ATTN_STAGES + ["residual", "norm"]] +
              ["cross." + s for s in ["attn_in"] + ATTN_STAGES + ["residual", "norm"]] +
              ["ffn_hidden", "ffn", "out"])


def t_ffn(x, W, kind, st=None, pre=""):
    up = lin(x, W["w_up"], W.get("b_up"))
    if kind == "swiglu":
        hidden = act("swiglu", lin(x, W["w_gate"], W.get("b_gate"))) * up
    else:
        hidden = act(kind, up)
    out = lin(hidden, W["w_down"], W.get("b_down"))
    if st is not None:
        st[pre + "ffn_hidden"] = hidden
    return out


def sub(W, prefix):
    return {k[len(prefix):]: v for k, v in W.items() if k.startswith(prefix)}


def t_block(x, W, cfg, key_mask=None, pos=None, st=None, pre=""):
    a = cfg["attn"]
    eps = cfg["norm_eps"]
    is_pre = cfg["placement"] == "pre"
    n1, n2 = sub(W, "norm1."), sub(W, "norm2.")
    a_in = norm(cfg["norm"], x, n1, eps) if is_pre else x
    att = t_attention(a_in, a_in, sub(W, "attn."), a, key_mask, pos, None, st, pre)
    res = x + att
    f_in = norm(cfg["norm"], res, n2 if is_pre else n1, eps)
    f = t_ffn(f_in, sub(W, "ffn."), cfg["act"], st, pre)
    out = res + f if is_pre else norm(cfg["norm"], f_in + f, n2, eps)
    if st is not None:
        st[pre + "attn_in"], st[pre + "residual"], st[pre + "norm"] = a_in, res, f_in
        st[pre + "ffn"], st[pre + "out"] = f, out
    return out


def t_decoder(x, mem, W, cfg, tgt_mask=None, mem_mask=None, st=None, pre=""):
    eps, is_pre, nk = cfg["norm_eps"], cfg["placement"] == "pre", cfg["norm"]
    n1, n2, n3 = sub(W, "norm1."), sub(W, "norm2."), sub(W, "norm3.")
    s_in = norm(nk, x, n1, eps) if is_pre else x
    sa = t_attention(s_in, s_in, sub(W, "self_attn."), cfg["self_attn"], tgt_mask, None, None,
                     st, pre + "self.")
    r1 = x + sa
    c_in = norm(nk, r1, n2 if is_pre else n1, eps)
    B, Ls = mem.shape[0], mem.shape[1]
    Lt = x.shape[1]
    ca = t_attention(c_in, mem, sub(W, "cross_attn."), cfg["cross_attn"], mem_mask,
                     torch.arange(Ls)[None].expand(B, Ls), torch.arange(Lt)[None].expand(B, Lt),
                     st, pre + "cross.")
    r2 = (r1 if is_pre else c_in) + ca
    f_in = norm(nk, r2, n3 if is_pre else n2, eps)
    f = t_ffn(f_in, sub(W, "ffn."), cfg["act"], st, pre)
    out = r2 + f if is_pre else norm(nk, f_in + f, n3, eps)
    if st is not None:
        st[pre + "self.attn_in"], st[pre + "self.residual"], st[pre + "self.norm"] = s_in, r1, c_in
        st[pre + "cross.attn_in"], st[pre + "cross.residual"], st[pre + "cross.norm"] = c_in, r2, f_in
        st[pre + "ffn"], st[pre + "out"] = f, out
    return out


# ---------------------------------------------------------------------------
# Weight factories
# ---------------------------------------------------------------------------

def attn_weights(g, E, a, bias=True, out_bias=None, prefix="attn."):
    H = a["num_heads"]
    Hkv = a.get("num_kv_heads", 0) or H
    Dh = a.get("head_dim", 0) or E // H
    W = {}
    W[prefix + "w_q"], bq = linear_w(g, H * Dh, E, bias)
    W[prefix + "w_k"], bk = linear_w(g, Hkv * Dh, E, bias)
    W[prefix + "w_v"], bv = linear_w(g, Hkv * Dh, E, bias)
    W[prefix + "w_o"], bo = linear_w(g, E, H * Dh, bias if out_bias is None else out_bias)
    for n, b in (("b_q", bq), ("b_k", bk), ("b_v", bv), ("b_o", bo)):
        if b is not None:
            W[prefix + n] = b
    if a.get("position") == "t5":
        W[prefix + "t5_table"] = randn(g, a["t5"]["num_buckets"], H, scale=0.5)
    return W


def norm_weights(g, E, kind, prefix, bias=True):
    W = {prefix + "weight": (1.0 + randn(g, E, scale=0.1).double()).float()}
    if kind == "layernorm" and bias:
        W[prefix + "bias"] = randn(g, E, scale=0.1)
    return W


def ffn_weights(g, E, Fd, kind, bias=True, prefix="ffn."):
    W = {}
    W[prefix + "w_up"], bu = linear_w(g, Fd, E, bias)
    if kind == "swiglu":
        W[prefix + "w_gate"], bg = linear_w(g, Fd, E, bias)
        if bg is not None:
            W[prefix + "b_gate"] = bg
    W[prefix + "w_down"], bd = linear_w(g, E, Fd, bias)
    if bu is not None:
        W[prefix + "b_up"], W[prefix + "b_down"] = bu, bd
    return W


def block_weights(g, E, Fd, cfg, bias=True, prefix=""):
    W = attn_weights(g, E, cfg["attn"], bias, prefix=prefix + "attn.")
    W.update(norm_weights(g, E, cfg["norm"], prefix + "norm1.", bias))
    W.update(norm_weights(g, E, cfg["norm"], prefix + "norm2.", bias))
    W.update(ffn_weights(g, E, Fd, cfg["act"], bias, prefix + "ffn."))
    return W


def key_mask_from_lens(lens, L):
    return torch.arange(L)[None, :] < torch.tensor(lens)[:, None]


# ---------------------------------------------------------------------------
# Cross-check helpers (independent libraries)
# ---------------------------------------------------------------------------

def load_params(module, W, pairs):
    """Copies d(W[ours]) into the parameter ``theirs`` (a dotted path below
    ``module``) for each (theirs, ours)."""
    with torch.no_grad():
        for theirs, ours in pairs:
            module.get_parameter(theirs).copy_(d(W[ours]))


def torch_mha_load(mha, W, p):
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([d(W[p + "w_q"]), d(W[p + "w_k"]), d(W[p + "w_v"])]))
        mha.in_proj_bias.copy_(torch.cat([d(W[p + "b_q"]), d(W[p + "b_k"]), d(W[p + "b_v"])]))
        mha.out_proj.weight.copy_(d(W[p + "w_o"]))
        mha.out_proj.bias.copy_(d(W[p + "b_o"]))


def torch_ln_load(ln, W, p):
    with torch.no_grad():
        ln.weight.copy_(d(W[p + "weight"]))
        ln.bias.copy_(d(W[p + "bias"]))


def torch_ffn_load(layer, W, p):
    with torch.no_grad():
        layer.linear1.weight.copy_(d(W[p + "w_up"]))
        layer.linear1.bias.copy_(d(W[p + "b_up"]))
        layer.linear2.weight.copy_(d(W[p + "w_down"]))
        layer.linear2.bias.copy_(d(W[p + "b_down"]))


def torch_act(kind):
    return {"relu": F.relu, "gelu": F.gelu,
            "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}[kind]


def torch_layer_options(cfg):
    """nn.TransformerEncoderLayer / DecoderLayer keywords of a block config."""
    return dict(dropout=0.0, activation=torch_act(cfg["act"]), layer_norm_eps=cfg["norm_eps"],
                batch_first=True, norm_first=cfg["placement"] == "pre", dtype=D64)


def torch_encoder_layer(E, H, Fd, cfg, W, p=""):
    layer = torch.nn.TransformerEncoderLayer(E, H, Fd, **torch_layer_options(cfg))
    torch_mha_load(layer.self_attn, W, p + "attn.")
    torch_ln_load(layer.norm1, W, p + "norm1.")
    torch_ln_load(layer.norm2, W, p + "norm2.")
    torch_ffn_load(layer, W, p + "ffn.")
    return layer.train(False)


def torch_decoder_layer(E, H, Fd, cfg, W, p=""):
    layer = torch.nn.TransformerDecoderLayer(E, H, Fd, **torch_layer_options(cfg))
    torch_mha_load(layer.self_attn, W, p + "self_attn.")
    torch_mha_load(layer.multihead_attn, W, p + "cross_attn.")
    for i in (1, 2, 3):
        torch_ln_load(getattr(layer, f"norm{i}"), W, p + f"norm{i}.")
    torch_ffn_load(layer, W, p + "ffn.")
    return layer.train(False)


def causal_float_mask(Lq, Lk):
    m = torch.zeros(Lq, Lk, dtype=D64)
    return m.masked_fill(torch.ones(Lq, Lk, dtype=torch.bool).triu(1 + Lk - Lq), NEG_INF)


def hf_default_f64():
    class _Ctx:
        def __enter__(self):
            self.old = torch.get_default_dtype()
            torch.set_default_dtype(D64)

        def __exit__(self, *a):
            torch.set_default_dtype(self.old)
    return _Ctx()


# ---------------------------------------------------------------------------
# Case builders: each returns (inputs, config, xchecks). `reference(kind,
# inputs, config)` computes the stages from the inputs and config alone.
# ---------------------------------------------------------------------------

def ref_sinusoidal(inp, c):
    pos = list(range(c["offset"], c["offset"] + c["length"]))
    return {"table": sinusoid(pos, c["dim"], c["base"], c["layout"])}


def build_sinusoidal(name, length, dim, offset, layout, base=10000.0):
    c = dict(length=length, dim=dim, offset=offset, base=base, layout=layout)
    st = ref_sinusoidal({}, c)
    xs = []
    pos = torch.arange(offset, offset + length, dtype=D64)[:, None]
    if layout == "interleaved":
        # PyTorch tutorial formulation (exp/log), float64.
        div = torch.exp(torch.arange(0, dim, 2, dtype=D64) * (-math.log(base) / dim))
        pe = torch.zeros(length, dim, dtype=D64)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div[: dim // 2])
        xs.append(close("torch_tutorial_pe", st["table"], pe, 1e-12))
    else:
        from transformers.models.transfo_xl.modeling_transfo_xl import PositionalEmbedding
        with hf_default_f64():
            pemb = PositionalEmbedding(dim)
        got = pemb(pos[:, 0])[:, 0, :]
        xs.append(close("hf_transfo_xl_PositionalEmbedding", st["table"], got, 1e-12))
        if base == 10000.0 and offset == 0:
            from transformers.models.gptj.modeling_gptj import create_sinusoidal_positions
            xs.append(close("hf_gptj_create_sinusoidal_positions(f32)", st["table"],
                            create_sinusoidal_positions(length, dim), 2e-5))
    return {}, c, xs


def ref_learned(inp, c):
    x, table = d(inp["x"]), d(inp["table"])
    B, L, _ = x.shape
    pid = inp.get("position_ids")
    pos = pid if pid is not None else (c["offset"] + torch.arange(L))[None].expand(B, L)
    return {"out": x * c["x_scale"] + table[pos]}


def build_learned(name, B, L, E, P, offset, with_ids):
    g = gen(name)
    inp = {"x": randn(g, B, L, E), "table": randn(g, P, E)}
    if with_ids:
        inp["position_ids"] = torch.randint(0, P, (B, L), generator=g)
    c = dict(offset=offset, x_scale=math.sqrt(E))
    st = ref_learned(inp, c)
    emb = torch.nn.Embedding(P, E, dtype=D64)
    with torch.no_grad():
        emb.weight.copy_(d(inp["table"]))
    pos = inp.get("position_ids", (offset + torch.arange(L))[None].expand(B, L))
    want = d(inp["x"]) * math.sqrt(E) + emb(pos)
    return inp, c, [close("torch_nn_Embedding", st["out"], want, 1e-13)]


def ref_rope(inp, c):
    q, k = d(inp["q"]), d(inp["k"])
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    qp = inp.get("q_position_ids", (c["q_offset"] + torch.arange(Lq))[None].expand(B, Lq))
    kp = inp.get("k_position_ids", (c["k_offset"] + torch.arange(Lk))[None].expand(B, Lk))
    seq = c["seq_len"] or max(c["q_offset"] + Lq, c["k_offset"] + Lk)
    qr, inv, _, _ = rope_apply(q, qp, c, seq)
    kr = rope_apply(k, kp, c, seq)[0]
    Hkv = k.shape[1]
    scores = qr @ kr.repeat_interleave(H // Hkv, dim=1).transpose(-1, -2)
    return {"inv_freq": inv, "q_rot": qr, "k_rot": kr, "scores": scores}


def build_rope(name, B, H, Hkv, Lq, Lk, D, layout="half", theta=10000.0, rotary_dim=0,
               scaling="none", factor=1.0, max_positions=2048, seq_len=0, q_offset=0,
               k_offset=0, position_ids=False):
    g = gen(name)
    inp = {"q": randn(g, B, H, Lq, D), "k": randn(g, B, Hkv, Lk, D)}
    if position_ids:
        assert Lq == Lk
        start = torch.randint(0, 5, (B, 1), generator=g)
        inp["q_position_ids"] = start + torch.arange(Lq)[None]
        inp["k_position_ids"] = inp["q_position_ids"].clone()
    c = dict(layout=layout, theta=theta, rotary_dim=rotary_dim, scaling=scaling, factor=factor,
             max_positions=max_positions, seq_len=seq_len, q_offset=q_offset, k_offset=k_offset)
    st = ref_rope(inp, c)
    xs = []
    r = rotary_dim or D
    seq = seq_len or max(q_offset + Lq, k_offset + Lk)
    inv = st["inv_freq"]
    q, k = d(inp["q"]), d(inp["k"])
    qp = inp.get("q_position_ids", (q_offset + torch.arange(Lq))[None].expand(B, Lq))
    kp = inp.get("k_position_ids", (k_offset + torch.arange(Lk))[None].expand(B, Lk))
    npos = int(max(qp.max(), kp.max())) + 1
    t = torch.arange(npos, dtype=D64)
    if scaling == "linear":
        t = t / factor
    freqs = torch.outer(t, inv)
    if layout == "half":
        from transformers.models.llama import modeling_llama as ml
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        # HF applies one position_ids to q and k; do each with its own ids.
        qh, _ = ml.apply_rotary_pos_emb(q[..., :r], q[..., :r], cos, sin, qp)
        kh, _ = ml.apply_rotary_pos_emb(k[..., :r], k[..., :r], cos, sin, kp)
        xs.append(close("hf_llama_apply_rotary_pos_emb(q)", st["q_rot"][..., :r], qh, 1e-12))
        xs.append(close("hf_llama_apply_rotary_pos_emb(k)", st["k_rot"][..., :r], kh, 1e-12))
        # HF rotary modules (float32 frequencies).
        if scaling in ("none", "linear", "dynamic_ntk", "ntk"):
            if scaling == "none":
                mod = ml.LlamaRotaryEmbedding(r, max_position_embeddings=max_positions, base=theta)
                hseq = npos
            elif scaling == "linear":
                mod = ml.LlamaLinearScalingRotaryEmbedding(r, max_positions, theta, scaling_factor=factor)
                hseq = npos
            elif scaling == "dynamic_ntk":
                mod = ml.LlamaDynamicNTKScalingRotaryEmbedding(r, max_positions, theta,
                                                               scaling_factor=factor)
                hseq = seq
            else:
                # Static NTK-aware = HF dynamic NTK at seq s with f*s/m - (f-1) = f.
                s_eq = max_positions * (2 * factor - 1) / factor
                assert s_eq == int(s_eq) and s_eq > max_positions
                mod = ml.LlamaDynamicNTKScalingRotaryEmbedding(r, max_positions, theta,
                                                               scaling_factor=factor)
                hseq = int(s_eq)
            hc, hs = mod(torch.zeros(1, dtype=D64), seq_len=max(hseq, npos))
            xs.append(close(f"hf_llama_rotary_{scaling}(f32 freq)", cos, hc[:npos].to(D64), 2e-5))
            xs.append(close(f"hf_llama_rotary_{scaling}_sin(f32 freq)", sin, hs[:npos].to(D64), 2e-5))
    else:
        from transformers.models.gptj import modeling_gptj as mg
        sin_t, cos_t = freqs.sin(), freqs.cos()
        for nm, x, pp, key in (("q", q, qp, "q_rot"), ("k", k, kp, "k_rot")):
            xt = x[..., :r].transpose(1, 2)  # GPT-J layout [B,L,H,D]
            got = mg.apply_rotary_pos_emb(xt, sin_t[pp], cos_t[pp]).transpose(1, 2)
            xs.append(close(f"hf_gptj_apply_rotary_pos_emb({nm})", st[key][..., :r], got, 1e-12))
        if scaling == "none" and theta == 10000.0:
            tab = mg.create_sinusoidal_positions(npos, r).to(D64)
            xs.append(close("hf_gptj_create_sinusoidal_positions(f32)",
                            torch.cat([sin_t, cos_t], 1), tab, 2e-5))
    if r < D:
        xs.append(close("pass_through_dims", st["q_rot"][..., r:], q[..., r:], 0.0))
    return inp, c, xs


def ref_t5(inp, c):
    bk, bias = t5_bias(inp["table"], c["q_len"], c["kv_len"], c["q_offset"], c)
    return {"buckets": bk.to(D64), "bias": bias}


def build_t5(name, H, q_len, kv_len, q_offset, bidirectional, num_buckets, max_distance):
    g = gen(name)
    inp = {"table": randn(g, num_buckets, H)}
    c = dict(q_len=q_len, kv_len=kv_len, q_offset=q_offset, bidirectional=bidirectional,
             num_buckets=num_buckets, max_distance=max_distance)
    st = ref_t5(inp, c)
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention
    rel = (torch.arange(kv_len)[None, :] - (q_offset + torch.arange(q_len))[:, None])
    hb = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional,
                                               num_buckets=num_buckets, max_distance=max_distance)
    xs = [close("hf_t5_relative_position_bucket", st["buckets"], hb.to(D64), 0.0)]
    cfgt = T5Config(d_model=8, d_kv=2, num_heads=H, relative_attention_num_buckets=num_buckets,
                    relative_attention_max_distance=max_distance, is_decoder=not bidirectional)
    with hf_default_f64():
        att = T5Attention(cfgt, has_relative_attention_bias=True).double()
    with torch.no_grad():
        att.relative_attention_bias.weight.copy_(d(inp["table"]))
    full = att.compute_bias(q_offset + q_len, kv_len)[0]  # [H, q_offset+q_len, kv_len]
    xs.append(close("hf_t5_compute_bias", st["bias"], full[:, q_offset:, :], 1e-12))
    return inp, c, xs


def ref_block(inp, c):
    W = {k: v for k, v in inp.items() if k not in ("x", "x_past", "key_mask")}
    x = d(inp["x"])
    km = inp.get("key_mask")
    st = {}
    if "x_past" in inp:
        # No cache here: run the whole sequence and keep the new rows.
        full = torch.cat([d(inp["x_past"]), x], 1)
        P, L = inp["x_past"].shape[1], x.shape[1]
        t_block(full, W, c, km, None, st)
        for n in list(st):
            if n in ("k", "v"):
                continue
            if n in ("q", "scores", "scaled", "masked", "weights", "lse", "heads_out"):
                st[n] = st[n][:, :, P:]
            else:
                st[n] = st[n][:, P:]
        del P, L
    else:
        t_block(x, W, c, km, None, st)
    return st


def block_cfg(H, act_kind, norm_kind, placement, causal="none", position="none", Hkv=0,
              rope=None, t5=None, scale=None, eps=1e-5):
    a = dict(num_heads=H, causal=causal, position=position)
    if Hkv:
        a["num_kv_heads"] = Hkv
    a.update(given(rope=rope, t5=t5, scale=scale))
    return dict(attn=a, act=act_kind, norm=norm_kind, norm_eps=eps, placement=placement)


def build_block(name, B, L, E, Fd, cfg, bias=True, lens=None, past=0, xcheck=None):
    g = gen(name)
    W = block_weights(g, E, Fd, cfg, bias)
    inp = dict(W)
    inp["x"] = randn(g, B, L, E)
    if past:
        inp["x_past"] = randn(g, B, past, E)
    if lens is not None:
        inp["key_mask"] = key_mask_from_lens(lens, past + L)
    st = ref_block(inp, cfg)
    xs = xcheck(inp, cfg, st) if xcheck else []
    return inp, cfg, xs


def xcheck_torch_encoder(inp, cfg, st, float_mask=None):
    """torch.nn.TransformerEncoderLayer (+ MHA weights)."""
    W = inp
    x = d(inp["x"])
    B, L, E = x.shape
    H = cfg["attn"]["num_heads"]
    layer = torch_encoder_layer(E, H, W["ffn.w_up"].shape[0], cfg, W)
    kpm = None if "key_mask" not in inp else ~inp["key_mask"]
    mask = float_mask
    if mask is None and cfg["attn"]["causal"] != "none":
        mask = causal_float_mask(L, L)
    with torch.enable_grad():  # keeps torch off the fused fast path
        out = layer(x, src_mask=mask, src_key_padding_mask=kpm)
        a_in = layer.norm1(x) if cfg["placement"] == "pre" else x
        _, w = layer.self_attn(a_in, a_in, a_in, key_padding_mask=kpm, attn_mask=mask,
                               need_weights=True, average_attn_weights=False)
    return [close("torch_TransformerEncoderLayer", st["out"], out.detach(), 1e-10),
            close("torch_MultiheadAttention_weights", st["weights"], w.detach(), 1e-10)]


def xcheck_alibi(inp, cfg, st):
    x = d(inp["x"])
    B, L, E = x.shape
    H = cfg["attn"]["num_heads"]
    sl = torch.tensor(alibi_slopes_paper(H), dtype=D64)
    i = torch.arange(L)[:, None]
    j = torch.arange(L)[None, :]
    bias = -sl[:, None, None] * (i - j).abs().to(D64)[None]  # [H,L,L]
    bias = bias + causal_float_mask(L, L)[None]
    m3 = bias[None].expand(B, H, L, L).reshape(B * H, L, L)
    xs = xcheck_torch_encoder(inp, cfg, st, float_mask=m3)
    # Slopes: the core's closed form vs the paper's code.
    n = 2 ** math.floor(math.log2(H))
    closed = [2 ** (-8 * (k + 1) / n) for k in range(n)] + \
             [2 ** (-8 * (k + 1) / (2 * n)) for k in range(0, 2 * (H - n), 2)]
    xs.append(close("alibi_slopes_paper_code", torch.tensor(closed), sl, 1e-15))
    return xs


def hf_llama_layer(cfg, W, E, Fd):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
    a = cfg["attn"]
    lc = LlamaConfig(hidden_size=E, intermediate_size=Fd, num_attention_heads=a["num_heads"],
                     num_key_value_heads=a.get("num_kv_heads", 0) or a["num_heads"],
                     rms_norm_eps=cfg["norm_eps"], rope_theta=a["rope"]["theta"],
                     max_position_embeddings=64, attention_bias=False)
    with hf_default_f64():
        layer = LlamaDecoderLayer(lc).double().train(False)
    load_params(layer, W, [(f"self_attn.{m}_proj.weight", f"attn.w_{m}") for m in "qkvo"] +
                [(f"mlp.{m}_proj.weight", f"ffn.w_{m}") for m in ("gate", "up", "down")] +
                [("input_layernorm.weight", "norm1.weight"),
                 ("post_attention_layernorm.weight", "norm2.weight")])
    return layer


def xcheck_llama(inp, cfg, st):
    x = d(inp["x"])
    B, L, E = x.shape
    Fd = inp["ffn.w_up"].shape[0]
    layer = hf_llama_layer(cfg, inp, E, Fd)
    xs = []
    # torch references of the Llama parts (exact).
    rn = torch.nn.RMSNorm(E, eps=cfg["norm_eps"], dtype=D64)
    with torch.no_grad():
        rn.weight.copy_(d(inp["norm1.weight"]))
    xs.append(close("torch_nn_RMSNorm", st["attn_in"], rn(x if "x_past" not in inp else x), 1e-12))
    f_in = st["norm"]
    sw = F.linear(F.silu(F.linear(f_in, d(inp["ffn.w_gate"]))) * F.linear(f_in, d(inp["ffn.w_up"])),
                  d(inp["ffn.w_down"]))
    xs.append(close("torch_silu_swiglu", st["ffn"], sw, 1e-12))
    with torch.no_grad():
        if "x_past" not in inp:
            mask = causal_float_mask(L, L)[None, None].expand(B, 1, L, L)
            out, w = layer(x, attention_mask=mask, position_ids=torch.arange(L)[None].expand(B, L),
                           output_attentions=True)
            xs.append(close("hf_LlamaDecoderLayer(f32 softmax/rmsnorm inside)", st["out"], out, 2e-5))
            xs.append(close("hf_LlamaDecoderLayer_attn_weights", st["weights"], w, 2e-5))
        else:
            xp = d(inp["x_past"])
            P = xp.shape[1]
            _, present = layer(xp, attention_mask=causal_float_mask(P, P)[None, None].expand(B, 1, P, P),
                               position_ids=torch.arange(P)[None].expand(B, P), use_cache=True)
            mask = causal_float_mask(L, P + L)[None, None].expand(B, 1, L, P + L)
            out, w, _ = layer(x, attention_mask=mask, past_key_value=present,
                              position_ids=(P + torch.arange(L))[None].expand(B, L),
                              output_attentions=True, use_cache=True)
            xs.append(close("hf_LlamaDecoderLayer_kv_cache(f32 inside)", st["out"], out, 2e-5))
            xs.append(close("hf_LlamaDecoderLayer_kv_cache_weights", st["weights"], w, 2e-5))
    return xs


def xcheck_gptj_rope(inp, cfg, st):
    from transformers.models.gptj import modeling_gptj as mg
    a = cfg["attn"]
    rope = a["rope"]
    x = st["attn_in"]
    B, L, E = x.shape
    H = a["num_heads"]
    Dh = E // H
    r = rope["rotary_dim"]
    q = lin(x, inp["attn.w_q"]).view(B, L, H, Dh)
    k = lin(x, inp["attn.w_k"]).view(B, L, H, Dh)
    inv = 1.0 / (rope["theta"] ** (torch.arange(0, r, 2, dtype=D64) / r))
    fr = torch.outer(torch.arange(L, dtype=D64), inv)
    pos = torch.arange(L)[None].expand(B, L)
    xs = []
    for nm, t in (("q", q), ("k", k)):
        rot = mg.apply_rotary_pos_emb(t[..., :r], fr.sin()[pos], fr.cos()[pos])
        full = torch.cat([rot, t[..., r:]], -1).transpose(1, 2)
        xs.append(close(f"hf_gptj_rope_{nm}", st[nm], full, 1e-12))
    # The rest of the block (pre-norm LayerNorm, gelu_tanh) against torch with
    # the rotated q/k fed through F.scaled_dot_product_attention.
    sd = F.scaled_dot_product_attention(st["q"], st["k"], st["v"], is_causal=True)
    xs.append(close("torch_sdpa_heads_out", st["heads_out"], sd, 1e-12))
    return xs


def hf_t5_layers(cfg, W, E, Fd, decoder):
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5LayerFF, T5LayerSelfAttention
    a = cfg["attn"]
    H = a["num_heads"]
    tc = T5Config(d_model=E, d_kv=E // H, d_ff=Fd, num_heads=H, dropout_rate=0.0,
                  relative_attention_num_buckets=a["t5"]["num_buckets"],
                  relative_attention_max_distance=a["t5"]["max_distance"],
                  layer_norm_epsilon=cfg["norm_eps"], is_decoder=decoder,
                  feed_forward_proj="relu")
    with hf_default_f64():
        sa = T5LayerSelfAttention(tc, has_relative_attention_bias=True).double().train(False)
        ff = T5LayerFF(tc).double().train(False)
    load_params(sa, W, [(f"SelfAttention.{m}.weight", f"attn.w_{m}") for m in "qkvo"] +
                [("SelfAttention.relative_attention_bias.weight", "attn.t5_table"),
                 ("layer_norm.weight", "norm1.weight")])
    load_params(ff, W, [("layer_norm.weight", "norm2.weight"),
                        ("DenseReluDense.wi.weight", "ffn.w_up"),
                        ("DenseReluDense.wo.weight", "ffn.w_down")])
    return sa, ff


def xcheck_t5(inp, cfg, st):
    x = d(inp["x"])
    B, L, E = x.shape
    decoder = not cfg["attn"]["t5"]["bidirectional"]
    sa, ff = hf_t5_layers(cfg, inp, E, inp["ffn.w_up"].shape[0], decoder)
    fmin = torch.finfo(D64).min
    mask = torch.zeros(B, 1, L, L, dtype=D64)
    if "key_mask" in inp:
        mask = mask.masked_fill(~inp["key_mask"][:, None, None, :], fmin)
    if decoder:
        mask = mask.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1)[None, None], fmin)
    with torch.no_grad():
        h, _, _, w = sa(x, attention_mask=mask, output_attentions=True)
        out = ff(h)
    return [close("hf_T5LayerSelfAttention+T5LayerFF(f32 variance/softmax inside)", st["out"], out, 2e-5),
            close("hf_T5Attention_weights", st["weights"], w, 2e-5),
            close("torch_nn_RMSNorm", st["attn_in"],
                  torch.nn.functional.rms_norm(x, (E,), d(inp["norm1.weight"]), cfg["norm_eps"]), 1e-12)]


def ref_decoder(inp, c):
    W = {k: v for k, v in inp.items() if k not in ("x", "memory", "tgt_key_mask", "memory_key_mask")}
    st = {}
    t_decoder(d(inp["x"]), d(inp["memory"]), W, c, inp.get("tgt_key_mask"),
              inp.get("memory_key_mask"), st)
    return st


def build_decoder(name, B, Lt, Ls, E, H, Fd, act_kind, placement, tgt_lens, src_lens):
    g = gen(name)
    c = dict(self_attn=dict(num_heads=H, causal="top_left"), cross_attn=dict(num_heads=H),
             act=act_kind, norm="layernorm", norm_eps=1e-5, placement=placement)
    W = attn_weights(g, E, c["self_attn"], prefix="self_attn.")
    W.update(attn_weights(g, E, c["cross_attn"], prefix="cross_attn."))
    for i in (1, 2, 3):
        W.update(norm_weights(g, E, "layernorm", f"norm{i}."))
    W.update(ffn_weights(g, E, Fd, act_kind))
    inp = dict(W)
    inp["x"] = randn(g, B, Lt, E)
    inp["memory"] = randn(g, B, Ls, E)
    inp["tgt_key_mask"] = key_mask_from_lens(tgt_lens, Lt)
    inp["memory_key_mask"] = key_mask_from_lens(src_lens, Ls)
    st = ref_decoder(inp, c)
    layer = torch_decoder_layer(E, H, Fd, c, W)
    with torch.enable_grad():
        out = layer(d(inp["x"]), d(inp["memory"]), tgt_mask=causal_float_mask(Lt, Lt),
                    tgt_key_padding_mask=~inp["tgt_key_mask"],
                    memory_key_padding_mask=~inp["memory_key_mask"])
        c_in = st["self.norm"]
        _, w = layer.multihead_attn(c_in, d(inp["memory"]), d(inp["memory"]),
                                    key_padding_mask=~inp["memory_key_mask"], need_weights=True,
                                    average_attn_weights=False)
    xs = [close("torch_TransformerDecoderLayer", st["out"], out.detach(), 1e-10),
          close("torch_MultiheadAttention_cross_weights", st["cross.weights"], w.detach(), 1e-10)]
    return inp, c, xs


def ref_transformer(inp, c):
    E = c["d_model"]
    src, tgt = inp["src_ids"], inp["tgt_ids"]
    B, Ls = src.shape
    Lt = tgt.shape[1]
    pe = sinusoid(list(range(max(Ls, Lt))), E)
    sc = math.sqrt(E) if c["scale_embeddings"] else 1.0
    st = {}
    x = d(inp["src_embed"])[src] * sc + pe[:Ls]
    st["src_in"] = x
    bc = dict(attn=dict(num_heads=c["num_heads"], causal="none"), act=c["act"], norm="layernorm",
              norm_eps=c["norm_eps"], placement=c["placement"])
    for i in range(c["num_encoder_layers"]):
        x = t_block(x, sub(inp, f"enc.{i}."), bc, inp.get("src_key_mask"), None, st, f"enc.{i}.")
    mem = layer_norm(x, inp["enc_norm.weight"], inp["enc_norm.bias"], c["norm_eps"])
    st["memory"] = mem
    y = d(inp["tgt_embed"])[tgt] * sc + pe[:Lt]
    st["tgt_in"] = y
    dc = dict(self_attn=dict(num_heads=c["num_heads"], causal="top_left"),
              cross_attn=dict(num_heads=c["num_heads"]), act=c["act"], norm="layernorm",
              norm_eps=c["norm_eps"], placement=c["placement"])
    for i in range(c["num_decoder_layers"]):
        y = t_decoder(y, mem, sub(inp, f"dec.{i}."), dc, inp.get("tgt_key_mask"),
                      inp.get("src_key_mask"), st, f"dec.{i}.")
    out = layer_norm(y, inp["dec_norm.weight"], inp["dec_norm.bias"], c["norm_eps"])
    st["dec_out"] = out
    st["logits"] = lin(out, inp["generator.weight"], inp["generator.bias"])
    return st


def build_transformer(name, B, Ls, Lt, E, H, Fd, N, act_kind, placement, src_lens, tgt_lens,
                      Vs=11, Vt=13):
    g = gen(name)
    c = dict(d_model=E, num_heads=H, ffn_dim=Fd, num_encoder_layers=N, num_decoder_layers=N,
             act=act_kind, placement=placement, norm_eps=1e-5, scale_embeddings=True)
    inp = {"src_embed": randn(g, Vs, E, scale=E ** -0.5), "tgt_embed": randn(g, Vt, E, scale=E ** -0.5)}
    bc = dict(attn=dict(num_heads=H), act=act_kind, norm="layernorm")
    for i in range(N):
        inp.update(block_weights(g, E, Fd, bc, True, f"enc.{i}."))
    for i in range(N):
        p = f"dec.{i}."
        inp.update(attn_weights(g, E, dict(num_heads=H), prefix=p + "self_attn."))
        inp.update(attn_weights(g, E, dict(num_heads=H), prefix=p + "cross_attn."))
        for k in (1, 2, 3):
            inp.update(norm_weights(g, E, "layernorm", f"{p}norm{k}."))
        inp.update(ffn_weights(g, E, Fd, act_kind, True, p + "ffn."))
    inp.update(norm_weights(g, E, "layernorm", "enc_norm."))
    inp.update(norm_weights(g, E, "layernorm", "dec_norm."))
    inp["generator.weight"], inp["generator.bias"] = linear_w(g, Vt, E)
    inp["src_ids"] = torch.randint(1, Vs, (B, Ls), generator=g)
    inp["tgt_ids"] = torch.randint(1, Vt, (B, Lt), generator=g)
    inp["src_key_mask"] = key_mask_from_lens(src_lens, Ls)
    inp["tgt_key_mask"] = key_mask_from_lens(tgt_lens, Lt)
    inp["src_ids"] = torch.where(inp["src_key_mask"], inp["src_ids"], 0)  # pad id 0
    inp["tgt_ids"] = torch.where(inp["tgt_key_mask"], inp["tgt_ids"], 0)
    st = ref_transformer(inp, c)
    # torch.nn.Transformer on the same weights.
    tr = torch.nn.Transformer(d_model=E, nhead=H, num_encoder_layers=N, num_decoder_layers=N,
                              dim_feedforward=Fd, dropout=0.0, activation=torch_act(act_kind),
                              batch_first=True, norm_first=placement == "pre", dtype=D64).train(False)
    cfg_l = dict(act=act_kind, norm_eps=1e-5, placement=placement)
    with torch.no_grad():
        for i in range(N):
            le = tr.encoder.layers[i]
            torch_mha_load(le.self_attn, inp, f"enc.{i}.attn.")
            torch_ln_load(le.norm1, inp, f"enc.{i}.norm1.")
            torch_ln_load(le.norm2, inp, f"enc.{i}.norm2.")
            torch_ffn_load(le, inp, f"enc.{i}.ffn.")
            ld = tr.decoder.layers[i]
            torch_mha_load(ld.self_attn, inp, f"dec.{i}.self_attn.")
            torch_mha_load(ld.multihead_attn, inp, f"dec.{i}.cross_attn.")
            for k in (1, 2, 3):
                torch_ln_load(getattr(ld, f"norm{k}"), inp, f"dec.{i}.norm{k}.")
            torch_ffn_load(ld, inp, f"dec.{i}.ffn.")
        torch_ln_load(tr.encoder.norm, inp, "enc_norm.")
        torch_ln_load(tr.decoder.norm, inp, "dec_norm.")
    del cfg_l
    pe = sinusoid(list(range(max(Ls, Lt))), E)
    semb = torch.nn.Embedding(Vs, E, dtype=D64)
    temb = torch.nn.Embedding(Vt, E, dtype=D64)
    with torch.no_grad():
        semb.weight.copy_(d(inp["src_embed"]))
        temb.weight.copy_(d(inp["tgt_embed"]))
    with torch.enable_grad():
        src_x = semb(inp["src_ids"]) * math.sqrt(E) + pe[:Ls]
        tgt_x = temb(inp["tgt_ids"]) * math.sqrt(E) + pe[:Lt]
        out = tr(src_x, tgt_x, tgt_mask=tr.generate_square_subsequent_mask(Lt, dtype=D64),
                 src_key_padding_mask=~inp["src_key_mask"], tgt_key_padding_mask=~inp["tgt_key_mask"],
                 memory_key_padding_mask=~inp["src_key_mask"])
        mem = tr.encoder(src_x, src_key_padding_mask=~inp["src_key_mask"])
    xs = [close("torch_nn_Transformer", st["dec_out"], out.detach(), 1e-10),
          close("torch_nn_TransformerEncoder(memory)", st["memory"], mem.detach(), 1e-10),
          close("torch_tutorial_sinusoidal", pe, ref_sinusoidal({}, dict(
              length=max(Ls, Lt), dim=E, offset=0, base=10000.0, layout="interleaved"))["table"], 0.0)]
    return inp, c, xs


def ref_align(inp, c):
    s, h = inp["s"].double().numpy(), inp["h"].double().numpy()
    B, T, Ds = s.shape
    S = h.shape[1]
    km = inp["key_mask"].numpy() if "key_mask" in inp else np.ones((B, S), bool)
    e = np.zeros((B, T, S))
    for b in range(B):
        for t in range(T):
            for j in range(S):
                if c["score"] == "additive":
                    Ws, Wh = inp["w_s"].double().numpy(), inp["w_h"].double().numpy()
                    bb = inp["b"].double().numpy() if "b" in inp else 0.0
                    v = inp["v"].double().numpy()
                    e[b, t, j] = v @ np.tanh(Ws @ s[b, t] + Wh @ h[b, j] + bb)
                elif c["score"] == "dot":
                    e[b, t, j] = s[b, t] @ h[b, j]
                else:
                    e[b, t, j] = s[b, t] @ inp["w_a"].double().numpy() @ h[b, j]
    masked = np.where(km[:, None, :], e, -np.inf)
    a = np.zeros_like(e)
    for b in range(B):
        for t in range(T):
            row = masked[b, t]
            if np.all(np.isneginf(row)):
                continue
            z = np.exp(row - row.max())
            a[b, t] = z / z.sum()
    ctx = np.einsum("bts,bsd->btd", a, h)
    return {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in
            (("energy", e), ("masked", masked), ("alignment", a), ("context", ctx))}


def build_align(name, score, B=2, T=3, S=6, Ds=5, Dh=8, A=9, src_lens=(6, 4)):
    g = gen(name)
    # RNN-style states: a bidirectional GRU encoder (Bahdanau) and a GRU decoder.
    torch.manual_seed(zlib.crc32(name.encode()))
    enc = torch.nn.GRU(4, Dh // 2, batch_first=True, bidirectional=True, dtype=D64)
    dec = torch.nn.GRU(3, Ds, batch_first=True, dtype=D64)
    with torch.no_grad():
        h = enc(d(randn(g, B, S, 4)))[0].float()
        s = dec(d(randn(g, B, T, 3)))[0].float()
    inp = {"s": s, "h": h, "key_mask": key_mask_from_lens(list(src_lens), S)}
    if score == "additive":
        inp["w_s"], inp["b"] = linear_w(g, A, Ds)
        inp["w_h"], _ = linear_w(g, A, Dh, False)
        inp["v"] = randn(g, A, scale=A ** -0.5)
    elif score == "general":
        inp["w_a"] = randn(g, Ds, Dh, scale=Dh ** -0.5)
    c = dict(score=score)
    st = ref_align(inp, c)
    # Second formulation in torch (batched, masked_fill + softmax).
    sd, hd = d(inp["s"]), d(inp["h"])
    if score == "additive":
        e = torch.tanh((sd @ d(inp["w_s"]).T + d(inp["b"]))[:, :, None, :] +
                       (hd @ d(inp["w_h"]).T)[:, None, :, :]) @ d(inp["v"])
    elif score == "dot":
        e = sd @ hd.transpose(1, 2)
    else:
        e = sd @ d(inp["w_a"]) @ hd.transpose(1, 2)
    a = torch.softmax(e.masked_fill(~inp["key_mask"][:, None, :], NEG_INF), -1)
    xs = [close("torch_energy", st["energy"], e, 1e-12),
          close("torch_softmax_alignment", st["alignment"], a, 1e-12),
          close("torch_bmm_context", st["context"], a @ hd, 1e-12)]
    return inp, c, xs


# ---- Transformer-XL ---------------------------------------------------------

def rel_shift(x):
    """The paper's trick, on [..., Lq, Lk]."""
    *lead, Lq, Lk = x.shape
    pad = torch.zeros(*lead, Lq, 1, dtype=x.dtype)
    xp = torch.cat([pad, x], -1).reshape(*lead, Lk + 1, Lq)
    return xp[..., 1:, :].reshape(*lead, Lq, Lk)


def t_txl_layer(x, mem, W, c, st, pre):
    B, L, E = x.shape
    M = mem.shape[1]
    K = M + L
    H, Dh = c["num_heads"], c["head_dim"]
    HD = H * Dh
    cat = torch.cat([mem, x], 1)
    cat_in = layer_norm(cat, W["ln_attn.weight"], W["ln_attn.bias"], c["norm_eps"]) if c["pre_lnorm"] else cat
    qkv = lin(cat_in, W["w_qkv"])
    q = qkv[:, M:, :HD].reshape(B, L, H, Dh).transpose(1, 2)
    k = qkv[:, :, HD:2 * HD].reshape(B, K, H, Dh).transpose(1, 2)
    v = qkv[:, :, 2 * HD:].reshape(B, K, H, Dh).transpose(1, 2)
    pos = torch.arange(K - 1, -1, -1, dtype=D64)
    if c["clamp_len"] > 0:
        pos = pos.clamp(max=c["clamp_len"])
    R = sinusoid(pos, E, layout="concat")
    r = lin(R, W["w_r"]).reshape(K, H, Dh).transpose(0, 1)  # [H,K,Dh]
    u, vb = d(W["r_w_bias"]), d(W["r_r_bias"])
    ac = (q + u[None, :, None, :]) @ k.transpose(-1, -2)
    bd_raw = (q + vb[None, :, None, :]) @ r.transpose(-1, -2)[None]
    bd = rel_shift(bd_raw)
    scores = ac + bd
    scale = 1.0 / math.sqrt(Dh)
    scaled = scores * scale
    i = torch.arange(L)[:, None]
    j = torch.arange(K)[None, :]
    visible = j <= i + M
    if c["same_length"]:
        mask_len = K - c["mem_len"]
        shift = L - mask_len if mask_len > 0 else L
        visible &= ~(j - i <= -shift)
    masked = torch.where(visible[None, None], scaled, torch.full_like(scaled, NEG_INF))
    weights, lse = softmax_rows(masked)
    heads = weights @ v
    concat = heads.transpose(1, 2).reshape(B, L, HD)
    ao = lin(concat, W["w_o"])
    res = x + ao
    hstate = res if c["pre_lnorm"] else layer_norm(res, W["ln_attn.weight"], W["ln_attn.bias"], c["norm_eps"])
    f_in = layer_norm(hstate, W["ln_ff.weight"], W["ln_ff.bias"], c["norm_eps"]) if c["pre_lnorm"] else hstate
    hid = torch.clamp(lin(f_in, W["w_ff1"], W["b_ff1"]), min=0)
    ff = lin(hid, W["w_ff2"], W["b_ff2"])
    out = hstate + ff
    if not c["pre_lnorm"]:
        out = layer_norm(out, W["ln_ff.weight"], W["ln_ff.bias"], c["norm_eps"])
    for n, t in (("attn_in", cat_in), ("q", q), ("k", k), ("v", v), ("r", r), ("ac", ac),
                 ("bd_raw", bd_raw), ("bd", bd), ("scores", scores), ("scaled", scaled),
                 ("masked", masked), ("weights", weights), ("lse", lse), ("heads_out", heads),
                 ("concat", concat), ("attn_out", ao), ("residual", res), ("norm", f_in),
                 ("ffn_hidden", hid), ("ffn", ff), ("out", out)):
        st[pre + n] = t
    return out


TXL_LAYER_STAGES = ["attn_in", "q", "k", "v", "r", "ac", "bd_raw", "bd", "scores", "scaled",
                    "masked", "weights", "lse", "heads_out", "concat", "attn_out", "residual",
                    "norm", "ffn_hidden", "ffn", "out"]


def ref_txl(inp, c):
    st = {}
    n = c["num_layers"]
    E = c["d_model"]
    mems = None
    for s in range(c["num_segments"]):
        x = d(inp[f"seg.{s}"])
        B, L, _ = x.shape
        M = 0 if mems is None else mems[0].shape[1]
        pos = torch.arange(M + L - 1, -1, -1, dtype=D64)
        if c["clamp_len"] > 0:
            pos = pos.clamp(max=c["clamp_len"])
        st[f"s{s}.pos_emb"] = sinusoid(pos, E, layout="concat")
        new = []
        core = x
        for i in range(n):
            mem = torch.zeros(B, 0, E, dtype=D64) if mems is None else mems[i]
            cat = torch.cat([mem, core], 1)
            keep = min(c["mem_len"], M + L)
            new.append(cat[:, cat.shape[1] - keep:])
            st[f"s{s}.new_mem.{i}"] = new[-1]
            core = t_txl_layer(core, mem, sub(inp, f"layer.{i}."), c, st, f"s{s}.layer.{i}.")
        st[f"s{s}.out"] = core
        mems = new
    return st


def build_txl(name, B, L, E, H, Dh, Fd, n_layer, mem_len, pre_lnorm=False, clamp_len=0,
              same_length=False, segments=2):
    g = gen(name)
    c = dict(d_model=E, num_heads=H, head_dim=Dh, d_inner=Fd, pre_lnorm=pre_lnorm, norm_eps=1e-5,
             mem_len=mem_len, clamp_len=clamp_len, same_length=same_length, num_layers=n_layer,
             num_segments=segments)
    inp = {}
    for i in range(n_layer):
        p = f"layer.{i}."
        inp[p + "w_qkv"], _ = linear_w(g, 3 * H * Dh, E, False)
        inp[p + "w_r"], _ = linear_w(g, H * Dh, E, False)
        inp[p + "w_o"], _ = linear_w(g, E, H * Dh, False)
        inp[p + "r_w_bias"] = randn(g, H, Dh, scale=0.3)
        inp[p + "r_r_bias"] = randn(g, H, Dh, scale=0.3)
        inp.update(norm_weights(g, E, "layernorm", p + "ln_attn."))
        inp[p + "w_ff1"], inp[p + "b_ff1"] = linear_w(g, Fd, E)
        inp[p + "w_ff2"], inp[p + "b_ff2"] = linear_w(g, E, Fd)
        inp.update(norm_weights(g, E, "layernorm", p + "ln_ff."))
    for s in range(segments):
        inp[f"seg.{s}"] = randn(g, B, L, E)
    st = ref_txl(inp, c)
    # HF TransfoXLModel, float64, inputs_embeds, explicit empty first memory.
    from transformers import TransfoXLConfig, TransfoXLModel
    cfgh = TransfoXLConfig(vocab_size=32, cutoffs=[], d_model=E, d_embed=E, n_head=H, d_head=Dh,
                           d_inner=Fd, n_layer=n_layer, mem_len=mem_len, clamp_len=clamp_len,
                           same_length=same_length, pre_lnorm=pre_lnorm, dropout=0.0, dropatt=0.0,
                           untie_r=True, div_val=1, adaptive=False)
    with hf_default_f64():
        model = TransfoXLModel(cfgh).double().train(False)
    # HF rounds the scores to float32 (``attn_score.float().masked_fill(...)``)
    # with mask value finfo(float64).min, which overflows float32; give the
    # module a torch whose finfo(float64) is float32's (masked weights stay
    # exactly 0). Nothing else of the HF code path changes.
    import transformers.models.transfo_xl.modeling_transfo_xl as mtx

    class _TorchShim:
        def __getattr__(self, n):
            return getattr(torch, n)

        @staticmethod
        def finfo(dt):
            return torch.finfo(torch.float32 if dt == D64 else dt)
    mtx.torch = _TorchShim()
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            p = f"layer.{i}."
            wb = ("weight", "bias")
            load_params(layer, inp,
                        [(f"dec_attn.{m}_net.weight", f"{p}w_{m}") for m in ("qkv", "r", "o")] +
                        [(f"dec_attn.{m}", p + m) for m in ("r_w_bias", "r_r_bias")] +
                        [(f"dec_attn.layer_norm.{t}", f"{p}ln_attn.{t}") for t in wb] +
                        # CoreNet = Linear(ff1), ReLU, Dropout, Linear(ff2), Dropout
                        [(f"pos_ff.CoreNet.{j}.{t}", f"{p}{t[0]}_ff{k}")
                         for j, k in ((0, 1), (3, 2)) for t in wb] +
                        [(f"pos_ff.layer_norm.{t}", f"{p}ln_ff.{t}") for t in wb])
        mems = [torch.zeros(0, B, E, dtype=D64) for _ in range(n_layer)]
        xs = []
        for s in range(segments):
            o = model(inputs_embeds=d(inp[f"seg.{s}"]), mems=mems, output_attentions=True,
                      return_dict=True)
            xs.append(close(f"hf_TransfoXLModel_seg{s}_out(f32 masked scores inside)",
                            st[f"s{s}.out"], o.last_hidden_state, 2e-5))
            for i in range(n_layer):
                xs.append(close(f"hf_TransfoXLModel_seg{s}_attn{i}", st[f"s{s}.layer.{i}.weights"],
                                o.attentions[i], 2e-5))
                xs.append(close(f"hf_TransfoXLModel_seg{s}_mems{i}", st[f"s{s}.new_mem.{i}"],
                                o.mems[i].transpose(0, 1), 2e-5))
            mems = o.mems
    # rel_shift vs the direct index formula on the visible region.
    r0 = st["s1.layer.0.bd"]
    M = st["s1.layer.0.k"].shape[2] - L
    for i in range(L):
        for j in range(i + M + 1):
            qv = st["s1.layer.0.q"][:, :, i] + d(inp["layer.0.r_r_bias"])[None]
            rv = st["s1.layer.0.r"][:, M + L - 1 - (i + M - j)]
            assert torch.allclose(r0[:, :, i, j], (qv * rv[None]).sum(-1), atol=1e-12, rtol=0)
    xs.append("rel_shift_equals_direct_formula (1e-12, causal region of s1.layer.0)")
    return inp, c, xs


# ---------------------------------------------------------------------------
# Bahdanau et al. 2015 in its loop: BiGRU encoder, GRU decoder, one additive
# alignment per output step
# ---------------------------------------------------------------------------

def sigmoid(x):
    return 1.0 / (1.0 + torch.exp(-x))


def gru_step(x, h, W, p):
    """torch.nn.GRUCell's equations written out (gates r, z, n)."""
    Hn = h.shape[-1]
    gi = x @ d(W[p + "w_ih"]).T + (d(W[p + "b_ih"]) if p + "b_ih" in W else 0.0)
    gh = h @ d(W[p + "w_hh"]).T + (d(W[p + "b_hh"]) if p + "b_hh" in W else 0.0)
    r = sigmoid(gi[..., :Hn] + gh[..., :Hn])
    z = sigmoid(gi[..., Hn:2 * Hn] + gh[..., Hn:2 * Hn])
    n = torch.tanh(gi[..., 2 * Hn:] + r * gh[..., 2 * Hn:])
    return (1.0 - z) * n + z * h


def gru_run(x, W, p, reverse=False):
    B, L, _ = x.shape
    Hn = W[p + "w_hh"].shape[1]
    h = torch.zeros(B, Hn, dtype=D64)
    out = torch.zeros(B, L, Hn, dtype=D64)
    for t in (reversed(range(L)) if reverse else range(L)):
        h = gru_step(x[:, t], h, W, p)
        out[:, t] = h
    return out


def ref_bahdanau(inp, c):
    x, y = d(inp["src"]), d(inp["prev_targets"])
    hf, hb = gru_run(x, inp, "enc_fwd."), gru_run(x, inp, "enc_bwd.", reverse=True)
    h = torch.cat([hf, hb], -1)
    s = torch.tanh(hb[:, 0] @ d(inp["w_init"]).T + (d(inp["b_init"]) if "b_init" in inp else 0.0))
    st = {"enc_states": h, "s0": s}
    Ws, Wh, v = d(inp["align.w_s"]), d(inp["align.w_h"]), d(inp["align.v"])
    bb = d(inp["align.b"]) if "align.b" in inp else 0.0
    es, als, cs, ss = [], [], [], []
    for i in range(y.shape[1]):
        e = torch.tanh((s @ Ws.T + bb)[:, None, :] + h @ Wh.T) @ v  # [B, S]
        z = torch.exp(e - e.max(-1, keepdim=True).values)
        a = z / z.sum(-1, keepdim=True)
        ctx = torch.einsum("bs,bsd->bd", a, h)
        s = gru_step(torch.cat([y[:, i], ctx], -1), s, inp, "dec.")
        es.append(e), als.append(a), cs.append(ctx), ss.append(s)
    st["energy"], st["alignment"] = torch.stack(es, 1), torch.stack(als, 1)
    st["context"], st["states"] = torch.stack(cs, 1), torch.stack(ss, 1)
    return st


def build_bahdanau(name, B, S, T, Ex, Ey, Hs, Ds, A, bias=True):
    g = gen(name)
    inp = {"src": randn(g, B, S, Ex), "prev_targets": randn(g, B, T, Ey)}
    for p, In, Hn in (("enc_fwd.", Ex, Hs), ("enc_bwd.", Ex, Hs), ("dec.", Ey + 2 * Hs, Ds)):
        inp[p + "w_ih"], bi = linear_w(g, 3 * Hn, In, bias)
        inp[p + "w_hh"], bh = linear_w(g, 3 * Hn, Hn, bias)
        if bias:
            inp[p + "b_ih"], inp[p + "b_hh"] = bi, bh
    inp["w_init"], bi = linear_w(g, Ds, Hs, bias)
    if bias:
        inp["b_init"] = bi
    inp["align.w_s"], ba = linear_w(g, A, Ds, bias)
    if bias:
        inp["align.b"] = ba
    inp["align.w_h"], _ = linear_w(g, A, 2 * Hs, False)
    inp["align.v"] = randn(g, A, scale=A ** -0.5)
    c = {}
    st = ref_bahdanau(inp, c)
    # Independent formulation: torch.nn.GRU (bidirectional) + torch.nn.GRUCell.
    enc = torch.nn.GRU(Ex, Hs, batch_first=True, bidirectional=True, bias=bias, dtype=D64)
    cell = torch.nn.GRUCell(Ey + 2 * Hs, Ds, bias=bias, dtype=D64)
    with torch.no_grad():
        for sfx, p in (("", "enc_fwd."), ("_reverse", "enc_bwd.")):
            getattr(enc, "weight_ih_l0" + sfx).copy_(d(inp[p + "w_ih"]))
            getattr(enc, "weight_hh_l0" + sfx).copy_(d(inp[p + "w_hh"]))
            if bias:
                getattr(enc, "bias_ih_l0" + sfx).copy_(d(inp[p + "b_ih"]))
                getattr(enc, "bias_hh_l0" + sfx).copy_(d(inp[p + "b_hh"]))
        cell.weight_ih.copy_(d(inp["dec.w_ih"]))
        cell.weight_hh.copy_(d(inp["dec.w_hh"]))
        if bias:
            cell.bias_ih.copy_(d(inp["dec.b_ih"]))
            cell.bias_hh.copy_(d(inp["dec.b_hh"]))
        h, _ = enc(d(inp["src"]))
        init = torch.nn.functional.linear(h[:, 0, Hs:], d(inp["w_init"]), d(inp.get("b_init")))
        s = torch.tanh(init)
        al, states = [], []
        for i in range(T):
            e = (torch.nn.functional.linear(s, d(inp["align.w_s"]), d(inp.get("align.b")))[:, None]
                 + h @ d(inp["align.w_h"]).T).tanh() @ d(inp["align.v"])
            a = torch.softmax(e, -1)
            s = cell(torch.cat([d(inp["prev_targets"])[:, i], torch.bmm(a[:, None], h)[:, 0]], -1), s)
            al.append(a), states.append(s)
    xs = [close("torch_GRU_bidirectional", st["enc_states"], h, 1e-12),
          close("torch_alignment", st["alignment"], torch.stack(al, 1), 1e-12),
          close("torch_GRUCell_states", st["states"], torch.stack(states, 1), 1e-12)]
    return inp, c, xs


# ---------------------------------------------------------------------------
# Vision Transformer (Dosovitskiy et al. 2021; HF ViTModel without pooler)
# ---------------------------------------------------------------------------

def cubic_coeffs(t, A=-0.75):
    """Keys' cubic convolution weights of the 4 taps around a fraction t."""
    def c1(x):
        return ((A + 2) * x - (A + 3)) * x * x + 1

    def c2(x):
        return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A
    return [c2(t + 1.0), c1(t), c1(1.0 - t), c2(2.0 - t)]


def bicubic_grid(plane, oh, ow, step_h, step_w):
    """plane [G, G, E] -> [oh, ow, E]; torch's bicubic with align_corners=False
    written out, with the source step given (1 / scale_factor, or input /
    output size): source = step * (d + 0.5) - 0.5, taps clamped to the grid."""
    G = plane.shape[0]
    out = torch.zeros(oh, ow, plane.shape[2], dtype=D64)
    clamp = lambda i: min(max(i, 0), G - 1)  # noqa: E731
    for oy in range(oh):
        ry = step_h * (oy + 0.5) - 0.5
        iy = math.floor(ry)
        cy = cubic_coeffs(ry - iy)
        for ox in range(ow):
            rx = step_w * (ox + 0.5) - 0.5
            ix = math.floor(rx)
            cx = cubic_coeffs(rx - ix)
            acc = torch.zeros(plane.shape[2], dtype=D64)
            for m in range(4):
                row = sum(cx[n] * plane[clamp(iy - 1 + m), clamp(ix - 1 + n)] for n in range(4))
                acc = acc + cy[m] * row
            out[oy, ox] = acc
    return out


def source_step(rule, G, n):
    """torch's source step for a resize of G cells to n (align_corners=False)
    by transformers' rule: "scale_factor" (4.35: scale_factor=(n + 0.1) / G)
    or "size" (5.x: size=n)."""
    if rule == "size":
        return G / n                      # area_pixel_compute_scale: input / output
    return 1.0 / ((n + 0.1) / G)          # 1 / scale_factor


def vit_positions(pos, G, gh, gw, interpolate, square, rule="scale_factor"):
    """The position table for a gh x gw patch grid: the stored one for the
    G x G grid of a square image, else (interpolate) its patch rows resized
    bicubic by ``rule``."""
    if not interpolate or (gh * gw == G * G and square):
        assert gh * gw == G * G
        return pos
    E = pos.shape[1]
    grid = pos[1:].reshape(G, G, E)
    res = bicubic_grid(grid, gh, gw, source_step(rule, G, gh), source_step(rule, G, gw))
    return torch.cat([pos[:1], res.reshape(gh * gw, E)], 0)


def ref_vit(inp, c, rule="scale_factor"):
    """ViT encoder: patch embedding, [CLS], positions (resized by ``rule``),
    pre-norm blocks, final LayerNorm."""
    x = d(inp["pixels"])
    B, C, H, Wd = x.shape
    Pz = c["patch_size"]
    gh, gw = H // Pz, Wd // Pz
    w = d(inp["patch.weight"])
    E = w.shape[0]
    cols = (x[:, :, :gh * Pz, :gw * Pz].reshape(B, C, gh, Pz, gw, Pz)
            .permute(0, 2, 4, 1, 3, 5).reshape(B, gh * gw, C * Pz * Pz))
    patches = cols @ w.reshape(E, -1).T + d(inp["patch.bias"])
    pos = vit_positions(d(inp["pos_table"]), c["pos_grid"], gh, gw, c["interpolate_pos_encoding"],
                        H == Wd, rule)
    emb = torch.cat([d(inp["cls"]).reshape(1, 1, E).expand(B, 1, E), patches], 1) + pos[None]
    st = {"patches": patches, "pos": pos, "embeddings": emb}
    bcfg = block_cfg(c["num_heads"], "gelu", "layernorm", "pre", eps=c["norm_eps"])
    h = emb
    for i in range(c["num_layers"]):
        h = t_block(h, sub(inp, f"layer.{i}."), bcfg, st=st, pre=f"layer.{i}.")
    st["out"] = layer_norm(h, inp["final_norm.weight"], inp["final_norm.bias"], c["norm_eps"])
    return st


# transformers' names of a ViT layer's linear modules, by ours: 4.x (the
# pins of this script) and 5.x (make_vit_cases.py).
HF_VIT_LINEARS_4 = (("attention.attention.query", "attn.w_q"), ("attention.attention.key", "attn.w_k"),
                    ("attention.attention.value", "attn.w_v"), ("attention.output.dense", "attn.w_o"),
                    ("intermediate.dense", "ffn.w_up"), ("output.dense", "ffn.w_down"))
HF_VIT_LINEARS_5 = (("attention.q_proj", "attn.w_q"), ("attention.k_proj", "attn.w_k"),
                    ("attention.v_proj", "attn.w_v"), ("attention.o_proj", "attn.w_o"),
                    ("mlp.fc1", "ffn.w_up"), ("mlp.fc2", "ffn.w_down"))


def hf_vit_model(inp, c, image_size, layer_prefix, linears, attn_implementation=None):
    """(transformers.ViTModel (float64, no pooler) holding the case's
    weights, its config); ``layer_prefix`` (formatted with the layer index)
    and ``linears`` name its modules, which differ between transformers
    versions."""
    from transformers import ViTConfig, ViTModel
    E, C = inp["patch.weight"].shape[0], inp["patch.weight"].shape[1]
    hc = ViTConfig(hidden_size=E, num_hidden_layers=c["num_layers"],
                   num_attention_heads=c["num_heads"],
                   intermediate_size=inp["layer.0.ffn.w_up"].shape[0], hidden_act="gelu",
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                   layer_norm_eps=c["norm_eps"], image_size=image_size,
                   patch_size=c["patch_size"], num_channels=C, qkv_bias=True)
    if attn_implementation is not None:
        hc._attn_implementation = attn_implementation
    with hf_default_f64():
        m = ViTModel(hc, add_pooling_layer=False).double().eval()
    sd = {"embeddings.cls_token": d(inp["cls"]).reshape(1, 1, E),
          "embeddings.position_embeddings": d(inp["pos_table"])[None],
          "embeddings.patch_embeddings.projection.weight": d(inp["patch.weight"]),
          "embeddings.patch_embeddings.projection.bias": d(inp["patch.bias"]),
          "layernorm.weight": d(inp["final_norm.weight"]),
          "layernorm.bias": d(inp["final_norm.bias"])}
    for i in range(c["num_layers"]):
        p, q = layer_prefix.format(i), f"layer.{i}."
        for hf, ours in linears:
            sd[p + hf + ".weight"] = d(inp[q + ours])
            sd[p + hf + ".bias"] = d(inp[q + ours.replace("w_", "b_")])
        for hf, ours in (("layernorm_before", "norm1"), ("layernorm_after", "norm2")):
            sd[p + hf + ".weight"] = d(inp[q + ours + ".weight"])
            sd[p + hf + ".bias"] = d(inp[q + ours + ".bias"])
    m.load_state_dict(sd, strict=True)
    return m, hc


def xcheck_hf_vit(inp, c, st, image_size):
    """transformers.ViTModel (float64, no pooler) with the same weights, and
    torch.nn.functional.interpolate for the position table."""
    m, _ = hf_vit_model(inp, c, image_size, "encoder.layer.{}.", HF_VIT_LINEARS_4)
    with torch.no_grad():
        out = m(pixel_values=d(inp["pixels"]),
                interpolate_pos_encoding=c["interpolate_pos_encoding"]).last_hidden_state
        emb = m.embeddings(d(inp["pixels"]), interpolate_pos_encoding=c["interpolate_pos_encoding"])
    xs = [close("hf_ViTModel_last_hidden_state", st["out"], out, 1e-10),
          close("hf_ViTEmbeddings", st["embeddings"], emb, 1e-10)]
    G, E = c["pos_grid"], inp["pos_table"].shape[1]
    H, Wd = inp["pixels"].shape[2:]
    gh, gw = H // c["patch_size"], Wd // c["patch_size"]
    if c["interpolate_pos_encoding"] and not (gh * gw == G * G and H == Wd):
        grid = d(inp["pos_table"])[1:].reshape(1, G, G, E).permute(0, 3, 1, 2)
        ti = F.interpolate(grid, scale_factor=((gh + 0.1) / G, (gw + 0.1) / G), mode="bicubic",
                           align_corners=False).permute(0, 2, 3, 1).reshape(gh * gw, E)
        xs.append(close("torch_interpolate_bicubic", st["pos"][1:], ti, 1e-12))
    return xs


def build_vit(name, B, C, H, W, Pz, E, Hn, Fd, N, G, interpolate=False):
    g = gen(name)
    inp = {"pixels": randn(g, B, C, H, W)}
    pw = randn(g, E, C, Pz, Pz, scale=1.0 / math.sqrt(C * Pz * Pz))
    inp["patch.weight"], inp["patch.bias"] = pw, randn(g, E, scale=0.1)
    inp["cls"] = randn(g, E, scale=0.5)
    inp["pos_table"] = randn(g, 1 + G * G, E, scale=0.5)
    bcfg = block_cfg(Hn, "gelu", "layernorm", "pre", eps=1e-12)
    for i in range(N):
        inp.update(block_weights(g, E, Fd, bcfg, True, prefix=f"layer.{i}."))
    inp.update(norm_weights(g, E, "layernorm", "final_norm."))
    c = dict(patch_size=Pz, num_heads=Hn, pos_grid=G, norm_eps=1e-12,
             interpolate_pos_encoding=interpolate, num_layers=N)
    st = ref_vit(inp, c)
    # HF checks the image size unless it interpolates; the grid must then be G x G.
    return inp, c, xcheck_hf_vit(inp, c, st, G * Pz if interpolate else (H, W))


# ---------------------------------------------------------------------------
# The case table
# ---------------------------------------------------------------------------

LLAMA_ROPE = dict(layout="half", theta=10000.0, rotary_dim=0, scaling="none", factor=1.0,
                  max_positions=64, seq_len=0)


def _cases():
    C = []

    def add(name, kind, desc, fn, stages, **kw):
        C.append(dict(name=name, kind=kind, desc=desc, fn=fn, kw=kw, stages=stages))

    # Positions.
    add("sin_interleaved_d16", "nn_sinusoidal", "Vaswani sinusoidal table, interleaved sin/cos",
        build_sinusoidal, ["table"], length=12, dim=16, offset=0, layout="interleaved")
    add("sin_interleaved_odd_d7_offset5", "nn_sinusoidal", "odd dim, rows start at position 5",
        build_sinusoidal, ["table"], length=6, dim=7, offset=5, layout="interleaved")
    add("sin_concat_d12", "nn_sinusoidal", "Transformer-XL/GPT-J [sin..., cos...] layout",
        build_sinusoidal, ["table"], length=10, dim=12, offset=0, layout="concat")
    add("learned_pos_offset3", "nn_learned_pos", "x*sqrt(E) + table[3 + l] (decode offset)",
        build_learned, ["out"], B=2, L=4, E=8, P=10, offset=3, with_ids=False)
    add("learned_pos_ids", "nn_learned_pos", "explicit position_ids per batch row",
        build_learned, ["out"], B=2, L=5, E=6, P=9, offset=0, with_ids=True)
    rs = ["inv_freq", "q_rot", "k_rot", "scores"]
    add("rope_half_llama_gqa_decode", "nn_rope", "Llama rotate_half, GQA, queries at offset 6",
        build_rope, rs, B=2, H=4, Hkv=2, Lq=3, Lk=9, D=16, q_offset=6)
    add("rope_half_partial_neox", "nn_rope", "GPT-NeoX partial rotary (8 of 12 dims)",
        build_rope, rs, B=1, H=2, Hkv=2, Lq=5, Lk=5, D=12, rotary_dim=8)
    add("rope_interleaved_gptj_partial", "nn_rope", "GPT-J rotate_every_two, rotary_dim 8 of 16",
        build_rope, rs, B=1, H=2, Hkv=1, Lq=7, Lk=7, D=16, layout="interleaved", rotary_dim=8)
    add("rope_interleaved_position_ids", "nn_rope", "GPT-J layout with per-row position ids",
        build_rope, rs, B=2, H=2, Hkv=2, Lq=4, Lk=4, D=8, layout="interleaved", position_ids=True)
    add("rope_half_linear_x4_theta5e5", "nn_rope", "linear position interpolation, theta 500000",
        build_rope, rs, B=1, H=2, Hkv=2, Lq=6, Lk=6, D=8, theta=500000.0, scaling="linear",
        factor=4.0)
    add("rope_half_dynamic_ntk", "nn_rope", "HF dynamic NTK (seq 12 > max 8, factor 2)",
        build_rope, rs, B=1, H=2, Hkv=2, Lq=12, Lk=12, D=8, scaling="dynamic_ntk", factor=2.0,
        max_positions=8)
    add("rope_half_ntk_static", "nn_rope", "static NTK-aware base*f^(r/(r-2))",
        build_rope, rs, B=1, H=1, Hkv=1, Lq=6, Lk=6, D=10, scaling="ntk", factor=2.0,
        max_positions=8)
    ts = ["buckets", "bias"]
    add("t5_bias_bidirectional", "nn_t5_bias", "encoder buckets (32, max 128), log range used",
        build_t5, ts, H=3, q_len=24, kv_len=24, q_offset=0, bidirectional=True, num_buckets=32,
        max_distance=128)
    add("t5_bias_causal_decode", "nn_t5_bias", "decoder buckets, 3 queries at offset 37",
        build_t5, ts, H=2, q_len=3, kv_len=40, q_offset=37, bidirectional=False, num_buckets=32,
        max_distance=64)
    add("t5_bias_small_buckets", "nn_t5_bias", "8 buckets, max_distance 20 (clamped tail)",
        build_t5, ts, H=2, q_len=30, kv_len=30, q_offset=0, bidirectional=True, num_buckets=8,
        max_distance=20)

    # Blocks.
    add("block_post_ln_relu_pad", "nn_block", "post-norm encoder layer (original/BERT), padding",
        build_block, BLOCK_STAGES, B=2, L=6, E=16, Fd=32, lens=[6, 4],
        cfg=block_cfg(4, "relu", "layernorm", "post"), xcheck=xcheck_torch_encoder)
    add("block_pre_ln_gelu_pad", "nn_block", "pre-norm encoder layer, exact GELU, padding",
        build_block, BLOCK_STAGES, B=2, L=5, E=16, Fd=24, lens=[3, 5],
        cfg=block_cfg(2, "gelu", "layernorm", "pre"), xcheck=xcheck_torch_encoder)
    add("block_gpt2_causal_gelu_tanh", "nn_block", "GPT-2 style pre-norm causal, GELU tanh",
        build_block, BLOCK_STAGES, B=1, L=7, E=16, Fd=32,
        cfg=block_cfg(4, "gelu_tanh", "layernorm", "pre", causal="top_left"),
        xcheck=xcheck_torch_encoder)
    add("block_post_ln_causal_eps1e-6", "nn_block", "post-norm causal, eps 1e-6, padding",
        build_block, BLOCK_STAGES, B=2, L=5, E=12, Fd=20, lens=[5, 3],
        cfg=block_cfg(3, "relu", "layernorm", "post", causal="top_left", eps=1e-6),
        xcheck=xcheck_torch_encoder)
    llama = block_cfg(4, "swiglu", "rmsnorm", "pre", causal="bottom_right", position="rope", Hkv=2,
                      rope=LLAMA_ROPE, eps=1e-6)
    add("block_llama_gqa_rope", "nn_block", "Llama: RMSNorm, SwiGLU, RoPE, GQA 4/2, no biases",
        build_block, BLOCK_STAGES, B=2, L=6, E=32, Fd=48, bias=False, cfg=llama,
        xcheck=xcheck_llama)
    add("block_llama_decode_cache", "nn_block", "Llama block decoding 2 tokens after 5 cached",
        build_block, BLOCK_STAGES, B=1, L=2, E=32, Fd=48, bias=False, past=5, cfg=llama,
        xcheck=xcheck_llama)
    gptj_rope = dict(layout="interleaved", theta=10000.0, rotary_dim=4)
    add("block_gptj_rope_interleaved", "nn_block", "GPT-J style: interleaved partial RoPE",
        build_block, BLOCK_STAGES, B=1, L=6, E=16, Fd=32, bias=False,
        cfg=block_cfg(2, "gelu_tanh", "layernorm", "pre", causal="top_left", position="rope",
                      rope=gptj_rope), xcheck=xcheck_gptj_rope)
    add("block_alibi_h6_causal", "nn_block", "ALiBi with 6 heads (non power of two), causal",
        build_block, BLOCK_STAGES, B=2, L=7, E=24, Fd=32,
        cfg=block_cfg(6, "gelu", "layernorm", "pre", causal="top_left", position="alibi"),
        xcheck=xcheck_alibi)
    t5e = dict(bidirectional=True, num_buckets=16, max_distance=32)
    add("block_t5_encoder_pad", "nn_block", "T5 encoder layer: RMSNorm, bias, scale 1, padding",
        build_block, BLOCK_STAGES, B=2, L=12, E=16, Fd=32, bias=False, lens=[12, 9],
        cfg=block_cfg(2, "relu", "rmsnorm", "pre", position="t5", t5=t5e, scale=1.0, eps=1e-6),
        xcheck=xcheck_t5)
    t5d = dict(bidirectional=False, num_buckets=16, max_distance=32)
    add("block_t5_decoder_causal", "nn_block", "T5 decoder self-attention (unidirectional)",
        build_block, BLOCK_STAGES, B=1, L=10, E=16, Fd=32, bias=False,
        cfg=block_cfg(2, "relu", "rmsnorm", "pre", causal="top_left", position="t5", t5=t5d,
                      scale=1.0, eps=1e-6), xcheck=xcheck_t5)
    add("decoder_layer_post_relu", "nn_decoder_layer", "post-norm decoder layer, tgt+src padding",
        build_decoder, DEC_STAGES, B=2, Lt=5, Ls=6, E=16, H=4, Fd=32, act_kind="relu",
        placement="post", tgt_lens=[5, 3], src_lens=[4, 6])
    add("decoder_layer_pre_gelu", "nn_decoder_layer", "pre-norm decoder layer, GELU",
        build_decoder, DEC_STAGES, B=2, Lt=4, Ls=5, E=12, H=3, Fd=16, act_kind="gelu",
        placement="pre", tgt_lens=[2, 4], src_lens=[5, 3])
    tr_stages = (["src_in"] + [f"enc.{i}.{s}" for i in range(2) for s in BLOCK_STAGES] +
                 ["memory", "tgt_in"] + [f"dec.{i}.{s}" for i in range(2) for s in DEC_STAGES] +
                 ["dec_out", "logits"])
    add("transformer_post_relu", "nn_transformer",
        "Vaswani encoder-decoder (N=2, post-norm) vs torch.nn.Transformer, padding",
        build_transformer, tr_stages, B=2, Ls=6, Lt=5, E=16, H=4, Fd=32, N=2, act_kind="relu",
        placement="post", src_lens=[6, 4], tgt_lens=[5, 3])
    add("transformer_pre_gelu", "nn_transformer", "pre-norm variant (norm_first=True), GELU",
        build_transformer, tr_stages, B=2, Ls=5, Lt=4, E=12, H=2, Fd=24, N=2, act_kind="gelu",
        placement="pre", src_lens=[3, 5], tgt_lens=[4, 2])
    al = ["energy", "masked", "alignment", "context"]
    add("align_bahdanau_additive", "nn_align", "Bahdanau v.tanh(Ws s + Wh h + b) over BiGRU states",
        build_align, al, score="additive")
    add("align_luong_dot", "nn_align", "Luong dot score", build_align, al, score="dot", Ds=8)
    add("align_luong_general", "nn_align", "Luong general score s.Wa.h", build_align, al,
        score="general")
    def txl(n_layer):
        out = []
        for s in range(2):
            out += [f"s{s}.pos_emb"] + [f"s{s}.new_mem.{i}" for i in range(n_layer)]
            out += [f"s{s}.layer.{i}.{t}" for i in range(n_layer) for t in TXL_LAYER_STAGES]
            out += [f"s{s}.out"]
        return out
    add("transfo_xl_post_mem4", "nn_transfo_xl",
        "Transformer-XL, 2 layers, 2 segments, mem_len 4 < segment length 5",
        build_txl, txl(2), B=2, L=5, E=16, H=2, Dh=8, Fd=24, n_layer=2, mem_len=4)
    add("transfo_xl_pre_clamp_mem6", "nn_transfo_xl", "pre_lnorm, clamp_len 3, mem_len 6",
        build_txl, txl(2), B=1, L=4, E=12, H=3, Dh=4, Fd=16, n_layer=2, mem_len=6,
        pre_lnorm=True, clamp_len=3)
    add("transfo_xl_same_length", "nn_transfo_xl", "same_length masking, mem_len 3",
        build_txl, txl(1), B=1, L=4, E=8, H=2, Dh=4, Fd=16, n_layer=1, mem_len=3,
        same_length=True)
    bah = ["enc_states", "s0", "energy", "alignment", "context", "states"]
    add("bahdanau_loop_s7_t5", "nn_bahdanau",
        "Bahdanau: BiGRU encoder, GRU decoder, one additive alignment per step",
        build_bahdanau, bah, B=2, S=7, T=5, Ex=6, Ey=4, Hs=5, Ds=6, A=8)
    add("bahdanau_loop_nobias_s3_t6", "nn_bahdanau", "no biases, decoder longer than the source",
        build_bahdanau, bah, B=1, S=3, T=6, Ex=3, Ey=2, Hs=4, Ds=3, A=5, bias=False)
    def vit(n_layer):
        return (["patches", "pos", "embeddings"] +
                [f"layer.{i}.{t}" for i in range(n_layer) for t in BLOCK_STAGES] + ["out"])
    add("vit_p4_grid3_2layers", "nn_vit", "ViT: 12x12 image, patch 4, 3x3 grid, 2 pre-norm layers",
        build_vit, vit(2), B=2, C=3, H=12, W=12, Pz=4, E=16, Hn=4, Fd=32, N=2, G=3)
    add("vit_p5_grid2_odd_image", "nn_vit", "patch 5 over an 11x11 image (remainder dropped), 1 channel",
        build_vit, vit(1), B=1, C=1, H=11, W=11, Pz=5, E=12, Hn=3, Fd=20, N=1, G=2)
    add("vit_interp_3x3_to_4x5", "nn_vit",
        "positions trained on 3x3 interpolated (bicubic) to a 4x5 grid, non-square image",
        build_vit, vit(1), B=1, C=3, H=16, W=20, Pz=4, E=8, Hn=2, Fd=16, N=1, G=3,
        interpolate=True)
    add("vit_interp_2x2_to_5x5", "nn_vit", "2x2 trained grid upsampled to 5x5, 8 heads",
        build_vit, vit(1), B=2, C=2, H=15, W=15, Pz=3, E=16, Hn=8, Fd=24, N=1, G=2,
        interpolate=True)
    return C


CASES = _cases()
REFERENCES = {"nn_sinusoidal": ref_sinusoidal, "nn_learned_pos": ref_learned, "nn_rope": ref_rope,
              "nn_t5_bias": ref_t5, "nn_block": ref_block, "nn_decoder_layer": ref_decoder,
              "nn_transformer": ref_transformer, "nn_align": ref_align, "nn_transfo_xl": ref_txl,
              "nn_vit": ref_vit, "nn_bahdanau": ref_bahdanau}


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------

def stage_f32(stages, names):
    out = {}
    for n in names:
        assert n in stages, f"stage {n} not produced"
        out[n] = stages[n].to(D64).to(torch.float32).contiguous()
    return out


def generate_case(c):
    inp, cfg, xs = c["fn"](c["name"], **c["kw"])
    stages = REFERENCES[c["kind"]](inp, cfg)
    meta = {"format": FORMAT, "kind": c["kind"], "config": json.dumps(cfg, sort_keys=True,
                                                                       separators=(",", ":")),
            "stages": ",".join(c["stages"]), "atol": TOL, "rtol": TOL, "description": c["desc"],
            "generator": "tools/golden/make_nn_cases.py"}
    tensors = {}
    for n, t in inp.items():
        tensors[n] = t if t.dtype in (torch.int64, torch.bool) else t.to(torch.float32)
    f32 = stage_f32(stages, c["stages"])
    for n in c["stages"]:
        assert n not in tensors, f"{c['name']}: stage {n} collides with an input"
        tensors[n] = f32[n]
    return st_bytes(tensors, meta, ST_DTYPE), xs


def verify_file(path, c):
    tensors, meta = st_load(path)
    assert meta["format"] == FORMAT and meta["kind"] == c["kind"]
    names = meta["stages"].split(",")
    inputs = {n: t for n, t in tensors.items() if n not in names}
    stages = REFERENCES[meta["kind"]](inputs, json.loads(meta["config"]))
    want = stage_f32(stages, names)
    for n in names:
        got = tensors[n]
        assert got.dtype == torch.float32 and got.shape == want[n].shape, (path, n)
        assert torch.equal(got.view(torch.int32), want[n].view(torch.int32)), \
            f"{path}: stage {n} not reproduced from the file"


def generate_all(out_dir, quiet=False):
    os.makedirs(out_dir, exist_ok=True)
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names))
    total, manifest = 0, []
    for c in CASES:
        data, xs = generate_case(c)
        path, entry = write_case(out_dir, c["name"], data, kind=c["kind"], description=c["desc"],
                                 stages=len(c["stages"]), cross_checks=xs)
        verify_file(path, c)
        total += len(data)
        manifest.append(entry)
        if not quiet:
            print(f"  {c['name']:<34} {c['kind']:<17} {len(data):>7} B  x={len(xs)}")
    write_manifest(out_dir, {
        "format": FORMAT, "generator": "tools/golden/make_nn_cases.py",
        "generated_with": installed_versions(PINNED),
        "reference": "float64 transcriptions from the stored F32 inputs, every stage rounded once "
                     "to F32; cross-checked against torch / Hugging Face implementations",
        "total_bytes": total, "cases": manifest})
    return total, len(CASES)


if __name__ == "__main__":
    sys.exit(main(__doc__, DEFAULT_OUT, PINNED, "tools/golden/requirements-nn.txt", generate_all, CASES))
