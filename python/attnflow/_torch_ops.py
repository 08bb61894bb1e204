# _torch_ops.py — attnflow's attention as torch.library custom ops, so that
# autograd, torch.compile(fullgraph=True) and torch.export see one opaque,
# differentiable op instead of a call into a foreign extension.
#
#   attnflow::sdpa            (q, k, v [B,H,L,E], mask, kv_lens, alibi, options) -> (out, lse)
#   attnflow::sdpa_backward   the FlashAttention-2 backward from the saved lse -> (dq, dk, dv)
#   attnflow::varlen          packed sequences (cu_seqlens) -> (out [Tq,H,Dv], lse [H,Tq])
#   attnflow::varlen_backward
#   attnflow::paged           paged KV cache (block table) -> (out, lse); no autograd
#
# Invariants:
#  * Imported only when the caller has imported torch (attnflow/__init__.py
#    registers the ops then, or on the first call with torch tensors).
#  * Every op has a fake (meta) implementation giving the output shapes and
#    dtypes: out in the query's dtype; lse float64 for sdpa / varlen (the
#    kernels compute it in double: saved at full precision, the backward's
#    recomputed probabilities match the forward's; the public functions
#    return it as float32 for non-float64 queries), float32 for paged.
#    float16/bfloat16 queries are computed in float32 (the query is
#    converted, K/V are read in their own dtype) and the output is cast back.
#  * attnflow::sdpa and attnflow::varlen are differentiable in q, k, v (and
#    through lse); a mask or ALiBi slopes that require grad are an error in
#    the backward, never a silent zero gradient. Gradients come back in each
#    input's dtype.
#  * The implementations call the compiled core (_attnflow), which releases
#    the GIL; they never copy q/k/v except the documented 16-bit query casts.
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _attnflow as _core

_NONE = (None,) * 16


def _compute_dtype(q: Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32


def _as(t: Optional[Tensor], dtype: torch.dtype) -> Optional[Tensor]:
    return t if t is None or t.dtype == dtype else t.to(dtype)


# ---- attnflow::sdpa -------------------------------------------------------

@torch.library.custom_op("attnflow::sdpa", mutates_args=())
def sdpa(q: Tensor, k: Tensor, v: Tensor, attn_mask: Optional[Tensor],
         kv_lens: Optional[Tensor], alibi_slopes: Optional[Tensor], causal: int, scale: float,
         window_left: int, window_right: int, softcap: float, kv_align: int,
         kernel: int) -> Tuple[Tensor, Tensor]:
    cd = _compute_dtype(q)
    B, H, L = q.shape[0], q.shape[1], q.shape[2]
    out = torch.empty((B, H, L, v.shape[3]), dtype=cd)
    lse = torch.empty((B, H, L), dtype=torch.float64)
    _core.sdpa(out, lse, _as(q, cd), k, v, attn_mask, kv_lens, alibi_slopes, causal, scale,
               window_left, window_right, kernel, softcap, kv_align)
    return (out if out.dtype == q.dtype else out.to(q.dtype)), lse


@sdpa.register_fake
def _sdpa_fake(q, k, v, attn_mask, kv_lens, alibi_slopes, causal, scale, window_left,
               window_right, softcap, kv_align, kernel):
    B, H, L = q.shape[0], q.shape[1], q.shape[2]
    return (q.new_empty((B, H, L, v.shape[3])),
            q.new_empty((B, H, L), dtype=torch.float64))


@torch.library.custom_op("attnflow::sdpa_backward", mutates_args=())
def sdpa_backward(dout: Tensor, dlse: Optional[Tensor], q: Tensor, k: Tensor, v: Tensor,
                  out: Tensor, lse: Tensor, attn_mask: Optional[Tensor],
                  kv_lens: Optional[Tensor], alibi_slopes: Optional[Tensor], causal: int,
                  scale: float, window_left: int, window_right: int, softcap: float,
                  kv_align: int, kernel: int) -> Tuple[Tensor, Tensor, Tensor]:
    cd = _compute_dtype(q)
    dq = torch.empty(q.shape, dtype=cd)
    dk = torch.empty(k.shape, dtype=cd)
    dv = torch.empty(v.shape, dtype=cd)
    _core.sdpa_backward(dq, dk, dv, _as(dout, cd), dlse, _as(q, cd), k, v,
                        _as(out, cd), lse, attn_mask, kv_lens, alibi_slopes, causal,
                        scale, window_left, window_right, softcap, kv_align, kernel)
    return _as(dq, q.dtype), _as(dk, k.dtype), _as(dv, v.dtype)


@sdpa_backward.register_fake
def _sdpa_backward_fake(dout, dlse, q, k, v, out, lse, attn_mask, kv_lens, alibi_slopes, causal,
                        scale, window_left, window_right, softcap, kv_align, kernel):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _no_grad_for(op: str, name: str) -> None:
    raise RuntimeError(f"{op}: {name} requires grad, but attnflow has no gradient with respect "
                       f"to {name} (only q, k and v are differentiable); detach it")


def _sdpa_setup(ctx, inputs, output):
    q, k, v, attn_mask, kv_lens, alibi_slopes = inputs[:6]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, attn_mask, kv_lens, alibi_slopes)
    ctx.options = tuple(inputs[6:])


def _sdpa_grad(ctx, dout, dlse):
    q, k, v, out, lse, attn_mask, kv_lens, alibi_slopes = ctx.saved_tensors
    if ctx.needs_input_grad[3]:
        _no_grad_for("attnflow.scaled_dot_product_attention", "attn_mask")
    if ctx.needs_input_grad[5]:
        _no_grad_for("attnflow.scaled_dot_product_attention", "alibi_slopes")
    dq, dk, dv = torch.ops.attnflow.sdpa_backward(dout, dlse, q, k, v, out, lse, attn_mask,
                                                  kv_lens, alibi_slopes, *ctx.options)
    return (dq, dk, dv) + _NONE[:10]


torch.library.register_autograd("attnflow::sdpa", _sdpa_grad, setup_context=_sdpa_setup)


# ---- attnflow::varlen -----------------------------------------------------

@torch.library.custom_op("attnflow::varlen", mutates_args=())
def varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
           alibi_slopes: Optional[Tensor], causal: int, scale: float, window_left: int,
           window_right: int, softcap: float) -> Tuple[Tensor, Tensor]:
    Tq, H = q.shape[0], q.shape[1]
    out = torch.empty((Tq, H, v.shape[2]), dtype=torch.float32)
    lse = torch.empty((H, Tq), dtype=torch.float64)  # FlashAttention's layout
    _core.sdpa_varlen(out, lse.t(), _as(q, torch.float32), k, v, cu_seqlens_q, cu_seqlens_k,
                      alibi_slopes, causal, scale, window_left, window_right, softcap)
    return _as(out, q.dtype), lse


@varlen.register_fake
def _varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes, causal, scale, window_left,
                 window_right, softcap):
    Tq, H = q.shape[0], q.shape[1]
    return q.new_empty((Tq, H, v.shape[2])), q.new_empty((H, Tq), dtype=torch.float64)


@torch.library.custom_op("attnflow::varlen_backward", mutates_args=())
def varlen_backward(dout: Tensor, dlse: Optional[Tensor], q: Tensor, k: Tensor, v: Tensor,
                    out: Tensor, lse: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Tensor,
                    alibi_slopes: Optional[Tensor], causal: int, scale: float, window_left: int,
                    window_right: int, softcap: float) -> Tuple[Tensor, Tensor, Tensor]:
    f32 = torch.float32
    dq = torch.empty(q.shape, dtype=f32)
    dk = torch.empty(k.shape, dtype=f32)
    dv = torch.empty(v.shape, dtype=f32)
    _core.sdpa_varlen_backward(dq, dk, dv, _as(dout, f32), None if dlse is None else dlse.t(),
                               _as(q, f32), k, v, _as(out, f32), lse.t(), cu_seqlens_q,
                               cu_seqlens_k, alibi_slopes, causal, scale, window_left,
                               window_right, softcap)
    return _as(dq, q.dtype), _as(dk, k.dtype), _as(dv, v.dtype)


@varlen_backward.register_fake
def _varlen_backward_fake(dout, dlse, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k,
                          alibi_slopes, causal, scale, window_left, window_right, softcap):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _varlen_setup(ctx, inputs, output):
    q, k, v, cu_q, cu_k, alibi_slopes = inputs[:6]
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_q, cu_k, alibi_slopes)
    ctx.options = tuple(inputs[6:])


def _varlen_grad(ctx, dout, dlse):
    q, k, v, out, lse, cu_q, cu_k, alibi_slopes = ctx.saved_tensors
    if ctx.needs_input_grad[5]:
        _no_grad_for("attnflow.flash.flash_attn_varlen_func", "alibi_slopes")
    dq, dk, dv = torch.ops.attnflow.varlen_backward(dout, dlse, q, k, v, out, lse, cu_q, cu_k,
                                                    alibi_slopes, *ctx.options)
    return (dq, dk, dv) + _NONE[:8]


torch.library.register_autograd("attnflow::varlen", _varlen_grad, setup_context=_varlen_setup)


# ---- attnflow::paged ------------------------------------------------------

@torch.library.custom_op("attnflow::paged", mutates_args=())
def paged(q: Tensor, k_cache: Tensor, v_cache: Tensor, block_table: Tensor,
          cache_seqlens: Tensor, alibi_slopes: Optional[Tensor], causal: int, scale: float,
          window_left: int, window_right: int, softcap: float) -> Tuple[Tensor, Tensor]:
    B, H, L = q.shape[0], q.shape[1], q.shape[2]
    out = torch.empty((B, H, L, v_cache.shape[3]), dtype=torch.float32)
    lse = torch.empty((B, H, L), dtype=torch.float32)
    _core.sdpa_paged(out, lse, _as(q, torch.float32), k_cache, v_cache, block_table,
                     cache_seqlens, alibi_slopes, causal, scale, window_left, window_right,
                     softcap)
    return _as(out, q.dtype), lse


@paged.register_fake
def _paged_fake(q, k_cache, v_cache, block_table, cache_seqlens, alibi_slopes, causal, scale,
                window_left, window_right, softcap):
    B, H, L = q.shape[0], q.shape[1], q.shape[2]
    return (q.new_empty((B, H, L, v_cache.shape[3])),
            q.new_empty((B, H, L), dtype=torch.float32))
