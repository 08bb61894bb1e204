// backward_test.cc — the attention backward: reference::SdpaBackward (float64)
// against central finite differences of reference::Sdpa (a mathematical
// property, independent of the backward's code), and the fast tiled backward
// (AttentionBackward) against reference::SdpaBackward with FlashAttention's
// rule (error <= 2x that of a plain fp32 backward written here, plus a tiny
// floor), over masks, kv_lens, GQA, windows, ALiBi ([H] and [B,H]), both
// causal alignments, the per-sequence diagonal, softcap, F16/BF16 K/V,
// strided layouts and dead rows; plus thread-count bit-identity, dead-row
// zeros, non-finite inputs and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/kernels.h"
#include "attnflow/reference.h"
#include "attnflow/semantics.h"
#include "attnflow/threading.h"
#include "util/kernel_test_util.h"
#include "util/test_util.h"

namespace attnflow {
namespace {

// A Spec plus the options kernel_test_util's Make does not set.
struct BSpec {
  Spec s;
  double softcap = 0.0;
  bool per_seq = false;
  bool alibi_bh = false;  // ALiBi slopes [B,H] (random per batch)
  bool dlse = false;      // a gradient flowing into the lse output too
  std::string Name() const {
    std::string n = s.Name();
    if (softcap > 0) n += " softcap=" + std::to_string(softcap);
    if (per_seq) n += " per_sequence";
    if (alibi_bh) n += " alibi[B,H]";
    if (dlse) n += " dlse";
    return n;
  }
};

struct BInputs {
  Inputs in;
  Tensor slopes_bh, dout, dlse;
  TensorView dlse_view() const { return dlse.defined() ? dlse.view() : TensorView(); }
};

BInputs MakeB(const BSpec& bs) {
  BInputs r{Make(bs.s), Tensor(), Tensor(), Tensor()};
  r.in.opt.softcap = bs.softcap;
  r.in.opt.kv_align = bs.per_seq ? KvAlign::kPerSequence : KvAlign::kPadded;
  if (bs.alibi_bh) {
    r.slopes_bh = testing::Zeros(DType::kF32, {bs.s.B, bs.s.H});
    Rng rng(bs.s.seed * 13 + 5);
    for (int64_t e = 0; e < bs.s.B * bs.s.H; ++e) {
      r.slopes_bh.data<float>()[e] = static_cast<float>(0.3 * rng.Uniform());
    }
    r.in.opt.alibi_slopes = r.slopes_bh.view();
  }
  r.dout = testing::Random({bs.s.B, bs.s.H, bs.s.Lq, bs.s.dv()}, bs.s.seed * 13 + 7);
  if (bs.dlse) r.dlse = testing::Random({bs.s.B, bs.s.H, bs.s.Lq}, bs.s.seed * 13 + 9);
  return r;
}

struct Grads {
  Tensor dq, dk, dv;
};

Grads ZeroGrads(const Spec& s, DType t) {
  return {testing::Zeros(t, {s.B, s.H, s.Lq, s.D}), testing::Zeros(t, {s.B, s.Hkv, s.Lk, s.D}),
          testing::Zeros(t, {s.B, s.Hkv, s.Lk, s.dv()})};
}

Grads RefGrads(const BInputs& b) {
  Grads g = ZeroGrads(b.in.s, DType::kF64);
  const Status st = reference::SdpaBackward(g.dq.view(), g.dk.view(), g.dv.view(), b.dout.view(),
                                            b.dlse_view(), b.in.q, b.in.k, b.in.v, b.in.opt);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return g;
}

// The forward with the fast kernels, as an autograd caller would have saved
// it: out F32, lse F64 (full precision: the backward's probabilities then
// match the forward's) or F32.
struct Fwd {
  Tensor out, lse;
};
Fwd Forward(const BInputs& b, DType lse_dtype = DType::kF64) {
  const Spec& s = b.in.s;
  Fwd f{testing::Zeros(DType::kF32, {s.B, s.H, s.Lq, s.dv()}),
        testing::Zeros(lse_dtype, {s.B, s.H, s.Lq})};
  const Status st = Attention(f.out.view(), f.lse.view(), b.in.q, b.in.k, b.in.v, b.in.opt);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return f;
}

Grads FastGrads(const BInputs& b, const Fwd& f, ThreadPool* pool = nullptr,
                KernelChoice* choice = nullptr) {
  Grads g = ZeroGrads(b.in.s, DType::kF32);
  for (Tensor* t : {&g.dq, &g.dk, &g.dv}) {  // poison: every element must be written
    for (int64_t e = 0; e < t->numel(); ++e) t->data<float>()[e] = 12345.0f;
  }
  KernelOptions ko;
  ko.pool = pool;
  const Status st =
      AttentionBackward(g.dq.view(), g.dk.view(), g.dv.view(), b.dout.view(), b.dlse_view(), b.in.q,
                        b.in.k, b.in.v, f.out.view(), f.lse.view(), b.in.opt, ko, choice);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return g;
}

// Plain fp32 backward (the error yardstick): per row fp32 scores, softmax
// with std::exp, then the textbook gradient, accumulated in fp32.
Grads NaiveF32Grads(const BInputs& b) {
  const Spec& s = b.in.s;
  const SdpaOptions& opt = b.in.opt;
  Grads g = ZeroGrads(s, DType::kF32);
  TensorView mask;
  if (!opt.attn_mask.empty_view()) {
    const int64_t t[4] = {s.B, s.H, s.Lq, s.Lk};
    EXPECT_TRUE(BroadcastMask(opt.attn_mask, t, &mask));
  }
  const float scale = static_cast<float>(std::isnan(s.scale) ? DefaultScale(s.D) : s.scale);
  const float cap = static_cast<float>(opt.softcap);
  std::vector<float> x(static_cast<size_t>(s.Lk)), p(x.size()), dp(x.size()), th(x.size());
  const int64_t Dv = s.dv();
  for (int64_t bb = 0; bb < s.B; ++bb) {
    const int64_t valid = ValidKvLen(opt.kv_lens, bb, s.Lk);
    const int64_t dkv = DiagonalKvLen(opt.kv_align, s.Lk, valid);
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t hk = KvHeadFor(h, s.H, s.Hkv);
      const double slope =
          opt.alibi_slopes.empty_view() ? 0.0 : AlibiSlope(opt.alibi_slopes, bb, h);
      for (int64_t i = 0; i < s.Lq; ++i) {
        const KeyRange kr = VisibleKeys(s.causal, s.wl, s.wr, i, s.Lq, dkv, valid);
        float mx = -INFINITY;
        for (int64_t j = 0; j < s.Lk; ++j) {
          float acc = 0.0f;
          for (int64_t c = 0; c < s.D; ++c) {
            acc += static_cast<float>(b.in.q.load(b.in.q.offset(bb, h, i, c))) *
                   static_cast<float>(b.in.k.load(b.in.k.offset(bb, hk, j, c)));
          }
          float v = acc * scale;
          th[j] = cap > 0 ? std::tanh(v / cap) : 0.0f;
          if (cap > 0) v = cap * th[j];
          bool allowed = j >= kr.first && j <= kr.last;
          if (!mask.empty_view()) {
            const double mv = mask.load(mask.offset(bb, h, i, j));
            if (mask.dtype == DType::kBool)
              allowed = allowed && mv != 0.0;
            else
              v += static_cast<float>(mv);
          }
          if (!opt.alibi_slopes.empty_view())
            v += static_cast<float>(AlibiBias(slope, i, j, s.Lq, dkv));
          x[j] = allowed ? v : -INFINITY;
          mx = std::max(mx, x[j]);
        }
        if (mx == -INFINITY) continue;
        float sum = 0.0f;
        for (int64_t j = 0; j < s.Lk; ++j)
          sum += (p[j] = x[j] == -INFINITY ? 0.0f : std::exp(x[j] - mx));
        float dsum = 0.0f;
        for (int64_t j = 0; j < s.Lk; ++j) {
          p[j] /= sum;
          float a = 0.0f;
          for (int64_t c = 0; c < Dv; ++c) {
            a += static_cast<float>(b.dout.view().load(b.dout.view().offset(bb, h, i, c))) *
                 static_cast<float>(b.in.v.load(b.in.v.offset(bb, hk, j, c)));
          }
          dp[j] = a;
          dsum += p[j] * a;
        }
        if (b.dlse.defined()) dsum -= b.dlse.data<float>()[(bb * s.H + h) * s.Lq + i];
        for (int64_t j = 0; j < s.Lk; ++j) {
          if (p[j] == 0.0f) continue;
          float ds = p[j] * (dp[j] - dsum);
          if (cap > 0) ds *= 1.0f - th[j] * th[j];
          ds *= scale;
          for (int64_t c = 0; c < s.D; ++c) {
            const float kc = static_cast<float>(b.in.k.load(b.in.k.offset(bb, hk, j, c)));
            const float qc = static_cast<float>(b.in.q.load(b.in.q.offset(bb, h, i, c)));
            float* dqe = g.dq.data<float>() + ((bb * s.H + h) * s.Lq + i) * s.D + c;
            float* dke = g.dk.data<float>() + ((bb * s.Hkv + hk) * s.Lk + j) * s.D + c;
            *dqe += ds * kc;
            *dke += ds * qc;
          }
          for (int64_t c = 0; c < Dv; ++c) {
            float* dve = g.dv.data<float>() + ((bb * s.Hkv + hk) * s.Lk + j) * Dv + c;
            *dve +=
                p[j] * static_cast<float>(b.dout.view().load(b.dout.view().offset(bb, h, i, c)));
          }
        }
      }
    }
  }
  return g;
}

void CheckGrad(const char* what, const Tensor& got, const Tensor& naive, const Tensor& ref,
               const std::string& name) {
  double err = 0, err_n = 0, mx = 0;
  for (int64_t e = 0; e < ref.numel(); ++e) {
    const double r = ref.view().load(e), gv = got.view().load(e), nv = naive.view().load(e);
    ASSERT_TRUE(std::isfinite(r)) << what << " " << name;
    ASSERT_TRUE(std::isfinite(gv)) << what << " flat " << e << " = " << gv << " " << name;
    err = std::max(err, std::fabs(gv - r));
    err_n = std::max(err_n, std::fabs(nv - r));
    mx = std::max(mx, std::fabs(r));
  }
  // The slack (a few float32 ulps of the gradient's scale): near-degenerate
  // rows (one visible key, a one-element head dim) whose plain gradient is
  // exact or nearly so.
  EXPECT_LE(err, 2.0 * err_n + 5e-7 * std::max(1.0, mx))
      << what << ": tiled backward err " << err << " vs plain fp32 err " << err_n << " " << name;
}

void CheckFastAgainstReference(const BSpec& bs, DType lse_dtype = DType::kF64) {
  SCOPED_TRACE(bs.Name() + " lse " + DTypeName(lse_dtype));
  const BInputs b = MakeB(bs);
  const Fwd f = Forward(b, lse_dtype);
  KernelChoice ch;
  const Grads fast = FastGrads(b, f, nullptr, &ch);
  EXPECT_EQ(ch.kernel, KernelKind::kTiledBackward) << ch.reason;
  const Grads ref = RefGrads(b);
  const Grads naive = NaiveF32Grads(b);
  CheckGrad("dq", fast.dq, naive.dq, ref.dq, bs.Name());
  CheckGrad("dk", fast.dk, naive.dk, ref.dk, bs.Name());
  CheckGrad("dv", fast.dv, naive.dv, ref.dv, bs.Name());
}

// ---------------------------------------------------------------------------
// The float64 reference backward against central differences of the forward.

// loss = sum(out * dout) (+ sum(lse * dlse) over rows with a key) in
// float64 for the current inputs.
double Loss(const BInputs& b) {
  const Spec& s = b.in.s;
  Tensor out = testing::Zeros(DType::kF64, {s.B, s.H, s.Lq, s.dv()});
  Tensor lse = testing::Zeros(DType::kF64, {s.B, s.H, s.Lq});
  EXPECT_TRUE(reference::Sdpa(out.view(), lse.view(), b.in.q, b.in.k, b.in.v, b.in.opt).ok());
  double l = 0;
  for (int64_t e = 0; e < out.numel(); ++e) {
    l += out.data<double>()[e] * b.dout.view().load(e);
  }
  if (b.dlse.defined()) {
    for (int64_t e = 0; e < lse.numel(); ++e) {
      const double x = lse.data<double>()[e];
      if (std::isfinite(x)) l += x * b.dlse.view().load(e);
    }
  }
  return l;
}

void CheckFiniteDifferences(const BSpec& bs) {
  SCOPED_TRACE(bs.Name());
  BSpec s64 = bs;
  s64.s.kv = DType::kF32;
  s64.s.strided = false;
  BInputs b = MakeB(s64);
  // float64 copies of q, k, v so that the perturbations are exact.
  Tensor q = testing::Zeros(DType::kF64, {bs.s.B, bs.s.H, bs.s.Lq, bs.s.D});
  Tensor k = testing::Zeros(DType::kF64, {bs.s.B, bs.s.Hkv, bs.s.Lk, bs.s.D});
  Tensor v = testing::Zeros(DType::kF64, {bs.s.B, bs.s.Hkv, bs.s.Lk, bs.s.dv()});
  for (auto [dst, src] : {std::pair<Tensor*, TensorView>{&q, b.in.q}, {&k, b.in.k}, {&v, b.in.v}}) {
    for (int64_t e = 0; e < dst->numel(); ++e) dst->data<double>()[e] = src.load(e);
  }
  b.in.q = q.view();
  b.in.k = k.view();
  b.in.v = v.view();
  const Grads g = RefGrads(b);
  const double h = 1e-6;
  for (auto [name, t, grad] : {std::tuple<const char*, Tensor*, const Tensor*>{"dq", &q, &g.dq},
                               {"dk", &k, &g.dk},
                               {"dv", &v, &g.dv}}) {
    for (int64_t e = 0; e < t->numel(); ++e) {
      double& x = t->data<double>()[e];
      const double x0 = x;
      x = x0 + h;
      const double lp = Loss(b);
      x = x0 - h;
      const double lm = Loss(b);
      x = x0;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(grad->data<double>()[e], fd, 1e-6 * std::max(1.0, std::fabs(fd)))
          << name << " flat " << e;
    }
  }
}

BSpec Small(int64_t B, int64_t H, int64_t Hkv, int64_t Lq, int64_t Lk, int64_t D, uint64_t seed) {
  BSpec b;
  b.s.B = B;
  b.s.H = H;
  b.s.Hkv = Hkv;
  b.s.Lq = Lq;
  b.s.Lk = Lk;
  b.s.D = D;
  b.s.seed = seed;
  return b;
}

TEST(ReferenceBackward, MatchesFiniteDifferencesPlain) {
  CheckFiniteDifferences(Small(1, 2, 1, 4, 6, 3, 1));
}

TEST(ReferenceBackward, MatchesFiniteDifferencesEveryOption) {
  std::vector<BSpec> specs;
  {
    BSpec b = Small(2, 4, 2, 5, 7, 4, 2);  // GQA, bool mask, causal bottom-right
    b.s.mask = MaskKind::kBool;
    b.s.causal = Causal::kBottomRight;
    specs.push_back(b);
  }
  {
    BSpec b = Small(2, 2, 2, 6, 5, 3, 3);  // float mask, top-left, custom scale, Dv != D
    b.s.mask = MaskKind::kFloat;
    b.s.causal = Causal::kTopLeft;
    b.s.scale = 0.7;
    b.s.Dv = 5;
    specs.push_back(b);
  }
  {
    BSpec b = Small(3, 2, 1, 4, 8, 3, 4);  // kv_lens (one zero: dead batch), window, ALiBi
    b.s.kv_lens = {8, 3, 0};
    b.s.wl = 2;
    b.s.wr = 1;
    b.s.alibi = true;
    specs.push_back(b);
  }
  {
    BSpec b = Small(2, 2, 1, 3, 7, 4, 5);  // per-sequence diagonal, [B,H] ALiBi, softcap
    b.s.kv_lens = {5, 7};
    b.s.causal = Causal::kBottomRight;
    b.per_seq = true;
    b.alibi_bh = true;
    b.softcap = 1.5;
    specs.push_back(b);
  }
  {
    BSpec b = Small(2, 4, 2, 5, 6, 3, 8);  // a gradient into lse, float mask
    b.s.mask = MaskKind::kFloat;
    b.dlse = true;
    specs.push_back(b);
  }
  {
    BSpec b = Small(1, 2, 2, 6, 3, 2, 6);  // Lq > Lk bottom-right: dead rows
    b.s.causal = Causal::kBottomRight;
    b.softcap = 0.8;
    specs.push_back(b);
  }
  for (const BSpec& b : specs) CheckFiniteDifferences(b);
}

TEST(ReferenceBackward, DeadRowsGiveZeroGradients) {
  BSpec bs = Small(2, 2, 1, 6, 4, 5, 7);
  bs.s.causal = Causal::kBottomRight;  // rows 0, 1 see nothing
  bs.s.kv_lens = {4, 0};               // batch 1 sees nothing at all
  const BInputs b = MakeB(bs);
  const Grads g = RefGrads(b);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 6; ++i) {
      for (int64_t c = 0; c < 5; ++c) {
        if (i < 2) EXPECT_EQ(testing::At(g.dq, 0, h, i, c), 0.0);
        EXPECT_EQ(testing::At(g.dq, 1, h, i, c), 0.0);
      }
    }
  }
  for (int64_t e = 0; e < 4 * 5; ++e) {
    EXPECT_EQ(g.dk.data<double>()[4 * 5 + e], 0.0);
    EXPECT_EQ(g.dv.data<double>()[4 * 5 + e], 0.0);
  }
}

// ---------------------------------------------------------------------------
// The tiled backward against the reference backward.

TEST(TiledBackward, SweepAgainstReference) {
  std::mt19937_64 g(2026);
  const std::vector<std::pair<int64_t, int64_t>> lens = {
      {1, 1}, {7, 7}, {63, 65}, {65, 63}, {1, 70}, {70, 1}, {33, 129}, {129, 33}, {5, 200}};
  const std::vector<int64_t> dims = {1, 5, 13, 32, 64, 80, 128, 160};
  const std::vector<std::pair<int64_t, int64_t>> heads = {{1, 1}, {2, 1}, {4, 2}, {3, 3}, {8, 2}};
  const std::vector<DType> kvs = {DType::kF32, DType::kF16, DType::kBF16};
  for (int n = 0; n < 70; ++n) {
    BSpec b;
    Spec& s = b.s;
    s.seed = 500 + n;
    const auto l = lens[g() % lens.size()];
    s.Lq = l.first;
    s.Lk = l.second;
    s.D = dims[g() % dims.size()];
    if (g() % 5 == 0) s.Dv = dims[g() % dims.size()];
    const auto hh = heads[g() % heads.size()];
    s.H = hh.first;
    s.Hkv = hh.second;
    s.B = 1 + g() % 2;
    s.kv = kvs[g() % kvs.size()];
    const int c = g() % 3;
    s.causal = c == 0 ? Causal::kNone : c == 1 ? Causal::kTopLeft : Causal::kBottomRight;
    if (g() % 4 == 0) {
      s.wl = static_cast<int64_t>(g() % 30) - 1;
      s.wr = static_cast<int64_t>(g() % 10) - 1;
    }
    if (g() % 4 == 0) s.scale = 0.05 + 0.2 * static_cast<double>(g() % 6);
    const int mk = g() % 4;
    if (mk == 1) {
      s.mask = MaskKind::kBool;
      s.mask_shape = {s.B, 1, s.Lq, s.Lk};
    } else if (mk == 2) {
      s.mask = MaskKind::kFloat;
      s.mask_shape = {s.Lq, s.Lk};
    }
    if (g() % 3 == 0) {
      for (int64_t bb = 0; bb < s.B; ++bb) {
        s.kv_lens.push_back(static_cast<int64_t>(g() % (s.Lk + 1)));
      }
      b.per_seq = g() % 2 == 0;
    }
    if (g() % 5 == 0)
      s.alibi = true;
    else if (g() % 5 == 0)
      b.alibi_bh = true;
    if (g() % 4 == 0) b.softcap = 0.5 + static_cast<double>(g() % 30);
    b.dlse = g() % 6 == 0;
    s.strided = g() % 4 == 0;
    CheckFastAgainstReference(b, n % 5 == 0 ? DType::kF32 : DType::kF64);
  }
}

TEST(TiledBackward, LongerSequencesEveryFastHeadDim) {
  for (int64_t D : {64, 128, 256}) {
    BSpec b = Small(1, 4, 2, D > 128 ? 70 : 150, D > 128 ? 140 : 300, D, 900 + D);
    b.s.causal = Causal::kBottomRight;
    CheckFastAgainstReference(b);
  }
}

TEST(TiledBackward, BitIdenticalForAnyThreadCount) {
  BSpec bs = Small(2, 8, 2, 97, 140, 64, 77);
  bs.s.causal = Causal::kTopLeft;
  bs.s.mask = MaskKind::kFloat;
  bs.s.kv_lens = {140, 90};
  bs.softcap = 20.0;
  const BInputs b = MakeB(bs);
  const Fwd f = Forward(b);
  std::vector<Grads> runs;
  for (int threads : {1, 2, 7}) {
    ThreadPool pool(threads);
    runs.push_back(FastGrads(b, f, &pool));
  }
  for (size_t r = 1; r < runs.size(); ++r) {
    for (auto [a, c] : {std::pair<Tensor*, Tensor*>{&runs[0].dq, &runs[r].dq},
                        {&runs[0].dk, &runs[r].dk},
                        {&runs[0].dv, &runs[r].dv}}) {
      EXPECT_EQ(std::memcmp(a->data<float>(), c->data<float>(), a->nbytes()), 0);
    }
  }
}

TEST(TiledBackward, DeadRowsAndUnseenKeysAreExactlyZero) {
  BSpec bs = Small(2, 2, 1, 9, 6, 16, 31);
  bs.s.causal = Causal::kBottomRight;  // rows 0..2 see nothing
  bs.s.kv_lens = {6, 0};
  const BInputs b = MakeB(bs);
  const Fwd f = Forward(b);
  const Grads g = FastGrads(b, f);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 9; ++i) {
      for (int64_t c = 0; c < 16; ++c) {
        if (i < 3) EXPECT_EQ(testing::At(g.dq, 0, h, i, c), 0.0f);
        EXPECT_EQ(testing::At(g.dq, 1, h, i, c), 0.0f);
      }
    }
  }
  for (int64_t j = 0; j < 6; ++j) {
    for (int64_t c = 0; c < 16; ++c) {
      EXPECT_EQ(testing::At(g.dk, 1, 0, j, c), 0.0f);
      EXPECT_EQ(testing::At(g.dv, 1, 0, j, c), 0.0f);
    }
  }
}

TEST(TiledBackward, InfInHiddenValuesDoesNotPoisonGradients) {
  BSpec bs = Small(1, 1, 1, 5, 8, 4, 41);
  bs.s.kv_lens = {6};
  BInputs b = MakeB(bs);
  // Keys 6, 7 are padding: Inf/NaN there must not reach any gradient.
  Tensor& v = b.in.v_store;
  for (int64_t c = 0; c < 4; ++c) {
    v.data<float>()[6 * 4 + c] = INFINITY;
    v.data<float>()[7 * 4 + c] = NAN;
  }
  const Fwd f = Forward(b);
  const Grads fast = FastGrads(b, f);
  const Grads ref = RefGrads(b);
  EXPECT_LT(testing::MaxAbsDiff(fast.dq.view(), ref.dq.view()), 1e-5);
  for (int64_t j = 0; j < 6; ++j) {
    for (int64_t c = 0; c < 4; ++c) {
      EXPECT_NEAR(testing::At(fast.dk, 0, 0, j, c), testing::At(ref.dk, 0, 0, j, c), 1e-5);
    }
  }
}

TEST(TiledBackward, OnlySomeGradientsAndEmptyShapes) {
  BSpec bs = Small(1, 2, 1, 0, 5, 8, 51);  // Lq = 0: dk, dv are zero
  BInputs b = MakeB(bs);
  Fwd f = Forward(b);
  Grads g = FastGrads(b, f);
  for (int64_t e = 0; e < g.dk.numel(); ++e) EXPECT_EQ(g.dk.data<float>()[e], 0.0f);
  bs = Small(1, 2, 1, 4, 0, 8, 52);  // Lk = 0: dq is zero
  b = MakeB(bs);
  f = Forward(b);
  g = FastGrads(b, f);
  for (int64_t e = 0; e < g.dq.numel(); ++e) EXPECT_EQ(g.dq.data<float>()[e], 0.0f);
  // Only dv wanted.
  bs = Small(1, 2, 2, 9, 9, 8, 53);
  b = MakeB(bs);
  f = Forward(b);
  Tensor dv = testing::Zeros(DType::kF32, {1, 2, 9, 8});
  ASSERT_TRUE(AttentionBackward(TensorView(), TensorView(), dv.view(), b.dout.view(), TensorView(),
                                b.in.q, b.in.k, b.in.v, f.out.view(), f.lse.view(), b.in.opt)
                  .ok());
  const Grads ref = RefGrads(b);
  EXPECT_LT(testing::MaxAbsDiff(dv.view(), ref.dv.view()), 1e-5);
}

TEST(TiledBackward, FallsBackToTheReferenceAndExplains) {
  BSpec bs = Small(1, 2, 1, 6, 7, 8, 61);
  const BInputs b = MakeB(bs);
  Grads g = ZeroGrads(bs.s, DType::kF32);
  KernelChoice ch;
  // No saved lse: only the reference can compute it.
  ASSERT_TRUE(AttentionBackward(g.dq.view(), g.dk.view(), g.dv.view(), b.dout.view(), TensorView(),
                                b.in.q, b.in.k, b.in.v, TensorView(), TensorView(), b.in.opt, {},
                                &ch)
                  .ok());
  EXPECT_EQ(ch.kernel, KernelKind::kReference);
  EXPECT_NE(ch.reason.find("absent"), std::string::npos) << ch.reason;
  const Grads ref = RefGrads(b);
  EXPECT_LT(testing::MaxAbsDiff(g.dq.view(), ref.dq.view()), 1e-6);
  KernelOptions ko;
  ko.force = KernelKind::kTiledBackward;
  const Status st =
      AttentionBackward(g.dq.view(), g.dk.view(), g.dv.view(), b.dout.view(), TensorView(), b.in.q,
                        b.in.k, b.in.v, TensorView(), TensorView(), b.in.opt, ko);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cannot force tiled_backward"), std::string::npos);
  ko.force = KernelKind::kTiledPrefill;
  EXPECT_FALSE(AttentionBackward(g.dq.view(), g.dk.view(), g.dv.view(), b.dout.view(), TensorView(),
                                 b.in.q, b.in.k, b.in.v, TensorView(), TensorView(), b.in.opt, ko)
                   .ok());
}

TEST(TiledBackward, ErrorsNameTheOperationAndShapes) {
  BSpec bs = Small(1, 2, 1, 6, 7, 8, 71);
  const BInputs b = MakeB(bs);
  const Fwd f = Forward(b);
  Tensor dq = testing::Zeros(DType::kF32, {1, 2, 6, 7});
  Status st = AttentionBackward(dq.view(), TensorView(), TensorView(), b.dout.view(), TensorView(),
                                b.in.q, b.in.k, b.in.v, f.out.view(), f.lse.view(), b.in.opt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("attention_backward: dq [1,2,6,7] should be [1,2,6,8]"),
            std::string::npos)
      << st.message();
  Tensor bad_dout = testing::Zeros(DType::kF32, {1, 2, 5, 8});
  st = AttentionBackward(TensorView(), TensorView(), TensorView(), bad_dout.view(), TensorView(),
                         b.in.q, b.in.k, b.in.v, f.out.view(), f.lse.view(), b.in.opt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dout"), std::string::npos) << st.message();
  Tensor dk16 = testing::Zeros(DType::kF16, {1, 1, 7, 8});
  st = reference::SdpaBackward(TensorView(), dk16.view(), TensorView(), b.dout.view(), TensorView(),
                               b.in.q, b.in.k, b.in.v, b.in.opt);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("reference::sdpa_backward: dk must be F32 or F64"), std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace attnflow
