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

// The float64 score q[b,h,i,:] · k[b,hk,j,:], summed over c in order.
inline double QkDot(const TensorView& q, const TensorView& k, int64_t b, int64_t h, int64_t hk,
                    int64_t i, int64_t j, int64_t head_dim) {
  double acc = 0.0;
  for (int64_t c = 0; c < head_dim; ++c) {
    acc += q.load(q.offset(b, h, i, c)) * k.load(k.offset(b, hk, j, c));
  }
  return acc;
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
