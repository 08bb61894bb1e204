// simd_targets_util.h — runs a test body once per Highway target
// (tests/ops/*_test.cc, tests/kernels/prefill_small_test.cc).
//
// Every target this CPU supports is selected in turn, together with the
// fallback (HWY_SCALAR | HWY_EMU128), through hwy::SetSupportedTargetsForTest;
// the dispatch is reset afterwards. Failures inside ForEachTarget carry the
// target's name (SCOPED_TRACE). Test-only header.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "attnflow/ops.h"
#include "hwy/targets.h"

namespace attnflow::testing {

// Runs fn(bit, target) once per supported Highway target (target = 1 << bit,
// selected together with the fallback).
inline void ForEachTargetBit(const std::function<void(int bit, int64_t target)>& fn) {
  const int64_t real = hwy::SupportedTargets();
  const int64_t fallback = HWY_SCALAR | HWY_EMU128;
  for (int bit = 0; bit < 63; ++bit) {
    const int64_t t = int64_t{1} << bit;
    if ((real & t) == 0) continue;
    hwy::SetSupportedTargetsForTest(t | fallback);
    fn(bit, t);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Runs fn once per supported Highway target (plus the fallback) and returns
// the names of the targets exercised.
inline std::set<std::string> ForEachTarget(const std::function<void()>& fn) {
  std::set<std::string> ran;
  ForEachTargetBit([&](int, int64_t) {
    SCOPED_TRACE(ops::TargetName());
    fn();
    ran.insert(ops::TargetName());
  });
  return ran;
}

}  // namespace attnflow::testing
