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
#    FlashAttention does) and has no backward: its output never requires
#    grad. rotary_cos/sin and cache_leftpad are not supported (ValueError;
#    apply RoPE to q and k before the call).
#  * As FlashAttention: outputs are contiguous [B, Lq, H, D]; a returned LSE
#    is +inf (not attnflow's -inf) for a row with no visible key.
from __future__ import annotations

import numbers
from typing import Optional, Sequence, Tuple, Union

import torch

from ._sdpa import _CAUSAL, _ops, _scale_value, _softcap_value, scaled_dot_product_attention


def _fa_lse(lse):
    """FlashAttention's LSE convention: a row with no visible key has LSE
    +inf (its kernels store INFINITY for an empty row, so exp(x - lse) is 0
    in their backward); attnflow's own API keeps -inf (docs/semantics.md)."""
    return torch.where(torch.isneginf(lse), torch.full_like(lse, float("inf")), lse)


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
    out = out.transpose(1, 2).contiguous()  # FlashAttention returns [B, Lq, H, D] contiguous
    return (out, _fa_lse(lse), None) if return_attn_probs else out


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


# ---- index arguments: one validation for every entry point -------------------
# cache_seqlens, cache_batch_idx, block_table and cu_seqlens are checked here
# for type, dtype, device, shape, range and consistency across all sequences
# BEFORE anything reads through them or writes into a cache: an error leaves
# every cache tensor byte-identical (python/tests/test_flash_index_args.py).

def _index_tensor(op: str, name: str, x, rank: int, layout: str) -> torch.Tensor:
    """An integer index tensor on the CPU (int32 or int64) of the given rank."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{op}: {name} must be an int32/int64 torch tensor {layout}, got "
                        f"{type(x).__name__}")
    if x.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: {name} must be an int32/int64 tensor {layout}, got {x.dtype} "
                        f"{list(x.shape)} (index arguments are never rounded)")
    if x.device.type != "cpu":
        raise ValueError(f"{op}: {name} is on {x.device}; attnflow runs on the CPU")
    if x.dim() != rank:
        raise ValueError(f"{op}: {name} must be {layout}, got shape {list(x.shape)}")
    return x


def _cu(op: str, name: str, cu) -> torch.Tensor:
    """cu_seqlens [B+1]: starts at 0, never decreases."""
    cu = _index_tensor(op, name, cu, 1, "[B+1]")
    if cu.numel() == 0:
        raise ValueError(f"{op}: {name} must have B+1 >= 1 entries, got none")
    if torch.compiler.is_compiling():  # a traced graph: the compiled core checks the values
        return cu
    if int(cu[0]) != 0:
        raise ValueError(f"{op}: {name}[0] = {int(cu[0])} must be 0")
    steps = cu[1:] - cu[:-1]
    if steps.numel() and int(steps.min()) < 0:
        b = int((steps < 0).nonzero()[0])
        raise ValueError(f"{op}: {name} decreases at [{b + 1}]: {int(cu[b])} -> {int(cu[b + 1])}")
    return cu


def _seqlens(op: str, cache_seqlens, B: int, default: int) -> torch.Tensor:
    """cache_seqlens: None (= default), a Python int, or an int tensor [B];
    every entry >= 0. Returned as int64 [B]."""
    if cache_seqlens is None:
        return torch.full((B,), default, dtype=torch.int64)
    if isinstance(cache_seqlens, bool) or (not isinstance(cache_seqlens, torch.Tensor) and
                                           not isinstance(cache_seqlens, numbers.Integral)):
        raise TypeError(f"{op}: cache_seqlens must be an int or an int32/int64 tensor [B], got "
                        f"{type(cache_seqlens).__name__}")
    if isinstance(cache_seqlens, torch.Tensor):
        seqlens = _index_tensor(op, "cache_seqlens", cache_seqlens, 1, "[B]").to(torch.int64)
        if seqlens.shape[0] != B:
            raise ValueError(f"{op}: cache_seqlens has {seqlens.shape[0]} entries, q has B = {B}")
    else:
        seqlens = torch.full((B,), int(cache_seqlens), dtype=torch.int64)
    if B and int(seqlens.min()) < 0:
        b = int((seqlens < 0).nonzero()[0])
        raise ValueError(f"{op}: cache_seqlens[{b}] = {int(seqlens[b])} is negative")
    return seqlens


def _batch_rows(op: str, cache_batch_idx, B: int, cache_rows: int, appending: bool):
    """cache_batch_idx [B]: the cache row of each sequence, in [0, cache_rows);
    distinct when new keys are appended (two sequences cannot write one row)."""
    if cache_batch_idx is None:
        if cache_rows != B:
            raise ValueError(f"{op}: k_cache has {cache_rows} rows but q has B = {B}; pass "
                             f"cache_batch_idx to choose the rows")
        return None
    idx = _index_tensor(op, "cache_batch_idx", cache_batch_idx, 1, "[B]").to(torch.int64)
    if idx.shape[0] != B:
        raise ValueError(f"{op}: cache_batch_idx has {idx.shape[0]} entries, q has B = {B}")
    bad = (idx < 0) | (idx >= cache_rows)
    if bool(bad.any()):
        b = int(bad.nonzero()[0])
        raise ValueError(f"{op}: cache_batch_idx[{b}] = {int(idx[b])} is outside [0, "
                         f"{cache_rows}) (k_cache rows)")
    if appending and idx.unique().numel() != B:
        raise ValueError(f"{op}: cache_batch_idx {idx.tolist()} repeats a row; appending k/v "
                         f"needs one cache row per sequence")
    return idx


def _block_table(op: str, block_table, B: int, num_blocks: int, page: int,
                 lens: torch.Tensor) -> torch.Tensor:
    """block_table [B, max_blocks]: the first ceil(lens[b] / page) entries of
    row b (the blocks that sequence reads or writes) lie in [0, num_blocks)."""
    bt = _index_tensor(op, "block_table", block_table, 2, "[B, max_blocks]")
    if bt.shape[0] != B:
        raise ValueError(f"{op}: block_table has {bt.shape[0]} rows, expected B = {B}")
    if page < 1:
        raise ValueError(f"{op}: the cache's page size (dim 1) must be >= 1, got {page}")
    for b in range(B):
        n = int(lens[b])
        used = -(-n // page)
        if used > bt.shape[1]:
            raise ValueError(f"{op}: sequence {b} needs {n} keys = {used} blocks of {page}, "
                             f"block_table has {bt.shape[1]} per sequence")
        row = bt[b, :used]
        bad = (row < 0) | (row >= num_blocks)
        if bool(bad.any()):
            j = int(bad.nonzero()[0])
            raise ValueError(f"{op}: block_table[{b}][{j}] = {int(row[j])} is outside [0, "
                             f"{num_blocks}) (cache blocks)")
    return bt


def _paged_keys(op: str, cache: torch.Tensor, block_table: torch.Tensor,
                cu_seqlens_k: torch.Tensor) -> torch.Tensor:
    """Packs the keys of a paged cache [num_blocks, page, Hkv, D] into
    [Tk, Hkv, D] in cu_seqlens_k order (a torch gather: differentiable).
    block_table was checked for these keys (_block_table)."""
    page = cache.shape[1]
    lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).tolist()
    parts = []
    for b, n in enumerate(lens):
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
        if k.dim() != 4 or v.dim() != 4 or k.shape[:3] != v.shape[:3]:
            raise ValueError(f"{op}: with block_table, k and v are paged caches [num_blocks, "
                             f"page, Hkv, D], got k {list(k.shape)}, v {list(v.shape)}")
        _block_table(op, block_table, cu_k.numel() - 1, k.shape[0], k.shape[1],
                     cu_k[1:] - cu_k[:-1])
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
    return (out, _fa_lse(lse.to(torch.float32)), None) if return_attn_probs else out


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


def _kvcache_plan(op: str, q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx,
                  block_table):
    """Checks every argument of flash_attn_with_kvcache that says where keys
    are read or written, and returns (rows, seqlens, writes): the cache rows
    chosen by cache_batch_idx (or None), the key counts after the append
    (int64 [B]) and, per sequence, the (cache index, slot index) pair its
    new keys go to. Nothing is written here."""
    if q.dim() != 4:
        raise ValueError(f"{op}: q must be [B, Lq, H, D], got {list(q.shape)}")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache)):
        if x.dim() != 4:
            raise ValueError(f"{op}: {name} must be [B_cache, Lmax, Hkv, D] or [num_blocks, "
                             f"page, Hkv, D], got {list(x.shape)}")
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise ValueError(f"{op}: k_cache {list(k_cache.shape)} and v_cache "
                         f"{list(v_cache.shape)} disagree")
    B = q.shape[0]
    paged = block_table is not None
    appending = k is not None
    if appending:
        for name, x, cache in (("k", k, k_cache), ("v", v, v_cache)):
            _tensor(op, name, x)
            if (x.dim() != 4 or x.shape[0] != B or x.shape[1] != k.shape[1] or
                    x.shape[2:] != cache.shape[2:]):
                raise ValueError(f"{op}: new {name} must be [B={B}, Lnew, Hkv, D] matching "
                                 f"{name}_cache {list(cache.shape)}, got {list(x.shape)}")
    lnew = k.shape[1] if appending else 0
    if paged:
        if cache_batch_idx is not None:
            raise ValueError(f"{op}: cache_batch_idx cannot be combined with block_table")
        rows = None
        bt = _index_tensor(op, "block_table", block_table, 2, "[B, max_blocks]")
        capacity = bt.shape[1] * k_cache.shape[1]
    else:
        rows = _batch_rows(op, cache_batch_idx, B, k_cache.shape[0], appending)
        capacity = k_cache.shape[1]
    seqlens = _seqlens(op, cache_seqlens, B, 0 if appending else capacity)
    total = seqlens + lnew
    if B and int(total.max()) > capacity:
        b = int(total.argmax())
        raise ValueError(f"{op}: sequence {b}: cache_seqlens {int(seqlens[b])} + {lnew} new "
                         f"keys exceeds the cache capacity {capacity}")
    if paged:
        _block_table(op, block_table, B, k_cache.shape[0], k_cache.shape[1], total)
    writes = []
    if appending:
        page = k_cache.shape[1]
        for b in range(B):
            pos = torch.arange(int(seqlens[b]), int(total[b]))
            if paged:
                writes.append((block_table[b, pos // page].long(), pos % page))
            else:
                writes.append((int(rows[b]) if rows is not None else b, pos))
        if paged and writes:  # two sequences must not append into one slot
            slots = torch.cat([blk * page + slot for blk, slot in writes])
            if slots.unique().numel() != slots.numel():
                raise ValueError(f"{op}: block_table makes two new keys land in the same cache "
                                 f"slot (a block shared by sequences that both append)")
    return rows, total, writes


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
    # The KV-cache call has no backward (as in FlashAttention): inputs that
    # require grad give an output that does not (computed without autograd).
    with torch.no_grad():
        return _with_kvcache(op, q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx,
                             block_table, softmax_scale, causal, wl, wr, softcap, alibi_slopes,
                             return_softmax_lse)


def _with_kvcache(op, q, k_cache, v_cache, k, v, cache_seqlens, cache_batch_idx, block_table,
                  softmax_scale, causal, wl, wr, softcap, alibi_slopes, return_softmax_lse):
    """flash_attn_with_kvcache after its option checks (under no_grad)."""
    if (k is None) != (v is None):
        raise ValueError(f"{op}: pass both k and v (new keys/values) or neither")
    rows, seqlens, writes = _kvcache_plan(op, q, k_cache, v_cache, k, v, cache_seqlens,
                                          cache_batch_idx, block_table)
    # Everything is checked: only now is the cache written (in place, as
    # FlashAttention does).
    for b, (dst, slots) in enumerate(writes):
        k_cache[dst, slots] = k[b].to(k_cache.dtype)
        v_cache[dst, slots] = v[b].to(v_cache.dtype)
    paged = block_table is not None
    if rows is not None:  # the chosen cache rows, gathered (after the appends)
        k_cache, v_cache = k_cache[rows], v_cache[rows]
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
    out = out.transpose(1, 2).contiguous()
    return (out, _fa_lse(lse)) if return_softmax_lse else out
