// page_read.cc — reading a page JSON (format "attnflow-trace/1",
// docs/player.md) back with full validation: every field, the stages
// against the page's stage table (declared names, their axes), the compact
// encoding decoded, the decode steps, key padding, a padded batch's pages
// (each read and checked like the page) and the views; then the numeric
// checks (page_checks.cc). The page's JavaScript (loadTrace in
// web/player.html) validates the same way with the same messages.
//
// Invariant: anything malformed, truncated or inconsistent is kCorrupt
// naming the label and the byte offset or the field; nothing throws out.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "attnflow/file_util.h"
#include "attnflow/player.h"
#include "io/json_text.h"
#include "player/internal.h"
#include "player/page_data.h"
#include "player/stage_table.h"

namespace attnflow::player {
namespace {

using internal::Arr;
using internal::Bad;
using internal::CeilDiv;
using internal::Get;
using internal::json;
using internal::StageArrays;
using json_text::DecodeBase64;

Status IntArray(const json& j, const std::string& label, const std::string& field,
                std::vector<int64_t>* out) {
  if (!j.is_array()) return Bad(label, field + " must be an array of integers");
  out->clear();
  for (const auto& e : j) {
    if (!e.is_number_integer()) return Bad(label, field + " must be an array of integers");
    out->push_back(e.get<int64_t>());
  }
  return Status::Ok();
}

// One stage entry named `name`: a stage of the stage table with its layout's
// axes, consistent shapes, and "data" or a compact entry (decoded later).
Status ParseStage(const json& j, const std::string& label, const std::string& field,
                  const std::string& name, Arr* a) {
  if (!j.is_object()) return Bad(label, field + " must be an object");
  for (const char* k : {"axes", "shape", "pool", "data_shape"}) {
    if (!j.contains(k)) return Bad(label, field + " has no '" + k + "'");
  }
  if (!j["axes"].is_array()) return Bad(label, field + ".axes must be an array of strings");
  for (const auto& e : j["axes"]) {
    if (!e.is_string()) return Bad(label, field + ".axes must be an array of strings");
    a->axes.push_back(e.get<std::string>());
  }
  const StageDecl* decl = StageTable().Find(name);
  if (decl == nullptr) {
    return Bad(label, field + ": '" + name + "' is not a stage of the page's stage table");
  }
  const LayoutDecl& lay = StageTable().Of(decl->layout);
  if (a->axes != lay.axes) {
    std::string want = "[";
    for (size_t i = 0; i < lay.axes.size(); ++i) {
      if (i) want += ",";
      json_text::AppendJsonString(&want, lay.axes[i]);
    }
    return Bad(label, field + ".axes must be " + want + "] (layout " + lay.name +
                          " of the stage table)");
  }
  ATTNFLOW_RETURN_IF_ERROR(IntArray(j["shape"], label, field + ".shape", &a->shape));
  ATTNFLOW_RETURN_IF_ERROR(IntArray(j["pool"], label, field + ".pool", &a->pool));
  ATTNFLOW_RETURN_IF_ERROR(IntArray(j["data_shape"], label, field + ".data_shape", &a->ds));
  const size_t r = a->axes.size();
  if (r < 2 || r > 3 || a->shape.size() != r || a->pool.size() != r || a->ds.size() != r) {
    return Bad(label, field + ": axes, shape, pool and data_shape must have the same length 2 or 3");
  }
  int64_t n = 1;
  for (size_t i = 0; i < r; ++i) {
    if (a->shape[i] < 0 || a->pool[i] < 1 || a->shape[i] > (int64_t{1} << 31)) {
      return Bad(label, field + ": shape/pool value out of range");
    }
    if (a->ds[i] != CeilDiv(a->shape[i], a->pool[i])) {
      return Bad(label, field + ".data_shape[" + std::to_string(i) + "] = " +
                            std::to_string(a->ds[i]) + " should be ceil(shape/pool) = " +
                            std::to_string(CeilDiv(a->shape[i], a->pool[i])));
    }
    n *= std::max<int64_t>(a->ds[i], 1);
    if (n > (int64_t{1} << 32)) return Bad(label, field + ": too many elements");
  }
  if (r == 2) {  // normalise to 3 axes: [1, d0, d1]
    a->shape.insert(a->shape.begin(), 1);
    a->pool.insert(a->pool.begin(), 1);
    a->ds.insert(a->ds.begin(), 1);
  }
  n = a->ds[0] * a->ds[1] * a->ds[2];
  if (!j.contains("data") && j.contains("segs")) {  // compact: decoded in DecodeCompact
    a->compact = true;
    if (!j.contains("b64") || !j["b64"].is_string() || !j["segs"].is_array() ||
        !j.contains("enc") || !j["enc"].is_string() ||
        (j["enc"] != "f32" && j["enc"] != "f64")) {
      return Bad(label, field + ": a compact entry needs enc (\"f32\" or \"f64\"), segs and b64");
    }
    a->f32 = j["enc"] == "f32";
    a->segs = j["segs"];
    a->b64 = j["b64"].get<std::string>();
    if (j.contains("base")) {
      const json& b = j["base"];
      if (!b.is_object() || !b.contains("op") || !b["op"].is_string() || !b.contains("of") ||
          !b["of"].is_array() || b["of"].empty()) {
        return Bad(label, field + ".base must be {\"op\": string, \"of\": [stage, ...]}");
      }
      a->op = b["op"].get<std::string>();
      for (const auto& e : b["of"]) {
        if (!e.is_string()) return Bad(label, field + ".base.of must list stage names");
        a->of.push_back(e.get<std::string>());
      }
    }
    a->data.resize(static_cast<size_t>(n));
    return Status::Ok();
  }
  if (!j.contains("data")) return Bad(label, field + " has no 'data'");
  const json& d = j["data"];
  if (!d.is_array() || static_cast<int64_t>(d.size()) != n) {
    return Bad(label, field + ".data has " + (d.is_array() ? std::to_string(d.size()) : "no") +
                          " values, expected " + std::to_string(n) + " (data_shape)");
  }
  a->data.resize(static_cast<size_t>(n));
  for (size_t i = 0; i < d.size(); ++i) {
    const json& e = d[i];
    double v;
    if (e.is_number()) v = e.get<double>();
    else if (e.is_string() && e.get<std::string>() == "-Infinity") v = -INFINITY;
    else if (e.is_string() && e.get<std::string>() == "Infinity") v = INFINITY;
    else if (e.is_string() && e.get<std::string>() == "NaN") v = NAN;
    else {
      return Bad(label, field + ".data[" + std::to_string(i) +
                            "] is not a number (or \"Infinity\", \"-Infinity\", \"NaN\")");
    }
    a->data[i] = v;
  }
  return Status::Ok();
}

// Decodes one compact stage (its bases first); `busy` catches cycles.
Status DecodeCompact(const std::string& name, StageArrays* st,
                     const std::string& label, const std::string& field, double scale,
                     const std::vector<int64_t>& heads, int64_t num_heads,
                     std::set<std::string>* busy) {
  Arr& a = st->at(name);
  if (!a.compact) return Status::Ok();
  const std::string f = field + "." + name;
  if (!busy->insert(name).second) return Bad(label, f + ".base: a cycle of derived stages");
  std::vector<const Arr*> base;
  for (const auto& b : a.of) {
    if (st->count(b) == 0) return Bad(label, f + ".base names the missing stage '" + b + "'");
    ATTNFLOW_RETURN_IF_ERROR(DecodeCompact(b, st, label, field, scale, heads, num_heads, busy));
    base.push_back(&st->at(b));
  }
  const size_t n = a.data.size();
  const bool f32 = a.f32;
  auto shown = [f32](double v) { return f32 ? static_cast<double>(static_cast<float>(v)) : v; };
  const bool elementwise = a.op == "scale" || a.op == "copy" || a.op == "add";
  if (!a.op.empty()) {
    const size_t want = a.op == "add" ? 2 : 1;
    if (!(elementwise || a.op == "heads") || a.of.size() != want) {
      return Bad(label, f + ".base: unknown op '" + a.op + "' or wrong number of stages");
    }
    for (const Arr* b : base)
      if (elementwise && b->data.size() != n) return Bad(label, f + ".base: shapes differ");
    if (a.op == "heads") {
      const Arr& h = *base[0];
      bool ok = static_cast<int64_t>(heads.size()) == num_heads && h.ds[0] == num_heads &&
                a.ds[0] == 1 && a.ds[1] == h.ds[1] && a.ds[2] == h.ds[0] * h.ds[2];
      for (size_t i = 0; ok && i < heads.size(); ++i) ok = heads[i] == static_cast<int64_t>(i);
      if (!ok) return Bad(label, f + ".base: 'heads' needs every head and matching shapes");
    }
  }
  auto derived = [&](size_t i) -> double {
    if (a.op == "scale") return shown(base[0]->data[i] * scale);
    if (a.op == "copy") return base[0]->data[i];
    if (a.op == "add") return shown(base[0]->data[i] + base[1]->data[i]);
    const Arr& h = *base[0];  // heads
    const int64_t T = h.ds[1], Dh = h.ds[2], E = a.ds[2];
    const int64_t t = static_cast<int64_t>(i) / E, c = static_cast<int64_t>(i) % E;
    return h.data[static_cast<size_t>(((c / Dh) * T + t) * Dh + c % Dh)];
  };
  std::string raw;
  if (!DecodeBase64(a.b64, &raw)) return Bad(label, f + ".b64 is not valid base64");
  const size_t w = f32 ? 4 : 8;
  size_t at = 0, next = 0;  // cell, explicit value
  if (!a.segs.is_array() || a.segs.size() % 2 != 0) {
    return Bad(label, f + ".segs must be [count, kind] pairs");
  }
  for (size_t s = 0; s < a.segs.size(); s += 2) {
    const json& cnt = a.segs[s];
    const json& kind = a.segs[s + 1];
    if (!cnt.is_number_integer() || cnt.get<int64_t>() < 1 ||
        cnt.get<uint64_t>() > n - at) {
      return Bad(label, f + ".segs[" + std::to_string(s) + "]: count out of range");
    }
    const size_t c = cnt.get<size_t>();
    if (kind == "x") {
      if ((next + c) * w > raw.size()) return Bad(label, f + ".b64 holds too few values");
      for (size_t k = 0; k < c; ++k, ++next) {
        const auto* p = reinterpret_cast<const unsigned char*>(raw.data() + next * w);
        uint64_t u = 0;
        for (size_t q = 0; q < w; ++q) u |= uint64_t{p[q]} << (8 * q);
        if (f32) {
          const uint32_t u32 = static_cast<uint32_t>(u);
          float v;
          std::memcpy(&v, &u32, 4);
          a.data[at + k] = v;
        } else {
          double v;
          std::memcpy(&v, &u, 8);
          a.data[at + k] = v;
        }
      }
    } else if (kind == "d") {
      if (a.op.empty()) return Bad(label, f + ".segs uses \"d\" but the entry has no base");
      for (size_t k = 0; k < c; ++k) a.data[at + k] = derived(at + k);
    } else {
      double v;
      if (kind.is_number()) v = shown(kind.get<double>());
      else if (kind == "-Infinity") v = -INFINITY;
      else if (kind == "Infinity") v = INFINITY;
      else return Bad(label, f + ".segs[" + std::to_string(s + 1) + "] is not a kind");
      for (size_t k = 0; k < c; ++k) a.data[at + k] = v;
    }
    at += c;
  }
  if (at != n) {
    return Bad(label, f + ".segs cover " + std::to_string(at) + " cells, expected " +
                          std::to_string(n));
  }
  if (next * w != raw.size()) return Bad(label, f + ".b64 holds more values than segs use");
  a.compact = false;
  busy->erase(name);
  return Status::Ok();
}

Status ParseStages(const json& j, const std::string& label, const std::string& field,
                   double scale, const std::vector<int64_t>& heads, int64_t num_heads,
                   StageArrays* out) {
  if (!j.is_object()) return Bad(label, field + " must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    Arr a;
    ATTNFLOW_RETURN_IF_ERROR(ParseStage(it.value(), label, field + "." + it.key(), it.key(), &a));
    out->emplace(it.key(), std::move(a));
  }
  std::set<std::string> busy;
  for (auto& [name, a] : *out)
    ATTNFLOW_RETURN_IF_ERROR(DecodeCompact(name, out, label, field, scale, heads, num_heads, &busy));
  return Status::Ok();
}

}  // namespace

bool TraceSummary::all_pass() const {
  for (const auto& c : checks)
    if (c.state == CheckState::kFail) return false;
  return true;
}

Result<TraceSummary> ReadTraceJson(std::string_view text, const std::string& label) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return Bad(label, "not valid JSON at byte " + std::to_string(e.byte) +
                          " of " + std::to_string(text.size()) +
                          " (truncated or corrupted file?): " + e.what());
  } catch (const std::exception& e) {
    return Bad(label, std::string("cannot parse JSON: ") + e.what());
  }
  try {
    if (!j.is_object()) return Bad(label, "the top level is not a JSON object");
    if (!j.contains("format") || !j["format"].is_string()) {
      return Bad(label, "no 'format' field: not an attnflow trace");
    }
    if (j["format"].get<std::string>() != kTraceFormatV1) {
      return Bad(label, "format '" + j["format"].get<std::string>() + "' is not " +
                            kTraceFormatV1);
    }
    for (const char* k : {"model", "tokens", "stages", "heads", "causal", "scale", "seq_len"}) {
      if (!j.contains(k)) return Bad(label, std::string("missing field '") + k + "'");
    }
    TraceSummary s;
    s.source = j.value("source", "");
    const json& model = j["model"];
    if (!model.is_object() || !model.contains("num_heads") ||
        !model["num_heads"].is_number_integer()) {
      return Bad(label, "model.num_heads is missing or not an integer");
    }
    s.model = model.value("name", "");
    const int64_t H = model["num_heads"].get<int64_t>();
    const json& toks = j["tokens"];
    if (!toks.is_array()) return Bad(label, "tokens must be an array");
    for (size_t i = 0; i < toks.size(); ++i) {
      if (!toks[i].is_object() || !toks[i].contains("id") || !toks[i]["id"].is_number_integer() ||
          !toks[i].contains("text") || !toks[i]["text"].is_string()) {
        return Bad(label, "tokens[" + std::to_string(i) + "] must be {\"id\": int, \"text\": string}");
      }
    }
    s.num_tokens = static_cast<int64_t>(toks.size());
    if (!j["seq_len"].is_number_integer() || j["seq_len"].get<int64_t>() != s.num_tokens) {
      return Bad(label, "seq_len does not match the " + std::to_string(s.num_tokens) + " tokens");
    }
    std::vector<int64_t> heads;
    ATTNFLOW_RETURN_IF_ERROR(IntArray(j["heads"], label, "heads", &heads));
    std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(H, 0)), false);
    for (int64_t h : heads) {
      if (h < 0 || h >= H) return Bad(label, "heads lists " + std::to_string(h) + ", outside [0, num_heads)");
      if (seen[static_cast<size_t>(h)]) {
        return Bad(label, "heads lists head " + std::to_string(h) + " twice");
      }
      seen[static_cast<size_t>(h)] = true;
    }
    s.num_heads_shown = static_cast<int64_t>(heads.size());
    if (!j["scale"].is_number()) return Bad(label, "scale must be a number");
    const double scale = j["scale"].get<double>();
    Causal causal;
    if (!j["causal"].is_string() || !ParseCausal(j["causal"].get<std::string>(), &causal)) {
      return Bad(label, "causal must be none, top_left or bottom_right");
    }
    if (j.contains("view") && j["view"].is_object()) {
      const json& v = j["view"];
      if (v.contains("pool")) {
        if (!v["pool"].is_number_integer() || v["pool"].get<int64_t>() < 1) {
          return Bad(label, "view.pool must be an integer >= 1, got " + v["pool"].dump());
        }
        s.pool = v["pool"].get<int64_t>();
      }
      if (v.contains("note")) {
        if (!v["note"].is_string()) return Bad(label, "view.note must be a string");
        s.note = v["note"].get<std::string>();
      }
    }
    internal::ParsedPage page;
    StageArrays& st = page.stages;
    ATTNFLOW_RETURN_IF_ERROR(ParseStages(j["stages"], label, "stages", scale, heads, H, &st));
    const Arr* w = Get(st, stage::kWeights);
    const bool has_views = j.contains("views");
    if (w == nullptr && !has_views) return Bad(label, "stages has no 'weights': nothing to play");
    if (w != nullptr && (w->shape[0] != s.num_heads_shown || w->shape[1] != s.num_tokens)) {
      return Bad(label, "stages.weights shape does not match heads × tokens");
    }
    for (const auto& [name, a] : st) {
      if (a.axes.size() == 3 && (a.axes[0] == "head") && a.shape[0] != s.num_heads_shown) {
        return Bad(label, "stages." + name + " has " + std::to_string(a.shape[0]) +
                              " heads, 'heads' lists " + std::to_string(s.num_heads_shown));
      }
    }
    // Decode steps.
    std::vector<StageArrays>& dec = page.decode;
    std::vector<int64_t>& kv_lens = page.kv_lens;
    std::vector<int64_t>& positions = page.positions;
    if (j.contains("decode")) {
      if (!j["decode"].is_array()) return Bad(label, "decode must be an array");
      for (size_t i = 0; i < j["decode"].size(); ++i) {
        const json& d = j["decode"][i];
        const std::string f = "decode[" + std::to_string(i) + "]";
        if (!d.is_object() || !d.contains("stages") || !d.contains("kv_len") ||
            !d["kv_len"].is_number_integer() || !d.contains("position") ||
            !d["position"].is_number_integer()) {
          return Bad(label, f + " must have stages, position and kv_len");
        }
        dec.emplace_back();
        ATTNFLOW_RETURN_IF_ERROR(ParseStages(d["stages"], label, f + ".stages", scale, heads, H, &dec.back()));
        kv_lens.push_back(d["kv_len"].get<int64_t>());
        positions.push_back(d["position"].get<int64_t>());
      }
    }
    s.decode_steps = static_cast<int64_t>(dec.size());
    if (j.contains("banner") && !j["banner"].is_string()) return Bad(label, "banner must be a string");
    // Key padding: "padding": {"keys": [increasing ints in [0, seq_len)], ...}.
    std::vector<int64_t>& pad_keys = page.pad_keys;
    if (j.contains("padding")) {
      const json& p = j["padding"];
      if (!p.is_object() || !p.contains("keys")) return Bad(label, "padding must be an object with 'keys'");
      ATTNFLOW_RETURN_IF_ERROR(IntArray(p["keys"], label, "padding.keys", &pad_keys));
      for (size_t i = 0; i < pad_keys.size(); ++i) {
        if (pad_keys[i] < 0 || pad_keys[i] >= s.num_tokens ||
            (i > 0 && pad_keys[i] <= pad_keys[i - 1])) {
          return Bad(label, "padding.keys[" + std::to_string(i) + "] = " +
                                std::to_string(pad_keys[i]) +
                                " is not increasing inside [0, seq_len = " +
                                std::to_string(s.num_tokens) + ")");
        }
      }
    }
    // A padded batch: "batch": {"index", "sentences", optional "pages" (one
    // page per sentence, each read and checked like this one; null at
    // "index": this page itself, read again without its "pages")}.
    TraceCheck batch_check{"every sentence of the batch passes its checks", CheckState::kSkip, ""};
    if (j.contains("batch")) {
      const json& b = j["batch"];
      if (!b.is_object() || !b.contains("index") || !b["index"].is_number_integer() ||
          !b.contains("sentences") || !b["sentences"].is_array()) {
        return Bad(label, "batch must be an object with an integer 'index' and 'sentences'");
      }
      const int64_t nb = static_cast<int64_t>(b["sentences"].size());
      for (const json& x : b["sentences"])
        if (!x.is_string()) return Bad(label, "batch.sentences must hold strings");
      if (b["index"].get<int64_t>() < 0 || b["index"].get<int64_t>() >= nb) {
        return Bad(label, "batch.index " + b["index"].dump() + " is outside [0, " +
                              std::to_string(nb) + ")");
      }
      if (b.contains("pages")) {
        const json& pages = b["pages"];
        if (!pages.is_array() || static_cast<int64_t>(pages.size()) != nb) {
          return Bad(label, "batch.pages must hold one page per sentence (" + std::to_string(nb) + ")");
        }
        batch_check.state = CheckState::kPass;
        batch_check.detail = std::to_string(nb) + " sentences";
        for (int64_t i = 0; i < nb; ++i) {
          const std::string f = label + " batch.pages[" + std::to_string(i) + "]";
          json own;  // this page as its own sentence's page
          if (pages[static_cast<size_t>(i)].is_null() && b["index"] == json(i)) {
            own = j;
            own["batch"].erase("pages");
          }
          const json& pg = own.is_null() ? pages[static_cast<size_t>(i)] : own;
          if (!pg.is_object() || !pg.contains("batch") || !pg["batch"].is_object() ||
              pg["batch"].contains("pages") || !pg["batch"].contains("index") ||
              pg["batch"]["index"] != json(i)) {
            return Bad(f, "must be a page of sentence " + std::to_string(i) + " without nested pages");
          }
          Result<TraceSummary> sub = ReadTraceJson(pg.dump(), f);
          if (!sub.ok()) return sub.status();
          if (!sub->all_pass() && batch_check.state == CheckState::kPass) {
            batch_check.state = CheckState::kFail;
            for (const auto& c : sub->checks)
              if (c.state == CheckState::kFail) {
                batch_check.detail = "sentence " + std::to_string(i) + ": " + c.name + ": " + c.detail;
                break;
              }
          }
        }
      }
    }
    std::vector<TraceCheck> view_checks;
    if (has_views) ATTNFLOW_RETURN_IF_ERROR(internal::ParseViews(j["views"], label, &s.views, &view_checks));
    if (w == nullptr) {  // a views-only page (e.g. the Bahdanau loop)
      s.checks = std::move(view_checks);
      return s;
    }

    page.heads = heads;
    page.causal = causal;
    page.scale = scale;
    s.checks = internal::PipelineChecks(page);
    if (batch_check.state != CheckState::kSkip) s.checks.push_back(batch_check);
    for (auto& c : view_checks) s.checks.push_back(std::move(c));
    return s;
  } catch (const std::exception& e) {  // type errors in unexpected places
    return Bad(label, std::string("malformed trace: ") + e.what());
  }
}

Result<TraceSummary> ReadTraceJsonFile(const std::string& path) {
  Result<std::string> text = ReadFileString(path);
  if (!text.ok()) return text.status();
  return ReadTraceJson(text.value(), path);
}

}  // namespace attnflow::player