// prefill_small_test.cc — the tiled prefill kernel on short query tiles
// (q_len 1..40), where a tile is padded only to whole vectors (e.g. 16 rows
// on a 16-lane target) and QkTile runs a last single row-vector block.
//
// Expected values come only from the float64 reference::Sdpa (through
// CheckCase's FlashAttention-style tolerance: kernel error <= 2x a plain fp32
// implementation's). Covers no mask / top-left / bottom-right causal, bool and
// float masks, GQA and MQA, partial key blocks, every supported SIMD target,
// and bit-identical results for 1, 2 and 7 threads (tasks fixed by shape).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "util/kernel_test_util.h"
#include "util/simd_targets_util.h"

namespace attnflow {
namespace {

// Lanes of the dispatched target, from the explain text "(16 fp32 lanes)".
int64_t LanesFromReason(const std::string& reason) {
  const size_t at = reason.find(" fp32 lanes)");
  if (at == std::string::npos) return 0;
  size_t s = reason.rfind('(', at);
  return std::stoll(reason.substr(s + 1, at - s - 1));
}

TEST(PrefillSmall, EveryShortQueryLengthAgainstReference) {
  for (int64_t lq = 1; lq <= 40; ++lq) {
    for (Causal c : {Causal::kNone, Causal::kTopLeft, Causal::kBottomRight}) {
      Spec s;
      s.H = 2;
      s.Hkv = 2;
      s.Lq = lq;
      s.Lk = lq % 3 == 0 ? lq : lq + 13;  // full and partial key blocks
      s.D = lq % 4 == 0 ? 13 : 64;
      s.causal = c;
      s.seed = 7000 + lq * 3 + static_cast<int>(c);
      CheckCase(s, KernelKind::kTiledPrefill, /*strided_out=*/lq % 5 == 0);
    }
  }
}

TEST(PrefillSmall, MasksGqaAndKvTypes) {
  for (int64_t lq = 1; lq <= 40; lq += 3) {
    for (auto [H, Hkv] : std::vector<std::pair<int64_t, int64_t>>{{4, 2}, {8, 1}, {3, 3}}) {
      Spec s;
      s.H = H;
      s.Hkv = Hkv;
      s.Lq = lq;
      s.Lk = 2 * lq + 5;
      s.D = 64;
      s.seed = 8000 + lq * 10 + H;
      s.mask = lq % 2 ? MaskKind::kBool : MaskKind::kFloat;
      s.mask_shape = {1, H, lq, s.Lk};
      s.kv = lq % 3 == 0 ? DType::kF16 : DType::kF32;
      s.causal = lq % 4 == 1 ? Causal::kTopLeft : Causal::kNone;
      s.strided = lq % 7 == 0;
      CheckCase(s, KernelKind::kTiledPrefill);
    }
  }
}

// Short tiles are padded to whole vectors, not to pairs of vectors.
TEST(PrefillSmall, TileIsPaddedToWholeVectorsOnly) {
  for (int64_t lq : {1, 5, 16, 17, 33}) {
    Spec s;
    s.H = 8;
    s.Hkv = 8;
    s.Lq = lq;
    s.Lk = 16;
    s.D = 64;
    const Inputs in = Make(s);
    KernelOptions kopt;
    kopt.force = KernelKind::kTiledPrefill;
    KernelRun k = RunKernel(in, kopt);
    ASSERT_TRUE(k.status.ok()) << k.status.ToString();
    const int64_t lanes = LanesFromReason(k.choice.reason);
    ASSERT_GT(lanes, 0) << k.choice.reason;
    EXPECT_EQ(k.choice.tile_q, (lq + lanes - 1) / lanes * lanes) << k.choice.ToString();
    EXPECT_EQ(k.choice.num_tasks, 8) << k.choice.ToString();
  }
}

TEST(PrefillSmall, EverySupportedTarget) {
  testing::ForEachTargetBit([](int bit, int64_t t) {
    SCOPED_TRACE(hwy::TargetName(t));
    g_error_factor = ErrorFactorFor(t);
    for (int64_t lq : {1, 4, 8, 12, 16, 24, 40}) {
      Spec s;
      s.H = 4;
      s.Hkv = 2;
      s.Lq = lq;
      s.Lk = lq + 9;
      s.D = 64;
      s.causal = lq % 8 == 0 ? Causal::kTopLeft : Causal::kBottomRight;
      s.seed = 9000 + lq + bit;
      CheckCase(s, KernelKind::kTiledPrefill);
    }
  });
  g_error_factor = 2.0;
}

// Results do not depend on the thread count: the inline tiny calls and
// pooled calls of short query tiles, 1 / 2 / 7 threads, bit-identical.
TEST(PrefillSmall, BitIdenticalAcrossThreadCounts) {
  ThreadPool p1(1), p2(2), p7(7);
  std::vector<Spec> specs;
  for (int64_t lq : {3, 16, 17, 40}) {
    Spec s;
    s.B = 3;
    s.H = 8;
    s.Hkv = 2;
    s.Lq = lq;
    s.Lk = 300;  // > 2^19 FLOP: runs on the pool
    s.D = 64;
    s.causal = lq % 2 ? Causal::kBottomRight : Causal::kNone;
    s.seed = 9500 + lq;
    specs.push_back(s);
    s.B = 1;
    s.Hkv = 8;
    s.Lk = 16;  // B1 H8 L16 D64: a tiny inline call
    s.mask = MaskKind::kFloat;
    s.mask_shape = {1, 8, lq, 16};
    specs.push_back(s);
  }
  for (const Spec& s : specs) {
    const Inputs in = Make(s);
    std::vector<KernelRun> runs;
    for (ThreadPool* p : {&p1, &p2, &p7}) {
      KernelOptions kopt;
      kopt.pool = p;
      kopt.force = KernelKind::kTiledPrefill;
      runs.push_back(RunKernel(in, kopt));
      ASSERT_TRUE(runs.back().status.ok());
    }
    ExpectBitIdentical(runs, s.Name());
  }
}

// Without an lse output FinalizeRow skips the log2; out must be exactly what
// the run with lse writes, including a row with an infinite query element (the
// scalar recompute), rows whose tile holds a NaN V row they cannot see (the
// recompute too), a row of huge scores and rows with no visible key.
TEST(PrefillSmall, OutWithoutLseEqualsOutWithLse) {
  for (int64_t lq : {2, 16, 37}) {
    Spec s;
    s.B = 2;
    s.H = 4;
    s.Hkv = 2;
    s.Lq = lq;
    s.Lk = lq + 3;
    s.D = 64;
    s.causal = Causal::kBottomRight;
    s.kv_lens = {lq + 3, 1};  // batch 1: most rows see no key
    s.seed = 9900 + lq;
    Inputs in = Make(s);
    float* q = in.q_store.data<float>();
    q[0] = INFINITY;  // (b0, h0, row 0): +-inf scores, NaN in fp32 -> scalar recompute
    for (int64_t d = 0; d < s.D; ++d) q[s.D + d] *= 1e30f;  // row 1: huge finite scores
    // V NaN at the last key of (b0, kv head 0): only the last query row sees it;
    // the other rows of its tile get 0 * NaN in P.V and need the recompute.
    in.v_store.data<float>()[(s.Lk - 1) * s.D] = NAN;
    KernelOptions kopt;
    kopt.force = KernelKind::kTiledPrefill;
    KernelRun with = RunKernel(in, kopt);
    ASSERT_TRUE(with.status.ok());
    Tensor out = Zeros(DType::kF32, {s.B, s.H, s.Lq, s.D});
    ASSERT_TRUE(Attention(out.view(), TensorView(), in.q, in.k, in.v, in.opt, kopt).ok());
    EXPECT_EQ(std::memcmp(out.data<float>(), with.o.out.data<float>(), out.nbytes()), 0)
        << s.Name();
    const Outputs ref = Reference(in);
    const Outputs naive = NaiveF32(in);
    CheckOutputs(with.o, naive, ref, s.Name());
  }
}

}  // namespace
}  // namespace attnflow
