// kernels/flash_decode-inl.h — split-KV ("flash-decoding") attention for few
// query rows over a long KV cache.
//
// One task = (batch b, kv head hk, split s). Its rows are ALL G*Lq query rows
// of hk's group, so every K/V element of the split is read (and converted)
// exactly once. Keys [s*split_len, (s+1)*split_len) are processed in tiles of
// tkv with the online softmax; the task writes an unnormalised partial
// (O[rows][dvp], m[rows], l[rows]) in the log2 domain. MergeDecodeSplits
// (kernels_decode.cc) combines the splits of one (b, hk) in split order 0..S-1. The
// split length depends only on the shape, so results are bit-identical for
// any thread count.
//
// Scores are row-major here (s[r][j], vectorised over keys): Q.K is a dot
// product per (row, key) with a horizontal sum, which is cheap next to the
// memory traffic of a long KV cache.

#if defined(ATTNFLOW_KERNELS_FLASH_DECODE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNFLOW_KERNELS_FLASH_DECODE_INL_H_
#undef ATTNFLOW_KERNELS_FLASH_DECODE_INL_H_
#else
#define ATTNFLOW_KERNELS_FLASH_DECODE_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/flash_common-inl.h"
#include "kernels/internal.h"

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace kernels {
namespace HWY_NAMESPACE {

// Horizontal sums of four vectors: lane t of the result (t < 4) is the sum of
// all lanes of a_t. Transpose-add inside 128-bit blocks, then fold blocks.
HWY_INLINE void Sum4(DF df, VF a0, VF a1, VF a2, VF a3, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  out[0] = hn::GetLane(a0);
  out[1] = hn::GetLane(a1);
  out[2] = hn::GetLane(a2);
  out[3] = hn::GetLane(a3);
#else
  const hn::Repartition<uint64_t, DF> du64;
  const VF s01 = hn::Add(hn::InterleaveLower(df, a0, a1), hn::InterleaveUpper(df, a0, a1));
  const VF s23 = hn::Add(hn::InterleaveLower(df, a2, a3), hn::InterleaveUpper(df, a2, a3));
  const auto w01 = hn::BitCast(du64, s01), w23 = hn::BitCast(du64, s23);
  const VF t = hn::Add(hn::BitCast(df, hn::InterleaveLower(du64, w01, w23)),
                       hn::BitCast(df, hn::InterleaveUpper(du64, w01, w23)));
#if HWY_TARGET == HWY_EMU128 || HWY_ARCH_ARM || HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3
  hn::StoreU(t, df, out);
#else
  const hn::Half<DF> dh;
  const auto t2 = hn::Add(hn::LowerHalf(dh, t), hn::UpperHalf(dh, t));
#if HWY_TARGET <= HWY_AVX3
  const hn::Half<decltype(dh)> dq;
  const auto t4 = hn::Add(hn::LowerHalf(dq, t2), hn::UpperHalf(dq, t2));
  hn::StoreU(t4, dq, out);
#else
  hn::StoreU(t2, dh, out);
#endif
#endif
#endif  // HWY_SCALAR
}

// Query rows that share one loaded (converted) K vector in QkRows: 4 rows x
// 4 keys = 16 accumulators on AVX-512 (32 registers), 2 x 4 elsewhere. On
// AVX-512, whole groups of 8 live-or-dead rows first run as 8 rows x 2 keys
// (QkRowChunk8), the rest in chunks of kDecQkRows.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr size_t kDecQkRows = 4;
#else
constexpr size_t kDecQkRows = 2;
#endif

// Software prefetch plan of one decode tile (direct path only). The K/V
// streams are fetched one tile ahead and spread evenly over the tile's work,
// so that DRAM is busy during both the Q.K and the P.V pass:
//  - while the scores of key j are computed, K row j of the NEXT tile is
//    fetched towards L2, and K row j + kPfKeysAhead of this tile (already in
//    L2) towards L1;
//  - while P.V consumes key j, V row j of the next tile is fetched;
//  - the first tile of a split has no predecessor: its V rows are fetched
//    during its own Q.K pass (v_cur), its K rows by the L1 prefetch alone.
// The look-ahead is used only when the call's K/V bytes exceed
// kDecodeAheadBytes (the cache comes from DRAM). Below that it is pure
// instruction overhead (callgrind, AVX2 path, H=32 Hkv=8 D=128 F16 Lkv=2048:
// +20% instructions in DecodeSplit), so every tile then fetches its own V
// rows during its Q.K pass (v_cur) and K rows kPfKeysAhead ahead, as before.
// No software prefetch at all (DecodeNoPrefetch) when the call has at most
// kDecodeNoPrefetchRows query rows per kv head (MHA, G = 2 at Lq = 1) and
// its K/V bytes are at most kDecodeNoPrefetchBytes: with so little
// arithmetic per key, the per-key prefetch loop is a large share of the
// instructions, and data that small comes from L2/L3, where the hardware
// prefetchers keep up (kv18, 1 thread, min of 2000 calls: MHA F16 D=64
// Lkv=4096 191-204 us without vs 253-263 us with; MHA F16 D=128 Lkv=2048,
// BF16 D=64 and G=2 F16 D=64/128 also faster; G=4 and every 16 MiB case
// slower without, so they keep it).
// Addresses are integers (no C++ pointer is formed past the cache);
// prefetches never fault.
struct DecodePrefetch {
  uintptr_t k = 0;       // K row 0 of this tile (0 = no prefetch at all)
  uintptr_t v_cur = 0;   // V row 0 of this tile: first tile, or no look-ahead
  uintptr_t k_next = 0;  // K row 0 of the next tile of the split (0 = none)
  uintptr_t v_next = 0;  // V row 0 of the next tile
  size_t n_next = 0;     // keys of the next tile
  size_t k_stride = 0, v_stride = 0, bytes = 0;  // row strides, row length
};
constexpr size_t kPfKeysAhead = 8;
constexpr double kDecodeAheadBytes = 32.0 * 1024 * 1024;  // the L3 of this Zen 4
constexpr size_t kDecodeNoPrefetchRows = 2;
constexpr double kDecodeNoPrefetchBytes = 8.0 * 1024 * 1024;

// True when a decode call of this shape runs with no software prefetch (see
// above). Depends only on the shape; a prefetch never changes a value.
HWY_INLINE bool DecodeNoPrefetch(size_t rows, double kv_bytes) {
  return rows <= kDecodeNoPrefetchRows && kv_bytes <= kDecodeNoPrefetchBytes;
}

// Prefetches for key j of the Q.K pass (pf.k != 0): one loop over the row's
// cache lines (a loop per stream cost +16% instructions in DecodeSplit).
HWY_INLINE void PrefetchKey(const DecodePrefetch& pf, size_t j) {
#if defined(__GNUC__) || defined(__clang__)
  const uintptr_t k = pf.k + (j + kPfKeysAhead) * pf.k_stride;
  const uintptr_t v = pf.v_cur != 0 ? pf.v_cur + j * pf.v_stride : 0;
  const uintptr_t kn = pf.k_next != 0 && j < pf.n_next ? pf.k_next + j * pf.k_stride : 0;
  if (kn == 0) {
    for (size_t b = 0; b < pf.bytes; b += 64) {
      if (v != 0) __builtin_prefetch(reinterpret_cast<const void*>(v + b), 0, 2);
      __builtin_prefetch(reinterpret_cast<const void*>(k + b), 0, 3);
    }
  } else {
    for (size_t b = 0; b < pf.bytes; b += 64) {
      if (v != 0) __builtin_prefetch(reinterpret_cast<const void*>(v + b), 0, 2);
      __builtin_prefetch(reinterpret_cast<const void*>(k + b), 0, 3);
      __builtin_prefetch(reinterpret_cast<const void*>(kn + b), 0, 2);
    }
  }
#else
  (void)pf;
  (void)j;
#endif
}

// Prefetch for key j of the P.V pass.
HWY_INLINE void PrefetchValue(const DecodePrefetch& pf, size_t j) {
#if defined(__GNUC__) || defined(__clang__)
  if (pf.v_next == 0 || j >= pf.n_next) return;
  const uintptr_t v = pf.v_next + j * pf.v_stride;
  for (size_t b = 0; b < pf.bytes; b += 64) {
    __builtin_prefetch(reinterpret_cast<const void*>(v + b), 0, 2);
  }
#else
  (void)pf;
  (void)j;
#endif
}

// Scores of R query rows (qd, pitch dp) against the four keys at k, k +
// kpitch, k + 2 kpitch, k + 3 kpitch (T as in LoadF32, dp elements read):
// s[r*pitch + u] = q_r . k_u for u < 4. Each K vector is loaded (and
// converted) once and used by all R rows; each Q vector is loaded once per 4
// keys. Every (row, key) dot product accumulates over d in order in its own
// register and is reduced by Sum4, whose per-lane tree does not depend on the
// other three vectors, so a score does not depend on R or on its key's
// position. Shared by the fp32/F16/BF16 decode (QkRowChunk) and the int8 one.
template <typename T, size_t R>
HWY_INLINE void QkBlock4(const float* HWY_RESTRICT qd, size_t dp, const T* HWY_RESTRICT k,
                         size_t kpitch, float* HWY_RESTRICT s, size_t pitch) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc[4][R];
  HWY_UNROLL(4)
  for (size_t u = 0; u < 4; ++u) {
    HWY_UNROLL(8)
    for (size_t r = 0; r < R; ++r) acc[u][r] = hn::Zero(df);
  }
  for (size_t c = 0; c < dp; c += N) {
    VF kv[4];
    HWY_UNROLL(4)
    for (size_t u = 0; u < 4; ++u) kv[u] = LoadF32(df, k + u * kpitch + c);
    HWY_UNROLL(8)
    for (size_t r = 0; r < R; ++r) {
      const VF q = hn::LoadU(df, qd + r * dp + c);
      HWY_UNROLL(4)
      for (size_t u = 0; u < 4; ++u) acc[u][r] = hn::MulAdd(q, kv[u], acc[u][r]);
    }
  }
  HWY_UNROLL(8)
  for (size_t r = 0; r < R; ++r) Sum4(df, acc[0][r], acc[1][r], acc[2][r], acc[3][r], s + r * pitch);
}

// One key (QkBlock4's tail): s[r*pitch] = q_r . k for r < R, each reduced by
// SumOfLanes.
template <typename T, size_t R>
HWY_INLINE void QkBlock1(const float* HWY_RESTRICT qd, size_t dp, const T* HWY_RESTRICT k,
                         float* HWY_RESTRICT s, size_t pitch) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc[R];
  HWY_UNROLL(8)
  for (size_t r = 0; r < R; ++r) acc[r] = hn::Zero(df);
  for (size_t c = 0; c < dp; c += N) {
    const VF kv = LoadF32(df, k + c);
    HWY_UNROLL(8)
    for (size_t r = 0; r < R; ++r) acc[r] = hn::MulAdd(hn::LoadU(df, qd + r * dp + c), kv, acc[r]);
  }
  HWY_UNROLL(8)
  for (size_t r = 0; r < R; ++r) s[r * pitch] = hn::GetLane(hn::SumOfLanes(df, acc[r]));
}

// Scores of R query rows (qd, pitch dp) against keys [0, n): s[r*pitch + j] =
// q_r . k_j, four keys at a time (QkBlock4), then the last keys one by one
// (QkBlock1). The four keys' cache lines are read interleaved, which on its
// own defeated the hardware prefetchers (measured once: 1.5x a plain read at
// D = 128); the software prefetch of K rows 8 keys ahead (DecodePrefetch)
// covers that here.
template <typename T, size_t R>
HWY_INLINE void QkRowChunk(const float* HWY_RESTRICT qd, const T* HWY_RESTRICT k,
                           size_t kpitch, size_t dp, size_t n,
                           float* HWY_RESTRICT s, size_t pitch,
                           const DecodePrefetch& pf) {
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    if (pf.k != 0) {
      HWY_UNROLL(4)
      for (size_t u = 0; u < 4; ++u) PrefetchKey(pf, j + u);
    }
    QkBlock4<T, R>(qd, dp, k + j * kpitch, kpitch, s + j, pitch);
  }
  for (; j < n; ++j) {
    if (pf.k != 0) PrefetchKey(pf, j);
    QkBlock1<T, R>(qd, dp, k + j * kpitch, s + j, pitch);
  }
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// 8 query rows x 2 keys (16 accumulators): for G >= 8 every K vector is
// loaded and converted once for 8 rows instead of once per 4-row chunk. Each
// Q vector is loaded once per 2 keys. Pairs of (row, key) dot products are
// reduced by Sum4 as (r, j), (r, j+1), (r+1, j), (r+1, j+1); as in
// QkRowChunk a score's value does not depend on its neighbours. An odd last
// key runs QkRowChunk's single-key tail.
constexpr size_t kDecQkRows8 = 8;

template <typename T>
HWY_INLINE void QkRowChunk8(const float* HWY_RESTRICT qd, const T* HWY_RESTRICT k,
                            size_t kpitch, size_t dp, size_t n, float* HWY_RESTRICT s,
                            size_t pitch, const DecodePrefetch& pf) {
  constexpr size_t R = kDecQkRows8;
  const DF df;
  const size_t N = hn::Lanes(df);
  size_t j = 0;
  for (; j + 2 <= n; j += 2) {
    if (pf.k != 0) {
      PrefetchKey(pf, j);
      PrefetchKey(pf, j + 1);
    }
    VF acc[2][R];
    HWY_UNROLL(8)
    for (size_t r = 0; r < R; ++r) acc[0][r] = acc[1][r] = hn::Zero(df);
    const T* k0 = k + j * kpitch;
    for (size_t c = 0; c < dp; c += N) {
      const VF k0v = LoadF32(df, k0 + c);
      const VF k1v = LoadF32(df, k0 + kpitch + c);
      HWY_UNROLL(8)
      for (size_t r = 0; r < R; ++r) {
        const VF q = hn::Load(df, qd + r * dp + c);
        acc[0][r] = hn::MulAdd(q, k0v, acc[0][r]);
        acc[1][r] = hn::MulAdd(q, k1v, acc[1][r]);
      }
    }
    HWY_UNROLL(4)
    for (size_t r = 0; r < R; r += 2) {
      HWY_ALIGN float t[4];
      Sum4(df, acc[0][r], acc[1][r], acc[0][r + 1], acc[1][r + 1], t);
      s[r * pitch + j] = t[0];
      s[r * pitch + j + 1] = t[1];
      s[(r + 1) * pitch + j] = t[2];
      s[(r + 1) * pitch + j + 1] = t[3];
    }
  }
  if (j < n) {
    DecodePrefetch pf_tail = pf;
    if (pf_tail.k != 0) pf_tail.k += j * pf.k_stride;  // key j is key 0 there
    if (pf_tail.v_cur != 0) pf_tail.v_cur += j * pf.v_stride;
    pf_tail.k_next = 0;  // its rows past n_next are not fetched anyway
    QkRowChunk<T, 4>(qd, k + j * kpitch, kpitch, dp, n - j, s + j, pitch, pf_tail);
    QkRowChunk<T, 4>(qd + 4 * dp, k + j * kpitch, kpitch, dp, n - j, s + 4 * pitch + j,
                     pitch, DecodePrefetch{});
  }
}
#endif

template <typename T, size_t R>
HWY_INLINE void QkRowTail(const float* HWY_RESTRICT qd, const T* HWY_RESTRICT k,
                          size_t kpitch, size_t dp, size_t n, float* HWY_RESTRICT s,
                          size_t pitch, const DecodePrefetch& pf, size_t rem) {
  if constexpr (R >= 1) {
    if (rem == R) return QkRowChunk<T, R>(qd, k, kpitch, dp, n, s, pitch, pf);
    QkRowTail<T, R - 1>(qd, k, kpitch, dp, n, s, pitch, pf, rem);
  }
}

// s[r*pitch + j] = q_r . k_j for j < n and all n_rows rows (chunks of 8 rows
// on AVX-512, then of kDecQkRows; a chunk whose rows are all dead is skipped; dead rows inside a
// live chunk get scores, and P.V partials, that are discarded: their m = -inf,
// l = 0 keep them out of the merge). K rows are T (fp32 packed tile,
// or the caller's F32/F16/BF16 rows) with row pitch kpitch; dp (a multiple of
// the lane count) elements per row are read.
template <typename T>
HWY_INLINE void QkRows(const float* HWY_RESTRICT qd, size_t n_rows,
                       const T* HWY_RESTRICT k, size_t kpitch, size_t dp,
                       size_t n, float* HWY_RESTRICT s, size_t pitch,
                       const uint8_t* HWY_RESTRICT live, DecodePrefetch pf) {
  size_t r0 = 0;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  for (; r0 + kDecQkRows8 <= n_rows; r0 += kDecQkRows8) {
    bool any = false;
    for (size_t r = r0; r < r0 + kDecQkRows8; ++r) any |= live[r] != 0;
    if (!any) continue;
    QkRowChunk8<T>(qd + r0 * dp, k, kpitch, dp, n, s + r0 * pitch, pitch, pf);
    pf.k = 0;  // the first live chunk prefetched the whole tile
  }
#endif
  for (; r0 < n_rows; r0 += kDecQkRows) {
    const size_t rc = std::min(kDecQkRows, n_rows - r0);
    bool any = false;
    for (size_t r = r0; r < r0 + rc; ++r) any |= live[r] != 0;
    if (!any) continue;
    if (rc == kDecQkRows) {
      QkRowChunk<T, kDecQkRows>(qd + r0 * dp, k, kpitch, dp, n, s + r0 * pitch, pitch, pf);
    } else {
      QkRowTail<T, kDecQkRows - 1>(qd + r0 * dp, k, kpitch, dp, n, s + r0 * pitch,
                                   pitch, pf, rc);
    }
    pf.k = 0;  // the first live chunk prefetched the whole tile
  }
}

// P.V prefetch hook of a decode tile (PvTile's Pf): while the first live
// row block streams key j (first column chunk), V row j of the next tile is
// fetched.
struct DecPvPrefetch {
  const DecodePrefetch* pf;
  HWY_INLINE void operator()(size_t j) const { PrefetchValue(*pf, j); }
};

struct DecodeRows : RowScratch {  // + the per-row ranges, diagonal, slope, live flags
  size_t rows;
  float* qd;
  float* s;
  float* alpha;
  float* o;
  float* m;
  float* l;
  int64_t max_first, min_last;
};

// One row's online-softmax step over its scores row[0, nv) (the tile's keys,
// padded with -inf to whole vectors), with the row's running max *m and sum
// *l: M' = max(*m, max_j row[j]) (NaN when the tile max is NaN); mu = M', or
// 0 when M' = -inf (an all-masked row stays all zero instead of NaN);
// row[j] = 2^(row[j] - mu) in place; alpha = 2^(*m - mu); *l = *l * alpha +
// sum_j row[j] (lane-wise, then SumOfLanes); *m = M'. Returns alpha, the
// factor of the row's output accumulator. Shared by the fp32/F16/BF16 and the
// int8 decode.
HWY_INLINE float OnlineSoftmaxRow(DF df, float* HWY_RESTRICT row, size_t nv, float* m, float* l) {
  const size_t N = hn::Lanes(df);
  VF mx = hn::Set(df, kNegInfF);
  for (size_t j = 0; j < nv; j += N) mx = hn::Max(mx, hn::LoadU(df, row + j));
  const float tile_max = hn::GetLane(hn::MaxOfLanes(df, mx));
  const float m_old = *m;
  const float m_new = std::isnan(tile_max) ? tile_max : std::max(m_old, tile_max);
  const float mu = m_new == kNegInfF ? 0.0f : m_new;
  const VF muv = hn::Set(df, mu);
  VF sum = hn::Zero(df);
  for (size_t j = 0; j < nv; j += N) {
    const VF e = Exp2(df, hn::Sub(hn::LoadU(df, row + j), muv));
    hn::StoreU(e, df, row + j);
    sum = hn::Add(sum, e);
  }
  const float a = hn::GetLane(Exp2(df, hn::Set(df, m_old - mu)));
  *l = *l * a + hn::GetLane(hn::SumOfLanes(df, sum));
  *m = m_new;
  return a;
}

// One kv tile [js, js+n) of a decode split: scores, masks, online softmax,
// P.V. K/V rows are T with the given pitches (elements). kPrefetch: K/V are
// the caller's cache rows (not a packed tile), prefetched ahead of use;
// false for packed tiles and for the direct rows of a DecodeNoPrefetch call.
template <typename T, bool kPrefetch>
HWY_INLINE void DecodeTile(const Problem& P, const Plan& pl, const DecodeRows& R,
                           int64_t b, int64_t hk, int64_t js, size_t n,
                           const T* HWY_RESTRICT k, size_t kpitch,
                           const T* HWY_RESTRICT v, size_t vpitch, bool first_tile,
                           size_t n_next, bool ahead) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t rows = R.rows;
  const size_t dp = static_cast<size_t>(pl.dp), dvp = static_cast<size_t>(pl.dvp);
  const size_t pitch = static_cast<size_t>(pl.tkv);
  const size_t nv = (n + N - 1) / N * N;  // vector-padded length (<= pitch)
  float* s = R.s;
  const int64_t je = js + static_cast<int64_t>(n);
  DecodePrefetch pf;
  if constexpr (kPrefetch) {
    pf.k_stride = kpitch * sizeof(T);
    pf.v_stride = vpitch * sizeof(T);
    pf.bytes = dp * sizeof(T);
    pf.k = reinterpret_cast<uintptr_t>(k);
    if (first_tile || !ahead) pf.v_cur = reinterpret_cast<uintptr_t>(v);
    if (ahead && n_next > 0) {
      pf.k_next = pf.k + n * pf.k_stride;
      pf.v_next = reinterpret_cast<uintptr_t>(v) + n * pf.v_stride;
      pf.n_next = n_next;
    }
  } else {
    (void)first_tile;
    (void)n_next;
    (void)ahead;
  }
  QkRows<T>(R.qd, rows, k, kpitch, dp, n, s, pitch, R.live, pf);
  const bool need_range = !(js >= R.max_first && je - 1 <= R.min_last);
  if (P.softcap2 > 0.0f) SoftcapRows(s, pitch, rows, nv, P.softcap2, R.live);
  if (P.slope2 != nullptr) AlibiRows(s, pitch, rows, nv, js, R.diag, R.slope);
  if (P.mask != nullptr) {
    for (size_t r = 0; r < rows; ++r) {
      if (!R.live[r]) continue;
      const int64_t hl = static_cast<int64_t>(r) / P.Lq, i = static_cast<int64_t>(r) % P.Lq;
      ApplyMaskRow(P, b, hk * P.G + hl, i, js, n, s + r * pitch, 1);
    }
  }
  if (need_range) {
    for (size_t r = 0; r < rows; ++r) {
      if (!R.live[r]) continue;
      float* row = s + r * pitch;
      for (size_t j = 0; j < n; ++j) {
        const int64_t jj = js + static_cast<int64_t>(j);
        if (jj < R.first[r] || jj > R.last[r]) row[j] = kNegInfF;
      }
    }
  }
  // Pad to whole vectors after the masks (a NaN ALiBi slope must not turn
  // the padding into NaN).
  for (size_t r = 0; r < rows; ++r) {
    if (!R.live[r]) continue;
    float* row = s + r * pitch;
    for (size_t j = n; j < nv; ++j) row[j] = kNegInfF;
  }
  // Online softmax per row (vectorised over keys).
  for (size_t r = 0; r < rows; ++r) {
    if (!R.live[r]) {
      R.alpha[r] = 0.0f;
      continue;
    }
    R.alpha[r] = OnlineSoftmaxRow(df, s + r * pitch, nv, &R.m[r], &R.l[r]);
  }
  if (pf.v_next != 0) {
    const DecPvPrefetch hook{&pf};
    PvTile<T, DecPvPrefetch>(s, 1, pitch, n, v, vpitch, dvp, R.o, R.alpha, rows, R.live,
                             &hook);
  } else {
    PvTile<T>(s, 1, pitch, n, v, vpitch, dvp, R.o, R.alpha, rows, R.live);
  }
}

// kDirect: K/V rows are read in place as T (requires T == the k and v dtype,
// unit stride along D and D, Dv multiples of the lane count); otherwise every
// tile is packed (converted) to fp32 first.
template <typename T, bool kDirect>
void DecodeSplit(const Problem& P, const Plan& pl, int64_t task,
                 float* HWY_RESTRICT scratch, float* HWY_RESTRICT partial) {
  const ScratchLayout L = MakeScratchLayout(pl);
  const size_t rows = static_cast<size_t>(pl.rows);  // G * Lq
  const size_t dp = static_cast<size_t>(pl.dp), dvp = static_cast<size_t>(pl.dvp);

  const int64_t split = task % pl.n_splits;
  const int64_t bh = task / pl.n_splits;
  const int64_t hk = bh % P.Hkv;
  const int64_t b = bh / P.Hkv;
  const int64_t valid_kv = P.valid_kv[b];
  const int64_t diag_kv = P.diag_kv[b];

  DecodeRows R;
  R.rows = rows;
  R.qd = scratch + L.qt;
  R.s = scratch + L.st;
  R.alpha = scratch + L.alpha;
  static_cast<RowScratch&>(R) = RowScratchAt(scratch, L.row);
  // The partial is written in place: O [rows][dvp], then m [rows], l [rows].
  R.o = partial;
  R.m = partial + rows * dvp;
  R.l = R.m + rows;
  float* kt = scratch + L.kt;
  float* vt = scratch + L.vt;

  const int64_t s_begin = split * pl.split_len;
  const int64_t s_end = std::min(P.Lk, s_begin + pl.split_len) - 1;  // inclusive
  int64_t u_first = INT64_MAX, u_last = -1;
  R.max_first = -1;
  R.min_last = INT64_MAX;
  for (size_t r = 0; r < rows; ++r) {
    const int64_t hl = static_cast<int64_t>(r) / P.Lq, i = static_cast<int64_t>(r) % P.Lq;
    const KeyRange kr = VisibleKeys(P.causal, P.window_left, P.window_right, i,
                                    P.Lq, diag_kv, valid_kv);
    const int64_t f = std::max(kr.first, s_begin), la = std::min(kr.last, s_end);
    R.diag[r] = static_cast<int32_t>(Diagonal(i, P.Lq, diag_kv));
    R.slope[r] = P.slope2 != nullptr ? P.slope2[b * P.slope_bs + hk * P.G + hl] : 0.0f;
    R.first[r] = static_cast<int32_t>(f);
    R.last[r] = static_cast<int32_t>(la);
    R.live[r] = f <= la;
    R.m[r] = kNegInfF;
    R.l[r] = 0.0f;
    if (!R.live[r]) continue;
    u_first = std::min(u_first, f);
    u_last = std::max(u_last, la);
    R.max_first = std::max(R.max_first, f);
    R.min_last = std::min(R.min_last, la);
  }
  std::memset(R.o, 0, rows * dvp * sizeof(float));
  if (u_last < u_first) return;

  // Q rows [rows][dp], pre-scaled into the log2 domain, zero padded.
  for (size_t r = 0; r < rows; ++r) {
    const int64_t hl = static_cast<int64_t>(r) / P.Lq, i = static_cast<int64_t>(r) % P.Lq;
    float* dst = R.qd + r * dp;
    const float* qrow = P.q + b * P.qs[0] + (hk * P.G + hl) * P.qs[1] + i * P.qs[2];
    for (int64_t d = 0; d < P.D; ++d) dst[d] = qrow[d * P.qs[3]] * P.scale2;
    for (size_t d = static_cast<size_t>(P.D); d < dp; ++d) dst[d] = 0.0f;
  }

  const int64_t tkv = pl.tkv;
  const double kv_bytes = static_cast<double>(P.B) * static_cast<double>(P.Hkv) *
                          static_cast<double>(P.Lk) * static_cast<double>(P.D + P.Dv) *
                          static_cast<double>(sizeof(T));
  const bool ahead = kv_bytes > kDecodeAheadBytes;
  const bool no_prefetch = DecodeNoPrefetch(rows, kv_bytes);
  for (int64_t js = u_first; js <= u_last; js += tkv) {
    const int64_t je = std::min(js + tkv, u_last + 1);
    const size_t n = static_cast<size_t>(je - js);
    const size_t n_next = static_cast<size_t>(std::min(tkv, std::max<int64_t>(0, u_last + 1 - je)));
    if constexpr (kDirect) {
      const T* k = static_cast<const T*>(P.k) + b * P.ks[0] + hk * P.ks[1] + js * P.ks[2];
      const T* v = static_cast<const T*>(P.v) + b * P.vs[0] + hk * P.vs[1] + js * P.vs[2];
      if (no_prefetch) {
        DecodeTile<T, false>(P, pl, R, b, hk, js, n, k, static_cast<size_t>(P.ks[2]), v,
                             static_cast<size_t>(P.vs[2]), js == u_first, n_next, false);
        continue;
      }
      DecodeTile<T, true>(P, pl, R, b, hk, js, n, k, static_cast<size_t>(P.ks[2]), v,
                          static_cast<size_t>(P.vs[2]), js == u_first, n_next, ahead);
    } else {
      PackKvTile(P.k, P.kt, P.ks, b, hk, js, static_cast<int64_t>(n),
                 static_cast<int64_t>(n), P.D, static_cast<int64_t>(dp), kt);
      PackKvTile(P.v, P.vt, P.vs, b, hk, js, static_cast<int64_t>(n),
                 static_cast<int64_t>(n), P.Dv, static_cast<int64_t>(dvp), vt);
      DecodeTile<float, false>(P, pl, R, b, hk, js, n, kt, dp, vt, dvp, js == u_first, n_next,
                               false);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#endif  // include guard
