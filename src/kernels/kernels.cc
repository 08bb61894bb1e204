// kernels.cc — compiles the flash kernels once per Highway target and exports
// them through HWY_DYNAMIC_DISPATCH (the best target the CPU supports is
// chosen at the first call).
//
// Targets: the project's one target policy, src/core/hwy_targets.h.
#include "core/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/flash_common-inl.h"
#include "kernels/flash_decode-inl.h"
#include "kernels/flash_prefill-inl.h"
#include "attnflow/kernels.h"
#include "kernels/internal.h"

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace kernels {
namespace HWY_NAMESPACE {

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

void RunDecodeSplitT(const Problem& p, const Plan& plan, int64_t task,
                     float* scratch, float* partial) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const bool direct = p.kt == p.vt && p.ks[3] == 1 && p.vs[3] == 1 &&
                      p.D % N == 0 && p.Dv % N == 0;
  if (!direct) return DecodeSplit<float, false>(p, plan, task, scratch, partial);
  switch (p.kt) {
    case DType::kF16:
      return DecodeSplit<hwy::float16_t, true>(p, plan, task, scratch, partial);
    case DType::kBF16:
      return DecodeSplit<hwy::bfloat16_t, true>(p, plan, task, scratch, partial);
    default:
      return DecodeSplit<float, true>(p, plan, task, scratch, partial);
  }
}

// Combines the splits s = 0..S-1 of one (b, kv head) in that fixed order:
//   M = max_s m_s;  w_s = l_s > 0 ? 2^(m_s - M) : 0
//   l = sum_s w_s l_s;  out = (sum_s w_s O_s) / l;  lse = (M + log2 l) ln 2
// (log2 domain, accumulated in double). A NaN partial makes the row NaN.
// The Dv loops are SIMD over doubles (each element: acc += w * O, a
// multiply then an add, then acc / l, exactly as the scalar form; the order
// over s is fixed), so the result depends only on the shape.
void MergeDecodeSplitsT(const Problem& P, const Plan& pl, int64_t bh,
                        const float* HWY_RESTRICT partials) {
  const int64_t hk = bh % P.Hkv, b = bh / P.Hkv;
  const size_t rows = static_cast<size_t>(pl.rows);
  const size_t dvp = static_cast<size_t>(pl.dvp);
  const int64_t S = pl.n_splits;
  const float* base = partials + static_cast<size_t>(bh * S) * pl.partial_floats;
  HWY_ALIGN double acc[kFastMaxHeadDim];  // Dv <= dvp <= 256 (dispatch rule)
  HWY_ALIGN float res[kFastMaxHeadDim];
#if HWY_HAVE_FLOAT64
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dfh;
  const size_t Nd = hn::Lanes(dd);
#endif
  for (size_t r = 0; r < rows; ++r) {
    const int64_t hl = static_cast<int64_t>(r) / P.Lq, i = static_cast<int64_t>(r) % P.Lq;
    const int64_t h = hk * P.G + hl;
    double M = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (int64_t s = 0; s < S; ++s) {
      const float* part = base + static_cast<size_t>(s) * pl.partial_floats;
      const float ms = part[rows * dvp + r], ls = part[rows * dvp + rows + r];
      if (std::isnan(ms) || std::isnan(ls)) nan = true;
      if (ls > 0.0f && ms > M) M = ms;
    }
    float* out = P.out + b * P.os[0] + h * P.os[1] + i * P.os[2];
    float lse;
    if (nan) {  // NaN/Inf met somewhere: exact scalar semantics for this row
      RecomputeRowScalar(P, b, h, i);
      continue;
    } else if (M == -std::numeric_limits<double>::infinity()) {
      for (int64_t c = 0; c < P.Dv; ++c) out[c * P.os[3]] = 0.0f;
      lse = -std::numeric_limits<float>::infinity();
    } else {
      double lsum = 0.0;
      bool first = true;
      for (int64_t s = 0; s < S; ++s) {
        const float* part = base + static_cast<size_t>(s) * pl.partial_floats;
        const float ms = part[rows * dvp + r], ls = part[rows * dvp + rows + r];
        if (!(ls > 0.0f)) continue;
        const double w = std::exp2(static_cast<double>(ms) - M);
        lsum += w * ls;
        const float* o = part + r * dvp;
#if HWY_HAVE_FLOAT64
        const auto wv = hn::Set(dd, w);
        for (size_t c = 0; c < dvp; c += Nd) {
          const auto x = hn::Mul(wv, hn::PromoteTo(dd, hn::LoadU(dfh, o + c)));
          hn::Store(first ? hn::Add(hn::Zero(dd), x) : hn::Add(hn::Load(dd, acc + c), x), dd,
                    acc + c);
        }
#else
        for (size_t c = 0; c < dvp; ++c) {
          const double x = w * static_cast<double>(o[c]);
          acc[c] = first ? 0.0 + x : acc[c] + x;
        }
#endif
        first = false;
      }
      bool finite = true;
      size_t c = 0;
#if HWY_HAVE_FLOAT64
      const auto lv = hn::Set(dd, lsum);
      auto chk = hn::Zero(dfh);  // x * 0 is NaN exactly when x is Inf or NaN
      const size_t dv = static_cast<size_t>(P.Dv);
      for (; c + Nd <= dv; c += Nd) {
        const auto x = hn::DemoteTo(dfh, hn::Div(hn::Load(dd, acc + c), lv));
        chk = hn::Add(chk, hn::Mul(x, hn::Zero(dfh)));
        hn::StoreU(x, dfh, res + c);
      }
      finite = hn::AllFalse(dfh, hn::IsNaN(chk));
#endif
      for (; c < static_cast<size_t>(P.Dv); ++c) {
        res[c] = static_cast<float>(acc[c] / lsum);
        finite &= std::isfinite(res[c]);
      }
      if (P.os[3] == 1) {
        std::memcpy(out, res, static_cast<size_t>(P.Dv) * sizeof(float));
      } else {
        for (int64_t e = 0; e < P.Dv; ++e) out[e * P.os[3]] = res[e];
      }
      lse = static_cast<float>((M + std::log2(lsum)) * kLn2);
      if (!finite || !std::isfinite(lse)) {
        RecomputeRowScalar(P, b, h, i);
        continue;
      }
    }
    if (P.lse != nullptr) P.lse[b * P.ls[0] + h * P.ls[1] + i * P.ls[2]] = lse;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnflow {
namespace kernels {

HWY_EXPORT(GetTargetInfoT);
HWY_EXPORT(RunPrefillTaskT);
HWY_EXPORT(RunDecodeSplitT);
HWY_EXPORT(MergeDecodeSplitsT);

void GetTargetInfo(TargetInfo* info) {
  HWY_DYNAMIC_DISPATCH(GetTargetInfoT)(info);
}

void RunPrefillTask(const Problem& p, const Plan& plan, int64_t task,
                    float* scratch) {
  HWY_DYNAMIC_DISPATCH(RunPrefillTaskT)(p, plan, task, scratch);
}

void RunDecodeSplit(const Problem& p, const Plan& plan, int64_t task,
                    float* scratch, float* partial) {
  HWY_DYNAMIC_DISPATCH(RunDecodeSplitT)(p, plan, task, scratch, partial);
}

void MergeDecodeSplits(const Problem& P, const Plan& pl, int64_t bh,
                       const float* partials) {
  HWY_DYNAMIC_DISPATCH(MergeDecodeSplitsT)(P, pl, bh, partials);
}

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
  if (P.mask != nullptr) {
    const int64_t mo = b * P.ms[0] + h * P.ms[1] + i * P.ms[2] + j * P.ms[3];
    const float mv = LoadAsF32(P.mask, P.mt, mo);
    if (P.mt == DType::kBool) {
      if (mv == 0.0f) return -std::numeric_limits<float>::infinity();
    } else {
      x += mv;
    }
  }
  if (P.slope != nullptr) x += static_cast<float>(AlibiBias(P.slope[h], i, j, P.Lq, P.Lk));
  return x;
}

}  // namespace

void RecomputeRowScalar(const Problem& P, int64_t b, int64_t h, int64_t i) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const int64_t hk = h / P.G;
  const KeyRange kr = VisibleKeys(P.causal, P.window_left, P.window_right, i, P.Lq,
                                  P.Lk, P.valid_kv[b]);
  const float scale = static_cast<float>(static_cast<double>(P.scale2) / kLog2e);
  float* out = P.out + b * P.os[0] + h * P.os[1] + i * P.os[2];
  float* lse = P.lse != nullptr ? P.lse + b * P.ls[0] + h * P.ls[1] + i * P.ls[2] : nullptr;
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
    if (lse) *lse = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  if (mx == -kInf) {
    for (int64_t c = 0; c < P.Dv; ++c) out[c * P.os[3]] = 0.0f;
    if (lse) *lse = -kInf;
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
  if (lse) *lse = mx + std::log(sum);
}

}  // namespace kernels
}  // namespace attnflow
#endif  // HWY_ONCE
