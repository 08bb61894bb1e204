// bench_test.cc — the benchmark harness (BenchAttention) counts what
// attnflow/bench.h says it counts. Expected values are closed forms of the
// shape (no timing is checked: timings are not test material).
#include "attnflow/bench.h"
#include "gtest/gtest.h"

namespace attnflow {
namespace {

TEST(BenchAttention, CountsVisiblePairsAndKvBytesFromTheShape) {
  ThreadPool pool(2);
  AttentionBenchSpec s;
  s.batch = 2, s.num_heads = 4, s.num_kv_heads = 2, s.q_len = 9, s.kv_len = 9, s.head_dim = 8;
  s.repeat = 2, s.warmup = 0;
  Result<AttentionBenchResult> r = BenchAttention(s, pool);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // Non-causal: 4·B·H·Lq·Lk·D; K and V of every key once: B·Hkv·Lk·2D·4 bytes.
  EXPECT_EQ(r->flops, 4.0 * 2 * 4 * 9 * 9 * 8);
  EXPECT_EQ(r->kv_bytes, 2.0 * 2 * 9 * 2 * 8 * 4);
  EXPECT_GT(r->median_s, 0);
  EXPECT_LE(r->min_s, r->median_s);
  // Causal (square): the lower triangle, L(L+1)/2 pairs per head.
  s.causal = Causal::kTopLeft;
  s.kv_dtype = DType::kF16;
  r = BenchAttention(s, pool);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->flops, 2.0 * 16 * (9 * 10 / 2) * 2 * 4);
  EXPECT_EQ(r->kv_bytes, 2.0 * 2 * 9 * 2 * 8 * 2);  // F16: half the bytes
  // A decode step over the last 5 keys of a window sees 5 keys.
  s.causal = Causal::kBottomRight;
  s.q_len = 1;
  s.window_left = 4;
  s.window_right = 0;
  s.kv_dtype = DType::kF32;
  r = BenchAttention(s, pool);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->flops, 2.0 * 16 * 5 * 2 * 4);
  EXPECT_EQ(r->kv_bytes, 2.0 * 2 * 5 * 2 * 8 * 4);
}

TEST(BenchAttention, ColdCachesFlushBeforeEveryTimedCallAndRead) {
  ThreadPool pool(2);
  AttentionBenchSpec s;
  s.num_heads = 2, s.num_kv_heads = 2, s.q_len = 1, s.kv_len = 64, s.head_dim = 16;
  s.repeat = 2, s.warmup = 0;
  s.measure_read = true;
  Result<AttentionBenchResult> r = BenchAttention(s, pool);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flushes, 0);  // warm by default
  EXPECT_EQ(r->flush_bytes, 0);
  EXPECT_GT(r->read_median_s, 0);
  // The flush is larger than any cache this process can see, and at least
  // 256 MiB (rounded down to whole chunks per worker: 64 floats each).
  EXPECT_GE(ColdFlushBytes(), int64_t{256} << 20);
  s.cold = true;
  r = BenchAttention(s, pool);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->flushes, 2 * s.repeat);  // one before each call, one before each read
  EXPECT_LE(r->flush_bytes, static_cast<double>(ColdFlushBytes()));
  EXPECT_GT(r->flush_bytes, static_cast<double>(ColdFlushBytes()) - 2 * 64 * 4);
  EXPECT_GT(r->read_median_s, 0);
  EXPECT_EQ(r->kv_bytes, 2.0 * 64 * 2 * 16 * 4);  // the counts do not change
  s.measure_read = false;  // prefill-style: one flush per timed call
  r = BenchAttention(s, pool);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->flushes, s.repeat);
  EXPECT_EQ(r->read_median_s, 0);
}

TEST(BenchAttention, BadShapesAreErrorsNamingTheShapes) {
  ThreadPool pool(1);
  AttentionBenchSpec s;
  s.num_heads = 3, s.num_kv_heads = 2;  // not a GQA multiple
  s.q_len = 4, s.kv_len = 4, s.repeat = 1, s.warmup = 0;
  Result<AttentionBenchResult> r = BenchAttention(s, pool);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[1,3,4,64]"), std::string::npos) << r.status().message();
}

// kv_dtype I8: the int8 KV cache decode. Bytes: 1 per K/V element of every
// visible position plus 2 float scales per (sequence, kv head); FLOPs as for
// the float caches (2·(D + Dv) per visible pair).
TEST(BenchAttention, Int8CacheCountsItsOwnBytes) {
  ThreadPool pool(2);
  AttentionBenchSpec s;
  s.batch = 2, s.num_heads = 4, s.num_kv_heads = 2, s.q_len = 1, s.kv_len = 300, s.head_dim = 24;
  s.kv_dtype = DType::kI8;
  s.repeat = 2, s.warmup = 0;
  s.measure_read = true;
  Result<AttentionBenchResult> r = BenchAttention(s, pool);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kernel, "int8_kv_decode");
  EXPECT_EQ(r->kv_bytes, 2.0 * 2 * (300 * 48 + 8));
  EXPECT_EQ(r->flops, 2.0 * 48 * 300 * 2 * 4);
  EXPECT_GT(r->read_median_s, 0);
  EXPECT_NE(r->explain.find("int8_kv_decode"), std::string::npos) << r->explain;
  // A window of the last 5 positions.
  s.window_left = 4;
  s.causal = Causal::kBottomRight;
  r = BenchAttention(s, pool);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kv_bytes, 2.0 * 2 * (5 * 48 + 8));
  EXPECT_EQ(r->flops, 2.0 * 48 * 5 * 2 * 4);
  // One query per sequence only; the error names the shape.
  s.q_len = 3;
  r = BenchAttention(s, pool);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("Lq=3"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace attnflow
