// naive_test.cc — the naive materialised fp32 schedule (`--kernel naive`,
// src/kernels/naive.cc) against the float64 reference::Sdpa, with the same
// FlashAttention-style tolerance as the fast kernels (util/kernel_test_util.h:
// its error must stay within 2x a plain fp32 implementation's error);
// bit-identical across thread counts; never chosen by auto dispatch; refuses
// non-F32 inputs with an error naming the op; and the DRAM traffic model
// (ModelAttentionIo) against counts worked by hand.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "attnflow/kernels.h"
#include "attnflow/threading.h"
#include "util/kernel_test_util.h"

namespace attnflow {
namespace {

TEST(Naive, NameRoundTrips) {
  KernelKind k;
  ASSERT_TRUE(ParseKernelKind("naive", &k));
  EXPECT_EQ(k, KernelKind::kNaive);
  EXPECT_STREQ(KernelKindName(KernelKind::kNaive), "naive");
}

TEST(Naive, SweepAgainstReference) {
  int n = 0;
  for (const Spec& s : SweepSpecs(80, 21, /*prefill=*/true)) {
    if (s.kv != DType::kF32) continue;
    CheckCase(s, KernelKind::kNaive, /*strided_out=*/s.seed % 3 == 0);
    ++n;
  }
  for (const Spec& s : SweepSpecs(40, 22, /*prefill=*/false)) {
    if (s.kv != DType::kF32) continue;
    CheckCase(s, KernelKind::kNaive);
    ++n;
  }
  EXPECT_GT(n, 20);
}

TEST(Naive, MasksAlignmentsWindowsGqaDeadRows) {
  for (Causal c : {Causal::kNone, Causal::kTopLeft, Causal::kBottomRight}) {
    Spec s{.B = 3, .H = 4, .Hkv = 2, .Lq = 37, .Lk = 29, .D = 19, .Dv = 7, .causal = c,
           .kv_lens = {0, 11, 29}, .seed = 500 + static_cast<uint64_t>(c)};
    CheckCase(s, KernelKind::kNaive);
    s.kv_lens.clear();
    s.wl = 5;
    s.wr = 2;
    s.alibi = true;
    s.mask = MaskKind::kFloat;
    s.mask_shape = {s.B, 1, s.Lq, s.Lk};
    CheckCase(s, KernelKind::kNaive);
    s.alibi = false;
    s.mask = MaskKind::kBool;
    s.strided = true;
    CheckCase(s, KernelKind::kNaive);
  }
}

TEST(Naive, BitIdenticalAcrossThreadCounts) {
  ThreadPool p1(1), p2(2), p7(7);
  const Inputs in = Make(
      {.B = 2, .H = 6, .Hkv = 3, .Lq = 70, .Lk = 90, .D = 40, .causal = Causal::kBottomRight});
  std::vector<KernelRun> runs;
  ASSERT_NO_FATAL_FAILURE(RunOnPools(in, {.force = KernelKind::kNaive}, {&p1, &p2, &p7}, &runs));
  ExpectBitIdentical(runs);
}

TEST(Naive, AutoNeverPicksItAndForcingNonF32IsAnError) {
  for (int64_t lq : {1, 4, 5, 64, 300}) {
    const Inputs in = Make({.H = 2, .Lq = lq, .Lk = 128, .D = 64});
    KernelRun k = RunKernel(in, KernelOptions{});
    ASSERT_TRUE(k.status.ok());
    EXPECT_NE(k.choice.kernel, KernelKind::kNaive) << lq;
  }
  const Inputs in = Make({.H = 2, .Lq = 8, .Lk = 8, .kv = DType::kF16});
  KernelRun k = RunKernel(in, {.force = KernelKind::kNaive});
  ASSERT_FALSE(k.status.ok());
  EXPECT_NE(k.status.ToString().find("cannot force naive"), std::string::npos)
      << k.status.ToString();
  EXPECT_NE(k.status.ToString().find("F16"), std::string::npos) << k.status.ToString();
}

TEST(Naive, IoModelMatchesHandCounts) {
  // B=1 H=1 Lq=Lk=4 D=2, fp32: Q 32 B, O 32 B, K 32 B, V 32 B, S = P = 64 B.
  IoModel m = ModelAttentionIo(1, 1, 1, 4, 4, 2, 0);
  EXPECT_EQ(m.s_and_p_bytes, 4 * 64.0);
  EXPECT_EQ(m.naive_bytes, 32 + 32 + 32 + 32 + 4 * 64.0);
  EXPECT_EQ(m.flash_bytes, 32 + 32 + 32 + 32.0);
  // Query tiles of 2 rows: K and V are streamed twice.
  m = ModelAttentionIo(1, 1, 1, 4, 4, 2, 2);
  EXPECT_EQ(m.flash_bytes, 32 + 32 + 2 * (32 + 32.0));
  // GQA: H=4, Hkv=2, B=2, Lq=Lk=1024, D=64, tile 128 (G*Lq = 2048 rows -> 16 tiles).
  m = ModelAttentionIo(2, 4, 2, 1024, 1024, 64, 128);
  const double qo = 2.0 * 2 * 4 * 1024 * 64 * 4, kv = 2.0 * 2 * 2 * 1024 * 64 * 4;
  EXPECT_EQ(m.flash_bytes, qo + 16 * kv);
  EXPECT_EQ(m.naive_bytes, qo + 2.0 * 2 * 4 * 1024 * 64 * 4 + 4.0 * 2 * 4 * 1024 * 1024 * 4);
}

}  // namespace
}  // namespace attnflow
