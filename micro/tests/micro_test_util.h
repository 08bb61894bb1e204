// micro_test_util.h — helpers shared by the micro library's host tests
// (micro_test.cc, micro_opts_test.cc). Invariant: header-only, no state.
#ifndef ATTNFLOW_MICRO_TESTS_MICRO_TEST_UTIL_H_
#define ATTNFLOW_MICRO_TESTS_MICRO_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "attnflow/micro.h"

namespace attnflow {

// Runs af_sdpa_f32 (o null) or af_sdpa_f32_ex with an arena of exactly the
// reported size followed by a canary, and checks the canary survives; out
// and lse are sized from the shape and filled with -7 first.
inline af_status RunF32WithCanary(const af_sdpa_shape& s, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  const std::vector<int32_t>& kv_lens, float scale,
                                  const af_sdpa_opts* o, std::vector<float>* out,
                                  std::vector<float>* lse) {
  out->assign(size_t(s.batch) * s.num_heads * s.q_len * s.v_dim, -7.f);
  lse->assign(size_t(s.batch) * s.num_heads * s.q_len, -7.f);
  const size_t ws = af_sdpa_f32_workspace_bytes(&s);
  std::vector<uint32_t> arena(ws / 4 + 16, 0xA5A5A5A5u);
  const int32_t* kl = kv_lens.empty() ? nullptr : kv_lens.data();
  const af_status st =
      o == nullptr ? af_sdpa_f32(out->data(), lse->data(), q.data(), k.data(), v.data(), kl,
                                 scale, &s, arena.data(), ws)
                   : af_sdpa_f32_ex(out->data(), lse->data(), q.data(), k.data(), v.data(), kl,
                                    scale, &s, o, arena.data(), ws);
  for (size_t i = ws / 4; i < arena.size(); ++i) EXPECT_EQ(arena[i], 0xA5A5A5A5u) << "arena overrun";
  return st;
}

}  // namespace attnflow

#endif  // ATTNFLOW_MICRO_TESTS_MICRO_TEST_UTIL_H_
