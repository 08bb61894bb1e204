// error_plot.cc — the error-growth figure of `verify --compare OPT REF
// --png/--svg` (attnflow/player.h ErrorPlot): one curve per stage kind of
// the relative error ||got - ref|| / ||ref|| at every layer, log10 y axis,
// the budget as a dashed line. PNG through the shared 6x10-font canvas
// (player/canvas.h), SVG as text.
//
// Invariants: a value <= 0 is drawn at the bottom of the axis (an exact
// match), NaN leaves a gap; the y range covers every positive value and the
// budget, whole decades; at most 10 curves (colours are distinct).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "attnflow/image.h"
#include "attnflow/player.h"
#include "player/canvas.h"

namespace attnflow::player {
namespace {

struct Rgb {
  uint8_t r, g, b;
};
// Ten distinguishable colours (Tableau 10).
constexpr Rgb kCurve[10] = {{0x1f, 0x77, 0xb4}, {0xff, 0x7f, 0x0e}, {0x2c, 0xa0, 0x2c},
                            {0xd6, 0x27, 0x28}, {0x94, 0x67, 0xbd}, {0x8c, 0x56, 0x4b},
                            {0xe3, 0x77, 0xc2}, {0x7f, 0x7f, 0x7f}, {0xbc, 0xbd, 0x22},
                            {0x17, 0xbe, 0xcf}};

struct Axes {
  int lo = -8, hi = 0;  // log10 range, whole decades
  int64_t n = 1;        // points per curve
};

Status Check(const ErrorPlot& p, Axes* a) {
  if (p.curves.empty() || p.curves.size() > 10) {
    return InvalidArgument("error plot: " + std::to_string(p.curves.size()) +
                           " curves (1 to 10 can be drawn)");
  }
  a->n = static_cast<int64_t>(p.x_labels.size());
  double mn = std::numeric_limits<double>::infinity(), mx = 0;
  for (const ErrorCurve& c : p.curves) {
    if (static_cast<int64_t>(c.values.size()) != a->n) {
      return InvalidArgument("error plot: curve '" + c.name + "' has " +
                             std::to_string(c.values.size()) + " values for " +
                             std::to_string(a->n) + " layers");
    }
    for (double v : c.values)
      if (std::isfinite(v) && v > 0) mn = std::min(mn, v), mx = std::max(mx, v);
  }
  if (p.budget > 0) mn = std::min(mn, p.budget), mx = std::max(mx, p.budget);
  if (!(mx > 0)) mn = 1e-8, mx = 1;
  a->lo = static_cast<int>(std::floor(std::log10(std::max(mn, 1e-30))));
  a->hi = static_cast<int>(std::ceil(std::log10(mx)));
  if (a->hi <= a->lo) a->hi = a->lo + 1;
  return Status::Ok();
}

// Position of value v on an axis of `len` pixels (0 = bottom).
double YFrac(double v, const Axes& a) {
  const double l = v > 0 ? std::log10(v) : a.lo;
  return std::clamp((l - a.lo) / double(a.hi - a.lo), 0.0, 1.0);
}

std::string Decade(int e) {
  char b[16];
  std::snprintf(b, sizeof b, "1e%d", e);
  return b;
}

std::string Xml(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

}  // namespace

Result<std::string> ErrorPlotPng(const ErrorPlot& p) {
  Axes a;
  ATTNFLOW_RETURN_IF_ERROR(Check(p, &a));
  using internal::Canvas;
  const int64_t gx = 70, gy = 30, gw = std::max<int64_t>(360, 16 * a.n), gh = 300;
  int64_t legend = 40;
  for (const ErrorCurve& cv : p.curves) legend = std::max(legend, 36 + Canvas::TextWidth(cv.name));
  const int64_t w = std::max(gx + gw + legend + 10, Canvas::TextWidth(p.title) + 16);
  const int64_t h = gy + gh + 50;
  Canvas c(w, h);
  c.Text(8, 8, p.title);
  // Axes, decade grid lines and labels.
  c.Fill(gx, gy, 1, gh, Canvas::kInk);
  c.Fill(gx, gy + gh, gw, 1, Canvas::kInk);
  for (int e = a.lo; e <= a.hi; ++e) {
    const int64_t y = gy + gh - static_cast<int64_t>(std::lround(gh * (e - a.lo) / double(a.hi - a.lo)));
    for (int64_t x = gx; x < gx + gw; x += 4) c.Set(x, y, Canvas::kGrey);
    const std::string s = Decade(e);
    c.Text(gx - 6 - Canvas::TextWidth(s), y - 5, s);
  }
  auto xpos = [&](int64_t i) { return gx + (a.n <= 1 ? gw / 2 : i * (gw - 1) / (a.n - 1)); };
  const int64_t step = std::max<int64_t>(1, (a.n + 14) / 15);
  for (int64_t i = 0; i < a.n; i += step) {
    const std::string s = p.x_labels[static_cast<size_t>(i)];
    c.Text(xpos(i) - Canvas::TextWidth(s) / 2, gy + gh + 6, s);
  }
  c.Text(gx + gw / 2 - Canvas::TextWidth(p.x_title) / 2, gy + gh + 22, p.x_title);
  c.Text(8, gy + gh / 2 + Canvas::TextWidth(p.y_title) / 2, p.y_title, true);
  if (p.budget > 0) {
    const int64_t y = gy + gh - static_cast<int64_t>(std::lround(gh * YFrac(p.budget, a)));
    for (int64_t x = gx; x < gx + gw; x += 8) c.Fill(x, y, 4, 1, Canvas::kInk);
    c.Text(gx + gw - Canvas::TextWidth("budget"), y - 12, "budget");
  }
  for (size_t k = 0; k < p.curves.size(); ++k) {
    const auto& v = p.curves[k].values;
    const uint8_t col = static_cast<uint8_t>(k);
    for (int64_t i = 0; i < a.n; ++i) {
      if (std::isnan(v[static_cast<size_t>(i)])) continue;
      const int64_t x = xpos(i), y = gy + gh - static_cast<int64_t>(std::lround(gh * YFrac(v[static_cast<size_t>(i)], a)));
      c.Fill(x - 1, y - 1, 3, 3, col);
      if (i + 1 < a.n && !std::isnan(v[static_cast<size_t>(i + 1)])) {
        const int64_t y1 = gy + gh - static_cast<int64_t>(std::lround(gh * YFrac(v[static_cast<size_t>(i + 1)], a)));
        c.Line(x, y, xpos(i + 1), y1, col, 2);
      }
    }
    c.Fill(gx + gw + 12, gy + 6 + static_cast<int64_t>(k) * 14, 12, 4, col);
    c.Text(gx + gw + 28, gy + 2 + static_cast<int64_t>(k) * 14, p.curves[k].name);
  }
  std::vector<uint8_t> plte(3 * 245, 0xff);
  for (int k = 0; k < 10; ++k) {
    plte[3 * k] = kCurve[k].r;
    plte[3 * k + 1] = kCurve[k].g;
    plte[3 * k + 2] = kCurve[k].b;
  }
  for (auto [i, v] : {std::pair<int, uint8_t>{Canvas::kInk, 0x20}, {Canvas::kGrey, 0xc8}})
    plte[3 * i] = plte[3 * i + 1] = plte[3 * i + 2] = v;
  return EncodeIndexedPng(c.w(), c.h(), c.pixels(), plte);
}

Result<std::string> ErrorPlotSvg(const ErrorPlot& p) {
  Axes a;
  ATTNFLOW_RETURN_IF_ERROR(Check(p, &a));
  const int64_t gx = 80, gy = 40, gw = std::max<int64_t>(420, 18 * a.n), gh = 320;
  size_t longest = 8;
  for (const ErrorCurve& cv : p.curves) longest = std::max(longest, cv.name.size());
  const int64_t w = gx + gw + 50 + 7 * static_cast<int64_t>(longest), h = gy + gh + 60;
  char b[256];
  std::string o = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(w) +
                  "\" height=\"" + std::to_string(h) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"8\" y=\"18\" font-size=\"13\" font-weight=\"bold\">" + Xml(p.title) + "</text>\n";
  auto ypix = [&](double v) { return gy + gh - gh * YFrac(v, a); };
  auto xpix = [&](int64_t i) { return gx + (a.n <= 1 ? gw / 2.0 : i * (gw - 1.0) / (a.n - 1)); };
  for (int e = a.lo; e <= a.hi; ++e) {
    const double y = gy + gh - gh * (e - a.lo) / double(a.hi - a.lo);
    std::snprintf(b, sizeof b,
                  "<line x1=\"%lld\" y1=\"%.1f\" x2=\"%lld\" y2=\"%.1f\" stroke=\"#ccc\" stroke-dasharray=\"2,3\"/>"
                  "<text x=\"%lld\" y=\"%.1f\" text-anchor=\"end\">1e%d</text>\n",
                  (long long)gx, y, (long long)(gx + gw), y, (long long)(gx - 6), y + 4, e);
    o += b;
  }
  std::snprintf(b, sizeof b,
                "<polyline points=\"%lld,%lld %lld,%lld %lld,%lld\" fill=\"none\" stroke=\"#222\"/>\n",
                (long long)gx, (long long)gy, (long long)gx, (long long)(gy + gh),
                (long long)(gx + gw), (long long)(gy + gh));
  o += b;
  const int64_t step = std::max<int64_t>(1, (a.n + 19) / 20);
  for (int64_t i = 0; i < a.n; i += step) {
    std::snprintf(b, sizeof b, "<text x=\"%.1f\" y=\"%lld\" text-anchor=\"middle\">", xpix(i),
                  (long long)(gy + gh + 16));
    o += b + Xml(p.x_labels[static_cast<size_t>(i)]) + "</text>\n";
  }
  std::snprintf(b, sizeof b, "<text x=\"%lld\" y=\"%lld\" text-anchor=\"middle\">", (long long)(gx + gw / 2),
                (long long)(gy + gh + 36));
  o += b + Xml(p.x_title) + "</text>\n";
  std::snprintf(b, sizeof b,
                "<text x=\"14\" y=\"%lld\" text-anchor=\"middle\" transform=\"rotate(-90 14 %lld)\">",
                (long long)(gy + gh / 2), (long long)(gy + gh / 2));
  o += b + Xml(p.y_title) + "</text>\n";
  if (p.budget > 0) {
    std::snprintf(b, sizeof b,
                  "<line x1=\"%lld\" y1=\"%.1f\" x2=\"%lld\" y2=\"%.1f\" stroke=\"#222\" stroke-dasharray=\"6,4\"/>"
                  "<text x=\"%lld\" y=\"%.1f\" text-anchor=\"end\">budget %g</text>\n",
                  (long long)gx, ypix(p.budget), (long long)(gx + gw), ypix(p.budget),
                  (long long)(gx + gw), ypix(p.budget) - 4, p.budget);
    o += b;
  }
  for (size_t k = 0; k < p.curves.size(); ++k) {
    const Rgb c = kCurve[k];
    char col[8];
    std::snprintf(col, sizeof col, "#%02x%02x%02x", c.r, c.g, c.b);
    std::string pts;
    const auto& v = p.curves[k].values;
    auto flush = [&] {
      if (!pts.empty())
        o += "<polyline points=\"" + pts + "\" fill=\"none\" stroke=\"" + col + "\" stroke-width=\"2\"/>\n";
      pts.clear();
    };
    for (int64_t i = 0; i < a.n; ++i) {
      const double x = v[static_cast<size_t>(i)];
      if (std::isnan(x)) {
        flush();
        continue;
      }
      std::snprintf(b, sizeof b, "%.1f,%.1f ", xpix(i), ypix(x));
      pts += b;
      std::snprintf(b, sizeof b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2\" fill=\"%s\"><title>%s layer %s: %.3g</title></circle>\n",
                    xpix(i), ypix(x), col, Xml(p.curves[k].name).c_str(),
                    Xml(p.x_labels[static_cast<size_t>(i)]).c_str(), x);
      o += b;
    }
    flush();
    std::snprintf(b, sizeof b, "<rect x=\"%lld\" y=\"%lld\" width=\"14\" height=\"4\" fill=\"%s\"/>"
                  "<text x=\"%lld\" y=\"%lld\">", (long long)(gx + gw + 14),
                  (long long)(gy + 8 + 16 * static_cast<int64_t>(k)), col, (long long)(gx + gw + 34),
                  (long long)(gy + 13 + 16 * static_cast<int64_t>(k)));
    o += b + Xml(p.curves[k].name) + "</text>\n";
  }
  return o + "</svg>\n";
}

}  // namespace attnflow::player
