// tiny_llama.h — a minimal, valid llama GGUF image (F32 weights, byte-level
// vocabulary, one block unless told otherwise) for the llama-loader fuzz
// seeds and the hostile-input tests (tests/fault/fault_hostile_test.cc).
//
// Invariant: with the defaults the image loads with
// llama::LoadLlamaGgufFromBuffer; `claimed_blocks` changes only the
// llama.block_count metadata (the tensors stay those of `blocks` blocks), and
// `name_as_number` stores general.name as a u32 instead of a string.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "attnflow/gguf.h"

namespace attnflow::testing_llama {

struct TinyLlamaOptions {
  int64_t blocks = 1;
  int64_t claimed_blocks = -1;  // -1: same as blocks
  bool name_as_number = false;
  std::string chat_template;    // empty: none
};

inline std::vector<uint8_t> TinyLlamaGguf(const TinyLlamaOptions& o = {}) {
  const int64_t E = 8, F = 16, H = 2, Hkv = 1, D = 4;
  GgufBuilder g;
  g.AddString("general.architecture", "llama");
  if (o.name_as_number) g.AddU32("general.name", 7);
  else g.AddString("general.name", "tiny");
  g.AddU32("llama.block_count", static_cast<uint32_t>(o.claimed_blocks >= 0 ? o.claimed_blocks : o.blocks));
  g.AddU32("llama.context_length", 32);
  g.AddU32("llama.embedding_length", E);
  g.AddU32("llama.feed_forward_length", F);
  g.AddU32("llama.attention.head_count", H);
  g.AddU32("llama.attention.head_count_kv", Hkv);
  g.AddF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  std::vector<std::string> toks;
  // GPT-2 bytes_to_unicode(): printable bytes as themselves, the others as
  // U+0100.. in byte order, UTF-8 encoded.
  for (int b = 0, extra = 0; b < 256; ++b) {
    const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    const uint32_t cp = keep ? static_cast<uint32_t>(b) : 256u + static_cast<uint32_t>(extra++);
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    toks.push_back(s);
  }
  toks.push_back("<s>");
  toks.push_back("</s>");
  std::vector<int32_t> types(toks.size(), 1);  // normal
  types[256] = types[257] = 3;                 // control
  g.AddString("tokenizer.ggml.model", "gpt2");
  g.AddString("tokenizer.ggml.pre", "gpt2");
  g.AddStringArray("tokenizer.ggml.tokens", toks);
  g.AddI32Array("tokenizer.ggml.token_type", types);
  g.AddStringArray("tokenizer.ggml.merges", {});
  g.AddU32("tokenizer.ggml.eos_token_id", 257);
  if (!o.chat_template.empty()) g.AddString("tokenizer.chat_template", o.chat_template);
  const int64_t V = static_cast<int64_t>(toks.size());
  uint32_t seed = 1;
  auto f32 = [&](int64_t n) {
    std::vector<uint8_t> b(static_cast<size_t>(n) * 4);
    for (int64_t i = 0; i < n; ++i) {
      seed = seed * 1664525u + 1013904223u;
      const float v = static_cast<float>(static_cast<int32_t>(seed >> 8) % 200 - 100) / 400.0f;
      std::memcpy(b.data() + i * 4, &v, 4);
    }
    return b;
  };
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols) {
    g.AddTensor(name, 0, {cols, rows}, f32(rows * cols));
  };
  mat("token_embd.weight", V, E);
  g.AddTensor("output_norm.weight", 0, {E}, f32(E));
  for (int64_t l = 0; l < o.blocks; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    g.AddTensor(p + "attn_norm.weight", 0, {E}, f32(E));
    g.AddTensor(p + "ffn_norm.weight", 0, {E}, f32(E));
    mat(p + "attn_q.weight", H * D, E);
    mat(p + "attn_k.weight", Hkv * D, E);
    mat(p + "attn_v.weight", Hkv * D, E);
    mat(p + "attn_output.weight", E, H * D);
    mat(p + "ffn_gate.weight", F, E);
    mat(p + "ffn_up.weight", F, E);
    mat(p + "ffn_down.weight", E, F);
  }
  return g.Build();
}

}  // namespace attnflow::testing_llama
