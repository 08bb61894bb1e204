#!/usr/bin/env python3
"""int8_model.py — the int8 version of the tiny decoder (docs/edge.md "tiny
model, int8"): quantises tests/data/edge/tiny_model.safetensors, runs a NumPy
model of EXACTLY the integer arithmetic micro/tiny/tiny_s8_main.c performs
(int64 NumPy; af_sdpa_s8 ported step by step for one query row), and writes
  tests/data/edge/tiny_s8_expected.json  (tokens, agreement with the float
                                          model)
  tests/data/edge/tiny_s8.safetensors     (int8 weights, integer parameters,
                                          prompt, expected ids and logits;
                                          tools/edge/tiny/export_s8_header.py
                                          turns it into the device header) The float parts (calibration, scale choice, multipliers) happen
here, once; the device program only sees integers.

Scheme (all symmetric, zero point 0):
  residual stream r: int32, real = r * 2^-12
  LayerNorm: integer mean/variance, floor isqrt, Q16 normalised value t,
     out8 = clamp(round((t*G + B) / 2^24)) with G, B the folded gamma/beta
  linear: acc = sum w8*x8 + b32 (int32), then out8 = clamp(mulq(acc, M_row))
     or r += mulq(acc, M_row) (per-output-row multipliers)
  attention: af_sdpa_s8 per head over the int8 KV cache (q_len 1)
  ReLU on int8; logits = tok8 . x8 (int32), greedy argmax (first max)
  mulq(x, (m, s)) = round_half_up(x * m / 2^(31 - s)) (af_s8_mul_by_qmult)
Usage: int8_model.py   (needs numpy; .cache/edgevenv has it; not run in CI)
"""
import json
import math
import os
import re
import struct
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "edge")
RSH = 12  # residual scale 2^-12


def read_safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, info in header.items():
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float16).astype(np.float64).reshape(info["shape"])
    return meta, out


def lut_from_c():
    src = open(os.path.join(ROOT, "micro", "src", "af_sdpa_s8.c")).read()
    body = src[src.index("kExp2NegQ15[256] = {"):]
    body = body[body.index("{") + 1:body.index("}")]
    vals = [int(v) for v in re.findall(r"\d+", body)]
    assert len(vals) == 256
    return vals


LUT = lut_from_c()


def qmult(real):
    """af_quantize_multiplier: real = m * 2^(s - 31), m in [2^30, 2^31)."""
    if real == 0:
        return (0, 0)
    f, e = math.frexp(real)
    m = int(math.floor(f * 2147483648.0 + 0.5))  # llround for f > 0
    if m == 1 << 31:
        m >>= 1
        e += 1
    assert -31 <= e <= 30, real
    return (m, e)


def round_shift(p, sh):
    if sh <= 0:
        return p
    if sh >= 63:
        return -1 if p < 0 else 0
    return (p + (1 << (sh - 1))) >> sh


def mulq(x, q):
    v = round_shift(int(x) * q[0], 31 - q[1])
    return max(-2147483648, min(2147483647, v))


def clamp8(v):
    return max(-128, min(127, v))


def exp_params(sq, sk, scale):
    real = sq * sk * scale * 1.4426950408889634 * 256.0
    sh, m = 0, real * 4294967296.0
    while m >= 2147483647.0 and sh < 9:
        m *= 0.5
        sh += 1
    assert sh <= 8
    return (int(math.floor(m + 0.5)), sh)  # llround, m > 0


def exp2_neg(u, extra):
    e = (u >> 8) + extra
    if e >= 16:
        return 0
    return (LUT[u & 255] + ((1 << e) >> 1)) >> e


def weight(m, s, em, hi_cut, wshift):
    # u = floor((m - s) * M / 2^(32 - p)), truncated once (af_weight).
    prod = (m - s) * em[0]
    if (prod >> 32) >= hi_cut:
        return 0
    return exp2_neg(prod >> (32 - em[1]), wshift)


def bitlen(x):
    return int(x).bit_length()


def sdpa_s8_row(q8, k8, v8, n, em, om, tile=24):
    """af_sdpa_s8 for one query row over keys 0..n-1 (q_len 1, one head)."""
    hi_cut = (16 * 256) >> em[1]
    wshift = 0  # kv_len <= 511 here (af_sdpa_s8 derives it from kv_len)
    dv = v8.shape[1]
    acc = [0] * dv
    m = l = 0
    started = False
    for j0 in range(0, n, tile):
        tn = min(tile, n - j0)
        s = [int(np.dot(q8.astype(np.int64), k8[j0 + t].astype(np.int64))) for t in range(tn)]
        tmax = max(s)
        if not started:
            m, started = tmax, True
        elif tmax > m:
            f = weight(tmax, m, em, hi_cut, 0)
            acc = [round_shift(a * f, 15) for a in acc]
            l = round_shift(l * f, 15)
            m = tmax
        w = [weight(m, x, em, hi_cut, wshift) for x in s]
        l += sum(w)
        for t in range(tn):
            if w[t]:
                acc = [a + w[t] * int(v8[j0 + t][d]) for d, a in enumerate(acc)]
    if not started or l <= 0:
        return [0] * dv
    e = bitlen(l)
    ex = e - 16 if e > 16 else 0
    inv = 0x80000000 // (l >> ex)
    cm = inv * om[0]
    c = (cm + 0x80000000) >> 32
    sh = 30 + ex - om[1]
    z = 31 - bitlen(c) if c > 0 else 0
    out = []
    if c > 0 and 33 <= sh + z <= 62:
        c2, s2 = c << z, sh + z - 32
        half = 1 << (s2 - 1)
        for a in acc:
            out.append(clamp8(((a * c2) >> 32) + half >> s2))
    else:
        for a in acc:
            out.append(clamp8(round_shift(a * c, sh)))
    return out


def main():
    meta, W = read_safetensors(os.path.join(DATA, "tiny_model.safetensors"))
    exp = json.load(open(os.path.join(DATA, "tiny_expected.json")))
    D, H, FF, L, T = (int(meta[k]) for k in ("d_model", "heads", "ff", "layers", "max_len"))
    V = W["tok"].shape[0]
    dh = D // H
    seq = exp["prompt_ids"] + exp["generated_ids"]

    # ---- float64 forward over the f32 model's sequence: calibration ranges.
    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * g + b

    rng = {}

    def note(name, x):
        rng[name] = max(rng.get(name, 1e-8), float(np.abs(x).max()))

    x = W["tok"][seq] + W["pos"][:len(seq)]
    Lx = len(seq)
    mask = np.triu(np.full((Lx, Lx), -np.inf), 1)
    for l in range(L):
        p = "layers.%d." % l
        h = ln(x, W[p + "ln1.weight"], W[p + "ln1.bias"])
        note("ln1_%d" % l, h)
        q = h @ W[p + "wq.weight"].T + W[p + "wq.bias"]
        k = h @ W[p + "wk.weight"].T + W[p + "wk.bias"]
        v = h @ W[p + "wv.weight"].T + W[p + "wv.bias"]
        note("q_%d" % l, q)
        note("k_%d" % l, k)
        note("v_%d" % l, v)
        a = np.zeros_like(q)
        for hh in range(H):
            sl = slice(hh * dh, (hh + 1) * dh)
            sc = q[:, sl] @ k[:, sl].T * 0.25 + mask
            pr = np.exp(sc - sc.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            a[:, sl] = pr @ v[:, sl]
        x = x + a @ W[p + "wo.weight"].T + W[p + "wo.bias"]
        h2 = ln(x, W[p + "ln2.weight"], W[p + "ln2.bias"])
        note("ln2_%d" % l, h2)
        f = np.maximum(h2 @ W[p + "w1.weight"].T + W[p + "w1.bias"], 0)
        note("ff_%d" % l, f)
        x = x + f @ W[p + "w2.weight"].T + W[p + "w2.bias"]
    hf = ln(x, W["lnf.weight"], W["lnf.bias"])
    note("lnf", hf)
    float_logits_all = hf @ W["tok"].T
    scale = {k: v / 127.0 for k, v in rng.items()}

    # ---- quantise
    def q8(w, s):
        return np.clip(np.rint(w / s), -127, 127).astype(np.int64)

    s_tok = float(np.abs(W["tok"]).max()) / 127
    s_pos = float(np.abs(W["pos"]).max()) / 127
    tok8, pos8 = q8(W["tok"], s_tok), q8(W["pos"], s_pos)
    M_tok, M_pos = qmult(s_tok * 2 ** RSH), qmult(s_pos * 2 ** RSH)

    def linear_q(wname, bname, s_in, s_out, to_residual):
        w = W[wname]
        sw = np.maximum(np.abs(w).max(1), 1e-12) / 127
        w8 = q8(w, sw[:, None])
        b32 = np.rint(W[bname] / (sw * s_in)).astype(np.int64)
        ms = [qmult(sw[o] * s_in * (2 ** RSH if to_residual else 1.0 / s_out)) for o in range(w.shape[0])]
        return {"w": w8, "b": b32, "m": ms}

    def ln_q(gname, bname, s_out):
        # out8 = round((t * G + B) / 2^24), t = normalised value in Q16
        G = np.rint(W[gname] / s_out * 2 ** 8).astype(np.int64)
        B = np.rint(W[bname] / s_out * 2 ** 24).astype(np.int64)
        return {"G": G, "B": B}

    layers = []
    for l in range(L):
        p = "layers.%d." % l
        sv = scale["v_%d" % l]
        layers.append({
            "ln1": ln_q(p + "ln1.weight", p + "ln1.bias", scale["ln1_%d" % l]),
            "q": linear_q(p + "wq.weight", p + "wq.bias", scale["ln1_%d" % l], scale["q_%d" % l], False),
            "k": linear_q(p + "wk.weight", p + "wk.bias", scale["ln1_%d" % l], scale["k_%d" % l], False),
            "v": linear_q(p + "wv.weight", p + "wv.bias", scale["ln1_%d" % l], sv, False),
            "o": linear_q(p + "wo.weight", p + "wo.bias", sv, None, True),
            "ln2": ln_q(p + "ln2.weight", p + "ln2.bias", scale["ln2_%d" % l]),
            "f1": linear_q(p + "w1.weight", p + "w1.bias", scale["ln2_%d" % l], scale["ff_%d" % l], False),
            "f2": linear_q(p + "w2.weight", p + "w2.bias", scale["ff_%d" % l], None, True),
            "em": exp_params(scale["q_%d" % l], scale["k_%d" % l], 0.25),
            "om": qmult(1.0),  # so = sv
        })
    lnf = ln_q("lnf.weight", "lnf.bias", scale["lnf"])
    EPS = int(round(1e-5 * 2 ** (2 * RSH)))

    # ---- integer model
    def ln_int(r, P):
        n = len(r)
        mean = sum(r) >> 6 if n == 64 else sum(r) // n
        d = [x - mean for x in r]
        var = sum(x * x for x in d) >> 6
        std = math.isqrt(var + EPS)
        inv = (1 << 32) // std  # Q16 normalised: t = d * inv >> 16
        out = []
        for i, x in enumerate(d):
            t = (x * inv) >> 16
            out.append(clamp8(round_shift(t * int(P["G"][i]) + int(P["B"][i]), 24)))
        return out

    def lin_int(x, P, residual=None):
        w, b, ms = P["w"], P["b"], P["m"]
        xv = np.array(x, dtype=np.int64)
        accs = (w @ xv + b).tolist()
        if residual is None:
            return [clamp8(mulq(a, ms[o])) for o, a in enumerate(accs)]
        return [residual[o] + mulq(a, ms[o]) for o, a in enumerate(accs)]

    kc = [np.zeros((H, T, dh), dtype=np.int64) for _ in range(L)]
    vc = [np.zeros((H, T, dh), dtype=np.int64) for _ in range(L)]

    def step(tok, pos):
        r = [mulq(int(tok8[tok][i]), M_tok) + mulq(int(pos8[pos][i]), M_pos) for i in range(D)]
        for l, P in enumerate(layers):
            h = ln_int(r, P["ln1"])
            q, k, v = lin_int(h, P["q"]), lin_int(h, P["k"]), lin_int(h, P["v"])
            att = []
            for hh in range(H):
                kc[l][hh][pos] = k[hh * dh:(hh + 1) * dh]
                vc[l][hh][pos] = v[hh * dh:(hh + 1) * dh]
                att += sdpa_s8_row(np.array(q[hh * dh:(hh + 1) * dh]), kc[l][hh], vc[l][hh], pos + 1,
                                   P["em"], P["om"])
            r = lin_int(att, P["o"], r)
            h2 = ln_int(r, P["ln2"])
            f = [max(0, z) for z in lin_int(h2, P["f1"])]
            r = lin_int(f, P["f2"], r)
        hf8 = ln_int(r, lnf)
        return (tok8 @ np.array(hf8, dtype=np.int64)).tolist()

    prompt = exp["prompt_ids"]
    ids = list(prompt)
    logits_log = []
    for i, t in enumerate(prompt):
        lg = step(t, i)
    for g in range(len(exp["generated_ids"])):
        logits_log.append(lg)
        nxt = int(np.argmax(lg))
        ids.append(nxt)
        if g + 1 < len(exp["generated_ids"]):
            lg = step(nxt, len(ids) - 1)
    gen = ids[len(prompt):]
    f32 = exp["generated_ids"]
    first_div = next((i for i in range(len(gen)) if gen[i] != f32[i]), len(gen))
    # float model's logit gap between its choice and the int8 choice there
    gap = None
    if first_div < len(gen):
        fl = float_logits_all[len(prompt) - 1 + first_div]
        gap = float(fl[f32[first_div]] - fl[gen[first_div]])
    vocab = json.loads(meta["vocab"])
    out = {"generated_ids": gen, "generated_text": "".join(vocab[i] for i in gen),
           "f32_generated_text": exp["generated_text"],
           "tokens_equal_to_f32_before_first_divergence": first_div,
           "f32_logit_gap_at_divergence": gap, "residual_scale_log2": -RSH}
    json.dump(out, open(os.path.join(DATA, "tiny_s8_expected.json"), "w"), indent=1)
    print(json.dumps(out))

    # ---- the integer model's tensors (I8 / I32), read by export_s8_header.py
    tensors = [("tok", "I8", tok8), ("pos", "I8", pos8),
               ("m_tok", "I32", np.array(M_tok)), ("m_pos", "I32", np.array(M_pos))]
    for l, P in enumerate(layers):
        for nm in ("ln1", "ln2"):
            tensors += [("l%d_%s_g" % (l, nm), "I32", P[nm]["G"]), ("l%d_%s_b" % (l, nm), "I32", P[nm]["B"])]
        for nm in ("q", "k", "v", "o", "f1", "f2"):
            tensors += [("l%d_%s_w" % (l, nm), "I8", P[nm]["w"]), ("l%d_%s_b" % (l, nm), "I32", P[nm]["b"]),
                        ("l%d_%s_m" % (l, nm), "I32", np.array(P[nm]["m"]))]
        tensors += [("l%d_em" % l, "I32", np.array(P["em"])), ("l%d_om" % l, "I32", np.array(P["om"]))]
    tensors += [("lnf_g", "I32", lnf["G"]), ("lnf_b", "I32", lnf["B"]),
                ("prompt", "I32", np.array(prompt)), ("expected_ids", "I32", np.array(gen)),
                ("expected_logits", "I32", np.array(logits_log))]
    header, blobs, off = {}, [], 0
    for name, dt, arr in tensors:
        arr = np.ascontiguousarray(arr, dtype=np.int8 if dt == "I8" else np.int32)
        assert np.all(np.asarray(arr) == arr)
        raw = arr.astype("<i1" if dt == "I8" else "<i4").tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "attnflow-tiny-s8/1", "d_model": str(D), "heads": str(H),
                              "ff": str(FF), "layers": str(L), "max_len": str(T), "vocab_size": str(V),
                              "eps": str(EPS), "residual_scale_log2": str(-RSH)}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(DATA, "tiny_s8.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))


if __name__ == "__main__":
    main()
