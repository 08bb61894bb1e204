// attnflow/bench.h — machine peaks measured in the same run as a benchmark,
// so results can be stated as % of this machine's peak.
//
//  * MeasurePeakGflops: fp32 FMA throughput with many independent vector
//    accumulators per worker (Highway, best target of this CPU), all workers
//    of `pool` at once. Counts 2 flops per FMA lane.
//  * MeasureReadGBps: streaming read bandwidth over a buffer of `bytes`
//    (choose it larger than the last-level cache), split across the workers.
// Both return the best of `repeats` timed runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "attnflow/kernels.h"
#include "attnflow/status.h"
#include "attnflow/threading.h"

namespace attnflow {

double MeasurePeakGflops(ThreadPool& pool, int repeats = 5);
double MeasureReadGBps(ThreadPool& pool, size_t bytes, int repeats = 5);
// One timed plain read (seconds) of buf[0, n) split across the workers of
// `pool` as MeasureReadGBps does (n a multiple of 64 * workers); used to
// interleave the read with the timed calls of BenchAttention.
double TimePlainRead(ThreadPool& pool, const float* buf, int64_t n);

// A buffer for plain reads of about `bytes`: PlainReadFloats(bytes, workers)
// floats (rounded down to whole 64-float chunks per worker), first touched
// by the worker that reads each chunk. Read() times one read of it with the
// pool (TimePlainRead) and scales the seconds to exactly `bytes`. Behind
// MeasureReadGBps, BenchAttention's interleaved read and cold-cache flush,
// and `generate --floor-bytes`.
int64_t PlainReadFloats(int64_t bytes, int workers);
class PlainReadBuffer {
 public:
  // Errors: fewer bytes than one chunk per worker; allocation failure
  // (messages start with `what`, e.g. "bench: the plain-read buffer").
  static Result<PlainReadBuffer> Make(ThreadPool& pool, int64_t bytes, const std::string& what);
  PlainReadBuffer(PlainReadBuffer&& o) noexcept;
  PlainReadBuffer& operator=(PlainReadBuffer&& o) noexcept;
  ~PlainReadBuffer();
  double Read() const;                                        // seconds, scaled to bytes()
  int64_t bytes() const { return bytes_; }                    // as asked
  double buffer_bytes() const { return static_cast<double>(n_) * sizeof(float); }  // as read

 private:
  PlainReadBuffer(ThreadPool* pool, int64_t bytes, int64_t n) : pool_(pool), bytes_(bytes), n_(n) {}
  ThreadPool* pool_;
  int64_t bytes_, n_;
  float* buf_ = nullptr;
};
// Name of the SIMD target the peak loop used (e.g. "AVX3_ZEN4").
std::string PeakTargetName();

// The one peak-RSS figure of attnflow (the CLI's reports, the benches):
// the peak resident set size of this program since it started, i.e. since
// the execve that loaded it, in bytes — Linux's VmHWM of /proc/self/status.
// Not getrusage's ru_maxrss: Linux carries that over an execve, so a
// program started by a larger process (a fork + exec from Python with torch
// loaded, a benchmark driver) reports the parent's peak. Where /proc is not
// readable: ru_maxrss (the same figure unless such an exec happened); -1 if
// neither can be read.
int64_t PeakRssSinceExecBytes();

// ---- the attention benchmark harness (behind `attnflow bench`) ---------------
//
// Times the kernels on one shape with random N(0, 1) inputs (attnflow/rng.h,
// seed 1). Useful FLOPs count only visible (query, key) pairs, from the
// shared semantics: 2·(D + Dv) per pair. Bytes count the K/V that must be
// read at least once: B·Hkv·keys_visible_to_some_row·(D + Dv)·sizeof(kv).
// Runs `warmup` untimed calls (for at least 0.25 s when warmup > 0: a fresh
// process needs ~0.1 s before the scheduler spreads its threads) and
// `repeat` timed calls; reports min and median seconds, GFLOP/s and GB/s
// from the median.
//
// kv_dtype kI8 times the int8 KV cache decode instead (DecodeKvS8,
// attnflow/kv_int8.h): one cache per sequence in the micro library's layout
// (K rows, V columns, capacity = kv_len, every position appended; window =
// window_left + 1 when window_left >= 0), K and V of each (b, kv head) drawn
// N(0, 1) and quantised with the symmetric scale max|x| / 127; q_len must be
// 1 and force is ignored. Its bytes are those DecodeKvS8Bytes counts: 1 per
// K/V element of every visible position plus the float scales.
struct AttentionBenchSpec {
  int64_t batch = 1, num_heads = 8, num_kv_heads = 8, q_len = 1024, kv_len = 1024, head_dim = 64;
  DType kv_dtype = DType::kF32;  // F32, F16, BF16, or I8 (the int8 KV cache decode)
  Causal causal = Causal::kNone;
  int64_t window_left = -1, window_right = -1;
  KernelKind force = KernelKind::kAuto;
  int repeat = 10, warmup = 2;
  // Also time a plain read of the same K/V bytes, same threads, cache state
  // alike (the floor of a decode step): one read after every timed call
  // (interleaved, so both see the same machine load); min and median.
  bool measure_read = false;
  // Cold caches: before every timed call and every timed read, an untimed
  // read of a separate buffer of ColdFlushBytes() evicts K, V and the read
  // buffer from every cache level, so both come from DRAM (as in a model
  // step, where the other layers' weights and caches ran in between).
  // Without it, a call and its read alternate and each finds what the other
  // left of its data in the last-level cache: for K/V near half that cache's
  // size the two can land in different regimes (docs/kernels.md).
  bool cold = false;
};

// The bytes one cold-cache flush reads: max(256 MiB, 4 x the largest cache
// of cpu0 in Linux sysfs; 256 MiB where sysfs is not there).
int64_t ColdFlushBytes();

struct AttentionBenchResult {
  KernelChoice choice;              // for I8: target, tile, splits, tasks and reason only
  std::string kernel;               // "split_kv_decode", ..., or "int8_kv_decode"
  std::string explain;              // the choice as --explain prints it
  double min_s = 0, median_s = 0;
  double flops = 0, gflops = 0;     // useful FLOPs, per second at the median
  double kv_bytes = 0, gbps = 0;    // K/V bytes that must be read, GB/s at the median
  double read_same_bytes_s = 0;     // min of the interleaved reads; 0 when not measured
  double read_median_s = 0;         // their median; 0 when not measured
  int64_t flushes = 0;              // cold-cache flushes run (2 per timed call with a read)
  double flush_bytes = 0;           // bytes each flush read; 0 when not cold
};

// Errors (invalid shapes, allocation failure) name the op and the shapes.
Result<AttentionBenchResult> BenchAttention(const AttentionBenchSpec& spec, ThreadPool& pool);

// `attnflow bench prefill --io`: the same shape through the flash schedule
// (tiled_prefill) and the naive materialised one (naive), each timed by
// BenchAttention (spec.force is ignored), the modelled DRAM traffic of both
// (ModelAttentionIo with the flash plan's tile_q), and agreement of the
// outputs: max |flash − naive|, and each against reference::Sdpa (float64)
// when B·H·Lq·Lk·D <= 2^31 (else the reference errors are NaN).
struct AttentionIoResult {
  AttentionBenchResult flash, naive;
  IoModel io;
  double max_abs_diff = 0;                        // |flash − naive|
  double max_err_flash = 0, max_err_naive = 0;    // against the float64 reference
  double max_abs_ref = 0;                         // max |reference out|
};
Result<AttentionIoResult> BenchAttentionIo(const AttentionBenchSpec& spec, ThreadPool& pool);
// The most bytes BenchAttentionIo holds at once on `workers` workers: q, k,
// v and three outputs (flash, naive, reference), the naive schedule's S and
// P scratch (workers x 2 x Lq x Lk floats) and the cold-cache flush buffer
// when spec.cold; for a check before any work starts.
double AttentionIoPeakBytes(const AttentionBenchSpec& spec, int workers);

}  // namespace attnflow
