# attnflow — exact, explainable CPU attention for Python.
#
# Public API (docs/python.md; stubs in __init__.pyi):
#   scaled_dot_product_attention  drop-in for torch's function (plus extensions),
#                                 differentiable, torch.compile / torch.export ready
#   merge_attention_states        exact merge of partial results (LSE weighted)
#   explain                       which kernel runs and why
#   flash                         FlashAttention's API (flash_attn_func, varlen, kvcache)
#   reference.sdpa                the float64 oracle, optionally every stage
#   golden.verify / golden.write  golden cases (docs/golden-format.md)
#   trace                         the attention player (data + HTML)
#   MiniLM, SmolLM2               the pretrained models of the C++ library
#   integrations.transformers     an AttentionInterface backend "attnflow"
#   set_num_threads / get_num_threads   threads of the attention calls
#   register_torch_ops            the torch.library custom ops (automatic when
#                                 torch is imported first)
# Every computation releases the GIL; errors keep the library's message.
import sys as _sys

from ._sdpa import (Float64ReferenceWarning, explain, merge_attention_states,
                    register_torch_ops, scaled_dot_product_attention)
from . import _attnflow as _core
from . import golden, reference
from ._trace import trace
from .models import MiniLM, SmolLM2

__version__ = "0.1.0"


def set_num_threads(n: int) -> None:
    """Sets the number of threads of attnflow's attention calls (0 = the
    default: $ATTNFLOW_NUM_THREADS or the hardware's). Results never depend
    on it. Models take their own `threads=` at construction."""
    _core.set_num_threads(int(n))


def get_num_threads() -> int:
    """The number of threads attnflow's attention calls use."""
    return int(_core.get_num_threads())


def __getattr__(name):
    if name == "flash":  # imports torch: only on use
        import importlib
        return importlib.import_module(".flash", __name__)
    raise AttributeError(f"module 'attnflow' has no attribute {name!r}")


if "torch" in _sys.modules:  # torch is already imported: register the custom ops now
    register_torch_ops()

__all__ = [
    "scaled_dot_product_attention",
    "merge_attention_states",
    "explain",
    "reference",
    "golden",
    "trace",
    "MiniLM",
    "SmolLM2",
    "set_num_threads",
    "get_num_threads",
    "register_torch_ops",
    "Float64ReferenceWarning",
    "__version__",
]
