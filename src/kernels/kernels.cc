// kernels.cc — compiles the flash kernels once per Highway target and exports
// them through HWY_DYNAMIC_DISPATCH (the best target the CPU supports is
// chosen at the first call).
//
// Targets: x86 AVX3 (AVX-512), AVX2 (+FMA, F16C), SSE4 and the EMU128
// fallback; Arm NEON. Sizeless-vector targets (SVE, RVV) are disabled because
// the micro-kernels keep arrays of vector accumulators; on such machines the
// NEON or EMU128 build is used. SSSE3 is disabled (SSE4 covers it).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

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

// Combines the splits s = 0..S-1 of one (b, kv head) in that fixed order:
//   M = max_s m_s;  w_s = l_s > 0 ? 2^(m_s - M) : 0
//   l = sum_s w_s l_s;  out = (sum_s w_s O_s) / l;  lse = (M + log2 l) ln 2
// (log2 domain, accumulated in double). A NaN partial makes the row NaN.
void MergeDecodeSplits(const Problem& P, const Plan& pl, int64_t bh,
                       const float* partials) {
  const int64_t hk = bh % P.Hkv, b = bh / P.Hkv;
  const size_t rows = static_cast<size_t>(pl.rows);
  const size_t dvp = static_cast<size_t>(pl.dvp);
  const int64_t S = pl.n_splits;
  const float* base = partials + static_cast<size_t>(bh * S) * pl.partial_floats;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  double acc[kFastMaxHeadDim];  // Dv <= 256 (dispatch rule)
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
    if (nan) {
      for (int64_t c = 0; c < P.Dv; ++c) out[c * P.os[3]] = static_cast<float>(kNaN);
      lse = static_cast<float>(kNaN);
    } else if (M == -std::numeric_limits<double>::infinity()) {
      for (int64_t c = 0; c < P.Dv; ++c) out[c * P.os[3]] = 0.0f;
      lse = -std::numeric_limits<float>::infinity();
    } else {
      double lsum = 0.0;
      std::fill(acc, acc + P.Dv, 0.0);
      for (int64_t s = 0; s < S; ++s) {
        const float* part = base + static_cast<size_t>(s) * pl.partial_floats;
        const float ms = part[rows * dvp + r], ls = part[rows * dvp + rows + r];
        if (!(ls > 0.0f)) continue;
        const double w = std::exp2(static_cast<double>(ms) - M);
        lsum += w * ls;
        const float* o = part + r * dvp;
        for (int64_t c = 0; c < P.Dv; ++c) acc[static_cast<size_t>(c)] += w * o[c];
      }
      for (int64_t c = 0; c < P.Dv; ++c) {
        out[c * P.os[3]] = static_cast<float>(acc[static_cast<size_t>(c)] / lsum);
      }
      lse = static_cast<float>((M + std::log2(lsum)) * kLn2);
    }
    if (P.lse != nullptr) P.lse[b * P.ls[0] + h * P.ls[1] + i * P.ls[2]] = lse;
  }
}

}  // namespace kernels
}  // namespace attnflow
#endif  // HWY_ONCE
