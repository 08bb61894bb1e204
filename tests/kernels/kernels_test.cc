// kernels_test.cc — the fast kernels (attnflow::Attention) against the float64
// reference::Sdpa: sweeps, head dims, GQA, masks, dispatch, determinism,
// SIMD targets and the golden files. The helpers and the tolerance method are
// in util/kernel_test_util.h (shared with decode_test.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/golden.h"
#include "attnflow/kernels.h"
#include "attnflow/semantics.h"
#include "attnflow/threading.h"
#include "hwy/targets.h"
#include "util/test_util.h"

#include "util/kernel_test_util.h"

namespace attnflow {
namespace {

TEST(KernelNames, RoundTrip) {
  for (KernelKind k : {KernelKind::kAuto, KernelKind::kReference, KernelKind::kTiledPrefill,
                       KernelKind::kSplitKvDecode}) {
    KernelKind back;
    ASSERT_TRUE(ParseKernelKind(KernelKindName(k), &back));
    EXPECT_EQ(back, k);
  }
  KernelKind x;
  EXPECT_FALSE(ParseKernelKind("flash", &x));
  EXPECT_STREQ(KernelKindName(KernelKind::kTiledPrefill), "tiled_prefill");
  KernelChoice c;
  c.kernel = KernelKind::kSplitKvDecode;
  c.num_splits = 4;
  c.reason = "why";
  EXPECT_NE(c.ToString().find("split_kv_decode"), std::string::npos);
  EXPECT_NE(c.ToString().find("splits=4"), std::string::npos);
  EXPECT_NE(c.ToString().find("why"), std::string::npos);
}

TEST(Prefill, SweepAgainstReference) {
  for (const Spec& s : SweepSpecs(110, 11, /*prefill=*/true)) {
    CheckCase(s, KernelKind::kTiledPrefill, /*strided_out=*/s.seed % 3 == 0);
  }
}

TEST(Prefill, EveryHeadDim) {
  for (int64_t D : {1, 2, 3, 5, 8, 13, 16, 17, 31, 33, 64, 80, 96, 100, 128, 200, 255, 256}) {
    CheckCase({.H = 2, .Hkv = 1, .Lq = 65, .Lk = 70, .D = D, .causal = Causal::kBottomRight,
               .seed = static_cast<uint64_t>(100 + D)},
              KernelKind::kTiledPrefill);
  }
}

TEST(Prefill, GqaRatiosAndMqa) {
  for (auto [H, Hkv] : std::vector<std::pair<int64_t, int64_t>>{
           {4, 4}, {4, 2}, {8, 2}, {8, 1}, {16, 2}, {6, 2}, {96, 1}}) {
    CheckCase({.H = H, .Hkv = Hkv, .Lq = H >= 16 ? 9 : 70, .Lk = 130, .D = 64,
               .causal = Causal::kTopLeft, .seed = static_cast<uint64_t>(200 + H * 10 + Hkv)},
              KernelKind::kTiledPrefill);
  }
}

TEST(Prefill, CausalAlignmentsAndWindows) {
  for (Causal c : {Causal::kTopLeft, Causal::kBottomRight}) {
    for (auto [Lq, Lk] : std::vector<std::pair<int64_t, int64_t>>{{50, 300}, {300, 50}, {129, 129}}) {
      for (auto [wl, wr] : std::vector<std::pair<int64_t, int64_t>>{{-1, -1}, {16, -1}, {0, 0}, {70, 3}, {-1, 5}}) {
        CheckCase({.H = 2, .Lq = Lq, .Lk = Lk, .D = 32, .causal = c, .wl = wl, .wr = wr,
                   .seed = static_cast<uint64_t>(300 + Lq + wl * 3 + wr)},
                  KernelKind::kTiledPrefill);
      }
    }
  }
}

TEST(Prefill, DeadRowsKvLensZeroAndAllMasked) {
  // bottom_right with Lq 70 > Lk 40: the first 30 rows see nothing.
  const Spec s{.B = 3, .H = 2, .Lq = 70, .Lk = 40, .D = 16, .causal = Causal::kBottomRight,
               .kv_lens = {0, 17, 40}, .seed = 400};
  CheckCase(s, KernelKind::kTiledPrefill);
  // A bool mask that is all false for every row: all dead.
  Spec t = s;
  t.causal = Causal::kNone;
  t.kv_lens.clear();
  Inputs in = Make(t);
  in.mask = Zeros(DType::kBool, {t.Lq, t.Lk});
  in.opt.attn_mask = in.mask.view();
  KernelRun k = RunKernel(in, {.force = KernelKind::kTiledPrefill});
  ASSERT_TRUE(k.status.ok());
  for (int64_t e = 0; e < k.o.out.numel(); ++e) ASSERT_EQ(k.o.out.data<float>()[e], 0.0f);
  for (int64_t e = 0; e < k.o.lse.numel(); ++e) ASSERT_EQ(k.o.lse.data<float>()[e], -INFINITY);
}

TEST(Prefill, LongSequenceD64) {
  Spec s{.H = 2, .Lq = 400, .Lk = 400, .D = 64, .kv = DType::kF16, .causal = Causal::kTopLeft,
         .seed = 500};
  CheckCase(s, KernelKind::kTiledPrefill, /*strided_out=*/true);
  s.causal = Causal::kNone;
  s.kv = DType::kF32;
  s.strided = true;
  CheckCase(s, KernelKind::kTiledPrefill);
}

TEST(Prefill, TileOverridesStayCorrect) {
  const Inputs in = Make({.H = 4, .Hkv = 2, .Lq = 100, .Lk = 150, .D = 48,
                          .causal = Causal::kBottomRight, .seed = 600});
  const Outputs ref = Reference(in), naive = NaiveF32(in);
  for (auto [tq, tkv] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {16, 16}, {40, 50}, {256, 512}}) {
    KernelRun k;
    ASSERT_NO_FATAL_FAILURE(CheckRun(
        in, {.force = KernelKind::kTiledPrefill, .tile_q = tq, .tile_kv = tkv}, naive, ref, &k));
    EXPECT_GT(k.choice.tile_q, 0);
  }
}

TEST(Prefill, NaNInputPoisonsOnlyItsRow) {
  const Spec s{.H = 1, .Lq = 20, .Lk = 30, .D = 16, .seed = 700};
  Inputs in = Make(s);
  in.q_store.data<float>()[5 * s.D + 3] = NAN;  // row 5
  for (KernelKind kk : {KernelKind::kTiledPrefill, KernelKind::kSplitKvDecode}) {
    KernelRun k = RunKernel(in, {.force = kk});
    ASSERT_TRUE(k.status.ok());
    for (int64_t i = 0; i < s.Lq; ++i) {
      EXPECT_EQ(std::isnan(k.o.lse.data<float>()[i]), i == 5) << KernelKindName(kk) << " row " << i;
      EXPECT_EQ(std::isnan(k.o.out.data<float>()[i * s.D]), i == 5) << KernelKindName(kk) << " row " << i;
    }
  }
}

// ---------------------------------------------------------------------------
TEST(Dispatch, AutoPicksByShapeAndExplains) {
  Spec s{.H = 4, .Hkv = 2, .Lq = 1, .Lk = 300, .D = 64};
  Inputs in = Make(s);
  KernelRun k = RunKernel(in, {});
  ASSERT_TRUE(k.status.ok());
  EXPECT_EQ(k.choice.kernel, KernelKind::kSplitKvDecode) << k.choice.ToString();
  EXPECT_GE(k.choice.num_splits, 1);
  EXPECT_FALSE(k.choice.simd_target.empty());
  // Counts in the right number: 2 query heads per kv head, 1 query, 1 split.
  EXPECT_NE(k.choice.reason.find("2 query rows (2 heads x 1 query)"), std::string::npos)
      << k.choice.reason;
  EXPECT_NE(k.choice.reason.find("1 split of "), std::string::npos) << k.choice.reason;
  EXPECT_EQ(k.choice.reason.find("1 splits"), std::string::npos) << k.choice.reason;

  s.Lq = 64;
  in = Make(s);
  k = RunKernel(in, {});
  ASSERT_TRUE(k.status.ok());
  EXPECT_EQ(k.choice.kernel, KernelKind::kTiledPrefill) << k.choice.ToString();
  EXPECT_GT(k.choice.tile_q, 0);
  EXPECT_GT(k.choice.tile_kv, 0);
  EXPECT_NE(k.choice.reason.find("D=64 fast path"), std::string::npos) << k.choice.reason;
  EXPECT_NE(k.choice.reason.find("decode threshold"), std::string::npos) << k.choice.reason;

  s.D = 13;
  in = Make(s);
  KernelChoice c;
  Tensor out = Zeros(DType::kF32, {1, 4, 64, 13});
  ASSERT_TRUE(ExplainAttention(out.view(), TensorView(), in.q, in.k, in.v, in.opt, {}, &c).ok());
  EXPECT_NE(c.reason.find("generic"), std::string::npos) << c.reason;
  // Explain does not run: out is untouched.
  for (int64_t e = 0; e < out.numel(); ++e) ASSERT_EQ(out.data<float>()[e], 0.0f);
}

TEST(Dispatch, FallsBackToReferenceWithReason) {
  const Spec s{.H = 2, .Lq = 9, .Lk = 11, .D = 8};
  Inputs in = Make(s);
  // q in F64 -> reference.
  Tensor q64 = Zeros(DType::kF64, {1, 2, 9, 8});
  for (int64_t e = 0; e < q64.numel(); ++e) q64.view().store(e, in.q_store.view().load(e));
  Tensor out = Zeros(DType::kF32, {1, 2, 9, 8});
  KernelChoice c;
  Status st = Attention(out.view(), TensorView(), q64.view(), in.k, in.v, in.opt, {}, &c);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(c.kernel, KernelKind::kReference);
  EXPECT_NE(c.reason.find("q dtype F64"), std::string::npos) << c.reason;
  // ... and the result is the reference's.
  Tensor ref = Zeros(DType::kF32, {1, 2, 9, 8});
  ASSERT_TRUE(reference::Sdpa(ref.view(), TensorView(), q64.view(), in.k, in.v, in.opt).ok());
  EXPECT_EQ(testing::MaxAbsDiff(out.view(), ref.view()), 0.0);
  // Forcing a fast kernel on it is an error naming why.
  KernelOptions kopt;
  kopt.force = KernelKind::kTiledPrefill;
  st = Attention(out.view(), TensorView(), q64.view(), in.k, in.v, in.opt, kopt, &c);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("tiled_prefill"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("q dtype F64"), std::string::npos) << st.message();
  // F64 out, F64 lse, D > 256, F64 k.
  Tensor out64 = Zeros(DType::kF64, {1, 2, 9, 8});
  ASSERT_TRUE(Attention(out64.view(), TensorView(), in.q, in.k, in.v, in.opt, {}, &c).ok());
  EXPECT_EQ(c.kernel, KernelKind::kReference);
  EXPECT_NE(c.reason.find("out dtype F64"), std::string::npos) << c.reason;
  // An F64 lse runs the fast kernels: the LSE is computed in double and kept
  // (an F32 lse is the same double rounded once).
  Tensor lse64 = Zeros(DType::kF64, {1, 2, 9}), lse32 = Zeros(DType::kF32, {1, 2, 9});
  ASSERT_TRUE(Attention(out.view(), lse64.view(), in.q, in.k, in.v, in.opt, {}, &c).ok());
  EXPECT_EQ(c.kernel, KernelKind::kTiledPrefill) << c.reason;
  ASSERT_TRUE(Attention(out.view(), lse32.view(), in.q, in.k, in.v, in.opt, {}, &c).ok());
  for (int64_t e = 0; e < 18; ++e) {
    EXPECT_EQ(static_cast<float>(lse64.data<double>()[e]), lse32.data<float>()[e]) << e;
  }
  Tensor k64 = Zeros(DType::kF64, {1, 1, 11, 8});
  ASSERT_TRUE(ExplainAttention(out.view(), TensorView(), in.q, k64.view(), in.v, in.opt, {}, &c).ok());
  EXPECT_NE(c.reason.find("k/v dtype F64"), std::string::npos) << c.reason;
  Spec big = s;
  big.D = 300;
  Inputs bi = Make(big);
  Tensor outb = Zeros(DType::kF32, {1, 2, 9, 300});
  ASSERT_TRUE(ExplainAttention(outb.view(), TensorView(), bi.q, bi.k, bi.v, bi.opt, {}, &c).ok());
  EXPECT_EQ(c.kernel, KernelKind::kReference);
  EXPECT_NE(c.reason.find("D=300"), std::string::npos) << c.reason;
  // Forced reference.
  kopt.force = KernelKind::kReference;
  ASSERT_TRUE(Attention(out.view(), TensorView(), in.q, in.k, in.v, in.opt, kopt, &c).ok());
  EXPECT_EQ(c.kernel, KernelKind::kReference);
  EXPECT_NE(c.reason.find("forced"), std::string::npos);
}

TEST(Dispatch, ValidationErrorsNameTheOp) {
  Inputs in = Make({.Lq = 4, .Lk = 5, .D = 8});
  Tensor bad_out = Zeros(DType::kF32, {1, 1, 4, 7});
  const Status st = Attention(bad_out.view(), TensorView(), in.q, in.k, in.v, in.opt);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("attention:", 0), 0u) << st.message();
}

TEST(Dispatch, EmptyShapes) {
  for (auto [Lq, Lk] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {5, 0}, {1, 0}}) {
    Inputs in = Make({.H = 2, .Lq = Lq, .Lk = Lk, .D = 8});
    for (KernelKind kk : {KernelKind::kAuto, KernelKind::kTiledPrefill, KernelKind::kSplitKvDecode}) {
      KernelRun k = RunKernel(in, {.force = kk});
      ASSERT_TRUE(k.status.ok()) << k.status.ToString();
      for (int64_t e = 0; e < k.o.out.numel(); ++e) ASSERT_EQ(k.o.out.data<float>()[e], 0.0f);
      for (int64_t e = 0; e < k.o.lse.numel(); ++e) ASSERT_EQ(k.o.lse.data<float>()[e], -INFINITY);
    }
  }
}

bool FailAllocs(size_t) { return false; }

TEST(Dispatch, ScratchAllocationFailureIsAnError) {
  // Idle scratch buffers (<= 256 MiB each) are recycled across calls; tile
  // overrides at their caps make this call need ~1 GiB of scratch, which no
  // cached buffer can serve, so it must allocate (and the hook fails that).
  Inputs in = Make({.H = 1, .Lq = 4096, .Lk = 65536, .D = 16});
  Tensor out = Zeros(DType::kF32, {1, 1, 4096, 16});
  for (KernelKind kk : {KernelKind::kTiledPrefill, KernelKind::kSplitKvDecode}) {
    const KernelOptions kopt{.force = kk, .tile_q = 4096, .tile_kv = 65536};
    SetAllocHook(&FailAllocs);
    const Status st = Attention(out.view(), TensorView(), in.q, in.k, in.v, in.opt, kopt);
    SetAllocHook(nullptr);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
    EXPECT_NE(st.message().find("scratch"), std::string::npos) << st.message();
  }
}

// Absurd overrides are clamped: no overflow, the right result.
TEST(Dispatch, HugeOverridesAreClamped) {
  const Inputs in = Make({.H = 2, .Lq = 9, .Lk = 40, .D = 16});
  const Outputs ref = Reference(in), naive = NaiveF32(in);
  for (int64_t t : {int64_t{1} << 40, std::numeric_limits<int64_t>::max()}) {
    for (KernelKind kk : {KernelKind::kTiledPrefill, KernelKind::kSplitKvDecode}) {
      KernelRun k = RunKernel(in, {.force = kk, .tile_q = t, .tile_kv = t, .split_kv = t});
      ASSERT_TRUE(k.status.ok()) << k.status.ToString();
      CheckAgainst("out", k.o.out.view(), naive.out.view(), ref.out.view(), in.s.Name());
    }
  }
}

// ---------------------------------------------------------------------------
// Bit-identical results for 1, 2 and 7 threads.
TEST(Determinism, PrefillBitIdenticalAcrossThreadCounts) {
  ThreadPool p1(1), p2(2), p7(7);
  for (const Spec& s :
       {Spec{.B = 2, .H = 8, .Hkv = 2, .Lq = 200, .Lk = 300, .D = 64, .kv = DType::kF16,
             .causal = Causal::kBottomRight},
        Spec{.B = 2, .H = 8, .Hkv = 2, .Lq = 200, .Lk = 300, .D = 80, .kv = DType::kF16,
             .mask = MaskKind::kFloat, .mask_shape = {2, 1, 200, 300}, .alibi = true}}) {
    const Inputs in = Make(s);
    std::vector<KernelRun> runs;
    ASSERT_NO_FATAL_FAILURE(RunOnPools(in, {}, {&p1, &p2, &p7}, &runs));
    for (const KernelRun& r : runs) EXPECT_EQ(r.choice.kernel, KernelKind::kTiledPrefill);
    ExpectBitIdentical(runs, s.Name());
  }
}

// Several std::threads calling Attention at once on different shapes.
TEST(Concurrency, ManyCallersAtOnce) {
  ThreadPool shared(3);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &shared, &failures] {
      for (int it = 0; it < 3; ++it) {
        const Spec s{.H = 2 + t % 2 * 2, .Hkv = t % 2 ? 2 : 1,
                     .Lq = t == 3 ? 1 : 40 + 17 * t + it, .Lk = 60 + 31 * it,
                     .D = t == 2 ? 96 : 24, .causal = it % 2 ? Causal::kTopLeft : Causal::kNone,
                     .seed = static_cast<uint64_t>(900 + t * 10 + it)};
        const Inputs in = Make(s);
        // The shared pool or DefaultPool().
        KernelRun k = RunKernel(in, {.pool = t % 2 ? &shared : nullptr});
        if (!k.status.ok()) {
          ++failures;
          continue;
        }
        Tensor ref = Zeros(DType::kF64, {s.B, s.H, s.Lq, s.dv()});
        if (!reference::Sdpa(ref.view(), TensorView(), in.q, in.k, in.v, in.opt).ok()) {
          ++failures;
          continue;
        }
        if (testing::MaxAbsDiff(k.o.out.view(), ref.view()) > 1e-5) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// Every SIMD target compiled into the kernels (AVX-512, AVX2, SSE4, scalar
// fallback, ... whichever this CPU supports) gives reference-quality results.
TEST(Targets, EverySupportedTargetMatchesReference) {
  const int64_t real = hwy::SupportedTargets();
  const int64_t fallback = HWY_SCALAR | HWY_EMU128;
  std::set<std::string> ran;
  for (int bit = 0; bit < 63; ++bit) {
    const int64_t t = int64_t{1} << bit;
    if ((real & t) == 0) continue;
    hwy::SetSupportedTargetsForTest(t | fallback);
    SCOPED_TRACE(hwy::TargetName(t));
    // The scalar tolerance when the pinned target is a fallback, or when the
    // kernels really dispatch to one: a build may compile fewer targets than
    // the CPU supports (the ASan build leaves SSE4 out), and then Highway
    // falls back to the scalar code.
    Spec f{.H = 4, .Hkv = 2, .Lq = 40, .Lk = 90, .D = 64, .kv = DType::kF16,
           .causal = Causal::kBottomRight};
    KernelChoice c;
    {
      const Inputs in = Make(f);
      Tensor out = Zeros(DType::kF32, {1, 4, 40, 64});
      ASSERT_TRUE(ExplainAttention(out.view(), TensorView(), in.q, in.k, in.v, in.opt, {}, &c).ok());
    }
    const bool scalar = t == HWY_EMU128 || t == HWY_SCALAR || c.simd_target == "EMU128" ||
                        c.simd_target == "SCALAR";
    g_error_factor = scalar ? 6.0 : 2.0;
    std::vector<Spec> specs = SweepSpecs(6, 31 + bit, /*prefill=*/true);
    std::vector<Spec> dec = SweepSpecs(4, 37 + bit, /*prefill=*/false);
    for (const Spec& s : specs) CheckCase(s, KernelKind::kTiledPrefill);
    for (const Spec& s : dec) CheckCase(s, KernelKind::kSplitKvDecode);
    // A fast-path head dim and F16 K/V on this target.
    CheckCase(f, KernelKind::kTiledPrefill);
    f.Lq = 1;
    CheckCase(f, KernelKind::kSplitKvDecode);
    ran.insert(c.simd_target);
  }
  hwy::SetSupportedTargetsForTest(0);
  g_error_factor = 2.0;
  EXPECT_GE(ran.size(), 1u);
  std::string list;
  for (const auto& r : ran) list += r + " ";
  std::printf("kernel targets exercised: %s\n", list.c_str());
}

// The PyTorch-generated golden cases (tests/data/golden), through the kernels.
TEST(Golden, SdpaCasesThroughBothKernels) {
  const std::filesystem::path dir = std::filesystem::path(ATTNFLOW_SOURCE_DIR) / "tests/data/golden";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "no golden directory";
  int checked = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    if (e.path().filename().string().rfind("sdpa_", 0) != 0) continue;
    Result<GoldenCase> c = LoadGoldenCase(e.path().string());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    for (KernelKind kk : {KernelKind::kTiledPrefill, KernelKind::kSplitKvDecode}) {
      Result<CaseReport> rep = VerifyGoldenCase(c.value(), VerifyImpl::kKernels, {.force = kk});
      ASSERT_TRUE(rep.ok()) << e.path() << ": " << rep.status().ToString();
      EXPECT_EQ(rep->implementation, KernelKindName(kk));
      const StageReport* bad = rep->FirstMismatch();
      EXPECT_EQ(bad, nullptr) << e.path() << " " << KernelKindName(kk) << ": stage "
                              << (bad ? bad->stage : "") << " max_abs "
                              << (bad ? bad->max_abs : 0) << " at " << (bad ? bad->first_bad_index : "");
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}


}  // namespace
}  // namespace attnflow
