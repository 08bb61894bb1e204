// attnflow/reference.h — the float64 oracle of attention, kept forever: the
// reference every fast kernel, port and golden case is judged against.
//
// It computes every stage in float64 (scores scaled masked weights lse out,
// and for multi-head attention the projections, heads_out, concat and W_o)
// and hands each to an optional StageSink. Options, shapes and semantics are
// those of attnflow/attention.h and docs/semantics.md; src/reference/ holds
// the code (one pass per stage).
#pragma once

#include "attnflow/attention.h"
#include "attnflow/stages.h"

namespace attnflow {

namespace reference {

// Float64 scaled-dot-product attention. Captures stages: scores scaled
// masked weights lse out.
Status Sdpa(const TensorView& out, const TensorView& lse, const TensorView& q,
            const TensorView& k, const TensorView& v, const SdpaOptions& opt,
            StageSink* sink = nullptr);

// Float64 gradient of Sdpa with respect to q, k and v (the oracle of
// AttentionBackward): given dout [B,H,Lq,Dv] (and optionally dlse [B,H,Lq],
// the gradient flowing into the lse output) writes dq [B,H,Lq,D],
// dk [B,Hkv,Lk,D], dv [B,Hkv,Lk,Dv] (F32 or F64; any may be absent). The
// forward is recomputed in float64 from q, k, v (no saved state):
//   P = softmax row, dP_ij = dout_i . v_j, D_i = sum_j P_ij dP_ij - dlse_i,
//   dS_ij = P_ij (dP_ij - D_i), times 1 - tanh^2(x_ij / softcap) with a
//   softcap (x the scaled score),
//   dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i,
//   dv_j = sum_i P_ij dout_i,
// with dk/dv of a kv head summed over its query-head group (GQA) and rows
// without a visible key (dead rows) contributing nothing. Masks, kv_lens,
// ALiBi and the window have no gradient of their own here.
Status SdpaBackward(const TensorView& dq, const TensorView& dk, const TensorView& dv,
                    const TensorView& dout, const TensorView& dlse, const TensorView& q, const TensorView& k,
                    const TensorView& v, const SdpaOptions& opt);

// torch.nn.MultiheadAttention semantics (batch first) with GQA projections.
//   x_q [B,Lq,E], x_k [B,Lk,E], x_v [B,Lk,E]
//   w_q [E,E], w_k/w_v [Hkv*E/H, E], b_* optional, w_o [E,E], b_o [E]
// Captures q k v (after projection and head split), scores ... lse,
// heads_out, concat, out.
struct MhaWeights {
  TensorView w_q, w_k, w_v, w_o;
  TensorView b_q, b_k, b_v, b_o;  // optional
  int64_t num_heads = 1;
  int64_t num_kv_heads = 0;  // 0 = num_heads
};
Status Mha(const TensorView& out, const TensorView& x_q, const TensorView& x_k,
           const TensorView& x_v, const MhaWeights& w, const SdpaOptions& opt,
           StageSink* sink = nullptr);
// Every check Mha makes before computing (inputs, weights, biases, `out` if
// present, and the SDPA options on the projected shapes); errors name
// "reference::mha" and the tensor. Used by golden-case validation.
Status ValidateMha(const TensorView& out, const TensorView& x_q, const TensorView& x_k,
                   const TensorView& x_v, const MhaWeights& w, const SdpaOptions& opt);

}  // namespace reference

}  // namespace attnflow
