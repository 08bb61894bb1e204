// llama_model.cc — GGUF Llama loader and fp32 forward pass with a KV cache
// (see llama_model.h for the architecture, RoPE layout and invariants).
//
// Every tensor's shape is checked against the hyperparameters before use;
// errors read "llama: <path>: <tensor or key>: <what> (got [..], expected
// [..])". Activations are fp32 row-major [T, features]; attention runs on
// strided views of them (q [1,H,T,D] over [T, H*D]) and of the cache
// (k/v [1,Hkv,Lk,D] over [Hkv, cap, D]) through attnflow::Attention with
// causal bottom_right, so the same code serves prefill and decode.
//
// The KV cache is one anonymous mapping reserved for the whole context
// (max_context positions; MAP_NORESERVE, so only the pages written are ever
// backed: the resident size follows the tokens cached, as a growing buffer's
// would) — appends never reallocate or copy. Only where the reservation is
// refused does it fall back to growing by 1.5x with a copy.
//
// Decode step (one token, no stage capture; DecodeStep): the whole token is
// ONE parallel region (core::PhasedRegion, src/core/phased_region.h: task
// claiming and the barrier between phases live there), 6 phases per layer:
// the attention kernel's tasks and its merge (the plan of
// attnflow::PlanAttention for the token's shape, bound per layer; the model
// does not know how the kernel splits), Wo, gate/up with SwiGLU applied to
// each 16-row chunk as it is computed, Wdown, then q/k/v of the next layer
// (RMSNorm first, RoPE applied to each chunk and k/v written to the cache
// from it) or the output head after the last layer.
// Every task keeps its own copy of the residual stream and of the normed
// input (the same ops on the same data, so the copies are identical), so no
// single task has to run the norm while the others wait. Phases write to
// distinct buffers (Wo and Wdown outputs one per layer, o_out_ and dn_), so a
// late task still updates its copies from unmodified inputs; a task reads a
// shared phase input (att_, g_, q/k/v) only inside an item it claimed, while
// the phase is unfinished and so no task is past it. Each value is computed
// by the same function on the same inputs as on the op-by-op path
// (ops::QMatVecRows is QMatMul's per-row dot; Rope, SwiGlu, Add and RmsNorm
// are the ops themselves on slices; the attention runs the same plan's tasks
// as Attention()), so the logits are bit-identical to it and to any thread
// count.
#include "model/llama/llama_model.h"

#include "core/phased_region.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <system_error>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/gguf.h"
#include "attnflow/kernels.h"
#include "attnflow/ops.h"
#include "attnflow/threading.h"
#include "model/bpe/bpe_tokenizer.h"
#include "model/llama/chat_template.h"
#include "model/loaders.h"

namespace attnflow {
namespace llama {
namespace {

using ops::MatMulScratch;
using ops::QMatrix;

struct Layer {
  std::vector<float> attn_norm, ffn_norm;
  QMatrix q, k, v, o, gate, up, down;
};

constexpr int64_t kDecodeRows = 16;  // rows per chunk in a decode region phase

// The one writer of the KV cache: n floats into element dst of a cache of
// dtype dt (F32 copied, F16 / BF16 rounded to nearest even), for the
// prefill's appends and the fused decode step's alike.
void StoreRow(uint8_t* cache, int64_t dst, const float* src, int64_t n, DType dt) {
  if (dt == DType::kF32) {
    std::memcpy(reinterpret_cast<float*>(cache) + dst, src, static_cast<size_t>(n) * sizeof(float));
  } else if (dt == DType::kF16) {
    for (int64_t d = 0; d < n; ++d) reinterpret_cast<uint16_t*>(cache)[dst + d] = F32ToF16(src[d]);
  } else {
    for (int64_t d = 0; d < n; ++d) reinterpret_cast<uint16_t*>(cache)[dst + d] = F32ToBF16(src[d]);
  }
}

// The reference's score stages pass through; its "out" is dropped (the
// model reports the fast kernel's output as heads_out).
std::string_view DropOut(std::string_view s) { return s == "out" ? std::string_view() : s; }

class LlamaModel : public DecoderModel {
 public:
  // *stage names the part being loaded (for out-of-memory errors).
  // `f` is the opened file (or its open error); `path` labels it.
  static Result<std::unique_ptr<DecoderModel>> Load(const char** stage, Result<GgufFile> f,
                                                    const std::string& path,
                                                    const LlamaOptions& opt);

  const ModelInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return *tok_; }
  void Reset() override { cache_len_ = 0; }
  void SetReferenceAttention(bool on) override { reference_attention_ = on; }
  int64_t CacheLength() const override { return cache_len_; }
  ThreadPool& Pool() override { return *pool_; }
  Status Forward(const std::vector<int32_t>& ids, bool all_logits, Tensor* logits,
                 const StageCapture& capture) override;
  Result<std::string> ApplyChatTemplate(
      const std::vector<std::pair<std::string, std::string>>& messages,
      bool add_generation_prompt) const override;

 private:
  Status Err(const std::string& field, const std::string& what) const {
    return Corrupt("llama: " + path_ + ": " + field + ": " + what);
  }
  Status LoadMatrix(const std::string& name, int64_t rows, int64_t cols, QMatrix* m);
  Status LoadVector(const std::string& name, int64_t n, std::vector<float>* v);
  Status EnsureCapacity(int64_t needed);
  Status ForwardImpl(const std::vector<int32_t>& ids, bool all_logits, Tensor* logits,
                     const StageCapture& capture);
  // The one-token forward as one phased region (see the file comment).
  // Caller checked the id, the context and the cache capacity.
  Status DecodeStep(int32_t id, Tensor* logits);
  bool CanFuseDecode() const {
    return opt_.fused_decode && !reference_attention_ && info_.head_dim % kDecodeRows == 0;
  }
  void StoreKv(uint8_t* cache, int64_t r, const float* src, int64_t n) const;
  void CaptureLayer(StageSink* sink, int64_t T, int64_t Lk, const TensorView& qv,
                    const TensorView& kv, const TensorView& vv, const TensorView& ov);

  std::string path_;
  GgufFile file_;
  ModelInfo info_;
  LlamaOptions opt_;
  std::unique_ptr<bpe::BpeTokenizer> tok_;
  bool has_template_ = false;
  ChatTemplate template_;
  std::vector<Layer> layers_;
  QMatrix embd_, output_;
  std::vector<float> output_norm_;
  float eps_ = 1e-5f;
  std::vector<float> inv_freq_;  // [D/2]
  bool reference_attention_ = false;  // SetReferenceAttention
  int64_t max_ctx_ = 0;

  std::unique_ptr<ThreadPool> own_pool_;
  ThreadPool* pool_ = nullptr;
  MatMulScratch scratch_;

  // KV cache: for layer l, K at kv_base_ + (2l) * layer_bytes and V at
  // (2l + 1) * layer_bytes, each [Hkv, cap_, D] of opt_.kv_dtype.
  uint8_t* kv_base_ = nullptr;
  size_t kv_bytes_ = 0;
  uint8_t* KPtr(size_t l) const { return kv_base_ + (2 * l) * LayerBytes(cap_); }
  uint8_t* VPtr(size_t l) const { return kv_base_ + (2 * l + 1) * LayerBytes(cap_); }
  size_t LayerBytes(int64_t cap) const {
    return static_cast<size_t>(info_.num_kv_heads * cap * info_.head_dim) * DTypeSize(opt_.kv_dtype);
  }
  int64_t cap_ = 0;
  int64_t kv_grows_ = 0;  // reallocations (0 when the reservation held)
  int64_t cache_len_ = 0;

  // Work buffers (resized per call; capacity is kept).
  std::vector<float> x_, h_, q_, k_, v_, att_, g_, u_, tmp_, cos_, sin_;
  std::vector<int64_t> pos_;
  // Decode region: per-task residual / normed copies [W, E], the Wo and
  // Wdown outputs [layers, E], the region's phases, the attention bound per
  // layer and its scratch.
  std::vector<float> xw_, hw_, o_out_, dn_;
  // opt_.fast_dot: per-task int8 copies of hw (qh_) and of att_ / g_ (qa_).
  std::vector<ops::Q8Acts> qh_, qa_;
  core::PhasedRegion region_;
  std::vector<AttentionRun> att_runs_;
  AttentionWorkspace att_ws_;

 public:
  ~LlamaModel() override {
    if (kv_base_ != nullptr) munmap(kv_base_, kv_bytes_);
  }
};

Status LlamaModel::LoadMatrix(const std::string& name, int64_t rows, int64_t cols, QMatrix* m) {
  const GgufTensorInfo* t = file_.FindTensor(name);
  if (!t) return Err(name, "missing tensor");
  if (t->ne.size() != 2 || t->ne[0] != cols || t->ne[1] != rows) {
    return Err(name, "shape " + ShapeString(t->shape()) + " (rows, cols) should be [" +
                         std::to_string(rows) + "," + std::to_string(cols) + "]");
  }
  m->type = t->type;
  m->data = file_.TensorData(*t);
  m->rows = rows;
  m->cols = cols;
  int64_t rb = 0;
  GgmlRowBytes(t->type, cols, &rb);
  m->row_bytes = rb;
  m->name = name;
  return Status::Ok();
}

Status LlamaModel::LoadVector(const std::string& name, int64_t n, std::vector<float>* v) {
  const GgufTensorInfo* t = file_.FindTensor(name);
  if (!t) return Err(name, "missing tensor");
  if (t->numel != n || t->ne.size() != 1) {
    return Err(name, "shape " + ShapeString(t->shape()) + " should be [" + std::to_string(n) + "]");
  }
  v->resize(static_cast<size_t>(n));
  return DequantizeRow(v->data(), file_.TensorData(*t), t->type, n);
}

Result<std::unique_ptr<DecoderModel>> LlamaModel::Load(const char** stage, Result<GgufFile> f,
                                                       const std::string& path,
                                                       const LlamaOptions& opt) {
  if (opt.kv_dtype != DType::kF32 && opt.kv_dtype != DType::kF16 && opt.kv_dtype != DType::kBF16) {
    return InvalidArgument(std::string("llama: kv cache dtype must be F32, F16 or BF16, got ") +
                           DTypeName(opt.kv_dtype));
  }
  if (!f.ok()) return f.status();
  *stage = "the hyperparameters";
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  m->path_ = path;
  m->file_ = std::move(f).value();
  m->opt_ = opt;
  const GgufFile& g = m->file_;

  Result<std::string> arch = g.GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  if (*arch != "llama") {
    return Unimplemented("llama: " + path + ": general.architecture '" + *arch +
                         "' is not supported (only 'llama')");
  }
  const std::string a = *arch + ".";
  auto get_int = [&](const std::string& key, int64_t def, int64_t* out) -> Status {
    if (def >= 0 && !g.Find(key)) {
      *out = def;
      return Status::Ok();
    }
    Result<int64_t> v = g.GetInt(key);
    if (!v.ok()) return v.status();
    if (*v <= 0 || *v > (int64_t{1} << 31)) {
      return m->Err(key, "value " + std::to_string(*v) + " is outside [1, 2^31]");
    }
    *out = *v;
    return Status::Ok();
  };
  ModelInfo& info = m->info_;
  info.architecture = "llama";
  info.name = "llama";
  if (g.Find("general.name")) {
    Result<std::string> name = g.GetString("general.name");
    if (!name.ok()) return name.status();
    info.name = *name;
  }
  ATTNFLOW_RETURN_IF_ERROR(get_int(a + "block_count", -1, &info.num_layers));
  ATTNFLOW_RETURN_IF_ERROR(get_int(a + "context_length", -1, &info.max_positions));
  ATTNFLOW_RETURN_IF_ERROR(get_int(a + "embedding_length", -1, &info.hidden));
  ATTNFLOW_RETURN_IF_ERROR(get_int(a + "feed_forward_length", -1, &info.ffn_hidden));
  ATTNFLOW_RETURN_IF_ERROR(get_int(a + "attention.head_count", -1, &info.num_heads));
  ATTNFLOW_RETURN_IF_ERROR(get_int(a + "attention.head_count_kv", info.num_heads, &info.num_kv_heads));
  if (info.hidden % info.num_heads != 0) {
    return m->Err(a + "attention.head_count", std::to_string(info.num_heads) +
                                                  " does not divide embedding_length " + std::to_string(info.hidden));
  }
  ATTNFLOW_RETURN_IF_ERROR(get_int(a + "attention.key_length", info.hidden / info.num_heads, &info.head_dim));
  int64_t vdim = 0;
  ATTNFLOW_RETURN_IF_ERROR(get_int(a + "attention.value_length", info.head_dim, &vdim));
  if (vdim != info.head_dim) return Unimplemented("llama: " + path + ": value_length != key_length");
  if (info.num_heads % info.num_kv_heads != 0) {
    return m->Err(a + "attention.head_count_kv", std::to_string(info.num_kv_heads) +
                                                     " does not divide head_count " + std::to_string(info.num_heads));
  }
  if (info.head_dim % 2 != 0) return m->Err(a + "attention.key_length", "head_dim must be even for RoPE");
  int64_t rope_dims = 0;
  ATTNFLOW_RETURN_IF_ERROR(get_int(a + "rope.dimension_count", info.head_dim, &rope_dims));
  if (rope_dims != info.head_dim) {
    return Unimplemented("llama: " + path + ": partial rotary embeddings (rope.dimension_count " +
                         std::to_string(rope_dims) + " != head_dim " + std::to_string(info.head_dim) +
                         ") are not supported");
  }
  if (g.Find(a + "rope.scaling.type")) {
    Result<std::string> st = g.GetString(a + "rope.scaling.type");
    if (!st.ok()) return st.status();
    if (*st != "none") return Unimplemented("llama: " + path + ": rope scaling '" + *st + "' is not supported");
  }
  double theta = 10000.0;
  if (g.Find(a + "rope.freq_base")) {
    Result<double> fb = g.GetFloat(a + "rope.freq_base");
    if (!fb.ok()) return fb.status();
    theta = *fb;
  }
  if (!(theta > 1.0) || !std::isfinite(theta)) return m->Err(a + "rope.freq_base", "must be finite and > 1");
  Result<double> eps = g.GetFloat(a + "attention.layer_norm_rms_epsilon");
  if (!eps.ok()) return eps.status();
  if (!(*eps > 0) || !(*eps < 1)) return m->Err(a + "attention.layer_norm_rms_epsilon", "must be in (0, 1)");
  m->eps_ = static_cast<float>(*eps);

  // Tokenizer and chat template.
  *stage = "the tokenizer";
  Result<std::unique_ptr<bpe::BpeTokenizer>> tok = bpe::BpeTokenizer::FromGguf(g);
  if (!tok.ok()) return tok.status();
  m->tok_ = std::move(tok).value();
  info.vocab_size = m->tok_->VocabSize();
  if (g.Find(a + "vocab_size")) {
    int64_t vs = 0;
    ATTNFLOW_RETURN_IF_ERROR(get_int(a + "vocab_size", -1, &vs));
    if (vs != info.vocab_size) {
      return m->Err(a + "vocab_size", std::to_string(vs) + " differs from the " +
                                          std::to_string(info.vocab_size) + " tokenizer tokens");
    }
  }
  if (g.Find("tokenizer.chat_template")) {
    Result<std::string> src = g.GetString("tokenizer.chat_template");
    if (!src.ok()) return src.status();
    *stage = "the chat template";
    Result<ChatTemplate> t = ChatTemplate::Parse(*src);
    if (!t.ok()) {
      return Status(t.status().code(), "llama: " + path + ": tokenizer.chat_template: " + t.status().message());
    }
    m->template_ = std::move(t).value();
    m->has_template_ = true;
  }

  // Weights. Every count that sizes an allocation is checked against the
  // tensors present first: block_count = 10^7 in a 16 KB file must not
  // allocate 10^7 layers before the first missing tensor is found.
  *stage = "the weights";
  const int64_t per_block = 9, outside = 2;  // 9 tensors a block; token_embd, output_norm
  const int64_t present = static_cast<int64_t>(g.tensors().size());
  if (info.num_layers > (present - outside) / per_block) {
    return m->Err(a + "block_count", std::to_string(info.num_layers) + " blocks need at least " +
                                         std::to_string(per_block) + " tensors each, but the file has " +
                                         std::to_string(present) + " tensors in all");
  }
  const int64_t E = info.hidden, H = info.num_heads, Hkv = info.num_kv_heads, D = info.head_dim;
  const int64_t F = info.ffn_hidden, V = info.vocab_size;
  ATTNFLOW_RETURN_IF_ERROR(m->LoadMatrix("token_embd.weight", V, E, &m->embd_));
  if (g.FindTensor("output.weight")) {
    ATTNFLOW_RETURN_IF_ERROR(m->LoadMatrix("output.weight", V, E, &m->output_));
  } else {
    m->output_ = m->embd_;  // tied embeddings
  }
  ATTNFLOW_RETURN_IF_ERROR(m->LoadVector("output_norm.weight", E, &m->output_norm_));
  m->layers_.reserve(static_cast<size_t>(info.num_layers));
  for (int64_t l = 0; l < info.num_layers; ++l) {
    Layer& L = m->layers_.emplace_back();
    const std::string p = "blk." + std::to_string(l) + ".";
    ATTNFLOW_RETURN_IF_ERROR(m->LoadVector(p + "attn_norm.weight", E, &L.attn_norm));
    ATTNFLOW_RETURN_IF_ERROR(m->LoadVector(p + "ffn_norm.weight", E, &L.ffn_norm));
    ATTNFLOW_RETURN_IF_ERROR(m->LoadMatrix(p + "attn_q.weight", H * D, E, &L.q));
    ATTNFLOW_RETURN_IF_ERROR(m->LoadMatrix(p + "attn_k.weight", Hkv * D, E, &L.k));
    ATTNFLOW_RETURN_IF_ERROR(m->LoadMatrix(p + "attn_v.weight", Hkv * D, E, &L.v));
    ATTNFLOW_RETURN_IF_ERROR(m->LoadMatrix(p + "attn_output.weight", E, H * D, &L.o));
    ATTNFLOW_RETURN_IF_ERROR(m->LoadMatrix(p + "ffn_gate.weight", F, E, &L.gate));
    ATTNFLOW_RETURN_IF_ERROR(m->LoadMatrix(p + "ffn_up.weight", F, E, &L.up));
    ATTNFLOW_RETURN_IF_ERROR(m->LoadMatrix(p + "ffn_down.weight", E, F, &L.down));
  }
  info.num_params = 0;
  std::string wtype;
  for (const GgufTensorInfo& t : g.tensors()) {
    info.num_params += t.numel;
    if (t.name == "blk.0.attn_q.weight") wtype = GgmlTypeName(static_cast<uint32_t>(t.type));
  }
  info.weight_dtype = wtype;

  // RoPE inverse frequencies as HF computes them in fp32.
  m->inv_freq_.resize(static_cast<size_t>(D / 2));
  ops::RopeInvFreq(m->inv_freq_.data(), theta, D);
  m->max_ctx_ = info.max_positions;
  if (opt.max_context > 0) m->max_ctx_ = std::min(m->max_ctx_, opt.max_context);

  *stage = "the thread pool and scratch buffers";
  if (opt.num_threads > 0) {
    m->own_pool_ = std::make_unique<ThreadPool>(opt.num_threads);
    m->pool_ = m->own_pool_.get();
  } else {
    m->pool_ = &DefaultPool();
  }
  ATTNFLOW_RETURN_IF_ERROR(m->scratch_.Reserve(m->pool_->NumWorkers(), std::max(E, std::max(F, H * D))));
  return std::unique_ptr<DecoderModel>(std::move(m));
}

Status LlamaModel::EnsureCapacity(int64_t needed) {
  if (needed <= cap_) return Status::Ok();
  auto map = [&](int64_t cap, int flags) -> uint8_t* {
    // A corrupt header's context or head counts must not overflow the size.
    if (2.0 * static_cast<double>(layers_.size()) * static_cast<double>(info_.num_kv_heads) *
            static_cast<double>(cap) * static_cast<double>(info_.head_dim) * 4.0 > 0x1p46) {
      return nullptr;
    }
    const size_t bytes = 2 * layers_.size() * LayerBytes(cap);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  };
  int64_t cap = max_ctx_;
  uint8_t* base = kv_base_ == nullptr && opt_.reserve_kv ? map(cap, MAP_NORESERVE) : nullptr;
  if (base == nullptr) {
    // The whole-context reservation was refused (or already grown once):
    // grow by 1.5x in steps of 256 positions, copying what is cached.
    cap = std::max<int64_t>({needed, cap_ + cap_ / 2, 256});
    cap = std::min((cap + 255) / 256 * 256, max_ctx_);
    base = map(cap, 0);
    if (base == nullptr) {
      return ResourceExhausted("llama: kv cache of " + std::to_string(cap) + " positions (" +
                               std::to_string(2 * layers_.size() * LayerBytes(cap)) +
                               " bytes): cannot allocate");
    }
  }
  const int64_t Hkv = info_.num_kv_heads, D = info_.head_dim;
  const size_t es = DTypeSize(opt_.kv_dtype);
  if (kv_base_ != nullptr) {
    if (cache_len_ > 0) {
      for (size_t m = 0; m < 2 * layers_.size(); ++m) {
        for (int64_t hk = 0; hk < Hkv; ++hk) {
          std::memcpy(base + m * LayerBytes(cap) + static_cast<size_t>(hk * cap * D) * es,
                      kv_base_ + m * LayerBytes(cap_) + static_cast<size_t>(hk * cap_ * D) * es,
                      static_cast<size_t>(cache_len_ * D) * es);
        }
      }
    }
    munmap(kv_base_, kv_bytes_);
    ++kv_grows_;
  }
  kv_base_ = base;
  kv_bytes_ = 2 * layers_.size() * LayerBytes(cap);
  cap_ = cap;
  return Status::Ok();
}

Status LlamaModel::Forward(const std::vector<int32_t>& ids, bool all_logits, Tensor* logits,
                           const StageCapture& capture) {
  try {
    return ForwardImpl(ids, all_logits, logits, capture);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("llama: forward of " + std::to_string(ids.size()) + " tokens: out of memory");
  }
}

void LlamaModel::CaptureLayer(StageSink* sink, int64_t T, int64_t Lk, const TensorView& qv,
                              const TensorView& kv, const TensorView& vv, const TensorView& ov) {
  const int64_t H = info_.num_heads, Hkv = info_.num_kv_heads, D = info_.head_dim;
  // q/k back to HF's half-rotation layout: GGUF dim 2i+j <-> HF j*D/2 + i.
  auto unpermute = [&](const TensorView& src, int64_t heads, int64_t L, const char* name) {
    if (!sink->Wants(name)) return;
    Result<Tensor> t = Tensor::Zeros(DType::kF32, {1, heads, L, D});
    if (!t.ok()) return;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t d = 0; d < D; ++d) {
          const int64_t hf = (d % 2) * (D / 2) + d / 2;
          t->data<float>()[((h * L) + i) * D + hf] = static_cast<float>(src.load(src.offset(0, h, i, d)));
        }
    sink->Put(name, t->view());
  };
  unpermute(qv, H, T, "q");
  unpermute(kv, Hkv, Lk, "k");
  if (sink->Wants("v")) {
    Result<Tensor> t = Tensor::FromView(vv);
    if (t.ok()) {
      Result<Tensor> f = Tensor::Zeros(DType::kF32, t->shape());
      if (f.ok()) {
        const TensorView tv = t->view();
        for (int64_t i = 0; i < tv.numel(); ++i) f->data<float>()[i] = static_cast<float>(tv.load(i));
        sink->Put("v", f->view());
      }
    }
  }
  // The float64 reference on the same views reports the score stages (no
  // output: the layer's own is heads_out), one query head per task on the
  // model's pool (rows are independent: the bits do not depend on it).
  std::vector<std::string> want;
  for (const char* s : {"scores", "scaled", "masked", "weights", "lse"})
    if (sink->Wants(s)) want.push_back(s);
  if (!want.empty()) {
    SdpaOptions so;
    so.causal = Causal::kBottomRight;
    auto head = [](const TensorView& v, int64_t h) {  // [1,1,L,D] of head h
      TensorView s = v;
      s.shape[1] = 1;
      s.data = static_cast<char*>(v.data) + h * v.strides[1] * static_cast<int64_t>(DTypeSize(v.dtype));
      return s;
    };
    std::vector<StageRecorder> per;
    for (int64_t h = 0; h < H; ++h) per.emplace_back(want);
    const int64_t G = H / Hkv;
    pool_->ParallelFor(H, [&](int64_t h, int) {
      (void)reference::Sdpa(TensorView(), TensorView(), head(qv, h), head(kv, h / G), head(vv, h / G),
                            so, &per[static_cast<size_t>(h)]);
    });
    for (const std::string& name : want) {  // the heads side by side: [1, H, T(, Lk)]
      const Tensor* h0 = per[0].Find(name);
      if (h0 == nullptr) continue;
      Shape sh = h0->shape();
      sh[1] = H;
      Result<Tensor> all = Tensor::Zeros(DType::kF64, sh);
      if (!all.ok()) continue;
      const int64_t n = h0->numel();
      bool complete = true;
      for (int64_t h = 0; h < H; ++h) {
        const Tensor* t = per[static_cast<size_t>(h)].Find(name);
        if (t == nullptr || t->numel() != n) complete = false;
        else std::memcpy(all->data<double>() + h * n, t->data<double>(), static_cast<size_t>(n) * sizeof(double));
      }
      if (complete) sink->Put(name, all->view());
    }
  }
  if (sink->Wants("heads_out")) sink->Put("heads_out", ov);
}

Status LlamaModel::ForwardImpl(const std::vector<int32_t>& ids, bool all_logits, Tensor* logits,
                               const StageCapture& capture) {
  const int64_t T = static_cast<int64_t>(ids.size());
  const int64_t E = info_.hidden, H = info_.num_heads, Hkv = info_.num_kv_heads;
  const int64_t D = info_.head_dim, F = info_.ffn_hidden, V = info_.vocab_size;
  if (T == 0) return InvalidArgument("llama: forward: no token ids");
  for (int64_t t = 0; t < T; ++t) {
    if (ids[static_cast<size_t>(t)] < 0 || ids[static_cast<size_t>(t)] >= V) {
      return OutOfRange("llama: forward: ids[" + std::to_string(t) + "] = " +
                        std::to_string(ids[static_cast<size_t>(t)]) + " is outside the vocabulary [0, " +
                        std::to_string(V) + ")");
    }
  }
  if (cache_len_ + T > max_ctx_) {
    return OutOfRange("llama: forward: " + std::to_string(cache_len_) + " cached + " + std::to_string(T) +
                      " new positions exceed the context length " + std::to_string(max_ctx_));
  }
  if (logits == nullptr) return InvalidArgument("llama: forward: logits is null");
  ATTNFLOW_RETURN_IF_ERROR(EnsureCapacity(cache_len_ + T));
  if (T == 1 && capture.sink == nullptr && CanFuseDecode()) return DecodeStep(ids[0], logits);
  const int64_t p0 = cache_len_, Lk = p0 + T;
  const size_t t_ = static_cast<size_t>(T);
  x_.resize(t_ * E);
  h_.resize(t_ * E);
  q_.resize(t_ * H * D);
  k_.resize(t_ * Hkv * D);
  v_.resize(t_ * Hkv * D);
  att_.resize(t_ * H * D);
  g_.resize(t_ * F);
  u_.resize(t_ * F);
  tmp_.resize(t_ * E);
  cos_.resize(t_ * D / 2);
  sin_.resize(t_ * D / 2);
  const bool cap_on = capture.sink != nullptr;
  // Model-level stages go to capture.sink; a captured layer's to lsink
  // (under "layer.<l>." when every layer is captured).
  StageSink* lsink = capture.sink;
  auto put_to = [&](StageSink* to, const char* name, const float* data, const Shape& shape) {
    if (to != nullptr && to->Wants(name)) to->Put(name, ViewOf(data, DType::kF32, shape));
  };
  auto put = [&](const char* name, const float* data, const Shape& shape) {
    put_to(lsink, name, data, shape);
  };

  ThreadPool& pool = *pool_;
  ATTNFLOW_RETURN_IF_ERROR(ops::EmbeddingLookup(x_.data(), E, ids.data(), embd_, T));
  pos_.resize(t_);
  for (int64_t t = 0; t < T; ++t) pos_[static_cast<size_t>(t)] = p0 + t;
  ops::RopeTables(cos_.data(), sin_.data(), pos_.data(), inv_freq_.data(), 1.0, T, D);
  put_to(capture.sink, "embed", x_.data(), {1, T, E});

  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    const bool cap_layer =
        cap_on && (capture.layer == kCaptureAllLayers || static_cast<int64_t>(l) == capture.layer);
    PrefixSink prefixed(capture.sink, "layer." + std::to_string(l) + ".");
    lsink = capture.layer == kCaptureAllLayers ? &prefixed : capture.sink;
    ops::RmsNorm(h_.data(), E, x_.data(), E, L.attn_norm.data(), eps_, T, E, pool);
    if (cap_layer) put("norm", h_.data(), {1, T, E});
    ATTNFLOW_RETURN_IF_ERROR(ops::QMatMul({{q_.data(), H * D, &L.q}, {k_.data(), Hkv * D, &L.k}, {v_.data(), Hkv * D, &L.v}},
                                    h_.data(), E, T, *pool_, scratch_, opt_.gemm_min_tokens));
    ops::Rope(q_.data(), H * D, cos_.data(), sin_.data(), ops::RopeLayout::kInterleaved, T, H, D, D, pool);
    ops::Rope(k_.data(), Hkv * D, cos_.data(), sin_.data(), ops::RopeLayout::kInterleaved, T, Hkv, D, D, pool);
    // Append to the cache: positions p0..p0+T-1 of each head of [Hkv, cap, D]
    // (head-major, so attention streams each head's keys sequentially).
    uint8_t* kc = KPtr(l);
    uint8_t* vc = VPtr(l);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t hk = 0; hk < Hkv; ++hk) {
        const float* ks = k_.data() + (t * Hkv + hk) * D;
        const float* vs = v_.data() + (t * Hkv + hk) * D;
        const int64_t dst = (hk * cap_ + p0 + t) * D;
        StoreRow(kc, dst, ks, D, opt_.kv_dtype);
        StoreRow(vc, dst, vs, D, opt_.kv_dtype);
      }
    }
    const TensorView qv = MakeStridedView(q_.data(), DType::kF32, {1, H, T, D}, {T * H * D, D, H * D, 1});
    const TensorView ov = MakeStridedView(att_.data(), DType::kF32, {1, H, T, D}, {T * H * D, D, H * D, 1});
    const TensorView kv = MakeStridedView(kc, opt_.kv_dtype, {1, Hkv, Lk, D}, {Hkv * cap_ * D, cap_ * D, D, 1});
    const TensorView vv = MakeStridedView(vc, opt_.kv_dtype, {1, Hkv, Lk, D}, {Hkv * cap_ * D, cap_ * D, D, 1});
    SdpaOptions so;
    so.causal = Causal::kBottomRight;
    KernelOptions ko;
    ko.pool = pool_;
    Status st = reference_attention_ ? reference::Sdpa(ov, TensorView(), qv, kv, vv, so)
                                     : Attention(ov, TensorView(), qv, kv, vv, so, ko);
    if (!st.ok()) return Status(st.code(), "llama: layer " + std::to_string(l) + ": " + st.message());
    if (cap_layer) {
      CaptureLayer(lsink, T, Lk, qv, kv, vv, ov);
      put("concat", att_.data(), {1, T, H * D});
    }
    ATTNFLOW_RETURN_IF_ERROR(ops::QMatMul({{tmp_.data(), E, &L.o}}, att_.data(), H * D, T, *pool_, scratch_, opt_.gemm_min_tokens));
    if (cap_layer) put("out", tmp_.data(), {1, T, E});
    ops::Add(x_.data(), x_.data(), tmp_.data(), T * E, pool);
    if (cap_layer) put("residual", x_.data(), {1, T, E});
    ops::RmsNorm(h_.data(), E, x_.data(), E, L.ffn_norm.data(), eps_, T, E, pool);
    if (cap_layer) put("ffn_norm", h_.data(), {1, T, E});
    ATTNFLOW_RETURN_IF_ERROR(ops::QMatMul({{g_.data(), F, &L.gate}, {u_.data(), F, &L.up}}, h_.data(), E, T, *pool_,
                                    scratch_, opt_.gemm_min_tokens));
    ops::SwiGlu(g_.data(), g_.data(), u_.data(), T * F, pool);
    ATTNFLOW_RETURN_IF_ERROR(ops::QMatMul({{tmp_.data(), E, &L.down}}, g_.data(), F, T, *pool_, scratch_, opt_.gemm_min_tokens));
    if (cap_layer) put("ffn", tmp_.data(), {1, T, E});
    ops::Add(x_.data(), x_.data(), tmp_.data(), T * E, pool);
    if (cap_layer) put("block_out", x_.data(), {1, T, E});
  }

  const int64_t rows = all_logits ? T : 1;
  const float* xin = x_.data() + (T - rows) * E;
  ops::RmsNorm(h_.data(), E, xin, E, output_norm_.data(), eps_, rows, E, pool);
  Result<Tensor> out = Tensor::Zeros(DType::kF32, {rows, V});
  if (!out.ok()) return out.status();
  ATTNFLOW_RETURN_IF_ERROR(ops::QMatMul({{out->data<float>(), V, &output_}}, h_.data(), E, rows, *pool_, scratch_,
                                  opt_.gemm_min_tokens));
  put_to(capture.sink, "final_norm", h_.data(), {1, rows, E});
  put_to(capture.sink, "logits", out->data<float>(), {1, rows, V});
  *logits = std::move(out).value();
  cache_len_ += T;
  return Status::Ok();
}

void LlamaModel::StoreKv(uint8_t* cache, int64_t r, const float* src, int64_t n) const {
  // Row r of the layer's [Hkv * D] k or v output: head r / D, dims from r % D.
  const int64_t D = info_.head_dim;
  const int64_t dst = ((r / D) * cap_ + cache_len_) * D + r % D;
  StoreRow(cache, dst, src, n, opt_.kv_dtype);
}

Status LlamaModel::DecodeStep(int32_t id, Tensor* logits) {
  const int64_t E = info_.hidden, H = info_.num_heads, Hkv = info_.num_kv_heads;
  const int64_t D = info_.head_dim, F = info_.ffn_hidden, V = info_.vocab_size;
  const int64_t p0 = cache_len_, Lk = p0 + 1;
  ThreadPool& pool = *pool_;
  const int64_t W = pool.NumWorkers();
  const size_t e = static_cast<size_t>(E);
  x_.resize(e);
  q_.resize(static_cast<size_t>(H * D));
  k_.resize(static_cast<size_t>(Hkv * D));
  v_.resize(static_cast<size_t>(Hkv * D));
  att_.resize(static_cast<size_t>(H * D));
  g_.resize(static_cast<size_t>(F));
  const int64_t nl = static_cast<int64_t>(layers_.size());
  o_out_.resize(static_cast<size_t>(nl) * e);
  dn_.resize(static_cast<size_t>(nl) * e);
  xw_.resize(static_cast<size_t>(W) * e);
  hw_.resize(static_cast<size_t>(W) * e);
  const bool fast = opt_.fast_dot;
  if (fast) {
    qh_.resize(static_cast<size_t>(W));
    qa_.resize(static_cast<size_t>(W));
  }
  cos_.resize(static_cast<size_t>(D / 2));
  sin_.resize(static_cast<size_t>(D / 2));
  pos_.resize(1);
  const int64_t qd = H * D, kd = Hkv * D;

  // The attention views of layer l: q and out [1, H, 1, D] over q_ / att_,
  // k/v [1, Hkv, Lk, D] over the cache. One plan serves every layer (same
  // shape), bound to each layer's views before the region starts.
  SdpaOptions so;
  so.causal = Causal::kBottomRight;
  struct AttViews {
    TensorView q, k, v, out;
  };
  auto att_views = [&](size_t l) {
    const Shape qs = {1, H, 1, D}, qst = {H * D, D, H * D, 1};
    const Shape ks = {1, Hkv, Lk, D}, kst = {Hkv * cap_ * D, cap_ * D, D, 1};
    return AttViews{MakeStridedView(q_.data(), DType::kF32, qs, qst),
                    MakeStridedView(KPtr(l), opt_.kv_dtype, ks, kst),
                    MakeStridedView(VPtr(l), opt_.kv_dtype, ks, kst),
                    MakeStridedView(att_.data(), DType::kF32, qs, qst)};
  };
  auto layer_error = [](int64_t l, const Status& st) {
    return Status(st.code(), "llama: layer " + std::to_string(l) + ": " + st.message());
  };
  KernelOptions ko;
  ko.pool = pool_;
  AttentionPlan plan;
  {
    const AttViews a = att_views(0);
    Status st = PlanAttention(a.out, TensorView(), a.q, a.k, a.v, so, ko, &plan);
    if (!st.ok()) return layer_error(0, st);
  }
  ATTNFLOW_RETURN_IF_ERROR(att_ws_.Reserve(plan, static_cast<int>(W)));
  att_runs_.resize(layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const AttViews a = att_views(l);
    Status st = att_runs_[l].Bind(plan, a.out, TensorView(), a.q, a.k, a.v, so);
    if (!st.ok()) return layer_error(static_cast<int64_t>(l), st);
  }

  // Phases of region part r = l + 1 (l = -1 .. nl-1): attention tasks and
  // merge of layer l, Wo, gate/up, Wdown, then q/k/v of layer l + 1 or the
  // head. All are declared here, before the region runs.
  constexpr int kPhases = 6;
  enum { kAtt = 0, kMerge = 1, kWo = 2, kGateUp = 3, kDown = 4, kNext = 5 };
  region_.Reset(W, kPhases * static_cast<int>(nl + 1));
  auto chunks = [](int64_t rows) { return (rows + kDecodeRows - 1) / kDecodeRows; };
  for (int64_t r = 0; r <= nl; ++r) {
    const int p = static_cast<int>(r) * kPhases;
    region_.SetItems(p + kAtt, r > 0 ? plan.PhaseTasks(AttentionPhase::kTasks) : 0);
    region_.SetItems(p + kMerge, r > 0 ? plan.PhaseTasks(AttentionPhase::kMerge) : 0);
    region_.SetItems(p + kWo, r > 0 ? chunks(E) : 0);
    region_.SetItems(p + kGateUp, r > 0 ? chunks(F) : 0);
    region_.SetItems(p + kDown, r > 0 ? chunks(E) : 0);
    region_.SetItems(p + kNext, r == nl ? chunks(V) : (qd + 2 * kd) / kDecodeRows);
  }
  // The logits are written whole by the head phase: the caller's tensor is
  // reused when it already is [1, V] F32 (no 4*V-byte allocation per step).
  const TensorView& lv = logits->view();
  if (!(logits->defined() && lv.dtype == DType::kF32 && lv.rank == 2 && lv.shape[0] == 1 &&
        lv.shape[1] == V && lv.data != nullptr)) {
    Result<Tensor> out = Tensor::Zeros(DType::kF32, {1, V});
    if (!out.ok()) return out.status();
    *logits = std::move(out).value();
  }
  float* lg = logits->data<float>();

  ATTNFLOW_RETURN_IF_ERROR(ops::EmbeddingLookup(x_.data(), E, &id, embd_, 1));
  pos_[0] = p0;
  ops::RopeTables(cos_.data(), sin_.data(), pos_.data(), inv_freq_.data(), 1.0, 1, D);

  // Task t's part of region part l + 1: the attention of layer l (l >= 0)
  // and the rest of layer l, then the start of layer l + 1 or the head.
  auto part = [&](int64_t l, core::PhasedRegion::Task& t) {
    const int p = static_cast<int>(l + 1) * kPhases;
    const int64_t w = t.id();
    float* xw = xw_.data() + w * E;
    float* hw = hw_.data() + w * E;
    float* buf = scratch_.worker(t.worker());
    ops::Q8Acts* qh = fast ? &qh_[static_cast<size_t>(w)] : nullptr;
    ops::Q8Acts* qa = fast ? &qa_[static_cast<size_t>(w)] : nullptr;
    // y = W[r0, r0 + nr) x, exact or (fast) on xq, the int8 copy of x.
    auto mv = [&](float* y, const QMatrix& m, int64_t r0, int64_t nr, const float* x, const ops::Q8Acts* xq) {
      if (fast) {
        ops::QMatVecRowsFast(y, m, r0, nr, *xq, x, buf);
      } else {
        ops::QMatVecRows(y, m, r0, nr, x, buf);
      }
    };
    if (l < 0) {
      std::memcpy(xw, x_.data(), e * sizeof(float));
    } else {
      const Layer& L = layers_[static_cast<size_t>(l)];
      float* o_out = o_out_.data() + l * E;
      float* dn = dn_.data() + l * E;
      const AttentionRun& run = att_runs_[static_cast<size_t>(l)];
      for (AttentionPhase ph : {AttentionPhase::kTasks, AttentionPhase::kMerge}) {
        t.Phase(p + (ph == AttentionPhase::kTasks ? kAtt : kMerge), [&](int64_t i) {
          Status st = RunAttentionTasks(run, ph, i, i + 1, t.worker(), att_ws_);
          return st.ok() ? st : layer_error(l, st);
        });
      }
      // The int8 copies of the shared inputs (att_, g_) are made on a task's
      // first item of the phase: while an item is unfinished no task is past
      // the phase, so the input is still this layer's (a task that arrives
      // after the phase is done must not read it: another task may be
      // writing a later layer's att_ / g_ by then).
      bool quantized = false;
      t.Phase(p + kWo, [&](int64_t c) {
        if (fast && !quantized) {
          ops::QuantizeActsQ8(qa, att_.data(), H * D);
          quantized = true;
        }
        const int64_t r0 = c * kDecodeRows, nr = std::min(kDecodeRows, E - r0);
        mv(o_out + r0, L.o, r0, nr, att_.data(), qa);
      });
      ops::Add(xw, xw, o_out, E, pool);
      ops::RmsNorm(hw, E, xw, E, L.ffn_norm.data(), eps_, 1, E, pool);
      if (fast) ops::QuantizeActsQ8(qh, hw, E);
      t.Phase(p + kGateUp, [&](int64_t c) {
        const int64_t r0 = c * kDecodeRows, nr = std::min(kDecodeRows, F - r0);
        float u[kDecodeRows];
        mv(g_.data() + r0, L.gate, r0, nr, hw, qh);
        mv(u, L.up, r0, nr, hw, qh);
        ops::SwiGlu(g_.data() + r0, g_.data() + r0, u, nr, pool);
      });
      quantized = false;
      t.Phase(p + kDown, [&](int64_t c) {
        if (fast && !quantized) {
          ops::QuantizeActsQ8(qa, g_.data(), F);
          quantized = true;
        }
        const int64_t r0 = c * kDecodeRows, nr = std::min(kDecodeRows, E - r0);
        mv(dn + r0, L.down, r0, nr, g_.data(), qa);
      });
      ops::Add(xw, xw, dn, E, pool);
    }
    if (l + 1 == nl) {
      ops::RmsNorm(hw, E, xw, E, output_norm_.data(), eps_, 1, E, pool);
      if (fast) ops::QuantizeActsQ8(qh, hw, E);
      t.Phase(p + kNext, [&](int64_t c) {
        const int64_t r0 = c * kDecodeRows, nr = std::min(kDecodeRows, V - r0);
        mv(lg + r0, output_, r0, nr, hw, qh);
      }, core::PhaseEnd::kNoWait);
      return;
    }
    const size_t ln = static_cast<size_t>(l + 1);
    const Layer& N = layers_[ln];
    ops::RmsNorm(hw, E, xw, E, N.attn_norm.data(), eps_, 1, E, pool);
    if (fast) ops::QuantizeActsQ8(qh, hw, E);
    // The next layer's attention reads every q/k/v row and the cache rows
    // written here: wait for all of them.
    t.Phase(p + kNext, [&](int64_t c) {
      int64_t r = c * kDecodeRows;  // row of [q | k | v]; a chunk lies in one head
      const float* cs = cos_.data() + (r % D) / 2;
      const float* sn = sin_.data() + (r % D) / 2;
      if (r < qd) {
        mv(q_.data() + r, N.q, r, kDecodeRows, hw, qh);
        ops::Rope(q_.data() + r, kDecodeRows, cs, sn, ops::RopeLayout::kInterleaved, 1, 1, kDecodeRows,
                  kDecodeRows, pool);
      } else if (r < qd + kd) {
        r -= qd;
        mv(k_.data() + r, N.k, r, kDecodeRows, hw, qh);
        ops::Rope(k_.data() + r, kDecodeRows, cs, sn, ops::RopeLayout::kInterleaved, 1, 1, kDecodeRows,
                  kDecodeRows, pool);
        StoreKv(KPtr(ln), r, k_.data() + r, kDecodeRows);
      } else {
        r -= qd + kd;
        mv(v_.data() + r, N.v, r, kDecodeRows, hw, qh);
        StoreKv(VPtr(ln), r, v_.data() + r, kDecodeRows);
      }
    });
  };

  ATTNFLOW_RETURN_IF_ERROR(region_.Run(pool, [&](core::PhasedRegion::Task& t) {
    for (int64_t l = -1; l < nl; ++l) part(l, t);
  }));
  cache_len_ += 1;
  return Status::Ok();
}

Result<std::string> LlamaModel::ApplyChatTemplate(
    const std::vector<std::pair<std::string, std::string>>& messages, bool add_generation_prompt) const {
  if (!has_template_) {
    return Unimplemented("llama: " + path_ + ": the model has no tokenizer.chat_template");
  }
  std::map<std::string, std::string> vars;
  if (tok_->bos_id() >= 0) vars["bos_token"] = tok_->TokenText(tok_->bos_id());
  if (tok_->eos_id() >= 0) vars["eos_token"] = tok_->TokenText(tok_->eos_id());
  try {
    return template_.Render(messages, add_generation_prompt, vars);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("llama: chat template: out of memory");
  }
}

}  // namespace

namespace {
// Runs the loader, turning allocation and thread-start failures into errors
// that name the file and the stage.
Result<std::unique_ptr<DecoderModel>> LoadGuarded(const std::function<Result<GgufFile>()>& open,
                                                  const std::string& path, const LlamaOptions& options) {
  const char* stage = "the GGUF header";
  try {
    return LlamaModel::Load(&stage, open(), path, options);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("llama: " + path + ": out of memory while loading " + stage);
  } catch (const std::system_error& e) {  // e.g. EAGAIN starting threads
    return ResourceExhausted("llama: " + path + ": while loading " + stage + ": " + e.what());
  }
}
}  // namespace

Result<std::unique_ptr<DecoderModel>> LoadLlamaGgufWithOptions(const std::string& path,
                                                               const LlamaOptions& options) {
  return LoadGuarded([&] { return GgufFile::Open(path); }, path, options);
}

Result<std::unique_ptr<DecoderModel>> LoadLlamaGgufFromBuffer(std::vector<uint8_t> bytes,
                                                              const std::string& label,
                                                              const LlamaOptions& options) {
  return LoadGuarded([&] { return GgufFile::FromBuffer(std::move(bytes), label); }, label, options);
}

}  // namespace llama

Result<std::unique_ptr<DecoderModel>> LoadDecoderModel(const std::string& path,
                                                       const DecoderOptions& options) {
  llama::LlamaOptions lo;
  lo.kv_dtype = options.kv_dtype;
  lo.num_threads = options.num_threads;
  lo.max_context = options.max_context;
  lo.fast_dot = options.fast_dot;
  return llama::LoadLlamaGgufWithOptions(path, lo);
}

Result<std::unique_ptr<Model>> LoadLlamaGguf(const std::string& path) {
  Result<std::unique_ptr<DecoderModel>> m = llama::LoadLlamaGgufWithOptions(path, {});
  if (!m.ok()) return m.status();
  return std::unique_ptr<Model>(std::move(m).value());
}

}  // namespace attnflow
