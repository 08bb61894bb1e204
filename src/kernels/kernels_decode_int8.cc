// kernels_decode_int8.cc — compiles the int8 KV cache decode split
// (decode_int8-inl.h) once per Highway target and exports it through
// HWY_DYNAMIC_DISPATCH (the best target the CPU supports, chosen at the first
// call; queried per call so hwy::SetSupportedTargetsForTest works). One
// foreach_target pass of its own, so a parallel build compiles it beside the
// other kernels.
//
// Targets: the project's one target policy, src/core/hwy_targets.h.
#include <cstdint>

#include "core/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels_decode_int8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/decode_int8-inl.h"
#include "kernels/decode_int8.h"

ATTNFLOW_HWY_NAMESPACE_BEGIN(kernels)

void GetS8TargetInfoT(int64_t* target, int64_t* lanes) {
  *target = HWY_TARGET;
  *lanes = static_cast<int64_t>(hn::Lanes(DF()));
}

void RunDecodeS8SplitT(const ProblemS8& p, const PlanS8& plan, int64_t task, void* scratch,
                       float* partial) {
  DecodeS8SplitImpl(p, plan, task, scratch, partial);
}

ATTNFLOW_HWY_NAMESPACE_END()

#if HWY_ONCE
namespace attnflow::kernels {

ATTNFLOW_HWY_EXPORT_DISPATCH(void, GetS8TargetInfo,
                             (int64_t* target, int64_t* lanes),
                             (target, lanes))
ATTNFLOW_HWY_EXPORT_DISPATCH(void, RunDecodeS8Split,
                             (const ProblemS8& p, const PlanS8& plan, int64_t task, void* scratch,
                              float* partial),
                             (p, plan, task, scratch, partial))

}  // namespace attnflow::kernels
#endif  // HWY_ONCE
