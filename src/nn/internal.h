// nn/internal.h — helpers shared by the src/nn float64 references: argument
// checks with op-and-shape messages, float64 contiguous copies, a dense
// "x·Wᵀ + b" and stage emission.
//
// Invariants: every helper returns a Status (never throws); F64 buffers are
// contiguous row-major Tensors; a check's message always names the op, the
// tensor and both the actual and the expected shape.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "attnflow/nn.h"

namespace attnflow::nn::internal {

// "[B,L,E]"-style expectation: -1 = any size (also recorded into *got).
// Fails when t is absent and !optional, has another rank, a non-float dtype or
// a mismatching dim. Message: "<op>: <name> is F32[2,3], expected float [2,4]".
Status CheckFloat(const char* op, const char* name, const TensorView& t,
                  std::vector<int64_t> dims, bool optional = false);
// Same for integer index tensors (I64/I32).
Status CheckIndex(const char* op, const char* name, const TensorView& t,
                  std::vector<int64_t> dims, bool optional = false);
// BOOL tensors.
Status CheckBool(const char* op, const char* name, const TensorView& t,
                 std::vector<int64_t> dims, bool optional = false);
// Output views: F32 or F64 of exactly `dims` (absent allowed when optional).
Status CheckOut(const char* op, const char* name, const TensorView& t,
                const std::vector<int64_t>& dims, bool optional = false);

Result<Tensor> F64Zeros(const Shape& shape);
// a + b elementwise (contiguous F64 tensors of one shape), a new tensor.
Result<Tensor> SumT(const Tensor& a, const Tensor& b);
// A row-wise op's input and output: x float of rank 1..4, out of x's shape.
Status CheckRowwise(const char* op, const TensorView& out, const TensorView& x);
// Contiguous float64 copy of any numeric view.
Result<Tensor> ToF64(const TensorView& v);
// Writes a contiguous F64 tensor into an F32/F64 view of the same shape.
void StoreTo(const TensorView& out, const Tensor& t);

inline double* P(const Tensor& t) { return t.data<double>(); }

// y[r, o] = Σ_i x[r, i]·w[o, i] + b[o]; w is [out, in] float64 contiguous,
// b may be null.
void MatMulWT(double* y, const double* x, const double* w, const double* b,
              int64_t rows, int64_t in, int64_t out);

// Loads weight/bias views as F64 (absent stays undefined).
struct Linear {
  Tensor w, b;
  int64_t out = 0, in = 0;
  const double* bias() const { return b.defined() ? P(b) : nullptr; }
};
Status LoadLinear(const char* op, const char* name, const TensorView& w,
                  const TensorView& b, int64_t out, int64_t in, Linear* lin);
// y [rows, out] = x [rows, in]·Wᵀ + b.
Result<Tensor> Apply(const Linear& lin, const Tensor& x, const Shape& out_shape);

inline void Emit(StageSink* sink, std::string_view name, const Tensor& t) {
  if (sink != nullptr && sink->Wants(name)) sink->Put(name, t.view());
}

// Reports t (when it holds a tensor) as stage `name` and passes it on.
inline Result<Tensor> Staged(StageSink* sink, std::string_view name, Result<Tensor> t) {
  if (t.ok()) Emit(sink, name, t.value());
  return t;
}
inline bool HasView(const TensorView& t) { return !t.empty_view(); }

// Integer element as int64 (I64/I32/float).
inline int64_t LoadIndex(const TensorView& t, int64_t off) {
  return static_cast<int64_t>(t.load(off));
}

std::string Str(const std::vector<int64_t>& dims);

// st with "<op>: " in front of its message (ok stays ok).
inline Status Wrap(const char* op, const Status& st) {
  if (st.ok()) return st;
  return Status(st.code(), std::string(op) + ": " + st.message());
}

}  // namespace attnflow::nn::internal
