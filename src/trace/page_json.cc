// page_json.cc — the page JSON (format "attnflow-trace/1", docs/player.md):
// writing it from a Trace (with pooling of long inputs), reading it back with
// full validation, and the numeric checks that the page's check panel runs
// too (same names, same tolerances: web/player.html, function runChecks).
//
// Invariants:
//  * Every stage entry has axes, shape, pool, data_shape and data with
//    data_shape[i] == ceil(shape[i] / pool[i]) and
//    len(data) == prod(data_shape); the reader enforces it.
//  * Pooling: attention maps are pooled over query and key blocks of the same
//    factor; "weights" cells are the mean over the query rows of the sum over
//    the key block (so pooled rows still sum to one); other cells are the
//    mean of the finite values (-Infinity when every value is -inf). Token ×
//    dim views pool tokens only.
//  * Non-finite numbers are the strings "Infinity", "-Infinity", "NaN".
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "attnflow/file_util.h"
#include "attnflow/trace.h"
#include "trace/internal.h"

namespace attnflow::trace {
namespace internal {

void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  size_t i = 0;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  while (i < s.size()) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      switch (c) {
        case '"': *out += "\\\""; break;
        case '\\': *out += "\\\\"; break;
        case '\n': *out += "\\n"; break;
        case '\r': *out += "\\r"; break;
        case '\t': *out += "\\t"; break;
        case '<': *out += "\\u003c"; break;  // never "</script>" inside the page
        default:
          if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            *out += buf;
          } else {
            out->push_back(static_cast<char>(c));
          }
      }
      ++i;
      continue;
    }
    // Validate one UTF-8 sequence; replace anything malformed with U+FFFD.
    int len = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) ok = false;
      else cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (ok && ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
               (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))) {
      ok = false;
    }
    if (ok) {
      out->append(s.substr(i, len));
      i += len;
    } else {
      *out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  out->push_back('"');
}

void AppendJsonNumber(std::string* out, double v, bool f32) {
  if (std::isnan(v)) {
    *out += "\"NaN\"";
    return;
  }
  if (std::isinf(v)) {
    *out += v < 0 ? "\"-Infinity\"" : "\"Infinity\"";
    return;
  }
  char buf[64];
  std::to_chars_result r = f32 ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                               : std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, r.ptr);
}

}  // namespace internal

namespace {

using internal::AppendJsonNumber;
using internal::AppendJsonString;
using internal::Elem;

bool IsAttentionMap(const std::string& n) {
  return n == "scores" || n == "scaled" || n == "masked" || n == "weights";
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

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

// Builds the page view of one stage. `heads` selects query heads; `len` is
// the token count the pooling factor `f` applies to. Returns false for
// stages the page cannot show (unknown rank/shape).
bool MakePageStage(const std::string& name, const Tensor& t, const std::vector<int64_t>& heads,
                   int64_t len, int64_t f, PageStage* ps) {
  const Shape s = t.shape();
  ps->dtype = DTypeName(t.dtype());
  ps->f32 = t.dtype() != DType::kF64;
  int64_t d[3] = {1, 1, 1}, p[3] = {1, 1, 1};
  std::vector<int64_t> sel;  // head indices to keep along axis 0 (empty = all)
  if (t.rank() == 4 && s[0] == 1) {
    const bool kv = name == "k" || name == "v";
    if (IsAttentionMap(name)) ps->axes = {"head", "query", "key"};
    else ps->axes = {kv ? "kv_head" : "head", "token", "dim"};
    d[0] = s[1], d[1] = s[2], d[2] = s[3];
    if (!kv) sel = heads;
    if (d[1] == len) p[1] = f;
    if (IsAttentionMap(name) && d[2] == len) p[2] = f;
  } else if (t.rank() == 3 && s[0] == 1 && name == "lse") {
    ps->axes = {"head", "query"};
    d[0] = s[1], d[1] = s[2];
    sel = heads;
    if (d[1] == len) p[1] = f;
  } else if (t.rank() == 3 && s[0] == 1) {
    ps->axes = {"token", "dim"};
    d[0] = 1, d[1] = s[1], d[2] = s[2];
    if (d[1] == len) p[1] = f;
  } else {
    return false;
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
  ps->data = pooled ? Pool3(src, d, p, name == "weights") : std::move(src);
  if (pooled) ps->f32 = true;  // pooled means are not exact values anyway
  const bool two = ps->axes.size() == 2;
  if (two && ps->axes[0] == "token") {
    ps->shape = {d[1], d[2]};
    ps->pool = {p[1], p[2]};
  } else if (two) {
    ps->shape = {d[0], d[1]};
    ps->pool = {p[0], p[1]};
  } else {
    ps->shape = {d[0], d[1], d[2]};
    ps->pool = {p[0], p[1], p[2]};
  }
  for (size_t i = 0; i < ps->shape.size(); ++i)
    ps->data_shape.push_back(CeilDiv(ps->shape[i], ps->pool[i]));
  return true;
}

void AppendIntArray(std::string* o, const std::vector<int64_t>& v) {
  o->push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) o->push_back(',');
    *o += std::to_string(v[i]);
  }
  o->push_back(']');
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

void AppendBase64(std::string* o, const unsigned char* p, size_t n) {
  static const char kAlpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    o->push_back(kAlpha[v >> 18]);
    o->push_back(kAlpha[(v >> 12) & 63]);
    o->push_back(kAlpha[(v >> 6) & 63]);
    o->push_back(kAlpha[v & 63]);
  }
  if (i < n) {
    uint32_t v = uint32_t{p[i]} << 16;
    if (i + 1 < n) v |= uint32_t{p[i + 1]} << 8;
    o->push_back(kAlpha[v >> 18]);
    o->push_back(kAlpha[(v >> 12) & 63]);
    o->push_back(i + 1 < n ? kAlpha[(v >> 6) & 63] : '=');
    o->push_back('=');
  }
}

struct Derivation {
  std::string op;
  std::vector<std::string> of;
};

// The derivation the page tries for a stage (checked cell by cell).
bool DerivationFor(const std::string& name, Derivation* d) {
  if (name == "scaled") *d = {"scale", {"scores"}};
  else if (name == "masked") *d = {"copy", {"scaled"}};
  else if (name == "concat") *d = {"heads", {"heads_out"}};
  else if (name == "residual") *d = {"add", {"layer_in", "out"}};
  else if (name == "block_out") *d = {"add", {"residual", "ffn"}};
  else return false;
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

void AppendStages(std::string* o, const std::vector<NamedTensor>& stages,
                  const std::vector<int64_t>& heads, int64_t len, int64_t f, bool compact,
                  double scale, int64_t num_heads) {
  std::vector<std::pair<std::string, PageStage>> all;
  for (const auto& st : stages) {
    PageStage ps;
    if (MakePageStage(st.name, st.value, heads, len, f, &ps)) all.emplace_back(st.name, std::move(ps));
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
    AppendIntArray(o, ps.shape);
    *o += ",\"pool\":";
    AppendIntArray(o, ps.pool);
    *o += ",\"data_shape\":";
    AppendIntArray(o, ps.data_shape);
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
      AppendIntArray(o, shown);
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
  AppendIntArray(&o, heads);
  o += ",\n\"tokens\":[";
  for (int64_t i = 0; i < L; ++i) {
    if (i) o += ",";
    AppendToken(&o, t.tokens[static_cast<size_t>(i)]);
  }
  o += "],\n\"view\":{\"max_tokens\":" + std::to_string(opt.max_tokens) +
       ",\"pool\":" + std::to_string(f) + ",\"note\":";
  AppendJsonString(&o, note);
  o += "},\n\"stages\":";
  AppendStages(&o, t.stages, heads, L, f, opt.compact, t.scale, H);
  o += ",\n\"kernel\":";
  AppendKernel(&o, t.kernel);
  o += ",\n\"decode\":[";
  for (size_t s = 0; s < t.decode.size(); ++s) {
    const DecodeStep& d = t.decode[s];
    const Tensor* w = d.Find("weights");
    const int64_t lk = w != nullptr ? w->shape().back() : d.position + 1;
    const int64_t fd = lk > opt.max_tokens ? CeilDiv(lk, opt.max_tokens) : 1;
    if (s) o += ",";
    o += "\n{\"token\":";
    AppendToken(&o, d.token);
    o += ",\"position\":" + std::to_string(d.position) + ",\"kv_len\":" + std::to_string(lk) +
         ",\"pool\":" + std::to_string(fd) + ",\"stages\":";
    AppendStages(&o, d.stages, heads, lk, fd, opt.compact, t.scale, H);
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
    AppendIntArray(&o, t.pad_keys);
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

// ---------------------------------------------------------------------------
// Reading and checking.
// ---------------------------------------------------------------------------

namespace {

using json = nlohmann::json;

struct Arr {  // a validated stage entry
  std::vector<std::string> axes;
  std::vector<int64_t> shape, pool, ds;
  std::vector<double> data;
  // Compact entries before decoding (see "the compact encoding" above).
  bool compact = false, f32 = true;
  json segs;
  std::string b64, op;
  std::vector<std::string> of;
  double at(int64_t a, int64_t b, int64_t c) const {
    return data[static_cast<size_t>((a * ds[1] + b) * ds[2] + c)];
  }
};

Status Bad(const std::string& label, const std::string& what) {
  return Corrupt("trace: " + label + ": " + what);
}

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

Status ParseStage(const json& j, const std::string& label, const std::string& field, Arr* a) {
  if (!j.is_object()) return Bad(label, field + " must be an object");
  for (const char* k : {"axes", "shape", "pool", "data_shape"}) {
    if (!j.contains(k)) return Bad(label, field + " has no '" + k + "'");
  }
  if (!j["axes"].is_array()) return Bad(label, field + ".axes must be an array of strings");
  for (const auto& e : j["axes"]) {
    if (!e.is_string()) return Bad(label, field + ".axes must be an array of strings");
    a->axes.push_back(e.get<std::string>());
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

bool DecodeBase64(std::string_view in, std::string* out) {
  if (in.size() % 4 != 0) return false;
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  out->clear();
  out->reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      if (in[i + k] == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else if (pad > 0 || (v[k] = val(in[i + k])) < 0) {
        return false;
      }
    }
    const uint32_t w = (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) |
                       uint32_t(v[3]);
    out->push_back(static_cast<char>(w >> 16));
    if (pad < 2) out->push_back(static_cast<char>((w >> 8) & 255));
    if (pad < 1) out->push_back(static_cast<char>(w & 255));
  }
  return true;
}

// Decodes one compact stage (its bases first); `busy` catches cycles.
Status DecodeCompact(const std::string& name, std::map<std::string, Arr>* st,
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
                   std::map<std::string, Arr>* out) {
  if (!j.is_object()) return Bad(label, field + " must be an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    Arr a;
    ATTNFLOW_RETURN_IF_ERROR(ParseStage(it.value(), label, field + "." + it.key(), &a));
    out->emplace(it.key(), std::move(a));
  }
  std::set<std::string> busy;
  for (auto& [name, a] : *out)
    ATTNFLOW_RETURN_IF_ERROR(DecodeCompact(name, out, label, field, scale, heads, num_heads, &busy));
  return Status::Ok();
}

const Arr* Get(const std::map<std::string, Arr>& m, const char* n) {
  auto it = m.find(n);
  return it == m.end() ? nullptr : &it->second;
}

std::string Fmt(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

constexpr double kSumTol = 1e-5;

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
    if (!DecodeBase64(v["b64"].get<std::string>(), &bytes)) return Bad(label, f + ".b64 is not valid base64");
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
        if (iw < 1 || ih < 1 || iw > 4096 || ih > 4096 || !DecodeBase64(im["b64"].get<std::string>(), &px) ||
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
    std::map<std::string, Arr> st;
    ATTNFLOW_RETURN_IF_ERROR(ParseStages(j["stages"], label, "stages", scale, heads, H, &st));
    const Arr* w = Get(st, "weights");
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
    std::vector<std::map<std::string, Arr>> dec;
    std::vector<int64_t> kv_lens, positions;
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
    std::vector<int64_t> pad_keys;
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
    if (has_views) ATTNFLOW_RETURN_IF_ERROR(ParseViews(j["views"], label, &s.views, &view_checks));
    if (w == nullptr) {  // a views-only page (e.g. the Bahdanau loop)
      s.checks = std::move(view_checks);
      return s;
    }

    // ---- numeric checks (mirrors runChecks in web/player.html) ----
    const Arr* m = Get(st, "masked");
    const Arr* sc = Get(st, "scores");
    const Arr* sd = Get(st, "scaled");
    const Arr* lse = Get(st, "lse");
    s.checks.push_back(RowSums("weights rows sum to 1 (0 for a fully masked row)", w, m));
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
      s.checks.push_back(c);
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
      s.checks.push_back(c);
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
              if (w->at(h, bi, bj) != 0.0) {
                c.state = CheckState::kFail;
                c.detail = "head #" + std::to_string(h) + " query " + std::to_string(bi) +
                           " reads future key " + std::to_string(bj) + " with weight " +
                           Fmt(w->at(h, bi, bj));
                break;
              }
            }
          }
        if (c.state == CheckState::kPass) c.detail = std::to_string(n) + " future cells are 0";
      }
      s.checks.push_back(c);
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
      s.checks.push_back(c);
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
      s.checks.push_back(c);
    }
    {
      TraceCheck c{"concat = heads side by side", CheckState::kSkip,
                   "needs heads_out and concat at full resolution"};
      const Arr* ho = Get(st, "heads_out");
      const Arr* cc = Get(st, "concat");
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
      s.checks.push_back(c);
    }
    {
      TraceCheck c{"decode rows sum to 1", CheckState::kSkip, "no decode steps"};
      for (size_t i = 0; i < dec.size(); ++i) {
        const Arr* dw = Get(dec[i], "weights");
        TraceCheck r = RowSums(c.name, dw, Get(dec[i], "masked"));
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
      s.checks.push_back(c);
    }
    {
      TraceCheck c{"the cache grows by one key per decode step", CheckState::kSkip,
                   "no decode steps"};
      if (!dec.empty()) {
        c.state = CheckState::kPass;
        c.detail = "kv_len " + std::to_string(kv_lens.front()) + " .. " +
                   std::to_string(kv_lens.back());
        for (size_t i = 0; i < dec.size(); ++i) {
          const Arr* dw = Get(dec[i], "weights");
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
      s.checks.push_back(c);
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
              if (w->at(h, i, pk) != 0.0) {
                c.state = CheckState::kFail;
                c.detail = "head #" + std::to_string(h) + " query " + std::to_string(i) +
                           " reads pad key " + std::to_string(pk) + " with weight " +
                           Fmt(w->at(h, i, pk));
                break;
              }
            }
      }
      s.checks.push_back(c);
    }
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

}  // namespace attnflow::trace
