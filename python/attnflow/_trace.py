# _trace.py — attnflow.trace: the attention player's data from Python.
#
# Runs the frozen four-token toy block (model=None; optionally with <pad>
# keys and another causal rule), a MiniLM sentence or padded batch, or a
# SmolLM2 prompt with stage capture on (src/trace, include/attnflow/trace.h),
# and returns the trace as Python data: tokens, every stage of the traced
# layer as NumPy arrays (golden-format names; float64 where the reference
# computed them), decode steps, the fast-kernel cross-check, and the page
# JSON. html="path.html" also writes the self-contained HTML player.
from __future__ import annotations

import json
from typing import Any, Dict, Optional, Sequence

from . import _attnflow as _core

__all__ = ["trace"]


def trace(model: Any = None, text: str = "", *, layer: int = 0, decode_steps: int = 0,
          num_tokens: int = 4, max_tokens: int = 256, heads: Optional[Sequence[int]] = None,
          html: Optional[str] = None, pad: int = 0, causal: Optional[str] = None,
          sentences: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Traces one input; model is None (the toy), an attnflow.MiniLM or an
    attnflow.SmolLM2. pad / causal: the toy only (pad keys masked by kv_lens;
    the toy's causal rule). sentences: 2-16 sentences through a MiniLM as ONE
    padded batch; the result then holds "batch", one trace per sentence.
    Returns a dict (see docs/python.md)."""
    core = None if model is None else getattr(model, "_m", model)
    if core is not None and not text and not sentences:
        raise ValueError("attnflow.trace: text (or sentences, for a MiniLM batch) is required "
                         "with a model")
    if isinstance(sentences, str):
        raise TypeError("attnflow.trace: sentences must be a list of strings, not one string")
    d = _core.trace(core, text, int(layer), int(decode_steps), int(num_tokens), int(max_tokens),
                    [int(h) for h in (heads or [])], "" if html is None else str(html), int(pad),
                    "" if causal is None else str(causal), [str(s) for s in (sentences or [])])
    d["page"] = json.loads(d.pop("page_json"))
    return d
