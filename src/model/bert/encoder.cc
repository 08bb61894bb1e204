// encoder.cc — the BERT encoder forward pass (fp32), mean pooling and L2
// normalisation; see bert.h for the equations.
//
// Layout: the row-wise work (embeddings, GEMMs, LayerNorm, GELU) runs on
// the T real tokens of the batch packed as rows [T, *], so padding costs
// nothing there. Only attention sees the batch padded to its longest
// sequence L: the fused Q|K|V rows are scattered into a zero-initialised
// [B*L, 3E] buffer, read as zero-copy strided [B,H,L,Dh] views, key padding
// is expressed with kv_lens, and the output [B*L, E] is gathered back (padded
// query rows are computed but ignored). Without padding (T = B*L) nothing is
// copied. Every [B, L, E] result (hidden, states, captured stages) has zero
// rows at padded positions.
//
// Stage capture (StageCapture): model-level "embed" [B,L,E]; for layer
// `capture.layer` (every layer, each under "layer.<l>.", with
// kCaptureAllLayers): q k v [B,H,L,Dh], the float64 reference's scores
// scaled masked weights lse on the same q, k, v (run beside the layer's own
// attention, so capture does not change the numbers), heads_out (the
// layer's attention output) [B,H,L,Dh], concat [B,L,E], out (attention
// output dense) [B,L,E], residual (x + out) [B,L,E], norm (LayerNorm 1)
// [B,L,E], ffn (second FFN dense) [B,L,E], block_out (LayerNorm 2) [B,L,E]
// (the attention stages of padded query rows are not meaningful: their q is
// zero). A captured layer computes its dense + residual + LayerNorm as the
// composed pair (bit-identical to the fused epilogue, tests compare them).
// SetReferenceAttention(true) runs every layer's attention through
// reference::Sdpa (float64, rounded to f32) instead of the kernels.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/kernels.h"
#include "attnflow/ops.h"
#include "attnflow/threading.h"
#include "model/bert/bert.h"

namespace attnflow::bert {
namespace {

Result<Tensor> Alloc(const Shape& s) { return Tensor::Zeros(DType::kF32, s); }

}  // namespace

namespace {
// End of the chunk of `text` that starts at `pos`: the first ASCII whitespace
// at or after pos + 16 KiB (whitespace separates words, so tokenising the
// chunks one by one gives the ids of the whole text), else the last one
// before it, else (64 KiB without whitespace: inside one word, which WordPiece
// maps to [UNK] past 100 characters) a UTF-8 boundary at pos + 64 KiB.
size_t ChunkEnd(std::string_view text, size_t pos) {
  constexpr size_t kChunk = 16 << 10, kMaxChunk = 64 << 10;
  if (text.size() - pos <= kChunk) return text.size();
  auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  const size_t hard = std::min(text.size(), pos + kMaxChunk);
  for (size_t i = pos + kChunk; i < hard; ++i) {
    if (is_space(text[i])) return i;
  }
  if (hard == text.size()) return hard;
  for (size_t i = pos + kChunk; i > pos; --i) {
    if (is_space(text[i])) return i;
  }
  size_t cut = hard;
  while (cut > pos + 1 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}
}  // namespace

Result<std::vector<int32_t>> BertModel::EncodeText(std::string_view text) const {
  int64_t cut = 0, rest = 0;
  return EncodeTextTruncating(text, &cut, &rest);
}

Result<std::vector<int32_t>> BertModel::EncodeTextTruncating(std::string_view text,
                                                             int64_t* cut_tokens,
                                                             int64_t* untokenised_bytes) const {
  // Like sentence-transformers: [CLS] + the first max_seq_length - 2 tokens
  // + [SEP] (max_seq_length >= 2, checked at load).
  const size_t keep = static_cast<size_t>(cfg_.max_seq_length) - 2;
  std::vector<int32_t> ids;
  ids.push_back(tokenizer_->cls_id());
  *cut_tokens = 0;
  *untokenised_bytes = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = ChunkEnd(text, pos);
    Result<std::vector<int32_t>> r = tokenizer_->Encode(text.substr(pos, end - pos), false);
    if (!r.ok()) {
      if (pos == 0 && end == text.size()) return r.status();
      return Status(r.status().code(), r.status().message() + " (in bytes " + std::to_string(pos) +
                                           ".." + std::to_string(end) + ")");
    }
    for (int32_t id : *r) {
      if (ids.size() - 1 < keep) ids.push_back(id);
      else ++*cut_tokens;
    }
    pos = end;
    if (*cut_tokens > 0) {
      *untokenised_bytes = static_cast<int64_t>(text.size() - pos);
      break;
    }
  }
  ids.push_back(tokenizer_->sep_id());
  return ids;
}

Status BertModel::Embed(const std::vector<std::vector<int32_t>>& ids, Tensor* embeddings,
                        Tensor* hidden, const StageCapture& capture) {
  return Forward(ids, embeddings, hidden, nullptr, capture);
}

Status BertModel::HiddenStates(const std::vector<std::vector<int32_t>>& ids,
                               std::vector<Tensor>* states) {
  if (states == nullptr) return InvalidArgument("bert: HiddenStates: states is null");
  return Forward(ids, nullptr, nullptr, states, {});
}

Status BertModel::EmbedTexts(const std::vector<std::string>& texts, int64_t batch_size,
                             Tensor* embeddings) {
  if (batch_size <= 0) return InvalidArgument("bert: batch_size must be > 0");
  const int64_t n = static_cast<int64_t>(texts.size());
  const int64_t E = cfg_.hidden;
  Result<Tensor> out = Alloc({n, E});
  if (!out.ok()) return out.status();
  std::vector<std::vector<int32_t>> ids(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    Result<std::vector<int32_t>> r = EncodeText(texts[i]);
    if (!r.ok()) {
      return Status(r.status().code(),
                    "bert: text " + std::to_string(i) + ": " + r.status().message());
    }
    ids[i] = std::move(r).value();
  }
  // Like sentence-transformers: longest first, so each batch has little
  // padding; results go back to the input order.
  std::vector<size_t> order(texts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ids[a].size() > ids[b].size(); });
  for (int64_t s = 0; s < n; s += batch_size) {
    const int64_t e = std::min(n, s + batch_size);
    std::vector<std::vector<int32_t>> batch;
    for (int64_t i = s; i < e; ++i) batch.push_back(ids[order[static_cast<size_t>(i)]]);
    Tensor emb;
    ATTNFLOW_RETURN_IF_ERROR(Embed(batch, &emb, nullptr));
    for (int64_t i = s; i < e; ++i) {
      std::memcpy(out->data<float>() + static_cast<int64_t>(order[static_cast<size_t>(i)]) * E,
                  emb.data<float>() + (i - s) * E, sizeof(float) * static_cast<size_t>(E));
    }
  }
  *embeddings = std::move(out).value();
  return Status::Ok();
}

void BertModel::LinearNorm(float* sum, const float* in, int64_t k, const ops::PackedMatrix& w,
                           ops::LinearEpilogue ep, const float* gamma, const float* beta,
                           float* out, int64_t rows, ThreadPool& pool) const {
  const int64_t E = cfg_.hidden;
  if (!fuse_norm_) {
    ops::Linear(sum, E, in, k, w, ep, rows, pool);
    ops::LayerNorm(out, E, sum, E, gamma, beta, cfg_.layer_norm_eps, rows, E, pool);
    return;
  }
  ep.norm_gamma = gamma;
  ep.norm_beta = beta;
  ep.norm_eps = cfg_.layer_norm_eps;
  ep.norm_out = out;
  ep.ld_norm_out = E;
  ops::Linear(sum, E, in, k, w, ep, rows, pool);
}

Status BertModel::Forward(const std::vector<std::vector<int32_t>>& ids, Tensor* embeddings,
                          Tensor* hidden, std::vector<Tensor>* states,
                          const StageCapture& capture) {
  const int64_t B = static_cast<int64_t>(ids.size());
  const int64_t E = cfg_.hidden, H = cfg_.num_heads, Dh = E / H, F = cfg_.intermediate;
  int64_t L = 0, T = 0;
  std::vector<int64_t> lens(static_cast<size_t>(B)), offs(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const auto& seq = ids[static_cast<size_t>(b)];
    if (seq.empty()) {
      return InvalidArgument("bert: sequence " + std::to_string(b) + " is empty");
    }
    if (static_cast<int64_t>(seq.size()) > cfg_.max_positions) {
      return OutOfRange("bert: sequence " + std::to_string(b) + " has " +
                        std::to_string(seq.size()) + " tokens, more than max_positions " +
                        std::to_string(cfg_.max_positions));
    }
    for (size_t i = 0; i < seq.size(); ++i) {
      if (seq[i] < 0 || seq[i] >= cfg_.vocab_size) {
        return OutOfRange("bert: sequence " + std::to_string(b) + " token " +
                          std::to_string(i) + " has id " + std::to_string(seq[i]) +
                          " outside [0, " + std::to_string(cfg_.vocab_size) + ")");
      }
    }
    lens[static_cast<size_t>(b)] = static_cast<int64_t>(seq.size());
    offs[static_cast<size_t>(b)] = T;
    T += static_cast<int64_t>(seq.size());
    L = std::max<int64_t>(L, static_cast<int64_t>(seq.size()));
  }
  if (capture.sink != nullptr && capture.layer != kCaptureAllLayers &&
      (capture.layer < 0 || capture.layer >= cfg_.num_layers)) {
    return OutOfRange("bert: capture layer " + std::to_string(capture.layer) +
                      " is outside [0, " + std::to_string(cfg_.num_layers) + ")");
  }
  // Packed token rows [T, *] for everything row-wise; padded [B*L, *] only
  // around attention (padded rows stay zero: masked keys, ignored queries).
  const bool padded = T != B * L;
  Result<Tensor> x_t = Alloc({T, E}), tmp_t = Alloc({T, E}), ctx_t = Alloc({T, E}),
                 qkv_t = Alloc({T, 3 * E}), ffn_t = Alloc({T, F}),
                 qkv_pad_t = Alloc({padded ? B * L : 0, 3 * E}),
                 ctx_pad_t = Alloc({padded ? B * L : 0, E});
  for (const auto* r : {&x_t, &tmp_t, &ctx_t, &qkv_t, &ffn_t, &qkv_pad_t, &ctx_pad_t}) {
    if (!r->ok()) return r->status();
  }
  float* x = x_t->data<float>();
  float* tmp = tmp_t->data<float>();
  float* ctx = ctx_t->data<float>();
  float* qkv = qkv_t->data<float>();
  float* ffn = ffn_t->data<float>();
  float* qkv_pad = padded ? qkv_pad_t->data<float>() : qkv;
  float* ctx_pad = padded ? ctx_pad_t->data<float>() : ctx;

  // Packed rows [T, w] <-> padded rows [B*L, w] (padding rows untouched).
  auto to_padded = [&](float* dst, const float* src, int64_t w) {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(dst + b * L * w, src + offs[static_cast<size_t>(b)] * w,
                  sizeof(float) * static_cast<size_t>(lens[static_cast<size_t>(b)] * w));
    }
  };
  auto to_packed = [&](float* dst, const float* src, int64_t w) {
    for (int64_t b = 0; b < B; ++b) {
      std::memcpy(dst + offs[static_cast<size_t>(b)] * w, src + b * L * w,
                  sizeof(float) * static_cast<size_t>(lens[static_cast<size_t>(b)] * w));
    }
  };
  // [B, L, E] with zero padding rows (outputs, states, captured stages).
  auto padded_copy = [&](const float* src) -> Result<Tensor> {
    Result<Tensor> t = Alloc({B, L, E});
    if (t.ok()) to_padded(t->data<float>(), src, E);
    return t;
  };
  StageSink* sink = capture.sink;  // model-level stages; a layer's go to lsink
  StageSink* lsink = nullptr;
  auto put_to = [&](StageSink* to, const char* name, const float* packed) {
    if (to == nullptr || !to->Wants(name)) return;
    Result<Tensor> t = padded_copy(packed);
    if (t.ok()) to->Put(name, t->view());
  };
  auto put = [&](const char* name, const float* packed) { put_to(lsink, name, packed); };
  if (states != nullptr) states->clear();
  auto keep_state = [&]() -> Status {
    if (states == nullptr) return Status::Ok();
    Result<Tensor> s = padded_copy(x);
    if (!s.ok()) return s.status();
    states->push_back(std::move(s).value());
    return Status::Ok();
  };

  // Embeddings: word + position + token type 0, then LayerNorm.
  ThreadPool& pool = DefaultPool();
  for (int64_t b = 0; b < B; ++b) {
    const auto& seq = ids[static_cast<size_t>(b)];
    float* t = tmp + offs[static_cast<size_t>(b)] * E;
    const int64_t n = lens[static_cast<size_t>(b)];
    ATTNFLOW_RETURN_IF_ERROR(ops::EmbeddingLookup(t, E, seq.data(), word_table_, n));
    ops::Add(t, t, pos_, n * E, pool);  // positions 0..n-1 are rows 0..n-1
    for (int64_t i = 0; i < n; ++i) ops::Add(t + i * E, t + i * E, type_, E, pool);
  }
  ops::LayerNorm(x, E, tmp, E, emb_ln_g_, emb_ln_b_, cfg_.layer_norm_eps, T, E, pool);
  put_to(sink, "embed", x);
  ATTNFLOW_RETURN_IF_ERROR(keep_state());

  const TensorView kv_lens = MakeView(lens.data(), DType::kI64, {B});
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const BertLayer& W = layers_[static_cast<size_t>(l)];
    const bool cap =
        sink != nullptr && (capture.layer == kCaptureAllLayers || l == capture.layer);
    PrefixSink prefixed(sink, "layer." + std::to_string(l) + ".");
    lsink = !cap ? nullptr : capture.layer == kCaptureAllLayers ? &prefixed : sink;
    // Q|K|V = x · Wqkvᵀ + b            [T, 3E]
    ops::Linear(qkv, 3 * E, x, E, W.w_qkv, {.bias = W.b_qkv}, T, pool);
    if (padded) to_padded(qkv_pad, qkv, 3 * E);
    // Zero-copy head split: [B,L,3E] viewed as [B,H,L,Dh].
    const Shape qkv_strides = {L * 3 * E, Dh, 3 * E, 1};
    const TensorView q = MakeStridedView(qkv_pad, DType::kF32, {B, H, L, Dh}, qkv_strides);
    const TensorView k = MakeStridedView(qkv_pad + E, DType::kF32, {B, H, L, Dh}, qkv_strides);
    const TensorView v = MakeStridedView(qkv_pad + 2 * E, DType::kF32, {B, H, L, Dh}, qkv_strides);
    const TensorView out =
        MakeStridedView(ctx_pad, DType::kF32, {B, H, L, Dh}, {L * E, Dh, E, 1});
    SdpaOptions opt;
    opt.kv_lens = kv_lens;
    if (reference_attention_) {
      ATTNFLOW_RETURN_IF_ERROR(reference::Sdpa(out, TensorView{}, q, k, v, opt));
    } else {
      ATTNFLOW_RETURN_IF_ERROR(Attention(out, TensorView{}, q, k, v, opt));
    }
    if (cap) {
      for (auto [name, view] : {std::pair<const char*, const TensorView*>{"q", &q},
                                {"k", &k}, {"v", &v}, {"heads_out", &out}}) {
        if (lsink->Wants(name)) lsink->Put(name, *view);
      }
      // The score stages from the float64 reference on the same q, k, v
      // (its own "out" is dropped: heads_out is the layer's).
      RenamingSink scores(lsink, [](std::string_view st) {
        return st == "out" ? std::string_view() : st;
      });
      bool want = false;
      for (const char* st : {"scores", "scaled", "masked", "weights", "lse"})
        want = want || lsink->Wants(st);
      if (want) ATTNFLOW_RETURN_IF_ERROR(reference::Sdpa(TensorView{}, TensorView{}, q, k, v, opt, &scores));
    }
    if (padded) to_packed(ctx, ctx_pad, E);
    if (cap) put("concat", ctx);
    // Attention output dense + bias + residual + LayerNorm 1, fused into the
    // GEMM's parallel region (the norm reads the stored sum tmp and writes
    // x; bit-identical to the composed pair, ops.h LinearEpilogue). The
    // captured layer keeps "out" before the residual: composed there, and
    // where fuse_norm_ is off (tests compare the two).
    const ops::LinearEpilogue o_ep = {.bias = W.b_o, .residual = x, .ld_residual = E};
    if (cap) {
      ops::Linear(tmp, E, ctx, E, W.w_o, {.bias = W.b_o}, T, pool);
      put("out", tmp);
      ops::Add(tmp, tmp, x, T * E, pool);
      put("residual", tmp);
      ops::LayerNorm(x, E, tmp, E, W.ln1_g, W.ln1_b, cfg_.layer_norm_eps, T, E, pool);
    } else {
      LinearNorm(tmp, ctx, E, W.w_o, o_ep, W.ln1_g, W.ln1_b, x, T, pool);
    }
    if (cap) put("norm", x);
    // FFN: W2 · gelu(W1 · x + b1) + b2 + residual, LayerNorm 2 (fused the
    // same way).
    ops::Linear(ffn, F, x, E, W.w_1, {.bias = W.b_1, .act = ops::Activation::kGeluErf}, T, pool);
    const ops::LinearEpilogue f_ep = {.bias = W.b_2, .residual = x, .ld_residual = E};
    if (cap) {
      ops::Linear(tmp, E, ffn, F, W.w_2, {.bias = W.b_2}, T, pool);
      put("ffn", tmp);
      ops::Add(tmp, tmp, x, T * E, pool);
      ops::LayerNorm(x, E, tmp, E, W.ln2_g, W.ln2_b, cfg_.layer_norm_eps, T, E, pool);
    } else {
      LinearNorm(tmp, ffn, F, W.w_2, f_ep, W.ln2_g, W.ln2_b, x, T, pool);
    }
    if (cap) put("block_out", x);
    ATTNFLOW_RETURN_IF_ERROR(keep_state());
  }

  if (embeddings != nullptr) {
    // Mean over real tokens, then x / max(||x||, 1e-12) (torch F.normalize).
    Result<Tensor> emb = Alloc({B, E});
    if (!emb.ok()) return emb.status();
    std::vector<double> acc(static_cast<size_t>(E));
    for (int64_t b = 0; b < B; ++b) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const int64_t n = lens[static_cast<size_t>(b)];
      for (int64_t i = 0; i < n; ++i) {
        const float* xr = x + (offs[static_cast<size_t>(b)] + i) * E;
        for (int64_t e = 0; e < E; ++e) acc[static_cast<size_t>(e)] += xr[e];
      }
      double norm2 = 0;
      for (double& a : acc) {
        a /= static_cast<double>(n);
        norm2 += a * a;
      }
      const double inv = 1.0 / std::max(std::sqrt(norm2), 1e-12);
      float* o = emb->data<float>() + b * E;
      for (int64_t e = 0; e < E; ++e) o[e] = static_cast<float>(acc[static_cast<size_t>(e)] * inv);
    }
    *embeddings = std::move(emb).value();
  }
  if (hidden != nullptr) {
    Result<Tensor> h = padded_copy(x);
    if (!h.ok()) return h.status();
    *hidden = std::move(h).value();
  }
  return Status::Ok();
}

}  // namespace attnflow::bert
