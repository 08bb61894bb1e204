// backward.cc — attnflow::AttentionBackward: validation, the choice between
// the fast tiled backward and the float64 reference, planning, the per-row
// pre-pass and the two passes of flash_backward-inl.h.
//
// Rules (docs/kernels.md "Backward"):
//  1. ValidateSdpaBackward("attention_backward", ...).
//  2. The fast kernel needs q, dout F32, lse F32/F64 (present; out unused),
//     dq/dk/dv F32 or absent, k/v F32/F16/BF16, 1 <= D, Dv <= 256 and
//     Lq, Lk < 2^30; otherwise (or forced) reference::SdpaBackward runs.
//  3. Pre-pass (serial): per row lse2 = lse * log2(e) as two floats (+inf
//     when lse is -inf: the row saw no key); then the delta pass (parallel,
//     by query tile): delta = sum_j P_ij dP_ij - dlse_i from the kernel's own
//     P and dP (not dout . out as in FlashAttention: the rows of dS then sum
//     to 0 up to rounding, the property of the plain softmax gradient; the
//     forward's out is not needed).
//  4. Pass A (dk, dv) and pass B (dq) over tasks fixed by the shape; every
//     output element is written by one task in a fixed order, so results do
//     not depend on the thread count. A non-finite written value sends the
//     whole call to the reference (exact handling of NaN/Inf, as the
//     forward's RecomputeRowScalar).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnflow/kernels.h"
#include "attnflow/reference.h"
#include "hwy/targets.h"
#include "kernels/internal.h"

namespace attnflow {
namespace {

using kernels::BwdProblem;
using kernels::Plan;

constexpr int64_t kMaxLen = int64_t{1} << 30;
constexpr const char* kOp = "attention_backward";

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

bool KvOk(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// "" when the fast backward can run, else why not.
std::string WhyNotFast(const TensorView& dq, const TensorView& dk, const TensorView& dv,
                       const TensorView& dout, const TensorView& dlse, const TensorView& q,
                       const TensorView& k, const TensorView& v, const TensorView& out,
                       const TensorView& lse, const SdpaDims& d) {
  if (q.dtype != DType::kF32) return std::string("q is ") + DTypeName(q.dtype) + " (need F32)";
  if (dout.dtype != DType::kF32) {
    return std::string("dout is ") + DTypeName(dout.dtype) + " (need F32)";
  }
  if (lse.empty_view() || (lse.dtype != DType::kF32 && lse.dtype != DType::kF64)) {
    return "the forward's lse is absent or not F32/F64";
  }
  if (!dlse.empty_view() && dlse.dtype != DType::kF32 && dlse.dtype != DType::kF64) {
    return "dlse is not F32/F64";
  }
  for (const TensorView* g : {&dq, &dk, &dv}) {
    if (!g->empty_view() && g->dtype != DType::kF32) return "a gradient output is not F32";
  }
  if (!KvOk(k.dtype) || !KvOk(v.dtype)) {
    return std::string("k/v dtype ") + DTypeName(k.dtype) + "/" + DTypeName(v.dtype) +
           " (need F32, F16 or BF16)";
  }
  if (d.head_dim < 1 || d.head_dim > kFastMaxHeadDim || d.v_dim < 1 || d.v_dim > kFastMaxHeadDim) {
    return "head_dim D=" + std::to_string(d.head_dim) + " / Dv=" + std::to_string(d.v_dim) +
           " outside 1.." + std::to_string(kFastMaxHeadDim);
  }
  if (d.q_len >= kMaxLen || d.kv_len >= kMaxLen) return "q_len/kv_len exceed 2^30";
  return "";
}

void PlanBackward(const SdpaDims& d, const KernelOptions& kopt, const kernels::TargetInfo& t,
                  Plan* pl) {
  const int64_t G = std::max<int64_t>(1, d.num_heads / std::max<int64_t>(d.num_kv_heads, 1));
  pl->lanes = t.lanes;
  pl->dp = RoundUp(d.head_dim, t.lanes);
  pl->dvp = RoundUp(d.v_dim, t.lanes);
  pl->fast_d = (d.head_dim == d.v_dim && (d.head_dim == 64 || d.head_dim == 128))
                   ? static_cast<int>(d.head_dim)
                   : 0;
  const bool big = std::max(d.head_dim, d.v_dim) > 128;
  int64_t rows_target = big ? 32 : 64;
  if (kopt.tile_q > 0) {
    rows_target = std::min<int64_t>({kopt.tile_q, 4096, G * std::max<int64_t>(d.q_len, 1)});
  }
  rows_target = RoundUp(std::max<int64_t>(rows_target, 1), t.row_block);
  pl->hc = std::min(G, rows_target);
  pl->tq = std::min(std::max<int64_t>(1, rows_target / pl->hc), std::max<int64_t>(d.q_len, 1));
  pl->rows = RoundUp(pl->hc * pl->tq, t.lanes);
  pl->n_hchunks = CeilDiv(G, pl->hc);
  pl->n_qtiles = CeilDiv(d.q_len, pl->tq);
  int64_t tkv = big ? 32 : 64;
  if (kopt.tile_kv > 0) {
    tkv = std::max<int64_t>(
        1, std::min<int64_t>({kopt.tile_kv, 4096, std::max<int64_t>(d.kv_len, 1)}));
  }
  pl->tkv = RoundUp(tkv, 16);
  pl->n_ktiles = CeilDiv(d.kv_len, pl->tkv);
  pl->worker_floats = kernels::MakeBwdScratchLayout(*pl).total;
}

struct AlignedBuffer {
  void* p = nullptr;
  ~AlignedBuffer() { AlignedFree(p); }
};

}  // namespace

Status AttentionBackward(const TensorView& dq, const TensorView& dk, const TensorView& dv,
                         const TensorView& dout, const TensorView& dlse, const TensorView& q,
                         const TensorView& k, const TensorView& v, const TensorView& out,
                         const TensorView& lse, const SdpaOptions& opt, const KernelOptions& kopt,
                         KernelChoice* choice) {
  SdpaDims d{};
  ATTNFLOW_RETURN_IF_ERROR(
      ValidateSdpaBackward(kOp, dq, dk, dv, dout, dlse, out, lse, q, k, v, opt, &d));
  KernelChoice ch;
  if (kopt.force != KernelKind::kAuto && kopt.force != KernelKind::kReference &&
      kopt.force != KernelKind::kTiledBackward) {
    return InvalidArgument(std::string(kOp) + ": cannot force " + KernelKindName(kopt.force) +
                           " (the backward runs tiled_backward or reference)");
  }
  std::string why = kopt.force == KernelKind::kReference
                        ? std::string("forced by KernelOptions.force")
                        : WhyNotFast(dq, dk, dv, dout, dlse, q, k, v, out, lse, d);
  if (!why.empty() && kopt.force == KernelKind::kTiledBackward) {
    return InvalidArgument(std::string(kOp) + ": cannot force tiled_backward: " + why);
  }
  if (!why.empty()) {
    ch.kernel = KernelKind::kReference;
    ch.reason = "reference: " + why;
    if (choice != nullptr) *choice = ch;
    return reference::SdpaBackward(dq, dk, dv, dout, dlse, q, k, v, opt);
  }

  kernels::TargetInfo t;
  kernels::GetTargetInfo(&t);
  Plan pl;
  PlanBackward(d, kopt, t, &pl);
  const int64_t n_a = d.batch * d.num_kv_heads * pl.n_ktiles;
  const int64_t n_b = d.batch * d.num_kv_heads * pl.n_hchunks * pl.n_qtiles;
  ch.kernel = KernelKind::kTiledBackward;
  ch.simd_target = hwy::TargetName(t.target);
  ch.tile_q = pl.rows;
  ch.tile_kv = pl.tkv;
  ch.num_tasks = n_a + n_b;
  if (choice != nullptr) {
    ch.reason = "tiled_backward: P recomputed from the forward's lse; pass A " +
                std::to_string(n_a) + " tasks (b, kv head, key tile: dK, dV over the group's " +
                "query tiles), pass B " + std::to_string(n_b) +
                " tasks (b, kv head, head chunk, query tile: dQ), fixed by shape";
    *choice = ch;
  }
  // Zero-sized problems: gradients of what exists are zero.
  const int64_t rows_total = d.batch * d.num_heads * d.q_len;
  if (d.batch == 0 || d.num_kv_heads == 0 || (d.q_len == 0 && d.kv_len == 0)) {
    return Status::Ok();
  }

  BwdProblem BP;
  kernels::ProblemStorage storage;
  ATTNFLOW_RETURN_IF_ERROR(
      kernels::ResolveProblem(kOp, d, out, lse, q, k, v, opt, &BP.P, &storage));
  BP.P.out = nullptr;
  BP.P.lse = nullptr;
  BP.dout = static_cast<const float*>(dout.data);
  for (int i = 0; i < 4; ++i) BP.dos[i] = dout.strides[i];
  auto grad = [](const TensorView& g, float** p, int64_t* s) {
    if (g.empty_view()) return;
    *p = static_cast<float*>(g.data);
    for (int i = 0; i < 4; ++i) s[i] = g.strides[i];
  };
  grad(dq, &BP.dq, BP.dqs);
  grad(dk, &BP.dk, BP.dks);
  grad(dv, &BP.dv, BP.dvs);
  BP.scale = static_cast<float>(d.scale);

  // Pre-pass: lse2 and delta per row (float64 sums, rounded once).
  Result<Tensor> rowbuf = Tensor::Zeros(DType::kF32, {3 * rows_total + 1});
  if (!rowbuf.ok()) {
    return ResourceExhausted(std::string(kOp) + ": cannot allocate row statistics for " +
                             std::to_string(rows_total) + " rows");
  }
  float* lse2 = rowbuf->data<float>();
  float* lse2_lo = lse2 + rows_total;
  float* delta = lse2_lo + rows_total;
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.num_heads; ++h) {
      for (int64_t i = 0; i < d.q_len; ++i) {
        const size_t row = static_cast<size_t>((b * d.num_heads + h) * d.q_len + i);
        const double l = lse.load(b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]);
        if (l == -std::numeric_limits<double>::infinity()) {
          lse2[row] = std::numeric_limits<float>::infinity();
          lse2_lo[row] = 0.0f;
        } else {
          const double l2 = l * kernels::kLog2e;
          lse2[row] = static_cast<float>(l2);
          lse2_lo[row] = std::isfinite(lse2[row]) ? static_cast<float>(l2 - lse2[row]) : 0.0f;
        }
        delta[row] = dlse.empty_view()
                         ? 0.0f
                         : static_cast<float>(-dlse.load(b * dlse.strides[0] + h * dlse.strides[1] +
                                                         i * dlse.strides[2]));
      }
    }
  }
  BP.lse2 = lse2;
  BP.lse2_lo = lse2_lo;
  BP.delta = delta;

  ThreadPool& pool = kopt.pool != nullptr ? *kopt.pool : DefaultPool();
  const size_t workers = static_cast<size_t>(std::max(pool.NumWorkers(), 1));
  const size_t wf = pl.worker_floats;
  if (wf > std::numeric_limits<size_t>::max() / 8 / workers) {
    return ResourceExhausted(std::string(kOp) + ": scratch size overflows");
  }
  AlignedBuffer scratch;
  scratch.p = AlignedAlloc(workers * wf * sizeof(float));
  if (scratch.p == nullptr) {
    return ResourceExhausted(std::string(kOp) + ": cannot allocate " +
                             std::to_string(workers * wf * sizeof(float)) +
                             " bytes of kernel scratch");
  }
  float* base = static_cast<float*>(scratch.p);
  for (size_t w = 0; w < workers; ++w) kernels::InitBwdScratch(pl, base + w * wf);
  std::atomic<bool> finite{true};
  if (d.q_len > 0) {  // delta = sum_j P dP - dlse per row, before both gradient passes
    pool.ParallelFor(n_b, [&](int64_t task, int worker) {
      kernels::RunBackwardDeltaTask(BP, pl, task, base + static_cast<size_t>(worker) * wf);
    });
  }
  if (BP.dk != nullptr || BP.dv != nullptr) {
    pool.ParallelFor(n_a, [&](int64_t task, int worker) {
      if (!kernels::RunBackwardKvTask(BP, pl, task, base + static_cast<size_t>(worker) * wf)) {
        finite.store(false, std::memory_order_relaxed);
      }
    });
  }
  if (BP.dq != nullptr && d.q_len > 0) {
    pool.ParallelFor(n_b, [&](int64_t task, int worker) {
      if (!kernels::RunBackwardQTask(BP, pl, task, base + static_cast<size_t>(worker) * wf)) {
        finite.store(false, std::memory_order_relaxed);
      }
    });
  }
  if (!finite.load()) {
    if (choice != nullptr) {
      choice->kernel = KernelKind::kReference;
      choice->reason =
          "reference: the tiled backward produced a non-finite value (NaN/Inf "
          "inputs); recomputed exactly";
    }
    return reference::SdpaBackward(dq, dk, dv, dout, dlse, q, k, v, opt);
  }
  return Status::Ok();
}

}  // namespace attnflow
