// unicode.cc — UTF-8 decoding and binary-searched Unicode class tables (see
// unicode.h; the tables themselves are generated into unicode_tables.cc).
#include "model/bpe/unicode.h"
#include "core/utf8.h"

namespace attnflow::bpe {
namespace {

bool InRanges(const CodepointRange* r, size_t n, uint32_t cp) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (cp < r[mid].first) {
      hi = mid;
    } else if (cp > r[mid].last) {
      lo = mid + 1;
    } else {
      return true;
    }
  }
  return false;
}

}  // namespace

bool IsLetter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(kLetterRanges, kLetterRangesCount, cp);
}

bool IsNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(kNumberRanges, kNumberRangesCount, cp);
}

bool IsSpace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 9 && cp <= 13);
  return InRanges(kSpaceRanges, kSpaceRangesCount, cp);
}

bool DecodeUtf8(std::string_view s, std::vector<Utf8Char>* out,
                size_t* bad_offset) {
  out->clear();
  out->reserve(s.size());
  char32_t cp;
  for (size_t i = 0; i < s.size();) {
    const int len = utf8::DecodeOne(s, i, &cp);
    if (len == 0) {
      *bad_offset = i;
      return false;
    }
    out->push_back({static_cast<uint32_t>(cp), static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
    i += static_cast<size_t>(len);
  }
  return true;
}

void AppendUtf8(uint32_t cp, std::string* out) { utf8::Append(static_cast<char32_t>(cp), out); }

}  // namespace attnflow::bpe
