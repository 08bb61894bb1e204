// attnflow/nn_budget.h — parameter, FLOP and KV-cache accounting of
// Transformer configurations (docs/nn.md, "Budget formulas").
//
// Invariants:
//  * Parameters are counted exactly (every weight and bias element).
//  * FLOPs are matrix-multiply FLOPs only (2 per multiply-add) of one forward
//    pass over `seq_len` new tokens attending to `context` keys per layer
//    (context 0 = seq_len, dense: no causal discount). Softmax, norms,
//    activations, biases and residual adds are not counted.
//  * Per layer, parameters and FLOPs are split into: QKV projection, score
//    computation (q·kᵀ), value aggregation (weights·v), output projection and
//    FFN (plus norms for parameters).
//  * K/V bytes per token = 2 · layers · Hkv · Dh · bytes_per_element.
//  * All arithmetic is overflow-checked (kResourceExhausted on overflow).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnflow/nn.h"
#include "attnflow/status.h"

namespace attnflow::nn {

struct ModelShape {
  std::string name;
  int64_t num_layers = 0, d_model = 0, num_heads = 0;
  int64_t num_kv_heads = 0;  // 0 = num_heads
  int64_t head_dim = 0;      // 0 = d_model / num_heads
  int64_t ffn_dim = 0;
  Activation act = Activation::kGelu;
  NormKind norm = NormKind::kLayerNorm;
  bool qkv_bias = true, out_bias = true, ffn_bias = true;
  int64_t vocab_size = 0;
  int64_t max_positions = 0;  // learned absolute positions (0 = none: RoPE/ALiBi/sinusoidal)
  int64_t type_vocab = 0;     // BERT token types
  bool embedding_norm = false;  // BERT: LayerNorm after the embeddings
  bool final_norm = false;      // GPT-2 ln_f, Llama norm
  bool tied_lm_head = true;     // false: an extra [V,E] output matrix
  bool lm_head = true;          // false: no output head counted (BERT)
  bool pooler = false;          // BERT pooler [E,E] + [E]
  int64_t kv_bytes_per_element = 2;  // fp16/bf16 cache by default
};

// Parameters or FLOPs of one layer, split by part.
struct PartCounts {
  int64_t qkv = 0, scores = 0, aggregate = 0, out = 0, ffn = 0, norms = 0;
  int64_t total() const { return qkv + scores + aggregate + out + ffn + norms; }
};

struct Budget {
  ModelShape shape;
  int64_t seq_len = 0, context = 0;
  int64_t head_dim = 0, num_kv_heads = 0;
  PartCounts layer_params;       // one layer (scores/aggregate are 0)
  PartCounts layer_flops;        // one layer (norms 0)
  int64_t embedding_params = 0;  // token + positions + types + embedding norm
  int64_t head_params = 0;       // final norm + untied lm head + pooler
  int64_t total_params = 0;
  int64_t total_flops = 0;       // layers · layer_flops + lm head (2·L·E·V if lm_head)
  int64_t lm_head_flops = 0;
  int64_t kv_bytes_per_token = 0;
};

// seq_len > 0; context 0 = seq_len.
Result<Budget> ComputeBudget(const ModelShape& shape, int64_t seq_len,
                             int64_t context = 0);

// Known configurations: "bert-base", "gpt2-small", "llama-3-8b" (GQA 32/8,
// SwiGLU, RMSNorm) and "transformer-base" (Vaswani et al. encoder stack
// shape, post-norm ReLU).
const std::vector<ModelShape>& KnownModelShapes();
Result<ModelShape> FindModelShape(const std::string& name);
// A JSON object with the ModelShape field names (act/norm as strings).
Result<ModelShape> ParseModelShapeJson(const std::string& json_text);

// Human-readable table (what `attnflow budget` prints).
std::string FormatBudget(const Budget& b);

}  // namespace attnflow::nn
