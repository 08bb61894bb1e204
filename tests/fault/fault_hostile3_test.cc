// fault_hostile3_test.cc — fault matrix rows of the third hostile-input round
// (issue 34; docs/errors.md rows H6, H16-H21): worker threads that cannot
// start, weights a quantised type cannot hold, quantize writing over its own
// input, huge GGUF alignments, writers interrupted by SIGBUS or a file-size
// limit, and control characters from files reaching the terminal. The MPI
// rows run in tests/dist/ring_hostile.sh.
//
// The hostile inputs come from the generators in tests/regress/generators/
// (one per class). Every expected outcome is a rule stated in
// attnflow/threading.h, gguf.h, file_util.h, tools/cli/cli_common.h or
// docs/errors.md, or a property of the number formats (a float16 scale
// holds at most 65504); no value comes from the code under test. Each test
// fails on the code before the fix: std::terminate or a hang in the pool's
// constructor, all-NaN tensors written with exit 0, the input replaced, a 64
// MiB output from a 161-byte file, a temporary left behind (or death by
// SIGXFSZ), raw ESC bytes on stdout.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "../../fuzz/common/tiny_llama.h"
#include "../regress/generators/quantize.h"
#include "../regress/generators/terminal.h"
#include "../regress/generators/threads.h"
#include "../regress/generators/writers.h"
#include "attnflow/file_util.h"
#include "attnflow/gguf.h"
#include "attnflow/safetensors.h"
#include "attnflow/threading.h"
#include "core/thread_start.h"
#include "util/cli_util.h"
#include "util/scratch_util.h"
#include "util/minilm_util.h"

namespace attnflow {
namespace {

namespace fs = std::filesystem;

// Address-space limits (ulimit -v, RLIMIT_AS) cannot work with the
// sanitizers' shadow memory: those rows run in the plain build only.
constexpr bool kSanitizer = testing::kAsan || testing::kTsan;

using testing::WriteBytes;

std::string TempDir() { return testing::MakeTempDir("attnflow_hostile3"); }

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Names in `dir` that look like a temporary of WriteFileAtomic /
// WriteDirectoryAtomic (".<name>.tmp-<pid>-<n>").
std::vector<std::string> Temporaries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 1 && n[0] == '.' && n.find(".tmp-") != std::string::npos) out.push_back(n);
  }
  return out;
}

std::string Cli() { return std::string(ATTNFLOW_CLI); }

// ---- threads (H6) ------------------------------------------------------------

std::vector<std::string>& Warnings() {
  static std::vector<std::string> w;
  return w;
}
void RecordWarning(const std::string& m) { Warnings().push_back(m); }

std::atomic<int> g_started{0};
int g_fail_after = 0;

// Starts real workers until g_fail_after have started, then refuses like
// pthread_create under a process limit (EAGAIN).
std::thread StartThenRefuse(std::function<void()> fn) {
  if (g_started.load() >= g_fail_after) {
    throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again),
                            "thread creation refused (test)");
  }
  ++g_started;
  return std::thread(std::move(fn));
}
std::thread RefuseOutOfMemory(std::function<void()>) { throw std::bad_alloc(); }
// Counts the starts; the thread runs nothing (the caller then runs every
// task itself, which ParallelFor allows).
std::thread CountOnly(std::function<void()>) {
  ++g_started;
  return std::thread([] {});
}

struct StarterScope {
  explicit StarterScope(internal::ThreadStarter s) {
    internal::SetThreadStarterForTesting(s);
    Warnings().clear();
    SetThreadWarningHandler(&RecordWarning);
  }
  ~StarterScope() {
    internal::SetThreadStarterForTesting(nullptr);
    SetThreadWarningHandler(nullptr);
  }
};

// Every task of several calls runs exactly once (ParallelFor's contract).
void ExpectEveryTaskOnce(ThreadPool& pool) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.ParallelFor(n, [&](int64_t t, int w) {
      EXPECT_GE(w, 0);
      EXPECT_LT(w, pool.NumWorkers());
      hits[static_cast<size_t>(t)]++;
    });
    for (int64_t t = 0; t < n; ++t) ASSERT_EQ(hits[static_cast<size_t>(t)].load(), 1) << t;
  }
}

// The reported failure: the system refuses the 4th worker. Rule: the pool
// runs with the 3 started (+ the caller), works, warns once, and its
// destructor returns (before: std::terminate, or a hang destroying a
// condition variable the started workers wait on).
TEST(HostileThreads, PoolRunsWithTheThreadsThatStarted) {
  g_started = 0;
  g_fail_after = 3;
  StarterScope scope(&StartThenRefuse);
  {
    ThreadPool pool(100);
    EXPECT_EQ(pool.NumWorkers(), 4);
    EXPECT_EQ(pool.RequestedWorkers(), 100);
    ExpectEveryTaskOnce(pool);
  }
  ASSERT_EQ(Warnings().size(), 1u);
  EXPECT_NE(Warnings()[0].find("asked for 100 threads, running with 4"), std::string::npos)
      << Warnings()[0];
  EXPECT_NE(Warnings()[0].find("EAGAIN"), std::string::npos) << Warnings()[0];
  // Once per handler: a second short pool does not warn again.
  g_started = 0;
  {
    ThreadPool pool(50);
    EXPECT_EQ(pool.NumWorkers(), 4);
    ExpectEveryTaskOnce(pool);
  }
  EXPECT_EQ(Warnings().size(), 1u);
}

TEST(HostileThreads, NoThreadAtAllRunsOnTheCaller) {
  StarterScope scope(&RefuseOutOfMemory);
  ThreadPool pool(8);
  EXPECT_EQ(pool.NumWorkers(), 1);
  ExpectEveryTaskOnce(pool);
  ASSERT_EQ(Warnings().size(), 1u);
  EXPECT_NE(Warnings()[0].find("running with 1"), std::string::npos) << Warnings()[0];
}

// More than kMaxPoolThreads are never started (ATTNFLOW_NUM_THREADS=1000000
// would otherwise create threads until the system refuses).
TEST(HostileThreads, ThreadCountIsCapped) {
  g_started = 0;
  StarterScope scope(&CountOnly);
  {
    ThreadPool pool(kMaxPoolThreads + 100);
    EXPECT_EQ(pool.NumWorkers(), kMaxPoolThreads);
    ExpectEveryTaskOnce(pool);
  }
  EXPECT_EQ(g_started.load(), kMaxPoolThreads - 1);
  ASSERT_EQ(Warnings().size(), 1u);
  EXPECT_NE(Warnings()[0].find("at most " + std::to_string(kMaxPoolThreads)), std::string::npos)
      << Warnings()[0];
}

void PrintWarningLine(const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); }

// In a child: RLIMIT_AS at the current size + 256 MiB (room for about 30
// stacks of 8 MiB), then 1000 threads asked. Exit 0 iff the pool is short
// and works.
void ShortPoolUnderAddressSpaceLimit() {
  long pages = 0;
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr || std::fscanf(f, "%ld", &pages) != 1) _exit(90);
  std::fclose(f);
  const rlim_t limit = static_cast<rlim_t>(pages) * ::sysconf(_SC_PAGESIZE) + (rlim_t{256} << 20);
  rlimit rl;
  rl.rlim_cur = rl.rlim_max = limit;
  if (::setrlimit(RLIMIT_AS, &rl) != 0) _exit(91);
  SetThreadWarningHandler(&PrintWarningLine);
  ThreadPool pool(1000);
  if (pool.NumWorkers() >= 1000 || pool.NumWorkers() < 1) _exit(92);
  std::atomic<int64_t> sum{0};
  pool.ParallelFor(10000, [&](int64_t t, int) { sum += t; });
  _exit(sum.load() == int64_t{10000} * 9999 / 2 ? 0 : 93);
}

// The real limit, in a child (the limit must not touch this process).
TEST(HostileThreads, AddressSpaceLimitLeavesAWorkingPool) {
  if (kSanitizer) GTEST_SKIP() << "RLIMIT_AS and the sanitizers' shadow memory do not mix";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ShortPoolUnderAddressSpaceLimit(), ::testing::ExitedWithCode(0),
              "asked for 1000 threads, running with");
}

// The generator's runs: every command with every hostile thread count, and
// 1000 threads under `ulimit -v`. Rule: exit 0 (with the warning where
// threads were refused or capped, or the count was unusable) or a clear
// error with exit 2; never a signal, "terminate called" or a hang.
TEST(HostileThreads, CommandsEndCleanlyWhateverTheThreadCount) {
  const std::string dir = TempDir();
  const std::string tiny = dir + "/tiny.gguf", quant = dir + "/w.gguf";
  WriteBytes(tiny, testing_llama::TinyLlamaGguf());
  WriteBytes(quant, regress::WeightsGguf(100.0f));
  testing::CliOptions o;
  o.deadline_s = 120;
  for (const regress::ThreadCase& c : regress::ThreadCases(tiny, quant, dir)) {
    // Under the sanitizers: no address-space limit, and no thousand real
    // threads (each has its shadow and fake stacks); the injected-starter
    // tests above cover the pool there.
    const bool many = c.env.find("=1000") != std::string::npos ||
                      c.env.find("'1000'") != std::string::npos ||
                      c.env.find("'5000'") != std::string::npos ||
                      c.env.find("'2147483647'") != std::string::npos ||
                      c.args.find("--threads 1000") != std::string::npos;
    if (kSanitizer && (c.needs_limit || many)) continue;
    // 1.2 GB: the binary and a small run fit, 1000 stacks of 8 MiB do not.
    const std::string cmd = c.needs_limit
                                ? "sh -c 'ulimit -v 1200000 && exec env " + c.env + " " + Cli() +
                                      " " + c.args + "'"
                                : "env " + c.env + " " + Cli() + " " + c.args;
    const testing::CliResult r = testing::RunShell(cmd, o);
    SCOPED_TRACE(c.name + ": " + cmd + "\n" + r.text);
    EXPECT_TRUE(r.code == 0 || r.code == 2) << "exit " << r.code;
    EXPECT_EQ(r.text.find("terminate called"), std::string::npos);
    if (r.code == 2) EXPECT_NE(r.text.find(": error: "), std::string::npos);
    if (c.needs_limit && r.code == 0) {
      EXPECT_NE(r.text.find("warning: asked for 1000 threads, running with"), std::string::npos);
    }
    const std::string n = c.env.substr(c.env.find('=') + 1);
    if (n == "'abc'" || n == "'12x'" || n == "'-3'" || n == "'99999999999999999999'") {
      EXPECT_NE(r.text.find("is not a whole number"), std::string::npos);
    }
    if (n == "'5000'" || n == "'2147483647'") {
      EXPECT_NE(r.text.find("at most " + std::to_string(kMaxPoolThreads)), std::string::npos);
    }
  }
  fs::remove_all(dir);
}

// ---- quantize (H16-H18) -------------------------------------------------------

// Max |a - b| / max |a| over a tensor of the written file, or -1 if the
// tensor is missing or a value is not finite.
double ReadBackError(const std::string& path, const std::vector<float>& src) {
  Result<GgufFile> f = GgufFile::Open(path);
  if (!f.ok()) return -1;
  const GgufTensorInfo* t = f->FindTensor("blk.0.attn_q.weight");
  if (t == nullptr) return -1;
  std::vector<float> back(src.size());
  if (!DequantizeRow(back.data(), f->TensorData(*t), t->type, static_cast<int64_t>(src.size())).ok())
    return -1;
  double err = 0, amax = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    if (!std::isfinite(back[i])) return -1;
    err = std::max(err, std::fabs(static_cast<double>(back[i]) - src[i]));
    amax = std::max(amax, std::fabs(static_cast<double>(src[i])));
  }
  return err / amax;
}

std::vector<float> SourceValues(const std::string& path) {
  Result<GgufFile> f = GgufFile::Open(path);
  const GgufTensorInfo* t = f->FindTensor("blk.0.attn_q.weight");
  std::vector<float> v(static_cast<size_t>(t->ne[0] * t->ne[1]));
  std::memcpy(v.data(), f->TensorData(*t), v.size() * 4);
  return v;
}

// Rule (gguf.h QuantizeGguf): a row whose quantised form does not read back
// finite, or a NaN/inf weight, is refused naming the tensor, and nothing is
// written; otherwise the file reads back finite and close. Fixed points
// from the float16 scale (max 65504): every type holds 100 and none holds
// 1e9 (Q6_K's largest value is 65504*128*32 ~ 2.7e8); Q4_0 (d = max/8)
// cannot hold 6e5, Q8_0 (d = max/127) cannot hold 1e7 but holds 6e5.
TEST(HostileQuantize, WeightsTheTypeCannotHoldAreRefused) {
  const std::string dir = TempDir();
  for (float mag : regress::HostileMagnitudes()) {
    const std::string in = dir + "/in.gguf";
    WriteBytes(in, regress::WeightsGguf(mag));
    const std::vector<float> src = SourceValues(in);
    for (const std::string& name : regress::QuantMixNames()) {
      QuantMix mix;
      ASSERT_TRUE(ParseQuantMix(name, &mix));
      const std::string out = dir + "/out_" + name + ".gguf";
      fs::remove(out);
      const Status st = QuantizeGguf(in, out, mix, 2, nullptr);
      SCOPED_TRACE(name + " at " + std::to_string(mag) + ": " + st.ToString());
      const bool must_refuse = !std::isfinite(mag) || mag >= 1e9f ||
                               (name == "q4_0" && mag >= 6e5f) || (name == "q8_0" && mag >= 1e7f);
      const bool must_write = mag <= 100.0f || (name == "q8_0" && mag == 6e5f);
      if (must_refuse) EXPECT_FALSE(st.ok());
      if (must_write) EXPECT_TRUE(st.ok());
      if (st.ok()) {
        const double e = ReadBackError(out, src);
        EXPECT_GE(e, 0) << "written, but not finite when read back";
        EXPECT_LT(e, 0.1) << "written, but far from the weights";
      } else {
        // Finite weights too large: out_of_range; NaN/inf: QuantizeRow's
        // invalid_argument "not finite".
        EXPECT_EQ(st.code(), std::isfinite(mag) ? StatusCode::kOutOfRange
                                                : StatusCode::kInvalidArgument);
        EXPECT_NE(st.message().find("blk.0.attn_q.weight"), std::string::npos);
        EXPECT_FALSE(fs::exists(out)) << "nothing is written on error";
        EXPECT_TRUE(Temporaries(dir).empty());
      }
    }
  }
  // The command: exit 2 and the message, no output.
  WriteBytes(dir + "/big.gguf", regress::WeightsGguf(1e9f));
  const auto r = testing::RunCli("quantize " + dir + "/big.gguf " + dir + "/big_q.gguf --type q8_0");
  EXPECT_EQ(r.code, 2) << r.text;
  EXPECT_NE(r.text.find("too large for Q8_0"), std::string::npos) << r.text;
  EXPECT_FALSE(fs::exists(dir + "/big_q.gguf"));
  fs::remove_all(dir);
}

// Rule (gguf.h, file_util.h CheckOutputIsNotInput): an output naming the
// input — same path, another spelling, a symlink (chain) or a hard link —
// is refused with exit 2, and the input's bytes are unchanged.
TEST(HostileQuantize, OutputNamingTheInputIsRefused) {
  const std::string dir = TempDir();
  const std::string in = dir + "/model.gguf";
  WriteBytes(in, regress::WeightsGguf(1.0f));
  const std::vector<uint8_t> before = ReadBytes(in);
  for (const std::string& alias : regress::AliasesOf(in, dir)) {
    const auto r = testing::RunCli("quantize " + in + " " + alias + " --type q4_0");
    EXPECT_EQ(r.code, 2) << alias << "\n" << r.text;
    EXPECT_NE(r.text.find("is the input file"), std::string::npos) << r.text;
    EXPECT_EQ(ReadBytes(in), before) << alias;
    EXPECT_EQ(ReadBytes(alias), before) << alias;
  }
  // Another file is still fine.
  const auto ok = testing::RunCli("quantize " + in + " " + dir + "/other.gguf --type q4_0");
  EXPECT_EQ(ok.code, 0) << ok.text;
  EXPECT_TRUE(Temporaries(dir).empty());
  fs::remove_all(dir);
}

// Rule (gguf.h): general.alignment above kGgufMaxAlignment is corrupt
// (before: a 161-byte file became a 64 MiB or 2 GiB copy); quantize writes
// at the default 32 (as llama.cpp) whatever the input's alignment, with a
// general.alignment entry that says so.
TEST(HostileQuantize, AlignmentIsBounded) {
  const std::string dir = TempDir();
  for (uint32_t al : regress::HostileAlignments()) {
    const std::vector<uint8_t> bomb = regress::AlignmentBomb(al);
    EXPECT_LT(bomb.size(), 200u);
    const std::string in = dir + "/bomb.gguf", out = dir + "/bomb_q.gguf";
    WriteBytes(in, bomb);
    const auto r = testing::RunCli("quantize " + in + " " + out + " --type q8_0");
    EXPECT_EQ(r.code, 2) << al << "\n" << r.text;
    EXPECT_NE(r.text.find("general.alignment"), std::string::npos) << r.text;
    EXPECT_FALSE(fs::exists(out)) << al;
  }
  // The largest alignment a file may ask for: read, and rewritten at 32.
  const std::string in = dir + "/al.gguf", out = dir + "/al_q.gguf";
  WriteBytes(in, regress::WeightsGguf(1.0f, kGgufMaxAlignment));
  const Status qs = QuantizeGguf(in, out, QuantMix::kQ8_0, 1, nullptr);
  ASSERT_TRUE(qs.ok()) << qs.ToString();
  Result<GgufFile> f = GgufFile::Open(out);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->alignment(), kGgufDefaultAlignment);
  const GgufValue* v = f->Find("general.alignment");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->ints.at(0), int64_t{kGgufDefaultAlignment});
  EXPECT_LT(fs::file_size(out), fs::file_size(in));
  fs::remove_all(dir);
}

// ---- writers (H19) ------------------------------------------------------------

// Rule (file_util.h FileBytes): a guarded mapping that loses its file while
// an output is being written ends the process with exit 2 AND removes the
// output's temporary (before: the SIGBUS guard _exit-ed and left
// ".out.bin.tmp-<pid>-<n>").
TEST(HostileWriters, SigbusDuringAWriteLeavesNoTemporary) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string dir = TempDir();
  const std::string model = dir + "/model.safetensors", out = dir + "/out.bin";
  std::vector<float> data(1 << 16, 1.0f);
  ASSERT_TRUE(WriteSafetensors(model, {{"w", MakeView(data.data(), DType::kF32, {1 << 16})}}).ok());
  EXPECT_EXIT(
      {
        auto f = SafetensorsFile::Open(model);
        if (!f.ok()) _exit(90);
        auto t = f->Get("w");
        if (!t.ok()) _exit(91);
        (void)WriteFileAtomic(out, [&](std::FILE* fp) -> Status {
          std::fputs("partial output", fp);
          std::fflush(fp);
          if (::truncate(model.c_str(), 0) != 0) _exit(92);
          volatile float sum = 0;
          const float* p = static_cast<const float*>(t->data);
          for (int i = 0; i < (1 << 16); i += 1024) sum = sum + p[i];
          _exit(93);  // not reached: the weights are gone
        });
        _exit(94);
      },
      ::testing::ExitedWithCode(kMappedFileChangedExit), "model.safetensors.*truncated while in use");
  EXPECT_TRUE(Temporaries(dir).empty()) << Temporaries(dir)[0];
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

// The reported case end to end: `embed --out` streaming lines from a FIFO;
// the model file is truncated once the output's temporary exists, then the
// lines come.
TEST(HostileWriters, EmbedWithItsModelTruncatedLeavesNoTemporary) {
  const std::string src = testing::MiniLmDir();
  ASSERT_FALSE(src.empty());
  const std::string dir = TempDir(), model = dir + "/model";
  fs::create_directories(model);
  for (const auto& e : fs::directory_iterator(src)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), model + "/" + e.path().filename().string());
  }
  const std::string fifo = dir + "/lines", out = dir + "/emb.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // O_RDWR never blocks and keeps a writer on the FIFO until we close it.
  const int w = ::open(fifo.c_str(), O_RDWR);
  ASSERT_GE(w, 0);
  FILE* proc = ::popen((Cli() + " embed --model " + model + " --file " + fifo + " --batch 1 --out " +
                        out + " 2>&1").c_str(),
                       "r");
  ASSERT_NE(proc, nullptr);
  bool started = false;
  for (int i = 0; i < 1200 && !started; ++i) {
    started = !Temporaries(dir).empty();
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(started) << "embed never started writing";
  fs::resize_file(model + "/model.safetensors", 0);
  ASSERT_EQ(::write(w, "first line\nsecond line\n", 24), 24);
  ::close(w);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, proc)) > 0) text.append(buf, n);
  const int st = ::pclose(proc);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 2) << text;
  EXPECT_NE(text.find("truncated while in use"), std::string::npos) << text;
  EXPECT_TRUE(Temporaries(dir).empty()) << text;
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

// Rule (file_util.h; the CLI ignores SIGXFSZ): every writer of the
// generator under `ulimit -f 0` ends with exit 2 naming the output ("File
// too large"), leaves no temporary and no output (before: killed by SIGXFSZ
// with its temporary left behind).
TEST(HostileWriters, FileSizeLimitEndsEveryWriterCleanly) {
  const std::string dir = TempDir();
  const std::string json = dir + "/in.json", quant = dir + "/w.gguf";
  ASSERT_EQ(testing::RunCli("trace --json " + json).code, 0);
  WriteBytes(quant, regress::WeightsGguf(1.0f));
  const std::string out_dir = dir + "/out";
  fs::create_directories(out_dir);
  for (const regress::WriterCase& c : regress::WriterCases(out_dir, json, quant)) {
    const auto r = testing::RunShell("sh -c 'ulimit -f 0 && exec " + Cli() + " " + c.args + "'");
    SCOPED_TRACE(c.name + "\n" + r.text);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.text.find("File too large"), std::string::npos);
    EXPECT_TRUE(Temporaries(out_dir).empty());
    EXPECT_FALSE(fs::exists(c.out));
  }
  fs::remove_all(dir);
}

// ---- terminal (H20) -------------------------------------------------------------

// Rule (cli_common.h EscapeLine): `trace --from` prints the JSON's source,
// model and note escaped; nothing forbidden reaches stdout (before: raw).
TEST(HostileTerminal, TraceFromPrintsFileFieldsEscaped) {
  const std::string dir = TempDir();
  ASSERT_EQ(testing::RunCli("trace --tokens 40 --max-page-tokens 8 --json " + dir + "/base.json").code, 0);
  std::ifstream f(dir + "/base.json");
  const nlohmann::json base = nlohmann::json::parse(f);
  ASSERT_TRUE(base.contains("view") && base["view"].contains("note"));
  for (const std::string& s : regress::HostileStrings()) {
    if (!IsValidUtf8(s)) continue;  // JSON strings are UTF-8
    nlohmann::json j = base;
    j["source"] = s;
    j["model"]["name"] = s;
    j["view"]["note"] = s;
    const std::string path = dir + "/hostile.json";
    ASSERT_TRUE(WriteFileAtomic(path, j.dump()).ok());
    const auto r = testing::RunCli("trace --from " + path);
    EXPECT_NE(r.code, 2) << r.text;  // the file is a valid trace
    EXPECT_EQ(regress::ForbiddenIn(r.text), "") << r.text;
  }
  fs::remove_all(dir);
}

// Stage names come from the files in `verify --compare`; model paths are
// printed by `trace --model`.
TEST(HostileTerminal, NamesFromFilesAreEscaped) {
  const std::string dir = TempDir();
  std::vector<float> a(4, 1.0f);
  for (const std::string& s : regress::HostileStrings()) {
    if (!IsValidUtf8(s)) continue;
    const TensorView v = MakeView(a.data(), DType::kF32, {4});
    ASSERT_TRUE(WriteSafetensors(dir + "/got.safetensors", {{s, v}}).ok());
    ASSERT_TRUE(WriteSafetensors(dir + "/exp.safetensors", {{s, v}}).ok());
    const auto r = testing::RunCli("verify --compare " + dir + "/got.safetensors " + dir +
                                   "/exp.safetensors");
    EXPECT_EQ(r.code, 0) << r.text;
    EXPECT_EQ(regress::ForbiddenIn(r.text), "") << r.text;
  }
  // A model file whose name carries an escape sequence.
  const std::string model = dir + "/\x1b[31mred\x1b[0m.gguf";
  WriteBytes(model, testing_llama::TinyLlamaGguf());
  const auto r = testing::RunShell("cd " + dir + " && " + Cli() + " trace --model './" +
                                   model.substr(dir.size() + 1) + "' --text hi --json t.json");
  EXPECT_EQ(r.code, 0) << r.text;
  EXPECT_EQ(regress::ForbiddenIn(r.text), "") << r.text;
  EXPECT_NE(r.text.find("\\x1b[31mred"), std::string::npos) << r.text;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace attnflow
