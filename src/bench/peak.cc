// peak.cc — built-in FMA peak and read-bandwidth loops (see attnflow/bench.h).
// Compiled once per Highway target; the best target is chosen at run time.
// Deliberately not core/hwy_targets.h: the peak loops measure the machine,
// so they use Highway's full target list (SVE included), not the kernels'.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace bench_impl {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Runs `iters` rounds of 12 independent FMA chains; returns a value that
// depends on every accumulator so nothing is optimised away. Flops =
// 2 * 12 * lanes * iters.
float FmaLoop(int64_t iters, float seed, int64_t* lanes_out) {
  const hn::ScalableTag<float> d;
  *lanes_out = static_cast<int64_t>(hn::Lanes(d));
  const auto m = hn::Set(d, 0.999999f);
  const auto a = hn::Set(d, 1e-7f * seed);
  auto v0 = hn::Set(d, seed), v1 = hn::Set(d, seed + 1), v2 = hn::Set(d, seed + 2),
       v3 = hn::Set(d, seed + 3), v4 = hn::Set(d, seed + 4), v5 = hn::Set(d, seed + 5),
       v6 = hn::Set(d, seed + 6), v7 = hn::Set(d, seed + 7), v8 = hn::Set(d, seed + 8),
       v9 = hn::Set(d, seed + 9), v10 = hn::Set(d, seed + 10), v11 = hn::Set(d, seed + 11);
  auto step = [&](auto& v) { v = hn::MulAdd(v, m, a); };
  for (int64_t i = 0; i < iters; ++i) {
    // 12 independent chains: enough to cover the FMA latency x throughput.
    step(v0), step(v1), step(v2), step(v3), step(v4), step(v5);
    step(v6), step(v7), step(v8), step(v9), step(v10), step(v11);
  }
  auto s = hn::Add(hn::Add(hn::Add(v0, v1), hn::Add(v2, v3)),
                   hn::Add(hn::Add(v4, v5), hn::Add(v6, v7)));
  s = hn::Add(s, hn::Add(hn::Add(v8, v9), hn::Add(v10, v11)));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

// Sums `n` floats (n a multiple of 4 vectors) with 4 accumulators.
float ReadLoop(const float* HWY_RESTRICT p, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::Add(s0, hn::LoadU(d, p + i));
    s1 = hn::Add(s1, hn::LoadU(d, p + i + N));
    s2 = hn::Add(s2, hn::LoadU(d, p + i + 2 * N));
    s3 = hn::Add(s3, hn::LoadU(d, p + i + 3 * N));
  }
  float tail = 0;
  for (; i < n; ++i) tail += p[i];
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)))) + tail;
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace bench_impl
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>
#include <string>

#include "attnflow/bench.h"
#include "attnflow/tensor.h"

namespace attnflow {
namespace bench_impl {
HWY_EXPORT(FmaLoop);
HWY_EXPORT(ReadLoop);
HWY_EXPORT(TargetName);
}  // namespace bench_impl

namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
std::atomic<float> g_sink{0};
}  // namespace

double MeasurePeakGflops(ThreadPool& pool, int repeats) {
  const int w = pool.NumWorkers();
  const int64_t iters = 20'000'000;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    std::vector<int64_t> lanes(w, 0);
    const double t0 = Now();
    pool.ParallelFor(w, [&](int64_t task, int) {
      int64_t l = 0;
      const float v = HWY_DYNAMIC_DISPATCH(bench_impl::FmaLoop)(iters, 1.0f + task, &l);
      lanes[task] = l;
      g_sink.store(v, std::memory_order_relaxed);
    });
    const double dt = Now() - t0;
    double flops = 0;
    for (int64_t l : lanes) flops += 2.0 * 12.0 * static_cast<double>(l) * iters;
    best = std::max(best, flops / dt * 1e-9);
  }
  return best;
}

double MeasureReadGBps(ThreadPool& pool, size_t bytes, int repeats) {
  Result<PlainReadBuffer> buf = PlainReadBuffer::Make(pool, static_cast<int64_t>(bytes), "read");
  if (!buf.ok()) return 0;
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    best = std::max(best, static_cast<double>(bytes) / buf->Read() * 1e-9);
  }
  return best;
}

int64_t PlainReadFloats(int64_t bytes, int workers) {
  const int64_t chunk = 64 * static_cast<int64_t>(std::max(workers, 1));
  return bytes / static_cast<int64_t>(sizeof(float)) / chunk * chunk;
}

Result<PlainReadBuffer> PlainReadBuffer::Make(ThreadPool& pool, int64_t bytes,
                                              const std::string& what) {
  const int w = pool.NumWorkers();
  const int64_t n = PlainReadFloats(bytes, w);
  if (n <= 0) {
    return InvalidArgument(what + " of " + std::to_string(bytes) + " bytes is less than one " +
                           std::to_string(64 * w * 4) + "-byte chunk per worker (" +
                           std::to_string(w) + " workers)");
  }
  PlainReadBuffer b(&pool, bytes, n);
  b.buf_ = static_cast<float*>(AlignedAlloc(static_cast<size_t>(n) * sizeof(float)));
  if (b.buf_ == nullptr) {
    return ResourceExhausted(what + ": cannot allocate " + std::to_string(n * 4) + " bytes");
  }
  float* buf = b.buf_;
  const int64_t per = n / w;
  // First touch by the worker that reads the chunk; fill with small values.
  pool.ParallelFor(w, [&](int64_t task, int) {
    for (int64_t i = task * per; i < (task + 1) * per; ++i) buf[i] = 1e-3f;
  });
  return b;
}

PlainReadBuffer::PlainReadBuffer(PlainReadBuffer&& o) noexcept
    : pool_(o.pool_), bytes_(o.bytes_), n_(o.n_), buf_(o.buf_) {
  o.buf_ = nullptr;
}

PlainReadBuffer& PlainReadBuffer::operator=(PlainReadBuffer&& o) noexcept {
  if (this != &o) {
    if (buf_ != nullptr) AlignedFree(buf_);
    pool_ = o.pool_, bytes_ = o.bytes_, n_ = o.n_, buf_ = o.buf_;
    o.buf_ = nullptr;
  }
  return *this;
}

PlainReadBuffer::~PlainReadBuffer() {
  if (buf_ != nullptr) AlignedFree(buf_);
}

double PlainReadBuffer::Read() const {
  return TimePlainRead(*pool_, buf_, n_) * static_cast<double>(bytes_) / buffer_bytes();
}

double TimePlainRead(ThreadPool& pool, const float* buf, int64_t n) {
  const int w = pool.NumWorkers();
  const int64_t per = n / w;
  const double t0 = Now();
  pool.ParallelFor(w, [&](int64_t task, int) {
    g_sink.store(HWY_DYNAMIC_DISPATCH(bench_impl::ReadLoop)(buf + task * per, per),
                 std::memory_order_relaxed);
  });
  return Now() - t0;
}

std::string PeakTargetName() { return HWY_DYNAMIC_DISPATCH(bench_impl::TargetName)(); }


}  // namespace attnflow
#endif  // HWY_ONCE
