// quantize.h — generator of the hostile `attnflow quantize` inputs (issue
// 34, class "quantize"): weights of growing magnitude up to and past what
// the float16 scales of every target type can hold, NaN and infinities;
// GGUF headers whose general.alignment asks for huge padding; and the
// spellings of an output path that name the input file.
//
// Rules (attnflow/gguf.h QuantizeGguf, docs/errors.md): a row the target
// type cannot hold, or a non-finite weight, is refused naming the tensor
// (exit 2, nothing written); weights it can hold are written and read back
// finite and close; an alignment above kGgufMaxAlignment is refused by the
// reader and the output is always written at 32; an output naming the input
// (same device and inode) is refused and the input is unchanged.
//
// Used by tests/fault/fault_hostile3_test.cc. Deterministic (attnflow/rng.h).
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "attnflow/gguf.h"
#include "attnflow/rng.h"

namespace attnflow::regress {

// The --type values of `attnflow quantize`.
inline std::vector<std::string> QuantMixNames() {
  return {"q4_0", "q8_0", "q4_k_m", "q5_k_m", "q6_k"};
}

// Largest |weight| per case: ordinary (must be written), past Q4_0's float16
// scale (~5.2e5), past Q8_0's (~8.3e6), past every type's (1e9 > the largest
// Q6_K value ~2.7e8), near FLT_MAX; then NaN and +inf.
inline std::vector<float> HostileMagnitudes() {
  return {100.0f, 6e5f, 1e7f, 1e9f, 3e38f, std::numeric_limits<float>::quiet_NaN(),
          std::numeric_limits<float>::infinity()};
}

// A GGUF with one quantisable F32 matrix "blk.0.attn_q.weight" of 4 rows x
// 256 (a multiple of every block size): seeded uniform values in
// [-magnitude/2, magnitude/2] with element (2, 17) set to `magnitude`
// (NaN/inf as given), written at `alignment`.
inline std::vector<uint8_t> WeightsGguf(float magnitude, uint32_t alignment = kGgufDefaultAlignment,
                                        uint64_t seed = 34) {
  const int64_t cols = 256, rows = 4;
  GgufBuilder g(alignment);
  g.AddString("general.architecture", "llama");
  if (alignment != kGgufDefaultAlignment) g.AddU32("general.alignment", alignment);
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols) * 4);
  Rng rng(seed);
  const float scale = std::isfinite(magnitude) ? magnitude : 1.0f;
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v = static_cast<float>(rng.Uniform(-0.5, 0.5)) * scale;
    if (i == 2 * cols + 17) v = magnitude;
    std::memcpy(bytes.data() + i * 4, &v, 4);
  }
  g.AddTensor("blk.0.attn_q.weight", 0, {cols, rows}, std::move(bytes));
  return g.Build();
}

// A header-only GGUF (no tensors) asking for `alignment`: 2^26 made a 64 MiB
// copy of a 161-byte file, 2^31 a 2 GiB one.
inline std::vector<uint8_t> AlignmentBomb(uint32_t alignment) {
  GgufBuilder g(32);
  g.AddString("general.architecture", "llama");
  g.AddU32("general.alignment", alignment);
  return g.Build();
}
inline std::vector<uint32_t> HostileAlignments() {
  return {1u << 17, 1u << 20, 1u << 26, 1u << 31};
}

// Other names of the file `in` inside `dir` (created here): the same
// string, ./-relative and dir/../ spellings, a symlink, a symlink to a
// symlink, a hard link. Each must be refused as the output of quantize.
inline std::vector<std::string> AliasesOf(const std::string& in, const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<std::string> out = {in};
  const fs::path p(in);
  out.push_back((p.parent_path() / "." / p.filename()).string());
  fs::create_directories(fs::path(dir) / "sub");
  out.push_back((fs::path(dir) / "sub" / ".." / fs::relative(p, dir)).string());
  const std::string link = dir + "/alias_symlink.gguf", link2 = dir + "/alias_symlink2.gguf";
  const std::string hard = dir + "/alias_hardlink.gguf";
  fs::remove(link);
  fs::remove(link2);
  fs::remove(hard);
  fs::create_symlink(fs::absolute(p), link);
  fs::create_symlink(link, link2);
  fs::create_hard_link(p, hard);
  out.push_back(link);
  out.push_back(link2);
  out.push_back(hard);
  return out;
}

}  // namespace attnflow::regress
