// cmd_budget.cc — `attnflow budget`: parameters, FLOPs (split into QKV
// projection, scores, value aggregation, output projection, FFN) and K/V
// bytes per token of a Transformer configuration (attnflow/nn_budget.h).
//
//   attnflow budget --config llama-3-8b --seq-len 2048
//   attnflow budget --config my_model.json        (ModelShape fields or a HF config.json)
//   attnflow budget --config llama-3-8b --context 8192 --ram 24GiB
//   attnflow budget --compare --n 512 --d 512 --k 3 --r 64
//   attnflow budget --list
// Exit: 0 ok, 2 unknown config / invalid JSON / usage.
#include <cctype>
#include <cmath>
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
  std::string ram;  // "" = not asked
  bool compare = false;
  int64_t n = 512, d = 512, k = 3, r = 64;
};

// "24GiB", "512KiB", "1.5GB", "4096" (bytes); binary (KiB, MiB, GiB, TiB) and
// decimal (KB, MB, GB, TB) units, case-insensitive, optional "B".
Result<int64_t> ParseByteSize(const std::string& text) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    pos = 0;
  }
  std::string unit = text.substr(pos);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::pair<const char*, double> units[] = {
      {"", 1},           {"b", 1},           {"k", 1024.0},     {"kib", 1024.0},
      {"kb", 1e3},       {"m", 1048576.0},   {"mib", 1048576.0}, {"mb", 1e6},
      {"g", 1073741824.0}, {"gib", 1073741824.0}, {"gb", 1e9},  {"t", 1099511627776.0},
      {"tib", 1099511627776.0}, {"tb", 1e12}};
  for (const auto& [u, mult] : units) {
    if (pos > 0 && unit == u && std::isfinite(v) && v > 0 && v * mult < 9.2e18) {
      return static_cast<int64_t>(v * mult);
    }
  }
  return InvalidArgument("--ram '" + text +
                         "' is not a positive size (e.g. 512KiB, 24GiB, 1.5GB or bytes)");
}

nlohmann::json Parts(const nn::PartCounts& p) {
  return {{"qkv", p.qkv}, {"scores", p.scores}, {"aggregate", p.aggregate}, {"out", p.out},
          {"ffn", p.ffn}, {"norms", p.norms}, {"total", p.total()}};
}

int RunCompare(const BudgetArgs& a) {
  Result<std::vector<nn::LayerTypeRow>> rows = nn::CompareLayerTypes(a.n, a.d, a.k, a.r);
  if (!rows.ok()) {
    PrintError("budget", rows.status().message());
    return kExitUsage;
  }
  if (a.json) {
    nlohmann::json j = {{"schema", "attnflow-budget-compare/1"},
                        {"n", a.n}, {"d", a.d}, {"k", a.k}, {"r", a.r}, {"layers", nlohmann::json::array()}};
    for (const auto& x : rows.value()) {
      j["layers"].push_back({{"layer", x.layer}, {"ops_formula", x.ops_formula}, {"ops", x.ops},
                             {"sequential", x.sequential}, {"max_path", x.max_path}});
    }
    std::printf("%s\n", DumpJson(j).c_str());
    return kExitOk;
  }
  std::fputs(nn::FormatLayerComparison(rows.value(), a.n, a.d, a.k, a.r).c_str(), stdout);
  return kExitOk;
}

int RunBudget(const BudgetArgs& a) {
  if (a.compare) return RunCompare(a);
  int64_t ram = 0;
  if (!a.ram.empty()) {
    Result<int64_t> r = ParseByteSize(a.ram);
    if (!r.ok()) {
      PrintError("budget", r.status().message());
      return kExitUsage;
    }
    ram = r.value();
  }
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
  Result<nn::MemoryBudget> mem = nn::ComputeMemory(b.value(), ram);
  if (!mem.ok()) {
    PrintError("budget", mem.status().message());
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
    const nn::MemoryBudget& m = mem.value();
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& r : m.rows) {
      rows.push_back({{"dtype", r.dtype}, {"weight_bytes", r.weight_bytes},
                      {"decode_read_bytes", r.decode_read_bytes}, {"max_context", r.max_context}});
    }
    j["memory"] = {{"context", m.context}, {"kv_bytes", m.kv_bytes},
                   {"score_matrix_bytes", m.score_matrix_bytes}, {"ram_bytes", m.ram_bytes},
                   {"weights", rows}};
    std::printf("%s\n", DumpJson(j).c_str());
    return kExitOk;
  }
  // The config's name comes from the --config file: escaped.
  std::fputs(EscapeText(nn::FormatBudget(b.value())).c_str(), stdout);
  std::fputs(EscapeText(nn::FormatMemory(mem.value())).c_str(), stdout);
  return kExitOk;
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    budget, "budget",
    "Parameters, FLOPs per part and K/V bytes per token of a Transformer config",
    [](CLI::App& sub) -> std::function<int()> {
      auto a = std::make_shared<BudgetArgs>();
      sub.add_option("--config", a->config,
                     "Known config (bert-base, gpt2-small, llama-3-8b, transformer-base), a "
                     "JSON file with ModelShape fields, or a Hugging Face config.json (model_type "
                     "bert, gpt2, llama, mistral, qwen2)");
      sub.add_option("--seq-len", a->seq_len, "New tokens per forward pass (default 512)")
          ->check(InRange(int64_t{1}, int64_t{1} << 30));
      sub.add_option("--context", a->context,
                     "Keys each token attends to (default: seq-len; decode: cache length)")
          ->check(InRange(int64_t{0}, int64_t{1} << 30));
      sub.add_option("--kv-bytes", a->kv_bytes, "Bytes per cached K/V element (default 2)")
          ->check(InRange(int64_t{1}, int64_t{16}));
      sub.add_flag("--list", a->list, "List the known configs");
      sub.add_option("--ram", a->ram,
                     "Also print the largest context whose K/V cache fits in this much memory "
                     "after the weights (e.g. 512KiB, 24GiB; default: not asked)");
      sub.add_flag("--compare", a->compare,
                   "Print Vaswani et al. Table 1 (per-layer ops, sequential ops, max path) for "
                   "self-attention, recurrent, convolutional and restricted attention at --n --d "
                   "--k --r instead of a config (docs/complexity.md)");
      sub.add_option("--n", a->n, "--compare: sequence length n (default 512)")
          ->check(InRange(int64_t{1}, int64_t{1} << 40));
      sub.add_option("--d", a->d, "--compare: width d (default 512)")
          ->check(InRange(int64_t{1}, int64_t{1} << 30));
      sub.add_option("--k", a->k, "--compare: convolution kernel k (default 3)")
          ->check(InRange(int64_t{2}, int64_t{1} << 20));
      sub.add_option("--r", a->r, "--compare: restricted-attention window r (default 64)")
          ->check(InRange(int64_t{1}, int64_t{1} << 40));
      sub.add_flag("--json", a->json, "One JSON object (schema attnflow-budget/1, docs/cli.md)");
      return [a] { return RunBudget(*a); };
    });

}  // namespace attnflow::cli
