// attnflow/sampling.h — next-token selection from logits: greedy, or
// temperature + top-k + top-p sampling with a seeded, portable RNG.
//
// Invariants:
//  * temperature <= 0 means greedy: the lowest id among the maximal logits
//    (no randomness, the RNG is not advanced).
//  * Sampling is a pure function of (logits, options, number of previous
//    draws): the RNG is SplitMix64 seeded with `seed`, and the uniform draw
//    is built from its top 53 bits, so sequences are identical on every
//    platform and standard library.
//  * Order of filters (as in transformers / llama.cpp): logits / temperature,
//    keep the top_k largest (0 = all; ties by lower id), softmax (in double),
//    keep the smallest prefix (by descending probability) whose mass reaches
//    top_p (always at least one token), renormalise, draw.
//  * NaN logits never get picked (treated as -inf); all -inf/NaN rows give an
//    error.
#pragma once

#include <cstdint>
#include <vector>

#include "attnflow/status.h"

namespace attnflow {

struct SamplingOptions {
  double temperature = 0.0;  // <= 0: greedy
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // (0, 1]
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& opt);
  // Validates the options (top_p in (0,1], top_k >= 0, finite temperature).
  static Status Validate(const SamplingOptions& opt);
  // logits: n floats. Returns the chosen id.
  Result<int32_t> Sample(const float* logits, int64_t n);
  // Next uniform double in [0, 1) (exposed for tests).
  double NextUniform();

 private:
  SamplingOptions opt_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> buf_;
};

// Greedy argmax (lowest id on ties, NaN ignored); -1 if no finite maximum.
int32_t ArgMax(const float* logits, int64_t n);

}  // namespace attnflow
