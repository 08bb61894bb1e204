// afdump_writer.h — an AFDUMP writer made from docs/device-dump.md alone, for
// the tests of the parser (tests/io/device_dump_test.cc) and of `verify
// --compare` (tests/cli/cli_verify_dump_test.cc). It shares no code with
// src/io/device_dump.cc: its own FNV-1a, its own number formatting, and it
// writes whatever it is told (tests build broken dumps with it too).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace attnflow::testing {

inline uint32_t SpecFnv(const std::vector<uint8_t>& bytes) {
  uint32_t h = 2166136261u;  // 0x811c9dc5
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 16777619u;  // 0x01000193
  }
  return h;
}

struct SpecWriter {
  std::string out;
  std::string eol = "\n";
  int per_line = 16;

  void Raw(const std::string& line) { out += line + eol; }
  void Header(const std::string& name, const std::string& kind, const std::string& impl) {
    Raw("AFDUMP attnflow-dump/1 case=" + name + " kind=" + kind + " impl=" + impl);
  }
  void Tensor(const std::string& stage, const std::string& dtype,
              const std::vector<int64_t>& shape) {
    std::string l = "AFDUMP tensor " + stage + " " + dtype + " " + std::to_string(shape.size());
    for (int64_t d : shape) l += " " + std::to_string(d);
    Raw(l);
  }
  // One part of elements [off, off + n): item(e, &bytes) appends element e's
  // little-endian bytes and returns its text.
  template <typename Item>
  void Part(const std::string& stage, size_t off, size_t n, Item item) {
    Raw("AFDUMP part " + stage + " " + std::to_string(off) + " " + std::to_string(n));
    std::vector<uint8_t> bytes;
    std::string l;
    for (size_t i = 0; i < n; ++i) {
      l += std::string(l.empty() ? "AFDUMP d " : " ") + item(off + i, &bytes);
      if ((i + 1) % size_t(per_line) == 0 || i + 1 == n) {
        Raw(l);
        l.clear();
      }
    }
    char fnv[16];
    std::snprintf(fnv, sizeof(fnv), "%08x", SpecFnv(bytes));
    Raw("AFDUMP end " + stage + " " + std::to_string(off) + " " + std::to_string(n) + " " + fnv);
  }
  // f32 values of elements [off, off + n) of `v`.
  void PartF32(const std::string& stage, const std::vector<float>& v, size_t off, size_t n) {
    Part(stage, off, n, [&v](size_t e, std::vector<uint8_t>* bytes) {
      uint32_t u;
      std::memcpy(&u, &v[e], 4);
      for (int b = 0; b < 4; ++b) bytes->push_back(uint8_t(u >> (8 * b)));
      char hex[16];
      std::snprintf(hex, sizeof(hex), "%08x", u);
      return std::string(hex);
    });
  }
  // i8 (bytes = 1) or i32 (bytes = 4) values.
  void PartInt(const std::string& stage, const std::vector<int64_t>& v, int nbytes, size_t off,
               size_t n) {
    Part(stage, off, n, [&v, nbytes](size_t e, std::vector<uint8_t>* bytes) {
      const uint32_t u = static_cast<uint32_t>(v[e]);
      for (int b = 0; b < nbytes; ++b) bytes->push_back(uint8_t(u >> (8 * b)));
      return std::to_string(v[e]);
    });
  }
  void Done(const std::string& name) { Raw("AFDUMP done " + name); }
};

}  // namespace attnflow::testing
