// fuzz_common.h — shared plumbing of the attnflow fuzz harnesses.
//
// Every harness is ONE header, fuzz/targets/<name>.h, that defines
//   inline void Fuzz<Name>(const uint8_t* data, size_t size);
// and registers it with ATTNFLOW_FUZZ_REGISTER(<name>, Fuzz<Name>). It is
// compiled two ways:
//  * fuzz/CMakeLists.txt generates <name>_fuzz.cc (LLVMFuzzerTestOneInput
//    calling the registered function) for the clang/libFuzzer build with
//    ASan + UBSan — nothing to write by hand;
//  * tests/fault/fault_regress_test.cc includes it in the normal GoogleTest build
//    and replays the committed seeds (fuzz/corpus/<name>/) and crash inputs
//    (tests/regress/<name>/).
// A harness never relies on the sanitizer alone: property violations (wrong
// numbers, broken invariants, an escaping exception) go through FUZZ_CHECK,
// which aborts in the fuzzer (libFuzzer records the input as a crash) and is
// turned into a test failure by the GoogleTest replay.
//
// Invariants: nothing here allocates through attnflow's hookable allocator;
// ByteReader never reads outside [data, data+size) and returns zeros once
// the input is exhausted, so harness decoding is total over any input.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace attnflow_fuzz {

// ---- failure reporting ------------------------------------------------------
using FailureHandler = void (*)(const char* file, int line,
                                const std::string& what);

[[noreturn]] inline void AbortingHandler(const char* file, int line,
                                         const std::string& what) {
  std::fprintf(stderr, "\n==== attnflow fuzz check failed at %s:%d\n%s\n", file,
               line, what.c_str());
  std::fflush(stderr);
  std::abort();
}

inline FailureHandler& OnFailure() {
  static FailureHandler handler = &AbortingHandler;
  return handler;
}

inline void Fail(const char* file, int line, const std::string& what) {
  OnFailure()(file, line, what);
  // A handler that returns (the GoogleTest replay throws instead) still must
  // not let the harness continue on a broken state.
  std::abort();
}

// ---- target registry ------------------------------------------------------------
using TargetFn = void (*)(const uint8_t* data, size_t size);
struct Target {
  const char* name;
  TargetFn fn;
};
inline std::vector<Target>& Registry() {
  static std::vector<Target> targets;
  return targets;
}
struct Registrar {
  Registrar(const char* name, TargetFn fn) { Registry().push_back({name, fn}); }
};
// nullptr when no harness of that name was compiled in.
inline TargetFn FindTarget(std::string_view name) {
  for (const Target& t : Registry()) {
    if (name == t.name) return t.fn;
  }
  return nullptr;
}

}  // namespace attnflow_fuzz

// At namespace scope inside attnflow_fuzz: registers `fn` under `name` (the
// header's file name without .h). An inline variable, so a header included
// by several translation units registers once.
#define ATTNFLOW_FUZZ_REGISTER(name, fn) \
  inline const ::attnflow_fuzz::Registrar attnflow_fuzz_registrar_##name{#name, &fn}

#define FUZZ_CHECK(cond, msg)                                              \
  do {                                                                     \
    if (!(cond)) {                                                         \
      ::attnflow_fuzz::Fail(__FILE__, __LINE__,                            \
                            std::string("FUZZ_CHECK(" #cond ") failed: ") + \
                                (msg));                                    \
    }                                                                      \
  } while (0)

namespace attnflow_fuzz {

// ---- input decoding -----------------------------------------------------------
// Consumes an input front to back. Past the end every read yields 0 / empty,
// so a decoder is a total function of the bytes (short inputs decode to the
// "smallest" configuration).
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : p_(data), n_(size) {}

  size_t remaining() const { return n_ - i_; }
  bool empty() const { return i_ >= n_; }

  uint8_t U8() { return i_ < n_ ? p_[i_++] : 0; }
  uint16_t U16() {
    const uint16_t lo = U8();
    return static_cast<uint16_t>(lo | (static_cast<uint16_t>(U8()) << 8));
  }
  uint32_t U32() {
    const uint32_t lo = U16();
    return lo | (static_cast<uint32_t>(U16()) << 16);
  }
  uint64_t U64() {
    const uint64_t lo = U32();
    return lo | (static_cast<uint64_t>(U32()) << 32);
  }
  bool Bool() { return (U8() & 1) != 0; }
  // Uniform-ish integer in [lo, hi] (inclusive); lo when hi <= lo.
  int64_t Range(int64_t lo, int64_t hi) {
    if (hi <= lo) return lo;
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    const uint64_t v = span <= 256 ? U8() : span <= 65536 ? U16() : U32();
    return lo + static_cast<int64_t>(v % span);
  }
  // Picks one of n choices.
  size_t Pick(size_t n) { return n <= 1 ? 0 : static_cast<size_t>(U8() % n); }
  float F32() {
    const uint32_t u = U32();
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  // Up to max_len bytes (length prefix, then the bytes).
  std::string Bytes(size_t max_len) {
    size_t len = static_cast<size_t>(U16()) % (max_len + 1);
    if (len > remaining()) len = remaining();
    std::string s(reinterpret_cast<const char*>(p_ + i_), len);
    i_ += len;
    return s;
  }
  // Everything that is left.
  std::string Rest() {
    std::string s(reinterpret_cast<const char*>(p_ + i_), remaining());
    i_ = n_;
    return s;
  }

 private:
  const uint8_t* p_;
  size_t n_;
  size_t i_ = 0;
};

// Small deterministic generator (splitmix64) for bulk values: the fuzzer
// controls the seed and the structure, not every float.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t Next() {
    uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Approximately standard normal (sum of 4 uniforms, rescaled): cheap, never
  // exactly zero-heavy, bounded by |x| < 3.5.
  double Normal() {
    double s = 0;
    for (int i = 0; i < 4; ++i) s += Uniform();
    return (s - 2.0) * 1.7320508075688772;
  }
  uint64_t Below(uint64_t n) { return n == 0 ? 0 : Next() % n; }

 private:
  uint64_t s_;
};

// Strict UTF-8 check (RFC 3629: no overlongs, surrogates or > U+10FFFF),
// written independently of the library's decoders.
inline bool IsUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace attnflow_fuzz
