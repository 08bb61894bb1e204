// bpe_tokenizer.cc — byte-level BPE (see bpe_tokenizer.h for the pipeline).
//
// Invariants: Init() has checked the vocabulary (unique tokens) and every
// merge; EncodePiece() is O(n log n) in the piece
// length (a priority queue of candidate pairs over a linked list of symbols),
// so very long words are cheap; the splitters only ever look inside the
// segment they are given (regex lookahead stops at a segment's end, as in HF
// where each split is matched separately).
#include "model/bpe/bpe_tokenizer.h"

#include <algorithm>
#include <new>
#include <queue>

#include "model/bpe/unicode.h"

namespace attnflow::bpe {
namespace {

// GPT-2 bytes_to_unicode(): printable bytes map to themselves, the others to
// 256, 257, ... in byte order.
void ByteToCodepoint(uint32_t out[256]) {
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) ||
                      (b >= 174 && b <= 255);
    out[b] = keep ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
  }
}

enum CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

CharClass Classify(uint32_t cp) {
  if (IsLetter(cp)) return kLetter;
  if (IsNumber(cp)) return kNumber;
  if (IsSpace(cp)) return kSpace;
  return kOther;
}

// GPT-2 regex over code points [begin, end) of `cps`; calls emit(i, j) for
// each match [i, j) (code point indices). Alternatives in regex order:
//   's|'t|'re|'ve|'m|'ll|'d | ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+
//   | \s+(?!\S) | \s+
template <typename Emit>
void SplitGpt2(const std::vector<Utf8Char>& cps, const std::vector<uint8_t>& cls,
               size_t begin, size_t end, Emit&& emit) {
  size_t i = begin;
  while (i < end) {
    const uint32_t c = cps[i].cp;
    // Contractions (ASCII, case-sensitive).
    if (c == '\'' && i + 1 < end) {
      const uint32_t n1 = cps[i + 1].cp;
      if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
        emit(i, i + 2);
        i += 2;
        continue;
      }
      if (i + 2 < end) {
        const uint32_t n2 = cps[i + 2].cp;
        if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') ||
            (n1 == 'l' && n2 == 'l')) {
          emit(i, i + 3);
          i += 3;
          continue;
        }
      }
    }
    // ` ?X+` for X in {letters, numbers, other}: an optional U+0020 then a
    // run of one class. (Without the space, a leading ' ' is \s and matches
    // none of the three.)
    const size_t j = (c == ' ') ? i + 1 : i;
    if (j < end && cls[j] != kSpace) {
      const uint8_t k = cls[j];
      size_t m = j + 1;
      while (m < end && cls[m] == k) ++m;
      emit(i, m);
      i = m;
      continue;
    }
    // Here cps[i] is whitespace. \s+(?!\S): the run, minus its last char
    // when a non-space follows; else \s+ (a single space before a word).
    size_t m = i + 1;
    while (m < end && cls[m] == kSpace) ++m;
    if (m == end) {
      emit(i, m);
      i = m;
    } else if (m - i >= 2) {
      emit(i, m - 1);
      i = m - 1;
    } else {
      emit(i, m);
      i = m;
    }
  }
}

}  // namespace

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(
    BpeConfig cfg, const std::string& label) {
  std::unique_ptr<BpeTokenizer> t(new BpeTokenizer());
  t->cfg_ = std::move(cfg);
  Status s = t->Init(label);
  if (!s.ok()) return s;
  return t;
}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::FromGguf(
    const GgufFile& f, const std::string& pre_override) {
  const std::string prefix = "tokenizer: " + f.path() + ": ";
  Result<std::string> model = f.GetString("tokenizer.ggml.model");
  if (!model.ok()) return model.status();
  if (*model != "gpt2") {
    return Unimplemented(prefix + "tokenizer.ggml.model '" + *model +
                         "' is not supported (only byte-level BPE 'gpt2')");
  }
  BpeConfig cfg;
  Result<const std::vector<std::string>*> toks = f.GetStringArray("tokenizer.ggml.tokens");
  if (!toks.ok()) return toks.status();
  cfg.tokens = **toks;
  Result<const std::vector<std::string>*> merges = f.GetStringArray("tokenizer.ggml.merges");
  if (!merges.ok()) return merges.status();
  cfg.merges = **merges;
  if (f.Find("tokenizer.ggml.token_type")) {
    Result<const std::vector<int64_t>*> tt = f.GetIntArray("tokenizer.ggml.token_type");
    if (!tt.ok()) return tt.status();
    if ((*tt)->size() != cfg.tokens.size()) {
      return Corrupt(prefix + "tokenizer.ggml.token_type has " + std::to_string((*tt)->size()) +
                     " entries but tokenizer.ggml.tokens has " + std::to_string(cfg.tokens.size()));
    }
    cfg.token_types.assign((*tt)->begin(), (*tt)->end());
  }
  if (!pre_override.empty()) {
    cfg.pre = pre_override;
  } else if (f.Find("tokenizer.ggml.pre")) {
    Result<std::string> pre = f.GetString("tokenizer.ggml.pre");
    if (!pre.ok()) return pre.status();
    cfg.pre = *pre;
  }
  auto opt_id = [&](const char* key, int32_t* out) -> Status {
    if (!f.Find(key)) return Status::Ok();
    Result<int64_t> v = f.GetInt(key);
    if (!v.ok()) return v.status();
    if (*v < 0 || *v >= static_cast<int64_t>(cfg.tokens.size())) {
      return OutOfRange(prefix + key + " = " + std::to_string(*v) + " is outside the vocabulary [0, " +
                        std::to_string(cfg.tokens.size()) + ")");
    }
    *out = static_cast<int32_t>(*v);
    return Status::Ok();
  };
  ATTNFLOW_RETURN_IF_ERROR(opt_id("tokenizer.ggml.bos_token_id", &cfg.bos_id));
  ATTNFLOW_RETURN_IF_ERROR(opt_id("tokenizer.ggml.eos_token_id", &cfg.eos_id));
  ATTNFLOW_RETURN_IF_ERROR(opt_id("tokenizer.ggml.unknown_token_id", &cfg.unk_id));
  ATTNFLOW_RETURN_IF_ERROR(opt_id("tokenizer.ggml.padding_token_id", &cfg.pad_id));
  auto opt_bool = [&](const char* key, bool* out) -> Status {
    if (!f.Find(key)) return Status::Ok();
    Result<bool> v = f.GetBool(key);
    if (!v.ok()) return v.status();
    *out = *v;
    return Status::Ok();
  };
  ATTNFLOW_RETURN_IF_ERROR(opt_bool("tokenizer.ggml.add_bos_token", &cfg.add_bos));
  ATTNFLOW_RETURN_IF_ERROR(opt_bool("tokenizer.ggml.add_eos_token", &cfg.add_eos));
  return Create(std::move(cfg), f.path());
}

Status BpeTokenizer::Init(const std::string& label) {
  try {
    return InitImpl(label);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("tokenizer: " + label + ": out of memory building the vocabulary");
  }
}

Status BpeTokenizer::InitImpl(const std::string& label) {
  const std::string prefix = "tokenizer: " + label + ": ";
  if (cfg_.pre == "gpt2") {
    kind_ = PreTokenizerKind::kGpt2;
  } else if (cfg_.pre == "smollm") {
    kind_ = PreTokenizerKind::kSmolLm;
  } else {
    return Unimplemented(prefix + "pre-tokenizer '" + cfg_.pre +
                         "' (tokenizer.ggml.pre) is not supported (supported: gpt2, smollm)");
  }
  if (cfg_.tokens.empty()) return Corrupt(prefix + "empty vocabulary");
  if (cfg_.tokens.size() > static_cast<size_t>(INT32_MAX)) {
    return Corrupt(prefix + "vocabulary larger than 2^31");
  }
  if (!cfg_.token_types.empty() && cfg_.token_types.size() != cfg_.tokens.size()) {
    return Corrupt(prefix + "token_types and tokens differ in length");
  }
  tokens_ = cfg_.tokens;
  vocab_.reserve(tokens_.size() * 2);
  is_special_.assign(tokens_.size(), false);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (!vocab_.emplace(tokens_[i], static_cast<int32_t>(i)).second) {
      // HF keeps the last id for a duplicate string; GGUF vocabularies from
      // HF have none. Treat as corrupt to stay exact.
      return Corrupt(prefix + "token " + std::to_string(i) + " '" + tokens_[i] +
                     "' duplicates token " + std::to_string(vocab_[tokens_[i]]));
    }
    const int32_t ty = cfg_.token_types.empty() ? kTokenNormal : cfg_.token_types[i];
    if (ty == kTokenControl || ty == kTokenUserDefined) {
      if (tokens_[i].empty()) continue;
      specials_.push_back(static_cast<int32_t>(i));
      is_special_[i] = true;
    }
  }
  uint32_t cps[256];
  ByteToCodepoint(cps);
  for (int b = 0; b < 256; ++b) {
    std::string s;
    AppendUtf8(cps[b], &s);
    byte_char_[b] = s;
    char_byte_[cps[b]] = static_cast<uint8_t>(b);
    // A byte with no symbol token (SmolLM2 lacks e.g. 0x04 and bytes that
    // never occur in UTF-8) becomes the unknown token, or is dropped when
    // there is none — HF BPE's behaviour (byte_fallback finds no <0xXX>).
    auto it = vocab_.find(s);
    byte_token_[b] = it == vocab_.end() ? -1 : it->second;
  }
  merges_.reserve(cfg_.merges.size() * 2);
  for (size_t r = 0; r < cfg_.merges.size(); ++r) {
    const std::string& m = cfg_.merges[r];
    const size_t sp = m.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() ||
        m.find(' ', sp + 1) != std::string::npos) {
      return Corrupt(prefix + "merge " + std::to_string(r) + " '" + m + "' is not 'a b'");
    }
    const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
    auto ia = vocab_.find(a), ib = vocab_.find(b), ic = vocab_.find(a + b);
    if (ia == vocab_.end() || ib == vocab_.end() || ic == vocab_.end()) {
      return Corrupt(prefix + "merge " + std::to_string(r) + " '" + m +
                     "' names a token that is not in the vocabulary");
    }
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) |
                         static_cast<uint32_t>(ib->second);
    // First (lowest-rank) occurrence wins, like HF.
    merges_.emplace(key, (static_cast<uint64_t>(r) << 32) | static_cast<uint32_t>(ic->second));
  }
  return Status::Ok();
}

void BpeTokenizer::EncodePiece(std::string_view bytes, std::vector<int32_t>* out) const {
  // Initial symbols: one per byte (unknown bytes -> unk id or dropped).
  std::vector<int32_t> id;
  id.reserve(bytes.size());
  for (char ch : bytes) {
    const int32_t t = byte_token_[static_cast<uint8_t>(ch)];
    if (t >= 0) {
      id.push_back(t);
    } else if (cfg_.unk_id >= 0) {
      id.push_back(cfg_.unk_id);
    }
  }
  const size_t n = id.size();
  if (n == 0) return;
  if (n == 1) {
    out->push_back(id[0]);
    return;
  }
  // Doubly linked list of symbols.
  std::vector<int32_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = static_cast<int32_t>(i) - 1;
    next[i] = i + 1 < n ? static_cast<int32_t>(i + 1) : -1;
  }
  struct Cand {
    uint32_t rank;
    int32_t left;   // position of the left symbol
    int32_t lid, rid;  // ids when queued (to detect stale entries)
    bool operator>(const Cand& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto push = [&](int32_t l) {
    const int32_t r = next[l];
    if (l < 0 || r < 0) return;
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(id[l])) << 32) |
                         static_cast<uint32_t>(id[r]);
    auto it = merges_.find(key);
    if (it == merges_.end()) return;
    q.push({static_cast<uint32_t>(it->second >> 32), l, id[l], id[r]});
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int32_t>(i));
  while (!q.empty()) {
    const Cand c = q.top();
    q.pop();
    const int32_t l = c.left;
    if (id[l] < 0 || id[l] != c.lid) continue;  // merged away or changed
    const int32_t r = next[l];
    if (r < 0 || id[r] != c.rid) continue;
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(c.lid)) << 32) |
                         static_cast<uint32_t>(c.rid);
    const auto it = merges_.find(key);
    id[l] = static_cast<int32_t>(it->second & 0xFFFFFFFFu);
    id[r] = -1;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    if (prev[l] >= 0) push(prev[l]);
    push(l);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out->push_back(id[i]);
}

void BpeTokenizer::SplitAndEncode(std::string_view text, std::vector<int32_t>* out,
                                  std::vector<std::string>* pieces) const {
  // `text` is valid UTF-8 (checked by the caller).
  std::vector<Utf8Char> cps;
  size_t bad = 0;
  DecodeUtf8(text, &cps, &bad);
  std::vector<uint8_t> cls(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) cls[i] = Classify(cps[i].cp);
  auto emit = [&](size_t i, size_t j) {
    const size_t b0 = cps[i].offset;
    const size_t b1 = cps[j - 1].offset + cps[j - 1].len;
    const std::string_view piece = text.substr(b0, b1 - b0);
    if (pieces) pieces->emplace_back(piece);
    if (out) EncodePiece(piece, out);
  };
  if (kind_ == PreTokenizerKind::kGpt2) {
    SplitGpt2(cps, cls, 0, cps.size(), emit);
    return;
  }
  // SmolLM: isolate every \p{N} code point, regex-split the rest.
  size_t seg = 0;
  for (size_t i = 0; i <= cps.size(); ++i) {
    if (i == cps.size() || cls[i] == kNumber) {
      if (i > seg) SplitGpt2(cps, cls, seg, i, emit);
      if (i < cps.size()) emit(i, i + 1);
      seg = i + 1;
    }
  }
}

Result<std::vector<std::string>> BpeTokenizer::PreTokenize(std::string_view text) const {
  std::vector<Utf8Char> cps;
  size_t bad = 0;
  if (!DecodeUtf8(text, &cps, &bad)) {
    return InvalidArgument("tokenizer: input is not valid UTF-8 at byte " + std::to_string(bad));
  }
  std::vector<std::string> pieces;
  SplitAndEncode(text, nullptr, &pieces);
  return pieces;
}

Result<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text, bool add_special) const {
  try {
    return EncodeImpl(text, add_special);
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("tokenizer: out of memory encoding " + std::to_string(text.size()) + " bytes");
  }
}

Result<std::vector<int32_t>> BpeTokenizer::EncodeImpl(std::string_view text, bool add_special) const {
  {
    std::vector<Utf8Char> cps;
    size_t bad = 0;
    if (!DecodeUtf8(text, &cps, &bad)) {
      return InvalidArgument("tokenizer: input is not valid UTF-8 at byte " + std::to_string(bad));
    }
  }
  std::vector<int32_t> out;
  if (add_special && cfg_.add_bos && cfg_.bos_id >= 0) out.push_back(cfg_.bos_id);
  // Special tokens: leftmost match, longest at that position.
  size_t pos = 0;
  size_t seg = 0;
  while (pos < text.size()) {
    int32_t best = -1;
    size_t best_len = 0;
    if (!specials_.empty()) {
      for (int32_t sid : specials_) {
        const std::string& s = tokens_[sid];
        if (s.size() > best_len && text.compare(pos, s.size(), s) == 0) {
          best = sid;
          best_len = s.size();
        }
      }
    }
    if (best < 0) {
      ++pos;
      continue;
    }
    if (pos > seg) SplitAndEncode(text.substr(seg, pos - seg), &out, nullptr);
    out.push_back(best);
    pos += best_len;
    seg = pos;
  }
  if (text.size() > seg) SplitAndEncode(text.substr(seg), &out, nullptr);
  if (add_special && cfg_.add_eos && cfg_.eos_id >= 0) out.push_back(cfg_.eos_id);
  return out;
}

std::string BpeTokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return "";
  if (is_special_[id]) return tokens_[id];
  std::string out;
  std::vector<Utf8Char> cps;
  size_t bad = 0;
  const std::string& t = tokens_[id];
  if (!DecodeUtf8(t, &cps, &bad)) return t;
  for (const Utf8Char& c : cps) {
    auto it = char_byte_.find(c.cp);
    if (it != char_byte_.end()) {
      out.push_back(static_cast<char>(it->second));
    } else {
      out.append(t, c.offset, c.len);  // not a byte-level symbol: keep as is
    }
  }
  return out;
}

bool BpeTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < tokens_.size() && is_special_[id];
}

Result<std::string> BpeTokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) {
      return OutOfRange("tokenizer: decode: ids[" + std::to_string(i) + "] = " + std::to_string(id) +
                        " is outside the vocabulary [0, " + std::to_string(tokens_.size()) + ")");
    }
    if (skip_special && is_special_[id]) continue;
    bytes += TokenBytes(id);
  }
  // Lossy UTF-8 (invalid sequences become U+FFFD), like HF's ByteLevel decoder.
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  std::vector<Utf8Char> one;
  while (i < bytes.size()) {
    const uint8_t c = static_cast<uint8_t>(bytes[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    size_t bad = 0;
    if (len > 0 && i + len <= bytes.size() &&
        DecodeUtf8(std::string_view(bytes).substr(i, len), &one, &bad)) {
      out.append(bytes, i, len);
      i += len;
    } else {
      // One U+FFFD per maximal invalid prefix (lead byte plus its
      // continuation bytes), like Rust's String::from_utf8_lossy.
      out += "\xEF\xBF\xBD";
      size_t k = 1;
      while (len > 1 && k < len && i + k < bytes.size() &&
             (static_cast<uint8_t>(bytes[i + k]) & 0xC0) == 0x80) {
        ++k;
      }
      i += k;
    }
  }
  return out;
}

}  // namespace attnflow::bpe
