// kernels/internal.h — the resolved problem and plan shared by the dispatcher
// (dispatch.cc, plain C++) and the per-target SIMD kernels (kernels_prefill.cc,
// kernels_decode.cc and
// flash_*-inl.h, compiled once per Highway target).
//
// Invariants (established by dispatch.cc before any kernel runs):
//  * all dims fit int32 index arithmetic (Lq, Lk < 2^30; D, Dv in 1..256);
//  * strides are element strides of the original (possibly broadcast) views;
//  * `valid_kv[b]` in [0, Lk]; `diag_kv[b]` is the key length that positions
//    batch b's bottom-right diagonal (Lk, or valid_kv[b] with
//    KvAlign::kPerSequence; semantics.h DiagonalKvLen);
//  * `slope2` (if set) holds slope*log2(e) of (b, h) at b*slope_bs + h
//    (slope_bs 0 for [H] slopes, H for [B,H]);
//  * scratch is sized by PlanScratch() and 64-byte aligned per worker.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/semantics.h"
#include "attnflow/tensor.h"

namespace attnflow {
namespace kernels {

constexpr double kLog2e = 1.4426950408889634073599246810019;
constexpr double kLn2 = 0.69314718055994530941723212145818;

// Everything the kernels read: raw pointers + element strides.
struct Problem {
  int64_t B = 0, H = 0, Hkv = 0, G = 1, Lq = 0, Lk = 0, D = 0, Dv = 0;
  float scale2 = 0.0f;  // scale * log2(e), rounded to float
  // scale * log2(e) - scale2: QkTile multiplies each finished score by the
  // unevaluated sum scale2 + scale2_lo (no rounding of the constant).
  float scale2_lo = 0.0f;

  const float* q = nullptr;
  int64_t qs[4] = {};
  const void* k = nullptr;
  DType kt = DType::kF32;
  int64_t ks[4] = {};
  const void* v = nullptr;
  DType vt = DType::kF32;
  int64_t vs[4] = {};
  float* out = nullptr;
  int64_t os[4] = {};
  void* lse = nullptr;  // nullptr = not wanted; F32, or F64 with lse_f64
  bool lse_f64 = false;
  int64_t ls[3] = {};

  Causal causal = Causal::kNone;
  int64_t window_left = -1, window_right = -1;

  const void* mask = nullptr;  // broadcast to [B,H,Lq,Lk] (stride 0 dims)
  DType mt = DType::kBool;
  int64_t ms[4] = {};

  const int64_t* valid_kv = nullptr;  // [B]
  const int64_t* diag_kv = nullptr;   // [B], Lk or valid_kv[b] (KvAlign)
  const float* slope2 = nullptr;      // [B*H or H], slope * log2(e); nullptr = no ALiBi
  const double* slope = nullptr;      // the slopes as given (scalar fallback)
  int64_t slope_bs = 0;               // batch stride of slope2 / slope (0 or H)
  float softcap2 = 0.0f;              // softcap * log2(e); 0 = no softcap
  double softcap = 0.0;               // the softcap as given (scalar fallback)
};

// Stores the natural-log LSE of row (b, h, i), computed in double, as the
// lse output's dtype (F32: rounded once; F64: kept, for an exact backward).
inline void StoreLse(const Problem& P, int64_t b, int64_t h, int64_t i, double v) {
  const int64_t off = b * P.ls[0] + h * P.ls[1] + i * P.ls[2];
  if (P.lse_f64) {
    static_cast<double*>(P.lse)[off] = v;
  } else {
    static_cast<float*>(P.lse)[off] = static_cast<float>(v);
  }
}

// The per-batch / per-head arrays a resolved Problem points into.
struct ProblemStorage {
  std::vector<int64_t> valid_kv, diag_kv;
  std::vector<float> slope2;
  std::vector<double> slope;
};

// Fills everything in *P from validated arguments (dims d): pointers,
// strides, options, the broadcast mask, kv_lens, the diagonal lengths and
// the ALiBi slopes (kept in *st, which must outlive *P). `out`/`lse` may be
// absent. Shared by the forward (dispatch.cc) and the backward (backward.cc).
Status ResolveProblem(const char* op, const SdpaDims& d, const TensorView& out,
                      const TensorView& lse, const TensorView& q, const TensorView& k,
                      const TensorView& v, const SdpaOptions& opt, Problem* P,
                      ProblemStorage* st);

// Per-target facts the planner needs (queried through dynamic dispatch).
struct TargetInfo {
  int64_t target = 0;     // Highway target bit
  int64_t lanes = 1;      // fp32 lanes per vector
  int64_t row_block = 2;  // prefill tile rows must be a multiple of this
  int64_t key_block = 4;  // QK micro-kernel keys per block
  int64_t pv_rows = 4;    // PV micro-kernel rows per block
};

// The partition of one call into tasks. Depends only on the problem shape and
// the target's vector length, never on the thread count.
struct Plan {
  int64_t lanes = 1;
  int64_t dp = 0, dvp = 0;  // D, Dv padded to a multiple of lanes
  int64_t tkv = 0;          // keys per tile (multiple of key_block and lanes)

  // Prefill: a tile is `hc` query heads of one kv group x `tq` positions,
  // padded to `rows` (a multiple of lanes).
  int64_t rows = 0, tq = 0, hc = 0, n_hchunks = 0, n_qtiles = 0;

  // Decode: a task is one (b, kv head, split); rows = G * Lq.
  int64_t split_len = 0, n_splits = 0;

  // Backward pass A: key tiles of tkv keys per (b, kv head).
  int64_t n_ktiles = 0;

  int64_t num_tasks = 0;
  size_t worker_floats = 0;  // scratch floats per worker
  size_t partial_floats = 0; // decode: floats per task partial (rows*(dvp+2))
  int fast_d = 0;            // 0 = generic head-dim path, else D == Dv == fast_d
};

// Bump allocation of one worker's scratch, in floats: Take(n) returns the
// offset of the next block of n floats (at least 1 float, so every block has
// its own offset); every block starts 64-byte aligned; TakeEach gives each of
// several offsets, in order, a block of the same size; total() is the size
// taken so far.
inline size_t AlignFloats(size_t n) { return (n + 15) & ~static_cast<size_t>(15); }
class ScratchBump {
 public:
  size_t Take(size_t n) {
    const size_t at = off_;
    off_ += AlignFloats(n == 0 ? 1 : n);
    return at;
  }
  void TakeEach(std::initializer_list<size_t*> offsets, size_t n) {
    for (size_t* o : offsets) *o = Take(n);
  }
  size_t total() const { return off_; }

 private:
  size_t off_ = 0;
};

// The tile sizes of a plan as size_t: rows (query rows of a tile), tkv (keys
// of a tile), dp / dvp (head dims padded to the lane count).
struct TileSizes {
  size_t rows, tkv, dp, dvp;
};
inline TileSizes TileSizesOf(const Plan& pl) {
  return {static_cast<size_t>(pl.rows), static_cast<size_t>(pl.tkv), static_cast<size_t>(pl.dp),
          static_cast<size_t>(pl.dvp)};
}

// The per-row visibility scratch that the prefill, decode and backward tiles
// share: the visible key range [first, last] and the diagonal (int32 per
// row), the ALiBi slope (float per row), and the live flags (uint8 per row
// and per row-pair block). RowScratchOffsets are offsets in floats,
// RowScratch the pointers into one worker's scratch.
struct RowScratchOffsets {
  size_t first, last, diag, slope, live, pairlive;
};
inline RowScratchOffsets TakeRowScratch(ScratchBump* a, size_t rows) {
  RowScratchOffsets o;
  o.first = a->Take(rows);
  o.last = a->Take(rows);
  o.diag = a->Take(rows);
  o.slope = a->Take(rows);
  o.live = a->Take(rows / 4 + 1);
  o.pairlive = a->Take(rows / 4 + 1);
  return o;
}
struct RowScratch {
  int32_t* first;
  int32_t* last;
  int32_t* diag;
  float* slope;
  uint8_t* live;
  uint8_t* pairlive;
};
inline RowScratch RowScratchAt(float* scratch, const RowScratchOffsets& o) {
  return {reinterpret_cast<int32_t*>(scratch + o.first),
          reinterpret_cast<int32_t*>(scratch + o.last),
          reinterpret_cast<int32_t*>(scratch + o.diag), scratch + o.slope,
          reinterpret_cast<uint8_t*>(scratch + o.live),
          reinterpret_cast<uint8_t*>(scratch + o.pairlive)};
}

// Offsets (in floats, each 64-byte aligned) of one worker's scratch buffers.
// Prefill: qt is the transposed Q tile [D][rows]; st the score tile
// [tkv][rows]. Decode: qt holds Q rows [rows][dp]; st the scores [rows][tkv].
struct ScratchLayout {
  size_t qt, kt, vt, st, tmax, o, m, l, alpha;
  RowScratchOffsets row;
  size_t total;
};
inline ScratchLayout MakeScratchLayout(const Plan& pl) {
  const auto [rows, tkv, dp, dvp] = TileSizesOf(pl);
  ScratchLayout s{};
  ScratchBump a;
  s.qt = a.Take(rows * dp);
  s.kt = a.Take(tkv * dp);
  s.vt = a.Take(tkv * dvp);
  s.st = a.Take(rows * tkv);
  s.tmax = a.Take(rows);
  s.o = a.Take(rows * dvp);
  a.TakeEach({&s.m, &s.l, &s.alpha}, rows);
  s.row = TakeRowScratch(&a, rows);
  s.total = a.total();
  return s;
}

// The partials that the split-KV decode kernels (f32 and int8) write for the
// splits s = 0..n_splits-1 of one (b, kv head): split s starts at
// base + s * stride and holds O [rows][pitch] (unnormalised), then m [rows]
// (running max, log2 domain), then l [rows] (sum of 2^(score - m)). The merge
// of both kernels reads them through this one view, in split order.
struct SplitPartials {
  const float* base;
  size_t stride, rows, pitch;
  int64_t n_splits;

  const float* Part(int64_t s) const { return base + static_cast<size_t>(s) * stride; }
  // M = max m_s over the splits with l_s > 0 (-inf when none); *nan (if not
  // null) says whether some m_s or l_s of row r is NaN.
  double MaxM(size_t r, bool* nan) const {
    double M = -std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < n_splits; ++s) {
      const float* part = Part(s);
      const float ms = part[rows * pitch + r], ls = part[rows * pitch + rows + r];
      if (nan != nullptr && (std::isnan(ms) || std::isnan(ls))) *nan = true;
      if (ls > 0.0f && ms > M) M = ms;
    }
    return M;
  }
  // For s = 0..n_splits-1 in order, over the splits with l_s > 0: the weight
  // w_s = 2^(m_s - M) (double), then lsum += w_s * l_s, then fn(w_s, O_s row
  // r). Returns lsum (0 when no split has l_s > 0).
  template <class F>
  double ForEachWeighted(size_t r, double M, F fn) const {
    double lsum = 0.0;
    for (int64_t s = 0; s < n_splits; ++s) {
      const float* part = Part(s);
      const float ms = part[rows * pitch + r], ls = part[rows * pitch + rows + r];
      if (!(ls > 0.0f)) continue;
      const double w = std::exp2(static_cast<double>(ms) - M);
      lsum += w * ls;
      fn(w, part + r * pitch);
    }
    return lsum;
  }
};

// The backward (flash_backward-inl.h): the forward problem plus the
// gradient tensors and the per-row statistics of the forward.
struct BwdProblem {
  Problem P;  // q, k, v, masks and options as in the forward (P.out unused)
  const float* dout = nullptr;
  int64_t dos[4] = {};
  float* dq = nullptr;  // nullptr = not wanted
  int64_t dqs[4] = {};
  float* dk = nullptr;
  int64_t dks[4] = {};
  float* dv = nullptr;
  int64_t dvs[4] = {};
  // [B*H*Lq] row-major (b, h, i): lse * log2(e) as an unevaluated sum
  // lse2 + lse2_lo of two floats (+inf, 0 for rows whose forward saw no key)
  // and delta = sum_j P_ij dP_ij - dlse_i. The delta pass renormalises lse2
  // to the backward's own scores (lse2 += log2 sum_j P_ij) and writes delta
  // (which starts as -dlse_i).
  float* lse2 = nullptr;
  float* lse2_lo = nullptr;
  float* delta = nullptr;
  float scale = 1.0f;  // natural-domain scale (dq, dk)
};

// One worker's backward scratch: query tile Q^T [dp][rows], dO^T [dvp][rows],
// Q rows [rows][dp], dO rows [rows][dvp]; packed K [tkv][dp], V [tkv][dvp];
// P / dP,dS / tanh tiles [tkv][rows]; accumulators acc_a (dK [tkv][dp] or
// dQ [rows][dp]) and acc_b (dV [tkv][dvp]); per-row scalars.
struct BwdScratchLayout {
  size_t qt, dot, qr, dor, kt, vt, st, dpt, tt, tmax, acc_a, acc_b, dacc, lse2, lse2_lo, delta,
      ones, livei, ones8;
  RowScratchOffsets row;
  size_t total;
};
inline BwdScratchLayout MakeBwdScratchLayout(const Plan& pl) {
  const auto [rows, tkv, dp, dvp] = TileSizesOf(pl);
  const size_t big = rows > tkv ? rows : tkv;
  BwdScratchLayout s{};
  ScratchBump a;
  a.TakeEach({&s.qt, &s.qr}, rows * dp);     // Q^T, Q rows
  a.TakeEach({&s.dot, &s.dor}, rows * dvp);  // dO^T, dO rows
  s.kt = a.Take(tkv * dp);
  s.vt = a.Take(tkv * dvp);
  a.TakeEach({&s.st, &s.dpt, &s.tt}, rows * tkv);  // P, dP / dS, tanh
  s.tmax = a.Take(rows);
  s.acc_a = a.Take(big * dp);
  s.acc_b = a.Take(tkv * dvp);
  s.dacc = a.Take(4 * rows);  // two doubles per row (the delta pass)
  a.TakeEach({&s.lse2, &s.lse2_lo, &s.delta}, rows);
  s.ones = a.Take(big);
  s.livei = a.Take(rows);     // int32 (0 / -1)
  s.ones8 = a.Take(big / 4 + 1);  // uint8, all 1
  s.row = TakeRowScratch(&a, rows);
  s.total = a.total();
  return s;
}

// Exported per-target entry points (kernels_prefill.cc: GetTargetInfo,
// RunPrefillTask, RecomputeRowScalar; kernels_decode.cc: RunDecodeSplit,
// MergeDecodeSplits; HWY_DYNAMIC_DISPATCH).
void GetTargetInfo(TargetInfo* info);
void RunPrefillTask(const Problem& p, const Plan& plan, int64_t task,
                    float* scratch);
void RunDecodeSplit(const Problem& p, const Plan& plan, int64_t task,
                    float* scratch, float* partial);
// Fixed-order log-sum-exp merge of the splits of one (b, kv head) (double,
// SIMD over Dv; per target).
void MergeDecodeSplits(const Problem& p, const Plan& plan, int64_t bh,
                       const float* partials);
// Scalar fp32 recomputation of one output row (b, h, i) with the reference's
// treatment of non-finite values: a key whose weight is exactly 0 (hidden by
// index, mask or underflow) contributes nothing even if its K/V hold NaN/Inf.
// The SIMD kernels call it for the rare rows whose result is not finite
// (0 * Inf/NaN in P.V would otherwise poison rows that never see the key).
void RecomputeRowScalar(const Problem& p, int64_t b, int64_t h, int64_t i);
// Backward passes (kernels_backward.cc): return false when a value they
// wrote is not finite (the dispatcher then recomputes with the reference).
// `scratch` must hold MakeBwdScratchLayout(plan).total floats with `ones`
// (float 1.0) and `ones8` (uint8 1) filled by InitBwdScratch.
void InitBwdScratch(const Plan& plan, float* scratch);
void RunBackwardDeltaTask(const BwdProblem& p, const Plan& plan, int64_t task, float* scratch);
bool RunBackwardKvTask(const BwdProblem& p, const Plan& plan, int64_t task, float* scratch);
bool RunBackwardQTask(const BwdProblem& p, const Plan& plan, int64_t task, float* scratch);

}  // namespace kernels
}  // namespace attnflow
