// attnflow/player.h — what a trace (attnflow/trace.h) becomes: the page JSON
// (format "attnflow-trace/1"; writing, reading with full validation, the
// numeric checks the page's panel runs too), the self-contained HTML player,
// and the exports (safetensors, .npy, CSV, PNG/SVG heatmaps). Prose, formats
// and the page: docs/player.md.
//
// Invariants:
//  * The page's stages are the ones of the stage table,
//    src/player/stage_table.json: the writer lays every stage out as the
//    table says (an undeclared stage is kInvalidArgument), the readers (the
//    C++ here and the page's JavaScript) accept only declared stages with
//    their declared axes, and the page's JavaScript reads the same table.
//  * The page JSON drops the batch dimension and pools views longer than
//    PageOptions::max_tokens (it says so in "view.note"); safetensors, .npy
//    and CSV exports are never pooled.
//  * Readers of page JSON validate everything (it comes from outside): a
//    malformed, truncated or inconsistent file is kCorrupt with a message
//    naming the file, the byte offset or the field.
//  * Every file is written atomically (WriteFileAtomic, WriteDirectoryAtomic);
//    no exception escapes; errors are Status values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnflow/status.h"
#include "attnflow/trace.h"

namespace attnflow::player {

constexpr const char* kTraceFormatV1 = "attnflow-trace/1";
// Above this many tokens the page pools its L×L and token views (128: a
// 512-token SmolLM2 page stays under 8 MB; docs/cli.md, "Size").
constexpr int64_t kDefaultPageTokens = 128;

// ---- page JSON, checks, the player -----------------------------------------
struct PageOptions {
  int64_t max_tokens = kDefaultPageTokens;  // pool views above this length
  std::vector<int64_t> heads;               // query heads shown; empty = all
  // Stage data as base64 little-endian floats with constant runs and
  // cell-by-cell verified derivations ("enc"/"segs"/"b64"/"base" instead of
  // "data"; see page_write.cc). Lossless: every value is the one the text
  // form would hold. Used for the HTML page (about 5 times smaller); --json
  // keeps the plain "data" arrays.
  bool compact = false;
  // Views (Trace::views) pool above this many rows/cols (all layers of a long
  // input would otherwise dominate the page).
  int64_t max_view_tokens = 64;
};
Result<std::string> TraceToJson(const trace::Trace& trace, const PageOptions& opt);
// A batch's page: the first trace's page JSON with "batch.pages" holding
// every other sentence's page JSON and null for the first (the top level is
// its page, so each sentence is stored once; the player's sentence picker
// switches between them). traces = TraceEncoderBatch's result.
Result<std::string> BatchToJson(const std::vector<trace::Trace>& traces, const PageOptions& opt);

enum class CheckState { kPass, kFail, kSkip };
struct TraceCheck {
  std::string name;
  CheckState state = CheckState::kSkip;
  std::string detail;
};
// What a valid page JSON holds, and the numeric checks the page's panel
// also runs (rows sum to one, masked and future weights are zero, ...).
struct TraceSummary {
  std::string source, model;
  int64_t num_tokens = 0, num_heads_shown = 0, decode_steps = 0;
  int64_t pool = 1;  // 1 = full resolution
  std::string note;  // the page's "view.note" (pooling), may be empty
  std::vector<TraceCheck> checks;
  struct View {
    std::string id, kind;
    int64_t num_layers = 0, num_heads = 0, rows = 0, cols = 0, pool = 1;
    int64_t data_rows = 0, data_cols = 0;
    std::vector<double> data;  // [layers, heads, data_rows, data_cols], as on the page
  };
  std::vector<View> views;
  bool all_pass() const;
};
// kCorrupt (label, byte offset or field) for anything malformed.
Result<TraceSummary> ReadTraceJson(std::string_view json, const std::string& label);
Result<TraceSummary> ReadTraceJsonFile(const std::string& path);

// The player page (web/player.html with the stage table and the lab,
// embedded at build time) with the trace JSON inlined: one self-contained
// file, no network access.
std::string_view PlayerTemplate();
Result<std::string> RenderPlayerHtml(std::string_view trace_json);

// ---- exports ------------------------------------------------------------------
// All stages (full precision) under their golden names, decode steps as
// "decode.<s>.<stage>", the toy's inputs, and metadata (format, kind, causal,
// scale, num_heads, ..., tokens as JSON; `stages` and `inputs` lists in
// dataflow order). A trace that kept every layer (Trace::layer_stages)
// writes those instead of the traced layer's: "layer.<l>.<stage>" and the
// model-level embed / final_norm / logits, then each decode step's the same
// way; `decode_token_ids` (I32) holds the decode steps' tokens, so another
// run can be teacher-forced with them.
Status WriteTraceSafetensors(const std::string& path, const trace::Trace& trace);
// One NumPy .npy per stage ("<stage>.npy", "decode.<s>.<stage>.npy") plus
// token_ids.npy; the directory is created if missing. `written` (optional)
// receives the paths.
Status WriteTraceNpy(const std::string& dir, const trace::Trace& trace,
                     std::vector<std::string>* written);
// Spreadsheet CSVs: "<stage>_h<h>.csv" (query × key, or token × dim per head),
// "<stage>.csv" (token × dim), decode rows "decode_<stage>_h<h>.csv".
Status WriteTraceCsv(const std::string& dir, const trace::Trace& trace,
                     const std::vector<int64_t>& heads,
                     std::vector<std::string>* written);
enum class ImageFormat { kPng, kSvg };
// Heatmaps of the stage table's heatmap stages (scores, masked, weights) per
// head (+ decode weights rows): "<stage>_h<h>.png|svg". Masked cells are
// hatched grey, not dark.
Status WriteTraceHeatmaps(const std::string& dir, const trace::Trace& trace,
                          const std::vector<int64_t>& heads, ImageFormat format,
                          std::vector<std::string>* written);

// ---- error growth (`verify --compare OPT REF --png/--svg`) -------------------
// How a stage's error grows through the layers of a model compared with
// another run of it: one curve per stage kind, one value per layer (NaN =
// not compared), on a log scale; `budget` (> 0) is drawn as a dashed line.
struct ErrorCurve {
  std::string name;
  std::vector<double> values;
};
struct ErrorPlot {
  std::string title;
  std::vector<std::string> x_labels;  // one per layer
  std::string x_title = "layer", y_title = "relative error |got - ref| / |ref|";
  std::vector<ErrorCurve> curves;  // at most 10
  double budget = -1;
};
Result<std::string> ErrorPlotPng(const ErrorPlot& plot);
Result<std::string> ErrorPlotSvg(const ErrorPlot& plot);

}  // namespace attnflow::player
