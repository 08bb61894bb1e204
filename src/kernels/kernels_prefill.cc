// kernels_prefill.cc — compiles the flash prefill kernel once per Highway
// target and exports it through HWY_DYNAMIC_DISPATCH (the best target the
// CPU supports is chosen at the first call). Also home of the target facts
// (GetTargetInfo) and of RecomputeRowScalar, the exact scalar recomputation
// of one row that prefill and decode both fall back to on non-finite values.
//
// The split-KV decode kernel and its merge live in kernels_decode.cc: two
// translation units, so a parallel build compiles them on two cores (this
// was one file, the longest compile of the sanitizer builds). Each TU runs
// its own foreach_target pass (its own HWY_TARGET_INCLUDE); the -inl.h
// headers hold only inline functions and templates, so both may include
// flash_common-inl.h without duplicate symbols.
//
// Targets: the project's one target policy, src/core/hwy_targets.h.
#include "core/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels_prefill.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/flash_common-inl.h"
#include "kernels/flash_prefill-inl.h"
#include "attnflow/kernels.h"
#include "kernels/internal.h"

ATTNFLOW_HWY_NAMESPACE_BEGIN(kernels)

void GetTargetInfoT(TargetInfo* info) {
  const DF df;
  info->target = HWY_TARGET;
  info->lanes = static_cast<int64_t>(hn::Lanes(df));
  info->row_block = 2 * info->lanes;
  info->key_block = kQkKeys;
  info->pv_rows = kPvRows;
}

void RunPrefillTaskT(const Problem& p, const Plan& plan, int64_t task,
                     float* scratch) {
  switch (plan.fast_d) {
    case 64: return PrefillTask<64>(p, plan, task, scratch);
    case 80: return PrefillTask<80>(p, plan, task, scratch);
    case 96: return PrefillTask<96>(p, plan, task, scratch);
    case 128: return PrefillTask<128>(p, plan, task, scratch);
    default: return PrefillTask<0>(p, plan, task, scratch);
  }
}

ATTNFLOW_HWY_NAMESPACE_END()

#if HWY_ONCE
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnflow::kernels {

ATTNFLOW_HWY_EXPORT_DISPATCH(void, GetTargetInfo, (TargetInfo* info), (info))
ATTNFLOW_HWY_EXPORT_DISPATCH(void, RunPrefillTask,
                             (const Problem& p, const Plan& plan, int64_t task, float* scratch),
                             (p, plan, task, scratch))
namespace {

float LoadAsF32(const void* base, DType t, int64_t off) {
  switch (t) {
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(base)[off]);
    case DType::kBF16: return BF16ToF32(static_cast<const uint16_t*>(base)[off]);
    case DType::kF64: return static_cast<float>(static_cast<const double*>(base)[off]);
    case DType::kBool: return static_cast<const uint8_t*>(base)[off] ? 1.0f : 0.0f;
    default: return static_cast<const float*>(base)[off];
  }
}

// Masked, scaled, biased score of key j in the natural-log domain (fp32), or
// -inf when hidden; the reference's rules, including NaN propagation.
float RowScore(const Problem& P, int64_t b, int64_t h, int64_t hk, int64_t i,
               int64_t j, const KeyRange& kr, float scale) {
  if (j < kr.first || j > kr.last) return -std::numeric_limits<float>::infinity();
  const float* q = P.q + b * P.qs[0] + h * P.qs[1] + i * P.qs[2];
  const int64_t k0 = b * P.ks[0] + hk * P.ks[1] + j * P.ks[2];
  float acc = 0.0f;
  for (int64_t d = 0; d < P.D; ++d) acc += q[d * P.qs[3]] * LoadAsF32(P.k, P.kt, k0 + d * P.ks[3]);
  float x = acc * scale;
  if (P.softcap > 0.0) {
    const float cap = static_cast<float>(P.softcap);
    x = cap * std::tanh(x / cap);
  }
  if (P.mask != nullptr) {
    const int64_t mo = b * P.ms[0] + h * P.ms[1] + i * P.ms[2] + j * P.ms[3];
    const float mv = LoadAsF32(P.mask, P.mt, mo);
    if (P.mt == DType::kBool) {
      if (mv == 0.0f) return -std::numeric_limits<float>::infinity();
    } else {
      x += mv;
    }
  }
  if (P.slope != nullptr) {
    x += static_cast<float>(AlibiBias(P.slope[b * P.slope_bs + h], i, j, P.Lq, P.diag_kv[b]));
  }
  return x;
}

}  // namespace

void RecomputeRowScalar(const Problem& P, int64_t b, int64_t h, int64_t i) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const int64_t hk = h / P.G;
  const KeyRange kr = VisibleKeys(P.causal, P.window_left, P.window_right, i, P.Lq,
                                  P.diag_kv[b], P.valid_kv[b]);
  const float scale = static_cast<float>(static_cast<double>(P.scale2) / kLog2e);
  float* out = P.out + b * P.os[0] + h * P.os[1] + i * P.os[2];
  const bool lse = P.lse != nullptr;
  // Pass 1: max over visible scores; NaN anywhere visible poisons the row.
  float mx = -kInf;
  bool nan = false;
  const int64_t first = std::max<int64_t>(kr.first, 0), last = std::min(kr.last, P.Lk - 1);
  for (int64_t j = first; j <= last; ++j) {
    const float x = RowScore(P, b, h, hk, i, j, kr, scale);
    if (std::isnan(x)) nan = true;
    else if (x > mx) mx = x;
  }
  if (nan) {
    for (int64_t c = 0; c < P.Dv; ++c) out[c * P.os[3]] = std::numeric_limits<float>::quiet_NaN();
    if (lse) StoreLse(P, b, h, i, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  if (mx == -kInf) {
    for (int64_t c = 0; c < P.Dv; ++c) out[c * P.os[3]] = 0.0f;
    if (lse) StoreLse(P, b, h, i, -std::numeric_limits<double>::infinity());
    return;
  }
  // Pass 2: weights (exact zeros skip their V row), sum, weighted V.
  float acc[kFastMaxHeadDim] = {};
  float sum = 0.0f;
  for (int64_t j = first; j <= last; ++j) {
    const float x = RowScore(P, b, h, hk, i, j, kr, scale);
    if (x == -kInf) continue;
    const float w = std::exp(x - mx);  // NaN for a +inf logit, as in the reference
    sum += w;
    if (w == 0.0f) continue;
    const int64_t v0 = b * P.vs[0] + hk * P.vs[1] + j * P.vs[2];
    for (int64_t c = 0; c < P.Dv; ++c) acc[c] += w * LoadAsF32(P.v, P.vt, v0 + c * P.vs[3]);
  }
  for (int64_t c = 0; c < P.Dv; ++c) out[c * P.os[3]] = acc[c] / sum;
  if (lse) StoreLse(P, b, h, i, mx + std::log(sum));
}

}  // namespace attnflow::kernels
#endif  // HWY_ONCE
