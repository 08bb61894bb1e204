// fault_regress_test.cc — replays every committed fuzz input through the fuzz
// harnesses in the normal (gcc, and ASan/UBSan via tools/ci/sanitize.sh)
// GoogleTest build: the seed corpora fuzz/corpus/<target>/ and the crash
// inputs tests/regress/<target>/ (every crash the fuzzers found becomes a
// file there; see docs/fuzzing.md).
//
// The harness checks (FUZZ_CHECK) become test failures here instead of
// aborts. Harness headers are picked up by name with __has_include, so a new
// fuzz target fuzz/targets/<name>.h with one of the names below needs no edit
// of this file; any other name needs one #include line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "../fuzz/common/fuzz_common.h"

#if __has_include("../fuzz/targets/attention.h")
#include "../fuzz/targets/attention.h"
#endif
#if __has_include("../fuzz/targets/safetensors.h")
#include "../fuzz/targets/safetensors.h"
#endif
#if __has_include("../fuzz/targets/export_c.h")
#include "../fuzz/targets/export_c.h"
#endif
#if __has_include("../fuzz/targets/micro.h")
#include "../fuzz/targets/micro.h"
#endif
#if __has_include("../fuzz/targets/golden.h")
#include "../fuzz/targets/golden.h"
#endif
#if __has_include("../fuzz/targets/wordpiece.h")
#include "../fuzz/targets/wordpiece.h"
#endif
#if __has_include("../fuzz/targets/gguf.h")
#include "../fuzz/targets/gguf.h"
#endif
#if __has_include("../fuzz/targets/bpe.h")
#include "../fuzz/targets/bpe.h"
#endif
#if __has_include("../fuzz/targets/trace.h")
#include "../fuzz/targets/trace.h"
#endif
#if __has_include("../fuzz/targets/nn.h")
#include "../fuzz/targets/nn.h"
#endif
#if __has_include("../fuzz/targets/model.h")
#include "../fuzz/targets/model.h"
#endif
#if __has_include("../fuzz/targets/chat_template.h")
#include "../fuzz/targets/chat_template.h"
#endif
#if __has_include("../fuzz/targets/tokenizer.h")
#include "../fuzz/targets/tokenizer.h"
#endif
#if __has_include("../fuzz/targets/llama_loader.h")
#include "../fuzz/targets/llama_loader.h"
#endif
#if __has_include("../fuzz/targets/chat_render.h")
#include "../fuzz/targets/chat_render.h"
#endif
#if __has_include("../fuzz/targets/npy.h")
#include "../fuzz/targets/npy.h"
#endif
#if __has_include("../fuzz/targets/device_dump.h")
#include "../fuzz/targets/device_dump.h"
#endif

namespace {

namespace fs = std::filesystem;

struct CheckFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void ThrowingHandler(const char* file, int line, const std::string& what) {
  throw CheckFailure(std::string(file) + ":" + std::to_string(line) + ": " + what);
}

std::vector<fs::path> Inputs(const std::string& target) {
  std::vector<fs::path> out;
  for (const char* dir : {"fuzz/corpus", "tests/regress"}) {
    const fs::path d = fs::path(ATTNFLOW_SOURCE_DIR) / dir / target;
    if (!fs::is_directory(d)) continue;
    for (const auto& e : fs::directory_iterator(d)) {
      if (e.is_regular_file() && e.path().filename().string()[0] != '.' &&
          e.path().extension() != ".md") {
        out.push_back(e.path());
      }
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint8_t> ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

class FuzzReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(FuzzReplay, EveryCommittedInputPassesTheHarness) {
  const std::string name = GetParam();
  const attnflow_fuzz::TargetFn fn = attnflow_fuzz::FindTarget(name);
  ASSERT_NE(fn, nullptr) << "no harness registered as " << name;
  attnflow_fuzz::OnFailure() = &ThrowingHandler;
  const std::vector<fs::path> inputs = Inputs(name);
  EXPECT_FALSE(inputs.empty()) << "no seeds in fuzz/corpus/" << name;
  for (const fs::path& p : inputs) {
    const std::vector<uint8_t> bytes = ReadAll(p);
    try {
      fn(bytes.data(), bytes.size());
    } catch (const CheckFailure& e) {
      ADD_FAILURE() << p << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << p << ": exception escaped the library: " << e.what();
    }
  }
  attnflow_fuzz::OnFailure() = &attnflow_fuzz::AbortingHandler;
}

std::vector<std::string> Names() {
  std::vector<std::string> names;
  for (const auto& t : attnflow_fuzz::Registry()) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay, ::testing::ValuesIn(Names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Every directory of crash inputs belongs to a compiled-in harness (a typo in
// a directory name would otherwise silently skip its inputs); the one
// exception is generators/ (hostile-input generators, tests/regress/README.md).
TEST(FuzzReplayLayout, RegressDirectoriesNameKnownTargets) {
  const fs::path d = fs::path(ATTNFLOW_SOURCE_DIR) / "tests/regress";
  if (!fs::is_directory(d)) GTEST_SKIP() << "no tests/regress";
  for (const auto& e : fs::directory_iterator(d)) {
    if (!e.is_directory() || e.path().filename() == "generators") continue;
    EXPECT_NE(attnflow_fuzz::FindTarget(e.path().filename().string()), nullptr)
        << e.path() << " has no harness fuzz/targets/" << e.path().filename().string() << ".h";
  }
}

}  // namespace
