// standalone_main.cc — a replay-only main() for the fuzz targets, for builds
// without libFuzzer (e.g. gcc, or coverage reports). Runs LLVMFuzzerTestOneInput
// once on every file named on the command line; directories are walked
// (non-recursively, sorted). Options starting with '-' are ignored so the same
// command line as for libFuzzer works. Exit 0 when every input ran (a failed
// check aborts the process).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>
#include <algorithm>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {
int RunFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return 1;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "Running: %s (%zu bytes)\n", p.c_str(), bytes.size());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  int failures = 0, ran = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (!a.empty() && a[0] == '-') continue;
    const std::filesystem::path p(a);
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      std::vector<std::filesystem::path> files;
      for (const auto& e : std::filesystem::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
      std::sort(files.begin(), files.end());
      for (const auto& f : files) failures += RunFile(f), ++ran;
    } else {
      failures += RunFile(p), ++ran;
    }
  }
  std::fprintf(stderr, "Executed %d inputs, %d unreadable\n", ran, failures);
  return failures == 0 ? 0 : 1;
}
