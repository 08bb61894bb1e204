// nn/internal.cc — argument checks, float64 copies and the dense matmul used
// by every src/nn reference. See internal.h for the invariants.
#include "nn/internal.h"

#include <cstring>

namespace attnflow::nn::internal {
namespace {

bool DimsMatch(const TensorView& t, const std::vector<int64_t>& dims) {
  if (t.rank != static_cast<int>(dims.size())) return false;
  for (int i = 0; i < t.rank; ++i)
    if (dims[i] >= 0 && t.shape[i] != dims[i]) return false;
  return true;
}

Status Check(const char* op, const char* name, const TensorView& t,
             const std::vector<int64_t>& dims, bool optional, const char* kind,
             bool (*dtype_ok)(DType)) {
  if (t.empty_view()) {
    if (optional) return Status::Ok();
    return InvalidArgument(std::string(op) + ": " + name + " is required (expected " +
                           kind + " " + Str(dims) + ")");
  }
  if (!dtype_ok(t.dtype) || !DimsMatch(t, dims)) {
    return InvalidArgument(std::string(op) + ": " + name + " is " + t.describe() +
                           ", expected " + kind + " " + Str(dims));
  }
  if (t.numel() > 0 && t.data == nullptr) {
    return InvalidArgument(std::string(op) + ": " + name + " " + t.describe() +
                           " has no data");
  }
  return Status::Ok();
}

bool FloatOk(DType d) { return IsFloat(d); }
bool IndexOk(DType d) { return d == DType::kI64 || d == DType::kI32; }
bool BoolOk(DType d) { return d == DType::kBool; }
bool OutOk(DType d) { return d == DType::kF32 || d == DType::kF64; }

}  // namespace

std::string Str(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i] < 0 ? std::string("*") : std::to_string(dims[i]);
  }
  return s + "]";
}

Status CheckFloat(const char* op, const char* name, const TensorView& t,
                  std::vector<int64_t> dims, bool optional) {
  return Check(op, name, t, dims, optional, "float", FloatOk);
}
Status CheckIndex(const char* op, const char* name, const TensorView& t,
                  std::vector<int64_t> dims, bool optional) {
  return Check(op, name, t, dims, optional, "I64/I32", IndexOk);
}
Status CheckBool(const char* op, const char* name, const TensorView& t,
                 std::vector<int64_t> dims, bool optional) {
  return Check(op, name, t, dims, optional, "BOOL", BoolOk);
}
Status CheckOut(const char* op, const char* name, const TensorView& t,
                const std::vector<int64_t>& dims, bool optional) {
  return Check(op, name, t, dims, optional, "F32/F64", OutOk);
}

Result<Tensor> F64Zeros(const Shape& shape) { return Tensor::Zeros(DType::kF64, shape); }

Result<Tensor> SumT(const Tensor& a, const Tensor& b) {
  Result<Tensor> r = Tensor::FromView(a.view());
  if (!r.ok()) return r;
  const int64_t n = a.numel();
  for (int64_t i = 0; i < n; ++i) P(r.value())[i] += P(b)[i];
  return r;
}

Status CheckRowwise(const char* op, const TensorView& out, const TensorView& x) {
  if (x.rank < 1 || x.rank > 4 || !IsFloat(x.dtype)) {
    return InvalidArgument(std::string(op) + ": x is " + x.describe() + ", expected float rank 1..4");
  }
  return CheckOut(op, "out", out, std::vector<int64_t>(x.shape.begin(), x.shape.begin() + x.rank));
}

Result<Tensor> ToF64(const TensorView& v) {
  Shape shape(v.shape.begin(), v.shape.begin() + v.rank);
  Result<Tensor> r = F64Zeros(shape);
  if (!r.ok()) return r;
  double* p = P(r.value());
  const int64_t n = v.numel();
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    p[e] = v.load(v.offset(idx[0], idx[1], idx[2], idx[3]));
    for (int d = v.rank - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

void StoreTo(const TensorView& out, const Tensor& t) {
  if (out.empty_view()) return;
  const double* p = P(t);
  const int64_t n = out.numel();
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    out.store(out.offset(idx[0], idx[1], idx[2], idx[3]), p[e]);
    for (int d = out.rank - 1; d >= 0; --d) {
      if (++idx[d] < out.shape[d]) break;
      idx[d] = 0;
    }
  }
}

void MatMulWT(double* y, const double* x, const double* w, const double* b,
              int64_t rows, int64_t in, int64_t out) {
  for (int64_t r = 0; r < rows; ++r) {
    const double* xr = x + r * in;
    for (int64_t o = 0; o < out; ++o) {
      const double* wo = w + o * in;
      double acc = b != nullptr ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) acc += xr[i] * wo[i];
      y[r * out + o] = acc;
    }
  }
}

Status LoadLinear(const char* op, const char* name, const TensorView& w,
                  const TensorView& b, int64_t out, int64_t in, Linear* lin) {
  const std::string wn = std::string(name) + " weight";
  const std::string bn = std::string(name) + " bias";
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, wn.c_str(), w, {out, in}));
  ATTNFLOW_RETURN_IF_ERROR(CheckFloat(op, bn.c_str(), b, {out}, /*optional=*/true));
  Result<Tensor> wt = ToF64(w);
  if (!wt.ok()) return wt.status();
  lin->w = std::move(wt).value();
  if (!b.empty_view()) {
    Result<Tensor> bt = ToF64(b);
    if (!bt.ok()) return bt.status();
    lin->b = std::move(bt).value();
  } else {
    lin->b = Tensor();
  }
  lin->out = out;
  lin->in = in;
  return Status::Ok();
}

Result<Tensor> Apply(const Linear& lin, const Tensor& x, const Shape& out_shape) {
  Result<Tensor> y = F64Zeros(out_shape);
  if (!y.ok()) return y;
  const int64_t rows = lin.in == 0 ? 0 : x.numel() / lin.in;
  MatMulWT(P(y.value()), P(x), P(lin.w), lin.bias(), rows, lin.in, lin.out);
  return y;
}

}  // namespace attnflow::nn::internal
