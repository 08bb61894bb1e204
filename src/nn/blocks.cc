// nn/blocks.cc — the multi-head attention sublayer (projections, RoPE /
// ALiBi / T5 positions, KV cache, masks) and the Transformer blocks built on
// it: post-/pre-norm block (encoder layer, decoder-only block), the decoder
// layer with cross-attention, and the encoder–decoder Transformer.
//
// Invariants:
//  * The sdpa core is reference::Sdpa (float64, the oracle) unless
//    AttentionConfig::use_kernels asks for the fp32 fast path; every stage
//    name follows attnflow/nn.h.
//  * Keys enter the KV cache after RoPE, at positions cache.length + j, so
//    decoding one token at a time equals one pass over the whole sequence.
//  * Masks compose by AND (visibility) and sum (biases), as docs/semantics.md.
#include <cmath>
#include <functional>
#include <string>

#include "attnflow/reference.h"
#include "attnflow/kernels.h"
#include "nn/internal.h"

namespace attnflow::nn {
using namespace internal;  // NOLINT: the helpers of this module

namespace {

// [B, L, nh·Dh] -> [B, nh, L, Dh]
Result<Tensor> SplitHeads(const Tensor& x, int64_t B, int64_t L, int64_t nh, int64_t Dh) {
  Result<Tensor> r = F64Zeros({B, nh, L, Dh});
  if (!r.ok()) return r;
  const double* s = P(x);
  double* d = P(r.value());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t c = 0; c < Dh; ++c)
          d[((b * nh + h) * L + l) * Dh + c] = s[(b * L + l) * nh * Dh + h * Dh + c];
  return r;
}

// Appends kn/vn [B,Hkv,Ln,Dh] to the cache, growing it geometrically.
Status CacheAppend(KvCache* c, const Tensor& kn, const Tensor& vn) {
  const Shape s = kn.shape();
  const int64_t B = s[0], Hkv = s[1], Ln = s[2], Dh = s[3];
  const bool fits = c->k.defined() && c->k.shape()[0] == B && c->k.shape()[1] == Hkv &&
                    c->k.shape()[3] == Dh;
  if (!fits && c->length > 0) {
    return InvalidArgument("kv_cache: cached keys " + ShapeString(c->k.shape()) +
                           " (length " + std::to_string(c->length) +
                           ") do not match new keys " + ShapeString(s));
  }
  const int64_t cap = fits ? c->k.shape()[2] : 0;
  const int64_t need = c->length + Ln;
  if (need > cap) {
    const int64_t ncap = std::max<int64_t>({need, 2 * cap, 16});
    Result<Tensor> nk = F64Zeros({B, Hkv, ncap, Dh});
    Result<Tensor> nv = F64Zeros({B, Hkv, ncap, Dh});
    if (!nk.ok()) return nk.status();
    if (!nv.ok()) return nv.status();
    for (int64_t bh = 0; bh < B * Hkv; ++bh)
      for (int64_t l = 0; l < c->length; ++l)
        for (int64_t d = 0; d < Dh; ++d) {
          P(nk.value())[(bh * ncap + l) * Dh + d] = P(c->k)[(bh * cap + l) * Dh + d];
          P(nv.value())[(bh * ncap + l) * Dh + d] = P(c->v)[(bh * cap + l) * Dh + d];
        }
    c->k = std::move(nk).value();
    c->v = std::move(nv).value();
  }
  const int64_t ccap = c->k.shape()[2];
  for (int64_t bh = 0; bh < B * Hkv; ++bh)
    for (int64_t l = 0; l < Ln; ++l)
      for (int64_t d = 0; d < Dh; ++d) {
        P(c->k)[(bh * ccap + c->length + l) * Dh + d] = P(kn)[(bh * Ln + l) * Dh + d];
        P(c->v)[(bh * ccap + c->length + l) * Dh + d] = P(vn)[(bh * Ln + l) * Dh + d];
      }
  c->length = need;
  return Status::Ok();
}

TensorView CacheView(const Tensor& t, int64_t len) {
  const Shape s = t.shape();
  return MakeStridedView(t.data<double>(), DType::kF64, {s[0], s[1], len, s[3]},
                         {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1});
}

Result<Tensor> NormT(const Tensor& x, const NormWeights& w, NormKind kind, double eps) {
  Result<Tensor> r = F64Zeros(x.shape());
  if (!r.ok()) return r;
  Status st = Norm(r->view(), x.view(), w, kind, eps);
  if (!st.ok()) return st;
  return r;
}

Result<Tensor> FfnT(const Tensor& x, const FfnWeights& w, Activation act, StageSink* sink) {
  Result<Tensor> r = F64Zeros(x.shape());
  if (!r.ok()) return r;
  Status st = Ffn(r->view(), x.view(), w, act, sink);
  if (!st.ok()) return st;
  return r;
}

// Fast path: the sdpa core on fp32 copies through attnflow::Attention.
Status SdpaKernels(const Tensor& heads, const Tensor& q, const TensorView& k,
                   const TensorView& v, const SdpaOptions& opt) {
  auto to_f32 = [](const TensorView& t, Tensor* dst) -> Status {
    Result<Tensor> r = Tensor::Zeros(DType::kF32, Shape(t.shape.begin(), t.shape.begin() + t.rank));
    if (!r.ok()) return r.status();
    *dst = std::move(r).value();
    int64_t idx[4] = {0, 0, 0, 0};
    for (int64_t e = 0; e < t.numel(); ++e) {
      dst->data<float>()[e] = static_cast<float>(t.load(t.offset(idx[0], idx[1], idx[2], idx[3])));
      for (int d = t.rank - 1; d >= 0; --d) {
        if (++idx[d] < t.shape[d]) break;
        idx[d] = 0;
      }
    }
    return Status::Ok();
  };
  Tensor qf, kf, vf;
  ATTNFLOW_RETURN_IF_ERROR(to_f32(q.view(), &qf));
  ATTNFLOW_RETURN_IF_ERROR(to_f32(k, &kf));
  ATTNFLOW_RETURN_IF_ERROR(to_f32(v, &vf));
  Result<Tensor> of = Tensor::Zeros(DType::kF32, heads.shape());
  if (!of.ok()) return of.status();
  ATTNFLOW_RETURN_IF_ERROR(Attention(of->view(), TensorView(), qf.view(), kf.view(), vf.view(), opt));
  for (int64_t i = 0; i < heads.numel(); ++i) P(heads)[i] = of->data<float>()[i];
  return Status::Ok();
}

}  // namespace

Status AttentionLayer(const TensorView& out, const TensorView& x_q, const TensorView& x_kv,
                      const AttentionWeights& w, const AttentionConfig& cfg,
                      const AttentionMasks& masks, KvCache* cache, StageSink* sink) {
  const char* op = "attention_layer";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "x_q", x_q, {-1, -1, -1}));
  const int64_t B = x_q.shape[0], Lq = x_q.shape[1], E = x_q.shape[2];
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "x_kv", x_kv, {B, -1, E}));
  const int64_t Ln = x_kv.shape[1];
  const int64_t H = cfg.num_heads, Hkv = cfg.num_kv_heads == 0 ? H : cfg.num_kv_heads;
  if (H <= 0 || Hkv <= 0 || H % Hkv != 0) {
    return InvalidArgument(std::string(op) + ": num_heads=" + std::to_string(H) +
                           " must be a positive multiple of num_kv_heads=" + std::to_string(Hkv));
  }
  if (cfg.head_dim == 0 && E % H != 0) {
    return InvalidArgument(std::string(op) + ": E=" + std::to_string(E) +
                           " is not divisible by num_heads=" + std::to_string(H) +
                           " (set head_dim)");
  }
  const int64_t Dh = cfg.head_dim == 0 ? E / H : cfg.head_dim;
  if (Dh <= 0) return InvalidArgument(std::string(op) + ": head_dim must be positive");
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {B, Lq, E}));
  Linear lq, lk, lv, lo;
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "q", w.w_q, w.b_q, H * Dh, E, &lq));
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "k", w.w_k, w.b_k, Hkv * Dh, E, &lk));
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "v", w.w_v, w.b_v, Hkv * Dh, E, &lv));
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "o", w.w_o, w.b_o, E, H * Dh, &lo));
  if (cfg.position == PositionKind::kT5) {
    ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "t5_table", w.t5_table, {cfg.t5.num_buckets, H}));
  }
  if (cfg.position == PositionKind::kRope && !masks.position_ids.empty_view() && Ln != Lq) {
    return InvalidArgument(std::string(op) + ": position_ids " + masks.position_ids.describe() +
                           " need self-attention (x_q " + x_q.shape_string() + ", x_kv " +
                           x_kv.shape_string() + ")");
  }
  if (cache != nullptr && cfg.causal == Causal::kTopLeft && cache->length > 0) {
    return InvalidArgument(std::string(op) +
                           ": a non-empty KV cache needs causal bottom_right (queries are the "
                           "last positions), got top_left");
  }

  Result<Tensor> xq = ToF64(x_q);
  if (!xq.ok()) return xq.status();
  Result<Tensor> xkv = ToF64(x_kv);
  if (!xkv.ok()) return xkv.status();
  Result<Tensor> qp = Apply(lq, xq.value(), {B, Lq, H * Dh});
  Result<Tensor> kp = Apply(lk, xkv.value(), {B, Ln, Hkv * Dh});
  Result<Tensor> vp = Apply(lv, xkv.value(), {B, Ln, Hkv * Dh});
  for (auto* r : {&qp, &kp, &vp})
    if (!r->ok()) return r->status();
  Result<Tensor> q = SplitHeads(qp.value(), B, Lq, H, Dh);
  Result<Tensor> kn = SplitHeads(kp.value(), B, Ln, Hkv, Dh);
  Result<Tensor> vn = SplitHeads(vp.value(), B, Ln, Hkv, Dh);
  for (auto* r : {&q, &kn, &vn})
    if (!r->ok()) return r->status();

  const int64_t past = cache != nullptr ? cache->length : 0;
  if (cfg.position == PositionKind::kRope) {
    ATTNFLOW_RETURN_IF_ERROR(
        Wrap(op, ApplyRope(q->view(), q->view(), masks.position_ids, past, cfg.rope)));
    ATTNFLOW_RETURN_IF_ERROR(
        Wrap(op, ApplyRope(kn->view(), kn->view(), masks.position_ids, past, cfg.rope)));
  }
  TensorView k_all = kn->view(), v_all = vn->view();
  if (cache != nullptr) {
    ATTNFLOW_RETURN_IF_ERROR(Wrap(op, CacheAppend(cache, kn.value(), vn.value())));
    k_all = CacheView(cache->k, cache->length);
    v_all = CacheView(cache->v, cache->length);
  }
  const int64_t Lk = k_all.shape[2];
  if (sink != nullptr) {
    if (sink->Wants("q")) sink->Put("q", q->view());
    if (sink->Wants("k")) sink->Put("k", k_all);
    if (sink->Wants("v")) sink->Put("v", v_all);
  }

  SdpaOptions opt;
  opt.causal = cfg.causal;
  opt.scale = cfg.scale;
  ATTNFLOW_RETURN_IF_ERROR(CheckBool(op, "key_mask", masks.key_mask, {B, Lk}, true));
  Tensor mask, slopes;
  const bool t5 = cfg.position == PositionKind::kT5;
  if (t5 || HasView(masks.key_mask) || HasView(masks.attn_mask)) {
    TensorView user;
    if (HasView(masks.attn_mask)) {
      const int64_t target[4] = {B, H, Lq, Lk};
      if (masks.attn_mask.rank < 2 || masks.attn_mask.rank > 4 ||
          !(masks.attn_mask.dtype == DType::kBool || IsFloat(masks.attn_mask.dtype)) ||
          !BroadcastMask(masks.attn_mask, target, &user)) {
        return InvalidArgument(std::string(op) + ": attn_mask " + masks.attn_mask.describe() +
                               " is not a BOOL/float mask broadcastable to [B,H,Lq,Lk] = " +
                               ShapeString({B, H, Lq, Lk}));
      }
    }
    Result<Tensor> m = F64Zeros({B, H, Lq, Lk});
    if (!m.ok()) return m.status();
    mask = std::move(m).value();
    Tensor bias;
    if (t5) {
      Result<Tensor> bt = F64Zeros({H, Lq, Lk});
      if (!bt.ok()) return bt.status();
      bias = std::move(bt).value();
      ATTNFLOW_RETURN_IF_ERROR(
          Wrap(op, T5Bias(bias.view(), TensorView(), w.t5_table, past + Ln - Lq, cfg.t5)));
    }
    double* mp = P(mask);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t j = 0; j < Lk; ++j) {
            double v = t5 ? P(bias)[(h * Lq + i) * Lk + j] : 0.0;
            if (HasView(masks.key_mask) &&
                masks.key_mask.load(masks.key_mask.offset(b, j)) == 0.0) {
              v = kNegInf;
            }
            if (HasView(user)) {
              const double u = user.load(user.offset(b, h, i, j));
              if (user.dtype == DType::kBool) {
                if (u == 0.0) v = kNegInf;
              } else {
                v += u;
              }
            }
            mp[((b * H + h) * Lq + i) * Lk + j] = v;
          }
    opt.attn_mask = mask.view();
  }
  if (cfg.position == PositionKind::kAlibi) {
    Result<Tensor> s = F64Zeros({H});
    if (!s.ok()) return s.status();
    slopes = std::move(s).value();
    AlibiSlopes(H, P(slopes));
    opt.alibi_slopes = slopes.view();
  }
  Result<Tensor> heads = F64Zeros({B, H, Lq, Dh});
  if (!heads.ok()) return heads.status();
  if (cfg.use_kernels) {
    ATTNFLOW_RETURN_IF_ERROR(Wrap(op, SdpaKernels(heads.value(), q.value(), k_all, v_all, opt)));
    Emit(sink, "heads_out", heads.value());
  } else {
    RenamingSink hs(sink, RenamingSink::OutAsHeadsOut);
    ATTNFLOW_RETURN_IF_ERROR(Wrap(op, reference::Sdpa(heads->view(), TensorView(), q->view(),
                                                      k_all, v_all, opt,
                                                      sink != nullptr ? &hs : nullptr)));
  }
  Result<Tensor> concat = F64Zeros({B, Lq, H * Dh});
  if (!concat.ok()) return concat.status();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t c = 0; c < Dh; ++c)
          P(concat.value())[(b * Lq + i) * H * Dh + h * Dh + c] =
              P(heads.value())[((b * H + h) * Lq + i) * Dh + c];
  Emit(sink, "concat", concat.value());
  Result<Tensor> ao = Apply(lo, concat.value(), {B, Lq, E});
  if (!ao.ok()) return ao.status();
  Emit(sink, "attn_out", ao.value());
  StoreTo(out, ao.value());
  return Status::Ok();
}

Status Block(const TensorView& out, const TensorView& x, const BlockWeights& w,
             const BlockConfig& cfg, const AttentionMasks& masks, KvCache* cache,
             StageSink* sink) {
  const char* op = "block";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "x", x, {-1, -1, -1}));
  const Shape xs = {x.shape[0], x.shape[1], x.shape[2]};
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, xs));
  const bool pre = cfg.placement == NormPlacement::kPre;
  Result<Tensor> xf = ToF64(x);
  if (!xf.ok()) return xf.status();
  Tensor a_in;
  if (pre) {
    Result<Tensor> n = NormT(xf.value(), w.norm1, cfg.norm, cfg.norm_eps);
    if (!n.ok()) return Wrap(op, n.status());
    a_in = std::move(n).value();
  } else {
    Result<Tensor> c = Tensor::FromView(xf->view());
    if (!c.ok()) return c.status();
    a_in = std::move(c).value();
  }
  Emit(sink, "attn_in", a_in);
  Result<Tensor> attn = F64Zeros(xs);
  if (!attn.ok()) return attn.status();
  ATTNFLOW_RETURN_IF_ERROR(Wrap(op, AttentionLayer(attn->view(), a_in.view(), a_in.view(), w.attn,
                                                   cfg.attn, masks, cache, sink)));
  Result<Tensor> residual = SumT(xf.value(), attn.value());
  if (!residual.ok()) return residual.status();
  Emit(sink, "residual", residual.value());
  Result<Tensor> f_in = NormT(residual.value(), pre ? w.norm2 : w.norm1, cfg.norm, cfg.norm_eps);
  if (!f_in.ok()) return Wrap(op, f_in.status());
  Emit(sink, "norm", f_in.value());
  Result<Tensor> f = FfnT(f_in.value(), w.ffn, cfg.act, sink);
  if (!f.ok()) return Wrap(op, f.status());
  Emit(sink, "ffn", f.value());
  Result<Tensor> y = pre ? SumT(residual.value(), f.value()) : SumT(f_in.value(), f.value());
  if (!y.ok()) return y.status();
  if (!pre) {
    y = NormT(y.value(), w.norm2, cfg.norm, cfg.norm_eps);
    if (!y.ok()) return Wrap(op, y.status());
  }
  Emit(sink, "out", y.value());
  StoreTo(out, y.value());
  return Status::Ok();
}

Status DecoderLayer(const TensorView& out, const TensorView& x, const TensorView& memory,
                    const DecoderLayerWeights& w, const DecoderLayerConfig& cfg,
                    const AttentionMasks& self_masks, const TensorView& memory_key_mask,
                    KvCache* self_cache, StageSink* sink) {
  const char* op = "decoder_layer";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "x", x, {-1, -1, -1}));
  const int64_t B = x.shape[0], E = x.shape[2];
  const Shape xs = {B, x.shape[1], E};
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "memory", memory, {B, -1, E}));
  ATTNFLOW_RETURN_IF_ERROR(CheckBool(op, "memory_key_mask", memory_key_mask,
                                     {B, memory.shape[1]}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, xs));
  const bool pre = cfg.placement == NormPlacement::kPre;
  auto norm = [&](const Tensor& t, const NormWeights& nw) {
    return NormT(t, nw, cfg.norm, cfg.norm_eps);
  };
  Result<Tensor> xf = ToF64(x);
  if (!xf.ok()) return xf.status();
  PrefixSink self_sink(sink, "self."), cross_sink(sink, "cross.");
  StageSink* ss = sink != nullptr ? &self_sink : nullptr;
  StageSink* cs = sink != nullptr ? &cross_sink : nullptr;

  // Self-attention sublayer.
  Result<Tensor> s_in = pre ? norm(xf.value(), w.norm1) : Tensor::FromView(xf->view());
  if (!s_in.ok()) return Wrap(op, s_in.status());
  Emit(ss, "attn_in", s_in.value());
  Result<Tensor> sa = F64Zeros(xs);
  if (!sa.ok()) return sa.status();
  ATTNFLOW_RETURN_IF_ERROR(Wrap(op, AttentionLayer(sa->view(), s_in->view(), s_in->view(),
                                                   w.self_attn, cfg.self_attn, self_masks,
                                                   self_cache, ss)));
  Result<Tensor> r1 = SumT(xf.value(), sa.value());
  if (!r1.ok()) return r1.status();
  Emit(ss, "residual", r1.value());
  Result<Tensor> c_in = norm(r1.value(), pre ? w.norm2 : w.norm1);
  if (!c_in.ok()) return Wrap(op, c_in.status());
  Emit(ss, "norm", c_in.value());

  // Cross-attention sublayer (keys/values from the encoder memory).
  Emit(cs, "attn_in", c_in.value());
  Result<Tensor> ca = F64Zeros(xs);
  if (!ca.ok()) return ca.status();
  AttentionMasks cross_masks;
  cross_masks.key_mask = memory_key_mask;
  ATTNFLOW_RETURN_IF_ERROR(Wrap(op, AttentionLayer(ca->view(), c_in->view(), memory,
                                                   w.cross_attn, cfg.cross_attn, cross_masks,
                                                   nullptr, cs)));
  // pre: the stream is r1; post: the stream is h1 = norm1(r1) = c_in.
  Result<Tensor> r2 = SumT(pre ? r1.value() : c_in.value(), ca.value());
  if (!r2.ok()) return r2.status();
  Emit(cs, "residual", r2.value());
  Result<Tensor> f_in = norm(r2.value(), pre ? w.norm3 : w.norm2);
  if (!f_in.ok()) return Wrap(op, f_in.status());
  Emit(cs, "norm", f_in.value());

  // FFN sublayer.
  Result<Tensor> f = FfnT(f_in.value(), w.ffn, cfg.act, sink);
  if (!f.ok()) return Wrap(op, f.status());
  Emit(sink, "ffn", f.value());
  Result<Tensor> y = SumT(pre ? r2.value() : f_in.value(), f.value());
  if (!y.ok()) return y.status();
  if (!pre) {
    y = norm(y.value(), w.norm3);
    if (!y.ok()) return Wrap(op, y.status());
  }
  Emit(sink, "out", y.value());
  StoreTo(out, y.value());
  return Status::Ok();
}

Status Transformer(const TensorView& dec_out, const TensorView& logits,
                   const TensorView& src_ids, const TensorView& tgt_ids,
                   const TensorView& src_key_mask, const TensorView& tgt_key_mask,
                   const TransformerWeights& w, const TransformerConfig& cfg,
                   StageSink* sink) {
  const char* op = "transformer";
  ATTNFLOW_RETURN_IF_ERROR(CheckIndex(op, "src_ids", src_ids, {-1, -1}));
  const int64_t B = src_ids.shape[0], Ls = src_ids.shape[1];
  ATTNFLOW_RETURN_IF_ERROR(CheckIndex(op, "tgt_ids", tgt_ids, {B, -1}));
  const int64_t Lt = tgt_ids.shape[1], E = cfg.d_model;
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "src_embed", w.src_embed, {-1, E}));
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "tgt_embed", w.tgt_embed, {-1, E}));
  ATTNFLOW_RETURN_IF_ERROR(CheckBool(op, "src_key_mask", src_key_mask, {B, Ls}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckBool(op, "tgt_key_mask", tgt_key_mask, {B, Lt}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "dec_out", dec_out, {B, Lt, E}, true));
  if (static_cast<int64_t>(w.encoder.size()) != cfg.num_encoder_layers ||
      static_cast<int64_t>(w.decoder.size()) != cfg.num_decoder_layers) {
    return InvalidArgument(std::string(op) + ": weights have " +
                           std::to_string(w.encoder.size()) + " encoder and " +
                           std::to_string(w.decoder.size()) + " decoder layers, config says " +
                           std::to_string(cfg.num_encoder_layers) + " and " +
                           std::to_string(cfg.num_decoder_layers));
  }
  const double escale = cfg.scale_embeddings ? std::sqrt(static_cast<double>(E)) : 1.0;
  Result<Tensor> pe = F64Zeros({std::max(Ls, Lt), E});
  if (!pe.ok()) return pe.status();
  ATTNFLOW_RETURN_IF_ERROR(Wrap(op, SinusoidalTable(pe->view(), 0, cfg.positions)));

  auto embed = [&](const TensorView& ids, const TensorView& table, int64_t L) -> Result<Tensor> {
    Result<Tensor> e = F64Zeros({B, L, E});
    if (!e.ok()) return e;
    Status st = Embed(e->view(), ids, table, escale);
    if (!st.ok()) return Wrap(op, st);
    st = AddPositions(e->view(), e->view(), pe->view(), TensorView(), 0, 1.0);
    if (!st.ok()) return Wrap(op, st);
    return e;
  };

  // Runs n layers over x ([B, L, E]): layer i writes a fresh tensor from the
  // previous one and reports its stages under "<prefix><i>.".
  using LayerFn =
      std::function<Status(int64_t, const TensorView&, const TensorView&, StageSink*)>;
  auto stack = [&](Result<Tensor>& x, int64_t n, int64_t L, const std::string& prefix,
                   const LayerFn& layer) -> Status {
    for (int64_t i = 0; i < n; ++i) {
      Result<Tensor> y = F64Zeros({B, L, E});
      if (!y.ok()) return y.status();
      PrefixSink ps(sink, prefix + std::to_string(i) + ".");
      ATTNFLOW_RETURN_IF_ERROR(
          Wrap(op, layer(i, y->view(), x->view(), sink != nullptr ? &ps : nullptr)));
      x = std::move(y);
    }
    return Status::Ok();
  };

  // Encoder.
  Result<Tensor> x = Staged(sink, "src_in", embed(src_ids, w.src_embed, Ls));
  if (!x.ok()) return x.status();
  AttentionConfig attn;
  attn.num_heads = cfg.num_heads;
  const BlockConfig bc{.attn = attn, .act = cfg.act,
                       .norm = NormKind::kLayerNorm, .norm_eps = cfg.norm_eps,
                       .placement = cfg.placement};
  AttentionMasks enc_masks;
  enc_masks.key_mask = src_key_mask;
  ATTNFLOW_RETURN_IF_ERROR(
      stack(x, cfg.num_encoder_layers, Ls, "enc.",
            [&](int64_t i, const TensorView& out, const TensorView& in, StageSink* s) {
              return Block(out, in, w.encoder[i], bc, enc_masks, nullptr, s);
            }));
  Result<Tensor> memory = NormT(x.value(), w.encoder_norm, NormKind::kLayerNorm, cfg.norm_eps);
  if (!memory.ok()) return Wrap(op, memory.status());
  Emit(sink, "memory", memory.value());

  // Decoder.
  Result<Tensor> t = Staged(sink, "tgt_in", embed(tgt_ids, w.tgt_embed, Lt));
  if (!t.ok()) return t.status();
  DecoderLayerConfig dc = {.self_attn = bc.attn, .cross_attn = bc.attn, .act = cfg.act,
                           .norm = NormKind::kLayerNorm, .norm_eps = cfg.norm_eps,
                           .placement = cfg.placement};
  dc.self_attn.causal = Causal::kTopLeft;
  AttentionMasks dec_masks;
  dec_masks.key_mask = tgt_key_mask;
  ATTNFLOW_RETURN_IF_ERROR(
      stack(t, cfg.num_decoder_layers, Lt, "dec.",
            [&](int64_t i, const TensorView& out, const TensorView& in, StageSink* s) {
              return DecoderLayer(out, in, memory->view(), w.decoder[i], dc, dec_masks,
                                  src_key_mask, nullptr, s);
            }));
  Result<Tensor> d = NormT(t.value(), w.decoder_norm, NormKind::kLayerNorm, cfg.norm_eps);
  if (!d.ok()) return Wrap(op, d.status());
  Emit(sink, "dec_out", d.value());
  StoreTo(dec_out, d.value());
  if (HasView(w.w_logits)) {
    Linear gen;
    ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "logits", w.w_logits, w.b_logits,
                                        w.w_logits.shape[0], E, &gen));
    ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "logits", logits, {B, Lt, gen.out}, true));
    Result<Tensor> lg = Apply(gen, d.value(), {B, Lt, gen.out});
    if (!lg.ok()) return lg.status();
    Emit(sink, "logits", lg.value());
    StoreTo(logits, lg.value());
  } else if (HasView(logits)) {
    return InvalidArgument(std::string(op) + ": logits " + logits.describe() +
                           " requested without w_logits");
  }
  return Status::Ok();
}

}  // namespace attnflow::nn
