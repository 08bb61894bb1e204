# transformers.py — attnflow as a Hugging Face transformers attention backend.
#
# register() adds an attention function "attnflow" to transformers'
# AttentionInterface (and the boolean SDPA mask format to
# AttentionMaskInterface), so from_pretrained(..., attn_implementation=
# "attnflow") runs every attention call of a CPU model through
# attnflow.scaled_dot_product_attention.
#
# Invariants:
#  * Same decisions as transformers' own "sdpa" function: is_causal only for
#    q_len > 1 without a mask (then top-left), padding / causal masks are the
#    SDPA boolean masks (True = attend), GQA through enable_gqa (no
#    repeat_kv copies), position_bias folded into a float mask as sdpa does.
#  * Non-float32 models: attnflow computes float16/bfloat16 in float32 (the
#    query converted, K/V read natively) and returns the query's dtype.
#  * Logit softcapping (Gemma 2's attn_logit_softcapping, passed as
#    `softcap`) is attnflow's softcap. Training works: the call is
#    differentiable (attnflow's custom op).
#  * What attnflow cannot do is a clear error: attention dropout, attention
#    sinks, output_attentions, non-CPU tensors.
#  * `calls` counts invocations (tests check the backend really ran).
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .._sdpa import scaled_dot_product_attention

NAME = "attnflow"
calls = 0


def attnflow_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                               value: torch.Tensor, attention_mask: Optional[torch.Tensor],
                               dropout: float = 0.0, scaling: Optional[float] = None,
                               is_causal: Optional[bool] = None,
                               position_bias: Optional[torch.Tensor] = None,
                               **kwargs) -> Tuple[torch.Tensor, None]:
    global calls
    op = "attnflow transformers backend"
    name = type(module).__name__
    if kwargs.get("s_aux") is not None or kwargs.get("sinks") is not None:
        raise ValueError(f"{op}: {name} uses attention sinks, which attnflow does not support")
    if kwargs.get("output_attentions", False):
        raise ValueError(f"{op}: output_attentions=True needs attention weights; use "
                         f"attn_implementation='eager' (or attnflow.reference.sdpa(stages=True))")
    if dropout:
        raise ValueError(f"{op}: attention dropout {dropout} (training mode?) is not supported; "
                         f"call model.eval()")
    q_len = query.shape[2]
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    is_causal = bool(q_len > 1 and attention_mask is None and is_causal)
    if position_bias is not None:
        from transformers.integrations.sdpa_attention import create_position_bias_mask
        attention_mask = create_position_bias_mask(position_bias, attention_mask, is_causal,
                                                   query, key)
        is_causal = False
    softcap = kwargs.get("softcap")
    out = scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                       is_causal=is_causal, enable_gqa=True,
                                       softcap=0.0 if softcap is None else float(softcap))
    calls += 1
    return out.transpose(1, 2).contiguous(), None


def register(name: str = NAME) -> str:
    """Registers the backend; returns the name for attn_implementation=."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(name, attnflow_attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
