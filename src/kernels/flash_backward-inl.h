// kernels/flash_backward-inl.h — FlashAttention-2 style backward (dq, dk,
// dv) from the forward's log-sum-exp, in two deterministic passes.
//
// The forward's probabilities are recomputed tile by tile from the saved LSE
// (P = exp2(S2 - lse2), S2 the log2-domain score of the forward: the same
// QkTile arithmetic, so the same fp32 scores), then, per (query tile x key
// tile) block, in St layout (st[j * rows + i]):
//   S^T  = K . Q^T                  (QkTile, scores times scale*log2 e)
//   softcap (tanh kept for its derivative), ALiBi, mask, index ranges
//   P    = exp2(S - lse2)           (lse2 = lse*log2 e as hi + lo floats;
//                                    0 for rows without a key)
//   dP^T = V . dO^T                 (QkTile with dO^T and V)
//   dS   = P (dP - D_i) [(1 - tanh^2)] (0 where P == 0)
// Pass A, one task per (b, kv head, key tile) over every query tile of the
// kv head's group: dV += P^T dO and dK += dS^T Q (PvTile with the keys as
// rows), so dk/dv of a kv head sum its GQA group in a fixed order.
// Pass B, one task per (b, kv head, head chunk, query tile) over the key
// tiles it sees: dQ += dS K. Every output element is written by exactly one
// task with a reduction order fixed by the shape: results do not depend on
// the thread count. dq and dk are scaled by `scale` when written.

#if defined(ATTNFLOW_KERNELS_FLASH_BACKWARD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ATTNFLOW_KERNELS_FLASH_BACKWARD_INL_H_
#undef ATTNFLOW_KERNELS_FLASH_BACKWARD_INL_H_
#else
#define ATTNFLOW_KERNELS_FLASH_BACKWARD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "hwy/highway.h"
#include "kernels/flash_common-inl.h"
#include "kernels/internal.h"

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace kernels {
namespace HWY_NAMESPACE {

// One worker's buffers (BwdScratchLayout; the per-row visibility scratch
// first/last/diag/slope/live/pairlive from RowScratch) and the metadata of
// the current query tile.
struct BwdTile : RowScratch {
  float *qt, *dot, *qr, *dor, *kt, *vt, *st, *dpt, *tt, *tmax, *acc_a, *acc_b, *lse2, *lse2_lo,
      *delta, *ones;
  double* dacc;
  int32_t* livei;
  uint8_t* ones8;
  int64_t u_first, u_last, max_first, min_last;
  int64_t n_heads, n_pos;
};

// A task of the delta pass and pass B: (b, kv head, head chunk, query
// tile), query tile fastest.
struct QTileTask {
  int64_t b, hk, hchunk, qtile;
};
inline QTileTask DecodeQTileTask(const Plan& pl, int64_t Hkv, int64_t task) {
  const int64_t rest = task / pl.n_qtiles / pl.n_hchunks;
  return {rest / Hkv, rest % Hkv, task / pl.n_qtiles % pl.n_hchunks, task % pl.n_qtiles};
}

inline BwdTile MakeBwdTile(const Plan& pl, float* scratch) {
  const BwdScratchLayout L = MakeBwdScratchLayout(pl);
  BwdTile t{};
  const std::pair<float**, size_t> buffers[] = {
      {&t.qt, L.qt},     {&t.dot, L.dot},         {&t.qr, L.qr},       {&t.dor, L.dor},
      {&t.kt, L.kt},     {&t.vt, L.vt},           {&t.st, L.st},       {&t.dpt, L.dpt},
      {&t.tt, L.tt},     {&t.tmax, L.tmax},       {&t.acc_a, L.acc_a}, {&t.acc_b, L.acc_b},
      {&t.lse2, L.lse2}, {&t.lse2_lo, L.lse2_lo}, {&t.delta, L.delta}, {&t.ones, L.ones}};
  for (const auto& [ptr, offset] : buffers) *ptr = scratch + offset;
  t.dacc = reinterpret_cast<double*>(scratch + L.dacc);
  static_cast<RowScratch&>(t) = RowScratchAt(scratch, L.row);
  t.livei = reinterpret_cast<int32_t*>(scratch + L.livei);
  t.ones8 = reinterpret_cast<uint8_t*>(scratch + L.ones8);
  return t;
}

// Row metadata of query tile (b, kv head hk, head chunk, q tile): visible
// key ranges, ALiBi diagonal/slope, liveness, the union / intersection of
// the live ranges, and the per-row lse2 / delta (lse2 = +inf for rows that
// see no key or are padding, so that their P is exactly 0). Returns false
// when no row of the tile sees a key.
inline bool BwdRows(const BwdProblem& BP, const Plan& pl, int64_t b, int64_t hk, int64_t hchunk,
                    int64_t qtile, BwdTile* T) {
  const Problem& P = BP.P;
  const DF df;
  const size_t N = hn::Lanes(df);
  const size_t rows = static_cast<size_t>(pl.rows);
  const int64_t tq = pl.tq;
  const int64_t h_begin = hk * P.G + hchunk * pl.hc;
  T->n_heads = std::min<int64_t>(pl.hc, P.G - hchunk * pl.hc);
  const int64_t p0 = qtile * tq;
  T->n_pos = std::min<int64_t>(tq, P.Lq - p0);
  const int64_t valid_kv = P.valid_kv[b], diag_kv = P.diag_kv[b];
  T->u_first = INT64_MAX;
  T->u_last = -1;
  T->max_first = -1;
  T->min_last = INT64_MAX;
  std::memset(T->pairlive, 0, rows / (2 * N) + 1);
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t r = 0; r < rows; ++r) {
    const int64_t hl = static_cast<int64_t>(r) / tq, pp = static_cast<int64_t>(r) % tq;
    const int64_t i = p0 + pp;
    T->first[r] = 1;
    T->last[r] = 0;
    T->diag[r] = 0;
    T->slope[r] = 0.0f;
    T->live[r] = 0;
    T->livei[r] = 0;
    T->lse2[r] = inf;
    T->lse2_lo[r] = 0.0f;
    T->delta[r] = 0.0f;
    if (hl >= T->n_heads || pp >= T->n_pos) continue;
    const int64_t h = h_begin + hl;
    const KeyRange kr =
        VisibleKeys(P.causal, P.window_left, P.window_right, i, P.Lq, diag_kv, valid_kv);
    T->diag[r] = static_cast<int32_t>(Diagonal(i, P.Lq, diag_kv));
    if (P.slope2 != nullptr) T->slope[r] = P.slope2[b * P.slope_bs + h];
    if (kr.first > kr.last) continue;
    const size_t row = static_cast<size_t>((b * P.H + h) * P.Lq + i);
    const float l2 = BP.lse2[row];
    if (l2 == inf) continue;  // the forward saw no key (every key masked)
    T->first[r] = static_cast<int32_t>(kr.first);
    T->last[r] = static_cast<int32_t>(kr.last);
    T->live[r] = 1;
    T->livei[r] = -1;
    T->lse2[r] = l2;
    T->lse2_lo[r] = BP.lse2_lo[row];
    T->delta[r] = BP.delta[row];
    T->pairlive[r / (2 * N)] = 1;
    T->u_first = std::min(T->u_first, kr.first);
    T->u_last = std::max(T->u_last, kr.last);
    T->max_first = std::max(T->max_first, kr.first);
    T->min_last = std::min(T->min_last, kr.last);
  }
  return T->u_last >= T->u_first;
}

// Packs one row of `width` elements (stride `stride`; nullptr: a dead row,
// all zero) into column r of the transposed tile t [pad][rows] and, if
// rows_too, into row r of the row-major tile rm [rows][pad], zero-padded up to
// pad. Used for the Q and the dO rows of a query tile.
HWY_INLINE void BwdPackRow(const float* src, int64_t stride, int64_t width, size_t pad,
                           size_t rows, size_t r, bool rows_too, float* t, float* rm) {
  const size_t w = src == nullptr ? 0 : static_cast<size_t>(width);
  for (size_t d = 0; d < w; ++d) {
    const float x = src[static_cast<int64_t>(d) * stride];
    t[d * rows + r] = x;
    if (rows_too) rm[r * pad + d] = x;
  }
  for (size_t d = w; d < pad; ++d) {
    t[d * rows + r] = 0.0f;
    if (rows_too) rm[r * pad + d] = 0.0f;
  }
}

// Packs the query side of the tile: Q^T [D][rows] (unscaled: QkTile scales
// the scores, as in the forward) and dO^T [Dv][rows] (zero for rows that are not live), and with
// `rows_too` also the row-major Q [rows][dp] and dO [rows][dvp] (pass A).
inline void BwdPackQuery(const BwdProblem& BP, const Plan& pl, int64_t b, int64_t hk,
                         int64_t hchunk, int64_t qtile, bool rows_too, BwdTile* T) {
  const Problem& P = BP.P;
  const size_t rows = static_cast<size_t>(pl.rows);
  const size_t dp = static_cast<size_t>(pl.dp), dvp = static_cast<size_t>(pl.dvp);
  const int64_t tq = pl.tq;
  const int64_t h_begin = hk * P.G + hchunk * pl.hc;
  const int64_t p0 = qtile * tq;
  for (size_t r = 0; r < rows; ++r) {
    const int64_t hl = static_cast<int64_t>(r) / tq, pp = static_cast<int64_t>(r) % tq;
    const int64_t h = h_begin + hl, i = p0 + pp;
    const bool live = T->live[r] != 0;
    const float* q = live ? P.q + b * P.qs[0] + h * P.qs[1] + i * P.qs[2] : nullptr;
    const float* g = live ? BP.dout + b * BP.dos[0] + h * BP.dos[1] + i * BP.dos[2] : nullptr;
    BwdPackRow(q, P.qs[3], P.D, dp, rows, r, rows_too, T->qt, T->qr);
    BwdPackRow(g, BP.dos[3], P.Dv, dvp, rows, r, rows_too, T->dot, T->dor);
  }
}

// Packs keys [js, js+n) of (b, hk): K [n_pad][dp] and V [n_pad][dvp], rows
// past n zeroed up to the QK key block.
inline void BwdPackKv(const Problem& P, const Plan& pl, int64_t b, int64_t hk, int64_t js, size_t n,
                      BwdTile* T) {
  const int64_t n_pad = static_cast<int64_t>((n + kQkKeys - 1) / kQkKeys * kQkKeys);
  PackKvTile(P.k, P.kt, P.ks, b, hk, js, static_cast<int64_t>(n), n_pad, P.D, pl.dp, T->kt);
  PackKvTile(P.v, P.vt, P.vs, b, hk, js, static_cast<int64_t>(n), n_pad, P.Dv, pl.dvp, T->vt);
}

// One block: the tile's live rows against packed keys [js, js+n). Leaves P
// in st and dS in dpt (St layout, every row vector written: zeros for rows
// without a key). With `delta_rows` (the delta pass) it instead adds
// sum_j P_ij to delta_rows[2i] and sum_j P_ij dP_ij to delta_rows[2i+1] and
// computes no dS.
template <size_t kDim>
void BwdBlock(const BwdProblem& BP, const Plan& pl, int64_t b, int64_t hk, int64_t hchunk,
              int64_t qtile, int64_t js, size_t n, BwdTile* T, double* delta_rows = nullptr) {
  const Problem& P = BP.P;
  const DF df;
  const DI di;
  const size_t N = hn::Lanes(df);
  const size_t rows = static_cast<size_t>(pl.rows);
  const size_t dp = static_cast<size_t>(pl.dp), dvp = static_cast<size_t>(pl.dvp);
  const size_t full = n / kQkKeys * kQkKeys;
  const int64_t tq = pl.tq;
  const int64_t h_begin = hk * P.G + hchunk * pl.hc;
  const int64_t p0 = qtile * tq;
  const int64_t je = js + static_cast<int64_t>(n);
  // Scores (log2 domain), then the forward's transformations in its order.
  QkTile<kDim>(T->qt, rows, T->kt, dp, T->kt + full * dp, dp, static_cast<size_t>(P.D), n,
               P.scale2, P.scale2_lo, T->st, T->tmax, T->pairlive);
  const bool softcap = P.softcap2 > 0.0f;
  if (softcap) {
    const VF c2 = hn::Set(df, P.softcap2);
    for (size_t i = 0; i < rows; i += N) {
      if (!T->pairlive[i / (2 * N)]) continue;
      for (size_t j = 0; j < n; ++j) {
        float* p = T->st + j * rows + i;
        const VF th = hn::Tanh(df, hn::Div(hn::Load(df, p), c2));
        hn::Store(th, df, T->tt + j * rows + i);
        hn::Store(hn::Mul(c2, th), df, p);
      }
    }
  }
  const StTile tile{T->st, rows, n, js, T->pairlive};
  if (P.slope2 != nullptr) AlibiCols(tile, T->diag, T->slope);
  if (P.mask != nullptr) {
    for (size_t r = 0; r < rows; ++r) {
      if (!T->live[r]) continue;
      const int64_t hl = static_cast<int64_t>(r) / tq, pp = static_cast<int64_t>(r) % tq;
      ApplyMaskRow(P, b, h_begin + hl, p0 + pp, js, n, T->st + r, rows);
    }
  }
  if (!(js >= T->max_first && je - 1 <= T->min_last)) {
    RangeMaskCols(tile, T->first, T->last);
  }
  // dP^T = V . dO^T.
  QkTile<kDim>(T->dot, rows, T->vt, dvp, T->vt + full * dvp, dvp, static_cast<size_t>(P.Dv), n,
               1.0f, 0.0f, T->dpt, T->tmax, T->pairlive);
  const VF zero = hn::Zero(df);
  const VF one = hn::Set(df, 1.0f);
  if (delta_rows != nullptr) {
    HWY_ALIGN float part[64];  // one row vector's partial sums (N <= 64 lanes)
    for (size_t i = 0; i < rows; i += N) {
      if (!T->pairlive[i / (2 * N)]) continue;
      const auto live = hn::RebindMask(df, hn::Ne(hn::Load(di, T->livei + i), hn::Zero(di)));
      const VF l2 = hn::Load(df, T->lse2 + i);
      const VF l2lo = hn::Load(df, T->lse2_lo + i);
      VF acc = zero, zs = zero;
      for (size_t j = 0; j < n; ++j) {
        const VF p = hn::IfThenElseZero(
            live, Exp2(df, hn::Sub(hn::Sub(hn::Load(df, T->st + j * rows + i), l2), l2lo)));
        zs = hn::Add(zs, p);
        // Keys with weight exactly 0 add nothing (their dP may be Inf/NaN).
        acc = hn::Add(acc, hn::IfThenElseZero(hn::Ne(p, zero),
                                              hn::Mul(p, hn::Load(df, T->dpt + j * rows + i))));
      }
      hn::Store(zs, df, part);
      for (size_t t = 0; t < N; ++t) delta_rows[2 * (i + t)] += static_cast<double>(part[t]);
      hn::Store(acc, df, part);
      for (size_t t = 0; t < N; ++t) delta_rows[2 * (i + t) + 1] += static_cast<double>(part[t]);
    }
    return;
  }
  for (size_t i = 0; i < rows; i += N) {
    if (!T->pairlive[i / (2 * N)]) {
      for (size_t j = 0; j < n; ++j) {
        hn::Store(zero, df, T->st + j * rows + i);
        hn::Store(zero, df, T->dpt + j * rows + i);
      }
      continue;
    }
    const auto live = hn::RebindMask(df, hn::Ne(hn::Load(di, T->livei + i), hn::Zero(di)));
    const VF l2 = hn::Load(df, T->lse2 + i);
    const VF l2lo = hn::Load(df, T->lse2_lo + i);
    const VF dl = hn::Load(df, T->delta + i);
    for (size_t j = 0; j < n; ++j) {
      float* ps = T->st + j * rows + i;
      float* pd = T->dpt + j * rows + i;
      // s - lse2 with lse2 = hi + lo: s - hi is exact near the row maximum.
      const VF p = hn::IfThenElseZero(live, Exp2(df, hn::Sub(hn::Sub(hn::Load(df, ps), l2), l2lo)));
      VF ds = hn::Mul(p, hn::Sub(hn::Load(df, pd), dl));
      if (softcap) {
        const VF th = hn::Load(df, T->tt + j * rows + i);
        ds = hn::Mul(ds, hn::NegMulAdd(th, th, one));
      }
      // A key whose weight is exactly 0 contributes nothing (also when its
      // V holds Inf/NaN: 0 * Inf must not reach dS).
      ds = hn::IfThenElseZero(hn::Ne(p, zero), ds);
      hn::Store(p, df, ps);
      hn::Store(ds, df, pd);
    }
  }
}

// Writes `n_rows` rows of acc (pitch `pitch`, `width` valid columns) times
// `mul` to dst rows (element strides s2 between rows, s3 along a row).
// Returns false if a written value is not finite.
inline bool BwdStoreRows(const float* acc, size_t pitch, size_t n_rows, int64_t width, float mul,
                         float* dst, int64_t s2, int64_t s3) {
  bool finite = true;
  for (size_t r = 0; r < n_rows; ++r) {
    float* d = dst + static_cast<int64_t>(r) * s2;
    const float* a = acc + r * pitch;
    for (int64_t c = 0; c < width; ++c) {
      const float x = a[c] * mul;
      finite &= std::isfinite(x);
      d[c * s3] = x;
    }
  }
  return finite;
}

// The key tiles of the current query tile (its rows set up by BwdRows and
// BwdPackQuery): for each tile [js, js + n) of [T->u_first, T->u_last], in
// key order, packs K/V, runs BwdBlock (delta_rows: the delta pass's row sums,
// nullptr in pass B) and then calls after(js, n). Shared by the delta pass
// and pass B, so both visit the same tiles in the same order.
template <size_t kDim, class After>
HWY_INLINE void BwdQueryTileKeys(const BwdProblem& BP, const Plan& pl, const QTileTask& tk,
                                 BwdTile* T, double* delta_rows, After after) {
  const int64_t tkv = pl.tkv;
  for (int64_t t = T->u_first / tkv; t <= T->u_last / tkv; ++t) {
    const int64_t js = std::max(t * tkv, T->u_first);
    const int64_t je = std::min((t + 1) * tkv, T->u_last + 1);
    const size_t n = static_cast<size_t>(je - js);
    BwdPackKv(BP.P, pl, tk.b, tk.hk, js, n, T);
    BwdBlock<kDim>(BP, pl, tk.b, tk.hk, tk.hchunk, tk.qtile, js, n, T, delta_rows);
    after(js, n);
  }
}

// Delta pass: task = (b, kv head, head chunk, query tile), like pass B. With
// Z_i = sum_j P_ij and Y_i = sum_j P_ij dP_ij over the recomputed
// probabilities and the kernel's own dP, it renormalises the row
// (lse2 += log2 Z_i: P then sums to 1 with the backward's scores, whichever
// forward kernel produced the LSE and however it was rounded) and adds
// D_i = Y_i / Z_i to BP.delta (which holds -dlse_i), so that each row of dS
// sums to 0 up to rounding, as in the plain softmax gradient.
template <size_t kDim>
void BwdDeltaTask(const BwdProblem& BP, const Plan& pl, int64_t task, float* scratch) {
  const Problem& P = BP.P;
  BwdTile T = MakeBwdTile(pl, scratch);
  const QTileTask tk = DecodeQTileTask(pl, P.Hkv, task);
  if (!BwdRows(BP, pl, tk.b, tk.hk, tk.hchunk, tk.qtile, &T)) return;
  BwdPackQuery(BP, pl, tk.b, tk.hk, tk.hchunk, tk.qtile, false, &T);
  const size_t rows = static_cast<size_t>(pl.rows);
  double* acc = T.dacc;
  for (size_t r = 0; r < 2 * rows; ++r) acc[r] = 0.0;
  BwdQueryTileKeys<kDim>(BP, pl, tk, &T, acc, [](int64_t, size_t) {});
  const int64_t h_begin = tk.hk * P.G + tk.hchunk * pl.hc;
  const int64_t p0 = tk.qtile * pl.tq;
  for (size_t r = 0; r < rows; ++r) {
    if (!T.live[r]) continue;
    const int64_t hl = static_cast<int64_t>(r) / pl.tq, pp = static_cast<int64_t>(r) % pl.tq;
    const size_t row = static_cast<size_t>((tk.b * P.H + h_begin + hl) * P.Lq + p0 + pp);
    const double z = acc[2 * r], y = acc[2 * r + 1];
    if (z > 0.0 && std::isfinite(z) && std::isfinite(y)) {
      const double l2 =
          static_cast<double>(BP.lse2[row]) + static_cast<double>(BP.lse2_lo[row]) + std::log2(z);
      BP.lse2[row] = static_cast<float>(l2);
      BP.lse2_lo[row] = static_cast<float>(l2 - static_cast<double>(BP.lse2[row]));
      BP.delta[row] = static_cast<float>(static_cast<double>(BP.delta[row]) + y / z);
    } else {  // NaN/Inf inputs: keep the forward's LSE; the result check recomputes exactly
      BP.delta[row] = static_cast<float>(static_cast<double>(BP.delta[row]) + y);
    }
  }
}

// Pass A: task = (b, kv head, key tile). Returns false if a written value is
// not finite (the caller then recomputes with the reference).
template <size_t kDim>
bool BwdKvTask(const BwdProblem& BP, const Plan& pl, int64_t task, float* scratch) {
  const Problem& P = BP.P;
  BwdTile T = MakeBwdTile(pl, scratch);
  const int64_t kt = task % pl.n_ktiles;
  const int64_t bh = task / pl.n_ktiles;
  const int64_t hk = bh % P.Hkv, b = bh / P.Hkv;
  const int64_t js = kt * pl.tkv;
  const size_t n = static_cast<size_t>(std::min(pl.tkv, P.Lk - js));
  const size_t rows = static_cast<size_t>(pl.rows);
  const size_t dp = static_cast<size_t>(pl.dp), dvp = static_cast<size_t>(pl.dvp);
  std::memset(T.acc_a, 0, n * dp * sizeof(float));   // dK
  std::memset(T.acc_b, 0, n * dvp * sizeof(float));  // dV
  bool packed = false;
  for (int64_t hchunk = 0; hchunk < pl.n_hchunks; ++hchunk) {
    for (int64_t qtile = 0; qtile < pl.n_qtiles; ++qtile) {
      if (!BwdRows(BP, pl, b, hk, hchunk, qtile, &T)) continue;
      if (T.u_last < js || T.u_first > js + static_cast<int64_t>(n) - 1) continue;
      if (!packed) {
        BwdPackKv(P, pl, b, hk, js, n, &T);
        packed = true;
      }
      BwdPackQuery(BP, pl, b, hk, hchunk, qtile, true, &T);
      BwdBlock<kDim>(BP, pl, b, hk, hchunk, qtile, js, n, &T);
      // dV_j += sum_i P_ij dO_i, dK_j += sum_i dS_ij Q_i (rows = keys).
      PvTile<float>(T.st, 1, rows, rows, T.dor, dvp, dvp, T.acc_b, T.ones, n, T.ones8);
      PvTile<float>(T.dpt, 1, rows, rows, T.qr, dp, dp, T.acc_a, T.ones, n, T.ones8);
    }
  }
  bool finite = true;
  if (BP.dk != nullptr) {
    finite &=
        BwdStoreRows(T.acc_a, dp, n, P.D, BP.scale,
                     BP.dk + b * BP.dks[0] + hk * BP.dks[1] + js * BP.dks[2], BP.dks[2], BP.dks[3]);
  }
  if (BP.dv != nullptr) {
    finite &=
        BwdStoreRows(T.acc_b, dvp, n, P.Dv, 1.0f,
                     BP.dv + b * BP.dvs[0] + hk * BP.dvs[1] + js * BP.dvs[2], BP.dvs[2], BP.dvs[3]);
  }
  return finite;
}

// Pass B: task = (b, kv head, head chunk, query tile), like the forward.
template <size_t kDim>
bool BwdQTask(const BwdProblem& BP, const Plan& pl, int64_t task, float* scratch) {
  const Problem& P = BP.P;
  BwdTile T = MakeBwdTile(pl, scratch);
  const QTileTask tk = DecodeQTileTask(pl, P.Hkv, task);
  const size_t rows = static_cast<size_t>(pl.rows);
  const size_t dp = static_cast<size_t>(pl.dp);
  std::memset(T.acc_a, 0, rows * dp * sizeof(float));  // dQ
  if (BwdRows(BP, pl, tk.b, tk.hk, tk.hchunk, tk.qtile, &T)) {
    BwdPackQuery(BP, pl, tk.b, tk.hk, tk.hchunk, tk.qtile, false, &T);
    BwdQueryTileKeys<kDim>(BP, pl, tk, &T, nullptr, [&](int64_t, size_t n) {
      // dQ_i += sum_j dS_ij K_j.
      PvTile<float>(T.dpt, rows, 1, n, T.kt, dp, dp, T.acc_a, T.ones, rows, T.live);
    });
  }
  if (BP.dq == nullptr) return true;
  bool finite = true;
  const int64_t h_begin = tk.hk * P.G + tk.hchunk * pl.hc;
  const int64_t p0 = tk.qtile * pl.tq;
  for (int64_t hl = 0; hl < T.n_heads; ++hl) {
    float* dst = BP.dq + tk.b * BP.dqs[0] + (h_begin + hl) * BP.dqs[1] + p0 * BP.dqs[2];
    finite &= BwdStoreRows(T.acc_a + static_cast<size_t>(hl * pl.tq) * dp, dp,
                           static_cast<size_t>(T.n_pos), P.D, BP.scale, dst, BP.dqs[2], BP.dqs[3]);
  }
  return finite;
}

}  // namespace HWY_NAMESPACE
}  // namespace kernels
}  // namespace attnflow
HWY_AFTER_NAMESPACE();

#endif  // include guard
