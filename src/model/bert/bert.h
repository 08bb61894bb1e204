// bert.h — the BERT sentence encoder (internal header; the public face is
// attnflow::EncoderModel from attnflow/model.h).
//
// A model directory in the Hugging Face / sentence-transformers layout:
//   config.json              architecture sizes (model_type "bert")
//   model.safetensors        fp32 (or f16/bf16, converted at load) weights,
//                            names with or without a "bert." prefix
//   vocab.txt                WordPiece vocabulary
//   tokenizer_config.json    optional: do_lower_case, strip_accents,
//                            tokenize_chinese_chars, special tokens
//   sentence_bert_config.json optional: max_seq_length (truncation)
//   1_Pooling/config.json    optional: must ask for mean pooling if present
//
// Forward (fp32, post-norm, exactly BertModel + mean pooling + Normalize):
//   x = LN(word[id] + pos[i] + type[0])
//   per layer: a = Attn(x) (fused QKV Linear with bias, attnflow::Attention
//              with a kv_lens padding mask, scale 1/sqrt(Dh)), x = LN(x + Dense(a)),
//              x = LN(x + W2·gelu_erf(W1·x + b1) + b2)
//   (each LN fused into its dense layer's GEMM region: ops::LinearEpilogue)
//   embedding = normalize(mean of x over real tokens)
//
// Batches: sequences of different lengths are padded to the longest for
// attention (key padding via kv_lens); the row-wise layers only process real
// tokens (see encoder.cc). Padded rows of every [B, L, E] output are zero
// (Hugging Face leaves values there that nothing should read).
//
// Invariants: a loaded BertModel has checked every tensor's presence, dtype
// and shape against config.json; weights are immutable after load and
// Embed/HiddenStates keep no state between calls (scratch is per call), so
// a model may be used from several threads at once (their parallel loops
// share the default ThreadPool, which serialises them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "attnflow/model.h"
#include "attnflow/ops.h"
#include "attnflow/safetensors.h"
#include "model/bert/wordpiece.h"

namespace attnflow::bert {

struct BertConfig {
  int64_t vocab_size = 0, hidden = 0, num_layers = 0, num_heads = 0;
  int64_t intermediate = 0, max_positions = 0, type_vocab_size = 0;
  double layer_norm_eps = 1e-12;
  // Truncation length for EncodeText (sentence_bert_config.json
  // max_seq_length, else max_positions).
  int64_t max_seq_length = 0;
  std::string name;  // directory name, or the package's model name
};

// Parses config.json (+ the optional sentence-transformers files) in `dir`.
// Errors name the file and the field.
Status ReadBertConfig(const std::string& dir, BertConfig* cfg,
                      WordPieceOptions* tok_opt);

// Dense weights are packed once at load (ops::PackedMatrix, the layout the
// GEMM micro-kernel reads); vectors point into the mapping or owned_.
struct BertLayer {
  ops::PackedMatrix w_qkv;         // [3E, E]  (query rows, key rows, value rows)
  const float* b_qkv = nullptr;    // [3E]
  ops::PackedMatrix w_o;           // [E, E]
  const float* b_o = nullptr;      // [E]
  const float *ln1_g = nullptr, *ln1_b = nullptr;  // [E]
  ops::PackedMatrix w_1;           // [F, E]
  const float* b_1 = nullptr;      // [F]
  ops::PackedMatrix w_2;           // [E, F]
  const float* b_2 = nullptr;      // [E]
  const float *ln2_g = nullptr, *ln2_b = nullptr;  // [E]
};

class BertModel : public EncoderModel {
 public:
  // Loads and validates a model directory (see the file comment).
  static Result<std::unique_ptr<BertModel>> Load(const std::string& dir);

  const ModelInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return *tokenizer_; }
  const WordPieceTokenizer& wordpiece() const { return *tokenizer_; }
  const BertConfig& config() const { return cfg_; }

  // [CLS] text [SEP], truncated to max_seq_length like sentence-transformers
  // (the last kept token is [SEP]).
  Result<std::vector<int32_t>> EncodeText(std::string_view text) const override;
  Result<std::vector<int32_t>> EncodeTextTruncating(std::string_view text, int64_t* cut_tokens,
                                                    int64_t* untokenised_bytes) const override;
  int64_t MaxSequenceLength() const override { return cfg_.max_seq_length; }

  Status Embed(const std::vector<std::vector<int32_t>>& ids, Tensor* embeddings,
               Tensor* hidden, const StageCapture& capture = {}) override;
  Status HiddenStates(const std::vector<std::vector<int32_t>>& ids,
                      std::vector<Tensor>* states) override;

  // Tokenises, embeds in batches of `batch_size` (each padded to its
  // longest) and returns [N, E] normalised embeddings.
  Status EmbedTexts(const std::vector<std::string>& texts, int64_t batch_size,
                    Tensor* embeddings) override;

  // Test hook: false runs every dense + residual + LayerNorm as the
  // composed pair (ops::Linear, then ops::LayerNorm) instead of the fused
  // norm epilogue; both give the same bits. Not while embedding.
  void set_fuse_norm(bool on) { fuse_norm_ = on; }
  void SetReferenceAttention(bool on) override { reference_attention_ = on; }

 private:
  BertModel() = default;
  // out [rows, E] = LayerNorm(sum), sum [rows, E] = in [rows, k] · wᵀ + ep
  // (bias, residual): fused into the GEMM's region unless fuse_norm_ is off.
  void LinearNorm(float* sum, const float* in, int64_t k, const ops::PackedMatrix& w,
                  ops::LinearEpilogue ep, const float* gamma, const float* beta, float* out,
                  int64_t rows, ThreadPool& pool) const;
  // The forward pass shared by Embed and HiddenStates. `states` (optional)
  // receives num_layers+1 tensors [B, L, E].
  Status Forward(const std::vector<std::vector<int32_t>>& ids,
                 Tensor* embeddings, Tensor* hidden, std::vector<Tensor>* states,
                 const StageCapture& capture);

  BertConfig cfg_;
  ModelInfo info_;
  std::unique_ptr<WordPieceTokenizer> tokenizer_;
  SafetensorsFile file_;            // mapping the views below point into
  std::vector<Tensor> owned_;       // converted / fused / realigned weights
  const float *word_ = nullptr, *pos_ = nullptr, *type_ = nullptr;
  ops::QMatrix word_table_;  // F32 view of word_ for ops::EmbeddingLookup
  const float *emb_ln_g_ = nullptr, *emb_ln_b_ = nullptr;
  ops::PackArena arena_;  // storage of every layer's packed weights (outlives layers_)
  std::vector<BertLayer> layers_;
  bool fuse_norm_ = true;
  bool reference_attention_ = false;
};

}  // namespace attnflow::bert
