// invariants_test.cc — `verify --invariants` (CheckInvariants): a dump
// checked alone against the chapter's invariants. Every committed golden
// case's expected stages (PyTorch float64, stored f32) and the toy's trace
// dumps satisfy them; a break planted in weights, a future weight, lse or
// out is named at its stage; a dump without the stages a check needs says
// which check it skipped. The expected outcomes are the invariants
// themselves (rows of a softmax sum to one, ...), not the code's output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "attnflow/golden.h"
#include "attnflow/player.h"
#include "attnflow/trace.h"
#include "util/cli_util.h"
#include "util/scratch_util.h"

namespace fs = std::filesystem;

namespace attnflow {
namespace {

std::vector<std::string> Cases() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(ATTNFLOW_SOURCE_DIR) / "tests/data/golden"))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

InvariantOptions OptionsOf(const GotStages& g) {
  InvariantOptions o;
  auto it = g.metadata.find("causal");
  if (it != g.metadata.end()) EXPECT_TRUE(ParseCausal(it->second, &o.causal));
  return o;
}

TEST(Invariants, EveryCommittedCaseSatisfiesThem) {
  int checks = 0;
  for (const std::string& path : Cases()) {
    Result<GotStages> g = LoadGotStages(path);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    Result<CaseReport> r = CheckInvariants(g.value(), OptionsOf(g.value()));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (const StageReport& s : r->stages) {
      EXPECT_TRUE(!s.compared || s.match) << path << " " << s.stage << ": " << s.note << " at "
                                          << s.first_bad_index << " got " << s.got_at_bad
                                          << " want " << s.expected_at_bad;
      checks += s.compared;
    }
  }
  EXPECT_GT(checks, 50 * 3);
}

// A copy of every tensor of `path` with `change` applied to the one named
// `stage` (element `at`, flat); the result's GotStages.
struct Edited {
  GotStages g;
  std::vector<std::shared_ptr<Tensor>> keep;
};
Edited Edit(const std::string& path, const std::string& stage, int64_t at, double (*change)(double)) {
  Result<GotStages> src = LoadGotStages(path);
  EXPECT_TRUE(src.ok());
  Edited e;
  e.g = src.value();
  for (NamedTensor& t : e.g.stages) {
    if (t.name != stage) continue;
    auto copy = std::make_shared<Tensor>(Tensor::FromView(t.view).value());
    TensorView v = copy->view();
    v.store(at, change(v.load(at)));
    t.view = v;
    e.keep.push_back(copy);
  }
  return e;
}

std::string FirstBad(const Edited& e) {
  Result<CaseReport> r = CheckInvariants(e.g, OptionsOf(e.g));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  const StageReport* bad = r.ok() ? r->FirstMismatch() : nullptr;
  return bad == nullptr ? "" : bad->stage + ": " + bad->note;
}

TEST(Invariants, PlantedBreaksAreNamedAtTheirStage) {
  const std::string c = std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/golden/sdpa_causal_tl_lq7_lk13.safetensors";
  // weights[0,0,0,0] (row 0's only visible key... and the row sum) +1e-3
  EXPECT_EQ(FirstBad(Edit(c, "weights", 0, [](double x) { return x + 1e-3; })),
            "weights: each row sums to one (a row with every key hidden: zero)");
  // a future key of row 0 (j = 5 > 0) given weight: the hidden-key check
  EXPECT_EQ(FirstBad(Edit(c, "weights", 5, [](double) { return 1e-30; })),
            "weights: masked and future keys have weight exactly 0");
  EXPECT_EQ(FirstBad(Edit(c, "lse", 3, [](double x) { return x + 1e-4; })),
            "lse: lse = log sum exp(masked) (-inf for a row with every key hidden)");
  EXPECT_EQ(FirstBad(Edit(c, "out", 7, [](double x) { return x * (1 + 1e-4); })),
            "out: out = weights . v (the dump's own weights and v)");
  // unchanged: nothing broken
  EXPECT_EQ(FirstBad(Edit(c, "none", 0, [](double x) { return x; })), "");
}

TEST(Invariants, TraceDumpsWithDecodeStepsAndPadding) {
  testing::ScratchDir dir("invariants_trace");
  trace::ToyOptions d;
  d.decode_steps = 3;
  trace::ToyOptions p;
  p.pad = 3;
  for (const trace::ToyOptions& o : {d, p}) {
    Result<trace::Trace> t = trace::TraceToy(o);
    ASSERT_TRUE(t.ok());
    const std::string path = dir.P("toy.safetensors");
    ASSERT_TRUE(player::WriteTraceSafetensors(path, t.value()).ok());
    EXPECT_EQ(FirstBad(Edit(path, "none", 0, [](double x) { return x; })), "");
    if (o.decode_steps > 0) {  // a decode step's weights: named with its prefix
      EXPECT_EQ(FirstBad(Edit(path, "decode.1.weights", 2, [](double x) { return x + 1e-3; })),
                "decode.1.weights: each row sums to one (a row with every key hidden: zero)");
    }
  }
}

TEST(Invariants, CliExitCodesAndSkippedChecks) {
  using testing::RunCli;
  const std::string c = std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/golden/sdpa_basic.safetensors";
  testing::CliResult ok = RunCli("verify --invariants " + c);
  EXPECT_EQ(ok.code, 0) << ok.text;
  EXPECT_NE(ok.text.find("=> every invariant holds"), std::string::npos) << ok.text;
  // sdpa_basic is not causal: under --causal top_left its future weights break it
  testing::CliResult bad = RunCli("verify --invariants --causal top_left " + c);
  EXPECT_EQ(bad.code, 1) << bad.text;
  EXPECT_NE(bad.text.find("FIRST BROKEN INVARIANT: stage 'weights'"), std::string::npos) << bad.text;
  // a dump with weights only: the other checks are skipped, with the reason
  testing::ScratchDir dir("invariants_cli");
  Result<SafetensorsFile> f = SafetensorsFile::Open(c);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(WriteSafetensors(dir.P("w.safetensors"), {{"weights", f->Get("weights").value()}}, {})
                  .ok());
  testing::CliResult only = RunCli("verify --invariants " + dir.P("w.safetensors"));
  EXPECT_EQ(only.code, 0) << only.text;
  EXPECT_NE(only.text.find("skipped (no lse in the dump)"), std::string::npos) << only.text;
  // no weights at all: an error, exit 2
  ASSERT_TRUE(WriteSafetensors(dir.P("q.safetensors"), {{"q", f->Get("q").value()}}, {}).ok());
  testing::CliResult none = RunCli("verify --invariants " + dir.P("q.safetensors"));
  EXPECT_EQ(none.code, 2) << none.text;
  EXPECT_NE(none.text.find("has no 'weights' stage"), std::string::npos) << none.text;
}

}  // namespace
}  // namespace attnflow
