// attnflow/ops.h — the layer ops around attention, written once, fast.
//
// Every op here is a free function with the house signature: outputs first,
// then inputs, then options, then dimensions, then the thread pool (always
// explicit). Row-major fp32 with explicit leading dimensions (ld*, in
// elements), so an op can read or write a column slice of a wider buffer.
// They are compiled once per Highway target (src/core/hwy_targets.h: the one
// target list of the project) and dispatched at run time.
//
// Each op has a float64 oracle beside it, in `nn` (include/attnflow/nn.h) or
// `reference` (include/attnflow/reference.h); tests/ops/ops_test.cc compares
// every op with it over odd sizes, strides, every compiled target and 1, 2
// and 7 threads.
//
// Invariants (all ops):
//  1. Work is split by shape only (rows / column blocks), never by the
//     thread count; each output element is computed by exactly one task with
//     a fixed summation order, so results are bit-identical for any number of
//     threads and never depend on a BLAS build (attnflow links none).
//  2. fp32 arithmetic with fp32 accumulation; statistics of the norms are
//     accumulated in fp32 vector lanes and reduced in a fixed order.
//  3. No op allocates except PackedMatrix::Pack and MatMulScratch; no op
//     throws. Ops validate nothing that the caller's shapes already fix
//     (callers validate at their boundary); ops that read ids or quantised
//     data return Status.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnflow/gguf.h"
#include "attnflow/status.h"
#include "attnflow/threading.h"

namespace attnflow::ops {

// ---- dense GEMM (nn.Linear) --------------------------------------------------
//
//   y[m, n] = act(x[m, k] · w[n, k]ᵀ + bias[n]) (+ residual[m, n])
//
// w is packed once (at model load) into column panels of kPanelCols output
// columns, k-major, zero-padded: the micro-kernel broadcasts one x element
// against a panel row. Each output is the fma chain over p = 0..k-1 from 0,
// then + bias, then the activation, then + residual.
constexpr int64_t kPanelCols = 16;

// One allocation holding many packed matrices (a model's dense weights),
// aligned to 2 MiB and marked MADV_HUGEPAGE where the OS has it: the weights
// of a whole model (MiniLM: 42.5 MB, more than the TLB's reach in 4 KiB
// pages) are then mapped by 2 MiB pages, so streaming them at batch 1 walks
// few page tables. Only where memory lives changes, never a value. Storage
// goes through AlignedAlloc (fault-injection hooks apply).
class PackArena {
 public:
  PackArena() = default;
  ~PackArena();
  PackArena(PackArena&& o) noexcept;
  PackArena& operator=(PackArena&& o) noexcept;
  PackArena(const PackArena&) = delete;
  PackArena& operator=(const PackArena&) = delete;

  // Allocates `bytes` (plus alignment slack); replaces any earlier storage
  // (matrices packed into it must be gone).
  Status Reserve(size_t bytes);
  // The next `bytes` (rounded up to 64), or null when the arena is full.
  float* Take(size_t bytes);
  size_t used() const { return used_; }
  size_t capacity() const { return cap_; }

 private:
  void* base_ = nullptr;  // what AlignedAlloc returned
  char* begin_ = nullptr;  // 2 MiB-aligned start
  size_t cap_ = 0, used_ = 0;
};

class PackedMatrix {
 public:
  PackedMatrix() = default;
  ~PackedMatrix();
  PackedMatrix(PackedMatrix&& o) noexcept;
  PackedMatrix& operator=(PackedMatrix&& o) noexcept;
  PackedMatrix(const PackedMatrix&) = delete;
  PackedMatrix& operator=(const PackedMatrix&) = delete;

  // Packs w [n, k] (row stride ldw >= k) — torch's nn.Linear weight layout.
  // With an arena the storage is taken from it (the arena must outlive the
  // matrix); otherwise the matrix owns its own allocation.
  static Result<PackedMatrix> Pack(const float* w, int64_t ldw, int64_t n, int64_t k,
                                   PackArena* arena = nullptr);
  // Bytes Pack stores for [n, k] (0 when n or k <= 0 or on overflow).
  static size_t PackedBytes(int64_t n, int64_t k);

  int64_t rows() const { return n_; }  // output features n
  int64_t cols() const { return k_; }  // input features k
  const float* panels() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  float* data_ = nullptr;
  size_t bytes_ = 0;
  int64_t n_ = 0, k_ = 0;
  bool owned_ = true;  // false: data_ lives in a PackArena
};

enum class Activation : uint8_t { kNone, kGeluErf, kGeluTanh, kRelu, kSilu };
const char* ActivationName(Activation a);

struct LinearEpilogue {
  const float* bias = nullptr;      // [n] or null
  Activation act = Activation::kNone;
  const float* residual = nullptr;  // [m, n] with row stride ld_residual, or null
  int64_t ld_residual = 0;
  // Optional LayerNorm of every finished row (after bias, act, residual):
  // norm_out[r] = LayerNorm(y[r]) with norm_gamma / norm_beta [n] and
  // norm_eps, row stride ld_norm_out. y still receives the pre-norm rows.
  // Runs in the GEMM's own parallel region: the last task to finish a row
  // block normalises that block (no second pool round trip); the result is
  // bit-identical to Linear followed by ops::LayerNorm(norm_out, y) because
  // both run LayerNormRows on the same stored rows. norm_out may alias the
  // residual (a row block's residual is read only by that block's tasks,
  // all finished before its rows are normalised); it must not overlap y.
  const float* norm_gamma = nullptr;  // null: no norm
  const float* norm_beta = nullptr;
  double norm_eps = 1e-5;
  float* norm_out = nullptr;
  int64_t ld_norm_out = 0;
};

// y [m, n] (row stride ldy) = epilogue(x [m, k] (row stride ldx) · wᵀ).
// y must not overlap x; it may be the residual buffer itself.
void Linear(float* y, int64_t ldy, const float* x, int64_t ldx, const PackedMatrix& w,
            const LinearEpilogue& epilogue, int64_t m, ThreadPool& pool);

// Which path Linear takes for the norm epilogue at m rows: true when it is
// fused into the GEMM's parallel region, false when Linear falls back to the
// composed GEMM then ops::LayerNorm (m above kMaxFusedNormRows).
bool LinearFusesNorm(int64_t m);
constexpr int64_t kMaxFusedNormRows = 64 * 64;

// ---- quantised matmul (GGUF weights read in place) ---------------------------
//
//   y[t, n] = sum_k x[t, k] * W[n, k]      t < T, n < W.rows, k < W.cols
//
// W is F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K in
// ggml's row layout (docs/quantize.md). Two paths,
// chosen by T (never by thread count): T < gemm_min_tokens ("fused dot",
// decode) dequantises each weight block in registers and streams the rows;
// otherwise ("packed GEMM", prefill) the activations are packed once into
// token blocks and each task dequantises its rows once. Dequantised values
// equal gguf-py's bit for bit. See src/ops/qmatmul.cc.
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
// tokens, the packed GEMM from 6.
constexpr int64_t kDefaultGemmMinTokens = 6;

// Runs every job (all share x [T, cols] with row stride ldx; all jobs must
// have the same cols) in one ParallelFor. Errors name the matrix and shapes.
Status QMatMul(const std::vector<MatJob>& jobs, const float* x, int64_t ldx, int64_t T,
               ThreadPool& pool, MatMulScratch& scratch,
               int64_t gemm_min_tokens = kDefaultGemmMinTokens);

// y[j] = dot(row r0 + j of w, x) for j < nr, one row after the other: the
// same per-row dot products (same values, bit for bit) as QMatMul's decode
// path below gemm_min_tokens. For callers that schedule rows themselves (the
// Llama decode step runs a whole layer in one parallel region). `tmp`: at
// least w.cols floats of scratch (used by the non-quantised row types).
void QMatVecRows(float* y, const QMatrix& w, int64_t r0, int64_t nr, const float* x, float* tmp);

// ---- fast dot (opt-in, NOT exact): int8 activations -------------------------
//
// The activation vector quantised once per matvec, like ggml's
// quantize_row_q8_0 but with an fp32 scale: blocks of 32, d = max|x| / 127,
// q = round-half-even(x / d) in [-127, 127] (d = 0 and q = 0 for an all-zero
// block; d = NaN and q = 0 for a block holding a NaN or an infinity, so the
// dots that use it are NaN), so |x - d*q| <= d/2 per element; with each
// group of 4's sum, kept in the two forms the dot consumes (made once per
// matvec instead of converted once per weight row): negated int32, the
// vpdpbusd seed that removes the unsigned weight offset (shifted by the
// type's offset bits), and float, multiplied by the affine types' minimum.
struct Q8Acts {
  std::vector<int8_t> q;     // [n]
  std::vector<float> d;      // [n / 32]
  std::vector<int32_t> x4n;  // [n / 4], -(q[4i] + ... + q[4i+3])
  std::vector<float> x4f;    // [n / 4],   q[4i] + ... + q[4i+3]
  int64_t n = 0;
};
// n % 32 == 0 (callers check; the fast dot is only used for such rows).
// Grows the vectors on first use only.
void QuantizeActsQ8(Q8Acts* out, const float* x, int64_t n);
// The scalar definition of QuantizeActsQ8 (the SIMD version writes the same
// bytes, tested); kept as the oracle.
void QuantizeActsQ8Ref(Q8Acts* out, const float* x, int64_t n);

// The weight types with an integer fast dot: Q4_0, Q4_1, Q5_0, Q8_0, Q4_K,
// Q6_K. Any other type falls back to the exact QMatVecRows on x.
bool QFastDotSupported(GgmlType type);
// Whether this CPU (and the dispatched SIMD target) runs a SIMD fast dot:
// x86 with AVX-512 VNNI (vpdpbusd) or AVX2 (vpmaddubsw + vpmaddwd). When
// false, QMatVecRowsFast runs the scalar oracle: the same results, but
// slower than the exact SIMD dot.
bool QFastDotHasSimd();

// y[j] = fast dot(row r0 + j of w, xq) for j < nr, x being the float vector
// xq was made from (used only by the fallback), tmp as for QMatVecRows.
// Definition (QMatVecRowsFastRef, the scalar oracle; the AVX-512 VNNI path
// gives the same bits): 32-element sub-block b of the row has integer
// weights w_e, weight scale ws (Q6_K: ws0 for e < 16, ws1 above) and, for
// the affine types (Q4_1 m, Q4_K -dmin*m), offset os. Lane k = 8 (b % 2) + j
// (j < 8: elements 4j..4j+3) of the accumulators of parity p = (b / 2) % 2:
//   acc[p][k] = fma(float(sum_e w_e q_e), ws(j) * d_b, acc[p][k])  (exact int)
//   off[p][k] = fma(float(sum_e q_e), os * d_b, off[p][k])         (affine)
// then a[k] = (acc[0][k] + acc[1][k]) + (off[0][k] + off[1][k]), lanes summed
// pairwise (k + 8, k + 4, k + 2, k + 1), y = a[0]. Per row, fixed order: the
// result never depends on the thread count.
void QMatVecRowsFast(float* y, const QMatrix& w, int64_t r0, int64_t nr, const Q8Acts& xq,
                     const float* x, float* tmp);
// The portable scalar oracle of QMatVecRowsFast (supported types only).
void QMatVecRowsFastRef(float* y, const QMatrix& w, int64_t r0, int64_t nr, const Q8Acts& xq);

// Tokens per packed block, weight rows per GEMM task, and the SIMD target.
int64_t QMatMulTokenBlock(int64_t T);
int64_t QMatMulTaskRows();

// ---- norms -------------------------------------------------------------------
// LayerNorm (torch.nn.LayerNorm, biased variance):
//   y[r] = (x[r] - mean) / sqrt(var + eps) * gamma + beta
// RMSNorm (HF Llama order): y[r] = gamma * (x[r] * (1 / sqrt(mean(x²) + eps))).
// y may equal x (each row is read completely before it is written).
void LayerNorm(float* y, int64_t ldy, const float* x, int64_t ldx, const float* gamma,
               const float* beta, double eps, int64_t rows, int64_t n, ThreadPool& pool);
// LayerNorm of rows [r0, r1) on the calling thread (what each LayerNorm task
// runs; every row is normalised independently by the same code).
void LayerNormRows(float* y, int64_t ldy, const float* x, int64_t ldx, const float* gamma,
                   const float* beta, double eps, int64_t r0, int64_t r1, int64_t n);
void RmsNorm(float* y, int64_t ldy, const float* x, int64_t ldx, const float* gamma,
             double eps, int64_t rows, int64_t n, ThreadPool& pool);

// ---- elementwise -------------------------------------------------------------
// y[i] = act(x[i]) for i < n (y may equal x). GELU erf is the exact GELU
// (erf from a rational approximation, |error| < 2e-7); GELU tanh is the
// tanh approximation (torch approximate="tanh"); SiLU x·sigmoid(x).
void Activate(float* y, const float* x, Activation act, int64_t n, ThreadPool& pool);
// y[i] = silu(gate[i]) * up[i] (SwiGLU); y may equal gate or up.
void SwiGlu(float* y, const float* gate, const float* up, int64_t n, ThreadPool& pool);
// y[i] = a[i] + b[i] (the residual add); y may equal a or b.
void Add(float* y, const float* a, const float* b, int64_t n, ThreadPool& pool);

// Softmax over the last dim of rows [rows, n] (row strides ldy, ldx):
// y = exp(x - max) / sum. A row of all -inf gives zeros (the dead-row rule,
// docs/semantics.md); y may equal x.
void Softmax(float* y, int64_t ldy, const float* x, int64_t ldx, int64_t rows, int64_t n,
             ThreadPool& pool);

// ---- RoPE --------------------------------------------------------------------
enum class RopeLayout : uint8_t { kHalf, kInterleaved };  // HF halves / GGUF pairs

// cos/sin tables [tokens, rotary_dim/2]: angle = (positions[t] * pos_scale) *
// inv_freq[c] (pos_scale = 1/factor for linear scaling; NTK scalings change
// inv_freq, see RopeInvFreq).
void RopeTables(float* cos, float* sin, const int64_t* positions, const float* inv_freq,
                double pos_scale, int64_t tokens, int64_t rotary_dim);
// inv_freq[c] = 1 / base^(2c / rotary_dim), c < rotary_dim/2, as HF computes
// it in fp32 (exponent in fp32, power rounded to fp32, fp32 reciprocal).
void RopeInvFreq(float* inv_freq, double base, int64_t rotary_dim);
// Rotates the first rotary_dim dims of every head of x [tokens, heads,
// head_dim] (token row stride ldx, heads contiguous) in place, HF rounding:
// out = x*cos ∓ partner*sin, each product rounded then summed.
void Rope(float* x, int64_t ldx, const float* cos, const float* sin, RopeLayout layout,
          int64_t tokens, int64_t heads, int64_t head_dim, int64_t rotary_dim,
          ThreadPool& pool);

// ---- embedding lookup ----------------------------------------------------------
// y[t] = table[ids[t]] (row stride ldy) for a table [vocab, dim] of any GGUF
// row type (F32 rows are copied, others dequantised exactly as gguf-py).
// An id outside [0, vocab) is an OutOfRange error naming the token index.
Status EmbeddingLookup(float* y, int64_t ldy, const int32_t* ids, const QMatrix& table,
                       int64_t tokens);

// The Highway target the ops run on ("AVX3_ZEN4", "AVX2", ...).
const char* TargetName();

}  // namespace attnflow::ops
