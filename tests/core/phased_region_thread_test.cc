// phased_region_thread_test.cc — core::PhasedRegion (src/core/phased_region.h):
// every item of every phase runs exactly once per Run, a waited phase's
// writes are visible to every item of the later phases (plain, non-atomic
// writes, so ThreadSanitizer checks the ordering too: CI's TSan job runs
// tests named *thread*), for pools of 1, 2, 3 and 7 workers and more or
// fewer tasks than workers; errors and exceptions of an item or a body come
// back from Run without a hang; a nested Run on the pool's own worker and a
// task that leaves early do not deadlock.
#include "core/phased_region.h"

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "attnflow/status.h"
#include "attnflow/threading.h"
#include "gtest/gtest.h"

namespace attnflow::core {
namespace {

// Phase sizes exercised: empty, one item, fewer than the tasks, many.
const std::vector<int64_t> kItems = {0, 1, 3, 64, 7, 200, 1};

TEST(PhasedRegion, EveryItemOncePhasesOrdered) {
  for (int threads : {1, 2, 3, 7}) {
    ThreadPool pool(threads);
    for (int64_t tasks : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{pool.NumWorkers()}, int64_t{13}}) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, " << tasks << " tasks");
      const int np = static_cast<int>(kItems.size());
      // runs[p][i]: how often item i of phase p ran (atomic: the count itself
      // is the check); value[p][i]: a plain write, read by later phases.
      std::vector<std::vector<std::atomic<int>>> runs(kItems.size());
      std::vector<std::vector<int64_t>> value(kItems.size());
      for (size_t p = 0; p < kItems.size(); ++p) {
        runs[p] = std::vector<std::atomic<int>>(static_cast<size_t>(kItems[p]));
        value[p].assign(static_cast<size_t>(kItems[p]), -1);
      }
      std::atomic<int64_t> unordered{0};
      PhasedRegion region;
      for (int round = 0; round < 2; ++round) {  // storage reused across runs
        region.Reset(tasks, np);
        for (int p = 0; p < np; ++p) region.SetItems(p, kItems[static_cast<size_t>(p)]);
        for (auto& v : value) std::fill(v.begin(), v.end(), -1);
        Status st = region.Run(pool, [&](PhasedRegion::Task& t) {
          EXPECT_GE(t.id(), 0);
          EXPECT_LT(t.id(), tasks);
          for (int p = 0; p < np; ++p) {
            t.Phase(p, [&](int64_t i) {
              runs[static_cast<size_t>(p)][static_cast<size_t>(i)].fetch_add(1);
              // Every item of the previous (waited) phase is done and visible.
              if (p > 0) {
                for (int64_t x : value[static_cast<size_t>(p - 1)]) {
                  if (x != round * 1000 + p - 1) unordered.fetch_add(1);
                }
              }
              value[static_cast<size_t>(p)][static_cast<size_t>(i)] = round * 1000 + p;
            });
          }
        });
        EXPECT_TRUE(st.ok()) << st.ToString();
        for (size_t p = 0; p < kItems.size(); ++p) {
          for (size_t i = 0; i < runs[p].size(); ++i) {
            EXPECT_EQ(runs[p][i].load(), round + 1) << "phase " << p << " item " << i;
          }
        }
      }
      EXPECT_EQ(unordered.load(), 0);
    }
  }
}

// kNoWait: the items still all run once by the end of Run; a later waited
// phase still sees them only if it waits for them itself, so here nothing
// reads them before Run returns.
TEST(PhasedRegion, NoWaitPhaseStillRunsEveryItem) {
  ThreadPool pool(3);
  PhasedRegion region;
  region.Reset(pool.NumWorkers(), 2);
  region.SetItems(0, 50);
  region.SetItems(1, 50);
  std::vector<int> a(50, 0), b(50, 0);
  Status st = region.Run(pool, [&](PhasedRegion::Task& t) {
    t.Phase(0, [&](int64_t i) { a[static_cast<size_t>(i)] += 1; }, PhaseEnd::kNoWait);
    t.Phase(1, [&](int64_t i) { b[static_cast<size_t>(i)] += 1; }, PhaseEnd::kNoWait);
  });
  ASSERT_TRUE(st.ok());
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(a[static_cast<size_t>(i)], 1);
    EXPECT_EQ(b[static_cast<size_t>(i)], 1);
  }
}

TEST(PhasedRegion, ItemErrorComesBackAndLaterItemsStop) {
  for (int threads : {1, 2, 7}) {
    ThreadPool pool(threads);
    PhasedRegion region;
    region.Reset(7, 3);
    region.SetItems(0, 40);
    region.SetItems(1, 40);
    region.SetItems(2, 40);
    std::atomic<int> ran_after{0};
    Status st = region.Run(pool, [&](PhasedRegion::Task& t) {
      t.Phase(0, [&](int64_t i) -> Status {
        if (i == 17) return InvalidArgument("item 17 failed");
        return Status::Ok();
      });
      // Phase 0 was waited for: the failure is known to every task now.
      const bool ok = t.Phase(1, [&](int64_t) { ran_after.fetch_add(1); });
      EXPECT_FALSE(ok);
      t.Phase(2, [&](int64_t) { ran_after.fetch_add(1); });
    });
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << threads << " threads";
    EXPECT_EQ(st.message(), "item 17 failed");
    EXPECT_EQ(ran_after.load(), 0);
    // The region is usable again after a failure.
    region.Reset(7, 1);
    region.SetItems(0, 10);
    std::atomic<int> n{0};
    EXPECT_TRUE(region.Run(pool, [&](PhasedRegion::Task& t) {
      t.Phase(0, [&](int64_t) { n.fetch_add(1); });
    }).ok());
    EXPECT_EQ(n.load(), 10);
  }
}

TEST(PhasedRegion, ItemExceptionIsRethrownOnTheCaller) {
  for (int threads : {1, 2, 7}) {
    ThreadPool pool(threads);
    PhasedRegion region;
    region.Reset(pool.NumWorkers(), 2);
    region.SetItems(0, 30);
    region.SetItems(1, 30);
    EXPECT_THROW((void)region.Run(pool,
                                  [&](PhasedRegion::Task& t) {
                                    t.Phase(0, [&](int64_t i) {
                                      if (i == 5) throw std::runtime_error("boom");
                                    });
                                    t.Phase(1, [&](int64_t) {});
                                  }),
                 std::runtime_error)
        << threads << " threads";
  }
}

// A task whose body throws before its phases leaves its share to the
// others (they steal it): no waiter hangs, every item still runs once, and
// the exception comes back.
TEST(PhasedRegion, BodyExceptionDoesNotHangTheOthers) {
  ThreadPool pool(3);
  PhasedRegion region;
  region.Reset(4, 2);
  region.SetItems(0, 100);
  region.SetItems(1, 100);
  std::vector<std::atomic<int>> runs(100);
  EXPECT_THROW((void)region.Run(pool,
                                [&](PhasedRegion::Task& t) {
                                  if (t.id() == 2) throw std::runtime_error("task 2 left");
                                  t.Phase(0, [&](int64_t i) { runs[static_cast<size_t>(i)].fetch_add(1); });
                                }),
               std::runtime_error);
  // Items after the failure may be skipped; none ran twice.
  for (auto& r : runs) EXPECT_LE(r.load(), 1);
}

// More tasks than the pool has workers (1 worker: the tasks run one after
// the other on the caller) and a Run nested in a task of the same pool
// (the pool runs it inline): the first task to arrive does every item.
TEST(PhasedRegion, NoDeadlockWithFewerWorkersOrNested) {
  ThreadPool one(1);
  PhasedRegion region;
  region.Reset(5, 3);
  for (int p = 0; p < 3; ++p) region.SetItems(p, 11);
  std::atomic<int> n{0};
  EXPECT_TRUE(region.Run(one, [&](PhasedRegion::Task& t) {
    for (int p = 0; p < 3; ++p) t.Phase(p, [&](int64_t) { n.fetch_add(1); });
  }).ok());
  EXPECT_EQ(n.load(), 33);

  ThreadPool pool(2);
  std::atomic<int> inner_items{0};
  pool.ParallelFor(2, [&](int64_t, int) {
    PhasedRegion inner;  // one per outer task
    inner.Reset(3, 2);
    inner.SetItems(0, 9);
    inner.SetItems(1, 9);
    EXPECT_TRUE(inner.Run(pool, [&](PhasedRegion::Task& t) {
      t.Phase(0, [&](int64_t) { inner_items.fetch_add(1); });
      t.Phase(1, [&](int64_t) { inner_items.fetch_add(1); });
    }).ok());
  });
  EXPECT_EQ(inner_items.load(), 36);
}

}  // namespace
}  // namespace attnflow::core
