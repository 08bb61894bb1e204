// qdot_int8_test.cc — the opt-in fast dot (ops::QuantizeActsQ8 +
// ops::QMatVecRowsFast, `--fast-dot`; NOT exact), against independent
// references:
//  * QuantizeActsQ8: |q| <= 127, |x - d q| <= d/2 (plus one fp32 rounding),
//    the block's max |x| maps to +-127, all-zero blocks give d = 0, the sums
//    are the sums of q;
//  * every SIMD target (plus the fallback) equals the portable scalar oracle
//    QMatVecRowsFastRef bit for bit, on weights from QuantizeRow and on
//    random bytes (all nibble / high-bit patterns), for any row split;
//  * against a float64 dot of the DequantizeRow weights with the dequantised
//    int8 activations (a math property: the integer sums are exact, only the
//    fp32 scale products and the fixed-order fp32 sums round), relative to
//    sum |w xq|;
//  * against the float64 dot with the unquantised activations within the
//    int8 step bound sum_b (d_b / 2) sum_{k in b} |w_k| (+ the fp32 margin);
//  * types without an integer dot fall back to the exact QMatVecRows;
//  * the SIMD activation quantiser writes the bytes of QuantizeActsQ8Ref.
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "attnflow/gguf.h"
#include "attnflow/ops.h"
#include "attnflow/rng.h"
#include "gtest/gtest.h"
#include "util/quant_weights_util.h"
#include "util/simd_targets_util.h"

namespace attnflow {
namespace {

using testing::ForEachTarget;
using testing::MakeQuantWeights;
using testing::QuantWeights;

const GgmlType kFastTypes[] = {GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1,
                               GgmlType::kQ5_0, GgmlType::kQ4_K, GgmlType::kQ6_K};

// Activations with the features of a real decode vector: mostly small, a
// few outliers, one all-zero block, one block of equal magnitudes.
std::vector<float> Acts(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = static_cast<float>(rng.Normal(0.0, 1.0));
  for (int64_t i = 0; i < n; i += 97) x[static_cast<size_t>(i)] *= 20.0f;
  for (int64_t i = 64; i < 96 && i < n; ++i) x[static_cast<size_t>(i)] = 0.0f;
  for (int64_t i = 128; i < 160 && i < n; ++i) x[static_cast<size_t>(i)] = (i % 2 ? 0.5f : -0.5f);
  return x;
}

// Activations with their Q8 quantisation and a scratch row for the dots.
struct ActsQ8 {
  std::vector<float> x;
  ops::Q8Acts a;
  std::vector<float> tmp;
};

ActsQ8 QuantizedActs(int64_t n, uint64_t seed) {
  ActsQ8 r{Acts(n, seed), {}, std::vector<float>(static_cast<size_t>(n))};
  ops::QuantizeActsQ8(&r.a, r.x.data(), n);
  return r;
}

TEST(QDotInt8, QuantizeActsQ8Properties) {
  const int64_t n = 1024;
  const std::vector<float> x = Acts(n, 3);
  ops::Q8Acts a;
  ops::QuantizeActsQ8(&a, x.data(), n);
  ASSERT_EQ(a.n, n);
  for (int64_t b = 0; b < n / 32; ++b) {
    double amax = 0;
    bool hit = false;
    const float d = a.d[static_cast<size_t>(b)];
    for (int64_t e = 0; e < 32; ++e) {
      const size_t i = static_cast<size_t>(b * 32 + e);
      amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
      ASSERT_LE(std::abs(a.q[i]), 127);
      // |x - d q| <= d/2 up to the rounding of x / d (one fp32 step).
      ASSERT_LE(std::fabs(static_cast<double>(x[i]) - static_cast<double>(d) * a.q[i]),
                0.5 * d * (1 + 1e-5) + 1e-30) << "block " << b << " elem " << e;
      if (std::abs(a.q[i]) == 127 && std::fabs(x[i]) == amax) hit = true;
    }
    // Each group of 4's sum, in both forms (int32 negated, float).
    for (int64_t j = 0; j < 8; ++j) {
      const size_t i = static_cast<size_t>(b * 32 + 4 * j), g = static_cast<size_t>(b * 8 + j);
      const int s4 = a.q[i] + a.q[i + 1] + a.q[i + 2] + a.q[i + 3];
      EXPECT_EQ(a.x4n[g], -s4) << "block " << b << " group " << j;
      EXPECT_EQ(a.x4f[g], static_cast<float>(s4)) << "block " << b << " group " << j;
    }
    if (amax == 0) {
      EXPECT_EQ(d, 0.0f);
    } else {
      EXPECT_NEAR(d, amax / 127.0, amax / 127.0 * 1e-6);
    }
    // The largest |x| of the block maps to +-127 (recomputed after the loop
    // since amax grows inside it).
    if (amax > 0 && !hit) {
      bool found = false;
      for (int64_t e = 0; e < 32; ++e) {
        const size_t i = static_cast<size_t>(b * 32 + e);
        if (std::fabs(x[i]) == amax) found = std::abs(a.q[i]) == 127;
      }
      EXPECT_TRUE(found) << "block " << b;
    }
  }
}

TEST(QDotInt8, EveryTargetEqualsTheScalarOracle) {
  // 37 rows: two 16-row batches of the AVX-512 lane reduction and a tail;
  // the split (5 + 32) puts the batches at other row offsets. 800 columns
  // (25 blocks, an odd number of pairs: the 32-element types only) take the
  // AVX2 code on every x86 target from AVX2 up, AVX-512 ones included.
  const int64_t rows = 37;
  for (int64_t cols : {768, 800}) {
    for (GgmlType type : kFastTypes) {
      if (cols % 256 != 0 && (type == GgmlType::kQ4_K || type == GgmlType::kQ6_K)) continue;
      auto [x, a, tmp] = QuantizedActs(cols, 5);
      for (bool random_bytes : {false, true}) {
        SCOPED_TRACE(std::string(GgmlTypeName(static_cast<uint32_t>(type))) + (random_bytes ? " random bytes" : " quantised") +
                     ", " + std::to_string(cols) + " columns");
        ASSERT_TRUE(ops::QFastDotSupported(type));
        QuantWeights m =
            MakeQuantWeights(type, rows, cols, 7 + static_cast<uint64_t>(type), random_bytes);
        std::vector<float> want(static_cast<size_t>(rows));
        ops::QMatVecRowsFastRef(want.data(), m.w, 0, rows, a);
        ForEachTarget([&] {
          std::vector<float> all(static_cast<size_t>(rows)), split(static_cast<size_t>(rows));
          ops::QMatVecRowsFast(all.data(), m.w, 0, rows, a, x.data(), tmp.data());
          // Another split of the rows (as work stealing makes) changes nothing.
          ops::QMatVecRowsFast(split.data(), m.w, 0, 5, a, x.data(), tmp.data());
          ops::QMatVecRowsFast(split.data() + 5, m.w, 5, rows - 5, a, x.data(), tmp.data());
          EXPECT_EQ(std::memcmp(all.data(), want.data(), all.size() * 4), 0);
          EXPECT_EQ(std::memcmp(split.data(), want.data(), split.size() * 4), 0);
          for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(all[static_cast<size_t>(r)], want[static_cast<size_t>(r)]) << r;
        });
      }
    }
  }
}

// The SIMD quantiser (every target; AVX-512 has one) writes the bytes of the
// scalar definition QuantizeActsQ8Ref: q, d (NaN for a non-finite block),
// the sums and quad sums. Blocks with exact rounding ties (amax = 127 makes
// d = 1, so x = k + 0.5 is a tie), -0.0, subnormals, huge values, all-zero
// blocks and NaN / +-inf at several positions.
TEST(QDotInt8, VectorQuantizerEqualsTheScalarDefinition) {
  const int64_t n = 32 * 24;
  std::vector<float> x = Acts(n, 21);
  for (int e = 0; e < 32; ++e) x[static_cast<size_t>(192 + e)] = e == 7 ? 127.0f : static_cast<float>(e) - 15.5f;
  for (int e = 0; e < 32; ++e) x[static_cast<size_t>(224 + e)] = e % 3 ? -0.0f : 1e-41f * static_cast<float>(e);
  for (int e = 0; e < 32; ++e) x[static_cast<size_t>(256 + e)] = (e % 2 ? -3e37f : 2e38f) / static_cast<float>(e + 1);
  x[300] = std::numeric_limits<float>::quiet_NaN();
  x[352] = std::numeric_limits<float>::infinity();
  x[415] = -std::numeric_limits<float>::infinity();
  x[450] = std::numeric_limits<float>::quiet_NaN();
  x[451] = std::numeric_limits<float>::infinity();
  ops::Q8Acts want;
  ops::QuantizeActsQ8Ref(&want, x.data(), n);
  ForEachTarget([&] {
    ops::Q8Acts got;
    ops::QuantizeActsQ8(&got, x.data(), n);
    ASSERT_EQ(got.n, n);
    EXPECT_EQ(std::memcmp(got.q.data(), want.q.data(), static_cast<size_t>(n)), 0);
    EXPECT_EQ(std::memcmp(got.d.data(), want.d.data(), want.d.size() * 4), 0);
    EXPECT_EQ(got.x4n, want.x4n);
    EXPECT_EQ(std::memcmp(got.x4f.data(), want.x4f.data(), want.x4f.size() * 4), 0);
    for (size_t b = 0; b < want.d.size(); ++b) ASSERT_EQ(std::isnan(got.d[b]), std::isnan(want.d[b])) << b;
  });
  // The ties round to even (a property, not the code): block 6 = 192..223.
  EXPECT_EQ(want.d[6], 1.0f);
  EXPECT_EQ(want.q[192 + 0], -16);  // -15.5 -> -16
  EXPECT_EQ(want.q[192 + 1], -14);  // -14.5 -> -14
  EXPECT_TRUE(std::isnan(want.d[300 / 32]) && std::isnan(want.d[352 / 32]) && std::isnan(want.d[415 / 32]));
}

// IEEE propagation, as in the exact dot: a NaN or an infinity in the
// activations never turns into a finite int8 value, so every row's fast dot
// is non-finite on every target.
TEST(QDotInt8, NonFiniteActivationsGiveNonFiniteDots) {
  const int64_t rows = 7, cols = 256;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> x = Acts(cols, 13);
    x[100] = bad;
    ops::Q8Acts a;
    ops::QuantizeActsQ8(&a, x.data(), cols);
    EXPECT_TRUE(std::isnan(a.d[100 / 32])) << bad;
    std::vector<float> tmp(static_cast<size_t>(cols));
    for (GgmlType type : kFastTypes) {
      SCOPED_TRACE(std::string(GgmlTypeName(static_cast<uint32_t>(type))) + " " + std::to_string(bad));
      QuantWeights m = MakeQuantWeights(type, rows, cols, 31 + static_cast<uint64_t>(type));
      std::vector<float> ref(static_cast<size_t>(rows));
      ops::QMatVecRowsFastRef(ref.data(), m.w, 0, rows, a);
      for (float v : ref) EXPECT_FALSE(std::isfinite(v));
      ForEachTarget([&] {
        std::vector<float> y(static_cast<size_t>(rows));
        ops::QMatVecRowsFast(y.data(), m.w, 0, rows, a, x.data(), tmp.data());
        for (float v : y) EXPECT_FALSE(std::isfinite(v));
      });
    }
  }
}

TEST(QDotInt8, MatchesFloat64DotWithinTheInt8StepBound) {
  const int64_t rows = 24, cols = 1536;
  auto [x, a, tmp] = QuantizedActs(cols, 9);
  const double eps = std::ldexp(1.0, -24);
  for (GgmlType type : kFastTypes) {
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    QuantWeights m = MakeQuantWeights(type, rows, cols, 21 + static_cast<uint64_t>(type));
    std::vector<float> y(static_cast<size_t>(rows));
    ops::QMatVecRowsFast(y.data(), m.w, 0, rows, a, x.data(), tmp.data());
    double worst_q = 0, worst_x = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* w = m.deq.data() + r * cols;
      double dq = 0, dx = 0, mag = 0, step = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const double xq = static_cast<double>(a.d[static_cast<size_t>(k / 32)]) * a.q[static_cast<size_t>(k)];
        dq += static_cast<double>(w[k]) * xq;
        dx += static_cast<double>(w[k]) * x[static_cast<size_t>(k)];
        mag += std::fabs(static_cast<double>(w[k]) * xq);
        step += 0.5 * a.d[static_cast<size_t>(k / 32)] * (1 + 1e-5) * std::fabs(static_cast<double>(w[k]));
      }
      // fp32: each scale product, the weight dequantisation and each of the
      // cols/64 + 4 fma / add steps on a lane chain round by at most eps
      // relative to the magnitudes summed; 4x margin.
      const double tol_q = 4.0 * (cols / 64 + 8) * eps * mag;
      const double ey = std::fabs(static_cast<double>(y[static_cast<size_t>(r)]) - dq);
      ASSERT_LE(ey, tol_q) << "row " << r << " vs w . dequant(xq)";
      ASSERT_LE(std::fabs(static_cast<double>(y[static_cast<size_t>(r)]) - dx), step + tol_q) << "row " << r << " vs w . x";
      worst_q = std::max(worst_q, ey / (mag > 0 ? mag : 1));
      worst_x = std::max(worst_x, std::fabs(static_cast<double>(y[static_cast<size_t>(r)]) - dx) / (step > 0 ? step : 1));
    }
    std::printf("[ %s ] max |y - w.xq| / sum|w xq| = %.3g; max |y - w.x| / int8 step bound = %.3g\n",
                GgmlTypeName(static_cast<uint32_t>(type)), worst_q, worst_x);
  }
}

// QFastDotHasSimd (the CLI warns when it is false) is true exactly on the
// x86 targets from AVX2 up (AVX-512 VNNI, else AVX2 code), judged here from
// the target's name, not from the dispatch code.
TEST(QDotInt8, HasSimdOnAvx2AndNewerX86Targets) {
  const std::set<std::string> ran = ForEachTarget([&] {
    const std::string name = ops::TargetName();
    const bool avx2_up = name == "AVX2" || name.rfind("AVX3", 0) == 0 || name.rfind("AVX10", 0) == 0;
    EXPECT_EQ(ops::QFastDotHasSimd(), avx2_up) << name;
  });
  EXPECT_FALSE(ran.empty());
}

TEST(QDotInt8, OtherTypesFallBackToTheExactDot) {
  const int64_t rows = 7, cols = 256;
  auto [x, a, tmp] = QuantizedActs(cols, 13);
  for (GgmlType type : {GgmlType::kQ5_1, GgmlType::kQ5_K}) {
    SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
    EXPECT_FALSE(ops::QFastDotSupported(type));
    QuantWeights m = MakeQuantWeights(type, rows, cols, 3);
    std::vector<float> fast(static_cast<size_t>(rows)), exact(static_cast<size_t>(rows));
    ops::QMatVecRowsFast(fast.data(), m.w, 0, rows, a, x.data(), tmp.data());
    ops::QMatVecRows(exact.data(), m.w, 0, rows, x.data(), tmp.data());
    EXPECT_EQ(std::memcmp(fast.data(), exact.data(), fast.size() * 4), 0);
  }
}

}  // namespace
}  // namespace attnflow
