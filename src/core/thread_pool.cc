// thread_pool.cc — ParallelFor over a fixed set of workers (see threading.h).
//
// Invariants: every task of a call runs exactly once; a call returns only
// when all its tasks are done (it does not wait for idle workers to check
// in); a worker can claim a task only of the generation it is running, and
// reads fn_ only after such a claim. A worker that the system refuses to
// start ends the start-up with the workers started so far (ids 1..n stay
// contiguous); nothing is thrown out of the constructor, which would destroy
// joinable threads (std::terminate) or condition variables that started
// workers wait on (a hang in pthread_cond_destroy).
#include "attnflow/threading.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <new>
#include <string>
#include <system_error>

#include "core/thread_start.h"

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

internal::ThreadStarter g_starter = nullptr;
std::atomic<ThreadWarningHandler> g_warning_handler{nullptr};
std::atomic<bool> g_warned{false};

std::thread StartThread(std::function<void()> fn) {
  if (g_starter != nullptr) return g_starter(std::move(fn));
  return std::thread(std::move(fn));
}

// Reports `message` through the handler, once per process.
void WarnOnce(const std::string& message) {
  const ThreadWarningHandler h = g_warning_handler.load();
  if (h == nullptr || g_warned.exchange(true)) return;
  h(message);
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

namespace internal {
void SetThreadStarterForTesting(ThreadStarter starter) { g_starter = starter; }
}  // namespace internal

void SetThreadWarningHandler(ThreadWarningHandler handler) {
  g_warning_handler.store(handler);
  g_warned.store(false);
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::thread::hardware_concurrency());
    if (num_threads <= 0) num_threads = 1;
  }
  requested_workers_ = num_threads;
  const int target = std::min(num_threads, kMaxPoolThreads);
  std::string why;
  try {
    threads_.reserve(static_cast<size_t>(target - 1));
    for (int w = 1; w < target; ++w) {
      threads_.push_back(StartThread([this, w] { WorkerLoop(w); }));
    }
  } catch (const std::system_error& e) {
    why = e.code() == std::errc::resource_unavailable_try_again
              ? "the system refused another thread (EAGAIN: a process or thread limit such as "
                "ulimit -u or a container's pid limit, or no address space left for its stack "
                "under ulimit -v)"
              : std::string("the system refused another thread: ") + e.what();
  } catch (const std::bad_alloc&) {
    why = "out of memory while starting it";
  }
  num_workers_ = static_cast<int>(threads_.size()) + 1;
  if (num_workers_ < num_threads) {
    if (why.empty()) {
      why = "at most " + std::to_string(kMaxPoolThreads) + " threads per pool";
    }
    WarnOnce("asked for " + std::to_string(num_threads) + " threads, running with " +
             std::to_string(num_workers_) + ": " + why +
             "; results do not depend on the thread count");
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

void ThreadPool::RunTasks(int worker, uint64_t gen) {
  InTask in_task(this, worker);
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    // Claim the task `remaining - 1` of generation `gen`, or stop: a claim
    // is one CAS on the (generation, remaining) word, so a worker that
    // arrives late (its generation is over, the caller may already be in the
    // next call) can never take a task of another call.
    if ((s >> 32) != (gen & 0xffffffffu) || (s & 0xffffffffu) == 0) return;
    if (!state_.compare_exchange_weak(s, s - 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      continue;
    }
    (*fn_)(static_cast<int64_t>(s & 0xffffffffu) - 1, worker);
    if (pending_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      // Last task of the call and the caller stopped spinning: it set the
      // flag under mu_ before its predicate check, so notifying under mu_
      // cannot be lost (a stale notify into a later call is harmless: the
      // caller re-checks its predicate).
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_one();
    }
    s = state_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop(int worker) {
  uint64_t seen = 0;  // generation of the last call this worker looked at
  auto gen = [this](std::memory_order mo) { return state_.load(mo) >> 32; };
  for (;;) {
    if (!SpinUntil([&] { return gen(std::memory_order_acquire) != seen; })) {
      std::unique_lock<std::mutex> lock(mu_);
      // seq_cst pairs with the caller's state_ store and sleepers_ load:
      // either the predicate sees the new generation or the caller sees a
      // sleeper and notifies under mu_ (no lost wake-up).
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      cv_start_.wait(lock, [&] { return stop_ || gen(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      if (stop_) return;
    }
    seen = gen(std::memory_order_acquire);
    RunTasks(worker, seen);
  }
}

void ThreadPool::ParallelFor(
    int64_t num_tasks, const std::function<void(int64_t, int)>& fn) {
  if (num_tasks <= 0) return;
  if (t_pool == this) {  // nested call from one of our own tasks: run inline
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, t_worker);
    return;
  }
  constexpr int64_t kMaxRound = 0xffffffff;  // tasks per (generation, remaining) word
  if (num_tasks > kMaxRound) {
    for (int64_t t0 = 0; t0 < num_tasks; t0 += kMaxRound) {
      const std::function<void(int64_t, int)> part = [&fn, t0](int64_t t, int w) {
        fn(t0 + t, w);
      };
      ParallelFor(std::min(kMaxRound, num_tasks - t0), part);
    }
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  if (num_workers_ == 1 || num_tasks == 1) {
    InTask in_task(this, 0);
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  // The previous call's tasks are all done (pending_ was 0, acquired): no
  // task reads fn_ now, and a late worker reads it only after claiming a
  // task of the new generation (its CAS acquires the store below).
  fn_ = &fn;
  pending_.store(num_tasks, std::memory_order_relaxed);
  const uint64_t gen = ((state_.load(std::memory_order_relaxed) >> 32) + 1) & 0xffffffffu;
  state_.store((gen << 32) | static_cast<uint64_t>(num_tasks), std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_start_.notify_all();
  }
  RunTasks(0, gen);
  // Wait for the TASKS, not for the workers: a worker that has not woken up
  // yet (or was descheduled) has nothing left to do once every task is done,
  // and the caller need not wait for it to be scheduled.
  if (!SpinUntil([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_.store(true, std::memory_order_seq_cst);
    cv_done_.wait(lock, [&] { return pending_.load(std::memory_order_seq_cst) == 0; });
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
}

ThreadPool& DefaultPool() {
  static ThreadPool* pool = [] {
    int n = 0;
    if (const char* env = std::getenv("ATTNFLOW_NUM_THREADS"); env != nullptr && *env != 0) {
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(env, &end, 10);
      if (errno != 0 || end == env || *end != 0 || v < 0 || v > INT_MAX) {
        WarnOnce(std::string("ATTNFLOW_NUM_THREADS='") + env +
                 "' is not a whole number from 0 to " + std::to_string(INT_MAX) +
                 "; using the hardware concurrency");
      } else {
        n = static_cast<int>(v);
      }
    }
    return new ThreadPool(n);
  }();
  return *pool;
}

}  // namespace attnflow
