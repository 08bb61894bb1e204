// micro_decoder_test.cc — host tests of the micro library's decoder pieces
// (include/attnflow/micro.h): the column value layout (AF_V_COLS) of the
// int8 SDPA, the int8 KV cache and its integer decode, RoPE (f32 and Q15,
// both layouts), the integer RMSNorm, table-based activations and SwiGLU
// (f32 and int8), against float64 oracles (reference::Sdpa, nn::ApplyRope,
// std::exp/std::erf in the test) and exact properties (the integer sums of
// the two value layouts are the same numbers, so the outputs are the same
// bits).
//
// Invariants: expected values never come from the micro library; int8
// expectations are float64 on the dequantised inputs, rounded once; bounds
// are the ones docs/edge.md derives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/micro.h"
#include "attnflow/nn.h"
#include "attnflow/reference.h"
#include "attnflow/rng.h"

namespace attnflow {
namespace {

std::vector<int8_t> RandS8(Rng& rng, size_t n, int lo = -127, int hi = 127) {
  std::vector<int8_t> v(n);
  for (auto& x : v) x = int8_t(lo + int(rng.Below(uint64_t(hi - lo + 1))));
  return v;
}

// [B,Hkv,Lk,Dv] -> [B,Hkv,Dv,Lk]
std::vector<int8_t> ToCols(const std::vector<int8_t>& v, int B, int Hkv, int Lk, int Dv) {
  std::vector<int8_t> t(v.size());
  for (int b = 0; b < B * Hkv; ++b)
    for (int j = 0; j < Lk; ++j)
      for (int d = 0; d < Dv; ++d)
        t[(size_t(b) * Dv + d) * Lk + j] = v[(size_t(b) * Lk + j) * Dv + d];
  return t;
}

TEST(MicroColsLayout, SameBitsAsRowsForEveryOption) {
  Rng rng(31);
  int n = 0;
  for (int it = 0; it < 120; ++it) {
    const int g = 1 << (it % 3);
    af_sdpa_shape s{int32_t(1 + it % 2), 4, 4 / g, int32_t(1 + rng.Below(30)),
                    int32_t(1 + rng.Below(70)), int32_t(1 + rng.Below(40)),
                    int32_t(1 + rng.Below(20)), af_causal(it % 3)};
    if (it % 7 == 0) s.head_dim = s.v_dim = 64;
    const auto q = RandS8(rng, size_t(s.batch) * s.num_heads * s.q_len * s.head_dim);
    const auto k = RandS8(rng, size_t(s.batch) * s.num_kv_heads * s.kv_len * s.head_dim);
    const auto v = RandS8(rng, size_t(s.batch) * s.num_kv_heads * s.kv_len * s.v_dim);
    const auto vt = ToCols(v, s.batch, s.num_kv_heads, s.kv_len, s.v_dim);
    std::vector<uint8_t> mask(size_t(s.q_len) * s.kv_len);
    for (auto& m : mask) m = rng.Below(5) != 0;
    af_sdpa_opts o = AF_SDPA_OPTS_INIT;
    if (it % 2) {
      o.mask_type = AF_MASK_BOOL;
      o.mask = mask.data();
      o.mask_shape[2] = s.q_len;
      o.mask_shape[3] = s.kv_len;
    }
    if (it % 3 == 1) o.window_left = int32_t(rng.Below(20));
    const float sq = 1.f / 64, sk = 1.f / 64, sv = 1.f / 100, so = 1.f / 100;
    af_s8_params p;
    ASSERT_EQ(af_s8_prepare(&p, &sq, &sk, &sv, &so, 1, 0.3f), AF_OK);
    const size_t ws = af_sdpa_s8_workspace_bytes(&s), no = size_t(s.batch) * s.num_heads * s.q_len * s.v_dim;
    std::vector<uint32_t> arena(ws / 4 + 8, 0xA5A5A5A5u);
    std::vector<int8_t> a(no, 7), b(no, 9);
    ASSERT_EQ(af_sdpa_s8_ex(a.data(), q.data(), k.data(), v.data(), nullptr, &p, &s, &o,
                            arena.data(), ws),
              AF_OK);
    o.v_layout = AF_V_COLS;
    ASSERT_EQ(af_sdpa_s8_ex(b.data(), q.data(), k.data(), vt.data(), nullptr, &p, &s, &o,
                            arena.data(), ws),
              AF_OK);
    for (size_t i = ws / 4; i < arena.size(); ++i) ASSERT_EQ(arena[i], 0xA5A5A5A5u);
    ASSERT_EQ(a, b) << "case " << it;
    ++n;
  }
  EXPECT_EQ(n, 120);
  // The f32 path refuses the column layout.
  af_sdpa_shape s{1, 1, 1, 1, 4, 4, 4, AF_CAUSAL_NONE};
  af_sdpa_opts o = AF_SDPA_OPTS_INIT;
  o.v_layout = AF_V_COLS;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 1), AF_OK);
}

// ------------------------------------------------------------ int8 cache --

TEST(MicroDecodeS8, MatchesTheFloat64ReferenceOverTheRing) {
  Rng rng(17);
  const int32_t H = 4, Hkv = 2, D = 16, Dv = 12;
  const float sq = 1.f / 40, sk = 1.f / 50, sv = 1.f / 60, so = 1.f / 60, scale = 0.25f;
  af_s8_params p;
  ASSERT_EQ(af_s8_prepare(&p, &sq, &sk, &sv, &so, 1, scale), AF_OK);
  int worst = 0, steps = 0;
  for (int32_t cap : {8, 33, 64}) {
    for (int32_t window : {0, 5, cap}) {
      for (bool alibi : {false, true}) {
        std::vector<int8_t> ks(size_t(Hkv) * cap * D), vs(size_t(Hkv) * Dv * cap);
        af_kv_cache_s8 c;
        ASSERT_EQ(af_kv_cache_s8_init(&c, ks.data(), vs.data(), Hkv, D, Dv, cap, window), AF_OK);
        std::vector<double> sl(H);
        AlibiSlopes(H, sl.data());
        std::vector<float> slf(sl.begin(), sl.end());
        std::vector<int32_t> a8(H);
        ASSERT_EQ(af_s8_alibi_prepare(a8.data(), slf.data(), H, &sq, &sk, 1, scale), AF_OK);
        std::vector<int8_t> hk, hv;  // history [T, Hkv, D|Dv]
        const int T = window == 0 ? cap : 2 * cap + 3;
        for (int t = 0; t < T; ++t) {
          const auto kn = RandS8(rng, size_t(Hkv) * D), vn = RandS8(rng, size_t(Hkv) * Dv),
                     q = RandS8(rng, size_t(H) * D);
          ASSERT_EQ(af_kv_cache_s8_append(&c, kn.data(), vn.data()), AF_OK);
          hk.insert(hk.end(), kn.begin(), kn.end());
          hv.insert(hv.end(), vn.begin(), vn.end());
          std::vector<int8_t> out(size_t(H) * Dv, 99);
          const size_t ws = af_decode_s8_workspace_bytes(&c, H);
          std::vector<uint32_t> arena(ws / 4 + 4, 0xA5A5A5A5u);
          ASSERT_EQ(af_decode_s8(out.data(), q.data(), &c, H, &p, alibi ? a8.data() : nullptr,
                                 arena.data(), ws),
                    AF_OK);
          for (size_t i = ws / 4; i < arena.size(); ++i) ASSERT_EQ(arena[i], 0xA5A5A5A5u);
          // float64 reference: the last `window` positions as one bottom-right row.
          const int32_t L = t + 1, first = window > 0 && L > window ? L - window : 0, n = L - first;
          std::vector<double> fq(size_t(H) * D), fk(size_t(Hkv) * n * D), fv(size_t(Hkv) * n * Dv),
              ref(size_t(H) * Dv);
          for (size_t i = 0; i < fq.size(); ++i) fq[i] = q[i] * double(sq);
          for (int32_t j = 0; j < n; ++j)
            for (int32_t g = 0; g < Hkv; ++g) {
              for (int32_t d = 0; d < D; ++d)
                fk[(size_t(g) * n + j) * D + d] = hk[(size_t(first + j) * Hkv + g) * D + d] * double(sk);
              for (int32_t d = 0; d < Dv; ++d)
                fv[(size_t(g) * n + j) * Dv + d] = hv[(size_t(first + j) * Hkv + g) * Dv + d] * double(sv);
            }
          SdpaOptions opt;
          opt.causal = Causal::kBottomRight;
          opt.scale = scale;
          if (alibi) opt.alibi_slopes = MakeView(slf.data(), DType::kF32, {H});
          ASSERT_TRUE(reference::Sdpa(MakeView(ref.data(), DType::kF64, {1, H, 1, Dv}), TensorView{},
                                      MakeView(fq.data(), DType::kF64, {1, H, 1, D}),
                                      MakeView(fk.data(), DType::kF64, {1, Hkv, n, D}),
                                      MakeView(fv.data(), DType::kF64, {1, Hkv, n, Dv}), opt)
                          .ok());
          for (size_t i = 0; i < ref.size(); ++i) {
            const double want = std::clamp(std::nearbyint(ref[i] / so), -128.0, 127.0);
            worst = std::max(worst, int(std::fabs(out[i] - want)));
          }
          ++steps;
        }
      }
    }
  }
  std::printf("int8 decode over the ring: worst error %d LSB over %d steps\n", worst, steps);
  EXPECT_LE(worst, AF_S8_BOUND_LSB);
}

TEST(MicroDecodeS8, WithoutWrapItIsTheSdpaKernelBitForBit) {
  // Positions 0..L-1 in one ring segment: the same tiles as af_sdpa_s8 with
  // one query row over L keys, so the same bits.
  Rng rng(5);
  const int32_t H = 2, Hkv = 1, D = 64, Dv = 64, L = 77;
  std::vector<int8_t> ks(size_t(Hkv) * 128 * D), vs(size_t(Hkv) * Dv * 128);
  af_kv_cache_s8 c;
  ASSERT_EQ(af_kv_cache_s8_init(&c, ks.data(), vs.data(), Hkv, D, Dv, 128, 0), AF_OK);
  const auto k = RandS8(rng, size_t(L) * D), v = RandS8(rng, size_t(L) * Dv),
             q = RandS8(rng, size_t(H) * D);
  for (int j = 0; j < L; ++j) ASSERT_EQ(af_kv_cache_s8_append(&c, &k[size_t(j) * D], &v[size_t(j) * Dv]), AF_OK);
  const float sq = 1.f / 64, sv = 1.f / 100;
  af_s8_params p;
  ASSERT_EQ(af_s8_prepare(&p, &sq, &sq, &sv, &sv, 1, 0.125f), AF_OK);
  std::vector<int8_t> a(size_t(H) * Dv), b(size_t(H) * Dv);
  std::vector<uint32_t> arena(1024);
  ASSERT_EQ(af_decode_s8(a.data(), q.data(), &c, H, &p, nullptr, arena.data(), 4096), AF_OK);
  af_sdpa_shape s{1, H, Hkv, 1, L, D, Dv, AF_CAUSAL_NONE};
  ASSERT_EQ(af_sdpa_s8(b.data(), q.data(), k.data(), v.data(), nullptr, &p, &s, arena.data(), 4096),
            AF_OK);
  EXPECT_EQ(a, b);
  // With a softcap and ALiBi: af_decode_s8_softcap is af_sdpa_s8_softcap_ex
  // with softcap_s8 and alibi_s8 on the bottom-right row, bit for bit; and the
  // cap changes the output (the softcap path is taken at all).
  int32_t c8[8], a8[2];
  const float slopes[2] = {0.25f, 0.0625f};
  ASSERT_EQ(af_s8_softcap_prepare(c8, 0.6f, H, &sq, &sq, 1, 0.125f), AF_OK);
  ASSERT_EQ(af_s8_alibi_prepare(a8, slopes, H, &sq, &sq, 1, 0.125f), AF_OK);
  std::vector<int8_t> d(size_t(H) * Dv), e(size_t(H) * Dv);
  ASSERT_EQ(af_decode_s8_softcap(d.data(), q.data(), &c, H, &p, a8, c8, arena.data(), 4096), AF_OK);
  af_sdpa_opts o = AF_SDPA_OPTS_INIT;
  o.softcap_s8 = c8;
  o.alibi_s8 = a8;
  s.causal = AF_CAUSAL_BOTTOM_RIGHT;
  ASSERT_EQ(af_sdpa_s8_softcap_ex(e.data(), q.data(), k.data(), v.data(), nullptr, &p, &s, &o,
                                  arena.data(), 4096),
            AF_OK);
  EXPECT_EQ(d, e);
  // The lean entry point does not link the softcap: it refuses one.
  EXPECT_EQ(af_sdpa_s8_ex(e.data(), q.data(), k.data(), v.data(), nullptr, &p, &s, &o,
                          arena.data(), 4096),
            AF_ERR_PARAM);
  std::vector<int8_t> f(size_t(H) * Dv);
  ASSERT_EQ(af_decode_s8(f.data(), q.data(), &c, H, &p, a8, arena.data(), 4096), AF_OK);
  EXPECT_NE(d, f);
  c8[1] = 40;  // an invalid shift is refused
  EXPECT_EQ(af_decode_s8_softcap(d.data(), q.data(), &c, H, &p, a8, c8, arena.data(), 4096),
            AF_ERR_PARAM);
}

TEST(MicroDecodeS8, TheCacheStructIsValidated) {
  std::vector<int8_t> ks(2 * 8 * 4), vs(2 * 4 * 8), kn(8), q(8), out(8, 3);
  af_kv_cache_s8 c;
  ASSERT_EQ(af_kv_cache_s8_init(&c, ks.data(), vs.data(), 2, 4, 4, 8, 0), AF_OK);
  for (int t = 0; t < 8; ++t) ASSERT_EQ(af_kv_cache_s8_append(&c, kn.data(), kn.data()), AF_OK);
  EXPECT_EQ(af_kv_cache_s8_append(&c, kn.data(), kn.data()), AF_ERR_FULL);
  af_s8_params p;
  const float s = 1.f / 64, one = 1.f;
  ASSERT_EQ(af_s8_prepare(&p, &s, &s, &one, &one, 1, 0.5f), AF_OK);
  std::vector<uint32_t> arena(64);
  af_kv_cache_s8 bad = c;
  bad.window = 9;
  EXPECT_EQ(af_decode_s8(out.data(), q.data(), &bad, 2, &p, nullptr, arena.data(), 256), AF_ERR_PARAM);
  bad = c;
  bad.length = 9;
  EXPECT_EQ(af_decode_s8(out.data(), q.data(), &bad, 2, &p, nullptr, arena.data(), 256), AF_ERR_PARAM);
  bad = c;
  bad.num_kv_heads = 0;
  EXPECT_EQ(af_decode_s8(out.data(), q.data(), &bad, 2, &p, nullptr, arena.data(), 256), AF_ERR_SHAPE);
  EXPECT_EQ(af_decode_s8(out.data(), q.data(), &c, 3, &p, nullptr, arena.data(), 256), AF_ERR_SHAPE);
  EXPECT_EQ(af_decode_s8(out.data(), q.data(), &c, 2, &p, nullptr, arena.data(), 4), AF_ERR_ARENA);
  for (int8_t x : out) EXPECT_EQ(x, 3);
}

// ------------------------------------------------------------------ RoPE --

TEST(MicroRope, F32AndQ15MatchFloat64InBothLayouts) {
  Rng rng(3);
  const int32_t H = 3, D = 16;
  for (auto layout : {AF_ROPE_HALF, AF_ROPE_INTERLEAVED}) {
    for (int32_t pos : {0, 1, 7, 100, 1000}) {
      std::vector<float> x(size_t(H) * D);
      for (auto& e : x) e = float(rng.Uniform(-1, 1));
      std::vector<double> xd(x.begin(), x.end()), ref(x.size());
      nn::RopeOptions ro;
      ro.layout = layout == AF_ROPE_HALF ? nn::RopeLayout::kHalf : nn::RopeLayout::kInterleaved;
      ro.theta = 10000.0;
      ASSERT_TRUE(nn::ApplyRope(MakeView(ref.data(), DType::kF64, {1, H, 1, D}),
                                MakeView(xd.data(), DType::kF64, {1, H, 1, D}), TensorView{}, pos, ro)
                      .ok());
      std::vector<float> c(D / 2), s(D / 2);
      ASSERT_EQ(af_rope_table_f32(c.data(), s.data(), pos, D, 10000.0), AF_OK);
      std::vector<float> y = x;
      ASSERT_EQ(af_rope_f32(y.data(), H, D, c.data(), s.data(), layout), AF_OK);
      for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 3e-7) << pos;
      // int8: a scale calibrated on pair magnitudes (no saturation), error
      // <= 0.5 LSB of rounding + the Q15 table (<= 2^-15 * 2 * 127 LSB).
      double mx = 0;
      for (int h = 0; h < H; ++h)
        for (int i = 0; i < D / 2; ++i) {
          const int a = layout == AF_ROPE_HALF ? i : 2 * i, b = layout == AF_ROPE_HALF ? i + D / 2 : 2 * i + 1;
          mx = std::max(mx, std::hypot(double(x[h * D + a]), double(x[h * D + b])));
        }
      const double sc = mx / 127.0;
      std::vector<int8_t> x8(x.size());
      for (size_t i = 0; i < x.size(); ++i) x8[i] = int8_t(std::lrint(x[i] / sc));
      std::vector<double> x8d(x8.begin(), x8.end()), ref8(x.size());
      ASSERT_TRUE(nn::ApplyRope(MakeView(ref8.data(), DType::kF64, {1, H, 1, D}),
                                MakeView(x8d.data(), DType::kF64, {1, H, 1, D}), TensorView{}, pos, ro)
                      .ok());
      std::vector<int16_t> c15(D / 2), s15(D / 2);
      ASSERT_EQ(af_rope_table_s8(c15.data(), s15.data(), pos, D, 10000.0), AF_OK);
      ASSERT_EQ(af_rope_s8(x8.data(), H, D, c15.data(), s15.data(), layout), AF_OK);
      for (size_t i = 0; i < x8.size(); ++i) ASSERT_NEAR(x8[i], ref8[i], 0.5 + 0.01) << pos << " " << i;
    }
  }
  std::vector<float> x(6);
  float c[3], s[3];
  EXPECT_EQ(af_rope_f32(x.data(), 1, 5, c, s, AF_ROPE_HALF), AF_ERR_SHAPE);  // odd head_dim
  EXPECT_EQ(af_rope_f32(x.data(), 1, 6, c, s, af_rope_layout(2)), AF_ERR_PARAM);
}

// ------------------------------------------------------ norms, activations --

TEST(MicroRmsNormS8, WithinOneLsbOfFloat64) {
  Rng rng(9);
  for (int it = 0; it < 50; ++it) {
    const int32_t n = 8 + int32_t(rng.Below(120));
    const float s_x = 1.f / 4096, s_out = 0.02f, eps = 1e-5f;
    std::vector<int32_t> x(n);
    const double amp = it % 3 == 0 ? 50000 : 3000;
    for (auto& e : x) e = int32_t(rng.Uniform(-amp, amp));
    std::vector<float> gamma(n);
    for (auto& g : gamma) g = float(rng.Uniform(0.2, 1.5));
    std::vector<int32_t> g(n);
    int32_t eps_int = 0;
    ASSERT_EQ(af_rmsnorm_s8_fold(g.data(), &eps_int, gamma.data(), n, s_x, s_out, eps), AF_OK);
    std::vector<int8_t> y(n);
    ASSERT_EQ(af_rmsnorm_s8(y.data(), x.data(), g.data(), n, eps_int), AF_OK);
    double ms = 0;
    for (int32_t v : x) ms += double(v) * s_x * double(v) * s_x;
    ms /= n;
    for (int32_t i = 0; i < n; ++i) {
      const double want = std::clamp(x[i] * double(s_x) / std::sqrt(ms + eps) * gamma[i] / s_out, -128.0, 127.0);
      ASSERT_NEAR(y[i], want, 1.0) << "case " << it << " i " << i;
    }
  }
}

TEST(MicroActivations, F32MatchesFloat64) {
  std::vector<float> x, g, u;
  for (int i = -400; i <= 400; ++i) x.push_back(i * 0.05f);
  std::vector<float> s = x, e = x, sw(x.size());
  ASSERT_EQ(af_silu_f32(s.data(), int32_t(s.size())), AF_OK);
  ASSERT_EQ(af_gelu_f32(e.data(), int32_t(e.size())), AF_OK);
  std::vector<float> up(x.size(), 0.75f);
  ASSERT_EQ(af_swiglu_f32(sw.data(), x.data(), up.data(), int32_t(x.size())), AF_OK);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double silu = v / (1 + std::exp(-v)), gelu = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    ASSERT_NEAR(s[i], silu, 2e-6 * (1 + std::fabs(silu))) << v;
    ASSERT_NEAR(e[i], gelu, 2e-6 * (1 + std::fabs(gelu))) << v;
    ASSERT_NEAR(sw[i], silu * 0.75, 2e-6 * (1 + std::fabs(silu))) << v;
  }
}

TEST(MicroActivations, Int8TablesAndSwiGluWithinOneLsb) {
  const float s_in = 0.05f, s_act = 0.04f, s_up = 0.03f, s_out = 0.01f;
  for (af_act act : {AF_ACT_SILU, AF_ACT_GELU, AF_ACT_RELU}) {
    int8_t table[256];
    ASSERT_EQ(af_act_table_s8(table, act, s_in, s_act), AF_OK);
    for (int x = -128; x < 128; ++x) {
      const double v = x * double(s_in);
      const double y = act == AF_ACT_SILU   ? v / (1 + std::exp(-v))
                       : act == AF_ACT_GELU ? 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))
                                            : std::max(v, 0.0);
      ASSERT_NEAR(table[x + 128], std::clamp(y / s_act, -128.0, 127.0), 0.5 + 1e-9) << act << " " << x;
    }
    std::vector<int8_t> xs(256);
    for (int i = 0; i < 256; ++i) xs[i] = int8_t(i - 128);
    ASSERT_EQ(af_act_s8(xs.data(), 256, table), AF_OK);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(xs[i], table[i]);
  }
  int8_t silu[256];
  ASSERT_EQ(af_act_table_s8(silu, AF_ACT_SILU, s_in, s_act), AF_OK);
  af_qmult m;
  ASSERT_EQ(af_quantize_multiplier(&m, double(s_act) * s_up / s_out), AF_OK);
  std::vector<int8_t> gate(256), up(256), out(256);
  for (int i = 0; i < 256; ++i) {
    gate[i] = int8_t(i - 128);
    up[i] = int8_t((i * 37) % 255 - 127);
  }
  ASSERT_EQ(af_swiglu_s8(out.data(), gate.data(), up.data(), 256, silu, m), AF_OK);
  for (int i = 0; i < 256; ++i) {
    // The table's value is the quantised silu; the product is exact, one
    // requantisation: within 0.5 LSB (+ the multiplier's 2^-31).
    const double want = std::clamp(double(silu[i]) * s_act * up[i] * s_up / s_out, -128.0, 127.0);
    ASSERT_NEAR(out[i], want, 0.5 + 1e-6) << i;
  }
}

// --------------------------------------------------------------- int8 MHA --

TEST(MicroMhaS8, EveryStageWithinItsBoundOfFloat64TeacherForced) {
  // Each stage against float64 computed from the library's own previous
  // stage: projections and the output projection within 1 LSB (one rounding
  // through a 31-bit multiplier), heads_out within the SDPA bound.
  Rng rng(44);
  for (int it = 0; it < 30; ++it) {
    const int32_t B = 1 + it % 2, H = it % 2 ? 4 : 2, Hkv = it % 3 == 0 ? 1 : H, dh = 4 + it % 5,
                  E = H * dh, Lq = 1 + int32_t(rng.Below(9)), Lk = 1 + int32_t(rng.Below(12));
    af_mha_shape ms{B, Lq, Lk, E, H, Hkv, af_causal(it % 3)};
    const auto xq = RandS8(rng, size_t(B) * Lq * E), xk = RandS8(rng, size_t(B) * Lk * E),
               xv = RandS8(rng, size_t(B) * Lk * E);
    const auto wq = RandS8(rng, size_t(E) * E), wk = RandS8(rng, size_t(Hkv) * dh * E),
               wv = RandS8(rng, size_t(Hkv) * dh * E), wo = RandS8(rng, size_t(E) * E);
    // Scales: x 1/64, weights 1/128 per tensor (the per-row multipliers
    // carry them), q/k/v/heads_out/out chosen so values use the int8 range.
    const double sx = 1.0 / 64, sw = 1.0 / 128;
    const double sq = sx * sw * 127 * std::sqrt(double(E)) / 100, sk = sq, sv = sq, so_h = sv,
                 s_out = so_h * sw * 127 * std::sqrt(double(E)) / 100;
    auto mult = [](double real, int32_t n) {
      std::vector<af_qmult> m(n);
      for (auto& x : m) EXPECT_EQ(af_quantize_multiplier(&x, real), AF_OK);
      return m;
    };
    const auto mq = mult(sx * sw / sq, E), mk = mult(sx * sw / sk, Hkv * dh),
               mv = mult(sx * sw / sv, Hkv * dh), mo = mult(so_h * sw / s_out, E);
    af_mha_weights_s8 w = {wq.data(), wk.data(), wv.data(), wo.data(), nullptr, nullptr, nullptr,
                           nullptr, mq.data(), mk.data(), mv.data(), mo.data()};
    af_s8_params p;
    const float fq = float(sq), fk = float(sk), fv = float(sv), fo = float(so_h);
    ASSERT_EQ(af_s8_prepare(&p, &fq, &fk, &fv, &fo, 1, float(1 / std::sqrt(double(dh)))), AF_OK);
    std::vector<int8_t> out(size_t(B) * Lq * E), q8(size_t(B) * H * Lq * dh),
        k8(size_t(B) * Hkv * Lk * dh), v8(k8.size()), ho(q8.size()), cat(out.size());
    af_mha_stages_s8 st = {q8.data(), k8.data(), v8.data(), ho.data(), cat.data()};
    const size_t ws = af_mha_s8_workspace_bytes(&ms);
    ASSERT_GT(ws, 0u);
    std::vector<uint32_t> arena(ws / 4 + 8, 0xA5A5A5A5u);
    ASSERT_EQ(af_mha_s8(out.data(), xq.data(), xk.data(), xv.data(), nullptr, &w, &p, &ms, nullptr,
                        arena.data(), ws, &st),
              AF_OK);
    for (size_t i = ws / 4; i < arena.size(); ++i) ASSERT_EQ(arena[i], 0xA5A5A5A5u);
    auto proj = [&](const std::vector<int8_t>& x, const std::vector<int8_t>& wt, int32_t L,
                    int32_t rows, double sy, const std::vector<int8_t>& got, int32_t b) {
      for (int32_t i = 0; i < L; ++i)
        for (int32_t f = 0; f < rows; ++f) {
          double acc = 0;
          for (int32_t e = 0; e < E; ++e) acc += double(x[(size_t(b) * L + i) * E + e]) * wt[size_t(f) * E + e];
          const double want = std::clamp(std::nearbyint(acc * sx * sw / sy), -128.0, 127.0);
          const int8_t g = got[((size_t(b) * (rows / dh) + f / dh) * L + i) * dh + f % dh];
          ASSERT_LE(std::fabs(g - want), 1.0) << "projection, case " << it;
        }
    };
    for (int32_t b = 0; b < B; ++b) {
      proj(xq, wq, Lq, E, sq, q8, b);
      proj(xk, wk, Lk, Hkv * dh, sk, k8, b);
      proj(xv, wv, Lk, Hkv * dh, sv, v8, b);
    }
    // heads_out: float64 SDPA on the dequantised q8, k8, v8.
    std::vector<double> dq(q8.size()), dk(k8.size()), dv(v8.size()), ref(ho.size());
    for (size_t i = 0; i < dq.size(); ++i) dq[i] = q8[i] * sq;
    for (size_t i = 0; i < dk.size(); ++i) dk[i] = k8[i] * sk, dv[i] = v8[i] * sv;
    SdpaOptions opt;
    opt.causal = ms.causal == AF_CAUSAL_TOP_LEFT       ? Causal::kTopLeft
                 : ms.causal == AF_CAUSAL_BOTTOM_RIGHT ? Causal::kBottomRight
                                                       : Causal::kNone;
    opt.scale = 1 / std::sqrt(double(dh));
    ASSERT_TRUE(reference::Sdpa(MakeView(ref.data(), DType::kF64, {B, H, Lq, dh}), TensorView{},
                                MakeView(dq.data(), DType::kF64, {B, H, Lq, dh}),
                                MakeView(dk.data(), DType::kF64, {B, Hkv, Lk, dh}),
                                MakeView(dv.data(), DType::kF64, {B, Hkv, Lk, dh}), opt)
                    .ok());
    for (size_t i = 0; i < ref.size(); ++i)
      ASSERT_LE(std::fabs(ho[i] - std::clamp(std::nearbyint(ref[i] / so_h), -128.0, 127.0)),
                double(AF_S8_BOUND_LSB))
          << "heads_out, case " << it;
    // concat and out from the library's own heads_out.
    for (int32_t b = 0; b < B; ++b)
      for (int32_t i = 0; i < Lq; ++i)
        for (int32_t f = 0; f < E; ++f) {
          ASSERT_EQ(cat[(size_t(b) * Lq + i) * E + f], ho[((size_t(b) * H + f / dh) * Lq + i) * dh + f % dh]);
          double acc = 0;
          for (int32_t e = 0; e < E; ++e) acc += double(cat[(size_t(b) * Lq + i) * E + e]) * wo[size_t(f) * E + e];
          const double want = std::clamp(std::nearbyint(acc * so_h * sw / s_out), -128.0, 127.0);
          ASSERT_LE(std::fabs(out[(size_t(b) * Lq + i) * E + f] - want), 1.0) << "out, case " << it;
        }
  }
}

}  // namespace
}  // namespace attnflow
