# golden.pyi — stubs of attnflow.golden.
from typing import List, Optional, Sequence

class StageRow:
    stage: str
    compared: bool
    match: bool
    max_abs: float
    max_rel: float
    mismatches: int
    first_bad: int
    first_bad_index: str
    got_at_bad: float
    expected_at_bad: float
    note: str

class Report:
    path: str
    kind: str
    implementation: str
    stages: List[StageRow]
    ok: bool
    first_bad_stage: Optional[str]
    def __bool__(self) -> bool: ...

def verify(path: str, impl: str = ...) -> Report: ...
def write(path: str, *, kind: str = ..., batch: int = ..., num_heads: int = ...,
          num_kv_heads: int = ..., q_len: int = ..., kv_len: int = ..., head_dim: int = ...,
          v_dim: int = ..., causal: str = ..., scale: Optional[float] = ..., mask: str = ...,
          mask_shape: Sequence[int] = ..., kv_lens: Sequence[int] = ...,
          window: Optional[Sequence[Optional[int]]] = ..., alibi: bool = ..., seed: int = ...,
          description: str = ...) -> str: ...
