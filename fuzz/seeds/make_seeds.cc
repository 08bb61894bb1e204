// make_seeds.cc — writes the committed seed corpora fuzz/corpus/<target>/
// (small, valid or nearly valid inputs that reach deep into each parser).
// Built by fuzz/CMakeLists.txt as `make_seeds`; run as
//   build-fuzz/make_seeds fuzz/corpus
// Deterministic: the same build writes the same bytes. Only targets whose
// directory is passed via the harness list below are written; existing files
// with the same names are overwritten, others are left alone.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attnflow/golden.h"
#include "attnflow/gguf.h"
#include "../common/tiny_llama.h"
#include "attnflow/npy.h"
#include "attnflow/player.h"
#include "attnflow/safetensors.h"
#include "attnflow/tensor.h"

namespace fs = std::filesystem;
using namespace attnflow;

namespace {

int g_failures = 0;

void Write(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  fs::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
    ++g_failures;
  }
}
void WriteText(const fs::path& dir, const std::string& name, const std::string& s) {
  Write(dir, name, std::vector<uint8_t>(s.begin(), s.end()));
}
std::vector<uint8_t> ReadFile(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

Tensor Filled(DType t, const Shape& s, double start) {
  Result<Tensor> r = Tensor::Zeros(t, s);
  if (!r.ok()) std::abort();
  for (int64_t i = 0; i < r->numel(); ++i) r->view().store(i, start + static_cast<double>(i) * 0.25);
  return std::move(r).value();
}

std::vector<uint8_t> HandFile(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> out(8);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_bytes; ++i) out.push_back(static_cast<uint8_t>(i * 37));
  return out;
}

void Safetensors(const fs::path& root) {
  const fs::path d = root / "safetensors";
  Write(d, "empty_header", HandFile("{}      ", 0));
  Write(d, "metadata_only", HandFile(R"({"__metadata__":{"format":"pt","k":"v"}})", 0));
  Write(d, "rank5_and_scalar",
        HandFile(R"({"a":{"dtype":"U8","shape":[1,1,1,1,2],"data_offsets":[0,2]},)"
                 R"("s":{"dtype":"F64","shape":[],"data_offsets":[8,16]},)"
                 R"("z":{"dtype":"BF16","shape":[0,3],"data_offsets":[16,16]}})",
                 24));
  Write(d, "unsupported_dtype", HandFile(R"({"x":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2));
  std::vector<Tensor> keep;
  std::vector<std::pair<std::string, TensorView>> ts;
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI64,
                       DType::kI32, DType::kI8,  DType::kU8,   DType::kBool};
  int i = 0;
  keep.reserve(16);
  for (DType t : all) {
    Shape s;
    for (int r = 0; r < i % 5; ++r) s.push_back(r + 1);
    keep.push_back(Filled(t, s, i));
    ts.emplace_back(std::string("t_") + DTypeName(t), keep.back().view());
    ++i;
  }
  keep.push_back(Filled(DType::kF32, {2, 0, 3}, 0));
  ts.emplace_back("empty", keep.back().view());
  Result<std::vector<uint8_t>> enc = EncodeSafetensors(ts, {{"note", "caf\xc3\xa9"}});
  if (enc.ok()) Write(d, "every_dtype", enc.value());
  else ++g_failures;
}

void Golden(const fs::path& root, const fs::path& src) {
  const fs::path d = root / "golden";
  const fs::path tmp = fs::temp_directory_path() / "attnflow_make_seeds.safetensors";
  auto make = [&](const std::string& name, GoldenSpec s) {
    const Status st = WriteGoldenCase(s, tmp.string());
    if (!st.ok()) {
      std::fprintf(stderr, "golden seed %s: %s\n", name.c_str(), st.ToString().c_str());
      ++g_failures;
      return;
    }
    Write(d, name, ReadFile(tmp));
    fs::remove(tmp);
  };
  GoldenSpec s;
  s.batch = 1, s.num_heads = 2, s.q_len = 2, s.kv_len = 3, s.head_dim = 2, s.seed = 1;
  make("sdpa_min", s);
  GoldenSpec m = s;
  m.mask = "bool", m.causal = Causal::kBottomRight, m.num_kv_heads = 1;
  make("sdpa_boolmask_gqa_causal", m);
  m = s;
  m.mask = "float", m.mask_shape = {1, 2, 2, 3}, m.kv_lens = {2}, m.window_left = 1;
  make("sdpa_floatmask_kvlens_window", m);
  m = s;
  m.alibi = true, m.v_dim = 3, m.scale = 0.3, m.causal = Causal::kTopLeft;
  make("sdpa_alibi_dv_scale", m);
  m = s;
  m.batch = 0;
  make("sdpa_empty_batch", m);
  m = s;
  m.kind = "mha", m.num_heads = 2, m.num_kv_heads = 1, m.head_dim = 2, m.q_len = 2, m.kv_len = 2;
  make("mha_gqa", m);
  const fs::path committed = src / "tests/data/golden/sdpa_single_1x1.safetensors";
  if (fs::exists(committed)) Write(d, "committed_sdpa_single_1x1", ReadFile(committed));
}

std::string Ascii(int b) { return std::string(1, static_cast<char>(b)); }

void Gguf(const fs::path& root) {
  const fs::path d = root / "gguf";
  {
    GgufBuilder g;
    g.AddString("general.architecture", "llama");
    g.AddU32("general.alignment", 32);
    g.AddI32("llama.block_count", 2);
    g.AddF32("llama.rope.freq_base", 10000.0f);
    g.AddBool("tokenizer.ggml.add_bos_token", false);
    g.AddI32Array("ints", {1, -2, 3});
    g.AddStringArray("strings", {"a", "caf\xc3\xa9", ""});
    std::vector<uint8_t> f32(16), f16(8), bf16(8), q8(34 * 2), q40(18 * 2), q41(20);
    for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i * 11);
    for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<uint8_t>(i * 7 + 1);
    for (size_t i = 0; i < q40.size(); ++i) q40[i] = static_cast<uint8_t>(i * 13 + 2);
    for (size_t i = 0; i < q41.size(); ++i) q41[i] = static_cast<uint8_t>(i * 5 + 3);
    q8[1] = q40[1] = q41[1] = 0x3c;  // d = 1.0 (f16 0x3c00)
    q8[0] = q40[0] = q41[0] = 0;
    g.AddTensor("f32", 0, {4}, f32);
    g.AddTensor("f16", 1, {2, 2}, f16);
    g.AddTensor("bf16", 30, {4}, bf16);
    g.AddTensor("q8_0", 8, {32, 2}, q8);
    g.AddTensor("q4_0", 2, {32, 1, 2}, q40);
    g.AddTensor("q4_1", 3, {32}, q41);
    Write(d, "every_type", g.Build());
    std::vector<uint8_t> v2 = g.Build();
    v2[4] = 2;  // version 2
    Write(d, "version2", v2);
  }
  {
    // A complete byte-level BPE tokenizer in metadata.
    GgufBuilder g;
    g.AddString("tokenizer.ggml.model", "gpt2");
    g.AddString("tokenizer.ggml.pre", "smollm");
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {
      uint32_t cp;
      if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = static_cast<uint32_t>(b);
      } else {
        int n = 0;
        for (int x = 0; x < b; ++x)
          if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
        cp = 256 + static_cast<uint32_t>(n);
      }
      std::string s;
      if (cp < 0x80) s += static_cast<char>(cp);
      else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
      tokens.push_back(s);
    }
    tokens.push_back("he");
    tokens.push_back("\xc4\xa0t");  // "Ġt"
    tokens.push_back("<|im_start|>");
    tokens.push_back("<|im_end|>");
    std::vector<int32_t> types(tokens.size(), 1);
    types[types.size() - 1] = types[types.size() - 2] = 3;
    g.AddStringArray("tokenizer.ggml.tokens", tokens);
    g.AddI32Array("tokenizer.ggml.token_type", types);
    g.AddStringArray("tokenizer.ggml.merges", {"h e", "\xc4\xa0 t"});
    g.AddU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tokens.size() - 2));
    g.AddU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokens.size() - 1));
    Write(d, "bpe_tokenizer", g.Build());
  }
  Write(d, "magic_only", {'G', 'G', 'U', 'F', 3, 0, 0, 0});
}

void Texts(const fs::path& root) {
  const fs::path w = root / "wordpiece";
  // Byte 0: bit0 0 = text mode; bits 1-6 options.
  WriteText(w, "ascii", Ascii(0x02) + "Hello, world! [CLS] unplayable tokenizers.");
  WriteText(w, "accents_cjk_emoji", Ascii(0x00) + "Caf\xc3\xa9 STRA\xc3\x9f" "E \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xce\x91\xce\xb2");
  WriteText(w, "invalid_utf8", Ascii(0x02) + "ok \xc3\x28 \xed\xa0\x80 \xf4\x90\x80\x80 \xc0\xaf \xe2\x82");
  static const char kControls[] = "a\0b\x01\tc\r\n\xef\xbf\xbd d\xc2\xa0" "e";
  WriteText(w, "controls", Ascii(0x22) + std::string(kControls, sizeof(kControls) - 1));
  WriteText(w, "long_word", Ascii(0x42) + "supercalifragilisticexpialidocious aaaaaaaa");
  WriteText(w, "vocab_mode", Ascii(0x03) + "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\nworld\n,\n\xe4\xb8\xad");
  WriteText(w, "vocab_invalid", Ascii(0x01) + "[UNK]\n[CLS]\n\xff\n[SEP]");

  const fs::path b = root / "bpe";
  WriteText(b, "ascii", Ascii(0x00) + "Hello world, the token's 12 cafe!");
  WriteText(b, "smollm_specials", Ascii(0x03) + "<|im_start|>user\n2024 caf\xc3\xa9<|im_end|>\n\n  \t x");
  WriteText(b, "invalid_utf8", Ascii(0x00) + "a \xc3\x28 \xed\xa0\x80 b");
  WriteText(b, "unicode", Ascii(0x01) + "\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xd9\xa3\xd9\xa4 \xe2\x85\xa7 I'm ok");
  WriteText(b, "merges_mode", Ascii(0x04) + "h e\n\xc4\xa0 t\nt he\nnot a merge\n \n\xc4\xa0t he");
}

void Attention(const fs::path& root) {
  const fs::path d = root / "attention";
  std::mt19937_64 gen(20240611);
  // All-zero bytes decode to the smallest valid call.
  Write(d, "zeros", std::vector<uint8_t>(48, 0));
  for (int n = 0; n < 24; ++n) {
    std::vector<uint8_t> v(96);
    for (auto& x : v) x = static_cast<uint8_t>(gen());
    Write(d, "random_" + std::to_string(n), v);
  }
}

void Nn(const fs::path& root, const fs::path& src) {
  const fs::path d = root / "nn";
  // Even first byte: an nn golden case follows (the smallest committed ones).
  for (const char* name : {"sin_interleaved_odd_d7_offset5", "sin_concat_d12", "learned_pos_offset3",
                           "rope_half_ntk_static", "align_luong_dot", "align_bahdanau_additive"}) {
    const fs::path p = src / "tests/data/nn" / (std::string(name) + ".safetensors");
    if (!fs::exists(p)) continue;
    std::vector<uint8_t> b = {0};
    const std::vector<uint8_t> f = ReadFile(p);
    b.insert(b.end(), f.begin(), f.end());
    Write(d, std::string("case_") + name, b);
  }
  // Odd first byte: u16 seq_len, u16 context, then model-shape JSON.
  auto shape = [&](const std::string& name, const std::string& json) {
    WriteText(d, "shape_" + name, std::string("\x01\x00\x02\x00\x04", 5) + json);
  };
  shape("bert", R"({"name":"b","num_layers":2,"d_model":64,"num_heads":4,"ffn_dim":256,)"
                R"("vocab_size":1000,"max_positions":128,"type_vocab":2,"embedding_norm":true,)"
                R"("lm_head":false,"pooler":true,"act":"gelu","norm":"layernorm"})");
  shape("llama", R"({"num_layers":4,"d_model":96,"num_heads":6,"num_kv_heads":2,"ffn_dim":256,)"
                 R"("vocab_size":500,"act":"swiglu","norm":"rmsnorm","qkv_bias":false,)"
                 R"("out_bias":false,"ffn_bias":false,"final_norm":true,"tied_lm_head":false,)"
                 R"("kv_bytes_per_element":1})");
  shape("huge", R"({"num_layers":9223372036854775807,"d_model":4611686018427387904,"num_heads":2})");
}

void NpyAndTrace(const fs::path& root) {
  const fs::path n = root / "npy";
  const DType kinds[] = {DType::kF32, DType::kF64, DType::kI64, DType::kI32, DType::kU8, DType::kBool};
  int i = 0;
  for (DType t : kinds) {
    Shape s;
    for (int r = 0; r < i % 5; ++r) s.push_back(r + 2);
    Tensor x = Filled(t, s, i);
    Result<std::vector<uint8_t>> enc = EncodeNpy(x.view());
    if (enc.ok()) Write(n, std::string("t_") + DTypeName(t) + "_rank" + std::to_string(s.size()), enc.value());
    else ++g_failures;
    ++i;
  }
  WriteText(n, "fortran_order", std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                                    "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }" +
                                    std::string(58, ' ') + "\n" + std::string(24, '\0'));
  const fs::path t = root / "trace";
  for (int64_t tokens : {2, 3}) {
    trace::ToyOptions opt;
    opt.num_tokens = tokens;
    opt.decode_steps = tokens == 3 ? 1 : 0;
    Result<trace::Trace> tr = trace::TraceToy(opt);
    if (!tr.ok()) {
      std::fprintf(stderr, "trace seed: %s\n", tr.status().ToString().c_str());
      ++g_failures;
      continue;
    }
    player::PageOptions po;
    Result<std::string> json = player::TraceToJson(tr.value(), po);
    if (json.ok()) WriteText(t, "toy_" + std::to_string(tokens) + "_tokens.json", json.value());
    else ++g_failures;
  }
  WriteText(t, "not_an_object.json", "[1,2,3]");
}

void ChatTemplates(const fs::path& root) {
  const fs::path d = root / "chat_template";
  // Byte 0: bit 0 add_generation_prompt, bits 1-2 number of messages.
  WriteText(d, "chatml", std::string("\x07") +
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
      "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
      "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
  WriteText(d, "features", std::string("\x06") +
      "{# comment #}{%- set n = messages | length -%}{{ bos_token }}"
      "{% for m in messages %}{{ loop.index }}/{{ loop.length }} {{ m.role | upper }}: "
      "{{ m.content.strip() | trim }}{% if not loop.last %} ~ {% elif m.role == 'user' %}!{% else %}.{% endif %}"
      "{% endfor %}{% if x is not defined and n > 1 and 'a' in 'abc' %}{{ n + 1 - 2 }}{% endif %}"
      "{% if n == 0 %}{{ raise_exception('no messages') }}{% endif %}{{ eos_token }}");
  WriteText(d, "unsupported", std::string("\x02") + "{% macro f() %}{% endmacro %}{{ range(3) }}");
  WriteText(d, "nested", std::string("\x02") + "{{ ((((((((1)))))))) }}{% if true %}{% if true %}x{% endif %}{% endif %}");
}

// The llama loader and the render-cost target (issue 17).
void LlamaLoaderAndRender(const fs::path& root) {
  using testing_llama::TinyLlamaGguf;
  using testing_llama::TinyLlamaOptions;
  const fs::path d = root / "llama_loader";
  Write(d, "tiny", TinyLlamaGguf());
  TinyLlamaOptions two;
  two.blocks = 2;
  two.chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}";
  Write(d, "two_blocks_template", TinyLlamaGguf(two));
  TinyLlamaOptions claim;
  claim.claimed_blocks = 10000000;
  Write(d, "block_count_claim", TinyLlamaGguf(claim));
  TinyLlamaOptions named;
  named.name_as_number = true;
  Write(d, "name_as_number", TinyLlamaGguf(named));
  const fs::path r = root / "chat_render";
  // Bytes 0-1: messages, content bytes.
  WriteText(r, "chatml", std::string("\x10\x20") +
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
      "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
  std::string nested = "\x04\x01";
  for (int i = 0; i < 8; ++i) nested += "{% for m" + std::to_string(i) + " in messages %}";
  nested += "x";
  for (int i = 0; i < 8; ++i) nested += "{% endfor %}";
  WriteText(r, "nested_loops", nested);
  std::string dbl = "\x01\x01{% set s = 'ab' %}";
  for (int i = 0; i < 8; ++i) dbl += "{% set s = s ~ s %}";
  WriteText(r, "string_doubling", dbl + "{{ s }}");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: make_seeds CORPUS_DIR [SOURCE_DIR]\n");
    return 2;
  }
  const fs::path root = argv[1];
  const fs::path src = argc > 2 ? fs::path(argv[2]) : root / "../..";
  Safetensors(root);
  Golden(root, src);
  Gguf(root);
  Texts(root);
  Attention(root);
  Nn(root, src);
  NpyAndTrace(root);
  ChatTemplates(root);
  LlamaLoaderAndRender(root);
  std::printf("seeds written to %s (%d failures)\n", root.c_str(), g_failures);
  return g_failures == 0 ? 0 : 1;
}
