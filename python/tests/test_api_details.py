# test_api_details.py — the smaller promises of the Python API: explain()
# tells the kernel that really runs, scale must be finite, NestedTensors and
# non-float dtypes are clear errors, lazily negated torch views are read with
# their sign, float16/bfloat16 queries, the docstring, set_num_threads, the
# FlashAttention-style API's argument errors.
#
# Invariants: expected values come from torch in float64 (or from the
# dispatch rule of docs/kernels.md for explain).
import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import attnflow
from attnflow import flash

OP = "attnflow.scaled_dot_product_attention"


def _qkv(B=1, H=2, L=6, S=7, E=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, L, E, generator=g).to(dtype),
            torch.randn(B, H, S, E, generator=g).to(dtype),
            torch.randn(B, H, S, E, generator=g).to(dtype))


def test_explain_names_the_kernel_that_runs():
    q, k, v = _qkv(L=9)
    assert attnflow.explain(q, k, v, is_causal=True).startswith("tiled_prefill")
    assert attnflow.explain(q[:, :, :3], k, v).startswith("split_kv_decode")
    assert attnflow.explain(q, k, v, kernel="reference").startswith("reference")
    assert attnflow.explain(q.double(), k, v).startswith("reference")  # float64 runs the oracle
    assert attnflow.explain(q.half(), k.half(), v.half()).startswith("tiled_prefill")
    assert attnflow.explain(q.numpy(), k.numpy(), v.numpy()).startswith("tiled_prefill")
    big = torch.randn(1, 1, 9, 300)
    assert attnflow.explain(big, big, big).startswith("reference")  # head dim > 256
    # rank 3 and GQA like the call itself
    assert attnflow.explain(q[0], k[0], v[0]).startswith("tiled_prefill")
    qg = torch.randn(1, 4, 9, 8)
    assert "tiled_prefill" in attnflow.explain(qg, k, v, enable_gqa=True)
    with pytest.raises(ValueError, match="enable_gqa"):
        attnflow.explain(qg, k, v)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scale_is_an_error(bad):
    q, k, v = _qkv()
    for args in ((q, k, v), (q.numpy(), k.numpy(), v.numpy())):
        with pytest.raises(ValueError, match="scale must be a finite number"):
            attnflow.scaled_dot_product_attention(*args, scale=bad)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        attnflow.scaled_dot_product_attention(q.requires_grad_(), k, v, scale=bad)
    with pytest.raises(ValueError, match="scale must be a finite number"):
        attnflow.reference.sdpa(q.detach(), k, v, scale=bad)


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged])
def test_nested_tensor_is_a_clear_error(layout):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "prototype stage" (the strided layout)
        nt = torch.nested.nested_tensor([torch.randn(2, 3, 8), torch.randn(2, 5, 8)], layout=layout)
    with pytest.raises(TypeError, match="NestedTensor.*cu_seqlens"):
        attnflow.scaled_dot_product_attention(nt, nt, nt)


def test_negated_views_are_read_with_their_sign():
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(1, 2, 9, 8, generator=g), torch.randn(1, 2, 9, 8, generator=g)
    z = torch.randn(1, 2, 9, 8, dtype=torch.complex64, generator=g)
    v_neg = z.conj().imag  # a lazily negated view: its memory holds +imag
    assert v_neg.is_neg()
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v_neg.resolve_neg().double())
    got = attnflow.scaled_dot_product_attention(q, k, v_neg)  # the fast path
    assert torch.allclose(got.double(), ref, atol=1e-5)
    mask = torch.ones(9, 9, dtype=torch.bool)
    got = attnflow.scaled_dot_product_attention(q, k, v_neg, mask)  # the general path
    assert torch.allclose(got.double(), ref, atol=1e-5)
    q_neg = torch.randn(1, 2, 9, 8, dtype=torch.complex64, generator=g).conj().imag
    got = attnflow.scaled_dot_product_attention(q_neg, k, v_neg, is_causal=True)
    ref = F.scaled_dot_product_attention(q_neg.resolve_neg().double(), k.double(),
                                         v_neg.resolve_neg().double(), is_causal=True)
    assert torch.allclose(got.double(), ref, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_query_returns_its_dtype_computed_in_float32(dtype):
    q, k, v = _qkv(H=4, L=33, S=40, E=32, dtype=dtype)
    got = attnflow.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert got.dtype == dtype
    ref = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True)
    # float32 computation, one rounding to the 16-bit type at the end
    ulp = 2.0 ** -10 if dtype == torch.float16 else 2.0 ** -7
    assert float((got.double() - ref).abs().max()) <= ulp * float(ref.abs().max())
    got32 = attnflow.scaled_dot_product_attention(q.float(), k, v, is_causal=True)
    assert torch.equal(got, got32.to(dtype))
    if dtype == torch.float16:
        gotn = attnflow.scaled_dot_product_attention(q.numpy(), k.numpy(), v.numpy(),
                                                     is_causal=True)
        assert gotn.dtype == np.float16 and np.array_equal(gotn, got.numpy())


def test_docstring():
    doc = attnflow.scaled_dot_product_attention.__doc__
    for word in ("softmax", "attn_mask", "is_causal", "enable_gqa", "Autograd", "return_lse",
                 "kv_lens", "kv_align", "window", "alibi_slopes", "softcap", "kernel"):
        assert word in doc, word
    assert flash.flash_attn_func.__doc__ and flash.flash_attn_with_kvcache.__doc__
    assert attnflow.set_num_threads.__doc__ and attnflow.explain.__doc__


def test_set_num_threads():
    q, k, v = _qkv(B=2, H=8, L=200, S=200, E=64)
    default = attnflow.get_num_threads()
    ref = attnflow.scaled_dot_product_attention(q, k, v, is_causal=True)
    try:
        for n in (1, 3):
            attnflow.set_num_threads(n)
            assert attnflow.get_num_threads() == n
            assert torch.equal(attnflow.scaled_dot_product_attention(q, k, v, is_causal=True), ref)
        with pytest.raises(ValueError, match="set_num_threads"):
            attnflow.set_num_threads(-1)
    finally:
        attnflow.set_num_threads(0)
    assert attnflow.get_num_threads() == default


def test_softcap_and_per_sequence_alignment_match_torch_math():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, 4, 5, 16, generator=g, dtype=torch.float64) * 3
    k, v = (torch.randn(2, 2, 11, 16, generator=g, dtype=torch.float64) for _ in range(2))
    lens = torch.tensor([11, 6])
    got = attnflow.scaled_dot_product_attention(q.float(), k.float(), v.float(), enable_gqa=True,
                                                causal="bottom_right", kv_lens=lens,
                                                kv_align="per_sequence", softcap=4.0)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    s = 4.0 * torch.tanh((q @ kk.transpose(-1, -2)) / 4.0 / 4.0)
    i, j = torch.arange(5).view(1, 1, 5, 1), torch.arange(11).view(1, 1, 1, 11)
    d = i + lens.view(2, 1, 1, 1) - 5  # each sequence's own diagonal
    s = s.masked_fill((j > d) | (j >= lens.view(2, 1, 1, 1)), float("-inf"))
    ref = torch.softmax(s, -1) @ vv
    assert torch.allclose(got.double(), ref, atol=2e-6)


def test_flash_api_argument_errors():
    q = torch.randn(1, 5, 2, 8)
    with pytest.raises(ValueError, match="dropout_p=0.1"):
        flash.flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="rotary"):
        flash.flash_attn_with_kvcache(q, q, q, rotary_cos=torch.ones(5, 4),
                                      rotary_sin=torch.ones(5, 4))
    with pytest.raises(ValueError, match="cache_leftpad"):
        flash.flash_attn_with_kvcache(q, q, q, cache_leftpad=torch.zeros(1, dtype=torch.int32))
    # As FlashAttention: the KV-cache call has no backward; its output does
    # not require grad even when the inputs do.
    assert not flash.flash_attn_with_kvcache(q.requires_grad_(), q.detach(), q.detach()).requires_grad
    cu = torch.tensor([0, 5], dtype=torch.int32)
    with pytest.raises(ValueError, match="max_seqlen_q=3 is less than"):
        flash.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 3, 5)
    with pytest.raises(ValueError, match=r"attention_varlen: cu_seqlens_q\[1\] = 5"):
        flash.flash_attn_varlen_func(q[0, :4].detach(), q[0].detach(), q[0].detach(), cu, cu, 5, 5)


def test_flash_api_matches_flashattention_conventions():
    """Contiguous [B, Lq, H, D] outputs (out.view(B, S, H*D) works), LSE +inf
    for a row with no visible key (FlashAttention's kernels store INFINITY),
    and the private core refuses a read-only output array."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 5, 4, 8, generator=g)
    k = torch.randn(2, 7, 2, 8, generator=g)
    out, lse, _ = flash.flash_attn_func(q, k, k, return_attn_probs=True)
    assert out.is_contiguous() and out.view(2, 5, 32).shape == (2, 5, 32)
    out = flash.flash_attn_func(q, k, k, causal=True, window_size=(0, 0))
    assert out.is_contiguous()
    # A decode step whose cache holds nothing for sequence 1: no visible key.
    kc = torch.randn(2, 6, 2, 8, generator=g)
    o, l = flash.flash_attn_with_kvcache(q[:, :1], kc, kc, cache_seqlens=torch.tensor([3, 0]),
                                         return_softmax_lse=True)
    assert o.is_contiguous()
    assert torch.isposinf(l[1]).all() and torch.isfinite(l[0]).all()
    assert torch.equal(o[1], torch.zeros_like(o[1]))
    # The private core: a read-only output (NumPy over bytes) is refused.
    from attnflow import _attnflow as core
    qn = np.zeros((1, 1, 2, 4), np.float32)
    ro = np.frombuffer(bytes(32), dtype=np.float32).reshape(1, 1, 2, 4)
    with pytest.raises(ValueError, match="out is read-only"):
        core.sdpa(ro, None, qn, qn, qn, None, None, None, 0, 0.5, -1, -1, 0)

