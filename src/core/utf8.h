// core/utf8.h — the one UTF-8 codec of attnflow (internal): strict decoding
// of one code point and encoding of one code point. Used by the file
// validators (io/file_util.cc IsValidUtf8), the WordPiece tokenizer
// (model/bert/unicode.cc) and the byte-level BPE tokenizer
// (model/bpe/unicode.cc).
//
// Strict means RFC 3629: no overlong forms, no surrogates (U+D800..DFFF), no
// code point above U+10FFFF, no truncated or stray continuation bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnflow::utf8 {

// Decodes the code point starting at s[i] into *cp. Returns its length in
// bytes (1..4), or 0 when the bytes at i are not valid UTF-8.
inline int DecodeOne(std::string_view s, size_t i, char32_t* cp) {
  const size_t n = s.size();
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  char32_t c, min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, c = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, c = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, c = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + static_cast<size_t>(len) > n) return 0;
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + static_cast<size_t>(k)]);
    if ((b & 0xC0) != 0x80) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return len;
}

// Appends the UTF-8 encoding of cp (assumed a valid scalar value).
inline void Append(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace attnflow::utf8
