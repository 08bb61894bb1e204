// fault_hostile4_test.cc — fault matrix rows of the fourth hostile-input
// round (docs/errors.md rows H23-H25) that reach the CLI: `verify --compare`
// with nothing to compare prints an error and no verdict line, user strings
// in error messages are quoted with a bounded prefix, and `bench --io`
// counts every buffer it will allocate before it starts. The Python rows
// (the KV-cache wrapper's index arguments, H26) are
// python/tests/test_flash_index_args.py.
//
// Every expected outcome is a rule of docs/errors.md (errors exit 2 with
// `error:`, a check that fails exits 1 with a verdict, messages quote at
// most kMaxQuotedBytes of a user string); nothing comes from the code under
// test. Each test fails on the code before the fix: a "=> match (0 stages
// compared)" line, a 50 MiB message, the flash schedule timed for tens of
// seconds before the naive buffers failed to allocate.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnflow/npy.h"
#include "attnflow/status.h"
#include "attnflow/tensor.h"
#include "../util/cli_util.h"
#include "../util/scratch_util.h"

namespace attnflow {
namespace {

using testing::CliOptions;
using testing::RunCli;
using testing::ScratchDir;

std::string Golden(const std::string& name) {
  return std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/golden/" + name;
}

// H23: a GOT whose stage names match nothing in EXPECTED is an error, not a
// verdict: exit 2, `error:`, and no "=>" line (which would read as a match).
TEST(HostileRound4, VerifyCompareWithNoCommonStagePrintsNoVerdict) {
  ScratchDir dir("h4_verify");
  float x[4] = {1, 2, 3, 4};
  ASSERT_TRUE(WriteNpy(dir.P("unrelated.npy"), MakeView(x, DType::kF32, {4})).ok());
  const testing::CliResult r =
      RunCli("verify --compare " + dir.P("unrelated.npy") + " " + Golden("sdpa_basic.safetensors"));
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("error:"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("=>"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("match"), std::string::npos) << r.text;
}

// H24: a 50 MiB config name (and a 50 MiB unknown field) in a `budget
// --config` JSON file: the message quotes a bounded prefix and the length.
TEST(HostileRound4, HugeUserStringsAreQuotedBounded) {
  ScratchDir dir("h4_budget");
  const std::string huge(50u << 20, 'n');
  const std::string body = ",\"num_layers\":2,\"d_model\":64,\"num_heads\":4,\"ffn_dim\":128}";
  const std::string named = "{\"name\":\"" + huge + "\"" + body;
  const std::string field = "{\"" + huge + "\":1" + body;
  for (const std::string& json : {named, field}) {
    const std::string path = dir.File("cfg.json", std::vector<uint8_t>(json.begin(), json.end()));
    const testing::CliResult r = RunCli("budget --config " + path);
    EXPECT_EQ(r.code, 2);
    EXPECT_LT(r.text.size(), 2000u) << r.text.substr(0, 400);
    EXPECT_NE(r.text.find("(52428800 bytes)"), std::string::npos) << r.text.substr(0, 400);
  }
  // A name that looks like a file but is not there: said so, not "unknown config".
  const testing::CliResult r = RunCli("budget --config " + dir.P("nope.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.text.find("no such file"), std::string::npos) << r.text;
  // The helper itself: short strings whole, long ones cut at a UTF-8 boundary.
  EXPECT_EQ(QuoteBounded("abc"), "'abc'");
  const std::string s = std::string(79, 'a') + "\xc3\xa9" + "tail";  // é straddles byte 80
  EXPECT_EQ(QuoteBounded(s), "'" + std::string(79, 'a') + "...' (85 bytes)");
}

// H25: `bench prefill --io` at a length whose naive S and P cannot fit is
// refused before anything runs (not after timing the flash schedule).
TEST(HostileRound4, BenchIoCountsTheNaiveBuffersUpFront) {
  CliOptions o;
  o.deadline_s = 60;  // a hang or a long flash run would end here as 124
  const testing::CliResult r =
      RunCli("bench prefill --io --no-peak --heads 1 --head-dim 8 --q-len 400000 --kv-len 400000 "
             "--repeat 1 --warmup 0",
             o);
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("naive schedule's S and P"), std::string::npos) << r.text;
  // The same shape without --io needs only Q, K, V and the output: it is
  // not refused by the check (not run here: it would take minutes).
}

}  // namespace
}  // namespace attnflow
