// page_test.cc — the page JSON, the HTML player and the exports of a trace
// (include/attnflow/player.h) on the frozen toy: the page holds the exact
// stage values (pooled ones by the documented rule, checked against sums of
// the trace's own stages), the reader rejects corrupted or truncated pages
// with a message naming the field and its checks fail on a broken trace;
// the compact encoding reads back exactly like the text form; the page
// template is web/player.html + the stage table + the lab and cannot be
// broken out of; the exports round-trip (safetensors as a golden case that
// `verify` accepts, .npy, CSV) and the heatmap figures decode with an
// independent reader (zlib).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "attnflow/file_util.h"
#include "attnflow/golden.h"
#include "attnflow/npy.h"
#include "attnflow/player.h"
#include "attnflow/safetensors.h"
#include "util/test_util.h"
#include "util/trace_util.h"

#ifdef ATTNFLOW_HAVE_ZLIB
#include <zlib.h>
#endif

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace attnflow {
namespace {

using trace::Trace;
using testing::Toy;

std::string TempDir() { return testing::TempDirFor("page_test"); }

double W(const Trace& t, const char* stage, int64_t h, int64_t i, int64_t j) {
  const Tensor* s = t.Find(stage);
  return testing::At(*s, 0, h, i, j);
}

uint32_t Be(const std::string& s, size_t at) {
  return (uint32_t(uint8_t(s[at])) << 24) | (uint32_t(uint8_t(s[at + 1])) << 16) |
         (uint32_t(uint8_t(s[at + 2])) << 8) | uint8_t(s[at + 3]);
}

// ---------------------------------------------------------------------------
// Page JSON.
// ---------------------------------------------------------------------------

double JsonNum(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    return s == "-Infinity" ? -INFINITY : s == "Infinity" ? INFINITY : NAN;
  }
  return v.get<double>();
}

TEST(TraceJson, HoldsTheExactStageValues) {
  trace::ToyOptions o;
  o.decode_steps = 2;
  Trace t = Toy(o);
  Result<std::string> js = player::TraceToJson(t, {});
  ASSERT_TRUE(js.ok()) << js.status().ToString();
  const json j = json::parse(js.value());
  EXPECT_EQ(j["format"], "attnflow-trace/1");
  EXPECT_EQ(j["tokens"][2]["text"], "sat");
  EXPECT_EQ(j["causal"], "top_left");
  for (const char* name : {"scores", "masked", "weights", "q", "concat", "block_out"}) {
    const Tensor& x = *t.Find(name);
    const json& d = j["stages"][name]["data"];
    ASSERT_EQ(static_cast<int64_t>(d.size()), x.numel()) << name;
    for (int64_t i = 0; i < x.numel(); ++i)
      ASSERT_EQ(JsonNum(d[static_cast<size_t>(i)]), x.data<double>()[i]) << name << "[" << i << "]";
  }
  EXPECT_EQ(j["stages"]["masked"]["data"][1], "-Infinity");
  EXPECT_EQ(j["stages"]["weights"]["axes"], json({"head", "query", "key"}));
  EXPECT_EQ(j["decode"].size(), 2u);
  EXPECT_EQ(j["decode"][1]["kv_len"], 6);
  Result<player::TraceSummary> s = player::ReadTraceJson(js.value(), "t");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
  int pass = 0;
  for (const auto& c : s->checks) pass += c.state == player::CheckState::kPass;
  EXPECT_EQ(pass, 9);
}

TEST(TraceJson, HeadSubsetKeepsOnlyThoseHeads) {
  Trace t = Toy();
  player::PageOptions po;
  po.heads = {1};
  Result<std::string> js = player::TraceToJson(t, po);
  ASSERT_TRUE(js.ok());
  const json j = json::parse(js.value());
  EXPECT_EQ(j["stages"]["weights"]["shape"], json({1, 4, 4}));
  EXPECT_EQ(j["stages"]["k"]["shape"], json({2, 4, 4}));  // all kv heads
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t k = 0; k < 4; ++k)
      EXPECT_EQ(JsonNum(j["stages"]["weights"]["data"][i * 4 + k]), W(t, "weights", 1, i, k));
  ASSERT_TRUE(player::ReadTraceJson(js.value(), "t")->all_pass());
  po.heads = {2};
  EXPECT_EQ(player::TraceToJson(t, po).status().code(), StatusCode::kOutOfRange);
  po.heads = {0, 0};
  EXPECT_EQ(player::TraceToJson(t, po).status().code(), StatusCode::kInvalidArgument);
}

TEST(TraceJson, LongInputsArePooledAndSaySo) {
  trace::ToyOptions o;
  o.num_tokens = 600;
  Trace t = Toy(o);
  EXPECT_EQ(player::PageOptions{}.max_tokens, 128);  // the default budget
  Result<std::string> js = player::TraceToJson(t, {.max_tokens = 256});
  ASSERT_TRUE(js.ok());
  const json j = json::parse(js.value());
  EXPECT_EQ(j["view"]["pool"], 3);  // ceil(600 / 256)
  EXPECT_NE(j["view"]["note"].get<std::string>().find("pooled 3×3"), std::string::npos);
  const json& w = j["stages"]["weights"];
  EXPECT_EQ(w["shape"], json({2, 600, 600}));
  EXPECT_EQ(w["data_shape"], json({2, 200, 200}));
  // Cell (h=1, I=50, J=20) = mean over queries 150..152 of the sum over keys 60..62.
  double want = 0;
  for (int64_t i = 150; i < 153; ++i)
    for (int64_t k = 60; k < 63; ++k) want += W(t, "weights", 1, i, k) / 3;
  EXPECT_NEAR(JsonNum(w["data"][(200 + 50) * 200 + 20]), want, 1e-6);
  // Token views pool tokens only.
  EXPECT_EQ(j["stages"]["embed"]["data_shape"], json({200, 8}));
  Result<player::TraceSummary> s = player::ReadTraceJson(js.value(), "t");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(s->all_pass());
  EXPECT_EQ(s->pool, 3);
}

TEST(TraceJson, CorruptedOrTruncatedJsonIsAClearError) {
  Trace t = Toy();
  const std::string js = player::TraceToJson(t, {}).value();
  for (size_t cut : {size_t{0}, size_t{1}, js.size() / 3, js.size() - 3}) {
    Result<player::TraceSummary> s = player::ReadTraceJson(js.substr(0, cut), "cut.json");
    ASSERT_FALSE(s.ok()) << cut;
    EXPECT_EQ(s.status().code(), StatusCode::kCorrupt);
    EXPECT_NE(s.status().message().find("cut.json: not valid JSON at byte"), std::string::npos)
        << s.status().message();
  }
  json j = json::parse(js);
  auto expect_corrupt = [](const json& v, const std::string& needle) {
    Result<player::TraceSummary> s = player::ReadTraceJson(v.dump(), "x.json");
    ASSERT_FALSE(s.ok()) << needle;
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
  };
  json k = j;
  k["format"] = "something/2";
  expect_corrupt(k, "is not attnflow-trace/1");
  k = j;
  k["stages"].erase("weights");
  expect_corrupt(k, "no 'weights'");
  k = j;
  k["stages"]["scores"]["data"].erase(3);
  expect_corrupt(k, "stages.scores.data has 31 values, expected 32");
  k = j;
  k["stages"]["masked"]["data"][1] = "minus infinity";
  expect_corrupt(k, "stages.masked.data[1] is not a number");
  k = j;
  k["tokens"][0].erase("text");
  expect_corrupt(k, "tokens[0]");
  k = j;  // a head listed twice is an error, not a failed check (hostile round H15)
  k["heads"] = json::array({0, 0});
  expect_corrupt(k, "heads lists head 0 twice");
  k = j;
  k["heads"] = {0, 7};
  expect_corrupt(k, "heads lists 7");
  expect_corrupt(json::array({1, 2}), "not a JSON object");
}

TEST(TraceJson, ABrokenTraceFailsTheChecks) {
  Trace t = Toy();
  json j = json::parse(player::TraceToJson(t, {}).value());
  // A future weight that is not zero (row 1 of head 0 reads key 3).
  j["stages"]["weights"]["data"][1 * 4 + 3] = 0.25;
  Result<player::TraceSummary> s = player::ReadTraceJson(j.dump(), "broken");
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->all_pass());
  std::map<std::string, player::CheckState> st;
  for (const auto& c : s->checks) st[c.name] = c.state;
  EXPECT_EQ(st["weights rows sum to 1 (0 for a fully masked row)"], player::CheckState::kFail);
  EXPECT_EQ(st["future weights are zero (causal)"], player::CheckState::kFail);
  EXPECT_EQ(st["masked (-inf) cells have weight exactly 0"], player::CheckState::kFail);
  EXPECT_EQ(st["scaled = scores × scale"], player::CheckState::kPass);
}


// ---------------------------------------------------------------------------
// The page and the exports.
// ---------------------------------------------------------------------------

TEST(TracePage, EmbeddedTemplateIsWebPlayerHtml) {
  // The page is web/player.html with the stage table and the in-page lab
  // inlined (web/embed_player.py): src/player/stage_table.json in place of
  // its marker, web/lab.css in a <style> before </head>, web/lab.js in a
  // <script> before </body>.
  const std::string web = std::string(ATTNFLOW_SOURCE_DIR) + "/web/";
  Result<std::string> file = ReadFileString(web + "player.html");
  Result<std::string> css = ReadFileString(web + "lab.css");
  Result<std::string> js = ReadFileString(web + "lab.js");
  Result<std::string> table =
      ReadFileString(std::string(ATTNFLOW_SOURCE_DIR) + "/src/player/stage_table.json");
  ASSERT_TRUE(file.ok() && css.ok() && js.ok() && table.ok());
  std::string want = file.value();
  const std::string marker = "__ATTNFLOW_STAGE_TABLE__";
  ASSERT_NE(want.find(marker), std::string::npos);
  want.replace(want.find(marker), marker.size(), table.value());
  want.insert(want.find("</head>"), "<style id=\"lab-style\">\n" + css.value() + "</style>\n");
  want.insert(want.rfind("</body>"), "<script id=\"lab-script\">\n" + js.value() + "</script>\n");
  EXPECT_TRUE(want == player::PlayerTemplate())
      << "the page generated at build time (web/embed_player.py) differs from web/player.html + "
         "the stage table + lab";
}

TEST(TracePage, InlinesTheJsonAndCannotBeBrokenOutOf) {
  const std::string evil = R"({"x":"</script><script>alert(1)</script>"})";
  Result<std::string> page = player::RenderPlayerHtml(evil);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->find("alert(1)</script>"), std::string::npos);
  EXPECT_NE(page->find(R"({"x":"\u003c/script>\u003cscript>alert(1)\u003c/script>"})"),
            std::string::npos);
  EXPECT_EQ(page->find("__ATTNFLOW_TRACE_JSON__</script>"), std::string::npos);
  // No external resources.
  for (const char* bad : {"http://", "https://", "src=\"//", "<link "})
    EXPECT_EQ(player::PlayerTemplate().find(bad), std::string::npos) << bad;
}

// The compact page encoding (PageOptions::compact) is lossless: decoding it
// gives the same checks and details (which print the values) as the text
// form, for a full-resolution toy with decode steps (F64 stages) and a
// pooled 600-token toy (float32). Malformed compact entries are kCorrupt.
TEST(TracePage, CompactEncodingReadsBackLikeTheTextForm) {
  for (int64_t tokens : {int64_t{6}, int64_t{600}}) {
    trace::ToyOptions o;
    o.num_tokens = tokens;
    o.decode_steps = tokens < 10 ? 2 : 0;
    Trace t = Toy(o);
    player::PageOptions po;
    const std::string text = player::TraceToJson(t, po).value();
    po.compact = true;
    const std::string packed = player::TraceToJson(t, po).value();
    EXPECT_EQ(packed.find("\"data\":["), std::string::npos);
    EXPECT_NE(packed.find("\"base\":{\"op\":\"scale\""), std::string::npos);
    if (tokens > 256) EXPECT_LT(packed.size() * 2, text.size()) << tokens;  // pooled float32
    Result<player::TraceSummary> a = player::ReadTraceJson(text, "text");
    Result<player::TraceSummary> b = player::ReadTraceJson(packed, "packed");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    ASSERT_EQ(a->checks.size(), b->checks.size());
    for (size_t i = 0; i < a->checks.size(); ++i) {
      EXPECT_EQ(a->checks[i].state, b->checks[i].state) << a->checks[i].name;
      EXPECT_EQ(a->checks[i].detail, b->checks[i].detail) << a->checks[i].name;
    }
    EXPECT_TRUE(b->all_pass());
  }
  player::PageOptions po;
  po.compact = true;
  const std::string packed = player::TraceToJson(Toy(), po).value();
  auto corrupt = [&](const std::string& from, const std::string& to) {
    std::string j = packed;
    const size_t at = j.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) j.replace(at, from.size(), to);
    Result<player::TraceSummary> s = player::ReadTraceJson(j, "bad");
    EXPECT_EQ(s.status().code(), StatusCode::kCorrupt) << from << " -> " << to;
    return s.ok() ? std::string() : s.status().ToString();
  };
  EXPECT_NE(corrupt("\"b64\":\"", "\"b64\":\"!").find("base64"), std::string::npos);
  EXPECT_NE(corrupt("\"op\":\"scale\"", "\"op\":\"cube\"").find("unknown op"), std::string::npos);
  EXPECT_NE(corrupt("\"of\":[\"scores\"]", "\"of\":[\"scaled\"]").find("cycle"), std::string::npos);
  EXPECT_NE(corrupt("\"enc\":\"f64\"", "\"enc\":\"f16\"").find("compact entry"), std::string::npos);
  corrupt("\"segs\":[", "\"segs\":[1,\"x\",");
}

TEST(TraceExport, SafetensorsIsAGoldenCaseWithGoldenStageNames) {
  trace::ToyOptions o;
  o.decode_steps = 1;
  Trace t = Toy(o);
  const std::string path = TempDir() + "/toy.safetensors";
  ASSERT_TRUE(player::WriteTraceSafetensors(path, t).ok());
  Result<GoldenCase> c = LoadGoldenCase(path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  Result<CaseReport> r = VerifyGoldenCase(c.value(), VerifyImpl::kReference);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ok());
  int compared = 0;
  for (const auto& s : r->stages) compared += s.compared;
  EXPECT_EQ(compared, 11);  // every golden mha stage
  Result<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok());
  for (const char* n : {"weights", "block_out", "decode.0.weights", "token_ids"}) EXPECT_TRUE(f->Has(n)) << n;
  EXPECT_EQ(f->Find("weights")->dtype, DType::kF64);  // full precision
  EXPECT_EQ(f->metadata().at("tokens"), R"(["the","cat","sat","down"])");
  Result<Tensor> w = f->Copy("weights");
  EXPECT_EQ(testing::MaxAbsDiff(w->view(), t.Find("weights")->view()), 0.0);
}

TEST(TraceExport, NpyHeaderAndDataRoundTrip) {
  Trace t = Toy();
  Result<std::vector<uint8_t>> b = EncodeNpy(t.Find("weights")->view());
  ASSERT_TRUE(b.ok());
  const std::string s(b->begin(), b->end());
  ASSERT_EQ(s.substr(0, 6), "\x93NUMPY");
  const size_t hl = static_cast<unsigned char>(s[8]) | (static_cast<unsigned char>(s[9]) << 8);
  EXPECT_EQ((10 + hl) % 64, 0u);
  const std::string header = s.substr(10, hl);
  EXPECT_NE(header.find("'descr': '<f8'"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': (1, 2, 4, 4)"), std::string::npos) << header;
  ASSERT_EQ(s.size(), 10 + hl + 32 * 8);
  for (int i = 0; i < 32; ++i) {
    double v;
    std::memcpy(&v, s.data() + 10 + hl + i * 8, 8);
    EXPECT_EQ(v, t.Find("weights")->data<double>()[i]);
  }
  int32_t ids[3] = {1, 2, 3};
  Result<std::vector<uint8_t>> bi = EncodeNpy(MakeView(ids, DType::kI32, {3}));
  EXPECT_NE(std::string(bi->begin(), bi->end()).find("'descr': '<i4', 'fortran_order': False, 'shape': (3,)"), std::string::npos);
  const std::string dir = TempDir() + "/npy";
  std::vector<std::string> files;
  ASSERT_TRUE(player::WriteTraceNpy(dir, t, &files).ok());
  EXPECT_EQ(files.size(), t.stages.size() + 1);
  EXPECT_TRUE(fs::exists(dir + "/masked.npy"));
}

TEST(TraceExport, CsvHasTokenLabelsAndFullPrecision) {
  Trace t = Toy();
  const std::string dir = TempDir() + "/csv";
  std::vector<std::string> files;
  ASSERT_TRUE(player::WriteTraceCsv(dir, t, {}, &files).ok());
  std::ifstream in(dir + "/weights_h1.csv");
  std::string header, row;
  std::getline(in, header);
  EXPECT_EQ(header, "query,0:the,1:cat,2:sat,3:down");
  std::getline(in, row);
  std::getline(in, row);  // query 1
  std::stringstream ss(row);
  std::string cell;
  std::getline(ss, cell, ',');
  EXPECT_EQ(cell, "1:cat");
  for (int64_t j = 0; j < 4; ++j) {
    std::getline(ss, cell, ',');
    EXPECT_EQ(std::strtod(cell.c_str(), nullptr), W(t, "weights", 1, 1, j)) << cell;
  }
  std::ifstream m(dir + "/masked_h0.csv");
  std::getline(m, row);
  std::getline(m, row);
  EXPECT_NE(row.find(",-inf"), std::string::npos) << row;
}

// Independent bitwise CRC-32 (the encoder uses a table).

#ifdef ATTNFLOW_HAVE_ZLIB
// Decodes an 8-bit palette PNG written by WriteTraceHeatmaps (filter 0 rows).
struct Indexed {
  uint32_t w = 0, h = 0;
  size_t palette = 0;
  std::vector<uint8_t> px;
};
Indexed DecodeIndexed(const std::string& s) {
  Indexed r;
  std::string idat;
  for (size_t at = 8; at + 12 <= s.size();) {
    const uint32_t n = Be(s, at);
    const std::string type = s.substr(at + 4, 4), body = s.substr(at + 8, n);
    if (type == "IHDR") {
      r.w = Be(body, 0), r.h = Be(body, 4);
      EXPECT_EQ(body[9], 3) << "colour type: palette";
    }
    if (type == "PLTE") r.palette = body.size() / 3;
    if (type == "IDAT") idat += body;
    at += 12 + n;
  }
  std::string raw(size_t(r.h) * (r.w + 1), '\0');
  uLongf rn = raw.size();
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &rn,
                       reinterpret_cast<const Bytef*>(idat.data()), idat.size()), Z_OK);
  for (uint32_t y = 0; y < r.h; ++y) {
    EXPECT_EQ(raw[y * (r.w + 1)], 0);
    r.px.insert(r.px.end(), raw.begin() + y * (r.w + 1) + 1, raw.begin() + (y + 1) * (r.w + 1));
  }
  return r;
}

// Palette entries of the figure (image.cc): 0..239 scale, 240 white,
// 241/242 hatch, 243 ink (text), 244 ticks.
TEST(TraceExport, PngFigureHasTextColourBarAndHatchedMaskedCells) {
  Trace t = Toy();  // causal: the upper triangle of weights is masked
  const std::string dir = TempDir() + "/pngfig";
  std::vector<std::string> files;
  ASSERT_TRUE(player::WriteTraceHeatmaps(dir, t, {0}, player::ImageFormat::kPng, &files).ok());
  Result<std::string> s = ReadFileString(dir + "/weights_h0.png");
  ASSERT_TRUE(s.ok());
  EXPECT_LT(s->size(), 8000u) << "a 4x4 map was 49 KB with stored deflate";
  Indexed im = DecodeIndexed(*s);
  EXPECT_GE(im.palette, 245u);
  size_t ink = 0, hatch_line = 0, hatch_bg = 0, scale = 0;
  for (uint8_t v : im.px) {
    ink += v == 243;
    hatch_line += v == 242;
    hatch_bg += v == 241;
    scale += v < 240;
  }
  // Text: title, "query", "key", 8 token labels, range numbers: many pixels.
  EXPECT_GT(ink, 600u);
  EXPECT_GT(hatch_line, 20u);
  EXPECT_GT(hatch_bg, 20u);
  EXPECT_GT(scale, 4u * 4u * 16u);
  // The colour bar runs through the whole scale (top = index 239, bottom 0).
  std::set<uint8_t> levels;
  for (uint8_t v : im.px)
    if (v < 240) levels.insert(v);
  EXPECT_TRUE(levels.count(0) && levels.count(239));
}

TEST(TraceExport, Png512TokenMapIsAtMost100KB) {
  trace::ToyOptions o;
  o.num_tokens = 512;
  Trace t = Toy(o);
  const std::string dir = TempDir() + "/png512";
  std::vector<std::string> files;
  ASSERT_TRUE(player::WriteTraceHeatmaps(dir, t, {0}, player::ImageFormat::kPng, &files).ok());
  // The attention-weights map is the target. (The toy's scores are random
  // numbers, i.e. noise at one pixel per cell: ~210 KB; not a target.)
  EXPECT_LE(fs::file_size(dir + "/weights_h0.png"), 100u * 1024u);
  for (const char* f : {"weights_h0.png", "scores_h0.png", "masked_h0.png"})
    std::printf("%s: %zu bytes\n", f, static_cast<size_t>(fs::file_size(dir + "/" + f)));
  Result<std::string> big = ReadFileString(dir + "/weights_h0.png");
  ASSERT_TRUE(big.ok());
  Indexed im = DecodeIndexed(big.value());
  EXPECT_GE(im.w, 512u);  // one pixel per token at least
}
#endif  // ATTNFLOW_HAVE_ZLIB

TEST(TraceExport, SvgHasAxisTitlesAndNumbersInSmallMaps) {
  Trace t = Toy();
  const std::string dir = TempDir() + "/svgfig";
  std::vector<std::string> files;
  ASSERT_TRUE(player::WriteTraceHeatmaps(dir, t, {0}, player::ImageFormat::kSvg, &files).ok());
  Result<std::string> s = ReadFileString(dir + "/weights_h0.svg");
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->find(">query</text>"), std::string::npos);
  EXPECT_NE(s->find(">key</text>"), std::string::npos);
  // Row 0 of a causal map attends only to key 0: weight exactly 1.
  EXPECT_NE(s->find("pointer-events=\"none\">1.00</text>"), std::string::npos);
  // A 40-token map shows no numbers in its cells.
  trace::ToyOptions o;
  o.num_tokens = 40;
  Trace big = Toy(o);
  ASSERT_TRUE(player::WriteTraceHeatmaps(dir + "/big", big, {0}, player::ImageFormat::kSvg, &files).ok());
  Result<std::string> b = ReadFileString(dir + "/big/weights_h0.svg");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->find("pointer-events=\"none\""), std::string::npos);
}

TEST(TraceExport, HeatmapsForEveryHeadAndDecode) {
  trace::ToyOptions o;
  o.decode_steps = 2;
  Trace t = Toy(o);
  const std::string dir = TempDir() + "/img";
  std::vector<std::string> png, svg;
  ASSERT_TRUE(player::WriteTraceHeatmaps(dir, t, {}, player::ImageFormat::kPng, &png).ok());
  ASSERT_TRUE(player::WriteTraceHeatmaps(dir, t, {0}, player::ImageFormat::kSvg, &svg).ok());
  EXPECT_EQ(png.size(), 8u);  // scores masked weights × 2 heads + decode × 2
  EXPECT_EQ(svg.size(), 4u);
  Result<std::string> s = ReadFileString(dir + "/weights_h0.svg");
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->find("url(#masked)"), std::string::npos);
  EXPECT_NE(s->find(">0 the<"), std::string::npos);
}


}  // namespace
}  // namespace attnflow
