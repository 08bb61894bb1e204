# golden.py — attnflow.golden: verify and write golden cases
# (docs/golden-format.md) from Python. verify() runs the float64 reference or
# the fast kernels on a case's inputs and compares every stage with the
# library's rule |got - expected| <= atol + rtol*|expected|; the Report keeps
# one row per stage in canonical order and names the first bad stage.
# Fully annotated: this file is its own type information (no golden.pyi, so
# signatures and docstrings live in one place; py.typed covers it).
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from . import _attnflow as _core

__all__ = ["StageRow", "Report", "verify", "write"]

_CAUSAL = dict(_core.CAUSAL)  # name -> code: the C++ enum's (python/src/module.cc)


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Report:
    path: str
    kind: str
    implementation: str
    stages: List[StageRow] = field(default_factory=list)
    ok: bool = True
    first_bad_stage: Optional[str] = None

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        lines = [f"{self.path}: kind={self.kind} impl={self.implementation} "
                 f"{'PASS' if self.ok else 'FAIL first bad stage: ' + str(self.first_bad_stage)}"]
        for r in self.stages:
            state = "match" if r.match else ("skip" if not r.compared else "MISMATCH")
            lines.append(f"  {r.stage:<10} {state:<8} max_abs={r.max_abs:.3g} "
                         f"max_rel={r.max_rel:.3g} bad={r.mismatches}"
                         + (f" at {r.first_bad_index}" if r.mismatches else "")
                         + (f" ({r.note})" if r.note else ""))
        return "\n".join(lines)


def verify(path: str, impl: str = "reference") -> Report:
    """Verifies one golden case; impl is 'reference' or 'kernels'."""
    d = _core.golden_verify(str(path), impl)
    rows = [StageRow(**r) for r in d["stages"]]
    return Report(path=d["path"], kind=d["kind"], implementation=d["implementation"],
                  stages=rows, ok=d["ok"], first_bad_stage=d["first_bad_stage"])


def write(path: str, *, kind: str = "sdpa", batch: int = 1, num_heads: int = 2,
          num_kv_heads: int = 0, q_len: int = 4, kv_len: int = 4, head_dim: int = 8,
          v_dim: int = 0, causal: str = "none", scale: Optional[float] = None,
          mask: str = "none", mask_shape: Sequence[int] = (), kv_lens: Sequence[int] = (),
          window: Optional[Sequence[Optional[int]]] = None, alibi: bool = False,
          seed: int = 0, description: str = "") -> str:
    """Writes a new case (random inputs from the project's seeded Rng, every
    stage from the float64 reference). Returns the path."""
    if causal not in _CAUSAL:
        raise ValueError(f"attnflow.golden.write: causal must be one of {sorted(_CAUSAL)}, "
                         f"got {causal!r}")
    wl, wr = -1, -1
    if window is not None:
        wl = -1 if window[0] is None else int(window[0])
        wr = -1 if window[1] is None else int(window[1])
    _core.golden_write(str(path), kind, batch, num_heads, num_kv_heads, q_len, kv_len, head_dim,
                       v_dim, _CAUSAL[causal], math.nan if scale is None else float(scale),
                       mask, list(mask_shape), list(kv_lens), wl, wr, bool(alibi), int(seed),
                       description)
    return str(path)
