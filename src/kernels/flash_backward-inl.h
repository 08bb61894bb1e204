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

#include "hwy/highway.h"
#include "kernels/flash_common-inl.h"
#include "kernels/internal.h"

HWY_BEFORE_NAMESPACE();
namespace attnflow {
namespace kernels {
namespace HWY_NAMESPACE {

// One worker's buffers (BwdScratchLayout) and the metadata of the current
// query tile.
struct BwdTile {
  float *qt, *dot, *qr, *dor, *kt, *vt, *st, *dpt, *tt, *tmax, *acc_a, *acc_b, *lse2, *lse2_lo,
      *delta, *ones, *slope;
  double* dacc;
  int32_t *first, *last, *diag, *livei;
  uint8_t *live, *pairlive, *ones8;
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
  t.qt = scratch + L.qt;
  t.dot = scratch + L.dot;
  t.qr = scratch + L.qr;
  t.dor = scratch + L.dor;
  t.kt = scratch + L.kt;
  t.vt = scratch + L.vt;
  t.st = scratch + L.st;
  t.dpt = scratch + L.dpt;
  t.tt = scratch + L.tt;
  t.tmax = scratch + L.tmax;
  t.acc_a = scratch + L.acc_a;
  t.acc_b = scratch + L.acc_b;
  t.dacc = reinterpret_cast<double*>(scratch + L.dacc);
  t.lse2 = scratch + L.lse2;
  t.lse2_lo = scratch + L.lse2_lo;
  t.delta = scratch + L.delta;
  t.ones = scratch + L.ones;
  t.slope = scratch + L.slope;
  t.first = reinterpret_cast<int32_t*>(scratch + L.first);
  t.last = reinterpret_cast<int32_t*>(scratch + L.last);
  t.diag = reinterpret_cast<int32_t*>(scratch + L.diag);
  t.livei = reinterpret_cast<int32_t*>(scratch + L.livei);
  t.live = reinterpret_cast<uint8_t*>(scratch + L.live);
  t.pairlive = reinterpret_cast<uint8_t*>(scratch + L.pairlive);
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
    if (!T->live[r]) {
      for (size_t d = 0; d < dp; ++d) T->qt[d * rows + r] = 0.0f;
      for (size_t c = 0; c < dvp; ++c) T->dot[c * rows + r] = 0.0f;
      if (rows_too) {
        std::memset(T->qr + r * dp, 0, dp * sizeof(float));
        std::memset(T->dor + r * dvp, 0, dvp * sizeof(float));
      }
      continue;
    }
    const int64_t h = h_begin + hl, i = p0 + pp;
    const float* q = P.q + b * P.qs[0] + h * P.qs[1] + i * P.qs[2];
    const float* g = BP.dout + b * BP.dos[0] + h * BP.dos[1] + i * BP.dos[2];
    for (int64_t d = 0; d < P.D; ++d) {
      const float x = q[d * P.qs[3]];
      T->qt[static_cast<size_t>(d) * rows + r] = x;
      if (rows_too) T->qr[r * dp + static_cast<size_t>(d)] = x;
    }
    for (size_t d = static_cast<size_t>(P.D); d < dp; ++d) {
      T->qt[d * rows + r] = 0.0f;
      if (rows_too) T->qr[r * dp + d] = 0.0f;
    }
    for (int64_t c = 0; c < P.Dv; ++c) {
      const float x = g[c * BP.dos[3]];
      T->dot[static_cast<size_t>(c) * rows + r] = x;
      if (rows_too) T->dor[r * dvp + static_cast<size_t>(c)] = x;
    }
    for (size_t c = static_cast<size_t>(P.Dv); c < dvp; ++c) {
      T->dot[c * rows + r] = 0.0f;
      if (rows_too) T->dor[r * dvp + c] = 0.0f;
    }
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
  if (P.slope2 != nullptr) AlibiCols(T->st, rows, n, js, T->diag, T->slope, T->pairlive);
  if (P.mask != nullptr) {
    for (size_t r = 0; r < rows; ++r) {
      if (!T->live[r]) continue;
      const int64_t hl = static_cast<int64_t>(r) / tq, pp = static_cast<int64_t>(r) % tq;
      ApplyMaskRow(P, b, h_begin + hl, p0 + pp, js, n, T->st + r, rows);
    }
  }
  if (!(js >= T->max_first && je - 1 <= T->min_last)) {
    RangeMaskCols(T->st, rows, n, js, T->first, T->last, T->pairlive);
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
  const int64_t b = tk.b, hk = tk.hk, hchunk = tk.hchunk, qtile = tk.qtile;
  if (!BwdRows(BP, pl, b, hk, hchunk, qtile, &T)) return;
  BwdPackQuery(BP, pl, b, hk, hchunk, qtile, false, &T);
  const size_t rows = static_cast<size_t>(pl.rows);
  double* acc = T.dacc;
  for (size_t r = 0; r < 2 * rows; ++r) acc[r] = 0.0;
  const int64_t tkv = pl.tkv;
  for (int64_t t = T.u_first / tkv; t <= T.u_last / tkv; ++t) {
    const int64_t js = std::max(t * tkv, T.u_first);
    const int64_t je = std::min((t + 1) * tkv, T.u_last + 1);
    const size_t n = static_cast<size_t>(je - js);
    BwdPackKv(P, pl, b, hk, js, n, &T);
    BwdBlock<kDim>(BP, pl, b, hk, hchunk, qtile, js, n, &T, acc);
  }
  const int64_t h_begin = hk * P.G + hchunk * pl.hc;
  const int64_t p0 = qtile * pl.tq;
  for (size_t r = 0; r < rows; ++r) {
    if (!T.live[r]) continue;
    const int64_t hl = static_cast<int64_t>(r) / pl.tq, pp = static_cast<int64_t>(r) % pl.tq;
    const size_t row = static_cast<size_t>((b * P.H + h_begin + hl) * P.Lq + p0 + pp);
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
  const int64_t b = tk.b, hk = tk.hk, hchunk = tk.hchunk, qtile = tk.qtile;
  const size_t rows = static_cast<size_t>(pl.rows);
  const size_t dp = static_cast<size_t>(pl.dp);
  std::memset(T.acc_a, 0, rows * dp * sizeof(float));  // dQ
  if (BwdRows(BP, pl, b, hk, hchunk, qtile, &T)) {
    BwdPackQuery(BP, pl, b, hk, hchunk, qtile, false, &T);
    const int64_t tkv = pl.tkv;
    for (int64_t t = T.u_first / tkv; t <= T.u_last / tkv; ++t) {
      const int64_t js = std::max(t * tkv, T.u_first);
      const int64_t je = std::min((t + 1) * tkv, T.u_last + 1);
      const size_t n = static_cast<size_t>(je - js);
      BwdPackKv(P, pl, b, hk, js, n, &T);
      BwdBlock<kDim>(BP, pl, b, hk, hchunk, qtile, js, n, &T);
      // dQ_i += sum_j dS_ij K_j.
      PvTile<float>(T.dpt, rows, 1, n, T.kt, dp, dp, T.acc_a, T.ones, rows, T.live);
    }
  }
  if (BP.dq == nullptr) return true;
  bool finite = true;
  const int64_t h_begin = hk * P.G + hchunk * pl.hc;
  const int64_t p0 = qtile * pl.tq;
  for (int64_t hl = 0; hl < T.n_heads; ++hl) {
    float* dst = BP.dq + b * BP.dqs[0] + (h_begin + hl) * BP.dqs[1] + p0 * BP.dqs[2];
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
