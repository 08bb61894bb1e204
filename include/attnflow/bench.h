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

#include "attnflow/threading.h"

namespace attnflow {

double MeasurePeakGflops(ThreadPool& pool, int repeats = 5);
double MeasureReadGBps(ThreadPool& pool, size_t bytes, int repeats = 5);
// Name of the SIMD target the peak loop used (e.g. "AVX3_ZEN4").
std::string PeakTargetName();

// Peak resident set size of this process so far, in bytes.
int64_t PeakRssBytes();

}  // namespace attnflow
