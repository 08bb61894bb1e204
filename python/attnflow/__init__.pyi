# __init__.pyi — type stubs of the attnflow package (the public API; see
# docs/python.md). Arrays are torch tensors, NumPy arrays or DLPack producers.
from typing import Any, Dict, Literal, Optional, Sequence, Tuple, Union, overload

from . import flash as flash
from . import golden as golden
from . import reference as reference
from .models import MiniLM as MiniLM, SmolLM2 as SmolLM2

__version__: str

ArrayLike = Any  # torch.Tensor | numpy.ndarray | DLPack producer (CPU)
Causal = Literal["none", "top_left", "bottom_right"]
Kernel = Literal["auto", "reference", "tiled_prefill", "split_kv_decode"]
KvAlign = Literal["padded", "per_sequence"]

class Float64ReferenceWarning(RuntimeWarning): ...

@overload
def scaled_dot_product_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: Optional[ArrayLike] = ...,
    dropout_p: float = ..., is_causal: bool = ..., scale: Optional[float] = ...,
    enable_gqa: bool = ..., *, return_lse: Literal[False] = ..., causal: Optional[Causal] = ...,
    kv_lens: Optional[ArrayLike] = ..., window: Optional[Tuple[Optional[int], Optional[int]]] = ...,
    alibi_slopes: Optional[ArrayLike] = ..., softcap: float = ..., kv_align: KvAlign = ...,
    kernel: Kernel = ...) -> Any: ...
@overload
def scaled_dot_product_attention(
    query: ArrayLike, key: ArrayLike, value: ArrayLike, attn_mask: Optional[ArrayLike] = ...,
    dropout_p: float = ..., is_causal: bool = ..., scale: Optional[float] = ...,
    enable_gqa: bool = ..., *, return_lse: Literal[True], causal: Optional[Causal] = ...,
    kv_lens: Optional[ArrayLike] = ..., window: Optional[Tuple[Optional[int], Optional[int]]] = ...,
    alibi_slopes: Optional[ArrayLike] = ..., softcap: float = ..., kv_align: KvAlign = ...,
    kernel: Kernel = ...) -> Tuple[Any, Any]: ...
def merge_attention_states(out_a: ArrayLike, lse_a: ArrayLike, out_b: ArrayLike,
                           lse_b: ArrayLike) -> Tuple[Any, Any]: ...
def explain(query: ArrayLike, key: ArrayLike, value: ArrayLike,
            attn_mask: Optional[ArrayLike] = ..., *, is_causal: bool = ...,
            causal: Optional[Causal] = ..., kv_lens: Optional[ArrayLike] = ...,
            window: Optional[Tuple[Optional[int], Optional[int]]] = ...,
            alibi_slopes: Optional[ArrayLike] = ..., scale: Optional[float] = ...,
            enable_gqa: bool = ..., softcap: float = ..., kv_align: KvAlign = ...,
            kernel: Kernel = ...) -> str: ...
def set_num_threads(n: int) -> None: ...
def get_num_threads() -> int: ...
def register_torch_ops() -> None: ...
def trace(model: Any = ..., text: str = ..., *, layer: int = ..., decode_steps: int = ...,
          num_tokens: int = ..., max_tokens: int = ..., heads: Optional[Any] = ...,
          html: Optional[str] = ..., pad: int = ..., causal: Optional[str] = ...,
          sentences: Optional[Sequence[str]] = ...) -> Dict[str, Any]: ...
