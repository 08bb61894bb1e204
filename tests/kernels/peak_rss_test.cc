// peak_rss_test.cc — the one peak-RSS figure (attnflow/bench.h,
// PeakRssSinceExecBytes): it grows by what the program touches, and it is
// this program's own peak, not a parent's. Expected values are properties:
// touching N MiB raises the peak by at least N MiB; a child started by fork
// + exec from a process holding 256 MiB reports a peak far below that, while
// the kernel's ru_maxrss of that same child (wait4), which Linux carries
// over an execve, is at least the parent's 256 MiB — the test would fail if
// the function used ru_maxrss.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "attnflow/bench.h"

namespace attnflow {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr const char* kChildEnv = "ATTNFLOW_PEAK_RSS_CHILD_OUT";

TEST(PeakRss, GrowsByTheMemoryTouched) {
  const int64_t before = PeakRssSinceExecBytes();
  ASSERT_GT(before, 0);
  std::vector<char> block(96 * kMiB);
  std::memset(block.data(), 1, block.size());  // every page resident
  const int64_t after = PeakRssSinceExecBytes();
  EXPECT_GE(after, before + 90 * kMiB) << "before " << before << ", after " << after;
  EXPECT_EQ(block[block.size() / 2], 1);
}

// The child's half of the next test: with kChildEnv set (by the parent),
// write this program's peak to that file. Skipped otherwise.
TEST(PeakRss, ChildReport) {
  const char* out = std::getenv(kChildEnv);
  if (out == nullptr) GTEST_SKIP() << "run by IsThisProgramsOwnNotAParents only";
  std::ofstream(out) << PeakRssSinceExecBytes();
}

TEST(PeakRss, IsThisProgramsOwnNotAParents) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) GTEST_SKIP() << "no /proc/self/exe";
  exe[n] = 0;
  std::vector<char> parent(256 * kMiB);
  std::memset(parent.data(), 1, parent.size());  // resident in the parent, and in a fork's copy
  const std::string out = ::testing::TempDir() + "peak_rss_child_" + std::to_string(getpid());
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv(kChildEnv, out.c_str(), 1);
    const char* argv[] = {exe, "--gtest_filter=PeakRss.ChildReport", nullptr};
    execv(exe, const_cast<char* const*>(argv));
    _exit(127);
  }
  int status = 0;
  struct rusage ru;
  ASSERT_EQ(wait4(pid, &status, 0, &ru), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  int64_t child = -1;
  std::ifstream(out) >> child;
  std::remove(out.c_str());
  ASSERT_GT(child, 0);
  const int64_t ru_maxrss = static_cast<int64_t>(ru.ru_maxrss) * 1024;
  EXPECT_LT(child, 128 * kMiB) << "the child's own peak (a test binary) is far below the parent's";
  // What ru_maxrss says about the same child: the parent's memory, carried
  // over the exec (so a PeakRss built on it would fail the line above).
  EXPECT_GE(ru_maxrss, 250 * kMiB) << "ru_maxrss of the child " << ru_maxrss;
  EXPECT_EQ(parent[parent.size() - 1], 1);
}

}  // namespace
}  // namespace attnflow
