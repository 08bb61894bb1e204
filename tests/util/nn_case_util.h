// nn_case_util.h — shared by the tests that run committed nn golden case
// files (tests/data/nn, tests/data/nn_vit) through nn::VerifyNnCaseFile: the
// sorted case files of a folder, a gtest name per file, the check that
// every stage of a case was compared and matches, and a case re-encoded with
// an edit (to show the verifier can fail). Expected values are the
// case files' own (written by the pinned torch / transformers generators).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <string>
#include <vector>

#include "attnflow/nn_golden.h"
#include "attnflow/safetensors.h"

namespace attnflow::testing {

// The .safetensors files of `dir`, sorted.
inline std::vector<std::string> SafetensorsFilesIn(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

// The file's stem with every character gtest does not allow replaced by '_'.
inline std::string CaseFileTestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string n = std::filesystem::path(info.param).stem().string();
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return n;
}

// Runs the case file through the float64 reference: it loads, has stages,
// and every stage was compared and matches.
inline void ExpectEveryStageMatches(const std::string& path) {
  Result<CaseReport> r = nn::VerifyNnCaseFile(path);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->stages.empty());
  for (const auto& s : r->stages) {
    EXPECT_TRUE(s.compared) << s.stage << ": " << s.note;
    EXPECT_TRUE(s.match) << path << " stage " << s.stage << " at " << s.first_bad_index
                         << ": got " << s.got_at_bad << ", expected " << s.expected_at_bad
                         << " (max_abs " << s.max_abs << ") " << s.note;
  }
}

// The case file at `path` re-encoded in memory, named `label`, after
// edit_tensor(name, &tensor) saw a copy of each tensor and edit_meta(&meta)
// the metadata.
template <typename EditTensor, typename EditMeta>
Result<SafetensorsFile> EditedCase(const std::string& path, const std::string& label,
                                   EditTensor edit_tensor, EditMeta edit_meta) {
  Result<SafetensorsFile> f = SafetensorsFile::Open(path);
  if (!f.ok()) return f.status();
  std::vector<Tensor> keep;
  std::vector<std::pair<std::string, TensorView>> ts;
  keep.reserve(f->tensors().size());
  for (const auto& info : f->tensors()) {
    Result<Tensor> t = f->Copy(info.name);
    if (!t.ok()) return t.status();
    edit_tensor(info.name, &t.value());
    keep.push_back(std::move(t).value());
    ts.emplace_back(info.name, keep.back().view());
  }
  auto meta = f->metadata();
  edit_meta(&meta);
  Result<std::vector<uint8_t>> bytes = EncodeSafetensors(ts, meta);
  if (!bytes.ok()) return bytes.status();
  return SafetensorsFile::FromBuffer(std::move(bytes).value(), label);
}

}  // namespace attnflow::testing
