// trace.h (fuzz harness) — the trace page JSON reader (`attnflow trace
// --from FILE`: ReadTraceJson, then RenderPlayerHtml) on arbitrary text.
//
// Properties: no crash, hang, leak or escaping exception; a rejected page is
// kCorrupt with a message naming the file ("fuzz.trace.json"); an accepted
// page has sane counts and renders into a player page that embeds it.
#pragma once

#include <string>
#include <string_view>

#include "../common/fuzz_common.h"
#include "attnflow/player.h"

namespace attnflow_fuzz {

inline void FuzzTrace(const uint8_t* data, size_t size) {
  using namespace attnflow;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  Result<player::TraceSummary> s = player::ReadTraceJson(text, "fuzz.trace.json");
  if (!s.ok()) {
    FUZZ_CHECK(s.status().code() == StatusCode::kCorrupt ||
                   s.status().code() == StatusCode::kResourceExhausted,
               "unexpected status " + s.status().ToString());
    FUZZ_CHECK(s.status().message().find("fuzz.trace.json") != std::string::npos,
               "error does not name the file: " + s.status().ToString());
    return;
  }
  FUZZ_CHECK(s->num_tokens >= 0 && s->num_heads_shown >= 0 && s->decode_steps >= 0 && s->pool >= 1,
             "accepted page with negative counts");
  Result<std::string> html = player::RenderPlayerHtml(text);
  FUZZ_CHECK(html.ok(), "an accepted page does not render: " + html.status().ToString());
}

ATTNFLOW_FUZZ_REGISTER(trace, FuzzTrace);

}  // namespace attnflow_fuzz
