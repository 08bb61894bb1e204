// kernels/naive.h — the naive materialised fp32 attention schedule.
//
// For each (batch, head): write S = scale·Q·Kᵀ (+ masks) to memory [Lq, Lk],
// read S back to take each row's max and write P = softmax(S) [Lq, Lk], read
// P back for O = P·V. The same math as the flash kernels, but with the L×L
// intermediates round-tripping through memory: it exists to show what
// FlashAttention changes (bytes, not math; docs/kernels.md). Reached only by
// KernelOptions.force = kNaive (`--kernel naive`); auto dispatch never picks it.
// Invariants: fp32 accumulation in a fixed order (8 partial sums per dot
// product, combined in a fixed tree), tasks = batch × num_heads, so results
// do not depend on the thread count; attnflow/semantics.h rules (causal
// alignments, kv_lens, windows, bool/float masks, ALiBi, GQA, dead rows give
// weights 0, out 0, lse -inf; a NaN score makes its row NaN).
#pragma once

#include <cstdint>
#include <string>

#include "attnflow/attention.h"
#include "attnflow/status.h"
#include "attnflow/threading.h"

namespace attnflow::kernels {

// Empty when the naive kernel handles these views (q, k, v, out F32, lse F32
// or absent); otherwise the reason.
std::string NaiveUnsupportedReason(const TensorView& out, const TensorView& lse,
                                   const TensorView& q, const TensorView& k,
                                   const TensorView& v);

// Arguments already validated (ValidateSdpa filled `d`).
Status NaiveAttention(const TensorView& out, const TensorView& lse, const TensorView& q,
                      const TensorView& k, const TensorView& v, const SdpaOptions& opt,
                      const SdpaDims& d, ThreadPool& pool);

}  // namespace attnflow::kernels
