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

import argparse
import hashlib
import json
import math
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

import make_nn_cases as nn_cases  # tools/golden/make_nn_cases.py: the float64 transcriptions
from st_io import st_bytes, st_load

D64 = torch.float64
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "data", "nn_vit"))
PINNED = {"torch": "2.9.1", "numpy": "2.3.5", "safetensors": "0.8.0", "transformers": "5.24.0"}
GENERATOR = "tools/golden/make_vit_cases.py"
d = nn_cases.d


def source_step(rule, G, n):
    """torch's source step for a resize of G cells to n (align_corners=False)."""
    if rule == "size":
        return G / n                      # area_pixel_compute_scale: input / output
    return 1.0 / ((n + 0.1) / G)          # 1 / scale_factor


def bicubic_grid(plane, oh, ow, step_h, step_w):
    """plane [G, G, E] -> [oh, ow, E]: torch's bicubic (align_corners=False)
    written out as make_nn_cases.bicubic_grid, with the source step given:
    source = step * (d + 0.5) - 0.5, Keys' A = -0.75 taps clamped to the grid."""
    G = plane.shape[0]
    out = torch.zeros(oh, ow, plane.shape[2], dtype=D64)
    clamp = lambda i: min(max(i, 0), G - 1)  # noqa: E731
    for oy in range(oh):
        ry = step_h * (oy + 0.5) - 0.5
        iy = math.floor(ry)
        cy = nn_cases.cubic_coeffs(ry - iy)
        for ox in range(ow):
            rx = step_w * (ox + 0.5) - 0.5
            ix = math.floor(rx)
            cx = nn_cases.cubic_coeffs(rx - ix)
            acc = torch.zeros(plane.shape[2], dtype=D64)
            for m in range(4):
                row = sum(cx[n] * plane[clamp(iy - 1 + m), clamp(ix - 1 + n)] for n in range(4))
                acc = acc + cy[m] * row
            out[oy, ox] = acc
    return out


def vit_positions(pos, G, gh, gw, rule, square):
    if gh * gw == G * G and square:
        return pos
    E = pos.shape[1]
    grid = pos[1:].reshape(G, G, E)
    res = bicubic_grid(grid, gh, gw, source_step(rule, G, gh), source_step(rule, G, gw))
    return torch.cat([pos[:1], res.reshape(gh * gw, E)], 0)


def ref_vit(inp, c):
    """make_nn_cases.ref_vit with the case's rule for the position table."""
    assert c["interpolate_pos_encoding"]
    x = d(inp["pixels"])
    B, C, H, Wd = x.shape
    Pz = c["patch_size"]
    gh, gw = H // Pz, Wd // Pz
    w = d(inp["patch.weight"])
    E = w.shape[0]
    cols = (x[:, :, :gh * Pz, :gw * Pz].reshape(B, C, gh, Pz, gw, Pz)
            .permute(0, 2, 4, 1, 3, 5).reshape(B, gh * gw, C * Pz * Pz))
    patches = cols @ w.reshape(E, -1).T + d(inp["patch.bias"])
    pos = vit_positions(d(inp["pos_table"]), c["pos_grid"], gh, gw, c["pos_interpolation"], H == Wd)
    emb = torch.cat([d(inp["cls"]).reshape(1, 1, E).expand(B, 1, E), patches], 1) + pos[None]
    st = {"patches": patches, "pos": pos, "embeddings": emb}
    bcfg = nn_cases.block_cfg(c["num_heads"], "gelu", "layernorm", "pre", eps=c["norm_eps"])
    h = emb
    for i in range(c["num_layers"]):
        h = nn_cases.t_block(h, nn_cases.sub(inp, f"layer.{i}."), bcfg, st=st, pre=f"layer.{i}.")
    st["out"] = nn_cases.layer_norm(h, inp["final_norm.weight"], inp["final_norm.bias"], c["norm_eps"])
    return st


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
    from transformers import ViTConfig, ViTModel
    E, C = inp["patch.weight"].shape[0], inp["patch.weight"].shape[1]
    hc = ViTConfig(hidden_size=E, num_hidden_layers=c["num_layers"],
                   num_attention_heads=c["num_heads"],
                   intermediate_size=inp["layer.0.ffn.w_up"].shape[0], hidden_act="gelu",
                   hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                   layer_norm_eps=c["norm_eps"], image_size=c["pos_grid"] * c["patch_size"],
                   patch_size=c["patch_size"], num_channels=C, qkv_bias=True)
    # torch SDPA (float64 through; the eager path upcasts softmax to float32).
    hc._attn_implementation = "sdpa"
    with nn_cases.hf_default_f64():
        m = ViTModel(hc, add_pooling_layer=False).double().eval()
    if c["pos_interpolation"] == "scale_factor":
        m.embeddings.config = hc  # 4.35's ViTEmbeddings kept its config (patch_size)
        m.embeddings.interpolate_pos_encoding = interpolate_pos_encoding_4_35.__get__(m.embeddings)
    sd = {"embeddings.cls_token": d(inp["cls"]).reshape(1, 1, E),
          "embeddings.position_embeddings": d(inp["pos_table"])[None],
          "embeddings.patch_embeddings.projection.weight": d(inp["patch.weight"]),
          "embeddings.patch_embeddings.projection.bias": d(inp["patch.bias"]),
          "layernorm.weight": d(inp["final_norm.weight"]),
          "layernorm.bias": d(inp["final_norm.bias"])}
    for i in range(c["num_layers"]):
        # transformers 5.x module names (4.x: encoder.layer.<i>.attention.attention.query, ...)
        p, q = f"layers.{i}.", f"layer.{i}."
        for hf, ours in (("attention.q_proj", "attn.w_q"), ("attention.k_proj", "attn.w_k"),
                         ("attention.v_proj", "attn.w_v"), ("attention.o_proj", "attn.w_o"),
                         ("mlp.fc1", "ffn.w_up"), ("mlp.fc2", "ffn.w_down")):
            sd[p + hf + ".weight"] = d(inp[q + ours])
            sd[p + hf + ".bias"] = d(inp[q + ours.replace("w_", "b_")])
        for hf, ours in (("layernorm_before", "norm1"), ("layernorm_after", "norm2")):
            sd[p + hf + ".weight"] = d(inp[q + ours + ".weight"])
            sd[p + hf + ".bias"] = d(inp[q + ours + ".bias"])
    m.load_state_dict(sd, strict=True)
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
    manifest, outs = [], {}
    for c in cases():
        data, xs, st = generate_case(c)
        path = os.path.join(out_dir, c["name"] + ".safetensors")
        with open(path, "wb") as f:
            f.write(data)
        verify_file(path)
        outs.setdefault(c["image"], {})[c["rule"]] = st["out"]
        manifest.append(dict(name=c["name"], file=c["name"] + ".safetensors", kind="nn_vit",
                             rule=c["rule"], description=c["desc"], cross_checks=xs,
                             bytes=len(data), sha256=hashlib.sha256(data).hexdigest()))
        if not quiet:
            print(f"  {c['name']:<28} {len(data):>7} B  " + "; ".join(xs))
    diffs = {img: float((o["size"] - o["scale_factor"]).abs().max()) for img, o in outs.items()}
    for img, v in diffs.items():
        assert v > 1e-3, f"{img}: the two rules should differ, max |diff| {v}"
    import safetensors
    import transformers
    m = {"format": nn_cases.FORMAT, "generator": GENERATOR,
         "generated_with": {"torch": torch.__version__.split("+")[0], "numpy": np.__version__,
                            "safetensors": safetensors.__version__,
                            "transformers": transformers.__version__},
         "rules_max_abs_out_difference": {k: float(f"{v:.3g}") for k, v in diffs.items()},
         "cases": manifest}
    with open(os.path.join(out_dir, "MANIFEST.json"), "wb") as f:
        f.write((json.dumps(m, indent=1, ensure_ascii=True) + "\n").encode("ascii"))
    if not quiet:
        print("max |out(size) - out(scale_factor)|: " +
              ", ".join(f"{k} {v:.3g}" for k, v in diffs.items()))
    return len(manifest)


def check_against(committed):
    with tempfile.TemporaryDirectory() as tmp:
        generate_all(tmp, quiet=True)
        names = sorted(set(os.listdir(tmp)) | set(os.listdir(committed)))
        bad = [f for f in names if not os.path.exists(os.path.join(committed, f)) or
               not os.path.exists(os.path.join(tmp, f)) or
               open(os.path.join(tmp, f), "rb").read() != open(os.path.join(committed, f), "rb").read()]
    for f in bad:
        print(f"DIFFERS: {f}")
    print("check: FAILED" if bad else "check: OK, byte-identical")
    return not bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    import safetensors
    import transformers
    for mod, ver in (("torch", torch.__version__.split("+")[0]), ("numpy", np.__version__),
                     ("safetensors", safetensors.__version__),
                     ("transformers", transformers.__version__)):
        if ver != PINNED[mod]:
            print(f"error: {mod} {ver} != pinned {PINNED[mod]} (tools/golden/requirements-vit.txt)",
                  file=sys.stderr)
            return 2
    if args.check:
        return 0 if check_against(args.out) else 1
    n = generate_all(args.out)
    print(f"{n} cases in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
