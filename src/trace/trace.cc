// trace.cc — building traces: the toy post-norm block (float64), a sentence
// through an EncoderModel, a prompt (+ greedy decode steps) through a
// DecoderModel, and the fast-kernel cross-check.
//
// The toy's attention is reference::Mha with a stage recorder; its decode
// steps project only the new token (same float64 summation order as the
// reference projection), append its key/value to the cache and run
// reference::Sdpa for the single new query row (causal bottom_right). The
// block around attention (residual, LayerNorm, ReLU FFN) is written out here
// in float64 because it is the toy's definition (see trace.h).
// Models are used only through attnflow/model.h (LoadModel, EncoderModel,
// DecoderModel with StageCapture).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

#include "attnflow/nn.h"
#include "attnflow/reference.h"
#include "attnflow/kernels.h"
#include "attnflow/trace.h"
#include "core/utf8.h"
#include "trace/internal.h"

namespace attnflow::trace {

// ---------------------------------------------------------------------------
// Small shared pieces.
// ---------------------------------------------------------------------------

const std::vector<std::string>& TraceStageOrder() {
  static const std::vector<std::string> kOrder = {
      "tok_embed", "pos",       "embed",  "layer_in", "q",         "k",
      "v",         "scores",    "scaled", "masked",   "weights",   "lse",
      "heads_out", "concat",    "out",    "residual", "norm",      "ffn_norm",
      "ffn_hidden", "ffn",      "residual2", "block_out"};
  return kOrder;
}

const Tensor* Trace::Find(std::string_view name) const {
  return internal::FindIn(stages, name);
}
const Tensor* DecodeStep::Find(std::string_view name) const {
  return internal::FindIn(stages, name);
}

namespace internal {

const Tensor* FindIn(const std::vector<NamedTensor>& v, std::string_view name) {
  for (const auto& s : v)
    if (s.name == name) return &s.value;
  return nullptr;
}

void Collector::Put(std::string_view stage, const TensorView& value) {
  Result<Tensor> copy = Tensor::FromView(value);
  if (!copy.ok()) {
    if (status_.ok()) status_ = copy.status();
    return;
  }
  std::string name(stage);
  if (!rename_from_.empty() && name == rename_from_) name = rename_to_;
  for (auto& it : items_) {
    if (it.name == name) {
      it.value = std::move(copy).value();
      return;
    }
  }
  items_.push_back({std::move(name), std::move(copy).value()});
}

void Collector::MoveOrdered(std::vector<NamedTensor>* out) {
  std::vector<bool> used(items_.size(), false);
  for (const auto& name : TraceStageOrder()) {
    for (size_t i = 0; i < items_.size(); ++i) {
      if (!used[i] && items_[i].name == name) {
        out->push_back(std::move(items_[i]));
        used[i] = true;
      }
    }
  }
  for (size_t i = 0; i < items_.size(); ++i)
    if (!used[i]) out->push_back(std::move(items_[i]));
  items_.clear();
}

Result<Tensor> ViewToF32(const TensorView& v) {
  Result<Tensor> r = Tensor::Zeros(DType::kF32, Shape(v.shape.begin(), v.shape.begin() + v.rank));
  if (!r.ok()) return r.status();
  float* dst = r->data<float>();
  const int64_t n = v.numel();
  if (v.dtype == DType::kF64 && v.is_contiguous()) {
    const double* src = static_cast<const double*>(v.data);
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
    return r;
  }
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    dst[e] = static_cast<float>(v.load(v.offset(idx[0], idx[1], idx[2], idx[3])));
    for (int d = v.rank - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

Result<Tensor> ToF32(const Tensor& t) {
  Result<Tensor> r = Tensor::Zeros(DType::kF32, t.shape());
  if (!r.ok()) return r.status();
  const int64_t n = t.numel();
  float* dst = r->data<float>();
  if (t.dtype() == DType::kF64) {  // the reference's stages: one pass over the doubles
    const double* src = t.data<double>();
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
    return r;
  }
  const TensorView v = t.view();
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(v.load(i));
  return r;
}

KernelCheck RunKernelCheck(const Tensor* q, const Tensor* k, const Tensor* v,
                           Causal causal, double scale, const Tensor* heads_out,
                           const Tensor* lse, const Tensor* masked,
                           const Tensor* weights, const Tensor* kv_lens) {
  KernelCheck kc;
  if (q == nullptr || k == nullptr || v == nullptr || heads_out == nullptr ||
      q->rank() != 4 || k->rank() != 4 || v->rank() != 4) {
    kc.note = "q, k, v or heads_out was not captured";
    return kc;
  }
  Result<Tensor> q32 = ToF32(*q), k32 = ToF32(*k), v32 = ToF32(*v);
  const Shape qs = q->shape();
  Result<Tensor> out = Tensor::Zeros(DType::kF32, {qs[0], qs[1], qs[2], v->shape()[3]});
  Result<Tensor> l32 = Tensor::Zeros(DType::kF32, {qs[0], qs[1], qs[2]});
  for (const auto* r : {&q32, &k32, &v32, &out, &l32}) {
    if (!r->ok()) {
      kc.note = r->status().ToString();
      return kc;
    }
  }
  SdpaOptions opt;
  opt.causal = causal;
  opt.scale = scale;
  if (kv_lens != nullptr) opt.kv_lens = kv_lens->view();
  KernelChoice choice;
  Status st = Attention(out->view(), l32->view(), q32->view(), k32->view(), v32->view(), opt,
                        KernelOptions{}, &choice);
  if (!st.ok()) {
    kc.note = st.ToString();
    return kc;
  }
  kc.ran = true;
  kc.kernel = choice.ToString();
  if (heads_out->numel() == out->numel()) {
    for (int64_t i = 0; i < out->numel(); ++i)
      kc.max_abs_out = std::max(kc.max_abs_out, std::fabs(Elem(out.value(), i) - Elem(*heads_out, i)));
  }
  if (lse != nullptr && lse->numel() == l32->numel()) {
    for (int64_t i = 0; i < l32->numel(); ++i) {
      const double a = Elem(l32.value(), i), b = Elem(*lse, i);
      if (std::isinf(a) || std::isinf(b)) {
        if (a != b) kc.max_abs_lse = std::numeric_limits<double>::infinity();
      } else {
        kc.max_abs_lse = std::max(kc.max_abs_lse, std::fabs(a - b));
      }
    }
  }
  if (masked != nullptr && weights != nullptr && masked->numel() == weights->numel() &&
      masked->rank() == 4) {
    const int64_t lk = masked->shape()[3];
    for (int64_t i = 0; i < masked->numel(); ++i) {
      const double row_lse = Elem(l32.value(), i / lk), m = Elem(*masked, i);
      const double w = (std::isfinite(row_lse) && std::isfinite(m)) ? std::exp(m - row_lse) : 0.0;
      kc.max_abs_weights = std::max(kc.max_abs_weights, std::fabs(w - Elem(*weights, i)));
    }
  }
  return kc;
}

}  // namespace internal

namespace {

using internal::Collector;

Result<Tensor> F64(const Shape& s) { return Tensor::Zeros(DType::kF64, s); }

Status CheckRange(const char* what, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    return OutOfRange(std::string("trace: ") + what + " = " + std::to_string(v) +
                      " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return Status::Ok();
}

// Decode steps of the toy: one new row at a time against the KV cache.
Status ToyDecode(const ToyBlock& blk, const Tensor& k_prefill, const Tensor& v_prefill,
                 int64_t first_pos, int64_t steps, double scale, Trace* t) {
  constexpr int64_t E = kToyEmbed, H = kToyHeads, Dh = kToyHeadDim;
  Result<Tensor> kc = Tensor::FromView(k_prefill.view());
  Result<Tensor> vc = Tensor::FromView(v_prefill.view());
  if (!kc.ok()) return kc.status();
  if (!vc.ok()) return vc.status();
  Tensor k_cache = std::move(kc).value(), v_cache = std::move(vc).value();
  std::vector<double> tok(E), pos(E), x(E);
  for (int64_t s = 0; s < steps; ++s) {
    const int64_t p = first_pos + s;  // position of the new token
    ToyInput(p, tok.data(), pos.data());
    for (int64_t i = 0; i < E; ++i) x[i] = tok[i] + pos[i];
    Result<Tensor> q = F64({1, H, 1, Dh}), kn = F64({1, H, p + 1, Dh}), vn = F64({1, H, p + 1, Dh});
    for (const auto* r : {&q, &kn, &vn})
      if (!r->ok()) return r->status();
    // Cached rows are copied, the new row is projected (only this token).
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(k_cache.data<double>() + h * p * Dh, p * Dh, kn->data<double>() + h * (p + 1) * Dh);
      std::copy_n(v_cache.data<double>() + h * p * Dh, p * Dh, vn->data<double>() + h * (p + 1) * Dh);
      for (int64_t d = 0; d < Dh; ++d) {
        const int64_t r = h * Dh + d;
        double aq = 0.0, ak = 0.0, av = 0.0;
        for (int64_t c = 0; c < E; ++c) {
          aq += x[c] * blk.w_q.data<double>()[r * E + c];
          ak += x[c] * blk.w_k.data<double>()[r * E + c];
          av += x[c] * blk.w_v.data<double>()[r * E + c];
        }
        q->data<double>()[h * Dh + d] = aq;
        kn->data<double>()[(h * (p + 1) + p) * Dh + d] = ak;
        vn->data<double>()[(h * (p + 1) + p) * Dh + d] = av;
      }
    }
    k_cache = std::move(kn).value();
    v_cache = std::move(vn).value();
    SdpaOptions opt;
    opt.causal = Causal::kBottomRight;  // the new query is the last position
    opt.scale = scale;
    Collector rec("out", "heads_out");
    Result<Tensor> out = F64({1, H, 1, Dh});
    if (!out.ok()) return out.status();
    ATTNFLOW_RETURN_IF_ERROR(reference::Sdpa(out->view(), TensorView(), q->view(),
                                             k_cache.view(), v_cache.view(), opt, &rec));
    ATTNFLOW_RETURN_IF_ERROR(rec.status());
    DecodeStep step;
    step.token = ToyToken(p);
    step.position = p;
    step.stages.push_back({"q", std::move(q).value()});
    Result<Tensor> kcopy = Tensor::FromView(k_cache.view());
    Result<Tensor> vcopy = Tensor::FromView(v_cache.view());
    if (!kcopy.ok()) return kcopy.status();
    if (!vcopy.ok()) return vcopy.status();
    step.stages.push_back({"k", std::move(kcopy).value()});
    step.stages.push_back({"v", std::move(vcopy).value()});
    rec.MoveOrdered(&step.stages);
    step.kernel = internal::RunKernelCheck(step.Find("q"), step.Find("k"), step.Find("v"),
                                           Causal::kBottomRight, scale, step.Find("heads_out"),
                                           step.Find("lse"), step.Find("masked"),
                                           step.Find("weights"));
    t->decode.push_back(std::move(step));
  }
  return Status::Ok();
}

int32_t ArgMax(const Tensor& logits) {
  const int64_t n = logits.shape().back();
  const int64_t base = logits.numel() - n;  // last row
  int64_t best = 0;
  double bv = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const double x = internal::Elem(logits, base + i);
    if (x > bv) {
      bv = x;
      best = i;
    }
  }
  return static_cast<int32_t>(best);
}

void FillModelInfo(const Model& m, Trace* t) {
  t->info = m.info();
  if (t->info.num_kv_heads == 0) t->info.num_kv_heads = t->info.num_heads;
  if (t->info.head_dim == 0 && t->info.num_heads > 0)
    t->info.head_dim = t->info.hidden / t->info.num_heads;
  t->scale = DefaultScale(t->info.head_dim);
  if (t->info.architecture == "bert") {
    t->norm = "post";
    t->ffn_activation = "gelu";
  } else if (t->info.architecture == "llama") {
    t->norm = "pre";
    t->ffn_activation = "swiglu";
  }
}

std::vector<TraceToken> TokensOf(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<TraceToken> out;
  out.reserve(ids.size());
  for (int32_t id : ids) out.push_back({id, tok.TokenText(id), tok.TokenBytes(id)});
  return out;
}

}  // namespace

std::string ShownToken(const TraceToken& t) {
  const std::string& s = t.bytes.empty() ? t.text : t.bytes;
  std::string out;
  for (size_t i = 0; i < s.size();) {
    char32_t cp = 0;
    const int n = utf8::DecodeOne(s, i, &cp);
    if (n == 0 || (cp < 0x20 && cp != '\n' && cp != '\t') || cp == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += b;
      ++i;
      continue;
    }
    if (cp == ' ') out += "\u2423";        // ␣
    else if (cp == '\n') out += "\u21b5";  // ↵
    else if (cp == '\t') out += "\u21e5";  // ⇥
    else out.append(s, i, static_cast<size_t>(n));
    i += static_cast<size_t>(n);
  }
  return out;
}

// ---------------------------------------------------------------------------
// The toy.
// ---------------------------------------------------------------------------

Result<Trace> TraceToy(const ToyOptions& o) {
  ATTNFLOW_RETURN_IF_ERROR(CheckRange("toy tokens", o.num_tokens, 1, kMaxToyTokens));
  ATTNFLOW_RETURN_IF_ERROR(CheckRange("decode steps", o.decode_steps, 0, 1024));
  ATTNFLOW_RETURN_IF_ERROR(CheckRange("pad keys", o.pad, 0, kMaxToyTokens - o.num_tokens));
  if (o.pad > 0 && o.decode_steps > 0) {
    return InvalidArgument("trace: a padded toy has no decode steps (the cache would hold pad "
                           "keys between the prompt and the new tokens); drop --pad or "
                           "--decode-steps");
  }
  constexpr int64_t E = kToyEmbed, H = kToyHeads, F = kToyFfn;
  const int64_t L = o.num_tokens + o.pad;  // real tokens, then the pad keys
  Result<ToyBlock> blk_r = MakeToyBlock();
  if (!blk_r.ok()) return blk_r.status();
  const ToyBlock& blk = blk_r.value();

  Trace t;
  t.source = "toy";
  t.info.name = "toy";
  t.info.architecture = "toy post-norm block";
  t.info.num_layers = 1;
  t.info.hidden = E;
  t.info.num_heads = H;
  t.info.num_kv_heads = H;
  t.info.head_dim = kToyHeadDim;
  t.info.ffn_hidden = F;
  t.info.vocab_size = 16;
  t.info.weight_dtype = "F64";
  t.norm = "post";
  t.ffn_activation = "relu";
  t.causal = o.causal;
  t.scale = DefaultScale(kToyHeadDim);
  t.description =
      "The four-token toy of `attnflow demo` (frozen weights, float64): post-norm block "
      "LayerNorm(x + MHA(x)) -> ReLU FFN -> LayerNorm(. + FFN)";
  for (int64_t i = 0; i < o.num_tokens; ++i) t.tokens.push_back(ToyToken(i));
  for (int64_t i = o.num_tokens; i < L; ++i) {
    t.tokens.push_back({kToyPadId, "<pad>"});
    t.pad_keys.push_back(i);
  }
  // Key padding: keys j >= kv_lens[0] = num_tokens are masked (semantics.h).
  Result<Tensor> kv_lens = Tensor::Zeros(DType::kI64, {1});
  if (!kv_lens.ok()) return kv_lens.status();
  kv_lens->data<int64_t>()[0] = o.num_tokens;
  if (o.pad > 0) {
    t.pad_kv_len = o.num_tokens;
    t.info.vocab_size = kToyPadId + 1;
    t.description += "; " + std::to_string(o.pad) + " <pad> key" + (o.pad > 1 ? "s" : "") +
                     " appended, masked by the key-padding mask kv_lens = " +
                     std::to_string(o.num_tokens);
  }

  Result<Tensor> tok = F64({1, L, E}), pos = F64({1, L, E}), x = F64({1, L, E});
  for (const auto* r : {&tok, &pos, &x})
    if (!r->ok()) return r->status();
  for (int64_t i = 0; i < L; ++i) {
    if (i < o.num_tokens) ToyInput(i, tok->data<double>() + i * E, pos->data<double>() + i * E);
    else ToyPadInput(i, tok->data<double>() + i * E, pos->data<double>() + i * E);
    for (int64_t c = 0; c < E; ++c)
      x->data<double>()[i * E + c] = tok->data<double>()[i * E + c] + pos->data<double>()[i * E + c];
  }

  // Attention: the float64 reference with its stage recorder.
  reference::MhaWeights w;
  w.w_q = blk.w_q.view();
  w.w_k = blk.w_k.view();
  w.w_v = blk.w_v.view();
  w.w_o = blk.w_o.view();
  w.num_heads = H;
  SdpaOptions sopt;
  sopt.causal = o.causal;
  if (o.pad > 0) sopt.kv_lens = kv_lens->view();
  Collector rec;
  Result<Tensor> attn = F64({1, L, E});
  if (!attn.ok()) return attn.status();
  ATTNFLOW_RETURN_IF_ERROR(
      reference::Mha(attn->view(), x->view(), x->view(), x->view(), w, sopt, &rec));
  ATTNFLOW_RETURN_IF_ERROR(rec.status());

  // Golden-case inputs, F64 like the stages computed from them (rounding
  // them to F32 would store stages of other inputs: the stored inputs must
  // reproduce the stored stages).
  for (const auto& [name, src] : {std::pair<const char*, const Tensor*>{"x_q", &x.value()},
                                  {"x_k", &x.value()}, {"x_v", &x.value()},
                                  {"w_q", &blk.w_q}, {"w_k", &blk.w_k},
                                  {"w_v", &blk.w_v}, {"w_o", &blk.w_o}}) {
    Result<Tensor> c = Tensor::FromView(src->view());
    if (!c.ok()) return c.status();
    t.inputs.push_back({name, std::move(c).value()});
  }
  if (o.pad > 0) t.inputs.push_back({"kv_lens", std::move(kv_lens).value()});

  // The block around attention, float64.
  Result<Tensor> residual = F64({1, L, E}), norm = F64({1, L, E}), hidden = F64({1, L, F}),
                 ffn = F64({1, L, E}), residual2 = F64({1, L, E}), block = F64({1, L, E});
  for (const auto* r : {&residual, &norm, &hidden, &ffn, &residual2, &block})
    if (!r->ok()) return r->status();
  const double* xa = x->data<double>();
  const double* aa = attn->data<double>();
  for (int64_t i = 0; i < L * E; ++i) residual->data<double>()[i] = xa[i] + aa[i];
  // The block's float64 layers are nn's (the oracles of the ops).
  const nn::NormWeights ln1{blk.ln1_g.view(), blk.ln1_b.view()}, ln2{blk.ln2_g.view(), blk.ln2_b.view()};
  ATTNFLOW_RETURN_IF_ERROR(nn::Norm(norm->view(), residual->view(), ln1, nn::NormKind::kLayerNorm, kToyLayerNormEps));
  ATTNFLOW_RETURN_IF_ERROR(nn::LinearLayer(hidden->view(), norm->view(), blk.w_1.view(), blk.b_1.view()));
  ATTNFLOW_RETURN_IF_ERROR(nn::Activate(hidden->view(), hidden->view(), nn::Activation::kRelu));
  ATTNFLOW_RETURN_IF_ERROR(nn::LinearLayer(ffn->view(), hidden->view(), blk.w_2.view(), blk.b_2.view()));
  for (int64_t i = 0; i < L * E; ++i)
    residual2->data<double>()[i] = norm->data<double>()[i] + ffn->data<double>()[i];
  ATTNFLOW_RETURN_IF_ERROR(nn::Norm(block->view(), residual2->view(), ln2, nn::NormKind::kLayerNorm, kToyLayerNormEps));

  Result<Tensor> embed = Tensor::FromView(x->view());
  if (!embed.ok()) return embed.status();
  rec.items().push_back({"tok_embed", std::move(tok).value()});
  rec.items().push_back({"pos", std::move(pos).value()});
  rec.items().push_back({"embed", std::move(embed).value()});
  rec.items().push_back({"residual", std::move(residual).value()});
  rec.items().push_back({"norm", std::move(norm).value()});
  rec.items().push_back({"ffn_hidden", std::move(hidden).value()});
  rec.items().push_back({"ffn", std::move(ffn).value()});
  rec.items().push_back({"residual2", std::move(residual2).value()});
  rec.items().push_back({"block_out", std::move(block).value()});
  rec.MoveOrdered(&t.stages);

  t.kernel = internal::RunKernelCheck(t.Find("q"), t.Find("k"), t.Find("v"), o.causal, t.scale,
                                      t.Find("heads_out"), t.Find("lse"), t.Find("masked"),
                                      t.Find("weights"), internal::FindIn(t.inputs, "kv_lens"));
  if (o.decode_steps > 0) {
    if (o.causal == Causal::kNone) {
      return InvalidArgument(
          "trace: decode steps need a causal toy (a decoder's cache holds only past tokens); "
          "use causal top_left or bottom_right");
    }
    ATTNFLOW_RETURN_IF_ERROR(ToyDecode(blk, *t.Find("k"), *t.Find("v"), L, o.decode_steps,
                                       t.scale, &t));
  }
  if (o.all_layers) {  // the toy has one layer: the view holds it
    ATTNFLOW_RETURN_IF_ERROR(internal::AddLayersView({t.Find("weights")}, t.tokens, t.causal, &t));
  }
  return t;
}

// ---------------------------------------------------------------------------
// Real models.
// ---------------------------------------------------------------------------

namespace {

// Every layer of one forward pass (StageCapture kCaptureAllLayers), kept as
// the trace needs it: the traced layer whole (the page's pipeline), each
// layer's weights (the "layers" view), the block output of the layer before
// the traced one (its layer_in), and with `keep` every stage of every layer
// (the all-layer dump; the score-row stages only when `keep_rows`). Layers
// other than the traced one are stored as float32. Items stay in arrival
// order, which is the dataflow order.
class LayerCapture : public StageSink {
 public:
  // layer_in: report the block output of the layer before the traced one
  // as its "layer_in" (the encoders' page shows it; a pre-norm decoder's
  // pipeline starts at its norm).
  LayerCapture(int64_t traced, bool view, bool keep, bool keep_rows, bool layer_in)
      : traced_(traced), view_(view), keep_(keep), keep_rows_(keep_rows), layer_in_(layer_in) {}

  bool Wants(std::string_view name) const override {
    int64_t l = -1;
    std::string_view st = Split(name, &l);
    if (l < 0) return st == "embed" || keep_;  // model level: embed, final_norm, logits
    if (l == traced_) return true;
    if (st == "weights") return view_ || keep_;
    if (layer_in_ && l == traced_ - 1 && st == "block_out") return true;
    if (st == "scores" || st == "scaled" || st == "masked" || st == "lse") return keep_ && keep_rows_;
    return keep_;
  }
  void Put(std::string_view name, const TensorView& value) override {
    int64_t l = -1;
    Split(name, &l);
    // Other layers' float64 stages are kept as float32 (half the memory).
    const bool narrow = l >= 0 && l != traced_ && value.dtype == DType::kF64;
    Result<Tensor> copy = narrow ? internal::ViewToF32(value) : Tensor::FromView(value);
    if (!copy.ok()) {
      if (status_.ok()) status_ = copy.status();
      return;
    }
    items_.push_back({std::string(name), std::move(copy).value()});
  }
  const Status& status() const { return status_; }

  // The traced layer's stages without their prefix (and `embed`, and
  // layer_in when the layer before was captured), in TraceStageOrder().
  Status PageStages(std::vector<NamedTensor>* out) const {
    Collector rec(Collector::Everything);
    const std::string pre = "layer." + std::to_string(traced_) + ".";
    const std::string before = "layer." + std::to_string(traced_ - 1) + ".block_out";
    for (const NamedTensor& it : items_) {
      if (it.name == "embed") rec.Put("embed", it.value.view());
      else if (it.name.rfind(pre, 0) == 0) rec.Put(it.name.substr(pre.size()), it.value.view());
      else if (layer_in_ && it.name == before) rec.Put("layer_in", it.value.view());
    }
    ATTNFLOW_RETURN_IF_ERROR(rec.status());
    rec.MoveOrdered(out);
    return Status::Ok();
  }
  // Layer l's weights (nullptr if not captured).
  const Tensor* Weights(int64_t l) const {
    return internal::FindIn(items_, "layer." + std::to_string(l) + ".weights");
  }
  // Every kept stage, in dataflow order (moved out).
  std::vector<NamedTensor> TakeAll() { return std::move(items_); }

 private:
  // "layer.<l>.<stage>" -> stage, *l = l; any other name -> itself, *l = -1.
  static std::string_view Split(std::string_view name, int64_t* l) {
    *l = -1;
    if (name.rfind("layer.", 0) != 0) return name;
    const size_t dot = name.find('.', 6);
    if (dot == std::string_view::npos) return name;
    int64_t v = 0;
    for (size_t i = 6; i < dot; ++i) {
      if (name[i] < '0' || name[i] > '9') return name;
      v = v * 10 + (name[i] - '0');
    }
    *l = v;
    return name.substr(dot + 1);
  }
  int64_t traced_;
  bool view_, keep_, keep_rows_, layer_in_;
  std::vector<NamedTensor> items_;
  Status status_;
};

// Whether every layer's score-row stages fit the trace's budget: 5 stages of
// H·Lq·Lk per layer (per decode step: 5·H·Lk).
bool KeepRows(const ModelInfo& info, const ModelTraceOptions& o, int64_t lq, int64_t lk) {
  const double rows = 5.0 * static_cast<double>(info.num_layers) *
                      static_cast<double>(info.num_heads) * static_cast<double>(lq) *
                      static_cast<double>(lk);
  return rows <= static_cast<double>(o.max_row_elements);
}

// The "layers" view from the weights every layer reported.
Status AddLayersViewFrom(const LayerCapture& cap, int64_t num_layers, Trace* t) {
  std::vector<const Tensor*> per;
  for (int64_t l = 0; l < num_layers; ++l) {
    const Tensor* w = cap.Weights(l);
    if (w == nullptr) return Unimplemented("trace: no weights for layer " + std::to_string(l));
    per.push_back(w);
  }
  return internal::AddLayersView(per, t->tokens, t->causal, t);
}

// One encoder pass over `ids` (one sequence, or a padded batch) with every
// layer captured as `cap` keeps it. Progress goes from 0 to the number of
// tokens.
Status CaptureEncoderPass(EncoderModel& model, const std::vector<std::vector<int32_t>>& ids,
                          const ModelTraceOptions& o, LayerCapture* cap) {
  Tensor emb, hidden;
  StageCapture sc;
  sc.sink = cap;
  sc.layer = kCaptureAllLayers;
  int64_t total = 0;
  for (const auto& v : ids) total += static_cast<int64_t>(v.size());
  if (o.progress) o.progress(0, total);
  ATTNFLOW_RETURN_IF_ERROR(model.Embed(ids, &emb, &hidden, sc));
  ATTNFLOW_RETURN_IF_ERROR(cap->status());
  if (o.progress) o.progress(total, total);
  return Status::Ok();
}

// The page's stages of `cap` into rec-ordered stages, checked.
Status FinishModelTrace(LayerCapture& cap, const std::string& model, int64_t layer, Trace* t) {
  ATTNFLOW_RETURN_IF_ERROR(cap.PageStages(&t->stages));
  if (t->Find("weights") == nullptr) {
    return Unimplemented("trace: " + model + " did not report attention weights for layer " +
                         std::to_string(layer) + " (StageCapture)");
  }
  t->kernel = internal::RunKernelCheck(t->Find("q"), t->Find("k"), t->Find("v"), t->causal,
                                       t->scale, t->Find("heads_out"), t->Find("lse"),
                                       t->Find("masked"), t->Find("weights"));
  return Status::Ok();
}

}  // namespace

Result<Trace> TraceEncoder(EncoderModel& model, std::string_view text,
                           const ModelTraceOptions& o) {
  const ModelInfo& info = model.info();
  ATTNFLOW_RETURN_IF_ERROR(CheckRange("layer", o.layer, 0, info.num_layers - 1));
  if (o.decode_steps != 0 || !o.decode_ids.empty()) {
    return InvalidArgument("trace: --decode-steps needs a decoder; " + info.name +
                           " is an encoder");
  }
  Result<std::vector<int32_t>> ids = model.tokenizer().Encode(text, /*add_special=*/true);
  if (!ids.ok()) return ids.status();
  Trace t;
  t.source = "encoder";
  FillModelInfo(model, &t);
  t.layer = o.layer;
  t.causal = Causal::kNone;
  t.description = "A sentence through " + info.name + " (encoder, bidirectional), layer " +
                  std::to_string(o.layer);
  t.tokens = TokensOf(model.tokenizer(), ids.value());
  const int64_t L = static_cast<int64_t>(ids->size());
  // One forward pass captures every layer the trace needs.
  LayerCapture cap(o.layer, o.all_layers, o.keep_layer_stages, KeepRows(info, o, L, L), true);
  ATTNFLOW_RETURN_IF_ERROR(CaptureEncoderPass(model, {ids.value()}, o, &cap));
  ATTNFLOW_RETURN_IF_ERROR(FinishModelTrace(cap, info.name, o.layer, &t));
  if (o.all_layers) ATTNFLOW_RETURN_IF_ERROR(AddLayersViewFrom(cap, info.num_layers, &t));
  if (o.keep_layer_stages) t.layer_stages = cap.TakeAll();
  return t;
}

namespace {

// Row b of a batch-first tensor [B, ...] as [1, ...] (a contiguous copy).
Result<Tensor> BatchRow(const Tensor& t, int64_t b, int64_t batch) {
  Shape sh = t.shape();
  if (sh.empty() || sh[0] != batch) {
    return Status(StatusCode::kInternal, "trace: a batch stage has leading dimension " +
                                             std::to_string(sh.empty() ? -1 : sh[0]) +
                                             ", expected " + std::to_string(batch));
  }
  sh[0] = 1;
  Result<Tensor> r = Tensor::Zeros(t.dtype(), sh);
  if (!r.ok()) return r.status();
  const size_t row = r->nbytes();
  std::memcpy(r->data<char>(), t.data<char>() + static_cast<size_t>(b) * row, row);
  return r;
}

// The tokenizer's "[PAD]" id (BERT vocabularies put it first); 0 if absent.
int32_t PadId(const Tokenizer& tok) {
  const int64_t n = std::min<int64_t>(tok.VocabSize(), 1024);
  for (int64_t i = 0; i < n; ++i)
    if (tok.TokenText(static_cast<int32_t>(i)) == "[PAD]") return static_cast<int32_t>(i);
  return 0;
}

}  // namespace

Result<std::vector<Trace>> TraceEncoderBatch(EncoderModel& model,
                                             const std::vector<std::string>& sentences,
                                             const ModelTraceOptions& o) {
  const ModelInfo& info = model.info();
  const int64_t B = static_cast<int64_t>(sentences.size());
  ATTNFLOW_RETURN_IF_ERROR(CheckRange("batch sentences", B, 2, kMaxBatchSentences));
  ATTNFLOW_RETURN_IF_ERROR(CheckRange("layer", o.layer, 0, info.num_layers - 1));
  if (o.decode_steps != 0) {
    return InvalidArgument("trace: --decode-steps needs a decoder; " + info.name +
                           " is an encoder");
  }
  if (o.all_layers || o.keep_layer_stages) {
    return InvalidArgument("trace: --all-layers traces one sentence; drop it or trace a "
                           "single sentence with --text");
  }
  if (!o.decode_ids.empty()) {
    return InvalidArgument("trace: decode tokens need a decoder; " + info.name +
                           " is an encoder");
  }
  std::vector<std::vector<int32_t>> ids;
  int64_t lmax = 0;
  for (const std::string& text : sentences) {
    Result<std::vector<int32_t>> r = model.tokenizer().Encode(text, /*add_special=*/true);
    if (!r.ok()) return r.status();
    lmax = std::max<int64_t>(lmax, static_cast<int64_t>(r->size()));
    ids.push_back(std::move(r).value());
  }
  // One padded forward pass, as sentence-transformers runs a batch.
  LayerCapture cap(o.layer, false, false, false, true);
  ATTNFLOW_RETURN_IF_ERROR(CaptureEncoderPass(model, ids, o, &cap));
  std::vector<NamedTensor> batch_stages;
  ATTNFLOW_RETURN_IF_ERROR(cap.PageStages(&batch_stages));
  const int32_t pad_id = PadId(model.tokenizer());
  std::vector<Trace> out;
  for (int64_t b = 0; b < B; ++b) {
    const auto& seq = ids[static_cast<size_t>(b)];
    const int64_t n = static_cast<int64_t>(seq.size());
    Trace t;
    t.source = "encoder";
    FillModelInfo(model, &t);
    t.layer = o.layer;
    t.causal = Causal::kNone;
    t.description = "Sentence " + std::to_string(b + 1) + " of a padded batch of " +
                    std::to_string(B) + " through " + info.name +
                    " (encoder, bidirectional; one forward pass, padded to " +
                    std::to_string(lmax) + " tokens, attention mask = kv_lens), layer " +
                    std::to_string(o.layer);
    t.tokens = TokensOf(model.tokenizer(), seq);
    for (int64_t j = n; j < lmax; ++j) {
      t.tokens.push_back({pad_id, "[PAD]"});
      t.pad_keys.push_back(j);
    }
    if (n < lmax) t.pad_kv_len = n;
    t.batch_index = b;
    t.batch_sentences = sentences;
    for (const NamedTensor& st : batch_stages) {
      Result<Tensor> row = BatchRow(st.value, b, B);
      if (!row.ok()) return row.status();
      t.stages.push_back({st.name, std::move(row).value()});
    }
    if (t.Find("weights") == nullptr) {
      return Unimplemented("trace: " + info.name + " did not report attention weights for layer " +
                           std::to_string(o.layer) + " (StageCapture)");
    }
    Result<Tensor> kv_lens = Tensor::Zeros(DType::kI64, {1});
    if (!kv_lens.ok()) return kv_lens.status();
    kv_lens->data<int64_t>()[0] = n;
    t.kernel = internal::RunKernelCheck(t.Find("q"), t.Find("k"), t.Find("v"), t.causal,
                                        t.scale, t.Find("heads_out"), t.Find("lse"),
                                        t.Find("masked"), t.Find("weights"), &kv_lens.value());
    out.push_back(std::move(t));
  }
  return out;
}

Result<Trace> TraceDecoder(DecoderModel& model, std::string_view prompt,
                           const ModelTraceOptions& o) {
  const ModelInfo& info = model.info();
  ATTNFLOW_RETURN_IF_ERROR(CheckRange("layer", o.layer, 0, info.num_layers - 1));
  ATTNFLOW_RETURN_IF_ERROR(CheckRange("decode steps", o.decode_steps, 0, 1024));
  if (!o.decode_ids.empty() && static_cast<int64_t>(o.decode_ids.size()) < o.decode_steps) {
    return InvalidArgument("trace: " + std::to_string(o.decode_steps) + " decode steps but only " +
                           std::to_string(o.decode_ids.size()) + " teacher-forced token ids");
  }
  for (int32_t id : o.decode_ids) {
    if (id < 0 || id >= info.vocab_size) {
      return OutOfRange("trace: teacher-forced token id " + std::to_string(id) +
                        " is outside the vocabulary [0, " + std::to_string(info.vocab_size) + ")");
    }
  }
  Result<std::vector<int32_t>> ids = model.tokenizer().Encode(prompt, /*add_special=*/true);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return InvalidArgument("trace: the prompt encodes to no tokens");
  Trace t;
  t.source = "decoder";
  FillModelInfo(model, &t);
  t.layer = o.layer;
  t.causal = Causal::kTopLeft;  // prefill from an empty cache
  t.description = "A prompt through " + info.name + " (decoder: causal prefill, then " +
                  std::to_string(o.decode_steps) + (o.decode_ids.empty() ? " greedy" : " teacher-forced") +
                  " decode steps), layer " + std::to_string(o.layer);
  t.tokens = TokensOf(model.tokenizer(), ids.value());
  model.Reset();
  const int64_t n = static_cast<int64_t>(ids->size()), total = n + o.decode_steps;
  // One forward pass captures every layer the trace needs (the layers view,
  // the all-layer dump); each decode step is one more.
  LayerCapture cap(o.layer, o.all_layers, o.keep_layer_stages, KeepRows(info, o, n, n), false);
  StageCapture sc;
  sc.sink = &cap;
  sc.layer = kCaptureAllLayers;
  Tensor logits;
  if (o.progress) o.progress(0, total);
  ATTNFLOW_RETURN_IF_ERROR(model.Forward(ids.value(), /*all_logits=*/false, &logits, sc));
  ATTNFLOW_RETURN_IF_ERROR(cap.status());
  if (o.progress) o.progress(n, total);
  ATTNFLOW_RETURN_IF_ERROR(FinishModelTrace(cap, info.name, o.layer, &t));
  if (o.all_layers) ATTNFLOW_RETURN_IF_ERROR(AddLayersViewFrom(cap, info.num_layers, &t));
  if (o.keep_layer_stages) t.layer_stages = cap.TakeAll();
  for (int64_t s = 0; s < o.decode_steps; ++s) {
    if (!logits.defined() || logits.numel() == 0) {
      return Status(StatusCode::kInternal, "trace: the decoder returned no logits");
    }
    const int32_t next = o.decode_ids.empty() ? ArgMax(logits) : o.decode_ids[static_cast<size_t>(s)];
    DecodeStep step;
    step.token = {next, model.tokenizer().TokenText(next), model.tokenizer().TokenBytes(next)};
    step.position = model.CacheLength();
    const int64_t lk = step.position + 1;
    LayerCapture scap(o.layer, false, o.keep_layer_stages, KeepRows(info, o, 1, lk), false);
    StageCapture ssc;
    ssc.sink = &scap;
    ssc.layer = kCaptureAllLayers;
    ATTNFLOW_RETURN_IF_ERROR(model.Forward({next}, false, &logits, ssc));
    ATTNFLOW_RETURN_IF_ERROR(scap.status());
    ATTNFLOW_RETURN_IF_ERROR(scap.PageStages(&step.stages));
    if (o.keep_layer_stages) step.layer_stages = scap.TakeAll();
    step.kernel = internal::RunKernelCheck(step.Find("q"), step.Find("k"), step.Find("v"),
                                           Causal::kBottomRight, t.scale, step.Find("heads_out"),
                                           step.Find("lse"), step.Find("masked"),
                                           step.Find("weights"));
    t.decode.push_back(std::move(step));
    if (o.progress) o.progress(n + s + 1, total);
  }
  return t;
}

}  // namespace attnflow::trace
