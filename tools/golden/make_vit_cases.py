#!/usr/bin/env python3
"""Golden cases for the two ViT position-interpolation rules (tests/data/nn_vit).

Purpose
-------
attnflow's ViT (include/attnflow/nn_vit.h, src/nn/vit.cc) resizes its learned
position table to another patch grid by either of transformers' two rules:

* ``size`` (transformers >= 4.42, 5.x; attnflow's default):
  ``interpolate(grid, size=(gh, gw), mode="bicubic", align_corners=False)``;
* ``scale_factor`` (transformers < 4.42): ``interpolate(grid,
  scale_factor=((gh + 0.1) / G, (gw + 0.1) / G), ...)``.

This script writes ``nn_vit`` golden cases (format ``attnflow-golden/1``, the
kind of tools/golden/make_nn_cases.py, with the config key
``pos_interpolation``) for both rules on non-square and resized images, with
the same inputs for each pair of rules, so that a C++ test can also show that
the rules differ there.

No attnflow code is imported. Every expected value comes from the explicit
float64 transcription of make_nn_cases.py (``ref_vit``'s patch embedding and
pre-norm blocks, ``bicubic_grid``: torch's bicubic written out), with the
source step of the case's rule, and each case is cross-checked inside this
script:

* ``size``: Hugging Face ``ViTModel`` of the pinned transformers (5.24.0,
  float64, no pooler, ``interpolate_pos_encoding=True``) on the same weights,
  last hidden state and embeddings (< 1e-10), and
  ``torch.nn.functional.interpolate(size=...)`` for the table (< 1e-12);
* ``scale_factor``: the same ``ViTModel`` with its
  ``ViTEmbeddings.interpolate_pos_encoding`` replaced by transformers
  4.35.2's code, re-implemented here from that release's source (one
  transformers version is pinned; 4.35.2 itself generated
  tests/data/nn/vit_interp_*, which attnflow also passes with this rule), and
  ``interpolate(scale_factor=...)`` for the table.

Inputs are drawn in float32 from a torch.Generator seeded with the CRC-32 of
the case's input name (shared by the two rules); stages are rounded to
float32 once. Each file is read back and recomputed from the file alone.

Pinned versions: tools/golden/requirements-vit.txt (the pins of
tools/deps/python.pip, so the project venv runs it).

How to run
----------
    .cache/venv/bin/python tools/golden/make_vit_cases.py            # write tests/data/nn_vit
    .cache/venv/bin/python tools/golden/make_vit_cases.py --check    # byte identity
"""

from __future__ import annotations

import json
import math
import os
import sys

import torch
import torch.nn.functional as F

import make_nn_cases as nn_cases  # tools/golden/make_nn_cases.py: the float64 transcriptions
from gen_common import installed_versions, main, write_case, write_manifest  # tools/golden
from st_io import st_bytes, st_load

D64 = torch.float64
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "nn_vit"))
PINNED = {"torch": "2.9.1", "numpy": "2.3.5", "safetensors": "0.8.0", "transformers": "5.24.0"}
GENERATOR = "tools/golden/make_vit_cases.py"
d = nn_cases.d


def ref_vit(inp, c):
    """make_nn_cases.ref_vit with the case's rule for the position table."""
    assert c["interpolate_pos_encoding"]
    return nn_cases.ref_vit(inp, c, c["pos_interpolation"])


def interpolate_pos_encoding_4_35(self, embeddings, height, width):
    """transformers 4.35.2 ViTEmbeddings.interpolate_pos_encoding, re-implemented
    from that release's source (src/transformers/models/vit/modeling_vit.py):
    DINO's "+ 0.1" and interpolate(scale_factor=...)."""
    num_patches = embeddings.shape[1] - 1
    num_positions = self.position_embeddings.shape[1] - 1
    if num_patches == num_positions and height == width:
        return self.position_embeddings
    class_pos_embed = self.position_embeddings[:, 0]
    patch_pos_embed = self.position_embeddings[:, 1:]
    dim = embeddings.shape[-1]
    h0 = height // self.config.patch_size
    w0 = width // self.config.patch_size
    # we add a small number to avoid floating point error in the interpolation
    # see discussion at https://github.com/facebookresearch/dino/issues/8
    h0, w0 = h0 + 0.1, w0 + 0.1
    patch_pos_embed = patch_pos_embed.reshape(1, int(math.sqrt(num_positions)),
                                              int(math.sqrt(num_positions)), dim)
    patch_pos_embed = patch_pos_embed.permute(0, 3, 1, 2)
    patch_pos_embed = torch.nn.functional.interpolate(
        patch_pos_embed,
        scale_factor=(h0 / math.sqrt(num_positions), w0 / math.sqrt(num_positions)),
        mode="bicubic",
        align_corners=False,
    )
    assert int(h0) == patch_pos_embed.shape[-2] and int(w0) == patch_pos_embed.shape[-1]
    patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
    return torch.cat((class_pos_embed.unsqueeze(0), patch_pos_embed), dim=1)


def hf_vit(inp, c):
    """transformers.ViTModel (float64, no pooler, SDPA attention) holding the
    case's weights; with the 4.35 position rule for scale_factor cases."""
    # torch SDPA (float64 through; the eager path upcasts softmax to float32).
    m, hc = nn_cases.hf_vit_model(inp, c, c["pos_grid"] * c["patch_size"], "layers.{}.",
                                  nn_cases.HF_VIT_LINEARS_5, attn_implementation="sdpa")
    if c["pos_interpolation"] == "scale_factor":
        m.embeddings.config = hc  # 4.35's ViTEmbeddings kept its config (patch_size)
        m.embeddings.interpolate_pos_encoding = interpolate_pos_encoding_4_35.__get__(m.embeddings)
    return m


def xcheck(inp, c, st):
    m = hf_vit(inp, c)
    with torch.no_grad():
        out = m(pixel_values=d(inp["pixels"]), interpolate_pos_encoding=True).last_hidden_state
        emb = m.embeddings(d(inp["pixels"]), interpolate_pos_encoding=True)
    xs = [nn_cases.close("hf_ViTModel_last_hidden_state", st["out"], out, 1e-10),
          nn_cases.close("hf_ViTEmbeddings", st["embeddings"], emb, 1e-10)]
    G, E = c["pos_grid"], inp["pos_table"].shape[1]
    H, Wd = inp["pixels"].shape[2:]
    gh, gw = H // c["patch_size"], Wd // c["patch_size"]
    grid = d(inp["pos_table"])[1:].reshape(1, G, G, E).permute(0, 3, 1, 2)
    kw = (dict(size=(gh, gw)) if c["pos_interpolation"] == "size" else
          dict(scale_factor=((gh + 0.1) / G, (gw + 0.1) / G)))
    ti = F.interpolate(grid, mode="bicubic", align_corners=False, **kw)
    xs.append(nn_cases.close("torch_interpolate_bicubic_" + c["pos_interpolation"], st["pos"][1:],
                             ti.permute(0, 2, 3, 1).reshape(gh * gw, E), 1e-12))
    return xs


def build(name, rule, B, C, H, W, Pz, E, Hn, Fd, N, G):
    """Inputs seeded by the image name (the same for both rules)."""
    g = nn_cases.gen(name)
    inp = {"pixels": nn_cases.randn(g, B, C, H, W)}
    inp["patch.weight"] = nn_cases.randn(g, E, C, Pz, Pz, scale=1.0 / math.sqrt(C * Pz * Pz))
    inp["patch.bias"] = nn_cases.randn(g, E, scale=0.1)
    inp["cls"] = nn_cases.randn(g, E, scale=0.5)
    inp["pos_table"] = nn_cases.randn(g, 1 + G * G, E, scale=0.5)
    bcfg = nn_cases.block_cfg(Hn, "gelu", "layernorm", "pre", eps=1e-12)
    for i in range(N):
        inp.update(nn_cases.block_weights(g, E, Fd, bcfg, True, prefix=f"layer.{i}."))
    inp.update(nn_cases.norm_weights(g, E, "layernorm", "final_norm."))
    c = dict(patch_size=Pz, num_heads=Hn, pos_grid=G, norm_eps=1e-12, interpolate_pos_encoding=True,
             pos_interpolation=rule, num_layers=N)
    return inp, c


IMAGES = [
    # name, description, shapes
    ("vit_3x3_to_4x5", "3x3 trained grid, non-square 16x20 image (4x5 patches of 4)",
     dict(B=1, C=3, H=16, W=20, Pz=4, E=8, Hn=2, Fd=16, N=1, G=3)),
    ("vit_2x2_to_5x5", "2x2 trained grid, square 15x15 image resized to 5x5 patches of 3",
     dict(B=1, C=2, H=15, W=15, Pz=3, E=8, Hn=2, Fd=16, N=1, G=2)),
    ("vit_4x4_to_3x2", "4x4 trained grid shrunk to 3x2 (a 12x8 image, patches of 4), 2 layers",
     dict(B=1, C=3, H=12, W=8, Pz=4, E=12, Hn=3, Fd=16, N=2, G=4)),
]
RULES = ("size", "scale_factor")


def stages_of(n_layer):
    return (["patches", "pos", "embeddings"] +
            [f"layer.{i}.{t}" for i in range(n_layer) for t in nn_cases.BLOCK_STAGES] + ["out"])


def cases():
    return [dict(name=f"{img}_{rule}", image=img, rule=rule,
                 desc=f"{desc}; positions by the {rule!r} rule", kw=kw)
            for img, desc, kw in IMAGES for rule in RULES]


def generate_case(c):
    inp, cfg = build(c["image"], c["rule"], **c["kw"])
    st = ref_vit(inp, cfg)
    xs = xcheck(inp, cfg, st)
    names = stages_of(cfg["num_layers"])
    meta = {"format": nn_cases.FORMAT, "kind": "nn_vit",
            "config": json.dumps(cfg, sort_keys=True, separators=(",", ":")),
            "stages": ",".join(names), "atol": nn_cases.TOL, "rtol": nn_cases.TOL,
            "description": c["desc"], "generator": GENERATOR}
    tensors = {n: t.to(torch.float32) for n, t in inp.items()}
    f32 = nn_cases.stage_f32(st, names)
    for n in names:
        tensors[n] = f32[n]
    return st_bytes(tensors, meta, nn_cases.ST_DTYPE), xs, st


def verify_file(path):
    tensors, meta = st_load(path)
    names = meta["stages"].split(",")
    inputs = {n: t for n, t in tensors.items() if n not in names}
    want = nn_cases.stage_f32(ref_vit(inputs, json.loads(meta["config"])), names)
    for n in names:
        assert torch.equal(tensors[n].view(torch.int32), want[n].view(torch.int32)), \
            f"{path}: stage {n} not reproduced from the file"


def generate_all(out_dir, quiet=False):
    os.makedirs(out_dir, exist_ok=True)
    manifest, outs, total = [], {}, 0
    for c in cases():
        data, xs, st = generate_case(c)
        path, entry = write_case(out_dir, c["name"], data, kind="nn_vit", rule=c["rule"],
                                 description=c["desc"], cross_checks=xs)
        verify_file(path)
        total += len(data)
        outs.setdefault(c["image"], {})[c["rule"]] = st["out"]
        manifest.append(entry)
        if not quiet:
            print(f"  {c['name']:<28} {len(data):>7} B  " + "; ".join(xs))
    diffs = {img: float((o["size"] - o["scale_factor"]).abs().max()) for img, o in outs.items()}
    for img, v in diffs.items():
        assert v > 1e-3, f"{img}: the two rules should differ, max |diff| {v}"
    write_manifest(out_dir, {
        "format": nn_cases.FORMAT, "generator": GENERATOR,
        "generated_with": installed_versions(PINNED),
        "rules_max_abs_out_difference": {k: float(f"{v:.3g}") for k, v in diffs.items()},
        "cases": manifest})
    if not quiet:
        print("max |out(size) - out(scale_factor)|: " +
              ", ".join(f"{k} {v:.3g}" for k, v in diffs.items()))
    return total, len(manifest)


if __name__ == "__main__":
    sys.exit(main(__doc__, DEFAULT_OUT, PINNED, "tools/golden/requirements-vit.txt", generate_all,
                  strict_pins=True))
