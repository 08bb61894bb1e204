// nn/bahdanau.cc — GRU and the Bahdanau encoder–decoder loop in float64
// (equations in attnflow/nn_align.h).
//
// Invariants: shapes are validated before any arithmetic (errors name the
// op and the tensor); the GRU follows torch's gate order (r, z, n) and puts
// b_hn inside the reset product, as torch does; each decoder step aligns
// through nn::Align (additive), so the alignment rules (softmax over the
// source, context = Σ α·h) are the ones of the one-step op.
#include <cmath>
#include <string>
#include <utility>

#include "attnflow/nn_align.h"
#include "nn/internal.h"

namespace attnflow::nn {
using namespace internal;  // NOLINT: the helpers of this module
namespace {

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// The float64 copies of one GRU's weights, checked against In and H.
struct Gru64 {
  Tensor w_ih, w_hh, b_ih, b_hh;
  int64_t in = 0, hidden = 0;

  Status Load(const char* op, const char* name, const GruWeights& w, int64_t in_dim) {
    const std::string n(name);
    ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, (n + ".w_hh").c_str(), w.w_hh, {-1, -1}));
    hidden = w.w_hh.shape[1];
    in = in_dim;
    if (w.w_hh.shape[0] != 3 * hidden) {
      return InvalidArgument(std::string(op) + ": " + n + ".w_hh is " + w.w_hh.describe() +
                             ", expected [3H, H]");
    }
    ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, (n + ".w_ih").c_str(), w.w_ih, {3 * hidden, in}));
    ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, (n + ".b_ih").c_str(), w.b_ih, {3 * hidden}, true));
    ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, (n + ".b_hh").c_str(), w.b_hh, {3 * hidden}, true));
    for (auto [dst, src] : {std::pair<Tensor*, const TensorView*>{&w_ih, &w.w_ih},
                            {&w_hh, &w.w_hh}, {&b_ih, &w.b_ih}, {&b_hh, &w.b_hh}}) {
      if (!HasView(*src)) continue;
      Result<Tensor> t = ToF64(*src);
      if (!t.ok()) return t.status();
      *dst = std::move(t).value();
    }
    return Status::Ok();
  }

  // h' from x [in] and h [hidden] (one batch row).
  void Step(double* out, const double* x, const double* h) const {
    const int64_t Hn = hidden;
    for (int64_t u = 0; u < Hn; ++u) {
      double gi[3], gh[3];
      for (int g = 0; g < 3; ++g) {
        const int64_t row = g * Hn + u;
        double a = b_ih.defined() ? P(b_ih)[row] : 0.0;
        for (int64_t i = 0; i < in; ++i) a += P(w_ih)[row * in + i] * x[i];
        double c = b_hh.defined() ? P(b_hh)[row] : 0.0;
        for (int64_t i = 0; i < Hn; ++i) c += P(w_hh)[row * Hn + i] * h[i];
        gi[g] = a;
        gh[g] = c;
      }
      const double r = Sigmoid(gi[0] + gh[0]);
      const double z = Sigmoid(gi[1] + gh[1]);
      const double n = std::tanh(gi[2] + r * gh[2]);
      out[u] = (1.0 - z) * n + z * h[u];
    }
  }
};

// Runs g over x64 [B, L, In] into out64 [B, L, H].
void RunGru(double* out64, const double* x64, const double* h0, const Gru64& g, int64_t B,
            int64_t L, bool reverse) {
  const int64_t Hn = g.hidden, In = g.in;
  std::vector<double> h(static_cast<size_t>(Hn));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t u = 0; u < Hn; ++u) h[u] = h0 != nullptr ? h0[b * Hn + u] : 0.0;
    for (int64_t k = 0; k < L; ++k) {
      const int64_t t = reverse ? L - 1 - k : k;
      g.Step(out64 + (b * L + t) * Hn, x64 + (b * L + t) * In, h.data());
      for (int64_t u = 0; u < Hn; ++u) h[u] = out64[(b * L + t) * Hn + u];
    }
  }
}

}  // namespace

Status Gru(const TensorView& out, const TensorView& x, const TensorView& h0, const GruWeights& w,
           bool reverse) {
  const char* op = "gru";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "x", x, {-1, -1, -1}));
  const int64_t B = x.shape[0], L = x.shape[1];
  Gru64 g;
  ATTNFLOW_RETURN_IF_ERROR(g.Load(op, "gru", w, x.shape[2]));
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "h0", h0, {B, g.hidden}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, {B, L, g.hidden}));
  Result<Tensor> xf = ToF64(x);
  Result<Tensor> o = F64Zeros({B, L, g.hidden});
  if (!xf.ok()) return xf.status();
  if (!o.ok()) return o.status();
  Tensor hf;
  if (HasView(h0)) {
    Result<Tensor> t = ToF64(h0);
    if (!t.ok()) return t.status();
    hf = std::move(t).value();
  }
  RunGru(P(o.value()), P(xf.value()), hf.defined() ? P(hf) : nullptr, g, B, L, reverse);
  StoreTo(out, o.value());
  return Status::Ok();
}

Status BahdanauSeq2Seq(const TensorView& alignment, const TensorView& states,
                       const TensorView& src, const TensorView& prev_targets,
                       const BahdanauWeights& w, StageSink* sink) {
  const char* op = "bahdanau";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "src", src, {-1, -1, -1}));
  const int64_t B = src.shape[0], S = src.shape[1];
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "prev_targets", prev_targets, {B, -1, -1}));
  const int64_t T = prev_targets.shape[1], Ey = prev_targets.shape[2];
  Gru64 fwd, bwd, dec;
  ATTNFLOW_RETURN_IF_ERROR(fwd.Load(op, "enc_fwd", w.enc_fwd, src.shape[2]));
  ATTNFLOW_RETURN_IF_ERROR(bwd.Load(op, "enc_bwd", w.enc_bwd, src.shape[2]));
  const int64_t Hs = fwd.hidden, Dh = 2 * Hs;
  if (bwd.hidden != Hs) {
    return InvalidArgument(std::string(op) + ": encoder directions have " +
                           std::to_string(Hs) + " and " + std::to_string(bwd.hidden) +
                           " hidden units");
  }
  ATTNFLOW_RETURN_IF_ERROR(dec.Load(op, "dec", w.dec, Ey + Dh));
  const int64_t Ds = dec.hidden;
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "w_init", w.w_init, {Ds, Hs}));
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "b_init", w.b_init, {Ds}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "alignment", alignment, {B, T, S}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "states", states, {B, T, Ds}, true));

  // Encoder: both directions, concatenated per position.
  Result<Tensor> xs = ToF64(src), ys = ToF64(prev_targets);
  if (!xs.ok()) return xs.status();
  if (!ys.ok()) return ys.status();
  Result<Tensor> hf = F64Zeros({B, S, Hs}), hb = F64Zeros({B, S, Hs}), h = F64Zeros({B, S, Dh});
  for (auto* t : {&hf, &hb, &h})
    if (!t->ok()) return t->status();
  RunGru(P(hf.value()), P(xs.value()), nullptr, fwd, B, S, false);
  RunGru(P(hb.value()), P(xs.value()), nullptr, bwd, B, S, true);
  for (int64_t n = 0; n < B * S; ++n)
    for (int64_t u = 0; u < Hs; ++u) {
      P(h.value())[n * Dh + u] = P(hf.value())[n * Hs + u];
      P(h.value())[n * Dh + Hs + u] = P(hb.value())[n * Hs + u];
    }
  Emit(sink, "enc_states", h.value());

  // s_0 = tanh(W_init·←h_1 + b_init).
  Linear init;
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "w_init", w.w_init, w.b_init, Ds, Hs, &init));
  Result<Tensor> back0 = F64Zeros({B, Hs});
  if (!back0.ok()) return back0.status();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t u = 0; u < Hs; ++u) P(back0.value())[b * Hs + u] = P(hb.value())[b * S * Hs + u];
  Result<Tensor> s = Apply(init, back0.value(), {B, Ds});
  if (!s.ok()) return s.status();
  for (int64_t n = 0; n < B * Ds; ++n) P(s.value())[n] = std::tanh(P(s.value())[n]);
  Emit(sink, "s0", s.value());

  Result<Tensor> energy = F64Zeros({B, T, S}), align = F64Zeros({B, T, S});
  Result<Tensor> ctx = F64Zeros({B, T, Dh}), st = F64Zeros({B, T, Ds});
  Result<Tensor> step_s = F64Zeros({B, 1, Ds}), step_a = F64Zeros({B, 1, S});
  Result<Tensor> step_c = F64Zeros({B, 1, Dh});
  for (auto* t : {&energy, &align, &ctx, &st, &step_s, &step_a, &step_c})
    if (!t->ok()) return t->status();
  std::vector<double> in(static_cast<size_t>(Ey + Dh)), next(static_cast<size_t>(Ds));
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t n = 0; n < B * Ds; ++n) P(step_s.value())[n] = P(s.value())[n];
    // One alignment per step, from s_{i−1}; the step's energy is recorded.
    StageRecorder rec;
    ATTNFLOW_RETURN_IF_ERROR(Wrap(op, Align(step_c->view(), step_a->view(), step_s->view(),
                                            h->view(), w.align, AlignScore::kAdditive,
                                            TensorView(), &rec)));
    const Tensor* e = rec.Find("energy");
    if (e == nullptr || e->dtype() != DType::kF64) {
      return Corrupt(std::string(op) + ": the alignment step reported no float64 energy");
    }
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < S; ++j) {
        P(energy.value())[(b * T + i) * S + j] = e->data<double>()[b * S + j];
        P(align.value())[(b * T + i) * S + j] = P(step_a.value())[b * S + j];
      }
      for (int64_t c = 0; c < Dh; ++c)
        P(ctx.value())[(b * T + i) * Dh + c] = P(step_c.value())[b * Dh + c];
      // s_i = GRU([y_{i−1} ; c_i], s_{i−1}).
      for (int64_t k = 0; k < Ey; ++k) in[k] = P(ys.value())[(b * T + i) * Ey + k];
      for (int64_t c = 0; c < Dh; ++c) in[Ey + c] = P(step_c.value())[b * Dh + c];
      dec.Step(next.data(), in.data(), P(s.value()) + b * Ds);
      for (int64_t u = 0; u < Ds; ++u) {
        P(s.value())[b * Ds + u] = next[u];
        P(st.value())[(b * T + i) * Ds + u] = next[u];
      }
    }
  }
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"energy", &energy.value()},
                         {"alignment", &align.value()}, {"context", &ctx.value()},
                         {"states", &st.value()}}) {
    Emit(sink, name, *t);
  }
  StoreTo(alignment, align.value());
  StoreTo(states, st.value());
  return Status::Ok();
}

}  // namespace attnflow::nn
