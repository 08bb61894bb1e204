#!/usr/bin/env python3
"""smollm2_stage_errors.py — where does attnflow's float32 error on the
Q4_K_M SmolLM2 come from? (docs/quantize.md "Logits vs transformers").

Inputs: the Q4_K_M GGUF made by `attnflow quantize` and the stage dump of
tools/quant/smollm2_stage_dump.cc on the prompts of
tests/data/quant/smollm2_q4_k_m/logits.safetensors. Loads the same file in
transformers (gguf-py dequantises; the values are those attnflow uses, bit
for bit), runs it in float32 with hooks and in float64 (model.double()) on
the same ids, and prints two tables:

* global: max |x - x_fp64| of each stage output, attnflow and transformers
  float32, per layer (how far each float32 run has drifted);
* local: each stage recomputed in float64 from the run's OWN float32 input
  to that stage (norm, q/k/v projection, attention, o projection, ffn_norm,
  MLP, final norm + head), max |stage_fp32 - stage_fp64(input_fp32)| / max
  |stage|: the rounding that stage adds, for attnflow and for transformers.
  A stage whose local error is a clear factor above transformers' is a
  candidate cause; one near float32's 6e-8 per operation is not.

Environment: tools/models/requirements-smollm2.txt (transformers 4.57.3,
torch 2.9.1, gguf-py). No ground truth is taken from attnflow.
Usage: python tools/quant/smollm2_stage_errors.py Q4_K_M.gguf DUMP.safetensors [--json OUT]
"""
import argparse
import copy
import json
import os
import types

import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
REF = os.path.join(ROOT, "tests", "data", "quant", "smollm2_q4_k_m", "logits.safetensors")


def make_float64(model):
    """model.double() alone is not a float64 model: transformers 4.57's
    LlamaRMSNorm casts its input to float32 (variance and rsqrt in float32)
    and LlamaRotaryEmbedding computes inv_freq, the angles and cos/sin in
    float32. Both would then share the float32 run's rounding and hide it
    from the comparison. Replace them by float64 computations of the same
    formulas."""
    cfg = model.config
    D = cfg.hidden_size // cfg.num_attention_heads

    def norm_fwd(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    for mod in model.modules():
        if type(mod).__name__ == "LlamaRMSNorm":
            mod.forward = types.MethodType(norm_fwd, mod)
    inv = 1.0 / (float(cfg.rope_theta) ** (torch.arange(0, D, 2, dtype=torch.float64) / D))
    scaling = float(model.model.rotary_emb.attention_scaling)

    def rope_fwd(self, x, position_ids):
        ang = position_ids[:, :, None].double() * inv[None, None, :]
        emb = torch.cat((ang, ang), dim=-1)
        return (emb.cos() * scaling).to(x.dtype), (emb.sin() * scaling).to(x.dtype)

    assert getattr(cfg, "rope_scaling", None) in (None, {}) or cfg.rope_scaling.get("rope_type") == "default"
    model.model.rotary_emb.forward = types.MethodType(rope_fwd, model.model.rotary_emb)


def capture(model, ids):
    """Forward with hooks: per layer the inputs/outputs of each stage."""
    rec, hooks = {}, []

    def hook(name, want_in=False):
        def f(_mod, inp, out):
            o = out[0] if isinstance(out, tuple) else out
            rec[name] = o.detach()[0].clone()
            if want_in:
                rec[name + ".in"] = inp[0].detach()[0].clone()
        return f

    for l, layer in enumerate(model.model.layers):
        a = layer.self_attn
        hooks += [layer.input_layernorm.register_forward_hook(hook(f"l{l}.norm", True)),
                  a.q_proj.register_forward_hook(hook(f"l{l}.qp")),
                  a.k_proj.register_forward_hook(hook(f"l{l}.kp")),
                  a.v_proj.register_forward_hook(hook(f"l{l}.v")),
                  a.o_proj.register_forward_hook(hook(f"l{l}.out", True)),
                  layer.post_attention_layernorm.register_forward_hook(hook(f"l{l}.ffn_norm", True)),
                  layer.mlp.register_forward_hook(hook(f"l{l}.ffn", True)),
                  layer.register_forward_hook(hook(f"l{l}.block_out"))]
    hooks.append(model.model.norm.register_forward_hook(hook("final_norm", True)))
    with torch.no_grad():
        rec["logits"] = model(ids).logits[0].detach().clone()
    for h in hooks:
        h.remove()
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("dump")
    ap.add_argument("--json")
    a = ap.parse_args()
    torch.set_num_threads(2)
    refs = load_file(REF)
    dump = load_file(a.dump)
    m32 = AutoModelForCausalLM.from_pretrained(os.path.dirname(os.path.abspath(a.gguf)),
                                               gguf_file=os.path.basename(a.gguf), dtype=torch.float32).eval()
    m64 = copy.deepcopy(m32).double()
    make_float64(m64)
    cfg = m32.config
    H, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    D = cfg.hidden_size // H
    nl = cfg.num_hidden_layers
    t = lambda x: torch.from_numpy(np.ascontiguousarray(x)).double()

    def rel(x, ref):
        x, ref = x.double(), ref.double()
        return float((x - ref).abs().max() / ref.abs().max())

    def absd(x, ref):
        return float((x.double() - ref.double()).abs().max())

    def attn64(q, k, v):  # [H,T,D], [Hkv,T,D] -> [T, H*D], causal, float64
        T = q.shape[1]
        k = k.repeat_interleave(H // Hkv, 0)
        v = v.repeat_interleave(H // Hkv, 0)
        s = q @ k.transpose(1, 2) / np.sqrt(D)
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        return (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(T, H * D)

    report = {"local": {}, "global": {}}
    for n in range(100):
        if f"p{n}.ids" not in refs:
            break
        ids = torch.from_numpy(refs[f"p{n}.ids"].astype(np.int64))[None]
        T = ids.shape[1]
        r32 = capture(m32, ids)
        r64 = capture(m64, ids)
        pos = torch.arange(T)[None]
        cos, sin = m64.model.rotary_emb(torch.zeros(1, dtype=torch.float64), pos)  # float64 angles
        cos32, sin32 = m32.model.rotary_emb(torch.zeros(1, dtype=torch.float32), pos)
        loc = {"af": {}, "tf32": {}}
        glob = {"af": {}, "tf32": {}}

        def add(d, key, v):
            d.setdefault(key, []).append(v)

        with torch.no_grad():
            for l in range(nl):
                L64 = m64.model.layers[l]
                A = L64.self_attn
                g = lambda s: t(dump[f"p{n}.l{l}.{s}"])
                prev = t(dump[f"p{n}.embed"])[0] if l == 0 else t(dump[f"p{n}.l{l-1}.block_out"])[0]
                # attnflow stages (HF layout; q/k [1,H,T,D] post-RoPE, v [1,Hkv,T,D]).
                af = {"norm": g("norm")[0], "q": g("q")[0], "k": g("k")[0], "v": g("v")[0],
                      "concat": g("concat")[0], "out": g("out")[0], "residual": g("residual")[0],
                      "ffn_norm": g("ffn_norm")[0], "ffn": g("ffn")[0], "block_out": g("block_out")[0]}
                qf = A.q_proj(af["norm"]).view(T, H, D).transpose(0, 1)[None]
                kf = A.k_proj(af["norm"]).view(T, Hkv, D).transpose(0, 1)[None]
                qr, kr = apply_rotary_pos_emb(qf, kf, cos, sin)
                vf = A.v_proj(af["norm"]).view(T, Hkv, D).transpose(0, 1)
                add(loc["af"], "norm", rel(af["norm"], L64.input_layernorm(prev)))
                add(loc["af"], "q+rope", rel(af["q"], qr[0]))
                add(loc["af"], "k+rope", rel(af["k"], kr[0]))
                add(loc["af"], "v", rel(af["v"], vf))
                add(loc["af"], "attention", rel(af["concat"], attn64(af["q"], af["k"], af["v"])))
                add(loc["af"], "o_proj", rel(af["out"], A.o_proj(af["concat"])))
                add(loc["af"], "ffn_norm", rel(af["ffn_norm"], L64.post_attention_layernorm(af["residual"])))
                add(loc["af"], "mlp", rel(af["ffn"], L64.mlp(af["ffn_norm"])))
                # transformers float32, from its own float32 inputs.
                tf = {k[len(f"l{l}."):]: v for k, v in r32.items() if k.startswith(f"l{l}.")}
                q32 = tf["qp"].view(1, T, H, D).transpose(1, 2)
                k32 = tf["kp"].view(1, T, Hkv, D).transpose(1, 2)
                q32r, k32r = apply_rotary_pos_emb(q32, k32, cos32, sin32)
                v32 = tf["v"].view(T, Hkv, D).transpose(0, 1)
                add(loc["tf32"], "norm", rel(tf["norm"], L64.input_layernorm(tf["norm.in"].double())))
                add(loc["tf32"], "q+rope", rel(q32r[0], apply_rotary_pos_emb(
                    A.q_proj(tf["norm"].double()).view(1, T, H, D).transpose(1, 2), k32.double(), cos, sin)[0][0]))
                add(loc["tf32"], "k+rope", rel(k32r[0], apply_rotary_pos_emb(
                    q32.double(), A.k_proj(tf["norm"].double()).view(1, T, Hkv, D).transpose(1, 2), cos, sin)[1][0]))
                add(loc["tf32"], "v", rel(v32, A.v_proj(tf["norm"].double()).view(T, Hkv, D).transpose(0, 1)))
                add(loc["tf32"], "attention", rel(tf["out.in"], attn64(q32r[0].double(), k32r[0].double(),
                                                                       v32.double())))
                add(loc["tf32"], "o_proj", rel(tf["out"], A.o_proj(tf["out.in"].double())))
                add(loc["tf32"], "ffn_norm", rel(tf["ffn_norm"], L64.post_attention_layernorm(tf["ffn_norm.in"].double())))
                add(loc["tf32"], "mlp", rel(tf["ffn"], L64.mlp(tf["ffn.in"].double())))
                # Global drift from the float64 run.
                for s, key in (("block_out", "block_out"), ("ffn", "ffn"), ("out", "out")):
                    add(glob["af"], s, absd(af[key], r64[f"l{l}.{key}"]))
                    add(glob["tf32"], s, absd(tf[key], r64[f"l{l}.{key}"]))
            # Head: final norm + lm_head from the run's own last hidden state.
            last_af = t(dump[f"p{n}.l{nl-1}.block_out"])[0]
            head64 = m64.lm_head(m64.model.norm(last_af))
            add(loc["af"], "head", rel(t(dump[f"p{n}.logits"]), head64))
            add(loc["af"], "head_abs", absd(t(dump[f"p{n}.logits"]), head64))
            head64t = m64.lm_head(m64.model.norm(r32["final_norm.in"].double()))
            add(loc["tf32"], "head", rel(r32["logits"], head64t))
            add(loc["tf32"], "head_abs", absd(r32["logits"], head64t))
            add(glob["af"], "logits", absd(t(dump[f"p{n}.logits"]), r64["logits"]))
            add(glob["tf32"], "logits", absd(r32["logits"], r64["logits"]))
            # Sensitivity: the float64 head on attnflow's vs float64's final hidden state.
            add(glob["af"], "logits_via_fp64_head", absd(head64, r64["logits"]))
            add(glob["tf32"], "logits_via_fp64_head", absd(head64t, r64["logits"]))
        report["local"][f"p{n}"] = loc
        report["global"][f"p{n}"] = glob
        print(f"== prompt {n}: T={T}")
        print("local error (max|stage - fp64(stage on own input)| / max|stage|), max over layers [median]:")
        for s in loc["af"]:
            fa, ft = np.array(loc["af"][s]), np.array(loc["tf32"][s])
            print(f"  {s:10s} attnflow {fa.max():.2e} [{np.median(fa):.2e}]   transformers32 {ft.max():.2e} "
                  f"[{np.median(ft):.2e}]   ratio(max) {fa.max() / max(ft.max(), 1e-30):.2f}")
        print("global max|x - x_fp64| by layer (attnflow / transformers32):")
        for s in ("out", "ffn", "block_out"):
            print(f"  {s:9s}", " ".join(f"{x:.1e}/{y:.1e}" for x, y in zip(glob["af"][s], glob["tf32"][s])))
        for s in ("logits", "logits_via_fp64_head"):
            print(f"  {s}: attnflow {glob['af'][s][0]:.3e}  transformers32 {glob['tf32'][s][0]:.3e}")
    if a.json:
        json.dump(report, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
