// device_dump.h (fuzz harness) — the AFDUMP parser (ParseDeviceDump, the
// device-dump input of `attnflow verify --compare`) on arbitrary text.
//
// Properties beyond "no crash, no sanitizer report, no escaping exception":
//  * a rejected dump gives kCorrupt (or kResourceExhausted) with a message
//    "device dump: fuzz.log:<line>: ..." whose line exists in the text;
//  * an accepted dump is consistent: every stage holds exactly numel values
//    in the storage of its dtype, rank <= 8, and the values take at most
//    2 bytes per byte of text (the declared-elements bound);
//  * it round-trips: the harness writes every block again with its own
//    writer (made from docs/device-dump.md: its own FNV-1a and formatting,
//    one part per stage), the parser reads the same blocks, names, shapes and
//    value bits back, and SelectDumpBlock finds each block by its case and
//    implementation.
#pragma once

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "../common/fuzz_common.h"
#include "attnflow/device_dump.h"

namespace attnflow_fuzz {

namespace device_dump_detail {

inline uint32_t Fnv(uint32_t h, uint8_t b) { return (h ^ b) * 0x01000193u; }

inline std::string Write(const attnflow::DeviceDump& d) {
  using attnflow::DType;
  std::string o;
  char buf[32];
  for (const auto& b : d.blocks) {
    o +=
        "AFDUMP attnflow-dump/1 case=" + b.case_name + " kind=" + b.kind + " impl=" + b.impl + "\n";
    for (const auto& s : b.stages) {
      o += "AFDUMP tensor " + s.name + " " +
           (s.dtype == DType::kF32  ? "f32"
            : s.dtype == DType::kI8 ? "i8"
                                    : "i32") +
           " " + std::to_string(s.shape.size());
      for (int64_t x : s.shape) o += " " + std::to_string(x);
      o += "\n";
    }
    for (const auto& s : b.stages) {
      const int64_t n = s.numel();
      o += "AFDUMP part " + s.name + " 0 " + std::to_string(n) + "\n";
      uint32_t h = 0x811c9dc5u;
      for (int64_t i = 0; i < n; ++i) {
        if (i % 16 == 0) o += i == 0 ? "AFDUMP d" : "\nAFDUMP d";
        if (s.dtype == DType::kF32) {
          uint32_t u;
          std::memcpy(&u, &s.f32[size_t(i)], 4);
          for (int k = 0; k < 4; ++k) h = Fnv(h, uint8_t(u >> (8 * k)));
          std::snprintf(buf, sizeof(buf), " %08x", u);
        } else if (s.dtype == DType::kI8) {
          h = Fnv(h, uint8_t(s.i8[size_t(i)]));
          std::snprintf(buf, sizeof(buf), " %d", int(s.i8[size_t(i)]));
        } else {
          const uint32_t u = uint32_t(s.i32[size_t(i)]);
          for (int k = 0; k < 4; ++k) h = Fnv(h, uint8_t(u >> (8 * k)));
          std::snprintf(buf, sizeof(buf), " %ld", long(s.i32[size_t(i)]));
        }
        o += buf;
      }
      if (n > 0) o += "\n";
      std::snprintf(buf, sizeof(buf), " %08x\n", h);
      o += "AFDUMP end " + s.name + " 0 " + std::to_string(n) + buf;
    }
    o += "AFDUMP done " + b.case_name + "\n";
  }
  return o;
}

}  // namespace device_dump_detail

inline void FuzzDeviceDump(const uint8_t* data, size_t size) {
  using namespace attnflow;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)LooksLikeDeviceDump(text);
  Result<DeviceDump> d = ParseDeviceDump(text, "fuzz.log");
  if (!d.ok()) {
    const Status& st = d.status();
    FUZZ_CHECK(st.code() == StatusCode::kCorrupt || st.code() == StatusCode::kResourceExhausted,
               "unexpected status " + st.ToString());
    const std::string prefix = "device dump: fuzz.log:";
    FUZZ_CHECK(st.message().rfind(prefix, 0) == 0,
               "message does not name the file: " + st.ToString());
    if (st.code() == StatusCode::kCorrupt) {
      const long line = std::strtol(st.message().c_str() + prefix.size(), nullptr, 10);
      long lines = 1;
      for (size_t i = 0; i + 1 < size; ++i) lines += data[i] == '\n';
      FUZZ_CHECK(line >= 1 && line <= lines, "line " + std::to_string(line) +
                                                 " outside the text's " + std::to_string(lines) +
                                                 " lines: " + st.ToString());
    }
    return;
  }
  int64_t bytes = 0;
  for (const auto& b : d->blocks) {
    for (const auto& s : b.stages) {
      FUZZ_CHECK(s.shape.size() <= size_t(kDeviceDumpMaxRank), "rank above 8");
      const size_t n = size_t(s.numel());
      const size_t have = s.dtype == DType::kF32  ? s.f32.size()
                          : s.dtype == DType::kI8 ? s.i8.size()
                                                  : s.i32.size();
      FUZZ_CHECK(have == n, "stage '" + s.name + "' holds " + std::to_string(have) +
                                " values for " + std::to_string(n) + " elements");
      FUZZ_CHECK(s.f32.size() + s.i8.size() + s.i32.size() == n, "storage in two dtypes");
      bytes += int64_t(n * DTypeSize(s.dtype));
    }
    Result<const DumpBlock*> sel = SelectDumpBlock(d.value(), b.case_name, b.impl);
    FUZZ_CHECK(sel.ok() && sel.value() == &b, "SelectDumpBlock does not find its block");
  }
  FUZZ_CHECK(bytes <= 2 * int64_t(size) + 8, "values take more than 2 bytes per byte of text");
  // Round trip through the harness's own writer.
  const std::string again = device_dump_detail::Write(d.value());
  Result<DeviceDump> e = ParseDeviceDump(again, "again.log");
  FUZZ_CHECK(e.ok(), "the re-written dump is rejected: " + e.status().ToString() + "\n" + again);
  FUZZ_CHECK(e->blocks.size() == d->blocks.size(), "block count changed");
  for (size_t i = 0; i < d->blocks.size(); ++i) {
    const DumpBlock &x = d->blocks[i], &y = e->blocks[i];
    FUZZ_CHECK(x.case_name == y.case_name && x.kind == y.kind && x.impl == y.impl &&
                   x.stages.size() == y.stages.size(),
               "block header changed");
    for (size_t k = 0; k < x.stages.size(); ++k) {
      const DumpStage &a = x.stages[k], &b = y.stages[k];
      FUZZ_CHECK(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape, "stage changed");
      FUZZ_CHECK(
          a.i8 == b.i8 && a.i32 == b.i32 && a.f32.size() == b.f32.size() &&
              (a.f32.empty() || std::memcmp(a.f32.data(), b.f32.data(), 4 * a.f32.size()) == 0),
          "values of stage '" + a.name + "' changed");
    }
  }
}

ATTNFLOW_FUZZ_REGISTER(device_dump, FuzzDeviceDump);

}  // namespace attnflow_fuzz
