#!/usr/bin/env python3
"""lab_port.py — a learner's "port" of scaled dot-product attention, for docs/lab.md.

Reads the inputs of an sdpa golden case (written by `attnflow golden --kind
sdpa`: q k v [B,H,L,D] F32, metadata causal/scale, optional kv_lens I64 [B]),
recomputes every stage in float64 the way a port would (plain loops, as you
would write them in C for a new target), and dumps them as F32 safetensors
under the golden-format names (scores scaled masked weights lse out) so that
`attnflow verify --compare PORT CASE` checks the port stage by stage.
`--break WHAT` introduces one deliberate, classic bug so that the lab can show
`verify` naming the first stage that goes wrong:
  scale    forget 1/sqrt(d_k)               -> first bad stage: scaled
  align    the other causal alignment       -> masked (only when Lq != Lk)
  padding  ignore kv_lens (attend to pads)  -> masked (only with --kv-lens)
  axis     softmax over the query axis      -> weights
  values   multiply weights by K, not V     -> out
Invariants: Python's standard library only (any python3 >= 3.8, no NumPy, no
venv), so the lab runs from any directory with any installed `attnflow`;
float64 arithmetic, one rounding to float32 at the end; no attnflow code is
used; unsupported case features (masks, windows, ALiBi, GQA) are an error,
not silently ignored; OUT is written whole or not at all.
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
DTYPES = {"F32": ("f", 4), "F64": ("d", 8), "I64": ("q", 8), "I32": ("i", 4)}
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("case")
    ap.add_argument("out")
    ap.add_argument("--break", dest="bug", default="",
                    choices=["", "scale", "align", "padding", "axis", "values"])
    a = ap.parse_args()
    try:
        t, meta = read_safetensors(a.case)
    except (OSError, ValueError, KeyError, struct.error) as e:
        sys.exit(f"lab_port: cannot read {a.case}: {e}")
    if meta.get("kind") != "sdpa":
        sys.exit(f"lab_port: {a.case}: kind {meta.get('kind')!r}, this port handles sdpa only")
    for unsupported in ("attn_mask", "alibi_slopes"):
        if unsupported in t:
            sys.exit(f"lab_port: {a.case}: has {unsupported}, which this port does not implement")
    if meta.get("window_left", "-1") != "-1" or meta.get("window_right", "-1") != "-1":
        sys.exit(f"lab_port: {a.case}: sliding windows are not implemented by this port")
    (qs, q), (ks, k), (vs, v) = t["q"], t["k"], t["v"]
    b, h, lq, d = qs
    lk, dv = ks[2], vs[3]
    if ks[1] != h:
        sys.exit(f"lab_port: {a.case}: q has {h} heads, k has {ks[1]}: GQA not implemented")
    scale = float(meta.get("scale", 1.0 / math.sqrt(d)))
    causal = meta.get("causal", "none")
    if a.bug == "align" and causal != "none":
        causal = "bottom_right" if causal == "top_left" else "top_left"
    kv_lens = t["kv_lens"][1] if "kv_lens" in t and a.bug != "padding" else [lk] * b

    def at(x, dims, *ix):  # element of a row-major [B,H,L,D] list
        o = 0
        for n, i in zip(dims, ix):
            o = o * n + i
        return x[o]

    scores, scaled, masked, weights, lse, out = [], [], [], [], [], []
    for bi in range(b):
        for hi in range(h):
            sc = [[sum(at(q, qs, bi, hi, i, c) * at(k, ks, bi, hi, j, c) for c in range(d))
                   for j in range(lk)] for i in range(lq)]
            sd = [[x if a.bug == "scale" else x * scale for x in r] for r in sc]
            offset = lk - lq if causal == "bottom_right" else 0  # row i sees j <= i + offset
            mk = [[sd[i][j] if j < kv_lens[bi] and (causal == "none" or j <= i + offset) else NEG_INF
                   for j in range(lk)] for i in range(lq)]
            rows = [softmax(r) for r in mk]
            w = [r for r, _ in rows]
            if a.bug == "axis":  # softmax down each key's column instead of along each row
                cols = [softmax([mk[i][j] for i in range(lq)])[0] for j in range(lk)]
                w = [[cols[j][i] for j in range(lk)] for i in range(lq)]
            src, sdims = (k, ks) if a.bug == "values" else (v, vs)
            o = [[sum(w[i][j] * at(src, sdims, bi, hi, j, c) for j in range(lk)) for c in range(dv)]
                 for i in range(lq)]
            for dst, m in ((scores, sc), (scaled, sd), (masked, mk), (weights, w), (out, o)):
                for r in m:
                    dst.extend(r)
            lse.extend(l for _, l in rows)
    sq = [b, h, lq, lk]
    try:
        write_safetensors(a.out, {"scores": (sq, scores), "scaled": (sq, scaled), "masked": (sq, masked),
                                  "weights": (sq, weights), "lse": ([b, h, lq], lse),
                                  "out": ([b, h, lq, dv], out)},
                          {"format": "attnflow-golden/1", "kind": "sdpa",
                           "generator": "tools/demo/lab_port.py" + (f" --break {a.bug}" if a.bug else "")})
    except OSError as e:
        sys.exit(f"lab_port: cannot write {a.out}: {e}")
    print(f"wrote {a.out} (scores scaled masked weights lse out; B={b} H={h} Lq={lq} Lk={lk} "
          f"D={d}; causal={meta.get('causal', 'none')}{'; BROKEN: ' + a.bug if a.bug else ''})")


if __name__ == "__main__":
    main()
