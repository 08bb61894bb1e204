// attnflow/nn.h — the attention family from the papers, as float64
// reference implementations: position schemes (sinusoidal, learned absolute,
// RoPE, ALiBi, T5 relative bias), norms, feed-forward networks, Transformer
// blocks (post-norm and pre-norm), encoder and decoder layers, and the full
// encoder–decoder Transformer of Vaswani et al. (2017).
// Additive/multiplicative alignment (Bahdanau/Luong): attnflow/nn_align.h.
// Transformer-XL relative attention with memory: attnflow/nn_transfo_xl.h.
// Parameter/FLOP budgets: attnflow/nn_budget.h. Golden cases of these kinds:
// attnflow/nn_golden.h. Prose and formulas: docs/nn.md.
//
// Conventions (shared with attnflow/attention.h):
//  * Signatures are "outputs first, inputs next, weights, options last".
//  * Activations are [B, L, E] (batch first). Heads are [B, H, L, Dh]; head h
//    of a projection is its rows h·Dh … (h+1)·Dh − 1 (as torch and HF split).
//  * A weight W of a linear layer is [out, in] and applies as y = x·Wᵀ + b
//    (torch.nn.Linear); a bias is optional (an absent view, rank < 0).
//  * Inputs may have any float dtype and any strides; outputs are F32 or F64
//    views of the stated shape. Every computation is done in float64.
//  * BOOL masks: true = may attend (the core's polarity; torch's
//    key_padding_mask is the negation). A `key_mask` [B, Lk] marks real
//    tokens (true) and padding (false).
//  * Errors are Status values naming the operation and the shapes; nothing
//    throws or aborts. Stage capture (StageSink) is cheap when off.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/stages.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow::nn {

// ============================================================================
// Positions
// ============================================================================

// Sinusoidal positions (Vaswani et al. 2017, §3.5), ω_i = base^(−2i/d):
//  kInterleaved (the paper, torch tutorial): pe[p, 2i] = sin(p·ω_i),
//                                            pe[p, 2i+1] = cos(p·ω_i)
//  kConcat (Transformer-XL, GPT-J):          pe[p, i] = sin(p·ω_i),
//                                            pe[p, d/2 + i] = cos(p·ω_i)
// kInterleaved accepts odd d (the last column is a sin); kConcat needs even d.
enum class SinusoidalLayout : uint8_t { kInterleaved, kConcat };
const char* SinusoidalLayoutName(SinusoidalLayout l);  // "interleaved", "concat"
bool ParseSinusoidalLayout(std::string_view s, SinusoidalLayout* out);

struct SinusoidalOptions {
  double base = 10000.0;
  SinusoidalLayout layout = SinusoidalLayout::kInterleaved;
};

// out [L, d] F32/F64: row r is position `offset + r` (the exportable table).
Status SinusoidalTable(const TensorView& out, int64_t offset,
                       const SinusoidalOptions& opt = {});
// out [N, d]: row r is position positions[r] (any real, e.g. Transformer-XL's
// descending klen−1 … 0).
Status SinusoidalAt(const TensorView& out, const std::vector<double>& positions,
                    const SinusoidalOptions& opt = {});

// Token embedding: out[b,l,:] = table[ids[b,l], :] · scale.
//   out [B,L,E]; ids [B,L] I64/I32 in [0, V); table [V,E].
Status Embed(const TensorView& out, const TensorView& ids,
             const TensorView& table, double scale = 1.0);

// Absolute positions (learned table or an exported sinusoidal table):
//   out[b,l,:] = x[b,l,:] · x_scale + table[pos(b,l), :]
//   pos(b,l) = position_ids[b,l] if given, else offset + l (decode: offset =
//   number of cached tokens).
//   out, x [B,L,E]; table [P,E]; position_ids [B,L] I64/I32 optional.
// kOutOfRange when a position is outside [0, P).
Status AddPositions(const TensorView& out, const TensorView& x,
                    const TensorView& table, const TensorView& position_ids,
                    int64_t offset, double x_scale = 1.0);

// ---- RoPE (Su et al. 2021) ---------------------------------------------------
//  kHalf (GPT-NeoX, Llama; HF rotate_half): pair (c, c + r/2) rotates by
//      angle pos·θ_c, c < r/2.
//  kInterleaved (GPT-J, original RoFormer; HF rotate_every_two): pair
//      (2c, 2c+1) rotates by pos·θ_c.
//  For a pair (a, b): a' = a·cos − b·sin, b' = b·cos + a·sin.
//  θ_c = 1 / base'^(2c / r), r = rotary_dim (dims ≥ r pass through unchanged).
//  Scaling (r = rotary_dim, f = factor):
//    kLinear (position interpolation): angle = (pos / f)·θ_c
//    kNtk (static NTK-aware):  base' = base · f^(r / (r − 2))
//    kDynamicNtk (HF Llama):   when seq_len > max_positions,
//        base' = base · ((f·seq_len / max_positions) − (f − 1))^(r / (r − 2))
enum class RopeLayout : uint8_t { kHalf, kInterleaved };
enum class RopeScaling : uint8_t { kNone, kLinear, kNtk, kDynamicNtk };
const char* RopeLayoutName(RopeLayout l);    // "half", "interleaved"
const char* RopeScalingName(RopeScaling s);  // "none", "linear", "ntk", "dynamic_ntk"
bool ParseRopeLayout(std::string_view s, RopeLayout* out);
bool ParseRopeScaling(std::string_view s, RopeScaling* out);

struct RopeOptions {
  RopeLayout layout = RopeLayout::kHalf;
  double theta = 10000.0;
  int64_t rotary_dim = 0;  // 0 = the whole head dim; must be even
  RopeScaling scaling = RopeScaling::kNone;
  double factor = 1.0;
  int64_t max_positions = 2048;  // kDynamicNtk: original context length
  int64_t seq_len = 0;           // kDynamicNtk: total length (0 = max pos + 1)
};

// inv_freq[c] = θ_c, c < rotary_dim/2, for a rotation over `rotary_dim` dims
// (options.rotary_dim is ignored here). seq_len is used by kDynamicNtk only.
Status RopeInvFreq(std::vector<double>* inv_freq, int64_t rotary_dim,
                   const RopeOptions& opt, int64_t seq_len);

// Rotates x by its positions: out, x [B,H,L,D] (out may alias x).
// pos(b,l) = position_ids[b,l] ([B,L] I64/I32, optional) else offset + l, so
// a new query at offset = cached length agrees with keys rotated earlier.
Status ApplyRope(const TensorView& out, const TensorView& x,
                 const TensorView& position_ids, int64_t offset,
                 const RopeOptions& opt);

// ---- T5 bucketed relative bias (Raffel et al. 2020) ---------------------------
struct T5BiasOptions {
  bool bidirectional = true;  // encoder true, decoder false
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
};
// The bucket of relative position rel = key_pos − query_pos (HF
// T5Attention._relative_position_bucket, evaluated in float64).
int64_t T5RelativeBucket(int64_t rel, const T5BiasOptions& opt);
// out [H, Lq, Lk]: out[h,i,j] = table[bucket(j − (q_offset + i)), h].
// table [num_buckets, H]. buckets (optional) [Lq, Lk] receives the buckets
// (any float or I64 dtype). T5 adds this to q·kᵀ with scale 1.0.
Status T5Bias(const TensorView& out, const TensorView& buckets,
              const TensorView& table, int64_t q_offset,
              const T5BiasOptions& opt);

// ALiBi: reuse attnflow::AlibiSlopes / AlibiBias (semantics.h) through
// SdpaOptions.alibi_slopes; nothing is duplicated here.

// ============================================================================
// Norms and feed-forward networks
// ============================================================================

enum class NormKind : uint8_t { kLayerNorm, kRmsNorm };
const char* NormKindName(NormKind k);  // "layernorm", "rmsnorm"
bool ParseNormKind(std::string_view s, NormKind* out);

struct NormWeights {
  TensorView weight;  // [E], optional (= 1)
  TensorView bias;    // [E], optional (= 0); LayerNorm only
};

// Normalises the last dim of x (rank 1..4) into out (same shape):
//   LayerNorm: (x − mean) / sqrt(var + eps) · w + b   (biased variance)
//   RMSNorm:   x / sqrt(mean(x²) + eps) · w            (Llama, T5)
Status Norm(const TensorView& out, const TensorView& x, const NormWeights& w,
            NormKind kind, double eps);

// The float64 oracles of the fast ops (attnflow/ops.h):
//   LinearLayer: out [..., out] = x [..., in] · wᵀ + b   (w [out, in], b optional)
//   Softmax:     over the last dim; a row of all -inf gives zeros (dead row).
Status LinearLayer(const TensorView& out, const TensorView& x, const TensorView& w,
                   const TensorView& b);
Status Softmax(const TensorView& out, const TensorView& x);

enum class Activation : uint8_t { kRelu, kGelu, kGeluTanh, kSwiGlu };
// "relu", "gelu", "gelu_tanh", "swiglu"
const char* ActivationName(Activation a);
bool ParseActivation(std::string_view s, Activation* out);
bool IsGated(Activation a);  // SwiGLU
// out = act(x) elementwise (kSwiGlu applies its gate function, silu).
Status Activate(const TensorView& out, const TensorView& x, Activation act);

struct FfnWeights {
  TensorView w_up, b_up;      // [F,E], [F]
  TensorView w_gate, b_gate;  // [F,E], [F] (gated activations only)
  TensorView w_down, b_down;  // [E,F], [E]
};

// out, x [B,L,E] (any rank 1..4 with E last):
//   plain:  hidden = act(x·w_upᵀ + b_up)
//   SwiGLU: hidden = silu(x·w_gateᵀ + b_gate) ⊙ (x·w_upᵀ + b_up)
//   out = hidden·w_downᵀ + b_down
// GELU exact: x·Φ(x); tanh: 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))).
// Stage: "ffn_hidden" [..., F].
Status Ffn(const TensorView& out, const TensorView& x, const FfnWeights& w,
           Activation act, StageSink* sink = nullptr);

// ============================================================================
// Attention sublayer, blocks, encoder/decoder layers
// ============================================================================

enum class PositionKind : uint8_t { kNone, kRope, kAlibi, kT5 };
const char* PositionKindName(PositionKind p);  // "none", "rope", "alibi", "t5"
bool ParsePositionKind(std::string_view s, PositionKind* out);

struct AttentionWeights {
  TensorView w_q, w_k, w_v;  // [H·Dh, E], [Hkv·Dh, E], [Hkv·Dh, E]
  TensorView b_q, b_k, b_v;  // optional
  TensorView w_o, b_o;       // [E, H·Dh], [E] (b_o optional)
  TensorView t5_table;       // [num_buckets, H], PositionKind::kT5 only
};

struct AttentionConfig {
  int64_t num_heads = 1;
  int64_t num_kv_heads = 0;  // 0 = num_heads (GQA/MQA otherwise)
  int64_t head_dim = 0;      // 0 = E / num_heads
  Causal causal = Causal::kNone;
  double scale = std::numeric_limits<double>::quiet_NaN();  // NaN = 1/sqrt(Dh)
  PositionKind position = PositionKind::kNone;
  RopeOptions rope;
  T5BiasOptions t5;
  // Run the sdpa core with the fp32 fast kernels (attnflow::Attention) instead
  // of the float64 reference. Stages are then "heads_out" only (plus the
  // projections); the float64 reference is the default and the oracle.
  bool use_kernels = false;
};

// Per-call masks and positions.
struct AttentionMasks {
  TensorView key_mask;      // [B, Lk_total] BOOL, true = real token; optional
  TensorView attn_mask;     // BOOL or float, broadcastable to [B,H,Lq,Lk]; optional
  TensorView position_ids;  // [B, Lq] I64/I32: RoPE positions of the new tokens; optional
};

// Self-attention K/V cache: keys are cached AFTER positions (RoPE) are
// applied, so a later query at offset `length` agrees with them.
struct KvCache {
  Tensor k, v;         // F64 [B, Hkv, capacity, Dh]
  int64_t length = 0;  // cached positions
  void Reset() { length = 0; }
};

// Multi-head attention sublayer:
//   q = x_q·w_qᵀ + b_q, k/v = x_kv·w_{k,v}ᵀ + b  → heads; positions (RoPE on
//   q and k at positions offset + l, offset = cache length); with a cache the
//   new k/v are appended and attention runs over all cached keys (use
//   Causal::kBottomRight); ALiBi/T5 biases and masks are added to the scaled
//   scores; heads_out = sdpa; attn_out = concat·w_oᵀ + b_o.
//   out [B,Lq,E]; x_q [B,Lq,E]; x_kv [B,Lkv,E].
// Stages: q k v (after positions, all cached keys) scores scaled masked
// weights lse heads_out concat attn_out.
Status AttentionLayer(const TensorView& out, const TensorView& x_q,
                      const TensorView& x_kv, const AttentionWeights& w,
                      const AttentionConfig& cfg, const AttentionMasks& masks,
                      KvCache* cache = nullptr, StageSink* sink = nullptr);

enum class NormPlacement : uint8_t { kPost, kPre };
const char* NormPlacementName(NormPlacement p);  // "post", "pre"
bool ParseNormPlacement(std::string_view s, NormPlacement* out);

struct BlockConfig {
  AttentionConfig attn;
  Activation act = Activation::kRelu;
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  NormPlacement placement = NormPlacement::kPost;
};

struct BlockWeights {
  AttentionWeights attn;
  NormWeights norm1, norm2;
  FfnWeights ffn;
};

// Transformer block (encoder layer when attn.causal is kNone, GPT/Llama
// decoder-only block when causal):
//   post-norm (original, BERT): h = norm1(x + attn(x)); out = norm2(h + ffn(h))
//   pre-norm (GPT-2, Llama):    r = x + attn(norm1(x)); out = r + ffn(norm2(r))
// out, x [B,L,E]. Stages: attn_in, the attention stages, attn_out,
// residual (x + attn_out), norm (the FFN input), ffn_hidden, ffn, out.
Status Block(const TensorView& out, const TensorView& x, const BlockWeights& w,
             const BlockConfig& cfg, const AttentionMasks& masks,
             KvCache* cache = nullptr, StageSink* sink = nullptr);

struct DecoderLayerConfig {
  AttentionConfig self_attn;   // causal (kBottomRight with a cache)
  AttentionConfig cross_attn;  // no positions, no causal
  Activation act = Activation::kRelu;
  NormKind norm = NormKind::kLayerNorm;
  double norm_eps = 1e-5;
  NormPlacement placement = NormPlacement::kPost;
};

struct DecoderLayerWeights {
  AttentionWeights self_attn, cross_attn;
  NormWeights norm1, norm2, norm3;
  FfnWeights ffn;
};

// Decoder layer (torch.nn.TransformerDecoderLayer): causal self-attention,
// cross-attention to the encoder memory, FFN.
//   post: h1 = norm1(x + sa(x)); h2 = norm2(h1 + ca(h1, mem)); out = norm3(h2 + ffn(h2))
//   pre:  r1 = x + sa(norm1(x)); r2 = r1 + ca(norm2(r1), mem); out = r2 + ffn(norm3(r2))
// out, x [B,Lt,E]; memory [B,Ls,E]; self_masks.key_mask [B, Lt_total];
// memory_key_mask [B,Ls] BOOL optional. Stages: self.<attention stages>,
// self.residual, self.norm (cross-attention input), cross.<…>, cross.residual,
// cross.norm (FFN input), ffn_hidden, ffn, out.
Status DecoderLayer(const TensorView& out, const TensorView& x,
                    const TensorView& memory, const DecoderLayerWeights& w,
                    const DecoderLayerConfig& cfg,
                    const AttentionMasks& self_masks,
                    const TensorView& memory_key_mask,
                    KvCache* self_cache = nullptr, StageSink* sink = nullptr);

// ---- The encoder–decoder Transformer (Vaswani et al. 2017) --------------------
struct TransformerConfig {
  int64_t d_model = 512, num_heads = 8, ffn_dim = 2048;
  int64_t num_encoder_layers = 6, num_decoder_layers = 6;
  Activation act = Activation::kRelu;
  NormPlacement placement = NormPlacement::kPost;
  double norm_eps = 1e-5;
  bool scale_embeddings = true;  // embeddings × sqrt(d_model)
  SinusoidalOptions positions;   // added after the scaled embeddings
};

struct TransformerWeights {
  TensorView src_embed, tgt_embed;  // [Vs,E], [Vt,E]
  std::vector<BlockWeights> encoder;
  std::vector<DecoderLayerWeights> decoder;
  NormWeights encoder_norm, decoder_norm;  // final LayerNorms (nn.Transformer)
  TensorView w_logits, b_logits;           // optional [V,E], [V]
};

// torch.nn.Transformer (batch first) preceded by embeddings·sqrt(E) +
// sinusoidal positions, with the final encoder/decoder LayerNorms:
//   memory = enc_norm(enc_N(…enc_1(src_in)))   (src key padding mask)
//   dec_out = dec_norm(dec_N(…(tgt_in, memory)))  (causal + tgt key padding;
//   cross-attention hides padded source keys)
//   logits = dec_out·w_logitsᵀ + b_logits (when w_logits is given)
// dec_out [B,Lt,E]; logits [B,Lt,V] optional; src_ids [B,Ls], tgt_ids [B,Lt]
// I64/I32; src_key_mask [B,Ls], tgt_key_mask [B,Lt] BOOL optional.
// Stages: src_in, enc.<i>.<block stages>, memory, tgt_in,
// dec.<i>.<decoder stages>, dec_out, logits.
Status Transformer(const TensorView& dec_out, const TensorView& logits,
                   const TensorView& src_ids, const TensorView& tgt_ids,
                   const TensorView& src_key_mask,
                   const TensorView& tgt_key_mask,
                   const TransformerWeights& w, const TransformerConfig& cfg,
                   StageSink* sink = nullptr);

// ---- Stage plumbing ------------------------------------------------------------
// Forwards stages to `inner` with `prefix` prepended (e.g. "enc.0.").
class PrefixSink : public StageSink {
 public:
  PrefixSink(StageSink* inner, std::string prefix)
      : inner_(inner), prefix_(std::move(prefix)) {}
  bool Wants(std::string_view s) const override;
  void Put(std::string_view s, const TensorView& t) override;

 private:
  StageSink* inner_;
  std::string prefix_;
};

}  // namespace attnflow::nn
