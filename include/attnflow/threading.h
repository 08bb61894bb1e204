// attnflow/threading.h — a small explicit thread pool.
//
// ParallelFor(num_tasks, fn) calls fn(task, worker) exactly once for every
// task in [0, num_tasks); `worker` is in [0, NumWorkers()) and identifies the
// per-worker scratch the callee may use. Which worker runs which task is not
// fixed, so results must never depend on the worker id — only on the task id
// (this is how kernels stay bit-identical for any thread count).
// The calling thread participates as worker 0. Calls from several threads at
// once are serialised per pool; each pool is independent. A ParallelFor
// called from inside a task of the same pool runs its tasks inline on the
// calling worker (same worker id), so nesting never deadlocks.
//
// Waiting: an idle worker first spins (with a CPU pause) for up to
// kSpinMicros on the call counter, then blocks on a condition variable; the
// caller spins the same way for the last workers to finish. Spinning keeps a
// worker on its own CPU between back-to-back calls (decode steps, layers):
// measured on the 2-vCPU machine, a purely blocking pool let the scheduler's
// wake-affine placement put both workers on one CPU for a whole process in
// about half of the runs (2x slower prefill at L=256). Results never depend
// on any of this.
//
// Hand-off without locks: a call publishes its tasks with one atomic store
// of a (generation, remaining tasks) word; workers claim tasks by CAS on that
// word (tasks are handed out from the last to the first), and the call
// returns when an atomic count of unfinished TASKS reaches zero — it does
// not wait for idle workers to check in (a worker woken late, or
// descheduled, after the caller ran every task used to hold the caller until
// the scheduler ran it). A spinning worker or caller takes no mutex at all (the
// mutex and condition variables are only for those that stopped spinning:
// a worker that saw the new generation while the caller still held the
// mutex used to block in the kernel on it, a futex sleep and wake-up for
// every parallel region — hundreds per decoded token).
//
// Starting: a pool asked for more threads than the system lets this process
// start (a process/thread limit such as `ulimit -u` or a container's pid
// limit, an address-space limit such as `ulimit -v` that leaves no room for
// another stack) runs with the workers that did start; it never throws,
// hangs or aborts. More than kMaxPoolThreads are never started. Either
// shortfall is reported once through the handler set with
// SetThreadWarningHandler (the CLI prints it as a warning); results do not
// depend on how many workers run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <atomic>

namespace attnflow {

class ThreadPool {
 public:
  // num_threads <= 0: hardware concurrency. Starts at most num_threads - 1
  // worker threads (the caller is worker 0), fewer when the system refuses
  // one (see "Starting" above).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int NumWorkers() const { return num_workers_; }
  // The worker count asked for (after resolving <= 0 to the hardware
  // concurrency); larger than NumWorkers() when threads could not start.
  int RequestedWorkers() const { return requested_workers_; }
  void ParallelFor(int64_t num_tasks,
                   const std::function<void(int64_t task, int worker)>& fn);

 private:
  void WorkerLoop(int worker);
  void RunTasks(int worker, uint64_t gen);

  int num_workers_ = 1;
  int requested_workers_ = 1;
  std::vector<std::thread> threads_;
  std::mutex call_mu_;  // serialises ParallelFor calls
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  // (generation << 32) | tasks not yet claimed. The caller's store publishes
  // fn_ / pending_ (release; seq_cst against sleepers_, so a worker going to
  // sleep either sees it or is woken); a claim is a CAS that decrements it.
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> pending_{0};        // tasks of this call not finished
  std::atomic<int> sleepers_{0};           // workers blocked on cv_start_
  std::atomic<bool> caller_sleeping_{false};  // caller blocked on cv_done_
  bool stop_ = false;                      // under mu_
  const std::function<void(int64_t, int)>* fn_ = nullptr;
};

// How long (microseconds) an idle worker spins before blocking.
inline constexpr int kSpinMicros = 200;

// Most workers one pool runs (a larger request, e.g. ATTNFLOW_NUM_THREADS=
// 1000000, is capped here instead of creating threads until the system
// refuses).
inline constexpr int kMaxPoolThreads = 1024;

// Called at most once per installed handler (so once per process in the
// CLI), with one line saying how many workers a pool asked for, how many
// run and why (the system's error, the cap, or an unusable
// ATTNFLOW_NUM_THREADS). nullptr (the default) reports nothing. The handler
// must not create a ThreadPool.
using ThreadWarningHandler = void (*)(const std::string& message);
void SetThreadWarningHandler(ThreadWarningHandler handler);

// Process-wide default pool, sized by ATTNFLOW_NUM_THREADS (a whole number;
// 0 or unset: hardware concurrency; anything else unusable is reported through
// the warning handler and treated as unset) or hardware concurrency. Created
// on first use.
ThreadPool& DefaultPool();

}  // namespace attnflow
