// merge.cc — MergeAttentionStates: combine two partial attention results over
// disjoint key sets through their log-sum-exp (flash-decoding, chunked
// prefill, distributed attention). Dead partials (lse = -inf) contribute
// nothing; two dead partials give out 0, lse -inf.
#include <cmath>
#include <limits>

#include "attnflow/attention.h"

namespace attnflow {
namespace {
Status CheckState(const char* name, const TensorView& t, int rank,
                  const TensorView& ref) {
  bool ok = t.rank == rank && t.dtype == DType::kF32 && (t.numel() == 0 || t.data);
  for (int i = 0; ok && i < rank; ++i) ok = t.shape[i] == ref.shape[i];
  if (!ok) {
    return InvalidArgument(std::string("merge_attention_states: ") + name + " is " +
                           t.describe() + ", expected F32 " +
                           ShapeString(ref.shape.data(), rank));
  }
  return Status::Ok();
}
}  // namespace

Status MergeAttentionStates(const TensorView& out, const TensorView& lse,
                            const TensorView& out_a, const TensorView& lse_a,
                            const TensorView& out_b, const TensorView& lse_b) {
  if (out_a.rank != 4 || out_a.dtype != DType::kF32) {
    return InvalidArgument("merge_attention_states: out_a is " + out_a.describe() +
                           ", expected F32 [B,H,Lq,Dv]");
  }
  ATTNFLOW_RETURN_IF_ERROR(CheckState("out", out, 4, out_a));
  ATTNFLOW_RETURN_IF_ERROR(CheckState("out_b", out_b, 4, out_a));
  ATTNFLOW_RETURN_IF_ERROR(CheckState("lse_a", lse_a, 3, out_a));
  ATTNFLOW_RETURN_IF_ERROR(CheckState("lse_b", lse_b, 3, out_a));
  ATTNFLOW_RETURN_IF_ERROR(CheckState("lse", lse, 3, out_a));
  const int64_t B = out_a.shape[0], H = out_a.shape[1], Lq = out_a.shape[2],
                Dv = out_a.shape[3];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        const float la = lse_a.ptr<float>()[lse_a.offset(b, h, i)];
        const float lb = lse_b.ptr<float>()[lse_b.offset(b, h, i)];
        const float mx = std::fmax(la, lb);
        float wa, wb, l;
        if (std::isnan(la) || std::isnan(lb)) {
          wa = wb = l = std::numeric_limits<float>::quiet_NaN();
        } else if (mx == -INFINITY) {
          wa = wb = 0.0f;
          l = -INFINITY;
        } else {
          const float ea = std::exp(la - mx), eb = std::exp(lb - mx);
          const float s = ea + eb;
          wa = ea / s;
          wb = eb / s;
          l = mx + std::log(s);
        }
        for (int64_t c = 0; c < Dv; ++c) {
          const float a = out_a.ptr<float>()[out_a.offset(b, h, i, c)];
          const float bb = out_b.ptr<float>()[out_b.offset(b, h, i, c)];
          // A dead partial's out is 0 by contract; weight 0 must not turn an
          // Inf/NaN-free 0 into NaN, so skip zero weights explicitly.
          float r = 0.0f;
          if (wa != 0.0f || std::isnan(wa)) r += wa * a;
          if (wb != 0.0f || std::isnan(wb)) r += wb * bb;
          out.ptr<float>()[out.offset(b, h, i, c)] = r;
        }
        lse.ptr<float>()[lse.offset(b, h, i)] = l;
      }
  return Status::Ok();
}

}  // namespace attnflow
