// trace_util.h — helpers shared by the trace tests (tests/trace/): the toy's
// trace, where a failed TraceToy is a test failure (and an empty Trace), and
// a per-process scratch folder. Nothing here computes expected values.
// Test-only header.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>

#include "attnflow/trace.h"

namespace attnflow::testing {

inline trace::Trace Toy(const trace::ToyOptions& o = {}) {
  Result<trace::Trace> t = trace::TraceToy(o);
  if (!t.ok()) {
    ADD_FAILURE() << t.status().ToString();
    return trace::Trace();
  }
  return std::move(t).value();
}

// <temp>/attnflow_<name>_<pid>, created (one folder per test process).
inline std::string TempDirFor(const std::string& name) {
  const std::filesystem::path d = std::filesystem::temp_directory_path() /
                                  ("attnflow_" + name + "_" + std::to_string(getpid()));
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace attnflow::testing
