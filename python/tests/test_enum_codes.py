"""test_enum_codes.py — the enums the package hands to the compiled core as
integers have one source: the C++ enums, published by name as
_attnflow.CAUSAL, _attnflow.KERNELS and _attnflow.KV_ALIGN
(python/src/module.cc). The package
keeps no table of its own, and the core refuses a code it does not know
(instead of casting it into an enum)."""
import math

import numpy as np
import pytest

import attnflow
from attnflow import _attnflow as core
from attnflow import _sdpa, golden


def test_the_package_reads_its_codes_from_the_core():
    assert set(core.CAUSAL) == {"none", "top_left", "bottom_right"}
    assert set(core.KERNELS) == {"auto", "reference", "tiled_prefill", "split_kv_decode"}
    assert _sdpa._CAUSAL == dict(core.CAUSAL) and golden._CAUSAL == dict(core.CAUSAL)
    assert set(core.KV_ALIGN) == {"padded", "per_sequence"}
    assert _sdpa._KERNEL == dict(core.KERNELS) and _sdpa._KV_ALIGN == dict(core.KV_ALIGN)
    assert len(set(core.CAUSAL.values())) == 3 and len(set(core.KERNELS.values())) == 4
    assert len(set(core.KV_ALIGN.values())) == 2


def test_the_core_refuses_an_unknown_code():
    q = np.zeros((1, 1, 3, 4), np.float32)
    out = np.empty_like(q)
    bad = max(list(core.CAUSAL.values()) + list(core.KERNELS.values())
              + list(core.KV_ALIGN.values())) + 7
    with pytest.raises(ValueError, match="not a causal code"):
        core.sdpa(out, None, q, q, q, None, None, None, bad, math.nan, -1, -1, core.KERNELS["auto"])
    with pytest.raises(ValueError, match="not a kernel code"):
        core.sdpa(out, None, q, q, q, None, None, None, core.CAUSAL["none"], math.nan, -1, -1, bad)
    with pytest.raises(ValueError, match="not a kv_align code"):
        core.sdpa(out, None, q, q, q, None, None, None, core.CAUSAL["none"], math.nan, -1, -1,
                  core.KERNELS["auto"], 0.0, bad)


@pytest.mark.parametrize("causal", ["none", "top_left", "bottom_right"])
def test_each_name_means_its_rule(causal):
    # Lq = 2 queries, Lk = 5 keys: top_left lets query i see keys 0..i,
    # bottom_right keys 0..i+3 (docs/semantics.md); checked on the weights
    # the reference returns for one-hot values.
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 1, 2, 4)).astype(np.float32)
    k = rng.standard_normal((1, 1, 5, 4)).astype(np.float32)
    v = np.eye(5, dtype=np.float32)[None, None]  # out[i, j] = weight of key j
    out = attnflow.scaled_dot_product_attention(q, k, v, causal=causal)
    last = {"none": [4, 4], "top_left": [0, 1], "bottom_right": [3, 4]}[causal]
    for i in range(2):
        assert np.all(out[0, 0, i, last[i] + 1:] == 0), (causal, i, out)
        assert np.all(out[0, 0, i, :last[i] + 1] > 0), (causal, i, out)
