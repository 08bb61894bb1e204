// cmd_bench.cc — `attnflow bench prefill|decode`: parses the sweep, runs the
// library's harness (BenchAttention, attnflow/bench.h: what is counted and
// how it is timed) per configuration, and prints the results as GFLOP/s, GB/s
// and % of this machine's peaks measured in the same run. `prefill --io`
// runs the flash (tiled_prefill) and naive (materialised S and P) schedules on
// the same shape: modelled DRAM bytes of both, measured time of both, and
// whether their outputs agree (BenchAttentionIo; docs/kernels.md).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "attnflow/bench.h"
#include "attnflow/kernels.h"
#include "cli_common.h"
#include "common_options.h"

namespace attnflow::cli {
namespace {

struct BenchArgs {
  std::string mode;  // prefill | decode
  std::vector<int64_t> batch{1}, heads{8}, kv_heads{0}, q_len{0}, kv_len{0}, head_dim{64};
  std::string causal = "none";
  std::vector<std::string> kv_dtype{"f32"};  // a comma list sweeps (innermost)
  std::string kernel = "auto";
  // The spec fields the options set directly (--window-left/right, --repeat,
  // --warmup, --cold; the spec's defaults are the CLI's); SpecOf adds the
  // shape and the mask of each configuration.
  AttentionBenchSpec base;
  int threads = 0;
  bool json = false;
  bool explain = false;
  bool no_peak = false;
  bool io = false;
};

struct Config {
  int64_t B, H, Hkv, Lq, Lk, D;
};

// The spec of one sweep configuration: its shape, the mask and the timing
// options (kv dtype and kernel choice are set by the caller).
AttentionBenchSpec SpecOf(const Config& c, const BenchArgs& a, Causal causal) {
  AttentionBenchSpec spec = a.base;
  spec.batch = c.B;
  spec.num_heads = c.H;
  spec.num_kv_heads = c.Hkv;
  spec.q_len = c.Lq;
  spec.kv_len = c.Lk;
  spec.head_dim = c.D;
  spec.causal = causal;
  return spec;
}

// The sweep's configurations in order (batch outermost, head_dim innermost)
// with the defaults applied: --kv-heads 0 is --heads; --q-len 0 is 1 for
// decode else 1024; --kv-len 0 is 4096 for decode else the q_len.
std::vector<Config> SweepConfigs(const BenchArgs& a, bool decode) {
  std::vector<Config> configs;
  for (int64_t B : a.batch)
    for (int64_t H : a.heads)
      for (int64_t Hkv0 : a.kv_heads)
        for (int64_t Lq0 : a.q_len)
          for (int64_t Lk0 : a.kv_len)
            for (int64_t D : a.head_dim) {
              const int64_t Hkv = Hkv0 == 0 ? H : Hkv0;
              const int64_t Lq = Lq0 != 0 ? Lq0 : (decode ? 1 : 1024);
              const int64_t Lk = Lk0 != 0 ? Lk0 : (decode ? 4096 : Lq);
              configs.push_back({B, H, Hkv, Lq, Lk, D});
            }
  return configs;
}

// `prefill --io`: one line (or JSON object) per configuration. Exit 1 when
// the outputs do not agree (each schedule within 1e-4·max(1, max|ref|) of the
// float64 reference, or of each other when the reference is skipped).
int RunIo(const BenchArgs& a, Causal causal, ThreadPool& pool) {
  if (!a.json) {
    std::printf("attnflow bench prefill --io — flash (tiled_prefill) vs naive (materialised S, P), "
                "fp32, %d thread(s)\n", pool.NumWorkers());
    std::printf("modelled DRAM bytes: naive = Q + K + V + O + 4·B·H·Lq·Lk·4 (write S, read S, write P, "
                "read P); flash = Q + O + (K + V) per query tile\n");
    std::printf("%3s %3s %4s %6s %6s %4s | %10s %10s %6s | %9s %9s %9s %9s %6s | %9s %9s %9s %s\n",
                "B", "H", "Hkv", "Lq", "Lk", "D", "naive_MiB", "flash_MiB", "ratio", "naive_min",
                "naive_med", "flash_min", "flash_med", "ratio", "|f-n|", "err_naive", "err_flash",
                "agree");
  }
  bool all_agree = true;
  for (const Config& c : SweepConfigs(a, /*decode=*/false)) {
    const AttentionBenchSpec spec = SpecOf(c, a, causal);
    Result<AttentionIoResult> r = BenchAttentionIo(spec, pool);
    if (!r.ok()) {
      PrintError("bench", r.status().message());
      return kExitUsage;
    }
    const bool have_ref = !std::isnan(r->max_abs_ref);
    const double tol = 1e-4 * std::max(1.0, have_ref ? r->max_abs_ref : 1.0);
    const bool agree = have_ref ? (r->max_err_flash <= tol && r->max_err_naive <= tol)
                                : r->max_abs_diff <= tol;
    all_agree = all_agree && agree;
    const double mib = 1.0 / (1 << 20);
    if (a.json) {
      std::printf(
          "{\"mode\":\"prefill_io\",\"threads\":%d,\"batch\":%lld,\"heads\":%lld,"
          "\"kv_heads\":%lld,\"q_len\":%lld,\"kv_len\":%lld,\"head_dim\":%lld,"
          "\"causal\":\"%s\",\"tile_q\":%lld,\"naive_bytes\":%.0f,\"flash_bytes\":%.0f,"
          "\"s_and_p_bytes\":%.0f,\"naive_min_s\":%.9g,\"naive_median_s\":%.9g,"
          "\"flash_min_s\":%.9g,\"flash_median_s\":%.9g,\"max_abs_diff\":%.6g,"
          "\"max_err_naive\":%.6g,\"max_err_flash\":%.6g,\"agree\":%s}\n",
          pool.NumWorkers(), (long long)c.B, (long long)c.H, (long long)spec.num_kv_heads,
          (long long)spec.q_len, (long long)spec.kv_len, (long long)c.D, a.causal.c_str(),
          (long long)r->flash.choice.tile_q, r->io.naive_bytes, r->io.flash_bytes,
          r->io.s_and_p_bytes, r->naive.min_s, r->naive.median_s, r->flash.min_s,
          r->flash.median_s, r->max_abs_diff, have_ref ? r->max_err_naive : -1.0,
          have_ref ? r->max_err_flash : -1.0, agree ? "true" : "false");
    } else {
      std::printf(
          "%3lld %3lld %4lld %6lld %6lld %4lld | %10.2f %10.2f %5.1fx | %9.3f %9.3f %9.3f "
          "%9.3f %5.1fx | %9.2e %9.2e %9.2e %s\n",
          (long long)c.B, (long long)c.H, (long long)spec.num_kv_heads, (long long)spec.q_len,
          (long long)spec.kv_len, (long long)c.D, r->io.naive_bytes * mib,
          r->io.flash_bytes * mib, r->io.naive_bytes / r->io.flash_bytes,
          r->naive.min_s * 1e3, r->naive.median_s * 1e3, r->flash.min_s * 1e3,
          r->flash.median_s * 1e3, r->naive.median_s / r->flash.median_s,
          r->max_abs_diff, r->max_err_naive, r->max_err_flash,
          agree ? "yes" : "NO");
    }
    std::fflush(stdout);
  }
  if (!a.json)
    std::printf("(times in ms: min and median of --repeat runs; err_* = max |out - float64 reference|; "
                "agree: both within 1e-4·max(1, max|ref|))\n");
  return all_agree ? kExitOk : kExitCheckFailed;
}

int RunBench(const BenchArgs& a) {
  Causal causal;
  if (!ParseCausal(a.causal, &causal)) {
    PrintError("bench", "--causal must be none, top_left or bottom_right, got " + a.causal);
    return kExitUsage;
  }
  // The K/V dtypes of the sweep (int8: the int8 KV cache decode,
  // DecodeKvS8, attnflow/kv_int8.h).
  std::vector<DType> kv_dtypes;
  bool any_int8 = false;
  for (const std::string& t : a.kv_dtype) {
    if (t == "f32") kv_dtypes.push_back(DType::kF32);
    else if (t == "f16") kv_dtypes.push_back(DType::kF16);
    else if (t == "bf16") kv_dtypes.push_back(DType::kBF16);
    else if (t == "int8") kv_dtypes.push_back(DType::kI8);
    else {
      PrintError("bench", "--kv-dtype must be f32, f16, bf16 or int8 (or a comma list), got " + t);
      return kExitUsage;
    }
    any_int8 = any_int8 || kv_dtypes.back() == DType::kI8;
  }
  KernelKind force;
  if (!ParseKernelKind(a.kernel, &force)) {
    PrintError("bench", "--kernel must be auto, reference, tiled_prefill, split_kv_decode or naive");
    return kExitUsage;
  }
  if (a.io && (a.mode != "prefill" || a.kv_dtype != std::vector<std::string>{"f32"} ||
               a.kernel != "auto")) {
    PrintError("bench", "--io compares the flash and naive fp32 schedules: it needs mode prefill, "
                        "--kv-dtype f32 and no --kernel");
    return kExitUsage;
  }
  const bool decode = a.mode == "decode";
  if (any_int8) {
    if (!decode) {
      PrintError("bench", "--kv-dtype int8 is the int8 KV cache decode: it needs mode decode");
      return kExitUsage;
    }
    if (force != KernelKind::kAuto && force != KernelKind::kSplitKvDecode) {
      PrintError("bench", "--kv-dtype int8 always runs int8_kv_decode; --kernel may only be auto or "
                          "split_kv_decode (for the float rows of the sweep)");
      return kExitUsage;
    }
    for (int64_t lq : a.q_len) {
      if (lq > 1) {
        PrintError("bench", "--kv-dtype int8 decodes one query per sequence: --q-len must be 1, "
                            "got " + std::to_string(lq));
        return kExitUsage;
      }
    }
    if (causal == Causal::kTopLeft || a.base.window_right > 0) {
      PrintError("bench", "--kv-dtype int8: the query is the newest position; use --causal none or "
                          "bottom_right and no --window-right");
      return kExitUsage;
    }
  }
  // Every configuration is checked before any work (no peak loops, no
  // allocation): positive sizes, and Q, K, V and the output must fit in
  // this machine's memory.
  const double phys = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                      static_cast<double>(::sysconf(_SC_PAGE_SIZE));
  double kv_elem = 1.0;  // the largest element of the sweep (int8: 1 byte)
  for (DType t : kv_dtypes) kv_elem = std::max(kv_elem, static_cast<double>(DTypeSize(t)));
  // The sweep, in order (defaults: Lq 1 for decode else 1024; Lk 4096 for
  // decode else Lq).
  const std::vector<Config> configs = SweepConfigs(a, decode);
  ThreadPool pool(a.threads);
  for (const Config& c : configs) {
    if (c.H % c.Hkv != 0) {
      PrintError("bench", "--heads " + std::to_string(c.H) + " is not a multiple of --kv-heads " +
                              std::to_string(c.Hkv));
      return kExitUsage;
    }
    // (int8 also holds one head's f32 data while it quantises: Lk·D·4.)
    // --io also holds the naive schedule's S and P per worker and the
    // outputs it compares (AttentionIoPeakBytes).
    AttentionBenchSpec io_spec = a.base;
    io_spec.batch = c.B, io_spec.num_heads = c.H, io_spec.num_kv_heads = c.Hkv;
    io_spec.q_len = c.Lq, io_spec.kv_len = c.Lk, io_spec.head_dim = c.D;
    const double bytes =
        a.io ? AttentionIoPeakBytes(io_spec, pool.NumWorkers())
             : 4.0 * c.B * c.H * c.Lq * c.D * 2 + kv_elem * c.B * c.Hkv * c.Lk * c.D * 2 +
                   (any_int8 ? 4.0 * c.Lk * c.D : 0.0);
    if (phys > 0 && bytes > 0.8 * phys) {
      char msg[320];
      std::snprintf(msg, sizeof msg,
                    "B=%lld H=%lld Hkv=%lld Lq=%lld Lk=%lld D=%lld needs %.3g GiB for %s; this "
                    "machine has %.3g GiB of memory",
                    (long long)c.B, (long long)c.H, (long long)c.Hkv, (long long)c.Lq,
                    (long long)c.Lk, (long long)c.D, bytes / (1 << 30),
                    a.io ? "Q, K, V, three outputs and the naive schedule's S and P "
                           "(workers x 2 x Lq x Lk floats)"
                         : "Q, K, V and the output",
                    phys / (1 << 30));
      PrintError("bench", msg);
      return kExitUsage;
    }
  }
  if (a.io) return RunIo(a, causal, pool);
  double peak_gflops = 0, peak_gbps = 0;
  if (!a.no_peak) {
    peak_gflops = MeasurePeakGflops(pool);
    peak_gbps = MeasureReadGBps(pool, size_t{256} << 20);  // >> last-level cache
  }
  if (!a.json) {
    std::printf("attnflow bench %s — %d thread(s), SIMD %s\n", a.mode.c_str(), pool.NumWorkers(),
                PeakTargetName().c_str());
    if (!a.no_peak)
      std::printf("machine peak (measured now): %.1f GFLOP/s fp32 FMA, %.1f GB/s read\n",
                  peak_gflops, peak_gbps);
    std::printf("%-16s %3s %3s %4s %7s %7s %4s %-12s %-4s %10s %10s %9s %8s %8s %9s%s\n", "kernel",
                "B", "H", "Hkv", "Lq", "Lk", "D", "causal", "kv", "min_ms", "median_ms",
                "GFLOP/s", "%peak", "GB/s", "%peak_bw", decode ? "   read_ms vs_read" : "");
    if (decode)
      std::printf("(read_ms: a plain read of the same K/V bytes, same threads, cache state alike; "
                  "vs_read = median_ms / read_ms)\n");
    if (a.base.cold)
      std::printf("(cold caches: an untimed read of %.0f MiB before every timed call%s)\n",
                  static_cast<double>(ColdFlushBytes()) / (1 << 20),
                  decode ? " and every timed read" : "");
  }
  // Each shape with each dtype in turn (so the rows of one shape are
  // measured back to back, under the same machine load).
  for (size_t ci = 0; ci < configs.size() * kv_dtypes.size(); ++ci) {
    const Config& c = configs[ci / kv_dtypes.size()];
    const size_t ti = ci % kv_dtypes.size();
    const DType kv_dtype = kv_dtypes[ti];
    const std::string& kv_name = a.kv_dtype[ti];
    AttentionBenchSpec spec = SpecOf(c, a, causal);
    spec.kv_dtype = kv_dtype;
    spec.force = force;
    spec.measure_read = decode;  // the read is interleaved, not a peak loop
    Result<AttentionBenchResult> res = BenchAttention(spec, pool);
    if (!res.ok()) {
      PrintError("bench", res.status().message());
      return kExitUsage;
    }
    const KernelChoice& choice = res->choice;
    if (a.explain && !a.json) std::printf("explain: %s\n", res->explain.c_str());
    const double tmin = res->min_s, tmed = res->median_s, gflops = res->gflops, gbps = res->gbps;
    const double kv_bytes = res->kv_bytes, read_s = res->read_same_bytes_s;
    const double pct = peak_gflops > 0 ? 100.0 * gflops / peak_gflops : 0.0;
    const double pct_bw = peak_gbps > 0 ? 100.0 * gbps / peak_gbps : 0.0;
    const char* kname = res->kernel.c_str();
    if (a.json) {
      std::printf(
          "{\"mode\":\"%s\",\"kernel\":\"%s\",\"simd\":\"%s\",\"threads\":%d,\"batch\":%lld,"
          "\"heads\":%lld,\"kv_heads\":%lld,\"q_len\":%lld,\"kv_len\":%lld,\"head_dim\":%lld,"
          "\"causal\":\"%s\",\"kv_dtype\":\"%s\",\"repeat\":%d,\"min_s\":%.9g,\"median_s\":%.9g,"
          "\"gflops\":%.6g,\"gbps\":%.6g,\"peak_gflops\":%.6g,\"peak_gbps\":%.6g,"
          "\"pct_peak_gflops\":%.4g,\"pct_peak_gbps\":%.4g,\"kv_bytes\":%.0f,"
          "\"peak_rss_bytes\":%lld,\"tile_q\":%lld,\"tile_kv\":%lld,\"num_splits\":%lld,"
          "\"read_same_bytes_s\":%.9g,\"read_median_s\":%.9g,\"median_vs_read\":%.4g,"
          "\"cold\":%s,\"flush_bytes\":%.0f,\"reason\":\"%s\"}\n",
          a.mode.c_str(), kname, choice.simd_target.c_str(), pool.NumWorkers(),
          (long long)c.B, (long long)c.H, (long long)c.Hkv, (long long)c.Lq, (long long)c.Lk,
          (long long)c.D, a.causal.c_str(), kv_name.c_str(), a.base.repeat, tmin, tmed, gflops,
          gbps, peak_gflops, peak_gbps, pct, pct_bw, kv_bytes, (long long)PeakRssSinceExecBytes(),
          (long long)choice.tile_q, (long long)choice.tile_kv, (long long)choice.num_splits,
          read_s, res->read_median_s, read_s > 0 ? tmed / read_s : 0.0,
          a.base.cold ? "true" : "false", res->flush_bytes, [&] {
            std::string s;
            for (char ch : choice.reason) s += (ch == '"' || ch == '\\') ? '\'' : ch;
            return s;
          }().c_str());
    } else {
      auto pct_str = [](double v, bool have) {
        char b[32];
        if (have) std::snprintf(b, sizeof b, "%7.1f%%", v);
        else std::snprintf(b, sizeof b, "%8s", "-");
        return std::string(b);
      };
      std::printf("%-16s %3lld %3lld %4lld %7lld %7lld %4lld %-12s %-4s %10.4f %10.4f %9.1f %s %8.1f %s",
                  kname, (long long)c.B, (long long)c.H, (long long)c.Hkv, (long long)c.Lq,
                  (long long)c.Lk, (long long)c.D, a.causal.c_str(), kv_name.c_str(),
                  tmin * 1e3, tmed * 1e3, gflops, pct_str(pct, peak_gflops > 0).c_str(), gbps,
                  pct_str(pct_bw, peak_gbps > 0).c_str());
      if (decode) {
        if (read_s > 0) std::printf(" %9.4f %6.2fx", read_s * 1e3, tmed / read_s);
        else std::printf(" %9s %7s", "-", "-");
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  if (!a.json)
    std::printf("peak RSS %.1f MiB\n", static_cast<double>(PeakRssSinceExecBytes()) / (1 << 20));
  return kExitOk;
}

void AddBenchOptions(CLI::App& sub, BenchArgs& a) {
  sub.add_option("mode", a.mode, "prefill or decode")
      ->required()
      ->check(CLI::IsMember({"prefill", "decode"}));
  // Lengths have no fixed bound: they are checked against memory first.
  sub.add_option("--batch", a.batch, "B (comma list sweeps)")->delimiter(',')
      ->check(InRange(1, 1 << 20));
  sub.add_option("--heads", a.heads, "H")->delimiter(',')->check(InRange(int64_t{1}, int64_t{1} << 16));
  sub.add_option("--kv-heads", a.kv_heads, "Hkv (0 = H)")->delimiter(',')
      ->check(InRange(int64_t{0}, int64_t{1} << 16));
  sub.add_option("--q-len", a.q_len, "Lq (0 = 1024 prefill, 1 decode)")->delimiter(',')
      ->check(NonNegative());
  sub.add_option("--kv-len", a.kv_len, "Lk (0 = Lq prefill, 4096 decode)")->delimiter(',')
      ->check(NonNegative());
  sub.add_option("--head-dim", a.head_dim, "D")->delimiter(',')->check(InRange(int64_t{1}, int64_t{4096}));
  AddCausalOption(sub, a.causal);
  sub.add_option("--kv-dtype", a.kv_dtype,
                 "f32 | f16 | bf16 | int8 (int8: the micro library's int8 KV cache, decode only; "
                 "a comma list runs each shape with each dtype in turn, e.g. f16,int8)")
      ->delimiter(',');
  sub.add_option("--kernel", a.kernel,
                 "auto | reference | tiled_prefill | split_kv_decode | naive (naive: "
                 "materialised fp32 S and P, only when asked)");
  sub.add_flag("--io", a.io,
               "prefill: flash vs naive schedule on each shape: modelled DRAM bytes, "
               "measured time, output agreement");
  AddWindowOptions(sub, a.base.window_left, a.base.window_right);
  sub.add_option("--threads", a.threads, "Worker threads (0 = all cores)")->check(InRange(0, 1024));
  sub.add_option("--repeat", a.base.repeat, "Timed repetitions")->check(InRange(1, 100000));
  sub.add_option("--warmup", a.base.warmup, "Untimed warm-up calls (and at least 0.25 s of them when > 0)")->check(InRange(0, 1000));
  sub.add_flag("--cold", a.base.cold,
               "Evict every cache (an untimed read of max(256 MiB, 4 x LLC)) before each "
               "timed call and each timed read: K/V and the read both from DRAM");
  sub.add_flag("--json", a.json, "One JSON object per line per configuration");
  sub.add_flag("--explain", a.explain, "Print the kernel choice and its reason");
  sub.add_flag("--no-peak", a.no_peak, "Skip the peak measurements");
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    bench, "bench", "Benchmark prefill or decode attention; GFLOP/s, GB/s, % of measured peak",
    ArgsCommand<BenchArgs>(AddBenchOptions, RunBench));

}  // namespace attnflow::cli
