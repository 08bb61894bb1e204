// nn_positions_test.cc — position schemes: hand-computed values and the
// mathematical identities they must satisfy (sinusoidal and RoPE relative
// position identities, decode offsets, T5 buckets). Expected values are
// formulas evaluated here by hand or properties, never the code under test.
#include <gtest/gtest.h>

#include <cmath>

#include "attnflow/nn.h"
#include "util/test_util.h"

namespace attnflow::nn {
namespace {
using attnflow::testing::At;
using attnflow::testing::MaxAbsDiff;
using attnflow::testing::Random;
using attnflow::testing::Zeros;

Tensor Table(int64_t L, int64_t d, int64_t offset, SinusoidalLayout layout, double base = 10000) {
  Tensor t = Zeros(DType::kF64, {L, d});
  SinusoidalOptions o;
  o.layout = layout;
  o.base = base;
  Status st = SinusoidalTable(t.view(), offset, o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return t;
}

TEST(Sinusoidal, HandValues) {
  Tensor t = Table(3, 4, 0, SinusoidalLayout::kInterleaved);
  // Position 0: sin 0 = 0, cos 0 = 1.
  EXPECT_EQ(At(t, 0, 0), 0.0);
  EXPECT_EQ(At(t, 0, 1), 1.0);
  // Position 2, i = 0: ω = 1; i = 1: ω = 10000^(-2/4) = 0.01.
  EXPECT_NEAR(At(t, 2, 0), std::sin(2.0), 1e-15);
  EXPECT_NEAR(At(t, 2, 1), std::cos(2.0), 1e-15);
  EXPECT_NEAR(At(t, 2, 2), std::sin(0.02), 1e-15);
  EXPECT_NEAR(At(t, 2, 3), std::cos(0.02), 1e-15);
}

TEST(Sinusoidal, OffsetRowsEqualLaterRows) {
  Tensor full = Table(10, 8, 0, SinusoidalLayout::kInterleaved);
  Tensor tail = Table(4, 8, 6, SinusoidalLayout::kInterleaved);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 8; ++c) EXPECT_EQ(At(tail, r, c), At(full, 6 + r, c));
}

TEST(Sinusoidal, RelativeIdentities) {
  // PE(p+k) is a rotation of PE(p) by k·ω_i in every (sin, cos) pair, so
  // <PE(p), PE(p+k)> = Σ_i cos(k·ω_i) depends on k only.
  const int64_t d = 16;
  Tensor t = Table(40, d, 0, SinusoidalLayout::kInterleaved);
  for (int k = 0; k < 8; ++k) {
    double expect = 0;
    for (int i = 0; i < d / 2; ++i) expect += std::cos(k * std::pow(10000.0, -2.0 * i / d));
    for (int p = 0; p + k < 40; p += 5) {
      double dot = 0;
      for (int c = 0; c < d; ++c) dot += At(t, p, c) * At(t, p + k, c);
      EXPECT_NEAR(dot, expect, 1e-12) << "p=" << p << " k=" << k;
      for (int i = 0; i < d / 2; ++i) {
        const double w = std::pow(10000.0, -2.0 * i / d);
        const double s = At(t, p, 2 * i), c = At(t, p, 2 * i + 1);
        EXPECT_NEAR(At(t, p + k, 2 * i), s * std::cos(k * w) + c * std::sin(k * w), 1e-12);
        EXPECT_NEAR(At(t, p + k, 2 * i + 1), c * std::cos(k * w) - s * std::sin(k * w), 1e-12);
      }
    }
  }
}

TEST(Sinusoidal, ConcatIsAPermutationOfInterleaved) {
  Tensor a = Table(7, 10, 2, SinusoidalLayout::kInterleaved);
  Tensor b = Table(7, 10, 2, SinusoidalLayout::kConcat);
  for (int r = 0; r < 7; ++r)
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(At(b, r, i), At(a, r, 2 * i));
      EXPECT_EQ(At(b, r, 5 + i), At(a, r, 2 * i + 1));
    }
}

TEST(Sinusoidal, OddDimAndErrors) {
  Tensor t = Table(2, 5, 1, SinusoidalLayout::kInterleaved);
  EXPECT_NEAR(At(t, 0, 4), std::sin(std::pow(10000.0, -4.0 / 5)), 1e-15);
  Tensor bad = Zeros(DType::kF64, {2, 5});
  SinusoidalOptions o;
  o.layout = SinusoidalLayout::kConcat;
  Status st = SinusoidalTable(bad.view(), 0, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("even"), std::string::npos) << st.message();
  EXPECT_EQ(SinusoidalTable(bad.view(), -1).code(), StatusCode::kOutOfRange);
  o = {};
  o.base = 0;
  EXPECT_EQ(SinusoidalTable(bad.view(), 0, o).code(), StatusCode::kInvalidArgument);
  Tensor r3 = Zeros(DType::kF64, {1, 2, 5});
  EXPECT_EQ(SinusoidalTable(r3.view(), 0).code(), StatusCode::kInvalidArgument);
}

TEST(LearnedPositions, DecodeOffsetMatchesFullSequence) {
  Tensor x = Random({2, 6, 4}, 1), table = Random({8, 4}, 2);
  Tensor full = Zeros(DType::kF64, {2, 6, 4});
  ASSERT_TRUE(AddPositions(full.view(), x.view(), table.view(), TensorView(), 0, 2.0).ok());
  // Hand check of one element: x·2 + table[l].
  EXPECT_NEAR(At(full, 1, 3, 2), 2 * At(x, 1, 3, 2) + At(table, 3, 2), 1e-12);
  // Last two tokens alone at offset 4 (decode).
  Tensor xt = Zeros(DType::kF32, {2, 2, 4});
  for (int b = 0; b < 2; ++b)
    for (int l = 0; l < 2; ++l)
      for (int e = 0; e < 4; ++e) xt.view().store(xt.view().offset(b, l, e), At(x, b, 4 + l, e));
  Tensor tail = Zeros(DType::kF64, {2, 2, 4});
  ASSERT_TRUE(AddPositions(tail.view(), xt.view(), table.view(), TensorView(), 4, 2.0).ok());
  for (int b = 0; b < 2; ++b)
    for (int l = 0; l < 2; ++l)
      for (int e = 0; e < 4; ++e) EXPECT_EQ(At(tail, b, l, e), At(full, b, 4 + l, e));
  // Past the table: out of range, naming the position.
  Status st = AddPositions(tail.view(), xt.view(), table.view(), TensorView(), 7, 1.0);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("position 8"), std::string::npos) << st.message();
}

TEST(Embed, LooksUpAndScales) {
  Tensor table = Random({5, 3}, 3);
  Tensor ids = Zeros(DType::kI64, {1, 2});
  ids.data<int64_t>()[0] = 4;
  ids.data<int64_t>()[1] = 0;
  Tensor out = Zeros(DType::kF64, {1, 2, 3});
  ASSERT_TRUE(Embed(out.view(), ids.view(), table.view(), 3.0).ok());
  EXPECT_DOUBLE_EQ(At(out, 0, 0, 1), 3.0 * At(table, 4, 1));
  EXPECT_DOUBLE_EQ(At(out, 0, 1, 2), 3.0 * At(table, 0, 2));
  ids.data<int64_t>()[1] = 5;
  Status st = Embed(out.view(), ids.view(), table.view(), 1.0);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("ids[0,1] = 5"), std::string::npos) << st.message();
}

// ---- RoPE ------------------------------------------------------------------

Tensor Rope(const Tensor& x, int64_t offset, const RopeOptions& o,
            const TensorView& pid = TensorView()) {
  Tensor out = Zeros(DType::kF64, x.shape());
  Status st = ApplyRope(out.view(), x.view(), pid, offset, o);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

double Dot(const Tensor& a, int64_t la, const Tensor& b, int64_t lb, int64_t D) {
  double s = 0;
  for (int64_t c = 0; c < D; ++c) s += At(a, 0, 0, la, c) * At(b, 0, 0, lb, c);
  return s;
}

TEST(Rope, HandValueTwoDims) {
  // D = 2: θ_0 = 1, position 1 rotates [1, 0] to [cos 1, sin 1].
  Tensor x = Zeros(DType::kF64, {1, 1, 2, 2});
  x.data<double>()[0] = 1;
  x.data<double>()[2] = 1;
  Tensor y = Rope(x, 0, {});
  EXPECT_EQ(At(y, 0, 0, 0, 0), 1.0);  // position 0: identity
  EXPECT_EQ(At(y, 0, 0, 0, 1), 0.0);
  EXPECT_NEAR(At(y, 0, 0, 1, 0), std::cos(1.0), 1e-15);
  EXPECT_NEAR(At(y, 0, 0, 1, 1), std::sin(1.0), 1e-15);
}

TEST(Rope, DotDependsOnlyOnRelativePosition) {
  // Same q (k) vector placed at every position: <R_m q, R_n k> = f(m − n).
  for (RopeLayout layout : {RopeLayout::kHalf, RopeLayout::kInterleaved}) {
    for (RopeScaling sc : {RopeScaling::kNone, RopeScaling::kLinear, RopeScaling::kNtk}) {
      RopeOptions o;
      o.layout = layout;
      o.scaling = sc;
      o.factor = 2.0;
      o.theta = 500.0;
      const int64_t L = 12, D = 8;
      Tensor q1 = Random({1, 1, 1, D}, 7), k1 = Random({1, 1, 1, D}, 8);
      Tensor q = Zeros(DType::kF64, {1, 1, L, D}), k = Zeros(DType::kF64, {1, 1, L, D});
      for (int l = 0; l < L; ++l)
        for (int c = 0; c < D; ++c) {
          q.data<double>()[l * D + c] = At(q1, 0, 0, 0, c);
          k.data<double>()[l * D + c] = At(k1, 0, 0, 0, c);
        }
      Tensor qr = Rope(q, 0, o), kr = Rope(k, 0, o);
      for (int m = 0; m < L; ++m)
        for (int n = 0; n < L; ++n) {
          const int s = 3;
          if (m + s >= L || n + s >= L) continue;
          EXPECT_NEAR(Dot(qr, m, kr, n, D), Dot(qr, m + s, kr, n + s, D), 1e-12)
              << RopeLayoutName(layout) << " " << RopeScalingName(sc) << " m=" << m << " n=" << n;
        }
      // Rotations preserve norms.
      for (int l = 0; l < L; ++l) EXPECT_NEAR(Dot(qr, l, qr, l, D), Dot(q, l, q, l, D), 1e-12);
    }
  }
}

TEST(Rope, OffsetMakesCachedKeysAgreeWithNewQueries) {
  // Rotating 7 positions at once equals rotating 4 then 3 at offset 4, and
  // equals explicit position ids.
  RopeOptions o;
  Tensor x = Random({2, 3, 7, 8}, 11, 1.0, DType::kF64);
  Tensor full = Rope(x, 0, o);
  Tensor tail_in = Zeros(DType::kF64, {2, 3, 3, 8});
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 3; ++h)
      for (int l = 0; l < 3; ++l)
        for (int c = 0; c < 8; ++c)
          tail_in.view().store(tail_in.view().offset(b, h, l, c), At(x, b, h, 4 + l, c));
  Tensor tail = Rope(tail_in, 4, o);
  Tensor pid = Zeros(DType::kI64, {2, 3});
  for (int b = 0; b < 2; ++b)
    for (int l = 0; l < 3; ++l) pid.data<int64_t>()[b * 3 + l] = 4 + l;
  Tensor tail_ids = Rope(tail_in, 0, o, pid.view());
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 3; ++h)
      for (int l = 0; l < 3; ++l)
        for (int c = 0; c < 8; ++c) {
          EXPECT_EQ(At(tail, b, h, l, c), At(full, b, h, 4 + l, c));
          EXPECT_EQ(At(tail_ids, b, h, l, c), At(full, b, h, 4 + l, c));
        }
}

TEST(Rope, LayoutsArePermutationsOfEachOther) {
  // interleaved(P x) = P half(x), P: c -> 2c, c + r/2 -> 2c + 1.
  const int64_t D = 8, h = D / 2;
  Tensor x = Random({1, 1, 5, D}, 5, 1.0, DType::kF64);
  Tensor px = Zeros(DType::kF64, {1, 1, 5, D});
  for (int l = 0; l < 5; ++l)
    for (int c = 0; c < h; ++c) {
      px.data<double>()[l * D + 2 * c] = At(x, 0, 0, l, c);
      px.data<double>()[l * D + 2 * c + 1] = At(x, 0, 0, l, h + c);
    }
  RopeOptions half, inter;
  inter.layout = RopeLayout::kInterleaved;
  Tensor a = Rope(x, 2, half), b = Rope(px, 2, inter);
  for (int l = 0; l < 5; ++l)
    for (int c = 0; c < h; ++c) {
      EXPECT_NEAR(At(b, 0, 0, l, 2 * c), At(a, 0, 0, l, c), 1e-15);
      EXPECT_NEAR(At(b, 0, 0, l, 2 * c + 1), At(a, 0, 0, l, h + c), 1e-15);
    }
}

TEST(Rope, PartialRotaryPassesTheRestThrough) {
  RopeOptions o;
  o.rotary_dim = 4;
  Tensor x = Random({1, 2, 3, 10}, 9, 1.0, DType::kF64);
  Tensor y = Rope(x, 5, o);
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 3; ++l)
      for (int c = 4; c < 10; ++c) EXPECT_EQ(At(y, 0, h, l, c), At(x, 0, h, l, c));
}

TEST(Rope, ScalingFrequencies) {
  std::vector<double> f;
  RopeOptions o;
  o.theta = 10000;
  ASSERT_TRUE(RopeInvFreq(&f, 8, o, 0).ok());
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[1], std::pow(10000.0, -2.0 / 8), 1e-18);
  // Static NTK: base' = base·f^(r/(r−2)).
  o.scaling = RopeScaling::kNtk;
  o.factor = 4;
  ASSERT_TRUE(RopeInvFreq(&f, 8, o, 0).ok());
  const double base = 10000 * std::pow(4.0, 8.0 / 6.0);
  EXPECT_NEAR(f[3], std::pow(base, -6.0 / 8), 1e-15);
  // Dynamic NTK: unchanged up to max_positions, then HF's formula.
  o.scaling = RopeScaling::kDynamicNtk;
  o.max_positions = 16;
  ASSERT_TRUE(RopeInvFreq(&f, 8, o, 16).ok());
  EXPECT_NEAR(f[1], std::pow(10000.0, -2.0 / 8), 1e-18);
  ASSERT_TRUE(RopeInvFreq(&f, 8, o, 32).ok());
  const double dyn = 10000 * std::pow(4.0 * 32 / 16 - 3.0, 8.0 / 6.0);
  EXPECT_NEAR(f[1], std::pow(dyn, -2.0 / 8), 1e-15);
  // Linear: position p with factor 2 equals position p/2 unscaled.
  RopeOptions lin;
  lin.scaling = RopeScaling::kLinear;
  lin.factor = 2;
  Tensor x = Random({1, 1, 1, 6}, 3, 1.0, DType::kF64);
  EXPECT_LT(MaxAbsDiff(Rope(x, 6, lin).view(), Rope(x, 3, {}).view()), 1e-15);
}

TEST(Rope, Errors) {
  Tensor x = Random({1, 1, 2, 6}, 1, 1.0, DType::kF64);
  Tensor out = Zeros(DType::kF64, {1, 1, 2, 6});
  RopeOptions o;
  o.rotary_dim = 3;
  Status st = ApplyRope(out.view(), x.view(), TensorView(), 0, o);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rotary_dim 3"), std::string::npos) << st.message();
  o.rotary_dim = 8;
  EXPECT_EQ(ApplyRope(out.view(), x.view(), TensorView(), 0, o).code(), StatusCode::kInvalidArgument);
  Tensor odd = Random({1, 1, 2, 5}, 1, 1.0, DType::kF64);
  Tensor oo = Zeros(DType::kF64, {1, 1, 2, 5});
  EXPECT_EQ(ApplyRope(oo.view(), odd.view(), TensorView(), 0, {}).code(), StatusCode::kInvalidArgument);
  Tensor wrong = Zeros(DType::kF64, {1, 1, 3, 6});
  st = ApplyRope(wrong.view(), x.view(), TensorView(), 0, {});
  EXPECT_NE(st.message().find("out"), std::string::npos) << st.message();
}

// ---- T5 ----------------------------------------------------------------------

TEST(T5, BucketsHandComputed) {
  T5BiasOptions bi;  // 32 buckets, max 128: 16 per direction, 8 exact.
  EXPECT_EQ(T5RelativeBucket(0, bi), 0);
  EXPECT_EQ(T5RelativeBucket(-1, bi), 1);
  EXPECT_EQ(T5RelativeBucket(1, bi), 17);
  EXPECT_EQ(T5RelativeBucket(-7, bi), 7);
  EXPECT_EQ(T5RelativeBucket(-8, bi), 8);    // 8 + floor(log(1)/log(16)·8)
  EXPECT_EQ(T5RelativeBucket(-16, bi), 10);  // 8 + floor(log 2/log 16·8) = 8 + 2
  EXPECT_EQ(T5RelativeBucket(-127, bi), 15);
  EXPECT_EQ(T5RelativeBucket(-5000, bi), 15);
  EXPECT_EQ(T5RelativeBucket(5000, bi), 31);
  T5BiasOptions uni;
  uni.bidirectional = false;  // 32 buckets, 16 exact
  EXPECT_EQ(T5RelativeBucket(3, uni), 0);  // future positions share bucket 0
  EXPECT_EQ(T5RelativeBucket(-15, uni), 15);
  // 16 + floor(log(20/16)/log(128/16)·16) = 16 + floor(1.716) = 17
  EXPECT_EQ(T5RelativeBucket(-20, uni), 17);
}

TEST(T5, BiasWithQueryOffsetIsTheLastRows) {
  Tensor table = Random({16, 3}, 4);
  T5BiasOptions o;
  o.num_buckets = 16;
  o.max_distance = 40;
  o.bidirectional = false;
  Tensor full = Zeros(DType::kF64, {3, 20, 20});
  Tensor tail = Zeros(DType::kF64, {3, 2, 20});
  Tensor buckets = Zeros(DType::kI64, {2, 20});
  ASSERT_TRUE(T5Bias(full.view(), TensorView(), table.view(), 0, o).ok());
  ASSERT_TRUE(T5Bias(tail.view(), buckets.view(), table.view(), 18, o).ok());
  for (int h = 0; h < 3; ++h)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 20; ++j) EXPECT_EQ(At(tail, h, i, j), At(full, h, 18 + i, j));
  EXPECT_EQ(buckets.data<int64_t>()[0 * 20 + 18], 0);  // rel 0
  EXPECT_EQ(buckets.data<int64_t>()[1 * 20 + 15], 4);  // rel −4
  EXPECT_EQ(At(tail, 2, 1, 15), At(table, 4, 2));
  Tensor bad = Random({15, 3}, 4);
  EXPECT_EQ(T5Bias(tail.view(), TensorView(), bad.view(), 0, o).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace attnflow::nn
