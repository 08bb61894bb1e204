// gemm.h — the dense products and the GELU of the BERT encoder (internal).
//
//   LinearForward: y[M,N] = x[M,K] · w[N,K]ᵀ + bias[N]   (torch nn.Linear)
//
// Row-major fp32, leading dimensions given explicitly so that y may be a
// column slice of a wider buffer. A builtin Highway kernel (run-time SIMD
// dispatch, parallelised over the default ThreadPool) handles few rows, and
// every M when the build has no BLAS; cblas_sgemm handles many rows when the
// build defines ATTNFLOW_HAVE_CBLAS (cmake/bert.cmake links OpenBLAS).
//
// Invariants: results never depend on the number of threads (work is split
// over rows/columns only; each output element is one fixed-order sum over
// K); they may differ in the last bits between the two paths, i.e. with M.
// No allocation, no failure modes (callers validate shapes).
#pragma once

#include <cstdint>

namespace attnflow::bert {

// y[i*ldy + j] = bias[j] + sum_k x[i*ldx + k] * w[j*ldw + k]; bias may be
// null (treated as 0).
void LinearForward(float* y, int64_t ldy, const float* x, int64_t ldx,
                   const float* w, int64_t ldw, const float* bias, int64_t m,
                   int64_t n, int64_t k);

// x[i] = gelu(x[i]) = 0.5 x (1 + erf(x / sqrt 2)) (the exact GELU; erf from
// a rational approximation, |error| < 2e-7; gelu within ~1e-6 of
// max(1, |gelu|)), vectorised (runtime SIMD
// dispatch), single-threaded: callers split large arrays.
void GeluErf(float* x, int64_t n);

// "cblas+builtin" or "builtin", for info/benchmarks.
const char* GemmBackendName();

}  // namespace attnflow::bert
