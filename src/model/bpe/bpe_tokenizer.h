// bpe_tokenizer.h — byte-level BPE tokenizer (GPT-2 family) built from GGUF
// tokenizer metadata; reproduces Hugging Face `tokenizers` ids.
//
// Pipeline of Encode(text):
//  1. Special tokens (GGUF token type CONTROL or USER_DEFINED, e.g.
//     <|im_start|>) are matched literally in the raw text first (leftmost,
//     then longest), exactly like HF added tokens; they become their id and
//     the text between them is processed independently.
//  2. Pre-tokenizer (tokenizer.ggml.pre):
//       "gpt2"   the GPT-2 regex
//                's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//                implemented by hand over Unicode class tables (no std::regex)
//       "smollm" every \p{N} code point split off on its own first (HF
//                Digits(individual_digits=True)), then the GPT-2 regex on the
//                rest — SmolLM2's tokenizer.json pre-tokenizer sequence.
//  3. Each piece's bytes are mapped to the GPT-2 byte-to-unicode alphabet and
//     merged by BPE: repeatedly the adjacent pair with the lowest merge rank
//     (leftmost on ties), as HF's BPE model does.
//
// Invariants: a byte whose symbol is not in the vocabulary becomes the
// unknown token (tokenizer.ggml.unknown_token_id) or, without one, is dropped
// (HF BPE without byte-fallback tokens); every merge "a b" must name two vocabulary tokens whose concatenation is a
// token (else kCorrupt naming the merge index). Encode never fails on valid
// UTF-8; invalid UTF-8 input gives kInvalidArgument with the byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "attnflow/gguf.h"
#include "attnflow/model.h"
#include "model/vocab_tokenizer.h"

namespace attnflow::bpe {

enum class PreTokenizerKind { kGpt2, kSmolLm };

// GGUF token types (llama_token_type).
enum TokenType : int32_t {
  kTokenNormal = 1, kTokenUnknown = 2, kTokenControl = 3,
  kTokenUserDefined = 4, kTokenUnused = 5, kTokenByte = 6,
};

struct BpeConfig {
  std::vector<std::string> tokens;  // id -> token text (byte-level alphabet)
  std::vector<int32_t> token_types;  // empty = all normal
  std::vector<std::string> merges;   // "a b", rank = index
  std::string pre = "gpt2";          // tokenizer.ggml.pre
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  bool add_bos = false, add_eos = false;
};

class BpeTokenizer : public VocabTokenizer {
 public:
  // `label` names the source in errors (e.g. the GGUF path).
  static Result<std::unique_ptr<BpeTokenizer>> Create(BpeConfig cfg,
                                                      const std::string& label);
  // Reads tokenizer.ggml.{model,tokens,token_type,merges,pre,bos_token_id,
  // eos_token_id,unknown_token_id,padding_token_id,add_bos_token,
  // add_eos_token}; model must be "gpt2". `pre_override` (non-empty)
  // replaces tokenizer.ggml.pre.
  static Result<std::unique_ptr<BpeTokenizer>> FromGguf(
      const GgufFile& f, const std::string& pre_override = "");

  Result<std::vector<int32_t>> Encode(std::string_view text,
                                      bool add_special) const override;
  Result<std::string> Decode(const std::vector<int32_t>& ids,
                             bool skip_special) const override;

  // The raw bytes a token stands for (special tokens: their text). Empty for
  // out-of-range ids. For streaming output.
  std::string TokenBytes(int32_t id) const override;
  int32_t EosId() const override { return cfg_.eos_id; }
  bool IsSpecial(int32_t id) const;
  int32_t bos_id() const { return cfg_.bos_id; }
  int32_t eos_id() const { return cfg_.eos_id; }
  const std::string& pre() const { return cfg_.pre; }
  // Pre-tokenizer pieces of text without special tokens (for tests).
  Result<std::vector<std::string>> PreTokenize(std::string_view text) const;

 private:
  BpeTokenizer() = default;
  Status Init(const std::string& label);
  Status InitImpl(const std::string& label);
  Result<std::vector<int32_t>> EncodeImpl(std::string_view text, bool add_special) const;
  void EncodePiece(std::string_view bytes, std::vector<int32_t>* out) const;
  void SplitAndEncode(std::string_view text, std::vector<int32_t>* out,
                      std::vector<std::string>* pieces) const;

  BpeConfig cfg_;
  PreTokenizerKind kind_ = PreTokenizerKind::kGpt2;
  std::unordered_map<std::string, int32_t> vocab_;
  // (left id << 32 | right id) -> (rank << 32 | merged id)
  std::unordered_map<uint64_t, uint64_t> merges_;
  int32_t byte_token_[256] = {};        // byte -> id of its single symbol
  std::string byte_char_[256];          // byte -> UTF-8 of its symbol
  std::unordered_map<uint32_t, uint8_t> char_byte_;  // symbol cp -> byte
  std::vector<int32_t> specials_;       // ids matched before BPE
  std::vector<bool> is_special_;
};

}  // namespace attnflow::bpe
