// fault_hostile_test.cc — fault matrix rows of the second hostile-input round
// (issue 17; docs/errors.md rows H1-H9): a mapped model file truncated
// while in use, chat-template render budgets, GGUF hyperparameters that claim
// more than the file holds, metadata of the wrong type, read-only outputs,
// temporary files on SIGTERM, and the address-space limit.
//
// Every expected outcome is the rule stated in attnflow/file_util.h,
// chat_template.h or docs/errors.md (an exit code, a status code, a name in
// the message, a file left alone); no value comes from the code under test.
// Each test fails on the code before the fix: a SIGBUS death, a render that
// succeeds with a 128 MB string, an error about a missing tensor instead of
// block_count, "std::get: wrong index", a replaced read-only file, a
// temporary file left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../../fuzz/common/tiny_llama.h"
#include "attnflow/file_util.h"
#include "attnflow/model.h"
#include "attnflow/npy.h"
#include "attnflow/safetensors.h"
#include "model/llama/chat_template.h"
#include "model/llama/llama_model.h"
#include "util/cli_util.h"
#include "util/scratch_util.h"
#include "util/minilm_util.h"
#include <nlohmann/json.hpp>

namespace attnflow {
namespace {

namespace fs = std::filesystem;

// Address-space limits (ulimit -v) cannot work with AddressSanitizer's
// shadow memory: those rows run in the plain build only.
using testing::kAsan;
using testing::WriteBytes;

std::string TempDir() { return testing::MakeTempDir("attnflow_hostile"); }

// F12: the model is loaded, then the file is truncated under it, then the
// weights are read. Rule (file_util.h, FileBytes): exit code 2 and a message
// naming the file, never a SIGBUS death (exit 135).
TEST(FaultHostile, ModelTruncatedWhileInUseIsAnErrorNotSigbus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = TempDir();
  const std::string path = dir + "/tiny.gguf";
  WriteBytes(path, testing_llama::TinyLlamaGguf());
  EXPECT_EXIT(
      {
        llama::LlamaOptions lo;
        lo.num_threads = 1;
        auto m = llama::LoadLlamaGgufWithOptions(path, lo);
        if (!m.ok()) _exit(90);
        if (::truncate(path.c_str(), 0) != 0) _exit(91);
        Tensor logits;
        (void)(*m)->Forward({1, 2, 3}, false, &logits);
        _exit(92);  // not reached: the weights are gone
      },
      ::testing::ExitedWithCode(kMappedFileChangedExit),
      "tiny.gguf.*truncated while in use");
  fs::remove_all(dir);
}

TEST(FaultHostile, SafetensorsTruncatedWhileMappedIsAnErrorNotSigbus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = TempDir();
  const std::string path = dir + "/w.safetensors";
  std::vector<float> data(4096, 1.0f);
  TensorView v;
  v.data = data.data();
  v.dtype = DType::kF32;
  v.rank = 1;
  v.shape[0] = 4096;
  v.strides[0] = 1;
  ASSERT_TRUE(WriteSafetensors(path, {{"w", v}}).ok());
  EXPECT_EXIT(
      {
        auto f = SafetensorsFile::Open(path);
        if (!f.ok()) _exit(90);
        auto t = f->Get("w");
        if (!t.ok()) _exit(91);
        if (::truncate(path.c_str(), 0) != 0) _exit(92);
        volatile float sum = 0;
        const float* p = static_cast<const float*>(t->data);
        for (int i = 0; i < 4096; i += 256) sum = sum + p[i];
        _exit(93);
      },
      ::testing::ExitedWithCode(kMappedFileChangedExit), "w.safetensors.*truncated while in use");
  fs::remove_all(dir);
}

// A template that sets `var` to "ab" doubled `times` times (2^(times+1) bytes).
std::string DoubledString(const std::string& var, int times) {
  std::string src = "{% set " + var + " = 'ab' %}";
  for (int i = 0; i < times; ++i) src += "{% set " + var + " = " + var + " ~ " + var + " %}";
  return src;
}

using Chat = std::vector<std::pair<std::string, std::string>>;

// Renders `msgs` through `t` and expects a kResourceExhausted whose message
// names `budget`.
void ExpectOverBudget(const llama::ChatTemplate& t, const Chat& msgs, const char* budget) {
  auto r = t.Render(msgs, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find(budget), std::string::npos) << r.status().message();
}

// The same for the template source `src`, which must parse.
void ExpectOverBudget(const std::string& src, const Chat& msgs, const char* budget) {
  auto t = llama::ChatTemplate::Parse(src);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ExpectOverBudget(*t, msgs, budget);
}

// F13: 21 nested loops over 2 messages take 2^21 iterations: more than the
// step budget (chat_template.h), a kResourceExhausted naming the budget.
TEST(FaultHostile, NestedLoopsHitTheStepBudget) {
  std::string src;
  for (int i = 0; i < 21; ++i) src += "{% for m" + std::to_string(i) + " in messages %}";
  src += "x";
  for (int i = 0; i < 21; ++i) src += "{% endfor %}";
  ExpectOverBudget(src, {{"user", "a"}, {"assistant", "b"}}, "step budget");
}

// F13: doubling a string 26 times gives 128 MiB, far above the byte budget.
TEST(FaultHostile, StringDoublingHitsTheByteBudget) {
  std::string src = DoubledString("s", 26);
  src += "{{ s }}";
  ExpectOverBudget(src, {{"user", "a"}}, "budget");
}

// The ChatML loop of SmolLM2's template, with or without the generation prompt.
constexpr const char* kChatMl =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";

// `turns` messages of `bytes` 'w' each, user and assistant in turn.
Chat LongChat(int turns, size_t bytes) {
  Chat msgs;
  for (int i = 0; i < turns; ++i) {
    msgs.push_back({i % 2 ? "assistant" : "user", std::string(bytes, 'w')});
  }
  return msgs;
}

// A real-sized chat (200 turns through a ChatML-like template) stays well
// inside the budget.
TEST(FaultHostile, LongRealChatRendersWithinBudget) {
  auto t = llama::ChatTemplate::Parse(
      std::string(kChatMl) +
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = t->Render(LongChat(200, 500), true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

// The step budget bounds time, not just node visits: indexing a 2 MiB string
// scans it (code points), so 64 such lookups cost 64 x 32768 steps, over the
// budget (they used to cost one step each and build a vector of 2M strings).
TEST(FaultHostile, ScanningALongStringCostsStepsByItsBytes) {
  std::string src = DoubledString("s", 20);  // 2 MiB
  src += "{% for m in messages %}{{ s[0] }}{% endfor %}";
  auto t = llama::ChatTemplate::Parse(src);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ExpectOverBudget(*t, Chat(64, {"user", "a"}), "step budget");
  // One lookup is fine.
  auto one = t->Render({{"user", "a"}}, false);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(*one, "a");
}

// A substring search is charged by the bytes it may compare: a 64 KiB needle
// in a 2 MiB haystack is ~33M steps before any byte is compared.
TEST(FaultHostile, SubstringSearchIsChargedBeforeItRuns) {
  std::string src = DoubledString("s", 20) + DoubledString("n", 15);  // 2 MiB, 64 KiB
  src += "{% if n ~ 'c' in s %}found{% endif %}";
  ExpectOverBudget(src, {{"user", "a"}}, "step budget");
}

// Jinja 3.1.6 semantics (checked with jinja2: "[][][]"): a variable set in a
// loop body is visible neither in the next iteration nor after the loop;
// `loop` is the current iteration's record even when kept in a variable.
TEST(FaultHostile, LoopScopeIsFreshEveryIteration) {
  auto t = llama::ChatTemplate::Parse(
      "{% for m in messages %}[{% if x is defined %}{{ x }}{% endif %}]{% set x = m['content'] %}"
      "{% set l = loop %}{{ l.index }}{% endfor %}{% if x is defined %}OUT{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = t->Render({{"user", "a"}, {"assistant", "b"}, {"user", "c"}}, false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, "[]1[]2[]3");
}

// The step budget grows with the input: a 2000-turn chat of 4 KiB messages
// (8 MiB) through a ChatML template copies each message ~5 times (~700k
// steps by bytes alone) and still renders.
TEST(FaultHostile, LongChatOfLongMessagesRendersWithinBudget) {
  auto t = llama::ChatTemplate::Parse(kChatMl);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = t->Render(LongChat(2000, 4096), false);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->size(), size_t{2000} * 4096);
}

// F14: block_count claims 200000 blocks, the file holds 1. Rule: the counts
// are checked against the tensors before anything is sized by them; the
// error names block_count.
TEST(FaultHostile, BlockCountBeyondTheTensorsIsRejectedFirst) {
  testing_llama::TinyLlamaOptions o;
  o.claimed_blocks = 200000;
  auto m = llama::LoadLlamaGgufFromBuffer(testing_llama::TinyLlamaGguf(o), "claim.gguf", {});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(m.status().message().find("block_count"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("claim.gguf"), std::string::npos);
  // The honest file loads.
  auto ok = llama::LoadLlamaGgufFromBuffer(testing_llama::TinyLlamaGguf(), "tiny.gguf", {});
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

// F15: general.name stored as a number is a named type error.
TEST(FaultHostile, MetadataOfTheWrongTypeIsANamedError) {
  testing_llama::TinyLlamaOptions o;
  o.name_as_number = true;
  auto m = llama::LoadLlamaGgufFromBuffer(testing_llama::TinyLlamaGguf(o), "named.gguf", {});
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find("general.name"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected a string"), std::string::npos) << msg;
  EXPECT_NE(msg.find("named.gguf"), std::string::npos) << msg;
}

// F16: a file without its owner's write bit is not replaced (file_util.h).
TEST(FaultHostile, ReadOnlyOutputIsRefused) {
  const std::string dir = TempDir();
  const std::string path = dir + "/ro.txt";
  ASSERT_TRUE(WriteFileAtomic(path, std::string_view("old")).ok());
  ASSERT_EQ(::chmod(path.c_str(), 0444), 0);
  Status st = WriteFileAtomic(path, std::string_view("new"));
  EXPECT_EQ(st.code(), StatusCode::kIoError);
  EXPECT_NE(st.message().find("read-only"), std::string::npos) << st.message();
  auto back = ReadFileString(path);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, "old");
  // Nothing else in the directory (no temporary file).
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename() != "ro.txt";
  EXPECT_EQ(n, 0);
  // The CLI says so with exit 2.
  auto r = testing::RunCli("golden --out " + path + " --heads 1 --q-len 2 --kv-len 2 --head-dim 2");
  EXPECT_EQ(r.code, 2) << r.text;
  fs::remove_all(dir);
}

// F17: SIGTERM or SIGINT while a file is being written removes the temporary
// file, and the process still dies of the signal.
TEST(FaultHostile, SignalDuringWriteLeavesNoTemporary) {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string dir = TempDir();
    const std::string path = dir + "/out.bin";
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      (void)WriteFileAtomic(path, [&](std::FILE* f) -> Status {
        std::fputs("partial", f);
        std::fflush(f);
        ::raise(sig);
        return Status::Ok();
      });
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "status " << status;
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      ++n;
      ADD_FAILURE() << "left behind: " << e.path();
    }
    EXPECT_EQ(n, 0);
    fs::remove_all(dir);
  }
}

// H10: a directory export over an older one replaces it whole: a stale stage
// of the old export disappears, the user's own file stays, nothing temporary
// is left next to it.
TEST(FaultHostile, DirectoryExportReplacesAnOlderExportWhole) {
  const std::string dir = TempDir();
  fs::create_directories(dir + "/npy");
  std::FILE* f = std::fopen((dir + "/npy/decode.7.weights.npy").c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  f = std::fopen((dir + "/npy/notes.txt").c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fputs("mine", f);
  std::fclose(f);
  const auto r = testing::RunCli("trace --npy " + dir + "/npy");
  ASSERT_EQ(r.code, 0) << r.text;
  EXPECT_FALSE(fs::exists(dir + "/npy/decode.7.weights.npy")) << "old and new stages mixed";
  EXPECT_TRUE(fs::exists(dir + "/npy/weights.npy"));
  EXPECT_EQ(ReadFileString(dir + "/npy/notes.txt").value(), "mine");
  const auto entries = std::distance(fs::directory_iterator(dir), fs::directory_iterator());
  EXPECT_EQ(entries, 1) << "temporary directory left next to the export";
  fs::remove_all(dir);
}

// H10: a failing export and a SIGTERM in the middle of one leave the older
// export as it was and no temporary directory.
TEST(FaultHostile, InterruptedDirectoryExportLeavesTheOldOne) {
  const std::string dir = TempDir();
  const std::string out = dir + "/png";
  ASSERT_TRUE(WriteDirectoryAtomic(out, ".png", [](const std::string& tmp) {
                return WriteFileAtomic(tmp + "/a.png", std::string_view("old"));
              }).ok());
  Status st = WriteDirectoryAtomic(out, ".png", [](const std::string& tmp) {
    (void)WriteFileAtomic(tmp + "/a.png", std::string_view("new"));
    return IoError("disk full (simulated)");
  });
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(ReadFileString(out + "/a.png").value(), "old");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    (void)WriteDirectoryAtomic(out, ".png", [](const std::string& tmp) {
      (void)WriteFileAtomic(tmp + "/a.png", std::string_view("new"));
      ::raise(SIGTERM);
      return Status::Ok();
    });
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  EXPECT_EQ(ReadFileString(out + "/a.png").value(), "old");
  const auto entries = std::distance(fs::directory_iterator(dir), fs::directory_iterator());
  EXPECT_EQ(entries, 1) << "temporary directory left behind";
  fs::remove_all(dir);
}

// H13 (minor leniencies made strict): a UTF-8 byte-order mark before a
// safetensors header (nlohmann would skip it) and .npy bool bytes other
// than 0/1 are corrupt.
TEST(FaultHostile, SafetensorsBomAndNpyBoolBytesAreCorrupt) {
  const std::string header = "\xEF\xBB\xBF{}";
  std::vector<uint8_t> st(8, 0);
  st[0] = static_cast<uint8_t>(header.size());
  st.insert(st.end(), header.begin(), header.end());
  auto f = SafetensorsFile::FromBuffer(st, "bom.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(f.status().message().find("byte-order mark"), std::string::npos) << f.status().message();

  uint8_t flags[3] = {1, 0, 1};
  TensorView v;
  v.data = flags;
  v.dtype = DType::kBool;
  v.rank = 1;
  v.shape[0] = 3;
  v.strides[0] = 1;
  auto bytes = EncodeNpy(v);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  ASSERT_TRUE(DecodeNpy(*bytes, "ok.npy").ok());
  bytes->back() = 2;
  auto t = DecodeNpy(*bytes, "two.npy");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(t.status().message().find("must be 0 or 1"), std::string::npos) << t.status().message();
}

// F18: under a 150 MB address-space limit, --help and a small command end
// (before: an OpenBLAS worker spun forever at exit).
TEST(FaultHostile, LowAddressSpaceLimitStillEnds) {
  if (kAsan) GTEST_SKIP() << "ulimit -v and AddressSanitizer do not mix";
  testing::CliOptions o;
  o.deadline_s = 60;
  const std::string limit = "sh -c 'ulimit -v 150000 && exec " + std::string(ATTNFLOW_CLI);
  auto help = testing::RunShell(limit + " --help'", o);
  EXPECT_EQ(help.code, 0) << help.text;
  auto small = testing::RunShell(limit + " bench prefill --q-len 8 --kv-len 8 --heads 1 --repeat 1'", o);
  EXPECT_EQ(small.code, 0) << small.text;
}

// ---- embed (issue 17 and issue 13's embed items) ---------------------------

std::string Embed(const std::string& args) {
  return std::string(ATTNFLOW_CLI) + " embed --model " + testing::MiniLmDir() + " " + args;
}

// F19: lines from standard input; a bad line (invalid UTF-8 with an ANSI
// escape) is reported with its line number and escaped; the other lines are
// embedded; exit 1. Empty lines are skipped with a warning.
TEST(FaultHostile, EmbedReadsStdinAndReportsBadLinesByNumber) {
  const auto r = testing::RunShell("printf 'hello world\n\nbad \377\033[31m line\nthird\n' | " +
                                   Embed("--file -"));
  EXPECT_EQ(r.code, 1) << r.text;
  EXPECT_NE(r.text.find("<stdin>:3"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("\\xff\\x1b[31m"), std::string::npos) << r.text;
  EXPECT_EQ(r.text.find('\x1b'), std::string::npos) << "raw escape byte in the output";
  EXPECT_NE(r.text.find("<stdin>:2: empty input; skipped"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("\"hello world\""), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("\"third\""), std::string::npos) << r.text;
}

// F19 --strict: the bad line stops the command, exit 2, no file written.
TEST(FaultHostile, EmbedStrictWritesNothing) {
  const std::string dir = TempDir();
  const auto r = testing::RunShell("printf 'good\nbad \377\n' | " + Embed("--strict --file - --out " + dir + "/e.npy"));
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("<stdin>:2"), std::string::npos) << r.text;
  EXPECT_FALSE(fs::exists(dir + "/e.npy"));
  EXPECT_TRUE(fs::is_empty(dir)) << "temporary left behind";
  const auto t = testing::RunShell("printf 'good\nbad \377\n' | " + Embed("--strict --file -"));
  EXPECT_EQ(t.code, 2);
  EXPECT_EQ(t.text.find("\"good\""), std::string::npos) << "strict printed a row: " << t.text;
  fs::remove_all(dir);
}

// F20: an input over the model's 256-token limit is truncated with a
// warning that counts the tokens cut: 300 copies of "word" (one WordPiece
// token each in the MiniLM vocabulary) keep 254 + [CLS] + [SEP]: 46 cut.
TEST(FaultHostile, EmbedWarnsAboutTruncation) {
  std::string line;
  for (int i = 0; i < 300; ++i) line += "word ";
  const auto r = testing::RunShell(Embed("'" + line + "'"));
  EXPECT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("argument 1: truncated to 256 tokens; 46 tokens cut"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("256 tokens  norm"), std::string::npos) << r.text;
}

// F20: a 30 MB line must not be tokenised whole: under a 600 MB address
// space it is embedded (before: about 1 GB for its tokens, exit 2).
TEST(FaultHostile, EmbedHugeLineStopsTokenisingAtTheLimit) {
  if (kAsan) GTEST_SKIP() << "ulimit -v and AddressSanitizer do not mix";
  const std::string dir = TempDir();
  {
    std::FILE* f = std::fopen((dir + "/big.txt").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string chunk = "lorem ipsum dolor sit amet ";
    for (size_t n = 0; n < (size_t{30} << 20); n += chunk.size()) std::fputs(chunk.c_str(), f);
    std::fputs("\nshort line\n", f);
    std::fclose(f);
  }
  testing::CliOptions o;
  o.deadline_s = 300;
  const auto r = testing::RunShell("sh -c 'ulimit -v 600000 && exec " + Embed("--file " + dir + "/big.txt --out " + dir + "/e.npy") + "'", o);
  EXPECT_EQ(r.code, 0) << r.text;
  EXPECT_NE(r.text.find("big.txt:1: truncated to 256 tokens; at least"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("bytes were not tokenised"), std::string::npos) << r.text;
  EXPECT_NE(r.text.find("2 x 384"), std::string::npos) << r.text;
  fs::remove_all(dir);
}

// F20: tokenising in whitespace-delimited chunks gives the ids of the whole
// text (property: equal to the tokenizer's own Encode of the full text, cut
// to [CLS] + 254 + [SEP]), also when words sit more than one chunk apart.
TEST(FaultHostile, ChunkedTokenisingEqualsWholeText) {
  auto m = LoadEncoderModel(testing::MiniLmDir());
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  for (const std::string& text :
       {std::string("caf\xc3\xa9 ") + std::string(40000, ' ') + "Stra\xc3\x9f" "e na\xc3\xafve " +
            std::string(70000, '\n') + "[SEP] unbelievable tokens",
        std::string(200, 'x') + std::string(100000, '-') + " end"}) {
    int64_t cut = -1, rest = -1;
    auto mine = (*m)->EncodeTextTruncating(text, &cut, &rest);
    auto whole = (*m)->tokenizer().Encode(text, true);
    ASSERT_TRUE(mine.ok() && whole.ok());
    std::vector<int32_t> expect = *whole;
    int64_t expect_cut = 0;
    if (expect.size() > 256) {
      expect_cut = static_cast<int64_t>(expect.size()) - 256;
      const int32_t sep = expect.back();
      expect.resize(256);
      expect.back() = sep;
    }
    EXPECT_EQ(*mine, expect);
    if (rest == 0) EXPECT_EQ(cut, expect_cut);
    else EXPECT_LE(cut, expect_cut);
  }
}

// Issue 13: --json has ids, tokens and the embedding per input; --similarity
// prints the matrix (here for 9 inputs, above the default 2..8), and its
// diagonal is 1 (the embeddings are L2-normalised).
TEST(FaultHostile, EmbedJsonAndSimilarity) {
  const auto r = testing::RunShell(Embed("--json 'a cat' 'a dog'"), {.merge_stderr = false});
  ASSERT_EQ(r.code, 0) << r.text;
  const nlohmann::json j = nlohmann::json::parse(r.text);
  ASSERT_EQ(j["embeddings"].size(), 2u);
  const auto& e0 = j["embeddings"][0];
  EXPECT_EQ(e0["tokens"].front(), "[CLS]");
  EXPECT_EQ(e0["tokens"].back(), "[SEP]");
  EXPECT_EQ(e0["ids"].size(), e0["tokens"].size());
  EXPECT_EQ(e0["embedding"].size(), 384u);
  std::string many;
  for (int i = 0; i < 9; ++i) many += " 'sentence " + std::to_string(i) + "'";
  const auto s = testing::RunShell(Embed("--similarity" + many));
  ASSERT_EQ(s.code, 0) << s.text;
  EXPECT_NE(s.text.find("cosine similarity:"), std::string::npos) << s.text;
  EXPECT_NE(s.text.find("  [8]"), std::string::npos) << s.text;
  EXPECT_NE(s.text.find(" 1.0000"), std::string::npos) << s.text;
}

}  // namespace
}  // namespace attnflow
