// micro_opts_test.cc — host tests of the micro library's masks, ALiBi and
// sliding windows (f32 and int8 prefill, MHA, f32 decode), its stage probes,
// the AFDUMP writer (docs/device-dump.md) and the memory-safety contract of
// the public C API (include/attnflow/micro.h), against the float64 oracle
// (reference::Sdpa, reference::Mha) and every committed golden case.
//
// Invariants: expected values come from the float64 reference (or the golden
// files, or the format spec), never from the micro library; int8
// expectations are the float64 reference on the DEQUANTISED int8 inputs with
// the original real mask and ALiBi; tolerances are the ones the device
// harness uses (micro/harness/golden_main.c) and the bound derived in
// docs/edge.md (AF_S8_BOUND_LSB). These tests also run under ASan+UBSan
// (tools/ci/sanitize.sh, halt_on_error), which makes the extreme-value and
// tampered-struct tests fail on any overflow or out-of-bounds access.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/device_export.h"
#include "attnflow/golden.h"
#include "attnflow/micro.h"
#include "attnflow/reference.h"
#include "attnflow/rng.h"
#include "attnflow/stages.h"
#include "micro_test_util.h"

namespace attnflow {
namespace {

namespace fs = std::filesystem;
constexpr float kInf = std::numeric_limits<float>::infinity();

Causal ToCausal(af_causal c) {
  return c == AF_CAUSAL_TOP_LEFT       ? Causal::kTopLeft
         : c == AF_CAUSAL_BOTTOM_RIGHT ? Causal::kBottomRight
                                       : Causal::kNone;
}
af_causal FromCausal(Causal c) {
  return c == Causal::kTopLeft       ? AF_CAUSAL_TOP_LEFT
         : c == Causal::kBottomRight ? AF_CAUSAL_BOTTOM_RIGHT
                                     : AF_CAUSAL_NONE;
}

// One attention problem with every option the micro library takes.
struct Problem {
  af_sdpa_shape s{};
  std::vector<float> q, k, v;
  std::vector<int32_t> kv_lens;  // empty = none
  float scale = 1.f;
  af_mask_type mask_type = AF_MASK_NONE;
  int32_t mask_shape[4] = {1, 1, 1, 1};
  std::vector<uint8_t> mask_b;
  std::vector<float> mask_f;
  int32_t window_left = -1, window_right = -1;
  std::vector<float> alibi;  // [H], [B,H] (alibi_bh) or empty
  bool alibi_bh = false;     // alibi holds [B,H] slopes
  bool per_seq = false;      // KvAlign::kPerSequence
  float softcap = 0.f;       // 0 = off

  size_t MaskCount() const {
    return size_t(mask_shape[0]) * mask_shape[1] * mask_shape[2] * mask_shape[3];
  }
  af_sdpa_opts F32Opts() const {
    af_sdpa_opts o = AF_SDPA_OPTS_INIT;
    o.mask_type = mask_type;
    o.mask = mask_type == AF_MASK_BOOL ? static_cast<const void*>(mask_b.data())
             : mask_type == AF_MASK_F32 ? static_cast<const void*>(mask_f.data())
                                        : nullptr;
    std::copy(mask_shape, mask_shape + 4, o.mask_shape);
    o.window_left = window_left;
    o.window_right = window_right;
    o.alibi_slopes = alibi.empty() ? nullptr : alibi.data();
    o.alibi_per_batch = alibi_bh ? 1 : 0;
    o.kv_align = per_seq ? AF_KV_ALIGN_PER_SEQUENCE : AF_KV_ALIGN_PADDED;
    o.softcap = softcap;
    return o;
  }
};

Problem RandomProblem(Rng& rng, af_sdpa_shape s, float amp, int variant) {
  Problem p;
  p.s = s;
  auto u = [&](double lo, double hi) { return static_cast<float>(rng.Uniform(lo, hi)); };
  p.q.resize(size_t(s.batch) * s.num_heads * s.q_len * s.head_dim);
  p.k.resize(size_t(s.batch) * s.num_kv_heads * s.kv_len * s.head_dim);
  p.v.resize(size_t(s.batch) * s.num_kv_heads * s.kv_len * s.v_dim);
  for (auto* t : {&p.q, &p.k, &p.v})
    for (auto& x : *t) x = u(-amp, amp);
  p.scale = 1.f / std::sqrt(float(s.head_dim));
  if (variant & 1)
    for (int b = 0; b < s.batch; ++b)
      p.kv_lens.push_back(int32_t(rng.Below(uint64_t(s.kv_len) + 1)));
  const int mask = (variant >> 1) % 3;  // none, bool, float
  if (mask) {
    const int32_t full[4] = {s.batch, s.num_heads, s.q_len, s.kv_len};
    const int rank = 2 + int(rng.Below(3));  // numpy rank 2..4, right-aligned
    for (int d = 0; d < 4; ++d)
      p.mask_shape[d] = d < 4 - rank ? 1 : (rng.Below(3) ? full[d] : 1);
    p.mask_type = mask == 1 ? AF_MASK_BOOL : AF_MASK_F32;
    for (size_t i = 0; i < p.MaskCount(); ++i) {
      if (mask == 1) {
        p.mask_b.push_back(rng.Below(5) != 0);
      } else {
        p.mask_f.push_back(rng.Below(8) == 0 ? -kInf : u(-2, 2));
      }
    }
  }
  if (variant & 8) {
    p.window_left = rng.Below(3) ? int32_t(rng.Below(uint64_t(s.kv_len) + 2)) : -1;
    p.window_right = rng.Below(3) ? int32_t(rng.Below(4)) : -1;
  }
  if (variant & 16) {
    std::vector<double> sl(size_t(s.num_heads));
    AlibiSlopes(s.num_heads, sl.data());
    for (double x : sl) p.alibi.push_back(float(x));
  }
  return p;
}

// float64 reference of p (on `q/k/v` given, f32 values) with every stage.
struct Ref {
  std::vector<double> out, lse;
  StageRecorder rec;
};
void Reference(const Problem& p, const std::vector<float>& q, const std::vector<float>& k,
               const std::vector<float>& v, Ref* r) {
  const af_sdpa_shape& s = p.s;
  r->out.assign(size_t(s.batch) * s.num_heads * s.q_len * s.v_dim, 0);
  r->lse.assign(size_t(s.batch) * s.num_heads * s.q_len, 0);
  std::vector<int64_t> kl(p.kv_lens.begin(), p.kv_lens.end());
  SdpaOptions opt;
  opt.causal = ToCausal(s.causal);
  opt.scale = p.scale;
  if (!kl.empty()) opt.kv_lens = MakeView(kl.data(), DType::kI64, {s.batch});
  const Shape ms = {p.mask_shape[0], p.mask_shape[1], p.mask_shape[2], p.mask_shape[3]};
  if (p.mask_type == AF_MASK_BOOL)
    opt.attn_mask = MakeView(const_cast<uint8_t*>(p.mask_b.data()), DType::kBool, ms);
  if (p.mask_type == AF_MASK_F32)
    opt.attn_mask = MakeView(const_cast<float*>(p.mask_f.data()), DType::kF32, ms);
  opt.window_left = p.window_left;
  opt.window_right = p.window_right;
  if (!p.alibi.empty())
    opt.alibi_slopes =
        p.alibi_bh ? MakeView(const_cast<float*>(p.alibi.data()), DType::kF32,
                              {s.batch, s.num_heads})
                   : MakeView(const_cast<float*>(p.alibi.data()), DType::kF32, {s.num_heads});
  opt.kv_align = p.per_seq ? KvAlign::kPerSequence : KvAlign::kPadded;
  opt.softcap = p.softcap;
  Status st = reference::Sdpa(
      MakeView(r->out.data(), DType::kF64, {s.batch, s.num_heads, s.q_len, s.v_dim}),
      MakeView(r->lse.data(), DType::kF64, {s.batch, s.num_heads, s.q_len}),
      MakeView(const_cast<float*>(q.data()), DType::kF32,
               {s.batch, s.num_heads, s.q_len, s.head_dim}),
      MakeView(const_cast<float*>(k.data()), DType::kF32,
               {s.batch, s.num_kv_heads, s.kv_len, s.head_dim}),
      MakeView(const_cast<float*>(v.data()), DType::kF32,
               {s.batch, s.num_kv_heads, s.kv_len, s.v_dim}),
      opt, &r->rec);
  ASSERT_TRUE(st.ok()) << st.ToString();
}

const double* Stage(const Ref& r, const char* name) {
  const Tensor* t = r.rec.Find(name);
  if (t == nullptr || t->dtype() != DType::kF64) return nullptr;
  return t->data<double>();
}

// Runs af_sdpa_f32_ex on p (micro_test_util.h: exact arena, canary).
af_status RunF32(const Problem& p, std::vector<float>* out, std::vector<float>* lse) {
  const af_sdpa_opts o = p.F32Opts();
  return RunF32WithCanary(p.s, p.q, p.k, p.v, p.kv_lens, p.scale, &o, out, lse);
}

void ExpectF32MatchesReference(const Problem& p, double tol) {
  Ref r;
  Reference(p, p.q, p.k, p.v, &r);
  std::vector<float> o, l;
  ASSERT_EQ(RunF32(p, &o, &l), AF_OK);
  for (size_t i = 0; i < r.out.size(); ++i)
    ASSERT_NEAR(o[i], r.out[i], tol * (1 + std::fabs(r.out[i]))) << "out element " << i;
  for (size_t i = 0; i < r.lse.size(); ++i) {
    if (std::isinf(r.lse[i])) {
      ASSERT_TRUE(std::isinf(l[i]) && l[i] < 0) << "lse row " << i;
      for (int d = 0; d < p.s.v_dim; ++d) ASSERT_EQ(o[i * p.s.v_dim + d], 0.f) << "dead row";
    } else {
      ASSERT_NEAR(l[i], r.lse[i], tol * (1 + std::fabs(r.lse[i]))) << "lse row " << i;
    }
  }
}

af_sdpa_shape RandomShape(Rng& rng, int it) {
  const af_causal modes[] = {AF_CAUSAL_NONE, AF_CAUSAL_TOP_LEFT, AF_CAUSAL_BOTTOM_RIGHT};
  const int g = 1 << (it % 3);
  return af_sdpa_shape{int32_t(1 + it % 2), 4, 4 / g, int32_t(1 + rng.Below(40)),
                       int32_t(1 + rng.Below(70)), int32_t(1 + rng.Below(33)),
                       int32_t(1 + rng.Below(20)), modes[(it / 3) % 3]};
}

TEST(MicroOptsF32, MatchesReferenceOverMasksAlibiWindows) {
  Rng rng(4242);
  int n = 0, masked = 0, windowed = 0, alibi = 0;
  for (int it = 0; it < 320; ++it) {
    Problem p = RandomProblem(rng, RandomShape(rng, it), 2.f, it % 32);
    masked += p.mask_type != AF_MASK_NONE;
    windowed += p.window_left >= 0 || p.window_right >= 0;
    alibi += !p.alibi.empty();
    SCOPED_TRACE(::testing::Message() << "case " << it);
    ExpectF32MatchesReference(p, 2e-5);
    ++n;
  }
  EXPECT_EQ(n, 320);
  EXPECT_GT(masked, 150);
  EXPECT_GT(windowed, 100);
  EXPECT_GT(alibi, 100);
}

TEST(MicroOptsF32, HeadDim64SpecialisationWithWindowsAndMasks) {
  Rng rng(64);
  for (int it = 0; it < 24; ++it) {
    af_sdpa_shape s{1, 2, 1, int32_t(1 + rng.Below(70)), int32_t(1 + rng.Below(90)), 64, 64,
                    af_causal(it % 3)};
    Problem p = RandomProblem(rng, s, 1.f, 8 | 16 | (it % 8));
    SCOPED_TRACE(::testing::Message() << "case " << it);
    ExpectF32MatchesReference(p, 2e-5);
  }
}

// ------------------------------------------------------------------ int8 --

struct S8Problem {
  Problem f;  // dequantised inputs, original mask/ALiBi/window
  std::vector<int8_t> q, k, v;
  float sq = 1, sk = 1, sv = 1, so = 1;
  std::vector<int32_t> mask_s32, alibi_s8, softcap_s8;
};

S8Problem Quantise(const Problem& p) {
  S8Problem r;
  r.f = p;
  auto quant = [](const std::vector<float>& x, std::vector<int8_t>* q, std::vector<float>* dq) {
    float mx = 0;
    for (float a : x) mx = std::max(mx, std::fabs(a));
    const float s = mx > 0 ? mx / 127.f : 1.f;
    q->resize(x.size());
    dq->resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      (*q)[i] = int8_t(std::lrint(std::clamp(x[i] / s, -127.f, 127.f)));
      (*dq)[i] = float((*q)[i]) * s;
    }
    return s;
  };
  r.sq = quant(p.q, &r.q, &r.f.q);
  r.sk = quant(p.k, &r.k, &r.f.k);
  r.sv = quant(p.v, &r.v, &r.f.v);
  r.so = r.sv;
  return r;
}

// The options of an int8 problem: its window, its bool mask, or its float
// mask and ALiBi slopes converted to raw-score units (stored in c).
af_sdpa_opts S8Opts(S8Problem& c) {
  af_sdpa_opts o = AF_SDPA_OPTS_INIT;
  o.window_left = c.f.window_left;
  o.window_right = c.f.window_right;
  std::copy(c.f.mask_shape, c.f.mask_shape + 4, o.mask_shape);
  if (c.f.mask_type == AF_MASK_BOOL) {
    o.mask_type = AF_MASK_BOOL;
    o.mask = c.f.mask_b.data();
  } else if (c.f.mask_type == AF_MASK_F32) {
    c.mask_s32.resize(c.f.mask_f.size());
    EXPECT_EQ(af_s8_mask_prepare(c.mask_s32.data(), c.f.mask_f.data(), int32_t(c.mask_s32.size()),
                                 c.sq, c.sk, c.f.scale),
              AF_OK);
    o.mask_type = AF_MASK_S32;
    o.mask = c.mask_s32.data();
  }
  if (!c.f.alibi.empty()) {
    c.alibi_s8.resize(c.f.alibi.size());
    // [B,H] slopes: B*H entries with per-tensor scales.
    EXPECT_EQ(af_s8_alibi_prepare(c.alibi_s8.data(), c.f.alibi.data(),
                                  int32_t(c.f.alibi.size()), &c.sq, &c.sk, 1, c.f.scale),
              AF_OK);
    o.alibi_s8 = c.alibi_s8.data();
    o.alibi_per_batch = c.f.alibi_bh ? 1 : 0;
  }
  o.kv_align = c.f.per_seq ? AF_KV_ALIGN_PER_SEQUENCE : AF_KV_ALIGN_PADDED;
  if (c.f.softcap > 0.f) {
    c.softcap_s8.resize(size_t(4) * c.f.s.num_heads);
    EXPECT_EQ(af_s8_softcap_prepare(c.softcap_s8.data(), c.f.softcap, c.f.s.num_heads, &c.sq,
                                    &c.sk, 1, c.f.scale),
              AF_OK);
    o.softcap_s8 = c.softcap_s8.data();
  }
  return o;
}

// Max |out8 - expected| in LSB; -1 on a failed call.
int S8MaxError(S8Problem& c) {
  Ref r;
  Reference(c.f, c.f.q, c.f.k, c.f.v, &r);
  af_s8_params p;
  EXPECT_EQ(af_s8_prepare(&p, &c.sq, &c.sk, &c.sv, &c.so, 1, c.f.scale), AF_OK);
  const af_sdpa_opts o = S8Opts(c);
  std::vector<int8_t> out(r.out.size(), 99);
  const size_t ws = af_sdpa_s8_workspace_bytes(&c.f.s);
  std::vector<uint32_t> arena(ws / 4 + 8, 0xA5A5A5A5u);
  const int32_t* kvl = c.f.kv_lens.empty() ? nullptr : c.f.kv_lens.data();
  // The lean entry point refuses a softcap; the softcap one takes every
  // case, and without a softcap gives the lean one's bytes.
  const af_status lean = af_sdpa_s8_ex(out.data(), c.q.data(), c.k.data(), c.v.data(), kvl, &p,
                                       &c.f.s, &o, arena.data(), ws);
  EXPECT_EQ(lean, o.softcap_s8 != nullptr ? AF_ERR_PARAM : AF_OK);
  std::vector<int8_t> lean_out = out;
  const af_status st = af_sdpa_s8_softcap_ex(out.data(), c.q.data(), c.k.data(), c.v.data(), kvl,
                                             &p, &c.f.s, &o, arena.data(), ws);
  EXPECT_EQ(st, AF_OK);
  if (st != AF_OK) return -1;
  if (lean == AF_OK) EXPECT_EQ(lean_out, out);
  for (size_t i = ws / 4; i < arena.size(); ++i) EXPECT_EQ(arena[i], 0xA5A5A5A5u);
  int worst = 0;
  for (size_t i = 0; i < r.out.size(); ++i) {
    const double want = std::clamp(std::nearbyint(r.out[i] / c.so), -128.0, 127.0);
    if (std::isinf(r.lse[i / c.f.s.v_dim])) EXPECT_EQ(out[i], 0) << "dead row must be 0";
    worst = std::max(worst, int(std::fabs(out[i] - want)));
  }
  return worst;
}

TEST(MicroOptsS8, WithinBoundOverMasksAlibiWindows) {
  Rng rng(77);
  int worst = 0, n = 0;
  for (int it = 0; it < 240; ++it) {
    Problem p = RandomProblem(rng, RandomShape(rng, it), it % 5 == 0 ? 4.f : 1.f, it % 32);
    S8Problem c = Quantise(p);
    SCOPED_TRACE(::testing::Message() << "case " << it);
    const int e = S8MaxError(c);
    ASSERT_GE(e, 0);
    worst = std::max(worst, e);
    ++n;
  }
  RecordProperty("s8_opts_worst_lsb", worst);
  std::printf("int8 masked/ALiBi/window cases: worst error %d LSB over %d cases\n", worst, n);
  EXPECT_LE(worst, AF_S8_BOUND_LSB);
}

TEST(MicroOptsS8, PrepareHelpers) {
  const float sq = 0.01f, sk = 0.02f, scale = 0.25f;  // one raw unit = 5e-5 scaled units
  const float mask[] = {0.f, -kInf, 1e-4f, -2.5f, -1e9f, 1e9f};
  int32_t out[6];
  ASSERT_EQ(af_s8_mask_prepare(out, mask, 6, sq, sk, scale), AF_OK);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[1], AF_S8_MASKED);
  EXPECT_EQ(out[2], 2);  // 1e-4 / 5e-5
  EXPECT_EQ(out[3], -50000);
  EXPECT_EQ(out[4], -(1 << 30));  // clamped
  EXPECT_EQ(out[5], 1 << 30);
  const float nan = std::nanf(""), pinf = kInf;
  EXPECT_EQ(af_s8_mask_prepare(out, &nan, 1, sq, sk, scale), AF_ERR_PARAM);
  EXPECT_EQ(af_s8_mask_prepare(out, &pinf, 1, sq, sk, scale), AF_ERR_PARAM);
  const float slopes[] = {0.5f, 0.f};
  int32_t a8[2];
  ASSERT_EQ(af_s8_alibi_prepare(a8, slopes, 2, &sq, &sk, 1, scale), AF_OK);
  EXPECT_EQ(a8[0], 2560000);  // 0.5 / 5e-5 * 256
  EXPECT_EQ(a8[1], 0);
  const float neg = -0.1f;
  EXPECT_EQ(af_s8_alibi_prepare(a8, &neg, 1, &sq, &sk, 1, scale), AF_ERR_PARAM);
}

// ------------------------------------- softcap, per-sequence, [B,H] ALiBi --

// Adds the options of docs/semantics.md rules 2, 5 and 7 beyond the basic
// ones: softcap (bit 0 of `variant`: a cap in [0.5, 60]), the per-sequence
// diagonal (bit 1; kv_lens drawn when absent), [B,H] ALiBi slopes (bit 2:
// random non-negative slopes per batch and head).
void AddNewOptions(Rng& rng, Problem* p, int variant) {
  const af_sdpa_shape& s = p->s;
  if (variant & 1) p->softcap = float(rng.Uniform(0.5, 60.0));
  if (variant & 2) {
    p->per_seq = true;
    if (p->kv_lens.empty())
      for (int b = 0; b < s.batch; ++b)
        p->kv_lens.push_back(int32_t(rng.Below(uint64_t(s.kv_len) + 1)));
  }
  if (variant & 4) {
    p->alibi.clear();
    for (int i = 0; i < s.batch * s.num_heads; ++i) p->alibi.push_back(float(rng.Uniform(0, 0.6)));
    p->alibi_bh = true;
  }
}

TEST(MicroOptsF32, SoftcapPerSequenceAndBatchedAlibiMatchReference) {
  Rng rng(3303);
  int n[3] = {0, 0, 0};
  for (int it = 0; it < 240; ++it) {
    Problem p = RandomProblem(rng, RandomShape(rng, it), 3.f, it % 32);
    AddNewOptions(rng, &p, 1 + it % 7);
    n[0] += p.softcap > 0;
    n[1] += p.per_seq;
    n[2] += p.alibi_bh;
    SCOPED_TRACE(::testing::Message() << "case " << it << " softcap " << p.softcap << " per_seq "
                                      << p.per_seq << " alibi_bh " << p.alibi_bh);
    ExpectF32MatchesReference(p, 2e-5);
  }
  EXPECT_GT(n[0], 100);
  EXPECT_GT(n[1], 100);
  EXPECT_GT(n[2], 100);
}

TEST(MicroOptsF32, PerSequenceDiagonalMovesTheWindowAndAlibi) {
  // One sequence of 6 keys of which 3 are valid, 2 queries, bottom-right
  // causal: padded, row 1 sees keys up to 1 + (6 - 2) = 5, cut to 2 by
  // padding; per sequence, up to 1 + (3 - 2) = 2 and row 0 up to 1 — and a
  // window of 0 keys on the left leaves one key per row (the diagonal). The
  // two alignments must differ, and each must match the reference.
  af_sdpa_shape s{1, 1, 1, 2, 6, 4, 4, AF_CAUSAL_BOTTOM_RIGHT};
  Rng rng(9);
  Problem p = RandomProblem(rng, s, 1.f, 0);
  p.kv_lens = {3};
  p.window_left = 0;
  std::vector<float> o_pad, o_seq, l;
  p.per_seq = false;
  ExpectF32MatchesReference(p, 2e-5);
  ASSERT_EQ(RunF32(p, &o_pad, &l), AF_OK);
  EXPECT_TRUE(std::isinf(l[0]) && std::isinf(l[1]));  // padded diagonal: keys 4, 5 are padding
  p.per_seq = true;
  ExpectF32MatchesReference(p, 2e-5);
  ASSERT_EQ(RunF32(p, &o_seq, &l), AF_OK);
  EXPECT_FALSE(std::isinf(l[0]) || std::isinf(l[1]));  // rows see keys 1 and 2
  for (int d = 0; d < 4; ++d) EXPECT_FLOAT_EQ(o_seq[d], p.v[4 + d]);      // row 0: key 1
  for (int d = 0; d < 4; ++d) EXPECT_FLOAT_EQ(o_seq[4 + d], p.v[8 + d]);  // row 1: key 2
}

TEST(MicroOptsS8, SoftcapPerSequenceAndBatchedAlibiWithinBound) {
  Rng rng(3304);
  int worst = 0, capped = 0;
  for (int it = 0; it < 210; ++it) {
    Problem p = RandomProblem(rng, RandomShape(rng, it), it % 5 == 0 ? 4.f : 1.5f, it % 32);
    AddNewOptions(rng, &p, 1 + it % 7);
    capped += p.softcap > 0;
    S8Problem c = Quantise(p);
    SCOPED_TRACE(::testing::Message() << "case " << it << " softcap " << p.softcap);
    const int e = S8MaxError(c);
    ASSERT_GE(e, 0);
    worst = std::max(worst, e);
  }
  std::printf("int8 softcap/per-sequence/[B,H] ALiBi cases: worst error %d LSB\n", worst);
  EXPECT_GT(capped, 100);
  EXPECT_LE(worst, AF_S8_BOUND_LSB);
}

// The integer softcap against cap * tanh(x / cap) in float64, over raw
// scores from 0 to the int8 maximum and caps from 0.05 to 500 scaled units:
// within the bound of docs/edge.md "int8 softcap" (cap * 1.25e-4 + half a raw
// unit, in scaled units), odd, monotone, and |s'| <= |s|.
TEST(MicroOptsS8, SoftcapTanhWithinItsDerivedBound) {
  const int32_t D = 64;
  af_sdpa_shape s{1, 1, 1, 1, 1, D, D, AF_CAUSAL_NONE};
  std::vector<int8_t> q(D), k(D);
  const float sq = 0.02f, sk = 0.03f, scale = 0.125f;
  const double unit = double(sq) * sk * scale;  // 7.5e-5 scaled units per raw unit
  af_s8_params prm;
  const float one = 1.f;
  ASSERT_EQ(af_s8_prepare(&prm, &sq, &sk, &one, &one, 1, scale), AF_OK);
  double worst_ratio = 0;
  for (float cap : {0.05f, 0.5f, 1.f, 5.f, 20.f, 50.f, 500.f}) {
    int32_t c8[4];
    ASSERT_EQ(af_s8_softcap_prepare(c8, cap, 1, &sq, &sk, 1, scale), AF_OK);
    af_sdpa_opts o = AF_SDPA_OPTS_INIT;
    o.softcap_s8 = c8;
    const double bound = cap * AF_S8_SOFTCAP_ERR + 0.5 * unit;
    for (int32_t target = -127 * 127 * D; target <= 127 * 127 * D; target += 97) {
      // q . k = target: q = 127 everywhere but the last element, k chosen.
      int32_t rest = target;
      for (int d = 0; d < D; ++d) {
        q[d] = 127;
        const int32_t kk = std::clamp(rest / 127, -127, 127);
        k[d] = int8_t(kk);
        rest -= 127 * kk;
      }
      int32_t raw = 0, m = 0;
      ASSERT_EQ(af_sdpa_s8_probe(&raw, &m, nullptr, nullptr, q.data(), k.data(), nullptr, &prm,
                                 &s, &o, 0, 0, 0),
                AF_OK);
      const double want = cap * std::tanh(raw * unit / cap);
      const double err = std::fabs(m * unit - want);
      ASSERT_LE(err, bound) << "cap " << cap << " raw " << raw;
      ASSERT_LE(std::abs(int64_t(m)), std::abs(int64_t(raw)));
      if (raw > 0) ASSERT_GE(m, 0);
      if (raw < 0) ASSERT_LE(m, 0);
      worst_ratio = std::max(worst_ratio, err / bound);
    }
  }
  std::printf("int8 softcap: worst error %.3f of the derived bound\n", worst_ratio);
}

TEST(MicroOptsS8, SoftcapIsMonotoneInTheRawScore) {
  const float sq = 0.01f, sk = 0.01f, scale = 0.25f;
  for (float cap : {0.01f, 1.f, 30.f}) {
    int32_t c8[4];
    ASSERT_EQ(af_s8_softcap_prepare(c8, cap, 1, &sq, &sk, 1, scale), AF_OK);
    // The probe on D = 1 with q in [-127, 127] and k = 127: s = 127 q.
    af_sdpa_shape s{1, 1, 1, 1, 1, 1, 1, AF_CAUSAL_NONE};
    af_s8_params prm;
    const float one = 1.f;
    ASSERT_EQ(af_s8_prepare(&prm, &sq, &sk, &one, &one, 1, scale), AF_OK);
    af_sdpa_opts o = AF_SDPA_OPTS_INIT;
    o.softcap_s8 = c8;
    int32_t prev = INT32_MIN;
    for (int qq = -127; qq <= 127; ++qq) {
      const int8_t q = int8_t(qq), k = 127;
      int32_t raw = 0, m = 0;
      ASSERT_EQ(af_sdpa_s8_probe(&raw, &m, nullptr, nullptr, &q, &k, nullptr, &prm, &s, &o, 0, 0,
                                 0),
                AF_OK);
      ASSERT_GE(m, prev) << "cap " << cap << " q " << qq;
      prev = m;
    }
  }
}

// One row of af_sdpa_f32_probe (scores, scaled, masked, weights; scores
// skipped when null) against the float64 stages of reference row `row`: a
// -inf masked entry exactly, the rest within float rounding.
void ExpectF32ProbeRow(const float* scores, const float* scaled, const float* masked,
                       const float* weights, const double* sc, const double* sd,
                       const double* mk, const double* w, size_t row, int32_t kv_len, int it) {
  for (int32_t j = 0; j < kv_len; ++j) {
    const size_t e = row * kv_len + j;
    if (scores) ASSERT_NEAR(scores[j], sc[e], 1e-5 * (1 + std::fabs(sc[e]))) << "scores " << it;
    ASSERT_NEAR(scaled[j], sd[e], 1e-5 * (1 + std::fabs(sd[e]))) << "scaled " << it;
    if (std::isinf(mk[e]))
      ASSERT_EQ(masked[j], -kInf) << "masked " << it << " j " << j;
    else
      ASSERT_NEAR(masked[j], mk[e], 1e-5 * (1 + std::fabs(mk[e]))) << "masked " << it;
    ASSERT_NEAR(weights[j], w[e], 1e-6 + 1e-5 * w[e]) << "weights " << it;
  }
}

TEST(MicroProbe, F32RowsMatchTheReferenceStagesWithTheNewOptions) {
  Rng rng(15);
  int rows = 0;
  for (int it = 0; it < 40; ++it) {
    Problem p = RandomProblem(rng, RandomShape(rng, it), 2.f, it % 32);
    AddNewOptions(rng, &p, 1 + it % 7);
    Ref r;
    Reference(p, p.q, p.k, p.v, &r);
    const af_sdpa_shape& s = p.s;
    const af_sdpa_opts o = p.F32Opts();
    const double *sd = Stage(r, "scaled"), *mk = Stage(r, "masked"), *w = Stage(r, "weights");
    ASSERT_TRUE(sd && mk && w);
    std::vector<float> b(s.kv_len), c(s.kv_len), d(s.kv_len);
    for (int32_t bb = 0; bb < s.batch; ++bb)
      for (int32_t h = 0; h < s.num_heads; ++h)
        for (int32_t i = 0; i < s.q_len; ++i) {
          ASSERT_EQ(af_sdpa_f32_probe(nullptr, b.data(), c.data(), d.data(), nullptr, p.q.data(),
                                      p.k.data(), p.kv_lens.data(), p.scale, &s, &o, bb, h, i),
                    AF_OK);
          const size_t row = (size_t(bb * s.num_heads + h) * s.q_len + i);
          // "scaled" is before the cap, "masked" after it (golden-format).
          ASSERT_NO_FATAL_FAILURE(ExpectF32ProbeRow(nullptr, b.data(), c.data(), d.data(), nullptr,
                                                    sd, mk, w, row, s.kv_len, it));
          ++rows;
        }
  }
  EXPECT_GT(rows, 500);
}

TEST(MicroSafety, NewOptionsAreValidated) {
  af_sdpa_shape s{2, 2, 1, 3, 4, 4, 4, AF_CAUSAL_NONE};
  const float nan = std::nanf("");
  for (float bad : {nan, kInf, -kInf, -1.f, -1e-30f}) {
    af_sdpa_opts o = AF_SDPA_OPTS_INIT;
    o.softcap = bad;
    EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM) << bad;
  }
  af_sdpa_opts o = AF_SDPA_OPTS_INIT;
  o.softcap = -0.f;  // off, as the host's softcap >= 0
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_OK);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 1), AF_OK);
  o.softcap = 1e-30f;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_OK);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 1), AF_ERR_PARAM);  // int8 takes softcap_s8
  o = AF_SDPA_OPTS_INIT;
  int32_t c8[8] = {1 << 30, 0, 1 << 30, 0, 1 << 30, 0, 1 << 30, 0};
  o.softcap_s8 = c8;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 1), AF_OK);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM);  // f32 takes softcap
  c8[5] = 31;                                                // head 1: shift out of range
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 1), AF_ERR_PARAM);
  c8[5] = 0;
  c8[6] = 0;  // head 1: zero multiplier
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 1), AF_ERR_PARAM);
  o = AF_SDPA_OPTS_INIT;
  o.kv_align = af_kv_align(2);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM);
  o = AF_SDPA_OPTS_INIT;
  o.alibi_per_batch = 2;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM);
  // [B,H] slopes: every one of the B*H is read and checked (the last one is
  // beyond an [H] array).
  float slopes[4] = {0.5f, 0.25f, 0.125f, nan};
  o = AF_SDPA_OPTS_INIT;
  o.alibi_slopes = slopes;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_OK);  // [H]: the NaN is not read
  o.alibi_per_batch = 1;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM);
  slopes[3] = 1.f;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_OK);
  // af_s8_softcap_prepare: cap finite and > 0, scales as af_s8_prepare.
  const float sq = 0.01f, sk = 0.02f;
  for (float cap : {0.f, -1.f, nan, kInf})
    EXPECT_EQ(af_s8_softcap_prepare(c8, cap, 2, &sq, &sk, 1, 0.5f), AF_ERR_PARAM) << cap;
  EXPECT_EQ(af_s8_softcap_prepare(c8, 5.f, 2, &sq, &sk, 1, nan), AF_ERR_PARAM);
  EXPECT_EQ(af_s8_softcap_prepare(c8, 5.f, 2, &sq, &sk, 3, 0.5f), AF_ERR_PARAM);  // n != 1, H
  EXPECT_EQ(af_s8_softcap_prepare(nullptr, 5.f, 2, &sq, &sk, 1, 0.5f), AF_ERR_NULL);
  EXPECT_EQ(af_s8_softcap_prepare(c8, 1e-12f, 1, &sq, &sk, 1, 0.5f), AF_ERR_PARAM);  // K < 2^-14
  ASSERT_EQ(af_s8_softcap_prepare(c8, 5.f, 2, &sq, &sk, 1, 0.5f), AF_OK);
  EXPECT_EQ(c8[0], c8[4]);  // per-tensor scales: the same constants per head
  af_sdpa_opts_init(&o);
  EXPECT_EQ(o.kv_align, AF_KV_ALIGN_PADDED);
  EXPECT_EQ(o.alibi_per_batch, 0);
  EXPECT_EQ(o.softcap, 0.f);
  EXPECT_EQ(o.softcap_s8, nullptr);
}

TEST(MicroMha, BatchedAlibiPerSequenceSoftcapMatchReference) {
  // af_mha_f32_ex and af_mha_s8 slice [B,H] slopes per sequence; the f32
  // MHA equals af_sdpa_f32_ex on its projected heads, checked through the
  // stages against the float64 SDPA with the same options.
  const int32_t B = 2, H = 2, E = 8, Lq = 3, Lk = 5, dh = E / H;
  af_mha_shape ms{B, Lq, Lk, E, H, H, AF_CAUSAL_BOTTOM_RIGHT};
  Rng rng(21);
  auto rnd = [&](size_t n) {
    std::vector<float> x(n);
    for (auto& a : x) a = float(rng.Uniform(-1, 1));
    return x;
  };
  std::vector<float> xq = rnd(B * Lq * E), xk = rnd(B * Lk * E), xv = rnd(B * Lk * E);
  std::vector<float> wq = rnd(E * E), wk = rnd(E * E), wv = rnd(E * E), wo = rnd(E * E);
  af_mha_weights_f32 w{wq.data(), wk.data(), wv.data(), wo.data(), nullptr, nullptr, nullptr,
                       nullptr};
  std::vector<float> slopes = {0.5f, 0.1f, 0.02f, 0.9f};
  std::vector<int32_t> kv_lens = {4, 2};
  af_sdpa_opts o = AF_SDPA_OPTS_INIT;
  o.alibi_slopes = slopes.data();
  o.alibi_per_batch = 1;
  o.kv_align = AF_KV_ALIGN_PER_SEQUENCE;
  o.softcap = 0.7f;
  std::vector<float> out(B * Lq * E), sq(B * H * Lq * dh), sk(B * H * Lk * dh),
      sv(B * H * Lk * dh), ho(B * H * Lq * dh), lse(B * H * Lq);
  af_mha_stages_f32 st{sq.data(), sk.data(), sv.data(), lse.data(), ho.data(), nullptr};
  const size_t ws = af_mha_f32_workspace_bytes(&ms);
  std::vector<uint32_t> arena(ws / 4 + 1);
  const float scale = 0.5f;
  ASSERT_EQ(af_mha_f32_ex(out.data(), xq.data(), xk.data(), xv.data(), kv_lens.data(), &w, scale,
                          &ms, &o, arena.data(), ws, &st),
            AF_OK);
  Problem p;
  p.s = {B, H, H, Lq, Lk, dh, dh, AF_CAUSAL_BOTTOM_RIGHT};
  p.q = sq;
  p.k = sk;
  p.v = sv;
  p.scale = scale;
  p.kv_lens = kv_lens;
  p.alibi = slopes;
  p.alibi_bh = true;
  p.per_seq = true;
  p.softcap = 0.7f;
  Ref r;
  Reference(p, p.q, p.k, p.v, &r);
  for (size_t i = 0; i < ho.size(); ++i) ASSERT_NEAR(ho[i], r.out[i], 2e-5) << i;
}

// --------------------------------------------------------------- probes --

TEST(MicroProbe, F32RowsMatchTheReferenceStages) {
  Rng rng(5);
  int rows = 0;
  for (int it = 0; it < 48; ++it) {
    Problem p = RandomProblem(rng, RandomShape(rng, it), 2.f, it % 32);
    Ref r;
    Reference(p, p.q, p.k, p.v, &r);
    const af_sdpa_shape& s = p.s;
    const af_sdpa_opts o = p.F32Opts();
    const double *sc = Stage(r, "scores"), *sd = Stage(r, "scaled"), *mk = Stage(r, "masked"),
                 *w = Stage(r, "weights");
    ASSERT_TRUE(sc && sd && mk && w);
    std::vector<float> a(s.kv_len), b(s.kv_len), c(s.kv_len), d(s.kv_len);
    for (int32_t bb = 0; bb < s.batch; ++bb)
      for (int32_t h = 0; h < s.num_heads; ++h)
        for (int32_t i = 0; i < s.q_len; ++i) {
          float lse = 0;
          ASSERT_EQ(af_sdpa_f32_probe(a.data(), b.data(), c.data(), d.data(), &lse, p.q.data(),
                                      p.k.data(), p.kv_lens.empty() ? nullptr : p.kv_lens.data(),
                                      p.scale, &s, &o, bb, h, i),
                    AF_OK);
          const size_t row = (size_t(bb * s.num_heads + h) * s.q_len + i);
          ASSERT_NO_FATAL_FAILURE(ExpectF32ProbeRow(a.data(), b.data(), c.data(), d.data(), sc, sd,
                                                    mk, w, row, s.kv_len, it));
          if (std::isinf(r.lse[row]))
            ASSERT_EQ(lse, -kInf);
          else
            ASSERT_NEAR(lse, r.lse[row], 1e-5 * (1 + std::fabs(r.lse[row])));
          ++rows;
        }
  }
  EXPECT_GT(rows, 1000);
}

TEST(MicroProbe, S8RowsAreExactScoresAndBoundedWeights) {
  Rng rng(6);
  for (int it = 0; it < 80; ++it) {
    Problem p = RandomProblem(rng, RandomShape(rng, it), 1.f, it % 32);
    // The second half adds softcap, the per-sequence diagonal, [B,H] ALiBi.
    if (it >= 40) AddNewOptions(rng, &p, 1 + it % 7);
    S8Problem c = Quantise(p);
    // The masked stage: mask/ALiBi rounding (<= 1 raw unit) plus, with a
    // cap, the integer tanh's derived bound (docs/edge.md "int8 softcap").
    const double cap_tol =
        p.softcap > 0 ? p.softcap * AF_S8_SOFTCAP_ERR + 0.5 * double(c.sq) * c.sk * c.f.scale : 0;
    Ref r;
    Reference(c.f, c.f.q, c.f.k, c.f.v, &r);
    const af_sdpa_shape& s = c.f.s;
    af_s8_params prm;
    ASSERT_EQ(af_s8_prepare(&prm, &c.sq, &c.sk, &c.sv, &c.so, 1, c.f.scale), AF_OK);
    const af_sdpa_opts o = S8Opts(c);
    const double unit = double(c.sq) * c.sk, unit_scaled = unit * c.f.scale;
    const double *sc = Stage(r, "scores"), *mk = Stage(r, "masked"), *w = Stage(r, "weights");
    std::vector<int32_t> a(s.kv_len), m(s.kv_len), wt(s.kv_len);
    for (int32_t bb = 0; bb < s.batch; ++bb)
      for (int32_t h = 0; h < s.num_heads; ++h)
        for (int32_t i = 0; i < s.q_len; ++i) {
          int32_t sum = -1;
          ASSERT_EQ(af_sdpa_s8_probe(a.data(), m.data(), wt.data(), &sum, c.q.data(), c.k.data(),
                                     c.f.kv_lens.empty() ? nullptr : c.f.kv_lens.data(), &prm,
                                     &s, &o, bb, h, i),
                    AF_OK);
          const size_t row = (size_t(bb * s.num_heads + h) * s.q_len + i);
          for (int32_t j = 0; j < s.kv_len; ++j) {
            const size_t e = row * s.kv_len + j;
            // q8 . k8 is exact: the dequantised product divided by the unit
            // is that integer (float64 rounding aside).
            ASSERT_EQ(a[j], int32_t(std::llround(sc[e] / unit))) << "scores " << it;
            if (std::isinf(mk[e])) {
              ASSERT_EQ(m[j], AF_S8_MASKED);
              ASSERT_EQ(wt[j], 0);
            } else {
              ASSERT_NEAR(m[j] * unit_scaled, mk[e],
                          1.01 * unit_scaled + cap_tol + 1e-5 * std::fabs(mk[e]))
                  << "masked " << it;
            }
            const double got = sum > 0 ? double(wt[j]) / sum : 0.0;
            ASSERT_NEAR(got, w[e], 1.0 / 256 + w[e] / 32) << "weights " << it << " j " << j;
          }
        }
  }
}

// ----------------------------------------------------------- golden cases --

// Every committed case of a kind (the micro library implements every
// option a golden case uses: nothing is skipped).
std::vector<std::string> GoldenFiles(const char* prefix) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(fs::path(ATTNFLOW_SOURCE_DIR) / "tests/data/golden"))
    if (e.path().extension() == ".safetensors" &&
        e.path().filename().string().rfind(prefix, 0) == 0)
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The case's mask, window, ALiBi and kv_lens into a Problem.
void CaseOptions(const GoldenCase& c, int64_t B, Problem* p) {
  const SdpaOptions& o = c.opt;
  if (!o.kv_lens.empty_view())
    for (int64_t b = 0; b < B; ++b) p->kv_lens.push_back(int32_t(o.kv_lens.load(b)));
  if (!o.attn_mask.empty_view()) {
    for (int d = 0; d < o.attn_mask.rank; ++d)
      p->mask_shape[4 - o.attn_mask.rank + d] = int32_t(o.attn_mask.shape[d]);
    const std::vector<float> m = GoldenFloats(o.attn_mask);
    if (o.attn_mask.dtype == DType::kBool) {
      p->mask_type = AF_MASK_BOOL;
      for (float x : m) p->mask_b.push_back(x != 0.f);
    } else {
      p->mask_type = AF_MASK_F32;
      p->mask_f = m;
    }
  }
  p->window_left = int32_t(o.window_left);
  p->window_right = int32_t(o.window_right);
  if (!o.alibi_slopes.empty_view()) p->alibi = GoldenFloats(o.alibi_slopes);
  p->alibi_bh = o.alibi_slopes.rank == 2;
  p->per_seq = o.kv_align == KvAlign::kPerSequence;
  p->softcap = float(o.softcap);
}

TEST(MicroGolden, EverySdpaCaseF32EveryStageAndInt8WithinBound) {
  int checked = 0, masked = 0, newopts = 0;
  for (const auto& f : GoldenFiles("sdpa_")) {
    Result<GoldenCase> c = LoadGoldenCase(f);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->kind, "sdpa");
    SCOPED_TRACE(f);
    Problem p;
    p.q = GoldenFloats(c->q);
    p.k = GoldenFloats(c->k);
    p.v = GoldenFloats(c->v);
    p.s = {int32_t(c->q.shape[0]), int32_t(c->q.shape[1]), int32_t(c->k.shape[1]),
           int32_t(c->q.shape[2]), int32_t(c->k.shape[2]), int32_t(c->q.shape[3]),
           int32_t(c->v.shape[3]), FromCausal(c->opt.causal)};
    p.scale = float(std::isnan(c->opt.scale) ? DefaultScale(c->q.shape[3]) : c->opt.scale);
    CaseOptions(c.value(), p.s.batch, &p);
    masked += p.mask_type != AF_MASK_NONE || p.window_left >= 0 || p.window_right >= 0 ||
              !p.alibi.empty();
    newopts += p.softcap > 0.f || p.per_seq || p.alibi_bh;
    const af_sdpa_shape& s = p.s;
    std::vector<float> o, l;
    ASSERT_EQ(RunF32(p, &o, &l), AF_OK);
    auto cmp = [&](const char* name, std::vector<float>& got, Shape shape) {
      StageReport r = CompareStage(name, MakeView(got.data(), DType::kF32, shape),
                                   c->file->Get(name).value(), c->atol, c->rtol);
      EXPECT_TRUE(r.match) << name << " max_abs " << r.max_abs << " at " << r.first_bad_index;
    };
    cmp("out", o, {s.batch, s.num_heads, s.q_len, s.v_dim});
    cmp("lse", l, {s.batch, s.num_heads, s.q_len});
    // Every score-row stage through the probe.
    const size_t ns = size_t(s.batch) * s.num_heads * s.q_len * s.kv_len;
    std::vector<float> sc(ns), sd(ns), mk(ns), w(ns);
    const af_sdpa_opts opts = p.F32Opts();
    for (int32_t b = 0; b < s.batch; ++b)
      for (int32_t h = 0; h < s.num_heads; ++h)
        for (int32_t i = 0; i < s.q_len; ++i) {
          const size_t off = (size_t(b * s.num_heads + h) * s.q_len + i) * s.kv_len;
          ASSERT_EQ(af_sdpa_f32_probe(sc.data() + off, sd.data() + off, mk.data() + off,
                                      w.data() + off, nullptr, p.q.data(), p.k.data(),
                                      p.kv_lens.empty() ? nullptr : p.kv_lens.data(), p.scale, &s,
                                      &opts, b, h, i),
                    AF_OK);
        }
    const Shape srow = {s.batch, s.num_heads, s.q_len, s.kv_len};
    if (c->file->Has("scores")) cmp("scores", sc, srow);
    if (c->file->Has("scaled")) cmp("scaled", sd, srow);
    if (c->file->Has("masked")) cmp("masked", mk, srow);
    if (c->file->Has("weights")) cmp("weights", w, srow);
    // int8, as export-c quantises it.
    S8Problem q8 = Quantise(p);
    af_s8_params prm;
    if (s.kv_len <= 32768 &&
        af_s8_prepare(&prm, &q8.sq, &q8.sk, &q8.sv, &q8.so, 1, p.scale) == AF_OK) {
      const int e = S8MaxError(q8);
      EXPECT_GE(e, 0);
      EXPECT_LE(e, AF_S8_BOUND_LSB);
    } else {
      ADD_FAILURE() << "no int8 path";
    }
    ++checked;
  }
  EXPECT_GE(checked, 45);
  EXPECT_GE(newopts, 5);  // softcap, the per-sequence diagonal, [B,H] ALiBi slopes
  EXPECT_GE(masked, 20);
}

TEST(MicroGolden, EveryMhaCaseEveryStage) {
  int checked = 0;
  for (const auto& f : GoldenFiles("mha_")) {
    Result<GoldenCase> c = LoadGoldenCase(f);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    SCOPED_TRACE(f);
    const reference::MhaWeights& w = c->weights;
    const int32_t B = int32_t(c->x_q.shape[0]), Lq = int32_t(c->x_q.shape[1]),
                  Lk = int32_t(c->x_k.shape[1]), E = int32_t(c->x_q.shape[2]);
    const int32_t H = int32_t(w.num_heads), Hkv = int32_t(w.num_kv_heads ? w.num_kv_heads : H);
    const int32_t dh = E / H;
    af_mha_shape s = {B, Lq, Lk, E, H, Hkv, FromCausal(c->opt.causal)};
    auto flat = [](const TensorView& t) {
      return t.empty_view() ? std::vector<float>() : GoldenFloats(t);
    };
    std::vector<float> xq = flat(c->x_q), xk = flat(c->x_k), xv = flat(c->x_v), wq = flat(w.w_q),
                       wk = flat(w.w_k), wv = flat(w.w_v), wo = flat(w.w_o), bq = flat(w.b_q),
                       bk = flat(w.b_k), bv = flat(w.b_v), bo = flat(w.b_o);
    Problem p;
    CaseOptions(c.value(), B, &p);
    const af_sdpa_opts opts = p.F32Opts();
    auto ptr = [](std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
    af_mha_weights_f32 mw = {wq.data(), wk.data(), wv.data(), wo.data(),
                             ptr(bq),   ptr(bk),   ptr(bv),   ptr(bo)};
    std::vector<float> out(size_t(B) * Lq * E), q(size_t(B) * H * Lq * dh),
        k(size_t(B) * Hkv * Lk * dh), v(k.size()), lse(size_t(B) * H * Lq), ho(q.size()),
        cat(out.size());
    af_mha_stages_f32 stg = {q.data(), k.data(), v.data(), lse.data(), ho.data(), cat.data()};
    const size_t ws = af_mha_f32_workspace_bytes(&s);
    std::vector<uint32_t> arena(ws / 4 + 8, 0xA5A5A5A5u);
    const float scale = float(std::isnan(c->opt.scale) ? DefaultScale(dh) : c->opt.scale);
    ASSERT_EQ(af_mha_f32_ex(out.data(), xq.data(), xk.data(), xv.data(),
                            p.kv_lens.empty() ? nullptr : p.kv_lens.data(), &mw, scale, &s, &opts,
                            arena.data(), ws, &stg),
              AF_OK);
    for (size_t i = ws / 4; i < arena.size(); ++i) EXPECT_EQ(arena[i], 0xA5A5A5A5u);
    // The score-row stages through the probe on the projected q and k.
    af_sdpa_shape ps = {B, H, Hkv, Lq, Lk, dh, dh, s.causal};
    const size_t ns = size_t(B) * H * Lq * Lk;
    std::vector<float> sc(ns), sd(ns), mk(ns), wt(ns);
    for (int32_t b = 0; b < B; ++b)
      for (int32_t h = 0; h < H; ++h)
        for (int32_t i = 0; i < Lq; ++i) {
          const size_t off = (size_t(b * H + h) * Lq + i) * Lk;
          ASSERT_EQ(af_sdpa_f32_probe(sc.data() + off, sd.data() + off, mk.data() + off,
                                      wt.data() + off, nullptr, q.data(), k.data(),
                                      p.kv_lens.empty() ? nullptr : p.kv_lens.data(), scale, &ps,
                                      &opts, b, h, i),
                    AF_OK);
        }
    const Shape srow = {B, H, Lq, Lk};
    const struct {
      const char* name;
      std::vector<float>* got;
      Shape shape;
    } stages[] = {{"q", &q, {B, H, Lq, dh}},          {"k", &k, {B, Hkv, Lk, dh}},
                  {"v", &v, {B, Hkv, Lk, dh}},        {"scores", &sc, srow},
                  {"scaled", &sd, srow},              {"masked", &mk, srow},
                  {"weights", &wt, srow},             {"lse", &lse, {B, H, Lq}},
                  {"heads_out", &ho, {B, H, Lq, dh}}, {"concat", &cat, {B, Lq, E}},
                  {"out", &out, {B, Lq, E}}};
    for (const auto& st : stages) {
      if (!c->file->Has(st.name)) continue;
      StageReport r = CompareStage(st.name, MakeView(st.got->data(), DType::kF32, st.shape),
                                   c->file->Get(st.name).value(), c->atol, c->rtol);
      EXPECT_TRUE(r.match) << "stage " << st.name << " max_abs " << r.max_abs << " at "
                           << r.first_bad_index;
    }
    ++checked;
  }
  EXPECT_GE(checked, 7);
}

// --------------------------------------------------------------- decode --

TEST(MicroDecode, AlibiAndWindowOverTheRingMatchReference) {
  Rng rng(8);
  const int32_t H = 4, Hkv = 2, D = 8, Dv = 6, cap = 12;
  for (float softcap : {0.f, 0.8f})
  for (int32_t window : {0, 5, 12}) {
    std::vector<float> ks(size_t(Hkv) * cap * D), vs(size_t(Hkv) * cap * Dv);
    af_kv_cache c;
    ASSERT_EQ(af_kv_cache_init(&c, ks.data(), vs.data(), Hkv, D, Dv, cap, window), AF_OK);
    std::vector<float> all_k, all_v;  // [T, Hkv, D] history
    std::vector<double> sl(H);
    AlibiSlopes(H, sl.data());
    std::vector<float> slopes(sl.begin(), sl.end());
    const int steps = window == 0 ? cap : 30;
    for (int t = 0; t < steps; ++t) {
      std::vector<float> kn(size_t(Hkv) * D), vn(size_t(Hkv) * Dv), q(size_t(H) * D);
      for (auto* x : {&kn, &vn, &q})
        for (auto& e : *x) e = float(rng.Uniform(-1, 1));
      ASSERT_EQ(af_kv_cache_append(&c, kn.data(), vn.data()), AF_OK);
      all_k.insert(all_k.end(), kn.begin(), kn.end());
      all_v.insert(all_v.end(), vn.begin(), vn.end());
      std::vector<float> out(size_t(H) * Dv), lse(H);
      std::vector<uint32_t> arena(af_decode_f32_workspace_bytes(&c, H) / 4 + 1);
      if (softcap == 0.f) {
        ASSERT_EQ(af_decode_f32_ex(out.data(), lse.data(), q.data(), &c, H, 0.4f, slopes.data(),
                                   arena.data(), arena.size() * 4),
                  AF_OK);
      } else {
        ASSERT_EQ(af_decode_f32_softcap(out.data(), lse.data(), q.data(), &c, H, 0.4f,
                                        slopes.data(), softcap, arena.data(), arena.size() * 4),
                  AF_OK);
        EXPECT_EQ(af_decode_f32_softcap(out.data(), lse.data(), q.data(), &c, H, 0.4f,
                                        slopes.data(), -1.f, arena.data(), arena.size() * 4),
                  AF_ERR_PARAM);
      }
      // Reference: the whole history as one bottom-right row with ALiBi and
      // the window (left = window - 1).
      const int32_t L = t + 1;
      Problem p;
      p.s = {1, H, Hkv, 1, L, D, Dv, AF_CAUSAL_BOTTOM_RIGHT};
      p.q = q;
      p.k.resize(size_t(Hkv) * L * D);
      p.v.resize(size_t(Hkv) * L * Dv);
      for (int32_t j = 0; j < L; ++j)
        for (int32_t g = 0; g < Hkv; ++g) {
          std::copy_n(&all_k[(size_t(j) * Hkv + g) * D], D, &p.k[(size_t(g) * L + j) * D]);
          std::copy_n(&all_v[(size_t(j) * Hkv + g) * Dv], Dv, &p.v[(size_t(g) * L + j) * Dv]);
        }
      p.scale = 0.4f;
      p.alibi = slopes;
      p.softcap = softcap;
      p.window_left = window > 0 ? window - 1 : -1;
      Ref r;
      Reference(p, p.q, p.k, p.v, &r);
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], r.out[i], 2e-5 * (1 + std::fabs(r.out[i])))
            << "window " << window << " step " << t;
      for (int32_t h = 0; h < H; ++h) ASSERT_NEAR(lse[h], r.lse[h], 2e-5 * (1 + std::fabs(r.lse[h])));
    }
  }
}

// ------------------------------------------------------------ the format --

TEST(MicroDump, WritesTheSpecExampleAndChecksums) {
  std::string text;
  auto sink = [](void* ctx, const char* s, size_t n) {
    static_cast<std::string*>(ctx)->append(s, n);
  };
  const int32_t dims[3] = {1, 1, 2};
  const float lse[2] = {1.f, -kInf};
  ASSERT_EQ(af_dump_begin(sink, &text, "sdpa_tiny", "sdpa", "micro-f32"), AF_OK);
  ASSERT_EQ(af_dump_tensor(sink, &text, "lse", AF_DUMP_F32, 3, dims), AF_OK);
  ASSERT_EQ(af_dump_part(sink, &text, "lse", AF_DUMP_F32, 0, lse, 2), AF_OK);
  ASSERT_EQ(af_dump_done(sink, &text, "sdpa_tiny"), AF_OK);
  // docs/device-dump.md's example, whose checksum was computed independently
  // (FNV-1a 32 of 00 00 80 3f 00 00 80 ff).
  EXPECT_EQ(text,
            "AFDUMP attnflow-dump/1 case=sdpa_tiny kind=sdpa impl=micro-f32\n"
            "AFDUMP tensor lse f32 3 1 1 2\n"
            "AFDUMP part lse 0 2\n"
            "AFDUMP d 3f800000 ff800000\n"
            "AFDUMP end lse 0 2 686df4d5\n"
            "AFDUMP done sdpa_tiny\n");
  text.clear();
  const int8_t v8[10] = {-128, 127, 0, -1, 1, 2, 3, 4, 5, 6};
  ASSERT_EQ(af_dump_part(sink, &text, "out", AF_DUMP_I8, 7, v8, 10), AF_OK);
  uint32_t h = 2166136261u;
  for (int8_t x : v8) h = (h ^ uint8_t(x)) * 16777619u;
  char want[64];
  std::snprintf(want, sizeof want, "AFDUMP end out 7 10 %08x\n", h);
  EXPECT_EQ(text, std::string("AFDUMP part out 7 10\n") +
                      "AFDUMP d -128 127 0 -1 1 2 3 4\n"
                      "AFDUMP d 5 6\n" + want);
  EXPECT_EQ(af_dump_begin(sink, &text, "bad name", "sdpa", "x"), AF_ERR_PARAM);
  EXPECT_EQ(af_dump_tensor(sink, &text, "out", AF_DUMP_F32, 9, dims), AF_ERR_SHAPE);
  EXPECT_EQ(af_dump_part(nullptr, &text, "out", AF_DUMP_F32, 0, lse, 1), AF_ERR_NULL);
}

// ----------------------------------------------------------- API safety --

TEST(MicroSafety, DecodeValidatesTheCallersCacheStruct) {
  std::vector<float> ks(2 * 4 * 8), vs(2 * 4 * 8), q(2 * 8), out(2 * 8, 3.f);
  std::vector<uint32_t> arena(64);
  af_kv_cache c;
  ASSERT_EQ(af_kv_cache_init(&c, ks.data(), vs.data(), 2, 8, 8, 4, 2), AF_OK);
  const std::vector<float> kn(16, 1.f), vn(16, 1.f);
  for (int t = 0; t < 3; ++t) ASSERT_EQ(af_kv_cache_append(&c, kn.data(), vn.data()), AF_OK);
  auto decode = [&](const af_kv_cache& cc) {
    return af_decode_f32(out.data(), nullptr, q.data(), &cc, 2, 0.3f, arena.data(), 256);
  };
  ASSERT_EQ(decode(c), AF_OK);
  std::fill(out.begin(), out.end(), 3.f);
  af_kv_cache bad = c;
  bad.window = 100;  // beyond the storage: was a heap overflow
  EXPECT_EQ(decode(bad), AF_ERR_PARAM);
  EXPECT_EQ(af_kv_cache_append(&bad, kn.data(), vn.data()), AF_ERR_PARAM);
  af_kv_cache zero;
  std::memset(&zero, 0, sizeof zero);  // was a division by zero
  EXPECT_EQ(decode(zero), AF_ERR_NULL);
  zero.k = ks.data();
  zero.v = vs.data();
  EXPECT_EQ(decode(zero), AF_ERR_SHAPE);
  bad = c;
  bad.length = -5;
  EXPECT_EQ(decode(bad), AF_ERR_PARAM);
  bad = c;
  bad.window = 0;
  bad.length = 9;  // more positions than the capacity without a window
  EXPECT_EQ(decode(bad), AF_ERR_PARAM);
  bad = c;
  bad.capacity = 1 << 20;
  EXPECT_EQ(decode(bad), AF_ERR_SHAPE);
  for (float x : out) EXPECT_EQ(x, 3.f) << "nothing is written on error";
}

TEST(MicroSafety, MisalignedPointersAreRefused) {
  std::vector<float> buf(4096, 0.5f);
  std::vector<uint32_t> arena(256);
  const float* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(buf.data()) + 2);
  af_sdpa_shape s{1, 2, 1, 4, 4, 8, 8, AF_CAUSAL_NONE};
  std::vector<float> out(64, 3.f);
  EXPECT_EQ(af_sdpa_f32(out.data(), nullptr, odd, buf.data(), buf.data(), nullptr, 0.3f, &s,
                        arena.data(), 1024),
            AF_ERR_ALIGN);
  EXPECT_EQ(af_sdpa_f32(out.data(), nullptr, buf.data(), odd, buf.data(), nullptr, 0.3f, &s,
                        arena.data(), 1024),
            AF_ERR_ALIGN);
  EXPECT_EQ(af_sdpa_f32(out.data(), nullptr, buf.data(), buf.data(), odd, nullptr, 0.3f, &s,
                        arena.data(), 1024),
            AF_ERR_ALIGN);
  for (float x : out) EXPECT_EQ(x, 3.f);
  af_mha_shape ms = {1, 2, 2, 8, 2, 1, AF_CAUSAL_NONE};
  af_mha_weights_f32 w = {buf.data(), buf.data(), buf.data(), odd, nullptr, nullptr, nullptr,
                          nullptr};
  std::vector<uint32_t> ma(af_mha_f32_workspace_bytes(&ms) / 4 + 1);
  EXPECT_EQ(af_mha_f32(out.data(), buf.data(), buf.data(), buf.data(), nullptr, &w, 0.5f, &ms,
                       ma.data(), ma.size() * 4, nullptr),
            AF_ERR_ALIGN);
  EXPECT_EQ(af_relu_f32(const_cast<float*>(odd), 4), AF_ERR_ALIGN);
  EXPECT_EQ(af_layernorm_f32(out.data(), odd, nullptr, nullptr, 4, 1e-5f), AF_ERR_ALIGN);
}

TEST(MicroSafety, NullInTheHelpersIsAnError) {
  std::vector<float> x(8, -1.f);
  EXPECT_EQ(af_relu_f32(nullptr, 8), AF_ERR_NULL);
  EXPECT_EQ(af_add_f32(nullptr, x.data(), 8), AF_ERR_NULL);
  EXPECT_EQ(af_add_f32(x.data(), nullptr, 8), AF_ERR_NULL);
  EXPECT_EQ(af_relu_s8(nullptr, 8), AF_ERR_NULL);
  EXPECT_EQ(af_relu_f32(x.data(), -1), AF_ERR_SHAPE);
  EXPECT_EQ(af_relu_f32(x.data(), 8), AF_OK);
  EXPECT_EQ(x[0], 0.f);
}

TEST(MicroSafety, MhaWorkspaceNeverWrapsOnA32BitSizeT) {
  // 2 * Lq * E + ... floats: ~ 2^33 bytes; below 2^31 elements each, so the
  // shape itself is valid, but the arena cannot exist on a 32-bit part: 0.
  af_mha_shape big = {1, 32768, 32768, 32768, 8, 8, AF_CAUSAL_NONE};
  EXPECT_EQ(af_mha_f32_workspace_bytes(&big), 0u);
  af_mha_shape ok = {1, 4, 4, 16, 4, 2, AF_CAUSAL_NONE};
  // 2*4*16 + 2*4*2*4 + 16 + 4*4 floats + the SDPA arena (2 * 32 floats).
  EXPECT_EQ(af_mha_f32_workspace_bytes(&ok), size_t(128 + 64 + 16 + 16) * 4 + 256);
}

TEST(MicroSafety, OptionsAreValidated) {
  af_sdpa_shape s{2, 4, 2, 3, 5, 8, 8, AF_CAUSAL_NONE};
  af_sdpa_opts o = AF_SDPA_OPTS_INIT;
  uint8_t m[200] = {1};
  EXPECT_EQ(af_sdpa_check_opts(nullptr, &s, 0), AF_OK);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_OK);
  o.window_left = -2;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM);
  af_sdpa_opts_init(&o);
  o.mask_type = AF_MASK_BOOL;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_NULL);
  o.mask = m;
  int32_t shape_ok[4] = {1, 4, 1, 5}, shape_bad[4] = {1, 3, 1, 5};
  std::copy(shape_ok, shape_ok + 4, o.mask_shape);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_OK);
  std::copy(shape_bad, shape_bad + 4, o.mask_shape);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_SHAPE);
  std::copy(shape_ok, shape_ok + 4, o.mask_shape);
  o.mask_type = AF_MASK_S32;  // an int8-path mask on the f32 path
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM);
  o.mask_type = AF_MASK_F32;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 1), AF_ERR_PARAM);
  o.mask_type = af_mask_type(7);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM);
  af_sdpa_opts_init(&o);
  const float slopes[4] = {0.5f, 0.25f, std::nanf(""), 0.1f};
  o.alibi_slopes = slopes;
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 0), AF_ERR_PARAM);
  EXPECT_EQ(af_sdpa_check_opts(&o, &s, 1), AF_ERR_PARAM);  // int8 takes alibi_s8
  // A zeroed struct is a window of 0 on both sides: the diagonal key only
  // (documented), and valid.
  af_sdpa_opts z;
  std::memset(&z, 0, sizeof z);
  EXPECT_EQ(af_sdpa_check_opts(&z, &s, 0), AF_OK);
}

// The shape, mask-count, window and ALiBi bounds are computed in 32 bits
// from the AF_MAX_DIM bounds (no 64-bit multiply on rv32imc): each at its
// edge, against the arithmetic written out in 64 bits here.
TEST(MicroSafety, ThirtyTwoBitBoundsAtTheirEdges) {
  // Element counts: 46340^2 < 2^31 <= 46341^2; 2^31 exactly is refused.
  const af_sdpa_shape fits{1, 46340, 1, 46340, 1, 1, 1, AF_CAUSAL_NONE};
  const af_sdpa_shape over{1, 46341, 1, 46341, 1, 1, 1, AF_CAUSAL_NONE};
  const af_sdpa_shape pow31{1, 32768, 1, 32768, 1, 2, 1, AF_CAUSAL_NONE};
  const af_sdpa_shape huge{65535, 65535, 1, 65535, 1, 65535, 1, AF_CAUSAL_NONE};
  EXPECT_EQ(af_sdpa_check_shape(&fits), AF_OK);
  EXPECT_EQ(af_sdpa_check_shape(&over), AF_ERR_SHAPE);
  EXPECT_EQ(af_sdpa_check_shape(&pow31), AF_ERR_SHAPE);
  EXPECT_EQ(af_sdpa_check_shape(&huge), AF_ERR_SHAPE);
  // A mask's element count, likewise (the mask is never read by the check).
  const uint8_t one = 1;
  af_sdpa_opts mo = AF_SDPA_OPTS_INIT;
  mo.mask_type = AF_MASK_BOOL;
  mo.mask = &one;
  const af_sdpa_shape ms{1, 46340, 1, 46340, 2, 1, 1, AF_CAUSAL_NONE};
  const int32_t m_fits[4] = {1, 46340, 46340, 1}, m_over[4] = {1, 46340, 46340, 2};
  std::copy(m_fits, m_fits + 4, mo.mask_shape);
  EXPECT_EQ(af_sdpa_check_opts(&mo, &ms, 1), AF_OK);
  std::copy(m_over, m_over + 4, mo.mask_shape);
  EXPECT_EQ(af_sdpa_check_opts(&mo, &ms, 1), AF_ERR_SHAPE);
  EXPECT_EQ(af_sdpa_check_opts(&mo, &ms, 0), AF_ERR_SHAPE);
  // A shape the caller did not check: a mask extent over AF_MAX_DIM is a
  // shape error, not a wrapped 32-bit count.
  const af_sdpa_shape unchecked{1, 1, 1, 1, 65536 * 2, 1, 1, AF_CAUSAL_NONE};
  const int32_t m_wide[4] = {1, 1, 1, 65536 * 2};
  std::copy(m_wide, m_wide + 4, mo.mask_shape);
  EXPECT_EQ(af_sdpa_check_opts(&mo, &unchecked, 1), AF_ERR_SHAPE);

  // Windows of INT32_MAX are no window, bit for bit, on both paths.
  const int32_t H = 2, Lq = 5, Lk = 9, D = 8;
  af_sdpa_shape s{1, H, 1, Lq, Lk, D, D, AF_CAUSAL_BOTTOM_RIGHT};
  Rng rng(31);
  std::vector<int8_t> q8(size_t(H) * Lq * D), k8(size_t(Lk) * D), v8(size_t(Lk) * D);
  std::vector<float> qf(q8.size()), kf(k8.size()), vf(v8.size());
  for (auto* v : {&q8, &k8, &v8})
    for (int8_t& x : *v) x = int8_t(int(rng.Below(255)) - 127);
  for (size_t i = 0; i < q8.size(); ++i) qf[i] = q8[i] / 64.f;
  for (size_t i = 0; i < k8.size(); ++i) kf[i] = k8[i] / 64.f, vf[i] = v8[i] / 64.f;
  const int32_t kvl = 7;
  const float sq = 1.f / 64, so = 1.f / 128;
  af_s8_params p;
  ASSERT_EQ(af_s8_prepare(&p, &sq, &sq, &sq, &so, 1, 0.35f), AF_OK);
  std::vector<uint32_t> arena(4096);
  auto run = [&](int32_t wl, int32_t wr, std::vector<int8_t>* o8, std::vector<float>* of) {
    af_sdpa_opts o = AF_SDPA_OPTS_INIT;
    o.window_left = wl;
    o.window_right = wr;
    o.kv_align = AF_KV_ALIGN_PER_SEQUENCE;
    o8->assign(q8.size(), 0);
    of->assign(qf.size(), 0.f);
    ASSERT_EQ(af_sdpa_s8_ex(o8->data(), q8.data(), k8.data(), v8.data(), &kvl, &p, &s, &o,
                            arena.data(), arena.size() * 4),
              AF_OK);
    ASSERT_EQ(af_sdpa_f32_ex(of->data(), nullptr, qf.data(), kf.data(), vf.data(), &kvl, 0.35f,
                             &s, &o, arena.data(), arena.size() * 4),
              AF_OK);
  };
  std::vector<int8_t> a8, b8;
  std::vector<float> af, bf;
  for (const auto& w : std::vector<std::pair<int32_t, int32_t>>{{INT32_MAX, INT32_MAX},
                                                                {INT32_MAX, 0},
                                                                {0, INT32_MAX}}) {
    run(w.first == INT32_MAX ? -1 : w.first, w.second == INT32_MAX ? -1 : w.second, &a8, &af);
    run(w.first, w.second, &b8, &bf);
    EXPECT_EQ(a8, b8) << w.first << " " << w.second;
    EXPECT_EQ(af, bf) << w.first << " " << w.second;
  }

  // ALiBi at the largest slope of the 32-bit path, floor((2^31 - 130) /
  // (Lq + Lk)), and one above it (the 64-bit path): the probe's masked row
  // is score - ((slope * |d - j| + 128) >> 8), clamped to [-2^30, 2^30 - 1],
  // evaluated here in 64 bits.
  s.causal = AF_CAUSAL_NONE;
  const int64_t edge = (int64_t(INT32_MAX) - 129) / (Lq + Lk);
  for (const int64_t slope : {edge, edge + 1}) {
    const int32_t sl[2] = {int32_t(slope), int32_t(slope)};
    af_sdpa_opts o = AF_SDPA_OPTS_INIT;
    o.alibi_s8 = sl;
    std::vector<int32_t> raw(Lk), masked(Lk);
    for (int32_t i = 0; i < Lq; ++i) {
      ASSERT_EQ(af_sdpa_s8_probe(raw.data(), masked.data(), nullptr, nullptr, q8.data(),
                                 k8.data(), nullptr, &p, &s, &o, 0, 1, i),
                AF_OK);
      const int64_t d = i + Lk - Lq;
      for (int32_t j = 0; j < Lk; ++j) {
        const int64_t y = raw[j] - ((slope * (d > j ? d - j : j - d) + 128) >> 8);
        const int64_t want = std::clamp<int64_t>(y, -(int64_t(1) << 30), (int64_t(1) << 30) - 1);
        EXPECT_EQ(masked[j], want) << "slope " << slope << " row " << i << " key " << j;
      }
    }
  }
}

TEST(MicroSafety, Int8PiecesAtExtremeValuesHaveNoOverflow) {
  // Under UBSan (tools/ci/sanitize.sh) any signed overflow here aborts the
  // test; the values below are what the int8 helpers must survive.
  const int32_t in = 4096;
  std::vector<int8_t> x(in, -128), w(size_t(in) * 2, -128), y(2);
  const int32_t b[2] = {INT32_MAX, INT32_MIN};
  af_qmult m[2] = {{INT32_MAX, 30}, {INT32_MAX, -31}};
  ASSERT_EQ(af_linear_s8(y.data(), x.data(), w.data(), b, m, in, 2), AF_OK);
  EXPECT_EQ(y[0], 127);  // saturated, not wrapped
  std::vector<int32_t> r = {INT32_MAX - 5, INT32_MIN + 5};
  ASSERT_EQ(af_linear_s8_residual(r.data(), x.data(), w.data(), b, m, in, 2), AF_OK);
  EXPECT_EQ(r[0], INT32_MAX);
  std::vector<int32_t> ln(64), g(64, INT32_MAX), gb(64, INT32_MIN);
  for (int i = 0; i < 64; ++i) ln[i] = i % 2 ? INT32_MAX : INT32_MIN;
  std::vector<int8_t> lo(64);
  ASSERT_EQ(af_layernorm_s8(lo.data(), ln.data(), g.data(), gb.data(), 64, INT32_MAX), AF_OK);
  ASSERT_EQ(af_layernorm_s8(lo.data(), ln.data(), g.data(), gb.data(), 64, 1), AF_OK);
  EXPECT_EQ(af_s8_mul_by_qmult(INT32_MIN, af_qmult{INT32_MAX, 30}), INT32_MIN);
  EXPECT_EQ(af_s8_mul_by_qmult(INT32_MAX, af_qmult{INT32_MAX, -31}), 1);  // ~(2^31)^2 / 2^62
  EXPECT_EQ(af_s8_exp2_neg_q15(INT32_MAX), 0);
  EXPECT_EQ(af_s8_exp2_neg_q15(INT32_MIN), 32767);
  // SDPA with every input at -128, a long head and masks at the clamp.
  af_sdpa_shape s{1, 1, 1, 3, 40, 2048, 4, AF_CAUSAL_NONE};
  std::vector<int8_t> q(size_t(3) * 2048, -128), k(size_t(40) * 2048, -128), v(40 * 4, -128),
      o(12, 1);
  std::vector<int32_t> mask(3 * 40, -(1 << 30));
  mask[5] = 1 << 30;
  mask[7] = AF_S8_MASKED;
  int32_t alibi = INT32_MAX;
  af_sdpa_opts opts = AF_SDPA_OPTS_INIT;
  opts.mask_type = AF_MASK_S32;
  opts.mask = mask.data();
  opts.mask_shape[2] = 3;
  opts.mask_shape[3] = 40;
  opts.alibi_s8 = &alibi;
  const float sq = 1e-4f, one = 1.f;
  af_s8_params p;
  ASSERT_EQ(af_s8_prepare(&p, &sq, &sq, &one, &one, 1, 1.f), AF_OK);
  std::vector<uint32_t> arena(af_sdpa_s8_workspace_bytes(&s) / 4 + 1);
  ASSERT_EQ(af_sdpa_s8_ex(o.data(), q.data(), k.data(), v.data(), nullptr, &p, &s, &opts,
                          arena.data(), arena.size() * 4),
            AF_OK);
  for (int8_t e : o) EXPECT_EQ(e, -128);  // every visible value is -128
}

// ------------------------------------------------------ one source list --

std::string ReadText(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(MicroSources, OneListForEveryBuild) {
  const fs::path root(ATTNFLOW_SOURCE_DIR);
  std::set<std::string> listed, present;
  std::istringstream in(ReadText(root / "micro/sources.txt"));
  for (std::string line; std::getline(in, line);) {
    line = line.substr(0, line.find('#'));
    line.erase(std::remove_if(line.begin(), line.end(), ::isspace), line.end());
    if (line.empty()) continue;
    EXPECT_TRUE(fs::exists(root / "micro" / line)) << line;
    EXPECT_TRUE(listed.insert(line).second) << "listed twice: " << line;
  }
  for (const auto& e : fs::directory_iterator(root / "micro/src"))
    if (e.path().extension() == ".c") present.insert("src/" + e.path().filename().string());
  EXPECT_EQ(listed, present) << "micro/sources.txt must list exactly micro/src/*.c";
  // Every build of the library reads that list and globs nothing itself.
  for (const char* build : {"cmake/micro.cmake", "tools/edge/run_edge.sh", "tools/edge/bench.sh",
                            "micro/esp-idf/attnflow_micro/CMakeLists.txt"}) {
    const std::string text = ReadText(root / build);
    EXPECT_NE(text.find("sources"), std::string::npos) << build << " does not read the list";
    EXPECT_EQ(text.find("src/*.c"), std::string::npos) << build << " globs the sources itself";
    EXPECT_EQ(text.find("af_common.c"), std::string::npos) << build << " names a source itself";
  }
}

}  // namespace
}  // namespace attnflow
