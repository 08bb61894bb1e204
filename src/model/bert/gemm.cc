// gemm.cc — LinearForward and GeluErf (see gemm.h).
//
// LinearForward has two paths:
//  * the builtin kernel, compiled per Highway target (AVX-512 / AVX2+FMA /
//    SSE4 / NEON / scalar, chosen at run time): register tiles of 4 input
//    rows x 4 (AVX-512) or 2 weight rows, each a vector of partial dot
//    products over K reduced at the end. Weight rows [N,K] are read in place
//    (no packing), which makes it the fast path for few rows (one short
//    sentence: M ~ 10); single-thread ~85-90 GFLOPS at M = 8..16 on an
//    AVX-512 core vs ~45-60 for OpenBLAS;
//  * cblas_sgemm (OpenBLAS, when cmake/bert.cmake found it, sized to the
//    default ThreadPool) for M >= kBlasMinRows, where packing the weights is
//    amortised (measured on par with the builtin kernel there). Without BLAS
//    the builtin kernel handles every M.
// Work is split into blocks of rows x columns that depend only on the
// shape; each output element is one fixed-order reduction, so results never
// depend on the thread count.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/bert/gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace bert {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// y[r*ldy + c] = bias[c] + x[r] · w[c] for r < kR, c < kC.
template <int kR, int kC>
HWY_INLINE void TileT(float* HWY_RESTRICT y, int64_t ldy, const float* HWY_RESTRICT x,
                      int64_t ldx, const float* HWY_RESTRICT w, int64_t ldw,
                      const float* HWY_RESTRICT bias, int64_t k) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  // The constant-trip loops are fully unrolled so that the accumulators live
  // in registers (-O2 does not unroll them by itself).
  V acc[kR][kC];
#pragma GCC unroll 16
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 16
    for (int c = 0; c < kC; ++c) acc[r][c] = hn::Zero(d);
  int64_t p = 0;
  for (; p + nl <= k; p += nl) {
    V wv[kC];
#pragma GCC unroll 16
    for (int c = 0; c < kC; ++c) wv[c] = hn::LoadU(d, w + c * ldw + p);
#pragma GCC unroll 16
    for (int r = 0; r < kR; ++r) {
      const V xv = hn::LoadU(d, x + r * ldx + p);
#pragma GCC unroll 16
      for (int c = 0; c < kC; ++c) acc[r][c] = hn::MulAdd(xv, wv[c], acc[r][c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kR; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < kC; ++c) {
      float s = hn::GetLane(hn::SumOfLanes(d, acc[r][c]));
      for (int64_t q = p; q < k; ++q) s += x[r * ldx + q] * w[c * ldw + q];
      y[r * ldy + c] = s + (bias != nullptr ? bias[c] : 0.0f);
    }
  }
}

// Weight rows per register tile: AVX-512 has 32 vector registers (4x4
// accumulators + 4 + 4 loads), the other targets 16 (4x2 + 4 + 2).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kTileCols = 4;
#else
constexpr int kTileCols = 2;
#endif

template <int kC>
HWY_INLINE void ColumnGroup(float* y, int64_t ldy, const float* x, int64_t ldx,
                            const float* w, int64_t ldw, const float* bias, int64_t i0,
                            int64_t i1, int64_t k) {
  int64_t i = i0;
  for (; i + 4 <= i1; i += 4) TileT<4, kC>(y + i * ldy, ldy, x + i * ldx, ldx, w, ldw, bias, k);
  for (; i < i1; ++i) TileT<1, kC>(y + i * ldy, ldy, x + i * ldx, ldx, w, ldw, bias, k);
}

// Rows [i0, i1) x columns [j0, j1): groups of kTileCols weight rows outer
// (they stay in L1), row tiles of 4 inner.
void LinearBlockT(float* y, int64_t ldy, const float* x, int64_t ldx, const float* w,
                  int64_t ldw, const float* bias, int64_t i0, int64_t i1, int64_t j0,
                  int64_t j1, int64_t k) {
  for (int64_t j = j0; j < j1;) {
    const float* bj = bias != nullptr ? bias + j : nullptr;
    if (j + kTileCols <= j1) {
      ColumnGroup<kTileCols>(y + j, ldy, x, ldx, w + j * ldw, ldw, bj, i0, i1, k);
      j += kTileCols;
    } else {
      ColumnGroup<1>(y + j, ldy, x, ldx, w + j * ldw, ldw, bj, i0, i1, k);
      j += 1;
    }
  }
}

// x = 0.5 x (1 + erf(x / sqrt 2)) in place. erf: odd/even rational
// approximation on [-4, 4] (Eigen's float erf; |error| < 2e-7, and erf(4)
// rounds to 1 in float).
void GeluErfT(float* HWY_RESTRICT x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const auto a1 = hn::Set(d, -1.60960333262415e-02f), a3 = hn::Set(d, -2.95459980854025e-03f),
             a5 = hn::Set(d, -7.34990630326855e-04f), a7 = hn::Set(d, -5.69250639462346e-05f),
             a9 = hn::Set(d, -2.10102402082508e-06f), a11 = hn::Set(d, 2.77068142495902e-08f),
             a13 = hn::Set(d, -2.72614225801306e-10f);
  const auto b0 = hn::Set(d, -1.42647390514189e-02f), b2 = hn::Set(d, -7.37332916720468e-03f),
             b4 = hn::Set(d, -1.68282697438203e-03f), b6 = hn::Set(d, -2.13374055278905e-04f),
             b8 = hn::Set(d, -1.45660718464996e-05f);
  const auto lo = hn::Set(d, -4.0f), hi = hn::Set(d, 4.0f);
  const auto rsqrt2 = hn::Set(d, 0.70710678118654752f), half = hn::Set(d, 0.5f),
             one = hn::Set(d, 1.0f);
  auto gelu = [&](hn::Vec<decltype(d)> v) {
    const auto z = hn::Min(hn::Max(hn::Mul(v, rsqrt2), lo), hi);
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
    return hn::Mul(hn::Mul(half, v), hn::Add(one, erf));
  };
  int64_t i = 0;
  for (; i + nl <= n; i += nl) hn::StoreU(gelu(hn::LoadU(d, x + i)), d, x + i);
  if (i < n) {  // tail through a padded buffer
    HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
    for (int64_t j = i; j < n; ++j) buf[j - i] = x[j];
    hn::Store(gelu(hn::Load(d, buf)), d, buf);
    for (int64_t j = i; j < n; ++j) x[j] = buf[j - i];
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace bert
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cstring>

#include "attnflow/threading.h"
#include "model/bert/gemm.h"

#ifdef ATTNFLOW_HAVE_CBLAS
#include <cblas.h>

#include <mutex>
#endif

namespace attnflow::bert {

HWY_EXPORT(LinearBlockT);
HWY_EXPORT(GeluErfT);

void GeluErf(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(GeluErfT)(x, n); }

namespace {

constexpr int64_t kBlockRows = 64, kBlockCols = 32;
#ifdef ATTNFLOW_HAVE_CBLAS
// Below this many rows the builtin kernel beats packing the weights.
constexpr int64_t kBlasMinRows = 32;
#endif

void BuiltinLinear(float* y, int64_t ldy, const float* x, int64_t ldx, const float* w,
                   int64_t ldw, const float* bias, int64_t m, int64_t n, int64_t k) {
  const int64_t row_blocks = (m + kBlockRows - 1) / kBlockRows;
  const int64_t col_blocks = (n + kBlockCols - 1) / kBlockCols;
  auto run = [&](int64_t task, int /*worker*/) {
    const int64_t rb = task / col_blocks, cb = task % col_blocks;
    const int64_t i0 = rb * kBlockRows, i1 = std::min(m, i0 + kBlockRows);
    const int64_t j0 = cb * kBlockCols, j1 = std::min(n, j0 + kBlockCols);
    HWY_DYNAMIC_DISPATCH(LinearBlockT)(y, ldy, x, ldx, w, ldw, bias, i0, i1, j0, j1, k);
  };
  const int64_t tasks = row_blocks * col_blocks;
  if (tasks == 1) {
    run(0, 0);
  } else {
    DefaultPool().ParallelFor(tasks, run);
  }
}

}  // namespace

void LinearForward(float* y, int64_t ldy, const float* x, int64_t ldx,
                   const float* w, int64_t ldw, const float* bias, int64_t m,
                   int64_t n, int64_t k) {
  if (m <= 0 || n <= 0) return;
#ifdef ATTNFLOW_HAVE_CBLAS
  if (m >= kBlasMinRows) {
#ifdef ATTNFLOW_HAVE_OPENBLAS
    // One thread budget for the whole library: OpenBLAS uses as many
    // threads as the default pool (ATTNFLOW_NUM_THREADS or all cores).
    static std::once_flag once;
    std::call_once(once, [] { openblas_set_num_threads(DefaultPool().NumWorkers()); });
#endif
    float beta = 0.0f;
    if (bias != nullptr) {
      for (int64_t i = 0; i < m; ++i) {
        std::memcpy(y + i * ldy, bias, sizeof(float) * static_cast<size_t>(n));
      }
      beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
                static_cast<int>(n), static_cast<int>(k), 1.0f, x,
                static_cast<int>(ldx), w, static_cast<int>(ldw), beta, y,
                static_cast<int>(ldy));
    return;
  }
#endif
  BuiltinLinear(y, ldy, x, ldx, w, ldw, bias, m, n, k);
}

const char* GemmBackendName() {
#ifdef ATTNFLOW_HAVE_CBLAS
  return "cblas+builtin";
#else
  return "builtin";
#endif
}

}  // namespace attnflow::bert
#endif  // HWY_ONCE
