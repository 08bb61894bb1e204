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

// A Hugging Face config.json (model_type bert, gpt2, llama, mistral, qwen2):
// hidden sizes, heads, KV heads, FFN width, vocabulary, activation, biases,
// tied head. Errors name the missing field. ParseModelShapeJson calls it when
// the object has "model_type".
Result<ModelShape> ModelShapeFromHfConfig(const std::string& json_text);

// Human-readable table (what `attnflow budget` prints).
std::string FormatBudget(const Budget& b);

// ---------------------------------------------------------------------------
// Memory: what a context costs in bytes (one sequence).
//   kv_bytes            = kv_bytes_per_token · context
//   score_matrix_bytes  = num_heads · context² · 4 (one layer's materialised
//                         fp32 L x L scores; FlashAttention never writes it)
//   weight_bytes[dtype] = total_params · bytes per weight of the dtype (F32 4,
//                         F16/BF16 2, Q8_0 34/32, Q4_K 144/256, Q4_0 18/32)
//   decode_read_bytes   = weight bytes + kv_bytes (every weight and every
//                         cached K/V element is read once per decode step)
//   max_context         = floor((ram − weight bytes) / kv_bytes_per_token)
//                         (0 when the weights alone do not fit; ram 0 = not asked)
// ---------------------------------------------------------------------------
struct WeightDType {
  const char* name;
  int64_t bytes_num, bytes_den;  // bytes per weight = num / den
};
const std::vector<WeightDType>& WeightDTypes();

struct MemoryRow {
  std::string dtype;
  int64_t weight_bytes = 0, decode_read_bytes = 0, max_context = 0;
};
struct MemoryBudget {
  int64_t context = 0, kv_bytes = 0, score_matrix_bytes = 0, ram_bytes = 0;
  std::vector<MemoryRow> rows;  // one per WeightDTypes() entry
};
Result<MemoryBudget> ComputeMemory(const Budget& b, int64_t ram_bytes);
std::string FormatMemory(const MemoryBudget& m);

// ---------------------------------------------------------------------------
// The three axes of Vaswani et al. 2017, Table 1, with real numbers for n
// tokens, width d, convolution kernel k and restriction window r:
//   layer                      per-layer ops   sequential   max path length
//   self-attention             n²·d            1            1
//   recurrent                  n·d²            n            n
//   convolutional              k·n·d²          1            ceil(log_k n)
//   self-attention (restricted) r·n·d          1            ceil(n / r)
// Ops are multiply-adds of the mixing step (the paper's O(·) with constant
// 1); "sequential" counts the steps that must run one after another.
// ---------------------------------------------------------------------------
struct LayerTypeRow {
  const char* layer;
  const char* ops_formula;  // "n^2*d", ...
  double ops = 0, sequential = 0, max_path = 0;
};
Result<std::vector<LayerTypeRow>> CompareLayerTypes(int64_t n, int64_t d, int64_t k, int64_t r);
std::string FormatLayerComparison(const std::vector<LayerTypeRow>& rows, int64_t n, int64_t d,
                                  int64_t k, int64_t r);

}  // namespace attnflow::nn
