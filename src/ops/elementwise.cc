// ops/elementwise.cc — activations, SwiGLU, the residual add, softmax and the
// norms (ops::Activate, SwiGlu, Add, Softmax, LayerNorm, RmsNorm).
//
// Compiled once per Highway target. Invariants:
//  1. Elementwise ops split [0, n) into fixed chunks of kChunk elements
//     (shape-derived tasks); each element is a pure function of its inputs,
//     so the split cannot change a result.
//  2. Row ops (norms, softmax) run one task per block of kRowBlock rows
//     (LayerNorm: of LayerNormBlock(n) rows, at least kRowElems elements a
//     task, so one sentence's rows are one inline task, no pool round trip);
//     within a row the reductions use kAcc vector accumulators over lanes
//     in a fixed order, then one fixed-order lane sum.
//  3. Outputs may alias inputs (each row / element is read before written).
#include "core/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/elementwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cmath>
#include <limits>

#include "hwy/highway.h"
#include "attnflow/ops.h"
#include "ops/math-inl.h"

ATTNFLOW_HWY_NAMESPACE_BEGIN(ops)

// Applies fn to x[0..n) -> y through full vectors, the tail through a padded
// stack vector (lanes past n never reach memory).
template <class Fn>
HWY_INLINE void Map1(float* HWY_RESTRICT y, const float* HWY_RESTRICT x, int64_t n, Fn fn) {
  const DF df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + nl <= n; i += nl) hn::StoreU(fn(hn::LoadU(df, x + i)), df, y + i);
  if (i < n) {
    HWY_ALIGN float buf[hn::MaxLanes(df)] = {};
    for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
    hn::Store(fn(hn::Load(df, buf)), df, buf);
    for (int64_t j = i; j < n; ++j) y[j] = buf[j - i];
  }
}

void ActivateT(float* y, const float* x, Activation act, int64_t n) {
  const DF df;
  switch (act) {
    case Activation::kNone:
      Map1(y, x, n, [](VF v) { return v; });
      return;
    case Activation::kGeluErf:
      Map1(y, x, n, [df](VF v) { return GeluErfV(df, v); });
      return;
    case Activation::kGeluTanh:
      Map1(y, x, n, [df](VF v) { return GeluTanhV(df, v); });
      return;
    case Activation::kRelu:
      Map1(y, x, n, [df](VF v) { return hn::Max(v, hn::Zero(df)); });
      return;
    case Activation::kSilu:
      Map1(y, x, n, [df](VF v) { return SiluV(df, v); });
      return;
  }
}

// y = silu(gate) * up; y = a + b. Two-input maps through scalar tails.
void SwiGluT(float* y, const float* gate, const float* up, int64_t n) {
  const DF df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    const VF g = SiluV(df, hn::LoadU(df, gate + i));
    hn::StoreU(hn::Mul(g, hn::LoadU(df, up + i)), df, y + i);
  }
  if (i < n) {
    HWY_ALIGN float g[hn::MaxLanes(df)] = {};
    HWY_ALIGN float u[hn::MaxLanes(df)] = {};
    for (int64_t j = i; j < n; ++j) {
      g[j - i] = gate[j];
      u[j - i] = up[j];
    }
    hn::Store(hn::Mul(SiluV(df, hn::Load(df, g)), hn::Load(df, u)), df, g);
    for (int64_t j = i; j < n; ++j) y[j] = g[j - i];
  }
}

void AddT(float* y, const float* a, const float* b, int64_t n) {
  const DF df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + nl <= n; i += nl) hn::StoreU(hn::Add(hn::LoadU(df, a + i), hn::LoadU(df, b + i)), df, y + i);
  for (; i < n; ++i) y[i] = a[i] + b[i];
}

// Fixed-order reductions over one row: kAcc accumulators, then a lane sum.
constexpr int kAcc = 4;

template <class Fn>
HWY_INLINE float RowSum(const float* x, int64_t n, Fn term) {
  const DF df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  VF acc[kAcc];
  for (int a = 0; a < kAcc; ++a) acc[a] = hn::Zero(df);
  int64_t i = 0;
  for (; i + kAcc * nl <= n; i += kAcc * nl)
    for (int a = 0; a < kAcc; ++a) acc[a] = hn::Add(acc[a], term(hn::LoadU(df, x + i + a * nl)));
  for (; i + nl <= n; i += nl) acc[0] = hn::Add(acc[0], term(hn::LoadU(df, x + i)));
  if (i < n) {
    // Padded lanes are masked out of the sum (term(0) need not be 0).
    HWY_ALIGN float buf[hn::MaxLanes(df)] = {};
    for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
    const auto live = hn::FirstN(df, static_cast<size_t>(n - i));
    acc[1] = hn::Add(acc[1], hn::IfThenElseZero(live, term(hn::Load(df, buf))));
  }
  const VF s = hn::Add(hn::Add(acc[0], acc[1]), hn::Add(acc[2], acc[3]));
  return hn::GetLane(hn::SumOfLanes(df, s));
}

void LayerNormRowsT(float* y, int64_t ldy, const float* x, int64_t ldx, const float* gamma,
                    const float* beta, float eps, int64_t r0, int64_t r1, int64_t n) {
  const DF df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    const float mean = RowSum(xr, n, [](VF v) { return v; }) / static_cast<float>(n);
    const VF vm = hn::Set(df, mean);
    const float var = RowSum(xr, n, [vm](VF v) {
                        const VF d = hn::Sub(v, vm);
                        return hn::Mul(d, d);
                      }) /
                      static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(var + eps);
    const VF vi = hn::Set(df, inv);
    int64_t i = 0;
    for (; i + nl <= n; i += nl) {
      const VF t = hn::Mul(hn::Sub(hn::LoadU(df, xr + i), vm), vi);
      hn::StoreU(hn::MulAdd(t, hn::LoadU(df, gamma + i), hn::LoadU(df, beta + i)), df, yr + i);
    }
    for (; i < n; ++i) yr[i] = std::fma((xr[i] - mean) * inv, gamma[i], beta[i]);
  }
}

void RmsNormRowsT(float* y, int64_t ldy, const float* x, int64_t ldx, const float* gamma,
                  float eps, int64_t r0, int64_t r1, int64_t n) {
  const DF df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    const float ms = RowSum(xr, n, [](VF v) { return hn::Mul(v, v); }) / static_cast<float>(n);
    const float inv = 1.0f / std::sqrt(ms + eps);
    const VF vi = hn::Set(df, inv);
    int64_t i = 0;
    // HF order: weight * (x * rsqrt(var + eps)).
    for (; i + nl <= n; i += nl)
      hn::StoreU(hn::Mul(hn::LoadU(df, gamma + i), hn::Mul(hn::LoadU(df, xr + i), vi)), df, yr + i);
    for (; i < n; ++i) yr[i] = gamma[i] * (xr[i] * inv);
  }
}

void SoftmaxRowsT(float* y, int64_t ldy, const float* x, int64_t ldx, int64_t r0, int64_t r1,
                  int64_t n) {
  const DF df;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(df));
  const VF lowest = hn::Set(df, std::numeric_limits<float>::lowest());
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) m = std::max(m, xr[i]);
    if (m == -std::numeric_limits<float>::infinity()) {  // dead row
      for (int64_t i = 0; i < n; ++i) yr[i] = 0.0f;
      continue;
    }
    const VF vm = hn::Set(df, m);
    // e = exp(max(x - m, lowest)): -inf inputs become exp(-FLT_MAX) = 0
    // (hn::Exp is specified on [-FLT_MAX, 104]).
    auto ex = [&](VF v) { return hn::Exp(df, hn::Max(hn::Sub(v, vm), lowest)); };
    Map1(yr, xr, n, ex);
    const float s = RowSum(yr, n, [](VF v) { return v; });
    const VF inv = hn::Set(df, 1.0f / s);
    int64_t i = 0;
    for (; i + nl <= n; i += nl) hn::StoreU(hn::Mul(hn::LoadU(df, yr + i), inv), df, yr + i);
    for (; i < n; ++i) yr[i] = yr[i] * (1.0f / s);
  }
}

const char* TargetNameT() { return hwy::TargetName(HWY_TARGET); }

ATTNFLOW_HWY_NAMESPACE_END()

#if HWY_ONCE
#include <algorithm>

namespace attnflow::ops {

HWY_EXPORT(ActivateT);
HWY_EXPORT(SwiGluT);
HWY_EXPORT(AddT);
HWY_EXPORT(LayerNormRowsT);
HWY_EXPORT(RmsNormRowsT);
HWY_EXPORT(SoftmaxRowsT);
HWY_EXPORT(TargetNameT);

namespace {

constexpr int64_t kChunk = 16384;  // elements per elementwise task
constexpr int64_t kRowBlock = 16;  // rows per row-op task
constexpr int64_t kRowElems = 32768;  // LayerNorm: elements per task at least

int64_t LayerNormBlock(int64_t n) { return std::max(kRowBlock, (kRowElems + n - 1) / n); }

// fn(begin, end) over [0, count) in fixed blocks of `block`.
template <typename Fn>
void Blocks(int64_t count, int64_t block, ThreadPool& pool, Fn fn) {
  if (count <= 0) return;
  const int64_t tasks = (count + block - 1) / block;
  if (tasks == 1) {
    fn(int64_t{0}, count);
    return;
  }
  pool.ParallelFor(tasks, [&](int64_t t, int) { fn(t * block, std::min(count, (t + 1) * block)); });
}

}  // namespace

const char* ActivationName(Activation a) {
  switch (a) {
    case Activation::kNone:
      return "none";
    case Activation::kGeluErf:
      return "gelu";
    case Activation::kGeluTanh:
      return "gelu_tanh";
    case Activation::kRelu:
      return "relu";
    case Activation::kSilu:
      return "silu";
  }
  return "?";
}

void Activate(float* y, const float* x, Activation act, int64_t n, ThreadPool& pool) {
  Blocks(n, kChunk, pool, [&](int64_t b, int64_t e) {
    HWY_DYNAMIC_DISPATCH(ActivateT)(y + b, x + b, act, e - b);
  });
}

void SwiGlu(float* y, const float* gate, const float* up, int64_t n, ThreadPool& pool) {
  Blocks(n, kChunk, pool, [&](int64_t b, int64_t e) {
    HWY_DYNAMIC_DISPATCH(SwiGluT)(y + b, gate + b, up + b, e - b);
  });
}

void Add(float* y, const float* a, const float* b, int64_t n, ThreadPool& pool) {
  Blocks(n, kChunk, pool, [&](int64_t s, int64_t e) {
    HWY_DYNAMIC_DISPATCH(AddT)(y + s, a + s, b + s, e - s);
  });
}

void LayerNorm(float* y, int64_t ldy, const float* x, int64_t ldx, const float* gamma,
               const float* beta, double eps, int64_t rows, int64_t n, ThreadPool& pool) {
  if (n <= 0) return;
  Blocks(rows, LayerNormBlock(n), pool, [&](int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(LayerNormRowsT)(y, ldy, x, ldx, gamma, beta, static_cast<float>(eps), r0,
                                         r1, n);
  });
}

void LayerNormRows(float* y, int64_t ldy, const float* x, int64_t ldx, const float* gamma,
                   const float* beta, double eps, int64_t r0, int64_t r1, int64_t n) {
  if (n <= 0 || r1 <= r0) return;
  HWY_DYNAMIC_DISPATCH(LayerNormRowsT)(y, ldy, x, ldx, gamma, beta, static_cast<float>(eps), r0, r1,
                                       n);
}

void RmsNorm(float* y, int64_t ldy, const float* x, int64_t ldx, const float* gamma, double eps,
             int64_t rows, int64_t n, ThreadPool& pool) {
  if (n <= 0) return;
  Blocks(rows, kRowBlock, pool, [&](int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(RmsNormRowsT)(y, ldy, x, ldx, gamma, static_cast<float>(eps), r0, r1, n);
  });
}

void Softmax(float* y, int64_t ldy, const float* x, int64_t ldx, int64_t rows, int64_t n,
             ThreadPool& pool) {
  if (n <= 0) return;
  Blocks(rows, kRowBlock, pool, [&](int64_t r0, int64_t r1) {
    HWY_DYNAMIC_DISPATCH(SoftmaxRowsT)(y, ldy, x, ldx, r0, r1, n);
  });
}

const char* TargetName() { return HWY_DYNAMIC_DISPATCH(TargetNameT)(); }

}  // namespace attnflow::ops
#endif  // HWY_ONCE
