// kernel_test_util.h — shared helpers of tests/kernels/kernels_test.cc and
// tests/kernels/decode_test.cc: problem specs (Spec, SweepSpecs), input builders
// (Make), the plain fp32 implementation that sets the tolerance (NaiveF32),
// the float64 reference run (Reference), the fast-kernel run (RunKernel), the
// FlashAttention-style comparison (CheckAgainst, CheckRun), runs on several
// thread pools (RunOnPools) and the bit-identity of several runs
// (ExpectBitIdentical). Spec is an aggregate: tests write a case as one
// designated initializer, e.g. Spec{.H = 2, .Lq = 9, .Lk = 40, .D = 16}.
//
// Tolerance method (FlashAttention's): on the same inputs, the kernel's max
// error vs the float64 reference must be <= 2x the max error of a plain fp32
// implementation plus a tiny floor for exact-zero cases. Rows the reference
// marks dead (LSE -inf) must be exactly out 0 / LSE -inf; NaN rows must be
// NaN. Expected values come only from reference::Sdpa and the golden files.
// Test-only: everything is in an anonymous namespace of each test binary.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/golden.h"
#include "attnflow/kernels.h"
#include "attnflow/semantics.h"
#include "attnflow/threading.h"
#include "hwy/targets.h"
#include "util/test_util.h"

namespace attnflow {
namespace {

using ::attnflow::testing::Random;
using ::attnflow::testing::Zeros;

enum class MaskKind { kNone, kBool, kFloat };

struct Spec {
  int64_t B = 1, H = 1, Hkv = 1, Lq = 1, Lk = 1, D = 8, Dv = 0;
  DType kv = DType::kF32;
  Causal causal = Causal::kNone;
  int64_t wl = -1, wr = -1;
  double scale = std::numeric_limits<double>::quiet_NaN();
  MaskKind mask = MaskKind::kNone;
  Shape mask_shape;  // empty = [Lq, Lk]
  DType float_mask = DType::kF32;
  std::vector<int64_t> kv_lens;
  bool alibi = false;
  bool strided = false;  // [B,L,H,D] storage viewed as [B,H,L,D]
  uint64_t seed = 1;

  int64_t dv() const { return Dv > 0 ? Dv : D; }
  std::string Name() const {
    std::string s = "B" + std::to_string(B) + " H" + std::to_string(H) + "/" +
                    std::to_string(Hkv) + " Lq" + std::to_string(Lq) + " Lk" +
                    std::to_string(Lk) + " D" + std::to_string(D) + " Dv" +
                    std::to_string(dv()) + " kv=" + DTypeName(kv) +
                    " causal=" + CausalName(causal) + " win=(" +
                    std::to_string(wl) + "," + std::to_string(wr) + ")";
    if (!std::isnan(scale)) s += " scale=" + std::to_string(scale);
    if (mask == MaskKind::kBool) s += " mask=bool" + ShapeString(mask_shape);
    if (mask == MaskKind::kFloat)
      s += std::string(" mask=") + DTypeName(float_mask) + ShapeString(mask_shape);
    if (!kv_lens.empty()) s += " kv_lens=" + ShapeString(kv_lens);
    if (alibi) s += " alibi";
    if (strided) s += " strided";
    return s + " seed=" + std::to_string(seed);
  }
};

struct Inputs {
  Spec s;
  Tensor q_store, k_store, v_store, mask, kv_lens, slopes;
  TensorView q, k, v;
  SdpaOptions opt;
};

Inputs Make(const Spec& s) {
  Inputs in;
  in.s = s;
  const int64_t Dv = s.dv();
  if (s.strided) {
    in.q_store = Random({s.B, s.Lq, s.H, s.D}, s.seed * 7 + 1);
    in.k_store = Random({s.B, s.Lk, s.Hkv, s.D}, s.seed * 7 + 2, 1.0, s.kv);
    in.v_store = Random({s.B, s.Lk, s.Hkv, Dv}, s.seed * 7 + 3, 1.0, s.kv);
    in.q = in.q_store.view().Permuted({0, 2, 1, 3});
    in.k = in.k_store.view().Permuted({0, 2, 1, 3});
    in.v = in.v_store.view().Permuted({0, 2, 1, 3});
  } else {
    in.q_store = Random({s.B, s.H, s.Lq, s.D}, s.seed * 7 + 1);
    in.k_store = Random({s.B, s.Hkv, s.Lk, s.D}, s.seed * 7 + 2, 1.0, s.kv);
    in.v_store = Random({s.B, s.Hkv, s.Lk, Dv}, s.seed * 7 + 3, 1.0, s.kv);
    in.q = in.q_store.view();
    in.k = in.k_store.view();
    in.v = in.v_store.view();
  }
  in.opt.causal = s.causal;
  in.opt.scale = s.scale;
  in.opt.window_left = s.wl;
  in.opt.window_right = s.wr;
  if (s.mask != MaskKind::kNone) {
    const Shape ms = s.mask_shape.empty() ? Shape{s.Lq, s.Lk} : s.mask_shape;
    if (s.mask == MaskKind::kBool) {
      in.mask = testing::RandomBoolMask(ms, s.seed * 7 + 4, 0.75);
    } else {
      in.mask = Random(ms, s.seed * 7 + 4, 1.5, s.float_mask);
      Rng rng(s.seed * 7 + 5);
      for (int64_t e = 0; e < in.mask.numel(); ++e) {
        if (rng.Uniform() < 0.15) in.mask.view().store(e, -INFINITY);
      }
    }
    in.opt.attn_mask = in.mask.view();
  }
  if (!s.kv_lens.empty()) {
    in.kv_lens = Zeros(DType::kI64, {s.B});
    for (int64_t b = 0; b < s.B; ++b) in.kv_lens.data<int64_t>()[b] = s.kv_lens[b];
    in.opt.kv_lens = in.kv_lens.view();
  }
  if (s.alibi) {
    std::vector<double> sl(static_cast<size_t>(s.H));
    AlibiSlopes(s.H, sl.data());
    in.slopes = Zeros(DType::kF32, {s.H});
    for (int64_t h = 0; h < s.H; ++h) in.slopes.data<float>()[h] = static_cast<float>(sl[h]);
    in.opt.alibi_slopes = in.slopes.view();
  }
  return in;
}

struct Outputs {
  Tensor out, lse;
};

// Plain fp32 attention (the error yardstick): fp32 dot products, fp32
// softmax with std::exp, fp32 P.V.
Outputs NaiveF32(const Inputs& in) {
  const Spec& s = in.s;
  const int64_t Dv = s.dv();
  Outputs r{Zeros(DType::kF32, {s.B, s.H, s.Lq, Dv}), Zeros(DType::kF32, {s.B, s.H, s.Lq})};
  TensorView mask;
  if (!in.opt.attn_mask.empty_view()) {
    const int64_t t[4] = {s.B, s.H, s.Lq, s.Lk};
    EXPECT_TRUE(BroadcastMask(in.opt.attn_mask, t, &mask));
  }
  const float scale = static_cast<float>(std::isnan(s.scale) ? DefaultScale(s.D) : s.scale);
  std::vector<float> x(static_cast<size_t>(s.Lk));
  std::vector<float> o(static_cast<size_t>(Dv));
  for (int64_t b = 0; b < s.B; ++b) {
    const int64_t valid = s.kv_lens.empty() ? s.Lk : s.kv_lens[b];
    for (int64_t h = 0; h < s.H; ++h) {
      const int64_t hk = KvHeadFor(h, s.H, s.Hkv);
      const double slope = s.alibi ? in.slopes.data<float>()[h] : 0.0;
      for (int64_t i = 0; i < s.Lq; ++i) {
        const KeyRange kr = VisibleKeys(s.causal, s.wl, s.wr, i, s.Lq, s.Lk, valid);
        float mx = -INFINITY;
        bool nan = false;
        for (int64_t j = 0; j < s.Lk; ++j) {
          float acc = 0.0f;
          for (int64_t c = 0; c < s.D; ++c) {
            acc += static_cast<float>(in.q.load(in.q.offset(b, h, i, c))) *
                   static_cast<float>(in.k.load(in.k.offset(b, hk, j, c)));
          }
          float v = acc * scale;
          bool allowed = j >= kr.first && j <= kr.last;
          if (!mask.empty_view()) {
            const double mv = mask.load(mask.offset(b, h, i, j));
            if (mask.dtype == DType::kBool) allowed = allowed && mv != 0.0;
            else v += static_cast<float>(mv);
          }
          if (s.alibi) v += static_cast<float>(AlibiBias(slope, i, j, s.Lq, s.Lk));
          if (!allowed) v = -INFINITY;
          if (std::isnan(v)) nan = true;
          x[j] = v;
          if (v > mx) mx = v;
        }
        float lse;
        std::fill(o.begin(), o.end(), 0.0f);
        if (nan) {
          std::fill(o.begin(), o.end(), NAN);
          lse = NAN;
        } else if (mx == -INFINITY) {
          lse = -INFINITY;
        } else {
          float sum = 0.0f;
          for (int64_t j = 0; j < s.Lk; ++j) {
            x[j] = x[j] == -INFINITY ? 0.0f : std::exp(x[j] - mx);
            sum += x[j];
          }
          for (int64_t j = 0; j < s.Lk; ++j) {
            const float w = x[j] / sum;
            if (w == 0.0f) continue;
            for (int64_t c = 0; c < Dv; ++c)
              o[c] += w * static_cast<float>(in.v.load(in.v.offset(b, hk, j, c)));
          }
          lse = mx + std::log(sum);
        }
        for (int64_t c = 0; c < Dv; ++c) r.out.data<float>()[((b * s.H + h) * s.Lq + i) * Dv + c] = o[c];
        r.lse.data<float>()[(b * s.H + h) * s.Lq + i] = lse;
      }
    }
  }
  return r;
}

Outputs Reference(const Inputs& in) {
  const Spec& s = in.s;
  Outputs r{Zeros(DType::kF64, {s.B, s.H, s.Lq, s.dv()}), Zeros(DType::kF64, {s.B, s.H, s.Lq})};
  const Status st = reference::Sdpa(r.out.view(), r.lse.view(), in.q, in.k, in.v, in.opt);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

struct KernelRun {
  Outputs o;
  Tensor out_store;
  TensorView out_view;
  KernelChoice choice;
  Status status;
};

// Runs Attention; with `strided_out` the output is a [B,Lq,H,Dv] buffer viewed
// as [B,H,Lq,Dv] and copied back to contiguous for comparison.
KernelRun RunKernel(const Inputs& in, const KernelOptions& kopt, bool strided_out = false) {
  const Spec& s = in.s;
  KernelRun r;
  r.o.lse = Zeros(DType::kF32, {s.B, s.H, s.Lq});
  // Poison: the kernel must write every element.
  for (int64_t e = 0; e < r.o.lse.numel(); ++e) r.o.lse.data<float>()[e] = 12345.0f;
  if (strided_out) {
    r.out_store = Zeros(DType::kF32, {s.B, s.Lq, s.H, s.dv()});
    r.out_view = r.out_store.view().Permuted({0, 2, 1, 3});
  } else {
    r.out_store = Zeros(DType::kF32, {s.B, s.H, s.Lq, s.dv()});
    r.out_view = r.out_store.view();
  }
  for (int64_t e = 0; e < r.out_store.numel(); ++e) r.out_store.data<float>()[e] = 12345.0f;
  r.status = Attention(r.out_view, r.o.lse.view(), in.q, in.k, in.v, in.opt, kopt, &r.choice);
  Result<Tensor> c = Tensor::FromView(r.out_view);
  EXPECT_TRUE(c.ok());
  r.o.out = std::move(c).value();
  return r;
}

// The FlashAttention-style check of one output tensor.
// The FlashAttention accuracy rule: the kernel's error is at most
// kErrorFactor x that of a plain fp32 implementation. The Targets test raises
// it for the emulated targets without FMA (EMU128, SCALAR): there the
// log2-domain score (q pre-scaled by scale·log2 e) and the exp2 polynomial
// each round once more per step, measured at up to 5x the naive error for
// logits of ~|40| (scale 1.65, D = 96). Real SIMD targets keep 2x.
double g_error_factor = 2.0;

// The error factor for a run with Highway pinned to `target` (plus the
// fallbacks): the scalar one when the target is a fallback or when the
// kernels really dispatch to one (a build may compile fewer targets than the
// CPU supports: the sanitizer builds compile only the best one).
double ErrorFactorFor(int64_t target) {
  if (target == HWY_EMU128 || target == HWY_SCALAR) return 6.0;
  Spec s;
  s.Lq = 4;
  s.Lk = 4;
  s.D = 16;
  const Inputs in = Make(s);
  Tensor out = Zeros(DType::kF32, {1, 1, 4, 16});
  KernelChoice c;
  if (!ExplainAttention(out.view(), TensorView(), in.q, in.k, in.v, in.opt, {}, &c).ok()) return 6.0;
  return (c.simd_target == "EMU128" || c.simd_target == "SCALAR") ? 6.0 : 2.0;
}

void CheckAgainst(const char* what, const TensorView& got, const TensorView& naive,
                  const TensorView& ref, const std::string& name) {
  double err_k = 0, err_n = 0, ref_max = 0;
  int64_t bad_struct = 0, first_bad = -1;
  const int64_t n = ref.numel();
  for (int64_t e = 0; e < n; ++e) {
    const double r = ref.load(e), g = got.load(e), nv = naive.load(e);
    if (std::isnan(r) || std::isinf(r)) {
      const bool same = std::isnan(r) ? std::isnan(g) : g == r;
      if (!same) {
        ++bad_struct;
        if (first_bad < 0) first_bad = e;
      }
      continue;
    }
    if (!std::isfinite(g)) {
      ++bad_struct;
      if (first_bad < 0) first_bad = e;
      continue;
    }
    ref_max = std::max(ref_max, std::fabs(r));
    err_k = std::max(err_k, std::fabs(g - r));
    if (std::isfinite(nv)) err_n = std::max(err_n, std::fabs(nv - r));
  }
  EXPECT_EQ(bad_struct, 0) << what << ": non-finite mismatch (first at flat " << first_bad
                           << ": got " << (first_bad >= 0 ? got.load(first_bad) : 0)
                           << " ref " << (first_bad >= 0 ? ref.load(first_bad) : 0) << ") "
                           << name;
  const double floor = 1e-6 * std::max(1.0, ref_max);
  EXPECT_LE(err_k, g_error_factor * err_n + floor)
      << what << ": kernel err " << err_k << " vs naive fp32 err " << err_n << " for " << name;
}

// out and LSE of a kernel run against the reference, each with its own
// naive-fp32 error budget.
void CheckOutputs(const Outputs& got, const Outputs& naive, const Outputs& ref,
                  const std::string& name) {
  CheckAgainst("out", got.out.view(), naive.out.view(), ref.out.view(), name);
  CheckAgainst("lse", got.lse.view(), naive.lse.view(), ref.lse.view(), name);
}

const Outputs& OutputsOf(const Outputs& o) { return o; }
const Outputs& OutputsOf(const KernelRun& r) { return r.o; }

// Every run's out and LSE bytes equal the first run's (results independent
// of the thread count and of the split); `name` goes into the message. Runs
// are KernelRun or Outputs.
template <typename Run>
void ExpectBitIdentical(const std::vector<Run>& runs, const std::string& name = "") {
  for (size_t r = 1; r < runs.size(); ++r) {
    const Outputs &a = OutputsOf(runs[0]), &b = OutputsOf(runs[r]);
    EXPECT_EQ(std::memcmp(a.out.data<float>(), b.out.data<float>(), a.out.nbytes()), 0) << name;
    EXPECT_EQ(std::memcmp(a.lse.data<float>(), b.lse.data<float>(), a.lse.nbytes()), 0) << name;
  }
}

// Runs `in` with `kopt`, asserts that it succeeds and checks out and LSE
// against the given references; the run goes to `*run` when given.
void CheckRun(const Inputs& in, const KernelOptions& kopt, const Outputs& naive,
              const Outputs& ref, KernelRun* run = nullptr) {
  KernelRun k = RunKernel(in, kopt);
  ASSERT_TRUE(k.status.ok()) << k.status.ToString();
  CheckOutputs(k.o, naive, ref, in.s.Name());
  if (run != nullptr) *run = std::move(k);
}

// Runs `in` with `kopt` once on each pool (kopt.pool set to it), asserting
// that each run succeeds; the runs are appended to `runs` in pool order.
// Callers wrap it in ASSERT_NO_FATAL_FAILURE.
void RunOnPools(const Inputs& in, KernelOptions kopt, std::initializer_list<ThreadPool*> pools,
                std::vector<KernelRun>* runs, bool strided_out = false) {
  for (ThreadPool* p : pools) {
    kopt.pool = p;
    runs->push_back(RunKernel(in, kopt, strided_out));
    ASSERT_TRUE(runs->back().status.ok()) << runs->back().status.ToString();
  }
}

void CheckCase(const Spec& s, KernelKind force, bool strided_out = false,
               ThreadPool* pool = nullptr) {
  SCOPED_TRACE(s.Name());
  const Inputs in = Make(s);
  KernelOptions kopt;
  kopt.force = force;
  kopt.pool = pool;
  KernelRun k = RunKernel(in, kopt, strided_out);
  ASSERT_TRUE(k.status.ok()) << k.status.ToString();
  EXPECT_EQ(k.choice.kernel, force) << k.choice.ToString();
  const Outputs ref = Reference(in);
  const Outputs naive = NaiveF32(in);
  CheckOutputs(k.o, naive, ref, s.Name());
}

// ---------------------------------------------------------------------------
// A deterministic sweep over the parameter space, cost-bounded so the whole
// suite stays well under a minute on one core.
std::vector<Spec> SweepSpecs(int count, uint64_t seed, bool prefill) {
  std::mt19937_64 g(seed);
  auto pick = [&g](auto const& v) { return v[g() % v.size()]; };
  const std::vector<std::pair<int64_t, int64_t>> lens_prefill = {
      {7, 7}, {63, 65}, {65, 63}, {127, 129}, {129, 127}, {7, 400},
      {400, 7}, {65, 400}, {129, 129}, {63, 1}, {1, 63}, {7, 129}};
  const std::vector<std::pair<int64_t, int64_t>> lens_decode = {
      {1, 1}, {1, 7}, {1, 63}, {1, 400}, {2, 129}, {3, 65}, {4, 400},
      {1, 1100}, {4, 7}, {7, 3}};
  const std::vector<int64_t> dims = {1, 5, 13, 64, 80, 96, 128, 256};
  const std::vector<std::pair<int64_t, int64_t>> heads = {
      {1, 1}, {2, 2}, {2, 1}, {4, 2}, {4, 1}, {8, 1}, {8, 2}, {3, 3}};
  const std::vector<DType> kvs = {DType::kF32, DType::kF16, DType::kBF16};
  std::vector<Spec> out;
  for (int n = 0; n < count; ++n) {
    Spec s;
    s.seed = seed * 1000 + n;
    const auto lens = prefill ? pick(lens_prefill) : pick(lens_decode);
    s.Lq = lens.first;
    s.Lk = lens.second;
    s.D = pick(dims);
    if (g() % 6 == 0) s.Dv = pick(dims);
    const auto hh = pick(heads);
    s.H = hh.first;
    s.Hkv = hh.second;
    s.B = 1 + g() % 2;
    s.kv = pick(kvs);
    const int c = g() % 3;
    s.causal = c == 0 ? Causal::kNone : c == 1 ? Causal::kTopLeft : Causal::kBottomRight;
    if (g() % 4 == 0) {
      s.wl = static_cast<int64_t>(g() % 40) - 1;
      s.wr = static_cast<int64_t>(g() % 20) - 1;
    }
    if (g() % 4 == 0) s.scale = 0.05 + 0.2 * static_cast<double>(g() % 10);
    const int mk = g() % 4;
    if (mk == 1 || mk == 2) {
      s.mask = mk == 1 ? MaskKind::kBool : MaskKind::kFloat;
      if (s.mask == MaskKind::kFloat) {
        const DType fm[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16};
        s.float_mask = fm[g() % 4];
      }
      switch (g() % 5) {
        case 0: s.mask_shape = {s.Lq, s.Lk}; break;
        case 1: s.mask_shape = {1, s.Lk}; break;
        case 2: s.mask_shape = {s.H, s.Lq, s.Lk}; break;
        case 3: s.mask_shape = {s.B, 1, s.Lq, s.Lk}; break;
        default: s.mask_shape = {s.B, s.H, 1, s.Lk}; break;
      }
    }
    if (g() % 4 == 0) {
      for (int64_t b = 0; b < s.B; ++b) s.kv_lens.push_back(static_cast<int64_t>(g() % (s.Lk + 1)));
    }
    s.alibi = g() % 5 == 0;
    s.strided = g() % 4 == 0;
    // Bound the float64 reference's cost.
    while (s.B * s.H * s.Lq * s.Lk * (s.D + s.dv()) > 12'000'000 && s.H > s.Hkv) {
      s.H /= 2;
      if (s.H < s.Hkv) s.H = s.Hkv;
    }
    while (s.B * s.H * s.Lq * s.Lk * (s.D + s.dv()) > 12'000'000 && s.B > 1) --s.B;
    if (s.B * s.H * s.Lq * s.Lk * (s.D + s.dv()) > 12'000'000) {
      s.D = std::min<int64_t>(s.D, 64);
      s.Dv = 0;
    }
    if (!s.kv_lens.empty()) s.kv_lens.resize(static_cast<size_t>(s.B));
    if (s.mask_shape.size() == 4) s.mask_shape[0] = s.B;
    if (s.mask_shape.size() >= 3) {
      const size_t hpos = s.mask_shape.size() - 3;
      if (s.mask_shape[hpos] != 1) s.mask_shape[hpos] = s.H;
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace
}  // namespace attnflow
