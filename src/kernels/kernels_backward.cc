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

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace kernels {
namespace HWY_NAMESPACE {

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

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cstring>

namespace attnflow {
namespace kernels {

HWY_EXPORT(RunBackwardDeltaTaskT);
HWY_EXPORT(RunBackwardKvTaskT);
HWY_EXPORT(RunBackwardQTaskT);

void InitBwdScratch(const Plan& plan, float* scratch) {
  const BwdScratchLayout L = MakeBwdScratchLayout(plan);
  const size_t big = static_cast<size_t>(plan.rows > plan.tkv ? plan.rows : plan.tkv);
  for (size_t i = 0; i < big; ++i) scratch[L.ones + i] = 1.0f;
  std::memset(scratch + L.ones8, 1, big);
}

void RunBackwardDeltaTask(const BwdProblem& p, const Plan& plan, int64_t task, float* scratch) {
  HWY_DYNAMIC_DISPATCH(RunBackwardDeltaTaskT)(p, plan, task, scratch);
}

bool RunBackwardKvTask(const BwdProblem& p, const Plan& plan, int64_t task, float* scratch) {
  return HWY_DYNAMIC_DISPATCH(RunBackwardKvTaskT)(p, plan, task, scratch);
}

bool RunBackwardQTask(const BwdProblem& p, const Plan& plan, int64_t task, float* scratch) {
  return HWY_DYNAMIC_DISPATCH(RunBackwardQTaskT)(p, plan, task, scratch);
}

}  // namespace kernels
}  // namespace attnflow
#endif  // HWY_ONCE
