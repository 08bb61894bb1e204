// core/phased_region.h — one parallel region of ordered phases on a
// ThreadPool: the task claiming and the barrier of a fused schedule (the
// Llama decode step runs a whole token as one region), written once.
//
// A region runs `num_tasks` tasks (ThreadPool::ParallelFor); every task runs
// the same body, which calls Task::Phase(p, fn) for the declared phases in
// the same order. Phase p has items[p] items; each item runs exactly once
// per Run, on whichever task claims it: task w first takes its own
// contiguous share ([items*w/W, items*(w+1)/W), from the front), then steals
// from the other tasks' shares (from the back), each claim one CAS on a
// ChunkRange (core/chunk_range.h).
//
// The barrier (PhaseEnd::kWait) waits until every item of the phase is
// DONE, not until every task has ARRIVED: a task only reaches the wait after
// its claiming found nothing left, so it waits only for items that other
// running tasks claimed and are computing. Hence no deadlock whatever the
// pool runs: fewer workers than tasks, one worker, or a nested Run that the
// pool executes inline (the first task then does every item and the others
// find their phases done). Item writes are published by a release add to the
// phase's done count and acquired by the waiters, so after Phase(p, ...,
// kWait) returns, every item of phase p (and of every waited phase before
// it) is visible. PhaseEnd::kNoWait skips the wait: for a phase whose output
// no task reads before a later waited phase or the end of Run.
//
// Errors: an item returns void or Status. The first non-OK Status, or the
// first exception thrown by an item or the body, is kept; from then on the
// remaining items are claimed and counted done without running (so no
// waiter hangs) and Phase returns false. Run returns that Status, or
// rethrows that exception on the calling thread after every task ended.
//
// Results never depend on which task ran an item, so callers stay
// bit-identical for any thread count as long as an item's result depends
// only on its index and the phase inputs.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

#include "attnflow/status.h"
#include "attnflow/threading.h"
#include "core/chunk_range.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace attnflow::core {

enum class PhaseEnd { kWait, kNoWait };

class PhasedRegion {
 public:
  class Task;

  // Declares the next Run: `num_tasks` tasks (>= 1) and `num_phases`
  // phases, all with 0 items until SetItems. Storage is kept across calls
  // with the same (num_tasks, num_phases).
  void Reset(int64_t num_tasks, int num_phases) {
    if (num_tasks != num_tasks_ || num_phases != num_phases_) {
      ranges_.reset(new ChunkRange[static_cast<size_t>(num_tasks * num_phases)]);
      phases_.reset(new PhaseState[static_cast<size_t>(num_phases)]);
      num_tasks_ = num_tasks;
      num_phases_ = num_phases;
    }
    for (int p = 0; p < num_phases; ++p) SetItems(p, 0);
  }
  // Phase p gets `items` items (0 <= items < 2^32), split evenly over the tasks.
  void SetItems(int p, int64_t items) {
    PhaseState& ph = phases_[static_cast<size_t>(p)];
    ph.items = items;
    ph.done.store(0, std::memory_order_relaxed);
    SplitEvenly(Ranges(p), items, num_tasks_);
  }
  int64_t NumTasks() const { return num_tasks_; }
  int NumPhases() const { return num_phases_; }

  // Runs body(task) for every task on `pool` and returns when all ended.
  // Returns the first error of an item (or rethrows the first exception).
  // The ranges and counts are published to the workers by the pool's
  // hand-off; Reset/SetItems must not be called while a Run is in flight.
  Status Run(ThreadPool& pool, const std::function<void(Task&)>& body) {
    failed_.store(false, std::memory_order_relaxed);
    error_ = Status::Ok();
    exception_ = nullptr;
    pool.ParallelFor(num_tasks_, [&](int64_t w, int worker) {
      Task t(this, w, worker);
      try {
        body(t);
      } catch (...) {
        Fail(Status::Ok(), std::current_exception());
      }
    });
    if (exception_) std::rethrow_exception(exception_);
    return error_;
  }

  class Task {
   public:
    int64_t id() const { return w_; }  // task index in [0, NumTasks())
    int worker() const { return worker_; }  // the pool worker running it

    // Runs this task's claims of phase p's items, fn(item) each, then with
    // kWait waits until every item of the phase is done. Returns false once
    // the region has failed (its items then no longer run).
    template <typename Fn>
    bool Phase(int p, Fn&& fn, PhaseEnd end = PhaseEnd::kWait) {
      PhasedRegion& r = *r_;
      PhaseState& ph = r.phases_[static_cast<size_t>(p)];
      const int64_t n = RunOwnThenSteal(r.Ranges(p), w_, r.num_tasks_, [&](uint32_t c) {
        if (!r.failed_.load(std::memory_order_relaxed)) r.RunItem(fn, static_cast<int64_t>(c));
      });
      if (n > 0) ph.done.fetch_add(n, std::memory_order_release);
      if (end == PhaseEnd::kWait) {
        // Only claimed items are outstanding (their tasks are running);
        // yield after a while so that a descheduled one gets a CPU.
        for (int spins = 0; ph.done.load(std::memory_order_acquire) < ph.items; ++spins) {
          if (spins < 2048) {
            Pause();
          } else {
            std::this_thread::yield();
          }
        }
      }
      return !r.failed_.load(std::memory_order_relaxed);
    }

   private:
    friend class PhasedRegion;
    Task(PhasedRegion* r, int64_t w, int worker) : r_(r), w_(w), worker_(worker) {}
    PhasedRegion* r_;
    int64_t w_;
    int worker_;
  };

 private:
  struct alignas(64) PhaseState {
    std::atomic<int64_t> done{0};  // items finished (release per task)
    int64_t items = 0;
  };

  static void Pause() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  ChunkRange* Ranges(int p) { return ranges_.get() + static_cast<int64_t>(p) * num_tasks_; }

  template <typename Fn>
  void RunItem(Fn& fn, int64_t item) {
    try {
      if constexpr (std::is_same_v<std::invoke_result_t<Fn&, int64_t>, void>) {
        fn(item);
      } else {
        Status st = fn(item);
        if (!st.ok()) Fail(std::move(st), nullptr);
      }
    } catch (...) {
      Fail(Status::Ok(), std::current_exception());
    }
  }

  // Keeps the first failure (a Status or an exception).
  void Fail(Status st, std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.load(std::memory_order_relaxed)) {
      error_ = std::move(st);
      exception_ = std::move(e);
      failed_.store(true, std::memory_order_relaxed);
    }
  }

  int64_t num_tasks_ = 0;
  int num_phases_ = 0;
  std::unique_ptr<ChunkRange[]> ranges_;  // [num_phases][num_tasks]
  std::unique_ptr<PhaseState[]> phases_;
  std::atomic<bool> failed_{false};
  std::mutex mu_;  // guards error_ / exception_
  Status error_;
  std::exception_ptr exception_;
};

}  // namespace attnflow::core
