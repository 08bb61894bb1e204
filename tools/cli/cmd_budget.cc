// cmd_budget.cc — `attnflow budget`: parameters, FLOPs (split into QKV
// projection, scores, value aggregation, output projection, FFN) and K/V
// bytes per token of a Transformer configuration (attnflow/nn_budget.h).
//
//   attnflow budget --config llama-3-8b --seq-len 2048
//   attnflow budget --config my_model.json        (ModelShape fields or a HF config.json)
//   attnflow budget --config llama-3-8b --context 8192 --ram 24GiB
//   attnflow budget --config tiny --device esp32-c3 --weights int8 --kv-cache int8
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
#include <tuple>

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
  // --device (a microcontroller: weights in flash; nn::ComputeDeviceBudget)
  std::string device, flash, weights = "f32", kv_cache = "f32";
  int64_t kv_scale_bytes = 0;
};

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

nlohmann::json Items(const std::vector<nn::ByteItem>& v) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& i : v) j.push_back({{"name", i.name}, {"formula", i.formula}, {"bytes", i.bytes}});
  return j;
}

// How one weights/K-V choice fits the device: the fields a choice and the
// whole budget (for the chosen storage) share.
template <typename Fit>
nlohmann::json FitJson(const Fit& f) {
  return {{"flash_bytes", f.flash_bytes},         {"flash_fits", f.flash_fits},
          {"ram_fixed_bytes", f.ram_fixed_bytes}, {"kv_bytes_per_token", f.kv_bytes_per_token},
          {"max_context_ram", f.max_context_ram}, {"max_context", f.max_context},
          {"binds", f.binds}};
}

// --device: the microcontroller view (flash for weights, RAM for the cache,
// the activations and the arena).
int RunDevice(const BudgetArgs& a, const nn::ModelShape& shape) {
  nn::DeviceBudgetOptions o;
  if (a.device == "custom") {
    if (a.ram.empty() || a.flash.empty()) {
      PrintError("budget", "--device custom needs --ram and --flash");
      return kExitUsage;
    }
    o.target = {"custom", "sizes from --ram and --flash", 0, 0, ""};
  } else {
    Result<nn::DeviceTarget> t = nn::FindDeviceTarget(a.device);
    if (!t.ok()) {
      PrintError("budget", t.status().message());
      return kExitUsage;
    }
    o.target = t.value();
  }
  for (auto [text, flag, dst] : {std::tuple<const std::string&, const char*, int64_t*>{
                                     a.ram, "--ram", &o.target.ram_bytes},
                                 {a.flash, "--flash", &o.target.flash_bytes}}) {
    if (text.empty()) continue;
    Result<int64_t> v = ParseByteSize(flag, text);
    if (!v.ok()) {
      PrintError("budget", v.status().message());
      return kExitUsage;
    }
    *dst = v.value();
    o.target.note = "RAM / flash overridden by --ram / --flash";
  }
  if (!nn::ParseDeviceWeights(a.weights, &o.weights) || !nn::ParseDeviceKv(a.kv_cache, &o.kv)) {
    PrintError("budget", "--weights must be f32, f16 or int8 and --kv-cache f32 or int8");
    return kExitUsage;
  }
  o.kv_scale_bytes = a.kv_scale_bytes;
  o.context = a.context;
  Result<nn::DeviceBudget> b = nn::ComputeDeviceBudget(shape, o);
  if (!b.ok()) {
    PrintError("budget", b.status().message());
    return kExitUsage;
  }
  const nn::DeviceBudget& d = b.value();
  if (!a.json) {
    std::fputs(nn::FormatDeviceBudget(d).c_str(), stdout);
    return kExitOk;
  }
  nlohmann::json choices = nlohmann::json::array();
  for (const auto& c : d.choices) {
    nlohmann::json choice = FitJson(c);
    choice["weights"] = nn::DeviceWeightsName(c.weights);
    choice["kv_cache"] = nn::DeviceKvName(c.kv);
    choices.push_back(choice);
  }
  nlohmann::json j = FitJson(d);
  j.update({
      {"schema", "attnflow-budget-device/1"},
      {"config", d.shape.name},
      {"target", {{"name", d.opt.target.name}, {"description", d.opt.target.description},
                  {"ram_bytes", d.opt.target.ram_bytes}, {"flash_bytes", d.opt.target.flash_bytes},
                  {"note", d.opt.target.note}}},
      {"weights", nn::DeviceWeightsName(d.opt.weights)},
      {"kv_cache", nn::DeviceKvName(d.opt.kv)},
      {"kv_scale_bytes", d.opt.kv_scale_bytes},
      {"total_params", d.total_params},
      {"flash", Items(d.flash)},
      {"activations", Items(d.activations)},
      {"activation_bytes", d.activation_bytes},
      {"arena", {{"name", d.arena.name}, {"formula", d.arena.formula}, {"bytes", d.arena.bytes}}},
      {"model_limit", d.model_limit},
      {"context", d.context},
      {"kv_bytes", d.kv_bytes},
      {"ram_bytes", d.ram_bytes},
      {"ram_fits", d.ram_fits},
      {"choices", choices},
  });
  std::printf("%s\n", j.dump().c_str());
  return kExitOk;
}

int RunBudget(const BudgetArgs& a) {
  if (a.compare) return RunCompare(a);
  if (a.device.empty() && (!a.flash.empty() || a.weights != "f32" || a.kv_cache != "f32" ||
                           a.kv_scale_bytes != 0)) {
    PrintError("budget", "--flash, --weights, --kv-cache and --kv-scale-bytes need --device");
    return kExitUsage;
  }
  if (!a.device.empty() && a.kv_bytes > 0) {
    PrintError("budget", "--kv-bytes is the host view; with --device use --kv-cache f32|int8");
    return kExitUsage;
  }
  int64_t ram = 0;
  if (!a.ram.empty() && a.device.empty()) {
    Result<int64_t> r = ParseByteSize("--ram", a.ram);
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
      const bool looks_like_file = a.config.find('/') != std::string::npos ||
                                   (a.config.size() > 5 &&
                                    a.config.compare(a.config.size() - 5, 5, ".json") == 0);
      PrintError("budget", looks_like_file
                               ? "--config " + QuoteBounded(a.config) +
                                     ": no such file (a config is a known name, see --list, "
                                     "or an existing JSON file)"
                               : shape.status().message());
      return kExitUsage;
    }
    Result<std::string> text = ReadFileString(a.config);  // never blocks on a FIFO
    if (!text.ok()) {
      PrintError("budget", text.status().message());
      return kExitUsage;
    }
    shape = nn::ParseModelShapeJson(text.value());
    if (!shape.ok()) {
      PrintError("budget", QuoteBounded(a.config) + ": " + shape.status().message());
      return kExitUsage;
    }
  }
  if (!a.device.empty()) return RunDevice(a, shape.value());
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

void AddBudgetOptions(CLI::App& sub, BudgetArgs& a) {
  sub.add_option("--config", a.config,
                 "Known config (bert-base, gpt2-small, llama-3-8b, transformer-base, tiny), a "
                 "JSON file with ModelShape fields, or a Hugging Face config.json (model_type "
                 "bert, gpt2, llama, mistral, qwen2)");
  sub.add_option("--seq-len", a.seq_len, "New tokens per forward pass (default 512)")
      ->check(InRange(int64_t{1}, int64_t{1} << 30));
  sub.add_option("--context", a.context,
                 "Keys each token attends to (default: seq-len; decode: cache length). With "
                 "--device: the tokens the cache is sized for (default: the usable maximum)")
      ->check(InRange(int64_t{0}, int64_t{1} << 30));
  sub.add_option("--kv-bytes", a.kv_bytes,
                 "Bytes per cached K/V element (default: the config's own: 2, an fp16 cache, for "
                 "the known models; 4 for tiny; a JSON config's kv_bytes_per_element)")
      ->check(InRange(int64_t{1}, int64_t{16}))
      ->default_str("");
  sub.add_flag("--list", a.list, "List the known configs");
  sub.add_option("--ram", a.ram,
                 "Host view: also print the largest context whose K/V cache fits in this "
                 "much memory after the weights (e.g. 24GiB; weights and cache in one "
                 "memory, activations not counted; default: not asked). With --device: "
                 "the RAM the model may use (overrides the target's)");
  sub.add_option("--device", a.device,
                 "Microcontroller view: weights and constants in flash; K/V cache, the "
                 "activations of one decode step and the attention arena in RAM; prints "
                 "the max context from RAM, the model's own limit and which binds. "
                 "Targets: esp32-c3 (320 KiB free RAM, 4 MiB flash), stm32f407 (192 KiB, "
                 "1 MiB), nrf5340 (512 KiB, 1 MiB), or custom with --ram and --flash");
  sub.add_option("--flash", a.flash, "--device: flash size (overrides the target's, e.g. 2MiB)");
  sub.add_option("--weights", a.weights,
                 "--device: weight storage: f32, f16, or int8 (per-row multipliers, int32 "
                 "biases, as micro/tiny/tiny_s8_main.c) (default f32)")
      ->check(CLI::IsMember({"f32", "f16", "int8"}));
  sub.add_option("--kv-cache", a.kv_cache, "--device: K/V cache element type: f32 or int8 (default f32)")
      ->check(CLI::IsMember({"f32", "int8"}));
  sub.add_option("--kv-scale-bytes", a.kv_scale_bytes,
                 "--device with --kv-cache int8: scale bytes per layer, K or V, kv head and "
                 "token (default 0: static per-tensor scales in flash, as the int8 tiny "
                 "decoder; 4 for an f32 scale per token and head)")
      ->check(InRange(int64_t{0}, int64_t{64}));
  sub.add_flag("--compare", a.compare,
               "Print Vaswani et al. Table 1 (per-layer ops, sequential ops, max path) for "
               "self-attention, recurrent, convolutional and restricted attention at --n --d "
               "--k --r instead of a config (docs/complexity.md)");
  sub.add_option("--n", a.n, "--compare: sequence length n (default 512)")
      ->check(InRange(int64_t{1}, int64_t{1} << 40));
  sub.add_option("--d", a.d, "--compare: width d (default 512)")
      ->check(InRange(int64_t{1}, int64_t{1} << 30));
  sub.add_option("--k", a.k, "--compare: convolution kernel k (default 3)")
      ->check(InRange(int64_t{2}, int64_t{1} << 20));
  sub.add_option("--r", a.r, "--compare: restricted-attention window r (default 64)")
      ->check(InRange(int64_t{1}, int64_t{1} << 40));
  sub.add_flag("--json", a.json, "One JSON object (schema attnflow-budget/1, docs/cli.md)");
}

}  // namespace

ATTNFLOW_REGISTER_COMMAND(
    budget, "budget",
    "Parameters, FLOPs per part and K/V bytes per token of a Transformer config",
    ArgsCommand<BudgetArgs>(AddBudgetOptions, RunBudget));

}  // namespace attnflow::cli
