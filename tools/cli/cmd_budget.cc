// cmd_budget.cc — `attnflow budget`: parameters, FLOPs (split into QKV
// projection, scores, value aggregation, output projection, FFN) and K/V
// bytes per token of a Transformer configuration (attnflow/nn_budget.h).
//
//   attnflow budget --config llama-3-8b --seq-len 2048
//   attnflow budget --config my_model.json
//   attnflow budget --list
// Exit: 0 ok, 2 unknown config / invalid JSON / usage.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "attnflow/nn_budget.h"
#include <unistd.h>

#include "attnflow/file_util.h"
#include "cli_common.h"

namespace attnflow::cli {
namespace {

struct BudgetArgs {
  std::string config;
  int64_t seq_len = 512;
  int64_t context = 0;
  int64_t kv_bytes = 0;
  bool list = false;
  bool json = false;
};

nlohmann::json Parts(const nn::PartCounts& p) {
  return {{"qkv", p.qkv}, {"scores", p.scores}, {"aggregate", p.aggregate}, {"out", p.out},
          {"ffn", p.ffn}, {"norms", p.norms}, {"total", p.total()}};
}

int RunBudget(const BudgetArgs& a) {
  if (a.list) {
    for (const auto& s : nn::KnownModelShapes()) {
      std::printf("%-18s layers=%lld d_model=%lld heads=%lld kv_heads=%lld ffn=%lld act=%s norm=%s\n",
                  s.name.c_str(), static_cast<long long>(s.num_layers),
                  static_cast<long long>(s.d_model), static_cast<long long>(s.num_heads),
                  static_cast<long long>(s.num_kv_heads == 0 ? s.num_heads : s.num_kv_heads),
                  static_cast<long long>(s.ffn_dim), nn::ActivationName(s.act),
                  nn::NormKindName(s.norm));
    }
    return kExitOk;
  }
  if (a.config.empty()) {
    PrintError("budget", "--config NAME|FILE.json is required (see --list)");
    return kExitUsage;
  }
  Result<nn::ModelShape> shape = nn::FindModelShape(a.config);
  if (!shape.ok()) {
    if (::access(a.config.c_str(), F_OK) != 0) {  // neither a known name nor a file
      PrintError("budget", shape.status().message());
      return kExitUsage;
    }
    Result<std::string> text = ReadFileString(a.config);  // never blocks on a FIFO
    if (!text.ok()) {
      PrintError("budget", text.status().message());
      return kExitUsage;
    }
    shape = nn::ParseModelShapeJson(text.value());
    if (!shape.ok()) {
      PrintError("budget", a.config + ": " + shape.status().message());
      return kExitUsage;
    }
  }
  if (a.kv_bytes > 0) shape->kv_bytes_per_element = a.kv_bytes;
  Result<nn::Budget> b = nn::ComputeBudget(shape.value(), a.seq_len, a.context);
  if (!b.ok()) {
    PrintError("budget", b.status().message());
    return kExitUsage;
  }
  if (a.json) {  // schema attnflow-budget/1 (docs/cli.md)
    const nn::Budget& x = b.value();
    nlohmann::json j = {
        {"schema", "attnflow-budget/1"},
        {"config", x.shape.name},
        {"num_layers", x.shape.num_layers},
        {"d_model", x.shape.d_model},
        {"num_heads", x.shape.num_heads},
        {"num_kv_heads", x.num_kv_heads},
        {"head_dim", x.head_dim},
        {"ffn_dim", x.shape.ffn_dim},
        {"seq_len", x.seq_len},
        {"context", x.context},
        {"layer_params", Parts(x.layer_params)},
        {"layer_flops", Parts(x.layer_flops)},
        {"embedding_params", x.embedding_params},
        {"head_params", x.head_params},
        {"total_params", x.total_params},
        {"lm_head_flops", x.lm_head_flops},
        {"total_flops", x.total_flops},
        {"kv_bytes_per_element", x.shape.kv_bytes_per_element},
        {"kv_bytes_per_token", x.kv_bytes_per_token},
    };
    std::printf("%s\n", j.dump().c_str());
    return kExitOk;
  }
  std::fputs(nn::FormatBudget(b.value()).c_str(), stdout);
  return kExitOk;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    budget, "budget",
    "Parameters, FLOPs per part and K/V bytes per token of a Transformer config",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<BudgetArgs>();
      sub.add_option("--config", a->config,
                     "Known config (bert-base, gpt2-small, llama-3-8b, transformer-base) or a "
                     "JSON file with ModelShape fields");
      sub.add_option("--seq-len", a->seq_len, "New tokens per forward pass (default 512)")
          ->check(InRange(int64_t{1}, int64_t{1} << 30));
      sub.add_option("--context", a->context,
                     "Keys each token attends to (default: seq-len; decode: cache length)")
          ->check(InRange(int64_t{0}, int64_t{1} << 30));
      sub.add_option("--kv-bytes", a->kv_bytes, "Bytes per cached K/V element (default 2)")
          ->check(InRange(int64_t{1}, int64_t{16}));
      sub.add_flag("--list", a->list, "List the known configs");
      sub.add_flag("--json", a->json, "One JSON object (schema attnflow-budget/1, docs/cli.md)");
      return [a] { return RunBudget(*a); };
    });

}  // namespace attnflow::cli
