// thread_pool.cc — ParallelFor over a fixed set of workers (see threading.h).
#include "attnflow/threading.h"

#include <chrono>
#include <cstdlib>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace attnflow {
namespace {
// The pool (and worker id) whose task this thread is running, if any: a
// nested ParallelFor on the same pool runs inline instead of deadlocking.
thread_local const ThreadPool* t_pool = nullptr;
thread_local int t_worker = 0;

inline void CpuPause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spins until done() or kSpinMicros have passed; returns done().
template <typename Done>
bool SpinUntil(Done done) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      CpuPause();
    }
    if (std::chrono::steady_clock::now() - t0 > std::chrono::microseconds(kSpinMicros)) {
      return done();
    }
  }
}

struct InTask {
  const ThreadPool* saved_pool;
  int saved_worker;
  InTask(const ThreadPool* p, int w) : saved_pool(t_pool), saved_worker(t_worker) {
    t_pool = p;
    t_worker = w;
  }
  ~InTask() {
    t_pool = saved_pool;
    t_worker = saved_worker;
  }
};
}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::thread::hardware_concurrency());
    if (num_threads <= 0) num_threads = 1;
  }
  num_workers_ = num_threads;
  for (int w = 1; w < num_workers_; ++w) {
    threads_.emplace_back([this, w] { WorkerLoop(w); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::RunTasks(int worker) {
  InTask in_task(this, worker);
  for (;;) {
    const int64_t t = next_.fetch_add(1, std::memory_order_relaxed);
    if (t >= num_tasks_) break;
    (*fn_)(t, worker);
  }
}

void ThreadPool::WorkerLoop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    if (!SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lock(mu_);
      // seq_cst pairs with the caller's generation increment and sleepers_
      // load: either the predicate sees the new generation or the caller
      // sees a sleeper and notifies under mu_ (no lost wake-up).
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_start_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      if (stop_) return;
    }
    seen = generation_.load(std::memory_order_acquire);
    RunTasks(worker);
    if (active_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      // Last one out and the caller stopped spinning: it set the flag under
      // mu_ before its predicate check, so notifying under mu_ cannot be lost.
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(
    int64_t num_tasks, const std::function<void(int64_t, int)>& fn) {
  if (num_tasks <= 0) return;
  if (t_pool == this) {  // nested call from one of our own tasks: run inline
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, t_worker);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  if (num_workers_ == 1 || num_tasks == 1) {
    InTask in_task(this, 0);
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  // Every worker finished the previous call (active_ was 0, acquired), so
  // nobody reads these now; the generation increment publishes them.
  fn_ = &fn;
  num_tasks_ = num_tasks;
  next_.store(0, std::memory_order_relaxed);
  active_.store(num_workers_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_start_.notify_all();
  }
  RunTasks(0);
  if (!SpinUntil([&] { return active_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    cv_done_.wait(lock, [&] { return active_.load(std::memory_order_seq_cst) == 0; });
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
}

ThreadPool& DefaultPool() {
  static ThreadPool* pool = [] {
    int n = 0;
    if (const char* env = std::getenv("ATTNFLOW_NUM_THREADS")) n = std::atoi(env);
    return new ThreadPool(n);
  }();
  return *pool;
}

}  // namespace attnflow
