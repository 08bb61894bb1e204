// varlen_test.cc — FlashAttention's API extensions in C++: the per-sequence
// diagonal (KvAlign::kPerSequence), per-batch ALiBi slopes [B,H], softcap,
// variable-length batches (AttentionVarlen / AttentionVarlenBackward) and
// paged KV caches (AttentionPaged).
//
// Expected values: the float64 reference::Sdpa on independently built
// per-sequence copies (the test slices / gathers the keys itself), and
// mathematical properties of the reference (per-sequence alignment equals
// attending the valid prefix alone; [B,H] slopes equal per-batch [H] runs;
// softcap with a cap far above every score equals no softcap to rounding).
// softcap itself is pinned by PyTorch golden cases (tests/golden).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/kernels.h"
#include "attnflow/reference.h"
#include "attnflow/semantics.h"
#include "util/test_util.h"

namespace attnflow {
namespace {

using testing::MaxAbsDiff;
using testing::Random;
using testing::Zeros;

// Contiguous copy of keys [j0, j0+n) of batch b as [1, Hkv, n, dim] F64.
Tensor SliceKeys(const TensorView& t, int64_t b, int64_t j0, int64_t n) {
  Tensor r = Zeros(DType::kF64, {1, t.shape[1], n, t.shape[3]});
  for (int64_t h = 0; h < t.shape[1]; ++h)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < t.shape[3]; ++c)
        r.view().store(r.view().offset(0, h, j, c), t.load(t.offset(b, h, j0 + j, c)));
  return r;
}

Tensor SliceBatch(const TensorView& t, int64_t b) { return SliceKeys(t, b, 0, t.shape[2]); }

TEST(PerSequenceAlignment, EqualsAttendingTheValidPrefixAlone) {
  const int64_t B = 3, H = 4, Hkv = 2, Lq = 5, Lk = 11, D = 6;
  Tensor q = Random({B, H, Lq, D}, 1), k = Random({B, Hkv, Lk, D}, 2),
         v = Random({B, Hkv, Lk, D}, 3);
  Tensor kl = Zeros(DType::kI64, {B});
  const int64_t lens[3] = {11, 7, 3};
  for (int64_t b = 0; b < B; ++b) kl.data<int64_t>()[b] = lens[b];
  for (int window : {0, 1}) {
    SdpaOptions opt;
    opt.causal = Causal::kBottomRight;
    opt.kv_lens = kl.view();
    opt.kv_align = KvAlign::kPerSequence;
    if (window) {
      opt.window_left = 2;
      opt.window_right = 0;
    }
    Tensor slopes = Zeros(DType::kF32, {H});
    for (int64_t h = 0; h < H; ++h) slopes.data<float>()[h] = 0.25f * static_cast<float>(h + 1);
    opt.alibi_slopes = slopes.view();
    Tensor out = Zeros(DType::kF64, {B, H, Lq, D}), lse = Zeros(DType::kF64, {B, H, Lq});
    ASSERT_TRUE(reference::Sdpa(out.view(), lse.view(), q.view(), k.view(), v.view(), opt).ok());
    Tensor fast = Zeros(DType::kF32, {B, H, Lq, D}), fast_lse = Zeros(DType::kF32, {B, H, Lq});
    for (KernelKind kk : {KernelKind::kTiledPrefill, KernelKind::kSplitKvDecode}) {
      KernelOptions ko;
      ko.force = kk;
      ASSERT_TRUE(
          Attention(fast.view(), fast_lse.view(), q.view(), k.view(), v.view(), opt, ko).ok());
      EXPECT_LT(MaxAbsDiff(fast.view(), out.view()), 2e-6) << KernelKindName(kk);
    }
    for (int64_t b = 0; b < B; ++b) {
      Tensor qb = SliceBatch(q.view(), b);
      Tensor kb = SliceKeys(k.view(), b, 0, lens[b]), vb = SliceKeys(v.view(), b, 0, lens[b]);
      SdpaOptions ob = opt;
      ob.kv_lens = TensorView();
      ob.kv_align = KvAlign::kPadded;
      Tensor ref = Zeros(DType::kF64, {1, H, Lq, D}), ref_lse = Zeros(DType::kF64, {1, H, Lq});
      ASSERT_TRUE(
          reference::Sdpa(ref.view(), ref_lse.view(), qb.view(), kb.view(), vb.view(), ob).ok());
      for (int64_t e = 0; e < H * Lq * D; ++e) {
        EXPECT_EQ(out.data<double>()[b * H * Lq * D + e], ref.data<double>()[e]) << b << " " << e;
      }
      for (int64_t e = 0; e < H * Lq; ++e) {
        EXPECT_EQ(lse.data<double>()[b * H * Lq + e], ref_lse.data<double>()[e]);
      }
    }
  }
}

TEST(PerSequenceAlignment, DiffersFromPaddedAlignment) {
  // The rule must actually move the diagonal: the padded rule hides keys
  // 3..6 of a length-3 sequence for nobody (they are padding) but lets query
  // 0 of 2 see only keys <= 5, so with kv_lens = 3 both agree; a window makes
  // them differ.
  Tensor q = Random({1, 1, 2, 4}, 5), k = Random({1, 1, 7, 4}, 6), v = Random({1, 1, 7, 4}, 7);
  Tensor kl = Zeros(DType::kI64, {1});
  kl.data<int64_t>()[0] = 3;
  SdpaOptions opt;
  opt.kv_lens = kl.view();
  opt.window_left = 1;
  opt.window_right = 0;
  Tensor a = Zeros(DType::kF64, {1, 1, 2, 4}), b = Zeros(DType::kF64, {1, 1, 2, 4});
  ASSERT_TRUE(reference::Sdpa(a.view(), TensorView(), q.view(), k.view(), v.view(), opt).ok());
  opt.kv_align = KvAlign::kPerSequence;
  ASSERT_TRUE(reference::Sdpa(b.view(), TensorView(), q.view(), k.view(), v.view(), opt).ok());
  // Padded: row i sees keys d-1..d with d = i + 5, all padding: dead rows.
  for (int64_t e = 0; e < 8; ++e) EXPECT_EQ(a.data<double>()[e], 0.0);
  // Per sequence: d = i + 1, row 0 sees keys 0..1, row 1 keys 1..2.
  EXPECT_NE(b.data<double>()[0], 0.0);
}

TEST(AlibiPerBatch, EqualsPerBatchRunsWithHeadSlopes) {
  const int64_t B = 2, H = 3, Lq = 9, Lk = 13, D = 8;
  Tensor q = Random({B, H, Lq, D}, 11), k = Random({B, H, Lk, D}, 12),
         v = Random({B, H, Lk, D}, 13);
  Tensor s = Random({B, H}, 14, 0.3);
  SdpaOptions opt;
  opt.causal = Causal::kBottomRight;
  opt.alibi_slopes = s.view();
  Tensor out = Zeros(DType::kF64, {B, H, Lq, D});
  ASSERT_TRUE(reference::Sdpa(out.view(), TensorView(), q.view(), k.view(), v.view(), opt).ok());
  Tensor fast = Zeros(DType::kF32, {B, H, Lq, D});
  ASSERT_TRUE(Attention(fast.view(), TensorView(), q.view(), k.view(), v.view(), opt).ok());
  EXPECT_LT(MaxAbsDiff(fast.view(), out.view()), 2e-6);
  for (int64_t b = 0; b < B; ++b) {
    Tensor row = Zeros(DType::kF32, {H});
    for (int64_t h = 0; h < H; ++h) row.data<float>()[h] = s.data<float>()[b * H + h];
    SdpaOptions ob = opt;
    ob.alibi_slopes = row.view();
    Tensor qb = SliceBatch(q.view(), b), kb = SliceBatch(k.view(), b), vb = SliceBatch(v.view(), b);
    Tensor ref = Zeros(DType::kF64, {1, H, Lq, D});
    ASSERT_TRUE(
        reference::Sdpa(ref.view(), TensorView(), qb.view(), kb.view(), vb.view(), ob).ok());
    for (int64_t e = 0; e < H * Lq * D; ++e) {
      EXPECT_EQ(out.data<double>()[b * H * Lq * D + e], ref.data<double>()[e]);
    }
  }
}

TEST(Softcap, FastKernelsMatchTheReferenceAndAHugeCapIsTheIdentity) {
  const int64_t B = 1, H = 4, Hkv = 2, D = 64;
  for (auto [Lq, Lk] : {std::pair<int64_t, int64_t>{1, 300}, {3, 70}, {97, 150}}) {
    Tensor q = Random({B, H, Lq, D}, 21, 3.0), k = Random({B, Hkv, Lk, D}, 22),
           v = Random({B, Hkv, Lk, D}, 23);
    SdpaOptions opt;
    opt.causal = Causal::kBottomRight;
    opt.softcap = 5.0;
    Tensor ref = Zeros(DType::kF64, {B, H, Lq, D}), ref_lse = Zeros(DType::kF64, {B, H, Lq});
    ASSERT_TRUE(
        reference::Sdpa(ref.view(), ref_lse.view(), q.view(), k.view(), v.view(), opt).ok());
    Tensor fast = Zeros(DType::kF32, {B, H, Lq, D}), lse = Zeros(DType::kF32, {B, H, Lq});
    KernelChoice ch;
    ASSERT_TRUE(
        Attention(fast.view(), lse.view(), q.view(), k.view(), v.view(), opt, {}, &ch).ok());
    EXPECT_LT(MaxAbsDiff(fast.view(), ref.view()), 5e-6) << ch.ToString();
    EXPECT_LT(MaxAbsDiff(lse.view(), ref_lse.view()), 5e-6) << ch.ToString();
    Tensor plain = Zeros(DType::kF64, {B, H, Lq, D}), huge = Zeros(DType::kF64, {B, H, Lq, D});
    opt.softcap = 0.0;
    ASSERT_TRUE(
        reference::Sdpa(plain.view(), TensorView(), q.view(), k.view(), v.view(), opt).ok());
    opt.softcap = 1e7;
    ASSERT_TRUE(reference::Sdpa(huge.view(), TensorView(), q.view(), k.view(), v.view(), opt).ok());
    EXPECT_LT(MaxAbsDiff(plain.view(), huge.view()), 1e-9);
    EXPECT_GT(MaxAbsDiff(plain.view(), ref.view()), 1e-3);  // the cap of 5 matters here
  }
}

TEST(Softcap, InvalidValuesAreErrors) {
  Tensor q = Random({1, 1, 2, 4}, 1), out = Zeros(DType::kF32, {1, 1, 2, 4});
  for (double bad : {-1.0, std::nan(""), static_cast<double>(INFINITY)}) {
    SdpaOptions opt;
    opt.softcap = bad;
    const Status st = Attention(out.view(), TensorView(), q.view(), q.view(), q.view(), opt);
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("softcap must be finite and >= 0"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------

struct Packed {
  Tensor q, k, v, cu_q, cu_k;
  std::vector<int64_t> lq, lk;
};

Packed MakePacked(const std::vector<int64_t>& lq, const std::vector<int64_t>& lk, int64_t H,
                  int64_t Hkv, int64_t D, uint64_t seed, DType kv = DType::kF32) {
  Packed p;
  p.lq = lq;
  p.lk = lk;
  int64_t tq = 0, tk = 0;
  for (size_t b = 0; b < lq.size(); ++b) {
    tq += lq[b];
    tk += lk[b];
  }
  p.q = Random({tq, H, D}, seed);
  p.k = Random({tk, Hkv, D}, seed + 1, 1.0, kv);
  p.v = Random({tk, Hkv, D}, seed + 2, 1.0, kv);
  p.cu_q = Zeros(DType::kI32, {static_cast<int64_t>(lq.size()) + 1});
  p.cu_k = Zeros(DType::kI64, {static_cast<int64_t>(lq.size()) + 1});
  for (size_t b = 0; b < lq.size(); ++b) {
    p.cu_q.data<int32_t>()[b + 1] = p.cu_q.data<int32_t>()[b] + static_cast<int32_t>(lq[b]);
    p.cu_k.data<int64_t>()[b + 1] = p.cu_k.data<int64_t>()[b] + lk[b];
  }
  return p;
}

// Sequence b of a packed [T, heads, dim] tensor as a contiguous [1, heads, L, dim] F64 copy.
Tensor Unpack(const TensorView& t, int64_t t0, int64_t len) {
  Tensor r = Zeros(DType::kF64, {1, t.shape[1], len, t.shape[2]});
  for (int64_t j = 0; j < len; ++j)
    for (int64_t h = 0; h < t.shape[1]; ++h)
      for (int64_t c = 0; c < t.shape[2]; ++c)
        r.view().store(r.view().offset(0, h, j, c),
                       t.load((t0 + j) * t.strides[0] + h * t.strides[1] + c * t.strides[2]));
  return r;
}

TEST(Varlen, ForwardAndBackwardMatchPerSequenceReference) {
  const std::vector<int64_t> lq = {5, 1, 0, 70, 9}, lk = {5, 33, 4, 80, 3};
  const int64_t H = 4, Hkv = 2, D = 16;
  for (DType kv : {DType::kF32, DType::kF16}) {
    Packed p = MakePacked(lq, lk, H, Hkv, D, 31, kv);
    const int64_t tq = p.q.view().shape[0], tk = p.k.view().shape[0];
    SdpaOptions opt;
    opt.causal = Causal::kBottomRight;
    opt.window_left = 20;
    opt.softcap = 8.0;
    Tensor slopes = Random({5, H}, 35, 0.2);
    opt.alibi_slopes = slopes.view();
    Tensor out = Zeros(DType::kF32, {tq, H, D});
    Tensor lse_ht = Zeros(DType::kF32, {H, tq});  // FlashAttention's [H, Tq], viewed as [Tq, H]
    TensorView lse = lse_ht.view().Permuted({1, 0});
    ASSERT_TRUE(AttentionVarlen(out.view(), lse, p.q.view(), p.k.view(), p.v.view(), p.cu_q.view(),
                                p.cu_k.view(), opt)
                    .ok());
    Tensor dout = Random({tq, H, D}, 36);
    Tensor dq = Zeros(DType::kF32, {tq, H, D}), dk = Zeros(DType::kF32, {tk, Hkv, D}),
           dv = Zeros(DType::kF32, {tk, Hkv, D});
    ASSERT_TRUE(AttentionVarlenBackward(dq.view(), dk.view(), dv.view(), dout.view(), TensorView(),
                                        p.q.view(), p.k.view(), p.v.view(), out.view(), lse,
                                        p.cu_q.view(), p.cu_k.view(), opt)
                    .ok());
    int64_t q0 = 0, k0 = 0;
    for (size_t b = 0; b < lq.size(); ++b) {
      SCOPED_TRACE("sequence " + std::to_string(b));
      Tensor qb = Unpack(p.q.view(), q0, lq[b]), kb = Unpack(p.k.view(), k0, lk[b]),
             vb = Unpack(p.v.view(), k0, lk[b]), gb = Unpack(dout.view(), q0, lq[b]);
      Tensor row = Zeros(DType::kF32, {H});
      for (int64_t h = 0; h < H; ++h) row.data<float>()[h] = slopes.data<float>()[b * H + h];
      SdpaOptions ob = opt;
      ob.alibi_slopes = row.view();
      Tensor ref = Zeros(DType::kF64, {1, H, lq[b], D}), rl = Zeros(DType::kF64, {1, H, lq[b]});
      ASSERT_TRUE(reference::Sdpa(ref.view(), rl.view(), qb.view(), kb.view(), vb.view(), ob).ok());
      Tensor rdq = Zeros(DType::kF64, {1, H, lq[b], D}),
             rdk = Zeros(DType::kF64, {1, Hkv, lk[b], D}),
             rdv = Zeros(DType::kF64, {1, Hkv, lk[b], D});
      ASSERT_TRUE(reference::SdpaBackward(rdq.view(), rdk.view(), rdv.view(), gb.view(),
                                          TensorView(), qb.view(), kb.view(), vb.view(), ob)
                      .ok());
      Tensor got = Unpack(out.view(), q0, lq[b]);
      EXPECT_LT(MaxAbsDiff(got.view(), ref.view()), 5e-6);
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t i = 0; i < lq[b]; ++i) {
          const double r = testing::At(rl, 0, h, i), g = lse.load(lse.offset(q0 + i, h));
          if (std::isinf(r))
            EXPECT_EQ(g, r);
          else
            EXPECT_NEAR(g, r, 5e-6);
        }
      }
      EXPECT_LT(MaxAbsDiff(Unpack(dq.view(), q0, lq[b]).view(), rdq.view()), 2e-5);
      EXPECT_LT(MaxAbsDiff(Unpack(dk.view(), k0, lk[b]).view(), rdk.view()), 2e-5);
      EXPECT_LT(MaxAbsDiff(Unpack(dv.view(), k0, lk[b]).view(), rdv.view()), 2e-5);
      q0 += lq[b];
      k0 += lk[b];
    }
  }
}

TEST(Varlen, BadCuSeqlensAreErrors) {
  Packed p = MakePacked({3, 4}, {5, 6}, 2, 2, 8, 41);
  Tensor out = Zeros(DType::kF32, {7, 2, 8});
  p.cu_q.data<int32_t>()[1] = 5;  // 0, 5, 7: fine; make it decrease
  p.cu_q.data<int32_t>()[1] = 8;
  Status st = AttentionVarlen(out.view(), TensorView(), p.q.view(), p.k.view(), p.v.view(),
                              p.cu_q.view(), p.cu_k.view(), {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("attention_varlen: cu_seqlens_q[1] = 8"), std::string::npos)
      << st.message();
  p.cu_q.data<int32_t>()[1] = 3;
  p.cu_k.data<int64_t>()[2] = 10;
  st = AttentionVarlen(out.view(), TensorView(), p.q.view(), p.k.view(), p.v.view(), p.cu_q.view(),
                       p.cu_k.view(), {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cu_seqlens_k ends at 10"), std::string::npos) << st.message();
}

TEST(Paged, MatchesTheReferenceOnGatheredKeys) {
  const int64_t B = 3, H = 4, Hkv = 2, Lq = 3, D = 16, page = 4, nblocks = 12, maxb = 5;
  const int64_t lens[B] = {17, 3, 0};
  for (DType kv : {DType::kF32, DType::kBF16}) {
    Tensor q = Random({B, H, Lq, D}, 51);
    Tensor kc = Random({nblocks, page, Hkv, D}, 52, 1.0, kv),
           vc = Random({nblocks, page, Hkv, D}, 53, 1.0, kv);
    Tensor bt = Zeros(DType::kI32, {B, maxb});
    std::mt19937 g(7);
    std::vector<int32_t> perm(nblocks);
    for (int32_t i = 0; i < nblocks; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), g);
    for (int64_t e = 0; e < B * maxb; ++e) bt.data<int32_t>()[e] = perm[e % nblocks];
    Tensor sl = Zeros(DType::kI32, {B});
    for (int64_t b = 0; b < B; ++b) sl.data<int32_t>()[b] = static_cast<int32_t>(lens[b]);
    SdpaOptions opt;
    opt.causal = Causal::kBottomRight;
    Tensor out = Zeros(DType::kF32, {B, H, Lq, D}), lse = Zeros(DType::kF32, {B, H, Lq});
    ASSERT_TRUE(AttentionPaged(out.view(), lse.view(), q.view(), kc.view(), vc.view(), bt.view(),
                               sl.view(), opt)
                    .ok());
    for (int64_t b = 0; b < B; ++b) {
      Tensor kb = Zeros(DType::kF64, {1, Hkv, lens[b], D}),
             vb = Zeros(DType::kF64, {1, Hkv, lens[b], D});
      for (int64_t j = 0; j < lens[b]; ++j) {
        const int64_t blk = bt.data<int32_t>()[b * maxb + j / page];
        for (int64_t h = 0; h < Hkv; ++h)
          for (int64_t c = 0; c < D; ++c) {
            kb.view().store(kb.view().offset(0, h, j, c),
                            kc.view().load(kc.view().offset(blk, j % page, h, c)));
            vb.view().store(vb.view().offset(0, h, j, c),
                            vc.view().load(vc.view().offset(blk, j % page, h, c)));
          }
      }
      Tensor qb = SliceBatch(q.view(), b);
      Tensor ref = Zeros(DType::kF64, {1, H, Lq, D});
      ASSERT_TRUE(
          reference::Sdpa(ref.view(), TensorView(), qb.view(), kb.view(), vb.view(), opt).ok());
      double err = 0;
      for (int64_t e = 0; e < H * Lq * D; ++e) {
        err =
            std::max(err, std::fabs(out.data<float>()[b * H * Lq * D + e] - ref.data<double>()[e]));
      }
      EXPECT_LT(err, 2e-6) << "batch " << b;
    }
  }
}

TEST(Paged, BadBlockTableIsAnError) {
  Tensor q = Random({1, 1, 1, 4}, 1), kc = Random({2, 4, 1, 4}, 2), vc = Random({2, 4, 1, 4}, 3);
  Tensor bt = Zeros(DType::kI32, {1, 2});
  bt.data<int32_t>()[1] = 7;
  Tensor sl = Zeros(DType::kI32, {1});
  sl.data<int32_t>()[0] = 6;
  Tensor out = Zeros(DType::kF32, {1, 1, 1, 4});
  const Status st = AttentionPaged(out.view(), TensorView(), q.view(), kc.view(), vc.view(),
                                   bt.view(), sl.view(), {});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(
      st.message().find("attention_paged: block_table[0][1] = 7 is outside [0, num_blocks=2)"),
      std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace attnflow
