// io/json_text.h — JSON text written by hand (internal): string literals,
// numbers and integer arrays appended to a std::string, and base64 (RFC 4648,
// with padding) for binary payloads inside JSON strings. Used where the
// output's exact bytes matter (the player's page JSON, trace metadata):
// nlohmann's dump() is for reading back, not for these.
//
// Invariants:
//  * AppendJsonString writes valid UTF-8 only: each byte of a malformed
//    UTF-8 sequence (core/utf8.h's strict rule) becomes U+FFFD. It escapes
//    '"', '\\', control characters and DEL, and writes '<' as \u003c, so the
//    text can sit inside an HTML <script> element ("</script>" never
//    appears).
//  * AppendJsonNumber writes the shortest text that reads back to the same
//    double (to the same float when `f32`); NaN and ±inf (of the value
//    written: a double beyond float's range is ±inf when `f32`) are the
//    strings "NaN", "Infinity", "-Infinity" (JSON has no such numbers).
//  * DecodeBase64 accepts exactly what AppendBase64 writes (the standard
//    alphabet, '=' padding only at the end, length a multiple of 4).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace attnflow::json_text {

void AppendJsonString(std::string* out, std::string_view s);
void AppendJsonNumber(std::string* out, double v, bool f32);
// [1,2,3]
void AppendJsonIntArray(std::string* out, const std::vector<int64_t>& v);

void AppendBase64(std::string* out, const unsigned char* p, size_t n);
// False (and `out` unspecified) for anything that is not valid base64.
bool DecodeBase64(std::string_view in, std::string* out);

}  // namespace attnflow::json_text
