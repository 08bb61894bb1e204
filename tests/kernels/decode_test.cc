// decode_test.cc — the split-KV decode kernel: agreement with the float64
// reference (FlashAttention tolerance method, see util/kernel_test_util.h), step-by-step
// decoding vs the prefill of the same sequence, split/merge behaviour and
// bit-identical results for any thread count.
#include <initializer_list>

#include "util/kernel_test_util.h"  // Spec, Make, NaiveF32, Reference, RunKernel, ...
#include "util/simd_targets_util.h"  // ForEachTarget

namespace attnflow {
namespace {

// Narrows a [B,H,L,D] view to rows [begin, begin+len) of dim 2.
TensorView Rows(const TensorView& v, int64_t begin, int64_t len) {
  TensorView r = v;
  r.data = static_cast<char*>(v.data) +
           begin * v.strides[2] * static_cast<int64_t>(DTypeSize(v.dtype));
  r.shape[2] = len;
  return r;
}

TEST(Decode, SweepAgainstReference) {
  for (const Spec& s : SweepSpecs(90, 23, /*prefill=*/false)) {
    CheckCase(s, KernelKind::kSplitKvDecode, /*strided_out=*/s.seed % 2 == 0);
  }
}

TEST(Decode, AutoDispatchForShortQueries) {
  for (int64_t Lq : {1, 2, 4, 5}) {
    const Inputs in =
        Make({.H = 8, .Hkv = 2, .Lq = Lq, .Lk = 700, .D = 64, .causal = Causal::kBottomRight,
              .seed = static_cast<uint64_t>(40 + Lq)});
    KernelRun k;
    ASSERT_NO_FATAL_FAILURE(CheckRun(in, {}, NaiveF32(in), Reference(in), &k));
    EXPECT_EQ(k.choice.kernel, Lq <= kDecodeMaxQueryLen ? KernelKind::kSplitKvDecode
                                                        : KernelKind::kTiledPrefill)
        << k.choice.ToString();
  }
}

TEST(Decode, ManySplitsAndGqaGroups) {
  for (auto [H, Hkv] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {4, 2}, {8, 1}, {8, 8}}) {
    for (DType kv : {DType::kF32, DType::kF16, DType::kBF16}) {
      const Inputs in =
          Make({.H = H, .Hkv = Hkv, .Lq = 1, .Lk = 3000, .D = H == 8 && Hkv == 8 ? 128 : 64,
                .kv = kv, .causal = Causal::kBottomRight,
                .seed = static_cast<uint64_t>(50 + H + Hkv)});
      KernelRun k;
      ASSERT_NO_FATAL_FAILURE(CheckRun(in, {}, NaiveF32(in), Reference(in), &k));
      EXPECT_EQ(k.choice.kernel, KernelKind::kSplitKvDecode);
      EXPECT_GT(k.choice.num_splits, 1) << k.choice.ToString();
    }
  }
}

// The grouped path shares each loaded K/V vector among chunks of up to 4
// query rows (2 on 16-register targets) and runs P.V in blocks of 4, 2 and 1
// rows: group sizes 2, 3, 5, 8 and 9 rows (Lq 3 x G 3) cover full chunks,
// every leftover chunk size, and dead rows inside a live chunk (top_left
// causal with Lq > 1 and kv_lens that leave some rows without keys).
TEST(Decode, GqaRowChunksAgainstReference) {
  struct Case {
    int64_t H, Hkv, Lq, D;
    DType kv;
    Causal causal;
  };
  const std::vector<Case> cases = {
      {4, 2, 1, 128, DType::kF16, Causal::kBottomRight},
      {6, 2, 1, 64, DType::kBF16, Causal::kBottomRight},
      {10, 2, 1, 64, DType::kF32, Causal::kNone},
      {16, 2, 1, 128, DType::kF16, Causal::kBottomRight},
      {16, 2, 1, 64, DType::kBF16, Causal::kNone},
      {6, 2, 3, 64, DType::kF16, Causal::kTopLeft},
      {9, 3, 1, 64, DType::kF32, Causal::kBottomRight},  // SmolLM2's grouping
  };
  uint64_t seed = 300;
  for (const Case& c : cases) {
    // Lk 1337: tiles end mid 4-key block, so the scalar key tail runs too.
    CheckCase({.B = 2, .H = c.H, .Hkv = c.Hkv, .Lq = c.Lq, .Lk = 1337, .D = c.D, .kv = c.kv,
               .causal = c.causal, .kv_lens = {1337, c.causal == Causal::kTopLeft ? 1 : 901},
               .seed = seed++},
              KernelKind::kSplitKvDecode);
  }
}

// A split-KV decode case: the forced kSplitKvDecode with tile_kv / split_kv
// chosen so that the call makes 3 splits, and the case's references.
struct SplitCase {
  Spec s;
  int64_t tile, split;  // KernelOptions tile_kv, split_kv
  Inputs in;
  Outputs ref, naive;

  SplitCase(const Spec& spec, int64_t tile_kv, int64_t split_kv)
      : s(spec), tile(tile_kv), split(split_kv), in(Make(spec)), ref(Reference(in)),
        naive(NaiveF32(in)) {}
};

// Runs c once on each pool: 3 splits every time, the output against the
// float64 and naive references, and out / lse bit-identical across the pools.
void CheckThreeSplitsOnPools(const SplitCase& c, std::initializer_list<ThreadPool*> pools) {
  SCOPED_TRACE(c.s.Name());
  std::vector<KernelRun> runs;
  ASSERT_NO_FATAL_FAILURE(RunOnPools(
      c.in, {.force = KernelKind::kSplitKvDecode, .tile_kv = c.tile, .split_kv = c.split}, pools,
      &runs));
  for (const KernelRun& r : runs) ASSERT_EQ(r.choice.num_splits, 3) << r.choice.ToString();
  CheckOutputs(runs[0].o, c.naive, c.ref, c.s.Name());
  ExpectBitIdentical(runs);
}

// The direct path (F32/F16/BF16 rows read in place) prefetches one tile
// ahead (the next tile's K during Q.K, its V during the decode-local P.V) and
// scores up to 8 query rows per loaded K vector. Many tiles per split, a
// short last tile, odd Lkv, kv_lens, G = 2, 4, 8 (8 rows: one chunk on
// AVX-512, smaller chunks elsewhere), every kv dtype, D 64 and 128: against
// the float64 reference, and bit-identical for 1, 2 and 7 threads, on every
// Highway target this CPU has.
TEST(Decode, PrefetchedTilesAndRowChunksAgainstReferenceAndThreadCounts) {
  ThreadPool p1(1), p2(2), p7(7);
  auto check = [&](const SplitCase& c) { CheckThreeSplitsOnPools(c, {&p1, &p2, &p7}); };
  std::vector<SplitCase> cases;
  uint64_t seed = 700;
  for (int64_t G : {2, 4, 8}) {
    for (DType kv : {DType::kF32, DType::kF16, DType::kBF16}) {
      // Lk 1001 is odd: the last tile ends mid key block. 9-10 tiles of 48
      // keys per split; 3 splits of 432 keys: 432, 432, 137.
      cases.emplace_back(Spec{.B = 2, .H = G * 2, .Hkv = 2, .Lq = 1, .Lk = 1001,
                              .D = G == 4 ? 64 : 128, .kv = kv, .causal = Causal::kBottomRight,
                              .kv_lens = {1001, 777}, .seed = seed++},
                         48, 400);
    }
  }
  const std::set<std::string> ran = testing::ForEachTarget([&] {
    for (const SplitCase& c : cases) check(c);
  });
  EXPECT_GE(ran.size(), 1u);

  // K/V bytes above kDecodeAheadBytes (32 MiB): the one-tile look-ahead
  // prefetch is on (a prefetch cannot change a value; this checks that the
  // path runs and stays exact). Best target only; 3 splits of 5632 keys.
  // 2 heads x 16501 keys x 256 values x 4 bytes = 33.8 MB.
  check(SplitCase(Spec{.B = 1, .H = 4, .Hkv = 2, .Lq = 1, .Lk = 16501, .D = 128,
                       .kv = DType::kF32, .causal = Causal::kBottomRight, .seed = seed++},
                  256, 5600));
}

// Calls with at most 2 query rows per kv head and at most 8 MiB of K/V run
// the direct path with no software prefetch (DecodeNoPrefetch). Rows 1 and 2
// (G = 1 or 2 at Lq = 1, G = 1 at Lq = 2) take it; 3 rows (G = 3) sit
// just past the row limit (prefetched) as a contrast. Every dtype at D = 64,
// F16 also at D = 128, on every target, against the float64 reference, bit-identical for 1/2/7
// threads (3 splits: the merge runs).
TEST(Decode, NoPrefetchSmallGroupsAgainstReferenceAndThreadCounts) {
  ThreadPool p1(1), p2(2), p7(7);
  std::vector<SplitCase> cases;
  uint64_t seed = 1800;
  for (auto [G, Lq] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 1}, {1, 2}, {3, 1}}) {
    for (DType kv : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (int64_t D : {64, 128}) {
        if (D == 128 && kv != DType::kF16) continue;  // CI time: D = 128 once
        // Lk 1001 is odd: the last tile ends mid key block.
        cases.emplace_back(Spec{.B = 2, .H = G * 2, .Hkv = 2, .Lq = Lq, .Lk = 1001, .D = D,
                                .kv = kv, .causal = Causal::kBottomRight,
                                .kv_lens = {1001, 640}, .seed = seed++},
                           64, 400);
      }
    }
  }
  auto check = [&](const SplitCase& c) { CheckThreeSplitsOnPools(c, {&p1, &p2, &p7}); };
  const std::set<std::string> ran = testing::ForEachTarget([&] {
    for (const SplitCase& c : cases) check(c);
  });
  EXPECT_GE(ran.size(), 1u);
}

TEST(Decode, SplitOverrideAndTinyTiles) {
  const Inputs in = Make({.H = 4, .Hkv = 1, .Lq = 3, .Lk = 777, .D = 40,
                          .causal = Causal::kBottomRight, .wl = 300, .alibi = true, .seed = 60});
  const Outputs ref = Reference(in), naive = NaiveF32(in);
  for (auto [split, tile] : std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {100, 32}, {1, 1}, {5000, 512}}) {
    KernelRun k;
    ASSERT_NO_FATAL_FAILURE(CheckRun(
        in, {.force = KernelKind::kSplitKvDecode, .tile_kv = tile, .split_kv = split}, naive, ref,
        &k));
    EXPECT_GE(k.choice.num_splits, 1);
  }
}

TEST(Decode, DeadRowsAndKvLens) {
  // top_left: rows 0, 1 see keys <= 0 / <= 1.
  Spec s{.B = 4, .H = 4, .Hkv = 2, .Lq = 2, .Lk = 1500, .D = 32, .causal = Causal::kTopLeft,
         .kv_lens = {0, 1, 700, 1500}, .seed = 70};
  CheckCase(s, KernelKind::kSplitKvDecode);
  s.causal = Causal::kBottomRight;
  s.wl = 0;
  s.wr = 0;  // only the diagonal key: dead where it is beyond kv_lens
  CheckCase(s, KernelKind::kSplitKvDecode);
  s.wl = -1;
  s.wr = -1;
  s.mask = MaskKind::kBool;
  s.mask_shape = {s.B, 1, 1, s.Lk};
  CheckCase(s, KernelKind::kSplitKvDecode);
}

// Decoding position t (Lq = 1, bottom_right over the first t+1 keys) equals row
// t of the causal prefill of the whole sequence.
void StepByStep(DType kv, int64_t H, int64_t Hkv, int64_t L, int64_t D, bool use_kv_lens) {
  const Inputs in = Make({.H = H, .Hkv = Hkv, .Lq = L, .Lk = L, .D = D, .kv = kv,
                          .causal = Causal::kBottomRight, .seed = static_cast<uint64_t>(80 + L)});
  KernelRun full = RunKernel(in, {.force = KernelKind::kTiledPrefill});
  ASSERT_TRUE(full.status.ok());
  const Outputs ref = Reference(in);
  double max_diff = 0, max_ref_err = 0;
  Tensor out1 = Zeros(DType::kF32, {1, H, 1, D});
  Tensor lse1 = Zeros(DType::kF32, {1, H, 1});
  Tensor lens = Zeros(DType::kI64, {1});
  for (int64_t t = 0; t < L; ++t) {
    SdpaOptions opt;
    opt.causal = Causal::kBottomRight;
    TensorView k = in.k, v = in.v;
    if (use_kv_lens) {
      lens.data<int64_t>()[0] = t + 1;  // fixed-size cache, valid prefix t+1
      opt.kv_lens = lens.view();
    } else {
      k = Rows(in.k, 0, t + 1);
      v = Rows(in.v, 0, t + 1);
    }
    KernelChoice c;
    const Status st = Attention(out1.view(), lse1.view(), Rows(in.q, t, 1), k, v, opt, {}, &c);
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(c.kernel, KernelKind::kSplitKvDecode);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t d = 0; d < D; ++d) {
        const double dec = out1.data<float>()[h * D + d];
        const double pre = full.o.out.data<float>()[(h * L + t) * D + d];
        const double r = ref.out.data<double>()[(h * L + t) * D + d];
        max_diff = std::max(max_diff, std::fabs(dec - pre));
        max_ref_err = std::max(max_ref_err, std::fabs(dec - r));
      }
      const double dl = lse1.data<float>()[h];
      const double pl = full.o.lse.data<float>()[h * L + t];
      max_diff = std::max(max_diff, std::fabs(dl - pl) / std::max(1.0, std::fabs(pl)));
    }
  }
  // Two fp32 kernels with different reduction orders: a few ulps apart.
  EXPECT_LE(max_diff, 2e-6) << DTypeName(kv) << " L=" << L;
  EXPECT_LE(max_ref_err, 2e-6) << DTypeName(kv) << " L=" << L;
}

TEST(Decode, StepByStepEqualsPrefillRows) {
  StepByStep(DType::kF32, 4, 2, 200, 64, false);
  StepByStep(DType::kF16, 2, 1, 150, 128, true);
  StepByStep(DType::kBF16, 3, 3, 70, 13, false);
}

TEST(Determinism, DecodeBitIdenticalAcrossThreadCounts) {
  ThreadPool p1(1), p2(2), p7(7);
  for (int variant = 0; variant < 4; ++variant) {
    const Spec s{.B = 2, .H = variant == 3 ? 16 : 8, .Hkv = variant == 1 ? 8 : 2,
                 .Lq = variant == 2 ? 3 : 1, .Lk = 5000,
                 .D = variant == 1 ? 96 : variant == 3 ? 128 : 64,
                 .kv = variant == 0 || variant == 3 ? DType::kF16 : DType::kF32,
                 .causal = Causal::kBottomRight, .kv_lens = {4000, 5000}, .alibi = variant == 2,
                 .seed = static_cast<uint64_t>(90 + variant)};
    std::vector<KernelRun> runs;
    ASSERT_NO_FATAL_FAILURE(RunOnPools(Make(s), {}, {&p1, &p2, &p7}, &runs));
    for (const KernelRun& r : runs) {
      EXPECT_EQ(r.choice.kernel, KernelKind::kSplitKvDecode);
      EXPECT_GT(r.choice.num_splits, 1);
    }
    ExpectBitIdentical(runs, s.Name());
  }
}

// The merge of many splits (SIMD over Dv in double, with a scalar tail when
// Dv is not a multiple of the double lane count), odd Dv, a strided output:
// against the float64 reference, and bit-identical for 1, 2 and 7 threads.
TEST(Decode, MergeOfManySplitsOddDvAgainstReferenceAndThreadCounts) {
  ThreadPool p1(1), p2(2), p7(7);
  struct Case {
    int64_t D, Dv;
    DType kv;
    bool strided_out;
  };
  uint64_t seed = 140;
  for (const Case& c : std::vector<Case>{{32, 13, DType::kBF16, true},
                                         {72, 72, DType::kF16, false},
                                         {64, 64, DType::kF32, true}}) {
    const Spec s{.B = 2, .H = 6, .Hkv = 2, .Lq = 1, .Lk = 1000, .D = c.D, .Dv = c.Dv,
                 .kv = c.kv, .causal = Causal::kBottomRight, .kv_lens = {1000, 333},
                 .seed = seed++};
    const Inputs in = Make(s);
    const Outputs ref = Reference(in), naive = NaiveF32(in);
    std::vector<KernelRun> runs;
    ASSERT_NO_FATAL_FAILURE(RunOnPools(
        in, {.force = KernelKind::kSplitKvDecode, .tile_kv = 32, .split_kv = 64}, {&p1, &p2, &p7},
        &runs, c.strided_out));
    for (const KernelRun& r : runs) {
      EXPECT_EQ(r.choice.num_splits, 16) << s.Name();
      CheckOutputs(r.o, naive, ref, s.Name());
    }
    ExpectBitIdentical(runs, s.Name());
  }
}

// Calls of at most 2^19 FLOP run their tasks on the calling thread (the
// explanation says so); prefill and decode, against the float64 reference
// and bit-identical for 1, 2 and 7 threads. A call just above the limit uses
// the pool as before.
TEST(Dispatch, TinyCallsRunOnTheCallingThread) {
  ThreadPool p1(1), p2(2), p7(7);
  struct Case {
    int64_t H, Hkv, Lq, Lk, D;
    DType kv;
    bool tiny;
  };
  uint64_t seed = 150;
  for (const Case& c : std::vector<Case>{{8, 8, 16, 16, 64, DType::kF32, true},   // 2^19 FLOP
                                         {9, 3, 1, 200, 64, DType::kF16, true},
                                         {6, 2, 3, 50, 24, DType::kBF16, true},
                                         {8, 8, 16, 17, 64, DType::kF32, false}}) {
    const Spec s{.H = c.H, .Hkv = c.Hkv, .Lq = c.Lq, .Lk = c.Lk, .D = c.D, .kv = c.kv,
                 .causal = Causal::kBottomRight, .seed = seed++};
    const Inputs in = Make(s);
    const Outputs ref = Reference(in), naive = NaiveF32(in);
    std::vector<KernelRun> runs;
    ASSERT_NO_FATAL_FAILURE(RunOnPools(in, {}, {&p1, &p2, &p7}, &runs));
    for (const KernelRun& r : runs) {
      EXPECT_EQ(r.choice.reason.find("calling thread") != std::string::npos, c.tiny)
          << s.Name() << ": " << r.choice.reason;
      CheckOutputs(r.o, naive, ref, s.Name());
    }
    ExpectBitIdentical(runs, s.Name());
  }
}

TEST(Decode, ForcedDecodeRejectsHugeGroups) {
  // 6400 rows per kv head.
  const Inputs in = Make({.H = 64, .Hkv = 1, .Lq = 100, .Lk = 3, .D = 4});
  KernelRun k = RunKernel(in, {.force = KernelKind::kSplitKvDecode});
  EXPECT_EQ(k.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(k.status.message().find("split_kv_decode"), std::string::npos) << k.status.message();
}

}  // namespace
}  // namespace attnflow
