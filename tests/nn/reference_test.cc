// reference_test.cc — properties of the float64 reference (the oracle) and of
// the shared semantics; every expected value is a mathematical property or a
// hand-computed number, never the code under test.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "util/test_util.h"

namespace attnflow {
namespace {
using testing::At;
using testing::MaxAbsDiff;
using testing::Random;
using testing::Zeros;

struct Run {
  Tensor out, lse;
  StageRecorder rec;
};

std::unique_ptr<Run> RunSdpa(const Tensor& q, const Tensor& k, const Tensor& v,
                             const SdpaOptions& opt) {
  auto r = std::make_unique<Run>();
  r->out = Zeros(DType::kF64, {q.shape()[0], q.shape()[1], q.shape()[2], v.shape()[3]});
  r->lse = Zeros(DType::kF64, {q.shape()[0], q.shape()[1], q.shape()[2]});
  Status st = reference::Sdpa(r->out.view(), r->lse.view(), q.view(), k.view(), v.view(), opt,
                              &r->rec);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

TEST(Semantics, CausalAlignmentHandChecked) {
  // Lq=2, Lk=4. top_left: row0 sees {0}, row1 sees {0,1}.
  EXPECT_TRUE(CausalAllows(Causal::kTopLeft, 0, 0, 2, 4));
  EXPECT_FALSE(CausalAllows(Causal::kTopLeft, 0, 1, 2, 4));
  EXPECT_TRUE(CausalAllows(Causal::kTopLeft, 1, 1, 2, 4));
  EXPECT_FALSE(CausalAllows(Causal::kTopLeft, 1, 2, 2, 4));
  // bottom_right: row0 sees {0,1,2}, row1 sees {0..3}.
  EXPECT_TRUE(CausalAllows(Causal::kBottomRight, 0, 2, 2, 4));
  EXPECT_FALSE(CausalAllows(Causal::kBottomRight, 0, 3, 2, 4));
  EXPECT_TRUE(CausalAllows(Causal::kBottomRight, 1, 3, 2, 4));
  // Lq=4 > Lk=2, bottom_right: rows 0,1 see nothing; row 2 sees {0}.
  EXPECT_FALSE(CausalAllows(Causal::kBottomRight, 1, 0, 4, 2));
  EXPECT_TRUE(CausalAllows(Causal::kBottomRight, 2, 0, 4, 2));
  EXPECT_FALSE(CausalAllows(Causal::kBottomRight, 2, 1, 4, 2));
  EXPECT_TRUE(CausalAllows(Causal::kNone, 0, 3, 2, 4));
}

TEST(Semantics, WindowHandChecked) {
  // Lq=Lk=10, row 5, window (2, 1): keys 3..6.
  KeyRange r = VisibleKeys(Causal::kNone, 2, 1, 5, 10, 10, 10);
  EXPECT_EQ(r.first, 3);
  EXPECT_EQ(r.last, 6);
  // Causal + left window 0: only the diagonal.
  r = VisibleKeys(Causal::kBottomRight, 0, -1, 5, 10, 10, 10);
  EXPECT_EQ(r.first, 5);
  EXPECT_EQ(r.last, 5);
  // Lq=2, Lk=6: diagonal of row 0 is key 4; window (1, 0): keys 3..4.
  r = VisibleKeys(Causal::kNone, 1, 0, 0, 2, 6, 6);
  EXPECT_EQ(r.first, 3);
  EXPECT_EQ(r.last, 4);
  // kv_len clamps.
  r = VisibleKeys(Causal::kNone, -1, -1, 0, 2, 6, 3);
  EXPECT_EQ(r.last, 2);
}

TEST(Semantics, GqaGrouping) {
  // H=8, Hkv=2: heads 0..3 -> 0, 4..7 -> 1 (repeat_interleave).
  for (int h = 0; h < 8; ++h) EXPECT_EQ(KvHeadFor(h, 8, 2), h / 4);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(KvHeadFor(h, 8, 1), 0);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(KvHeadFor(h, 8, 8), h);
}

TEST(Semantics, AlibiSlopesFromPaper) {
  double s8[8];
  AlibiSlopes(8, s8);
  for (int k = 0; k < 8; ++k) EXPECT_DOUBLE_EQ(s8[k], std::pow(2.0, -(k + 1)));
  // 6 heads: closest power of two 4 -> 2^-2, 2^-4, 2^-6, 2^-8; then the 8-head
  // sequence's entries 0 and 2: 2^-1, 2^-3.
  double s6[6];
  AlibiSlopes(6, s6);
  const double expect6[6] = {0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125};
  for (int k = 0; k < 6; ++k) EXPECT_DOUBLE_EQ(s6[k], expect6[k]);
  // bias = -slope * |d - j|
  EXPECT_DOUBLE_EQ(AlibiBias(0.5, 2, 0, 3, 3), -1.0);
  EXPECT_DOUBLE_EQ(AlibiBias(0.5, 0, 2, 3, 3), -1.0);
}

TEST(ReferenceSdpa, HandComputedTwoKeys) {
  // q=[1,0], k0=[1,0], k1=[0,1], scale 1: logits [1, 0];
  // weights [e/(e+1), 1/(e+1)], out = w0*v0 + w1*v1, lse = log(e+1).
  Tensor q = Zeros(DType::kF32, {1, 1, 1, 2});
  Tensor k = Zeros(DType::kF32, {1, 1, 2, 2});
  Tensor v = Zeros(DType::kF32, {1, 1, 2, 1});
  q.data<float>()[0] = 1;
  k.data<float>()[0] = 1;
  k.data<float>()[3] = 1;
  v.data<float>()[0] = 2;
  v.data<float>()[1] = -1;
  SdpaOptions opt;
  opt.scale = 1.0;
  auto r = RunSdpa(q, k, v, opt);
  const double e = std::exp(1.0);
  EXPECT_NEAR(At(r->out, 0, 0, 0, 0), 2 * e / (e + 1) - 1 / (e + 1), 1e-15);
  EXPECT_NEAR(At(r->lse, 0, 0, 0), std::log(e + 1), 1e-15);
}

TEST(ReferenceSdpa, RowsSumToOneAndDeadRowsToZero) {
  Tensor q = Random({2, 4, 7, 5}, 1), k = Random({2, 2, 9, 5}, 2), v = Random({2, 2, 9, 3}, 3);
  Tensor mask = testing::RandomBoolMask({7, 9}, 4, 0.6);
  for (int j = 0; j < 9; ++j) mask.data<uint8_t>()[3 * 9 + j] = 0;  // row 3 dead
  Tensor kvl = Zeros(DType::kI64, {2});
  kvl.data<int64_t>()[0] = 9;
  kvl.data<int64_t>()[1] = 4;
  SdpaOptions opt;
  opt.attn_mask = mask.view();
  opt.kv_lens = kvl.view();
  auto r = RunSdpa(q, k, v, opt);
  const Tensor* w = r->rec.Find("weights");
  ASSERT_NE(w, nullptr);
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 4; ++h)
      for (int i = 0; i < 7; ++i) {
        double sum = 0;
        for (int j = 0; j < 9; ++j) sum += At(*w, b, h, i, j);
        if (i == 3) {
          EXPECT_EQ(sum, 0.0);
          EXPECT_EQ(At(r->lse, b, h, i), -INFINITY);
          for (int c = 0; c < 3; ++c) EXPECT_EQ(At(r->out, b, h, i, c), 0.0);
        } else {
          bool any = false;
          for (int j = 0; j < (b == 0 ? 9 : 4); ++j) any |= mask.data<uint8_t>()[i * 9 + j] != 0;
          EXPECT_NEAR(sum, any ? 1.0 : 0.0, 1e-12) << b << h << i;
        }
        if (b == 1)
          for (int j = 4; j < 9; ++j) EXPECT_EQ(At(*w, b, h, i, j), 0.0);
      }
}

TEST(ReferenceSdpa, CausalFutureWeightsExactlyZero) {
  for (Causal c : {Causal::kTopLeft, Causal::kBottomRight}) {
    for (auto [lq, lk] : {std::pair{5, 9}, std::pair{9, 5}, std::pair{7, 7}}) {
      Tensor q = Random({1, 2, lq, 4}, 5), k = Random({1, 2, lk, 4}, 6), v = Random({1, 2, lk, 4}, 7);
      SdpaOptions opt;
      opt.causal = c;
      auto r = RunSdpa(q, k, v, opt);
      const Tensor* w = r->rec.Find("weights");
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < lq; ++i) {
          const int64_t last = c == Causal::kTopLeft ? i : i + lk - lq;
          double sum = 0;
          for (int j = 0; j < lk; ++j) {
            if (j > last) EXPECT_EQ(At(*w, 0, h, i, j), 0.0);
            sum += At(*w, 0, h, i, j);
          }
          EXPECT_NEAR(sum, last >= 0 ? 1.0 : 0.0, 1e-12);
        }
    }
  }
}

TEST(ReferenceSdpa, RowConstantShiftChangesNothing) {
  Tensor q = Random({1, 3, 6, 8}, 8), k = Random({1, 3, 10, 8}, 9), v = Random({1, 3, 10, 4}, 10);
  auto base = RunSdpa(q, k, v, {});
  // Float mask [1,3,6,1]: a different constant per (head,row), broadcast over keys.
  Tensor shift = Random({1, 3, 6, 1}, 11, 50.0);
  SdpaOptions opt;
  opt.attn_mask = shift.view();
  auto shifted = RunSdpa(q, k, v, opt);
  EXPECT_LT(MaxAbsDiff(base->out.view(), shifted->out.view()), 1e-12);
  EXPECT_LT(MaxAbsDiff(base->rec.Find("weights")->view(), shifted->rec.Find("weights")->view()),
            1e-12);
}

TEST(ReferenceSdpa, PermutingKeysAndValuesTogetherChangesNothing) {
  const int lk = 11;
  Tensor q = Random({2, 2, 5, 6}, 12), k = Random({2, 2, lk, 6}, 13), v = Random({2, 2, lk, 3}, 14);
  std::vector<int> perm(lk);
  std::iota(perm.begin(), perm.end(), 0);
  std::mt19937 g(3);
  std::shuffle(perm.begin(), perm.end(), g);
  Tensor kp = Zeros(DType::kF32, k.shape()), vp = Zeros(DType::kF32, v.shape());
  for (int b = 0; b < 2; ++b)
    for (int h = 0; h < 2; ++h)
      for (int j = 0; j < lk; ++j) {
        for (int c = 0; c < 6; ++c)
          kp.data<float>()[kp.view().offset(b, h, perm[j], c)] = k.data<float>()[k.view().offset(b, h, j, c)];
        for (int c = 0; c < 3; ++c)
          vp.data<float>()[vp.view().offset(b, h, perm[j], c)] = v.data<float>()[v.view().offset(b, h, j, c)];
      }
  auto a = RunSdpa(q, k, v, {});
  auto b = RunSdpa(q, kp, vp, {});
  EXPECT_LT(MaxAbsDiff(a->out.view(), b->out.view()), 1e-12);
  EXPECT_LT(MaxAbsDiff(a->lse.view(), b->lse.view()), 1e-12);
}

TEST(ReferenceSdpa, OutputIsLinearInV) {
  Tensor q = Random({1, 2, 4, 5}, 15), k = Random({1, 2, 7, 5}, 16);
  Tensor v1 = Random({1, 2, 7, 3}, 17, 1.0, DType::kF64), v2 = Random({1, 2, 7, 3}, 18, 1.0, DType::kF64);
  Tensor vs = Zeros(DType::kF64, {1, 2, 7, 3});
  for (int64_t i = 0; i < vs.numel(); ++i)
    vs.data<double>()[i] = 2.5 * v1.data<double>()[i] - 0.75 * v2.data<double>()[i];
  SdpaOptions opt;
  opt.causal = Causal::kBottomRight;
  auto a = RunSdpa(q, k, v1, opt), b = RunSdpa(q, k, v2, opt), c = RunSdpa(q, k, vs, opt);
  Tensor comb = Zeros(DType::kF64, a->out.shape());
  for (int64_t i = 0; i < comb.numel(); ++i)
    comb.data<double>()[i] = 2.5 * a->out.data<double>()[i] - 0.75 * b->out.data<double>()[i];
  EXPECT_LT(MaxAbsDiff(c->out.view(), comb.view()), 1e-12);
}

TEST(ReferenceSdpa, GqaEqualsExpandedKvHeads) {
  const int H = 6, Hkv = 2;
  Tensor q = Random({1, H, 5, 4}, 19), k = Random({1, Hkv, 8, 4}, 20), v = Random({1, Hkv, 8, 4}, 21);
  Tensor ke = Zeros(DType::kF32, {1, H, 8, 4}), ve = Zeros(DType::kF32, {1, H, 8, 4});
  for (int h = 0; h < H; ++h)  // repeat_interleave by hand
    for (int j = 0; j < 8; ++j)
      for (int c = 0; c < 4; ++c) {
        ke.data<float>()[(h * 8 + j) * 4 + c] = k.data<float>()[((h / 3) * 8 + j) * 4 + c];
        ve.data<float>()[(h * 8 + j) * 4 + c] = v.data<float>()[((h / 3) * 8 + j) * 4 + c];
      }
  auto a = RunSdpa(q, k, v, {}), b = RunSdpa(q, ke, ve, {});
  EXPECT_EQ(MaxAbsDiff(a->out.view(), b->out.view()), 0.0);
}

TEST(ReferenceSdpa, StridedBLHDViewEqualsContiguous) {
  // Storage [B,L,H,D] viewed as [B,H,L,D] without copying.
  const int B = 2, L = 6, H = 3, D = 4;
  Tensor qs = Random({B, L, H, D}, 22), ks = Random({B, L, H, D}, 23), vs = Random({B, L, H, D}, 24);
  TensorView qv = qs.view().Permuted({0, 2, 1, 3});
  TensorView kv = ks.view().Permuted({0, 2, 1, 3});
  TensorView vv = vs.view().Permuted({0, 2, 1, 3});
  Result<Tensor> qc = Tensor::FromView(qv), kc = Tensor::FromView(kv), vc = Tensor::FromView(vv);
  ASSERT_TRUE(qc.ok() && kc.ok() && vc.ok());
  EXPECT_EQ(qc->shape(), (Shape{B, H, L, D}));
  EXPECT_EQ(At(qc.value(), 1, 2, 3, 1), At(qs, 1, 3, 2, 1));
  Tensor o1 = Zeros(DType::kF64, {B, H, L, D});
  ASSERT_TRUE(reference::Sdpa(o1.view(), {}, qv, kv, vv, {}).ok());
  auto o2 = RunSdpa(qc.value(), kc.value(), vc.value(), {});
  EXPECT_EQ(MaxAbsDiff(o1.view(), o2->out.view()), 0.0);
}

TEST(ReferenceSdpa, ZeroSizedDimensionsAreLegal) {
  for (Shape qs : {Shape{0, 2, 3, 4}, Shape{1, 2, 0, 4}}) {
    Tensor q = Zeros(DType::kF32, qs), k = Zeros(DType::kF32, {qs[0], 2, 3, 4}),
           v = Zeros(DType::kF32, {qs[0], 2, 3, 4});
    Tensor out = Zeros(DType::kF32, {qs[0], 2, qs[2], 4});
    EXPECT_TRUE(reference::Sdpa(out.view(), {}, q.view(), k.view(), v.view(), {}).ok());
  }
  // kv_len = 0: every row is dead: out 0, lse -inf.
  Tensor q = Random({1, 1, 3, 4}, 25), k = Zeros(DType::kF32, {1, 1, 0, 4}),
         v = Zeros(DType::kF32, {1, 1, 0, 2});
  auto r = RunSdpa(q, k, v, {});
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(At(r->lse, 0, 0, i), -INFINITY);
    EXPECT_EQ(At(r->out, 0, 0, i, 0), 0.0);
  }
}

TEST(ReferenceSdpa, LargeLogitsStayFinite) {
  Tensor q = Random({1, 1, 4, 8}, 26, 40.0), k = Random({1, 1, 6, 8}, 27, 40.0),
         v = Random({1, 1, 6, 8}, 28);
  auto r = RunSdpa(q, k, v, {});
  for (int64_t i = 0; i < r->out.numel(); ++i) EXPECT_TRUE(std::isfinite(r->out.data<double>()[i]));
  const Tensor* w = r->rec.Find("weights");
  for (int i = 0; i < 4; ++i) {
    double s = 0;
    for (int j = 0; j < 6; ++j) s += At(*w, 0, 0, i, j);
    EXPECT_NEAR(s, 1.0, 1e-12);
  }
}

TEST(ReferenceSdpa, NanInOneQueryRowStaysInThatRow) {
  Tensor q = Random({1, 1, 3, 4}, 29), k = Random({1, 1, 5, 4}, 30), v = Random({1, 1, 5, 4}, 31);
  q.data<float>()[1 * 4 + 2] = NAN;
  auto r = RunSdpa(q, k, v, {});
  for (int c = 0; c < 4; ++c) {
    EXPECT_TRUE(std::isnan(At(r->out, 0, 0, 1, c)));
    EXPECT_TRUE(std::isfinite(At(r->out, 0, 0, 0, c)));
    EXPECT_TRUE(std::isfinite(At(r->out, 0, 0, 2, c)));
  }
}

TEST(ReferenceSdpa, NegInfFloatMaskEqualsFalseBool) {
  Tensor q = Random({1, 2, 4, 4}, 32), k = Random({1, 2, 6, 4}, 33), v = Random({1, 2, 6, 4}, 34);
  Tensor bm = testing::RandomBoolMask({4, 6}, 35, 0.5);
  Tensor fm = Zeros(DType::kF32, {4, 6});
  for (int i = 0; i < 24; ++i) fm.data<float>()[i] = bm.data<uint8_t>()[i] ? 0.0f : -INFINITY;
  SdpaOptions a, b;
  a.attn_mask = bm.view();
  b.attn_mask = fm.view();
  auto ra = RunSdpa(q, k, v, a), rb = RunSdpa(q, k, v, b);
  EXPECT_EQ(MaxAbsDiff(ra->out.view(), rb->out.view()), 0.0);
  EXPECT_EQ(MaxAbsDiff(ra->lse.view(), rb->lse.view()), 0.0);
}

TEST(ReferenceSdpa, StagesAreCheapWhenOffAndConsistentWhenOn) {
  Tensor q = Random({1, 1, 3, 4}, 36), k = Random({1, 1, 5, 4}, 37), v = Random({1, 1, 5, 2}, 38);
  SdpaOptions opt;
  opt.scale = 0.3;
  auto r = RunSdpa(q, k, v, opt);
  for (const char* s : {"scores", "scaled", "masked", "weights", "lse", "out"})
    EXPECT_NE(r->rec.Find(s), nullptr) << s;
  const Tensor& sc = *r->rec.Find("scores");
  const Tensor& scl = *r->rec.Find("scaled");
  for (int64_t i = 0; i < sc.numel(); ++i)
    EXPECT_DOUBLE_EQ(scl.data<double>()[i], 0.3 * sc.data<double>()[i]);
  StageRecorder only({"weights"});
  Tensor out = Zeros(DType::kF64, {1, 1, 3, 2});
  ASSERT_TRUE(reference::Sdpa(out.view(), {}, q.view(), k.view(), v.view(), opt, &only).ok());
  EXPECT_EQ(only.stages().size(), 1u);
}

// ---- errors ---------------------------------------------------------------
Status Call(const Shape& qs, const Shape& ks, const Shape& vs, const SdpaOptions& opt = {},
            Shape os = {}) {
  Tensor q = Zeros(DType::kF32, qs), k = Zeros(DType::kF32, ks), v = Zeros(DType::kF32, vs);
  Tensor o = os.empty() ? Tensor() : Zeros(DType::kF32, os);
  return reference::Sdpa(os.empty() ? TensorView() : o.view(), {}, q.view(), k.view(), v.view(),
                         opt);
}

void ExpectError(const Status& st, StatusCode code, std::initializer_list<const char*> needles) {
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), code) << st.ToString();
  for (const char* n : needles) EXPECT_NE(st.message().find(n), std::string::npos) << st.message();
}

TEST(ReferenceErrors, RankMismatch) {
  ExpectError(Call({2, 5, 8}, {2, 1, 5, 8}, {2, 1, 5, 8}), StatusCode::kInvalidArgument,
              {"reference::sdpa", "q has rank 3", "[2,5,8]"});
}
TEST(ReferenceErrors, ShapeMismatch) {
  ExpectError(Call({1, 2, 3, 8}, {1, 2, 4, 7}, {1, 2, 4, 8}), StatusCode::kInvalidArgument,
              {"head_dim", "k [1,2,4,7]"});
  ExpectError(Call({1, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 5, 8}), StatusCode::kInvalidArgument,
              {"v [1,2,5,8]"});
  ExpectError(Call({2, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}), StatusCode::kInvalidArgument,
              {"batch"});
  ExpectError(Call({1, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, {}, {1, 2, 3, 7}),
              StatusCode::kInvalidArgument, {"out [1,2,3,7]"});
}
TEST(ReferenceErrors, HeadsNotMultipleOfKvHeads) {
  ExpectError(Call({1, 6, 3, 8}, {1, 4, 4, 8}, {1, 4, 4, 8}), StatusCode::kInvalidArgument,
              {"H=6", "Hkv=4"});
}
TEST(ReferenceErrors, MaskNotBroadcastable) {
  Tensor m = Zeros(DType::kBool, {3, 5});
  SdpaOptions opt;
  opt.attn_mask = m.view();
  ExpectError(Call({1, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, opt), StatusCode::kInvalidArgument,
              {"attn_mask [3,5]", "[1,2,3,4]"});
  Tensor m1 = Zeros(DType::kBool, {4});
  opt.attn_mask = m1.view();
  ExpectError(Call({1, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, opt), StatusCode::kInvalidArgument,
              {"rank 1"});
  Tensor mi = Zeros(DType::kI32, {3, 4});
  opt.attn_mask = mi.view();
  ExpectError(Call({1, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, opt), StatusCode::kInvalidArgument,
              {"BOOL or float"});
}
TEST(ReferenceErrors, KvLenOutOfRange) {
  Tensor kl = Zeros(DType::kI64, {2});
  kl.data<int64_t>()[1] = 5;
  SdpaOptions opt;
  opt.kv_lens = kl.view();
  ExpectError(Call({2, 2, 3, 8}, {2, 2, 4, 8}, {2, 2, 4, 8}, opt), StatusCode::kOutOfRange,
              {"kv_lens[1] = 5", "Lk=4"});
  kl.data<int64_t>()[1] = -1;
  ExpectError(Call({2, 2, 3, 8}, {2, 2, 4, 8}, {2, 2, 4, 8}, opt), StatusCode::kOutOfRange,
              {"kv_lens[1] = -1"});
  Tensor kl3 = Zeros(DType::kI64, {3});
  opt.kv_lens = kl3.view();
  ExpectError(Call({2, 2, 3, 8}, {2, 2, 4, 8}, {2, 2, 4, 8}, opt), StatusCode::kInvalidArgument,
              {"kv_lens [3]"});
}
TEST(ReferenceErrors, BadScaleWindowAndSlopes) {
  SdpaOptions opt;
  opt.scale = INFINITY;
  ExpectError(Call({1, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, opt), StatusCode::kInvalidArgument,
              {"scale"});
  opt = {};
  opt.window_left = -2;
  ExpectError(Call({1, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, opt), StatusCode::kInvalidArgument,
              {"window"});
  opt = {};
  Tensor s = Zeros(DType::kF32, {3});
  opt.alibi_slopes = s.view();
  ExpectError(Call({1, 2, 3, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, opt), StatusCode::kInvalidArgument,
              {"alibi_slopes F32[3]"});
}

TEST(ReferenceMha, ErrorsNameTheOpAndShapes) {
  Tensor x = Zeros(DType::kF32, {1, 3, 8});
  Tensor w = Zeros(DType::kF32, {8, 8}), wk = Zeros(DType::kF32, {6, 8});
  reference::MhaWeights mw;
  mw.w_q = mw.w_v = mw.w_o = w.view();
  mw.w_k = wk.view();
  mw.num_heads = 2;
  Status st = reference::Mha({}, x.view(), x.view(), x.view(), mw, {});
  ExpectError(st, StatusCode::kInvalidArgument, {"reference::mha", "w_k", "[6,8]", "[8,8]"});
  mw.num_heads = 3;
  ExpectError(reference::Mha({}, x.view(), x.view(), x.view(), mw, {}),
              StatusCode::kInvalidArgument, {"E=8", "num_heads=3"});
}

TEST(MergeAttentionStates, SplitKeysMergeToFullResult) {
  // Reference over keys [0,6) and [6,13) merged == reference over all 13.
  Tensor q = Random({1, 2, 4, 5}, 40), k = Random({1, 2, 13, 5}, 41), v = Random({1, 2, 13, 3}, 42);
  auto full = RunSdpa(q, k, v, {});
  auto part = [&](int lo, int hi, Tensor* o, Tensor* l) {
    TensorView kk = k.view(), vv = v.view();
    kk.data = k.data<float>() + lo * 5;
    kk.shape[2] = hi - lo;
    vv.data = v.data<float>() + lo * 3;
    vv.shape[2] = hi - lo;
    *o = Zeros(DType::kF32, {1, 2, 4, 3});
    *l = Zeros(DType::kF32, {1, 2, 4});
    ASSERT_TRUE(reference::Sdpa(o->view(), l->view(), q.view(), kk, vv, {}).ok());
  };
  Tensor oa, la, ob, lb;
  part(0, 6, &oa, &la);
  part(6, 13, &ob, &lb);
  Tensor o = Zeros(DType::kF32, {1, 2, 4, 3}), l = Zeros(DType::kF32, {1, 2, 4});
  ASSERT_TRUE(MergeAttentionStates(o.view(), l.view(), oa.view(), la.view(), ob.view(), lb.view()).ok());
  EXPECT_LT(MaxAbsDiff(o.view(), full->out.view()), 2e-6);
  EXPECT_LT(MaxAbsDiff(l.view(), full->lse.view()), 2e-6);
  // Merging with a dead partial (lse -inf, out 0) is the identity; two dead
  // partials stay dead.
  Tensor od = Zeros(DType::kF32, {1, 2, 4, 3}), ld = Zeros(DType::kF32, {1, 2, 4});
  for (int i = 0; i < 8; ++i) ld.data<float>()[i] = -INFINITY;
  ASSERT_TRUE(MergeAttentionStates(o.view(), l.view(), oa.view(), la.view(), od.view(), ld.view()).ok());
  EXPECT_EQ(MaxAbsDiff(o.view(), oa.view()), 0.0);
  ASSERT_TRUE(MergeAttentionStates(o.view(), l.view(), od.view(), ld.view(), od.view(), ld.view()).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(l.data<float>()[i], -INFINITY);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(o.data<float>()[i], 0.0f);
  Tensor bad = Zeros(DType::kF32, {1, 2, 5});
  ExpectError(MergeAttentionStates(o.view(), l.view(), oa.view(), bad.view(), ob.view(), lb.view()),
              StatusCode::kInvalidArgument, {"merge_attention_states", "lse_a", "[1,2,5]"});
}

TEST(Tensor, HalfConversionsRoundTripAndRoundToNearestEven) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f})
    EXPECT_EQ(F16ToF32(F32ToF16(f)), f) << f;
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);               // rounds to inf
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(NAN))));
  EXPECT_EQ(BF16ToF32(F32ToBF16(1.0f)), 1.0f);
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  // Every f16 value survives f16 -> f32 -> f16.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads
    EXPECT_EQ(F32ToF16(F16ToF32(static_cast<uint16_t>(h))), h);
  }
}

TEST(Tensor, OverflowingShapesAreErrorsNotCrashes) {
  Result<Tensor> t = Tensor::Zeros(DType::kF32, {1LL << 40, 1LL << 40});
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace attnflow
