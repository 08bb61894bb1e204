// dispatch.cc — attnflow::Attention: validation, explainable kernel choice,
// planning (tiles, tasks, splits), scratch allocation and execution.
//
// Dispatch rules (docs/kernels.md):
//  1. ValidateSdpa("attention", ...) — errors name the op and the shapes.
//  2. The fast kernels need q F32, out F32, lse absent or F32, k/v in
//     {F32, F16, BF16}, 1 <= D, Dv <= 256 and Lq, Lk < 2^30. Otherwise the
//     float64 reference runs (or forcing a fast kernel is an error that says
//     why).
//  3. kAuto: q_len <= kDecodeMaxQueryLen -> split_kv_decode, else
//     tiled_prefill.
// The plan depends only on the shape and the SIMD target, never on the
// thread count, so results are bit-identical for any number of threads.
// Calls of at most 2^19 FLOP run their tasks on the calling thread
// (RunsInline): the pool hand-off would cost more than it saves.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <atomic>
#include <functional>
#include <limits>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "attnflow/reference.h"
#include "attnflow/kernels.h"
#include "hwy/targets.h"
#include "kernels/internal.h"
#include "kernels/naive.h"

namespace attnflow {

const char* KernelKindName(KernelKind k) {
  switch (k) {
    case KernelKind::kAuto: return "auto";
    case KernelKind::kReference: return "reference";
    case KernelKind::kTiledPrefill: return "tiled_prefill";
    case KernelKind::kSplitKvDecode: return "split_kv_decode";
    case KernelKind::kNaive: return "naive";
    case KernelKind::kTiledBackward: return "tiled_backward";
  }
  return "?";
}

bool ParseKernelKind(std::string_view s, KernelKind* out) {
  for (KernelKind k : {KernelKind::kAuto, KernelKind::kReference,
                       KernelKind::kTiledPrefill, KernelKind::kSplitKvDecode,
                       KernelKind::kNaive, KernelKind::kTiledBackward}) {
    if (s == KernelKindName(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

std::string KernelChoice::ToString() const {
  std::string s = KernelKindName(kernel);
  if (!simd_target.empty()) s += " [" + simd_target + "]";
  if (tile_q > 0) s += " tile_q=" + std::to_string(tile_q);
  if (tile_kv > 0) s += " tile_kv=" + std::to_string(tile_kv);
  if (num_splits > 0) s += " splits=" + std::to_string(num_splits);
  if (num_tasks > 0) s += " tasks=" + std::to_string(num_tasks);
  // The reason starts with the kernel name ("tiled_prefill: ..."); don't repeat it.
  std::string r = reason;
  const std::string prefix = std::string(KernelKindName(kernel)) + ": ";
  if (r.rfind(prefix, 0) == 0) r = r.substr(prefix.size());
  if (!r.empty()) s += ": " + r;
  return s;
}

namespace {

using kernels::Plan;
using kernels::Problem;
using kernels::TargetInfo;

constexpr int64_t kMaxLen = int64_t{1} << 30;
constexpr int64_t kDecodeMaxRows = 4096;  // G * Lq handled by one decode task

// Calls with at most this many FLOPs (2·B·H·Lq·Lk·(D + Dv), masks ignored)
// run all their tasks on the calling thread. 2^19 FLOP is a few µs of one
// core; handing half of it to another worker saves at most that much and
// costs the hand-off: ~1 µs while the workers spin, ~10 µs once they block,
// and far more on a loaded machine, where the caller waits until every
// worker has been scheduled (B=1 H=8 L=16 D=64 prefill: 81% of its CPU
// samples in the pool, 8% in the kernel). Tasks are independent (and the
// decode merge order is fixed), so results do not change.
constexpr double kInlineMaxFlops = 524288.0;

bool RunsInline(const SdpaDims& d) {
  const double flops = 2.0 * static_cast<double>(d.batch) * static_cast<double>(d.num_heads) *
                       static_cast<double>(d.q_len) * static_cast<double>(d.kv_len) *
                       static_cast<double>(d.head_dim + d.v_dim);
  return flops <= kInlineMaxFlops;
}

// Queried per call (one indirect call): the dispatched target can change
// (hwy::SetSupportedTargetsForTest), and the plan must match its lanes.
TargetInfo Target() {
  TargetInfo t;
  kernels::GetTargetInfo(&t);
  return t;
}

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

constexpr int64_t kMaxTileRows = 4096;   // tile_q override cap
constexpr int64_t kMaxTileKeys = 65536;  // tile_kv override cap

// A tile_kv override, clamped to [1, min(Lk, kMaxTileKeys)].
int64_t ClampKv(int64_t v, const SdpaDims& d) {
  return std::max<int64_t>(1, std::min({v, kMaxTileKeys, std::max<int64_t>(d.kv_len, 1)}));
}
int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

int64_t L2Bytes() {
#ifdef _SC_LEVEL2_CACHE_SIZE
  const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (v > 0) return v;
#endif
  return 1 << 20;
}

std::string KiB(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.0f KiB", bytes / 1024.0);
  return buf;
}

bool KvDtypeOk(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// "" when the fast kernels can run this call, else why not.
std::string FastUnsupportedReason(const TensorView& out, const TensorView& lse,
                                  const TensorView& q, const TensorView& k,
                                  const TensorView& v, const SdpaDims& d) {
  if (q.dtype != DType::kF32) {
    return std::string("q dtype ") + DTypeName(q.dtype) +
           " not supported by fast kernels (need F32)";
  }
  if (out.empty_view()) return "out is absent (fast kernels write out)";
  if (out.dtype != DType::kF32) {
    return std::string("out dtype ") + DTypeName(out.dtype) +
           " not supported by fast kernels (need F32)";
  }
  if (!lse.empty_view() && lse.dtype != DType::kF32 && lse.dtype != DType::kF64) {
    return std::string("lse dtype ") + DTypeName(lse.dtype) +
           " not supported by fast kernels (need F32 or F64)";
  }
  if (!KvDtypeOk(k.dtype) || !KvDtypeOk(v.dtype)) {
    return std::string("k/v dtype ") + DTypeName(k.dtype) + "/" + DTypeName(v.dtype) +
           " not supported by fast kernels (need F32, F16 or BF16)";
  }
  if (d.head_dim < 1 || d.head_dim > kFastMaxHeadDim || d.v_dim < 1 ||
      d.v_dim > kFastMaxHeadDim) {
    return "head_dim D=" + std::to_string(d.head_dim) + " / Dv=" +
           std::to_string(d.v_dim) + " outside the fast kernels' range 1.." +
           std::to_string(kFastMaxHeadDim);
  }
  if (d.q_len >= kMaxLen || d.kv_len >= kMaxLen) {
    return "q_len/kv_len " + std::to_string(d.q_len) + "/" +
           std::to_string(d.kv_len) + " exceed the fast kernels' 2^30 index range";
  }
  return "";
}

struct Prepared {
  SdpaDims d{};
  KernelChoice choice;
  Problem P;
  Plan plan;
  kernels::ProblemStorage storage;
  AttentionPlan ap;
};

int FastD(const SdpaDims& d) {
  if (d.head_dim != d.v_dim) return 0;
  switch (d.head_dim) {
    case 64: case 80: case 96: case 128: return static_cast<int>(d.head_dim);
    default: return 0;
  }
}

std::string DimNote(const SdpaDims& d, int fast_d) {
  if (fast_d) return "D=" + std::to_string(fast_d) + " fast path";
  return "D=" + std::to_string(d.head_dim) + " Dv=" + std::to_string(d.v_dim) +
         " generic path";
}

// What both plans share: lane count, padded head dims, the fast-path D.
// Returns the GQA group size G = H / Hkv.
int64_t PlanLanes(const SdpaDims& d, const TargetInfo& t, Plan* pl) {
  pl->lanes = t.lanes;
  pl->dp = RoundUp(d.head_dim, t.lanes);
  pl->dvp = RoundUp(d.v_dim, t.lanes);
  pl->fast_d = FastD(d);
  return std::max<int64_t>(1, d.num_heads / std::max<int64_t>(d.num_kv_heads, 1));
}

void PlanPrefill(const SdpaDims& d, const KernelOptions& kopt, Plan* pl,
                 KernelChoice* ch, bool explain) {
  const TargetInfo t = Target();
  const int64_t G = PlanLanes(d, t, pl);
  const int64_t default_rows = d.head_dim > 128 ? 32 : 64;
  // Overrides are clamped to what the problem can use (never larger than all
  // of a group's rows, at most kMaxTileRows): no size computation can
  // overflow and absurd values cannot force huge allocations.
  int64_t rows_target = default_rows;
  if (kopt.tile_q > 0) {
    rows_target = std::min({kopt.tile_q, kMaxTileRows, G * std::max<int64_t>(d.q_len, 1)});
  }
  rows_target = RoundUp(std::max<int64_t>(rows_target, 1), t.row_block);
  pl->hc = std::min(G, rows_target);
  pl->tq = std::max<int64_t>(1, rows_target / pl->hc);
  pl->tq = std::min(pl->tq, std::max<int64_t>(d.q_len, 1));
  // Rows are padded to whole vectors only (not to row_block pairs): a short
  // query tile, e.g. 16 rows on a 16-lane target, is not doubled with dead
  // rows (QkTile handles a last single row-vector).
  pl->rows = RoundUp(pl->hc * pl->tq, t.lanes);
  pl->n_hchunks = CeilDiv(G, pl->hc);
  pl->n_qtiles = CeilDiv(d.q_len, pl->tq);
  const int64_t default_kv = d.head_dim > 128 ? 64 : 128;
  pl->tkv = RoundUp(kopt.tile_kv > 0 ? ClampKv(kopt.tile_kv, d) : default_kv, 16);
  pl->num_tasks = d.batch * d.num_kv_heads * pl->n_hchunks * pl->n_qtiles;
  pl->worker_floats = kernels::MakeScratchLayout(*pl).total;

  ch->tile_q = pl->rows;
  ch->tile_kv = pl->tkv;
  ch->num_tasks = pl->num_tasks;
  if (!explain) return;
  const double qt_b = 4.0 * pl->rows * d.head_dim;
  const double kv_b = 4.0 * pl->tkv * (pl->dp + pl->dvp);
  const double s_b = 4.0 * pl->rows * pl->tkv;
  const double o_b = 4.0 * pl->rows * pl->dvp;
  const double total = qt_b + kv_b + s_b + o_b;
  const int64_t l2 = L2Bytes();
  ch->reason += "tile " + CountOf(pl->rows, "row") + " (" + CountOf(pl->tq, "query", "queries") +
                " x " + CountOf(pl->hc, "head") + " of a kv group) x " +
                CountOf(pl->tkv, "key") + ": Q^T " + KiB(qt_b) + " + K/V " + KiB(kv_b) + " + S " +
                KiB(s_b) + " + O " + KiB(o_b) + " = " + KiB(total) +
                (total <= static_cast<double>(l2) ? " fits" : " exceeds") +
                " L2 " + KiB(static_cast<double>(l2)) + "; " +
                CountOf(pl->num_tasks, "task") + " (b, kv head, q tile), fixed by shape";
}

void PlanDecode(const SdpaDims& d, const KernelOptions& kopt, Plan* pl,
                KernelChoice* ch, bool explain) {
  const TargetInfo t = Target();
  const int64_t G = PlanLanes(d, t, pl);
  pl->rows = G * d.q_len;
  pl->tkv = RoundUp(kopt.tile_kv > 0 ? ClampKv(kopt.tile_kv, d) : 256, 16);
  const int64_t bh = d.batch * d.num_kv_heads;
  int64_t split_len;
  if (kopt.split_kv > 0) {
    split_len = RoundUp(std::min(kopt.split_kv, std::max<int64_t>(d.kv_len, 1)), pl->tkv);
  } else {
    // Aim for >= 32 tasks overall (enough for ~16 threads to balance) but
    // never splits shorter than 512 keys. Depends only on the shape.
    constexpr int64_t kTargetTasks = 32, kMinSplit = 512;
    const int64_t want = std::max<int64_t>(1, CeilDiv(kTargetTasks, std::max<int64_t>(bh, 1)));
    split_len = std::max(RoundUp(kMinSplit, pl->tkv),
                         RoundUp(CeilDiv(std::max<int64_t>(d.kv_len, 1), want), pl->tkv));
  }
  pl->split_len = split_len;
  pl->n_splits = std::max<int64_t>(1, CeilDiv(d.kv_len, split_len));
  pl->num_tasks = bh * pl->n_splits;
  pl->partial_floats = kernels::AlignFloats(static_cast<size_t>(pl->rows * (pl->dvp + 2)));
  pl->worker_floats = kernels::MakeScratchLayout(*pl).total;
  ch->tile_kv = pl->tkv;
  ch->num_splits = pl->n_splits;
  ch->num_tasks = pl->num_tasks;
  if (!explain) return;
  ch->reason += CountOf(pl->rows, "query row") + " (" + CountOf(G, "head") + " x " +
                CountOf(d.q_len, "query", "queries") +
                ") per kv head share each K/V element; " + CountOf(pl->n_splits, "split") +
                " of " + CountOf(split_len, "key") +
                " (fixed by shape) merged by log-sum-exp in split order; " +
                CountOf(pl->num_tasks, "task");
}

// Chooses the kernel and its partition (the reason text only with
// `explain`); no tensor pointers are resolved. Fills pr->d, pr->choice,
// pr->plan and *ap.
Status PlanCall(const char* op, const TensorView& out, const TensorView& lse,
                const TensorView& q, const TensorView& k, const TensorView& v,
                const SdpaOptions& opt, const KernelOptions& kopt, bool explain,
                Prepared* pr, AttentionPlan* ap) {
  ATTNFLOW_RETURN_IF_ERROR(ValidateSdpa(op, out, lse, q, k, v, opt, &pr->d));
  const SdpaDims& d = pr->d;
  KernelChoice& ch = pr->choice;
  ch = KernelChoice{};
  *ap = AttentionPlan{};
  ap->dims = d;
  ap->q_dtype = q.dtype;
  ap->k_dtype = k.dtype;
  ap->v_dtype = v.dtype;
  ap->out_dtype = out.dtype;
  ap->has_lse = !lse.empty_view();
  if (ap->has_lse) ap->lse_dtype = lse.dtype;
  // reference / naive: one task, the whole call.
  auto whole_call = [&](KernelKind kind) {
    ch.kernel = kind;
    ap->kernel = kind;
    ap->num_tasks = 1;
    return Status::Ok();
  };
  if (kopt.force == KernelKind::kReference) {
    if (explain) ch.reason = "reference: forced by KernelOptions.force";
    return whole_call(KernelKind::kReference);
  }
  if (kopt.force == KernelKind::kTiledBackward) {
    return InvalidArgument(std::string(op) +
                           ": tiled_backward is the backward kernel (AttentionBackward); "
                           "the forward takes auto, reference, tiled_prefill, split_kv_decode "
                           "or naive");
  }
  if (kopt.force == KernelKind::kNaive) {  // never reached from kAuto
    const std::string why = kernels::NaiveUnsupportedReason(out, lse, q, k, v);
    if (!why.empty())
      return InvalidArgument(std::string(op) + ": cannot force naive: " + why);
    if (explain) {
      ch.reason = "naive: forced by KernelOptions.force; materialised fp32 S and P [Lq,Lk] per "
                  "(batch, head) (write S, read S, write P, read P)";
    }
    return whole_call(KernelKind::kNaive);
  }
  const std::string why_not = FastUnsupportedReason(out, lse, q, k, v, d);
  if (!why_not.empty()) {
    if (kopt.force != KernelKind::kAuto) {
      return InvalidArgument(std::string(op) + ": cannot force " +
                             KernelKindName(kopt.force) + ": " + why_not);
    }
    if (explain) ch.reason = "reference: " + why_not;
    return whole_call(KernelKind::kReference);
  }
  const TargetInfo t = Target();
  if (explain) ch.simd_target = hwy::TargetName(t.target);
  const int64_t G = d.num_heads / std::max<int64_t>(d.num_kv_heads, 1);
  KernelKind kind = kopt.force;
  bool below_threshold = false;
  if (kind == KernelKind::kAuto) {
    below_threshold = d.q_len <= kDecodeMaxQueryLen;
    kind = below_threshold ? KernelKind::kSplitKvDecode : KernelKind::kTiledPrefill;
  }
  if (kind == KernelKind::kSplitKvDecode && G * d.q_len > kDecodeMaxRows) {
    if (kopt.force == KernelKind::kSplitKvDecode) {
      return InvalidArgument(std::string(op) + ": cannot force split_kv_decode: " +
                             std::to_string(G * d.q_len) + " query rows per kv head (G=" +
                             std::to_string(G) + " x q_len=" + std::to_string(d.q_len) +
                             ") exceed its limit of " + std::to_string(kDecodeMaxRows));
    }
    kind = KernelKind::kTiledPrefill;
  }
  ch.kernel = kind;
  if (explain) {
    const std::string why =
        kopt.force != KernelKind::kAuto
            ? std::string("forced by KernelOptions.force")
            : "q_len=" + std::to_string(d.q_len) +
                  (below_threshold ? " <= decode threshold " : " > decode threshold ") +
                  std::to_string(kDecodeMaxQueryLen);
    ch.reason = std::string(KernelKindName(kind)) + ": " + why + "; " +
              DimNote(d, FastD(d)) + "; k/v " + DTypeName(k.dtype) + "/" +
              DTypeName(v.dtype) + "; " + ch.simd_target + " (" +
              std::to_string(t.lanes) + " fp32 lanes); ";
  }
  const bool decode = kind == KernelKind::kSplitKvDecode;
  if (decode) {
    PlanDecode(d, kopt, &pr->plan, &ch, explain);
  } else {
    PlanPrefill(d, kopt, &pr->plan, &ch, explain);
  }
  if (explain && RunsInline(d)) {
    ch.reason += "; tiny call (<= 2^19 FLOP): its tasks run on the calling thread";
  }
  const Plan& pl = pr->plan;
  const bool empty = d.batch == 0 || d.num_heads == 0 || d.q_len == 0;
  ap->kernel = kind;
  ap->simd_target = t.target;
  ap->tile_q = ch.tile_q;
  ap->tile_kv = ch.tile_kv;
  ap->num_splits = ch.num_splits;
  ap->split_len = decode ? pl.split_len : 0;
  ap->num_tasks = empty ? 0 : pl.num_tasks;
  ap->num_merge_tasks = decode && !empty ? d.batch * d.num_kv_heads : 0;
  ap->worker_scratch_floats = pl.worker_floats;
  if (decode && !empty) {
    // Overflow-checked: num_tasks * partial_floats.
    const size_t kMaxFloats = std::numeric_limits<size_t>::max() / 8;
    const size_t tasks = static_cast<size_t>(pl.num_tasks);
    if (pl.partial_floats != 0 && tasks > kMaxFloats / pl.partial_floats) {
      return ResourceExhausted(std::string(op) + ": kernel scratch size overflows for q " +
                               q.shape_string() + ", k " + k.shape_string());
    }
    ap->shared_scratch_floats = tasks * pl.partial_floats;
  }
  static_assert(sizeof(Plan) <= sizeof(ap->tiling), "AttentionPlan::tiling too small");
  static_assert(std::is_trivially_copyable_v<Plan>);
  std::memcpy(ap->tiling, &pl, sizeof(Plan));
  return Status::Ok();
}

Status Prepare(const char* op, const TensorView& out, const TensorView& lse,
               const TensorView& q, const TensorView& k, const TensorView& v,
               const SdpaOptions& opt, const KernelOptions& kopt, bool explain,
               Prepared* pr) {
  ATTNFLOW_RETURN_IF_ERROR(PlanCall(op, out, lse, q, k, v, opt, kopt, explain, pr, &pr->ap));
  if (pr->ap.kernel == KernelKind::kReference || pr->ap.kernel == KernelKind::kNaive) {
    return Status::Ok();
  }
  return kernels::ResolveProblem(op, pr->d, out, lse, q, k, v, opt, &pr->P, &pr->storage);
}

// Task `task` of `phase` of a fast plan (the one place that maps a plan's
// tasks to kernel calls; Attention and RunAttentionTasks both run it).
// `partials` is the shared decode scratch (AttentionPlan::shared_scratch_floats).
void RunFastTask(const Problem& P, const Plan& pl, bool decode, AttentionPhase phase,
                 int64_t task, float* worker_scratch, float* partials) {
  if (!decode) {
    kernels::RunPrefillTask(P, pl, task, worker_scratch);
  } else if (phase == AttentionPhase::kTasks) {
    kernels::RunDecodeSplit(P, pl, task, worker_scratch,
                            partials + static_cast<size_t>(task) * pl.partial_floats);
  } else {
    kernels::MergeDecodeSplits(P, pl, task, partials);
  }
}

// Scratch buffers are recycled across calls (a fresh multi-100-KiB buffer per
// decode step would cost an mmap/munmap plus page faults every step). A small
// process-wide cache holds up to kCacheEntries idle buffers of up to
// kCacheMaxBytes each; concurrent calls each take their own buffer.
class ScratchCache {
 public:
  static constexpr size_t kCacheEntries = 8;
  static constexpr size_t kCacheMaxBytes = size_t{256} << 20;

  void* Acquire(size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      size_t best = entries_.size();
      for (size_t i = 0; i < entries_.size(); ++i) {
        if (entries_[i].bytes >= bytes &&
            (best == entries_.size() || entries_[i].bytes < entries_[best].bytes)) {
          best = i;
        }
      }
      if (best != entries_.size()) {
        void* p = entries_[best].p;
        entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(best));
        return p;
      }
    }
    return AlignedAlloc(bytes);
  }
  // `bytes` must be the size the buffer was allocated with (>= requested).
  void Release(void* p, size_t bytes) {
    if (p == nullptr) return;
    if (bytes <= kCacheMaxBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      if (entries_.size() < kCacheEntries) {
        entries_.push_back({p, bytes});
        return;
      }
      // Full: keep the larger of this buffer and the smallest idle one.
      size_t smallest = 0;
      for (size_t i = 1; i < entries_.size(); ++i) {
        if (entries_[i].bytes < entries_[smallest].bytes) smallest = i;
      }
      if (entries_[smallest].bytes < bytes) {
        std::swap(entries_[smallest].p, p);
        std::swap(entries_[smallest].bytes, bytes);
      }
    }
    AlignedFree(p);
  }

 private:
  struct Entry {
    void* p;
    size_t bytes;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
};

ScratchCache& Cache() {
  static ScratchCache* c = new ScratchCache();  // never destroyed (exit-safe)
  return *c;
}

// Sizes are rounded up to 64 KiB so that similar calls reuse buffers.
struct ScratchGuard {
  void* p = nullptr;
  size_t bytes = 0;
  ~ScratchGuard() { Cache().Release(p, bytes); }
};

}  // namespace

namespace kernels {

Status ResolveProblem(const char* op, const SdpaDims& d, const TensorView& out,
                      const TensorView& lse, const TensorView& q, const TensorView& k,
                      const TensorView& v, const SdpaOptions& opt, Problem* P,
                      ProblemStorage* st) {
  const int64_t G = d.num_heads / std::max<int64_t>(d.num_kv_heads, 1);
  P->B = d.batch;
  P->H = d.num_heads;
  P->Hkv = d.num_kv_heads;
  P->G = G;
  P->Lq = d.q_len;
  P->Lk = d.kv_len;
  P->D = d.head_dim;
  P->Dv = d.v_dim;
  P->scale2 = static_cast<float>(d.scale * kernels::kLog2e);
  P->scale2_lo = static_cast<float>(d.scale * kernels::kLog2e - static_cast<double>(P->scale2));
  P->q = static_cast<const float*>(q.data);
  P->k = k.data;
  P->kt = k.dtype;
  P->v = v.data;
  P->vt = v.dtype;
  P->out = static_cast<float*>(out.data);
  for (int i = 0; i < 4; ++i) {
    P->qs[i] = q.strides[i];
    P->ks[i] = k.strides[i];
    P->vs[i] = v.strides[i];
    P->os[i] = out.strides[i];
  }
  if (!lse.empty_view()) {
    P->lse = lse.data;
    P->lse_f64 = lse.dtype == DType::kF64;
    for (int i = 0; i < 3; ++i) P->ls[i] = lse.strides[i];
  }
  P->causal = opt.causal;
  P->window_left = opt.window_left;
  P->window_right = opt.window_right;
  if (!opt.attn_mask.empty_view()) {
    const int64_t target[4] = {d.batch, d.num_heads, d.q_len, d.kv_len};
    TensorView m;
    if (!BroadcastMask(opt.attn_mask, target, &m)) {
      return InvalidArgument(std::string(op) + ": attn_mask " +
                             opt.attn_mask.shape_string() + " is not broadcastable");
    }
    P->mask = m.data;
    P->mt = m.dtype;
    for (int i = 0; i < 4; ++i) P->ms[i] = m.strides[i];
  }
  st->valid_kv.resize(static_cast<size_t>(d.batch));
  st->diag_kv.resize(static_cast<size_t>(d.batch));
  for (int64_t b = 0; b < d.batch; ++b) {
    const int64_t valid = ValidKvLen(opt.kv_lens, b, d.kv_len);
    st->valid_kv[static_cast<size_t>(b)] = valid;
    st->diag_kv[static_cast<size_t>(b)] = DiagonalKvLen(opt.kv_align, d.kv_len, valid);
  }
  P->valid_kv = st->valid_kv.data();
  P->diag_kv = st->diag_kv.data();
  if (!opt.alibi_slopes.empty_view()) {
    const bool per_batch = opt.alibi_slopes.rank == 2;
    const int64_t nb = per_batch ? d.batch : 1;
    st->slope2.resize(static_cast<size_t>(nb * d.num_heads));
    st->slope.resize(static_cast<size_t>(nb * d.num_heads));
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t h = 0; h < d.num_heads; ++h) {
        const double sl = AlibiSlope(opt.alibi_slopes, b, h);
        const size_t at = static_cast<size_t>(b * d.num_heads + h);
        st->slope[at] = sl;
        st->slope2[at] = static_cast<float>(sl * kernels::kLog2e);
      }
    }
    P->slope2 = st->slope2.data();
    P->slope = st->slope.data();
    P->slope_bs = per_batch ? d.num_heads : 0;
  }
  P->softcap = opt.softcap;
  P->softcap2 = static_cast<float>(opt.softcap * kernels::kLog2e);
  return Status::Ok();
}

}  // namespace kernels

Status ExplainAttention(const TensorView& out, const TensorView& lse,
                        const TensorView& q, const TensorView& k,
                        const TensorView& v, const SdpaOptions& opt,
                        const KernelOptions& kopt, KernelChoice* choice) {
  Prepared pr;
  ATTNFLOW_RETURN_IF_ERROR(Prepare("attention", out, lse, q, k, v, opt, kopt, true, &pr));
  if (choice != nullptr) *choice = std::move(pr.choice);
  return Status::Ok();
}

Status Attention(const TensorView& out, const TensorView& lse,
                 const TensorView& q, const TensorView& k, const TensorView& v,
                 const SdpaOptions& opt, const KernelOptions& kopt,
                 KernelChoice* choice) {
  Prepared pr;
  ATTNFLOW_RETURN_IF_ERROR(
      Prepare("attention", out, lse, q, k, v, opt, kopt, choice != nullptr, &pr));
  if (choice != nullptr) *choice = pr.choice;
  const AttentionPlan& ap = pr.ap;
  if (ap.kernel == KernelKind::kReference) {
    return reference::Sdpa(out, lse, q, k, v, opt);
  }
  if (ap.kernel == KernelKind::kNaive) {
    return kernels::NaiveAttention(out, lse, q, k, v, opt, pr.d,
                                   kopt.pool != nullptr ? *kopt.pool : DefaultPool());
  }
  if (ap.num_tasks == 0) return Status::Ok();

  ThreadPool& pool = kopt.pool != nullptr ? *kopt.pool : DefaultPool();
  const Plan& pl = pr.plan;
  const bool decode = ap.kernel == KernelKind::kSplitKvDecode;
  const size_t workers = static_cast<size_t>(std::max(pool.NumWorkers(), 1));
  const size_t worker_floats = ap.worker_scratch_floats;
  // Overflow-checked scratch size: workers * worker_floats + shared partials.
  const size_t kMaxFloats = std::numeric_limits<size_t>::max() / 8;
  size_t total = 0;
  bool overflow = worker_floats > kMaxFloats / workers;
  if (!overflow) total = workers * worker_floats;
  const size_t partial_off = total;
  if (!overflow) {
    overflow = ap.shared_scratch_floats > kMaxFloats - total;
    total += ap.shared_scratch_floats;
  }
  if (overflow) {
    return ResourceExhausted("attention: kernel scratch size overflows for q " +
                             q.shape_string() + ", k " + k.shape_string());
  }
  ScratchGuard guard;
  guard.bytes = (total * sizeof(float) + 65535) / 65536 * 65536;
  guard.p = Cache().Acquire(guard.bytes);
  if (guard.p == nullptr) {
    return ResourceExhausted("attention: cannot allocate " +
                             std::to_string(total * sizeof(float)) +
                             " bytes of kernel scratch (" + KernelKindName(ap.kernel) +
                             ", " + std::to_string(workers) + " workers)");
  }
  float* scratch = static_cast<float*>(guard.p);
  float* partials = scratch + partial_off;
  const Problem& P = pr.P;
  const bool run_inline = RunsInline(pr.d);
  auto parallel_for = [&](const std::function<void(int64_t, int)>& fn) {
    if (!run_inline) return pool.ParallelFor(ap.num_tasks, fn);
    for (int64_t t = 0; t < ap.num_tasks; ++t) fn(t, 0);  // worker 0's scratch
  };
  if (!decode) {
    parallel_for([&](int64_t task, int worker) {
      RunFastTask(P, pl, false, AttentionPhase::kTasks, task,
                  scratch + static_cast<size_t>(worker) * worker_floats, partials);
    });
  } else {
    // One pool call for both phases: the task that finishes the last split
    // of a (b, kv head) runs that pair's kMerge task (the merge reads only
    // its own pair's splits; which thread does it does not matter).
    std::vector<std::atomic<int64_t>> done(static_cast<size_t>(ap.num_merge_tasks));
    for (auto& c : done) c.store(0, std::memory_order_relaxed);
    parallel_for([&](int64_t task, int worker) {
      RunFastTask(P, pl, true, AttentionPhase::kTasks, task,
                  scratch + static_cast<size_t>(worker) * worker_floats, partials);
      const int64_t bh = task / pl.n_splits;
      if (done[static_cast<size_t>(bh)].fetch_add(1, std::memory_order_acq_rel) == pl.n_splits - 1) {
        RunFastTask(P, pl, true, AttentionPhase::kMerge, bh, nullptr, partials);
      }
    });
  }
  return Status::Ok();
}

Status PlanAttention(const TensorView& out, const TensorView& lse, const TensorView& q,
                     const TensorView& k, const TensorView& v, const SdpaOptions& opt,
                     const KernelOptions& kopt, AttentionPlan* plan) {
  if (plan == nullptr) return InvalidArgument("attention: plan: the output plan is null");
  Prepared pr;
  return PlanCall("attention", out, lse, q, k, v, opt, kopt, false, &pr, plan);
}

// ---- AttentionWorkspace --------------------------------------------------

AttentionWorkspace::~AttentionWorkspace() { AlignedFree(base_); }

Status AttentionWorkspace::Reserve(const AttentionPlan& plan, int num_workers) {
  if (num_workers < 1) {
    return InvalidArgument("attention workspace: num_workers " + std::to_string(num_workers) +
                           " < 1");
  }
  const size_t wf = std::max(worker_floats_, plan.worker_scratch_floats);
  const size_t shared = std::max(shared_floats_, plan.shared_scratch_floats);
  const int nw = std::max(num_workers_, num_workers);
  if (base_ != nullptr && wf == worker_floats_ && shared == shared_floats_ && nw == num_workers_) {
    return Status::Ok();
  }
  const size_t kMaxFloats = std::numeric_limits<size_t>::max() / 8;
  if (shared > kMaxFloats || (wf != 0 && static_cast<size_t>(nw) > (kMaxFloats - shared) / wf)) {
    return ResourceExhausted("attention workspace: " + std::to_string(nw) + " workers x " +
                             std::to_string(wf) + " floats + " + std::to_string(shared) +
                             " shared floats overflows");
  }
  const size_t total = static_cast<size_t>(nw) * wf + shared;
  void* p = AlignedAlloc(std::max<size_t>(total, 1) * sizeof(float));
  if (p == nullptr) {
    return ResourceExhausted("attention workspace: cannot allocate " +
                             std::to_string(total * sizeof(float)) + " bytes");
  }
  AlignedFree(base_);
  base_ = static_cast<float*>(p);
  worker_floats_ = wf;
  shared_floats_ = shared;
  num_workers_ = nw;
  return Status::Ok();
}

// ---- AttentionRun --------------------------------------------------------

struct AttentionRun::Impl {
  AttentionPlan plan;
  Plan pl;
  Problem P;
  kernels::ProblemStorage storage;
  // The bound call as given (the reference and naive kernels run from it).
  struct Call {
    TensorView out, lse, q, k, v;
    SdpaOptions opt;
    SdpaDims d{};
  } call;
  size_t worker_floats = 0;
};

AttentionRun::AttentionRun() = default;
AttentionRun::~AttentionRun() = default;
AttentionRun::AttentionRun(AttentionRun&&) noexcept = default;
AttentionRun& AttentionRun::operator=(AttentionRun&&) noexcept = default;

const AttentionPlan& AttentionRun::plan() const {
  static const AttentionPlan kNone{};
  return impl_ != nullptr ? impl_->plan : kNone;
}

namespace {
bool SameDims(const SdpaDims& a, const SdpaDims& b) {
  return a.batch == b.batch && a.num_heads == b.num_heads && a.num_kv_heads == b.num_kv_heads &&
         a.q_len == b.q_len && a.kv_len == b.kv_len && a.head_dim == b.head_dim &&
         a.v_dim == b.v_dim;
}
std::string DescribePlanned(const SdpaDims& d, DType q, DType k, DType v, DType out, bool has_lse,
                            DType lse) {
  return "[B=" + std::to_string(d.batch) + " H=" + std::to_string(d.num_heads) +
         " Hkv=" + std::to_string(d.num_kv_heads) + " Lq=" + std::to_string(d.q_len) +
         " Lk=" + std::to_string(d.kv_len) + " D=" + std::to_string(d.head_dim) +
         " Dv=" + std::to_string(d.v_dim) + "] q/k/v/out " + DTypeName(q) + "/" +
         DTypeName(k) + "/" + DTypeName(v) + "/" + DTypeName(out) + ", lse " +
         (has_lse ? DTypeName(lse) : "absent");
}
}  // namespace

Status AttentionRun::Bind(const AttentionPlan& plan, const TensorView& out, const TensorView& lse,
                          const TensorView& q, const TensorView& k, const TensorView& v,
                          const SdpaOptions& opt) {
  if (impl_ == nullptr) impl_ = std::make_unique<Impl>();
  Impl& m = *impl_;
  m.plan = AttentionPlan{};
  m.plan.kernel = KernelKind::kAuto;  // unbound until every check passed
  SdpaDims d{};
  ATTNFLOW_RETURN_IF_ERROR(ValidateSdpa("attention", out, lse, q, k, v, opt, &d));
  const bool has_lse = !lse.empty_view();
  if (!SameDims(d, plan.dims) || q.dtype != plan.q_dtype || k.dtype != plan.k_dtype ||
      v.dtype != plan.v_dtype || out.dtype != plan.out_dtype || has_lse != plan.has_lse ||
      (has_lse && lse.dtype != plan.lse_dtype)) {
    return InvalidArgument(
        "attention: the plan was made for " +
        DescribePlanned(plan.dims, plan.q_dtype, plan.k_dtype, plan.v_dtype, plan.out_dtype,
                        plan.has_lse, plan.lse_dtype) +
        ", the call has " +
        DescribePlanned(d, q.dtype, k.dtype, v.dtype, out.dtype, has_lse, lse.dtype));
  }
  m.call = {out, lse, q, k, v, opt, d};
  std::memcpy(&m.pl, plan.tiling, sizeof(Plan));
  if (plan.kernel != KernelKind::kReference && plan.kernel != KernelKind::kNaive) {
    ATTNFLOW_RETURN_IF_ERROR(
        kernels::ResolveProblem("attention", d, out, lse, q, k, v, opt, &m.P, &m.storage));
  }
  m.plan = plan;
  return Status::Ok();
}

Status RunAttentionTasks(const AttentionRun& run, AttentionPhase phase, int64_t begin,
                         int64_t end, int worker, const AttentionWorkspace& ws) {
  if (run.impl_ == nullptr || run.impl_->plan.kernel == KernelKind::kAuto) {
    return InvalidArgument("attention: run tasks: the run is not bound");
  }
  const AttentionRun::Impl& m = *run.impl_;
  const AttentionPlan& ap = m.plan;
  const int64_t n = ap.PhaseTasks(phase);
  if (begin < 0 || begin > end || end > n) {
    return OutOfRange("attention: run tasks [" + std::to_string(begin) + ", " +
                      std::to_string(end) + ") of phase " +
                      (phase == AttentionPhase::kTasks ? "tasks" : "merge") + ", which has " +
                      std::to_string(n));
  }
  if (begin == end) return Status::Ok();
  if (ap.kernel == KernelKind::kReference) {
    const auto& c = m.call;
    return reference::Sdpa(c.out, c.lse, c.q, c.k, c.v, c.opt);
  }
  if (ap.kernel == KernelKind::kNaive) {
    ThreadPool one(1);  // starts no thread: the call runs on this one
    const auto& c = m.call;
    return kernels::NaiveAttention(c.out, c.lse, c.q, c.k, c.v, c.opt, c.d, one);
  }
  if (worker < 0 || worker >= ws.num_workers() || !ws.Holds(ap)) {
    return InvalidArgument("attention: run tasks: worker " + std::to_string(worker) +
                           " outside the workspace's " + std::to_string(ws.num_workers()) +
                           " workers, or the workspace is not reserved for this plan");
  }
  const bool decode = ap.kernel == KernelKind::kSplitKvDecode;
  for (int64_t t = begin; t < end; ++t) {
    RunFastTask(m.P, m.pl, decode, phase, t, ws.worker(worker), ws.shared());
  }
  return Status::Ok();
}

}  // namespace attnflow
