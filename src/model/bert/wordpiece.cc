// wordpiece.cc — BERT WordPiece tokenizer; the algorithm and its HF
// `tokenizers` equivalence are described in wordpiece.h.
#include "model/bert/wordpiece.h"

#include <algorithm>
#include <functional>

#include "attnflow/file_util.h"
#include "model/bert/unicode.h"

namespace attnflow {
namespace {

namespace wu = wordpiece_unicode;

bool IsCjk(char32_t c) {
  // The ranges of HF BertNormalizer::is_chinese_char.
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// BertNormalizer's is_whitespace: \t \n \r or White_Space.
bool IsBertWhitespace(char32_t c) {
  return c == '\t' || c == '\n' || c == '\r' || wu::IsWhiteSpace(c);
}

// BertNormalizer's is_control: general category C*, except \t \n \r.
bool IsBertControl(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return wu::ClassOf(c) == wu::CharClass::kOther;
}

// BertPreTokenizer's is_bert_punc: ASCII punctuation or general category P*.
bool IsBertPunct(char32_t c) {
  if (c < 0x80) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) ||
           (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E);
  }
  return wu::ClassOf(c) == wu::CharClass::kPunct;
}

}  // namespace

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::FromVocabFile(
    const std::string& path, const WordPieceOptions& opt) {
  Result<std::string> text = ReadFileString(path);
  if (!text.ok()) return text.status();
  std::vector<std::string> tokens;
  const std::string& s = text.value();
  size_t pos = 0;
  while (pos < s.size()) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string::npos) nl = s.size();
    // Like HF load_vocab: the line without its "\n" (nothing else stripped).
    tokens.push_back(s.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return FromVocab(std::move(tokens), opt, path);
}

Result<std::unique_ptr<WordPieceTokenizer>> WordPieceTokenizer::FromVocab(
    std::vector<std::string> tokens, const WordPieceOptions& opt,
    const std::string& label) {
  if (tokens.empty()) return Corrupt("wordpiece: " + label + ": empty vocabulary");
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return Corrupt("wordpiece: " + label + ": vocabulary too large");
  }
  if (opt.max_input_chars_per_word <= 0) {
    return InvalidArgument("wordpiece: max_input_chars_per_word must be > 0");
  }
  std::unique_ptr<WordPieceTokenizer> t(new WordPieceTokenizer());
  t->opt_ = opt;
  t->strip_accents_ = opt.strip_accents < 0 ? opt.lowercase : opt.strip_accents != 0;
  std::u32string scratch;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!wu::DecodeUtf8(tokens[i], &scratch)) {
      return Corrupt("wordpiece: " + label + ": line " + std::to_string(i + 1) +
                     " is not valid UTF-8");
    }
    // Later duplicates win, like HF load_vocab's dict assignment.
    t->index_[tokens[i]] = static_cast<int32_t>(i);
  }
  t->tokens_ = std::move(tokens);
  t->unk_id_ = t->Find(opt.unk_token);
  t->cls_id_ = t->Find(opt.cls_token);
  t->sep_id_ = t->Find(opt.sep_token);
  t->pad_id_ = t->Find(opt.pad_token);
  if (t->unk_id_ < 0 || t->cls_id_ < 0 || t->sep_id_ < 0) {
    return Corrupt("wordpiece: " + label + ": vocabulary lacks " +
                   (t->unk_id_ < 0 ? opt.unk_token
                                   : t->cls_id_ < 0 ? opt.cls_token : opt.sep_token));
  }
  for (const std::string* s : {&opt.pad_token, &opt.unk_token, &opt.cls_token,
                               &opt.sep_token, &opt.mask_token}) {
    const int32_t id = t->Find(*s);
    if (id < 0 || s->empty()) continue;
    std::u32string u;
    if (!wu::DecodeUtf8(*s, &u)) return InvalidArgument("wordpiece: special token is not UTF-8");
    t->specials_.emplace_back(std::move(u), id);
  }
  return t;
}

int32_t WordPieceTokenizer::Find(std::string_view token) const {
  auto it = index_.find(std::string(token));
  return it == index_.end() ? -1 : it->second;
}

bool WordPieceTokenizer::IsSpecial(int32_t id) const {
  for (const auto& s : specials_)
    if (s.second == id) return true;
  return false;
}

std::u32string WordPieceTokenizer::NormalizeU32(const std::u32string& in) const {
  std::u32string s;
  s.reserve(in.size() + 8);
  for (char32_t c : in) {
    if (opt_.clean_text) {
      if (c == 0 || c == 0xFFFD || IsBertControl(c)) continue;
      if (IsBertWhitespace(c)) c = ' ';
    }
    if (opt_.handle_chinese_chars && IsCjk(c)) {
      s.push_back(' ');
      s.push_back(c);
      s.push_back(' ');
    } else {
      s.push_back(c);
    }
  }
  if (strip_accents_) {
    std::u32string d = wu::Nfd(s);
    s.clear();
    for (char32_t c : d)
      if (wu::ClassOf(c) != wu::CharClass::kMn) s.push_back(c);
  }
  if (opt_.lowercase) {
    std::u32string l;
    l.reserve(s.size());
    for (char32_t c : s) wu::AppendLower(c, &l);
    s = std::move(l);
  }
  return s;
}

void WordPieceTokenizer::SplitSegment(const std::u32string& segment,
                                      std::vector<std::u32string>* words) const {
  const std::u32string s = NormalizeU32(segment);
  std::u32string cur;
  auto flush = [&] {
    if (!cur.empty()) words->push_back(std::move(cur));
    cur.clear();
  };
  for (char32_t c : s) {
    if (wu::IsWhiteSpace(c)) {
      flush();
    } else if (IsBertPunct(c)) {
      flush();
      words->push_back(std::u32string(1, c));
    } else {
      cur.push_back(c);
    }
  }
  flush();
}

void WordPieceTokenizer::EncodeWord(const std::u32string& word,
                                    std::vector<int32_t>* ids) const {
  if (word.size() > static_cast<size_t>(opt_.max_input_chars_per_word)) {
    ids->push_back(unk_id_);
    return;
  }
  const size_t mark = ids->size();
  size_t start = 0;
  std::string piece;
  while (start < word.size()) {
    size_t end = word.size();
    int32_t found = -1;
    while (start < end) {
      piece.clear();
      if (start > 0) piece = opt_.continuing_prefix;
      for (size_t i = start; i < end; ++i) wu::AppendUtf8(word[i], &piece);
      auto it = index_.find(piece);
      if (it != index_.end()) {
        found = it->second;
        break;
      }
      --end;
    }
    if (found < 0) {  // the whole word becomes one [UNK]
      ids->resize(mark);
      ids->push_back(unk_id_);
      return;
    }
    ids->push_back(found);
    start = end;
  }
}

namespace {

// Splits `text` at literal special tokens (leftmost, then longest).
// Calls seg(text_piece) for ordinary text and special(id) for tokens.
template <typename SegFn, typename SpecialFn>
void SplitSpecials(const std::u32string& text,
                   const std::vector<std::pair<std::u32string, int32_t>>& specials,
                   SegFn seg, SpecialFn special) {
  size_t start = 0, i = 0;
  while (i < text.size()) {
    size_t best_len = 0;
    int32_t best_id = -1;
    for (const auto& [s, id] : specials) {
      if (s.size() > best_len && text.compare(i, s.size(), s) == 0) {
        best_len = s.size();
        best_id = id;
      }
    }
    if (best_id < 0) {
      ++i;
      continue;
    }
    if (i > start) seg(text.substr(start, i - start));
    special(best_id);
    i += best_len;
    start = i;
  }
  if (start < text.size()) seg(text.substr(start));
}

}  // namespace

Status WordPieceTokenizer::Walk(std::string_view text,
                                const std::function<void(const std::u32string&)>& word,
                                const std::function<void(int32_t)>& special) const {
  std::u32string u;
  if (!wu::DecodeUtf8(text, &u)) {
    return InvalidArgument("wordpiece: input text is not valid UTF-8");
  }
  std::vector<std::u32string> words;
  SplitSpecials(
      u, specials_,
      [&](const std::u32string& seg) {
        words.clear();
        SplitSegment(seg, &words);
        for (const auto& w : words) word(w);
      },
      special);
  return Status::Ok();
}

Result<std::vector<int32_t>> WordPieceTokenizer::Encode(std::string_view text,
                                                        bool add_special) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_special) ids.push_back(cls_id_);
  ATTNFLOW_RETURN_IF_ERROR(Walk(
      text, [&](const std::u32string& w) { EncodeWord(w, &ids); },
      [&](int32_t id) { ids.push_back(id); }));
  if (add_special) ids.push_back(sep_id_);
  return ids;
}

Result<std::string> WordPieceTokenizer::Normalize(std::string_view text) const {
  std::u32string u;
  if (!wu::DecodeUtf8(text, &u)) {
    return InvalidArgument("wordpiece: input text is not valid UTF-8");
  }
  return wu::EncodeUtf8(NormalizeU32(u));
}

Result<std::vector<std::string>> WordPieceTokenizer::PreTokenize(
    std::string_view text) const {
  std::vector<std::string> out;
  ATTNFLOW_RETURN_IF_ERROR(Walk(
      text, [&](const std::u32string& w) { out.push_back(wu::EncodeUtf8(w)); },
      [&](int32_t id) { out.push_back(tokens_[static_cast<size_t>(id)]); }));
  return out;
}

Result<std::string> WordPieceTokenizer::Decode(const std::vector<int32_t>& ids,
                                               bool skip_special) const {
  std::string out;
  bool first = true;
  const std::string& prefix = opt_.continuing_prefix;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) {
      return OutOfRange("wordpiece: decode: id " + std::to_string(id) + " at position " +
                        std::to_string(i) + " is outside [0, " +
                        std::to_string(tokens_.size()) + ")");
    }
    if (skip_special && IsSpecial(id)) continue;
    const std::string& tok = tokens_[static_cast<size_t>(id)];
    if (first) {
      out += tok;
      first = false;
    } else if (!prefix.empty() && tok.compare(0, prefix.size(), prefix) == 0) {
      out.append(tok, prefix.size(), std::string::npos);
    } else if (tok == "." || tok == "?" || tok == "!" || tok == ",") {
      out += tok;  // the decoder's cleanup of " ." " ?" " !" " ,"
    } else {
      out += ' ';
      out += tok;
    }
  }
  return out;
}

}  // namespace attnflow
