// semantics.cc — names and ALiBi slopes for attnflow/semantics.h.
#include "attnflow/semantics.h"

#include <cmath>

namespace attnflow {

const char* CausalName(Causal c) {
  switch (c) {
    case Causal::kNone: return "none";
    case Causal::kTopLeft: return "top_left";
    case Causal::kBottomRight: return "bottom_right";
  }
  return "?";
}

bool ParseCausal(std::string_view s, Causal* out) {
  if (s == "none") *out = Causal::kNone;
  else if (s == "top_left") *out = Causal::kTopLeft;
  else if (s == "bottom_right") *out = Causal::kBottomRight;
  else return false;
  return true;
}

const char* KvAlignName(KvAlign a) {
  return a == KvAlign::kPerSequence ? "per_sequence" : "padded";
}

bool ParseKvAlign(std::string_view s, KvAlign* out) {
  if (s == "padded") *out = KvAlign::kPadded;
  else if (s == "per_sequence") *out = KvAlign::kPerSequence;
  else return false;
  return true;
}

namespace {
// Slopes for a power-of-two head count n: start = 2^(-8/n), slope_k = start^k.
void PowerOfTwoSlopes(int64_t n, double* out) {
  const double start = std::pow(2.0, -8.0 / static_cast<double>(n));
  double s = start;
  for (int64_t k = 0; k < n; ++k) {
    out[k] = s;
    s *= start;
  }
}
}  // namespace

void AlibiSlopes(int64_t num_heads, double* out) {
  if (num_heads <= 0) return;
  int64_t n = 1;
  while (n * 2 <= num_heads) n *= 2;
  PowerOfTwoSlopes(n, out);
  if (n == num_heads) return;
  // Remainder: every other slope of the 2n sequence, starting at the first.
  std::vector<double> extra(static_cast<size_t>(2 * n));
  PowerOfTwoSlopes(2 * n, extra.data());
  for (int64_t k = 0; k < num_heads - n; ++k) out[n + k] = extra[2 * k];
}

}  // namespace attnflow
