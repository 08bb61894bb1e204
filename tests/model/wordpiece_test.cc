// wordpiece_test.cc — the BERT WordPiece tokenizer against Hugging Face
// `tokenizers` (BertTokenizerFast of all-MiniLM-L6-v2): every line of
// tests/data/corpus/tokenizer_corpus.txt, extra edge strings and one probe
// per "interesting" code point must give exactly HF's ids (references from
// tools/models/make_minilm_refs.py); plus unit tests of the algorithm on tiny
// vocabularies and of the generated Unicode tables.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "attnflow/file_util.h"
#include "model/bert/unicode.h"
#include "model/bert/wordpiece.h"
#include "util/minilm_util.h"

namespace attnflow {
namespace {

using testing::IdsString;
namespace wu = wordpiece_unicode;

std::unique_ptr<WordPieceTokenizer> Tiny(std::vector<std::string> vocab,
                                         WordPieceOptions opt = {}) {
  auto t = WordPieceTokenizer::FromVocab(std::move(vocab), opt, "tiny");
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

const std::vector<std::string> kTinyVocab = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "unaff",
    "able", "a", "##a", ",", "!", "hello", "cafe", "中", "##b", "b"};

std::vector<int32_t> Ids(const WordPieceTokenizer& t, std::string_view s, bool special = false) {
  auto r = t.Encode(s, special);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? r.value() : std::vector<int32_t>{};
}

TEST(WordPiece, GreedyLongestMatchFirst) {
  auto t = Tiny(kTinyVocab);
  ASSERT_NE(t, nullptr);
  // "unaffable": longest prefix "unaff" (8), then "##able" (7).
  EXPECT_EQ(Ids(*t, "unaffable"), (std::vector<int32_t>{8, 7}));
  EXPECT_EQ(Ids(*t, "unaffable", true), (std::vector<int32_t>{2, 8, 7, 3}));
  EXPECT_EQ(Ids(*t, "aaa"), (std::vector<int32_t>{10, 11, 11}));
}

TEST(WordPiece, UnmatchableRestMakesWholeWordUnk) {
  auto t = Tiny(kTinyVocab);
  ASSERT_NE(t, nullptr);
  // "unz": "un" matches but "##z" does not -> the whole word is one [UNK].
  EXPECT_EQ(Ids(*t, "unz hello"), (std::vector<int32_t>{1, 14}));
}

TEST(WordPiece, MaxInputCharsPerWordCountsCodePoints) {
  WordPieceOptions opt;
  opt.max_input_chars_per_word = 3;
  auto t = Tiny(kTinyVocab, opt);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "aaa"), (std::vector<int32_t>{10, 11, 11}));
  EXPECT_EQ(Ids(*t, "aaaa"), (std::vector<int32_t>{1}));
  // Three code points (6 bytes) is not over the limit.
  EXPECT_EQ(Ids(*t, "\xC3\xA0\xC3\xA0\xC3\xA0"), (std::vector<int32_t>{10, 11, 11}));
}

TEST(WordPiece, NormalizationSteps) {
  auto t = Tiny(kTinyVocab);
  ASSERT_NE(t, nullptr);
  // Accents stripped, lower-cased, controls dropped, whitespace unified,
  // CJK isolated.
  auto n = t->Normalize("Caf\xC3\xA9\x07\tX\xE4\xB8\xAD" "b");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value(), "cafe x \xE4\xB8\xAD b");
  auto w = t->PreTokenize("Hello,world!! [MASK]x");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w.value(), (std::vector<std::string>{"hello", ",", "world", "!", "!", "[MASK]", "x"}));
  EXPECT_EQ(Ids(*t, "Hello, CAFÉ!"), (std::vector<int32_t>{14, 12, 15, 13}));
}

TEST(WordPiece, LiteralSpecialTokensAreCaseSensitive) {
  auto t = Tiny(kTinyVocab);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(Ids(*t, "a[MASK]a"), (std::vector<int32_t>{10, 4, 10}));
  // "[mask]" is text: "[", "mask", "]" -> unknown words.
  EXPECT_EQ(Ids(*t, "[mask]"), (std::vector<int32_t>{1, 1, 1}));
}

TEST(WordPiece, OptionsWithoutLowercaseKeepCaseAndAccents) {
  WordPieceOptions opt;
  opt.lowercase = false;
  auto t = Tiny(kTinyVocab, opt);
  ASSERT_NE(t, nullptr);
  auto n = t->Normalize("Caf\xC3\xA9");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n.value(), "Caf\xC3\xA9");
}

TEST(WordPiece, DecodeJoinsPiecesAndSkipsSpecials) {
  auto t = Tiny(kTinyVocab);
  ASSERT_NE(t, nullptr);
  auto d = t->Decode({2, 8, 7, 12, 14, 13, 3}, true);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value(), "unaffable, hello!");
  auto d2 = t->Decode({2, 14, 3}, false);
  ASSERT_TRUE(d2.ok());
  EXPECT_EQ(d2.value(), "[CLS] hello [SEP]");
  auto bad = t->Decode({1, 99}, false);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(bad.status().message().find("99"), std::string::npos);
}

TEST(WordPiece, InvalidInputsAreErrors) {
  auto t = Tiny(kTinyVocab);
  ASSERT_NE(t, nullptr);
  for (const char* bad : {"\xFF", "a\xC3", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80"}) {
    auto r = t->Encode(bad, true);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  auto empty = WordPieceTokenizer::FromVocab({}, {}, "empty.txt");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("empty.txt"), std::string::npos);
  auto no_unk = WordPieceTokenizer::FromVocab({"[CLS]", "[SEP]", "a"}, {}, "v.txt");
  ASSERT_FALSE(no_unk.ok());
  EXPECT_NE(no_unk.status().message().find("[UNK]"), std::string::npos);
  auto missing = WordPieceTokenizer::FromVocabFile("/nonexistent/vocab.txt");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);
}

TEST(UnicodeTables, SortedAndCoverAllCodePoints) {
  ASSERT_GT(wu::kClassCount, 0u);
  EXPECT_EQ(wu::kClassStart[0], 0u);
  for (size_t i = 1; i < wu::kClassCount; ++i) ASSERT_LT(wu::kClassStart[i - 1], wu::kClassStart[i]);
  EXPECT_EQ(wu::kCccStart[0], 0u);
  for (size_t i = 1; i < wu::kCccCount; ++i) ASSERT_LT(wu::kCccStart[i - 1], wu::kCccStart[i]);
  for (size_t i = 1; i < wu::kLowerCount; ++i) ASSERT_LT(wu::kLowerFrom[i - 1], wu::kLowerFrom[i]);
  for (size_t i = 1; i < wu::kDecompCount; ++i) ASSERT_LT(wu::kDecompCp[i - 1], wu::kDecompCp[i]);
  for (size_t i = 1; i < wu::kWhiteSpaceCount; ++i) ASSERT_LT(wu::kWhiteSpace[i - 1], wu::kWhiteSpace[i]);
  for (size_t i = 0; i < wu::kDecompCount; ++i) {
    ASSERT_LE(wu::kDecompOffset[i] + wu::kDecompLength[i], wu::kDecompPoolSize);
  }
}

TEST(UnicodeTables, KnownProperties) {
  EXPECT_EQ(wu::ClassOf(U'!'), wu::CharClass::kPunct);
  EXPECT_EQ(wu::ClassOf(0x3002), wu::CharClass::kPunct);  // ideographic full stop
  EXPECT_EQ(wu::ClassOf(0x0301), wu::CharClass::kMn);
  EXPECT_EQ(wu::ClassOf(0x200B), wu::CharClass::kOther);  // Cf
  EXPECT_EQ(wu::ClassOf(0x0378), wu::CharClass::kNone);   // unassigned: kept (HF)
  EXPECT_EQ(wu::ClassOf(0x110000), wu::CharClass::kOther);
  EXPECT_TRUE(wu::IsWhiteSpace(0x3000));
  EXPECT_FALSE(wu::IsWhiteSpace(0x200B));
  EXPECT_EQ(wu::CombiningClass(0x0301), 230);
  EXPECT_EQ(wu::CombiningClass(0x0323), 220);
  EXPECT_EQ(wu::Nfd(U"\u00e9"), U"e\u0301");
  EXPECT_EQ(wu::Nfd(U"\uac01"), U"\u1100\u1161\u11a8");  // Hangul, algorithmic
  EXPECT_EQ(wu::Nfd(U"e\u0301\u0323"), U"e\u0323\u0301");  // canonical order
  std::u32string lo;
  wu::AppendLower(0x130, &lo);  // İ -> i + combining dot above
  EXPECT_EQ(lo, U"i\u0307");
}

// ---- against Hugging Face (needs the installed model package) -------------

class HfTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = testing::MiniLmDir();
    ASSERT_FALSE(dir.empty());
    WordPieceOptions opt;  // tokenizer_config.json: lower-case, strip accents
    auto t = WordPieceTokenizer::FromVocabFile(dir + "/vocab.txt", opt);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tok_ = std::move(t).value();
    auto text = ReadFileString(testing::MiniLmRefDir() + "/tokenizer_refs.json");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    refs_ = nlohmann::json::parse(text.value());
  }
  std::unique_ptr<WordPieceTokenizer> tok_;
  nlohmann::json refs_;
};

TEST_F(HfTokenizer, CorpusIdsMatchExactly) {
  auto text = ReadFileString(std::string(ATTNFLOW_SOURCE_DIR) + "/" +
                             refs_["corpus"].get<std::string>());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  const std::vector<std::string> lines = testing::SplitLines(text.value());
  const auto& ref = refs_["lines"];
  ASSERT_GE(lines.size(), 200u);
  ASSERT_EQ(lines.size(), ref.size()) << "corpus changed: rerun tools/models/make_minilm_refs.py";
  int mismatches = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto got = tok_->Encode(lines[i], true);
    ASSERT_TRUE(got.ok()) << "line " << i + 1 << ": " << got.status().ToString();
    const auto want = ref[i]["ids"].get<std::vector<int32_t>>();
    if (got.value() != want && ++mismatches <= 5) {
      ADD_FAILURE() << "line " << i + 1 << " \"" << lines[i] << "\"\n  got  "
                    << IdsString(got.value()) << "\n  want " << IdsString(want);
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << lines.size() << " lines";
}

TEST_F(HfTokenizer, CorpusDecodeMatches) {
  int mismatches = 0;
  for (const auto& line : refs_["lines"]) {
    auto got = tok_->Decode(line["ids"].get<std::vector<int32_t>>(), true);
    ASSERT_TRUE(got.ok());
    const std::string want = line["decoded"].get<std::string>();
    if (got.value() != want && ++mismatches <= 5) {
      ADD_FAILURE() << "decode got \"" << got.value() << "\" want \"" << want << "\"";
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_F(HfTokenizer, ExtraStringsMatch) {
  for (const auto& e : refs_["extra"]) {
    const std::string s = e["text"].get<std::string>();
    auto got = tok_->Encode(s, true);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got.value(), e["ids"].get<std::vector<int32_t>>()) << "text \"" << s << "\"";
  }
}

TEST_F(HfTokenizer, CodePointProbesMatch) {
  // One string per code point where HF's (older) Unicode data differs from
  // Python's, plus a sample of all others.
  int mismatches = 0;
  const auto& probes = refs_["probes"];
  ASSERT_GT(probes.size(), 1000u);
  for (const auto& p : probes) {
    const char32_t cp = p[0].get<uint32_t>();
    std::string c;
    wu::AppendUtf8(cp, &c);
    const std::string text = "a" + c + "b " + c + c + " x" + c;
    auto got = tok_->Encode(text, true);
    ASSERT_TRUE(got.ok());
    const auto want = p[1].get<std::vector<int32_t>>();
    if (got.value() != want && ++mismatches <= 5) {
      char hex[16];
      std::snprintf(hex, sizeof(hex), "U+%04X", static_cast<unsigned>(cp));
      ADD_FAILURE() << hex << ": got " << IdsString(got.value()) << " want " << IdsString(want);
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << probes.size() << " probes";
}

}  // namespace
}  // namespace attnflow
