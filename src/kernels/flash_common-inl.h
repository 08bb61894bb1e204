// kernels/flash_common-inl.h — per-target building blocks shared by the tiled
// prefill and split-KV decode kernels: exp2, tile packing (with F16/BF16 -> F32
// conversion), the register-blocked Q.K^T and P.V micro-kernels, the fused
// max/exp/sum online-softmax step and the mask appliers.
//
// Compiled once per Highway target (included from kernels_prefill.cc and
// kernels_decode.cc through
// hwy/foreach_target.h). Scores are kept in the log2 domain: the packed Q tile
// is pre-multiplied by scale*log2(e), ALiBi slopes and float masks are
// multiplied by log2(e), and probabilities are exp2(s - m).

#if defined(ATTNFLOW_KERNELS_FLASH_COMMON_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNFLOW_KERNELS_FLASH_COMMON_INL_H_
#undef ATTNFLOW_KERNELS_FLASH_COMMON_INL_H_
#else
#define ATTNFLOW_KERNELS_FLASH_COMMON_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/internal.h"

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// Register blocking per target. x86 AVX-512 has 32 vector registers, the
// other targets 16 (AVX2/SSE4) or 32 (NEON; kept conservative).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kQkKeys = 8;   // QK: 8 keys x 2 row-vectors = 16 accumulators
constexpr int kPvRows = 4;   // PV: 4 rows x 4 dv-vectors  = 16 accumulators
#else
constexpr int kQkKeys = 4;   // 4 x 2 = 8 accumulators
constexpr int kPvRows = 4;   // PV: 4 rows x 2 dv-vectors
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kPvVecs = 4;
#else
constexpr int kPvVecs = 2;
#endif

// ---------------------------------------------------------------------------
// exp2 for x <= 0 (x = s - m). Cephes exp2f minimax polynomial on
// [-0.5, 0.5], relative error ~2e-7. x < -126 (incl. -inf) gives exactly 0.
// n = round(x) via the 1.5*2^23 "magic" add: the float t = x + magic holds n
// in its low mantissa bits, so (bits(t) + 127) << 23 is the float 2^n (the
// high bits of magic shift out). NaN propagates: x86 max returns its second
// operand when either is NaN; Arm's Max (vmaxnm) returns the number, so there
// a NaN input is passed through explicitly (else a NaN score would be
// swallowed and its row come out finite).
HWY_INLINE VF Exp2(DF df, VF x) {
  const DI di;
  const VF magic = hn::Set(df, 12582912.0f);  // 1.5 * 2^23
  const VF xc = hn::Max(hn::Set(df, -127.0f), x);
  const VF t = hn::Add(xc, magic);
  const VF n = hn::Sub(t, magic);
  const VF f = hn::Sub(xc, n);
  VF p = hn::Set(df, 1.535336188319500E-4f);
  p = hn::MulAdd(p, f, hn::Set(df, 1.339887440266574E-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 9.618437357674640E-3f));
  p = hn::MulAdd(p, f, hn::Set(df, 5.550332471162809E-2f));
  p = hn::MulAdd(p, f, hn::Set(df, 2.402264791363012E-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 6.931472028550421E-1f));
  p = hn::MulAdd(p, f, hn::Set(df, 1.0f));
  const VI e = hn::ShiftLeft<23>(hn::Add(hn::BitCast(di, t), hn::Set(di, 127)));
  const VF r = hn::Mul(p, hn::BitCast(df, e));
#if HWY_ARCH_ARM
  return hn::IfThenElse(hn::IsNaN(x), x, hn::IfThenZeroElse(hn::Lt(x, hn::Set(df, -126.0f)), r));
#else
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(df, -126.0f)), r);
#endif
}

// ---------------------------------------------------------------------------
// Conversion of one row of n elements (element stride `stride`) to fp32.
HWY_INLINE void ConvertRowF32(const float* HWY_RESTRICT src, int64_t stride,
                              int64_t n, float* HWY_RESTRICT dst) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  if (stride == 1) {  // inline vector copy (a memcpy call per row is too slow)
    for (; i + N <= n; i += N) hn::StoreU(hn::LoadU(df, src + i), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = src[i * stride];
}

template <typename HT>  // hwy::float16_t or hwy::bfloat16_t
HWY_INLINE void ConvertRowHalf(const uint16_t* HWY_RESTRICT src, int64_t stride,
                               int64_t n, float* HWY_RESTRICT dst, bool is_bf16) {
  const DF df;
  const hn::Rebind<HT, DF> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  if (stride == 1) {
    for (; i + N <= n; i += N) {
      const auto h = hn::LoadU(dh, reinterpret_cast<const HT*>(src + i));
      hn::StoreU(hn::PromoteTo(df, h), df, dst + i);
    }
  }
  for (; i < n; ++i) {
    const uint16_t bits = src[i * stride];
    dst[i] = is_bf16 ? BF16ToF32(bits) : F16ToF32(bits);
  }
}

HWY_INLINE void ConvertRow(const void* src, DType t, int64_t stride, int64_t n,
                           float* HWY_RESTRICT dst) {
  switch (t) {
    case DType::kF16:
      ConvertRowHalf<hwy::float16_t>(static_cast<const uint16_t*>(src), stride,
                                     n, dst, false);
      break;
    case DType::kBF16:
      ConvertRowHalf<hwy::bfloat16_t>(static_cast<const uint16_t*>(src), stride,
                                      n, dst, true);
      break;
    default:
      ConvertRowF32(static_cast<const float*>(src), stride, n, dst);
      break;
  }
}

// Packs keys [j0, j0+n) of kv head (b, hk) into dst[j][0..width), row stride
// `pitch` (>= width, the pad columns are zeroed). Rows n..n_pad are zeroed.
HWY_INLINE void PackKvTile(const void* base, DType t, const int64_t* s,
                           int64_t b, int64_t hk, int64_t j0, int64_t n,
                           int64_t n_pad, int64_t width, int64_t pitch,
                           float* HWY_RESTRICT dst) {
  const size_t es = DTypeSize(t);
  const char* p0 = static_cast<const char*>(base) +
                   static_cast<int64_t>(es) * (b * s[0] + hk * s[1]);
  for (int64_t j = 0; j < n; ++j) {
    const char* row = p0 + static_cast<int64_t>(es) * ((j0 + j) * s[2]);
    float* d = dst + j * pitch;
    ConvertRow(row, t, s[3], width, d);
    for (int64_t c = width; c < pitch; ++c) d[c] = 0.0f;
  }
  for (int64_t j = n; j < n_pad; ++j) {
    std::memset(dst + j * pitch, 0, static_cast<size_t>(pitch) * sizeof(float));
  }
}

// ---------------------------------------------------------------------------
// Q.K^T micro-kernel, "St" layout: st[j * rows + i] = sc * sum_d
// qt[d*rows+i] * k[j*kpitch+d] for a block of kQkKeys keys x 2 row-vectors.
// The K element is broadcast (an embedded-broadcast FMA operand on AVX-512),
// the transposed Q tile supplies whole vectors of query rows. Returns the
// block's running max per row-vector through mx0/mx1 (fused into the
// epilogue).
//
// Accuracy: each dot product is an FMA chain over chunks of kQkChunk terms
// whose sums are added in order (a two-level sum; 64 keeps D <= 64 free of
// the spill of the running sum, which goes through st in L1), and the scale
// (scale * log2 e) multiplies the finished sum once instead of every Q
// element. With the two-level P.V sum (PvBlock) this brings the tiled
// prefill's float32 error to at most ~1.7x that of torch's fused kernel on
// the seeded survey of python/tests/test_accuracy_survey.py (it was up to
// 3.9x with a pre-scaled Q and single FMA chains; docs/kernels.md).
constexpr size_t kQkChunk = 64;

template <size_t kDim>
HWY_INLINE void QkBlock(DF df, const float* HWY_RESTRICT qt, size_t rows,
                        const float* HWY_RESTRICT kp, size_t kpitch,
                        size_t dim_rt, VF sc, VF sc_lo, float* HWY_RESTRICT st, VF& mx0,
                        VF& mx1) {
  const size_t N = hn::Lanes(df);
  const size_t dim = kDim ? kDim : dim_rt;
  VF a0[kQkKeys], a1[kQkKeys];
  for (size_t e0 = 0; e0 < dim; e0 += kQkChunk) {
    const size_t e1 = e0 + kQkChunk < dim ? e0 + kQkChunk : dim;
    HWY_UNROLL(16)
    for (int r = 0; r < kQkKeys; ++r) {
      a0[r] = hn::Zero(df);
      a1[r] = hn::Zero(df);
    }
    for (size_t e = e0; e < e1; ++e) {
      const VF q0 = hn::Load(df, qt + e * rows);
      const VF q1 = hn::Load(df, qt + e * rows + N);
      HWY_UNROLL(16)
      for (int r = 0; r < kQkKeys; ++r) {
        const VF kb = hn::Set(df, kp[r * kpitch + e]);
        a0[r] = hn::MulAdd(q0, kb, a0[r]);
        a1[r] = hn::MulAdd(q1, kb, a1[r]);
      }
    }
    if (e0 > 0) {  // add the running sum of the previous chunks
      HWY_UNROLL(16)
      for (int r = 0; r < kQkKeys; ++r) {
        a0[r] = hn::Add(a0[r], hn::Load(df, st + r * rows));
        a1[r] = hn::Add(a1[r], hn::Load(df, st + r * rows + N));
      }
    }
    if (e1 < dim) {
      HWY_UNROLL(16)
      for (int r = 0; r < kQkKeys; ++r) {
        hn::Store(a0[r], df, st + r * rows);
        hn::Store(a1[r], df, st + r * rows + N);
      }
    }
  }
  HWY_UNROLL(16)
  for (int r = 0; r < kQkKeys; ++r) {
    a0[r] = hn::MulAdd(a0[r], sc, hn::Mul(a0[r], sc_lo));
    a1[r] = hn::MulAdd(a1[r], sc, hn::Mul(a1[r], sc_lo));
    hn::Store(a0[r], df, st + r * rows);
    hn::Store(a1[r], df, st + r * rows + N);
    mx0 = hn::Max(mx0, a0[r]);
    mx1 = hn::Max(mx1, a1[r]);
  }
}

// One row-vector x kKeys keys (the single row-vector left when the tile has
// an odd number of row-vectors, e.g. 16 query rows on AVX-512). Same
// per-score arithmetic (the same chunked FMA chains over e in order, the
// same scaling) as QkBlock, so a score does not depend on which block
// computed it.
template <size_t kDim, int kKeys>
HWY_INLINE void QkBlock1(DF df, const float* HWY_RESTRICT qt, size_t rows,
                         const float* HWY_RESTRICT kp, size_t kpitch,
                         size_t dim_rt, VF sc, VF sc_lo, float* HWY_RESTRICT st, VF& mx) {
  const size_t dim = kDim ? kDim : dim_rt;
  VF a[kKeys];
  for (size_t e0 = 0; e0 < dim; e0 += kQkChunk) {
    const size_t e1 = e0 + kQkChunk < dim ? e0 + kQkChunk : dim;
    HWY_UNROLL(16)
    for (int r = 0; r < kKeys; ++r) a[r] = hn::Zero(df);
    for (size_t e = e0; e < e1; ++e) {
      const VF q0 = hn::Load(df, qt + e * rows);
      HWY_UNROLL(16)
      for (int r = 0; r < kKeys; ++r) {
        a[r] = hn::MulAdd(q0, hn::Set(df, kp[r * kpitch + e]), a[r]);
      }
    }
    if (e0 > 0) {
      HWY_UNROLL(16)
      for (int r = 0; r < kKeys; ++r) a[r] = hn::Add(a[r], hn::Load(df, st + r * rows));
    }
    if (e1 < dim) {
      HWY_UNROLL(16)
      for (int r = 0; r < kKeys; ++r) hn::Store(a[r], df, st + r * rows);
    }
  }
  HWY_UNROLL(16)
  for (int r = 0; r < kKeys; ++r) {
    a[r] = hn::MulAdd(a[r], sc, hn::Mul(a[r], sc_lo));
    hn::Store(a[r], df, st + r * rows);
    mx = hn::Max(mx, a[r]);
  }
}

// Whole tile: st[j][i] = sc * q_i . k_j for j < n_keys and i < rows (rows a multiple of the
// lane count N: pairs of row-vectors, then at most one single row-vector).
// Full blocks of kQkKeys keys read K rows at kp (pitch kpitch: the packed
// tile, or the caller's F32 rows in place); a partial last block reads `tail`
// (kQkKeys zero-padded rows, pitch tail_pitch) so that nothing past the last
// key is touched. tile_max[i] = max over j < n_keys (only meaningful when no
// mask is applied afterwards). Row-vector pairs whose rows are all inactive
// are skipped (rowpair_live[i / (2N)]).
template <size_t kDim>
HWY_INLINE void QkTile(const float* HWY_RESTRICT qt, size_t rows,
                       const float* HWY_RESTRICT kp, size_t kpitch,
                       const float* HWY_RESTRICT tail, size_t tail_pitch,
                       size_t dim, size_t n_keys, float sc, float sc_lo, float* HWY_RESTRICT st,
                       float* HWY_RESTRICT tile_max,
                       const uint8_t* HWY_RESTRICT rowpair_live) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF scv = hn::Set(df, sc);
  const VF sclv = hn::Set(df, sc_lo);
  const size_t full_keys = n_keys / kQkKeys * kQkKeys;
  size_t i0 = 0;
  for (; i0 + 2 * N <= rows; i0 += 2 * N) {
    if (!rowpair_live[i0 / (2 * N)]) continue;
    VF mx0 = hn::Set(df, kNegInfF), mx1 = mx0;
    for (size_t j = 0; j < full_keys; j += kQkKeys) {
      QkBlock<kDim>(df, qt + i0, rows, kp + j * kpitch, kpitch, dim, scv, sclv,
                    st + j * rows + i0, mx0, mx1);
    }
    if (full_keys < n_keys) {
      // Partial last block: padded K rows are zero; keep them out of the max.
      const size_t j = full_keys;
      VF d0 = hn::Set(df, kNegInfF), d1 = d0;
      QkBlock<kDim>(df, qt + i0, rows, tail, tail_pitch, dim, scv, sclv, st + j * rows + i0,
                    d0, d1);
      for (size_t jj = j; jj < n_keys; ++jj) {
        mx0 = hn::Max(mx0, hn::Load(df, st + jj * rows + i0));
        mx1 = hn::Max(mx1, hn::Load(df, st + jj * rows + i0 + N));
      }
    }
    hn::Store(mx0, df, tile_max + i0);
    hn::Store(mx1, df, tile_max + i0 + N);
  }
  if (i0 < rows && rowpair_live[i0 / (2 * N)]) {  // one row-vector left
    VF mx = hn::Set(df, kNegInfF);
    size_t j = 0;
    // Two key blocks at once keep as many accumulators as QkBlock.
    for (; j + 2 * kQkKeys <= full_keys; j += 2 * kQkKeys) {
      QkBlock1<kDim, 2 * kQkKeys>(df, qt + i0, rows, kp + j * kpitch, kpitch, dim, scv, sclv,
                                  st + j * rows + i0, mx);
    }
    for (; j < full_keys; j += kQkKeys) {
      QkBlock1<kDim, kQkKeys>(df, qt + i0, rows, kp + j * kpitch, kpitch, dim, scv, sclv,
                              st + j * rows + i0, mx);
    }
    if (full_keys < n_keys) {
      VF d = hn::Set(df, kNegInfF);
      QkBlock1<kDim, kQkKeys>(df, qt + i0, rows, tail, tail_pitch, dim, scv, sclv,
                              st + j * rows + i0, d);
      for (size_t jj = j; jj < n_keys; ++jj) mx = hn::Max(mx, hn::Load(df, st + jj * rows + i0));
    }
    hn::Store(mx, df, tile_max + i0);
  }
}

// Loads N elements of T (float, hwy::float16_t, hwy::bfloat16_t, int8_t) as
// fp32 (exact for each).
template <typename T>
HWY_INLINE VF LoadF32(DF df, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else if constexpr (std::is_same_v<T, int8_t>) {
    const hn::Rebind<int8_t, DF> d8;
    const hn::RebindToSigned<DF> di;
    return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p)));
  } else {
#if HWY_TARGET == HWY_SCALAR
    uint16_t bits;
    std::memcpy(&bits, p, 2);
    return hn::Set(df, std::is_same_v<T, hwy::bfloat16_t> ? BF16ToF32(bits) : F16ToF32(bits));
#else
    const hn::Rebind<T, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, p));
#endif
  }
}

// ---------------------------------------------------------------------------
// P.V prefetch hook: PvTile calls (*pf)(j) once per key j of its first live
// row block's first column chunk, before that key's V row is loaded (decode
// fetches the next tile's V row j there). The default hook is empty and its
// pointer null, so the prefill P.V compiles exactly as without a hook. A
// hook only issues prefetches: it cannot change a value.
struct NoPvPrefetch {
  HWY_INLINE void operator()(size_t /*j*/) const {}
};

// P.V micro-kernel: o[r][c] = o[r][c] * alpha[r] + sum_{j<n} p[j*pk + r*pr] *
// v[j*vpitch + c] for kRows rows and kVecs vectors of columns (the sum over
// j accumulated from zero, then fused with the rescaled o).
// kJ > 1 keeps kJ independent accumulator sets (consecutive keys) to hide
// the FMA latency when kRows * kVecs is small (decode); they are added in a
// fixed order at the end. V elements are T (converted on load). pf: the
// prefetch hook, null for none.
template <int kRows, int kVecs, int kJ = 1, typename T = float, class Pf = NoPvPrefetch>
HWY_INLINE void PvBlock(DF df, const float* HWY_RESTRICT p, size_t pk, size_t pr,
                        size_t n, const T* HWY_RESTRICT v, size_t vpitch,
                        float* HWY_RESTRICT o, size_t opitch,
                        const float* HWY_RESTRICT alpha, const Pf* pf = nullptr) {
  const size_t N = hn::Lanes(df);
  VF acc[kJ][kRows][kVecs];
  HWY_UNROLL(16)
  for (int r = 0; r < kRows; ++r) {
    HWY_UNROLL(16)
    for (int c = 0; c < kVecs; ++c) {
      HWY_UNROLL(16)
      for (int u = 0; u < kJ; ++u) acc[u][r][c] = hn::Zero(df);
    }
  }
  size_t j = 0;
  for (; j + kJ <= n; j += kJ) {
    HWY_UNROLL(16)
    for (int u = 0; u < kJ; ++u) {
      if (pf != nullptr) (*pf)(j + u);
      VF vv[kVecs];
      HWY_UNROLL(16)
      for (int c = 0; c < kVecs; ++c) vv[c] = LoadF32(df, v + (j + u) * vpitch + c * N);
      HWY_UNROLL(16)
      for (int r = 0; r < kRows; ++r) {
        const VF pb = hn::Set(df, p[(j + u) * pk + r * pr]);
        HWY_UNROLL(16)
        for (int c = 0; c < kVecs; ++c) acc[u][r][c] = hn::MulAdd(pb, vv[c], acc[u][r][c]);
      }
    }
  }
  for (; j < n; ++j) {
    if (pf != nullptr) (*pf)(j);
    VF vv[kVecs];
    HWY_UNROLL(16)
    for (int c = 0; c < kVecs; ++c) vv[c] = LoadF32(df, v + j * vpitch + c * N);
    HWY_UNROLL(16)
    for (int r = 0; r < kRows; ++r) {
      const VF pb = hn::Set(df, p[j * pk + r * pr]);
      HWY_UNROLL(16)
      for (int c = 0; c < kVecs; ++c) acc[0][r][c] = hn::MulAdd(pb, vv[c], acc[0][r][c]);
    }
  }
  HWY_UNROLL(16)
  for (int r = 0; r < kRows; ++r) {
    const VF a = hn::Set(df, alpha[r]);
    HWY_UNROLL(16)
    for (int c = 0; c < kVecs; ++c) {
      VF sum = acc[0][r][c];
      HWY_UNROLL(16)
      for (int u = 1; u < kJ; ++u) sum = hn::Add(sum, acc[u][r][c]);
      // The tile's sum is formed on its own, then added to the rescaled
      // running output: a two-level sum (more accurate than continuing the
      // running output's FMA chain through every key; the same op count).
      hn::Store(hn::MulAdd(hn::Load(df, o + r * opitch + c * N), a, sum), df, o + r * opitch + c * N);
    }
  }
}

// Column chunk width (vectors) of the P.V micro-kernel: 4 (x kPvRows rows)
// normally; one or two rows (decode) on AVX-512 take 8 vectors at once so
// that a D = 128 V row is streamed once, not twice.
template <int kRows>
constexpr int PvChunk() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return kRows <= 2 ? 8 : kPvVecs;
#else
  return kPvVecs;
#endif
}

template <int kRows, int kJ, typename T, int kVecs, class Pf>
HWY_INLINE void PvRemainder(DF df, const float* HWY_RESTRICT p, size_t pk,
                            size_t pr, size_t n, const T* HWY_RESTRICT v,
                            size_t vpitch, float* HWY_RESTRICT o, size_t opitch,
                            const float* HWY_RESTRICT alpha, size_t rem, const Pf* pf) {
  if constexpr (kVecs >= 1) {
    if (rem == static_cast<size_t>(kVecs)) {
      PvBlock<kRows, kVecs, kJ, T, Pf>(df, p, pk, pr, n, v, vpitch, o, opitch, alpha, pf);
      return;
    }
    PvRemainder<kRows, kJ, T, kVecs - 1, Pf>(df, p, pk, pr, n, v, vpitch, o, opitch,
                                              alpha, rem, pf);
  }
}

// kRows rows over all n_vecs column vectors, in chunks of PvChunk<kRows>().
// pf (may be null) is used by the first chunk only.
template <int kRows, int kJ = 1, typename T = float, class Pf = NoPvPrefetch>
HWY_INLINE void PvRows(DF df, const float* HWY_RESTRICT p, size_t pk, size_t pr,
                       size_t n, const T* HWY_RESTRICT v, size_t vpitch,
                       float* HWY_RESTRICT o, size_t opitch,
                       const float* HWY_RESTRICT alpha, size_t n_vecs,
                       const Pf* pf = nullptr) {
  constexpr int kChunk = PvChunk<kRows>();
  const size_t N = hn::Lanes(df);
  size_t c = 0;
  for (; c + kChunk <= n_vecs; c += kChunk) {
    PvBlock<kRows, kChunk, kJ, T, Pf>(df, p, pk, pr, n, v + c * N, vpitch, o + c * N,
                                      opitch, alpha, pf);
    pf = nullptr;
  }
  if (c < n_vecs) {
    PvRemainder<kRows, kJ, T, kChunk - 1, Pf>(df, p, pk, pr, n, v + c * N, vpitch,
                                              o + c * N, opitch, alpha, n_vecs - c, pf);
  }
}

// All rows: rows [0, n_rows) of o (pitch dvp). Row groups whose rows are all
// inactive are skipped (row_live[r] == 0). Two leftover rows share each V
// load; a last single row uses two accumulator sets (kJ = 2) to hide the FMA
// latency. pf (may be null): the prefetch hook, called by the first live row
// block only (see NoPvPrefetch); it does not change the blocking or the order.
template <typename T = float, class Pf = NoPvPrefetch>
HWY_INLINE void PvTile(const float* HWY_RESTRICT p, size_t pk, size_t pr,
                       size_t n_keys, const T* HWY_RESTRICT v, size_t vpitch,
                       size_t dvp, float* HWY_RESTRICT o,
                       const float* HWY_RESTRICT alpha, size_t n_rows,
                       const uint8_t* HWY_RESTRICT row_live, const Pf* pf = nullptr) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t n_vecs = dvp / N;
  size_t r = 0;
  for (; r + kPvRows <= n_rows; r += kPvRows) {
    bool any = false;
    for (int t = 0; t < kPvRows; ++t) any |= row_live[r + t] != 0;
    if (!any) continue;
    PvRows<kPvRows, 1, T, Pf>(df, p + r * pr, pk, pr, n_keys, v, vpitch, o + r * dvp,
                              dvp, alpha + r, n_vecs, pf);
    pf = nullptr;
  }
  if (r + 2 <= n_rows && (row_live[r] || row_live[r + 1])) {
    PvRows<2, 1, T, Pf>(df, p + r * pr, pk, pr, n_keys, v, vpitch, o + r * dvp, dvp,
                        alpha + r, n_vecs, pf);
    pf = nullptr;
    r += 2;
  }
  for (; r < n_rows; ++r) {
    if (!row_live[r]) continue;
    PvRows<1, 2, T, Pf>(df, p + r * pr, pk, pr, n_keys, v, vpitch, o + r * dvp, dvp,
                        alpha + r, n_vecs, pf);
    pf = nullptr;
  }
}

// ---------------------------------------------------------------------------
// Online-softmax step, St layout (vectorised over query rows). For each row:
//   m_new = max(m, tile_max); mu = (m_new == -inf ? 0 : m_new)
//   alpha = exp2(m - mu); st[j] = exp2(st[j] - mu); l = l*alpha + sum_j st[j]
// If `tile_max` is null, the max is computed here (after masking).
HWY_INLINE void SoftmaxCols(float* HWY_RESTRICT st, size_t rows, size_t n_keys,
                            const float* HWY_RESTRICT tile_max,
                            float* HWY_RESTRICT m, float* HWY_RESTRICT l,
                            float* HWY_RESTRICT alpha,
                            const uint8_t* HWY_RESTRICT rowpair_live) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF ninf = hn::Set(df, kNegInfF);
  for (size_t i = 0; i < rows; i += N) {
    if (!rowpair_live[i / (2 * N)]) continue;
    VF mx;
    if (tile_max != nullptr) {
      mx = hn::Load(df, tile_max + i);
    } else {
      VF mx0 = ninf, mx1 = ninf;
      size_t j = 0;
      for (; j + 2 <= n_keys; j += 2) {
        mx0 = hn::Max(mx0, hn::Load(df, st + j * rows + i));
        mx1 = hn::Max(mx1, hn::Load(df, st + (j + 1) * rows + i));
      }
      if (j < n_keys) mx0 = hn::Max(mx0, hn::Load(df, st + j * rows + i));
      mx = hn::Max(mx0, mx1);
    }
    const VF m_old = hn::Load(df, m + i);
    const VF m_new = hn::Max(m_old, mx);
    const VF mu = hn::IfThenZeroElse(hn::Eq(m_new, ninf), m_new);
    const VF a = Exp2(df, hn::Sub(m_old, mu));
    VF s0 = hn::Zero(df), s1 = hn::Zero(df);
    size_t j = 0;
    for (; j + 2 <= n_keys; j += 2) {
      float* p0 = st + j * rows + i;
      float* p1 = p0 + rows;
      const VF e0 = Exp2(df, hn::Sub(hn::Load(df, p0), mu));
      const VF e1 = Exp2(df, hn::Sub(hn::Load(df, p1), mu));
      hn::Store(e0, df, p0);
      hn::Store(e1, df, p1);
      s0 = hn::Add(s0, e0);
      s1 = hn::Add(s1, e1);
    }
    if (j < n_keys) {
      float* p0 = st + j * rows + i;
      const VF e0 = Exp2(df, hn::Sub(hn::Load(df, p0), mu));
      hn::Store(e0, df, p0);
      s0 = hn::Add(s0, e0);
    }
    const VF l_new = hn::MulAdd(hn::Load(df, l + i), a, hn::Add(s0, s1));
    hn::Store(l_new, df, l + i);
    hn::Store(m_new, df, m + i);
    hn::Store(a, df, alpha + i);
  }
}

// Visits the score tile in St layout column by column: f(i, p, jv) for each
// live vector of rows [i, i+N) and each key j < n_keys, where p = st + j*rows
// + i and jv holds the key index j0+j in every lane.
template <class F>
HWY_INLINE void ForEachStCol(float* HWY_RESTRICT st, size_t rows, size_t n_keys,
                             int64_t j0, const uint8_t* HWY_RESTRICT rowpair_live,
                             const F& f) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  for (size_t i = 0; i < rows; i += N) {
    if (!rowpair_live[i / (2 * N)]) continue;
    for (size_t j = 0; j < n_keys; ++j) {
      f(i, st + j * rows + i, hn::Set(di, static_cast<int32_t>(j0 + static_cast<int64_t>(j))));
    }
  }
}

// One score tile in St layout as the appliers below see it: st [n_keys][rows]
// holds keys j0 .. j0 + n_keys - 1; rowpair_live flags the blocks of 2N rows
// that hold a live row (the others are not touched).
struct StTile {
  float* st;
  size_t rows, n_keys;
  int64_t j0;
  const uint8_t* rowpair_live;
};

// Index-computed masks (causal / window / kv_len), St layout: key j0+j is
// kept for row i iff first[i] <= j0+j <= last[i].
HWY_INLINE void RangeMaskCols(const StTile& t, const int32_t* HWY_RESTRICT first,
                              const int32_t* HWY_RESTRICT last) {
  const DF df;
  const DI di;
  const VF ninf = hn::Set(df, kNegInfF);
  ForEachStCol(t.st, t.rows, t.n_keys, t.j0, t.rowpair_live, [&](size_t i, float* p, VI jv) {
    const auto drop = hn::Or(hn::Lt(jv, hn::Load(di, first + i)), hn::Lt(hn::Load(di, last + i), jv));
    hn::Store(hn::IfThenElse(hn::RebindMask(df, drop), ninf, hn::Load(df, p)), df, p);
  });
}

// Softcap in the log2 domain: x2 -> c2 * tanh(x2 / c2) with c2 =
// softcap * log2(e) (= log2(e) * softcap * tanh(x / softcap) for x2 =
// x * log2(e)). Highway's Tanh (at most 4 ulp).
HWY_INLINE VF SoftcapVec(DF df, VF x, VF c2) {
  return hn::Mul(c2, hn::Tanh(df, hn::Div(x, c2)));
}

// Softcap, St layout, all keys of the live row vectors.
HWY_INLINE void SoftcapCols(const StTile& t, float c2) {
  const DF df;
  const VF cv = hn::Set(df, c2);
  ForEachStCol(t.st, t.rows, t.n_keys, t.j0, t.rowpair_live, [&](size_t, float* p, VI) {
    hn::Store(SoftcapVec(df, hn::Load(df, p), cv), df, p);
  });
}

// Softcap, row-major layout (decode): rows with live[r], keys [0, n_pad)
// (n_pad a multiple of the lane count).
HWY_INLINE void SoftcapRows(float* HWY_RESTRICT s, size_t pitch, size_t n_rows, size_t n_pad,
                            float c2, const uint8_t* HWY_RESTRICT live) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const VF cv = hn::Set(df, c2);
  for (size_t r = 0; r < n_rows; ++r) {
    if (!live[r]) continue;
    float* row = s + r * pitch;
    for (size_t j = 0; j < n_pad; j += N) {
      hn::Store(SoftcapVec(df, hn::Load(df, row + j), cv), df, row + j);
    }
  }
}

// ALiBi, St layout: st[j][i] -= slope2[i] * |diag[i] - (j0+j)|.
HWY_INLINE void AlibiCols(const StTile& t, const int32_t* HWY_RESTRICT diag,
                          const float* HWY_RESTRICT slope2) {
  const DF df;
  const DI di;
  ForEachStCol(t.st, t.rows, t.n_keys, t.j0, t.rowpair_live, [&](size_t i, float* p, VI jv) {
    const VF dist = hn::ConvertTo(df, hn::Abs(hn::Sub(hn::Load(di, diag + i), jv)));
    hn::Store(hn::NegMulAdd(hn::Load(df, slope2 + i), dist, hn::Load(df, p)), df, p);
  });
}

// ALiBi, row-major layout (decode): s[r][j] -= slope2[r] * |diag[r] - (j0+j)|.
HWY_INLINE void AlibiRows(float* HWY_RESTRICT s, size_t pitch, size_t n_rows,
                          size_t n_keys, int64_t j0, const int32_t* diag,
                          const float* slope2) {
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const VI iota = hn::Iota(di, 0);
  for (size_t r = 0; r < n_rows; ++r) {
    const VI dg = hn::Set(di, diag[r]);
    const VF sl = hn::Set(df, slope2[r]);
    float* row = s + r * pitch;
    for (size_t j = 0; j < n_keys; j += N) {  // row padded to a multiple of N
      const VI jv = hn::Add(iota, hn::Set(di, static_cast<int32_t>(j0 + static_cast<int64_t>(j))));
      const VF dist = hn::ConvertTo(df, hn::Abs(hn::Sub(dg, jv)));
      hn::Store(hn::NegMulAdd(sl, dist, hn::Load(df, row + j)), df, row + j);
    }
  }
}

// Explicit mask of one query row (b, h, i) over keys [j0, j0+n): scores
// s[j*ks] (log2 domain). BOOL false -> -inf; float -> += value*log2(e).
template <typename T>
HWY_INLINE void ApplyMaskRowT(const T* HWY_RESTRICT mrow, int64_t mstride,
                              size_t n, float* HWY_RESTRICT s, size_t ks) {
  for (size_t j = 0; j < n; ++j) {
    const T mv = mrow[static_cast<int64_t>(j) * mstride];
    float* p = s + j * ks;
    if constexpr (std::is_same_v<T, uint8_t>) {
      if (mv == 0) *p = kNegInfF;
    } else {
      // One rounding: the log2-domain mask value and the sum in double.
      *p = static_cast<float>(static_cast<double>(*p) + static_cast<double>(mv) * kLog2e);
    }
  }
}

HWY_INLINE void ApplyMaskRowHalf(const uint16_t* HWY_RESTRICT mrow,
                                 int64_t mstride, size_t n,
                                 float* HWY_RESTRICT s, size_t ks, bool bf16) {
  for (size_t j = 0; j < n; ++j) {
    const uint16_t bits = mrow[static_cast<int64_t>(j) * mstride];
    const double mv = bf16 ? BF16ToF32(bits) : F16ToF32(bits);
    s[j * ks] = static_cast<float>(static_cast<double>(s[j * ks]) + mv * kLog2e);
  }
}

HWY_INLINE void ApplyMaskRow(const Problem& P, int64_t b, int64_t h, int64_t i,
                             int64_t j0, size_t n, float* HWY_RESTRICT s,
                             size_t ks) {
  const int64_t off = b * P.ms[0] + h * P.ms[1] + i * P.ms[2] + j0 * P.ms[3];
  switch (P.mt) {
    case DType::kBool:
      ApplyMaskRowT(static_cast<const uint8_t*>(P.mask) + off, P.ms[3], n, s, ks);
      break;
    case DType::kF32:
      ApplyMaskRowT(static_cast<const float*>(P.mask) + off, P.ms[3], n, s, ks);
      break;
    case DType::kF64:
      ApplyMaskRowT(static_cast<const double*>(P.mask) + off, P.ms[3], n, s, ks);
      break;
    case DType::kF16:
      ApplyMaskRowHalf(static_cast<const uint16_t*>(P.mask) + off, P.ms[3], n, s,
                       ks, false);
      break;
    case DType::kBF16:
      ApplyMaskRowHalf(static_cast<const uint16_t*>(P.mask) + off, P.ms[3], n, s,
                       ks, true);
      break;
    default:
      break;
  }
}

// Writes one finished row: out = o / l, lse = (m + log2 l) * ln2 (double,
// stored as the lse output's dtype: StoreLse). Rows that
// see no key (dead by index, or l == 0 after masking) get out 0, lse -inf.
// A non-finite result is recomputed by RecomputeRowScalar (exact handling of
// NaN/Inf in hidden keys; legitimately NaN/Inf rows stay so). Unit-stride
// output rows are divided with vectors (the same IEEE division per element).
// Without an lse output the log2 is skipped: for l > 0 the lse is finite
// exactly when m and l are, so the recompute test is unchanged.
HWY_INLINE void FinalizeRow(const Problem& P, int64_t b, int64_t h, int64_t i,
                            const float* HWY_RESTRICT o, float m, float l,
                            bool dead) {
  float* out = P.out + b * P.os[0] + h * P.os[1] + i * P.os[2];
  const int64_t s3 = P.os[3];
  double lse;
  if (dead || l == 0.0f) {
    for (int64_t c = 0; c < P.Dv; ++c) out[c * s3] = 0.0f;
    lse = -std::numeric_limits<double>::infinity();
  } else {
    bool finite = true;
    int64_t c = 0;
    if (s3 == 1) {
      const DF df;
      const int64_t N = static_cast<int64_t>(hn::Lanes(df));
      const VF lv = hn::Set(df, l);
      auto all_finite = hn::IsFinite(lv);
      for (; c + N <= P.Dv; c += N) {
        const VF x = hn::Div(hn::LoadU(df, o + c), lv);
        all_finite = hn::And(all_finite, hn::IsFinite(x));
        hn::StoreU(x, df, out + c);
      }
      finite = hn::AllTrue(df, all_finite);
    }
    for (; c < P.Dv; ++c) {
      const float x = o[c] / l;
      finite &= std::isfinite(x);
      out[c * s3] = x;
    }
    if (P.lse == nullptr) {
      if (!finite || !std::isfinite(m) || !std::isfinite(l)) return RecomputeRowScalar(P, b, h, i);
      return;
    }
    lse = (static_cast<double>(m) + std::log2(static_cast<double>(l))) * kLn2;
    if (!finite || !std::isfinite(lse)) return RecomputeRowScalar(P, b, h, i);
  }
  if (P.lse != nullptr) StoreLse(P, b, h, i, lse);
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#endif  // include guard
