// kernels/naive.cc — the naive materialised fp32 schedule (see naive.h) and
// the modelled DRAM traffic of the naive and flash schedules (kernels.h).
//
// Per task (b, h), in three passes over memory:
//   1. S[i][j] = scale·q_i·k_j (+ float mask, + ALiBi), -inf where masked: WRITE S
//   2. per row: READ S for the max, exp and sum, WRITE P (and lse)
//   3. per row: READ P, O_i = Σ_j P[i][j]·v_j: WRITE O
// S and P are per-worker scratch of Lq·Lk floats each (allocated once per
// call with the library's checked allocator), so the L×L intermediates really
// are materialised. Invariants: see naive.h.
#include "kernels/naive.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attnflow/kernels.h"
#include "attnflow/semantics.h"
#include "attnflow/tensor.h"

namespace attnflow {
namespace kernels {
namespace {

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// Dot product in fp32 with 8 partial sums combined in a fixed tree.
float Dot(const float* a, int64_t as, const float* b, int64_t bs, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int u = 0; u < 8; ++u) acc[u] += a[(c + u) * as] * b[(c + u) * bs];
  for (; c < n; ++c) acc[c % 8] += a[c * as] * b[c * bs];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

}  // namespace

std::string NaiveUnsupportedReason(const TensorView& out, const TensorView& lse,
                                   const TensorView& q, const TensorView& k,
                                   const TensorView& v) {
  if (q.dtype != DType::kF32 || k.dtype != DType::kF32 || v.dtype != DType::kF32)
    return std::string("naive takes F32 q/k/v, got q ") + q.describe() + ", k " + k.describe() +
           ", v " + v.describe();
  if (out.dtype != DType::kF32) return "naive writes F32 out, got " + out.describe();
  if (!lse.empty_view() && lse.dtype != DType::kF32)
    return "naive writes F32 lse, got " + lse.describe();
  return "";
}

Status NaiveAttention(const TensorView& out, const TensorView& lse, const TensorView& q,
                      const TensorView& k, const TensorView& v, const SdpaOptions& opt,
                      const SdpaDims& d, ThreadPool& pool) {
  const int64_t B = d.batch, H = d.num_heads, Hkv = d.num_kv_heads, Lq = d.q_len,
                Lk = d.kv_len, D = d.head_dim, Dv = d.v_dim;
  if (B == 0 || H == 0 || Lq == 0) return Status::Ok();
  const int workers = std::max(pool.NumWorkers(), 1);
  if (Lk > 0 && Lq > std::numeric_limits<int64_t>::max() / 8 / Lk / workers)
    return ResourceExhausted("attention (naive): S and P of " + std::to_string(Lq) + "x" +
                             std::to_string(Lk) + " floats per worker overflow");
  const int64_t sp = Lq * Lk;
  Result<Tensor> scratch = Tensor::Zeros(DType::kF32, {static_cast<int64_t>(workers), 2 * sp + 1});
  if (!scratch.ok())
    return ResourceExhausted("attention (naive): cannot allocate S and P (" +
                             std::to_string(workers) + " workers x 2 x " + std::to_string(Lq) +
                             "x" + std::to_string(Lk) + " floats): " +
                             scratch.status().message());
  float* const base = scratch->data<float>();
  const bool has_mask = !opt.attn_mask.empty_view();
  TensorView mask;
  if (has_mask) {
    const int64_t target[4] = {B, H, Lq, Lk};
    if (!BroadcastMask(opt.attn_mask, target, &mask))
      return InvalidArgument("attention (naive): mask " + opt.attn_mask.shape_string() +
                             " does not broadcast to [B,H,Lq,Lk]");
  }
  const bool bool_mask = has_mask && mask.dtype == DType::kBool;
  const float scale = static_cast<float>(d.scale);
  const float* qp = q.ptr<float>();
  const float* kp = k.ptr<float>();
  const float* vp = v.ptr<float>();
  float* op = out.ptr<float>();

  pool.ParallelFor(B * H, [&](int64_t task, int worker) {
    const int64_t b = task / H, h = task % H, hk = KvHeadFor(h, H, Hkv);
    float* S = base + static_cast<int64_t>(worker) * (2 * sp + 1);
    float* P = S + sp;
    const int64_t valid_kv = ValidKvLen(opt.kv_lens, b, Lk);
    const int64_t diag_kv = DiagonalKvLen(opt.kv_align, Lk, valid_kv);
    const double slope =
        opt.alibi_slopes.empty_view() ? 0.0 : AlibiSlope(opt.alibi_slopes, b, h);
    const float cap = static_cast<float>(opt.softcap);
    // Pass 1: write S.
    for (int64_t i = 0; i < Lq; ++i) {
      const KeyRange kr =
          VisibleKeys(opt.causal, opt.window_left, opt.window_right, i, Lq, diag_kv, valid_kv);
      const float* qi = qp + q.offset(b, h, i, 0);
      for (int64_t j = 0; j < Lk; ++j) {
        float s = scale * Dot(qi, q.strides[3], kp + k.offset(b, hk, j, 0), k.strides[3], D);
        if (cap > 0.0f) s = cap * std::tanh(s / cap);
        bool allowed = j >= kr.first && j <= kr.last;
        if (has_mask) {
          const double mv = mask.load(mask.offset(b, h, i, j));
          if (bool_mask) allowed = allowed && mv != 0.0;
          else s += static_cast<float>(mv);
        }
        if (!opt.alibi_slopes.empty_view())
          s += static_cast<float>(AlibiBias(slope, i, j, Lq, diag_kv));
        S[i * Lk + j] = allowed ? s : kNegInfF;
      }
    }
    // Pass 2: read S, write P (and lse).
    for (int64_t i = 0; i < Lq; ++i) {
      const float* si = S + i * Lk;
      float* pi = P + i * Lk;
      float mx = kNegInfF;
      bool nan = false;
      for (int64_t j = 0; j < Lk; ++j) {
        if (std::isnan(si[j])) nan = true;
        else if (si[j] > mx) mx = si[j];
      }
      float row_lse;
      if (nan) {
        for (int64_t j = 0; j < Lk; ++j) pi[j] = std::numeric_limits<float>::quiet_NaN();
        row_lse = std::numeric_limits<float>::quiet_NaN();
      } else if (mx == kNegInfF) {  // dead row
        for (int64_t j = 0; j < Lk; ++j) pi[j] = 0.0f;
        row_lse = kNegInfF;
      } else {
        float sum = 0.0f;
        for (int64_t j = 0; j < Lk; ++j) sum += (pi[j] = std::exp(si[j] - mx));
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j < Lk; ++j) pi[j] *= inv;
        row_lse = mx + std::log(sum);
      }
      if (!lse.empty_view()) lse.ptr<float>()[lse.offset(b, h, i)] = row_lse;
    }
    // Pass 3: read P, write O.
    for (int64_t i = 0; i < Lq; ++i) {
      const float* pi = P + i * Lk;
      float* oi = op + out.offset(b, h, i, 0);
      for (int64_t c = 0; c < Dv; ++c) oi[c * out.strides[3]] = 0.0f;
      for (int64_t j = 0; j < Lk; ++j) {
        const float p = pi[j];
        if (p == 0.0f) continue;  // masked keys contribute nothing (and skip -inf·0)
        const float* vj = vp + v.offset(b, hk, j, 0);
        for (int64_t c = 0; c < Dv; ++c) oi[c * out.strides[3]] += p * vj[c * v.strides[3]];
      }
    }
  });
  return Status::Ok();
}

}  // namespace kernels

IoModel ModelAttentionIo(int64_t batch, int64_t num_heads, int64_t num_kv_heads, int64_t q_len,
                         int64_t kv_len, int64_t head_dim, int64_t tile_q) {
  const double f = 4.0;  // fp32 bytes
  const double B = static_cast<double>(batch), H = static_cast<double>(num_heads),
               Hkv = static_cast<double>(num_kv_heads > 0 ? num_kv_heads : num_heads),
               Lq = static_cast<double>(q_len), Lk = static_cast<double>(kv_len),
               D = static_cast<double>(head_dim);
  const double q_o = 2.0 * B * H * Lq * D * f;  // read Q, write O
  IoModel m;
  m.s_and_p_bytes = 4.0 * B * H * Lq * Lk * f;  // write S, read S, write P, read P
  // Naive: each (b, h) reads its K and V head once.
  m.naive_bytes = q_o + 2.0 * B * H * Lk * D * f + m.s_and_p_bytes;
  // Flash: K and V streamed once per query tile (per kv head, all G heads of a
  // group share a tile of G·tile_q rows in attnflow's prefill kernel).
  const double G = H / Hkv;
  const double rows = G * Lq;
  const double tiles = tile_q > 0 ? std::ceil(rows / static_cast<double>(tile_q)) : 1.0;
  m.flash_bytes = q_o + 2.0 * B * Hkv * Lk * D * f * tiles;
  return m;
}

}  // namespace attnflow
