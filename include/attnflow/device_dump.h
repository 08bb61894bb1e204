// attnflow/device_dump.h — the AFDUMP text format (docs/device-dump.md,
// version 1): stage tensors a device prints over a UART or semihosting,
// parsed on the host so `attnflow verify --compare` can check them stage by
// stage against a golden case.
//
// Invariants:
//  * ParseDeviceDump accepts exactly the format of docs/device-dump.md
//    version 1. Every violation is kCorrupt "device dump: <label>:<line>:
//    <problem>" (line numbers count every physical line of the text, noise
//    included); nothing throws, nothing aborts.
//  * Memory is bounded by the text: every value of a dump takes at least 2
//    characters (a space and one digit; 9 for an f32 value), so the elements
//    declared by all `tensor` lines together, weighted by that minimum, must
//    not exceed the size of the text. The check runs at each `tensor` line,
//    before the stage's storage is allocated; the values of an accepted dump
//    take at most 2 bytes per byte of text.
//  * Every stage of an accepted block is complete: its parts cover each
//    element exactly once and the FNV-1a checksum of every part matched.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow {

// The start of the line that opens a block.
inline constexpr std::string_view kDeviceDumpHeader = "AFDUMP attnflow-dump/1";
inline constexpr int kDeviceDumpMaxRank = 8;
// Longest case, stage or implementation name (characters).
inline constexpr size_t kDeviceDumpMaxName = 128;

// One stage of a block: its declaration and its values (row-major), stored
// in the vector of its dtype (the other two stay empty).
struct DumpStage {
  std::string name;
  DType dtype = DType::kF32;  // kF32, kI8 or kI32
  Shape shape;                // rank 0..8
  int64_t line = 0;           // the `tensor` line
  std::vector<float> f32;
  std::vector<int8_t> i8;
  std::vector<int32_t> i32;

  int64_t numel() const;
  // A row-major view of the values; an absent view (rank -1) when the stage
  // has more than kMaxRank (4) dimensions, which attnflow tensors cannot have.
  TensorView view() const;
};

// The stages of one case computed by one implementation.
struct DumpBlock {
  std::string case_name, kind, impl;  // kind: "sdpa" or "mha"
  int64_t line = 0;                   // the `attnflow-dump/1` line
  int64_t done_line = 0;              // the `done` line
  std::vector<DumpStage> stages;      // in declaration order
};

struct DeviceDump {
  std::string label;
  std::vector<DumpBlock> blocks;  // in the order they opened
};

// True if some line of `text` starts with "AFDUMP attnflow-dump/" (after
// leading spaces; any version, so that ParseDeviceDump can name an
// unsupported one). Cheap: no parsing.
bool LooksLikeDeviceDump(std::string_view text);

// Parses a whole dump; `label` (the file path) names the text in errors.
Result<DeviceDump> ParseDeviceDump(std::string_view text, const std::string& label);

// Reads and parses the file at `path` (mapped read-only, never blocks on a
// FIFO). kIoError if it cannot be read.
Result<DeviceDump> ReadDeviceDump(const std::string& path);

// The one block with this case name and implementation ("" = any). Errors
// (kInvalidArgument) list the blocks of the dump: none matches, or several
// do ("pick one with --case / --device-impl").
Result<const DumpBlock*> SelectDumpBlock(const DeviceDump& dump, const std::string& case_name,
                                         const std::string& impl);

}  // namespace attnflow
