// cli_verify_dump_test.cc — `attnflow verify --compare GOT EXPECTED` with GOT
// a device dump (AFDUMP text, docs/device-dump.md), a STAGE.npy file or a
// directory of them. The dumps are written by tests/util/afdump_writer.h (made
// from the spec, independent of the parser) from the stages of a committed
// golden case, so a faithful dump must match and a one-bit change in one
// value must be named at its stage and index in verify's words.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnflow/npy.h"
#include "attnflow/safetensors.h"
#include "util/afdump_writer.h"
#include "util/cli_util.h"

namespace fs = std::filesystem;

namespace attnflow {
namespace {

using testing::CliResult;
using testing::RunCli;
using testing::SpecWriter;

const std::string kCase =
    std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/golden/sdpa_causal_br_lq7_lk13.safetensors";
const char* const kStages[] = {"scores", "scaled", "masked", "weights", "lse", "out"};

bool Has(const CliResult& o, const std::string& s) { return o.text.find(s) != std::string::npos; }

class VerifyDump : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() /
            ("attnflow_verify_dump_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::create_directories(dir_);
    Result<SafetensorsFile> f = SafetensorsFile::Open(kCase);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    for (const char* s : kStages) {
      Result<TensorView> v = f->Get(s);
      ASSERT_TRUE(v.ok()) << s;
      Stage st;
      st.name = s;
      st.shape.assign(v->shape.begin(), v->shape.begin() + v->rank);
      for (int64_t i = 0; i < v->numel(); ++i) st.values.push_back(float(v->load(i)));
      stages_.push_back(st);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  struct Stage {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;  // row-major (the case's stages are contiguous)
  };

  // One block with every stage, each in two parts written second-first,
  // console noise between the parts, CRLF line ends.
  void Block(SpecWriter& w, const std::string& impl, const std::vector<Stage>& st,
             const std::string& kind = "sdpa") {
    w.Header("sdpa_causal_br_lq7_lk13", kind, impl);
    for (const Stage& s : st) w.Tensor(s.name, "f32", s.shape);
    for (const Stage& s : st) {
      const size_t n = s.values.size(), h = n / 2;
      w.PartF32(s.name, s.values, h, n - h);
      w.Raw("I (1234) app: stage " + s.name + " half done");
      w.PartF32(s.name, s.values, 0, h);
    }
    w.Done("sdpa_causal_br_lq7_lk13");
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string p = dir_ + "/" + name;
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  CliResult Verify(const std::string& args) { return RunCli("verify --compare " + args); }

  std::string dir_;
  std::vector<Stage> stages_;
};

TEST_F(VerifyDump, FaithfulDumpMatchesEveryStage) {
  SpecWriter w;
  w.eol = "\r\n";
  w.out = "ESP-ROM:esp32c3-api1-20210207\r\nboot: attnflow golden harness\r\n";
  Block(w, "micro-f32", stages_);
  CliResult o = Verify(Write("uart.log", w.out) + " " + kCase);
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o,
                  "device dump block case=sdpa_causal_br_lq7_lk13 kind=sdpa impl=micro-f32 (line "
                  "3), 6 stage(s)"))
      << o.text;
  EXPECT_TRUE(Has(o, "impl=micro-f32")) << o.text;
  EXPECT_TRUE(Has(o, "=> match (6 stages compared)")) << o.text;
}

// One bit of one value (bit 22: the top mantissa bit, a change of 25-50%)
// changed in `masked` with a correct checksum: a port that breaks at the mask.
TEST_F(VerifyDump, OneBitInMaskedIsNamedAtItsStageAndIndex) {
  std::vector<Stage> st = stages_;
  Stage& m = st[2];
  ASSERT_EQ(m.name, "masked");
  // The first finite element with |x| > 0.1 after flat index 40.
  size_t at = 40;
  while (at < m.values.size() && !(std::isfinite(m.values[at]) && std::fabs(m.values[at]) > 0.1f))
    ++at;
  ASSERT_LT(at, m.values.size());
  uint32_t u;
  std::memcpy(&u, &m.values[at], 4);
  u ^= 1u << 22;
  std::memcpy(&m.values[at], &u, 4);
  // Its multi-index in [B, H, Lq, Lk] = [1, 2, 7, 13].
  const int64_t j = int64_t(at) % 13, i = int64_t(at) / 13 % 7, h = int64_t(at) / 91 % 2;
  const std::string idx =
      "[0," + std::to_string(h) + "," + std::to_string(i) + "," + std::to_string(j) + "]";
  SpecWriter w;
  Block(w, "micro-f32", st);
  CliResult o = Verify(Write("bad_mask.log", w.out) + " " + kCase);
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_TRUE(Has(o, "=> FIRST MISMATCH: stage 'masked' at " + idx + ":")) << idx << "\n" << o.text;
  EXPECT_TRUE(Has(o, "; 1 bad elements)")) << o.text;
  // --json names the same stage and index.
  CliResult j2 = RunCli("verify --json --compare " + dir_ + "/bad_mask.log " + kCase,
                        {.env = "", .deadline_s = 0, .stdin_null = false, .merge_stderr = false});
  EXPECT_EQ(j2.code, 1);
  nlohmann::json doc = nlohmann::json::parse(j2.text);
  EXPECT_EQ(doc["got_source"], "device-dump");
  EXPECT_EQ(doc["got_block"]["impl"], "micro-f32");
  EXPECT_EQ(doc["got_block"]["line"], 1);
  bool seen = false;
  for (const auto& s : doc["cases"][0]["stages"]) {
    if (s["stage"] != "masked") {
      EXPECT_EQ(s["match"], true) << s.dump();
      continue;
    }
    seen = true;
    EXPECT_EQ(s["match"], false);
    EXPECT_EQ(s["first_bad_index"], idx);
    EXPECT_EQ(s["bad"], 1);
  }
  EXPECT_TRUE(seen) << j2.text;
}

// The same bit flipped on the wire (checksum not recomputed): exit 2, the
// line of the part's `end`.
TEST_F(VerifyDump, ValueChangedOnTheWireIsAChecksumError) {
  SpecWriter w;
  Block(w, "micro-f32", stages_);
  std::string text = w.out;
  const size_t part = text.find("AFDUMP part masked ");
  const size_t d = text.find("AFDUMP d ", part);
  text[d + 9] = text[d + 9] == '3' ? 'b' : '3';  // first hex digit of the first value
  const size_t end = text.find("AFDUMP end masked", d);
  const int line = int(std::count(text.begin(), text.begin() + long(end), '\n')) + 1;
  CliResult o = Verify(Write("wire.log", text) + " " + kCase);
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "wire.log:" + std::to_string(line) + ": part 'masked'")) << line << "\n"
                                                                              << o.text;
  EXPECT_TRUE(Has(o, "checksum mismatch")) << o.text;
}

TEST_F(VerifyDump, TwoBlocksAreChosenByCaseAndImplementation) {
  std::vector<Stage> bad = stages_;
  bad[5].values[3] += 1.0f;  // out differs in the second block only
  SpecWriter w;
  Block(w, "micro-f32", stages_);
  w.Raw("---- reboot ----");
  Block(w, "micro-s8", bad);
  const std::string log = Write("two.log", w.out);
  CliResult o = Verify(log + " " + kCase);
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "2 blocks match")) << o.text;
  EXPECT_TRUE(Has(o, "impl=micro-s8 (line ")) << o.text;
  o = Verify(log + " " + kCase + " --device-impl micro-f32");
  EXPECT_EQ(o.code, 0) << o.text;
  o = Verify(log + " " + kCase + " --case sdpa_causal_br_lq7_lk13 --device-impl micro-s8");
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_TRUE(Has(o, "FIRST MISMATCH: stage 'out' at [0,0,0,3]")) << o.text;
  o = Verify(log + " " + kCase + " --case nope");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "no block with case=nope")) << o.text;
  // --case with anything but a dump is a usage error.
  o = Verify(kCase + " " + kCase + " --case x");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "choose a block of a device dump")) << o.text;
}

TEST_F(VerifyDump, WrongKindIntegerDtypeAndRankAreReported) {
  SpecWriter w;
  Block(w, "micro-f32", stages_, "mha");
  CliResult o = Verify(Write("mha.log", w.out) + " " + kCase);
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "is kind mha, but")) << o.text;
  // An int8 `out` against the float case, and a rank-5 `lse`.
  SpecWriter v;
  v.Header("c", "sdpa", "micro-s8");
  v.Tensor("out", "i8", {1, 2, 7, 8});
  v.Tensor("lse", "f32", {1, 2, 7, 1, 1});
  v.PartInt("out", std::vector<int64_t>(112, 1), 1, 0, 112);
  v.PartF32("lse", std::vector<float>(14, 0.5f), 0, 14);
  v.Done("c");
  o = Verify(Write("s8.log", v.out) + " " + kCase);
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_TRUE(Has(o, "dtype I8 vs F32")) << o.text;
  EXPECT_TRUE(Has(o, "shape [1,2,7,1,1] differs from expected [1,2,7]")) << o.text;
  // Not a dump, not safetensors, not npy.
  o = Verify(Write("junk.log", "hello\nAFDUMP d 1\n") + " " + kCase);
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "junk.log")) << o.text;
  EXPECT_TRUE(Has(o, "AFDUMP attnflow-dump/")) << o.text;
}

TEST_F(VerifyDump, NpyFileAndDirectory) {
  const std::string npy_dir = dir_ + "/stages";
  fs::create_directories(npy_dir);
  for (const Stage& s : stages_) {
    ASSERT_TRUE(WriteNpy(npy_dir + "/" + s.name + ".npy",
                         MakeView(const_cast<float*>(s.values.data()), DType::kF32, s.shape))
                    .ok());
  }
  std::ofstream(npy_dir + "/README.txt") << "not a stage";
  CliResult o = Verify(npy_dir + " " + kCase);
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o, "=> match (6 stages compared)")) << o.text;
  o = Verify(npy_dir + "/weights.npy " + kCase);
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_TRUE(Has(o, "=> match (1 stages compared)")) << o.text;
  // A wrong value in out.npy: named at its stage and index.
  std::vector<float> out = stages_[5].values;
  out[9] += 0.5f;
  ASSERT_TRUE(
      WriteNpy(npy_dir + "/out.npy", MakeView(out.data(), DType::kF32, stages_[5].shape)).ok());
  o = Verify(npy_dir + " " + kCase);
  EXPECT_EQ(o.code, 1) << o.text;
  EXPECT_TRUE(Has(o, "FIRST MISMATCH: stage 'out' at [0,0,1,1]")) << o.text;
  // A directory without .npy files, and a broken .npy.
  fs::create_directories(dir_ + "/empty");
  o = Verify(dir_ + "/empty " + kCase);
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "holds no .npy file")) << o.text;
  std::ofstream(npy_dir + "/lse.npy", std::ios::binary) << "\x93NUMPY\x01";
  o = Verify(npy_dir + " " + kCase);
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_TRUE(Has(o, "lse.npy")) << o.text;
}

}  // namespace
}  // namespace attnflow

namespace attnflow {
namespace {

// The committed console log of the emulated rv32imc board (README quick
// start, step 5): every block it holds still verifies against its case —
// f32 blocks against the golden case with float32 rounding bounds, int8
// blocks against export-c's int8 case — and passes the invariants alone.
TEST(CommittedDeviceLog, EveryBlockVerifies) {
  const std::string root = ATTNFLOW_SOURCE_DIR;
  const std::string log = root + "/tests/data/edge/uart_rv32imc.log";
  const std::string dir = ::testing::TempDir() + "/attnflow_uart_log_" + std::to_string(getpid());
  fs::create_directories(dir);
  for (const char* c : {"sdpa_basic", "sdpa_boolmask_2d", "mha_self_e16_h4"}) {
    const std::string golden = root + "/tests/data/golden/" + c + ".safetensors";
    CliResult f = RunCli("verify --compare " + log + " " + golden + " --case " + c +
                         " --device-impl micro-f32");
    EXPECT_EQ(f.code, 0) << c << "\n" << f.text;
    EXPECT_NE(f.text.find("tolerance=rounding bounds"), std::string::npos) << f.text;
    if (std::string(c).rfind("sdpa", 0) == 0) {
      const std::string s8 = dir + "/" + c + ".s8.safetensors";
      ASSERT_EQ(RunCli("export-c " + golden + " --out " + dir + "/" + c + ".h --s8-expected " + s8).code, 0);
      CliResult q = RunCli("verify --compare " + log + " " + s8 + " --case " + c + " --device-impl micro-s8");
      EXPECT_EQ(q.code, 0) << c << "\n" << q.text;
      CliResult inv = RunCli("verify --invariants " + log + " --case " + c + " --device-impl micro-f32");
      EXPECT_EQ(inv.code, 0) << c << "\n" << inv.text;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace attnflow
