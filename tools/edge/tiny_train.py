"""tiny_train.py — what the two tiny decoders' trainers (tools/edge/tiny/
train.py, tools/edge/tiny_llama/train.py) share: the deterministic
character-level training loop on tests/data/edge/tiny_text.txt, the float16
rounding that defines the committed weights, and the greedy float32
generation that defines the expected tokens. Deterministic: fixed seeds, one
thread, torch.use_deterministic_algorithms; pinned versions in
tools/edge/tiny/requirements.txt."""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.numpy import save_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(ROOT, "tests", "data", "edge")
PROMPT = "The kernel "
GEN = 64


def train(make_model, seed, batch_seed):
    """Trains make_model(vocab_size) for $TINY_STEPS (2000) AdamW steps on
    batches of 32 windows of 64 characters. Returns (model, vocab, steps,
    final loss)."""
    torch.manual_seed(seed)
    np.random.seed(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    text = open(os.path.join(DATA, "tiny_text.txt"), encoding="ascii").read()
    vocab = sorted(set(text))
    stoi = {c: i for i, c in enumerate(vocab)}
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    model = make_model(len(vocab))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    steps = int(os.environ.get("TINY_STEPS", "2000"))
    g = torch.Generator().manual_seed(batch_seed)
    for step in range(steps):
        ix = torch.randint(0, len(data) - 65, (32,), generator=g)
        xb = torch.stack([data[i:i + 64] for i in ix])
        yb = torch.stack([data[i + 1:i + 65] for i in ix])
        loss = F.cross_entropy(model(xb).reshape(-1, len(vocab)), yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 250 == 0 or step == steps - 1:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    return model, vocab, steps, float(loss.item())


def save_f16(model, name, metadata):
    """Rounds every parameter to float16 and reloads it as float32 (the model
    every other implementation reproduces); writes the float16 tensors to
    tests/data/edge/NAME with the metadata."""
    tensors = {}
    with torch.no_grad():
        for pname, p in model.named_parameters():
            h = p.detach().to(torch.float16)
            tensors[pname] = h.numpy()
            p.copy_(h.to(torch.float32))
    save_file(tensors, os.path.join(DATA, name), metadata=metadata)


def generate(model, vocab):
    """Greedy float32 generation of GEN tokens after PROMPT (argmax, first
    max on ties). Returns (ids, the logits of every position of the final
    sequence but the last: [len(ids) - 1, V])."""
    stoi = {c: i for i, c in enumerate(vocab)}
    ids = [stoi[c] for c in PROMPT]
    with torch.no_grad():
        for _ in range(GEN):
            logits = model(torch.tensor([ids]))[0, -1]
            ids.append(int(torch.argmax(logits).item()))
        return ids, model(torch.tensor([ids[:-1]]))[0]


def top2_gap(logits):
    top2 = torch.topk(logits, 2).values
    return float(top2[0] - top2[1])


def expected(ids, vocab, gaps, steps, loss):
    """The *_expected.json document: the prompt, the generated ids and text,
    the logit gaps (a dict, in order), versions, steps and final loss."""
    out = {"prompt": PROMPT, "prompt_ids": ids[:len(PROMPT)], "generated_ids": ids[len(PROMPT):],
           "generated_text": "".join(vocab[i] for i in ids[len(PROMPT):])}
    out.update(gaps)
    out.update({"versions": {"torch": torch.__version__, "numpy": np.__version__},
                "steps": steps, "final_loss": loss})
    return out


def write_expected(name, out):
    json.dump(out, open(os.path.join(DATA, name), "w"), indent=1)
