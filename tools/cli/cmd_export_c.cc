// cmd_export_c.cc — `attnflow export-c CASE.safetensors --out case.h`: a
// golden case (kind sdpa or mha) for the on-device harness
// (micro/harness/golden_main.c, docs/edge.md "Golden vectors on a device").
// Thin: the checks and the header come from ExportForDevice
// (attnflow/device_export.h); this file parses the options, refuses an output
// that names the input, and writes the files atomically (WriteFileAtomic):
// the data blob (--data), the int8 expectations (--s8-expected, for
// `attnflow verify --compare`), then the header.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "attnflow/device_export.h"
#include "attnflow/file_util.h"
#include "attnflow/golden.h"
#include "attnflow/micro.h"
#include "attnflow/safetensors.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

struct ExportArgs {
  std::string file, out, name, data, s8_expected, stages = "auto", tolerance = "auto";
  std::string flash = "1MiB", ram = "320KiB";
};

int RunExport(const ExportArgs& a) {
  DeviceExportOptions opt;
  Result<int64_t> fl = ParseByteSize("--flash-bytes", a.flash);
  Result<int64_t> rm = ParseByteSize("--ram-bytes", a.ram);
  if (!fl.ok() || !rm.ok()) {
    PrintError("export-c", (!fl.ok() ? fl : rm).status().message());
    return kExitUsage;
  }
  if (a.stages != "auto" && a.stages != "all" && a.stages != "none") {
    PrintError("export-c", "--stages must be auto, all or none, got '" + a.stages + "'");
    return kExitUsage;
  }
  // No output may name the input case or another output (same file by
  // device and inode: other spellings, symlinks, hard links).
  for (const std::string* o : {&a.out, &a.data, &a.s8_expected}) {
    if (o->empty()) continue;
    if (Status s = CheckOutputIsNotInput("export-c", a.file, *o); !s.ok()) {
      PrintError("export-c", s.message());
      return kExitUsage;
    }
  }
  const std::pair<const std::string*, const std::string*> pairs[] = {
      {&a.out, &a.data}, {&a.out, &a.s8_expected}, {&a.data, &a.s8_expected}};
  for (const auto& [x, y] : pairs) {
    if (x->empty() || y->empty()) continue;
    if (*x == *y || !CheckOutputIsNotInput("export-c", *x, *y).ok()) {
      PrintError("export-c", "--out, --data and --s8-expected must name different files");
      return kExitUsage;
    }
  }
  Result<GoldenCase> c = LoadGoldenCase(a.file);
  if (!c.ok()) {
    PrintError("export-c", c.status().message());
    return kExitUsage;
  }
  opt.name = a.name;
  opt.data_file = a.data;
  opt.flash_bytes = fl.value();
  opt.ram_bytes = rm.value();
  opt.stages = a.stages;
  opt.tolerance = a.tolerance;
  Result<DeviceExport> e = ExportForDevice(c.value(), opt);
  if (!e.ok()) {
    PrintError("export-c", e.status().message());
    return kExitUsage;
  }
  if (!a.s8_expected.empty() && !e->has_s8) {
    PrintError("export-c", a.file + ": --s8-expected: the case has no int8 path (" + e->s8_note +
                               ")");
    return kExitUsage;
  }
  if (!a.s8_expected.empty() && e->mha) {
    PrintError("export-c", a.file + ": --s8-expected: an mha case's int8 stages are "
                                    "teacher-forced (each from the previous stage's expected "
                                    "values) and judged by the device harness itself; the file "
                                    "carries an sdpa case's int8 out only");
    return kExitUsage;
  }
  // Data first (the header names it), then the int8 expectations, then the
  // header; each atomically.
  if (!a.data.empty()) {
    if (Status s = WriteFileAtomic(a.data, e->data); !s.ok()) {
      PrintError("export-c", s.message());
      return kExitUsage;
    }
  }
  if (!a.s8_expected.empty()) {
    std::vector<std::pair<std::string, TensorView>> tensors;
    for (const auto& [n, t] : e->s8_case) tensors.emplace_back(n, t.view());
    Status s = WriteSafetensors(a.s8_expected, tensors, e->s8_meta);
    if (!s.ok()) {
      PrintError("export-c", s.message());
      return kExitUsage;
    }
  }
  if (Status s = WriteFileAtomic(a.out, e->header); !s.ok()) {
    PrintError("export-c", s.message());
    return kExitUsage;
  }
  std::printf("export-c: %s -> %s (%s, %s)\n", a.file.c_str(), a.out.c_str(), e->name.c_str(),
              e->shape.c_str());
  std::printf("  data %zu bytes %s; harness pool %llu bytes; stages: %s (%s); int8: %s\n",
              e->data.size(), a.data.empty() ? "embedded in flash" : ("in " + a.data).c_str(),
              static_cast<unsigned long long>(e->pool_bytes),
              e->row_stages ? "scores scaled masked weights lse out"
                            : (e->mha ? "q k v lse heads_out concat out" : "lse out"),
              e->bounds ? "f32 rounding bounds" : "atol/rtol",
              e->has_s8 ? "yes" : ("no (" + e->s8_note + ")").c_str());
  std::printf("  pool_bytes=%llu data_bytes=%zu\n", static_cast<unsigned long long>(e->pool_bytes),
              e->data.size());
  return kExitOk;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    export_c, "export-c",
    "Write a golden case (sdpa or mha) as a C header for the on-device harness",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<ExportArgs>();
      sub.add_option("file", a->file, "Golden case (.safetensors, kind sdpa or mha)")->required();
      sub.add_option("--out", a->out, "Header to write (case.h)")->required();
      sub.add_option("--name", a->name, "C identifier of the case (default: the file stem)");
      sub.add_option("--data", a->data,
                     "Write the case data to this file, read by the harness over semihosting "
                     "at run time (for cases larger than --flash-bytes); the header keeps only "
                     "offsets");
      sub.add_option("--flash-bytes", a->flash,
                     "Largest data embedded in the header (flash), e.g. 1MiB")
          ->capture_default_str();
      sub.add_option("--ram-bytes", a->ram,
                     "Largest harness pool one chunk (batch element x kv head) may need")
          ->capture_default_str();
      sub.add_option("--stages", a->stages,
                     "auto|all|none: include the score-row stages (scores scaled masked "
                     "weights); auto = when B*H*Lq*Lk <= 8192")
          ->capture_default_str();
      sub.add_option("--tolerance", a->tolerance,
                     "auto|bound|fixed: write each f32 stage's per-element rounding bound "
                     "beside it for the harness (auto: when the case has them, "
                     "docs/golden-format.md \"Tolerances\"), or only the case's atol/rtol")
          ->check(CLI::IsMember({"auto", "bound", "fixed"}))
          ->capture_default_str();
      sub.add_option("--s8-expected", a->s8_expected,
                     "Also write the int8 path's expectations of an sdpa case (out as I8, "
                     "output units) as safetensors, for `attnflow verify --compare DUMP FILE`");
      return [a] { return RunExport(*a); };
    });

}  // namespace attnflow::cli
