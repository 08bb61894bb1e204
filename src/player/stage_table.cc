// stage_table.cc — look-ups in the page's stage table (player/stage_table.h;
// the data itself is generated from stage_table.json into player_html.cc).
#include "player/stage_table.h"

namespace attnflow::player {

const StageDecl* PageStageTable::Find(std::string_view name) const {
  for (const StageDecl& s : stages)
    if (s.name == name) return &s;
  return nullptr;
}

const LayoutDecl& PageStageTable::Of(Layout l) const {
  for (const LayoutDecl& d : layouts)
    if (d.layout == l) return d;
  return layouts.front();  // unreachable: the generator declares all five (a build error otherwise)
}

}  // namespace attnflow::player
