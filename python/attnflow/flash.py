# flash.py — FlashAttention's Python API (flash_attn 2.x names, signatures
# and semantics) on attnflow's exact CPU kernels, for torch tensors.
#
#   flash_attn_func / _kvpacked_func / _qkvpacked_func      q [B, Lq, H, D]
#   flash_attn_varlen_func / _kvpacked / _qkvpacked         packed [T, H, D] + cu_seqlens
#   flash_attn_with_kvcache                                 KV cache, cache_seqlens, block_table
#
# Invariants:
#  * FlashAttention's semantics: causal is bottom-right aligned (the queries
#    are the last Lq positions), window_size=(left, right) around that
#    diagonal (-1 = unbounded), softcap > 0 caps scores as
#    softcap * tanh(s / softcap), alibi_slopes [H] or [B, H] (bias
#    -slope * |i + Lk - Lq - j|), GQA/MQA by head groups; with per-sequence
#    lengths (varlen, cache_seqlens) every rule counts from each sequence's
#    own end. A query row that sees no key gives zeros.
#  * float16/bfloat16 inputs are computed in float32 and returned in their
#    dtype (FlashAttention takes only those; float32 works as well).
#  * Differentiable (exact FlashAttention-2 backward) through attnflow's
#    custom ops: flash_attn_func and the varlen functions. dropout_p must be
#    0 (ValueError); deterministic is accepted (attnflow is always
#    deterministic); return_attn_probs returns (out, lse, None): the
#    dropout-mask tensor S_dmask does not exist without dropout.
#  * flash_attn_with_kvcache appends k/v in place at cache_seqlens (as
#    FlashAttention does) and has no backward. rotary_cos/sin and
#    cache_leftpad are not supported (ValueError; apply RoPE to q and k
#    before the call).
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch

from ._sdpa import _CAUSAL, _ops, _scale_value, _softcap_value, scaled_dot_product_attention


def _causal_code(causal: bool) -> int:
    """FlashAttention's causal (bottom-right aligned) as a code of _attnflow.CAUSAL."""
    return _CAUSAL["bottom_right" if causal else "none"]


__all__ = [
    "flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func",
    "flash_attn_varlen_func", "flash_attn_varlen_kvpacked_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache",
]


def _check(op: str, dropout_p: float, window_size) -> Tuple[int, int]:
    if dropout_p:
        raise ValueError(f"{op}: dropout_p={dropout_p} is not supported; attnflow computes exact "
                         f"attention (pass dropout_p=0.0)")
    wl, wr = (int(window_size[0]), int(window_size[1]))
    if wl < -1 or wr < -1:
        raise ValueError(f"{op}: window_size {tuple(window_size)} must be >= -1 (-1 = unbounded)")
    return wl, wr


def _tensor(op: str, name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch tensor, got {type(x).__name__}")
    return x


def flash_attn_func(q, k, v, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                    causal: bool = False, window_size: Tuple[int, int] = (-1, -1),
                    softcap: float = 0.0, alibi_slopes=None, deterministic: bool = False,
                    return_attn_probs: bool = False):
    """FlashAttention's flash_attn_func: q [B, Lq, H, D], k/v [B, Lk, Hkv, D]
    -> out [B, Lq, H, D] (with return_attn_probs: (out, lse [B, H, Lq], None))."""
    op = "attnflow.flash.flash_attn_func"
    wl, wr = _check(op, dropout_p, window_size)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if _tensor(op, name, x).dim() != 4:
            raise ValueError(f"{op}: {name} must be [B, L, heads, D], got {list(x.shape)}")
    out, lse = scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=softmax_scale,
        enable_gqa=True, causal="bottom_right" if causal else None,
        window=None if (wl, wr) == (-1, -1) else (wl, wr), softcap=softcap,
        alibi_slopes=alibi_slopes, return_lse=True)
    out = out.transpose(1, 2)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_kvpacked_func(q, kv, dropout_p: float = 0.0, softmax_scale=None,
                             causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                             alibi_slopes=None, deterministic: bool = False,
                             return_attn_probs: bool = False):
    """flash_attn_func with kv [B, Lk, 2, Hkv, D]."""
    k, v = _tensor("attnflow.flash.flash_attn_kvpacked_func", "kv", kv).unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p: float = 0.0, softmax_scale=None,
                              causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                              alibi_slopes=None, deterministic: bool = False,
                              return_attn_probs: bool = False):
    """flash_attn_func with qkv [B, L, 3, H, D]."""
    q, k, v = _tensor("attnflow.flash.flash_attn_qkvpacked_func", "qkv", qkv).unbind(2)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap,
                           alibi_slopes, deterministic, return_attn_probs)


def _cu(op: str, name: str, cu) -> torch.Tensor:
    cu = _tensor(op, name, cu)
    if cu.dtype not in (torch.int32, torch.int64) or cu.dim() != 1:
        raise TypeError(f"{op}: {name} must be an int32/int64 tensor [B+1], got {cu.dtype} "
                        f"{list(cu.shape)}")
    return cu


def _paged_keys(op: str, cache: torch.Tensor, block_table: torch.Tensor,
                cu_seqlens_k: torch.Tensor) -> torch.Tensor:
    """Packs the keys of a paged cache [num_blocks, page, Hkv, D] into
    [Tk, Hkv, D] in cu_seqlens_k order (a torch gather: differentiable)."""
    page = cache.shape[1]
    lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).tolist()
    parts = []
    for b, n in enumerate(lens):
        if n > block_table.shape[1] * page:
            raise ValueError(f"{op}: sequence {b} has {n} keys, more than block_table's "
                             f"{block_table.shape[1]} blocks of {page}")
        pos = torch.arange(n)
        parts.append(cache[block_table[b, pos // page].long(), pos % page])
    return torch.cat(parts, 0) if parts else cache.new_empty((0,) + tuple(cache.shape[2:]))


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                           max_seqlen_k: int, dropout_p: float = 0.0, softmax_scale=None,
                           causal: bool = False, window_size=(-1, -1), softcap: float = 0.0,
                           alibi_slopes=None, deterministic: bool = False,
                           return_attn_probs: bool = False, block_table=None):
    """FlashAttention's flash_attn_varlen_func: packed q [Tq, H, D], k/v
    [Tk, Hkv, D] (or paged caches [num_blocks, page, Hkv, D] with
    block_table [B, max_blocks]), cu_seqlens_q/k int32 [B+1] -> out
    [Tq, H, D] (with return_attn_probs: (out, lse [H, Tq], None))."""
    op = "attnflow.flash.flash_attn_varlen_func"
    wl, wr = _check(op, dropout_p, window_size)
    for name, x in (("q", q), ("k", k), ("v", v)):
        _tensor(op, name, x)
    cu_q, cu_k = _cu(op, "cu_seqlens_q", cu_seqlens_q), _cu(op, "cu_seqlens_k", cu_seqlens_k)
    if block_table is not None:
        k = _paged_keys(op, k, block_table, cu_k)
        v = _paged_keys(op, v, block_table, cu_k)
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(f"{op}: q, k, v must be packed [T, heads, D], got q {list(q.shape)}, "
                         f"k {list(k.shape)}, v {list(v.shape)}")
    for name, cu, mx in (("q", cu_q, max_seqlen_q), ("k", cu_k, max_seqlen_k)):
        if cu.numel() > 1 and not torch.compiler.is_compiling():
            longest = int((cu[1:] - cu[:-1]).max())
            if longest > int(mx):
                raise ValueError(f"{op}: max_seqlen_{name}={mx} is less than the longest "
                                 f"sequence ({longest})")
    alibi = None
    if alibi_slopes is not None:
        alibi = alibi_slopes if isinstance(alibi_slopes, torch.Tensor) else torch.tensor(
            alibi_slopes, dtype=torch.float64)
    out, lse = _ops(torch).varlen(q, k, v, cu_q, cu_k, alibi, _causal_code(causal),
                                  _scale_value(softmax_scale, op), wl, wr,
                                  _softcap_value(softcap, op))
    return (out, lse.to(torch.float32), None) if return_attn_probs else out


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, dropout_p=0.0, softmax_scale=None,
                                    causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False,
                                    return_attn_probs=False):
    """flash_attn_varlen_func with kv [Tk, 2, Hkv, D]."""
    k, v = _tensor("attnflow.flash.flash_attn_varlen_kvpacked_func", "kv", kv).unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                  max_seqlen_k, dropout_p, softmax_scale, causal, window_size,
                                  softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0,
                                     softmax_scale=None, causal=False, window_size=(-1, -1),
                                     softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """flash_attn_varlen_func with qkv [T, 3, H, D]."""
    q, k, v = _tensor("attnflow.flash.flash_attn_varlen_qkvpacked_func", "qkv", qkv).unbind(1)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                  dropout_p, softmax_scale, causal, window_size, softcap,
                                  alibi_slopes, deterministic, return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None,
                            rotary_sin=None, cache_seqlens: Union[None, int, torch.Tensor] = None,
                            cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal: bool = False, window_size=(-1, -1),
                            softcap: float = 0.0, rotary_interleaved: bool = True,
                            alibi_slopes=None, num_splits: int = 0,
                            return_softmax_lse: bool = False):
    """FlashAttention's flash_attn_with_kvcache: q [B, Lq, H, D]; k_cache/v_cache
    [B_cache, Lmax, Hkv, D], or [num_blocks, page, Hkv, D] with block_table
    [B, max_blocks]; cache_seqlens (int or [B]) = keys already in the cache.
    New k/v [B, Lnew, Hkv, D] are written into the cache in place at
    cache_seqlens, then q attends to the first cache_seqlens + Lnew keys of
    each sequence. Returns out [B, Lq, H, D] (and lse [B, H, Lq])."""
    op = "attnflow.flash.flash_attn_with_kvcache"
    wl, wr = _check(op, 0.0, window_size)
    if rotary_cos is not None or rotary_sin is not None:
        raise ValueError(f"{op}: rotary_cos/rotary_sin (RoPE inside the call) is not supported; "
                         f"apply the rotary embedding to q and k before the call")
    if cache_leftpad is not None:
        raise ValueError(f"{op}: cache_leftpad is not supported (keys must start at position 0)")
    for name, x in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        _tensor(op, name, x)
    if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                       for x in (q, k_cache, v_cache, k, v)):
        raise RuntimeError(f"{op}: inputs require grad, but the KV-cache call has no backward "
                           f"(as in FlashAttention); use flash_attn_func / flash_attn_varlen_func "
                           f"for training, or wrap the call in torch.no_grad()")
    if (k is None) != (v is None):
        raise ValueError(f"{op}: pass both k and v (new keys/values) or neither")
    B, Lq = q.shape[0], q.shape[1]
    paged = block_table is not None
    if cache_batch_idx is not None:
        if paged:
            raise ValueError(f"{op}: cache_batch_idx cannot be combined with block_table")
        k_cache = k_cache[cache_batch_idx]  # a gather copy: appends below do not reach the cache
        v_cache = v_cache[cache_batch_idx]
        if k is not None:
            raise ValueError(f"{op}: appending k/v together with cache_batch_idx is not supported")
    page = k_cache.shape[1]
    capacity = block_table.shape[1] * page if paged else k_cache.shape[1]
    if cache_seqlens is None:
        seqlens = torch.full((B,), 0 if k is not None else capacity, dtype=torch.int64)
    elif isinstance(cache_seqlens, int):
        seqlens = torch.full((B,), cache_seqlens, dtype=torch.int64)
    else:
        seqlens = _tensor(op, "cache_seqlens", cache_seqlens).to(torch.int64)
    if k is not None:
        Lnew = k.shape[1]
        if int((seqlens + Lnew).max()) > capacity:
            raise ValueError(f"{op}: appending {Lnew} keys to cache_seqlens "
                             f"{seqlens.tolist()} exceeds the cache capacity {capacity}")
        for b in range(B):
            pos = torch.arange(int(seqlens[b]), int(seqlens[b]) + Lnew)
            if paged:
                blk = block_table[b, pos // page].long()
                k_cache[blk, pos % page] = k[b].to(k_cache.dtype)
                v_cache[blk, pos % page] = v[b].to(v_cache.dtype)
            else:
                k_cache[b, pos] = k[b].to(k_cache.dtype)
                v_cache[b, pos] = v[b].to(v_cache.dtype)
        seqlens = seqlens + Lnew
    c = _causal_code(causal)
    if paged:
        alibi = None
        if alibi_slopes is not None:
            alibi = alibi_slopes if isinstance(alibi_slopes, torch.Tensor) else torch.tensor(
                alibi_slopes, dtype=torch.float64)
        out, lse = _ops(torch).paged(q.transpose(1, 2), k_cache, v_cache, block_table, seqlens,
                                     alibi, c, _scale_value(softmax_scale, op), wl, wr,
                                     _softcap_value(softcap, op))
    else:
        out, lse = scaled_dot_product_attention(
            q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2),
            scale=softmax_scale, enable_gqa=True, causal="bottom_right" if causal else None,
            window=None if (wl, wr) == (-1, -1) else (wl, wr), softcap=softcap,
            alibi_slopes=alibi_slopes, kv_lens=seqlens, kv_align="per_sequence",
            return_lse=True)
    out = out.transpose(1, 2)
    return (out, lse) if return_softmax_lse else out
