// html.cc — the self-contained player page: the embedded template
// (web/player.html + the stage table + the lab, via the generated
// player_html.cc) with the trace JSON inlined.
//
// Invariant: the JSON is placed inside <script type="application/json">; every
// '<' in it is written as \u003c (only legal inside JSON strings, where it
// means the same character), so no input can close the script element early.
#include <string>

#include "attnflow/player.h"

namespace attnflow::player {
namespace {
constexpr std::string_view kSlot =
    "<script id=\"trace-data\" type=\"application/json\">__ATTNFLOW_TRACE_JSON__</script>";
constexpr std::string_view kOpen = "<script id=\"trace-data\" type=\"application/json\">";
}  // namespace

Result<std::string> RenderPlayerHtml(std::string_view trace_json) {
  const std::string_view page = PlayerTemplate();
  const size_t at = page.find(kSlot);
  if (at == std::string_view::npos) {
    return Status(StatusCode::kInternal, "player: the embedded player page has no trace slot");
  }
  std::string out;
  out.reserve(page.size() + trace_json.size() + trace_json.size() / 64);
  out.append(page.substr(0, at));
  out.append(kOpen);
  for (char c : trace_json) {
    if (c == '<') out += "\\u003c";
    else out.push_back(c);
  }
  out.append("</script>");
  out.append(page.substr(at + kSlot.size()));
  return out;
}

}  // namespace attnflow::player
