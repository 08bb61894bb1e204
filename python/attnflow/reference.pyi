# reference.pyi — stubs of attnflow.reference (the float64 oracle).
from typing import Any, Dict, Literal, Optional, Tuple, Union, overload

import numpy as np

@overload
def sdpa(query: Any, key: Any, value: Any, attn_mask: Any = ..., *, is_causal: bool = ...,
         causal: Optional[str] = ..., scale: Optional[float] = ..., kv_lens: Any = ...,
         window: Optional[Tuple[Optional[int], Optional[int]]] = ..., alibi_slopes: Any = ...,
         softcap: float = ..., kv_align: str = ...,
         stages: Literal[False] = ...) -> Tuple[np.ndarray, np.ndarray]: ...
@overload
def sdpa(query: Any, key: Any, value: Any, attn_mask: Any = ..., *, is_causal: bool = ...,
         causal: Optional[str] = ..., scale: Optional[float] = ..., kv_lens: Any = ...,
         window: Optional[Tuple[Optional[int], Optional[int]]] = ..., alibi_slopes: Any = ...,
         softcap: float = ..., kv_align: str = ...,
         stages: Literal[True]) -> Dict[str, np.ndarray]: ...
