// gemm.cc — LinearForward (see gemm.h): cblas_sgemm when available, else a
// builtin kernel: 2x4 register tiles of dot products over K with 4-lane
// vector accumulators (GCC/Clang vector extensions, SSE2/NEON baseline),
// tiles grouped into blocks of 32 rows x 64 columns that run as ThreadPool
// tasks. Each output element is reduced in a fixed order, so the result is
// the same for every thread count.
#include "model/bert/gemm.h"

#include <algorithm>
#include <cstring>

#include "attnflow/threading.h"

#ifdef ATTNFLOW_HAVE_CBLAS
#include <cblas.h>
#endif

namespace attnflow::bert {
namespace {

#ifndef ATTNFLOW_HAVE_CBLAS
typedef float V4 __attribute__((vector_size(16)));

inline V4 Load4(const float* p) {
  V4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline float Sum4(V4 v) { return (v[0] + v[1]) + (v[2] + v[3]); }

// y[r][c] for r < rows (<= 2), c < cols (<= 4).
template <int kRows, int kCols>
void Tile(float* y, int64_t ldy, const float* x, int64_t ldx, const float* w,
          int64_t ldw, const float* bias, int64_t k) {
  V4 acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c) acc[r][c] = V4{0, 0, 0, 0};
  const int64_t k4 = k & ~int64_t{3};
  for (int64_t p = 0; p < k4; p += 4) {
    V4 xv[kRows], wv[kCols];
    for (int r = 0; r < kRows; ++r) xv[r] = Load4(x + r * ldx + p);
    for (int c = 0; c < kCols; ++c) wv[c] = Load4(w + c * ldw + p);
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < kCols; ++c) acc[r][c] += xv[r] * wv[c];
  }
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      float s = Sum4(acc[r][c]);
      for (int64_t p = k4; p < k; ++p) s += x[r * ldx + p] * w[c * ldw + p];
      y[r * ldy + c] = s + (bias != nullptr ? bias[c] : 0.0f);
    }
  }
}

template <int kRows>
void RowTile(float* y, int64_t ldy, const float* x, int64_t ldx, const float* w,
             int64_t ldw, const float* bias, int64_t n0, int64_t n1, int64_t k) {
  int64_t j = n0;
  for (; j + 4 <= n1; j += 4) {
    Tile<kRows, 4>(y + j, ldy, x, ldx, w + j * ldw, ldw,
                   bias != nullptr ? bias + j : nullptr, k);
  }
  for (; j < n1; ++j) {
    Tile<kRows, 1>(y + j, ldy, x, ldx, w + j * ldw, ldw,
                   bias != nullptr ? bias + j : nullptr, k);
  }
}

constexpr int64_t kBlockRows = 32, kBlockCols = 64;
#endif  // !ATTNFLOW_HAVE_CBLAS

}  // namespace

void LinearForward(float* y, int64_t ldy, const float* x, int64_t ldx,
                   const float* w, int64_t ldw, const float* bias, int64_t m,
                   int64_t n, int64_t k) {
  if (m <= 0 || n <= 0) return;
#ifdef ATTNFLOW_HAVE_CBLAS
  float beta = 0.0f;
  if (bias != nullptr) {
    for (int64_t i = 0; i < m; ++i) std::memcpy(y + i * ldy, bias, sizeof(float) * n);
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, x,
              static_cast<int>(ldx), w, static_cast<int>(ldw), beta, y,
              static_cast<int>(ldy));
#else
  const int64_t row_blocks = (m + kBlockRows - 1) / kBlockRows;
  const int64_t col_blocks = (n + kBlockCols - 1) / kBlockCols;
  auto run = [&](int64_t task, int /*worker*/) {
    const int64_t rb = task / col_blocks, cb = task % col_blocks;
    const int64_t i0 = rb * kBlockRows, i1 = std::min(m, i0 + kBlockRows);
    const int64_t j0 = cb * kBlockCols, j1 = std::min(n, j0 + kBlockCols);
    int64_t i = i0;
    for (; i + 2 <= i1; i += 2) {
      RowTile<2>(y + i * ldy, ldy, x + i * ldx, ldx, w, ldw, bias, j0, j1, k);
    }
    if (i < i1) RowTile<1>(y + i * ldy, ldy, x + i * ldx, ldx, w, ldw, bias, j0, j1, k);
  };
  const int64_t tasks = row_blocks * col_blocks;
  if (tasks == 1) {
    run(0, 0);
  } else {
    DefaultPool().ParallelFor(tasks, run);
  }
#endif
}

const char* GemmBackendName() {
#ifdef ATTNFLOW_HAVE_CBLAS
  return "cblas";
#else
  return "builtin";
#endif
}

}  // namespace attnflow::bert
