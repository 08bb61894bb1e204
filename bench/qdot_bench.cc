// qdot_bench.cc — Google Benchmark rates of the decode matrix-vector dots, one
// thread, per GGUF weight type: the exact dot (ops::QMatVecRows: fp32
// activations, weights dequantised on the fly) and the opt-in fast dot
// (ops::QMatVecRowsFast: int8 activations, integer dot products), with the
// weights in L2 (a ~230 KB matrix, the best case of the kernel's arithmetic)
// and streamed from DRAM (a ~100 MB matrix, as one decode step reads them).
//
// Shapes are SmolLM2-135M's: 576 columns for the 32-element types (Q5_0,
// Q8_0, Q4_1; its Q4_K_M file keeps its 576-column matrices at Q5_0/Q8_0),
// 1536 for the 256-element K types (ffn_down). Rows are quantised from
// Normal(0, 0.05) values (attnflow/rng.h, then QuantizeRow); 64 distinct rows
// are repeated, which changes nothing for the dot's speed.
//
// Counter GBps: weight bytes read per second (min time of the repetitions is
// the one to quote; compare rows of one run). SIMD target: the best this CPU
// has; ATTNFLOW_BENCH_TARGET=avx2 forces Highway's AVX2 target (the AVX2 fast
// dot), as on a CPU without AVX-512.
//
//   ./qdot_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "attnflow/gguf.h"
#include "attnflow/ops.h"
#include "attnflow/rng.h"
#include "hwy/targets.h"

namespace attnflow {
namespace {

void SelectTarget() {
  static const bool once = [] {
    const char* t = std::getenv("ATTNFLOW_BENCH_TARGET");
    if (t != nullptr && std::string(t) == "avx2") hwy::SetSupportedTargetsForTest(HWY_AVX2 | HWY_SCALAR | HWY_EMU128);
    return true;
  }();
  (void)once;
}

struct Matrix {
  std::vector<uint8_t> raw;
  ops::QMatrix w;
};

Matrix Make(GgmlType type, int64_t cols, int64_t bytes) {
  Matrix m;
  int64_t rb = 0;
  if (!GgmlRowBytes(type, cols, &rb)) std::abort();
  const int64_t rows = std::max<int64_t>(64, bytes / rb / 16 * 16);
  m.raw.resize(static_cast<size_t>(rows * rb));
  Rng rng(static_cast<uint64_t>(type) + 1);
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t r = 0; r < 64; ++r) {
    for (float& v : x) v = static_cast<float>(rng.Normal(0.0, 0.05));
    if (!QuantizeRow(m.raw.data() + r * rb, x.data(), type, cols).ok()) std::abort();
  }
  for (int64_t r = 64; r < rows; ++r) std::memcpy(m.raw.data() + r * rb, m.raw.data() + (r % 64) * rb, static_cast<size_t>(rb));
  m.w = ops::QMatrix{type, m.raw.data(), rows, cols, rb, "w"};
  return m;
}

// args: type, columns, fast (0/1), matrix bytes.
void BM_QDot(benchmark::State& state) {
  SelectTarget();
  const auto type = static_cast<GgmlType>(state.range(0));
  const int64_t cols = state.range(1);
  const bool fast = state.range(2) != 0;
  const Matrix m = Make(type, cols, state.range(3));
  Rng rng(7);
  std::vector<float> x(static_cast<size_t>(cols)), y(static_cast<size_t>(m.w.rows)), tmp(static_cast<size_t>(cols));
  for (float& v : x) v = static_cast<float>(rng.Normal(0.0, 1.0));
  ops::Q8Acts xq;
  ops::QuantizeActsQ8(&xq, x.data(), cols);
  constexpr int64_t kChunk = 64;  // rows per call, as the decode's chunks
  for (auto _ : state) {
    for (int64_t r = 0; r < m.w.rows; r += kChunk) {
      const int64_t nr = std::min(kChunk, m.w.rows - r);
      if (fast) {
        ops::QMatVecRowsFast(y.data() + r, m.w, r, nr, xq, x.data(), tmp.data());
      } else {
        ops::QMatVecRows(y.data() + r, m.w, r, nr, x.data(), tmp.data());
      }
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] = benchmark::Counter(static_cast<double>(m.raw.size()) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(GgmlTypeName(static_cast<uint32_t>(type))) + (fast ? " fast" : " exact") +
                 (state.range(3) > (int64_t{8} << 20) ? " DRAM" : " L2") + " " + ops::TargetName());
}

void Args(benchmark::internal::Benchmark* b) {
  const std::pair<GgmlType, int64_t> types[] = {{GgmlType::kQ5_0, 576}, {GgmlType::kQ8_0, 576},
                                                {GgmlType::kQ4_1, 576}, {GgmlType::kQ4_K, 1536},
                                                {GgmlType::kQ5_K, 1536}, {GgmlType::kQ6_K, 1536}};
  for (int64_t bytes : {int64_t{230} << 10, int64_t{100} << 20}) {
    for (const auto& [type, cols] : types) {
      for (int fast : {0, 1}) {
        if (fast && !ops::QFastDotSupported(type)) continue;
        b->Args({static_cast<int64_t>(type), cols, fast, bytes});
      }
    }
  }
}

BENCHMARK(BM_QDot)->Apply(Args)->UseRealTime()->MinTime(0.2);

}  // namespace
}  // namespace attnflow
