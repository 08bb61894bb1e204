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
