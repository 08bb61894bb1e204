# test_sdpa.py — attnflow.scaled_dot_product_attention against torch 2.9's
# torch.nn.functional.scaled_dot_product_attention, evaluated in float64.
#
# Invariants:
#  * Expected values come from torch in float64 (the same rounded K/V values
#    for float16/bfloat16 inputs) or, for attnflow's extensions torch lacks
#    (kv_lens, window, ALiBi, bottom-right causal, LSE), from an independent
#    NumPy float64 implementation of docs/semantics.md written here.
#  * Tolerances are relative to the float64 result: |got - ref| <= atol +
#    rtol*|ref| with atol scaled by max|V|, and attnflow's error must also stay
#    within a small multiple of torch float32's own error on the same case.
#  * The sweep is seeded (numpy PCG64 per case index): >= 500 cases over odd
#    lengths, GQA ratios, bool/float masks of every broadcast rank, is_causal,
#    custom scale, transposed / strided / expanded inputs, float16/bfloat16
#    K/V, fully masked rows, ranks 2..5 and torch + NumPy inputs.
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnflow

N_CASES = 600
KV_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _layout(rng, shape, dtype, layout):
    """A float64 random tensor cast to dtype, stored with the given layout."""
    B, H, L, E = shape
    if layout == "transposed":  # [B, L, H, E] storage viewed as [B, H, L, E]
        return torch.from_numpy(rng.standard_normal((B, L, H, E))).to(dtype).transpose(1, 2)
    if layout == "strided":  # every other element of the last dim
        return torch.from_numpy(rng.standard_normal((B, H, L, 2 * E))).to(dtype)[..., ::2]
    if layout == "expanded" and H > 1:  # stride 0 over heads
        return torch.from_numpy(rng.standard_normal((B, 1, L, E))).to(dtype).expand(B, H, L, E)
    return torch.from_numpy(rng.standard_normal(shape)).to(dtype)


def make_case(i):
    rng = np.random.default_rng(20260 + i)
    c = {}
    B = int(rng.choice([1, 2, 3]))
    Hkv = int(rng.choice([1, 2, 3]))
    G = int(rng.choice([1, 1, 2, 4]))
    H = Hkv * G
    L = int(rng.integers(1, 40))
    S = int(rng.integers(1, 48))
    E = int(rng.choice([1, 3, 8, 16, 31, 64, 80]))
    Ev = E if rng.random() < 0.7 else int(rng.choice([5, 16, 33]))
    kv_dtype = str(rng.choice(list(KV_DTYPES), p=[0.5, 0.25, 0.25]))
    layout = str(rng.choice(["contiguous", "transposed", "strided", "expanded"]))
    q = _layout(rng, (B, H, L, E), torch.float32, layout)
    k = _layout(rng, (B, Hkv, S, E), KV_DTYPES[kv_dtype], layout)
    v = _layout(rng, (B, Hkv, S, Ev), KV_DTYPES[kv_dtype], layout)
    mask_kind = str(rng.choice(["none", "bool", "float"]))
    mask = None
    if mask_kind != "none":
        full = [B, H, L, S]
        mshape = [d if rng.random() < 0.6 else 1 for d in full]
        drop = int(rng.integers(0, 3))  # rank 4, 3 or 2
        mshape = mshape[drop:]
        if mask_kind == "bool":
            mask = torch.from_numpy(rng.random(mshape) < 0.8)
            if rng.random() < 0.3 and mshape[-2] > 1:
                mask[..., int(rng.integers(0, mshape[-2])), :] = False  # fully masked row
        else:
            mask = torch.from_numpy(rng.standard_normal(mshape) * 2).float()
            mask[torch.from_numpy(rng.random(mshape) < 0.1)] = -math.inf
            if rng.random() < 0.3 and mshape[-2] > 1:
                mask[..., int(rng.integers(0, mshape[-2])), :] = -math.inf
    c["is_causal"] = bool(rng.random() < 0.3)
    c["scale"] = None if rng.random() < 0.6 else float(rng.uniform(0.05, 1.5))
    c["rank"] = int(rng.choice([2, 3, 4, 4, 4, 5]))
    c["numpy"] = bool(rng.random() < 0.2 and kv_dtype != "bfloat16")
    c.update(q=q, k=k, v=v, mask=mask, gqa=G > 1, desc=(
        f"case {i}: B{B} H{H} Hkv{Hkv} L{L} S{S} E{E} Ev{Ev} kv={kv_dtype} layout={layout} "
        f"mask={mask_kind}{list(mask.shape) if mask is not None else ''} "
        f"causal={c['is_causal']} scale={c['scale']} rank={c['rank']} numpy={c['numpy']}"))
    return c


def _reshape_rank(x, rank):
    """Rank 4 -> the requested rank (2, 3: drop leading size-1 dims after
    flattening batch*heads; 5: split the batch dim)."""
    if x is None:
        return None
    if rank == 4:
        return x
    if rank == 5:
        return x.unsqueeze(0)
    if rank == 3:
        return x.reshape(-1, *x.shape[2:]) if x.dim() == 4 else x
    return x.reshape(-1, *x.shape[-2:])[0] if x.dim() >= 3 else x


@pytest.mark.parametrize("i", range(N_CASES))
def test_matches_torch_float64(i):
    c = make_case(i)
    q, k, v, mask = c["q"], c["k"], c["v"], c["mask"]
    rank = c["rank"]
    if rank in (2, 3):
        # Lower ranks: heads fold into batch (no GQA), masks must broadcast
        # over the folded dims, so keep only [L, S] masks there.
        if c["gqa"] or (mask is not None and mask.dim() > 2):
            rank = 4
        elif rank == 2 and q.shape[0] * q.shape[1] != 1:
            rank = 3
    q, k, v = (_reshape_rank(x, rank) for x in (q, k, v))
    kw = dict(is_causal=c["is_causal"], scale=c["scale"], enable_gqa=c["gqa"])
    if mask is not None and c["is_causal"]:
        # torch's documented rule (its float64 path raises); attnflow raises too.
        with pytest.raises(ValueError, match="is_causal"):
            attnflow.scaled_dot_product_attention(q, k, v, mask, **kw)
        kw["is_causal"] = False
    ref = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(),
        attn_mask=None if mask is None else (mask if mask.dtype == torch.bool else mask.double()),
        **kw)
    t32 = F.scaled_dot_product_attention(q, k.float(), v.float(), attn_mask=mask, **kw)
    if c["numpy"]:
        got = attnflow.scaled_dot_product_attention(
            q.numpy(), k.numpy(), v.numpy(), None if mask is None else mask.numpy(), **kw)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        got = torch.from_numpy(got)
    else:
        got = attnflow.scaled_dot_product_attention(q, k, v, mask, **kw)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert tuple(got.shape) == tuple(ref.shape), c["desc"]
    assert torch.isfinite(got).all(), c["desc"]
    vmax = max(1.0, float(v.double().abs().max())) if v.numel() else 1.0
    err = (got.double() - ref).abs()
    err32 = (t32.double() - ref).abs()
    tol = 2e-5 * vmax + 2e-5 * ref.abs()
    assert bool((err <= tol).all()), f"{c['desc']}: max err {float(err.max()):.3g}"
    # Not worse than torch's own float32 result by more than a small factor.
    assert float(err.max()) <= max(4 * float(err32.max()), 2e-6 * vmax), (
        f"{c['desc']}: attnflow err {float(err.max()):.3g} vs torch f32 {float(err32.max()):.3g}")


# ---- extensions against an independent NumPy float64 oracle -------------------

def oracle(q, k, v, *, mask=None, causal="none", scale=None, kv_lens=None, window=None,
           alibi=None):
    """docs/semantics.md in float64 NumPy: out [B,H,L,Dv], lse [B,H,L]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    G = H // Hkv
    k = np.repeat(k, G, axis=1)
    v = np.repeat(v, G, axis=1)
    s = (1 / math.sqrt(E)) if scale is None else scale
    scores = np.einsum("bhld,bhsd->bhls", q, k) * s
    i = np.arange(L)[:, None]
    j = np.arange(S)[None, :]
    d = i + (S - L)
    allow = np.ones((B, H, L, S), bool)
    if causal == "top_left":
        allow &= j <= i
    elif causal == "bottom_right":
        allow &= j <= d
    if window is not None:
        left, right = window
        if left is not None and left >= 0:
            allow &= j >= d - left
        if right is not None and right >= 0:
            allow &= j <= d + right
    if kv_lens is not None:
        allow &= (j[None, :, :] < np.asarray(kv_lens)[:, None, None])[:, None]
    if alibi is not None:
        scores = scores - np.asarray(alibi, np.float64)[None, :, None, None] * np.abs(d - j)
    if mask is not None:
        m = np.broadcast_to(np.asarray(mask), (B, H, L, S))
        if m.dtype == bool:
            allow &= m
        else:
            scores = scores + m
    scores = np.where(allow, scores, -np.inf)
    mx = scores.max(-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0)
    e = np.exp(scores - mx)
    tot = e.sum(-1, keepdims=True)
    w = np.where(tot > 0, e / np.where(tot > 0, tot, 1), 0)
    with np.errstate(divide="ignore"):
        lse = np.where(tot[..., 0] > 0, np.log(np.where(tot[..., 0] > 0, tot[..., 0], 1)) + mx[..., 0],
                       -np.inf)
    return np.einsum("bhls,bhsd->bhld", w, v), lse


@pytest.mark.parametrize("i", range(120))
def test_extensions_match_numpy_oracle(i):
    rng = np.random.default_rng(777 + i)
    B, Hkv, G = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.choice([1, 2, 3]))
    H, L, S, E = Hkv * G, int(rng.integers(1, 30)), int(rng.integers(1, 40)), int(rng.choice([4, 16, 33]))
    q = rng.standard_normal((B, H, L, E)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, S, E)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, S, E)).astype(np.float32)
    kw = {}
    if rng.random() < 0.5:
        kw["causal"] = str(rng.choice(["top_left", "bottom_right"]))
    if rng.random() < 0.5:
        kw["kv_lens"] = rng.integers(0, S + 1, size=B).astype(np.int64)
    if rng.random() < 0.5:
        kw["window"] = (int(rng.integers(-1, 8)), int(rng.integers(-1, 8)))
    if rng.random() < 0.4:
        kw["alibi_slopes"] = (2.0 ** -np.arange(1, H + 1)).astype(np.float32)
    kernel = str(rng.choice(["auto", "tiled_prefill", "split_kv_decode", "reference"]))
    out, lse = attnflow.scaled_dot_product_attention(q, k, v, enable_gqa=True, return_lse=True,
                                                     kernel=kernel, **kw)
    eo, el = oracle(q, k, v, mask=None, causal=kw.get("causal", "none"), kv_lens=kw.get("kv_lens"),
                    window=kw.get("window"), alibi=kw.get("alibi_slopes"))
    np.testing.assert_allclose(out, eo, atol=2e-5, rtol=2e-5, err_msg=f"{kw} kernel={kernel}")
    fin = np.isfinite(el)
    assert np.array_equal(np.isfinite(lse), fin)
    np.testing.assert_allclose(lse[fin], el[fin], atol=2e-5, rtol=2e-5)
    assert (lse[~fin] == -np.inf).all()


def test_lse_matches_torch_logsumexp():
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(2, 4, 9, 16, generator=g) for _ in range(3))
    m = torch.rand(9, 9, generator=g) < 0.7
    out, lse = attnflow.scaled_dot_product_attention(q, k, v, m, return_lse=True)
    s = (q.double() @ k.double().transpose(-1, -2)) / 4.0
    s = s.masked_fill(~m, -math.inf)
    ref = torch.logsumexp(s, -1)
    fin = torch.isfinite(ref)
    assert torch.equal(torch.isfinite(lse), fin)
    assert torch.allclose(lse.double()[fin], ref[fin], atol=1e-5, rtol=1e-5)


def test_merge_attention_states_equals_full_attention():
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 3, 5, 8, generator=g)
    k = torch.randn(2, 3, 21, 8, generator=g)
    v = torch.randn(2, 3, 21, 6, generator=g)
    oa, la = attnflow.scaled_dot_product_attention(q, k[:, :, :9], v[:, :, :9], return_lse=True)
    ob, lb = attnflow.scaled_dot_product_attention(q, k[:, :, 9:], v[:, :, 9:], return_lse=True)
    out, lse = attnflow.merge_attention_states(oa, la, ob, lb)
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert torch.allclose(out.double(), ref, atol=1e-5, rtol=1e-5)
    ref_lse = torch.logsumexp((q.double() @ k.double().transpose(-1, -2)) / math.sqrt(8), -1)
    assert torch.allclose(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)


def test_float64_query_uses_the_reference_and_warns():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 7, 5)) for _ in range(3))
    with pytest.warns(attnflow.Float64ReferenceWarning, match="float64 reference"):
        got = attnflow.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert got.dtype == np.float64
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit kernel="reference" does not warn
        attnflow.scaled_dot_product_attention(q, k, v, is_causal=True, kernel="reference")
    ref = F.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)), is_causal=True)
    np.testing.assert_allclose(got, ref.numpy(), atol=1e-12, rtol=1e-12)


def test_zero_copy_outputs_are_fresh_and_inputs_untouched():
    q = torch.randn(1, 2, 4, 8)
    before = q.clone()
    out = attnflow.scaled_dot_product_attention(q, q, q)
    assert torch.equal(q, before)
    assert out.data_ptr() != q.data_ptr()


def test_requires_grad_inputs_get_a_graph():
    """(Autograd itself: test_autograd.py.)"""
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    out = attnflow.scaled_dot_product_attention(q, q, q)
    ref = F.scaled_dot_product_attention(q.detach().double(), q.detach().double(), q.detach().double())
    assert out.grad_fn is not None
    assert torch.allclose(out.detach().double(), ref, atol=1e-5)


def test_dlpack_producer_input():
    class Producer:  # any object with the DLPack protocol (here backed by NumPy)
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    got = attnflow.scaled_dot_product_attention(Producer(q), Producer(q), Producer(q))
    np.testing.assert_allclose(got, attnflow.scaled_dot_product_attention(q, q, q), rtol=0, atol=0)


def test_negative_strides_are_copied():
    rng = np.random.default_rng(8)
    q = rng.standard_normal((1, 2, 6, 4)).astype(np.float32)
    rev = q[:, :, ::-1]
    got = attnflow.scaled_dot_product_attention(rev, rev, rev)
    ref = attnflow.scaled_dot_product_attention(*(np.ascontiguousarray(rev),) * 3)
    np.testing.assert_array_equal(got, ref)
