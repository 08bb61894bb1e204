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
// SwiGLU, RMSNorm), "transformer-base" (Vaswani et al. encoder stack
// shape, post-norm ReLU) and "tiny" (the micro kit's char-level decoder,
// tools/edge/tiny/config.json; f32 cache on the device).
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
// This is the host view (`budget --ram`): weights in the same memory as the
// cache, activations not counted. A microcontroller keeps its weights in
// flash: ComputeDeviceBudget below.
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
// Microcontroller budget (`attnflow budget --device`, docs/nn.md "Device
// budget"): one decode step at a time, as the micro kit's tiny decoders run
// (micro/tiny/tiny_main.c in f32, tiny_s8_main.c in int8).
//   flash = the weights and constants in the chosen storage:
//     f32 / f16: total_params · 4 / 2 bytes;
//     int8 (the layout of tools/edge/tiny/int8_model.py): every linear
//       [out, in] is int8 weights out·in + int32 biases out·4 (if the model
//       has biases) + one fixed-point multiplier per output row (af_qmult,
//       8 bytes) out·8; each norm int32 folded gamma (and beta for
//       LayerNorm) E·4 (·2); embeddings int8 plus one multiplier each (8);
//       per layer the attention's exp and output multipliers (2 · 8, one
//       scale set); an untied head V·E int8 + V·8 multipliers.
//   RAM = kv_bytes_per_token · context + activations + arena, where
//     kv_bytes_per_token: f32 cache num_layers·2·Hkv·Dh·4; int8 cache
//       num_layers·2·Hkv·(Dh + kv_scale_bytes), kv_scale_bytes = scale bytes
//       per layer, K or V, kv head and token (0 = static per-tensor scales in
//       flash, as the int8 tiny decoder; e.g. 4 for an f32 scale per token
//       and head: the int8 KV-cache API does not exist yet, so this is a
//       parameter);
//     activations of one decode step (listed by ComputeDeviceBudget): f32
//       path: residual, norm output, q, the new token's k and v, attention
//       output, projection output, FFN hidden (2·F when gated), logits, all
//       f32 (plus int8 q and attention output when the cache is int8); int8
//       path: int32 residual and logits, int8 norm output, q, k, v,
//       attention output and FFN hidden;
//     arena: the micro library's attention workspace, reused by every layer
//       and head: f32 cache 2·AF_KEY_TILE·4 = 256 bytes (af_sdpa_f32; covers
//       af_decode_f32's 128), int8 cache 2·(AF_S8_KEY_TILE + Dv)·4
//       (af_sdpa_s8_workspace_bytes).
//   max context from RAM = floor((ram − activations − arena) / kv per token);
//   the model's own limit = max_positions (learned positions; 0 = none);
//   the usable context is the smaller, and the report says which binds.
// Not counted: program code, stack, the program's other data, an RTOS or a
// radio stack (a target's RAM is what is left for the model, see notes).
// ---------------------------------------------------------------------------
// The micro library's key tiles (include/attnflow/micro.h AF_KEY_TILE and
// AF_S8_KEY_TILE; tests/nn/device_budget_test.cc checks they agree).
inline constexpr int64_t kMicroKeyTile = 32;
inline constexpr int64_t kMicroS8KeyTile = 24;

enum class DeviceWeights { kF32, kF16, kInt8 };
enum class DeviceKv { kF32, kInt8 };
const char* DeviceWeightsName(DeviceWeights w);  // "f32", "f16", "int8"
const char* DeviceKvName(DeviceKv k);            // "f32", "int8"
bool ParseDeviceWeights(const std::string& s, DeviceWeights* out);
bool ParseDeviceKv(const std::string& s, DeviceKv* out);

struct DeviceTarget {
  std::string name;         // "esp32-c3"
  std::string description;  // "ESP32-C3 (RISC-V rv32imc, 160 MHz)"
  int64_t ram_bytes = 0;    // RAM the model may use
  int64_t flash_bytes = 0;
  std::string note;         // where the numbers come from, what they leave out
};
// esp32-c3, stm32f407, nrf5340 (app core).
const std::vector<DeviceTarget>& DeviceTargets();
Result<DeviceTarget> FindDeviceTarget(const std::string& name);

struct DeviceBudgetOptions {
  DeviceTarget target;  // ram_bytes and flash_bytes > 0
  DeviceWeights weights = DeviceWeights::kF32;
  DeviceKv kv = DeviceKv::kF32;
  int64_t kv_scale_bytes = 0;  // int8 cache only (see above)
  int64_t context = 0;         // tokens the cache is sized for; 0 = the usable maximum
};

struct ByteItem {
  std::string name;     // "token embedding", "residual x", ...
  std::string formula;  // "V*E*1 + 8"
  int64_t bytes = 0;
};

// One storage choice in a few numbers (the comparison table).
struct DeviceChoice {
  DeviceWeights weights = DeviceWeights::kF32;
  DeviceKv kv = DeviceKv::kF32;
  int64_t flash_bytes = 0, ram_fixed_bytes = 0, kv_bytes_per_token = 0;
  int64_t max_context_ram = 0, max_context = 0;
  bool flash_fits = false;
  std::string binds;
};

struct DeviceBudget {
  ModelShape shape;
  int64_t head_dim = 0, num_kv_heads = 0, total_params = 0;
  DeviceBudgetOptions opt;
  std::vector<ByteItem> flash;  // weights and constants
  int64_t flash_bytes = 0;
  bool flash_fits = false;
  std::vector<ByteItem> activations;  // one decode step
  int64_t activation_bytes = 0;
  ByteItem arena;
  int64_t kv_bytes_per_token = 0;
  int64_t ram_fixed_bytes = 0;  // activations + arena
  int64_t max_context_ram = 0;  // 0 when the fixed part alone does not fit
  int64_t model_limit = 0;      // max_positions (0 = the model states none)
  int64_t max_context = 0;      // min(max_context_ram, model_limit if > 0)
  std::string binds;            // "RAM", "learned positions", "RAM and learned positions"
  int64_t context = 0;          // opt.context, else max_context
  int64_t kv_bytes = 0;         // at context
  int64_t ram_bytes = 0;        // ram_fixed_bytes + kv_bytes
  bool ram_fits = false;
  std::vector<DeviceChoice> choices;  // every valid (weights, kv cache) pair
};

// int8 weights run the int8 path, which keeps an int8 cache: weights int8
// with an f32 cache is kInvalidArgument. Every count is overflow-checked.
Result<DeviceBudget> ComputeDeviceBudget(const ModelShape& shape, const DeviceBudgetOptions& opt);
std::string FormatDeviceBudget(const DeviceBudget& b);

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
