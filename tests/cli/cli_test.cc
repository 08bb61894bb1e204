// cli_test.cc — the `attnflow` command's exit codes and messages, run as a
// subprocess: 0 ok, 1 a check failed, 2 usage error or invalid input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "attnflow/safetensors.h"
#include "util/cli_util.h"
#include "util/test_util.h"

namespace fs = std::filesystem;

namespace attnflow {
namespace {

using Out = attnflow::testing::CliResult;
Out Cli(const std::string& args) { return attnflow::testing::RunCli(args); }

std::string Dir() {
  const fs::path d = fs::temp_directory_path() / ("attnflow_cli_test_" + std::to_string(getpid()));
  fs::create_directories(d);
  return d.string();
}

std::string FirstCase() {
  const fs::path dir = fs::path(ATTNFLOW_SOURCE_DIR) / "tests/data/golden";
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") v.push_back(e.path().string());
  std::sort(v.begin(), v.end());
  return v.empty() ? "" : v.front();
}

bool Has(const Out& o, const std::string& s) { return o.text.find(s) != std::string::npos; }

TEST(Cli, HelpOnEveryCommandExitsZero) {
  for (const char* c : {"--help", "demo --help", "verify --help", "golden --help"}) {
    Out o = Cli(c);
    EXPECT_EQ(o.code, 0) << c << "\n" << o.text;
    EXPECT_TRUE(Has(o, "Usage")) << c;
  }
}

TEST(Cli, UsageErrorsExitTwo) {
  EXPECT_EQ(Cli("").code, 2);
  EXPECT_EQ(Cli("no-such-command").code, 2);
  EXPECT_EQ(Cli("verify").code, 2);
  EXPECT_EQ(Cli("verify --no-such-flag x").code, 2);
  EXPECT_EQ(Cli("golden --kind sdpa").code, 2);  // --out missing
  EXPECT_EQ(Cli("golden --kind conv --out /tmp/x").code, 2);
  EXPECT_EQ(Cli("verify --impl fastest " + FirstCase()).code, 2);
}

TEST(Cli, DemoPassesItsChecks) {
  Out o = Cli("demo");
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o, "PASS"));
  EXPECT_TRUE(Has(o, "weights = softmax(masked)"));
  EXPECT_TRUE(Has(o, "concat"));
}

TEST(Cli, VerifyCommittedCaseExitsZero) {
  Out o = Cli("verify " + FirstCase());
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o, "=> match"));
  EXPECT_TRUE(Has(o, "weights"));
}

TEST(Cli, VerifyMissingUnreadableOrInvalidFileExitsTwo) {
  const std::string d = Dir();
  Out o = Cli("verify " + d + "/missing.safetensors");
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(Has(o, "missing.safetensors")) << o.text;
  o = Cli("verify " + d);  // a directory
  EXPECT_EQ(o.code, 2) << o.text;
  std::ofstream(d + "/junk.safetensors") << "this is not a safetensors file at all";
  o = Cli("verify " + d + "/junk.safetensors");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "junk.safetensors"));
  // A valid safetensors file that is not a golden case names the field.
  Tensor t = testing::Random({2, 2}, 1);
  ASSERT_TRUE(WriteSafetensors(d + "/plain.safetensors", {{"x", t.view()}}).ok());
  o = Cli("verify " + d + "/plain.safetensors");
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(Has(o, "metadata 'format'")) << o.text;
  // One bad file among good ones still gives 2.
  o = Cli("verify " + FirstCase() + " " + d + "/plain.safetensors");
  EXPECT_EQ(o.code, 2);
}

TEST(Cli, GoldenThenVerifyThenTamperedCompare) {
  const std::string d = Dir();
  Out o = Cli("golden --kind sdpa --heads 4 --kv-heads 2 --q-len 5 --kv-len 9 --head-dim 6 "
              "--causal bottom_right --mask bool --mask-shape 1 5 9 --seed 3 --out " + d + "/g.safetensors");
  ASSERT_EQ(o.code, 0) << o.text;
  EXPECT_EQ(Cli("verify " + d + "/g.safetensors").code, 0);
  EXPECT_EQ(Cli("verify --impl kernels " + d + "/g.safetensors").code, 0);
  EXPECT_EQ(Cli("verify --compare " + d + "/g.safetensors " + d + "/g.safetensors").code, 0);
  // A "port" that dumps a wrong weights stage.
  Result<SafetensorsFile> f = SafetensorsFile::Open(d + "/g.safetensors");
  ASSERT_TRUE(f.ok());
  Result<Tensor> w = f->Copy("weights");
  Result<Tensor> s = f->Copy("scaled");
  ASSERT_TRUE(w.ok() && s.ok());
  w->data<float>()[7] += 0.01f;
  ASSERT_TRUE(WriteSafetensors(d + "/port.safetensors", {{"scaled", s->view()}, {"weights", w->view()}}).ok());
  o = Cli("verify --compare " + d + "/port.safetensors " + d + "/g.safetensors");
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_TRUE(Has(o, "FIRST MISMATCH: stage 'weights'")) << o.text;
  EXPECT_EQ(Cli("verify --compare " + d + "/port.safetensors").code, 2);
  // Writing to an impossible location: exit 2, nothing left behind.
  o = Cli("golden --out " + d + "/no/such/dir/x.safetensors");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_FALSE(fs::exists(d + "/no"));
}

TEST(Cli, VerifyTamperedCaseExitsOneAndNamesTheStage) {
  const std::string d = Dir();
  Result<SafetensorsFile> f = SafetensorsFile::Open(FirstCase());
  ASSERT_TRUE(f.ok());
  std::vector<Tensor> keep;
  std::vector<std::pair<std::string, TensorView>> ts;
  for (const auto& n : f->names()) keep.push_back(f->Copy(n).value());
  size_t i = 0;
  for (const auto& n : f->names()) {
    if (n == "lse") {
      float* l = keep[i].data<float>();
      for (int64_t e = 0; e < keep[i].numel(); ++e)
        if (std::isfinite(l[e])) {
          l[e] += 1.0f;
          break;
        }
    }
    ts.emplace_back(n, keep[i++].view());
  }
  ASSERT_TRUE(WriteSafetensors(d + "/bad.safetensors", ts, f->metadata()).ok());
  Out o = Cli("verify " + d + "/bad.safetensors");
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_TRUE(Has(o, "FIRST MISMATCH: stage 'lse'")) << o.text;
}

}  // namespace
}  // namespace attnflow
