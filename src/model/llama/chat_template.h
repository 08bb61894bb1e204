// chat_template.h — a small interpreter for the subset of Jinja2 that chat
// templates (tokenizer.chat_template) use, rendered the way transformers'
// apply_chat_template does (trim_blocks=True, lstrip_blocks=True).
//
// Supported: text; {{ expr }}; {# comments #}; {% if %}/{% elif %}/
// {% else %}/{% endif %}; {% for x in expr %}...{% endfor %} with loop.first,
// loop.last, loop.index, loop.index0, loop.length; {% set x = expr %};
// whitespace control ({%- -%} {{- -}}). Expressions: string / integer /
// true / false / none literals, names, a.b, a[b], + - (ints), ~ and + on
// strings, == != < > <= >=, in / not in, and / or / not, parentheses,
// `is [not] defined|none|string`, filters | trim | length | upper | lower,
// string methods .strip() .lstrip() .rstrip(), raise_exception(msg).
// Anything else is rejected at Parse() with kUnimplemented naming the
// construct and its offset, so an unknown template fails clearly instead of
// rendering something wrong.
//
// Variables given to Render: messages (list of {role, content}),
// add_generation_prompt, bos_token, eos_token. Undefined names are falsy and
// render as "" (Jinja's default Undefined).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "attnflow/status.h"

namespace attnflow::llama {

struct TemplateNode;

// The render budget. Real chat templates take a few dozen steps per message
// and print each message about once; a template that nests loops over the
// messages or doubles a string with {% set s = s ~ s %} would otherwise run
// for hours or ask for terabytes. A step is a node visit, an expression
// evaluation, a quarter of a loop iteration (its scope and `loop` record) or
// 64 bytes copied, produced or scanned, so the step count bounds the render
// time (1M steps: ~0.1 s on one core; under the fuzzers' instrumentation ~2 s).
// Render() stops with kResourceExhausted naming the budget and the template
// offset when it takes more than kRenderStepBudget + kRenderStepsPerInputByte
// * (bytes of the messages and variables) steps, or when the output or any
// string value would exceed kRenderByteBudget + kRenderBytesPerInputByte *
// (those bytes).
inline constexpr int64_t kRenderStepBudget = 1'000'000;
inline constexpr int64_t kRenderStepsPerInputByte = 1;
inline constexpr size_t kRenderByteBudget = size_t{16} << 20;
inline constexpr size_t kRenderBytesPerInputByte = 8;

class ChatTemplate {
 public:
  static Result<ChatTemplate> Parse(const std::string& source);
  Result<std::string> Render(
      const std::vector<std::pair<std::string, std::string>>& messages,
      bool add_generation_prompt,
      const std::map<std::string, std::string>& string_vars = {}) const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const std::vector<TemplateNode>> root_;
};

}  // namespace attnflow::llama
