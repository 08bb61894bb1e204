// kernels/flash_prefill-inl.h — FlashAttention-2 style tiled prefill.
//
// One task = (batch b, kv head hk, chunk of `hc` query heads of hk's group,
// tile of `tq` query positions). The task's rows (hc x tq, padded to
// plan.rows) share every packed K/V tile, so K/V are converted once per tile
// for the whole GQA group. Per kv tile:
//   pack K [tkv][dp] and V [tkv][dvp] (fp32, converted from F16/BF16)
//   S^T = K . Q^T     (QkTile: chunked sums times scale*log2 e; fused max)
//   softcap           (SoftcapCols, when set)
//   masks             (ALiBi, explicit mask, index ranges on partial tiles)
//   online softmax    (SoftmaxCols: max, exp2, sum, alpha)
//   O = O*alpha + P.V (PvTile)
// Tiles outside the union of the rows' visible key ranges are never visited
// (causal ~ half the work). Each output row is written by exactly one task,
// with a reduction order that depends only on the shape.

#if defined(ATTNFLOW_KERNELS_FLASH_PREFILL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNFLOW_KERNELS_FLASH_PREFILL_INL_H_
#undef ATTNFLOW_KERNELS_FLASH_PREFILL_INL_H_
#else
#define ATTNFLOW_KERNELS_FLASH_PREFILL_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "hwy/highway.h"
#include "kernels/flash_common-inl.h"
#include "kernels/internal.h"

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace kernels {
namespace HWY_NAMESPACE {

template <size_t kDim>
void PrefillTask(const Problem& P, const Plan& pl, int64_t task,
                 float* HWY_RESTRICT scratch) {
  const DF df;
  const size_t N = hn::Lanes(df);
  const ScratchLayout L = MakeScratchLayout(pl);
  const size_t rows = static_cast<size_t>(pl.rows);
  const int64_t tq = pl.tq, hc = pl.hc, tkv = pl.tkv;
  const size_t dp = static_cast<size_t>(pl.dp), dvp = static_cast<size_t>(pl.dvp);
  const size_t dim = kDim ? kDim : static_cast<size_t>(P.D);

  // Task -> (b, hk, head chunk, q tile). Later q tiles first: under causal
  // masking they are the expensive ones, which helps dynamic load balance.
  const int64_t qtile = pl.n_qtiles - 1 - task % pl.n_qtiles;
  int64_t rest = task / pl.n_qtiles;
  const int64_t hchunk = rest % pl.n_hchunks;
  rest /= pl.n_hchunks;
  const int64_t hk = rest % P.Hkv;
  const int64_t b = rest / P.Hkv;
  const int64_t h_begin = hk * P.G + hchunk * hc;
  const int64_t n_heads = std::min<int64_t>(hc, P.G - hchunk * hc);
  const int64_t p0 = qtile * tq;
  const int64_t n_pos = std::min<int64_t>(tq, P.Lq - p0);
  const int64_t valid_kv = P.valid_kv[b];
  const int64_t diag_kv = P.diag_kv[b];

  float* qt = scratch + L.qt;
  float* kt = scratch + L.kt;
  float* vt = scratch + L.vt;
  float* st = scratch + L.st;
  float* tmax = scratch + L.tmax;
  float* o = scratch + L.o;
  float* m = scratch + L.m;
  float* l = scratch + L.l;
  float* alpha = scratch + L.alpha;
  // The per-row scratch (the pointers RowScratchAt gives the decode and the
  // backward) as plain locals computed here: taken from a RowScratch, even
  // copied into locals, the code changes (stores through the uint8 flags may
  // alias the object), and a structured binding measured ~1.09x slower prefill.
  int32_t* first = reinterpret_cast<int32_t*>(scratch + L.row.first);
  int32_t* last = reinterpret_cast<int32_t*>(scratch + L.row.last);
  int32_t* diag = reinterpret_cast<int32_t*>(scratch + L.row.diag);
  float* slope = scratch + L.row.slope;
  uint8_t* live = reinterpret_cast<uint8_t*>(scratch + L.row.live);
  uint8_t* pairlive = reinterpret_cast<uint8_t*>(scratch + L.row.pairlive);

  // Row metadata. Row r = (local head r / tq, position p0 + r % tq).
  int64_t u_first = INT64_MAX, u_last = -1;     // union of live ranges
  int64_t max_first = -1, min_last = INT64_MAX;  // intersection of live ranges
  std::memset(pairlive, 0, rows / (2 * N) + 1);
  for (size_t r = 0; r < rows; ++r) {
    const int64_t hl = static_cast<int64_t>(r) / tq, pp = static_cast<int64_t>(r) % tq;
    const bool valid = hl < n_heads && pp < n_pos;
    const int64_t i = p0 + pp;
    first[r] = 1;
    last[r] = 0;
    diag[r] = 0;
    slope[r] = 0.0f;
    live[r] = 0;
    if (!valid) continue;
    const KeyRange kr = VisibleKeys(P.causal, P.window_left, P.window_right, i,
                                    P.Lq, diag_kv, valid_kv);
    diag[r] = static_cast<int32_t>(Diagonal(i, P.Lq, diag_kv));
    if (P.slope2 != nullptr) slope[r] = P.slope2[b * P.slope_bs + h_begin + hl];
    if (kr.first > kr.last) continue;  // dead row: finalized as 0 / -inf
    first[r] = static_cast<int32_t>(kr.first);
    last[r] = static_cast<int32_t>(kr.last);
    live[r] = 1;
    pairlive[r / (2 * N)] = 1;
    u_first = std::min(u_first, kr.first);
    u_last = std::max(u_last, kr.last);
    max_first = std::max(max_first, kr.first);
    min_last = std::min(min_last, kr.last);
  }

  // Pack Q^T [D][rows] (unscaled: QkTile multiplies each finished score by
  // scale * log2 e). Unit-stride rows go through 4x4 transposes of 128-bit
  // vectors (4 rows x 4 dims: 4 loads, 8 shuffles, 4 stores instead of 16
  // scalar stores).
  {
    const float* qbase = P.q + b * P.qs[0] + h_begin * P.qs[1] + p0 * P.qs[2];
    const int64_t s3 = P.qs[3];
    auto row_ptr = [&](size_t r) {
      const int64_t hl = static_cast<int64_t>(r) / tq, pp = static_cast<int64_t>(r) % tq;
      return qbase + hl * P.qs[1] + pp * P.qs[2];
    };
    size_t r = 0;
#if HWY_TARGET != HWY_SCALAR
    if (s3 == 1) {
      const hn::Full128<float> d4;
      const size_t dim4 = dim / 4 * 4;
      for (; r + 4 <= rows; r += 4) {
        if (!(live[r] && live[r + 1] && live[r + 2] && live[r + 3])) break;
        const float* q0 = row_ptr(r);
        const float* q1 = row_ptr(r + 1);
        const float* q2 = row_ptr(r + 2);
        const float* q3 = row_ptr(r + 3);
        size_t d = 0;
        for (; d < dim4; d += 4) {
          const auto a = hn::LoadU(d4, q0 + d);
          const auto bb = hn::LoadU(d4, q1 + d);
          const auto c = hn::LoadU(d4, q2 + d);
          const auto e = hn::LoadU(d4, q3 + d);
          const auto t0 = hn::InterleaveLower(d4, a, bb);  // a0 b0 a1 b1
          const auto t1 = hn::InterleaveLower(d4, c, e);   // c0 e0 c1 e1
          const auto t2 = hn::InterleaveUpper(d4, a, bb);  // a2 b2 a3 b3
          const auto t3 = hn::InterleaveUpper(d4, c, e);   // c2 e2 c3 e3
          hn::StoreU(hn::ConcatLowerLower(d4, t1, t0), d4, qt + d * rows + r);
          hn::StoreU(hn::ConcatUpperUpper(d4, t1, t0), d4, qt + (d + 1) * rows + r);
          hn::StoreU(hn::ConcatLowerLower(d4, t3, t2), d4, qt + (d + 2) * rows + r);
          hn::StoreU(hn::ConcatUpperUpper(d4, t3, t2), d4, qt + (d + 3) * rows + r);
        }
        for (; d < dim; ++d) {
          qt[d * rows + r] = q0[d];
          qt[d * rows + r + 1] = q1[d];
          qt[d * rows + r + 2] = q2[d];
          qt[d * rows + r + 3] = q3[d];
        }
      }
    }
#endif
    for (; r < rows; ++r) {  // the rest: other strides, dead and padding rows
      if (live[r]) {
        const float* qrow = row_ptr(r);
        for (size_t d = 0; d < dim; ++d) qt[d * rows + r] = qrow[static_cast<int64_t>(d) * s3];
      } else {
        for (size_t d = 0; d < dim; ++d) qt[d * rows + r] = 0.0f;
      }
    }
  }
  for (size_t r = 0; r < rows; ++r) {
    m[r] = kNegInfF;
    l[r] = 0.0f;
  }
  std::memset(o, 0, rows * dvp * sizeof(float));

  if (u_last >= u_first) {
    const bool has_mask = P.mask != nullptr;
    const bool direct_k = P.kt == DType::kF32 && P.ks[3] == 1;
    const bool direct_v = P.vt == DType::kF32 && P.vs[3] == 1 &&
                          static_cast<size_t>(P.Dv) == dvp;
    const bool has_alibi = P.slope2 != nullptr;
    const bool has_softcap = P.softcap2 > 0.0f;
    const int64_t t_begin = u_first / tkv, t_end = u_last / tkv;
    for (int64_t t = t_begin; t <= t_end; ++t) {
      const int64_t js = std::max(t * tkv, u_first);
      const int64_t je = std::min((t + 1) * tkv, u_last + 1);
      const size_t n = static_cast<size_t>(je - js);
      // F32 K/V with unit stride along D are read in place (no copy); other
      // dtypes/strides are converted into the packed fp32 tiles once per tile.
      const float* kp;
      size_t kpitch;
      const float* tail;
      if (direct_k) {
        kp = static_cast<const float*>(P.k) + b * P.ks[0] + hk * P.ks[1] + js * P.ks[2];
        kpitch = static_cast<size_t>(P.ks[2]);
        const size_t full = n / kQkKeys * kQkKeys;
        if (full < n) {  // zero-padded copy of the partial last key block
          PackKvTile(P.k, P.kt, P.ks, b, hk, js + static_cast<int64_t>(full),
                     static_cast<int64_t>(n - full), kQkKeys, P.D,
                     static_cast<int64_t>(dp), kt);
        }
        tail = kt;
      } else {
        const size_t n_pad = (n + kQkKeys - 1) / kQkKeys * kQkKeys;
        PackKvTile(P.k, P.kt, P.ks, b, hk, js, static_cast<int64_t>(n),
                   static_cast<int64_t>(n_pad), P.D, static_cast<int64_t>(dp), kt);
        kp = kt;
        kpitch = dp;
        tail = kt + n / kQkKeys * kQkKeys * dp;
      }
      const float* vp;
      size_t vpitch;
      if (direct_v) {
        vp = static_cast<const float*>(P.v) + b * P.vs[0] + hk * P.vs[1] + js * P.vs[2];
        vpitch = static_cast<size_t>(P.vs[2]);
      } else {
        PackKvTile(P.v, P.vt, P.vs, b, hk, js, static_cast<int64_t>(n),
                   static_cast<int64_t>(n), P.Dv, static_cast<int64_t>(dvp), vt);
        vp = vt;
        vpitch = dvp;
      }
      const bool need_range = !(js >= max_first && je - 1 <= min_last);
      const bool fused_max = !(need_range || has_mask || has_alibi || has_softcap);
      QkTile<kDim>(qt, rows, kp, kpitch, tail, dp, dim, n, P.scale2, P.scale2_lo, st, tmax, pairlive);
      const StTile tile{st, rows, n, js, pairlive};
      if (has_softcap) SoftcapCols(tile, P.softcap2);
      if (has_alibi) AlibiCols(tile, diag, slope);
      if (has_mask) {
        for (size_t r = 0; r < rows; ++r) {
          if (!live[r]) continue;
          const int64_t hl = static_cast<int64_t>(r) / tq, pp = static_cast<int64_t>(r) % tq;
          ApplyMaskRow(P, b, h_begin + hl, p0 + pp, js, n, st + r, rows);
        }
      }
      if (need_range) RangeMaskCols(tile, first, last);
      SoftmaxCols(st, rows, n, fused_max ? tmax : nullptr, m, l, alpha, pairlive);
      PvTile<float>(st, rows, 1, n, vp, vpitch, dvp, o, alpha, rows, live);
    }
  }

  for (size_t r = 0; r < rows; ++r) {
    const int64_t hl = static_cast<int64_t>(r) / tq, pp = static_cast<int64_t>(r) % tq;
    if (hl >= n_heads || pp >= n_pos) continue;
    FinalizeRow(P, b, h_begin + hl, p0 + pp, o + r * dvp, m[r], l[r], !live[r]);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#endif  // include guard
