// heatmap.cc — heatmap figures of a trace, for the stage table's heatmap
// stages: PNG (an 8-bit palette image encoded by attnflow/image.h; 240
// scale steps + label/hatch colours; token labels in a 6x10 public-domain
// bitmap font, "query"/"key" axis titles, a colour bar with its range,
// masked cells hatched) and SVG (axis titles, labels, per-cell <title> with the
// exact value, numbers in the cells of maps up to 16x16, a colour bar and a
// legend). Target: a 512-token map as PNG <= 100 KB.
//
// Colours (the same as the page): probabilities (weights) use a viridis-like
// sequential scale 0..1, other maps a blue-white-red diverging scale
// symmetric around 0. A masked cell (-inf) is hatched light grey, never a
// colour of the scale, so it cannot be confused with a near-zero weight; a
// cell with no value (NaN: e.g. a key not yet in the cache) is white.
// Large maps are pooled (weights: summed over keys, averaged over queries);
// the SVG title says so.
#include <algorithm>
#include <cstring>
#include <cmath>
#include <cstdio>

#include "attnflow/file_util.h"
#include "attnflow/image.h"
#include "attnflow/player.h"
#include "player/canvas.h"
#include "player/internal.h"
#include "player/stage_table.h"

namespace attnflow::player {
namespace {

using trace::Trace;

using internal::Heatmap;

// ---- colours -----------------------------------------------------------------

struct Rgb {
  uint8_t r, g, b;
};

Rgb Lerp(Rgb a, Rgb b, double t) {
  auto m = [t](uint8_t x, uint8_t y) {
    return static_cast<uint8_t>(std::lround(x + (y - x) * t));
  };
  return {m(a.r, b.r), m(a.g, b.g), m(a.b, b.b)};
}

Rgb Viridis(double t) {
  static const Rgb k[] = {{0x44, 0x01, 0x54}, {0x48, 0x28, 0x78}, {0x3e, 0x49, 0x89},
                          {0x31, 0x68, 0x8e}, {0x26, 0x82, 0x8e}, {0x1f, 0x9e, 0x89},
                          {0x35, 0xb7, 0x79}, {0x6e, 0xce, 0x58}, {0xfd, 0xe7, 0x25}};
  t = std::clamp(t, 0.0, 1.0) * 8.0;
  const int i = std::min(7, static_cast<int>(t));
  return Lerp(k[i], k[i + 1], t - i);
}

Rgb Diverging(double t) {  // t in [-1, 1]
  const Rgb blue{0x21, 0x66, 0xac}, white{0xf7, 0xf7, 0xf7}, red{0xb2, 0x18, 0x2b};
  t = std::clamp(t, -1.0, 1.0);
  return t < 0 ? Lerp(white, blue, -t) : Lerp(white, red, t);
}

constexpr Rgb kHatchBg{0xe4, 0xe4, 0xe4}, kHatchLine{0x9a, 0x9a, 0x9a}, kWhite{0xff, 0xff, 0xff};

double MaxAbs(const Heatmap& h) {
  double m = 0;
  for (double v : h.values)
    if (std::isfinite(v)) m = std::max(m, std::fabs(v));
  return m > 0 ? m : 1.0;
}

Rgb CellColor(const Heatmap& h, double v, double max_abs) {
  if (std::isnan(v)) return kWhite;
  if (h.probabilities) return Viridis(v);
  return Diverging(v / max_abs);
}

std::string Hex(Rgb c) {
  char b[8];
  std::snprintf(b, sizeof b, "#%02x%02x%02x", c.r, c.g, c.b);
  return b;
}

std::string XmlEscape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) o += ' ';
        else o += c;
    }
  }
  return o;
}

std::string Exact(double v) {
  if (std::isnan(v)) return "no value";
  if (std::isinf(v)) return v < 0 ? "masked (-inf; weight exactly 0)" : "inf";
  char b[64];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

// Pools a heatmap to at most `max_cells` per side (see file comment).
Heatmap PoolHeatmap(const Heatmap& h, int64_t max_cells) {
  const int64_t n = std::max(h.rows, h.cols);
  if (n <= max_cells) return h;
  const int64_t f = (n + max_cells - 1) / max_cells;
  Heatmap o = h;
  o.pool = h.pool * f;
  o.rows = (h.rows + f - 1) / f;
  o.cols = (h.cols + f - 1) / f;
  o.values.assign(static_cast<size_t>(o.rows * o.cols), 0.0);
  o.row_labels.clear();
  o.col_labels.clear();
  for (int64_t a = 0; a < o.rows; ++a)
    for (int64_t b = 0; b < o.cols; ++b) {
      double sum = 0;
      int64_t fin = 0, rows = 0;
      bool masked_only = true, any = false;
      for (int64_t i = a * f; i < std::min(h.rows, (a + 1) * f); ++i) {
        ++rows;
        for (int64_t j = b * f; j < std::min(h.cols, (b + 1) * f); ++j) {
          const double v = h.values[static_cast<size_t>(i * h.cols + j)];
          any = true;
          if (std::isfinite(v)) {
            sum += v;
            ++fin;
            masked_only = false;
          } else if (!(std::isinf(v) && v < 0)) {
            masked_only = false;
          }
        }
      }
      double v;
      if (!any) v = NAN;
      else if (fin == 0) v = masked_only ? -INFINITY : NAN;
      else v = h.probabilities ? sum / static_cast<double>(rows) : sum / static_cast<double>(fin);
      o.values[static_cast<size_t>(a * o.cols + b)] = v;
    }
  for (int64_t i = 0; i < o.rows; ++i)
    o.row_labels.push_back(std::to_string(i * f) + "–" + std::to_string(std::min(h.rows, (i + 1) * f) - 1));
  for (int64_t j = 0; j < o.cols; ++j)
    o.col_labels.push_back(std::to_string(j * f) + "–" + std::to_string(std::min(h.cols, (j + 1) * f) - 1));
  return o;
}

}  // namespace

namespace internal {

std::string Clip(const std::string& s, size_t max_chars) {
  std::string o;
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if ((c & 0xC0) != 0x80 && ++n > max_chars) break;
    o += s[i];
  }
  return o;
}

uint8_t ScaleIndex(const Heatmap& h, double v, double max_abs) {
  const double t = h.probabilities ? v : (v / max_abs + 1.0) / 2.0;
  return static_cast<uint8_t>(std::lround(std::clamp(t, 0.0, 1.0) * (Canvas::kScaleSteps - 1)));
}

std::string Num4(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.4g", v);
  return b;
}

Result<std::string> HeatmapPng(const Heatmap& in) {
  const Heatmap h = PoolHeatmap(in, 512);
  const int64_t n = std::max<int64_t>(1, std::max(h.rows, h.cols));
  const int64_t cell = std::clamp<int64_t>(512 / n, 1, 32);
  const double m = MaxAbs(h);
  // Labels: every row/column when a cell is as tall as the font, else the
  // index every `step` cells.
  const bool every = cell >= 10;
  const int64_t step = every ? 1 : std::max<int64_t>(1, (16 + cell - 1) / cell);
  auto label = [&](const std::vector<std::string>& labels, int64_t i) -> std::string {
    if (!every) return std::to_string(i * h.pool);
    return Clip(i < static_cast<int64_t>(labels.size()) ? labels[static_cast<size_t>(i)]
                                                         : std::to_string(i),
                16);
  };
  int64_t row_w = 0, col_h = 0;
  for (int64_t i = 0; i < h.rows; i += step) row_w = std::max(row_w, Canvas::TextWidth(label(h.row_labels, i)));
  for (int64_t j = 0; j < h.cols; j += step) col_h = std::max(col_h, Canvas::TextWidth(label(h.col_labels, j)));
  const int64_t gx = 4 + 10 + 6 + row_w + 4;      // "query" title, labels
  const int64_t gy = 4 + 10 + 6 + 10 + 6 + col_h + 4;  // title, "key" title, labels
  const int64_t gw = h.cols * cell, gh = h.rows * cell;
  const int64_t bar_x = gx + gw + 16, bar_h = std::max<int64_t>(gh, 120);
  const std::string hi = Num4(h.probabilities ? 1.0 : m), lo = Num4(h.probabilities ? 0.0 : -m);
  const int64_t right = 18 + std::max<int64_t>({Canvas::TextWidth(hi), Canvas::TextWidth(lo),
                                                 Canvas::TextWidth("masked (-inf)")});
  std::string title = h.title;
  if (h.pool > 1) title += " (pooled " + std::to_string(h.pool) + "x" + std::to_string(h.pool) + ")";
  const int64_t w = std::max(bar_x + right + 8, std::min<int64_t>(Canvas::TextWidth(title) + 8, 1400));
  const int64_t ht = gy + std::max(gh, bar_h + 34) + 8;
  Canvas c(w, ht);
  c.Text(4, 4, title);
  c.Text(gx + std::max<int64_t>(0, (gw - Canvas::TextWidth("key")) / 2), 4 + 10 + 6, "key");
  c.Text(4, gy + std::max<int64_t>(Canvas::TextWidth("query"), gh / 2 + 15), "query", true);
  for (int64_t i = 0; i < h.rows; i += step) {
    const std::string s = label(h.row_labels, i);
    c.Text(gx - 4 - Canvas::TextWidth(s), gy + i * cell + (cell - 10) / 2, s);
    if (!every) c.Fill(gx - 3, gy + i * cell, 3, 1, Canvas::kGrey);
  }
  for (int64_t j = 0; j < h.cols; j += step) {
    const std::string s = label(h.col_labels, j);
    c.Text(gx + j * cell + (cell - 10) / 2, gy - 4, s, true);
    if (!every) c.Fill(gx + j * cell, gy - 3, 1, 3, Canvas::kGrey);
  }
  for (int64_t i = 0; i < h.rows; ++i)
    for (int64_t j = 0; j < h.cols; ++j) {
      const double v = h.values[static_cast<size_t>(i * h.cols + j)];
      const bool masked = std::isinf(v) && v < 0;
      const uint8_t col = masked ? Canvas::kHatchBgI
                          : std::isnan(v) ? Canvas::kWhiteI
                                          : ScaleIndex(h, v, m);
      for (int64_t y = 0; y < cell; ++y)
        for (int64_t x = 0; x < cell; ++x) {
          const int64_t X = gx + j * cell + x, Y = gy + i * cell + y;
          // Diagonal hatch lines on masked cells (every 4th anti-diagonal of
          // the figure, so neighbouring cells join up).
          c.Set(X, Y, masked && (cell < 4 || (X + Y) % 4 == 0) ? Canvas::kHatchLineI : col);
        }
    }
  // Colour bar with its range, then the masked legend.
  for (int64_t y = 0; y < bar_h; ++y)
    c.Fill(bar_x, gy + y, 14, 1,
           static_cast<uint8_t>(std::lround((1.0 - y / double(std::max<int64_t>(1, bar_h - 1))) *
                                            (Canvas::kScaleSteps - 1))));
  c.Text(bar_x + 18, gy, hi);
  c.Text(bar_x + 18, gy + bar_h - 10, lo);
  for (int64_t y = 0; y < 12; ++y)
    for (int64_t x = 0; x < 14; ++x)
      c.Set(bar_x + x, gy + bar_h + 10 + y, (x + y) % 4 == 0 ? Canvas::kHatchLineI : Canvas::kHatchBgI);
  c.Text(bar_x + 18, gy + bar_h + 11, "masked (-inf)");
  std::vector<Rgb> palette;
  for (int k = 0; k < Canvas::kScaleSteps; ++k) {
    const double t = k / double(Canvas::kScaleSteps - 1);
    palette.push_back(h.probabilities ? Viridis(t) : Diverging(2 * t - 1));
  }
  palette.push_back(kWhite);
  palette.push_back(kHatchBg);
  palette.push_back(kHatchLine);
  palette.push_back({0x20, 0x20, 0x20});
  palette.push_back({0x90, 0x90, 0x90});
  std::vector<uint8_t> plte;
  for (const Rgb& p : palette) plte.insert(plte.end(), {p.r, p.g, p.b});
  return EncodeIndexedPng(c.w(), c.h(), c.pixels(), plte);
}

std::string HeatmapSvg(const Heatmap& in) {
  const Heatmap h = PoolHeatmap(in, 128);
  const int64_t n = std::max<int64_t>(1, std::max(h.rows, h.cols));
  const int64_t cell = std::clamp<int64_t>(480 / n, 3, 40);
  const int64_t left = 110, top = 110;
  const int64_t w = left + h.cols * cell + 140, ht = top + h.rows * cell + 60;
  const double m = MaxAbs(h);
  std::string title = h.title;
  if (h.pool > 1) {
    title += " (pooled " + std::to_string(h.pool) + "×" + std::to_string(h.pool) +
             " for the figure; exports hold full precision)";
  }
  std::string o;
  o += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) +
       "\" height=\"" + std::to_string(ht) + "\" viewBox=\"0 0 " + std::to_string(w) + " " +
       std::to_string(ht) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o += "<title>" + XmlEscape(title) + "</title>\n";
  o += "<defs><pattern id=\"masked\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
       "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"" + Hex(kHatchBg) +
       "\"/><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"" + Hex(kHatchLine) +
       "\" stroke-width=\"2\"/></pattern></defs>\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"8\" y=\"18\" font-size=\"13\" font-weight=\"bold\">" + XmlEscape(title) +
       "</text>\n";
  // Axis titles: keys along the top, queries down the left side.
  o += "<text x=\"" + std::to_string(left + h.cols * cell / 2) +
       "\" y=\"36\" text-anchor=\"middle\" font-size=\"12\" font-weight=\"bold\">key</text>\n";
  {
    const int64_t cy = top + h.rows * cell / 2;
    o += "<text x=\"16\" y=\"" + std::to_string(cy) + "\" transform=\"rotate(-90 16 " +
         std::to_string(cy) +
         ")\" text-anchor=\"middle\" font-size=\"12\" font-weight=\"bold\">query</text>\n";
  }
  const bool labels = cell >= 9;
  if (labels) {
    for (int64_t j = 0; j < h.cols && j < static_cast<int64_t>(h.col_labels.size()); ++j) {
      const int64_t x = left + j * cell + cell / 2, y = top - 6;
      o += "<text x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(y) +
           "\" transform=\"rotate(-50 " + std::to_string(x) + " " + std::to_string(y) + ")\">" +
           XmlEscape(h.col_labels[static_cast<size_t>(j)]) + "</text>\n";
    }
    for (int64_t i = 0; i < h.rows && i < static_cast<int64_t>(h.row_labels.size()); ++i) {
      o += "<text x=\"" + std::to_string(left - 6) + "\" y=\"" +
           std::to_string(top + i * cell + cell / 2 + 4) + "\" text-anchor=\"end\">" +
           XmlEscape(h.row_labels[static_cast<size_t>(i)]) + "</text>\n";
    }
  }
  for (int64_t i = 0; i < h.rows; ++i)
    for (int64_t j = 0; j < h.cols; ++j) {
      const double v = h.values[static_cast<size_t>(i * h.cols + j)];
      const bool masked = std::isinf(v) && v < 0;
      const std::string fill = masked ? "url(#masked)" : Hex(CellColor(h, v, m));
      std::string tip = "row " + (i < static_cast<int64_t>(h.row_labels.size())
                                      ? h.row_labels[static_cast<size_t>(i)]
                                      : std::to_string(i)) +
                        ", col " + (j < static_cast<int64_t>(h.col_labels.size())
                                        ? h.col_labels[static_cast<size_t>(j)]
                                        : std::to_string(j)) +
                        ": " + Exact(v);
      o += "<rect x=\"" + std::to_string(left + j * cell) + "\" y=\"" +
           std::to_string(top + i * cell) + "\" width=\"" + std::to_string(cell) +
           "\" height=\"" + std::to_string(cell) + "\" fill=\"" + fill + "\"><title>" +
           XmlEscape(tip) + "</title></rect>\n";
      // Numbers in the cells of small maps (finite values only).
      if (h.rows <= 16 && h.cols <= 16 && std::isfinite(v)) {
        const double t = h.probabilities ? v : std::fabs(v) / m;
        const bool dark = h.probabilities ? t < 0.6 : t > 0.6;
        char num[32];
        std::snprintf(num, sizeof num, h.probabilities ? "%.2f" : "%.2g", v);
        o += "<text x=\"" + std::to_string(left + j * cell + cell / 2) + "\" y=\"" +
             std::to_string(top + i * cell + cell / 2 + 3) +
             "\" text-anchor=\"middle\" font-size=\"" + std::to_string(cell >= 30 ? 9 : 7) +
             "\" fill=\"" + (dark ? "white" : "black") + "\" pointer-events=\"none\">" + num +
             "</text>\n";
      }
    }
  // Colour bar + legend.
  const int64_t bx = left + h.cols * cell + 20, by = top, bh = std::max<int64_t>(120, h.rows * cell);
  for (int k = 0; k < 50; ++k) {
    const double t = 1.0 - k / 49.0;
    const Rgb c = h.probabilities ? Viridis(t) : Diverging(2 * t - 1);
    o += "<rect x=\"" + std::to_string(bx) + "\" y=\"" + std::to_string(by + k * bh / 50) +
         "\" width=\"14\" height=\"" + std::to_string(bh / 50 + 1) + "\" fill=\"" + Hex(c) + "\"/>\n";
  }
  char hi[64], lo[64];
  std::snprintf(hi, sizeof hi, "%.4g", h.probabilities ? 1.0 : m);
  std::snprintf(lo, sizeof lo, "%.4g", h.probabilities ? 0.0 : -m);
  o += "<text x=\"" + std::to_string(bx + 18) + "\" y=\"" + std::to_string(by + 9) + "\">" + hi + "</text>\n";
  o += "<text x=\"" + std::to_string(bx + 18) + "\" y=\"" + std::to_string(by + bh) + "\">" + lo + "</text>\n";
  o += "<rect x=\"" + std::to_string(bx) + "\" y=\"" + std::to_string(by + bh + 12) +
       "\" width=\"14\" height=\"14\" fill=\"url(#masked)\"/><text x=\"" + std::to_string(bx + 18) +
       "\" y=\"" + std::to_string(by + bh + 23) + "\">masked (−∞)</text>\n";
  o += "</svg>\n";
  return o;
}

}  // namespace internal

namespace {
Status WriteHeatmapFiles(const std::string& tmp, const std::string& dir, const Trace& t,
                         const std::vector<int64_t>& heads_in, ImageFormat format,
                         std::vector<std::string>* written);
}  // namespace

// The whole directory appears at once (WriteDirectoryAtomic, attnflow/file_util.h).
Status WriteTraceHeatmaps(const std::string& dir, const Trace& t,
                          const std::vector<int64_t>& heads, ImageFormat format,
                          std::vector<std::string>* written) {
  std::vector<std::string> paths;
  ATTNFLOW_RETURN_IF_ERROR(WriteDirectoryAtomic(
      dir, format == ImageFormat::kPng ? ".png" : ".svg",
      [&](const std::string& tmp) { return WriteHeatmapFiles(tmp, dir, t, heads, format, &paths); }));
  if (written) written->insert(written->end(), paths.begin(), paths.end());
  return Status::Ok();
}

namespace {
// The heatmap files, written into `tmp`; `written` gets their paths in `dir`.
Status WriteHeatmapFiles(const std::string& tmp, const std::string& dir, const Trace& t,
                         const std::vector<int64_t>& heads_in, ImageFormat format,
                         std::vector<std::string>* written) {
  std::vector<int64_t> heads = heads_in;
  if (heads.empty())
    for (int64_t h = 0; h < t.info.num_heads; ++h) heads.push_back(h);
  const char* ext = format == ImageFormat::kPng ? ".png" : ".svg";
  auto emit = [&](const Heatmap& hm, const std::string& name) -> Status {
    const std::string path = JoinPath(tmp, name + ext);
    if (format == ImageFormat::kPng) {
      Result<std::string> png = internal::HeatmapPng(hm);
      if (!png.ok()) return png.status();
      ATTNFLOW_RETURN_IF_ERROR(WriteFileAtomic(path, png.value()));
    } else {
      ATTNFLOW_RETURN_IF_ERROR(WriteFileAtomic(path, internal::HeatmapSvg(hm)));
    }
    written->push_back(JoinPath(dir, name + ext));
    return Status::Ok();
  };
  std::vector<std::string> labels;
  for (size_t i = 0; i < t.tokens.size(); ++i) labels.push_back(std::to_string(i) + " " + t.tokens[i].text);
  for (const StageDecl& decl : StageTable().stages) {
    if (!decl.heatmap) continue;
    const std::string& name = decl.name;
    const Tensor* x = t.Find(name);
    if (x == nullptr || x->rank() != 4) continue;
    const Shape s = x->shape();
    for (int64_t h : heads) {
      if (h >= s[1]) continue;
      Heatmap hm;
      hm.title = name + " · head " + std::to_string(h) + " · layer " +
                 std::to_string(t.layer) + " · " + t.info.name;
      hm.rows = s[2];
      hm.cols = s[3];
      hm.probabilities = decl.probabilities;
      hm.row_labels = labels;
      hm.col_labels = labels;
      // Weights of masked keys are exactly 0; draw them as masked, not as 0.
      const Tensor* m = hm.probabilities ? t.Find(stage::kMasked) : nullptr;
      if (m != nullptr && m->shape() != s) m = nullptr;
      for (int64_t i = 0; i < s[2] * s[3]; ++i) {
        const int64_t at = h * s[2] * s[3] + i;
        const bool hidden = m != nullptr && internal::Elem(*m, at) == -INFINITY;
        hm.values.push_back(hidden ? -INFINITY : internal::Elem(*x, at));
      }
      ATTNFLOW_RETURN_IF_ERROR(emit(hm, name + "_h" + std::to_string(h)));
    }
  }
  if (!t.decode.empty()) {
    int64_t max_k = 0;
    for (const auto& d : t.decode)
      if (const Tensor* w = d.Find(stage::kWeights)) max_k = std::max<int64_t>(max_k, w->shape()[3]);
    for (int64_t h : heads) {
      Heatmap hm;
      hm.title = "decode weights · head " + std::to_string(h) +
                 " · one row per step against the KV cache";
      hm.rows = static_cast<int64_t>(t.decode.size());
      hm.cols = max_k;
      hm.probabilities = true;
      hm.values.assign(static_cast<size_t>(hm.rows * hm.cols), NAN);
      for (size_t s = 0; s < t.decode.size(); ++s) {
        const Tensor* w = t.decode[s].Find(stage::kWeights);
        hm.row_labels.push_back("+" + std::to_string(s) + " " + t.decode[s].token.text);
        if (w == nullptr || h >= w->shape()[1]) continue;
        const int64_t lk = w->shape()[3];
        for (int64_t j = 0; j < lk; ++j)
          hm.values[s * max_k + j] = internal::Elem(*w, h * lk + j);
      }
      for (int64_t j = 0; j < max_k; ++j) {
        const size_t ju = static_cast<size_t>(j);
        if (ju < labels.size()) hm.col_labels.push_back(labels[ju]);
        else if (ju - labels.size() < t.decode.size())
          hm.col_labels.push_back(std::to_string(j) + " " + t.decode[ju - labels.size()].token.text);
        else hm.col_labels.push_back(std::to_string(j));
      }
      ATTNFLOW_RETURN_IF_ERROR(emit(hm, "decode_weights_h" + std::to_string(h)));
    }
  }
  return Status::Ok();
}
}  // namespace

}  // namespace attnflow::player
