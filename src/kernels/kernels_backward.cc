// kernels_backward.cc — compiles the FlashAttention-2 style backward
// (flash_backward-inl.h) once per Highway target and exports its two passes
// through HWY_DYNAMIC_DISPATCH (the same target policy as the forward,
// src/core/hwy_targets.h, so the recomputed scores are the forward's).
#include <type_traits>

#include "core/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels_backward.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/flash_backward-inl.h"
#include "kernels/flash_common-inl.h"
#include "kernels/internal.h"

ATTNFLOW_HWY_NAMESPACE_BEGIN(kernels)

// Calls f(std::integral_constant<size_t, D>) for the plan's head-dim path
// (64, 128, or 0: the generic one).
template <class F>
auto ForFastD(const Plan& plan, F f) {
  switch (plan.fast_d) {
    case 64:
      return f(std::integral_constant<size_t, 64>());
    case 128:
      return f(std::integral_constant<size_t, 128>());
    default:
      return f(std::integral_constant<size_t, 0>());
  }
}

void RunBackwardDeltaTaskT(const BwdProblem& p, const Plan& plan, int64_t task, float* scratch) {
  ForFastD(plan, [&](auto d) { BwdDeltaTask<decltype(d)::value>(p, plan, task, scratch); });
}

bool RunBackwardKvTaskT(const BwdProblem& p, const Plan& plan, int64_t task, float* scratch) {
  return ForFastD(
      plan, [&](auto d) { return BwdKvTask<decltype(d)::value>(p, plan, task, scratch); });
}

bool RunBackwardQTaskT(const BwdProblem& p, const Plan& plan, int64_t task, float* scratch) {
  return ForFastD(
      plan, [&](auto d) { return BwdQTask<decltype(d)::value>(p, plan, task, scratch); });
}

ATTNFLOW_HWY_NAMESPACE_END()

#if HWY_ONCE
#include <cstring>

namespace attnflow::kernels {

void InitBwdScratch(const Plan& plan, float* scratch) {
  const BwdScratchLayout L = MakeBwdScratchLayout(plan);
  const size_t big = static_cast<size_t>(plan.rows > plan.tkv ? plan.rows : plan.tkv);
  for (size_t i = 0; i < big; ++i) scratch[L.ones + i] = 1.0f;
  std::memset(scratch + L.ones8, 1, big);
}

ATTNFLOW_HWY_EXPORT_DISPATCH(void, RunBackwardDeltaTask,
                             (const BwdProblem& p, const Plan& plan, int64_t task, float* scratch),
                             (p, plan, task, scratch))
ATTNFLOW_HWY_EXPORT_DISPATCH(bool, RunBackwardKvTask,
                             (const BwdProblem& p, const Plan& plan, int64_t task, float* scratch),
                             (p, plan, task, scratch))
ATTNFLOW_HWY_EXPORT_DISPATCH(bool, RunBackwardQTask,
                             (const BwdProblem& p, const Plan& plan, int64_t task, float* scratch),
                             (p, plan, task, scratch))

}  // namespace attnflow::kernels
#endif  // HWY_ONCE
