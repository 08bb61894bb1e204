# _sdpa.py — attnflow.scaled_dot_product_attention (torch 2.9 semantics plus
# attnflow's extensions), attnflow.explain and attnflow.merge_attention_states.
#
# Invariants:
#  * Same semantics as torch.nn.functional.scaled_dot_product_attention:
#    inputs [..., H, L, E] (rank >= 2, the same batch dims for q/k/v), bool
#    masks (True = attend) or float masks (added to the scaled scores),
#    broadcast to [..., H, L, S]; is_causal is top-left and is a ValueError
#    together with attn_mask (torch's documented rule; its float32 CPU flash
#    path silently ANDs them instead); batch dims broadcast; enable_gqa groups query heads on kv heads like
#    repeat_interleave; scale defaults to 1/sqrt(E) and must be finite.
#    dropout_p != 0 is a ValueError (attnflow is exact attention). A fully
#    masked row gives zeros (attnflow's rule, docs/semantics.md; torch 2.9
#    also gives zeros on CPU, checked by the tests).
#  * Output: same framework and dtype as the query. float32 queries run the
#    fast kernels; float16/bfloat16 queries are converted to float32 (one
#    copy of the query), computed in float32 and the output cast back;
#    float64 queries run the float64 reference (with a
#    Float64ReferenceWarning: exact but single-threaded and slow).
#  * Autograd: torch tensors that require grad (grad mode on), tensor
#    subclasses (FakeTensor, FunctionalTensor) and calls traced by
#    torch.compile / torch.export go through the custom op attnflow::sdpa
#    (_torch_ops.py), whose backward is the FlashAttention-2 backward. Nothing
#    that requires grad is ever detached silently: gradients flow to q, k, v
#    (and through lse); a mask or ALiBi slopes that require grad are an error.
#  * No copies of q/k/v/mask except those documented in _arrays.py and the
#    16-bit query casts above.
from __future__ import annotations

import math
import sys
import warnings
from typing import Any, Optional, Sequence, Tuple

import numpy as np

from . import _attnflow as _core
from ._arrays import TORCH, as_array, broadcast_to, dtype_name, empty, kind_of, reshape, torch_module

_OP = "attnflow.scaled_dot_product_attention"
_CAUSAL = dict(_core.CAUSAL)  # name -> code: the C++ enums' (python/src/module.cc)
_KERNEL = dict(_core.KERNELS)
_KV_ALIGN = dict(_core.KV_ALIGN)
_C_NONE, _C_TOP_LEFT = _CAUSAL["none"], _CAUSAL["top_left"]
_K_AUTO, _K_REFERENCE = _KERNEL["auto"], _KERNEL["reference"]
_KV_DTYPES = ("float32", "float16", "bfloat16")
_FLOAT_DTYPES = ("float32", "float16", "bfloat16", "float64")
_NAN = float("nan")
_NP_F32 = np.dtype(np.float32)
_NP_KV = (np.dtype(np.float32), np.dtype(np.float16))


class Float64ReferenceWarning(RuntimeWarning):
    """float64 inputs run attnflow's float64 reference: exact, single-threaded
    and far slower than the float32 kernels."""


_T_TENSOR = None
_T_F32 = None
_T_KV = ()
_T_EMPTY = None
_T_COMPILING = None
_OPS_READY = False


def _torch_tensor_type():
    """torch.Tensor once torch is imported (never imports torch itself)."""
    global _T_TENSOR, _T_F32, _T_KV, _T_EMPTY, _T_COMPILING
    if _T_TENSOR is None:
        t = torch_module()
        if t is None:
            return None
        _T_F32, _T_KV, _T_EMPTY = t.float32, (t.float32, t.float16, t.bfloat16), t.empty
        _T_COMPILING = t.compiler.is_compiling
        _T_TENSOR = t.Tensor
    return _T_TENSOR


def register_torch_ops() -> None:
    """Registers attnflow's torch.library custom ops (attnflow::sdpa, ...).

    Done automatically when attnflow is imported after torch, or at the
    first eager call with torch tensors; call it before torch.compile /
    torch.export if torch was imported after attnflow."""
    global _OPS_READY
    if not _OPS_READY:
        from . import _torch_ops  # noqa: F401  (registers the ops on import)
        _OPS_READY = True


def _ops(torch):
    if not _OPS_READY:
        if torch.compiler.is_compiling():
            raise RuntimeError("attnflow: its torch custom ops are not registered yet; import "
                               "torch before attnflow, or call attnflow.register_torch_ops() "
                               "before torch.compile / torch.export")
        register_torch_ops()
    return torch.ops.attnflow


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


def _scale_value(scale, op: str) -> float:
    if scale is None:
        return _NAN
    s = float(scale)
    if not math.isfinite(s):
        raise ValueError(f"{op}: scale must be a finite number (None = 1/sqrt(E)), got {scale!r}")
    return s


def _softcap_value(softcap, op: str) -> float:
    c = 0.0 if softcap is None else float(softcap)
    if not (math.isfinite(c) and c >= 0.0):
        raise ValueError(f"{op}: softcap must be a finite number >= 0 (0 = off), got {softcap!r}")
    return c


def _window_codes(window, op: str) -> Tuple[int, int]:
    if window is None:
        return -1, -1
    try:
        left, right = window
    except (TypeError, ValueError):
        raise ValueError(f"{op}: window must be a pair (left, right), got {window!r}") from None
    return (-1 if left is None else int(left)), (-1 if right is None else int(right))


def _align_code(kv_align, op: str) -> int:
    try:
        return _KV_ALIGN[kv_align]
    except (KeyError, TypeError):
        raise ValueError(f"{op}: kv_align must be 'padded' or 'per_sequence', "
                         f"got {kv_align!r}") from None


def _kernel_code(kernel, op: str) -> int:
    try:
        return _KERNEL[kernel]
    except (KeyError, TypeError):
        raise ValueError(f"{op}: kernel must be one of {sorted(_KERNEL)}, got {kernel!r}") from None


def _small_array(x, kind: str, dtype, op: str, name: str):
    if x is None:
        return None
    t = torch_module()
    if t is not None and isinstance(x, t.Tensor):
        return as_array(x, op, name, TORCH)
    if isinstance(x, np.ndarray):
        return as_array(x, op, name, "numpy")
    return np.asarray(x, dtype=dtype)  # documented copy: Python sequences


def _reject_nested(torch, op: str, **tensors) -> None:
    for name, x in tensors.items():
        if isinstance(x, torch.Tensor) and x.is_nested:
            raise TypeError(f"{op}: {name} is a NestedTensor; attnflow takes dense tensors. For "
                            f"ragged batches pass padded tensors with kv_lens=..., or packed "
                            f"sequences to attnflow.flash.flash_attn_varlen_func(cu_seqlens_q=..., "
                            f"cu_seqlens_k=...)")


def _needs_op(torch, *tensors) -> bool:
    """True when a call must go through the custom op: autograd, tracing
    (torch.compile / torch.export) or a tensor subclass."""
    if torch.compiler.is_compiling():
        return True
    grad = torch.is_grad_enabled()
    for x in tensors:
        if isinstance(x, torch.Tensor) and (type(x) is not torch.Tensor
                                            or (grad and x.requires_grad)):
            return True
    return False


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False, *, return_lse: bool = False,
                                 causal: Optional[str] = None, kv_lens=None,
                                 window: Optional[Tuple[Optional[int], Optional[int]]] = None,
                                 alibi_slopes=None, softcap: float = 0.0,
                                 kv_align: str = "padded", kernel: str = "auto"):
    """Exact attention on the CPU, a drop-in for torch's scaled_dot_product_attention.

    softmax(query @ key^T * scale + mask) @ value with torch 2.9's semantics:
    query [..., H, L, E], key [..., Hkv, S, E], value [..., Hkv, S, Ev] (torch
    tensors, NumPy arrays or CPU DLPack producers, read zero-copy with their
    strides); attn_mask bool (True = attend) or float (added), broadcast to
    [..., H, L, S]; is_causal = top-left causal (not together with attn_mask);
    scale defaults to 1/sqrt(E) (must be finite); enable_gqa maps query head
    h to kv head h // (H // Hkv); dropout_p must be 0. A row with no visible
    key gives zeros. Returns an array of the query's framework and dtype
    (float16/bfloat16 are computed in float32, float64 runs the float64
    reference and warns that it is slow).

    Autograd: torch inputs that require grad get exact gradients (the
    FlashAttention-2 backward from the saved log-sum-exp) for q, k and v;
    torch.compile(fullgraph=True) and torch.export see the custom op
    attnflow::sdpa.

    Extensions (keyword only): return_lse=True returns (out, lse) with lse
    [..., H, L] the natural log-sum-exp (-inf for empty rows);
    causal="top_left" | "bottom_right" (queries are the last L positions);
    kv_lens [B] (keys j >= kv_lens[b] are padding); kv_align="per_sequence"
    aligns bottom-right causal, the window and ALiBi to each kv_lens[b]
    instead of S (FlashAttention's cache_seqlens); window=(left, right)
    around the bottom-right diagonal (None/-1 unbounded); alibi_slopes [H] or
    [B, H]; softcap > 0 caps scaled scores as softcap * tanh(x / softcap)
    before mask and ALiBi; kernel = "auto" | "reference" | "tiled_prefill" |
    "split_kv_decode". Semantics: docs/semantics.md; errors name the call and
    the shapes.
    """
    # Fast path (the common torch call): plain CPU float32 rank-4 tensors, no
    # mask or extensions, no autograd, not traced. Same checks as below,
    # fewer Python steps.
    t = _torch_tensor_type()
    if (t is not None and type(query) is t and type(key) is t and type(value) is t
            and attn_mask is None and dropout_p == 0.0 and not return_lse and causal is None
            and kv_lens is None and window is None and alibi_slopes is None and kernel == "auto"
            and not softcap and kv_align == "padded"
            and not (query.requires_grad or key.requires_grad or value.requires_grad)
            and not (query.is_nested or key.is_nested or value.is_nested)
            and query.dim() == 4 and key.dim() == 4 and value.dim() == 4
            and query.dtype is _T_F32 and key.dtype in _T_KV and value.dtype in _T_KV
            and query.is_cpu and key.is_cpu and value.is_cpu and not _T_COMPILING()):
        B, H, L, _ = query.shape
        Bk, Hk = key.shape[0], key.shape[1]
        if (B == Bk == value.shape[0] and Hk == value.shape[1]
                and (H == Hk or (enable_gqa and Hk > 0 and H % Hk == 0))):
            out = _T_EMPTY((B, H, L, value.shape[3]))
            _core.sdpa(out, None, query, key, value, None, None, None,
                       _C_TOP_LEFT if is_causal else _C_NONE, _scale_value(scale, _OP), -1, -1,
                       _K_AUTO)
            return out
    # The same fast path for plain NumPy float32 rank-4 arrays (float32 /
    # float16 K/V, non-negative strides: no copy is ever needed).
    elif (type(query) is np.ndarray and type(key) is np.ndarray and type(value) is np.ndarray
            and attn_mask is None and dropout_p == 0.0 and not return_lse and causal is None
            and kv_lens is None and window is None and alibi_slopes is None and kernel == "auto"
            and not softcap and kv_align == "padded"
            and query.ndim == 4 and key.ndim == 4 and value.ndim == 4
            and query.dtype == _NP_F32 and key.dtype in _NP_KV and value.dtype in _NP_KV
            and min(query.strides + key.strides + value.strides) >= 0):
        B, H, L, _ = query.shape
        Bk, Hk = key.shape[0], key.shape[1]
        if (B == Bk == value.shape[0] and Hk == value.shape[1]
                and (H == Hk or (enable_gqa and Hk > 0 and H % Hk == 0))):
            out = np.empty((B, H, L, value.shape[3]), _NP_F32)
            _core.sdpa(out, None, query, key, value, None, None, None,
                       _C_TOP_LEFT if is_causal else _C_NONE, _scale_value(scale, _OP), -1, -1,
                       _K_AUTO)
            return out
    return _sdpa_general(_OP, query, key, value, attn_mask, dropout_p, is_causal, scale,
                         enable_gqa, return_lse, causal, kv_lens, window, alibi_slopes, softcap,
                         kv_align, kernel)


def _sdpa_general(op, query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                  return_lse, causal, kv_lens, window, alibi_slopes, softcap, kv_align, kernel,
                  explain_only=False):
    if dropout_p != 0.0:
        raise ValueError(f"{op}: dropout_p={dropout_p} is not supported; attnflow computes exact "
                         f"attention (pass dropout_p=0.0)")
    s = _scale_value(scale, op)
    cap = _softcap_value(softcap, op)
    align = _align_code(kv_align, op)
    kcode = _kernel_code(kernel, op)
    wl, wr = _window_codes(window, op)
    c = _causal_code(is_causal, causal, op)
    kind = kind_of(query)
    torch = torch_module() if kind == TORCH else None
    if torch is not None:
        _reject_nested(torch, op, query=query, key=key, value=value, attn_mask=attn_mask)
        if not explain_only and _needs_op(torch, query, key, value, attn_mask, kv_lens,
                                          alibi_slopes):
            return _sdpa_op(torch, op, query, key, value, attn_mask, is_causal, c, s, enable_gqa,
                            return_lse, kv_lens, wl, wr, alibi_slopes, cap, align, kcode)
    q = as_array(query, op, "query", kind)
    k = as_array(key, op, "key", kind)
    v = as_array(value, op, "value", kind)
    qd, kd, vd = dtype_name(q), dtype_name(k), dtype_name(v)
    if qd == "float64":
        if kd not in _FLOAT_DTYPES or vd not in _FLOAT_DTYPES:
            raise TypeError(f"{op}: key/value must be floating point, got key {kd}, value {vd}")
        out_dtype = "float64"
    elif qd in _KV_DTYPES:
        if kd not in _KV_DTYPES or vd not in _KV_DTYPES:
            raise TypeError(f"{op}: a {qd} query needs float32, float16 or bfloat16 key/value, "
                            f"got key {kd}, value {vd}")
        out_dtype = qd
    else:
        raise TypeError(f"{op}: query dtype {qd} is not supported; attnflow computes float32, "
                        f"float16 and bfloat16 queries with its float32 kernels and float64 "
                        f"queries with the float64 reference; cast the query")
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
    B, H, L = q4.shape[0], q4.shape[1], q4.shape[2]
    Dv = v4.shape[3]
    if out_dtype in ("float16", "bfloat16"):
        q4 = q4.float() if kind == TORCH else q4.astype(np.float32)  # documented copy
    elif out_dtype == "float64" and not explain_only and kcode != _K_REFERENCE:
        warnings.warn(f"{op}: float64 inputs run the float64 reference (exact, single-threaded, "
                      f"about two orders of magnitude slower than the float32 kernels); cast to "
                      f"float32 for speed, or pass kernel='reference' to silence this warning",
                      Float64ReferenceWarning, stacklevel=3)
    compute = "float64" if out_dtype == "float64" else "float32"
    out = empty((B, H, L, Dv), compute, kind)
    if explain_only:
        return _core.explain(out, None, q4, k4, v4, m4, kvl, alibi, c, s, wl, wr, kcode, cap, align)
    lse = empty((B, H, L), compute, kind) if return_lse else None
    _core.sdpa(out, lse, q4, k4, v4, m4, kvl, alibi, c, s, wl, wr, kcode, cap, align)
    if out_dtype != compute:
        out = out.to(getattr(torch, out_dtype)) if kind == TORCH else out.astype(out_dtype)
    if R != 4 or len(batch) != 1:
        full = batch + (Hq, L, Dv)
        out = out.reshape(full[len(full) - R:])
        if lse is not None:
            lse = lse.reshape(full[len(full) - R:-1])
    return (out, lse) if return_lse else out


def _sdpa_op(torch, op, query, key, value, attn_mask, is_causal, c, s, enable_gqa, return_lse,
             kv_lens, wl, wr, alibi_slopes, cap, align, kcode):
    """The torch path through attnflow::sdpa: every step is a torch op (so
    autograd and tracing see broadcasts and reshapes), no NumPy."""
    ops = _ops(torch)
    for name, x in (("key", key), ("value", value)):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{op}: {name} must be a tensor like the query, got {type(x).__name__}")
    for name, x in (("query", query), ("key", key), ("value", value), ("attn_mask", attn_mask)):
        if isinstance(x, torch.Tensor) and x.device.type != "cpu":
            raise TypeError(f"{op}: {name} is on device '{x.device}'; attnflow runs on the CPU "
                            f"only (move it with .cpu())")
    f64, kvd = torch.float64, (torch.float32, torch.float16, torch.bfloat16)
    q, k, v = query, key, value
    if q.dtype == f64:
        if not (k.dtype.is_floating_point and v.dtype.is_floating_point):
            raise TypeError(f"{op}: key/value must be floating point, got key {k.dtype}, "
                            f"value {v.dtype}")
    elif q.dtype in kvd:
        if k.dtype not in kvd or v.dtype not in kvd:
            raise TypeError(f"{op}: a {q.dtype} query needs float32, float16 or bfloat16 "
                            f"key/value, got key {k.dtype}, value {v.dtype}")
    else:
        raise TypeError(f"{op}: query dtype {q.dtype} is not supported; attnflow computes "
                        f"float32, float16 and bfloat16 queries with its float32 kernels and "
                        f"float64 queries with the float64 reference; cast the query")
    shapes = f"query {list(q.shape)}, key {list(k.shape)}, value {list(v.shape)}"
    R = max(q.dim(), k.dim(), v.dim())
    if min(q.dim(), k.dim(), v.dim()) < 2:
        raise ValueError(f"{op}: query, key and value need rank >= 2 ([..., L, E]); got {shapes}")
    R3 = max(R, 3)
    q, k, v = (x.reshape((1,) * (R3 - x.dim()) + tuple(x.shape)) if x.dim() < R3 else x
               for x in (q, k, v))
    Hq, Hk = q.shape[-3], k.shape[-3]
    if Hk != v.shape[-3]:
        raise ValueError(f"{op}: key and value have different numbers of heads: {shapes}")
    if Hq != Hk:
        if enable_gqa:
            if Hk == 0 or Hq % Hk != 0:
                raise ValueError(f"{op}: the number of query heads ({Hq}) must be a multiple of "
                                 f"the number of key/value heads ({Hk}) with enable_gqa=True; "
                                 f"{shapes}")
        elif Hq == 1:
            q = q.expand(tuple(q.shape[:-3]) + (Hk,) + tuple(q.shape[-2:]))
            Hq = Hk
        elif Hk != 1:
            raise ValueError(f"{op}: query has {Hq} heads but key/value have {Hk}; pass "
                             f"enable_gqa=True for grouped-query attention ({shapes})")
    try:
        batch = tuple(torch.broadcast_shapes(q.shape[:-3], k.shape[:-3], v.shape[:-3]))
    except RuntimeError:
        raise ValueError(f"{op}: batch dims do not broadcast: {shapes}") from None
    q = q.expand(batch + tuple(q.shape[-3:]))
    k = k.expand(batch + tuple(k.shape[-3:]))
    v = v.expand(batch + tuple(v.shape[-3:]))
    L, S = q.shape[-2], k.shape[-2]
    q4, k4, v4 = (x.reshape((-1,) + tuple(x.shape[-3:])) if x.dim() != 4 else x
                  for x in (q, k, v))
    m4 = None
    grad = torch.is_grad_enabled()
    if attn_mask is not None:
        if is_causal:
            raise ValueError(f"{op}: an explicit attn_mask must not be set when is_causal=True "
                             f"(as in torch); use causal='top_left' to combine both")
        m = attn_mask if isinstance(attn_mask, torch.Tensor) else torch.as_tensor(attn_mask)
        if m.dtype != torch.bool and not m.dtype.is_floating_point:
            raise TypeError(f"{op}: attn_mask must be bool or floating point, got "
                            f"{str(m.dtype).replace('torch.', '')}")
        if grad and m.requires_grad:
            raise RuntimeError(f"{op}: attn_mask requires grad, but attnflow has no gradient "
                               f"with respect to the mask (only q, k and v are differentiable); "
                               f"detach it, or use torch's own attention for a learned bias")
        full = batch + (Hq, L, S)
        try:
            m = m.expand(full)
        except RuntimeError:
            raise ValueError(f"{op}: attn_mask {list(m.shape)} does not broadcast to "
                             f"[..., H, L, S] = {list(full)} ({shapes})") from None
        m4 = m.reshape((-1,) + full[-3:]) if m.dim() != 4 else m
    kvl = None
    if kv_lens is not None:
        kvl = kv_lens if isinstance(kv_lens, torch.Tensor) else torch.tensor(kv_lens, dtype=torch.int64)
    alibi = None
    if alibi_slopes is not None:
        alibi = (alibi_slopes if isinstance(alibi_slopes, torch.Tensor)
                 else torch.tensor(alibi_slopes, dtype=torch.float64))
        if grad and alibi.requires_grad:
            raise RuntimeError(f"{op}: alibi_slopes requires grad, but attnflow has no gradient "
                               f"with respect to the slopes; detach them")
    if q4.dtype == f64 and kcode != _K_REFERENCE and not torch.compiler.is_compiling():
        warnings.warn(f"{op}: float64 inputs run the float64 reference (exact, single-threaded, "
                      f"about two orders of magnitude slower than the float32 kernels); cast to "
                      f"float32 for speed, or pass kernel='reference' to silence this warning",
                      Float64ReferenceWarning, stacklevel=4)
    out, lse = ops.sdpa(q4, k4, v4, m4, kvl, alibi, c, s, wl, wr, cap, align, kcode)
    if q4.dtype != f64:
        lse = lse.to(torch.float32)  # the documented dtype (the op keeps float64 for the backward)
    Dv = v4.shape[3]
    if R != 4 or len(batch) != 1:
        full = batch + (Hq, L, Dv)
        out = out.reshape(full[len(full) - R:])
        lse = lse.reshape(full[len(full) - R:-1])
    return (out, lse) if return_lse else out


def explain(query, key, value, attn_mask=None, *, is_causal: bool = False,
            causal: Optional[str] = None, kv_lens=None, window=None, alibi_slopes=None,
            scale: Optional[float] = None, enable_gqa: bool = False, softcap: float = 0.0,
            kv_align: str = "padded", kernel: str = "auto") -> str:
    """The kernel attnflow.scaled_dot_product_attention would run for these
    arguments, and why (the same argument handling and dispatch as the call;
    nothing is computed)."""
    return _sdpa_general("attnflow.explain", query, key, value, attn_mask, 0.0, is_causal, scale,
                         enable_gqa, False, causal, kv_lens, window, alibi_slopes, softcap,
                         kv_align, kernel, explain_only=True)


def merge_attention_states(out_a, lse_a, out_b, lse_b):
    """Exact merge of two partial attention results over disjoint key sets.

    out_* [B, H, L, Dv] float32, lse_* [B, H, L] float32 (natural log). Returns
    (out, lse) with lse = logaddexp(lse_a, lse_b) and out the lse-weighted mix;
    rows where both lse are -inf give out 0, lse -inf. Differentiable for
    torch inputs that require grad (computed with torch ops then).
    """
    op = "attnflow.merge_attention_states"
    kind = kind_of(out_a)
    if kind == TORCH:
        torch = torch_module()
        if _needs_op(torch, out_a, lse_a, out_b, lse_b):
            return _merge_torch(torch, out_a, lse_a, out_b, lse_b)
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


def _merge_torch(torch, out_a, lse_a, out_b, lse_b):
    """The merge in torch ops (differentiable), with the same dead-row rule."""
    lse = torch.logaddexp(lse_a, lse_b)
    dead = torch.isneginf(lse)
    safe = torch.where(dead, torch.zeros_like(lse), lse)
    wa = torch.where(dead, torch.zeros_like(lse), torch.exp(lse_a - safe))
    wb = torch.where(dead, torch.zeros_like(lse), torch.exp(lse_b - safe))
    return out_a * wa.unsqueeze(-1) + out_b * wb.unsqueeze(-1), lse
