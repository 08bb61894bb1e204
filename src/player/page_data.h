// player/page_data.h — a page JSON as the reader holds it (internal; shared
// by page_read.cc, which validates and decodes it, and page_checks.cc, which
// runs the numeric checks on it).
//
// Invariants: an Arr that is not `compact` holds ds[0]·ds[1]·ds[2] decoded
// values (rank-2 entries are normalised to [1, d0, d1]); Bad() is the one
// kCorrupt message form ("trace: <label>: <what>").
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "attnflow/player.h"
#include "attnflow/semantics.h"

namespace attnflow::player::internal {

using json = nlohmann::json;

struct Arr {  // a validated stage entry
  std::vector<std::string> axes;
  std::vector<int64_t> shape, pool, ds;
  std::vector<double> data;
  // Compact entries before decoding (see "the compact encoding" above).
  bool compact = false, f32 = true;
  json segs;
  std::string b64, op;
  std::vector<std::string> of;
  double at(int64_t a, int64_t b, int64_t c) const {
    return data[static_cast<size_t>((a * ds[1] + b) * ds[2] + c)];
  }
};

using StageArrays = std::map<std::string, Arr>;

// nullptr when the page has no such stage.
inline const Arr* Get(const StageArrays& m, std::string_view n) {
  auto it = m.find(std::string(n));
  return it == m.end() ? nullptr : &it->second;
}

inline Status Bad(const std::string& label, const std::string& what) {
  return Corrupt("trace: " + label + ": " + what);
}

// What the pipeline checks read: the decoded stages, the decode steps and
// the page's fields they depend on.
struct ParsedPage {
  StageArrays stages;
  std::vector<StageArrays> decode;
  std::vector<int64_t> kv_lens, positions, heads, pad_keys;
  Causal causal = Causal::kNone;
  double scale = 1.0;
};

// The numeric checks of a page with a "weights" stage, in the page's order
// (mirrors runChecks in web/player.html: same names, same tolerances).
std::vector<TraceCheck> PipelineChecks(const ParsedPage& p);

// Validates the "views" array (see AppendViews in page_write.cc) and runs its
// checks (mirrors checkViews in web/player.html).
Status ParseViews(const json& j, const std::string& label, std::vector<TraceSummary::View>* out,
                  std::vector<TraceCheck>* checks);

}  // namespace attnflow::player::internal
