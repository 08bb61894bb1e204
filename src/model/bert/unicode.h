// unicode.h — the Unicode properties the BERT WordPiece tokenizer needs
// (internal). The data lives in unicode_tables.cc, GENERATED from Python's
// unicodedata by tools/models/gen_wordpiece_unicode.py; this header declares
// the tables and small lookups over them.
//
// Invariants: every lookup is total over char32_t (values above U+10FFFF or
// surrogates are treated as class Other, like unassigned code points); all
// tables are sorted by code point so lookups are binary searches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnflow::wordpiece_unicode {

// Generated data (see unicode_tables.cc for the layouts).
extern const char kUnicodeVersion[];
extern const uint32_t kClassStart[];
extern const uint8_t kClassValue[];
extern const size_t kClassCount;
extern const uint32_t kWhiteSpace[];
extern const size_t kWhiteSpaceCount;
extern const uint32_t kLowerFrom[];
extern const uint32_t kLowerTo[];
extern const size_t kLowerCount;
extern const uint32_t kLowerMulti[];  // groups of 4: source, 3 targets
extern const size_t kLowerMultiCount;
extern const uint32_t kDecompCp[];
extern const uint16_t kDecompOffset[];
extern const uint8_t kDecompLength[];
extern const size_t kDecompCount;
extern const uint32_t kDecompPool[];
extern const size_t kDecompPoolSize;
extern const uint32_t kCccStart[];
extern const uint8_t kCccValue[];
extern const size_t kCccCount;

// Must match the generator's CLASS_* constants.
enum class CharClass : uint8_t { kNone = 0, kOther = 1, kPunct = 2, kMn = 3 };

CharClass ClassOf(char32_t c);
// White_Space property (Rust char::is_whitespace).
bool IsWhiteSpace(char32_t c);
// Canonical combining class (0 for starters).
uint8_t CombiningClass(char32_t c);
// Appends the full lowercase mapping of `c` (1..3 code points) to `out`.
void AppendLower(char32_t c, std::u32string* out);
// Appends the full canonical decomposition of `c` (itself if none) to `out`,
// without canonical reordering (see Nfd()).
void AppendDecomposition(char32_t c, std::u32string* out);
// NFD of a whole string: full decomposition + canonical ordering.
std::u32string Nfd(std::u32string_view s);

// UTF-8 <-> UTF-32. Decoding is strict (overlong forms, surrogates and
// values above U+10FFFF are rejected): it returns false on invalid input.
bool DecodeUtf8(std::string_view in, std::u32string* out);
void AppendUtf8(char32_t c, std::string* out);
std::string EncodeUtf8(std::u32string_view s);

}  // namespace attnflow::wordpiece_unicode
