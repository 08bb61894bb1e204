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
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/golden.h"
#include "attnflow/player.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

struct VerifyArgs {
  std::vector<std::string> files;
  bool compare = false;
  std::string impl = "reference";
  double atol = -1, rtol = -1;
  std::string tolerance = "auto";  // auto | bound | fixed (CompareOptions)
  std::string bound_dtype;         // "" = each GOT stage's dtype
  bool quiet = false;
  bool json = false;
  std::string dump_case, device_impl;  // --compare with a device dump: the block
  double budget = -1;                  // --budget REL: relative error per stage
  std::string png, svg;                // error growth per layer (all-layer dumps)
  bool invariants = false;             // --invariants DUMP: no reference
  std::string causal;                  // --invariants: the causal rule ("" = the dump's)
};

// --json (schema attnflow-verify/1, docs/cli.md): one document at the end.
nlohmann::json g_json_cases = nlohmann::json::array();

std::string FormatG(double v, int precision = 6) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", precision, v);
  return b;
}

nlohmann::json Num(double v) {  // NaN / inf are not JSON numbers
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  return v;
}

nlohmann::json ReportJson(const CaseReport& r, double atol, double rtol) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : r.stages) {
    nlohmann::json j = {{"stage", s.stage}, {"compared", s.compared}, {"match", s.match}};
    if (s.input) j["input"] = true;
    const bool shape_mismatch = s.compared && !s.match && s.first_bad < 0;
    if (s.compared && !shape_mismatch) {
      j["max_abs"] = Num(s.max_abs);
      j["max_rel"] = Num(s.max_rel);
      j["max_err_over_tol"] = Num(s.max_ratio);
      j["rel_l2"] = Num(s.rel_l2);
      if (!s.bound.empty()) j["bound"] = s.bound;
      j["bad"] = s.mismatches;
      if (s.first_bad >= 0) {
        j["first_bad_index"] = s.first_bad_index;
        j["got_at_bad"] = Num(s.got_at_bad);
        j["expected_at_bad"] = Num(s.expected_at_bad);
        j["tol_at_bad"] = Num(s.bound_at_bad);
      }
    }
    if (!s.note.empty()) j["note"] = s.note;
    stages.push_back(j);
  }
  const StageReport* bad = r.FirstMismatch();
  nlohmann::json doc = {{"path", r.path}, {"kind", r.kind}, {"impl", r.implementation},
                        {"tolerance", r.tolerance}, {"atol", atol}, {"rtol", rtol},
                        {"verdict", r.ok() ? "match" : (bad->input ? "inputs differ" : "differ")},
                        {"stages", stages}};
  if (bad != nullptr) doc[bad->input ? "first_input_mismatch" : "first_mismatch"] = bad->stage;
  if (!r.note.empty()) doc["note"] = r.note;
  return doc;
}

}  // namespace

void PrintCaseReport(const CaseReport& r, double atol, double rtol, bool quiet) {
  // Paths, kinds and stage names come from files: escaped (EscapeLine).
  // Bound mode: each stage within the rounding bound of the type that
  // computed it (docs/golden-format.md "Tolerances"); err/tol is the largest
  // |got - expected| / tolerance of a stage (> 1 fails).
  const std::string tol = r.tolerance == "bound"        ? std::string("tolerance=rounding bounds")
                          : r.tolerance == "invariants" ? std::string("checks=invariants")
                          : r.tolerance == "budget"     ? std::string("tolerance=relative-error budget")
                                                        : "atol=" + FormatG(atol) + " rtol=" + FormatG(rtol);
  // The stage column fits the longest name ("decode.12.heads_out").
  int w = 10;
  for (const auto& s : r.stages)
    w = std::max(w, static_cast<int>(EscapeLine(s.stage).size() + (s.input ? 8 : 0)));
  std::printf("case %s  kind=%s  impl=%s  %s\n", EscapeLine(r.path).c_str(),
              EscapeLine(r.kind).c_str(), EscapeLine(r.implementation).c_str(), tol.c_str());
  if (!quiet) {
    std::printf("  %-*s %12s %12s %10s  %-18s %-13s %s\n", w, "stage", "max_abs", "max_rel",
                "bad", "first_bad", "err/tol", "result");
    for (const auto& s : r.stages) {
      const std::string stage = (s.input ? "(input) " : "") + EscapeLine(s.stage),
                        note = EscapeLine(s.note);
      if (!s.compared) {
        std::printf("  %-*s %12s %12s %10s  %-18s %-13s skipped (%s)\n", w, stage.c_str(), "-",
                    "-", "-", "-", "-", note.c_str());
        continue;
      }
      if (!s.match && s.first_bad < 0) {  // shape mismatch: no numbers to show
        std::printf("  %-*s %12s %12s %10s  %-18s %-13s MISMATCH  %s\n", w, stage.c_str(), "-",
                    "-", "-", "-", "-", note.c_str());
        continue;
      }
      // err/tol with the bound's type ("0.031 f32"), or "fixed" tolerance.
      const std::string ratio =
          FormatG(s.max_ratio, 2) + " " + (s.budget ? "budget" : s.bound.empty() ? "fixed" : s.bound);
      std::printf("  %-*s %12.3e %12.3e %10lld  %-18s %-13s %s%s%s\n", w, stage.c_str(), s.max_abs,
                  s.max_rel, static_cast<long long>(s.mismatches),
                  s.first_bad < 0 ? "-" : s.first_bad_index.c_str(), ratio.c_str(),
                  s.match ? "ok" : "MISMATCH", note.empty() ? "" : "  ", note.c_str());
    }
  }
  const StageReport* bad = r.FirstMismatch();
  if (r.tolerance == "invariants") {  // verify --invariants: checks, not a comparison
    const long n = static_cast<long>(std::count_if(r.stages.begin(), r.stages.end(),
                                                   [](const StageReport& s) { return s.compared; }));
    if (bad == nullptr) {
      std::printf("  => every invariant holds (%ld checks)\n", n);
    } else {
      std::printf("  => FIRST BROKEN INVARIANT: stage '%s' at %s: %s: got %.9g, want %.9g "
                  "(within %.3g; %lld bad)\n",
                  EscapeLine(bad->stage).c_str(), bad->first_bad_index.c_str(),
                  EscapeLine(bad->note).c_str(), bad->got_at_bad, bad->expected_at_bad,
                  bad->bound_at_bad, static_cast<long long>(bad->mismatches));
    }
    return;
  }
  if (bad == nullptr) {
    std::printf("  => match (%zu stages compared)\n",
                static_cast<size_t>(std::count_if(r.stages.begin(), r.stages.end(),
                                                  [](const StageReport& s) { return s.compared; })));
  } else if (bad->budget) {  // a relative-error budget (a model against its optimised self)
    std::printf("  => FIRST OVER BUDGET: stage '%s': relative error %.3g > budget %.3g (largest "
                "element error %.3g at %s)\n",
                EscapeLine(bad->stage).c_str(), bad->rel_l2, bad->rel_l2 / std::max(bad->max_ratio, 1e-300),
                bad->max_abs, bad->first_bad < 0 ? "-" : bad->first_bad_index.c_str());
  } else if (bad->input) {  // not a break: GOT was computed from other inputs
    std::printf("  => INPUT DIFFERS: '%s'%s%s: GOT was computed from other inputs than "
                "EXPECTED, so no stage break can be named (give the port the case's inputs)\n",
                EscapeLine(bad->stage).c_str(),
                bad->first_bad >= 0 ? (" at " + bad->first_bad_index).c_str() : "",
                bad->first_bad >= 0 ? "" : (": " + EscapeLine(bad->note)).c_str());
  } else if (bad->first_bad >= 0) {
    std::printf("  => FIRST MISMATCH: stage '%s' at %s: got %.9g, expected %.9g (%s %.3g; "
                "%lld bad elements)\n",
                EscapeLine(bad->stage).c_str(), bad->first_bad_index.c_str(), bad->got_at_bad,
                bad->expected_at_bad,
                bad->bound.empty() || bad->bound == "per-stage"
                    ? "tolerance"
                    : (bad->bound + " rounding bound").c_str(),
                bad->bound_at_bad, static_cast<long long>(bad->mismatches));
  } else {
    std::printf("  => FIRST MISMATCH: stage '%s': %s\n", EscapeLine(bad->stage).c_str(),
                EscapeLine(bad->note).c_str());
  }
  if (!r.note.empty()) std::printf("  => %s\n", EscapeLine(r.note).c_str());
}

namespace {

void PrintReport(const CaseReport& r, double atol, double rtol, bool quiet, bool json) {
  if (json) {
    g_json_cases.push_back(ReportJson(r, atol, rtol));
    return;
  }
  PrintCaseReport(r, atol, rtol, quiet);
}

// ---- a model against its optimised self: error per layer and stage ---------
// Stage names "[decode.<s>.]layer.<l>.<stage>" of all-layer dumps.
struct LayerName {
  int64_t step = -1;  // -1 = the prefill
  int64_t layer = -1;
  std::string stage;
};
bool ParseLayerName(const std::string& n, LayerName* out) {
  std::string rest = n;
  LayerName ln;
  auto number = [](const std::string& s, size_t from, size_t* end) -> int64_t {
    size_t i = from;
    int64_t v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') v = v * 10 + (s[i++] - '0');
    *end = i;
    return i > from ? v : -1;
  };
  size_t e = 0;
  if (rest.rfind("decode.", 0) == 0) {
    ln.step = number(rest, 7, &e);
    if (ln.step < 0 || e >= rest.size() || rest[e] != '.') return false;
    rest = rest.substr(e + 1);
  }
  if (rest.rfind("layer.", 0) != 0) return false;
  ln.layer = number(rest, 6, &e);
  if (ln.layer < 0 || e >= rest.size() || rest[e] != '.') return false;
  ln.stage = rest.substr(e + 1);
  *out = ln;
  return true;
}

// Prints the relative error of every stage kind at every layer (the
// prefill's table, then block_out per decode step) and writes the --png /
// --svg error-growth plot, when GOT and EXPECTED are all-layer dumps.
int LayerErrors(const VerifyArgs& a, const CaseReport& r) {
  std::map<int64_t, std::map<int64_t, std::map<std::string, double>>> err;  // step, layer, stage
  std::vector<std::string> kinds;
  int64_t layers = 0;
  for (const StageReport& s : r.stages) {
    LayerName ln;
    if (!s.compared || s.input || !ParseLayerName(s.stage, &ln)) continue;
    err[ln.step][ln.layer][ln.stage] = s.rel_l2;
    if (std::find(kinds.begin(), kinds.end(), ln.stage) == kinds.end()) kinds.push_back(ln.stage);
    layers = std::max(layers, ln.layer + 1);
  }
  if (err.empty()) {
    if (!a.png.empty() || !a.svg.empty()) {
      PrintError("verify", "--png/--svg plot the error per layer of all-layer dumps (trace "
                           "--all-layers --safetensors); these stages have no layer.<l>. names");
      return kExitUsage;
    }
    return kExitOk;
  }
  if (!a.json) {
    auto cell = [](double v) {
      char b[16];
      if (std::isnan(v)) return std::string("-");
      std::snprintf(b, sizeof b, v == 0 ? "0" : "%.1e", v);
      return std::string(b);
    };
    for (const auto& [step, per_layer] : err) {
      if (step >= 0 && step != err.rbegin()->first) continue;  // the prefill and the last step
      std::printf("relative error ||got - ref|| / ||ref|| per layer (%s):\n  %-6s",
                  step < 0 ? "prefill" : ("decode step " + std::to_string(step)).c_str(), "layer");
      for (const std::string& k : kinds) std::printf(" %9.9s", k.c_str());
      std::printf("\n");
      for (const auto& [l, st] : per_layer) {
        std::printf("  %-6lld", static_cast<long long>(l));
        for (const std::string& k : kinds) {
          auto it = st.find(k);
          std::printf(" %9s", it == st.end() ? "-" : cell(it->second).c_str());
        }
        std::printf("\n");
      }
    }
  }
  if (a.png.empty() && a.svg.empty()) return kExitOk;
  player::ErrorPlot p;
  p.title = "error growth: " + a.files[0] + " vs " + a.files[1];
  p.budget = a.budget;
  for (int64_t l = 0; l < layers; ++l) p.x_labels.push_back(std::to_string(l));
  const int64_t last = err.rbegin()->first;
  for (const char* k : {"q", "k", "v", "weights", "heads_out", "out", "ffn", "block_out"}) {
    if (std::find(kinds.begin(), kinds.end(), k) == kinds.end() || !err.count(-1)) continue;
    player::ErrorCurve c{k, std::vector<double>(static_cast<size_t>(layers), std::nan(""))};
    for (const auto& [l, st] : err.at(-1))
      if (auto it = st.find(k); it != st.end()) c.values[static_cast<size_t>(l)] = it->second;
    p.curves.push_back(std::move(c));
  }
  if (last >= 0) {  // the residual stream at the last decode step
    player::ErrorCurve c{"block_out, decode " + std::to_string(last),
                         std::vector<double>(static_cast<size_t>(layers), std::nan(""))};
    for (const auto& [l, st] : err.at(last))
      if (auto it = st.find("block_out"); it != st.end()) c.values[static_cast<size_t>(l)] = it->second;
    p.curves.push_back(std::move(c));
  }
  for (const auto& [path, png] : {std::pair<const std::string*, bool>{&a.png, true}, {&a.svg, false}}) {
    if (path->empty()) continue;
    Result<std::string> img = png ? player::ErrorPlotPng(p) : player::ErrorPlotSvg(p);
    Status st = img.ok() ? WriteFileAtomic(*path, img.value()) : img.status();
    if (!st.ok()) {
      PrintError("verify", st.message());
      return kExitUsage;
    }
    if (!a.json) std::printf("wrote %s (error growth per layer)\n", EscapeLine(*path).c_str());
  }
  return kExitOk;
}

// The comparison the flags ask for: --atol/--rtol make "auto" fixed.
Result<CompareOptions> Options(const VerifyArgs& a) {
  CompareOptions o;
  o.atol = a.atol;
  o.rtol = a.rtol;
  o.tolerance = a.tolerance;
  o.budget = a.budget;
  if (a.budget >= 0 && a.tolerance == "bound") {
    return InvalidArgument("--budget judges each stage's relative error: drop --tolerance bound");
  }
  if (a.tolerance == "bound" && (a.atol >= 0 || a.rtol >= 0)) {
    return InvalidArgument("--tolerance bound uses rounding bounds: drop --atol/--rtol, or use "
                           "--tolerance fixed");
  }
  if (!a.bound_dtype.empty()) {
    if (a.bound_dtype == "f32") o.bound_dtype = DType::kF32;
    else if (a.bound_dtype == "f16") o.bound_dtype = DType::kF16;
    else if (a.bound_dtype == "bf16") o.bound_dtype = DType::kBF16;
    else if (a.bound_dtype == "f64") o.bound_dtype = DType::kF64;
    else return InvalidArgument("--bound-dtype must be f32, f16, bf16 or f64, got " +
                                QuoteBounded(a.bound_dtype));
  }
  return o;
}

// `verify --invariants DUMP`: the dump alone (CheckInvariants).
int RunInvariants(const VerifyArgs& a) {
  if (a.files.size() != 1) {
    PrintError("verify", "--invariants takes exactly one dump (got " +
                             std::to_string(a.files.size()) + " files)");
    return kExitUsage;
  }
  Result<GotStages> got = LoadGotStages(a.files[0], a.dump_case, a.device_impl);
  if (!got.ok()) {
    PrintError("verify", got.status().message());
    return kExitUsage;
  }
  InvariantOptions o;
  std::string causal = a.causal;
  if (causal.empty()) {
    auto it = got->metadata.find("causal");
    causal = it == got->metadata.end() ? "none" : it->second;
  }
  if (!ParseCausal(causal, &o.causal)) {
    PrintError("verify", "--causal must be none, top_left or bottom_right, got " + QuoteBounded(causal));
    return kExitUsage;
  }
  if (auto it = got->metadata.find("stages"); it != got->metadata.end()) {
    Result<std::vector<std::string>> l = SplitStageList(it->second, a.files[0] + ": metadata 'stages'");
    if (!l.ok()) {
      PrintError("verify", l.status().message());
      return kExitUsage;
    }
    o.order = std::move(l).value();
  }
  Result<CaseReport> r = CheckInvariants(got.value(), o);
  if (!r.ok()) {
    PrintError("verify", r.status().message());
    return kExitUsage;
  }
  if (a.json) {
    nlohmann::json doc = ReportJson(r.value(), -1, -1);
    doc["verdict"] = r->ok() ? "invariants hold" : "invariant broken";
    doc["causal"] = CausalName(o.causal);
    std::printf("%s\n", DumpJson(nlohmann::json({{"schema", "attnflow-verify/1"},
                                                 {"cases", nlohmann::json::array({doc})}}))
                            .c_str());
  } else {
    std::printf("invariants of %s (causal %s, no reference)\n", EscapeLine(a.files[0]).c_str(),
                CausalName(o.causal));
    PrintCaseReport(r.value(), -1, -1, a.quiet);
  }
  return r->ok() ? kExitOk : kExitCheckFailed;
}

int RunVerify(const VerifyArgs& a) {
  if (a.invariants) {
    if (a.compare) {
      PrintError("verify", "--invariants checks one dump alone; drop --compare");
      return kExitUsage;
    }
    return RunInvariants(a);
  }
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
    Result<CompareOptions> copt = Options(a);
    if (!copt.ok()) {
      PrintError("verify", copt.status().message());
      return kExitUsage;
    }
    Result<CaseReport> r = CompareStages(got.value(), exp.value(), copt.value());
    if (!r.ok()) {
      PrintError("verify", r.status().message());
      return kExitUsage;
    }
    const size_t compared = std::count_if(r->stages.begin(), r->stages.end(),
                                          [](const StageReport& s) { return s.compared; });
    const GotStages& g = got.value();
    const bool dump = g.source == "device-dump";
    if (compared == 0) {  // an error, not a verdict: no report, no verdict line
      PrintError("verify", "no stage of " + a.files[0] + " has a same-named tensor in " +
                               a.files[1] + " (GOT's stages: " + [&] {
                                 std::string n;
                                 for (size_t i = 0; i < g.stages.size() && i < 16; ++i)
                                   n += (i ? ", " : "") + QuoteBounded(EscapeLine(g.stages[i].name), 40);
                                 if (g.stages.size() > 16) n += ", ...";
                                 return n.empty() ? std::string("none") : n;
                               }() + ")");
      return kExitUsage;
    }
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
    // All-layer dumps (thousands of stages): the per-layer table below
    // instead of one line per stage.
    const bool layered = std::any_of(r->stages.begin(), r->stages.end(), [](const StageReport& s) {
      LayerName ln;
      return ParseLayerName(s.stage, &ln);
    });
    PrintReport(r.value(), r->atol, r->rtol, a.quiet || layered, a.json);
    if (int rc = LayerErrors(a, r.value()); rc != kExitOk) return rc;
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
  Result<CompareOptions> copt = Options(a);
  if (!copt.ok()) {
    PrintError("verify", copt.status().message());
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
    Result<CaseReport> r = VerifyGoldenCase(c.value(), impl, {}, copt.value());
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

void AddVerifyOptions(CLI::App& sub, VerifyArgs& a) {
  sub.add_option("files", a.files, "Case files (or GOT EXPECTED with --compare)")
      ->required();
  sub.add_flag("--compare", a.compare,
               "Compare the stages in GOT with the same-named tensors in EXPECTED. GOT: a "
               "safetensors file, a device dump (AFDUMP text log, docs/device-dump.md), a "
               "STAGE.npy file or a directory of STAGE.npy files");
  sub.add_option("--case", a.dump_case,
                 "--compare with a device dump: the block of this case (default: the only one)");
  sub.add_option("--device-impl", a.device_impl,
                 "--compare with a device dump: the block of this implementation, e.g. "
                 "micro-f32 or micro-s8 (default: the only one)");
  sub.add_option("--budget", a.budget,
                 "--compare: a stage passes when its relative error ||got - expected|| / "
                 "||expected|| is at most this (a model against its optimised self: another "
                 "quantisation, KV cache or attention path); names the first stage over it")
      ->check(NonNegative());
  sub.add_option("--png", a.png,
                 "--compare of all-layer dumps: write the error growth per layer as a PNG plot");
  sub.add_option("--svg", a.svg,
                 "--compare of all-layer dumps: write the error growth per layer as an SVG plot");
  sub.add_flag("--invariants", a.invariants,
               "Check one dump alone, no reference: rows of weights sum to one, masked and "
               "future weights are exactly zero, lse = log sum exp(masked), out = weights . v "
               "(DUMP: safetensors, an AFDUMP log, STAGE.npy or a directory of them)");
  sub.add_option("--causal", a.causal,
                 "--invariants: the causal rule future weights obey (default: the dump's "
                 "metadata, else none)")
      ->check(CLI::IsMember({"none", "top_left", "bottom_right"}));
  sub.add_option("--impl", a.impl, "reference (float64 oracle) or kernels (fast path)")
      ->check(CLI::IsMember({"reference", "kernels"}));
  sub.add_option("--tolerance", a.tolerance,
                 "auto: per-element rounding bounds of the type that computed each stage "
                 "where the case has them (sdpa, mha), else atol/rtol; bound: bounds or an "
                 "error; fixed: atol/rtol only (docs/golden-format.md \"Tolerances\")")
      ->check(CLI::IsMember({"auto", "bound", "fixed"}));
  sub.add_option("--bound-dtype", a.bound_dtype,
                 "f32 | f16 | bf16 | f64: the type the bounds allow for (default: each GOT "
                 "stage's own dtype; a port that computes in f16 but dumps f32 says f16)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "f64"}));
  sub.add_option("--atol", a.atol,
                 "Absolute tolerance, makes the comparison fixed (default: the case's, else 1e-4)")
      ->check(NonNegative());
  sub.add_option("--rtol", a.rtol,
                 "Relative tolerance, makes the comparison fixed (default: the case's, else 1e-4)")
      ->check(NonNegative());
  sub.add_flag("-q,--quiet", a.quiet, "Only the verdict line per case");
  sub.add_flag("--json", a.json, "One JSON document (schema attnflow-verify/1, docs/cli.md) on stdout");
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    verify, "verify", "Check golden cases (format v1) stage by stage; --compare GOT EXPECTED",
    ArgsCommand<VerifyArgs>(AddVerifyOptions, RunVerify));

}  // namespace attnflow::cli
