// canvas.h — an 8-bit palette canvas with text in the 6x10 bitmap font,
// shared by the player's PNG figures (heatmaps, error-growth plots); the
// PNG itself is EncodeIndexedPng (attnflow/image.h) of pixels() with a
// palette the figure chooses. Not installed.
//
// Invariants: drawing outside the canvas is clipped (never out of bounds);
// text is printable ASCII (a few typographic characters map to ASCII
// stand-ins, the rest to '?').
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

namespace attnflow::player::internal {

#include "player/font6x10.inc"

// An 8-bit palette canvas with text in the 6x10 font.
class Canvas {
 public:
  static constexpr uint8_t kScaleSteps = 240, kWhiteI = 240, kHatchBgI = 241, kHatchLineI = 242,
                           kInk = 243, kGrey = 244;
  Canvas(int64_t w, int64_t h) : w_(w), h_(h), px_(static_cast<size_t>(w * h), kWhiteI) {}
  int64_t w() const { return w_; }
  int64_t h() const { return h_; }
  void Set(int64_t x, int64_t y, uint8_t c) {
    if (x >= 0 && y >= 0 && x < w_ && y < h_) px_[static_cast<size_t>(y * w_ + x)] = c;
  }
  void Fill(int64_t x, int64_t y, int64_t w, int64_t h, uint8_t c) {
    for (int64_t j = y; j < y + h; ++j)
      for (int64_t i = x; i < x + w; ++i) Set(i, j, c);
  }
  // Printable ASCII; other code points print as '?'. vertical: reads bottom
  // to top, (x, y) is the bottom-left of the first glyph.
  void Text(int64_t x, int64_t y, const std::string& s, bool vertical = false) {
    int64_t k = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      if ((c & 0xC0) == 0x80) continue;  // UTF-8 continuation
      if (c >= 0x80) c = AsciiFor(s, i);
      if (c < 0x20 || c > 0x7e) c = '?';
      const unsigned char* g = kFont6x10[c - 0x20];
      for (int r = 0; r < 10; ++r)
        for (int col = 0; col < 6; ++col) {
          if (!(g[r] & (0x80 >> col))) continue;
          if (vertical) Set(x + r, y - (k * 6 + col), kInk);
          else Set(x + k * 6 + col, y + r, kInk);
        }
      ++k;
    }
  }
  // An ASCII stand-in for the non-ASCII characters of titles and labels
  // (· × – — − and BPE's Ġ Ċ), '?' for the rest.
  static unsigned char AsciiFor(const std::string& s, size_t i) {
    uint32_t cp = 0;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    cp = c & (0x7F >> n);
    for (int k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    switch (cp) {
      case 0xB7: case 0x2013: case 0x2014: case 0x2212: return '-';
      case 0xD7: return 'x';
      case 0x120: return '_';  // byte-level BPE's leading space (Ġ)
      case 0x10A: return '|';  // and newline (Ċ)
      default: return '?';
    }
  }
  static int64_t TextWidth(const std::string& s) {
    int64_t n = 0;
    for (unsigned char c : s) n += (c & 0xC0) != 0x80;
    return n * 6;
  }
  // A line from (x0, y0) to (x1, y1) (Bresenham), `thick` pixels wide.
  void Line(int64_t x0, int64_t y0, int64_t x1, int64_t y1, uint8_t c, int thick = 1) {
    const int64_t dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
    const int64_t sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    int64_t err = dx + dy;
    for (;;) {
      Fill(x0 - thick / 2, y0 - thick / 2, thick, thick, c);
      if (x0 == x1 && y0 == y1) break;
      const int64_t e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }
  const std::vector<uint8_t>& pixels() const { return px_; }

 private:
  int64_t w_, h_;
  std::vector<uint8_t> px_;
};

}  // namespace attnflow::player::internal
