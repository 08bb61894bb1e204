// attnflow/rng.h — the project's own random numbers, for the golden writer,
// benchmarks and test data.
//
// Why not <random>: std::mt19937_64 is specified bit for bit, but
// std::normal_distribution / uniform_real_distribution are not — libstdc++,
// libc++ and MSVC draw different values from the same engine, so a golden
// file or a test input made with them depends on the standard library.
//
// Rng is SplitMix64 (Steele, Lea, Flood 2014: a 64-bit state advanced by a
// Weyl constant and finalised by two xor-shift-multiply rounds), fully
// specified here:
//   Next()     the next 64-bit value
//   Uniform()  (Next() >> 11) * 2^-53, in [0, 1), exactly representable
//   Normal()   Marsaglia's polar method on Uniform() pairs (rejection, then
//              u * sqrt(-2 ln s / s); the second value is cached). Uses only
//              IEEE sqrt (correctly rounded) and log (glibc's log is
//              correctly rounded in practice).
// Invariants: the same seed gives the same sequence on every platform and
// compiler; no global state; not for cryptography.
#pragma once

#include <cmath>
#include <cstdint>

namespace attnflow {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // [lo, hi)
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n) (n > 0), by rejection (no modulo bias).
  uint64_t Below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = Next();
    while (x >= limit);
    return x % n;
  }
  // Standard normal N(0, 1).
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u, v, s;
    do {
      u = 2.0 * Uniform() - 1.0;
      v = 2.0 * Uniform() - 1.0;
      s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    const double f = std::sqrt(-2.0 * std::log(s) / s);
    spare_ = v * f;
    has_spare_ = true;
    return u * f;
  }
  double Normal(double mean, double sd) { return mean + sd * Normal(); }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace attnflow
