// export.cc — analysis exports of a Trace: safetensors (golden stage names),
// NumPy .npy, spreadsheet CSV (laid out by the stage table's layouts).
//
// Invariants:
//  * Exports are full precision (the stage's own dtype: F64 for the toy and
//    the reference attention) and never pooled, whatever the page shows.
//  * Every file goes through WriteFileAtomic (no partial file on failure);
//    directory exports (--npy, --csv) go through WriteDirectoryAtomic: the
//    whole directory appears at once, never a mix of an old and a new export.
//  * Stage names are the golden-format names; decode steps are prefixed
//    "decode.<s>." so a golden reader ignores them. The safetensors export
//    lists them in dataflow order in its `stages` metadata (the prefill,
//    then each decode step) and its inputs in `inputs`, so `verify
//    --compare` names the first stage that breaks.
#include <cmath>
#include <cstdio>
#include <map>

#include "attnflow/file_util.h"
#include "attnflow/npy.h"
#include "attnflow/golden.h"
#include "attnflow/safetensors.h"
#include "attnflow/player.h"
#include "io/json_text.h"
#include "player/internal.h"
#include "player/stage_table.h"

namespace attnflow::player {
namespace {

using internal::Elem;
using trace::DecodeStep;
using trace::Trace;
using trace::TraceToken;

std::string TokensJson(const std::vector<TraceToken>& toks, bool ids) {
  std::string o = "[";
  for (size_t i = 0; i < toks.size(); ++i) {
    if (i) o += ",";
    if (ids) o += std::to_string(toks[i].id);
    else json_text::AppendJsonString(&o, toks[i].text);
  }
  return o + "]";
}

std::string Num(double v, bool f64) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char b[64];
  std::snprintf(b, sizeof b, f64 ? "%.17g" : "%.9g", v);
  return b;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos && !s.empty() && s.front() != ' ' &&
      s.back() != ' ') {
    return s;
  }
  std::string o = "\"";
  for (char c : s) {
    if (c == '"') o += "\"\"";
    else o += c;
  }
  return o + "\"";
}

std::string TokLabel(const std::vector<TraceToken>& toks, int64_t i) {
  const std::string text =
      i < static_cast<int64_t>(toks.size()) ? toks[static_cast<size_t>(i)].text : "";
  return CsvField(std::to_string(i) + ":" + text);
}

}  // namespace

Status WriteTraceSafetensors(const std::string& path, const Trace& t) {
  std::vector<std::pair<std::string, TensorView>> tensors;
  std::vector<std::string> inputs, stages;  // the 'inputs' / 'stages' lists (dataflow order)
  for (const auto& in : t.inputs) {
    tensors.emplace_back(in.name, in.value.view());
    inputs.push_back(in.name);
  }
  // An all-layer dump holds every layer ("layer.<l>.<stage>") instead of the
  // traced layer's stages alone.
  const bool all = !t.layer_stages.empty();
  for (const auto& s : all ? t.layer_stages : t.stages) {
    tensors.emplace_back(s.name, s.value.view());
    stages.push_back(s.name);
  }
  for (size_t i = 0; i < t.decode.size(); ++i) {
    for (const auto& s : all ? t.decode[i].layer_stages : t.decode[i].stages) {
      tensors.emplace_back("decode." + std::to_string(i) + "." + s.name, s.value.view());
      stages.push_back(tensors.back().first);
    }
  }
  inputs.push_back("token_ids");
  // The decode steps' tokens: what another run is teacher-forced with
  // (`trace --decode-from`), so two dumps see the same tokens.
  std::vector<int32_t> decode_ids;
  for (const auto& d : t.decode) decode_ids.push_back(d.token.id);
  if (!decode_ids.empty()) {
    tensors.emplace_back("decode_token_ids", MakeView(decode_ids.data(), DType::kI32,
                                                      {static_cast<int64_t>(decode_ids.size())}));
    inputs.push_back("decode_token_ids");
  }
  Result<std::string> stage_list = JoinStageList(stages), input_list = JoinStageList(inputs);
  if (!stage_list.ok()) return stage_list.status();
  if (!input_list.ok()) return input_list.status();
  std::vector<int32_t> ids;
  for (const auto& tok : t.tokens) ids.push_back(tok.id);
  tensors.emplace_back("token_ids", MakeView(ids.data(), DType::kI32,
                                             {static_cast<int64_t>(ids.size())}));
  char scale[64];
  std::snprintf(scale, sizeof scale, "%.17g", t.scale);
  std::map<std::string, std::string> meta = {
      // With the toy's inputs the file is a complete golden case.
      {"format", t.inputs.empty() ? kTraceFormatV1 : kGoldenFormatV1},
      {"trace_format", kTraceFormatV1},
      {"kind", "mha"},
      {"causal", CausalName(t.causal)},
      {"scale", scale},
      {"num_heads", std::to_string(t.info.num_heads)},
      {"num_kv_heads", std::to_string(t.info.num_kv_heads > 0 ? t.info.num_kv_heads
                                                               : t.info.num_heads)},
      {"source", t.source},
      {"model", t.info.name},
      {"layer", std::to_string(t.layer)},
      {"norm", t.norm},
      {"description", t.description},
      {"tokens", TokensJson(t.tokens, false)},
      {"stages", stage_list.value()},
      {"inputs", input_list.value()},
      {"layers", all ? "all" : std::to_string(t.layer)},
      {"weight_dtype", t.info.weight_dtype},
      {"decode_tokens", [&] {
         std::vector<TraceToken> d;
         for (const auto& s : t.decode) d.push_back(s.token);
         return TokensJson(d, false);
       }()},
  };
  if (!t.kv_dtype.empty()) meta["kv_dtype"] = t.kv_dtype;
  if (!t.attention_impl.empty()) meta["attention"] = t.attention_impl;
  return WriteSafetensors(path, tensors, meta);
}

// .npy bytes of a stage through the one encoder (io/npy.cc); F16/BF16 stages
// (a half-precision KV cache) are widened to F32 first.
Result<std::vector<uint8_t>> StageNpy(const TensorView& v) {
  if (v.dtype != DType::kF16 && v.dtype != DType::kBF16) return EncodeNpy(v);
  Result<Tensor> wide = Tensor::Zeros(DType::kF32, Shape(v.shape.begin(), v.shape.begin() + v.rank));
  if (!wide.ok()) return wide.status();
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < v.numel(); ++e) {
    wide->view().store(e, v.load(v.offset(idx[0], idx[1], idx[2], idx[3])));
    for (int k = v.rank - 1; k >= 0; --k) {
      if (++idx[k] < v.shape[k]) break;
      idx[k] = 0;
    }
  }
  return EncodeNpy(wide->view());
}

Status WriteTraceNpy(const std::string& dir, const Trace& t, std::vector<std::string>* written) {
  std::vector<std::string> paths;
  ATTNFLOW_RETURN_IF_ERROR(WriteDirectoryAtomic(dir, ".npy", [&](const std::string& tmp) -> Status {
    auto put = [&](const std::string& name, const TensorView& v) -> Status {
      Result<std::vector<uint8_t>> bytes = StageNpy(v);
      if (!bytes.ok()) return bytes.status();
      ATTNFLOW_RETURN_IF_ERROR(WriteFileAtomic(
          JoinPath(tmp, name + ".npy"),
          std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size())));
      paths.push_back(JoinPath(dir, name + ".npy"));
      return Status::Ok();
    };
    const bool all = !t.layer_stages.empty();  // an all-layer dump: every layer
    for (const auto& s : all ? t.layer_stages : t.stages) ATTNFLOW_RETURN_IF_ERROR(put(s.name, s.value.view()));
    for (size_t i = 0; i < t.decode.size(); ++i)
      for (const auto& s : all ? t.decode[i].layer_stages : t.decode[i].stages)
        ATTNFLOW_RETURN_IF_ERROR(put("decode." + std::to_string(i) + "." + s.name, s.value.view()));
    std::vector<int32_t> ids;
    for (const auto& tok : t.tokens) ids.push_back(tok.id);
    return put("token_ids", MakeView(ids.data(), DType::kI32, {static_cast<int64_t>(ids.size())}));
  }));
  if (written) written->insert(written->end(), paths.begin(), paths.end());
  return Status::Ok();
}

namespace {
// The CSV files, written into `tmp`; `written` gets their final paths in `dir`.
Status WriteCsvFiles(const std::string& tmp, const std::string& dir, const Trace& t,
                     const std::vector<int64_t>& heads_in, std::vector<std::string>* written) {
  std::vector<int64_t> heads = heads_in;
  if (heads.empty())
    for (int64_t h = 0; h < t.info.num_heads; ++h) heads.push_back(h);
  auto emit = [&](const std::string& name, const std::string& text) -> Status {
    ATTNFLOW_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(tmp, name), text));
    written->push_back(JoinPath(dir, name));
    return Status::Ok();
  };
  const auto& toks = t.tokens;
  const PageStageTable& table = StageTable();
  for (const auto& st : t.stages) {
    const Tensor& x = st.value;
    const Shape s = x.shape();
    const bool f64 = x.dtype() == DType::kF64;
    const StageDecl* decl = table.Find(st.name);
    if (decl == nullptr || x.rank() != table.Of(decl->layout).rank || s[0] != 1) {
      return InvalidArgument("player: stage '" + st.name + "' (" + ShapeString(s) +
                             ") is not a stage of that rank in the page's stage table "
                             "(src/player/stage_table.json)");
    }
    const bool map = decl->layout == Layout::kMap;
    if (x.rank() == 4) {  // map, heads, kv_heads: one file per head
      std::vector<int64_t> hs;
      if (decl->layout == Layout::kKvHeads) for (int64_t h = 0; h < s[1]; ++h) hs.push_back(h);
      else hs = heads;
      for (int64_t h : hs) {
        if (h >= s[1]) continue;
        std::string o = map ? "query" : "token";
        for (int64_t j = 0; j < s[3]; ++j)
          o += "," + (map ? TokLabel(toks, j) : "d" + std::to_string(j));
        o += "\n";
        for (int64_t i = 0; i < s[2]; ++i) {
          o += TokLabel(toks, i);
          for (int64_t j = 0; j < s[3]; ++j) o += "," + Num(Elem(x, (h * s[2] + i) * s[3] + j), f64);
          o += "\n";
        }
        ATTNFLOW_RETURN_IF_ERROR(emit(st.name + "_h" + std::to_string(h) + ".csv", o));
      }
    } else if (decl->layout == Layout::kRows) {
      std::string o = "token";
      for (int64_t h : heads) o += ",h" + std::to_string(h);
      o += "\n";
      for (int64_t i = 0; i < s[2]; ++i) {
        o += TokLabel(toks, i);
        for (int64_t h : heads) o += "," + Num(Elem(x, h * s[2] + i), f64);
        o += "\n";
      }
      ATTNFLOW_RETURN_IF_ERROR(emit(st.name + ".csv", o));
    } else {  // tokens
      std::string o = "token";
      for (int64_t j = 0; j < s[2]; ++j) o += ",d" + std::to_string(j);
      o += "\n";
      for (int64_t i = 0; i < s[1]; ++i) {
        o += TokLabel(toks, i);
        for (int64_t j = 0; j < s[2]; ++j) o += "," + Num(Elem(x, i * s[2] + j), f64);
        o += "\n";
      }
      ATTNFLOW_RETURN_IF_ERROR(emit(st.name + ".csv", o));
    }
  }
  // Decode rows: one line per step, keys k0..k{max-1} (empty = not yet cached).
  if (!t.decode.empty()) {
    for (const StageDecl& decl : table.stages) {
      if (decl.layout != Layout::kMap) continue;
      const std::string& name = decl.name;
      for (int64_t h : heads) {
        int64_t max_k = 0;
        for (const auto& d : t.decode)
          if (const Tensor* w = d.Find(name)) max_k = std::max<int64_t>(max_k, w->shape()[3]);
        if (max_k == 0) continue;
        std::string o = "step,position,token";
        for (int64_t j = 0; j < max_k; ++j) o += ",k" + std::to_string(j);
        o += "\n";
        for (size_t s = 0; s < t.decode.size(); ++s) {
          const DecodeStep& d = t.decode[s];
          const Tensor* w = d.Find(name);
          o += std::to_string(s) + "," + std::to_string(d.position) + "," + CsvField(d.token.text);
          const int64_t lk = w ? w->shape()[3] : 0;
          for (int64_t j = 0; j < max_k; ++j) {
            o += ",";
            if (w && j < lk && h < w->shape()[1])
              o += Num(Elem(*w, h * lk + j), w->dtype() == DType::kF64);
          }
          o += "\n";
        }
        ATTNFLOW_RETURN_IF_ERROR(
            emit("decode_" + name + "_h" + std::to_string(h) + ".csv", o));
      }
    }
  }
  return Status::Ok();
}
}  // namespace

Status WriteTraceCsv(const std::string& dir, const Trace& t, const std::vector<int64_t>& heads,
                     std::vector<std::string>* written) {
  std::vector<std::string> paths;
  ATTNFLOW_RETURN_IF_ERROR(WriteDirectoryAtomic(
      dir, ".csv", [&](const std::string& tmp) { return WriteCsvFiles(tmp, dir, t, heads, &paths); }));
  if (written) written->insert(written->end(), paths.begin(), paths.end());
  return Status::Ok();
}

}  // namespace attnflow::player
