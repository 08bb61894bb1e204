// chat_render.h (fuzz harness) — the cost of rendering a chat template
// (src/model/llama/chat_template.h) with many messages: `chat` renders the
// whole conversation every turn, so a template from a hostile GGUF must not
// turn a chat into a hang or an out-of-memory kill.
//
// Input: byte 0 = number of messages (0..63), byte 1 = bytes per message
// content (0..255), the rest is the template source.
// Properties:
//  * Render ends within the budget: it succeeds or stops with
//    kResourceExhausted / kInvalidArgument / kCorrupt; never kInternal;
//  * a successful output is at most the byte budget (kRenderByteBudget +
//    kRenderBytesPerInputByte x input bytes);
//  * a timeout (run_fuzz.sh's -timeout) or a memory limit (-rss_limit_mb,
//    -malloc_limit_mb) is a crash: the budget must stop every template first.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "../common/fuzz_common.h"
#include "model/llama/chat_template.h"

namespace attnflow_fuzz {

inline void FuzzChatRender(const uint8_t* data, size_t size) {
  using namespace attnflow;
  ByteReader in(data, size);
  const int n = in.U8() % 64;
  const size_t len = in.U8();
  const std::string source = in.Rest();
  Result<llama::ChatTemplate> t = llama::ChatTemplate::Parse(source);
  if (!t.ok()) return;  // parse errors: the chat_template target
  std::vector<std::pair<std::string, std::string>> msgs;
  size_t input = 0;
  for (int i = 0; i < n; ++i) {
    msgs.push_back({i % 2 ? "assistant" : "user", std::string(len, static_cast<char>('a' + i % 26))});
    input += msgs.back().first.size() + len;
  }
  Result<std::string> r = t->Render(msgs, n % 2 == 0, {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  if (r.ok()) {
    FUZZ_CHECK(r->size() <= llama::kRenderByteBudget + llama::kRenderBytesPerInputByte * input,
               "output above the byte budget: " + std::to_string(r->size()));
  } else {
    FUZZ_CHECK(r.status().code() != StatusCode::kInternal, "Render failed with " + r.status().ToString());
  }
}

ATTNFLOW_FUZZ_REGISTER(chat_render, FuzzChatRender);

}  // namespace attnflow_fuzz
