// ops/qmatmul.cc — ops::QMatMul: fused-dequant GEMV and packed GEMM for GGUF
// weights (see attnflow/ops.h). Compiled once per Highway target through
// hwy/foreach_target.h; the best target is picked at the first call.
//
// Invariants: every task (a GEMM row tile, or a 16-row decode chunk claimed
// exactly once through a per-worker range, see MatVecStealing) owns a
// disjoint range of output rows and writes each of its outputs exactly once
// with a fixed summation order, so the result is independent of which worker
// runs it and of the number of workers. Scratch
// is indexed by the worker id (only used as working memory, never read
// across tasks).
#include "core/hwy_targets.h"
#include "core/chunk_range.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/qmatmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>

#include "hwy/highway.h"
#include "attnflow/ops.h"
#include "ops/lane_sum_avx512-inl.h"
#include "ops/q4k_scales.h"

ATTNFLOW_HWY_NAMESPACE_BEGIN(ops)

// Packed GEMM register tile: kGr weight rows x kGv vectors of tokens.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kGr = 6;
#else
constexpr int kGr = 3;
#endif
constexpr int kGv = 4;
constexpr int kTaskRowTiles = 8;  // rows per GEMM task = kTaskRowTiles * kGr

HWY_INLINE float HalfToF32(const uint8_t* p) {
  const hn::CappedTag<hwy::float16_t, 1> dh;
  const hn::Rebind<float, decltype(dh)> df1;
  return hn::GetLane(hn::PromoteTo(df1, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p))));
}

// Lane group g (elements [g*L, g*L+L) of a 32-element block) of 4-bit
// quants: element e < 16 is the low nibble of qs[e], e >= 16 the high nibble
// of qs[e-16]. Returns q as float (0..15).
HWY_INLINE VF NibbleGroup(DF df, const uint8_t* qs, size_t g) {
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  const size_t e0 = g * hn::Lanes(df);
  auto v = hn::LoadU(du8, qs + (e0 & 15));
  v = e0 >= 16 ? hn::ShiftRight<4>(v) : hn::And(v, hn::Set(du8, uint8_t{0x0F}));
  return hn::ConvertTo(df, hn::PromoteTo(di32, v));
}

HWY_INLINE VF Int8Group(DF df, const uint8_t* qs, size_t g) {
  const hn::Rebind<int8_t, DF> di8;
  const hn::Rebind<int32_t, DF> di32;
  const auto v = hn::LoadU(di8, reinterpret_cast<const int8_t*>(qs) + g * hn::Lanes(df));
  return hn::ConvertTo(df, hn::PromoteTo(di32, v));
}

template <GgmlType kType>
constexpr int64_t BlockBytes() {
  return kType == GgmlType::kQ4_1 ? 20 : kType == GgmlType::kQ4_0 ? 18 : 34;
}

// The G = 32 / L lane groups of one block's dequantised weights. On 16-lane
// targets the 16 quant bytes of a Q4 block are widened to i32 once and split
// into low / high nibbles there (3 ops for 32 weights).
template <GgmlType kType>
HWY_INLINE void BlockWeights(DF df, const uint8_t* blk, VF* w) {
  const size_t G = 32 / hn::Lanes(df);
  if constexpr (kType == GgmlType::kQ8_0) {
    const VF d = hn::Set(df, HalfToF32(blk));
    for (size_t g = 0; g < G; ++g) w[g] = hn::Mul(d, Int8Group(df, blk + 2, g));
  } else {
    constexpr int kQs = kType == GgmlType::kQ4_1 ? 4 : 2;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    if constexpr (kType == GgmlType::kQ4_1) {
      // 16-entry table lut[q] = fma(d, q, m) (exactly gguf-py's values), then
      // vpermps picks w = lut[q] using the low 4 bits of each index: the low
      // nibble needs no mask, the high one a shift. d and m (adjacent F16)
      // are broadcast as one 32-bit pair, converted once ([d,m,d,m,...]) and
      // spread with in-lane permutes: 4 instructions instead of 6 (the block
      // scales were ~1/3 of the instructions of this loop).
      const hn::Rebind<uint8_t, DF> du8;
      const hn::Rebind<int32_t, DF> di32;
      const auto q = hn::PromoteTo(di32, hn::LoadU(du8, blk + kQs));
      int32_t dm_bits;
      std::memcpy(&dm_bits, blk, 4);
      const __m512 dm = _mm512_cvtph_ps(_mm256_set1_epi32(dm_bits));
      const VF lut = hn::MulAdd(VF{_mm512_permute_ps(dm, 0x00)}, hn::Iota(df, 0.0f),
                                VF{_mm512_permute_ps(dm, 0x55)});
      w[0] = VF{_mm512_permutexvar_ps(q.raw, lut.raw)};
      w[1] = VF{_mm512_permutexvar_ps(hn::ShiftRight<4>(q).raw, lut.raw)};
      return;
    }
#endif
    VF d, m;
    if constexpr (kType == GgmlType::kQ4_1 && hn::MaxLanes(DF()) >= 2) {
      // d and m are adjacent halves: one conversion for both (needs a
      // 2-lane vector; the scalar target converts them one by one).
      const hn::CappedTag<hwy::float16_t, 2> dh2;
      const hn::Rebind<float, decltype(dh2)> df2;
      const auto dm = hn::PromoteTo(df2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(blk)));
      d = hn::Set(df, hn::GetLane(dm));
      m = hn::Set(df, hn::ExtractLane(dm, 1));
    } else {
      d = hn::Set(df, HalfToF32(blk));
      m = kType == GgmlType::kQ4_1 ? hn::Set(df, HalfToF32(blk + 2)) : hn::Set(df, -8.0f);
    }
    if constexpr (hn::MaxLanes(DF()) == 16) {
      const hn::Rebind<uint8_t, DF> du8;
      const hn::Rebind<int32_t, DF> di32;
      const auto q = hn::PromoteTo(di32, hn::LoadU(du8, blk + kQs));
      const auto lo = hn::ConvertTo(df, hn::And(q, hn::Set(di32, 15)));
      const auto hi = hn::ConvertTo(df, hn::ShiftRight<4>(q));
      if constexpr (kType == GgmlType::kQ4_1) {
        w[0] = hn::MulAdd(d, lo, m);  // d*q exact: one rounding, = gguf-py
        w[1] = hn::MulAdd(d, hi, m);
      } else {
        w[0] = hn::Mul(d, hn::Add(lo, m));  // d*(q-8), exact
        w[1] = hn::Mul(d, hn::Add(hi, m));
      }
    } else {
      for (size_t g = 0; g < G; ++g) {
        const VF q = NibbleGroup(df, blk + kQs, g);
        w[g] = kType == GgmlType::kQ4_1 ? hn::MulAdd(d, q, m) : hn::Mul(d, hn::Add(q, m));
      }
    }
  }
}

// A 32-element sub-block is G = 32 / L vectors; kMaxG bounds G for arrays.
constexpr size_t kMaxG = 32 / hn::MaxLanes(DF()) > 0 ? 32 / hn::MaxLanes(DF()) : 1;

// The lane groups of one 32-element sub-block: acc[g] += w[g] · x[g·L ..].
HWY_INLINE void MulAddSubBlock(VF* acc, const VF* wv, const float* HWY_RESTRICT xb, size_t G,
                               size_t L) {
  const DF df;
  HWY_UNROLL(8)
  for (size_t g = 0; g < G; ++g) acc[g] = hn::MulAdd(wv[g], hn::LoadU(df, xb + g * L), acc[g]);
}

// The G vectors of one dequantised 32-element sub-block to dst[0..32).
HWY_INLINE void StoreSubBlock(const VF* wv, float* HWY_RESTRICT dst) {
  const DF df;
  const size_t L = hn::Lanes(df);
  for (size_t g = 0; g < 32 / L; ++g) hn::StoreU(wv[g], df, dst + g * L);
}

// The G accumulators folded pairwise by halves into one vector; its lanes
// are then summed by RowSum / DotRows (the fixed reduction of a row dot).
HWY_INLINE VF FoldGroups(VF* acc, size_t G) {
  for (size_t n = G; n > 1; n /= 2) {
    for (size_t g = 0; g < n / 2; ++g) acc[g] = hn::Add(acc[g], acc[g + n / 2]);
  }
  return acc[0];
}

// The lanes of a folded row vector summed: SumOfLanes' tree, which on
// AVX-512 is LaneSum's (ops/lane_sum_avx512-inl.h).
HWY_INLINE float RowSum(VF v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return LaneSum(v.raw);
#else
  return hn::GetLane(hn::SumOfLanes(DF(), v));
#endif
}

// y[j] = the dot of row r0 + j for nr rows, one row after the other; Dot
// returns a row's folded vector. On AVX-512, 16 rows' lane sums are done at
// once (LaneSum16: the same additions as RowSum, so the same bits) instead of
// a chain of ~8 dependent ops per row.
template <VF (*Dot)(const uint8_t*, int64_t, const float*)>
void DotRows(const QMatrix& w, int64_t r0, int64_t nr, const float* x, float* y) {
  const uint8_t* row = w.data + r0 * w.row_bytes;
  int64_t j = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  for (; j + 16 <= nr; j += 16) {
    __m512 v[16];
    for (int i = 0; i < 16; ++i, row += w.row_bytes) v[i] = Dot(row, w.cols, x).raw;
    LaneSum16(v, y + j);
  }
#endif
  for (; j < nr; ++j, row += w.row_bytes) y[j] = RowSum(Dot(row, w.cols, x));
}

// y = dot(W[r], x) for one row of a quantised type (cols % 32 == 0). One
// vector accumulator per lane group g (fixed order: block by block, then the
// G accumulators summed pairwise and reduced). Rows are processed one after
// the other so a task reads its weights as one sequential stream (short
// interleaved per-row streams defeat the hardware prefetcher: measured 30%
// slower).
template <GgmlType kType>
HWY_INLINE VF DotRowQ(const uint8_t* HWY_RESTRICT row, int64_t cols, const float* HWY_RESTRICT x) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const size_t G = 32 / L;
  const int64_t nb = cols / 32;
  constexpr int64_t kBB = BlockBytes<kType>();
  VF acc[kMaxG];
  HWY_UNROLL(8)
  for (size_t g = 0; g < G; ++g) acc[g] = hn::Zero(df);
  for (int64_t b = 0; b < nb; ++b) {
    VF wv[kMaxG];
    BlockWeights<kType>(df, row + b * kBB, wv);
    MulAddSubBlock(acc, wv, x + b * 32, G, L);
  }
  return FoldGroups(acc, G);
}

// ---- Q5_0 / Q5_1 / Q4_K / Q5_K / Q6_K -----------------------------------------
//
// 32-element sub-block `sub` of a block of kType as G = 32 / L vectors, with
// exactly DequantizeRow's values (io/gguf_quants.cc): the scale products d*sc
// and dmin*m are formed in scalar fp32 as there, then d*q is exact, so the one
// rounding of the final add/sub is the same fused or not. Q6_K products
// (d*sc)*q round once, as there.
template <GgmlType kType>
constexpr int64_t KBlockElems() {
  return kType == GgmlType::kQ5_0 || kType == GgmlType::kQ5_1 ? 32 : 256;
}
template <GgmlType kType>
constexpr int64_t KBlockBytes() {
  return kType == GgmlType::kQ5_0 ? 22 : kType == GgmlType::kQ5_1 ? 24 : kType == GgmlType::kQ4_K ? 144
         : kType == GgmlType::kQ5_K ? 176 : 210;
}

// u8 lanes [p, p+L) widened to i32.
HWY_INLINE hn::Vec<hn::Rebind<int32_t, DF>> BytesI32(const uint8_t* p) {
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  return hn::PromoteTo(di32, hn::LoadU(du8, p));
}

template <GgmlType kType>
HWY_INLINE void SubBlockWeights(DF df, const uint8_t* blk, int sub, VF* w) {
  const hn::Rebind<int32_t, DF> di32;
  const hn::Rebind<uint32_t, DF> du32;
  const size_t L = hn::Lanes(df);
  const size_t G = 32 / L;
  if constexpr (kType == GgmlType::kQ5_0 || kType == GgmlType::kQ5_1) {
    constexpr bool kAffine = kType == GgmlType::kQ5_1;
    const float d = HalfToF32(blk);
    const VF vd = hn::Set(df, d);
    const VF vm = hn::Set(df, kAffine ? HalfToF32(blk + 2) : -16.0f);
    uint32_t qh;
    std::memcpy(&qh, blk + (kAffine ? 4 : 2), 4);
    const uint8_t* qs = blk + (kAffine ? 8 : 6);
    const auto vqh = hn::Set(du32, qh);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    {
      // 32-entry table t[q] = d*(q-16) (Q5_0) or fma(d, q, m) (Q5_1) -- the
      // same values as below -- in two registers; the 5th bits come straight
      // from qh as lane masks (set bit 4 of the index), vpermt2ps looks up.
      const auto q = BytesI32(qs);
      const __m512i sixteen = _mm512_set1_epi32(16);
      __m512i lo = _mm512_and_si512(q.raw, _mm512_set1_epi32(15));
      __m512i hi = _mm512_srli_epi32(q.raw, 4);
      lo = _mm512_mask_or_epi32(lo, static_cast<__mmask16>(qh & 0xFFFFu), lo, sixteen);
      hi = _mm512_mask_or_epi32(hi, static_cast<__mmask16>(qh >> 16), hi, sixteen);
      const VF iota = hn::Iota(df, 0.0f);
      const VF t0 = kAffine ? hn::MulAdd(vd, iota, vm) : hn::Mul(vd, hn::Add(iota, vm));
      const VF t1 = kAffine ? hn::MulAdd(vd, hn::Add(iota, hn::Set(df, 16.0f)), vm) : hn::Mul(vd, iota);
      w[0] = VF{_mm512_permutex2var_ps(t0.raw, lo, t1.raw)};
      w[1] = VF{_mm512_permutex2var_ps(t0.raw, hi, t1.raw)};
      return;
    }
#endif
    if constexpr (hn::MaxLanes(DF()) == 16) {
      // One 16-byte load for both halves (as BlockWeights does for Q4).
      const auto q = BytesI32(qs);
      const auto iota = hn::Iota(du32, 0u);
      const auto one = hn::Set(du32, 1u);
      const auto hb0 = hn::BitCast(di32, hn::And(hn::Shr(vqh, iota), one));
      const auto hb1 = hn::BitCast(di32, hn::And(hn::Shr(hn::Set(du32, qh >> 16), iota), one));
      const VF q0 = hn::ConvertTo(df, hn::Or(hn::And(q, hn::Set(di32, 15)), hn::ShiftLeft<4>(hb0)));
      const VF q1 = hn::ConvertTo(df, hn::Or(hn::ShiftRight<4>(q), hn::ShiftLeft<4>(hb1)));
      w[0] = kAffine ? hn::MulAdd(vd, q0, vm) : hn::Mul(vd, hn::Add(q0, vm));
      w[1] = kAffine ? hn::MulAdd(vd, q1, vm) : hn::Mul(vd, hn::Add(q1, vm));
      return;
    }
    for (size_t g = 0; g < G; ++g) {
      const size_t e0 = g * L;
      auto q = BytesI32(qs + (e0 & 15));
      q = e0 >= 16 ? hn::ShiftRight<4>(q) : hn::And(q, hn::Set(di32, 15));
      const auto hb = hn::And(hn::Shr(vqh, hn::Iota(du32, static_cast<uint32_t>(e0))), hn::Set(du32, 1u));
      q = hn::Or(q, hn::ShiftLeft<4>(hn::BitCast(di32, hb)));
      const VF qf = hn::ConvertTo(df, q);
      w[g] = kAffine ? hn::MulAdd(vd, qf, vm) : hn::Mul(vd, hn::Add(qf, vm));
    }
  } else if constexpr (kType == GgmlType::kQ4_K || kType == GgmlType::kQ5_K) {
    constexpr bool kFive = kType == GgmlType::kQ5_K;
    const uint8_t* sc = blk + 4;
    int scv, mv;
    if (sub < 4) {
      scv = sc[sub] & 63;
      mv = sc[sub + 4] & 63;
    } else {
      scv = (sc[sub + 4] & 0xF) | ((sc[sub - 4] >> 6) << 4);
      mv = (sc[sub + 4] >> 4) | ((sc[sub] >> 6) << 4);
    }
    const VF ds = hn::Set(df, HalfToF32(blk) * static_cast<float>(scv));
    const VF ms = hn::Set(df, HalfToF32(blk + 2) * static_cast<float>(mv));
    const uint8_t* qs = blk + (kFive ? 48 : 16) + 32 * (sub / 2);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    {
      // Table t[q] = ds*q - ms (the values below: ds*q is exact) for the 16
      // (Q4_K) or 32 (Q5_K) quant levels; vperm(t2)ps reads only the low 4
      // (5) index bits, so the Q4_K low nibble needs no mask.
      const VF iota = hn::Iota(df, 0.0f);
      const VF t0 = hn::Sub(hn::Mul(ds, iota), ms);
      for (size_t g = 0; g < G; ++g) {
        auto q = BytesI32(qs + g * L);
        if constexpr (kFive) {
          const VF t1 = hn::Sub(hn::Mul(ds, hn::Add(iota, hn::Set(df, 16.0f))), ms);
          q = (sub & 1) ? hn::ShiftRight<4>(q) : hn::And(q, hn::Set(di32, 15));
          const auto h = hn::ShiftLeft<4>(hn::ShiftRightSame(BytesI32(blk + 16 + g * L), sub));
          w[g] = VF{_mm512_permutex2var_ps(t0.raw, hn::Or(q, h).raw, t1.raw)};
        } else {
          if (sub & 1) q = hn::ShiftRight<4>(q);
          w[g] = VF{_mm512_permutexvar_ps(q.raw, t0.raw)};
        }
      }
      return;
    }
#endif
    for (size_t g = 0; g < G; ++g) {
      auto q = BytesI32(qs + g * L);
      q = (sub & 1) ? hn::ShiftRight<4>(q) : hn::And(q, hn::Set(di32, 15));
      if constexpr (kFive) {
        const auto h = BytesI32(blk + 16 + g * L);
        q = hn::Or(q, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, sub), hn::Set(di32, 1))));
      }
      w[g] = hn::Sub(hn::Mul(ds, hn::ConvertTo(df, q)), ms);
    }
  } else {  // Q6_K: sub = 4 * half + k
    const int hf = sub / 4, k = sub % 4;
    const uint8_t* ql = blk + 64 * hf + 32 * (k & 1);
    const uint8_t* qh = blk + 128 + 32 * hf;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * hf + 2 * k);
    const float d = HalfToF32(blk + 208);
    for (size_t g = 0; g < G; ++g) {
      auto lo = BytesI32(ql + g * L);
      lo = (k >> 1) ? hn::ShiftRight<4>(lo) : hn::And(lo, hn::Set(di32, 15));
      const auto hi = hn::And(hn::ShiftRightSame(BytesI32(qh + g * L), 2 * k), hn::Set(di32, 3));
      const auto q = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), hn::Set(di32, 32));
      const VF ds = hn::Set(df, d * static_cast<float>(sc[(g * L) / 16]));
      w[g] = hn::Mul(ds, hn::ConvertTo(df, q));
    }
  }
}

// y = dot(W[r], x) for Q5_0/Q5_1/Q4_K/Q5_K/Q6_K rows: one vector accumulator
// per lane group, blocks and sub-blocks in order, then DotRowQ's
// fold (the lanes are summed by DotRows).
template <GgmlType kType>
HWY_INLINE VF DotRowK(const uint8_t* HWY_RESTRICT row, int64_t cols, const float* HWY_RESTRICT x) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const size_t G = 32 / L;
  constexpr int64_t kBE = KBlockElems<kType>();
  constexpr int kSubs = static_cast<int>(kBE / 32);
  const int64_t nb = cols / kBE;
  VF acc[kMaxG];
  for (size_t g = 0; g < G; ++g) acc[g] = hn::Zero(df);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * KBlockBytes<kType>();
    HWY_UNROLL(8)
    for (int s = 0; s < kSubs; ++s) {
      VF wv[kMaxG];
      SubBlockWeights<kType>(df, blk, s, wv);
      MulAddSubBlock(acc, wv, x + b * kBE + s * 32, G, L);
    }
  }
  return FoldGroups(acc, G);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Q6_K on AVX-512 (16 lanes): the 6-bit quants of one 128-element half block
// are assembled with 512-bit byte ops -- low nibbles of ql, the two qh bits
// of sub-block k (16-bit shifts by 2k, masked per byte), minus 32, as int8 --
// then widened 16 at a time and scaled by d*sc. The weights (d*sc rounded in
// scalar fp32, times an exact integer) and the accumulation order (sub-blocks
// in order, lane groups g = 0, 1, one FMA each) are DotRowK<kQ6_K>'s, so the
// result is the same bit for bit; this only replaces ~11 ops per 16 weights
// of per-lane-group unpacking by ~4.
HWY_INLINE VF DotRowQ6KAvx3(const uint8_t* HWY_RESTRICT row, int64_t cols,
                               const float* HWY_RESTRICT x) {
  const DF df;
  static_assert(hn::MaxLanes(DF()) == 16, "AVX-512 float lanes");
  const int64_t nb = cols / 256;
  VF acc[2] = {hn::Zero(df), hn::Zero(df)};
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3), k32 = _mm512_set1_epi8(32);
  // Per-256-bit-half shift counts: sub-blocks k = 0 | 1 and k = 2 | 3.
  const __m512i sh01 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
  alignas(64) int8_t q[128];
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * 210;
    const float d = HalfToF32(blk + 208);
    for (int hf = 0; hf < 2; ++hf) {
      const __m512i ql = _mm512_loadu_si512(blk + 64 * hf);
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * hf)));
      const __m512i lo = _mm512_and_si512(ql, m4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4);
      const __m512i h01 = _mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m2);
      const __m512i h23 = _mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m2);
      // q[0..64): sub-blocks k = 0, 1; q[64..128): k = 2, 3 (values -32..31).
      _mm512_store_si512(q, _mm512_sub_epi8(_mm512_or_si512(lo, _mm512_slli_epi16(h01, 4)), k32));
      _mm512_store_si512(q + 64, _mm512_sub_epi8(_mm512_or_si512(hi, _mm512_slli_epi16(h23, 4)), k32));
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * hf);
      const float* xb = x + b * 256 + hf * 128;
      HWY_UNROLL(4)
      for (int k = 0; k < 4; ++k) {
        HWY_UNROLL(2)
        for (int g = 0; g < 2; ++g) {
          const __m512i qi = _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(q + 32 * k + 16 * g)));
          const VF w = hn::Mul(hn::Set(df, d * static_cast<float>(sc[2 * k + g])), VF{_mm512_cvtepi32_ps(qi)});
          acc[g] = hn::MulAdd(w, hn::LoadU(df, xb + 32 * k + 16 * g), acc[g]);
        }
      }
    }
  }
  return FoldGroups(acc, 2);
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// Q4_K / Q5_K on AVX-512: the 8 scales and mins of a 256-element block are
// unpacked once (Q4KScalesMins, ops/q4k_scales.h: the same 6-bit values as
// SubBlockWeights' per-sub-block code) and the products d*sc and dmin*m are
// formed for all 8 sub-blocks as one 8-lane fp32 multiply (the same
// single roundings as the scalar products there); sub-block s broadcasts its
// lane. The table t[q] = ds*q - ms, the lookups and the accumulation order
// (sub-blocks in order, lane groups g = 0, 1, one FMA each) are
// DotRowK<kType>'s, so the result is the same bit for bit.
template <bool kFive>
HWY_INLINE VF DotRowQ45KAvx3(const uint8_t* HWY_RESTRICT row, int64_t cols,
                                const float* HWY_RESTRICT x) {
  const DF df;
  static_assert(hn::MaxLanes(DF()) == 16, "AVX-512 float lanes");
  constexpr int64_t kBB = kFive ? 176 : 144;
  const int64_t nb = cols / 256;
  VF acc[2] = {hn::Zero(df), hn::Zero(df)};
  const VF iota = hn::Iota(df, 0.0f);
  const VF iota16 = hn::Add(iota, hn::Set(df, 16.0f));
  const __m512i m4 = _mm512_set1_epi32(15);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kBB;
    uint64_t sc8, m8;
    Q4KScalesMins(blk, &sc8, &m8);
    const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc8))));
    const __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(m8))));
    const __m512 ds8 = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(HalfToF32(blk)), scf));
    const __m512 ms8 = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_set1_ps(HalfToF32(blk + 2)), mf));
    const float* xb = x + b * 256;
    HWY_UNROLL(8)
    for (int sub = 0; sub < 8; ++sub) {
      const __m512i lane = _mm512_set1_epi32(sub);
      const VF ds{_mm512_permutexvar_ps(lane, ds8)};
      const VF ms{_mm512_permutexvar_ps(lane, ms8)};
      const VF t0 = hn::Sub(hn::Mul(ds, iota), ms);
      const VF t1 = kFive ? hn::Sub(hn::Mul(ds, iota16), ms) : t0;  // Q5_K: levels 16-31
      const uint8_t* qs = blk + (kFive ? 48 : 16) + 32 * (sub / 2);
      VF wv[2];
      HWY_UNROLL(2)
      for (int g = 0; g < 2; ++g) {
        __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16 * g)));
        if constexpr (kFive) {
          q = (sub & 1) ? _mm512_srli_epi32(q, 4) : _mm512_and_si512(q, m4);
          const __m512i hb = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 + 16 * g)));
          const __m512i h = _mm512_slli_epi32(_mm512_srli_epi32(hb, sub), 4);
          wv[g] = VF{_mm512_permutex2var_ps(t0.raw, _mm512_or_si512(q, h), t1.raw)};
        } else {
          if (sub & 1) q = _mm512_srli_epi32(q, 4);
          wv[g] = VF{_mm512_permutexvar_ps(q, t0.raw)};
        }
      }
      MulAddSubBlock(acc, wv, xb + 32 * sub, 2, 16);
    }
  }
  return FoldGroups(acc, 2);
}
#endif

template <GgmlType kType>
HWY_INLINE void DequantRowK(const uint8_t* src, int64_t cols, float* HWY_RESTRICT dst) {
  constexpr int64_t kBE = KBlockElems<kType>();
  for (int64_t b = 0; b < cols / kBE; ++b) {
    for (int s = 0; s < static_cast<int>(kBE / 32); ++s) {
      VF wv[kMaxG];
      SubBlockWeights<kType>(DF(), src + b * KBlockBytes<kType>(), s, wv);
      StoreSubBlock(wv, dst + b * kBE + s * 32);
    }
  }
}

// Generic (F32/F16/BF16 or any type): dequantise the row into `tmp`, then a
// lane-group dot with a scalar tail.
void DotRowsGeneric(const QMatrix& w, int64_t r0, int64_t nr, const float* x, float* y,
                    float* tmp) {
  const DF df;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t j = 0; j < nr; ++j) {
    (void)DequantizeRow(tmp, w.data + (r0 + j) * w.row_bytes, w.type, w.cols);
    VF acc = hn::Zero(df);
    int64_t k = 0;
    for (; k + L <= w.cols; k += L) acc = hn::MulAdd(hn::LoadU(df, tmp + k), hn::LoadU(df, x + k), acc);
    float s = hn::GetLane(hn::SumOfLanes(df, acc));
    for (; k < w.cols; ++k) s += tmp[k] * x[k];
    y[j] = s;
  }
}

void DotRowsT(const QMatrix& w, int64_t r0, int64_t nr, const float* x, float* y, float* tmp) {
  switch (w.type) {
    case GgmlType::kQ4_1: return DotRows<DotRowQ<GgmlType::kQ4_1>>(w, r0, nr, x, y);
    case GgmlType::kQ4_0: return DotRows<DotRowQ<GgmlType::kQ4_0>>(w, r0, nr, x, y);
    case GgmlType::kQ8_0: return DotRows<DotRowQ<GgmlType::kQ8_0>>(w, r0, nr, x, y);
    case GgmlType::kQ5_0: return DotRows<DotRowK<GgmlType::kQ5_0>>(w, r0, nr, x, y);
    case GgmlType::kQ5_1: return DotRows<DotRowK<GgmlType::kQ5_1>>(w, r0, nr, x, y);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    case GgmlType::kQ4_K: return DotRows<DotRowQ45KAvx3<false>>(w, r0, nr, x, y);
    case GgmlType::kQ5_K: return DotRows<DotRowQ45KAvx3<true>>(w, r0, nr, x, y);
    case GgmlType::kQ6_K: return DotRows<DotRowQ6KAvx3>(w, r0, nr, x, y);
#else
    case GgmlType::kQ4_K: return DotRows<DotRowK<GgmlType::kQ4_K>>(w, r0, nr, x, y);
    case GgmlType::kQ5_K: return DotRows<DotRowK<GgmlType::kQ5_K>>(w, r0, nr, x, y);
    case GgmlType::kQ6_K: return DotRows<DotRowK<GgmlType::kQ6_K>>(w, r0, nr, x, y);
#endif
    default: return DotRowsGeneric(w, r0, nr, x, y, tmp);
  }
}

// ---- packed GEMM ------------------------------------------------------------

// Vectorised DequantizeRow for the quantised types (same values).
template <GgmlType kType>
HWY_INLINE void DequantRowQ(const uint8_t* src, int64_t cols, float* HWY_RESTRICT dst) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    VF wv[kMaxG];
    BlockWeights<kType>(DF(), src + b * BlockBytes<kType>(), wv);
    StoreSubBlock(wv, dst + b * 32);
  }
}

HWY_INLINE void DequantRowAny(const QMatrix& w, int64_t r, float* dst) {
  const uint8_t* src = w.data + r * w.row_bytes;
  switch (w.type) {
    case GgmlType::kQ4_1: return DequantRowQ<GgmlType::kQ4_1>(src, w.cols, dst);
    case GgmlType::kQ4_0: return DequantRowQ<GgmlType::kQ4_0>(src, w.cols, dst);
    case GgmlType::kQ8_0: return DequantRowQ<GgmlType::kQ8_0>(src, w.cols, dst);
    case GgmlType::kQ5_0: return DequantRowK<GgmlType::kQ5_0>(src, w.cols, dst);
    case GgmlType::kQ5_1: return DequantRowK<GgmlType::kQ5_1>(src, w.cols, dst);
    case GgmlType::kQ4_K: return DequantRowK<GgmlType::kQ4_K>(src, w.cols, dst);
    case GgmlType::kQ5_K: return DequantRowK<GgmlType::kQ5_K>(src, w.cols, dst);
    case GgmlType::kQ6_K: return DequantRowK<GgmlType::kQ6_K>(src, w.cols, dst);
    default: (void)DequantizeRow(dst, src, w.type, w.cols);
  }
}

// Token vectors per packed block for T tokens: as few as cover T, at most
// kGv (so short prompts do not pay for padding).
int64_t TokenVecsT(int64_t T) {
  const int64_t L = static_cast<int64_t>(hn::Lanes(DF()));
  return std::min<int64_t>(kGv, (T + L - 1) / L);
}
int64_t TokenBlockT(int64_t T) { return TokenVecsT(T) * static_cast<int64_t>(hn::Lanes(DF())); }
int64_t TaskRowsT() { return static_cast<int64_t>(kTaskRowTiles * kGr); }

// Packs tokens [blk*TB, blk*TB + TB) of x (rows of K, stride ldx) into
// xp [K][TB], k-major, zero padded past T. TB = TokenBlockT(T).
void PackTokensT(const float* x, int64_t ldx, int64_t T, int64_t K, int64_t blk, float* xp) {
  const int64_t TB = TokenBlockT(T);
  const int64_t t0 = blk * TB;
  const int64_t nt = std::min(TB, T - t0);
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
    const int64_t k1 = std::min(K, k0 + 16);
    for (int64_t t = 0; t < TB; ++t) {
      if (t < nt) {
        const float* xr = x + (t0 + t) * ldx;
        for (int64_t k = k0; k < k1; ++k) xp[k * TB + t] = xr[k];
      } else {
        for (int64_t k = k0; k < k1; ++k) xp[k * TB + t] = 0.0f;
      }
    }
  }
}

// y[t][r] = sum_k w[r][k] * x[t][k] for kR rows (w row-major, stride K) and
// the TB = kV * L tokens of one packed block (nt of them valid). Every output
// is summed in chunks of kGemmKc k's: one scalar fma chain per chunk (a lane
// of an accumulator vector, starting from zero), the chunk sums added in
// order into a running total kept in L1 — whatever kR / kV are. A single
// chain over all K (the former form) accumulated rounding error about K·eps:
// on SmolLM2 prefill its matmuls were 2-4x less accurate than torch's sgemm
// and than the decode path's 32 partial sums (docs/quantize.md, "Logits vs
// transformers"); chunking bounds it by about (kGemmKc + K/kGemmKc)·eps for
// one load/add/store per chunk per accumulator. 128 rather than 32: the same
// logit accuracy on SmolLM2, and prefill CPU time within noise of the single
// chain (32 cost ~8%, 64 ~5%, 128 ~1%, medians of 20 interleaved runs).
constexpr size_t kGemmKc = 128;

template <int kR, int kV>
HWY_INLINE void GemmMicro(const float* HWY_RESTRICT w, size_t K, const float* HWY_RESTRICT xp,
                          float* y, size_t ldy, size_t nt) {
  const DF df;
  const size_t L = hn::Lanes(df);
  const size_t TB = kV * L;
  VF acc[kR][kV];
  HWY_ALIGN float tot[kR][kV * 64];
  for (size_t k0 = 0; k0 == 0 || k0 < K; k0 += kGemmKc) {  // K = 0: zeros
    const size_t k1 = std::min(K, k0 + kGemmKc);
    HWY_UNROLL(8)
    for (int r = 0; r < kR; ++r) {
      HWY_UNROLL(4)
      for (int v = 0; v < kV; ++v) acc[r][v] = hn::Zero(df);
    }
    for (size_t k = k0; k < k1; ++k) {
      const float* xk = xp + k * TB;
      VF xv[kV];
      HWY_UNROLL(4)
      for (int v = 0; v < kV; ++v) xv[v] = hn::Load(df, xk + v * L);
      HWY_UNROLL(8)
      for (int r = 0; r < kR; ++r) {
        const VF wb = hn::Set(df, w[r * K + k]);
        HWY_UNROLL(4)
        for (int v = 0; v < kV; ++v) acc[r][v] = hn::MulAdd(wb, xv[v], acc[r][v]);
      }
    }
    HWY_UNROLL(8)
    for (int r = 0; r < kR; ++r) {
      HWY_UNROLL(4)
      for (int v = 0; v < kV; ++v) {
        float* t = tot[r] + v * L;
        hn::Store(k0 == 0 ? acc[r][v] : hn::Add(hn::Load(df, t), acc[r][v]), df, t);
      }
    }
  }
  // Token by token, so that the kR outputs of a token (adjacent floats of
  // one cache line of y) are written one after the other. Row by row (the
  // former order: the same values) put TB consecutive stores on TB different
  // lines of y, ldy floats apart; on a Zen 5 that store stream was a third
  // of the prefill GEMM's samples, and this order made SmolLM2's 512-token
  // prefill 1.5x faster (1160 -> 1760 tokens/s, 2 threads).
  for (size_t t = 0; t < nt; ++t) {
    HWY_UNROLL(8)
    for (int r = 0; r < kR; ++r) y[t * ldy + r] = tot[r][t];
  }
}

template <int kV>
void GemmBlocks(const float* scratch, int64_t nr, size_t K, const float* xp, int64_t T,
                float* y, int64_t ldy, int64_t r0) {
  const int64_t TB = kV * static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t nblk = (T + TB - 1) / TB;
  for (int64_t b = 0; b < nblk; ++b) {
    const float* xb = xp + b * TB * static_cast<int64_t>(K);
    const size_t nt = static_cast<size_t>(std::min(TB, T - b * TB));
    float* yb = y + b * TB * ldy + r0;
    int64_t j = 0;
    for (; j + kGr <= nr; j += kGr) {
      GemmMicro<kGr, kV>(scratch + j * static_cast<int64_t>(K), K, xb, yb + j, ldy, nt);
    }
    for (; j < nr; ++j) GemmMicro<1, kV>(scratch + j * static_cast<int64_t>(K), K, xb, yb + j, ldy, nt);
  }
}

// Rows [r0, r0+nr) of W times all T tokens (packed by PackTokensT):
// dequantise the rows once into `scratch` [nr][K], then micro tiles.
void GemmRowsT(const QMatrix& w, int64_t r0, int64_t nr, const float* xp, int64_t T,
               float* y, int64_t ldy, float* scratch) {
  const size_t K = static_cast<size_t>(w.cols);
  for (int64_t j = 0; j < nr; ++j) DequantRowAny(w, r0 + j, scratch + j * w.cols);
  switch (TokenVecsT(T)) {
    case 1: return GemmBlocks<1>(scratch, nr, K, xp, T, y, ldy, r0);
    case 2: return GemmBlocks<2>(scratch, nr, K, xp, T, y, ldy, r0);
    case 3: return GemmBlocks<3>(scratch, nr, K, xp, T, y, ldy, r0);
    default: return GemmBlocks<kGv>(scratch, nr, K, xp, T, y, ldy, r0);
  }
}


ATTNFLOW_HWY_NAMESPACE_END()

#if HWY_ONCE
namespace attnflow {
namespace ops {

HWY_EXPORT(DotRowsT);
HWY_EXPORT(GemmRowsT);
HWY_EXPORT(PackTokensT);
HWY_EXPORT(TokenBlockT);
HWY_EXPORT(TaskRowsT);

void QMatVecRows(float* y, const QMatrix& w, int64_t r0, int64_t nr, const float* x, float* tmp) {
  HWY_DYNAMIC_DISPATCH(DotRowsT)(w, r0, nr, x, y, tmp);
}

int64_t QMatMulTokenBlock(int64_t T) { return HWY_DYNAMIC_DISPATCH(TokenBlockT)(T); }
int64_t QMatMulTaskRows() { return HWY_DYNAMIC_DISPATCH(TaskRowsT)(); }

MatMulScratch::~MatMulScratch() {
  for (float* b : bufs_) AlignedFree(b);
  AlignedFree(xpack_);
}

Status MatMulScratch::Reserve(int workers, int64_t max_cols) {
  if (workers <= static_cast<int>(bufs_.size()) && max_cols <= max_cols_) return Status::Ok();
  for (float* b : bufs_) AlignedFree(b);
  bufs_.clear();
  max_cols_ = std::max(max_cols, max_cols_);
  // Dequantised rows of one GEMM task, or one row for the generic dot.
  const size_t floats = static_cast<size_t>(max_cols_ * QMatMulTaskRows() + 64);
  for (int w = 0; w < workers; ++w) {
    float* b = static_cast<float*>(AlignedAlloc(floats * sizeof(float)));
    if (b == nullptr) {
      for (float* x : bufs_) AlignedFree(x);
      bufs_.clear();
      max_cols_ = 0;
      return ResourceExhausted("ops::QMatMul: cannot allocate " + std::to_string(floats * 4) +
                               " bytes of scratch");
    }
    bufs_.push_back(b);
  }
  return Status::Ok();
}

Result<float*> MatMulScratch::PackBuffer(int64_t floats) {
  if (floats > xpack_floats_) {
    AlignedFree(xpack_);
    xpack_floats_ = 0;
    xpack_ = static_cast<float*>(AlignedAlloc(static_cast<size_t>(floats) * sizeof(float)));
    if (xpack_ == nullptr) {
      return ResourceExhausted("ops::QMatMul: cannot allocate " + std::to_string(floats * 4) +
                               " bytes for packed activations");
    }
    xpack_floats_ = floats;
  }
  return xpack_;
}

constexpr int64_t kMvChunkRows = 16;  // rows claimed at a time by the decode matvec

namespace {
// One worker's share of the decode matvec's chunks, [front, back) packed in
// one 64-bit word so that the owner (taking chunks from the front) and
// thieves (taking them from the back) claim each chunk exactly once.
using core::ChunkRange;  // core/chunk_range.h
using core::RunOwnThenSteal;
using core::SplitEvenly;
}  // namespace

// Decode (matrix-vector) path: the rows of all jobs, in chunks of
// kMvChunkRows, are split into one contiguous range per worker, each streamed
// front to back by its owner (long sequential runs for the hardware
// prefetchers), and a worker that finishes early takes chunks from the back
// of the others' ranges, so a late or descheduled worker does not hold up
// the call (the old fixed tasks — about two per worker — left up to a
// quarter of a call's work on one thread). Each row's dot product is
// computed on its own, so who computes it never changes the result.
static void MatVecStealing(const std::vector<MatJob>& jobs, const float* x, int64_t ldx, int64_t T,
                           ThreadPool& pool, MatMulScratch& scratch) {
  std::vector<int64_t> first_chunk(jobs.size() + 1, 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    first_chunk[i + 1] = first_chunk[i] + (jobs[i].w->rows + kMvChunkRows - 1) / kMvChunkRows;
  }
  const int64_t C = first_chunk.back();
  const int64_t W = std::min<int64_t>(pool.NumWorkers(), C);
  std::unique_ptr<ChunkRange[]> ranges(new ChunkRange[static_cast<size_t>(W)]);
  SplitEvenly(ranges.get(), C, W);
  auto run_chunk = [&](uint32_t c, int worker) {
    const size_t ji = static_cast<size_t>(
        std::upper_bound(first_chunk.begin(), first_chunk.end(), static_cast<int64_t>(c)) - first_chunk.begin() - 1);
    const MatJob& j = jobs[ji];
    const int64_t r0 = (static_cast<int64_t>(c) - first_chunk[ji]) * kMvChunkRows;
    const int64_t nr = std::min(kMvChunkRows, j.w->rows - r0);
    float* buf = scratch.worker(worker);
    for (int64_t t = 0; t < T; ++t) {
      HWY_DYNAMIC_DISPATCH(DotRowsT)(*j.w, r0, nr, x + t * ldx, j.y + t * j.ldy + r0, buf);
    }
  };
  pool.ParallelFor(W, [&](int64_t w, int worker) {
    RunOwnThenSteal(ranges.get(), w, W, [&](uint32_t c) { run_chunk(c, worker); });
  });
}

Status QMatMul(const std::vector<MatJob>& jobs, const float* x, int64_t ldx, int64_t T,
              ThreadPool& pool, MatMulScratch& scratch, int64_t gemm_min_tokens) {
  if (jobs.empty() || T <= 0) return Status::Ok();
  const int64_t K = jobs[0].w->cols;
  for (const MatJob& j : jobs) {
    if (j.w->cols != K || ldx < K || j.ldy < j.w->rows) {
      return InvalidArgument("ops::QMatMul: " + j.w->name + " [" + std::to_string(j.w->rows) + "," +
                             std::to_string(j.w->cols) + "] does not fit x [" + std::to_string(T) +
                             "," + std::to_string(K) + "] (ldx " + std::to_string(ldx) + ", ldy " +
                             std::to_string(j.ldy) + ")");
    }
  }
  ATTNFLOW_RETURN_IF_ERROR(scratch.Reserve(pool.NumWorkers(), K));
  if (T < gemm_min_tokens) {
    MatVecStealing(jobs, x, ldx, T, pool, scratch);
    return Status::Ok();
  }
  // Pack the activations token-block-major once, in parallel.
  const int64_t TB = QMatMulTokenBlock(T);
  const int64_t nblk = (T + TB - 1) / TB;
  Result<float*> buf = scratch.PackBuffer(nblk * TB * K);
  if (!buf.ok()) return buf.status();
  float* xp = *buf;
  pool.ParallelFor(nblk, [&](int64_t b, int) {
    HWY_DYNAMIC_DISPATCH(PackTokensT)(x, ldx, T, K, b, xp + b * TB * K);
  });
  // Rows per task: GEMM tiles.
  std::vector<int64_t> first_task(jobs.size() + 1, 0);
  const int64_t rpt = QMatMulTaskRows();
  for (size_t i = 0; i < jobs.size(); ++i) {
    first_task[i + 1] = first_task[i] + (jobs[i].w->rows + rpt - 1) / rpt;
  }
  pool.ParallelFor(first_task.back(), [&](int64_t task, int worker) {
    const size_t ji = static_cast<size_t>(
        std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin() - 1);
    const MatJob& j = jobs[ji];
    const int64_t r0 = (task - first_task[ji]) * rpt;
    const int64_t nr = std::min(rpt, j.w->rows - r0);
    HWY_DYNAMIC_DISPATCH(GemmRowsT)(*j.w, r0, nr, xp, T, j.y, j.ldy, scratch.worker(worker));
  });
  return Status::Ok();
}

}  // namespace ops
}  // namespace attnflow
#endif  // HWY_ONCE
