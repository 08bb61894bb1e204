// bounds_test.cc — the rounding bounds of docs/golden-format.md
// "Tolerances" (CaseRoundingBounds, micro's af_bound_row) do what they
// promise: a correct implementation computing in float32 lands inside them
// on every stage of every committed case and of random cases (large,
// cancelling logits included), while an implementation that loses more
// precision than it claims, or is off by more than rounding, is named at
// the first stage it touches.
//
// The "correct ports" are independent float32 implementations: the micro
// library's f32 path (streaming online softmax: af_sdpa_f32_ex and its stage
// probe, the device's own code), and three float32 row loops written here
// (forward, reverse and tiled-online summation orders). The expected values
// are the cases' float64 stages (PyTorch float64 for the committed cases,
// attnflow's float64 reference for the random ones). Nothing here compares
// a bound with a number computed from the bound code itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "attnflow/golden.h"
#include "attnflow/micro.h"
#include "attnflow/reference.h"
#include "attnflow/rng.h"
#include "util/scratch_util.h"

namespace fs = std::filesystem;

namespace attnflow {
namespace {

std::vector<std::string> SdpaCases() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(ATTNFLOW_SOURCE_DIR) / "tests/data/golden"))
    if (e.path().extension() == ".safetensors" && e.path().stem().string().rfind("sdpa_", 0) == 0)
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

GoldenCase Load(const std::string& path) {
  Result<GoldenCase> c = LoadGoldenCase(path);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::move(c).value();
}

// The micro library's options for a whole golden case (every batch
// element and head at once).
struct MicroCase {
  af_sdpa_shape shape{};
  af_sdpa_opts opts = AF_SDPA_OPTS_INIT;
  std::vector<float> q, k, v, mask_f, slopes;
  std::vector<uint8_t> mask_b;
  std::vector<int32_t> kv_lens;
  float scale = 1;
};

MicroCase Micro(const GoldenCase& c) {
  MicroCase m;
  m.q = GoldenFloats(c.q), m.k = GoldenFloats(c.k), m.v = GoldenFloats(c.v);
  m.shape = {int32_t(c.q.shape[0]), int32_t(c.q.shape[1]), int32_t(c.k.shape[1]),
             int32_t(c.q.shape[2]), int32_t(c.k.shape[2]), int32_t(c.q.shape[3]),
             int32_t(c.v.shape[3]),
             c.opt.causal == Causal::kTopLeft       ? AF_CAUSAL_TOP_LEFT
             : c.opt.causal == Causal::kBottomRight ? AF_CAUSAL_BOTTOM_RIGHT
                                                    : AF_CAUSAL_NONE};
  m.scale = float(c.opt.scale);
  af_sdpa_opts& o = m.opts;
  o.window_left = int32_t(c.opt.window_left);
  o.window_right = int32_t(c.opt.window_right);
  if (!c.opt.attn_mask.empty_view()) {
    const TensorView& mk = c.opt.attn_mask;
    for (int d = 0; d < 4; ++d) o.mask_shape[d] = 1;
    for (int d = 0; d < mk.rank; ++d) o.mask_shape[4 - mk.rank + d] = int32_t(mk.shape[d]);
    if (mk.dtype == DType::kBool) {
      for (float x : GoldenFloats(mk)) m.mask_b.push_back(x != 0.f);
      o.mask_type = AF_MASK_BOOL;
      o.mask = m.mask_b.data();
    } else {
      m.mask_f = GoldenFloats(mk);
      o.mask_type = AF_MASK_F32;
      o.mask = m.mask_f.data();
    }
  }
  if (!c.opt.alibi_slopes.empty_view()) {
    m.slopes = GoldenFloats(c.opt.alibi_slopes);
    o.alibi_slopes = m.slopes.data();
    o.alibi_per_batch = c.opt.alibi_slopes.rank == 2;
  }
  o.kv_align = c.opt.kv_align == KvAlign::kPerSequence ? AF_KV_ALIGN_PER_SEQUENCE : AF_KV_ALIGN_PADDED;
  o.softcap = float(c.opt.softcap);
  if (!c.opt.kv_lens.empty_view())
    for (int64_t b = 0; b < c.opt.kv_lens.shape[0]; ++b)
      m.kv_lens.push_back(int32_t(c.opt.kv_lens.load(b * c.opt.kv_lens.strides[0])));
  return m;
}

// Every stage of the micro library's f32 path as a GOT: the kernel's out
// and lse, the probe's score rows. `q_mod` changes q first (a port that
// loses precision on its input).
struct Got {
  GotStages got;
  std::map<std::string, Tensor> own;
};

Got MicroStages(const GoldenCase& c, float (*q_mod)(float) = nullptr) {
  MicroCase m = Micro(c);
  if (q_mod != nullptr)
    for (float& x : m.q) x = q_mod(x);
  const af_sdpa_shape& s = m.shape;
  const int64_t B = s.batch, H = s.num_heads, Lq = s.q_len, Lk = s.kv_len, Dv = s.v_dim;
  Got g;
  auto make = [&](const std::string& n, Shape sh) -> float* {
    g.own[n] = Tensor::Zeros(DType::kF32, sh).value();
    return g.own[n].data<float>();
  };
  float* out = make("out", {B, H, Lq, Dv});
  float* lse = make("lse", {B, H, Lq});
  float* sc = make("scores", {B, H, Lq, Lk});
  float* sd = make("scaled", {B, H, Lq, Lk});
  float* mk = make("masked", {B, H, Lq, Lk});
  float* wt = make("weights", {B, H, Lq, Lk});
  std::vector<uint8_t> arena(af_sdpa_f32_workspace_bytes(&s) + 64);
  const int32_t* kvl = m.kv_lens.empty() ? nullptr : m.kv_lens.data();
  EXPECT_EQ(af_sdpa_f32_ex(out, lse, m.q.data(), m.k.data(), m.v.data(), kvl, m.scale, &s,
                           &m.opts, arena.data(), arena.size()),
            AF_OK)
      << c.path;
  for (int32_t b = 0; b < B; ++b)
    for (int32_t h = 0; h < H; ++h)
      for (int32_t i = 0; i < Lq; ++i) {
        const int64_t r = ((b * H + h) * Lq + i) * Lk;
        EXPECT_EQ(af_sdpa_f32_probe(sc + r, sd + r, mk + r, wt + r, nullptr, m.q.data(),
                                    m.k.data(), kvl, m.scale, &s, &m.opts, b, h, i),
                  AF_OK);
      }
  g.got.path = c.path;
  g.got.implementation = "micro-f32";
  for (const auto& [n, t] : g.own) g.got.stages.push_back({n, t.view(), t.shape()});
  return g;
}

const StageReport* Stage(const CaseReport& r, const std::string& n) {
  for (const StageReport& s : r.stages)
    if (s.stage == n) return &s;
  return nullptr;
}

float ToBf16(float x) {  // round to nearest even, 8 bits of mantissa
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

// An sdpa case (no mask, causal none) from float32 inputs, its stages from
// the float64 reference, written to `path` and loaded back.
GoldenCase WriteCase(const std::string& path, std::vector<float> q, std::vector<float> k,
                     std::vector<float> v, Shape qs, Shape ks, double scale) {
  Shape vs = ks;
  std::vector<std::pair<std::string, TensorView>> t = {
      {"q", MakeView(q.data(), DType::kF32, qs)},
      {"k", MakeView(k.data(), DType::kF32, ks)},
      {"v", MakeView(v.data(), DType::kF32, vs)}};
  SdpaOptions opt;
  opt.scale = scale;
  StageRecorder rec;
  EXPECT_TRUE(reference::Sdpa(TensorView(), TensorView(), t[0].second, t[1].second, t[2].second,
                              opt, &rec)
                  .ok());
  std::vector<Tensor> keep;
  keep.reserve(6);
  for (const char* n : {"scores", "scaled", "masked", "weights", "lse", "out"}) {
    const Tensor* st = rec.Find(n);
    Result<Tensor> f = Tensor::Zeros(DType::kF32, st->shape());
    for (int64_t e = 0; e < st->numel(); ++e) f->data<float>()[e] = float(st->data<double>()[e]);
    keep.push_back(std::move(f).value());
    t.emplace_back(n, keep.back().view());
  }
  char sc[32];
  std::snprintf(sc, sizeof sc, "%.17g", scale);
  EXPECT_TRUE(WriteSafetensors(path, t,
                               {{"format", kGoldenFormatV1}, {"kind", "sdpa"}, {"causal", "none"},
                                {"scale", sc}})
                  .ok());
  return Load(path);
}

// The micro library's f32 path, a correct float32 port, is inside the
// float32 rounding bound on every stage of every committed sdpa case.
TEST(RoundingBounds, MicroF32IsInsideEveryBoundOfEveryCase) {
  int cases = 0;
  double worst = 0;
  for (const std::string& path : SdpaCases()) {
    GoldenCase c = Load(path);
    Got g = MicroStages(c);
    Result<CaseReport> r = CompareStages(g.got, *c.file, CompareOptions{});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->tolerance, "bound");
    for (const StageReport& s : r->stages) {
      EXPECT_TRUE(s.compared && s.match) << path << " " << s.stage << " ratio " << s.max_ratio;
      EXPECT_EQ(s.bound, "F32") << s.stage;
      worst = std::max(worst, s.max_ratio);
    }
    ++cases;
  }
  EXPECT_GE(cases, 40);
  EXPECT_LT(worst, 1.0);
  std::printf("micro f32 uses at most %.3g of its f32 rounding bound over %d cases\n", worst, cases);
}

// The fixed rule calls that correct port broken on large cancelling
// logits; the bound does not.
// The chapter's case: logits of +-1000 whose scores cancel to about 1 (each
// key k_j = r_j with its component along q replaced, so q.k_j = 1.25 from
// 64 terms of size ~1000).
TEST(RoundingBounds, FixedToleranceCallsACorrectPortBrokenBoundsDoNot) {
  testing::ScratchDir dir("bounds_cancel");
  const int64_t Lk = 16, D = 64;
  Rng rng(7);
  std::vector<float> q(D), k(Lk * D), v(Lk * D);
  double qq = 0;
  for (float& x : q) {
    x = float(32 * rng.Normal());
    qq += double(x) * x;
  }
  for (int64_t j = 0; j < Lk; ++j) {
    std::vector<double> r(D);
    double rq = 0;
    for (int64_t d = 0; d < D; ++d) {
      r[d] = 32 * rng.Normal();
      rq += r[d] * q[d];
    }
    for (int64_t d = 0; d < D; ++d)
      k[j * D + d] = float(r[d] - (rq - 1.25 * (1 + j % 3)) / qq * q[d]);
    for (int64_t d = 0; d < D; ++d) v[j * D + d] = float(rng.Normal());
  }
  GoldenCase c = WriteCase(dir.P("cancel.safetensors"), q, k, v, {1, 1, 1, D}, {1, 1, Lk, D},
                           1.0 / 8);
  Got g = MicroStages(c);
  CompareOptions fixed;
  fixed.tolerance = "fixed";
  fixed.atol = fixed.rtol = 1e-4;
  Result<CaseReport> f = CompareStages(g.got, *c.file, fixed);
  ASSERT_TRUE(f.ok());
  ASSERT_NE(f->FirstMismatch(), nullptr);
  EXPECT_EQ(f->FirstMismatch()->stage, "scores");
  Result<CaseReport> b = CompareStages(g.got, *c.file, CompareOptions{});
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->ok());
}

// A port that rounds q to bf16 while its dump says f32 is named at
// `scores` (its first stage), and passes when told it computed in bf16.
TEST(RoundingBounds, APortLosingPrecisionIsNamedAtItsFirstStage) {
  int named = 0, cases = 0;
  for (const std::string& path : SdpaCases()) {
    GoldenCase c = Load(path);
    if (c.q.shape[3] < 4) continue;  // D = 1: a product with no sum to lose
    const std::vector<float> q = GoldenFloats(c.q);
    if (std::all_of(q.begin(), q.end(), [](float x) { return ToBf16(x) == x; }))
      continue;  // q is exact in bf16 (integer-valued cases): nothing is lost
    Got g = MicroStages(c, ToBf16);
    Result<CaseReport> r = CompareStages(g.got, *c.file, CompareOptions{});
    ASSERT_TRUE(r.ok());
    const StageReport* bad = r->FirstMismatch();
    ++cases;
    if (bad != nullptr) {
      EXPECT_EQ(bad->stage, "scores") << path;
      ++named;
    }
    CompareOptions as_bf16;
    as_bf16.bound_dtype = DType::kBF16;
    Result<CaseReport> ok = CompareStages(g.got, *c.file, as_bf16);
    if (!ok.ok()) {  // bf16 is too short for this case's sums: no bound, said so
      EXPECT_NE(ok.status().message().find("too long for the type"), std::string::npos);
      continue;
    }
    EXPECT_TRUE(ok->ok()) << path << ": " << ok->FirstMismatch()->stage << " ratio "
                          << ok->FirstMismatch()->max_ratio;
  }
  EXPECT_EQ(named, cases);  // never passes as f32
}

// ---- random cases, three float32 summation orders --------------------------

// A float32 attention row loop: scores in `order` (0 forward, 1 reverse),
// max-subtracted softmax (order 0/1) or a tiled online softmax (order 2,
// tiles of 3 keys, as flash kernels do).
void Float32Port(const std::vector<float>& q, const std::vector<float>& k,
                 const std::vector<float>& v, int64_t H, int64_t Lq, int64_t Lk, int64_t D,
                 float scale, int order, float scale_bug, std::map<std::string, std::vector<float>>* st) {
  auto& sc = (*st)["scores"], &sd = (*st)["scaled"], &mk = (*st)["masked"], &wt = (*st)["weights"],
        &ls = (*st)["lse"], &out = (*st)["out"];
  sc.assign(H * Lq * Lk, 0), sd = mk = wt = sc, ls.assign(H * Lq, 0), out.assign(H * Lq * D, 0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < Lq; ++i) {
      const float* qi = &q[(h * Lq + i) * D];
      const int64_t r = (h * Lq + i) * Lk;
      for (int64_t j = 0; j < Lk; ++j) {
        float acc = 0;
        for (int64_t d0 = 0; d0 < D; ++d0) {
          const int64_t d = order == 1 ? D - 1 - d0 : d0;
          acc += qi[d] * k[(h * Lk + j) * D + d];
        }
        sc[r + j] = acc;
        sd[r + j] = mk[r + j] = acc * (scale * scale_bug);
      }
      float* o = &out[(h * Lq + i) * D];
      if (order < 2) {
        float m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < Lk; ++j) m = std::max(m, mk[r + j]);
        for (int64_t j0 = 0; j0 < Lk; ++j0) {
          const int64_t j = order == 1 ? Lk - 1 - j0 : j0;
          sum += std::exp(mk[r + j] - m);
        }
        for (int64_t j = 0; j < Lk; ++j) wt[r + j] = std::exp(mk[r + j] - m) / sum;
        ls[h * Lq + i] = m + std::log(sum);
        for (int64_t j0 = 0; j0 < Lk; ++j0) {
          const int64_t j = order == 1 ? Lk - 1 - j0 : j0;
          for (int64_t d = 0; d < D; ++d) o[d] += wt[r + j] * v[(h * Lk + j) * D + d];
        }
      } else {
        float m = -INFINITY, l = 0;
        for (int64_t t = 0; t < Lk; t += 3) {
          float tm = m;
          for (int64_t j = t; j < std::min(Lk, t + 3); ++j) tm = std::max(tm, mk[r + j]);
          const float corr = std::exp(m - tm);
          l *= corr;
          for (int64_t d = 0; d < D; ++d) o[d] *= corr;
          for (int64_t j = t; j < std::min(Lk, t + 3); ++j) {
            const float p = std::exp(mk[r + j] - tm);
            l += p;
            for (int64_t d = 0; d < D; ++d) o[d] += p * v[(h * Lk + j) * D + d];
          }
          m = tm;
        }
        for (int64_t d = 0; d < D; ++d) o[d] /= l;
        for (int64_t j = 0; j < Lk; ++j) wt[r + j] = std::exp(mk[r + j] - m) / l;
        ls[h * Lq + i] = m + std::log(l);
      }
    }
}

TEST(RoundingBounds, RandomCasesAndSummationOrdersStayInsideAScaleBugDoesNot) {
  testing::ScratchDir dir("bounds_random");
  Rng rng(20261207);
  int checked = 0;
  for (int trial = 0; trial < 24; ++trial) {
    GoldenSpec spec;
    spec.num_heads = 1 + trial % 3;
    spec.q_len = 1 + trial % 5;
    spec.kv_len = 1 + (trial * 7) % 40;
    spec.head_dim = 1 << (trial % 7);  // 1 .. 64
    spec.seed = 1000 + trial;
    const std::string path = dir.P("r" + std::to_string(trial) + ".safetensors");
    ASSERT_TRUE(WriteGoldenCase(spec, path).ok());
    GoldenCase c = Load(path);
    // Large logits for half the trials: q, k scaled by 30 (scores ~ 1e3, with
    // cancellation), through a copy of the case's inputs.
    const float amp = trial % 2 ? 30.f : 1.f;
    std::vector<float> q = GoldenFloats(c.q), k = GoldenFloats(c.k), v = GoldenFloats(c.v);
    if (amp != 1.f) {
      for (float& x : q) x *= amp;
      for (float& x : k) x *= amp;
      // Rewrite the case with the scaled inputs (its float64 stages too).
      std::vector<std::pair<std::string, TensorView>> t = {
          {"q", MakeView(q.data(), DType::kF32, Shape(c.q.shape.begin(), c.q.shape.begin() + 4))},
          {"k", MakeView(k.data(), DType::kF32, Shape(c.k.shape.begin(), c.k.shape.begin() + 4))},
          {"v", MakeView(v.data(), DType::kF32, Shape(c.v.shape.begin(), c.v.shape.begin() + 4))}};
      StageRecorder rec;
      ASSERT_TRUE(reference::Sdpa(TensorView(), TensorView(), t[0].second, t[1].second,
                                  t[2].second, c.opt, &rec)
                      .ok());
      std::vector<Tensor> keep;
      for (const char* n : {"scores", "scaled", "masked", "weights", "lse", "out"}) {
        const Tensor* s = rec.Find(n);
        Result<Tensor> f = Tensor::Zeros(DType::kF32, s->shape());
        for (int64_t e = 0; e < s->numel(); ++e) f->data<float>()[e] = float(s->data<double>()[e]);
        keep.push_back(std::move(f).value());
        t.emplace_back(n, keep.back().view());
      }
      ASSERT_TRUE(WriteSafetensors(path, t,
                                   {{"format", kGoldenFormatV1}, {"kind", "sdpa"},
                                    {"causal", "none"}, {"scale", [&] { char b[32]; std::snprintf(b, sizeof b, "%.17g", c.opt.scale); return std::string(b); }()}})
                      .ok());
      c = Load(path);
      q = GoldenFloats(c.q), k = GoldenFloats(c.k), v = GoldenFloats(c.v);
    }
    const int64_t H = c.q.shape[1], Lq = c.q.shape[2], Lk = c.k.shape[2], D = c.q.shape[3];
    for (int order = 0; order < 3; ++order) {
      for (float bug : {1.0f, 1.0f + 1.0f / 256}) {  // a scale off by 2^-8 (bf16's own step)
        std::map<std::string, std::vector<float>> st;
        Float32Port(q, k, v, H, Lq, Lk, D, float(c.opt.scale), order, bug, &st);
        GotStages g;
        g.path = path;
        std::vector<Shape> shapes;
        for (auto& [n, vals] : st) {
          Shape sh = n == "lse" ? Shape{1, H, Lq} : (n == "out" ? Shape{1, H, Lq, D} : Shape{1, H, Lq, Lk});
          g.stages.push_back({n, MakeView(vals.data(), DType::kF32, sh), sh});
        }
        Result<CaseReport> r = CompareStages(g, *c.file, CompareOptions{});
        ASSERT_TRUE(r.ok()) << r.status().ToString();
        const StageReport* bad = r->FirstMismatch();
        if (bug == 1.0f) {
          EXPECT_EQ(bad, nullptr) << path << " order " << order << ": " << bad->stage << " ratio "
                                  << bad->max_ratio;
        } else {
          ASSERT_NE(bad, nullptr) << path << " order " << order;
          EXPECT_EQ(bad->stage, "scaled") << path;
        }
        ++checked;
      }
    }
    (void)rng;
  }
  EXPECT_EQ(checked, 24 * 3 * 2);
}

// The bound grows with the unit roundoff and holds the exact value itself
// (a float64 "port" of the stored stages is inside its f64 bound).
TEST(RoundingBounds, MonotoneInTheUnitRoundoff) {
  GoldenCase c = Load(std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/golden/sdpa_basic.safetensors");
  Result<std::map<std::string, Tensor>> b32 = CaseRoundingBounds(c, UnitRoundoff(DType::kF32));
  Result<std::map<std::string, Tensor>> b16 = CaseRoundingBounds(c, UnitRoundoff(DType::kF16));
  ASSERT_TRUE(b32.ok() && b16.ok());
  for (const auto& [n, t] : b32.value()) {
    const Tensor& t16 = b16->at(n);
    for (int64_t e = 0; e < t.numel(); ++e) {
      EXPECT_LE(t.data<float>()[e], t16.data<float>()[e]) << n << " " << e;
      EXPECT_GE(t.data<float>()[e], 0.f);
    }
  }
  // Too short a type for the sum: no bound, an error that says so.
  GoldenSpec spec;
  spec.head_dim = 4096;
  spec.q_len = spec.kv_len = 1;
  testing::ScratchDir dir("bounds_long");
  ASSERT_TRUE(WriteGoldenCase(spec, dir.P("long.safetensors")).ok());
  GoldenCase lc = Load(dir.P("long.safetensors"));
  Result<std::map<std::string, Tensor>> none = CaseRoundingBounds(lc, UnitRoundoff(DType::kBF16));
  EXPECT_FALSE(none.ok());
}

}  // namespace
}  // namespace attnflow

namespace attnflow {
namespace {

// A stage always matches itself, whatever its bound: extreme inputs can give
// a NaN or infinite per-element bound (found by the golden fuzz target:
// tests/regress/golden/stage_with_nan_bound_matches_itself_*), and a
// differing element under a NaN bound is still a mismatch.
TEST(RoundingBounds, EqualValuesMatchUnderANaNBound) {
  std::vector<float> x = {1.f, -2.f, 3e20f}, nan_bound(3, NAN), y = x;
  const Shape shape = {3};
  const TensorView a = MakeView(x.data(), DType::kF32, shape),
                   t = MakeView(nan_bound.data(), DType::kF32, shape);
  EXPECT_TRUE(CompareStageWithin("weights", a, MakeView(y.data(), DType::kF32, shape), t, "f32")
                  .match);
  y[1] = -2.5f;
  const StageReport r =
      CompareStageWithin("weights", a, MakeView(y.data(), DType::kF32, shape), t, "f32");
  EXPECT_FALSE(r.match);
  EXPECT_EQ(r.first_bad, 1);
}

}  // namespace
}  // namespace attnflow
