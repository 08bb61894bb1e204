// sdpa.cc — the float64 reference attention (the oracle; it stays forever).
//
// Straightforward row-by-row evaluation of docs/semantics.md in double
// precision (softcap, per-batch ALiBi slopes and the per-sequence diagonal
// included; the "scaled" stage is before the softcap, "masked" after it). No tiling, no SIMD, no threads: clarity over speed. Stages are
// materialised only when a StageSink asks for them (cheap when off).
//
// Non-finite inputs (documented in docs/semantics.md):
//  * a NaN among a row's visible logits makes that row's weights, lse and out
//    NaN (only that row);
//  * a -inf float-mask value hides the key exactly like a false bool;
//  * a +inf visible logit makes the row NaN (inf - inf), as in PyTorch.
#include <cmath>
#include <limits>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "reference/row_logits.h"

namespace attnflow {
namespace reference {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct StageBuffers {
  Tensor scores, scaled, masked, weights, lse, out;
  bool any = false;
};

Status AllocStage(StageSink* sink, const char* name, const Shape& shape,
                  Tensor* t, bool* any) {
  if (sink == nullptr || !sink->Wants(name)) return Status::Ok();
  Result<Tensor> r = Tensor::Zeros(DType::kF64, shape);
  if (!r.ok()) return r.status();
  *t = std::move(r).value();
  *any = true;
  return Status::Ok();
}

}  // namespace

Status Sdpa(const TensorView& out, const TensorView& lse, const TensorView& q,
            const TensorView& k, const TensorView& v, const SdpaOptions& opt,
            StageSink* sink) {
  SdpaDims d;
  ATTNFLOW_RETURN_IF_ERROR(ValidateSdpa("reference::sdpa", out, lse, q, k, v, opt, &d));
  const int64_t B = d.batch, H = d.num_heads, Hkv = d.num_kv_heads;
  const int64_t Lq = d.q_len, Lk = d.kv_len, D = d.head_dim, Dv = d.v_dim;

  const TensorView mask = BroadcastAttnMask(opt, d);  // validated above
  const bool bool_mask = !mask.empty_view() && mask.dtype == DType::kBool;

  StageBuffers st;
  const Shape sq = {B, H, Lq, Lk};
  ATTNFLOW_RETURN_IF_ERROR(AllocStage(sink, "scores", sq, &st.scores, &st.any));
  ATTNFLOW_RETURN_IF_ERROR(AllocStage(sink, "scaled", sq, &st.scaled, &st.any));
  ATTNFLOW_RETURN_IF_ERROR(AllocStage(sink, "masked", sq, &st.masked, &st.any));
  ATTNFLOW_RETURN_IF_ERROR(AllocStage(sink, "weights", sq, &st.weights, &st.any));
  ATTNFLOW_RETURN_IF_ERROR(AllocStage(sink, "lse", {B, H, Lq}, &st.lse, &st.any));
  ATTNFLOW_RETURN_IF_ERROR(AllocStage(sink, "out", {B, H, Lq, Dv}, &st.out, &st.any));

  // Row buffers: O(Lk + Dv). A huge (e.g. stride-0 broadcast) Lk must give an
  // error, never an exception or an abort: they come from the library's
  // checked allocator (Tensor::Zeros), not from std::vector, whose operator
  // new throws (or, under ASan, aborts) on an impossible size.
  if (Lk > (INT64_MAX - Dv) / 3) {
    return ResourceExhausted("reference::sdpa: row buffers for Lk=" + std::to_string(Lk) +
                             ", Dv=" + std::to_string(Dv) + " overflow");
  }
  Result<Tensor> rows = Tensor::Zeros(DType::kF64, {3 * Lk + Dv});
  if (!rows.ok()) {
    return ResourceExhausted("reference::sdpa: cannot allocate row buffers for Lk=" +
                             std::to_string(Lk) + ", Dv=" + std::to_string(Dv) + " (" +
                             rows.status().message() + ")");
  }
  double* const s = rows->data<double>();
  double* const m = s + Lk;
  double* const w = m + Lk;
  double* const o = w + Lk;

  for (int64_t b = 0; b < B; ++b) {
    const int64_t valid_kv = ValidKvLen(opt.kv_lens, b, Lk);
    const int64_t diag_kv = DiagonalKvLen(opt.kv_align, Lk, valid_kv);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = KvHeadFor(h, H, Hkv);
      for (int64_t i = 0; i < Lq; ++i) {
        RowLogits logit = RowLogits::Of(opt, mask, bool_mask, b, h, i, Lq, diag_kv, valid_kv);
        // A key outside the row's visible range has logit -inf whatever its
        // score; its score is computed only when a stage shows it.
        const bool all_scores = st.scores.defined() || st.scaled.defined();
        for (int64_t j = 0; j < Lk; ++j) {
          if (!all_scores && (j < logit.kr.first || j > logit.kr.last)) {
            s[j] = kNaN;
            m[j] = kNegInf;
            if (st.masked.defined())
              st.masked.data<double>()[((b * H + h) * Lq + i) * Lk + j] = kNegInf;
            continue;
          }
          const double acc = QkDot(q, k, b, h, hk, i, j, D);
          s[j] = acc;
          double x = acc * d.scale;
          const double mx = logit(j, x);
          m[j] = mx;
          if (st.any) {
            const int64_t so = ((b * H + h) * Lq + i) * Lk + j;
            if (st.scores.defined()) st.scores.data<double>()[so] = acc;
            if (st.scaled.defined()) st.scaled.data<double>()[so] = x;
            if (st.masked.defined()) st.masked.data<double>()[so] = mx;
          }
        }
        // Softmax with the dead-row rule.
        double row_lse;
        if (logit.nan) {
          row_lse = kNaN;
          for (int64_t j = 0; j < Lk; ++j) w[j] = kNaN;
        } else if (logit.max == kNegInf) {  // no visible key
          row_lse = kNegInf;
          for (int64_t j = 0; j < Lk; ++j) w[j] = 0.0;
        } else {
          double sum = 0.0;
          for (int64_t j = 0; j < Lk; ++j) {
            w[j] = m[j] == kNegInf ? 0.0 : std::exp(m[j] - logit.max);
            sum += w[j];
          }
          for (int64_t j = 0; j < Lk; ++j) w[j] /= sum;
          row_lse = logit.max + std::log(sum);
        }
        for (int64_t c = 0; c < Dv; ++c) o[c] = 0.0;
        // The weighted sum, unless nobody asked for out (a capture that
        // wants the weights only).
        const bool want_out = !out.empty_view() || st.out.defined();
        for (int64_t j = 0; want_out && j < Lk; ++j) {
          if (w[j] == 0.0) continue;  // exact zeros contribute nothing (also Inf*0)
          for (int64_t c = 0; c < Dv; ++c) o[c] += w[j] * v.load(v.offset(b, hk, j, c));
        }
        if (logit.nan) {
          for (int64_t c = 0; c < Dv; ++c) o[c] = kNaN;
        }
        if (!out.empty_view()) {
          for (int64_t c = 0; c < Dv; ++c) out.store(out.offset(b, h, i, c), o[c]);
        }
        if (!lse.empty_view()) lse.store(lse.offset(b, h, i), row_lse);
        if (st.any) {
          const int64_t ro = (b * H + h) * Lq + i;
          if (st.weights.defined()) {
            for (int64_t j = 0; j < Lk; ++j) st.weights.data<double>()[ro * Lk + j] = w[j];
          }
          if (st.lse.defined()) st.lse.data<double>()[ro] = row_lse;
          if (st.out.defined()) {
            for (int64_t c = 0; c < Dv; ++c) st.out.data<double>()[ro * Dv + c] = o[c];
          }
        }
      }
    }
  }
  if (st.any) {
    const std::pair<const char*, const Tensor*> order[] = {
        {"scores", &st.scores}, {"scaled", &st.scaled},   {"masked", &st.masked},
        {"weights", &st.weights}, {"lse", &st.lse},       {"out", &st.out}};
    for (const auto& [name, t] : order) {
      if (t->defined()) sink->Put(name, t->view());
    }
  }
  return Status::Ok();
}

}  // namespace reference
}  // namespace attnflow
