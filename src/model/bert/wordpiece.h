// wordpiece.h — BERT WordPiece tokenizer (internal; exposed through
// attnflow::Tokenizer). Reproduces Hugging Face `tokenizers` for BERT
// (BertNormalizer + BertPreTokenizer + WordPiece + the [CLS] A [SEP]
// template + the WordPiece decoder), token id for token id:
//
//   1. special tokens ([PAD] [UNK] [CLS] [SEP] [MASK], those present in the
//      vocabulary) written literally in the input are matched first, on the raw
//      text (case-sensitive, leftmost-longest) and map to their ids;
//   2. every other segment is normalised: clean text (drop U+0000, U+FFFD and
//      general category C* except \t \n \r; White_Space -> ' '), CJK
//      ideographs surrounded by spaces, accent stripping (NFD, then drop Mn;
//      on when lower-casing unless configured otherwise), full per-character
//      lower-casing;
//   3. split on White_Space (removed) and punctuation (ASCII punctuation or
//      general category P*, isolated);
//   4. each word: > max_input_chars_per_word code points -> [UNK]; else
//      greedy longest-match-first over the vocabulary with "##" on
//      continuation pieces; a word with an unmatchable rest -> one [UNK].
//
// Invariants: Encode never fails on valid UTF-8 (invalid UTF-8 is
// kInvalidArgument); ids are in [0, VocabSize()); the object is immutable
// after construction, so it is safe to share between threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "attnflow/model.h"
#include "attnflow/status.h"
#include "model/vocab_tokenizer.h"

namespace attnflow {

struct WordPieceOptions {
  bool clean_text = true;
  bool handle_chinese_chars = true;
  bool lowercase = true;
  int strip_accents = -1;  // -1: same as lowercase (HF strip_accents=None)
  int max_input_chars_per_word = 100;
  std::string continuing_prefix = "##";
  std::string unk_token = "[UNK]", cls_token = "[CLS]", sep_token = "[SEP]",
              pad_token = "[PAD]", mask_token = "[MASK]";
};

class WordPieceTokenizer : public VocabTokenizer {
 public:
  // vocab.txt: one token per line, id = line number (0-based). Errors name
  // the file and the line.
  static Result<std::unique_ptr<WordPieceTokenizer>> FromVocabFile(
      const std::string& path, const WordPieceOptions& opt = {});
  // `label` names the vocabulary in error messages.
  static Result<std::unique_ptr<WordPieceTokenizer>> FromVocab(
      std::vector<std::string> tokens, const WordPieceOptions& opt,
      const std::string& label);

  // [CLS] tokens [SEP] when add_special. No truncation (see BertModel).
  Result<std::vector<int32_t>> Encode(std::string_view text,
                                      bool add_special) const override;
  // WordPiece decoder: "##" pieces join the previous token, others are
  // separated by a space; " ." " ," " ?" " !" lose the space. Ids outside
  // the vocabulary are kOutOfRange.
  Result<std::string> Decode(const std::vector<int32_t>& ids,
                             bool skip_special) const override;

  // Steps, exposed for tests and traces.
  // Normalised text (step 2) of a segment without special tokens.
  Result<std::string> Normalize(std::string_view text) const;
  // Words after steps 1-3 (special tokens appear as themselves).
  Result<std::vector<std::string>> PreTokenize(std::string_view text) const;

  int32_t cls_id() const { return cls_id_; }
  int32_t sep_id() const { return sep_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t unk_id() const { return unk_id_; }
  bool IsSpecial(int32_t id) const;
  // Vocabulary id of a token string, or -1.
  int32_t Find(std::string_view token) const;

 private:
  WordPieceTokenizer() = default;
  // Steps 1-3 over text: word(w) for each word of ordinary text, special(id)
  // for each special token, in order. Invalid UTF-8 is kInvalidArgument.
  Status Walk(std::string_view text, const std::function<void(const std::u32string&)>& word,
              const std::function<void(int32_t)>& special) const;
  // Appends the ids of one normalised-and-split word.
  void EncodeWord(const std::u32string& word, std::vector<int32_t>* ids) const;
  // Steps 2-3 on one segment free of special tokens.
  void SplitSegment(const std::u32string& segment,
                    std::vector<std::u32string>* words) const;
  std::u32string NormalizeU32(const std::u32string& in) const;

  WordPieceOptions opt_;
  bool strip_accents_ = true;
  std::unordered_map<std::string, int32_t> index_;
  // Special tokens found in the vocabulary: (UTF-32 text, id).
  std::vector<std::pair<std::u32string, int32_t>> specials_;
  int32_t cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, unk_id_ = -1;
};

}  // namespace attnflow
