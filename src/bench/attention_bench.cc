// attention_bench.cc — BenchAttention, the harness behind `attnflow bench`
// (see attnflow/bench.h for what is counted and how it is timed).
//
// Invariants: inputs depend only on the shape (Rng seed 1); FLOPs and bytes
// come from the shared semantics (VisibleKeys), never from the kernel; the
// kernel's choice is the one ExplainAttention reports for the same call;
// with spec.cold every timed call and every timed read starts from a cache
// evicted by an untimed read of ColdFlushBytes().
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <optional>
#include <chrono>
#include <string>
#include <vector>

#include "attnflow/bench.h"
#include "attnflow/kv_int8.h"
#include "attnflow/reference.h"
#include "attnflow/rng.h"
#include "attnflow/semantics.h"

namespace attnflow {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int64_t ColdFlushBytes() {
  // The largest cache of cpu0 in sysfs (Linux; sizes like "32768K"). Not
  // sysconf(_SC_LEVEL3_CACHE_SIZE): glibc reports the CPUID total there,
  // e.g. 384 MiB for a 12-CCD EPYC whose cores share 32 MiB.
  int64_t llc = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string path =
        "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/size";
    std::FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    long long v = 0;
    char unit = 0;
    const int n = std::fscanf(f, "%lld%c", &v, &unit);
    std::fclose(f);
    if (n < 1 || v <= 0) continue;
    const int64_t scale = unit == 'K'   ? 1024
                          : unit == 'M' ? (1 << 20)
                          : unit == 'G' ? (1 << 30)
                                        : 1;
    llc = std::max<int64_t>(llc, static_cast<int64_t>(v) * scale);
  }
  return std::max<int64_t>(int64_t{256} << 20, 4 * llc);
}

// The mask options of a spec (causal alignment and window).
SdpaOptions SpecOptions(const AttentionBenchSpec& s) {
  SdpaOptions opt;
  opt.causal = s.causal;
  opt.window_left = s.window_left;
  opt.window_right = s.window_right;
  return opt;
}

namespace {

// The timing loop shared by both paths: warm-up, then `repeat` timed calls,
// each followed (measure_read) by a timed plain read of the same bytes; cold
// flushes as the spec says. Fills the times, the reads and the flush counts
// of *r (kv_bytes must be set).
Status TimeCalls(const AttentionBenchSpec& s, ThreadPool& pool, const std::function<Status()>& call,
                 AttentionBenchResult* r) {
  // The plain read of the same K/V bytes (decode floor): its buffer is
  // allocated and first touched once, then read once after every timed call
  // (none when the K/V are less than one chunk per worker).
  std::optional<PlainReadBuffer> rbuf;
  const int64_t kv_bytes_i = static_cast<int64_t>(r->kv_bytes);
  if (s.measure_read && PlainReadFloats(kv_bytes_i, pool.NumWorkers()) > 0) {
    Result<PlainReadBuffer> b = PlainReadBuffer::Make(pool, kv_bytes_i, "bench: the plain-read buffer");
    if (!b.ok()) return b.status();
    rbuf.emplace(std::move(b).value());
  }
  // The cold-cache flush buffer (spec.cold): read (untimed) before every
  // timed call and every timed read.
  std::optional<PlainReadBuffer> fbuf;
  if (s.cold) {
    Result<PlainReadBuffer> b =
        PlainReadBuffer::Make(pool, ColdFlushBytes(), "bench: the cold-cache flush buffer");
    if (!b.ok()) return b.status();
    fbuf.emplace(std::move(b).value());
    r->flush_bytes = fbuf->buffer_bytes();
  }
  auto flush = [&] {
    if (!fbuf) return;
    fbuf->Read();
    ++r->flushes;
  };
  const double w0 = Now();
  for (int i = 0; i < s.warmup || (s.warmup > 0 && Now() - w0 < 0.25 && i < 100000); ++i) {
    ATTNFLOW_RETURN_IF_ERROR(call());
    if (rbuf) rbuf->Read();
  }
  std::vector<double> times, reads;
  for (int i = 0; i < s.repeat; ++i) {
    flush();
    const double t0 = Now();
    ATTNFLOW_RETURN_IF_ERROR(call());
    times.push_back(Now() - t0);
    if (rbuf) {
      flush();
      reads.push_back(rbuf->Read());  // scaled to exactly r->kv_bytes
    }
  }
  auto median = [](std::vector<double>& x) {
    std::sort(x.begin(), x.end());
    const size_t n = x.size();
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
  };
  r->median_s = median(times);
  r->min_s = times.front();
  r->gflops = r->flops / r->median_s * 1e-9;
  r->gbps = r->kv_bytes / r->median_s * 1e-9;
  if (!reads.empty()) {
    r->read_median_s = median(reads);  // sorts: front() is the min
    r->read_same_bytes_s = reads.front();
  }
  return Status::Ok();
}

// The int8 KV cache decode (kv_dtype kI8): one cache per sequence in the
// micro library's layout, capacity = kv_len, all positions appended (slot =
// position), window = window_left + 1 when window_left >= 0 (the query is
// the newest position). Per (b, kv head) the K and V data are N(0, 1) from
// Rng seed 1 + 2 (b Hkv + g) (K) and + 1 (V), quantised with the symmetric
// scale max|x| / 127 (round to nearest, |q| <= 127).
Result<AttentionBenchResult> BenchDecodeS8(const AttentionBenchSpec& s, ThreadPool& pool) {
  const int64_t B = s.batch, H = s.num_heads, Hkv = s.num_kv_heads, Lk = s.kv_len,
                D = s.head_dim;
  const std::string shape = "B=" + std::to_string(B) + " H=" + std::to_string(H) + " Hkv=" +
                            std::to_string(Hkv) + " Lq=" + std::to_string(s.q_len) + " Lk=" +
                            std::to_string(Lk) + " D=" + std::to_string(D);
  if (s.q_len != 1) {
    return InvalidArgument("bench: the int8 KV cache decode takes one query per sequence (q_len 1), "
                           "got " + shape);
  }
  if (s.causal == Causal::kTopLeft || s.window_right > 0) {
    return InvalidArgument("bench: the int8 KV cache decode's query is the newest position: causal "
                           "none or bottom_right, no right window (" + shape + ")");
  }
  if (Lk < 1 || Hkv < 1) return InvalidArgument("bench: int8 KV cache needs kv_len and num_kv_heads >= 1 (" + shape + ")");
  const int64_t window = s.window_left >= 0 && s.window_left + 1 < Lk ? s.window_left + 1 : 0;
  const KvCacheS8Layout layout{Hkv, D, D, Lk, window};
  const size_t head = static_cast<size_t>(Lk * D);
  Result<Tensor> kst = Tensor::Zeros(DType::kI8, {B, Hkv, Lk, D});
  if (!kst.ok()) return kst.status();
  Result<Tensor> vst = Tensor::Zeros(DType::kI8, {B, Hkv, D, Lk});
  if (!vst.ok()) return vst.status();
  Result<Tensor> scales = Tensor::Zeros(DType::kF32, {2, B, Hkv});
  if (!scales.ok()) return scales.status();
  Result<Tensor> tmp = Tensor::Zeros(DType::kF32, {Lk, D});
  if (!tmp.ok()) return tmp.status();
  float* x = tmp->data<float>();
  float* ks = scales->data<float>();
  float* vs = ks + B * Hkv;
  for (int64_t bg = 0; bg < B * Hkv; ++bg) {
    for (int kv = 0; kv < 2; ++kv) {
      Rng rng(1 + 2 * static_cast<uint64_t>(bg) + static_cast<uint64_t>(kv));
      float amax = 0.0f;
      for (size_t e = 0; e < head; ++e) {
        x[e] = static_cast<float>(rng.Normal());
        amax = std::max(amax, std::fabs(x[e]));
      }
      const float sc = amax > 0 ? amax / 127.0f : 1.0f;
      (kv == 0 ? ks : vs)[bg] = sc;
      int8_t* dst = (kv == 0 ? kst->data<int8_t>() : vst->data<int8_t>()) + bg * head;
      for (int64_t p = 0; p < Lk; ++p) {
        for (int64_t d = 0; d < D; ++d) {
          const float v = std::clamp(std::nearbyint(x[p * D + d] / sc), -127.0f, 127.0f);
          // K rows [p][d]; V columns [d][p].
          dst[kv == 0 ? p * D + d : d * Lk + p] = static_cast<int8_t>(v);
        }
      }
    }
  }
  tmp = Tensor();
  std::vector<KvCacheS8Seq> seqs(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    KvCacheS8Seq& q = seqs[static_cast<size_t>(b)];
    q.k = kst->data<int8_t>() + b * Hkv * static_cast<int64_t>(head);
    q.v = vst->data<int8_t>() + b * Hkv * static_cast<int64_t>(head);
    q.k_scale = ks + b * Hkv;
    q.v_scale = vs + b * Hkv;
    q.length = Lk;
  }
  Result<Tensor> q = Tensor::Zeros(DType::kF32, {B, H, 1, D});
  if (!q.ok()) return q.status();
  Result<Tensor> out = Tensor::Zeros(DType::kF32, {B, H, 1, D});
  if (!out.ok()) return out.status();
  Rng rng(1);
  for (int64_t i = 0; i < q->numel(); ++i) q->data<float>()[i] = static_cast<float>(rng.Normal());
  DecodeS8Options opt;
  opt.pool = &pool;
  AttentionBenchResult r;
  DecodeS8Choice choice;
  // Validates (errors name the op and the shapes) and explains.
  ATTNFLOW_RETURN_IF_ERROR(DecodeKvS8(out->view(), {}, q->view(), seqs, layout, opt, &choice));
  r.kernel = "int8_kv_decode";
  r.explain = choice.ToString();
  r.choice.simd_target = choice.simd_target;
  r.choice.tile_kv = choice.tile_kv;
  r.choice.num_splits = choice.num_splits;
  r.choice.num_tasks = choice.num_tasks;
  r.choice.reason = choice.reason;
  const int64_t keys = VisibleS8(Lk, layout);
  r.flops = 2.0 * static_cast<double>(D + D) * static_cast<double>(keys) * static_cast<double>(B * H);
  r.kv_bytes = DecodeKvS8Bytes(seqs, layout);
  auto call = [&] { return DecodeKvS8(out->view(), {}, q->view(), seqs, layout, opt, nullptr); };
  ATTNFLOW_RETURN_IF_ERROR(TimeCalls(s, pool, call, &r));
  return r;
}

}  // namespace

Result<AttentionBenchResult> BenchAttention(const AttentionBenchSpec& s, ThreadPool& pool) {
  if (s.kv_dtype == DType::kI8) return BenchDecodeS8(s, pool);
  const int64_t B = s.batch, H = s.num_heads, Hkv = s.num_kv_heads, Lq = s.q_len, Lk = s.kv_len,
                D = s.head_dim;
  Result<Tensor> q = Tensor::Zeros(DType::kF32, {B, H, Lq, D});
  if (!q.ok()) return q.status();
  Result<Tensor> k = Tensor::Zeros(s.kv_dtype, {B, Hkv, Lk, D});
  if (!k.ok()) return k.status();
  Result<Tensor> v = Tensor::Zeros(s.kv_dtype, {B, Hkv, Lk, D});
  if (!v.ok()) return v.status();
  Result<Tensor> out = Tensor::Zeros(DType::kF32, {B, H, Lq, D});
  if (!out.ok()) return out.status();
  Rng rng(1);
  for (Tensor* t : {&q.value(), &k.value(), &v.value()}) {
    const TensorView tv = t->view();  // hoisted: the same values in the same order
    const int64_t n = tv.numel();
    for (int64_t i = 0; i < n; ++i) tv.store(i, static_cast<float>(rng.Normal()));
  }
  const SdpaOptions opt = SpecOptions(s);
  KernelOptions kopt;
  kopt.pool = &pool;
  kopt.force = s.force;
  AttentionBenchResult r;
  ATTNFLOW_RETURN_IF_ERROR(
      ExplainAttention(out->view(), {}, q->view(), k->view(), v->view(), opt, kopt, &r.choice));
  r.kernel = KernelKindName(r.choice.kernel);
  r.explain = r.choice.ToString();
  // Visible pairs and the keys some row sees, from the shared semantics.
  double pairs = 0;
  int64_t lo = Lk, hi = -1;
  for (int64_t i = 0; i < Lq; ++i) {
    const KeyRange kr = VisibleKeys(s.causal, s.window_left, s.window_right, i, Lq, Lk, Lk);
    if (kr.last >= kr.first) {
      pairs += static_cast<double>(kr.last - kr.first + 1);
      lo = std::min(lo, kr.first);
      hi = std::max(hi, kr.last);
    }
  }
  auto call = [&] { return Attention(out->view(), {}, q->view(), k->view(), v->view(), opt, kopt, nullptr); };
  // K/V bytes that must be read: every key some row sees, once.
  const double keys = hi >= lo ? static_cast<double>(hi - lo + 1) : 0.0;
  r.kv_bytes = static_cast<double>(B * Hkv) * keys * (2.0 * static_cast<double>(D)) *
               static_cast<double>(DTypeSize(s.kv_dtype));
  r.flops = 2.0 * static_cast<double>(D + D) * pairs * static_cast<double>(B * H);
  ATTNFLOW_RETURN_IF_ERROR(TimeCalls(s, pool, call, &r));
  return r;
}

Result<AttentionIoResult> BenchAttentionIo(const AttentionBenchSpec& spec, ThreadPool& pool) {
  AttentionIoResult r;
  AttentionBenchSpec s = spec;
  s.kv_dtype = DType::kF32;
  s.measure_read = false;
  s.force = KernelKind::kTiledPrefill;
  Result<AttentionBenchResult> flash = BenchAttention(s, pool);
  if (!flash.ok()) return flash.status();
  r.flash = *flash;
  s.force = KernelKind::kNaive;
  Result<AttentionBenchResult> naive = BenchAttention(s, pool);
  if (!naive.ok()) return naive.status();
  r.naive = *naive;
  r.io = ModelAttentionIo(s.batch, s.num_heads, s.num_kv_heads, s.q_len, s.kv_len, s.head_dim,
                          r.flash.choice.tile_q);
  // Outputs, from the same inputs as BenchAttention (Rng seed 1, q then k then v).
  const int64_t B = s.batch, H = s.num_heads, Hkv = s.num_kv_heads, Lq = s.q_len, Lk = s.kv_len,
                D = s.head_dim;
  std::vector<Tensor> t;
  for (const Shape& sh : {Shape{B, H, Lq, D}, Shape{B, Hkv, Lk, D}, Shape{B, Hkv, Lk, D},
                          Shape{B, H, Lq, D}, Shape{B, H, Lq, D}, Shape{B, H, Lq, D}}) {
    Result<Tensor> x = Tensor::Zeros(DType::kF32, sh);
    if (!x.ok()) return x.status();
    t.push_back(std::move(x).value());
  }
  Rng rng(1);
  for (int i = 0; i < 3; ++i)
    for (int64_t e = 0; e < t[i].numel(); ++e)
      t[i].view().store(e, static_cast<float>(rng.Normal()));
  const SdpaOptions opt = SpecOptions(s);
  KernelOptions kopt;
  kopt.pool = &pool;
  kopt.force = KernelKind::kTiledPrefill;
  ATTNFLOW_RETURN_IF_ERROR(Attention(t[3].view(), {}, t[0].view(), t[1].view(), t[2].view(), opt, kopt));
  kopt.force = KernelKind::kNaive;
  ATTNFLOW_RETURN_IF_ERROR(Attention(t[4].view(), {}, t[0].view(), t[1].view(), t[2].view(), opt, kopt));
  const float* fo = t[3].data<float>();
  const float* no = t[4].data<float>();
  for (int64_t e = 0; e < t[3].numel(); ++e)
    r.max_abs_diff = std::max(r.max_abs_diff, static_cast<double>(std::fabs(fo[e] - no[e])));
  const double work = static_cast<double>(B * H) * static_cast<double>(Lq) *
                      static_cast<double>(Lk) * static_cast<double>(D);
  if (work <= 2147483648.0) {
    ATTNFLOW_RETURN_IF_ERROR(
        reference::Sdpa(t[5].view(), {}, t[0].view(), t[1].view(), t[2].view(), opt));
    const float* ro = t[5].data<float>();
    for (int64_t e = 0; e < t[5].numel(); ++e) {
      r.max_err_flash = std::max(r.max_err_flash, static_cast<double>(std::fabs(fo[e] - ro[e])));
      r.max_err_naive = std::max(r.max_err_naive, static_cast<double>(std::fabs(no[e] - ro[e])));
      r.max_abs_ref = std::max(r.max_abs_ref, static_cast<double>(std::fabs(ro[e])));
    }
  } else {
    r.max_err_flash = r.max_err_naive = r.max_abs_ref = std::numeric_limits<double>::quiet_NaN();
  }
  return r;
}

double AttentionIoPeakBytes(const AttentionBenchSpec& spec, int workers) {
  const double B = static_cast<double>(spec.batch), H = static_cast<double>(spec.num_heads),
               Hkv = static_cast<double>(spec.num_kv_heads), Lq = static_cast<double>(spec.q_len),
               Lk = static_cast<double>(spec.kv_len), D = static_cast<double>(spec.head_dim);
  const double tensors = 4.0 * (4.0 * B * H * Lq * D + 2.0 * B * Hkv * Lk * D);
  const double scratch = 4.0 * std::max(workers, 1) * (2.0 * Lq * Lk + 1.0);
  const double flush = spec.cold ? static_cast<double>(ColdFlushBytes()) : 0.0;
  return tensors + scratch + flush;
}

}  // namespace attnflow
