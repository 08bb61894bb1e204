// gemm.h — the dense products of the BERT encoder (internal).
//
//   LinearForward: y[M,N] = x[M,K] · w[N,K]ᵀ + bias[N]   (torch nn.Linear)
//
// Row-major fp32, leading dimensions given explicitly so that y may be a
// column slice of a wider buffer. Backed by cblas_sgemm when the build
// defines ATTNFLOW_HAVE_CBLAS (cmake/bert.cmake links OpenBLAS), otherwise by
// an own cache-blocked kernel parallelised over the default ThreadPool.
//
// Invariants: results never depend on the number of threads (work is split
// over rows/columns only; each output element is one fixed-order sum over
// K); no allocation, no failure modes (callers validate shapes).
#pragma once

#include <cstdint>

namespace attnflow::bert {

// y[i*ldy + j] = bias[j] + sum_k x[i*ldx + k] * w[j*ldw + k]; bias may be
// null (treated as 0).
void LinearForward(float* y, int64_t ldy, const float* x, int64_t ldx,
                   const float* w, int64_t ldw, const float* bias, int64_t m,
                   int64_t n, int64_t k);

// "openblas" (or the cblas vendor) or "builtin", for info/benchmarks.
const char* GemmBackendName();

}  // namespace attnflow::bert
