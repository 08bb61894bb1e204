// nn/norm_ffn.cc — float64 LayerNorm / RMSNorm and the position-wise
// feed-forward networks (ReLU, GELU exact and tanh, SwiGLU).
//
// Invariants: the last dim is normalised; LayerNorm uses the biased
// variance (as torch.nn.LayerNorm); RMSNorm takes no bias; out may alias x for
// Norm (each row is read completely before it is written).
#include <algorithm>
#include <cmath>
#include <string>

#include "nn/internal.h"

namespace attnflow::nn {
using namespace internal;  // NOLINT: the helpers of this module

namespace {

// Iterates the rows (all but the last dim) of a rank 1..4 view.
template <typename F>
void ForEachRow(const TensorView& t, F&& f) {
  int64_t rows = 1;
  for (int d = 0; d + 1 < t.rank; ++d) rows *= t.shape[d];
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t r = 0; r < rows; ++r) {
    f(r, idx);
    for (int d = t.rank - 2; d >= 0; --d) {
      if (++idx[d] < t.shape[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t ElemOffset(const TensorView& t, const int64_t* idx, int64_t last) {
  int64_t full[4] = {idx[0], idx[1], idx[2], idx[3]};
  full[t.rank - 1] = last;
  return t.offset(full[0], full[1], full[2], full[3]);
}

double Act(Activation a, double x) {
  switch (a) {
    case Activation::kRelu:
      return x > 0 ? x : 0.0;
    case Activation::kGelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case Activation::kGeluTanh: {
      const double c = std::sqrt(2.0 / M_PI);
      return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
    }
    case Activation::kSwiGlu:  // silu (the gate)
      return x / (1.0 + std::exp(-x));
  }
  return x;
}

}  // namespace

Status Norm(const TensorView& out, const TensorView& x, const NormWeights& w, NormKind kind,
            double eps) {
  const char* op = kind == NormKind::kLayerNorm ? "layer_norm" : "rms_norm";
  if (x.rank < 1 || x.rank > 4 || !IsFloat(x.dtype)) {
    return InvalidArgument(std::string(op) + ": x is " + x.describe() +
                           ", expected float rank 1..4 [..., E]");
  }
  if (x.numel() > 0 && x.data == nullptr) {
    return InvalidArgument(std::string(op) + ": x " + x.describe() + " has no data");
  }
  const int64_t E = x.shape[x.rank - 1];
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out,
                                    std::vector<int64_t>(x.shape.begin(), x.shape.begin() + x.rank)));
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "weight", w.weight, {E}, true));
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, "bias", w.bias, {E}, true));
  if (kind == NormKind::kRmsNorm && !w.bias.empty_view()) {
    return InvalidArgument(std::string(op) + ": RMSNorm takes no bias (got " +
                           w.bias.describe() + ")");
  }
  if (!(eps >= 0) || !std::isfinite(eps)) {
    return InvalidArgument(std::string(op) + ": eps must be finite and >= 0, got " +
                           std::to_string(eps));
  }
  std::vector<double> row(static_cast<size_t>(E));
  ForEachRow(x, [&](int64_t, const int64_t* idx) {
    for (int64_t e = 0; e < E; ++e) row[e] = x.load(ElemOffset(x, idx, e));
    double mean = 0.0, denom;
    if (kind == NormKind::kLayerNorm) {
      for (double v : row) mean += v;
      mean /= static_cast<double>(E);
      double var = 0.0;
      for (double v : row) var += (v - mean) * (v - mean);
      var /= static_cast<double>(E);
      denom = std::sqrt(var + eps);
    } else {
      double ms = 0.0;
      for (double v : row) ms += v * v;
      ms /= static_cast<double>(E);
      denom = std::sqrt(ms + eps);
    }
    for (int64_t e = 0; e < E; ++e) {
      double y = (row[e] - mean) / denom;
      if (!w.weight.empty_view()) y *= w.weight.load(e * w.weight.strides[0]);
      if (!w.bias.empty_view()) y += w.bias.load(e * w.bias.strides[0]);
      out.store(ElemOffset(out, idx, e), y);
    }
  });
  return Status::Ok();
}

Status Ffn(const TensorView& out, const TensorView& x, const FfnWeights& w, Activation act,
           StageSink* sink) {
  const char* op = "ffn";
  if (x.rank < 1 || x.rank > 4 || !IsFloat(x.dtype)) {
    return InvalidArgument(std::string(op) + ": x is " + x.describe() +
                           ", expected float rank 1..4 [..., E]");
  }
  const int64_t E = x.shape[x.rank - 1];
  if (w.w_up.rank != 2) {
    return InvalidArgument(std::string(op) + ": up weight is " + w.w_up.describe() +
                           ", expected float [F," + std::to_string(E) + "]");
  }
  const int64_t F = w.w_up.shape[0];
  const Shape xs(x.shape.begin(), x.shape.begin() + x.rank);
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, xs));
  Linear up, gate, down;
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "up", w.w_up, w.b_up, F, E, &up));
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "down", w.w_down, w.b_down, E, F, &down));
  if (IsGated(act)) {
    ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "gate", w.w_gate, w.b_gate, F, E, &gate));
  } else if (!w.w_gate.empty_view()) {
    return InvalidArgument(std::string(op) + ": a gate weight " + w.w_gate.describe() +
                           " was given for the ungated activation " + ActivationName(act));
  }
  Result<Tensor> xf = ToF64(x);
  if (!xf.ok()) return xf.status();
  Shape hs = xs;
  hs.back() = F;
  Result<Tensor> hidden = Apply(up, xf.value(), hs);
  if (!hidden.ok()) return hidden.status();
  double* hp = P(hidden.value());
  const int64_t n = hidden->numel();
  if (IsGated(act)) {
    Result<Tensor> g = Apply(gate, xf.value(), hs);
    if (!g.ok()) return g.status();
    const double* gp = P(g.value());
    for (int64_t i = 0; i < n; ++i) hp[i] = Act(act, gp[i]) * hp[i];
  } else {
    for (int64_t i = 0; i < n; ++i) hp[i] = Act(act, hp[i]);
  }
  Emit(sink, "ffn_hidden", hidden.value());
  Result<Tensor> y = Apply(down, hidden.value(), xs);
  if (!y.ok()) return y.status();
  StoreTo(out, y.value());
  return Status::Ok();
}

// ---- the float64 oracles of ops::Linear, ops::Activate and ops::Softmax ----

Status LinearLayer(const TensorView& out, const TensorView& x, const TensorView& w,
                   const TensorView& b) {
  const char* op = "linear";
  if (x.rank < 1 || x.rank > 4 || !IsFloat(x.dtype)) {
    return InvalidArgument(std::string(op) + ": x is " + x.describe() +
                           ", expected float rank 1..4 [..., in]");
  }
  if (w.rank != 2) {
    return InvalidArgument(std::string(op) + ": weight is " + w.describe() +
                           ", expected float [out, " + std::to_string(x.shape[x.rank - 1]) + "]");
  }
  const int64_t in = x.shape[x.rank - 1], n_out = w.shape[0];
  Shape ys(x.shape.begin(), x.shape.begin() + x.rank);
  ys.back() = n_out;
  ATTNFLOW_RETURN_IF_ERROR(CheckOut(op, "out", out, ys));
  Linear lin;
  ATTNFLOW_RETURN_IF_ERROR(LoadLinear(op, "weight", w, b, n_out, in, &lin));
  Result<Tensor> xf = ToF64(x);
  if (!xf.ok()) return xf.status();
  Result<Tensor> y = Apply(lin, xf.value(), ys);
  if (!y.ok()) return y.status();
  StoreTo(out, y.value());
  return Status::Ok();
}

Status Activate(const TensorView& out, const TensorView& x, Activation act) {
  const char* op = "activate";
  ATTNFLOW_RETURN_IF_ERROR(CheckRowwise(op, out, x));
  const int64_t E = x.shape[x.rank - 1];
  ForEachRow(x, [&](int64_t, const int64_t* idx) {
    for (int64_t e = 0; e < E; ++e) {
      out.store(ElemOffset(out, idx, e), Act(act, x.load(ElemOffset(x, idx, e))));
    }
  });
  return Status::Ok();
}

Status Softmax(const TensorView& out, const TensorView& x) {
  const char* op = "softmax";
  ATTNFLOW_RETURN_IF_ERROR(CheckRowwise(op, out, x));
  const int64_t E = x.shape[x.rank - 1];
  std::vector<double> row(static_cast<size_t>(E));
  ForEachRow(x, [&](int64_t, const int64_t* idx) {
    double m = -INFINITY;
    for (int64_t e = 0; e < E; ++e) {
      row[static_cast<size_t>(e)] = x.load(ElemOffset(x, idx, e));
      m = std::max(m, row[static_cast<size_t>(e)]);
    }
    double sum = 0.0;
    for (double& v : row) {
      v = m == -INFINITY ? 0.0 : std::exp(v - m);  // dead row: all zeros
      sum += v;
    }
    for (int64_t e = 0; e < E; ++e) {
      out.store(ElemOffset(out, idx, e), sum > 0 ? row[static_cast<size_t>(e)] / sum : 0.0);
    }
  });
  return Status::Ok();
}

}  // namespace attnflow::nn
