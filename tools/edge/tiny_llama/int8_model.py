#!/usr/bin/env python3
"""int8_model.py — the int8 version of the tiny Llama-style decoder (docs/edge.md
"The tiny Llama on the device"): quantises tests/data/edge/tiny_llama.safetensors,
runs a NumPy model of EXACTLY the integer arithmetic of
micro/tiny/tiny_llama_s8_main.c (Python ints; every micro function it calls
ported step by step), and writes
  tests/data/edge/tiny_llama_s8.safetensors  (int8 weights, integer parameters,
      RoPE and SiLU tables, prompt, expected ids and the int32 logits of every
      step; tools/edge/tiny_llama/export_s8_header.py makes the device header)
  tests/data/edge/tiny_llama_s8_expected.json (tokens, agreement with the
      float model, and the per-layer, per-stage error of int8 against float64)
The float parts (calibration, scale choice, multipliers, tables) happen here,
once; the device program only sees integers.

Scheme (symmetric, zero point 0):
  residual stream r: int32, real = r * 2^-12; embeddings enter through a
     fixed-point multiplier
  RMSNorm (af_rmsnorm_s8): ms = floor(sum r^2 / n), rms = isqrt(ms + eps_int),
     t = (r * floor(2^32 / rms)) >> 16, out8 = sat8((t*g + 2^23) >> 24),
     g = round(gamma / s_out * 2^8)
  linear (af_linear_s8 / _residual): acc = sum w8*x8 (int32), out8 =
     sat8(mulq(acc, m_row)) or r += mulq(acc, m_row)
  RoPE (af_rope_s8): Q15 cos/sin table, rotate_half pairs (i, i + 8),
     round((a*c - b*s) / 2^15); q and k scales calibrated on pair magnitudes,
     so no rotated value saturates
  int8 KV cache (af_kv_cache_s8) and af_decode_s8 per query head (GQA: head h
     reads kv head h/2): af_sdpa_s8's tiles, exp table, rescaling and
     requantisation for one row over the positions 0..pos
  SwiGLU (af_swiglu_s8): silu table (int8 gate -> int8 in s_act), then
     out8 = sat8(mulq(silu8 * up8, m)), m = s_act * s_up / s_ffn
  logits = tok8 . hf8 (int32), greedy argmax (first max)
  mulq(x, (m, s)) = round_half_up(x * m / 2^(31 - s)) (af_s8_mul_by_qmult)
Usage: int8_model.py   (numpy; .cache/edgevenv has it; not run in CI)
"""
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tiny"))
from int8_model import (LUT, clamp8, exp_params, mulq, qmult, read_safetensors,  # noqa: E402
                        round_shift, sdpa_s8_row, write_int_safetensors)

ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "edge")
RSH = 12  # residual scale 2^-12
BREAK_LSB = 2.0  # a stage "breaks" when int8 is further than this from float (its own LSB)


def llround(x):
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def sat32(v):
    return max(-2147483648, min(2147483647, v))


# ---- the micro functions, integer arithmetic as in micro/src ----------------
def rmsnorm_s8(r, g, eps):
    n = len(r)
    ms = sum(x * x for x in r) // n
    rms = math.isqrt(ms + eps)
    inv = (1 << 32) // rms
    return [clamp8((((x * inv) >> 16) * int(g[i]) + (1 << 23)) >> 24) for i, x in enumerate(r)]


def linear_s8(x, P):
    accs = (P["w"] @ np.array(x, dtype=np.int64)).tolist()
    return [clamp8(mulq(sat32(a), P["m"][o])) for o, a in enumerate(accs)]


def linear_s8_residual(r, x, P):
    accs = (P["w"] @ np.array(x, dtype=np.int64)).tolist()
    return [sat32(r[o] + mulq(sat32(a), P["m"][o])) for o, a in enumerate(accs)]


def rope_s8(x, heads, dh, cos, sin):
    out = list(x)
    half = dh // 2
    for h in range(heads):
        for i in range(half):
            a, b = h * dh + i, h * dh + i + half
            u, v, c, s = x[a], x[b], int(cos[i]), int(sin[i])
            out[a] = clamp8((u * c - v * s + (1 << 14)) >> 15)
            out[b] = clamp8((u * s + v * c + (1 << 14)) >> 15)
    return out


def swiglu_s8(gate, up, table, m):
    return [clamp8(mulq(int(table[g + 128]) * u, m)) for g, u in zip(gate, up)]


# ---- float64 reference --------------------------------------------------------
def rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_f(x, pos, dh, theta):
    """x [..., dh] at positions pos [L] (rotate_half)."""
    inv = theta ** (-np.arange(0, dh, 2, dtype=np.float64) / dh)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang), np.cos(ang)], -1)
    sin = np.concatenate([np.sin(ang), np.sin(ang)], -1)
    x1, x2 = x[..., :dh // 2], x[..., dh // 2:]
    return x * cos + np.concatenate([-x2, x1], -1) * sin


def silu(x):
    return x / (1.0 + np.exp(-x))


def float_forward(W, cfg, seq):
    """float64 forward over seq (causal): every stage of every layer, [L, ...]."""
    D, H, HKV, FF, NL = cfg["D"], cfg["H"], cfg["HKV"], cfg["FF"], cfg["NL"]
    dh, G, eps, theta = D // H, H // HKV, cfg["eps"], cfg["theta"]
    L = len(seq)
    pos = np.arange(L)
    x = W["tok"][seq]
    st = {}
    for l in range(NL):
        p = "layers.%d." % l
        h = rms(x, W[p + "norm1"], eps)
        q = (h @ W[p + "wq.weight"].T).reshape(L, H, dh)
        k = (h @ W[p + "wk.weight"].T).reshape(L, HKV, dh)
        v = (h @ W[p + "wv.weight"].T).reshape(L, HKV, dh)
        st[(l, "q_pre")] = q.reshape(L, -1)
        st[(l, "k_pre")] = k.reshape(L, -1)
        q = np.stack([rope_f(q[:, hh], pos, dh, theta) for hh in range(H)], 1)
        k = np.stack([rope_f(k[:, g], pos, dh, theta) for g in range(HKV)], 1)
        a = np.zeros((L, H, dh))
        mask = np.triu(np.full((L, L), -np.inf), 1)
        for hh in range(H):
            sc = q[:, hh] @ k[:, hh // G].T * (1.0 / math.sqrt(dh)) + mask
            pr = np.exp(sc - sc.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            a[:, hh] = pr @ v[:, hh // G]
        st[(l, "norm1")] = h
        st[(l, "q")] = q.reshape(L, -1)
        st[(l, "k")] = k.reshape(L, -1)
        st[(l, "v")] = v.reshape(L, -1)
        st[(l, "attn")] = a.reshape(L, -1)
        x = x + a.reshape(L, -1) @ W[p + "wo.weight"].T
        st[(l, "resid_attn")] = x
        h2 = rms(x, W[p + "norm2"], eps)
        gt, up = h2 @ W[p + "gate.weight"].T, h2 @ W[p + "up.weight"].T
        f = silu(gt) * up
        st[(l, "norm2")] = h2
        st[(l, "gate")] = gt
        st[(l, "up")] = up
        st[(l, "silu")] = silu(gt)
        st[(l, "ffn")] = f
        x = x + f @ W[p + "down.weight"].T
        st[(l, "resid_ffn")] = x
    hf = rms(x, W["normf"], eps)
    st[("f", "normf")] = hf
    st[("f", "logits")] = hf @ W["tok"].T
    return st


def main():
    meta, W = read_safetensors(os.path.join(DATA, "tiny_llama.safetensors"))
    exp = json.load(open(os.path.join(DATA, "tiny_llama_expected.json")))
    cfg = {"D": int(meta["d_model"]), "H": int(meta["heads"]), "HKV": int(meta["kv_heads"]),
           "FF": int(meta["ff"]), "NL": int(meta["layers"]), "T": int(meta["max_len"]),
           "theta": float(meta["rope_theta"]), "eps": float(meta["rms_eps"])}
    D, H, HKV, FF, NL, T = (cfg[k] for k in ("D", "H", "HKV", "FF", "NL", "T"))
    dh, G = D // H, H // HKV
    V = W["tok"].shape[0]
    seq = exp["prompt_ids"] + exp["generated_ids"]

    # ---- calibration: float64 stages over the f32 model's sequence ----------
    st = float_forward(W, cfg, seq)

    def mx(name):
        return max(float(np.abs(st[name]).max()), 1e-8)

    def pair_mx(x, heads):
        """max pair magnitude sqrt(a^2 + b^2) of rotate_half pairs."""
        L = x.shape[0]
        y = x.reshape(L, heads, dh)
        return max(float(np.sqrt(y[..., :dh // 2] ** 2 + y[..., dh // 2:] ** 2).max()), 1e-8)

    scale = {}
    for l in range(NL):
        scale[(l, "norm1")] = mx((l, "norm1")) / 127
        scale[(l, "q")] = pair_mx(st[(l, "q_pre")], H) / 127
        scale[(l, "k")] = pair_mx(st[(l, "k_pre")], HKV) / 127
        scale[(l, "v")] = mx((l, "v")) / 127
        scale[(l, "attn")] = scale[(l, "v")]  # a convex combination of v rows: so = sv
        scale[(l, "norm2")] = mx((l, "norm2")) / 127
        scale[(l, "gate")] = mx((l, "gate")) / 127
        scale[(l, "up")] = mx((l, "up")) / 127
        scale[(l, "silu")] = mx((l, "silu")) / 127
        scale[(l, "ffn")] = mx((l, "ffn")) / 127
    scale[("f", "normf")] = mx(("f", "normf")) / 127

    # ---- quantise ----------------------------------------------------------------
    def q8(w, s):
        return np.clip(np.rint(w / s), -127, 127).astype(np.int64)

    s_tok = float(np.abs(W["tok"]).max()) / 127
    tok8 = q8(W["tok"], s_tok)
    M_tok = qmult(s_tok * 2 ** RSH)
    eps_int = max(1, llround(cfg["eps"] * 2 ** (2 * RSH)))

    def linear_q(wname, s_in, s_out):
        w = W[wname]
        sw = np.maximum(np.abs(w).max(1), 1e-12) / 127
        w8 = q8(w, sw[:, None])
        ms = [qmult(sw[o] * s_in * (2 ** RSH if s_out is None else 1.0 / s_out))
              for o in range(w.shape[0])]
        return {"w": w8, "m": ms}

    def fold(gamma, s_out):
        return np.array([llround(g / s_out * 256) for g in gamma], dtype=np.int64)

    def silu_table(s_in, s_out):
        t = []
        for i in range(-128, 128):
            x = i * s_in
            t.append(clamp8(math.floor(x / (1.0 + math.exp(-x)) / s_out + 0.5)))
        return np.array(t, dtype=np.int64)

    layers = []
    for l in range(NL):
        p = "layers.%d." % l
        sc = lambda n: scale[(l, n)]  # noqa: E731
        layers.append({
            "norm1": fold(W[p + "norm1"], sc("norm1")),
            "q": linear_q(p + "wq.weight", sc("norm1"), sc("q")),
            "k": linear_q(p + "wk.weight", sc("norm1"), sc("k")),
            "v": linear_q(p + "wv.weight", sc("norm1"), sc("v")),
            "o": linear_q(p + "wo.weight", sc("attn"), None),
            "norm2": fold(W[p + "norm2"], sc("norm2")),
            "gate": linear_q(p + "gate.weight", sc("norm2"), sc("gate")),
            "up": linear_q(p + "up.weight", sc("norm2"), sc("up")),
            "down": linear_q(p + "down.weight", sc("ffn"), None),
            "silu": silu_table(sc("gate"), sc("silu")),
            "m_swiglu": qmult(sc("silu") * sc("up") / sc("ffn")),
            "em": exp_params(sc("q"), sc("k"), 1.0 / math.sqrt(dh)),
            "om": qmult(1.0),
        })
    normf = fold(W["normf"], scale[("f", "normf")])
    # RoPE table, Q15, positions 0..T-1 (llround, 1.0 saturated to 32767).
    inv = [cfg["theta"] ** (-2.0 * i / dh) for i in range(dh // 2)]
    cos_t = np.array([[max(-32768, min(32767, llround(math.cos(p * f) * 32768))) for f in inv]
                      for p in range(T)], dtype=np.int64)
    sin_t = np.array([[max(-32768, min(32767, llround(math.sin(p * f) * 32768))) for f in inv]
                      for p in range(T)], dtype=np.int64)

    # ---- the integer model ---------------------------------------------------------
    class Model:
        def __init__(self):
            self.kc = [[[] for _ in range(HKV)] for _ in range(NL)]
            self.vc = [[[] for _ in range(HKV)] for _ in range(NL)]
            self.stages = {}

        def step(self, tok, pos):
            r = [mulq(int(tok8[tok][i]), M_tok) for i in range(D)]
            S = self.stages
            for l, P in enumerate(layers):
                h = rmsnorm_s8(r, P["norm1"], eps_int)
                q = rope_s8(linear_s8(h, P["q"]), H, dh, cos_t[pos], sin_t[pos])
                k = rope_s8(linear_s8(h, P["k"]), HKV, dh, cos_t[pos], sin_t[pos])
                v = linear_s8(h, P["v"])
                for g in range(HKV):
                    self.kc[l][g].append(k[g * dh:(g + 1) * dh])
                    self.vc[l][g].append(v[g * dh:(g + 1) * dh])
                att = []
                for hh in range(H):
                    g = hh // G
                    att += sdpa_s8_row(np.array(q[hh * dh:(hh + 1) * dh]), np.array(self.kc[l][g]),
                                       np.array(self.vc[l][g]), pos + 1, P["em"], P["om"])
                S[(l, "norm1")], S[(l, "q")], S[(l, "k")], S[(l, "v")], S[(l, "attn")] = h, q, k, v, att
                r = linear_s8_residual(r, att, P["o"])
                S[(l, "resid_attn")] = r
                h2 = rmsnorm_s8(r, P["norm2"], eps_int)
                gt, up = linear_s8(h2, P["gate"]), linear_s8(h2, P["up"])
                f = swiglu_s8(gt, up, P["silu"], P["m_swiglu"])
                S[(l, "norm2")], S[(l, "gate")], S[(l, "up")], S[(l, "ffn")] = h2, gt, up, f
                S[(l, "silu")] = [int(P["silu"][x + 128]) for x in gt]
                r = linear_s8_residual(r, f, P["down"])
                S[(l, "resid_ffn")] = r
            hf8 = rmsnorm_s8(r, normf, eps_int)
            S[("f", "normf")] = hf8
            logits = (tok8 @ np.array(hf8, dtype=np.int64)).tolist()
            S[("f", "logits")] = logits
            return logits

    # (a) Free-running greedy generation: what the device must reproduce,
    # every layer's stages of every step kept for the device's all-layer
    # dump (tiny_llama_s8_stages.safetensors: "decode.<pos>.layer.<l>.<stage>"
    # under the golden names, then final_norm and logits).
    DUMP = [("norm1", "norm", "I8"), ("q", "q", "I8"), ("k", "k", "I8"), ("v", "v", "I8"),
            ("attn", "heads_out", "I8"), ("resid_attn", "residual", "I32"),
            ("norm2", "ffn_norm", "I8"), ("ffn", "swiglu", "I8"), ("resid_ffn", "block_out", "I32")]
    layer_dump = []

    def keep_stages(pos):
        for l in range(NL):
            for key, name, dt in DUMP:
                layer_dump.append(("decode.%d.layer.%d.%s" % (pos, l, name), dt,
                                   np.array(m.stages[(l, key)], dtype=np.int64)))
        layer_dump.append(("decode.%d.final_norm" % pos, "I8", np.array(m.stages[("f", "normf")])))
        layer_dump.append(("decode.%d.logits" % pos, "I32", np.array(m.stages[("f", "logits")])))

    m = Model()
    prompt = exp["prompt_ids"]
    ids = list(prompt)
    logits_log = []
    for i, t in enumerate(prompt):
        lg = m.step(t, i)
        keep_stages(i)
    for g in range(len(exp["generated_ids"])):
        logits_log.append(lg)
        nxt = int(np.argmax(lg))
        ids.append(nxt)
        if g + 1 < len(exp["generated_ids"]):
            lg = m.step(nxt, len(ids) - 1)
            keep_stages(len(ids) - 1)
    gen = ids[len(prompt):]
    f32 = exp["generated_ids"]
    first_div = next((i for i in range(len(gen)) if gen[i] != f32[i]), len(gen))
    gap = None
    if first_div < len(gen):
        fl = st[("f", "logits")][len(prompt) - 1 + first_div]
        gap = float(fl[f32[first_div]] - fl[gen[first_div]])

    # (b) Teacher-forced on the float model's sequence: every stage of every
    # layer against float64, in that stage's own LSB (|x8 - x / s|, residuals
    # in units of 2^-12), over the positions before the first divergence.
    order = ["norm1", "q", "k", "v", "attn", "resid_attn", "norm2", "gate", "up", "silu", "ffn",
             "resid_ffn"]
    t8 = Model()
    err = {}
    n_pos = len(prompt) + first_div
    for i in range(n_pos):
        t8.step(seq[i], i)
        for key, val in t8.stages.items():
            if key[1] == "logits":
                continue
            s = 2.0 ** -RSH if key[1].startswith("resid") else scale[key]
            e = float(np.abs(np.array(val, dtype=np.float64) - st[key][i] / s).max())
            rel = float(np.abs(np.array(val, dtype=np.float64) * s - st[key][i]).max() /
                        max(np.abs(st[key][i]).max(), 1e-12))
            a = err.setdefault(key, [0.0, 0.0])
            a[0], a[1] = max(a[0], e), max(a[1], rel)
    table = []
    first_break = None
    for l in range(NL):
        for nm in order:
            e, rel = err[(l, nm)]
            table.append({"layer": l, "stage": nm, "max_err_lsb": round(e, 3),
                          "max_rel_err": round(rel, 5)})
            if first_break is None and e > BREAK_LSB:
                first_break = {"layer": l, "stage": nm, "max_err_lsb": round(e, 3)}
    e, rel = err[("f", "normf")]
    table.append({"layer": "final", "stage": "normf", "max_err_lsb": round(e, 3),
                  "max_rel_err": round(rel, 5)})
    if first_break is None and e > BREAK_LSB:
        first_break = {"layer": "final", "stage": "normf", "max_err_lsb": round(e, 3)}

    vocab = json.loads(meta["vocab"])
    out = {"generated_ids": gen, "generated_text": "".join(vocab[i] for i in gen),
           "f32_generated_text": exp["generated_text"],
           "tokens_equal_to_f32_before_first_divergence": first_div,
           "f32_logit_gap_at_divergence": gap,
           "stage_error_positions": n_pos,
           "break_threshold_lsb": BREAK_LSB,
           "first_break": first_break,
           "stage_errors": table,
           "residual_scale_log2": -RSH}
    json.dump(out, open(os.path.join(DATA, "tiny_llama_s8_expected.json"), "w"), indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "stage_errors"}))
    for row in table:
        print("  layer %-5s %-10s max %7.3f LSB  rel %.5f" % (row["layer"], row["stage"],
                                                            row["max_err_lsb"], row["max_rel_err"]))

    # ---- the integer model's tensors (I8 / I16 / I32) ----------------------------
    tensors = [("tok", "I8", tok8), ("m_tok", "I32", np.array(M_tok)),
               ("rope_cos", "I16", cos_t), ("rope_sin", "I16", sin_t)]
    for l, P in enumerate(layers):
        tensors += [("l%d_norm1" % l, "I32", P["norm1"]), ("l%d_norm2" % l, "I32", P["norm2"])]
        for nm in ("q", "k", "v", "o", "gate", "up", "down"):
            tensors += [("l%d_%s_w" % (l, nm), "I8", P[nm]["w"]),
                        ("l%d_%s_m" % (l, nm), "I32", np.array(P[nm]["m"]))]
        tensors += [("l%d_silu" % l, "I8", P["silu"]),
                    ("l%d_m_swiglu" % l, "I32", np.array(P["m_swiglu"])),
                    ("l%d_em" % l, "I32", np.array(P["em"])), ("l%d_om" % l, "I32", np.array(P["om"]))]
    tensors += [("normf", "I32", normf), ("prompt", "I32", np.array(prompt)),
                ("expected_ids", "I32", np.array(gen)), ("expected_logits", "I32", np.array(logits_log))]
    write_int_safetensors("tiny_llama_s8.safetensors", tensors,
                          {"format": "attnflow-tiny-llama-s8/1", "d_model": str(D),
                           "heads": str(H), "kv_heads": str(HKV), "ff": str(FF),
                           "layers": str(NL), "max_len": str(T), "vocab_size": str(V),
                           "eps": str(eps_int), "residual_scale_log2": str(-RSH)})

    # The device's per-layer dump, compared by `attnflow verify --compare`.
    write_int_safetensors(
        "tiny_llama_s8_stages.safetensors",
        [("token_ids", "I32", np.array(ids[:len(layer_dump) // (NL * len(DUMP) + 2)]))] + layer_dump,
        {"format": "attnflow-tiny-llama-s8-stages/1", "kind": "decoder",
         "stages": ",".join(n for n, _, _ in layer_dump), "inputs": "token_ids",
         "description": "every layer of every step of the int8 tiny Llama (NumPy integer model, "
                        "tools/edge/tiny_llama/int8_model.py): decode.<pos>.layer.<l>.<stage>, "
                        "int8 stages and int32 residuals; the device's AFDUMP (tiny_llama_s8 "
                        "built with -DTL_DUMP) must equal them bit for bit"})


if __name__ == "__main__":
    main()
