// plan_run_thread_test.cc — the plan/run pair of attnflow/kernels.h: PlanAttention
// agrees with ExplainAttention's choice; running a plan's phases inside a
// caller's own region (core::PhasedRegion on 1, 2 and 7 workers, and serially
// in reverse task order) gives Attention()'s out and LSE bit for bit, which in
// turn passes the FlashAttention accuracy check against the float64
// reference (reference::Sdpa); a bound run refuses tensors of another shape
// and out-of-range tasks with errors that say so.
#include <cstring>
#include <string>
#include <vector>

#include "attnflow/kernels.h"
#include "core/phased_region.h"
#include "util/kernel_test_util.h"

namespace attnflow {
namespace {

// Runs `plan`'s phases for the inputs: with `pool`, as two phases of a
// PhasedRegion (one item per task); without, serially in reverse order.
KernelRun RunPlanned(const Inputs& in, const AttentionPlan& plan, ThreadPool* pool) {
  const Spec& s = in.s;
  KernelRun r;
  r.o.out = Zeros(DType::kF32, {s.B, s.H, s.Lq, s.dv()});
  r.o.lse = Zeros(DType::kF32, {s.B, s.H, s.Lq});
  for (int64_t e = 0; e < r.o.out.numel(); ++e) r.o.out.data<float>()[e] = 12345.0f;
  for (int64_t e = 0; e < r.o.lse.numel(); ++e) r.o.lse.data<float>()[e] = 12345.0f;
  AttentionRun run;
  r.status = run.Bind(plan, r.o.out.view(), r.o.lse.view(), in.q, in.k, in.v, in.opt);
  if (!r.status.ok()) return r;
  AttentionWorkspace ws;
  r.status = ws.Reserve(plan, pool != nullptr ? pool->NumWorkers() : 1);
  if (!r.status.ok()) return r;
  if (pool == nullptr) {
    for (AttentionPhase ph : {AttentionPhase::kTasks, AttentionPhase::kMerge}) {
      for (int64_t t = plan.PhaseTasks(ph) - 1; t >= 0 && r.status.ok(); --t) {
        r.status = RunAttentionTasks(run, ph, t, t + 1, 0, ws);
      }
    }
    return r;
  }
  core::PhasedRegion region;
  region.Reset(pool->NumWorkers(), 2);
  region.SetItems(0, plan.num_tasks);
  region.SetItems(1, plan.num_merge_tasks);
  r.status = region.Run(*pool, [&](core::PhasedRegion::Task& t) {
    for (int p = 0; p < 2; ++p) {
      t.Phase(p, [&](int64_t i) {
        return RunAttentionTasks(run, static_cast<AttentionPhase>(p), i, i + 1, t.worker(), ws);
      });
    }
  });
  return r;
}

std::vector<Spec> PlanSpecs() {
  std::vector<Spec> v;
  Spec s;
  // Decode, one split and several (the split rule's boundary at 512 keys).
  s = {};
  s.B = 2; s.H = 6; s.Hkv = 2; s.Lq = 1; s.Lk = 300; s.D = 64; s.causal = Causal::kBottomRight;
  v.push_back(s);
  s.Lk = 1500; s.kv = DType::kF16; s.seed = 2;
  v.push_back(s);
  s.B = 1; s.H = 9; s.Hkv = 3; s.Lk = 2049; s.kv = DType::kF32; s.seed = 3;
  v.push_back(s);
  // Decode with 3 queries, kv_lens and a bool mask.
  s = {};
  s.B = 2; s.H = 4; s.Hkv = 4; s.Lq = 3; s.Lk = 700; s.D = 40; s.kv_lens = {700, 333};
  s.mask = MaskKind::kBool; s.seed = 4;
  v.push_back(s);
  // Prefill, GQA, causal, ALiBi, a window.
  s = {};
  s.B = 1; s.H = 4; s.Hkv = 2; s.Lq = 77; s.Lk = 130; s.D = 64; s.causal = Causal::kTopLeft;
  s.alibi = true; s.wl = 50; s.seed = 5;
  v.push_back(s);
  // The reference fallback (head_dim beyond the fast kernels).
  s = {};
  s.B = 1; s.H = 2; s.Hkv = 1; s.Lq = 2; s.Lk = 19; s.D = 300; s.seed = 6;
  v.push_back(s);
  return v;
}

TEST(PlanRun, PlanMatchesExplain) {
  for (const Spec& s : PlanSpecs()) {
    SCOPED_TRACE(s.Name());
    const Inputs in = Make(s);
    const Tensor out = Zeros(DType::kF32, {s.B, s.H, s.Lq, s.dv()});
    AttentionPlan plan;
    ASSERT_TRUE(PlanAttention(out.view(), {}, in.q, in.k, in.v, in.opt, {}, &plan).ok());
    KernelChoice ch;
    ASSERT_TRUE(ExplainAttention(out.view(), {}, in.q, in.k, in.v, in.opt, {}, &ch).ok());
    EXPECT_EQ(plan.kernel, ch.kernel);
    EXPECT_EQ(plan.tile_kv, ch.tile_kv);
    EXPECT_EQ(plan.num_splits, ch.num_splits);
    if (plan.kernel == KernelKind::kReference) {
      EXPECT_EQ(plan.num_tasks, 1);
      EXPECT_EQ(plan.num_merge_tasks, 0);
      continue;
    }
    EXPECT_EQ(plan.tile_q, ch.tile_q);
    EXPECT_EQ(plan.num_tasks, ch.num_tasks);
    EXPECT_EQ(plan.num_merge_tasks,
              plan.kernel == KernelKind::kSplitKvDecode ? s.B * s.Hkv : 0);
    if (plan.kernel == KernelKind::kSplitKvDecode) {
      EXPECT_EQ(plan.num_tasks, s.B * s.Hkv * plan.num_splits);
      EXPECT_GE(plan.split_len * plan.num_splits, s.Lk);
      EXPECT_LT(plan.split_len * (plan.num_splits - 1), s.Lk);
    }
  }
}

TEST(PlanRun, PhasesInAnyScheduleEqualAttentionBitForBit) {
  ThreadPool p1(1), p2(2), p7(7);
  for (const Spec& s : PlanSpecs()) {
    SCOPED_TRACE(s.Name());
    const Inputs in = Make(s);
    std::vector<KernelRun> runs;
    runs.push_back(RunKernel(in, {}));  // Attention() itself
    ASSERT_TRUE(runs[0].status.ok()) << runs[0].status.ToString();
    // Attention() is right (its own tests sweep far more; this anchors the
    // comparison to the float64 reference).
    CheckOutputs(runs[0].o, NaiveF32(in), Reference(in), s.Name());
    AttentionPlan plan;
    ASSERT_TRUE(PlanAttention(runs[0].o.out.view(), runs[0].o.lse.view(), in.q, in.k, in.v,
                              in.opt, {}, &plan).ok());
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &p1, &p2, &p7}) {
      runs.push_back(RunPlanned(in, plan, pool));
      ASSERT_TRUE(runs.back().status.ok()) << runs.back().status.ToString();
    }
    ExpectBitIdentical(runs, s.Name());
  }
}

TEST(PlanRun, ErrorsNameTheMismatch) {
  Spec s;
  s.B = 1; s.H = 2; s.Hkv = 1; s.Lq = 1; s.Lk = 100; s.D = 64;
  const Inputs in = Make(s);
  Tensor out = Zeros(DType::kF32, {1, 2, 1, 64});
  AttentionPlan plan;
  ASSERT_TRUE(PlanAttention(out.view(), {}, in.q, in.k, in.v, in.opt, {}, &plan).ok());
  ASSERT_EQ(plan.kernel, KernelKind::kSplitKvDecode);

  // Another kv_len than planned.
  Spec s2 = s;
  s2.Lk = 101;
  const Inputs in2 = Make(s2);
  AttentionRun run;
  Status st = run.Bind(plan, out.view(), {}, in2.q, in2.k, in2.v, in2.opt);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("the plan was made for [B=1 H=2 Hkv=1 Lq=1 Lk=100"),
            std::string::npos) << st.message();
  EXPECT_NE(st.message().find("Lk=101"), std::string::npos) << st.message();
  AttentionWorkspace ws;
  ASSERT_TRUE(ws.Reserve(plan, 1).ok());
  // A failed bind leaves the run unbound.
  EXPECT_EQ(RunAttentionTasks(run, AttentionPhase::kTasks, 0, 1, 0, ws).code(),
            StatusCode::kInvalidArgument);

  ASSERT_TRUE(run.Bind(plan, out.view(), {}, in.q, in.k, in.v, in.opt).ok());
  st = RunAttentionTasks(run, AttentionPhase::kTasks, 0, plan.num_tasks + 1, 0, ws);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
  st = RunAttentionTasks(run, AttentionPhase::kMerge, 1, 0, 0, ws);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
  st = RunAttentionTasks(run, AttentionPhase::kTasks, 0, 1, 1, ws);  // worker 1 of 1
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  AttentionWorkspace empty;
  st = RunAttentionTasks(run, AttentionPhase::kTasks, 0, 1, 0, empty);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_TRUE(RunAttentionTasks(run, AttentionPhase::kTasks, 0, plan.num_tasks, 0, ws).ok());
  EXPECT_TRUE(RunAttentionTasks(run, AttentionPhase::kMerge, 0, plan.num_merge_tasks, 0, ws).ok());
}

}  // namespace
}  // namespace attnflow
