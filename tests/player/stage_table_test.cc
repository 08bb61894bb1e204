// stage_table_test.cc — the one stage table (src/player/stage_table.json)
// reaches the C++ writer and reader, the page's JavaScript and the trace
// layer unchanged:
//  * the C++ table (player::StageTable(), generated at build time) holds
//    every field of the JSON file, read here by nlohmann on its own;
//  * the page (PlayerTemplate()) holds the same table in its #stage-table
//    element;
//  * the trace layer captures stages in the table's order
//    (trace::TraceStageOrder());
//  * the stages the C++ code names (player::stage::k*) are declared;
//  * the page's JavaScript (web/player.html with web/lab.js, as embedded)
//    names only declared stages and steps: T.stages.X / d.stages.X,
//    the figure functions' stage argument, stage comparisons and stage
//    lists, step comparisons, the per-step switch and the lab's boxes. A
//    stage renamed in the table but not in the JavaScript fails here;
//  * a page whose stage carries other axes than its layout's, or a stage
//    the table does not declare, is refused by the reader and the writer.
#include "player/stage_table.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "attnflow/file_util.h"
#include "attnflow/player.h"
#include "util/trace_util.h"

namespace attnflow::player {
namespace {

using json = nlohmann::json;

json TableFile() {
  Result<std::string> text =
      ReadFileString(std::string(ATTNFLOW_SOURCE_DIR) + "/src/player/stage_table.json");
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return json::parse(text.ok() ? text.value() : "{}");
}

// The text of the page's <script id="stage-table"> element.
std::string PageTable() {
  const std::string_view page = PlayerTemplate();
  const std::string open = "<script id=\"stage-table\" type=\"application/json\">";
  const size_t a = page.find(open);
  if (a == std::string_view::npos) return "";
  const size_t b = page.find("</script>", a);
  return std::string(page.substr(a + open.size(), b - a - open.size()));
}

std::vector<std::string> Strings(const json& j) {
  std::vector<std::string> v;
  for (const auto& e : j) v.push_back(e.get<std::string>());
  return v;
}

TEST(StageTable, CppTableHoldsEveryFieldOfTheJsonFile) {
  const json t = TableFile();
  const PageStageTable& c = StageTable();
  ASSERT_EQ(t["layouts"].size(), c.layouts.size());
  for (const auto& [name, l] : t["layouts"].items()) {  // nlohmann sorts keys; look each up
    bool found = false;
    for (const LayoutDecl& d : c.layouts) {
      if (d.name != name) continue;
      found = true;
      EXPECT_EQ(d.rank, l["rank"].get<int>()) << name;
      EXPECT_EQ(d.axes, Strings(l["axes"])) << name;
    }
    EXPECT_TRUE(found) << name;
  }
  // Every layout the C++ writer has a rule for is declared.
  for (Layout l : {Layout::kMap, Layout::kHeads, Layout::kKvHeads, Layout::kRows, Layout::kTokens}) {
    bool found = false;
    for (const LayoutDecl& d : c.layouts) found = found || d.layout == l;
    EXPECT_TRUE(found) << static_cast<int>(l);
  }
  ASSERT_EQ(t["steps"].size(), c.steps.size());
  for (size_t i = 0; i < c.steps.size(); ++i) {
    const json& s = t["steps"][i];
    EXPECT_EQ(c.steps[i].id, s["id"].get<std::string>());
    EXPECT_EQ(c.steps[i].title, s["title"].get<std::string>());
    EXPECT_EQ(c.steps[i].primary, s.contains("primary") ? Strings(s["primary"]) : std::vector<std::string>());
  }
  ASSERT_EQ(t["stages"].size(), c.stages.size());
  for (size_t i = 0; i < c.stages.size(); ++i) {
    const json& s = t["stages"][i];
    const StageDecl& d = c.stages[i];
    EXPECT_EQ(d.name, s["name"].get<std::string>());
    EXPECT_EQ(c.Of(d.layout).name, s["layout"].get<std::string>()) << d.name;
    EXPECT_EQ(d.post_step, s.value("post", "")) << d.name;
    EXPECT_EQ(d.pre_step, s.value("pre", "")) << d.name;
    EXPECT_EQ(d.derive_op, s.contains("derive") ? s["derive"]["op"].get<std::string>() : "") << d.name;
    EXPECT_EQ(d.derive_of, s.contains("derive") ? Strings(s["derive"]["of"]) : std::vector<std::string>())
        << d.name;
    EXPECT_EQ(d.shared_scale, s.value("shared_scale", false)) << d.name;
    EXPECT_EQ(d.probabilities, s.value("probabilities", false)) << d.name;
    EXPECT_EQ(d.heatmap, s.value("heatmap", false)) << d.name;
    EXPECT_EQ(c.Find(d.name), &d);
  }
  EXPECT_EQ(c.Find("no_such_stage"), nullptr);
}

TEST(StageTable, ThePageHoldsTheSameTable) {
  const std::string text = PageTable();
  ASSERT_FALSE(text.empty()) << "no <script id=\"stage-table\"> in the embedded page";
  EXPECT_EQ(json::parse(text), TableFile());
  EXPECT_EQ(PlayerTemplate().find("__ATTNFLOW_STAGE_TABLE__"), std::string_view::npos);
}

TEST(StageTable, TheTraceCapturesInTheTablesOrder) {
  std::vector<std::string> names;
  for (const StageDecl& d : StageTable().stages) names.push_back(d.name);
  EXPECT_EQ(trace::TraceStageOrder(), names);
}

TEST(StageTable, CodeNamesAreDeclared) {
  for (std::string_view n : {stage::kScores, stage::kScaled, stage::kMasked, stage::kWeights,
                             stage::kLse, stage::kHeadsOut, stage::kConcat})
    EXPECT_NE(StageTable().Find(n), nullptr) << n;
}

// Every capture of `pattern` (group 1; or every quoted string of group 1
// when `list`) in `text`.
std::set<std::string> Names(const std::string& text, const std::string& pattern, bool list = false) {
  std::set<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator(); ++it) {
    const std::string g = (*it)[1].str();
    if (!list) {
      out.insert(g);
      continue;
    }
    const std::regex q("\"([^\"]*)\"");
    for (auto jt = std::sregex_iterator(g.begin(), g.end(), q); jt != std::sregex_iterator(); ++jt)
      out.insert((*jt)[1].str());
  }
  return out;
}

TEST(StageTable, ThePagesJavaScriptNamesOnlyDeclaredStagesAndSteps) {
  const std::string page(PlayerTemplate());
  std::set<std::string> stages, steps;
  for (const StageDecl& d : StageTable().stages) stages.insert(d.name);
  for (const StepDecl& s : StageTable().steps) steps.insert(s.id);
  // Stage names in code.
  std::set<std::string> used;
  for (const char* pattern :
       {R"re(stages\.([A-Za-z_][A-Za-z0-9_]*))re", R"re(stages\[\s*"([^"]+)"\s*\])re",
        R"re((?:tokenFigure|mapFigure|ownRange)\(\s*"([^"]+)")re", R"re(\bs\.map\s*===\s*"([^"]+)")re",
        R"re(\bname\s*===\s*"([^"]+)")re"}) {
    for (const std::string& n : Names(page, pattern)) used.insert(n);
  }
  EXPECT_GE(used.size(), 8u) << "the patterns no longer find the page's stage names";
  for (const std::string& n : used) EXPECT_TRUE(stages.count(n)) << "the page's JavaScript names the stage '" << n << "', which the stage table does not declare";
  // Array literals of strings that hold a stage name are stage lists: all
  // of their names must be declared.
  const std::regex arr(R"re(\[((?:\s*"[^"\n]*"\s*,?)+)\])re");
  for (auto it = std::sregex_iterator(page.begin(), page.end(), arr); it != std::sregex_iterator(); ++it) {
    const std::set<std::string> items = Names((*it)[0].str(), R"re("([^"]*)")re");
    bool any = false;
    for (const std::string& x : items) any = any || stages.count(x) > 0;
    if (!any) continue;
    for (const std::string& x : items)
      EXPECT_TRUE(stages.count(x)) << "the stage list " << (*it)[0].str() << " names '" << x
                                   << "', which the stage table does not declare";
  }
  // Step ids in code: s.id comparisons, the step look-ups, the per-step
  // switch (describe) and the lab's boxes.
  std::set<std::string> used_steps;
  for (const char* pattern : {R"re(\bs\.id\s*===\s*"([^"]+)")re", R"re(x\.id\s*===\s*"([^"]+)"\)\))re",
                              R"re(\bstep:\s*"([^"]+)")re"}) {
    for (const std::string& n : Names(page, pattern)) used_steps.insert(n);
  }
  const size_t sw = page.find("switch (s.id) {");
  ASSERT_NE(sw, std::string::npos);
  const size_t sw_end = page.find("\n}\n", sw);
  for (const std::string& n : Names(page.substr(sw, sw_end - sw), R"re(case\s+"([^"]+)")re"))
    used_steps.insert(n);
  EXPECT_GE(used_steps.size(), 10u) << "the patterns no longer find the page's step ids";
  for (const std::string& n : used_steps)
    EXPECT_TRUE(steps.count(n)) << "the page's JavaScript names the step '" << n << "', which the stage table does not declare";
  // The hand-written step and stage lists are gone: STEPS and the shared
  // scale's stages are read from the table.
  EXPECT_NE(page.find("const STEPS = TABLE ? TABLE.steps.map("), std::string::npos);
  EXPECT_EQ(page.find("const SCALE_STAGES = ["), std::string::npos);
}

TEST(StageTable, WriterAndReaderRefuseWhatTheTableDoesNotDeclare) {
  // An undeclared stage cannot be written.
  trace::Trace bad = testing::Toy();
  bad.stages.push_back({"attn_bias", Tensor::FromView(bad.stages.front().value.view()).value()});
  Result<std::string> w = TraceToJson(bad, {});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("'attn_bias' is not in the page's stage table"), std::string::npos)
      << w.status().message();
  // A declared stage of another rank neither.
  bad = testing::Toy();
  Tensor weights = Tensor::FromView(bad.Find("weights")->view()).value();
  for (auto& s : bad.stages)
    if (s.name == "lse") s.value = std::move(weights);
  EXPECT_EQ(TraceToJson(bad, {}).status().code(), StatusCode::kInvalidArgument);
  const trace::Trace t = testing::Toy();
  // The reader: an undeclared stage, and a declared one with other axes.
  json j = json::parse(TraceToJson(t, {}).value());
  json k = j;
  k["stages"]["attn_bias"] = k["stages"]["embed"];
  Result<TraceSummary> r = ReadTraceJson(k.dump(), "x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("stages.attn_bias: 'attn_bias' is not a stage of the page's stage table"),
            std::string::npos)
      << r.status().message();
  k = j;
  k["stages"]["weights"]["axes"] = {"head", "token", "dim"};
  r = ReadTraceJson(k.dump(), "x.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(
                "stages.weights.axes must be [\"head\",\"query\",\"key\"] (layout map of the stage table)"),
            std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace attnflow::player
