// image.cc — 8-bit RGB images in and out (attnflow/image.h): the binary
// PPM reader (by hand), the PNG reader (libpng's simplified API when
// ATTNFLOW_HAVE_PNG), and the PNG writer (chunks and CRC-32 here; deflate by
// zlib, level 9, when ATTNFLOW_HAVE_ZLIB, else stored blocks with the
// Adler-32 computed here).
#include "attnflow/image.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "attnflow/file_util.h"

#if defined(ATTNFLOW_HAVE_PNG)
#include <png.h>
#endif
#ifdef ATTNFLOW_HAVE_ZLIB
#include <zlib.h>
#endif

namespace attnflow {
namespace {

// ---- PNG writing -------------------------------------------------------------

uint32_t Crc32(const uint8_t* p, size_t n, uint32_t crc = 0) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

void Be32(std::string* o, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) o->push_back(static_cast<char>((v >> s) & 0xff));
}

void Chunk(std::string* o, const char* type, const std::string& data) {
  Be32(o, static_cast<uint32_t>(data.size()));
  std::string body = std::string(type, 4) + data;
  o->append(body);
  Be32(o, Crc32(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
}

// A zlib stream of `raw`: real deflate (zlib, level 9) when available, else
// stored blocks with the Adler-32 computed here.
std::string ZlibStream(const std::string& raw) {
#ifdef ATTNFLOW_HAVE_ZLIB
  uLongf n = compressBound(static_cast<uLong>(raw.size()));
  std::string out(n, '\0');
  if (compress2(reinterpret_cast<Bytef*>(out.data()), &n,
                reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()),
                9) == Z_OK) {
    out.resize(n);
    return out;
  }
#endif
  std::string z;
  z.push_back(0x78);
  z.push_back(0x01);
  size_t pos = 0;
  do {
    const size_t n = std::min<size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    z.push_back(last ? 1 : 0);
    z.push_back(static_cast<char>(n & 0xff));
    z.push_back(static_cast<char>(n >> 8));
    z.push_back(static_cast<char>(~n & 0xff));
    z.push_back(static_cast<char>((~n >> 8) & 0xff));
    z.append(raw, pos, n);
    pos += n;
  } while (pos < raw.size());
  uint32_t a = 1, b = 0;  // Adler-32
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  Be32(&z, (b << 16) | a);
  return z;
}

Status CheckPngSize(int64_t width, int64_t height) {
  if (width <= 0 || height <= 0 || width > 16384 || height > 16384) {
    return InvalidArgument("png: size " + std::to_string(width) + "x" + std::to_string(height) +
                           " is outside 1..16384");
  }
  return Status::Ok();
}

// The PNG file of `raw` scanlines (each a filter byte 0 + the row's bytes).
std::string PngFile(int64_t width, int64_t height, uint8_t color_type, const std::string* plte,
                    const std::string& raw) {
  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  Be32(&ihdr, static_cast<uint32_t>(width));
  Be32(&ihdr, static_cast<uint32_t>(height));
  // 8-bit samples, deflate, no filter method / interlace.
  ihdr += std::string{'\x08', static_cast<char>(color_type), '\0', '\0', '\0'};
  Chunk(&png, "IHDR", ihdr);
  if (plte != nullptr) Chunk(&png, "PLTE", *plte);
  Chunk(&png, "IDAT", ZlibStream(raw));
  Chunk(&png, "IEND", "");
  return png;
}

// Raw scanlines of `rows` rows of `row_bytes` bytes each.
std::string Scanlines(const uint8_t* data, int64_t rows, int64_t row_bytes) {
  std::string raw;
  raw.reserve(static_cast<size_t>(rows * (row_bytes + 1)));
  for (int64_t y = 0; y < rows; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(data + y * row_bytes), static_cast<size_t>(row_bytes));
  }
  return raw;
}

// ---- reading -------------------------------------------------------------------

Status BadImage(const std::string& label, const std::string& what) {
  return InvalidArgument("image: " + label + ": " + what);
}

Status CheckSize(const std::string& label, int64_t w, int64_t h) {
  if (w < 1 || h < 1) {
    return BadImage(label, "zero-size image (" + std::to_string(w) + " × " + std::to_string(h) + ")");
  }
  if (w > (int64_t{1} << 20) || h > (int64_t{1} << 20) || w * h > kMaxImagePixels) {
    return BadImage(label, "declared size " + std::to_string(w) + " × " + std::to_string(h) +
                               " is over the limit of " + std::to_string(kMaxImagePixels) +
                               " pixels");
  }
  return Status::Ok();
}

// PPM P6: "P6" ws width ws height ws maxval one-ws raster; comments (#) in
// the header.
Result<RgbImage> DecodePpm(std::string_view b, const std::string& label) {
  size_t i = 2;
  auto skip = [&] {
    while (i < b.size()) {
      if (b[i] == '#') {
        while (i < b.size() && b[i] != '\n') ++i;
      } else if (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
        ++i;
      } else {
        break;
      }
    }
  };
  auto num = [&](const char* what, int64_t* out) -> Status {
    skip();
    if (i >= b.size() || b[i] < '0' || b[i] > '9') {
      return BadImage(label, std::string("PPM header: ") + what + " missing or not a number (truncated?)");
    }
    int64_t v = 0;
    while (i < b.size() && b[i] >= '0' && b[i] <= '9') {
      v = v * 10 + (b[i] - '0');
      if (v > (int64_t{1} << 40)) return BadImage(label, std::string("PPM header: ") + what + " is absurdly large");
      ++i;
    }
    *out = v;
    return Status::Ok();
  };
  int64_t w = 0, h = 0, maxval = 0;
  ATTNFLOW_RETURN_IF_ERROR(num("width", &w));
  ATTNFLOW_RETURN_IF_ERROR(num("height", &h));
  ATTNFLOW_RETURN_IF_ERROR(num("maxval", &maxval));
  ATTNFLOW_RETURN_IF_ERROR(CheckSize(label, w, h));
  if (maxval < 1 || maxval > 65535) {
    return BadImage(label, "PPM maxval " + std::to_string(maxval) + " is outside [1, 65535]");
  }
  if (i >= b.size()) return BadImage(label, "PPM header ends before the raster (truncated)");
  ++i;  // the single whitespace byte
  const int64_t bps = maxval > 255 ? 2 : 1;
  const int64_t need = w * h * 3 * bps;
  const int64_t have = static_cast<int64_t>(b.size() - i);
  if (have < need) {
    return BadImage(label, "truncated PPM: " + std::to_string(w) + " × " + std::to_string(h) +
                               " needs " + std::to_string(need) + " raster bytes, the file has " +
                               std::to_string(have));
  }
  RgbImage img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w * h * 3));
  const auto* p = reinterpret_cast<const unsigned char*>(b.data() + i);
  for (int64_t k = 0; k < w * h * 3; ++k) {
    const int64_t v = bps == 2 ? (p[2 * k] << 8) | p[2 * k + 1] : p[k];
    img.rgb[static_cast<size_t>(k)] =
        static_cast<uint8_t>(std::min<int64_t>(255, (v * 255 + maxval / 2) / maxval));
  }
  return img;
}

#if defined(ATTNFLOW_HAVE_PNG)
Result<RgbImage> DecodePng(std::string_view b, const std::string& label) {
  png_image im;
  std::memset(&im, 0, sizeof im);
  im.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&im, b.data(), b.size())) {
    const std::string msg = im.message;
    png_image_free(&im);
    return BadImage(label, "not a readable PNG (" + msg + ")");
  }
  const Status st = CheckSize(label, im.width, im.height);
  if (!st.ok()) {
    png_image_free(&im);
    return st;
  }
  im.format = PNG_FORMAT_RGB;  // alpha composited onto the background below
  png_color white{255, 255, 255};
  RgbImage img;
  img.width = im.width;
  img.height = im.height;
  img.rgb.resize(PNG_IMAGE_SIZE(im));
  if (!png_image_finish_read(&im, &white, img.rgb.data(), 0, nullptr)) {
    const std::string msg = im.message;
    png_image_free(&im);
    return BadImage(label, "corrupt or truncated PNG (" + msg + ")");
  }
  png_image_free(&im);
  return img;
}
#endif

}  // namespace

Result<std::string> EncodePng(int64_t width, int64_t height, const std::vector<uint8_t>& rgb) {
  ATTNFLOW_RETURN_IF_ERROR(CheckPngSize(width, height));
  if (static_cast<int64_t>(rgb.size()) != width * height * 3) {
    return InvalidArgument("png: " + std::to_string(rgb.size()) + " bytes of pixels, expected " +
                           std::to_string(width * height * 3));
  }
  return PngFile(width, height, 2, nullptr, Scanlines(rgb.data(), height, width * 3));
}

Result<std::string> EncodeIndexedPng(int64_t width, int64_t height,
                                     const std::vector<uint8_t>& indices,
                                     const std::vector<uint8_t>& palette) {
  ATTNFLOW_RETURN_IF_ERROR(CheckPngSize(width, height));
  if (static_cast<int64_t>(indices.size()) != width * height) {
    return InvalidArgument("png: " + std::to_string(indices.size()) + " palette indices, expected " +
                           std::to_string(width * height));
  }
  if (palette.empty() || palette.size() % 3 != 0 || palette.size() > 256 * 3) {
    return InvalidArgument("png: a palette of " + std::to_string(palette.size()) +
                           " bytes is not 1..256 RGB triples");
  }
  const std::string plte(palette.begin(), palette.end());
  return PngFile(width, height, 3, &plte, Scanlines(indices.data(), height, width));
}

Result<RgbImage> DecodeImage(std::string_view bytes, const std::string& label) {
  if (bytes.empty()) return BadImage(label, "empty file");
  if (bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] == '6') return DecodePpm(bytes, label);
  static const char kPng[8] = {'\x89', 'P', 'N', 'G', '\r', '\n', '\x1a', '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) {
#if defined(ATTNFLOW_HAVE_PNG)
    return DecodePng(bytes, label);
#else
    return BadImage(label, "this build has no libpng (tools/deps/views.apt); convert to PPM (P6)");
#endif
  }
  if (bytes.size() >= 2 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '5') {
    return BadImage(label, std::string("PNM type P") + bytes[1] + " is not supported; use binary PPM (P6) or PNG");
  }
  return BadImage(label, "unknown image format (neither PNG nor binary PPM 'P6' magic)");
}

Result<RgbImage> ReadImageFile(const std::string& path) {
  Result<std::string> b = ReadFileString(path);
  if (!b.ok()) return InvalidArgument("image: " + b.status().message());
  return DecodeImage(b.value(), path);
}

}  // namespace attnflow
