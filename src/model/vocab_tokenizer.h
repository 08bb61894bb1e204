// model/vocab_tokenizer.h — the vocabulary half of a tokenizer, shared by
// WordPiece (model/bert) and byte-level BPE (model/bpe).
//
// Invariants: id i names tokens_[i]; the vocabulary size is tokens_.size();
// an id outside [0, size) displays as "<invalid>" (never throws).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnflow/model.h"

namespace attnflow {

class VocabTokenizer : public Tokenizer {
 public:
  std::string TokenText(int32_t id) const override {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) return "<invalid>";
    return tokens_[static_cast<size_t>(id)];
  }
  int64_t VocabSize() const override { return static_cast<int64_t>(tokens_.size()); }

 protected:
  std::vector<std::string> tokens_;
};

}  // namespace attnflow
