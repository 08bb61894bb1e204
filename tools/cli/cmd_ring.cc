// cmd_ring.cc — `attnflow ring`: exact attention across MPI ranks
// (attnflow/dist.h, docs/distributed.md). Run under mpirun:
//
//   mpirun -np 4 attnflow ring verify prefill --q-len 1000 --causal top_left
//   mpirun -np 4 attnflow ring verify decode --kv-len 5000
//   mpirun -np 4 attnflow ring verify tests/data/golden/*.safetensors
//   mpirun -np 4 attnflow ring verify decode CASE.safetensors
//   mpirun -np 4 attnflow ring bench prefill --q-len 16384 --iters 3
//   mpirun -np 4 attnflow ring bench decode --kv-len 262144 --iters 20
//
// verify: every rank builds the same global inputs from --seed, runs the
// distributed call on its shard and compares its rows with the
// single-process kernel and (when B*H*Lq*Lk <= 2^24) the float64 reference;
// rank 0 prints the max errors. Exit 1 above tolerance.
// verify CASE...: golden cases (docs/golden-format.md) instead: every rank
// loads each case, runs the distributed path on its shard of the case's
// inputs (prefill: q, k, v and the mask's query rows sharded by --layout;
// decode: k/v sharded, q replicated), rank 0 gathers out and lse and
// compares them with the case's stages at the case's tolerances, printed as
// `attnflow verify` prints a case. Cases of another kind than sdpa, and sdpa
// cases with a sliding window, ALiBi, softcap or the per-sequence diagonal
// (not supported across ranks), are skipped and say why. Exit as `verify`: 0
// all match, 1 a stage differs, 2 an invalid case or usage.
// bench: local shards only (no global tensors, so memory per rank is the
// shard's), per-step time, bytes sent, share of communication hidden behind
// compute, load balance and peak RSS per rank.
// Errors: argument errors are agreed collectively and printed by EVERY rank
// with the same text (exit 2), within --timeout (each rank's own) of the
// start: first every rank's own option errors, then the command itself
// (action, mode, shapes, flags, the cases' bytes: ranks started with
// different arguments, e.g. verify on one and bench on another, are named);
// a message timeout (dead or stalled rank) prints the error and aborts the
// whole job (MPI_Abort, exit status 3). Only --threads and --timeout may
// differ between ranks.
// Built without MPI, `attnflow ring` explains that and exits 2.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli_common.h"

#if defined(ATTNFLOW_HAVE_DIST)
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include <sys/stat.h>

#include "attnflow/rng.h"
#include "attnflow/attention.h"
#include "attnflow/bench.h"
#include "attnflow/compare.h"
#include "attnflow/golden.h"
#include "attnflow/reference.h"
#include "attnflow/dist.h"
#include "attnflow/kernels.h"
#include "attnflow/threading.h"
#endif

namespace attnflow::cli {
namespace {

struct RingArgs {
  std::string action;  // verify | bench
  std::vector<std::string> positional;  // [prefill|decode] [CASE...] (verify: cases)
  std::vector<std::string> cases;       // golden case files (verify)
  std::vector<std::string> shape_flags;  // shape options given (refused with cases)
  std::string mode = "prefill";
  int64_t batch = 1, heads = 8, kv_heads = 2, q_len = -1, kv_len = -1, head_dim = 64;
  std::string causal, kv_dtype = "F32", layout = "zigzag";
  bool mask = false, kv_lens = false, skip_compute = false, json = false;
  int threads = 1, iters = 3;
  double timeout = 60;
  uint64_t seed = 1;
};

#if !defined(ATTNFLOW_HAVE_DIST)
int RunRing(const RingArgs&) {
  PrintError("ring",
             "MPI support was not built (install openmpi-bin and libopenmpi-dev, "
             "tools/deps/mpi.apt, and re-run cmake)");
  return kExitUsage;
}
#else

int Fail(MPI_Comm comm, const Status& st, bool collective) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  if (collective) {  // same message on every rank; the job ends normally
    PrintError("ring", "rank " + std::to_string(rank) + ": " + st.message());
    MPI_Finalize();
    return kExitUsage;
  }
  PrintError("ring", "rank " + std::to_string(rank) + ": " + st.message() +
                         "; aborting every rank");
  std::fflush(stderr);
  MPI_Abort(comm, 3);
  return 3;
}

// Allocation failures (a size this machine cannot hold) end the whole job
// with a clear message instead of crashing one rank.
Tensor Take(Result<Tensor> r) {
  if (!r.ok()) {
    Fail(MPI_COMM_WORLD, r.status(), false);  // MPI_Abort: does not return
    std::abort();
  }
  return std::move(r.value());
}

Tensor Random(DType dt, const Shape& shape, uint64_t seed) {
  Tensor t = Take(Tensor::Zeros(dt, shape));
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.view().store(i, rng.Uniform(-1.0, 1.0));
  return t;
}

double AllMax(double x) {
  double y = 0;
  MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return y;
}

struct Setup {
  SdpaOptions opt;
  dist::RingOptions ro;
  DType kv = DType::kF32;
  int64_t kv_len = 0;
};

Status ParseSetup(const RingArgs& a, Setup* s) {
  const std::string causal =
      !a.causal.empty() ? a.causal : (a.mode == "decode" ? "bottom_right" : "top_left");
  if (!ParseCausal(causal, &s->opt.causal))
    return InvalidArgument("ring: --causal must be none, top_left or bottom_right, got " + a.causal);
  if (!ParseDType(a.kv_dtype, &s->kv))
    return InvalidArgument("ring: --kv-dtype must be F32, F16 or BF16, got " + a.kv_dtype);
  if (!dist::ParseLayout(a.layout, &s->ro.layout))
    return InvalidArgument("ring: --layout must be zigzag or contiguous, got " + a.layout);
  if (a.mode != "prefill" && a.mode != "decode")
    return InvalidArgument("ring: mode must be prefill or decode, got " + a.mode);
  if (a.mode == "decode" && (a.q_len < 1 || a.q_len > 4))
    return InvalidArgument("ring: decode takes 1 to 4 new tokens (--q-len), got " +
                           std::to_string(a.q_len));
  s->kv_len = a.kv_len >= 0 ? a.kv_len : (a.mode == "decode" ? 4096 : a.q_len);
  s->ro.timeout_s = a.timeout;
  s->ro.skip_compute = a.skip_compute;
  return Status::Ok();
}

// This process's place in the world and the problem's extents (the shape
// verify and bench run on).
struct World {
  int rank = 0, p = 0;
  bool decode = false;
  int64_t B = 0, H = 0, Hkv = 0, D = 0, Lq = 0, Lk = 0;
};

World GetWorld(const RingArgs& a, const Setup& s) {
  int rank = 0, p = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return {rank, p, a.mode == "decode", a.batch, a.heads, a.kv_heads, a.head_dim, a.q_len,
          s.kv_len};
}

int Verify(const RingArgs& a, const Setup& s, ThreadPool* pool) {
  const auto [rank, p, decode, B, H, Hkv, D, Lq, Lk] = GetWorld(a, s);
  Tensor q = Random(DType::kF32, {B, H, Lq, D}, a.seed * 11 + 1);
  Tensor k = Random(s.kv, {B, Hkv, Lk, D}, a.seed * 11 + 2);
  Tensor v = Random(s.kv, {B, Hkv, Lk, D}, a.seed * 11 + 3);
  SdpaOptions opt = s.opt;
  Tensor mask, kvl;
  if (a.mask) {
    mask = Take(Tensor::Zeros(DType::kBool, {B, 1, Lq, Lk}));
    std::mt19937_64 gen(a.seed * 11 + 4);
    for (int64_t i = 0; i < mask.numel(); ++i) mask.data<uint8_t>()[i] = (gen() % 4) != 0;
    opt.attn_mask = mask.view();
  }
  if (a.kv_lens) {
    kvl = Take(Tensor::Zeros(DType::kI64, {B}));
    for (int64_t b = 0; b < B; ++b) kvl.data<int64_t>()[b] = std::max<int64_t>(0, Lk - 7 * b - 3);
    opt.kv_lens = kvl.view();
  }
  KernelOptions kopt;
  kopt.pool = pool;
  Tensor out_k = Take(Tensor::Zeros(DType::kF32, {B, H, Lq, D}));
  Tensor lse_k = Take(Tensor::Zeros(DType::kF32, {B, H, Lq}));
  Status st = Attention(out_k.view(), lse_k.view(), q.view(), k.view(), v.view(), opt, kopt);
  st = dist::AgreeOnStatus(MPI_COMM_WORLD, st, s.ro.timeout_s);
  if (!st.ok()) return Fail(MPI_COMM_WORLD, st, true);
  const bool with_ref = static_cast<double>(B) * H * Lq * Lk <= double(1 << 24);
  Tensor out_r, lse_r;
  if (with_ref) {
    out_r = Take(Tensor::Zeros(DType::kF64, {B, H, Lq, D}));
    lse_r = Take(Tensor::Zeros(DType::kF64, {B, H, Lq}));
    if (!reference::Sdpa(out_r.view(), lse_r.view(), q.view(), k.view(), v.view(), opt).ok())
      return Fail(MPI_COMM_WORLD, InvalidArgument("ring verify: reference failed"), false);
  }
  const dist::Layout lay = decode ? dist::Layout::kContiguous : s.ro.layout;
  Tensor kl = Take(dist::ShardRows(k.view(), lay, rank, p));
  Tensor vl = Take(dist::ShardRows(v.view(), lay, rank, p));
  dist::RingOptions ro = s.ro;
  ro.kopt.pool = pool;
  Tensor out, lse, ok_rows, lk_rows, or_rows, lr_rows;
  if (decode) {
    out = Take(Tensor::Zeros(DType::kF32, {B, H, Lq, D}));
    lse = Take(Tensor::Zeros(DType::kF32, {B, H, Lq}));
    st = dist::ShardedDecode(MPI_COMM_WORLD, out.view(), lse.view(), q.view(), kl.view(),
                             vl.view(), opt, Lk, ro);
    ok_rows = std::move(out_k);
    lk_rows = std::move(lse_k);
    or_rows = std::move(out_r);
    lr_rows = std::move(lse_r);
  } else {
    Tensor ql = Take(dist::ShardRows(q.view(), lay, rank, p));
    Tensor ml;
    if (a.mask) {
      ml = Take(dist::ShardRows(mask.view(), lay, rank, p));
      opt.attn_mask = ml.view();
    }
    out = Take(Tensor::Zeros(DType::kF32, {B, H, ql.shape()[2], D}));
    lse = Take(Tensor::Zeros(DType::kF32, {B, H, ql.shape()[2]}));
    st = dist::RingAttention(MPI_COMM_WORLD, out.view(), lse.view(), ql.view(), kl.view(),
                             vl.view(), opt, Lq, Lk, ro);
    ok_rows = Take(dist::ShardRows(out_k.view(), lay, rank, p));
    lk_rows = Take(dist::ShardRows(lse_k.view(), lay, rank, p));
    if (with_ref) {
      or_rows = Take(dist::ShardRows(out_r.view(), lay, rank, p));
      lr_rows = Take(dist::ShardRows(lse_r.view(), lay, rank, p));
    }
  }
  if (!st.ok()) {
    return Fail(MPI_COMM_WORLD, st, st.code() == StatusCode::kInvalidArgument ||
                                        st.code() == StatusCode::kUnimplemented);
  }
  const double ek = std::max(AllMax(MaxScaledError(out.view(), ok_rows.view())),
                             AllMax(MaxScaledError(lse.view(), lk_rows.view())));
  double er = -1;
  if (with_ref) {
    er = std::max(AllMax(MaxScaledError(out.view(), or_rows.view())),
                  AllMax(MaxScaledError(lse.view(), lr_rows.view())));
  }
  constexpr double kTolKernel = 1e-5, kTolRef = 2e-5;
  const bool ok = ek <= kTolKernel && (er < 0 || er <= kTolRef);
  if (rank == 0) {
    std::printf("ring verify %s: P=%d layout=%s B=%lld H=%lld Hkv=%lld Lq=%lld Lk=%lld D=%lld "
                "causal=%s kv=%s mask=%d kv_lens=%d\n",
                a.mode.c_str(), p, dist::LayoutName(lay), (long long)B, (long long)H,
                (long long)Hkv, (long long)Lq, (long long)Lk, (long long)D, CausalName(s.opt.causal),
                DTypeName(s.kv), a.mask, a.kv_lens);
    std::printf("  vs single-process kernel: max |err|/(1+|ref|) = %.3g (tol %.0e)\n", ek,
                kTolKernel);
    if (with_ref) {
      std::printf("  vs float64 reference:     max |err|/(1+|ref|) = %.3g (tol %.0e)\n", er,
                  kTolRef);
    } else {
      std::printf("  vs float64 reference:     skipped (B*H*Lq*Lk > 2^24)\n");
    }
    std::printf("%s\n", ok ? "PASS" : "FAIL");
  }
  MPI_Finalize();
  return ok ? kExitOk : kExitCheckFailed;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Bench(const RingArgs& a, const Setup& s, ThreadPool* pool) {
  const auto [rank, p, decode, B, H, Hkv, D, Lq, Lk] = GetWorld(a, s);
  const dist::Layout lay = decode ? dist::Layout::kContiguous : s.ro.layout;
  const int64_t lq_local = decode ? Lq : dist::ShardLength(lay, Lq, rank, p);
  const int64_t lk_local = dist::ShardLength(lay, Lk, rank, p);
  // Local shards only: the global tensors never exist in this process.
  Tensor q = Random(DType::kF32, {B, H, lq_local, D}, a.seed * 101 + rank);
  Tensor k = Random(s.kv, {B, Hkv, lk_local, D}, a.seed * 103 + rank);
  Tensor v = Random(s.kv, {B, Hkv, lk_local, D}, a.seed * 107 + rank);
  Tensor out = Take(Tensor::Zeros(DType::kF32, {B, H, lq_local, D}));
  Tensor lse = Take(Tensor::Zeros(DType::kF32, {B, H, lq_local}));
  dist::RingOptions ro = s.ro;
  ro.kopt.pool = pool;
  std::vector<double> totals;
  double comm_sum = 0, exposed_sum = 0;  // this rank, all iterations
  dist::RingStats last;
  std::vector<dist::StepStats> best;  // per step, each field's min over iterations
  for (int it = 0; it < a.iters; ++it) {
    dist::RingStats st;
    const Status rs =
        decode ? dist::ShardedDecode(MPI_COMM_WORLD, out.view(), lse.view(), q.view(), k.view(),
                                     v.view(), s.opt, Lk, ro, &st)
               : dist::RingAttention(MPI_COMM_WORLD, out.view(), lse.view(), q.view(),
                                     k.view(), v.view(), s.opt, Lq, Lk, ro, &st);
    if (!rs.ok()) {
      return Fail(MPI_COMM_WORLD, rs, rs.code() == StatusCode::kInvalidArgument ||
                                          rs.code() == StatusCode::kUnimplemented);
    }
    double t = 0;
    std::vector<MPI_Request> req(1);  // bounded wait: a stalled rank must not hang us here
    MPI_Iallreduce(&st.total_s, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &req[0]);
    const Status ws = dist::WaitRequests(&req, s.ro.timeout_s, "ring bench: timing reduction");
    if (!ws.ok()) return Fail(MPI_COMM_WORLD, ws, false);
    totals.push_back(t);
    for (const auto& ss : st.steps) {
      comm_sum += ss.comm_s;
      exposed_sum += ss.exposed_s;
    }
    if (rank == 0) {
      std::fprintf(stderr, "ring bench: iteration %d of %d done (%.3f s)\n", it + 1, a.iters, t);
    }
    if (best.empty()) best = st.steps;
    for (size_t i = 0; i < best.size() && i < st.steps.size(); ++i) {
      best[i].step_s = std::min(best[i].step_s, st.steps[i].step_s);
      best[i].compute_s = std::min(best[i].compute_s, st.steps[i].compute_s);
      best[i].comm_s = std::min(best[i].comm_s, st.steps[i].comm_s);
      best[i].exposed_s = std::min(best[i].exposed_s, st.steps[i].exposed_s);
    }
    last = std::move(st);
  }
  // Per-step stats: each rank's min over iterations, then max over ranks
  // (bytes: sum over ranks).
  const int steps = static_cast<int>(best.size());
  std::vector<double> mine(steps * 4), mx(steps * 4);
  std::vector<int64_t> bytes(steps), bytes_sum(steps);
  for (int i = 0; i < steps; ++i) {
    mine[i * 4 + 0] = best[i].step_s;
    mine[i * 4 + 1] = best[i].compute_s;
    mine[i * 4 + 2] = best[i].comm_s;
    mine[i * 4 + 3] = best[i].exposed_s;
    bytes[i] = best[i].bytes_sent;
  }
  MPI_Reduce(mine.data(), mx.data(), steps * 4, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(bytes.data(), bytes_sum.data(), steps, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  double compute_total = 0;
  for (const auto& ss : best) compute_total += ss.compute_s;
  const double rss = static_cast<double>(PeakRssSinceExecBytes()) / (1 << 20);
  const double h = comm_sum > 0 ? std::max(0.0, 1.0 - exposed_sum / comm_sum) : 1.0;
  std::vector<double> rss_all(p), comp_all(p), hid_all(p);
  std::vector<int64_t> pairs_all(p);
  MPI_Gather(&rss, 1, MPI_DOUBLE, rss_all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(&compute_total, 1, MPI_DOUBLE, comp_all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(&h, 1, MPI_DOUBLE, hid_all.data(), 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  MPI_Gather(&last.visible_pairs, 1, MPI_INT64_T, pairs_all.data(), 1, MPI_INT64_T, 0,
             MPI_COMM_WORLD);
  if (rank == 0) {
    auto mean = [](const auto& v) {
      double s = 0;
      for (auto x : v) s += static_cast<double>(x);
      return s / v.size();
    };
    const double pair_imb = *std::max_element(pairs_all.begin(), pairs_all.end()) / mean(pairs_all);
    const double comp_mean = mean(comp_all);
    const double comp_imb =
        comp_mean > 0 ? *std::max_element(comp_all.begin(), comp_all.end()) / comp_mean : 0.0;
    std::printf("ring bench %s: P=%d layout=%s B=%lld H=%lld Hkv=%lld Lq=%lld Lk=%lld D=%lld "
                "causal=%s kv=%s threads/rank=%d%s\n",
                a.mode.c_str(), p, dist::LayoutName(lay), (long long)B, (long long)H,
                (long long)Hkv, (long long)Lq, (long long)Lk, (long long)D, CausalName(s.opt.causal),
                DTypeName(s.kv), a.threads, s.ro.skip_compute ? " SKIP-COMPUTE (memory/transfer only)" : "");
    std::printf("%-5s %10s %10s %10s %10s %8s %12s   (min over iterations, max over "
                "ranks; bytes summed)\n",
                "step", "time_ms", "compute_ms", "comm_ms", "exposed_ms", "hidden", "bytes_sent");
    for (int i = 0; i < steps; ++i) {
      const double comm = mx[i * 4 + 2], exposed = mx[i * 4 + 3];
      char hidden[16] = "-";
      if (comm > 0) std::snprintf(hidden, sizeof hidden, "%.0f%%", 100.0 * (1.0 - exposed / comm));
      std::printf("%-5d %10.3f %10.3f %10.3f %10.3f %8s %12lld\n", i, mx[i * 4] * 1e3,
                  mx[i * 4 + 1] * 1e3, comm * 1e3, exposed * 1e3, hidden,
                  (long long)bytes_sum[i]);
    }
    std::printf("total: min %.3f ms, median %.3f ms over %d iterations\n",
                *std::min_element(totals.begin(), totals.end()) * 1e3, Median(totals) * 1e3,
                a.iters);
    std::printf("communication hidden behind compute (1 - exposed/comm over all iterations; "
                "worst rank): "
                "%.1f%%\n", 100.0 * *std::min_element(hid_all.begin(), hid_all.end()));
    std::printf("load: visible pairs max/mean %.3f, compute time max/mean %.3f\n", pair_imb,
                comp_imb);
    std::printf("peak RSS per rank (MiB):");
    for (double r : rss_all) std::printf(" %.1f", r);
    std::printf("\n");
    if (a.json) {
      std::printf("{\"mode\":\"%s\",\"P\":%d,\"layout\":\"%s\",\"B\":%lld,\"H\":%lld,\"Hkv\":%lld,"
                  "\"Lq\":%lld,\"Lk\":%lld,\"D\":%lld,\"causal\":\"%s\",\"kv\":\"%s\","
                  "\"skip_compute\":%d,\"min_s\":%.6g,\"median_s\":%.6g,\"hidden\":%.4f,"
                  "\"pair_imbalance\":%.4f,\"compute_imbalance\":%.4f,\"rss_mib_max\":%.1f,"
                  "\"step_compute_s\":[",
                  a.mode.c_str(), p, dist::LayoutName(lay), (long long)B, (long long)H,
                  (long long)Hkv, (long long)Lq, (long long)Lk, (long long)D, CausalName(s.opt.causal),
                  DTypeName(s.kv), s.ro.skip_compute ? 1 : 0,
                  *std::min_element(totals.begin(), totals.end()), Median(totals),
                  *std::min_element(hid_all.begin(), hid_all.end()), pair_imb, comp_imb,
                  *std::max_element(rss_all.begin(), rss_all.end()));
      for (int i = 0; i < steps; ++i) std::printf("%s%.6g", i ? "," : "", mx[i * 4 + 1]);
      std::printf("],\"step_comm_s\":[");
      for (int i = 0; i < steps; ++i) std::printf("%s%.6g", i ? "," : "", mx[i * 4 + 2]);
      std::printf("],\"step_bytes\":[");
      for (int i = 0; i < steps; ++i) std::printf("%s%lld", i ? "," : "", (long long)bytes_sum[i]);
      std::printf("]}\n");
    }
  }
  MPI_Finalize();
  return kExitOk;
}

// ---- verify CASE... ------------------------------------------------------

// A copy of `v` (rank <= 4, any strides) as a contiguous tensor of `dt`.
Result<Tensor> Converted(const TensorView& v, DType dt) {
  if (v.dtype == dt) return Tensor::FromView(v);
  Shape shape(v.shape.begin(), v.shape.begin() + v.rank);
  Result<Tensor> t = Tensor::Zeros(dt, shape);
  if (!t.ok()) return t;
  int64_t d[4] = {1, 1, 1, 1};
  for (int i = 0; i < v.rank; ++i) d[4 - v.rank + i] = v.shape[i];
  int64_t n = 0;
  for (int64_t i0 = 0; i0 < d[0]; ++i0)
    for (int64_t i1 = 0; i1 < d[1]; ++i1)
      for (int64_t i2 = 0; i2 < d[2]; ++i2)
        for (int64_t i3 = 0; i3 < d[3]; ++i3) {
          const int64_t idx[4] = {i0, i1, i2, i3};
          int64_t off = 0;
          for (int k = 0; k < v.rank; ++k) off += idx[4 - v.rank + k] * v.strides[k];
          t->view().store(n++, v.load(off));
        }
  return t;
}

// A mask of rank 2..4 as a rank-4 view (leading dims of size 1).
TensorView AsRank4(const TensorView& m) {
  TensorView r = m;
  const int pad = 4 - m.rank;
  for (int i = 3; i >= 0; --i) {
    r.shape[i] = i >= pad ? m.shape[i - pad] : 1;
    r.strides[i] = i >= pad ? m.strides[i - pad] : 0;
  }
  r.rank = 4;
  return r;
}

// Why the distributed path cannot check this case ("" if it can): the same
// on every rank (the ranks agreed on the cases' bytes).
std::string SkipReason(const GoldenCase& c) {
  if (c.kind != "sdpa") {
    return "not an sdpa case (kind " + c.kind + "; the ring runs scaled dot-product attention)";
  }
  if (c.opt.window_left >= 0 || c.opt.window_right >= 0) {
    return "sliding windows are not supported across ranks (attnflow/dist.h)";
  }
  if (!c.opt.alibi_slopes.empty_view()) return "ALiBi is not supported across ranks (attnflow/dist.h)";
  if (c.opt.softcap != 0.0) return "softcap is not supported across ranks (attnflow/dist.h)";
  if (c.opt.kv_align != KvAlign::kPadded) {
    return "per-sequence diagonal alignment is not supported across ranks (attnflow/dist.h)";
  }
  return "";
}

// Runs one case on every rank; rank 0 gets the report in *rep. A returned
// error is the same on every rank, except kInternal (a timeout: abort).
Status RunCase(const GoldenCase& c, const RingArgs& a, const Setup& s, ThreadPool* pool,
               CaseReport* rep) {
  int rank = 0, p = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const bool decode = a.mode == "decode";
  const dist::Layout lay = decode ? dist::Layout::kContiguous : s.ro.layout;
  const double to = s.ro.timeout_s;
  const int64_t B = c.q.shape[0], H = c.q.shape[1], Lq = c.q.shape[2];
  const int64_t Lk = c.k.shape[2], Dv = c.v.shape[3];
  // K/V keep F32/F16/BF16 (the ring sends them as they are); else F32.
  const bool kv_native = c.k.dtype == c.v.dtype &&
                         (c.k.dtype == DType::kF32 || c.k.dtype == DType::kF16 ||
                          c.k.dtype == DType::kBF16);
  const DType kvt = kv_native ? c.k.dtype : DType::kF32;
  SdpaOptions opt = c.opt;
  Tensor ql, kl, vl, ml, out, lse;
  Status st = [&]() -> Status {
    Result<Tensor> q32 = Converted(c.q, DType::kF32);
    ATTNFLOW_RETURN_IF_ERROR(q32.status());
    Result<Tensor> k = Converted(c.k, kvt);
    ATTNFLOW_RETURN_IF_ERROR(k.status());
    Result<Tensor> v = Converted(c.v, kvt);
    ATTNFLOW_RETURN_IF_ERROR(v.status());
    Result<Tensor> r = dist::ShardRows(k->view(), lay, rank, p);
    ATTNFLOW_RETURN_IF_ERROR(r.status());
    kl = std::move(r).value();
    r = dist::ShardRows(v->view(), lay, rank, p);
    ATTNFLOW_RETURN_IF_ERROR(r.status());
    vl = std::move(r).value();
    if (decode) {
      ql = std::move(q32).value();  // replicated
    } else {
      r = dist::ShardRows(q32->view(), lay, rank, p);
      ATTNFLOW_RETURN_IF_ERROR(r.status());
      ql = std::move(r).value();
      if (!opt.attn_mask.empty_view()) {
        // The mask covers this rank's query rows; a broadcast query dim stays.
        const TensorView m4 = AsRank4(opt.attn_mask);
        opt.attn_mask = m4;
        if (m4.shape[2] != 1) {
          r = dist::ShardRows(m4, lay, rank, p);
          ATTNFLOW_RETURN_IF_ERROR(r.status());
          ml = std::move(r).value();
          opt.attn_mask = ml.view();
        }
      }
    }
    const int64_t rows = ql.shape()[2];
    Result<Tensor> o = Tensor::Zeros(DType::kF32, {B, H, rows, Dv});
    ATTNFLOW_RETURN_IF_ERROR(o.status());
    out = std::move(o).value();
    o = Tensor::Zeros(DType::kF32, {B, H, rows});
    ATTNFLOW_RETURN_IF_ERROR(o.status());
    lse = std::move(o).value();
    return Status::Ok();
  }();
  ATTNFLOW_RETURN_IF_ERROR(dist::AgreeOnStatus(MPI_COMM_WORLD, st, to));
  dist::RingOptions ro = s.ro;
  ro.kopt.pool = pool;
  ro.layout = lay;
  st = decode ? dist::ShardedDecode(MPI_COMM_WORLD, out.view(), lse.view(), ql.view(), kl.view(),
                                    vl.view(), opt, Lk, ro)
              : dist::RingAttention(MPI_COMM_WORLD, out.view(), lse.view(), ql.view(),
                                    kl.view(), vl.view(), opt, Lq, Lk, ro);
  ATTNFLOW_RETURN_IF_ERROR(st);
  Tensor out_g, lse_g;
  if (decode) {  // replicated: rank 0 has every row
    out_g = std::move(out);
    lse_g = std::move(lse);
  } else {
    ATTNFLOW_RETURN_IF_ERROR(dist::GatherRows(MPI_COMM_WORLD, &out_g, out.view(), lay, Lq, 0, to));
    ATTNFLOW_RETURN_IF_ERROR(dist::GatherRows(MPI_COMM_WORLD, &lse_g, lse.view(), lay, Lq, 0, to));
  }
  if (rank != 0) return Status::Ok();
  rep->path = c.path;
  rep->kind = c.kind;
  rep->implementation = std::string("ring ") + (decode ? "decode" : "prefill") + " (P=" +
                        std::to_string(p) + ", " + dist::LayoutName(lay) + ")";
  for (const std::string& name : GoldenStageOrder(c.kind)) {
    StageReport r;
    r.stage = name;
    const Tensor* got = name == "out" ? &out_g : name == "lse" ? &lse_g : nullptr;
    if (!c.file->Has(name)) {
      r.note = "not in the case file";
    } else if (got == nullptr) {
      r.note = "not produced by the ring";
    } else {
      Result<TensorView> exp = c.file->Get(name);
      if (!exp.ok()) return exp.status();
      r = CompareStage(name, got->view(), exp.value(), c.atol, c.rtol);
    }
    rep->stages.push_back(std::move(r));
  }
  return Status::Ok();
}

int VerifyCases(const RingArgs& a, const Setup& s, ThreadPool* pool) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const double to = s.ro.timeout_s;
  int invalid = 0, differ = 0, match = 0, skipped = 0;
  for (const std::string& path : a.cases) {
    Result<GoldenCase> c = LoadGoldenCase(path);
    Status st = dist::AgreeOnStatus(MPI_COMM_WORLD, c.ok() ? Status::Ok() : c.status(), to);
    if (st.ok()) {
      const std::string why = SkipReason(c.value());
      if (!why.empty()) {
        if (rank == 0) {
          std::printf("case %s  kind=%s  impl=ring\n  => skipped: %s\n", EscapeLine(path).c_str(),
                      EscapeLine(c->kind).c_str(), EscapeLine(why).c_str());
        }
        ++skipped;
        continue;
      }
      CaseReport rep;
      st = RunCase(c.value(), a, s, pool, &rep);
      if (st.ok()) {
        if (rank == 0) {
          PrintCaseReport(rep, c->atol, c->rtol, false);
          (rep.ok() ? match : differ) += 1;
        }
        continue;
      }
    }
    if (st.code() == StatusCode::kInternal) return Fail(MPI_COMM_WORLD, st, false);
    if (rank == 0) PrintError("ring", path + ": " + st.message());
    ++invalid;
  }
  int code = invalid > 0 ? kExitUsage : differ > 0 ? kExitCheckFailed : kExitOk;
  if (rank == 0) {
    std::printf("%d case(s): %d match, %d differ, %d invalid%s\n", match + differ + invalid + skipped,
                match, differ, invalid,
                skipped > 0 ? (", " + std::to_string(skipped) + " skipped").c_str() : "");
    std::fflush(stdout);
  }
  // Every rank ends with rank 0's verdict.
  std::vector<MPI_Request> req(1);
  MPI_Ibcast(&code, 1, MPI_INT, 0, MPI_COMM_WORLD, &req[0]);
  const Status ws = dist::WaitRequests(&req, to, "ring verify: verdict");
  if (!ws.ok()) return Fail(MPI_COMM_WORLD, ws, false);
  MPI_Finalize();
  return code;
}

// ---- agreement on the command ---------------------------------------------

uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

// "<bytes>:<fnv-1a of the bytes>" of a regular file, or "unreadable" (never
// blocks: FIFOs and devices are not opened).
std::string FileDigest(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "unreadable";
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return "unreadable";
  std::vector<char> buf(1 << 16);
  uint64_t h = 1469598103934665603ull, n = 0;
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), f)) > 0) {
    h = Fnv1a(buf.data(), got, h);
    n += got;
  }
  std::fclose(f);
  char b[48];
  std::snprintf(b, sizeof b, "%llu:%016llx", static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(h));
  return b;
}

// What this rank was asked to run, in a canonical form (everything except
// --threads and --timeout, which may differ between ranks).
std::string CommandText(const RingArgs& a) {
  std::string t = "ring " + a.action + " " + a.mode + " --layout " + a.layout;
  if (!a.cases.empty()) {
    for (const std::string& c : a.cases) t += " case[" + FileDigest(c) + "]";
    return t;
  }
  t += " --batch " + std::to_string(a.batch) + " --heads " + std::to_string(a.heads) +
       " --kv-heads " + std::to_string(a.kv_heads) + " --q-len " + std::to_string(a.q_len) +
       " --kv-len " + std::to_string(a.kv_len) + " --head-dim " + std::to_string(a.head_dim) +
       " --causal " + (a.causal.empty() ? "default" : a.causal) + " --kv-dtype " + a.kv_dtype +
       " --seed " + std::to_string(a.seed);
  if (a.mask) t += " --mask";
  if (a.kv_lens) t += " --kv-lens";
  if (a.action == "bench") {
    t += " --iters " + std::to_string(a.iters);
    if (a.skip_compute) t += " --skip-compute";
    if (a.json) t += " --json";
  }
  return t;
}

// Collective: every rank runs the same command, else the same error on every
// rank naming the first rank that differs from rank 0 and both commands.
Status AgreeOnCommand(const RingArgs& a, double timeout_s) {
  struct Record {
    uint64_t hash;
    char text[248];
  };
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  const std::string text = CommandText(a);
  Record mine{};
  mine.hash = Fnv1a(text.data(), text.size());
  std::snprintf(mine.text, sizeof mine.text, "%s", text.c_str());
  std::vector<Record> all(p);
  std::vector<MPI_Request> req(1);
  MPI_Iallgather(&mine, sizeof(Record), MPI_BYTE, all.data(), sizeof(Record), MPI_BYTE,
                 MPI_COMM_WORLD, &req[0]);
  ATTNFLOW_RETURN_IF_ERROR(dist::WaitRequests(&req, timeout_s, "ring: command agreement"));
  for (int r = 1; r < p; ++r) {
    if (all[r].hash == all[0].hash) continue;
    return InvalidArgument("the ranks were started with different commands: rank 0 runs '" +
                           std::string(all[0].text) + "' but rank " + std::to_string(r) +
                           " runs '" + std::string(all[r].text) +
                           "'; start every rank with the same arguments (only --threads and "
                           "--timeout may differ)");
  }
  return Status::Ok();
}

// verify: "prefill" / "decode" first is the mode, every other argument a
// golden case file; with cases the shapes come from the files.
Status ResolvePositionals(RingArgs* a) {
  for (size_t i = 0; i < a->positional.size(); ++i) {
    const std::string& x = a->positional[i];
    if (i == 0 && (x == "prefill" || x == "decode")) {
      a->mode = x;
      continue;
    }
    a->cases.push_back(x);
  }
  if (!a->cases.empty() && !a->shape_flags.empty()) {
    std::string flags;
    for (const std::string& f : a->shape_flags) flags += (flags.empty() ? "" : ", ") + f;
    return InvalidArgument("ring verify CASE: " + flags +
                           " cannot be combined with case files (the case gives the shapes, "
                           "mask and inputs)");
  }
  return Status::Ok();
}

int RunRing(const RingArgs& a) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  RingArgs args = a;
  Status st = ResolvePositionals(&args);
  if (args.q_len < 0) args.q_len = args.mode == "decode" ? 1 : 1024;
  Setup s;
  if (st.ok()) st = ParseSetup(args, &s);
  if (!st.ok()) {  // every rank prints it: say whose options are wrong
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    st = Status(st.code(), st.message() + " (the options of rank " + std::to_string(rank) + ")");
  }
  // Every rank's option errors, then the command itself, agreed within this
  // rank's own --timeout: a rank with an error never leaves the others
  // waiting for a collective it will not join. kInternal = no agreement (a
  // rank is missing): abort.
  st = dist::AgreeOnStatus(MPI_COMM_WORLD, st, a.timeout);
  if (st.ok()) st = AgreeOnCommand(args, a.timeout);
  if (!st.ok()) return Fail(MPI_COMM_WORLD, st, st.code() != StatusCode::kInternal);
  ThreadPool pool(a.threads);
  if (!args.cases.empty()) return VerifyCases(args, s, &pool);
  return args.action == "verify" ? Verify(args, s, &pool) : Bench(args, s, &pool);
}
#endif

// The shape options (refused with case files).
const char* const kShapeFlags[] = {"--batch", "--heads", "--kv-heads", "--q-len", "--kv-len",
                                   "--head-dim", "--causal", "--kv-dtype", "--mask",
                                   "--kv-lens", "--seed"};

void AddShapeOptions(CLI::App* c, RingArgs* a, bool verify) {
  if (verify) {
    c->add_option("args", a->positional,
                  "[prefill|decode] [CASE.safetensors...]: the mode (prefill: ring, default; "
                  "decode: sharded KV cache), then golden case files to check instead of "
                  "random inputs (their shapes, mask and tolerances; the shape options below "
                  "are then refused)");
  } else {
    c->add_option("mode", a->mode, "prefill (ring, default) or decode (sharded KV cache)");
  }
  c->add_option("--batch", a->batch, "B (default 1)")->check(InRange(int64_t{1}, int64_t{1} << 20));
  c->add_option("--heads", a->heads, "H (default 8)")->check(InRange(int64_t{1}, int64_t{1} << 16));
  c->add_option("--kv-heads", a->kv_heads, "Hkv (default 2)")->check(InRange(int64_t{1}, int64_t{1} << 16));
  c->add_option("--q-len", a->q_len, "global query length (default 1024); decode: new tokens, 1..4 (default 1)")
      ->check(InRange(int64_t{0}, int64_t{1} << 32))
      ->default_str("");  // the mode's default, above
  c->add_option("--kv-len", a->kv_len, "global key length (default: q-len; decode: 4096)")
      ->check(InRange(int64_t{0}, int64_t{1} << 32))
      ->default_str("");
  c->add_option("--head-dim", a->head_dim, "D = Dv (default 64)")->check(InRange(int64_t{1}, int64_t{256}));
  c->add_option("--causal", a->causal,
                "none, top_left or bottom_right (default: top_left for prefill, bottom_right for decode)");
  c->add_option("--kv-dtype", a->kv_dtype, "K/V dtype: F32 (default), F16, BF16");
  c->add_option("--layout", a->layout, "prefill sharding: zigzag (default) or contiguous");
  c->add_flag("--mask", a->mask, "random BOOL mask [B,1,Lq,Lk] (verify)");
  c->add_flag("--kv-lens", a->kv_lens, "per-batch kv_lens (verify)");
  c->add_option("--threads", a->threads, "kernel threads per rank (default 1)")->check(InRange(1, 256));
  c->add_option("--timeout", a->timeout, "seconds to wait for any one message (default 60)")
      ->check(InRange(0.1, 86400.0));
  c->add_option("--seed", a->seed, "input seed (default 1)");
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    ring, "ring",
    "Exact attention across MPI ranks (ring prefill, sharded decode); run under mpirun",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<RingArgs>();
      sub.require_subcommand(1);
      CLI::App* verify = sub.add_subcommand(
          "verify",
          "Compare with the single-process kernel and the float64 reference, or check golden "
          "case files (ring verify [decode] CASE.safetensors...)");
      AddShapeOptions(verify, a.get(), true);
      verify->footer(
          "Examples:\n  mpirun -n 4 attnflow ring verify prefill --q-len 1000 --causal top_left\n"
          "  mpirun -n 3 attnflow ring verify tests/data/golden/sdpa_basic.safetensors\n"
          "  mpirun -n 3 attnflow ring verify decode tests/data/golden/*.safetensors");
      CLI::App* bench = sub.add_subcommand(
          "bench", "Per-step time, bytes sent, hidden communication, balance, RSS per rank");
      AddShapeOptions(bench, a.get(), false);
      bench->add_option("--iters", a->iters, "iterations (default 3)")->check(InRange(1, 100000));
      bench->add_flag("--skip-compute", a->skip_compute,
                      "memory/transfer measurement only: send every block, skip the kernels");
      bench->add_flag("--json", a->json, "also print one JSON line (rank 0)");
      return [a, verify] {
        a->action = verify->parsed() ? "verify" : "bench";
        if (verify->parsed()) {
          for (const char* f : kShapeFlags)
            if (verify->count(f) > 0) a->shape_flags.push_back(f);
        }
        return RunRing(*a);
      };
    });

}  // namespace attnflow::cli
