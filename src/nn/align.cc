// nn/align.cc — float64 Bahdanau (additive) and Luong (dot, general)
// alignment of decoder states over encoder states. Formulas: nn_align.h.
//
// Invariants: the alignment rows sum to 1 over valid source positions (or
// are all 0 when none is valid); invalid positions get exactly 0; the
// context is the alignment-weighted sum of the encoder states.
#include <cmath>
#include <string>

#include "attnflow/nn_align.h"
#include "nn/internal.h"

namespace attnflow::nn {
using namespace internal;  // NOLINT: the helpers of this module

Status Align(const TensorView& context, const TensorView& alignment, const TensorView& s,
             const TensorView& h, const AlignWeights& w, AlignScore score,
             const TensorView& key_mask, StageSink* sink) {
  const char* op = "align";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "s", s, {-1, -1, -1}));
  const int64_t B = s.shape[0], T = s.shape[1], Ds = s.shape[2];
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "h", h, {B, -1, -1}));
  const int64_t S = h.shape[1], Dh = h.shape[2];
  ATTNFLOW_RETURN_IF_ERROR(CheckBool(op, "key_mask", key_mask, {B, S}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "context", context, {B, T, Dh}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "alignment", alignment, {B, T, S}, true));
  Result<Tensor> sf = ToF64(s), hf = ToF64(h);
  if (!sf.ok()) return sf.status();
  if (!hf.ok()) return hf.status();
  Result<Tensor> energy = F64Zeros({B, T, S});
  if (!energy.ok()) return energy.status();
  double* ep = P(energy.value());
  const double* sp = P(sf.value());
  const double* hp = P(hf.value());
  // energy[b, t, j] = e(b, t, j) for every decoder step t and source j.
  auto fill = [&](auto&& e) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < S; ++j) ep[(b * T + t) * S + j] = e(b, t, j);
  };

  if (score == AlignScore::kAdditive) {
    if (w.w_s.rank != 2) {
      return InvalidArgument(std::string(op) + ": additive w_s is " + w.w_s.describe() +
                             ", expected float [A," + std::to_string(Ds) + "]");
    }
    const int64_t A = w.w_s.shape[0];
    Linear ls, lh;
    ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "w_s", w.w_s, w.b, A, Ds, &ls));
    ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "w_h", w.w_h, TensorView(), A, Dh, &lh));
    ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "v", w.v, {A}));
    Result<Tensor> vv = ToF64(w.v);
    if (!vv.ok()) return vv.status();
    Result<Tensor> ps = Apply(ls, sf.value(), {B, T, A});  // W_s·s + b
    Result<Tensor> ph = Apply(lh, hf.value(), {B, S, A});  // W_h·h
    if (!ps.ok()) return ps.status();
    if (!ph.ok()) return ph.status();
    fill([&](int64_t b, int64_t t, int64_t j) {  // v·tanh(W_s·s_t + b + W_h·h_j)
      double acc = 0.0;
      for (int64_t a = 0; a < A; ++a)
        acc += P(vv.value())[a] *
               std::tanh(P(ps.value())[(b * T + t) * A + a] + P(ph.value())[(b * S + j) * A + a]);
      return acc;
    });
  } else if (score == AlignScore::kDot) {
    if (Ds != Dh) {
      return InvalidArgument(std::string(op) + ": dot score needs equal state sizes, s " +
                             s.describe() + ", h " + h.describe());
    }
    fill([&](int64_t b, int64_t t, int64_t j) {  // s_t·h_j
      double acc = 0.0;
      for (int64_t c = 0; c < Dh; ++c) acc += sp[(b * T + t) * Ds + c] * hp[(b * S + j) * Dh + c];
      return acc;
    });
  } else {
    ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "w_a", w.w_a, {Ds, Dh}));
    Result<Tensor> wa = ToF64(w.w_a);
    if (!wa.ok()) return wa.status();
    // W_a·h_j [B,S,Ds], then s_t · (W_a·h_j).
    Linear la;
    la.w = std::move(wa).value();
    la.out = Ds;
    la.in = Dh;
    Result<Tensor> wh = Apply(la, hf.value(), {B, S, Ds});
    if (!wh.ok()) return wh.status();
    fill([&](int64_t b, int64_t t, int64_t j) {  // s_t·(W_a·h_j)
      double acc = 0.0;
      for (int64_t c = 0; c < Ds; ++c)
        acc += sp[(b * T + t) * Ds + c] * P(wh.value())[(b * S + j) * Ds + c];
      return acc;
    });
  }
  Emit(sink, "energy", energy.value());

  Result<Tensor> masked = F64Zeros({B, T, S}), align = F64Zeros({B, T, S});
  Result<Tensor> ctx = F64Zeros({B, T, Dh});
  for (auto* r : {&masked, &align, &ctx})
    if (!r->ok()) return r->status();
  double* mp = P(masked.value());
  double* ap = P(align.value());
  double* cp = P(ctx.value());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      double mx = kNegInf;
      for (int64_t j = 0; j < S; ++j) {
        const bool ok = key_mask.empty_view() || key_mask.load(key_mask.offset(b, j)) != 0.0;
        const double e = ok ? ep[(b * T + t) * S + j] : kNegInf;
        mp[(b * T + t) * S + j] = e;
        if (e > mx) mx = e;
      }
      if (mx == kNegInf) continue;  // no valid source position: zeros
      double sum = 0.0;
      for (int64_t j = 0; j < S; ++j) {
        const double m = mp[(b * T + t) * S + j];
        const double a = m == kNegInf ? 0.0 : std::exp(m - mx);
        ap[(b * T + t) * S + j] = a;
        sum += a;
      }
      for (int64_t j = 0; j < S; ++j) {
        const double a = ap[(b * T + t) * S + j] / sum;
        ap[(b * T + t) * S + j] = a;
        if (a == 0.0) continue;
        for (int64_t c = 0; c < Dh; ++c) cp[(b * T + t) * Dh + c] += a * hp[(b * S + j) * Dh + c];
      }
    }
  Emit(sink, "masked", masked.value());
  Emit(sink, "alignment", align.value());
  Emit(sink, "context", ctx.value());
  StoreTo(alignment, align.value());
  StoreTo(context, ctx.value());
  return Status::Ok();
}

}  // namespace attnflow::nn
