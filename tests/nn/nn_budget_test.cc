// nn_budget_test.cc — parameter / FLOP / KV accounting against numbers
// computed by hand (and the published totals: BERT-base 109,482,240 with the
// pooler, GPT-2 small 124,439,808, Llama-3-8B 8,030,261,248), plus the
// `attnflow budget` command.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "attnflow/nn_budget.h"
#include "util/cli_util.h"

namespace attnflow::nn {
namespace {

Budget Get(const std::string& name, int64_t L, int64_t ctx = 0) {
  Result<ModelShape> s = FindModelShape(name);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  Result<Budget> b = ComputeBudget(s.value(), L, ctx);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.value();
}

TEST(Budget, BertBase) {
  Budget b = Get("bert-base", 128);
  // qkv: 3·(768·768 + 768); out: 768·768 + 768; ffn: 2·768·3072 + 3072 + 768;
  // norms: 2 LayerNorms · 2·768.
  EXPECT_EQ(b.layer_params.qkv, 1771776);
  EXPECT_EQ(b.layer_params.out, 590592);
  EXPECT_EQ(b.layer_params.ffn, 4722432);
  EXPECT_EQ(b.layer_params.norms, 3072);
  EXPECT_EQ(b.layer_params.total(), 7087872);
  // 30522·768 + 512·768 + 2·768 + 2·768 (embedding LayerNorm).
  EXPECT_EQ(b.embedding_params, 23837184);
  EXPECT_EQ(b.head_params, 590592);  // pooler
  EXPECT_EQ(b.total_params, 109482240);
  // FLOPs at L = 128: 2·128·768·2304, 2·12·128·128·64 (twice), 2·128·768·768,
  // 2·2·128·768·3072.
  EXPECT_EQ(b.layer_flops.qkv, 452984832);
  EXPECT_EQ(b.layer_flops.scores, 25165824);
  EXPECT_EQ(b.layer_flops.aggregate, 25165824);
  EXPECT_EQ(b.layer_flops.out, 150994944);
  EXPECT_EQ(b.layer_flops.ffn, 1207959552);
  EXPECT_EQ(b.lm_head_flops, 0);
  EXPECT_EQ(b.total_flops, 12 * (452984832LL + 2 * 25165824LL + 150994944LL + 1207959552LL));
  EXPECT_EQ(b.kv_bytes_per_token, 2 * 12 * 12 * 64 * 2);  // 36864
}

TEST(Budget, Gpt2Small) {
  Budget b = Get("gpt2-small", 1024);
  EXPECT_EQ(b.embedding_params, 50257LL * 768 + 1024 * 768);
  EXPECT_EQ(b.head_params, 2 * 768);  // ln_f; the head is tied
  EXPECT_EQ(b.total_params, 124439808);
  EXPECT_EQ(b.lm_head_flops, 2LL * 1024 * 768 * 50257);
  EXPECT_EQ(b.layer_flops.scores, 2LL * 12 * 1024 * 1024 * 64);
}

TEST(Budget, Llama3_8bWithGqa) {
  Budget b = Get("llama-3-8b", 1, 4096);  // decode one token against 4096 cached
  EXPECT_EQ(b.num_kv_heads, 8);
  EXPECT_EQ(b.head_dim, 128);
  EXPECT_EQ(b.layer_params.qkv, (32 + 2 * 8) * 128LL * 4096);  // 25,165,824
  EXPECT_EQ(b.layer_params.out, 4096LL * 4096);
  EXPECT_EQ(b.layer_params.ffn, 3LL * 4096 * 14336);
  EXPECT_EQ(b.layer_params.norms, 2 * 4096);  // RMSNorm: weight only
  EXPECT_EQ(b.total_params, 8030261248LL);
  EXPECT_EQ(b.kv_bytes_per_token, 131072);  // 2·32·8·128·2 = 128 KiB
  EXPECT_EQ(b.layer_flops.qkv, 2LL * 4096 * 6144);
  EXPECT_EQ(b.layer_flops.scores, 2LL * 32 * 1 * 4096 * 128);
  EXPECT_EQ(b.layer_flops.ffn, 2LL * 3 * 4096 * 14336);
}

TEST(Budget, TinyConfigByHand) {
  Result<ModelShape> s = ParseModelShapeJson(
      R"({"name":"tiny","num_layers":2,"d_model":8,"num_heads":4,"num_kv_heads":2,"ffn_dim":12,
          "act":"swiglu","norm":"rmsnorm","qkv_bias":true,"out_bias":false,"ffn_bias":false,
          "vocab_size":10,"tied_lm_head":false,"final_norm":true,"kv_bytes_per_element":4})");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  Result<Budget> b = ComputeBudget(s.value(), 3, 5);
  ASSERT_TRUE(b.ok());
  // Dh = 2; qkv rows (4 + 2·2)·2 = 16: 16·8 + 16 bias.
  EXPECT_EQ(b->layer_params.qkv, 144);
  EXPECT_EQ(b->layer_params.out, 64);
  EXPECT_EQ(b->layer_params.ffn, 3 * 8 * 12);
  EXPECT_EQ(b->layer_params.norms, 16);
  EXPECT_EQ(b->embedding_params, 80);
  EXPECT_EQ(b->head_params, 8 + 80);
  EXPECT_EQ(b->total_params, 80 + 88 + 2 * (144 + 64 + 288 + 16));
  EXPECT_EQ(b->layer_flops.qkv, 2 * 3 * 8 * 16);
  EXPECT_EQ(b->layer_flops.scores, 2 * 4 * 3 * 5 * 2);
  EXPECT_EQ(b->layer_flops.aggregate, 2 * 4 * 3 * 5 * 2);
  EXPECT_EQ(b->layer_flops.out, 2 * 3 * 8 * 8);
  EXPECT_EQ(b->layer_flops.ffn, 2 * 3 * 3 * 8 * 12);
  EXPECT_EQ(b->kv_bytes_per_token, 2 * 2 * 2 * 2 * 4);
}

TEST(Budget, Errors) {
  EXPECT_EQ(FindModelShape("gpt-5").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(FindModelShape("gpt-5").status().message().find("bert-base"), std::string::npos);
  EXPECT_FALSE(ParseModelShapeJson("{\"d_model\": \"big\"}").ok());
  EXPECT_FALSE(ParseModelShapeJson("{\"colour\": 1}").ok());
  EXPECT_FALSE(ParseModelShapeJson("[1,2]").ok());
  ModelShape s;
  s.name = "bad", s.num_layers = 1, s.d_model = 8, s.num_heads = 3, s.ffn_dim = 4;
  Result<Budget> b = ComputeBudget(s, 4);
  EXPECT_NE(b.status().message().find("not divisible by num_heads=3"), std::string::npos);
  s.num_heads = 4, s.num_kv_heads = 3;
  EXPECT_NE(ComputeBudget(s, 4).status().message().find("num_kv_heads=3"), std::string::npos);
  s.num_kv_heads = 0, s.num_layers = int64_t{1} << 40, s.vocab_size = int64_t{1} << 40;
  s.d_model = int64_t{1} << 40, s.num_heads = 1, s.ffn_dim = int64_t{1} << 40;
  EXPECT_EQ(ComputeBudget(s, 4).status().code(), StatusCode::kResourceExhausted);
}

// Vaswani et al. Table 1 with numbers worked by hand (n = d = 512, k = 3,
// r = 64): 512^3, 3 * 512^3, 64 * 512^2; ceil(log_3 512) = 6 (3^5 = 243 <
// 512 <= 729 = 3^6); 512 / 64 = 8.
TEST(Budget, CompareLayerTypesMatchesTheTableWorkedByHand) {
  Result<std::vector<LayerTypeRow>> r = CompareLayerTypes(512, 512, 3, 64);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->size(), 4u);
  const double want[4][3] = {{134217728.0, 1, 1}, {134217728.0, 512, 512},
                             {402653184.0, 1, 6}, {16777216.0, 1, 8}};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ((*r)[i].ops, want[i][0]) << (*r)[i].layer;
    EXPECT_EQ((*r)[i].sequential, want[i][1]) << (*r)[i].layer;
    EXPECT_EQ((*r)[i].max_path, want[i][2]) << (*r)[i].layer;
  }
  // Exact powers: log_2 1024 = 10; a single token needs one layer.
  EXPECT_EQ(CompareLayerTypes(1024, 8, 2, 1).value()[2].max_path, 10);
  EXPECT_EQ(CompareLayerTypes(1, 8, 2, 1).value()[2].max_path, 1);
  EXPECT_FALSE(CompareLayerTypes(0, 8, 3, 4).ok());
  EXPECT_FALSE(CompareLayerTypes(8, 8, 1, 4).ok());
}

// Llama-3-8B at 4096 tokens: K/V = 2*32*8*128*2 B = 128 KiB per token;
// scores 32 * 4096^2 * 4 B; F16 weights 2 B x 8030261248; Q4_0 18/32 B per
// weight (rounded up); 24 GiB leaves room for 74075 (F16) / 162145 (Q4_0)
// tokens of cache.
TEST(Budget, MemoryOfLlama3At4096) {
  Result<ModelShape> s = FindModelShape("llama-3-8b");
  ASSERT_TRUE(s.ok());
  Result<Budget> b = ComputeBudget(s.value(), 1, 4096);
  ASSERT_TRUE(b.ok());
  Result<MemoryBudget> m = ComputeMemory(b.value(), int64_t{24} << 30);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->kv_bytes, 536870912);
  EXPECT_EQ(m->score_matrix_bytes, 2147483648);
  ASSERT_EQ(m->rows.size(), WeightDTypes().size());
  EXPECT_EQ(m->rows[1].dtype, "F16/BF16");
  EXPECT_EQ(m->rows[1].weight_bytes, 16060522496);
  EXPECT_EQ(m->rows[1].decode_read_bytes, 16060522496 + 536870912);
  EXPECT_EQ(m->rows[1].max_context, 74075);
  EXPECT_EQ(m->rows[4].dtype, "Q4_0");
  EXPECT_EQ(m->rows[4].weight_bytes, 4517021952);
  EXPECT_EQ(m->rows[4].max_context, 162145);
  EXPECT_EQ(m->rows[0].max_context, 0);  // 32 GB of F32 weights do not fit in 24 GiB
  Result<MemoryBudget> tiny = ComputeMemory(b.value(), 512 * 1024);
  ASSERT_TRUE(tiny.ok());
  for (const MemoryRow& r : tiny->rows) EXPECT_EQ(r.max_context, 0) << r.dtype;
  EXPECT_NE(FormatMemory(m.value()).find("74,075 tokens"), std::string::npos);
  EXPECT_NE(FormatMemory(m.value()).find("does not fit"), std::string::npos);  // F32
}

// Hugging Face config.json files. SmolLM2-135M's published config gives
// 134515008 parameters (transformers' num_parameters()); bert-base-uncased's
// BertModel 109482240.
TEST(Budget, ReadsHuggingFaceConfigs) {
  const char* smol = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 576, "intermediate_size": 1536, "num_attention_heads": 9,
    "num_hidden_layers": 30, "num_key_value_heads": 3, "vocab_size": 49152,
    "hidden_act": "silu", "rms_norm_eps": 1e-05, "tie_word_embeddings": true,
    "max_position_embeddings": 8192, "rope_theta": 100000})";
  Result<ModelShape> s = ParseModelShapeJson(smol);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->num_kv_heads, 3);
  EXPECT_EQ(s->norm, NormKind::kRmsNorm);
  Result<Budget> b = ComputeBudget(s.value(), 1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->total_params, 134515008);
  const char* bert = R"({"model_type": "bert", "hidden_size": 768, "num_hidden_layers": 12,
    "num_attention_heads": 12, "intermediate_size": 3072, "vocab_size": 30522,
    "max_position_embeddings": 512, "type_vocab_size": 2, "hidden_act": "gelu"})";
  b = ComputeBudget(ModelShapeFromHfConfig(bert).value(), 128);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->total_params, 109482240);
  Result<ModelShape> bad = ModelShapeFromHfConfig(R"({"model_type": "llama"})");
  EXPECT_NE(bad.status().message().find("hidden_size"), std::string::npos);
  bad = ModelShapeFromHfConfig(R"({"model_type": "t5"})");
  EXPECT_NE(bad.status().message().find("not supported"), std::string::npos);
  bad = ModelShapeFromHfConfig(R"({"model_type": "bert", "hidden_size": "768"})");
  EXPECT_NE(bad.status().message().find("must be an integer"), std::string::npos);
}

std::string RunCli(const std::string& args, int* rc) {
  attnflow::testing::CliResult r = attnflow::testing::RunCli(args);
  *rc = r.code;
  return r.text;
}

TEST(BudgetCli, KnownConfigs) {
  int rc = -1;
  std::string out = RunCli("budget --config llama-3-8b --seq-len 1 --context 4096", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("8,030,261,248 (8.03 G)"), std::string::npos) << out;
  EXPECT_NE(out.find("131,072 (128.00 KiB)"), std::string::npos) << out;
  EXPECT_NE(out.find("qkv_projection"), std::string::npos) << out;
  EXPECT_NE(out.find("aggregate"), std::string::npos) << out;
  out = RunCli("budget --config bert-base --seq-len 128", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("109,482,240"), std::string::npos) << out;
  out = RunCli("budget --config gpt2-small", &rc);
  EXPECT_NE(out.find("124,439,808"), std::string::npos) << out;
  out = RunCli("budget --list", &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("gpt2-small"), std::string::npos);
  out = RunCli("budget --config no-such-model", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("unknown config"), std::string::npos) << out;
}

// The memory lines, --ram, --compare and a Hugging Face config.json through
// the binary (numbers worked by hand in the library tests above).
TEST(BudgetCli, MemoryRamCompareAndHfConfig) {
  int rc = -1;
  std::string out =
      RunCli("budget --config llama-3-8b --seq-len 1 --context 4096 --ram 24GiB", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("536,870,912 (512.00 MiB)"), std::string::npos) << out;   // K/V bytes
  EXPECT_NE(out.find("2,147,483,648 (2.00 GiB)"), std::string::npos) << out;  // 32 x 4096^2 x 4
  EXPECT_NE(out.find("74,075 tokens"), std::string::npos) << out;       // F16 max context
  EXPECT_NE(out.find("162,145 tokens"), std::string::npos) << out;      // Q4_0 max context
  out = RunCli("budget --config llama-3-8b --context 4096 --ram 512KiB --json", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"ram_bytes\":524288"), std::string::npos) << out;
  EXPECT_NE(out.find("\"max_context\":0"), std::string::npos) << out;
  out = RunCli("budget --config llama-3-8b --ram lots", &rc);
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--ram 'lots'"), std::string::npos) << out;
  out = RunCli("budget --compare --n 512 --d 512 --k 3 --r 64", &rc);
  EXPECT_EQ(rc, 0) << out;
  for (const char* want : {"134,217,728 (134.22 M)", "402,653,184 (402.65 M)", "16,777,216 (16.78 M)", "recurrent", "restricted"})
    EXPECT_NE(out.find(want), std::string::npos) << want << "\n" << out;
  out = RunCli("budget --compare --n 512 --d 512 --k 3 --r 64 --json", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"max_path\":6.0"), std::string::npos) << out;
  char dir[] = "/tmp/attnflow_budget_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string cfg = std::string(dir) + "/config.json";
  FILE* f = std::fopen(cfg.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(R"({"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
    "vocab_size": 49152, "hidden_act": "silu", "tie_word_embeddings": true})", f);
  std::fclose(f);
  out = RunCli("budget --config " + cfg + " --seq-len 1", &rc);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("134,515,008"), std::string::npos) << out;
  std::remove(cfg.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace attnflow::nn
