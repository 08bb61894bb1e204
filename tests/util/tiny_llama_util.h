// tiny_llama_util.h — a tiny synthetic Llama GGUF (2 layers, E 64, F 96, 4 heads
// / 2 kv heads of 16 dims, a 258-token byte vocabulary; random weights of every
// supported type: F32, F16, BF16, Q8_0, Q4_0, Q4_1) written to a temporary file
// and loaded with llama::LoadLlamaGgufWithOptions. Used by smollm2_test (loader
// validation, matmul paths, prefill/decode consistency) and llama_decode_test
// (fused decode step, also under TSan). Deterministic (fixed seed).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "attnflow/file_util.h"
#include "attnflow/gguf.h"
#include "attnflow/model.h"
#include "attnflow/rng.h"
#include "attnflow/tensor.h"
#include "model/llama/llama_model.h"

namespace attnflow::testing {

inline std::vector<uint8_t> RandomTensorBytes(uint32_t type, int64_t rows, int64_t cols, Rng& rng) {
  auto n = [](Rng& r) { return static_cast<float>(r.Normal(0.0, 0.2)); };
  std::vector<uint8_t> b;
  auto put16 = [&](uint16_t h) {
    b.push_back(static_cast<uint8_t>(h & 0xFF));
    b.push_back(static_cast<uint8_t>(h >> 8));
  };
  for (int64_t r = 0; r < rows; ++r) {
    if (type == 0) {  // F32
      for (int64_t c = 0; c < cols; ++c) {
        const float v = n(rng);
        const auto* p = reinterpret_cast<const uint8_t*>(&v);
        b.insert(b.end(), p, p + 4);
      }
    } else if (type == 1 || type == 30) {  // F16 / BF16
      for (int64_t c = 0; c < cols; ++c) put16(type == 1 ? F32ToF16(n(rng)) : F32ToBF16(n(rng)));
    } else {
      for (int64_t blk = 0; blk < cols / 32; ++blk) {
        put16(F32ToF16(type == 8 ? 0.01f : 0.04f));
        if (type == 3) put16(F32ToF16(-0.3f));
        const int nq = type == 8 ? 32 : 16;
        for (int j = 0; j < nq; ++j) b.push_back(static_cast<uint8_t>(rng.Next()));
      }
    }
  }
  return b;
}

struct TinyOpts {
  std::string arch = "llama";
  bool tied = false;
  bool bad_shape = false;
  bool drop_tensor = false;
  std::string rope_scaling;
  int64_t embd_rows = 0;  // 0 = vocabulary size
  uint32_t context = 64;
};

inline std::vector<uint8_t> TinyLlama(const TinyOpts& o) {
  Rng rng(5);
  GgufBuilder g;
  const int64_t E = 64, F = 96, H = 4, Hkv = 2, D = 16, L = 2;
  g.AddString("general.architecture", o.arch);
  g.AddU32(o.arch + ".block_count", L);
  g.AddU32(o.arch + ".context_length", o.context);
  g.AddU32(o.arch + ".embedding_length", E);
  g.AddU32(o.arch + ".feed_forward_length", F);
  g.AddU32(o.arch + ".attention.head_count", H);
  g.AddU32(o.arch + ".attention.head_count_kv", Hkv);
  g.AddF32(o.arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  g.AddF32(o.arch + ".rope.freq_base", 10000.0f);
  if (!o.rope_scaling.empty()) g.AddString(o.arch + ".rope.scaling.type", o.rope_scaling);
  // Byte-level vocabulary: the 256 byte symbols, then two specials.
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) {
    const bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    static int extra = 0;
    if (b == 0) extra = 0;
    const uint32_t cp = keep ? b : 256 + extra++;
    std::string s;
    if (cp < 0x80) s += static_cast<char>(cp);
    else { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
    toks.push_back(s);
  }
  toks.push_back("<s>");
  toks.push_back("</s>");
  std::vector<int32_t> types(toks.size(), 1);
  types[256] = types[257] = 3;
  const int64_t V = static_cast<int64_t>(toks.size());
  g.AddString("tokenizer.ggml.model", "gpt2");
  g.AddString("tokenizer.ggml.pre", "gpt2");
  g.AddStringArray("tokenizer.ggml.tokens", toks);
  g.AddI32Array("tokenizer.ggml.token_type", types);
  g.AddStringArray("tokenizer.ggml.merges", {});
  g.AddU32("tokenizer.ggml.eos_token_id", 257);
  auto add = [&](const std::string& name, uint32_t type, int64_t rows, int64_t cols) {
    if (rows == 1) g.AddTensor(name, type, {cols}, RandomTensorBytes(type, 1, cols, rng));
    else g.AddTensor(name, type, {cols, rows}, RandomTensorBytes(type, rows, cols, rng));
  };
  add("token_embd.weight", 1, o.embd_rows > 0 ? o.embd_rows : V, E);
  add("output_norm.weight", 0, 1, E);
  if (!o.tied) add("output.weight", 30, V, E);
  const uint32_t qtypes[] = {0, 1, 30, 8, 2, 3, 3};
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", 0, 1, E);
    add(p + "ffn_norm.weight", 0, 1, E);
    add(p + "attn_q.weight", qtypes[(l + 0) % 7], o.bad_shape && l == 1 ? H * D + 32 : H * D, E);
    add(p + "attn_k.weight", qtypes[(l + 1) % 7], Hkv * D, E);
    if (!(o.drop_tensor && l == 1)) add(p + "attn_v.weight", qtypes[(l + 2) % 7], Hkv * D, E);
    add(p + "attn_output.weight", qtypes[(l + 3) % 7], E, H * D);
    add(p + "ffn_gate.weight", qtypes[(l + 4) % 7], F, E);
    add(p + "ffn_up.weight", qtypes[(l + 5) % 7], F, E);
    add(p + "ffn_down.weight", qtypes[(l + 6) % 7], E, F);
  }
  return g.Build();
}

inline Result<std::unique_ptr<DecoderModel>> LoadTiny(const TinyOpts& o, const llama::LlamaOptions& lo = {}) {
  static int n = 0;
  char dir[] = "/tmp/attnflow_tiny_XXXXXX";
  if (::mkdtemp(dir) == nullptr) return IoError("mkdtemp");
  const std::string path = std::string(dir) + "/tiny" + std::to_string(n++) + ".gguf";
  const std::vector<uint8_t> b = TinyLlama(o);
  Status st = WriteFileAtomic(path, std::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
  if (!st.ok()) return st;
  Result<std::unique_ptr<DecoderModel>> m = llama::LoadLlamaGgufWithOptions(path, lo);
  ::unlink(path.c_str());  // the mapping stays valid
  ::rmdir(dir);
  return m;
}

}  // namespace attnflow::testing
