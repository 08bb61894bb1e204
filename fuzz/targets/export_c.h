// export_c.h (fuzz harness) — `attnflow export-c`'s input path on arbitrary
// bytes: SafetensorsFile::FromBuffer -> ValidateGoldenCase -> ExportForDevice
// (attnflow/device_export.h) with small flash and RAM budgets.
//
// Properties beyond "no crash, no sanitizer report, no escaping exception":
//  * a refused case gives kInvalidArgument / kResourceExhausted with a
//    message that names the file;
//  * an exported case's header compiles in principle: no NaN or bare inf
//    literal (only the INFINITY macros), it defines the case's name, its
//    data blob is whole 32-bit words within the flash budget, and the pool
//    it asks for is within the RAM budget;
//  * exporting the same case twice gives the same bytes (no hidden state).
#pragma once

#include <string>

#include "../common/fuzz_common.h"
#include "attnflow/device_export.h"
#include "attnflow/golden.h"
#include "attnflow/safetensors.h"

namespace attnflow_fuzz {

inline void FuzzExportC(const uint8_t* data, size_t size) {
  using namespace attnflow;
  const std::string label = "fuzz.export";
  Result<SafetensorsFile> f = SafetensorsFile::FromBuffer(data, size, label);
  if (!f.ok()) return;  // the safetensors target checks this part
  Result<GoldenCase> c = ValidateGoldenCase(std::move(f).value());
  if (!c.ok()) return;  // the golden target checks this part
  DeviceExportOptions opt;
  opt.flash_bytes = 256 << 10;
  opt.ram_bytes = 256 << 10;
  opt.stages = size % 3 == 0 ? "all" : (size % 3 == 1 ? "auto" : "none");
  if (size % 5 == 0) opt.data_file = "fuzz.bin";
  Result<DeviceExport> e = ExportForDevice(c.value(), opt);
  if (!e.ok()) {
    const Status& st = e.status();
    FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument ||
                   st.code() == StatusCode::kResourceExhausted,
               "unexpected status " + st.ToString());
    FUZZ_CHECK(st.message().find(label) != std::string::npos,
               "message does not name the file: " + st.ToString());
    return;
  }
  const std::string& h = e->header;
  // %a prints NaN as "nanf" and infinity as "inff"; neither compiles.
  FUZZ_CHECK(h.find("nanf") == std::string::npos, "a NaN literal reached the header");
  FUZZ_CHECK(h.find("inff") == std::string::npos, "a bare inf literal reached the header");
  FUZZ_CHECK(h.find("static const af_golden_case " + e->name + " = {") != std::string::npos,
             "the header does not define the case");
  FUZZ_CHECK(e->data.size() % 4 == 0, "the data blob is not whole words");
  if (opt.data_file.empty())
    FUZZ_CHECK(int64_t(e->data.size()) <= opt.flash_bytes, "embedded data above the flash budget");
  FUZZ_CHECK(int64_t(e->pool_bytes) <= opt.ram_bytes, "a pool above the RAM budget");
  Result<DeviceExport> again = ExportForDevice(c.value(), opt);
  FUZZ_CHECK(again.ok() && again->header == h && again->data == e->data,
             "a second export of the same case differs");
}

ATTNFLOW_FUZZ_REGISTER(export_c, FuzzExportC);

}  // namespace attnflow_fuzz
