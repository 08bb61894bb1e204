// llama_loader.h (fuzz harness) — the whole llama loader
// (llama::LoadLlamaGgufFromBuffer: GGUF parse, hyperparameters, tokenizer,
// chat template, weight shapes, scratch) on arbitrary bytes, and one short
// forward pass on what it accepts.
//
// Properties beyond "no crash, no sanitizer report, no escaping exception":
//  * a rejected file gives a Status other than kOk / kInternal (a count that
//    claims more than the file holds is kCorrupt before anything is sized by
//    it: libFuzzer's -rss_limit_mb / -malloc_limit_mb turn an allocation in
//    proportion to a claimed count into a crash);
//  * an accepted model has hyperparameters consistent with each other
//    (head_dim * heads fits the hidden size, kv heads divide heads, at least
//    one layer and one vocabulary entry), and a forward pass over 3 ids gives
//    a [1, vocab] logits tensor or a Status.
// Seeds: fuzz/corpus/llama_loader (fuzz/seeds/make_seeds.cc, built from
// fuzz/common/tiny_llama.h).
#pragma once

#include <vector>

#include "../common/fuzz_common.h"
#include "model/llama/llama_model.h"

namespace attnflow_fuzz {

inline void FuzzLlamaLoader(const uint8_t* data, size_t size) {
  using namespace attnflow;
  llama::LlamaOptions lo;
  lo.num_threads = 1;
  lo.max_context = 16;
  Result<std::unique_ptr<DecoderModel>> m =
      llama::LoadLlamaGgufFromBuffer(std::vector<uint8_t>(data, data + size), "fuzz.gguf", lo);
  if (!m.ok()) {
    FUZZ_CHECK(m.status().code() != StatusCode::kInternal, "load failed with " + m.status().ToString());
    return;
  }
  const ModelInfo& info = (*m)->info();
  FUZZ_CHECK(info.num_layers >= 1 && info.vocab_size >= 1, "accepted a model without layers or vocabulary");
  FUZZ_CHECK(info.num_heads % info.num_kv_heads == 0, "kv heads do not divide heads");
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 3 && i < info.vocab_size; ++i) ids.push_back(i);
  Tensor logits;
  Status st = (*m)->Forward(ids, false, &logits);
  if (st.ok()) {
    FUZZ_CHECK(logits.shape().size() == 2 && logits.shape()[1] == info.vocab_size,
               "logits shape " + ShapeString(logits.shape()));
  } else {
    FUZZ_CHECK(st.code() != StatusCode::kInternal, "forward failed with " + st.ToString());
  }
}

ATTNFLOW_FUZZ_REGISTER(llama_loader, FuzzLlamaLoader);

}  // namespace attnflow_fuzz
