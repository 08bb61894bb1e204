// mha.cc — float64 reference of torch.nn.MultiheadAttention (batch first)
// with GQA projections, built on reference::Sdpa.
//
//   q = x_q·w_qᵀ + b_q  [B,Lq,E]   -> heads [B,H,Lq,Dh],   Dh = E/H
//   k = x_k·w_kᵀ + b_k  [B,Lk,Hkv·Dh] -> [B,Hkv,Lk,Dh]   (same for v)
//   heads_out = sdpa(q,k,v)           [B,H,Lq,Dh]
//   concat[b,i,h·Dh+c] = heads_out[b,h,i,c]
//   out = concat·w_oᵀ + b_o           [B,Lq,E]
// Head h of a projection is its rows h·Dh … (h+1)·Dh−1 of the weight.
#include <string>

#include "attnflow/attention.h"
#include "attnflow/reference.h"

namespace attnflow {
namespace reference {
namespace {

Status CheckMatrix(const char* name, const TensorView& t, int64_t rows,
                   int64_t cols, bool optional) {
  if (t.empty_view()) {
    if (optional) return Status::Ok();
    return InvalidArgument(std::string("reference::mha: ") + name + " is required");
  }
  const bool is_vec = cols < 0;
  const bool ok = is_vec ? (t.rank == 1 && t.shape[0] == rows)
                         : (t.rank == 2 && t.shape[0] == rows && t.shape[1] == cols);
  if (!ok || !IsFloat(t.dtype)) {
    return InvalidArgument(std::string("reference::mha: ") + name + " is " +
                           t.describe() + ", expected float " +
                           (is_vec ? ShapeString({rows}) : ShapeString({rows, cols})));
  }
  if (t.numel() > 0 && t.data == nullptr) {
    return InvalidArgument(std::string("reference::mha: ") + name + " has no data");
  }
  return Status::Ok();
}

// y[b,l,r] = sum_c x[b,l,c]·w[r,c] + bias[r], then split into heads:
// dst[b, r / Dh, l, r % Dh].
void ProjectHeads(const TensorView& x, const TensorView& w, const TensorView& bias,
                  int64_t heads, int64_t dh, Tensor* dst) {
  const int64_t B = x.shape[0], L = x.shape[1], E = x.shape[2];
  double* o = dst->data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t r = 0; r < heads * dh; ++r) {
        double acc = bias.empty_view() ? 0.0 : bias.load(r * bias.strides[0]);
        for (int64_t c = 0; c < E; ++c)
          acc += x.load(x.offset(b, l, c)) * w.load(w.offset(r, c));
        o[((b * heads + r / dh) * L + l) * dh + r % dh] = acc;
      }
}

}  // namespace

Status ValidateMha(const TensorView& out, const TensorView& x_q, const TensorView& x_k,
                   const TensorView& x_v, const MhaWeights& w, const SdpaOptions& opt) {
  const char* op = "reference::mha";
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"x_q", &x_q},
                                {"x_k", &x_k}, {"x_v", &x_v}}) {
    if (t->rank != 3 || !IsFloat(t->dtype)) {
      return InvalidArgument(std::string(op) + ": " + name + " is " + t->describe() +
                             ", expected float rank 3 [B,L,E]");
    }
    if (t->numel() > 0 && t->data == nullptr) {
      return InvalidArgument(std::string(op) + ": " + name + " has no data");
    }
  }
  const int64_t B = x_q.shape[0], Lq = x_q.shape[1], E = x_q.shape[2];
  const int64_t Lk = x_k.shape[1];
  const std::string shapes = "x_q " + x_q.shape_string() + ", x_k " +
                             x_k.shape_string() + ", x_v " + x_v.shape_string();
  if (x_k.shape[0] != B || x_v.shape[0] != B || x_k.shape[2] != E ||
      x_v.shape[2] != E || x_v.shape[1] != Lk) {
    return InvalidArgument(std::string(op) + ": inputs disagree on B, Lk or E: " + shapes);
  }
  const int64_t H = w.num_heads;
  const int64_t Hkv = w.num_kv_heads == 0 ? H : w.num_kv_heads;
  if (H <= 0 || Hkv <= 0 || H % Hkv != 0) {
    return InvalidArgument(std::string(op) + ": num_heads=" + std::to_string(H) +
                           " must be a positive multiple of num_kv_heads=" +
                           std::to_string(Hkv));
  }
  if (E % H != 0) {
    return InvalidArgument(std::string(op) + ": embed dim E=" + std::to_string(E) +
                           " is not divisible by num_heads=" + std::to_string(H));
  }
  const int64_t Dh = E / H, Ekv = Hkv * Dh;
  ATTNFLOW_RETURN_IF_ERROR(CheckMatrix("w_q", w.w_q, E, E, false));
  ATTNFLOW_RETURN_IF_ERROR(CheckMatrix("w_k", w.w_k, Ekv, E, false));
  ATTNFLOW_RETURN_IF_ERROR(CheckMatrix("w_v", w.w_v, Ekv, E, false));
  ATTNFLOW_RETURN_IF_ERROR(CheckMatrix("w_o", w.w_o, E, E, false));
  ATTNFLOW_RETURN_IF_ERROR(CheckMatrix("b_q", w.b_q, E, -1, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckMatrix("b_k", w.b_k, Ekv, -1, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckMatrix("b_v", w.b_v, Ekv, -1, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckMatrix("b_o", w.b_o, E, -1, true));
  if (!out.empty_view()) {
    if (out.rank != 3 || out.shape[0] != B || out.shape[1] != Lq || out.shape[2] != E ||
        (out.dtype != DType::kF32 && out.dtype != DType::kF64)) {
      return InvalidArgument(std::string(op) + ": out is " + out.describe() +
                             ", expected F32/F64 " + ShapeString({B, Lq, E}));
    }
  }

  // Masks, kv_lens, windows and slopes: the SDPA rules on the projected
  // shapes. The q/k/v stand-ins carry shapes only; ValidateSdpa never reads
  // q/k/v elements (it only requires a non-null pointer when non-empty).
  static double stand_in = 0.0;
  const TensorView q_shape = MakeView(&stand_in, DType::kF64, {B, H, Lq, Dh});
  const TensorView k_shape = MakeView(&stand_in, DType::kF64, {B, Hkv, Lk, Dh});
  return ValidateSdpa(op, TensorView(), TensorView(), q_shape, k_shape, k_shape, opt, nullptr);
}

Status Mha(const TensorView& out, const TensorView& x_q, const TensorView& x_k,
           const TensorView& x_v, const MhaWeights& w, const SdpaOptions& opt,
           StageSink* sink) {
  ATTNFLOW_RETURN_IF_ERROR(ValidateMha(out, x_q, x_k, x_v, w, opt));
  const int64_t B = x_q.shape[0], Lq = x_q.shape[1], E = x_q.shape[2];
  const int64_t Lk = x_k.shape[1];
  const int64_t H = w.num_heads;
  const int64_t Hkv = w.num_kv_heads == 0 ? H : w.num_kv_heads;
  const int64_t Dh = E / H;
  Result<Tensor> q = Tensor::Zeros(DType::kF64, {B, H, Lq, Dh});
  Result<Tensor> k = Tensor::Zeros(DType::kF64, {B, Hkv, Lk, Dh});
  Result<Tensor> v = Tensor::Zeros(DType::kF64, {B, Hkv, Lk, Dh});
  Result<Tensor> heads = Tensor::Zeros(DType::kF64, {B, H, Lq, Dh});
  Result<Tensor> concat = Tensor::Zeros(DType::kF64, {B, Lq, E});
  Result<Tensor> o = Tensor::Zeros(DType::kF64, {B, Lq, E});
  for (auto* r : {&q, &k, &v, &heads, &concat, &o})
    if (!r->ok()) return r->status();

  ProjectHeads(x_q, w.w_q, w.b_q, H, Dh, &q.value());
  ProjectHeads(x_k, w.w_k, w.b_k, Hkv, Dh, &k.value());
  ProjectHeads(x_v, w.w_v, w.b_v, Hkv, Dh, &v.value());
  if (sink != nullptr) {
    if (sink->Wants("q")) sink->Put("q", q->view());
    if (sink->Wants("k")) sink->Put("k", k->view());
    if (sink->Wants("v")) sink->Put("v", v->view());
  }
  RenamingSink renaming(sink, RenamingSink::OutAsHeadsOut);
  // The SDPA options were validated on these shapes by ValidateMha, so
  // errors already name reference::mha.
  ATTNFLOW_RETURN_IF_ERROR(Sdpa(heads->view(), TensorView(), q->view(), k->view(),
                                v->view(), opt, sink ? &renaming : nullptr));
  const double* hp = heads->data<double>();
  double* cp = concat->data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t c = 0; c < Dh; ++c)
          cp[(b * Lq + i) * E + h * Dh + c] = hp[((b * H + h) * Lq + i) * Dh + c];
  double* op_ = o->data<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Lq; ++i)
      for (int64_t r = 0; r < E; ++r) {
        double acc = w.b_o.empty_view() ? 0.0 : w.b_o.load(r * w.b_o.strides[0]);
        for (int64_t c = 0; c < E; ++c)
          acc += cp[(b * Lq + i) * E + c] * w.w_o.load(w.w_o.offset(r, c));
        op_[(b * Lq + i) * E + r] = acc;
      }
  if (sink != nullptr) {
    if (sink->Wants("concat")) sink->Put("concat", concat->view());
    if (sink->Wants("out")) sink->Put("out", o->view());
  }
  if (!out.empty_view()) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < Lq; ++i)
        for (int64_t r = 0; r < E; ++r)
          out.store(out.offset(b, i, r), op_[(b * Lq + i) * E + r]);
  }
  return Status::Ok();
}

}  // namespace reference
}  // namespace attnflow
