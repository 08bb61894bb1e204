// test_util.h — helpers shared by the tests: deterministic random tensors,
// element access and comparisons. Nothing here computes expected values.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <string>

#include "attnflow/rng.h"
#include "attnflow/tensor.h"

namespace attnflow::testing {

inline Tensor Zeros(DType t, const Shape& s) {
  Result<Tensor> r = Tensor::Zeros(t, s);
  if (!r.ok()) std::abort();
  return std::move(r).value();
}

// Test data from the project's own Rng (attnflow/rng.h), so inputs are the
// same with any standard library.
inline Tensor Random(const Shape& s, uint64_t seed, double scale = 1.0,
                     DType t = DType::kF32) {
  Tensor x = Zeros(t, s);
  Rng rng(seed);
  for (int64_t i = 0; i < x.numel(); ++i) x.view().store(i, scale * rng.Normal());
  return x;
}

inline Tensor RandomBoolMask(const Shape& s, uint64_t seed, double p_true) {
  Tensor m = Zeros(DType::kBool, s);
  Rng rng(seed);
  for (int64_t i = 0; i < m.numel(); ++i) m.data<uint8_t>()[i] = rng.Uniform() < p_true;
  return m;
}

// Max |a - b| over same-shaped views (any float dtype, any strides). NaN in
// exactly one of them counts as infinite difference; matching NaN or matching
// infinities count as 0.
inline double MaxAbsDiff(const TensorView& a, const TensorView& b) {
  double m = 0;
  int64_t idx[4] = {0, 0, 0, 0};
  const int64_t n = a.numel();
  for (int64_t e = 0; e < n; ++e) {
    const double x = a.load(a.offset(idx[0], idx[1], idx[2], idx[3]));
    const double y = b.load(b.offset(idx[0], idx[1], idx[2], idx[3]));
    double d;
    if (std::isnan(x) || std::isnan(y)) d = (std::isnan(x) && std::isnan(y)) ? 0 : INFINITY;
    else if (x == y) d = 0;
    else d = std::fabs(x - y);
    if (d > m) m = d;
    for (int k = a.rank - 1; k >= 0; --k) {
      if (++idx[k] < a.shape[k]) break;
      idx[k] = 0;
    }
  }
  return m;
}

inline double At(const Tensor& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0,
                 int64_t i3 = 0) {
  return t.view().load(t.view().offset(i0, i1, i2, i3));
}

}  // namespace attnflow::testing
