// ops_test.cc — every op of attnflow/ops.h against its float64 oracle.
//
// Oracles: nn::LinearLayer, nn::Activate, nn::Norm, nn::Softmax,
// nn::ApplyRope, nn::RopeInvFreq, nn::Embed (include/attnflow/nn.h) and,
// for the quantised matmul, a float64 dot product over the rows dequantised
// by io's DequantizeRow (checked bit for bit against gguf-py in gguf_test).
// Sweeps: odd sizes (vector tails, partial GEMM panels and row tiles), row
// strides wider than the data (the padding must stay untouched), every
// Highway target this CPU supports, and 1, 2 and 7 threads — which must give
// bit-identical results (each op splits work by shape only).
// Tolerances are relative to the float64 result, scaled by the reduction
// length where there is one (fp32 accumulation error grows like sqrt(k)·eps
// for random data; the bounds below are loose multiples of that).
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "attnflow/gguf.h"
#include "attnflow/nn.h"
#include "attnflow/ops.h"
#include "attnflow/rng.h"
#include "attnflow/threading.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"
#include "util/simd_targets_util.h"
#include "util/test_util.h"

namespace attnflow {
namespace {

using testing::Random;
using testing::Zeros;

constexpr float kPad = -7.25f;  // value of padding columns that must survive

using testing::ForEachTarget;

// Runs fn(pool) with 1, 2 and 7 threads; each run writes into its own
// buffer, and the test compares them bitwise.
template <typename Fn>
void ForEachThreadCount(Fn fn) {
  for (int threads : {1, 2, 7}) {
    ThreadPool pool(threads);
    fn(pool, threads);
  }
}

std::vector<float> Padded(int64_t rows, int64_t ld) {
  return std::vector<float>(static_cast<size_t>(rows * ld), kPad);
}

// max |got - want| / (atol + rtol |want|) over rows x cols of a strided
// buffer, and that the padding columns are untouched.
double WorstRatio(const std::vector<float>& got, int64_t ld, const Tensor& want, int64_t rows,
                  int64_t cols, double atol, double rtol, bool* pad_ok) {
  double worst = 0;
  *pad_ok = true;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < ld; ++c) {
      const float g = got[static_cast<size_t>(r * ld + c)];
      if (c >= cols) {
        if (g != kPad) *pad_ok = false;
        continue;
      }
      const double w = want.view().load(r * cols + c);
      const double err = std::isnan(g) != std::isnan(w) ? INFINITY : std::fabs(g - w);
      worst = std::max(worst, err / (atol + rtol * std::fabs(w)));
    }
  }
  return worst;
}

// Contiguous F32 copy of a strided [rows, cols] buffer (for the oracles).
Tensor Dense(const float* p, int64_t ld, int64_t rows, int64_t cols) {
  Tensor t = Zeros(DType::kF32, {rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(t.data<float>() + r * cols, p + r * ld, sizeof(float) * static_cast<size_t>(cols));
  return t;
}

// Strided copy of a tensor [rows, cols] into a buffer with row stride ld.
std::vector<float> Strided(const Tensor& t, int64_t ld) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  std::vector<float> b = Padded(rows, ld);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(b.data() + r * ld, t.data<float>() + r * cols, sizeof(float) * static_cast<size_t>(cols));
  return b;
}

// ---- GEMM ----------------------------------------------------------------------

struct LinearCase {
  int64_t m, n, k;
};

nn::Activation NnAct(ops::Activation a) {
  switch (a) {
    case ops::Activation::kGeluErf:
      return nn::Activation::kGelu;
    case ops::Activation::kGeluTanh:
      return nn::Activation::kGeluTanh;
    case ops::Activation::kRelu:
      return nn::Activation::kRelu;
    case ops::Activation::kSilu:
      return nn::Activation::kSwiGlu;  // its gate function is silu
    case ops::Activation::kNone:
      break;
  }
  return nn::Activation::kRelu;
}

void CheckLinear(const LinearCase& c, ops::Activation act, bool bias, bool residual,
                 uint64_t seed) {
  SCOPED_TRACE(std::to_string(c.m) + "x" + std::to_string(c.n) + "x" + std::to_string(c.k) +
               " act=" + ops::ActivationName(act) + (bias ? " bias" : "") +
               (residual ? " residual" : ""));
  const int64_t ldx = c.k + 5, ldy = c.n + 3, ldw = c.k + 2;
  Tensor x = Random({c.m, c.k}, seed), w = Random({c.n, c.k}, seed + 1, 0.5),
         b = Random({c.n}, seed + 2), r = Random({c.m, c.n}, seed + 3);
  std::vector<float> xs = Strided(x, ldx), ws = Strided(w, ldw);
  Result<ops::PackedMatrix> pw = ops::PackedMatrix::Pack(ws.data(), ldw, c.n, c.k);
  ASSERT_TRUE(pw.ok()) << pw.status().ToString();
  // Oracle: act(x·wᵀ + b) + residual in float64.
  Tensor lin = Zeros(DType::kF64, {c.m, c.n});
  ASSERT_TRUE(nn::LinearLayer(lin.view(), x.view(), w.view(), bias ? b.view() : TensorView()).ok());
  Tensor want = Zeros(DType::kF64, {c.m, c.n});
  if (act == ops::Activation::kNone) {
    want = std::move(lin);
  } else {
    ASSERT_TRUE(nn::Activate(want.view(), lin.view(), NnAct(act)).ok());
  }
  if (residual) {
    for (int64_t i = 0; i < want.numel(); ++i)
      want.data<double>()[i] += static_cast<double>(r.data<float>()[i]);
  }
  std::vector<float> first;
  ForEachThreadCount([&](ThreadPool& pool, int threads) {
    std::vector<float> y = Padded(c.m, ldy);
    ops::LinearEpilogue ep;
    ep.bias = bias ? b.data<float>() : nullptr;
    ep.act = act;
    ep.residual = residual ? r.data<float>() : nullptr;
    ep.ld_residual = c.n;
    ops::Linear(y.data(), ldy, xs.data(), ldx, pw.value(), ep, c.m, pool);
    bool pad_ok;
    // fp32 dot of length k: |err| <~ sqrt(k)·eps·|x||w| per term scale.
    const double atol = 2e-6 * std::sqrt(static_cast<double>(c.k)) + 1e-6;
    EXPECT_LE(WorstRatio(y, ldy, want, c.m, c.n, atol, 1e-5, &pad_ok), 1.0) << threads << " threads";
    EXPECT_TRUE(pad_ok) << "Linear wrote outside [m, n]";
    if (first.empty()) {
      first = y;
    } else {
      EXPECT_TRUE(y == first) << threads << " threads differ from 1 thread";
    }
  });
}

TEST(OpsLinear, MatchesFloat64OnOddShapesEveryTargetAndThreadCount) {
  const std::vector<LinearCase> cases = {{1, 1, 1},   {3, 5, 7},    {5, 33, 19},  {9, 17, 64},
                                         {13, 47, 3}, {31, 67, 131}, {70, 65, 3}, {129, 100, 384}};
  const std::set<std::string> ran = ForEachTarget([&] {
    uint64_t seed = 10;
    for (const LinearCase& c : cases) CheckLinear(c, ops::Activation::kNone, true, false, seed += 4);
    CheckLinear({37, 45, 29}, ops::Activation::kNone, false, false, 3);
  });
  std::string list;
  for (const auto& r : ran) list += r + " ";
  std::printf("ops targets exercised: %s\n", list.c_str());
  EXPECT_GE(ran.size(), 1u);
}

TEST(OpsLinear, FusedEpiloguesMatchComposedFloat64) {
  ForEachTarget([&] {
    uint64_t seed = 100;
    for (ops::Activation act : {ops::Activation::kGeluErf, ops::Activation::kGeluTanh,
                                ops::Activation::kRelu, ops::Activation::kSilu}) {
      CheckLinear({11, 37, 23}, act, true, false, seed += 4);
      CheckLinear({66, 20, 40}, act, true, true, seed += 4);
    }
    CheckLinear({19, 50, 33}, ops::Activation::kNone, true, true, 7);
  });
}

// ops::Linear with a bias (no activation) of random x [m, k] (seed), w [n, k]
// (seed + 1) and b [n] (seed + 2) on a pool of `threads`: how many outputs
// differ from the in-order fma chain over k plus the bias (-1 if packing
// fails).
int FmaChainMismatches(int64_t m, int64_t n, int64_t k, uint64_t seed, int threads) {
  Tensor x = Random({m, k}, seed), w = Random({n, k}, seed + 1), b = Random({n}, seed + 2);
  Result<ops::PackedMatrix> pw = ops::PackedMatrix::Pack(w.data<float>(), k, n, k);
  EXPECT_TRUE(pw.ok());
  if (!pw.ok()) return -1;
  std::vector<float> y(static_cast<size_t>(m * n));
  ThreadPool pool(threads);
  ops::Linear(y.data(), n, x.data<float>(), k, pw.value(), {.bias = b.data<float>()}, m, pool);
  int mismatches = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t p = 0; p < k; ++p)
        acc = std::fma(x.data<float>()[i * k + p], w.data<float>()[j * k + p], acc);
      mismatches += (acc + b.data<float>()[j]) != y[static_cast<size_t>(i * n + j)];
    }
  return mismatches;
}

// Invariant 1 of ops/gemm.cc: every output is the plain fma chain over k in
// order, then + bias — whatever the tile, task or thread split. On targets
// with native FMA that equals this scalar loop bit for bit.
TEST(OpsLinear, EveryOutputIsTheInOrderFmaChain) {
  ForEachTarget([&] {
    const std::string t = ops::TargetName();
    if (t == "SSE4" || t == "EMU128" || t == "SCALAR") return;  // no native FMA there
    EXPECT_EQ(FmaChainMismatches(21, 39, 77, 1, 3), 0);
  });
}

// The small-M path of ops/gemm.cc (m <= 64 rows: full 64-column blocks
// against all rows, k in chunks of 64 with parked accumulators; AVX-512
// targets, the others take the general path): rows 1..64 around the tile
// size 6, n with full blocks plus ragged panels, k within one chunk and across
// several, every epilogue, against float64.
TEST(OpsLinear, SmallRowCountsMatchFloat64) {
  ForEachTarget([&] {
    uint64_t seed = 300;
    for (int64_t m : {1, 2, 3, 5, 6, 7, 13, 17, 64})
      for (LinearCase c : {LinearCase{m, 64, 7}, LinearCase{m, 149, 130}, LinearCase{m, 384, 65}})
        CheckLinear(c, ops::Activation::kNone, true, m % 2 == 1, seed += 4);
    CheckLinear({11, 128, 200}, ops::Activation::kGeluErf, true, false, seed += 4);
    CheckLinear({4, 192, 129}, ops::Activation::kSilu, false, true, seed += 4);
    CheckLinear({65, 128, 70}, ops::Activation::kNone, true, true, seed += 4);  // general path
  });
}

// Invariant 1 on the small-M path: parking the accumulators between k chunks
// keeps every output the plain in-order fma chain.
TEST(OpsLinear, SmallRowCountsAreTheInOrderFmaChain) {
  ForEachTarget([&] {
    const std::string t = ops::TargetName();
    if (t == "SSE4" || t == "EMU128" || t == "SCALAR") return;  // no native FMA there
    for (int64_t m : {1, 6, 17}) {
      EXPECT_EQ(FmaChainMismatches(m, 133, 300, 11, 2), 0) << "m=" << m << " target " << t;
    }
  });
}

// The norm epilogue (LinearEpilogue::norm_*; ops/gemm.cc invariant 4):
// norm_out = LayerNorm(act(x·wᵀ + b) + residual), run by the last task of
// each row block. Checks, on every target and 1/2/7 threads:
//  - fused == composed (ops::Linear, then ops::LayerNorm on its output), bit
//    for bit, for norm_out and for the pre-norm rows y: the same LayerNorm
//    code runs on the same stored rows, so any difference is a bug (a row
//    normalised before all its column tasks stored, a wrong row block);
//  - equal results for 1, 2 and 7 threads;
//  - against float64 (nn::LinearLayer + residual, then nn::Norm). Tolerance:
//    LayerNorm's own 2e-5 (abs + rel, as OpsNorm) plus the GEMM's fp32 error
//    (the CheckLinear bound) carried through the normalisation: it is scaled
//    by |gamma| / std(row), times 3 for its share in the mean and variance.
// Shapes: one row block with N split over 6 column tasks (MiniLM batch 1,
// n = 384), several row blocks (m = 130, 200), ragged n (a partial panel and
// a partial column block), n below one block, norm_out aliasing the
// residual (what the encoder does), and m above kMaxFusedNormRows (the
// composed fallback).
void CheckLinearNorm(int64_t m, int64_t n, int64_t k, ops::Activation act, bool alias,
                     uint64_t seed) {
  SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
               " act=" + ops::ActivationName(act) + (alias ? " norm_out=residual" : ""));
  const int64_t ldx = k + 1, ldy = n + 3, ldo = alias ? n : n + 2;
  const double eps = 1e-5;
  Tensor x = Random({m, k}, seed), w = Random({n, k}, seed + 1, 0.5), b = Random({n}, seed + 2),
         r = Random({m, n}, seed + 3), g = Random({n}, seed + 4), be = Random({n}, seed + 5);
  std::vector<float> xs = Strided(x, ldx);
  Result<ops::PackedMatrix> pw = ops::PackedMatrix::Pack(w.data<float>(), k, n, k);
  ASSERT_TRUE(pw.ok()) << pw.status().ToString();
  // float64 oracle.
  Tensor pre = Zeros(DType::kF64, {m, n}), want = Zeros(DType::kF64, {m, n});
  ASSERT_TRUE(nn::LinearLayer(pre.view(), x.view(), w.view(), b.view()).ok());
  if (act != ops::Activation::kNone) ASSERT_TRUE(nn::Activate(pre.view(), pre.view(), NnAct(act)).ok());
  for (int64_t i = 0; i < pre.numel(); ++i) pre.data<double>()[i] += r.data<float>()[i];
  ASSERT_TRUE(nn::Norm(want.view(), pre.view(), nn::NormWeights{g.view(), be.view()},
                       nn::NormKind::kLayerNorm, eps)
                  .ok());
  const double gemm_atol = 2e-6 * std::sqrt(static_cast<double>(k)) + 1e-6;
  std::vector<float> first_out, first_y;
  ForEachThreadCount([&](ThreadPool& pool, int threads) {
    // Composed: Linear, then LayerNorm of its output.
    ops::LinearEpilogue ep{.bias = b.data<float>(), .act = act, .ld_residual = n};
    std::vector<float> res_c(r.data<float>(), r.data<float>() + m * n), y_c = Padded(m, ldy),
        out_c = alias ? res_c : Padded(m, ldo);
    ep.residual = res_c.data();
    ops::Linear(y_c.data(), ldy, xs.data(), ldx, pw.value(), ep, m, pool);
    float* oc = alias ? res_c.data() : out_c.data();
    ops::LayerNorm(oc, ldo, y_c.data(), ldy, g.data<float>(), be.data<float>(), eps, m, n, pool);
    if (alias) out_c = res_c;
    // Fused.
    std::vector<float> res_f(r.data<float>(), r.data<float>() + m * n), y_f = Padded(m, ldy),
        out_f = Padded(m, ldo);
    ep.residual = res_f.data();
    ep.norm_gamma = g.data<float>();
    ep.norm_beta = be.data<float>();
    ep.norm_eps = eps;
    ep.norm_out = alias ? res_f.data() : out_f.data();
    ep.ld_norm_out = ldo;
    ops::Linear(y_f.data(), ldy, xs.data(), ldx, pw.value(), ep, m, pool);
    if (alias) out_f = res_f;
    EXPECT_TRUE(y_f == y_c) << threads << " threads: pre-norm rows differ from the composed path";
    EXPECT_TRUE(out_f == out_c) << threads << " threads: fused norm differs from the composed path";
    // Against float64, row by row.
    double worst = 0;
    for (int64_t i = 0; i < m; ++i) {
      double mean = 0, var = 0, amax = 0;
      for (int64_t j = 0; j < n; ++j) mean += pre.data<double>()[i * n + j];
      mean /= static_cast<double>(n);
      for (int64_t j = 0; j < n; ++j) {
        const double d = pre.data<double>()[i * n + j] - mean;
        var += d * d;
        amax = std::max(amax, std::fabs(pre.data<double>()[i * n + j]));
      }
      var /= static_cast<double>(n);
      const double carried = 3.0 * (gemm_atol + 1e-5 * amax) / std::sqrt(var + eps);
      for (int64_t j = 0; j < n; ++j) {
        const double wv = want.data<double>()[i * n + j];
        const double bound = 2e-5 + 2e-5 * std::fabs(wv) +
                             std::fabs(static_cast<double>(g.data<float>()[j])) * carried;
        worst = std::max(worst, std::fabs(out_f[static_cast<size_t>(i * ldo + j)] - wv) / bound);
      }
      if (!alias)
        for (int64_t j = n; j < ldo; ++j)
          EXPECT_EQ(out_f[static_cast<size_t>(i * ldo + j)], kPad) << "norm_out padding written";
    }
    EXPECT_LE(worst, 1.0) << threads << " threads vs float64";
    if (first_out.empty()) {
      first_out = out_f;
      first_y = y_f;
    } else {
      EXPECT_TRUE(out_f == first_out && y_f == first_y) << threads << " threads differ from 1";
    }
  });
}

TEST(OpsLinear, NormEpilogueEqualsComposedAndMatchesFloat64) {
  EXPECT_TRUE(ops::LinearFusesNorm(1) && ops::LinearFusesNorm(ops::kMaxFusedNormRows));
  EXPECT_FALSE(ops::LinearFusesNorm(ops::kMaxFusedNormRows + 1));
  ForEachTarget([&] {
    uint64_t seed = 500;
    for (int64_t m : {1, 5, 17, 64}) CheckLinearNorm(m, 384, 65, ops::Activation::kNone, m != 5, seed += 8);
    CheckLinearNorm(17, 384, 384, ops::Activation::kNone, true, seed += 8);  // MiniLM O dense
    CheckLinearNorm(130, 384, 96, ops::Activation::kNone, true, seed += 8);  // 3 row blocks
    CheckLinearNorm(200, 149, 33, ops::Activation::kGeluErf, false, seed += 8);  // ragged n
    CheckLinearNorm(9, 40, 20, ops::Activation::kNone, false, seed += 8);  // one task
  });
  // Above kMaxFusedNormRows: the composed fallback (still equal, by the same
  // checks), on the best target only (the shape is tall).
  CheckLinearNorm(ops::kMaxFusedNormRows + 70, 20, 3, ops::Activation::kNone, true, 900);
}

// PackArena: matrices packed into one arena hold the same bytes as
// separately packed ones (so every GEMM result is the same), start 64-byte
// aligned (the small-M kernel's aligned loads), the arena itself starts on a
// 2 MiB boundary, and a matrix that does not fit is a named error.
TEST(OpsLinear, ArenaPackingStoresTheSameBytes) {
  ops::PackArena arena;
  const int64_t shapes[3][2] = {{37, 29}, {384, 384}, {5, 1536}};
  size_t total = 0;
  for (const auto& sh : shapes) total += (ops::PackedMatrix::PackedBytes(sh[0], sh[1]) + 63) / 64 * 64;
  ASSERT_TRUE(arena.Reserve(total).ok());
  uint64_t seed = 40;
  for (const auto& sh : shapes) {
    Tensor w = Random({sh[0], sh[1]}, seed++);
    Result<ops::PackedMatrix> own = ops::PackedMatrix::Pack(w.data<float>(), sh[1], sh[0], sh[1]);
    Result<ops::PackedMatrix> in = ops::PackedMatrix::Pack(w.data<float>(), sh[1], sh[0], sh[1], &arena);
    ASSERT_TRUE(own.ok() && in.ok());
    ASSERT_EQ(own->bytes(), in->bytes());
    EXPECT_EQ(own->bytes(), ops::PackedMatrix::PackedBytes(sh[0], sh[1]));
    EXPECT_EQ(std::memcmp(own->panels(), in->panels(), own->bytes()), 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(in->panels()) % 64, 0u);
  }
  EXPECT_EQ(arena.used(), total);
  Tensor w = Random({16, 4}, 1);
  Result<ops::PackedMatrix> over = ops::PackedMatrix::Pack(w.data<float>(), 4, 16, 4, &arena);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("arena"), std::string::npos) << over.status().message();
  ops::PackArena fresh;
  ASSERT_TRUE(fresh.Reserve(4 << 20).ok());
  float* p = fresh.Take(64);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (uintptr_t{2} << 20), 0u);
}

TEST(OpsLinear, PackRejectsBadShapes) {
  std::vector<float> w(12);
  EXPECT_FALSE(ops::PackedMatrix::Pack(w.data(), 2, 3, 4).ok());  // ldw < k
  EXPECT_FALSE(ops::PackedMatrix::Pack(w.data(), 4, 0, 4).ok());
  EXPECT_FALSE(ops::PackedMatrix::Pack(nullptr, 4, 3, 4).ok());
  Result<ops::PackedMatrix> r = ops::PackedMatrix::Pack(w.data(), 2, 3, 4);
  EXPECT_NE(r.status().message().find("[3, 4]"), std::string::npos) << r.status().message();
}

// ---- quantised matmul ------------------------------------------------------------

// Random GGUF rows of `type`: [rows, cols] in ggml's row layout.
std::vector<uint8_t> RandomRows(GgmlType type, int64_t rows, int64_t cols, Rng& rng) {
  std::vector<uint8_t> b;
  auto put16 = [&](uint16_t h) {
    b.push_back(static_cast<uint8_t>(h & 0xFF));
    b.push_back(static_cast<uint8_t>(h >> 8));
  };
  for (int64_t r = 0; r < rows; ++r) {
    switch (type) {
      case GgmlType::kF32:
        for (int64_t c = 0; c < cols; ++c) {
          const float v = static_cast<float>(rng.Normal(0, 0.3));
          uint8_t raw[4];
          std::memcpy(raw, &v, 4);
          b.insert(b.end(), raw, raw + 4);
        }
        break;
      case GgmlType::kF16:
        for (int64_t c = 0; c < cols; ++c) put16(F32ToF16(static_cast<float>(rng.Normal(0, 0.3))));
        break;
      case GgmlType::kBF16:
        for (int64_t c = 0; c < cols; ++c) put16(F32ToBF16(static_cast<float>(rng.Normal(0, 0.3))));
        break;
      case GgmlType::kQ8_0:
        for (int64_t blk = 0; blk < cols / 32; ++blk) {
          put16(F32ToF16(static_cast<float>(rng.Uniform(0.001, 0.02))));
          for (int j = 0; j < 32; ++j) b.push_back(static_cast<uint8_t>(rng.Below(256)));
        }
        break;
      case GgmlType::kQ4_0:
        for (int64_t blk = 0; blk < cols / 32; ++blk) {
          put16(F32ToF16(static_cast<float>(rng.Uniform(0.01, 0.1))));
          for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(rng.Below(256)));
        }
        break;
      case GgmlType::kQ4_1:
        for (int64_t blk = 0; blk < cols / 32; ++blk) {
          put16(F32ToF16(static_cast<float>(rng.Uniform(0.01, 0.1))));
          put16(F32ToF16(static_cast<float>(rng.Uniform(-0.5, 0.0))));
          for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(rng.Below(256)));
        }
        break;
      default:
        ADD_FAILURE() << "no generator for type";
    }
  }
  return b;
}

TEST(OpsQMatMul, EveryWeightTypeMatchesFloat64OnBothPaths) {
  const int64_t rows = 45, cols = 96;  // 3 blocks of 32 per row; rows not a tile multiple
  ForEachTarget([&] {
    for (GgmlType type : {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16, GgmlType::kQ8_0,
                          GgmlType::kQ4_0, GgmlType::kQ4_1}) {
      SCOPED_TRACE(GgmlTypeName(static_cast<uint32_t>(type)));
      Rng rng(static_cast<uint64_t>(type) + 1);
      std::vector<uint8_t> raw = RandomRows(type, rows, cols, rng);
      ops::QMatrix w;
      w.type = type;
      w.data = raw.data();
      w.rows = rows;
      w.cols = cols;
      w.row_bytes = static_cast<int64_t>(raw.size()) / rows;
      w.name = "w";
      std::vector<float> deq(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_TRUE(DequantizeRow(deq.data() + r * cols, raw.data() + r * w.row_bytes, type, cols).ok());
      for (int64_t T : {1, 3, 6, 17}) {  // fused dot below 6 tokens, packed GEMM from 6
        Tensor x = Random({T, cols}, static_cast<uint64_t>(T) + 50);
        std::vector<float> first;
        ForEachThreadCount([&](ThreadPool& pool, int threads) {
          const int64_t ldy = rows + 2;
          std::vector<float> y = Padded(T, ldy);
          ops::MatMulScratch scratch;
          ASSERT_TRUE(ops::QMatMul({{y.data(), ldy, &w}}, x.data<float>(), cols, T, pool, scratch).ok());
          double worst = 0;
          for (int64_t t = 0; t < T; ++t)
            for (int64_t r = 0; r < ldy; ++r) {
              const float got = y[static_cast<size_t>(t * ldy + r)];
              if (r >= rows) {
                EXPECT_EQ(got, kPad);
                continue;
              }
              double want = 0, mag = 0;
              for (int64_t c = 0; c < cols; ++c) {
                const double p = double(x.data<float>()[t * cols + c]) * deq[static_cast<size_t>(r * cols + c)];
                want += p;
                mag += std::fabs(p);
              }
              worst = std::max(worst, std::fabs(got - want) / (1e-6 * mag + 1e-7));
            }
          EXPECT_LE(worst, 1.0) << "T=" << T << " threads=" << threads;
          if (first.empty()) first = y;
          else EXPECT_TRUE(y == first) << "T=" << T << ": " << threads << " threads differ";
        });
      }
    }
  });
}

TEST(OpsQMatMul, MismatchedShapesAreNamedErrors) {
  std::vector<uint8_t> raw(4 * 8 * 4);
  ops::QMatrix w{GgmlType::kF32, raw.data(), 4, 8, 32, "blk.0.attn_q.weight"};
  std::vector<float> x(3 * 6), y(3 * 4);
  ThreadPool pool(1);
  ops::MatMulScratch scratch;
  Status st = ops::QMatMul({{y.data(), 4, &w}}, x.data(), 6, 3, pool, scratch);  // ldx < cols
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("blk.0.attn_q.weight [4,8]"), std::string::npos) << st.message();
}

// ---- norms -------------------------------------------------------------------------

TEST(OpsNorm, LayerNormAndRmsNormMatchNnNorm) {
  ForEachTarget([&] {
    for (int64_t n : {1, 7, 16, 33, 384, 577}) {
      for (bool rms : {false, true}) {
        SCOPED_TRACE((rms ? "rms n=" : "layer n=") + std::to_string(n));
        // n = 577: 130 rows are 3 LayerNorm tasks (>= 32768 elements each).
        const int64_t rows = n == 577 ? 130 : 37, ldx = n + 1, ldy = n + 4;
        Tensor x = Random({rows, n}, static_cast<uint64_t>(n), 3.0), g = Random({n}, 2),
               b = Random({n}, 3);
        for (int64_t i = 0; i < n; ++i) x.data<float>()[i] += 100.0f;  // a row with a large mean
        Tensor want = Zeros(DType::kF64, {rows, n});
        nn::NormWeights nw{g.view(), rms ? TensorView() : b.view()};
        ASSERT_TRUE(nn::Norm(want.view(), x.view(), nw, rms ? nn::NormKind::kRmsNorm : nn::NormKind::kLayerNorm,
                             1e-5)
                        .ok());
        std::vector<float> xs = Strided(x, ldx), first;
        ForEachThreadCount([&](ThreadPool& pool, int threads) {
          std::vector<float> y = Padded(rows, ldy);
          if (rms) {
            ops::RmsNorm(y.data(), ldy, xs.data(), ldx, g.data<float>(), 1e-5, rows, n, pool);
          } else {
            ops::LayerNorm(y.data(), ldy, xs.data(), ldx, g.data<float>(), b.data<float>(), 1e-5, rows, n, pool);
          }
          bool pad_ok;
          EXPECT_LE(WorstRatio(y, ldy, want, rows, n, 2e-5, 2e-5, &pad_ok), 1.0) << threads;
          EXPECT_TRUE(pad_ok);
          if (first.empty()) first = y;
          else EXPECT_TRUE(y == first) << threads << " threads differ";
        });
        // In place (y == x).
        std::vector<float> inplace = Strided(x, n);
        ThreadPool pool(2);
        if (rms) ops::RmsNorm(inplace.data(), n, inplace.data(), n, g.data<float>(), 1e-5, rows, n, pool);
        else ops::LayerNorm(inplace.data(), n, inplace.data(), n, g.data<float>(), b.data<float>(), 1e-5, rows, n, pool);
        bool pad_ok;
        EXPECT_LE(WorstRatio(inplace, n, want, rows, n, 2e-5, 2e-5, &pad_ok), 1.0) << "in place";
      }
    }
  });
}

// ---- elementwise ----------------------------------------------------------------------

TEST(OpsElementwise, ActivationsSwiGluAndAddMatchFloat64) {
  // Inputs over the whole useful range, the extremes and a tail of odd length.
  std::vector<float> x;
  for (int i = -12000; i <= 12000; i += 7) x.push_back(static_cast<float>(i) * 1e-3f);
  for (float v : {-1e30f, -200.0f, -90.0f, -0.0f, 0.0f, 90.0f, 1e30f}) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());
  Tensor xt = Zeros(DType::kF32, {n});
  std::memcpy(xt.data<float>(), x.data(), sizeof(float) * x.size());
  ForEachTarget([&] {
    for (ops::Activation act : {ops::Activation::kGeluErf, ops::Activation::kGeluTanh,
                                ops::Activation::kRelu, ops::Activation::kSilu}) {
      SCOPED_TRACE(ops::ActivationName(act));
      Tensor want = Zeros(DType::kF64, {n});
      ASSERT_TRUE(nn::Activate(want.view(), xt.view(), NnAct(act)).ok());
      std::vector<float> first;
      ForEachThreadCount([&](ThreadPool& pool, int threads) {
        std::vector<float> y(x.size(), kPad);
        ops::Activate(y.data(), x.data(), act, n, pool);
        double worst = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double w = want.data<double>()[i];
          // erf/tanh/exp approximations: ~1e-6 of max(1, |y|) (GELU's
          // 1 + erf cancels for x < 0, which scales erf's 2e-7 by |x|/2).
          worst = std::max(worst, std::fabs(y[static_cast<size_t>(i)] - w) / (1.5e-6 * std::max(1.0, std::fabs(w))));
        }
        EXPECT_LE(worst, 1.0) << threads;
        if (first.empty()) first = y;
        else EXPECT_TRUE(y == first) << threads << " threads differ";
      });
    }
    // SwiGLU = silu(gate) * up, and the residual add (exact).
    Tensor up = Random({n}, 9);
    Tensor silu = Zeros(DType::kF64, {n});
    ASSERT_TRUE(nn::Activate(silu.view(), xt.view(), nn::Activation::kSwiGlu).ok());
    ThreadPool pool(2);
    std::vector<float> y(x.size());
    ops::SwiGlu(y.data(), x.data(), up.data<float>(), n, pool);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double w = silu.data<double>()[i] * up.data<float>()[i];
      worst = std::max(worst, std::fabs(y[static_cast<size_t>(i)] - w) / (2e-6 * std::max(1.0, std::fabs(w))));
    }
    EXPECT_LE(worst, 1.0);
    ops::Add(y.data(), x.data(), up.data<float>(), n, pool);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[static_cast<size_t>(i)], x[static_cast<size_t>(i)] + up.data<float>()[i]);
  });
}

TEST(OpsElementwise, SoftmaxMatchesFloat64AndDeadRowsAreZero) {
  ForEachTarget([&] {
    for (int64_t n : {1, 5, 16, 31, 1000}) {
      const int64_t rows = 21, ld = n + 3;
      Tensor x = Random({rows, n}, static_cast<uint64_t>(n), 4.0);
      for (int64_t c = 0; c < n; ++c) x.data<float>()[3 * n + c] = -INFINITY;  // dead row
      for (int64_t c = 0; c < n; c += 2) x.data<float>()[5 * n + c] = -INFINITY;  // partly masked
      x.data<float>()[7 * n] = 80.0f;                                             // one dominant key
      Tensor want = Zeros(DType::kF64, {rows, n});
      ASSERT_TRUE(nn::Softmax(want.view(), x.view()).ok());
      std::vector<float> xs = Strided(x, ld), first;
      ForEachThreadCount([&](ThreadPool& pool, int threads) {
        std::vector<float> y = Padded(rows, ld);
        ops::Softmax(y.data(), ld, xs.data(), ld, rows, n, pool);
        bool pad_ok;
        EXPECT_LE(WorstRatio(y, ld, want, rows, n, 1e-7, 2e-6, &pad_ok), 1.0) << "n=" << n;
        EXPECT_TRUE(pad_ok);
        for (int64_t c = 0; c < n; ++c) EXPECT_EQ(y[static_cast<size_t>(3 * ld + c)], 0.0f);
        if (first.empty()) first = y;
        else EXPECT_TRUE(y == first) << threads << " threads differ";
      });
    }
  });
}

// ---- RoPE ------------------------------------------------------------------------------

TEST(OpsRope, BothLayoutsPartialRotationAndLinearScalingMatchNnApplyRope) {
  const int64_t T = 13, H = 3;
  for (int64_t D : {8, 64, 30}) {
    for (int64_t rd : {D, D / 2 - (D / 2) % 2}) {
      for (ops::RopeLayout layout : {ops::RopeLayout::kHalf, ops::RopeLayout::kInterleaved}) {
        for (double factor : {1.0, 4.0}) {
          SCOPED_TRACE("D=" + std::to_string(D) + " rotary=" + std::to_string(rd) +
                       (layout == ops::RopeLayout::kHalf ? " half" : " interleaved") +
                       " factor=" + std::to_string(factor));
          nn::RopeOptions opt;
          opt.layout = layout == ops::RopeLayout::kHalf ? nn::RopeLayout::kHalf : nn::RopeLayout::kInterleaved;
          opt.theta = 10000.0;
          opt.rotary_dim = rd;
          opt.scaling = factor == 1.0 ? nn::RopeScaling::kNone : nn::RopeScaling::kLinear;
          opt.factor = factor;
          const int64_t offset = 500;  // a decode step far into the context
          // x [T, H, D] is the nn layout [1, H, T, D] permuted.
          Tensor x = Random({1, T, H, D}, static_cast<uint64_t>(D + rd));
          Tensor want = Zeros(DType::kF64, {1, H, T, D});
          ASSERT_TRUE(nn::ApplyRope(want.view(), x.view().Permuted({0, 2, 1, 3}), TensorView(), offset, opt).ok());
          std::vector<double> inv64;
          ASSERT_TRUE(nn::RopeInvFreq(&inv64, rd, opt, 0).ok());
          std::vector<float> inv(static_cast<size_t>(rd / 2));
          ops::RopeInvFreq(inv.data(), opt.theta, rd);
          // HF's fp32 exponent 2c/r (inexact for r = 30) moves base^e by up to
          // ln(base)·2^-24 relative: 9.2 · 6e-8 < 1e-6.
          for (size_t c = 0; c < inv.size(); ++c) EXPECT_NEAR(inv[c], inv64[c], 1e-6 * inv64[c]);
          std::vector<int64_t> pos(static_cast<size_t>(T));
          for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = offset + t;
          std::vector<float> cos(static_cast<size_t>(T * rd / 2)), sin(cos.size());
          ops::RopeTables(cos.data(), sin.data(), pos.data(), inv.data(), 1.0 / factor, T, rd);
          ThreadPool pool(2);
          std::vector<float> y(x.data<float>(), x.data<float>() + x.numel());
          ops::Rope(y.data(), H * D, cos.data(), sin.data(), layout, T, H, D, rd, pool);
          double worst = 0;
          for (int64_t t = 0; t < T; ++t)
            for (int64_t h = 0; h < H; ++h)
              for (int64_t d = 0; d < D; ++d) {
                const double w = want.data<double>()[(h * T + t) * D + d];
                // fp32 angles at positions ~500: |angle error| ~ 500 * 2^-24.
                worst = std::max(worst, std::fabs(y[static_cast<size_t>((t * H + h) * D + d)] - w) / 1e-4);
              }
          EXPECT_LE(worst, 1.0);
        }
      }
    }
  }
}

// ---- embedding lookup ----------------------------------------------------------------

TEST(OpsEmbedding, LookupMatchesNnEmbedAndRejectsBadIds) {
  const int64_t V = 11, E = 6;
  Tensor table = Random({V, E}, 4);
  ops::QMatrix q{GgmlType::kF32, reinterpret_cast<const uint8_t*>(table.data<float>()), V, E,
                 E * 4, "token_embd.weight"};
  std::vector<int32_t> ids = {0, 10, 3, 3, 7};
  const int64_t T = static_cast<int64_t>(ids.size());
  Tensor id_t = Zeros(DType::kI64, {1, T});
  for (int64_t t = 0; t < T; ++t) id_t.data<int64_t>()[t] = ids[static_cast<size_t>(t)];
  Tensor want = Zeros(DType::kF64, {1, T, E});
  ASSERT_TRUE(nn::Embed(want.view(), id_t.view(), table.view()).ok());
  std::vector<float> y = Padded(T, E + 2);
  ASSERT_TRUE(ops::EmbeddingLookup(y.data(), E + 2, ids.data(), q, T).ok());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t e = 0; e < E; ++e)
      EXPECT_EQ(y[static_cast<size_t>(t * (E + 2) + e)], want.data<double>()[t * E + e]);
  ids[2] = 11;
  Status st = ops::EmbeddingLookup(y.data(), E, ids.data(), q, T);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("ids[2] = 11"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("token_embd.weight [11, 6]"), std::string::npos) << st.message();
  ids[2] = -1;
  EXPECT_EQ(ops::EmbeddingLookup(y.data(), E, ids.data(), q, T).code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace attnflow
