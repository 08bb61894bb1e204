// page_checks.cc — the numeric checks of a page JSON (the same names and
// tolerances as runChecks / checkViews in web/player.html, whose check panel
// runs them in the browser): rows of the weights sum to one, masked and
// future weights are zero, scaled = scores × scale, weights = exp(masked -
// lse), concat holds the heads side by side, the decode cache grows by one
// key per step, pad keys get weight zero; for the views: rows sum to one and
// causal views read no future key.
//
// Invariant: a check that cannot run on what the page holds (a stage missing
// or pooled) is "skip" with the reason, never "pass".
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "io/json_text.h"
#include "player/internal.h"
#include "player/page_data.h"
#include "player/stage_table.h"

namespace attnflow::player::internal {
namespace {

std::string Fmt(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

constexpr double kSumTol = 1e-5;

// A weight that must be 0 (query `query` of head #h on a `kind` key: future,
// pad): when it is not, fails `c` naming the cell and returns true.
bool FailIfReads(TraceCheck* c, const char* kind, int64_t h, int64_t query, int64_t key,
                 double weight) {
  if (weight == 0.0) return false;
  c->state = CheckState::kFail;
  c->detail = "head #" + std::to_string(h) + " query " + std::to_string(query) + " reads " +
              kind + " key " + std::to_string(key) + " with weight " + Fmt(weight);
  return true;
}

TraceCheck RowSums(const std::string& name, const Arr* w, const Arr* m) {
  TraceCheck c{name, CheckState::kSkip, "no weights"};
  if (w == nullptr) return c;
  int64_t rows = 0, dead = 0;
  for (int64_t h = 0; h < w->ds[0]; ++h)
    for (int64_t i = 0; i < w->ds[1]; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < w->ds[2]; ++j) sum += w->at(h, i, j);
      bool is_dead = false;
      if (m != nullptr && m->ds == w->ds) {
        is_dead = true;
        for (int64_t j = 0; j < m->ds[2]; ++j)
          if (m->at(h, i, j) != -INFINITY) is_dead = false;
      } else {
        is_dead = sum == 0.0;
      }
      const double want = is_dead ? 0.0 : 1.0;
      ++rows;
      dead += is_dead;
      if (!(std::fabs(sum - want) <= kSumTol)) {
        c.state = CheckState::kFail;
        c.detail = "head #" + std::to_string(h) + " row " + std::to_string(i) + " sums to " +
                   Fmt(sum) + ", expected " + (is_dead ? "0 (fully masked row)" : "1");
        return c;
      }
    }
  c.state = CheckState::kPass;
  c.detail = std::to_string(rows) + " rows" +
             (dead ? " (" + std::to_string(dead) + " fully masked, sum 0)" : "");
  return c;
}

}  // namespace

std::vector<TraceCheck> PipelineChecks(const ParsedPage& p) {
  std::vector<TraceCheck> out;
  const StageArrays& st = p.stages;
  const std::vector<StageArrays>& dec = p.decode;
  const std::vector<int64_t>& heads = p.heads;
  const std::vector<int64_t>& pad_keys = p.pad_keys;
  const std::vector<int64_t>& kv_lens = p.kv_lens;
  const std::vector<int64_t>& positions = p.positions;
  const Causal causal = p.causal;
  const double scale = p.scale;
  const Arr* w = Get(st, stage::kWeights);
  if (w == nullptr) return out;
  const Arr* m = Get(st, stage::kMasked);
  const Arr* sc = Get(st, stage::kScores);
  const Arr* sd = Get(st, stage::kScaled);
  const Arr* lse = Get(st, stage::kLse);
  out.push_back(RowSums("weights rows sum to 1 (0 for a fully masked row)", w, m));
  {
    TraceCheck c{"weights are in [0, 1]", CheckState::kPass, ""};
    for (size_t i = 0; i < w->data.size(); ++i) {
      const double x = w->data[i];
      if (!(x >= 0.0 && x <= 1.0 + kSumTol)) {
        c.state = CheckState::kFail;
        c.detail = "element " + std::to_string(i) + " is " + Fmt(x);
        break;
      }
    }
    out.push_back(c);
  }
  {
    TraceCheck c{"masked (-inf) cells have weight exactly 0", CheckState::kSkip, "no masked stage"};
    if (m != nullptr && m->ds == w->ds) {
      c.state = CheckState::kPass;
      int64_t n = 0;
      for (size_t i = 0; i < m->data.size(); ++i) {
        if (m->data[i] == -INFINITY) {
          ++n;
          if (w->data[i] != 0.0) {
            c.state = CheckState::kFail;
            c.detail = "masked element " + std::to_string(i) + " has weight " + Fmt(w->data[i]);
            break;
          }
        }
      }
      if (c.state == CheckState::kPass) c.detail = std::to_string(n) + " masked cells";
    }
    out.push_back(c);
  }
  {
    TraceCheck c{"future weights are zero (causal)", CheckState::kSkip, "not causal"};
    if (causal != Causal::kNone) {
      c.state = CheckState::kPass;
      const int64_t lq = w->shape[1], lk = w->shape[2], pq = w->pool[1], pk = w->pool[2];
      int64_t n = 0;
      for (int64_t h = 0; h < w->ds[0] && c.state == CheckState::kPass; ++h)
        for (int64_t bi = 0; bi < w->ds[1] && c.state == CheckState::kPass; ++bi) {
          const int64_t imax = std::min(lq - 1, bi * pq + pq - 1);
          const int64_t last = CausalLastKey(causal, imax, lq, lk);
          for (int64_t bj = 0; bj < w->ds[2]; ++bj) {
            if (bj * pk <= last) continue;
            ++n;
            if (FailIfReads(&c, "future", h, bi, bj, w->at(h, bi, bj))) break;
          }
        }
      if (c.state == CheckState::kPass) c.detail = std::to_string(n) + " future cells are 0";
    }
    out.push_back(c);
  }
  {
    TraceCheck c{"scaled = scores × scale", CheckState::kSkip, "scores or scaled missing"};
    if (sc != nullptr && sd != nullptr && sc->ds == sd->ds) {
      c.state = CheckState::kPass;
      c.detail = "scale " + Fmt(scale);
      for (size_t i = 0; i < sc->data.size(); ++i) {
        const double want = sc->data[i] * scale;
        if (!(std::fabs(sd->data[i] - want) <= 1e-6 + 1e-5 * std::fabs(want))) {
          c.state = CheckState::kFail;
          c.detail = "element " + std::to_string(i) + ": scaled " + Fmt(sd->data[i]) +
                     " but scores × scale = " + Fmt(want);
          break;
        }
      }
    }
    out.push_back(c);
  }
  {
    TraceCheck c{"weights = exp(masked - lse) (softmax)", CheckState::kSkip,
                 "needs masked and lse at full resolution"};
    if (m != nullptr && lse != nullptr && m->ds == w->ds && w->pool[1] == 1 &&
        w->pool[2] == 1 && lse->ds[1] == w->ds[0] && lse->ds[2] == w->ds[1]) {
      c.state = CheckState::kPass;
      double worst = 0;
      for (int64_t h = 0; h < w->ds[0] && c.state == CheckState::kPass; ++h)
        for (int64_t i = 0; i < w->ds[1] && c.state == CheckState::kPass; ++i) {
          const double l = lse->at(0, h, i);
          for (int64_t jj = 0; jj < w->ds[2]; ++jj) {
            const double mm = m->at(h, i, jj);
            const double want = (std::isfinite(l) && std::isfinite(mm)) ? std::exp(mm - l) : 0.0;
            const double diff = std::fabs(w->at(h, i, jj) - want);
            worst = std::max(worst, diff);
            if (!(diff <= 1e-6)) {
              c.state = CheckState::kFail;
              c.detail = "head #" + std::to_string(h) + " row " + std::to_string(i) + " key " +
                         std::to_string(jj) + ": weight " + Fmt(w->at(h, i, jj)) +
                         " but exp(masked - lse) = " + Fmt(want);
              break;
            }
          }
        }
      if (c.state == CheckState::kPass) c.detail = "max |diff| " + Fmt(worst);
    }
    out.push_back(c);
  }
  {
    TraceCheck c{"concat = heads side by side", CheckState::kSkip,
                 "needs heads_out and concat at full resolution"};
    const Arr* ho = Get(st, stage::kHeadsOut);
    const Arr* cc = Get(st, stage::kConcat);
    if (ho != nullptr && cc != nullptr && ho->pool[1] == 1 && cc->pool[1] == 1 &&
        cc->ds[1] == ho->ds[1] && static_cast<int64_t>(heads.size()) == ho->ds[0]) {
      c.state = CheckState::kPass;
      const int64_t dh = ho->ds[2];
      for (int64_t hi = 0; hi < ho->ds[0] && c.state == CheckState::kPass; ++hi)
        for (int64_t t = 0; t < ho->ds[1] && c.state == CheckState::kPass; ++t) {
          // A pad token's row is ignored by the model (a batch gathers only
          // real rows), so its concat row need not hold its heads_out.
          if (std::binary_search(pad_keys.begin(), pad_keys.end(), t)) continue;
          for (int64_t d = 0; d < dh; ++d) {
            const int64_t col = heads[static_cast<size_t>(hi)] * dh + d;
            if (col >= cc->ds[2]) {
              c.state = CheckState::kFail;
              c.detail = "concat is narrower than heads × head_dim";
              break;
            }
            const double a = ho->at(hi, t, d), b = cc->at(0, t, col);
            if (!(std::fabs(a - b) <= 1e-6 * (1 + std::fabs(a)))) {
              c.state = CheckState::kFail;
              c.detail = "token " + std::to_string(t) + " head " +
                         std::to_string(heads[static_cast<size_t>(hi)]) + " dim " +
                         std::to_string(d) + ": heads_out " + Fmt(a) + " vs concat " + Fmt(b);
              break;
            }
          }
        }
      if (c.state == CheckState::kPass)
        c.detail = pad_keys.empty() ? "exact"
                                    : "exact (" + std::to_string(pad_keys.size()) +
                                          " pad rows skipped: a pad token's output is never used)";
    }
    out.push_back(c);
  }
  {
    TraceCheck c{"decode rows sum to 1", CheckState::kSkip, "no decode steps"};
    for (size_t i = 0; i < dec.size(); ++i) {
      const Arr* dw = Get(dec[i], stage::kWeights);
      TraceCheck r = RowSums(c.name, dw, Get(dec[i], stage::kMasked));
      if (r.state == CheckState::kFail) {
        c.state = CheckState::kFail;
        c.detail = "step " + std::to_string(i) + ": " + r.detail;
        break;
      }
      if (r.state == CheckState::kPass) {
        c.state = CheckState::kPass;
        c.detail = std::to_string(dec.size()) + " steps";
      }
    }
    out.push_back(c);
  }
  {
    TraceCheck c{"the cache grows by one key per decode step", CheckState::kSkip,
                 "no decode steps"};
    if (!dec.empty()) {
      c.state = CheckState::kPass;
      c.detail = "kv_len " + std::to_string(kv_lens.front()) + " .. " +
                 std::to_string(kv_lens.back());
      for (size_t i = 0; i < dec.size(); ++i) {
        const Arr* dw = Get(dec[i], stage::kWeights);
        const bool grows = kv_lens[i] == kv_lens[0] + static_cast<int64_t>(i) &&
                           positions[i] == kv_lens[i] - 1;
        if (!grows || dw == nullptr || dw->shape[2] != kv_lens[i] || dw->shape[1] != 1) {
          c.state = CheckState::kFail;
          c.detail = "step " + std::to_string(i) + ": kv_len " + std::to_string(kv_lens[i]) +
                     ", position " + std::to_string(positions[i]) +
                     (dw ? ", weights row of " + std::to_string(dw->shape[2]) + " keys" : "");
          break;
        }
      }
    }
    out.push_back(c);
  }
  if (!pad_keys.empty()) {
    // Mirrors runChecks in web/player.html.
    TraceCheck c{"padding keys have weight exactly 0", CheckState::kSkip,
                 "needs weights at full resolution"};
    if (w->pool[1] == 1 && w->pool[2] == 1) {
      c.state = CheckState::kPass;
      c.detail = std::to_string(pad_keys.size()) + (pad_keys.size() > 1 ? " pad keys × " : " pad key × ") +
                 std::to_string(w->ds[1]) + " queries";
      for (int64_t h = 0; h < w->ds[0] && c.state == CheckState::kPass; ++h)
        for (int64_t i = 0; i < w->ds[1] && c.state == CheckState::kPass; ++i)
          for (int64_t pk : pad_keys) {
            if (FailIfReads(&c, "pad", h, i, pk, w->at(h, i, pk))) break;
          }
    }
    out.push_back(c);
  }
  return out;
}

// Validates the "views" array (see AppendViews) and runs its checks: rows of
// every layer and head sum to 1; for a causal view, cells after the diagonal
// are 0. Mirrors checkViews in web/player.html.
Status ParseViews(const json& j, const std::string& label, std::vector<TraceSummary::View>* out,
                  std::vector<TraceCheck>* checks) {
  if (!j.is_array()) return Bad(label, "views must be an array");
  std::set<std::string> ids;
  for (size_t vi = 0; vi < j.size(); ++vi) {
    const json& v = j[vi];
    const std::string f = "views[" + std::to_string(vi) + "]";
    if (!v.is_object()) return Bad(label, f + " must be an object");
    for (const char* k : {"id", "kind", "title", "caption", "causal", "b64"}) {
      if (!v.contains(k) || !v[k].is_string()) return Bad(label, f + "." + k + " must be a string");
    }
    for (const char* k : {"layers", "heads", "rows", "cols", "pool", "data_rows", "data_cols"}) {
      if (!v.contains(k) || !v[k].is_number_integer() || v[k].get<int64_t>() < 1 ||
          v[k].get<int64_t>() > (int64_t{1} << 20)) {
        return Bad(label, f + "." + k + " must be an integer in [1, 2^20]");
      }
    }
    TraceSummary::View r;
    r.id = v["id"].get<std::string>();
    r.kind = v["kind"].get<std::string>();
    if (!ids.insert(r.id).second) return Bad(label, f + ".id '" + r.id + "' is used twice");
    if (r.kind != "matrix" && r.kind != "grid" && r.kind != "steps") {
      return Bad(label, f + ".kind must be matrix, grid or steps, got '" + r.kind + "'");
    }
    Causal causal;
    if (!ParseCausal(v["causal"].get<std::string>(), &causal)) {
      return Bad(label, f + ".causal must be none, top_left or bottom_right");
    }
    r.num_layers = v["layers"].get<int64_t>();
    r.num_heads = v["heads"].get<int64_t>();
    r.rows = v["rows"].get<int64_t>();
    r.cols = v["cols"].get<int64_t>();
    r.pool = v["pool"].get<int64_t>();
    r.data_rows = v["data_rows"].get<int64_t>();
    r.data_cols = v["data_cols"].get<int64_t>();
    if (r.data_rows != CeilDiv(r.rows, r.pool) || r.data_cols != CeilDiv(r.cols, r.pool)) {
      return Bad(label, f + ": data_rows/data_cols must be ceil(rows/pool), ceil(cols/pool)");
    }
    for (const char* k : {"row_labels", "col_labels"}) {
      const int64_t want = k[0] == 'r' ? r.data_rows : r.data_cols;
      if (!v.contains(k) || !v[k].is_array() || static_cast<int64_t>(v[k].size()) != want) {
        return Bad(label, f + "." + k + " must list " + std::to_string(want) + " labels");
      }
      for (const auto& e : v[k])
        if (!e.is_string()) return Bad(label, f + "." + k + " must list strings");
    }
    if (v.contains("layer_labels")) {
      const json& ll = v["layer_labels"];
      if (!ll.is_array() || (!ll.empty() && static_cast<int64_t>(ll.size()) != r.num_layers)) {
        return Bad(label, f + ".layer_labels must be empty or list one label per layer");
      }
    }
    if (v.contains("head_ids")) {  // a view filtered by --heads: the model's head numbers
      const json& hi = v["head_ids"];
      bool ok = hi.is_array() && static_cast<int64_t>(hi.size()) == r.num_heads;
      for (size_t i = 0; ok && i < hi.size(); ++i) {
        ok = hi[i].is_number_integer() && hi[i].get<int64_t>() >= 0 &&
             hi[i].get<int64_t>() < (int64_t{1} << 20) &&
             (i == 0 || hi[i].get<int64_t>() > hi[i - 1].get<int64_t>());
      }
      if (!ok) {
        return Bad(label, f + ".head_ids must list " + std::to_string(r.num_heads) +
                              " increasing head numbers");
      }
    }
    // Each factor is <= 2^20: multiply step by step so nothing overflows.
    int64_t n = 1;
    for (int64_t d : {r.num_layers, r.num_heads, r.data_rows, r.data_cols}) {
      n *= d;
      if (n > (int64_t{1} << 28)) return Bad(label, f + ": too many values (layers × heads × rows × cols > 2^28)");
    }
    std::string bytes;
    if (!json_text::DecodeBase64(v["b64"].get<std::string>(), &bytes)) return Bad(label, f + ".b64 is not valid base64");
    if (static_cast<int64_t>(bytes.size()) != n * 4) {
      return Bad(label, f + ".b64 holds " + std::to_string(bytes.size() / 4) + " float32 values, expected " +
                            std::to_string(n) + " (layers × heads × data_rows × data_cols)");
    }
    r.data.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      float x;
      std::memcpy(&x, bytes.data() + i * 4, 4);
      r.data[static_cast<size_t>(i)] = x;
    }
    if (r.kind == "grid") {
      const json* g = v.contains("grid") ? &v["grid"] : nullptr;
      if (g == nullptr || !g->is_object() || !g->contains("h") || !g->contains("w") ||
          !g->contains("first_col") || !(*g)["h"].is_number_integer() ||
          !(*g)["w"].is_number_integer() || !(*g)["first_col"].is_number_integer()) {
        return Bad(label, f + ".grid must be {h, w, first_col, image}");
      }
      const int64_t gh = (*g)["h"].get<int64_t>(), gw = (*g)["w"].get<int64_t>(),
                    fc = (*g)["first_col"].get<int64_t>();
      if (gh < 1 || gw < 1 || fc < 0 || fc > (int64_t{1} << 20) || gh > 4096 || gw > 4096 || fc + gh * gw != r.cols || r.pool != 1) {
        return Bad(label, f + ".grid: first_col + h × w must equal cols (unpooled)");
      }
      if (g->contains("image")) {
        const json& im = (*g)["image"];
        if (!im.is_object() || !im.contains("w") || !im.contains("h") || !im.contains("b64") ||
            !im["w"].is_number_integer() || !im["h"].is_number_integer() || !im["b64"].is_string()) {
          return Bad(label, f + ".grid.image must be {w, h, b64}");
        }
        const int64_t iw = im["w"].get<int64_t>(), ih = im["h"].get<int64_t>();
        std::string px;
        if (iw < 1 || ih < 1 || iw > 4096 || ih > 4096 || !json_text::DecodeBase64(im["b64"].get<std::string>(), &px) ||
            static_cast<int64_t>(px.size()) != iw * ih * 3) {
          return Bad(label, f + ".grid.image: b64 must hold w × h × 3 bytes");
        }
      }
    }
    // Checks.
    TraceCheck sum{"view " + r.id + ": rows sum to 1", CheckState::kPass, ""};
    TraceCheck fut{"view " + r.id + ": future weights are zero (causal)", CheckState::kPass, ""};
    double worst = 0;
    int64_t future = 0;
    for (int64_t l = 0; l < r.num_layers && sum.state == CheckState::kPass; ++l)
      for (int64_t h = 0; h < r.num_heads && sum.state == CheckState::kPass; ++h)
        for (int64_t i = 0; i < r.data_rows; ++i) {
          const double* row = r.data.data() + ((l * r.num_heads + h) * r.data_rows + i) * r.data_cols;
          double t = 0;
          for (int64_t c = 0; c < r.data_cols; ++c) {
            t += row[c];
            if (causal != Causal::kNone && c * r.pool > std::min(r.rows - 1, i * r.pool + r.pool - 1) +
                                                            (causal == Causal::kBottomRight ? r.cols - r.rows : 0)) {
              ++future;
              if (row[c] != 0.0 && fut.state == CheckState::kPass) {
                fut.state = CheckState::kFail;
                fut.detail = "layer " + std::to_string(l) + " head " + std::to_string(h) + " row " +
                             std::to_string(i) + " reads future col " + std::to_string(c) + " with " + Fmt(row[c]);
              }
            }
            if (!(row[c] >= 0.0 && row[c] <= 1.0 + kSumTol)) t = NAN;
          }
          worst = std::max(worst, std::fabs(t - 1.0));
          if (!(std::fabs(t - 1.0) <= kSumTol)) {
            sum.state = CheckState::kFail;
            sum.detail = "layer " + std::to_string(l) + " head " + std::to_string(h) + " row " +
                         std::to_string(i) + " sums to " + Fmt(t);
            break;
          }
        }
    if (sum.state == CheckState::kPass) {
      sum.detail = std::to_string(r.num_layers) + " layers × " + std::to_string(r.num_heads) +
                   " heads, max |Σ − 1| " + Fmt(worst);
    }
    checks->push_back(sum);
    if (causal != Causal::kNone) {
      if (fut.state == CheckState::kPass) fut.detail = std::to_string(future) + " future cells are 0";
      checks->push_back(fut);
    }
    out->push_back(std::move(r));
  }
  return Status::Ok();
}


}  // namespace attnflow::player::internal
