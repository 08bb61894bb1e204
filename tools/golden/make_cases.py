#!/usr/bin/env python3
"""Independent float64 reference generator for attnflow golden test cases.

Purpose
-------
attnflow (C++) is tested stage by stage against the files this script writes
to ``tests/data/golden``.  The expected values here come from PyTorch/NumPy
only -- no attnflow code is imported or executed -- so the golden files are an
independent oracle.  Each case is one safetensors file in the
``attnflow-golden/1`` format (see ``/work/shared/golden-format.md`` and
``tools/golden/README.md``), holding the F32 inputs and every intermediate
stage (``scores``, ``scaled``, ``masked``, ``weights``, ``lse``, ``out`` and,
for ``mha``, ``q``/``k``/``v``/``heads_out``/``concat``).

How the values are made
-----------------------
* Inputs are drawn in float32 from a ``torch.Generator`` seeded per case
  (CRC-32 of the case name), so adding a case never changes another one.
* The reference is computed in float64 from the float32-rounded inputs (the
  stored inputs reproduce the stored stages exactly), with the math written
  out explicitly (``q @ k^T`` with KV heads expanded by ``repeat_interleave``,
  masks built index by index, a max-subtracted softmax, ...), and every stage
  is rounded to float32 exactly once.
* Every case is cross-checked inside the generator (max abs diff < 1e-10 on
  rows that have at least one allowed key):
    - sdpa: ``torch.nn.functional.scaled_dot_product_attention`` in float64
      with an equivalent combined mask, under the default and the MATH
      backend, with ``enable_gqa=True`` for GQA, with the raw user mask when it
      is the only constraint, ``is_causal=True`` /
      ``torch.nn.attention.bias.causal_lower_right`` when causality is the
      only constraint; ``torch.softmax`` / ``torch.logsumexp`` for the
      weights / lse stages;
    - mha: ``torch.nn.MultiheadAttention(batch_first=True, dtype=float64)``
      loaded with the same weights (for GQA/MQA with the K/V projection rows
      of each KV head repeated, which is mathematically identical), with
      ``kv_lens`` passed as ``key_padding_mask`` and the other constraints as
      ``attn_mask`` (True = NOT allowed there);
    - the boolean/additive mask tensors are re-derived element by element
      (all elements, or 4096 sampled ones for big cases) by a scalar function
      written straight from the format text;
    - fully masked rows are checked separately (weights 0, out 0, lse -inf).
* After writing, every file is read back with the ``safetensors`` library and
  the whole reference is recomputed from the file alone (inputs + metadata)
  and compared bit for bit.
* The safetensors bytes are written by st_io.py (sorted metadata keys,
  tensors ordered by element size then name, all data 8/4-byte aligned)
  because ``safetensors`` 0.7.0 serialises ``__metadata__`` from a hash map
  whose order changes from run to run; the files are checked to load with the
  ``safetensors`` library.

Pinned versions (tools/golden/requirements.txt)
-----------------------------------------------
torch==2.9.1, numpy==2.3.5, safetensors==0.7.0 (CPU only is enough).

How to run
----------
    /work/genvenv/bin/python tools/golden/make_cases.py --out tests/data/golden
    /work/genvenv/bin/python tools/golden/make_cases.py --check   # regenerate into a
        # temp dir and verify byte identity with the committed files
    /work/genvenv/bin/python tools/golden/make_cases.py --list    # print the case table
"""

from __future__ import annotations

import math
import os
import re
import sys
import warnings
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from gen_common import given, installed_versions, main, write_case, write_manifest  # tools/golden
from st_io import st_bytes, st_load  # tools/golden/st_io.py

FORMAT = "attnflow-golden/1"
PINNED = {"torch": "2.9.1", "numpy": "2.3.5", "safetensors": "0.7.0"}
XCHECK_TOL = 1e-10
F64 = torch.float64
NEG_INF = float("-inf")

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "golden")


# ---------------------------------------------------------------------------
# Case table
# ---------------------------------------------------------------------------

def M(kind, shape, p=0.6, dead=(), neginf=0.0):
    """Mask spec: kind 'bool' (p = probability of True = may attend; `dead`
    lists full-index rows (b, h, i) forced all-False, needs shape B,H,Lq,Lk)
    or 'float' (N(0, 1.5^2) values, fraction `neginf` set to -inf).
    `shape` is a tuple of symbols among B, H, Lq, Lk and the literal 1."""
    return dict(kind=kind, shape=tuple(shape), p=p, dead=tuple(dead), neginf=neginf)


def SDPA(name, desc, B, H, Lq, Lk, D, Hkv=None, Dv=None, scale=None, causal="none",
         mask=None, kv_lens=None, window=None, alibi=False, inputs="randn",
         dead=False, atol=None, rtol=None, tags=(), softcap=None, kv_align="padded",
         q_scale=1.0):
    """alibi: False, True (standard slopes [H]) or "per_batch" (random [B,H]
    slopes, FlashAttention's form); softcap: None or the cap; kv_align:
    "padded" or "per_sequence" (the diagonal of batch b counts from
    kv_lens[b]); q_scale multiplies q (pushes scores into the softcap)."""
    return dict(kind="sdpa", name=name, desc=desc, B=B, H=H, Hkv=Hkv or H, Lq=Lq, Lk=Lk,
                D=D, Dv=Dv or D, scale=scale, causal=causal, mask=mask, kv_lens=kv_lens,
                window=window, alibi=alibi, inputs=inputs, dead=dead, atol=atol,
                rtol=rtol, tags=tuple(tags), softcap=softcap, kv_align=kv_align,
                q_scale=q_scale)


def MHA(name, desc, B, H, Lq, Lk, E, Hkv=None, self_attn=True, causal="none", mask=None,
        kv_lens=None, dead=False, tags=()):
    assert not self_attn or Lq == Lk
    return dict(kind="mha", name=name, desc=desc, B=B, H=H, Hkv=Hkv or H, Lq=Lq, Lk=Lk,
                E=E, self_attn=self_attn, causal=causal, mask=mask, kv_lens=kv_lens,
                window=None, alibi=False, inputs="randn", dead=dead, atol=None, rtol=None,
                tags=tuple(tags), softcap=None, kv_align="padded", q_scale=1.0)


CASES = [
    # --- plain shapes ------------------------------------------------------
    SDPA("sdpa_basic", "B=2 H=2 Lq=Lk=7 D=8, no mask: the baseline",
         B=2, H=2, Lq=7, Lk=7, D=8),
    SDPA("sdpa_single_1x1", "Lq=Lk=1: one key, weights are exactly 1 and out == v",
         B=1, H=1, Lq=1, Lk=1, D=4),
    SDPA("sdpa_d1", "D=Dv=1 (degenerate head dim), Lq=7 Lk=13",
         B=2, H=2, Lq=7, Lk=13, D=1, tags=["d1"]),
    SDPA("sdpa_d5_dv13", "D=5, Dv=13 (not multiples of 8, Dv != D), H=3",
         B=1, H=3, Lq=7, Lk=9, D=5, Dv=13),
    SDPA("sdpa_d13_dv5_scale03", "D=13, Dv=5 with a custom scale 0.3 (not 1/sqrt(D))",
         B=2, H=1, Lq=9, Lk=7, D=13, Dv=5, scale=0.3),
    SDPA("sdpa_len63x65", "Lq=63, Lk=65 around a 64 tile boundary, no mask",
         B=1, H=1, Lq=63, Lk=65, D=8),
    SDPA("sdpa_len65x63_causal_tl", "Lq=65 > Lk=63, causal top_left: rows i >= 62 see all keys",
         B=1, H=1, Lq=65, Lk=63, D=8, causal="top_left"),
    SDPA("sdpa_len127x129_causal_br", "Lq=127, Lk=129 around a 128 tile boundary, causal bottom_right (prefill after a 2-token prefix), D=13 Dv=5",
         B=1, H=1, Lq=127, Lk=129, D=13, Dv=5, causal="bottom_right"),
    SDPA("sdpa_len129x7_causal_tl", "Lq=129 > Lk=7, causal top_left: a long query side over few keys",
         B=1, H=2, Lq=129, Lk=7, D=8, causal="top_left"),
    SDPA("sdpa_decode_lq1_lk129_mqa_kvlens", "decode step: Lq=1 over Lk=129, MQA (H=4, Hkv=1), causal bottom_right, kv_lens=[129,100]",
         B=2, H=4, Hkv=1, Lq=1, Lk=129, D=16, causal="bottom_right", kv_lens=[129, 100],
         tags=["decode"]),
    # --- GQA / MQA ---------------------------------------------------------
    SDPA("sdpa_gqa_h8_kv2", "GQA H=8 Hkv=2 (query head h reads kv head h // 4), no mask",
         B=1, H=8, Hkv=2, Lq=7, Lk=9, D=8),
    SDPA("sdpa_gqa_h8_kv2_causal_br_boolmask", "GQA H=8 Hkv=2, causal bottom_right Lq=5 < Lk=12 AND bool mask [B,1,1,Lk]",
         B=2, H=8, Hkv=2, Lq=5, Lk=12, D=8, causal="bottom_right",
         mask=M("bool", ("B", 1, 1, "Lk"), p=0.75)),
    SDPA("sdpa_mqa_h4_kv1_floatmask", "MQA H=4 Hkv=1 with a float mask [Lq,Lk]",
         B=2, H=4, Hkv=1, Lq=7, Lk=7, D=8, mask=M("float", ("Lq", "Lk"))),
    # --- masks -------------------------------------------------------------
    SDPA("sdpa_boolmask_2d", "bool mask [Lq,Lk] broadcast over B and H",
         B=2, H=2, Lq=7, Lk=9, D=8, mask=M("bool", ("Lq", "Lk"))),
    SDPA("sdpa_boolmask_3d_1lqlk", "bool mask [1,Lq,Lk] (rank 3; leading 1 aligns with H)",
         B=2, H=3, Lq=7, Lk=9, D=8, mask=M("bool", (1, "Lq", "Lk"))),
    SDPA("sdpa_boolmask_3d_hlqlk", "bool mask [H,Lq,Lk] (rank 3 aligns with H, not B; B=2 != H=3)",
         B=2, H=3, Lq=7, Lk=9, D=8, mask=M("bool", ("H", "Lq", "Lk"))),
    SDPA("sdpa_boolmask_4d_b11lk", "bool mask [B,1,1,Lk] (per-batch key padding pattern)",
         B=3, H=2, Lq=5, Lk=9, D=8, mask=M("bool", ("B", 1, 1, "Lk"), p=0.7)),
    SDPA("sdpa_boolmask_4d_dead_rows", "bool mask [B,H,Lq,Lk] with rows (b0,h1,i0) and (b1,h0,i3) all false: fully masked rows give weights 0, out 0, lse -inf",
         B=2, H=2, Lq=7, Lk=9, D=8,
         mask=M("bool", ("B", "H", "Lq", "Lk"), dead=[(0, 1, 0), (1, 0, 3)]), dead=True),
    SDPA("sdpa_floatmask_2d", "float mask [Lq,Lk] added to the scaled scores",
         B=2, H=2, Lq=7, Lk=9, D=8, mask=M("float", ("Lq", "Lk"))),
    SDPA("sdpa_floatmask_3d_1lqlk", "float mask [1,Lq,Lk]",
         B=2, H=3, Lq=7, Lk=9, D=8, mask=M("float", (1, "Lq", "Lk"))),
    SDPA("sdpa_floatmask_3d_h1lk", "float mask [H,1,Lk] (rank 3, broadcast over B and Lq)",
         B=2, H=3, Lq=7, Lk=9, D=8, mask=M("float", ("H", 1, "Lk"))),
    SDPA("sdpa_floatmask_4d_b11lk", "float mask [B,1,1,Lk]",
         B=3, H=2, Lq=5, Lk=9, D=8, mask=M("float", ("B", 1, 1, "Lk"))),
    SDPA("sdpa_floatmask_4d_full_neginf", "float mask [B,H,Lq,Lk] with ~30% -inf entries (no row entirely -inf)",
         B=2, H=2, Lq=7, Lk=9, D=8, mask=M("float", ("B", "H", "Lq", "Lk"), neginf=0.3)),
    SDPA("sdpa_floatmask_4d_b1lq1", "float mask [B,1,Lq,1]: a per-row constant, which shifts masked and lse but leaves weights unchanged",
         B=2, H=2, Lq=7, Lk=9, D=8, mask=M("float", ("B", 1, "Lq", 1))),
    # --- kv_lens -----------------------------------------------------------
    SDPA("sdpa_kvlens_zero", "kv_lens=[9,4,0]: padding keys masked; batch 2 has no key so all its rows are dead",
         B=3, H=2, Lq=5, Lk=9, D=8, kv_lens=[9, 4, 0], dead=True),
    SDPA("sdpa_kvlens_causal_br_boolmask", "kv_lens=[11,7] AND causal bottom_right AND bool mask [Lq,Lk], H=2 Hkv=1: every constraint is ANDed",
         B=2, H=2, Hkv=1, Lq=6, Lk=11, D=8, causal="bottom_right", kv_lens=[11, 7],
         mask=M("bool", ("Lq", "Lk"), p=0.8)),
    # --- causal alignment --------------------------------------------------
    SDPA("sdpa_causal_tl_lq7_lk13", "causal top_left with Lq=7 < Lk=13: row i sees keys 0..i",
         B=1, H=2, Lq=7, Lk=13, D=8, causal="top_left"),
    SDPA("sdpa_causal_br_lq7_lk13", "causal bottom_right with Lq=7 < Lk=13: row i sees keys 0..i+6",
         B=1, H=2, Lq=7, Lk=13, D=8, causal="bottom_right"),
    SDPA("sdpa_causal_tl_lq13_lk7", "causal top_left with Lq=13 > Lk=7: rows i >= 6 see every key",
         B=1, H=2, Lq=13, Lk=7, D=8, causal="top_left"),
    SDPA("sdpa_causal_br_lq13_lk7", "causal bottom_right with Lq=13 > Lk=7: the first 6 rows have no key (dead)",
         B=1, H=2, Lq=13, Lk=7, D=8, causal="bottom_right", dead=True),
    # --- numerics ----------------------------------------------------------
    SDPA("sdpa_large_logits_exact", "integer-valued q,k, D=16, scale 0.25: every score and scaled score is exact in f32 (multiples of 1/4, size ~1e3) (exp overflows without the max subtraction, even in f64); row 0 has an exact 2-way tie, row 1 a near tie, row 6 is -1024 for every key (exp underflows to 0 without the max subtraction; weights exactly 1/9)",
         B=1, H=2, Lq=7, Lk=9, D=16, inputs="large_int", tags=["large_logits"]),
    SDPA("sdpa_large_logits_random", "q,k ~ N(0,32^2), D=16, scale 0.25: scaled scores ~1e3 with near-ties; atol=rtol=1e-3 because ulp(1024) in f32 is 1.2e-4, so an f32 score is off by ~1e-4 absolute and moves weights (and out) by about as much",
         B=1, H=2, Lq=7, Lk=9, D=16, inputs="large_randn", atol=1e-3, rtol=1e-3,
         tags=["large_logits"]),
    # --- sliding window (extension) ---------------------------------------
    SDPA("sdpa_window_left3", "window left=3 only (right unbounded), Lq=9 Lk=13, no causal: key j allowed iff j >= i+4-3",
         B=1, H=2, Lq=9, Lk=13, D=8, window=(3, -1)),
    SDPA("sdpa_window_right2", "window right=2 only (left unbounded), Lq=9 Lk=13: key j allowed iff j <= i+4+2",
         B=1, H=2, Lq=9, Lk=13, D=8, window=(-1, 2)),
    SDPA("sdpa_window_both_lq13_lk9", "window left=2 right=1 with Lq=13 > Lk=9 (d = i-4): rows 0..2 have an empty window (dead)",
         B=1, H=2, Lq=13, Lk=9, D=8, window=(2, 1), dead=True),
    SDPA("sdpa_window_left8_causal_br", "sliding window left=8 with causal bottom_right, Lq=33 Lk=65 (chunked prefill): keys d-8..d",
         B=1, H=2, Lq=33, Lk=65, D=8, causal="bottom_right", window=(8, -1)),
    SDPA("sdpa_window_left6_causal_tl", "window left=6 with causal top_left, Lq=5 Lk=9: the window stays anchored on the bottom-right diagonal d=i+4, so row i sees keys i-2..i",
         B=1, H=2, Lq=5, Lk=9, D=8, causal="top_left", window=(6, -1)),
    # --- ALiBi (extension) -------------------------------------------------
    SDPA("sdpa_alibi_h8_causal_br", "ALiBi, H=8 standard slopes 2^-1..2^-8, causal bottom_right, Lq=7 Lk=12",
         B=1, H=8, Lq=7, Lk=12, D=8, causal="bottom_right", alibi=True),
    SDPA("sdpa_alibi_h6_floatmask", "ALiBi, H=6 (non power of two: slopes 2^-2,2^-4,2^-6,2^-8,2^-1,2^-3), no causal (bias -slope*|d-j| is symmetric), plus float mask [Lq,Lk], Hkv=3",
         B=2, H=6, Hkv=3, Lq=9, Lk=9, D=8, mask=M("float", ("Lq", "Lk")), alibi=True,
         tags=["alibi_non_pow2"]),
    SDPA("sdpa_alibi_h8_gqa_window_kvlens", "ALiBi H=8 with GQA Hkv=2, window left=6 right=0, kv_lens=[17,10], Lq=5 Lk=17; in batch 1 row 4 the window 10..16 lies past kv_len 10, so that row is dead in every head",
         B=2, H=8, Hkv=2, Lq=5, Lk=17, D=8, window=(6, 0), kv_lens=[17, 10], alibi=True,
         dead=True),
    # --- FlashAttention's extensions: softcap, [B,H] ALiBi, per-sequence diagonal
    SDPA("sdpa_softcap5_gqa_causal_br", "softcap 5 (scaled scores s -> 5*tanh(s/5) before masks), q x4 so most scores are capped, GQA H=4 Hkv=2, causal bottom_right Lq=9 Lk=13 and a bool key mask [B,1,1,Lk]",
         B=2, H=4, Hkv=2, Lq=9, Lk=13, D=16, causal="bottom_right", softcap=5.0, q_scale=4.0,
         mask=M("bool", ("B", 1, 1, "Lk"), p=0.85)),
    SDPA("sdpa_softcap_floatmask_alibi", "softcap 2.5 with a float mask [Lq,Lk] and standard ALiBi H=4 added after the cap (Gemma 2 / FlashAttention order), Lq=7 Lk=11",
         B=1, H=4, Lq=7, Lk=11, D=8, softcap=2.5, q_scale=3.0, mask=M("float", ("Lq", "Lk")),
         alibi=True),
    SDPA("sdpa_alibi_per_batch_window", "ALiBi slopes [B,H] (per batch, FlashAttention's form: rand*0.3), window left=4 right=2, no causal, B=3 H=2 Lq=6 Lk=10",
         B=3, H=2, Lq=6, Lk=10, D=8, alibi="per_batch", window=(4, 2)),
    SDPA("sdpa_kvlens_per_sequence_causal_br", "kv_lens=[12,7,3] with the per-sequence diagonal (kv_align=per_sequence, FlashAttention's cache_seqlens): d = i + kv_lens[b] - Lq; causal bottom_right with window left=5, Lq=4 Lk=12: batch 2 row 0 sees no key (dead)",
         B=3, H=2, Lq=4, Lk=12, D=8, causal="bottom_right", kv_lens=[12, 7, 3],
         kv_align="per_sequence", window=(5, -1), dead=True),
    SDPA("sdpa_kvlens_per_sequence_window_alibi_softcap", "per-sequence diagonal with window left=3 right=1, ALiBi [B,H], softcap 4, GQA H=4 Hkv=1, kv_lens=[9,5], Lq=3 Lk=9",
         B=2, H=4, Hkv=1, Lq=3, Lk=9, D=8, kv_lens=[9, 5], kv_align="per_sequence",
         window=(3, 1), alibi="per_batch", softcap=4.0, q_scale=2.0),
    # --- the chapter's pitfalls (docs/lab.md exercise 9; lab_port.py --break
    # names the bug, tests/golden/pitfalls_test.cc asserts the stage) -------
    SDPA("sdpa_pitfall_key_mask", "pitfall: a key-padding mask [B,1,1,Lk] with Lq=Lk, so a port that broadcasts it along the queries ([B,1,Lk,1]) still runs: its masked stage is wrong",
         B=2, H=2, Lq=6, Lk=6, D=8, mask=M("bool", ("B", 1, 1, "Lk"), p=0.7)),
    SDPA("sdpa_pitfall_padding_causal", "pitfall: causal top_left AND right padding kv_lens=[6,4], Lq=Lk=6: the padded keys stay hidden from every query even where the causal rule allows them (masks combine with AND, not OR)",
         B=2, H=2, Lq=6, Lk=6, D=8, causal="top_left", kv_lens=[6, 4]),
    SDPA("sdpa_pitfall_decode_offset", "pitfall: one decode step, Lq=1 over Lk=9 cached keys, causal bottom_right: the new query is position 8 and sees every key; a port that aligns it top-left (position 0) sees only key 0",
         B=1, H=2, Lq=1, Lk=9, D=8, causal="bottom_right", tags=["decode"]),
    SDPA("sdpa_pitfall_fp16_softmax", "pitfall: scaled scores up to ~30 (q x8, D=16): exp(30) = 1e13 overflows float16 (65504), so a float16 softmax without the max subtraction gives inf/NaN weights",
         B=1, H=2, Lq=5, Lk=9, D=16, q_scale=8.0),
    MHA("mha_pitfall_head_order", "pitfall: E=8 split into H=2 heads of Dh=4 (head h = columns 4h..4h+3); a port that reshapes [L,E] as [L,Dh,H] scrambles the heads: its q stage is wrong",
        B=1, H=2, Lq=5, Lk=5, E=8),
    # --- mha ---------------------------------------------------------------
    MHA("mha_self_e16_h4", "self-attention E=16 H=4 (Dh=4), B=2 L=7, no mask",
        B=2, H=4, Lq=7, Lk=7, E=16),
    MHA("mha_self_causal_kvlens", "self-attention E=16 H=4, causal top_left, kv_lens=[9,5,0] (batch 2 dead: heads_out 0, out = b_o)",
        B=3, H=4, Lq=9, Lk=9, E=16, causal="top_left", kv_lens=[9, 5, 0], dead=True),
    MHA("mha_cross_boolmask", "cross-attention Lq=5 Lk=11, E=16 H=4, bool mask [B,1,1,Lk]",
        B=2, H=4, Lq=5, Lk=11, E=16, self_attn=False, mask=M("bool", ("B", 1, 1, "Lk"), p=0.7)),
    MHA("mha_cross_floatmask_causal_br", "cross-attention Lq=6 Lk=10, E=16 H=4, float mask [B,H,Lq,Lk], causal bottom_right",
        B=2, H=4, Lq=6, Lk=10, E=16, self_attn=False, causal="bottom_right",
        mask=M("float", ("B", "H", "Lq", "Lk"))),
    MHA("mha_gqa_h4_kv2", "GQA self-attention E=16 H=4 Hkv=2 (w_k,w_v are [8,16]), causal bottom_right, float mask [Lq,Lk], kv_lens=[7,5]",
        B=2, H=4, Hkv=2, Lq=7, Lk=7, E=16, causal="bottom_right", kv_lens=[7, 5],
        mask=M("float", ("Lq", "Lk"))),
    MHA("mha_mqa_e12_h4_cross", "MQA cross-attention E=12 H=4 Hkv=1 (Dh=3, scale 1/sqrt(3)), Lq=3 Lk=13, bool mask [Lq,Lk], kv_lens=[13,6]",
        B=2, H=4, Hkv=1, Lq=3, Lk=13, E=12, self_attn=False, kv_lens=[13, 6],
        mask=M("bool", ("Lq", "Lk"))),
    MHA("mha_e20_h5_dead_row", "self-attention E=20 H=5 (odd H), bool mask [B,H,Lq,Lk] with row (b1,h2,i4) all false: that head's output row is 0",
        B=2, H=5, Lq=6, Lk=6, E=20,
        mask=M("bool", ("B", "H", "Lq", "Lk"), p=0.7, dead=[(1, 2, 4)]), dead=True),
]


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def alibi_slopes(n):
    """Exactly the reference `get_slopes` of ofirpress/attention_with_linear_biases."""
    def get_slopes_power_of_2(n):
        start = (2 ** (-2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio ** i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + alibi_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2])


def resolve_shape(shape, dims):
    return tuple(dims[s] if isinstance(s, str) else int(s) for s in shape)


def make_mask(spec, dims, g):
    shape = resolve_shape(spec["shape"], dims)
    if spec["kind"] == "bool":
        m = torch.rand(shape, generator=g) < spec["p"]
        for (b, h, i) in spec["dead"]:
            assert len(shape) == 4
            m[b, h, i, :] = False
        return m
    m = torch.randn(shape, generator=g, dtype=torch.float32) * 1.5
    if spec["neginf"] > 0:
        m[torch.rand(shape, generator=g) < spec["neginf"]] = NEG_INF
    return m


def constraints(B, H, Lq, Lk, causal, attn_mask=None, kv_lens=None, window=None,
                slopes=None, use_kv_lens=True, kv_align="padded"):
    """Boolean `allowed` [B,H,Lq,Lk] (AND of every rule) and float64 `additive`
    [B,H,Lq,Lk] (float mask + ALiBi bias), vectorised. slopes [H] or [B,H];
    kv_align="per_sequence" puts batch b's diagonal at i + kv_lens[b] - Lq."""
    i = torch.arange(Lq).view(1, 1, Lq, 1)
    j = torch.arange(Lk).view(1, 1, 1, Lk)
    if kv_align == "per_sequence" and kv_lens is not None:
        d = i + (kv_lens.view(B, 1, 1, 1) - Lq)  # each sequence's own bottom-right diagonal
    else:
        assert kv_align in ("padded", "per_sequence"), kv_align
        d = i + (Lk - Lq)  # bottom-right diagonal of query row i
    allowed = torch.ones(B, H, Lq, Lk, dtype=torch.bool)
    additive = torch.zeros(B, H, Lq, Lk, dtype=F64)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            allowed &= torch.broadcast_to(attn_mask, (B, H, Lq, Lk))
        else:
            additive += torch.broadcast_to(attn_mask.to(F64), (B, H, Lq, Lk))
    if kv_lens is not None and use_kv_lens:
        allowed &= j.view(1, 1, 1, Lk) < kv_lens.view(B, 1, 1, 1)
    if causal == "top_left":
        allowed &= j <= i
    elif causal == "bottom_right":
        allowed &= j <= d
    else:
        assert causal == "none", causal
    if window is not None:
        left, right = window
        if left >= 0:
            allowed &= j >= d - left
        if right >= 0:
            allowed &= j <= d + right
    if slopes is not None:
        sl = slopes.to(F64).view(1, H, 1, 1) if slopes.dim() == 1 else slopes.to(F64).view(B, H, 1, 1)
        additive += -sl * (d - j).abs().to(F64)
    return allowed, additive


def scalar_rule(b, h, i, j, Lq, Lk, causal, mask_np, kv_lens_np, window, slopes_np,
                kv_align="padded"):
    """One element of (allowed, additive), straight from the format text."""
    if kv_align == "per_sequence" and kv_lens_np is not None:
        d = i + (int(kv_lens_np[b]) - Lq)
    else:
        d = i + (Lk - Lq)
    ok, add = True, 0.0
    if mask_np is not None:
        full = (b, h, i, j)[4 - mask_np.ndim:]
        idx = tuple(0 if n == 1 else x for n, x in zip(mask_np.shape, full))
        if mask_np.dtype == np.bool_:
            ok = ok and bool(mask_np[idx])
        else:
            add += float(mask_np[idx])
    if kv_lens_np is not None and j >= kv_lens_np[b]:
        ok = False
    if causal == "top_left" and not j <= i:
        ok = False
    if causal == "bottom_right" and not j <= d:
        ok = False
    if window is not None:
        left, right = window
        if not ((left < 0 or j >= d - left) and (right < 0 or j <= d + right)):
            ok = False
    if slopes_np is not None:
        slope = slopes_np[h] if slopes_np.ndim == 1 else slopes_np[b, h]
        add += -float(slope) * abs(d - j)
    return ok, add


def check_scalar(allowed, additive, causal, mask, kv_lens, window, slopes, kv_align="padded"):
    B, H, Lq, Lk = allowed.shape
    mask_np = None if mask is None else mask.numpy()
    kv_np = None if kv_lens is None else kv_lens.numpy()
    sl_np = None if slopes is None else slopes.numpy()
    total = B * H * Lq * Lk
    if total <= 4096:
        flat = np.arange(total)
    else:
        flat = np.random.default_rng(1234).choice(total, size=4096, replace=False)
    for f in flat:
        b, h, i, j = np.unravel_index(int(f), (B, H, Lq, Lk))
        ok, add = scalar_rule(int(b), int(h), int(i), int(j), Lq, Lk, causal, mask_np, kv_np,
                              window, sl_np, kv_align)
        assert ok == bool(allowed[b, h, i, j]), ("allowed", b, h, i, j)
        a = float(additive[b, h, i, j])
        assert (a == add) or (math.isinf(a) and a == add) or abs(a - add) < 1e-12, \
            ("additive", b, h, i, j, a, add)


def attend(q, k, v, scale, allowed, additive, softcap=None):
    """Explicit float64 attention.  q [B,H,Lq,D], k [B,Hkv,Lk,D], v [B,Hkv,Lk,Dv].
    softcap: masked = cap * tanh(scaled / cap) + additive (the stage "scaled"
    stays before the cap)."""
    H, Hkv = q.shape[1], k.shape[1]
    assert H % Hkv == 0
    k_e = k.repeat_interleave(H // Hkv, dim=1)
    v_e = v.repeat_interleave(H // Hkv, dim=1)
    scores = q @ k_e.transpose(-1, -2)
    scaled = scores * scale
    capped = scaled if softcap is None else softcap * torch.tanh(scaled / softcap)
    masked = torch.where(allowed, capped + additive, torch.full_like(scaled, NEG_INF))
    m = masked.amax(dim=-1, keepdim=True)
    dead = torch.isneginf(m)
    m0 = torch.where(dead, torch.zeros_like(m), m)
    e = torch.exp(masked - m0)
    s = e.sum(dim=-1, keepdim=True)
    weights = torch.where(dead, torch.zeros_like(e), e / torch.where(dead, torch.ones_like(s), s))
    lse = torch.where(dead, torch.full_like(m, NEG_INF), m0 + torch.log(s)).squeeze(-1)
    out = weights @ v_e
    st = dict(scores=scores, scaled=scaled, masked=masked, weights=weights, lse=lse, out=out)
    for n, t in st.items():
        assert not torch.isnan(t).any(), n
        assert not torch.isposinf(t).any(), n
    return st, dead.squeeze(-1)


def assert_close(name, got, want, rows_live):
    """Compare on live rows (rows_live broadcast over the last dim)."""
    live = rows_live if rows_live.dim() == want.dim() else rows_live.unsqueeze(-1)
    live = live.expand_as(want)
    diff = (got[live] - want[live]).abs()
    md = float(diff.max()) if diff.numel() else 0.0
    assert md < XCHECK_TOL, f"{name}: max abs diff {md:.3e}"
    return md


def check_dead(stages, dead):
    if not dead.any():
        return
    w = stages["weights"][dead]
    assert (w == 0).all()
    assert torch.isneginf(stages["lse"][dead]).all()
    assert torch.isneginf(stages["masked"][dead]).all()
    assert (stages["out"][dead] == 0).all()


def to_f32(stages):
    return {n: t.to(torch.float32).contiguous() for n, t in stages.items()}


# ---------------------------------------------------------------------------
# sdpa
# ---------------------------------------------------------------------------

def gen_inputs_sdpa(c, g):
    B, H, Hkv, Lq, Lk, D, Dv = (c[x] for x in ("B", "H", "Hkv", "Lq", "Lk", "D", "Dv"))
    if c["inputs"] == "randn":
        q = torch.randn(B, H, Lq, D, generator=g)
        k = torch.randn(B, Hkv, Lk, D, generator=g)
    elif c["inputs"] == "large_int":
        # Integer-valued q, k: every score is an exact f32 integer and, with a
        # power-of-two scale, so is every scaled score (|s| ~ 1e3).
        assert H == Hkv and Lq == 7 and Lk == 9 and D == 16
        q = torch.randint(-32, 33, (B, H, Lq, D), generator=g).to(torch.float32)
        k = torch.randint(-32, 33, (B, Hkv, Lk, D), generator=g).to(torch.float32)
        k[:, :, :6] = q[:, :, :6]        # row i (< 6) peaks on its own key i
        k[:, :, 6] = k[:, :, 0]          # exact copy of key 0: a tie in row 0
        k[:, :, 7] = k[:, :, 1]
        k[:, :, 7, 0] += 1.0             # near copy of key 1: gap q[1,0]*scale in row 1
        k[:, :, :, 15] = 32.0            # a component shared by every key ...
        q[:, :, 6] = 0.0
        q[:, :, 6, 15] = -128.0          # ... so row 6 scores -4096 everywhere: scaled -1024
    elif c["inputs"] == "large_randn":
        q = torch.randn(B, H, Lq, D, generator=g) * 32
        k = torch.randn(B, Hkv, Lk, D, generator=g) * 32
        k[:, :, 4] = k[:, :, 2] + torch.randn(B, Hkv, D, generator=g) * 0.02  # near-tie
    else:
        raise ValueError(c["inputs"])
    v = torch.randn(B, Hkv, Lk, Dv, generator=g)
    return q.contiguous(), k.contiguous(), v.contiguous()


def build_sdpa(c):
    g = torch.Generator().manual_seed(zlib.crc32(c["name"].encode()))
    B, H, Hkv, Lq, Lk, D = (c[x] for x in ("B", "H", "Hkv", "Lq", "Lk", "D"))
    dims = dict(B=B, H=H, Lq=Lq, Lk=Lk)
    q, k, v = gen_inputs_sdpa(c, g)
    if c["q_scale"] != 1.0:
        q = (q * c["q_scale"]).contiguous()
    mask = make_mask(c["mask"], dims, g) if c["mask"] else None
    kv_lens = torch.tensor(c["kv_lens"], dtype=torch.int64) if c["kv_lens"] else None
    if c["alibi"] == "per_batch":
        slopes = torch.rand(B, H, generator=g) * 0.3  # FlashAttention's test slopes
    else:
        slopes = torch.tensor(alibi_slopes(H), dtype=torch.float32) if c["alibi"] else None
    scale = float(c["scale"]) if c["scale"] is not None else 1.0 / math.sqrt(D)

    inputs = dict(q=q, k=k, v=v, **given(attn_mask=mask, kv_lens=kv_lens, alibi_slopes=slopes))
    meta = dict(format=FORMAT, kind="sdpa", causal=c["causal"], scale=repr(scale))
    if c["window"] is not None:
        meta["window_left"], meta["window_right"] = (str(int(x)) for x in c["window"])
    if c["softcap"] is not None:
        meta["softcap"] = repr(float(c["softcap"]))
    if c["kv_align"] != "padded":
        meta["kv_align"] = c["kv_align"]
    return inputs, meta


def reference_sdpa(inputs, meta):
    """Stages in float64 from the stored inputs + metadata only."""
    q, k, v = (inputs[n].to(F64) for n in ("q", "k", "v"))
    B, H, Lq, _ = q.shape
    Lk = k.shape[2]
    window = None
    if "window_left" in meta or "window_right" in meta:
        window = (int(meta.get("window_left", "-1")), int(meta.get("window_right", "-1")))
    allowed, additive = constraints(B, H, Lq, Lk, meta["causal"], inputs.get("attn_mask"),
                                    inputs.get("kv_lens"), window, inputs.get("alibi_slopes"),
                                    kv_align=meta.get("kv_align", "padded"))
    softcap = float(meta["softcap"]) if "softcap" in meta else None
    stages, dead = attend(q, k, v, float(meta["scale"]), allowed, additive, softcap)
    return stages, dead, allowed, additive, window


def xcheck_sdpa(inputs, meta, stages, dead, allowed, additive, window):
    q, k, v = (inputs[n].to(F64) for n in ("q", "k", "v"))
    B, H, Lq, _ = q.shape
    Hkv, Lk = k.shape[1], k.shape[2]
    scale = float(meta["scale"])
    live = ~dead
    k_e = k.repeat_interleave(H // Hkv, dim=1)
    v_e = v.repeat_interleave(H // Hkv, dim=1)
    comb = torch.where(allowed, additive, torch.full_like(additive, NEG_INF))
    want = stages["out"]
    done = []

    def sdpa(qq, kk, vv, **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = F.scaled_dot_product_attention(qq, kk, vv, scale=scale, **kw)
        # Dead rows: torch may give NaN or 0 there; ours must be 0.
        dr = r[dead.unsqueeze(-1).expand_as(r)]
        assert (torch.isnan(dr) | (dr == 0)).all()
        return r

    def cmp(name, r):
        # torch 2.9 SDPA returns 0 (not NaN) on fully masked rows: then compare
        # every row; if a backend gives NaN there, compare the live rows only.
        rows = live if torch.isnan(r).any() else torch.ones_like(live)
        assert_close(name, r, want, rows)

    softcap = float(meta["softcap"]) if "softcap" in meta else None
    per_seq = meta.get("kv_align", "padded") == "per_sequence"
    slopes_bh = "alibi_slopes" in inputs and inputs["alibi_slopes"].dim() == 2
    if softcap is not None or per_seq or slopes_bh:
        # FlexAttention (eager, float64): the softcap, the additive terms and
        # the visibility rule as a score_mod of its own softmax.
        from torch.nn.attention.flex_attention import flex_attention

        def score_mod(score, b, h, qi, kv):
            x = score if softcap is None else softcap * torch.tanh(score / softcap)
            return torch.where(allowed[b, h, qi, kv], x + additive[b, h, qi, kv],
                               torch.full_like(x, NEG_INF))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "called without torch.compile()": expected
            r = flex_attention(q, k_e, v_e, score_mod=score_mod, scale=scale)
        cmp("flex_attention score_mod", r)
        done.append("flex_attention")
    if softcap is not None:
        # SDPA cannot cap scores; give it the capped logits as a float mask
        # (zero queries): softmax and P.V of an independent code path.
        capped = softcap * torch.tanh((q @ k_e.transpose(-1, -2)) * scale / softcap)
        cmp("sdpa on capped logits",
            sdpa(torch.zeros_like(q), k_e, v_e, attn_mask=torch.where(
                allowed, capped + additive, torch.full_like(additive, NEG_INF))))
        done.append("sdpa-capped-logits")
        comb = None
    else:
        cmp("sdpa combined float mask", sdpa(q, k_e, v_e, attn_mask=comb))
        done.append("sdpa-float")
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            cmp("sdpa MATH", sdpa(q, k_e, v_e, attn_mask=comb))
        done.append("sdpa-math")
    if H != Hkv and comb is not None:
        cmp("sdpa enable_gqa", sdpa(q, k, v, attn_mask=comb, enable_gqa=True))
        done.append("sdpa-gqa")
    if not (additive != 0).any() and softcap is None:
        cmp("sdpa bool mask", sdpa(q, k_e, v_e, attn_mask=allowed))
        done.append("sdpa-bool")
    others = ("kv_lens" in inputs or window is not None or "alibi_slopes" in inputs
              or softcap is not None)
    if "attn_mask" in inputs and not others and meta["causal"] == "none":
        m = inputs["attn_mask"]
        m = m if m.dtype == torch.bool else m.to(F64)
        cmp("sdpa raw user mask", sdpa(q, k_e, v_e, attn_mask=m))
        done.append("sdpa-rawmask")
    if "attn_mask" not in inputs and not others and meta["causal"] != "none":
        if meta["causal"] == "top_left":
            r = sdpa(q, k_e, v_e, is_causal=True)
            done.append("sdpa-is_causal")
        else:
            from torch.nn.attention.bias import causal_lower_right
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "will produce NaNs when Lq > Lk": expected
                bias = causal_lower_right(Lq, Lk)
            r = sdpa(q, k_e, v_e, attn_mask=bias)
            done.append("sdpa-causal_lower_right")
        cmp("sdpa causal", r)
    if "alibi_slopes" in inputs and not slopes_bh and not per_seq and softcap is None:
        # The ALiBi repo's form, bias = slope * j, differs from -slope*|d-j| by a
        # per-row constant wherever every allowed key has j <= d (causal), so
        # SDPA with it must give the same output there.
        i = torch.arange(Lq).view(Lq, 1)
        j = torch.arange(Lk).view(1, Lk)
        if bool((~allowed | (j <= i + (Lk - Lq))).all()):
            sl = inputs["alibi_slopes"].to(F64).view(1, H, 1, 1)
            fm = inputs.get("attn_mask")
            extra = 0.0 if fm is None or fm.dtype == torch.bool else fm.to(F64)
            rb = torch.where(allowed, sl * j.to(F64) + extra, torch.full_like(additive, NEG_INF))
            cmp("sdpa alibi repo-style bias", sdpa(q, k_e, v_e, attn_mask=rb))
            done.append("sdpa-alibi-repo-bias")
    # weights / lse against torch's own softmax / logsumexp of our masked stage
    assert_close("torch.softmax", torch.softmax(stages["masked"], dim=-1), stages["weights"], live)
    tl = torch.logsumexp(stages["masked"], dim=-1)
    assert torch.equal(torch.isneginf(tl), dead)
    assert_close("torch.logsumexp", tl, stages["lse"], live)
    done.append("softmax/logsumexp")
    return done


def finish_sdpa(inputs, meta):
    stages, dead, allowed, additive, window = reference_sdpa(inputs, meta)
    B, H, Lq, Lk = allowed.shape
    check_scalar(allowed, additive, meta["causal"], inputs.get("attn_mask"),
                 inputs.get("kv_lens"), window, inputs.get("alibi_slopes"),
                 meta.get("kv_align", "padded"))
    check_dead(stages, dead)
    done = xcheck_sdpa(inputs, meta, stages, dead, allowed, additive, window)
    return stages, dead, done


# ---------------------------------------------------------------------------
# mha
# ---------------------------------------------------------------------------

def build_mha(c):
    g = torch.Generator().manual_seed(zlib.crc32(c["name"].encode()))
    B, H, Hkv, Lq, Lk, E = (c[x] for x in ("B", "H", "Hkv", "Lq", "Lk", "E"))
    assert E % H == 0 and H % Hkv == 0
    Dh = E // H
    dims = dict(B=B, H=H, Lq=Lq, Lk=Lk)
    x_q = torch.randn(B, Lq, E, generator=g)
    if c["self_attn"]:
        x_k = x_q.clone()
        x_v = x_q.clone()
    else:
        x_k = torch.randn(B, Lk, E, generator=g)
        x_v = torch.randn(B, Lk, E, generator=g)
    bound = 1.0 / math.sqrt(E)

    def w(rows, cols):
        return (torch.rand(rows, cols, generator=g) * 2 - 1) * bound

    def bvec(n):
        return torch.randn(n, generator=g) * 0.1

    inputs = dict(x_q=x_q, x_k=x_k, x_v=x_v,
                  w_q=w(E, E), w_k=w(Hkv * Dh, E), w_v=w(Hkv * Dh, E),
                  b_q=bvec(E), b_k=bvec(Hkv * Dh), b_v=bvec(Hkv * Dh),
                  w_o=w(E, E), b_o=bvec(E))
    if c["mask"]:
        inputs["attn_mask"] = make_mask(c["mask"], dims, g)
    if c["kv_lens"]:
        inputs["kv_lens"] = torch.tensor(c["kv_lens"], dtype=torch.int64)
    meta = dict(format=FORMAT, kind="mha", causal=c["causal"],
                scale=repr(1.0 / math.sqrt(Dh)), num_heads=str(H), num_kv_heads=str(Hkv))
    return {n: t.contiguous() for n, t in inputs.items()}, meta


def reference_mha(inputs, meta):
    H, Hkv = int(meta["num_heads"]), int(meta.get("num_kv_heads", meta["num_heads"]))
    t = {n: x.to(F64) for n, x in inputs.items() if x.dtype == torch.float32 and n != "attn_mask"}
    B, Lq, E = t["x_q"].shape
    Lk = t["x_k"].shape[1]
    Dh = E // H
    q = (t["x_q"] @ t["w_q"].T + t["b_q"]).view(B, Lq, H, Dh).permute(0, 2, 1, 3)
    k = (t["x_k"] @ t["w_k"].T + t["b_k"]).view(B, Lk, Hkv, Dh).permute(0, 2, 1, 3)
    v = (t["x_v"] @ t["w_v"].T + t["b_v"]).view(B, Lk, Hkv, Dh).permute(0, 2, 1, 3)
    allowed, additive = constraints(B, H, Lq, Lk, meta["causal"], inputs.get("attn_mask"),
                                    inputs.get("kv_lens"))
    st, dead = attend(q, k, v, float(meta["scale"]), allowed, additive)
    heads_out = st.pop("out")
    concat = heads_out.permute(0, 2, 1, 3).reshape(B, Lq, E)
    out = concat @ t["w_o"].T + t["b_o"]
    stages = dict(q=q, k=k, v=v, **st, heads_out=heads_out, concat=concat, out=out)
    return stages, dead, allowed, additive


def xcheck_mha(inputs, meta, stages, dead):
    H, Hkv = int(meta["num_heads"]), int(meta["num_kv_heads"])
    t = {n: x.to(F64) for n, x in inputs.items() if x.dtype == torch.float32 and n != "attn_mask"}
    B, Lq, E = t["x_q"].shape
    Lk = t["x_k"].shape[1]
    Dh = E // H
    rep = H // Hkv
    # GQA/MQA: repeat each KV head's block of projection rows -> plain MHA weights
    wk = t["w_k"].view(Hkv, Dh, E).repeat_interleave(rep, dim=0).reshape(E, E)
    wv = t["w_v"].view(Hkv, Dh, E).repeat_interleave(rep, dim=0).reshape(E, E)
    bk = t["b_k"].view(Hkv, Dh).repeat_interleave(rep, dim=0).reshape(E)
    bv = t["b_v"].view(Hkv, Dh).repeat_interleave(rep, dim=0).reshape(E)
    mha = torch.nn.MultiheadAttention(E, H, bias=True, batch_first=True, dtype=F64)
    mha.eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([t["w_q"], wk, wv]))
        mha.in_proj_bias.copy_(torch.cat([t["b_q"], bk, bv]))
        mha.out_proj.weight.copy_(t["w_o"])
        mha.out_proj.bias.copy_(t["b_o"])
    # kv_lens -> key_padding_mask (True = ignore); the rest -> attn_mask (True = NOT allowed)
    allowed_nokv, additive = constraints(B, H, Lq, Lk, meta["causal"], inputs.get("attn_mask"),
                                         inputs.get("kv_lens"), use_kv_lens=False)
    float_mode = bool((additive != 0).any())
    if float_mode:
        am = torch.where(allowed_nokv, additive, torch.full_like(additive, NEG_INF))
    else:
        am = ~allowed_nokv
    am = am.reshape(B * H, Lq, Lk)
    if bool(allowed_nokv.all()) and not float_mode:
        am = None
    kpm = None
    if "kv_lens" in inputs:
        pad = torch.arange(Lk).view(1, Lk) >= inputs["kv_lens"].view(B, 1)
        kpm = torch.zeros(B, Lk, dtype=F64).masked_fill(pad, NEG_INF) if float_mode else pad
    live_rows = ~dead.any(dim=1)  # [B,Lq]: a query row whose every head is live
    done = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out, w = mha(t["x_q"], t["x_k"], t["x_v"], key_padding_mask=kpm, attn_mask=am,
                     need_weights=True, average_attn_weights=False)
        out2, _ = mha(t["x_q"], t["x_k"], t["x_v"], key_padding_mask=kpm, attn_mask=am,
                      need_weights=False)
    assert_close("nn.MultiheadAttention out", out, stages["out"], live_rows)
    assert_close("nn.MultiheadAttention weights", w, stages["weights"], ~dead)
    # need_weights=False goes through SDPA, which (torch 2.9) yields 0 for a fully
    # masked row instead of NaN, so there even the dead rows must agree.
    assert_close("nn.MultiheadAttention out (need_weights=False)", out2, stages["out"],
                 torch.ones_like(live_rows))
    done.append("nn.MultiheadAttention" + ("-gqa-expanded" if H != Hkv else ""))
    # dead rows: heads_out 0 for that head; out = concat @ w_o^T + b_o
    if dead.any():
        assert (stages["heads_out"][dead] == 0).all()
        fully = dead.all(dim=1)
        if fully.any():
            assert_close("dead out == b_o", stages["out"],
                         t["b_o"].expand_as(stages["out"]), fully)
    return done


def finish_mha(inputs, meta):
    stages, dead, allowed, additive = reference_mha(inputs, meta)
    check_scalar(allowed, additive, meta["causal"], inputs.get("attn_mask"),
                 inputs.get("kv_lens"), None, None)
    check_dead(dict(stages, out=stages["heads_out"]), dead)
    done = xcheck_mha(inputs, meta, stages, dead)
    # torch SDPA on the (float64) projected heads
    q, k, v = stages["q"], stages["k"], stages["v"]
    rep = q.shape[1] // k.shape[1]
    comb = torch.where(allowed, additive, torch.full_like(additive, NEG_INF))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, 1),
                                           v.repeat_interleave(rep, 1), attn_mask=comb,
                                           scale=float(meta["scale"]))
    assert_close("sdpa on mha heads", r, stages["heads_out"], ~dead)
    return stages, dead, done + ["sdpa-heads"]


# ---------------------------------------------------------------------------
# safetensors I/O (deterministic: st_io.py)
# ---------------------------------------------------------------------------

ST_DTYPE = {torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL"}


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

SDPA_STAGES = ("scores", "scaled", "masked", "weights", "lse", "out")
MHA_STAGES = ("q", "k", "v", "scores", "scaled", "masked", "weights", "lse", "heads_out",
              "concat", "out")


def covers(c, dead):
    """Semantic tags derived from the spec and the generated data."""
    tags = {c["kind"]}
    Lq, Lk = c["Lq"], c["Lk"]
    D = c["E"] // c["H"] if c["kind"] == "mha" else c["D"]
    Dv = D if c["kind"] == "mha" else c["Dv"]
    for L in sorted({Lq, Lk}):
        if L in (1, 7, 63, 65, 127, 129):
            tags.add(f"len_{L}")
    if D % 8:
        tags.add("d_not_mult_8")
    if Dv != D:
        tags.add("dv_ne_d")
    if c["B"] > 1:
        tags.add("multi_batch")
    if c["Hkv"] == 1 and c["H"] > 1:
        tags.add("mqa")
    elif c["Hkv"] != c["H"]:
        tags.add("gqa")
    if Lq < Lk:
        tags.add("lq_lt_lk")
    elif Lq > Lk:
        tags.add("lq_gt_lk")
    if c["causal"] != "none":
        tags.add("causal_" + c["causal"])
    if c["kind"] == "sdpa" and c["scale"] is not None:
        tags.add("custom_scale")
    if c["mask"]:
        r = len(c["mask"]["shape"])
        tags.add(f"{c['mask']['kind']}_mask_rank{r}")
        tags.add(f"{c['mask']['kind']}_mask_" + "x".join(str(s) for s in c["mask"]["shape"]))
        if c["mask"]["neginf"]:
            tags.add("float_mask_neginf")
    if c["kv_lens"]:
        tags.add("kv_lens")
        if 0 in c["kv_lens"]:
            tags.add("kv_lens_zero")
    if c["window"]:
        left, right = c["window"]
        if left >= 0:
            tags.add("window_left")
        if right >= 0:
            tags.add("window_right")
    if c["alibi"]:
        tags.add("alibi")
        if c["alibi"] == "per_batch":
            tags.add("alibi_per_batch")
        elif c["H"] & (c["H"] - 1):
            tags.add("alibi_non_pow2")
    if c["softcap"] is not None:
        tags.add("softcap")
    if c["kv_align"] == "per_sequence":
        tags.add("kv_align_per_sequence")
    if dead.any():
        tags.add("dead_rows")
    if c["kind"] == "mha":
        tags.add("mha_self" if c["self_attn"] else "mha_cross")
    tags.update(c["tags"])
    return sorted(tags)


REQUIRED_TAGS = [
    "sdpa", "mha", "len_1", "len_7", "len_63", "len_65", "len_127", "len_129", "d_not_mult_8",
    "dv_ne_d", "d1", "gqa", "mqa", "bool_mask_rank2", "bool_mask_rank3", "bool_mask_rank4",
    "float_mask_rank2", "float_mask_rank3", "float_mask_rank4", "kv_lens", "kv_lens_zero",
    "causal_top_left", "causal_bottom_right", "lq_lt_lk", "lq_gt_lk", "dead_rows",
    "large_logits", "custom_scale", "decode", "window_left", "window_right", "alibi",
    "alibi_non_pow2", "mha_self", "mha_cross", "softcap", "alibi_per_batch",
    "kv_align_per_sequence",
]


def generate_case(c):
    if c["kind"] == "sdpa":
        inputs, meta = build_sdpa(c)
        stages, dead, done = finish_sdpa(inputs, meta)
        names = SDPA_STAGES
    else:
        inputs, meta = build_mha(c)
        stages, dead, done = finish_mha(inputs, meta)
        names = MHA_STAGES
    assert bool(dead.any()) == c["dead"], f"{c['name']}: dead rows {int(dead.sum())}"
    if c["atol"] is not None:
        meta["atol"] = repr(float(c["atol"]))
    if c["rtol"] is not None:
        meta["rtol"] = repr(float(c["rtol"]))
    meta["description"] = c["desc"]
    out32 = to_f32({n: stages[n] for n in names})
    tensors = dict(inputs)
    for n in names:
        assert n not in tensors, n  # no stage name collides with an input name
        tensors[n] = out32[n]
    info = dict(dead_rows=int(dead.sum()), xchecks=done, covers=covers(c, dead))
    return st_bytes(tensors, meta, ST_DTYPE), info


def verify_file(path):
    """Reload with the safetensors library and recompute from the file alone."""
    tensors, meta = st_load(path)
    assert meta["format"] == FORMAT
    if meta["kind"] == "sdpa":
        inputs = {n: tensors[n] for n in ("q", "k", "v", "attn_mask", "kv_lens", "alibi_slopes")
                  if n in tensors}
        stages = reference_sdpa(inputs, meta)[0]
        names = SDPA_STAGES
    else:
        inputs = {n: tensors[n] for n in ("x_q", "x_k", "x_v", "w_q", "w_k", "w_v", "b_q", "b_k",
                                          "b_v", "w_o", "b_o", "attn_mask", "kv_lens")
                  if n in tensors}
        stages = reference_mha(inputs, meta)[0]
        names = MHA_STAGES
    for n in names:
        want = stages[n].to(torch.float32)
        got = tensors[n]
        assert got.dtype == torch.float32 and got.shape == want.shape, n
        assert torch.equal(got.view(torch.int32), want.contiguous().view(torch.int32)), \
            f"{path}: stage {n} not reproduced from the file"
    expected = set(inputs) | set(names)
    assert set(tensors) == expected, (path, set(tensors) ^ expected)


def generate_all(out_dir, quiet=False):
    os.makedirs(out_dir, exist_ok=True)
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z0-9_]+", n) for n in names)  # usable as test names
    manifest_cases = []
    tag_index = {}
    total = 0
    for c in CASES:
        data, info = generate_case(c)
        path, entry = write_case(out_dir, c["name"], data, kind=c["kind"], description=c["desc"],
                                 covers=info["covers"], dead_rows=info["dead_rows"],
                                 cross_checks=info["xchecks"])
        verify_file(path)
        total += len(data)
        manifest_cases.append(entry)
        for t in info["covers"]:
            tag_index.setdefault(t, []).append(c["name"])
        if not quiet:
            print(f"  {c['name']:<40} {len(data):>8} B  dead_rows={info['dead_rows']:<3} "
                  f"x={','.join(info['xchecks'])}")
    missing = [t for t in REQUIRED_TAGS if t not in tag_index]
    assert not missing, f"semantics not covered: {missing}"
    manifest = {
        "format": FORMAT,
        "generator": "tools/golden/make_cases.py",
        "generated_with": installed_versions(PINNED),
        "reference": "float64 from the stored F32 inputs, each stage rounded once to F32; "
                     "cross-checked against torch SDPA / nn.MultiheadAttention (float64, < 1e-10)",
        "extensions": {
            "window_left/window_right": "sdpa metadata, integers as strings, -1 = unbounded; "
                                        "with d = i + (Lk - Lq), key j allowed iff "
                                        "(left < 0 or j >= d - left) and (right < 0 or j <= d + right)",
            "alibi_slopes": "sdpa input F32 [H] or [B,H]; bias -slope[(b,)h] * |d - j| added "
                            "to the scaled score (part of the masked stage)",
            "softcap": "sdpa metadata, a decimal > 0: masked = softcap * tanh(scaled / softcap) "
                       "+ float mask + ALiBi (the scaled stage is before the cap)",
            "kv_align": "sdpa metadata 'per_sequence' (absent = padded): the diagonal of batch b "
                        "is d = i + kv_lens[b] - Lq (FlashAttention's cache_seqlens)",
        },
        "total_bytes": total,
        "cases": manifest_cases,
        "semantics": {t: tag_index[t] for t in sorted(tag_index)},
    }
    write_manifest(out_dir, manifest)
    return total, len(CASES)


if __name__ == "__main__":
    sys.exit(main(__doc__, DEFAULT_OUT, PINNED, "tools/golden/requirements.txt", generate_all, CASES))
