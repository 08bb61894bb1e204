// status.cc — names for status codes; bounded quoting of user strings.
#include "attnflow/status.h"

namespace attnflow {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kOutOfRange: return "out_of_range";
    case StatusCode::kIoError: return "io_error";
    case StatusCode::kCorrupt: return "corrupt";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string QuoteBounded(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return "'" + std::string(s) + "'";
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // UTF-8 boundary
  return "'" + std::string(s.substr(0, n)) + "...' (" + std::to_string(s.size()) + " bytes)";
}

std::string CountOf(int64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " +
         (n == 1 ? std::string(one) : many.empty() ? std::string(one) + "s" : std::string(many));
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace attnflow
