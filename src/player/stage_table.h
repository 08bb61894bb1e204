// player/stage_table.h — the page's stage table (internal): every stage the
// page JSON may hold, how it is laid out on the page, which player step
// shows it, and how the compact encoding derives it. Declared once, in
// src/player/stage_table.json; the build turns that file into the C++ data
// behind StageTable() (web/embed_player.py, with the page) and puts the
// same file in the page (<script id="stage-table">) for the JavaScript
// (web/player.html, web/lab.js). tests/player/stage_table_test.cc fails
// when the C++ table, the page's copy or the JavaScript disagree.
//
// The fields (stage_table.json):
//   layouts  name -> {rank: the captured tensor's rank, batch first (B = 1),
//            axes: the page's axes after the batch}. Five, each with its own
//            rule in the writer (page_write.cc):
//              map       [1,H,Lq,Lk] head query key  query heads shown; both
//                        token axes pooled
//              heads     [1,H,L,D]   head token dim  query heads shown; tokens
//                        pooled
//              kv_heads  [1,Hkv,L,D] kv_head token dim  every kv head; tokens
//                        pooled
//              rows      [1,H,L]     head query      query heads shown; queries
//                        pooled
//              tokens    [1,L,E]     token dim       tokens pooled
//   steps    the player's steps in order: id, title, and optionally primary
//            (the lab's preferred stage of the step, first present wins;
//            default: the step's first stage).
//   stages   in capture order (the trace layer's TraceStageOrder() is the
//            same list; tests/player/stage_table_test.cc checks it):
//            name; layout; post / pre: the step that shows it in a post-norm
//            / pre-norm block (absent: not shown there); derive {op, of}:
//            the compact encoding's derivation (op scale | copy | add | heads
//            of the stages `of`); shared_scale: drawn on the colour scale
//            steps 3-5 share; probabilities: rows sum to one (pooled by
//            summing keys; drawn on the 0..1 scale); heatmap: exported as a
//            PNG/SVG figure per head.
// Invariants (checked when the build generates the data; a bad table stops
// the build): names and step ids are unique; every layout, step and derive
// base is declared; derive bases come before the stage.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace attnflow::player {

enum class Layout { kMap, kHeads, kKvHeads, kRows, kTokens };

struct StageDecl {
  std::string name;
  Layout layout = Layout::kTokens;
  std::string post_step, pre_step;  // "" = no step shows it
  std::string derive_op;            // "" = never derived
  std::vector<std::string> derive_of;
  bool shared_scale = false, probabilities = false, heatmap = false;
};

struct StepDecl {
  std::string id, title;
  std::vector<std::string> primary;
};

struct LayoutDecl {
  Layout layout;
  std::string name;
  int rank = 0;
  std::vector<std::string> axes;
};

struct PageStageTable {
  std::vector<LayoutDecl> layouts;
  std::vector<StepDecl> steps;
  std::vector<StageDecl> stages;  // in table order
  // nullptr when `name` is not declared.
  const StageDecl* Find(std::string_view name) const;
  const LayoutDecl& Of(Layout l) const;
};

// The table (defined in the generated player_html.cc: web/embed_player.py
// writes it from stage_table.json; built once, thread-safe).
const PageStageTable& StageTable();

// The stages the player's C++ code names (the checks, the exports); each is
// declared in the table (StageTable.CodeNamesAreDeclared).
namespace stage {
inline constexpr std::string_view kScores = "scores", kScaled = "scaled", kMasked = "masked",
                                  kWeights = "weights", kLse = "lse", kHeadsOut = "heads_out",
                                  kConcat = "concat";
}  // namespace stage

}  // namespace attnflow::player
