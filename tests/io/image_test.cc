// image_test.cc — the image codec (include/attnflow/image.h): PNG files the
// writer makes are valid for independent readers (every chunk CRC against
// a bitwise CRC-32 written here, the IDAT inflated by zlib — or the stored
// blocks taken apart by hand — and the Adler-32 recomputed), RGB and
// palette images hold exactly the given pixels; the readers decode PPM
// (8- and 16-bit) and PNG (libpng) and refuse bad files with a message
// naming the file.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attnflow/image.h"

#ifdef ATTNFLOW_HAVE_ZLIB
#include <zlib.h>
#endif

namespace attnflow {
namespace {

uint32_t BitCrc(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}
uint32_t Be(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint8_t(s[at + 3]);
}


TEST(ImagePng, RgbIsValidAndHoldsThePixels) {
  const int64_t w = 300, h = 250;  // > 65535 raw bytes: several stored blocks
  std::vector<uint8_t> px(w * h * 3);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>(i * 7 + i / 5);
  Result<std::string> png = EncodePng(w, h, px);
  ASSERT_TRUE(png.ok());
  const std::string& s = png.value();
  ASSERT_EQ(s.substr(0, 8), "\x89PNG\r\n\x1a\n");
  size_t at = 8;
  std::string idat;
  std::vector<std::string> types;
  while (at < s.size()) {
    const uint32_t n = Be(s, at);
    const std::string type = s.substr(at + 4, 4), body = s.substr(at + 8, n);
    EXPECT_EQ(Be(s, at + 8 + n), BitCrc(type + body)) << type;
    if (type == "IHDR") {
      EXPECT_EQ(Be(body, 0), uint32_t(w));
      EXPECT_EQ(Be(body, 4), uint32_t(h));
    }
    if (type == "IDAT") idat += body;
    types.push_back(type);
    at += 12 + n;
  }
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
  std::string raw;
  size_t p = 2;
#ifdef ATTNFLOW_HAVE_ZLIB
  // Real deflate: inflate with zlib (an independent decoder).
  raw.resize(size_t(h * (w * 3 + 1)));
  uLongf rn = raw.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &rn,
                       reinterpret_cast<const Bytef*>(idat.data()), idat.size()), Z_OK);
  raw.resize(rn);
  EXPECT_LT(idat.size(), raw.size());  // compressed, not stored
  p = idat.size() - 4;
#else
  // Inflate the stored blocks by hand.
  for (bool last = false; !last;) {
    last = idat[p] & 1;
    ASSERT_EQ((idat[p] >> 1) & 3, 0);
    const size_t len = uint8_t(idat[p + 1]) | (uint8_t(idat[p + 2]) << 8);
    const size_t nlen = uint8_t(idat[p + 3]) | (uint8_t(idat[p + 4]) << 8);
    ASSERT_EQ(len ^ 0xFFFF, nlen);
    raw += idat.substr(p + 5, len);
    p += 5 + len;
  }
#endif
  ASSERT_EQ(raw.size(), size_t(h * (w * 3 + 1)));
  for (int64_t y = 0; y < h; ++y) {
    ASSERT_EQ(raw[y * (w * 3 + 1)], 0);
    ASSERT_EQ(std::memcmp(raw.data() + y * (w * 3 + 1) + 1, px.data() + y * w * 3, w * 3), 0);
  }
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) a = (a + c) % 65521, b = (b + a) % 65521;
  EXPECT_EQ(Be(idat, p), (b << 16) | a);
  EXPECT_FALSE(EncodePng(0, 5, {}).ok());
  EXPECT_FALSE(EncodePng(2, 2, std::vector<uint8_t>(5)).ok());
}

// A palette image: the chunks are IHDR (colour type 3), PLTE (the palette as
// given), IDAT, IEND, and the inflated rows are filter 0 + the indices.
TEST(ImagePng, PaletteImageHoldsTheIndicesAndThePalette) {
  const int64_t w = 7, h = 5;
  std::vector<uint8_t> idx(w * h);
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = static_cast<uint8_t>((i * 5) % 3);
  const std::vector<uint8_t> palette = {255, 0, 0, 0, 255, 0, 0, 0, 255};
  Result<std::string> png = EncodeIndexedPng(w, h, idx, palette);
  ASSERT_TRUE(png.ok()) << png.status().ToString();
  const std::string& s = png.value();
  ASSERT_EQ(s.substr(0, 8), "\x89PNG\r\n\x1a\n");
  std::vector<std::string> types;
  std::string idat, plte, ihdr;
  for (size_t at = 8; at < s.size();) {
    const uint32_t n = Be(s, at);
    const std::string type = s.substr(at + 4, 4), body = s.substr(at + 8, n);
    EXPECT_EQ(Be(s, at + 8 + n), BitCrc(type + body)) << type;
    if (type == "IHDR") ihdr = body;
    if (type == "PLTE") plte = body;
    if (type == "IDAT") idat += body;
    types.push_back(type);
    at += 12 + n;
  }
  EXPECT_EQ(types, (std::vector<std::string>{"IHDR", "PLTE", "IDAT", "IEND"}));
  ASSERT_EQ(ihdr.size(), 13u);
  EXPECT_EQ(Be(ihdr, 0), uint32_t(w));
  EXPECT_EQ(Be(ihdr, 4), uint32_t(h));
  EXPECT_EQ(ihdr[8], 8);  // bit depth
  EXPECT_EQ(ihdr[9], 3);  // colour type: palette
  EXPECT_EQ(plte, std::string(palette.begin(), palette.end()));
#ifdef ATTNFLOW_HAVE_ZLIB
  std::string raw(size_t(h * (w + 1)), '\0');
  uLongf rn = raw.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &rn,
                       reinterpret_cast<const Bytef*>(idat.data()), idat.size()), Z_OK);
  ASSERT_EQ(rn, raw.size());
  for (int64_t y = 0; y < h; ++y) {
    EXPECT_EQ(raw[y * (w + 1)], 0);
    EXPECT_EQ(std::memcmp(raw.data() + y * (w + 1) + 1, idx.data() + y * w, w), 0) << y;
  }
#endif
  EXPECT_FALSE(EncodeIndexedPng(w, h, std::vector<uint8_t>(w * h - 1), palette).ok());
  EXPECT_FALSE(EncodeIndexedPng(w, h, idx, {1, 2}).ok());
  EXPECT_FALSE(EncodeIndexedPng(w, h, idx, std::vector<uint8_t>(257 * 3)).ok());
  EXPECT_FALSE(EncodeIndexedPng(0, h, {}, palette).ok());
}

std::string Ppm(int64_t w, int64_t h, const std::string& raster) {
  return "P6\n# a comment\n" + std::to_string(w) + " " + std::to_string(h) + "\n255\n" + raster;
}

TEST(ImageRead, PpmDecodesAndBadImagesNameTheFile) {
  Result<RgbImage> ok = DecodeImage(Ppm(2, 1, std::string("\x01\x02\x03\xff\x00\x80", 6)), "a.ppm");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->width, 2);
  EXPECT_EQ(ok->rgb, (std::vector<uint8_t>{1, 2, 3, 255, 0, 128}));
  // 16-bit PPM: scaled to 8 bits.
  Result<RgbImage> w16 = DecodeImage("P6 1 1 65535\n" + std::string("\xff\xff\x00\x00\x80\x00", 6), "b.ppm");
  ASSERT_TRUE(w16.ok());
  EXPECT_EQ(w16->rgb, (std::vector<uint8_t>{255, 0, 128}));
  for (const auto& [bytes, words] : std::vector<std::pair<std::string, std::string>>{
           {"", "empty"},
           {"GIF89a....", "unknown image format"},
           {"P3 1 1 255 0 0 0", "not supported"},
           {"P6\n4 4\n255\n" + std::string(10, 'x'), "truncated"},
           {"P6\n4", "missing"},
           {"P6\n0 4\n255\n", "zero-size"},
           {"P6\n100000 100000\n255\n", "over the limit"},
           {"P6\n99999999999999999999 1\n255\n", "large"},
           {"P6\n1 1\n0\n\x01\x02\x03", "maxval"}}) {
    Result<RgbImage> r = DecodeImage(bytes, "bad.img");
    ASSERT_FALSE(r.ok()) << words;
    EXPECT_NE(r.status().message().find("bad.img"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  }
}

#if defined(ATTNFLOW_HAVE_PNG)
TEST(ImageRead, PngRoundTripsAndBadPngsNameTheFile) {
  std::vector<uint8_t> rgb;
  for (int i = 0; i < 5 * 3; ++i)
    for (int c = 0; c < 3; ++c) rgb.push_back(static_cast<uint8_t>(i * 16 + c * 5));
  Result<std::string> png = EncodePng(5, 3, rgb);  // the project's own encoder
  ASSERT_TRUE(png.ok());
  Result<RgbImage> back = DecodeImage(png.value(), "ok.png");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->width, 5);
  EXPECT_EQ(back->height, 3);
  EXPECT_EQ(back->rgb, rgb);
  Result<RgbImage> cut = DecodeImage(png->substr(0, png->size() / 2), "cut.png");
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("cut.png"), std::string::npos);
#if defined(ATTNFLOW_HAVE_ZLIB)
  // A valid IHDR (correct CRC) that declares 100000 x 100000 pixels: refused
  // before anything is allocated.
  std::string huge = png.value();
  const unsigned char dims[8] = {0, 1, 0x86, 0xA0, 0, 1, 0x86, 0xA0};
  std::memcpy(&huge[16], dims, 8);
  const uLong crc = crc32(0, reinterpret_cast<const Bytef*>(huge.data() + 12), 17);
  for (int k = 0; k < 4; ++k) huge[29 + k] = static_cast<char>((crc >> (24 - 8 * k)) & 0xff);
  Result<RgbImage> h = DecodeImage(huge, "huge.png");
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("huge.png"), std::string::npos);
  EXPECT_NE(h.status().message().find("limit"), std::string::npos) << h.status().message();
#endif
}
#endif

}  // namespace
}  // namespace attnflow
