// nn/budget.cc — parameter / FLOP / KV-byte accounting (formulas in
// attnflow/nn_budget.h and docs/nn.md) and the known configurations.
//
// Invariants: every product and sum is overflow-checked with
// __builtin_*_overflow; a bad shape (non-positive size, H % Hkv != 0) is an
// InvalidArgument naming the field.
#include "attnflow/nn_budget.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace attnflow::nn {
namespace {

// Overflow-checked accumulator.
struct Acc {
  bool overflow = false;
  int64_t Mul(std::initializer_list<int64_t> xs) {
    int64_t r = 1;
    for (int64_t x : xs)
      if (__builtin_mul_overflow(r, x, &r)) overflow = true;
    return r;
  }
  int64_t Add(std::initializer_list<int64_t> xs) {
    int64_t r = 0;
    for (int64_t x : xs)
      if (__builtin_add_overflow(r, x, &r)) overflow = true;
    return r;
  }
};

// A config's display name is printed in every report: at most this long.
constexpr size_t kMaxConfigNameBytes = 256;

// The entry of `list` called `name`, or an error naming the `what` and the
// known names, then `hint`.
template <typename T>
Result<T> FindByName(const std::vector<T>& list, const std::string& name, const char* what,
                     const char* hint) {
  std::string names;
  for (const T& e : list) {
    if (e.name == name) return e;
    names += (names.empty() ? "" : ", ") + e.name;
  }
  return InvalidArgument("budget: unknown " + std::string(what) + " " + QuoteBounded(name) +
                         " (known: " + names + "; " + hint + ")");
}

}  // namespace

Result<Budget> ComputeBudget(const ModelShape& s, int64_t seq_len, int64_t context) {
  const char* op = "budget";
  auto bad = [&](const std::string& m) {
    return InvalidArgument(std::string(op) + ": " + QuoteBounded(s.name) + ": " + m);
  };
  if (s.num_layers <= 0 || s.d_model <= 0 || s.num_heads <= 0 || s.ffn_dim <= 0) {
    return bad("num_layers, d_model, num_heads and ffn_dim must be positive (got " +
               std::to_string(s.num_layers) + ", " + std::to_string(s.d_model) + ", " +
               std::to_string(s.num_heads) + ", " + std::to_string(s.ffn_dim) + ")");
  }
  const int64_t H = s.num_heads, Hkv = s.num_kv_heads == 0 ? H : s.num_kv_heads;
  if (Hkv <= 0 || H % Hkv != 0) {
    return bad("num_heads=" + std::to_string(H) + " is not a multiple of num_kv_heads=" +
               std::to_string(Hkv));
  }
  if (s.head_dim == 0 && s.d_model % H != 0) {
    return bad("d_model=" + std::to_string(s.d_model) + " is not divisible by num_heads=" +
               std::to_string(H) + " (set head_dim)");
  }
  if (seq_len <= 0 || context < 0) {
    return bad("seq_len must be > 0 and context >= 0 (got " + std::to_string(seq_len) + ", " +
               std::to_string(context) + ")");
  }
  if (s.vocab_size < 0 || s.max_positions < 0 || s.type_vocab < 0 || s.kv_bytes_per_element <= 0) {
    return bad("vocab_size, max_positions, type_vocab must be >= 0 and kv_bytes_per_element > 0");
  }
  const int64_t E = s.d_model, Dh = s.head_dim == 0 ? E / H : s.head_dim, F = s.ffn_dim;
  const int64_t V = s.vocab_size, L = seq_len, Lk = context == 0 ? seq_len : context;
  const int64_t mats = IsGated(s.act) ? 3 : 2;
  Acc a;
  Budget b;
  b.shape = s;
  b.seq_len = L;
  b.context = Lk;
  b.head_dim = Dh;
  b.num_kv_heads = Hkv;
  const int64_t qkv_rows = a.Mul({a.Add({H, a.Mul({2, Hkv})}), Dh});  // (H + 2Hkv)·Dh
  // Parameters of one layer.
  b.layer_params.qkv = a.Add({a.Mul({qkv_rows, E}), s.qkv_bias ? qkv_rows : 0});
  b.layer_params.out = a.Add({a.Mul({H, Dh, E}), s.out_bias ? E : 0});
  b.layer_params.ffn = a.Add({a.Mul({mats, E, F}), s.ffn_bias ? a.Add({a.Mul({mats - 1, F}), E}) : 0});
  const int64_t per_norm = s.norm == NormKind::kLayerNorm ? 2 * E : E;
  b.layer_params.norms = a.Mul({2, per_norm});
  // FLOPs of one layer (2 per multiply-add).
  b.layer_flops.qkv = a.Mul({2, L, E, qkv_rows});
  b.layer_flops.scores = a.Mul({2, H, L, Lk, Dh});
  b.layer_flops.aggregate = a.Mul({2, H, L, Lk, Dh});
  b.layer_flops.out = a.Mul({2, L, H, Dh, E});
  b.layer_flops.ffn = a.Mul({2, mats, L, E, F});
  // Embeddings and heads.
  b.embedding_params = a.Add({a.Mul({V, E}), a.Mul({s.max_positions, E}), a.Mul({s.type_vocab, E}),
                              s.embedding_norm ? per_norm : 0});
  b.head_params = a.Add({s.final_norm ? per_norm : 0,
                         (s.lm_head && !s.tied_lm_head) ? a.Mul({V, E}) : 0,
                         s.pooler ? a.Add({a.Mul({E, E}), E}) : 0});
  b.total_params = a.Add({b.embedding_params, b.head_params, a.Mul({s.num_layers, b.layer_params.total()})});
  b.lm_head_flops = s.lm_head ? a.Mul({2, L, E, V}) : 0;
  b.total_flops = a.Add({a.Mul({s.num_layers, b.layer_flops.total()}), b.lm_head_flops});
  b.kv_bytes_per_token = a.Mul({2, s.num_layers, Hkv, Dh, s.kv_bytes_per_element});
  if (a.overflow) return ResourceExhausted(std::string(op) + ": " + QuoteBounded(s.name) + ": counts overflow int64");
  return b;
}

const std::vector<ModelShape>& KnownModelShapes() {
  // Designated initializers in ModelShape's field order; unnamed fields keep
  // their defaults (biases on, tied head, fp16 cache).
  static const std::vector<ModelShape> k = {
      {.name = "bert-base", .num_layers = 12, .d_model = 768, .num_heads = 12, .ffn_dim = 3072,
       .act = Activation::kGelu, .vocab_size = 30522, .max_positions = 512, .type_vocab = 2,
       .embedding_norm = true, .lm_head = false, .pooler = true},
      {.name = "gpt2-small", .num_layers = 12, .d_model = 768, .num_heads = 12, .ffn_dim = 3072,
       .act = Activation::kGeluTanh, .vocab_size = 50257, .max_positions = 1024,
       .final_norm = true, .tied_lm_head = true},
      {.name = "llama-3-8b", .num_layers = 32, .d_model = 4096, .num_heads = 32,
       .num_kv_heads = 8, .ffn_dim = 14336, .act = Activation::kSwiGlu,
       .norm = NormKind::kRmsNorm, .qkv_bias = false, .out_bias = false, .ffn_bias = false,
       .vocab_size = 128256, .final_norm = true, .tied_lm_head = false},
      // The encoder stack of Vaswani et al. "base" (sinusoidal positions,
      // ReLU, post-norm); the paper's shared 37000-token BPE, tied head.
      {.name = "transformer-base", .num_layers = 6, .d_model = 512, .num_heads = 8,
       .ffn_dim = 2048, .act = Activation::kRelu, .vocab_size = 37000, .tied_lm_head = true},
      // The micro kit's char-level decoder (tools/edge/tiny/train.py; the
      // same numbers as tools/edge/tiny/config.json): pre-LayerNorm, learned
      // positions, final LayerNorm, tied head, f32 cache on the device.
      {.name = "tiny", .num_layers = 2, .d_model = 64, .num_heads = 4, .ffn_dim = 128,
       .act = Activation::kRelu, .norm = NormKind::kLayerNorm, .vocab_size = 92,
       .max_positions = 128, .final_norm = true, .tied_lm_head = true,
       .kv_bytes_per_element = 4},
  };
  return k;
}

Result<ModelShape> FindModelShape(const std::string& name) {
  return FindByName(KnownModelShapes(), name, "config", "or pass a JSON file");
}

Result<ModelShape> ModelShapeFromHfConfig(const std::string& text) {
  using nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("budget: config.json is not a JSON object");
  }
  if (!j.contains("model_type") || !j["model_type"].is_string()) {
    return InvalidArgument("budget: config.json has no string 'model_type'");
  }
  const std::string type = j["model_type"].get<std::string>();
  // Reads the first present key of `keys` (integer), else `def` (-1 = required).
  auto num = [&](std::initializer_list<const char*> keys, int64_t def, int64_t* out) -> Status {
    for (const char* k : keys) {
      if (!j.contains(k) || j[k].is_null()) continue;
      if (!j[k].is_number_integer()) {
        return InvalidArgument(std::string("budget: config.json field '") + k +
                               "' must be an integer, got " + j[k].dump());
      }
      *out = j[k].get<int64_t>();
      return Status::Ok();
    }
    if (def < 0) {
      return InvalidArgument("budget: config.json (" + type + ") has no '" +
                             std::string(*keys.begin()) + "'");
    }
    *out = def;
    return Status::Ok();
  };
  auto flag = [&](const char* k, bool def) {
    return j.contains(k) && j[k].is_boolean() ? j[k].get<bool>() : def;
  };
  auto act = [&](Activation def) {
    if (!j.contains("hidden_act") && !j.contains("activation_function")) return def;
    const json& v = j.contains("hidden_act") ? j["hidden_act"] : j["activation_function"];
    const std::string a = v.is_string() ? v.get<std::string>() : "";
    if (a == "relu") return Activation::kRelu;
    if (a == "gelu") return Activation::kGelu;
    if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return Activation::kGeluTanh;
    if (a == "silu" || a == "swish") return Activation::kSwiGlu;
    return def;
  };
  ModelShape s;
  s.name = j.contains("_name_or_path") && j["_name_or_path"].is_string()
               ? j["_name_or_path"].get<std::string>()
               : type;
  if (s.name.size() > kMaxConfigNameBytes) {  // a display name, never a file to read
    return InvalidArgument("budget: config.json '_name_or_path' / 'model_type' " +
                           QuoteBounded(s.name) + " is longer than " +
                           std::to_string(kMaxConfigNameBytes) + " bytes");
  }
  if (type == "bert") {
    ATTNFLOW_RETURN_IF_ERROR(num({"hidden_size"}, -1, &s.d_model));
    ATTNFLOW_RETURN_IF_ERROR(num({"num_hidden_layers"}, -1, &s.num_layers));
    ATTNFLOW_RETURN_IF_ERROR(num({"num_attention_heads"}, -1, &s.num_heads));
    ATTNFLOW_RETURN_IF_ERROR(num({"intermediate_size"}, -1, &s.ffn_dim));
    ATTNFLOW_RETURN_IF_ERROR(num({"vocab_size"}, -1, &s.vocab_size));
    ATTNFLOW_RETURN_IF_ERROR(num({"max_position_embeddings"}, 512, &s.max_positions));
    ATTNFLOW_RETURN_IF_ERROR(num({"type_vocab_size"}, 2, &s.type_vocab));
    s.act = act(Activation::kGelu);
    s.embedding_norm = true, s.pooler = true, s.lm_head = false;
  } else if (type == "gpt2") {
    ATTNFLOW_RETURN_IF_ERROR(num({"n_embd", "hidden_size"}, -1, &s.d_model));
    ATTNFLOW_RETURN_IF_ERROR(num({"n_layer", "num_hidden_layers"}, -1, &s.num_layers));
    ATTNFLOW_RETURN_IF_ERROR(num({"n_head", "num_attention_heads"}, -1, &s.num_heads));
    ATTNFLOW_RETURN_IF_ERROR(num({"n_inner"}, 4 * s.d_model, &s.ffn_dim));
    ATTNFLOW_RETURN_IF_ERROR(num({"vocab_size"}, -1, &s.vocab_size));
    ATTNFLOW_RETURN_IF_ERROR(num({"n_positions", "max_position_embeddings"}, 1024, &s.max_positions));
    s.act = act(Activation::kGeluTanh);
    s.final_norm = true, s.tied_lm_head = flag("tie_word_embeddings", true);
  } else if (type == "llama" || type == "mistral" || type == "qwen2") {
    ATTNFLOW_RETURN_IF_ERROR(num({"hidden_size"}, -1, &s.d_model));
    ATTNFLOW_RETURN_IF_ERROR(num({"num_hidden_layers"}, -1, &s.num_layers));
    ATTNFLOW_RETURN_IF_ERROR(num({"num_attention_heads"}, -1, &s.num_heads));
    ATTNFLOW_RETURN_IF_ERROR(num({"num_key_value_heads"}, s.num_heads, &s.num_kv_heads));
    ATTNFLOW_RETURN_IF_ERROR(num({"head_dim"}, 0, &s.head_dim));
    ATTNFLOW_RETURN_IF_ERROR(num({"intermediate_size"}, -1, &s.ffn_dim));
    ATTNFLOW_RETURN_IF_ERROR(num({"vocab_size"}, -1, &s.vocab_size));
    s.act = act(Activation::kSwiGlu);
    s.norm = NormKind::kRmsNorm;
    s.qkv_bias = flag("attention_bias", type == "qwen2");
    s.out_bias = flag("attention_bias", false) && type != "qwen2";
    s.ffn_bias = flag("mlp_bias", false);
    s.final_norm = true, s.tied_lm_head = flag("tie_word_embeddings", false);
  } else {
    return InvalidArgument("budget: config.json model_type " + QuoteBounded(type) +
                           " is not supported (bert, gpt2, llama, mistral, qwen2)");
  }
  return s;
}

Result<ModelShape> ParseModelShapeJson(const std::string& text) {
  using nlohmann::json;
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("budget: config is not a JSON object");
  }
  if (j.contains("model_type")) return ModelShapeFromHfConfig(text);
  ModelShape s;
  s.name = "custom";
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    auto as_int = [&](int64_t* dst) -> Status {
      if (!v.is_number_integer()) return InvalidArgument("budget: config field " + QuoteBounded(k) + " must be an integer");
      *dst = v.get<int64_t>();
      return Status::Ok();
    };
    auto as_bool = [&](bool* dst) -> Status {
      if (!v.is_boolean()) return InvalidArgument("budget: config field " + QuoteBounded(k) + " must be true/false");
      *dst = v.get<bool>();
      return Status::Ok();
    };
    Status st;
    if (k == "name") {
      if (!v.is_string()) return InvalidArgument("budget: config field 'name' must be a string");
      s.name = v.get<std::string>();
      if (s.name.size() > kMaxConfigNameBytes) {
        return InvalidArgument("budget: config field 'name' " + QuoteBounded(s.name) +
                               " is longer than " + std::to_string(kMaxConfigNameBytes) + " bytes");
      }
    } else if (k == "num_layers") st = as_int(&s.num_layers);
    else if (k == "d_model") st = as_int(&s.d_model);
    else if (k == "num_heads") st = as_int(&s.num_heads);
    else if (k == "num_kv_heads") st = as_int(&s.num_kv_heads);
    else if (k == "head_dim") st = as_int(&s.head_dim);
    else if (k == "ffn_dim") st = as_int(&s.ffn_dim);
    else if (k == "vocab_size") st = as_int(&s.vocab_size);
    else if (k == "max_positions") st = as_int(&s.max_positions);
    else if (k == "type_vocab") st = as_int(&s.type_vocab);
    else if (k == "kv_bytes_per_element") st = as_int(&s.kv_bytes_per_element);
    else if (k == "qkv_bias") st = as_bool(&s.qkv_bias);
    else if (k == "out_bias") st = as_bool(&s.out_bias);
    else if (k == "ffn_bias") st = as_bool(&s.ffn_bias);
    else if (k == "embedding_norm") st = as_bool(&s.embedding_norm);
    else if (k == "final_norm") st = as_bool(&s.final_norm);
    else if (k == "tied_lm_head") st = as_bool(&s.tied_lm_head);
    else if (k == "lm_head") st = as_bool(&s.lm_head);
    else if (k == "pooler") st = as_bool(&s.pooler);
    else if (k == "act") {
      if (!v.is_string() || !ParseActivation(v.get<std::string>(), &s.act))
        return InvalidArgument("budget: config field 'act' must be relu, gelu, gelu_tanh or swiglu");
    } else if (k == "norm") {
      if (!v.is_string() || !ParseNormKind(v.get<std::string>(), &s.norm))
        return InvalidArgument("budget: config field 'norm' must be layernorm or rmsnorm");
    } else {
      return InvalidArgument("budget: unknown config field " + QuoteBounded(k));
    }
    if (!st.ok()) return st;
  }
  return s;
}

namespace {
// Text formatting of the budget tables: exact integers grouped by thousands
// ("8,030,261,248"), next to a short decimal form ("8.03 G"); bytes in
// binary units ("1.00 GiB"). --json keeps the plain integers.
std::string Grouped(int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

// v in the largest of the 7 units (each `base` times the one before) that
// keeps it >= 1: no decimals in the first unit, 2 in the others.
std::string Scaled(double v, double base, const char* const (&units)[7]) {
  int i = 0;
  while (v >= base && i < 6) v /= base, ++i;
  char h[48];
  std::snprintf(h, sizeof(h), i == 0 ? "%.0f%s" : "%.2f%s", v, units[i]);
  return h;
}

std::string Short(double v) {
  return Scaled(v, 1000.0, {"", " k", " M", " G", " T", " P", " E"});
}

std::string Bytes(double v) {
  return Scaled(v, 1024.0, {" B", " KiB", " MiB", " GiB", " TiB", " PiB", " EiB"});
}
}  // namespace

std::string FormatBudget(const Budget& b) {
  const ModelShape& s = b.shape;
  std::string o;
  char buf[512];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof(buf), fmt, args...);
    o += buf;
  };
  // "25,165,824 (25.17 M)": the exact count and its short form.
  auto count = [](int64_t v) {
    return v < 1000 ? Grouped(v) : Grouped(v) + " (" + Short(static_cast<double>(v)) + ")";
  };
  line("config %s: layers=%" PRId64 " d_model=%" PRId64 " heads=%" PRId64 " kv_heads=%" PRId64
       " head_dim=%" PRId64 " ffn=%" PRId64 " act=%s norm=%s vocab=%" PRId64 "\n",
       s.name.c_str(), s.num_layers, s.d_model, s.num_heads, b.num_kv_heads, b.head_dim, s.ffn_dim,
       ActivationName(s.act), NormKindName(s.norm), s.vocab_size);
  line("seq_len=%" PRId64 " context=%" PRId64 " (FLOPs: matmuls only, 2 per multiply-add, dense scores)\n",
       b.seq_len, b.context);
  line("\nper layer            %26s %30s\n", "params", "FLOPs");
  const std::pair<const char*, std::pair<int64_t, int64_t>> rows[] = {
      {"qkv_projection", {b.layer_params.qkv, b.layer_flops.qkv}},
      {"scores (q.kT)", {0, b.layer_flops.scores}},
      {"aggregate (w.v)", {0, b.layer_flops.aggregate}},
      {"out_projection", {b.layer_params.out, b.layer_flops.out}},
      {"ffn", {b.layer_params.ffn, b.layer_flops.ffn}},
      {"norms", {b.layer_params.norms, 0}},
      {"layer total", {b.layer_params.total(), b.layer_flops.total()}},
  };
  for (const auto& [name, pf] : rows)
    line("  %-18s %26s %30s\n", name, count(pf.first).c_str(), count(pf.second).c_str());
  line("\nmodel\n");
  line("  %-24s %30s\n", "embedding params", count(b.embedding_params).c_str());
  line("  %-24s %30s\n", "layer params (all)", count(b.layer_params.total() * s.num_layers).c_str());
  line("  %-24s %30s\n", "head params", count(b.head_params).c_str());
  line("  %-24s %30s\n", "total params", count(b.total_params).c_str());
  line("  %-24s %30s\n", "lm head FLOPs", count(b.lm_head_flops).c_str());
  line("  %-24s %30s\n", "total FLOPs", count(b.total_flops).c_str());
  line("  %-24s %30s  (%" PRId64 " bytes/element)\n", "K/V bytes per token",
       (Grouped(b.kv_bytes_per_token) + " (" + Bytes(static_cast<double>(b.kv_bytes_per_token)) + ")").c_str(),
       s.kv_bytes_per_element);
  return o;
}

const std::vector<WeightDType>& WeightDTypes() {
  static const std::vector<WeightDType> k = {
      {"F32", 4, 1}, {"F16/BF16", 2, 1}, {"Q8_0", 34, 32}, {"Q4_K", 144, 256}, {"Q4_0", 18, 32}};
  return k;
}

Result<MemoryBudget> ComputeMemory(const Budget& b, int64_t ram_bytes) {
  if (ram_bytes < 0) return InvalidArgument("budget: --ram must be >= 0");
  Acc a;
  MemoryBudget m;
  m.context = b.context;
  m.ram_bytes = ram_bytes;
  m.kv_bytes = a.Mul({b.kv_bytes_per_token, b.context});
  m.score_matrix_bytes = a.Mul({b.shape.num_heads, b.context, b.context, 4});
  for (const WeightDType& t : WeightDTypes()) {
    MemoryRow r;
    r.dtype = t.name;
    // ceil(params · num / den), overflow-checked.
    r.weight_bytes = a.Add({a.Mul({b.total_params, t.bytes_num}), t.bytes_den - 1}) / t.bytes_den;
    r.decode_read_bytes = a.Add({r.weight_bytes, m.kv_bytes});
    if (ram_bytes > 0 && b.kv_bytes_per_token > 0 && ram_bytes > r.weight_bytes) {
      r.max_context = (ram_bytes - r.weight_bytes) / b.kv_bytes_per_token;
    }
    m.rows.push_back(r);
  }
  if (a.overflow) return ResourceExhausted("budget: " + b.shape.name + ": byte counts overflow int64");
  return m;
}

std::string FormatMemory(const MemoryBudget& m) {
  std::string o;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "\nmemory at context %s (one sequence)\n", Grouped(m.context).c_str());
  o += buf;
  std::snprintf(buf, sizeof(buf), "  %-34s %26s\n", "K/V cache bytes",
                (Grouped(m.kv_bytes) + " (" + Bytes(double(m.kv_bytes)) + ")").c_str());
  o += buf;
  std::snprintf(buf, sizeof(buf), "  %-34s %26s  FlashAttention never writes it\n",
                "materialised LxL scores, 1 layer",
                (Grouped(m.score_matrix_bytes) + " (" + Bytes(double(m.score_matrix_bytes)) + ")").c_str());
  o += buf;
  std::snprintf(buf, sizeof(buf), "  %-10s %14s %18s %18s\n", "weights", "weight bytes",
                "decode step reads", m.ram_bytes > 0 ? "max context" : "");
  o += buf;
  for (const MemoryRow& r : m.rows) {
    std::string mc;
    if (m.ram_bytes > 0) mc = r.max_context > 0 ? Grouped(r.max_context) + " tokens" : "does not fit";
    std::snprintf(buf, sizeof(buf), "  %-10s %14s %18s %18s\n", r.dtype.c_str(),
                  Bytes(double(r.weight_bytes)).c_str(), Bytes(double(r.decode_read_bytes)).c_str(),
                  mc.c_str());
    o += buf;
  }
  if (m.ram_bytes > 0) {
    o += "  (max context: tokens whose K/V fit in " + Bytes(double(m.ram_bytes)) +
         " after the weights; activations not counted. Host view: weights and cache in one "
         "memory; a microcontroller keeps its weights in flash, see --device)\n";
  }
  return o;
}

// ---------------------------------------------------------------------------
// Microcontroller budget.

const char* DeviceWeightsName(DeviceWeights w) {
  return w == DeviceWeights::kF32 ? "f32" : w == DeviceWeights::kF16 ? "f16" : "int8";
}
const char* DeviceKvName(DeviceKv k) { return k == DeviceKv::kF32 ? "f32" : "int8"; }
bool ParseDeviceWeights(const std::string& s, DeviceWeights* out) {
  if (s == "f32") return *out = DeviceWeights::kF32, true;
  if (s == "f16") return *out = DeviceWeights::kF16, true;
  if (s == "int8") return *out = DeviceWeights::kInt8, true;
  return false;
}
bool ParseDeviceKv(const std::string& s, DeviceKv* out) {
  if (s == "f32") return *out = DeviceKv::kF32, true;
  if (s == "int8") return *out = DeviceKv::kInt8, true;
  return false;
}

const std::vector<DeviceTarget>& DeviceTargets() {
  constexpr int64_t KiB = 1024, MiB = 1024 * 1024;
  static const std::vector<DeviceTarget> k = {
      {"esp32-c3", "ESP32-C3 (RISC-V rv32imc, 160 MHz)", 320 * KiB, 4 * MiB,
       "400 KiB SRAM, of which a typical ESP-IDF app leaves about 320 KiB (assumed: measure "
       "yours, heap_caps_get_free_size); 4 MiB flash on the chip, but ESP-IDF's default "
       "partition table gives the app 1 MiB (use a larger app or a data partition)"},
      {"stm32f407", "STM32F407 (Cortex-M4F, 168 MHz)", 192 * KiB, 1 * MiB,
       "192 KiB RAM = 128 KiB SRAM (SRAM1 + SRAM2, contiguous) + 64 KiB CCM (CPU only, no "
       "DMA): a buffer over 128 KiB must be split (e.g. one KV layer per region); 1 MiB flash"},
      {"nrf5340", "nRF5340 application core (Cortex-M33, 128 MHz)", 512 * KiB, 1 * MiB,
       "512 KiB RAM and 1 MiB flash of the application core (the network core's 64 KiB RAM / "
       "256 KiB flash not counted); a Bluetooth stack takes part of both"},
  };
  return k;
}

Result<DeviceTarget> FindDeviceTarget(const std::string& name) {
  return FindByName(DeviceTargets(), name, "device", "or 'custom' with --ram and --flash");
}

namespace {

// Flash and activation items, and the arena, of one storage choice.
struct DeviceParts {
  std::vector<ByteItem> flash, act;
  ByteItem arena;
  int64_t kv_per_token = 0;
};

DeviceParts DeviceBytes(const ModelShape& s, const Budget& b, DeviceWeights w, DeviceKv kv,
                        int64_t kv_scale_bytes, Acc& a) {
  DeviceParts p;
  const int64_t E = s.d_model, H = s.num_heads, Hkv = b.num_kv_heads, Dh = b.head_dim;
  const int64_t F = s.ffn_dim, V = s.vocab_size, T = s.max_positions, L = s.num_layers;
  const int64_t up_mats = IsGated(s.act) ? 2 : 1;  // FFN matrices before the activation
  const bool ln = s.norm == NormKind::kLayerNorm;
  auto add = [](std::vector<ByteItem>& v, std::string name, std::string f, int64_t bytes) {
    if (bytes != 0) v.push_back({std::move(name), std::move(f), bytes});
  };
  if (w != DeviceWeights::kInt8) {
    const int64_t e = w == DeviceWeights::kF32 ? 4 : 2;
    const std::string es = std::to_string(e);
    add(p.flash, "token embedding", "V*E*" + es, a.Mul({V, E, e}));
    add(p.flash, "learned positions", "T*E*" + es, a.Mul({T, E, e}));
    add(p.flash, "token types", "types*E*" + es, a.Mul({s.type_vocab, E, e}));
    const int64_t norm = ln ? 2 * E : E;
    add(p.flash, "embedding norm", (ln ? "2*E*" : "E*") + es, s.embedding_norm ? a.Mul({norm, e}) : 0);
    add(p.flash, "layers", "L*(" + std::to_string(b.layer_params.total()) + " params)*" + es,
        a.Mul({L, b.layer_params.total(), e}));
    add(p.flash, "final norm", (ln ? "2*E*" : "E*") + es, s.final_norm ? a.Mul({norm, e}) : 0);
    add(p.flash, "lm head (untied)", "V*E*" + es,
        s.lm_head && !s.tied_lm_head ? a.Mul({V, E, e}) : 0);
    add(p.flash, "pooler", "(E*E+E)*" + es, s.pooler ? a.Mul({a.Add({a.Mul({E, E}), E}), e}) : 0);
  } else {
    // af_linear_s8: int8 weights, int32 biases, one af_qmult (8 bytes) per output row.
    auto lin = [&](int64_t out, int64_t in, bool bias) {
      return a.Add({a.Mul({out, in}), bias ? a.Mul({out, 4}) : 0, a.Mul({out, 8})});
    };
    const int64_t norm = a.Mul({ln ? 2 : 1, E, 4});
    add(p.flash, "token embedding", "V*E + 8", a.Add({a.Mul({V, E}), 8}));
    add(p.flash, "learned positions", "T*E + 8", T > 0 ? a.Add({a.Mul({T, E}), 8}) : 0);
    add(p.flash, "token types", "types*E + 8", s.type_vocab > 0 ? a.Add({a.Mul({s.type_vocab, E}), 8}) : 0);
    add(p.flash, "embedding norm", ln ? "2*E*4" : "E*4", s.embedding_norm ? norm : 0);
    const int64_t layer = a.Add({a.Mul({2, norm}), lin(a.Mul({H, Dh}), E, s.qkv_bias),
                                 a.Mul({2, lin(a.Mul({Hkv, Dh}), E, s.qkv_bias)}),
                                 lin(E, a.Mul({H, Dh}), s.out_bias),
                                 a.Mul({up_mats, lin(F, E, s.ffn_bias)}), lin(E, F, s.ffn_bias), 16});
    add(p.flash, "layers",
        "L*(norms + q,k,v,o,ffn: out*in + out*4 if biased + out*8 multipliers + 16)",
        a.Mul({L, layer}));
    add(p.flash, "final norm", ln ? "2*E*4" : "E*4", s.final_norm ? norm : 0);
    add(p.flash, "lm head (untied)", "V*E + V*8",
        s.lm_head && !s.tied_lm_head ? a.Add({a.Mul({V, E}), a.Mul({V, 8})}) : 0);
    add(p.flash, "pooler", "E*E + E*4 + E*8", s.pooler ? lin(E, E, true) : 0);
  }
  // Activations of one decode step.
  if (w != DeviceWeights::kInt8) {
    add(p.act, "residual x", "E*4", a.Mul({E, 4}));
    add(p.act, "norm output", "E*4", a.Mul({E, 4}));
    add(p.act, "q", "H*Dh*4", a.Mul({H, Dh, 4}));
    add(p.act, "k, v of the new token", "2*Hkv*Dh*4", a.Mul({2, Hkv, Dh, 4}));
    add(p.act, "attention output", "H*Dh*4", a.Mul({H, Dh, 4}));
    add(p.act, "projection output", "E*4", a.Mul({E, 4}));
    add(p.act, "FFN hidden", up_mats == 2 ? "2*F*4" : "F*4", a.Mul({up_mats, F, 4}));
    add(p.act, "logits", "V*4", s.lm_head ? a.Mul({V, 4}) : 0);
    if (kv == DeviceKv::kInt8) {
      add(p.act, "q and attention output in int8", "2*H*Dh", a.Mul({2, H, Dh}));
    }
  } else {
    add(p.act, "residual r (int32)", "E*4", a.Mul({E, 4}));
    add(p.act, "norm output (int8)", "E", E);
    add(p.act, "q, k, v (int8)", "(H+2*Hkv)*Dh", a.Mul({a.Add({H, a.Mul({2, Hkv})}), Dh}));
    add(p.act, "attention output (int8)", "H*Dh", a.Mul({H, Dh}));
    add(p.act, "FFN hidden (int8)", up_mats == 2 ? "2*F" : "F", a.Mul({up_mats, F}));
    add(p.act, "logits (int32)", "V*4", s.lm_head ? a.Mul({V, 4}) : 0);
  }
  if (kv == DeviceKv::kF32) {
    p.arena = {"attention arena (af_sdpa_f32)", "2*AF_KEY_TILE*4", 2 * kMicroKeyTile * 4};
    p.kv_per_token = a.Mul({L, 2, Hkv, Dh, 4});
  } else {
    p.arena = {"attention arena (af_sdpa_s8)", "2*(AF_S8_KEY_TILE+Dv)*4",
               a.Mul({2, a.Add({kMicroS8KeyTile, Dh}), 4})};
    p.kv_per_token = a.Mul({L, 2, Hkv, a.Add({Dh, kv_scale_bytes})});
  }
  return p;
}

int64_t Sum(const std::vector<ByteItem>& v, Acc& a) {
  int64_t t = 0;
  for (const ByteItem& i : v) t = a.Add({t, i.bytes});
  return t;
}

// max context from RAM, the usable maximum and what binds it.
void Contexts(int64_t ram, int64_t fixed, int64_t per_token, int64_t model_limit,
              int64_t* from_ram, int64_t* usable, std::string* binds) {
  *from_ram = ram > fixed ? (ram - fixed) / per_token : 0;
  if (model_limit > 0 && *from_ram >= model_limit) {
    *usable = model_limit;
    *binds = *from_ram == model_limit ? "RAM and learned positions" : "learned positions";
  } else {
    *usable = *from_ram;
    *binds = "RAM";
  }
}

}  // namespace

Result<DeviceBudget> ComputeDeviceBudget(const ModelShape& shape, const DeviceBudgetOptions& opt) {
  const std::string op = "budget --device: " + shape.name + ": ";
  if (opt.target.ram_bytes <= 0 || opt.target.flash_bytes <= 0) {
    return InvalidArgument(op + "RAM and flash sizes must be positive (got " +
                           std::to_string(opt.target.ram_bytes) + " and " +
                           std::to_string(opt.target.flash_bytes) + " bytes)");
  }
  if (opt.kv_scale_bytes < 0 || opt.context < 0) {
    return InvalidArgument(op + "kv_scale_bytes and context must be >= 0");
  }
  if (opt.weights == DeviceWeights::kInt8 && opt.kv == DeviceKv::kF32) {
    return InvalidArgument(op + "int8 weights run the int8 path, whose KV cache is int8 "
                           "(micro/tiny/tiny_s8_main.c): use --kv-cache int8");
  }
  if (opt.kv == DeviceKv::kF32 && opt.kv_scale_bytes != 0) {
    return InvalidArgument(op + "kv_scale_bytes applies to an int8 KV cache only");
  }
  Result<Budget> base = ComputeBudget(shape, 1, 0);
  if (!base.ok()) return base.status();
  if (base->head_dim <= 0) {
    return InvalidArgument(op + "head_dim must be positive (got " + std::to_string(base->head_dim) + ")");
  }
  Acc a;
  DeviceBudget d;
  d.shape = shape;
  d.head_dim = base->head_dim;
  d.num_kv_heads = base->num_kv_heads;
  d.total_params = base->total_params;
  d.opt = opt;
  d.model_limit = shape.max_positions;
  DeviceParts p = DeviceBytes(shape, base.value(), opt.weights, opt.kv, opt.kv_scale_bytes, a);
  d.flash = std::move(p.flash);
  d.flash_bytes = Sum(d.flash, a);
  d.flash_fits = d.flash_bytes <= opt.target.flash_bytes;
  d.activations = std::move(p.act);
  d.activation_bytes = Sum(d.activations, a);
  d.arena = p.arena;
  d.kv_bytes_per_token = p.kv_per_token;
  d.ram_fixed_bytes = a.Add({d.activation_bytes, d.arena.bytes});
  if (a.overflow) return ResourceExhausted(op + "byte counts overflow int64");
  Contexts(opt.target.ram_bytes, d.ram_fixed_bytes, d.kv_bytes_per_token, d.model_limit,
           &d.max_context_ram, &d.max_context, &d.binds);
  d.context = opt.context > 0 ? opt.context : d.max_context;
  d.kv_bytes = a.Mul({d.kv_bytes_per_token, d.context});
  d.ram_bytes = a.Add({d.ram_fixed_bytes, d.kv_bytes});
  d.ram_fits = d.ram_bytes <= opt.target.ram_bytes;
  for (DeviceWeights w : {DeviceWeights::kF32, DeviceWeights::kF16, DeviceWeights::kInt8}) {
    for (DeviceKv kv : {DeviceKv::kF32, DeviceKv::kInt8}) {
      if (w == DeviceWeights::kInt8 && kv == DeviceKv::kF32) continue;
      DeviceParts q = DeviceBytes(shape, base.value(), w, kv,
                                  kv == DeviceKv::kInt8 ? opt.kv_scale_bytes : 0, a);
      DeviceChoice c;
      c.weights = w;
      c.kv = kv;
      c.flash_bytes = Sum(q.flash, a);
      c.flash_fits = c.flash_bytes <= opt.target.flash_bytes;
      c.ram_fixed_bytes = a.Add({Sum(q.act, a), q.arena.bytes});
      c.kv_bytes_per_token = q.kv_per_token;
      if (a.overflow) return ResourceExhausted(op + "byte counts overflow int64");
      Contexts(opt.target.ram_bytes, c.ram_fixed_bytes, c.kv_bytes_per_token, d.model_limit,
               &c.max_context_ram, &c.max_context, &c.binds);
      d.choices.push_back(c);
    }
  }
  if (a.overflow) return ResourceExhausted(op + "byte counts overflow int64");
  return d;
}

std::string FormatDeviceBudget(const DeviceBudget& d) {
  std::string o;
  char buf[512];
  auto line = [&](const char* fmt, auto... args) {
    std::snprintf(buf, sizeof(buf), fmt, args...);
    o += buf;
  };
  const ModelShape& s = d.shape;
  const DeviceTarget& t = d.opt.target;
  line("device budget: config %s on %s (%s)\n", s.name.c_str(), t.name.c_str(),
       t.description.c_str());
  line("  RAM %s, flash %s", Bytes(double(t.ram_bytes)).c_str(), Bytes(double(t.flash_bytes)).c_str());
  o += t.note.empty() ? "\n" : ": " + t.note + "\n";
  line("  weights %s, KV cache %s", DeviceWeightsName(d.opt.weights), DeviceKvName(d.opt.kv));
  if (d.opt.kv == DeviceKv::kInt8) {
    line(" (%" PRId64 " scale bytes per layer, K/V, kv head and token)", d.opt.kv_scale_bytes);
  }
  line("; one decode step at a time\n");
  line("  layers=%" PRId64 " d_model=%" PRId64 " heads=%" PRId64 " kv_heads=%" PRId64
       " head_dim=%" PRId64 " ffn=%" PRId64 " vocab=%" PRId64 " params=%" PRId64 "\n",
       s.num_layers, s.d_model, s.num_heads, d.num_kv_heads, d.head_dim, s.ffn_dim, s.vocab_size,
       d.total_params);
  auto items = [&](const std::vector<ByteItem>& v) {
    for (const ByteItem& i : v) {
      line("    %-34s %12" PRId64 "  %s\n", i.name.c_str(), i.bytes, i.formula.c_str());
    }
  };
  line("\nflash (weights and constants)\n");
  items(d.flash);
  line("    %-34s %12" PRId64 "  (%s of %s: %s)\n", "total", d.flash_bytes,
       Bytes(double(d.flash_bytes)).c_str(), Bytes(double(t.flash_bytes)).c_str(),
       d.flash_fits ? "fits" : "DOES NOT FIT");
  line("\nRAM\n");
  line("  activations of one decode step\n");
  items(d.activations);
  line("    %-34s %12" PRId64 "\n", "total", d.activation_bytes);
  line("  %-36s %12" PRId64 "  %s\n", d.arena.name.c_str(), d.arena.bytes, d.arena.formula.c_str());
  line("  %-36s %12" PRId64 "  %s\n", "K/V cache bytes per token", d.kv_bytes_per_token,
       d.opt.kv == DeviceKv::kF32 ? "L*2*Hkv*Dh*4" : "L*2*Hkv*(Dh + scale bytes)");
  line("\ncontext\n");
  if (d.max_context_ram == 0) {
    line("  from RAM: 0 tokens (activations and arena alone need %s of %s)\n",
         Bytes(double(d.ram_fixed_bytes)).c_str(), Bytes(double(t.ram_bytes)).c_str());
  } else {
    line("  from RAM: %" PRId64 " tokens  (%s - %" PRId64 " fixed) / %" PRId64 " per token\n",
         d.max_context_ram, Bytes(double(t.ram_bytes)).c_str(), d.ram_fixed_bytes,
         d.kv_bytes_per_token);
  }
  if (d.model_limit > 0) {
    line("  the model's own limit: %" PRId64 " learned positions\n", d.model_limit);
  } else {
    line("  the model's own limit: none stated (no learned positions)\n");
  }
  line("  usable: %" PRId64 " tokens, bound by %s%s\n", d.max_context, d.binds.c_str(),
       d.flash_fits ? "" : " (but the weights do not fit the flash)");
  line("  at %" PRId64 " tokens: K/V cache %s, RAM used %s of %s (%s)%s\n", d.context,
       Bytes(double(d.kv_bytes)).c_str(), Bytes(double(d.ram_bytes)).c_str(),
       Bytes(double(t.ram_bytes)).c_str(), d.ram_fits ? "fits" : "DOES NOT FIT",
       d.model_limit > 0 && d.context > d.model_limit ? "; beyond the learned positions" : "");
  line("\nevery storage choice (same target)\n");
  line("  %-7s %-8s %12s %6s %12s %12s %10s %9s  %s\n", "weights", "kv cache", "flash", "fits",
       "RAM fixed", "K/V / token", "from RAM", "usable", "bound by");
  for (const DeviceChoice& c : d.choices) {
    line("  %-7s %-8s %12s %6s %12" PRId64 " %12" PRId64 " %10" PRId64 " %9" PRId64 "  %s\n",
         DeviceWeightsName(c.weights), DeviceKvName(c.kv), Bytes(double(c.flash_bytes)).c_str(),
         c.flash_fits ? "yes" : "NO", c.ram_fixed_bytes, c.kv_bytes_per_token, c.max_context_ram,
         c.max_context, c.binds.c_str());
  }
  o += "  (not counted: program code, stack, other data of the program, RTOS or radio stacks)\n";
  return o;
}

Result<std::vector<LayerTypeRow>> CompareLayerTypes(int64_t n, int64_t d, int64_t k, int64_t r) {
  if (n <= 0 || d <= 0 || k < 2 || r <= 0) {
    return InvalidArgument("budget --compare: need n > 0, d > 0, k >= 2 and r > 0 (got n=" +
                           std::to_string(n) + ", d=" + std::to_string(d) + ", k=" +
                           std::to_string(k) + ", r=" + std::to_string(r) + ")");
  }
  const double N = double(n), D = double(d), K = double(k), R = double(r);
  // ceil(log_k n) by integer powers (no floating log rounding): the stack
  // depth of dilated / stacked kernel-k convolutions that connects n tokens.
  double depth = 0;
  for (double reach = 1; reach < N; reach *= K) ++depth;
  return std::vector<LayerTypeRow>{
      {"self-attention", "n^2*d", N * N * D, 1, 1},
      {"recurrent", "n*d^2", N * D * D, N, N},
      {"convolutional", "k*n*d^2", K * N * D * D, 1, std::max(1.0, depth)},
      {"self-attention (restricted)", "r*n*d", R * N * D, 1, std::ceil(N / R)},
  };
}

std::string FormatLayerComparison(const std::vector<LayerTypeRow>& rows, int64_t n, int64_t d,
                                  int64_t k, int64_t r) {
  std::string o;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "Vaswani et al. 2017, Table 1, for n=%" PRId64 " d=%" PRId64 " k=%" PRId64
                " r=%" PRId64 "\n",
                n, d, k, r);
  o += buf;
  std::snprintf(buf, sizeof(buf), "  %-28s %-8s %24s %12s %12s\n", "layer", "ops", "multiply-adds",
                "sequential", "max path");
  o += buf;
  for (const LayerTypeRow& x : rows) {
    // Exact (grouped) while the count is an integer a double holds exactly.
    const std::string ops = x.ops < 9.0e15 && x.ops == std::floor(x.ops)
                                ? Grouped(static_cast<int64_t>(x.ops)) + " (" + Short(x.ops) + ")"
                                : Short(x.ops);
    std::snprintf(buf, sizeof(buf), "  %-28s %-8s %24s %12s %12s\n", x.layer, x.ops_formula,
                  ops.c_str(), Grouped(static_cast<int64_t>(x.sequential)).c_str(),
                  Grouped(static_cast<int64_t>(x.max_path)).c_str());
    o += buf;
  }
  o += "  sequential = steps that must run one after another within the layer; max path =\n"
       "  layers a signal crosses between any two positions (docs/complexity.md)\n";
  return o;
}

}  // namespace attnflow::nn
