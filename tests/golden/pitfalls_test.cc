// pitfalls_test.cc — the chapter's pitfalls as breaks (docs/lab.md exercise
// 9): each committed `*_pitfall_*` case (PyTorch float64,
// tools/golden/make_cases.py) run through the lab's port with the pitfall's
// bug (`tools/demo/lab_port.py --break`) is named by verify at the stage
// the pitfall first corrupts, and the same port without the bug matches
// every stage. The port is independent Python (standard library only); the
// stage each bug must be named at is the pitfall's definition (where the
// wrong rule or arithmetic first enters the dataflow).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "attnflow/golden.h"
#include "util/cli_util.h"
#include "util/scratch_util.h"

namespace attnflow {
namespace {

struct Pitfall {
  const char* file;   // tests/data/golden/<file>.safetensors
  const char* bug;    // lab_port.py --break
  const char* stage;  // the stage verify must name
};

constexpr Pitfall kPitfalls[] = {
    {"sdpa_pitfall_key_mask", "mask-axis", "masked"},          // broadcast mask direction
    {"sdpa_pitfall_padding_causal", "or-masks", "masked"},     // padding with a causal mask
    {"sdpa_pitfall_decode_offset", "align", "masked"},         // a position offset in decode
    {"sdpa_pitfall_fp16_softmax", "fp16-softmax", "weights"},  // softmax in fp16 (overflow)
    {"mha_pitfall_head_order", "head-order", "q"},             // multi-head reshape order
};

// Runs the lab port on `c` (with `bug`, or none) and compares its dump with
// the case; returns the first mismatching stage ("" = every stage matches).
std::string FirstBreak(const std::string& c, const std::string& bug, const std::string& out) {
  const testing::CliResult r = testing::RunShell(
      "python3 " + std::string(ATTNFLOW_SOURCE_DIR) + "/tools/demo/lab_port.py " + c + " " + out +
      (bug.empty() ? "" : " --break " + bug));
  EXPECT_EQ(r.code, 0) << r.text;
  Result<GotStages> got = LoadGotStages(out);
  Result<SafetensorsFile> exp = SafetensorsFile::Open(c);
  EXPECT_TRUE(got.ok() && exp.ok());
  if (!got.ok() || !exp.ok()) return "?";
  Result<CaseReport> rep = CompareStages(got.value(), exp.value(), CompareOptions{});
  EXPECT_TRUE(rep.ok()) << rep.status().ToString();
  if (!rep.ok()) return "?";
  const StageReport* bad = rep->FirstMismatch();
  return bad == nullptr ? "" : bad->stage;
}

TEST(Pitfalls, EachIsNamedAtItsStageAndTheCorrectPortMatches) {
  testing::ScratchDir dir("pitfalls");
  for (const Pitfall& p : kPitfalls) {
    const std::string c =
        std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/golden/" + p.file + ".safetensors";
    EXPECT_EQ(FirstBreak(c, "", dir.P("good.safetensors")), "") << p.file;
    EXPECT_EQ(FirstBreak(c, p.bug, dir.P("bad.safetensors")), p.stage) << p.file << " --break "
                                                                         << p.bug;
  }
}

// The fp16 pitfall really overflows: the broken port's weights hold NaN.
TEST(Pitfalls, Fp16SoftmaxOverflowsToNan) {
  testing::ScratchDir dir("pitfalls_fp16");
  const std::string c =
      std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/golden/sdpa_pitfall_fp16_softmax.safetensors";
  ASSERT_EQ(FirstBreak(c, "fp16-softmax", dir.P("bad.safetensors")), "weights");
  Result<SafetensorsFile> f = SafetensorsFile::Open(dir.P("bad.safetensors"));
  ASSERT_TRUE(f.ok());
  const std::vector<float> w = GoldenFloats(f->Get("weights").value());
  int nan = 0;
  for (float x : w) nan += std::isnan(x);
  EXPECT_GT(nan, 0);
}

}  // namespace
}  // namespace attnflow
