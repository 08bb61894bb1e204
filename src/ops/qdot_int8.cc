// ops/qdot_int8.cc — the opt-in fast dot (`--fast-dot`, NOT exact): the
// activation vector is quantised once per matvec to int8 blocks of 32 (fp32
// scale, round half to even: ops::QuantizeActsQ8) and each weight row is
// dotted with it in integers, one fp32 scale per 32-element sub-block (16 per
// pair lane for Q6_K), as llama.cpp does with Q8_0 / Q8_K activations.
// Compiled once per Highway target through hwy/foreach_target.h.
//
// Invariants: the result is defined by the scalar oracle QMatVecRowsFastRef
// (see attnflow/ops.h: 16 pair-sum lanes in two block-parity accumulators,
// fma per sub-block, a fixed pairwise lane reduction, then the scalar offset
// sum); the AVX-512 VNNI path and the AVX2 path compute exactly that
// (integer quad sums are exact: |p| <= 4 * 255 * 127 < 2^24, so their float
// conversion is exact too) and every other target calls the oracle. Rows
// are independent and summed in a fixed order, so results never depend on
// the thread count. Types without an integer dot fall back to the exact
// QMatVecRows on the float activations.
#include "core/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/qdot_int8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>

#include "hwy/highway.h"
#include "attnflow/ops.h"
#include "attnflow/tensor.h"
#include "ops/lane_sum_avx512-inl.h"
#include "ops/q4k_scales.h"

#ifndef ATTNFLOW_OPS_QDOT_INT8_SHARED
#define ATTNFLOW_OPS_QDOT_INT8_SHARED
namespace attnflow::ops::qdot {

inline float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return F16ToF32(h);
}

// Elements of one quantisation block, and its bytes.
inline int64_t BlockElems(GgmlType t) {
  return t == GgmlType::kQ4_K || t == GgmlType::kQ6_K ? 256 : 32;
}
inline int64_t BlockBytesOf(GgmlType t) {
  switch (t) {
    case GgmlType::kQ4_0: return 18;
    case GgmlType::kQ4_1: return 20;
    case GgmlType::kQ5_0: return 22;
    case GgmlType::kQ8_0: return 34;
    case GgmlType::kQ4_K: return 144;
    default: return 210;  // Q6_K
  }
}

// Q4_K's 6-bit scale and min of sub-block `sub` (as io/gguf_quants.cc).
inline void Q4KScaleMin(const uint8_t* blk, int sub, int* scv, int* mv) {
  const uint8_t* sc = blk + 4;
  if (sub < 4) {
    *scv = sc[sub] & 63;
    *mv = sc[sub + 4] & 63;
  } else {
    *scv = (sc[sub + 4] & 0xF) | ((sc[sub - 4] >> 6) << 4);
    *mv = (sc[sub + 4] >> 4) | ((sc[sub] >> 6) << 4);
  }
}

// Sub-block `sub` of the block at `blk`: the 32 integer weights, the weight
// scale of lanes 0-7 (ws[0]) and 8-15 (ws[1]), and the offset scale `os`
// (the value added per unit of activation: w = ws * q + os; 0 when none).
inline void SubBlockInts(GgmlType t, const uint8_t* blk, int sub, int16_t* q, float* ws, float* os) {
  *os = 0.0f;
  switch (t) {
    case GgmlType::kQ8_0: {
      ws[0] = ws[1] = Half(blk);
      for (int e = 0; e < 32; ++e) q[e] = static_cast<int8_t>(blk[2 + e]);
      return;
    }
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      const bool affine = t == GgmlType::kQ4_1;
      const uint8_t* qs = blk + (affine ? 4 : 2);
      ws[0] = ws[1] = Half(blk);
      if (affine) *os = Half(blk + 2);
      for (int e = 0; e < 16; ++e) {
        q[e] = static_cast<int16_t>((qs[e] & 15) - (affine ? 0 : 8));
        q[e + 16] = static_cast<int16_t>((qs[e] >> 4) - (affine ? 0 : 8));
      }
      return;
    }
    case GgmlType::kQ5_0: {
      uint32_t qh;
      std::memcpy(&qh, blk + 2, 4);
      const uint8_t* qs = blk + 6;
      ws[0] = ws[1] = Half(blk);
      for (int e = 0; e < 16; ++e) {
        q[e] = static_cast<int16_t>(((qs[e] & 15) | (((qh >> e) & 1) << 4)) - 16);
        q[e + 16] = static_cast<int16_t>(((qs[e] >> 4) | (((qh >> (e + 16)) & 1) << 4)) - 16);
      }
      return;
    }
    case GgmlType::kQ4_K: {
      int scv, mv;
      Q4KScaleMin(blk, sub, &scv, &mv);
      ws[0] = ws[1] = Half(blk) * static_cast<float>(scv);
      *os = -(Half(blk + 2) * static_cast<float>(mv));
      const uint8_t* qs = blk + 16 + 32 * (sub / 2);
      for (int e = 0; e < 32; ++e) q[e] = static_cast<int16_t>((sub & 1) ? qs[e] >> 4 : qs[e] & 15);
      return;
    }
    default: {  // Q6_K: sub = 4 * half + k
      const int hf = sub / 4, k = sub % 4;
      const uint8_t* ql = blk + 64 * hf + 32 * (k & 1);
      const uint8_t* qh = blk + 128 + 32 * hf;
      const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * hf + 2 * k);
      const float d = Half(blk + 208);
      ws[0] = d * static_cast<float>(sc[0]);
      ws[1] = d * static_cast<float>(sc[1]);
      for (int e = 0; e < 32; ++e) {
        const int lo = (k >> 1) ? ql[e] >> 4 : ql[e] & 15;
        const int hi = (qh[e] >> (2 * k)) & 3;
        q[e] = static_cast<int16_t>((lo | (hi << 4)) - 32);
      }
      return;
    }
  }
}

}  // namespace attnflow::ops::qdot
#endif  // ATTNFLOW_OPS_QDOT_INT8_SHARED

ATTNFLOW_HWY_NAMESPACE_BEGIN(ops)

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// Code of the AVX2 fast dot (below), also called by the AVX-512 VNNI one.
#define ATTNFLOW_AVX2 __attribute__((target("avx2,fma,f16c")))

// F16 at p to F32 (F16C; exact, as qdot::Half).
ATTNFLOW_AVX2 HWY_INLINE float HalfF16c(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// The 8 sub-block factors of the Q4_K block at `blk` for the activation
// scales dx[0..8) of its sub-blocks: s8 = (d * sc_s) * dx_s and
// m8 = (-(dmin * m_s)) * dx_s, with the 6-bit sc / m of Q4KScalesMins: the
// oracle's ws * dx and os * dx, the same fp32 products, 8 lanes at once.
ATTNFLOW_AVX2 HWY_INLINE void Q4KFactors(const uint8_t* blk, const float* dx, __m256* s8, __m256* m8) {
  uint64_t sc, mn;
  Q4KScalesMins(blk, &sc, &mn);
  const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(sc))));
  const __m256 mf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(mn))));
  const __m256 dx8 = _mm256_loadu_ps(dx);
  *s8 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(HalfF16c(blk)), scf), dx8);
  *m8 = _mm256_mul_ps(_mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(HalfF16c(blk + 2)), mf), _mm256_set1_ps(-0.0f)), dx8);
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512 VNNI (vpdpbusd) is not part of Highway 1.0's AVX3 target, so the
// integer path is compiled for it by function attribute and used only when
// the CPU has it (checked once); otherwise the scalar oracle runs. The
// attribute is this pass's Highway target plus VNNI, so that the target's
// own inline functions (LaneSum16, ops/lane_sum_avx512-inl.h) can be inlined
// here: clang refuses to inline a function whose target has features (bmi,
// bmi2, ...) that the caller's lacks.
#define ATTNFLOW_VNNI __attribute__((target(HWY_TARGET_STR ",avx512vnni")))

// F16 -> F32 of two halves at p0, p1 (exact) in lanes 0, 1.
ATTNFLOW_VNNI HWY_INLINE __m128 Half2(const uint8_t* p0, const uint8_t* p1) {
  uint16_t h0, h1;
  std::memcpy(&h0, p0, 2);
  std::memcpy(&h1, p1, 2);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(h0 | (static_cast<uint32_t>(h1) << 16))));
}

// The 16 per-lane values v[k / 8] (lanes 0-7 from lane 0, 8-15 from lane 1).
ATTNFLOW_VNNI HWY_INLINE __m512 Spread2(__m128 v) {
  const __m512i idx = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

// Q4 nibbles of two 32-element blocks (16 bytes each at qs0, qs1) as 64
// bytes in element order: [lo(qs0), hi(qs0), lo(qs1), hi(qs1)].
ATTNFLOW_VNNI HWY_INLINE __m512i Nibbles64(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0)));
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)));
  const __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
  const __m512i sh = _mm512_mask_srli_epi16(z, static_cast<__mmask32>(0xFF00FF00u), z, 4);
  return _mm512_and_si512(sh, _mm512_set1_epi8(0x0F));
}

// One row (cols / 32 even): pairs P of 32-element sub-blocks (2P, 2P+1) as
// 64 unsigned weight bytes u (w = u - kC), the per-lane scales S and (affine
// types) offsets M; lane k = vpdpbusd(-kC * quad sum of x, u, x) exactly.
// Returns the row's 16 lanes before the oracle's fixed lane reduction:
// (acc0 + acc1) + (off0 + off1), reduced by LaneSum (one row) or LaneSum16
// (16 rows at once, the same additions; ops/lane_sum_avx512-inl.h).
template <GgmlType kType>
ATTNFLOW_VNNI HWY_INLINE __m512 FastRowVnni(const uint8_t* HWY_RESTRICT row, int64_t cols, const Q8Acts& xq) {
  static_assert(kType != GgmlType::kQ4_K && kType != GgmlType::kQ6_K,
                "Q4_K and Q6_K rows go through FastRowQ4KVnni / FastRowQ6KVnni");
  constexpr bool kAffine = kType == GgmlType::kQ4_1;
  constexpr int kShift = kType == GgmlType::kQ8_0 ? 7 : kType == GgmlType::kQ4_0 ? 3
                         : kType == GgmlType::kQ5_0 ? 4 : -1;
  const int8_t* xs = xq.q.data();
  const float* xd = xq.d.data();
  const int32_t* x4n = xq.x4n.data();
  const float* x4f = xq.x4f.data();
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 off0 = _mm512_setzero_ps(), off1 = _mm512_setzero_ps();
  const int64_t np = cols / 64;
  auto pair = [&](int64_t P, __m512& acc, __m512& off) ATTNFLOW_VNNI {
    const int64_t b = 2 * P;
    __m512i u;
    __m512 S, M = _mm512_setzero_ps();
    const __m128 dx = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(xd + b)));  // [dx_b, dx_b1]
    if constexpr (kType == GgmlType::kQ8_0) {
      const uint8_t* b0 = row + b * 34;
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 2));
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b0 + 36));
      u = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1), _mm512_set1_epi8(static_cast<char>(0x80)));
      S = Spread2(_mm_mul_ps(Half2(b0, b0 + 34), dx));
    } else if constexpr (kType == GgmlType::kQ4_0 || kType == GgmlType::kQ5_0) {
      constexpr int kBB = kType == GgmlType::kQ4_0 ? 18 : 22;
      constexpr int kQs = kType == GgmlType::kQ4_0 ? 2 : 6;
      const uint8_t* b0 = row + b * kBB;
      u = Nibbles64(b0 + kQs, b0 + kBB + kQs);
      if constexpr (kType == GgmlType::kQ5_0) {
        uint32_t h0, h1;
        std::memcpy(&h0, b0 + 2, 4);
        std::memcpy(&h1, b0 + kBB + 2, 4);
        const __mmask64 k = static_cast<__mmask64>(h0) | (static_cast<__mmask64>(h1) << 32);
        u = _mm512_mask_add_epi8(u, k, u, _mm512_set1_epi8(16));
      }
      S = Spread2(_mm_mul_ps(Half2(b0, b0 + kBB), dx));
    } else if constexpr (kType == GgmlType::kQ4_1) {
      const uint8_t* b0 = row + b * 20;
      u = Nibbles64(b0 + 4, b0 + 24);
      uint32_t dm0, dm1;
      std::memcpy(&dm0, b0, 4);
      std::memcpy(&dm1, b0 + 20, 4);
      // [d0, m0, d1, m1] x [dx0, dx0, dx1, dx1]
      const __m128 dm = _mm_cvtph_ps(_mm_insert_epi32(_mm_cvtsi32_si128(static_cast<int>(dm0)), static_cast<int>(dm1), 1));
      const __m128 sm = _mm_mul_ps(dm, _mm_unpacklo_ps(dx, dx));
      const __m512 v = _mm512_castps128_ps512(sm);
      S = _mm512_permutexvar_ps(_mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0), v);
      M = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1), v);
    }
    __m512i seed = _mm512_setzero_si512();
    if constexpr (kShift >= 0) seed = _mm512_slli_epi32(_mm512_loadu_si512(x4n + P * 16), kShift);
    const __m512i I = _mm512_dpbusd_epi32(seed, u, _mm512_loadu_si512(xs + P * 64));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), S, acc);
    if constexpr (kAffine) off = _mm512_fmadd_ps(_mm512_loadu_ps(x4f + P * 16), M, off);
    (void)M;
  };
  // Even pairs into acc0 / off0, odd ones into acc1 / off1 (registers).
  int64_t P = 0;
  for (; P + 1 < np; P += 2) {
    pair(P, acc0, off0);
    pair(P + 1, acc1, off1);
  }
  if (P < np) pair(P, acc0, off0);
  return _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(off0, off1));
}

// Q4_K rows, one 256-element super-block at a time: its 8 sub-block factors
// S_s = (d * sc_s) * dx_s and M_s = (-(dmin * m_s)) * dx_s are made once
// (Q4KFactors: the oracle's fp32 products); the 4 pairs then take their 16
// lanes by permutation. Pairs alternate between the two accumulators by
// global pair parity (p = 0, 2 -> acc0; 1, 3 -> acc1) in the same order, so
// the result has the oracle's bits.
ATTNFLOW_VNNI HWY_INLINE __m512 FastRowQ4KVnni(const uint8_t* HWY_RESTRICT row, int64_t cols, const Q8Acts& xq) {
  const int8_t* xs = xq.q.data();
  const float* xd = xq.d.data();
  const float* x4f = xq.x4f.data();
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  __m512 off0 = _mm512_setzero_ps(), off1 = _mm512_setzero_ps();
  const __m512i lo_nib = _mm512_set1_epi8(0x0F);
  const int64_t nblk = cols / 256;
  for (int64_t kb = 0; kb < nblk; ++kb) {
    const uint8_t* blk = row + kb * 144;
    __m256 s8, m8;
    Q4KFactors(blk, xd + kb * 8, &s8, &m8);
    const __m512 s16 = _mm512_castps256_ps512(s8), m16 = _mm512_castps256_ps512(m8);
    auto pair = [&](int p, __m512& acc, __m512& off) ATTNFLOW_VNNI {
      const int64_t P = kb * 4 + p;
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * p));
      const __m512i u8 = _mm512_and_si512(
          _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1), lo_nib);
      const __m512i idx = _mm512_set_epi32(2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                           2 * p + 1, 2 * p + 1, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p);
      const __m512i I = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u8, _mm512_loadu_si512(xs + P * 64));
      acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_permutexvar_ps(idx, s16), acc);
      off = _mm512_fmadd_ps(_mm512_loadu_ps(x4f + P * 16), _mm512_permutexvar_ps(idx, m16), off);
    };
    pair(0, acc0, off0);
    pair(1, acc1, off1);
    pair(2, acc0, off0);
    pair(3, acc1, off1);
  }
  return _mm512_add_ps(_mm512_add_ps(acc0, acc1), _mm512_add_ps(off0, off1));
}

// Q6_K rows, one 256-element block at a time: its 16 scales times d and times
// the activation scale of their sub-block, S_i = (d * sc_i) * dx_{i/2}, as one
// 16-lane product (the oracle's fp32 products ws * dx); pair p = 2 hf + j
// takes lanes 4p .. 4p + 3 by permutation, and the two pairs of a half share
// its ql/qh loads. Pairs alternate between the accumulators by global pair
// parity in the same order, so the result has the oracle's bits.
ATTNFLOW_VNNI HWY_INLINE __m512 FastRowQ6KVnni(const uint8_t* HWY_RESTRICT row, int64_t cols, const Q8Acts& xq) {
  const int8_t* xs = xq.q.data();
  const float* xd = xq.d.data();
  const int32_t* x4n = xq.x4n.data();
  __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(3);
  const __m512i dup2 = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  const int64_t nblk = cols / 256;
  for (int64_t kb = 0; kb < nblk; ++kb) {
    const uint8_t* blk = row + kb * 210;
    const __m512 scf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192))));
    const __m512 ws = _mm512_mul_ps(_mm512_set1_ps(_mm_cvtss_f32(Half2(blk + 208, blk + 208))), scf);
    const __m512 s16 = _mm512_mul_ps(ws, _mm512_permutexvar_ps(dup2, _mm512_castps256_ps512(_mm256_loadu_ps(xd + kb * 8))));
    HWY_UNROLL(2)
    for (int hf = 0; hf < 2; ++hf) {
      const __m512i ql = _mm512_loadu_si512(blk + 64 * hf);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * hf));
      HWY_UNROLL(2)
      for (int j = 0; j < 2; ++j) {
        const int p = 2 * hf + j;
        const int64_t P = kb * 4 + p;
        const __m512i lo = _mm512_and_si512(_mm512_srli_epi16(ql, 4 * j), m4);
        const __m256i h0 = _mm256_srli_epi16(qh, 4 * j);
        const __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(h0), _mm256_srli_epi16(h0, 2), 1);
        const __m512i u = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(h, m2), 4));
        const __m512i idx = _mm512_set_epi32(4 * p + 3, 4 * p + 3, 4 * p + 3, 4 * p + 3, 4 * p + 2, 4 * p + 2, 4 * p + 2,
                                             4 * p + 2, 4 * p + 1, 4 * p + 1, 4 * p + 1, 4 * p + 1, 4 * p, 4 * p, 4 * p, 4 * p);
        const __m512i seed = _mm512_slli_epi32(_mm512_loadu_si512(x4n + P * 16), 5);
        const __m512i I = _mm512_dpbusd_epi32(seed, u, _mm512_loadu_si512(xs + P * 64));
        acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_permutexvar_ps(idx, s16), acc[j]);
      }
    }
  }
  // + (off0 + off1) = +0 as in the oracle (turns a -0 lane into +0).
  return _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_setzero_ps());
}

template <GgmlType kType>
ATTNFLOW_VNNI void FastRowsVnni(float* y, const QMatrix& w, int64_t r0, int64_t nr, const Q8Acts& xq) {
  const uint8_t* row = w.data + r0 * w.row_bytes;
  auto Row = [&](const uint8_t* r) ATTNFLOW_VNNI {
    if constexpr (kType == GgmlType::kQ4_K) {
      return FastRowQ4KVnni(r, w.cols, xq);
    } else if constexpr (kType == GgmlType::kQ6_K) {
      return FastRowQ6KVnni(r, w.cols, xq);
    } else {
      return FastRowVnni<kType>(r, w.cols, xq);
    }
  };
  int64_t j = 0;
  for (; j + 16 <= nr; j += 16) {
    __m512 v[16];
    for (int i = 0; i < 16; ++i, row += w.row_bytes) v[i] = Row(row);
    LaneSum16(v, y + j);
  }
  for (; j < nr; ++j, row += w.row_bytes) y[j] = LaneSum(Row(row));
}
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// AVX2 (no VNNI): the same exact integer quad sums and the same fp32 ops per
// lane as the oracle, 8 lanes (one sub-block) per 256-bit vector. Sub-block b
// fills lanes 8 (b % 2) .. 8 (b % 2) + 7 of accumulator parity (b / 2) % 2, so
// each of the 16 oracle lanes lives in acc[parity][b % 2]. Quad sums: u8 x
// s8 pairs by vpmaddubsw (int16: |u| <= 63 for the 4/5/6-bit types, so a pair
// is at most 2 * 63 * 127 < 2^15: exact), then pairs of those by vpmaddwd;
// Q8_0 multiplies |w| by x * sign(w) (a pair is at most 2 * 128 * 127 <
// 2^15), the sum of w * x itself. The weight offset -C * (quad sum of x) is
// the same int32 seed as on VNNI. Every product is an exact integer, so the
// float conversions, scale products (scalar, as the oracle's) and fmas give
// the oracle's bits.

// 32 bits to 32 bytes: byte e is 0xFF where bit e of v is set.
ATTNFLOW_AVX2 HWY_INLINE __m256i BitsToBytes(uint32_t v) {
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(v)), shuf);
  const __m256i bit = _mm256_set1_epi64x(0x7FBFDFEFF7FBFDFE);
  return _mm256_cmpeq_epi8(_mm256_or_si256(bytes, bit), _mm256_set1_epi64x(-1));
}

// Elements 0-15 are the low nibbles of the 16 bytes at qs, 16-31 the high.
ATTNFLOW_AVX2 HWY_INLINE __m256i Nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i z = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
  return _mm256_and_si256(z, _mm256_set1_epi8(0x0F));
}

template <GgmlType kType>
ATTNFLOW_AVX2 HWY_INLINE float FastRowAvx2(const uint8_t* HWY_RESTRICT row, int64_t cols, const Q8Acts& xq) {
  constexpr bool kAffine = kType == GgmlType::kQ4_1 || kType == GgmlType::kQ4_K;
  constexpr int kShift = kType == GgmlType::kQ4_0 ? 3 : kType == GgmlType::kQ5_0 ? 4
                         : kType == GgmlType::kQ6_K ? 5 : -1;
  constexpr int kSubs = kType == GgmlType::kQ4_K || kType == GgmlType::kQ6_K ? 8 : 1;
  constexpr int64_t kBB = kType == GgmlType::kQ8_0 ? 34 : kType == GgmlType::kQ4_0 ? 18 : kType == GgmlType::kQ4_1 ? 20
                          : kType == GgmlType::kQ5_0 ? 22 : kType == GgmlType::kQ4_K ? 144 : 210;
  __m256 acc[2][2], off[2][2];
  for (int p = 0; p < 2; ++p) {
    for (int h = 0; h < 2; ++h) acc[p][h] = off[p][h] = _mm256_setzero_ps();
  }
  const __m256i ones16 = _mm256_set1_epi16(1), m4 = _mm256_set1_epi8(0x0F);
  const float* xd = xq.d.data();
  for (int64_t kb = 0; kb < cols / (32 * kSubs); ++kb) {
    const uint8_t* blk = row + kb * kBB;
    // Per-block scale work. Q4_K: the 8 sub-block factors (Q4KFactors);
    // Q6_K: d * sc_i for the 16 scales. Same fp32 products as the oracle.
    __m256 s8 = _mm256_setzero_ps(), m8 = _mm256_setzero_ps(), ds_lo = s8, ds_hi = s8;
    if constexpr (kType == GgmlType::kQ4_K) {
      Q4KFactors(blk, xd + kb * 8, &s8, &m8);
    } else if constexpr (kType == GgmlType::kQ6_K) {
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192));
      const __m256 d = _mm256_set1_ps(HalfF16c(blk + 208));
      ds_lo = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)));
      ds_hi = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))));
    }
    HWY_UNROLL(8)
    for (int sub = 0; sub < kSubs; ++sub) {
      const int64_t b = kb * kSubs + sub;
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.q.data() + b * 32));
      const float dx = xd[b];
      __m256i pairs;
      __m256 S, M = _mm256_setzero_ps();
      if constexpr (kType == GgmlType::kQ8_0) {
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
        pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
        S = _mm256_set1_ps(HalfF16c(blk) * dx);
      } else {
        __m256i u;
        if constexpr (kType == GgmlType::kQ4_0 || kType == GgmlType::kQ4_1) {
          u = Nibbles32(blk + (kType == GgmlType::kQ4_1 ? 4 : 2));
          S = _mm256_set1_ps(HalfF16c(blk) * dx);
          if constexpr (kType == GgmlType::kQ4_1) M = _mm256_set1_ps(HalfF16c(blk + 2) * dx);
        } else if constexpr (kType == GgmlType::kQ5_0) {
          uint32_t qh;
          std::memcpy(&qh, blk + 2, 4);
          u = _mm256_or_si256(Nibbles32(blk + 6), _mm256_and_si256(BitsToBytes(qh), _mm256_set1_epi8(16)));
          S = _mm256_set1_ps(HalfF16c(blk) * dx);
        } else if constexpr (kType == GgmlType::kQ4_K) {
          const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * (sub / 2)));
          u = _mm256_and_si256((sub & 1) ? _mm256_srli_epi16(q, 4) : q, m4);
          S = _mm256_permutevar8x32_ps(s8, _mm256_set1_epi32(sub));
          M = _mm256_permutevar8x32_ps(m8, _mm256_set1_epi32(sub));
        } else {  // Q6_K: sub = 4 hf + k, scales 2 sub (quads 0-3) and 2 sub + 1
          const int hf = sub / 4, k = sub % 4;
          const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * hf + 32 * (k & 1)));
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * hf));
          const __m256i lo = _mm256_and_si256((k >> 1) ? _mm256_srli_epi16(ql, 4) : ql, m4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), _mm256_set1_epi8(3));
          u = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
          const int i = (2 * sub) % 8;
          const __m256i idx = _mm256_setr_epi32(i, i, i, i, i + 1, i + 1, i + 1, i + 1);
          S = _mm256_mul_ps(_mm256_permutevar8x32_ps(sub < 4 ? ds_lo : ds_hi, idx), _mm256_set1_ps(dx));
        }
        pairs = _mm256_maddubs_epi16(u, x);
      }
      __m256i I = _mm256_madd_epi16(pairs, ones16);
      if constexpr (kShift >= 0) {
        I = _mm256_add_epi32(I, _mm256_slli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.x4n.data() + b * 8)), kShift));
      }
      const int par = static_cast<int>((b / 2) & 1), half = static_cast<int>(b & 1);
      acc[par][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), S, acc[par][half]);
      if constexpr (kAffine) off[par][half] = _mm256_fmadd_ps(_mm256_loadu_ps(xq.x4f.data() + b * 8), M, off[par][half]);
      (void)M;
    }
  }
  // a[k] = (acc0 + acc1) + (off0 + off1); then lanes k + 8, k + 4, k + 2, k + 1.
  const __m256 lo = _mm256_add_ps(_mm256_add_ps(acc[0][0], acc[1][0]), _mm256_add_ps(off[0][0], off[1][0]));
  const __m256 hi = _mm256_add_ps(_mm256_add_ps(acc[0][1], acc[1][1]), _mm256_add_ps(off[0][1], off[1][1]));
  const __m256 h = _mm256_add_ps(lo, hi);
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

template <GgmlType kType>
ATTNFLOW_AVX2 void FastRowsAvx2(float* y, const QMatrix& w, int64_t r0, int64_t nr, const Q8Acts& xq) {
  const uint8_t* row = w.data + r0 * w.row_bytes;
  for (int64_t j = 0; j < nr; ++j, row += w.row_bytes) y[j] = FastRowAvx2<kType>(row, w.cols, xq);
}
#endif

// QuantizeActsQ8Ref's blocks on AVX-512 (returns false elsewhere: the caller
// runs the scalar code). Same bytes: amax is a max of exact |x| (no NaN when
// the block is finite), d = amax / 127 and id = 1 / d in scalar fp32 as
// there, x * id one fp32 product, vrndscaleps rounds half to even as
// nearbyint does in the default mode, and max_ps(r, -127) returns -127 for
// a NaN r exactly as std::max(-127.f, r) does (then min with 127); the
// sums are integer sums (exact in any order).
bool QuantizeBlocksT(Q8Acts* out, const float* x, int64_t n) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  const int64_t nb = n / 32;
  const __m512 sign = _mm512_set1_ps(-0.0f), inf = _mm512_set1_ps(std::numeric_limits<float>::infinity());
  const __m512 lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const __m512 a0 = _mm512_andnot_ps(sign, v0), a1 = _mm512_andnot_ps(sign, v1);
    // Finite: |x| < inf (false for NaN and for infinities).
    const bool finite = (_mm512_cmp_ps_mask(a0, inf, _CMP_LT_OQ) & _mm512_cmp_ps_mask(a1, inf, _CMP_LT_OQ)) == 0xFFFF;
    float d = std::numeric_limits<float>::quiet_NaN(), id = 0.0f;
    if (finite) {
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(a0, a1));
      d = amax / 127.0f;
      id = d != 0.0f ? 1.0f / d : 0.0f;
    }
    const __m512 vid = _mm512_set1_ps(id);
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 r0 = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(_mm512_mul_ps(v0, vid), kRound), lo), hi);
    const __m512 r1 = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(_mm512_mul_ps(v1, vid), kRound), lo), hi);
    const __m512i i0 = _mm512_cvtps_epi32(r0), i1 = _mm512_cvtps_epi32(r1);
    int8_t* q = out->q.data() + b * 32;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtepi32_epi8(i1));
    // Quad sums: lane k + lane k^1, then + lanes k^2; lanes 0, 4, 8, 12 kept.
    auto quads = [](__m512i v) HWY_ATTR {
      v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_CDAB));
      v = _mm512_add_epi32(v, _mm512_shuffle_epi32(v, _MM_PERM_BADC));
      return _mm512_castsi512_si128(_mm512_maskz_compress_epi32(0x1111, v));
    };
    const __m256i s4 = _mm256_inserti128_si256(_mm256_castsi128_si256(quads(i0)), quads(i1), 1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out->x4n.data() + b * 8), _mm256_sub_epi32(_mm256_setzero_si256(), s4));
    _mm256_storeu_ps(out->x4f.data() + b * 8, _mm256_cvtepi32_ps(s4));
    out->d[static_cast<size_t>(b)] = d;
  }
  return true;
#else
  (void)out, (void)x, (void)n;
  return false;
#endif
}

// Whether this target on this CPU has the AVX-512 VNNI fast dot.
bool FastDotVnniT() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  return vnni;
#else
  return false;
#endif
}

// Whether this target has a SIMD fast dot (AVX-512 VNNI, else AVX2).
bool FastDotSimdT() { return HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2; }

// Returns false (nothing written) when this target has no SIMD fast dot for
// the type; the caller then runs the oracle. On AVX-512 with VNNI, rows with
// an odd number of 32-element blocks per pair (cols % 64 != 0) take the AVX2
// code.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// Calls f(std::integral_constant<GgmlType, type>) and returns true for a type
// with a SIMD fast dot; false (f not called) for the others.
template <typename F>
bool WithFastType(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::kQ8_0: f(std::integral_constant<GgmlType, GgmlType::kQ8_0>()); return true;
    case GgmlType::kQ4_0: f(std::integral_constant<GgmlType, GgmlType::kQ4_0>()); return true;
    case GgmlType::kQ4_1: f(std::integral_constant<GgmlType, GgmlType::kQ4_1>()); return true;
    case GgmlType::kQ5_0: f(std::integral_constant<GgmlType, GgmlType::kQ5_0>()); return true;
    case GgmlType::kQ4_K: f(std::integral_constant<GgmlType, GgmlType::kQ4_K>()); return true;
    case GgmlType::kQ6_K: f(std::integral_constant<GgmlType, GgmlType::kQ6_K>()); return true;
    default: return false;
  }
}
#endif

bool FastRowsT(float* y, const QMatrix& w, int64_t r0, int64_t nr, const Q8Acts& xq) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (FastDotVnniT() && w.cols % 64 == 0) {
    return WithFastType(w.type,
                        [&](auto t) { FastRowsVnni<decltype(t)::value>(y, w, r0, nr, xq); });
  }
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return WithFastType(w.type, [&](auto t) { FastRowsAvx2<decltype(t)::value>(y, w, r0, nr, xq); });
#else
  (void)y, (void)w, (void)r0, (void)nr, (void)xq;
  return false;
#endif
}

ATTNFLOW_HWY_NAMESPACE_END()

#if HWY_ONCE
namespace attnflow {
namespace ops {

HWY_EXPORT(FastRowsT);
HWY_EXPORT(FastDotSimdT);

bool QFastDotHasSimd() { return HWY_DYNAMIC_DISPATCH(FastDotSimdT)(); }

namespace {
void SizeActs(Q8Acts* out, int64_t n) {
  const size_t nb = static_cast<size_t>(n / 32);
  if (out->q.size() < static_cast<size_t>(n)) out->q.resize(static_cast<size_t>(n));
  if (out->d.size() < nb) out->d.resize(nb);
  if (out->x4n.size() < nb * 8) out->x4n.resize(nb * 8);
  if (out->x4f.size() < nb * 8) out->x4f.resize(nb * 8);
  out->n = n;
}
}  // namespace

HWY_EXPORT(QuantizeBlocksT);

void QuantizeActsQ8(Q8Acts* out, const float* x, int64_t n) {
  SizeActs(out, n);
  if (!HWY_DYNAMIC_DISPATCH(QuantizeBlocksT)(out, x, n)) QuantizeActsQ8Ref(out, x, n);
}

void QuantizeActsQ8Ref(Q8Acts* out, const float* x, int64_t n) {
  const size_t nb = static_cast<size_t>(n / 32);
  SizeActs(out, n);
  for (size_t b = 0; b < nb; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    bool finite = true;
    for (int e = 0; e < 32; ++e) {
      amax = std::max(amax, std::fabs(xb[e]));
      finite = finite && std::isfinite(xb[e]);
    }
    // A NaN or infinite activation must not become a finite int8 value
    // (std::max drops NaN, and inf * (1 / inf) is NaN, clamped to -127):
    // the block's scale is NaN then, so every dot that uses the block is
    // NaN, as the exact dot would be non-finite.
    const float d = finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
    const float id = finite && d != 0.0f ? 1.0f / d : 0.0f;
    int8_t* q = out->q.data() + b * 32;
    for (int e = 0; e < 32; ++e) {
      // nearbyint: round half to even in the default rounding mode.
      const float r = std::nearbyint(xb[e] * id);
      const int v = static_cast<int>(std::min(127.0f, std::max(-127.0f, r)));
      q[e] = static_cast<int8_t>(v);
    }
    for (int j = 0; j < 8; ++j) {
      const int32_t s4 = q[4 * j] + q[4 * j + 1] + q[4 * j + 2] + q[4 * j + 3];
      out->x4n[b * 8 + static_cast<size_t>(j)] = -s4;
      out->x4f[b * 8 + static_cast<size_t>(j)] = static_cast<float>(s4);
    }
    out->d[b] = d;
  }
}

bool QFastDotSupported(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ6_K: return true;
    default: return false;
  }
}

void QMatVecRowsFastRef(float* y, const QMatrix& w, int64_t r0, int64_t nr, const Q8Acts& xq) {
  const int64_t be = qdot::BlockElems(w.type), bb = qdot::BlockBytesOf(w.type);
  const int subs = static_cast<int>(be / 32);
  const bool affine = w.type == GgmlType::kQ4_1 || w.type == GgmlType::kQ4_K;
  for (int64_t r = 0; r < nr; ++r) {
    const uint8_t* row = w.data + (r0 + r) * w.row_bytes;
    float acc[2][16] = {}, off[2][16] = {};
    for (int64_t b = 0; b < w.cols / 32; ++b) {
      int16_t q[32];
      float ws[2], os;
      qdot::SubBlockInts(w.type, row + (b / subs) * bb, static_cast<int>(b % subs), q, ws, &os);
      const int8_t* x = xq.q.data() + b * 32;
      const float dx = xq.d[static_cast<size_t>(b)];
      const int par = static_cast<int>((b / 2) & 1);
      for (int j = 0; j < 8; ++j) {
        const int k = 8 * static_cast<int>(b & 1) + j;
        int32_t I = 0;
        for (int e = 4 * j; e < 4 * j + 4; ++e) I += int32_t{q[e]} * x[e];
        const float S = ws[j / 4] * dx;
        acc[par][k] = std::fma(static_cast<float>(I), S, acc[par][k]);
        if (affine) off[par][k] = std::fma(xq.x4f[static_cast<size_t>(b * 8 + j)], os * dx, off[par][k]);
      }
    }
    float a[16];
    for (int k = 0; k < 16; ++k) a[k] = (acc[0][k] + acc[1][k]) + (off[0][k] + off[1][k]);
    for (int h = 8; h >= 1; h /= 2) {
      for (int k = 0; k < h; ++k) a[k] += a[k + h];
    }
    y[r] = a[0];
  }
}

void QMatVecRowsFast(float* y, const QMatrix& w, int64_t r0, int64_t nr, const Q8Acts& xq,
                     const float* x, float* tmp) {
  if (!QFastDotSupported(w.type) || w.cols % qdot::BlockElems(w.type) != 0 || xq.n != w.cols) {
    QMatVecRows(y, w, r0, nr, x, tmp);
    return;
  }
  if (!HWY_DYNAMIC_DISPATCH(FastRowsT)(y, w, r0, nr, xq)) QMatVecRowsFastRef(y, w, r0, nr, xq);
}

}  // namespace ops
}  // namespace attnflow
#endif  // HWY_ONCE
