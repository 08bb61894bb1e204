# attnflow — exact, explainable CPU attention for Python.
#
# Public API (docs/python.md; stubs in __init__.pyi):
#   scaled_dot_product_attention  drop-in for torch's function (plus extensions)
#   merge_attention_states        exact merge of partial results (LSE weighted)
#   explain                       which kernel runs and why
#   reference.sdpa                the float64 oracle, optionally every stage
#   golden.verify / golden.write  golden cases (docs/golden-format.md)
#   trace                         the attention player (data + HTML)
#   MiniLM, SmolLM2               the pretrained models of the C++ library
#   integrations.transformers     an AttentionInterface backend "attnflow"
# Every computation releases the GIL; errors keep the library's message.
from ._sdpa import explain, merge_attention_states, scaled_dot_product_attention
from . import golden, reference
from ._trace import trace
from .models import MiniLM, SmolLM2

__version__ = "0.1.0"

__all__ = [
    "scaled_dot_product_attention",
    "merge_attention_states",
    "explain",
    "reference",
    "golden",
    "trace",
    "MiniLM",
    "SmolLM2",
    "__version__",
]
