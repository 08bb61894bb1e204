# _trace.py — attnflow.trace: the attention player's data from Python.
#
# Runs the frozen four-token toy block (model=None), a MiniLM sentence or a
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
          html: Optional[str] = None) -> Dict[str, Any]:
    """Traces one input; model is None (the toy), an attnflow.MiniLM or an
    attnflow.SmolLM2. Returns a dict (see docs/python.md)."""
    core = None if model is None else getattr(model, "_m", model)
    if core is not None and not text:
        raise ValueError("attnflow.trace: text is required with a model")
    d = _core.trace(core, text, int(layer), int(decode_steps), int(num_tokens), int(max_tokens),
                    [int(h) for h in (heads or [])], "" if html is None else str(html))
    d["page"] = json.loads(d.pop("page_json"))
    return d
