// ops/lane_sum_avx512-inl.h — the fixed sum of a 16-lane fp32 vector's lanes on
// AVX-512, for one row or for 16 rows at once, shared by the exact
// quantised dots (ops/qmatmul.cc) and the fast int8 dots (ops/qdot_int8.cc).
//
// Invariant: one order of additions, written once. h[k] = a[k] + a[k+8],
// q[k] = h[k] + h[k+4], p[k] = q[k] + q[k+2], result p[0] + p[1] -- the tree
// of GCC's _mm512_reduce_add_ps, which Highway 1.0's SumOfLanes on AVX3
// uses, so a row reduced here has the bits it had there. LaneSum16 does the
// same additions with the same operands (lower element first at every level)
// for 16 rows laid out as a transpose, so each of its results equals
// LaneSum of that row, bit for bit. 45 shuffles/adds for 16 rows instead of
// ~8 dependent ops per row (the per-row tail held a third of the perf
// samples of a 576-column exact matvec; measured gain of the exact dots,
// one thread: Q5_0 streamed from DRAM +11%, the others 0-5%).
// Per-target (Highway's toggle), defined for the AVX-512 targets only.
#if defined(ATTNFLOW_OPS_LANE_SUM_AVX512_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNFLOW_OPS_LANE_SUM_AVX512_INL_H_
#undef ATTNFLOW_OPS_LANE_SUM_AVX512_INL_H_
#else
#define ATTNFLOW_OPS_LANE_SUM_AVX512_INL_H_
#endif

#include "hwy/highway.h"

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#include <immintrin.h>

HWY_BEFORE_NAMESPACE();
namespace attnflow::ops::HWY_NAMESPACE {

HWY_INLINE float LaneSum(__m512 a) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

// y[i] = LaneSum(v[i]) for i < 16. Level 1: row pairs, [lo256(a) | lo256(b)]
// + [hi256(a) | hi256(b)]; level 2: h[k] + h[k+4] of 4 rows (one 128-bit lane
// each); level 3: q[k] + q[k+2] (in-lane shuffles of 2 x 4 rows); level 4:
// p[0] + p[1] of 16 rows, element 4j + e = row j + 4e, permuted to row order.
HWY_INLINE void LaneSum16(const __m512* v, float* y) {
  __m512 h[8], q[4], p[2];
  for (int i = 0; i < 8; ++i)
    h[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)
    q[i] = _mm512_add_ps(_mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(h[2 * i], h[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)
    p[i] = _mm512_add_ps(_mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0x44),
                         _mm512_shuffle_ps(q[2 * i], q[2 * i + 1], 0xEE));
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], 0x88), _mm512_shuffle_ps(p[0], p[1], 0xDD));
  const __m512i to_rows = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(y, _mm512_permutexvar_ps(to_rows, r));
}

}  // namespace attnflow::ops::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
#endif  // AVX-512
#endif  // per-target include guard
