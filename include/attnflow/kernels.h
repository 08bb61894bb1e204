// attnflow/kernels.h — fast exact attention with explainable dispatch.
//
// Attention() validates like reference::Sdpa, then picks a kernel:
//   "tiled_prefill"   FlashAttention-style tiled online softmax (Highway SIMD)
//   "split_kv_decode" flash-decoding for few query rows over a long KV cache
//   "reference"       the float64 oracle, for anything no fast path covers
//   "naive"           materialised fp32 S and P (write S, read S, write P,
//                     read P); only when forced, never chosen by auto
// and reports the choice and the reason in KernelChoice (CLI: --explain).
// Results are fp32 (accumulated in fp32), never depend on the thread count,
// and follow attnflow/semantics.h exactly. See docs/kernels.md.
//
// Fast kernels cover: q F32, k/v F32/F16/BF16 (any mix), out F32, lse F32
// or F64 (optional; the LSE is computed in double and rounded once to its
// dtype: an F64 LSE keeps the precision an exact backward needs), any
// strides, head dims 1..256, GQA/MQA, bool and float masks (F32/F64/F16/
// BF16, broadcast), kv_lens and the per-sequence diagonal, causal (both
// alignments), sliding window, ALiBi ([H] or [B,H]), softcap, custom scale.
// Anything else goes to reference::Sdpa.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "attnflow/attention.h"
#include "attnflow/threading.h"

namespace attnflow {

enum class KernelKind : uint8_t {
  kAuto, kReference, kTiledPrefill, kSplitKvDecode, kNaive, kTiledBackward
};
// "auto", "reference", "tiled_prefill", "split_kv_decode", "naive",
// "tiled_backward" (AttentionBackward only).
const char* KernelKindName(KernelKind k);
bool ParseKernelKind(std::string_view s, KernelKind* out);

// Largest q_len for which kAuto picks split_kv_decode.
constexpr int64_t kDecodeMaxQueryLen = 4;
// Largest head_dim / v_dim the fast kernels handle.
constexpr int64_t kFastMaxHeadDim = 256;

struct KernelOptions {
  KernelKind force = KernelKind::kAuto;  // kAuto = let dispatch decide
  ThreadPool* pool = nullptr;            // nullptr = DefaultPool()
  // Tuning overrides (0 = automatic). They change the fp32 reduction order
  // (so results may differ in the last bits between settings) but never make
  // results depend on the thread count. Values beyond the problem are clamped
  // (tile_q to min(4096, G*Lq), tile_kv to min(65536, Lk), split_kv to Lk).
  int64_t tile_q = 0;   // prefill: query rows per tile (rounded up to the SIMD row block)
  int64_t tile_kv = 0;  // keys per tile (rounded up to a multiple of 16)
  int64_t split_kv = 0; // decode: keys per split (rounded up to tile_kv)
};

struct KernelChoice {
  KernelKind kernel = KernelKind::kReference;
  std::string reason;       // why this kernel (and why not the others)
  std::string simd_target;  // Highway target name, e.g. "AVX3"
  int64_t tile_q = 0, tile_kv = 0;  // tile sizes chosen (0 = n/a)
  int64_t num_splits = 0;           // decode KV splits (0 = n/a)
  int64_t num_tasks = 0;            // parallel tasks (0 = n/a)
  // "tiled_prefill [AVX3] tile_q=64 tile_kv=128 tasks=128: q_len=1024 > ..."
  // (the reason without its leading "<kernel>: ").
  std::string ToString() const;
};

// Chooses without running (validates the arguments first).
Status ExplainAttention(const TensorView& out, const TensorView& lse,
                        const TensorView& q, const TensorView& k,
                        const TensorView& v, const SdpaOptions& opt,
                        const KernelOptions& kopt, KernelChoice* choice);

// out [B,H,Lq,Dv] F32; lse [B,H,Lq] F32 optional. See attention.h for shapes.
Status Attention(const TensorView& out, const TensorView& lse,
                 const TensorView& q, const TensorView& k, const TensorView& v,
                 const SdpaOptions& opt, const KernelOptions& kopt = {},
                 KernelChoice* choice = nullptr);

// The gradient of Attention with respect to q, k and v (FlashAttention-2
// backward): the softmax is recomputed tile by tile from the forward's
// log-sum-exp, in three passes (row sums D_i and dQ per query tile, dK/dV
// per key tile) whose reduction order depends only on the shape, so results
// are bit-identical for any thread count. See docs/kernels.md "Backward".
//   dout [B,H,Lq,Dv]; lse [B,H,Lq]: the forward's (an F64 LSE from Attention
//   keeps the recomputed probabilities equal to the forward's); out: the
//   forward's output, used only by the reference fallback's validation
//   dlse [B,H,Lq]: the gradient flowing into lse (absent = zero)
//   dq [B,H,Lq,D], dk [B,Hkv,Lk,D], dv [B,Hkv,Lk,Dv]: absent = not wanted
// Semantics and options as Attention (dk/dv of a kv head sum its GQA
// group; rows without a visible key contribute nothing). The fast kernel
// ("tiled_backward") needs q, dout, dlse and dq/dk/dv F32, lse F32/F64 (out is
// not used: the row sums D_i are recomputed from P and dP), k/v
// F32/F16/BF16 and 1 <= D, Dv <= 256; anything else (or kopt.force =
// kReference) runs reference::SdpaBackward, which needs neither out nor lse.
// A non-finite fast result (NaN/Inf inputs) is recomputed by the reference.
Status AttentionBackward(const TensorView& dq, const TensorView& dk, const TensorView& dv,
                         const TensorView& dout, const TensorView& dlse, const TensorView& q,
                         const TensorView& k, const TensorView& v, const TensorView& out,
                         const TensorView& lse, const SdpaOptions& opt, const KernelOptions& kopt = {},
                         KernelChoice* choice = nullptr);

// Variable-length batches (FlashAttention's flash_attn_varlen_func): B
// sequences packed along the token axis, each attended as a problem of its
// own lengths (bottom-right causal, the window and ALiBi align to each
// sequence's own end, FlashAttention's rule).
//   q [Tq,H,D], k [Tk,Hkv,D], v [Tk,Hkv,Dv] (any strides), out [Tq,H,Dv] F32,
//   lse [Tq,H] F32 optional; cu_seqlens_q / cu_seqlens_k I32/I64 [B+1],
//   0 = cu[0] <= ... <= cu[B] = Tq (Tk). Sequence b is tokens
//   [cu_q[b], cu_q[b+1]) of q and [cu_k[b], cu_k[b+1]) of k/v.
//   opt.attn_mask / opt.kv_lens must be absent; alibi_slopes [H] or [B,H].
// Errors of one sequence name it ("sequence 3: ...").
Status AttentionVarlen(const TensorView& out, const TensorView& lse, const TensorView& q,
                       const TensorView& k, const TensorView& v,
                       const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                       const SdpaOptions& opt, const KernelOptions& kopt = {});
// Its gradient (AttentionBackward per sequence): dq [Tq,H,D], dk [Tk,Hkv,D],
// dv [Tk,Hkv,Dv] (absent = not wanted), dout [Tq,H,Dv], dlse [Tq,H] optional.
Status AttentionVarlenBackward(const TensorView& dq, const TensorView& dk, const TensorView& dv,
                               const TensorView& dout, const TensorView& dlse,
                               const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView& lse,
                               const TensorView& cu_seqlens_q, const TensorView& cu_seqlens_k,
                               const SdpaOptions& opt, const KernelOptions& kopt = {});

// Paged KV cache (flash_attn_with_kvcache with a block table):
//   q [B,H,Lq,D]; k_cache [num_blocks,page,Hkv,D], v_cache
//   [num_blocks,page,Hkv,Dv]; block_table I32/I64 [B,max_blocks];
//   cache_seqlens I32/I64 [B]; out [B,H,Lq,Dv] F32, lse [B,H,Lq] optional.
// Sequence b's keys are positions j < cache_seqlens[b], key j at
// k_cache[block_table[b][j / page], j % page]; the queries are the last Lq
// positions (bottom-right causal, the window and ALiBi align to
// cache_seqlens[b]). opt.attn_mask / opt.kv_lens must be absent. Each
// sequence's pages are gathered into a contiguous buffer (in their dtype).
Status AttentionPaged(const TensorView& out, const TensorView& lse, const TensorView& q,
                      const TensorView& k_cache, const TensorView& v_cache,
                      const TensorView& block_table, const TensorView& cache_seqlens,
                      const SdpaOptions& opt, const KernelOptions& kopt = {});

// Modelled DRAM traffic of one attention call in bytes (fp32 elements; each
// pass reads or writes its tensors once, no reuse across passes; see
// docs/kernels.md "Bytes, not math"):
//   naive: read Q, K, V; write S, read S, write P, read P; write O.
//   flash: read Q, write O; K and V once per query tile of tile_q rows
//          (G = num_heads / num_kv_heads heads share a tile; tile_q 0 = one tile).
struct IoModel {
  double naive_bytes = 0, flash_bytes = 0;
  double s_and_p_bytes = 0;  // the naive part: 4 · batch·num_heads·q_len·kv_len·4
};
IoModel ModelAttentionIo(int64_t batch, int64_t num_heads, int64_t num_kv_heads, int64_t q_len,
                         int64_t kv_len, int64_t head_dim, int64_t tile_q);

}  // namespace attnflow
