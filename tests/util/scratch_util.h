// scratch_util.h — scratch files and directories of the tests that feed
// hostile files to the library and the CLI (tests/fault), and whether the
// build runs under a sanitizer (address-space limits such as ulimit -v
// cannot work with the sanitizers' shadow memory, so those rows skip there).
// Nothing here computes expected values.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

namespace attnflow::testing {

// GCC defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang answers
// __has_feature.
#if defined(__has_feature)
#define ATTNFLOW_TEST_HAS_FEATURE(x) __has_feature(x)
#else
#define ATTNFLOW_TEST_HAS_FEATURE(x) 0
#endif
#if defined(__SANITIZE_ADDRESS__) || ATTNFLOW_TEST_HAS_FEATURE(address_sanitizer)
inline constexpr bool kAsan = true;
#else
inline constexpr bool kAsan = false;
#endif
#if defined(__SANITIZE_THREAD__) || ATTNFLOW_TEST_HAS_FEATURE(thread_sanitizer)
inline constexpr bool kTsan = true;
#else
inline constexpr bool kTsan = false;
#endif

// A new directory /tmp/<prefix>_XXXXXX (mkdtemp); "/tmp" if that fails. The
// caller removes it.
inline std::string MakeTempDir(const std::string& prefix) {
  std::string dir = "/tmp/" + prefix + "_XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return "/tmp";
  return dir;
}

// Writes `b` to `path` (a failed open or short write fails the test).
inline void WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(std::fwrite(b.data(), 1, b.size(), f), b.size());
  std::fclose(f);
}

// A directory <temp>/<prefix>_<pid>_<n>, made on construction and removed
// with everything in it on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix)
      : path_(std::filesystem::temp_directory_path() /
              (prefix + "_" + std::to_string(getpid()) + "_" + std::to_string(counter_++))) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the directory.
  std::string P(const std::string& name) const { return (path_ / name).string(); }
  // Writes `bytes` to `name` inside the directory; returns its path.
  std::string File(const std::string& name, const std::vector<uint8_t>& bytes) const {
    const std::filesystem::path p = path_ / name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return p.string();
  }

 private:
  std::filesystem::path path_;
  static inline int counter_ = 0;
};

}  // namespace attnflow::testing
