// nn_golden_test.cc — every committed nn golden case (tests/data/nn, made by
// tools/golden/make_nn_cases.py from torch / Hugging Face float64
// references) is re-run through the float64 reference and must match stage
// by stage; corrupted cases and perturbed inputs must be rejected/reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "attnflow/nn_golden.h"
#include "util/nn_case_util.h"

namespace attnflow::nn {
namespace {

std::string DataDir() { return std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/nn"; }

std::vector<std::string> CaseFiles() { return testing::SafetensorsFilesIn(DataDir()); }

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

class NnGolden : public ::testing::TestWithParam<std::string> {};

TEST_P(NnGolden, ReferenceMatchesEveryStage) { testing::ExpectEveryStageMatches(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cases, NnGolden, ::testing::ValuesIn(CaseFiles()),
                         testing::CaseFileTestName);

TEST(NnGoldenSuite, EveryKindIsCovered) {
  std::set<std::string> kinds;
  for (const auto& f : CaseFiles()) {
    Result<SafetensorsFile> sf = SafetensorsFile::Open(f);
    ASSERT_TRUE(sf.ok());
    kinds.insert(sf->metadata().at("kind"));
  }
  for (const auto& k : NnGoldenKinds()) EXPECT_TRUE(kinds.count(k)) << "no golden case of " << k;
  EXPECT_FALSE(IsNnGoldenKind("sdpa"));
  EXPECT_FALSE(IsNnGoldenKind("mha"));
}

// Re-encodes a case with one tensor replaced (or metadata changed) to show the
// verifier can fail.
Result<SafetensorsFile> Mutate(const std::string& path, const std::string& tensor,
                               double delta, const std::string& meta_key = "",
                               const std::string& meta_value = "") {
  return testing::EditedCase(
      path, path + " (mutated)",
      [&](const std::string& name, Tensor* t) {
        if (name == tensor) t->view().store(0, t->view().load(0) + delta);
      },
      [&](auto* meta) {
        if (!meta_key.empty()) (*meta)[meta_key] = meta_value;
      });
}

TEST(NnGoldenSuite, PerturbedWeightIsReportedAtTheFirstAffectedStage) {
  const std::string path = DataDir() + "/block_llama_gqa_rope.safetensors";
  Result<SafetensorsFile> m = Mutate(path, "attn.w_k", 1e-3);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Result<CaseReport> r = VerifyNnCase(m.value());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const StageReport* bad = r->FirstMismatch();
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ(bad->stage, "k");  // attn_in and q are unaffected
}

TEST(NnGoldenSuite, PerturbedExpectedStageFails) {
  const std::string path = DataDir() + "/transfo_xl_post_mem4.safetensors";
  Result<SafetensorsFile> m = Mutate(path, "s1.layer.1.bd", 1e-3);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Result<CaseReport> r = VerifyNnCase(m.value());
  ASSERT_TRUE(r.ok());
  ASSERT_NE(r->FirstMismatch(), nullptr);
  EXPECT_EQ(r->FirstMismatch()->stage, "s1.layer.1.bd");
}

TEST(NnGoldenSuite, TolerancesAreHonoured) {
  const std::string path = DataDir() + "/rope_half_llama_gqa_decode.safetensors";
  Result<SafetensorsFile> m = Mutate(path, "q_rot", 1e-3);
  ASSERT_TRUE(m.ok());
  Result<CaseReport> strict = VerifyNnCase(m.value());
  ASSERT_TRUE(strict.ok());
  EXPECT_FALSE(strict->ok());
  Result<CaseReport> loose = VerifyNnCase(m.value(), 1e-2, 1e-2);
  ASSERT_TRUE(loose.ok());
  EXPECT_TRUE(loose->ok());
}

TEST(NnGoldenSuite, CorruptMetadataIsRejectedWithTheField) {
  const std::string path = DataDir() + "/sin_concat_d12.safetensors";
  struct Bad {
    const char* key;
    const char* value;
    const char* expect;
  } cases[] = {
      {"config", "{not json", "metadata 'config'"},
      {"config", "{\"length\":\"ten\",\"dim\":12}", "config 'length'"},
      {"config", "{\"length\":10,\"dim\":12,\"layout\":\"spiral\"}", "config 'layout'"},
      {"kind", "nn_unknown", "metadata 'kind'"},
      {"stages", "table,missing_stage", "stage 'missing_stage'"},
      {"atol", "-1", "metadata 'atol'"},
      {"format", "attnflow-golden/9", "metadata 'format'"},
  };
  for (const auto& b : cases) {
    Result<SafetensorsFile> m = Mutate(path, "", 0, b.key, b.value);
    ASSERT_TRUE(m.ok());
    Result<CaseReport> r = VerifyNnCase(m.value());
    ASSERT_FALSE(r.ok()) << b.key << "=" << b.value;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
    EXPECT_NE(r.status().message().find(b.expect), std::string::npos) << r.status().message();
  }
}

TEST(NnGoldenSuite, InconsistentInputsAreCorruptNotCrashes) {
  // A weight of the wrong shape: the op's shape error is reported as corrupt.
  const std::string path = DataDir() + "/block_post_ln_relu_pad.safetensors";
  Result<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  std::vector<Tensor> keep;
  std::vector<std::pair<std::string, TensorView>> ts;
  keep.reserve(f->tensors().size() + 1);
  for (const auto& info : f->tensors()) {
    if (info.name == "attn.w_k") {
      Result<Tensor> t = Tensor::Zeros(DType::kF32, {3, 16});
      keep.push_back(std::move(t).value());
    } else {
      keep.push_back(f->Copy(info.name).value());
    }
    ts.emplace_back(info.name, keep.back().view());
  }
  Result<std::vector<uint8_t>> bytes = EncodeSafetensors(ts, f->metadata());
  ASSERT_TRUE(bytes.ok());
  Result<SafetensorsFile> m = SafetensorsFile::FromBuffer(std::move(bytes).value(), "bad");
  ASSERT_TRUE(m.ok());
  Result<CaseReport> r = VerifyNnCase(m.value());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("k weight"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("[3,16]"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace attnflow::nn
