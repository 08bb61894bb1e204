# transformers.pyi — stubs of attnflow.integrations.transformers (the
# Hugging Face transformers attention backend, see transformers.py).
from typing import Any, Optional, Tuple

import torch

NAME: str
calls: int

def attnflow_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                               value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                               dropout: float = ..., scaling: Optional[float] = ...,
                               is_causal: Optional[bool] = ...,
                               position_bias: Optional[torch.Tensor] = ...,
                               **kwargs: Any) -> Tuple[torch.Tensor, None]: ...
def register(name: str = ...) -> str: ...
