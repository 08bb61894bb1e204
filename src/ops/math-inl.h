// ops/math-inl.h — per-target vector activations shared by the GEMM epilogue
// (ops/gemm.cc) and the elementwise ops (ops/elementwise.cc).
//
// Compiled once per Highway target (included after hwy/foreach_target.h).
//  * GeluErfV: 0.5 x (1 + erf(x / sqrt 2)); erf from an odd/even rational
//    approximation on [-4, 4] (Eigen's float erf; |error| < 2e-7; erf(4)
//    rounds to 1 in float).
//  * GeluTanhV: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))) (torch's
//    approximate="tanh"), tanh from hwy/contrib/math.
//  * SiluV: x / (1 + exp(-x)), exp from hwy/contrib/math (|x| large: the
//    quotient goes to x or -0 without overflow to NaN).
// Pure functions of their input lanes: no state, no allocation.

#if defined(ATTNFLOW_OPS_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNFLOW_OPS_MATH_INL_H_
#undef ATTNFLOW_OPS_MATH_INL_H_
#else
#define ATTNFLOW_OPS_MATH_INL_H_
#endif

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace ops {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE hn::Vec<D> GeluErfV(D d, hn::Vec<D> v) {
  const auto a1 = hn::Set(d, -1.60960333262415e-02f), a3 = hn::Set(d, -2.95459980854025e-03f),
             a5 = hn::Set(d, -7.34990630326855e-04f), a7 = hn::Set(d, -5.69250639462346e-05f),
             a9 = hn::Set(d, -2.10102402082508e-06f), a11 = hn::Set(d, 2.77068142495902e-08f),
             a13 = hn::Set(d, -2.72614225801306e-10f);
  const auto b0 = hn::Set(d, -1.42647390514189e-02f), b2 = hn::Set(d, -7.37332916720468e-03f),
             b4 = hn::Set(d, -1.68282697438203e-03f), b6 = hn::Set(d, -2.13374055278905e-04f),
             b8 = hn::Set(d, -1.45660718464996e-05f);
  const auto z = hn::Min(hn::Max(hn::Mul(v, hn::Set(d, 0.70710678118654752f)), hn::Set(d, -4.0f)),
                         hn::Set(d, 4.0f));
  const auto z2 = hn::Mul(z, z);
  auto p = hn::MulAdd(z2, a13, a11);
  p = hn::MulAdd(z2, p, a9);
  p = hn::MulAdd(z2, p, a7);
  p = hn::MulAdd(z2, p, a5);
  p = hn::MulAdd(z2, p, a3);
  p = hn::MulAdd(z2, p, a1);
  p = hn::Mul(z, p);
  auto q = hn::MulAdd(z2, b8, b6);
  q = hn::MulAdd(z2, q, b4);
  q = hn::MulAdd(z2, q, b2);
  q = hn::MulAdd(z2, q, b0);
  const auto erf = hn::Div(p, q);
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), v), hn::Add(hn::Set(d, 1.0f), erf));
}

template <class D>
HWY_INLINE hn::Vec<D> GeluTanhV(D d, hn::Vec<D> v) {
  const auto c = hn::Set(d, 0.7978845608028654f);  // sqrt(2/pi)
  const auto inner = hn::Mul(c, hn::MulAdd(hn::Mul(hn::Set(d, 0.044715f), hn::Mul(v, v)), v, v));
  const auto t = hn::Tanh(d, inner);
  return hn::Mul(hn::Mul(hn::Set(d, 0.5f), v), hn::Add(hn::Set(d, 1.0f), t));
}

template <class D>
HWY_INLINE hn::Vec<D> SiluV(D d, hn::Vec<D> v) {
  // hn::Exp is valid up to +104: clamp -x at 88 (for x < -88 the result's
  // magnitude is below 1e-36 either way; torch gives -0 or a denormal).
  const auto e = hn::Exp(d, hn::Min(hn::Neg(v), hn::Set(d, 88.0f)));
  return hn::Div(v, hn::Add(hn::Set(d, 1.0f), e));
}

}  // namespace HWY_NAMESPACE
}  // namespace ops
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#endif  // ATTNFLOW_OPS_MATH_INL_H_
