// vit_rules_test.cc — the ViT's two named position-interpolation rules
// (attnflow/nn_vit.h PosInterpolation) against transformers:
//   * tests/data/nn_vit (tools/golden/make_vit_cases.py, pinned transformers
//     5.24.0): "size" cases checked by the generator against ViTModel, and
//     "scale_factor" cases against ViTModel with 4.35.2's interpolation, both
//     on non-square and resized images, each stage must match;
//   * tests/data/nn/vit_interp_* (made with transformers 4.35.2 itself, no
//     pos_interpolation key) must match "scale_factor" and fail "size";
//   * the rule of a case is what decides it: flipping the config key makes
//     the first mismatch the position table ("pos").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnflow/nn_golden.h"
#include "attnflow/nn_vit.h"
#include "attnflow/safetensors.h"
#include "util/nn_case_util.h"

namespace attnflow::nn {
namespace {

std::string Dir(const char* sub) { return std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/" + sub; }

std::vector<std::string> VitCases() { return testing::SafetensorsFilesIn(Dir("nn_vit")); }

// The case with its config's "pos_interpolation" set to `rule` ("" = removed).
Result<SafetensorsFile> WithRule(const std::string& path, const std::string& rule) {
  return testing::EditedCase(
      path, path + " (rule " + rule + ")", [](const std::string&, Tensor*) {},
      [&](auto* meta) {
        nlohmann::json cfg = nlohmann::json::parse(meta->at("config"));
        if (rule.empty())
          cfg.erase("pos_interpolation");
        else
          cfg["pos_interpolation"] = rule;
        (*meta)["config"] = cfg.dump();
      });
}

std::string RuleOf(const std::string& path) {
  Result<SafetensorsFile> f = SafetensorsFile::Open(path);
  return nlohmann::json::parse(f->metadata().at("config")).value("pos_interpolation", "");
}

TEST(VitRules, NamesRoundTripAndTheDefaultIsTheCurrentTransformersRule) {
  EXPECT_EQ(VitConfig().pos_interpolation, PosInterpolation::kSize);
  for (PosInterpolation r : {PosInterpolation::kSize, PosInterpolation::kScaleFactor}) {
    PosInterpolation back =
        r == PosInterpolation::kSize ? PosInterpolation::kScaleFactor : PosInterpolation::kSize;
    ASSERT_TRUE(ParsePosInterpolation(PosInterpolationName(r), &back));
    EXPECT_EQ(back, r);
  }
  EXPECT_STREQ(PosInterpolationName(PosInterpolation::kSize), "size");
  EXPECT_STREQ(PosInterpolationName(PosInterpolation::kScaleFactor), "scale_factor");
  PosInterpolation r = PosInterpolation::kSize;
  EXPECT_FALSE(ParsePosInterpolation("bilinear", &r));
}

TEST(VitRules, BothRulesAreCoveredOnNonSquareAndResizedImages) {
  int size = 0, scale = 0;
  for (const auto& f : VitCases()) {
    const std::string rule = RuleOf(f);
    size += rule == "size";
    scale += rule == "scale_factor";
  }
  EXPECT_GE(size, 3);
  EXPECT_GE(scale, 3);
}

class VitRuleCase : public ::testing::TestWithParam<std::string> {};

TEST_P(VitRuleCase, MatchesTransformersStageByStage) {
  testing::ExpectEveryStageMatches(GetParam());
}

TEST_P(VitRuleCase, TheOtherRuleFailsFirstAtThePositions) {
  const std::string other = RuleOf(GetParam()) == "size" ? "scale_factor" : "size";
  Result<SafetensorsFile> m = WithRule(GetParam(), other);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Result<CaseReport> r = VerifyNnCase(m.value());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const StageReport* bad = r->FirstMismatch();
  ASSERT_NE(bad, nullptr) << "the rules should differ on this image";
  EXPECT_EQ(bad->stage, "pos");
}

INSTANTIATE_TEST_SUITE_P(Cases, VitRuleCase, ::testing::ValuesIn(VitCases()),
                         testing::CaseFileTestName);

// The cases written by transformers 4.35.2 (no key: "scale_factor").
TEST(VitRules, Transformers435CasesMatchScaleFactorAndNotSize) {
  for (const char* name : {"vit_interp_3x3_to_4x5", "vit_interp_2x2_to_5x5"}) {
    const std::string path = Dir("nn") + "/" + name + ".safetensors";
    ASSERT_EQ(RuleOf(path), "") << path;
    for (const char* rule : {"", "scale_factor", "size"}) {
      Result<SafetensorsFile> m = WithRule(path, rule);
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      Result<CaseReport> r = VerifyNnCase(m.value());
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      EXPECT_EQ(r->ok(), std::string(rule) != "size") << name << " with rule '" << rule << "'";
    }
  }
}

TEST(VitRules, AnUnknownRuleIsACorruptCase) {
  Result<SafetensorsFile> m = WithRule(VitCases().front(), "bilinear");
  ASSERT_TRUE(m.ok());
  Result<CaseReport> r = VerifyNnCase(m.value());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("pos_interpolation"), std::string::npos)
      << r.status().message();
}

// A square image on the trained grid is never resized, whatever the rule.
TEST(VitRules, TheTrainedGridIsNotResized) {
  const int64_t G = 3, E = 2;
  std::vector<double> pos(static_cast<size_t>((1 + G * G) * E));
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = std::sin(0.7 * static_cast<double>(i));
  const TensorView in = MakeView(pos.data(), DType::kF64, {1 + G * G, E});
  for (PosInterpolation rule : {PosInterpolation::kSize, PosInterpolation::kScaleFactor}) {
    std::vector<double> out(pos.size(), -1);
    ASSERT_TRUE(VitPositions(MakeView(out.data(), DType::kF64, {1 + G * G, E}), in, G, G, G, true,
                             true, rule)
                    .ok());
    EXPECT_EQ(out, pos) << PosInterpolationName(rule);
  }
}

}  // namespace
}  // namespace attnflow::nn
