#!/usr/bin/env python3
"""demo_numpy.py — independent NumPy float64 recomputation of `attnflow demo`.

Recomputes, from the definitions only (no attnflow code), every number that
`attnflow demo --json` prints: the toy's X, the bidirectional and causal
attention, the padded batch row, the sqrt(d_k) statistics over seeded draws,
order-blindness, sinusoidal vs learned positions, and the post-norm block.
Prints one JSON object with the same structure; tests/cli/cli_demo_test.cc
compares the two leaf by leaf (abs 1e-10 + rel 1e-9).

Invariants:
  * The toy (src/trace/toy.cc) is a pure function of indices; it is restated
    here from its formulas.
  * attnflow::Rng (include/attnflow/rng.h) is reimplemented: SplitMix64 is
    counter based (output i depends on seed + (i+1)*gamma only), so uniforms
    are generated vectorised; Marsaglia's polar method consumes (u, v) pairs
    in order, rejects s >= 1 or s == 0, and yields u*f then v*f.
  * float64 throughout; NumPy pinned (tools/deps/demo.pip: numpy==2.4.6).
Usage: demo_numpy.py  (JSON on stdout)
"""
import json
import math
import sys

import numpy as np

T, E, H = 4, 8, 2
DH = E // H
F = 16
LN_EPS = 1e-5
DRAWS, STAT_KEYS, STAT_SEED_BASE = 2000, T, 20260000
PERM = [2, 0, 3, 1]
LEARNED_ROWS, LEARNED_SEED, LEARNED_SD = 8, 7, 0.5

M64 = np.uint64(0xFFFFFFFFFFFFFFFF)
GAMMA = np.uint64(0x9E3779B97F4A7C15)
C1 = np.uint64(0xBF58476D1CE4E5B9)
C2 = np.uint64(0x94D049BB133111EB)


class Rng:
  """attnflow::Rng: SplitMix64 + Marsaglia polar normals (with the spare)."""

  def __init__(self, seed):
    self.seed = np.uint64(seed)
    self.count = 0  # uniforms consumed
    self.normals = np.empty(0)
    self.used = 0

  def _uniforms(self, n):
    i = np.arange(self.count + 1, self.count + n + 1, dtype=np.uint64)
    self.count += n
    with np.errstate(over="ignore"):
      z = self.seed + i * GAMMA
      z = (z ^ (z >> np.uint64(30))) * C1
      z = (z ^ (z >> np.uint64(27))) * C2
      z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53

  def normal(self, n):
    while self.normals.size - self.used < n:
      uni = self._uniforms(1 << 16)
      u = 2.0 * uni[0::2] - 1.0
      v = 2.0 * uni[1::2] - 1.0
      s = u * u + v * v
      ok = (s < 1.0) & (s != 0.0)
      u, v, s = u[ok], v[ok], s[ok]
      f = np.sqrt(-2.0 * np.log(s) / s)
      pair = np.empty(2 * u.size)
      pair[0::2] = u * f
      pair[1::2] = v * f
      self.normals = np.concatenate([self.normals[self.used:], pair])
      self.used = 0
    out = self.normals[self.used:self.used + n]
    self.used += n
    return out


# ---- the toy (src/trace/toy.cc) --------------------------------------------
DEMO_EMBED = np.array([[0.2, -0.1, 0.4, 0.0, 0.3, -0.2, 0.1, 0.5],
                       [0.9, 0.3, -0.5, 0.2, -0.1, 0.6, 0.4, -0.3],
                       [-0.4, 0.8, 0.1, -0.6, 0.5, 0.2, -0.7, 0.3],
                       [0.1, -0.5, 0.7, 0.4, -0.3, -0.4, 0.6, 0.2]])


def sinusoid(pos, i):
  rate = math.pow(10000.0, -2.0 * (i // 2) / E)
  return math.sin(pos * rate) if i % 2 == 0 else math.cos(pos * rate)


def w(which, r, c):
  return (0.5 * math.sin(0.7 * r + 1.3 * c + 0.9 * which) +
          0.25 * math.cos(1.1 * r - 0.4 * c * (which + 1)))


def fill(rows, cols, f):
  return np.array([[f(r, c) for c in range(cols)] for r in range(rows)])


WQ, WK, WV, WO = (fill(E, E, lambda r, c, k=k: w(k, r, c)) for k in range(4))
W1 = fill(F, E, lambda r, c: 0.7 * w(4, r, c))
B1 = np.array([0.1 * math.sin(0.5 * r + 0.3) for r in range(F)])
W2 = fill(E, F, lambda r, c: 0.5 * w(5, r, c))
B2 = np.array([0.05 * math.cos(0.9 * r) for r in range(E)])
G1 = np.array([1.0 + 0.1 * math.sin(1.0 * i) for i in range(E)])
BE1 = np.array([0.05 * math.cos(2.0 * i) for i in range(E)])
G2 = np.array([1.0 + 0.1 * math.cos(1.0 * i) for i in range(E)])
BE2 = np.array([0.05 * math.sin(2.0 * i) for i in range(E)])
TOK = DEMO_EMBED.copy()
POS = fill(LEARNED_ROWS, E, sinusoid)
X = TOK + POS[:T]


def mha(x, causal=False, allowed=None):
  """Returns (out [t,E], weights [H*t, t]) of the toy multi-head attention."""
  t = x.shape[0]
  q, k, v = x @ WQ.T, x @ WK.T, x @ WV.T
  ok = np.ones((t, t), dtype=bool)
  if causal:
    ok &= np.tril(np.ones((t, t), dtype=bool))
  if allowed is not None:
    ok &= allowed
  heads, weights = [], []
  for h in range(H):
    sl = slice(h * DH, (h + 1) * DH)
    s = q[:, sl] @ k[:, sl].T / math.sqrt(DH)
    p = np.zeros((t, t))
    for i in range(t):
      if ok[i].any():
        z = np.where(ok[i], s[i], -np.inf)
        e = np.exp(z - z[ok[i]].max())
        p[i] = e / e.sum()
    weights.append(p)
    heads.append(p @ v[:, sl])
  return np.concatenate(heads, axis=1) @ WO.T, np.concatenate(weights, axis=0)


def layer_norm(x, g, b):
  mu = x.mean(axis=1, keepdims=True)
  var = ((x - mu)**2).mean(axis=1, keepdims=True)
  return (x - mu) / np.sqrt(var + LN_EPS) * g + b


def softmax(s):
  e = np.exp(s - s.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def main():
  j = {"x": X.tolist()}
  out, wts = mha(X)
  j["weights"], j["out"] = wts.tolist(), out.tolist()
  out_c, wts_c = mha(X, causal=True)
  j["causal_weights"], j["causal_out"] = wts_c.tolist(), out_c.tolist()

  # Step 10: [<pad>, the, cat, sat, down], pad embedding 0, real positions 0..3.
  xp = np.vstack([np.zeros((1, E)), X])
  allowed = np.ones((T + 1, T + 1), dtype=bool)
  allowed[:, 0] = False
  out_p, wts_p = mha(xp, causal=True, allowed=allowed)
  out_n, _ = mha(xp, causal=True)
  j["padding"] = {
      "weights": wts_p.tolist(),
      "real_rows_max_abs_diff": float(np.abs(out_p[1:] - out_c).max()),
      "pad_row_max_abs_out": float(np.abs(out_p[0]).max()),
      "no_padding_mask_max_abs_diff": float(np.abs(out_n[1:] - out_c).max()),
  }

  # Step 11: draw order per d_k: q (d_k normals), then keys 0..3 (d_k each).
  j["scaling"] = []
  for dk in (4, 64, 512):
    rng = Rng(STAT_SEED_BASE + dk)
    z = rng.normal(DRAWS * (1 + STAT_KEYS) * dk).reshape(DRAWS, 1 + STAT_KEYS, dk)
    q, keys = z[:, 0, :], z[:, 1:, :]
    raw = np.einsum("nd,nkd->nk", q, keys)
    entry = {"d_k": dk, "draws": DRAWS, "keys": STAT_KEYS, "seed": STAT_SEED_BASE + dk}
    for name, logits in (("unscaled", raw), ("scaled", raw / math.sqrt(dk))):
      p = softmax(logits)
      mx = p.max(axis=1)
      with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=1)
      entry[name] = {
          "var_qk": float(logits.var(ddof=1)),
          "max_weight_mean": float(mx.mean()),
          "max_weight_sd": float(mx.std(ddof=1)),
          "entropy_mean": float(ent.mean()),
          "entropy_sd": float(ent.std(ddof=1)),
      }
    j["scaling"].append(entry)

  # Step 12: shuffle without positions (and with them).
  o0, w0 = mha(TOK)
  o0p, w0p = mha(TOK[PERM])
  opp, _ = mha(TOK[PERM] + POS[:T])
  w0h = w0.reshape(H, T, T)[:, PERM][:, :, PERM].reshape(H * T, T)
  j["order"] = {
      "perm": PERM,
      "no_pos_out_max_abs_diff": float(np.abs(o0p - o0[PERM]).max()),
      "no_pos_weights_max_abs_diff": float(np.abs(w0p - w0h).max()),
      "with_pos_out_max_abs_diff": float(np.abs(opp - out[PERM]).max()),
  }

  # Step 13: sinusoidal vs a seeded learned table (row-major normals * sd).
  learned = LEARNED_SD * Rng(LEARNED_SEED).normal(LEARNED_ROWS * E).reshape(LEARNED_ROWS, E)

  def offset_spread(tab):
    g = tab @ tab.T
    return float(max(np.ptp(np.diagonal(g, k)) for k in range(LEARNED_ROWS)))

  ol, wl = mha(TOK + learned[:T])
  j["positions"] = {
      "learned_seed": LEARNED_SEED, "learned_sd": LEARNED_SD, "rows": LEARNED_ROWS,
      "learned_weights": wl.tolist(), "learned_out": ol.tolist(),
      "sinusoidal_offset_spread": offset_spread(POS),
      "learned_offset_spread": offset_spread(learned),
  }

  # Step 14: post-norm block.
  res1 = X + out
  n1 = layer_norm(res1, G1, BE1)
  ffn = np.maximum(n1 @ W1.T + B1, 0.0) @ W2.T + B2
  y = layer_norm(n1 + ffn, G2, BE2)
  j["block"] = {"residual1": res1.tolist(), "norm1": n1.tolist(), "ffn": ffn.tolist(),
                "block_out": y.tolist()}
  json.dump(j, sys.stdout, indent=1)
  sys.stdout.write("\n")


if __name__ == "__main__":
  main()
