// wordpiece.h (fuzz harness) — the BERT WordPiece tokenizer on arbitrary
// text (valid and invalid UTF-8) and on arbitrary vocabularies.
//
// Input byte 0 selects the mode and the tokenizer options:
//   bit 0 = 0: TEXT mode — a fixed vocabulary (specials, ## pieces, accents,
//              CJK, punctuation, emoji), the rest of the input is the text;
//   bit 0 = 1: VOCAB mode — the rest of the input is a vocab.txt image (one
//              token per line) and a few fixed texts are encoded with it.
//   bits 1-6: lowercase, strip_accents (auto/on/off), handle_chinese_chars,
//             clean_text, a small max_input_chars_per_word.
// Properties (the header's invariants):
//  * Encode never fails on valid UTF-8 and fails with kInvalidArgument on
//    invalid UTF-8; ids are in [0, VocabSize()); with add_special the first id
//    is [CLS] and the last [SEP];
//  * Decode of those ids succeeds and is valid UTF-8; ids outside the
//    vocabulary are kOutOfRange; Normalize/PreTokenize agree with Encode on
//    validity and produce valid UTF-8;
//  * a vocabulary is accepted or rejected with kCorrupt / kInvalidArgument,
//    never a crash; TokenText is total.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../common/fuzz_common.h"
#include "model/bert/wordpiece.h"

namespace attnflow_fuzz {
namespace wordpiece_detail {

inline std::vector<std::string> FixedVocab() {
  return {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b", "c", "the", "##s",
          "##ing", "##ed", "un", "##able", "token", "##izer", "play", "hello", "world",
          ",", ".", "!", "?", "'", "-", "(", ")", "\xc3\xa9", "caf\xc3\xa9", "cafe",
          "\xe4\xb8\xad", "\xe6\x96\x87", "##\xe6\x96\x87", "\xf0\x9f\x98\x80", "1", "2",
          "##1", "##0", "x", "##x", "i", "\xc4\xb1", "stra\xc3\x9f" "e", "strasse", "##e",
          "\xce\xb1", "\xce\xb2", "##\xcf\x82", "[unused0]", "##", "#", "\xd8\xb9",
          "\xe0\xa4\x95", "##\xe0\xa4\xbf", " ", ""};
}

inline attnflow::WordPieceOptions Options(uint8_t b) {
  attnflow::WordPieceOptions o;
  o.lowercase = (b >> 1) & 1;
  const int sa = (b >> 2) & 3;
  o.strip_accents = sa == 0 || sa == 3 ? -1 : sa == 1 ? 1 : 0;
  o.handle_chinese_chars = !((b >> 4) & 1);
  o.clean_text = !((b >> 5) & 1);
  o.max_input_chars_per_word = (b >> 6) & 1 ? 5 : 100;
  return o;
}

inline void CheckText(const attnflow::WordPieceTokenizer& t, const std::string& text) {
  using namespace attnflow;
  const bool valid = IsUtf8(text);
  for (bool add_special : {true, false}) {
    Result<std::vector<int32_t>> ids = t.Encode(text, add_special);
    if (!valid) {
      FUZZ_CHECK(!ids.ok() && ids.status().code() == StatusCode::kInvalidArgument,
                 "invalid UTF-8 not rejected with kInvalidArgument");
      continue;
    }
    FUZZ_CHECK(ids.ok(), "Encode failed on valid UTF-8: " + ids.status().ToString());
    for (int32_t id : ids.value()) {
      FUZZ_CHECK(id >= 0 && id < t.VocabSize(), "id out of range: " + std::to_string(id));
    }
    if (add_special) {
      FUZZ_CHECK(ids->size() >= 2 && ids->front() == t.cls_id() && ids->back() == t.sep_id(),
                 "[CLS] ... [SEP] missing");
    }
    for (bool skip : {true, false}) {
      Result<std::string> back = t.Decode(ids.value(), skip);
      FUZZ_CHECK(back.ok(), "Decode of Encode's ids failed: " + back.status().ToString());
      FUZZ_CHECK(IsUtf8(back.value()), "Decode produced invalid UTF-8");
    }
  }
  Result<std::string> norm = t.Normalize(text);
  FUZZ_CHECK(norm.ok() == valid, "Normalize validity differs from Encode's");
  if (norm.ok()) FUZZ_CHECK(IsUtf8(norm.value()), "Normalize produced invalid UTF-8");
  Result<std::vector<std::string>> words = t.PreTokenize(text);
  FUZZ_CHECK(words.ok() == valid, "PreTokenize validity differs from Encode's");
  if (words.ok()) {
    for (const auto& w : words.value()) {
      FUZZ_CHECK(!w.empty() && IsUtf8(w), "PreTokenize produced an empty or invalid word");
    }
  }
}

}  // namespace wordpiece_detail

inline void FuzzWordpiece(const uint8_t* data, size_t size) {
  using namespace attnflow;
  ByteReader in(data, size);
  const uint8_t mode = in.U8();
  const WordPieceOptions opt = wordpiece_detail::Options(mode);
  if ((mode & 1) == 0) {
    static std::unique_ptr<WordPieceTokenizer> cache[128];
    std::unique_ptr<WordPieceTokenizer>& t = cache[mode >> 1];
    if (!t) {
      auto r = WordPieceTokenizer::FromVocab(wordpiece_detail::FixedVocab(), opt, "fixed");
      FUZZ_CHECK(r.ok(), "fixed vocabulary rejected: " + r.status().ToString());
      t = std::move(r).value();
    }
    const std::string text = in.Rest();
    wordpiece_detail::CheckText(*t, text);
    // Ids chosen by the input: in range decodes, out of range is kOutOfRange.
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 4 <= text.size() && ids.size() < 64; i += 4) {
      int32_t id;
      std::memcpy(&id, text.data() + i, 4);
      ids.push_back(id);
    }
    bool in_range = true;
    for (int32_t id : ids) in_range = in_range && id >= 0 && id < t->VocabSize();
    Result<std::string> d = t->Decode(ids, (mode & 2) != 0);
    FUZZ_CHECK(d.ok() == in_range, "Decode validity wrong for input ids");
    if (!d.ok()) FUZZ_CHECK(d.status().code() == StatusCode::kOutOfRange, "expected kOutOfRange");
    for (int32_t id : ids) (void)t->TokenText(id);
    return;
  }
  // VOCAB mode.
  const std::string image = in.Rest();
  std::vector<std::string> tokens;
  size_t pos = 0;
  while (pos < image.size() && tokens.size() < 4096) {
    size_t nl = image.find('\n', pos);
    if (nl == std::string::npos) nl = image.size();
    tokens.push_back(image.substr(pos, nl - pos));
    pos = nl + 1;
  }
  auto r = WordPieceTokenizer::FromVocab(tokens, opt, "fuzz-vocab.txt");
  if (!r.ok()) {
    FUZZ_CHECK(r.status().code() == StatusCode::kCorrupt ||
                   r.status().code() == StatusCode::kInvalidArgument,
               "unexpected status " + r.status().ToString());
    return;
  }
  const WordPieceTokenizer& t = *r.value();
  FUZZ_CHECK(t.VocabSize() == static_cast<int64_t>(tokens.size()), "vocab size differs");
  static const char* kTexts[] = {"Hello, world! [CLS] x [SEP] [MASK]",
                                 "caf\xc3\xa9 STRASSE \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 "
                                 "unplayable tokenizers ##s",
                                 "", "   \t\n", "\xff\xfe invalid"};
  for (const char* text : kTexts) wordpiece_detail::CheckText(t, text);
  for (size_t i = 0; i < tokens.size() && i < 64; ++i) {
    if (IsUtf8(tokens[i])) wordpiece_detail::CheckText(t, tokens[i]);
  }
  (void)t.TokenText(-1);
  (void)t.TokenText(static_cast<int32_t>(tokens.size()));
}

ATTNFLOW_FUZZ_REGISTER(wordpiece, FuzzWordpiece);

}  // namespace attnflow_fuzz
