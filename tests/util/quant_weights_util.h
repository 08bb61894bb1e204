// quant_weights_util.h — GGUF-quantised weight matrices for the ops tests
// (qdot_int8_test, qmatmul_quant_test): the raw rows, the rows DequantizeRow
// makes of them (the tests' float64 references start there) and the
// ops::QMatrix over the raw bytes. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "attnflow/gguf.h"
#include "attnflow/ops.h"
#include "attnflow/rng.h"

namespace attnflow::testing {

struct QuantWeights {
  std::vector<uint8_t> raw;
  std::vector<float> deq;
  ops::QMatrix w;
};

// rows x cols weights of `type`. By default rows of Normal values (scale
// 0.02..0.1 by row, every third row offset by 0.01) through QuantizeRow; with
// random_bytes the quant bytes are uniformly random (every nibble / high-bit
// pattern) with the scale fields set to sane F16 values (Q8_0, Q4_0, Q4_1,
// Q5_0, Q4_K, Q6_K only).
inline QuantWeights MakeQuantWeights(GgmlType type, int64_t rows, int64_t cols, uint64_t seed,
                                     bool random_bytes = false) {
  QuantWeights m;
  Rng rng(seed);
  int64_t rb = 0;
  EXPECT_TRUE(GgmlRowBytes(type, cols, &rb));
  m.raw.resize(static_cast<size_t>(rb * rows));
  m.deq.resize(static_cast<size_t>(rows * cols));
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = m.raw.data() + r * rb;
    if (random_bytes) {
      const int64_t be = type == GgmlType::kQ4_K || type == GgmlType::kQ6_K ? 256 : 32;
      const int64_t bb = rb / (cols / be);
      for (int64_t i = 0; i < rb; ++i) row[i] = static_cast<uint8_t>(rng.Next() >> 56);
      for (int64_t b = 0; b < cols / be; ++b) {
        uint8_t* blk = row + b * bb;
        // F16 0.0123 (0x224C) and 0.0061 (0x1E3F) as d / m / dmin.
        auto put = [](uint8_t* p, uint16_t h) { std::memcpy(p, &h, 2); };
        if (type == GgmlType::kQ6_K) {
          put(blk + 208, 0x224C);
        } else {
          put(blk, 0x224C);
          if (type == GgmlType::kQ4_1 || type == GgmlType::kQ4_K) put(blk + 2, 0x1E3F);
        }
      }
    } else {
      const double scale = 0.02 * (1 + r % 5);
      for (auto& v : x) v = static_cast<float>(rng.Normal(0.0, scale) + (r % 3 == 0 ? 0.01 : 0.0));
      EXPECT_TRUE(QuantizeRow(row, x.data(), type, cols).ok());
    }
    EXPECT_TRUE(DequantizeRow(m.deq.data() + r * cols, row, type, cols).ok());
  }
  m.w = ops::QMatrix{type, m.raw.data(), rows, cols, rb, "w"};
  return m;
}

}  // namespace attnflow::testing
