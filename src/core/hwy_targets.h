// core/hwy_targets.h — the one Highway target policy of attnflow.
//
// Included first by every translation unit that compiles code per Highway
// target (src/kernels/kernels.cc, src/ops/*.cc; the machine-peak loops of
// src/bench/peak.cc keep Highway's full list on purpose), before hwy/foreach_target.h.
//
// Targets: x86 AVX3 (AVX-512, incl. the Zen 4 / SPR variants), AVX2 (+FMA,
// F16C), SSE4 and the EMU128 fallback; Arm NEON. Sizeless-vector targets
// (SVE, RVV) are disabled because the micro-kernels keep arrays of vector
// accumulators; on such machines the NEON or EMU128 build is used. SSSE3 is
// disabled (SSE4 covers it). A build may override the list by defining
// HWY_DISABLED_TARGETS itself (e.g. to test a single target).
#pragma once

#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

// Opens and closes the per-target namespace of a layer's Highway code in one
// place: HWY_BEFORE_NAMESPACE (per-target compile flags), the namespace
// attnflow::<layer>::HWY_NAMESPACE, hn = hwy::HWY_NAMESPACE, and the float
// tag DF / vector VF every op uses. Expanded after hwy/highway.h.
#define ATTNFLOW_HWY_NAMESPACE_BEGIN(layer)    \
  HWY_BEFORE_NAMESPACE();                      \
  namespace attnflow::layer::HWY_NAMESPACE {   \
  namespace hn = hwy::HWY_NAMESPACE;           \
  using DF = hn::ScalableTag<float>;           \
  using VF = hn::Vec<DF>;
#define ATTNFLOW_HWY_NAMESPACE_END() \
  }                                  \
  HWY_AFTER_NAMESPACE();

// Exports the per-target function NameT of this translation unit (defined
// between ATTNFLOW_HWY_NAMESPACE_BEGIN/END) and defines `Ret Name Params`,
// which forwards Args to the NameT of the best target this CPU supports
// (HWY_DYNAMIC_DISPATCH: looked up per call, so hwy::SetSupportedTargetsForTest
// takes effect). Invariants: expanded once per TU, inside `#if HWY_ONCE`, in
// the namespace that declares Name; Args names exactly the parameters of
// Params, in order.
#define ATTNFLOW_HWY_EXPORT_DISPATCH(Ret, Name, Params, Args) \
  HWY_EXPORT(Name##T);                                        \
  Ret Name Params { return HWY_DYNAMIC_DISPATCH(Name##T) Args; }
