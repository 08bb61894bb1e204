// attention_bench.cc — Google Benchmark timings of attnflow::Attention.
//
// Counters: GFLOPs = useful GFLOP/s (4*B*H*D per visible (query, key) pair:
// non-causal Lq*Lk pairs, causal only the visible ones), GBs = K/V bytes read
// per second (decode), ms = milliseconds per call. Threads: ATTNFLOW_BENCH_THREADS
// (default 2). Run with --benchmark_repetitions=N to get the median and the
// "min" (best time) / "max" (best rate) aggregates added below.
//
//   ./attention_bench --benchmark_filter=Prefill --benchmark_repetitions=5
//   ./attention_bench --benchmark_filter=PrefillRss   (alone: peak RSS counter)
#include <benchmark/benchmark.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/bench.h"
#include "attnflow/kernels.h"
#include "attnflow/rng.h"
#include "attnflow/tensor.h"
#include "attnflow/threading.h"

namespace attnflow {
namespace {

ThreadPool& BenchPool() {
  static ThreadPool* pool = [] {
    int n = 2;
    if (const char* e = std::getenv("ATTNFLOW_BENCH_THREADS")) n = std::atoi(e);
    return new ThreadPool(n);
  }();
  return *pool;
}

Tensor Fill(DType t, const Shape& s, uint64_t seed) {
  Tensor x = std::move(Tensor::Zeros(t, s)).value();
  Rng rng(seed);
  auto u = [&rng] { return static_cast<float>(rng.Uniform(-1.0, 1.0)); };
  const int64_t n = x.numel();
  if (t == DType::kF32) {
    float* p = x.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = u();
  } else {
    uint16_t* p = x.data<uint16_t>();
    for (int64_t i = 0; i < n; ++i) {
      const float f = u();
      p[i] = t == DType::kF16 ? F32ToF16(f) : F32ToBF16(f);
    }
  }
  return x;
}

double VisiblePairs(int64_t lq, int64_t lk, bool causal) {
  if (!causal) return static_cast<double>(lq) * static_cast<double>(lk);
  double pairs = 0;  // bottom-right: row i sees min(Lk, i + Lk - Lq + 1) keys
  for (int64_t i = 0; i < lq; ++i) pairs += static_cast<double>(std::clamp<int64_t>(i + lk - lq + 1, 0, lk));
  return pairs;
}

double ProcessCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The machine is shared: besides wall-clock rates, report the rate per
// CPU-second of this process (all threads), i.e. what one dedicated core
// achieves; on an idle machine wall-clock GFLOP/s ~= threads x this.
void AddCpuRate(benchmark::State& state, const char* name, double amount,
                double cpu_seconds) {
  state.counters[name] = amount * static_cast<double>(state.iterations()) / cpu_seconds;
}

void AddMin(benchmark::internal::Benchmark* b) {
  // Statistics apply to times and counters alike: read the best time from
  // "min" and the best rate (GFLOPs, GBs) from "max".
  b->ComputeStatistics("min", [](const std::vector<double>& v) {
    return *std::min_element(v.begin(), v.end());
  });
  b->ComputeStatistics("max", [](const std::vector<double>& v) {
    return *std::max_element(v.begin(), v.end());
  });
  b->UseRealTime();
  b->Unit(benchmark::kMillisecond);
}

// args: L, D, causal, kv dtype (0 F32, 1 F16, 2 BF16)
void BM_Prefill(benchmark::State& state) {
  const int64_t L = state.range(0), D = state.range(1), H = 8, B = 1;
  const bool causal = state.range(2) != 0;
  const DType kv = state.range(3) == 0 ? DType::kF32 : state.range(3) == 1 ? DType::kF16 : DType::kBF16;
  Tensor q = Fill(DType::kF32, {B, H, L, D}, 1);
  Tensor k = Fill(kv, {B, H, L, D}, 2);
  Tensor v = Fill(kv, {B, H, L, D}, 3);
  Tensor out = std::move(Tensor::Zeros(DType::kF32, {B, H, L, D})).value();
  SdpaOptions opt;
  opt.causal = causal ? Causal::kBottomRight : Causal::kNone;
  KernelOptions kopt;
  kopt.pool = &BenchPool();
  KernelChoice choice;
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) {
    const Status st = Attention(out.view(), TensorView(), q.view(), k.view(), v.view(), opt, kopt, &choice);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  const double cpu = ProcessCpuSeconds() - cpu0;
  const double flops = 4.0 * B * H * D * VisiblePairs(L, L, causal);
  state.counters["GFLOPs"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  AddCpuRate(state, "GFLOPs_core", flops * 1e-9, cpu);
  state.SetLabel(choice.ToString().substr(0, 60));
}

// args: Lkv, D, kv dtype
void BM_Decode(benchmark::State& state) {
  const int64_t Lk = state.range(0), D = state.range(1), H = 8, B = 1;
  const DType kv = state.range(2) == 0 ? DType::kF32 : state.range(2) == 1 ? DType::kF16 : DType::kBF16;
  Tensor q = Fill(DType::kF32, {B, H, 1, D}, 1);
  Tensor k = Fill(kv, {B, H, Lk, D}, 2);
  Tensor v = Fill(kv, {B, H, Lk, D}, 3);
  Tensor out = std::move(Tensor::Zeros(DType::kF32, {B, H, 1, D})).value();
  SdpaOptions opt;
  opt.causal = Causal::kBottomRight;
  KernelOptions kopt;
  kopt.pool = &BenchPool();
  KernelChoice choice;
  const double cpu0 = ProcessCpuSeconds();
  for (auto _ : state) {
    const Status st = Attention(out.view(), TensorView(), q.view(), k.view(), v.view(), opt, kopt, &choice);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  const double cpu = ProcessCpuSeconds() - cpu0;
  const double bytes = static_cast<double>(k.nbytes() + v.nbytes());
  state.counters["GBs"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  AddCpuRate(state, "GBs_core", bytes * 1e-9, cpu);
  state.SetLabel(choice.ToString().substr(0, 60));
}

// Streaming-read bandwidth of the same bytes (the decode roofline): sums the
// K and V buffers with the same thread pool (AVX2 when available so that the
// loop itself is never the bottleneck).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) float SumAvx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(p + i + 24));
  }
  float t[8];
  _mm256_storeu_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0;
  for (float x : t) s += x;
  for (; i < n; ++i) s += p[i];
  return s;
}
#endif

float SumFloats(const float* p, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) return SumAvx2(p, n);
#endif
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
  float s = 0;
  for (float x : acc) s += x;
  for (; i < n; ++i) s += p[i];
  return s;
}

void BM_ReadBandwidth(benchmark::State& state) {
  const int64_t Lk = state.range(0), D = state.range(1), H = 8;
  Tensor k = Fill(DType::kF32, {1, H, Lk, D}, 2);
  Tensor v = Fill(DType::kF32, {1, H, Lk, D}, 3);
  ThreadPool& pool = BenchPool();
  const int64_t chunks = 64;
  const int64_t n = k.numel();
  std::vector<float> partial(static_cast<size_t>(chunks));
  for (auto _ : state) {
    pool.ParallelFor(chunks, [&](int64_t c, int) {
      const int64_t b = n * c / chunks, e = n * (c + 1) / chunks;
      partial[static_cast<size_t>(c)] =
          SumFloats(k.data<float>() + b, e - b) + SumFloats(v.data<float>() + b, e - b);
    });
    benchmark::DoNotOptimize(partial.data());
  }
  const double bytes = static_cast<double>(k.nbytes() + v.nbytes());
  state.counters["GBs"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Peak RSS of a large non-causal prefill (run alone: the figure is the
// whole process's, PeakRssSinceExecBytes).
void BM_PrefillRss(benchmark::State& state) {
  const int64_t L = state.range(0), D = 64, H = 8;
  Tensor q = Fill(DType::kF32, {1, H, L, D}, 1);
  Tensor k = Fill(DType::kF32, {1, H, L, D}, 2);
  Tensor v = Fill(DType::kF32, {1, H, L, D}, 3);
  Tensor out = std::move(Tensor::Zeros(DType::kF32, {1, H, L, D})).value();
  std::memset(out.data<float>(), 0, out.nbytes());
  KernelOptions kopt;
  kopt.pool = &BenchPool();
  for (auto _ : state) {
    const Status st = Attention(out.view(), TensorView(), q.view(), k.view(), v.view(), {}, kopt);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  const double rss_mib = static_cast<double>(PeakRssSinceExecBytes()) / (1 << 20);
  const double in_out_mib = 4.0 * static_cast<double>(q.nbytes()) / (1 << 20);
  state.counters["rss_MiB"] = rss_mib;
  state.counters["in_out_MiB"] = in_out_mib;
  state.counters["over_MiB"] = rss_mib - in_out_mib;
  state.counters["GFLOPs"] = benchmark::Counter(4.0 * H * D * static_cast<double>(L) * L * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Prefill)
    ->ArgNames({"L", "D", "causal", "kv"})
    ->Args({1024, 64, 0, 0})->Args({1024, 128, 0, 0})
    ->Args({4096, 64, 0, 0})->Args({4096, 128, 0, 0})
    ->Args({4096, 64, 1, 0})->Args({4096, 128, 1, 0})
    ->Args({1024, 64, 0, 1})->Args({4096, 64, 0, 1})->Args({4096, 128, 0, 1})
    ->Args({4096, 64, 1, 1})->Args({4096, 128, 1, 1})
    ->Args({4096, 64, 0, 2})
    ->Apply(AddMin);
BENCHMARK(BM_Decode)
    ->ArgNames({"Lkv", "D", "kv"})
    ->Args({4096, 64, 0})->Args({4096, 128, 0})
    ->Args({4096, 64, 1})->Args({4096, 128, 1})
    ->Args({131072, 64, 0})->Args({131072, 128, 0})->Args({131072, 64, 1})
    ->Apply(AddMin);
BENCHMARK(BM_ReadBandwidth)->ArgNames({"Lkv", "D"})->Args({4096, 64})->Args({131072, 64})->Args({131072, 128})->Apply(AddMin);
BENCHMARK(BM_PrefillRss)->ArgNames({"L"})->Arg(65536)->Iterations(1)->Unit(benchmark::kSecond)->UseRealTime();

}  // namespace
}  // namespace attnflow
