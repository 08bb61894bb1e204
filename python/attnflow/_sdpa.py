# _sdpa.py — attnflow.scaled_dot_product_attention (torch 2.9 semantics plus
# attnflow's extensions) and attnflow.merge_attention_states.
#
# Invariants:
#  * Same semantics as torch.nn.functional.scaled_dot_product_attention:
#    inputs [..., H, L, E] (rank >= 2, the same batch dims for q/k/v), bool
#    masks (True = attend) or float masks (added to the scaled scores),
#    broadcast to [..., H, L, S]; is_causal is top-left and is a ValueError
#    together with attn_mask (torch's documented rule; its float32 CPU flash
#    path silently ANDs them instead); batch dims broadcast; enable_gqa groups query heads on kv heads like
#    repeat_interleave; scale defaults to 1/sqrt(E). dropout_p != 0 is a
#    ValueError (attnflow is exact inference attention). A fully masked row
#    gives zeros (attnflow's rule, docs/semantics.md; torch 2.9 also gives
#    zeros on CPU, checked by the tests).
#  * Output: same framework and device as the query; float32 for float32
#    queries (float32/float16/bfloat16 keys and values, fast kernels), float64
#    for float64 queries (the float64 reference). Other query dtypes are a
#    TypeError.
#  * No copies of q/k/v/mask except those documented in _arrays.py.
#  * No autograd: inputs that require grad are detached; the output has no
#    grad_fn.
from __future__ import annotations

import math
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _attnflow as _core
from ._arrays import TORCH, as_array, broadcast_to, dtype_name, empty, kind_of, reshape, torch_module

_OP = "attnflow.scaled_dot_product_attention"
_CAUSAL = dict(_core.CAUSAL)  # name -> code: the C++ enums' (python/src/module.cc)
_KERNEL = dict(_core.KERNELS)
_C_NONE, _C_TOP_LEFT = _CAUSAL["none"], _CAUSAL["top_left"]
_KV_DTYPES = ("float32", "float16", "bfloat16")
_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
_NAN = float("nan")
_NP_F32 = np.dtype(np.float32)
_NP_KV = (np.dtype(np.float32), np.dtype(np.float16))


_T_TENSOR = None
_T_F32 = None
_T_KV = ()
_T_EMPTY = None


def _torch_tensor_type():
    """torch.Tensor once torch is imported (never imports torch itself)."""
    global _T_TENSOR, _T_F32, _T_KV, _T_EMPTY
    if _T_TENSOR is None:
        t = torch_module()
        if t is None:
            return None
        _T_F32, _T_KV, _T_EMPTY = t.float32, (t.float32, t.float16, t.bfloat16), t.empty
        _T_TENSOR = t.Tensor
    return _T_TENSOR


def _to4(x, kind: str):
    n = x.ndim
    if n == 4:
        return x
    if n == 3:
        return x[None]
    if n == 2:
        return x[None, None]
    return reshape(x, (-1,) + tuple(x.shape[-3:]), kind)


def _causal_code(is_causal: bool, causal: Any, op: str) -> int:
    c = _C_TOP_LEFT if is_causal else _C_NONE
    if causal is None or causal is False:
        return c
    if causal is True:
        cc = _C_TOP_LEFT
    elif isinstance(causal, str) and causal in _CAUSAL:
        cc = _CAUSAL[causal]
    else:
        raise ValueError(f"{op}: causal must be None, 'none', 'top_left' or 'bottom_right', "
                         f"got {causal!r}")
    if is_causal and cc != _C_TOP_LEFT:
        raise ValueError(f"{op}: is_causal=True (top-left) conflicts with causal={causal!r}")
    return cc


def _small_array(x, kind: str, dtype, op: str, name: str):
    if x is None:
        return None
    t = torch_module()
    if t is not None and isinstance(x, t.Tensor):
        return as_array(x, op, name, TORCH)
    if isinstance(x, np.ndarray):
        return as_array(x, op, name, "numpy")
    return np.asarray(x, dtype=dtype)  # documented copy: Python sequences


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False, *, return_lse: bool = False,
                                 causal: Optional[str] = None, kv_lens=None,
                                 window: Optional[Tuple[Optional[int], Optional[int]]] = None,
                                 alibi_slopes=None, kernel: str = "auto"):
    # Fast path (the common torch call): plain CPU float32 rank-4 tensors, no
    # mask or extensions. Same checks as below, fewer Python steps.
    t = _torch_tensor_type()
    if (t is not None and type(query) is t and type(key) is t and type(value) is t
            and attn_mask is None and dropout_p == 0.0 and not return_lse and causal is None
            and kv_lens is None and window is None and alibi_slopes is None and kernel == "auto"
            and query.dim() == 4 and key.dim() == 4 and value.dim() == 4
            and query.dtype is _T_F32 and key.dtype in _T_KV and value.dtype in _T_KV
            and query.is_cpu and key.is_cpu and value.is_cpu
            and not (query.requires_grad or key.requires_grad or value.requires_grad)):
        B, H, L, _ = query.shape
        Bk, Hk = key.shape[0], key.shape[1]
        if (B == Bk == value.shape[0] and Hk == value.shape[1]
                and (H == Hk or (enable_gqa and Hk > 0 and H % Hk == 0))):
            out = _T_EMPTY((B, H, L, value.shape[3]))
            _core.sdpa(out, None, query, key, value, None, None, None, _C_TOP_LEFT if is_causal else _C_NONE,
                       _NAN if scale is None else float(scale), -1, -1, _KERNEL["auto"])
            return out
    # The same fast path for plain NumPy float32 rank-4 arrays (float32 /
    # float16 K/V, non-negative strides: no copy is ever needed).
    elif (type(query) is np.ndarray and type(key) is np.ndarray and type(value) is np.ndarray
            and attn_mask is None and dropout_p == 0.0 and not return_lse and causal is None
            and kv_lens is None and window is None and alibi_slopes is None and kernel == "auto"
            and query.ndim == 4 and key.ndim == 4 and value.ndim == 4
            and query.dtype == _NP_F32 and key.dtype in _NP_KV and value.dtype in _NP_KV
            and min(query.strides + key.strides + value.strides) >= 0):
        B, H, L, _ = query.shape
        Bk, Hk = key.shape[0], key.shape[1]
        if (B == Bk == value.shape[0] and Hk == value.shape[1]
                and (H == Hk or (enable_gqa and Hk > 0 and H % Hk == 0))):
            out = np.empty((B, H, L, value.shape[3]), _NP_F32)
            _core.sdpa(out, None, query, key, value, None, None, None, _C_TOP_LEFT if is_causal else _C_NONE,
                       _NAN if scale is None else float(scale), -1, -1, _KERNEL["auto"])
            return out
    op = _OP
    if dropout_p != 0.0:
        raise ValueError(f"{op}: dropout_p={dropout_p} is not supported; attnflow computes exact "
                         f"inference attention (pass dropout_p=0.0)")
    kind = kind_of(query)
    q = as_array(query, op, "query", kind)
    k = as_array(key, op, "key", kind)
    v = as_array(value, op, "value", kind)
    qd, kd, vd = dtype_name(q), dtype_name(k), dtype_name(v)
    if qd == "float32":
        if kd not in _KV_DTYPES or vd not in _KV_DTYPES:
            raise TypeError(f"{op}: float32 query needs float32, float16 or bfloat16 key/value, "
                            f"got key {kd}, value {vd}")
        out_dtype = "float32"
    elif qd == "float64":
        if kd not in _FLOAT_DTYPES or vd not in _FLOAT_DTYPES:
            raise TypeError(f"{op}: key/value must be floating point, got key {kd}, value {vd}")
        out_dtype = "float64"
    else:
        raise TypeError(f"{op}: query dtype {qd} is not supported; attnflow computes with "
                        f"float32 queries (fast kernels, float32/float16/bfloat16 key/value) or "
                        f"float64 queries (the float64 reference); cast the query")
    qs, ks, vs = tuple(q.shape), tuple(k.shape), tuple(v.shape)
    shapes = f"query {list(qs)}, key {list(ks)}, value {list(vs)}"
    R = max(q.ndim, k.ndim, v.ndim)
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise ValueError(f"{op}: query, key and value need rank >= 2 ([..., L, E]); got {shapes}")
    R3 = max(R, 3)
    q, k, v = (x[(None,) * (R3 - x.ndim)] if x.ndim < R3 else x for x in (q, k, v))
    Hq, Hk, Hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if Hk != Hv:
        raise ValueError(f"{op}: key and value have different numbers of heads: {shapes}")
    if Hq != Hk:
        if enable_gqa:
            if Hk == 0 or Hq % Hk != 0:
                raise ValueError(f"{op}: the number of query heads ({Hq}) must be a multiple of "
                                 f"the number of key/value heads ({Hk}) with enable_gqa=True; "
                                 f"{shapes}")
        elif Hq == 1:
            q = broadcast_to(q, tuple(q.shape[:-3]) + (Hk,) + tuple(q.shape[-2:]), kind)
            Hq = Hk
        elif Hk != 1:
            raise ValueError(f"{op}: query has {Hq} heads but key/value have {Hk}; pass "
                             f"enable_gqa=True for grouped-query attention ({shapes})")
    try:
        batch = tuple(np.broadcast_shapes(tuple(q.shape[:-3]), tuple(k.shape[:-3]),
                                          tuple(v.shape[:-3])))
    except ValueError:
        raise ValueError(f"{op}: batch dims do not broadcast: {shapes}") from None
    q = broadcast_to(q, batch + tuple(q.shape[-3:]), kind)
    k = broadcast_to(k, batch + tuple(k.shape[-3:]), kind)
    v = broadcast_to(v, batch + tuple(v.shape[-3:]), kind)
    c = _causal_code(is_causal, causal, op)
    q4, k4, v4 = _to4(q, kind), _to4(k, kind), _to4(v, kind)
    m4 = None
    if attn_mask is not None:
        if is_causal:
            raise ValueError(f"{op}: an explicit attn_mask must not be set when is_causal=True "
                             f"(as in torch); use causal='top_left' to combine both")
        m = as_array(attn_mask, op, "attn_mask", kind)
        md = dtype_name(m)
        if md != "bool" and md not in _FLOAT_DTYPES:
            raise TypeError(f"{op}: attn_mask must be bool or floating point, got {md}")
        full = batch + (Hq, q.shape[-2], k.shape[-2])
        try:
            m = broadcast_to(m, full, kind)
        except (ValueError, RuntimeError):
            raise ValueError(f"{op}: attn_mask {list(m.shape)} does not broadcast to "
                             f"[..., H, L, S] = {list(full)} ({shapes})") from None
        m4 = _to4(m, kind)
    kvl = _small_array(kv_lens, kind, np.int64, op, "kv_lens")
    alibi = _small_array(alibi_slopes, kind, np.float64, op, "alibi_slopes")
    wl = wr = -1
    if window is not None:
        left, right = window
        wl = -1 if left is None else int(left)
        wr = -1 if right is None else int(right)
    s = _NAN if scale is None else float(scale)
    try:
        kcode = _KERNEL[kernel]
    except KeyError:
        raise ValueError(f"{op}: kernel must be one of {sorted(_KERNEL)}, got {kernel!r}") from None
    B, H, L = q4.shape[0], q4.shape[1], q4.shape[2]
    Dv = v4.shape[3]
    out = empty((B, H, L, Dv), out_dtype, kind)
    lse = empty((B, H, L), out_dtype, kind) if return_lse else None
    _core.sdpa(out, lse, q4, k4, v4, m4, kvl, alibi, c, s, wl, wr, kcode)
    if R != 4 or len(batch) != 1:
        full = batch + (Hq, L, Dv)
        out = out.reshape(full[len(full) - R:])
        if lse is not None:
            lse = lse.reshape(full[len(full) - R:-1])
    return (out, lse) if return_lse else out


def explain(query, key, value, attn_mask=None, *, causal: Optional[str] = None, kv_lens=None,
            window=None, alibi_slopes=None, scale: Optional[float] = None) -> str:
    """The kernel attnflow would choose for these rank-4 inputs, and why."""
    op = "attnflow.explain"
    kind = kind_of(query)
    q = as_array(query, op, "query", kind)
    k = as_array(key, op, "key", kind)
    v = as_array(value, op, "value", kind)
    m = None if attn_mask is None else as_array(attn_mask, op, "attn_mask", kind)
    wl, wr = (-1, -1) if window is None else (-1 if window[0] is None else window[0],
                                               -1 if window[1] is None else window[1])
    return _core.explain(None, None, q, k, v, m, _small_array(kv_lens, kind, np.int64, op, "kv_lens"),
                         _small_array(alibi_slopes, kind, np.float64, op, "alibi_slopes"),
                         _causal_code(False, causal, op), _NAN if scale is None else float(scale),
                         wl, wr)


def merge_attention_states(out_a, lse_a, out_b, lse_b):
    """Exact merge of two partial attention results over disjoint key sets.

    out_* [B, H, L, Dv] float32, lse_* [B, H, L] float32 (natural log). Returns
    (out, lse) with lse = logaddexp(lse_a, lse_b) and out the lse-weighted mix;
    rows where both lse are -inf give out 0, lse -inf.
    """
    op = "attnflow.merge_attention_states"
    kind = kind_of(out_a)
    oa = as_array(out_a, op, "out_a", kind)
    la = as_array(lse_a, op, "lse_a", kind)
    ob = as_array(out_b, op, "out_b", kind)
    lb = as_array(lse_b, op, "lse_b", kind)
    for name, x in (("out_a", oa), ("lse_a", la), ("out_b", ob), ("lse_b", lb)):
        if dtype_name(x) != "float32":
            raise TypeError(f"{op}: {name} must be float32, got {dtype_name(x)}")
    out = empty(tuple(oa.shape), "float32", kind)
    lse = empty(tuple(la.shape), "float32", kind)
    _core.merge(out, lse, oa, la, ob, lb)
    return out, lse
