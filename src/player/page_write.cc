// page_write.cc — writing the page JSON (format "attnflow-trace/1",
// docs/player.md) from a Trace: every stage laid out as the page's stage
// table says (stage_table.h), long inputs pooled, the compact encoding, the
// views, key padding and a padded batch's pages. Read back and checked by
// page_read.cc (and web/player.html).
//
// Invariants:
//  * Every stage entry has axes, shape, pool, data_shape and data with
//    data_shape[i] == ceil(shape[i] / pool[i]) and
//    len(data) == prod(data_shape); the reader enforces it.
//  * Pooling: attention maps are pooled over query and key blocks of the same
//    factor; the cells of a probabilities stage ("weights") are the mean over
//    the query rows of the sum over the key block (so pooled rows still sum
//    to one); other cells are the mean of the finite values (-Infinity when
//    every value is -inf). Token × dim views pool tokens only.
//  * Non-finite numbers are the strings "Infinity", "-Infinity", "NaN".
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "attnflow/player.h"
#include "io/json_text.h"
#include "player/internal.h"
#include "player/stage_table.h"

namespace attnflow::player {
namespace {

using internal::CeilDiv;
using internal::Elem;
using json_text::AppendBase64;
using json_text::AppendJsonIntArray;
using json_text::AppendJsonNumber;
using json_text::AppendJsonString;
using trace::AttentionView;
using trace::DecodeStep;
using trace::KernelCheck;
using trace::NamedTensor;
using trace::Trace;
using trace::TraceToken;

// A stage reduced to what the page shows: axes, logical shape, pooled data.
struct PageStage {
  std::vector<std::string> axes;
  std::vector<int64_t> shape, pool, data_shape;
  std::vector<double> data;
  bool f32 = false;
  std::string dtype;
};

// Pools a [d0,d1,d2] array (row-major) by [p0,p1,p2] (see file comment).
std::vector<double> Pool3(const std::vector<double>& in, const int64_t d[3], const int64_t p[3],
                          bool sum_last) {
  const int64_t n0 = CeilDiv(d[0], p[0]), n1 = CeilDiv(d[1], p[1]), n2 = CeilDiv(d[2], p[2]);
  std::vector<double> out(static_cast<size_t>(n0 * n1 * n2));
  for (int64_t a = 0; a < n0; ++a)
    for (int64_t b = 0; b < n1; ++b)
      for (int64_t c = 0; c < n2; ++c) {
        double sum = 0, inf_val = 0;
        int64_t finite = 0, rows = 0;
        bool nan = false;
        for (int64_t i = a * p[0]; i < std::min(d[0], (a + 1) * p[0]); ++i)
          for (int64_t j = b * p[1]; j < std::min(d[1], (b + 1) * p[1]); ++j) {
            ++rows;
            for (int64_t k = c * p[2]; k < std::min(d[2], (c + 1) * p[2]); ++k) {
              const double x = in[static_cast<size_t>((i * d[1] + j) * d[2] + k)];
              if (std::isnan(x)) nan = true;
              else if (std::isinf(x)) inf_val = x;
              else {
                sum += x;
                ++finite;
              }
            }
          }
        double v;
        if (nan) v = std::numeric_limits<double>::quiet_NaN();
        else if (sum_last) v = rows > 0 ? sum / static_cast<double>(rows) : 0.0;
        else if (finite > 0) v = sum / static_cast<double>(finite);
        else v = inf_val;
        out[static_cast<size_t>((a * n1 + b) * n2 + c)] = v;
      }
  return out;
}

// Builds the page view of one stage, laid out as the stage table says
// (stage_table.h, "layouts"). `heads` selects query heads; `len` is the
// token count the pooling factor `f` applies to. kInvalidArgument for a
// stage the table does not declare or of another rank.
Status MakePageStage(const std::string& name, const Tensor& t, const std::vector<int64_t>& heads,
                     int64_t len, int64_t f, PageStage* ps) {
  const StageDecl* decl = StageTable().Find(name);
  if (decl == nullptr) {
    return InvalidArgument("player: stage '" + name + "' is not in the page's stage table "
                           "(src/player/stage_table.json)");
  }
  const LayoutDecl& lay = StageTable().Of(decl->layout);
  const Shape s = t.shape();
  if (t.rank() != lay.rank || s[0] != 1) {
    return InvalidArgument("player: stage '" + name + "' is " + ShapeString(s) +
                           "; its layout '" + lay.name + "' in the stage table is rank " +
                           std::to_string(lay.rank) + " with batch 1");
  }
  ps->dtype = DTypeName(t.dtype());
  ps->f32 = t.dtype() != DType::kF64;
  ps->axes = lay.axes;
  int64_t d[3] = {1, 1, 1}, p[3] = {1, 1, 1};
  std::vector<int64_t> sel;  // head indices to keep along axis 0 (empty = all)
  switch (decl->layout) {
    case Layout::kMap:
    case Layout::kHeads:
    case Layout::kKvHeads:
      d[0] = s[1], d[1] = s[2], d[2] = s[3];
      if (decl->layout != Layout::kKvHeads) sel = heads;
      if (d[1] == len) p[1] = f;
      if (decl->layout == Layout::kMap && d[2] == len) p[2] = f;
      break;
    case Layout::kRows:
      d[0] = s[1], d[1] = s[2];
      sel = heads;
      if (d[1] == len) p[1] = f;
      break;
    case Layout::kTokens:
      d[0] = 1, d[1] = s[1], d[2] = s[2];
      if (d[1] == len) p[1] = f;
      break;
  }
  // Select heads along axis 0.
  std::vector<double> src;
  const int64_t per = d[1] * d[2];
  if (!sel.empty()) {
    src.reserve(static_cast<size_t>(sel.size() * per));
    for (int64_t h : sel)
      for (int64_t i = 0; i < per; ++i) src.push_back(Elem(t, h * per + i));
    d[0] = static_cast<int64_t>(sel.size());
  } else {
    src.resize(static_cast<size_t>(t.numel()));
    for (int64_t i = 0; i < t.numel(); ++i) src[static_cast<size_t>(i)] = Elem(t, i);
  }
  const bool pooled = p[1] > 1 || p[2] > 1;
  ps->data = pooled ? Pool3(src, d, p, decl->probabilities) : std::move(src);
  if (pooled) ps->f32 = true;  // pooled means are not exact values anyway
  if (decl->layout == Layout::kTokens) {
    ps->shape = {d[1], d[2]};
    ps->pool = {p[1], p[2]};
  } else if (decl->layout == Layout::kRows) {
    ps->shape = {d[0], d[1]};
    ps->pool = {p[0], p[1]};
  } else {
    ps->shape = {d[0], d[1], d[2]};
    ps->pool = {p[0], p[1], p[2]};
  }
  for (size_t i = 0; i < ps->shape.size(); ++i)
    ps->data_shape.push_back(CeilDiv(ps->shape[i], ps->pool[i]));
  return Status::Ok();
}


// ---- the compact encoding (PageOptions::compact; docs/cli.md "page") ----
// A compact stage entry has no "data"; it has "enc" ("f32" or "f64": the
// element type of the explicit values), "segs" and "b64", and optionally
// "base": {"op": OP, "of": [STAGE...]}. "segs" is a flat list of
// [count, kind] pairs that covers the cells in order: kind "x" = the next
// `count` values of "b64" (base64 of little-endian IEEE floats), "d" = the
// derived value of each cell (from "base"), a number or "-Infinity" /
// "Infinity" = that constant. Derived values (op on the base stages' decoded
// values, all in double, then rounded to float32 for "f32"):
//   scale: of[0][i] × scale      copy: of[0][i]      add: of[0][i] + of[1][i]
//   heads: concat[t, h·Dh + d] = of[0][h, t, d] (heads shown = 0..H-1)
// The writer marks a cell "d" only when the derived value has the same bits
// as the value it would have written, so the encoding is lossless.


struct Derivation {
  std::string op;
  std::vector<std::string> of;
};

// The derivation the page tries for a stage (the stage table's "derive";
// checked cell by cell).
bool DerivationFor(const std::string& name, Derivation* d) {
  const StageDecl* decl = StageTable().Find(name);
  if (decl == nullptr || decl->derive_op.empty()) return false;
  *d = {decl->derive_op, decl->derive_of};
  return true;
}

// The value a stage holds on the page: rounded to float for f32 stages.
double Shown(double v, bool f32) { return f32 ? static_cast<double>(static_cast<float>(v)) : v; }

// Derived values of `d` for a stage of `n` cells, or false if the shapes do
// not fit. `base` are the bases' shown values; `ds` the bases' data shapes.
bool Derive(const Derivation& d, const std::vector<const PageStage*>& base, const PageStage& ps,
            double scale, const std::vector<int64_t>& heads, int64_t num_heads,
            std::vector<double>* out) {
  const size_t n = ps.data.size();
  for (const PageStage* b : base)
    if (b == nullptr || b->f32 != ps.f32) return false;
  out->assign(n, 0.0);
  if (d.op == "scale" || d.op == "copy" || d.op == "add") {
    for (const PageStage* b : base)
      if (b->data_shape != ps.data_shape || b->data.size() != n) return false;
    for (size_t i = 0; i < n; ++i) {
      const double a = Shown(base[0]->data[i], ps.f32);
      double v = a;
      if (d.op == "scale") v = a * scale;
      else if (d.op == "add") v = a + Shown(base[1]->data[i], ps.f32);
      (*out)[i] = Shown(v, ps.f32);
    }
    return true;
  }
  if (d.op == "heads") {
    const PageStage& h = *base[0];
    if (static_cast<int64_t>(heads.size()) != num_heads) return false;
    for (size_t i = 0; i < heads.size(); ++i)
      if (heads[i] != static_cast<int64_t>(i)) return false;
    if (h.data_shape.size() != 3 || ps.data_shape.size() != 2) return false;
    const int64_t H = h.data_shape[0], T = h.data_shape[1], Dh = h.data_shape[2];
    if (H != num_heads || ps.data_shape[0] != T || ps.data_shape[1] != H * Dh) return false;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < H * Dh; ++c)
        (*out)[static_cast<size_t>(t * H * Dh + c)] =
            Shown(h.data[static_cast<size_t>(((c / Dh) * T + t) * Dh + c % Dh)], ps.f32);
    return true;
  }
  return false;
}

bool SameBits(double a, double b, bool f32) {
  if (f32) {
    const float fa = static_cast<float>(a), fb = static_cast<float>(b);
    return std::memcmp(&fa, &fb, sizeof fa) == 0;
  }
  return std::memcmp(&a, &b, sizeof a) == 0;
}

// Writes "enc", optional "base", "segs" and "b64" for one stage.
void AppendCompactData(std::string* o, const PageStage& ps, const Derivation* der,
                       const std::vector<double>* derived) {
  constexpr size_t kMinRun = 8;  // a constant run shorter than this stays explicit
  const bool f32 = ps.f32;
  const size_t n = ps.data.size();
  // kind per cell: 'd' derived, 'c' constant run, 'x' explicit.
  constexpr size_t kMinDerived = 4;  // shorter derived runs cost more in "segs" than they save
  std::string kind(n, 'x');
  for (size_t i = 0; derived != nullptr && i < n;) {
    size_t j = i;
    while (j < n && SameBits(ps.data[j], (*derived)[j], f32)) ++j;
    if (j - i >= kMinDerived)
      for (size_t k = i; k < j; ++k) kind[k] = 'd';
    i = j + (j == i);
  }
  for (size_t i = 0; i < n;) {
    if (kind[i] == 'd' || std::isnan(ps.data[i])) {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < n && kind[j] != 'd' && SameBits(ps.data[j], ps.data[i], f32)) ++j;
    if (j - i >= kMinRun)
      for (size_t k = i; k < j; ++k) kind[k] = 'c';
    i = j;
  }
  std::string segs, raw;
  raw.reserve(n * (f32 ? 4 : 8));
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    if (kind[i] == 'c') {
      while (j < n && kind[j] == 'c' && SameBits(ps.data[j], ps.data[i], f32)) ++j;
    } else {
      while (j < n && kind[j] == kind[i]) ++j;
    }
    if (!segs.empty()) segs += ",";
    segs += std::to_string(j - i) + ",";
    if (kind[i] == 'd') segs += "\"d\"";
    else if (kind[i] == 'x') segs += "\"x\"";
    else AppendJsonNumber(&segs, ps.data[i], f32);
    if (kind[i] == 'x') {
      for (size_t k = i; k < j; ++k) {
        unsigned char b[8];
        if (f32) {
          const float f = static_cast<float>(ps.data[k]);
          uint32_t u;
          std::memcpy(&u, &f, 4);
          for (int q = 0; q < 4; ++q) b[q] = static_cast<unsigned char>(u >> (8 * q));
          raw.append(reinterpret_cast<const char*>(b), 4);
        } else {
          uint64_t u;
          std::memcpy(&u, &ps.data[k], 8);
          for (int q = 0; q < 8; ++q) b[q] = static_cast<unsigned char>(u >> (8 * q));
          raw.append(reinterpret_cast<const char*>(b), 8);
        }
      }
    }
    i = j;
  }
  *o += ",\"enc\":";
  *o += f32 ? "\"f32\"" : "\"f64\"";
  if (der != nullptr && segs.find("\"d\"") != std::string::npos) {
    *o += ",\"base\":{\"op\":";
    AppendJsonString(o, der->op);
    *o += ",\"of\":[";
    for (size_t i = 0; i < der->of.size(); ++i) {
      if (i) *o += ",";
      AppendJsonString(o, der->of[i]);
    }
    *o += "]}";
  }
  *o += ",\"segs\":[" + segs + "],\"b64\":\"";
  AppendBase64(o, reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
  *o += "\"";
}

Status AppendStages(std::string* o, const std::vector<NamedTensor>& stages,
                    const std::vector<int64_t>& heads, int64_t len, int64_t f, bool compact,
                    double scale, int64_t num_heads) {
  std::vector<std::pair<std::string, PageStage>> all;
  for (const auto& st : stages) {
    PageStage ps;
    ATTNFLOW_RETURN_IF_ERROR(MakePageStage(st.name, st.value, heads, len, f, &ps));
    all.emplace_back(st.name, std::move(ps));
  }
  auto find = [&](const std::string& n) -> const PageStage* {
    for (const auto& [name, ps] : all)
      if (name == n) return &ps;
    return nullptr;
  };
  *o += "{";
  bool first = true;
  for (const auto& [name, ps] : all) {
    if (!first) *o += ",";
    first = false;
    *o += "\n";
    AppendJsonString(o, name);
    *o += ":{\"axes\":[";
    for (size_t i = 0; i < ps.axes.size(); ++i) {
      if (i) *o += ",";
      AppendJsonString(o, ps.axes[i]);
    }
    *o += "],\"shape\":";
    AppendJsonIntArray(o, ps.shape);
    *o += ",\"pool\":";
    AppendJsonIntArray(o, ps.pool);
    *o += ",\"data_shape\":";
    AppendJsonIntArray(o, ps.data_shape);
    *o += ",\"dtype\":";
    AppendJsonString(o, ps.dtype);
    if (compact) {
      Derivation der;
      std::vector<double> derived;
      bool have = false;
      if (DerivationFor(name, &der)) {
        std::vector<const PageStage*> base;
        for (const auto& b : der.of) base.push_back(b == name ? nullptr : find(b));
        have = Derive(der, base, ps, scale, heads, num_heads, &derived);
      }
      AppendCompactData(o, ps, have ? &der : nullptr, have ? &derived : nullptr);
      *o += "}";
      continue;
    }
    *o += ",\"data\":[";
    for (size_t i = 0; i < ps.data.size(); ++i) {
      if (i) o->push_back(',');
      AppendJsonNumber(o, ps.data[i], ps.f32);
    }
    *o += "]}";
  }
  *o += "}";
  return Status::Ok();
}

void AppendKernel(std::string* o, const KernelCheck& k) {
  *o += "{\"ran\":";
  *o += k.ran ? "true" : "false";
  *o += ",\"kernel\":";
  AppendJsonString(o, k.kernel);
  *o += ",\"max_abs_out\":";
  AppendJsonNumber(o, k.max_abs_out, false);
  *o += ",\"max_abs_lse\":";
  AppendJsonNumber(o, k.max_abs_lse, false);
  *o += ",\"max_abs_weights\":";
  AppendJsonNumber(o, k.max_abs_weights, false);
  *o += ",\"note\":";
  AppendJsonString(o, k.note);
  *o += "}";
}

void AppendToken(std::string* o, const TraceToken& t) {
  *o += "{\"id\":" + std::to_string(t.id) + ",\"text\":";
  AppendJsonString(o, t.text);
  *o += "}";
}


// ---- views (Trace::views; docs/player.md "Views") ----------------------------
// A view entry: id, kind, title, caption, row_axis, col_axis, causal,
// layers, heads, rows, cols, pool, data_rows, data_cols, row_labels,
// col_labels (data_rows / data_cols entries: pooled labels are ranges),
// layer_labels, optional grid {h, w, first_col, image: {w, h, b64 RGB8}},
// and b64: little-endian float32 [layers, heads, data_rows, data_cols].
// Pooling (above max_view_tokens rows or cols, "matrix" only) is the weights
// rule of the stages: mean over the block's rows of the sum over its cols.
// `heads`: the page's query heads (PageOptions::heads resolved) of a model
// with `num_heads`; a view over the same heads (v.num_heads == num_heads)
// keeps only those and lists them in "head_ids"; other views keep all.
void AppendViews(std::string* o, const std::vector<AttentionView>& views, int64_t max_view,
                 const std::vector<int64_t>& heads, int64_t num_heads) {
  *o += "[";
  for (size_t vi = 0; vi < views.size(); ++vi) {
    const AttentionView& v = views[vi];
    const bool filter = v.num_heads == num_heads && static_cast<int64_t>(heads.size()) < num_heads;
    std::vector<int64_t> shown;
    if (filter) shown = heads;
    else
      for (int64_t h = 0; h < v.num_heads; ++h) shown.push_back(h);
    const int64_t nh = static_cast<int64_t>(shown.size());
    const int64_t big = std::max(v.rows, v.cols);
    const int64_t f = v.kind == "matrix" && big > max_view ? CeilDiv(big, max_view) : 1;
    const int64_t dr = CeilDiv(v.rows, f), dc = CeilDiv(v.cols, f);
    if (vi) *o += ",";
    *o += "\n{\"id\":";
    AppendJsonString(o, v.id);
    *o += ",\"kind\":";
    AppendJsonString(o, v.kind);
    *o += ",\"title\":";
    AppendJsonString(o, v.title);
    *o += ",\"caption\":";
    AppendJsonString(o, v.caption);
    *o += ",\"row_axis\":";
    AppendJsonString(o, v.row_axis);
    *o += ",\"col_axis\":";
    AppendJsonString(o, v.col_axis);
    *o += ",\"causal\":";
    AppendJsonString(o, CausalName(v.causal));
    *o += ",\"layers\":" + std::to_string(v.num_layers) + ",\"heads\":" +
          std::to_string(nh) + ",\"rows\":" + std::to_string(v.rows) +
          ",\"cols\":" + std::to_string(v.cols) + ",\"pool\":" + std::to_string(f) +
          ",\"data_rows\":" + std::to_string(dr) + ",\"data_cols\":" + std::to_string(dc);
    auto labels = [&](const char* key, const std::vector<std::string>& l, int64_t n, int64_t d) {
      *o += ",\"";
      *o += key;
      *o += "\":[";
      for (int64_t i = 0; i < d; ++i) {
        if (i) *o += ",";
        if (f == 1) {
          AppendJsonString(o, static_cast<size_t>(i) < l.size() ? l[static_cast<size_t>(i)] : "");
        } else {
          AppendJsonString(o, std::to_string(i * f) + "–" + std::to_string(std::min(n, (i + 1) * f) - 1));
        }
      }
      *o += "]";
    };
    labels("row_labels", v.row_labels, v.rows, dr);
    labels("col_labels", v.col_labels, v.cols, dc);
    *o += ",\"layer_labels\":[";
    for (size_t i = 0; i < v.layer_labels.size(); ++i) {
      if (i) *o += ",";
      AppendJsonString(o, v.layer_labels[i]);
    }
    *o += "]";
    if (v.kind == "grid") {
      *o += ",\"grid\":{\"h\":" + std::to_string(v.grid_h) + ",\"w\":" + std::to_string(v.grid_w) +
            ",\"first_col\":" + std::to_string(v.first_col) + ",\"image\":{\"w\":" +
            std::to_string(v.image_w) + ",\"h\":" + std::to_string(v.image_h) + ",\"b64\":\"";
      AppendBase64(o, v.image_rgb.data(), v.image_rgb.size());
      *o += "\"}}";
    }
    if (filter) {
      *o += ",\"head_ids\":";
      AppendJsonIntArray(o, shown);
    }
    std::vector<unsigned char> bytes;
    bytes.reserve(static_cast<size_t>(v.num_layers * nh * dr * dc * 4));
    for (int64_t l = 0; l < v.num_layers; ++l)
      for (int64_t h : shown)
        for (int64_t bi = 0; bi < dr; ++bi)
          for (int64_t bj = 0; bj < dc; ++bj) {
            double acc = 0;
            int64_t nr = 0;
            for (int64_t i = bi * f; i < std::min(v.rows, (bi + 1) * f); ++i, ++nr)
              for (int64_t j = bj * f; j < std::min(v.cols, (bj + 1) * f); ++j) acc += v.at(l, h, i, j);
            const float x = static_cast<float>(acc / static_cast<double>(nr));
            unsigned char b[4];
            std::memcpy(b, &x, 4);  // little-endian hosts only (checked at build time elsewhere)
            bytes.insert(bytes.end(), b, b + 4);
          }
    *o += ",\"b64\":\"";
    AppendBase64(o, bytes.data(), bytes.size());
    *o += "\"}";
  }
  *o += "]";
}

}  // namespace

Result<std::string> TraceToJson(const Trace& t, const PageOptions& opt) {
  const int64_t H = t.info.num_heads;
  const int64_t L = static_cast<int64_t>(t.tokens.size());
  if (opt.max_tokens < 8) {
    return InvalidArgument("trace: page max_tokens = " + std::to_string(opt.max_tokens) +
                           " must be at least 8");
  }
  std::vector<int64_t> heads = opt.heads;
  if (heads.empty())
    for (int64_t h = 0; h < H; ++h) heads.push_back(h);
  std::set<int64_t> seen;
  for (int64_t h : heads) {
    if (h < 0 || h >= H) {
      return OutOfRange("trace: head " + std::to_string(h) + " is outside [0, " +
                        std::to_string(H) + ")");
    }
    if (!seen.insert(h).second) {
      return InvalidArgument("trace: head " + std::to_string(h) + " is listed twice");
    }
  }
  const int64_t f = L > opt.max_tokens ? CeilDiv(L, opt.max_tokens) : 1;
  std::string note;
  if (f > 1) {
    note = std::to_string(L) + " tokens is more than the page's " +
           std::to_string(opt.max_tokens) + ": every L×L view is pooled " + std::to_string(f) +
           "×" + std::to_string(f) +
           " (a weights cell = mean over the block's query rows of the summed weight of its "
           "keys, so rows still sum to 1; other cells = mean), token views pool " +
           std::to_string(f) +
           " tokens per row. Exports (--safetensors, --npy, --csv) hold full precision.";
  }
  std::string o;
  o.reserve(1 << 16);
  o += "{\"format\":";
  AppendJsonString(&o, kTraceFormatV1);
  o += ",\n\"generator\":\"attnflow 0.1.0\",\n\"source\":";
  AppendJsonString(&o, t.source);
  o += ",\n\"description\":";
  AppendJsonString(&o, t.description);
  o += ",\n\"model\":{\"name\":";
  AppendJsonString(&o, t.info.name);
  o += ",\"architecture\":";
  AppendJsonString(&o, t.info.architecture);
  o += ",\"num_layers\":" + std::to_string(t.info.num_layers) +
       ",\"hidden\":" + std::to_string(t.info.hidden) +
       ",\"num_heads\":" + std::to_string(H) +
       ",\"num_kv_heads\":" + std::to_string(t.info.num_kv_heads > 0 ? t.info.num_kv_heads : H) +
       ",\"head_dim\":" + std::to_string(t.info.head_dim) +
       ",\"ffn_hidden\":" + std::to_string(t.info.ffn_hidden) + ",\"norm\":";
  AppendJsonString(&o, t.norm);
  o += ",\"ffn_activation\":";
  AppendJsonString(&o, t.ffn_activation);
  o += "},\n\"layer\":" + std::to_string(t.layer) + ",\n\"causal\":";
  AppendJsonString(&o, CausalName(t.causal));
  o += ",\n\"scale\":";
  AppendJsonNumber(&o, t.scale, false);
  o += ",\n\"seq_len\":" + std::to_string(L) + ",\n\"heads\":";
  AppendJsonIntArray(&o, heads);
  o += ",\n\"tokens\":[";
  for (int64_t i = 0; i < L; ++i) {
    if (i) o += ",";
    AppendToken(&o, t.tokens[static_cast<size_t>(i)]);
  }
  o += "],\n\"view\":{\"max_tokens\":" + std::to_string(opt.max_tokens) +
       ",\"pool\":" + std::to_string(f) + ",\"note\":";
  AppendJsonString(&o, note);
  o += "},\n\"stages\":";
  ATTNFLOW_RETURN_IF_ERROR(AppendStages(&o, t.stages, heads, L, f, opt.compact, t.scale, H));
  o += ",\n\"kernel\":";
  AppendKernel(&o, t.kernel);
  o += ",\n\"decode\":[";
  for (size_t s = 0; s < t.decode.size(); ++s) {
    const DecodeStep& d = t.decode[s];
    const Tensor* w = d.Find(stage::kWeights);
    const int64_t lk = w != nullptr ? w->shape().back() : d.position + 1;
    const int64_t fd = lk > opt.max_tokens ? CeilDiv(lk, opt.max_tokens) : 1;
    if (s) o += ",";
    o += "\n{\"token\":";
    AppendToken(&o, d.token);
    o += ",\"position\":" + std::to_string(d.position) + ",\"kv_len\":" + std::to_string(lk) +
         ",\"pool\":" + std::to_string(fd) + ",\"stages\":";
    ATTNFLOW_RETURN_IF_ERROR(AppendStages(&o, d.stages, heads, lk, fd, opt.compact, t.scale, H));
    o += ",\"kernel\":";
    AppendKernel(&o, d.kernel);
    o += "}";
  }
  o += "]";
  if (!t.banner.empty()) {
    o += ",\n\"banner\":";
    AppendJsonString(&o, t.banner);
  }
  if (!t.views.empty()) {
    for (const AttentionView& v : t.views) {
      if (v.rows < 1 || v.cols < 1 || v.num_layers < 1 || v.num_heads < 1 ||
          v.weights.size() != static_cast<size_t>(v.num_layers * v.num_heads * v.rows * v.cols)) {
        return InvalidArgument("trace: view '" + v.id + "' has " + std::to_string(v.weights.size()) +
                               " weights for " + std::to_string(v.num_layers) + " layers × " +
                               std::to_string(v.num_heads) + " heads × " + std::to_string(v.rows) +
                               " × " + std::to_string(v.cols));
      }
    }
    o += ",\n\"views\":";
    AppendViews(&o, t.views, std::max<int64_t>(8, opt.max_view_tokens), heads, H);
  }
  if (!t.pad_keys.empty()) {
    for (size_t i = 0; i < t.pad_keys.size(); ++i) {
      if (t.pad_keys[i] < 0 || t.pad_keys[i] >= L || (i > 0 && t.pad_keys[i] <= t.pad_keys[i - 1])) {
        return InvalidArgument("trace: pad key " + std::to_string(t.pad_keys[i]) +
                               " is not increasing inside [0, " + std::to_string(L) + ")");
      }
    }
    o += ",\n\"padding\":{\"keys\":";
    AppendJsonIntArray(&o, t.pad_keys);
    o += ",\"kv_len\":" + std::to_string(t.pad_kv_len) + ",\"mask\":\"kv_lens\"}";
  }
  if (t.batch_index >= 0) {
    o += ",\n\"batch\":{\"index\":" + std::to_string(t.batch_index) + ",\"sentences\":[";
    for (size_t i = 0; i < t.batch_sentences.size(); ++i) {
      if (i) o += ",";
      AppendJsonString(&o, t.batch_sentences[i]);
    }
    o += "]}";  // BatchToJson relies on "batch" being the last field
  }
  o += "}\n";
  return o;
}

Result<std::string> BatchToJson(const std::vector<Trace>& traces, const PageOptions& opt) {
  if (traces.empty()) return InvalidArgument("trace: an empty batch has no page");
  std::vector<std::string> pages;
  for (size_t b = 0; b < traces.size(); ++b) {
    if (traces[b].batch_index != static_cast<int64_t>(b) ||
        traces[b].batch_sentences.size() != traces.size()) {
      return InvalidArgument("trace: batch trace " + std::to_string(b) + " has batch index " +
                             std::to_string(traces[b].batch_index) + " of " +
                             std::to_string(traces[b].batch_sentences.size()) + " sentences");
    }
    Result<std::string> p = TraceToJson(traces[b], opt);
    if (!p.ok()) return p.status();
    // Drop "}\n" (top level): the page ends with its "batch" object.
    pages.push_back(p->substr(0, p->size() - 2));
  }
  // Sentence 0's page is the top level; its "pages" entry is null, so the
  // page holds every sentence once.
  std::string o = pages[0].substr(0, pages[0].size() - 1);  // open "batch" again
  o += ",\"pages\":[null";
  for (size_t b = 1; b < pages.size(); ++b) o += ",\n" + pages[b] + "}";
  o += "]}}\n";
  return o;
}

}  // namespace attnflow::player
