// attnflow/trace.h — the attention player's data: run an input through the
// frozen toy block, a real model or one of the chapter's seeded systems
// with stage capture on, and keep every stage (a Trace). What a Trace
// becomes — the page JSON, the HTML player, the exports — is the player
// layer's (attnflow/player.h). Prose, formats and the page: docs/player.md.
//
// Invariants:
//  * A Trace holds every stage at full precision (float64 for the toy and the
//    float64 reference attention, float32 where a model computes in float32),
//    batch first with B = 1, under the golden-format names
//    (docs/golden-format.md: q k v scores scaled masked weights lse heads_out
//    concat out) plus the block-level names of attnflow/model.h (embed
//    residual norm ffn block_out) and a few toy-only extras (tok_embed pos
//    layer_in ffn_hidden residual2). Stages appear in TraceStageOrder(), the
//    order of the page's stage table (src/player/stage_table.json).
//  * The attention stages of a trace are the reference's own recorded stages
//    (reference::Mha / reference::Sdpa with a StageRecorder, or a model's
//    StageCapture, which runs the reference on the captured layer); nothing
//    here re-derives softmax or masking.
//  * No exception escapes; errors are Status values.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/image.h"
#include "attnflow/model.h"
#include "attnflow/nn.h"
#include "attnflow/nn_align.h"
#include "attnflow/nn_vit.h"
#include "attnflow/semantics.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow::trace {

struct TraceToken {
  int32_t id = 0;
  std::string text;   // the vocabulary string (byte-level BPE spells " cat" as "Ġcat")
  std::string bytes;  // what it spells (Tokenizer::TokenBytes); empty: the same as text
};
// A token as people read it (the CLI's summaries): its bytes (text when
// empty), a space shown as ␣, a newline as ↵, a tab as ⇥ (the page's
// convention), control bytes and invalid UTF-8 (a partial byte-level piece)
// as \xNN.
std::string ShownToken(const TraceToken& t);

struct NamedTensor {
  std::string name;
  Tensor value;
};

// The fast kernel (attnflow::Attention) run on the same q/k/v as the
// reference: the numbers the player shows are the ones the fast path gives.
struct KernelCheck {
  bool ran = false;
  std::string kernel;          // KernelChoice::ToString()
  double max_abs_out = 0;      // |kernel out - reference heads_out|
  double max_abs_lse = 0;      // over rows with finite LSE
  double max_abs_weights = 0;  // |exp(masked - kernel lse) - reference weights|
  std::string note;            // why it did not run
};

// One decode step: a single new query row against the KV cache.
struct DecodeStep {
  TraceToken token;
  int64_t position = 0;  // position of the new token (= cache length before)
  // q [1,H,1,Dh]; k, v [1,Hkv,Lk,Dh] (the cache including the new row);
  // scores scaled masked weights [1,H,1,Lk]; lse [1,H,1]; heads_out [1,H,1,Dh].
  std::vector<NamedTensor> stages;
  // Every layer's stages of this step ("layer.<l>.<stage>", the model-level
  // embed / final_norm / logits), in dataflow order, when the trace keeps
  // them (ModelTraceOptions::keep_layer_stages).
  std::vector<NamedTensor> layer_stages;
  KernelCheck kernel;
  const Tensor* Find(std::string_view name) const;
};

// An extra view of the page (page JSON "views"; docs/player.md "Views"):
// attention weights for every captured layer and head, drawn next to the
// one-layer pipeline with a layer selector.
//   kind "matrix": rows = queries, cols = keys (self- or cross-attention)
//   kind "grid":   one query row (ViT's CLS); cols first_col .. are the
//                  grid_h × grid_w patches, drawn over the image
//   kind "steps":  rows = decoder steps (Bahdanau); the page reveals one row
//                  per step
// Invariants: weights has num_layers·num_heads·rows·cols values, rows of
// probabilities (each sums to 1; with causal = kTopLeft, cells j > i are 0);
// labels have rows / cols entries.
struct AttentionView {
  std::string id;  // unique on a page: "layers", "vit", "enc_self", ...
  std::string kind = "matrix";
  std::string title, caption;
  std::string row_axis = "query", col_axis = "key";
  std::vector<std::string> row_labels, col_labels, layer_labels;
  Causal causal = Causal::kNone;
  int64_t num_layers = 1, num_heads = 1, rows = 0, cols = 0;
  // [num_layers, num_heads, rows, cols], rounded once to float32 (what the
  // page holds; halves the memory of every layer of a long prompt).
  std::vector<float> weights;
  // kind "grid"
  int64_t grid_h = 0, grid_w = 0, first_col = 0;
  int64_t image_w = 0, image_h = 0;
  std::vector<uint8_t> image_rgb;  // image_h × image_w × 3, the model's input
  double at(int64_t layer, int64_t head, int64_t i, int64_t j) const {
    return weights[static_cast<size_t>(((layer * num_heads + head) * rows + i) * cols + j)];
  }
};

struct Trace {
  // "toy" | "encoder" | "decoder" | "vit" | "transformer" | "bahdanau"
  std::string source;
  ModelInfo info;
  std::string norm = "post";   // "post": norm(x + sublayer); "pre": x + sublayer(norm(x))
  std::string ffn_activation;  // "relu", "gelu", "swiglu", or "" if unknown
  std::string description;
  int64_t layer = 0;
  Causal causal = Causal::kNone;
  double scale = 1.0;
  std::vector<TraceToken> tokens;
  // Golden-case inputs when they are known (the toy): x_q x_k x_v [1,L,E]
  // F32, w_q w_k w_v w_o [E,E] F32. With them a trace's safetensors file is a
  // valid golden case of kind "mha" (LoadGoldenCase / attnflow verify).
  std::vector<NamedTensor> inputs;
  std::vector<NamedTensor> stages;  // in TraceStageOrder()
  // Every layer's stages of the prefill (decode steps: DecodeStep::
  // layer_stages), in dataflow order, when kept (ModelTraceOptions::
  // keep_layer_stages): what a model's all-layer dump holds.
  std::vector<NamedTensor> layer_stages;
  // How the model ran (a dump's metadata, for comparing it with another
  // run): "F32"/"F16" KV cache, attention "kernels"/"reference".
  std::string kv_dtype, attention_impl;
  std::vector<DecodeStep> decode;
  KernelCheck kernel;  // prefill attention through the fast kernels
  std::vector<AttentionView> views;  // extra views (all layers, ViT grid, ...)
  // Shown as a banner on the page (e.g. "the weights are random").
  std::string banner;
  // Key padding (page JSON "padding"; docs/player.md "Padding"): the indices
  // of pad tokens, masked as keys for every query by kv_lens (right padding:
  // keys j >= kv_len). Empty = no padding. pad_kv_len = the real length.
  std::vector<int64_t> pad_keys;
  int64_t pad_kv_len = -1;  // -1 = no kv_lens
  // A padded batch (TraceEncoderBatch): this trace is sentence batch_index
  // of batch_sentences, all run in one padded forward pass.
  int64_t batch_index = -1;  // -1 = not part of a batch
  std::vector<std::string> batch_sentences;
  const Tensor* Find(std::string_view name) const;
};

// tok_embed pos embed layer_in q k v scores scaled masked weights lse
// heads_out concat out residual norm ffn_norm ffn_hidden ffn residual2
// block_out ("norm"/"ffn_norm": a pre-norm model's attention / FFN input norm)
// — the stages of the page's stage table, in its order (a test checks it).
const std::vector<std::string>& TraceStageOrder();

// ---- the four-token toy (frozen inputs, shared with `attnflow demo`) -------
constexpr int64_t kToyEmbed = 8, kToyHeads = 2, kToyHeadDim = 4, kToyFfn = 16;
constexpr double kToyLayerNormEps = 1e-5;
constexpr int32_t kToyPadId = 16;  // the toy's "<pad>" token (after its 16 words)
constexpr int64_t kMaxToyTokens = 8192;  // num_tokens + pad

// Token `pos` of the toy sequence "the cat sat down on a mat ..." (the first
// four are the demo's; later ones cycle through a frozen vocabulary).
TraceToken ToyToken(int64_t pos);
// x[pos] = token embedding + sinusoidal position, both written (length E).
void ToyInput(int64_t pos, double* tok_embed, double* position);
// The "<pad>" token at position `pos`: a frozen non-zero embedding (so an
// unmasked pad key would change the result) + the sinusoid of `pos`.
void ToyPadInput(int64_t pos, double* tok_embed, double* position);

// Frozen float64 weights of the toy post-norm block:
//   a = Mha(x) (w_q w_k w_v w_o [E,E], no biases, H=2 heads of Dh=4)
//   n1 = LayerNorm(x + a; ln1_g, ln1_b)
//   f = relu(n1·w_1ᵀ + b_1)·w_2ᵀ + b_2     w_1 [F,E], w_2 [E,F]
//   y = LayerNorm(n1 + f; ln2_g, ln2_b)
struct ToyBlock {
  Tensor w_q, w_k, w_v, w_o, w_1, b_1, w_2, b_2, ln1_g, ln1_b, ln2_g, ln2_b;
};
Result<ToyBlock> MakeToyBlock();

struct ToyOptions {
  int64_t num_tokens = 4;  // > 4 extends the sentence (large-input checks)
  // Pad keys appended after the sentence as "<pad>" tokens (id kToyPadId,
  // a frozen embedding + their positions), masked for every query by
  // kv_lens = num_tokens (semantics.h). The golden inputs carry kv_lens.
  // Not with decode steps (a cache with padding in the middle).
  int64_t pad = 0;
  Causal causal = Causal::kTopLeft;
  int64_t decode_steps = 0;  // teacher-forced: the next tokens of the sentence
  bool all_layers = false;   // add the "layers" view (the toy has one layer)
};
Result<Trace> TraceToy(const ToyOptions& opt);

// ---- real models (attnflow/model.h) ----------------------------------------
struct ModelTraceOptions {
  int64_t layer = 0;
  int64_t decode_steps = 0;  // decoder only: greedy tokens after the prompt
  // Optional progress hook: (tokens done, tokens in all) with all = prompt
  // tokens + decode steps; called with 0 before the prefill, with the prompt
  // length after it, and after each decode step. The prefill is one forward
  // pass (the captured query × key maps need the whole prompt at once), so
  // nothing is reported inside it. Called on the tracing thread.
  std::function<void(int64_t done, int64_t total)> progress;
  // Add the "layers" view: the weights of every layer, from the same
  // forward pass that captures `layer` (every layer is captured at once).
  bool all_layers = false;
  // Keep every layer's stages, of the prefill and of each decode step
  // (Trace::layer_stages, DecodeStep::layer_stages): a model's all-layer
  // dump (`trace --all-layers --safetensors`). The score-row stages (scores
  // scaled masked weights lse, H·Lq·Lk each) of every layer are kept when
  // all of them together hold at most max_row_elements values; past that
  // only `weights` is (the other stages are all kept). Layers other than
  // `layer` are kept as float32.
  bool keep_layer_stages = false;
  int64_t max_row_elements = int64_t{1} << 24;
  // Teacher forcing (decoder): the decode steps feed these token ids (e.g.
  // the tokens of another run being compared) instead of the greedy choice;
  // empty = greedy. Fewer ids than decode_steps is an error.
  std::vector<int32_t> decode_ids;
};
// A sentence through a sentence encoder (BERT family): [CLS] text [SEP].
Result<Trace> TraceEncoder(EncoderModel& model, std::string_view text,
                           const ModelTraceOptions& opt);
// Sentences (2..kMaxBatchSentences) through the encoder in ONE padded forward
// pass, as sentence-transformers runs a batch (each [CLS] text [SEP], padded
// to the longest with [PAD]; the attention mask is kv_lens). One trace per
// sentence, all Lmax tokens long: its rows of the batch's stages, pad_keys =
// its padding, batch_index / batch_sentences set. Pad query rows are not
// meaningful (the model zeroes their q; their outputs are ignored).
constexpr int64_t kMaxBatchSentences = 16;
Result<std::vector<Trace>> TraceEncoderBatch(EncoderModel& model,
                                             const std::vector<std::string>& sentences,
                                             const ModelTraceOptions& opt);
// A prompt through a decoder (prefill), then `decode_steps` greedy steps,
// each one new query row against the KV cache. Resets the model's cache.
Result<Trace> TraceDecoder(DecoderModel& model, std::string_view prompt,
                           const ModelTraceOptions& opt);

// ---- the chapter's systems with seeded (random) weights -----------------------
// No pretrained weights are available offline; each model below is built
// from a fixed seed (attnflow::Rng), and its page says so in a banner.
// Tensors own the storage the nn weight views point into.
struct SeededVit {
  std::vector<Tensor> store;
  nn::VitWeights w;
  nn::VitConfig cfg;
  int64_t image_size = 0, hidden = 0, ffn = 0;  // input side (pixels)
};
Result<SeededVit> MakeSeededVit(uint64_t seed);
constexpr uint64_t kVitSeed = 20240611, kBahdanauSeed = 1409, kTransformerSeed = 1706;

// Centre-crops to a square and resizes (box filter over the source pixels
// each output pixel covers, area-weighted) to side × side.
RgbImage CropResize(const RgbImage& in, int64_t side);
// pixels [1, 3, S, S] float64 in [-1, 1] ((v / 255 - 0.5) / 0.5, as HF ViT).
Result<Tensor> VitPixels(const RgbImage& img);

struct VitTraceOptions {
  int64_t layer = 0;  // the layer the one-layer pipeline shows
};
// The image (crop/resize to the model's input) through the seeded ViT. The
// trace's stages are layer `layer`'s block (pre-norm); views: "vit" (kind
// grid: CLS -> patch weights, every layer and head) and "layers".
Result<Trace> TraceVit(const RgbImage& image, const VitTraceOptions& opt);

// The seeded toy of the Bahdanau loop.
struct SeededBahdanau {
  std::vector<Tensor> store;
  nn::BahdanauWeights w;
  std::vector<std::string> src_tokens, tgt_tokens;  // tgt: the output steps
  Tensor src, prev_targets;                         // [1,S,Ex], [1,T,Ey]
};
Result<SeededBahdanau> MakeSeededBahdanau(uint64_t seed);
// Views: "bahdanau" (kind steps: alignment [T, S], one row per decoder step).
Result<Trace> TraceBahdanau();

struct SeededTransformer {
  std::vector<Tensor> store;
  nn::TransformerWeights w;
  nn::TransformerConfig cfg;
  std::vector<std::string> src_tokens, tgt_tokens;
  Tensor src_ids, tgt_ids;  // [1, Ls], [1, Lt] I64
};
Result<SeededTransformer> MakeSeededTransformer(uint64_t seed);
// The encoder–decoder Transformer on a toy translation pair. Stages: encoder
// layer `layer`; views "enc_self", "dec_self" (causal), "cross" (Lt × Ls).
Result<Trace> TraceTransformer(int64_t layer);

}  // namespace attnflow::trace
