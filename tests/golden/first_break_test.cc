// first_break_test.cc — the property the golden method rests on: plant a
// break at any stage of any committed case or dump, and `verify --compare`
// names that stage. A real break propagates, so the planted stage and every
// stage after it in dataflow order are changed; the report must name the
// planted one, not a later one that sorts first by name. A changed input is
// reported as an input (GOT was computed from other inputs), never as a
// stage break.
//
// Cases: every committed golden case (tests/data/golden, sdpa and mha),
// every nn case (tests/data/nn, tests/data/nn_vit: blocks, decoder layers,
// whole Transformers, Transformer-XL segments, ViT), and trace dumps of the
// toy (with decode steps, with padding) read back as safetensors, as a
// directory of .npy files and as a device dump (AFDUMP text written by the
// micro library's dump writer). Expected names come from the planting, not
// from the code under test; the dataflow order comes from each file's own
// `stages` list (or the format's canonical order for sdpa/mha).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "attnflow/golden.h"
#include "attnflow/micro.h"
#include "attnflow/npy.h"
#include "attnflow/player.h"
#include "attnflow/safetensors.h"
#include "attnflow/trace.h"
#include "util/scratch_util.h"

namespace fs = std::filesystem;

namespace attnflow {
namespace {

std::vector<std::string> Files(const std::string& sub) {
  std::vector<std::string> out;
  const fs::path dir = fs::path(ATTNFLOW_SOURCE_DIR) / "tests/data" / sub;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A changed copy of `v` (same dtype and shape): every finite x becomes
// x + 0.5 + |x| / 2 (integers + 1), an infinity becomes 0 — a difference no
// tolerance of a case accepts.
Tensor Changed(const TensorView& v) {
  Shape shape(v.shape.begin(), v.shape.begin() + v.rank);
  Result<Tensor> t = Tensor::Zeros(v.dtype, shape);
  EXPECT_TRUE(t.ok());
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < v.numel(); ++e) {
    const double x = v.load(v.offset(idx[0], idx[1], idx[2], idx[3]));
    double y;
    if (!IsFloat(v.dtype)) y = x + 1;
    else if (std::isfinite(x)) y = x + 0.5 + std::fabs(x) / 2;
    else y = 0;
    t->view().store(e, y);
    for (int d = v.rank - 1; d >= 0; --d) {
      if (++idx[d] < v.shape[d]) break;
      idx[d] = 0;
    }
  }
  return std::move(t).value();
}

// GOT = every tensor of `f` (in the file's order), with `change` applied to
// the names for which it returns true.
struct Planted {
  GotStages got;
  std::vector<std::shared_ptr<Tensor>> owned;
};
template <typename Pred>
Planted Plant(const SafetensorsFile& f, Pred change) {
  Planted p;
  p.got.path = f.path();
  p.got.source = "safetensors";
  p.got.implementation = "planted";
  for (const std::string& n : f.names()) {
    Result<TensorView> v = f.Get(n);
    EXPECT_TRUE(v.ok()) << n;
    NamedTensor t{n, v.value(), Shape(v->shape.begin(), v->shape.begin() + v->rank)};
    if (change(n)) {
      p.owned.push_back(std::make_shared<Tensor>(Changed(v.value())));
      t.view = p.owned.back()->view();
    }
    p.got.stages.push_back(t);
  }
  return p;
}

bool HasElements(const SafetensorsFile& f, const std::string& n) {
  Result<TensorView> v = f.Get(n);
  return v.ok() && v->numel() > 0;
}

// Plants a break at every stage and a change at every input of `f`; returns
// the number of plants (each one asserted).
int PlantEverywhere(const SafetensorsFile& f) {
  Result<StageOrder> order = CaseStageOrder(f);
  EXPECT_TRUE(order.ok()) << order.status().ToString();
  if (!order.ok()) return 0;
  const std::vector<std::string>& st = order->stages;
  int plants = 0;
  {  // the file against itself matches
    Planted p = Plant(f, [](const std::string&) { return false; });
    Result<CaseReport> r = CompareStages(p.got, f, -1, -1);
    EXPECT_TRUE(r.ok() && r->ok()) << f.path();
  }
  for (size_t i = 0; i < st.size(); ++i) {
    if (!f.Has(st[i]) || !HasElements(f, st[i])) continue;
    Planted p = Plant(f, [&](const std::string& n) {
      auto it = std::find(st.begin(), st.end(), n);
      return it != st.end() && static_cast<size_t>(it - st.begin()) >= i;
    });
    Result<CaseReport> r = CompareStages(p.got, f, -1, -1);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) continue;
    const StageReport* bad = r->FirstMismatch();
    EXPECT_NE(bad, nullptr) << f.path() << ": planted at " << st[i];
    if (bad == nullptr) continue;
    EXPECT_EQ(bad->stage, st[i]) << f.path() << " (order from " << order->source << ")";
    EXPECT_FALSE(bad->input) << f.path() << ": " << st[i];
    ++plants;
  }
  for (const std::string& in : order->inputs) {
    if (!HasElements(f, in)) continue;
    Planted p = Plant(f, [&](const std::string& n) { return n == in; });
    Result<CaseReport> r = CompareStages(p.got, f, -1, -1);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) continue;
    const StageReport* bad = r->FirstMismatch();
    EXPECT_TRUE(bad != nullptr && bad->input && bad->stage == in) << f.path() << ": input " << in;
    ++plants;
  }
  return plants;
}

SafetensorsFile Open(const std::string& path) {
  Result<SafetensorsFile> f = SafetensorsFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return std::move(f).value();
}

TEST(FirstBreak, EveryStageOfEveryCommittedAttentionCase) {
  int plants = 0, files = 0;
  for (const std::string& path : Files("golden")) {
    plants += PlantEverywhere(Open(path));
    ++files;
  }
  EXPECT_GE(files, 50);
  EXPECT_GT(plants, 50 * 8);
}

TEST(FirstBreak, EveryStageOfEveryCommittedNnCase) {
  int plants = 0, files = 0;
  for (const char* dir : {"nn", "nn_vit"}) {
    for (const std::string& path : Files(dir)) {
      plants += PlantEverywhere(Open(path));
      ++files;
    }
  }
  EXPECT_GE(files, 40);
  EXPECT_GT(plants, 1000);
}

// The toy's trace dumps: the block around attention (tok_embed, pos, embed
// before q) and decode steps after the prefill are named where they break.
TEST(FirstBreak, EveryStageOfTraceDumps) {
  testing::ScratchDir dir("first_break_trace");
  trace::ToyOptions with_decode;
  with_decode.decode_steps = 3;
  trace::ToyOptions padded;
  padded.pad = 2;
  for (const trace::ToyOptions& o : {with_decode, padded}) {
    Result<trace::Trace> t = trace::TraceToy(o);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const std::string path = dir.P("toy.safetensors");
    ASSERT_TRUE(player::WriteTraceSafetensors(path, t.value()).ok());
    SafetensorsFile f = Open(path);
    Result<StageOrder> order = CaseStageOrder(f);
    ASSERT_TRUE(order.ok());
    // The list is the dataflow: pos before q, every prefill stage before
    // the first decode stage, decode step 0 before step 1.
    auto at = [&](const std::string& n) {
      return std::find(order->stages.begin(), order->stages.end(), n) - order->stages.begin();
    };
    EXPECT_LT(at("pos"), at("q"));
    EXPECT_LT(at("q"), at("scores"));
    EXPECT_LT(at("block_out"), static_cast<ptrdiff_t>(order->stages.size()));
    if (o.decode_steps > 0) {
      EXPECT_LT(at("block_out"), at("decode.0.q"));
      EXPECT_LT(at("decode.0.q"), at("decode.0.heads_out"));
      EXPECT_LT(at("decode.0.heads_out"), at("decode.1.q"));
    }
    EXPECT_NE(std::find(order->inputs.begin(), order->inputs.end(), "token_ids"),
              order->inputs.end());
    EXPECT_GT(PlantEverywhere(f), 20);
  }
}

// GOT read from a directory of .npy files and from a device's AFDUMP log:
// the same break is named (the order is EXPECTED's, whatever GOT's source).
void WriteDump(const std::string& path, const GotStages& g) {
  std::string text;
  auto sink = [](void* ctx, const char* s, size_t n) {
    static_cast<std::string*>(ctx)->append(s, n);
  };
  ASSERT_EQ(af_dump_begin(sink, &text, "planted", "mha", "micro-f32"), AF_OK);
  for (const NamedTensor& t : g.stages) {
    if (!IsFloat(t.view.dtype)) continue;  // a device dumps its float stages as f32
    int32_t dims[8];
    for (int d = 0; d < t.view.rank; ++d) dims[d] = static_cast<int32_t>(t.view.shape[d]);
    ASSERT_EQ(af_dump_tensor(sink, &text, t.name.c_str(), AF_DUMP_F32, t.view.rank, dims), AF_OK);
    std::vector<float> v(static_cast<size_t>(t.view.numel()));
    for (int64_t e = 0; e < t.view.numel(); ++e) v[static_cast<size_t>(e)] = static_cast<float>(t.view.load(e));
    ASSERT_EQ(af_dump_part(sink, &text, t.name.c_str(), AF_DUMP_F32, 0, v.data(),
                           static_cast<uint32_t>(v.size())),
              AF_OK);
  }
  ASSERT_EQ(af_dump_done(sink, &text, "planted"), AF_OK);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
}

TEST(FirstBreak, NpyDirectoryAndDeviceDumpGotNameTheSameStage) {
  testing::ScratchDir dir("first_break_got");
  trace::ToyOptions o;
  o.decode_steps = 2;
  Result<trace::Trace> t = trace::TraceToy(o);
  ASSERT_TRUE(t.ok());
  const std::string path = dir.P("toy.safetensors");
  ASSERT_TRUE(player::WriteTraceSafetensors(path, t.value()).ok());
  SafetensorsFile f = Open(path);
  Result<StageOrder> order = CaseStageOrder(f);
  ASSERT_TRUE(order.ok());
  for (const std::string planted : {"pos", "q", "scores", "norm", "decode.0.q", "decode.1.masked"}) {
    const auto& st = order->stages;
    const size_t i = std::find(st.begin(), st.end(), planted) - st.begin();
    ASSERT_LT(i, st.size()) << planted;
    Planted p = Plant(f, [&](const std::string& n) {
      auto it = std::find(st.begin(), st.end(), n);
      return it != st.end() && static_cast<size_t>(it - st.begin()) >= i;
    });
    const std::string npy = dir.P("npy_" + planted);
    fs::create_directories(npy);
    for (const NamedTensor& n : p.got.stages)
      if (n.view.dtype == DType::kF32 || n.view.dtype == DType::kF64)
        ASSERT_TRUE(WriteNpy(npy + "/" + n.name + ".npy", n.view).ok());
    const std::string log = dir.P("uart_" + planted + ".log");
    WriteDump(log, p.got);
    for (const std::string& src : {npy, log}) {
      Result<GotStages> g = LoadGotStages(src);
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      Result<CaseReport> r = CompareStages(g.value(), f, -1, -1);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      const StageReport* bad = r->FirstMismatch();
      ASSERT_NE(bad, nullptr) << src;
      EXPECT_EQ(bad->stage, planted) << src;
    }
  }
}

// Lists are validated: an empty or repeated name, or an input that is also
// a stage, is a corrupt file.
TEST(FirstBreak, MalformedListsAreRefused) {
  testing::ScratchDir dir("first_break_lists");
  float x[2] = {1, 2};
  const TensorView v = MakeView(x, DType::kF32, {2});
  for (const auto& [stages, inputs] :
       std::vector<std::pair<std::string, std::string>>{{"a,,b", ""}, {"a,b,a", ""}, {"a,b", "a"}}) {
    std::map<std::string, std::string> meta = {{"stages", stages}};
    if (!inputs.empty()) meta["inputs"] = inputs;
    const std::string path = dir.P("bad.safetensors");
    ASSERT_TRUE(WriteSafetensors(path, {{"a", v}, {"b", v}}, meta).ok());
    Result<StageOrder> o = CaseStageOrder(Open(path));
    EXPECT_FALSE(o.ok()) << stages << " / " << inputs;
    if (!o.ok()) EXPECT_EQ(o.status().code(), StatusCode::kCorrupt);
  }
  EXPECT_FALSE(JoinStageList({"a", "b,c"}).ok());
  EXPECT_EQ(JoinStageList({"a", "b"}).value(), "a,b");
}

}  // namespace
}  // namespace attnflow
