// qmatmul.h — matrix products of GGUF weights (Q4_1, Q4_0, Q8_0, F32, F16,
// BF16, read in place from the mapping) with fp32 activations.
//
//   y[t, n] = sum_k x[t, k] * W[n, k]      t < T, n < W.rows, k < W.cols
//
// Two paths, chosen by T (never by thread count):
//  * T < gemm_min_tokens ("fused dot", decode): every weight block is
//    dequantised in registers (Highway SIMD; on AVX-512 a Q4_1 block is a
//    16-entry table fma(d, q, m) indexed by the nibbles with vpermps) and
//    multiplied into vector accumulators, one per lane group; rows are
//    processed one after the other so each task streams its weights
//    sequentially (the hardware prefetcher then reaches DRAM bandwidth).
//  * otherwise ("packed GEMM", prefill): the activations are packed once
//    per call into token blocks (k-major [K][TB], TB = 1..4 SIMD vectors
//    of tokens, as few as cover T); each task dequantises its rows once
//    (row-major fp32 scratch, no transposition) and accumulates kGr rows x
//    TB tokens register tiles, broadcasting one weight against TB token
//    lanes: every output is a scalar fma chain over k = 0..K-1.
// Dequantised values equal gguf-py's bit for bit (Q4_1: fma(d, q, m)).
// Work is split into tasks by output rows only; each output element is
// computed by exactly one task with a fixed order, so results never depend
// on the thread count (the two paths differ from each other in the last
// bits, as any two fp32 summation orders do).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnflow/gguf.h"
#include "attnflow/status.h"
#include "attnflow/threading.h"

namespace attnflow::llama {

// A weight matrix [rows, cols] in ggml row layout (a row = `cols` elements =
// row_bytes bytes, rows contiguous).
struct QMatrix {
  GgmlType type = GgmlType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0, row_bytes = 0;
  std::string name;
};

struct MatJob {
  float* y = nullptr;  // [T, w->rows], row stride ldy
  int64_t ldy = 0;
  const QMatrix* w = nullptr;
};

// Per-worker scratch (dequantised rows of a GEMM task) and the shared buffer
// of packed activations.
class MatMulScratch {
 public:
  MatMulScratch() = default;
  ~MatMulScratch();
  MatMulScratch(const MatMulScratch&) = delete;
  MatMulScratch& operator=(const MatMulScratch&) = delete;
  // Makes room for `workers` workers and rows of up to `max_cols` elements.
  Status Reserve(int workers, int64_t max_cols);
  float* worker(int w) const { return bufs_[static_cast<size_t>(w)]; }
  // At least `floats` floats, 64-byte aligned (grown on demand).
  Result<float*> PackBuffer(int64_t floats);

 private:
  std::vector<float*> bufs_;
  int64_t max_cols_ = 0;
  float* xpack_ = nullptr;
  int64_t xpack_floats_ = 0;
};

// Measured crossover (docs/models-smollm2.md): fused dot is cheaper up to 5
// tokens, the packed GEMM from 6 (its cost is flat up to one SIMD vector of
// tokens).
constexpr int64_t kDefaultGemmMinTokens = 6;

// Runs every job (all share x [T, cols] with row stride ldx; all jobs must
// have the same cols) in one ParallelFor. Errors name the matrix and shapes.
Status MatMul(const std::vector<MatJob>& jobs, const float* x, int64_t ldx,
              int64_t T, ThreadPool& pool, MatMulScratch& scratch,
              int64_t gemm_min_tokens = kDefaultGemmMinTokens);

// Tokens per packed block, weight rows per GEMM task, and the SIMD target.
int64_t TokenBlock(int64_t T);
int64_t GemmTaskRows();
const char* MatMulTarget();

}  // namespace attnflow::llama
