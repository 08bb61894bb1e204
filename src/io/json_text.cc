// json_text.cc — JSON text written by hand and base64 (io/json_text.h).
#include "io/json_text.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/utf8.h"

namespace attnflow::json_text {

void AppendJsonString(std::string* out, std::string_view s) {
  out->push_back('"');
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"': *out += "\\\""; break;
        case '\\': *out += "\\\\"; break;
        case '\n': *out += "\\n"; break;
        case '\r': *out += "\\r"; break;
        case '\t': *out += "\\t"; break;
        case '<': *out += "\\u003c"; break;  // never "</script>" inside a page
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
    char32_t cp;
    const int len = utf8::DecodeOne(s, i, &cp);
    if (len > 0) {
      out->append(s.substr(i, static_cast<size_t>(len)));
      i += static_cast<size_t>(len);
    } else {
      *out += "\xEF\xBF\xBD";  // U+FFFD for this byte; go on with the next
      ++i;
    }
  }
  out->push_back('"');
}

void AppendJsonNumber(std::string* out, double v, bool f32) {
  // The value written: a double beyond float's range is ±inf as a float.
  const double shown = f32 ? static_cast<double>(static_cast<float>(v)) : v;
  if (std::isnan(shown)) {
    *out += "\"NaN\"";
    return;
  }
  if (std::isinf(shown)) {
    *out += shown < 0 ? "\"-Infinity\"" : "\"Infinity\"";
    return;
  }
  char buf[64];
  const std::to_chars_result r = f32 ? std::to_chars(buf, buf + sizeof buf, static_cast<float>(v))
                                     : std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, r.ptr);
}

void AppendJsonIntArray(std::string* out, const std::vector<int64_t>& v) {
  out->push_back('[');
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out->push_back(',');
    *out += std::to_string(v[i]);
  }
  out->push_back(']');
}

void AppendBase64(std::string* out, const unsigned char* p, size_t n) {
  static const char kAlpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t i = 0;
  for (; i + 3 <= n; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    out->push_back(kAlpha[v >> 18]);
    out->push_back(kAlpha[(v >> 12) & 63]);
    out->push_back(kAlpha[(v >> 6) & 63]);
    out->push_back(kAlpha[v & 63]);
  }
  if (i < n) {
    uint32_t v = uint32_t{p[i]} << 16;
    if (i + 1 < n) v |= uint32_t{p[i + 1]} << 8;
    out->push_back(kAlpha[v >> 18]);
    out->push_back(kAlpha[(v >> 12) & 63]);
    out->push_back(i + 1 < n ? kAlpha[(v >> 6) & 63] : '=');
    out->push_back('=');
  }
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

}  // namespace attnflow::json_text
