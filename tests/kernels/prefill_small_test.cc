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
      // Lk: full and partial key blocks.
      CheckCase({.H = 2, .Hkv = 2, .Lq = lq, .Lk = lq % 3 == 0 ? lq : lq + 13,
                 .D = lq % 4 == 0 ? 13 : 64, .causal = c,
                 .seed = static_cast<uint64_t>(7000 + lq * 3 + static_cast<int>(c))},
                KernelKind::kTiledPrefill, /*strided_out=*/lq % 5 == 0);
    }
  }
}

TEST(PrefillSmall, MasksGqaAndKvTypes) {
  for (int64_t lq = 1; lq <= 40; lq += 3) {
    for (auto [H, Hkv] : std::vector<std::pair<int64_t, int64_t>>{{4, 2}, {8, 1}, {3, 3}}) {
      CheckCase({.H = H, .Hkv = Hkv, .Lq = lq, .Lk = 2 * lq + 5, .D = 64,
                 .kv = lq % 3 == 0 ? DType::kF16 : DType::kF32,
                 .causal = lq % 4 == 1 ? Causal::kTopLeft : Causal::kNone,
                 .mask = lq % 2 ? MaskKind::kBool : MaskKind::kFloat,
                 .mask_shape = {1, H, lq, 2 * lq + 5}, .strided = lq % 7 == 0,
                 .seed = static_cast<uint64_t>(8000 + lq * 10 + H)},
                KernelKind::kTiledPrefill);
    }
  }
}

// Short tiles are padded to whole vectors, not to pairs of vectors.
TEST(PrefillSmall, TileIsPaddedToWholeVectorsOnly) {
  for (int64_t lq : {1, 5, 16, 17, 33}) {
    const Inputs in = Make({.H = 8, .Hkv = 8, .Lq = lq, .Lk = 16, .D = 64});
    KernelRun k = RunKernel(in, {.force = KernelKind::kTiledPrefill});
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
      CheckCase({.H = 4, .Hkv = 2, .Lq = lq, .Lk = lq + 9, .D = 64,
                 .causal = lq % 8 == 0 ? Causal::kTopLeft : Causal::kBottomRight,
                 .seed = static_cast<uint64_t>(9000 + lq + bit)},
                KernelKind::kTiledPrefill);
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
    const Causal causal = lq % 2 ? Causal::kBottomRight : Causal::kNone;
    const uint64_t seed = static_cast<uint64_t>(9500 + lq);
    // Lk 300: > 2^19 FLOP, runs on the pool.
    specs.push_back(
        {.B = 3, .H = 8, .Hkv = 2, .Lq = lq, .Lk = 300, .D = 64, .causal = causal, .seed = seed});
    // B1 H8 L16 D64: a tiny inline call.
    specs.push_back({.B = 1, .H = 8, .Hkv = 8, .Lq = lq, .Lk = 16, .D = 64, .causal = causal,
                     .mask = MaskKind::kFloat, .mask_shape = {1, 8, lq, 16}, .seed = seed});
  }
  for (const Spec& s : specs) {
    std::vector<KernelRun> runs;
    ASSERT_NO_FATAL_FAILURE(
        RunOnPools(Make(s), {.force = KernelKind::kTiledPrefill}, {&p1, &p2, &p7}, &runs));
    ExpectBitIdentical(runs, s.Name());
  }
}

// Without an lse output FinalizeRow skips the log2; out must be exactly what
// the run with lse writes, including a row with an infinite query element (the
// scalar recompute), rows whose tile holds a NaN V row they cannot see (the
// recompute too), a row of huge scores and rows with no visible key.
TEST(PrefillSmall, OutWithoutLseEqualsOutWithLse) {
  for (int64_t lq : {2, 16, 37}) {
    // kv_lens: in batch 1 most rows see no key.
    const Spec s{.B = 2, .H = 4, .Hkv = 2, .Lq = lq, .Lk = lq + 3, .D = 64,
                 .causal = Causal::kBottomRight, .kv_lens = {lq + 3, 1},
                 .seed = static_cast<uint64_t>(9900 + lq)};
    Inputs in = Make(s);
    float* q = in.q_store.data<float>();
    q[0] = INFINITY;  // (b0, h0, row 0): +-inf scores, NaN in fp32 -> scalar recompute
    for (int64_t d = 0; d < s.D; ++d) q[s.D + d] *= 1e30f;  // row 1: huge finite scores
    // V NaN at the last key of (b0, kv head 0): only the last query row sees it;
    // the other rows of its tile get 0 * NaN in P.V and need the recompute.
    in.v_store.data<float>()[(s.Lk - 1) * s.D] = NAN;
    const KernelOptions kopt{.force = KernelKind::kTiledPrefill};
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
