// attnflow/image.h — 8-bit RGB images in and out: reading binary PPM (P6)
// and PNG (libpng's simplified API when the build found it,
// tools/deps/views.apt), writing PNG (RGB8 or an 8-bit palette; deflate by
// zlib when the build found it, else stored deflate blocks).
//
// Invariants:
//  * Nothing read is trusted: a wrong magic, a truncated file, a zero size or
//    a declared size over kMaxImagePixels is kInvalidArgument naming the
//    file (`label`); nothing is allocated before the declared size is
//    checked. Alpha is composited onto white; 16-bit samples are scaled to
//    8 bits.
//  * Written PNGs are complete files: signature, IHDR, (PLTE), one IDAT
//    (a zlib stream with its Adler-32), IEND, every chunk with its CRC-32;
//    filter type 0 (None) on every row. The same pixels give the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/status.h"

namespace attnflow {

// An 8-bit RGB image.
struct RgbImage {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // height × width × 3
};

// The largest image a reader accepts (width × height).
constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

// PNG (any bit depth, palette, alpha dropped on white) or binary PPM (P6,
// maxval 1..65535), told apart by their magic.
Result<RgbImage> DecodeImage(std::string_view bytes, const std::string& label);
// The same for a file (`path` is the label).
Result<RgbImage> ReadImageFile(const std::string& path);

// RGB8 pixels (width × height × 3) -> PNG bytes. kInvalidArgument for a
// size outside 1..16384 or a pixel count that does not match.
Result<std::string> EncodePng(int64_t width, int64_t height, const std::vector<uint8_t>& rgb);
// An 8-bit palette image: one index per pixel (width × height) into
// `palette` (RGB triples, 1..256 entries) -> PNG bytes. kInvalidArgument for
// a size outside 1..16384, a pixel count that does not match or a palette
// of the wrong size; indices past the palette are not checked (a viewer
// shows them as it likes).
Result<std::string> EncodeIndexedPng(int64_t width, int64_t height,
                                     const std::vector<uint8_t>& indices,
                                     const std::vector<uint8_t>& palette);

}  // namespace attnflow
