// nn/golden_nn.cc — golden cases of the nn kinds: parse the case (metadata
// `config` JSON, input/weight tensors), run the float64 reference with stage
// capture and compare the stages the file lists. File layout of every kind:
// docs/nn.md ("Golden format extension").
//
// Invariants:
//  * Nothing runs before the metadata and config have been validated; every
//    error names the file and the field or tensor (kCorrupt), and errors of
//    the ops (inconsistent shapes) are reported as kCorrupt with the op's
//    message.
//  * Stages are compared in the order of the file's `stages` list with the
//    core's rule (CompareStage): |got − expected| <= atol + rtol·|expected|.
//  * No exception escapes (the JSON parser runs in no-throw mode and every
//    access is type-checked).
#include "attnflow/nn_golden.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>

#include "attnflow/nn.h"
#include "attnflow/nn_align.h"
#include "attnflow/nn_transfo_xl.h"
#include "attnflow/nn_vit.h"

namespace attnflow::nn {
namespace {
using nlohmann::json;

std::string Where(const std::string& path, const std::string& what) {
  return "golden: " + path + ": " + what;
}

// Type-checked reads from a JSON object; errors name the field path.
class Cfg {
 public:
  Cfg(const json* j, std::string path, std::string ctx)
      : j_(j), path_(std::move(path)), ctx_(std::move(ctx)) {}

  bool Has(const char* k) const { return j_->contains(k); }
  Status Int(const char* k, int64_t* out, bool required = false) const {
    if (!j_->contains(k)) return Missing(k, required);
    const json& v = (*j_)[k];
    if (!v.is_number_integer()) return Bad(k, "an integer");
    *out = v.get<int64_t>();
    return Status::Ok();
  }
  Status Num(const char* k, double* out, bool required = false) const {
    if (!j_->contains(k)) return Missing(k, required);
    const json& v = (*j_)[k];
    if (!v.is_number()) return Bad(k, "a number");
    *out = v.get<double>();
    if (!std::isfinite(*out)) return Bad(k, "a finite number");
    return Status::Ok();
  }
  Status Bool(const char* k, bool* out, bool required = false) const {
    if (!j_->contains(k)) return Missing(k, required);
    const json& v = (*j_)[k];
    if (!v.is_boolean()) return Bad(k, "true or false");
    *out = v.get<bool>();
    return Status::Ok();
  }
  template <typename E>
  Status Enum(const char* k, E* out, bool (*parse)(std::string_view, E*), const char* allowed,
              bool required = false) const {
    if (!j_->contains(k)) return Missing(k, required);
    const json& v = (*j_)[k];
    if (!v.is_string() || !parse(v.get<std::string>(), out)) return Bad(k, allowed);
    return Status::Ok();
  }
  Status Sub(const char* k, Cfg* out, bool required = false) const {
    if (!j_->contains(k)) {
      *out = Cfg(&Empty(), path_, ctx_ + k + ".");
      return Missing(k, required);
    }
    const json& v = (*j_)[k];
    if (!v.is_object()) return Bad(k, "an object");
    *out = Cfg(&v, path_, ctx_ + k + ".");
    return Status::Ok();
  }

 private:
  static const json& Empty() {
    static const json e = json::object();
    return e;
  }
  Status Missing(const char* k, bool required) const {
    if (!required) return Status::Ok();
    return Corrupt(Where(path_, "config '" + ctx_ + k + "': missing"));
  }
  Status Bad(const char* k, const char* expected) const {
    return Corrupt(Where(path_, "config '" + ctx_ + k + "': " + (*j_)[k].dump() + " is not " + expected));
  }
  const json* j_;
  std::string path_, ctx_;
};

struct CaseFile {
  const SafetensorsFile& f;
  std::string path;

  Status Get(const std::string& name, bool required, TensorView* out) const {
    if (!f.Has(name)) {
      if (!required) return Status::Ok();
      return Corrupt(Where(path, "tensor '" + name + "': missing (required input)"));
    }
    Result<TensorView> r = f.Get(name);
    if (!r.ok()) return Corrupt(Where(path, "tensor '" + name + "': " + r.status().message()));
    *out = r.value();
    return Status::Ok();
  }
  // One weight tensor under a prefix: its name, whether the case must have
  // it, and where it goes.
  struct Field {
    const char* name;
    bool required;
    TensorView* out;
  };
  Status Fields(const std::string& p, std::initializer_list<Field> fields) const {
    for (const Field& fd : fields) ATTNFLOW_RETURN_IF_ERROR(Get(p + fd.name, fd.required, fd.out));
    return Status::Ok();
  }
  Status Attention(const std::string& p, AttentionWeights* w) const {
    return Fields(p, {{"w_q", true, &w->w_q}, {"w_k", true, &w->w_k}, {"w_v", true, &w->w_v},
                      {"w_o", true, &w->w_o}, {"b_q", false, &w->b_q}, {"b_k", false, &w->b_k},
                      {"b_v", false, &w->b_v}, {"b_o", false, &w->b_o},
                      {"t5_table", false, &w->t5_table}});
  }
  Status NormW(const std::string& p, NormWeights* w) const {
    return Fields(p, {{"weight", false, &w->weight}, {"bias", false, &w->bias}});
  }
  Status FfnW(const std::string& p, FfnWeights* w) const {
    return Fields(p, {{"w_up", true, &w->w_up}, {"b_up", false, &w->b_up},
                      {"w_gate", false, &w->w_gate}, {"b_gate", false, &w->b_gate},
                      {"w_down", true, &w->w_down}, {"b_down", false, &w->b_down}});
  }
  Status BlockW(const std::string& p, BlockWeights* w) const {
    ATTNFLOW_RETURN_IF_ERROR(Attention(p + "attn.", &w->attn));
    ATTNFLOW_RETURN_IF_ERROR(NormW(p + "norm1.", &w->norm1));
    ATTNFLOW_RETURN_IF_ERROR(NormW(p + "norm2.", &w->norm2));
    return FfnW(p + "ffn.", &w->ffn);
  }
  Status DecoderW(const std::string& p, DecoderLayerWeights* w) const {
    ATTNFLOW_RETURN_IF_ERROR(Attention(p + "self_attn.", &w->self_attn));
    ATTNFLOW_RETURN_IF_ERROR(Attention(p + "cross_attn.", &w->cross_attn));
    ATTNFLOW_RETURN_IF_ERROR(NormW(p + "norm1.", &w->norm1));
    ATTNFLOW_RETURN_IF_ERROR(NormW(p + "norm2.", &w->norm2));
    ATTNFLOW_RETURN_IF_ERROR(NormW(p + "norm3.", &w->norm3));
    return FfnW(p + "ffn.", &w->ffn);
  }
};

Status ParseRope(const Cfg& c, RopeOptions* r) {
  ATTNFLOW_RETURN_IF_ERROR(c.Enum("layout", &r->layout, ParseRopeLayout, "half or interleaved"));
  ATTNFLOW_RETURN_IF_ERROR(c.Num("theta", &r->theta));
  ATTNFLOW_RETURN_IF_ERROR(c.Int("rotary_dim", &r->rotary_dim));
  ATTNFLOW_RETURN_IF_ERROR(
      c.Enum("scaling", &r->scaling, ParseRopeScaling, "none, linear, ntk or dynamic_ntk"));
  ATTNFLOW_RETURN_IF_ERROR(c.Num("factor", &r->factor));
  ATTNFLOW_RETURN_IF_ERROR(c.Int("max_positions", &r->max_positions));
  return c.Int("seq_len", &r->seq_len);
}

Status ParseT5(const Cfg& c, T5BiasOptions* t) {
  ATTNFLOW_RETURN_IF_ERROR(c.Bool("bidirectional", &t->bidirectional));
  ATTNFLOW_RETURN_IF_ERROR(c.Int("num_buckets", &t->num_buckets));
  return c.Int("max_distance", &t->max_distance);
}

Status ParseAttention(const Cfg& c, AttentionConfig* a) {
  ATTNFLOW_RETURN_IF_ERROR(c.Int("num_heads", &a->num_heads, true));
  ATTNFLOW_RETURN_IF_ERROR(c.Int("num_kv_heads", &a->num_kv_heads));
  ATTNFLOW_RETURN_IF_ERROR(c.Int("head_dim", &a->head_dim));
  ATTNFLOW_RETURN_IF_ERROR(c.Enum("causal", &a->causal, ParseCausal, "none, top_left or bottom_right"));
  ATTNFLOW_RETURN_IF_ERROR(c.Num("scale", &a->scale));
  ATTNFLOW_RETURN_IF_ERROR(
      c.Enum("position", &a->position, ParsePositionKind, "none, rope, alibi or t5"));
  Cfg sub(nullptr, "", "");
  ATTNFLOW_RETURN_IF_ERROR(c.Sub("rope", &sub));
  if (c.Has("rope")) ATTNFLOW_RETURN_IF_ERROR(ParseRope(sub, &a->rope));
  ATTNFLOW_RETURN_IF_ERROR(c.Sub("t5", &sub));
  if (c.Has("t5")) ATTNFLOW_RETURN_IF_ERROR(ParseT5(sub, &a->t5));
  return Status::Ok();
}

template <typename T>
Status ParseNormFfn(const Cfg& c, T* b) {
  ATTNFLOW_RETURN_IF_ERROR(
      c.Enum("act", &b->act, ParseActivation, "relu, gelu, gelu_tanh or swiglu", true));
  ATTNFLOW_RETURN_IF_ERROR(c.Enum("norm", &b->norm, ParseNormKind, "layernorm or rmsnorm", true));
  ATTNFLOW_RETURN_IF_ERROR(c.Num("norm_eps", &b->norm_eps, true));
  return c.Enum("placement", &b->placement, ParseNormPlacement, "post or pre", true);
}

Status AsCorrupt(const std::string& path, const Status& st) {
  if (st.ok() || st.code() == StatusCode::kCorrupt || st.code() == StatusCode::kResourceExhausted) {
    return st;
  }
  return Corrupt(Where(path, "inputs are inconsistent: " + st.message()));
}

Status RunKind(const std::string& kind, const Cfg& c, const CaseFile& cf, StageRecorder* rec) {
  if (kind == "nn_sinusoidal") {
    int64_t len = 0, dim = 0, offset = 0;
    SinusoidalOptions so;
    ATTNFLOW_RETURN_IF_ERROR(c.Int("length", &len, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("dim", &dim, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("offset", &offset));
    ATTNFLOW_RETURN_IF_ERROR(c.Num("base", &so.base));
    ATTNFLOW_RETURN_IF_ERROR(c.Enum("layout", &so.layout, ParseSinusoidalLayout, "interleaved or concat"));
    if (len < 0 || dim < 0 || len > (1 << 20) || dim > (1 << 16)) {
      return Corrupt(Where(cf.path, "config 'length'/'dim': out of range"));
    }
    Result<Tensor> t = Tensor::Zeros(DType::kF64, {len, dim});
    if (!t.ok()) return t.status();
    ATTNFLOW_RETURN_IF_ERROR(SinusoidalTable(t->view(), offset, so));
    rec->Put("table", t->view());
    return Status::Ok();
  }
  if (kind == "nn_learned_pos") {
    TensorView x, table, pid;
    int64_t offset = 0;
    double x_scale = 1.0;
    ATTNFLOW_RETURN_IF_ERROR(c.Int("offset", &offset));
    ATTNFLOW_RETURN_IF_ERROR(c.Num("x_scale", &x_scale));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("x", true, &x));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("table", true, &table));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("position_ids", false, &pid));
    if (x.rank != 3) return Corrupt(Where(cf.path, "tensor 'x': expected rank 3 [B,L,E], got " + x.describe()));
    Result<Tensor> out = Tensor::Zeros(DType::kF64, {x.shape[0], x.shape[1], x.shape[2]});
    if (!out.ok()) return out.status();
    ATTNFLOW_RETURN_IF_ERROR(AddPositions(out->view(), x, table, pid, offset, x_scale));
    rec->Put("out", out->view());
    return Status::Ok();
  }
  if (kind == "nn_rope") {
    RopeOptions ro;
    ATTNFLOW_RETURN_IF_ERROR(ParseRope(c, &ro));
    int64_t q_offset = 0, k_offset = 0;
    ATTNFLOW_RETURN_IF_ERROR(c.Int("q_offset", &q_offset));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("k_offset", &k_offset));
    TensorView q, k, qpid, kpid;
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("q", true, &q));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("k", true, &k));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("q_position_ids", false, &qpid));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("k_position_ids", false, &kpid));
    if (q.rank != 4 || k.rank != 4 || q.shape[0] != k.shape[0] || q.shape[3] != k.shape[3] ||
        k.shape[1] <= 0 || q.shape[1] % k.shape[1] != 0) {
      return Corrupt(Where(cf.path, "tensors 'q' " + q.describe() + " and 'k' " + k.describe() +
                                        " are not [B,H,Lq,D] and [B,Hkv,Lk,D] with H % Hkv == 0"));
    }
    const int64_t B = q.shape[0], H = q.shape[1], Lq = q.shape[2], D = q.shape[3];
    const int64_t Hkv = k.shape[1], Lk = k.shape[2];
    const int64_t r = ro.rotary_dim == 0 ? D : ro.rotary_dim;
    int64_t seq = ro.seq_len;
    if (seq == 0) seq = std::max(q_offset + Lq, k_offset + Lk);
    std::vector<double> inv;
    ATTNFLOW_RETURN_IF_ERROR(RopeInvFreq(&inv, r, ro, seq));
    Result<Tensor> invt = Tensor::Zeros(DType::kF64, {static_cast<int64_t>(inv.size())});
    Result<Tensor> qr = Tensor::Zeros(DType::kF64, {B, H, Lq, D});
    Result<Tensor> kr = Tensor::Zeros(DType::kF64, {B, Hkv, Lk, D});
    Result<Tensor> sc = Tensor::Zeros(DType::kF64, {B, H, Lq, Lk});
    for (auto* t : {&invt, &qr, &kr, &sc})
      if (!t->ok()) return t->status();
    for (size_t i = 0; i < inv.size(); ++i) invt->data<double>()[i] = inv[i];
    RopeOptions fixed = ro;
    fixed.seq_len = seq;  // the same frequencies for q and k
    ATTNFLOW_RETURN_IF_ERROR(ApplyRope(qr->view(), q, qpid, q_offset, fixed));
    ATTNFLOW_RETURN_IF_ERROR(ApplyRope(kr->view(), k, kpid, k_offset, fixed));
    const double* qp = qr->data<double>();
    const double* kp = kr->data<double>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t j = 0; j < Lk; ++j) {
            double acc = 0.0;
            const int64_t hk = KvHeadFor(h, H, Hkv);
            for (int64_t d = 0; d < D; ++d)
              acc += qp[((b * H + h) * Lq + i) * D + d] * kp[((b * Hkv + hk) * Lk + j) * D + d];
            sc->data<double>()[((b * H + h) * Lq + i) * Lk + j] = acc;
          }
    rec->Put("inv_freq", invt->view());
    rec->Put("q_rot", qr->view());
    rec->Put("k_rot", kr->view());
    rec->Put("scores", sc->view());
    return Status::Ok();
  }
  if (kind == "nn_t5_bias") {
    T5BiasOptions to;
    ATTNFLOW_RETURN_IF_ERROR(ParseT5(c, &to));
    int64_t lq = 0, lk = 0, q_offset = 0;
    ATTNFLOW_RETURN_IF_ERROR(c.Int("q_len", &lq, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("kv_len", &lk, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("q_offset", &q_offset));
    TensorView table;
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("table", true, &table));
    if (table.rank != 2 || lq < 0 || lk < 0 || lq > 4096 || lk > 4096) {
      return Corrupt(Where(cf.path, "tensor 'table' " + table.describe() +
                                        " must be [num_buckets,H] and q_len/kv_len in [0,4096]"));
    }
    Result<Tensor> bias = Tensor::Zeros(DType::kF64, {table.shape[1], lq, lk});
    Result<Tensor> buckets = Tensor::Zeros(DType::kF64, {lq, lk});
    if (!bias.ok()) return bias.status();
    if (!buckets.ok()) return buckets.status();
    ATTNFLOW_RETURN_IF_ERROR(T5Bias(bias->view(), buckets->view(), table, q_offset, to));
    rec->Put("buckets", buckets->view());
    rec->Put("bias", bias->view());
    return Status::Ok();
  }
  if (kind == "nn_block") {
    BlockConfig bc;
    Cfg a(nullptr, "", "");
    ATTNFLOW_RETURN_IF_ERROR(c.Sub("attn", &a, true));
    ATTNFLOW_RETURN_IF_ERROR(ParseAttention(a, &bc.attn));
    ATTNFLOW_RETURN_IF_ERROR(ParseNormFfn(c, &bc));
    BlockWeights w;
    ATTNFLOW_RETURN_IF_ERROR(cf.BlockW("", &w));
    TensorView x, x_past;
    AttentionMasks m;
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("x", true, &x));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("x_past", false, &x_past));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("key_mask", false, &m.key_mask));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("attn_mask", false, &m.attn_mask));
    if (x.rank != 3) return Corrupt(Where(cf.path, "tensor 'x': expected rank 3 [B,L,E], got " + x.describe()));
    Result<Tensor> out = Tensor::Zeros(DType::kF64, {x.shape[0], x.shape[1], x.shape[2]});
    if (!out.ok()) return out.status();
    if (x_past.empty_view()) {
      return Block(out->view(), x, w, bc, m, nullptr, rec);
    }
    // Decode: the past tokens fill the KV cache, then x runs against it.
    if (x_past.rank != 3) {
      return Corrupt(Where(cf.path, "tensor 'x_past': expected rank 3 [B,P,E], got " + x_past.describe()));
    }
    KvCache cache;
    Result<Tensor> past_out =
        Tensor::Zeros(DType::kF64, {x_past.shape[0], x_past.shape[1], x_past.shape[2]});
    if (!past_out.ok()) return past_out.status();
    AttentionMasks pm;  // key_mask (if any) covers past + new keys
    if (!m.key_mask.empty_view()) {
      if (m.key_mask.rank != 2 || m.key_mask.shape[1] < x_past.shape[1]) {
        return Corrupt(Where(cf.path, "tensor 'key_mask' " + m.key_mask.describe() +
                                          " must be [B, past + new]"));
      }
      pm.key_mask = m.key_mask;
      pm.key_mask.shape[1] = x_past.shape[1];
    }
    ATTNFLOW_RETURN_IF_ERROR(Block(past_out->view(), x_past, w, bc, pm, &cache, nullptr));
    return Block(out->view(), x, w, bc, m, &cache, rec);
  }
  if (kind == "nn_decoder_layer") {
    DecoderLayerConfig dc;
    Cfg a(nullptr, "", "");
    ATTNFLOW_RETURN_IF_ERROR(c.Sub("self_attn", &a, true));
    ATTNFLOW_RETURN_IF_ERROR(ParseAttention(a, &dc.self_attn));
    ATTNFLOW_RETURN_IF_ERROR(c.Sub("cross_attn", &a, true));
    ATTNFLOW_RETURN_IF_ERROR(ParseAttention(a, &dc.cross_attn));
    ATTNFLOW_RETURN_IF_ERROR(ParseNormFfn(c, &dc));
    DecoderLayerWeights w;
    ATTNFLOW_RETURN_IF_ERROR(cf.DecoderW("", &w));
    TensorView x, memory, mem_mask;
    AttentionMasks m;
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("x", true, &x));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("memory", true, &memory));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("tgt_key_mask", false, &m.key_mask));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("memory_key_mask", false, &mem_mask));
    if (x.rank != 3) return Corrupt(Where(cf.path, "tensor 'x': expected rank 3 [B,L,E], got " + x.describe()));
    Result<Tensor> out = Tensor::Zeros(DType::kF64, {x.shape[0], x.shape[1], x.shape[2]});
    if (!out.ok()) return out.status();
    return DecoderLayer(out->view(), x, memory, w, dc, m, mem_mask, nullptr, rec);
  }
  if (kind == "nn_transformer") {
    TransformerConfig tc;
    ATTNFLOW_RETURN_IF_ERROR(c.Int("d_model", &tc.d_model, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("num_heads", &tc.num_heads, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("ffn_dim", &tc.ffn_dim, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("num_encoder_layers", &tc.num_encoder_layers, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("num_decoder_layers", &tc.num_decoder_layers, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Enum("act", &tc.act, ParseActivation, "relu, gelu, gelu_tanh or swiglu", true));
    ATTNFLOW_RETURN_IF_ERROR(c.Enum("placement", &tc.placement, ParseNormPlacement, "post or pre", true));
    ATTNFLOW_RETURN_IF_ERROR(c.Num("norm_eps", &tc.norm_eps));
    ATTNFLOW_RETURN_IF_ERROR(c.Bool("scale_embeddings", &tc.scale_embeddings));
    if (tc.num_encoder_layers < 0 || tc.num_decoder_layers < 0 || tc.num_encoder_layers > 64 ||
        tc.num_decoder_layers > 64) {
      return Corrupt(Where(cf.path, "config layer counts must be in [0, 64]"));
    }
    TransformerWeights w;
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("src_embed", true, &w.src_embed));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("tgt_embed", true, &w.tgt_embed));
    w.encoder.resize(static_cast<size_t>(tc.num_encoder_layers));
    w.decoder.resize(static_cast<size_t>(tc.num_decoder_layers));
    for (int64_t i = 0; i < tc.num_encoder_layers; ++i)
      ATTNFLOW_RETURN_IF_ERROR(cf.BlockW("enc." + std::to_string(i) + ".", &w.encoder[i]));
    for (int64_t i = 0; i < tc.num_decoder_layers; ++i)
      ATTNFLOW_RETURN_IF_ERROR(cf.DecoderW("dec." + std::to_string(i) + ".", &w.decoder[i]));
    ATTNFLOW_RETURN_IF_ERROR(cf.NormW("enc_norm.", &w.encoder_norm));
    ATTNFLOW_RETURN_IF_ERROR(cf.NormW("dec_norm.", &w.decoder_norm));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("generator.weight", false, &w.w_logits));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("generator.bias", false, &w.b_logits));
    TensorView src, tgt, sm, tm;
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("src_ids", true, &src));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("tgt_ids", true, &tgt));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("src_key_mask", false, &sm));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("tgt_key_mask", false, &tm));
    return Transformer(TensorView(), TensorView(), src, tgt, sm, tm, w, tc, rec);
  }
  if (kind == "nn_align") {
    AlignScore score;
    ATTNFLOW_RETURN_IF_ERROR(c.Enum("score", &score, ParseAlignScore, "additive, dot or general", true));
    AlignWeights w;
    TensorView s, h, km;
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("s", true, &s));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("h", true, &h));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("key_mask", false, &km));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("w_s", score == AlignScore::kAdditive, &w.w_s));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("w_h", score == AlignScore::kAdditive, &w.w_h));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("b", false, &w.b));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("v", score == AlignScore::kAdditive, &w.v));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("w_a", score == AlignScore::kGeneral, &w.w_a));
    return Align(TensorView(), TensorView(), s, h, w, score, km, rec);
  }
  if (kind == "nn_transfo_xl") {
    TxlConfig tc;
    int64_t layers = 0, segments = 0;
    ATTNFLOW_RETURN_IF_ERROR(c.Int("d_model", &tc.d_model, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("num_heads", &tc.num_heads, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("head_dim", &tc.head_dim, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("d_inner", &tc.d_inner, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Bool("pre_lnorm", &tc.pre_lnorm));
    ATTNFLOW_RETURN_IF_ERROR(c.Num("norm_eps", &tc.norm_eps));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("mem_len", &tc.mem_len, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("clamp_len", &tc.clamp_len));
    ATTNFLOW_RETURN_IF_ERROR(c.Bool("same_length", &tc.same_length));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("num_layers", &layers, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("num_segments", &segments, true));
    if (layers <= 0 || layers > 64 || segments <= 0 || segments > 64) {
      return Corrupt(Where(cf.path, "config 'num_layers'/'num_segments' must be in [1, 64]"));
    }
    std::vector<TxlLayerWeights> lw(static_cast<size_t>(layers));
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = "layer." + std::to_string(i) + ".";
      TxlLayerWeights& w = lw[i];
      for (auto [n, dst] : {std::pair<const char*, TensorView*>{"w_qkv", &w.w_qkv},
                            {"w_r", &w.w_r}, {"w_o", &w.w_o}, {"r_w_bias", &w.r_w_bias},
                            {"r_r_bias", &w.r_r_bias}, {"ln_attn.weight", &w.ln_attn_w},
                            {"ln_attn.bias", &w.ln_attn_b}, {"w_ff1", &w.w_ff1},
                            {"b_ff1", &w.b_ff1}, {"w_ff2", &w.w_ff2}, {"b_ff2", &w.b_ff2},
                            {"ln_ff.weight", &w.ln_ff_w}, {"ln_ff.bias", &w.ln_ff_b}}) {
        ATTNFLOW_RETURN_IF_ERROR(cf.Get(p + n, true, dst));
      }
    }
    std::vector<Tensor> mems;
    for (int64_t s = 0; s < segments; ++s) {
      TensorView x;
      ATTNFLOW_RETURN_IF_ERROR(cf.Get("seg." + std::to_string(s), true, &x));
      std::vector<TensorView> mv;
      for (const Tensor& t : mems) mv.push_back(t.view());
      std::vector<Tensor> next;
      PrefixSink ps(rec, "s" + std::to_string(s) + ".");
      ATTNFLOW_RETURN_IF_ERROR(TxlForward(TensorView(), &next, x, mv, lw, tc, TensorView(), &ps));
      mems = std::move(next);
    }
    return Status::Ok();
  }
  if (kind == "nn_bahdanau") {
    BahdanauWeights w;
    for (auto [p, g] : {std::pair<const char*, GruWeights*>{"enc_fwd.", &w.enc_fwd},
                        {"enc_bwd.", &w.enc_bwd}, {"dec.", &w.dec}}) {
      ATTNFLOW_RETURN_IF_ERROR(cf.Fields(p, {{"w_ih", true, &g->w_ih}, {"w_hh", true, &g->w_hh},
                                             {"b_ih", false, &g->b_ih}, {"b_hh", false, &g->b_hh}}));
    }
    ATTNFLOW_RETURN_IF_ERROR(cf.Fields("", {{"w_init", true, &w.w_init},
                                            {"b_init", false, &w.b_init},
                                            {"align.w_s", true, &w.align.w_s},
                                            {"align.w_h", true, &w.align.w_h},
                                            {"align.b", false, &w.align.b},
                                            {"align.v", true, &w.align.v}}));
    TensorView src, prev;
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("src", true, &src));
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("prev_targets", true, &prev));
    return BahdanauSeq2Seq(TensorView(), TensorView(), src, prev, w, rec);
  }
  if (kind == "nn_vit") {
    VitConfig vc;
    int64_t layers = 0;
    ATTNFLOW_RETURN_IF_ERROR(c.Int("patch_size", &vc.patch_size, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("num_heads", &vc.num_heads, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("pos_grid", &vc.pos_grid, true));
    ATTNFLOW_RETURN_IF_ERROR(c.Num("norm_eps", &vc.norm_eps));
    ATTNFLOW_RETURN_IF_ERROR(c.Bool("interpolate_pos_encoding", &vc.interpolate_pos_encoding));
    // The position-interpolation rule (nn_vit.h). Absent: "scale_factor",
    // the only rule of the cases written before the key existed (made with
    // transformers 4.35, tools/golden/make_nn_cases.py).
    vc.pos_interpolation = PosInterpolation::kScaleFactor;
    ATTNFLOW_RETURN_IF_ERROR(c.Enum("pos_interpolation", &vc.pos_interpolation,
                                    &ParsePosInterpolation, "\"size\" or \"scale_factor\""));
    ATTNFLOW_RETURN_IF_ERROR(c.Int("num_layers", &layers, true));
    if (layers < 0 || layers > 64) {
      return Corrupt(Where(cf.path, "config 'num_layers' must be in [0, 64]"));
    }
    VitWeights w;
    w.layers.resize(static_cast<size_t>(layers));
    for (int64_t i = 0; i < layers; ++i)
      ATTNFLOW_RETURN_IF_ERROR(cf.BlockW("layer." + std::to_string(i) + ".", &w.layers[i]));
    ATTNFLOW_RETURN_IF_ERROR(cf.Fields("", {{"patch.weight", true, &w.patch_w},
                                            {"patch.bias", true, &w.patch_b},
                                            {"cls", true, &w.cls},
                                            {"pos_table", true, &w.pos}}));
    ATTNFLOW_RETURN_IF_ERROR(cf.NormW("final_norm.", &w.final_norm));
    TensorView pixels;
    ATTNFLOW_RETURN_IF_ERROR(cf.Get("pixels", true, &pixels));
    return Vit(TensorView(), pixels, w, vc, rec);
  }
  return Corrupt(Where(cf.path, "metadata 'kind': \"" + kind + "\" is not an nn kind"));
}

struct Parsed {
  std::string kind;
  json config;
  std::vector<std::string> stages;
  double atol = kGoldenDefaultTol, rtol = kGoldenDefaultTol;
};

Status ParseMeta(const SafetensorsFile& f, Parsed* p) {
  const std::string& path = f.path();
  const auto& meta = f.metadata();
  auto it = meta.find("format");
  if (it == meta.end() || it->second != kGoldenFormatV1) {
    return Corrupt(Where(path, "metadata 'format': expected \"" + std::string(kGoldenFormatV1) + "\""));
  }
  it = meta.find("kind");
  if (it == meta.end()) return Corrupt(Where(path, "metadata 'kind': missing"));
  p->kind = it->second;
  if (!IsNnGoldenKind(p->kind)) {
    return Corrupt(Where(path, "metadata 'kind': \"" + p->kind + "\" is not an nn kind"));
  }
  it = meta.find("config");
  if (it == meta.end()) return Corrupt(Where(path, "metadata 'config': missing (JSON object)"));
  p->config = json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (p->config.is_discarded() || !p->config.is_object()) {
    return Corrupt(Where(path, "metadata 'config': not a JSON object"));
  }
  it = meta.find("stages");
  if (it == meta.end() || it->second.empty()) {
    return Corrupt(Where(path, "metadata 'stages': missing (comma-separated stage list)"));
  }
  size_t start = 0;
  const std::string& s = it->second;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string name = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty()) return Corrupt(Where(path, "metadata 'stages': empty stage name in \"" + s + "\""));
    if (!f.Has(name)) return Corrupt(Where(path, "stage '" + name + "': listed but not in the file"));
    const SafetensorsTensorInfo* info = f.Find(name);
    if (info->dtype != DType::kF32 && info->dtype != DType::kF64) {
      return Corrupt(Where(path, "stage '" + name + "': dtype " + DTypeName(info->dtype) + ", expected F32"));
    }
    p->stages.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  for (auto [key, dst] : {std::pair<const char*, double*>{"atol", &p->atol}, {"rtol", &p->rtol}}) {
    auto t = meta.find(key);
    if (t == meta.end()) continue;
    char* end = nullptr;
    const double v = std::strtod(t->second.c_str(), &end);
    if (t->second.empty() || end != t->second.c_str() + t->second.size() || !(v >= 0) ||
        !std::isfinite(v)) {
      return Corrupt(Where(path, std::string("metadata '") + key + "': \"" + t->second +
                                     "\" is not a non-negative decimal"));
    }
    *dst = v;
  }
  return Status::Ok();
}

}  // namespace

const std::vector<std::string>& NnGoldenKinds() {
  static const std::vector<std::string> k = {
      "nn_sinusoidal", "nn_learned_pos", "nn_rope",  "nn_t5_bias",   "nn_block",
      "nn_decoder_layer", "nn_transformer", "nn_align", "nn_transfo_xl", "nn_vit", "nn_bahdanau"};
  return k;
}

bool IsNnGoldenKind(std::string_view kind) {
  for (const auto& k : NnGoldenKinds())
    if (k == kind) return true;
  return false;
}

Status RunNnCase(const SafetensorsFile& file, StageRecorder* rec) {
  Parsed p;
  ATTNFLOW_RETURN_IF_ERROR(ParseMeta(file, &p));
  CaseFile cf{file, file.path()};
  Cfg c(&p.config, file.path(), "");
  ATTNFLOW_RETURN_IF_ERROR(AsCorrupt(file.path(), RunKind(p.kind, c, cf, rec)));
  return rec->status();
}

Result<CaseReport> VerifyNnCase(const SafetensorsFile& file, double atol, double rtol) {
  Parsed p;
  ATTNFLOW_RETURN_IF_ERROR(ParseMeta(file, &p));
  if (atol >= 0) p.atol = atol;
  if (rtol >= 0) p.rtol = rtol;
  std::vector<std::string> only = p.stages;
  StageRecorder rec(only);
  CaseFile cf{file, file.path()};
  Cfg c(&p.config, file.path(), "");
  ATTNFLOW_RETURN_IF_ERROR(AsCorrupt(file.path(), RunKind(p.kind, c, cf, &rec)));
  if (!rec.status().ok()) return rec.status();
  CaseReport rep;
  rep.path = file.path();
  rep.kind = p.kind;
  rep.implementation = "reference";
  for (const auto& s : p.stages) {
    const Tensor* got = rec.Find(s);
    if (got == nullptr) {
      // A listed stage the reference does not produce is a failure, not a skip.
      StageReport r;
      r.stage = s;
      r.compared = true;
      r.match = false;
      r.note = "not produced by the reference";
      rep.stages.push_back(r);
      continue;
    }
    Result<TensorView> exp = file.Get(s);
    if (!exp.ok()) return exp.status();
    rep.stages.push_back(CompareStage(s, got->view(), exp.value(), p.atol, p.rtol));
  }
  return rep;
}

Result<CaseReport> VerifyNnCaseFile(const std::string& path, double atol, double rtol) {
  Result<SafetensorsFile> f = SafetensorsFile::Open(path, kGoldenMaxHeaderBytes);
  if (!f.ok()) return f.status();
  return VerifyNnCase(f.value(), atol, rtol);
}

}  // namespace attnflow::nn
