// attnflow/dist.h — exact attention across processes over MPI: ring
// (context-parallel) prefill and sharded-KV decode. Built only when MPI is
// found (cmake/dist.cmake defines ATTNFLOW_HAVE_DIST); see docs/distributed.md.
//
// Invariants:
//  * Exact: every rank's result equals single-process attention up to fp32
//    rounding of the merge; partial results are combined only through the
//    log-sum-exp (MergeAttentionStates), never approximated.
//  * Deterministic: the merge order is fixed by rank and ring step, never by
//    message arrival, so the same P gives bit-identical results run after run
//    (and for any thread count).
//  * Collective: every rank of `comm` calls the same function with the same
//    global options. Argument errors are detected collectively and every rank
//    returns the SAME message (naming the first failing rank).
//  * Bounded failure: no call waits longer than RingOptions::timeout_s for a
//    message; a timeout returns kInternal naming the rank, the step and the
//    peer. The caller then aborts the job (MPI_Abort) so no rank hangs.
//  * Only the thread that initialised MPI calls MPI (MPI_THREAD_FUNNELED is
//    enough); compute runs on a helper thread while that thread drives MPI
//    progress, so transfers overlap compute even without an MPI progress
//    thread.
//
// Shapes (B, H, Hkv, D, Dv as in attention.h; L_r = this rank's share):
//   prefill: q [B,H,Lq_r,D] F32, k [B,Hkv,Lk_r,D], v [B,Hkv,Lk_r,Dv]
//            (k/v F32/F16/BF16, same dtype), out [B,H,Lq_r,Dv] F32,
//            lse [B,H,Lq_r] F32 (optional), where Lq_r / Lk_r are the sizes
//            SequenceShard() gives for the global q_len / kv_len.
//   decode:  q [B,H,Lq,D] replicated on every rank (Lq small), k/v this
//            rank's contiguous slice of the cache (SequenceShard with
//            kContiguous), out/lse [B,H,Lq,*] replicated on return.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/kernels.h"

namespace attnflow::dist {

// How a sequence of length L is split across P ranks.
//  kContiguous: rank r holds one block [r*L/P, (r+1)*L/P) (sizes differ by at
//               most 1 when P does not divide L).
//  kZigzag:     the sequence is cut into 2P chunks (sizes differ by at most
//               1); rank r holds chunks r and 2P-1-r, concatenated. Under a
//               causal mask every rank then has about the same work (the
//               layout of Llama 3's context parallelism).
enum class Layout : uint8_t { kContiguous, kZigzag };
const char* LayoutName(Layout l);  // "contiguous", "zigzag"
bool ParseLayout(const std::string& s, Layout* out);

// Global index range [begin, end) of one chunk.
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
// The chunks rank `rank` holds, in local storage order.
std::vector<Range> SequenceShard(Layout layout, int64_t len, int rank,
                                 int num_ranks);
int64_t ShardLength(Layout layout, int64_t len, int rank, int num_ranks);

struct RingOptions {
  Layout layout = Layout::kZigzag;
  double timeout_s = 60.0;  // longest wait for any one message
  KernelOptions kopt;       // passed to Attention() for every block
  // Benchmarking only (memory / transfer measurements): run the ring and send
  // every block but skip the kernels; out is then all zeros. Never exact.
  bool skip_compute = false;
  // Prefill: query rows per partial-result tile (0 = 2048). Bounds the
  // scratch; changes no result bit (rows are independent).
  int64_t row_tile = 0;
};

// Copies this rank's rows (dim 2 of a rank-3 or rank-4 view, e.g. q [B,H,L,D],
// a mask [B,H,Lq,Lk] or lse [B,H,L]) out of a global tensor, in local order.
Result<Tensor> ShardRows(const TensorView& global, Layout layout, int rank,
                         int num_ranks);

// Collective inverse of ShardRows: every rank passes its rows `local` (dim 2
// of a rank-3 or rank-4 F32 tensor, in the local order ShardRows gives, the
// other dims equal on every rank) of a sequence of global length `len`;
// rank `root` gets the global tensor in *global, the others an empty Tensor.
// Argument errors are agreed collectively (the same status on every rank);
// waits at most timeout_s for any message (kInternal on timeout).
Status GatherRows(MPI_Comm comm, Tensor* global, const TensorView& local, Layout layout,
                  int64_t len, int root, double timeout_s);

// Per ring step (prefill) or per phase (decode) on this rank.
struct StepStats {
  double step_s = 0;     // wall time of the step
  double compute_s = 0;  // kernel + merge time of the step
  double comm_s = 0;     // from posting the transfer to its completion
  double exposed_s = 0;  // time spent waiting for the transfer after compute
  int64_t bytes_sent = 0;
};
struct RingStats {
  std::vector<StepStats> steps;
  int64_t visible_pairs = 0;  // (query, key) pairs this rank scored (work)
  double total_s = 0;
  // Share of communication time overlapped by compute, 1 - exposed/comm
  // summed over steps (1 when nothing was sent).
  double HiddenShare() const;
};

// Ring prefill. `q_len`/`kv_len` are the GLOBAL lengths; opt.kv_lens (I64 or
// I32 [B]) is global; opt.attn_mask, if any, covers this rank's query rows
// (in local order) against ALL global keys: broadcastable to
// [B,H,Lq_r,kv_len]. Causal: both alignments, relative to the global
// lengths. Sliding windows and ALiBi are rejected (kUnimplemented).
Status RingAttention(MPI_Comm comm, const TensorView& out,
                     const TensorView& lse, const TensorView& q,
                     const TensorView& k, const TensorView& v,
                     const SdpaOptions& opt, int64_t q_len, int64_t kv_len,
                     const RingOptions& ropt = {}, RingStats* stats = nullptr);

// Sharded decode (flash-decoding across ranks): each rank attends q to its
// slice of the cache, the (out, lse) partials are allgathered and merged in
// rank order 0..P-1 on every rank. `kv_len` is the global cache length;
// kv_lens / causal / mask are global as for RingAttention (mask: [.., Lq,
// kv_len]).
Status ShardedDecode(MPI_Comm comm, const TensorView& out,
                     const TensorView& lse, const TensorView& q,
                     const TensorView& k, const TensorView& v,
                     const SdpaOptions& opt, int64_t kv_len,
                     const RingOptions& ropt = {}, RingStats* stats = nullptr);

// Number of (query, key) pairs that the causal rule (and nothing else) lets
// the queries of `q_chunks` see among the keys of `k_chunks` (work model for
// the load-balance report).
int64_t VisiblePairs(Causal causal, int64_t q_len, int64_t kv_len,
                     const std::vector<Range>& q_chunks,
                     const std::vector<Range>& k_chunks);

// Collective: true on every rank if `st` is ok on every rank; otherwise every
// rank gets the status of the lowest failing rank (same code and message).
// Waits at most timeout_s for it (non-blocking collectives), else kInternal.
Status AgreeOnStatus(MPI_Comm comm, const Status& st, double timeout_s = 60.0);

// Completes `reqs` (from MPI_I* calls), polling; kInternal naming `what` if
// no progress is made for timeout_s. For callers' own collectives, so that
// they too never hang on a dead or stalled rank.
Status WaitRequests(std::vector<MPI_Request>* reqs, double timeout_s,
                    const std::string& what);

}  // namespace attnflow::dist
