// micro_misuse_test.cc — the micro C API refuses misuse instead of answering
// wrongly (include/attnflow/micro.h invariants; docs/edge.md "Inputs the C
// API refuses"): a refusal writes no output byte (preparing functions
// included), overlapping buffers give AF_ERR_ALIAS unless a function works in
// place, NaN/inf and out-of-range f32 inputs give AF_ERR_PARAM, every
// fixed-point multiplier is range-checked. Expected values are properties
// (outputs unchanged, finite, equal to the out-of-place result), never the
// library's own output. Runs under ASan+UBSan in the sanitize job.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "attnflow/micro.h"

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename T> std::vector<uint8_t> Bytes(const T *p, size_t n) {
  const auto *b = reinterpret_cast<const uint8_t *>(p);
  return std::vector<uint8_t>(b, b + n * sizeof(T));
}

af_sdpa_shape Shape(int32_t lq, int32_t lk, int32_t d) {
  af_sdpa_shape s;
  s.batch = 1, s.num_heads = 2, s.num_kv_heads = 1, s.q_len = lq, s.kv_len = lk;
  s.head_dim = d, s.v_dim = d, s.causal = AF_CAUSAL_NONE;
  return s;
}

std::vector<float> Ramp(size_t n, float step) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = step * float(int(i % 7) - 3);
  return x;
}

// One f32 SDPA call on a fresh output filled with 7, arena sized exactly.
struct F32Call {
  af_sdpa_shape s;
  std::vector<float> q, k, v, out, lse;
  std::vector<uint32_t> arena;
  explicit F32Call(af_sdpa_shape shape) : s(shape) {
    q = Ramp(size_t(s.num_heads) * s.q_len * s.head_dim, 0.25f);
    k = Ramp(size_t(s.num_kv_heads) * s.kv_len * s.head_dim, 0.5f);
    v = Ramp(size_t(s.num_kv_heads) * s.kv_len * s.v_dim, 1.f);
    out.assign(size_t(s.num_heads) * s.q_len * s.v_dim, 7.f);
    lse.assign(size_t(s.num_heads) * s.q_len, 7.f);
    arena.assign(af_sdpa_f32_workspace_bytes(&s) / 4, 0);
  }
  af_status Run(float scale, const af_sdpa_opts *o = nullptr,
                const int32_t *kv_lens = nullptr) {
    return af_sdpa_f32_ex(out.data(), lse.data(), q.data(), k.data(), v.data(),
                          kv_lens, scale, &s, o, arena.data(),
                          arena.size() * 4);
  }
  bool Untouched() const {
    for (float x : out)
      if (x != 7.f)
        return false;
    for (float x : lse)
      if (x != 7.f)
        return false;
    return true;
  }
  bool Finite() const {
    for (float x : out)
      if (!std::isfinite(x))
        return false;
    for (float x : lse)
      if (!std::isfinite(x))
        return false;
    return true;
  }
};

// ------------------------------------------------ preparing functions ---

TEST(MicroMisuse, PreparersWriteNothingWhenTheyRefuse) {
  // Each call has a valid first head and a bad last one: the outputs keep
  // their fill pattern byte for byte.
  {
    af_s8_params p;
    std::memset(&p, 0x5A, sizeof p);
    const auto before = Bytes(&p, 1);
    const float sq[2] = {0.1f, kNan}, s1[2] = {0.1f, 0.1f};
    EXPECT_EQ(af_s8_prepare(&p, sq, s1, s1, s1, 2, 0.25f), AF_ERR_PARAM);
    EXPECT_EQ(Bytes(&p, 1), before) << "af_s8_prepare wrote before refusing";
  }
  {
    int32_t out[2] = {-5, -5};
    const float slopes[2] = {0.5f, kNan}, sq = 0.1f;
    EXPECT_EQ(af_s8_alibi_prepare(out, slopes, 2, &sq, &sq, 1, 0.25f),
              AF_ERR_PARAM);
    EXPECT_EQ(out[0], -5);
  }
  {
    int32_t out[8];
    std::fill(out, out + 8, -5);
    const float sq[2] = {0.1f, -1.f}, sk[2] = {0.1f, 0.1f};
    EXPECT_EQ(af_s8_softcap_prepare(out, 5.f, 2, sq, sk, 2, 0.25f),
              AF_ERR_PARAM);
    for (int32_t x : out)
      EXPECT_EQ(x, -5);
  }
  {
    int32_t out[3] = {-5, -5, -5};
    for (float bad : {kNan, kInf}) {
      const float mask[3] = {1.f, -kInf, bad};
      EXPECT_EQ(af_s8_mask_prepare(out, mask, 3, 0.1f, 0.1f, 0.25f),
                AF_ERR_PARAM);
      for (int32_t x : out)
        EXPECT_EQ(x, -5);
    }
  }
  {
    int32_t g[2] = {-5, -5}, eps = -5;
    const float gamma[2] = {1.f, 1e30f}; // 1e30 / 0.1 * 256 does not fit int32
    EXPECT_EQ(af_rmsnorm_s8_fold(g, &eps, gamma, 2, 0.1f, 0.1f, 1e-5f),
              AF_ERR_PARAM);
    const float ok[2] = {1.f,
                         1.f}; // eps / s_x^2 does not fit: refused before g
    EXPECT_EQ(af_rmsnorm_s8_fold(g, &eps, ok, 2, 1e-10f, 0.1f, 1.f),
              AF_ERR_PARAM);
    EXPECT_EQ(g[0], -5);
    EXPECT_EQ(eps, -5);
  }
}

TEST(MicroMisuse, PreparersInPlaceEqualOutOfPlace) {
  const float mask[4] = {0.5f, -kInf, -3.f, 1e20f};
  int32_t apart[4];
  ASSERT_EQ(af_s8_mask_prepare(apart, mask, 4, 0.1f, 0.2f, 0.3f), AF_OK);
  float buf[4];
  std::memcpy(buf, mask, sizeof buf);
  auto *inplace = reinterpret_cast<int32_t *>(buf);
  ASSERT_EQ(af_s8_mask_prepare(inplace, buf, 4, 0.1f, 0.2f, 0.3f), AF_OK);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(inplace[i], apart[i]);
  // A shifted view is refused.
  EXPECT_EQ(af_s8_mask_prepare(reinterpret_cast<int32_t *>(buf + 1), buf, 3,
                               0.1f, 0.2f, 0.3f),
            AF_ERR_ALIAS);
  const float sq = 0.1f;
  int32_t al[2];
  float slopes[2] = {0.5f, 0.25f};
  EXPECT_EQ(af_s8_alibi_prepare(reinterpret_cast<int32_t *>(slopes), slopes, 2,
                                &sq, &sq, 1, 0.25f),
            AF_ERR_ALIAS);
  EXPECT_EQ(slopes[0], 0.5f);
  EXPECT_EQ(af_s8_alibi_prepare(al, slopes, 2, &sq, &sq, 1, 0.25f), AF_OK);
}

// --------------------------------------------------------- overlapping ---

TEST(MicroMisuse, SdpaF32RefusesOverlappingBuffers) {
  F32Call c(Shape(3, 5, 4));
  ASSERT_EQ(c.Run(0.5f), AF_OK);
  std::vector<float> arena(c.arena.size());
  const size_t ws = arena.size() * 4;
  // out == q (same size here), out == k, lse inside out, arena over out.
  std::vector<float> q = c.q;
  EXPECT_EQ(af_sdpa_f32(q.data(), nullptr, q.data(), c.k.data(), c.v.data(),
                        nullptr, 0.5f, &c.s, arena.data(), ws),
            AF_ERR_ALIAS);
  EXPECT_EQ(q, c.q) << "a refused call changed q";
  std::vector<float> big(c.out.size() + c.k.size(), 7.f);
  std::copy(c.k.begin(), c.k.end(), big.begin());
  EXPECT_EQ(af_sdpa_f32(big.data(), nullptr, c.q.data(), big.data(), c.v.data(),
                        nullptr, 0.5f, &c.s, arena.data(), ws),
            AF_ERR_ALIAS);
  EXPECT_EQ(af_sdpa_f32(c.out.data(), c.out.data() + 2, c.q.data(), c.k.data(),
                        c.v.data(), nullptr, 0.5f, &c.s, arena.data(), ws),
            AF_ERR_ALIAS);
  EXPECT_EQ(af_sdpa_f32(c.out.data(), nullptr, c.q.data(), c.k.data(),
                        c.v.data(), nullptr, 0.5f, &c.s, c.out.data() + 4, ws),
            AF_ERR_ALIAS);
  // The probe's stage rows must be apart too.
  std::vector<float> row(5);
  EXPECT_EQ(af_sdpa_f32_probe(row.data(), row.data(), nullptr, nullptr, nullptr,
                              c.q.data(), c.k.data(), nullptr, 0.5f, &c.s,
                              nullptr, 0, 0, 0),
            AF_ERR_ALIAS);
}

TEST(MicroMisuse, SdpaS8AndMhaRefuseOverlappingBuffers) {
  af_sdpa_shape s = Shape(3, 5, 4);
  std::vector<int8_t> q(24, 3), k(20, 2), v(20, 1), out(24, 7);
  af_s8_params p;
  const float sc = 0.1f;
  ASSERT_EQ(af_s8_prepare(&p, &sc, &sc, &sc, &sc, 1, 0.5f), AF_OK);
  std::vector<uint32_t> arena(af_sdpa_s8_workspace_bytes(&s) / 4 + 1);
  const size_t ws = af_sdpa_s8_workspace_bytes(&s);
  ASSERT_EQ(af_sdpa_s8(out.data(), q.data(), k.data(), v.data(), nullptr, &p,
                       &s, arena.data(), ws),
            AF_OK);
  EXPECT_EQ(af_sdpa_s8(q.data(), q.data(), k.data(), v.data(), nullptr, &p, &s,
                       arena.data(), ws),
            AF_ERR_ALIAS);
  EXPECT_EQ(af_sdpa_s8(reinterpret_cast<int8_t *>(&p), q.data(), k.data(),
                       v.data(), nullptr, &p, &s, arena.data(), ws),
            AF_ERR_ALIAS);
  EXPECT_EQ(af_sdpa_s8(reinterpret_cast<int8_t *>(arena.data()), q.data(),
                       k.data(), v.data(), nullptr, &p, &s, arena.data(), ws),
            AF_ERR_ALIAS);
  // MHA f32: out over x_q (in-place residual style) is refused.
  af_mha_shape m;
  m.batch = 1, m.q_len = 2, m.kv_len = 3, m.embed = 4, m.num_heads = 2,
  m.num_kv_heads = 2;
  m.causal = AF_CAUSAL_NONE;
  std::vector<float> x(12, 0.25f), w(16, 0.1f), o(8, 7.f);
  af_mha_weights_f32 wf = {w.data(), w.data(), w.data(), w.data(),
                           nullptr,  nullptr,  nullptr,  nullptr};
  std::vector<uint32_t> ma(af_mha_f32_workspace_bytes(&m) / 4 + 1);
  const size_t mws = af_mha_f32_workspace_bytes(&m);
  ASSERT_EQ(af_mha_f32(o.data(), x.data(), x.data(), x.data(), nullptr, &wf,
                       0.5f, &m, ma.data(), mws, nullptr),
            AF_OK);
  const std::vector<float> x0 = x;
  EXPECT_EQ(af_mha_f32(x.data(), x.data(), x.data(), x.data(), nullptr, &wf,
                       0.5f, &m, ma.data(), mws, nullptr),
            AF_ERR_ALIAS);
  EXPECT_EQ(x, x0);
  af_mha_stages_f32 st = {nullptr, nullptr, nullptr,
                          nullptr, nullptr, o.data()};
  EXPECT_EQ(af_mha_f32(o.data(), x.data(), x.data(), x.data(), nullptr, &wf,
                       0.5f, &m, ma.data(), mws, &st),
            AF_ERR_ALIAS);
}

TEST(MicroMisuse, DecodeAndCacheRefuseOverlappingBuffers) {
  std::vector<float> ks(2 * 4 * 3), vs(2 * 4 * 3);
  af_kv_cache c;
  ASSERT_EQ(af_kv_cache_init(&c, ks.data(), vs.data(), 2, 3, 3, 4, 0), AF_OK);
  const std::vector<float> kn = {1, 2, 3, 4, 5, 6}, vn = {1, 1, 1, 2, 2, 2};
  ASSERT_EQ(af_kv_cache_append(&c, kn.data(), vn.data()), AF_OK);
  // A new row read from the storage it is copied into.
  EXPECT_EQ(af_kv_cache_append(&c, ks.data() + 1, vn.data()), AF_ERR_ALIAS);
  EXPECT_EQ(c.length, 1);
  std::vector<float> q(6, 0.5f), out(6, 7.f);
  std::vector<uint32_t> arena(af_decode_f32_workspace_bytes(&c, 2) / 4);
  const size_t ws = arena.size() * 4;
  ASSERT_EQ(af_decode_f32(out.data(), nullptr, q.data(), &c, 2, 0.5f,
                          arena.data(), ws),
            AF_OK);
  EXPECT_EQ(
      af_decode_f32(q.data(), nullptr, q.data(), &c, 2, 0.5f, arena.data(), ws),
      AF_ERR_ALIAS);
  EXPECT_EQ(
      af_decode_f32(out.data(), nullptr, q.data(), &c, 2, 0.5f, ks.data(), ws),
      AF_ERR_ALIAS);
  EXPECT_EQ(af_decode_f32(vs.data(), nullptr, q.data(), &c, 2, 0.5f,
                          arena.data(), ws),
            AF_ERR_ALIAS);
  // int8 cache and decode.
  std::vector<int8_t> k8(2 * 4 * 3), v8(2 * 4 * 3), q8(6, 2), o8(6, 7),
      kn8(6, 1);
  af_kv_cache_s8 c8;
  ASSERT_EQ(af_kv_cache_s8_init(&c8, k8.data(), v8.data(), 2, 3, 3, 4, 0),
            AF_OK);
  EXPECT_EQ(af_kv_cache_s8_append(&c8, k8.data() + 2, kn8.data()),
            AF_ERR_ALIAS);
  ASSERT_EQ(af_kv_cache_s8_append(&c8, kn8.data(), kn8.data()), AF_OK);
  af_s8_params p;
  const float sc = 0.1f;
  ASSERT_EQ(af_s8_prepare(&p, &sc, &sc, &sc, &sc, 1, 0.5f), AF_OK);
  std::vector<uint32_t> a8(af_decode_s8_workspace_bytes(&c8, 2) / 4);
  const size_t ws8 = a8.size() * 4;
  ASSERT_EQ(
      af_decode_s8(o8.data(), q8.data(), &c8, 2, &p, nullptr, a8.data(), ws8),
      AF_OK);
  EXPECT_EQ(
      af_decode_s8(q8.data(), q8.data(), &c8, 2, &p, nullptr, a8.data(), ws8),
      AF_ERR_ALIAS);
  EXPECT_EQ(
      af_decode_s8(k8.data(), q8.data(), &c8, 2, &p, nullptr, a8.data(), ws8),
      AF_ERR_ALIAS);
}

TEST(MicroMisuse, BlockOpsRefuseShiftedViewsAndWorkInPlace) {
  std::vector<float> buf = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const std::vector<float> w = {1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0};
  // linear: y one element past x (partial overlap): refused, buf unchanged.
  const std::vector<float> b0 = buf;
  EXPECT_EQ(af_linear_f32(buf.data() + 1, buf.data(), w.data(), nullptr, 4, 4),
            AF_ERR_ALIAS);
  EXPECT_EQ(buf, b0);
  EXPECT_EQ(af_linear_f32(buf.data(), buf.data() + 4, w.data(), nullptr, 4, 4),
            AF_OK);
  // layernorm / rmsnorm: in place equals out of place; shifted refused.
  std::vector<float> x = {0.5f, -1.f, 2.f, 0.25f}, y(4), x2 = x;
  ASSERT_EQ(af_layernorm_f32(y.data(), x.data(), nullptr, nullptr, 4, 1e-5f),
            AF_OK);
  ASSERT_EQ(af_layernorm_f32(x2.data(), x2.data(), nullptr, nullptr, 4, 1e-5f),
            AF_OK);
  EXPECT_EQ(x2, y);
  std::vector<float> sh = {0.5f, -1.f, 2.f, 0.25f, 0.f};
  EXPECT_EQ(
      af_layernorm_f32(sh.data() + 1, sh.data(), nullptr, nullptr, 4, 1e-5f),
      AF_ERR_ALIAS);
  EXPECT_EQ(af_rmsnorm_f32(sh.data() + 1, sh.data(), nullptr, 4, 1e-5f),
            AF_ERR_ALIAS);
  EXPECT_EQ(af_layernorm_f32(y.data(), x.data(), y.data(), nullptr, 4, 1e-5f),
            AF_ERR_ALIAS);
  // add: y += y doubles; a shifted x refused.
  std::vector<float> a = {1, 2, 3, 4, 5};
  ASSERT_EQ(af_add_f32(a.data(), a.data(), 4), AF_OK);
  EXPECT_EQ(a[3], 8.f);
  EXPECT_EQ(af_add_f32(a.data() + 1, a.data(), 4), AF_ERR_ALIAS);
  EXPECT_EQ(a[4], 5.f);
  EXPECT_EQ(af_swiglu_f32(a.data() + 1, a.data(), a.data(), 4), AF_ERR_ALIAS);
  // RoPE: x over its own table.
  std::vector<float> t(4, 0.5f);
  EXPECT_EQ(af_rope_f32(t.data(), 1, 4, t.data(), t.data() + 2, AF_ROPE_HALF),
            AF_ERR_ALIAS);
  EXPECT_EQ(af_rope_table_f32(t.data(), t.data() + 1, 3, 4, 10000.0),
            AF_ERR_ALIAS);
  // int8 pieces.
  std::vector<int8_t> x8 = {1, 2, 3, 4, 5}, w8(16, 1), tab(256, 0);
  std::vector<af_qmult> m(4, af_qmult{1 << 30, 0});
  EXPECT_EQ(af_linear_s8(x8.data() + 1, x8.data(), w8.data(), nullptr, m.data(),
                         4, 4),
            AF_ERR_ALIAS);
  EXPECT_EQ(
      af_linear_s8(w8.data(), x8.data(), w8.data(), nullptr, m.data(), 4, 4),
      AF_ERR_ALIAS);
  EXPECT_EQ(af_act_s8(tab.data() + 3, 4, tab.data()), AF_ERR_ALIAS);
  std::vector<int32_t> r32 = {100, 200, 300, 400}, g = {256, 256, 256, 256};
  EXPECT_EQ(af_rmsnorm_s8(reinterpret_cast<int8_t *>(r32.data()), r32.data(),
                          g.data(), 4, 1),
            AF_ERR_ALIAS);
  EXPECT_EQ(r32[0], 100);
}

// ------------------------------------------------- NaN, inf and range ---

TEST(MicroMisuse, NonFiniteF32InputsAreRefusedAndNothingIsWritten) {
  const af_sdpa_shape s = Shape(2, 5, 4);
  {
    F32Call c(s);
    c.q[5] = kNan; // was a silent zero row with AF_OK
    EXPECT_EQ(c.Run(0.5f), AF_ERR_PARAM);
    EXPECT_TRUE(c.Untouched());
  }
  for (float bad : {kNan, kInf, -kInf}) {
    F32Call c(s);
    c.k[3 * 4 + 1] = bad;
    EXPECT_EQ(c.Run(0.5f), AF_ERR_PARAM);
    EXPECT_TRUE(c.Untouched());
    F32Call d(s);
    d.v[7] = bad;
    EXPECT_EQ(d.Run(0.5f), AF_ERR_PARAM);
    EXPECT_TRUE(d.Untouched());
  }
  {
    // A key no row may see (padding) is never read, NaN or not.
    F32Call c(s);
    c.k[4 * 4] = kNan;
    c.v[4 * 4] = kNan;
    const int32_t kv_lens[1] = {4};
    EXPECT_EQ(c.Run(0.5f, nullptr, kv_lens), AF_OK);
    EXPECT_TRUE(c.Finite());
  }
  {
    // Additive mask: NaN and +inf refused, -inf hides a key.
    F32Call c(s);
    std::vector<float> mask(5, 0.f);
    af_sdpa_opts o = AF_SDPA_OPTS_INIT;
    o.mask_type = AF_MASK_F32;
    o.mask = mask.data();
    o.mask_shape[3] = 5;
    for (float bad : {kNan, kInf, 1e38f}) {
      mask[2] = bad;
      EXPECT_EQ(c.Run(0.5f, &o), AF_ERR_PARAM) << bad;
      EXPECT_TRUE(c.Untouched());
    }
    mask[2] = -kInf;
    EXPECT_EQ(c.Run(0.5f, &o), AF_OK);
    mask[2] = -3.4e38f; // the Hugging Face "min float" mask value stays allowed
    EXPECT_EQ(c.Run(0.5f, &o), AF_OK);
    EXPECT_TRUE(c.Finite());
  }
  {
    // The probe refuses what the kernel refuses.
    F32Call c(s);
    c.q[0] = kInf;
    std::vector<float> row(5, 7.f);
    EXPECT_EQ(af_sdpa_f32_probe(row.data(), nullptr, nullptr, nullptr, nullptr,
                                c.q.data(), c.k.data(), nullptr, 0.5f, &s,
                                nullptr, 0, 0, 0),
              AF_ERR_PARAM);
    EXPECT_EQ(row[0], 7.f);
  }
  // Decode: a NaN q refused; the cache refuses a non-finite or huge row and
  // keeps its length.
  std::vector<float> ks(12), vs(12), q(6, 0.5f), out(6, 7.f),
      arena(AF_KEY_TILE);
  af_kv_cache c;
  ASSERT_EQ(af_kv_cache_init(&c, ks.data(), vs.data(), 2, 3, 3, 2, 0), AF_OK);
  std::vector<float> kn(6, 1.f), vn(6, 1.f);
  kn[4] = kNan;
  EXPECT_EQ(af_kv_cache_append(&c, kn.data(), vn.data()), AF_ERR_PARAM);
  kn[4] = 2e12f; // above AF_F32_CACHE_K_MAX
  EXPECT_EQ(af_kv_cache_append(&c, kn.data(), vn.data()), AF_ERR_PARAM);
  EXPECT_EQ(c.length, 0);
  kn[4] = 1.f;
  ASSERT_EQ(af_kv_cache_append(&c, kn.data(), vn.data()), AF_OK);
  q[2] = kNan;
  EXPECT_EQ(af_decode_f32(out.data(), nullptr, q.data(), &c, 2, 0.5f,
                          arena.data(), AF_KEY_TILE * 4),
            AF_ERR_PARAM);
  EXPECT_EQ(out[0], 7.f);
  // The block ops check their activations.
  std::vector<float> x = {1.f, kNan, 2.f, 3.f}, y(4, 7.f), w(16, 0.1f);
  EXPECT_EQ(af_linear_f32(y.data(), x.data(), w.data(), nullptr, 4, 4),
            AF_ERR_PARAM);
  EXPECT_EQ(af_layernorm_f32(y.data(), x.data(), nullptr, nullptr, 4, 1e-5f),
            AF_ERR_PARAM);
  EXPECT_EQ(af_rmsnorm_f32(y.data(), x.data(), nullptr, 4, 1e-5f),
            AF_ERR_PARAM);
  EXPECT_EQ(af_swiglu_f32(y.data(), x.data(), x.data(), 4), AF_ERR_PARAM);
  EXPECT_EQ(af_add_f32(y.data(), x.data(), 4), AF_ERR_PARAM);
  for (float v : y)
    EXPECT_EQ(v, 7.f);
  EXPECT_EQ(af_gelu_f32(x.data(), 4), AF_ERR_PARAM);
  EXPECT_EQ(x[0], 1.f);
  // Weights: the one-time check.
  EXPECT_EQ(af_check_finite_f32(w.data(), w.size()), AF_OK);
  w[9] = -kInf;
  EXPECT_EQ(af_check_finite_f32(w.data(), w.size()), AF_ERR_PARAM);
  EXPECT_EQ(af_check_finite_f32(nullptr, 3), AF_ERR_NULL);
  EXPECT_STREQ(af_status_name(AF_ERR_ALIAS), "overlapping buffers");
}

TEST(MicroMisuse, ScoresThatWouldOverflowAreRefusedAndTheLimitIsSound) {
  // q = k = 1 everywhere, head_dim 4: every scaled score is 4 * scale.
  af_sdpa_shape s = Shape(2, 3, 4);
  auto ones = [&](F32Call *c) {
    std::fill(c->q.begin(), c->q.end(), 1.f);
    std::fill(c->k.begin(), c->k.end(), 1.f);
  };
  {
    F32Call c(s); // was AF_OK with NaN outputs
    ones(&c);
    EXPECT_EQ(c.Run(3e38f), AF_ERR_PARAM);
    EXPECT_TRUE(c.Untouched());
  }
  {
    // At the limit exactly (4 * 2^123 = 2^125), plus the largest allowed
    // positive mask value and ALiBi slope: accepted, and every output finite.
    F32Call c(s);
    ones(&c);
    std::fill(c.v.begin(), c.v.end(),
              AF_F32_LIMIT / 4.f); // |v| * kv_len < limit
    std::vector<float> mask(3, AF_F32_LIMIT), slopes(2, 0x1p108f);
    af_sdpa_opts o = AF_SDPA_OPTS_INIT;
    o.mask_type = AF_MASK_F32;
    o.mask = mask.data();
    o.mask_shape[3] = 3;
    o.alibi_slopes = slopes.data();
    EXPECT_EQ(c.Run(0x1p123f, &o), AF_OK);
    EXPECT_TRUE(c.Finite());
    EXPECT_EQ(c.Run(std::nextafter(0x1p123f, kInf), &o), AF_ERR_PARAM);
    slopes[1] = std::nextafter(0x1p108f, kInf);
    EXPECT_EQ(c.Run(1.f, &o), AF_ERR_PARAM);
  }
  {
    // Subnormal q against huge k and scale: the bound is a product, not a
    // per-factor limit (1e-40 * 1e38 * 4 * 1e38 = 4e36 fits, 4e38 does not).
    F32Call c(s);
    std::fill(c.q.begin(), c.q.end(), 1e-40f);
    std::fill(c.k.begin(), c.k.end(), 1e38f);
    EXPECT_EQ(c.Run(1e38f), AF_OK);
    EXPECT_TRUE(c.Finite());
    std::fill(c.q.begin(), c.q.end(), 1e-38f);
    EXPECT_EQ(c.Run(1e38f), AF_ERR_PARAM);
  }
  {
    // Without the scale, q.k itself must stay in range.
    F32Call c(s);
    std::fill(c.q.begin(), c.q.end(), 1e19f);
    std::fill(c.k.begin(), c.k.end(), 1e19f);
    EXPECT_EQ(c.Run(1e-30f), AF_ERR_PARAM);
  }
  {
    // Decode: q against the cache's bound on |k|.
    std::vector<float> ks(6), vs(6), q(2, 1e26f), out(2), arena(AF_KEY_TILE);
    af_kv_cache c;
    ASSERT_EQ(af_kv_cache_init(&c, ks.data(), vs.data(), 1, 2, 2, 3, 0), AF_OK);
    const float kn[2] = {1.f, 1.f}, vn[2] = {1.f, 1.f};
    ASSERT_EQ(af_kv_cache_append(&c, kn, vn), AF_OK);
    EXPECT_EQ(af_decode_f32(out.data(), nullptr, q.data(), &c, 1, 1.f,
                            arena.data(), AF_KEY_TILE * 4),
              AF_ERR_PARAM);
    q.assign(2, 1.f);
    EXPECT_EQ(af_decode_f32(out.data(), nullptr, q.data(), &c, 1, 1e30f,
                            arena.data(), AF_KEY_TILE * 4),
              AF_ERR_PARAM);
    EXPECT_EQ(af_decode_f32(out.data(), nullptr, q.data(), &c, 1, 1e20f,
                            arena.data(), AF_KEY_TILE * 4),
              AF_OK);
    EXPECT_TRUE(std::isfinite(out[0]));
  }
}

// ----------------------------------------- multipliers and shifts ---

TEST(MicroMisuse, EveryMultiplierAndShiftIsRangeChecked) {
  std::vector<int8_t> x(4, 3), w(16, 1), y(4, 7);
  std::vector<int32_t> r(4, 5);
  for (af_qmult bad :
       {af_qmult{1 << 30, INT32_MIN}, af_qmult{1 << 30, INT32_MAX},
        af_qmult{1 << 30, 31}, af_qmult{1 << 30, -32}, af_qmult{-1, 0}}) {
    std::vector<af_qmult> m(4, af_qmult{1 << 30, 0});
    m[3] = bad; // the last row: nothing of the earlier rows is written either
    EXPECT_EQ(
        af_linear_s8(y.data(), x.data(), w.data(), nullptr, m.data(), 4, 4),
        AF_ERR_PARAM);
    EXPECT_EQ(af_linear_s8_residual(r.data(), x.data(), w.data(), nullptr,
                                    m.data(), 4, 4),
              AF_ERR_PARAM);
    EXPECT_EQ(af_swiglu_s8(y.data(), x.data(), x.data(), 4, w.data(), bad),
              AF_ERR_PARAM);
    // The helper itself is defined for any shift (UBSan in the sanitize job).
    const int32_t v = af_s8_mul_by_qmult(INT32_MIN, bad);
    EXPECT_TRUE(v >= INT32_MIN && v <= INT32_MAX);
  }
  for (int8_t v : y)
    EXPECT_EQ(v, 7);
  for (int32_t v : r)
    EXPECT_EQ(v, 5);
  // MHA int8: a bad output-projection multiplier refused before anything.
  af_mha_shape s;
  s.batch = 1, s.q_len = 2, s.kv_len = 2, s.embed = 4, s.num_heads = 2,
  s.num_kv_heads = 2;
  s.causal = AF_CAUSAL_NONE;
  std::vector<int8_t> xs(8, 2), ws(16, 1), out(8, 7);
  std::vector<af_qmult> mg(4, af_qmult{1 << 30, -4}), mo = mg;
  mo[2].shift = INT32_MIN;
  af_mha_weights_s8 wt = {ws.data(), ws.data(), ws.data(), ws.data(),
                          nullptr,   nullptr,   nullptr,   nullptr,
                          mg.data(), mg.data(), mg.data(), mo.data()};
  af_s8_params p;
  const float sc = 0.1f;
  ASSERT_EQ(af_s8_prepare(&p, &sc, &sc, &sc, &sc, 1, 0.5f), AF_OK);
  std::vector<uint32_t> arena(af_mha_s8_workspace_bytes(&s) / 4 + 1);
  EXPECT_EQ(af_mha_s8(out.data(), xs.data(), xs.data(), xs.data(), nullptr, &wt,
                      &p, &s, nullptr, arena.data(),
                      af_mha_s8_workspace_bytes(&s), nullptr),
            AF_ERR_PARAM);
  for (int8_t v : out)
    EXPECT_EQ(v, 7);
  wt.m_o = mg.data();
  EXPECT_EQ(af_mha_s8(out.data(), xs.data(), xs.data(), xs.data(), nullptr, &wt,
                      &p, &s, nullptr, arena.data(),
                      af_mha_s8_workspace_bytes(&s), nullptr),
            AF_OK);
}

} // namespace
