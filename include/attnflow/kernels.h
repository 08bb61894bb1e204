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

#include <cstddef>
#include <cstdint>
#include <memory>
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

// ---- Plan and run -------------------------------------------------------
// Attention() is PlanAttention + running the plan's tasks. A caller with its
// own parallel region (the Llama decode step runs a whole token as one)
// plans once per shape, binds the tensors of each call, and runs the tasks
// of each phase inside its region, with a barrier between the phases:
//   phase kTasks: plan.num_tasks independent tasks (prefill: (b, kv head,
//     q tile); split_kv_decode: (b, kv head, split); reference/naive: one
//     task that runs the whole call);
//   phase kMerge: plan.num_merge_tasks tasks (split_kv_decode: one per
//     (b, kv head), merging its splits in split order; else none), which
//     read every kTasks result of their (b, kv head).
// Which thread or worker runs a task never changes a bit of the result, so
// running the phases in any parallel schedule gives Attention()'s results
// bit for bit (and those are independent of the thread count).

enum class AttentionPhase : uint8_t { kTasks = 0, kMerge = 1 };

// The plan of one call's shape: the kernel, its tiles and its tasks. Cheap
// (no strings, no allocation), a plain value: keep it for as long as the
// shape, dtypes and KernelOptions tiles stay the same (the masks, scale and
// other SdpaOptions are bound later and do not change the plan).
struct AttentionPlan {
  KernelKind kernel = KernelKind::kReference;  // never kAuto
  int64_t simd_target = 0;         // Highway target bit (0 for reference/naive)
  int64_t tile_q = 0, tile_kv = 0; // as KernelChoice (0 = n/a)
  int64_t num_splits = 0;          // split_kv_decode: KV splits per (b, kv head)
  int64_t split_len = 0;           // split_kv_decode: keys per split
  int64_t num_tasks = 0;           // tasks of phase kTasks (0: nothing to do)
  int64_t num_merge_tasks = 0;     // tasks of phase kMerge
  size_t worker_scratch_floats = 0;  // scratch per worker (AttentionWorkspace)
  size_t shared_scratch_floats = 0;  // scratch shared by the tasks (decode partials)
  // What the plan was made for (AttentionRun::Bind checks the tensors).
  SdpaDims dims{};
  DType q_dtype = DType::kF32, k_dtype = DType::kF32, v_dtype = DType::kF32,
        out_dtype = DType::kF32, lse_dtype = DType::kF32;
  bool has_lse = false;
  int64_t PhaseTasks(AttentionPhase p) const {
    return p == AttentionPhase::kTasks ? num_tasks : num_merge_tasks;
  }
  // The kernels' partition (src/kernels/internal.h Plan), opaque here.
  alignas(8) unsigned char tiling[160] = {};
};

// Validates like Attention and plans the call without running it (the
// choice ExplainAttention explains, without its reason text).
Status PlanAttention(const TensorView& out, const TensorView& lse, const TensorView& q,
                     const TensorView& k, const TensorView& v, const SdpaOptions& opt,
                     const KernelOptions& kopt, AttentionPlan* plan);

// Scratch for running plans: one buffer per worker plus the shared decode
// partials. Grows, never shrinks; reuse one across calls (each bound call
// that runs at the same time needs its own).
class AttentionWorkspace {
 public:
  AttentionWorkspace() = default;
  ~AttentionWorkspace();
  AttentionWorkspace(const AttentionWorkspace&) = delete;
  AttentionWorkspace& operator=(const AttentionWorkspace&) = delete;
  // Room for `plan` run by workers 0 .. num_workers-1.
  Status Reserve(const AttentionPlan& plan, int num_workers);
  // Whether Reserve(plan, n) with n >= num_workers() has been called.
  bool Holds(const AttentionPlan& plan) const {
    return base_ != nullptr && plan.worker_scratch_floats <= worker_floats_ &&
           plan.shared_scratch_floats <= shared_floats_;
  }
  float* worker(int w) const { return base_ + static_cast<size_t>(w) * worker_floats_; }
  float* shared() const { return base_ + static_cast<size_t>(num_workers_) * worker_floats_; }
  int num_workers() const { return num_workers_; }

 private:
  float* base_ = nullptr;
  size_t worker_floats_ = 0, shared_floats_ = 0;
  int num_workers_ = 0;
};

// A plan bound to one call's tensors and options. Bind validates them like
// Attention and checks that they have the plan's shape and dtypes (an
// error names both); the views must stay valid while tasks run. Rebinding
// reuses the object's storage (no allocation once warm).
class AttentionRun {
 public:
  AttentionRun();
  ~AttentionRun();
  AttentionRun(AttentionRun&&) noexcept;
  AttentionRun& operator=(AttentionRun&&) noexcept;
  Status Bind(const AttentionPlan& plan, const TensorView& out, const TensorView& lse,
              const TensorView& q, const TensorView& k, const TensorView& v,
              const SdpaOptions& opt);
  const AttentionPlan& plan() const;

 private:
  friend Status RunAttentionTasks(const AttentionRun&, AttentionPhase, int64_t, int64_t, int,
                                  const AttentionWorkspace&);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs tasks [begin, end) of `phase` with worker `worker`'s scratch
// (0 <= worker < ws.num_workers(); ws reserved for run's plan). Every task
// of kTasks must be done before any task of kMerge starts. Tasks run on the
// calling thread; a reference/naive task runs its whole call there.
Status RunAttentionTasks(const AttentionRun& run, AttentionPhase phase, int64_t begin,
                         int64_t end, int worker, const AttentionWorkspace& ws);

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
