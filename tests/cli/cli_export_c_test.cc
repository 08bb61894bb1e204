// cli_export_c_test.cc — `attnflow export-c` as a porter meets it (docs/edge.md
// "Golden vectors on a device"): every committed golden case exports, except
// those with semantics the micro library lacks so far (softcap, the
// per-sequence diagonal, [B,H] ALiBi slopes: refused naming them); hostile
// or oversized cases are refused with a reason that names the limit, before
// anything is written; outputs never replace the input and are written
// whole. The device side of the export (compiled and run on three emulated
// targets) is tools/edge/run_edge.sh.
//
// Invariants: cases are built here from a committed golden case with one
// thing changed; expected outcomes are the documented refusals, not output of
// the code under test.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "attnflow/safetensors.h"
#include "util/cli_util.h"

namespace attnflow {
namespace {

namespace fs = std::filesystem;
using testing::RunCli;

std::string Golden(const std::string& name) {
  return std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/golden/" + name + ".safetensors";
}

std::string ReadText(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class ExportC : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("attnflow_export_c_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  // A copy of a committed case with tensor `name` replaced (or removed when
  // `replace` is absent) and `extra` metadata.
  std::string Mutate(const std::string& src, const std::string& name, const TensorView* replace,
                     const std::string& out_name) {
    Result<SafetensorsFile> f = SafetensorsFile::Open(Golden(src));
    EXPECT_TRUE(f.ok());
    std::vector<std::pair<std::string, TensorView>> tensors;
    for (const auto& n : f->names()) {
      if (n == name) {
        if (replace != nullptr) tensors.push_back({n, *replace});
        continue;
      }
      tensors.push_back({n, f->Get(n).value()});
    }
    const std::string path = (dir_ / (out_name + ".safetensors")).string();
    EXPECT_TRUE(WriteSafetensors(path, tensors, f->metadata()).ok());
    return path;
  }
  fs::path dir_;
};

// What a committed case carries beyond masks, windows and [H] ALiBi, read
// from the file itself (docs/golden-format.md): its softcap and kv_align
// metadata and the rank of its ALiBi slopes, as the header must say them.
std::vector<std::string> NewSemanticsFields(const fs::path& p) {
  Result<SafetensorsFile> f = SafetensorsFile::Open(p.string());
  EXPECT_TRUE(f.ok()) << p;
  if (!f.ok()) return {};
  const auto& meta = f->metadata();
  std::vector<std::string> want;
  if (meta.count("softcap") && std::stod(meta.at("softcap")) != 0.0) want.push_back(".softcap = 0x");
  if (meta.count("kv_align") && meta.at("kv_align") == "per_sequence")
    want.push_back(".kv_align = AF_KV_ALIGN_PER_SEQUENCE");
  Result<TensorView> slopes = f->Get("alibi_slopes");
  if (slopes.ok() && slopes->rank == 2) want.push_back(".alibi_per_batch = 1");
  return want;
}

TEST_F(ExportC, EveryCommittedCaseExportsWithItsStagesAndInt8Path) {
  int n = 0, with_new = 0;
  for (const auto& e :
       fs::directory_iterator(fs::path(ATTNFLOW_SOURCE_DIR) / "tests/data/golden")) {
    if (e.path().extension() != ".safetensors") continue;
    const std::string out = (dir_ / (e.path().stem().string() + ".h")).string();
    auto r = RunCli("export-c " + e.path().string() + " --out " + out);
    ASSERT_EQ(r.code, 0) << e.path() << "\n" << r.text;
    const std::string h = ReadText(out);
    EXPECT_NE(h.find("static const af_golden_case " + e.path().stem().string() + " = {"),
              std::string::npos);
    // Every committed sdpa and mha case has an int8 path on the device.
    EXPECT_NE(r.text.find("int8: yes"), std::string::npos) << e.path() << "\n" << r.text;
    if (e.path().filename().string().rfind("mha_", 0) == 0) {
      EXPECT_EQ(h.find(".heads_out8 = {AF_G_ABSENT"), std::string::npos) << e.path();
    }
    // Softcap, the per-sequence diagonal and [B,H] slopes reach the header.
    const std::vector<std::string> want = NewSemanticsFields(e.path());
    for (const std::string& field : want)
      EXPECT_NE(h.find(field), std::string::npos) << e.path() << ": " << field;
    if (want.empty()) {
      EXPECT_NE(h.find(".kv_align = AF_KV_ALIGN_PADDED, .alibi_per_batch = 0, .softcap = 0x0p+0f"),
                std::string::npos)
          << e.path();
    }
    with_new += !want.empty();
    EXPECT_NE(r.text.find("pool_bytes="), std::string::npos);
    ++n;
  }
  EXPECT_GE(n, 52);
  EXPECT_EQ(with_new, 5);  // softcap, the per-sequence diagonal, [B,H] ALiBi slopes
}

TEST_F(ExportC, SoftcapExportsWithItsCapAndAnInt8Path) {
  const fs::path header = dir_ / "softcap.h", data = dir_ / "softcap.bin";
  auto r = RunCli("export-c " + Golden("sdpa_softcap5_gqa_causal_br") + " --out " +
                  header.string() + " --data " + data.string());
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("int8: yes"), std::string::npos) << r.text;
  const std::string h = ReadText(header.string());
  EXPECT_NE(h.find(".softcap = 0x1.4p+2f"), std::string::npos) << h.substr(0, 2000);  // 5.0
  EXPECT_TRUE(fs::exists(data));
}

TEST_F(ExportC, AStageShorterThanItsShapeIsRefusedBeforeWriting) {
  // `out` of sdpa_basic is [2,2,7,8]; a [2,2,7,7] one would make the harness
  // read past the array.
  Result<SafetensorsFile> f = SafetensorsFile::Open(Golden("sdpa_basic"));
  ASSERT_TRUE(f.ok());
  TensorView out = f->Get("out").value();
  ASSERT_EQ(out.shape[3], 8);
  std::vector<float> shorter(2 * 2 * 7 * 7, 0.f);
  TensorView s = MakeView(shorter.data(), DType::kF32, {2, 2, 7, 7});
  const std::string bad = Mutate("sdpa_basic", "out", &s, "short_out");
  const std::string header = (dir_ / "short.h").string();
  auto r = RunCli("export-c " + bad + " --out " + header);
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("stage 'out' has shape [2,2,7,7], expected [2,2,7,8]"), std::string::npos)
      << r.text;
  EXPECT_FALSE(fs::exists(header));
}

TEST_F(ExportC, ANaNStageIsRefusedNamingTheElement) {
  Result<SafetensorsFile> f = SafetensorsFile::Open(Golden("sdpa_basic"));
  ASSERT_TRUE(f.ok());
  std::vector<float> lse(2 * 2 * 7, 0.5f);
  lse[9] = std::nanf("");
  TensorView v = MakeView(lse.data(), DType::kF32, {2, 2, 7});
  const std::string bad = Mutate("sdpa_basic", "lse", &v, "nan_lse");
  auto r = RunCli("export-c " + bad + " --out " + (dir_ / "nan.h").string());
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("stage 'lse' holds NaN at [0,1,2]"), std::string::npos) << r.text;
  EXPECT_FALSE(fs::exists(dir_ / "nan.h"));
}

TEST_F(ExportC, AMissingRequiredStageIsRefused) {
  const std::string bad = Mutate("sdpa_basic", "lse", nullptr, "no_lse");
  auto r = RunCli("export-c " + bad + " --out " + (dir_ / "x.h").string());
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("the 'lse' stage is missing"), std::string::npos) << r.text;
}

TEST_F(ExportC, OutputNamingTheInputIsRefusedAndTheInputKept) {
  const fs::path in = dir_ / "case.safetensors";
  fs::copy_file(Golden("sdpa_basic"), in);
  const std::string before = ReadText(in);
  auto r = RunCli("export-c " + in.string() + " --out " + in.string());
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("is the input file"), std::string::npos) << r.text;
  // Through a symlink, and as --data.
  fs::create_symlink(in, dir_ / "link.h");
  r = RunCli("export-c " + in.string() + " --out " + (dir_ / "link.h").string());
  EXPECT_EQ(r.code, 2) << r.text;
  r = RunCli("export-c " + in.string() + " --out " + (dir_ / "ok.h").string() + " --data " +
             in.string());
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_EQ(ReadText(in), before);
  EXPECT_FALSE(fs::exists(dir_ / "ok.h"));
}

TEST_F(ExportC, ACaseAboveTheFlashBudgetSaysHowToRunIt) {
  // A decode case with a 1000-token cache: 8 MB of f32 K/V.
  const std::string big = (dir_ / "decode.safetensors").string();
  auto g = RunCli("golden --kind sdpa --batch 2 --heads 4 --q-len 1 --kv-len 1000 --head-dim 128 "
                  "--causal bottom_right --seed 4 --out " + big);
  ASSERT_EQ(g.code, 0) << g.text;
  const std::string h = (dir_ / "decode.h").string();
  auto r = RunCli("export-c " + big + " --out " + h);
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("exceeds a device limit"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("--data"), std::string::npos) << r.text;
  EXPECT_FALSE(fs::exists(h));
  // With --data the header holds offsets only; one chunk (a batch element and
  // a kv head: 2 x 1000 x 128 floats of K and V) needs about 1 MiB of RAM.
  const std::string bin = (dir_ / "decode.bin").string();
  r = RunCli("export-c " + big + " --out " + h + " --data " + bin);
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("more than --ram-bytes"), std::string::npos) << r.text;
  r = RunCli("export-c " + big + " --out " + h + " --data " + bin + " --ram-bytes 2MiB");
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_LT(fs::file_size(h), 8192u) << "the header should hold offsets, not data";
  EXPECT_GT(fs::file_size(bin), 8u << 20);
  EXPECT_NE(ReadText(h).find(".data_file = \"decode.bin\""), std::string::npos);
}

TEST_F(ExportC, Int8ExpectationsForVerifyCompare) {
  const std::string s8 = (dir_ / "s8.safetensors").string();
  auto r = RunCli("export-c " + Golden("sdpa_boolmask_2d") + " --out " + (dir_ / "c.h").string() +
                  " --s8-expected " + s8);
  ASSERT_EQ(r.code, 0) << r.text;
  Result<SafetensorsFile> f = SafetensorsFile::Open(s8);
  ASSERT_TRUE(f.ok());
  Result<TensorView> out = f->Get("out");
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->dtype, DType::kI8);
  EXPECT_EQ(f->metadata().at("atol"), "2");
  EXPECT_EQ(f->metadata().at("rtol"), "0");
  // mha has an int8 path on the device (teacher-forced stages, judged by the
  // harness), but no out-only expectations file: asking for one is an error.
  r = RunCli("export-c " + Golden("mha_self_e16_h4") + " --out " + (dir_ / "m.h").string() +
             " --s8-expected " + (dir_ / "m8.safetensors").string());
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("teacher-forced"), std::string::npos) << r.text;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "m8.safetensors"));
}

TEST_F(ExportC, BadOptionValuesAreUsageErrors) {
  auto r = RunCli("export-c " + Golden("sdpa_basic") + " --out " + (dir_ / "c.h").string() +
                  " --flash-bytes lots");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.text.find("--flash-bytes 'lots' is not a positive size"), std::string::npos)
      << r.text;
  r = RunCli("export-c " + Golden("sdpa_basic") + " --out " + (dir_ / "c.h").string() +
             " --stages some");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.text.find("--stages must be auto, all or none"), std::string::npos) << r.text;
  EXPECT_FALSE(fs::exists(dir_ / "c.h"));
}

TEST_F(ExportC, ANameThatCannotNameACaseInCIsRefused) {
  // Each of these would give a header that does not compile (a keyword, a
  // <math.h> or <stdint.h> name the header includes, a reserved or library
  // prefix) or is not an identifier at all: refused, nothing written.
  for (const char* bad : {"int", "static", "bool", "sin", "expf", "_Case", "__x", "my_t",
                          "af_case", "AF_CASE", "INT8_MAX", "NAN", "a-b", "9lives", "main"}) {
    const fs::path h = dir_ / "c.h";
    auto r = RunCli("export-c " + Golden("sdpa_basic") + " --out " + h.string() + " --name '" +
                    bad + "'");
    EXPECT_EQ(r.code, 2) << bad << ": " << r.text;
    EXPECT_NE(r.text.find("cannot name the case in C"), std::string::npos) << r.text;
    EXPECT_FALSE(fs::exists(h)) << bad;
  }
  // A file stem that is a keyword gets a prefix; the header then compiles
  // as C99 with the harness's af_golden.h.
  const fs::path in = dir_ / "int.safetensors";
  fs::copy_file(Golden("sdpa_basic"), in);
  const fs::path h = dir_ / "int.h";
  auto r = RunCli("export-c " + in.string() + " --out " + h.string());
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_NE(ReadText(h).find("static const af_golden_case case_int = {"), std::string::npos);
  const std::string src = std::string(ATTNFLOW_SOURCE_DIR);
  const std::string cc = "cc -std=c99 -Wall -Werror -fsyntax-only -I" + src + "/micro/harness -I" +
                         src + "/include -include " + h.string() + " -x c /dev/null";
  EXPECT_EQ(std::system(cc.c_str()), 0) << cc;
}

}  // namespace
}  // namespace attnflow
