// cmd_verify.cc — `attnflow verify`: check golden cases stage by stage.
//
//   attnflow verify CASE.safetensors...            run the reference (or
//                                                  --impl kernels) on each case
//   attnflow verify --compare GOT EXPECTED.st      compare a port's dumped
//                                                  stages with expected ones;
//                                                  GOT: safetensors, a device
//                                                  dump (AFDUMP log), STAGE.npy
//                                                  or a directory of them
// Exit: 0 all match, 1 any stage differs, 2 unreadable/invalid file or usage.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <memory>
#include <string>
#include <vector>

#include "attnflow/golden.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

struct VerifyArgs {
  std::vector<std::string> files;
  bool compare = false;
  std::string impl = "reference";
  double atol = -1, rtol = -1;
  bool quiet = false;
  bool json = false;
  std::string dump_case, device_impl;  // --compare with a device dump: the block
};

// --json (schema attnflow-verify/1, docs/cli.md): one document at the end.
nlohmann::json g_json_cases = nlohmann::json::array();

nlohmann::json Num(double v) {  // NaN / inf are not JSON numbers
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return v;
}

nlohmann::json ReportJson(const CaseReport& r, double atol, double rtol) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : r.stages) {
    nlohmann::json j = {{"stage", s.stage}, {"compared", s.compared}, {"match", s.match}};
    const bool shape_mismatch = s.compared && !s.match && s.first_bad < 0;
    if (s.compared && !shape_mismatch) {
      j["max_abs"] = Num(s.max_abs);
      j["max_rel"] = Num(s.max_rel);
      j["bad"] = s.mismatches;
      if (s.first_bad >= 0) {
        j["first_bad_index"] = s.first_bad_index;
        j["got_at_bad"] = Num(s.got_at_bad);
        j["expected_at_bad"] = Num(s.expected_at_bad);
      }
    }
    if (!s.note.empty()) j["note"] = s.note;
    stages.push_back(j);
  }
  return {{"path", r.path}, {"kind", r.kind}, {"impl", r.implementation}, {"atol", atol},
          {"rtol", rtol}, {"verdict", r.ok() ? "match" : "differ"}, {"stages", stages}};
}

}  // namespace

void PrintCaseReport(const CaseReport& r, double atol, double rtol, bool quiet) {
  // Paths, kinds and stage names come from files: escaped (EscapeLine).
  std::printf("case %s  kind=%s  impl=%s  atol=%g rtol=%g\n", EscapeLine(r.path).c_str(),
              EscapeLine(r.kind).c_str(), EscapeLine(r.implementation).c_str(), atol, rtol);
  if (!quiet) {
    std::printf("  %-10s %12s %12s %10s  %-18s %s\n", "stage", "max_abs", "max_rel",
                "bad", "first_bad", "result");
    for (const auto& s : r.stages) {
      const std::string stage = EscapeLine(s.stage), note = EscapeLine(s.note);
      if (!s.compared) {
        std::printf("  %-10s %12s %12s %10s  %-18s skipped (%s)\n", stage.c_str(), "-",
                    "-", "-", "-", note.c_str());
        continue;
      }
      if (!s.match && s.first_bad < 0) {  // shape mismatch: no numbers to show
        std::printf("  %-10s %12s %12s %10s  %-18s MISMATCH  %s\n", stage.c_str(), "-", "-",
                    "-", "-", note.c_str());
        continue;
      }
      std::printf("  %-10s %12.3e %12.3e %10lld  %-18s %s%s%s\n", stage.c_str(), s.max_abs,
                  s.max_rel, static_cast<long long>(s.mismatches),
                  s.first_bad < 0 ? "-" : s.first_bad_index.c_str(),
                  s.match ? "ok" : "MISMATCH", note.empty() ? "" : "  ", note.c_str());
    }
  }
  const StageReport* bad = r.FirstMismatch();
  if (bad == nullptr) {
    std::printf("  => match (%zu stages compared)\n",
                static_cast<size_t>(std::count_if(r.stages.begin(), r.stages.end(),
                                                  [](const StageReport& s) { return s.compared; })));
  } else if (bad->first_bad >= 0) {
    std::printf("  => FIRST MISMATCH: stage '%s' at %s: got %.9g, expected %.9g (%lld bad elements)\n",
                EscapeLine(bad->stage).c_str(), bad->first_bad_index.c_str(), bad->got_at_bad,
                bad->expected_at_bad, static_cast<long long>(bad->mismatches));
  } else {
    std::printf("  => FIRST MISMATCH: stage '%s': %s\n", EscapeLine(bad->stage).c_str(),
                EscapeLine(bad->note).c_str());
  }
}

namespace {

void PrintReport(const CaseReport& r, double atol, double rtol, bool quiet, bool json) {
  if (json) {
    g_json_cases.push_back(ReportJson(r, atol, rtol));
    return;
  }
  PrintCaseReport(r, atol, rtol, quiet);
}

int RunVerify(const VerifyArgs& a) {
  if (a.compare) {
    if (a.files.size() != 2) {
      PrintError("verify", "--compare takes exactly two files: GOT EXPECTED (got " +
                               std::to_string(a.files.size()) + ")");
      return kExitUsage;
    }
    Result<GotStages> got = LoadGotStages(a.files[0], a.dump_case, a.device_impl);
    if (!got.ok()) {
      PrintError("verify", got.status().message());
      return kExitUsage;
    }
    Result<SafetensorsFile> exp = SafetensorsFile::Open(a.files[1]);
    if (!exp.ok()) {
      PrintError("verify", exp.status().message());
      return kExitUsage;
    }
    Result<CaseReport> r = CompareStages(got.value(), exp.value(), a.atol, a.rtol);
    if (!r.ok()) {
      PrintError("verify", r.status().message());
      return kExitUsage;
    }
    const size_t compared = std::count_if(r->stages.begin(), r->stages.end(),
                                          [](const StageReport& s) { return s.compared; });
    const GotStages& g = got.value();
    const bool dump = g.source == "device-dump";
    if (!a.json) {
      std::printf("compare %s against %s\n", EscapeLine(a.files[0]).c_str(),
                  EscapeLine(a.files[1]).c_str());
      if (dump) {
        std::printf("  device dump block case=%s kind=%s impl=%s (line %lld), %zu stage(s)\n",
                    EscapeLine(g.block_case).c_str(), EscapeLine(g.kind).c_str(),
                    EscapeLine(g.implementation).c_str(),
                    static_cast<long long>(g.block_line), g.stages.size());
      }
    }
    // The tolerances CompareStages used: the flags, else EXPECTED's metadata
    // (validated there), else the default.
    auto tol = [&](double flag, const char* key) {
      if (flag >= 0) return flag;
      const auto meta = exp->metadata();
      auto it = meta.find(key);
      return it == meta.end() ? kGoldenDefaultTol : std::strtod(it->second.c_str(), nullptr);
    };
    PrintReport(r.value(), tol(a.atol, "atol"), tol(a.rtol, "rtol"), a.quiet, a.json);
    if (a.json) {
      nlohmann::json doc = {{"schema", "attnflow-verify/1"},
                            {"cases", g_json_cases},
                            {"compared_stages", compared},
                            {"got_source", g.source}};
      if (dump) {
        doc["got_block"] = {{"case", g.block_case}, {"kind", g.kind},
                            {"impl", g.implementation}, {"line", g.block_line}};
      }
      std::printf("%s\n", DumpJson(doc).c_str());
    }
    if (compared == 0) {
      PrintError("verify", "no stage of " + a.files[0] + " has a same-named tensor in " +
                               a.files[1] + " (GOT's stages: " + [&] {
                                 std::string n;
                                 for (size_t i = 0; i < g.stages.size() && i < 16; ++i)
                                   n += (i ? ", " : "") + g.stages[i].name;
                                 if (g.stages.size() > 16) n += ", ...";
                                 return n.empty() ? std::string("none") : n;
                               }() + ")");
      return kExitCheckFailed;
    }
    return r->ok() ? kExitOk : kExitCheckFailed;
  }
  if (a.files.empty()) {
    PrintError("verify", "no case files given");
    return kExitUsage;
  }
  VerifyImpl impl;
  if (a.impl == "reference") impl = VerifyImpl::kReference;
  else if (a.impl == "kernels") impl = VerifyImpl::kKernels;
  else {
    PrintError("verify", "--impl must be reference or kernels, got " + a.impl);
    return kExitUsage;
  }
  int invalid = 0, differ = 0, match = 0, skipped = 0;
  auto json_case = [&](const std::string& path, const std::string& verdict, const std::string& why) {
    if (a.json) g_json_cases.push_back({{"path", path}, {"verdict", verdict}, {"error", why}});
  };
  for (const auto& path : a.files) {
    Result<GoldenCase> c = LoadGoldenCase(path);
    if (!c.ok()) {
      PrintError("verify", c.status().message());
      json_case(path, "invalid", c.status().message());
      ++invalid;
      continue;
    }
    if (impl == VerifyImpl::kKernels && c->kind != "sdpa") {
      const std::string why = "not a kernel case (kind " + c->kind +
                              "; the fast kernels run sdpa cases, use --impl reference)";
      if (a.json) g_json_cases.push_back({{"path", path}, {"kind", c->kind}, {"verdict", "skipped"}, {"reason", why}});
      else std::printf("case %s  kind=%s  impl=kernels\n  => skipped: %s\n", EscapeLine(path).c_str(),
                       EscapeLine(c->kind).c_str(), EscapeLine(why).c_str());
      ++skipped;
      continue;
    }
    if (a.atol >= 0) c->atol = a.atol;
    if (a.rtol >= 0) c->rtol = a.rtol;
    Result<CaseReport> r = VerifyGoldenCase(c.value(), impl);
    if (!r.ok()) {
      PrintError("verify", path + ": " + r.status().message());
      json_case(path, "invalid", r.status().message());
      ++invalid;
      continue;
    }
    PrintReport(r.value(), c->atol, c->rtol, a.quiet, a.json);
    (r->ok() ? match : differ) += 1;
  }
  if (a.json) {
    std::printf("%s\n", DumpJson(nlohmann::json({{"schema", "attnflow-verify/1"},
                                        {"cases", g_json_cases},
                                        {"summary", {{"cases", match + differ + invalid + skipped},
                                                     {"match", match}, {"differ", differ},
                                                     {"invalid", invalid}, {"skipped", skipped}}}})).c_str());
  } else {
    std::printf("%d case(s): %d match, %d differ, %d invalid%s\n", match + differ + invalid + skipped,
                match, differ, invalid,
                skipped > 0 ? (", " + std::to_string(skipped) + " skipped").c_str() : "");
  }
  if (invalid > 0) return kExitUsage;
  return differ > 0 ? kExitCheckFailed : kExitOk;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    verify, "verify", "Check golden cases (format v1) stage by stage; --compare GOT EXPECTED",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<VerifyArgs>();
      sub.add_option("files", a->files, "Case files (or GOT EXPECTED with --compare)")
          ->required();
      sub.add_flag("--compare", a->compare,
                   "Compare the stages in GOT with the same-named tensors in EXPECTED. GOT: a "
                   "safetensors file, a device dump (AFDUMP text log, docs/device-dump.md), a "
                   "STAGE.npy file or a directory of STAGE.npy files");
      sub.add_option("--case", a->dump_case,
                     "--compare with a device dump: the block of this case (default: the only one)");
      sub.add_option("--device-impl", a->device_impl,
                     "--compare with a device dump: the block of this implementation, e.g. "
                     "micro-f32 or micro-s8 (default: the only one)");
      sub.add_option("--impl", a->impl, "reference (float64 oracle) or kernels (fast path)")
          ->check(CLI::IsMember({"reference", "kernels"}));
      sub.add_option("--atol", a->atol, "Absolute tolerance (default: the case's, else 1e-4)")
          ->check(NonNegative());
      sub.add_option("--rtol", a->rtol, "Relative tolerance (default: the case's, else 1e-4)")
          ->check(NonNegative());
      sub.add_flag("-q,--quiet", a->quiet, "Only the verdict line per case");
      sub.add_flag("--json", a->json, "One JSON document (schema attnflow-verify/1, docs/cli.md) on stdout");
      return [a] { return RunVerify(*a); };
    });

}  // namespace attnflow::cli
