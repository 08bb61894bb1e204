// concurrency_test.cc — the threaded kernels as other programs embed them:
// many caller threads at once, different shapes, shared and private pools,
// and results that do not depend on the number of threads. Run under TSan by
// tools/ci/sanitize.sh tsan.
//
// Expected values: every concurrent result is compared with reference::Sdpa
// (float64) on the same inputs; determinism is checked bit for bit against
// the 1-thread result of the same kernel and options.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/kernels.h"
#include "attnflow/threading.h"
#include "util/test_util.h"

namespace attnflow {
namespace {

using ::attnflow::testing::Random;
using ::attnflow::testing::Zeros;

struct Shape4 {
  int64_t B, H, Hkv, Lq, Lk, D, Dv;
  Causal causal = Causal::kNone;
  int mask = 0;      // 0 none, 1 bool [Lq,Lk], 2 float [B,1,Lq,Lk]
  bool kv_lens = false;
  bool strided = false;  // [B,L,H,D] storage
  DType kv = DType::kF32;
  int64_t window_left = -1;
};

struct Case {
  Shape4 s;
  Tensor q, k, v, mask, kvl;
  TensorView qv, kv, vv;
  SdpaOptions opt;
};

std::unique_ptr<Case> MakeCase(const Shape4& s, uint64_t seed) {
  auto c = std::make_unique<Case>();
  c->s = s;
  if (s.strided) {
    c->q = Random({s.B, s.Lq, s.H, s.D}, seed + 1);
    c->k = Random({s.B, s.Lk, s.Hkv, s.D}, seed + 2, 1.0, s.kv);
    c->v = Random({s.B, s.Lk, s.Hkv, s.Dv}, seed + 3, 1.0, s.kv);
    c->qv = c->q.view().Permuted({0, 2, 1, 3});
    c->kv = c->k.view().Permuted({0, 2, 1, 3});
    c->vv = c->v.view().Permuted({0, 2, 1, 3});
  } else {
    c->q = Random({s.B, s.H, s.Lq, s.D}, seed + 1);
    c->k = Random({s.B, s.Hkv, s.Lk, s.D}, seed + 2, 1.0, s.kv);
    c->v = Random({s.B, s.Hkv, s.Lk, s.Dv}, seed + 3, 1.0, s.kv);
    c->qv = c->q.view();
    c->kv = c->k.view();
    c->vv = c->v.view();
  }
  c->opt.causal = s.causal;
  c->opt.window_left = s.window_left;
  if (s.mask == 1) {
    c->mask = testing::RandomBoolMask({s.Lq, s.Lk}, seed + 4, 0.7);
    c->opt.attn_mask = c->mask.view();
  } else if (s.mask == 2) {
    c->mask = Random({s.B, 1, s.Lq, s.Lk}, seed + 4, 2.0);
    for (int64_t e = 0; e < c->mask.numel(); e += 5) c->mask.data<float>()[e] = -INFINITY;
    c->opt.attn_mask = c->mask.view();
  }
  if (s.kv_lens) {
    c->kvl = Zeros(DType::kI64, {s.B});
    for (int64_t b = 0; b < s.B; ++b) c->kvl.data<int64_t>()[b] = (s.Lk * (b + 1)) / (s.B + 1);
    c->opt.kv_lens = c->kvl.view();
  }
  return c;
}

struct Out {
  Status st;
  KernelChoice choice;
  Tensor out, lse;
};

Out RunKernel(const Case& c, ThreadPool* pool, KernelKind force = KernelKind::kAuto,
              int64_t tile_q = 0, int64_t tile_kv = 0, int64_t split = 0) {
  Out o;
  o.out = Zeros(DType::kF32, {c.s.B, c.s.H, c.s.Lq, c.s.Dv});
  o.lse = Zeros(DType::kF32, {c.s.B, c.s.H, c.s.Lq});
  KernelOptions ko;
  ko.pool = pool;
  ko.force = force;
  ko.tile_q = tile_q;
  ko.tile_kv = tile_kv;
  ko.split_kv = split;
  o.st = Attention(o.out.view(), o.lse.view(), c.qv, c.kv, c.vv, c.opt, ko, &o.choice);
  return o;
}

// Max |kernel - reference| over out; NaN/inf mismatches count as infinite.
double ErrorVsReference(const Case& c, const Out& o) {
  Tensor ref = Zeros(DType::kF64, {c.s.B, c.s.H, c.s.Lq, c.s.Dv});
  Tensor lse = Zeros(DType::kF64, {c.s.B, c.s.H, c.s.Lq});
  if (!reference::Sdpa(ref.view(), lse.view(), c.qv, c.kv, c.vv, c.opt).ok()) return INFINITY;
  return std::max(testing::MaxAbsDiff(o.out.view(), ref.view()),
                  testing::MaxAbsDiff(o.lse.view(), lse.view()));
}

std::vector<Shape4> MixedShapes() {
  std::vector<Shape4> v;
  v.push_back({1, 4, 2, 70, 90, 64, 64, Causal::kTopLeft});
  v.push_back({2, 8, 2, 1, 700, 128, 128, Causal::kBottomRight, 0, true});          // decode
  v.push_back({1, 2, 1, 33, 41, 80, 80, Causal::kNone, 2, false, true, DType::kF16});
  v.push_back({3, 3, 3, 4, 300, 96, 96, Causal::kNone, 1});                          // decode GQA 1
  v.push_back({1, 6, 3, 65, 65, 13, 7, Causal::kBottomRight, 0, true, false, DType::kBF16});
  v.push_back({2, 2, 2, 17, 129, 256, 256, Causal::kNone, 0, false, false, DType::kF32, 5});
  return v;
}

// Several caller threads at once, each cycling through different shapes,
// sharing one pool, using the default pool, or a private pool. Every result
// is checked against the float64 reference.
TEST(Concurrency, ManyCallersDifferentShapesEveryResultChecked) {
  const std::vector<Shape4> shapes = MixedShapes();
  ThreadPool shared(3);
  constexpr int kCallers = 6, kIters = 3;
  std::vector<std::string> failures;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < kCallers; ++t) {
    threads.emplace_back([&, t] {
      ThreadPool own(2);
      for (int it = 0; it < kIters; ++it) {
        const Shape4& s = shapes[static_cast<size_t>(t + it) % shapes.size()];
        const std::unique_ptr<Case> c = MakeCase(s, 1000 + 37 * t + it);
        ThreadPool* pool = t % 3 == 0 ? &shared : t % 3 == 1 ? nullptr : &own;
        const Out o = RunKernel(*c, pool);
        const double err = o.st.ok() ? ErrorVsReference(*c, o) : INFINITY;
        if (!(err <= 2e-5)) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("caller " + std::to_string(t) + " iter " + std::to_string(it) +
                             " shape " + std::to_string(static_cast<size_t>(t + it) % shapes.size()) +
                             ": " + (o.st.ok() ? "error " + std::to_string(err) : o.st.ToString()));
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& f : failures) ADD_FAILURE() << f;
}

// Results are bit-identical for 1, 2 and 7 threads: prefill and decode,
// GQA, masks, kv_lens, strided inputs, tile and split overrides.
TEST(Concurrency, BitIdenticalForOneTwoAndSevenThreads) {
  ThreadPool p1(1), p2(2), p7(7);
  struct Variant {
    Shape4 s;
    KernelKind force;
    int64_t tile_q, tile_kv, split;
  };
  const std::vector<Shape4> shapes = MixedShapes();
  std::vector<Variant> variants;
  for (const Shape4& s : shapes) variants.push_back({s, KernelKind::kAuto, 0, 0, 0});
  variants.push_back({shapes[0], KernelKind::kTiledPrefill, 8, 16, 0});
  variants.push_back({shapes[1], KernelKind::kSplitKvDecode, 0, 32, 64});  // many splits
  variants.push_back({shapes[4], KernelKind::kSplitKvDecode, 0, 16, 16});
  variants.push_back({shapes[3], KernelKind::kTiledPrefill, 1, 1, 0});
  for (size_t n = 0; n < variants.size(); ++n) {
    const Variant& var = variants[n];
    const std::unique_ptr<Case> c = MakeCase(var.s, 50 + n);
    const Out o1 = RunKernel(*c, &p1, var.force, var.tile_q, var.tile_kv, var.split);
    ASSERT_TRUE(o1.st.ok()) << n << ": " << o1.st.ToString();
    EXPECT_LE(ErrorVsReference(*c, o1), 2e-5) << n << " " << o1.choice.ToString();
    for (ThreadPool* p : {&p2, &p7}) {
      const Out o = RunKernel(*c, p, var.force, var.tile_q, var.tile_kv, var.split);
      ASSERT_TRUE(o.st.ok());
      EXPECT_EQ(o.choice.kernel, o1.choice.kernel);
      EXPECT_EQ(std::memcmp(o.out.data<float>(), o1.out.data<float>(), o1.out.nbytes()), 0)
          << "variant " << n << " (" << o1.choice.ToString() << ") out differs with "
          << p->NumWorkers() << " threads";
      EXPECT_EQ(std::memcmp(o.lse.data<float>(), o1.lse.data<float>(), o1.lse.nbytes()), 0)
          << "variant " << n << " lse differs with " << p->NumWorkers() << " threads";
    }
  }
}

// Many threads hammering one pool: every task of every call runs exactly
// once, with a worker id in range, and the calls do not interfere.
TEST(Concurrency, ThreadPoolParallelForFromManyThreads) {
  ThreadPool pool(4);
  constexpr int kCallers = 8, kCalls = 50;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kCallers; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        const int64_t n = (t * 7 + c * 3) % 40;  // includes 0 and 1
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.ParallelFor(n, [&](int64_t task, int worker) {
          if (worker < 0 || worker >= pool.NumWorkers()) errors.fetch_add(1);
          hits[static_cast<size_t>(task)].fetch_add(1);
        });
        for (auto& h : hits) {
          if (h.load() != 1) errors.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
}

// The pool's hand-off paths: back-to-back calls of 0..40 tasks (a worker may
// still be leaving call N when call N+1 is published: it must not take a
// task of N+1 it did not claim, nor run a task twice), pauses longer than
// the spin so workers and the caller block on their condition variables, a
// slow last task (the caller sleeps until the TASK is done), and pools
// destroyed right after a call. Each task writes a plain int of its own, so
// a task run twice or concurrently, or a call returning before its tasks
// are done, is a data race under TSan and a wrong count here.
TEST(Concurrency, ThreadPoolHandOffSleepsAndLateWorkers) {
  int errors = 0;
  for (int workers : {2, 3}) {
    ThreadPool pool(workers);
    for (int c = 0; c < 300; ++c) {
      const int64_t n = (c * 7) % 41;
      std::vector<int> hits(static_cast<size_t>(n), 0);
      pool.ParallelFor(n, [&](int64_t task, int w) {
        // Every task takes a few microseconds (so workers get some) and a
        // worker's task ends late: a call that returned before its tasks
        // were done is then seen here too, not only by TSan.
        const auto t0 = std::chrono::steady_clock::now();
        while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(2)) {
        }
        if (w != 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
        if (w >= 0 && w < pool.NumWorkers()) hits[static_cast<size_t>(task)] += 1;
      });
      for (int h : hits) errors += h != 1;
      if (c % 60 == 0) std::this_thread::sleep_for(std::chrono::microseconds(3 * kSpinMicros));
    }
  }
  {
    ThreadPool pool(2);
    for (int c = 0; c < 5; ++c) {
      std::vector<int> hits(3, 0);
      pool.ParallelFor(3, [&](int64_t task, int) {
        if (task == 0) std::this_thread::sleep_for(std::chrono::microseconds(3 * kSpinMicros));
        hits[static_cast<size_t>(task)] += 1;
      });
      for (int h : hits) errors += h != 1;
    }
  }
  for (int i = 0; i < 50; ++i) {
    auto p = std::make_unique<ThreadPool>(2 + i % 3);
    std::vector<int> hits(17, 0);
    p->ParallelFor(17, [&](int64_t task, int) { hits[static_cast<size_t>(task)] += 1; });
    for (int h : hits) errors += h != 1;
  }
  EXPECT_EQ(errors, 0);
}

// Creating and destroying pools while other pools work (embedding programs
// do this around every request).
TEST(Concurrency, PoolsCreatedAndDestroyedWhileOthersRun) {
  const std::unique_ptr<Case> c = MakeCase({1, 4, 2, 40, 80, 32, 32, Causal::kTopLeft}, 7);
  ThreadPool ref_pool(1);
  const Out want = RunKernel(*c, &ref_pool);
  ASSERT_TRUE(want.st.ok());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        ThreadPool p(1 + (t + i) % 4);
        const Out o = RunKernel(*c, &p);
        if (!o.st.ok() ||
            std::memcmp(o.out.data<float>(), want.out.data<float>(), want.out.nbytes()) != 0) {
          mismatches.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// A program that already runs on a pool calls Attention (or ParallelFor) from
// inside a task of the SAME pool — e.g. a model parallelising over requests
// with DefaultPool() whose per-request code calls Attention with the default
// pool. This must finish (run the inner call inline), not deadlock. The
// check runs on a helper thread with a deadline so a deadlock fails the test
// instead of hanging the suite.
TEST(Concurrency, NestedParallelForOnTheSamePoolDoesNotDeadlock) {
  auto* pool = new ThreadPool(2);  // leaked on purpose if the call never returns
  auto inner_runs = std::make_shared<std::atomic<int>>(0);
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread worker([pool, inner_runs, done] {
    pool->ParallelFor(2, [&](int64_t, int) {
      pool->ParallelFor(3, [&](int64_t, int) { inner_runs->fetch_add(1); });
    });
    done->store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done->load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!done->load()) {
    worker.detach();  // stuck for good; the process exits without joining it
    FAIL() << "ParallelFor called from inside a task of the same pool deadlocked "
              "(inner tasks run: " << inner_runs->load() << " of 6)";
  }
  worker.join();
  EXPECT_EQ(inner_runs->load(), 6);
  delete pool;
}

}  // namespace
}  // namespace attnflow
