# test_reference_golden.py — attnflow.reference.sdpa(stages=True) against a
# float64 torch computation, and attnflow.golden.write/verify, including a
# tampered case whose report must name the first bad stage.
import math

import numpy as np
import pytest
import torch

import attnflow


def test_reference_stages_match_torch_float64():
    g = torch.Generator().manual_seed(9)
    q = torch.randn(2, 4, 5, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 2, 7, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 2, 7, 3, generator=g, dtype=torch.float64)
    mask = torch.rand(5, 7, generator=g) < 0.7
    st = attnflow.reference.sdpa(q, k, v, mask, scale=0.3, stages=True)
    assert {"scores", "scaled", "masked", "weights", "lse", "out"} <= set(st)
    assert all(a.dtype == np.float64 for a in st.values())
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    scores = q @ kk.transpose(-1, -2)
    masked = (scores * 0.3).masked_fill(~mask, -math.inf)
    np.testing.assert_allclose(st["scores"], scores.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(st["scaled"], (scores * 0.3).numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(st["masked"]), np.isinf(masked.numpy()))
    w = torch.softmax(masked, -1).nan_to_num(0.0)
    np.testing.assert_allclose(st["weights"], w.numpy(), rtol=1e-12, atol=1e-12)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, mask, scale=0.3, enable_gqa=True)
    np.testing.assert_allclose(st["out"], ref.numpy(), rtol=1e-12, atol=1e-12)
    out, lse = attnflow.reference.sdpa(q, k, v, mask, scale=0.3)
    np.testing.assert_array_equal(out, st["out"])
    fin = np.isfinite(st["lse"])
    np.testing.assert_allclose(lse[fin], torch.logsumexp(masked, -1).numpy()[fin], rtol=1e-12)


@pytest.mark.parametrize("impl", ["reference", "kernels"])
def test_golden_write_then_verify(tmp_path, impl):
    p = attnflow.golden.write(tmp_path / "case.safetensors", num_heads=4, num_kv_heads=2, q_len=5,
                              kv_len=9, head_dim=8, causal="bottom_right", mask="bool", seed=3)
    rep = attnflow.golden.verify(p, impl=impl)
    assert rep.ok and rep.first_bad_stage is None, str(rep)
    assert [r.stage for r in rep.stages if r.compared]  # something was compared
    assert "out" in [r.stage for r in rep.stages]


def test_golden_tampered_stage_is_first_bad(tmp_path):
    from safetensors import safe_open
    from safetensors.numpy import save_file
    p = str(tmp_path / "case.safetensors")
    attnflow.golden.write(p, q_len=4, kv_len=6, seed=1)
    with safe_open(p, "np") as f:
        meta = f.metadata()
        tensors = {n: f.get_tensor(n) for n in f.keys()}
    tensors["weights"] = tensors["weights"].copy()
    tensors["weights"][0, 1, 2, 3] += 0.01
    save_file(tensors, p, metadata=meta)
    rep = attnflow.golden.verify(p)
    assert not rep.ok and rep.first_bad_stage == "weights", str(rep)
    bad = [r for r in rep.stages if r.stage == "weights"][0]
    assert bad.mismatches == 1 and bad.first_bad_index == "[0,1,2,3]"


def test_golden_committed_cases_verify():
    import glob
    import os
    root = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "golden")
    cases = sorted(glob.glob(os.path.join(root, "*.safetensors")))[:5]
    if not cases:
        pytest.skip("no committed golden cases next to this checkout")
    for c in cases:
        assert attnflow.golden.verify(c).ok, c


def test_trace_toy_properties_and_player(tmp_path):
    html = tmp_path / "player.html"
    d = attnflow.trace(html=str(html), decode_steps=1)
    assert d["source"] == "toy" and [t[1] for t in d["tokens"]] == ["the", "cat", "sat", "down"]
    w = d["stages"]["weights"]  # [1, H, L, L], top-left causal toy
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-12)
    assert np.all(np.triu(w[0], k=1) == 0)
    assert d["kernel_check"]["ran"] and d["kernel_check"]["max_abs_out"] < 1e-5
    assert d["page"]["format"] == "attnflow-trace/1" and len(d["decode"]) == 1
    assert "attnflow-trace/1" in html.read_text(encoding="utf-8")


def test_trace_toy_pad_keys_get_weight_zero_and_real_rows_match():
    # The property of a key-padding mask (semantics.h): pad keys get weight
    # exactly 0, and the real tokens' rows equal the unpadded toy's.
    plain = attnflow.trace(causal="none")
    d = attnflow.trace(pad=2, causal="none")
    assert d["causal"] == "none" and [t[1] for t in d["tokens"]][-2:] == ["<pad>", "<pad>"]
    assert d["padding"] == {"keys": [4, 5], "kv_len": 4} and plain["padding"] is None
    w = d["stages"]["weights"]  # [1, H, 6, 6]
    assert np.all(w[..., 4:] == 0.0)
    np.testing.assert_allclose(w[..., :4, :4], plain["stages"]["weights"], rtol=0, atol=1e-14)
    np.testing.assert_allclose(d["stages"]["out"][..., :4, :], plain["stages"]["out"], rtol=0, atol=1e-14)
    assert d["page"]["padding"]["kv_len"] == 4
    with pytest.raises(ValueError, match="pad"):
        attnflow.trace(pad=-1)
    with pytest.raises(ValueError, match="causal must be"):
        attnflow.trace(causal="diagonal")


def test_trace_minilm_batch_rows_equal_each_sentence_alone():
    m = attnflow.MiniLM()
    a, b = "The cat sat.", "A much longer sentence about a dog that ran far away."
    d = attnflow.trace(m, sentences=[a, b], layer=1)
    assert d["sentences"] == [a, b] and len(d["batch"]) == 2
    assert d["page"]["batch"]["sentences"] == [a, b]
    short = d["batch"][0]
    alone = attnflow.trace(m, a, layer=1)
    n = len(alone["tokens"])
    assert short["batch_index"] == 0 and short["padding"]["kv_len"] == n
    assert len(short["tokens"]) == len(d["batch"][1]["tokens"]) > n
    w = short["stages"]["weights"]
    assert np.all(w[..., :n, n:] == 0.0)  # real queries never see the pads
    np.testing.assert_allclose(w[..., :n, :n], alone["stages"]["weights"], atol=1e-5)
    with pytest.raises(ValueError, match="not both"):
        attnflow.trace(m, a, sentences=[a, b])
    with pytest.raises(ValueError, match="encoder"):
        attnflow.trace(None, sentences=[a, b])
    with pytest.raises(ValueError, match="toy only"):
        attnflow.trace(m, a, pad=2)


def test_trace_minilm_sentence():
    d = attnflow.trace(attnflow.MiniLM(), "The cat sat on the mat.", layer=2)
    assert d["source"] == "encoder" and d["layer"] == 2
    w = d["stages"]["weights"]
    assert w.shape[-1] == len(d["tokens"])
    np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-6)
