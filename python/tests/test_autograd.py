# test_autograd.py — autograd, torch.compile and torch.export of attnflow's
# attention (the custom ops of attnflow/_torch_ops.py).
#
# Invariants:
#  * Expected gradients come from torch autograd of the attention formula
#    written out here in plain torch ops (the "math path": scores, masks,
#    softcap, ALiBi, softmax, P.V), evaluated in float64; float64 inputs are
#    also checked by torch.autograd.gradcheck (finite differences).
#  * FlashAttention's rule for gradients: attnflow's error against the
#    float64 math gradient is at most 2x the error of the same math path run
#    in the inputs' dtype (float32 here), plus a small absolute slack
#    (FLOOR x the gradient's scale) for near-degenerate rows whose plain
#    float32 gradient happens to be exact.
#  * Nothing that requires grad is silently detached: results carry a
#    grad_fn, and inputs without a gradient (mask, ALiBi slopes) are errors.
import math

import numpy as np
import pytest
import torch

import attnflow
from attnflow import flash

FLOOR = 1e-6


def math_attention(q, k, v, *, mask=None, causal="none", scale=None, kv_lens=None, window=None,
                   alibi=None, softcap=0.0, per_sequence=False, return_lse=False):
    """docs/semantics.md in plain torch ops (differentiable in q, k, v).
    q [B,H,L,E], k/v [B,Hkv,S,*]; rows without a visible key give 0."""
    B, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(E) if scale is None else scale)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(L).view(1, 1, L, 1)
    j = torch.arange(S).view(1, 1, 1, S)
    lens = torch.full((B,), S) if kv_lens is None else torch.as_tensor(kv_lens)
    d = i + ((lens.view(B, 1, 1, 1) if per_sequence else S) - L)
    allow = torch.ones(B, H, L, S, dtype=torch.bool)
    if causal == "top_left":
        allow = allow & (j <= i)
    elif causal == "bottom_right":
        allow = allow & (j <= d)
    if window is not None:
        if window[0] >= 0:
            allow = allow & (j >= d - window[0])
        if window[1] >= 0:
            allow = allow & (j <= d + window[1])
    allow = allow & (j < lens.view(B, 1, 1, 1))
    if alibi is not None:
        a = torch.as_tensor(alibi, dtype=s.dtype)
        a = a.view(1, H, 1, 1) if a.dim() == 1 else a.view(B, H, 1, 1)
        s = s - a * (d - j).abs().to(s.dtype)
    if mask is not None:
        if mask.dtype == torch.bool:
            allow = allow & mask
        else:
            s = s + mask.to(s.dtype)
    s = s.masked_fill(~allow, -math.inf)
    dead = ~allow.any(-1, keepdim=True) | torch.isneginf(s).all(-1, keepdim=True)
    s = s.masked_fill(dead, 0.0)
    p = torch.softmax(s, -1).masked_fill(dead, 0.0)
    out = p @ v
    if not return_lse:
        return out
    lse = torch.logsumexp(s, -1).masked_fill(dead[..., 0], -math.inf)
    return out, lse


def _options(rng, B, H, L, S):
    kw = {}
    r = rng.random
    if r() < 0.5:
        kw["causal"] = str(rng.choice(["top_left", "bottom_right"]))
    if r() < 0.4:
        kw["kv_lens"] = rng.integers(0, S + 1, size=B).tolist()
        kw["per_sequence"] = bool(r() < 0.5)
    if r() < 0.3:
        kw["window"] = (int(rng.integers(-1, 6)), int(rng.integers(-1, 4)))
    if r() < 0.3:
        kw["alibi"] = (torch.rand(B, H) * 0.3 if r() < 0.5
                       else torch.tensor([2.0 ** -(h + 1) for h in range(H)]))
    if r() < 0.3:
        kw["softcap"] = float(rng.uniform(1.0, 20.0))
    if r() < 0.3:
        m = rng.random((B, 1, L, S)) < 0.8
        kw["mask"] = torch.from_numpy(m)
    elif r() < 0.2:
        kw["mask"] = torch.from_numpy(rng.standard_normal((L, S)))
    if r() < 0.2:
        kw["scale"] = float(rng.uniform(0.1, 1.0))
    return kw


def _call(q, k, v, kw, **extra):
    """attnflow with the options of math_attention."""
    a = dict(kw)
    args = {}
    if "mask" in a:
        args["attn_mask"] = a.pop("mask")
        if args["attn_mask"].dtype != torch.bool:
            args["attn_mask"] = args["attn_mask"].to(q.dtype)
    if "alibi" in a:
        args["alibi_slopes"] = a.pop("alibi")
    if a.pop("per_sequence", False):
        args["kv_align"] = "per_sequence"
    args.update(a)
    args.update(extra)
    return attnflow.scaled_dot_product_attention(q, k, v, enable_gqa=True, **args)


def _leaf(x, dtype):
    return x.detach().to(dtype).requires_grad_()


@pytest.mark.parametrize("i", range(40))
def test_gradients_follow_flashattention_rule(i):
    rng = np.random.default_rng(3100 + i)
    B, Hkv, G = int(rng.integers(1, 3)), int(rng.integers(1, 3)), int(rng.choice([1, 2, 4]))
    H = Hkv * G
    L, S = int(rng.integers(1, 70)), int(rng.integers(1, 90))
    E = int(rng.choice([4, 16, 33, 64]))
    Ev = E if rng.random() < 0.8 else int(rng.choice([8, 20]))
    kw = _options(rng, B, H, L, S)
    g = torch.Generator().manual_seed(i)
    q0 = torch.randn(B, H, L, E, generator=g, dtype=torch.float64)
    if kw.get("softcap"):
        q0 = q0 * 3
    k0 = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float64)
    v0 = torch.randn(B, Hkv, S, Ev, generator=g, dtype=torch.float64)
    dout = torch.randn(B, H, L, Ev, generator=g, dtype=torch.float64)
    grads = {}
    for name, dtype, fn in (("ref", torch.float64, math_attention),
                            ("pt", torch.float32, math_attention),
                            ("af", torch.float32, None)):
        q, k, v = _leaf(q0, dtype), _leaf(k0, dtype), _leaf(v0, dtype)
        out = fn(q, k, v, **kw) if fn else _call(q, k, v, kw)
        assert out.grad_fn is not None
        out.backward(dout.to(dtype))
        grads[name] = (out.detach().double(), q.grad.double(), k.grad.double(), v.grad.double())
    desc = f"case {i}: B{B} H{H}/{Hkv} L{L} S{S} E{E} Ev{Ev} {sorted(kw)}"
    for n, what in enumerate(("out", "dq", "dk", "dv")):
        ref, pt, af = grads["ref"][n], grads["pt"][n], grads["af"][n]
        err = float((af - ref).abs().max()) if ref.numel() else 0.0
        err_pt = float((pt - ref).abs().max()) if ref.numel() else 0.0
        scale = max(1.0, float(ref.abs().max())) if ref.numel() else 1.0
        assert err <= 2 * err_pt + FLOOR * scale, (
            f"{desc}: {what} err {err:.3g} vs torch float32 math {err_pt:.3g}")


@pytest.mark.parametrize("case", [
    dict(causal="bottom_right"),
    dict(causal="top_left", mask="bool"),
    dict(mask="float", scale=0.4),
    dict(kv_lens=[5, 0], causal="bottom_right"),  # batch 1: every row dead
    dict(kv_lens=[4, 6], per_sequence=True, causal="bottom_right", window=(2, 0)),
    dict(alibi="bh", softcap=2.0),
    dict(alibi="h", window=(1, 1)),
])
def test_float64_gradcheck(case):
    """Finite differences of the float64 path (the reference forward and
    backward) in every option."""
    g = torch.Generator().manual_seed(7)
    B, H, Hkv, L, S, E = 2, 4, 2, 5, 6, 3
    q = torch.randn(B, H, L, E, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(B, Hkv, S, E, generator=g, dtype=torch.float64, requires_grad=True)
    kw = dict(case)
    if kw.get("mask") == "bool":
        kw["mask"] = torch.rand(B, 1, L, S, generator=g) < 0.7
    elif kw.get("mask") == "float":
        kw["mask"] = torch.randn(L, S, generator=g, dtype=torch.float64)
    if kw.get("alibi") == "bh":
        kw["alibi"] = torch.rand(B, H, generator=g, dtype=torch.float64)
    elif kw.get("alibi") == "h":
        kw["alibi"] = torch.tensor([0.5, 0.25, 0.125, 0.0625], dtype=torch.float64)
    def f(q, k, v):
        out, lse = _call(q, k, v, kw, kernel="reference", return_lse=True)
        return out, lse.nan_to_num(neginf=0.0)  # dead rows: lse -inf, no gradient

    assert torch.autograd.gradcheck(f, (q, k, v))
    out = f(q, k, v)[0]
    ref = math_attention(q, k, v, **kw)
    assert torch.allclose(out, ref, atol=1e-12, rtol=1e-10)


def test_gradient_through_lse():
    g = torch.Generator().manual_seed(11)
    q0, k0, v0 = (torch.randn(2, 3, 9, 8, generator=g, dtype=torch.float64) for _ in range(3))
    w = torch.randn(2, 3, 9, generator=g, dtype=torch.float64)
    res = {}
    for name, dtype in (("ref", torch.float64), ("pt", torch.float32), ("af", torch.float32)):
        q, k, v = (_leaf(x, dtype) for x in (q0, k0, v0))
        if name == "af":
            out, lse = attnflow.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                             return_lse=True)
        else:
            out, lse = math_attention(q, k, v, causal="top_left", return_lse=True)
        (out.sum() + (lse * w.to(dtype)).sum()).backward()
        res[name] = [x.grad.double() for x in (q, k, v)]
    for n in range(3):
        err = float((res["af"][n] - res["ref"][n]).abs().max())
        err_pt = float((res["pt"][n] - res["ref"][n]).abs().max())
        assert err <= 2 * err_pt + FLOOR


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_inputs_compute_in_float32_and_return_their_dtype(dtype):
    g = torch.Generator().manual_seed(12)
    q, k, v = (torch.randn(1, 4, 33, 32, generator=g).to(dtype).requires_grad_() for _ in range(3))
    out = attnflow.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert out.dtype == dtype
    out.float().sum().backward()
    assert q.grad.dtype == k.grad.dtype == v.grad.dtype == dtype
    qq, kk, vv = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref = math_attention(qq, kk, vv, causal="top_left")
    ref.sum().backward()
    # float32 compute: the only 16-bit rounding is the final cast.
    r = ref.detach()
    assert float((out.detach().double() - r).abs().max()) <= 2 * 2.0 ** -8 * float(r.abs().max())
    tol = 4 * 2.0 ** -8 if dtype == torch.bfloat16 else 4 * 2.0 ** -11
    for a, b in ((q.grad, qq.grad), (k.grad, kk.grad), (v.grad, vv.grad)):
        assert float((a.double() - b).abs().max()) <= tol * max(1.0, float(b.abs().max()))


def test_requires_grad_is_never_silently_detached():
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    k, v = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    out = attnflow.scaled_dot_product_attention(q, k, v)
    assert out.grad_fn is not None and out.requires_grad
    with torch.no_grad():  # grad mode off: like torch, no graph
        assert attnflow.scaled_dot_product_attention(q, k, v).grad_fn is None
    mask = torch.zeros(4, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="attn_mask requires grad"):
        attnflow.scaled_dot_product_attention(q, k, v, mask)
    slopes = torch.tensor([0.5, 0.25], requires_grad=True)
    with pytest.raises(RuntimeError, match="alibi_slopes requires grad"):
        attnflow.scaled_dot_product_attention(q, k, v, alibi_slopes=slopes)
    with pytest.raises(TypeError, match="requires grad"):
        attnflow.reference.sdpa(q, k, v)
    # The op itself refuses a gradient it cannot give (called directly).
    m4 = torch.zeros(1, 2, 4, 4, requires_grad=True)
    out, _ = torch.ops.attnflow.sdpa(q, k, v, m4, None, None, 0, float("nan"), -1, -1, 0.0, 0, 0)
    with pytest.raises(RuntimeError, match="attn_mask requires grad"):
        out.sum().backward()


def test_merge_attention_states_is_differentiable():
    g = torch.Generator().manual_seed(13)
    q = torch.randn(1, 2, 5, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, 12, 8, generator=g, dtype=torch.float64)
    v = torch.randn(1, 2, 12, 8, generator=g, dtype=torch.float64, requires_grad=True)
    oa, la = attnflow.scaled_dot_product_attention(q, k[:, :, :5], v[:, :, :5], return_lse=True,
                                                   kernel="reference")
    ob, lb = attnflow.scaled_dot_product_attention(q, k[:, :, 5:], v[:, :, 5:], return_lse=True,
                                                   kernel="reference")
    out, _ = attnflow.merge_attention_states(oa, la, ob, lb)
    out.sum().backward()
    vv = v.detach().requires_grad_()
    math_attention(q, k, vv).sum().backward()
    assert torch.allclose(v.grad, vv.grad, atol=1e-12)


def test_gradients_do_not_depend_on_the_thread_count():
    g = torch.Generator().manual_seed(14)
    q0, k0, v0 = (torch.randn(2, 8, 150, 64, generator=g) for _ in range(3))
    results = []
    try:
        for n in (1, 2, 3):
            attnflow.set_num_threads(n)
            assert attnflow.get_num_threads() == n
            q, k, v = (x.clone().requires_grad_() for x in (q0, k0, v0))
            out = attnflow.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.backward(torch.ones_like(out))
            results.append([out.detach(), q.grad, k.grad, v.grad])
    finally:
        attnflow.set_num_threads(0)
    for r in results[1:]:
        for a, b in zip(results[0], r):
            assert torch.equal(a, b)


# ---- torch.compile / torch.export / opcheck ----------------------------------

def test_torch_compile_fullgraph_forward_and_backward():
    g = torch.Generator().manual_seed(15)
    q0, k0, v0 = (torch.randn(1, 4, 20, 16, generator=g) for _ in range(3))
    mask = torch.rand(20, 20, generator=g) < 0.8

    def f(q, k, v):
        out, lse = attnflow.scaled_dot_product_attention(q, k, v, mask, causal="top_left",
                                                         softcap=5.0, return_lse=True)
        return (out * 2).sum() + lse.sum()

    cf = torch.compile(f, fullgraph=True, backend="aot_eager")
    q1, k1, v1 = (x.clone().requires_grad_() for x in (q0, k0, v0))
    q2, k2, v2 = (x.clone().requires_grad_() for x in (q0, k0, v0))
    f(q1, k1, v1).backward()
    cf(q2, k2, v2).backward()
    for a, b in ((q1.grad, q2.grad), (k1.grad, k2.grad), (v1.grad, v2.grad)):
        assert torch.equal(a, b)


def test_torch_export():
    class Block(torch.nn.Module):
        def forward(self, q, k, v):
            return attnflow.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    g = torch.Generator().manual_seed(16)
    q = torch.randn(1, 4, 9, 16, generator=g)
    k, v = (torch.randn(1, 2, 9, 16, generator=g) for _ in range(2))
    ep = torch.export.export(Block(), (q, k, v))
    assert "attnflow.sdpa" in str(ep.graph)
    assert torch.equal(ep.module()(q, k, v), Block()(q, k, v))


def test_opcheck_custom_ops():
    """torch.library.opcheck: schema, fake (meta) implementations, autograd
    registration and AOT dispatch of every op."""
    g = torch.Generator().manual_seed(17)
    q = torch.randn(2, 4, 7, 8, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 9, 8, generator=g, requires_grad=True)
    v = torch.randn(2, 2, 9, 8, generator=g, requires_grad=True)
    kvl = torch.tensor([9, 4])
    torch.library.opcheck(torch.ops.attnflow.sdpa.default,
                          (q, k, v, None, kvl, None, 2, float("nan"), -1, -1, 3.0, 1, 0))
    out, lse = torch.ops.attnflow.sdpa(q, k, v, None, kvl, None, 2, float("nan"), -1, -1, 3.0,
                                       1, 0)
    torch.library.opcheck(torch.ops.attnflow.sdpa_backward.default,
                          (torch.ones_like(out), None, q.detach(), k.detach(), v.detach(),
                           out.detach(), lse.detach(), None, kvl, None, 2, float("nan"), -1, -1,
                           3.0, 1, 0))
    cu = torch.tensor([0, 3, 7], dtype=torch.int32)
    qv = torch.randn(7, 4, 8, generator=g, requires_grad=True)
    kv = torch.randn(7, 2, 8, generator=g, requires_grad=True)
    vv = torch.randn(7, 2, 8, generator=g, requires_grad=True)
    torch.library.opcheck(torch.ops.attnflow.varlen.default,
                          (qv, kv, vv, cu, cu, None, 2, float("nan"), -1, -1, 0.0))
    kc, vc = torch.randn(4, 4, 2, 8, generator=g), torch.randn(4, 4, 2, 8, generator=g)
    bt = torch.tensor([[3, 1], [0, 2]], dtype=torch.int32)
    torch.library.opcheck(torch.ops.attnflow.paged.default,
                          (q.detach(), kc, vc, bt, torch.tensor([5, 8], dtype=torch.int32), None,
                           2, float("nan"), -1, -1, 0.0))


def test_varlen_gradients_match_per_sequence_math():
    g = torch.Generator().manual_seed(18)
    lens_q, lens_k = [3, 0, 17, 1], [5, 4, 11, 1]
    cq = torch.tensor([0] + list(np.cumsum(lens_q)), dtype=torch.int32)
    ck = torch.tensor([0] + list(np.cumsum(lens_k)), dtype=torch.int32)
    q0 = torch.randn(int(cq[-1]), 4, 16, generator=g, dtype=torch.float64)
    k0 = torch.randn(int(ck[-1]), 2, 16, generator=g, dtype=torch.float64)
    v0 = torch.randn(int(ck[-1]), 2, 16, generator=g, dtype=torch.float64)
    q, k, v = (_leaf(x, torch.float32) for x in (q0, k0, v0))
    out = flash.flash_attn_varlen_func(q, k, v, cq, ck, 17, 11, causal=True, softcap=6.0)
    dout = torch.randn(out.shape, generator=g)
    out.backward(dout)
    for b in range(4):
        sq, sk = slice(int(cq[b]), int(cq[b + 1])), slice(int(ck[b]), int(ck[b + 1]))
        qq, kk, vv = (x[s].detach().transpose(0, 1)[None].requires_grad_()
                      for x, s in ((q0, sq), (k0, sk), (v0, sk)))
        ref = math_attention(qq, kk, vv, causal="bottom_right", softcap=6.0)
        ref.backward(dout[sq].double().transpose(0, 1)[None])
        assert torch.allclose(out[sq].double().transpose(0, 1)[None], ref, atol=2e-6)
        assert torch.allclose(q.grad[sq].double().transpose(0, 1)[None], qq.grad, atol=2e-5)
        assert torch.allclose(k.grad[sk].double().transpose(0, 1)[None], kk.grad, atol=2e-5)
        assert torch.allclose(v.grad[sk].double().transpose(0, 1)[None], vv.grad, atol=2e-5)
