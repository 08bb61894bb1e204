// loaders.h — the per-architecture loaders behind LoadModel (internal).
#pragma once

#include <memory>
#include <string>

#include "attnflow/model.h"

namespace attnflow {

// src/model/bert/*: directory with config.json, model.safetensors, vocab.txt.
Result<std::unique_ptr<Model>> LoadBertModel(const std::string& dir);
// src/model/llama/*: GGUF v3 file with tokenizer metadata.
Result<std::unique_ptr<Model>> LoadLlamaGguf(const std::string& path);

}  // namespace attnflow
