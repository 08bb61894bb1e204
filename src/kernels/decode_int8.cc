// decode_int8.cc — DecodeKvS8 (attnflow/kv_int8.h): validation, the plan
// (tiles, splits, tasks), the pre-scaled query rows, parallel execution of
// the per-target splits (kernels_decode_int8.cc), their fixed-order merge
// and the double-precision recomputation of rows whose fp32 scores could
// overflow.
//
// Invariants: the split plan depends only on the shape, the visible lengths
// and the SIMD target, and each (b, kv head) is merged in split order 0..S-1
// (in double), so results are bit-identical for any thread count. A query
// row is computed by the SIMD path only when every score it can produce is
// finite in fp32 (its q finite and sum_d |qs_d| * 128 < 2^100); the others
// are recomputed in double from the dequantised cache with the rules of
// reference::Sdpa (a NaN score makes the row NaN, a +inf one NaN too).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "attnflow/kv_int8.h"
#include "attnflow/semantics.h"
#include "hwy/targets.h"
#include "kernels/decode_int8.h"
#include "kernels/internal.h"

namespace attnflow {

std::string DecodeS8Choice::ToString() const {
  std::string s = "int8_kv_decode";
  if (!simd_target.empty()) s += " [" + simd_target + "]";
  if (tile_kv > 0) s += " tile_kv=" + std::to_string(tile_kv);
  if (num_splits > 0) s += " splits=" + std::to_string(num_splits);
  if (num_tasks > 0) s += " tasks=" + std::to_string(num_tasks);
  if (!reason.empty()) s += ": " + reason;
  return s;
}

int64_t VisibleS8(int64_t length, const KvCacheS8Layout& layout) {
  if (length <= 0) return 0;
  return layout.window > 0 ? std::min(length, layout.window) : length;
}

double DecodeKvS8Bytes(std::span<const KvCacheS8Seq> seqs, const KvCacheS8Layout& layout) {
  double bytes = 0;
  for (const KvCacheS8Seq& s : seqs) {
    const int64_t n = VisibleS8(s.length, layout);
    if (n == 0) continue;
    bytes += static_cast<double>(layout.num_kv_heads) *
             (static_cast<double>(layout.head_dim + layout.v_dim) * static_cast<double>(n) +
              2.0 * sizeof(float));
  }
  return bytes;
}

namespace {

using kernels::PlanS8;
using kernels::ProblemS8;
using kernels::SplitPartials;

constexpr char kOp[] = "decode_kv_s8";
constexpr double kLog2e = 1.4426950408889634073599246810019;
constexpr double kLn2 = 0.69314718055994530941723212145818;
// Keys per tile: up to 4096 (each V column of a tile is then a long stream
// for the hardware prefetchers: B=1 H=8 D=128 Lkv=32768, 1 thread, CPU ms
// min 5.6 / 4.8 / 4.3 / 4.1 for tiles of 512 / 1024 / 2048 / 4096 keys),
// at most 64 Ki scores per tile (G * tile <= 65536: 256 KiB of the L2), and
// never beyond the split.
constexpr int64_t kMaxTileKeys = 4096;
constexpr int64_t kMaxTileScores = 65536;
constexpr int64_t kTargetTasks = 32;    // aim: enough tasks for ~16 threads
constexpr int64_t kMinSplit = 512;      // never shorter splits (a multiple of every lane count)
constexpr int64_t kMaxCapacity = int64_t{1} << 31;
// A row whose |score| bound (sum_d |qs_d| * 128, log2 domain) reaches this is
// recomputed in double: fp32 scores then stay far from overflow.
constexpr double kMaxScoreBound = 1.2676506002282294e30;  // 2^100
// Calls of at most this many FLOP run their tasks on the calling thread (as
// attnflow::Attention: the pool hand-off would cost more than it saves).
constexpr double kInlineMaxFlops = 524288.0;

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }
int64_t CeilDiv(int64_t x, int64_t m) { return (x + m - 1) / m; }

std::string Join(const std::string& what) { return std::string(kOp) + ": " + what; }

std::string LayoutString(const KvCacheS8Layout& L) {
  return "(num_kv_heads=" + std::to_string(L.num_kv_heads) + ", head_dim=" +
         std::to_string(L.head_dim) + ", v_dim=" + std::to_string(L.v_dim) + ", capacity=" +
         std::to_string(L.capacity) + ", window=" + std::to_string(L.window) + ")";
}

Status Validate(const TensorView& out, const TensorView& lse, const TensorView& q,
                std::span<const KvCacheS8Seq> seqs, const KvCacheS8Layout& L,
                const DecodeS8Options& opt, double* scale) {
  const std::string shapes = "q " + (q.rank < 0 ? std::string("absent") : q.describe()) +
                             ", out " + (out.rank < 0 ? std::string("absent") : out.describe()) +
                             ", cache " + LayoutString(L) + ", " + std::to_string(seqs.size()) +
                             " sequence(s)";
  auto bad = [&](const std::string& why) { return InvalidArgument(Join(why + " (" + shapes + ")")); };
  if (L.num_kv_heads < 1) return bad("num_kv_heads must be >= 1");
  if (L.head_dim < 1 || L.head_dim > kDecodeS8MaxHeadDim || L.v_dim < 1 ||
      L.v_dim > kDecodeS8MaxHeadDim) {
    return bad("head_dim and v_dim must be in 1.." + std::to_string(kDecodeS8MaxHeadDim));
  }
  if (L.capacity < 1 || L.capacity >= kMaxCapacity) return bad("capacity must be in 1..2^31-1");
  if (L.window < 0 || L.window > L.capacity) return bad("window must be in 0..capacity");
  if (q.rank != 4 || q.dtype != DType::kF32) return bad("q must be F32 [batch, num_heads, 1, head_dim]");
  const int64_t B = q.shape[0], H = q.shape[1];
  if (q.shape[2] != 1) return bad("q_len must be 1 (one new position per sequence)");
  if (q.shape[3] != L.head_dim) return bad("q's last dim must equal the cache's head_dim");
  if (B != static_cast<int64_t>(seqs.size())) return bad("q's batch must equal the number of sequences");
  if (H % L.num_kv_heads != 0) return bad("num_heads must be a multiple of num_kv_heads");
  if (out.rank != 4 || out.dtype != DType::kF32 || out.shape[0] != B || out.shape[1] != H ||
      out.shape[2] != 1 || out.shape[3] != L.v_dim) {
    return bad("out must be F32 [batch, num_heads, 1, v_dim]");
  }
  if (!lse.empty_view() && (lse.rank != 3 || lse.dtype != DType::kF32 || lse.shape[0] != B ||
                            lse.shape[1] != H || lse.shape[2] != 1)) {
    return bad("lse must be absent or F32 [batch, num_heads, 1], got " + lse.describe());
  }
  for (const TensorView* t : {&q, &out, &lse}) {
    if (t->rank < 0) continue;
    for (int d = 0; d < t->rank; ++d) {
      if (t->strides[d] < 0) return bad("negative strides are not supported");
    }
  }
  for (size_t b = 0; b < seqs.size(); ++b) {
    const KvCacheS8Seq& s = seqs[b];
    const std::string seq = "sequence " + std::to_string(b) + " (length " + std::to_string(s.length) + ")";
    if (s.length < 0) return bad(seq + ": length must be >= 0");
    if (L.window == 0 && s.length > L.capacity) {
      return bad(seq + ": a cache without a window holds at most capacity positions");
    }
    if (s.length == 0) continue;
    if (s.k == nullptr || s.v == nullptr || s.k_scale == nullptr || s.v_scale == nullptr) {
      return bad(seq + ": k, v, k_scale and v_scale must not be null");
    }
    for (int64_t g = 0; g < L.num_kv_heads; ++g) {
      const float ks = s.k_scale[g], vs = s.v_scale[g];
      if (!std::isfinite(ks) || !std::isfinite(vs) || ks < 0 || vs < 0) {
        return bad(seq + ": kv head " + std::to_string(g) + " scales k " + std::to_string(ks) +
                   ", v " + std::to_string(vs) + " must be finite and >= 0");
      }
    }
  }
  if (std::isnan(opt.scale)) {
    *scale = DefaultScale(L.head_dim);
  } else if (!std::isfinite(opt.scale)) {
    return bad("scale must be finite, got " + std::to_string(opt.scale));
  } else {
    *scale = opt.scale;
  }
  return Status::Ok();
}

// One query row (b, h) in double with reference::Sdpa's rules, from the
// dequantised cache (the path for rows whose fp32 scores could overflow).
// qrow: a copy of q[b, h, 0, :] taken before anything was written (out may
// alias q).
Status RecomputeRow(const TensorView& out, const TensorView& lse, const float* qrow,
                    const KvCacheS8Seq& seq, const KvCacheS8Layout& L, int64_t first, int64_t n,
                    int64_t b, int64_t h, int64_t H, double scale) {
  const int64_t D = L.head_dim, Dv = L.v_dim, cap = L.capacity;
  const int64_t g = KvHeadFor(h, H, L.num_kv_heads);
  Result<Tensor> buf = Tensor::Zeros(DType::kF64, {n + Dv + 1});
  if (!buf.ok()) {
    return ResourceExhausted(Join("cannot allocate the row buffer for " + std::to_string(n) +
                                  " positions (" + buf.status().message() + ")"));
  }
  double* x = buf->data<double>();
  double* o = x + n;
  const double kNegInf = -std::numeric_limits<double>::infinity();
  double row_max = kNegInf;
  bool row_nan = false;
  for (int64_t j = 0; j < n; ++j) {
    const int8_t* kr = seq.k + (g * cap + (first + j) % cap) * D;
    double acc = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      acc += static_cast<double>(qrow[d]) * (static_cast<double>(seq.k_scale[g]) * kr[d]);
    }
    const double v = acc * scale;
    if (std::isnan(v)) {
      row_nan = true;
    } else if (v > row_max) {
      row_max = v;
    }
    x[j] = v;
  }
  double row_lse;
  for (int64_t c = 0; c < Dv; ++c) o[c] = 0.0;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (row_nan) {
    row_lse = nan;
    for (int64_t c = 0; c < Dv; ++c) o[c] = nan;
  } else if (row_max == kNegInf) {
    row_lse = kNegInf;
  } else {
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      x[j] = x[j] == kNegInf ? 0.0 : std::exp(x[j] - row_max);
      sum += x[j];
    }
    for (int64_t j = 0; j < n; ++j) {
      const double w = x[j] / sum;
      if (w == 0.0) continue;
      const int64_t slot = (first + j) % cap;
      for (int64_t c = 0; c < Dv; ++c) {
        o[c] += w * (static_cast<double>(seq.v_scale[g]) * seq.v[(g * Dv + c) * cap + slot]);
      }
    }
    row_lse = row_max + std::log(sum);
  }
  for (int64_t c = 0; c < Dv; ++c) out.store(out.offset(b, h, 0, c), o[c]);
  if (!lse.empty_view()) lse.store(lse.offset(b, h, 0), row_lse);
  return Status::Ok();
}

// Merges the splits of (b, kv head g) in split order (double): M = max m_s
// over splits with l_s > 0, w_s = 2^(m_s - M), l = sum w_s l_s,
// out = v_scale * sum w_s O_s / l, lse = (M + log2 l) ln 2. Rows flagged for
// recomputation are skipped.
void MergeS8(const ProblemS8& P, const PlanS8& pl, int64_t bg, const float* partials,
             const uint8_t* recompute, const TensorView& out, const TensorView& lse) {
  const int64_t g = bg % P.Hkv, b = bg / P.Hkv;
  const size_t rows = static_cast<size_t>(P.G), dv = static_cast<size_t>(P.Dv);
  const int64_t S = pl.n_splits;
  const SplitPartials parts{partials + static_cast<size_t>(bg * S) * pl.partial_floats,
                            pl.partial_floats, rows, dv, S};
  const double sv = P.n[b] > 0 ? static_cast<double>(P.seqs[b].v_scale[g]) : 0.0;
  float* out_base = static_cast<float*>(out.data);
  float* lse_base = lse.empty_view() ? nullptr : static_cast<float*>(lse.data);
  double acc[kDecodeS8MaxHeadDim];
  for (size_t r = 0; r < rows; ++r) {
    const int64_t h = g * P.G + static_cast<int64_t>(r);
    if (recompute[b * P.H + h]) continue;
    const double M = parts.MaxM(r, nullptr);
    float* o = out_base + b * out.strides[0] + h * out.strides[1];
    const int64_t os = out.strides[3];
    float row_lse;
    if (M == -std::numeric_limits<double>::infinity()) {  // no visible position
      for (size_t c = 0; c < dv; ++c) o[c * os] = 0.0f;
      row_lse = -std::numeric_limits<float>::infinity();
    } else {
      std::fill(acc, acc + dv, 0.0);
      const double lsum = parts.ForEachWeighted(r, M, [&](double w, const float* po) {
        for (size_t c = 0; c < dv; ++c) acc[c] += w * static_cast<double>(po[c]);
      });
      const double f = sv / lsum;
      for (size_t c = 0; c < dv; ++c) o[c * os] = static_cast<float>(acc[c] * f);
      row_lse = static_cast<float>((M + std::log2(lsum)) * kLn2);
    }
    if (lse_base != nullptr) lse_base[b * lse.strides[0] + h * lse.strides[1]] = row_lse;
  }
}

// 64-byte aligned scratch of one call, freed on scope exit.
struct CallScratch {
  void* p = nullptr;
  ~CallScratch() { AlignedFree(p); }
};

}  // namespace

Status DecodeKvS8(const TensorView& out, const TensorView& lse, const TensorView& q,
                  std::span<const KvCacheS8Seq> seqs, const KvCacheS8Layout& L,
                  const DecodeS8Options& opt, DecodeS8Choice* choice) {
  double scale = 0;
  ATTNFLOW_RETURN_IF_ERROR(Validate(out, lse, q, seqs, L, opt, &scale));
  const int64_t B = q.shape[0], H = q.shape[1], Hkv = L.num_kv_heads;
  const int64_t D = L.head_dim, Dv = L.v_dim;
  const int64_t G = H / Hkv;

  // The plan: depends on the shape, the lengths and the target only.
  int64_t target = 0, lanes = 1;
  kernels::GetS8TargetInfo(&target, &lanes);
  PlanS8 pl;
  pl.lanes = lanes;
  pl.dp = RoundUp(D, lanes);
  pl.pack_k = D % lanes != 0;
  std::vector<int64_t> first(static_cast<size_t>(B)), nvis(static_cast<size_t>(B));
  int64_t max_n = 0;
  double keys = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = VisibleS8(seqs[static_cast<size_t>(b)].length, L);
    nvis[static_cast<size_t>(b)] = n;
    first[static_cast<size_t>(b)] = seqs[static_cast<size_t>(b)].length - n;
    max_n = std::max(max_n, n);
    keys += static_cast<double>(n);
  }
  const int64_t bh = B * Hkv;
  int64_t split_len;
  if (opt.split_kv > 0) {
    split_len = RoundUp(std::min(opt.split_kv, std::max<int64_t>(max_n, 1)), lanes);
  } else {
    const int64_t want = std::max<int64_t>(1, CeilDiv(kTargetTasks, std::max<int64_t>(bh, 1)));
    split_len = std::max(kMinSplit, RoundUp(CeilDiv(std::max<int64_t>(max_n, 1), want), kMinSplit));
  }
  pl.split_len = split_len;
  const int64_t tile_cap = std::max(kMinSplit, kMaxTileScores / std::max<int64_t>(G, 1) / kMinSplit * kMinSplit);
  pl.tkv = std::min({kMaxTileKeys, tile_cap, split_len});
  pl.n_splits = std::max<int64_t>(1, CeilDiv(max_n, split_len));
  pl.num_tasks = bh * pl.n_splits;
  pl.partial_floats = static_cast<size_t>(RoundUp(G * Dv + 2 * G, 16));
  const double flops = 2.0 * static_cast<double>(H) * keys * static_cast<double>(D + Dv);
  const bool run_inline = flops <= kInlineMaxFlops;
  if (choice != nullptr) {
    DecodeS8Choice& ch = *choice;
    ch = DecodeS8Choice{};
    ch.simd_target = hwy::TargetName(target);
    ch.tile_kv = pl.tkv;
    ch.num_splits = pl.n_splits;
    ch.num_tasks = pl.num_tasks;
    ch.reason = "G=" + std::to_string(G) + " query head(s) per kv head share each cache byte; K rows "
                "[Hkv, capacity, D] and V columns [Hkv, Dv, capacity] int8, converted to fp32 on "
                "load (" + std::to_string(lanes) + " fp32 lanes" +
                (pl.pack_k ? ", K tiles copied zero-padded: D=" + std::to_string(D) +
                                 " is not a multiple of the lanes"
                           : std::string()) +
                "); " + CountOf(pl.n_splits, "split") + " of " + CountOf(split_len, "key") +
                " (fixed by shape and lengths), tiles of " + CountOf(pl.tkv, "key") +
                ", merged by log-sum-exp in split order; " + CountOf(pl.num_tasks, "task") +
                (run_inline ? "; tiny call (<= 2^19 FLOP): its tasks run on the calling thread"
                            : "");
  }
  if (B == 0 || H == 0) return Status::Ok();

  ThreadPool& pool = opt.pool != nullptr ? *opt.pool : DefaultPool();
  const size_t workers = static_cast<size_t>(std::max(pool.NumWorkers(), 1));
  const size_t align = 64;
  auto a64 = [&](double bytes) { return std::ceil(bytes / align) * align; };
  const double worker_bytes = a64(4.0 * static_cast<double>(G * pl.tkv)) +
                              a64(4.0 * static_cast<double>(G)) +
                              (pl.pack_k ? a64(static_cast<double>(pl.tkv * pl.dp)) : 0.0) + align;
  const double qs_bytes = a64(4.0 * static_cast<double>(B * H) * static_cast<double>(pl.dp));
  const double part_bytes = a64(4.0 * static_cast<double>(pl.num_tasks) *
                                static_cast<double>(pl.partial_floats));
  const double total = qs_bytes + part_bytes + static_cast<double>(workers) * worker_bytes;
  if (!(total < 0x1p46)) {
    return ResourceExhausted(Join("scratch size overflows for q " + q.shape_string() + ", " +
                                  LayoutString(L)));
  }
  pl.worker_bytes = static_cast<size_t>(worker_bytes);
  CallScratch mem;
  mem.p = AlignedAlloc(static_cast<size_t>(total));
  if (mem.p == nullptr) {
    return ResourceExhausted(Join("cannot allocate " + std::to_string(static_cast<int64_t>(total)) +
                                  " bytes of kernel scratch for q " + q.shape_string() + ", " +
                                  LayoutString(L)));
  }
  char* bytes = static_cast<char*>(mem.p);
  float* qs = reinterpret_cast<float*>(bytes);
  float* partials = reinterpret_cast<float*>(bytes + static_cast<size_t>(qs_bytes));
  char* worker_base = bytes + static_cast<size_t>(qs_bytes + part_bytes);

  // Pre-scaled query rows (one rounding from double) and the rows that take
  // the double path.
  std::vector<uint8_t> recompute(static_cast<size_t>(B * H), 0);
  std::vector<float> saved_q;  // the flagged rows' q, in flag order
  const size_t dp = static_cast<size_t>(pl.dp);
  bool any_recompute = false;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float* dst = qs + static_cast<size_t>(b * H + h) * dp;
      std::fill(dst, dst + dp, 0.0f);
      if (nvis[static_cast<size_t>(b)] == 0) continue;
      const int64_t g = h / G;
      const double f = scale * kLog2e * static_cast<double>(seqs[static_cast<size_t>(b)].k_scale[g]);
      const float* qrow = static_cast<const float*>(q.data) + b * q.strides[0] + h * q.strides[1];
      double bound = 0.0;
      bool finite = true;
      for (int64_t d = 0; d < D; ++d) {
        const double x = static_cast<double>(qrow[d * q.strides[3]]) * f;
        finite = finite && std::isfinite(x);
        bound += std::fabs(x);
        dst[d] = static_cast<float>(x);
      }
      if (!finite || !(bound * 128.0 < kMaxScoreBound)) {
        recompute[static_cast<size_t>(b * H + h)] = 1;
        any_recompute = true;
        for (int64_t d = 0; d < D; ++d) saved_q.push_back(qrow[d * q.strides[3]]);
        std::fill(dst, dst + dp, 0.0f);
      }
    }
  }

  const ProblemS8 P{.B = B,
                    .H = H,
                    .Hkv = Hkv,
                    .G = G,
                    .D = D,
                    .Dv = Dv,
                    .cap = L.capacity,
                    .seqs = seqs.data(),
                    .first = first.data(),
                    .n = nvis.data(),
                    .qs = qs};

  std::vector<std::atomic<int64_t>> done(static_cast<size_t>(bh));
  for (auto& c : done) c.store(0, std::memory_order_relaxed);
  auto task_fn = [&](int64_t task, int worker) {
    kernels::RunDecodeS8Split(P, pl, task, worker_base + static_cast<size_t>(worker) * pl.worker_bytes,
                              partials + static_cast<size_t>(task) * pl.partial_floats);
    const int64_t bg = task / pl.n_splits;
    if (done[static_cast<size_t>(bg)].fetch_add(1, std::memory_order_acq_rel) == pl.n_splits - 1) {
      MergeS8(P, pl, bg, partials, recompute.data(), out, lse);
    }
  };
  if (run_inline) {
    for (int64_t t = 0; t < pl.num_tasks; ++t) task_fn(t, 0);
  } else {
    pool.ParallelFor(pl.num_tasks, task_fn);
  }
  if (any_recompute) {
    const float* qsaved = saved_q.data();
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        if (!recompute[static_cast<size_t>(b * H + h)]) continue;
        const float* qrow = qsaved;
        qsaved += D;
        ATTNFLOW_RETURN_IF_ERROR(RecomputeRow(out, lse, qrow, seqs[static_cast<size_t>(b)], L,
                                              first[static_cast<size_t>(b)],
                                              nvis[static_cast<size_t>(b)], b, h, H, scale));
      }
    }
  }
  return Status::Ok();
}

}  // namespace attnflow
