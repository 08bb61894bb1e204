# reference.py — attnflow.reference: the float64 oracle (reference::Sdpa) from
# Python. With stages=True every stage is returned as a float64 NumPy array
# under the golden-format names (docs/golden-format.md): scores scaled masked
# weights lse out. Inputs are rank-4 [B, H, L, E] arrays of any float dtype
# (torch, NumPy or DLPack; zero-copy); semantics as
# attnflow.scaled_dot_product_attention with enable_gqa implied (softcap,
# kv_align and [B,H] ALiBi slopes included).
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple, Union

import numpy as np

from . import _attnflow as _core
from ._arrays import TORCH, as_array, kind_of, torch_module
from ._sdpa import _align_code, _causal_code, _scale_value, _small_array, _softcap_value

__all__ = ["sdpa"]


def sdpa(query, key, value, attn_mask=None, *, is_causal: bool = False,
         causal: Optional[str] = None, scale: Optional[float] = None, kv_lens=None,
         window=None, alibi_slopes=None, softcap: float = 0.0, kv_align: str = "padded",
         stages: bool = False
         ) -> Union[Tuple[np.ndarray, np.ndarray], Dict[str, np.ndarray]]:
    """Float64 attention. Returns (out, lse) as float64 NumPy arrays, or with
    stages=True a dict {stage name: float64 array} of every stage. The results
    are NumPy arrays: torch inputs that require grad are an error (there is no
    autograd here; use attnflow.scaled_dot_product_attention)."""
    op = "attnflow.reference.sdpa"
    kind = kind_of(query)
    if kind == TORCH:
        torch = torch_module()
        if torch.is_grad_enabled() and any(isinstance(x, torch.Tensor) and x.requires_grad
                                           for x in (query, key, value, attn_mask)):
            raise TypeError(f"{op}: an input requires grad, but the float64 oracle returns NumPy "
                            f"arrays without autograd; pass tensors without grad (x.detach()) "
                            f"or use attnflow.scaled_dot_product_attention for gradients")
    q = as_array(query, op, "query", kind)
    k = as_array(key, op, "key", kind)
    v = as_array(value, op, "value", kind)
    m = None if attn_mask is None else as_array(attn_mask, op, "attn_mask", kind)
    wl, wr = -1, -1
    if window is not None:
        wl = -1 if window[0] is None else int(window[0])
        wr = -1 if window[1] is None else int(window[1])
    return _core.reference_sdpa(q, k, v, m, _small_array(kv_lens, kind, np.int64, op, "kv_lens"),
                                _small_array(alibi_slopes, kind, np.float64, op, "alibi_slopes"),
                                _causal_code(is_causal, causal, op), _scale_value(scale, op),
                                wl, wr, bool(stages), _softcap_value(softcap, op),
                                _align_code(kv_align, op))
