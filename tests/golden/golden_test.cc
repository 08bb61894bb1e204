// golden_test.cc — the committed golden cases (made by tools/golden/
// make_cases.py with PyTorch in float64) checked against the float64
// reference and against the fast kernels; plus the case validator's errors
// and the stage comparison's ability to name the first broken stage.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "attnflow/golden.h"
#include "attnflow/nn_golden.h"
#include "util/test_util.h"

namespace fs = std::filesystem;

namespace attnflow {
namespace {

std::vector<std::string> CaseFiles() {
  std::vector<std::string> files;
  const fs::path dir = fs::path(ATTNFLOW_SOURCE_DIR) / "tests/data/golden";
  if (fs::exists(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

std::string TempPath(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attnflow_golden_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  return (dir / name).string();
}

// A file that claims to be a golden case but carries a huge header (here
// 120000 empty tensors, ~7 MB of JSON; the hostile round used a million) is
// refused before its header is parsed, by both loaders.
TEST(GoldenCases, AHugeHeaderIsRefusedBeforeParsing) {
  std::string header = "{\"__metadata__\":{\"format\":\"attnflow-golden/1\",\"kind\":\"sdpa\"}";
  for (int i = 0; i < 120000; ++i) {
    header += ",\"t" + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
  }
  header += "}";
  while (header.size() % 8 != 0) header += ' ';
  const std::string path = ::testing::TempDir() + "/huge_header.safetensors";
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) std::fputc(static_cast<int>((n >> (8 * i)) & 0xff), f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::fclose(f);
  ASSERT_GT(n, kGoldenMaxHeaderBytes);
  Result<GoldenCase> c = LoadGoldenCase(path);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(c.status().message().find("-byte limit for this kind of file"), std::string::npos)
      << c.status().message();
  Result<CaseReport> r = nn::VerifyNnCaseFile(path, 1e-4, 1e-4);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("-byte limit for this kind of file"), std::string::npos)
      << r.status().message();
  // The same header is fine for a plain safetensors reader (its limit is 100 MB).
  EXPECT_TRUE(SafetensorsFile::Open(path).ok());
  std::remove(path.c_str());
}

TEST(GoldenCases, ThereAreEnoughCommittedCases) {
  EXPECT_GE(CaseFiles().size(), 25u);
}

TEST(GoldenCases, ReferenceMatchesEveryStageOfEveryCase) {
  for (const auto& f : CaseFiles()) {
    Result<GoldenCase> c = LoadGoldenCase(f);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Result<CaseReport> r = VerifyGoldenCase(c.value(), VerifyImpl::kReference);
    ASSERT_TRUE(r.ok()) << f << ": " << r.status().ToString();
    int compared = 0;
    for (const auto& s : r->stages) {
      if (!s.compared) continue;
      ++compared;
      EXPECT_TRUE(s.match) << f << " stage " << s.stage << " max_abs " << s.max_abs
                           << " first bad " << s.first_bad_index << " got " << s.got_at_bad
                           << " expected " << s.expected_at_bad;
    }
    EXPECT_EQ(compared, static_cast<int>(GoldenStageOrder(c->kind).size())) << f;
  }
}

TEST(GoldenCases, FastKernelsMatchOutAndLseOfEverySdpaCase) {
  int checked = 0;
  for (const auto& f : CaseFiles()) {
    Result<GoldenCase> c = LoadGoldenCase(f);
    ASSERT_TRUE(c.ok());
    if (c->kind != "sdpa") continue;
    Result<CaseReport> r = VerifyGoldenCase(c.value(), VerifyImpl::kKernels);
    ASSERT_TRUE(r.ok()) << f << ": " << r.status().ToString();
    EXPECT_NE(r->implementation, "reference") << f << ": the fast path did not run";
    for (const auto& s : r->stages) {
      if (!s.compared) continue;
      EXPECT_TRUE(s.match) << f << " stage " << s.stage << " max_abs " << s.max_abs << " at "
                           << s.first_bad_index;
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

// Rewrites a case with one stage perturbed; verify must name that stage.
std::string Tamper(const std::string& src, const std::string& stage, int64_t elem, float delta,
                   const std::string& out_name) {
  Result<SafetensorsFile> f = SafetensorsFile::Open(src);
  EXPECT_TRUE(f.ok());
  std::vector<Tensor> keep;
  std::vector<std::pair<std::string, TensorView>> ts;
  for (const auto& n : f->names()) {
    Result<Tensor> t = f->Copy(n);
    EXPECT_TRUE(t.ok());
    keep.push_back(std::move(t).value());
  }
  size_t i = 0;
  for (const auto& n : f->names()) {
    if (n == stage) keep[i].data<float>()[elem] += delta;
    ts.emplace_back(n, keep[i].view());
    ++i;
  }
  const std::string out = TempPath(out_name);
  EXPECT_TRUE(WriteSafetensors(out, ts, f->metadata()).ok());
  return out;
}

TEST(GoldenCases, ATamperedStageIsNamedAsTheFirstMismatch) {
  auto files = CaseFiles();
  ASSERT_FALSE(files.empty());
  std::string src;
  for (const auto& f : files) {
    Result<GoldenCase> c = LoadGoldenCase(f);
    if (c.ok() && c->kind == "sdpa" && c->opt.attn_mask.empty_view()) {
      src = f;
      break;
    }
  }
  ASSERT_FALSE(src.empty());
  for (const char* stage : {"scaled", "weights", "out"}) {
    const std::string t = Tamper(src, stage, 0, 0.5f, std::string("tampered_") + stage + ".safetensors");
    Result<GoldenCase> c = LoadGoldenCase(t);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Result<CaseReport> r = VerifyGoldenCase(c.value(), VerifyImpl::kReference);
    ASSERT_TRUE(r.ok());
    ASSERT_NE(r->FirstMismatch(), nullptr);
    EXPECT_EQ(r->FirstMismatch()->stage, stage);
    EXPECT_EQ(r->FirstMismatch()->first_bad, 0);
  }
}

TEST(GoldenCompare, RuleForInfNanAndTolerance) {
  float g[5] = {1.0f, -INFINITY, 2.0f, NAN, 1.00005f};
  float e[5] = {1.0f, -INFINITY, 2.0f + 1e-3f, 0.0f, 1.0f};
  TensorView gv = MakeView(g, DType::kF32, {5}), ev = MakeView(e, DType::kF32, {5});
  StageReport r = CompareStage("x", gv, ev, 1e-4, 1e-4);
  EXPECT_FALSE(r.match);
  EXPECT_EQ(r.mismatches, 2);  // index 2 (diff 1e-3 > 1e-4 + 2e-4) and 3 (NaN)
  EXPECT_EQ(r.first_bad, 2);
  EXPECT_EQ(r.first_bad_index, "[2]");
  float e2[1] = {INFINITY}, g2[1] = {-INFINITY};
  EXPECT_FALSE(CompareStage("x", MakeView(g2, DType::kF32, {1}), MakeView(e2, DType::kF32, {1}), 1, 1).match);
  float nan1[1] = {NAN};
  EXPECT_FALSE(CompareStage("x", MakeView(nan1, DType::kF32, {1}), MakeView(nan1, DType::kF32, {1}), 1, 1).match);
}

TEST(GoldenCompare, MaxScaledErrorWorkedByHand) {
  // |g - e| / (1 + |e|): 0.5 / 2, equal infinities skipped, 1 / 3, 2 / 2.
  float g[4] = {1.5f, -INFINITY, -1.0f, 3.0f}, e[4] = {1.0f, -INFINITY, -2.0f, 1.0f};
  EXPECT_DOUBLE_EQ(MaxScaledError(MakeView(g, DType::kF32, {4}), MakeView(e, DType::kF32, {4})),
                   1.0);
  EXPECT_DOUBLE_EQ(MaxScaledError(MakeView(g, DType::kF32, {3}), MakeView(e, DType::kF32, {3})),
                   1.0 / 3.0);
  float inf[1] = {INFINITY}, ninf[1] = {-INFINITY}, nan1[1] = {NAN}, one[1] = {1.0f};
  EXPECT_EQ(MaxScaledError(MakeView(inf, DType::kF32, {1}), MakeView(ninf, DType::kF32, {1})),
            INFINITY);
  EXPECT_EQ(MaxScaledError(MakeView(one, DType::kF32, {1}), MakeView(inf, DType::kF32, {1})),
            INFINITY);
  EXPECT_EQ(MaxScaledError(MakeView(nan1, DType::kF32, {1}), MakeView(one, DType::kF32, {1})),
            INFINITY);
  EXPECT_EQ(MaxScaledError(MakeView(one, DType::kF32, {1}), MakeView(nan1, DType::kF32, {1})),
            INFINITY);
}

TEST(GoldenCases, GoldenFloatsIsRowMajorForAnyStridesAndDtype) {
  // A [2, 3] view with transposed strides over d = {0, 1, 2, 3, 4, 5}:
  // element (a, b) is d[b * 2 + a].
  double d[6] = {0, 1, 2, 3, 4, 5};
  const TensorView t = MakeStridedView(d, DType::kF64, {2, 3}, {1, 2});
  EXPECT_EQ(GoldenFloats(t), (std::vector<float>{0, 2, 4, 1, 3, 5}));
  double x[1] = {0.1};  // rounded to float once
  EXPECT_EQ(GoldenFloats(MakeView(x, DType::kF64, {1})), std::vector<float>{0.1f});
  float r4[16];
  for (int i = 0; i < 16; ++i) r4[i] = float(i);
  EXPECT_EQ(GoldenFloats(MakeView(r4, DType::kF32, {2, 2, 2, 2})),
            std::vector<float>(r4, r4 + 16));
}

// ---- validator errors --------------------------------------------------------
Status LoadWithMeta(std::map<std::string, std::string> meta,
                    const std::vector<std::string>& drop = {}) {
  Tensor q = testing::Random({1, 1, 2, 4}, 1), k = testing::Random({1, 1, 3, 4}, 2),
         v = testing::Random({1, 1, 3, 4}, 3);
  std::vector<std::pair<std::string, TensorView>> ts;
  for (auto [n, t] : {std::pair<const char*, Tensor*>{"q", &q}, {"k", &k}, {"v", &v}})
    if (std::find(drop.begin(), drop.end(), n) == drop.end()) ts.emplace_back(n, t->view());
  const std::string p = TempPath("meta.safetensors");
  EXPECT_TRUE(WriteSafetensors(p, ts, meta).ok());
  return LoadGoldenCase(p).status();
}

TEST(GoldenValidate, ErrorsNameFileTensorAndField) {
  std::map<std::string, std::string> good = {
      {"format", "attnflow-golden/1"}, {"kind", "sdpa"}, {"causal", "none"}, {"scale", "0.5"}};
  EXPECT_TRUE(LoadWithMeta(good).ok());
  auto expect = [](const Status& st, const char* needle) {
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.ToString();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("meta.safetensors"), std::string::npos) << st.message();
  };
  auto m = good;
  m.erase("format");
  expect(LoadWithMeta(m), "metadata 'format': missing");
  // One field of the good metadata changed: the error it must name.
  struct Bad {
    const char *key, *value, *needle;
  };
  for (const Bad& bad : {Bad{"format", "attnflow-golden/9", "not supported"},
                         Bad{"kind", "conv", "metadata 'kind'"},
                         Bad{"causal", "upper", "metadata 'causal'"},
                         Bad{"scale", "abc", "metadata 'scale'"},
                         Bad{"atol", "-1", "metadata 'atol'"}, Bad{"kind", "mha", "num_heads"}}) {
    SCOPED_TRACE(std::string(bad.key) + "=" + bad.value);
    m = good;
    m[bad.key] = bad.value;
    expect(LoadWithMeta(m), bad.needle);
  }
  expect(LoadWithMeta(good, {"k"}), "tensor 'k': missing");
}

TEST(GoldenValidate, InconsistentShapesAreReported) {
  Tensor q = testing::Random({1, 3, 2, 4}, 1), k = testing::Random({1, 2, 3, 4}, 2),
         v = testing::Random({1, 2, 3, 4}, 3);
  const std::string p = TempPath("gqa_bad.safetensors");
  ASSERT_TRUE(WriteSafetensors(p, {{"q", q.view()}, {"k", k.view()}, {"v", v.view()}},
                               {{"format", "attnflow-golden/1"}, {"kind", "sdpa"},
                                {"causal", "none"}, {"scale", "0.5"}})
                  .ok());
  Status st = LoadGoldenCase(p).status();
  EXPECT_EQ(st.code(), StatusCode::kCorrupt);
  EXPECT_NE(st.message().find("H=3"), std::string::npos) << st.message();
}

TEST(GoldenWrite, OwnCasesRoundTripThroughVerify) {
  GoldenSpec s;
  s.kind = "mha";
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.q_len = 5;
  s.kv_len = 7;
  s.causal = Causal::kBottomRight;
  s.kv_lens = {6};
  s.seed = 7;
  const std::string p = TempPath("own_mha.safetensors");
  ASSERT_TRUE(WriteGoldenCase(s, p).ok());
  Result<GoldenCase> c = LoadGoldenCase(p);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<CaseReport> r = VerifyGoldenCase(c.value(), VerifyImpl::kReference);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok());
}

}  // namespace
}  // namespace attnflow
