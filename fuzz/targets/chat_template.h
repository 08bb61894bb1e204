// chat_template.h (fuzz harness) — the Jinja-subset chat-template
// interpreter (src/model/llama/chat_template.h) on arbitrary template text:
// tokenizer.chat_template comes from the GGUF file, so it is hostile input.
//
// Input: byte 0 = flags (add_generation_prompt, number of messages 0..3),
// the rest is the template source.
// Properties: no crash (including stack exhaustion on deep nesting), hang
// or leak; Parse/Render errors are Status values (kUnimplemented for
// constructs outside the subset, kInvalidArgument / kCorrupt for malformed
// templates or raise_exception); rendering twice gives the same text.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "../common/fuzz_common.h"
#include "model/llama/chat_template.h"

namespace attnflow_fuzz {

inline void FuzzChatTemplate(const uint8_t* data, size_t size) {
  using namespace attnflow;
  ByteReader in(data, size);
  const uint8_t flags = in.U8();
  const std::string source = in.Rest();
  Result<llama::ChatTemplate> t = llama::ChatTemplate::Parse(source);
  if (!t.ok()) {
    FUZZ_CHECK(t.status().code() != StatusCode::kOk && t.status().code() != StatusCode::kInternal,
               "Parse failed with " + t.status().ToString());
    return;
  }
  static const std::vector<std::pair<std::string, std::string>> kAll = {
      {"system", "You are helpful."}, {"user", "Hi <|im_end|> {{ x }}"}, {"assistant", "caf\xc3\xa9 \xe4\xb8\xad"}};
  const std::vector<std::pair<std::string, std::string>> msgs(kAll.begin(), kAll.begin() + (flags >> 1) % 4);
  const std::map<std::string, std::string> vars = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  Result<std::string> a = t->Render(msgs, flags & 1, vars);
  Result<std::string> b = t->Render(msgs, flags & 1, vars);
  FUZZ_CHECK(a.ok() == b.ok(), "Render is not deterministic (status)");
  if (a.ok()) {
    FUZZ_CHECK(a.value() == b.value(), "Render is not deterministic (text)");
  } else {
    FUZZ_CHECK(a.status().code() != StatusCode::kInternal, "Render failed with " + a.status().ToString());
  }
}

ATTNFLOW_FUZZ_REGISTER(chat_template, FuzzChatTemplate);

}  // namespace attnflow_fuzz
