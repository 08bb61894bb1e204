// rss.cc — the peak resident set size of this program since its execve
// (attnflow/bench.h, PeakRssSinceExecBytes): VmHWM from /proc/self/status,
// else getrusage's ru_maxrss.
//
// Invariants: no allocation (a fixed line buffer), nothing throws; the
// /proc value is in kB (KiB), as is ru_maxrss on Linux.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "attnflow/bench.h"

namespace attnflow {

int64_t PeakRssSinceExecBytes() {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    int64_t kib = -1;
    while (std::fgets(line, sizeof line, f) != nullptr) {
      if (std::strncmp(line, "VmHWM:", 6) == 0) {
        kib = std::strtoll(line + 6, nullptr, 10);
        break;
      }
    }
    std::fclose(f);
    if (kib >= 0) return kib * 1024;
  }
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return -1;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace attnflow
