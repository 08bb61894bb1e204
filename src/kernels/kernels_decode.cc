// kernels_decode.cc — compiles the split-KV decode kernel and the fixed-order
// merge of its splits once per Highway target and exports them through
// HWY_DYNAMIC_DISPATCH (the best target the CPU supports is chosen at the
// first call).
//
// Invariant: splits are merged in order 0..S-1 and their lengths depend only
// on the shape, so results are bit-identical for any thread count. The prefill
// kernel, GetTargetInfo and RecomputeRowScalar live in kernels_prefill.cc (one
// foreach_target pass per TU, so a parallel build compiles the two on two
// cores).
//
// Targets: the project's one target policy, src/core/hwy_targets.h.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels_decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/flash_common-inl.h"
#include "kernels/flash_decode-inl.h"
#include "attnflow/kernels.h"
#include "kernels/internal.h"

ATTNFLOW_HWY_NAMESPACE_BEGIN(kernels)

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
  const SplitPartials parts{partials + static_cast<size_t>(bh * S) * pl.partial_floats,
                            pl.partial_floats, rows, dvp, S};
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
    bool nan = false;
    const double M = parts.MaxM(r, &nan);
    float* out = P.out + b * P.os[0] + h * P.os[1] + i * P.os[2];
    double lse;
    if (nan) {  // NaN/Inf met somewhere: exact scalar semantics for this row
      RecomputeRowScalar(P, b, h, i);
      continue;
    } else if (M == -std::numeric_limits<double>::infinity()) {
      for (int64_t c = 0; c < P.Dv; ++c) out[c * P.os[3]] = 0.0f;
      lse = -std::numeric_limits<double>::infinity();
    } else {
      bool first = true;
      const double lsum = parts.ForEachWeighted(r, M, [&](double w, const float* o) {
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
      });
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
      lse = (M + std::log2(lsum)) * kLn2;
      if (!finite || !std::isfinite(lse)) {
        RecomputeRowScalar(P, b, h, i);
        continue;
      }
    }
    if (P.lse != nullptr) StoreLse(P, b, h, i, lse);
  }
}

ATTNFLOW_HWY_NAMESPACE_END()

#if HWY_ONCE
namespace attnflow::kernels {

ATTNFLOW_HWY_EXPORT_DISPATCH(void, RunDecodeSplit,
                             (const Problem& p, const Plan& plan, int64_t task, float* scratch,
                              float* partial),
                             (p, plan, task, scratch, partial))
ATTNFLOW_HWY_EXPORT_DISPATCH(void, MergeDecodeSplits,
                             (const Problem& P, const Plan& pl, int64_t bh, const float* partials),
                             (P, pl, bh, partials))

}  // namespace attnflow::kernels
#endif  // HWY_ONCE
