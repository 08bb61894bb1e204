# reference.py — attnflow.reference: the float64 oracle (reference::Sdpa) from
# Python. With stages=True every stage is returned as a float64 NumPy array
# under the golden-format names (docs/golden-format.md): scores scaled masked
# weights lse out. Inputs are rank-4 [B, H, L, E] arrays of any float dtype
# (torch, NumPy or DLPack; zero-copy); semantics as
# attnflow.scaled_dot_product_attention with enable_gqa implied.
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple, Union

import numpy as np

from . import _attnflow as _core
from ._arrays import as_array, kind_of
from ._sdpa import _causal_code, _small_array

__all__ = ["sdpa"]


def sdpa(query, key, value, attn_mask=None, *, is_causal: bool = False,
         causal: Optional[str] = None, scale: Optional[float] = None, kv_lens=None,
         window=None, alibi_slopes=None, stages: bool = False
         ) -> Union[Tuple[np.ndarray, np.ndarray], Dict[str, np.ndarray]]:
    """Float64 attention. Returns (out, lse) as float64 NumPy arrays, or with
    stages=True a dict {stage name: float64 array} of every stage."""
    op = "attnflow.reference.sdpa"
    kind = kind_of(query)
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
                                _causal_code(is_causal, causal, op),
                                math.nan if scale is None else float(scale), wl, wr, bool(stages))
