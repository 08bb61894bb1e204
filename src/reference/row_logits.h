// reference/row_logits.h — the float64 scores and masked logits of one query
// row, shared by reference::Sdpa and reference::SdpaBackward so that the
// backward differentiates exactly the forward's logits.
//
// Invariants (docs/semantics.md): the logit of key j is softcap(x) for the
// scaled score x, plus the float mask, plus the ALiBi bias; it is -inf for a
// key outside the row's visible range, masked out by a bool mask, or whose
// sum is -inf. The row's max skips -inf; a NaN logit marks the row NaN.
#pragma once

#include <cmath>
#include <cstdint>

#include "attnflow/attention.h"
#include "attnflow/semantics.h"
#include "attnflow/tensor.h"

namespace attnflow {
namespace reference {

// opt.attn_mask broadcast to [batch, num_heads, q_len, kv_len] (an empty
// view without a mask); the caller has validated the options against d.
inline TensorView BroadcastAttnMask(const SdpaOptions& opt, const SdpaDims& d) {
  TensorView mask;
  if (!opt.attn_mask.empty_view()) {
    const int64_t target[4] = {d.batch, d.num_heads, d.q_len, d.kv_len};
    BroadcastMask(opt.attn_mask, target, &mask);
  }
  return mask;
}

// The float64 score q[b,h,i,:] · k[b,hk,j,:]: four partial sums over
// c mod 4, added as (s0 + s1) + (s2 + s3) (one fixed order for every layout
// and dtype, so any strides give the same bits; four chains instead of one
// so the oracle is not bound by the latency of one long addition chain).
// F32 rows with unit stride (every model's q and cache) are read through
// their pointers, other views element by element.
inline double QkDot(const TensorView& q, const TensorView& k, int64_t b, int64_t h, int64_t hk,
                    int64_t i, int64_t j, int64_t head_dim) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  if (q.dtype == DType::kF32 && k.dtype == DType::kF32 && q.strides[3] == 1 &&
      k.strides[3] == 1) {
    const float* qr = static_cast<const float*>(q.data) + q.offset(b, h, i, 0);
    const float* kr = static_cast<const float*>(k.data) + k.offset(b, hk, j, 0);
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t c = 0;
    for (; c + 4 <= head_dim; c += 4) {
      s0 += double(qr[c]) * double(kr[c]);
      s1 += double(qr[c + 1]) * double(kr[c + 1]);
      s2 += double(qr[c + 2]) * double(kr[c + 2]);
      s3 += double(qr[c + 3]) * double(kr[c + 3]);
    }
    double* tail[4] = {&s0, &s1, &s2, &s3};
    for (; c < head_dim; ++c) *tail[c & 3] += double(qr[c]) * double(kr[c]);
    return (s0 + s1) + (s2 + s3);
  } else {
    for (int64_t c = 0; c < head_dim; ++c)
      s[c & 3] += q.load(q.offset(b, h, i, c)) * k.load(k.offset(b, hk, j, c));
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

struct RowLogits {
  const SdpaOptions& opt;
  const TensorView& mask;  // broadcast to [B,H,Lq,Lk], or empty
  bool bool_mask;
  double slope;  // ALiBi slope of (b, h); unused without slopes
  int64_t b, h, i, q_len, diag_kv;
  KeyRange kr;
  double max = kNegInf;
  bool nan = false;

  // Row i of (b, h): its ALiBi slope and its visible keys from the options.
  static RowLogits Of(const SdpaOptions& opt, const TensorView& mask, bool bool_mask, int64_t b,
                      int64_t h, int64_t i, int64_t q_len, int64_t diag_kv, int64_t valid_kv) {
    const double slope =
        opt.alibi_slopes.empty_view() ? 0.0 : AlibiSlope(opt.alibi_slopes, b, h);
    return {opt, mask, bool_mask, slope, b, h, i, q_len, diag_kv,
            VisibleKeys(opt.causal, opt.window_left, opt.window_right, i, q_len, diag_kv,
                        valid_kv)};
  }

  // The logit of key j from its scaled score x, folded into max / nan.
  double operator()(int64_t j, double x) {
    double mx = Softcap(x, opt.softcap);
    bool allowed = j >= kr.first && j <= kr.last;
    if (!mask.empty_view()) {
      const double mv = mask.load(mask.offset(b, h, i, j));
      if (bool_mask) {
        allowed = allowed && mv != 0.0;
      } else {
        mx += mv;
      }
    }
    if (!opt.alibi_slopes.empty_view()) mx += AlibiBias(slope, i, j, q_len, diag_kv);
    if (!allowed || mx == kNegInf) return kNegInf;
    if (std::isnan(mx)) {
      nan = true;
    } else if (mx > max) {
      max = mx;
    }
    return mx;
  }
};

}  // namespace reference
}  // namespace attnflow
