// gemm_bench.cc — Google Benchmark timings of ops::Linear at the shapes of
// all-MiniLM-L6-v2 (E = 384, F = 1536), for the small row counts of batch-1
// sentence embedding (M = tokens of one sentence) and the large ones of
// batched embedding.
//
//  * Stack/M: the 24 GEMMs of the 6 encoder layers (QKV [1152,384] + bias,
//    O [384,384] + bias + residual, FFN1 [1536,384] + bias + GELU, FFN2
//    [384,1536] + bias + residual), each layer with its own weights (42 MB in
//    all, more than the last-level cache: batch 1 streams them like the
//    model does).
//  * StackArena/M: the same with all 24 weights in one ops::PackArena (2 MiB
//    pages where the kernel has transparent huge pages; the MiniLM loader's
//    layout), to compare with Stack/M in one run.
//  * Linear/M/n/k: one warm GEMM (weights stay in cache).
//
// Counters: GFLOPs (2·M·n·k per GEMM, from the median time), pct_peak (of the
// fp32 FMA peak measured at start with the same pool, MeasurePeakGflops), ms.
// Threads: ATTNFLOW_BENCH_THREADS (default 2). Inputs come from attnflow/rng.h.
//
//   ./gemm_bench --benchmark_filter=Stack --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "attnflow/bench.h"
#include "attnflow/ops.h"
#include "attnflow/rng.h"
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

double Peak() {
  static double peak = MeasurePeakGflops(BenchPool());
  return peak;
}

std::vector<float> Random(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = static_cast<float>(rng.Uniform(-0.1, 0.1));
  return v;
}

ops::PackedMatrix PackRandom(int64_t n, int64_t k, uint64_t seed,
                             ops::PackArena* arena = nullptr) {
  std::vector<float> w = Random(n * k, seed);
  return std::move(ops::PackedMatrix::Pack(w.data(), k, n, k, arena)).value();
}

constexpr int64_t kE = 384, kF = 1536, kLayers = 6;

struct Layer {
  ops::PackedMatrix qkv, o, f1, f2;
  std::vector<float> b_qkv, b_o, b_1, b_2;
};

// arena: every matrix in one ops::PackArena (2 MiB pages, as the MiniLM
// loader does) instead of one allocation each (4 KiB pages).
std::vector<Layer> MakeLayers(ops::PackArena* arena) {
  if (arena != nullptr) {
    size_t total = 0;
    for (auto [n, k] : {std::pair{3 * kE, kE}, {kE, kE}, {kF, kE}, {kE, kF}})
      total += (ops::PackedMatrix::PackedBytes(n, k) + 63) / 64 * 64;
    if (!arena->Reserve(total * kLayers).ok()) std::abort();
  }
  std::vector<Layer> v(kLayers);
  uint64_t seed = 10;
  for (Layer& l : v) {
    l.qkv = PackRandom(3 * kE, kE, ++seed, arena);
    l.o = PackRandom(kE, kE, ++seed, arena);
    l.f1 = PackRandom(kF, kE, ++seed, arena);
    l.f2 = PackRandom(kE, kF, ++seed, arena);
      l.b_qkv = Random(3 * kE, ++seed);
      l.b_o = Random(kE, ++seed);
      l.b_1 = Random(kF, ++seed);
      l.b_2 = Random(kE, ++seed);
  }
  return v;
}

const std::vector<Layer>& Layers(bool arena) {
  static ops::PackArena* storage = new ops::PackArena;
  static std::vector<Layer>* plain = new std::vector<Layer>(MakeLayers(nullptr));
  static std::vector<Layer>* in_arena = new std::vector<Layer>(MakeLayers(storage));
  return arena ? *in_arena : *plain;
}

void Finish(benchmark::State& state, double flops_per_iter) {
  state.counters["GFLOPs"] = benchmark::Counter(flops_per_iter * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_GFLOPs"] = Peak();
}

void StackBench(benchmark::State& state, bool arena) {
  const int64_t m = state.range(0);
  const auto& layers = Layers(arena);
  std::vector<float> x = Random(m * kE, 1), tmp(static_cast<size_t>(m * kE)),
                     qkv(static_cast<size_t>(m * 3 * kE)), ffn(static_cast<size_t>(m * kF));
  ThreadPool& pool = BenchPool();
  Peak();
  for (auto _ : state) {
    for (const Layer& l : layers) {
      ops::Linear(qkv.data(), 3 * kE, x.data(), kE, l.qkv, {.bias = l.b_qkv.data()}, m, pool);
      // The attention output is stood in for by the Q third of QKV.
      ops::Linear(tmp.data(), kE, qkv.data(), 3 * kE, l.o,
                  {.bias = l.b_o.data(), .residual = x.data(), .ld_residual = kE}, m, pool);
      ops::Linear(ffn.data(), kF, tmp.data(), kE, l.f1,
                  {.bias = l.b_1.data(), .act = ops::Activation::kGeluErf}, m, pool);
      ops::Linear(x.data(), kE, ffn.data(), kF, l.f2,
                  {.bias = l.b_2.data(), .residual = tmp.data(), .ld_residual = kE}, m, pool);
      // Keep values bounded (no LayerNorm here): scale back.
      for (float& f : x) f *= 0.5f;
    }
    benchmark::DoNotOptimize(x.data());
  }
  const double flops = 2.0 * m * kLayers * (3 * kE * kE + kE * kE + 2 * kF * kE);
  Finish(state, flops);
}

void BM_Stack(benchmark::State& state) { StackBench(state, false); }
void BM_StackArena(benchmark::State& state) { StackBench(state, true); }

void BM_Linear(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  ops::PackedMatrix w = PackRandom(n, k, 3);
  std::vector<float> x = Random(m * k, 4), b = Random(n, 5), y(static_cast<size_t>(m * n));
  ThreadPool& pool = BenchPool();
  Peak();
  for (auto _ : state) {
    ops::Linear(y.data(), n, x.data(), k, w, {.bias = b.data()}, m, pool);
    benchmark::DoNotOptimize(y.data());
  }
  Finish(state, 2.0 * m * n * k);
}

void Stats(benchmark::internal::Benchmark* b) {
  b->ComputeStatistics("min", [](const std::vector<double>& v) {
    return *std::min_element(v.begin(), v.end());
  });
  b->ComputeStatistics("max", [](const std::vector<double>& v) {
    return *std::max_element(v.begin(), v.end());
  });
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_Stack)->Apply(Stats)->Arg(1)->Arg(3)->Arg(8)->Arg(12)->Arg(17)->Arg(24)->Arg(32)
    ->Arg(48)->Arg(64)->Arg(256);
BENCHMARK(BM_StackArena)->Apply(Stats)->Arg(1)->Arg(17)->Arg(64);
BENCHMARK(BM_Linear)->Apply(Stats)->ArgsProduct({{1, 17, 64}, {384}, {384, 1536}})
    ->ArgsProduct({{1, 17, 64}, {1152, 1536}, {384}});

}  // namespace
}  // namespace attnflow
