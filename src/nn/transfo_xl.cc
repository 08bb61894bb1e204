// nn/transfo_xl.cc — float64 Transformer-XL: relative positional attention
// (content term (q+u)·k, position term (q+v)·R via the rel_shift trick) and
// segment-level recurrence (cached previous-segment layer inputs reused as
// extra keys/values). Formulas: attnflow/nn_transfo_xl.h, docs/nn.md.
//
// Invariants:
//  * The position term is computed exactly as the paper/HF implementation
//    does (bd_raw over the descending position table, then rel_shift), so
//    the "bd" stage matches HF everywhere, including the masked region.
//  * The softmax/aggregation is reference::Sdpa with q' = q + u and the
//    position term added as a float mask, so the dead-row and NaN rules are
//    the core's.
//  * Memory is never recomputed: new_mems are copies of the layer inputs.
#include <cmath>
#include <string>

#include "attnflow/reference.h"
#include "attnflow/nn_transfo_xl.h"
#include "nn/internal.h"

namespace attnflow::nn {
using namespace internal;  // NOLINT: the helpers of this module

namespace {

// Of the inner sdpa's stages, masked / weights / lse pass and out becomes
// heads_out; the rest is the TXL layer's own business.
std::string_view TxlSdpaStage(std::string_view s) {
  if (s == "out") return "heads_out";
  if (s == "masked" || s == "weights" || s == "lse") return s;
  return {};
}

// The relative position table [K, E]: sinusoids (concat layout) at
// positions K-1 … 0, clamped at clamp_len when > 0.
Result<Tensor> RelativePositionTable(const char* op, int64_t K, int64_t E, int64_t clamp_len) {
  std::vector<double> pos(static_cast<size_t>(K));
  for (int64_t j = 0; j < K; ++j) {
    double p = static_cast<double>(K - 1 - j);
    if (clamp_len > 0 && p > static_cast<double>(clamp_len)) p = static_cast<double>(clamp_len);
    pos[static_cast<size_t>(j)] = p;
  }
  Result<Tensor> R = F64Zeros({K, E});
  if (!R.ok()) return R.status();
  SinusoidalOptions so;
  so.layout = SinusoidalLayout::kConcat;
  ATTNFLOW_RETURN_IF_ERROR(Wrap(op, SinusoidalAt(R->view(), pos, so)));
  return R;
}

Result<Tensor> LayerNormT(const Tensor& x, const TensorView& w, const TensorView& b, double eps) {
  Result<Tensor> r = F64Zeros(x.shape());
  if (!r.ok()) return r;
  NormWeights nw{w, b};
  Status st = Norm(r->view(), x.view(), nw, NormKind::kLayerNorm, eps);
  if (!st.ok()) return st;
  return r;
}

}  // namespace

Status RelShift(const TensorView& out, const TensorView& x) {
  const char* op = "rel_shift";
  if (x.rank < 2 || x.rank > 4 || !IsFloat(x.dtype)) {
    return InvalidArgument(std::string(op) + ": x is " + x.describe() +
                           ", expected float rank 2..4 [..., Lq, Lk]");
  }
  ATTNFLOW_RETURN_IF_ERROR(
      CheckOut(op, "out", out, std::vector<int64_t>(x.shape.begin(), x.shape.begin() + x.rank)));
  if (out.data == x.data && x.numel() > 0) {
    return InvalidArgument(std::string(op) + ": out must not alias x");
  }
  const int64_t Lq = x.shape[x.rank - 2], Lk = x.shape[x.rank - 1];
  int64_t outer = 1;
  for (int d = 0; d + 2 < x.rank; ++d) outer *= x.shape[d];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t idx[4] = {0, 0, 0, 0};
    int64_t rem = o;
    for (int d = x.rank - 3; d >= 0; --d) {
      idx[d] = rem % x.shape[d];
      rem /= x.shape[d];
    }
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t j = 0; j < Lk; ++j) {
        const int64_t p = Lq + i * Lk + j;  // index into the zero-padded [Lq, Lk+1]
        const int64_t r = p / (Lk + 1), c = p % (Lk + 1);
        double v = 0.0;
        if (c != 0) {
          int64_t src[4] = {idx[0], idx[1], idx[2], idx[3]};
          src[x.rank - 2] = r;
          src[x.rank - 1] = c - 1;
          v = x.load(x.offset(src[0], src[1], src[2], src[3]));
        }
        int64_t dst[4] = {idx[0], idx[1], idx[2], idx[3]};
        dst[x.rank - 2] = i;
        dst[x.rank - 1] = j;
        out.store(out.offset(dst[0], dst[1], dst[2], dst[3]), v);
      }
  }
  return Status::Ok();
}

Status TxlLayer(const TensorView& out, const TensorView& x, const TensorView& mem,
                const TxlLayerWeights& w, const TxlConfig& cfg, const TensorView& attn_mask,
                StageSink* sink) {
  const char* op = "transfo_xl_layer";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "x", x, {-1, -1, -1}));
  const int64_t B = x.shape[0], L = x.shape[1], E = x.shape[2];
  if (E != cfg.d_model) {
    return InvalidArgument(std::string(op) + ": x " + x.describe() + " does not have d_model=" +
                           std::to_string(cfg.d_model));
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "mem", mem, {B, -1, E}, true));
  const int64_t M = mem.empty_view() ? 0 : mem.shape[1], K = M + L;
  const int64_t H = cfg.num_heads, Dh = cfg.head_dim, HD = H * Dh, F = cfg.d_inner;
  if (H <= 0 || Dh <= 0 || F <= 0) {
    return InvalidArgument(std::string(op) + ": num_heads, head_dim and d_inner must be positive");
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {B, L, E}));
  ATTNFLOW_RETURN_IF_ERROR(CheckBool(op, "attn_mask", attn_mask, {L, K}, true));
  Linear lqkv, lr, lo, l1, l2;
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "qkv", w.w_qkv, TensorView(), 3 * HD, E, &lqkv));
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "r", w.w_r, TensorView(), HD, E, &lr));
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "o", w.w_o, TensorView(), E, HD, &lo));
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "ff1", w.w_ff1, w.b_ff1, F, E, &l1));
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "ff2", w.w_ff2, w.b_ff2, E, F, &l2));
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "r_w_bias (u)", w.r_w_bias, {H, Dh}));
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "r_r_bias (v)", w.r_r_bias, {H, Dh}));
  for (auto [n, t] : {std::pair<const char*, const TensorView*>{"ln_attn weight", &w.ln_attn_w},
                      {"ln_attn bias", &w.ln_attn_b},
                      {"ln_ff weight", &w.ln_ff_w},
                      {"ln_ff bias", &w.ln_ff_b}}) {
    ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, n, *t, {E}));
  }

  // cat = [mem; x]
  Result<Tensor> xf = ToF64(x);
  if (!xf.ok()) return xf.status();
  Result<Tensor> cat = F64Zeros({B, K, E});
  if (!cat.ok()) return cat.status();
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t e = 0; e < E; ++e)
        P(cat.value())[(b * K + m) * E + e] = mem.load(mem.offset(b, m, e));
    for (int64_t l = 0; l < L; ++l)
      for (int64_t e = 0; e < E; ++e)
        P(cat.value())[(b * K + M + l) * E + e] = P(xf.value())[(b * L + l) * E + e];
  }
  Result<Tensor> cat_in = cfg.pre_lnorm ? LayerNormT(cat.value(), w.ln_attn_w, w.ln_attn_b, cfg.norm_eps)
                                        : Tensor::FromView(cat->view());
  if (!cat_in.ok()) return Wrap(op, cat_in.status());
  Emit(sink, "attn_in", cat_in.value());

  Result<Tensor> qkv = Apply(lqkv, cat_in.value(), {B, K, 3 * HD});
  if (!qkv.ok()) return qkv.status();
  Result<Tensor> q = F64Zeros({B, H, L, Dh}), qu = F64Zeros({B, H, L, Dh});
  Result<Tensor> k = F64Zeros({B, H, K, Dh}), v = F64Zeros({B, H, K, Dh});
  for (auto* r : {&q, &qu, &k, &v})
    if (!r->ok()) return r->status();
  Result<Tensor> u = ToF64(w.r_w_bias), vb = ToF64(w.r_r_bias);
  if (!u.ok()) return u.status();
  if (!vb.ok()) return vb.status();
  const double* qkvp = P(qkv.value());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < K; ++j)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t c = 0; c < Dh; ++c) {
          const double* row = qkvp + (b * K + j) * 3 * HD;
          P(k.value())[((b * H + h) * K + j) * Dh + c] = row[HD + h * Dh + c];
          P(v.value())[((b * H + h) * K + j) * Dh + c] = row[2 * HD + h * Dh + c];
          if (j >= M) {
            const int64_t i = j - M;
            const double qv = row[h * Dh + c];
            P(q.value())[((b * H + h) * L + i) * Dh + c] = qv;
            P(qu.value())[((b * H + h) * L + i) * Dh + c] = qv + P(u.value())[h * Dh + c];
          }
        }
  Emit(sink, "q", q.value());
  Emit(sink, "k", k.value());
  Emit(sink, "v", v.value());

  Result<Tensor> R = RelativePositionTable(op, K, E, cfg.clamp_len);
  if (!R.ok()) return R.status();
  Result<Tensor> rp = Apply(lr, R.value(), {K, HD});
  if (!rp.ok()) return rp.status();
  Result<Tensor> r = F64Zeros({H, K, Dh});
  if (!r.ok()) return r.status();
  for (int64_t j = 0; j < K; ++j)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < Dh; ++c)
        P(r.value())[(h * K + j) * Dh + c] = P(rp.value())[j * HD + h * Dh + c];
  Emit(sink, "r", r.value());

  // ac = (q+u)·k, bd_raw = (q+v)·r, bd = rel_shift(bd_raw).
  Result<Tensor> ac = F64Zeros({B, H, L, K}), bd_raw = F64Zeros({B, H, L, K});
  Result<Tensor> bd = F64Zeros({B, H, L, K});
  for (auto* t : {&ac, &bd_raw, &bd})
    if (!t->ok()) return t->status();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < K; ++j) {
          double a = 0.0, d = 0.0;
          for (int64_t c = 0; c < Dh; ++c) {
            const double qv = P(q.value())[((b * H + h) * L + i) * Dh + c];
            a += (qv + P(u.value())[h * Dh + c]) * P(k.value())[((b * H + h) * K + j) * Dh + c];
            d += (qv + P(vb.value())[h * Dh + c]) * P(r.value())[(h * K + j) * Dh + c];
          }
          P(ac.value())[((b * H + h) * L + i) * K + j] = a;
          P(bd_raw.value())[((b * H + h) * L + i) * K + j] = d;
        }
  ATTNFLOW_RETURN_IF_ERROR(Wrap(op, RelShift(bd->view(), bd_raw->view())));
  Emit(sink, "ac", ac.value());
  Emit(sink, "bd_raw", bd_raw.value());
  Emit(sink, "bd", bd.value());

  const double scale = 1.0 / std::sqrt(static_cast<double>(Dh));
  Result<Tensor> scores = F64Zeros({B, H, L, K}), scaled = F64Zeros({B, H, L, K});
  Result<Tensor> bias = F64Zeros({B, H, L, K});
  for (auto* t : {&scores, &scaled, &bias})
    if (!t->ok()) return t->status();
  // Visibility: j <= i + M (causal over memory), same_length, attn_mask.
  int64_t shift = L;
  if (cfg.same_length) {
    const int64_t mask_len = K - cfg.mem_len;
    shift = mask_len > 0 ? L - mask_len : L;
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < K; ++j) {
          const int64_t o = ((b * H + h) * L + i) * K + j;
          const double s = P(ac.value())[o] + P(bd.value())[o];
          P(scores.value())[o] = s;
          P(scaled.value())[o] = s * scale;
          bool visible = j <= i + M;
          if (cfg.same_length && j - i <= -shift) visible = false;
          if (!attn_mask.empty_view() && attn_mask.load(attn_mask.offset(i, j)) == 0.0) visible = false;
          P(bias.value())[o] = visible ? P(bd.value())[o] * scale : kNegInf;
        }
  Emit(sink, "scores", scores.value());
  Emit(sink, "scaled", scaled.value());

  Result<Tensor> heads = F64Zeros({B, H, L, Dh});
  if (!heads.ok()) return heads.status();
  SdpaOptions opt;
  opt.scale = scale;
  opt.attn_mask = bias->view();
  RenamingSink ts(sink, TxlSdpaStage);
  ATTNFLOW_RETURN_IF_ERROR(Wrap(op, reference::Sdpa(heads->view(), TensorView(), qu->view(), k->view(),
                                                    v->view(), opt, sink != nullptr ? &ts : nullptr)));
  Result<Tensor> concat = F64Zeros({B, L, HD});
  if (!concat.ok()) return concat.status();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t c = 0; c < Dh; ++c)
          P(concat.value())[(b * L + i) * HD + h * Dh + c] = P(heads.value())[((b * H + h) * L + i) * Dh + c];
  Emit(sink, "concat", concat.value());
  Result<Tensor> ao = Staged(sink, "attn_out", Apply(lo, concat.value(), {B, L, E}));
  if (!ao.ok()) return ao.status();
  Result<Tensor> residual = SumT(xf.value(), ao.value());
  if (!residual.ok()) return residual.status();
  Emit(sink, "residual", residual.value());
  // FFN input ("norm"): post: h = LN_attn(residual); pre: LN_ff(residual).
  Result<Tensor> hstate = cfg.pre_lnorm ? Tensor::FromView(residual->view())
                                        : LayerNormT(residual.value(), w.ln_attn_w, w.ln_attn_b, cfg.norm_eps);
  if (!hstate.ok()) return Wrap(op, hstate.status());
  Result<Tensor> f_in = cfg.pre_lnorm ? LayerNormT(hstate.value(), w.ln_ff_w, w.ln_ff_b, cfg.norm_eps)
                                      : Tensor::FromView(hstate->view());
  if (!f_in.ok()) return Wrap(op, f_in.status());
  Emit(sink, "norm", f_in.value());
  Result<Tensor> hid = Apply(l1, f_in.value(), {B, L, F});
  if (!hid.ok()) return hid.status();
  for (int64_t n = 0; n < hid->numel(); ++n) P(hid.value())[n] = std::max(0.0, P(hid.value())[n]);
  Emit(sink, "ffn_hidden", hid.value());
  Result<Tensor> ff = Staged(sink, "ffn", Apply(l2, hid.value(), {B, L, E}));
  if (!ff.ok()) return ff.status();
  Result<Tensor> y = SumT(hstate.value(), ff.value());
  if (!y.ok()) return y.status();
  if (!cfg.pre_lnorm) {
    y = LayerNormT(y.value(), w.ln_ff_w, w.ln_ff_b, cfg.norm_eps);
    if (!y.ok()) return Wrap(op, y.status());
  }
  Emit(sink, "out", y.value());
  StoreTo(out, y.value());
  return Status::Ok();
}

Status TxlForward(const TensorView& out, std::vector<Tensor>* new_mems, const TensorView& x,
                  const std::vector<TensorView>& mems, const std::vector<TxlLayerWeights>& layers,
                  const TxlConfig& cfg, const TensorView& attn_mask, StageSink* sink) {
  const char* op = "transfo_xl";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "x", x, {-1, -1, -1}));
  const int64_t B = x.shape[0], L = x.shape[1], E = x.shape[2];
  const size_t n = layers.size();
  if (!mems.empty() && mems.size() != n) {
    return InvalidArgument(std::string(op) + ": " + std::to_string(mems.size()) +
                           " memories for " + std::to_string(n) + " layers");
  }
  int64_t M = 0;
  for (size_t i = 0; i < mems.size(); ++i) {
    const std::string name = "mems[" + std::to_string(i) + "]";
    ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, name.c_str(), mems[i], {B, -1, E}));
    if (i == 0) M = mems[i].shape[1];
    if (mems[i].shape[1] != M) {
      return InvalidArgument(std::string(op) + ": " + name + " " + mems[i].describe() +
                             " has another length than mems[0] (" + std::to_string(M) + ")");
    }
  }
  if (cfg.mem_len < 0) {
    return InvalidArgument(std::string(op) + ": mem_len must be >= 0, got " + std::to_string(cfg.mem_len));
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {B, L, E}, true));
  if (sink != nullptr && sink->Wants("pos_emb")) {
    const int64_t K = M + L;
    Result<Tensor> R = RelativePositionTable(op, K, E, cfg.clamp_len);
    if (!R.ok()) return R.status();
    sink->Put("pos_emb", R->view());
  }
  Result<Tensor> core = ToF64(x);
  if (!core.ok()) return core.status();
  if (new_mems != nullptr) new_mems->clear();
  for (size_t i = 0; i < n; ++i) {
    const TensorView mem = mems.empty() ? TensorView() : mems[i];
    // New memory: the last mem_len rows of [mem; layer input].
    const int64_t keep = std::min<int64_t>(cfg.mem_len, M + L);
    Result<Tensor> nm = F64Zeros({B, keep, E});
    if (!nm.ok()) return nm.status();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t r = 0; r < keep; ++r) {
        const int64_t src = M + L - keep + r;  // row of [mem; input]
        for (int64_t e = 0; e < E; ++e)
          P(nm.value())[(b * keep + r) * E + e] =
              src < M ? mem.load(mem.offset(b, src, e)) : P(core.value())[(b * L + src - M) * E + e];
      }
    Emit(sink, "new_mem." + std::to_string(i), nm.value());
    if (new_mems != nullptr) new_mems->push_back(std::move(nm).value());
    Result<Tensor> y = F64Zeros({B, L, E});
    if (!y.ok()) return y.status();
    PrefixSink ps(sink, "layer." + std::to_string(i) + ".");
    ATTNFLOW_RETURN_IF_ERROR(Wrap(op, TxlLayer(y->view(), core->view(), mem, layers[i], cfg, attn_mask,
                                               sink != nullptr ? &ps : nullptr)));
    core = std::move(y);
  }
  Emit(sink, "out", core.value());
  StoreTo(out, core.value());
  return Status::Ok();
}

}  // namespace attnflow::nn
