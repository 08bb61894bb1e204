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
#include "attnflow/safetensors.h"
#include "model/llama/chat_template.h"
#include "model/llama/llama_model.h"
#include "util/cli_util.h"

namespace attnflow {
namespace {

namespace fs = std::filesystem;

std::string TempDir() {
  char dir[] = "/tmp/attnflow_hostile_XXXXXX";
  if (::mkdtemp(dir) == nullptr) return "/tmp";
  return dir;
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), f), b.size());
  std::fclose(f);
}

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

// F13: 21 nested loops over 2 messages take 2^21 iterations: more than the
// step budget (chat_template.h), a kResourceExhausted naming the budget.
TEST(FaultHostile, NestedLoopsHitTheStepBudget) {
  std::string src;
  for (int i = 0; i < 21; ++i) src += "{% for m" + std::to_string(i) + " in messages %}";
  src += "x";
  for (int i = 0; i < 21; ++i) src += "{% endfor %}";
  auto t = llama::ChatTemplate::Parse(src);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = t->Render({{"user", "a"}, {"assistant", "b"}}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("step budget"), std::string::npos) << r.status().message();
}

// F13: doubling a string 26 times gives 128 MiB, far above the byte budget.
TEST(FaultHostile, StringDoublingHitsTheByteBudget) {
  std::string src = "{% set s = 'ab' %}";
  for (int i = 0; i < 26; ++i) src += "{% set s = s ~ s %}";
  src += "{{ s }}";
  auto t = llama::ChatTemplate::Parse(src);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto r = t->Render({{"user", "a"}}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("budget"), std::string::npos) << r.status().message();
}

// A real-sized chat (200 turns through a ChatML-like template) stays well
// inside the budget.
TEST(FaultHostile, LongRealChatRendersWithinBudget) {
  auto t = llama::ChatTemplate::Parse(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
      "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<std::pair<std::string, std::string>> msgs;
  for (int i = 0; i < 200; ++i) msgs.push_back({i % 2 ? "assistant" : "user", std::string(500, 'w')});
  auto r = t->Render(msgs, true);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
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

// F18: under a 150 MB address-space limit, --help and a small command end
// (before: an OpenBLAS worker spun forever at exit).
TEST(FaultHostile, LowAddressSpaceLimitStillEnds) {
  testing::CliOptions o;
  o.deadline_s = 60;
  const std::string limit = "sh -c 'ulimit -v 150000 && exec " + std::string(ATTNFLOW_CLI);
  auto help = testing::RunShell(limit + " --help'", o);
  EXPECT_EQ(help.code, 0) << help.text;
  auto small = testing::RunShell(limit + " bench prefill --q-len 8 --kv-len 8 --heads 1 --repeat 1'", o);
  EXPECT_EQ(small.code, 0) << small.text;
}

}  // namespace
}  // namespace attnflow
