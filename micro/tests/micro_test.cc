// micro_test.cc — host tests of the C99 micro library (include/attnflow/micro.h)
// against the float64 oracle reference::Sdpa and the committed golden cases.
//
// Invariants: expected values come from reference::Sdpa (float64) or the
// golden files, never from the micro library; int8 expectations are the
// float64 reference on the dequantised int8 inputs, quantised once, and the
// bound checked is the one derived in docs/edge.md (kS8BoundLsb).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "attnflow/rng.h"
#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/golden.h"
#include "attnflow/micro.h"
#include "micro_test_util.h"

namespace attnflow {
namespace {

namespace fs = std::filesystem;

struct Case {
  af_sdpa_shape s;
  std::vector<float> q, k, v;
  std::vector<int32_t> kv_lens;  // empty = none
  float scale;
};

Case RandomCase(Rng& rng, af_sdpa_shape s, float amp = 1.f, bool kvlens = false) {
  Case c;
  c.s = s;
  auto u = [&](Rng& r) { return static_cast<float>(r.Uniform(-amp, amp)); };
  c.q.resize(size_t(s.batch) * s.num_heads * s.q_len * s.head_dim);
  c.k.resize(size_t(s.batch) * s.num_kv_heads * s.kv_len * s.head_dim);
  c.v.resize(size_t(s.batch) * s.num_kv_heads * s.kv_len * s.v_dim);
  for (auto* t : {&c.q, &c.k, &c.v})
    for (auto& x : *t) x = u(rng);
  if (kvlens) {
    auto L = [&](Rng& r) { return static_cast<int32_t>(r.Below(static_cast<uint64_t>(s.kv_len) + 1)); };
    for (int b = 0; b < s.batch; ++b) c.kv_lens.push_back(L(rng));
  }
  c.scale = 1.f / std::sqrt(float(s.head_dim));
  return c;
}

Causal ToCausal(af_causal c) {
  return c == AF_CAUSAL_TOP_LEFT ? Causal::kTopLeft
         : c == AF_CAUSAL_BOTTOM_RIGHT ? Causal::kBottomRight : Causal::kNone;
}

// float64 reference out [B,H,Lq,Dv] and lse [B,H,Lq].
void Reference(const Case& c, std::vector<double>* out, std::vector<double>* lse) {
  const af_sdpa_shape& s = c.s;
  out->assign(size_t(s.batch) * s.num_heads * s.q_len * s.v_dim, 0);
  lse->assign(size_t(s.batch) * s.num_heads * s.q_len, 0);
  std::vector<int64_t> kl(c.kv_lens.begin(), c.kv_lens.end());
  SdpaOptions opt;
  opt.causal = ToCausal(s.causal);
  opt.scale = c.scale;
  if (!kl.empty()) opt.kv_lens = MakeView(kl.data(), DType::kI64, {s.batch});
  Status st = reference::Sdpa(
      MakeView(out->data(), DType::kF64, {s.batch, s.num_heads, s.q_len, s.v_dim}),
      MakeView(lse->data(), DType::kF64, {s.batch, s.num_heads, s.q_len}),
      MakeView(const_cast<float*>(c.q.data()), DType::kF32, {s.batch, s.num_heads, s.q_len, s.head_dim}),
      MakeView(const_cast<float*>(c.k.data()), DType::kF32, {s.batch, s.num_kv_heads, s.kv_len, s.head_dim}),
      MakeView(const_cast<float*>(c.v.data()), DType::kF32, {s.batch, s.num_kv_heads, s.kv_len, s.v_dim}),
      opt);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

// Runs af_sdpa_f32 on c (micro_test_util.h: exact arena, canary).
af_status RunF32(const Case& c, std::vector<float>* out, std::vector<float>* lse) {
  return RunF32WithCanary(c.s, c.q, c.k, c.v, c.kv_lens, c.scale, nullptr, out, lse);
}

void ExpectCloseF32(const Case& c, double tol) {
  std::vector<double> ro, rl;
  Reference(c, &ro, &rl);
  std::vector<float> o, l;
  ASSERT_EQ(RunF32(c, &o, &l), AF_OK);
  for (size_t i = 0; i < ro.size(); ++i)
    ASSERT_NEAR(o[i], ro[i], tol * (1 + std::fabs(ro[i]))) << "out element " << i;
  for (size_t i = 0; i < rl.size(); ++i) {
    if (std::isinf(rl[i])) {
      ASSERT_TRUE(std::isinf(l[i]) && l[i] < 0) << "lse row " << i;
    } else {
      ASSERT_NEAR(l[i], rl[i], tol * (1 + std::fabs(rl[i]))) << "lse row " << i;
    }
  }
}

TEST(MicroF32, MatchesReferenceOverShapesCausalGqaKvLens) {
  Rng rng(12);
  const af_causal modes[] = {AF_CAUSAL_NONE, AF_CAUSAL_TOP_LEFT, AF_CAUSAL_BOTTOM_RIGHT};
  const int dims[][4] = {{1, 1, 1, 1}, {7, 13, 8, 8}, {13, 7, 5, 13}, {33, 33, 16, 16},
                         {1, 129, 64, 64}, {64, 100, 32, 17}, {65, 31, 3, 1}};
  int n = 0;
  for (auto m : modes)
    for (auto& d : dims)
      for (int g : {1, 2, 4})
        for (bool kl : {false, true}) {
          af_sdpa_shape s{2, 4, 4 / g, d[0], d[1], d[2], d[3], m};
          Case c = RandomCase(rng, s, 2.f, kl);
          SCOPED_TRACE(::testing::Message() << "causal " << m << " Lq " << d[0] << " Lk " << d[1]
                                            << " D " << d[2] << " Dv " << d[3] << " Hkv " << s.num_kv_heads);
          ExpectCloseF32(c, 2e-5);
          ++n;
        }
  EXPECT_EQ(n, 126);
}

TEST(MicroF32, DeadRowsGiveZerosAndMinusInfinity) {
  Rng rng(3);
  // top_left with Lq > Lk leaves no dead rows, bottom_right with Lq > Lk does;
  // kv_lens = 0 kills every row of a batch.
  af_sdpa_shape s{2, 2, 1, 9, 4, 8, 8, AF_CAUSAL_BOTTOM_RIGHT};
  Case c = RandomCase(rng, s);
  c.kv_lens = {0, 4};
  std::vector<float> o, l;
  ASSERT_EQ(RunF32(c, &o, &l), AF_OK);
  for (int i = 0; i < 2 * 9; ++i) EXPECT_TRUE(std::isinf(l[i]) && l[i] < 0);  // batch 0
  for (int i = 0; i < 2 * 9 * 8; ++i) EXPECT_EQ(o[i], 0.f);
  for (float x : o) EXPECT_FALSE(std::isnan(x));
  // batch 1, head 0: rows 0..4 see nothing (d = i - 5 < 0).
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(std::isinf(l[18 + i]));
  EXPECT_FALSE(std::isinf(l[18 + 5]));
  ExpectCloseF32(c, 2e-5);
}

TEST(MicroF32, LargeLogitsStayFinite) {
  Rng rng(5);
  af_sdpa_shape s{1, 2, 2, 40, 70, 16, 16, AF_CAUSAL_TOP_LEFT};
  Case c = RandomCase(rng, s, 30.f);  // logits up to ~ 30*30*16/4 = 3600
  ExpectCloseF32(c, 1e-4);
}

TEST(MicroF32, ErrorsAreCodesAndNothingIsWritten) {
  Rng rng(1);
  af_sdpa_shape s{1, 4, 2, 4, 4, 8, 8, AF_CAUSAL_NONE};
  Case c = RandomCase(rng, s);
  std::vector<float> out(4 * 4 * 8, 1.f);
  std::vector<uint32_t> arena(256);
  const size_t ws = af_sdpa_f32_workspace_bytes(&s);
  EXPECT_EQ(ws, 2 * AF_KEY_TILE * 4u);  // two rows of score tiles; accumulators in `out`
  auto call = [&](af_sdpa_shape sh, const int32_t* kl, float scale, size_t bytes, void* ar) {
    return af_sdpa_f32(out.data(), nullptr, c.q.data(), c.k.data(), c.v.data(), kl, scale, &sh,
                       ar, bytes);
  };
  af_sdpa_shape bad = s;
  bad.num_kv_heads = 3;
  EXPECT_EQ(call(bad, nullptr, 0.3f, ws, arena.data()), AF_ERR_SHAPE);
  bad = s;
  bad.head_dim = 0;
  EXPECT_EQ(call(bad, nullptr, 0.3f, ws, arena.data()), AF_ERR_SHAPE);
  EXPECT_EQ(af_sdpa_f32_workspace_bytes(&bad), 0u);
  bad = s;
  bad.causal = (af_causal)7;
  EXPECT_EQ(call(bad, nullptr, 0.3f, ws, arena.data()), AF_ERR_PARAM);
  bad = s;
  bad.q_len = 70000;
  EXPECT_EQ(call(bad, nullptr, 0.3f, ws, arena.data()), AF_ERR_SHAPE);
  EXPECT_EQ(call(s, nullptr, 0.3f, ws - 4, arena.data()), AF_ERR_ARENA);
  EXPECT_EQ(call(s, nullptr, 0.3f, ws, reinterpret_cast<char*>(arena.data()) + 1), AF_ERR_ARENA);
  EXPECT_EQ(call(s, nullptr, 0.f, ws, arena.data()), AF_ERR_PARAM);
  EXPECT_EQ(call(s, nullptr, NAN, ws, arena.data()), AF_ERR_PARAM);
  EXPECT_EQ(call(s, nullptr, INFINITY, ws, arena.data()), AF_ERR_PARAM);
  const int32_t kl_bad[1] = {5};
  EXPECT_EQ(call(s, kl_bad, 0.3f, ws, arena.data()), AF_ERR_PARAM);
  EXPECT_EQ(call(s, nullptr, 0.3f, ws, nullptr), AF_ERR_NULL);
  EXPECT_EQ(af_sdpa_f32(nullptr, nullptr, c.q.data(), c.k.data(), c.v.data(), nullptr, 0.3f, &s,
                        arena.data(), ws),
            AF_ERR_NULL);
  EXPECT_EQ(af_sdpa_check_shape(nullptr), AF_ERR_NULL);
  for (float x : out) EXPECT_EQ(x, 1.f);
  EXPECT_STREQ(af_status_name(AF_ERR_ARENA), "arena too small");
}

// Decode over the ring buffer == reference SDPA (bottom_right, Lq = 1) over
// the visible positions in order.
TEST(MicroDecode, RingBufferWithAndWithoutWindowMatchesReference) {
  Rng rng(7);
  auto u = [&](Rng& r) { return static_cast<float>(r.Uniform(-1.5f, 1.5f)); };
  const int H = 4, Hkv = 2, D = 8, Dv = 5;
  for (int window : {0, 5, 16}) {
    const int cap = window == 0 ? 40 : (window == 16 ? 16 : 7);
    std::vector<float> ks(size_t(Hkv) * cap * D), vs(size_t(Hkv) * cap * Dv);
    af_kv_cache kc;
    ASSERT_EQ(af_kv_cache_init(&kc, ks.data(), vs.data(), Hkv, D, Dv, cap, window), AF_OK);
    std::vector<float> all_k, all_v;  // [pos][Hkv][D]
    for (int pos = 0; pos < 40; ++pos) {
      std::vector<float> kn(Hkv * D), vn(Hkv * Dv), q(H * D);
      for (auto* t : {&kn, &vn, &q})
        for (auto& x : *t) x = u(rng);
      ASSERT_EQ(af_kv_cache_append(&kc, kn.data(), vn.data()), AF_OK);
      all_k.insert(all_k.end(), kn.begin(), kn.end());
      all_v.insert(all_v.end(), vn.begin(), vn.end());
      std::vector<float> out(H * Dv), lse(H);
      std::vector<uint32_t> arena(af_decode_f32_workspace_bytes(&kc, H) / 4);
      ASSERT_EQ(af_decode_f32(out.data(), lse.data(), q.data(), &kc, H, 0.4f, arena.data(),
                              arena.size() * 4),
                AF_OK);
      const int len = pos + 1, first = window > 0 ? std::max(0, len - window) : 0, n = len - first;
      Case c;
      c.s = {1, H, Hkv, 1, n, D, Dv, AF_CAUSAL_BOTTOM_RIGHT};
      c.scale = 0.4f;
      c.q = q;
      c.k.resize(size_t(Hkv) * n * D);
      c.v.resize(size_t(Hkv) * n * Dv);
      for (int g = 0; g < Hkv; ++g)
        for (int j = 0; j < n; ++j) {
          for (int d = 0; d < D; ++d) c.k[(g * n + j) * D + d] = all_k[((first + j) * Hkv + g) * D + d];
          for (int d = 0; d < Dv; ++d) c.v[(g * n + j) * Dv + d] = all_v[((first + j) * Hkv + g) * Dv + d];
        }
      std::vector<double> ro, rl;
      Reference(c, &ro, &rl);
      for (int i = 0; i < H * Dv; ++i) ASSERT_NEAR(out[i], ro[i], 2e-5) << "window " << window << " pos " << pos;
      for (int i = 0; i < H; ++i) ASSERT_NEAR(lse[i], rl[i], 2e-5);
    }
  }
  // Without a window, a full cache refuses to grow.
  std::vector<float> ks(8), vs(8), kn(8), vn(8);
  af_kv_cache kc;
  ASSERT_EQ(af_kv_cache_init(&kc, ks.data(), vs.data(), 1, 8, 8, 1, 0), AF_OK);
  EXPECT_EQ(af_kv_cache_append(&kc, kn.data(), vn.data()), AF_OK);
  EXPECT_EQ(af_kv_cache_append(&kc, kn.data(), vn.data()), AF_ERR_FULL);
  EXPECT_EQ(af_kv_cache_init(&kc, ks.data(), vs.data(), 1, 8, 8, 1, 2), AF_ERR_PARAM);
}

// ------------------------------------------------------------ golden cases --


// -------------------------------------------------------------------- MHA --

struct MhaCase {
  af_mha_shape s;
  std::vector<float> xq, xk, xv, wq, wk, wv, wo, bq, bk, bv, bo;
  std::vector<int32_t> kv_lens;
  float scale;
};

TEST(MicroMha, MatchesReferenceMhaWithGqaCrossCausalKvLens) {
  Rng rng(21);
  auto u = [&](Rng& r) { return static_cast<float>(r.Uniform(-1.f, 1.f)); };
  auto fill = [&](std::vector<float>* v, size_t n) {
    v->resize(n);
    for (auto& x : *v) x = u(rng);
  };
  int n = 0;
  for (int it = 0; it < 24; ++it) {
    MhaCase c;
    const int H = it % 2 ? 4 : 2, Hkv = it % 3 == 0 ? 1 : H, dh = 3 + it % 5, E = H * dh;
    const int Lq = 1 + (it * 7) % 11, Lk = (it % 4 == 1) ? Lq : 1 + (it * 5) % 13;
    c.s = {2, Lq, Lk, E, H, Hkv, (af_causal)(it % 3)};
    c.scale = 1.f / std::sqrt(float(dh));
    fill(&c.xq, size_t(2) * Lq * E);
    fill(&c.xk, size_t(2) * Lk * E);
    if (it % 4 == 1) c.xk = c.xq;  // self-attention
    fill(&c.xv, size_t(2) * Lk * E);
    fill(&c.wq, size_t(E) * E);
    fill(&c.wk, size_t(Hkv) * dh * E);
    fill(&c.wv, size_t(Hkv) * dh * E);
    fill(&c.wo, size_t(E) * E);
    const bool bias = it % 2 == 0;
    if (bias) {
      fill(&c.bq, E);
      fill(&c.bk, size_t(Hkv) * dh);
      fill(&c.bv, size_t(Hkv) * dh);
      fill(&c.bo, E);
    }
    if (it % 5 == 0) c.kv_lens = {int32_t(Lk / 2), int32_t(Lk)};
    // reference
    std::vector<double> ref(size_t(2) * Lq * E);
    reference::MhaWeights w;
    auto V = [](std::vector<float>& x, Shape sh) { return MakeView(x.data(), DType::kF32, sh); };
    w.w_q = V(c.wq, {E, E});
    w.w_k = V(c.wk, {Hkv * dh, E});
    w.w_v = V(c.wv, {Hkv * dh, E});
    w.w_o = V(c.wo, {E, E});
    if (bias) {
      w.b_q = V(c.bq, {E});
      w.b_k = V(c.bk, {Hkv * dh});
      w.b_v = V(c.bv, {Hkv * dh});
      w.b_o = V(c.bo, {E});
    }
    w.num_heads = H;
    w.num_kv_heads = Hkv;
    SdpaOptions opt;
    opt.causal = ToCausal(c.s.causal);
    opt.scale = c.scale;
    std::vector<int64_t> kl(c.kv_lens.begin(), c.kv_lens.end());
    if (!kl.empty()) opt.kv_lens = MakeView(kl.data(), DType::kI64, {2});
    Status st = reference::Mha(MakeView(ref.data(), DType::kF64, {2, Lq, E}), V(c.xq, {2, Lq, E}),
                               V(c.xk, {2, Lk, E}), V(c.xv, {2, Lk, E}), w, opt);
    ASSERT_TRUE(st.ok()) << st.ToString();
    af_mha_weights_f32 mw = {c.wq.data(), c.wk.data(), c.wv.data(), c.wo.data(),
                             bias ? c.bq.data() : nullptr, bias ? c.bk.data() : nullptr,
                             bias ? c.bv.data() : nullptr, bias ? c.bo.data() : nullptr};
    const size_t ws = af_mha_f32_workspace_bytes(&c.s);
    ASSERT_GT(ws, 0u);
    std::vector<uint32_t> arena(ws / 4 + 8, 0xA5A5A5A5u);
    std::vector<float> out(ref.size());
    ASSERT_EQ(af_mha_f32(out.data(), c.xq.data(), c.xk.data(), c.xv.data(),
                         c.kv_lens.empty() ? nullptr : c.kv_lens.data(), &mw, c.scale, &c.s,
                         arena.data(), ws, nullptr),
              AF_OK);
    for (size_t i = ws / 4; i < arena.size(); ++i) EXPECT_EQ(arena[i], 0xA5A5A5A5u);
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_NEAR(out[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << "case " << it << " elem " << i;
    ++n;
  }
  EXPECT_EQ(n, 24);
  af_mha_shape bad = {1, 2, 2, 10, 4, 4, AF_CAUSAL_NONE};  // 10 % 4 != 0
  EXPECT_EQ(af_mha_f32_workspace_bytes(&bad), 0u);
}

// ----------------------------------------------------------- block pieces --

TEST(MicroNn, LayerNormRmsNormLinearMatchFloat64) {
  Rng rng(8);
  auto u = [&](Rng& r) { return static_cast<float>(r.Uniform(-2.f, 2.f)); };
  const int n = 37, m = 11;
  std::vector<float> x(n), w(n), b(n), y(n), W(size_t(m) * n), bo(m), yo(m);
  for (auto* t : {&x, &w, &b, &W, &bo})
    for (auto& e : *t) e = u(rng);
  double mean = 0, var = 0, ss = 0;
  for (float e : x) mean += e;
  mean /= n;
  for (float e : x) var += (e - mean) * (e - mean), ss += double(e) * e;
  var /= n;
  ASSERT_EQ(af_layernorm_f32(y.data(), x.data(), w.data(), b.data(), n, 1e-5f), AF_OK);
  for (int i = 0; i < n; ++i)
    EXPECT_NEAR(y[i], (x[i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i], 1e-5);
  ASSERT_EQ(af_rmsnorm_f32(y.data(), x.data(), w.data(), n, 1e-6f), AF_OK);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i] / std::sqrt(ss / n + 1e-6) * w[i], 1e-5);
  ASSERT_EQ(af_linear_f32(yo.data(), x.data(), W.data(), bo.data(), n, m), AF_OK);
  for (int o = 0; o < m; ++o) {
    double acc = bo[o];
    for (int i = 0; i < n; ++i) acc += double(W[size_t(o) * n + i]) * x[i];
    EXPECT_NEAR(yo[o], acc, 1e-4);
  }
  EXPECT_EQ(af_linear_f32(x.data(), x.data(), W.data(), nullptr, n, n), AF_ERR_ALIAS);
  EXPECT_EQ(af_layernorm_f32(y.data(), x.data(), nullptr, nullptr, 0, 1e-5f), AF_ERR_SHAPE);
  EXPECT_EQ(af_layernorm_f32(y.data(), x.data(), nullptr, nullptr, n, 0.f), AF_ERR_PARAM);
}

TEST(MicroNnS8, LayerNormAndLinearWithinOneLsbOfFloat64) {
  Rng rng(77);
  auto ux = [&](Rng& r) { return static_cast<int32_t>(static_cast<int64_t>(r.Below(120001)) - 60000); };
  auto ug = [&](Rng& r) { return r.Uniform(0.5, 1.5); };
  auto ub = [&](Rng& r) { return r.Uniform(-0.3, 0.3); };
  const int n = 64;
  const double s_out = 3.0 / 127;  // int8 output scale of the normalised values
  int worst = 0;
  for (int it = 0; it < 50; ++it) {
    std::vector<int32_t> x(n), g(n), b(n);
    std::vector<double> gamma(n), beta(n);
    const int32_t shift = it % 3 == 0 ? 40000 : 0;  // offset rows
    for (int i = 0; i < n; ++i) {
      x[i] = ux(rng) / (1 + it % 7) + shift;
      gamma[i] = ug(rng);
      beta[i] = ub(rng);
      g[i] = int32_t(std::lrint(gamma[i] / s_out * 256));        // G = gamma/s_out * 2^8
      b[i] = int32_t(std::llrint(beta[i] / s_out * 16777216.0));  // B = beta/s_out * 2^24
    }
    std::vector<int8_t> y(n);
    const int32_t eps = 168;  // 1e-5 at the residual scale 2^-12
    ASSERT_EQ(af_layernorm_s8(y.data(), x.data(), g.data(), b.data(), n, eps), AF_OK);
    double mean = 0, var = 0;
    for (int32_t v : x) mean += v;
    mean /= n;
    for (int32_t v : x) var += (v - mean) * (v - mean);
    var /= n;
    for (int i = 0; i < n; ++i) {
      const double want = std::clamp(
          std::nearbyint(((x[i] - mean) / std::sqrt(var + eps) * gamma[i] + beta[i]) / s_out), -128.0, 127.0);
      worst = std::max(worst, int(std::fabs(y[i] - want)));
    }
  }
  EXPECT_LE(worst, 1) << "integer LayerNorm vs float64";
  // Linear: y = sat(round(acc * real)) with real = m * 2^(s-31).
  auto u8 = [&](Rng& r) { return static_cast<int>(static_cast<int64_t>(r.Below(255)) - 127); };
  const int in = 37, out = 9;
  std::vector<int8_t> w(size_t(in) * out), xv(in), y(out);
  std::vector<int32_t> bias(out), r(out, 1000), r0 = r;
  std::vector<af_qmult> m(out);
  std::vector<double> real(out);
  for (auto& e : w) e = int8_t(u8(rng));
  for (auto& e : xv) e = int8_t(u8(rng));
  for (int o = 0; o < out; ++o) {
    bias[o] = u8(rng) * 50;
    real[o] = 1e-4 * (o + 1);
    ASSERT_EQ(af_quantize_multiplier(&m[o], real[o]), AF_OK);
  }
  ASSERT_EQ(af_linear_s8(y.data(), xv.data(), w.data(), bias.data(), m.data(), in, out), AF_OK);
  ASSERT_EQ(af_linear_s8_residual(r.data(), xv.data(), w.data(), bias.data(), m.data(), in, out), AF_OK);
  for (int o = 0; o < out; ++o) {
    int64_t acc = bias[o];
    for (int i = 0; i < in; ++i) acc += int64_t(w[size_t(o) * in + i]) * xv[i];
    const double exact = double(acc) * real[o];
    EXPECT_LE(std::fabs(y[o] - std::clamp(std::nearbyint(exact), -128.0, 127.0)), 1.0) << o;
    EXPECT_LE(std::fabs((r[o] - r0[o]) - exact), 1.0) << o;
  }
  std::vector<int8_t> z = {-3, 0, 5};
  af_relu_s8(z.data(), 3);
  EXPECT_EQ(z, (std::vector<int8_t>{0, 0, 5}));
  EXPECT_EQ(af_linear_s8(xv.data(), xv.data(), w.data(), nullptr, m.data(), in, in), AF_ERR_ALIAS);
  EXPECT_EQ(af_layernorm_s8(y.data(), r.data(), nullptr, nullptr, 3, 1), AF_ERR_NULL);
  EXPECT_EQ(af_layernorm_s8(y.data(), r.data(), r.data(), r.data(), 3, 0), AF_ERR_PARAM);
}

// ------------------------------------------------------------------- int8 --

// Bound of docs/edge.md: |out_int8 - round(ref / so)| <= kS8BoundLsb.
constexpr int kS8BoundLsb = 2;

struct S8Case {
  af_sdpa_shape s;
  std::vector<int8_t> q, k, v;
  std::vector<int32_t> kv_lens;
  float sq, sk, sv, so, scale;
};

// Quantises a random f32 case per tensor (scale = max|x| / 127).
S8Case Quantise(const Case& c) {
  S8Case r;
  r.s = c.s;
  r.kv_lens = c.kv_lens;
  r.scale = c.scale;
  auto quant = [](const std::vector<float>& x, std::vector<int8_t>* q) {
    float mx = 1e-30f;
    for (float a : x) mx = std::max(mx, std::fabs(a));
    const float s = mx / 127.f;
    q->resize(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      (*q)[i] = int8_t(std::lrint(std::clamp(x[i] / s, -127.f, 127.f)));
    return s;
  };
  r.sq = quant(c.q, &r.q);
  r.sk = quant(c.k, &r.k);
  r.sv = quant(c.v, &r.v);
  r.so = r.sv;  // softmax output is a convex combination of v rows
  return r;
}

// Returns the max LSB error against the float64 reference on the dequantised
// inputs; fills *dead_ok whether dead rows are exactly 0.
int S8MaxError(const S8Case& c, int n_scale_heads = 1) {
  Case f;
  f.s = c.s;
  f.kv_lens = c.kv_lens;
  f.scale = c.scale;
  for (int8_t x : c.q) f.q.push_back(x * c.sq);
  for (int8_t x : c.k) f.k.push_back(x * c.sk);
  for (int8_t x : c.v) f.v.push_back(x * c.sv);
  std::vector<double> ro, rl;
  Reference(f, &ro, &rl);
  af_s8_params p;
  std::vector<float> sq(n_scale_heads, c.sq), sk(n_scale_heads, c.sk), sv(n_scale_heads, c.sv),
      so(n_scale_heads, c.so);
  EXPECT_EQ(af_s8_prepare(&p, sq.data(), sk.data(), sv.data(), so.data(), n_scale_heads, c.scale), AF_OK);
  std::vector<int8_t> out(ro.size(), 99);
  const size_t ws = af_sdpa_s8_workspace_bytes(&c.s);
  std::vector<uint32_t> arena(ws / 4 + 8, 0xA5A5A5A5u);
  EXPECT_EQ(af_sdpa_s8(out.data(), c.q.data(), c.k.data(), c.v.data(),
                       c.kv_lens.empty() ? nullptr : c.kv_lens.data(), &p, &c.s, arena.data(), ws),
            AF_OK);
  for (size_t i = ws / 4; i < arena.size(); ++i) EXPECT_EQ(arena[i], 0xA5A5A5A5u);
  int worst = 0;
  for (size_t i = 0; i < ro.size(); ++i) {
    const double want = std::clamp(std::nearbyint(ro[i] / c.so), -128.0, 127.0);
    if (std::isinf(rl[i / c.s.v_dim])) EXPECT_EQ(out[i], 0) << "dead row must be 0";
    worst = std::max(worst, int(std::fabs(out[i] - want)));
  }
  return worst;
}

TEST(MicroS8, FixedPointHelpers) {
  af_qmult m;
  ASSERT_EQ(af_quantize_multiplier(&m, 0.75), AF_OK);
  EXPECT_EQ(m.mult, 1610612736);
  EXPECT_EQ(m.shift, 0);
  EXPECT_EQ(af_s8_mul_by_qmult(1000, m), 750);
  ASSERT_EQ(af_quantize_multiplier(&m, 3.0), AF_OK);
  EXPECT_EQ(af_s8_mul_by_qmult(-7, m), -21);
  EXPECT_EQ(af_quantize_multiplier(&m, -1.0), AF_ERR_PARAM);
  EXPECT_EQ(af_quantize_multiplier(&m, NAN), AF_ERR_PARAM);
  EXPECT_EQ(af_s8_exp2_neg_q15(0), 32767);  // entry 0 fits int16
  EXPECT_EQ(af_s8_exp2_neg_q15(256), 16384);
  EXPECT_EQ(af_s8_exp2_neg_q15(512), 8192);
  EXPECT_EQ(af_s8_exp2_neg_q15(16 * 256), 0);
  for (int u = 0; u < 16 * 256; u += 7) {
    const double want = 32768.0 * std::exp2(-u / 256.0);
    EXPECT_NEAR(af_s8_exp2_neg_q15(u), want, 1.0) << u;
  }
}

TEST(MicroS8, RandomCasesWithinBound) {
  Rng rng(2024);
  const af_causal modes[] = {AF_CAUSAL_NONE, AF_CAUSAL_TOP_LEFT, AF_CAUSAL_BOTTOM_RIGHT};
  int worst = 0, n = 0;
  for (int it = 0; it < 300; ++it) {
    auto L = [&](Rng& r) { return static_cast<int>(1 + r.Below(80)); };
    auto Dd = [&](Rng& r) { return static_cast<int>(1 + r.Below(64)); };
    const int g = 1 << (it % 3);
    af_sdpa_shape s{1 + it % 2, 4, 4 / g, L(rng), L(rng), Dd(rng), Dd(rng), modes[it % 3]};
    const float amp = it % 5 == 0 ? 4.f : 1.f;
    Case c = RandomCase(rng, s, amp, it % 4 == 0);
    worst = std::max(worst, S8MaxError(Quantise(c), it % 2 ? 4 : 1));
    ++n;
  }
  RecordProperty("s8_random_worst_lsb", worst);
  std::printf("int8 random cases: worst error %d LSB over %d cases\n", worst, n);
  EXPECT_LE(worst, kS8BoundLsb);
  EXPECT_EQ(n, 300);
}

TEST(MicroS8, WorstCases) {
  Rng rng(99);
  // Large logits: |q.k*scale| up to ~ 127*127*64/8 real units are irrelevant,
  // the real logits are what matters: amp 8 gives logits ~ +-500.
  {
    af_sdpa_shape s{1, 2, 2, 16, 64, 64, 32, AF_CAUSAL_NONE};
    EXPECT_LE(S8MaxError(Quantise(RandomCase(rng, s, 8.f))), kS8BoundLsb) << "large logits";
  }
  // Long rows (many tiles, weight shift > 0 beyond 511 keys).
  for (int lk : {511, 512, 2000}) {
    af_sdpa_shape s{1, 1, 1, 3, lk, 32, 32, AF_CAUSAL_BOTTOM_RIGHT};
    EXPECT_LE(S8MaxError(Quantise(RandomCase(rng, s, 1.f))), kS8BoundLsb) << "long row " << lk;
  }
  // One dominant key, placed in the last tile so every earlier tile is
  // rescaled; and values at the int8 extremes.
  {
    af_sdpa_shape s{1, 1, 1, 4, 200, 16, 16, AF_CAUSAL_NONE};
    Case c = RandomCase(rng, s, 0.3f);
    for (int d = 0; d < 16; ++d) {
      c.k[size_t(190) * 16 + d] = c.q[d] > 0 ? 3.f : -3.f;
      c.v[size_t(190) * 16 + d] = d % 2 ? 1.f : -1.f;
    }
    EXPECT_LE(S8MaxError(Quantise(c)), kS8BoundLsb) << "dominant key";
  }
  // Increasing scores: the max rises in every tile (maximum rescaling).
  {
    af_sdpa_shape s{1, 1, 1, 1, 320, 8, 8, AF_CAUSAL_NONE};
    Case c = RandomCase(rng, s, 1.f);
    for (int d = 0; d < 8; ++d) c.q[d] = 1.f;
    for (int j = 0; j < 320; ++j)
      for (int d = 0; d < 8; ++d) c.k[size_t(j) * 8 + d] = 0.01f * j;
    EXPECT_LE(S8MaxError(Quantise(c)), kS8BoundLsb) << "rising max";
  }
  // Fully masked rows (kv_lens 0, and bottom_right rows above the diagonal).
  {
    af_sdpa_shape s{2, 2, 1, 9, 4, 8, 8, AF_CAUSAL_BOTTOM_RIGHT};
    Case c = RandomCase(rng, s, 1.f);
    c.kv_lens = {0, 3};
    EXPECT_LE(S8MaxError(Quantise(c)), kS8BoundLsb) << "dead rows";
  }
}

TEST(MicroS8, ErrorsAreCodes) {
  af_sdpa_shape s{1, 2, 1, 4, 4, 8, 8, AF_CAUSAL_NONE};
  std::vector<int8_t> q(64), k(32), v(32), out(64, 5);
  af_s8_params p;
  const float one = 1.f, small = 1.f / 64;
  // r = sq*sk*scale*log2(e)*256 >= 128 is refused (exp_mult shift above 8).
  EXPECT_EQ(af_s8_prepare(&p, &one, &one, &one, &one, 1, 0.35f), AF_ERR_PARAM);
  ASSERT_EQ(af_s8_prepare(&p, &small, &small, &one, &one, 1, 0.35f), AF_OK);
  std::vector<uint32_t> arena(64);
  const size_t ws = af_sdpa_s8_workspace_bytes(&s);
  EXPECT_EQ(af_sdpa_s8(out.data(), q.data(), k.data(), v.data(), nullptr, &p, &s, arena.data(), ws - 1), AF_ERR_ARENA);
  p.num_scale_heads = 3;
  EXPECT_EQ(af_sdpa_s8(out.data(), q.data(), k.data(), v.data(), nullptr, &p, &s, arena.data(), ws), AF_ERR_PARAM);
  const float zero = 0.f;
  EXPECT_EQ(af_s8_prepare(&p, &one, &zero, &one, &one, 1, 0.35f), AF_ERR_PARAM);
  EXPECT_EQ(af_s8_prepare(&p, &one, &one, &one, &one, 17, 0.35f), AF_ERR_PARAM);
  for (int8_t x : out) EXPECT_EQ(x, 5);
}

}  // namespace
}  // namespace attnflow
