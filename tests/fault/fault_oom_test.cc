// fault_oom_test.cc — hostile round H6 ("out of memory names the file and the
// stage"): the llama loader under an allocator that fails exactly the N-th
// operator new, for every N the load makes.
//
// Invariants checked, for every N: the process does not die (no uncaught
// std::bad_alloc), the load either succeeds (N past its last allocation) or
// returns an error whose message names the model file; an error that comes
// from the injected failure is kResourceExhausted. Replacing the global
// operator new is test-only and this binary's alone; it is compiled out under
// AddressSanitizer (which owns operator new), where the test is skipped.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "../../fuzz/common/tiny_llama.h"
#include "attnflow/model.h"

#if defined(__SANITIZE_ADDRESS__)
#define ATTNFLOW_OOM_HOOK 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTNFLOW_OOM_HOOK 0
#endif
#endif
#ifndef ATTNFLOW_OOM_HOOK
#define ATTNFLOW_OOM_HOOK 1
#endif

namespace {
std::atomic<long> g_fail_at{-1};  // fail the allocation with this index; -1 = never
std::atomic<long> g_count{0};
std::atomic<bool> g_failed{false};
}  // namespace

#if ATTNFLOW_OOM_HOOK
void* operator new(std::size_t n) {
  if (g_fail_at.load(std::memory_order_relaxed) >= 0 &&
      g_count.fetch_add(1, std::memory_order_relaxed) == g_fail_at.load(std::memory_order_relaxed)) {
    g_failed.store(true);
    throw std::bad_alloc();
  }
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#endif

namespace attnflow {
namespace {

TEST(FaultOom, LlamaLoaderNamesTheFileForEveryFailedAllocation) {
  if (!ATTNFLOW_OOM_HOOK) GTEST_SKIP() << "AddressSanitizer owns operator new";
  char dir[] = "/tmp/attnflow_oom_XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/tiny.gguf";
  {
    const std::vector<uint8_t> bytes = testing_llama::TinyLlamaGguf({.blocks = 2});
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
  DecoderOptions opt;
  opt.num_threads = 1;
  ASSERT_TRUE(LoadDecoderModel(path, opt).ok());  // loads without failures
  int failures = 0, stepped = 0;
  for (long n = 0; n < 200000; n += (n < 2000 ? 1 : 97)) {
    g_failed = false;
    g_count = 0;
    g_fail_at = n;
    Result<std::unique_ptr<DecoderModel>> m = LoadDecoderModel(path, opt);
    g_fail_at = -1;
    ++stepped;
    if (!g_failed) {  // n is past the load's last allocation
      EXPECT_TRUE(m.ok()) << m.status().message();
      break;
    }
    if (m.ok()) continue;  // the failed allocation was optional (e.g. a cache)
    ++failures;
    EXPECT_NE(m.status().message().find(path), std::string::npos)
        << "allocation " << n << ": " << m.status().message();
    EXPECT_EQ(m.status().code(), StatusCode::kResourceExhausted)
        << "allocation " << n << ": " << m.status().message();
    if (::testing::Test::HasFailure()) break;  // one report is enough
  }
  EXPECT_GT(failures, 10) << "the hook never hit the loader (" << stepped << " steps)";
  std::remove(path.c_str());
  ::rmdir(dir);
}

}  // namespace
}  // namespace attnflow
