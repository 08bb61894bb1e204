// sampling.cc — greedy / temperature / top-k / top-p sampling (see
// attnflow/sampling.h for the exact order of operations and the RNG).
#include "attnflow/sampling.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace attnflow {

int32_t ArgMax(const float* logits, int64_t n) {
  int32_t best = -1;
  float bv = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == -INFINITY) continue;
    if (best < 0 || v > bv) {
      best = static_cast<int32_t>(i);
      bv = v;
    }
  }
  return best;
}

Sampler::Sampler(const SamplingOptions& opt) : opt_(opt), state_(opt.seed) {}

Status Sampler::Validate(const SamplingOptions& o) {
  if (!std::isfinite(o.temperature)) return InvalidArgument("sampling: temperature must be finite");
  if (o.top_k < 0) return InvalidArgument("sampling: top_k must be >= 0, got " + std::to_string(o.top_k));
  if (!(o.top_p > 0.0 && o.top_p <= 1.0)) {
    return InvalidArgument("sampling: top_p must be in (0, 1], got " + std::to_string(o.top_p));
  }
  return Status::Ok();
}

double Sampler::NextUniform() {
  // SplitMix64.
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

Result<int32_t> Sampler::Sample(const float* logits, int64_t n) {
  ATTNFLOW_RETURN_IF_ERROR(Validate(opt_));
  if (n <= 0) return InvalidArgument("sampling: empty logits");
  if (opt_.temperature <= 0.0) {
    const int32_t id = ArgMax(logits, n);
    if (id < 0) return InvalidArgument("sampling: no finite logit among " + std::to_string(n));
    return id;
  }
  buf_.clear();
  for (int64_t i = 0; i < n; ++i) {
    const float v = logits[i];
    if (std::isnan(v) || v == -INFINITY) continue;
    buf_.emplace_back(v, static_cast<int32_t>(i));
  }
  if (buf_.empty()) return InvalidArgument("sampling: no finite logit among " + std::to_string(n));
  auto cmp = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  };
  size_t k = buf_.size();
  if (opt_.top_k > 0 && static_cast<size_t>(opt_.top_k) < k) k = static_cast<size_t>(opt_.top_k);
  std::partial_sort(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(k), buf_.end(), cmp);
  buf_.resize(k);
  std::vector<double> p(k);
  const double mx = static_cast<double>(buf_[0].first) / opt_.temperature;
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    p[i] = std::exp(static_cast<double>(buf_[i].first) / opt_.temperature - mx);
    sum += p[i];
  }
  size_t keep = k;
  if (opt_.top_p < 1.0) {
    double acc = 0;
    for (size_t i = 0; i < k; ++i) {
      acc += p[i] / sum;
      if (acc >= opt_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double mass = 0;
  for (size_t i = 0; i < keep; ++i) mass += p[i];
  const double r = NextUniform() * mass;
  double acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += p[i];
    if (r < acc) return buf_[i].second;
  }
  return buf_[keep - 1].second;
}

}  // namespace attnflow
