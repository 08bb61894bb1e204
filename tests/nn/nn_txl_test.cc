// nn_txl_test.cc — Transformer-XL: rel_shift by hand, the relative-position
// identity of the shifted term, and segment recurrence: running segment 2
// with the cached memory of segment 1 equals one run over the concatenated
// segments with the matching mask (memory reused, never recomputed).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "attnflow/nn_transfo_xl.h"
#include "util/test_util.h"

namespace attnflow::nn {
namespace {
using attnflow::testing::At;
using attnflow::testing::MaxAbsDiff;
using attnflow::testing::Random;
using attnflow::testing::Zeros;

struct Model {
  std::vector<std::unique_ptr<Tensor>> keep;
  std::vector<TxlLayerWeights> layers;
  TxlConfig cfg;
  TensorView W(const Shape& s, uint64_t seed, double scale) {
    keep.push_back(std::make_unique<Tensor>(Random(s, seed, scale)));
    return keep.back()->view();
  }
  Model(int n, bool pre, int64_t mem_len, uint64_t seed) {
    cfg.d_model = 8, cfg.num_heads = 2, cfg.head_dim = 4, cfg.d_inner = 16;
    cfg.pre_lnorm = pre;
    cfg.mem_len = mem_len;
    for (int i = 0; i < n; ++i) {
      TxlLayerWeights w;
      const double s = 1 / std::sqrt(8.0);
      w.w_qkv = W({24, 8}, seed++, s);
      w.w_r = W({8, 8}, seed++, s);
      w.w_o = W({8, 8}, seed++, s);
      w.r_w_bias = W({2, 4}, seed++, 0.3);
      w.r_r_bias = W({2, 4}, seed++, 0.3);
      w.ln_attn_w = W({8}, seed++, 0.1);
      w.ln_attn_b = W({8}, seed++, 0.1);
      w.w_ff1 = W({16, 8}, seed++, s);
      w.b_ff1 = W({16}, seed++, 0.1);
      w.w_ff2 = W({8, 16}, seed++, 0.25);
      w.b_ff2 = W({8}, seed++, 0.1);
      w.ln_ff_w = W({8}, seed++, 0.1);
      w.ln_ff_b = W({8}, seed++, 0.1);
      for (auto* t : {&w.ln_attn_w, &w.ln_ff_w})
        for (int e = 0; e < 8; ++e) t->store(e, 1.0 + t->load(e));
      layers.push_back(w);
    }
  }
};

Tensor Rows(const Tensor& x, int64_t from, int64_t n) {
  const Shape s = x.shape();
  Tensor r = Zeros(DType::kF64, {s[0], n, s[2]});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t l = 0; l < n; ++l)
      for (int64_t e = 0; e < s[2]; ++e) r.view().store(r.view().offset(b, l, e), At(x, b, from + l, e));
  return r;
}

TEST(RelShift, HandComputed) {
  // [[a b c], [d e f]] -> pad [[0 a b c], [0 d e f]] -> as [4,2] drop row 0
  // -> [[b c 0], [d e f]].
  Tensor x = Zeros(DType::kF64, {2, 3}), y = Zeros(DType::kF64, {2, 3});
  for (int i = 0; i < 6; ++i) x.data<double>()[i] = i + 1;  // a..f = 1..6
  ASSERT_TRUE(RelShift(y.view(), x.view()).ok());
  const double expect[6] = {2, 3, 0, 4, 5, 6};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<double>()[i], expect[i]) << i;
  EXPECT_EQ(RelShift(x.view(), x.view()).code(), StatusCode::kInvalidArgument);
}

TEST(RelShift, GivesTheRelativeIndexOnTheCausalRegion) {
  // bd_raw[i, j'] = f(i, K−1−j') (position-table row j' holds distance K−1−j').
  // After the shift, bd[i, j] must equal f(i, i + M − j) for j <= i + M.
  const int64_t L = 4, M = 3, K = M + L;
  Tensor raw = Zeros(DType::kF64, {L, K}), bd = Zeros(DType::kF64, {L, K});
  auto f = [](int64_t i, int64_t dist) { return 100.0 * i + dist; };
  for (int64_t i = 0; i < L; ++i)
    for (int64_t jp = 0; jp < K; ++jp) raw.data<double>()[i * K + jp] = f(i, K - 1 - jp);
  ASSERT_TRUE(RelShift(bd.view(), raw.view()).ok());
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j <= i + M; ++j) EXPECT_EQ(At(bd, i, j), f(i, i + M - j)) << i << "," << j;
}

void CheckRecurrence(bool pre, int64_t L1, int64_t L2, int64_t mem_len) {
  Model m(2, pre, mem_len, 42);
  Tensor x = Random({2, L1 + L2, 8}, 7);
  Tensor s1 = Rows(x, 0, L1), s2 = Rows(x, L1, L2);
  // Segment 1 without memory, segment 2 with segment 1's memory.
  std::vector<Tensor> mems1, mems2;
  Tensor o1 = Zeros(DType::kF64, {2, L1, 8}), o2 = Zeros(DType::kF64, {2, L2, 8});
  ASSERT_TRUE(TxlForward(o1.view(), &mems1, s1.view(), {}, m.layers, m.cfg, TensorView()).ok());
  ASSERT_EQ(mems1.size(), 2u);
  const int64_t M = std::min(mem_len, L1);
  ASSERT_EQ(mems1[0].shape()[1], M);
  std::vector<TensorView> mv = {mems1[0].view(), mems1[1].view()};
  StageRecorder rec({"layer.1.k"});
  ASSERT_TRUE(TxlForward(o2.view(), &mems2, s2.view(), mv, m.layers, m.cfg, TensorView(), &rec).ok());
  // One run over the concatenation; segment-2 rows see only the last M rows of
  // segment 1 (the matching mask).
  const int64_t L = L1 + L2;
  Tensor mask = Zeros(DType::kBool, {L, L});
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j)
      mask.data<uint8_t>()[i * L + j] = i < L1 || j >= L1 - M;
  Tensor o = Zeros(DType::kF64, {2, L, 8});
  std::vector<Tensor> mems_c;
  ASSERT_TRUE(TxlForward(o.view(), &mems_c, x.view(), {}, m.layers, m.cfg, mask.view()).ok());
  EXPECT_LT(MaxAbsDiff(Rows(o, 0, L1).view(), o1.view()), 1e-12);
  EXPECT_LT(MaxAbsDiff(Rows(o, L1, L2).view(), o2.view()), 1e-12)
      << "pre=" << pre << " L1=" << L1 << " mem_len=" << mem_len;
  // The memory passed to layer 1 is segment 1's layer-1 input, reused as is:
  // its keys are the first M keys of layer 1 in the segment-2 run.
  for (size_t i = 0; i < mems2.size(); ++i) {
    const int64_t keep = std::min(mem_len, M + L2);
    ASSERT_EQ(mems2[i].shape()[1], keep);
  }
  ASSERT_NE(rec.Find("layer.1.k"), nullptr);
  EXPECT_EQ(rec.Find("layer.1.k")->shape()[2], M + L2);
}

TEST(TransfoXl, MemoryEqualsConcatenatedRunWithMatchingMask) {
  CheckRecurrence(false, 5, 4, 8);  // whole segment kept
  CheckRecurrence(false, 5, 4, 3);  // truncated memory
  CheckRecurrence(true, 4, 3, 4);
  CheckRecurrence(true, 6, 2, 2);
}

TEST(TransfoXl, MemoryIsUsedAndNewMemoryIsTheLayerInput) {
  Model m(1, false, 4, 9);
  Tensor seg = Random({1, 3, 8}, 3), mem = Random({1, 4, 8}, 4), mem2 = Random({1, 4, 8}, 5);
  Tensor a = Zeros(DType::kF64, {1, 3, 8}), b = Zeros(DType::kF64, {1, 3, 8});
  std::vector<Tensor> nm;
  ASSERT_TRUE(TxlForward(a.view(), &nm, seg.view(), {mem.view()}, m.layers, m.cfg, TensorView()).ok());
  ASSERT_TRUE(TxlForward(b.view(), nullptr, seg.view(), {mem2.view()}, m.layers, m.cfg, TensorView()).ok());
  EXPECT_GT(MaxAbsDiff(a.view(), b.view()), 1e-6);  // the memory matters
  // New memory = last 4 rows of [mem; seg] = mem row 3, then seg rows 0..2.
  ASSERT_EQ(nm[0].shape()[1], 4);
  for (int e = 0; e < 8; ++e) {
    EXPECT_EQ(At(nm[0], 0, 0, e), At(mem, 0, 3, e));
    for (int l = 0; l < 3; ++l) EXPECT_EQ(At(nm[0], 0, 1 + l, e), At(seg, 0, l, e));
  }
}

TEST(TransfoXl, ScoresAreContentPlusShiftedPosition) {
  Model m(1, false, 3, 11);
  Tensor seg = Random({1, 4, 8}, 6), mem = Random({1, 3, 8}, 7);
  StageRecorder rec;
  Tensor out = Zeros(DType::kF64, {1, 4, 8});
  ASSERT_TRUE(TxlLayer(out.view(), seg.view(), mem.view(), m.layers[0], m.cfg, TensorView(), &rec).ok());
  const Tensor *q = rec.Find("q"), *k = rec.Find("k"), *r = rec.Find("r"), *sc = rec.Find("scores");
  const Tensor *w = rec.Find("weights");
  ASSERT_TRUE(q && k && r && sc && w);
  const TensorView u = m.layers[0].r_w_bias, v = m.layers[0].r_r_bias;
  const int64_t M = 3, L = 4, K = 7;
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < L; ++i) {
      double sum = 0;
      for (int j = 0; j < K; ++j) {
        sum += At(*w, 0, h, i, j);
        if (j > i + M) {
          EXPECT_EQ(At(*w, 0, h, i, j), 0.0);
          continue;
        }
        // (q+u)·k_j + (q+v)·r(i+M−j); table row K−1−dist holds distance dist.
        double expect = 0;
        for (int c = 0; c < 4; ++c) {
          const double qc = At(*q, 0, h, i, c);
          expect += (qc + u.load(u.offset(h, c))) * At(*k, 0, h, j, c);
          expect += (qc + v.load(v.offset(h, c))) * At(*r, h, K - 1 - (i + M - j), c);
        }
        EXPECT_NEAR(At(*sc, 0, h, i, j), expect, 1e-12);
      }
      EXPECT_NEAR(sum, 1.0, 1e-14);
    }
}

TEST(TransfoXl, Errors) {
  Model m(1, false, 3, 12);
  Tensor seg = Random({1, 4, 8}, 6), mem = Random({1, 3, 6}, 7);
  Tensor out = Zeros(DType::kF64, {1, 4, 8});
  Status st = TxlLayer(out.view(), seg.view(), mem.view(), m.layers[0], m.cfg, TensorView());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("transfo_xl_layer: mem is F32[1,3,6]"), std::string::npos) << st.message();
  st = TxlForward(out.view(), nullptr, seg.view(), {mem.view(), mem.view()}, m.layers, m.cfg, TensorView());
  EXPECT_NE(st.message().find("2 memories for 1 layers"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace attnflow::nn
