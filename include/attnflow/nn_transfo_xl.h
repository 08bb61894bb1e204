// attnflow/nn_transfo_xl.h — Transformer-XL (Dai et al. 2019): relative
// positional attention and segment-level recurrence, float64 reference
// matching Hugging Face TransfoXLModel (attn_type 0).
//
// One layer, query length L, memory length M, keys K = M + L:
//   cat  = [mem; x]                          [B,K,E] (mem is the previous
//          segment's hidden state INPUT to this layer, not recomputed)
//   q,k,v = split(cat_in·W_qkvᵀ), q keeps the last L rows; cat_in = cat
//          (post-norm) or LN_attn(cat) (pre_lnorm)
//   R[j'] = sinusoid(pos_{j'}), pos_{j'} = min(K−1−j', clamp_len)  (concat
//          layout: [sin…, cos…]), r = R·W_rᵀ      [K, H·Dh]
//   ac[i,j]  = (q_i + u)·k_j
//   bd_raw[i,j'] = (q_i + v)·r_{j'}
//   bd = rel_shift(bd_raw), so bd[i,j] = (q_i + v)·r(i + M − j) for j ≤ i + M
//   scores = ac + bd; scaled = scores / sqrt(Dh); masked: −inf where j > i + M
//          (same_length additionally hides j ≤ i − shift; see docs/nn.md) or
//          where attn_mask is false
//   out_attn = softmax·v → concat → ·W_oᵀ;  post: h = LN_attn(x + out_attn)
//                                           pre:  h = x + out_attn
//   FFN (ReLU, biases): post: out = LN_ff(h + ffn(h)); pre: out = h + ffn(LN_ff(h))
// New memory of a layer = the last mem_len rows of [mem; x] (its input).
// Stages per layer: attn_in q k v r ac bd_raw bd scores scaled masked weights
// heads_out concat attn_out residual norm ffn_hidden ffn out.
#pragma once

#include <cstdint>
#include <vector>

#include "attnflow/stages.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow::nn {

struct TxlConfig {
  int64_t d_model = 0, num_heads = 1, head_dim = 0, d_inner = 0;
  bool pre_lnorm = false;
  double norm_eps = 1e-5;
  int64_t mem_len = 0;     // rows of memory kept per layer
  int64_t clamp_len = -1;  // relative distances above are clamped (-1: none)
  bool same_length = false;
};

struct TxlLayerWeights {
  TensorView w_qkv;             // [3·H·Dh, E] (q rows, then k, then v)
  TensorView w_r;               // [H·Dh, E]
  TensorView w_o;               // [E, H·Dh]
  TensorView r_w_bias, r_r_bias;  // u, v: [H, Dh]
  TensorView ln_attn_w, ln_attn_b;  // [E]
  TensorView w_ff1, b_ff1;      // [F,E], [F]
  TensorView w_ff2, b_ff2;      // [E,F], [E]
  TensorView ln_ff_w, ln_ff_b;  // [E]
};

// rel_shift of Dai et al.: pad a zero column on the left of the [Lq, Lk]
// matrix, view the (Lq)(Lk+1) values as [Lk+1, Lq], drop the first row, view
// as [Lq, Lk]. out, x: rank 2..4, shift over the last two dims (out must not
// alias x).
Status RelShift(const TensorView& out, const TensorView& x);

// One layer. out, x [B,L,E]; mem [B,M,E] (absent or M = 0: no memory);
// attn_mask BOOL [L, M+L] optional (true = may attend, ANDed with causal).
Status TxlLayer(const TensorView& out, const TensorView& x,
                const TensorView& mem, const TxlLayerWeights& w,
                const TxlConfig& cfg, const TensorView& attn_mask,
                StageSink* sink = nullptr);

// The layer stack on one segment. out [B,L,E]; x [B,L,E] (embeddings);
// mems: one [B,M,E] view per layer or empty (no memory); new_mems (optional)
// receives one F64 [B, min(mem_len, M+L), E] tensor per layer.
// Stages: pos_emb, layer.<i>.<layer stages>, new_mem.<i>, out.
Status TxlForward(const TensorView& out, std::vector<Tensor>* new_mems,
                  const TensorView& x, const std::vector<TensorView>& mems,
                  const std::vector<TxlLayerWeights>& layers,
                  const TxlConfig& cfg, const TensorView& attn_mask,
                  StageSink* sink = nullptr);

}  // namespace attnflow::nn
