"""typecheck_usage.py — not a pytest module: a small usage file for the type check
of the package's type information (py.typed, .pyi stubs, annotated modules):
  MYPYPATH=python mypy --strict --python-executable .cache/venv/bin/python \
      python/tests/typecheck_usage.py
(mypy is not in the pinned CI set; run by hand). Nothing here is executed."""
from typing import Optional

import numpy as np
import torch

import attnflow
import attnflow.golden
import attnflow.reference
from attnflow.integrations import transformers as af_tf

q = torch.randn(1, 2, 4, 8)
out = attnflow.scaled_dot_product_attention(q, q, q, is_causal=True)
name: str = af_tf.register()
n: int = af_tf.calls
o, _ = af_tf.attnflow_attention_forward(torch.nn.Linear(1, 1), q, q, q, None, scaling=0.5)
t: torch.Tensor = o
rep = attnflow.golden.verify("case.safetensors")
bad: Optional[str] = rep.first_bad_stage
rows = [r.max_abs for r in rep.stages]
p: str = attnflow.golden.write("x.safetensors", batch=1, causal="top_left")
stages = attnflow.reference.sdpa(np.zeros((1, 1, 2, 4)), np.zeros((1, 1, 2, 4)),
                                 np.zeros((1, 1, 2, 4)), stages=True)
