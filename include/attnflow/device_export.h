// attnflow/device_export.h — a golden case as the data of the on-device
// harness (micro/harness/golden_main.c, docs/edge.md): what
// `attnflow export-c` writes.
//
// Invariants:
//  * ExportForDevice checks the whole case before producing anything: every
//    stage has the shape its kind implies, no tensor holds NaN or +inf (-inf
//    only in a float mask, masked and lse), the shape and options pass the
//    micro library's own checks (af_sdpa_check_shape, af_sdpa_check_opts,
//    af_s8_prepare), the data fits flash_bytes when embedded, and one harness
//    chunk (a batch element and a kv head) fits ram_bytes. Sizes come from
//    the validated shapes before any allocation.
//  * A refusal is kInvalidArgument naming the case and the limit
//    ("... exceeds a device limit: ..."). The micro library implements every
//    option of a golden case (masks, kv_lens, windows, [H] and [B,H] ALiBi,
//    the per-sequence diagonal, softcap), so no case is refused for its
//    semantics.
//  * The header text embeds the data blob as 32-bit words (flash) or, with
//    data_file set, names that file and holds only offsets (the caller writes
//    `data` there). The blob is little-endian.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "attnflow/attention.h"
#include "attnflow/golden.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"

namespace attnflow {

struct DeviceExportOptions {
  std::string name;            // C identifier of the case ("" = from the file stem)
  std::string data_file;       // "" = embed the data; else the file the header names
  int64_t flash_bytes = int64_t{1} << 20;  // largest embedded data
  int64_t ram_bytes = int64_t{320} << 10;  // largest harness pool of one chunk
  std::string stages = "auto";  // auto | all | none: the score-row stages
  // auto | bound | fixed: the f32 stages' per-element rounding bounds
  // (CaseRoundingBounds at f32) written beside them for the harness, or
  // only the case's atol/rtol ("auto": bounds when the case has them).
  std::string tolerance = "auto";
};

struct DeviceExport {
  std::string name;     // the C identifier used
  std::string header;   // the header text
  std::string data;     // the data blob (write it to data_file in file mode)
  uint64_t pool_bytes = 0;
  bool mha = false;
  bool row_stages = false;  // scores scaled masked weights included
  bool bounds = false;      // the f32 stages carry rounding bounds
  bool has_s8 = false;      // sdpa: the int8 path is exported
  std::string s8_note;      // why not, when it is not
  std::string shape;        // "B=.. H=.. ..." for messages
  // The int8 expectations (sdpa with has_s8): out in output units (so).
  std::vector<int8_t> out8;
  Shape out8_shape;
  float so = 1;
  // The int8 path as a case for `verify --compare` (export-c
  // --s8-expected): inputs q8 k8 v8 (I8), every stage the harness checks
  // in dataflow order (scores masked weights in real units, F32, when the
  // row stages are exported; out I8 in output units), and metadata with
  // the `stages`/`inputs` lists and each stage's tolerance
  // (`stage_tolerances`, af_s8_stage_tolerances).
  std::vector<std::pair<std::string, Tensor>> s8_case;
  std::map<std::string, std::string> s8_meta;
};

Result<DeviceExport> ExportForDevice(const GoldenCase& c, const DeviceExportOptions& opt);

}  // namespace attnflow
