// ring.cc — ring (context-parallel) prefill and sharded decode over MPI.
//
// Invariants (see include/attnflow/dist.h and docs/distributed.md):
//  * Partials are merged only through the LSE (MergeAttentionStates) into an
//    accumulator that starts at (out 0, lse -inf); merging into that start is
//    exact, so the result is the fold of the partials in a FIXED order:
//    prefill by ring step (block of rank r, r-1, ...), then by local query
//    chunk, then by key chunk; decode by rank 0..P-1.
//  * Causal blocks: the global rule j <= i + off (off = 0 top_left,
//    kv_len - q_len bottom_right) is mapped onto a (query chunk, key chunk)
//    pair as dead rows (skipped), partial rows (a bottom_right call on a key
//    prefix) and full rows (no mask); see BlockPartial.
//  * Every MPI wait is bounded by RingOptions::timeout_s of idle waiting; all
//    collectives are non-blocking (MPI_I*) so that a missing rank cannot hang
//    a caller either. Only the calling thread touches MPI.
//  * K/V travel as raw bytes (F32/F16/BF16 unchanged): K then V, contiguous.
//  * A ring step computes on a helper thread while this thread drives MPI;
//    when no thread can be started it computes inline (same result, no
//    overlap), never std::terminate.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "attnflow/dist.h"

namespace attnflow::dist {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Query rows per partial-result tile (bounds the scratch to
// B*H*kRowTile*(Dv+1) floats).
constexpr int64_t kRowTile = 2048;
// Largest single MPI message (bytes); bigger blocks go as several messages.
constexpr int64_t kMaxMessage = int64_t{1} << 30;

// Polls `reqs` until all complete and busy() is false. The idle timeout starts
// once busy() turns false (compute finished): a slow kernel never counts as a
// communication timeout. Returns kInternal naming `what` on timeout or an MPI
// error.
Status WaitAll(std::vector<MPI_Request>* reqs, double timeout_s,
               const std::function<bool()>& busy, const std::string& what,
               double* comm_done_s = nullptr, Clock::time_point t0 = {}) {
  bool comm_done = reqs->empty();
  if (comm_done && comm_done_s) *comm_done_s = 0;
  Clock::time_point idle_since = Clock::now();
  bool was_busy = true;
  int sleep_us = 5;
  while (true) {
    if (!comm_done) {
      int flag = 0;
      const int rc = MPI_Testall(static_cast<int>(reqs->size()), reqs->data(), &flag,
                                 MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        return Status(StatusCode::kInternal, what + ": MPI error: " + std::string(msg, len));
      }
      if (flag) {
        comm_done = true;
        if (comm_done_s) *comm_done_s = Seconds(t0, Clock::now());
      }
    }
    const bool b = busy ? busy() : false;
    if (comm_done && !b) return Status::Ok();
    if (b) {
      sleep_us = 5;
    } else {
      if (was_busy) {
        idle_since = Clock::now();
        was_busy = false;
      }
      if (Seconds(idle_since, Clock::now()) > timeout_s) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%g", timeout_s);
        return Status(StatusCode::kInternal,
                      what + ": no message within " + buf +
                          " s (a peer rank died, stalled or skipped the call)");
      }
      sleep_us = std::min(sleep_us * 2, 1000);
    }
    if (!b && Seconds(idle_since, Clock::now()) < 0.02) {
      std::this_thread::yield();  // waiting only: poll tightly, but let co-located ranks run
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(b ? 50 : sleep_us));
    }
  }
}

TensorView SliceDim(TensorView t, int dim, int64_t start, int64_t len) {
  if (t.strides[dim] != 0 || t.shape[dim] != 1) {
    t.data = static_cast<char*>(t.data) +
             start * t.strides[dim] * static_cast<int64_t>(DTypeSize(t.dtype));
  }
  t.shape[dim] = len;
  return t;
}

// Contiguous row-major view of `shape` over data with a row stride of `rows`
// along dim 2 (for reusing max-size scratch for smaller chunks).
TensorView ScratchView(float* data, int64_t b, int64_t h, int64_t rows_cap,
                       int64_t rows, int64_t d) {
  if (d < 0) {  // rank 3 [B,H,rows]
    return MakeStridedView(data, DType::kF32, {b, h, rows}, {h * rows_cap, rows_cap, 1});
  }
  return MakeStridedView(data, DType::kF32, {b, h, rows, d},
                         {h * rows_cap * d, rows_cap * d, d, 1});
}

void Fill(const TensorView& t, float value) {
  for (int64_t i0 = 0; i0 < t.shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < t.shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < t.shape[2]; ++i2) {
        if (t.rank == 3) {
          t.ptr<float>()[t.offset(i0, i1, i2)] = value;
        } else {
          for (int64_t i3 = 0; i3 < t.shape[3]; ++i3)
            t.ptr<float>()[t.offset(i0, i1, i2, i3)] = value;
        }
      }
}

// Copies a [B,Hkv,L,D] view of any strides into contiguous bytes at dst.
void Pack(char* dst, const TensorView& t) {
  const size_t es = DTypeSize(t.dtype);
  const char* src = static_cast<const char*>(t.data);
  for (int64_t b = 0; b < t.shape[0]; ++b)
    for (int64_t h = 0; h < t.shape[1]; ++h)
      for (int64_t j = 0; j < t.shape[2]; ++j) {
        if (t.strides[3] == 1) {
          std::memcpy(dst, src + t.offset(b, h, j) * es, t.shape[3] * es);
          dst += t.shape[3] * es;
        } else {
          for (int64_t c = 0; c < t.shape[3]; ++c) {
            std::memcpy(dst, src + t.offset(b, h, j, c) * es, es);
            dst += es;
          }
        }
      }
}

int64_t KvLenOf(const TensorView& kl, int64_t b) {
  return kl.dtype == DType::kI32 ? kl.ptr<int32_t>()[kl.offset(b)]
                                 : kl.ptr<int64_t>()[kl.offset(b)];
}

struct Problem {
  int64_t batch, num_heads, num_kv_heads, head_dim, v_dim, q_len, kv_len;
  Causal causal;
  double scale;
  TensorView mask4;    // broadcast to [B,H,Lq_local,kv_len], or absent
  TensorView kv_lens;  // global, or absent
  KernelOptions kopt;
};

// Partial attention of one query chunk (rows `q_rows` of the local q, global
// start qs) against one key chunk (k/v views of lk keys, global start ks).
// Writes out_t/lse_t rows [0,lq) (row stride = scratch capacity) and returns
// the first live row (rows before it see no key; their scratch is untouched
// and they must not be merged). Returns lq (nothing live) to skip the block.
Status BlockPartial(const Problem& p, const TensorView& q_rows, int64_t qs,
                    int64_t mask_row0, const TensorView& kc, const TensorView& vc,
                    int64_t ks, float* out_s, float* lse_s, int64_t rows_cap,
                    std::vector<int64_t>* kvl_scratch, int64_t* first_live) {
  const int64_t lq = q_rows.shape[2], lk = kc.shape[2];
  *first_live = lq;
  if (lq == 0 || lk == 0) return Status::Ok();
  int64_t nd = 0, nf = 0;  // dead rows [0,nd), partial [nd,nf), full [nf,lq)
  int64_t delta = 0;
  if (p.causal != Causal::kNone) {
    const int64_t off = p.causal == Causal::kBottomRight ? p.kv_len - p.q_len : 0;
    delta = qs + off - ks;
    nd = std::clamp<int64_t>(-delta, 0, lq);
    nf = std::max(nd, std::clamp<int64_t>(lk - 1 - delta, 0, lq));
  }
  if (nd == lq) return Status::Ok();
  *first_live = nd;
  auto run = [&](int64_t r0, int64_t r1, int64_t keys, Causal c) -> Status {
    if (r1 <= r0) return Status::Ok();
    SdpaOptions o;
    o.causal = c;
    o.scale = p.scale;
    if (!p.kv_lens.empty_view()) {
      kvl_scratch->resize(p.batch);
      for (int64_t b = 0; b < p.batch; ++b)
        (*kvl_scratch)[b] = std::clamp<int64_t>(KvLenOf(p.kv_lens, b) - ks, 0, keys);
      o.kv_lens = MakeView(kvl_scratch->data(), DType::kI64, {p.batch});
    }
    if (!p.mask4.empty_view()) {
      o.attn_mask = SliceDim(SliceDim(p.mask4, 2, mask_row0 + r0, r1 - r0), 3, ks, keys);
    }
    const TensorView qv = SliceDim(q_rows, 2, r0, r1 - r0);
    const TensorView kv = SliceDim(kc, 2, 0, keys), vv = SliceDim(vc, 2, 0, keys);
    const TensorView ov = SliceDim(
        ScratchView(out_s, p.batch, p.num_heads, rows_cap, lq, p.v_dim), 2, r0, r1 - r0);
    const TensorView lv =
        SliceDim(ScratchView(lse_s, p.batch, p.num_heads, rows_cap, lq, -1), 2, r0, r1 - r0);
    return Attention(ov, lv, qv, kv, vv, o, p.kopt);
  };
  if (p.causal != Causal::kNone && nf > nd) {
    ATTNFLOW_RETURN_IF_ERROR(run(nd, nf, nf + delta, Causal::kBottomRight));
  }
  return run(nf, lq, lk, Causal::kNone);
}

struct Header {  // global parameters every rank must agree on
  int64_t v[14];
};
const char* kHeaderNames[14] = {"batch",     "num_heads", "num_kv_heads", "head_dim",
                                "v_dim",     "q_len",     "kv_len",       "k dtype",
                                "causal",    "layout",    "scale",        "has attn_mask",
                                "kv_lens",   "q_len (replicated)"};

std::string RankPrefix(const char* op, int rank, int p) {
  return std::string(op) + " (rank " + std::to_string(rank) + " of " + std::to_string(p) + ")";
}

Status CheckAgreement(MPI_Comm comm, const char* op, const Header& h, double timeout_s) {
  int p = 0;
  MPI_Comm_size(comm, &p);
  std::vector<Header> all(p);
  std::vector<MPI_Request> req(1);
  MPI_Iallgather(&h, sizeof(Header), MPI_BYTE, all.data(), sizeof(Header), MPI_BYTE, comm,
                 &req[0]);
  ATTNFLOW_RETURN_IF_ERROR(
      WaitAll(&req, timeout_s, nullptr, std::string(op) + ": argument agreement"));
  for (int r = 1; r < p; ++r)
    for (int i = 0; i < 14; ++i)
      if (all[r].v[i] != all[0].v[i]) {
        return InvalidArgument(std::string(op) + ": rank " + std::to_string(r) +
                               " disagrees with rank 0 on " + kHeaderNames[i] + " (" +
                               std::to_string(all[r].v[i]) + " vs " +
                               std::to_string(all[0].v[i]) + ")");
      }
  return Status::Ok();
}

int64_t HashKvLens(const TensorView& kl) {
  if (kl.empty_view() || kl.rank != 1) return -1;
  uint64_t h = 1469598103934665603ull;
  for (int64_t b = 0; b < kl.shape[0]; ++b) {
    h ^= static_cast<uint64_t>(KvLenOf(kl, b));
    h *= 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

// Local validation shared by prefill and decode. k/v have `lk_local` keys;
// the check runs ValidateSdpa on k/v views stretched (stride 0) to the
// global kv_len so that mask and kv_lens are checked against global sizes.
Status ValidateLocal(const char* op, int rank, int p, const TensorView& out,
                     const TensorView& lse, const TensorView& q, const TensorView& k,
                     const TensorView& v, const SdpaOptions& opt, int64_t q_len_local,
                     int64_t kv_len, int64_t lk_local, SdpaDims* dims) {
  const std::string pre = RankPrefix(op, rank, p);
  if (opt.window_left >= 0 || opt.window_right >= 0 || !opt.alibi_slopes.empty_view()) {
    return Unimplemented(std::string(op) +
                         ": sliding windows and ALiBi are not supported across ranks");
  }
  if (opt.softcap != 0.0 || opt.kv_align != KvAlign::kPadded) {
    return Unimplemented(std::string(op) +
                         ": softcap and per-sequence diagonal alignment are not supported "
                         "across ranks");
  }
  if (q.rank != 4 || k.rank != 4 || v.rank != 4) {
    return InvalidArgument(pre + ": q/k/v must be rank 4, got q " + q.describe() + ", k " +
                           k.describe() + ", v " + v.describe());
  }
  if (q.dtype != DType::kF32) {
    return InvalidArgument(pre + ": q must be F32, got " + q.describe());
  }
  if (k.dtype != v.dtype ||
      (k.dtype != DType::kF32 && k.dtype != DType::kF16 && k.dtype != DType::kBF16)) {
    return InvalidArgument(pre + ": k/v must both be F32, F16 or BF16, got k " +
                           k.describe() + ", v " + v.describe());
  }
  if (q.shape[2] != q_len_local || k.shape[2] != lk_local || v.shape[2] != lk_local) {
    return InvalidArgument(pre + ": local shard is q " + q.shape_string() + ", k " +
                           k.shape_string() + ", v " + v.shape_string() +
                           "; expected Lq=" + std::to_string(q_len_local) +
                           " and Lk=" + std::to_string(lk_local) + " on this rank");
  }
  if (out.empty_view()) return InvalidArgument(pre + ": out is required");
  if (out.dtype != DType::kF32 || (!lse.empty_view() && lse.dtype != DType::kF32)) {
    return InvalidArgument(pre + ": out/lse must be F32, got out " + out.describe() +
                           ", lse " + lse.describe());
  }
  static char dummy[16];
  TensorView kg = k, vg = v;
  kg.shape[2] = vg.shape[2] = kv_len;
  kg.strides[2] = vg.strides[2] = 0;
  if (kg.data == nullptr) kg.data = dummy;
  if (vg.data == nullptr) vg.data = dummy;
  return ValidateSdpa(op, out, lse, q, kg, vg, opt, dims);
}

Header MakeHeader(const SdpaDims& d, const TensorView& k, const SdpaOptions& opt,
                  int64_t q_len, int64_t kv_len, Layout layout, int64_t extra) {
  Header h{};
  double sc = std::isnan(opt.scale) ? -1.0 : opt.scale;
  int64_t scb;
  std::memcpy(&scb, &sc, 8);
  const int64_t v[14] = {d.batch, d.num_heads, d.num_kv_heads, d.head_dim, d.v_dim,
                         q_len, kv_len, static_cast<int64_t>(k.dtype),
                         static_cast<int64_t>(opt.causal), static_cast<int64_t>(layout), scb,
                         opt.attn_mask.empty_view() ? 0 : 1, HashKvLens(opt.kv_lens), extra};
  std::memcpy(h.v, v, sizeof v);
  return h;
}

// Rows of a [B,H,L,*] F32 view, as a view.
TensorView Rows(const TensorView& t, int64_t r0, int64_t n) { return SliceDim(t, 2, r0, n); }

}  // namespace

const char* LayoutName(Layout l) {
  return l == Layout::kZigzag ? "zigzag" : "contiguous";
}
bool ParseLayout(const std::string& s, Layout* out) {
  if (s == "zigzag") *out = Layout::kZigzag;
  else if (s == "contiguous") *out = Layout::kContiguous;
  else return false;
  return true;
}

std::vector<Range> SequenceShard(Layout layout, int64_t len, int rank, int num_ranks) {
  const int64_t n = layout == Layout::kZigzag ? 2 * num_ranks : num_ranks;
  auto chunk = [&](int64_t c) {
    const int64_t base = len / n, rem = len % n;
    const int64_t begin = c * base + std::min(c, rem);
    return Range{begin, begin + base + (c < rem ? 1 : 0)};
  };
  if (layout == Layout::kZigzag) return {chunk(rank), chunk(n - 1 - rank)};
  return {chunk(rank)};
}

Result<Tensor> ShardRows(const TensorView& global, Layout layout, int rank, int num_ranks) {
  if (global.rank != 3 && global.rank != 4) {
    return InvalidArgument("shard_rows: expected a rank 3 or 4 view, got " + global.describe());
  }
  const std::vector<Range> chunks = SequenceShard(layout, global.shape[2], rank, num_ranks);
  int64_t n = 0;
  for (const Range& c : chunks) n += c.size();
  Shape shape(global.shape.begin(), global.shape.begin() + global.rank);
  shape[2] = n;
  Result<Tensor> t = Tensor::Zeros(global.dtype, shape);
  if (!t.ok()) return t;
  const size_t es = DTypeSize(global.dtype);
  const int64_t inner = global.rank == 4 ? global.shape[3] : 1;
  char* dst = t->data<char>();
  for (int64_t a = 0; a < global.shape[0]; ++a)
    for (int64_t b = 0; b < global.shape[1]; ++b)
      for (const Range& c : chunks)
        for (int64_t i = c.begin; i < c.end; ++i)
          for (int64_t j = 0; j < inner; ++j) {
            const int64_t off = global.rank == 4 ? global.offset(a, b, i, j) : global.offset(a, b, i);
            std::memcpy(dst, static_cast<const char*>(global.data) + off * es, es);
            dst += es;
          }
  return t;
}

Status GatherRows(MPI_Comm comm, Tensor* global, const TensorView& local, Layout layout,
                  int64_t len, int root, double timeout_s) {
  int rank = 0, p = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &p);
  *global = Tensor();
  Status st;
  const std::string pre = "gather_rows (rank " + std::to_string(rank) + " of " +
                          std::to_string(p) + ")";
  if (local.rank != 3 && local.rank != 4) {
    st = InvalidArgument(pre + ": expected a rank 3 or 4 view, got " + local.describe());
  } else if (local.dtype != DType::kF32) {
    st = InvalidArgument(pre + ": expected F32, got " + local.describe());
  } else if (root < 0 || root >= p || len < 0 ||
             local.shape[2] != ShardLength(layout, len, rank, p)) {
    st = InvalidArgument(pre + ": local rows " + local.describe() + " are not this rank's " +
                         std::to_string(len < 0 ? 0 : ShardLength(layout, len, rank, p)) +
                         " of " + std::to_string(len) + " (" + LayoutName(layout) +
                         "), or root " + std::to_string(root) + " is not a rank");
  }
  const int64_t a = local.rank >= 3 ? local.shape[0] : 0, b = local.rank >= 3 ? local.shape[1] : 0;
  const int64_t inner = local.rank == 4 ? local.shape[3] : 1;
  // Every count must fit MPI's int.
  if (st.ok() && static_cast<double>(a) * b * len * inner > std::numeric_limits<int>::max()) {
    st = InvalidArgument(pre + ": " + std::to_string(len) + " rows of " + local.describe() +
                         " are too many elements to gather in one message");
  }
  Result<Tensor> mine = Tensor();
  if (st.ok()) {
    mine = Tensor::FromView(local);  // contiguous
    if (!mine.ok()) st = mine.status();
  }
  ATTNFLOW_RETURN_IF_ERROR(AgreeOnStatus(comm, st, timeout_s));
  std::vector<int> counts(p), displs(p);
  for (int r = 0, off = 0; r < p; ++r) {
    counts[r] = static_cast<int>(a * b * ShardLength(layout, len, r, p) * inner);
    displs[r] = off;
    off += counts[r];
  }
  std::vector<float> all;
  if (rank == root) all.resize(static_cast<size_t>(std::max<int64_t>(1, a * b * len * inner)));
  std::vector<MPI_Request> req(1);
  MPI_Igatherv(mine->numel() > 0 ? mine->data<float>() : nullptr, counts[rank], MPI_FLOAT,
               all.data(), counts.data(), displs.data(), MPI_FLOAT, root, comm, &req[0]);
  ATTNFLOW_RETURN_IF_ERROR(WaitAll(&req, timeout_s, nullptr, pre + ": gather of the rows"));
  if (rank != root) return Status::Ok();
  Shape shape(local.shape.begin(), local.shape.begin() + local.rank);
  shape[2] = len;
  Result<Tensor> g = Tensor::Zeros(DType::kF32, shape);
  ATTNFLOW_RETURN_IF_ERROR(g.status());
  float* dst = g->data<float>();
  for (int r = 0; r < p; ++r) {
    const int64_t lr = ShardLength(layout, len, r, p);
    const float* src = all.data() + displs[r];
    for (int64_t i = 0; i < a; ++i)
      for (int64_t j = 0; j < b; ++j) {
        int64_t row = 0;  // local row within rank r's shard
        for (const Range& c : SequenceShard(layout, len, r, p))
          for (int64_t gi = c.begin; gi < c.end; ++gi, ++row) {
            std::memcpy(dst + ((i * b + j) * len + gi) * inner,
                        src + ((i * b + j) * lr + row) * inner, sizeof(float) * inner);
          }
      }
  }
  *global = std::move(g).value();
  return Status::Ok();
}

int64_t ShardLength(Layout layout, int64_t len, int rank, int num_ranks) {
  int64_t s = 0;
  for (const Range& r : SequenceShard(layout, len, rank, num_ranks)) s += r.size();
  return s;
}

double RingStats::HiddenShare() const {
  double comm = 0, exposed = 0;
  for (const StepStats& s : steps) {
    comm += s.comm_s;
    exposed += s.exposed_s;
  }
  return comm > 0 ? std::max(0.0, 1.0 - exposed / comm) : 1.0;
}

int64_t VisiblePairs(Causal causal, int64_t q_len, int64_t kv_len,
                     const std::vector<Range>& q_chunks, const std::vector<Range>& k_chunks) {
  int64_t total = 0;
  const int64_t off = causal == Causal::kBottomRight ? kv_len - q_len : 0;
  for (const Range& qc : q_chunks)
    for (const Range& kc : k_chunks)
      for (int64_t i = qc.begin; i < qc.end; ++i) {
        const int64_t last = causal == Causal::kNone ? kc.end - 1 : std::min(kc.end - 1, i + off);
        if (last >= kc.begin) total += last - kc.begin + 1;
      }
  return total;
}

Status WaitRequests(std::vector<MPI_Request>* reqs, double timeout_s, const std::string& what) {
  return WaitAll(reqs, timeout_s, nullptr, what);
}

Status AgreeOnStatus(MPI_Comm comm, const Status& st, double timeout_s) {
  int rank = 0, p = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &p);
  int mine = st.ok() ? p : rank, first = p;
  std::vector<MPI_Request> req(1);
  MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm, &req[0]);
  ATTNFLOW_RETURN_IF_ERROR(WaitAll(&req, timeout_s, nullptr, "dist: status agreement"));
  if (first == p) return Status::Ok();
  // Broadcast code + message of the first failing rank.
  std::string msg = rank == first ? st.message() : std::string();
  int64_t hdr[2] = {static_cast<int64_t>(st.code()), static_cast<int64_t>(msg.size())};
  MPI_Ibcast(hdr, 2, MPI_INT64_T, first, comm, &req[0]);
  ATTNFLOW_RETURN_IF_ERROR(WaitAll(&req, timeout_s, nullptr, "dist: status agreement"));
  msg.resize(hdr[1]);
  MPI_Ibcast(msg.data(), static_cast<int>(hdr[1]), MPI_CHAR, first, comm, &req[0]);
  ATTNFLOW_RETURN_IF_ERROR(WaitAll(&req, timeout_s, nullptr, "dist: status agreement"));
  return Status(static_cast<StatusCode>(hdr[0]), msg);
}

Status RingAttention(MPI_Comm comm, const TensorView& out, const TensorView& lse,
                     const TensorView& q, const TensorView& k, const TensorView& v,
                     const SdpaOptions& opt, int64_t q_len, int64_t kv_len,
                     const RingOptions& ropt, RingStats* stats) {
  constexpr const char* kOp = "ring_attention";
  const auto t_start = Clock::now();
  int rank = 0, p = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &p);
  const Layout layout = ropt.layout;
  SdpaDims dims{};
  Status st;
  if (q_len < 0 || kv_len < 0) {
    st = InvalidArgument(std::string(kOp) + ": q_len " + std::to_string(q_len) +
                         " and kv_len " + std::to_string(kv_len) + " must be >= 0");
  } else {
    st = ValidateLocal(kOp, rank, p, out, lse, q, k, v, opt,
                       ShardLength(layout, q_len, rank, p), kv_len,
                       ShardLength(layout, kv_len, rank, p), &dims);
  }
  ATTNFLOW_RETURN_IF_ERROR(AgreeOnStatus(comm, st, ropt.timeout_s));
  ATTNFLOW_RETURN_IF_ERROR(CheckAgreement(
      comm, kOp, MakeHeader(dims, k, opt, q_len, kv_len, layout, 0), ropt.timeout_s));

  Problem pb{dims.batch, dims.num_heads, dims.num_kv_heads, dims.head_dim, dims.v_dim,
             q_len,      kv_len,         opt.causal,        dims.scale,    {},
             opt.kv_lens, ropt.kopt};
  const int64_t lq_local = q.shape[2];
  if (!opt.attn_mask.empty_view()) {
    const int64_t target[4] = {dims.batch, dims.num_heads, lq_local, kv_len};
    BroadcastMask(opt.attn_mask, target, &pb.mask4);  // validated above
  }
  const size_t es = DTypeSize(k.dtype);
  const int64_t B = dims.batch, Hkv = dims.num_kv_heads, D = dims.head_dim, Dv = dims.v_dim;
  auto block_bytes = [&](int src) {
    return B * Hkv * ShardLength(layout, kv_len, src, p) * (D + Dv) * static_cast<int64_t>(es);
  };
  int64_t max_bytes = 0, max_rows = 0;
  for (int r = 0; r < p; ++r) max_bytes = std::max(max_bytes, block_bytes(r));
  const std::vector<Range> q_chunks = SequenceShard(layout, q_len, rank, p);
  // Query rows are processed in tiles of at most kRowTile rows so that the
  // partial (out, lse) scratch stays small whatever the shard size.
  const int64_t row_tile = ropt.row_tile > 0 ? ropt.row_tile : kRowTile;
  std::vector<Range> q_tiles;
  for (const Range& c : q_chunks)
    for (int64_t b = c.begin; b < c.end; b += row_tile)
      q_tiles.push_back({b, std::min(c.end, b + row_tile)});
  for (const Range& c : q_tiles) max_rows = std::max(max_rows, c.size());

  // Scratch: two K/V buffers (held + in flight), one partial (out, lse), the
  // accumulator lse when the caller did not ask for one.
  // With one rank there is no ring: compute on the caller's k/v, no buffers.
  const int64_t buf_bytes = p > 1 ? std::max<int64_t>(max_bytes, 1) : 1;
  auto buf_a = Tensor::Zeros(DType::kU8, {buf_bytes});
  auto buf_b = Tensor::Zeros(DType::kU8, {buf_bytes});
  auto part_out = Tensor::Zeros(DType::kF32, {std::max<int64_t>(B * dims.num_heads * max_rows * Dv, 1)});
  auto part_lse = Tensor::Zeros(DType::kF32, {std::max<int64_t>(B * dims.num_heads * max_rows, 1)});
  Result<Tensor> own_lse = Tensor();
  if (lse.empty_view()) own_lse = Tensor::Zeros(DType::kF32, {B, dims.num_heads, lq_local});
  Status alloc = Status::Ok();
  for (auto* t : {&buf_a, &buf_b, &part_out, &part_lse, &own_lse})
    if (!t->ok()) alloc = t->status();
  ATTNFLOW_RETURN_IF_ERROR(AgreeOnStatus(comm, alloc, ropt.timeout_s));
  const TensorView acc_lse = lse.empty_view() ? own_lse->view() : lse;
  Fill(out, 0.0f);
  Fill(acc_lse, -INFINITY);

  char* cur = buf_a->data<char>();
  char* nxt = buf_b->data<char>();
  if (p > 1) {
    Pack(cur, k);
    Pack(cur + B * Hkv * k.shape[2] * D * es, v);
  }
  const int next_rank = (rank + 1) % p, prev_rank = (rank - 1 + p) % p;
  std::vector<int64_t> kvl_scratch;
  RingStats local;
  local.steps.resize(p);
  for (int s = 0; s < p; ++s) {
    const auto t_step = Clock::now();
    const int src = (rank - s + p) % p;  // whose block we hold
    const int64_t lk_src = ShardLength(layout, kv_len, src, p);
    std::vector<MPI_Request> reqs;
    int64_t sent = 0;
    if (s + 1 < p) {
      // Receive the block of rank (src - 1), send ours on.
      const int incoming = (src - 1 + p) % p;
      const int64_t in_bytes = block_bytes(incoming), out_bytes = block_bytes(src);
      for (int64_t o = 0; o < in_bytes; o += kMaxMessage) {
        reqs.emplace_back();
        MPI_Irecv(nxt + o, static_cast<int>(std::min(kMaxMessage, in_bytes - o)), MPI_BYTE,
                  prev_rank, s, comm, &reqs.back());
      }
      for (int64_t o = 0; o < out_bytes; o += kMaxMessage) {
        reqs.emplace_back();
        MPI_Isend(cur + o, static_cast<int>(std::min(kMaxMessage, out_bytes - o)), MPI_BYTE,
                  next_rank, s, comm, &reqs.back());
      }
      sent = out_bytes;
    }
    // Compute on the held block (on a helper thread while this one drives MPI).
    Status compute_st;
    double compute_s = 0;
    auto compute = [&]() {
      const auto tc = Clock::now();
      if (ropt.skip_compute) return;
      const TensorView kb = p == 1 ? k : MakeView(cur, k.dtype, {B, Hkv, lk_src, D});
      const TensorView vb =
          p == 1 ? v : MakeView(cur + B * Hkv * lk_src * D * es, k.dtype, {B, Hkv, lk_src, Dv});
      int64_t q_row = 0;
      for (const Range& qc : q_tiles) {
        const TensorView q_rows = Rows(q, q_row, qc.size());
        int64_t k_row = 0;
        for (const Range& kc : SequenceShard(layout, kv_len, src, p)) {
          int64_t first = 0;
          Status bs = BlockPartial(pb, q_rows, qc.begin, q_row, Rows(kb, k_row, kc.size()),
                                   Rows(vb, k_row, kc.size()), kc.begin,
                                   part_out->data<float>(), part_lse->data<float>(), max_rows,
                                   &kvl_scratch, &first);
          if (!bs.ok()) { compute_st = bs; return; }
          const int64_t live = qc.size() - first;
          if (live > 0) {
            const TensorView po = Rows(ScratchView(part_out->data<float>(), B, dims.num_heads,
                                                   max_rows, qc.size(), Dv), first, live);
            const TensorView pl = Rows(ScratchView(part_lse->data<float>(), B, dims.num_heads,
                                                   max_rows, qc.size(), -1), first, live);
            const TensorView ao = Rows(out, q_row + first, live);
            const TensorView al = Rows(acc_lse, q_row + first, live);
            bs = MergeAttentionStates(ao, al, ao, al, po, pl);
            if (!bs.ok()) { compute_st = bs; return; }
          }
          k_row += kc.size();
        }
        q_row += qc.size();
      }
      compute_s = Seconds(tc, Clock::now());
    };
    double comm_done = 0;
    const auto t_post = Clock::now();
    if (reqs.empty()) {
      compute();
    } else {
      std::atomic<bool> busy{true};
      std::thread worker;
      try {
        worker = std::thread([&] { compute(); busy.store(false); });
      } catch (const std::exception&) {
        // No thread to spare (a process or address-space limit): compute
        // here, then complete the transfer (no overlap, same result).
        compute();
        busy.store(false);
      }
      const Status ws = WaitAll(
          &reqs, ropt.timeout_s, [&] { return busy.load(); },
          std::string(kOp) + " (rank " + std::to_string(rank) + " of " + std::to_string(p) +
              ") step " + std::to_string(s) + ": K/V block from rank " +
              std::to_string(prev_rank),
          &comm_done, t_post);
      if (worker.joinable()) worker.join();
      ATTNFLOW_RETURN_IF_ERROR(ws);
    }
    ATTNFLOW_RETURN_IF_ERROR(compute_st);
    StepStats& ss = local.steps[s];
    ss.step_s = Seconds(t_step, Clock::now());
    ss.compute_s = compute_s;
    ss.comm_s = reqs.empty() ? 0 : comm_done;
    ss.exposed_s = reqs.empty() ? 0 : std::max(0.0, comm_done - compute_s);
    ss.bytes_sent = sent;
    std::swap(cur, nxt);
  }
  std::vector<Range> all_k;
  for (int r = 0; r < p; ++r)
    for (const Range& c : SequenceShard(layout, kv_len, r, p)) all_k.push_back(c);
  local.visible_pairs = VisiblePairs(opt.causal, q_len, kv_len, q_chunks, all_k);
  local.total_s = Seconds(t_start, Clock::now());
  if (stats) *stats = std::move(local);
  return Status::Ok();
}

Status ShardedDecode(MPI_Comm comm, const TensorView& out, const TensorView& lse,
                     const TensorView& q, const TensorView& k, const TensorView& v,
                     const SdpaOptions& opt, int64_t kv_len, const RingOptions& ropt,
                     RingStats* stats) {
  constexpr const char* kOp = "sharded_decode";
  const auto t_start = Clock::now();
  int rank = 0, p = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &p);
  SdpaDims dims{};
  Status st;
  const int64_t lq = q.rank == 4 ? q.shape[2] : 0;
  if (kv_len < 0) {
    st = InvalidArgument(std::string(kOp) + ": kv_len " + std::to_string(kv_len) + " must be >= 0");
  } else {
    st = ValidateLocal(kOp, rank, p, out, lse, q, k, v, opt, lq, kv_len,
                       ShardLength(Layout::kContiguous, kv_len, rank, p), &dims);
  }
  ATTNFLOW_RETURN_IF_ERROR(AgreeOnStatus(comm, st, ropt.timeout_s));
  ATTNFLOW_RETURN_IF_ERROR(CheckAgreement(
      comm, kOp, MakeHeader(dims, k, opt, lq, kv_len, Layout::kContiguous, lq), ropt.timeout_s));
  const int64_t B = dims.batch, H = dims.num_heads, Dv = dims.v_dim;
  Problem pb{B, H, dims.num_kv_heads, dims.head_dim, Dv, lq, kv_len, opt.causal, dims.scale,
             {}, opt.kv_lens, ropt.kopt};
  if (!opt.attn_mask.empty_view()) {
    const int64_t target[4] = {B, H, lq, kv_len};
    BroadcastMask(opt.attn_mask, target, &pb.mask4);
  }
  const int64_t n_out = B * H * lq * Dv, n_lse = B * H * lq, n = n_out + n_lse;
  std::vector<float> mine(std::max<int64_t>(n, 1)), all(std::max<int64_t>(n * p, 1));
  std::fill(mine.begin() + n_out, mine.begin() + n, -INFINITY);
  const auto tc = Clock::now();
  const Range kr = SequenceShard(Layout::kContiguous, kv_len, rank, p)[0];
  std::vector<int64_t> kvl_scratch;
  int64_t first = 0;
  const Status bs = BlockPartial(pb, q, 0, 0, k, v, kr.begin, mine.data(),
                                 mine.data() + n_out, lq, &kvl_scratch, &first);
  ATTNFLOW_RETURN_IF_ERROR(AgreeOnStatus(comm, bs, ropt.timeout_s));
  // Rows before `first` saw no key: make them the dead state (0, -inf).
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t i = 0; i < std::min(first, lq); ++i) {
      std::fill_n(mine.data() + (bh * lq + i) * Dv, Dv, 0.0f);
      mine[n_out + bh * lq + i] = -INFINITY;
    }
  const double compute_s = Seconds(tc, Clock::now());
  if (n * p > std::numeric_limits<int>::max()) {
    return InvalidArgument(std::string(kOp) + ": out/lse too large to gather");
  }
  const auto tg = Clock::now();
  std::vector<MPI_Request> req(1);
  MPI_Iallgather(mine.data(), static_cast<int>(n), MPI_FLOAT, all.data(), static_cast<int>(n),
                 MPI_FLOAT, comm, &req[0]);
  ATTNFLOW_RETURN_IF_ERROR(
      WaitAll(&req, ropt.timeout_s, nullptr,
              std::string(kOp) + " (rank " + std::to_string(rank) + " of " +
                  std::to_string(p) + "): allgather of partial (out, lse)"));
  const double comm_s = Seconds(tg, Clock::now());
  Result<Tensor> own_lse = Tensor();
  if (lse.empty_view()) {
    own_lse = Tensor::Zeros(DType::kF32, {B, H, lq});
    ATTNFLOW_RETURN_IF_ERROR(own_lse.status());
  }
  const TensorView acc_lse = lse.empty_view() ? own_lse->view() : lse;
  Fill(out, 0.0f);
  Fill(acc_lse, -INFINITY);
  for (int r = 0; r < p; ++r) {  // fixed order: rank 0, 1, ..., P-1
    float* base = all.data() + r * n;
    const TensorView po = MakeView(base, DType::kF32, {B, H, lq, Dv});
    const TensorView pl = MakeView(base + n_out, DType::kF32, {B, H, lq});
    ATTNFLOW_RETURN_IF_ERROR(MergeAttentionStates(out, acc_lse, out, acc_lse, po, pl));
  }
  if (stats) {
    RingStats local;
    local.steps.resize(1);
    local.steps[0].compute_s = compute_s;
    local.steps[0].comm_s = comm_s;
    local.steps[0].exposed_s = comm_s;  // the gather cannot overlap this token's compute
    local.steps[0].bytes_sent = n * static_cast<int64_t>(sizeof(float)) * (p - 1);
    local.steps[0].step_s = Seconds(t_start, Clock::now());
    local.visible_pairs =
        VisiblePairs(opt.causal, lq, kv_len, {Range{0, lq}}, {kr});
    local.total_s = local.steps[0].step_s;
    *stats = std::move(local);
  }
  return Status::Ok();
}

}  // namespace attnflow::dist
