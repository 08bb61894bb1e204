#!/usr/bin/env python3
"""lab_port.py — a learner's "port" of attention, for docs/lab.md.

Reads the inputs of a golden case (kind sdpa: q k v [B,H,L,D] F32; kind
mha: x_q x_k x_v [B,L,E] and the projections w_* [E,E] with optional b_*;
metadata causal/scale, optional kv_lens I64 [B] and attn_mask BOOL/F32
broadcast to [B,H,Lq,Lk]), recomputes every stage in float64 the way a port
would (plain loops, as you would write them in C for a new target), and
dumps them as F32 safetensors under the golden-format names (sdpa: scores
scaled masked weights lse out; mha also q k v heads_out concat) so that
`attnflow verify --compare PORT CASE` checks the port stage by stage.
`--break WHAT` introduces one deliberate, classic bug so that the lab can show
`verify` naming the first stage that goes wrong:
  scale     forget 1/sqrt(d_k)                          -> scaled
  align     the other causal alignment (a decode step's
            query placed at position 0: the offset bug) -> masked (only when Lq != Lk)
  padding   ignore kv_lens (attend to pads)             -> masked (only with kv_lens)
  axis      softmax over the query axis                 -> weights
  values    multiply weights by K, not V                -> out
and the chapter's pitfalls (docs/lab.md exercise 9):
  mask-axis     a key mask [B,1,1,Lk] broadcast along the queries -> masked (needs Lq = Lk)
  or-masks      causal OR padding instead of AND                   -> masked
  fp16-softmax  softmax in float16 without the max subtraction     -> weights (overflow)
  head-order    mha: heads split as [L, Dh, H] instead of [L, H, Dh] -> q
Invariants: Python's standard library only (any python3 >= 3.8, no NumPy, no
venv), so the lab runs from any directory with any installed `attnflow`;
float64 arithmetic (float16 where a bug says so), one rounding to float32 at
the end; no attnflow code is used; unsupported case features (windows,
ALiBi, softcap, GQA) are an error, not silently ignored; OUT is written whole
or not at all.
Usage: lab_port.py CASE.safetensors OUT.safetensors [--break WHAT]
"""
import argparse
import json
import math
import os
import struct
import sys
import tempfile

# safetensors dtype -> (struct code, bytes per element)
DTYPES = {"F32": ("f", 4), "F64": ("d", 8), "I64": ("q", 8), "I32": ("i", 4), "BOOL": ("?", 1)}
NEG_INF = float("-inf")


def read_safetensors(path):
    """Returns ({name: (shape, flat list of numbers)}, metadata)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    tensors = {}
    for name, t in header.items():
        if t["dtype"] not in DTYPES:
            continue
        code, size = DTYPES[t["dtype"]]
        lo, hi = t["data_offsets"]
        count = (hi - lo) // size
        tensors[name] = (list(t["shape"]), list(struct.unpack(f"<{count}{code}", data[lo:hi])))
    return tensors, meta


def write_safetensors(path, tensors, meta):
    """tensors: {name: (shape, flat list)}, written as F32 (atomically)."""
    header, chunks, off = {"__metadata__": meta}, [], 0
    for name, (shape, flat) in tensors.items():
        b = struct.pack(f"<{len(flat)}f", *flat)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        chunks.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".lab_port.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def softmax(row):
    """Softmax of a list that may hold -inf; a fully masked row gives zeros
    and lse -inf (never NaN)."""
    mx = max(row)
    if mx == NEG_INF:
        return [0.0] * len(row), NEG_INF
    e = [math.exp(x - mx) if x != NEG_INF else 0.0 for x in row]
    s = sum(e)
    return [x / s for x in e], math.log(s) + mx


def half(x):
    """x rounded to float16 (inf past 65504), as a float16 register holds it."""
    try:
        return struct.unpack("<e", struct.pack("<e", x))[0]
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def softmax_fp16(row):
    """The fp16-softmax bug: exp(x) in float16 WITHOUT subtracting the row
    maximum first; a large score overflows to inf and the row becomes NaN."""
    e = [half(math.exp(min(x, 700.0))) if x != NEG_INF else 0.0 for x in row]
    s = half(sum(e))
    w = [half(x / s) if s != 0 else 0.0 for x in e]  # inf / inf = NaN in IEEE
    return w, (math.log(s) if 0 < s < math.inf else (NEG_INF if s == 0 else s))


def at(x, dims, *ix):
    """Element of a row-major list of shape `dims`."""
    o = 0
    for n, i in zip(dims, ix):
        o = o * n + i
    return x[o]


def mask_value(mask, b, h, i, j, bug):
    """The attn_mask entry for (b, h, i, j): numpy broadcasting of a rank 2-4
    mask to [B,H,Lq,Lk] (True / a float added). The mask-axis bug reads a
    key mask [B,1,1,Lk] along the queries (index i instead of j)."""
    shape, flat = mask
    full = [1] * (4 - len(shape)) + list(shape)
    if bug == "mask-axis" and full[2] == 1:
        j = i  # the key mask read as if it were [B,1,Lq,1]: entry of the QUERY index
    idx = [x if n > 1 else 0 for x, n in zip((b, h, i, j), full)]
    return at(flat, full, *idx)


def attention(q, qs, k, ks, v, vs, meta, t, bug):
    """Every sdpa stage of q [B,H,Lq,D], k/v [B,H,Lk,*] as flat lists."""
    b, h, lq, d = qs
    lk, dv = ks[2], vs[3]
    scale = float(meta.get("scale", 1.0 / math.sqrt(d)))
    causal = meta.get("causal", "none")
    if bug == "align" and causal != "none":
        causal = "bottom_right" if causal == "top_left" else "top_left"
    kv_lens = t["kv_lens"][1] if "kv_lens" in t and bug != "padding" else [lk] * b
    mask = t.get("attn_mask")
    bool_mask = meta.get("_mask_dtype") == "BOOL"
    st = {n: [] for n in ("scores", "scaled", "masked", "weights", "lse", "out")}
    for bi in range(b):
        for hi in range(h):
            sc = [[sum(at(q, qs, bi, hi, i, c) * at(k, ks, bi, hi, j, c) for c in range(d))
                   for j in range(lk)] for i in range(lq)]
            sd = [[x if bug == "scale" else x * scale for x in r] for r in sc]
            offset = lk - lq if causal == "bottom_right" else 0  # row i sees j <= i + offset
            mk = []
            for i in range(lq):
                row = []
                for j in range(lk):
                    pad_ok = j < kv_lens[bi]
                    causal_ok = causal == "none" or j <= i + offset
                    ok = (pad_ok or causal_ok) if bug == "or-masks" and causal != "none" else (
                        pad_ok and causal_ok)
                    x = sd[i][j]
                    if mask is not None:
                        m = mask_value(mask, bi, hi, i, j, bug)
                        if bool_mask:
                            ok = ok and bool(m)
                        else:
                            x = x + m
                    row.append(x if ok else NEG_INF)
                mk.append(row)
            rows = [softmax_fp16(r) if bug == "fp16-softmax" else softmax(r) for r in mk]
            w = [r for r, _ in rows]
            if bug == "axis":  # softmax down each key's column instead of along each row
                cols = [softmax([mk[i][j] for i in range(lq)])[0] for j in range(lk)]
                w = [[cols[j][i] for j in range(lk)] for i in range(lq)]
            src, sdims = (k, ks) if bug == "values" else (v, vs)
            o = [[sum(w[i][j] * at(src, sdims, bi, hi, j, c) for j in range(lk)) for c in range(dv)]
                 for i in range(lq)]
            for name, m in (("scores", sc), ("scaled", sd), ("masked", mk), ("weights", w), ("out", o)):
                for r in m:
                    st[name].extend(r)
            st["lse"].extend(l for _, l in rows)
    sq = [b, h, lq, lk]
    return {"scores": (sq, st["scores"]), "scaled": (sq, st["scaled"]), "masked": (sq, st["masked"]),
            "weights": (sq, st["weights"]), "lse": ([b, h, lq], st["lse"]),
            "out": ([b, h, lq, dv], st["out"])}


def project_heads(x, xs, w, bias, heads, bug):
    """y = x.w^T + b [B,L,E] split into heads [B,H,L,Dh]: head h is columns
    h*Dh..(h+1)*Dh-1 (the head-order bug takes column c*H + h instead)."""
    bn, ln, e = xs
    rows = len(w[1]) // e
    dh = rows // heads
    y = [sum(at(x, xs, bi, li, c) * w[1][r * e + c] for c in range(e)) + (bias[1][r] if bias else 0.0)
         for bi in range(bn) for li in range(ln) for r in range(rows)]
    out = []
    for bi in range(bn):
        for hi in range(heads):
            for li in range(ln):
                for c in range(dh):
                    col = c * heads + hi if bug == "head-order" else hi * dh + c
                    out.append(y[(bi * ln + li) * rows + col])
    return out, [bn, heads, ln, dh]


def mha(t, meta, bug):
    """Every mha stage (torch.nn.MultiheadAttention, batch first)."""
    heads = int(meta["num_heads"])
    if int(meta.get("num_kv_heads", heads)) != heads:
        sys.exit("lab_port: GQA (num_kv_heads != num_heads) is not implemented by this port")
    st = {}
    for n in ("q", "k", "v"):
        x, xs = t["x_" + n][1], t["x_" + n][0]
        flat, shape = project_heads(x, xs, t["w_" + n], t.get("b_" + n), heads, bug)
        st[n] = (shape, flat)
    att = attention(st["q"][1], st["q"][0], st["k"][1], st["k"][0], st["v"][1], st["v"][0], meta, t,
                    bug)
    ho_shape, ho = att.pop("out")
    bn, hn, lq, dh = ho_shape
    e = hn * dh
    concat = [at(ho, ho_shape, bi, c // dh, li, c % dh)
              for bi in range(bn) for li in range(lq) for c in range(e)]
    wo, bo = t["w_o"][1], t.get("b_o")
    out = [sum(concat[(bi * lq + li) * e + c] * wo[r * e + c] for c in range(e)) + (bo[1][r] if bo else 0.0)
           for bi in range(bn) for li in range(lq) for r in range(e)]
    st.update(att)
    st["heads_out"] = (ho_shape, ho)
    st["concat"] = ([bn, lq, e], concat)
    st["out"] = ([bn, lq, e], out)
    order = ["q", "k", "v", "scores", "scaled", "masked", "weights", "lse", "heads_out", "concat", "out"]
    return {n: st[n] for n in order}


BREAKS = ["", "scale", "align", "padding", "axis", "values", "mask-axis", "or-masks",
          "fp16-softmax", "head-order"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case")
    ap.add_argument("out")
    ap.add_argument("--break", dest="bug", default="", choices=BREAKS)
    a = ap.parse_args()
    try:
        t, meta = read_safetensors(a.case)
        with open(a.case, "rb") as f:  # the mask's dtype (bool or float)
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        if "attn_mask" in header:
            meta["_mask_dtype"] = header["attn_mask"]["dtype"]
    except (OSError, ValueError, KeyError, struct.error) as e:
        sys.exit(f"lab_port: cannot read {a.case}: {e}")
    kind = meta.get("kind")
    if kind not in ("sdpa", "mha"):
        sys.exit(f"lab_port: {a.case}: kind {kind!r}, this port handles sdpa and mha only")
    if "alibi_slopes" in t or "softcap" in meta:
        sys.exit(f"lab_port: {a.case}: has ALiBi or a softcap, which this port does not implement")
    if meta.get("window_left", "-1") != "-1" or meta.get("window_right", "-1") != "-1":
        sys.exit(f"lab_port: {a.case}: sliding windows are not implemented by this port")
    if a.bug == "head-order" and kind != "mha":
        sys.exit("lab_port: --break head-order needs an mha case (heads split from E)")
    if kind == "sdpa":
        (qs, q), (ks, k), (vs, v) = t["q"], t["k"], t["v"]
        if ks[1] != qs[1]:
            sys.exit(f"lab_port: {a.case}: q has {qs[1]} heads, k has {ks[1]}: GQA not implemented")
        stages = attention(q, qs, k, ks, v, vs, meta, t, a.bug)
        shape = f"B={qs[0]} H={qs[1]} Lq={qs[2]} Lk={ks[2]} D={qs[3]}"
    else:
        stages = mha(t, meta, a.bug)
        xs = t["x_q"][0]
        shape = f"B={xs[0]} L={xs[1]} E={xs[2]} H={meta['num_heads']}"
    try:
        write_safetensors(a.out, stages,
                          {"format": "attnflow-golden/1", "kind": kind,
                           "generator": "tools/demo/lab_port.py" + (f" --break {a.bug}" if a.bug else "")})
    except OSError as e:
        sys.exit(f"lab_port: cannot write {a.out}: {e}")
    print(f"wrote {a.out} ({' '.join(stages)}; {shape}; "
          f"causal={meta.get('causal', 'none')}{'; BROKEN: ' + a.bug if a.bug else ''})")


if __name__ == "__main__":
    main()
