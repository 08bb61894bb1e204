// bpe.h (fuzz harness) — the byte-level BPE tokenizer on arbitrary text
// (valid and invalid UTF-8) and on arbitrary merge lists.
//
// Input byte 0: bit 0 pre-tokenizer (gpt2 / smollm); bit 1 add_bos/add_eos;
// bit 2 = 0: TEXT mode (a fixed vocabulary: the 256 byte symbols, ~40 merges
// and three special tokens; the rest of the input is the text);
// bit 2 = 1: MERGES mode (the rest of the input, split at '\n', is the merge
// list over the fixed vocabulary plus every merge result; a few fixed texts
// are encoded).
// Properties (bpe_tokenizer.h's invariants):
//  * Encode fails exactly on invalid UTF-8 (kInvalidArgument), never crashes;
//    ids are in [0, VocabSize());
//  * byte-level BPE is lossless: Decode(Encode(text), skip_special=false)
//    == text (plus BOS/EOS text when added);
//  * PreTokenize pieces concatenate to the text when it holds no special
//    token;
//  * a merge list is accepted or rejected (kCorrupt), never a crash.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "../common/fuzz_common.h"
#include "model/bpe/bpe_tokenizer.h"

namespace attnflow_fuzz {
namespace bpe_detail {

// GPT-2's bytes_to_unicode(): printable bytes map to themselves, the others
// to U+0100.. in order.
inline std::string ByteSymbol(int b) {
  uint32_t cp;
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
    cp = static_cast<uint32_t>(b);
  } else {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    }
    cp = 256 + static_cast<uint32_t>(n);
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

inline attnflow::bpe::BpeConfig BaseConfig(uint8_t mode) {
  attnflow::bpe::BpeConfig cfg;
  for (int b = 0; b < 256; ++b) cfg.tokens.push_back(ByteSymbol(b));
  const std::string sp = ByteSymbol(' ');
  const std::string nl = ByteSymbol('\n');
  // Merges (a, b): the vocabulary gets a+b.
  const std::vector<std::pair<std::string, std::string>> merges = {
      {sp, "t"}, {"h", "e"}, {sp + "t", "he"}, {"i", "n"}, {"in", "g"}, {sp, "a"},
      {"e", "r"}, {sp, "w"}, {"o", "r"}, {sp + "w", "or"}, {"l", "d"}, {sp + "wor", "ld"},
      {"H", "e"}, {"l", "l"}, {"He", "ll"}, {"Hell", "o"}, {"'", "s"}, {sp, sp},
      {nl, nl}, {"1", "2"}, {ByteSymbol(0xC3), ByteSymbol(0xA9)}, {"c", "a"}, {"ca", "f"},
      {sp, "c"}, {sp + "c", "a"}, {sp + "ca", "f"}, {"a", "t"}, {sp + "t", "o"}, {sp + "to", "k"},
      {sp + "tok", "en"}, {"e", "n"}};
  for (const auto& [a, b] : merges) {
    cfg.merges.push_back(a + " " + b);
    bool have = false;
    for (const auto& t : cfg.tokens) have = have || t == a + b;
    if (!have) cfg.tokens.push_back(a + b);
  }
  cfg.token_types.assign(cfg.tokens.size(), attnflow::bpe::kTokenNormal);
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    cfg.tokens.push_back(s);
    cfg.token_types.push_back(attnflow::bpe::kTokenControl);
  }
  cfg.bos_id = static_cast<int32_t>(cfg.tokens.size()) - 2;
  cfg.eos_id = static_cast<int32_t>(cfg.tokens.size()) - 1;
  cfg.pre = (mode & 1) ? "smollm" : "gpt2";
  cfg.add_bos = cfg.add_eos = (mode & 2) != 0;
  return cfg;
}

inline void CheckText(const attnflow::bpe::BpeTokenizer& t, const std::string& text,
                      bool add_special, bool with_bos_eos) {
  using namespace attnflow;
  const bool valid = IsUtf8(text);
  Result<std::vector<int32_t>> ids = t.Encode(text, add_special);
  if (!valid) {
    FUZZ_CHECK(!ids.ok() && ids.status().code() == StatusCode::kInvalidArgument,
               "invalid UTF-8 not rejected with kInvalidArgument");
    FUZZ_CHECK(!t.PreTokenize(text).ok(), "PreTokenize accepted invalid UTF-8");
    return;
  }
  FUZZ_CHECK(ids.ok(), "Encode failed on valid UTF-8: " + ids.status().ToString());
  for (int32_t id : ids.value()) {
    FUZZ_CHECK(id >= 0 && id < t.VocabSize(), "id out of range: " + std::to_string(id));
  }
  std::string want = text;
  if (add_special && with_bos_eos) want = "<|im_start|>" + text + "<|im_end|>";
  Result<std::string> back = t.Decode(ids.value(), false);
  FUZZ_CHECK(back.ok(), "Decode failed: " + back.status().ToString());
  FUZZ_CHECK(back.value() == want, "Decode(Encode(text)) != text");
  Result<std::string> skipped = t.Decode(ids.value(), true);
  FUZZ_CHECK(skipped.ok(), "Decode(skip_special) failed");
  if (text.find("<|") == std::string::npos) {
    Result<std::vector<std::string>> pieces = t.PreTokenize(text);
    FUZZ_CHECK(pieces.ok(), "PreTokenize failed on valid UTF-8");
    std::string joined;
    for (const auto& p : pieces.value()) {
      FUZZ_CHECK(!p.empty(), "empty pre-tokenizer piece");
      joined += p;
    }
    FUZZ_CHECK(joined == text, "PreTokenize pieces do not concatenate to the text");
    FUZZ_CHECK(skipped.value() == text, "Decode(skip_special) changed a text without specials");
  }
}

}  // namespace bpe_detail

inline void FuzzBpe(const uint8_t* data, size_t size) {
  using namespace attnflow;
  ByteReader in(data, size);
  const uint8_t mode = in.U8();
  if ((mode & 4) == 0) {
    static std::unique_ptr<bpe::BpeTokenizer> cache[4];
    std::unique_ptr<bpe::BpeTokenizer>& t = cache[mode & 3];
    if (!t) {
      auto r = bpe::BpeTokenizer::Create(bpe_detail::BaseConfig(mode), "fixed");
      FUZZ_CHECK(r.ok(), "fixed BPE config rejected: " + r.status().ToString());
      t = std::move(r).value();
    }
    const std::string text = in.Rest();
    bpe_detail::CheckText(*t, text, false, false);
    bpe_detail::CheckText(*t, text, true, (mode & 2) != 0);
    for (int32_t id : {-1, 0, 255, static_cast<int32_t>(t->VocabSize()), INT32_MAX}) {
      (void)t->TokenText(id);
      (void)t->TokenBytes(id);
      (void)t->IsSpecial(id);
    }
    return;
  }
  bpe::BpeConfig cfg = bpe_detail::BaseConfig(mode);
  const std::string rest = in.Rest();
  cfg.merges.clear();
  size_t pos = 0;
  while (pos < rest.size() && cfg.merges.size() < 2048) {
    size_t nl = rest.find('\n', pos);
    if (nl == std::string::npos) nl = rest.size();
    cfg.merges.push_back(rest.substr(pos, nl - pos));
    pos = nl + 1;
  }
  auto r = bpe::BpeTokenizer::Create(std::move(cfg), "fuzz-merges");
  if (!r.ok()) {
    FUZZ_CHECK(r.status().code() == StatusCode::kCorrupt, "unexpected status " + r.status().ToString());
    return;
  }
  for (const char* text : {"Hello world, the token cafe caf\xc3\xa9 12 's", "\n\n  x",
                           "<|im_start|>the<|im_end|>", "\xf0\x9f\x98\x80\xe4\xb8\xad"}) {
    bpe_detail::CheckText(*r.value(), text, false, false);
  }
}

ATTNFLOW_FUZZ_REGISTER(bpe, FuzzBpe);

}  // namespace attnflow_fuzz
