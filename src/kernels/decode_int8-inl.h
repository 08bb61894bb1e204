// kernels/decode_int8-inl.h — one split of the int8 KV cache decode
// (attnflow/kv_int8.h), compiled once per Highway target from
// kernels_decode_int8.cc.
//
// A task is (b, kv head g, split s); its rows are the G query heads of g, so
// every cache byte of the split is read and converted once per chunk of rows.
// The split's positions (oldest first) are visited in tiles of tkv keys; a
// tile never crosses the ring's wrap (slot capacity - 1 -> 0), so its K rows
// and each of its V columns are contiguous in the cache. Per tile:
//  * Q.K: s[r][j] = qs_r . k_j, the int8 K converted to fp32 on load (exact),
//    qs pre-scaled by scale * log2(e) * k_scale[g] (log2 domain); 4 keys x
//    up to 4 rows (2 on 16-register targets) per block, each dot product
//    accumulated over D in order and reduced by Sum4 (its value does not
//    depend on its neighbours).
//  * online softmax per row, vectorised over keys (exp2 as the fp32 kernels).
//  * P.V with V in columns [Dv][capacity]: for 4 (8 for a single row on
//    AVX-512) value dimensions at once, a dot product over the tile's keys
//    per (row, dimension), reduced by Sum4; o = o * alpha + that sum. The
//    value scale is applied by the merge.
// No software prefetch: the tile is long (up to 4096 keys) so that each V
// column of a tile is one long stream for the hardware prefetchers; a
// prefetch of the tile's V columns during Q.K and of the next tile's K rows
// during P.V made a DRAM-resident call 10-40% slower (docs/kernels.md).
// Keys past the tile end inside a vector (at most lanes - 1) have weight 0
// and their V bytes come from a zeroed copy, so nothing outside the cache is
// read. When D is not a multiple of the lanes, each K tile is first copied
// into a zero-padded [tkv][dp] scratch.
// The split's result depends only on the shape, the lengths and the target,
// never on the thread count. Scores are finite by the driver's contract
// (decode_int8.h), so no NaN handling is needed here.

#if defined(ATTNFLOW_KERNELS_DECODE_INT8_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNFLOW_KERNELS_DECODE_INT8_INL_H_
#undef ATTNFLOW_KERNELS_DECODE_INT8_INL_H_
#else
#define ATTNFLOW_KERNELS_DECODE_INT8_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/decode_int8.h"
#include "kernels/flash_common-inl.h"  // Exp2, DF, VF, kNegInfF
#include "kernels/flash_decode-inl.h"  // Sum4, QkBlock4, QkBlock1, OnlineSoftmaxRow

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace kernels {
namespace HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr size_t kS8QkRows = 4;   // 4 keys x 4 rows = 16 accumulators
constexpr size_t kS8PvRows = 4;   // 4 dims x 4 rows = 16 accumulators
constexpr size_t kS8PvCols1 = 8;  // a single row: 8 dims at once
#else
constexpr size_t kS8QkRows = 2;
constexpr size_t kS8PvRows = 2;
constexpr size_t kS8PvCols1 = 4;
#endif

// Rows [0, rows) in chunks of kS8QkRows, then the leftover chunk (template
// recursion on its size).
template <size_t R, bool kFour>
HWY_INLINE void QkS8Rest(const float* HWY_RESTRICT qd, size_t dp, const int8_t* HWY_RESTRICT k,
                         size_t kpitch, float* HWY_RESTRICT s, size_t pitch, size_t rem) {
  if constexpr (R >= 1) {
    if (rem == R) {
      if constexpr (kFour) {
        QkBlock4<int8_t, R>(qd, dp, k, kpitch, s, pitch);
      } else {
        QkBlock1<int8_t, R>(qd, dp, k, s, pitch);
      }
      return;
    }
    QkS8Rest<R - 1, kFour>(qd, dp, k, kpitch, s, pitch, rem);
  }
}

// s[r*pitch + j] = qd_r . k_j for r < rows, j < n. For each block of 4 keys
// (whose K rows stay in L1) every chunk of rows runs; then the last keys one
// by one.
HWY_INLINE void QkS8Tile(const float* HWY_RESTRICT qd, size_t rows, size_t dp,
                         const int8_t* HWY_RESTRICT k, size_t kpitch, size_t n,
                         float* HWY_RESTRICT s, size_t pitch) {
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const int8_t* kj = k + j * kpitch;
    size_t r0 = 0;
    for (; r0 + kS8QkRows <= rows; r0 += kS8QkRows) {
      QkBlock4<int8_t, kS8QkRows>(qd + r0 * dp, dp, kj, kpitch, s + r0 * pitch + j, pitch);
    }
    if (r0 < rows) {
      QkS8Rest<kS8QkRows - 1, true>(qd + r0 * dp, dp, kj, kpitch, s + r0 * pitch + j, pitch,
                                    rows - r0);
    }
  }
  for (; j < n; ++j) {
    const int8_t* kj = k + j * kpitch;
    size_t r0 = 0;
    for (; r0 + kS8QkRows <= rows; r0 += kS8QkRows) {
      QkBlock1<int8_t, kS8QkRows>(qd + r0 * dp, dp, kj, s + r0 * pitch + j, pitch);
    }
    if (r0 < rows) {
      QkS8Rest<kS8QkRows - 1, false>(qd + r0 * dp, dp, kj, kpitch, s + r0 * pitch + j, pitch,
                                     rows - r0);
    }
  }
}

// o[r*opitch + u] = o[r*opitch + u] * alpha[r] + sum_{j<n} p[r*ppitch + j] *
// v[u*vpitch + j] for r < R, u < C. p rows are readable (and 0) up to n
// rounded up to the lanes; V columns are read only below n.
template <size_t R, size_t C>
HWY_INLINE void PvS8Block(const float* HWY_RESTRICT p, size_t ppitch, size_t n,
                          const int8_t* HWY_RESTRICT v, size_t vpitch, float* HWY_RESTRICT o,
                          size_t opitch, const float* HWY_RESTRICT alpha) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc[C][R];
  HWY_UNROLL(8)
  for (size_t u = 0; u < C; ++u) {
    HWY_UNROLL(4)
    for (size_t r = 0; r < R; ++r) acc[u][r] = hn::Zero(df);
  }
  size_t j = 0;
  for (; j + N <= n; j += N) {
    VF vv[C];
    HWY_UNROLL(8)
    for (size_t u = 0; u < C; ++u) vv[u] = LoadF32(df, v + u * vpitch + j);
    HWY_UNROLL(4)
    for (size_t r = 0; r < R; ++r) {
      const VF pr = hn::LoadU(df, p + r * ppitch + j);
      HWY_UNROLL(8)
      for (size_t u = 0; u < C; ++u) acc[u][r] = hn::MulAdd(pr, vv[u], acc[u][r]);
    }
  }
  if (j < n) {  // the last partial vector: V bytes from a zeroed copy
    HWY_ALIGN int8_t tail[C][64];
    VF vv[C];
    HWY_UNROLL(8)
    for (size_t u = 0; u < C; ++u) {
      std::memset(tail[u], 0, sizeof(tail[u]));
      std::memcpy(tail[u], v + u * vpitch + j, n - j);
      vv[u] = LoadF32(df, tail[u]);
    }
    HWY_UNROLL(4)
    for (size_t r = 0; r < R; ++r) {
      const VF pr = hn::LoadU(df, p + r * ppitch + j);
      HWY_UNROLL(8)
      for (size_t u = 0; u < C; ++u) acc[u][r] = hn::MulAdd(pr, vv[u], acc[u][r]);
    }
  }
  HWY_UNROLL(4)
  for (size_t r = 0; r < R; ++r) {
    HWY_ALIGN float t[C < 4 ? 4 : C];
    if constexpr (C % 4 == 0) {
      HWY_UNROLL(2)
      for (size_t u = 0; u < C; u += 4) {
        Sum4(df, acc[u][r], acc[u + 1][r], acc[u + 2][r], acc[u + 3][r], t + u);
      }
    } else {
      HWY_UNROLL(4)
      for (size_t u = 0; u < C; ++u) t[u] = hn::GetLane(hn::SumOfLanes(df, acc[u][r]));
    }
    float* orow = o + r * opitch;
    const float a = alpha[r];
    HWY_UNROLL(8)
    for (size_t u = 0; u < C; ++u) orow[u] = orow[u] * a + t[u];
  }
}

template <size_t R, size_t C>
HWY_INLINE void PvS8Rest(const float* HWY_RESTRICT p, size_t ppitch, size_t n,
                         const int8_t* HWY_RESTRICT v, size_t vpitch, float* HWY_RESTRICT o,
                         size_t opitch, const float* HWY_RESTRICT alpha, size_t rem) {
  if constexpr (R >= 1) {
    if (rem == R) return PvS8Block<R, C>(p, ppitch, n, v, vpitch, o, opitch, alpha);
    PvS8Rest<R - 1, C>(p, ppitch, n, v, vpitch, o, opitch, alpha, rem);
  }
}

// One block of C value dimensions for all rows (chunks of kS8PvRows).
template <size_t C>
HWY_INLINE void PvS8Cols(const float* HWY_RESTRICT p, size_t ppitch, size_t rows, size_t n,
                         const int8_t* HWY_RESTRICT v, size_t vpitch, float* HWY_RESTRICT o,
                         size_t opitch, const float* HWY_RESTRICT alpha) {
  size_t r0 = 0;
  for (; r0 + kS8PvRows <= rows; r0 += kS8PvRows) {
    PvS8Block<kS8PvRows, C>(p + r0 * ppitch, ppitch, n, v, vpitch, o + r0 * opitch, opitch,
                            alpha + r0);
  }
  if (r0 < rows) {
    PvS8Rest<kS8PvRows - 1, C>(p + r0 * ppitch, ppitch, n, v, vpitch, o + r0 * opitch, opitch,
                               alpha + r0, rows - r0);
  }
}

// All Dv value dimensions: blocks of kS8PvCols1 (a single row) or 4, then
// one by one.
HWY_INLINE void PvS8Tile(const float* HWY_RESTRICT p, size_t ppitch, size_t rows, size_t n,
                         const int8_t* HWY_RESTRICT v, size_t vpitch, size_t dv,
                         float* HWY_RESTRICT o, const float* HWY_RESTRICT alpha) {
  size_t c = 0;
  if (rows == 1) {
    for (; c + kS8PvCols1 <= dv; c += kS8PvCols1) {
      PvS8Block<1, kS8PvCols1>(p, ppitch, n, v + c * vpitch, vpitch, o + c, dv, alpha);
    }
  }
  for (; c + 4 <= dv; c += 4) PvS8Cols<4>(p, ppitch, rows, n, v + c * vpitch, vpitch, o + c, dv, alpha);
  for (; c < dv; ++c) PvS8Cols<1>(p, ppitch, rows, n, v + c * vpitch, vpitch, o + c, dv, alpha);
}

// Scratch of one worker (bytes, 64-byte aligned pieces): scores [rows][tkv]
// floats, alpha [rows] floats, the packed K tile [tkv][dp] int8 (pack_k).
struct S8Scratch {
  float* s;
  float* alpha;
  int8_t* kpack;
};
HWY_INLINE size_t S8Align(size_t bytes) { return (bytes + 63) & ~size_t{63}; }
HWY_INLINE S8Scratch S8ScratchOf(void* base, size_t rows, size_t tkv) {
  char* p = static_cast<char*>(base);
  S8Scratch sc;
  sc.s = reinterpret_cast<float*>(p);
  p += S8Align(rows * tkv * sizeof(float));
  sc.alpha = reinterpret_cast<float*>(p);
  p += S8Align(rows * sizeof(float));
  sc.kpack = reinterpret_cast<int8_t*>(p);
  return sc;
}

void DecodeS8SplitImpl(const ProblemS8& P, const PlanS8& pl, int64_t task, void* scratch,
                       float* HWY_RESTRICT partial) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t rows = static_cast<size_t>(P.G);
  const size_t dv = static_cast<size_t>(P.Dv);
  const size_t dp = static_cast<size_t>(pl.dp);
  const size_t tkv = static_cast<size_t>(pl.tkv);
  const int64_t split = task % pl.n_splits;
  const int64_t bg = task / pl.n_splits;
  const int64_t g = bg % P.Hkv, b = bg / P.Hkv;
  float* o = partial;
  float* m = partial + rows * dv;
  float* l = m + rows;
  std::memset(o, 0, rows * dv * sizeof(float));
  for (size_t r = 0; r < rows; ++r) {
    m[r] = kNegInfF;
    l[r] = 0.0f;
  }
  const int64_t n_b = P.n[b];
  const int64_t i0 = split * pl.split_len;
  const int64_t i1 = std::min(n_b, i0 + pl.split_len);
  if (i0 >= i1) return;
  const S8Scratch sc = S8ScratchOf(scratch, rows, tkv);
  const KvCacheS8Seq& seq = P.seqs[b];
  const size_t cap = static_cast<size_t>(P.cap);
  const size_t D = static_cast<size_t>(P.D);
  const int8_t* kbase = seq.k + static_cast<size_t>(g) * cap * D;
  const int8_t* vbase = seq.v + static_cast<size_t>(g) * dv * cap;
  const float* qd = P.qs + static_cast<size_t>(b * P.H + g * P.G) * dp;
  for (int64_t i = i0; i < i1;) {
    const size_t slot = static_cast<size_t>((P.first[b] + i) % P.cap);
    const size_t n = std::min({tkv, static_cast<size_t>(i1 - i), cap - slot});
    const size_t nv = (n + N - 1) / N * N;
    // Q.K.
    const int8_t* k = kbase + slot * D;
    size_t kpitch = D;
    if (pl.pack_k) {
      for (size_t j = 0; j < n; ++j) {
        std::memcpy(sc.kpack + j * dp, k + j * D, D);
        std::memset(sc.kpack + j * dp + D, 0, dp - D);
      }
      k = sc.kpack;
      kpitch = dp;
    }
    QkS8Tile(qd, rows, dp, k, kpitch, n, sc.s, tkv);
    // Online softmax per row (scores finite; the padding is -inf -> weight 0).
    for (size_t r = 0; r < rows; ++r) {
      float* row = sc.s + r * tkv;
      for (size_t j = n; j < nv; ++j) row[j] = kNegInfF;
      sc.alpha[r] = OnlineSoftmaxRow(df, row, nv, &m[r], &l[r]);
    }
    // P.V over the V columns of this tile.
    PvS8Tile(sc.s, tkv, rows, n, vbase + slot, cap, dv, o, sc.alpha);
    i += static_cast<int64_t>(n);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#endif  // include guard
