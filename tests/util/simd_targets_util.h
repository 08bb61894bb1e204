// simd_targets_util.h — runs a test body once per Highway target of the ops
// layer (tests/ops/*_test.cc).
//
// Every target this CPU supports is selected in turn, together with the
// fallback (HWY_SCALAR | HWY_EMU128), through hwy::SetSupportedTargetsForTest;
// the dispatch is reset afterwards. Failures inside carry the target's name
// (SCOPED_TRACE). Test-only header.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "attnflow/ops.h"
#include "hwy/targets.h"

namespace attnflow::testing {

// Runs fn once per supported Highway target (plus the fallback) and returns
// the names of the targets exercised.
inline std::set<std::string> ForEachTarget(const std::function<void()>& fn) {
  std::set<std::string> ran;
  const int64_t real = hwy::SupportedTargets();
  const int64_t fallback = HWY_SCALAR | HWY_EMU128;
  for (int bit = 0; bit < 63; ++bit) {
    const int64_t t = int64_t{1} << bit;
    if ((real & t) == 0) continue;
    hwy::SetSupportedTargetsForTest(t | fallback);
    SCOPED_TRACE(ops::TargetName());
    fn();
    ran.insert(ops::TargetName());
  }
  hwy::SetSupportedTargetsForTest(0);
  return ran;
}

}  // namespace attnflow::testing
