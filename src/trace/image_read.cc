// image_read.cc — reading the ViT view's input image: binary PPM (P6, by
// hand) and PNG (libpng's simplified API, tools/deps/views.apt), and the
// centre-crop + box-filter resize to the model's input side.
//
// Invariants:
//  * Nothing is trusted: a wrong magic, a truncated file, a zero or a
//    declared size over kMaxImagePixels is an error naming the file (no
//    allocation happens before the declared size is checked).
//  * Alpha is composited onto white; 16-bit samples are scaled to 8 bits.
#include <algorithm>
#include <cstring>

#include "attnflow/file_util.h"
#include "attnflow/trace.h"

#if defined(ATTNFLOW_HAVE_PNG)
#include <png.h>
#endif

namespace attnflow::trace {
namespace {

Status BadImage(const std::string& label, const std::string& what) {
  return InvalidArgument("trace --vit: " + label + ": " + what);
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
  if (!b.ok()) return InvalidArgument("trace --vit: " + b.status().message());
  return DecodeImage(b.value(), path);
}

RgbImage CropResize(const RgbImage& in, int64_t side) {
  const int64_t s = std::min(in.width, in.height);
  const int64_t x0 = (in.width - s) / 2, y0 = (in.height - s) / 2;
  RgbImage out;
  out.width = out.height = side;
  out.rgb.assign(static_cast<size_t>(side * side * 3), 0);
  // Output pixel (oy, ox) covers source [oy·s/side, (oy+1)·s/side) (same in
  // x): area-weighted mean of the source pixels it overlaps.
  const double f = static_cast<double>(s) / static_cast<double>(side);
  for (int64_t oy = 0; oy < side; ++oy) {
    const double ya = oy * f, yb = (oy + 1) * f;
    for (int64_t ox = 0; ox < side; ++ox) {
      const double xa = ox * f, xb = (ox + 1) * f;
      double acc[3] = {0, 0, 0}, wsum = 0;
      for (int64_t y = static_cast<int64_t>(ya); y < std::min<int64_t>(s, static_cast<int64_t>(yb) + 1); ++y) {
        const double wy = std::min<double>(y + 1, yb) - std::max<double>(y, ya);
        if (wy <= 0) continue;
        for (int64_t x = static_cast<int64_t>(xa); x < std::min<int64_t>(s, static_cast<int64_t>(xb) + 1); ++x) {
          const double wx = std::min<double>(x + 1, xb) - std::max<double>(x, xa);
          if (wx <= 0) continue;
          const uint8_t* p = &in.rgb[static_cast<size_t>(((y0 + y) * in.width + (x0 + x)) * 3)];
          for (int c = 0; c < 3; ++c) acc[c] += wy * wx * p[c];
          wsum += wy * wx;
        }
      }
      for (int c = 0; c < 3; ++c)
        out.rgb[static_cast<size_t>((oy * side + ox) * 3 + c)] =
            static_cast<uint8_t>(std::clamp(acc[c] / std::max(wsum, 1e-12) + 0.5, 0.0, 255.0));
    }
  }
  return out;
}

}  // namespace attnflow::trace
