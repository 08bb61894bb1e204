// attnflow/attention.h — the attention API: options, validation and the
// exact merge of partial results. The fast, dispatching entry point
// (Attention, ExplainAttention) is in attnflow/kernels.h; the float64 oracle
// (reference::Sdpa, reference::Mha) in attnflow/reference.h.
//
// Signatures follow "outputs first, inputs next, options last".
// Shapes (semantics in attnflow/semantics.h and docs/semantics.md):
//   q    [B, H,   Lq, D]      any strides, F32 (reference also F64/F16/BF16)
//   k    [B, Hkv, Lk, D]      F32 / F16 / BF16
//   v    [B, Hkv, Lk, Dv]     F32 / F16 / BF16
//   out  [B, H,   Lq, Dv]     F32 (reference: F32 or F64)
//   lse  [B, H,   Lq]         F32/F64, optional (rank -1 view = not wanted)
//   attn_mask  BOOL or float, broadcastable to [B,H,Lq,Lk], rank 2..4
//   kv_lens    I64 or I32 [B], 0 <= kv_lens[b] <= Lk
//   alibi_slopes  F32/F64 [H] or [B,H]
// A zero-sized dimension is legal and gives an empty result (LSE -inf for
// rows that exist with Lk == 0, out zeros).
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "attnflow/semantics.h"
#include "attnflow/stages.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow {

struct SdpaOptions {
  Causal causal = Causal::kNone;
  // NaN = default 1/sqrt(D).
  double scale = std::numeric_limits<double>::quiet_NaN();
  TensorView attn_mask;  // absent when rank < 0
  TensorView kv_lens;    // absent when rank < 0
  int64_t window_left = -1;   // -1 = unbounded
  int64_t window_right = -1;  // -1 = unbounded
  TensorView alibi_slopes;    // F32/F64 [H] or [B,H], absent when rank < 0
  // > 0: scaled scores x -> softcap * tanh(x / softcap) before the float
  // mask and ALiBi are added; 0 = off. Finite and >= 0.
  double softcap = 0.0;
  // Diagonal of batch b (bottom-right causal, window, ALiBi): the padded Lk,
  // or kv_lens[b] (FlashAttention's cache_seqlens). semantics.h.
  KvAlign kv_align = KvAlign::kPadded;
};

// The per-batch slope of ALiBi for (b, h): slopes [H] or [B,H] (validated).
inline double AlibiSlope(const TensorView& slopes, int64_t b, int64_t h) {
  return slopes.rank == 2 ? slopes.load(b * slopes.strides[0] + h * slopes.strides[1])
                          : slopes.load(h * slopes.strides[0]);
}

// kv_lens[b], or kv_len when kv_lens is absent (validated).
inline int64_t ValidKvLen(const TensorView& kv_lens, int64_t b, int64_t kv_len) {
  return kv_lens.empty_view() ? kv_len
                              : static_cast<int64_t>(kv_lens.load(b * kv_lens.strides[0]));
}

// Checked dimensions of a validated call.
struct SdpaDims {
  int64_t batch, num_heads, num_kv_heads, q_len, kv_len, head_dim, v_dim;
  double scale;
};

// Validates every argument; errors name `op` and the offending shapes/values.
// `out`/`lse` may be absent views when only checking inputs.
Status ValidateSdpa(const char* op, const TensorView& out,
                    const TensorView& lse, const TensorView& q,
                    const TensorView& k, const TensorView& v,
                    const SdpaOptions& opt, SdpaDims* dims);

// Validates a backward call (the gradient of attention with respect to q, k
// and v): everything ValidateSdpa checks for (out, lse, q, k, v, opt), plus
//   dout [B,H,Lq,Dv] float, dlse [B,H,Lq] float or absent (the gradient
//   flowing into the forward's lse), and each of
//   dq [B,H,Lq,D], dk [B,Hkv,Lk,D], dv [B,Hkv,Lk,Dv] F32 or F64, absent
//   (rank -1) when not wanted.
// out/lse may be absent (the float64 reference recomputes them).
Status ValidateSdpaBackward(const char* op, const TensorView& dq, const TensorView& dk,
                            const TensorView& dv, const TensorView& dout,
                            const TensorView& dlse, const TensorView& out, const TensorView& lse,
                            const TensorView& q, const TensorView& k,
                            const TensorView& v, const SdpaOptions& opt, SdpaDims* dims);

// Broadcasts a rank 2..4 mask to [B,H,Lq,Lk] by setting stride 0 on size-1
// dims. Returns false (and leaves *out untouched) if not broadcastable.
bool BroadcastMask(const TensorView& mask, const int64_t target[4],
                   TensorView* out);


// Merges two partial attention results over disjoint key sets:
//   lse = log(exp(lse_a) + exp(lse_b))
//   out = out_a * exp(lse_a - lse) + out_b * exp(lse_b - lse)
// out/out_a/out_b [B,H,Lq,Dv] F32, lse/lse_a/lse_b [B,H,Lq] F32. Rows where
// both are -inf give out 0, lse -inf. out may alias out_a, lse may alias
// lse_a.
Status MergeAttentionStates(const TensorView& out, const TensorView& lse,
                            const TensorView& out_a, const TensorView& lse_a,
                            const TensorView& out_b, const TensorView& lse_b);

}  // namespace attnflow
