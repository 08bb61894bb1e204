# test_flash_grid.py — FlashAttention's own test grid (tests/test_flash_attn.py
# of Dao-AILab/flash-attention: test_flash_attn_output, _varlen_output,
# _causal and _kvcache), re-expressed on attnflow.flash, on the CPU.
#
# Invariants:
#  * The parameter grids are FlashAttention's (same values, same products);
#    each case is generated as FlashAttention generates it (random q/k/v,
#    softcap scaling q by the cap, random local windows, alibi slopes
#    rand(B, H) * 0.3, random padding lengths, block tables from randperm),
#    with batch 1 (the rule is per element; the batch only repeats it).
#  * FlashAttention's acceptance rule, with its reference written here from
#    its definitions (attention_ref, construct_local_mask,
#    attn_bias_from_alibi_slopes): max |attnflow - ref| <= 2 x max |pt - ref|
#    + 1e-5 for the output and for dq, dk, dv, where ref is the math path in
#    float64 and pt the same math path in the inputs' dtype with FlashAttention's
#    reordered ops (upcast=False, reorder_ops=True).
#  * Not run: dropout cases (attnflow computes exact attention), the cases
#    FlashAttention skips itself, kvcache cases with rotary embeddings inside
#    the call or cache_leftpad (not part of attnflow's API: apply RoPE before
#    the call) and 128K-key caches (their float64 reference does not fit the
#    CI machine). test_grid_accounting counts every reason over the full
#    grids (tens of thousands of cases); CI runs a seeded sample of the
#    runnable cases of each function (ATTNFLOW_FLASH_GRID=N per function,
#    default below).
import itertools
import math
import os
import random

import pytest
import torch

from attnflow import flash

N_PER_FUNCTION = int(os.environ.get("ATTNFLOW_FLASH_GRID", "8"))
F16, BF16 = torch.float16, torch.bfloat16


# ---- FlashAttention's reference, from its definitions -------------------------

def local_mask(Lq, Lk, window, q_lens=None, k_lens=None):
    """True = masked. Row i, key j, diagonal i + sk - sq (per sequence)."""
    i = torch.arange(Lq).view(1, 1, Lq, 1)
    j = torch.arange(Lk).view(1, 1, 1, Lk)
    sk = Lk if k_lens is None else k_lens.view(-1, 1, 1, 1)
    sq = Lq if q_lens is None else q_lens.view(-1, 1, 1, 1)
    if window[0] < 0:
        return j > i + sk - sq + window[1]
    skf = torch.full_like(j, Lk) if k_lens is None else sk
    return (j > torch.minimum(i + sk - sq + window[1], skf)) | (j < i + sk - sq - window[0])


def alibi_bias(slopes, Lq, Lk, q_lens=None, k_lens=None, causal=False):
    s = slopes.view(slopes.shape[0], slopes.shape[1], 1, 1)
    if causal:
        return torch.arange(-Lk + 1, 1, dtype=torch.float32) * s
    i = torch.arange(Lq).view(1, 1, Lq, 1)
    j = torch.arange(Lk).view(1, 1, 1, Lk)
    sk = Lk if k_lens is None else k_lens.view(-1, 1, 1, 1)
    sq = Lq if q_lens is None else q_lens.view(-1, 1, 1, 1)
    return -s * (i + sk - sq - j).abs().to(s.dtype)


def attention_ref(q, k, v, q_pad=None, k_pad=None, bias=None, causal=False, window=(-1, -1),
                  softcap=0.0, upcast=True, reorder_ops=False):
    """q [B,Lq,H,D], k/v [B,Lk,Hkv,D]; q_pad/k_pad [B,L] bool (True = real)."""
    if causal:
        window = (window[0], 0)
    dtype = q.dtype
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    Lq, Lk, H, D = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    k = k.repeat_interleave(H // k.shape[2], dim=2)
    v = v.repeat_interleave(H // v.shape[2], dim=2)
    if not reorder_ops:
        s = torch.einsum("bthd,bshd->bhts", q / math.sqrt(D), k)
    else:
        s = torch.einsum("bthd,bshd->bhts", q, k / math.sqrt(D))
    if softcap > 0:
        s = (s / softcap).tanh() * softcap
    q_lens = None if q_pad is None else q_pad.sum(-1)
    k_lens = None if k_pad is None else k_pad.sum(-1)
    if k_pad is not None:
        s = s.masked_fill(~k_pad.view(k_pad.shape[0], 1, 1, Lk), float("-inf"))
    lm = None
    if window[0] >= 0 or window[1] >= 0:
        lm = local_mask(Lq, Lk, window, q_lens, k_lens)
        s = s.masked_fill(lm, float("-inf"))
    if bias is not None:
        s = s + bias.to(s.dtype)
    p = torch.softmax(s, dim=-1).to(v.dtype)
    if lm is not None:
        p = p.masked_fill(lm.all(-1, keepdim=True), 0.0)
    if q_pad is not None:
        p = p.masked_fill(~q_pad.view(q_pad.shape[0], 1, Lq, 1), 0.0)
    out = torch.einsum("bhts,bshd->bthd", p, v)
    if q_pad is not None:
        out = out.masked_fill(~q_pad.view(q_pad.shape[0], Lq, 1, 1), 0.0)
    return out.to(dtype)


def padding_mask(L, B, gen):
    lens = torch.randint(max(1, L - 20), L + 1, (B, 1), generator=gen)
    return torch.arange(L).view(1, L) < lens


def check_rule(what, got, ref, pt):
    err = float((got.detach().double() - ref.detach().double()).abs().max())
    err_pt = float((pt.detach().double() - ref.detach().double()).abs().max())
    assert err <= 2 * err_pt + 1e-5, f"{what}: attnflow {err:.3g} vs pt {err_pt:.3g}"


def skip_output(c):
    if c["softcap"] > 0 and c["dropout_p"] > 0:
        return "FlashAttention: softcap and dropout not supported together"
    if c["dropout_p"] > 0:
        return "dropout: attnflow computes exact attention"
    return None


def skip_kvcache(c):
    Lq, Lk = c["seqlens"]
    if Lq > Lk and c["new_kv"]:
        return "FlashAttention: seqlen_q > seqlen_k with new_kv"
    if not c["new_kv"] and c["rotary_fraction"] > 0.0:
        return "FlashAttention: rotary without new_kv"
    if c["has_leftpad"] and c["paged_kv_block_size"] is not None:
        return "FlashAttention: leftpad with a paged cache"
    if math.floor(int(c["rotary_fraction"] * c["d"]) / 16) * 16 > 0:
        return "rotary_cos/sin: RoPE inside the call is not part of attnflow's API"
    if c["has_leftpad"]:
        return "cache_leftpad: not part of attnflow's API"
    if Lk >= 128 * 1024:
        return "a 128K-key cache: its float64 reference does not fit the CI machine"
    return None


def sample(grid, n, seed, skip=lambda c: None):
    """A seeded sample of n runnable cases, and the full grid's counts
    {"runnable": r, reason: count, ...}."""
    cases = [dict(zip(grid.keys(), c)) for c in itertools.product(*grid.values())]
    counts = {"runnable": 0}
    runnable = []
    for c in cases:
        why = skip(c)
        if why is None:
            runnable.append(c)
            counts["runnable"] += 1
        else:
            counts[why] = counts.get(why, 0) + 1
    random.Random(seed).shuffle(runnable)
    return runnable[:n], counts


def run_output(c, varlen):
    assert skip_output(c) is None
    gen = torch.Generator().manual_seed(0)
    Lq, Lk, d, dtype = c["seqlen_q"], c["seqlen_k"], c["d"], c["dtype"]
    B = 1
    H = 6 if c["softcap"] == 0.0 else 4
    Hk = H if c["mha_type"] == "mha" else (1 if c["mha_type"] == "mqa" else 2)
    window = (-1, -1) if not c["local"] else tuple(int(x) for x in torch.randint(0, Lk, (2,), generator=gen))
    q = torch.randn(B, Lq, H, d, generator=gen).to(dtype)
    if c["softcap"] > 0:
        q = q * c["softcap"]
    k = torch.randn(B, Lk, Hk, d, generator=gen).to(dtype)
    v = torch.randn(B, Lk, Hk, d, generator=gen).to(dtype)
    q_pad = k_pad = None
    if varlen:
        q_pad, k_pad = padding_mask(Lq, B, gen), padding_mask(Lk, B, gen)
    slopes = bias = None
    if c["alibi"]:
        slopes = torch.rand(B, H, generator=gen) * 0.3
        bias = alibi_bias(slopes, Lq, Lk, None if q_pad is None else q_pad.sum(-1),
                          None if k_pad is None else k_pad.sum(-1), c["causal"])
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    kw = dict(causal=c["causal"], window_size=window, softcap=c["softcap"], alibi_slopes=slopes,
              deterministic=c["deterministic"])
    if not varlen:
        if c["kvpacked"]:
            out = flash.flash_attn_kvpacked_func(q, torch.stack([k, v], 2), 0.0, **kw)
        else:
            out = flash.flash_attn_func(q, k, v, 0.0, **kw)
    else:
        lq, lk = q_pad.sum(-1), k_pad.sum(-1)
        cu_q = torch.cat([torch.zeros(1, dtype=torch.int32), lq.cumsum(0).int()])
        cu_k = torch.cat([torch.zeros(1, dtype=torch.int32), lk.cumsum(0).int()])
        qu, ku, vu = q[q_pad], k[k_pad], v[k_pad]
        if c["kvpacked"]:
            ou = flash.flash_attn_varlen_kvpacked_func(qu, torch.stack([ku, vu], 1), cu_q, cu_k,
                                                       int(lq.max()), int(lk.max()), 0.0, **kw)
        else:
            ou = flash.flash_attn_varlen_func(qu, ku, vu, cu_q, cu_k, int(lq.max()),
                                              int(lk.max()), 0.0, **kw)
        out = torch.zeros(B, Lq, H, d, dtype=ou.dtype).index_put((q_pad,), ou)
    rk = dict(q_pad=q_pad, k_pad=k_pad, bias=bias, causal=c["causal"], window=window,
              softcap=c["softcap"])
    out_ref = attention_ref(q, k, v, **rk)
    out_pt = attention_ref(q, k, v, upcast=False, reorder_ops=True, **rk)
    check_rule("out", out, out_ref, out_pt)
    g = torch.randn(out.shape, generator=gen).to(dtype)
    grads = [torch.autograd.grad(o, (q, k, v), g.to(o.dtype)) for o in (out, out_ref, out_pt)]
    for n, what in enumerate(("dq", "dk", "dv")):
        check_rule(what, grads[0][n], grads[1][n], grads[2][n])


SEQ_OUTPUT = [(113, 203), (128, 217), (113, 211), (108, 256), (256, 512), (512, 256),
              (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048)]
SEQ_VARLEN = [(1, 147), (113, 203), (128, 217), (113, 211), (108, 256), (256, 512),
              (512, 256), (1024, 1024), (1023, 1024), (1024, 1023), (2048, 2048)]
GRID_OUTPUT = dict(kvpacked=[True, False], dtype=[F16, BF16], mha_type=["mha", "mqa", "gqa"],
                   deterministic=[False, True], alibi=[False, True], local=[False, True],
                   causal=[False, True],
                   d=[32, 40, 59, 64, 96, 111, 128, 160, 192, 224, 256],
                   seqlens=SEQ_OUTPUT, dropout_p=[0.0, 0.17], softcap=[0.0, 50.0])
GRID_VARLEN = dict(GRID_OUTPUT, d=[32, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256],
                   seqlens=SEQ_VARLEN)
CASES_OUTPUT, COUNTS_OUTPUT = sample(GRID_OUTPUT, N_PER_FUNCTION, 1, skip_output)
CASES_VARLEN, COUNTS_VARLEN = sample(GRID_VARLEN, N_PER_FUNCTION, 2, skip_output)


def _id(c):
    return "-".join(f"{k}={getattr(v, '__name__', None) or str(v).replace('torch.', '')}"
                    for k, v in c.items())


@pytest.mark.parametrize("c", CASES_OUTPUT, ids=_id)
def test_flash_attn_output(c):
    c = dict(c, seqlen_q=c["seqlens"][0], seqlen_k=c["seqlens"][1])
    run_output(c, varlen=False)


@pytest.mark.parametrize("c", CASES_VARLEN, ids=_id)
def test_flash_attn_varlen_output(c):
    c = dict(c, seqlen_q=c["seqlens"][0], seqlen_k=c["seqlens"][1])
    run_output(c, varlen=True)


SEQ_CAUSAL = [(1, 239), (3, 799), (127, 512), (127, 513), (113, 203), (128, 217), (113, 211),
              (108, 256), (256, 512), (1023, 1024)]
GRID_CAUSAL = dict(dtype=[F16, BF16], local=[False, True],
                   d=[32, 40, 59, 64, 80, 96, 111, 128, 160, 192, 224, 256],
                   swap_sq_sk=[False, True], seqlens=SEQ_CAUSAL)
CASES_CAUSAL, COUNTS_CAUSAL = sample(GRID_CAUSAL, N_PER_FUNCTION, 3)


@pytest.mark.parametrize("c", CASES_CAUSAL, ids=_id)
def test_flash_attn_causal(c):
    Lq, Lk = c["seqlens"]
    if c["swap_sq_sk"]:
        Lq, Lk = Lk, Lq
    gen = torch.Generator().manual_seed(0)
    B, H, d, dtype = 1, 9, c["d"], c["dtype"]
    window = (-1, -1) if not c["local"] else tuple(int(x) for x in torch.randint(0, Lk, (2,), generator=gen))
    q, k, v = (torch.randn(B, L, H, d, generator=gen).to(dtype).requires_grad_()
               for L in (Lq, Lk, Lk))
    out = flash.flash_attn_func(q, k, v, 0.0, causal=True, window_size=window)
    out_ref = attention_ref(q, k, v, causal=True, window=window)
    out_pt = attention_ref(q, k, v, causal=True, window=window, upcast=False, reorder_ops=True)
    check_rule("out", out, out_ref, out_pt)
    g = torch.randn(out.shape, generator=gen).to(dtype)
    grads = [torch.autograd.grad(o, (q, k, v), g.to(o.dtype)) for o in (out, out_ref, out_pt)]
    for n, what in enumerate(("dq", "dk", "dv")):
        check_rule(what, grads[0][n], grads[1][n], grads[2][n])


SEQ_KVCACHE = [(1, 128), (1, 339), (3, 1024), (64, 800), (64, 256), (3, 799), (64, 2048),
               (16, 20000), (1, 128 * 1024), (16, 128 * 1024), (128, 128)]
GRID_KVCACHE = dict(dtype=[F16], num_splits=[1, 0], mha_type=["mha", "mqa", "gqa"],
                    new_kv=[False, True], alibi=[False, True], local=[False, True],
                    causal=[False, True], seqlen_new_eq_seqlen_q=[True, False],
                    rotary_interleaved=[False, True], rotary_fraction=[0.0, 0.5, 1.0],
                    paged_kv_block_size=[None, 256], has_leftpad=[False, True],
                    has_batch_idx=[False], d=[32, 59, 64, 80, 128, 256], seqlens=SEQ_KVCACHE)
CASES_KVCACHE, COUNTS_KVCACHE = sample(GRID_KVCACHE, 2 * N_PER_FUNCTION, 4, skip_kvcache)


@pytest.mark.parametrize("c", CASES_KVCACHE, ids=_id)
def test_flash_attn_kvcache(c):
    assert skip_kvcache(c) is None
    Lq, Lk = c["seqlens"]
    new_kv, d, dtype = c["new_kv"], c["d"], c["dtype"]
    gen = torch.Generator().manual_seed(0)
    B, H = 2, 6
    Hk = H if c["mha_type"] == "mha" else (1 if c["mha_type"] == "mqa" else 3)
    window = (-1, -1) if not c["local"] else tuple(int(x) for x in torch.randint(0, Lk, (2,), generator=gen))
    q = torch.randn(B, Lq, H, d, generator=gen).to(dtype)
    Lnew = Lq if c["seqlen_new_eq_seqlen_q"] else int(torch.randint(1, Lq + 1, (1,), generator=gen))
    k = v = None
    if new_kv:
        k = torch.randn(B, Lnew, Hk, d, generator=gen).to(dtype)
        v = torch.randn(B, Lnew, Hk, d, generator=gen).to(dtype)
    page = c["paged_kv_block_size"]
    if page is None:
        k_cache = torch.randn(B, Lk, Hk, d, generator=gen).to(dtype)
        v_cache = torch.randn(B, Lk, Hk, d, generator=gen).to(dtype)
        block_table = None
    else:
        nblocks = math.ceil(Lk / page) * B * 3
        k_paged = torch.randn(nblocks, page, Hk, d, generator=gen).to(dtype)
        v_paged = torch.randn(nblocks, page, Hk, d, generator=gen).to(dtype)
        block_table = torch.randperm(nblocks, generator=gen).to(torch.int32).view(B, -1)
        k_cache = k_paged[block_table.long().flatten()].view(B, -1, Hk, d)[:, :Lk]
        v_cache = v_paged[block_table.long().flatten()].view(B, -1, Hk, d)[:, :Lk]
    cache_seqlens = torch.randint(0 if new_kv else 1, (Lk - Lnew + 1) if new_kv else (Lk + 1),
                                  (B,), generator=gen).to(torch.int32)
    key_pad = torch.arange(Lk).view(1, Lk) < (cache_seqlens.view(B, 1) + (Lnew if new_kv else 0))
    slopes = bias = None
    if c["alibi"]:
        slopes = torch.rand(B, H, generator=gen) * 0.3
        bias = alibi_bias(slopes, Lq, Lk, None, key_pad.sum(-1), c["causal"])
    k_ref, v_ref = k_cache.clone(), v_cache.clone()
    if new_kv:
        upd = (cache_seqlens.view(B, 1) <= torch.arange(Lk)) & (
            torch.arange(Lk) < cache_seqlens.view(B, 1) + Lnew)
        k_ref[upd] = k.reshape(-1, Hk, d)
        v_ref[upd] = v.reshape(-1, Hk, d)
    out = flash.flash_attn_with_kvcache(
        q, k_cache if page is None else k_paged, v_cache if page is None else v_paged, k, v,
        cache_seqlens=cache_seqlens, block_table=block_table, causal=c["causal"],
        window_size=window, alibi_slopes=slopes, num_splits=c["num_splits"])
    rk = dict(k_pad=key_pad, bias=bias, causal=c["causal"], window=window)
    out_ref = attention_ref(q, k_ref, v_ref, **rk)
    out_pt = attention_ref(q, k_ref, v_ref, upcast=False, reorder_ops=True, **rk)
    if new_kv:  # the new keys/values were written into the cache in place
        if page is None:
            sel_k, sel_v = k_cache, v_cache
        else:
            sel_k = k_paged[block_table.long().flatten()].view(B, -1, Hk, d)[:, :Lk]
            sel_v = v_paged[block_table.long().flatten()].view(B, -1, Hk, d)[:, :Lk]
        assert torch.equal(sel_k, k_ref) and torch.equal(sel_v, v_ref)
    check_rule("out", out, out_ref, out_pt)


def test_grid_accounting():
    """Every case of the four grids is run or skipped for a stated reason
    (pytest -s prints the counts)."""
    for name, counts in (("output", COUNTS_OUTPUT), ("varlen_output", COUNTS_VARLEN),
                         ("causal", COUNTS_CAUSAL), ("kvcache", COUNTS_KVCACHE)):
        total = sum(counts.values())
        print(f"\nFlashAttention test_flash_attn_{name}: {total} cases: "
              + ", ".join(f"{k} {v}" for k, v in counts.items()))
        assert counts["runnable"] > 0
        for why in counts:
            assert why == "runnable" or why.startswith(("FlashAttention:", "dropout", "rotary",
                                                        "cache_leftpad", "a 128K"))
