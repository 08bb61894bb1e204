// nn_blocks_test.cc — norms, FFNs, the attention sublayer, blocks, decoder
// layer, full Transformer and Bahdanau/Luong alignment: hand-computed values
// and properties (padding invariance, causality, KV-cache decode == prefill,
// GQA == MHA with repeated K/V heads, ALiBi/T5 bias placement). Expected
// values are never produced by the code under test.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "attnflow/kernels.h"
#include "attnflow/nn.h"
#include "attnflow/nn_align.h"
#include "util/test_util.h"

namespace attnflow::nn {
namespace {
using attnflow::testing::At;
using attnflow::testing::MaxAbsDiff;
using attnflow::testing::Random;
using attnflow::testing::Zeros;

// Owns random weights of a block / decoder layer.
struct Weights {
  std::vector<std::unique_ptr<Tensor>> keep;
  uint64_t seed;
  explicit Weights(uint64_t s) : seed(s) {}
  TensorView W(const Shape& s, double scale) {
    keep.push_back(std::make_unique<Tensor>(Random(s, seed++, scale)));
    return keep.back()->view();
  }
  TensorView Ones(int64_t n) {
    keep.push_back(std::make_unique<Tensor>(Zeros(DType::kF32, {n})));
    for (int64_t i = 0; i < n; ++i) keep.back()->data<float>()[i] = 1.0f + 0.1f * (i % 3);
    return keep.back()->view();
  }
  AttentionWeights Attn(int64_t E, int64_t H, int64_t Hkv, bool bias, int64_t t5_buckets = 0) {
    const int64_t Dh = E / H;
    const double s = 1.0 / std::sqrt(static_cast<double>(E));
    AttentionWeights a;
    a.w_q = W({H * Dh, E}, s);
    a.w_k = W({Hkv * Dh, E}, s);
    a.w_v = W({Hkv * Dh, E}, s);
    a.w_o = W({E, H * Dh}, s);
    if (bias) {
      a.b_q = W({H * Dh}, 0.1);
      a.b_k = W({Hkv * Dh}, 0.1);
      a.b_v = W({Hkv * Dh}, 0.1);
      a.b_o = W({E}, 0.1);
    }
    if (t5_buckets > 0) a.t5_table = W({t5_buckets, H}, 0.5);
    return a;
  }
  FfnWeights Ffn(int64_t E, int64_t F, Activation act, bool bias) {
    FfnWeights f;
    f.w_up = W({F, E}, 1.0 / std::sqrt(double(E)));
    f.w_down = W({E, F}, 1.0 / std::sqrt(double(F)));
    if (IsGated(act)) f.w_gate = W({F, E}, 1.0 / std::sqrt(double(E)));
    if (bias) {
      f.b_up = W({F}, 0.1);
      f.b_down = W({E}, 0.1);
      if (IsGated(act)) f.b_gate = W({F}, 0.1);
    }
    return f;
  }
  NormWeights Norm(int64_t E, NormKind k) {
    NormWeights n;
    n.weight = Ones(E);
    if (k == NormKind::kLayerNorm) n.bias = W({E}, 0.1);
    return n;
  }
  BlockWeights Block(int64_t E, int64_t F, const BlockConfig& c, bool bias) {
    BlockWeights b;
    const int64_t nb = c.attn.position == PositionKind::kT5 ? c.attn.t5.num_buckets : 0;
    b.attn = Attn(E, c.attn.num_heads, c.attn.num_kv_heads ? c.attn.num_kv_heads : c.attn.num_heads,
                  bias, nb);
    b.norm1 = Norm(E, c.norm);
    b.norm2 = Norm(E, c.norm);
    b.ffn = Ffn(E, F, c.act, bias);
    return b;
  }
};

Tensor RunBlock(const Tensor& x, const BlockWeights& w, const BlockConfig& c,
                const AttentionMasks& m = {}, KvCache* cache = nullptr, StageSink* sink = nullptr) {
  Tensor out = Zeros(DType::kF64, x.shape());
  Status st = Block(out.view(), x.view(), w, c, m, cache, sink);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

Tensor Rows(const Tensor& x, int64_t from, int64_t n) {
  const Shape s = x.shape();
  Tensor r = Zeros(DType::kF64, {s[0], n, s[2]});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t l = 0; l < n; ++l)
      for (int64_t e = 0; e < s[2]; ++e)
        r.view().store(r.view().offset(b, l, e), At(x, b, from + l, e));
  return r;
}

BlockConfig Llama() {
  BlockConfig c;
  c.attn.num_heads = 4;
  c.attn.num_kv_heads = 2;
  c.attn.causal = Causal::kBottomRight;
  c.attn.position = PositionKind::kRope;
  c.act = Activation::kSwiGlu;
  c.norm = NormKind::kRmsNorm;
  c.placement = NormPlacement::kPre;
  return c;
}

// ---- Norms and FFN -------------------------------------------------------------

TEST(Norm, HandComputed) {
  Tensor x = Zeros(DType::kF64, {1, 4});
  const double v[4] = {1, 2, 3, 6};
  for (int i = 0; i < 4; ++i) x.data<double>()[i] = v[i];
  Tensor y = Zeros(DType::kF64, {1, 4});
  // LayerNorm: mean 3, biased var (4+1+0+9)/4 = 3.5.
  ASSERT_TRUE(Norm(y.view(), x.view(), {}, NormKind::kLayerNorm, 0.5).ok());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(At(y, 0, i), (v[i] - 3) / 2.0, 1e-15);
  // RMSNorm: mean square (1+4+9+36)/4 = 12.5, eps 3.5 -> sqrt 16 = 4.
  ASSERT_TRUE(Norm(y.view(), x.view(), {}, NormKind::kRmsNorm, 3.5).ok());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(At(y, 0, i), v[i] / 4.0, 1e-15);
  Tensor w = Zeros(DType::kF32, {4}), b = Zeros(DType::kF32, {4});
  for (int i = 0; i < 4; ++i) w.data<float>()[i] = 2.0f, b.data<float>()[i] = 1.0f;
  Status st = Norm(y.view(), x.view(), {w.view(), b.view()}, NormKind::kRmsNorm, 1e-6);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("RMSNorm takes no bias"), std::string::npos);
  ASSERT_TRUE(Norm(y.view(), x.view(), {w.view(), b.view()}, NormKind::kLayerNorm, 0.5).ok());
  EXPECT_NEAR(At(y, 0, 3), 2.0 * 1.5 + 1.0, 1e-15);
}

TEST(Ffn, ActivationsHandComputed) {
  // E = F = 1, w_up = 1, w_down = 1: out = act(x).
  Tensor one = Zeros(DType::kF32, {1, 1});
  one.data<float>()[0] = 1;
  Tensor x = Zeros(DType::kF64, {1});
  Tensor y = Zeros(DType::kF64, {1});
  FfnWeights f{one.view(), {}, one.view(), {}, one.view(), {}};
  FfnWeights plain{one.view(), {}, {}, {}, one.view(), {}};
  struct C {
    Activation a;
    double x, y;
  } cases[] = {{Activation::kRelu, -2.0, 0.0},
               {Activation::kRelu, 1.5, 1.5},
               {Activation::kGelu, 1.0, 0.8413447460685429},      // Φ(1)
               {Activation::kGeluTanh, 1.0, 0.8411919906082768},
               {Activation::kSwiGlu, 1.0, 0.7310585786300049}};   // silu(1)·1
  for (const auto& c : cases) {
    x.data<double>()[0] = c.x;
    ASSERT_TRUE(Ffn(y.view(), x.view(), IsGated(c.a) ? f : plain, c.a).ok());
    EXPECT_NEAR(y.data<double>()[0], c.y, 1e-15) << ActivationName(c.a);
  }
  Status st = Ffn(y.view(), x.view(), f, Activation::kRelu);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);  // gate given to an ungated FFN
  st = Ffn(y.view(), x.view(), plain, Activation::kSwiGlu);
  EXPECT_NE(st.message().find("gate weight"), std::string::npos) << st.message();
}

// ---- Blocks --------------------------------------------------------------------

TEST(Block, EncoderOutputIgnoresPaddedTokenContent) {
  for (NormPlacement p : {NormPlacement::kPost, NormPlacement::kPre}) {
    BlockConfig c;
    c.attn.num_heads = 2;
    c.placement = p;
    c.act = Activation::kGelu;
    Weights w(100);
    BlockWeights bw = w.Block(8, 16, c, true);
    Tensor x = Random({2, 5, 8}, 1);
    Tensor km = Zeros(DType::kBool, {2, 5});
    for (int j = 0; j < 5; ++j) km.data<uint8_t>()[j] = 1, km.data<uint8_t>()[5 + j] = j < 3;
    AttentionMasks m;
    m.key_mask = km.view();
    Tensor a = RunBlock(x, bw, c, m);
    Tensor x2 = Random({2, 5, 8}, 1);
    for (int j = 3; j < 5; ++j)
      for (int e = 0; e < 8; ++e) x2.view().store(x2.view().offset(1, j, e), 100.0 * (e - j));
    Tensor b = RunBlock(x2, bw, c, m);
    for (int bb = 0; bb < 2; ++bb)
      for (int l = 0; l < (bb == 0 ? 5 : 3); ++l)
        for (int e = 0; e < 8; ++e) EXPECT_EQ(At(a, bb, l, e), At(b, bb, l, e));
    // The same padding as a user BOOL attn_mask [B,1,1,Lk] gives the same output.
    Tensor am = Zeros(DType::kBool, {2, 1, 1, 5});
    for (int i = 0; i < 10; ++i) am.data<uint8_t>()[i] = km.data<uint8_t>()[i];
    AttentionMasks m2;
    m2.attn_mask = am.view();
    EXPECT_EQ(MaxAbsDiff(RunBlock(x, bw, c, m2).view(), a.view()), 0.0);
    // Without the mask the padded content does leak (the test can fail).
    EXPECT_GT(MaxAbsDiff(RunBlock(x, bw, c).view(), RunBlock(x2, bw, c).view()), 1e-3);
  }
}

TEST(Block, CausalOutputIgnoresTheFuture) {
  BlockConfig c = Llama();
  Weights w(200);
  BlockWeights bw = w.Block(16, 24, c, false);
  Tensor x = Random({1, 6, 16}, 2), x2 = Random({1, 6, 16}, 2);
  for (int e = 0; e < 16; ++e) x2.view().store(x2.view().offset(0, 5, e), 3.0);
  Tensor a = RunBlock(x, bw, c), b = RunBlock(x2, bw, c);
  EXPECT_EQ(MaxAbsDiff(Rows(a, 0, 5).view(), Rows(b, 0, 5).view()), 0.0);
  EXPECT_GT(MaxAbsDiff(Rows(a, 5, 1).view(), Rows(b, 5, 1).view()), 1e-6);
}

TEST(Block, KvCacheDecodeEqualsPrefill) {
  // RoPE+GQA, ALiBi and T5 (positions must agree between cached keys and new
  // queries), with and without padding of the first tokens of one row.
  for (PositionKind pos : {PositionKind::kRope, PositionKind::kAlibi, PositionKind::kT5}) {
    BlockConfig c = Llama();
    c.attn.position = pos;
    if (pos == PositionKind::kT5) {
      c.attn.t5.bidirectional = false;
      c.attn.t5.num_buckets = 8;
      c.attn.t5.max_distance = 12;
      c.attn.scale = 1.0;
    }
    Weights w(300);
    BlockWeights bw = w.Block(16, 24, c, false);
    const int64_t L = 7;
    Tensor x = Random({2, L, 16}, 3);
    Tensor km = Zeros(DType::kBool, {2, L});
    for (int j = 0; j < L; ++j) km.data<uint8_t>()[j] = 1, km.data<uint8_t>()[L + j] = j != 1;
    AttentionMasks m;
    m.key_mask = km.view();
    StageRecorder full_rec({"k"});
    Tensor full = RunBlock(x, bw, c, m, nullptr, &full_rec);
    // Prefill 4 tokens, then decode 1, then 2.
    KvCache cache;
    int64_t done = 0;
    for (int64_t n : {4, 1, 2}) {
      AttentionMasks mm;
      TensorView kv = km.view();
      kv.shape[1] = done + n;  // keys seen so far
      mm.key_mask = kv;
      StageRecorder rec({"k"});
      Tensor part = RunBlock(Rows(x, done, n), bw, c, mm, &cache, &rec);
      EXPECT_LT(MaxAbsDiff(part.view(), Rows(full, done, n).view()), 1e-12)
          << PositionKindName(pos) << " step at " << done;
      done += n;
      EXPECT_EQ(cache.length, done);
      if (done == L) {  // the cache holds exactly the prefill's rotated keys
        EXPECT_LT(MaxAbsDiff(rec.Find("k")->view(), full_rec.Find("k")->view()), 1e-12);
      }
    }
  }
}

TEST(Block, GqaEqualsMhaWithRepeatedKvHeads) {
  BlockConfig g = Llama();  // H=4, Hkv=2
  Weights w(400);
  const int64_t E = 16, Dh = 4;
  BlockWeights gw = w.Block(E, 24, g, false);
  // MHA weights: each kv head's rows repeated for its group (repeat_interleave).
  Tensor wk = Zeros(DType::kF32, {4 * Dh, E}), wv = Zeros(DType::kF32, {4 * Dh, E});
  for (int h = 0; h < 4; ++h)
    for (int r = 0; r < Dh; ++r)
      for (int e = 0; e < E; ++e) {
        wk.view().store(wk.view().offset(h * Dh + r, e), gw.attn.w_k.load(gw.attn.w_k.offset((h / 2) * Dh + r, e)));
        wv.view().store(wv.view().offset(h * Dh + r, e), gw.attn.w_v.load(gw.attn.w_v.offset((h / 2) * Dh + r, e)));
      }
  BlockConfig m = g;
  m.attn.num_kv_heads = 0;
  BlockWeights mw = gw;
  mw.attn.w_k = wk.view();
  mw.attn.w_v = wv.view();
  Tensor x = Random({2, 5, E}, 4);
  EXPECT_LT(MaxAbsDiff(RunBlock(x, gw, g).view(), RunBlock(x, mw, m).view()), 1e-13);
}

TEST(Block, AlibiAndT5BiasesAreAddedToTheScaledScores) {
  for (PositionKind pos : {PositionKind::kAlibi, PositionKind::kT5}) {
    BlockConfig c;
    c.attn.num_heads = 3;  // not a power of two
    c.attn.causal = Causal::kTopLeft;
    c.attn.position = pos;
    c.attn.t5.num_buckets = 8;
    c.attn.t5.max_distance = 16;
    Weights w(500);
    BlockWeights bw = w.Block(12, 16, c, true);
    Tensor x = Random({1, 5, 12}, 5);
    StageRecorder rec;
    RunBlock(x, bw, c, {}, nullptr, &rec);
    const Tensor* scaled = rec.Find("scaled");
    const Tensor* masked = rec.Find("masked");
    ASSERT_TRUE(scaled && masked);
    double slopes[3];
    AlibiSlopes(3, slopes);
    EXPECT_DOUBLE_EQ(slopes[0], std::pow(2.0, -4.0));  // closest power of two 2: 2^-4, 2^-8
    EXPECT_DOUBLE_EQ(slopes[2], std::pow(2.0, -2.0));  // then 2^-2 from the 4-head sequence
    for (int h = 0; h < 3; ++h)
      for (int i = 0; i < 5; ++i)
        for (int j = 0; j < 5; ++j) {
          const double m = At(*masked, 0, h, i, j), s = At(*scaled, 0, h, i, j);
          if (j > i) {
            EXPECT_EQ(m, kNegInf);
            continue;
          }
          const double bias = pos == PositionKind::kAlibi
                                  ? -slopes[h] * (i - j)
                                  : bw.attn.t5_table.load(bw.attn.t5_table.offset(
                                        T5RelativeBucket(j - i, c.attn.t5), h));
          EXPECT_NEAR(m - s, bias, 1e-12) << PositionKindName(pos) << " h" << h << " " << i << "," << j;
        }
  }
}

TEST(Block, StagesFollowTheDefinitions) {
  for (NormPlacement p : {NormPlacement::kPost, NormPlacement::kPre}) {
    BlockConfig c;
    c.attn.num_heads = 2;
    c.placement = p;
    Weights w(600);
    BlockWeights bw = w.Block(8, 12, c, true);
    Tensor x = Random({1, 3, 8}, 6);
    StageRecorder rec;
    Tensor out = RunBlock(x, bw, c, {}, nullptr, &rec);
    for (const char* s : {"attn_in", "q", "k", "v", "scores", "scaled", "masked", "weights", "lse",
                          "heads_out", "concat", "attn_out", "residual", "norm", "ffn_hidden",
                          "ffn", "out"}) {
      EXPECT_NE(rec.Find(s), nullptr) << s;
    }
    // residual = x + attn_out; out = residual + ffn (pre) / norm2(norm + ffn) (post).
    for (int l = 0; l < 3; ++l)
      for (int e = 0; e < 8; ++e) {
        EXPECT_NEAR(At(*rec.Find("residual"), 0, l, e),
                    At(x, 0, l, e) + At(*rec.Find("attn_out"), 0, l, e), 1e-14);
        if (p == NormPlacement::kPre) {
          EXPECT_NEAR(At(out, 0, l, e),
                      At(*rec.Find("residual"), 0, l, e) + At(*rec.Find("ffn"), 0, l, e), 1e-14);
        } else {
          EXPECT_EQ(At(*rec.Find("attn_in"), 0, l, e), At(x, 0, l, e));
        }
      }
  }
}

TEST(Block, FastKernelPathMatchesTheReference) {
  BlockConfig c = Llama();
  Weights w(700);
  BlockWeights bw = w.Block(32, 48, c, false);
  Tensor x = Random({2, 9, 32}, 7);
  Tensor ref = RunBlock(x, bw, c);
  c.attn.use_kernels = true;
  Tensor fast = RunBlock(x, bw, c);
  EXPECT_LT(MaxAbsDiff(ref.view(), fast.view()), 1e-4);
}

TEST(Block, ErrorsNameTheOpAndShapes) {
  BlockConfig c;
  c.attn.num_heads = 2;
  Weights w(800);
  BlockWeights bw = w.Block(8, 12, c, true);
  bw.attn.w_k = w.W({6, 8}, 0.1);
  Tensor x = Random({1, 3, 8}, 8);
  Tensor out = Zeros(DType::kF64, {1, 3, 8});
  Status st = Block(out.view(), x.view(), bw, c, {});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("block: attention_layer: k weight is F32[6,8], expected float [8,8]"),
            std::string::npos)
      << st.message();
  c.attn.num_heads = 3;
  st = Block(out.view(), x.view(), w.Block(8, 12, BlockConfig{}, true), c, {});
  EXPECT_NE(st.message().find("not divisible by num_heads=3"), std::string::npos) << st.message();
  Tensor x2 = Random({3, 8}, 8);
  st = Block(out.view(), x2.view(), bw, c, {});
  EXPECT_NE(st.message().find("block: x is F32[3,8]"), std::string::npos) << st.message();
  // A top-left causal mask with a non-empty cache is refused.
  BlockConfig ll = Llama();
  ll.attn.causal = Causal::kTopLeft;
  BlockWeights lw = w.Block(16, 24, ll, false);
  KvCache cache;
  Tensor xa = Random({1, 2, 16}, 9);
  Tensor oa = Zeros(DType::kF64, {1, 2, 16});
  ASSERT_TRUE(Block(oa.view(), xa.view(), lw, ll, {}, &cache).ok());
  st = Block(oa.view(), xa.view(), lw, ll, {}, &cache);
  EXPECT_NE(st.message().find("bottom_right"), std::string::npos) << st.message();
}

// ---- Decoder layer and Transformer ------------------------------------------------

DecoderLayerWeights DecW(Weights& w, int64_t E, int64_t H, int64_t F, Activation act) {
  DecoderLayerWeights d;
  d.self_attn = w.Attn(E, H, H, true);
  d.cross_attn = w.Attn(E, H, H, true);
  d.norm1 = w.Norm(E, NormKind::kLayerNorm);
  d.norm2 = w.Norm(E, NormKind::kLayerNorm);
  d.norm3 = w.Norm(E, NormKind::kLayerNorm);
  d.ffn = w.Ffn(E, F, act, true);
  return d;
}

TEST(DecoderLayer, MemoryPaddingAndCausality) {
  for (NormPlacement p : {NormPlacement::kPost, NormPlacement::kPre}) {
    DecoderLayerConfig c;
    c.self_attn.num_heads = 2;
    c.self_attn.causal = Causal::kTopLeft;
    c.cross_attn.num_heads = 2;
    c.placement = p;
    Weights w(900);
    DecoderLayerWeights dw = DecW(w, 8, 2, 16, c.act);
    Tensor x = Random({1, 4, 8}, 10), mem = Random({1, 5, 8}, 11), mem2 = Random({1, 5, 8}, 11);
    for (int e = 0; e < 8; ++e) mem2.view().store(mem2.view().offset(0, 4, e), -50.0);
    Tensor mk = Zeros(DType::kBool, {1, 5});
    for (int j = 0; j < 4; ++j) mk.data<uint8_t>()[j] = 1;
    Tensor a = Zeros(DType::kF64, {1, 4, 8}), b = Zeros(DType::kF64, {1, 4, 8});
    ASSERT_TRUE(DecoderLayer(a.view(), x.view(), mem.view(), dw, c, {}, mk.view()).ok());
    ASSERT_TRUE(DecoderLayer(b.view(), x.view(), mem2.view(), dw, c, {}, mk.view()).ok());
    EXPECT_EQ(MaxAbsDiff(a.view(), b.view()), 0.0);
    Tensor x2 = Random({1, 4, 8}, 10);
    for (int e = 0; e < 8; ++e) x2.view().store(x2.view().offset(0, 3, e), 7.0);
    ASSERT_TRUE(DecoderLayer(b.view(), x2.view(), mem.view(), dw, c, {}, mk.view()).ok());
    EXPECT_EQ(MaxAbsDiff(Rows(a, 0, 3).view(), Rows(b, 0, 3).view()), 0.0);
    EXPECT_GT(MaxAbsDiff(Rows(a, 3, 1).view(), Rows(b, 3, 1).view()), 1e-6);
  }
}

TEST(Transformer, SourcePaddingContentDoesNotMatter) {
  TransformerConfig c;
  c.d_model = 8, c.num_heads = 2, c.ffn_dim = 16, c.num_encoder_layers = 2, c.num_decoder_layers = 1;
  Weights w(1000);
  TransformerWeights tw;
  tw.src_embed = w.W({6, 8}, 0.3);
  tw.tgt_embed = w.W({7, 8}, 0.3);
  BlockConfig bc;
  bc.attn.num_heads = 2;
  for (int i = 0; i < 2; ++i) tw.encoder.push_back(w.Block(8, 16, bc, true));
  tw.decoder.push_back(DecW(w, 8, 2, 16, c.act));
  tw.encoder_norm = w.Norm(8, NormKind::kLayerNorm);
  tw.decoder_norm = w.Norm(8, NormKind::kLayerNorm);
  tw.w_logits = w.W({7, 8}, 0.3);
  Tensor src = Zeros(DType::kI64, {1, 5}), tgt = Zeros(DType::kI64, {1, 3});
  Tensor sm = Zeros(DType::kBool, {1, 5});
  for (int j = 0; j < 5; ++j) src.data<int64_t>()[j] = j + 1, sm.data<uint8_t>()[j] = j < 3;
  for (int j = 0; j < 3; ++j) tgt.data<int64_t>()[j] = 2 * j;
  Tensor out = Zeros(DType::kF64, {1, 3, 8}), out2 = Zeros(DType::kF64, {1, 3, 8});
  Tensor logits = Zeros(DType::kF64, {1, 3, 7});
  StageRecorder rec({"memory", "src_in"});
  ASSERT_TRUE(Transformer(out.view(), logits.view(), src.view(), tgt.view(), sm.view(), TensorView(),
                          tw, c, &rec).ok());
  // src_in = embed·sqrt(8) + PE (position 1, dim 0: sin 1).
  EXPECT_NEAR(At(*rec.Find("src_in"), 0, 1, 0),
              tw.src_embed.load(tw.src_embed.offset(2, 0)) * std::sqrt(8.0) + std::sin(1.0), 1e-12);
  src.data<int64_t>()[3] = 0;
  src.data<int64_t>()[4] = 5;
  ASSERT_TRUE(Transformer(out2.view(), TensorView(), src.view(), tgt.view(), sm.view(), TensorView(),
                          tw, c).ok());
  EXPECT_EQ(MaxAbsDiff(out.view(), out2.view()), 0.0);
  Status st = Transformer(out2.view(), TensorView(), src.view(), tgt.view(), sm.view(), TensorView(),
                          tw, TransformerConfig{});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  src.data<int64_t>()[0] = 6;  // out of the source vocabulary
  st = Transformer(out2.view(), TensorView(), src.view(), tgt.view(), sm.view(), TensorView(), tw, c);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
}

// ---- Bahdanau / Luong ----------------------------------------------------------

TEST(Align, DotScoreHandComputed) {
  // s = [1, 0]; h0 = [1, 0], h1 = [0, 1]: e = [1, 0]; a = [e/(e+1), 1/(e+1)].
  Tensor s = Zeros(DType::kF64, {1, 1, 2}), h = Zeros(DType::kF64, {1, 2, 2});
  s.data<double>()[0] = 1;
  h.data<double>()[0] = 1;
  h.data<double>()[3] = 1;
  Tensor ctx = Zeros(DType::kF64, {1, 1, 2}), a = Zeros(DType::kF64, {1, 1, 2});
  ASSERT_TRUE(Align(ctx.view(), a.view(), s.view(), h.view(), {}, AlignScore::kDot, TensorView()).ok());
  const double e = std::exp(1.0);
  EXPECT_NEAR(At(a, 0, 0, 0), e / (e + 1), 1e-15);
  EXPECT_NEAR(At(ctx, 0, 0, 1), 1 / (e + 1), 1e-15);
}

TEST(Align, AdditiveWithZeroVIsUniformOverValidPositions) {
  Tensor s = Random({2, 3, 4}, 12), h = Random({2, 5, 6}, 13);
  Tensor ws = Random({7, 4}, 14), wh = Random({7, 6}, 15), v = Zeros(DType::kF32, {7});
  Tensor km = Zeros(DType::kBool, {2, 5});
  for (int j = 0; j < 5; ++j) km.data<uint8_t>()[j] = 1, km.data<uint8_t>()[5 + j] = j < 2;
  Tensor a = Zeros(DType::kF64, {2, 3, 5}), ctx = Zeros(DType::kF64, {2, 3, 6});
  AlignWeights w;
  w.w_s = ws.view(), w.w_h = wh.view(), w.v = v.view();
  ASSERT_TRUE(Align(ctx.view(), a.view(), s.view(), h.view(), w, AlignScore::kAdditive, km.view()).ok());
  for (int t = 0; t < 3; ++t) {
    for (int j = 0; j < 5; ++j) {
      EXPECT_NEAR(At(a, 0, t, j), 0.2, 1e-15);
      EXPECT_NEAR(At(a, 1, t, j), j < 2 ? 0.5 : 0.0, 1e-15);
    }
    for (int c = 0; c < 6; ++c)
      EXPECT_NEAR(At(ctx, 1, t, c), 0.5 * (At(h, 1, 0, c) + At(h, 1, 1, c)), 1e-14);
  }
  // Nonzero v: rows still sum to 1 and padded positions get exactly 0.
  Tensor v2 = Random({7}, 16);
  w.v = v2.view();
  ASSERT_TRUE(Align(ctx.view(), a.view(), s.view(), h.view(), w, AlignScore::kAdditive, km.view()).ok());
  for (int t = 0; t < 3; ++t) {
    double sum = 0;
    for (int j = 0; j < 5; ++j) sum += At(a, 1, t, j);
    EXPECT_NEAR(sum, 1.0, 1e-15);
    EXPECT_EQ(At(a, 1, t, 4), 0.0);
  }
  // A row with no valid source position: zeros, never NaN.
  for (int j = 0; j < 5; ++j) km.data<uint8_t>()[5 + j] = 0;
  ASSERT_TRUE(Align(ctx.view(), a.view(), s.view(), h.view(), w, AlignScore::kAdditive, km.view()).ok());
  for (int j = 0; j < 5; ++j) EXPECT_EQ(At(a, 1, 0, j), 0.0);
  EXPECT_EQ(At(ctx, 1, 0, 0), 0.0);
  // Dot needs equal sizes.
  Status st = Align(ctx.view(), a.view(), s.view(), h.view(), w, AlignScore::kDot, km.view());
  EXPECT_NE(st.message().find("dot score needs equal state sizes"), std::string::npos);
}

}  // namespace
}  // namespace attnflow::nn
