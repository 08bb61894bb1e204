#!/usr/bin/env python3
"""lab_port.py — a learner's "port" of scaled dot-product attention, for docs/lab.md.

Reads the inputs of an sdpa golden case (written by `attnflow golden --kind
sdpa`: q k v [B,H,L,D] F32, metadata causal/scale, optional kv_lens I64 [B]),
recomputes every stage in NumPy float64 the way a port would, and dumps them as
F32 safetensors under the golden-format names (scores scaled masked weights lse
out) so that `attnflow verify --compare PORT CASE` checks the port stage by
stage. `--break WHAT` introduces one deliberate, classic bug so that the lab can
show `verify` naming the first stage that goes wrong:
  scale    forget 1/sqrt(d_k)               -> first bad stage: scaled
  align    the other causal alignment       -> masked (only when Lq != Lk)
  padding  ignore kv_lens (attend to pads)  -> masked (only with --kv-lens)
  axis     softmax over the query axis      -> weights
  values   multiply weights by K, not V     -> out
Invariants: float64 arithmetic, one rounding to float32 at the end; no attnflow
code is used; unsupported case features (masks, windows, ALiBi, GQA) are an
error, not silently ignored.
Usage: lab_port.py CASE.safetensors OUT.safetensors [--break WHAT]
"""
import argparse
import json
import math
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
  with open(path, "rb") as f:
    blob = f.read()
  n = struct.unpack("<Q", blob[:8])[0]
  header = json.loads(blob[8:8 + n])
  meta = header.pop("__metadata__", {})
  data = blob[8 + n:]
  tensors = {}
  for name, t in header.items():
    if t["dtype"] not in DTYPES:
      continue
    lo, hi = t["data_offsets"]
    tensors[name] = np.frombuffer(data[lo:hi], dtype=DTYPES[t["dtype"]]).reshape(t["shape"])
  return tensors, meta


def write_safetensors(path, tensors, meta):
  header, chunks, off = {"__metadata__": meta}, [], 0
  for name, a in tensors.items():
    b = np.ascontiguousarray(a, dtype="<f4").tobytes()
    header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
    chunks.append(b)
    off += len(b)
  h = json.dumps(header).encode()
  h += b" " * (-len(h) % 8)
  with open(path, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(chunks))


def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument("case")
  ap.add_argument("out")
  ap.add_argument("--break", dest="bug", default="",
                  choices=["", "scale", "align", "padding", "axis", "values"])
  a = ap.parse_args()
  t, meta = read_safetensors(a.case)
  if meta.get("kind") != "sdpa":
    sys.exit(f"lab_port: {a.case}: kind {meta.get('kind')!r}, this port handles sdpa only")
  for unsupported in ("attn_mask", "alibi_slopes"):
    if unsupported in t:
      sys.exit(f"lab_port: {a.case}: has {unsupported}, which this port does not implement")
  if meta.get("window_left", "-1") != "-1" or meta.get("window_right", "-1") != "-1":
    sys.exit(f"lab_port: {a.case}: sliding windows are not implemented by this port")
  q, k, v = (t[n].astype(np.float64) for n in ("q", "k", "v"))
  b, h, lq, d = q.shape
  lk = k.shape[2]
  if k.shape[1] != h:
    sys.exit(f"lab_port: {a.case}: q has {h} heads, k has {k.shape[1]}: GQA not implemented")
  scale = float(meta.get("scale", 1.0 / math.sqrt(d)))
  causal = meta.get("causal", "none")

  scores = q @ k.transpose(0, 1, 3, 2)                        # [B,H,Lq,Lk]
  scaled = scores if a.bug == "scale" else scores * scale
  allowed = np.ones((b, 1, lq, lk), dtype=bool)
  i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
  if causal != "none":
    align = causal
    if a.bug == "align":
      align = "bottom_right" if causal == "top_left" else "top_left"
    offset = 0 if align == "top_left" else lk - lq              # row i sees j <= i + offset
    allowed &= (j <= i + offset)
  if "kv_lens" in t and a.bug != "padding":
    allowed &= (np.arange(lk)[None, None, None, :] < t["kv_lens"].reshape(b, 1, 1, 1))
  masked = np.where(allowed, scaled, -np.inf)
  def softmax(x, axis):
    mx = x.max(axis=axis, keepdims=True)
    safe = np.where(np.isfinite(mx), mx, 0.0)      # a fully masked row stays -inf
    e = np.exp(x - safe)
    s = e.sum(axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
      lse = (np.log(s) + safe).squeeze(axis)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0), lse   # fully masked -> 0
  weights, lse = softmax(masked, 3)
  if a.bug == "axis":
    weights, _ = softmax(masked, 2)
  out = weights @ (k if a.bug == "values" else v)
  write_safetensors(a.out, {"scores": scores, "scaled": scaled, "masked": masked,
                            "weights": weights, "lse": lse, "out": out},
                    {"format": "attnflow-golden/1", "kind": "sdpa",
                     "generator": "tools/demo/lab_port.py" + (f" --break {a.bug}" if a.bug else "")})
  print(f"wrote {a.out} (scores scaled masked weights lse out; B={b} H={h} Lq={lq} Lk={lk} "
        f"D={d}; causal={causal}{'; BROKEN: ' + a.bug if a.bug else ''})")


if __name__ == "__main__":
  main()
