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
// sum); the AVX-512 path computes exactly that (integer pair sums are exact:
// |p| <= 2 * 127 * 127 < 2^24, so their float conversion is exact too) and
// every other target calls the oracle. Rows are independent and summed in a
// fixed order, so results never depend on the thread count. Types without an
// integer dot fall back to the exact QMatVecRows on the float activations.
#include "core/hwy_targets.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/qdot_int8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cmath>
#include <cstring>

#include "hwy/highway.h"
#include "attnflow/ops.h"
#include "attnflow/tensor.h"

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

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3

// F16 -> F32 in one instruction (exact, the same value as F16ToF32).
HWY_INLINE float HalfX(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// 16 int16 [0, 15] nibbles of qs[0..15] (low) and [16..31] (high) in one
// 32-lane vector: elements 0-15 the low nibbles, 16-31 the high nibbles.
HWY_INLINE __m512i Nibbles32(const uint8_t* qs) {
  const __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m256i m = _mm256_set1_epi16(15);
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(b, m)), _mm256_srli_epi16(b, 4), 1);
}

// The fixed lane reduction of the oracle: (a0 + a1), then k + 8, k + 4,
// k + 2, k + 1.
HWY_INLINE float ReduceFixed(__m512 a0, __m512 a1) {
  const __m512 a = _mm512_add_ps(a0, a1);
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

// Sub-block b (32 elements) of a row as 32 int16 weights and the per-lane
// weight scales; adds the affine offset term to *o (block order).
template <GgmlType kType>
HWY_INLINE void SubAvx3(const uint8_t* HWY_RESTRICT row, int64_t b, const float* xd, const int32_t* bs,
                        __m512i* w16, __m512* ws, float* o) {
  if constexpr (kType == GgmlType::kQ8_0) {
    const uint8_t* blk = row + b * 34;
    *w16 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2)));
    *ws = _mm512_set1_ps(HalfX(blk));
  } else if constexpr (kType == GgmlType::kQ4_0 || kType == GgmlType::kQ4_1) {
    constexpr bool kAffine = kType == GgmlType::kQ4_1;
    const uint8_t* blk = row + b * (kAffine ? 20 : 18);
    *w16 = Nibbles32(blk + (kAffine ? 4 : 2));
    if (!kAffine) *w16 = _mm512_sub_epi16(*w16, _mm512_set1_epi16(8));
    *ws = _mm512_set1_ps(HalfX(blk));
    if (kAffine) *o = std::fma(HalfX(blk + 2) * xd[b], static_cast<float>(bs[b]), *o);
  } else if constexpr (kType == GgmlType::kQ5_0) {
    const uint8_t* blk = row + b * 22;
    uint32_t qh;
    std::memcpy(&qh, blk + 2, 4);
    // q - 16 = nibble - 16 where the 5th bit is clear, else the nibble.
    const __m512i n = Nibbles32(blk + 6);
    *w16 = _mm512_mask_sub_epi16(n, static_cast<__mmask32>(~qh), n, _mm512_set1_epi16(16));
    *ws = _mm512_set1_ps(HalfX(blk));
  } else if constexpr (kType == GgmlType::kQ4_K) {
    const uint8_t* blk = row + (b / 8) * 144;
    const int sub = static_cast<int>(b % 8);
    int scv, mv;
    qdot::Q4KScaleMin(blk, sub, &scv, &mv);
    const __m512i raw = _mm512_cvtepu8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16 + 32 * (sub / 2))));
    *w16 = (sub & 1) ? _mm512_srli_epi16(raw, 4) : _mm512_and_si512(raw, _mm512_set1_epi16(15));
    *ws = _mm512_set1_ps(HalfX(blk) * static_cast<float>(scv));
    *o = std::fma(-(HalfX(blk + 2) * static_cast<float>(mv)) * xd[b], static_cast<float>(bs[b]), *o);
  } else {  // Q6_K
    const uint8_t* blk = row + (b / 8) * 210;
    const int sub = static_cast<int>(b % 8);
    const int hf = sub / 4, k = sub % 4;
    const __m512i ql = _mm512_cvtepu8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 64 * hf + 32 * (k & 1))));
    const __m512i qh = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * hf)));
    const __m512i lo = (k >> 1) ? _mm512_srli_epi16(ql, 4) : _mm512_and_si512(ql, _mm512_set1_epi16(15));
    const __m512i hi = _mm512_and_si512(_mm512_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), _mm512_set1_epi16(3));
    *w16 = _mm512_sub_epi16(_mm512_or_si512(lo, _mm512_slli_epi16(hi, 4)), _mm512_set1_epi16(32));
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * hf + 2 * k);
    const float d = HalfX(blk + 208);
    *ws = _mm512_insertf32x8(_mm512_set1_ps(d * static_cast<float>(sc[0])),
                             _mm256_set1_ps(d * static_cast<float>(sc[1])), 1);
  }
}

// One row: sub-blocks in pairs (even into a0, odd into a1: two register
// accumulators), then the fixed reduction and the offset sum.
template <GgmlType kType>
HWY_INLINE float FastRowAvx3(const uint8_t* HWY_RESTRICT row, int64_t cols, const Q8Acts& xq) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  float o = 0.0f;
  const int16_t* xs = xq.q.data();
  const float* xd = xq.d.data();
  const int32_t* bs = xq.sum.data();
  const int64_t nsub = cols / 32;
  auto sub = [&](int64_t b, __m512& acc) {
    __m512i w16;
    __m512 ws;
    SubAvx3<kType>(row, b, xd, bs, &w16, &ws, &o);
    const __m512 p = _mm512_cvtepi32_ps(_mm512_madd_epi16(w16, _mm512_loadu_si512(xs + b * 32)));
    acc = _mm512_fmadd_ps(p, _mm512_mul_ps(ws, _mm512_set1_ps(xd[b])), acc);
  };
  int64_t b = 0;
  for (; b + 1 < nsub; b += 2) {
    sub(b, a0);
    sub(b + 1, a1);
  }
  if (b < nsub) sub(b, a0);
  return ReduceFixed(a0, a1) + o;
}

template <GgmlType kType>
void FastRowsAvx3(float* y, const QMatrix& w, int64_t r0, int64_t nr, const Q8Acts& xq) {
  const uint8_t* row = w.data + r0 * w.row_bytes;
  for (int64_t j = 0; j < nr; ++j, row += w.row_bytes) y[j] = FastRowAvx3<kType>(row, w.cols, xq);
}
#endif

// Returns false (nothing written) when this target has no SIMD fast dot for
// the type; the caller then runs the scalar oracle.
bool FastRowsT(float* y, const QMatrix& w, int64_t r0, int64_t nr, const Q8Acts& xq) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  switch (w.type) {
    case GgmlType::kQ8_0: FastRowsAvx3<GgmlType::kQ8_0>(y, w, r0, nr, xq); return true;
    case GgmlType::kQ4_0: FastRowsAvx3<GgmlType::kQ4_0>(y, w, r0, nr, xq); return true;
    case GgmlType::kQ4_1: FastRowsAvx3<GgmlType::kQ4_1>(y, w, r0, nr, xq); return true;
    case GgmlType::kQ5_0: FastRowsAvx3<GgmlType::kQ5_0>(y, w, r0, nr, xq); return true;
    case GgmlType::kQ4_K: FastRowsAvx3<GgmlType::kQ4_K>(y, w, r0, nr, xq); return true;
    case GgmlType::kQ6_K: FastRowsAvx3<GgmlType::kQ6_K>(y, w, r0, nr, xq); return true;
    default: return false;
  }
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

void QuantizeActsQ8(Q8Acts* out, const float* x, int64_t n) {
  const size_t nb = static_cast<size_t>(n / 32);
  if (out->q.size() < static_cast<size_t>(n)) out->q.resize(static_cast<size_t>(n));
  if (out->d.size() < nb) out->d.resize(nb);
  if (out->sum.size() < nb) out->sum.resize(nb);
  out->n = n;
  for (size_t b = 0; b < nb; ++b) {
    const float* xb = x + b * 32;
    float amax = 0.0f;
    for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(xb[e]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t s = 0;
    int16_t* q = out->q.data() + b * 32;
    for (int e = 0; e < 32; ++e) {
      // nearbyint: round half to even in the default rounding mode.
      const float r = std::nearbyint(xb[e] * id);
      const int v = static_cast<int>(std::min(127.0f, std::max(-127.0f, r)));
      q[e] = static_cast<int16_t>(v);
      s += v;
    }
    out->d[b] = d;
    out->sum[b] = s;
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
  for (int64_t j = 0; j < nr; ++j) {
    const uint8_t* row = w.data + (r0 + j) * w.row_bytes;
    float acc[2][16] = {};
    float o = 0.0f;
    for (int64_t b = 0; b < w.cols / 32; ++b) {
      int16_t q[32];
      float ws[2], os;
      qdot::SubBlockInts(w.type, row + (b / subs) * bb, static_cast<int>(b % subs), q, ws, &os);
      const int16_t* x = xq.q.data() + b * 32;
      const float s[2] = {ws[0] * xq.d[static_cast<size_t>(b)], ws[1] * xq.d[static_cast<size_t>(b)]};
      for (int k = 0; k < 16; ++k) {
        const int32_t p = int32_t{q[2 * k]} * x[2 * k] + int32_t{q[2 * k + 1]} * x[2 * k + 1];
        acc[b & 1][k] = std::fma(static_cast<float>(p), s[k / 8], acc[b & 1][k]);
      }
      if (w.type == GgmlType::kQ4_1 || w.type == GgmlType::kQ4_K) {
        o = std::fma(os * xq.d[static_cast<size_t>(b)], static_cast<float>(xq.sum[static_cast<size_t>(b)]), o);
      }
    }
    float a[16];
    for (int k = 0; k < 16; ++k) a[k] = acc[0][k] + acc[1][k];
    for (int h = 8; h >= 1; h /= 2) {
      for (int k = 0; k < h; ++k) a[k] += a[k + h];
    }
    y[j] = a[0] + o;
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
