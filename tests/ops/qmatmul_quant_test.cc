// qmatmul_quant_test.cc — ops::QMatMul on the GGUF types added for issue 14
// (Q5_0 Q5_1 Q4_K Q5_K Q6_K, plus Q4_0 and Q8_0 made by QuantizeRow):
//  * the weights each path (fused dot below 6 tokens, packed GEMM from 6)
//    dequantises on the fly equal DequantizeRow bit for bit (which equals
//    gguf-py, tests/io/gguf_quant_test.cc): with x = e_k (one-hot) every
//    output is exactly w[r][k], since w*1 + 0*w' sums are exact;
//  * y against a float64 dot over the DequantizeRow rows, relative to
//    sum |w x| (fp32 accumulation error bound, loose multiple);
//  * bit-identical results for 1, 2 and 7 threads, on every Highway target
//    this CPU runs (plus the fallback);
//  * a row's dot does not depend on how many rows one QMatVecRows call
//    covers: on AVX-512 the lanes of 16 rows are summed at once (LaneSum16,
//    ops/lane_sum_avx512-inl.h) and a call's remaining rows one by one
//    (LaneSum), and both must give the same bits.
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "attnflow/gguf.h"
#include "attnflow/ops.h"
#include "attnflow/rng.h"
#include "attnflow/threading.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "util/quant_weights_util.h"
#include "util/simd_targets_util.h"

namespace attnflow {
namespace {

using testing::ForEachTarget;
using testing::MakeQuantWeights;
using testing::QuantWeights;

const GgmlType kTypes[] = {GgmlType::kQ4_0, GgmlType::kQ8_0, GgmlType::kQ5_0, GgmlType::kQ5_1,
                           GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};

// On every Highway target, fn(type, weights) for each of `types` (traced by
// name) with rows x cols weights made from seed0 + the type's number.
template <typename Fn>
void ForEachTypeOnEveryTarget(std::span<const GgmlType> types, int64_t rows, int64_t cols,
                              uint64_t seed0, Fn fn) {
  ForEachTarget([&] {
    for (GgmlType type : types) {
      SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
      const QuantWeights m =
          MakeQuantWeights(type, rows, cols, seed0 + static_cast<uint64_t>(type));
      fn(type, m);
    }
  });
}

TEST(QMatMulQuant, OnTheFlyWeightsEqualDequantizeRowOnBothPaths) {
  const int64_t rows = 13, cols = 512;
  ForEachTypeOnEveryTarget(kTypes, rows, cols, 11, [&](GgmlType, const QuantWeights& m) {
    ThreadPool pool(2);
    ops::MatMulScratch scratch;
    // Columns probed: every position class inside a 256 block.
    for (int64_t T : {1, 8}) {
      for (int64_t k0 = 0; k0 < cols; k0 += 37) {
        std::vector<float> x(static_cast<size_t>(T * cols), 0.0f), y(static_cast<size_t>(T * rows));
        for (int64_t t = 0; t < T; ++t) x[static_cast<size_t>(t * cols + (k0 + 5 * t) % cols)] = 1.0f;
        ASSERT_TRUE(ops::QMatMul({{y.data(), rows, &m.w}}, x.data(), cols, T, pool, scratch).ok());
        for (int64_t t = 0; t < T; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const float want = m.deq[static_cast<size_t>(r * cols + (k0 + 5 * t) % cols)];
            const float got = y[static_cast<size_t>(t * rows + r)];
            ASSERT_EQ(std::memcmp(&got, &want, 4) == 0 || (got == 0 && want == 0), true)
                << "T=" << T << " row " << r << " col " << (k0 + 5 * t) % cols << ": " << got << " vs " << want;
          }
      }
    }
  });
}

TEST(QMatMulQuant, MatchesFloat64AndThreadCounts) {
  const int64_t rows = 45, cols = 768;
  ForEachTypeOnEveryTarget(kTypes, rows, cols, 100, [&](GgmlType, const QuantWeights& m) {
    for (int64_t T : {1, 3, 6, 17}) {
      Rng rng(static_cast<uint64_t>(T) + 77);
      std::vector<float> x(static_cast<size_t>(T * cols));
      for (auto& v : x) v = static_cast<float>(rng.Normal());
      std::vector<float> first;
      for (int threads : {1, 2, 7}) {
        ThreadPool pool(threads);
        ops::MatMulScratch scratch;
        std::vector<float> y(static_cast<size_t>(T * rows));
        ASSERT_TRUE(ops::QMatMul({{y.data(), rows, &m.w}}, x.data(), cols, T, pool, scratch).ok());
        double worst = 0;
        for (int64_t t = 0; t < T; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            double want = 0, mag = 0;
            for (int64_t c = 0; c < cols; ++c) {
              const double p = double(x[static_cast<size_t>(t * cols + c)]) * m.deq[static_cast<size_t>(r * cols + c)];
              want += p;
              mag += std::fabs(p);
            }
            worst = std::max(worst, std::fabs(y[static_cast<size_t>(t * rows + r)] - want) / (1e-6 * mag + 1e-7));
          }
        EXPECT_LE(worst, 1.0) << "T=" << T << " threads=" << threads;
        if (first.empty()) first = y;
        else EXPECT_TRUE(y == first) << "T=" << T << ": " << threads << " threads differ";
      }
    }
  });
}

TEST(QMatMulQuant, RowDotsDoNotDependOnTheRowsPerCall) {
  // 37 rows = two groups of 16 + 5 single rows; x of mixed signs and
  // magnitudes, so that a different order of the lane additions would show
  // in the low bits of many rows.
  const int64_t rows = 37, cols = 768;
  const GgmlType types[] = {GgmlType::kQ4_0, GgmlType::kQ4_1, GgmlType::kQ8_0, GgmlType::kQ5_0,
                            GgmlType::kQ5_1, GgmlType::kQ4_K, GgmlType::kQ5_K, GgmlType::kQ6_K};
  ForEachTypeOnEveryTarget(types, rows, cols, 300, [&](GgmlType, const QuantWeights& m) {
    Rng rng(5);
    std::vector<float> x(static_cast<size_t>(cols)), tmp(static_cast<size_t>(cols));
    for (size_t c = 0; c < x.size(); ++c) x[c] = static_cast<float>(rng.Normal() * (c % 7 == 0 ? 1e3 : 1.0));
    std::vector<float> all(static_cast<size_t>(rows)), one(static_cast<size_t>(rows));
    ops::QMatVecRows(all.data(), m.w, 0, rows, x.data(), tmp.data());
    for (int64_t r = 0; r < rows; ++r) ops::QMatVecRows(one.data() + r, m.w, r, 1, x.data(), tmp.data());
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(std::memcmp(&all[static_cast<size_t>(r)], &one[static_cast<size_t>(r)], 4), 0)
          << "row " << r << ": " << all[static_cast<size_t>(r)] << " (rows per call " << rows << ") vs "
          << one[static_cast<size_t>(r)] << " (one row)";
    }
  });
}

}  // namespace
}  // namespace attnflow
