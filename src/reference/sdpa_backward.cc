// sdpa_backward.cc — the float64 gradient of the reference attention (the
// oracle of the fast backward, AttentionBackward; it stays forever).
//
// Row by row, exactly as sdpa.cc evaluates the forward (the same masked
// logits, the same dead-row and NaN rules), then the softmax gradient:
//   P_j = exp(m_j - lse), dP_j = dout_i . v_j, D_i = sum_j P_j dP_j - dlse_i,
//   dS_j = P_j (dP_j - D_i) [* (1 - tanh^2(x_j / softcap))],
//   dq_i = scale sum_j dS_j k_j; dk_j += scale dS_j q_i; dv_j += P_j dout_i.
// dk/dv are accumulated in float64 per kv head over its whole query-head
// group and stored once at the end. No threads, no SIMD: clarity over speed.
//
// Invariants: a key whose weight is exactly 0 (hidden, or underflowed)
// contributes nothing (also not 0 * Inf); a row with no visible key gives
// dq 0 and adds nothing to dk/dv; a NaN row (NaN in a visible logit) gives
// NaN in dq and in dk/dv of every key of its kv head, as the forward's NaN
// weights imply.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "reference/row_logits.h"

namespace attnflow {
namespace reference {

Status SdpaBackward(const TensorView& dq, const TensorView& dk, const TensorView& dv,
                    const TensorView& dout, const TensorView& dlse, const TensorView& q,
                    const TensorView& k, const TensorView& v, const SdpaOptions& opt) {
  SdpaDims d;
  ATTNFLOW_RETURN_IF_ERROR(ValidateSdpaBackward("reference::sdpa_backward", dq, dk, dv, dout, dlse,
                                                TensorView(), TensorView(), q, k, v, opt, &d));
  const int64_t B = d.batch, H = d.num_heads, Hkv = d.num_kv_heads;
  const int64_t Lq = d.q_len, Lk = d.kv_len, D = d.head_dim, Dv = d.v_dim;
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

  const TensorView mask = BroadcastAttnMask(opt, d);  // validated above
  const bool bool_mask = !mask.empty_view() && mask.dtype == DType::kBool;

  // Buffers from the checked allocator (never an exception on a huge size):
  // dk/dv accumulators of one kv head [Lk][D + Dv], and per row m, x, P, dP
  // [Lk] each plus dq [D].
  if (Lk > (INT64_MAX / 8 - D - Dv) / (D + Dv + 4)) {
    return ResourceExhausted("reference::sdpa_backward: buffers for Lk=" + std::to_string(Lk) +
                             ", D=" + std::to_string(D) + ", Dv=" + std::to_string(Dv) +
                             " overflow");
  }
  Result<Tensor> buf = Tensor::Zeros(DType::kF64, {Lk * (D + Dv + 4) + D + 1});
  if (!buf.ok()) {
    return ResourceExhausted("reference::sdpa_backward: cannot allocate buffers for Lk=" +
                             std::to_string(Lk) + " (" + buf.status().message() + ")");
  }
  double* const acc_k = buf->data<double>();  // [Lk][D]
  double* const acc_v = acc_k + Lk * D;       // [Lk][Dv]
  double* const m = acc_v + Lk * Dv;          // masked logits
  double* const x = m + Lk;                   // scaled scores (before the softcap)
  double* const p = x + Lk;                   // weights
  double* const dp = p + Lk;                  // dout . v_j
  double* const gq = dp + Lk;                 // dq row

  for (int64_t b = 0; b < B; ++b) {
    const int64_t valid_kv = ValidKvLen(opt.kv_lens, b, Lk);
    const int64_t diag_kv = DiagonalKvLen(opt.kv_align, Lk, valid_kv);
    for (int64_t hk = 0; hk < Hkv; ++hk) {
      for (int64_t t = 0; t < Lk * (D + Dv); ++t) acc_k[t] = 0.0;
      for (int64_t h = hk * (H / Hkv); h < (hk + 1) * (H / Hkv); ++h) {
        for (int64_t i = 0; i < Lq; ++i) {
          RowLogits logit = RowLogits::Of(opt, mask, bool_mask, b, h, i, Lq, diag_kv, valid_kv);
          for (int64_t j = 0; j < Lk; ++j) {
            x[j] = QkDot(q, k, b, h, hk, i, j, D) * d.scale;
            m[j] = logit(j, x[j]);
          }
          for (int64_t c = 0; c < D; ++c) gq[c] = 0.0;
          if (logit.nan) {
            // NaN weights everywhere (the forward's rule): NaN gradients for
            // this row and every key of its kv head.
            for (int64_t c = 0; c < D; ++c) gq[c] = kNaN;
            for (int64_t t = 0; t < Lk * (D + Dv); ++t) acc_k[t] = kNaN;
          } else if (logit.max != kNegInf) {
            double sum = 0.0;
            for (int64_t j = 0; j < Lk; ++j) {
              p[j] = m[j] == kNegInf ? 0.0 : std::exp(m[j] - logit.max);
              sum += p[j];
            }
            double dsum = 0.0;  // D_i = sum_j P_j dP_j
            for (int64_t j = 0; j < Lk; ++j) {
              p[j] /= sum;
              dp[j] = 0.0;
              if (p[j] == 0.0) continue;
              for (int64_t c = 0; c < Dv; ++c) {
                dp[j] += dout.load(dout.offset(b, h, i, c)) * v.load(v.offset(b, hk, j, c));
              }
              dsum += p[j] * dp[j];
            }
            if (!dlse.empty_view()) dsum -= dlse.load(dlse.offset(b, h, i));
            for (int64_t j = 0; j < Lk; ++j) {
              if (p[j] == 0.0) continue;
              double ds = p[j] * (dp[j] - dsum);
              if (opt.softcap > 0.0) {
                const double th = std::tanh(x[j] / opt.softcap);
                ds *= 1.0 - th * th;
              }
              const double gs = ds * d.scale;
              for (int64_t c = 0; c < D; ++c) {
                gq[c] += gs * k.load(k.offset(b, hk, j, c));
                acc_k[j * D + c] += gs * q.load(q.offset(b, h, i, c));
              }
              for (int64_t c = 0; c < Dv; ++c) {
                acc_v[j * Dv + c] += p[j] * dout.load(dout.offset(b, h, i, c));
              }
            }
          }
          if (!dq.empty_view()) {
            for (int64_t c = 0; c < D; ++c) dq.store(dq.offset(b, h, i, c), gq[c]);
          }
        }
      }
      for (int64_t j = 0; j < Lk; ++j) {
        if (!dk.empty_view()) {
          for (int64_t c = 0; c < D; ++c) dk.store(dk.offset(b, hk, j, c), acc_k[j * D + c]);
        }
        if (!dv.empty_view()) {
          for (int64_t c = 0; c < Dv; ++c) dv.store(dv.offset(b, hk, j, c), acc_v[j * Dv + c]);
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace reference
}  // namespace attnflow
