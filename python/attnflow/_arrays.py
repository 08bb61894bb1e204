# _arrays.py — array plumbing shared by the attnflow Python API: which
# framework an argument comes from (torch / NumPy / other DLPack producer),
# device checks, zero-copy broadcasting and output allocation.
#
# Invariants:
#  * Nothing here copies an input except the documented cases: NumPy arrays
#    with negative strides (TensorView strides are non-negative), batch dims
#    that cannot be merged into one without a copy (rank > 4), and plain
#    Python sequences given for kv_lens / alibi_slopes.
#  * A tensor on a non-CPU device is a TypeError naming the op and device.
#  * torch is imported only when the caller already imported it.
from __future__ import annotations

import sys
from typing import Any

import numpy as np

TORCH = "torch"
NUMPY = "numpy"


def torch_module():
    return sys.modules.get("torch")


def kind_of(x: Any) -> str:
    """'torch' for torch tensors, else 'numpy' (NumPy or other producers)."""
    t = torch_module()
    if t is not None and isinstance(x, t.Tensor):
        return TORCH
    return NUMPY


def as_array(x: Any, op: str, name: str, kind: str):
    """Returns a zero-copy CPU view of `x` in framework `kind` (TypeError
    for device arrays and unsupported objects)."""
    if kind == TORCH:
        t = torch_module()
        if not isinstance(x, t.Tensor):
            if isinstance(x, np.ndarray):
                return t.from_numpy(_positive_strides(x))
            raise TypeError(f"{op}: {name} must be a tensor like the query, got {type(x).__name__}")
        if x.device.type != "cpu":
            raise TypeError(f"{op}: {name} is on device '{x.device}'; attnflow runs on the CPU "
                            f"only (move it with .cpu())")
        if x.requires_grad:
            x = x.detach()
        return x
    if isinstance(x, np.ndarray):
        return _positive_strides(x)
    t = torch_module()
    if t is not None and isinstance(x, t.Tensor):
        return as_array(x, op, name, TORCH).numpy()
    dev = getattr(x, "__dlpack_device__", None)
    if dev is not None:
        dtype, _ = dev()
        if int(dtype) != 1:  # kDLCPU
            raise TypeError(f"{op}: {name} is on a DLPack device of type {int(dtype)}; attnflow "
                            f"runs on the CPU only")
        return np.from_dlpack(x)
    raise TypeError(f"{op}: {name} must be a torch tensor, a NumPy array or a DLPack producer, "
                    f"got {type(x).__name__}")


def _positive_strides(a: np.ndarray) -> np.ndarray:
    if any(s < 0 for s in a.strides):
        return np.ascontiguousarray(a)  # documented copy: negative strides
    return a


def dtype_name(x) -> str:
    return str(x.dtype).replace("torch.", "")


def broadcast_to(x, shape, kind: str):
    """Zero-copy broadcast (stride 0 on expanded dims)."""
    if tuple(x.shape) == tuple(shape):
        return x
    if kind == TORCH:
        return x.expand(*shape)
    return np.broadcast_to(x, shape)


def reshape(x, shape, kind: str):
    if tuple(x.shape) == tuple(shape):
        return x
    return x.reshape(shape)  # a view when the dims merge; else a copy


def empty(shape, dtype: str, kind: str):
    if kind == TORCH:
        t = torch_module()
        return t.empty(shape, dtype=getattr(t, dtype))
    return np.empty(shape, dtype=dtype)
