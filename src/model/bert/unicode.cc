// unicode.cc — lookups over the generated Unicode tables and UTF-8 coding
// for the WordPiece tokenizer. Binary searches over sorted tables; no
// allocation except into caller-provided strings.
#include "model/bert/unicode.h"
#include "core/utf8.h"

#include <algorithm>

namespace attnflow::wordpiece_unicode {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;
constexpr char32_t kHangulBase = 0xAC00, kHangulLast = 0xD7A3;
constexpr char32_t kJamoL = 0x1100, kJamoV = 0x1161, kJamoT = 0x11A7;
constexpr int kJamoVCount = 21, kJamoTCount = 28;

// Index of the run containing c in a run table starting at 0.
size_t RunIndex(const uint32_t* starts, size_t count, char32_t c) {
  const uint32_t* it = std::upper_bound(starts, starts + count, static_cast<uint32_t>(c));
  return static_cast<size_t>(it - starts) - 1;  // starts[0] == 0, so >= 0
}

}  // namespace

CharClass ClassOf(char32_t c) {
  if (c > kMaxCodePoint) return CharClass::kOther;
  return static_cast<CharClass>(kClassValue[RunIndex(kClassStart, kClassCount, c)]);
}

bool IsWhiteSpace(char32_t c) {
  return std::binary_search(kWhiteSpace, kWhiteSpace + kWhiteSpaceCount,
                            static_cast<uint32_t>(c));
}

uint8_t CombiningClass(char32_t c) {
  if (c > kMaxCodePoint) return 0;
  return kCccValue[RunIndex(kCccStart, kCccCount, c)];
}

void AppendLower(char32_t c, std::u32string* out) {
  const uint32_t u = static_cast<uint32_t>(c);
  const uint32_t* it = std::lower_bound(kLowerFrom, kLowerFrom + kLowerCount, u);
  if (it != kLowerFrom + kLowerCount && *it == u) {
    out->push_back(static_cast<char32_t>(kLowerTo[it - kLowerFrom]));
    return;
  }
  for (size_t i = 0; i < kLowerMultiCount; ++i) {
    const uint32_t* m = kLowerMulti + 4 * i;
    if (m[0] != u) continue;
    for (int j = 1; j < 4 && m[j] != 0; ++j) out->push_back(static_cast<char32_t>(m[j]));
    return;
  }
  out->push_back(c);
}

void AppendDecomposition(char32_t c, std::u32string* out) {
  if (c >= kHangulBase && c <= kHangulLast) {
    const int s = static_cast<int>(c - kHangulBase);
    out->push_back(kJamoL + s / (kJamoVCount * kJamoTCount));
    out->push_back(kJamoV + (s % (kJamoVCount * kJamoTCount)) / kJamoTCount);
    if (s % kJamoTCount != 0) out->push_back(kJamoT + s % kJamoTCount);
    return;
  }
  const uint32_t u = static_cast<uint32_t>(c);
  const uint32_t* it = std::lower_bound(kDecompCp, kDecompCp + kDecompCount, u);
  if (it != kDecompCp + kDecompCount && *it == u) {
    const size_t i = static_cast<size_t>(it - kDecompCp);
    for (size_t j = 0; j < kDecompLength[i]; ++j) {
      out->push_back(static_cast<char32_t>(kDecompPool[kDecompOffset[i] + j]));
    }
    return;
  }
  out->push_back(c);
}

std::u32string Nfd(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendDecomposition(c, &out);
  // Canonical ordering: stable-sort each maximal run of non-starters by
  // combining class.
  size_t i = 0;
  while (i < out.size()) {
    if (CombiningClass(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && CombiningClass(out[j]) != 0) ++j;
    if (j - i > 1) {
      std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i),
                       out.begin() + static_cast<std::ptrdiff_t>(j),
                       [](char32_t a, char32_t b) {
                         return CombiningClass(a) < CombiningClass(b);
                       });
    }
    i = j;
  }
  return out;
}

bool DecodeUtf8(std::string_view in, std::u32string* out) {
  out->clear();
  out->reserve(in.size());
  char32_t cp;
  for (size_t i = 0; i < in.size();) {
    const int len = utf8::DecodeOne(in, i, &cp);
    if (len == 0) return false;
    out->push_back(cp);
    i += static_cast<size_t>(len);
  }
  return true;
}

void AppendUtf8(char32_t c, std::string* out) { utf8::Append(c, out); }

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

}  // namespace attnflow::wordpiece_unicode
